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
 *   - comm (ct_reducer_open with a communicator of more than one rank): the calls go to
 *     ct_comm_allreduce (SUM) and ct_comm_broadcast of libctworker's communicator, the CPU
 *     ring or NCCL. On the ring every rank receives the same bits (ctworker.h section 7 gives
 *     the summation order), so decisions taken from reduced values - skipping a step with a
 *     non-finite loss, clipping, the best checkpoint - agree on all ranks.
 *
 * What is deliberately not here: averaging (callers scale by 1 / global count before summing,
 * so the result never depends on W), barriers, point-to-point messages.
 */
#ifndef CT_REDUCE_H
#define CT_REDUCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ct_config.h"
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
    ct_comm_t *comm;   /* the communicator given to ct_reducer_open (also for world 1), or NULL */
    bool device_async; /* allreduce_f32 returns before the sum is done (ordered on the device) */
    /* buf[i] <- sum over ranks of buf[i], i < n. */
    int (*allreduce_f32)(ct_reducer_t *r, float *buf, int64_t n, ct_errbuf_t *eb);
    /* Optional (NULL: not offered): the ranges {offset, length} of buf are final for this
     * reduction (in the order of the device's work) and may be reduced now, while the caller
     * still computes the rest; the next allreduce_f32 over buf then reduces only what was not
     * given here. For the backward pass to overlap the gradient reduction (ctrain_model.h's
     * grads_ready). Every rank gives the same ranges in the same order. */
    int (*allreduce_f32_early)(ct_reducer_t *r, float *buf, const int64_t (*ranges)[2], int n,
                               ct_errbuf_t *eb);
    int (*allreduce_f64)(ct_reducer_t *r, double *buf, int64_t n, ct_errbuf_t *eb);
    /* buf (nbytes) <- root's buf. */
    int (*broadcast)(ct_reducer_t *r, void *buf, size_t nbytes, int root, ct_errbuf_t *eb);
    void (*close)(ct_reducer_t *r);
};

/* The single-process reducer (rank 0 of 1). */
void ct_reducer_local_init(ct_reducer_t *r);

/* The reducer over comm: local when comm is NULL or has one rank (the identity, exactly), the
 * communicator otherwise. The reducer borrows comm, which must outlive it. */
int ct_reducer_open(ct_reducer_t *r, ct_comm_t *comm, ct_errbuf_t *eb);

/* Closes the reducer; safe on a closed one. */
void ct_reducer_close(ct_reducer_t *r);

#if CT_HAVE_NCCL
/* Makes r's float all-reduce the bucketed, stream-ordered NCCL reduction of device buffers
 * (ct_reduce_nccl.c): buckets of bucket_bytes on a communication stream that waits for the work
 * queued on compute_stream (a cudaStream_t) and that compute_stream then waits for; no host
 * synchronisation; allreduce_f32_early starts buckets while the backward pass still runs; a
 * watchdog thread ends the process through ct_worker_fail (error file, non-zero exit) when a
 * reduction has not completed within timeout_ms (<= 0: the communicator's timeout) or NCCL reports
 * an asynchronous error. r must have been opened over an NCCL communicator (any world size, 1
 * included). Returns 0, -EINVAL, -ENOMEM, CT_ECUDA. */
int ct_reducer_nccl_attach(ct_reducer_t *r, void *compute_stream, size_t bucket_bytes,
                           int64_t timeout_ms, ct_errbuf_t *eb);
#endif

#ifdef __cplusplus
}
#endif

#endif /* CT_REDUCE_H */
