/*
 * ctrain_train_internal.h - what ctrain_train.c (the loop, checkpoints, resume), ctrain_out.c (what
 * the trainer writes: stdout rows, progress, metrics.jsonl, the event file, summary),
 * ctrain_infer.c and the families' tasks (ctrain_lm_task.c) share. Not for other code.
 *
 * ---- tasks -----------------------------------------------------------------------------------
 * The shared loop (ctrain_train.c) owns the step - micro-batches and accumulation, the one
 * gradient reduction, the NaN check, clipping, Adam, the lr schedule - epochs, checkpoints,
 * exact resume, the outputs and data parallelism. What it trains on and how it judges the model
 * is the family's task (one per family, in ctrain_train.c's table by kind), which the loop asks
 * and never second-guesses:
 *   setup      data; the model configuration (t->mcfg); the samples of an epoch (t->samples,
 *              their target counts t->targets - the loss normaliser - and t->n_samples)
 *   init       after ctrain_model_create: the first weights, the evaluation's set-up
 *   start      after resume: baselines, and the batch stream from t->step (t->loader, whose
 *              fill callback turns a sample into a row of ctrain_batch_t)
 *   evaluate   one evaluation (every rank), and how results are selected on, printed and stored
 *   finish     after the final checkpoint (exports)
 *   infer      --inference_only as a whole
 * A row of ctrain_batch_t means what the family's model reads from ctrain_model_batch_t: the
 * recommender's item sequence, targets and negatives; the LM's token ids (seq) and next-token
 * targets (pos, < 0 for none).
 */
#ifndef CTRAIN_TRAIN_INTERNAL_H
#define CTRAIN_TRAIN_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "ctrain_batch.h"
#include "ctrain_loader.h"
#include "ctrain_data.h"
#include "ctrain_eval.h"
#include "ctrain_model.h"
#include "ct_ops.h"
#include "ctrain_tboard.h"
#include "ctrain_cfg.h"
#include "ctworker.h"

/* The language model's evaluation: lines and predicted tokens (all ranks), the mean next-token
 * cross-entropy and exp of it. */
typedef struct ctrain_lm_result {
    int64_t lines;
    double tokens, loss, perplexity;
} ctrain_lm_result_t;

/* The GPT-2 recommender's evaluation: HR@10, NDCG@10, Recall@20, NDCG@20 averaged over the users
 * with a target in each split (full ranking). */
typedef struct ctrain_gpt2rec_result {
    double valid[4], test[4];
    int64_t valid_users, test_users;
} ctrain_gpt2rec_result_t;
/* The temporal encoder's evaluation (stage reconstruct): the mean squared error over the masked
 * patches of the validation curves, and that of predicting each masked patch by the mean of the
 * curve's visible patches. */
typedef struct ctrain_temporal_result {
    int64_t curves;
    double val_loss, baseline_val_loss; /* stage 2: baseline NaN */
    double shuffled_val_loss;           /* stage 2: descriptions after other curves; else NaN */
} ctrain_temporal_result_t;

/* One evaluation's numbers, as the family's task computes them (a family with numbers of its
 * own adds a member; only its task's hooks read it). */
typedef union ctrain_result {
    ctrain_eval_result_t rec; /* next-item models: HR/NDCG on the validation and test splits */
    ctrain_lm_result_t lm;
    ctrain_gpt2rec_result_t gpt2rec;
    ctrain_temporal_result_t temporal;
} ctrain_result_t;

/* The state a checkpoint carries beyond the buffers and ct_ckpt_meta_t's step. */
typedef struct ctrain_train_state {
    int64_t adam_steps;    /* Adam updates done (skipped steps do not count) */
    int64_t skipped_steps; /* steps skipped for a non-finite loss */
    bool has_best;
    double best_metric; /* the validation metric of the best evaluation */
    int64_t best_epoch, best_step;
    ctrain_result_t best; /* that evaluation (its test numbers are reported, never selected on) */
    double loss_sum;      /* since the last evaluation */
    int64_t loss_steps;
    double positions; /* targets trained on since the last evaluation */
} ctrain_train_state_t;

typedef struct ctrain_task ctrain_task_t;

typedef struct ctrain_trainer {
    const ctrain_cfg_t *cfg;
    const ctrain_task_t *task; /* the family's */
    void *task_state;          /* the task's own (the recommender's lives in the fields below) */
    const ct_worker_env_t *env;
    ct_reducer_t *red;
    bool rank0;

    ctrain_dataset_t ds; /* recommender task */
    ct_ops_t ops;
    ct_errbuf_t ready_eb; /* why an early gradient reduction (ct__grads_ready) failed */
    ctrain_model_cfg_t mcfg;
    ctrain_model_t *model;
    ctrain_evaluator_t ev;           /* recommender task */
    ctrain_eval_result_t popularity; /* recommender task */

    /* training samples (the recommender's: users with >= 2 training items; the LM's: lines) */
    int32_t *samples; /* (n_samples) user ids, line numbers */
    int32_t *targets; /* (n_samples) positions with a target: min(train_len - 1, L) */
    int64_t n_samples;
    ct_shard_t shard; /* global_batch = batch_size * grad_accum */
    int64_t steps_per_epoch, total_steps;
    int micro; /* rows per micro-batch on this rank */
    ctrain_loader_t loader;

    ct_ckpt_dir_t ckpt;
    ct_tensor_view_t *views;
    size_t n_views;

    int64_t step; /* optimizer steps done */
    ctrain_train_state_t st;
    double lr_now;

    /* outputs (rank 0) */
    FILE *metrics;
    ctrain_tboard_t tb;
    bool tb_open;
    bool tty;
    int64_t t_start_ns, t_phase_ns, t_progress_ns;
    bool eta_init; /* eta_step0 / eta_s0: where this process's speed is measured from */
    int64_t eta_step0;
    double eta_s0;
    double train_seconds; /* training time since the last evaluation (this process) */
    /* Targets trained on in those seconds. Unlike st.positions (checkpointed, so a resumed run
     * reports the same train_loss), this restarts at 0 with the process, so positions per
     * second after a resume do not count work done before it. */
    double rate_positions;
    double total_train_seconds; /* this process's training time */
    ctrain_result_t last;
    int64_t last_epoch, last_step;
    bool has_last;
    /* train.log (rank 0, a task with log_stage) */
    FILE *log;
    double step_loss;                    /* the last optimizer step's loss */
    int64_t rate_step0;                  /* the step train_seconds count from */
    char resumed_from[CT_CKPT_NAME_MAX]; /* the checkpoint resumed from, "" for none */
} ctrain_trainer_t;

/* A TensorBoard scalar of an evaluation. */
typedef struct ctrain_scalar {
    const char *tag;
    double v;
} ctrain_scalar_t;
#define CTRAIN_TASK_MAX_SCALARS 16

/* What a family brings to the shared loop (see the top of this file). Every hook is set. */
struct ctrain_task {
    int (*setup)(ctrain_trainer_t *t, ct_errbuf_t *eb);
    int (*init)(ctrain_trainer_t *t, ct_errbuf_t *eb);
    void (*teardown)(ctrain_trainer_t *t);
    /* '#' lines about the model, data and evaluation (rank 0) */
    void (*header)(ctrain_trainer_t *t);
    /* the checkpoint's {"model": ..., "data": ...}, and whether a checkpoint's configuration
     * (all of it) fits this run's model and data: CT_EMISMATCH / CT_EFORMAT with one line that
     * begins "refusing to resume from <dir>/<name>: " */
    json_t *(*ckpt_json)(const ctrain_trainer_t *t);
    int (*check_ckpt)(const ctrain_trainer_t *t, const json_t *config, const char *name,
                      ct_errbuf_t *eb);
    int (*start)(ctrain_trainer_t *t, ct_errbuf_t *eb);
    /* one evaluation; every rank calls it and gets the same numbers */
    int (*evaluate)(ctrain_trainer_t *t, int64_t epoch, ctrain_result_t *r, ct_errbuf_t *eb);
    double (*select)(const ctrain_cfg_t *c, const ctrain_result_t *r); /* higher is better */
    const char *(*selected_on)(const ctrain_cfg_t *c);                 /* its name */
    json_t *(*result_json)(const ctrain_result_t *r);
    int (*result_from_json)(const json_t *o, ctrain_result_t *r);
    /* a stdout row of an evaluation; r NULL: the column header */
    void (*row)(int64_t epoch, int64_t step, double loss, double rate, const ctrain_result_t *r);
    size_t (*scalars)(const ctrain_result_t *r, ctrain_scalar_t *out); /* <= MAX_SCALARS */
    void (*summary)(ctrain_trainer_t *t, json_t *o); /* the task's keys of the summary */
    int (*finish)(ctrain_trainer_t *t, ct_errbuf_t *eb);
    int (*infer)(const ctrain_cfg_t *cfg, const ct_worker_env_t *env, ct_reducer_t *red,
                 ct_errbuf_t *eb);
    /* true: every epoch's checkpoint (the step file at its end, final.safetensors after the
     * last) also bears the name epoch_{e}_step_{s}.safetensors, a hard link kept by retention;
     * e counts the epochs done, s the optimizer steps (ddp_common.ckpt_name's names) */
    bool epoch_names;
    /* NULL, or the name of the stage being trained: then rank 0 writes train.log (--log_dir,
     * else --train_dir; appended to, a line flushed at a time) with the lines of the
     * reference's ddp_common.Log - start, resume, every --log_interval steps, every
     * evaluation, every epoch's checkpoint, the end */
    const char *(*log_stage)(const ctrain_trainer_t *t);
};

/* The task of cfg's model (ctrain_train.c's table). */
const ctrain_task_t *ctrain_task_of(const ctrain_cfg_t *cfg);
extern const ctrain_task_t ctrain_rec_task;      /* SASRec, TiSASRec (ctrain_train.c) */
extern const ctrain_task_t ctrain_lm_task;       /* the LM (ctrain_lm_task.c) */
extern const ctrain_task_t ctrain_gpt2rec_task;  /* GPT2Rec (ctrain_gpt2rec_task.c) */
extern const ctrain_task_t ctrain_temporal_task; /* the temporal encoder (ctrain_temporal_task.c) */

/* ---- ctrain_out.c ---- */
/* A number for JSON: null when it is not finite. */
json_t *ctrain_out_num(double x);
/* "# summary: <o as json_dumps(o, flags)>" on stdout (flushed); takes o's reference (NULL: "{}").
 */
void ctrain_out_print_summary(json_t *o, size_t flags);
json_t *ctrain_out_result_json(const ctrain_eval_result_t *r);
int ctrain_out_result_from_json(const json_t *o, ctrain_eval_result_t *r);
/* '#' header lines about a recommender run (rank 0), and the training line every task prints. */
void ctrain_out_header(ctrain_trainer_t *t);
void ctrain_out_training_line(ctrain_trainer_t *t, const char *rows);
/* The column header and one row per evaluation on stdout (recommender). */
void ctrain_out_row_header(void);
void ctrain_out_row(int64_t epoch, int64_t step, double loss, double pos_per_s,
                    const ctrain_eval_result_t *r);
void ctrain_out_popularity(const ctrain_eval_result_t *r);
/* Progress on stderr: in place on a terminal, a plain line every 10 s otherwise. */
void ctrain_out_progress(ctrain_trainer_t *t, double loss, bool force);
void ctrain_out_progress_clear(ctrain_trainer_t *t);
/* metrics.jsonl and the event file: one evaluation. */
int ctrain_out_metrics(ctrain_trainer_t *t, int64_t epoch, double loss, double pos_per_s,
                       const ctrain_result_t *r, ct_errbuf_t *eb);
/* metrics.jsonl at start: emptied (fresh run) or cut back to records with step <= keep_step
 * (resume), then opened for appending; and the event file. */
int ctrain_out_open(ctrain_trainer_t *t, bool resumed, int64_t keep_step, ct_errbuf_t *eb);
void ctrain_out_close(ctrain_trainer_t *t);
/* train.log (task->log_stage set, rank 0; otherwise nothing): opening it writes the start lines
 * (and the resume line when t->resumed_from is set). */
int ctrain_out_log_open(ctrain_trainer_t *t, ct_errbuf_t *eb);
/* One line of train.log: "YYYY-MM-DD HH:MM:SS " and the text, flushed. No-op when not open. */
void ctrain_out_log(ctrain_trainer_t *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The evaluation line of train.log after an evaluation of epoch (1-based) with result r. */
void ctrain_out_log_eval(ctrain_trainer_t *t, int64_t epoch, double loss, double seconds,
                         const ctrain_result_t *r);
/* The last line of train.log: the run's end with its last evaluation. */
void ctrain_out_log_done(ctrain_trainer_t *t);
/* dir/name <- text, atomically (temporary file, fsync, rename). */
int ctrain_out_write_file(const char *dir, const char *name, const char *text, ct_errbuf_t *eb);
/* The summary object, printed as "# summary: <json>" and written to summary.json. */
json_t *ctrain_out_summary(ctrain_trainer_t *t);

/* ---- ctrain_train.c, shared with ctrain_infer.c ---- */
/* A task's evaluate hook found its selection metric (`what`, e.g. "lm_loss") not finite after
 * epoch: an error naming it (the weights are not finite), or with --skip_invalid_loss a warning
 * on rank 0 and 0. */
int ctrain_train_eval_nonfinite(const ctrain_trainer_t *t, int64_t epoch, const char *what,
                                ct_errbuf_t *eb);
/* Loads --dataset (file or synthetic) into ds. */
int ctrain_train_load_data(const ctrain_cfg_t *cfg, ctrain_dataset_t *ds, ct_errbuf_t *eb);
/* The --device backend: cpu; cuda (device LOCAL_RANK mod the visible devices; CT_ENOGPU with
 * one line when there is none, or when this build has no CUDA); auto = cuda when a device is
 * visible, else cpu. Release with ct_ops_close. */
int ctrain_train_backend(const ctrain_cfg_t *cfg, const ct_worker_env_t *env, ct_ops_t *ops,
                         ct_errbuf_t *eb);
/* The model's shapes against the backend's kernels (CUDA: the fused attention's L and head
 * width, layernorm's width): CT_ERANGE_VALUE with one line, before any step runs. */
int ctrain_train_check_device(const ctrain_model_cfg_t *mc, const ct_ops_t *ops, ct_errbuf_t *eb);
/* TiSASRec needs the dataset's times: CT_EFORMAT with one line when they are missing. */
int ctrain_train_check_data(const ctrain_model_cfg_t *mc, const ctrain_dataset_t *ds,
                            ct_errbuf_t *eb);
/* The evaluation chunk: rows one evaluation forward pass takes. */
int ctrain_train_eval_chunk(const ctrain_cfg_t *cfg, int world);
/* An evaluation with NaN or infinite scores (non-finite weights): without
 * --skip_invalid_loss, CT_ERANGE_VALUE with one line beginning with `when`; with it, 0 and (when
 * speak) one warning line, the result's metrics being NAN already. 0 for finite scores. */
int ctrain_train_check_scores(const ctrain_cfg_t *cfg, const ctrain_eval_result_t *r, bool speak,
                              const char *when, ct_errbuf_t *eb);
/* The recommender's --inference_only (ctrain_infer.c). */
int ctrain_infer_rec(const ctrain_cfg_t *cfg, const ct_worker_env_t *env, ct_reducer_t *red,
                     ct_errbuf_t *eb);
/* ctrain_out_write_file's JSON form: dir/name <- o indented (o is not taken). */
int ctrain_out_write_json(const char *dir, const char *name, const json_t *o, ct_errbuf_t *eb);

#endif /* CTRAIN_TRAIN_INTERNAL_H */
