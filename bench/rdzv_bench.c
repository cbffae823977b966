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
 *
 * The etcd column (--etcd-max M, default 1024; 0: none): the same join through the rendezvous
 * kept in etcd (ctrun_etcd_rdzv.h, --rdzv_backend=etcd-v3), N simulated agents on one libuv loop,
 * each with its own etcd clients (membership lease, join transaction, watch, proposals), against
 * one etcd member this program starts on loopback ports (etcd from $CTRUN_ETCD or PATH; the
 * column is skipped without one): time from the first join to the moment every agent knows its
 * rank, one run per N up to M, given up after --etcd-timeout seconds (default 300).
 */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <uv.h>

#include "ct_store_client.h"
#include "ct_time.h"
#include "ctrun_etcd_rdzv.h"
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

/* ---- the etcd column ------------------------------------------------------------------------ */

typedef struct etcd_server {
    pid_t pid;
    char dir[256];
    char endpoint[64];
} etcd_server_t;

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static size_t etcd_sink(char *p, size_t size, size_t n, void *data)
{
    (void)p;
    (void)data;
    return size * n;
}

/* Starts one etcd member on two free loopback ports, data in a temporary folder; waits (20 s
 * at most) until it answers /health. Returns 0, 1 when there is no etcd, -1 on failure. */
static int etcd_server_start(etcd_server_t *s)
{
    const char *bin = getenv("CTRUN_ETCD");
    static char found[4096];
    if (bin == NULL || bin[0] == '\0') {
        char path[4096];
        snprintf(path, sizeof path, "%s", getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
        bin = NULL;
        for (char *save = NULL, *d = strtok_r(path, ":", &save); d && !bin;
             d = strtok_r(NULL, ":", &save)) {
            snprintf(found, sizeof found, "%s/etcd", d);
            if (access(found, X_OK) == 0)
                bin = found;
        }
    }
    if (bin == NULL || access(bin, X_OK) != 0)
        return 1;
    const char *tmp = getenv("TMPDIR");
    snprintf(s->dir, sizeof s->dir, "%s/rdzv_bench_etcd.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(s->dir) == NULL)
        return -1;
    int cport = free_port(), pport = free_port();
    while (pport == cport)
        pport = free_port();
    char client[64], peer[64], cluster[96], data[300], log[300];
    snprintf(s->endpoint, sizeof s->endpoint, "127.0.0.1:%d", cport);
    snprintf(client, sizeof client, "http://127.0.0.1:%d", cport);
    snprintf(peer, sizeof peer, "http://127.0.0.1:%d", pport);
    snprintf(cluster, sizeof cluster, "b=%s", peer);
    snprintf(data, sizeof data, "%s/data", s->dir);
    snprintf(log, sizeof log, "%s/etcd.log", s->dir);
    fflush(stdout); /* the child must not write what is buffered here */
    fflush(stderr);
    s->pid = fork();
    if (s->pid < 0)
        return -1;
    if (s->pid == 0) {
        FILE *f = freopen(log, "w", stdout);
        if (f != NULL)
            dup2(STDOUT_FILENO, STDERR_FILENO);
        execl(bin, bin, "--name", "b", "--data-dir", data, "--listen-client-urls", client,
              "--advertise-client-urls", client, "--listen-peer-urls", peer,
              "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster, (char *)NULL);
        _exit(127);
    }
    char url[128];
    snprintf(url, sizeof url, "%s/health", client);
    int64_t deadline = ct_time_ms() + 20000;
    while (ct_time_ms() < deadline) {
        CURL *h = curl_easy_init();
        long status = 0;
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 1000L);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, etcd_sink);
        bool ok = curl_easy_perform(h) == CURLE_OK &&
                  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK &&
                  status == 200;
        curl_easy_cleanup(h);
        if (ok)
            return 0;
        if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
            s->pid = -1;
            fprintf(stderr, "rdzv_bench: etcd exited; see %s\n", log);
            return -1;
        }
        struct timespec ts = {0, 50 * 1000000};
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "rdzv_bench: etcd did not answer in 20 s; see %s\n", log);
    return -1;
}

static void etcd_server_stop(etcd_server_t *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        s->pid = -1;
    }
    if (s->dir[0] != '\0') {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "rdzv_bench: cannot remove %s\n", s->dir);
        s->dir[0] = '\0';
    }
}

typedef struct enode {
    struct erun *run;
    ctrun_etcd_rdzv_t *r;
    char id[32];
    int rank, nnodes;
    bool got;
} enode_t;

typedef struct erun {
    uv_loop_t loop;
    uv_timer_t deadline;
    enode_t *nodes;
    int n, got;
    bool failed, timed_out;
    int64_t t_end;
    char error[CT_ERRBUF_SIZE * 2];
} erun_t;

static void etcd_on_event(void *data, const ctrun_etcd_rdzv_event_t *ev)
{
    enode_t *x = data;
    erun_t *R = x->run;
    if (ev->kind == CTRUN_ETCD_RDZV_ROUND && !x->got) {
        x->got = true;
        x->rank = ev->plan->group_rank;
        x->nnodes = ev->plan->nnodes;
        if (++R->got == R->n) {
            R->t_end = ct_time_ns();
            uv_stop(&R->loop);
        }
    } else if (ev->kind == CTRUN_ETCD_RDZV_ERROR && !R->failed) {
        R->failed = true;
        snprintf(R->error, sizeof R->error, "%s: %s", x->id, ev->text);
        uv_stop(&R->loop);
    }
}

static void etcd_on_deadline(uv_timer_t *t)
{
    erun_t *R = t->data;
    R->timed_out = true;
    uv_stop(&R->loop);
}

/* One run of n agents through the rendezvous in etcd; the milliseconds until every agent knew
 * its rank in *ms, or -1 (with a message) when it failed or timed out. */
static int etcd_run_once(const char *endpoint, int n, int timeout_s, double *ms)
{
    erun_t *R = calloc(1, sizeof *R);
    if (R == NULL || (R->nodes = calloc((size_t)n, sizeof *R->nodes)) == NULL) {
        free(R);
        return -1;
    }
    R->n = n;
    uv_loop_init(&R->loop);
    uv_timer_init(&R->loop, &R->deadline);
    R->deadline.data = R;
    char run_id[64];
    snprintf(run_id, sizeof run_id, "bench-%d-%d", n, (int)getpid());
    int64_t t0 = ct_time_ns();
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        enode_t *x = &R->nodes[i];
        x->run = R;
        x->rank = -1;
        snprintf(x->id, sizeof x->id, "a%d", i);
        ctrun_etcd_rdzv_params_t p = {.etcd = {.endpoints = endpoint,
                                               .request_timeout_ms = (int64_t)timeout_s * 1000},
                                      .run_id = run_id,
                                      .id = x->id,
                                      .host = "bench",
                                      .nproc = 1 + i % 8,
                                      .min_nodes = 1,
                                      .max_nodes = n,
                                      .max_restarts = 0,
                                      .last_call_ms = (int64_t)timeout_s * 1000 * 2,
                                      .ttl_s = timeout_s + 60};
        ct_errbuf_t eb = {{0}};
        if (ctrun_etcd_rdzv_start(&R->loop, &p, etcd_on_event, x, &x->r, &eb) != 0) {
            snprintf(R->error, sizeof R->error, "%s", eb.msg);
            rc = -1;
        }
    }
    if (rc == 0) {
        uv_timer_start(&R->deadline, etcd_on_deadline, (uint64_t)timeout_s * 1000, 0);
        uv_run(&R->loop, UV_RUN_DEFAULT);
        uv_timer_stop(&R->deadline);
        *ms = (double)(R->t_end - t0) / 1e6;
        if (R->failed || R->timed_out) {
            if (R->timed_out)
                snprintf(R->error, sizeof R->error, "%d of %d agents knew their rank after %d s",
                         R->got, n, timeout_s);
            rc = -1;
        }
    }
    /* Every rank once, everyone in one round of n. */
    char *seen = calloc((size_t)n, 1);
    for (int i = 0; rc == 0 && i < n; i++) {
        enode_t *x = &R->nodes[i];
        if (seen == NULL || x->rank < 0 || x->rank >= n || seen[x->rank] || x->nnodes != n) {
            snprintf(R->error, sizeof R->error, "agent %d has a bad plan (rank %d of %d)", i,
                     x->rank, x->nnodes);
            rc = -1;
            break;
        }
        seen[x->rank] = 1;
    }
    free(seen);
    if (rc != 0)
        fprintf(stderr, "rdzv_bench: etcd, N=%d: %s\n", n, R->error);
    /* Leave: revoke the leases; the last one out removes the job's keys. */
    for (int i = 0; i < n; i++)
        ctrun_etcd_rdzv_close(R->nodes[i].r, CTRUN_ETCD_RDZV_FINISH);
    uv_close((uv_handle_t *)&R->deadline, NULL);
    uv_run(&R->loop, UV_RUN_DEFAULT);
    uv_loop_close(&R->loop);
    free(R->nodes);
    free(R);
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
    int threads = 32, runs = 3, etcd_max = 1024, etcd_timeout = 300;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--agents") == 0 && i + 1 < argc)
            list = argv[++i];
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--etcd-max") == 0 && i + 1 < argc)
            etcd_max = atoi(argv[++i]);
        else if (strcmp(argv[i], "--etcd-timeout") == 0 && i + 1 < argc)
            etcd_timeout = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: rdzv_bench [--agents N,N,...] [--threads K] [--runs R] "
                            "[--etcd-max M] [--etcd-timeout S]\n");
            return 2;
        }
    }
    if (threads < 1 || runs < 1 || runs > 100 || etcd_max < 0 || etcd_timeout < 1) {
        fprintf(stderr, "rdzv_bench: --threads, --runs and --etcd-timeout must be positive (runs "
                        "<= 100), --etcd-max at least 0\n");
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
    etcd_server_t etcd = {.pid = -1};
    if (etcd_max > 0) {
        curl_global_init(CURL_GLOBAL_DEFAULT);
        int erc = etcd_server_start(&etcd);
        if (erc == 1)
            printf("# etcd column skipped: no etcd (set CTRUN_ETCD or put etcd on PATH)\n");
        if (erc != 0) {
            etcd_server_stop(&etcd);
            etcd_max = 0;
        } else {
            printf("# etcd_ms: the same join through --rdzv_backend=etcd-v3's rendezvous, N agents "
                   "on one loop against one etcd member at %s; one run, N <= %d\n",
                   etcd.endpoint, etcd_max);
        }
    }
    printf("# %6s %12s %12s %14s %14s %12s %12s\n", "agents", "connect_ms", "joined_ms",
           "rendezvous_ms", "store_cpu_ms", "plan_bytes", "etcd_ms");
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
        char ecol[32] = "-";
        if (ok > 0 && n <= etcd_max) {
            double ems = 0;
            if (etcd_run_once(etcd.endpoint, n, etcd_timeout, &ems) == 0)
                snprintf(ecol, sizeof ecol, "%.1f", ems);
            else
                snprintf(ecol, sizeof ecol, "failed");
        }
        if (ok > 0)
            printf("  %6d %12.1f %12.1f %14.1f %14.1f %12zu %12s\n", n, median(c, ok),
                   median(j, ok), median(t, ok), median(cpu, ok), plan, ecol);
        fflush(stdout);
    }
    free(copy);
    etcd_server_stop(&etcd);
    return status;
}
