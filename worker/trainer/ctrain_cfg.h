/*
 * ctrain_cfg.h - ctrain's configuration: every command-line flag, its parsing, args.json,
 * and the pure functions derived from the configuration (learning rate at a step).
 *
 * Flags are SASRec.pytorch's (--dataset --train_dir --batch_size --lr --maxlen --hidden_units
 * --num_blocks --num_epochs --num_heads --dropout_rate --l2_emb --device --inference_only
 * --state_dict_path --norm_first), TiSASRec.pytorch's (--time_span) plus ctrain's own; each is
 * accepted as --a_b and --a-b, with the value in the next argument or after '='. Boolean flags
 * also stand alone (--norm_first) and take true/false the way SASRec.pytorch's str2bool does
 * (--inference_only true). A bad value or an unknown flag is one line naming the flag; the
 * caller exits 2.
 *
 * The model: TiSASRec with mHC residual streams by default (the seed guide's first variant);
 * --no_mhc, --no_time (= --model sasrec) and both give the other three. Flags left out take
 * the reference's value for the chosen model: SASRec.pytorch's (maxlen 200, l2_emb 0, 1000
 * epochs, layout post_ln) or TiSASRec.pytorch's (maxlen 50, l2_emb 5e-5, 201 epochs, its own
 * layout original2020); mHC runs on pre_ln.
 *
 * --model lm trains a GPT-2 or Qwen2 causal LM from --lm_dir on --dataset's lines (the
 * recommender's --mhc and --inference_only's --state_dict_path do not apply; --maxlen caps the
 * tokens per line below the model's max positions).
 *
 * --model gpt2rec trains the GPT-2 recommender (--dataset ratings, --item_text, --split,
 * --embed_dim; --lm_dir adds the text side); its family sets --batch_size's default (2048).
 *
 * Not here: what the flags do (ctrain_train.c, ctrain_eval.c), the dataset (ctrain_data.h).
 */
#ifndef CTRAIN_CFG_H
#define CTRAIN_CFG_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "ctrain_data.h"
#include "ct_error.h"
#include "ctrain_model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CTRAIN_TRAIN_PATH_MAX 4096

typedef enum ctrain_eval_mode {
    CTRAIN_EVAL_MODE_SAMPLED = 1, /* 100 sampled negatives (the papers' protocol) */
    CTRAIN_EVAL_MODE_FULL = 2,    /* every item except the user's history */
    CTRAIN_EVAL_MODE_BOTH = 3,
} ctrain_eval_mode_t;

typedef enum ctrain_lr_schedule {
    CTRAIN_LR_CONSTANT = 0,
    CTRAIN_LR_LINEAR = 1, /* linear decay to 0 at the last step */
    CTRAIN_LR_COSINE = 2, /* half a cosine to 0 at the last step */
} ctrain_lr_schedule_t;

typedef enum ctrain_lr_scale {
    CTRAIN_LR_SCALE_NONE = 0,
    CTRAIN_LR_SCALE_LINEAR = 1, /* lr * B / base_batch_size */
    CTRAIN_LR_SCALE_SQRT = 2,   /* lr * sqrt(B / base_batch_size) */
} ctrain_lr_scale_t;

typedef struct ctrain_cfg {
    /* SASRec.pytorch's flags */
    char dataset[CTRAIN_TRAIN_PATH_MAX]; /* a file, or synthetic[:key=value,...] */
    char train_dir[CTRAIN_TRAIN_PATH_MAX];
    int batch_size; /* global, over all ranks */
    double lr;
    int maxlen, hidden_units, num_blocks, num_epochs, num_heads;
    double dropout_rate, l2_emb;
    char device[16]; /* cpu, auto (cuda when a GPU is visible), cuda (CUDA builds only) */
    bool inference_only;
    char state_dict_path[CTRAIN_TRAIN_PATH_MAX]; /* "" when not given */
    bool norm_first;
    /* ctrain's */
    ctrain_layout_t layout;
    ctrain_data_format_t data_format;
    int min_count; /* tsv/ml1m files: rows whose user or item has fewer rows are dropped */
    uint64_t seed;
    int eval_every; /* epochs; 0 = only after the last */
    ctrain_eval_mode_t eval;
    char backend[16];         /* auto, ring, nccl */
    int num_workers;          /* >= 1: a thread prefetches batches (ctrain_loader.h) */
    int64_t ckpt_every_steps; /* 0 = only at epoch ends */
    int keep_checkpoints;
    bool resume_never;
    double grad_clip; /* 0 = off */
    int64_t warmup_steps;
    ctrain_lr_schedule_t lr_schedule;
    int grad_accum;
    ctrain_lr_scale_t lr_scale;
    int base_batch_size;
    bool skip_invalid_loss;
    int threads;
    bool use_amp;              /* bf16 autocast of the matrix products (CUDA backend only) */
    double collective_timeout; /* seconds; 0: the worker's default */
    bool overlap_reduction;    /* NCCL: start gradient buckets during the backward pass */
    ctrain_model_kind_t model; /* --model sasrec|tisasrec, --no_time = sasrec */
    bool mhc;                  /* --mhc / --no_mhc */
    bool no_mhc, no_time;      /* as given (resolved into mhc and model) */
    int time_span;             /* TiSASRec's interval clip */
    ctrain_loss_t loss;
    int num_negatives; /* --loss sampled_ce */
    /* the LM family (--model lm) */
    char lm_dir[CTRAIN_TRAIN_PATH_MAX]; /* the Hugging Face folder: config, weights, tokenizer */
    char eval_dataset[CTRAIN_TRAIN_PATH_MAX]; /* validation lines ("": --dataset itself) */
    char save_hf[CTRAIN_TRAIN_PATH_MAX];      /* after training, a folder transformers loads */
    char freeze[CTRAIN_TRAIN_PATH_MAX];       /* comma-separated tensor-name prefixes */
    bool grad_checkpointing; /* activations recomputed block by block in the backward */
    /* the GPT-2 recommender (--model gpt2rec; --lm_dir gives it a text side) */
    char item_text[CTRAIN_TRAIN_PATH_MAX]; /* u.item, movies.dat or "id<TAB>text" lines */
    char split[CTRAIN_TRAIN_PATH_MAX];     /* "train,validation,test" fractions per user */
    int embed_dim;                         /* D */
    int max_text_len;                      /* tokens of an item's text the LM reads */
    char text_mode[CTRAIN_TRAIN_PATH_MAX]; /* cached (the LM once per item) or dynamic (fine-tuned)
                                            */
    double lm_lr;                          /* dynamic: the LM's learning rate */
    /* the temporal encoder (--model temporal) */
    char config[CTRAIN_TRAIN_PATH_MAX]; /* --config: the reference's YAML, read before the flags */
    int patch_len, ff_dim;
    double mask_ratio, val_fraction, weight_decay;
    double lr_floor; /* the cosine schedule decays to lr * lr_floor (0: to 0) */
    int stage;       /* 0 reconstruct, 1 align (soft tokens into the frozen --lm_dir) */
    int num_soft_tokens, max_text_tokens;     /* align: K soft tokens; description tokens + eos */
    int yaml_epochs, yaml_reconstruct_epochs; /* --config's training.num_epochs and
                                                 reconstruct_epochs, -1 when absent */
    bool cli_epochs;                          /* --num_epochs was given on the command line */
    bool yaml_fp16; /* --config's training.fp16: bf16 autocast (--use_amp) where a GPU trains */
    char prompt[CTRAIN_TRAIN_PATH_MAX]; /* align: the text between soft tokens and description */
    /* align without --lm_dir: the tiny random Qwen2 (config lm.*) and its word-level tokenizer */
    int lm_hidden_size, lm_num_layers, lm_num_heads, lm_num_kv_heads, lm_intermediate_size;
    int lm_pretrain_steps;
    uint64_t lm_seed;
    /* --pregenerate: N curves of temporal_curves.py's generator into --output_dir */
    int64_t pregenerate;
    int seq_len;
    uint64_t data_seed;
    int64_t num_samples; /* without --dataset: curves generated at start (data.num_samples) */
    char log_dir[CTRAIN_TRAIN_PATH_MAX]; /* train.log's folder ("": --train_dir) */
    int log_interval;                    /* a train.log line every N steps (0: not given) */
    char output_dir[CTRAIN_TRAIN_PATH_MAX];
    /* which model flags were given (inference adopts a checkpoint's values for the others) */
    bool set_maxlen, set_hidden, set_blocks, set_heads, set_layout;
    bool set_model, set_mhc, set_time_span, set_l2, set_epochs, set_num_negatives, set_eval_every;
    bool set_min_count;
    bool set_lr_schedule, set_lr_floor, set_dropout, set_batch, set_lr, set_warmup, set_clip;
    bool set_mhc_flag, set_no_mhc_flag; /* which of --mhc / --no_mhc were given */
} ctrain_cfg_t;

/* mHC's stream count when --mhc is on (the seed guide's n = 4). */
#define CTRAIN_TRAIN_MHC_STREAMS 4

/* The layout a model runs when --layout is not given: pre_ln with mHC, else the reference's
 * (post_ln for SASRec HEAD, original2020 for TiSASRec). */
ctrain_layout_t ctrain_train_default_layout(ctrain_model_kind_t model, bool mhc);

/* The defaults: TiSASRec.pytorch's (main.py) for the default model (TiSASRec with mHC) and
 * ctrain's. */
void ctrain_cfg_default(ctrain_cfg_t *cfg);

/* Sets the values that depend on the model (layout, maxlen, l2_emb, num_epochs) to the chosen
 * model's defaults, except those given as flags (the set_* fields): SASRec.pytorch's (post_ln,
 * 200, 0, 1000) or TiSASRec.pytorch's (original2020, 50, 5e-5, 201), pre_ln with mHC. For code
 * that fills a configuration by hand after changing model or mhc. */
void ctrain_train_model_defaults(ctrain_cfg_t *cfg);

typedef enum ctrain_args_action {
    CTRAIN_ARGS_RUN = 0,
    CTRAIN_ARGS_HELP = 1,
    CTRAIN_ARGS_VERSION = 2,
} ctrain_args_action_t;

/* Parses argv[1..argc-1] into cfg (which holds the defaults). Returns 0 with *action, or
 * CT_EPARSE / CT_ERANGE_VALUE with one line in eb ("--batch_size: \"x\" is not an integer"). */
int ctrain_args_parse(ctrain_cfg_t *cfg, int argc, char **argv, ctrain_args_action_t *action,
                      ct_errbuf_t *eb);

/* The --help text (every flag, one line each). */
void ctrain_args_usage(FILE *out);

/* Every resolved setting as a JSON object (args.json). */
json_t *ctrain_cfg_to_json(const ctrain_cfg_t *cfg);

/* The model configuration the flags describe (num_items from the dataset). */
ctrain_model_cfg_t ctrain_train_model_cfg(const ctrain_cfg_t *cfg, int32_t num_items);

const char *ctrain_lr_schedule_name(ctrain_lr_schedule_t s);
const char *ctrain_lr_scale_name(ctrain_lr_scale_t s);

/* The learning rate of optimizer step s (0-based) of total_steps:
 *   base = lr, times B/base_batch_size (linear) or its square root (sqrt), B being the
 *          optimizer batch batch_size * grad_accum;
 *   warmup: base * (s + 1) / warmup_steps while s < warmup_steps;
 *   then constant base, or base * (1 - t) (linear), or base * (f + (1 - f) (1 + cos(pi t)) / 2)
 *   (cosine, f = lr_floor),
 *   with t = (s - warmup_steps) / (total_steps - warmup_steps), the fraction of the decay
 *   phase done. */
double ctrain_train_lr_at(const ctrain_cfg_t *cfg, int64_t s, int64_t total_steps);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_CFG_H */
