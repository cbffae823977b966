/*
 * test_ctrun_store_net.c - the store server and the C client over real sockets.
 *
 * Proves: every client request against the server in both dialects; a v2 WAIT timeout sends
 * CANCEL_WAIT and leaves the connection in step (the server holds no waiter afterwards), a v1
 * one reconnects; hundreds of wait/set races never desynchronise a connection; get() blocks
 * until a late set (case 14); a waiter that disconnects is freed (case 30); hostile sockets
 * (cases 20-22) are closed or ignored while a well-behaved client keeps being answered; 2,000
 * clients connected at once each ADD init/ 1 and get distinct counts (case 29); large values;
 * authentication accept/reject in every combination; connect retries with backoff and gives up
 * at its deadline; IPv4, IPv6 and name connects (case 28); deadlines hold against a server
 * that never answers; a connect to an HTTP or SSH server, binary junk or a silent peer says
 * what is there, at once or at the handshake deadline, without retrying.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ct_store_client.h"
#include "ct_store_codec.h"
#include "ct_test.h"
#include "ct_time.h"
#include "foreign_peer.h"
#include "store_thread.h"

static store_thread_t st;

static void start(const ctrun_store_opts_t *opts)
{
    ct_errbuf_t eb = {{0}};
    ctrun_store_opts_t o = {0};
    if (opts != NULL)
        o = *opts;
    int rc = store_thread_start(&st, &o, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
}

static void client(ct_store_client_t *c, ct_store_dialect_t d, int64_t timeout_ms)
{
    ct_errbuf_t eb = {{0}};
    ct_store_client_opts_t o = {.dialect = d, .timeout_ms = timeout_ms, .no_env_token = true};
    int rc = ct_store_client_connect(c, "127.0.0.1", st.port, &o, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
}

static int net_raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CT_ASSERT(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr = {htonl(INADDR_LOOPBACK)}};
    CT_ASSERT_OK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0 ? 0 : -errno);
    return fd;
}

static void raw_send(int fd, const void *p, size_t n)
{
    CT_ASSERT_EQ(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* True when the server closes fd within ms. */
static bool raw_closed_within(int fd, int ms)
{
    int64_t deadline = ct_deadline_after_ms(ms);
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, ct_deadline_poll_ms(deadline)) <= 0)
            return false;
        char b[256];
        ssize_t r = recv(fd, b, sizeof b, 0);
        if (r == 0 || (r < 0 && errno == ECONNRESET))
            return true;
    }
}

static void get_eq(ct_store_client_t *c, const char *key, const char *want)
{
    ct_errbuf_t eb = {{0}};
    ct_store_bytes_t v;
    int rc = ct_store_get(c, key, &v, &eb);
    CT_ASSERT_MSG(rc == 0, "get %s: %s", key, eb.msg);
    CT_ASSERT_MSG(v.len == strlen(want) && memcmp(v.data, want, v.len) == 0,
                  "get %s: got %.*s, want %s", key, (int)v.len, (const char *)v.data, want);
}

/* ---- cases ------------------------------------------------------------------------------ */

static void test_client_ops_v2(void)
{
    start(NULL);
    ct_store_client_t c;
    ct_errbuf_t eb = {{0}};
    client(&c, CT_STORE_V2, 10000);
    CT_ASSERT_OK(ct_store_ping(&c, &eb));
    CT_ASSERT_OK(ct_store_set(&c, "/k", "v", 1, &eb));
    get_eq(&c, "/k", "v");
    int64_t n = 0;
    CT_ASSERT_OK(ct_store_add(&c, "/c", 5, &n, &eb));
    CT_ASSERT_OK(ct_store_add(&c, "/c", 5, &n, &eb));
    CT_ASSERT_EQ(n, 10);
    get_eq(&c, "/c", "10");
    ct_store_bytes_t cur;
    CT_ASSERT_OK(ct_store_compare_set(&c, "/cs", "", 0, "x", 1, &cur, &eb));
    CT_ASSERT(cur.len == 1 && cur.data[0] == 'x');
    CT_ASSERT_OK(ct_store_compare_set(&c, "/nokey", "a", 1, "b", 1, &cur, &eb));
    CT_ASSERT(cur.len == 1 && cur.data[0] == 'a');
    bool ready = false;
    const char *k2[2] = {"/k", "/c"};
    CT_ASSERT_OK(ct_store_check(&c, k2, 2, &ready, &eb));
    CT_ASSERT(ready);
    const char *kn = "/nokey";
    CT_ASSERT_OK(ct_store_check(&c, &kn, 1, &ready, &eb));
    CT_ASSERT(!ready);
    CT_ASSERT_OK(ct_store_wait(&c, k2, 2, -1, &eb));
    CT_ASSERT_OK(ct_store_wait(&c, NULL, 0, -1, &eb));
    CT_ASSERT_OK(ct_store_num_keys(&c, &n, &eb));
    CT_ASSERT_EQ(n, 3);
    bool del = false;
    CT_ASSERT_OK(ct_store_delete(&c, "/k", &del, &eb));
    CT_ASSERT(del);
    CT_ASSERT_OK(ct_store_delete(&c, "/k", &del, &eb));
    CT_ASSERT(!del);
    CT_ASSERT_OK(ct_store_append(&c, "/a", "x", 1, &eb));
    CT_ASSERT_OK(ct_store_append(&c, "/a", "y", 1, &eb));
    get_eq(&c, "/a", "xy");
    const char *mk[2] = {"/m1", "/m2"};
    ct_store_bytes_t mv[2] = {{(const uint8_t *)"1", 1}, {(const uint8_t *)"22", 2}}, out[2];
    CT_ASSERT_OK(ct_store_multi_set(&c, mk, mv, 2, &eb));
    CT_ASSERT_OK(ct_store_multi_get(&c, mk, 2, out, &eb));
    CT_ASSERT(out[0].len == 1 && out[0].data[0] == '1');
    CT_ASSERT(out[1].len == 2 && memcmp(out[1].data, "22", 2) == 0);
    CT_ASSERT_OK(ct_store_queue_push(&c, "/q", "j1", 2, &eb));
    CT_ASSERT_OK(ct_store_queue_len(&c, "/q", &n, &eb));
    CT_ASSERT_EQ(n, 1);
    CT_ASSERT_OK(ct_store_queue_pop(&c, "/q", true, &cur, &eb));
    CT_ASSERT(cur.len == 2 && memcmp(cur.data, "j1", 2) == 0);
    CT_ASSERT_ERR(ct_store_queue_pop(&c, "/q", false, &cur, &eb), -ENODATA);
    ct_store_list_t keys;
    CT_ASSERT_OK(ct_store_list_keys(&c, &keys, &eb));
    CT_ASSERT_EQ(keys.n, 5); /* /c /cs /a /m1 /m2 */
    CT_ASSERT_OK(ct_store_barrier(&c, "/bar", 1, 1000, &eb));
    /* A large value both ways. */
    size_t big = 8u << 20;
    char *v = malloc(big);
    for (size_t i = 0; i < big; i++)
        v[i] = (char)(i * 7);
    CT_ASSERT_OK(ct_store_set(&c, "/big", v, big, &eb));
    ct_store_bytes_t got;
    CT_ASSERT_OK(ct_store_get(&c, "/big", &got, &eb));
    CT_ASSERT(got.len == big && memcmp(got.data, v, big) == 0);
    /* Over the limit: the client refuses to send it and stays usable. */
    CT_ASSERT_ERR(ct_store_set(&c, "/toobig", v, (size_t)CT_STORE_MAX_MESSAGE_LEN, &eb), CT_ELIMIT);
    free(v);
    CT_ASSERT_OK(ct_store_ping(&c, &eb));
    ct_store_client_close(&c);
    ct_store_client_close(&c);
    store_thread_stop(&st);
}

static void test_client_ops_v1(void)
{
    start(NULL);
    ct_store_client_t c;
    ct_errbuf_t eb = {{0}};
    client(&c, CT_STORE_V1, 10000);
    CT_ASSERT_OK(ct_store_set(&c, "/k", "v", 1, &eb));
    get_eq(&c, "/k", "v");
    int64_t n = 0;
    CT_ASSERT_OK(ct_store_add(&c, "init/", 1, &n, &eb));
    CT_ASSERT_EQ(n, 1);
    CT_ASSERT_OK(ct_store_num_keys(&c, &n, &eb));
    CT_ASSERT_EQ(n, 2);
    CT_ASSERT_ERR(ct_store_append(&c, "/a", "x", 1, &eb), -ENOTSUP);
    CT_ASSERT_STR_CONTAINS(eb.msg, "v2");
    CT_ASSERT_ERR(ct_store_ping(&c, &eb), -ENOTSUP);
    /* ADD on a non-number: the server closes, the client reports it and reconnects next. */
    CT_ASSERT_ERR(ct_store_add(&c, "/k", 1, &n, &eb), CT_EPEER);
    CT_ASSERT_STR_CONTAINS(eb.msg, "closed the connection");
    CT_ASSERT_OK(ct_store_add(&c, "/n", 2, &n, &eb));
    CT_ASSERT_EQ(n, 2);
    ct_store_client_close(&c);
    store_thread_stop(&st);
}

static void test_wait_timeout_and_cancel(void)
{
    start(NULL);
    ct_store_client_t c, other;
    ct_errbuf_t eb = {{0}};
    client(&c, CT_STORE_V2, 10000);
    client(&other, CT_STORE_V2, 10000);
    const char *k = "/never";
    int64_t t0 = ct_time_ms();
    CT_ASSERT_ERR(ct_store_wait(&c, &k, 1, 200, &eb), -ETIMEDOUT);
    int64_t dt = ct_time_ms() - t0;
    CT_ASSERT_GE(dt, 190);
    CT_ASSERT_LT(dt, 5000);
    CT_ASSERT_STR_CONTAINS(eb.msg, "timed out after 200 ms (keys: /never)");
    CT_ASSERT(ct_store_client_connected(&c)); /* v2: still in step */
    ctrun_store_stats_t s;
    store_thread_stats(&st, &s);
    CT_ASSERT_EQ(s.pending_waits, 0); /* CANCEL_WAIT reached the server */
    /* Case 11: the key arrives later, and the next request reads its own reply. */
    CT_ASSERT_OK(ct_store_set(&other, "/never", "1", 1, &eb));
    CT_ASSERT_OK(ct_store_set(&other, "/y", "why", 3, &eb));
    get_eq(&c, "/y", "why");
    /* get() of a missing key times out client-side (the store timeout). */
    ct_store_client_set_timeout(&c, 150);
    ct_store_bytes_t v;
    CT_ASSERT_ERR(ct_store_get(&c, "/absent", &v, &eb), -ETIMEDOUT);
    ct_store_client_set_timeout(&c, 10000);
    get_eq(&c, "/y", "why");
    /* v1: no cancel; the client drops the connection and reconnects on the next request. */
    ct_store_client_t c1;
    client(&c1, CT_STORE_V1, 10000);
    CT_ASSERT_OK(ct_store_wait(&c1, &k, 1, -1, &eb)); /* /never exists now */
    const char *k2 = "/never2";
    CT_ASSERT_ERR(ct_store_wait(&c1, &k2, 1, 150, &eb), -ETIMEDOUT);
    CT_ASSERT(!ct_store_client_connected(&c1));
    CT_ASSERT_OK(ct_store_set(&other, "/never2", "1", 1, &eb));
    get_eq(&c1, "/y", "why");
    ct_store_client_close(&c1);
    ct_store_client_close(&c);
    ct_store_client_close(&other);
    store_thread_stop(&st);
}

typedef struct racer {
    int iterations;
    ct_store_dialect_t d;
    unsigned seed;
} racer_t;

static void *race_setter(void *arg)
{
    racer_t *r = arg;
    ct_store_client_t c;
    ct_errbuf_t eb = {{0}};
    client(&c, r->d, 10000);
    for (int i = 0; i < r->iterations; i++) {
        char k[32];
        snprintf(k, sizeof k, "/race/%d/%d", (int)r->d, i);
        ct_sleep_ms(rand_r(&r->seed) % 12);
        CT_ASSERT_OK(ct_store_set(&c, k, "1", 1, &eb));
        /* Wait until the waiter has moved on, so each round is one race. */
        char done[32];
        snprintf(done, sizeof done, "/race/%d/%d/done", (int)r->d, i);
        const char *dk = done;
        CT_ASSERT_OK(ct_store_wait(&c, &dk, 1, -1, &eb));
    }
    ct_store_client_close(&c);
    return NULL;
}

/* A WAIT timing out while its key is being set, over and over: the outcome may be either,
 * but the connection must stay in step (each following ADD returns its own count). */
static void test_wait_set_races(void)
{
    start(NULL);
    for (int d = CT_STORE_V1; d <= CT_STORE_V2; d++) {
        racer_t r = {.iterations = 150, .d = (ct_store_dialect_t)d, .seed = 7u + (unsigned)d};
        pthread_t th;
        CT_ASSERT_OK(pthread_create(&th, NULL, race_setter, &r));
        ct_store_client_t c;
        ct_errbuf_t eb = {{0}};
        client(&c, r.d, 10000);
        int timeouts = 0;
        for (int i = 0; i < r.iterations; i++) {
            char k[32], done[40], ctr[32];
            snprintf(k, sizeof k, "/race/%d/%d", d, i);
            const char *kk = k;
            int rc = ct_store_wait(&c, &kk, 1, 1 + i % 10, &eb);
            CT_ASSERT_MSG(rc == 0 || rc == -ETIMEDOUT, "wait: %s", eb.msg);
            timeouts += rc != 0;
            snprintf(ctr, sizeof ctr, "/race/%d/count", d);
            int64_t n = 0;
            CT_ASSERT_OK(ct_store_add(&c, ctr, 1, &n, &eb));
            CT_ASSERT_EQ(n, i + 1);
            snprintf(done, sizeof done, "/race/%d/%d/done", d, i);
            CT_ASSERT_OK(ct_store_set(&c, done, "1", 1, &eb));
        }
        pthread_join(th, NULL);
        printf("# dialect v%d: %d of %d waits timed out\n", d, timeouts, r.iterations);
        ct_store_client_close(&c);
    }
    ctrun_store_stats_t s;
    store_thread_stats(&st, &s);
    CT_ASSERT_EQ(s.pending_waits, 0);
    store_thread_stop(&st);
}

static void *late_setter(void *arg)
{
    ct_store_client_t c;
    ct_errbuf_t eb = {{0}};
    client(&c, CT_STORE_V1, 10000);
    ct_sleep_ms(300);
    CT_ASSERT_OK(ct_store_set(&c, "/late", arg, strlen(arg), &eb));
    ct_store_client_close(&c);
    return NULL;
}

/* Case 14. */
static void test_get_blocks_until_set(void)
{
    start(NULL);
    ct_store_client_t c;
    client(&c, CT_STORE_V2, 10000);
    pthread_t th;
    int64_t t0 = ct_time_ms();
    CT_ASSERT_OK(pthread_create(&th, NULL, late_setter, "arrived"));
    get_eq(&c, "/late", "arrived");
    CT_ASSERT_GE(ct_time_ms() - t0, 250);
    pthread_join(th, NULL);
    ct_store_client_close(&c);
    store_thread_stop(&st);
}

/* Case 30 over a socket, and cases 20-22: offenders closed (or ignored), the good client
 * always answered. */
static void test_hostile_clients(void)
{
    start(NULL);
    ct_store_client_t good;
    ct_errbuf_t eb = {{0}};
    client(&good, CT_STORE_V1, 10000);
    int64_t n = 0;

    /* 30: a waiter vanishes; its state is freed; a set afterwards is harmless. */
    int w = net_raw_connect(st.port);
    uint8_t req[256];
    ct_store_bytes_t wk = {(const uint8_t *)"/gone", 5};
    ct_store_req_t wr = {.op = CT_STORE_OP_WAIT, .key_array = &wk, .nkeys = 1};
    ssize_t len = ct_store_encode_request(CT_STORE_V1, &wr, req, sizeof req, NULL);
    raw_send(w, req, (size_t)len);
    ctrun_store_stats_t s;
    for (int i = 0; i < 500; i++) {
        store_thread_stats(&st, &s);
        if (s.pending_waits == 1)
            break;
        ct_sleep_ms(10);
    }
    CT_ASSERT_EQ(s.pending_waits, 1);
    close(w);
    for (int i = 0; i < 500; i++) {
        store_thread_stats(&st, &s);
        if (s.pending_waits == 0)
            break;
        ct_sleep_ms(10);
    }
    CT_ASSERT_EQ(s.pending_waits, 0);
    CT_ASSERT_EQ(s.wait_registrations, 0);
    CT_ASSERT_OK(ct_store_set(&good, "/gone", "1", 1, &eb));

    /* 20, 21: closed at once. */
    static const struct {
        const char *what;
        const uint8_t *bytes;
        size_t len;
    } bad[] = {
        {"HTTP probe", (const uint8_t *)"GET / HTTP/1.0\r\n\r\n", 18},
        {"VALIDATE with a wrong magic, then PING",
         (const uint8_t *)"\x00\xce\xf7\x85\x3d\x0d\x01\x02\x03\x04", 10},
        {"2^40 key length", (const uint8_t *)"\x00\x00\x00\x00\x00\x00\x01\x00\x00", 9},
        {"64 MiB value",
         (const uint8_t *)"\x00\x01\x00\x00\x00\x00\x00\x00\x00k\x00\x00\x00\x04\x00\x00\x00\x00",
         18},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int fd = net_raw_connect(st.port);
        raw_send(fd, bad[i].bytes, bad[i].len);
        CT_ASSERT_MSG(raw_closed_within(fd, 5000), "%s was not closed", bad[i].what);
        close(fd);
        CT_ASSERT_OK(ct_store_add(&good, "/alive", 1, &n, &eb));
    }
    /* 22: half requests that idle (a SET with a 10-byte key length and 3 of its bytes), and a
     * connection that never sends anything: the good client does not notice them. */
    int idle[8];
    for (int i = 0; i < 8; i++) {
        idle[i] = net_raw_connect(st.port);
        if (i % 2 == 0)
            raw_send(idle[i], "\x00\x0a\x00\x00\x00\x00\x00\x00\x00key", 12);
    }
    int64_t t0 = ct_time_ms();
    for (int i = 0; i < 500; i++)
        CT_ASSERT_OK(ct_store_add(&good, "/alive", 1, &n, &eb));
    CT_ASSERT_EQ(n, 504);
    int64_t dt = ct_time_ms() - t0;
    printf("# 500 ADDs next to 8 stalled connections: %lld ms\n", (long long)dt);
    for (int i = 0; i < 8; i++)
        close(idle[i]);
    store_thread_stats(&st, &s);
    CT_ASSERT_EQ(s.dropped, 4);
    ct_store_client_close(&good);
    store_thread_stop(&st);
}

/* Case 29: N raw clients connect at once (none refused), each sends ADD init/ 1; every count
 * from 1 to N comes back exactly once and the final value is N. */
static void test_many_clients(void)
{
    enum { N = 2000 };
    struct rlimit rl;
    CT_ASSERT_OK(getrlimit(RLIMIT_NOFILE, &rl));
    if (rl.rlim_cur < 2 * N + 200) {
        rl.rlim_cur = rl.rlim_max < 2 * N + 200 ? rl.rlim_max : 2 * N + 200;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur < 2 * N + 200)
        CT_SKIP("needs %d open files (client and server ends in one process), limit is %llu",
                2 * N + 200, (unsigned long long)rl.rlim_cur);
    start(NULL);
    static int fds[N];
    static uint8_t seen[N + 1];
    memset(seen, 0, sizeof seen);
    uint8_t req[64];
    ct_store_req_t add = {.op = CT_STORE_OP_ADD, .key = {(const uint8_t *)"init/", 5}, .num = 1};
    ssize_t len = ct_store_encode_request(CT_STORE_V1, &add, req, sizeof req, NULL);
    for (int i = 0; i < N; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        CT_ASSERT(fds[i] >= 0);
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)st.port),
                                .sin_addr = {htonl(INADDR_LOOPBACK)}};
        int rc = connect(fds[i], (struct sockaddr *)&a, sizeof a);
        CT_ASSERT_MSG(rc == 0 || errno == EINPROGRESS, "connect %d: %s", i, strerror(errno));
    }
    /* Send as each connection completes; collect the 8-byte replies. */
    static struct pollfd p[N];
    static bool sent[N], got[N];
    int done = 0;
    int64_t deadline = ct_deadline_after_ms(60000);
    while (done < N && !ct_deadline_passed(deadline)) {
        int np = 0;
        static int idx[N];
        for (int i = 0; i < N; i++) {
            if (got[i])
                continue;
            p[np] = (struct pollfd){.fd = fds[i], .events = sent[i] ? POLLIN : POLLOUT};
            idx[np++] = i;
        }
        CT_ASSERT(poll(p, (nfds_t)np, 1000) >= 0);
        for (int j = 0; j < np; j++) {
            int i = idx[j];
            if (p[j].revents & (POLLERR | POLLHUP)) {
                int err = 0;
                socklen_t el = sizeof err;
                getsockopt(fds[i], SOL_SOCKET, SO_ERROR, &err, &el);
                CT_ASSERT_MSG(0, "client %d failed: %s", i, strerror(err));
            }
            if (!sent[i] && (p[j].revents & POLLOUT)) {
                CT_ASSERT_EQ(send(fds[i], req, (size_t)len, MSG_NOSIGNAL), len);
                sent[i] = true;
            } else if (sent[i] && (p[j].revents & POLLIN)) {
                uint8_t r[8];
                CT_ASSERT_EQ(recv(fds[i], r, 8, MSG_WAITALL), 8);
                int64_t v = (int64_t)ct_store_get_u64(r);
                CT_ASSERT(v >= 1 && v <= N);
                CT_ASSERT_MSG(!seen[v], "count %lld returned twice", (long long)v);
                seen[v] = 1;
                got[i] = true;
                done++;
            }
        }
    }
    CT_ASSERT_EQ(done, N);
    ctrun_store_stats_t s;
    store_thread_stats(&st, &s);
    CT_ASSERT_EQ(s.connections, N);
    CT_ASSERT_EQ(s.refused, 0);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    ct_store_client_t c;
    client(&c, CT_STORE_V2, 10000);
    get_eq(&c, "init/", "2000");
    ct_store_client_close(&c);
    store_thread_stop(&st);
}

static void test_authentication(void)
{
    ctrun_store_opts_t o = {.token = "correct horse"};
    start(&o);
    ct_errbuf_t eb = {{0}};
    ct_store_client_t c;
    ct_store_client_opts_t co = {.timeout_ms = 5000, .token = "correct horse"};
    CT_ASSERT_OK(ct_store_client_connect(&c, "127.0.0.1", st.port, &co, &eb));
    CT_ASSERT_OK(ct_store_set(&c, "/a", "1", 1, &eb));
    get_eq(&c, "/a", "1");
    ct_store_client_close(&c);
    co.dialect = CT_STORE_V1;
    CT_ASSERT_OK(ct_store_client_connect(&c, "127.0.0.1", st.port, &co, &eb));
    get_eq(&c, "/a", "1");
    ct_store_client_close(&c);
    /* From the environment. */
    setenv("CTRUN_STORE_TOKEN", "correct horse", 1);
    ct_store_client_opts_t env = {.timeout_ms = 5000};
    CT_ASSERT_OK(ct_store_client_connect(&c, "127.0.0.1", st.port, &env, &eb));
    ct_store_client_close(&c);
    unsetenv("CTRUN_STORE_TOKEN");
    /* A wrong token is rejected at once, not retried until the deadline. */
    co.token = "wrong";
    co.dialect = CT_STORE_V2;
    int64_t t0 = ct_time_ms();
    CT_ASSERT_ERR(ct_store_client_connect(&c, "127.0.0.1", st.port, &co, &eb), CT_EAUTH);
    CT_ASSERT_STR_CONTAINS(eb.msg, "rejected the store token");
    CT_ASSERT_LT(ct_time_ms() - t0, 3000);
    ct_store_client_close(&c);
    /* A client without a token (a stock PyTorch client would do the same) gets nowhere. */
    ct_store_client_opts_t none = {.timeout_ms = 1000, .no_env_token = true};
    CT_ASSERT_ERR(ct_store_client_connect(&c, "127.0.0.1", st.port, &none, &eb), -ETIMEDOUT);
    CT_ASSERT_STR_CONTAINS(eb.msg, "not reachable");
    ct_store_client_close(&c);
    ctrun_store_stats_t s;
    store_thread_stats(&st, &s);
    CT_ASSERT_GE(s.dropped, 2);
    store_thread_stop(&st);
    /* A client with a token meets a store without one. */
    start(NULL);
    co.token = "something";
    CT_ASSERT_ERR(ct_store_client_connect(&c, "127.0.0.1", st.port, &co, &eb), CT_EAUTH);
    CT_ASSERT_STR_CONTAINS(eb.msg, "no token configured");
    ct_store_client_close(&c);
    store_thread_stop(&st);
}

typedef struct late_start {
    int port;
    int64_t delay_ms;
} late_start_t;

static void *start_late(void *arg)
{
    late_start_t *l = arg;
    ct_sleep_ms(l->delay_ms);
    ctrun_store_opts_t o = {.port = l->port};
    start(&o);
    return NULL;
}

static void test_connect_retry_and_deadline(void)
{
    ct_errbuf_t eb = {{0}};
    ct_store_client_t c;
    /* Nobody listens: refused, retried with backoff, given up at the deadline. */
    int hold = -1;
    int port = ct_test_refused_port(&hold);
    ct_store_client_opts_t o = {.timeout_ms = 1500, .no_env_token = true};
    int64_t t0 = ct_time_ms();
    CT_ASSERT_ERR(ct_store_client_connect(&c, "127.0.0.1", port, &o, &eb), -ETIMEDOUT);
    int64_t dt = ct_time_ms() - t0;
    CT_ASSERT_GE(dt, 1400);
    CT_ASSERT_LT(dt, 6000);
    CT_ASSERT_STR_CONTAINS(eb.msg, "not reachable");
    CT_ASSERT_STR_CONTAINS(eb.msg, "refused");
    ct_store_client_close(&c);
    /* The server comes up 700 ms later: the client gets in. */
    close(hold);
    late_start_t l = {.port = port, .delay_ms = 700};
    pthread_t th;
    CT_ASSERT_OK(pthread_create(&th, NULL, start_late, &l));
    o.timeout_ms = 20000;
    t0 = ct_time_ms();
    int rc = ct_store_client_connect(&c, "127.0.0.1", port, &o, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
    CT_ASSERT_GE(ct_time_ms() - t0, 400);
    pthread_join(th, NULL);
    CT_ASSERT_OK(ct_store_ping(&c, &eb));
    ct_store_client_close(&c);
    store_thread_stop(&st);
    /* Unresolvable names and bad ports are errors, not hangs. */
    o.timeout_ms = 500;
    CT_ASSERT(ct_store_client_connect(&c, "no-such-host.invalid", 1, &o, &eb) != 0);
    ct_store_client_close(&c);
    CT_ASSERT_ERR(ct_store_client_connect(&c, "127.0.0.1", 0, &o, &eb), CT_ERANGE_VALUE);
    ct_store_client_close(&c);
}

/* Case 28: the dual-stack listener takes IPv4, IPv6 and names. */
static void test_address_families(void)
{
    start(NULL);
    const char *hosts[] = {"127.0.0.1", "localhost", "::1"};
    for (size_t i = 0; i < 3; i++) {
        ct_store_client_t c;
        ct_errbuf_t eb = {{0}};
        ct_store_client_opts_t o = {.timeout_ms = 3000, .no_env_token = true};
        int rc = ct_store_client_connect(&c, hosts[i], st.port, &o, &eb);
        if (rc != 0 && i == 2) {
            printf("# IPv6 loopback unavailable here: %s\n", eb.msg);
            ct_store_client_close(&c);
            continue;
        }
        CT_ASSERT_MSG(rc == 0, "%s: %s", hosts[i], eb.msg);
        CT_ASSERT_OK(ct_store_ping(&c, &eb));
        ct_store_client_close(&c);
    }
    CT_ASSERT(strstr(ctrun_store_address(st.store), "[::]") != NULL ||
              strstr(ctrun_store_address(st.store), "0.0.0.0") != NULL);
    store_thread_stop(&st);
}

/* A peer that accepts and never answers: every request ends at its deadline. */
static void test_silent_server(void)
{
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr = {htonl(INADDR_LOOPBACK)}};
    CT_ASSERT_OK(bind(lfd, (struct sockaddr *)&a, sizeof a));
    CT_ASSERT_OK(listen(lfd, 16));
    socklen_t l = sizeof a;
    getsockname(lfd, (struct sockaddr *)&a, &l);
    int port = ntohs(a.sin_port);
    ct_errbuf_t eb = {{0}};
    ct_store_client_t c;
    ct_store_client_opts_t o = {.dialect = CT_STORE_V1, .timeout_ms = 300, .no_env_token = true};
    CT_ASSERT_OK(ct_store_client_connect(&c, "127.0.0.1", port, &o, &eb)); /* no handshake */
    int64_t t0 = ct_time_ms();
    int64_t n;
    CT_ASSERT_ERR(ct_store_add(&c, "/x", 1, &n, &eb), -ETIMEDOUT);
    int64_t dt = ct_time_ms() - t0;
    CT_ASSERT_GE(dt, 290);
    CT_ASSERT_LT(dt, 3000);
    ct_store_client_close(&c);
    o.dialect = CT_STORE_V2; /* the PING of the handshake never comes back */
    t0 = ct_time_ms();
    CT_ASSERT_ERR(ct_store_client_connect(&c, "127.0.0.1", port, &o, &eb), -ETIMEDOUT);
    CT_ASSERT_LT(ct_time_ms() - t0, 3000);
    ct_store_client_close(&c);
    close(lfd);
}

/*
 * Something that is not a store at the address: the connect says what it is, at once, without
 * retrying until its deadline. An HTTP server, an SSH server and binary junk are "not a
 * ctrun/PyTorch store (it answered like ...)", in both dialects' handshakes (the v2 PING, and
 * authentication); a peer that accepts and never answers is "no answer from HOST:PORT in N s"
 * once the handshake deadline passes, and the client's progress shows it waiting for the
 * handshake meanwhile.
 */
typedef struct connect_job {
    int port;
    ct_store_client_opts_t o;
    int rc;
    ct_errbuf_t eb;
    int64_t ms;
} connect_job_t;

static void *connect_thread(void *arg)
{
    connect_job_t *j = arg;
    ct_store_client_t c;
    int64_t t0 = ct_time_ms();
    j->rc = ct_store_client_connect(&c, "127.0.0.1", j->port, &j->o, &j->eb);
    j->ms = ct_time_ms() - t0;
    ct_store_client_close(&c);
    return NULL;
}

static void test_not_a_store(void)
{
    static const struct {
        foreign_kind_t kind;
        const char *token;
        const char *says;
    } cases[] = {
        {FOREIGN_HTTP, NULL, "(it answered like an HTTP server: \"HTTP/1.1 400 Bad Request\")"},
        {FOREIGN_HTTP, "tok", "(it answered like an HTTP server: \"HTTP/1.1 400 Bad Request\")"},
        {FOREIGN_SSH, NULL, "(it answered like an SSH server: \"SSH-2.0-OpenSSH_9.2p1 Debian-2\")"},
        {FOREIGN_SSH, "tok", "(it answered like an SSH server: \"SSH-2.0-OpenSSH_9.2p1"},
        {FOREIGN_BINARY, NULL, "(it answered with the bytes de ad be ef 01 02 03 04)"},
        {FOREIGN_BINARY, "tok", "(it answered with the bytes de ad be ef 01 02 03 04)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        foreign_peer_t fp;
        CT_ASSERT_OK(foreign_peer_start(&fp, cases[i].kind));
        connect_job_t j = {.port = fp.port};
        j.o = (ct_store_client_opts_t){.timeout_ms = 20000,
                                       .handshake_timeout_ms = 1000,
                                       .token = cases[i].token,
                                       .no_env_token = true};
        connect_thread(&j);
        char want[128];
        snprintf(want, sizeof want, "127.0.0.1:%d is not a ctrun/PyTorch store ", fp.port);
        CT_ASSERT_MSG(j.rc == CT_EPROTOCOL, "case %zu: %d: %s", i, j.rc, j.eb.msg);
        CT_ASSERT_STR_CONTAINS(j.eb.msg, want);
        CT_ASSERT_STR_CONTAINS(j.eb.msg, cases[i].says);
        CT_ASSERT_MSG(j.ms < 5000, "case %zu took %lld ms", i, (long long)j.ms);
        foreign_peer_stop(&fp);
        CT_ASSERT_EQ(fp.accepted, 1); /* not retried */
    }
    /* Accepted, never answered. */
    foreign_peer_t fp;
    CT_ASSERT_OK(foreign_peer_start(&fp, FOREIGN_SILENT));
    ct_store_client_progress_t prog = {0};
    connect_job_t j = {.port = fp.port};
    j.o = (ct_store_client_opts_t){
        .timeout_ms = 20000, .handshake_timeout_ms = 1500, .no_env_token = true, .progress = &prog};
    pthread_t th;
    CT_ASSERT_OK(pthread_create(&th, NULL, connect_thread, &j));
    int64_t deadline = ct_deadline_after_ms(1000);
    while (__atomic_load_n(&prog.phase, __ATOMIC_ACQUIRE) != CT_STORE_PHASE_HANDSHAKE &&
           !ct_deadline_passed(deadline))
        usleep(5000);
    CT_ASSERT_EQ(__atomic_load_n(&prog.phase, __ATOMIC_ACQUIRE), CT_STORE_PHASE_HANDSHAKE);
    pthread_join(th, NULL);
    char want[128];
    snprintf(want, sizeof want, "no answer from 127.0.0.1:%d in 1.5 s", fp.port);
    CT_ASSERT_MSG(j.rc == -ETIMEDOUT, "%d: %s", j.rc, j.eb.msg);
    CT_ASSERT_STR_CONTAINS(j.eb.msg, want);
    CT_ASSERT_MSG(j.ms >= 1400 && j.ms < 5000, "took %lld ms", (long long)j.ms);
    CT_ASSERT_EQ(__atomic_load_n(&prog.phase, __ATOMIC_ACQUIRE), CT_STORE_PHASE_IDLE);
    foreign_peer_stop(&fp);
    CT_ASSERT_EQ(fp.accepted, 1);
    /* Without a handshake deadline of its own, the connect deadline bounds the wait. */
    CT_ASSERT_OK(foreign_peer_start(&fp, FOREIGN_SILENT));
    j = (connect_job_t){.port = fp.port};
    j.o = (ct_store_client_opts_t){.timeout_ms = 800, .no_env_token = true};
    connect_thread(&j);
    snprintf(want, sizeof want, "no answer from 127.0.0.1:%d in 0.", fp.port);
    CT_ASSERT_MSG(j.rc == -ETIMEDOUT, "%d: %s", j.rc, j.eb.msg);
    CT_ASSERT_STR_CONTAINS(j.eb.msg, want);
    foreign_peer_stop(&fp);
    /* A real store: the progress ends at READY. */
    start(NULL);
    prog = (ct_store_client_progress_t){0};
    ct_store_client_t c;
    ct_errbuf_t eb = {{0}};
    ct_store_client_opts_t o = {.timeout_ms = 5000, .no_env_token = true, .progress = &prog};
    CT_ASSERT_OK(ct_store_client_connect(&c, "127.0.0.1", st.port, &o, &eb));
    CT_ASSERT_EQ(prog.phase, CT_STORE_PHASE_READY);
    ct_store_client_close(&c);
    store_thread_stop(&st);
}

int main(void)
{
    CT_RUN(test_client_ops_v2);
    CT_RUN(test_client_ops_v1);
    CT_RUN(test_wait_timeout_and_cancel);
    CT_RUN(test_wait_set_races);
    CT_RUN(test_get_blocks_until_set);
    CT_RUN(test_hostile_clients);
    CT_RUN(test_authentication);
    CT_RUN(test_connect_retry_and_deadline);
    CT_RUN(test_address_families);
    CT_RUN(test_silent_server);
    CT_RUN(test_not_a_store);
    CT_RUN(test_many_clients); /* last: it may skip the rest */
    return 0;
}
