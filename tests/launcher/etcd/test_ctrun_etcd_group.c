/*
 * test_ctrun_etcd_group.c - membership and rounds in etcd (launcher/etcd/ctrun_etcd_group.c)
 * against a real etcd (etcd_cluster.h), several nodes on one loop, each with its own client:
 * nodes are listed in join order by everyone; a second node with a taken id is refused; of
 * concurrent round proposals exactly one wins and every node sees the winner's plan; a node that
 * stops without a word (no keepalives, no revoke: as when killed) disappears from the others'
 * lists once its lease expires, one that leaves with a revoke at once; a node whose own lease
 * expires is told so (FAILED); changes made by one transaction (one revision) all reach the
 * others; the caller's own keys under the prefix reach it (from the join snapshot before
 * JOINED, then each change), and a node's new value reaches the others in its place; a node
 * watching through a three-member etcd keeps seeing changes after the etcd member it watched
 * through is killed; a join transaction whose answer is lost on the way (a proxy closes the
 * connection once etcd has answered it) is sent again and the node joins with its own key.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <uv.h>

#include "ct_test.h"
#include "ct_time.h"
#include "ctrun_etcd_group.h"
#include "etcd_cluster.h"

typedef struct node {
    ctrun_etcd_group_t *g;
    bool joined, failed;
    int rc, nproposed, nrounds, nmember_events;
    bool won;
    long self;
    int64_t round;
    char members[512]; /* ids in order, comma-separated */
    char plan[128], error[1024];
    char key[128]; /* the latest KEY event: "<key>=<value>" */
    int nkeys, nkeys_at_join;
    char values[512]; /* members' values in order, ';'-separated */
} node_t;

static void group_on_event(void *data, const ctrun_etcd_group_event_t *ev)
{
    node_t *n = data;
    size_t len = 0;
    n->members[0] = '\0';
    for (size_t i = 0; i < ev->nmembers; i++)
        len += (size_t)snprintf(n->members + len, sizeof n->members - len, "%s%s", i ? "," : "",
                                ev->members[i].id);
    len = 0;
    n->values[0] = '\0';
    for (size_t i = 0; i < ev->nmembers; i++)
        len += (size_t)snprintf(n->values + len, sizeof n->values - len, "%s%s", i ? ";" : "",
                                ev->members[i].value);
    n->self = ev->self;
    n->round = ev->round;
    snprintf(n->plan, sizeof n->plan, "%s", ev->plan);
    switch (ev->kind) {
    case CTRUN_ETCD_GROUP_JOINED:
        CT_ASSERT(!n->joined);
        n->joined = true;
        n->nkeys_at_join = n->nkeys;
        break;
    case CTRUN_ETCD_GROUP_MEMBERS:
        n->nmember_events++;
        break;
    case CTRUN_ETCD_GROUP_ROUND:
        n->nrounds++;
        break;
    case CTRUN_ETCD_GROUP_PROPOSED:
        n->nproposed++;
        n->won = ev->won;
        n->rc = ev->rc;
        break;
    case CTRUN_ETCD_GROUP_FAILED:
        CT_ASSERT(!n->failed);
        n->failed = true;
        n->rc = ev->rc;
        snprintf(n->error, sizeof n->error, "%s", ev->error);
        break;
    case CTRUN_ETCD_GROUP_KEY:
        snprintf(n->key, sizeof n->key, "%s=%s%s", ev->key, ev->value,
                 ev->deleted ? " (deleted)" : "");
        n->nkeys++;
        break;
    }
}

static uv_loop_t loop;

static void group_on_wake(uv_timer_t *t)
{
    (void)t;
}

/* Runs the loop while cond holds, 10 s at most (then fails). */
#define RUN_WHILE(cond)                                       \
    do {                                                      \
        int64_t run_deadline_ = ct_time_ms() + 10000;         \
        uv_timer_t run_wake_;                                 \
        uv_timer_init(&loop, &run_wake_);                     \
        while ((cond) && ct_time_ms() < run_deadline_) {      \
            uv_timer_start(&run_wake_, group_on_wake, 20, 0); \
            uv_run(&loop, UV_RUN_ONCE);                       \
        }                                                     \
        uv_close((uv_handle_t *)&run_wake_, NULL);            \
        uv_run(&loop, UV_RUN_NOWAIT);                         \
        CT_ASSERT_MSG(!(cond), "still %s after 10 s", #cond); \
    } while (0)

/* Runs the loop until cond(arg) or timeout_ms; returns the time it took. */
static int64_t group_run(bool (*cond)(void *), void *arg, int64_t timeout_ms, const char *what)
{
    int64_t t0 = ct_time_ms();
    uv_timer_t t;
    uv_timer_init(&loop, &t);
    while (!cond(arg) && ct_time_ms() - t0 < timeout_ms) {
        uv_timer_start(&t, group_on_wake, 20, 0);
        uv_run(&loop, UV_RUN_ONCE);
    }
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&loop, UV_RUN_NOWAIT);
    CT_ASSERT_MSG(cond(arg), "%s: not within %lld ms", what, (long long)timeout_ms);
    return ct_time_ms() - t0;
}

static bool is_joined(void *a)
{
    return ((node_t *)a)->joined || ((node_t *)a)->failed;
}

static bool is_failed(void *a)
{
    return ((node_t *)a)->failed;
}

typedef struct members_want {
    node_t *n;
    const char *list;
} members_want_t;

static bool has_members(void *a)
{
    members_want_t *w = a;
    return strcmp(w->n->members, w->list) == 0;
}

static void group_join(node_t *n, const char *endpoints, const char *prefix, const char *id,
                       int64_t ttl_s, int64_t keepalive_ms)
{
    memset(n, 0, sizeof *n);
    ctrun_etcd_group_opts_t o = {
        .etcd = {.endpoints = endpoints, .attempt_timeout_ms = 1000, .request_timeout_ms = 10000},
        .prefix = prefix,
        .id = id,
        .value = "nproc=2",
        .ttl_s = ttl_s,
        .keepalive_ms = keepalive_ms};
    ct_errbuf_t eb = {{0}};
    int rc = ctrun_etcd_group_join(&loop, &o, group_on_event, n, &n->g, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
    group_run(is_joined, n, 15000, id);
}

static void wait_members(node_t *n, const char *list, int64_t timeout_ms)
{
    members_want_t w = {n, list};
    group_run(has_members, &w, timeout_ms, list);
}

static void close_all(node_t *nodes, int n)
{
    for (int i = 0; i < n; i++)
        ctrun_etcd_group_close(nodes[i].g, true);
    CT_ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
}

static etcd_cluster_t one;

static void bad_options(void)
{
    const char *ids[] = {"", "a/b", "a b", NULL};
    for (int i = 0; ids[i] != NULL; i++) {
        ctrun_etcd_group_opts_t o = {
            .etcd = {.endpoints = "127.0.0.1:1"}, .prefix = "/p/", .id = ids[i], .ttl_s = 2};
        ctrun_etcd_group_t *g = NULL;
        ct_errbuf_t eb = {{0}};
        CT_ASSERT_ERR(ctrun_etcd_group_join(&loop, &o, group_on_event, NULL, &g, &eb), -EINVAL);
        CT_ASSERT_STR_CONTAINS(eb.msg, "node id");
        CT_ASSERT(g == NULL);
    }
    ctrun_etcd_group_opts_t o = {
        .etcd = {.endpoints = "127.0.0.1:1"}, .prefix = "/p", .id = "a", .ttl_s = 2};
    ctrun_etcd_group_t *g = NULL;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_ERR(ctrun_etcd_group_join(&loop, &o, group_on_event, NULL, &g, &eb), -EINVAL);
    CT_ASSERT_STR_CONTAINS(eb.msg, "prefix '/p' must end with '/'");
}

/* etcd out of reach: FAILED naming it, within the request timeout. */
static void unreachable(void)
{
    int hold = -1;
    char eps[64];
    snprintf(eps, sizeof eps, "127.0.0.1:%d", ct_test_refused_port(&hold));
    node_t n = {0};
    ctrun_etcd_group_opts_t o = {
        .etcd = {.endpoints = eps, .attempt_timeout_ms = 300, .request_timeout_ms = 1000},
        .prefix = "/job/",
        .id = "a",
        .ttl_s = 2};
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ctrun_etcd_group_join(&loop, &o, group_on_event, &n, &n.g, &eb));
    int64_t took = group_run(is_failed, &n, 5000, "failed");
    CT_ASSERT_LT(took, 3000);
    CT_ASSERT_STR_CONTAINS(n.error, "joining /job/: etcd lease grant: no member answered");
    CT_ASSERT_STR_CONTAINS(n.error, eps);
    CT_ASSERT(!n.joined);
    close_all(&n, 1);
    close(hold);
}

static void join_order_rounds_and_loss(void)
{
    node_t n[4];
    const char *eps = one.endpoints;
    group_join(&n[0], eps, "/job-a/", "n0", 2, 0);
    CT_ASSERT_MSG(n[0].joined, "%s", n[0].error);
    CT_ASSERT_STR_EQ(n[0].members, "n0");
    CT_ASSERT_EQ(n[0].self, 0);
    group_join(&n[1], eps, "/job-a/", "n1", 2, 0);
    group_join(&n[2], eps, "/job-a/", "n2", 2, 0);
    CT_ASSERT_STR_EQ(n[2].members, "n0,n1,n2"); /* from its join snapshot */
    CT_ASSERT_EQ(n[2].self, 2);
    wait_members(&n[0], "n0,n1,n2", 5000); /* from the watch */
    wait_members(&n[1], "n0,n1,n2", 5000);
    CT_ASSERT_EQ(n[1].self, 1);

    /* A second node with a taken id is refused; the others' lists do not change. */
    node_t dup;
    group_join(&dup, eps, "/job-a/", "n1", 2, 0);
    CT_ASSERT(dup.failed && !dup.joined);
    CT_ASSERT_ERR(dup.rc, CT_ESTATE);
    CT_ASSERT_STR_CONTAINS(dup.error, "a node with id 'n1' is already a member");
    ctrun_etcd_group_close(dup.g, false);

    /* Three proposals for round 1 at once: one wins, everyone sees its plan. */
    for (int i = 0; i < 3; i++) {
        char plan[32];
        snprintf(plan, sizeof plan, "by n%d", i);
        CT_ASSERT_OK(ctrun_etcd_group_propose(n[i].g, 1, plan));
    }
    for (int i = 0; i < 3; i++)
        RUN_WHILE(n[i].nproposed < 1 || n[i].nrounds < 1);
    int winners = 0, winner = -1;
    for (int i = 0; i < 3; i++) {
        CT_ASSERT_EQ(n[i].rc, 0);
        if (n[i].won) {
            winners++;
            winner = i;
        }
    }
    CT_ASSERT_EQ(winners, 1);
    char want[32];
    snprintf(want, sizeof want, "by n%d", winner);
    for (int i = 0; i < 3; i++) {
        CT_ASSERT_EQ(n[i].round, 1);
        CT_ASSERT_STR_EQ(n[i].plan, want);
    }
    /* A late joiner reads the round from its snapshot. */
    group_join(&n[3], eps, "/job-a/", "n3", 2, 0);
    CT_ASSERT_EQ(n[3].round, 1);
    CT_ASSERT_STR_EQ(n[3].plan, want);
    CT_ASSERT_STR_EQ(n[3].members, "n0,n1,n2,n3");
    /* n0 learns of n3 through its watch: wait for it, or n0's list could still be the one
     * before n3 joined when the loss is timed below. */
    wait_members(&n[0], "n0,n1,n2,n3", 8000);

    /* n3 stops without a word (as if killed): the others drop it when its lease (2 s) expires;
     * etcd checks expiries every 500 ms, 8 s allowed on a loaded machine. */
    int64_t t0 = ct_time_ms();
    ctrun_etcd_group_close(n[3].g, false);
    wait_members(&n[0], "n0,n1,n2", 8000);
    int64_t lost_ms = ct_time_ms() - t0;
    CT_ASSERT_GE(lost_ms, 1000);
    wait_members(&n[1], "n0,n1,n2", 2000);
    printf("# a node stopped without a word was dropped after %lld ms (lease TTL 2 s)\n",
           (long long)lost_ms);

    /* n2 leaves properly: at once. */
    t0 = ct_time_ms();
    ctrun_etcd_group_close(n[2].g, true);
    wait_members(&n[0], "n0,n1", 2000);
    CT_ASSERT_LT(ct_time_ms() - t0, 1500);

    /* A stale proposal loses: n1 proposes against the round it saw, after n0 moved on. */
    CT_ASSERT_OK(ctrun_etcd_group_propose(n[0].g, 2, "by n0"));
    RUN_WHILE(n[0].nproposed < 2 || n[1].nrounds < 2);
    CT_ASSERT(n[0].won);
    CT_ASSERT_OK(ctrun_etcd_group_propose(n[1].g, 3, "by n1"));
    RUN_WHILE(n[1].nproposed < 2);
    CT_ASSERT(n[1].won); /* n1 had seen round 2: its proposal holds */
    CT_ASSERT_OK(ctrun_etcd_group_propose(n[0].g, 3, "by n0 again"));
    RUN_WHILE(n[0].nproposed < 3);
    /* n0 may or may not have seen round 3 yet; either its compare failed (stale) or it saw
     * round 3 and replaced it. What must hold: everyone ends on the same round and plan. */
    RUN_WHILE(n[0].round != n[1].round || strcmp(n[0].plan, n[1].plan) != 0);
    close_all(n, 2);
}

/* A node that does not keep its lease alive learns that it was dropped. */
static void own_lease_expires(void)
{
    node_t a, b;
    group_join(&a, one.endpoints, "/job-b/", "a", 2, 0);
    group_join(&b, one.endpoints, "/job-b/", "b", 2, 60000); /* keepalives far too rare */
    CT_ASSERT(b.joined);
    int64_t took = group_run(is_failed, &b, 10000, "b failed");
    CT_ASSERT_GE(took, 1000);
    CT_ASSERT_STR_CONTAINS(b.error, "this node's membership key /job-b/members/b is gone");
    CT_ASSERT_EQ(b.self, -1);
    wait_members(&a, "a", 2000);
    CT_ASSERT(!a.failed);
    CT_ASSERT_ERR(ctrun_etcd_group_propose(b.g, 1, "x"), CT_ESTATE);
    close_all(&a, 1);
    close_all(&b, 1);
}

static void raw_on_result(void *data, const ctrun_etcd_result_t *r)
{
    *(int *)data = r->rc == 0 && r->succeeded ? 1 : -1;
}

/* Two member keys put by one transaction share a revision: both appear. */
static void changes_of_one_revision(void)
{
    node_t a;
    group_join(&a, one.endpoints, "/job-d/", "a", 5, 0);
    CT_ASSERT(a.joined);
    ctrun_etcd_opts_t o = {.endpoints = one.endpoints};
    ctrun_etcd_t *e = NULL;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ctrun_etcd_create(&loop, &o, &e, &eb));
    ctrun_etcd_op_t puts[2] = {
        {.kind = CTRUN_ETCD_OP_PUT,
         .key = "/job-d/members/p",
         .key_len = 16,
         .value = "1",
         .value_len = 1},
        {.kind = CTRUN_ETCD_OP_PUT,
         .key = "/job-d/members/q",
         .key_len = 16,
         .value = "2",
         .value_len = 1},
    };
    int done = 0;
    CT_ASSERT_OK(ctrun_etcd_txn(e, NULL, 0, puts, 2, NULL, 0, raw_on_result, &done));
    RUN_WHILE(done == 0);
    CT_ASSERT_EQ(done, 1);
    wait_members(&a, "a,p,q", 5000);
    ctrun_etcd_destroy(e);
    close_all(&a, 1);
}

/* The caller's keys under the prefix: those of the join snapshot come before JOINED, changes
 * after; a node's new value reaches the others and keeps its place in the join order. */
static void caller_keys_and_values(void)
{
    ctrun_etcd_opts_t o = {.endpoints = one.endpoints};
    ctrun_etcd_t *e = NULL;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ctrun_etcd_create(&loop, &o, &e, &eb));
    int done = 0;
    CT_ASSERT_OK(ctrun_etcd_txn(e, NULL, 0,
                                &(ctrun_etcd_op_t){.kind = CTRUN_ETCD_OP_PUT,
                                                   .key = "/job-e/a/0/outcome",
                                                   .key_len = 18,
                                                   .value = "lost x",
                                                   .value_len = 6},
                                1, NULL, 0, raw_on_result, &done));
    RUN_WHILE(done == 0);
    node_t n[2];
    node_t *a = &n[0], *b = &n[1];
    group_join(a, one.endpoints, "/job-e/", "a", 5, 0);
    CT_ASSERT_EQ(a->nkeys_at_join, 1);
    CT_ASSERT_STR_EQ(a->key, "a/0/outcome=lost x");
    group_join(b, one.endpoints, "/job-e/", "b", 5, 0);
    CT_ASSERT_EQ(b->nkeys_at_join, 1);
    done = 0;
    CT_ASSERT_OK(ctrun_etcd_delete(e, "/job-e/a/0/outcome", 18, false, raw_on_result, &done));
    RUN_WHILE(a->nkeys < 2 || b->nkeys < 2);
    CT_ASSERT_STR_EQ(a->key, "a/0/outcome= (deleted)");
    CT_ASSERT_STR_EQ(b->key, "a/0/outcome= (deleted)");
    CT_ASSERT_OK(ctrun_etcd_group_set_value(a->g, "nproc=3"));
    RUN_WHILE(strcmp(b->values, "nproc=3;nproc=2") != 0);
    CT_ASSERT_STR_EQ(b->members, "a,b");
    CT_ASSERT_NE(ctrun_etcd_group_lease(a->g), 0);
    ctrun_etcd_destroy(e);
    close_all(n, 2);
}

/* Watching through a three-member etcd: the member the watch used is killed, the watch starts
 * again on another and misses nothing. */
static void watch_survives_etcd_member_loss(void)
{
    etcd_cluster_t c;
    etcd_cluster_start(&c, 3);
    node_t n[2];
    group_join(&n[0], c.endpoints, "/job-c/", "x", 5, 0);
    CT_ASSERT_MSG(n[0].joined, "%s", n[0].error);
    /* JOINED comes right after the watch is asked for; wait until etcd confirms it. */
    members_want_t w = {&n[0], "x"};
    int dead = -1;
    int64_t deadline = ct_time_ms() + 10000;
    while (dead < 0 && ct_time_ms() < deadline) {
        uv_run(&loop, UV_RUN_NOWAIT);
        CT_ASSERT(has_members(&w));
        for (int i = 0; i < 3; i++)
            if (strcmp(ctrun_etcd_group_endpoint(n[0].g), c.m[i].endpoint) == 0)
                dead = i;
        ct_sleep_ms(5);
    }
    CT_ASSERT_GE(dead, 0);
    etcd_member_kill(&c, dead);
    /* n[1] joins through the surviving members; n[0] sees it through its restarted watch. */
    char eps[256];
    snprintf(eps, sizeof eps, "%s,%s", c.m[(dead + 1) % 3].endpoint, c.m[(dead + 2) % 3].endpoint);
    group_join(&n[1], eps, "/job-c/", "y", 5, 0);
    CT_ASSERT_MSG(n[1].joined, "%s", n[1].error);
    wait_members(&n[0], "x,y", 15000);
    CT_ASSERT(!n[0].failed);
    CT_ASSERT_STR_NOT_CONTAINS(ctrun_etcd_group_endpoint(n[0].g), c.m[dead].endpoint);
    CT_ASSERT_NE(ctrun_etcd_group_endpoint(n[0].g)[0], '\0');
    close_all(n, 2);
    etcd_cluster_stop(&c);
}

/* A TCP proxy on 127.0.0.1 to one etcd member, on its own thread: bytes go through both ways,
 * except that the first connection to carry a POST of /v3/kv/txn is closed when etcd starts
 * answering it, so the client never sees that answer. */
#define PROXY_PAIRS 32
typedef struct proxy {
    int lfd, port, target;
    int cfd[PROXY_PAIRS], sfd[PROXY_PAIRS];
    bool drop[PROXY_PAIRS];
    int dropped; /* answers withheld */
    volatile bool stop;
    pthread_t thread;
} proxy_t;

static void proxy_close_pair(proxy_t *p, int i)
{
    close(p->cfd[i]);
    close(p->sfd[i]);
    p->cfd[i] = p->sfd[i] = -1;
}

static void *proxy_main(void *arg)
{
    proxy_t *p = arg;
    bool armed = true;
    char buf[65536];
    while (!p->stop) {
        struct pollfd fds[1 + 2 * PROXY_PAIRS];
        int map[1 + 2 * PROXY_PAIRS], nf = 0;
        fds[nf] = (struct pollfd){.fd = p->lfd, .events = POLLIN};
        map[nf++] = -1;
        for (int i = 0; i < PROXY_PAIRS; i++) {
            if (p->cfd[i] < 0)
                continue;
            fds[nf] = (struct pollfd){.fd = p->cfd[i], .events = POLLIN};
            map[nf++] = i;
            fds[nf] = (struct pollfd){.fd = p->sfd[i], .events = POLLIN};
            map[nf++] = PROXY_PAIRS + i;
        }
        if (poll(fds, (nfds_t)nf, 50) <= 0)
            continue;
        for (int k = 0; k < nf; k++) {
            if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (map[k] < 0) {
                int c = accept(p->lfd, NULL, NULL);
                int sfd = socket(AF_INET, SOCK_STREAM, 0);
                struct sockaddr_in a = {.sin_family = AF_INET,
                                        .sin_port = htons((uint16_t)p->target)};
                a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                int slot = -1;
                for (int i = 0; i < PROXY_PAIRS && slot < 0; i++)
                    if (p->cfd[i] < 0)
                        slot = i;
                if (c < 0 || sfd < 0 || slot < 0 ||
                    connect(sfd, (struct sockaddr *)&a, sizeof a) != 0) {
                    if (c >= 0)
                        close(c);
                    if (sfd >= 0)
                        close(sfd);
                    continue;
                }
                p->cfd[slot] = c;
                p->sfd[slot] = sfd;
                p->drop[slot] = false;
                continue;
            }
            int i = map[k] % PROXY_PAIRS;
            bool from_client = map[k] < PROXY_PAIRS;
            if (p->cfd[i] < 0)
                continue;
            ssize_t n = read(from_client ? p->cfd[i] : p->sfd[i], buf, sizeof buf);
            if (n <= 0) {
                proxy_close_pair(p, i);
                continue;
            }
            if (from_client && armed && memmem(buf, (size_t)n, "POST /v3/kv/txn", 15) != NULL) {
                armed = false;
                p->drop[i] = true;
            }
            if (!from_client && p->drop[i]) {
                p->dropped++;
                proxy_close_pair(p, i); /* etcd applied it; the client never learns */
                continue;
            }
            if (write(from_client ? p->sfd[i] : p->cfd[i], buf, (size_t)n) != n)
                proxy_close_pair(p, i);
        }
    }
    for (int i = 0; i < PROXY_PAIRS; i++)
        if (p->cfd[i] >= 0)
            proxy_close_pair(p, i);
    close(p->lfd);
    return NULL;
}

static void proxy_start(proxy_t *p, int target)
{
    memset(p, 0, sizeof *p);
    for (int i = 0; i < PROXY_PAIRS; i++)
        p->cfd[i] = p->sfd[i] = -1;
    p->target = target;
    p->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    CT_ASSERT(p->lfd >= 0 && bind(p->lfd, (struct sockaddr *)&a, sizeof a) == 0 &&
              listen(p->lfd, 16) == 0 && getsockname(p->lfd, (struct sockaddr *)&a, &len) == 0);
    p->port = ntohs(a.sin_port);
    CT_ASSERT_EQ(pthread_create(&p->thread, NULL, proxy_main, p), 0);
}

static void proxy_stop(proxy_t *p)
{
    p->stop = true;
    pthread_join(p->thread, NULL);
}

static void join_answer_lost(void)
{
    proxy_t px;
    proxy_start(&px, one.m[0].client_port);
    char ep[64];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", px.port);
    node_t n[1];
    group_join(&n[0], ep, "/lost-answer/", "a", 30, 0);
    CT_ASSERT_MSG(n[0].joined && !n[0].failed, "not joined: %s", n[0].error);
    CT_ASSERT_EQ(px.dropped, 1);
    CT_ASSERT_STR_EQ(n[0].members, "a");
    CT_ASSERT_EQ(n[0].self, 0);
    close_all(n, 1);
    proxy_stop(&px);
}

int main(void)
{
    CT_ASSERT_OK(uv_loop_init(&loop));
    CT_RUN(bad_options);
    CT_RUN(unreachable);
    etcd_cluster_start(&one, 1); /* skips (77) from here without etcd */
    CT_RUN(join_order_rounds_and_loss);
    CT_RUN(own_lease_expires);
    CT_RUN(changes_of_one_revision);
    CT_RUN(caller_keys_and_values);
    CT_RUN(watch_survives_etcd_member_loss);
    CT_RUN(join_answer_lost);
    etcd_cluster_stop(&one);
    CT_ASSERT_EQ(uv_loop_close(&loop), 0);
    return 0;
}
