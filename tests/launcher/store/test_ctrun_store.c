/*
 * test_ctrun_store.c - the store server's semantics, through its real parser and handlers.
 *
 * Requests are fed to test connections (ctrun_store_internal.h) and replies compared byte for
 * byte, so every case is deterministic and runs in microseconds. Proves: the captured 1.13
 * exchange replayed one byte at a time gives the captured replies (case 23); every semantic
 * of docs/store-protocol.md §2 with the chosen quirks of §3.3 (WAIT counting, delete vs. waiters,
 * COMPARE_SET creating wakes, ADD parsing and wrap-around, queues, BARRIER, pipelined WAITs,
 * CANCEL_WAIT and its race with a wake-up); v1 WATCH_KEY events; hostile input closes only
 * the offender; the memory cap, backpressure and the pushed-bytes cap; pipelined replies of 1 to
 * 8 MiB through sockets that take nothing, part, or everything at once (a paused connection
 * resumes however its output drained), also as a randomized run checked byte for byte; a
 * disconnect mid-wait
 * frees the waiter; the in-process API, watch callbacks and wipes; authentication. After each
 * case the server's indexes and counters are recounted from scratch.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "ct_store_auth.h"
#include "ct_store_codec.h"
#include "ct_test.h"
#include "ctrun_store.h"
#include "ctrun_store_internal.h"

static uv_loop_t loop;

static size_t hex(const char *text, uint8_t *out, size_t cap)
{
    size_t n = 0;
    int hi = -1;
    for (const char *p = text; *p; p++) {
        int v;
        if (*p >= '0' && *p <= '9')
            v = *p - '0';
        else if (*p >= 'a' && *p <= 'f')
            v = *p - 'a' + 10;
        else
            continue;
        if (hi < 0) {
            hi = v;
        } else {
            CT_ASSERT(n < cap);
            out[n++] = (uint8_t)(hi << 4 | v);
            hi = -1;
        }
    }
    return n;
}

static bool closed_called;
static void on_closed(void *data)
{
    *(bool *)data = true;
}

static ctrun_store_t *store_new(const ctrun_store_opts_t *extra)
{
    ctrun_store_opts_t opts = {.host = "127.0.0.1", .port = 0};
    if (extra != NULL) {
        opts = *extra;
        opts.host = "127.0.0.1";
    }
    ctrun_store_t *s = NULL;
    ct_errbuf_t eb = {{0}};
    int rc = ctrun_store_create(&loop, &opts, &s, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
    CT_ASSERT(ctrun_store_port(s) > 0);
    return s;
}

static void check(ctrun_store_t *s)
{
    ct_errbuf_t eb = {{0}};
    int rc = ctrun_store__test_check(s, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
}

static void store_free(ctrun_store_t *s)
{
    check(s);
    closed_called = false;
    ctrun_store_close(s, on_closed, &closed_called);
    ctrun_store_close(s, on_closed, &closed_called); /* a second close does nothing */
    uv_run(&loop, UV_RUN_DEFAULT);
    CT_ASSERT(closed_called);
}

/* ---- a test connection that speaks through the codec ----------------------------------- */

typedef struct tc {
    ctrun_store__conn_t *c;
    ct_store_dialect_t d;
} tc_t;

static tc_t tc_open(ctrun_store_t *s, ct_store_dialect_t d)
{
    tc_t t = {.c = ctrun_store__test_conn_open(s), .d = d};
    CT_ASSERT(t.c != NULL);
    if (d == CT_STORE_V2) {
        uint8_t v[5];
        hex("00 cef7853c", v, sizeof v);
        CT_ASSERT_OK(ctrun_store__test_conn_feed(t.c, v, 5));
    }
    return t;
}

static ct_store_bytes_t B(const char *s)
{
    return (ct_store_bytes_t){(const uint8_t *)s, strlen(s)};
}

/* Encodes and feeds a request; returns the feed's result (CT_EPEER once closed). */
static int tc_req(tc_t *t, const ct_store_req_t *req)
{
    ssize_t n = ct_store_encode_request(t->d, req, NULL, 0, NULL);
    CT_ASSERT(n > 0);
    uint8_t *buf = malloc((size_t)n);
    CT_ASSERT(ct_store_encode_request(t->d, req, buf, (size_t)n, NULL) == n);
    int rc = ctrun_store__test_conn_feed(t->c, buf, (size_t)n);
    free(buf);
    return rc;
}

static void tc_set(tc_t *t, const char *k, const char *v)
{
    ct_store_req_t r = {.op = CT_STORE_OP_SET, .key = B(k), .value = B(v)};
    CT_ASSERT_OK(tc_req(t, &r));
}

static void tc_keys(tc_t *t, ct_store_op_t op, const char *const *keys, size_t n)
{
    ct_store_bytes_t arr[16];
    for (size_t i = 0; i < n; i++)
        arr[i] = B(keys[i]);
    ct_store_req_t r = {.op = op, .key_array = arr, .nkeys = n};
    CT_ASSERT_OK(tc_req(t, &r));
}

static void tc_wait1(tc_t *t, const char *k)
{
    tc_keys(t, CT_STORE_OP_WAIT, &k, 1);
}

static void tc_simple(tc_t *t, ct_store_op_t op, const char *k)
{
    ct_store_req_t r = {.op = op, .key = B(k)};
    CT_ASSERT_OK(tc_req(t, &r));
}

/* Takes all pending output. */
static size_t tc_out(tc_t *t, uint8_t *buf, size_t cap)
{
    return ctrun_store__test_conn_output(t->c, buf, cap);
}

static void expect_hex(tc_t *t, const char *want_hex)
{
    uint8_t want[4096], got[4096];
    size_t wn = hex(want_hex, want, sizeof want);
    size_t gn = tc_out(t, got, sizeof got);
    CT_ASSERT_MSG(gn == wn && memcmp(got, want, wn) == 0, "expected %zu bytes \"%s\", got %zu", wn,
                  want_hex, gn);
}

static void expect_nothing(tc_t *t)
{
    uint8_t got[64];
    CT_ASSERT_EQ(tc_out(t, got, sizeof got), 0);
}

static void expect_u64(tc_t *t, int64_t v)
{
    uint8_t got[16];
    CT_ASSERT_EQ(tc_out(t, got, sizeof got), 8);
    CT_ASSERT_EQ((int64_t)ct_store_get_u64(got), v);
}

static void expect_bytes(tc_t *t, const char *v)
{
    uint8_t got[4096];
    size_t n = tc_out(t, got, sizeof got);
    CT_ASSERT_EQ(n, 8 + strlen(v));
    CT_ASSERT_EQ(ct_store_get_u64(got), strlen(v));
    CT_ASSERT_MSG(memcmp(got + 8, v, strlen(v)) == 0, "expected \"%s\"", v);
}

static void tc_free(tc_t *t)
{
    ctrun_store__test_conn_free(t->c);
    t->c = NULL;
}

static int64_t tc_add(tc_t *t, const char *k, int64_t d)
{
    ct_store_req_t r = {.op = CT_STORE_OP_ADD, .key = B(k), .num = d};
    CT_ASSERT_OK(tc_req(t, &r));
    uint8_t got[16];
    CT_ASSERT_EQ(tc_out(t, got, sizeof got), 8);
    return (int64_t)ct_store_get_u64(got);
}

/* ---- cases ------------------------------------------------------------------------------ */

/* Case 23: the captured 1.13 traffic, fed one byte per call, gives the captured replies. */
static void test_capture_replay_v1(void)
{
    ctrun_store_t *s = store_new(NULL);
    tc_t t = tc_open(s, CT_STORE_V1);
    static const char *stream =
        "00 0200000000000000 2f6b 0100000000000000 76"                    /* set k v */
        "05 0100000000000000 0200000000000000 2f6b"                       /* wait [k] */
        "02 0200000000000000 2f6b"                                        /* get k */
        "03 0200000000000000 2f63 0500000000000000"                       /* add c 5 */
        "03 0200000000000000 2f63 0500000000000000"                       /* add c 5 */
        "01 0300000000000000 2f6373 0000000000000000 0100000000000000 78" /* cas cs "" x */
        "01 0600000000000000 2f6e6f6b6579 0100000000000000 61 0100000000000000 62"
        "06"                       /* num_keys */
        "08 0200000000000000 2f6b" /* delete k */
        "08 0200000000000000 2f6b" /* again */
        "05 0200000000000000 0200000000000000 2f63 0300000000000000 2f6373";
    static const char *replies = "00"
                                 "0100000000000000 76"
                                 "0500000000000000"
                                 "0a00000000000000"
                                 "0100000000000000 78"
                                 "0100000000000000 61"
                                 "0300000000000000"
                                 "0100000000000000"
                                 "0000000000000000"
                                 "00";
    uint8_t in[512], want[512], got[512];
    size_t n = hex(stream, in, sizeof in), wn = hex(replies, want, sizeof want), gn = 0;
    for (size_t i = 0; i < n; i++) {
        CT_ASSERT_OK(ctrun_store__test_conn_feed(t.c, in + i, 1));
        gn += tc_out(&t, got + gn, sizeof got - gn);
    }
    CT_ASSERT_EQ(gn, wn);
    CT_ASSERT(memcmp(got, want, wn) == 0);
    ct_store_bytes_t v;
    CT_ASSERT_OK(ctrun_store_get(s, "/c", &v));
    CT_ASSERT(v.len == 2 && memcmp(v.data, "10", 2) == 0); /* decimal ASCII (case 3) */
    tc_free(&t);
    store_free(s);
}

static void test_v2_requests(void)
{
    ctrun_store_t *s = store_new(NULL);
    tc_t t = tc_open(s, CT_STORE_V2);
    ct_store_req_t ping = {.op = CT_STORE_OP_PING, .num32 = 0xdeadbeef};
    CT_ASSERT_OK(tc_req(&t, &ping));
    expect_hex(&t, "efbeadde");
    /* GET of a missing key answers empty (chosen quirk), the connection stays. */
    tc_simple(&t, CT_STORE_OP_GET, "/missing");
    expect_bytes(&t, "");
    /* Case 16: APPEND twice. */
    ct_store_req_t ap = {.op = CT_STORE_OP_APPEND, .key = B("/a"), .value = B("x")};
    CT_ASSERT_OK(tc_req(&t, &ap));
    CT_ASSERT_OK(tc_req(&t, &ap));
    expect_nothing(&t);
    tc_simple(&t, CT_STORE_OP_GET, "/a");
    expect_bytes(&t, "xx");
    /* Case 17: MULTI_SET then MULTI_GET (a missing key reads empty). */
    ct_store_bytes_t mk[2] = {B("/m1"), B("/m2")}, mv[2] = {B("1"), B("2")};
    ct_store_req_t ms = {
        .op = CT_STORE_OP_MULTI_SET, .key_array = mk, .value_array = mv, .nkeys = 2};
    CT_ASSERT_OK(tc_req(&t, &ms));
    expect_nothing(&t);
    const char *gk[3] = {"/m1", "/m2", "/nope"};
    tc_keys(&t, CT_STORE_OP_MULTI_GET, gk, 3);
    expect_hex(&t, "0100000000000000 31 0100000000000000 32 0000000000000000");
    /* Case 19: CHECK. */
    tc_keys(&t, CT_STORE_OP_CHECK, gk, 2);
    expect_hex(&t, "00");
    tc_keys(&t, CT_STORE_OP_CHECK, gk, 3);
    expect_hex(&t, "01");
    /* Case 18: queues, kept apart from keys. */
    ct_store_req_t qp = {.op = CT_STORE_OP_QUEUE_PUSH, .key = B("/q"), .value = B("1")};
    CT_ASSERT_OK(tc_req(&t, &qp));
    qp.value = B("2");
    CT_ASSERT_OK(tc_req(&t, &qp));
    tc_simple(&t, CT_STORE_OP_QUEUE_LEN, "/q");
    expect_u64(&t, 2);
    const char *qk = "/q";
    tc_keys(&t, CT_STORE_OP_CHECK, &qk, 1); /* a non-empty queue counts as existing */
    expect_hex(&t, "00");
    tc_simple(&t, CT_STORE_OP_QUEUE_POP, "/q");
    expect_hex(&t, "0200000000000000 0100000000000000 31");
    tc_simple(&t, CT_STORE_OP_QUEUE_POP, "/q");
    expect_hex(&t, "0100000000000000 0100000000000000 32");
    tc_simple(&t, CT_STORE_OP_QUEUE_POP, "/q");
    expect_hex(&t, "0000000000000000");
    tc_simple(&t, CT_STORE_OP_QUEUE_LEN, "/unknown");
    expect_u64(&t, 0);
    /* GETNUMKEYS counts keys, not queues; LIST names them. */
    ct_store_req_t nk = {.op = CT_STORE_OP_GETNUMKEYS};
    CT_ASSERT_OK(tc_req(&t, &nk));
    expect_u64(&t, 3); /* /a /m1 /m2 */
    ct_store_req_t lk = {.op = CT_STORE_OP_LIST_KEYS};
    CT_ASSERT_OK(tc_req(&t, &lk));
    uint8_t got[256];
    size_t n = tc_out(&t, got, sizeof got);
    ct_store_resp_t resp;
    CT_ASSERT_EQ(
        ct_store_decode_response(CT_STORE_OP_LIST_KEYS, 0, got, n, NULL, &resp, NULL, NULL, NULL),
        (ssize_t)n);
    CT_ASSERT_EQ(resp.num, 3);
    ct_store_list_iter_t it;
    ct_store_bytes_t k;
    int seen = 0;
    ct_store_list_begin(&resp.list, &it);
    while (ct_store_list_next(&it, &k, NULL))
        seen |= (k.len == 2 && memcmp(k.data, "/a", 2) == 0)    ? 1
                : (k.len == 3 && memcmp(k.data, "/m1", 3) == 0) ? 2
                : (k.len == 3 && memcmp(k.data, "/m2", 3) == 0) ? 4
                                                                : 8;
    CT_ASSERT_EQ(seen, 7);
    /* Case 8: delete returns 1 then 0. */
    tc_simple(&t, CT_STORE_OP_DELETE_KEY, "/a");
    expect_u64(&t, 1);
    tc_simple(&t, CT_STORE_OP_DELETE_KEY, "/a");
    expect_u64(&t, 0);
    /* VALIDATE again: closed. */
    ct_store_req_t val = {.op = CT_STORE_OP_VALIDATE, .num32 = CT_STORE_VALIDATE_MAGIC};
    CT_ASSERT_ERR(tc_req(&t, &val), CT_EPEER);
    tc_free(&t);
    store_free(s);
}

/* Cases 3-5: ADD's decimal text, strtoll parsing, wrap-around, and closing on junk. */
static void test_add_rules(void)
{
    ctrun_store_t *s = store_new(NULL);
    tc_t t = tc_open(s, CT_STORE_V1), other = tc_open(s, CT_STORE_V1);
    CT_ASSERT_EQ(tc_add(&t, "/c", 5), 5);
    CT_ASSERT_EQ(tc_add(&t, "/c", 5), 10);
    CT_ASSERT_EQ(tc_add(&t, "/n", -5), -5);
    CT_ASSERT_EQ(tc_add(&t, "/n", 2), -3);
    ct_store_bytes_t v;
    CT_ASSERT_OK(ctrun_store_get(s, "/n", &v));
    CT_ASSERT(v.len == 2 && memcmp(v.data, "-3", 2) == 0);
    tc_set(&t, "/s", " 7");
    CT_ASSERT_EQ(tc_add(&t, "/s", 1), 8);
    tc_set(&t, "/s", "7xyz");
    CT_ASSERT_EQ(tc_add(&t, "/s", 1), 8);
    tc_set(&t, "/s", "\t+41");
    CT_ASSERT_EQ(tc_add(&t, "/s", 1), 42);
    tc_set(&t, "/s", "9223372036854775807");
    CT_ASSERT_EQ(tc_add(&t, "/s", 1), INT64_MIN); /* wraps, as verified on 1.13 */
    tc_set(&t, "/s", "-9223372036854775808");
    CT_ASSERT_EQ(tc_add(&t, "/s", 0), INT64_MIN);
    CT_ASSERT_EQ(tc_add(&t, "init/", 0), 0); /* add(k, 0) reads a counter; creates it */
    static const char *bad[] = {
        "", "abc", " ", "-", "+x", "99999999999999999999", "-9223372036854775809"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tc_t x = tc_open(s, CT_STORE_V1);
        tc_set(&x, "/e", bad[i]);
        ct_store_req_t r = {.op = CT_STORE_OP_ADD, .key = B("/e"), .num = 1};
        CT_ASSERT_MSG(tc_req(&x, &r) == CT_EPEER, "ADD on \"%s\" should close", bad[i]);
        expect_nothing(&x);
        tc_free(&x);
        /* Everyone else is still served, and the value is untouched. */
        CT_ASSERT_EQ(tc_add(&other, "/c", 0), 10);
        CT_ASSERT_OK(ctrun_store_get(s, "/e", &v));
        CT_ASSERT(v.len == strlen(bad[i]));
    }
    ctrun_store_stats_t st;
    ctrun_store_stats(s, &st);
    CT_ASSERT_EQ(st.dropped, 7);
    tc_free(&t);
    tc_free(&other);
    store_free(s);
}

/* Cases 6-7. */
static void test_compare_set(void)
{
    ctrun_store_t *s = store_new(NULL);
    tc_t t = tc_open(s, CT_STORE_V2);
    ct_store_req_t r = {
        .op = CT_STORE_OP_COMPARE_SET, .key = B("/cs"), .value = B(""), .desired = B("x")};
    CT_ASSERT_OK(tc_req(&t, &r));
    expect_bytes(&t, "x");
    r.value = B("x");
    r.desired = B("y");
    CT_ASSERT_OK(tc_req(&t, &r));
    expect_bytes(&t, "y");
    r.value = B("zz");
    r.desired = B("w");
    CT_ASSERT_OK(tc_req(&t, &r));
    expect_bytes(&t, "y");
    r.value = B("");
    r.desired = B("q"); /* present: empty expected does not match "y" */
    CT_ASSERT_OK(tc_req(&t, &r));
    expect_bytes(&t, "y");
    ct_store_req_t nk = {.op = CT_STORE_OP_GETNUMKEYS};
    CT_ASSERT_OK(tc_req(&t, &nk));
    expect_u64(&t, 1);
    ct_store_req_t miss = {
        .op = CT_STORE_OP_COMPARE_SET, .key = B("/nokey"), .value = B("a"), .desired = B("b")};
    CT_ASSERT_OK(tc_req(&t, &miss));
    expect_bytes(&t, "a"); /* expected echoed, key still absent */
    CT_ASSERT_OK(tc_req(&t, &nk));
    expect_u64(&t, 1);
    const char *k = "/nokey";
    tc_keys(&t, CT_STORE_OP_CHECK, &k, 1);
    expect_hex(&t, "01");
    /* Empty value equal to empty expected: swapped. */
    tc_set(&t, "/empty", "");
    ct_store_req_t e = {
        .op = CT_STORE_OP_COMPARE_SET, .key = B("/empty"), .value = B(""), .desired = B("full")};
    CT_ASSERT_OK(tc_req(&t, &e));
    expect_bytes(&t, "full");
    tc_free(&t);
    store_free(s);
}

static void test_wait_semantics(void)
{
    ctrun_store_t *s = store_new(NULL);
    tc_t w = tc_open(s, CT_STORE_V2), x = tc_open(s, CT_STORE_V2);
    /* Case 12: WAIT [a, b] answers after b, not after a. */
    const char *ab[2] = {"/a", "/b"};
    tc_keys(&w, CT_STORE_OP_WAIT, ab, 2);
    expect_nothing(&w);
    tc_set(&x, "/other", "1");
    tc_set(&x, "/a", "1");
    expect_nothing(&w);
    tc_set(&x, "/b", "1");
    expect_hex(&w, "00");
    /* Present keys: immediate. Case 13: an empty list answers at once. */
    tc_keys(&w, CT_STORE_OP_WAIT, ab, 2);
    expect_hex(&w, "00");
    tc_keys(&w, CT_STORE_OP_WAIT, ab, 0);
    expect_hex(&w, "00");
    /* The count only goes down: set then delete still counts. */
    const char *cd[2] = {"/c", "/d"};
    tc_keys(&w, CT_STORE_OP_WAIT, cd, 2);
    tc_set(&x, "/c", "1");
    tc_simple(&x, CT_STORE_OP_DELETE_KEY, "/c");
    expect_u64(&x, 1);
    tc_set(&x, "/d", "1");
    expect_hex(&w, "00");
    /* Case 8: DELETE leaves waiters alone. */
    tc_wait1(&w, "/e");
    tc_simple(&x, CT_STORE_OP_DELETE_KEY, "/e");
    expect_u64(&x, 0);
    expect_nothing(&w);
    tc_set(&x, "/e", "1");
    expect_hex(&w, "00");
    /* The same key twice counts twice, and one write of it releases both. */
    const char *ff[2] = {"/f", "/f"};
    tc_keys(&w, CT_STORE_OP_WAIT, ff, 2);
    ctrun_store_stats_t st;
    ctrun_store_stats(s, &st);
    CT_ASSERT_EQ(st.wait_registrations, 2);
    tc_set(&x, "/f", "1");
    expect_hex(&w, "00");
    /* Every kind of write wakes: ADD, APPEND, MULTI_SET, COMPARE_SET creating the key (case 15),
     * QUEUE_PUSH (one waiter). */
    tc_wait1(&w, "/g");
    CT_ASSERT_EQ(tc_add(&x, "/g", 1), 1);
    expect_hex(&w, "00");
    tc_wait1(&w, "/h");
    ct_store_req_t ap = {.op = CT_STORE_OP_APPEND, .key = B("/h"), .value = B("x")};
    CT_ASSERT_OK(tc_req(&x, &ap));
    expect_hex(&w, "00");
    tc_wait1(&w, "/i");
    ct_store_bytes_t mk[1] = {B("/i")}, mv[1] = {B("v")};
    ct_store_req_t ms = {
        .op = CT_STORE_OP_MULTI_SET, .key_array = mk, .value_array = mv, .nkeys = 1};
    CT_ASSERT_OK(tc_req(&x, &ms));
    expect_hex(&w, "00");
    tc_wait1(&w, "/z");
    ct_store_req_t cas = {
        .op = CT_STORE_OP_COMPARE_SET, .key = B("/z"), .value = B(""), .desired = B("v")};
    CT_ASSERT_OK(tc_req(&x, &cas));
    expect_bytes(&x, "v");
    expect_hex(&w, "00");
    /* A COMPARE_SET that changes nothing wakes nobody. */
    tc_wait1(&w, "/y");
    cas.key = B("/y");
    cas.value = B("a");
    CT_ASSERT_OK(tc_req(&x, &cas));
    expect_bytes(&x, "a");
    expect_nothing(&w);
    ct_store_req_t cancel = {.op = CT_STORE_OP_CANCEL_WAIT};
    CT_ASSERT_OK(tc_req(&w, &cancel));
    expect_hex(&w, "01");
    tc_t w2 = tc_open(s, CT_STORE_V2);
    tc_wait1(&w, "/q");
    tc_wait1(&w2, "/q");
    ct_store_req_t qp = {.op = CT_STORE_OP_QUEUE_PUSH, .key = B("/q"), .value = B("1")};
    CT_ASSERT_OK(tc_req(&x, &qp));
    expect_hex(&w, "00"); /* the first waiter only */
    expect_nothing(&w2);
    CT_ASSERT_OK(tc_req(&x, &qp));
    expect_hex(&w2, "00");
    /* Pipelined WAITs are answered separately, each when its own key exists. */
    tc_wait1(&w, "/p1");
    tc_wait1(&w, "/p2");
    tc_set(&x, "/p2", "1");
    expect_hex(&w, "00");
    tc_set(&x, "/p1", "1");
    expect_hex(&w, "00");
    /* CANCEL_WAIT drops every wait of the connection and always answers 01. */
    tc_wait1(&w, "/never1");
    tc_wait1(&w, "/never2");
    CT_ASSERT_OK(tc_req(&w, &cancel));
    expect_hex(&w, "01");
    tc_set(&x, "/never1", "1");
    tc_set(&x, "/never2", "1");
    expect_nothing(&w);
    CT_ASSERT_OK(tc_req(&w, &cancel));
    expect_hex(&w, "01");
    /* The race of §2.4: the key lands just before the cancel: 00 then 01. */
    tc_wait1(&w, "/race");
    tc_set(&x, "/race", "1");
    CT_ASSERT_OK(tc_req(&w, &cancel));
    expect_hex(&w, "00 01");
    ctrun_store_stats(s, &st);
    CT_ASSERT_EQ(st.pending_waits, 0);
    CT_ASSERT_EQ(st.wait_registrations, 0);
    tc_free(&w);
    tc_free(&w2);
    tc_free(&x);
    store_free(s);
}

static void test_barrier(void)
{
    ctrun_store_t *s = store_new(NULL);
    tc_t a = tc_open(s, CT_STORE_V2), b = tc_open(s, CT_STORE_V2), c = tc_open(s, CT_STORE_V2);
    tc_t plain = tc_open(s, CT_STORE_V2);
    tc_wait1(&plain, "/bar");
    ct_store_req_t r = {.op = CT_STORE_OP_BARRIER, .key = B("/bar"), .num = 3};
    CT_ASSERT_OK(tc_req(&a, &r));
    expect_nothing(&a);
    expect_hex(&plain, "00"); /* the key now exists */
    CT_ASSERT_OK(tc_req(&b, &r));
    expect_nothing(&a);
    expect_nothing(&b);
    CT_ASSERT_OK(tc_req(&c, &r));
    expect_hex(&c, "00");
    expect_hex(&a, "00");
    expect_hex(&b, "00");
    ct_store_bytes_t v;
    CT_ASSERT_OK(ctrun_store_get(s, "/bar", &v));
    CT_ASSERT(v.len == 1 && v.data[0] == '3');
    /* A late arrival passes at once; a barrier on a non-number closes. */
    CT_ASSERT_OK(tc_req(&a, &r));
    expect_hex(&a, "00");
    tc_set(&a, "/junk", "x");
    r.key = B("/junk");
    CT_ASSERT_ERR(tc_req(&b, &r), CT_EPEER);
    tc_free(&a);
    tc_free(&b);
    tc_free(&c);
    tc_free(&plain);
    store_free(s);
}

/* Case 30 (server side): a waiter that disconnects is forgotten; a later set is harmless. */
static void test_disconnect_mid_wait(void)
{
    ctrun_store_t *s = store_new(NULL);
    tc_t w = tc_open(s, CT_STORE_V1), x = tc_open(s, CT_STORE_V1);
    const char *keys[3] = {"/k1", "/k2", "/k3"};
    tc_keys(&w, CT_STORE_OP_WAIT, keys, 3);
    tc_wait1(&w, "/k4");
    ctrun_store_stats_t st;
    ctrun_store_stats(s, &st);
    CT_ASSERT_EQ(st.pending_waits, 2);
    CT_ASSERT_EQ(st.wait_registrations, 4);
    check(s);
    tc_free(&w);
    ctrun_store_stats(s, &st);
    CT_ASSERT_EQ(st.pending_waits, 0);
    CT_ASSERT_EQ(st.wait_registrations, 0);
    check(s);
    tc_set(&x, "/k1", "1");
    tc_set(&x, "/k4", "1");
    CT_ASSERT_EQ(tc_add(&x, "/n", 1), 1);
    tc_free(&x);
    store_free(s);
}

/* Cases 20-22 at the parser: each offender is closed, others keep being answered. */
static void test_hostile_input(void)
{
    ctrun_store_t *s = store_new(NULL);
    tc_t good = tc_open(s, CT_STORE_V1);
    uint8_t b[64];
    size_t n;
    struct {
        const char *what;
        const char *bytes; /* hex, or NULL for text */
        const char *text;
    } cases[] = {
        {"HTTP probe", NULL, "GET / HTTP/1.0\r\n\r\n"},
        {"VALIDATE with a wrong magic", "00 cef7853d 0d01020304", NULL},
        {"2^40 key length", "00 0000000000010000", NULL},
        {"64 MiB value", "00 0100000000000000 6b 0000000400000000", NULL},
        {"unknown v1 type", "09", NULL},
        {"unknown v2 type", "00 cef7853c 13", NULL},
        {"too many keys", "05 0100020000000000", NULL},
        {"auth hello without a token", "a5 43545341 01", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tc_t bad = tc_open(s, CT_STORE_V1);
        if (cases[i].bytes != NULL)
            n = hex(cases[i].bytes, b, sizeof b);
        else
            memcpy(b, cases[i].text, n = strlen(cases[i].text));
        int rc = ctrun_store__test_conn_feed(bad.c, b, n);
        CT_ASSERT_MSG(rc == CT_EPEER, "%s was not closed", cases[i].what);
        tc_free(&bad);
        CT_ASSERT_EQ(tc_add(&good, "/alive", 1), (int64_t)i + 1);
    }
    /* Case 22: half a request stays pending without blocking anyone. */
    tc_t half = tc_open(s, CT_STORE_V1);
    n = hex("00 0a00000000000000 2f6b6579", b, sizeof b);
    CT_ASSERT_OK(ctrun_store__test_conn_feed(half.c, b, n));
    expect_nothing(&half);
    CT_ASSERT_EQ(tc_add(&good, "/alive", 1), 9);
    ctrun_store_stats_t st;
    ctrun_store_stats(s, &st);
    CT_ASSERT(st.buffered_bytes > 0);
    CT_ASSERT_EQ(st.dropped, 8);
    tc_free(&half);
    ctrun_store_stats(s, &st);
    CT_ASSERT_EQ(st.buffered_bytes, 0);
    tc_free(&good);
    store_free(s);
}

/* The memory cap refuses writes and waits beyond it, closing the writer only. Buffered input
 * counts too: a 300 KiB request occupies up to 512 KiB of input buffer while it arrives. */
static void test_memory_cap(void)
{
    ctrun_store_opts_t o = {.max_bytes = 2u << 20};
    ctrun_store_t *s = store_new(&o);
    tc_t t = tc_open(s, CT_STORE_V2), other = tc_open(s, CT_STORE_V2);
    static char big[300 * 1024];
    memset(big, 'x', sizeof big - 1);
    int i;
    for (i = 0; i < 20; i++) {
        char k[16];
        snprintf(k, sizeof k, "/b%d", i);
        ct_store_req_t r = {.op = CT_STORE_OP_SET, .key = B(k), .value = B(big)};
        if (tc_req(&t, &r) != 0)
            break;
    }
    CT_ASSERT(i >= 3 && i <= 6);
    CT_ASSERT_EQ(ctrun_store_num_keys(s), i);
    ctrun_store_stats_t st;
    ctrun_store_stats(s, &st);
    CT_ASSERT(st.stored_bytes > (uint64_t)i * sizeof big && st.stored_bytes < (2u << 20));
    CT_ASSERT_EQ(st.buffered_bytes, 0); /* the closed writer's buffer is gone */
    ct_errbuf_t eb = {{0}};
    char *huge = calloc(1, 1u << 20);
    CT_ASSERT_ERR(ctrun_store_set(s, "/b4", huge, 1u << 20, &eb), CT_ELIMIT);
    CT_ASSERT_STR_CONTAINS(eb.msg, "memory cap");
    free(huge);
    /* Waiting on many fresh keys costs memory too. */
    tc_t w = tc_open(s, CT_STORE_V2);
    static char keybuf[8000];
    memset(keybuf, 'k', sizeof keybuf - 1);
    int closed_at = -1;
    for (int j = 0; j < 400 && closed_at < 0; j++) {
        keybuf[0] = (char)('A' + j % 26);
        keybuf[1] = (char)('A' + j / 26);
        const char *k = keybuf;
        ct_store_bytes_t kb = B(k);
        ct_store_req_t wr = {.op = CT_STORE_OP_WAIT, .key_array = &kb, .nkeys = 1};
        uint8_t *wb = malloc(9000);
        ssize_t wn = ct_store_encode_request(CT_STORE_V2, &wr, wb, 9000, NULL);
        if (ctrun_store__test_conn_feed(w.c, wb, (size_t)wn) != 0)
            closed_at = j;
        free(wb);
    }
    CT_ASSERT(closed_at > 0);
    check(s);
    tc_free(&w);
    CT_ASSERT_EQ(tc_add(&other, "/n", 1), 1);
    tc_free(&t);
    tc_free(&other);
    store_free(s);
}

/* Feeds the first `sent` bytes of a v2 SET of an 8 MiB value of 'h' bytes. */
static void feed_half_set(tc_t *t, const char *key, size_t sent)
{
    size_t vlen = 8u << 20;
    ct_store_req_t r = {.op = CT_STORE_OP_SET, .key = B(key)};
    r.value.len = vlen;
    uint8_t *v = malloc(vlen);
    memset(v, 'h', vlen);
    r.value.data = v;
    ssize_t n = ct_store_encode_request(t->d, &r, NULL, 0, NULL);
    uint8_t *buf = malloc((size_t)n);
    CT_ASSERT_EQ(ct_store_encode_request(t->d, &r, buf, (size_t)n, NULL), n);
    CT_ASSERT((ssize_t)sent < n);
    CT_ASSERT_OK(ctrun_store__test_conn_feed(t->c, buf, sent));
    free(buf);
    free(v);
}

/*
 * The memory cap charges the connection that holds the memory. Four connections each send
 * half of an 8 MiB SET and stop: their input buffers fill the cap. A well-behaved client's
 * 1-byte SET is still accepted; one of the half-sent connections (the one holding the most
 * input) is closed instead, with one log line, and the others keep going: one finishes its
 * SET. A fifth half-sent SET that would take the store over the cap is refused itself.
 */
static void test_memory_cap_charges_the_holder(void)
{
    ctrun_store_opts_t o = {.max_bytes = 32u << 20};
    ctrun_store_t *s = store_new(&o);
    tc_t half[4], good = tc_open(s, CT_STORE_V2);
    for (int i = 0; i < 4; i++) {
        char k[16];
        snprintf(k, sizeof k, "/h%d", i);
        half[i] = tc_open(s, CT_STORE_V2);
        feed_half_set(&half[i], k, (5u << 20) + 100u * (unsigned)i);
    }
    ctrun_store_stats_t st;
    ctrun_store_stats(s, &st);
    CT_ASSERT_EQ(st.buffered_bytes, 32u << 20); /* 4 x 8 MiB of input buffer: the whole cap */
    tc_set(&good, "/one", "1");
    tc_simple(&good, CT_STORE_OP_GET, "/one");
    expect_bytes(&good, "1");
    CT_ASSERT(!ctrun_store__test_conn_closed(good.c));
    int closed = 0;
    for (int i = 0; i < 4; i++)
        closed += ctrun_store__test_conn_closed(half[i].c);
    CT_ASSERT_EQ(closed, 1);
    ctrun_store_stats(s, &st);
    CT_ASSERT_EQ(st.dropped, 1);
    CT_ASSERT_EQ(st.buffered_bytes, 24u << 20);
    check(s);
    /* A fifth half-sent SET does not fit: it is the one refused. */
    tc_t fifth = tc_open(s, CT_STORE_V2);
    size_t vlen = 8u << 20;
    ct_store_req_t r = {.op = CT_STORE_OP_SET, .key = B("/h5")};
    uint8_t *v = malloc(vlen);
    memset(v, 'h', vlen);
    r.value = (ct_store_bytes_t){v, vlen};
    ssize_t n = ct_store_encode_request(CT_STORE_V2, &r, NULL, 0, NULL);
    uint8_t *buf = malloc((size_t)n);
    CT_ASSERT_EQ(ct_store_encode_request(CT_STORE_V2, &r, buf, (size_t)n, NULL), n);
    CT_ASSERT_ERR(ctrun_store__test_conn_feed(fifth.c, buf, 6u << 20), CT_EPEER);
    tc_set(&good, "/two", "2");
    tc_simple(&good, CT_STORE_OP_GET, "/two");
    expect_bytes(&good, "2");
    /* A survivor sends the rest of its SET, which is stored. */
    int survivor = -1;
    for (int i = 0; i < 4 && survivor < 0; i++)
        if (!ctrun_store__test_conn_closed(half[i].c))
            survivor = i;
    char k[16];
    snprintf(k, sizeof k, "/h%d", survivor);
    ct_store_req_t full = {.op = CT_STORE_OP_SET, .key = B(k), .value = {v, vlen}};
    n = ct_store_encode_request(CT_STORE_V2, &full, buf, (size_t)n, NULL);
    size_t sent = (5u << 20) + 100u * (unsigned)survivor;
    CT_ASSERT_OK(ctrun_store__test_conn_feed(half[survivor].c, buf + sent, (size_t)n - sent));
    ct_store_bytes_t got;
    CT_ASSERT_OK(ctrun_store_get(s, k, &got));
    CT_ASSERT_EQ(got.len, vlen);
    check(s);
    free(buf);
    free(v);
    tc_free(&fifth);
    for (int i = 0; i < 4; i++)
        tc_free(&half[i]);
    tc_free(&good);
    store_free(s);
}

/* Feeds n pipelined GETs of key at once. */
static void feed_gets(tc_t *t, const char *key, int n)
{
    uint8_t req[64];
    ct_store_req_t g = {.op = CT_STORE_OP_GET, .key = B(key)};
    size_t one = (size_t)ct_store_encode_request(t->d, &g, req, sizeof req, NULL);
    uint8_t *many = malloc(one * (size_t)n);
    for (int i = 0; i < n; i++)
        memcpy(many + (size_t)i * one, req, one);
    CT_ASSERT_OK(ctrun_store__test_conn_feed(t->c, many, one * (size_t)n));
    free(many);
}

/* Reads n GET replies of a value of vlen bytes, all of byte fill, `chunk` bytes per read; fails
 * with how many arrived when the replies stop coming. */
static void expect_big_replies(tc_t *t, int n, size_t vlen, char fill, size_t chunk)
{
    size_t want = 8 + vlen;
    uint8_t *reply = malloc(want);
    for (int i = 0; i < n; i++) {
        size_t got = 0;
        while (got < want) {
            size_t k = tc_out(t, reply + got, want - got < chunk ? want - got : chunk);
            CT_ASSERT_MSG(k > 0, "replies stopped after %d of %d (%zu of %zu bytes of the next)", i,
                          n, got, want);
            got += k;
        }
        CT_ASSERT_EQ(ct_store_get_u64(reply), vlen);
        for (size_t j = 0; j < vlen; j += 4093)
            CT_ASSERT_MSG(reply[8 + j] == (uint8_t)fill, "reply %d byte %zu", i, j);
        CT_ASSERT(reply[8 + vlen - 1] == (uint8_t)fill);
    }
    free(reply);
    uint8_t extra[16];
    CT_ASSERT_EQ(tc_out(t, extra, sizeof extra), 0);
}

/* A connection that does not read its replies stops being read: with nothing taken by its
 * socket (room 0) its replies pile up to the high water mark (4 MiB) and parsing stops there,
 * not after 20 MiB; it resumes as the peer reads, and every reply arrives. */
static void test_backpressure(void)
{
    ctrun_store_t *s = store_new(NULL);
    tc_t t = tc_open(s, CT_STORE_V1);
    size_t vlen = 1u << 20;
    char *v = malloc(vlen);
    memset(v, 'v', vlen);
    CT_ASSERT_OK(ctrun_store_set(s, "/big", v, vlen, NULL));
    feed_gets(&t, "/big", 20);
    ctrun_store_stats_t st;
    ctrun_store_stats(s, &st);
    CT_ASSERT_MSG(st.requests >= 4 && st.requests <= 6, "%llu GETs handled before pausing",
                  (unsigned long long)st.requests);
    CT_ASSERT_GE(st.buffered_bytes, 14 * 15); /* the rest waits, unparsed */
    expect_big_replies(&t, 20, vlen, 'v', 64u << 20);
    check(s);
    free(v);
    tc_free(&t);
    store_free(s);
}

/*
 * Pipelined GETs of 1, 4, 5 and 8 MiB values through sockets of every size: one that takes
 * nothing at once (each write completes as the peer reads), a small one (writes partly at once,
 * then in flight), and ones that take a whole reply or everything at once, which is how a local
 * TCP connection with grown buffers behaves. A connection paused for its pending output must
 * resume when a flush drains it at once, with no write completion to come: otherwise it is
 * never read again (the replies stop, the client times out, and its closing is never seen).
 */
static void test_large_replies_any_socket(void)
{
    static const size_t mib[] = {1, 4, 5, 8};
    static const size_t rooms[] = {0, 64u << 10, 6u << 20, 9u << 20, (size_t)1 << 40};
    ctrun_store_t *s = store_new(NULL);
    char *v = malloc(8u << 20);
    for (size_t i = 0; i < sizeof mib / sizeof mib[0]; i++) {
        size_t vlen = mib[i] << 20;
        char fill = (char)('a' + i);
        memset(v, fill, vlen);
        CT_ASSERT_OK(ctrun_store_set(s, "/big", v, vlen, NULL));
        for (size_t r = 0; r < sizeof rooms / sizeof rooms[0]; r++) {
            for (int d = 0; d < 2; d++) {
                tc_t t = tc_open(s, d == 0 ? CT_STORE_V1 : CT_STORE_V2);
                ctrun_store__test_conn_set_room(t.c, rooms[r]);
                /* PyTorch's get: WAIT then GET, one at a time, three times. */
                for (int k = 0; k < 3; k++) {
                    tc_wait1(&t, "/big");
                    expect_hex(&t, "00");
                    feed_gets(&t, "/big", 1);
                    expect_big_replies(&t, 1, vlen, fill, 1u << 20);
                }
                /* Then 12 pipelined at once, read in 1 MiB pieces. */
                feed_gets(&t, "/big", 12);
                expect_big_replies(&t, 12, vlen, fill, 1u << 20);
                ctrun_store_stats_t st;
                ctrun_store_stats(s, &st);
                CT_ASSERT_EQ(st.buffered_bytes, 0);
                CT_ASSERT(!ctrun_store__test_conn_closed(t.c));
                check(s);
                tc_free(&t);
            }
        }
    }
    free(v);
    store_free(s);
}

/* ---- a randomized run of the pause/resume path ------------------------------------------ */

typedef struct fz_buf {
    uint8_t *p;
    size_t len, cap;
} fz_buf_t;

static uint8_t *fz_grow(fz_buf_t *b, size_t n)
{
    if (b->len + n > b->cap) {
        size_t ncap = b->cap ? b->cap : 4096;
        while (ncap < b->len + n)
            ncap *= 2;
        b->p = realloc(b->p, ncap);
        CT_ASSERT(b->p != NULL);
        b->cap = ncap;
    }
    uint8_t *p = b->p + b->len;
    b->len += n;
    return p;
}

static uint64_t fz_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

#define FZ_KEYS 4

typedef struct fz_conn {
    tc_t t;
    int id;
    fz_buf_t pending_in; /* encoded requests not yet fed */
    fz_buf_t expect;     /* replies not yet read, in order */
    size_t vlen[FZ_KEYS];
    uint8_t vfill[FZ_KEYS];
    bool has[FZ_KEYS];
    int64_t counter;
    size_t fed, read;
} fz_conn_t;

/* Appends one random request of this connection's own keys to pending_in and its reply to
 * expect (keys are private to a connection, so its replies do not depend on the others). */
static void fz_request(fz_conn_t *fc, uint64_t *rng, const uint8_t *bigbuf)
{
    static const size_t sizes[] = {0, 1, 7, 1000, 65536, 1u << 20, (4u << 20) + 3, 5u << 20};
    char key[32], ckey[32];
    int k = (int)(fz_next(rng) % FZ_KEYS);
    snprintf(key, sizeof key, "/c%d/k%d", fc->id, k);
    snprintf(ckey, sizeof ckey, "/c%d/n", fc->id);
    bool v2 = fc->t.d == CT_STORE_V2;
    ct_store_req_t r = {0};
    ct_store_bytes_t keys[2];
    uint8_t *o;
    uint64_t pick = fz_next(rng) % (v2 ? 9 : 6);
    switch (pick) {
    case 0: /* SET, or APPEND (v2); no reply */
    case 6: {
        /* Mostly small values; a large one now and then. */
        uint64_t w = fz_next(rng) % 100;
        size_t sz = sizes[w < 70 ? w % 5 : 5 + w % 3];
        uint8_t fill = (uint8_t)('A' + fz_next(rng) % 26);
        bool append = pick == 6 && v2 && fc->has[k];
        if (append) {
            fill = fc->vfill[k]; /* a value stays one letter throughout */
            if (fc->vlen[k] + sz > (8u << 20))
                sz = 0;
        }
        /* bigbuf holds 26 runs of one letter each, 5 MiB apart. */
        r = (ct_store_req_t){.op = append ? CT_STORE_OP_APPEND : CT_STORE_OP_SET,
                             .key = B(key),
                             .value = {bigbuf + (size_t)(fill - 'A') * (5u << 20), sz}};
        fc->vlen[k] = (append ? fc->vlen[k] : 0) + sz;
        fc->vfill[k] = fill;
        fc->has[k] = true;
        break;
    }
    case 1: /* GET */
        r = (ct_store_req_t){.op = CT_STORE_OP_GET, .key = B(key)};
        o = fz_grow(&fc->expect, 8 + (fc->has[k] ? fc->vlen[k] : 0));
        ct_store_put_u64(o, fc->has[k] ? fc->vlen[k] : 0);
        if (fc->has[k])
            memset(o + 8, fc->vfill[k], fc->vlen[k]);
        break;
    case 2: { /* ADD */
        int64_t d = (int64_t)(fz_next(rng) % 1000) - 500;
        r = (ct_store_req_t){.op = CT_STORE_OP_ADD, .key = B(ckey), .num = d};
        fc->counter += d;
        ct_store_put_u64(fz_grow(&fc->expect, 8), (uint64_t)fc->counter);
        break;
    }
    case 3: /* CHECK */
        keys[0] = B(key);
        r = (ct_store_req_t){.op = CT_STORE_OP_CHECK, .key_array = keys, .nkeys = 1};
        *fz_grow(&fc->expect, 1) = fc->has[k] ? CT_STORE_CHECK_READY : CT_STORE_CHECK_NOT_READY;
        break;
    case 4: /* WAIT of an existing key (answered at once), else DELETE_KEY */
        if (fc->has[k]) {
            keys[0] = B(key);
            r = (ct_store_req_t){.op = CT_STORE_OP_WAIT, .key_array = keys, .nkeys = 1};
            *fz_grow(&fc->expect, 1) = CT_STORE_WAIT_STOP;
            break;
        }
        /* fall through */
    case 5:
        r = (ct_store_req_t){.op = CT_STORE_OP_DELETE_KEY, .key = B(key)};
        ct_store_put_u64(fz_grow(&fc->expect, 8), fc->has[k] ? 1 : 0);
        fc->has[k] = false;
        fc->vlen[k] = 0;
        break;
    case 7: { /* PING */
        uint32_t nonce = (uint32_t)fz_next(rng);
        r = (ct_store_req_t){.op = CT_STORE_OP_PING, .num32 = nonce};
        ct_store_put_u32(fz_grow(&fc->expect, 4), nonce);
        break;
    }
    case 8: { /* MULTI_GET of two keys */
        int k2 = (k + 1) % FZ_KEYS;
        char key2[32];
        snprintf(key2, sizeof key2, "/c%d/k%d", fc->id, k2);
        keys[0] = B(key);
        keys[1] = B(key2);
        /* The reply is built before the keys' buffers go out of scope. */
        r = (ct_store_req_t){.op = CT_STORE_OP_MULTI_GET, .key_array = keys, .nkeys = 2};
        int ks[2] = {k, k2};
        for (int i = 0; i < 2; i++) {
            size_t n = fc->has[ks[i]] ? fc->vlen[ks[i]] : 0;
            o = fz_grow(&fc->expect, 8 + n);
            ct_store_put_u64(o, n);
            if (n > 0)
                memset(o + 8, fc->vfill[ks[i]], n);
        }
        ssize_t n = ct_store_encode_request(fc->t.d, &r, NULL, 0, NULL);
        CT_ASSERT(n > 0);
        CT_ASSERT_EQ(ct_store_encode_request(fc->t.d, &r, fz_grow(&fc->pending_in, (size_t)n),
                                             (size_t)n, NULL),
                     n);
        return;
    }
    }
    ssize_t n = ct_store_encode_request(fc->t.d, &r, NULL, 0, NULL);
    CT_ASSERT(n > 0);
    CT_ASSERT_EQ(
        ct_store_encode_request(fc->t.d, &r, fz_grow(&fc->pending_in, (size_t)n), (size_t)n, NULL),
        n);
}

/* Reads up to max bytes and compares them with the expected stream. */
static size_t fz_read(fz_conn_t *fc, size_t max, uint8_t *scratch, uint64_t seed)
{
    size_t n = tc_out(&fc->t, scratch, max);
    CT_ASSERT_MSG(n <= fc->expect.len - fc->read, "seed %llu conn %d: %zu bytes more than expected",
                  (unsigned long long)seed, fc->id, n - (fc->expect.len - fc->read));
    if (n > 0 && memcmp(scratch, fc->expect.p + fc->read, n) != 0) {
        size_t at = 0;
        while (scratch[at] == fc->expect.p[fc->read + at])
            at++;
        CT_ASSERT_MSG(0, "seed %llu conn %d: reply byte %zu differs", (unsigned long long)seed,
                      fc->id, fc->read + at);
    }
    fc->read += n;
    /* Drop what was compared once it is large, to bound memory. */
    if (fc->read > (32u << 20)) {
        memmove(fc->expect.p, fc->expect.p + fc->read, fc->expect.len - fc->read);
        fc->expect.len -= fc->read;
        fc->read = 0;
    }
    return n;
}

/*
 * Randomized: three connections (v1 and v2) pipeline random requests (values from empty to
 * 5 MiB, so replies cross the 4 MiB high water mark), fed in pieces of random size that split
 * requests anywhere, while the peers read random amounts at random times through sockets
 * whose size changes at random (taking nothing, a little, or everything at once). Every reply
 * must arrive, byte for byte and in order, and the store's indexes and counters must recount
 * the same after every step. CT_STORE_FUZZ_SEEDS sets the number of seeds (default 24).
 */
static void test_pause_resume_fuzz(void)
{
    static const size_t rooms[] = {0, 1, 4096, 300u << 10, 6u << 20, (size_t)1 << 40};
    const char *env = getenv("CT_STORE_FUZZ_SEEDS");
    int nseeds = env != NULL ? atoi(env) : 24;
    uint8_t *bigbuf = malloc((size_t)26 * (5u << 20));
    for (int i = 0; i < 26; i++)
        memset(bigbuf + (size_t)i * (5u << 20), 'A' + i, 5u << 20);
    uint8_t *scratch = malloc(16u << 20);
    for (int seed = 1; seed <= nseeds; seed++) {
        uint64_t rng = 0x9E3779B97F4A7C15ULL * (uint64_t)seed;
        ctrun_store_t *s = store_new(NULL);
        fz_conn_t fc[3];
        memset(fc, 0, sizeof fc);
        for (int i = 0; i < 3; i++) {
            fc[i].id = i;
            fc[i].t = tc_open(s, (fz_next(&rng) & 1) ? CT_STORE_V2 : CT_STORE_V1);
            ctrun_store__test_conn_set_room(fc[i].t.c, rooms[fz_next(&rng) % 6]);
        }
        for (int step = 0; step < 400; step++) {
            fz_conn_t *f = &fc[fz_next(&rng) % 3];
            uint64_t what = fz_next(&rng) % 100;
            if (what < 35) {
                int nreq = 1 + (int)(fz_next(&rng) % 6);
                for (int i = 0; i < nreq; i++)
                    fz_request(f, &rng, bigbuf);
            } else if (what < 60) {
                size_t left = f->pending_in.len - f->fed;
                if (left > 0) {
                    size_t n = fz_next(&rng) & 1 ? left : 1 + fz_next(&rng) % left;
                    CT_ASSERT_OK(ctrun_store__test_conn_feed(f->t.c, f->pending_in.p + f->fed, n));
                    f->fed += n;
                    if (f->fed == f->pending_in.len)
                        f->fed = f->pending_in.len = 0;
                }
            } else if (what < 92) {
                /* A slow reader: a few bytes, a piece, or all there is. */
                uint64_t how = fz_next(&rng) % 3;
                size_t max = how == 0   ? 1 + fz_next(&rng) % 64
                             : how == 1 ? 1 + fz_next(&rng) % (2u << 20)
                                        : 16u << 20;
                fz_read(f, max, scratch, (uint64_t)seed);
            } else {
                ctrun_store__test_conn_set_room(f->t.c, rooms[fz_next(&rng) % 6]);
            }
            CT_ASSERT_MSG(!ctrun_store__test_conn_closed(f->t.c), "seed %d step %d: closed", seed,
                          step);
            ct_errbuf_t eb = {{0}};
            int rc = ctrun_store__test_check(s, &eb);
            CT_ASSERT_MSG(rc == 0, "seed %d step %d: %s", seed, step, eb.msg);
        }
        /* Everything left is fed, and every reply must come. */
        for (int i = 0; i < 3; i++)
            if (fc[i].pending_in.len > fc[i].fed)
                CT_ASSERT_OK(ctrun_store__test_conn_feed(fc[i].t.c, fc[i].pending_in.p + fc[i].fed,
                                                         fc[i].pending_in.len - fc[i].fed));
        for (int i = 0; i < 3; i++) {
            fz_conn_t *f = &fc[i];
            while (fz_read(f, 16u << 20, scratch, (uint64_t)seed) > 0) {
            }
            CT_ASSERT_MSG(f->read == f->expect.len,
                          "seed %d conn %d: replies stopped, %zu bytes missing", seed, i,
                          f->expect.len - f->read);
        }
        ctrun_store_stats_t st;
        ctrun_store_stats(s, &st);
        CT_ASSERT_EQ(st.buffered_bytes, 0);
        for (int i = 0; i < 3; i++) {
            free(fc[i].pending_in.p);
            free(fc[i].expect.p);
            tc_free(&fc[i].t);
        }
        store_free(s);
    }
    free(scratch);
    free(bigbuf);
}

/* v1 WATCH_KEY: UPDATED/CREATED/DELETED events with old and new values; a watcher that never
 * reads is closed once its pushed bytes pile up beyond the cap. */
static void test_watch_key_v1(void)
{
    ct_store_limits_t lim = ct_store_default_limits;
    lim.max_message_len = 1u << 20;
    lim.max_value_len = 256u << 10;
    ctrun_store_opts_t o = {.limits = &lim};
    ctrun_store_t *s = store_new(&o);
    tc_t w = tc_open(s, CT_STORE_V1), x = tc_open(s, CT_STORE_V1);
    tc_simple(&w, CT_STORE_OP_WATCH_KEY, "/w");
    expect_hex(&w, "03");
    tc_set(&x, "/w", "1");
    expect_hex(&w, "01 0200000000000000 2f77 0000000000000000 0100000000000000 31");
    tc_set(&x, "/w", "2");
    expect_hex(&w, "00 0200000000000000 2f77 0100000000000000 31 0100000000000000 32");
    tc_simple(&x, CT_STORE_OP_DELETE_KEY, "/w");
    expect_u64(&x, 1);
    expect_hex(&w, "02 0200000000000000 2f77 0100000000000000 32 0000000000000000");
    char *v = malloc(lim.max_value_len + 1);
    memset(v, 'x', lim.max_value_len);
    v[lim.max_value_len] = '\0';
    int i;
    for (i = 0; i < 40 && !ctrun_store__test_conn_closed(w.c); i++)
        CT_ASSERT_OK(ctrun_store_set(s, "/w", v, lim.max_value_len, NULL));
    CT_ASSERT(ctrun_store__test_conn_closed(w.c));
    CT_ASSERT_MSG(i >= 9 && i <= 12, "closed after %d events", i); /* 5 MiB / (old + new) */
    free(v);
    check(s);
    tc_free(&w);
    tc_free(&x);
    store_free(s);
}

/* A waiter whose pushed output reaches the cap exactly when its key is written: the wake-up
 * walk dooms it (it is closed after the walk), and its second registration on the same key,
 * next in the walk, must stay valid until then (ASan would see the walk touch freed memory). */
static void test_doomed_during_wake(void)
{
    ct_store_limits_t lim = ct_store_default_limits;
    lim.max_message_len = 1u << 20;
    lim.max_value_len = 256u << 10;
    ctrun_store_opts_t o = {.limits = &lim};
    ctrun_store_t *s = store_new(&o);
    const size_t cap = lim.max_message_len + (4u << 20); /* CTRUN_STORE__HIGH_WATER */
    tc_t w = tc_open(s, CT_STORE_V1);
    tc_simple(&w, CT_STORE_OP_WATCH_KEY, "/w");
    expect_hex(&w, "03");
    tc_wait1(&w, "/k");
    tc_wait1(&w, "/k");
    char *v = malloc(lim.max_value_len);
    memset(v, 'x', lim.max_value_len);
    size_t pending = 0, prev = 0;
    /* Events of 27 + old + new bytes pile up unread while the next one still fits. */
    while (pending + 27 + prev + lim.max_value_len <= cap) {
        CT_ASSERT_OK(ctrun_store_set(s, "/w", v, lim.max_value_len, NULL));
        pending += 27 + prev + lim.max_value_len;
        prev = lim.max_value_len;
    }
    /* Read just enough that one more event lands exactly on the cap. */
    size_t next = 27 + prev + lim.max_value_len;
    CT_ASSERT(pending <= cap && pending + next > cap);
    size_t k = pending + next - cap;
    uint8_t *sink = malloc(k);
    CT_ASSERT_EQ(tc_out(&w, sink, k), k);
    free(sink);
    CT_ASSERT_OK(ctrun_store_set(s, "/w", v, lim.max_value_len, NULL));
    CT_ASSERT(!ctrun_store__test_conn_closed(w.c));
    ctrun_store_stats_t st;
    ctrun_store_stats(s, &st);
    CT_ASSERT_EQ(st.wait_registrations, 2);
    CT_ASSERT_OK(ctrun_store_set(s, "/k", "1", 1, NULL)); /* the first wake-up exceeds the cap */
    CT_ASSERT(ctrun_store__test_conn_closed(w.c));
    ctrun_store_stats(s, &st);
    CT_ASSERT_EQ(st.wait_registrations, 0);
    CT_ASSERT_EQ(st.dropped, 1);
    check(s);
    free(v);
    tc_free(&w);
    store_free(s);
}

/* ---- in-process API -------------------------------------------------------------------- */

typedef struct seen {
    int n;
    ct_store_watch_kind_t kind[16];
    char key[16][32];
    char value[16][32];
    bool in_process[16];
    ct_store_op_t op[16];
} seen_t;

static void record(ctrun_store_t *s, const ctrun_store_event_t *ev, void *data)
{
    (void)s;
    seen_t *r = data;
    if (r->n >= 16)
        return;
    int i = r->n++;
    r->kind[i] = ev->kind;
    snprintf(r->key[i], sizeof r->key[i], "%.*s", (int)ev->key.len, (const char *)ev->key.data);
    snprintf(r->value[i], sizeof r->value[i], "%.*s", (int)ev->value.len,
             (const char *)ev->value.data);
    r->in_process[i] = ev->in_process;
    r->op[i] = ev->op;
}

static void test_in_process_api(void)
{
    ctrun_store_t *s = store_new(NULL);
    ct_errbuf_t eb = {{0}};
    ct_store_bytes_t v;
    CT_ASSERT_ERR(ctrun_store_get(s, "/x", &v), -ENOENT);
    CT_ASSERT_OK(ctrun_store_set(s, "/x", "abc", 3, &eb));
    CT_ASSERT_OK(ctrun_store_get(s, "/x", &v));
    CT_ASSERT(v.len == 3 && memcmp(v.data, "abc", 3) == 0);
    int64_t r = 0;
    CT_ASSERT_ERR(ctrun_store_add(s, "/x", 1, &r, &eb), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "not a number");
    CT_ASSERT_OK(ctrun_store_add(s, "/cnt", 41, &r, &eb));
    CT_ASSERT_OK(ctrun_store_add(s, "/cnt", 1, &r, &eb));
    CT_ASSERT_EQ(r, 42);
    CT_ASSERT_OK(ctrun_store_compare_set(s, "/cs", "", 0, "new", 3, &v, &eb));
    CT_ASSERT(v.len == 3 && memcmp(v.data, "new", 3) == 0);
    CT_ASSERT_OK(ctrun_store_compare_set(s, "/cs", "old", 3, "zzz", 3, &v, &eb));
    CT_ASSERT(v.len == 3 && memcmp(v.data, "new", 3) == 0);
    bool deleted = false;
    CT_ASSERT_OK(ctrun_store_delete(s, "/x", &deleted));
    CT_ASSERT(deleted);
    CT_ASSERT_OK(ctrun_store_delete(s, "/x", &deleted));
    CT_ASSERT(!deleted);
    CT_ASSERT_EQ(ctrun_store_num_keys(s), 2);
    /* Limits apply in-process too. */
    char key[9000];
    memset(key, 'k', sizeof key - 1);
    key[sizeof key - 1] = '\0';
    CT_ASSERT_ERR(ctrun_store_set(s, key, "v", 1, &eb), CT_ELIMIT);
    CT_ASSERT_ERR(ctrun_store_set(s, "/v", "v", (9u << 20), &eb), CT_ELIMIT);
    /* In-process writes wake network waiters. */
    tc_t w = tc_open(s, CT_STORE_V1);
    tc_wait1(&w, "/ctrun/go");
    expect_nothing(&w);
    CT_ASSERT_OK(ctrun_store_set(s, "/ctrun/go", "1", 1, &eb));
    expect_hex(&w, "00");
    tc_free(&w);
    store_free(s);
}

static ctrun_store_watch_t *self_removing;
static int self_count;
static void unwatch_self(ctrun_store_t *s, const ctrun_store_event_t *ev, void *data)
{
    (void)ev;
    (void)data;
    self_count++;
    ctrun_store_unwatch(s, self_removing);
}

/* A callback that writes and deletes while it is being told about a change. */
static void meddle(ctrun_store_t *s, const ctrun_store_event_t *ev, void *data)
{
    int *depth = data;
    if (ev->kind == CT_STORE_WATCH_DELETED || *depth > 3)
        return;
    (*depth)++;
    char k[64];
    snprintf(k, sizeof k, "%.*s", (int)ev->key.len, (const char *)ev->key.data);
    CT_ASSERT_OK(ctrun_store_delete(s, k, NULL));
    CT_ASSERT_OK(ctrun_store_set(s, "/meddle/echo", ev->value.data, ev->value.len, NULL));
}

static void test_watches(void)
{
    ctrun_store_t *s = store_new(NULL);
    seen_t exact = {0}, prefix = {0};
    ctrun_store_watch_t *we = NULL, *wp = NULL;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ctrun_store_watch(s, "/ctrun/fail", false, record, &exact, &we, &eb));
    CT_ASSERT_OK(ctrun_store_watch(s, "/ctrun/hb/", true, record, &prefix, &wp, &eb));
    tc_t t = tc_open(s, CT_STORE_V2);
    tc_set(&t, "/ctrun/fail", "rank 3");
    tc_set(&t, "/ctrun/failure", "not me");
    tc_set(&t, "/ctrun/hb/0", "1");
    CT_ASSERT_EQ(tc_add(&t, "/ctrun/hb/1", 5), 5);
    CT_ASSERT_OK(ctrun_store_set(s, "/ctrun/hb/0", "2", 1, &eb));
    tc_simple(&t, CT_STORE_OP_DELETE_KEY, "/ctrun/hb/0");
    expect_u64(&t, 1);
    CT_ASSERT_EQ(exact.n, 1);
    CT_ASSERT_STR_EQ(exact.key[0], "/ctrun/fail");
    CT_ASSERT_STR_EQ(exact.value[0], "rank 3");
    CT_ASSERT_EQ(exact.kind[0], CT_STORE_WATCH_CREATED);
    CT_ASSERT(!exact.in_process[0]);
    CT_ASSERT_EQ(exact.op[0], CT_STORE_OP_SET);
    CT_ASSERT_EQ(prefix.n, 4);
    CT_ASSERT_STR_EQ(prefix.key[1], "/ctrun/hb/1");
    CT_ASSERT_STR_EQ(prefix.value[1], "5");
    CT_ASSERT_EQ(prefix.op[1], CT_STORE_OP_ADD);
    CT_ASSERT_EQ(prefix.kind[2], CT_STORE_WATCH_UPDATED);
    CT_ASSERT(prefix.in_process[2]);
    CT_ASSERT_EQ(prefix.kind[3], CT_STORE_WATCH_DELETED);
    CT_ASSERT_STR_EQ(prefix.value[3], "");
    /* Unwatching from inside a callback, and a callback that changes the store. */
    CT_ASSERT_OK(ctrun_store_watch(s, "/self", false, unwatch_self, NULL, &self_removing, &eb));
    tc_set(&t, "/self", "1");
    tc_set(&t, "/self", "2");
    CT_ASSERT_EQ(self_count, 1);
    int depth = 0;
    CT_ASSERT_OK(ctrun_store_watch(s, "/meddle/", true, meddle, &depth, NULL, &eb));
    tc_set(&t, "/meddle/a", "hello");
    ct_store_bytes_t v;
    CT_ASSERT_ERR(ctrun_store_get(s, "/meddle/a", &v), -ENOENT);
    CT_ASSERT(depth >= 1);
    ctrun_store_unwatch(s, we);
    tc_set(&t, "/ctrun/fail", "again");
    CT_ASSERT_EQ(exact.n, 1);
    (void)wp; /* freed with the store */
    tc_free(&t);
    store_free(s);
}

static void test_wipes(void)
{
    ctrun_store_t *s = store_new(NULL);
    tc_t t = tc_open(s, CT_STORE_V2), w = tc_open(s, CT_STORE_V2);
    seen_t ev = {0};
    CT_ASSERT_OK(ctrun_store_watch(s, "/default_pg/", true, record, &ev, NULL, NULL));
    CT_ASSERT_OK(ctrun_store_set(s, "/ctrun/state", "1", 1, NULL));
    CT_ASSERT_OK(ctrun_store_set(s, "/ctrun/hb/0", "1", 1, NULL));
    CT_ASSERT_EQ(tc_add(&t, "init/", 1), 1);
    tc_set(&t, "/default_pg/0//cuda//0", "nccl-id");
    tc_set(&t, "/store_based_barrier_key:default_pg", "2");
    ct_store_req_t qp = {.op = CT_STORE_OP_QUEUE_PUSH, .key = B("/q"), .value = B("1")};
    CT_ASSERT_OK(tc_req(&t, &qp));
    tc_wait1(&w, "/next_attempt");
    CT_ASSERT_EQ(ctrun_store_num_keys(s), 5);
    CT_ASSERT_EQ(ctrun_store_foreach(s, "/ctrun/", NULL, NULL), 2);
    CT_ASSERT_EQ(ctrun_store_foreach(s, NULL, NULL, NULL), 5); /* no queues, no waited keys */
    const char *keep[] = {"/ctrun/"};
    size_t n = 0;
    CT_ASSERT_OK(ctrun_store_wipe_except(s, keep, 1, &n));
    CT_ASSERT_EQ(n, 3);
    CT_ASSERT_EQ(ctrun_store_num_keys(s), 2);
    ct_store_bytes_t v;
    CT_ASSERT_ERR(ctrun_store_get(s, "/default_pg/0//cuda//0", &v), -ENOENT);
    CT_ASSERT_ERR(ctrun_store_get(s, "init/", &v), -ENOENT);
    CT_ASSERT_OK(ctrun_store_get(s, "/ctrun/state", &v));
    tc_simple(&t, CT_STORE_OP_QUEUE_LEN, "/q");
    expect_u64(&t, 0);
    CT_ASSERT_EQ(ev.n, 2); /* created by the worker, deleted by the wipe */
    CT_ASSERT_EQ(ev.kind[0], CT_STORE_WATCH_CREATED);
    CT_ASSERT_EQ(ev.kind[1], CT_STORE_WATCH_DELETED);
    CT_ASSERT_STR_EQ(ev.key[1], "/default_pg/0//cuda//0");
    CT_ASSERT(ev.in_process[1]);
    /* A waiter survives the wipe and is woken by the next attempt. */
    expect_nothing(&w);
    tc_set(&t, "/next_attempt", "1");
    expect_hex(&w, "00");
    CT_ASSERT_OK(ctrun_store_wipe_prefix(s, "/ctrun/hb/", &n));
    CT_ASSERT_EQ(n, 1);
    CT_ASSERT_OK(ctrun_store_wipe_except(s, NULL, 0, &n)); /* keep nothing */
    CT_ASSERT_EQ(n, 2);
    CT_ASSERT_EQ(ctrun_store_num_keys(s), 0);
    tc_free(&t);
    tc_free(&w);
    store_free(s);
}

static void test_authentication(void)
{
    const char *token = "s3cret-token";
    ctrun_store_opts_t o = {.token = token};
    ctrun_store_t *s = store_new(&o);
    uint8_t cn[CT_STORE_AUTH_NONCE_LEN] = {1, 2, 3}, sn[CT_STORE_AUTH_NONCE_LEN];
    uint8_t msg[64], mac[CT_STORE_AUTH_MAC_LEN], want[CT_STORE_AUTH_MAC_LEN];
    for (int attempt = 0; attempt < 3; attempt++) {
        tc_t t = {.c = ctrun_store__test_conn_open(s), .d = CT_STORE_V2};
        if (attempt == 2) { /* no hello at all: a stock client is closed at its first byte */
            uint8_t v[5];
            hex("00 cef7853c", v, sizeof v);
            CT_ASSERT_ERR(ctrun_store__test_conn_feed(t.c, v, 5), CT_EPEER);
            tc_free(&t);
            continue;
        }
        size_t n = ct_store_encode_auth_hello(cn, msg);
        CT_ASSERT_OK(ctrun_store__test_conn_feed(t.c, msg, n));
        CT_ASSERT_EQ(tc_out(&t, msg, sizeof msg), CT_STORE_AUTH_HELLO_LEN);
        CT_ASSERT_EQ(ct_store_decode_auth_hello(msg, CT_STORE_AUTH_HELLO_LEN, sn, NULL),
                     CT_STORE_AUTH_HELLO_LEN);
        const char *use = attempt == 0 ? "wrong" : token;
        CT_ASSERT_OK(ct_store_auth_mac(use, strlen(use), false, cn, sn, mac, NULL));
        n = ct_store_encode_auth_mac(CT_STORE_AUTH_PROOF, mac, msg);
        if (attempt == 0) {
            CT_ASSERT_ERR(ctrun_store__test_conn_feed(t.c, msg, n), CT_EPEER);
            expect_nothing(&t);
            tc_free(&t);
            continue;
        }
        CT_ASSERT_OK(ctrun_store__test_conn_feed(t.c, msg, n));
        CT_ASSERT_EQ(tc_out(&t, msg, sizeof msg), CT_STORE_AUTH_PROOF_LEN);
        CT_ASSERT_EQ(msg[0], CT_STORE_AUTH_ACCEPT);
        CT_ASSERT_OK(ct_store_auth_mac(token, strlen(token), true, cn, sn, want, NULL));
        CT_ASSERT(ct_store_auth_mac_equal(msg + 1, want));
        uint8_t v[5];
        hex("00 cef7853c", v, sizeof v);
        CT_ASSERT_OK(ctrun_store__test_conn_feed(t.c, v, 5));
        CT_ASSERT_EQ(tc_add(&t, "/authed", 1), 1);
        tc_free(&t);
    }
    ctrun_store_stats_t st;
    ctrun_store_stats(s, &st);
    CT_ASSERT_EQ(st.dropped, 2);
    store_free(s);
}

int main(void)
{
    CT_ASSERT_OK(uv_loop_init(&loop));
    CT_RUN(test_capture_replay_v1);
    CT_RUN(test_v2_requests);
    CT_RUN(test_add_rules);
    CT_RUN(test_compare_set);
    CT_RUN(test_wait_semantics);
    CT_RUN(test_barrier);
    CT_RUN(test_disconnect_mid_wait);
    CT_RUN(test_hostile_input);
    CT_RUN(test_memory_cap);
    CT_RUN(test_memory_cap_charges_the_holder);
    CT_RUN(test_backpressure);
    CT_RUN(test_large_replies_any_socket);
    CT_RUN(test_pause_resume_fuzz);
    CT_RUN(test_watch_key_v1);
    CT_RUN(test_doomed_during_wake);
    CT_RUN(test_in_process_api);
    CT_RUN(test_watches);
    CT_RUN(test_wipes);
    CT_RUN(test_authentication);
    CT_ASSERT_EQ(uv_loop_close(&loop), 0);
    return 0;
}
