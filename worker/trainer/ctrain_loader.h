/*
 * ctrain_loader.h - the stream of training micro-batches one rank consumes, in order: for every
 * optimizer step from a start step on, this rank's slice of the step's global batch
 * (ct_shard_range over the epoch's permutation) cut into chunks of at most `micro` rows, each
 * filled by the caller's fill function (the recommender's ctrain_batch_fill_train, the LM's
 * token copy) keyed by the example's global index (epoch * samples + permutation position). A step
 * whose slice is empty on this rank (fewer users than ranks in a last partial batch) still yields
 * one empty chunk, so every rank takes part in every step's reduction.
 *
 * With threaded = true (--num_workers >= 1) one background thread builds the next chunk while
 * the trainer computes on the current one (two buffers); otherwise chunks are built on the
 * caller's thread when asked for. The chunks are the same either way: every draw is keyed,
 * nothing depends on timing.
 *
 * Not here: what a sample is (the trainer passes the samples, their target counts and how a
 * sample becomes a row),
 * the model, the reduction.
 */
#ifndef CTRAIN_LOADER_H
#define CTRAIN_LOADER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "ctrain_batch.h"
#include "ctrain_data.h"
#include "ctworker.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ctrain_train_chunk {
    ctrain_batch_t batch; /* micro rows, the first n filled */
    int n;                /* rows, 0 for a rank with nothing in this step */
    int64_t step;         /* the optimizer step (global count from 0) */
    int64_t epoch;
    int64_t row0;   /* index of row 0 in the step's global batch */
    double targets; /* target positions in the whole global batch of the step */
    bool last;      /* the step's last chunk on this rank */
} ctrain_train_chunk_t;

/* Row r of b <- sample `sample` (a user, a line), keyed by key for any random draw. */
typedef void (*ctrain_loader_fill_t)(const void *ctx, ctrain_batch_t *b, int r, int32_t sample,
                                     uint64_t seed, uint64_t key);

typedef struct ctrain_loader {
    /* what to read */
    ctrain_loader_fill_t fill;
    const void *fill_ctx;
    const int32_t *samples; /* (n_samples) user of each sample */
    const int32_t *targets; /* (n_samples) targets of each sample */
    ct_shard_t shard;       /* global_batch = the optimizer batch */
    int micro;
    uint64_t seed;
    /* where the producer is */
    int64_t step, off, total_steps;
    int64_t *perm, perm_epoch;
    double step_targets;
    /* two chunk buffers; without a thread only chunk[0] is used */
    ctrain_train_chunk_t chunk[2];
    bool threaded;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int filled; /* chunks ready (0..2) */
    int head;   /* index of the next chunk to hand out */
    int held;   /* 1 while the consumer holds the chunk it was given */
    bool stop;
    bool started;
} ctrain_loader_t;

/* Sets up the stream from start_step to total_steps. Chunks carry TiSASRec's times when
 * with_time, and row_neg negatives per row when row_neg > 0 (the sampled softmax). Returns 0
 * or -ENOMEM / a pthread error (eb says which). */
int ctrain_loader_init(ctrain_loader_t *b, ctrain_loader_fill_t fill, const void *fill_ctx,
                       const int32_t *samples, const int32_t *targets, const ct_shard_t *shard,
                       int micro, int L, bool with_time, int row_neg, uint64_t seed,
                       int64_t start_step, int64_t total_steps, bool threaded, ct_errbuf_t *eb);

/* The next chunk, valid until the next call (or close). Must not be called past the last
 * chunk of total_steps. */
const ctrain_train_chunk_t *ctrain_loader_next(ctrain_loader_t *b);

/* Stops the thread and frees everything; safe on a zeroed batcher. */
void ctrain_loader_close(ctrain_loader_t *b);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_LOADER_H */
