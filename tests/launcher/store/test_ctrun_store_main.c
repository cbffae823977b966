/*
 * test_ctrun_store_main.c - the ctrun-store program: its command line, the port it prints,
 * serving, token options, a bind conflict, and a clean exit on SIGTERM and SIGINT; pipelined
 * GETs of 1 to 8 MiB values over raw sockets in both dialects (every reply arrives, clients
 * that leave early are closed: no socket left in CLOSE_WAIT, descriptors back to where they
 * were).
 *
 * Usage: test_ctrun_store_main PATH-TO-ctrun-store
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ct_child.h"
#include "ct_store_client.h"
#include "ct_store_codec.h"
#include "ct_test.h"
#include "ct_time.h"

static const char *exe;

static void run_expect(char **argv, int code, const char *out_has, const char *err_has)
{
    ct_child_t c;
    CT_ASSERT_OK(ct_child_run(&c, argv, NULL, 20000));
    CT_ASSERT_MSG(c.exit_code == code, "%s %s: exit %d, stderr: %s", argv[1],
                  argv[2] ? argv[2] : "", c.exit_code, c.err);
    if (out_has != NULL)
        CT_ASSERT_STR_CONTAINS(c.out, out_has);
    if (err_has != NULL)
        CT_ASSERT_STR_CONTAINS(c.err, err_has);
    ct_child_close(&c);
}

/* Starts the server and returns the port from its first stdout line. */
static int start_server(ct_child_t *c, char **argv, const ct_child_opts_t *opts)
{
    CT_ASSERT_OK(ct_child_start(c, argv, opts));
    int64_t deadline = ct_deadline_after_ms(20000);
    while (!ct_deadline_passed(deadline)) {
        ct_child_poll_output(c, 50);
        if (c->out != NULL && strchr(c->out, '\n') != NULL)
            return atoi(c->out);
    }
    CT_ASSERT_MSG(0, "no port printed; stderr: %s", c->err ? c->err : "");
    return -1;
}

static void test_command_line(void)
{
    char *help[] = {(char *)exe, "--help", NULL};
    run_expect(help, 0, "usage: ctrun-store --port P", NULL);
    char *version[] = {(char *)exe, "--version", NULL};
    run_expect(version, 0, "ctrun-store 0.", NULL);
    char *noport[] = {(char *)exe, NULL};
    run_expect(noport, 2, NULL, "--port is required");
    char *badport[] = {(char *)exe, "--port", "http", NULL};
    run_expect(badport, 2, NULL, "--port:");
    char *bigport[] = {(char *)exe, "--port=70000", NULL};
    run_expect(bigport, 2, NULL, "--port:");
    char *novalue[] = {(char *)exe, "--port", NULL};
    run_expect(novalue, 2, NULL, "--port needs a value");
    char *unknown[] = {(char *)exe, "--port", "0", "--frobnicate", NULL};
    run_expect(unknown, 2, NULL, "unknown argument '--frobnicate'");
    char *smallmem[] = {(char *)exe, "--port", "0", "--max-bytes", "10", NULL};
    run_expect(smallmem, 2, NULL, "--max-bytes:");
    char *badconn[] = {(char *)exe, "--port", "0", "--max-connections", "0", NULL};
    run_expect(badconn, 2, NULL, "--max-connections:");
    char *badhost[] = {(char *)exe, "--port", "0", "--host", "bad host!", NULL};
    run_expect(badhost, 2, NULL, "--host:");
    char *emptytok[] = {(char *)exe, "--port", "0", "--token", "", NULL};
    run_expect(emptytok, 2, NULL, "empty");
    char *nofile[] = {(char *)exe, "--port", "0", "--token-file", "/nonexistent/tok", NULL};
    run_expect(nofile, 2, NULL, "cannot open");
    char *both[] = {(char *)exe, "--port", "0", "--token", "a", "--token-file", "/x", NULL};
    run_expect(both, 2, NULL, "not both");
}

static void test_serve_and_signals(void)
{
    int sigs[2] = {SIGTERM, SIGINT};
    for (int i = 0; i < 2; i++) {
        ct_child_t srv;
        char *argv[] = {(char *)exe, "--port", "0", "--host", "127.0.0.1", NULL};
        int port = start_server(&srv, argv, NULL);
        CT_ASSERT(port > 0 && port < 65536);
        ct_store_client_t c;
        ct_errbuf_t eb = {{0}};
        ct_store_client_opts_t o = {.timeout_ms = 10000, .no_env_token = true};
        CT_ASSERT_OK(ct_store_client_connect(&c, "127.0.0.1", port, &o, &eb));
        int64_t n = 0;
        CT_ASSERT_OK(ct_store_add(&c, "init/", 1, &n, &eb));
        CT_ASSERT_EQ(n, 1);
        /* A second server on the same port cannot bind. */
        char portstr[16];
        snprintf(portstr, sizeof portstr, "%d", port);
        char *dup[] = {(char *)exe, "--port", portstr, "--host", "127.0.0.1", NULL};
        run_expect(dup, 1, NULL, "cannot listen");
        /* A waiter is connected while the server shuts down: it sees the close. */
        ct_child_signal(&srv, sigs[i]);
        CT_ASSERT_OK(ct_child_wait(&srv, 10000));
        CT_ASSERT_EQ(srv.exit_code, 0);
        CT_ASSERT_STR_CONTAINS(srv.err, "listening on 127.0.0.1:");
        CT_ASSERT_STR_CONTAINS(srv.err, i == 0 ? "SIGTERM" : "SIGINT");
        CT_ASSERT(ct_store_add(&c, "init/", 1, &n, &eb) != 0);
        ct_store_client_close(&c);
        ct_child_close(&srv);
    }
}

static void test_token_file(void)
{
    char path[] = "/tmp/ctrun-store-token-XXXXXX";
    int fd = mkstemp(path);
    CT_ASSERT(fd >= 0);
    CT_ASSERT_EQ(write(fd, "tok-123\n", 8), 8);
    close(fd);
    ct_child_t srv;
    char *argv[] = {(char *)exe, "--port", "0", "--token-file", path, NULL};
    const char *env[] = {"CTRUN_STORE_TOKEN", NULL};
    ct_child_opts_t copts = {.env = env};
    int port = start_server(&srv, argv, &copts);
    ct_store_client_t c;
    ct_errbuf_t eb = {{0}};
    ct_store_client_opts_t o = {.timeout_ms = 5000, .token = "tok-123"};
    CT_ASSERT_OK(ct_store_client_connect(&c, "127.0.0.1", port, &o, &eb));
    CT_ASSERT_OK(ct_store_ping(&c, &eb));
    ct_store_client_close(&c);
    o.token = "tok-124";
    CT_ASSERT_ERR(ct_store_client_connect(&c, "127.0.0.1", port, &o, &eb), CT_EAUTH);
    ct_store_client_close(&c);
    ct_child_signal(&srv, SIGTERM);
    CT_ASSERT_OK(ct_child_wait(&srv, 10000));
    CT_ASSERT_EQ(srv.exit_code, 0);
    CT_ASSERT_STR_CONTAINS(srv.err, "clients must authenticate");
    CT_ASSERT_STR_CONTAINS(srv.err, "authentication failed: wrong token");
    ct_child_close(&srv);
    unlink(path);
}

/* ---- large values over raw sockets ----------------------------------------------------- */

static int count_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    CT_ASSERT(d != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static long rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    CT_ASSERT(f != NULL);
    long kib = -1;
    while (fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, "VmRSS:", 6) == 0)
            kib = strtol(line + 6, NULL, 10);
    fclose(f);
    return kib;
}

/* Sockets with local port `port` in state CLOSE_WAIT (the peer closed, this end did not). */
static int count_close_wait(int port)
{
    static const char *const tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
    int n = 0;
    for (int t = 0; t < 2; t++) {
        FILE *f = fopen(tables[t], "r");
        if (f == NULL)
            continue;
        char line[512];
        while (fgets(line, sizeof line, f) != NULL) {
            char local[80];
            unsigned st = 0;
            if (sscanf(line, " %*s %79s %*s %x", local, &st) != 2)
                continue;
            const char *colon = strrchr(local, ':');
            if (colon != NULL && (int)strtol(colon + 1, NULL, 16) == port && st == 0x08)
                n++;
        }
        fclose(f);
    }
    return n;
}

static int main_raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CT_ASSERT(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr = {htonl(INADDR_LOOPBACK)}};
    CT_ASSERT_OK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0 ? 0 : -errno);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* Opens a raw connection in dialect d and sends n pipelined GETs of key in one go. */
static int raw_pipeline_gets(int port, ct_store_dialect_t d, const char *key, int n)
{
    int fd = main_raw_connect(port);
    uint8_t one[64];
    ct_store_req_t g = {.op = CT_STORE_OP_GET, .key = {(const uint8_t *)key, strlen(key)}};
    size_t len = (size_t)ct_store_encode_request(d, &g, one, sizeof one, NULL);
    size_t total = (d == CT_STORE_V2 ? 5 : 0) + len * (size_t)n;
    uint8_t *buf = malloc(total), *p = buf;
    if (d == CT_STORE_V2) {
        ct_store_req_t v = {.op = CT_STORE_OP_VALIDATE, .num32 = CT_STORE_VALIDATE_MAGIC};
        p += ct_store_encode_request(d, &v, p, 5, NULL);
    }
    for (int i = 0; i < n; i++, p += len)
        memcpy(p, one, len);
    CT_ASSERT_EQ(send(fd, buf, total, MSG_NOSIGNAL), (ssize_t)total);
    free(buf);
    return fd;
}

/* Reads n GET replies of vlen bytes each; fails with the count when they stop for 15 s. */
static void raw_read_replies(int fd, int n, uint64_t vlen, const char *what)
{
    static uint8_t buf[1u << 20];
    uint64_t want = (uint64_t)n * (8 + vlen), got = 0, next_hdr = 0;
    uint8_t hdr[8];
    int replies = 0;
    while (got < want) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int pr = poll(&pf, 1, 15000);
        CT_ASSERT_MSG(pr > 0, "%s: replies stopped after %d of %d (%llu of %llu bytes)", what,
                      replies, n, (unsigned long long)got, (unsigned long long)want);
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        CT_ASSERT_MSG(r > 0, "%s: the store closed after %d of %d replies", what, replies, n);
        /* Check each reply's length field as it passes. */
        for (ssize_t i = 0; i < r; i++, got++) {
            if (got >= next_hdr && got < next_hdr + 8) {
                hdr[got - next_hdr] = buf[i];
                if (got == next_hdr + 7) {
                    CT_ASSERT_EQ(ct_store_get_u64(hdr), vlen);
                    replies++;
                    next_hdr += 8 + vlen;
                }
            }
        }
    }
    CT_ASSERT_EQ(replies, n);
}

/*
 * Pipelined GETs of 1, 4, 5 and 8 MiB values, in both dialects, against the real program:
 * every reply of every reader arrives (a connection paused for its pending output resumes
 * whether its writes finish at once or later), and readers that leave early, with replies still
 * pending, are closed by the store: none stays in CLOSE_WAIT, and the store's descriptors come
 * back to what they were.
 */
static void test_large_values_pipelined(void)
{
    static const int mib[] = {1, 4, 5, 8};
    ct_child_t srv;
    char *argv[] = {(char *)exe, "--port", "0", "--host", "127.0.0.1", NULL};
    int port = start_server(&srv, argv, NULL);
    ct_store_client_t c;
    ct_errbuf_t eb = {{0}};
    ct_store_client_opts_t o = {.timeout_ms = 20000, .no_env_token = true};
    CT_ASSERT_OK(ct_store_client_connect(&c, "127.0.0.1", port, &o, &eb));
    int fds0 = count_fds(srv.pid);
    long rss0 = rss_kib(srv.pid);
    char *v = malloc(8u << 20);
    for (size_t i = 0; i < sizeof mib / sizeof mib[0]; i++) {
        uint64_t vlen = (uint64_t)mib[i] << 20;
        memset(v, 'a' + (int)i, vlen);
        int rc = ct_store_set(&c, "/big", v, vlen, &eb);
        CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
        rc = ct_store_ping(&c, &eb); /* a SET has no reply: know it has landed */
        CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
        int ngets = mib[i] == 1 ? 100 : 24;
        int readers[4], leavers[12];
        for (int k = 0; k < 4; k++)
            readers[k] = raw_pipeline_gets(port, k % 2 ? CT_STORE_V2 : CT_STORE_V1, "/big", ngets);
        for (int k = 0; k < 12; k++)
            leavers[k] = raw_pipeline_gets(port, k % 2 ? CT_STORE_V2 : CT_STORE_V1, "/big", ngets);
        for (int k = 0; k < 4; k++) {
            char what[64];
            snprintf(what, sizeof what, "%d MiB, reader %d (%s)", mib[i], k, k % 2 ? "v2" : "v1");
            raw_read_replies(readers[k], ngets, vlen, what);
            close(readers[k]);
        }
        /* Leavers read a little (or nothing) and go, with replies still pending. */
        for (int k = 0; k < 12; k++) {
            if (k % 3 != 0) {
                uint8_t b[65536];
                struct pollfd pf = {.fd = leavers[k], .events = POLLIN};
                if (poll(&pf, 1, 5000) > 0)
                    CT_ASSERT(recv(leavers[k], b, sizeof b, 0) > 0);
            }
            close(leavers[k]);
        }
        /* The store sees every close: its descriptors come back, nothing in CLOSE_WAIT. */
        int64_t deadline = ct_deadline_after_ms(15000);
        int fds = 0, cw = 0;
        while (!ct_deadline_passed(deadline)) {
            fds = count_fds(srv.pid);
            cw = count_close_wait(port);
            if (fds == fds0 && cw == 0)
                break;
            usleep(20000);
        }
        CT_ASSERT_MSG(fds == fds0 && cw == 0,
                      "%d MiB: the store holds %d descriptors (%d before), %d sockets in "
                      "CLOSE_WAIT",
                      mib[i], fds, fds0, cw);
        /* And it still answers. */
        int64_t n = 0;
        rc = ct_store_add(&c, "/n", 1, &n, &eb);
        CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
        CT_ASSERT_EQ(n, (int64_t)i + 1);
    }
    printf("# ctrun-store RSS %ld KiB before, %ld KiB after %s\n", rss0, rss_kib(srv.pid),
           "1, 4, 5 and 8 MiB pipelined GETs");
    free(v);
    ct_store_client_close(&c);
    ct_child_signal(&srv, SIGTERM);
    CT_ASSERT_OK(ct_child_wait(&srv, 10000));
    CT_ASSERT_EQ(srv.exit_code, 0);
    ct_child_close(&srv);
}

/* Waits until the store has read everything sent to it: no socket to `port` has bytes left to
 * send, and every socket of `port` has an empty receive queue. */
static void wait_store_read_all(int port)
{
    int64_t deadline = ct_deadline_after_ms(15000);
    while (!ct_deadline_passed(deadline)) {
        bool queued = false;
        FILE *f = fopen("/proc/net/tcp", "r");
        CT_ASSERT(f != NULL);
        char line[512];
        while (fgets(line, sizeof line, f) != NULL) {
            char local[80], remote[80];
            unsigned txq = 0, rxq = 0;
            if (sscanf(line, " %*s %79s %79s %*x %x:%x", local, remote, &txq, &rxq) != 4)
                continue;
            const char *lc = strrchr(local, ':'), *rc = strrchr(remote, ':');
            if (lc == NULL || rc == NULL)
                continue;
            if ((int)strtol(lc + 1, NULL, 16) == port && rxq > 0)
                queued = true;
            if ((int)strtol(rc + 1, NULL, 16) == port && txq > 0)
                queued = true;
        }
        fclose(f);
        if (!queued)
            return;
        usleep(20000);
    }
    CT_ASSERT_MSG(0, "the store did not read what was sent to it within 15 s");
}

static int count_substr(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; p != NULL && (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

/*
 * --max-bytes charges the client that holds the memory: four connections each send half of an
 * 8 MiB SET and stop, their input buffers taking much of the cap (each holds 8 MiB, or the
 * 8 MiB + 20 bytes its request needs, depending on how the reads fall). A well-behaved client's
 * 1-byte SET always succeeds. With a 64 MiB cap the buffers leave room for it; with a cap they
 * fill but for 48 to 128 bytes (a new key costs 173), one of the four is closed instead, with
 * one log line.
 */
static void memory_cap_case(const char *cap, int expect_closed)
{
    ct_child_t srv;
    char *argv[] = {(char *)exe, "--port",      "0",         "--host",
                    "127.0.0.1", "--max-bytes", (char *)cap, NULL};
    int port = start_server(&srv, argv, NULL);
    size_t vlen = 8u << 20;
    uint8_t *v = malloc(vlen);
    memset(v, 'h', vlen);
    int half[4];
    for (int i = 0; i < 4; i++) {
        char key[16];
        snprintf(key, sizeof key, "/h%d", i);
        ct_store_req_t r = {
            .op = CT_STORE_OP_SET, .key = {(const uint8_t *)key, strlen(key)}, .value = {v, vlen}};
        ssize_t n = ct_store_encode_request(CT_STORE_V1, &r, NULL, 0, NULL);
        uint8_t *buf = malloc((size_t)n);
        CT_ASSERT_EQ(ct_store_encode_request(CT_STORE_V1, &r, buf, (size_t)n, NULL), n);
        half[i] = main_raw_connect(port);
        size_t sent = (size_t)n / 2 + 1000u * (size_t)i;
        CT_ASSERT_EQ(send(half[i], buf, sent, MSG_NOSIGNAL), (ssize_t)sent);
        free(buf);
    }
    wait_store_read_all(port);
    ct_store_client_t c;
    ct_errbuf_t eb = {{0}};
    ct_store_client_opts_t o = {.timeout_ms = 10000, .no_env_token = true};
    CT_ASSERT_OK(ct_store_client_connect(&c, "127.0.0.1", port, &o, &eb));
    int rc = ct_store_set(&c, "/one", "1", 1, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
    ct_store_bytes_t got;
    rc = ct_store_get(&c, "/one", &got, &eb);
    CT_ASSERT_MSG(rc == 0, "--max-bytes %s: the well-behaved client: %s", cap, eb.msg);
    CT_ASSERT(got.len == 1 && got.data[0] == '1');
    /* Exactly one of the half-sent connections is closed. */
    int closed = 0;
    int64_t deadline = ct_deadline_after_ms(3000);
    bool done[4] = {0};
    while (!ct_deadline_passed(deadline)) {
        struct pollfd pf[4];
        for (int i = 0; i < 4; i++)
            pf[i] = (struct pollfd){.fd = done[i] ? -1 : half[i], .events = POLLIN};
        if (poll(pf, 4, ct_deadline_poll_ms(deadline)) <= 0)
            break;
        for (int i = 0; i < 4; i++) {
            char b[64];
            if (pf[i].revents != 0 && recv(half[i], b, sizeof b, 0) <= 0) {
                done[i] = true;
                closed++;
            }
        }
    }
    CT_ASSERT_MSG(closed == expect_closed, "--max-bytes %s: %d half-sent connections closed", cap,
                  closed);
    for (int i = 0; i < 4; i++)
        close(half[i]);
    free(v);
    ct_store_client_close(&c);
    ct_child_signal(&srv, SIGTERM);
    CT_ASSERT_OK(ct_child_wait(&srv, 10000));
    CT_ASSERT_EQ(srv.exit_code, 0);
    CT_ASSERT_EQ(count_substr(srv.err, "its partial request holds"), expect_closed);
    if (expect_closed > 0)
        CT_ASSERT_STR_CONTAINS(srv.err, "bytes of input, more than the memory cap of 33554560 "
                                        "bytes leaves beside 173 bytes of stored data");
    ct_child_close(&srv);
}

static void test_memory_cap_charges_the_holder(void)
{
    memory_cap_case("64M", 0);
    char cap[32];
    snprintf(cap, sizeof cap, "%u", 4 * (8u << 20) + 128);
    memory_cap_case(cap, 1);
}

/*
 * Out of file descriptors: the store runs with RLIMIT_NOFILE lowered to 64 (soft and hard, by
 * the shell that starts it) and 150 clients connect, each asking for a PING. Those it can hold
 * are answered; the others are closed at once (none is left waiting), the store says so in one
 * line naming the limit, however many it refuses, and once the clients go it serves new ones
 * again and says that too.
 */
static void test_out_of_file_descriptors(void)
{
    enum { N = 150 };
    ct_child_t srv;
    char *argv[] = {"/bin/sh", "-c", "ulimit -n 64 && exec \"$0\" --port 0 --host 127.0.0.1",
                    (char *)exe, NULL};
    int port = start_server(&srv, argv, NULL);
    int fds[N];
    uint8_t ping[5 + 5];
    ct_store_req_t v = {.op = CT_STORE_OP_VALIDATE, .num32 = CT_STORE_VALIDATE_MAGIC};
    ct_store_req_t p = {.op = CT_STORE_OP_PING, .num32 = 0x5eed};
    size_t n = (size_t)ct_store_encode_request(CT_STORE_V2, &v, ping, sizeof ping, NULL);
    n += (size_t)ct_store_encode_request(CT_STORE_V2, &p, ping + n, sizeof ping - n, NULL);
    for (int i = 0; i < N; i++) {
        fds[i] = main_raw_connect(port);
        /* A refused connection may already be closed: its send may fail, its read tells. */
        (void)send(fds[i], ping, n, MSG_NOSIGNAL);
    }
    int answered = 0, closed = 0;
    for (int i = 0; i < N; i++) {
        struct pollfd pf = {.fd = fds[i], .events = POLLIN};
        CT_ASSERT_MSG(poll(&pf, 1, 10000) > 0, "client %d: neither answered nor closed", i);
        uint8_t b[8];
        ssize_t r = recv(fds[i], b, sizeof b, 0);
        if (r == 4 && ct_store_get_u32(b) == 0x5eed)
            answered++;
        else if (r == 0 || (r < 0 && errno == ECONNRESET))
            closed++;
        else
            CT_ASSERT_MSG(0, "client %d: recv returned %zd", i, r);
    }
    CT_ASSERT_EQ(answered + closed, N);
    CT_ASSERT_MSG(answered >= 30 && closed >= 50, "%d answered, %d closed", answered, closed);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    /* New clients are served again once descriptors are free. */
    ct_store_client_t c;
    ct_errbuf_t eb = {{0}};
    ct_store_client_opts_t o = {.timeout_ms = 10000, .no_env_token = true};
    int rc = ct_store_client_connect(&c, "127.0.0.1", port, &o, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
    int64_t sum = 0;
    rc = ct_store_add(&c, "/after", 5, &sum, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
    CT_ASSERT_EQ(sum, 5);
    ct_store_client_close(&c);
    ct_child_signal(&srv, SIGTERM);
    CT_ASSERT_OK(ct_child_wait(&srv, 10000));
    CT_ASSERT_EQ(srv.exit_code, 0);
    CT_ASSERT_EQ(count_substr(srv.err, "cannot accept connections"), 1);
    CT_ASSERT_STR_CONTAINS(srv.err, "store: cannot accept connections: out of file descriptors "
                                    "(limit 64, RLIMIT_NOFILE); ");
    CT_ASSERT_STR_CONTAINS(srv.err, "refused so far");
    CT_ASSERT_STR_CONTAINS(srv.err, "store: accepting connections again (");
    ct_child_close(&srv);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        CT_SKIP("usage: %s PATH-TO-ctrun-store", argv[0]);
    exe = argv[1];
    CT_RUN(test_command_line);
    CT_RUN(test_serve_and_signals);
    CT_RUN(test_token_file);
    CT_RUN(test_large_values_pipelined);
    CT_RUN(test_memory_cap_charges_the_holder);
    CT_RUN(test_out_of_file_descriptors);
    return 0;
}
