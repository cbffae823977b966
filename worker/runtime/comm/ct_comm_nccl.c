/*
 * ct_comm_nccl.c - the NCCL communicator (built only with CUDA and NCCL): device choice from
 * LOCAL_RANK, the unique-ID exchange through the store (rank 0 SETs the 128 raw bytes under
 * key_prefix + "nccl/0", the others WAIT and GET them, as PyTorch's ProcessGroupNCCL does),
 * non-blocking communicator creation polled against the deadline, and collectives on a stream
 * of its own whose completion is polled (cudaStreamQuery and ncclCommGetAsyncError) rather
 * than waited for, so a dead peer or a hung kernel becomes -ETIMEDOUT / CT_EPEER and an
 * ncclCommAbort, never a hang (the nccl-tests way). Host buffers are staged through a device
 * buffer that grows as needed.
 *
 * What it does not do: overlap with the caller's compute (each call returns when its result is
 * complete; a trainer that wants overlap issues NCCL itself), several communicators per
 * process, or multi-node topology hints beyond what NCCL finds.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
/* nccl.h declares a few functions as f() rather than f(void). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "ct_comm_internal.h"
#include "ct_cuda_check.h"
#include "ct_log.h"
#include "ct_time.h"

_Static_assert(sizeof(ncclUniqueId) == NCCL_UNIQUE_ID_BYTES, "the ID is 128 raw bytes");

typedef struct ct_comm_nccl__nccl {
    ncclComm_t comm;
    cudaStream_t stream;
    int device;
    void *scratch; /* device staging for host buffers */
    size_t scratch_bytes;
    bool aborted;
} ct_comm_nccl__nccl_t;

/* An NCCL result other than success / in-progress, with the text NCCL keeps for it. */
static int ct_comm_nccl__nccl_error(ct_errbuf_t *eb, ncclResult_t r, ncclComm_t comm,
                                    const char *call, const char *file, int line)
{
    const char *last = comm ? ncclGetLastError(comm) : ncclGetLastError(NULL);
    return ct_errbuf_set(eb, r == ncclRemoteError ? CT_EPEER : CT_ENCCL,
                         "NCCL error at %s:%d: %s: %s%s%s", file, line, call, ncclGetErrorString(r),
                         last && last[0] ? " - " : "", last ? last : "");
}

/* NCCL's check: on failure, rc gets the code (message in eb) and control goes to label. CUDA's
 * are ct_cuda_check.h's. */
#define CT_NCCL_CHECK_GOTO(call, comm, rc, eb, label)                                       \
    do {                                                                                    \
        ncclResult_t ct_comm_nccl__r = (call);                                              \
        if (ct_comm_nccl__r != ncclSuccess && ct_comm_nccl__r != ncclInProgress) {          \
            (rc) = ct_comm_nccl__nccl_error((eb), ct_comm_nccl__r, (comm), #call, __FILE__, \
                                            __LINE__);                                      \
            goto label;                                                                     \
        }                                                                                   \
    } while (0)

int ct__comm_gpu_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* no driver or no device: clear it, it is not an error here */
        return 0;
    }
    return n;
}

/* Polls the communicator until it is no longer in progress (or the deadline passes). */
static int ct_comm_nccl__wait_comm(ct_comm_nccl__nccl_t *g, int64_t deadline, const char *what,
                                   ct_errbuf_t *eb)
{
    for (;;) {
        ncclResult_t st = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(g->comm, &st);
        if (r != ncclSuccess)
            return ct_comm_nccl__nccl_error(eb, r, g->comm, "ncclCommGetAsyncError", __FILE__,
                                            __LINE__);
        if (st == ncclSuccess)
            return 0;
        if (st != ncclInProgress)
            return ct_comm_nccl__nccl_error(eb, st, g->comm, what, __FILE__, __LINE__);
        if (ct_deadline_passed(deadline))
            return ct_errbuf_set(eb, -ETIMEDOUT, "%s: not done before the deadline", what);
        ct_sleep_ms(1);
    }
}

/* Polls the stream (and the communicator's asynchronous error) until the work is done. */
static int ct_comm_nccl__wait_stream(ct_comm_nccl__nccl_t *g, int64_t deadline, const char *what,
                                     ct_errbuf_t *eb)
{
    for (int spins = 0;; spins++) {
        cudaError_t e = cudaStreamQuery(g->stream);
        if (e == cudaSuccess)
            return 0;
        if (e != cudaErrorNotReady)
            return ct_cuda_check_fail(eb, e, what, __FILE__, __LINE__);
        ncclResult_t st = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(g->comm, &st);
        if (r != ncclSuccess || (st != ncclSuccess && st != ncclInProgress))
            return ct_comm_nccl__nccl_error(eb, r != ncclSuccess ? r : st, g->comm, what, __FILE__,
                                            __LINE__);
        if (ct_deadline_passed(deadline))
            return ct_errbuf_set(eb, -ETIMEDOUT,
                                 "%s did not complete before the deadline (a peer is dead or "
                                 "stuck)",
                                 what);
        if (spins > 1000)
            ct_sleep_ms(1); /* short collectives finish within the spin; long ones may sleep */
    }
}

static int ct_comm_nccl__scratch(ct_comm_nccl__nccl_t *g, size_t nbytes, ct_errbuf_t *eb)
{
    if (nbytes <= g->scratch_bytes)
        return 0;
    int rc = 0;
    if (g->scratch != NULL) {
        CT_CUDA_CHECK_GOTO(cudaFree(g->scratch), rc, eb, out);
        g->scratch = NULL;
        g->scratch_bytes = 0;
    }
    CT_CUDA_CHECK_GOTO(cudaMalloc(&g->scratch, nbytes), rc, eb, out);
    g->scratch_bytes = nbytes;
out:
    return rc;
}

/* True when p is host memory the GPU cannot use directly (pageable or pinned host memory;
 * device and managed memory are used in place). */
static bool ct_comm_nccl__is_host(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return true;
    }
    return a.type == cudaMemoryTypeUnregistered || a.type == cudaMemoryTypeHost;
}

static ncclDataType_t ct_comm_nccl__nccl_type(ct_dtype_t dt)
{
    switch (dt) {
    case CT_DTYPE_F64:
        return ncclFloat64;
    case CT_DTYPE_BF16:
        return ncclBfloat16;
    default:
        return ncclFloat32;
    }
}

static int ct_comm_nccl__nccl_allreduce(ct_comm_t *c, void *buf, int64_t count, ct_dtype_t dtype,
                                        ct_comm_op_t op, int64_t deadline, ct_errbuf_t *eb)
{
    ct_comm_nccl__nccl_t *g = c->impl;
    size_t nbytes = (size_t)count * ct_dtype_size(dtype);
    bool host = count > 0 && ct_comm_nccl__is_host(buf);
    void *dev = buf;
    int rc = 0;
    if (host) {
        if ((rc = ct_comm_nccl__scratch(g, nbytes, eb)) != 0)
            return rc;
        dev = g->scratch;
        CT_CUDA_CHECK_GOTO(cudaMemcpyAsync(dev, buf, nbytes, cudaMemcpyHostToDevice, g->stream), rc,
                           eb, out);
    }
    CT_NCCL_CHECK_GOTO(ncclAllReduce(dev, dev, (size_t)count, ct_comm_nccl__nccl_type(dtype),
                                     op == CT_COMM_AVG ? ncclAvg : ncclSum, g->comm, g->stream),
                       g->comm, rc, eb, out);
    if ((rc = ct_comm_nccl__wait_comm(g, deadline, "ncclAllReduce", eb)) != 0 ||
        (rc = ct_comm_nccl__wait_stream(g, deadline, "ncclAllReduce", eb)) != 0)
        goto out;
    /* The stream is idle now, so this copy cannot block on a peer. */
    if (host)
        CT_CUDA_CHECK_GOTO(cudaMemcpy(buf, dev, nbytes, cudaMemcpyDeviceToHost), rc, eb, out);
out:
    return rc;
}

static int ct_comm_nccl__nccl_broadcast(ct_comm_t *c, void *buf, size_t nbytes, int root,
                                        int64_t deadline, ct_errbuf_t *eb)
{
    ct_comm_nccl__nccl_t *g = c->impl;
    bool host = nbytes > 0 && ct_comm_nccl__is_host(buf);
    void *dev = buf;
    int rc = 0;
    if (host) {
        if ((rc = ct_comm_nccl__scratch(g, nbytes, eb)) != 0)
            return rc;
        dev = g->scratch;
        if (c->rank == root)
            CT_CUDA_CHECK_GOTO(cudaMemcpyAsync(dev, buf, nbytes, cudaMemcpyHostToDevice, g->stream),
                               rc, eb, out);
    }
    CT_NCCL_CHECK_GOTO(ncclBroadcast(dev, dev, nbytes, ncclUint8, root, g->comm, g->stream),
                       g->comm, rc, eb, out);
    if ((rc = ct_comm_nccl__wait_comm(g, deadline, "ncclBroadcast", eb)) != 0 ||
        (rc = ct_comm_nccl__wait_stream(g, deadline, "ncclBroadcast", eb)) != 0)
        goto out;
    if (host && c->rank != root)
        CT_CUDA_CHECK_GOTO(cudaMemcpy(buf, dev, nbytes, cudaMemcpyDeviceToHost), rc, eb, out);
out:
    return rc;
}

static int ct_comm_nccl__nccl_allgather(ct_comm_t *c, const void *sendbuf, void *recvbuf,
                                        size_t nbytes, int64_t deadline, ct_errbuf_t *eb)
{
    ct_comm_nccl__nccl_t *g = c->impl;
    size_t total = nbytes * (size_t)c->world;
    bool host = nbytes > 0 && (ct_comm_nccl__is_host(sendbuf) || ct_comm_nccl__is_host(recvbuf));
    const void *dsend = sendbuf;
    void *drecv = recvbuf;
    int rc = 0;
    if (host) {
        /* Staged: the rank's own slot of the device buffer is the send buffer (in place). */
        if ((rc = ct_comm_nccl__scratch(g, total, eb)) != 0)
            return rc;
        drecv = g->scratch;
        dsend = (uint8_t *)g->scratch + (size_t)c->rank * nbytes;
        CT_CUDA_CHECK_GOTO(
            cudaMemcpyAsync((void *)dsend, sendbuf, nbytes, cudaMemcpyDefault, g->stream), rc, eb,
            out);
    }
    CT_NCCL_CHECK_GOTO(ncclAllGather(dsend, drecv, nbytes, ncclUint8, g->comm, g->stream), g->comm,
                       rc, eb, out);
    if ((rc = ct_comm_nccl__wait_comm(g, deadline, "ncclAllGather", eb)) != 0 ||
        (rc = ct_comm_nccl__wait_stream(g, deadline, "ncclAllGather", eb)) != 0)
        goto out;
    if (host)
        CT_CUDA_CHECK_GOTO(cudaMemcpy(recvbuf, drecv, total, cudaMemcpyDefault), rc, eb, out);
out:
    return rc;
}

/* An allreduce of one float on the device, as PyTorch's barrier on NCCL does. */
static int ct_comm_nccl__nccl_barrier(ct_comm_t *c, int64_t deadline, ct_errbuf_t *eb)
{
    ct_comm_nccl__nccl_t *g = c->impl;
    int rc = ct_comm_nccl__scratch(g, sizeof(float), eb);
    if (rc != 0)
        return rc;
    CT_NCCL_CHECK_GOTO(
        ncclAllReduce(g->scratch, g->scratch, 1, ncclFloat32, ncclSum, g->comm, g->stream), g->comm,
        rc, eb, out);
    if ((rc = ct_comm_nccl__wait_comm(g, deadline, "barrier", eb)) == 0)
        rc = ct_comm_nccl__wait_stream(g, deadline, "barrier", eb);
out:
    return rc;
}

void *ct__comm_nccl_handle(ct_comm_t *c, int *device)
{
    ct_comm_nccl__nccl_t *g = c->impl;
    if (g == NULL || g->comm == NULL || g->aborted)
        return NULL;
    *device = g->device;
    return g->comm;
}

typedef struct ct_comm_nccl__abort {
    ncclComm_t nc;
    atomic_bool done;
} ct_comm_nccl__abort_t;

static void *ct_comm_nccl__abort_main(void *arg)
{
    ct_comm_nccl__abort_t *a = arg;
    ncclCommAbort(a->nc); /* does not wait for peers */
    atomic_store(&a->done, true);
    return NULL;
}

bool ct__comm_nccl_abort_bounded(void *nccl_comm, int64_t wait_ms)
{
    /* Outlives this call: the thread may still run when the caller gives up (and exits). */
    ct_comm_nccl__abort_t *a = malloc(sizeof *a);
    if (a == NULL) {
        ncclCommAbort((ncclComm_t)nccl_comm);
        return true;
    }
    a->nc = (ncclComm_t)nccl_comm;
    atomic_init(&a->done, false);
    pthread_t th;
    if (pthread_create(&th, NULL, ct_comm_nccl__abort_main, a) != 0) {
        free(a);
        ncclCommAbort((ncclComm_t)nccl_comm);
        return true;
    }
    pthread_detach(th);
    for (int64_t t0 = ct_time_ms(); !atomic_load(&a->done) && ct_time_ms() - t0 < wait_ms;)
        ct_sleep_ms(5);
    const bool done = atomic_load(&a->done);
    if (done)
        free(a); /* the thread is past its last use of it */
    return done;
}

static void ct_comm_nccl__nccl_abort(ct_comm_t *c)
{
    ct_comm_nccl__nccl_t *g = c->impl;
    if (g->comm != NULL && !g->aborted) {
        ct__comm_nccl_abort_bounded(g->comm, CT__COMM_NCCL_ABORT_WAIT_MS);
        g->aborted = true;
        g->comm = NULL;
    }
}

static void ct_comm_nccl__nccl_destroy(ct_comm_t *c)
{
    ct_comm_nccl__nccl_t *g = c->impl;
    if (g == NULL)
        return;
    if (g->comm != NULL) {
        /* Finalize flushes outstanding work, which needs the peers; bounded like a collective,
         * and aborted when they do not answer. */
        ct_errbuf_t eb;
        int64_t deadline = ct_deadline_after_ms(c->timeout_ms);
        ncclResult_t r = ncclCommFinalize(g->comm);
        if ((r != ncclSuccess && r != ncclInProgress) ||
            ct_comm_nccl__wait_comm(g, deadline, "ncclCommFinalize", &eb) != 0) {
            ct__comm_nccl_abort_bounded(g->comm, CT__COMM_NCCL_ABORT_WAIT_MS);
        } else {
            ncclCommDestroy(g->comm);
        }
        g->comm = NULL;
    }
    if (g->scratch != NULL)
        cudaFree(g->scratch);
    if (g->stream != NULL)
        cudaStreamDestroy(g->stream);
    free(g);
    c->impl = NULL;
}

static const ct__comm_ops_t ct_comm_nccl__nccl_ops = {
    .allreduce = ct_comm_nccl__nccl_allreduce,
    .broadcast = ct_comm_nccl__nccl_broadcast,
    .allgather = ct_comm_nccl__nccl_allgather,
    .barrier = ct_comm_nccl__nccl_barrier,
    .abort = ct_comm_nccl__nccl_abort,
    .destroy = ct_comm_nccl__nccl_destroy,
};

/* The unique ID: made by rank 0 and published, or fetched by the others. */
static int ct_comm_nccl__exchange_id(const ct__comm_cfg_t *cfg, ncclUniqueId *id, int64_t deadline,
                                     ct_errbuf_t *eb)
{
    int rc = 0;
    if (cfg->rank == 0)
        CT_NCCL_CHECK_GOTO(ncclGetUniqueId(id), NULL, rc, eb, out);
    if (cfg->store == NULL) {
        if (cfg->world_size > 1)
            rc =
                ct_errbuf_set(eb, CT_ESTATE, "NCCL with %d ranks needs the store", cfg->world_size);
        goto out;
    }
    char key[CT_WORKER_KEY_PREFIX_MAX + 16];
    snprintf(key, sizeof key, "%snccl/0", cfg->key_prefix);
    int64_t saved = cfg->store->timeout_ms;
    int64_t left = ct_deadline_left_ms(deadline);
    ct_store_client_set_timeout(cfg->store, left > 0 ? left : 1);
    if (cfg->rank == 0) {
        rc = ct_store_set(cfg->store, key, id, sizeof *id, eb);
        if (rc != 0)
            ct_errbuf_wrap(eb, rc, "publishing the NCCL unique ID (store key \"%s\")", key);
    } else {
        ct_store_bytes_t v;
        rc = ct_store_get(cfg->store, key, &v, eb);
        if (rc != 0)
            ct_errbuf_wrap(eb, rc, "waiting for rank 0's NCCL unique ID (store key \"%s\")", key);
        else if (v.len != sizeof *id)
            rc = ct_errbuf_set(eb, CT_EPROTOCOL,
                               "store key \"%s\" holds %zu bytes, not a %d-byte NCCL unique ID",
                               key, v.len, NCCL_UNIQUE_ID_BYTES);
        else
            memcpy(id, v.data, sizeof *id);
    }
    ct_store_client_set_timeout(cfg->store, saved);
out:
    return rc;
}

int ct__comm_nccl_create(ct_comm_t **out, const ct__comm_cfg_t *cfg, ct_errbuf_t *eb)
{
    *out = NULL;
    const int64_t deadline = ct_deadline_after_ms(cfg->timeout_ms);
    int ngpu = ct__comm_gpu_count();
    if (ngpu == 0)
        return ct_errbuf_set(eb, CT_ENOGPU,
                             "the NCCL backend needs a GPU and none is visible (check the "
                             "driver and CUDA_VISIBLE_DEVICES, or use CTRUN_COMM_BACKEND=cpu)");
    int device;
    if (cfg->local_rank < ngpu)
        device = cfg->local_rank;
    else if (ngpu == 1)
        device = 0; /* a launcher that shows each rank only its own GPU */
    else
        return ct_errbuf_set(
            eb, CT_ERANGE_VALUE,
            "LOCAL_RANK=%d but only %d GPUs are visible (CUDA_VISIBLE_DEVICES=%s)", cfg->local_rank,
            ngpu, getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "(unset)");
    ct_comm_nccl__nccl_t *g = calloc(1, sizeof *g);
    if (g == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    g->device = device;
    ct_comm_t *c = NULL;
    int rc = ct__comm_alloc(&c, &ct_comm_nccl__nccl_ops, CT_COMM_NCCL, cfg, g, eb);
    if (rc != 0) {
        free(g);
        return rc;
    }
    CT_CUDA_CHECK_GOTO(cudaSetDevice(device), rc, eb, fail);
    /* A blocking stream: it waits for work queued on the legacy default stream first. */
    CT_CUDA_CHECK_GOTO(cudaStreamCreateWithFlags(&g->stream, cudaStreamDefault), rc, eb, fail);

    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if ((rc = ct_comm_nccl__exchange_id(cfg, &id, deadline, eb)) != 0)
        goto fail;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    CT_NCCL_CHECK_GOTO(ncclCommInitRankConfig(&g->comm, cfg->world_size, id, cfg->rank, &config),
                       g->comm, rc, eb, fail);
    if ((rc = ct_comm_nccl__wait_comm(g, deadline, "ncclCommInitRankConfig", eb)) != 0)
        goto fail;
    ct_log_debug("nccl: rank %d of %d on GPU %d", cfg->rank, cfg->world_size, device);
    *out = c;
    return 0;
fail:
    ct_comm_nccl__nccl_abort(c);
    ct__comm_destroy(c);
    return rc;
}
