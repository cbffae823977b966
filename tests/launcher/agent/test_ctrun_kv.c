/*
 * test_ctrun_kv.c - the agent's store access (launcher/agent/ctrun_kv.c), both backends against a
 * store on the same loop: every request completes later, never inside the submitting call;
 * GET waits for a missing key; ADD, COMPARE_SET and APPEND answer as the store does; the remote
 * backend keeps order within its lanes, waits for a store that appears late (a node started
 * before node 0), and its close returns at once even while a GET is blocked (the client's
 * cancel fd), leaving no thread behind. Also the blocking client's cancel fd on its own.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "ct_store_client.h"
#include "ct_test.h"
#include "ct_time.h"
#include "ctrun_e2e.h"
#include "ctrun_kv.h"

#define MAX_REPLIES 32

typedef struct replies {
    int n;
    bool in_submit; /* set around submit calls: a callback then is a bug */
    uint64_t tag[MAX_REPLIES];
    int rc[MAX_REPLIES];
    int64_t num[MAX_REPLIES];
    char value[MAX_REPLIES][64];
} replies_t;

static void kv_on_reply(void *data, const ctrun_kv_reply_t *r)
{
    replies_t *rs = data;
    CT_ASSERT(!rs->in_submit);
    CT_ASSERT(rs->n < MAX_REPLIES);
    rs->tag[rs->n] = r->tag;
    rs->rc[rs->n] = r->rc;
    rs->num[rs->n] = r->num;
    snprintf(rs->value[rs->n], sizeof rs->value[0], "%s", r->data ? (const char *)r->data : "");
    rs->n++;
}

static void on_timeout(uv_timer_t *t)
{
    (void)t;
    CT_ASSERT_MSG(0, "timed out waiting for store replies");
}

/* Runs the loop until n replies arrived (30 s at most). */
static void wait_replies(uv_loop_t *loop, replies_t *rs, int n)
{
    uv_timer_t t;
    uv_timer_init(loop, &t);
    uv_timer_start(&t, on_timeout, 30000, 0);
    while (rs->n < n)
        uv_run(loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
}

static int find(const replies_t *rs, uint64_t tag)
{
    for (int i = 0; i < rs->n; i++)
        if (rs->tag[i] == tag)
            return i;
    CT_ASSERT_MSG(0, "no reply with tag %llu", (unsigned long long)tag);
    return -1;
}

static void exercise(uv_loop_t *loop, ctrun_kv_t *kv, replies_t *rs)
{
    rs->in_submit = true;
    CT_ASSERT_OK(ctrun_kv_get(kv, "/later", 1)); /* missing: waits */
    CT_ASSERT_OK(ctrun_kv_set(kv, "/a", "x", 2));
    CT_ASSERT_OK(ctrun_kv_add(kv, "/n", 5, 3));
    CT_ASSERT_OK(ctrun_kv_add(kv, "/n", -2, 4));
    CT_ASSERT_OK(ctrun_kv_cas(kv, "/c", "", "first", 5));  /* creates */
    CT_ASSERT_OK(ctrun_kv_cas(kv, "/c", "", "second", 6)); /* loses */
    CT_ASSERT_OK(ctrun_kv_append(kv, "/log", "l1\n", 7));
    CT_ASSERT_OK(ctrun_kv_append(kv, "/log", "l2\n", 8));
    rs->in_submit = false;
    wait_replies(loop, rs, 7);
    CT_ASSERT_EQ(rs->num[find(rs, 3)], 5);
    CT_ASSERT_EQ(rs->num[find(rs, 4)], 3);
    CT_ASSERT_STR_EQ(rs->value[find(rs, 5)], "first");
    CT_ASSERT_STR_EQ(rs->value[find(rs, 6)], "first");
    for (int i = 0; i < rs->n; i++)
        CT_ASSERT_EQ(rs->rc[i], 0);
    /* Within the ops lane (and always locally) replies keep their order. */
    CT_ASSERT(find(rs, 3) < find(rs, 4) && find(rs, 4) < find(rs, 5) && find(rs, 7) < find(rs, 8));
    for (int i = 0; i < rs->n; i++)
        CT_ASSERT(rs->tag[i] != 1); /* /later is still missing */
    rs->in_submit = true;
    CT_ASSERT_OK(ctrun_kv_set(kv, "/later", "now", 10));
    /* Remote GETs share one lane: these two wait behind /later. */
    CT_ASSERT_OK(ctrun_kv_get(kv, "/a", 9));
    CT_ASSERT_OK(ctrun_kv_get(kv, "/log", 11));
    rs->in_submit = false;
    wait_replies(loop, rs, 11);
    CT_ASSERT_STR_EQ(rs->value[find(rs, 1)], "now");
    CT_ASSERT_STR_EQ(rs->value[find(rs, 9)], "x");
    CT_ASSERT_STR_EQ(rs->value[find(rs, 11)], "l1\nl2\n");
}

static void closed_cb(void *data)
{
    *(bool *)data = true;
}

static void test_local(void)
{
    uv_loop_t loop;
    CT_ASSERT_OK(uv_loop_init(&loop));
    ctrun_store_t *s = NULL;
    ct_errbuf_t eb = {{0}};
    ctrun_store_opts_t so = {.host = "127.0.0.1"};
    CT_ASSERT_OK(ctrun_store_create(&loop, &so, &s, &eb));
    replies_t rs = {0};
    ctrun_kv_t *kv = NULL;
    CT_ASSERT_OK(ctrun_kv_open_local(&loop, s, kv_on_reply, &rs, &kv, &eb));
    exercise(&loop, kv, &rs);
    /* A GET still waiting when the kv closes is dropped without a callback. */
    CT_ASSERT_OK(ctrun_kv_get(kv, "/never", 12));
    ctrun_kv_close(kv);
    bool closed = false;
    ctrun_store_close(s, closed_cb, &closed);
    CT_ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
    CT_ASSERT(closed);
    CT_ASSERT_OK(uv_loop_close(&loop));
}

static void test_remote(void)
{
    uv_loop_t loop;
    CT_ASSERT_OK(uv_loop_init(&loop));
    ctrun_store_t *s = NULL;
    ct_errbuf_t eb = {{0}};
    ctrun_store_opts_t so = {.host = "127.0.0.1"};
    CT_ASSERT_OK(ctrun_store_create(&loop, &so, &s, &eb));
    replies_t rs = {0};
    ctrun_kv_t *kv = NULL;
    ctrun_kv_remote_opts_t ko = {.host = "127.0.0.1",
                                 .port = ctrun_store_port(s),
                                 .connect_timeout_ms = 10000,
                                 .op_timeout_ms = 10000,
                                 .backoff_max_ms = 200};
    CT_ASSERT_OK(ctrun_kv_open_remote(&loop, &ko, kv_on_reply, &rs, &kv, &eb));
    exercise(&loop, kv, &rs);
    /* Close while a GET blocks in the server: returns at once (the cancel fd), no callback. */
    CT_ASSERT_OK(ctrun_kv_get(kv, "/never", 12));
    ct_sleep_ms(50);
    uv_run(&loop, UV_RUN_NOWAIT);
    int64_t t0 = ct_time_ms();
    ctrun_kv_close(kv);
    CT_ASSERT_LT(ct_time_ms() - t0, 5000);
    bool closed = false;
    ctrun_store_close(s, closed_cb, &closed);
    CT_ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
    CT_ASSERT(closed);
    CT_ASSERT_EQ(rs.n, 11);
    CT_ASSERT_OK(uv_loop_close(&loop));
}

static void test_remote_store_appears_late(void)
{
    uv_loop_t loop;
    CT_ASSERT_OK(uv_loop_init(&loop));
    int port = e2e_free_port();
    replies_t rs = {0};
    ctrun_kv_t *kv = NULL;
    ct_errbuf_t eb = {{0}};
    ctrun_kv_remote_opts_t ko = {.host = "127.0.0.1",
                                 .port = port,
                                 .connect_timeout_ms = 30000,
                                 .op_timeout_ms = 10000,
                                 .backoff_max_ms = 100};
    CT_ASSERT_OK(ctrun_kv_open_remote(&loop, &ko, kv_on_reply, &rs, &kv, &eb));
    CT_ASSERT_OK(ctrun_kv_add(kv, "/early", 1, 1));
    CT_ASSERT_OK(ctrun_kv_get(kv, "/early", 2));
    ct_sleep_ms(300); /* the lanes are retrying refused connections by now */
    uv_run(&loop, UV_RUN_NOWAIT);
    CT_ASSERT_EQ(rs.n, 0);
    ctrun_store_t *s = NULL;
    ctrun_store_opts_t so = {.host = "127.0.0.1", .port = port};
    CT_ASSERT_OK(ctrun_store_create(&loop, &so, &s, &eb));
    wait_replies(&loop, &rs, 2);
    CT_ASSERT_EQ(rs.rc[0], 0);
    CT_ASSERT_EQ(rs.num[find(&rs, 1)], 1);
    CT_ASSERT_STR_EQ(rs.value[find(&rs, 2)], "1");
    ctrun_kv_close(kv);
    ctrun_store_close(s, NULL, NULL);
    CT_ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
    CT_ASSERT_OK(uv_loop_close(&loop));
}

static void test_remote_connect_fails(void)
{
    /* Nobody ever listens: the request fails with the client's reason after its deadline. */
    uv_loop_t loop;
    CT_ASSERT_OK(uv_loop_init(&loop));
    replies_t rs = {0};
    ctrun_kv_t *kv = NULL;
    ct_errbuf_t eb = {{0}};
    ctrun_kv_remote_opts_t ko = {.host = "127.0.0.1",
                                 .port = e2e_free_port(),
                                 .connect_timeout_ms = 300,
                                 .op_timeout_ms = 300,
                                 .backoff_max_ms = 50};
    CT_ASSERT_OK(ctrun_kv_open_remote(&loop, &ko, kv_on_reply, &rs, &kv, &eb));
    CT_ASSERT_OK(ctrun_kv_set(kv, "/x", "1", 1));
    wait_replies(&loop, &rs, 1);
    CT_ASSERT_EQ(rs.rc[0], -ETIMEDOUT);
    ctrun_kv_close(kv);
    CT_ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
    CT_ASSERT_OK(uv_loop_close(&loop));
}

/* ---- the blocking client's cancel fd -------------------------------------------------------- */

typedef struct waiter {
    int port, cancel_fd, rc;
} waiter_t;

static void *wait_thread(void *arg)
{
    waiter_t *w = arg;
    ct_store_client_t c;
    ct_errbuf_t eb = {{0}};
    ct_store_client_opts_t o = {.timeout_ms = 60000, .cancel_fd = w->cancel_fd};
    w->rc = ct_store_client_connect(&c, "127.0.0.1", w->port, &o, &eb);
    if (w->rc == 0) {
        const char *keys[] = {"/never"};
        w->rc = ct_store_wait(&c, keys, 1, -1, &eb);
    }
    ct_store_client_close(&c);
    return NULL;
}

static void test_client_cancel_fd(void)
{
    uv_loop_t loop;
    CT_ASSERT_OK(uv_loop_init(&loop));
    ctrun_store_t *s = NULL;
    ct_errbuf_t eb = {{0}};
    ctrun_store_opts_t so = {.host = "127.0.0.1"};
    CT_ASSERT_OK(ctrun_store_create(&loop, &so, &s, &eb));
    waiter_t w = {.port = ctrun_store_port(s), .cancel_fd = eventfd(0, EFD_CLOEXEC), .rc = 1};
    CT_ASSERT(w.cancel_fd > 0);
    pthread_t th;
    CT_ASSERT_EQ(pthread_create(&th, NULL, wait_thread, &w), 0);
    /* Serve the connection until the WAIT is pending in the store. */
    int64_t deadline = ct_time_ms() + 30000;
    for (;;) {
        uv_run(&loop, UV_RUN_NOWAIT);
        ctrun_store_stats_t st;
        ctrun_store_stats(s, &st);
        if (st.pending_waits == 1)
            break;
        CT_ASSERT(ct_time_ms() < deadline);
        ct_sleep_ms(5);
    }
    uint64_t one = 1;
    CT_ASSERT_EQ(write(w.cancel_fd, &one, sizeof one), (ssize_t)sizeof one);
    int64_t t0 = ct_time_ms();
    pthread_join(th, NULL);
    CT_ASSERT_LT(ct_time_ms() - t0, 5000);
    CT_ASSERT_EQ(w.rc, -ECANCELED);
    close(w.cancel_fd);
    ctrun_store_close(s, NULL, NULL);
    CT_ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
    CT_ASSERT_OK(uv_loop_close(&loop));
}

int main(void)
{
    CT_RUN(test_local);
    CT_RUN(test_remote);
    CT_RUN(test_remote_store_appears_late);
    CT_RUN(test_remote_connect_fails);
    CT_RUN(test_client_cancel_fd);
    return 0;
}
