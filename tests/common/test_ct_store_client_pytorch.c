/*
 * test_ct_store_client_pytorch.c - our C client against PyTorch's own TCPStore servers.
 *
 * Proves (case 27 and its v2 counterpart): every request of docs/store-protocol.md §2.2 works
 * byte-compatibly against the real PyTorch 1.13 server in the v1 dialect (including a get of a
 * missing key timing out on the client side, ADD on a non-numeric value dropping the
 * connection, and 1.13's compare_set that does not wake waiters), and every v2 request against
 * a PyTorch >= 2.2 server, both its libuv and its legacy backend (WAIT timeout with
 * CANCEL_WAIT, queues, LIST, BARRIER). A v2 client meeting the 1.13 server fails at its
 * deadline with a hint, instead of hanging.
 *
 * Interpreters: CTRUN_TORCH13_PYTHON (default /usr/bin/python3) and CTRUN_TORCH2_PYTHON
 * (default ~/.venvs/torch2/bin/python). Exit 77 when neither can import torch.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_child.h"
#include "ct_store_client.h"
#include "ct_test.h"
#include "ct_time.h"

static const char *server_py =
    "import sys, time, datetime, torch.distributed as d\n"
    "kw = {}\n"
    "if len(sys.argv) > 1: kw['use_libuv'] = sys.argv[1] == 'libuv'\n"
    "s = d.TCPStore('127.0.0.1', 0, is_master=True, wait_for_workers=False,\n"
    "               timeout=datetime.timedelta(seconds=300), **kw)\n"
    "print(s.port, flush=True)\n"
    "time.sleep(600)\n";

static bool has_torch(const char *interp, char *version, size_t size)
{
    if (access(interp, X_OK) != 0)
        return false;
    ct_child_t c;
    char *argv[] = {(char *)interp, "-c",
                    "import torch.distributed, torch; print(torch.__version__)", NULL};
    bool ok = ct_child_run(&c, argv, NULL, 120000) == 0 && c.exit_code == 0;
    if (ok)
        snprintf(version, size, "%.*s", (int)strcspn(c.out, "\n"), c.out);
    ct_child_close(&c);
    return ok;
}

static int start_server(ct_child_t *c, const char *interp, const char *backend)
{
    char *argv[] = {(char *)interp, "-c", (char *)server_py, (char *)backend, NULL};
    CT_ASSERT_OK(ct_child_start(c, argv, NULL));
    int64_t deadline = ct_deadline_after_ms(120000);
    while (!ct_deadline_passed(deadline)) {
        ct_child_poll_output(c, 100);
        if (c->out != NULL && strchr(c->out, '\n') != NULL)
            return atoi(c->out);
    }
    CT_ASSERT_MSG(0, "PyTorch store did not start: %s", c->err ? c->err : "");
    return -1;
}

static void connect_to(ct_store_client_t *c, int port, ct_store_dialect_t d, int64_t timeout)
{
    ct_errbuf_t eb = {{0}};
    ct_store_client_opts_t o = {.dialect = d, .timeout_ms = timeout, .no_env_token = true};
    int rc = ct_store_client_connect(c, "127.0.0.1", port, &o, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
}

static void expect_value(ct_store_client_t *c, const char *key, const void *want, size_t n)
{
    ct_errbuf_t eb = {{0}};
    ct_store_bytes_t v;
    int rc = ct_store_get(c, key, &v, &eb);
    CT_ASSERT_MSG(rc == 0, "get %s: %s", key, eb.msg);
    CT_ASSERT_MSG(v.len == n && memcmp(v.data, want, n) == 0, "get %s: %zu bytes", key,
                  (size_t)v.len);
}

/* The requests both dialects share, with PyTorch's answers. */
static void common_requests(ct_store_client_t *c)
{
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ct_store_set(c, "/k", "v", 1, &eb));
    expect_value(c, "/k", "v", 1);
    uint8_t blob[128];
    for (int i = 0; i < 128; i++)
        blob[i] = (uint8_t)(i * 37 + 11);
    CT_ASSERT_OK(ct_store_set(c, "//worker/attempt_0/default_pg/0/0", blob, sizeof blob, &eb));
    expect_value(c, "//worker/attempt_0/default_pg/0/0", blob, sizeof blob);
    int64_t n = 0;
    CT_ASSERT_OK(ct_store_add(c, "/c", 5, &n, &eb));
    CT_ASSERT_OK(ct_store_add(c, "/c", 5, &n, &eb));
    CT_ASSERT_EQ(n, 10);
    expect_value(c, "/c", "10", 2);
    CT_ASSERT_OK(ct_store_add(c, "/neg", -5, &n, &eb));
    CT_ASSERT_OK(ct_store_add(c, "/neg", 2, &n, &eb));
    CT_ASSERT_EQ(n, -3);
    CT_ASSERT_OK(ct_store_set(c, "/junk", "7xyz", 4, &eb));
    CT_ASSERT_OK(ct_store_add(c, "/junk", 1, &n, &eb));
    CT_ASSERT_EQ(n, 8);
    ct_store_bytes_t cur;
    CT_ASSERT_OK(ct_store_compare_set(c, "/cs", "", 0, "x", 1, &cur, &eb));
    CT_ASSERT(cur.len == 1 && cur.data[0] == 'x');
    CT_ASSERT_OK(ct_store_compare_set(c, "/cs", "x", 1, "y", 1, &cur, &eb));
    CT_ASSERT(cur.len == 1 && cur.data[0] == 'y');
    CT_ASSERT_OK(ct_store_compare_set(c, "/cs", "zz", 2, "w", 1, &cur, &eb));
    CT_ASSERT(cur.len == 1 && cur.data[0] == 'y');
    CT_ASSERT_OK(ct_store_compare_set(c, "/nokey", "a", 1, "b", 1, &cur, &eb));
    CT_ASSERT(cur.len == 1 && cur.data[0] == 'a');
    bool flag = false;
    const char *present[2] = {"/k", "/c"}, *absent = "/nokey";
    CT_ASSERT_OK(ct_store_check(c, present, 2, &flag, &eb));
    CT_ASSERT(flag);
    CT_ASSERT_OK(ct_store_check(c, &absent, 1, &flag, &eb));
    CT_ASSERT(!flag);
    CT_ASSERT_OK(ct_store_wait(c, present, 2, -1, &eb));
    CT_ASSERT_OK(ct_store_wait(c, NULL, 0, -1, &eb));
    CT_ASSERT_OK(ct_store_num_keys(c, &n, &eb));
    CT_ASSERT_EQ(n, 6); /* /k, the blob, /c, /neg, /junk, /cs */
    CT_ASSERT_OK(ct_store_delete(c, "/k", &flag, &eb));
    CT_ASSERT(flag);
    CT_ASSERT_OK(ct_store_delete(c, "/k", &flag, &eb));
    CT_ASSERT(!flag);
    /* get of a missing key: PyTorch's server never times a waiter out; the client does. */
    ct_store_client_set_timeout(c, 300);
    int64_t t0 = ct_time_ms();
    ct_store_bytes_t v;
    CT_ASSERT_ERR(ct_store_get(c, "/missing", &v, &eb), -ETIMEDOUT);
    CT_ASSERT_LT(ct_time_ms() - t0, 5000);
    ct_store_client_set_timeout(c, 20000);
    expect_value(c, "/c", "10", 2); /* still (or again) in step */
}

typedef struct waiter {
    ct_store_client_t *c;
    const char *key;
    int64_t timeout_ms;
    int rc;
} waiter_t;

static void *wait_thread(void *arg)
{
    waiter_t *w = arg;
    ct_errbuf_t eb = {{0}};
    w->rc = ct_store_wait(w->c, &w->key, 1, w->timeout_ms, &eb);
    return NULL;
}

static void test_against_pt13(const char *interp)
{
    ct_child_t srv;
    int port = start_server(&srv, interp, NULL);
    ct_store_client_t c, w;
    ct_errbuf_t eb = {{0}};
    connect_to(&c, port, CT_STORE_V1, 20000);
    common_requests(&c);
    /* ADD on a non-numeric value: 1.13 closes the connection. */
    int64_t n;
    CT_ASSERT_OK(ct_store_set(&c, "/text", "abc", 3, &eb));
    CT_ASSERT_ERR(ct_store_add(&c, "/text", 1, &n, &eb), CT_EPEER);
    CT_ASSERT_OK(ct_store_add(&c, "/c", 0, &n, &eb)); /* reconnected */
    CT_ASSERT_EQ(n, 10);
    /* 1.13's compare_set does not wake a waiter even when it creates the key (§2.2): the
     * reason ctrun's server chose to differ. */
    connect_to(&w, port, CT_STORE_V1, 20000);
    waiter_t wt = {.c = &w, .key = "/z", .timeout_ms = 1500};
    pthread_t th;
    CT_ASSERT_OK(pthread_create(&th, NULL, wait_thread, &wt));
    ct_sleep_ms(300);
    CT_ASSERT_OK(ct_store_compare_set(&c, "/z", "", 0, "v", 1, NULL, &eb));
    pthread_join(th, NULL);
    CT_ASSERT_EQ(wt.rc, -ETIMEDOUT); /* created, yet the 1.13 waiter was never woken */
    const char *z = "/z";
    CT_ASSERT_OK(ct_store_wait(&w, &z, 1, 2000, &eb)); /* reconnected; exists: immediate */
    /* A v2 client cannot talk to 1.13: it fails at its deadline, with a hint. */
    ct_store_client_t v2;
    ct_store_client_opts_t o = {.timeout_ms = 1500, .no_env_token = true};
    CT_ASSERT_ERR(ct_store_client_connect(&v2, "127.0.0.1", port, &o, &eb), -ETIMEDOUT);
    CT_ASSERT_STR_CONTAINS(eb.msg, "v1 dialect");
    ct_store_client_close(&v2);
    ct_store_client_close(&w);
    ct_store_client_close(&c);
    ct_child_close(&srv);
}

static void test_against_pt2(const char *interp, const char *backend)
{
    ct_child_t srv;
    int port = start_server(&srv, interp, backend);
    ct_store_client_t c, other;
    ct_errbuf_t eb = {{0}};
    connect_to(&c, port, CT_STORE_V2, 20000);
    connect_to(&other, port, CT_STORE_V2, 20000);
    common_requests(&c);
    CT_ASSERT_OK(ct_store_ping(&c, &eb));
    CT_ASSERT_OK(ct_store_append(&c, "/a", "x", 1, &eb));
    CT_ASSERT_OK(ct_store_append(&c, "/a", "y", 1, &eb));
    expect_value(&c, "/a", "xy", 2);
    const char *mk[2] = {"/m1", "/m2"};
    ct_store_bytes_t mv[2] = {{(const uint8_t *)"1", 1}, {(const uint8_t *)"22", 2}}, got[2];
    CT_ASSERT_OK(ct_store_multi_set(&c, mk, mv, 2, &eb));
    CT_ASSERT_OK(ct_store_multi_get(&c, mk, 2, got, &eb));
    CT_ASSERT(got[0].len == 1 && got[1].len == 2 && memcmp(got[1].data, "22", 2) == 0);
    /* WAIT timeout: CANCEL_WAIT, and the connection stays in step. */
    const char *never = "/never";
    CT_ASSERT_ERR(ct_store_wait(&c, &never, 1, 300, &eb), -ETIMEDOUT);
    CT_ASSERT(ct_store_client_connected(&c));
    CT_ASSERT_OK(ct_store_set(&other, "/never", "1", 1, &eb));
    CT_ASSERT_OK(ct_store_set(&other, "/y", "why", 3, &eb));
    expect_value(&c, "/y", "why", 3);
    int64_t n;
    bool has_queues = strcmp(backend, "libuv") == 0; /* the legacy backend has none */
    if (has_queues) {
        CT_ASSERT_OK(ct_store_queue_push(&c, "/q", "j", 1, &eb));
        CT_ASSERT_OK(ct_store_queue_len(&c, "/q", &n, &eb));
        CT_ASSERT_EQ(n, 1);
        ct_store_bytes_t v;
        CT_ASSERT_OK(ct_store_queue_pop(&c, "/q", true, &v, &eb));
        CT_ASSERT(v.len == 1 && v.data[0] == 'j');
        CT_ASSERT_ERR(ct_store_queue_pop(&c, "/q", false, &v, &eb), -ENODATA);
    }
    ct_store_list_t keys;
    CT_ASSERT_OK(ct_store_list_keys(&c, &keys, &eb));
    CT_ASSERT_OK(ct_store_num_keys(&c, &n, &eb));
    CT_ASSERT_EQ(keys.n, (uint64_t)n);
    CT_ASSERT_OK(ct_store_barrier(&c, "/bar", 1, 2000, &eb));
    ct_store_client_close(&other);
    ct_store_client_close(&c);
    ct_child_close(&srv);
}

int main(void)
{
    const char *pt13 = getenv("CTRUN_TORCH13_PYTHON");
    if (pt13 == NULL)
        pt13 = "/usr/bin/python3";
    const char *pt2 = ct_test_torch2_python();
    char v13[64] = "", v2[64] = "";
    bool have13 = has_torch(pt13, v13, sizeof v13) && strncmp(v13, "1.", 2) == 0;
    bool have2 = has_torch(pt2, v2, sizeof v2) && strncmp(v2, "2.", 2) == 0 &&
                 strncmp(v2, "2.0", 3) != 0 && strncmp(v2, "2.1.", 4) != 0;
    if (!have13 && !have2)
        CT_SKIP("no PyTorch 1.13 at %s (CTRUN_TORCH13_PYTHON) and no PyTorch >= 2.2 at %s "
                "(CTRUN_TORCH2_PYTHON)",
                pt13, pt2);
    if (have13) {
        printf("# PyTorch %s at %s\n", v13, pt13);
        test_against_pt13(pt13);
        printf("ok - test_against_pt13\n");
    } else {
        printf("# skipped 1.13: no PyTorch 1.13 at %s\n", pt13);
    }
    if (have2) {
        printf("# PyTorch %s at %s\n", v2, pt2);
        test_against_pt2(pt2, "libuv");
        printf("ok - test_against_pt2_libuv\n");
        test_against_pt2(pt2, "legacy");
        printf("ok - test_against_pt2_legacy\n");
    } else {
        printf("# skipped v2: no PyTorch >= 2.2 at %s\n", pt2);
    }
    return 0;
}
