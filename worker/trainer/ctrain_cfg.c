/*
 * ctrain_cfg.c - ctrain's flags: one table (name, kind, range, help) drives parsing,
 * --help and the man page's list; values are converted with ct_parse.h, so every bad value is
 * one line that names the flag. Also args.json and the learning-rate schedule.
 */
#include "ctrain_cfg.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_config.h"
#include "ct_ops.h"
#include "ct_parse.h"
#include "ctrain_yaml.h"

void ctrain_cfg_default(ctrain_cfg_t *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->dataset, sizeof c->dataset, "synthetic");
    snprintf(c->train_dir, sizeof c->train_dir, "ctrain_run");
    c->batch_size = 128;
    c->lr = 0.001;
    c->hidden_units = 50;
    c->num_blocks = 2;
    c->num_heads = 1;
    c->dropout_rate = 0.2;
    snprintf(c->device, sizeof c->device, "cpu");
    c->data_format = CTRAIN_DATA_AUTO;
    c->min_count = 5; /* TiSASRec's preprocessing (ctrain_data.h's default) */
    c->seed = 42;
    c->seq_len = 256;
    c->num_samples = 4096;
    c->eval_every = 20;
    c->eval = CTRAIN_EVAL_MODE_BOTH;
    snprintf(c->backend, sizeof c->backend, "auto");
    c->num_workers = 1;
    /* Measured (bench/chaos, ct_ckpt_save of the default model's 1.2 MB: 6-20 ms with its
     * three fsyncs on a loaded 2-core machine) against 125-250 ms per default step: every 20
     * steps costs under 1 % and replays at most 19 steps after a crash. */
    c->ckpt_every_steps = 20;
    c->overlap_reduction = true;
    c->keep_checkpoints = 3;
    c->grad_clip = 0.0;
    c->warmup_steps = 0;
    c->lr_schedule = CTRAIN_LR_CONSTANT;
    c->grad_accum = 1;
    c->lr_scale = CTRAIN_LR_SCALE_NONE;
    c->base_batch_size = 128;
    c->threads = 1;
    c->model = CTRAIN_MODEL_TISASREC;
    c->mhc = true;
    c->time_span = 256;
    c->loss = CTRAIN_LOSS_BCE;
    c->num_negatives = 256;
    snprintf(c->split, sizeof c->split, "0.8,0.1,0.1");
    c->embed_dim = 64;
    c->max_text_len = 24;
    snprintf(c->text_mode, sizeof c->text_mode, "cached");
    c->lm_lr = 1e-4;
    c->patch_len = 16;
    c->ff_dim = 256;
    c->mask_ratio = 0.4;
    c->val_fraction = 0.1;
    c->weight_decay = 0.01;
    c->lr_floor = 0.0;
    c->num_soft_tokens = 8;
    c->yaml_epochs = -1;
    c->yaml_reconstruct_epochs = -1;
    c->max_text_tokens = 48;
    snprintf(c->prompt, sizeof c->prompt, "Describe the curve:");
    c->lm_hidden_size = 128; /* the reference's lm.* defaults */
    c->lm_num_layers = 2;
    c->lm_num_heads = 4;
    c->lm_num_kv_heads = 2;
    c->lm_intermediate_size = 256;
    c->lm_seed = 1234;
    c->lm_pretrain_steps = 300;
    ctrain_train_model_defaults(c);
}

void ctrain_train_model_defaults(ctrain_cfg_t *c)
{
    const ctrain_family_t *fam = ctrain_family(c->model);
    if (!c->set_layout)
        c->layout = ctrain_train_default_layout(c->model, c->mhc);
    if (!c->set_maxlen)
        c->maxlen = fam->maxlen;
    if (!c->set_l2)
        c->l2_emb = fam->l2_emb;
    if (!c->set_epochs)
        c->num_epochs = fam->num_epochs;
    if (!c->set_eval_every && fam->eval_every > 0)
        c->eval_every = fam->eval_every;
    if (!c->set_batch)
        c->batch_size = fam->batch_size > 0 ? fam->batch_size : 128;
}

ctrain_layout_t ctrain_train_default_layout(ctrain_model_kind_t model, bool mhc)
{
    return mhc ? CTRAIN_LAYOUT_PRE_LN : ctrain_family(model)->layout;
}
static const char *ctrain_eval_mode_name(ctrain_eval_mode_t m)
{
    return m == CTRAIN_EVAL_MODE_SAMPLED ? "sampled" : m == CTRAIN_EVAL_MODE_FULL ? "full" : "both";
}

const char *ctrain_lr_schedule_name(ctrain_lr_schedule_t s)
{
    return s == CTRAIN_LR_LINEAR ? "linear" : s == CTRAIN_LR_COSINE ? "cosine" : "constant";
}

const char *ctrain_lr_scale_name(ctrain_lr_scale_t s)
{
    return s == CTRAIN_LR_SCALE_LINEAR ? "linear" : s == CTRAIN_LR_SCALE_SQRT ? "sqrt" : "none";
}

/* ---- the flag table ----------------------------------------------------------------------- */

typedef enum ctrain_cfg__kind {
    CT__INT,    /* int, [min, max] */
    CT__INT64,  /* int64_t, [min, max] */
    CT__U64,    /* uint64_t, [0, max] */
    CT__DOUBLE, /* double, [dmin, dmax] */
    CT__BOOL,   /* bool; may stand alone */
    CT__PATH,   /* char[CTRAIN_TRAIN_PATH_MAX] */
    CT__ENUM,   /* special-cased by name: one of the listed words */
} ctrain_cfg__kind_t;

typedef struct ctrain_cfg__flag {
    const char *name; /* with underscores */
    ctrain_cfg__kind_t kind;
    size_t off;
    double min, max;
    const char *help;
} ctrain_cfg__flag_t;

#define CT__OFF(f) offsetof(ctrain_cfg_t, f)

static const ctrain_cfg__flag_t ctrain_cfg__flags[] = {
    {"dataset", CT__PATH, CT__OFF(dataset), 0, 0,
     "FILE|synthetic[:users=N,items=N,len=N,noise=X,seed=N]  interactions (default synthetic)"},
    {"model", CT__ENUM, CT__OFF(model), 0, 0,
     "sasrec|tisasrec|lm|gpt2rec|temporal  the model (default tisasrec; --no_time = sasrec; lm: a "
     "GPT-2 or Qwen2 causal LM from --lm_dir; gpt2rec: user and item embeddings plus --lm_dir's "
     "text embeddings, BPR; temporal: the encoder of curves, masked-patch reconstruction)"},
    {"lm_dir", CT__PATH, CT__OFF(lm_dir), 0, 0,
     "DIR  --model lm, gpt2rec: a Hugging Face folder (config.json, weights, tokenizer)"},
    {"item_text", CT__PATH, CT__OFF(item_text), 0, 0,
     "FILE  --model gpt2rec: item texts (u.item, movies.dat or id<TAB>text lines)"},
    {"split", CT__PATH, CT__OFF(split), 0, 0,
     "A,B,C  --model gpt2rec: train, validation, test fractions of each user's interactions in "
     "time order (default 0.8,0.1,0.1)"},
    {"embed_dim", CT__INT, CT__OFF(embed_dim), 1, CTRAIN_MODEL_MAX_HIDDEN,
     "D  --model gpt2rec: user and item vectors (default 64)"},
    {"max_text_len", CT__INT, CT__OFF(max_text_len), 1, CTRAIN_MODEL_MAX_LEN,
     "N  --model gpt2rec: tokens of an item's text the LM reads (default 24)"},
    {"text_mode", CT__PATH, CT__OFF(text_mode), 0, 0,
     "cached|dynamic  --model gpt2rec: the LM embeds every text once at start, or is fine-tuned "
     "with the recommender (default cached)"},
    {"lm_lr", CT__DOUBLE, CT__OFF(lm_lr), 0, 1e30,
     "X  --model gpt2rec --text_mode dynamic: the LM's Adam learning rate (default 1e-4)"},
    {"eval_dataset", CT__PATH, CT__OFF(eval_dataset), 0, 0,
     "FILE  --model lm: validation lines (default: --dataset itself)"},
    {"save_hf", CT__PATH, CT__OFF(save_hf), 0, 0,
     "DIR  --model lm: after training, write a folder transformers loads"},
    {"freeze", CT__PATH, CT__OFF(freeze), 0, 0,
     "P[,P...]  --model lm: tensors whose names start with a prefix get no gradient and no "
     "optimizer state"},
    {"grad_checkpointing", CT__BOOL, CT__OFF(grad_checkpointing), 0, 0,
     "[true|false]  --model lm: keep only each block's input in the forward and compute the "
     "block again in the backward (less memory, about 15% more time; the same gradients)"},
    {"config", CT__PATH, CT__OFF(config), 0, 0,
     "FILE  --model temporal: the reference's YAML configuration (flags override its keys)"},
    {"stage", CT__ENUM, CT__OFF(stage), 0, 0,
     "reconstruct|align  --model temporal: the training stage (masked-patch reconstruction; "
     "align: the curve's soft tokens into the frozen --lm_dir, cross-entropy on its "
     "description)"},
    {"num_soft_tokens", CT__INT, CT__OFF(num_soft_tokens), 1, 1024,
     "K  --model temporal --stage align: soft tokens per curve (default 8)"},
    {"max_text_tokens", CT__INT, CT__OFF(max_text_tokens), 2, 4096,
     "N  --model temporal --stage align: a description's tokens, end-of-text included "
     "(default 48)"},
    {"prompt", CT__PATH, CT__OFF(prompt), 0, 0,
     "TEXT  --model temporal --stage align: the prompt after the soft tokens (default "
     "\"Describe the curve:\")"},
    {"lm_hidden_size", CT__INT, CT__OFF(lm_hidden_size), 2, 65536,
     "C  --stage align without --lm_dir: the tiny random Qwen2's width (default 128)"},
    {"lm_num_layers", CT__INT, CT__OFF(lm_num_layers), 1, 256,
     "N  --stage align without --lm_dir: its layers (default 2)"},
    {"lm_num_heads", CT__INT, CT__OFF(lm_num_heads), 1, 4096,
     "N  --stage align without --lm_dir: its attention heads (default 4)"},
    {"lm_num_kv_heads", CT__INT, CT__OFF(lm_num_kv_heads), 1, 4096,
     "N  --stage align without --lm_dir: its key/value heads (default 2)"},
    {"lm_intermediate_size", CT__INT, CT__OFF(lm_intermediate_size), 1, 1 << 20,
     "N  --stage align without --lm_dir: its FFN width (default 256)"},
    {"lm_seed", CT__U64, CT__OFF(lm_seed), 0, 0,
     "S  --stage align without --lm_dir: its initialisation and pretraining draws (default "
     "1234)"},
    {"lm_pretrain_steps", CT__INT, CT__OFF(lm_pretrain_steps), 0, 1 << 30,
     "N  --stage align without --lm_dir: AdamW steps that teach it the descriptions (default "
     "300)"},
    {"patch_len", CT__INT, CT__OFF(patch_len), 1, 4096,
     "P  --model temporal: points per patch (default 16)"},
    {"ff_dim", CT__INT, CT__OFF(ff_dim), 1, 1 << 20,
     "N  --model temporal: the encoder's feed-forward width (default 256)"},
    {"mask_ratio", CT__DOUBLE, CT__OFF(mask_ratio), 0, 1,
     "X  --model temporal: share of patches masked (default 0.4)"},
    {"pregenerate", CT__INT64, CT__OFF(pregenerate), 1, 2147483647.0,
     "N  --model temporal: write a cache of N curves into --output_dir (meta.json, curves.npy, "
     "descriptions.jsonl: pregenerate_temporal_data.py's files, byte for byte) and exit; --seed "
     "S is then the curves' seed (default 0)"},
    {"output_dir", CT__PATH, CT__OFF(output_dir), 0, 0,
     "DIR  --pregenerate: the cache folder (created; its files replaced atomically)"},
    {"seq_len", CT__INT, CT__OFF(seq_len), 8, 1 << 24,
     "L  --pregenerate, and training without --dataset: points per curve (default 256; config "
     "data.seq_len)"},
    {"data_seed", CT__U64, CT__OFF(data_seed), 0, 0,
     "S  --pregenerate, and training without --dataset: the curves' seed (default 0; config "
     "data.seed)"},
    {"log_dir", CT__PATH, CT__OFF(log_dir), 0, 0,
     "DIR  --model temporal: the folder of train.log (created; default --train_dir; config "
     "output.log_dir)"},
    {"log_interval", CT__INT, CT__OFF(log_interval), 1, 2147483647.0,
     "N  --model temporal: a train.log line every N optimizer steps (default 50; config "
     "training.log_interval)"},
    {"num_samples", CT__INT64, CT__OFF(num_samples), 2, 2147483647.0,
     "N  --model temporal without --dataset: curves generated at start, validation included "
     "(default 4096; config data.num_samples)"},
    {"val_fraction", CT__DOUBLE, CT__OFF(val_fraction), 0, 0.99,
     "X  --model temporal: the last share of the curves validates (default 0.1)"},
    {"weight_decay", CT__DOUBLE, CT__OFF(weight_decay), 0, 1e6,
     "X  --model temporal: AdamW's decoupled weight decay (default 0.01)"},
    {"lr_floor", CT__DOUBLE, CT__OFF(lr_floor), 0, 1,
     "F  --lr_schedule cosine decays to F * lr (default 0; --model temporal 0.05)"},
    {"mhc", CT__BOOL, CT__OFF(mhc), 0, 0,
     "[true|false]  mHC residual streams (4, on pre_ln) around every sub-layer (default true)"},
    {"no_mhc", CT__BOOL, CT__OFF(no_mhc), 0, 0, "[true|false]  = --mhc false"},
    {"no_time", CT__BOOL, CT__OFF(no_time), 0, 0,
     "[true|false]  no time intervals: = --model sasrec"},
    {"time_span", CT__INT, CT__OFF(time_span), 1, CTRAIN_MODEL_MAX_TIME_SPAN,
     "K  TiSASRec: intervals clipped at K (default 256)"},
    {"loss", CT__ENUM, CT__OFF(loss), 0, 0,
     "bce|ce|sampled_ce  one negative per position; softmax over all items; over "
     "--num_negatives per sequence (default bce)"},
    {"num_negatives", CT__INT, CT__OFF(num_negatives), 1, 1000000,
     "N  --loss sampled_ce: negatives per sequence, shared by its positions (default 256)"},
    {"data_format", CT__ENUM, CT__OFF(data_format), 0, 0,
     "auto|sasrec|tsv|ml1m  how to read --dataset FILE (default auto)"},
    {"min_count", CT__INT, CT__OFF(min_count), 1, 1 << 30,
     "N  tsv/ml1m files: drop rows whose user or item has fewer than N rows, one counting pass "
     "(default 5, TiSASRec's; 1 keeps every row); sasrec files are never filtered"},
    {"train_dir", CT__PATH, CT__OFF(train_dir), 0, 0,
     "DIR  checkpoints, metrics.jsonl, args.json, event file (default ctrain_run)"},
    {"batch_size", CT__INT, CT__OFF(batch_size), 1, 1 << 20,
     "N  global batch of users (gpt2rec: interactions) per micro-step, split over ranks "
     "(default 128; gpt2rec 2048)"},
    {"lr", CT__DOUBLE, CT__OFF(lr), 0, 1e30, "X  Adam learning rate (default 0.001)"},
    {"maxlen", CT__INT, CT__OFF(maxlen), 1, CTRAIN_MODEL_MAX_LEN,
     "L  sequence window (default 200; TiSASRec 50)"},
    {"hidden_units", CT__INT, CT__OFF(hidden_units), 1, CTRAIN_MODEL_MAX_HIDDEN,
     "C  hidden width d (default 50)"},
    {"num_blocks", CT__INT, CT__OFF(num_blocks), 1, CTRAIN_MODEL_MAX_BLOCKS,
     "N  transformer blocks (default 2)"},
    {"num_epochs", CT__INT, CT__OFF(num_epochs), 1, 100000000,
     "N  epochs (default 1000; TiSASRec 201)"},
    {"num_heads", CT__INT, CT__OFF(num_heads), 1, CTRAIN_MODEL_MAX_HIDDEN,
     "N  attention heads, must divide hidden_units (default 1)"},
    {"dropout_rate", CT__DOUBLE, CT__OFF(dropout_rate), 0, 0.99,
     "P  every dropout site (default 0.2)"},
    {"l2_emb", CT__DOUBLE, CT__OFF(l2_emb), 0, 1e6,
     "X  SASRec: loss += X * sum(item_emb^2) (default 0); TiSASRec: X * ||T|| for its five "
     "tables (default 5e-5)"},
    {"device", CT__ENUM, CT__OFF(device), 0, 0,
     "cpu|auto|cuda  (default cpu; auto = cuda when a GPU is visible)"},
    {"inference_only", CT__BOOL, CT__OFF(inference_only), 0, 0,
     "[true|false]  evaluate --state_dict_path and exit"},
    {"state_dict_path", CT__PATH, CT__OFF(state_dict_path), 0, 0,
     "FILE  safetensors with SASRec.pytorch names: weights to evaluate or start from"},
    {"norm_first", CT__BOOL, CT__OFF(norm_first), 0, 0, "[true|false]  = --layout pre_ln"},
    {"layout", CT__ENUM, CT__OFF(layout), 0, 0,
     "post_ln|pre_ln|original|original2020  block layout (default: pre_ln with mHC, else "
     "post_ln for SASRec, original2020 for TiSASRec)"},
    {"seed", CT__U64, CT__OFF(seed), 0, 0, "N  seed of every random draw (default 42)"},
    {"eval_every", CT__INT, CT__OFF(eval_every), 0, 100000000,
     "N  evaluate every N epochs and after the last; 0 = only after the last (default 20)"},
    {"eval", CT__ENUM, CT__OFF(eval), 0, 0,
     "sampled|full|both  evaluation protocols (default both)"},
    {"backend", CT__ENUM, CT__OFF(backend), 0, 0,
     "auto|ring|nccl  communicator for WORLD_SIZE > 1 (default auto: the CPU ring)"},
    {"num_workers", CT__INT, CT__OFF(num_workers), 0, 1024,
     "N  0: build batches on the training thread; >= 1: one thread prefetches the next "
     "(default 1)"},
    {"ckpt_every_steps", CT__INT64, CT__OFF(ckpt_every_steps), 0, 1e15,
     "N  also checkpoint every N optimizer steps; 0 = epoch ends only (default 20)"},
    {"keep_checkpoints", CT__INT, CT__OFF(keep_checkpoints), 1, 1000000,
     "N  step checkpoints kept (default 3)"},
    {"resume", CT__ENUM, CT__OFF(resume_never), 0, 0,
     "auto|never  resume from --train_dir's latest checkpoint (default auto)"},
    {"grad_clip", CT__DOUBLE, CT__OFF(grad_clip), 0, 1e30,
     "X  clip the global gradient norm to X; 0 = off (default 0)"},
    {"warmup_steps", CT__INT64, CT__OFF(warmup_steps), 0, 1e15,
     "N  linear learning-rate warmup steps (default 0)"},
    {"lr_schedule", CT__ENUM, CT__OFF(lr_schedule), 0, 0,
     "constant|linear|cosine  after warmup (default constant)"},
    {"grad_accum", CT__INT, CT__OFF(grad_accum), 1, 1 << 16,
     "K  micro-steps per optimizer step: optimizer batch = K * batch_size (default 1)"},
    {"lr_scale", CT__ENUM, CT__OFF(lr_scale), 0, 0,
     "none|linear|sqrt  scale lr by (K*batch_size/base_batch_size) (default none)"},
    {"base_batch_size", CT__INT, CT__OFF(base_batch_size), 1, 1 << 30,
     "N  the batch size --lr is meant for (default 128)"},
    {"skip_invalid_loss", CT__BOOL, CT__OFF(skip_invalid_loss), 0, 0,
     "[true|false]  skip a step whose loss or gradient is NaN/inf instead of failing"},
    {"threads", CT__INT, CT__OFF(threads), 1, 1024, "N  BLAS threads per rank (default 1)"},
    {"use_amp", CT__BOOL, CT__OFF(use_amp), 0, 0,
     "[true|false]  bf16 matrix products with float accumulation and float weights (CUDA)"},
    {"collective_timeout", CT__DOUBLE, CT__OFF(collective_timeout), 0, 1e7,
     "SECONDS  fail the job when a collective takes longer (default: CTRUN_COMM_TIMEOUT or "
     "1800)"},
    {"overlap_reduction", CT__BOOL, CT__OFF(overlap_reduction), 0, 0,
     "[true|false]  NCCL: reduce each block's gradients while the earlier blocks' backward "
     "runs (default true)"},
};
#define CT__NFLAGS (sizeof ctrain_cfg__flags / sizeof ctrain_cfg__flags[0])

void ctrain_args_usage(FILE *out)
{
    fprintf(out, "usage: ctrain [--flag VALUE | --flag=VALUE]...\n"
                 "Trains (or, with --inference_only, evaluates) TiSASRec or SASRec, with or "
                 "without mHC residual streams, on the CPU.\n"
                 "Flags may be spelled with '_' or '-'.\n\n");
    for (size_t i = 0; i < CT__NFLAGS; i++)
        fprintf(out, "  --%-18s %s\n", ctrain_cfg__flags[i].name, ctrain_cfg__flags[i].help);
    fprintf(out, "  --%-18s %s\n  --%-18s %s\n", "help", "this text", "version",
            "print the version");
}

/* Compares a user's flag name (without "--", up to len bytes) with a table name, '-' == '_'. */
static bool ctrain_cfg__name_eq(const char *user, size_t len, const char *name)
{
    if (strlen(name) != len)
        return false;
    for (size_t i = 0; i < len; i++) {
        char a = user[i] == '-' ? '_' : user[i];
        if (a != name[i])
            return false;
    }
    return true;
}

static int ctrain_cfg__enum(const char *v, const char *const *words, int n, int *out,
                            ct_errbuf_t *eb)
{
    for (int i = 0; i < n; i++)
        if (strcmp(v, words[i]) == 0) {
            *out = i;
            return 0;
        }
    char list[256] = "";
    for (int i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", words[i]);
    return ct_errbuf_set(eb, CT_EPARSE, "\"%.80s\" is not one of %s", v, list);
}

static int ctrain_cfg__set_enum(ctrain_cfg_t *c, const ctrain_cfg__flag_t *f, const char *v,
                                ct_errbuf_t *eb)
{
    int k = 0, rc;
    if (strcmp(f->name, "data_format") == 0) {
        return ctrain_data_parse_format(v, &c->data_format, eb);
    } else if (strcmp(f->name, "stage") == 0) {
        static const char *const w[] = {"reconstruct", "align"};
        if ((rc = ctrain_cfg__enum(v, w, 2, &k, eb)) == 0)
            c->stage = k;
        return rc;
    } else if (strcmp(f->name, "layout") == 0) {
        rc = ctrain_layout_parse(v, &c->layout, eb);
        c->set_layout = rc == 0;
        return rc;
    } else if (strcmp(f->name, "model") == 0) {
        rc = ctrain_model_kind_parse(v, &c->model, eb);
        c->set_model = rc == 0;
        return rc;
    } else if (strcmp(f->name, "loss") == 0) {
        return ctrain_loss_parse(v, &c->loss, eb);
    } else if (strcmp(f->name, "device") == 0) {
        static const char *const w[] = {"cpu", "auto", "cuda"};
        if ((rc = ctrain_cfg__enum(v, w, 3, &k, eb)) == 0)
            snprintf(c->device, sizeof c->device, "%s", w[k]);
        return rc;
    } else if (strcmp(f->name, "backend") == 0) {
        static const char *const w[] = {"auto", "ring", "nccl", "gloo"};
        if ((rc = ctrain_cfg__enum(v, w, 4, &k, eb)) == 0)
            snprintf(c->backend, sizeof c->backend, "%s", k == 3 ? "ring" : w[k]);
        return rc;
    } else if (strcmp(f->name, "eval") == 0) {
        static const char *const w[] = {"sampled", "full", "both"};
        static const ctrain_eval_mode_t m[] = {CTRAIN_EVAL_MODE_SAMPLED, CTRAIN_EVAL_MODE_FULL,
                                               CTRAIN_EVAL_MODE_BOTH};
        if ((rc = ctrain_cfg__enum(v, w, 3, &k, eb)) == 0)
            c->eval = m[k];
        return rc;
    } else if (strcmp(f->name, "resume") == 0) {
        static const char *const w[] = {"auto", "never"};
        if ((rc = ctrain_cfg__enum(v, w, 2, &k, eb)) == 0)
            c->resume_never = k == 1;
        return rc;
    } else if (strcmp(f->name, "lr_schedule") == 0) {
        static const char *const w[] = {"constant", "linear", "cosine"};
        if ((rc = ctrain_cfg__enum(v, w, 3, &k, eb)) == 0)
            c->lr_schedule = (ctrain_lr_schedule_t)k;
        return rc;
    } else {
        static const char *const w[] = {"none", "linear", "sqrt"};
        if ((rc = ctrain_cfg__enum(v, w, 3, &k, eb)) == 0)
            c->lr_scale = (ctrain_lr_scale_t)k;
        return rc;
    }
}

static int ctrain_cfg__set(ctrain_cfg_t *c, const ctrain_cfg__flag_t *f, const char *v,
                           ct_errbuf_t *eb)
{
    char *base = (char *)c + f->off;
    int rc = 0;
    switch (f->kind) {
    case CT__INT:
        rc = ct_parse_int(v, (int)f->min, (int)f->max, (int *)(void *)base, eb);
        break;
    case CT__INT64:
        rc = ct_parse_int64(v, (int64_t)f->min, (int64_t)f->max, (int64_t *)(void *)base, eb);
        break;
    case CT__U64: {
        int64_t x;
        rc = ct_parse_int64(v, 0, INT64_MAX, &x, eb);
        if (rc == 0)
            *(uint64_t *)(void *)base = (uint64_t)x;
        break;
    }
    case CT__DOUBLE:
        rc = ct_parse_double(v, f->min, f->max, (double *)(void *)base, eb);
        if (rc == 0 && strcmp(f->name, "lr") == 0 && !(c->lr > 0))
            rc = ct_errbuf_set(eb, CT_ERANGE_VALUE, "\"%.60s\" is out of range (expected > 0)", v);
        break;
    case CT__BOOL:
        rc = ct_parse_bool(v, (bool *)(void *)base, eb);
        break;
    case CT__PATH:
        if (strlen(v) >= CTRAIN_TRAIN_PATH_MAX)
            return ct_errbuf_set(eb, CT_ERANGE_VALUE, "value longer than %d bytes",
                                 CTRAIN_TRAIN_PATH_MAX - 1);
        if (v[0] == '\0')
            return ct_errbuf_set(eb, CT_EPARSE, "empty value");
        snprintf(base, CTRAIN_TRAIN_PATH_MAX, "%s", v);
        break;
    case CT__ENUM:
        rc = ctrain_cfg__set_enum(c, f, v, eb);
        break;
    }
    if (rc == 0) {
        c->set_maxlen |= strcmp(f->name, "maxlen") == 0;
        c->set_hidden |= strcmp(f->name, "hidden_units") == 0;
        c->set_blocks |= strcmp(f->name, "num_blocks") == 0;
        c->set_heads |= strcmp(f->name, "num_heads") == 0;
        c->set_time_span |= strcmp(f->name, "time_span") == 0;
        c->set_l2 |= strcmp(f->name, "l2_emb") == 0;
        c->set_epochs |= strcmp(f->name, "num_epochs") == 0;
        c->set_eval_every |= strcmp(f->name, "eval_every") == 0;
        c->set_num_negatives |= strcmp(f->name, "num_negatives") == 0;
        c->set_min_count |= strcmp(f->name, "min_count") == 0;
        c->set_lr_schedule |= strcmp(f->name, "lr_schedule") == 0;
        c->set_lr_floor |= strcmp(f->name, "lr_floor") == 0;
        c->set_dropout |= strcmp(f->name, "dropout_rate") == 0;
        c->set_batch |= strcmp(f->name, "batch_size") == 0;
        c->set_lr |= strcmp(f->name, "lr") == 0;
        c->set_warmup |= strcmp(f->name, "warmup_steps") == 0;
        c->set_clip |= strcmp(f->name, "grad_clip") == 0;
        if (strcmp(f->name, "mhc") == 0)
            c->set_mhc_flag = true;
        if (strcmp(f->name, "no_mhc") == 0)
            c->set_no_mhc_flag = true;
    }
    return rc;
}

/* The model: --no_time, --mhc / --no_mhc, the layout and the model's default values. */
static int ctrain_cfg__resolve_model(ctrain_cfg_t *c, ct_errbuf_t *eb)
{
    if (c->no_time) {
        if (c->set_model && c->model != CTRAIN_MODEL_SASREC)
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "--no_time: conflicts with --model %s (--no_time means --model "
                                 "sasrec)",
                                 ctrain_model_kind_name(c->model));
        c->model = CTRAIN_MODEL_SASREC;
        c->set_model = true;
    }
    if (c->set_no_mhc_flag) {
        if (c->set_mhc_flag && c->mhc == c->no_mhc)
            return ct_errbuf_set(eb, CT_EPARSE, "--no_mhc: conflicts with --mhc");
        c->mhc = !c->no_mhc;
    }
    c->set_mhc = c->set_mhc_flag || c->set_no_mhc_flag;
    const ctrain_family_t *mf = ctrain_family(c->model);
    if (!mf->takes_mhc) {
        if (c->set_mhc_flag && c->mhc)
            return ct_errbuf_set(eb, CT_EPARSE, "--mhc: %s has no mHC residual streams", mf->title);
        c->mhc = false;
    }
    if (c->mhc && c->set_layout && c->layout != CTRAIN_LAYOUT_PRE_LN &&
        (c->set_mhc || !c->inference_only))
        return ct_errbuf_set(eb, CT_EPARSE,
                             "--layout: %s conflicts with mHC (on by default), which wraps the "
                             "pre_ln layout; add --no_mhc to run %s",
                             ctrain_layout_name(c->layout), ctrain_layout_name(c->layout));
    const ctrain_family_t *fam = ctrain_family(c->model);
    if (c->set_layout && !c->mhc && !(fam->layouts & (1u << c->layout)) &&
        (c->set_model || !c->inference_only)) {
        /* its reference's layout first, then the others it runs */
        char runs[96];
        snprintf(runs, sizeof runs, "%s (its reference's layout)", ctrain_layout_name(fam->layout));
        for (int l = 0; l < CTRAIN_LAYOUT_COUNT; l++)
            if ((fam->layouts & (1u << l)) && l != (int)fam->layout)
                snprintf(runs + strlen(runs), sizeof runs - strlen(runs), " or %s",
                         ctrain_layout_name((ctrain_layout_t)l));
        return ct_errbuf_set(eb, CT_EPARSE,
                             "--layout: %s runs %s, not %s (use --model sasrec for %s)", fam->title,
                             runs, ctrain_layout_name(c->layout), ctrain_layout_name(c->layout));
    }
    if (c->set_time_span && c->set_model && !fam->has_time_span)
        return ct_errbuf_set(eb, CT_EPARSE, "--time_span: %s has no time intervals", fam->title);
    if (c->set_num_negatives && c->loss != CTRAIN_LOSS_SAMPLED_CE)
        return ct_errbuf_set(eb, CT_EPARSE,
                             "--num_negatives: only --loss sampled_ce samples negatives per "
                             "sequence (this run's loss is %s)",
                             ctrain_loss_name(c->loss));
    /* Inference takes what the checkpoint says (ctrain_infer.c); training the model's defaults. */
    if (!c->inference_only)
        ctrain_train_model_defaults(c);
    return 0;
}

/* The LM family's flags: --lm_dir for --model lm and for nothing else. */
static int ctrain_cfg__check_lm(const ctrain_cfg_t *c, ct_errbuf_t *eb)
{
    const char *lm_flag = c->lm_dir[0]         ? "--lm_dir"
                          : c->eval_dataset[0] ? "--eval_dataset"
                          : c->save_hf[0]      ? "--save_hf"
                          : c->freeze[0]       ? "--freeze"
                          : c->grad_checkpointing ? "--grad_checkpointing"
                                                  : NULL;
    if (c->model == CTRAIN_MODEL_TEMPORAL) {
        if (c->stage != 1)
            return 0; /* stage reconstruct has no LM: one YAML serves both stages */
        if (c->eval_dataset[0] || c->save_hf[0] || c->freeze[0])
            return ct_errbuf_set(eb, CT_EPARSE, "%s: not a flag of --model temporal",
                                 c->eval_dataset[0] ? "--eval_dataset"
                                 : c->save_hf[0]    ? "--save_hf"
                                                    : "--freeze");
        struct stat tst;
        if (stat(c->lm_dir, &tst) != 0 || !S_ISDIR(tst.st_mode))
            return ct_errbuf_set(eb, CT_EPARSE, "--lm_dir: \"%.200s\" is not a folder", c->lm_dir);
        return 0;
    }
    if (c->model == CTRAIN_MODEL_GPT2REC && lm_flag && strcmp(lm_flag, "--lm_dir") == 0 &&
        !c->grad_checkpointing) {
        struct stat gst;
        if (stat(c->lm_dir, &gst) != 0 || !S_ISDIR(gst.st_mode))
            return ct_errbuf_set(eb, CT_EPARSE, "--lm_dir: \"%.200s\" is not a folder", c->lm_dir);
        if (c->item_text[0] == '\0')
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "--lm_dir: --model gpt2rec embeds the items' texts: needs "
                                 "--item_text");
        return 0;
    }
    if (c->model != CTRAIN_MODEL_LM)
        return ct_errbuf_set(eb, CT_EPARSE, "%s: only --model lm takes it (this run's model is %s)",
                             lm_flag, ctrain_model_kind_name(c->model));
    if (c->lm_dir[0] == '\0')
        return ct_errbuf_set(eb, CT_EPARSE,
                             "--model lm: needs --lm_dir (a Hugging Face folder with config.json, "
                             "the weights and the tokenizer)");
    struct stat st;
    if (stat(c->lm_dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return ct_errbuf_set(eb, CT_EPARSE, "--lm_dir: \"%.200s\" is not a folder", c->lm_dir);
    if (c->eval_dataset[0] != '\0' && access(c->eval_dataset, R_OK) != 0) {
        int e = errno;
        return ct_errbuf_set(eb, CT_EPARSE, "--eval_dataset: cannot read \"%.200s\": %s",
                             c->eval_dataset, strerror(e));
    }
    if (strncmp(c->dataset, "synthetic", 9) == 0 && (c->dataset[9] == '\0' || c->dataset[9] == ':'))
        return ct_errbuf_set(eb, CT_EPARSE,
                             "--dataset: --model lm reads a text file (one document per line), "
                             "not the synthetic interactions");
    if (c->inference_only && (c->save_hf[0] != '\0' || c->freeze[0] != '\0'))
        return ct_errbuf_set(eb, CT_EPARSE, "%s: --inference_only trains nothing",
                             c->save_hf[0] ? "--save_hf" : "--freeze");
    return 0;
}

/* Checks across flags, after all are read. */
/* --model temporal: the reference's defaults (configs/temporal_encoder.yaml) for the shared
 * flags not given, and its data: a curve cache folder, or none (generated at start). */
static int ctrain_cfg__check_temporal(ctrain_cfg_t *c, ct_errbuf_t *eb)
{
    if (!c->set_hidden)
        c->hidden_units = 128;
    if (!c->set_blocks)
        c->num_blocks = 3;
    if (!c->set_heads)
        c->num_heads = 4;
    if (!c->set_dropout)
        c->dropout_rate = 0.1;
    if (!c->set_lr)
        c->lr = 3e-4;
    if (!c->set_warmup)
        c->warmup_steps = 100;
    if (!c->set_clip)
        c->grad_clip = 1.0;
    if (!c->set_lr_schedule)
        c->lr_schedule = CTRAIN_LR_COSINE;
    if (!c->set_lr_floor)
        c->lr_floor = 0.05;
    /* the reference's epochs after its reconstruct_epochs are stage 2's */
    if (c->stage == 1 && !c->cli_epochs && c->yaml_epochs >= 0) {
        const int rest =
            c->yaml_epochs - (c->yaml_reconstruct_epochs >= 0 ? c->yaml_reconstruct_epochs
                                                              : 3 /* the reference's default */);
        if (rest < 1)
            return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                                 "--config: training.num_epochs %d leaves no epoch of stage align "
                                 "after training.reconstruct_epochs (give --num_epochs)",
                                 c->yaml_epochs);
        c->num_epochs = rest;
        c->set_epochs = true;
    }
    if (c->stage == 1 && c->lm_dir[0] == '\0' &&
        (c->lm_hidden_size % c->lm_num_heads != 0 || c->lm_num_heads % c->lm_num_kv_heads != 0))
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "--lm_num_heads %d must divide --lm_hidden_size %d, and "
                             "--lm_num_kv_heads %d must divide it (the tiny random Qwen2)",
                             c->lm_num_heads, c->lm_hidden_size, c->lm_num_kv_heads);
    if (c->pregenerate > 0 && c->output_dir[0] == '\0')
        return ct_errbuf_set(eb, CT_EPARSE, "--pregenerate: needs --output_dir (the cache folder)");
    if (c->pregenerate > 0)
        return 0;
    /* without --dataset ("synthetic", the default) the curves are generated at start */
    if (strncmp(c->dataset, "synthetic", 9) == 0 && c->dataset[9] != '\0')
        return ct_errbuf_set(eb, CT_EPARSE,
                             "--dataset: --model temporal reads a curve cache folder (meta.json, "
                             "curves.npy: ctrain --pregenerate or "
                             "examples/pytorch/pregenerate_temporal_data.py writes one) or, left "
                             "out, generates --num_samples curves; not \"%.100s\"",
                             c->dataset);
    return 0;
}

static int ctrain_cfg__check(ctrain_cfg_t *c, ct_errbuf_t *eb)
{
    if (c->model != CTRAIN_MODEL_TEMPORAL && (c->pregenerate > 0 || c->output_dir[0] != '\0' ||
                                              c->log_dir[0] != '\0' || c->log_interval > 0))
        return ct_errbuf_set(eb, CT_EPARSE, "--%s: only --model temporal takes it",
                             c->pregenerate > 0          ? "pregenerate"
                             : c->output_dir[0] != '\0' ? "output_dir"
                             : c->log_dir[0] != '\0'    ? "log_dir"
                                                        : "log_interval");
    if (c->model == CTRAIN_MODEL_TEMPORAL && c->log_interval == 0)
        c->log_interval = 50; /* the reference's training.log_interval */
    if (c->model == CTRAIN_MODEL_TEMPORAL) {
        int rc = ctrain_cfg__check_temporal(c, eb);
        if (rc != 0)
            return rc;
    } else if (c->config[0] != '\0') {
        return ct_errbuf_set(eb, CT_EPARSE, "--config: only --model temporal takes it");
    }
    if (c->norm_first) {
        if (c->set_layout && c->layout != CTRAIN_LAYOUT_PRE_LN)
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "--norm_first: conflicts with --layout %s (--norm_first means "
                                 "--layout pre_ln)",
                                 ctrain_layout_name(c->layout));
        c->layout = CTRAIN_LAYOUT_PRE_LN;
        c->set_layout = true;
    }
    int rc0 = ctrain_cfg__resolve_model(c, eb);
    if (rc0 != 0)
        return rc0;
    if (c->hidden_units % c->num_heads != 0)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "--num_heads: %d does not divide --hidden_units %d", c->num_heads,
                             c->hidden_units);
    if (strncmp(c->dataset, "synthetic", 9) == 0 &&
        (c->dataset[9] == '\0' || c->dataset[9] == ':')) {
        ctrain_synth_opts_t so;
        int rc = ctrain_synth_parse(c->dataset, &so, eb);
        if (rc != 0)
            return ct_errbuf_wrap(eb, rc, "--dataset");
        if (c->set_min_count)
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "--min_count: the synthetic dataset is generated, not filtered "
                                 "(the count filter applies to tsv and ml1m files)");
    } else if (c->set_min_count && c->data_format == CTRAIN_DATA_SASREC) {
        return ct_errbuf_set(eb, CT_EPARSE,
                             "--min_count: a sasrec file is used as it is (the count filter "
                             "applies to tsv and ml1m files)");
    } else if (access(c->dataset, R_OK) != 0) {
        int e = errno;
        return ct_errbuf_set(eb, CT_EPARSE, "--dataset: cannot read \"%.200s\": %s", c->dataset,
                             strerror(e));
    }
    const ctrain_family_t *fam = ctrain_family(c->model);
    if (c->model == CTRAIN_MODEL_GPT2REC) {
        if (strncmp(c->dataset, "synthetic", 9) == 0 &&
            (c->dataset[9] == '\0' || c->dataset[9] == ':'))
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "--dataset: --model gpt2rec reads ratings (u.data, ratings.dat "
                                 "or \"user item [time]\" lines), not the synthetic sequences");
        if (c->item_text[0] != '\0' && access(c->item_text, R_OK) != 0) {
            int e = errno;
            return ct_errbuf_set(eb, CT_EPARSE, "--item_text: cannot read \"%.200s\": %s",
                                 c->item_text, strerror(e));
        }
    } else if (c->item_text[0] != '\0') {
        return ct_errbuf_set(eb, CT_EPARSE,
                             "--item_text: only --model gpt2rec takes it (this run's model is %s)",
                             ctrain_model_kind_name(c->model));
    }
    if (c->model == CTRAIN_MODEL_LM || c->lm_dir[0] != '\0' || c->eval_dataset[0] != '\0' ||
        c->save_hf[0] != '\0' || c->freeze[0] != '\0' || c->grad_checkpointing) {
        int rc = ctrain_cfg__check_lm(c, eb);
        if (rc != 0)
            return rc;
    }
    if (c->inference_only && c->state_dict_path[0] == '\0' && !fam->own_weights)
        return ct_errbuf_set(eb, CT_EPARSE,
                             "--inference_only: needs --state_dict_path (the weights to "
                             "evaluate)");
    if (c->state_dict_path[0] != '\0' && access(c->state_dict_path, R_OK) != 0) {
        int e = errno;
        return ct_errbuf_set(eb, CT_EPARSE, "--state_dict_path: cannot read \"%.200s\": %s",
                             c->state_dict_path, strerror(e));
    }
    if (c->use_amp && strcmp(c->device, "cpu") == 0)
        return ct_errbuf_set(eb, CT_EPARSE,
                             "--use_amp: bf16 autocast runs on a GPU; --device cpu computes in "
                             "float32 (use --device cuda or auto)");
    /* checked here, so that a job asking for a GPU it does not have fails as a usage error */
    const bool want_cuda = strcmp(c->device, "cuda") == 0;
    if (want_cuda && !ct_ops_have_cuda())
        return ct_errbuf_set(eb, CT_EPARSE,
                             "--device: cuda is not available: this build of ctrain has no CUDA "
                             "(configure with -Dcuda=enabled, or use --device cpu)");
    if (strcmp(c->backend, "nccl") == 0 && !ct_comm_backend_built(CT_COMM_NCCL))
        return ct_errbuf_set(eb, CT_EPARSE,
                             "--backend: nccl needs a build with CUDA and NCCL, which this "
                             "build is not (use --backend ring or auto)");
    if ((want_cuda || strcmp(c->backend, "nccl") == 0) && ct_ops_device_count() < 1) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        return ct_errbuf_set(eb, CT_EPARSE,
                             "--%s: %s needs a GPU and none is visible "
                             "(CUDA_VISIBLE_DEVICES=%s)",
                             want_cuda ? "device" : "backend", want_cuda ? "cuda" : "nccl",
                             vis ? vis : "(unset)");
    }
    if ((int64_t)c->batch_size * c->grad_accum > (1 << 24))
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "--grad_accum: %d x --batch_size %d is over 16777216 users per "
                             "optimizer step",
                             c->grad_accum, c->batch_size);
    return 0;
}

static bool ctrain_cfg__looks_bool(const char *v)
{
    static const char *const w[] = {"true", "false", "1", "0", "yes", "no", "on", "off"};
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        if (strcasecmp(v, w[i]) == 0)
            return true;
    return false;
}

/* ---- --config: the temporal encoder's YAML (examples/pytorch/configs/temporal_encoder.yaml) -- */

typedef enum ctrain_cfg__ytype {
    CT__Y_INT,
    CT__Y_NUM, /* a number; YAML 1.1 reads 1e-4 as a string, accepted as the reference does */
    CT__Y_BOOL,
    CT__Y_STR,  /* a string */
    CT__Y_PATH, /* a string or null */
} ctrain_cfg__ytype_t;

/* Every key the reference reads, its type, and the flag it sets (NULL: a key of the reference
 * that this stage does not use - the DataLoader's and stage 2's - checked for its type and
 * otherwise left alone). */
static const struct ctrain_cfg__ykey {
    const char *section, *key;
    ctrain_cfg__ytype_t type;
    const char *flag;
} ctrain_cfg__ykeys[] = {
    {"data", "cache_dir", CT__Y_PATH, "dataset"},
    {"data", "num_samples", CT__Y_INT, "num_samples"},
    {"data", "seq_len", CT__Y_INT, "seq_len"},
    {"data", "val_fraction", CT__Y_NUM, "val_fraction"},
    {"data", "seed", CT__Y_INT, "data_seed"},
    {"data", "batch_size", CT__Y_INT, "batch_size"}, /* per process: times WORLD_SIZE */
    {"data", "num_workers", CT__Y_INT, NULL},
    {"data", "pin_memory", CT__Y_BOOL, NULL},
    {"data", "prefetch_factor", CT__Y_INT, NULL},
    {"model", "patch_len", CT__Y_INT, "patch_len"},
    {"model", "d_model", CT__Y_INT, "hidden_units"},
    {"model", "num_layers", CT__Y_INT, "num_blocks"},
    {"model", "num_heads", CT__Y_INT, "num_heads"},
    {"model", "ff_dim", CT__Y_INT, "ff_dim"},
    {"model", "dropout", CT__Y_NUM, "dropout_rate"},
    {"model", "num_soft_tokens", CT__Y_INT, "num_soft_tokens"},
    {"model", "mask_ratio", CT__Y_NUM, "mask_ratio"},
    {"model", "gradient_checkpointing", CT__Y_BOOL, NULL},
    {"lm", "path", CT__Y_PATH, "lm_dir"},
    {"lm", "dtype", CT__Y_STR, NULL},
    {"lm", "hidden_size", CT__Y_INT, "lm_hidden_size"},
    {"lm", "num_layers", CT__Y_INT, "lm_num_layers"},
    {"lm", "num_heads", CT__Y_INT, "lm_num_heads"},
    {"lm", "num_kv_heads", CT__Y_INT, "lm_num_kv_heads"},
    {"lm", "intermediate_size", CT__Y_INT, "lm_intermediate_size"},
    {"lm", "seed", CT__Y_INT, "lm_seed"},
    {"lm", "pretrain_steps", CT__Y_INT, "lm_pretrain_steps"},
    {"lm", "prompt", CT__Y_STR, "prompt"},
    {"lm", "max_text_tokens", CT__Y_INT, "max_text_tokens"},
    {"lm", "gradient_checkpointing", CT__Y_BOOL, "grad_checkpointing"},
    {"training", "num_epochs", CT__Y_INT, NULL}, /* stage align: minus reconstruct_epochs */
    {"training", "reconstruct_epochs", CT__Y_INT, "num_epochs"}, /* stage reconstruct's epochs */
    {"training", "learning_rate", CT__Y_NUM, "lr"},
    {"training", "weight_decay", CT__Y_NUM, "weight_decay"},
    {"training", "warmup_steps", CT__Y_INT, "warmup_steps"},
    {"training", "gradient_accumulation_steps", CT__Y_INT, "grad_accum"},
    {"training", "fp16", CT__Y_BOOL, NULL}, /* yaml_fp16: --use_amp on a GPU, float32 on the CPU */
    {"training", "gradient_clip", CT__Y_NUM, "grad_clip"},
    {"training", "seed", CT__Y_INT, "seed"},
    {"training", "log_interval", CT__Y_INT, "log_interval"},
    {"output", "checkpoint_dir", CT__Y_PATH, "train_dir"},
    {"output", "log_dir", CT__Y_PATH, "log_dir"},
};

static int ctrain_cfg__yleaf(void *ctx, const char *sec, const char *key, const char *v,
                             ctrain_yaml_kind_t kind, ct_errbuf_t *eb)
{
    ctrain_cfg_t *c = ctx;
    const struct ctrain_cfg__ykey *y = NULL;
    bool section_known = false;
    for (size_t i = 0; i < sizeof ctrain_cfg__ykeys / sizeof ctrain_cfg__ykeys[0]; i++) {
        section_known |= strcmp(ctrain_cfg__ykeys[i].section, sec) == 0;
        if (strcmp(ctrain_cfg__ykeys[i].section, sec) == 0 &&
            strcmp(ctrain_cfg__ykeys[i].key, key) == 0)
            y = &ctrain_cfg__ykeys[i];
    }
    if (!section_known)
        return ct_errbuf_set(
            eb, CT_EPARSE, "unknown section %.60s (known: data, model, lm, training, output)", sec);
    if (!y)
        return ct_errbuf_set(eb, CT_EPARSE, "unknown key %.60s.%.60s", sec, key);
    static const char *const tname[] = {"an integer", "a number", "true or false", "a string",
                                        "a string or null"};
    bool ok = kind == CTRAIN_YAML_PLAIN || kind == CTRAIN_YAML_QUOTED ||
              (kind == CTRAIN_YAML_NULL && y->type == CT__Y_PATH);
    ct_errbuf_t teb;
    int iv;
    double dv;
    bool bv;
    if (ok && y->type == CT__Y_INT)
        ok = kind == CTRAIN_YAML_PLAIN && ct_parse_int(v, INT32_MIN, INT32_MAX, &iv, &teb) == 0;
    else if (ok && y->type == CT__Y_NUM)
        ok = ct_parse_double(v, -1e300, 1e300, &dv, &teb) == 0;
    else if (ok && y->type == CT__Y_BOOL)
        ok = kind == CTRAIN_YAML_PLAIN && ct_parse_bool(v, &bv, &teb) == 0;
    if (!ok)
        return ct_errbuf_set(eb, CT_EPARSE, "%s.%s = %.60s is not %s", sec, key,
                             v                          ? v
                             : kind == CTRAIN_YAML_NULL ? "null"
                                                        : "a list or mapping",
                             tname[y->type]);
    if (y->type == CT__Y_BOOL && strcmp(sec, "training") == 0 && strcmp(key, "fp16") == 0)
        c->yaml_fp16 = bv;
    if (y->type == CT__Y_INT && kind != CTRAIN_YAML_NULL && strcmp(sec, "training") == 0) {
        if (strcmp(key, "num_epochs") == 0)
            c->yaml_epochs = iv;
        else if (strcmp(key, "reconstruct_epochs") == 0)
            c->yaml_reconstruct_epochs = iv;
    }
    if (!y->flag || kind == CTRAIN_YAML_NULL)
        return 0;
    char buf[64];
    if (strcmp(y->flag, "batch_size") == 0) {
        /* the reference's batch is per process; ctrain's is global */
        const char *w = getenv("WORLD_SIZE");
        long world = w ? strtol(w, NULL, 10) : 1;
        snprintf(buf, sizeof buf, "%lld", (long long)iv * (world > 0 ? world : 1));
        v = buf;
    }
    for (size_t k = 0; k < CT__NFLAGS; k++)
        if (strcmp(ctrain_cfg__flags[k].name, y->flag) == 0) {
            int rc = ctrain_cfg__set(c, &ctrain_cfg__flags[k], v, eb);
            return rc == 0 ? 0 : ct_errbuf_wrap(eb, rc, "%s.%s", sec, key);
        }
    return ct_errbuf_set(eb, -EINVAL, "%s.%s: no flag %s", sec, key, y->flag);
}

/* --config FILE or --config=FILE in argv: its keys, before the flags (which override them). */
static int ctrain_cfg__config(ctrain_cfg_t *c, int argc, char **argv, ct_errbuf_t *eb)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) == 0 &&
            ctrain_cfg__name_eq(argv[i] + 2, strlen(argv[i] + 2), "config") && i + 1 < argc)
            path = argv[i + 1];
        else if (strncmp(argv[i], "--config=", 9) == 0)
            path = argv[i] + 9;
    }
    if (path == NULL)
        return 0;
    int rc = ctrain_yaml_read(path, ctrain_cfg__yleaf, c, eb);
    return rc == 0 ? 0 : ct_errbuf_wrap(eb, rc, "--config %s", path);
}

int ctrain_args_parse(ctrain_cfg_t *c, int argc, char **argv, ctrain_args_action_t *action,
                      ct_errbuf_t *eb)
{
    *action = CTRAIN_ARGS_RUN;
    int rc0 = ctrain_cfg__config(c, argc, argv, eb);
    if (rc0 != 0)
        return rc0;
    const bool yaml_set_epochs = c->set_epochs;
    c->set_epochs = false; /* from here: whether the command line gives --num_epochs */
    bool cli_seed = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0')
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "unexpected argument \"%.80s\" (ctrain takes only --flags; see "
                                 "ctrain --help)",
                                 a);
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        if (ctrain_cfg__name_eq(name, len, "help") && !eq) {
            *action = CTRAIN_ARGS_HELP;
            return 0;
        }
        if (ctrain_cfg__name_eq(name, len, "version") && !eq) {
            *action = CTRAIN_ARGS_VERSION;
            return 0;
        }
        const ctrain_cfg__flag_t *f = NULL;
        for (size_t k = 0; k < CT__NFLAGS && !f; k++)
            if (ctrain_cfg__name_eq(name, len, ctrain_cfg__flags[k].name))
                f = &ctrain_cfg__flags[k];
        if (!f)
            return ct_errbuf_set(eb, CT_EPARSE, "unknown flag --%.*s (see ctrain --help)",
                                 (int)(len > 80 ? 80 : len), name);
        const char *v;
        if (eq) {
            v = eq + 1;
        } else if (f->kind == CT__BOOL) {
            /* Standing alone means true; a following true/false word is its value. */
            v = (i + 1 < argc && ctrain_cfg__looks_bool(argv[i + 1])) ? argv[++i] : "true";
        } else if (i + 1 < argc) {
            v = argv[++i];
        } else {
            return ct_errbuf_set(eb, CT_EPARSE, "--%s: missing value", f->name);
        }
        int rc = ctrain_cfg__set(c, f, v, eb);
        if (rc != 0)
            return ct_errbuf_wrap(eb, rc, "--%s", f->name);
        cli_seed |= strcmp(f->name, "seed") == 0;
    }
    /* pregenerate_temporal_data.py's --seed is the curves' seed */
    if (c->pregenerate > 0 && cli_seed)
        c->data_seed = c->seed;
    c->cli_epochs = c->set_epochs;
    c->set_epochs |= yaml_set_epochs;
    return ctrain_cfg__check(c, eb);
}

json_t *ctrain_cfg_to_json(const ctrain_cfg_t *c)
{
    json_t *o = json_object();
    json_object_set_new(o, "dataset", json_string(c->dataset));
    json_object_set_new(o, "model", json_string(ctrain_model_kind_name(c->model)));
    json_object_set_new(o, "mhc", json_boolean(c->mhc));
    json_object_set_new(o, "mhc_streams", json_integer(c->mhc ? CTRAIN_TRAIN_MHC_STREAMS : 0));
    json_object_set_new(o, "time_span", json_integer(c->time_span));
    json_object_set_new(o, "loss", json_string(ctrain_loss_name(c->loss)));
    json_object_set_new(o, "num_negatives", json_integer(c->num_negatives));
    static const char *const fmt[] = {"auto", "sasrec", "tsv", "ml1m"};
    json_object_set_new(o, "data_format", json_string(fmt[c->data_format]));
    json_object_set_new(o, "min_count", json_integer(c->min_count));
    json_object_set_new(o, "train_dir", json_string(c->train_dir));
    json_object_set_new(o, "batch_size", json_integer(c->batch_size));
    json_object_set_new(o, "lr", json_real(c->lr));
    json_object_set_new(o, "maxlen", json_integer(c->maxlen));
    json_object_set_new(o, "hidden_units", json_integer(c->hidden_units));
    json_object_set_new(o, "num_blocks", json_integer(c->num_blocks));
    json_object_set_new(o, "num_epochs", json_integer(c->num_epochs));
    json_object_set_new(o, "num_heads", json_integer(c->num_heads));
    json_object_set_new(o, "dropout_rate", json_real(c->dropout_rate));
    json_object_set_new(o, "l2_emb", json_real(c->l2_emb));
    json_object_set_new(o, "device", json_string(c->device));
    json_object_set_new(o, "inference_only", json_boolean(c->inference_only));
    json_object_set_new(o, "state_dict_path",
                        c->state_dict_path[0] ? json_string(c->state_dict_path) : json_null());
    json_object_set_new(o, "norm_first", json_boolean(c->layout == CTRAIN_LAYOUT_PRE_LN));
    json_object_set_new(o, "layout", json_string(ctrain_layout_name(c->layout)));
    json_object_set_new(o, "seed", json_integer((json_int_t)c->seed));
    json_object_set_new(o, "eval_every", json_integer(c->eval_every));
    json_object_set_new(o, "eval", json_string(ctrain_eval_mode_name(c->eval)));
    json_object_set_new(o, "backend", json_string(c->backend));
    json_object_set_new(o, "num_workers", json_integer(c->num_workers));
    json_object_set_new(o, "ckpt_every_steps", json_integer(c->ckpt_every_steps));
    json_object_set_new(o, "keep_checkpoints", json_integer(c->keep_checkpoints));
    json_object_set_new(o, "resume", json_string(c->resume_never ? "never" : "auto"));
    json_object_set_new(o, "grad_clip", json_real(c->grad_clip));
    json_object_set_new(o, "warmup_steps", json_integer(c->warmup_steps));
    json_object_set_new(o, "lr_schedule", json_string(ctrain_lr_schedule_name(c->lr_schedule)));
    json_object_set_new(o, "grad_accum", json_integer(c->grad_accum));
    json_object_set_new(o, "lr_scale", json_string(ctrain_lr_scale_name(c->lr_scale)));
    json_object_set_new(o, "base_batch_size", json_integer(c->base_batch_size));
    json_object_set_new(o, "skip_invalid_loss", json_boolean(c->skip_invalid_loss));
    json_object_set_new(o, "threads", json_integer(c->threads));
    json_object_set_new(o, "use_amp", json_boolean(c->use_amp));
    json_object_set_new(o, "collective_timeout", json_real(c->collective_timeout));
    json_object_set_new(o, "overlap_reduction", json_boolean(c->overlap_reduction));
    /* the LM family's, when given */
    const struct {
        const char *key, *v;
    } lm[] = {{"lm_dir", c->lm_dir},
              {"eval_dataset", c->eval_dataset},
              {"save_hf", c->save_hf},
              {"freeze", c->freeze}};
    for (size_t i = 0; i < sizeof lm / sizeof lm[0]; i++)
        if (lm[i].v[0] != '\0')
            json_object_set_new(o, lm[i].key, json_string(lm[i].v));
    if (c->grad_checkpointing)
        json_object_set_new(o, "grad_checkpointing", json_true());
    if (c->model == CTRAIN_MODEL_GPT2REC) {
        json_object_set_new(o, "item_text",
                            c->item_text[0] ? json_string(c->item_text) : json_null());
        json_object_set_new(o, "split", json_string(c->split));
        json_object_set_new(o, "embed_dim", json_integer(c->embed_dim));
        json_object_set_new(o, "max_text_len", json_integer(c->max_text_len));
        json_object_set_new(o, "text_mode", json_string(c->text_mode));
        json_object_set_new(o, "lm_lr", json_real(c->lm_lr));
    }
    if (c->model == CTRAIN_MODEL_TEMPORAL) {
        if (c->config[0] != '\0')
            json_object_set_new(o, "config", json_string(c->config));
        json_object_set_new(o, "stage", json_string(c->stage ? "align" : "reconstruct"));
        if (c->stage == 1) {
            json_object_set_new(o, "num_soft_tokens", json_integer(c->num_soft_tokens));
            json_object_set_new(o, "max_text_tokens", json_integer(c->max_text_tokens));
            json_object_set_new(o, "prompt", json_string(c->prompt));
            if (c->lm_dir[0] == '\0') { /* the tiny random Qwen2 */
                json_object_set_new(o, "lm_hidden_size", json_integer(c->lm_hidden_size));
                json_object_set_new(o, "lm_num_layers", json_integer(c->lm_num_layers));
                json_object_set_new(o, "lm_num_heads", json_integer(c->lm_num_heads));
                json_object_set_new(o, "lm_num_kv_heads", json_integer(c->lm_num_kv_heads));
                json_object_set_new(o, "lm_intermediate_size",
                                    json_integer(c->lm_intermediate_size));
                json_object_set_new(o, "lm_seed", json_integer((json_int_t)c->lm_seed));
                json_object_set_new(o, "lm_pretrain_steps", json_integer(c->lm_pretrain_steps));
            }
        }
        json_object_set_new(o, "patch_len", json_integer(c->patch_len));
        json_object_set_new(o, "ff_dim", json_integer(c->ff_dim));
        json_object_set_new(o, "mask_ratio", json_real(c->mask_ratio));
        json_object_set_new(o, "val_fraction", json_real(c->val_fraction));
        json_object_set_new(o, "weight_decay", json_real(c->weight_decay));
        json_object_set_new(o, "log_dir", json_string(c->log_dir[0] ? c->log_dir : c->train_dir));
        json_object_set_new(o, "log_interval", json_integer(c->log_interval));
        if (strcmp(c->dataset, "synthetic") == 0) { /* generated at start */
            json_object_set_new(o, "num_samples", json_integer((json_int_t)c->num_samples));
            json_object_set_new(o, "seq_len", json_integer(c->seq_len));
            json_object_set_new(o, "data_seed", json_integer((json_int_t)c->data_seed));
        }
    }
    if (c->lr_floor != 0.0)
        json_object_set_new(o, "lr_floor", json_real(c->lr_floor));
    return o;
}

ctrain_model_cfg_t ctrain_train_model_cfg(const ctrain_cfg_t *c, int32_t num_items)
{
    ctrain_model_cfg_t m = {.kind = c->model,
                            .layout = c->layout,
                            .num_items = num_items,
                            .maxlen = c->maxlen,
                            .hidden = c->hidden_units,
                            .num_heads = c->num_heads,
                            .num_blocks = c->num_blocks,
                            .mhc_streams = c->mhc ? CTRAIN_TRAIN_MHC_STREAMS : 0,
                            .time_span = ctrain_family(c->model)->has_time_span ? c->time_span : 0,
                            .dropout = (float)c->dropout_rate,
                            .loss = c->loss,
                            .num_negatives = c->num_negatives};
    return m;
}

double ctrain_train_lr_at(const ctrain_cfg_t *c, int64_t s, int64_t total_steps)
{
    double base = c->lr;
    double ratio = (double)c->batch_size * c->grad_accum / (double)c->base_batch_size;
    if (c->lr_scale == CTRAIN_LR_SCALE_LINEAR)
        base *= ratio;
    else if (c->lr_scale == CTRAIN_LR_SCALE_SQRT)
        base *= sqrt(ratio);
    if (s < c->warmup_steps)
        return base * (double)(s + 1) / (double)c->warmup_steps;
    if (c->lr_schedule == CTRAIN_LR_CONSTANT)
        return base;
    int64_t span = total_steps - c->warmup_steps;
    double t = span > 0 ? (double)(s - c->warmup_steps) / (double)span : 1.0;
    if (t > 1.0)
        t = 1.0;
    if (c->lr_schedule == CTRAIN_LR_LINEAR)
        return base * (1.0 - t);
    const double f = c->lr_floor;
    return base * (f + (1.0 - f) * 0.5 * (1.0 + cos(3.14159265358979323846 * t)));
}
