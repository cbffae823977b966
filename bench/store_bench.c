/*
 * store_bench.c - throughput, latency and rendezvous-storm benchmark of ctrun-store against
 * PyTorch's own TCPStore servers, measured in the same run.
 *
 *   store_bench --ctrun-store PATH [--preload SHIM.so] [--clients M] [--seconds S]
 *               [--pipeline K] [--storm N,N...] [--no-pytorch]
 *
 * Throughput: M client processes, each with one connection (our C client, in the dialect the
 * server speaks, so that only the server differs), run an op mix for S seconds: set, get
 * (WAIT + GET, as PyTorch's client does), add, wait on an existing key, check, and in v2
 * multi_get of 4 keys. Reported: ops/s over all clients, p50/p99 latency per call, and the
 * ratio to each PyTorch server, plus the server's own CPU time per request (from /proc): what
 * the server controls when 2 cores are shared with 64 client processes.
 * Capacity: the same clients with K raw requests in flight each (--pipeline, default 16), so
 * that the server, rather than client scheduling, is the limit.
 * Storm: N clients connect at once (P processes of raw non-blocking sockets), each sends
 * ADD init/ 1; the one that reads N sets a release key; all WAIT on it. Reported: time from
 * the start signal until the last client was released.
 *
 * PyTorch servers: 1.13 from CTRUN_TORCH13_PYTHON (default /usr/bin/python3; v1 dialect), and
 * from CTRUN_TORCH2_PYTHON (default ~/.venvs/torch2/bin/python; v2) both its libuv backend
 * and its legacy one. Missing interpreters are skipped with a '#' note. --preload runs them
 * with store_bench_nodns.so in LD_PRELOAD (reverse DNS of loopback answered locally; see
 * that file), which only matters on machines without a working resolver.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ct_config.h"
#include "ct_store_client.h"
#include "ct_store_codec.h"
#include "ct_time.h"

/* ---- servers ------------------------------------------------------------------------------ */

typedef struct server {
    const char *name;
    ct_store_dialect_t dialect;
    pid_t pid;
    int port;
} server_t;

static const char *pt_server_py =
    "import sys, time, resource, datetime, torch.distributed as d\n"
    "s, h = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
    "resource.setrlimit(resource.RLIMIT_NOFILE, (h, h))\n"
    "kw = {}\n"
    "if len(sys.argv) > 1: kw['use_libuv'] = sys.argv[1] == 'libuv'\n"
    "st = d.TCPStore('127.0.0.1', 0, is_master=True, wait_for_workers=False,\n"
    "                timeout=datetime.timedelta(seconds=600), **kw)\n"
    "print(st.port, flush=True)\n"
    "sys.stdin.read()\n";

static const char *preload;

/* Starts argv with stdout piped; returns the first line as the port. stdin is a pipe whose
 * closing (or SIGKILL) ends the server. */
static int server_start(server_t *s, char *const argv[], bool with_preload)
{
    int out[2], in[2];
    if (pipe(out) != 0 || pipe(in) != 0)
        return -errno;
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        setpgid(0, 0);
        dup2(out[1], 1);
        dup2(in[0], 0);
        close(out[0]);
        close(in[1]);
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0 && getenv("STORE_BENCH_VERBOSE") == NULL)
            dup2(devnull, 2);
        if (with_preload && preload != NULL)
            setenv("LD_PRELOAD", preload, 1);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(out[1]);
    close(in[0]);
    s->pid = pid;
    char line[64] = {0};
    size_t n = 0;
    while (n + 1 < sizeof line) {
        ssize_t r = read(out[0], line + n, 1);
        if (r <= 0 || line[n] == '\n')
            break;
        n++;
    }
    close(out[0]);
    s->port = atoi(line);
    return s->port > 0 ? 0 : -EIO;
}

static void server_stop(server_t *s)
{
    if (s->pid > 0) {
        kill(-s->pid, SIGKILL);
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
    }
    s->pid = 0;
}

static bool python_has_torch(const char *py, int major_min, int major_max, char *ver, size_t n)
{
    if (access(py, X_OK) != 0)
        return false;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "'%s' -c 'import torch; print(torch.__version__)' 2>/dev/null", py);
    FILE *f = popen(cmd, "r");
    if (f == NULL)
        return false;
    bool ok = fgets(ver, (int)n, f) != NULL;
    ok = pclose(f) == 0 && ok;
    if (!ok)
        return false;
    ver[strcspn(ver, "\n")] = '\0';
    int major = atoi(ver), minor = atoi(strchr(ver, '.') ? strchr(ver, '.') + 1 : "0");
    int v = major * 100 + minor;
    return v >= major_min && v <= major_max;
}

/* ---- throughput ---------------------------------------------------------------------------- */

static size_t encode(ct_store_dialect_t d, const ct_store_req_t *r, uint8_t *out, size_t cap);

#define NBUCKETS           1800
#define BUCKETS_PER_OCTAVE 48.0

typedef struct client_stats {
    uint64_t ops, errors;
    uint32_t hist[NBUCKETS];
} client_stats_t;

typedef struct shared {
    volatile int64_t start_ms, end_ms;
    client_stats_t clients[];
} shared_t;

static int bucket_of(int64_t ns)
{
    if (ns < 1)
        ns = 1;
    int b = (int)(log2((double)ns) * BUCKETS_PER_OCTAVE);
    return b < 0 ? 0 : b >= NBUCKETS ? NBUCKETS - 1 : b;
}

static double bucket_us(int b)
{
    return exp2((b + 0.5) / BUCKETS_PER_OCTAVE) / 1000.0;
}

enum { OP_SET, OP_GET, OP_ADD, OP_WAIT, OP_CHECK, OP_MULTI_GET };

/* Pipelined mode: raw requests, `depth` in flight per connection (alternating GET of an
 * existing key and ADD), to measure what the server can do when clients are not the limit. */
static void pipelined_main(int id, const server_t *srv, shared_t *sh, int ready_w, int go_r,
                           int depth)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)srv->port),
                            .sin_addr = {htonl(INADDR_LOOPBACK)}};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int on = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
        _exit(1);
    char key[48], ctr[48], value[64];
    snprintf(key, sizeof key, "/bench/%d/0", id);
    snprintf(ctr, sizeof ctr, "/bench/ctr/%d", id);
    memset(value, 'v', sizeof value);
    uint8_t batch[8192], head[128];
    size_t nb = 0, nh = 0;
    if (srv->dialect == CT_STORE_V2) {
        ct_store_req_t v = {.op = CT_STORE_OP_VALIDATE, .num32 = CT_STORE_VALIDATE_MAGIC};
        nh = encode(CT_STORE_V2, &v, head, sizeof head);
    }
    ct_store_req_t set = {.op = CT_STORE_OP_SET,
                          .key = {(const uint8_t *)key, strlen(key)},
                          .value = {(const uint8_t *)value, sizeof value}};
    nh += encode(srv->dialect, &set, head + nh, sizeof head - nh);
    if (send(fd, head, nh, MSG_NOSIGNAL) != (ssize_t)nh)
        _exit(1);
    size_t reply_bytes = 0;
    for (int i = 0; i < depth && nb + 64 < sizeof batch; i++) {
        const char *k = i % 2 ? ctr : key;
        ct_store_req_t r = {.op = i % 2 ? CT_STORE_OP_ADD : CT_STORE_OP_GET,
                            .num = 1,
                            .key = {(const uint8_t *)k, strlen(k)}};
        nb += encode(srv->dialect, &r, batch + nb, sizeof batch - nb);
        reply_bytes += i % 2 ? 8 : 8 + sizeof value;
    }
    char one = 1;
    if (write(ready_w, &one, 1) != 1 || read(go_r, &one, 1) != 1)
        _exit(1);
    client_stats_t *st = &sh->clients[id];
    int64_t end = sh->end_ms;
    static uint8_t rbuf[1 << 16];
    while (ct_time_ms() < end) {
        int64_t t0 = ct_time_ns();
        if (send(fd, batch, nb, MSG_NOSIGNAL) != (ssize_t)nb)
            _exit(1);
        size_t got = 0;
        while (got < reply_bytes) {
            ssize_t r = recv(fd, rbuf, sizeof rbuf, 0);
            if (r <= 0)
                _exit(1);
            got += (size_t)r;
        }
        st->ops += (uint64_t)depth;
        st->hist[bucket_of(ct_time_ns() - t0)] += (uint32_t)depth;
    }
    close(fd);
    _exit(0);
}

static void client_main(int id, const server_t *srv, shared_t *sh, int ready_w, int go_r)
{
    ct_store_client_t c;
    ct_errbuf_t eb;
    ct_store_client_opts_t o = {.dialect = srv->dialect, .timeout_ms = 60000, .no_env_token = true};
    if (ct_store_client_connect(&c, "127.0.0.1", srv->port, &o, &eb) != 0) {
        fprintf(stderr, "store_bench: client %d: %s\n", id, eb.msg);
        _exit(1);
    }
    char keys[8][48];
    const char *kp[8];
    char value[64];
    memset(value, 'v', sizeof value);
    for (int i = 0; i < 8; i++) {
        snprintf(keys[i], sizeof keys[i], "/bench/%d/%d", id, i);
        kp[i] = keys[i];
        ct_store_set(&c, keys[i], value, sizeof value, &eb);
    }
    char ctr[48];
    snprintf(ctr, sizeof ctr, "/bench/ctr/%d", id);
    static const int mix_v1[] = {OP_SET, OP_GET, OP_ADD, OP_WAIT, OP_CHECK};
    static const int mix_v2[] = {OP_SET, OP_GET, OP_ADD, OP_WAIT, OP_CHECK, OP_MULTI_GET};
    const int *mix = srv->dialect == CT_STORE_V2 ? mix_v2 : mix_v1;
    int nmix = srv->dialect == CT_STORE_V2 ? 6 : 5;
    char one = 1;
    if (write(ready_w, &one, 1) != 1 || read(go_r, &one, 1) != 1)
        _exit(1);
    client_stats_t *st = &sh->clients[id];
    int64_t end = sh->end_ms;
    ct_store_bytes_t v, vals[4];
    int64_t n;
    bool flag;
    for (uint64_t i = 0;; i++) {
        if ((i & 15) == 0 && ct_time_ms() >= end)
            break;
        const char *key = kp[i % 8];
        int64_t t0 = ct_time_ns();
        int rc = 0;
        switch (mix[i % (uint64_t)nmix]) {
        case OP_SET:
            rc = ct_store_set(&c, key, value, sizeof value, &eb);
            break;
        case OP_GET:
            rc = ct_store_get(&c, key, &v, &eb);
            break;
        case OP_ADD:
            rc = ct_store_add(&c, ctr, 1, &n, &eb);
            break;
        case OP_WAIT:
            rc = ct_store_wait(&c, &key, 1, -1, &eb);
            break;
        case OP_CHECK:
            rc = ct_store_check(&c, &key, 1, &flag, &eb);
            break;
        case OP_MULTI_GET:
            rc = ct_store_multi_get(&c, kp + (i % 4), 4, vals, &eb);
            break;
        }
        int64_t dt = ct_time_ns() - t0;
        if (rc != 0) {
            st->errors++;
            if (st->errors == 1)
                fprintf(stderr, "store_bench: client %d: %s\n", id, eb.msg);
            continue;
        }
        st->ops++;
        st->hist[bucket_of(dt)]++;
    }
    ct_store_client_close(&c);
    _exit(0);
}

typedef struct result {
    double ops_per_s, p50_us, p99_us, server_cpu_us_per_op;
    uint64_t errors;
    bool ok;
} result_t;

/* utime + stime of a process (all its threads), in seconds. */
static double proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    unsigned long long ut = 0, stt = 0;
    if (p == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &stt) != 2)
        return 0;
    return (double)(ut + stt) / (double)sysconf(_SC_CLK_TCK);
}

static result_t run_throughput(const server_t *srv, int m, double seconds, int depth)
{
    result_t r = {0};
    size_t size = sizeof(shared_t) + (size_t)m * sizeof(client_stats_t);
    shared_t *sh = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return r;
    memset(sh, 0, size);
    int ready[2], go[2];
    if (pipe(ready) != 0 || pipe(go) != 0)
        return r;
    pid_t *pids = calloc((size_t)m, sizeof *pids);
    sh->end_ms = INT64_MAX;
    for (int i = 0; i < m; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            close(ready[0]);
            close(go[1]);
            if (depth > 1)
                pipelined_main(i, srv, sh, ready[1], go[0], depth);
            client_main(i, srv, sh, ready[1], go[0]);
        }
    }
    close(ready[1]);
    close(go[0]);
    char b;
    int nready = 0;
    while (nready < m && read(ready[0], &b, 1) == 1)
        nready++;
    sh->start_ms = ct_time_ms();
    sh->end_ms = sh->start_ms + (int64_t)(seconds * 1000);
    double cpu0 = proc_cpu_s(srv->pid);
    for (int i = 0; i < m; i++)
        if (write(go[1], &b, 1) != 1)
            break;
    bool all_ok = nready == m;
    for (int i = 0; i < m; i++) {
        int status = 0;
        waitpid(pids[i], &status, 0);
        all_ok = all_ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    double cpu = proc_cpu_s(srv->pid) - cpu0;
    uint64_t total = 0;
    static uint64_t hist[NBUCKETS];
    memset(hist, 0, sizeof hist);
    for (int i = 0; i < m; i++) {
        total += sh->clients[i].ops;
        r.errors += sh->clients[i].errors;
        for (int b2 = 0; b2 < NBUCKETS; b2++)
            hist[b2] += sh->clients[i].hist[b2];
    }
    uint64_t acc = 0;
    r.p50_us = r.p99_us = -1;
    for (int b2 = 0; b2 < NBUCKETS && total > 0; b2++) {
        acc += hist[b2];
        if (r.p50_us < 0 && acc * 2 >= total)
            r.p50_us = bucket_us(b2);
        if (r.p99_us < 0 && acc * 100 >= total * 99)
            r.p99_us = bucket_us(b2);
    }
    r.ops_per_s = (double)total / seconds;
    r.server_cpu_us_per_op = total > 0 ? cpu * 1e6 / (double)total : 0;
    r.ok = all_ok && total > 0;
    close(ready[0]);
    close(go[1]);
    free(pids);
    munmap(sh, size);
    return r;
}

/* ---- storm -------------------------------------------------------------------------------- */

typedef struct storm_shared {
    volatile int64_t start_ns;
    volatile int64_t done_ns[64];
    volatile int64_t released[64];
    volatile int64_t failed[64]; /* connections reset or closed by the server */
} storm_shared_t;

typedef struct sock {
    int fd;
    int state; /* 0 connecting, 1 ADD sent, 2 WAIT sent, 3 released */
    uint8_t buf[8];
    int have;
} sock_t;

static size_t encode(ct_store_dialect_t d, const ct_store_req_t *r, uint8_t *out, size_t cap)
{
    ssize_t n = ct_store_encode_request(d, r, out, cap, NULL);
    return n > 0 ? (size_t)n : 0;
}

static void storm_proc(int id, int n, int total, const server_t *srv, storm_shared_t *sh,
                       int ready_w, int go_r)
{
    sock_t *s = calloc((size_t)n, sizeof *s);
    int ep = epoll_create1(0);
    uint8_t first[128], set_release[64], wait_release[64];
    size_t nfirst = 0;
    ct_store_bytes_t rel = {(const uint8_t *)"release", 7};
    if (srv->dialect == CT_STORE_V2) {
        ct_store_req_t v = {.op = CT_STORE_OP_VALIDATE, .num32 = CT_STORE_VALIDATE_MAGIC};
        nfirst = encode(CT_STORE_V2, &v, first, sizeof first);
    }
    ct_store_req_t add = {.op = CT_STORE_OP_ADD, .key = {(const uint8_t *)"init/", 5}, .num = 1};
    nfirst += encode(srv->dialect, &add, first + nfirst, sizeof first - nfirst);
    ct_store_req_t set = {.op = CT_STORE_OP_SET, .key = rel, .value = {(const uint8_t *)"1", 1}};
    size_t nset = encode(srv->dialect, &set, set_release, sizeof set_release);
    ct_store_req_t wait = {.op = CT_STORE_OP_WAIT, .key_array = &rel, .nkeys = 1};
    size_t nwait = encode(srv->dialect, &wait, wait_release, sizeof wait_release);
    char one = 1;
    if (write(ready_w, &one, 1) != 1 || read(go_r, &one, 1) != 1)
        _exit(1);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)srv->port),
                            .sin_addr = {htonl(INADDR_LOOPBACK)}};
    for (int i = 0; i < n; i++) {
        s[i].fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (s[i].fd < 0) {
            fprintf(stderr, "store_bench: socket: %s\n", strerror(errno));
            _exit(1);
        }
        int on = 1;
        setsockopt(s[i].fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
        if (connect(s[i].fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS) {
            fprintf(stderr, "store_bench: connect: %s\n", strerror(errno));
            _exit(1);
        }
        struct epoll_event ev = {.events = EPOLLOUT, .data.u32 = (uint32_t)i};
        epoll_ctl(ep, EPOLL_CTL_ADD, s[i].fd, &ev);
    }
    int released = 0, failed = 0;
    struct epoll_event evs[256];
    int64_t deadline = ct_time_ms() + 60000;
    while (released + failed < n && ct_time_ms() < deadline) {
        int k = epoll_wait(ep, evs, 256, 1000);
        for (int j = 0; j < k; j++) {
            sock_t *x = &s[evs[j].data.u32];
            if (x->state >= 3)
                continue;
            if (evs[j].events & (EPOLLERR | EPOLLHUP)) {
                epoll_ctl(ep, EPOLL_CTL_DEL, x->fd, NULL);
                x->state = 4;
                failed++;
                continue;
            }
            if (x->state == 0) {
                if (send(x->fd, first, nfirst, MSG_NOSIGNAL) != (ssize_t)nfirst)
                    _exit(1);
                x->state = 1;
                struct epoll_event ev = {.events = EPOLLIN, .data.u32 = evs[j].data.u32};
                epoll_ctl(ep, EPOLL_CTL_MOD, x->fd, &ev);
                continue;
            }
            ssize_t r =
                recv(x->fd, x->buf + x->have, (size_t)(x->state == 1 ? 8 : 1) - (size_t)x->have, 0);
            if (r <= 0) {
                if (r < 0 && errno == EAGAIN)
                    continue;
                epoll_ctl(ep, EPOLL_CTL_DEL, x->fd, NULL);
                x->state = 4;
                failed++;
                continue;
            }
            x->have += (int)r;
            if (x->state == 1 && x->have == 8) {
                int64_t count = (int64_t)ct_store_get_u64(x->buf);
                if (count == total && send(x->fd, set_release, nset, MSG_NOSIGNAL) < 0)
                    _exit(1);
                if (send(x->fd, wait_release, nwait, MSG_NOSIGNAL) != (ssize_t)nwait)
                    _exit(1);
                x->state = 2;
                x->have = 0;
            } else if (x->state == 2 && x->have == 1) {
                x->state = 3;
                released++;
            }
        }
    }
    sh->done_ns[id] = ct_time_ns();
    sh->released[id] = released;
    sh->failed[id] = failed;
    _exit(released == n ? 0 : 1);
}

/* The kernel's count of connections dropped because an accept queue was full (TcpExt
 * ListenOverflows), or -1 when unreadable. A dropped handshake is retried by the client after
 * TCP's initial retransmission timeout (1 s), which is what an occasional slow storm shows. */
static long long listen_overflows(void)
{
    FILE *f = fopen("/proc/net/netstat", "r");
    if (f == NULL)
        return -1;
    char head[8192], vals[8192];
    long long result = -1;
    while (fgets(head, sizeof head, f) != NULL && fgets(vals, sizeof vals, f) != NULL) {
        if (strncmp(head, "TcpExt:", 7) != 0)
            continue;
        char *hs = NULL, *vs = NULL;
        char *h = strtok_r(head, " \n", &hs), *v = strtok_r(vals, " \n", &vs);
        while (h != NULL && v != NULL) {
            if (strcmp(h, "ListenOverflows") == 0)
                result = atoll(v);
            h = strtok_r(NULL, " \n", &hs);
            v = strtok_r(NULL, " \n", &vs);
        }
    }
    fclose(f);
    return result;
}

/* Seconds until all n clients were released, or a negative value when some were not;
 * *failed receives how many connections the server reset or closed. */
static double run_storm(const server_t *srv, int n, long long *failed)
{
    int procs = n >= 4000 ? 8 : 4;
    storm_shared_t *sh =
        mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(sh, 0, sizeof *sh);
    int ready[2], go[2];
    if (pipe(ready) != 0 || pipe(go) != 0)
        return -1;
    pid_t pids[64];
    for (int i = 0; i < procs; i++) {
        int share = n / procs + (i < n % procs ? 1 : 0);
        pids[i] = fork();
        if (pids[i] == 0) {
            close(ready[0]);
            close(go[1]);
            storm_proc(i, share, n, srv, sh, ready[1], go[0]);
        }
    }
    close(ready[1]);
    close(go[0]);
    char b;
    for (int i = 0; i < procs; i++)
        if (read(ready[0], &b, 1) != 1)
            break;
    sh->start_ns = ct_time_ns();
    for (int i = 0; i < procs; i++)
        if (write(go[1], &b, 1) != 1)
            break;
    bool ok = true;
    for (int i = 0; i < procs; i++) {
        int status = 0;
        waitpid(pids[i], &status, 0);
        ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    int64_t last = 0;
    *failed = 0;
    for (int i = 0; i < procs; i++) {
        if (sh->done_ns[i] > last)
            last = sh->done_ns[i];
        *failed += sh->failed[i];
    }
    double t = (double)(last - sh->start_ns) / 1e9;
    close(ready[0]);
    close(go[1]);
    munmap(sh, sizeof *sh);
    return ok ? t : -1;
}

/* ---- main --------------------------------------------------------------------------------- */

typedef struct kind {
    const char *label;
    const char *python; /* NULL: ctrun-store */
    const char *backend;
    ct_store_dialect_t dialect;
} kind_t;

/* A server that printed its port may not answer promptly yet (a Python process still
 * settling after importing torch answers its first connections seconds late): measure only
 * once 200 round trips in a row each took under 2 ms, or after 30 s. */
static int warm_up(const server_t *s)
{
    ct_store_client_t c;
    ct_errbuf_t eb;
    ct_store_client_opts_t o = {.dialect = s->dialect, .timeout_ms = 30000, .no_env_token = true};
    if (ct_store_client_connect(&c, "127.0.0.1", s->port, &o, &eb) != 0) {
        fprintf(stderr, "store_bench: %s: %s\n", s->name, eb.msg);
        return -1;
    }
    int64_t deadline = ct_time_ms() + 30000;
    int streak = 0;
    while (streak < 200 && ct_time_ms() < deadline) {
        int64_t t0 = ct_time_ns(), n;
        if (ct_store_add(&c, "/bench/warmup", 1, &n, &eb) != 0)
            break;
        streak = ct_time_ns() - t0 < 2000000 ? streak + 1 : 0;
    }
    /* The warm-up key goes, so that storms start from an empty store. */
    bool deleted;
    ct_store_delete(&c, "/bench/warmup", &deleted, &eb);
    ct_store_client_close(&c);
    return streak >= 200 ? 0 : -1;
}

static int start_kind(const kind_t *k, const char *ctrun_store, server_t *s)
{
    memset(s, 0, sizeof *s);
    s->name = k->label;
    s->dialect = k->dialect;
    int rc;
    if (k->python == NULL) {
        char *argv[] = {(char *)ctrun_store, "--port", "0", "--host", "127.0.0.1", NULL};
        rc = server_start(s, argv, false);
    } else {
        char *argv[] = {(char *)k->python, "-c", (char *)pt_server_py, (char *)k->backend, NULL};
        rc = server_start(s, argv, true);
    }
    return rc != 0 ? rc : warm_up(s);
}

int main(int argc, char **argv)
{
    const char *ctrun_store = NULL;
    int clients = 64;
    double seconds = 3;
    int storms[8] = {1000, 10000};
    int pipeline = 16;
    int nstorms = 2;
    bool pytorch = true;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ctrun-store") == 0 && i + 1 < argc) {
            ctrun_store = argv[++i];
        } else if (strcmp(argv[i], "--clients") == 0 && i + 1 < argc) {
            clients = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            seconds = atof(argv[++i]);
        } else if (strcmp(argv[i], "--storm") == 0 && i + 1 < argc) {
            nstorms = 0;
            for (char *tok = strtok(argv[++i], ","); tok && nstorms < 8; tok = strtok(NULL, ","))
                if (atoi(tok) > 0)
                    storms[nstorms++] = atoi(tok);
        } else if (strcmp(argv[i], "--pipeline") == 0 && i + 1 < argc) {
            pipeline = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--preload") == 0 && i + 1 < argc) {
            preload = argv[++i];
        } else if (strcmp(argv[i], "--no-pytorch") == 0) {
            pytorch = false;
        } else {
            fprintf(stderr, "usage: store_bench --ctrun-store PATH [--preload SHIM.so] "
                            "[--clients M] [--seconds S] [--pipeline K] [--storm N,N...] "
                            "[--no-pytorch]\n");
            return 2;
        }
    }
    if (ctrun_store == NULL || clients < 1 || clients > 4096 || seconds <= 0) {
        fprintf(stderr, "store_bench: --ctrun-store PATH is required (see --help)\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);

    const char *py13 =
        getenv("CTRUN_TORCH13_PYTHON") ? getenv("CTRUN_TORCH13_PYTHON") : "/usr/bin/python3";
    char py2buf[4096];
    const char *py2 = getenv("CTRUN_TORCH2_PYTHON");
    if (py2 == NULL) {
        snprintf(py2buf, sizeof py2buf, "%s/.venvs/torch2/bin/python",
                 getenv("HOME") ? getenv("HOME") : "");
        py2 = py2buf;
    }
    char v13[64] = "", v2[64] = "";
    bool have13 = pytorch && python_has_torch(py13, 100, 200, v13, sizeof v13);
    bool have2 = pytorch && python_has_torch(py2, 202, 9999, v2, sizeof v2);
    bool have2uv = have2 && (atoi(v2) > 2 || atoi(strchr(v2, '.') + 1) >= 4);

    char label13[96], label2uv[96], label2legacy[96];
    snprintf(label13, sizeof label13, "pytorch-%s", v13);
    snprintf(label2uv, sizeof label2uv, "pytorch-%.20s-libuv", v2);
    snprintf(label2legacy, sizeof label2legacy, "pytorch-%.20s-legacy", v2);
    kind_t kinds[5];
    int nk = 0;
    kinds[nk++] = (kind_t){"ctrun-store", NULL, NULL, CT_STORE_V1};
    if (have13)
        kinds[nk++] = (kind_t){label13, py13, NULL, CT_STORE_V1};
    kinds[nk++] = (kind_t){"ctrun-store", NULL, NULL, CT_STORE_V2};
    if (have2uv)
        kinds[nk++] = (kind_t){label2uv, py2, "libuv", CT_STORE_V2};
    if (have2)
        kinds[nk++] = (kind_t){label2legacy, py2, "legacy", CT_STORE_V2};

    struct utsname u;
    uname(&u);
    printf("# store_bench (ctrun %s) on %s %s, %ld CPUs\n", CT_VERSION, u.sysname, u.release,
           sysconf(_SC_NPROCESSORS_ONLN));
    printf("# clients: our C client, one connection per process, same dialect as the server\n");
    printf("# PyTorch 1.13: %s; PyTorch >= 2.2: %s; PyTorch servers preloaded with: %s\n",
           have13 ? py13 : "not found", have2 ? py2 : "not found", preload ? preload : "-");
    for (int pass = 0; pass < 2; pass++) {
        int depth = pass == 0 ? 1 : pipeline;
        if (pass == 1 && pipeline <= 1)
            break;
        if (pass == 0)
            printf("# throughput: %d client processes x %.1f s, blocking calls; mix v1 = set,get,"
                   "add,wait,check; v2 adds multi_get(4); 64-byte values\n",
                   clients, seconds);
        else
            printf("# capacity: %d client processes x %.1f s, %d requests in flight each "
                   "(GET and ADD alternating), raw sockets; latency per batch\n",
                   clients, seconds, depth);
        printf("%-28s %-7s %12s %10s %10s %13s %7s\n", "server", "dialect", "ops/s", "p50_us",
               "p99_us", "srv_cpu_us/op", "errors");
        result_t res[5];
        for (int k = 0; k < nk; k++) {
            server_t s;
            const char *d = kinds[k].dialect == CT_STORE_V1 ? "v1" : "v2";
            memset(&res[k], 0, sizeof res[k]);
            if (start_kind(&kinds[k], ctrun_store, &s) != 0) {
                printf("%-28s %-7s %12s\n", kinds[k].label, d, "failed to start");
                server_stop(&s);
                continue;
            }
            res[k] = run_throughput(&s, clients, seconds, depth);
            server_stop(&s);
            printf("%-28s %-7s %12.0f %10.1f %10.1f %13.2f %7llu%s\n", kinds[k].label, d,
                   res[k].ops_per_s, res[k].p50_us, res[k].p99_us, res[k].server_cpu_us_per_op,
                   (unsigned long long)res[k].errors, res[k].ok ? "" : "  (failed)");
            fflush(stdout);
        }
        for (int k = 0; k < nk; k++) {
            if (kinds[k].python == NULL || !res[k].ok)
                continue;
            int ours = kinds[k].dialect == CT_STORE_V1 ? 0 : (have13 ? 2 : 1);
            if (res[ours].ok && res[k].ops_per_s > 0 && res[ours].server_cpu_us_per_op > 0)
                printf("# ratio ctrun-store / %s (%s): %.2fx ops/s, %.2fx less server CPU per "
                       "op, p99 %.2fx lower\n",
                       kinds[k].label, kinds[k].dialect == CT_STORE_V1 ? "v1" : "v2",
                       res[ours].ops_per_s / res[k].ops_per_s,
                       res[k].server_cpu_us_per_op / res[ours].server_cpu_us_per_op,
                       res[k].p99_us / res[ours].p99_us);
        }
    }

    printf("# storm: N clients connect at once, ADD init/ 1, the N-th sets a release key, all "
           "WAIT on it\n");
    printf("%-28s %-7s %8s %12s %17s\n", "server", "dialect", "clients", "release_ms",
           "listen_overflows");
    for (int i = 0; i < nstorms; i++) {
        for (int k = 0; k < nk; k++) {
            if (kinds[k].python != NULL && kinds[k].dialect == CT_STORE_V2 &&
                strcmp(kinds[k].backend, "legacy") == 0)
                continue; /* one PyTorch v2 server per storm keeps the run short */
            server_t s;
            if (start_kind(&kinds[k], ctrun_store, &s) != 0) {
                server_stop(&s);
                continue;
            }
            long long ov0 = listen_overflows(), failed = 0;
            double t = run_storm(&s, storms[i], &failed);
            long long ov = ov0 >= 0 ? listen_overflows() - ov0 : -1;
            server_stop(&s);
            char what[64];
            if (failed > 0)
                snprintf(what, sizeof what, "%lld reset", failed);
            else
                snprintf(what, sizeof what, ">60000");
            if (t < 0)
                printf("%-28s %-7s %8d %12s %17lld\n", kinds[k].label,
                       kinds[k].dialect == CT_STORE_V1 ? "v1" : "v2", storms[i], what, ov);
            else
                printf("%-28s %-7s %8d %12.1f %17lld\n", kinds[k].label,
                       kinds[k].dialect == CT_STORE_V1 ? "v1" : "v2", storms[i], t * 1000, ov);
            fflush(stdout);
        }
    }
    return 0;
}
