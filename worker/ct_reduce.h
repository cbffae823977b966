/*
 * ct_reduce.h - the small reduction interface ctrain's data-parallel path is written against:
 * a sum-allreduce of floats (the flat gradient buffer, once per optimizer step, with the step's
 * loss riding in its tail), a sum-allreduce of doubles (evaluation counts and sums) and a
 * broadcast of bytes (the checkpoint name rank 0 resumes from). Every rank makes the same calls
 * in the same order; buffers are the model backend's memory for the float reduction (device
 * memory on a GPU) and host memory for the other two.
 *
 * Implementations:
 *   - local (ct_reducer_local_init): one process, world size 1. Every call is the identity,
 *     which is exactly a sum over one rank, so a single-process run computes what a W-rank run
 *     computes up to the order of floating-point summation.
 *   - the CPU ring and NCCL communicators of libctworker plug in by filling the same struct
 *     (the lead connects them; see ct_reducer_open).
 *
 * What is deliberately not here: averaging (callers scale by 1 / global count before summing,
 * so the result never depends on W), barriers, point-to-point messages.
 */
#ifndef CT_REDUCE_H
#define CT_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "ct_error.h"
#include "ctworker.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_reducer ct_reducer_t;

struct ct_reducer {
    int rank, world_size;
    const char *name; /* "local", "ring", "nccl" */
    void *impl;
    /* buf[i] <- sum over ranks of buf[i], i < n. */
    int (*allreduce_f32)(ct_reducer_t *r, float *buf, int64_t n, ct_errbuf_t *eb);
    int (*allreduce_f64)(ct_reducer_t *r, double *buf, int64_t n, ct_errbuf_t *eb);
    /* buf (nbytes) <- root's buf. */
    int (*broadcast)(ct_reducer_t *r, void *buf, size_t nbytes, int root, ct_errbuf_t *eb);
    void (*close)(ct_reducer_t *r);
};

/* The single-process reducer (rank 0 of 1). */
void ct_reducer_local_init(ct_reducer_t *r);

/* The reducer for this process's environment: local when env->world_size == 1. With
 * WORLD_SIZE > 1 it needs a communicator; until libctworker has one this returns CT_ENOTBUILT
 * with one line in eb saying so (ranks must never silently train alone). backend is the
 * --backend value ("auto", "ring", "nccl"). */
int ct_reducer_open(ct_reducer_t *r, const ct_worker_env_t *env, const char *backend,
                    ct_errbuf_t *eb);

/* Closes the reducer; safe on a closed one. */
void ct_reducer_close(ct_reducer_t *r);

#ifdef __cplusplus
}
#endif

#endif /* CT_REDUCE_H */
