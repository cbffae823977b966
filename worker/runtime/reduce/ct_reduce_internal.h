/*
 * ct_reduce_internal.h - the reducer's state (ctworker.h section 8), shared by the generic
 * reducer (ct_reduce.c), the staging of device buffers through host memory (ct_reduce_device.c,
 * CUDA builds) and the bucketed NCCL reduction (ct_reduce_nccl.c, NCCL builds). Not installed.
 */
#ifndef CT_REDUCE_INTERNAL_H
#define CT_REDUCE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctworker.h"

#pragma GCC visibility push(hidden)

typedef struct ct_reduce_nccl ct_reduce_nccl_t;

struct ct_reducer {
    const char *name;
    int rank, world_size;
    ct_comm_t *comm;         /* the communicator, or NULL (one process, or custom) */
    ct_reducer_backend_t be; /* the custom backend when has_be */
    bool has_be;
    bool device;            /* float buffers are device memory (ct_reducer_use_device) */
    void *stream;           /* the caller's cudaStream_t */
    float *stage;           /* host staging of device buffers over a host backend */
    size_t stage_cap;       /* floats in stage */
    ct_reduce_nccl_t *nccl; /* the bucketed NCCL reduction of device buffers, or NULL */
};

/* A SUM allreduce of host memory through the communicator or the custom backend (ct_reduce.c). */
int ct__reduce_host_sum(ct_reducer_t *r, void *buf, int64_t n, ct_dtype_t dtype, ct_errbuf_t *eb);

/* ct_reduce_device.c: the sum of a device buffer through host memory (synchronises r->stream,
 * copies to r->stage, reduces, copies back on the stream). */
int ct__reduce_staged_f32(ct_reducer_t *r, float *dbuf, int64_t n, ct_errbuf_t *eb);
void ct__reduce_stage_free(ct_reducer_t *r);

/* ct_reduce_nccl.c: the bucketed reduction over r->comm's NCCL communicator. */
int ct__reduce_nccl_open(ct_reducer_t *r, const ct_reducer_device_t *dev, ct_errbuf_t *eb);
int ct__reduce_nccl_ready(ct_reducer_t *r, float *buf, const int64_t (*ranges)[2], int n,
                          ct_errbuf_t *eb);
int ct__reduce_nccl_sum(ct_reducer_t *r, float *buf, int64_t n, ct_errbuf_t *eb);
void ct__reduce_nccl_close(ct_reducer_t *r);

#pragma GCC visibility pop

#endif /* CT_REDUCE_INTERNAL_H */
