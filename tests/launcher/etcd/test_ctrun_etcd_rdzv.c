/*
 * test_ctrun_etcd_rdzv.c - the rendezvous kept in etcd (launcher/agent/ctrun_etcd_rdzv.c) against
 * a real etcd (etcd_cluster.h), several nodes on one loop, each with its own clients: three
 * nodes of --nnodes 2:3 form one round at once with ranks in join order and the same plan; a
 * failure one node records reaches all and the next round counts a restart; a finished job
 * leaves no key behind; nodes started at once agree on one plan; two nodes of 2:3 form a round only
 * after the last call, and a failure with no restart left closes the rendezvous for both; a third
 * node arriving at a running round of two ends it with "rejoin" and joins the next one without a
 * restart used; a fourth node at a full round waits, and joins the round formed after a node stops
 * without a word (killed), which every other node reports as lost within the lease TTL plus slack;
 * a node alone past the join timeout gets one line naming etcd and the count; a three-member etcd
 * losing a member mid-round does not disturb the round.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "ct_test.h"
#include "ct_time.h"
#include "ctrun_etcd_rdzv.h"
#include "etcd_cluster.h"

typedef struct rnode {
    ctrun_etcd_rdzv_t *r;
    const char *id;
    int nrounds, nwaiting, nlost, nfailures, nended, nclosed, nerrors;
    int attempt;
    ctrun_rdzv_plan_t plan;
    char lost[128], failure[256], ended[256], closed[512], error[1024];
    int64_t lost_at_ms;
} rnode_t;

static uv_loop_t loop;

static void rdzv_on_event(void *data, const ctrun_etcd_rdzv_event_t *ev)
{
    rnode_t *n = data;
    n->attempt = ev->attempt;
    switch (ev->kind) {
    case CTRUN_ETCD_RDZV_ROUND:
        n->nrounds++;
        n->plan = *ev->plan;
        break;
    case CTRUN_ETCD_RDZV_WAITING:
        n->nwaiting++;
        break;
    case CTRUN_ETCD_RDZV_STORE:
        break;
    case CTRUN_ETCD_RDZV_LOST:
        n->nlost++;
        n->lost_at_ms = ct_time_ms();
        snprintf(n->lost, sizeof n->lost, "%s", ev->node);
        break;
    case CTRUN_ETCD_RDZV_FAILURE:
        n->nfailures++;
        snprintf(n->failure, sizeof n->failure, "%s: %s", ev->node, ev->text);
        break;
    case CTRUN_ETCD_RDZV_ENDED:
        n->nended++;
        snprintf(n->ended, sizeof n->ended, "%s", ev->text);
        break;
    case CTRUN_ETCD_RDZV_CLOSED:
        n->nclosed++;
        snprintf(n->closed, sizeof n->closed, "%s", ev->text);
        break;
    case CTRUN_ETCD_RDZV_ERROR:
        n->nerrors++;
        snprintf(n->error, sizeof n->error, "%s", ev->text);
        break;
    }
}

static void rdzv_on_wake(uv_timer_t *t)
{
    (void)t;
}

/* Runs the loop for ms milliseconds. */
static void run_for(int64_t ms)
{
    int64_t end = ct_time_ms() + ms;
    uv_timer_t t;
    uv_timer_init(&loop, &t);
    while (ct_time_ms() < end) {
        uv_timer_start(&t, rdzv_on_wake, 20, 0);
        uv_run(&loop, UV_RUN_ONCE);
    }
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&loop, UV_RUN_NOWAIT);
}

/* Runs the loop while cond holds, timeout_ms at most (then fails); returns the time taken. */
#define RUN_WHILE(cond, timeout_ms)                                               \
    ({                                                                            \
        int64_t run_t0_ = ct_time_ms();                                           \
        uv_timer_t run_wake_;                                                     \
        uv_timer_init(&loop, &run_wake_);                                         \
        while ((cond) && ct_time_ms() - run_t0_ < (timeout_ms)) {                 \
            uv_timer_start(&run_wake_, rdzv_on_wake, 20, 0);                      \
            uv_run(&loop, UV_RUN_ONCE);                                           \
        }                                                                         \
        uv_close((uv_handle_t *)&run_wake_, NULL);                                \
        uv_run(&loop, UV_RUN_NOWAIT);                                             \
        CT_ASSERT_MSG(!(cond), "still %s after %d ms", #cond, (int)(timeout_ms)); \
        ct_time_ms() - run_t0_;                                                   \
    })

typedef struct job {
    const char *endpoints, *run_id;
    int min, max, max_restarts;
    int64_t last_call_ms, join_timeout_ms, ttl_s;
} job_t;

static void rdzv_start(rnode_t *n, const job_t *j, const char *id)
{
    memset(n, 0, sizeof *n);
    n->id = id;
    n->attempt = -1;
    ctrun_etcd_rdzv_params_t p = {.etcd = {.endpoints = j->endpoints,
                                           .attempt_timeout_ms = 1000,
                                           .request_timeout_ms = 10000},
                                  .run_id = j->run_id,
                                  .id = id,
                                  .host = "testhost",
                                  .nproc = 2,
                                  .min_nodes = j->min,
                                  .max_nodes = j->max,
                                  .max_restarts = j->max_restarts,
                                  .last_call_ms = j->last_call_ms,
                                  .join_timeout_ms = j->join_timeout_ms,
                                  .ttl_s = j->ttl_s};
    ct_errbuf_t eb = {{0}};
    int rc = ctrun_etcd_rdzv_start(&loop, &p, rdzv_on_event, n, &n->r, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
}

static void close_all(rnode_t *n, int count, ctrun_etcd_rdzv_leave_t how)
{
    for (int i = 0; i < count; i++)
        ctrun_etcd_rdzv_close(n[i].r, how);
    CT_ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
}

static void raw_on_range(void *data, const ctrun_etcd_result_t *r)
{
    *(long *)data = r->rc == 0 ? (long)r->nkvs : -2;
}

/* How many keys etcd holds under prefix. */
static long keys_under(const char *endpoints, const char *prefix)
{
    ctrun_etcd_opts_t o = {.endpoints = endpoints};
    ctrun_etcd_t *e = NULL;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ctrun_etcd_create(&loop, &o, &e, &eb));
    long n = -1;
    CT_ASSERT_OK(ctrun_etcd_range(e, prefix, strlen(prefix), true, raw_on_range, &n));
    RUN_WHILE(n == -1, 10000);
    ctrun_etcd_destroy(e);
    uv_run(&loop, UV_RUN_NOWAIT);
    CT_ASSERT_GE(n, 0);
    return n;
}

/* Every node of a round sees the same plan; node i has group rank ranks[i]. */
static void check_round(rnode_t *n, int count, const int *ranks, int attempt, int restarts)
{
    for (int i = 0; i < count; i++) {
        CT_ASSERT_EQ(n[i].attempt, attempt);
        CT_ASSERT_EQ(n[i].plan.attempt, attempt);
        CT_ASSERT_EQ(n[i].plan.nnodes, count);
        CT_ASSERT_EQ(n[i].plan.world_size, 2 * count);
        CT_ASSERT_EQ(n[i].plan.restarts, restarts);
        CT_ASSERT_EQ(n[i].plan.local_world_size, 2);
        CT_ASSERT_MSG(n[i].plan.group_rank == ranks[i], "%s has group rank %d, not %d", n[i].id,
                      n[i].plan.group_rank, ranks[i]);
        CT_ASSERT_EQ(n[i].plan.rank_base, 2 * ranks[i]);
    }
}

static etcd_cluster_t one;

static void bad_params(void)
{
    job_t j = {.endpoints = "127.0.0.1:1", .run_id = "a/b", .min = 1, .max = 1, .ttl_s = 2};
    ctrun_etcd_rdzv_params_t p = {.etcd = {.endpoints = j.endpoints},
                                  .run_id = "a/b",
                                  .id = "x",
                                  .nproc = 1,
                                  .min_nodes = 1,
                                  .max_nodes = 1,
                                  .ttl_s = 2};
    ctrun_etcd_rdzv_t *r = NULL;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_ERR(ctrun_etcd_rdzv_start(&loop, &p, rdzv_on_event, NULL, &r, &eb), -EINVAL);
    CT_ASSERT_STR_CONTAINS(eb.msg, "run id 'a/b'");
    p.run_id = "job";
    p.min_nodes = 3;
    p.max_nodes = 2;
    CT_ASSERT_ERR(ctrun_etcd_rdzv_start(&loop, &p, rdzv_on_event, NULL, &r, &eb), -EINVAL);
    CT_ASSERT_STR_CONTAINS(eb.msg, "nnodes 3:2");
    p.min_nodes = 1;
    p.id = "x,y";
    CT_ASSERT_ERR(ctrun_etcd_rdzv_start(&loop, &p, rdzv_on_event, NULL, &r, &eb), -EINVAL);
    CT_ASSERT(r == NULL);
}

/* 2:3, three nodes: one round at once (long before the last call), ranks in join order. A
 * failure reaches every node, the next round counts a restart; a finished job's keys go. */
static void three_nodes_one_round(void)
{
    job_t j = {.endpoints = one.endpoints,
               .run_id = "three",
               .min = 2,
               .max = 3,
               .max_restarts = 3,
               .last_call_ms = 30000,
               .ttl_s = 5};
    rnode_t n[3];
    const char *ids[] = {"a", "b", "c"};
    int64_t t0 = ct_time_ms();
    for (int i = 0; i < 3; i++) {
        rdzv_start(&n[i], &j, ids[i]);
        run_for(150); /* join order a, b, c */
    }
    RUN_WHILE(n[0].nrounds < 1 || n[1].nrounds < 1 || n[2].nrounds < 1, 10000);
    CT_ASSERT_LT(ct_time_ms() - t0, 10000); /* MAX: not the 30 s last call */
    int ranks[] = {0, 1, 2};
    check_round(n, 3, ranks, 0, 0);
    run_for(200);
    for (int i = 0; i < 3; i++)
        CT_ASSERT(n[i].nrounds == 1 && n[i].nwaiting == 0 && n[i].nended == 0 && n[i].nerrors == 0);

    /* b records a failure: every node gets it and the round ends "failed 1". */
    CT_ASSERT_OK(ctrun_etcd_rdzv_failed(n[1].r, "{\"rank\": 2, \"exitcode\": 1}"));
    for (int i = 0; i < 3; i++) {
        RUN_WHILE(n[i].nended < 1 || n[i].nfailures < 1, 10000);
        CT_ASSERT_STR_EQ(n[i].ended, "failed 1");
        CT_ASSERT_STR_EQ(n[i].failure, "b: {\"rank\": 2, \"exitcode\": 1}");
    }
    /* Their workers gone, all three re-form at once (every live node ready): restart 1. */
    CT_ASSERT_OK(ctrun_etcd_rdzv_next(n[0].r));
    CT_ASSERT_OK(ctrun_etcd_rdzv_next(n[1].r));
    CT_ASSERT_OK(ctrun_etcd_rdzv_next(n[2].r));
    RUN_WHILE(n[0].nrounds < 2 || n[1].nrounds < 2 || n[2].nrounds < 2, 10000);
    check_round(n, 3, ranks, 1, 1);

    /* Everyone succeeds: the round ends "succeeded", the job closes, its keys go. */
    for (int i = 0; i < 3; i++)
        CT_ASSERT_OK(ctrun_etcd_rdzv_succeeded(n[i].r));
    for (int i = 0; i < 3; i++) {
        RUN_WHILE(n[i].nended < 2, 10000);
        CT_ASSERT_STR_EQ(n[i].ended, "succeeded");
    }
    CT_ASSERT_GT(keys_under(one.endpoints, "/ctrun/three/"), 0);
    close_all(n, 3, CTRUN_ETCD_RDZV_FINISH);
    CT_ASSERT_EQ(keys_under(one.endpoints, "/ctrun/three/"), 0);
}

/* 2:3, three nodes started at once (their proposals race): one plan, ranks 0, 1 and 2 once each. */
static void concurrent_starts(void)
{
    job_t j = {.endpoints = one.endpoints,
               .run_id = "race",
               .min = 2,
               .max = 3,
               .max_restarts = 0,
               .last_call_ms = 0, /* everyone proposes as soon as MIN are ready */
               .ttl_s = 5};
    rnode_t n[3];
    const char *ids[] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++)
        rdzv_start(&n[i], &j, ids[i]);
    RUN_WHILE(n[0].nrounds + n[0].nwaiting < 1 || n[1].nrounds + n[1].nwaiting < 1 ||
                  n[2].nrounds + n[2].nwaiting < 1,
              10000);
    run_for(300);
    int seen = 0, in = 0;
    for (int i = 0; i < 3; i++) {
        if (n[i].nrounds == 0)
            continue;
        in++;
        CT_ASSERT_EQ(n[i].nrounds, 1);
        CT_ASSERT(n[i].plan.group_rank >= 0 && n[i].plan.group_rank < 3);
        CT_ASSERT_MSG(!(seen & (1 << n[i].plan.group_rank)), "group rank %d given twice",
                      n[i].plan.group_rank);
        seen |= 1 << n[i].plan.group_rank;
        CT_ASSERT_EQ(n[i].plan.attempt, 0);
    }
    for (int i = 0; i < 3; i++)
        if (n[i].nrounds == 1)
            CT_ASSERT_EQ(n[i].plan.nnodes, in);
    CT_ASSERT_GE(in, 2);
    CT_ASSERT_EQ(seen, (1 << in) - 1);
    close_all(n, 3, CTRUN_ETCD_RDZV_FINISH);
    CT_ASSERT_EQ(keys_under(one.endpoints, "/ctrun/race/"), 0);
}

/* 2:3, two nodes: the round forms only once the last call has passed. */
static void two_nodes_after_last_call(void)
{
    job_t j = {.endpoints = one.endpoints,
               .run_id = "two",
               .min = 2,
               .max = 3,
               .max_restarts = 0,
               .last_call_ms = 1500,
               .ttl_s = 5};
    rnode_t n[2];
    rdzv_start(&n[0], &j, "a");
    run_for(150);
    rdzv_start(&n[1], &j, "b");
    int64_t t0 = ct_time_ms();
    run_for(1000);
    CT_ASSERT_EQ(n[0].nrounds + n[1].nrounds, 0); /* not before the last call */
    RUN_WHILE(n[0].nrounds < 1 || n[1].nrounds < 1, 10000);
    int64_t took = ct_time_ms() - t0;
    CT_ASSERT_GE(took, 1300);
    printf("# two of 2:3 nodes formed a round %lld ms after the second joined (last call 1.5 s)\n",
           (long long)took);
    int ranks[] = {0, 1};
    check_round(n, 2, ranks, 0, 0);

    /* A failure with no restart left (max_restarts 0): no further round, every node is told. */
    CT_ASSERT_OK(ctrun_etcd_rdzv_failed(n[0].r, "boom"));
    /* Both learn the end before either asks for the next round: once one has asked, the
     * rendezvous closes, and a node that has seen it closed has no next round to ask for. */
    RUN_WHILE(n[0].nended < 1 || n[1].nended < 1, 10000);
    for (int i = 0; i < 2; i++) {
        CT_ASSERT_STR_EQ(n[i].ended, "failed 0");
        CT_ASSERT_OK(ctrun_etcd_rdzv_next(n[i].r));
    }
    for (int i = 0; i < 2; i++) {
        RUN_WHILE(n[i].nclosed < 1, 10000);
        CT_ASSERT_STR_EQ(n[i].closed, "the job failed with no restart left (--max_restarts=0)");
        CT_ASSERT_EQ(n[i].nrounds, 1);
    }
    close_all(n, 2, CTRUN_ETCD_RDZV_FINISH);
    CT_ASSERT_EQ(keys_under(one.endpoints, "/ctrun/two/"), 0);
}

/* 2:3 running with two nodes: a third arrives, waits, ends the round with "rejoin" and is in
 * the next one, which uses up no restart. */
static void scale_up_without_restart(void)
{
    job_t j = {.endpoints = one.endpoints,
               .run_id = "up",
               .min = 2,
               .max = 3,
               .max_restarts = 0,
               .last_call_ms = 300,
               .ttl_s = 5};
    rnode_t n[3];
    rdzv_start(&n[0], &j, "a");
    run_for(150);
    rdzv_start(&n[1], &j, "b");
    RUN_WHILE(n[0].nrounds < 1 || n[1].nrounds < 1, 10000);
    rdzv_start(&n[2], &j, "c");
    RUN_WHILE(n[2].nwaiting < 1 || n[0].nended < 1 || n[1].nended < 1, 10000);
    CT_ASSERT_STR_EQ(n[0].ended, "rejoin c");
    CT_ASSERT_EQ(n[2].nrounds, 0);
    CT_ASSERT_OK(ctrun_etcd_rdzv_next(n[0].r));
    CT_ASSERT_OK(ctrun_etcd_rdzv_next(n[1].r));
    RUN_WHILE(n[0].nrounds < 2 || n[1].nrounds < 2 || n[2].nrounds < 1, 10000);
    int ranks[] = {0, 1, 2};
    check_round(n, 3, ranks, 1, 0); /* max_restarts 0, restarts still 0 */
    close_all(n, 3, CTRUN_ETCD_RDZV_FINISH);
}

/* 2:3 full: a fourth node waits without disturbing the round; a node killed (its lease expires)
 * is reported lost by every other node within TTL + slack, and the fourth is in the next round. */
static void fourth_waits_and_lost_node(void)
{
    job_t j = {.endpoints = one.endpoints,
               .run_id = "lost",
               .min = 2,
               .max = 3,
               .max_restarts = 1,
               .last_call_ms = 30000,
               .ttl_s = 2};
    rnode_t n[4];
    const char *ids[] = {"a", "b", "c", "d"};
    for (int i = 0; i < 3; i++) {
        rdzv_start(&n[i], &j, ids[i]);
        run_for(150);
    }
    RUN_WHILE(n[0].nrounds < 1 || n[1].nrounds < 1 || n[2].nrounds < 1, 10000);
    rdzv_start(&n[3], &j, "d");
    RUN_WHILE(n[3].nwaiting < 1, 10000);
    run_for(1000);
    for (int i = 0; i < 4; i++)
        CT_ASSERT_MSG(n[i].nended == 0, "%s: the round ended \"%s\"", ids[i], n[i].ended);

    /* b stops without a word, as if killed. */
    int64_t t0 = ct_time_ms();
    ctrun_etcd_rdzv_close(n[1].r, CTRUN_ETCD_RDZV_SILENT);
    int others[] = {0, 2, 3};
    for (int k = 0; k < 3; k++) {
        rnode_t *x = &n[others[k]];
        RUN_WHILE(x->nlost < 1 || x->nended < 1, 8000);
        CT_ASSERT_STR_EQ(x->lost, "b");
        CT_ASSERT_STR_EQ(x->ended, "lost b");
        CT_ASSERT_LE(x->lost_at_ms - t0, 2000 + 3000); /* TTL 2 s + slack */
        CT_ASSERT_GE(x->lost_at_ms - t0, 1000);
    }
    printf("# a killed node was reported lost after %lld ms (lease TTL 2 s)\n",
           (long long)(n[0].lost_at_ms - t0));
    CT_ASSERT_OK(ctrun_etcd_rdzv_next(n[0].r));
    CT_ASSERT_OK(ctrun_etcd_rdzv_next(n[2].r));
    RUN_WHILE(n[0].nrounds < 2 || n[2].nrounds < 2 || n[3].nrounds < 1, 10000);
    rnode_t round[3] = {n[0], n[2], n[3]};
    int ranks[] = {0, 1, 2};
    check_round(round, 3, ranks, 1, 1); /* the loss used up a restart */
    for (int k = 0; k < 3; k++)
        ctrun_etcd_rdzv_close(n[others[k]].r, CTRUN_ETCD_RDZV_FINISH);
    CT_ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
    CT_ASSERT_EQ(keys_under(one.endpoints, "/ctrun/lost/"), 0);
}

/* 2:3 with one node: the join timeout ends it with one line naming etcd and the count. */
static void join_timeout(void)
{
    job_t j = {.endpoints = one.endpoints,
               .run_id = "alone",
               .min = 2,
               .max = 3,
               .last_call_ms = 100,
               .join_timeout_ms = 1000,
               .ttl_s = 5};
    rnode_t n;
    rdzv_start(&n, &j, "a");
    int64_t took = RUN_WHILE(n.nerrors < 1, 8000);
    CT_ASSERT_GE(took, 900);
    CT_ASSERT_EQ(n.nrounds, 0);
    char want[512];
    snprintf(want, sizeof want,
             "etcd rendezvous of attempt 0 timed out after 1 s: 1 node joined, fewer than the "
             "minimum of 2 (etcd %s, keys under /ctrun/alone/",
             one.endpoints);
    CT_ASSERT_STR_CONTAINS(n.error, want);
    CT_ASSERT(strchr(n.error, '\n') == NULL);
    close_all(&n, 1, CTRUN_ETCD_RDZV_FINISH);
    CT_ASSERT_EQ(keys_under(one.endpoints, "/ctrun/alone/"), 0);
}

/* A three-member etcd loses the member every client talks to first: the round goes on. */
static void etcd_member_loss(void)
{
    etcd_cluster_t c;
    etcd_cluster_start(&c, 3);
    job_t j = {.endpoints = c.endpoints,
               .run_id = "quorum",
               .min = 2,
               .max = 3,
               .max_restarts = 0,
               .last_call_ms = 30000,
               .ttl_s = 3};
    rnode_t n[3];
    const char *ids[] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        rdzv_start(&n[i], &j, ids[i]);
        run_for(150);
    }
    RUN_WHILE(n[0].nrounds < 1 || n[1].nrounds < 1 || n[2].nrounds < 1, 15000);
    etcd_member_kill(&c, 0);
    run_for(2 * 3000 + 1000); /* past two TTLs: keepalives and watches moved on */
    for (int i = 0; i < 3; i++)
        CT_ASSERT_MSG(n[i].nlost == 0 && n[i].nended == 0 && n[i].nerrors == 0,
                      "%s: lost %d, ended \"%s\", error \"%s\"", ids[i], n[i].nlost, n[i].ended,
                      n[i].error);
    for (int i = 0; i < 3; i++)
        CT_ASSERT_OK(ctrun_etcd_rdzv_succeeded(n[i].r));
    for (int i = 0; i < 3; i++) {
        RUN_WHILE(n[i].nended < 1, 15000);
        CT_ASSERT_STR_EQ(n[i].ended, "succeeded");
    }
    close_all(n, 3, CTRUN_ETCD_RDZV_FINISH);
    char rest[160];
    snprintf(rest, sizeof rest, "%s,%s", c.m[1].endpoint, c.m[2].endpoint);
    CT_ASSERT_EQ(keys_under(rest, "/ctrun/quorum/"), 0);
    etcd_cluster_stop(&c);
}

int main(void)
{
    CT_ASSERT_OK(uv_loop_init(&loop));
    CT_RUN(bad_params);
    etcd_cluster_start(&one, 1); /* skips (77) from here without etcd */
    CT_RUN(three_nodes_one_round);
    CT_RUN(concurrent_starts);
    CT_RUN(two_nodes_after_last_call);
    CT_RUN(scale_up_without_restart);
    CT_RUN(fourth_waits_and_lost_node);
    CT_RUN(join_timeout);
    CT_RUN(etcd_member_loss);
    etcd_cluster_stop(&one);
    CT_ASSERT_EQ(uv_loop_close(&loop), 0);
    return 0;
}
