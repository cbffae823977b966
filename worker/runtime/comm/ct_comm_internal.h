/*
 * ct_comm_internal.h - the inside of a communicator: the table each backend fills, the state
 * every backend shares (rank, size, timeout, sequence number, the sticky failure), the
 * constructors ct_worker_init calls (and tests call directly, with a store client of their
 * own), and the element-wise reductions of the CPU ring. Not installed.
 *
 * The generic layer (ct_comm.c) checks arguments, turns the timeout into a deadline, counts
 * collectives and, when a backend fails, records the failure and aborts the backend; backends
 * only move data.
 */
#ifndef CT_COMM_INTERNAL_H
#define CT_COMM_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ct_config.h"
#include "ct_error.h"
#include "ct_store_client.h"
#include "ctworker.h"

#pragma GCC visibility push(hidden)

typedef struct ct__comm_ops {
    /* dtype, op and sizes already checked; zero-sized calls still synchronise. */
    int (*allreduce)(ct_comm_t *c, void *buf, int64_t count, ct_dtype_t dtype, ct_comm_op_t op,
                     int64_t deadline, ct_errbuf_t *eb);
    int (*broadcast)(ct_comm_t *c, void *buf, size_t nbytes, int root, int64_t deadline,
                     ct_errbuf_t *eb);
    int (*allgather)(ct_comm_t *c, const void *sendbuf, void *recvbuf, size_t nbytes,
                     int64_t deadline, ct_errbuf_t *eb);
    int (*barrier)(ct_comm_t *c, int64_t deadline, ct_errbuf_t *eb);
    /* After a failure: release the connections / abort the NCCL communicator, so that peers
     * notice at once. The object stays valid for destroy. */
    void (*abort)(ct_comm_t *c);
    /* Frees impl (after abort, or on a healthy communicator). */
    void (*destroy)(ct_comm_t *c);
} ct__comm_ops_t;

struct ct_comm {
    const ct__comm_ops_t *ops;
    ct_comm_backend_t backend;
    int rank, world;
    int64_t timeout_ms;
    uint64_t seq;                 /* collectives started */
    int failed;                   /* the code of the failure that aborted it, 0 while healthy */
    char failure[CT_ERRBUF_SIZE]; /* its message */
    void *impl;
};

/* What a backend needs to come up. */
typedef struct ct__comm_cfg {
    int rank, world_size;
    int local_rank, local_world_size;
    ct_store_client_t *store; /* NULL only when world_size == 1 (NCCL: then no exchange) */
    const char *key_prefix;   /* the namespace of this run and attempt, ending in '/' */
    int64_t timeout_ms;       /* > 0 */
    /* CPU ring only. */
    const char *listen_addr; /* NULL: the local address of the store connection */
    int sockbuf;             /* SO_SNDBUF / SO_RCVBUF bytes: 0 default, < 0 kernel autotuning */
    size_t chunk_bytes;      /* reduction chunk: 0 default */
} ct__comm_cfg_t;

/* The CPU ring (ct_comm_ring.c). With world_size 1 it opens nothing. */
int ct__comm_ring_create(ct_comm_t **out, const ct__comm_cfg_t *cfg, ct_errbuf_t *eb);

#if CT_HAVE_NCCL
/* NCCL (ct_comm_nccl.c). */
int ct__comm_nccl_create(ct_comm_t **out, const ct__comm_cfg_t *cfg, ct_errbuf_t *eb);
/* Visible GPUs (0 when there is no driver or no device). */
int ct__comm_gpu_count(void);
/* The ncclComm_t of an NCCL communicator and its device, for the bucketed gradient reduction
 * (reduce/ct_reduce_nccl.c), which issues collectives on its own stream; NULL once c failed. */
void *ct__comm_nccl_handle(ct_comm_t *c, int *device);
/* ncclCommAbort of nccl_comm (an ncclComm_t) on a thread of its own, waited for at most wait_ms:
 * the abort ends this rank's stuck kernels and lets the peers see the failure, but it can itself
 * wait on a stream that never drains. Returns whether it finished in time. The one way both the
 * communicator (a failed or timed-out collective) and the reduction's watchdog abort. */
bool ct__comm_nccl_abort_bounded(void *nccl_comm, int64_t wait_ms);
#define CT__COMM_NCCL_ABORT_WAIT_MS 5000
#endif

/* Allocates a communicator with the shared fields set (ct_comm.c). */
int ct__comm_alloc(ct_comm_t **out, const ct__comm_ops_t *ops, ct_comm_backend_t backend,
                   const ct__comm_cfg_t *cfg, void *impl, ct_errbuf_t *eb);

/* Aborts (when not yet) and frees; NULL is fine. */
void ct__comm_destroy(ct_comm_t *c);

/* FNV-1a 64 of a string: the namespace fingerprint the ring's hello carries. */
uint64_t ct__comm_fingerprint(const char *s);

/* ---- element-wise reductions of the CPU ring (ct_comm_ring_sum.c, built with -O3) ---------- */

/* acc[i] += in[i], i < n. bf16: in float, rounded to nearest even after each addition. */
void ct__comm_sum_f32(float *restrict acc, const float *restrict in, size_t n);
void ct__comm_sum_f64(double *restrict acc, const double *restrict in, size_t n);
void ct__comm_sum_bf16(uint16_t *restrict acc, const uint16_t *restrict in, size_t n);
/* buf[i] /= w, i < n, in the element type (bf16: in float, then rounded). */
void ct__comm_div_f32(float *buf, size_t n, int w);
void ct__comm_div_f64(double *buf, size_t n, int w);
void ct__comm_div_bf16(uint16_t *buf, size_t n, int w);

#pragma GCC visibility pop

#endif /* CT_COMM_INTERNAL_H */
