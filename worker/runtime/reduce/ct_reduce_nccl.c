/*
 * ct_reduce_nccl.c - the reduction of device float buffers over NCCL (ctworker.h section 8;
 * builds with CUDA and NCCL only): ct_reducer_sum_f32 becomes a sequence of bucket all-reduces
 * issued on a communication stream of its own, ordered after the caller's work by an event (the
 * caller's stream's work up to the call) and before its next work by another (the caller's
 * stream waits for the last bucket), so the host never waits for the reduction: it returns as
 * soon as the buckets are queued, and the next op on the caller's stream (a trainer's l2_emb,
 * gradient norm, Adam) runs when the reduction is done.
 *
 * The sum, not ncclAvg: a trainer divides every gradient by the step's global count before
 * reducing, so the sum over ranks is already the global mean and does not depend on the world
 * size; ncclAvg would divide a second time.
 *
 * The collective deadline (a trainer's --collective_timeout): nothing on the host waits for the
 * buckets, so
 * a rank that never joins would leave the next host read of the caller's stream (the loss)
 * blocked in the driver forever. A watchdog thread polls the last bucket's event and
 * ncclCommGetAsyncError every few milliseconds while a reduction is in flight; when the event
 * has not completed within the timeout, or NCCL reports an asynchronous error, it aborts the
 * communicator (the communicator's bounded abort: it also ends the stuck kernels on this rank),
 * writes the error file and ends the process non-zero through ct_worker_fail, so the launcher
 * sees a failed worker and restarts the job instead of waiting on a hang.
 *
 * Sums of doubles and broadcasts stay the communicator's own synchronous calls (ct_reduce.c):
 * they are host buffers, and a trainer issues them only after the host has read the step's loss,
 * which waited for the reduction, so collectives reach NCCL in the same order on every rank.
 *
 * Overlap with the backward pass: the caller declares, as its backward pass queues them, the
 * ranges that are final (ct_reducer_ready; ctrain's model reports them block by block). Each
 * declaration records an event on the caller's stream, makes the communication stream wait for
 * it and all-reduces those ranges there, in one NCCL group (one launch), while the caller's
 * stream goes on. ct_reducer_sum_f32 then reduces what was not declared - for ctrain the
 * embedding tables, which the first op of the forward pass and the last of the backward both
 * write, and the loss slot - so the reduction left on the critical path is that tail.
 *
 * What it does not do: bf16 reduction (the gradients stay float32 on the wire).
 */
#include "ct_comm_internal.h"
#include "ct_reduce_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
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

struct ct_reduce_nccl {
    ct_comm_t *comm;
    ncclComm_t nc;
    int device;
    cudaStream_t compute, cstream;
    cudaEvent_t ready, done;
    size_t bucket_floats;
    int64_t timeout_ms;
    int64_t leave_at; /* test hook (CT_TEST_NCCL_EXIT_AT_REDUCE): this rank dies there */
    int64_t stall_at; /* test hook (CT_TEST_NCCL_STALL_AT_REDUCE): the stream stalls there */
    /* the ranges given early in the reduction being assembled, sorted as given */
    int64_t (*early)[2];
    int n_early, cap_early;
    bool begun; /* the reduction being assembled has launched something */
    /* the watchdog */
    pthread_t watchdog;
    bool watching;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    int64_t inflight_since; /* monotonic ms of the oldest launch not known complete; 0: none */
    uint64_t launches;      /* bucket groups launched (early and final); `done` follows the last */
    uint64_t launched;      /* reductions launched completely (ct_reducer_sum_f32 calls) */
};
typedef struct ct_reduce_nccl ct_reduce_nccl__nred_t;

static void *ct_reduce_nccl__watchdog(void *arg)
{
    ct_reduce_nccl__nred_t *g = arg;
    /* events and the communicator belong to this device; the thread must make it current */
    (void)cudaSetDevice(g->device);
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        if (g->inflight_since == 0) {
            pthread_cond_wait(&g->cv, &g->mu);
            continue;
        }
        const int64_t since = g->inflight_since;
        const uint64_t n = g->launches, red = g->launched;
        pthread_mutex_unlock(&g->mu);

        cudaError_t q = cudaEventQuery(g->done);
        ncclResult_t async = ncclSuccess;
        ncclResult_t qr = ncclCommGetAsyncError(g->nc, &async);
        const int64_t waited = ct_time_ms() - since;
        pthread_mutex_lock(&g->mu);
        const bool moved = g->launches != n; /* the event now follows a newer launch */
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
            ct_log_error("NCCL watchdog: %s%s at reduction %llu; aborting the communicator", why,
                         detail, (unsigned long long)red);
            const bool aborted = ct__comm_nccl_abort_bounded(g->nc, CT__COMM_NCCL_ABORT_WAIT_MS);
            ct_worker_fail("NCCL watchdog: %s%s at reduction %llu; communicator %s", why, detail,
                           (unsigned long long)red,
                           aborted ? "aborted" : "abort did not return in time, exiting anyway");
        }

        pthread_mutex_lock(&g->mu);
        if (q == cudaSuccess && g->launches == n)
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

/* The communication stream's stall for the watchdog test on one GPU: a host function queued on
 * the stream that holds it (bounded, so a broken watchdog cannot keep the test forever). */
static void CUDART_CB ct_reduce_nccl__stall_host_fn(void *arg)
{
    (void)arg;
    for (int i = 0; i < 600; i++)
        ct_sleep_ms(100);
}

/* The first launch of a reduction: the test hooks, then the communication stream waits for the
 * compute stream's work so far. */
static int ct_reduce_nccl__nred_begin(ct_reduce_nccl__nred_t *g, int rank, ct_errbuf_t *eb)
{
    cudaError_t e;
    pthread_mutex_lock(&g->mu);
    const uint64_t idx = g->launched;
    pthread_mutex_unlock(&g->mu);
    if ((int64_t)idx == g->leave_at)
        ct_worker_fail("CT_TEST_NCCL_EXIT_AT_REDUCE: this rank leaves instead of joining "
                       "gradient reduction %llu (test hook)",
                       (unsigned long long)idx);
    if ((int64_t)idx == g->stall_at) {
        ct_log_warn("CT_TEST_NCCL_STALL_AT_REDUCE: rank %d stalls the communication stream at "
                    "gradient reduction %llu (test hook)",
                    rank, (unsigned long long)idx);
        if ((e = cudaLaunchHostFunc(g->cstream, ct_reduce_nccl__stall_host_fn, NULL)) !=
            cudaSuccess)
            return ct_errbuf_set(eb, CT_ECUDA, "gradient reduction: %s", cudaGetErrorString(e));
    }
    g->begun = true;
    return 0;
}

/* All-reduces the ranges of buf on the communication stream after the compute stream's work so
 * far, in buckets of at most bucket_floats, as one NCCL group. */
static int ct_reduce_nccl__nred_launch(ct_reduce_nccl__nred_t *g, float *buf,
                                       const int64_t (*ranges)[2], int n, ct_errbuf_t *eb)
{
    cudaError_t e;
    ncclResult_t nr;
    if ((e = cudaEventRecord(g->ready, g->compute)) != cudaSuccess ||
        (e = cudaStreamWaitEvent(g->cstream, g->ready, 0)) != cudaSuccess)
        return ct_errbuf_set(eb, CT_ECUDA, "gradient reduction: %s", cudaGetErrorString(e));
    if ((nr = ncclGroupStart()) != ncclSuccess)
        return ct_errbuf_set(eb, CT_ENCCL, "gradient reduction: ncclGroupStart: %s",
                             ncclGetErrorString(nr));
    ncclResult_t first = ncclSuccess;
    for (int i = 0; i < n; i++)
        for (int64_t off = ranges[i][0], end = ranges[i][0] + ranges[i][1]; off < end;
             off += (int64_t)g->bucket_floats) {
            const int64_t len =
                end - off < (int64_t)g->bucket_floats ? end - off : (int64_t)g->bucket_floats;
            nr = ncclAllReduce(buf + off, buf + off, (size_t)len, ncclFloat32, ncclSum, g->nc,
                               g->cstream);
            if (nr != ncclSuccess && nr != ncclInProgress && first == ncclSuccess)
                first = nr;
        }
    nr = ncclGroupEnd();
    if (first == ncclSuccess && nr != ncclSuccess && nr != ncclInProgress)
        first = nr;
    if (first != ncclSuccess)
        return ct_errbuf_set(eb, first == ncclRemoteError ? CT_EPEER : CT_ENCCL,
                             "gradient reduction: ncclAllReduce: %s", ncclGetErrorString(first));
    /* the watchdog follows the newest launch: its clock starts at the oldest one that has not
     * completed, so a long backward pass after completed early buckets is not counted */
    if ((e = cudaEventRecord(g->done, g->cstream)) != cudaSuccess)
        return ct_errbuf_set(eb, CT_ECUDA, "gradient reduction: %s", cudaGetErrorString(e));
    pthread_mutex_lock(&g->mu);
    g->launches++;
    if (g->inflight_since == 0)
        g->inflight_since = ct_time_ms();
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return 0;
}

int ct__reduce_nccl_ready(ct_reducer_t *r, float *buf, const int64_t (*ranges)[2], int n,
                          ct_errbuf_t *eb)
{
    ct_reduce_nccl__nred_t *g = r->nccl;
    int rc;
    if (n <= 0)
        return 0;
    if (g->n_early + n > g->cap_early) {
        int cap = g->cap_early ? g->cap_early : 16;
        while (cap < g->n_early + n)
            cap *= 2;
        int64_t(*e)[2] = realloc(g->early, (size_t)cap * sizeof *e);
        if (!e)
            return ct_errbuf_set(eb, -ENOMEM, "gradient reduction: out of memory");
        g->early = e, g->cap_early = cap;
    }
    if (!g->begun && (rc = ct_reduce_nccl__nred_begin(g, r->rank, eb)) != 0)
        return rc;
    if ((rc = ct_reduce_nccl__nred_launch(g, buf, ranges, n, eb)) != 0)
        return rc;
    memcpy(g->early + g->n_early, ranges, (size_t)n * sizeof *ranges);
    g->n_early += n;
    return 0;
}

static int ct_reduce_nccl__cmp_range(const void *a, const void *b)
{
    const int64_t x = ((const int64_t *)a)[0], y = ((const int64_t *)b)[0];
    return (x > y) - (x < y);
}

int ct__reduce_nccl_sum(ct_reducer_t *r, float *buf, int64_t n, ct_errbuf_t *eb)
{
    ct_reduce_nccl__nred_t *g = r->nccl;
    cudaError_t e;
    int rc;
    if (!g->begun && (rc = ct_reduce_nccl__nred_begin(g, r->rank, eb)) != 0)
        return rc;
    /* what was not given early: the gaps between the early ranges, in buffer order */
    if (g->n_early > 1)
        qsort(g->early, (size_t)g->n_early, sizeof *g->early, ct_reduce_nccl__cmp_range);
    int64_t(*rest)[2] = malloc((size_t)(g->n_early + 1) * sizeof *rest);
    if (!rest)
        return ct_errbuf_set(eb, -ENOMEM, "gradient reduction: out of memory");
    int nrest = 0;
    int64_t at = 0;
    for (int i = 0; i < g->n_early && at < n; i++) {
        if (g->early[i][0] > at)
            rest[nrest][0] = at, rest[nrest][1] = (g->early[i][0] < n ? g->early[i][0] : n) - at,
            nrest++;
        if (g->early[i][0] + g->early[i][1] > at)
            at = g->early[i][0] + g->early[i][1];
    }
    if (at < n)
        rest[nrest][0] = at, rest[nrest][1] = n - at, nrest++;
    rc = ct_reduce_nccl__nred_launch(g, buf, (const int64_t(*)[2])rest, nrest, eb);
    free(rest);
    g->n_early = 0;
    g->begun = false;
    if (rc != 0)
        return rc;
    /* the compute stream's next work waits for the last bucket (done, recorded by the launch);
     * the host does not */
    if ((e = cudaStreamWaitEvent(g->compute, g->done, 0)) != cudaSuccess)
        return ct_errbuf_set(eb, CT_ECUDA, "gradient reduction: %s", cudaGetErrorString(e));
    pthread_mutex_lock(&g->mu);
    g->launched++;
    pthread_mutex_unlock(&g->mu);
    return 0;
}

static void ct_reduce_nccl__nred_free(ct_reduce_nccl__nred_t *g)
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
    free(g->early);
    if (g->cstream)
        (void)cudaStreamDestroy(g->cstream);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}

void ct__reduce_nccl_close(ct_reducer_t *r)
{
    if (r->nccl)
        ct_reduce_nccl__nred_free(r->nccl);
    r->nccl = NULL;
}

int ct__reduce_nccl_open(ct_reducer_t *r, const ct_reducer_device_t *dev, ct_errbuf_t *eb)
{
    ct_comm_t *comm = r->comm;
    int device = -1;
    void *nc = comm ? ct__comm_nccl_handle(comm, &device) : NULL;
    int64_t timeout_ms = dev->timeout_ms;
    size_t bucket_bytes = dev->bucket_bytes ? dev->bucket_bytes : CT_REDUCER_BUCKET_BYTES;
    if (!nc)
        return ct_errbuf_set(eb, -EINVAL, "the NCCL gradient reduction needs an NCCL communicator");
    if (timeout_ms <= 0)
        timeout_ms = ct_comm_timeout(comm);
    ct_reduce_nccl__nred_t *g = calloc(1, sizeof *g);
    if (!g)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->comm = comm;
    g->nc = (ncclComm_t)nc;
    g->device = device;
    g->compute = (cudaStream_t)dev->stream;
    g->bucket_floats = bucket_bytes / sizeof(float) > 0 ? bucket_bytes / sizeof(float) : 1;
    g->timeout_ms = timeout_ms;
    /* A fault for the tests of the watchdog: "RANK:INDEX" makes that rank die instead of joining
     * its INDEX-th gradient reduction (from 0), so the others wait for a peer that never comes. */
    g->leave_at = -1;
    const char *hook = getenv("CT_TEST_NCCL_EXIT_AT_REDUCE");
    int hr = -1, hi = -1;
    if (hook && sscanf(hook, "%d:%d", &hr, &hi) == 2 && hr == r->rank && hi >= 0)
        g->leave_at = hi;
    /* "RANK:INDEX": that rank's communication stream stalls at its INDEX-th reduction (a host
     * function that holds the stream), so on a single GPU the reduction never completes, as
     * when a peer never joins. */
    g->stall_at = -1;
    hook = getenv("CT_TEST_NCCL_STALL_AT_REDUCE");
    if (hook && sscanf(hook, "%d:%d", &hr, &hi) == 2 && hr == r->rank && hi >= 0)
        g->stall_at = hi;
    cudaError_t e;
    if ((e = cudaSetDevice(device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&g->cstream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&g->ready, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&g->done, cudaEventDisableTiming)) != cudaSuccess) {
        ct_reduce_nccl__nred_free(g);
        return ct_errbuf_set(eb, CT_ECUDA, "the NCCL gradient reduction: %s",
                             cudaGetErrorString(e));
    }
    if (pthread_create(&g->watchdog, NULL, ct_reduce_nccl__watchdog, g) != 0) {
        ct_reduce_nccl__nred_free(g);
        return ct_errbuf_set(eb, -EAGAIN, "the NCCL gradient reduction: no watchdog thread");
    }
    g->watching = true;
    r->nccl = g;
    return 0;
}
