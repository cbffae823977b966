/*
 * rdzv_bench.c - how fast N agents get through ctrun's dynamic rendezvous:
 *
 *   rdzv_bench [--agents 16,256,1024,4096] [--threads K] [--runs R]
 *
 * The store and the rendezvous coordinator run as in the hosting agent (ctrun_store +
 * ctrun_rdzv_coord on a libuv loop, here on their own thread); N simulated agents are blocking
 * store clients (ct_store_client.h) driven by K threads (default 32), each agent with its own
 * connection, doing what an agent's rendezvous does (ctrun_rdzv.h): read /ctrun/job, take a
 * node id (ADD /ctrun/joined), claim /ctrun/node/<id>, read /ctrun/round, append itself to the
 * round's ready list, then wait for the plan and parse its group rank from it. The job is
 * --nnodes=1:N, so the round closes when the N-th agent is ready (MAX), and agents have 1..8
 * workers each (different --nproc_per_node per node).
 *
 * Reported per N (median of R runs, default 3): connect = opening the N connections (before the
 * clock starts); rendezvous = first join request to the moment every agent knows its rank;
 * joined = until the last agent is on the ready list (the rest is the plan reaching everyone);
 * store CPU = CPU time of the store's thread (server and coordinator) over that interval; plan
 * = size of the published plan. Every run checks that the ranks are 0..N-1, each once, and the
 * world sizes agree. Not a test: nothing asserts speed.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <uv.h>

#include "ct_store_client.h"
#include "ct_time.h"
#include "ctrun_rdzv.h"
#include "ctrun_store.h"

#define MAX_AGENTS 65536

/* ---- the hosting side --------------------------------------------------------------------- */

typedef struct host {
    uv_loop_t loop;
    uv_async_t stop;
    ctrun_store_t *store;
    ctrun_rdzv_coord_t coord;
    pthread_t thread;
    clockid_t cpu_clock;
    int port;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool ready;
} host_t;

static void on_stop(uv_async_t *h)
{
    host_t *s = h->data;
    ctrun_rdzv_coord_close(&s->coord);
    ctrun_store_close(s->store, NULL, NULL);
    uv_close((uv_handle_t *)&s->stop, NULL);
}

static void *host_main(void *arg)
{
    host_t *s = arg;
    pthread_getcpuclockid(pthread_self(), &s->cpu_clock);
    pthread_mutex_lock(&s->mu);
    s->ready = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    return NULL;
}

static int host_start(host_t *s, int n)
{
    memset(s, 0, sizeof *s);
    ct_errbuf_t eb = {{0}};
    if (uv_loop_init(&s->loop) != 0)
        return -1;
    ctrun_store_opts_t so = {.host = "127.0.0.1"};
    if (ctrun_store_create(&s->loop, &so, &s->store, &eb) != 0) {
        fprintf(stderr, "rdzv_bench: store: %s\n", eb.msg);
        return -1;
    }
    s->port = ctrun_store_port(s->store);
    ctrun_rdzv_params_t p = {.kind = CTRUN_RDZV_KIND_C10D,
                             .run_id = "bench",
                             .min_nodes = 1,
                             .nnodes = n,
                             .max_restarts = 0,
                             .host = "bench",
                             .last_call_ms = 600000,
                             .heartbeat_timeout_ms = 0};
    if (ctrun_rdzv_coord_init(&s->coord, &s->loop, s->store, &p, NULL, NULL, &eb) != 0) {
        fprintf(stderr, "rdzv_bench: coordinator: %s\n", eb.msg);
        return -1;
    }
    uv_async_init(&s->loop, &s->stop, on_stop);
    s->stop.data = s;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, host_main, s) != 0)
        return -1;
    pthread_mutex_lock(&s->mu);
    while (!s->ready)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static void host_stop(host_t *s)
{
    uv_async_send(&s->stop);
    pthread_join(s->thread, NULL);
    uv_loop_close(&s->loop);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
}

static int64_t cpu_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- the agents ------------------------------------------------------------------------- */

typedef struct agent {
    ct_store_client_t c;
    int nproc, id, round;
    ctrun_rdzv_plan_t plan;
    size_t plan_len;
} agent_t;

typedef struct run {
    agent_t *agents;
    int n, threads, port;
    const char *job;
    pthread_barrier_t connected, go;
    int64_t t_start;
    int64_t t_joined; /* the last agent on the ready list (max over threads) */
    int64_t t_end;    /* the last agent to know its rank (max over threads) */
    pthread_mutex_t mu;
    char error[CT_ERRBUF_SIZE + 64];
} run_t;

typedef struct driver {
    run_t *run;
    int index;
} driver_t;

static void fail(run_t *r, const char *what, const ct_errbuf_t *eb)
{
    pthread_mutex_lock(&r->mu);
    if (r->error[0] == '\0')
        snprintf(r->error, sizeof r->error, "%.32s: %s", what, eb->msg);
    pthread_mutex_unlock(&r->mu);
}

/* Steps up to the ready list for one agent. */
static int join(run_t *r, agent_t *a)
{
    ct_errbuf_t eb = {{0}};
    char key[CTRUN_RDZV_KEY_MAX], token[128], line[64];
    ct_store_bytes_t v = {0};
    ctrun_rdzv_key(key, "job");
    if (ct_store_get(&a->c, key, &v, &eb) != 0 || v.len != strlen(r->job) ||
        memcmp(v.data, r->job, v.len) != 0) {
        fail(r, "job", &eb);
        return -1;
    }
    int64_t num = 0;
    ctrun_rdzv_key(key, "joined");
    if (ct_store_add(&a->c, key, 1, &num, &eb) != 0) {
        fail(r, "joined", &eb);
        return -1;
    }
    a->id = (int)num - 1;
    snprintf(token, sizeof token, "%d %d %d bench", a->nproc, (int)getpid(), a->id);
    ctrun_rdzv_key(key, "node/%d", a->id);
    if (ct_store_compare_set(&a->c, key, "", 0, token, strlen(token), &v, &eb) != 0) {
        fail(r, "node", &eb);
        return -1;
    }
    ctrun_rdzv_key(key, "round");
    if (ct_store_get(&a->c, key, &v, &eb) != 0) {
        fail(r, "round", &eb);
        return -1;
    }
    a->round = atoi((const char *)v.data);
    ctrun_rdzv_key(key, "a/%d/ready", a->round);
    snprintf(line, sizeof line, "%d %d\n", a->id, a->nproc);
    if (ct_store_append(&a->c, key, line, strlen(line), &eb) != 0) {
        fail(r, "ready", &eb);
        return -1;
    }
    return 0;
}

/* Waits for the plan and reads this agent's rank from it. */
static int learn(run_t *r, agent_t *a)
{
    ct_errbuf_t eb = {{0}};
    char key[CTRUN_RDZV_KEY_MAX];
    ct_store_bytes_t v = {0};
    ctrun_rdzv_key(key, "a/%d/go", a->round);
    if (ct_store_get(&a->c, key, &v, &eb) != 0) {
        fail(r, "go", &eb);
        return -1;
    }
    char *text = strndup((const char *)v.data, v.len);
    int rc = text ? ctrun_rdzv_plan_parse(text, a->id, &a->plan, &eb) : -ENOMEM;
    a->plan_len = v.len;
    free(text);
    if (rc != 0) {
        fail(r, "plan", &eb);
        return -1;
    }
    return 0;
}

static void *driver_main(void *arg)
{
    driver_t *d = arg;
    run_t *r = d->run;
    ct_errbuf_t eb = {{0}};
    for (int i = d->index; i < r->n; i += r->threads) {
        ct_store_client_opts_t o = {.timeout_ms = 120000, .connect_timeout_ms = 30000};
        if (ct_store_client_connect(&r->agents[i].c, "127.0.0.1", r->port, &o, &eb) != 0)
            fail(r, "connect", &eb);
    }
    pthread_barrier_wait(&r->connected);
    pthread_barrier_wait(&r->go);
    for (int i = d->index; i < r->n && r->error[0] == '\0'; i += r->threads)
        join(r, &r->agents[i]);
    int64_t tj = ct_time_ns();
    pthread_mutex_lock(&r->mu);
    if (tj > r->t_joined)
        r->t_joined = tj;
    pthread_mutex_unlock(&r->mu);
    for (int i = d->index; i < r->n && r->error[0] == '\0'; i += r->threads)
        learn(r, &r->agents[i]);
    int64_t t = ct_time_ns();
    pthread_mutex_lock(&r->mu);
    if (t > r->t_end)
        r->t_end = t;
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

typedef struct result {
    double connect_ms, joined_ms, rdzv_ms, store_cpu_ms;
    size_t plan_bytes;
} result_t;

static int run_once(int n, int threads, result_t *out)
{
    host_t host;
    if (host_start(&host, n) != 0)
        return -1;
    run_t r = {.n = n, .threads = threads < n ? threads : n, .port = host.port};
    char job[256];
    ctrun_rdzv_params_t jp = {
        .kind = CTRUN_RDZV_KIND_C10D, .run_id = "bench", .min_nodes = 1, .nnodes = n};
    ctrun_rdzv_job_text(&jp, job, sizeof job);
    r.job = job;
    r.agents = calloc((size_t)n, sizeof *r.agents);
    driver_t *d = calloc((size_t)r.threads, sizeof *d);
    pthread_t *tid = calloc((size_t)r.threads, sizeof *tid);
    if (r.agents == NULL || d == NULL || tid == NULL) {
        fprintf(stderr, "rdzv_bench: out of memory\n");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        r.agents[i].nproc = 1 + i % 8;
        r.agents[i].c.fd = -1;
    }
    pthread_mutex_init(&r.mu, NULL);
    pthread_barrier_init(&r.connected, NULL, (unsigned)r.threads + 1);
    pthread_barrier_init(&r.go, NULL, (unsigned)r.threads + 1);
    int64_t t_conn = ct_time_ns();
    for (int t = 0; t < r.threads; t++) {
        d[t] = (driver_t){.run = &r, .index = t};
        pthread_create(&tid[t], NULL, driver_main, &d[t]);
    }
    pthread_barrier_wait(&r.connected);
    int64_t cpu0 = cpu_ns(host.cpu_clock);
    r.t_start = ct_time_ns();
    pthread_barrier_wait(&r.go);
    for (int t = 0; t < r.threads; t++)
        pthread_join(tid[t], NULL);
    int64_t cpu1 = cpu_ns(host.cpu_clock);
    int rc = 0;
    if (r.error[0] != '\0') {
        fprintf(stderr, "rdzv_bench: N=%d: %s\n", n, r.error);
        rc = -1;
    }
    /* Every rank once, one world size. */
    char *seen = calloc((size_t)n, 1);
    long long world = 0;
    for (int i = 0; i < n; i++)
        world += r.agents[i].nproc;
    for (int i = 0; rc == 0 && i < n; i++) {
        const ctrun_rdzv_plan_t *p = &r.agents[i].plan;
        if (p->group_rank < 0 || p->group_rank >= n || seen[p->group_rank] || p->nnodes != n ||
            p->world_size != world) {
            fprintf(stderr, "rdzv_bench: N=%d: agent %d has a bad plan (rank %d of %d)\n", n, i,
                    p->group_rank, p->nnodes);
            rc = -1;
            break;
        }
        seen[p->group_rank] = 1;
    }
    free(seen);
    out->connect_ms = (double)(r.t_start - t_conn) / 1e6;
    out->joined_ms = (double)(r.t_joined - r.t_start) / 1e6;
    out->rdzv_ms = (double)(r.t_end - r.t_start) / 1e6;
    out->store_cpu_ms = (double)(cpu1 - cpu0) / 1e6;
    out->plan_bytes = r.agents[0].plan_len;
    for (int i = 0; i < n; i++)
        ct_store_client_close(&r.agents[i].c);
    host_stop(&host);
    pthread_barrier_destroy(&r.connected);
    pthread_barrier_destroy(&r.go);
    pthread_mutex_destroy(&r.mu);
    free(r.agents);
    free(d);
    free(tid);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    const char *list = "16,256,1024,4096";
    int threads = 32, runs = 3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--agents") == 0 && i + 1 < argc)
            list = argv[++i];
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: rdzv_bench [--agents N,N,...] [--threads K] [--runs R]\n");
            return 2;
        }
    }
    if (threads < 1 || runs < 1 || runs > 100) {
        fprintf(stderr, "rdzv_bench: --threads and --runs must be positive (runs <= 100)\n");
        return 2;
    }
    /* Two descriptors per agent (its client and the store's end). */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    getrlimit(RLIMIT_NOFILE, &rl);
    printf("# rdzv_bench: ctrun's dynamic rendezvous (--nnodes=1:N), N agents as blocking store "
           "clients on %d threads, store + coordinator on one thread; median of %d runs\n",
           threads, runs);
    printf("# %6s %12s %12s %14s %14s %12s\n", "agents", "connect_ms", "joined_ms", "rendezvous_ms",
           "store_cpu_ms", "plan_bytes");
    char *copy = strdup(list);
    int status = 0;
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        int n = atoi(tok);
        if (n < 1 || n > MAX_AGENTS || n > CTRUN_RDZV_MAX_NODES) {
            fprintf(stderr, "rdzv_bench: %s agents is out of range (1..%d)\n", tok,
                    CTRUN_RDZV_MAX_NODES);
            status = 2;
            break;
        }
        if ((rlim_t)(2 * n + 64) > rl.rlim_cur) {
            printf("# %6d skipped: needs %d descriptors, the limit is %llu\n", n, 2 * n + 64,
                   (unsigned long long)rl.rlim_cur);
            continue;
        }
        double c[100], j[100], t[100], cpu[100];
        size_t plan = 0;
        int ok = 0;
        for (int k = 0; k < runs; k++) {
            result_t res;
            if (run_once(n, threads, &res) != 0) {
                status = 1;
                break;
            }
            c[ok] = res.connect_ms;
            j[ok] = res.joined_ms;
            t[ok] = res.rdzv_ms;
            cpu[ok] = res.store_cpu_ms;
            plan = res.plan_bytes;
            ok++;
        }
        if (ok > 0)
            printf("  %6d %12.1f %12.1f %14.1f %14.1f %12zu\n", n, median(c, ok), median(j, ok),
                   median(t, ok), median(cpu, ok), plan);
        fflush(stdout);
    }
    free(copy);
    return status;
}
