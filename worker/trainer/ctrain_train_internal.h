/*
 * ctrain_train_internal.h - what ctrain_train.c (the loop, checkpoints, resume), ctrain_out.c (what
 * the trainer writes: stdout rows, progress, metrics.jsonl, the event file, summary) and
 * ctrain_infer.c share. Not for other code.
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

/* The state a checkpoint carries beyond the buffers and ct_ckpt_meta_t's step. */
typedef struct ctrain_train_state {
    int64_t adam_steps;    /* Adam updates done (skipped steps do not count) */
    int64_t skipped_steps; /* steps skipped for a non-finite loss */
    bool has_best;
    double best_metric; /* the validation metric of the best evaluation */
    int64_t best_epoch, best_step;
    ctrain_eval_result_t
        best;        /* that evaluation (its test numbers are reported, never selected on) */
    double loss_sum; /* since the last evaluation */
    int64_t loss_steps;
    double positions; /* targets trained on since the last evaluation */
} ctrain_train_state_t;

typedef struct ctrain_trainer {
    const ctrain_cfg_t *cfg;
    const ct_worker_env_t *env;
    ct_reducer_t *red;
    bool rank0;

    ctrain_dataset_t ds;
    ct_ops_t ops;
    ct_errbuf_t ready_eb; /* why an early gradient reduction (ct__grads_ready) failed */
    ctrain_model_cfg_t mcfg;
    ctrain_model_t *model;
    ctrain_evaluator_t ev;
    ctrain_eval_result_t popularity;

    /* training samples: users with >= 2 training items */
    int32_t *samples; /* (n_samples) user ids */
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
    ctrain_eval_result_t last;
    int64_t last_epoch, last_step;
    bool has_last;
} ctrain_trainer_t;

/* ---- ctrain_out.c ---- */
json_t *ctrain_out_result_json(const ctrain_eval_result_t *r);
int ctrain_out_result_from_json(const json_t *o, ctrain_eval_result_t *r);
/* '#' header lines about the run (rank 0). */
void ctrain_out_header(ctrain_trainer_t *t);
/* The column header and one row per evaluation on stdout. */
void ctrain_out_row_header(void);
void ctrain_out_row(int64_t epoch, int64_t step, double loss, double pos_per_s,
                    const ctrain_eval_result_t *r);
void ctrain_out_popularity(const ctrain_eval_result_t *r);
/* Progress on stderr: in place on a terminal, a plain line every 10 s otherwise. */
void ctrain_out_progress(ctrain_trainer_t *t, double loss, bool force);
void ctrain_out_progress_clear(ctrain_trainer_t *t);
/* metrics.jsonl and the event file: one evaluation. */
int ctrain_out_metrics(ctrain_trainer_t *t, int64_t epoch, double loss, double pos_per_s,
                       const ctrain_eval_result_t *r, ct_errbuf_t *eb);
/* metrics.jsonl at start: emptied (fresh run) or cut back to records with step <= keep_step
 * (resume), then opened for appending; and the event file. */
int ctrain_out_open(ctrain_trainer_t *t, bool resumed, int64_t keep_step, ct_errbuf_t *eb);
void ctrain_out_close(ctrain_trainer_t *t);
/* dir/name <- text, atomically (temporary file, fsync, rename). */
int ctrain_out_write_file(const char *dir, const char *name, const char *text, ct_errbuf_t *eb);
/* The summary object, printed as "# summary: <json>" and written to summary.json. */
json_t *ctrain_out_summary(ctrain_trainer_t *t);

/* ---- ctrain_train.c, shared with ctrain_infer.c ---- */
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

#endif /* CTRAIN_TRAIN_INTERNAL_H */
