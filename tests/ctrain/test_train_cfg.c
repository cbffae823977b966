/*
 * test_train_cfg.c - worker/ct_train_cfg.c and the model configuration helpers: SASRec.pytorch's
 * defaults, the flag spellings, standalone booleans, cross-flag checks, args.json, the learning
 * rate schedule (warmup, constant / linear / cosine, lr_scale) at chosen steps, and the model
 * configuration's JSON round trip and difference report.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "ct_test.h"
#include "ct_train_cfg.h"

static int parse(ct_train_cfg_t *c, ct_errbuf_t *eb, const char **args, int n)
{
    char *argv[32] = {"ctrain"};
    for (int i = 0; i < n; i++)
        argv[i + 1] = (char *)args[i];
    ct_train_cfg_default(c);
    ct_args_action_t action;
    return ct_train_args_parse(c, n + 1, argv, &action, eb);
}

static void test_defaults(void)
{
    ct_train_cfg_t c;
    ct_train_cfg_default(&c);
    /* SASRec.pytorch HEAD's python/main.py */
    CT_ASSERT_EQ(c.batch_size, 128);
    CT_ASSERT(c.lr == 0.001);
    CT_ASSERT_EQ(c.maxlen, 200);
    CT_ASSERT_EQ(c.hidden_units, 50);
    CT_ASSERT_EQ(c.num_blocks, 2);
    CT_ASSERT_EQ(c.num_epochs, 1000);
    CT_ASSERT_EQ(c.num_heads, 1);
    CT_ASSERT(c.dropout_rate == 0.2);
    CT_ASSERT(c.l2_emb == 0.0);
    CT_ASSERT(!c.norm_first && c.layout == CT_LAYOUT_POST_LN);
    CT_ASSERT_EQ(c.eval_every, 20);
    CT_ASSERT_EQ(c.threads, 1);
}

static void test_spellings(void)
{
    ct_train_cfg_t c;
    ct_errbuf_t eb;
    const char *a[] = {"--batch-size",        "64",      "--hidden_units=32", "--norm-first",
                       "--num_heads",         "4",       "--inference_only",  "false",
                       "--skip_invalid_loss", "--seed=9"};
    CT_ASSERT_OK(parse(&c, &eb, a, 10));
    CT_ASSERT_EQ(c.batch_size, 64);
    CT_ASSERT_EQ(c.hidden_units, 32);
    CT_ASSERT(c.norm_first && c.layout == CT_LAYOUT_PRE_LN);
    CT_ASSERT_EQ(c.num_heads, 4);
    CT_ASSERT(!c.inference_only);
    CT_ASSERT(c.skip_invalid_loss);
    CT_ASSERT_EQ(c.seed, 9);
    CT_ASSERT(c.set_hidden && c.set_heads && !c.set_maxlen && !c.set_blocks);

    const char *b[] = {"--layout", "original", "--norm_first", "false"};
    CT_ASSERT_OK(parse(&c, &eb, b, 4));
    CT_ASSERT(c.layout == CT_LAYOUT_ORIGINAL);
    const char *d[] = {"--layout", "original", "--norm_first"};
    CT_ASSERT_ERR(parse(&c, &eb, d, 3), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "--norm_first");
    const char *e[] = {"--batch_size", "9999999999"};
    CT_ASSERT_ERR(parse(&c, &eb, e, 2), CT_ERANGE_VALUE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "--batch_size: ");
    const char *g[] = {"--backend", "gloo"};
    CT_ASSERT_OK(parse(&c, &eb, g, 2));
    CT_ASSERT_STR_EQ(c.backend, "ring");

    /* args.json holds every setting */
    json_t *j = ct_train_cfg_to_json(&c);
    const char *keys[] = {"dataset",          "train_dir",
                          "batch_size",       "lr",
                          "maxlen",           "hidden_units",
                          "num_blocks",       "num_epochs",
                          "num_heads",        "dropout_rate",
                          "l2_emb",           "device",
                          "inference_only",   "state_dict_path",
                          "norm_first",       "layout",
                          "data_format",      "seed",
                          "eval_every",       "eval",
                          "backend",          "num_workers",
                          "ckpt_every_steps", "keep_checkpoints",
                          "resume",           "grad_clip",
                          "warmup_steps",     "lr_schedule",
                          "grad_accum",       "lr_scale",
                          "base_batch_size",  "skip_invalid_loss",
                          "threads"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        CT_ASSERT_MSG(json_object_get(j, keys[i]) != NULL, "args.json lacks %s", keys[i]);
    CT_ASSERT_EQ(json_object_size(j), sizeof keys / sizeof keys[0]);
    json_decref(j);
}

static void test_lr_schedule(void)
{
    ct_train_cfg_t c;
    ct_train_cfg_default(&c);
    c.lr = 0.01;
    CT_ASSERT(ct_train_lr_at(&c, 0, 100) == 0.01);
    CT_ASSERT(ct_train_lr_at(&c, 99, 100) == 0.01);
    c.warmup_steps = 4;
    CT_ASSERT_CLOSE(ct_train_lr_at(&c, 0, 100), 0.0025, 1e-15, 0);
    CT_ASSERT_CLOSE(ct_train_lr_at(&c, 2, 100), 0.0075, 1e-15, 0);
    CT_ASSERT_CLOSE(ct_train_lr_at(&c, 3, 100), 0.01, 1e-15, 0);
    CT_ASSERT_CLOSE(ct_train_lr_at(&c, 50, 100), 0.01, 1e-15, 0);
    c.lr_schedule = CT_LR_LINEAR;
    /* decay over steps 4..104: half way at 54, zero at 104 */
    CT_ASSERT_CLOSE(ct_train_lr_at(&c, 4, 104), 0.01, 1e-15, 0);
    CT_ASSERT_CLOSE(ct_train_lr_at(&c, 54, 104), 0.005, 1e-15, 0);
    CT_ASSERT_CLOSE(ct_train_lr_at(&c, 104, 104), 0.0, 1e-15, 0);
    c.lr_schedule = CT_LR_COSINE;
    CT_ASSERT_CLOSE(ct_train_lr_at(&c, 4, 104), 0.01, 1e-15, 0);
    CT_ASSERT_CLOSE(ct_train_lr_at(&c, 54, 104), 0.005, 1e-15, 0);
    CT_ASSERT_CLOSE(ct_train_lr_at(&c, 29, 104), 0.005 * (1 + cos(M_PI / 4)), 1e-15, 0);
    CT_ASSERT_CLOSE(ct_train_lr_at(&c, 104, 104), 0.0, 1e-15, 0);
    /* lr_scale is relative to the optimizer batch, batch_size * grad_accum */
    c.warmup_steps = 0;
    c.lr_schedule = CT_LR_CONSTANT;
    c.batch_size = 256, c.grad_accum = 2, c.base_batch_size = 128;
    c.lr_scale = CT_LR_SCALE_LINEAR;
    CT_ASSERT_CLOSE(ct_train_lr_at(&c, 7, 100), 0.04, 1e-15, 0);
    c.lr_scale = CT_LR_SCALE_SQRT;
    CT_ASSERT_CLOSE(ct_train_lr_at(&c, 7, 100), 0.02, 1e-15, 0);
}

static void test_model_cfg(void)
{
    ct_model_cfg_t a = {.kind = CT_MODEL_SASREC,
                        .layout = CT_LAYOUT_ORIGINAL2020,
                        .num_items = 3416,
                        .maxlen = 200,
                        .hidden = 50,
                        .num_heads = 1,
                        .num_blocks = 2,
                        .dropout = 0.2f};
    json_t *j = ct_model_cfg_to_json(&a);
    ct_model_cfg_t b = {0};
    ct_errbuf_t eb;
    CT_ASSERT_OK(ct_model_cfg_from_json(j, &b, &eb));
    json_decref(j);
    char what[128];
    CT_ASSERT(ct_model_cfg_diff(&a, &b, what, sizeof what) == NULL);
    CT_ASSERT(b.dropout == a.dropout && b.layout == a.layout);
    CT_ASSERT_EQ(ct_model_pos_rows(&b), 200);
    b.layout = CT_LAYOUT_ORIGINAL;
    CT_ASSERT_EQ(ct_model_pos_rows(&b), 201);
    CT_ASSERT_STR_EQ(ct_model_cfg_diff(&a, &b, what, sizeof what), "layout");
    CT_ASSERT_STR_EQ(what, "layout: original2020 vs original");
    b = a;
    b.num_heads = 2;
    CT_ASSERT_STR_EQ(ct_model_cfg_diff(&a, &b, what, sizeof what), "num_heads");
    b = a;
    b.dropout = 0.5f; /* a training detail, not the model's shape */
    CT_ASSERT(ct_model_cfg_diff(&a, &b, what, sizeof what) == NULL);
    j = json_pack("{s:s}", "kind", "sasrec");
    CT_ASSERT_ERR(ct_model_cfg_from_json(j, &b, &eb), CT_EFORMAT);
    json_decref(j);
    a.num_heads = 3;
    CT_ASSERT_ERR(ct_model_cfg_check(&a, &eb), -EINVAL);
    CT_ASSERT_STR_CONTAINS(eb.msg, "num_heads 3 does not divide hidden_units 50");
}

int main(void)
{
    CT_RUN(test_defaults);
    CT_RUN(test_spellings);
    CT_RUN(test_lr_schedule);
    CT_RUN(test_model_cfg);
    return 0;
}
