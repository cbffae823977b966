/*
 * allreduce_bench.c - bus bandwidth of libctworker's allreduce, in nccl-tests' format, with a
 * memcpy bandwidth reference measured in the same run. Not a test: it asserts nothing.
 *
 *   build/bench/allreduce_bench --ctrun-store build/launcher/ctrun-store [--nranks 2,4]
 *                               [--minbytes 4] [--maxbytes 64M] [--iters 20] [--warmup 5]
 *                               [--backend cpu|nccl|auto]
 *   ctrun --nproc_per_node=4 build/bench/allreduce_bench [options]      (later, with ctrun)
 *
 * Without the torchrun variables it is the launcher: it measures memcpy, starts a ctrun-store
 * on loopback and, for each rank count, that many copies of itself with the torchrun
 * environment (one node). With them it is a rank: ct_worker_init, then for each size (doubling
 * from minbytes to maxbytes) warmup calls, `iters` timed in-place f32 sum allreduces (of zeros:
 * the arithmetic costs the same for any normal value), and one checked call whose inputs have
 * an exact sum, whose wrong elements are counted (#wrong). Rank 0 prints.
 *
 * Columns (nccl-tests doc/PERFORMANCE.md): time = the slowest rank's mean time per call;
 * algbw = size / time; busbw = algbw * 2(n-1)/n, the traffic each link carries in a ring
 * allreduce, comparable across rank counts and with a link's (here: memory's) bandwidth. On
 * one machine every "link" is the kernel copying through loopback TCP, so busbw is bounded by
 * memory bandwidth shared by all ranks; the footer prints it as a fraction of one thread's
 * memcpy bandwidth.
 *
 * With NCCL (a GPU visible, backend auto or nccl) the buffer is device memory, so only NCCL's
 * own traffic is timed.
 */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ct_config.h"
#include "ct_parse.h"
#include "ct_time.h"
#include "ctworker.h"

#if CT_HAVE_NCCL
#include <cuda_runtime_api.h>
#endif

extern char **environ;

typedef struct opts {
    const char *store_exe;
    int nranks[8];
    int n_nranks;
    size_t minbytes, maxbytes;
    int iters, warmup;
    const char *backend;
} opts_t;

static int usage(const char *msg)
{
    if (msg)
        fprintf(stderr, "allreduce_bench: %s\n", msg);
    fprintf(stderr, "usage: allreduce_bench --ctrun-store PATH [--nranks 2,4] [--minbytes 4] "
                    "[--maxbytes 64M] [--iters 20] [--warmup 5] [--backend cpu|nccl|auto]\n");
    return 2;
}

static int parse(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){.nranks = {2, 4},
                  .n_nranks = 2,
                  .minbytes = 4,
                  .maxbytes = 64u << 20,
                  .iters = 20,
                  .warmup = 5,
                  .backend = NULL};
    ct_errbuf_t eb;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(NULL);
            return 1;
        }
        if (v == NULL)
            return usage("option without a value");
        i++;
        uint64_t sz;
        int64_t n;
        if (strcmp(a, "--ctrun-store") == 0) {
            o->store_exe = v;
        } else if (strcmp(a, "--backend") == 0) {
            o->backend = v;
        } else if (strcmp(a, "--minbytes") == 0 || strcmp(a, "--maxbytes") == 0) {
            if (ct_parse_size(v, (uint64_t)1 << 34, &sz, &eb) != 0 || sz < 4)
                return usage("sizes are 4 bytes to 16 GiB (K/M/G suffixes allowed)");
            *(strcmp(a, "--minbytes") == 0 ? &o->minbytes : &o->maxbytes) = (size_t)sz;
        } else if (strcmp(a, "--iters") == 0 || strcmp(a, "--warmup") == 0) {
            if (ct_parse_int64(v, 0, 1000000, &n, &eb) != 0)
                return usage("--iters / --warmup: a count");
            *(strcmp(a, "--iters") == 0 ? &o->iters : &o->warmup) = (int)n;
        } else if (strcmp(a, "--nranks") == 0) {
            o->n_nranks = 0;
            for (const char *p = v; *p && o->n_nranks < 8;) {
                char *end;
                long k = strtol(p, &end, 10);
                if (end == p || k < 1 || k > 64)
                    return usage("--nranks: a comma-separated list of counts 1..64");
                o->nranks[o->n_nranks++] = (int)k;
                p = *end == ',' ? end + 1 : end;
                if (*end != ',' && *end != '\0')
                    return usage("--nranks: a comma-separated list of counts 1..64");
            }
        } else {
            return usage("unknown option");
        }
    }
    if (o->iters < 1)
        o->iters = 1;
    if (o->minbytes > o->maxbytes)
        return usage("--minbytes above --maxbytes");
    return 0;
}

/* One thread's memcpy bandwidth on a buffer of n bytes: the best of 5 copies, GB/s. */
static double memcpy_gbps(size_t n)
{
    char *a = malloc(n), *b = malloc(n);
    if (a == NULL || b == NULL) {
        free(a);
        free(b);
        return 0;
    }
    memset(a, 1, n);
    memset(b, 2, n); /* touch every page first */
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        int64_t t0 = ct_time_ns();
        memcpy(b, a, n);
        double s = (double)(ct_time_ns() - t0) / 1e9;
        best = s < best ? s : best;
    }
    volatile char sink = b[n / 2];
    (void)sink;
    free(a);
    free(b);
    return (double)n / best / 1e9;
}

/* ---- a rank ------------------------------------------------------------------------------- */

static int rank_main(const opts_t *o)
{
    double ref_gbps = 0;
    const char *ref = getenv("CT_BENCH_MEMCPY_GBPS");
    if (ref != NULL)
        ref_gbps = atof(ref);
    else if (getenv("RANK") && atoi(getenv("RANK")) == 0)
        ref_gbps = memcpy_gbps(o->maxbytes < (64u << 20) ? 64u << 20 : o->maxbytes);

    ct_worker_opts_t wo = {0};
    ct_errbuf_t eb;
    if (o->backend != NULL && ct_comm_backend_parse(o->backend, &wo.backend, &eb) != 0) {
        fprintf(stderr, "allreduce_bench: --backend: %s\n", eb.msg);
        return 2;
    }
    ct_worker_t w;
    if (ct_worker_init(&w, &wo, &eb) != 0) {
        fprintf(stderr, "allreduce_bench: %s\n", eb.msg);
        return 1;
    }
    const int W = w.env.world_size, R = w.env.rank;
    const bool gpu = ct_comm_backend(w.comm) == CT_COMM_NCCL;
    size_t maxcount = o->maxbytes / 4;
    float *host = malloc(maxcount * sizeof *host), *buf = host;
    if (host == NULL) {
        fprintf(stderr, "allreduce_bench: out of memory\n");
        return 1;
    }
#if CT_HAVE_NCCL
    if (gpu && cudaMalloc((void **)&buf, maxcount * sizeof *buf) != cudaSuccess) {
        fprintf(stderr, "allreduce_bench: cudaMalloc of %zu bytes failed\n", o->maxbytes);
        return 1;
    }
#endif
    if (R == 0) {
        printf("# allreduce_bench (ctrun %s): %s, %d rank%s on one host, f32 sum in place\n",
               CT_VERSION, gpu ? "NCCL" : "CPU ring over loopback TCP", W, W == 1 ? "" : "s");
        printf("# iters %d, warmup %d; time = slowest rank's mean per call; busbw = algbw * "
               "2(n-1)/n\n",
               o->iters, o->warmup);
        printf("# memcpy reference: %.2f GB/s (one thread, 64 MiB, best of 5)\n", ref_gbps);
        printf("#\n# %10s %12s %6s %6s %11s %12s %12s %7s\n", "size(B)", "count", "type", "redop",
               "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
    }
    double sum_bus = 0, bus_max = 0;
    int rows = 0;
    int rc = 0;
    for (size_t bytes = o->minbytes; bytes <= o->maxbytes && rc == 0; bytes *= 2) {
        size_t count = bytes / 4;
#if CT_HAVE_NCCL
        if (gpu)
            cudaMemset(buf, 0, count * sizeof *buf);
        else
#endif
            memset(buf, 0, count * sizeof *buf);
        for (int i = 0; i < o->warmup && rc == 0; i++)
            rc = ct_comm_allreduce(w.comm, buf, (int64_t)count, CT_DTYPE_F32, CT_COMM_SUM, &eb);
        if (rc == 0)
            rc = ct_comm_barrier(w.comm, &eb);
        int64_t t0 = ct_time_ns();
        for (int i = 0; i < o->iters && rc == 0; i++)
            rc = ct_comm_allreduce(w.comm, buf, (int64_t)count, CT_DTYPE_F32, CT_COMM_SUM, &eb);
        double us = (double)(ct_time_ns() - t0) / 1e3 / o->iters;
        /* The checked call: integers whose sum is exact in float. */
        for (size_t i = 0; i < count; i++)
            host[i] = (float)(R + 1 + (int)(i % 7));
#if CT_HAVE_NCCL
        if (gpu)
            cudaMemcpy(buf, host, count * sizeof *buf, cudaMemcpyHostToDevice);
#endif
        if (rc == 0)
            rc = ct_comm_allreduce(w.comm, buf, (int64_t)count, CT_DTYPE_F32, CT_COMM_SUM, &eb);
#if CT_HAVE_NCCL
        if (gpu)
            cudaMemcpy(host, buf, count * sizeof *buf, cudaMemcpyDeviceToHost);
#endif
        double wrong = 0;
        for (size_t i = 0; i < count; i++)
            wrong += host[i] != (float)(W * (W + 1) / 2 + W * (int)(i % 7));
        double stats[2] = {us, wrong}, all[2 * 64];
        if (rc == 0)
            rc = ct_comm_allgather(w.comm, stats, all, sizeof stats, &eb);
        if (rc != 0)
            break;
        double tmax = 0, nwrong = 0;
        for (int k = 0; k < W; k++) {
            tmax = all[2 * k] > tmax ? all[2 * k] : tmax;
            nwrong += all[2 * k + 1];
        }
        double algbw = (double)bytes / (tmax * 1e-6) / 1e9;
        double busbw = algbw * 2.0 * (W - 1) / W;
        sum_bus += busbw;
        rows++;
        if (bytes == o->maxbytes || bytes * 2 > o->maxbytes)
            bus_max = busbw;
        if (R == 0) {
            printf("  %10zu %12zu %6s %6s %11.1f %12.3f %12.3f %7.0f\n", bytes, count, "float",
                   "sum", tmax, algbw, busbw, nwrong);
            fflush(stdout);
        }
    }
    if (rc != 0)
        fprintf(stderr, "allreduce_bench: rank %d: %s\n", R, eb.msg);
    else if (R == 0) {
        printf("# Avg bus bandwidth    : %.3f GB/s\n", rows ? sum_bus / rows : 0.0);
        printf("# busbw at the largest size: %.3f GB/s = %.2f x the memcpy reference (%.2f "
               "GB/s)\n",
               bus_max, ref_gbps > 0 ? bus_max / ref_gbps : 0.0, ref_gbps);
    }
#if CT_HAVE_NCCL
    if (gpu)
        cudaFree(buf);
#endif
    free(host);
    ct_worker_close(&w);
    return rc == 0 ? 0 : 1;
}

/* ---- the launcher ------------------------------------------------------------------------- */

static int spawn_ranks(char **argv, int world, int port, double ref_gbps)
{
    pid_t pids[64];
    int started = 0, failed = 0;
    for (int r = 0; r < world; r++) {
        char v[10][96];
        snprintf(v[0], sizeof v[0], "RANK=%d", r);
        snprintf(v[1], sizeof v[1], "WORLD_SIZE=%d", world);
        snprintf(v[2], sizeof v[2], "LOCAL_RANK=%d", r);
        snprintf(v[3], sizeof v[3], "LOCAL_WORLD_SIZE=%d", world);
        snprintf(v[4], sizeof v[4], "MASTER_PORT=%d", port);
        snprintf(v[5], sizeof v[5], "MASTER_ADDR=127.0.0.1");
        snprintf(v[6], sizeof v[6], "TORCHELASTIC_RUN_ID=allreduce-bench-%d", world);
        snprintf(v[7], sizeof v[7], "TORCHELASTIC_RESTART_COUNT=0");
        snprintf(v[8], sizeof v[8], "TORCHELASTIC_USE_AGENT_STORE=True");
        snprintf(v[9], sizeof v[9], "CT_BENCH_MEMCPY_GBPS=%.4f", ref_gbps);
        size_t n = 0;
        while (environ[n])
            n++;
        char **envp = calloc(n + 11, sizeof *envp);
        if (envp == NULL)
            return 1;
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            bool ours = false;
            for (int j = 0; j < 10; j++) {
                size_t len = strcspn(v[j], "=") + 1;
                ours |= strncmp(environ[i], v[j], len) == 0;
            }
            if (!ours)
                envp[k++] = environ[i];
        }
        for (int j = 0; j < 10; j++)
            envp[k++] = v[j];
        envp[k] = NULL;
        int e = posix_spawn(&pids[r], "/proc/self/exe", NULL, NULL, argv, envp);
        free(envp);
        if (e != 0) {
            fprintf(stderr, "allreduce_bench: cannot start rank %d: %s\n", r, strerror(e));
            failed = 1;
            break;
        }
        started++;
    }
    for (int r = 0; r < started; r++) {
        int st;
        while (waitpid(pids[r], &st, 0) < 0 && errno == EINTR) {
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            if (!failed)
                for (int k = 0; k < started; k++)
                    kill(pids[k], SIGTERM);
            failed = 1;
        }
    }
    return failed;
}

int main(int argc, char **argv)
{
    opts_t o;
    int rc = parse(argc, argv, &o);
    if (rc != 0)
        return rc == 1 ? 0 : rc;
    if (getenv("RANK") != NULL)
        return rank_main(&o);
    if (o.store_exe == NULL)
        return usage("not under a launcher: --ctrun-store PATH is needed to start the store");

    double ref = memcpy_gbps(64u << 20);
    int fds[2];
    if (pipe(fds) != 0)
        return 1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    char *sargv[] = {(char *)o.store_exe, "--port", "0", "--host", "127.0.0.1", NULL};
    pid_t store;
    int e = posix_spawn(&store, o.store_exe, &fa, NULL, sargv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (e != 0) {
        fprintf(stderr, "allreduce_bench: cannot start %s: %s\n", o.store_exe, strerror(e));
        return 1;
    }
    char line[32] = {0};
    ssize_t got = read(fds[0], line, sizeof line - 1);
    close(fds[0]);
    int port = got > 0 ? atoi(line) : 0;
    if (port <= 0) {
        fprintf(stderr, "allreduce_bench: the store printed no port\n");
        kill(store, SIGTERM);
        waitpid(store, NULL, 0);
        return 1;
    }
    int failed = 0;
    for (int i = 0; i < o.n_nranks && !failed; i++) {
        fflush(stdout);
        failed = spawn_ranks(argv, o.nranks[i], port, ref);
        printf("\n");
    }
    kill(store, SIGTERM);
    waitpid(store, NULL, 0);
    return failed;
}
