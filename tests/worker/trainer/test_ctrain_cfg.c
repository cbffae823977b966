/*
 * test_ctrain_cfg.c - worker/trainer/ctrain_cfg.c and the model configuration helpers: the defaults
 * (TiSASRec.pytorch's for the default TiSASRec + mHC, SASRec.pytorch's for --no_time --no_mhc),
 * the model flags and their conflicts, the flag spellings, standalone booleans, cross-flag
 * checks, args.json, the learning rate schedule (warmup, constant / linear / cosine, lr_scale)
 * at chosen steps, the model configuration's JSON round trip and difference report, and
 * --min_count (the data loader's count filter, through ctrain_train_load_data), and the
 * language-model family's flags (--model lm, --lm_dir, --eval_dataset, --save_hf, --freeze).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_test.h"
#include "ctrain_cfg.h"
#include "ctrain_train_internal.h"

static int parse(ctrain_cfg_t *c, ct_errbuf_t *eb, const char *const *args, int n)
{
    char *argv[32] = {"ctrain"};
    for (int i = 0; i < n; i++)
        argv[i + 1] = (char *)args[i];
    ctrain_cfg_default(c);
    ctrain_args_action_t action;
    return ctrain_args_parse(c, n + 1, argv, &action, eb);
}

static void test_defaults(void)
{
    ctrain_cfg_t c;
    ct_errbuf_t eb;
    ctrain_cfg_default(&c);
    /* the default model, TiSASRec + mHC: TiSASRec.pytorch's main.py, mHC on pre_ln */
    CT_ASSERT(c.model == CTRAIN_MODEL_TISASREC && c.mhc && c.layout == CTRAIN_LAYOUT_PRE_LN);
    CT_ASSERT_EQ(c.batch_size, 128);
    CT_ASSERT(c.lr == 0.001);
    CT_ASSERT_EQ(c.maxlen, 50);
    CT_ASSERT_EQ(c.hidden_units, 50);
    CT_ASSERT_EQ(c.num_blocks, 2);
    CT_ASSERT_EQ(c.num_epochs, 201);
    CT_ASSERT_EQ(c.num_heads, 1);
    CT_ASSERT(c.dropout_rate == 0.2);
    CT_ASSERT(c.l2_emb == 5e-5);
    CT_ASSERT_EQ(c.time_span, 256);
    CT_ASSERT(c.loss == CTRAIN_LOSS_BCE && c.num_negatives == 256);
    CT_ASSERT_EQ(c.eval_every, 20);
    CT_ASSERT_EQ(c.threads, 1);
    ctrain_model_cfg_t m = ctrain_train_model_cfg(&c, 100);
    CT_ASSERT(m.kind == CTRAIN_MODEL_TISASREC && m.mhc_streams == 4 && m.time_span == 256);
    CT_ASSERT_OK(ctrain_model_cfg_check(&m, &eb));

    /* --no_time --no_mhc: SASRec.pytorch HEAD's python/main.py */
    const char *a[] = {"--no_time", "--no_mhc"};
    CT_ASSERT_OK(parse(&c, &eb, a, 2));
    CT_ASSERT(c.model == CTRAIN_MODEL_SASREC && !c.mhc);
    CT_ASSERT_EQ(c.maxlen, 200);
    CT_ASSERT_EQ(c.num_epochs, 1000);
    CT_ASSERT(c.l2_emb == 0.0);
    CT_ASSERT(!c.norm_first && c.layout == CTRAIN_LAYOUT_POST_LN);
    m = ctrain_train_model_cfg(&c, 100);
    CT_ASSERT(m.kind == CTRAIN_MODEL_SASREC && m.mhc_streams == 0 && m.time_span == 0);
    /* the explicit spellings mean the same */
    const char *b[] = {"--model", "sasrec", "--mhc", "false"};
    ctrain_cfg_t d;
    CT_ASSERT_OK(parse(&d, &eb, b, 4));
    CT_ASSERT(d.model == c.model && d.mhc == c.mhc && d.layout == c.layout && d.maxlen == c.maxlen);
    /* the other two variants */
    const char *e[] = {"--no_mhc"};
    CT_ASSERT_OK(parse(&c, &eb, e, 1));
    CT_ASSERT(c.model == CTRAIN_MODEL_TISASREC && !c.mhc && c.layout == CTRAIN_LAYOUT_ORIGINAL2020);
    CT_ASSERT_EQ(c.maxlen, 50);
    const char *f[] = {"--no_time", "--maxlen", "30", "--l2_emb", "0.5"};
    CT_ASSERT_OK(parse(&c, &eb, f, 5));
    CT_ASSERT(c.model == CTRAIN_MODEL_SASREC && c.mhc && c.layout == CTRAIN_LAYOUT_PRE_LN);
    CT_ASSERT(c.maxlen == 30 && c.l2_emb == 0.5 && c.num_epochs == 1000);
}

/* Model flags that contradict each other or the model: one line naming the flag. */
static void test_model_flags(void)
{
    ctrain_cfg_t c;
    ct_errbuf_t eb;
    static const struct {
        const char *args[4];
        int n;
        const char *msg;
    } bad[] = {
        {{"--no_time", "--model", "tisasrec"}, 3, "--no_time: conflicts with --model tisasrec"},
        {{"--mhc", "--no_mhc"}, 2, "--no_mhc: conflicts with --mhc"},
        {{"--layout", "post_ln"}, 2, "--layout: post_ln conflicts with mHC"},
        {{"--no_mhc", "--layout", "post_ln"}, 3, "--layout: TiSASRec runs original2020"},
        {{"--no_time", "--time_span", "9"}, 3, "--time_span: SASRec has no time intervals"},
        {{"--num_negatives", "9"}, 2, "--num_negatives: only --loss sampled_ce"},
        {{"--model", "bert4rec"}, 2, "--model: \"bert4rec\" is not a model"},
        {{"--loss", "bpr"}, 2, "--loss: \"bpr\" is not a loss"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = parse(&c, &eb, bad[i].args, bad[i].n);
        CT_ASSERT_MSG(rc != 0, "case %zu accepted", i);
        CT_ASSERT_STR_CONTAINS(eb.msg, bad[i].msg);
    }
    const char *ok1[] = {"--mhc", "false", "--no_mhc"};
    CT_ASSERT_OK(parse(&c, &eb, ok1, 3));
    CT_ASSERT(!c.mhc);
    const char *ok2[] = {"--no_time", "--no_mhc",   "--layout",        "original",
                         "--loss",    "sampled_ce", "--num_negatives", "100"};
    CT_ASSERT_OK(parse(&c, &eb, ok2, 8));
    CT_ASSERT(c.layout == CTRAIN_LAYOUT_ORIGINAL && c.loss == CTRAIN_LOSS_SAMPLED_CE);
    ctrain_model_cfg_t m = ctrain_train_model_cfg(&c, 100);
    CT_ASSERT(m.loss == CTRAIN_LOSS_SAMPLED_CE && m.num_negatives == 100);
    const char *ok3[] = {"--norm_first", "--time_span", "64", "--loss", "ce"};
    CT_ASSERT_OK(parse(&c, &eb, ok3, 5));
    CT_ASSERT(c.mhc && c.layout == CTRAIN_LAYOUT_PRE_LN && c.time_span == 64 &&
              c.loss == CTRAIN_LOSS_CE);
    /* inference leaves the model to the checkpoint: no layout is forced */
    const char *ok4[] = {"--inference_only", "--state_dict_path", "/dev/null", "--layout",
                         "post_ln"};
    CT_ASSERT_OK(parse(&c, &eb, ok4, 5));
}

static void test_spellings(void)
{
    ctrain_cfg_t c;
    ct_errbuf_t eb;
    const char *a[] = {"--batch-size",        "64",       "--hidden_units=32", "--norm-first",
                       "--num_heads",         "4",        "--inference_only",  "false",
                       "--skip_invalid_loss", "--seed=9", "--no-time",         "--no-mhc"};
    CT_ASSERT_OK(parse(&c, &eb, a, 12));
    CT_ASSERT_EQ(c.batch_size, 64);
    CT_ASSERT_EQ(c.hidden_units, 32);
    CT_ASSERT(c.norm_first && c.layout == CTRAIN_LAYOUT_PRE_LN);
    CT_ASSERT_EQ(c.num_heads, 4);
    CT_ASSERT(!c.inference_only);
    CT_ASSERT(c.skip_invalid_loss);
    CT_ASSERT_EQ(c.seed, 9);
    CT_ASSERT(c.set_hidden && c.set_heads && !c.set_maxlen && !c.set_blocks);

    const char *b[] = {"--layout", "original", "--norm_first", "false", "--no_time", "--no_mhc"};
    CT_ASSERT_OK(parse(&c, &eb, b, 6));
    CT_ASSERT(c.layout == CTRAIN_LAYOUT_ORIGINAL);
    const char *d[] = {"--layout", "original", "--norm_first", "--no_time", "--no_mhc"};
    CT_ASSERT_ERR(parse(&c, &eb, d, 5), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "--norm_first");
    const char *e[] = {"--batch_size", "9999999999"};
    CT_ASSERT_ERR(parse(&c, &eb, e, 2), CT_ERANGE_VALUE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "--batch_size: ");
    const char *g[] = {"--backend", "gloo"};
    CT_ASSERT_OK(parse(&c, &eb, g, 2));
    CT_ASSERT_STR_EQ(c.backend, "ring");

    /* args.json holds every setting */
    json_t *j = ctrain_cfg_to_json(&c);
    const char *keys[] = {"dataset",
                          "train_dir",
                          "batch_size",
                          "lr",
                          "maxlen",
                          "hidden_units",
                          "num_blocks",
                          "num_epochs",
                          "num_heads",
                          "dropout_rate",
                          "l2_emb",
                          "device",
                          "inference_only",
                          "state_dict_path",
                          "norm_first",
                          "layout",
                          "data_format",
                          "min_count",
                          "seed",
                          "eval_every",
                          "eval",
                          "backend",
                          "num_workers",
                          "ckpt_every_steps",
                          "keep_checkpoints",
                          "resume",
                          "grad_clip",
                          "warmup_steps",
                          "lr_schedule",
                          "grad_accum",
                          "lr_scale",
                          "base_batch_size",
                          "skip_invalid_loss",
                          "threads",
                          "model",
                          "mhc",
                          "mhc_streams",
                          "time_span",
                          "loss",
                          "num_negatives",
                          "use_amp",
                          "collective_timeout",
                          "overlap_reduction"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        CT_ASSERT_MSG(json_object_get(j, keys[i]) != NULL, "args.json lacks %s", keys[i]);
    CT_ASSERT_EQ(json_object_size(j), sizeof keys / sizeof keys[0]);
    json_decref(j);
}

static void test_lr_schedule(void)
{
    ctrain_cfg_t c;
    ctrain_cfg_default(&c);
    c.lr = 0.01;
    CT_ASSERT(ctrain_train_lr_at(&c, 0, 100) == 0.01);
    CT_ASSERT(ctrain_train_lr_at(&c, 99, 100) == 0.01);
    c.warmup_steps = 4;
    CT_ASSERT_CLOSE(ctrain_train_lr_at(&c, 0, 100), 0.0025, 1e-15, 0);
    CT_ASSERT_CLOSE(ctrain_train_lr_at(&c, 2, 100), 0.0075, 1e-15, 0);
    CT_ASSERT_CLOSE(ctrain_train_lr_at(&c, 3, 100), 0.01, 1e-15, 0);
    CT_ASSERT_CLOSE(ctrain_train_lr_at(&c, 50, 100), 0.01, 1e-15, 0);
    c.lr_schedule = CTRAIN_LR_LINEAR;
    /* decay over steps 4..104: half way at 54, zero at 104 */
    CT_ASSERT_CLOSE(ctrain_train_lr_at(&c, 4, 104), 0.01, 1e-15, 0);
    CT_ASSERT_CLOSE(ctrain_train_lr_at(&c, 54, 104), 0.005, 1e-15, 0);
    CT_ASSERT_CLOSE(ctrain_train_lr_at(&c, 104, 104), 0.0, 1e-15, 0);
    c.lr_schedule = CTRAIN_LR_COSINE;
    CT_ASSERT_CLOSE(ctrain_train_lr_at(&c, 4, 104), 0.01, 1e-15, 0);
    CT_ASSERT_CLOSE(ctrain_train_lr_at(&c, 54, 104), 0.005, 1e-15, 0);
    CT_ASSERT_CLOSE(ctrain_train_lr_at(&c, 29, 104), 0.005 * (1 + cos(M_PI / 4)), 1e-15, 0);
    CT_ASSERT_CLOSE(ctrain_train_lr_at(&c, 104, 104), 0.0, 1e-15, 0);
    /* lr_scale is relative to the optimizer batch, batch_size * grad_accum */
    c.warmup_steps = 0;
    c.lr_schedule = CTRAIN_LR_CONSTANT;
    c.batch_size = 256, c.grad_accum = 2, c.base_batch_size = 128;
    c.lr_scale = CTRAIN_LR_SCALE_LINEAR;
    CT_ASSERT_CLOSE(ctrain_train_lr_at(&c, 7, 100), 0.04, 1e-15, 0);
    c.lr_scale = CTRAIN_LR_SCALE_SQRT;
    CT_ASSERT_CLOSE(ctrain_train_lr_at(&c, 7, 100), 0.02, 1e-15, 0);
}

static void test_model_cfg(void)
{
    ctrain_model_cfg_t a = {.kind = CTRAIN_MODEL_SASREC,
                            .layout = CTRAIN_LAYOUT_ORIGINAL2020,
                            .num_items = 3416,
                            .maxlen = 200,
                            .hidden = 50,
                            .num_heads = 1,
                            .num_blocks = 2,
                            .dropout = 0.2f};
    json_t *j = ctrain_model_cfg_to_json(&a);
    ctrain_model_cfg_t b = {0};
    ct_errbuf_t eb;
    CT_ASSERT_OK(ctrain_model_cfg_from_json(j, &b, &eb));
    json_decref(j);
    char what[128];
    CT_ASSERT(ctrain_model_cfg_diff(&a, &b, what, sizeof what) == NULL);
    CT_ASSERT(b.dropout == a.dropout && b.layout == a.layout);
    CT_ASSERT_EQ(ctrain_model_pos_rows(&b), 200);
    b.layout = CTRAIN_LAYOUT_ORIGINAL;
    CT_ASSERT_EQ(ctrain_model_pos_rows(&b), 201);
    CT_ASSERT_STR_EQ(ctrain_model_cfg_diff(&a, &b, what, sizeof what), "layout");
    CT_ASSERT_STR_EQ(what, "layout: original2020 vs original");
    b = a;
    b.num_heads = 2;
    CT_ASSERT_STR_EQ(ctrain_model_cfg_diff(&a, &b, what, sizeof what), "num_heads");
    b = a;
    b.dropout = 0.5f; /* a training detail, not the model's shape */
    CT_ASSERT(ctrain_model_cfg_diff(&a, &b, what, sizeof what) == NULL);
    j = json_pack("{s:s}", "kind", "sasrec");
    CT_ASSERT_ERR(ctrain_model_cfg_from_json(j, &b, &eb), CT_EFORMAT);
    json_decref(j);
    a.num_heads = 3;
    CT_ASSERT_ERR(ctrain_model_cfg_check(&a, &eb), -EINVAL);
    CT_ASSERT_STR_CONTAINS(eb.msg, "num_heads 3 does not divide hidden_units 50");

    /* TiSASRec + mHC round trip; kind, streams and time_span count as the model's shape */
    ctrain_model_cfg_t t = {.kind = CTRAIN_MODEL_TISASREC,
                            .layout = CTRAIN_LAYOUT_PRE_LN,
                            .num_items = 1682,
                            .maxlen = 50,
                            .hidden = 50,
                            .num_heads = 1,
                            .num_blocks = 2,
                            .mhc_streams = 4,
                            .time_span = 256,
                            .dropout = 0.2f,
                            .loss = CTRAIN_LOSS_CE};
    CT_ASSERT_OK(ctrain_model_cfg_check(&t, &eb));
    j = ctrain_model_cfg_to_json(&t);
    ctrain_model_cfg_t u = {.loss = CTRAIN_LOSS_SAMPLED_CE, .num_negatives = 7};
    CT_ASSERT_OK(ctrain_model_cfg_from_json(j, &u, &eb));
    json_decref(j);
    CT_ASSERT(ctrain_model_cfg_diff(&t, &u, what, sizeof what) == NULL);
    CT_ASSERT(u.kind == CTRAIN_MODEL_TISASREC && u.mhc_streams == 4 && u.time_span == 256);
    CT_ASSERT(u.loss == CTRAIN_LOSS_SAMPLED_CE && u.num_negatives == 7); /* the caller's, kept */
    u.mhc_streams = 0;
    CT_ASSERT_STR_EQ(ctrain_model_cfg_diff(&t, &u, what, sizeof what), "mhc_streams");
    u = t, u.time_span = 100;
    CT_ASSERT_STR_EQ(ctrain_model_cfg_diff(&t, &u, what, sizeof what), "time_span");
    u = t, u.kind = CTRAIN_MODEL_SASREC;
    CT_ASSERT_STR_EQ(ctrain_model_cfg_diff(&t, &u, what, sizeof what), "kind");
    CT_ASSERT_STR_EQ(what, "kind: tisasrec vs sasrec");
    u = t, u.loss = CTRAIN_LOSS_BCE;
    CT_ASSERT(ctrain_model_cfg_diff(&t, &u, what, sizeof what) == NULL);
    /* a checkpoint written before mHC and TiSASRec existed */
    j = json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:f}", "kind", "sasrec", "layout", "post_ln",
                  "num_items", 30, "maxlen", 7, "hidden_units", 16, "num_heads", 2, "num_blocks", 2,
                  "dropout_rate", 0.2);
    CT_ASSERT_OK(ctrain_model_cfg_from_json(j, &u, &eb));
    json_decref(j);
    CT_ASSERT(u.kind == CTRAIN_MODEL_SASREC && u.mhc_streams == 0 && u.time_span == 0);
    /* the combinations the models do not have */
    u = t, u.layout = CTRAIN_LAYOUT_POST_LN;
    CT_ASSERT_ERR(ctrain_model_cfg_check(&u, &eb), -EINVAL);
    CT_ASSERT_STR_CONTAINS(eb.msg, "mHC wraps the sub-layers of the pre_ln layout");
    u = t, u.mhc_streams = 0, u.layout = CTRAIN_LAYOUT_ORIGINAL;
    CT_ASSERT_ERR(ctrain_model_cfg_check(&u, &eb), -EINVAL);
    CT_ASSERT_STR_CONTAINS(eb.msg, "TiSASRec runs");
    u = t, u.mhc_streams = 1;
    CT_ASSERT_ERR(ctrain_model_cfg_check(&u, &eb), -EINVAL);
    u = t, u.time_span = 0;
    CT_ASSERT_ERR(ctrain_model_cfg_check(&u, &eb), -EINVAL);
    u = t, u.loss = CTRAIN_LOSS_SAMPLED_CE, u.num_negatives = 0;
    CT_ASSERT_ERR(ctrain_model_cfg_check(&u, &eb), -EINVAL);
    CT_ASSERT(ctrain_model_l2_mode(&t) == CT_L2_NORM && ctrain_model_l2_mode(&a) == CT_L2_SQUARED);
    CT_ASSERT_STR_EQ(ctrain_model_title(&t), "TiSASRec+mHC");
}

/* Writes text to a new temporary file; its name goes to path. */
static void write_temp(char *path, size_t size, const char *text)
{
    snprintf(path, size, "/tmp/ct_min_count_XXXXXX");
    int fd = mkstemp(path);
    CT_ASSERT_MSG(fd >= 0, "mkstemp: %s", strerror(errno));
    size_t n = strlen(text);
    CT_ASSERT_EQ((size_t)write(fd, text, n), n);
    close(fd);
}

/* --min_count: the tsv/ml1m count filter made explicit. Five users rate items 10..14 (5 rows
 * each); user 1 also rates item 99 once. The default (5, TiSASRec's) drops item 99; 1 keeps it;
 * 6 leaves nothing. A sasrec file is never filtered, so the flag is refused with one (given as
 * such, or detected at load) and with the synthetic data. */
static void test_lm_flags(void)
{
    char txt[64];
    write_temp(txt, sizeof txt, "one line\nanother line\n");
    const char *dir = ct_test_tmpdir("ct_cfg_lm_");
    ctrain_cfg_t c;
    ct_errbuf_t eb;
    const char *ok[] = {"--model", "lm", "--lm_dir", dir, "--dataset", txt, "--freeze", "a.,b."};
    CT_ASSERT_OK(parse(&c, &eb, ok, 8));
    CT_ASSERT(c.model == CTRAIN_MODEL_LM && !c.mhc && strcmp(c.freeze, "a.,b.") == 0);
    CT_ASSERT_EQ(c.num_epochs, 1);
    json_t *j = ctrain_cfg_to_json(&c);
    CT_ASSERT_STR_EQ(json_string_value(json_object_get(j, "lm_dir")), dir);
    CT_ASSERT(json_object_get(j, "save_hf") == NULL);
    json_decref(j);
    /* --inference_only evaluates --lm_dir's weights: no --state_dict_path needed */
    const char *infer[] = {"--model", "lm", "--lm_dir", dir, "--dataset", txt, "--inference_only"};
    CT_ASSERT_OK(parse(&c, &eb, infer, 7));

    const char *no_dir[] = {"--model", "lm", "--dataset", txt};
    CT_ASSERT_ERR(parse(&c, &eb, no_dir, 4), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "--model lm: needs --lm_dir");
    const char *not_dir[] = {"--model", "lm", "--lm_dir", txt, "--dataset", txt};
    CT_ASSERT_ERR(parse(&c, &eb, not_dir, 6), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "is not a folder");
    const char *rec[] = {"--no_time", "--no_mhc", "--lm_dir", dir};
    CT_ASSERT_ERR(parse(&c, &eb, rec, 4), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "--lm_dir: only --model lm takes it");
    const char *gc[] = {"--model", "lm", "--lm_dir", dir, "--dataset", txt, "--grad_checkpointing"};
    CT_ASSERT_OK(parse(&c, &eb, gc, 7));
    CT_ASSERT(c.grad_checkpointing);
    const char *gc_rec[] = {"--no_time", "--no_mhc", "--grad_checkpointing"};
    CT_ASSERT_ERR(parse(&c, &eb, gc_rec, 3), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "--grad_checkpointing: only --model lm takes it");
    const char *frz[] = {"--freeze", "x."};
    CT_ASSERT_ERR(parse(&c, &eb, frz, 2), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "--freeze: only --model lm");
    const char *synth[] = {"--model", "lm", "--lm_dir", dir};
    CT_ASSERT_ERR(parse(&c, &eb, synth, 4), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "reads a text file");
    const char *mhc[] = {"--model", "lm", "--lm_dir", dir, "--dataset", txt, "--mhc"};
    CT_ASSERT_ERR(parse(&c, &eb, mhc, 7), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "--mhc: LM has no mHC");
    const char *save[] = {"--model",          "lm",        "--lm_dir", dir, "--dataset", txt,
                          "--inference_only", "--save_hf", dir};
    CT_ASSERT_ERR(parse(&c, &eb, save, 9), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "--save_hf: --inference_only trains nothing");
    unlink(txt);
}

static void test_min_count(void)
{
    char tsv[64], sas[64], text[1024] = "";
    for (int u = 1; u <= 5; u++)
        for (int i = 10; i <= 14; i++)
            snprintf(text + strlen(text), sizeof text - strlen(text), "%d\t%d\t5\t%d\n", u, i,
                     100 * u + i);
    strcat(text, "1\t99\t3\t2000\n");
    write_temp(tsv, sizeof tsv, text);
    write_temp(sas, sizeof sas, "1 1\n1 2\n1 3\n1 4\n2 2\n2 1\n2 3\n2 4\n");

    ctrain_cfg_t c;
    ct_errbuf_t eb;
    ctrain_dataset_t ds;
    const char *dflt[] = {"--dataset", tsv, "--no_time", "--no_mhc"};
    CT_ASSERT_OK(parse(&c, &eb, dflt, 4));
    CT_ASSERT(c.min_count == 5 && !c.set_min_count);
    CT_ASSERT_OK(ctrain_train_load_data(&c, &ds, &eb));
    CT_ASSERT_EQ(ds.num_items, 5);
    CT_ASSERT_EQ(ds.num_interactions, 25);
    ctrain_data_free(&ds);

    const char *one[] = {"--dataset", tsv, "--no_time", "--no_mhc", "--min_count", "1"};
    CT_ASSERT_OK(parse(&c, &eb, one, 6));
    CT_ASSERT(c.min_count == 1 && c.set_min_count);
    CT_ASSERT_OK(ctrain_train_load_data(&c, &ds, &eb));
    CT_ASSERT_EQ(ds.num_items, 6);
    CT_ASSERT_EQ(ds.num_interactions, 26);
    json_t *j = ctrain_cfg_to_json(&c);
    CT_ASSERT_EQ(json_integer_value(json_object_get(j, "min_count")), 1);
    json_decref(j);
    ctrain_data_free(&ds);

    const char *six[] = {"--dataset", tsv, "--no_time", "--no_mhc", "--min-count=6"};
    CT_ASSERT_OK(parse(&c, &eb, six, 5));
    CT_ASSERT(ctrain_train_load_data(&c, &ds, &eb) != 0);
    CT_ASSERT_STR_CONTAINS(eb.msg, "fewer than 6 rows");

    /* a sasrec file: refused when detected at load, and at parse time when named */
    const char *sauto[] = {"--dataset", sas, "--no_time", "--no_mhc", "--min_count", "2"};
    CT_ASSERT_OK(parse(&c, &eb, sauto, 6));
    CT_ASSERT_ERR(ctrain_train_load_data(&c, &ds, &eb), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "--min_count: ");
    CT_ASSERT_STR_CONTAINS(eb.msg, "is a sasrec file");
    const char *splain[] = {"--dataset", sas, "--no_time", "--no_mhc"};
    CT_ASSERT_OK(parse(&c, &eb, splain, 4));
    CT_ASSERT_OK(ctrain_train_load_data(&c, &ds, &eb));
    CT_ASSERT_EQ(ds.num_items, 4);
    ctrain_data_free(&ds);
    const char *snamed[] = {"--dataset", sas, "--data_format", "sasrec", "--min_count", "2"};
    CT_ASSERT_ERR(parse(&c, &eb, snamed, 6), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "--min_count: a sasrec file is used as it is");
    const char *synth[] = {"--min_count", "2"};
    CT_ASSERT_ERR(parse(&c, &eb, synth, 2), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "--min_count: the synthetic dataset");
    const char *zero[] = {"--dataset", tsv, "--min_count", "0"};
    CT_ASSERT_ERR(parse(&c, &eb, zero, 4), CT_ERANGE_VALUE);
    unlink(tsv);
    unlink(sas);
}

/* --model temporal: the reference's defaults, --config's YAML keys under the flags that override
 * them, one-line errors naming a bad key, and the cosine schedule's floor. */
static void test_temporal_flags(void)
{
    const char *dir = ct_test_tmpdir("ct_cfg_temporal_");
    char yml[64], bad[64], wrong[64], deep[64], two[64];
    write_temp(yml, sizeof yml,
               "data:\n  cache_dir: null\n  batch_size: 8\n  pin_memory: true\n"
               "model:\n  d_model: 32\n  num_heads: 2\n  patch_len: 8\n  dropout: 0.0\n"
               "lm:\n  path: null\n  prompt: \"Describe the curve:\"\n"
               "training:\n  reconstruct_epochs: 2\n  learning_rate: 2e-3\n  fp16: false\n");
    write_temp(bad, sizeof bad, "model:\n  d_modle: 32\n");
    write_temp(wrong, sizeof wrong, "training:\n  warmup_steps: 1.5\n");
    write_temp(deep, sizeof deep, "training:\n  seed: [1, 2]\n");
    char lm_yml[160];
    snprintf(lm_yml, sizeof lm_yml,
             "lm:\n  path: %s\n  max_text_tokens: 30\n"
             "training:\n  num_epochs: 5\n  reconstruct_epochs: 2\n",
             dir);
    write_temp(two, sizeof two, lm_yml);
    ctrain_cfg_t c;
    ct_errbuf_t eb;
    const char *dflt[] = {"--model", "temporal", "--dataset", dir};
    CT_ASSERT_OK(parse(&c, &eb, dflt, 4));
    CT_ASSERT(c.hidden_units == 128 && c.num_heads == 4 && c.num_blocks == 3 && c.ff_dim == 256);
    CT_ASSERT(c.patch_len == 16 && c.mask_ratio == 0.4 && c.val_fraction == 0.1);
    CT_ASSERT(c.lr == 3e-4 && c.weight_decay == 0.01 && c.warmup_steps == 100);
    CT_ASSERT(c.grad_clip == 1.0 && c.lr_schedule == CTRAIN_LR_COSINE && c.lr_floor == 0.05);
    CT_ASSERT(c.batch_size == 16 && c.num_epochs == 3 && c.dropout_rate == 0.1 && !c.mhc);
    CT_ASSERT_EQ(c.eval_every, 1); /* the reference evaluates after every epoch */
    const char *ev[] = {"--model", "temporal", "--dataset", dir, "--eval_every", "4"};
    CT_ASSERT_OK(parse(&c, &eb, ev, 6));
    CT_ASSERT_EQ(c.eval_every, 4);
    CT_ASSERT_OK(parse(&c, &eb, dflt, 4));
    /* warm-up 100 of 1000 steps, then cosine down to 5 % of lr */
    CT_ASSERT(fabs(ctrain_train_lr_at(&c, 999, 1000) - 3e-4 * 0.05) < 1e-9);
    CT_ASSERT(fabs(ctrain_train_lr_at(&c, 99, 1000) - 3e-4) < 1e-12);

    const char *cfg[] = {"--model",  "temporal", "--dataset",   dir,
                         "--config", yml,        "--num_heads", "4"};
    CT_ASSERT_OK(parse(&c, &eb, cfg, 8));
    CT_ASSERT(c.hidden_units == 32 && c.num_heads == 4 && c.patch_len == 8);
    CT_ASSERT(c.dropout_rate == 0.0 && c.lr == 2e-3 && c.num_epochs == 2 && c.batch_size == 8);
    CT_ASSERT(c.warmup_steps == 100); /* not in the file: the reference's default */
    json_t *j = ctrain_cfg_to_json(&c);
    CT_ASSERT_STR_EQ(json_string_value(json_object_get(j, "config")), yml);
    CT_ASSERT(json_integer_value(json_object_get(j, "patch_len")) == 8);
    CT_ASSERT(json_real_value(json_object_get(j, "lr_floor")) == 0.05);
    json_decref(j);

    const char *unk[] = {"--model", "temporal", "--dataset", dir, "--config", bad};
    CT_ASSERT_ERR(parse(&c, &eb, unk, 6), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "unknown key model.d_modle");
    char eqarg[96];
    snprintf(eqarg, sizeof eqarg, "--config=%s", wrong);
    const char *typ[] = {"--model", "temporal", "--dataset", dir, eqarg};
    CT_ASSERT_ERR(parse(&c, &eb, typ, 5), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "training.warmup_steps = 1.5 is not an integer");
    const char *lst[] = {"--model", "temporal", "--dataset", dir, "--config", deep};
    CT_ASSERT_ERR(parse(&c, &eb, lst, 6), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "training.seed = a list or mapping is not an integer");
    const char *other[] = {"--config", yml, "--no_time", "--no_mhc"};
    CT_ASSERT_ERR(parse(&c, &eb, other, 4), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "--config: only --model temporal takes it");
    /* training.fp16: bf16 autocast where a GPU trains (ctrain_train_backend), float32 else */
    CT_ASSERT(!c.yaml_fp16);
    char fp16_yml[64];
    write_temp(fp16_yml, sizeof fp16_yml, "training:\n  fp16: true\n");
    const char *fp16[] = {"--model", "temporal", "--dataset", dir, "--config", fp16_yml};
    CT_ASSERT_OK(parse(&c, &eb, fp16, 6));
    CT_ASSERT(c.yaml_fp16 && !c.use_amp);
    /* without --dataset: generated at start, data.num_samples / seq_len / seed or the flags */
    const char *fly[] = {"--model", "temporal"};
    CT_ASSERT_OK(parse(&c, &eb, fly, 2));
    CT_ASSERT(c.num_samples == 4096 && c.seq_len == 256 && c.data_seed == 0);
    char fly_yml[64];
    write_temp(fly_yml, sizeof fly_yml,
               "data:\n  cache_dir: null\n  num_samples: 300\n  seq_len: 64\n  seed: 9\n");
    const char *fly_cfg[] = {"--model", "temporal", "--config", fly_yml, "--seq_len", "32"};
    CT_ASSERT_OK(parse(&c, &eb, fly_cfg, 6));
    CT_ASSERT(c.num_samples == 300 && c.seq_len == 32 && c.data_seed == 9);
    CT_ASSERT_STR_EQ(c.dataset, "synthetic");
    /* train.log: output.log_dir and training.log_interval; the reference's interval by default;
     * other models refuse the flags */
    CT_ASSERT(c.log_interval == 50 && c.log_dir[0] == '\0');
    char log_yml[64];
    write_temp(log_yml, sizeof log_yml,
               "output:\n  log_dir: /tmp/some_logs\ntraining:\n  log_interval: 7\n");
    const char *log_cfg[] = {"--model", "temporal", "--config", log_yml};
    CT_ASSERT_OK(parse(&c, &eb, log_cfg, 4));
    CT_ASSERT(c.log_interval == 7);
    CT_ASSERT_STR_EQ(c.log_dir, "/tmp/some_logs");
    const char *log_other[] = {"--log_dir", "/tmp/x"};
    CT_ASSERT_ERR(parse(&c, &eb, log_other, 2), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "--log_dir: only --model temporal takes it");
    const char *every_other[] = {"--log_interval", "5"};
    CT_ASSERT_ERR(parse(&c, &eb, every_other, 2), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "--log_interval: only --model temporal takes it");
    const char *synth[] = {"--model", "temporal", "--dataset", "synthetic:users=3"};
    CT_ASSERT_ERR(parse(&c, &eb, synth, 4), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "reads a curve cache folder");
    /* without --lm_dir: the tiny random Qwen2 of lm.* (the reference's defaults, the flags,
     * --config's keys) */
    const char *align[] = {"--model", "temporal", "--dataset", dir, "--stage", "align"};
    CT_ASSERT_OK(parse(&c, &eb, align, 6));
    CT_ASSERT(c.lm_hidden_size == 128 && c.lm_num_layers == 2 && c.lm_num_heads == 4);
    CT_ASSERT(c.lm_num_kv_heads == 2 && c.lm_intermediate_size == 256 && c.lm_seed == 1234);
    CT_ASSERT_EQ(c.lm_pretrain_steps, 300);
    j = ctrain_cfg_to_json(&c);
    CT_ASSERT(json_integer_value(json_object_get(j, "lm_pretrain_steps")) == 300);
    json_decref(j);
    char tiny_yml[64];
    write_temp(tiny_yml, sizeof tiny_yml,
               "lm:\n  path: null\n  hidden_size: 32\n  num_layers: 1\n  num_heads: 2\n"
               "  num_kv_heads: 1\n  intermediate_size: 64\n  seed: 7\n"
               "  pretrain_steps: 200\n");
    const char *tiny[] = {"--model", "temporal", "--dataset", dir,         "--stage",
                          "align",   "--config", tiny_yml,    "--lm_seed", "8"};
    CT_ASSERT_OK(parse(&c, &eb, tiny, 10));
    CT_ASSERT(c.lm_hidden_size == 32 && c.lm_num_layers == 1 && c.lm_num_heads == 2);
    CT_ASSERT(c.lm_num_kv_heads == 1 && c.lm_intermediate_size == 64 && c.lm_seed == 8);
    CT_ASSERT(c.lm_pretrain_steps == 200 && c.lm_dir[0] == '\0');
    const char *tiny_bad[] = {"--model",  "temporal", "--dataset",         dir, "--stage", "align",
                              "--config", tiny_yml,   "--lm_num_kv_heads", "3"};
    CT_ASSERT_ERR(parse(&c, &eb, tiny_bad, 10), CT_ERANGE_VALUE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "--lm_num_kv_heads 3 must divide it");
    unlink(tiny_yml);
    const char *align_lm[] = {
        "--model",           "temporal", "--dataset",           dir, "--stage",  "align",
        "--lm_dir",          dir,        "--num_soft_tokens",   "3", "--prompt", "Say:",
        "--max_text_tokens", "20",       "--grad_checkpointing"};
    CT_ASSERT_OK(parse(&c, &eb, align_lm, 15));
    CT_ASSERT(c.stage == 1 && c.num_soft_tokens == 3 && c.max_text_tokens == 20);
    CT_ASSERT(c.grad_checkpointing && strcmp(c.prompt, "Say:") == 0);
    j = ctrain_cfg_to_json(&c);
    CT_ASSERT_STR_EQ(json_string_value(json_object_get(j, "stage")), "align");
    json_decref(j);
    /* stage reconstruct ignores the LM's flags: one YAML serves both stages */
    const char *recon_lm[] = {"--model", "temporal", "--dataset", dir, "--lm_dir", dir};
    CT_ASSERT_OK(parse(&c, &eb, recon_lm, 6));
    CT_ASSERT(c.stage == 0);
    const char *align_bad[] = {"--model", "temporal", "--dataset", dir,
                               "--stage", "align",    "--lm_dir",  "/nonexistent/lm"};
    CT_ASSERT_ERR(parse(&c, &eb, align_bad, 8), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "--lm_dir: \"/nonexistent/lm\" is not a folder");
    /* one YAML for both stages: stage align trains num_epochs - reconstruct_epochs */
    const char *y_recon[] = {"--model", "temporal", "--dataset", dir, "--config", two};
    CT_ASSERT_OK(parse(&c, &eb, y_recon, 6));
    CT_ASSERT(c.stage == 0 && c.num_epochs == 2);
    const char *y_align[] = {"--model",  "temporal", "--dataset", dir,
                             "--config", two,        "--stage",   "align"};
    CT_ASSERT_OK(parse(&c, &eb, y_align, 8));
    CT_ASSERT(c.stage == 1 && c.num_epochs == 3 && c.max_text_tokens == 30);
    CT_ASSERT(strcmp(c.lm_dir, dir) == 0);
    const char *y_cli[] = {"--model", "temporal", "--dataset",    dir, "--config", two,
                           "--stage", "align",    "--num_epochs", "7"};
    CT_ASSERT_OK(parse(&c, &eb, y_cli, 10));
    CT_ASSERT(c.num_epochs == 7);
    const char *stage_bad[] = {"--model", "temporal", "--dataset", dir, "--stage", "both"};
    CT_ASSERT_ERR(parse(&c, &eb, stage_bad, 6), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "reconstruct, align");
    unlink(yml);
    unlink(bad);
    unlink(wrong);
    unlink(deep);
    unlink(two);
}

int main(void)
{
    CT_RUN(test_defaults);
    CT_RUN(test_model_flags);
    CT_RUN(test_spellings);
    CT_RUN(test_lr_schedule);
    CT_RUN(test_model_cfg);
    CT_RUN(test_min_count);
    CT_RUN(test_lm_flags);
    CT_RUN(test_temporal_flags);
    return 0;
}
