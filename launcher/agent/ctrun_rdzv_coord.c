/*
 * ctrun_rdzv_coord.c - the rendezvous coordinator of ctrun_rdzv.h, run by the agent that hosts
 * the store, on the store's loop: it learns everything from store watches (node registrations,
 * heartbeats, ready lists, outcomes), decides when a round closes and who is in it, publishes
 * the plan, declares nodes whose heartbeats stopped lost, and asks a running round to restart
 * when a node waits to join and there is room.
 *
 * Heartbeats are timed with this process's monotonic clock when their writes arrive, so agents'
 * clocks never need to agree. A stalled loop (a stopped or overloaded host) would see every
 * heartbeat as late at once; a check that runs much later than scheduled therefore restarts
 * every node's clock instead of declaring anyone lost, and one that is merely late waits for
 * the next (timers run before the loop reads the heartbeats that arrived during the stall).
 *
 * Deliberately not here: the agents' side (ctrun_rdzv.c), writing outcomes other than "lost"
 * and "rejoin" (it reads them all: "left" takes the node out at once), and what agents do about
 * them (ctrun_agent_step.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_log.h"
#include "ctrun_rdzv.h"

struct ctrun_rdzv_node {
    bool registered, dead, wants, member;
    int nproc;
    int ready_round; /* the latest round it asked to be in, -1 none */
    uint64_t last_seen;
    char host[64];
};

/* Parsed offsets of the ready lists, by round (rounds are few: restarts plus rejoins). */
typedef struct ctrun_rdzv_coord__priv {
    size_t *parsed;
    int nrounds;
} ctrun_rdzv_coord__priv_t;

static ctrun_rdzv_coord__priv_t *ctrun_rdzv_coord__priv_of(ctrun_rdzv_coord_t *c)
{
    return (ctrun_rdzv_coord__priv_t *)c->priv;
}

static void ctrun_rdzv_coord__evaluate(ctrun_rdzv_coord_t *c);

static void ctrun_rdzv_coord__fail(ctrun_rdzv_coord_t *c, const char *what)
{
    snprintf(c->error, sizeof c->error, "%s", what);
    c->failed = true;
    if (c->on_left != NULL)
        c->on_left(c->data, -1);
}

static int64_t ctrun_rdzv_coord__num(ct_store_bytes_t v)
{
    char buf[32];
    size_t n = v.len < sizeof buf - 1 ? v.len : sizeof buf - 1;
    memcpy(buf, v.data, n);
    buf[n] = '\0';
    return strtoll(buf, NULL, 10);
}

/* The key of an event as a C string (truncated to the key limit). */
static void ctrun_rdzv_coord__key(const ctrun_store_event_t *ev, char *key)
{
    size_t n = ev->key.len < CTRUN_RDZV_KEY_MAX - 1 ? ev->key.len : CTRUN_RDZV_KEY_MAX - 1;
    memcpy(key, ev->key.data, n);
    key[n] = '\0';
}

/* The node with id, grown on demand; NULL for an id out of range or no memory. */
static ctrun_rdzv_node_t *ctrun_rdzv_coord__find_node(ctrun_rdzv_coord_t *c, int id)
{
    if (id < 0 || id >= CTRUN_RDZV_MAX_NODES * 16)
        return NULL;
    if (id >= c->nnode_slots) {
        int n = c->nnode_slots ? c->nnode_slots : 16;
        while (n <= id)
            n *= 2;
        ctrun_rdzv_node_t *g = realloc(c->nodes, (size_t)n * sizeof *g);
        if (g == NULL)
            return NULL;
        memset(g + c->nnode_slots, 0, (size_t)(n - c->nnode_slots) * sizeof *g);
        for (int i = c->nnode_slots; i < n; i++)
            g[i].ready_round = -1;
        c->nodes = g;
        c->nnode_slots = n;
    }
    return &c->nodes[id];
}

static bool ctrun_rdzv_coord__alive(const ctrun_rdzv_node_t *n)
{
    return n->registered && !n->dead;
}

/* Writes "closed <reason>" as the plan of round k unless it has one. */
static void ctrun_rdzv_coord__close_round(ctrun_rdzv_coord_t *c, int round, const char *reason)
{
    char key[CTRUN_RDZV_KEY_MAX], text[CT_ERRBUF_SIZE + 16];
    ctrun_rdzv_key(key, "a/%d/go", round);
    snprintf(text, sizeof text, "closed %s", reason);
    ct_store_bytes_t cur;
    ct_errbuf_t eb = {{0}};
    if (ctrun_store_compare_set(c->store, key, "", 0, text, strlen(text), &cur, &eb) != 0)
        ct_log_warn("rendezvous: cannot close round %d: %s", round, eb.msg);
}

void ctrun_rdzv_coord_shut(ctrun_rdzv_coord_t *c, const char *reason)
{
    if (c->closed || c->store == NULL)
        return;
    c->closed = true;
    if (c->timers_open)
        uv_timer_stop(&c->last_call_timer);
    ctrun_rdzv_coord__close_round(c, c->running ? c->round + 1 : c->round, reason);
}

/* Round c->round closes with the ready live nodes (at most nnodes, lowest ids first). */
static void ctrun_rdzv_coord__go(ctrun_rdzv_coord_t *c)
{
    int *ids = malloc((size_t)c->nnodes * sizeof *ids);
    int *nproc = malloc((size_t)c->nnodes * sizeof *nproc);
    size_t text_size = 160 + (size_t)c->nnodes * 24;
    char *text = malloc(text_size);
    char key[CTRUN_RDZV_KEY_MAX];
    if (ids == NULL || nproc == NULL || text == NULL) {
        free(ids);
        free(nproc);
        free(text);
        ctrun_rdzv_coord__fail(c, "out of memory for a rendezvous plan");
        return;
    }
    int n = 0;
    for (int id = 0; id < c->nnode_slots; id++) {
        ctrun_rdzv_node_t *nd = &c->nodes[id];
        nd->member = false;
        if (n < c->nnodes && ctrun_rdzv_coord__alive(nd) && nd->ready_round >= c->round) {
            nd->member = true;
            ids[n] = id;
            nproc[n] = nd->nproc;
            n++;
        }
    }
    uv_timer_stop(&c->last_call_timer);
    c->last_call = false;
    /* Every agent of the round is ready: their previous workers are gone, so the workers' key
     * space can be wiped without a late writer refilling it. */
    static const char *const keep[] = {CTRUN_RDZV_PREFIX};
    ctrun_store_wipe_except(c->store, keep, 1, NULL);
    ct_errbuf_t eb = {{0}};
    if (ctrun_rdzv_plan_text(c->round, c->restarts, n, c->max_restarts, nproc, ids, text,
                             text_size) != 0) {
        ctrun_rdzv_coord__fail(c, "a rendezvous plan does not fit its buffer");
    } else {
        ctrun_rdzv_key(key, "a/%d/go", c->round);
        c->running = true;
        c->plan_nnodes = n;
        ct_log_debug("rendezvous: round %d closed with %d nodes", c->round, n);
        if (ctrun_store_set(c->store, key, text, strlen(text), &eb) != 0) {
            char msg[CT_ERRBUF_SIZE];
            snprintf(msg, sizeof msg, "publishing the plan of round %d: %.400s", c->round, eb.msg);
            ctrun_rdzv_coord__fail(c, msg);
        }
    }
    free(ids);
    free(nproc);
    free(text);
}

/* Decides what the current round needs now. */
static void ctrun_rdzv_coord__evaluate(ctrun_rdzv_coord_t *c)
{
    if (c->closed || c->failed)
        return;
    int ready = 0, wanting = 0, waiting_id = -1;
    for (int id = 0; id < c->nnode_slots; id++) {
        const ctrun_rdzv_node_t *nd = &c->nodes[id];
        if (!ctrun_rdzv_coord__alive(nd) || !nd->wants)
            continue;
        wanting++;
        if (nd->ready_round >= c->round)
            ready++;
        if (c->running && !nd->member && waiting_id < 0)
            waiting_id = id;
    }
    if (c->running) {
        /* Scale up: a node waits and the running round has room. Torchrun restarts the group
         * for it without counting a restart; so does ctrun (see the agent). */
        if (waiting_id >= 0 && c->plan_nnodes < c->nnodes) {
            char key[CTRUN_RDZV_KEY_MAX], text[32];
            ctrun_rdzv_key(key, "a/%d/outcome", c->round);
            snprintf(text, sizeof text, "rejoin %d", waiting_id);
            ct_store_bytes_t cur;
            ct_errbuf_t eb = {{0}};
            ctrun_store_compare_set(c->store, key, "", 0, text, strlen(text), &cur, &eb);
        }
        return;
    }
    ctrun_rdzv_decision_t d =
        ctrun_rdzv_round_decide(c->round, ready, wanting, c->min_nodes, c->nnodes);
    if (d == CTRUN_RDZV_ROUND_CLOSE) {
        ctrun_rdzv_coord__go(c);
        return;
    }
    if (d == CTRUN_RDZV_ROUND_LAST_CALL && !c->last_call) {
        c->last_call = true;
        if (c->last_call_ms <= 0) {
            ctrun_rdzv_coord__go(c);
            return;
        }
        ct_log_debug("rendezvous: round %d has %d nodes (minimum %d); last call in %" PRId64 " ms",
                     c->round, ready, c->min_nodes, c->last_call_ms);
        uv_timer_start(&c->last_call_timer, c->last_call_timer.timer_cb, (uint64_t)c->last_call_ms,
                       0);
    }
}

static void ctrun_rdzv_coord__last_call_cb(uv_timer_t *t)
{
    ctrun_rdzv_coord_t *c = t->data;
    if (c->running || c->closed || c->failed)
        return;
    int ready = 0;
    for (int id = 0; id < c->nnode_slots; id++)
        ready += ctrun_rdzv_coord__alive(&c->nodes[id]) && c->nodes[id].wants &&
                 c->nodes[id].ready_round >= c->round;
    if (ready >= c->min_nodes)
        ctrun_rdzv_coord__go(c);
    else
        c->last_call = false; /* someone died meanwhile: the next MIN-th node restarts it */
}

/* Live nodes that want to be in the job. */
static int ctrun_rdzv_coord__wanting(const ctrun_rdzv_coord_t *c)
{
    int n = 0;
    for (int id = 0; id < c->nnode_slots; id++)
        n += ctrun_rdzv_coord__alive(&c->nodes[id]) && c->nodes[id].wants;
    return n;
}

static void ctrun_rdzv_coord__too_few(ctrun_rdzv_coord_t *c, const char *why)
{
    char msg[CT_ERRBUF_SIZE];
    int n = ctrun_rdzv_coord__wanting(c);
    snprintf(msg, sizeof msg, "%s; %d node%s left, fewer than the minimum of %d (--nnodes)", why, n,
             n == 1 ? " is" : "s are", c->min_nodes);
    ct_log_error("rendezvous: %s", msg);
    ctrun_rdzv_coord_shut(c, msg);
}

/* Round c->round ended with text: open the next one, or close the rendezvous. */
static void ctrun_rdzv_coord__outcome(ctrun_rdzv_coord_t *c, const char *text)
{
    c->running = false;
    bool counted = ctrun_rdzv_outcome_counts(text);
    bool over = ctrun_rdzv_outcome_final(text);
    /* A node that leaves (a signal to its agent in an elastic job) is out for good, at once. */
    int left_id = -1;
    char left_host[64] = "?";
    if (sscanf(text, "left %d %*d %63s", &left_id, left_host) >= 1 && left_id >= 0 &&
        left_id < c->nnode_slots)
        c->nodes[left_id].dead = true;
    c->round++;
    if (over) {
        ctrun_rdzv_coord_shut(c, strcmp(text, "succeeded") == 0 ? "the job has finished"
                                                                : "the job was stopped");
        return;
    }
    if (counted && c->restarts + 1 > c->max_restarts) {
        char msg[128];
        snprintf(msg, sizeof msg, "the job failed with no restart left (--max_restarts=%d)",
                 c->max_restarts);
        ctrun_rdzv_coord_shut(c, msg);
        return;
    }
    if (counted)
        c->restarts++;
    char key[CTRUN_RDZV_KEY_MAX], num[16];
    ctrun_rdzv_key(key, "round");
    snprintf(num, sizeof num, "%d", c->round);
    ct_errbuf_t eb = {{0}};
    ctrun_store_set(c->store, key, num, strlen(num), &eb);
    if (ctrun_rdzv_coord__wanting(c) < c->min_nodes) {
        int id = -1;
        char host[64] = "?";
        if (sscanf(text, "lost %d %63s", &id, host) == 2) {
            char why[160];
            snprintf(why, sizeof why, "node %d (%s) was lost", id, host);
            ctrun_rdzv_coord__too_few(c, why);
        } else if (left_id >= 0) {
            char why[160];
            snprintf(why, sizeof why, "node %d (%s) left the job", left_id, left_host);
            ctrun_rdzv_coord__too_few(c, why);
        } else {
            ctrun_rdzv_coord__too_few(c, "nodes were lost");
        }
        return;
    }
    ctrun_rdzv_coord__evaluate(c);
}

/* A node's heartbeats stopped. */
static void ctrun_rdzv_coord__lost(ctrun_rdzv_coord_t *c, int id, uint64_t silent_ms)
{
    ctrun_rdzv_node_t *nd = &c->nodes[id];
    nd->dead = true;
    ct_log_error("rendezvous: node %d (%s) is lost: no heartbeat for %.1f s (heartbeat_timeout "
                 "%.1f s)",
                 id, nd->host, (double)silent_ms / 1000.0,
                 (double)c->heartbeat_timeout_ms / 1000.0);
    if (c->closed || c->failed)
        return;
    if (c->running) {
        if (!nd->member)
            return;
        char key[CTRUN_RDZV_KEY_MAX], text[128];
        ctrun_rdzv_key(key, "a/%d/outcome", c->round);
        snprintf(text, sizeof text, "lost %d %s", id, nd->host);
        ct_store_bytes_t cur;
        ct_errbuf_t eb = {{0}};
        ctrun_store_compare_set(c->store, key, "", 0, text, strlen(text), &cur, &eb);
        return;
    }
    if (c->round > 0 && nd->wants && ctrun_rdzv_coord__wanting(c) < c->min_nodes) {
        char why[160];
        snprintf(why, sizeof why, "node %d (%s) was lost", id, nd->host);
        ctrun_rdzv_coord__too_few(c, why);
        return;
    }
    ctrun_rdzv_coord__evaluate(c);
}

static void ctrun_rdzv_coord__check_cb(uv_timer_t *t)
{
    ctrun_rdzv_coord_t *c = t->data;
    uint64_t now = uv_now(c->loop);
    uint64_t period = uv_timer_get_repeat(t);
    if (c->last_check_ms != 0 &&
        now - c->last_check_ms > period + (uint64_t)c->heartbeat_timeout_ms / 2) {
        /* This loop stood still: nobody's silence can be judged. */
        for (int id = 0; id < c->nnode_slots; id++)
            c->nodes[id].last_seen = now;
        c->last_check_ms = now;
        return;
    }
    bool late = c->last_check_ms != 0 && now - c->last_check_ms > 2 * period;
    c->last_check_ms = now;
    /* A late check runs before the loop has read what arrived meanwhile: judge next time. */
    if (late)
        return;
    for (int id = 0; id < c->nnode_slots; id++) {
        ctrun_rdzv_node_t *nd = &c->nodes[id];
        if (ctrun_rdzv_coord__alive(nd) && now - nd->last_seen > (uint64_t)c->heartbeat_timeout_ms)
            ctrun_rdzv_coord__lost(c, id, now - nd->last_seen);
    }
}

/* ---- watches ------------------------------------------------------------------------------ */

/* "/ctrun/a/<k>/ready" (new lines only) and "/ctrun/a/<k>/outcome". */
static void ctrun_rdzv_coord__on_a(ctrun_store_t *s, const ctrun_store_event_t *ev, void *data)
{
    ctrun_rdzv_coord_t *c = data;
    (void)s;
    if (ev->kind == CT_STORE_WATCH_DELETED)
        return;
    char key[CTRUN_RDZV_KEY_MAX], what[16] = "";
    ctrun_rdzv_coord__key(ev, key);
    int round = -1, used = 0;
    if (sscanf(key, CTRUN_RDZV_PREFIX "a/%d/%15[a-z]%n", &round, what, &used) != 2 ||
        key[used] != '\0' || round < 0)
        return;
    if (strcmp(what, "outcome") == 0) {
        if (round == c->round && c->running && !c->closed) {
            char text[256];
            size_t n = ev->value.len < sizeof text - 1 ? ev->value.len : sizeof text - 1;
            memcpy(text, ev->value.data, n);
            text[n] = '\0';
            ctrun_rdzv_coord__outcome(c, text);
        }
        return;
    }
    if (strcmp(what, "ready") != 0)
        return;
    ctrun_rdzv_coord__priv_t *pv = ctrun_rdzv_coord__priv_of(c);
    if (round >= pv->nrounds) {
        int n = pv->nrounds ? pv->nrounds : 8;
        while (n <= round)
            n *= 2;
        size_t *g = realloc(pv->parsed, (size_t)n * sizeof *g);
        if (g == NULL) {
            ctrun_rdzv_coord__fail(c, "out of memory in the rendezvous coordinator");
            return;
        }
        memset(g + pv->nrounds, 0, (size_t)(n - pv->nrounds) * sizeof *g);
        pv->parsed = g;
        pv->nrounds = n;
    }
    /* Appends only grow the value: read the lines after what was read before. */
    const char *v = (const char *)ev->value.data;
    size_t len = ev->value.len, at = pv->parsed[round];
    if (at > len)
        at = 0;
    while (at < len) {
        const char *nl = memchr(v + at, '\n', len - at);
        if (nl == NULL)
            break;
        char line[64];
        size_t n = (size_t)(nl - (v + at));
        if (n < sizeof line) {
            memcpy(line, v + at, n);
            line[n] = '\0';
            int id = -1, nproc = 0;
            ctrun_rdzv_node_t *nd = NULL;
            if (sscanf(line, "%d %d", &id, &nproc) == 2 && nproc >= 1 &&
                (nd = ctrun_rdzv_coord__find_node(c, id)) != NULL && nd->registered && !nd->dead) {
                nd->wants = true;
                nd->nproc = nproc;
                if (round > nd->ready_round)
                    nd->ready_round = round;
            }
        }
        at = (size_t)(nl - v) + 1;
    }
    pv->parsed[round] = at;
    ctrun_rdzv_coord__evaluate(c);
}

/* "/ctrun/node/<id>": "<nproc> <pid> <nonce> <host>". */
static void ctrun_rdzv_coord__on_node(ctrun_store_t *s, const ctrun_store_event_t *ev, void *data)
{
    ctrun_rdzv_coord_t *c = data;
    (void)s;
    if (ev->kind == CT_STORE_WATCH_DELETED)
        return;
    char key[CTRUN_RDZV_KEY_MAX], val[256];
    ctrun_rdzv_coord__key(ev, key);
    int id = -1, used = 0;
    if (sscanf(key, CTRUN_RDZV_PREFIX "node/%d%n", &id, &used) != 1 || key[used] != '\0')
        return;
    ctrun_rdzv_node_t *nd = ctrun_rdzv_coord__find_node(c, id);
    if (nd == NULL || nd->registered)
        return;
    size_t n = ev->value.len < sizeof val - 1 ? ev->value.len : sizeof val - 1;
    memcpy(val, ev->value.data, n);
    val[n] = '\0';
    int nproc = 0, pid = 0;
    char nonce[32] = "", host[64] = "?";
    if (sscanf(val, "%d %d %31s %63s", &nproc, &pid, nonce, host) < 1)
        return;
    nd->registered = true;
    nd->nproc = nproc;
    nd->last_seen = uv_now(c->loop);
    snprintf(nd->host, sizeof nd->host, "%s", host);
}

/* "/ctrun/hb/<id>". */
static void ctrun_rdzv_coord__on_hb(ctrun_store_t *s, const ctrun_store_event_t *ev, void *data)
{
    ctrun_rdzv_coord_t *c = data;
    (void)s;
    char key[CTRUN_RDZV_KEY_MAX];
    ctrun_rdzv_coord__key(ev, key);
    int id = -1, used = 0;
    if (sscanf(key, CTRUN_RDZV_PREFIX "hb/%d%n", &id, &used) != 1 || key[used] != '\0' || id < 0 ||
        id >= c->nnode_slots)
        return;
    if (ctrun_rdzv_coord__alive(&c->nodes[id]))
        c->nodes[id].last_seen = uv_now(c->loop);
}

static void ctrun_rdzv_coord__on_left(ctrun_store_t *s, const ctrun_store_event_t *ev, void *data)
{
    ctrun_rdzv_coord_t *c = data;
    (void)s;
    if (ev->kind == CT_STORE_WATCH_DELETED)
        return;
    c->left = (int)ctrun_rdzv_coord__num(ev->value);
    if (c->on_left != NULL)
        c->on_left(c->data, c->left);
}

int ctrun_rdzv_coord_init(ctrun_rdzv_coord_t *c, uv_loop_t *loop, ctrun_store_t *store,
                          const ctrun_rdzv_params_t *params, void (*on_left)(void *, int),
                          void *data, ct_errbuf_t *eb)
{
    memset(c, 0, sizeof *c);
    c->priv = calloc(1, sizeof(ctrun_rdzv_coord__priv_t));
    if (c->priv == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    c->store = store;
    c->loop = loop;
    c->kind = params->kind;
    c->nnodes = params->nnodes;
    c->min_nodes = params->kind == CTRUN_RDZV_KIND_STATIC || params->min_nodes < 1
                       ? params->nnodes
                       : params->min_nodes;
    c->max_restarts = params->max_restarts;
    c->last_call_ms = params->last_call_ms;
    c->heartbeat_timeout_ms = params->heartbeat_timeout_ms;
    c->on_left = on_left;
    c->data = data;
    uv_timer_init(loop, &c->last_call_timer);
    uv_timer_init(loop, &c->check_timer);
    c->last_call_timer.data = c->check_timer.data = c;
    c->last_call_timer.timer_cb = ctrun_rdzv_coord__last_call_cb;
    c->timers_open = true;

    char key[CTRUN_RDZV_KEY_MAX], job[512];
    ctrun_rdzv_job_text(params, job, sizeof job);
    ctrun_rdzv_key(key, "job");
    int rc = ctrun_store_set(store, key, job, strlen(job), eb);
    if (rc == 0) {
        ctrun_rdzv_key(key, "round");
        rc = ctrun_store_set(store, key, "0", 1, eb);
    }
    struct {
        const char *name;
        bool prefix;
        ctrun_store_watch_cb cb;
        ctrun_store_watch_t **out;
    } watches[] = {
        {"node/", true, ctrun_rdzv_coord__on_node, &c->node_watch},
        {"hb/", true, ctrun_rdzv_coord__on_hb, &c->hb_watch},
        {"a/", true, ctrun_rdzv_coord__on_a, &c->ready_watch},
        {"left", false, ctrun_rdzv_coord__on_left, &c->left_watch},
    };
    for (size_t i = 0; rc == 0 && i < sizeof watches / sizeof watches[0]; i++) {
        ctrun_rdzv_key(key, "%s", watches[i].name);
        rc = ctrun_store_watch(store, key, watches[i].prefix, watches[i].cb, c, watches[i].out, eb);
    }
    if (rc == 0 && c->heartbeat_timeout_ms > 0) {
        /* A node is declared lost at most one period after its timeout. */
        uint64_t period = (uint64_t)c->heartbeat_timeout_ms / 10;
        if (period < 50)
            period = 50;
        if (period > 250)
            period = 250;
        uv_timer_start(&c->check_timer, ctrun_rdzv_coord__check_cb, period, period);
    }
    if (rc != 0)
        ctrun_rdzv_coord_close(c);
    return rc;
}

static void ctrun_rdzv_coord__timer_closed(uv_handle_t *h)
{
    (void)h;
}

void ctrun_rdzv_coord_close(ctrun_rdzv_coord_t *c)
{
    ctrun_store_watch_t **ws[] = {&c->ready_watch, &c->left_watch, &c->node_watch, &c->hb_watch};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
        if (*ws[i] != NULL)
            ctrun_store_unwatch(c->store, *ws[i]);
        *ws[i] = NULL;
    }
    if (c->timers_open) {
        uv_close((uv_handle_t *)&c->last_call_timer, ctrun_rdzv_coord__timer_closed);
        uv_close((uv_handle_t *)&c->check_timer, ctrun_rdzv_coord__timer_closed);
        c->timers_open = false;
    }
    free(c->nodes);
    c->nodes = NULL;
    c->nnode_slots = 0;
    ctrun_rdzv_coord__priv_t *pv = c->priv;
    if (pv != NULL) {
        free(pv->parsed);
        free(pv);
    }
    c->priv = NULL;
}
