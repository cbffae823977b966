/*
 * ct_reduce_nccl.c - ctrain's gradient reduction over NCCL from the flat device gradient
 * buffer (builds with CUDA and NCCL only): the float all-reduce of ct_reducer_t becomes a
 * sequence of bucket all-reduces issued on a communication stream of its own, ordered after
 * the model's work by an event (the compute stream's work up to the call) and before the
 * model's next work by another (the compute stream waits for the last bucket), so the host
 * never waits for the reduction: it returns as soon as the buckets are queued, and the next
 * op on the compute stream (l2_emb, the norm, Adam) runs when the reduction is done.
 *
 * The sum, not ncclAvg: ctrain divides every gradient by the step's global target count (the
 * loss normaliser, ct_reduce.h), so the sum over ranks is already the global mean and does not
 * depend on the world size; ncclAvg would divide a second time.
 *
 * The collective deadline (--collective_timeout): nothing on the host waits for the buckets, so
 * a rank that never joins would leave the next host read of the compute stream (the loss) blocked
 * in the driver forever. A watchdog thread polls the last bucket's event and
 * ncclCommGetAsyncError every few milliseconds while a reduction is in flight; when the event
 * has not completed within the timeout, or NCCL reports an asynchronous error, it aborts the
 * communicator (which also ends the stuck kernels on this rank), writes the error file and ends
 * the process non-zero through ct_worker_fail, so the launcher sees a failed worker and
 * restarts the job instead of waiting on a hang.
 *
 * Evaluation sums (doubles) and the broadcast of the resume checkpoint's name stay the
 * communicator's own synchronous calls: they are host buffers, and they are only issued after
 * the host has read the step's loss, which waited for the reduction, so collectives reach NCCL
 * in the same order on every rank.
 *
 * What it does not do: start buckets while the backward pass is still running (the model gives
 * no per-bucket readiness yet; at SASRec's sizes the whole gradient is ~1-2 MB, one or two
 * buckets), bf16 reduction.
 */
#include "ct_reduce.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
/* nccl.h declares a few functions as f() rather than f(void). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "ct_log.h"
#include "ct_time.h"

/* How often the watchdog looks while a reduction is in flight. */
#define CT__WATCH_POLL_MS 5

typedef struct ct__nred {
    ct_comm_t *comm;
    ncclComm_t nc;
    int device;
    cudaStream_t compute, cstream;
    cudaEvent_t ready, done;
    size_t bucket_floats;
    int64_t timeout_ms;
    int64_t leave_at; /* test hook (CT_TEST_NCCL_EXIT_AT_REDUCE): this rank dies there */
    /* the watchdog */
    pthread_t watchdog;
    bool watching;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    int64_t inflight_since; /* monotonic ms of the launch in flight; 0: none */
    uint64_t launched;      /* reductions launched */
} ct__nred_t;

static void *ct__watchdog(void *arg)
{
    ct__nred_t *g = arg;
    /* events and the communicator belong to this device; the thread must make it current */
    (void)cudaSetDevice(g->device);
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        if (g->inflight_since == 0) {
            pthread_cond_wait(&g->cv, &g->mu);
            continue;
        }
        const int64_t since = g->inflight_since;
        const uint64_t n = g->launched;
        pthread_mutex_unlock(&g->mu);

        cudaError_t q = cudaEventQuery(g->done);
        ncclResult_t async = ncclSuccess;
        ncclResult_t qr = ncclCommGetAsyncError(g->nc, &async);
        const int64_t waited = ct_time_ms() - since;
        pthread_mutex_lock(&g->mu);
        const bool moved = g->launched != n; /* the event now belongs to a newer reduction */
        pthread_mutex_unlock(&g->mu);
        if (moved) {
            pthread_mutex_lock(&g->mu);
            continue;
        }
        const char *why = NULL;
        char detail[160] = "";
        if (q == cudaSuccess) {
            why = NULL;
        } else if (q != cudaErrorNotReady) {
            why = "the CUDA stream of the reduction failed";
            snprintf(detail, sizeof detail, " (%s)", cudaGetErrorString(q));
        } else if (qr != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
            why = "NCCL reported an asynchronous error";
            snprintf(detail, sizeof detail, " (%s)",
                     ncclGetErrorString(qr != ncclSuccess ? qr : async));
        } else if (waited > g->timeout_ms) {
            why = "the gradient all-reduce did not complete in time";
            snprintf(detail, sizeof detail,
                     " (waited %lld ms, --collective_timeout %lld ms: a rank did not join)",
                     (long long)waited, (long long)g->timeout_ms);
        }
        if (why) {
            ncclCommAbort(g->nc); /* ends this rank's stuck kernels; peers see the failure */
            ct_worker_fail("NCCL watchdog: %s%s at reduction %llu; communicator aborted", why,
                           detail, (unsigned long long)n);
        }

        pthread_mutex_lock(&g->mu);
        if (q == cudaSuccess && g->launched == n)
            g->inflight_since = 0;
        else if (!g->stop) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += CT__WATCH_POLL_MS * 1000000L;
            if (ts.tv_nsec >= 1000000000L)
                ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        }
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

static int ct__nred_f32(ct_reducer_t *r, float *buf, int64_t n, ct_errbuf_t *eb)
{
    ct__nred_t *g = r->impl;
    cudaError_t e;
    ncclResult_t nr;
    uint64_t idx;
    pthread_mutex_lock(&g->mu);
    idx = g->launched;
    pthread_mutex_unlock(&g->mu);
    if ((int64_t)idx == g->leave_at)
        ct_worker_fail("CT_TEST_NCCL_EXIT_AT_REDUCE: this rank leaves instead of joining "
                       "gradient reduction %llu (test hook)",
                       (unsigned long long)idx);
    /* the buckets start after everything queued on the compute stream so far */
    if ((e = cudaEventRecord(g->ready, g->compute)) != cudaSuccess ||
        (e = cudaStreamWaitEvent(g->cstream, g->ready, 0)) != cudaSuccess)
        return ct_errbuf_set(eb, CT_ECUDA, "gradient reduction: %s", cudaGetErrorString(e));
    for (int64_t off = 0; off < n; off += (int64_t)g->bucket_floats) {
        const int64_t len =
            n - off < (int64_t)g->bucket_floats ? n - off : (int64_t)g->bucket_floats;
        nr = ncclAllReduce(buf + off, buf + off, (size_t)len, ncclFloat32, ncclSum, g->nc,
                           g->cstream);
        if (nr != ncclSuccess && nr != ncclInProgress)
            return ct_errbuf_set(eb, nr == ncclRemoteError ? CT_EPEER : CT_ENCCL,
                                 "gradient reduction: ncclAllReduce: %s", ncclGetErrorString(nr));
    }
    /* the compute stream's next work waits for the last bucket; the host does not */
    if ((e = cudaEventRecord(g->done, g->cstream)) != cudaSuccess ||
        (e = cudaStreamWaitEvent(g->compute, g->done, 0)) != cudaSuccess)
        return ct_errbuf_set(eb, CT_ECUDA, "gradient reduction: %s", cudaGetErrorString(e));
    pthread_mutex_lock(&g->mu);
    g->launched++;
    g->inflight_since = ct_time_ms();
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return 0;
}

static int ct__nred_f64(ct_reducer_t *r, double *buf, int64_t n, ct_errbuf_t *eb)
{
    ct__nred_t *g = r->impl;
    return ct_comm_allreduce(g->comm, buf, n, CT_DTYPE_F64, CT_COMM_SUM, eb);
}

static int ct__nred_broadcast(ct_reducer_t *r, void *buf, size_t nbytes, int root, ct_errbuf_t *eb)
{
    ct__nred_t *g = r->impl;
    return ct_comm_broadcast(g->comm, buf, nbytes, root, eb);
}

static void ct__nred_free(ct__nred_t *g)
{
    if (g->watching) {
        pthread_mutex_lock(&g->mu);
        g->stop = true;
        pthread_cond_signal(&g->cv);
        pthread_mutex_unlock(&g->mu);
        pthread_join(g->watchdog, NULL);
    }
    if (g->cstream)
        (void)cudaStreamSynchronize(g->cstream);
    if (g->ready)
        (void)cudaEventDestroy(g->ready);
    if (g->done)
        (void)cudaEventDestroy(g->done);
    if (g->cstream)
        (void)cudaStreamDestroy(g->cstream);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}

static void ct__nred_close(ct_reducer_t *r)
{
    if (r->impl)
        ct__nred_free(r->impl);
    r->impl = NULL;
}

int ct_reducer_nccl_attach(ct_reducer_t *r, void *compute_stream, size_t bucket_bytes,
                           int64_t timeout_ms, ct_errbuf_t *eb)
{
    ct_comm_t *comm = r->comm;
    int device = -1;
    void *nc = comm ? ct_comm_nccl_handle(comm, &device) : NULL;
    if (!nc)
        return ct_errbuf_set(eb, -EINVAL, "the NCCL gradient reduction needs an NCCL communicator");
    if (timeout_ms <= 0)
        timeout_ms = ct_comm_timeout(comm);
    ct__nred_t *g = calloc(1, sizeof *g);
    if (!g)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->comm = comm;
    g->nc = (ncclComm_t)nc;
    g->device = device;
    g->compute = (cudaStream_t)compute_stream;
    g->bucket_floats = bucket_bytes / sizeof(float) > 0 ? bucket_bytes / sizeof(float) : 1;
    g->timeout_ms = timeout_ms;
    /* A fault for the tests of the watchdog: "RANK:INDEX" makes that rank die instead of joining
     * its INDEX-th gradient reduction (from 0), so the others wait for a peer that never comes. */
    g->leave_at = -1;
    const char *hook = getenv("CT_TEST_NCCL_EXIT_AT_REDUCE");
    int hr = -1, hi = -1;
    if (hook && sscanf(hook, "%d:%d", &hr, &hi) == 2 && hr == r->rank && hi >= 0)
        g->leave_at = hi;
    cudaError_t e;
    if ((e = cudaSetDevice(device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&g->cstream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&g->ready, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&g->done, cudaEventDisableTiming)) != cudaSuccess) {
        ct__nred_free(g);
        return ct_errbuf_set(eb, CT_ECUDA, "the NCCL gradient reduction: %s",
                             cudaGetErrorString(e));
    }
    if (pthread_create(&g->watchdog, NULL, ct__watchdog, g) != 0) {
        ct__nred_free(g);
        return ct_errbuf_set(eb, -EAGAIN, "the NCCL gradient reduction: no watchdog thread");
    }
    g->watching = true;
    r->impl = g;
    r->name = "nccl";
    r->allreduce_f32 = ct__nred_f32;
    r->allreduce_f64 = ct__nred_f64;
    r->broadcast = ct__nred_broadcast;
    r->close = ct__nred_close;
    r->device_async = true;
    return 0;
}
