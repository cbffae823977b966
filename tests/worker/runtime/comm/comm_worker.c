/*
 * comm_worker.c - a worker process for the multi-process communicator tests
 * (test_comm_e2e.c), started W times with the torchrun environment. It joins through
 * ct_worker_init, like any libctworker program, then runs one mode:
 *
 *   check     allreduce of f32 buffers from 1 element to 64 MiB (f64 and bf16, sum and avg, up
 *             to 1 Mi elements), each compared bit for bit with comm_check.h's documented
 *             order; broadcast from every root; allgather; barrier. Prints "digest <crc32>" of
 *             every result, for run-to-run comparison. Exit 0 when all matched, 1 otherwise.
 *   loop N    allreduce of N floats over and over; prints "ready" after the first. On an error
 *             it prints the error and exits 3 (what a killed peer should cause).
 *   mismatch  rank 0 allreduces 10 floats, the others 11: expects CT_EPROTOCOL or CT_EPEER
 *             quickly; exit 0 when so.
 *   hello [R:MS]  one allreduce of the rank; prints "prefix <key_prefix> sum <sum>". With
 *             R:MS, rank R waits MS milliseconds before it joins (so the others look up its
 *             address before it has published one).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "comm_check.h"
#include "ct_time.h"
#include "ctworker.h"

static ct_worker_t w;

static int check_allreduce(uint64_t n, ct_dtype_t dt, ct_comm_op_t op, uint64_t seed, uLong *digest)
{
    size_t es = ct_dtype_size(dt);
    void *buf = malloc(n * es + 8);
    if (buf == NULL) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    cc_fill(buf, n, dt, seed, w.env.rank);
    ct_errbuf_t eb;
    if (ct_comm_allreduce(w.comm, buf, (int64_t)n, dt, op, &eb) != 0) {
        fprintf(stderr, "allreduce of %llu %s: %s\n", (unsigned long long)n, ct_dtype_name(dt),
                eb.msg);
        free(buf);
        return 1;
    }
    uint64_t got, want;
    int64_t bad = cc_check(buf, n, dt, op, seed, w.env.world_size, &got, &want);
    *digest = crc32(*digest, buf, (uInt)(n * es));
    free(buf);
    if (bad >= 0) {
        fprintf(stderr,
                "rank %d: allreduce %s of %llu %s: element %lld is 0x%llx, the documented order "
                "gives 0x%llx\n",
                w.env.rank, op == CT_COMM_AVG ? "avg" : "sum", (unsigned long long)n,
                ct_dtype_name(dt), (long long)bad, (unsigned long long)got,
                (unsigned long long)want);
        return 1;
    }
    return 0;
}

static int mode_check(void)
{
    static const uint64_t sizes[] = {
        1, 2, 3, 4, 5, 7, 64, 1000, 4099, 65536 + 7, 1u << 20, (1u << 20) + 3, 3000017, 1u << 24};
    uLong digest = crc32(0, NULL, 0);
    int bad = 0;
    int64_t t0 = ct_time_ms();
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        uint64_t n = sizes[s];
        bad |= check_allreduce(n, CT_DTYPE_F32, CT_COMM_SUM, 100 + s, &digest);
        if (n <= (1u << 20) + 3) {
            bad |= check_allreduce(n, CT_DTYPE_F32, CT_COMM_AVG, 200 + s, &digest);
            bad |= check_allreduce(n, CT_DTYPE_F64, CT_COMM_SUM, 300 + s, &digest);
            bad |= check_allreduce(n, CT_DTYPE_BF16, CT_COMM_SUM, 400 + s, &digest);
            bad |= check_allreduce(n, CT_DTYPE_BF16, CT_COMM_AVG, 500 + s, &digest);
        }
    }
    ct_errbuf_t eb;
    const int W = w.env.world_size, R = w.env.rank;
    size_t nb = (1u << 20) + 5;
    uint8_t *b = malloc(nb), *g = malloc(nb * (size_t)W);
    if (b == NULL || g == NULL)
        return 1;
    for (int root = 0; root < W; root++) {
        for (size_t i = 0; i < nb; i++)
            b[i] = R == root ? (uint8_t)(cc_mix(i ^ (uint64_t)root << 32) >> 3) : 0;
        if (ct_comm_broadcast(w.comm, b, nb, root, &eb) != 0) {
            fprintf(stderr, "broadcast: %s\n", eb.msg);
            return 1;
        }
        for (size_t i = 0; i < nb; i++)
            if (b[i] != (uint8_t)(cc_mix(i ^ (uint64_t)root << 32) >> 3)) {
                fprintf(stderr, "broadcast from %d: byte %zu wrong\n", root, i);
                return 1;
            }
        digest = crc32(digest, b, (uInt)nb);
    }
    for (size_t i = 0; i < nb; i++)
        b[i] = (uint8_t)(cc_mix(i * 3 + (uint64_t)R) >> 5);
    if (ct_comm_allgather(w.comm, b, g, nb, &eb) != 0) {
        fprintf(stderr, "allgather: %s\n", eb.msg);
        return 1;
    }
    for (int k = 0; k < W; k++)
        for (size_t i = 0; i < nb; i++)
            if (g[(size_t)k * nb + i] != (uint8_t)(cc_mix(i * 3 + (uint64_t)k) >> 5)) {
                fprintf(stderr, "allgather: rank %d's byte %zu wrong\n", k, i);
                return 1;
            }
    digest = crc32(digest, g, (uInt)(nb * (size_t)W));
    free(b);
    free(g);
    if (ct_comm_barrier(w.comm, &eb) != 0) {
        fprintf(stderr, "barrier: %s\n", eb.msg);
        return 1;
    }
    printf("digest %08lx collectives %llu seconds %.2f\n", digest,
           (unsigned long long)ct_comm_count(w.comm), (double)(ct_time_ms() - t0) / 1000.0);
    return bad;
}

static int mode_loop(long n)
{
    float *v = malloc((size_t)n * sizeof *v);
    if (v == NULL)
        return 1;
    ct_errbuf_t eb;
    for (long it = 0;; it++) {
        for (long i = 0; i < n; i++)
            v[i] = 1.0f;
        int64_t t0 = ct_time_ms();
        int rc = ct_comm_allreduce(w.comm, v, n, CT_DTYPE_F32, CT_COMM_SUM, &eb);
        if (rc != 0) {
            fprintf(stderr, "iteration %ld failed after %lld ms: %s: %s\n", it,
                    (long long)(ct_time_ms() - t0), ct_err_name(rc), eb.msg);
            free(v);
            return 3;
        }
        if (v[0] != (float)w.env.world_size || v[n - 1] != (float)w.env.world_size) {
            fprintf(stderr, "iteration %ld: wrong sum %g\n", it, (double)v[0]);
            free(v);
            return 1;
        }
        if (it == 0) {
            printf("ready\n");
            fflush(stdout);
        }
    }
}

static int mode_mismatch(void)
{
    float v[11] = {0};
    ct_errbuf_t eb;
    int64_t t0 = ct_time_ms();
    int rc =
        ct_comm_allreduce(w.comm, v, w.env.rank == 0 ? 10 : 11, CT_DTYPE_F32, CT_COMM_SUM, &eb);
    printf("%s after %lld ms: %s\n", ct_err_name(rc), (long long)(ct_time_ms() - t0), eb.msg);
    return rc == CT_EPROTOCOL || rc == CT_EPEER ? 0 : 1;
}

static int mode_hello(void)
{
    double v = (double)w.env.rank;
    ct_errbuf_t eb;
    if (ct_comm_allreduce(w.comm, &v, 1, CT_DTYPE_F64, CT_COMM_SUM, &eb) != 0) {
        fprintf(stderr, "%s\n", eb.msg);
        return 1;
    }
    printf("prefix %s sum %g\n", w.key_prefix, v);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: comm_worker check|loop N|mismatch|hello\n");
        return 2;
    }
    if (strcmp(argv[1], "hello") == 0 && argc == 3) {
        int late = atoi(argv[2]);
        const char *ms = strchr(argv[2], ':');
        const char *rank = getenv("RANK");
        if (ms != NULL && rank != NULL && atoi(rank) == late)
            ct_sleep_ms(atol(ms + 1));
    }
    ct_errbuf_t eb;
    if (ct_worker_init(&w, NULL, &eb) != 0) {
        fprintf(stderr, "ct_worker_init: %s\n", eb.msg);
        return 1;
    }
    int rc;
    if (strcmp(argv[1], "check") == 0)
        rc = mode_check();
    else if (strcmp(argv[1], "loop") == 0 && argc == 3)
        rc = mode_loop(atol(argv[2]));
    else if (strcmp(argv[1], "mismatch") == 0)
        rc = mode_mismatch();
    else if (strcmp(argv[1], "hello") == 0)
        rc = mode_hello();
    else {
        fprintf(stderr, "comm_worker: unknown mode %s\n", argv[1]);
        rc = 2;
    }
    ct_worker_close(&w);
    return rc;
}
