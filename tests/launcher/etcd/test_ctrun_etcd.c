/*
 * test_ctrun_etcd.c - the etcd v3 client (launcher/etcd/ctrun_etcd.c) against a real etcd
 * (etcd_cluster.h): put and range with keys and values holding every byte value; transactions
 * comparing mod_revision, create_revision and version, succeeding and failing; a lease kept by
 * keepalives, then deleting its key on expiry or revoke; a watch seeing puts and deletes in
 * order; failover past a member that refuses connections and past one that accepts and never
 * answers; the one-line error, within the request timeout, when no member answers; etcd's own
 * error messages and an HTTP server that is not etcd; a three-member cluster serving the client
 * after the member it was talking to is killed. Every callback must come from the loop, never
 * from inside the submitting call. Base64 and prefix ends are checked on their own first.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <uv.h>

#include "ct_test.h"
#include "ct_time.h"
#include "ctrun_etcd.h"
#include "etcd_cluster.h"
#include "foreign_peer.h"

#define KV_MAX  16
#define EV_MAX  16
#define VAL_MAX 512

typedef struct got_kv {
    uint8_t key[VAL_MAX], value[VAL_MAX];
    size_t key_len, value_len;
    int64_t create_revision, mod_revision, version, lease;
    bool deleted;
} got_kv_t;

/* What one request brought back. */
typedef struct got {
    bool done, in_submit;
    int rc;
    char error[1024], endpoint[64];
    bool ambiguous, succeeded, created;
    int64_t revision, deleted, lease_id, ttl;
    int nkvs, nevents, ncalls;
    got_kv_t kvs[KV_MAX], events[EV_MAX];
} got_t;

static void copy_kv(got_kv_t *d, const ctrun_etcd_kv_t *s)
{
    CT_ASSERT(s->key_len <= VAL_MAX && s->value_len <= VAL_MAX);
    memcpy(d->key, s->key, s->key_len);
    memcpy(d->value, s->value, s->value_len);
    d->key_len = s->key_len;
    d->value_len = s->value_len;
    d->create_revision = s->create_revision;
    d->mod_revision = s->mod_revision;
    d->version = s->version;
    d->lease = s->lease;
}

static void etcd_on_result(void *data, const ctrun_etcd_result_t *r)
{
    got_t *g = data;
    CT_ASSERT_MSG(!g->in_submit, "callback from inside the submitting call");
    g->ncalls++;
    g->done = true;
    g->rc = r->rc;
    snprintf(g->error, sizeof g->error, "%s", r->error);
    snprintf(g->endpoint, sizeof g->endpoint, "%s", r->endpoint ? r->endpoint : "");
    g->ambiguous = r->ambiguous;
    g->succeeded = r->succeeded;
    g->revision = r->revision;
    g->deleted = r->deleted;
    g->lease_id = r->lease_id;
    g->ttl = r->ttl;
    if (r->created)
        g->created = true;
    g->nkvs = 0;
    for (size_t i = 0; i < r->nkvs && i < KV_MAX; i++)
        copy_kv(&g->kvs[g->nkvs++], &r->kvs[i]);
    for (size_t i = 0; i < r->nevents && g->nevents < EV_MAX; i++) {
        copy_kv(&g->events[g->nevents], &r->events[i].kv);
        g->events[g->nevents++].deleted = r->events[i].deleted;
    }
}

static uv_loop_t loop;

static void etcd_on_wake(uv_timer_t *t)
{
    (void)t;
}

/* Runs the loop until *flag or timeout_ms. */
static void etcd_run_until(bool *flag, int64_t timeout_ms)
{
    int64_t deadline = ct_time_ms() + timeout_ms;
    uv_timer_t t; /* wakes the loop while nothing else happens */
    uv_timer_init(&loop, &t);
    while (!*flag && ct_time_ms() < deadline) {
        uv_timer_start(&t, etcd_on_wake, 20, 0);
        uv_run(&loop, UV_RUN_ONCE);
    }
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&loop, UV_RUN_NOWAIT);
    CT_ASSERT_MSG(*flag, "no result within %lld ms", (long long)timeout_ms);
}

/* Runs the loop until the watch has seen n events (10 s at most), or ended with an error. */
static void run_events(got_t *w, int n)
{
    int64_t deadline = ct_time_ms() + 10000;
    uv_timer_t t;
    uv_timer_init(&loop, &t);
    while (w->nevents < n && w->rc == 0 && ct_time_ms() < deadline) {
        uv_timer_start(&t, etcd_on_wake, 20, 0);
        uv_run(&loop, UV_RUN_ONCE);
    }
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&loop, UV_RUN_NOWAIT);
    CT_ASSERT_MSG(w->rc == 0, "watch ended: %s", w->error);
}

/* Destroys the client and runs the loop until every handle is closed. */
static void close_client(ctrun_etcd_t *e)
{
    ctrun_etcd_destroy(e);
    CT_ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
}

static ctrun_etcd_t *etcd_client(const char *endpoints, int64_t attempt_ms, int64_t request_ms)
{
    ctrun_etcd_opts_t o = {.endpoints = endpoints,
                           .connect_timeout_ms = 500,
                           .attempt_timeout_ms = attempt_ms,
                           .request_timeout_ms = request_ms};
    ctrun_etcd_t *e = NULL;
    ct_errbuf_t eb = {{0}};
    int rc = ctrun_etcd_create(&loop, &o, &e, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
    return e;
}

/* Submit helpers: each waits for its result (10 s) and returns it. */
#define SUBMIT(g, call)                    \
    do {                                   \
        memset((g), 0, sizeof *(g));       \
        (g)->in_submit = true;             \
        CT_ASSERT_OK(call);                \
        (g)->in_submit = false;            \
        etcd_run_until(&(g)->done, 15000); \
        CT_ASSERT_EQ((g)->ncalls, 1);      \
    } while (0)

static void etcd_put(ctrun_etcd_t *e, const char *k, const char *v, int64_t lease, got_t *g)
{
    SUBMIT(g, ctrun_etcd_put(e, k, strlen(k), v, strlen(v), lease, etcd_on_result, g));
}

static void etcd_get(ctrun_etcd_t *e, const char *k, got_t *g)
{
    SUBMIT(g, ctrun_etcd_range(e, k, strlen(k), false, etcd_on_result, g));
    CT_ASSERT_MSG(g->rc == 0, "%s", g->error);
}

/* ---- without etcd ----------------------------------------------------------------------- */

static void base64_and_prefix_end(void)
{
    uint8_t all[256], back[256];
    char text[400];
    for (int i = 0; i < 256; i++)
        all[i] = (uint8_t)i;
    for (size_t n = 0; n <= 256; n++) {
        size_t len = ctrun_etcd_b64_encode(all + 256 - n, n, text);
        CT_ASSERT_EQ(len, 4 * ((n + 2) / 3));
        size_t out = 0;
        CT_ASSERT_OK(ctrun_etcd_b64_decode(text, len, back, &out));
        CT_ASSERT_EQ(out, n);
        CT_ASSERT(memcmp(back, all + 256 - n, n) == 0);
    }
    ctrun_etcd_b64_encode("a\0b", 3, text);
    CT_ASSERT_STR_EQ(text, "YQBi"); /* what etcd itself returned for this key */
    size_t out;
    CT_ASSERT_ERR(ctrun_etcd_b64_decode("YQB", 3, back, &out), CT_EPARSE);
    CT_ASSERT_ERR(ctrun_etcd_b64_decode("Y=Bi", 4, back, &out), CT_EPARSE);
    CT_ASSERT_ERR(ctrun_etcd_b64_decode("YQ*i", 4, back, &out), CT_EPARSE);

    uint8_t end[8];
    CT_ASSERT_EQ(ctrun_etcd_prefix_end("ab", 2, end), 2);
    CT_ASSERT(memcmp(end, "ac", 2) == 0);
    CT_ASSERT_EQ(ctrun_etcd_prefix_end("a\xff\xff", 3, end), 1);
    CT_ASSERT_EQ(end[0], 'b');
    CT_ASSERT_EQ(ctrun_etcd_prefix_end("\xff", 1, end), 1);
    CT_ASSERT_EQ(end[0], 0);
}

static void bad_endpoints(void)
{
    const char *bad[] = {"", "127.0.0.1", "127.0.0.1:2379,", "a:1,,b:2", "host:99999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ctrun_etcd_opts_t o = {.endpoints = bad[i]};
        ctrun_etcd_t *e = (ctrun_etcd_t *)&o;
        ct_errbuf_t eb = {{0}};
        CT_ASSERT_NE(ctrun_etcd_create(&loop, &o, &e, &eb), 0);
        CT_ASSERT(e == NULL);
        CT_ASSERT_STR_CONTAINS(eb.msg, "etcd endpoints");
        CT_ASSERT(strchr(eb.msg, '\n') == NULL);
    }
}

/* ---- one member ---------------------------------------------------------------------------- */

static etcd_cluster_t one;

static void put_range_binary(void)
{
    ctrun_etcd_t *e = etcd_client(one.endpoints, 2000, 10000);
    uint8_t key[3][8] = {{'b', 0, 1, 0xff}, {'b', 0, 2}, {'b', 0xff, 0xff}};
    size_t key_len[3] = {4, 3, 3};
    uint8_t value[256];
    for (int i = 0; i < 256; i++)
        value[i] = (uint8_t)(255 - i);
    got_t g;
    for (int i = 0; i < 3; i++) {
        SUBMIT(&g, ctrun_etcd_put(e, key[i], key_len[i], value, 256 - (size_t)i, 0, etcd_on_result,
                                  &g));
        CT_ASSERT_MSG(g.rc == 0, "%s", g.error);
        CT_ASSERT_GT(g.revision, 0);
    }
    /* Every key starting with 'b': in key order, bytes intact. */
    SUBMIT(&g, ctrun_etcd_range(e, "b", 1, true, etcd_on_result, &g));
    CT_ASSERT_MSG(g.rc == 0, "%s", g.error);
    CT_ASSERT_EQ(g.nkvs, 3);
    for (int i = 0; i < 3; i++) {
        CT_ASSERT_EQ(g.kvs[i].key_len, key_len[i]);
        CT_ASSERT(memcmp(g.kvs[i].key, key[i], key_len[i]) == 0);
        CT_ASSERT_EQ(g.kvs[i].value_len, 256 - i);
        CT_ASSERT(memcmp(g.kvs[i].value, value, 256 - (size_t)i) == 0);
        CT_ASSERT_EQ(g.kvs[i].version, 1);
    }
    /* An empty value is a value; a missing key is no kvs. */
    SUBMIT(&g, ctrun_etcd_put(e, "empty", 5, "", 0, 0, etcd_on_result, &g));
    CT_ASSERT_OK(g.rc);
    etcd_get(e, "empty", &g);
    CT_ASSERT_EQ(g.nkvs, 1);
    CT_ASSERT_EQ(g.kvs[0].value_len, 0);
    etcd_get(e, "missing", &g);
    CT_ASSERT_EQ(g.nkvs, 0);
    /* Delete by prefix. */
    SUBMIT(&g, ctrun_etcd_delete(e, "b", 1, true, etcd_on_result, &g));
    CT_ASSERT_OK(g.rc);
    CT_ASSERT_EQ(g.deleted, 3);
    SUBMIT(&g, ctrun_etcd_range(e, "b", 1, true, etcd_on_result, &g));
    CT_ASSERT_EQ(g.nkvs, 0);
    CT_ASSERT_ERR(ctrun_etcd_put(e, "", 0, "v", 1, 0, etcd_on_result, &g), -EINVAL);
    close_client(e);
}

static void txn_compare_and_swap(void)
{
    ctrun_etcd_t *e = etcd_client(one.endpoints, 2000, 10000);
    got_t g;
    etcd_put(e, "cas", "v1", 0, &g);
    CT_ASSERT_OK(g.rc);
    int64_t rev1 = g.revision;

    /* mod_revision as read: the swap happens. */
    ctrun_etcd_cmp_t cmp = {.key = "cas",
                            .key_len = 3,
                            .target = CTRUN_ETCD_MOD,
                            .result = CTRUN_ETCD_EQUAL,
                            .num = rev1};
    ctrun_etcd_op_t swap = {
        .kind = CTRUN_ETCD_OP_PUT, .key = "cas", .key_len = 3, .value = "v2", .value_len = 2};
    ctrun_etcd_op_t read = {.kind = CTRUN_ETCD_OP_RANGE, .key = "cas", .key_len = 3};
    SUBMIT(&g, ctrun_etcd_txn(e, &cmp, 1, &swap, 1, &read, 1, etcd_on_result, &g));
    CT_ASSERT_MSG(g.rc == 0, "%s", g.error);
    CT_ASSERT(g.succeeded);
    CT_ASSERT_EQ(g.revision, rev1 + 1);

    /* The same stale revision again: the compare fails, the failure branch reads v2. */
    swap.value = "v3";
    SUBMIT(&g, ctrun_etcd_txn(e, &cmp, 1, &swap, 1, &read, 1, etcd_on_result, &g));
    CT_ASSERT_MSG(g.rc == 0, "%s", g.error);
    CT_ASSERT(!g.succeeded);
    CT_ASSERT_EQ(g.nkvs, 1);
    CT_ASSERT_EQ(g.kvs[0].value_len, 2);
    CT_ASSERT(memcmp(g.kvs[0].value, "v2", 2) == 0);
    CT_ASSERT_EQ(g.kvs[0].mod_revision, rev1 + 1);
    CT_ASSERT_EQ(g.kvs[0].version, 2);

    /* Create once: create_revision == 0 holds only while the key is missing. */
    ctrun_etcd_cmp_t missing = {.key = "once",
                                .key_len = 4,
                                .target = CTRUN_ETCD_CREATE,
                                .result = CTRUN_ETCD_EQUAL,
                                .num = 0};
    ctrun_etcd_op_t create = {
        .kind = CTRUN_ETCD_OP_PUT, .key = "once", .key_len = 4, .value = "first", .value_len = 5};
    SUBMIT(&g, ctrun_etcd_txn(e, &missing, 1, &create, 1, NULL, 0, etcd_on_result, &g));
    CT_ASSERT(g.rc == 0 && g.succeeded);
    create.value = "second";
    create.value_len = 6;
    SUBMIT(&g, ctrun_etcd_txn(e, &missing, 1, &create, 1, NULL, 0, etcd_on_result, &g));
    CT_ASSERT(g.rc == 0 && !g.succeeded);
    etcd_get(e, "once", &g);
    CT_ASSERT(g.nkvs == 1 && g.kvs[0].value_len == 5);

    /* version and value compares, and several ops in one branch (a delete counted). */
    ctrun_etcd_cmp_t two[2] = {
        {.key = "cas",
         .key_len = 3,
         .target = CTRUN_ETCD_VERSION,
         .result = CTRUN_ETCD_GREATER,
         .num = 1},
        {.key = "cas",
         .key_len = 3,
         .target = CTRUN_ETCD_VALUE,
         .result = CTRUN_ETCD_EQUAL,
         .value = "v2",
         .value_len = 2},
    };
    ctrun_etcd_op_t ops[2] = {
        {.kind = CTRUN_ETCD_OP_DELETE, .key = "once", .key_len = 4},
        {.kind = CTRUN_ETCD_OP_RANGE, .key = "cas", .key_len = 3},
    };
    SUBMIT(&g, ctrun_etcd_txn(e, two, 2, ops, 2, NULL, 0, etcd_on_result, &g));
    CT_ASSERT_MSG(g.rc == 0 && g.succeeded, "%s", g.error);
    CT_ASSERT_EQ(g.deleted, 1);
    CT_ASSERT_EQ(g.nkvs, 1);
    close_client(e);
}

static void lease_keepalive_expiry_revoke(void)
{
    ctrun_etcd_t *e = etcd_client(one.endpoints, 2000, 10000);
    got_t g, k;
    SUBMIT(&g, ctrun_etcd_lease_grant(e, 2, etcd_on_result, &g));
    CT_ASSERT_MSG(g.rc == 0, "%s", g.error);
    CT_ASSERT_EQ(g.ttl, 2);
    int64_t lease = g.lease_id;
    CT_ASSERT_NE(lease, 0);
    etcd_put(e, "member/a", "alive", lease, &g);
    CT_ASSERT_MSG(g.rc == 0, "%s", g.error);

    /* Kept for 4 s (twice the TTL) by keepalives every 500 ms. */
    int64_t until = ct_time_ms() + 4000;
    while (ct_time_ms() < until) {
        SUBMIT(&k, ctrun_etcd_lease_keepalive(e, lease, etcd_on_result, &k));
        CT_ASSERT_MSG(k.rc == 0, "%s", k.error);
        CT_ASSERT_EQ(k.ttl, 2);
        ct_sleep_ms(500);
    }
    etcd_get(e, "member/a", &g);
    CT_ASSERT_EQ(g.nkvs, 1);
    CT_ASSERT_EQ(g.kvs[0].lease, lease);

    /* Without keepalives the key goes when the lease expires (TTL 2 s; etcd checks twice a
     * second; 8 s allowed for a loaded machine). */
    int64_t t0 = ct_time_ms();
    do {
        ct_sleep_ms(200);
        etcd_get(e, "member/a", &g);
    } while (g.nkvs == 1 && ct_time_ms() - t0 < 8000);
    CT_ASSERT_EQ(g.nkvs, 0);
    SUBMIT(&k, ctrun_etcd_lease_keepalive(e, lease, etcd_on_result, &k));
    CT_ASSERT_ERR(k.rc, -ENOENT);
    CT_ASSERT_STR_CONTAINS(k.error, "not found");

    /* Revoke deletes at once. */
    SUBMIT(&g, ctrun_etcd_lease_grant(e, 60, etcd_on_result, &g));
    CT_ASSERT_OK(g.rc);
    lease = g.lease_id;
    etcd_put(e, "member/b", "alive", lease, &g);
    CT_ASSERT_OK(g.rc);
    SUBMIT(&g, ctrun_etcd_lease_revoke(e, lease, etcd_on_result, &g));
    CT_ASSERT_MSG(g.rc == 0, "%s", g.error);
    etcd_get(e, "member/b", &g);
    CT_ASSERT_EQ(g.nkvs, 0);
    /* etcd's own error, named: revoking again, and a put on the revoked lease. */
    SUBMIT(&g, ctrun_etcd_lease_revoke(e, lease, etcd_on_result, &g));
    CT_ASSERT_ERR(g.rc, -ENOENT);
    CT_ASSERT_STR_CONTAINS(g.error, "etcd lease revoke: 127.0.0.1:");
    CT_ASSERT_STR_CONTAINS(g.error, "requested lease not found");
    etcd_put(e, "member/c", "x", lease, &g);
    CT_ASSERT_ERR(g.rc, -ENOENT);
    CT_ASSERT_STR_CONTAINS(g.error, "etcd put: ");
    CT_ASSERT(!g.ambiguous);
    close_client(e);
}

static void watch_sees_changes_in_order(void)
{
    ctrun_etcd_t *e = etcd_client(one.endpoints, 2000, 10000);
    got_t w = {0}, g;
    ctrun_etcd_watch_t *h = NULL;
    w.in_submit = true;
    CT_ASSERT_OK(ctrun_etcd_watch(e, "w/", 2, true, 0, etcd_on_result, &w, &h));
    w.in_submit = false;
    etcd_run_until(&w.created, 10000);
    CT_ASSERT_EQ(w.nevents, 0);
    etcd_put(e, "w/a", "1", 0, &g);
    int64_t rev_a = g.revision;
    etcd_put(e, "w/b", "2", 0, &g);
    etcd_put(e, "other", "x", 0, &g); /* not under the prefix */
    SUBMIT(&g, ctrun_etcd_delete(e, "w/a", 3, false, etcd_on_result, &g));
    CT_ASSERT_OK(g.rc);
    int64_t rev_del = g.revision;
    run_events(&w, 3);
    CT_ASSERT_EQ(w.nevents, 3);
    CT_ASSERT_EQ(w.rc, 0);
    CT_ASSERT(!w.events[0].deleted && memcmp(w.events[0].key, "w/a", 3) == 0);
    CT_ASSERT_EQ(w.events[0].mod_revision, rev_a);
    CT_ASSERT(!w.events[1].deleted && memcmp(w.events[1].key, "w/b", 3) == 0);
    CT_ASSERT(w.events[1].value_len == 1 && w.events[1].value[0] == '2');
    CT_ASSERT(w.events[2].deleted && memcmp(w.events[2].key, "w/a", 3) == 0);
    CT_ASSERT_EQ(w.events[2].mod_revision, rev_del);
    ctrun_etcd_watch_cancel(h);

    /* From a past revision: the history replayed, first event the put of w/a. */
    got_t w2 = {0};
    CT_ASSERT_OK(ctrun_etcd_watch(e, "w/a", 3, false, rev_a, etcd_on_result, &w2, &h));
    run_events(&w2, 2);
    CT_ASSERT_EQ(w2.nevents, 2);
    CT_ASSERT(!w2.events[0].deleted && w2.events[1].deleted);
    ctrun_etcd_watch_cancel(h);
    close_client(e);
}

/* A socket bound and listening on 127.0.0.1 that never accepts: connections complete in the
 * kernel's backlog, requests are never answered. */
static int silent_port(int *fd)
{
    *fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    CT_ASSERT(*fd >= 0 && bind(*fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(*fd, 64) == 0 &&
              getsockname(*fd, (struct sockaddr *)&a, &len) == 0);
    return ntohs(a.sin_port);
}

static void failover_past_dead_members(void)
{
    int refused_fd = -1, silent_fd = -1;
    int refused = ct_test_refused_port(&refused_fd);
    int silent = silent_port(&silent_fd);
    char eps[512];
    snprintf(eps, sizeof eps, "127.0.0.1:%d,127.0.0.1:%d,%s", refused, silent, one.endpoints);
    ctrun_etcd_t *e = etcd_client(eps, 2000, 10000);
    got_t g;
    int64_t t0 = ct_time_ms();
    etcd_put(e, "fo", "1", 0, &g);
    int64_t took = ct_time_ms() - t0;
    CT_ASSERT_MSG(g.rc == 0, "%s", g.error);
    CT_ASSERT_STR_EQ(g.endpoint, one.endpoints);
    /* The silent member costs one attempt timeout (2 s), the refused one nothing. */
    CT_ASSERT_GE(took, 1900);
    CT_ASSERT_LT(took, 6000);
    /* The member that answered is tried first from then on: no more waiting (the bound is
     * half the attempt timeout, generous for a loaded machine). */
    t0 = ct_time_ms();
    etcd_get(e, "fo", &g);
    CT_ASSERT_EQ(g.nkvs, 1);
    CT_ASSERT_LT(ct_time_ms() - t0, 1000);
    close_client(e);

    /* A watch fails over the same way (the silent member never confirms it). */
    snprintf(eps, sizeof eps, "127.0.0.1:%d,%s", silent, one.endpoints);
    e = etcd_client(eps, 500, 10000);
    got_t w = {0};
    ctrun_etcd_watch_t *h = NULL;
    CT_ASSERT_OK(ctrun_etcd_watch(e, "fo", 2, false, 0, etcd_on_result, &w, &h));
    etcd_run_until(&w.created, 10000);
    CT_ASSERT_EQ(w.rc, 0);
    etcd_put(e, "fo", "2", 0, &g);
    run_events(&w, 1);
    CT_ASSERT_EQ(w.nevents, 1);
    ctrun_etcd_watch_cancel(h);
    close_client(e);
    close(refused_fd);
    close(silent_fd);
}

static void all_members_down(void)
{
    int refused_fd = -1, silent_fd = -1;
    int refused = ct_test_refused_port(&refused_fd);
    int silent = silent_port(&silent_fd);
    char eps[512];
    snprintf(eps, sizeof eps, "127.0.0.1:%d,127.0.0.1:%d", refused, silent);
    ctrun_etcd_t *e = etcd_client(eps, 400, 1500);
    got_t g;
    int64_t t0 = ct_time_ms();
    etcd_put(e, "k", "v", 0, &g);
    int64_t took = ct_time_ms() - t0;
    CT_ASSERT_ERR(g.rc, CT_EPEER);
    CT_ASSERT_LE(took, 1500 + 1500);
    CT_ASSERT_GE(took, 1000);
    char want[64];
    snprintf(want, sizeof want, "127.0.0.1:%d: cannot connect (Connection refused)", refused);
    CT_ASSERT_STR_CONTAINS(g.error, want);
    snprintf(want, sizeof want, "127.0.0.1:%d: no answer within 400 ms", silent);
    CT_ASSERT_STR_CONTAINS(g.error, want);
    CT_ASSERT_STR_CONTAINS(g.error, "etcd put: no member answered within 1500 ms");
    CT_ASSERT(strchr(g.error, '\n') == NULL);
    CT_ASSERT(g.ambiguous); /* the silent member got the put */

    /* A range reaching only the refused port: never sent, so not ambiguous. */
    close_client(e);
    snprintf(eps, sizeof eps, "127.0.0.1:%d", refused);
    e = etcd_client(eps, 400, 600);
    SUBMIT(&g, ctrun_etcd_range(e, "k", 1, false, etcd_on_result, &g));
    CT_ASSERT_ERR(g.rc, CT_EPEER);
    CT_ASSERT(!g.ambiguous);

    /* A watch with nobody there ends with the same kind of line. */
    got_t w = {0};
    ctrun_etcd_watch_t *h = NULL;
    CT_ASSERT_OK(ctrun_etcd_watch(e, "k", 1, false, 0, etcd_on_result, &w, &h));
    etcd_run_until(&w.done, 5000);
    CT_ASSERT_ERR(w.rc, CT_EPEER);
    CT_ASSERT_STR_CONTAINS(w.error, "etcd watch: no member answered");
    ctrun_etcd_watch_cancel(h);
    close_client(e);
    close(refused_fd);
    close(silent_fd);
}

/* Not etcd: an HTTP server answering 400 without etcd's error body, then one answering 200
 * with broken JSON. */
static void not_etcd(void)
{
    foreign_peer_t p;
    CT_ASSERT_OK(foreign_peer_start(&p, FOREIGN_HTTP));
    char eps[64];
    snprintf(eps, sizeof eps, "127.0.0.1:%d", p.port);
    ctrun_etcd_t *e = etcd_client(eps, 1000, 3000);
    got_t g;
    SUBMIT(&g, ctrun_etcd_range(e, "k", 1, false, etcd_on_result, &g));
    CT_ASSERT_ERR(g.rc, CT_EPROTOCOL);
    CT_ASSERT_STR_CONTAINS(g.error, eps);
    CT_ASSERT_STR_CONTAINS(g.error, "HTTP 400 without an etcd error");
    close_client(e);
    foreign_peer_stop(&p);

    /* 200 with a body that is not JSON: named as such, with the endpoint and the method. */
    CT_ASSERT_OK(foreign_peer_start(&p, FOREIGN_HTTP_BAD_JSON));
    snprintf(eps, sizeof eps, "127.0.0.1:%d", p.port);
    e = etcd_client(eps, 1000, 3000);
    SUBMIT(&g, ctrun_etcd_put(e, "k", 1, "v", 1, 0, etcd_on_result, &g));
    CT_ASSERT_ERR(g.rc, CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(g.error, "etcd put: ");
    CT_ASSERT_STR_CONTAINS(g.error, eps);
    CT_ASSERT_STR_CONTAINS(g.error, "malformed JSON in the reply to /v3/kv/put");
    CT_ASSERT(strchr(g.error, '\n') == NULL);
    close_client(e);
    foreign_peer_stop(&p);
}

/* Destroy with requests and a watch in flight: no callback, no leak, the loop ends. */
static void destroy_with_requests_pending(void)
{
    int silent_fd = -1;
    int silent = silent_port(&silent_fd);
    char eps[512];
    snprintf(eps, sizeof eps, "127.0.0.1:%d,%s", silent, one.endpoints);
    ctrun_etcd_t *e = etcd_client(eps, 2000, 10000);
    got_t g[3] = {{0}};
    ctrun_etcd_watch_t *h = NULL;
    CT_ASSERT_OK(ctrun_etcd_put(e, "d", 1, "v", 1, 0, etcd_on_result, &g[0]));
    CT_ASSERT_OK(ctrun_etcd_range(e, "d", 1, false, etcd_on_result, &g[1]));
    CT_ASSERT_OK(ctrun_etcd_watch(e, "d", 1, false, 0, etcd_on_result, &g[2], &h));
    for (int i = 0; i < 5; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
    close_client(e);
    for (int i = 0; i < 3; i++)
        CT_ASSERT_EQ(g[i].ncalls, 0);
    ctrun_etcd_watch_cancel(h); /* the caller's handle outlives the client */
    close(silent_fd);
}

/* ---- three members ------------------------------------------------------------------------ */

static void cluster_survives_a_member(void)
{
    etcd_cluster_t c;
    etcd_cluster_start(&c, 3);
    ctrun_etcd_t *e = etcd_client(c.endpoints, 1000, 15000);
    got_t g;
    etcd_put(e, "job", "0", 0, &g);
    CT_ASSERT_MSG(g.rc == 0, "%s", g.error);
    /* Usually the first member; another one when the first was not ready (a young cluster
     * may still change leaders): the member that answered is the one to kill. */
    int dead = -1;
    for (int i = 0; i < 3; i++)
        if (strcmp(g.endpoint, c.m[i].endpoint) == 0)
            dead = i;
    CT_ASSERT_GE(dead, 0);
    got_t w = {0};
    ctrun_etcd_watch_t *h = NULL;
    CT_ASSERT_OK(ctrun_etcd_watch(e, "job", 3, false, 0, etcd_on_result, &w, &h));
    etcd_run_until(&w.created, 10000);

    /* Kill the member the client talks to (maybe the leader): the others keep quorum. */
    etcd_member_kill(&c, dead);
    etcd_run_until(&w.done, 10000); /* the watch on the killed member ends, once */
    CT_ASSERT_ERR(w.rc, CT_EPEER);
    CT_ASSERT_STR_CONTAINS(w.error, c.m[dead].endpoint);
    ctrun_etcd_watch_cancel(h);

    got_t w2 = {0};
    CT_ASSERT_OK(ctrun_etcd_watch(e, "job", 3, false, 0, etcd_on_result, &w2, &h));
    etcd_run_until(&w2.created, 15000);
    for (int i = 1; i <= 10; i++) {
        char v[8];
        snprintf(v, sizeof v, "%d", i);
        etcd_put(e, "job", v, 0, &g);
        CT_ASSERT_MSG(g.rc == 0, "put %d: %s", i, g.error);
        CT_ASSERT_STR_NOT_CONTAINS(g.endpoint, c.m[dead].endpoint);
        etcd_get(e, "job", &g);
        CT_ASSERT(g.nkvs == 1 && strlen(v) == g.kvs[0].value_len &&
                  memcmp(g.kvs[0].value, v, g.kvs[0].value_len) == 0);
    }
    run_events(&w2, 10);
    CT_ASSERT_EQ(w2.nevents, 10);
    CT_ASSERT(w2.events[9].value_len == 2 && memcmp(w2.events[9].value, "10", 2) == 0);
    ctrun_etcd_watch_cancel(h);
    close_client(e);
    etcd_cluster_stop(&c);
}

int main(void)
{
    CT_ASSERT_OK(uv_loop_init(&loop));
    CT_RUN(base64_and_prefix_end);
    CT_RUN(bad_endpoints);
    CT_RUN(all_members_down);
    CT_RUN(not_etcd);
    etcd_cluster_start(&one, 1); /* skips (77) from here without etcd */
    CT_RUN(put_range_binary);
    CT_RUN(txn_compare_and_swap);
    CT_RUN(lease_keepalive_expiry_revoke);
    CT_RUN(watch_sees_changes_in_order);
    CT_RUN(failover_past_dead_members);
    CT_RUN(destroy_with_requests_pending);
    CT_RUN(cluster_survives_a_member);
    etcd_cluster_stop(&one);
    CT_ASSERT_EQ(uv_loop_close(&loop), 0);
    return 0;
}
