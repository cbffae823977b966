/*
 * ct_reduce.c - the single-process reducer, and the reducer over a libctworker communicator
 * (CPU ring or NCCL). The communicators themselves, their timeouts and failure handling live in
 * libctworker; this file only adapts the calls.
 */
#include "ct_reduce.h"

#include <string.h>

static int ct__local_f32(ct_reducer_t *r, float *buf, int64_t n, ct_errbuf_t *eb)
{
    (void)r, (void)buf, (void)n, (void)eb;
    return 0; /* the sum over one rank */
}

static int ct__local_f64(ct_reducer_t *r, double *buf, int64_t n, ct_errbuf_t *eb)
{
    (void)r, (void)buf, (void)n, (void)eb;
    return 0;
}

static int ct__local_broadcast(ct_reducer_t *r, void *buf, size_t nbytes, int root, ct_errbuf_t *eb)
{
    (void)r, (void)buf, (void)nbytes;
    if (root != 0)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "broadcast from rank %d in a world of 1", root);
    return 0;
}

static void ct__local_close(ct_reducer_t *r)
{
    (void)r;
}

void ct_reducer_local_init(ct_reducer_t *r)
{
    *r = (ct_reducer_t){.rank = 0,
                        .world_size = 1,
                        .name = "local",
                        .allreduce_f32 = ct__local_f32,
                        .allreduce_f64 = ct__local_f64,
                        .broadcast = ct__local_broadcast,
                        .close = ct__local_close};
}

static int ct__comm_f32(ct_reducer_t *r, float *buf, int64_t n, ct_errbuf_t *eb)
{
    return ct_comm_allreduce(r->impl, buf, n, CT_DTYPE_F32, CT_COMM_SUM, eb);
}

static int ct__comm_f64(ct_reducer_t *r, double *buf, int64_t n, ct_errbuf_t *eb)
{
    return ct_comm_allreduce(r->impl, buf, n, CT_DTYPE_F64, CT_COMM_SUM, eb);
}

static int ct__comm_broadcast(ct_reducer_t *r, void *buf, size_t nbytes, int root, ct_errbuf_t *eb)
{
    return ct_comm_broadcast(r->impl, buf, nbytes, root, eb);
}

int ct_reducer_open(ct_reducer_t *r, ct_comm_t *comm, ct_errbuf_t *eb)
{
    (void)eb;
    memset(r, 0, sizeof *r);
    if (comm == NULL || ct_comm_size(comm) == 1) {
        ct_reducer_local_init(r);
        r->comm = comm;
        return 0;
    }
    *r = (ct_reducer_t){.rank = ct_comm_rank(comm),
                        .world_size = ct_comm_size(comm),
                        .name = ct_comm_backend(comm) == CT_COMM_NCCL ? "nccl" : "ring",
                        .impl = comm,
                        .comm = comm,
                        .allreduce_f32 = ct__comm_f32,
                        .allreduce_f64 = ct__comm_f64,
                        .broadcast = ct__comm_broadcast,
                        .close = ct__local_close};
    return 0;
}

void ct_reducer_close(ct_reducer_t *r)
{
    if (r->close)
        r->close(r);
    memset(r, 0, sizeof *r);
}
