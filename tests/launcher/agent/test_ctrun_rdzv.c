/*
 * test_ctrun_rdzv.c - the rendezvous protocol (launcher/agent/ctrun_rdzv.c) on one in-process
 * store: plan texts; two static agents with different worker counts agree on world size and rank
 * offsets; the coordinator wipes the workers' keys (and only those) before the next attempt;
 * a second agent with a taken node rank and an agent of another job are refused with a clear
 * reason; c10d ranks follow join order and an agent beyond the node count waits for a round with
 * room; an agent reaching the store over the network (helper threads) takes part like a local
 * one. Dynamic MIN:MAX: the last call closes a round of MIN nodes, a node arriving during a
 * running round asks it to restart ("rejoin", no restart used), the next round takes everyone
 * with ranks in join order; a node whose heartbeats stop is declared lost, the others re-form
 * (a restart used), and below MIN the rendezvous closes with the lost node's name.
 */
#include <string.h>

#include "ct_test.h"
#include "ctrun_kv.h"
#include "ctrun_rdzv.h"
#include "ctrun_store.h"

typedef struct party {
    ctrun_kv_t *kv;
    ctrun_rdzv_t r;
    ctrun_rdzv_result_t result;
} party_t;

static void rdzv_on_reply(void *data, const ctrun_kv_reply_t *reply)
{
    party_t *p = data;
    CT_ASSERT_EQ(CTRUN_TAG_OWNER(reply->tag), CTRUN_TAG_RDZV);
    if (p->result == CTRUN_RDZV_PENDING)
        p->result = ctrun_rdzv_on_reply(&p->r, reply);
}

typedef struct world {
    uv_loop_t loop;
    ctrun_store_t *store;
    ctrun_rdzv_coord_t coord;
} world_t;

static void on_left(void *data, int left)
{
    (void)data;
    CT_ASSERT(left >= 0);
}

static void world_init(world_t *w, const ctrun_rdzv_params_t *host_params)
{
    CT_ASSERT_OK(uv_loop_init(&w->loop));
    ct_errbuf_t eb = {{0}};
    ctrun_store_opts_t so = {.host = "127.0.0.1"};
    CT_ASSERT_OK(ctrun_store_create(&w->loop, &so, &w->store, &eb));
    CT_ASSERT_OK(
        ctrun_rdzv_coord_init(&w->coord, &w->loop, w->store, host_params, on_left, NULL, &eb));
}

static void world_close(world_t *w)
{
    ctrun_rdzv_coord_close(&w->coord);
    ctrun_store_close(w->store, NULL, NULL);
    CT_ASSERT_EQ(uv_run(&w->loop, UV_RUN_DEFAULT), 0);
    CT_ASSERT_OK(uv_loop_close(&w->loop));
}

static void party_open(world_t *w, party_t *p, const ctrun_rdzv_params_t *params, bool remote)
{
    memset(p, 0, sizeof *p);
    ct_errbuf_t eb = {{0}};
    if (remote) {
        ctrun_kv_remote_opts_t ko = {.host = "127.0.0.1",
                                     .port = ctrun_store_port(w->store),
                                     .connect_timeout_ms = 10000,
                                     .op_timeout_ms = 10000,
                                     .backoff_max_ms = 100};
        CT_ASSERT_OK(ctrun_kv_open_remote(&w->loop, &ko, rdzv_on_reply, p, &p->kv, &eb));
    } else {
        CT_ASSERT_OK(ctrun_kv_open_local(&w->loop, w->store, rdzv_on_reply, p, &p->kv, &eb));
    }
    ctrun_rdzv_init(&p->r, p->kv, params);
}

static void on_deadline(uv_timer_t *t)
{
    (void)t;
    CT_ASSERT_MSG(0, "rendezvous did not finish in time");
}

/* Starts attempt k on every party and runs the loop until none is pending. */
static void run_round(world_t *w, party_t **ps, int n, int attempt)
{
    for (int i = 0; i < n; i++) {
        ps[i]->result = CTRUN_RDZV_PENDING;
        CT_ASSERT_OK(ctrun_rdzv_start(&ps[i]->r, attempt));
    }
    uv_timer_t t;
    uv_timer_init(&w->loop, &t);
    uv_timer_start(&t, on_deadline, 30000, 0);
    for (;;) {
        bool pending = false;
        for (int i = 0; i < n; i++)
            pending = pending || ps[i]->result == CTRUN_RDZV_PENDING;
        if (!pending)
            break;
        uv_run(&w->loop, UV_RUN_ONCE);
    }
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&w->loop, UV_RUN_NOWAIT);
}

static void test_plan_text(void)
{
    char buf[256];
    int nproc[] = {2, 3, 1}, ids[] = {0, 4, 9};
    CT_ASSERT_OK(ctrun_rdzv_plan_text(4, 2, 3, 7, nproc, ids, buf, sizeof buf));
    CT_ASSERT_STR_EQ(
        buf, "attempt=4 nnodes=3 world_size=6 max_restarts=7 restarts=2 nproc=2,3,1 ids=0,4,9");
    ctrun_rdzv_plan_t p;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ctrun_rdzv_plan_parse(buf, 9, &p, &eb));
    CT_ASSERT_EQ(p.attempt, 4);
    CT_ASSERT_EQ(p.restarts, 2);
    CT_ASSERT_EQ(p.nnodes, 3);
    CT_ASSERT_EQ(p.world_size, 6);
    CT_ASSERT_EQ(p.max_restarts, 7);
    CT_ASSERT_EQ(p.group_rank, 2);
    CT_ASSERT_EQ(p.rank_base, 5);
    CT_ASSERT_EQ(p.local_world_size, 1);
    CT_ASSERT_OK(ctrun_rdzv_plan_parse(buf, 4, &p, &eb));
    CT_ASSERT_EQ(p.group_rank, 1);
    CT_ASSERT_EQ(p.rank_base, 2);
    /* A node the plan leaves out waits for the next round. */
    CT_ASSERT_OK(ctrun_rdzv_plan_parse(buf, 3, &p, &eb));
    CT_ASSERT_EQ(p.group_rank, -1);
    CT_ASSERT_ERR(ctrun_rdzv_plan_parse("closed the job has finished", 0, &p, &eb), CT_ESTATE);
    CT_ASSERT_STR_EQ(eb.msg, "the job has finished");
    CT_ASSERT_ERR(ctrun_rdzv_plan_parse("hello", 0, &p, &eb), CT_EPARSE);
    CT_ASSERT_ERR(ctrun_rdzv_plan_parse("attempt=0 nnodes=2 world_size=3 max_restarts=0 "
                                        "restarts=0 nproc=1,1 ids=0,1",
                                        0, &p, &eb),
                  CT_EMISMATCH);
    CT_ASSERT_ERR(
        ctrun_rdzv_plan_parse(
            "attempt=0 nnodes=2 world_size=2 max_restarts=0 restarts=0 nproc=1 ids=0", 0, &p, &eb),
        CT_EPARSE);
    CT_ASSERT_ERR(
        ctrun_rdzv_plan_parse(
            "attempt=0 nnodes=1 world_size=0 max_restarts=0 restarts=0 nproc=0 ids=0", 0, &p, &eb),
        CT_EPARSE);
    CT_ASSERT_ERR(
        ctrun_rdzv_plan_parse("attempt=0 nnodes=2 world_size=2 max_restarts=0 restarts=0 nproc=1,1",
                              0, &p, &eb),
        CT_EPARSE);
    CT_ASSERT_ERR(ctrun_rdzv_plan_parse("attempt=0 nnodes=2 world_size=2 max_restarts=0 "
                                        "restarts=0 nproc=1,1 ids=0,x",
                                        0, &p, &eb),
                  CT_EPARSE);
    char small[16];
    CT_ASSERT_ERR(ctrun_rdzv_plan_text(0, 0, 3, 0, nproc, ids, small, sizeof small), -ENAMETOOLONG);
}

static ctrun_rdzv_params_t params(ctrun_rdzv_kind_t kind, const char *run_id, int nnodes,
                                  int node_rank, int nproc)
{
    ctrun_rdzv_params_t p = {.kind = kind,
                             .run_id = run_id,
                             .nnodes = nnodes,
                             .node_rank = node_rank,
                             .nproc = nproc,
                             .max_restarts = 3,
                             .host = "testhost"};
    return p;
}

static void test_static_two_nodes_and_wipe(void)
{
    world_t w;
    ctrun_rdzv_params_t p0 = params(CTRUN_RDZV_KIND_STATIC, "job", 2, 0, 2);
    ctrun_rdzv_params_t p1 = params(CTRUN_RDZV_KIND_STATIC, "job", 2, 1, 3);
    p1.max_restarts = 9; /* the host's count wins */
    world_init(&w, &p0);
    party_t a, b;
    party_open(&w, &a, &p0, false);
    party_open(&w, &b, &p1, false);
    party_t *ps[] = {&b, &a}; /* node 1 first */
    run_round(&w, ps, 2, 0);
    CT_ASSERT_EQ(a.result, CTRUN_RDZV_COMPLETE);
    CT_ASSERT_EQ(b.result, CTRUN_RDZV_COMPLETE);
    CT_ASSERT_EQ(a.r.plan.world_size, 5);
    CT_ASSERT_EQ(b.r.plan.world_size, 5);
    CT_ASSERT_EQ(a.r.plan.rank_base, 0);
    CT_ASSERT_EQ(b.r.plan.rank_base, 2);
    CT_ASSERT_EQ(b.r.plan.group_rank, 1);
    CT_ASSERT_EQ(b.r.plan.nnodes, 2);
    CT_ASSERT_EQ(b.r.plan.max_restarts, 3);
    CT_ASSERT_EQ(b.r.plan.restarts, 0);

    /* Workers of attempt 0 leave keys and fail; attempt 1 starts on an empty worker key space
     * and counts a restart. */
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ctrun_store_set(w.store, "/ctrun/a/0/outcome", "failed 1", 8, &eb));
    CT_ASSERT_OK(ctrun_store_set(w.store, "init/", "2", 1, &eb));
    CT_ASSERT_OK(ctrun_store_set(w.store, "/default_pg/0//cpu//0", "id", 2, &eb));
    CT_ASSERT_OK(ctrun_store_set(w.store, "//worker/attempt_0/x", "y", 1, &eb));
    run_round(&w, ps, 2, 1);
    CT_ASSERT_EQ(a.result, CTRUN_RDZV_COMPLETE);
    CT_ASSERT_EQ(a.r.plan.attempt, 1);
    CT_ASSERT_EQ(a.r.plan.restarts, 1);
    ct_store_bytes_t v;
    CT_ASSERT_ERR(ctrun_store_get(w.store, "init/", &v), -ENOENT);
    CT_ASSERT_ERR(ctrun_store_get(w.store, "/default_pg/0//cpu//0", &v), -ENOENT);
    CT_ASSERT_ERR(ctrun_store_get(w.store, "//worker/attempt_0/x", &v), -ENOENT);
    CT_ASSERT_OK(ctrun_store_get(w.store, "/ctrun/job", &v));
    CT_ASSERT_OK(ctrun_store_get(w.store, "/ctrun/node/1", &v));
    CT_ASSERT_OK(ctrun_store_get(w.store, "/ctrun/a/1/go", &v));

    ctrun_kv_close(a.kv);
    ctrun_kv_close(b.kv);
    world_close(&w);
}

static void test_refusals(void)
{
    world_t w;
    ctrun_rdzv_params_t p0 = params(CTRUN_RDZV_KIND_STATIC, "job", 2, 0, 1);
    world_init(&w, &p0);
    party_t a, dup, other;
    party_open(&w, &a, &p0, false);
    /* a alone: it registers, counts in, and waits for node 1. */
    a.result = CTRUN_RDZV_PENDING;
    CT_ASSERT_OK(ctrun_rdzv_start(&a.r, 0));
    for (int i = 0; i < 20; i++)
        uv_run(&w.loop, UV_RUN_NOWAIT);
    CT_ASSERT_EQ(a.r.state, CTRUN_RDZV_GO);

    party_open(&w, &dup, &p0, false); /* node_rank 0 again */
    party_t *pd[] = {&dup};
    run_round(&w, pd, 1, 0);
    CT_ASSERT_EQ(dup.result, CTRUN_RDZV_ERROR);
    CT_ASSERT_STR_CONTAINS(dup.r.error, "group rank 0 is already taken by the agent with pid ");
    CT_ASSERT_STR_CONTAINS(dup.r.error, "on testhost");

    ctrun_rdzv_params_t po = params(CTRUN_RDZV_KIND_STATIC, "otherjob", 2, 1, 1);
    party_open(&w, &other, &po, false);
    party_t *po_[] = {&other};
    run_round(&w, po_, 1, 0);
    CT_ASSERT_EQ(other.result, CTRUN_RDZV_ERROR);
    CT_ASSERT_STR_CONTAINS(other.r.error, "the store belongs to another job: it has "
                                          "\"run_id=job backend=static nnodes=2\", this node was "
                                          "started with \"run_id=otherjob backend=static "
                                          "nnodes=2\"");
    ctrun_kv_close(a.kv);
    ctrun_kv_close(dup.kv);
    ctrun_kv_close(other.kv);
    world_close(&w);
}

static void test_c10d_join_order_and_remote(void)
{
    world_t w;
    ctrun_rdzv_params_t pc = params(CTRUN_RDZV_KIND_C10D, "cj", 2, 0, 2);
    world_init(&w, &pc);
    party_t a, b, late;
    party_open(&w, &a, &pc, true); /* through the network */
    party_open(&w, &b, &pc, false);
    /* b joins first: it gets group rank 0. */
    b.result = CTRUN_RDZV_PENDING;
    CT_ASSERT_OK(ctrun_rdzv_start(&b.r, 0));
    while (b.r.state != CTRUN_RDZV_GO)
        uv_run(&w.loop, UV_RUN_ONCE);
    party_t *pa[] = {&a};
    run_round(&w, pa, 1, 0);
    while (b.result == CTRUN_RDZV_PENDING)
        uv_run(&w.loop, UV_RUN_ONCE);
    CT_ASSERT_EQ(a.result, CTRUN_RDZV_COMPLETE);
    CT_ASSERT_EQ(b.result, CTRUN_RDZV_COMPLETE);
    CT_ASSERT_EQ(b.r.plan.group_rank, 0);
    CT_ASSERT_EQ(a.r.plan.group_rank, 1);
    CT_ASSERT_EQ(a.r.plan.rank_base, 2);
    CT_ASSERT_EQ(a.r.plan.world_size, 4);

    /* A third agent finds the round full: it waits for the next round, and since the running
     * round has no room, it asks for no restart. */
    party_open(&w, &late, &pc, false);
    late.result = CTRUN_RDZV_PENDING;
    CT_ASSERT_OK(ctrun_rdzv_start(&late.r, 0));
    while (!(late.r.state == CTRUN_RDZV_GO && late.r.attempt == 1))
        uv_run(&w.loop, UV_RUN_ONCE);
    for (int i = 0; i < 20; i++)
        uv_run(&w.loop, UV_RUN_NOWAIT);
    CT_ASSERT_EQ(late.result, CTRUN_RDZV_PENDING);
    CT_ASSERT(late.r.waited);
    CT_ASSERT_EQ(late.r.node_id, 2);
    ct_store_bytes_t v;
    CT_ASSERT_ERR(ctrun_store_get(w.store, "/ctrun/a/0/outcome", &v), -ENOENT);
    ctrun_kv_close(a.kv);
    ctrun_kv_close(b.kv);
    ctrun_kv_close(late.kv);
    world_close(&w);
}

/* The job ends while a third node (over the network) waits for room. The host writes the
 * "closed" plan and closes its store in the same loop turn, as an agent does at the end of a
 * job: closed gently, the waiting node reads why (its WAIT is answered, then its GET); closed
 * at once (a host that dies), it says that the store went away while it waited. */
static void test_waiting_node_learns_the_end(void)
{
    for (int gentle = 1; gentle >= 0; gentle--) {
        world_t w;
        ctrun_rdzv_params_t pc = params(CTRUN_RDZV_KIND_C10D, "end", 2, 0, 1);
        world_init(&w, &pc);
        party_t a, b, late;
        party_open(&w, &a, &pc, false);
        party_open(&w, &b, &pc, false);
        party_t *pab[] = {&a, &b};
        run_round(&w, pab, 2, 0);
        CT_ASSERT_EQ(a.result, CTRUN_RDZV_COMPLETE);
        CT_ASSERT_EQ(b.result, CTRUN_RDZV_COMPLETE);
        party_open(&w, &late, &pc, true);
        late.result = CTRUN_RDZV_PENDING;
        CT_ASSERT_OK(ctrun_rdzv_start(&late.r, 0));
        uint64_t deadline = uv_now(&w.loop) + 10000;
        while (!(late.r.state == CTRUN_RDZV_GO && late.r.attempt == 1)) {
            CT_ASSERT_MSG(uv_now(&w.loop) < deadline, "the third node did not start waiting");
            uv_run(&w.loop, UV_RUN_ONCE);
            uv_update_time(&w.loop);
        }
        /* Let its GET of round 1's plan reach the store and wait there. */
        while (1) {
            ctrun_store_stats_t st;
            ctrun_store_stats(w.store, &st);
            if (st.pending_waits > 0)
                break;
            CT_ASSERT_MSG(uv_now(&w.loop) < deadline, "the third node's wait never arrived");
            uv_run(&w.loop, UV_RUN_NOWAIT);
            uv_update_time(&w.loop);
        }
        ct_errbuf_t eb = {{0}};
        CT_ASSERT_OK(ctrun_store_set(w.store, "/ctrun/a/0/outcome", "succeeded", 9, &eb));
        ctrun_kv_close(a.kv);
        ctrun_kv_close(b.kv);
        ctrun_rdzv_coord_close(&w.coord);
        if (gentle)
            ctrun_store_close_gently(w.store, 10000, NULL, NULL);
        else
            ctrun_store_close(w.store, NULL, NULL);
        while (late.result == CTRUN_RDZV_PENDING) {
            CT_ASSERT_MSG(uv_now(&w.loop) < deadline + 10000, "the third node never learned");
            uv_run(&w.loop, UV_RUN_ONCE);
            uv_update_time(&w.loop);
        }
        CT_ASSERT_EQ(late.result, CTRUN_RDZV_ERROR);
        if (gentle)
            CT_ASSERT_STR_CONTAINS(late.r.error, "the rendezvous is closed: the job has finished");
        else
            CT_ASSERT_STR_CONTAINS(late.r.error, "the rendezvous store went away while this node "
                                                 "waited for room in the job");
        /* The lingering store closes as soon as its last client hangs up. */
        ctrun_kv_close(late.kv);
        CT_ASSERT_EQ(uv_run(&w.loop, UV_RUN_DEFAULT), 0);
        CT_ASSERT_OK(uv_loop_close(&w.loop));
    }
}

/* Heartbeats for the node ids whose bit is set in beating, every 50 ms. */
typedef struct beat {
    uv_timer_t t;
    world_t *w;
    unsigned beating;
} beat_t;

static void beat_cb(uv_timer_t *t)
{
    beat_t *b = t->data;
    ct_errbuf_t eb = {{0}};
    for (int id = 0; id < 8; id++) {
        if (b->beating & (1u << id)) {
            char key[64];
            snprintf(key, sizeof key, "/ctrun/hb/%d", id);
            CT_ASSERT_OK(ctrun_store_set(b->w->store, key, "1", 1, &eb));
        }
    }
}

/* Runs the loop until the store has key (10 s at most); returns its value in buf. */
static void wait_key(world_t *w, const char *key, char *buf, size_t size)
{
    uint64_t deadline = uv_now(&w->loop) + 10000;
    ct_store_bytes_t v;
    while (ctrun_store_get(w->store, key, &v) != 0) {
        CT_ASSERT_MSG(uv_now(&w->loop) < deadline, "no %s in time", key);
        uv_run(&w->loop, UV_RUN_ONCE);
        uv_update_time(&w->loop);
    }
    size_t n = v.len < size - 1 ? v.len : size - 1;
    memcpy(buf, v.data, n);
    buf[n] = '\0';
}

static void test_dynamic_last_call_and_scale_up(void)
{
    world_t w;
    ctrun_rdzv_params_t pd = params(CTRUN_RDZV_KIND_C10D, "dyn", 3, 0, 1);
    pd.min_nodes = 2;
    pd.last_call_ms = 300;
    world_init(&w, &pd);
    party_t a, b, c;
    ctrun_rdzv_params_t pa = pd, pb = pd, pc = pd;
    pb.nproc = 2;
    pc.nproc = 3;
    party_open(&w, &a, &pa, false);
    party_open(&w, &b, &pb, true);
    /* Two of 2:3 join: the round closes after the last call, with two nodes. */
    uint64_t t0 = uv_now(&w.loop);
    party_t *ps[] = {&a, &b};
    run_round(&w, ps, 2, 0);
    CT_ASSERT_EQ(a.result, CTRUN_RDZV_COMPLETE);
    CT_ASSERT_EQ(b.result, CTRUN_RDZV_COMPLETE);
    CT_ASSERT(uv_now(&w.loop) - t0 >= 250);
    CT_ASSERT_EQ(a.r.plan.nnodes, 2);
    CT_ASSERT_EQ(a.r.plan.world_size, 3);
    CT_ASSERT_EQ(a.r.plan.group_rank + b.r.plan.group_rank, 1);

    /* A third node arrives while round 0 runs: it waits, and round 0 is asked to re-form. */
    party_open(&w, &c, &pc, false);
    c.result = CTRUN_RDZV_PENDING;
    CT_ASSERT_OK(ctrun_rdzv_start(&c.r, 0));
    char out[128];
    wait_key(&w, "/ctrun/a/0/outcome", out, sizeof out);
    CT_ASSERT_STR_EQ(out, "rejoin 2");
    CT_ASSERT(c.r.waited);

    /* Round 1 takes all three at once (MAX), ranks in join order, no restart used. */
    run_round(&w, ps, 2, 1);
    while (c.result == CTRUN_RDZV_PENDING)
        uv_run(&w.loop, UV_RUN_ONCE);
    CT_ASSERT_EQ(c.result, CTRUN_RDZV_COMPLETE);
    party_t *all[] = {&a, &b, &c};
    int ranks = 0;
    for (int i = 0; i < 3; i++) {
        CT_ASSERT_EQ(all[i]->r.plan.attempt, 1);
        CT_ASSERT_EQ(all[i]->r.plan.restarts, 0);
        CT_ASSERT_EQ(all[i]->r.plan.nnodes, 3);
        CT_ASSERT_EQ(all[i]->r.plan.world_size, 6);
        CT_ASSERT_EQ(all[i]->r.plan.group_rank, all[i]->r.node_id);
        ranks |= 1 << all[i]->r.plan.group_rank;
    }
    CT_ASSERT_EQ(ranks, 7);
    CT_ASSERT_EQ(c.r.plan.rank_base, a.r.nproc + b.r.nproc);
    for (int i = 0; i < 3; i++)
        ctrun_kv_close(all[i]->kv);
    world_close(&w);
}

static void test_lost_node_reform_then_below_min(void)
{
    world_t w;
    ctrun_rdzv_params_t pd = params(CTRUN_RDZV_KIND_C10D, "loss", 3, 0, 1);
    pd.min_nodes = 2;
    pd.last_call_ms = 100;
    pd.heartbeat_timeout_ms = 400;
    world_init(&w, &pd);
    beat_t beat = {.w = &w, .beating = 7};
    uv_timer_init(&w.loop, &beat.t);
    beat.t.data = &beat;
    uv_timer_start(&beat.t, beat_cb, 50, 50);
    party_t a, b, c;
    party_open(&w, &a, &pd, false);
    party_open(&w, &b, &pd, false);
    party_open(&w, &c, &pd, false);
    party_t *ps[] = {&a, &b, &c};
    run_round(&w, ps, 3, 0);
    CT_ASSERT_EQ(a.r.plan.nnodes, 3);

    /* Node 2 stops beating: round 0 ends "lost", the two others re-form with a restart used. */
    beat.beating = 3;
    char out[128];
    wait_key(&w, "/ctrun/a/0/outcome", out, sizeof out);
    CT_ASSERT_STR_EQ(out, "lost 2 testhost");
    run_round(&w, ps, 2, 1);
    CT_ASSERT_EQ(a.result, CTRUN_RDZV_COMPLETE);
    CT_ASSERT_EQ(b.result, CTRUN_RDZV_COMPLETE);
    CT_ASSERT_EQ(a.r.plan.nnodes, 2);
    CT_ASSERT_EQ(a.r.plan.restarts, 1);
    CT_ASSERT_EQ(b.r.plan.group_rank, 1);

    /* Node 1 goes too: one node is left of a minimum of two, so the rendezvous closes. */
    beat.beating = 1;
    wait_key(&w, "/ctrun/a/1/outcome", out, sizeof out);
    CT_ASSERT_STR_EQ(out, "lost 1 testhost");
    party_t *pa[] = {&a};
    run_round(&w, pa, 1, 2);
    CT_ASSERT_EQ(a.result, CTRUN_RDZV_ERROR);
    CT_ASSERT_STR_CONTAINS(a.r.error, "the rendezvous is closed: node 1 (testhost) was lost; 1 "
                                      "node is left, fewer than the minimum of 2");
    uv_close((uv_handle_t *)&beat.t, NULL);
    for (int i = 0; i < 3; i++)
        ctrun_kv_close(ps[i]->kv);
    world_close(&w);
}

int main(void)
{
    CT_RUN(test_plan_text);
    CT_RUN(test_static_two_nodes_and_wipe);
    CT_RUN(test_refusals);
    CT_RUN(test_c10d_join_order_and_remote);
    CT_RUN(test_waiting_node_learns_the_end);
    CT_RUN(test_dynamic_last_call_and_scale_up);
    CT_RUN(test_lost_node_reform_then_below_min);
    return 0;
}
