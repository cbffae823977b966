/*
 * ctrun_etcd_rdzv.c - the rendezvous of ctrun_etcd_rdzv.h: a cached view of the group (members
 * with their nproc and done attempt, the latest round's plan and outcome), one function that
 * decides from it what this node does next (ctrun_etcd_rdzv__evaluate), the last-call and join
 * timers, and the writes of outcomes, failures and the job's removal through a client of its
 * own (the group keeps its own for membership, the round and the watch).
 *
 * Lifetime: after ctrun_etcd_rdzv_close nothing calls back; the rendezvous is freed when its
 * leaving requests are done and both timers are closed.
 *
 * Not here: the rules themselves (ctrun_rdzv.c: round decisions, restart counting, plan texts),
 * membership and the watch (ctrun_etcd_group.c).
 */
#include "ctrun_etcd_rdzv.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_log.h"
#include "ctrun_etcd_group.h"

#define CTRUN_ETCD_RDZV__KEY_MAX 768

typedef struct ctrun_etcd_rdzv__member {
    char *id;
    int nproc, done;
} ctrun_etcd_rdzv__member_t;

struct ctrun_etcd_rdzv {
    uv_loop_t *loop;
    ctrun_etcd_group_t *g;
    ctrun_etcd_t *etcd;
    ctrun_etcd_rdzv_cb cb;
    void *data;
    char prefix[256]; /* "/ctrun/<run_id>/", run ids of 200 bytes at most */
    char endpoints[1024];
    char *id, *host;
    int nproc, min_nodes, max_nodes, max_restarts;
    int64_t last_call_ms, join_timeout_ms;
    uv_timer_t last_call_timer, join_timer;
    int open_timers;
    bool joined, errored, closing, last_call_running, last_call_expired;
    int done; /* the latest attempt this node has left behind */
    ctrun_etcd_rdzv__member_t *members;
    size_t nmembers;
    /* the latest round */
    int64_t round; /* attempt + 1; 0 before the first */
    bool closed;
    char *closed_reason;
    char **plan_ids;
    int plan_n, plan_restarts;
    bool *plan_lost, *plan_ok;
    ctrun_rdzv_plan_t plan; /* this node's view */
    char *outcome;          /* NULL while the round runs */
    char *store;            /* the round's workers' store ("host:port"), NULL until published */
    bool told_store;
    bool told_round, told_waiting, told_closed, asked_rejoin, asked_close;
    /* A proposal is made against the round this node saw (proposal_base); once etcd decided it
     * (won or lost), the round key has changed: no new proposal until the watch brings the new
     * round (its PROPOSED may come before or after that ROUND). */
    int64_t proposal_base, decided_base;
    int leaving;   /* requests of close still out */
    ctrun_etcd_rdzv_leave_t leave;
    int64_t lease;
};

/* ---- events -------------------------------------------------------------------------------- */

static int ctrun_etcd_rdzv__attempt(const ctrun_etcd_rdzv_t *r)
{
    return (int)r->round - 1;
}

static void ctrun_etcd_rdzv__emit(ctrun_etcd_rdzv_t *r, ctrun_etcd_rdzv_event_kind_t kind,
                                  const char *node, const char *text, int rc)
{
    if (r->closing || r->errored)
        return;
    if (kind == CTRUN_ETCD_RDZV_ERROR) {
        r->errored = true;
        uv_timer_stop(&r->last_call_timer);
        uv_timer_stop(&r->join_timer);
    }
    ctrun_etcd_rdzv_event_t ev = {.kind = kind,
                                  .attempt = ctrun_etcd_rdzv__attempt(r),
                                  .plan = kind == CTRUN_ETCD_RDZV_ROUND ? &r->plan : NULL,
                                  .node = node ? node : "",
                                  .text = text ? text : "",
                                  .rc = rc};
    r->cb(r->data, &ev);
}

__attribute__((format(printf, 3, 4))) static void
ctrun_etcd_rdzv__error(ctrun_etcd_rdzv_t *r, int rc, const char *fmt, ...)
{
    char line[CT_ERRBUF_SIZE * 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    ctrun_etcd_rdzv__emit(r, CTRUN_ETCD_RDZV_ERROR, NULL, line, rc);
}

/* ---- writes -------------------------------------------------------------------------------- */

static void ctrun_etcd_rdzv__on_written(void *data, const ctrun_etcd_result_t *res)
{
    ctrun_etcd_rdzv_t *r = data;
    if (res->rc != 0 && !r->closing)
        ct_log_warn("etcd rendezvous: a write under %s failed: %s", r->prefix, res->error);
}

/* Puts <prefix>a/<attempt>/outcome = text unless it exists; with extra (key suffix and value),
 * that key is put in any case, in the same transaction. */
static int ctrun_etcd_rdzv__write_outcome(ctrun_etcd_rdzv_t *r, const char *text,
                                          const char *extra_key, const char *extra_value)
{
    char key[CTRUN_ETCD_RDZV__KEY_MAX], ekey[CTRUN_ETCD_RDZV__KEY_MAX];
    snprintf(key, sizeof key, "%sa/%d/outcome", r->prefix, ctrun_etcd_rdzv__attempt(r));
    ctrun_etcd_cmp_t absent = {
        .key = key, .key_len = strlen(key), .target = CTRUN_ETCD_CREATE, .num = 0};
    ctrun_etcd_op_t ops[2] = {{.kind = CTRUN_ETCD_OP_PUT,
                               .key = key,
                               .key_len = strlen(key),
                               .value = text,
                               .value_len = strlen(text)}};
    size_t n = 1;
    if (extra_key != NULL) {
        snprintf(ekey, sizeof ekey, "%sa/%d/%s", r->prefix, ctrun_etcd_rdzv__attempt(r), extra_key);
        ops[1] = (ctrun_etcd_op_t){.kind = CTRUN_ETCD_OP_PUT,
                                   .key = ekey,
                                   .key_len = strlen(ekey),
                                   .value = extra_value,
                                   .value_len = strlen(extra_value)};
        n = 2;
    }
    return ctrun_etcd_txn(r->etcd, &absent, 1, ops, n, extra_key ? &ops[1] : NULL,
                          extra_key ? 1 : 0, ctrun_etcd_rdzv__on_written, r);
}

/* ---- the view ------------------------------------------------------------------------------ */

static void ctrun_etcd_rdzv__free_members(ctrun_etcd_rdzv_t *r)
{
    for (size_t i = 0; i < r->nmembers; i++)
        free(r->members[i].id);
    free(r->members);
    r->members = NULL;
    r->nmembers = 0;
}

static int ctrun_etcd_rdzv__set_members(ctrun_etcd_rdzv_t *r, const ctrun_etcd_member_t *m,
                                        size_t n)
{
    ctrun_etcd_rdzv__free_members(r);
    if (n == 0)
        return 0;
    r->members = calloc(n, sizeof *r->members);
    if (r->members == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        ctrun_etcd_rdzv__member_t *x = &r->members[r->nmembers];
        int nproc = 0, done = -1;
        if (sscanf(m[i].value, "nproc=%d done=%d", &nproc, &done) != 2 || nproc < 1)
            continue; /* not a rendezvous member: never counted */
        if ((x->id = strdup(m[i].id)) == NULL)
            return -ENOMEM;
        x->nproc = nproc;
        x->done = done;
        r->nmembers++;
    }
    return 0;
}

static long ctrun_etcd_rdzv__member(const ctrun_etcd_rdzv_t *r, const char *id)
{
    for (size_t i = 0; i < r->nmembers; i++)
        if (strcmp(r->members[i].id, id) == 0)
            return (long)i;
    return -1;
}

static int ctrun_etcd_rdzv__in_plan(const ctrun_etcd_rdzv_t *r, const char *id)
{
    for (int i = 0; i < r->plan_n; i++)
        if (strcmp(r->plan_ids[i], id) == 0)
            return i;
    return -1;
}

static void ctrun_etcd_rdzv__free_plan(ctrun_etcd_rdzv_t *r)
{
    for (int i = 0; i < r->plan_n; i++)
        free(r->plan_ids[i]);
    free(r->plan_ids);
    free(r->plan_lost);
    free(r->plan_ok);
    r->plan_ids = NULL;
    r->plan_lost = r->plan_ok = NULL;
    r->plan_n = 0;
}

/* Reads the group's round k with plan text; false (with ERROR emitted) when malformed. */
static bool ctrun_etcd_rdzv__set_round(ctrun_etcd_rdzv_t *r, int64_t k, const char *text)
{
    if (k == r->round)
        return true;
    ctrun_etcd_rdzv__free_plan(r);
    free(r->outcome);
    r->outcome = NULL;
    free(r->store);
    r->store = NULL;
    r->told_store = false;
    r->round = k;
    r->told_round = r->told_waiting = r->asked_rejoin = r->asked_close = false;
    r->last_call_expired = false;
    r->last_call_running = false;
    uv_timer_stop(&r->last_call_timer);
    memset(&r->plan, 0, sizeof r->plan);
    r->plan.group_rank = -1;
    if (strncmp(text, "closed ", 7) == 0) {
        r->closed = true;
        free(r->closed_reason);
        r->closed_reason = strdup(text + 7);
        return true;
    }
    const char *m = strstr(text, " members=");
    char *c10d = m ? strndup(text, (size_t)(m - text)) : NULL;
    if (c10d == NULL) {
        ctrun_etcd_rdzv__error(r, CT_EPARSE, "etcd: %sround holds \"%.128s\", not a plan",
                               r->prefix, text);
        return false;
    }
    int n = 0;
    for (const char *p = m + 9; *p; p++)
        n += *p == ',';
    n++;
    r->plan_ids = calloc((size_t)n, sizeof *r->plan_ids);
    r->plan_lost = calloc((size_t)n, sizeof *r->plan_lost);
    r->plan_ok = calloc((size_t)n, sizeof *r->plan_ok);
    bool ok = r->plan_ids && r->plan_lost && r->plan_ok;
    const char *p = m + 9;
    for (int i = 0; ok && i < n; i++) {
        size_t len = strcspn(p, ",");
        ok = len > 0 && (r->plan_ids[i] = strndup(p, len)) != NULL;
        r->plan_n = i + 1;
        p += len + (p[len] == ',');
    }
    ct_errbuf_t eb = {{0}};
    int rc = ok ? ctrun_rdzv_plan_parse(c10d, ctrun_etcd_rdzv__in_plan(r, r->id), &r->plan, &eb)
                : CT_EPARSE;
    free(c10d);
    if (rc == 0 && r->plan.nnodes != r->plan_n)
        rc = ct_errbuf_set(&eb, CT_EMISMATCH, "%d nodes but %d members", r->plan.nnodes, r->plan_n);
    if (rc != 0) {
        ctrun_etcd_rdzv__error(r, rc, "etcd: %sround holds a bad plan (%s): \"%.128s\"", r->prefix,
                               eb.msg[0] ? eb.msg : "bad member list", text);
        return false;
    }
    r->plan_restarts = r->plan.restarts;
    return true;
}

/* Whether member m is ready for attempt `next`: not in the previous round, or has left it. */
static bool ctrun_etcd_rdzv__ready(const ctrun_etcd_rdzv_t *r, const ctrun_etcd_rdzv__member_t *m,
                                   int next)
{
    return ctrun_etcd_rdzv__in_plan(r, m->id) < 0 || m->done >= next - 1;
}

/* ---- deciding ------------------------------------------------------------------------------ */

static void ctrun_etcd_rdzv__propose_closed(ctrun_etcd_rdzv_t *r, const char *reason)
{
    if (r->asked_close || r->decided_base == r->round)
        return;
    char text[CT_ERRBUF_SIZE + 16];
    snprintf(text, sizeof text, "closed %s", reason);
    if (ctrun_etcd_group_propose(r->g, r->round + 1, text) == 0) {
        r->asked_close = true;
        r->proposal_base = r->round;
    }
}

/* Proposes attempt `next` with the ready members (join order, MAX at most). */
static void ctrun_etcd_rdzv__propose(ctrun_etcd_rdzv_t *r, int next, int restarts)
{
    if (r->decided_base == r->round)
        return;
    int n = 0;
    int *nproc = malloc((r->nmembers + 1) * sizeof *nproc);
    int *ids = malloc((r->nmembers + 1) * sizeof *ids);
    size_t size = 256 + r->nmembers * 160;
    char *text = malloc(size);
    if (nproc == NULL || ids == NULL || text == NULL)
        goto out;
    size_t at = 0;
    for (size_t i = 0; i < r->nmembers && n < r->max_nodes; i++) {
        if (!ctrun_etcd_rdzv__ready(r, &r->members[i], next))
            continue;
        nproc[n] = r->members[i].nproc;
        ids[n] = n;
        n++;
    }
    if (ctrun_rdzv_plan_text(next, restarts, n, r->max_restarts, nproc, ids, text, size) != 0)
        goto out;
    at = strlen(text);
    at += (size_t)snprintf(text + at, size - at, " members=");
    int k = 0;
    for (size_t i = 0; i < r->nmembers && k < n; i++) {
        if (!ctrun_etcd_rdzv__ready(r, &r->members[i], next))
            continue;
        at += (size_t)snprintf(text + at, size - at, "%s%s", k ? "," : "", r->members[i].id);
        k++;
    }
    if (at < size) {
        ct_log_debug("etcd rendezvous: proposing attempt %d with %d nodes", next, n);
        if (ctrun_etcd_group_propose(r->g, (int64_t)next + 1, text) == 0)
            r->proposal_base = r->round;
    }
out:
    free(nproc);
    free(ids);
    free(text);
}

static void ctrun_etcd_rdzv__on_last_call(uv_timer_t *t);

/* STORE once the round's store is known and this node was told its round. */
static void ctrun_etcd_rdzv__tell_store(ctrun_etcd_rdzv_t *r)
{
    if (r->store == NULL || !r->told_round || r->told_store || r->outcome != NULL)
        return;
    r->told_store = true;
    ctrun_etcd_rdzv__emit(r, CTRUN_ETCD_RDZV_STORE, NULL, r->store, 0);
}

/* Decides what this node does now, from the view. */
static void ctrun_etcd_rdzv__evaluate(ctrun_etcd_rdzv_t *r)
{
    if (r->closing || r->errored || !r->joined)
        return;
    if (r->closed) {
        if (!r->told_closed) {
            r->told_closed = true;
            uv_timer_stop(&r->join_timer);
            ctrun_etcd_rdzv__emit(r, CTRUN_ETCD_RDZV_CLOSED, NULL, r->closed_reason, 0);
        }
        return;
    }
    int attempt = ctrun_etcd_rdzv__attempt(r);
    if (r->round > 0 && r->outcome == NULL) {
        /* The round runs. */
        int self = ctrun_etcd_rdzv__in_plan(r, r->id);
        if (self >= 0 && !r->told_round) {
            r->told_round = true;
            uv_timer_stop(&r->join_timer);
            ctrun_etcd_rdzv__emit(r, CTRUN_ETCD_RDZV_ROUND, NULL, NULL, 0);
            if (r->closing || r->errored)
                return;
            ctrun_etcd_rdzv__tell_store(r);
            if (r->closing || r->errored)
                return;
        }
        for (int i = 0; i < r->plan_n && r->outcome == NULL; i++) {
            if (r->plan_lost[i] || ctrun_etcd_rdzv__member(r, r->plan_ids[i]) >= 0)
                continue;
            r->plan_lost[i] = true;
            char text[256];
            snprintf(text, sizeof text, "lost %s", r->plan_ids[i]);
            ctrun_etcd_rdzv__write_outcome(r, text, NULL, NULL);
            ct_log_error("etcd rendezvous: node %s of attempt %d is lost (its lease expired)",
                         r->plan_ids[i], attempt);
            ctrun_etcd_rdzv__emit(r, CTRUN_ETCD_RDZV_LOST, r->plan_ids[i], NULL, 0);
            if (r->closing || r->errored)
                return;
        }
        if (self < 0 && ctrun_etcd_rdzv__member(r, r->id) >= 0) {
            if (!r->told_waiting) {
                r->told_waiting = true;
                ctrun_etcd_rdzv__emit(r, CTRUN_ETCD_RDZV_WAITING, NULL, NULL, 0);
                if (r->closing || r->errored)
                    return;
            }
            /* Scale up: the running round has room for this node. */
            if (r->plan_n < r->max_nodes && !r->asked_rejoin) {
                char text[256];
                snprintf(text, sizeof text, "rejoin %s", r->id);
                if (ctrun_etcd_rdzv__write_outcome(r, text, NULL, NULL) == 0)
                    r->asked_rejoin = true;
            }
        }
        return;
    }
    /* No round runs: the next one is collecting. */
    if (r->outcome != NULL && ctrun_rdzv_outcome_final(r->outcome)) {
        ctrun_etcd_rdzv__propose_closed(r, strcmp(r->outcome, "succeeded") == 0
                                               ? "the job has finished"
                                               : "the job was stopped");
        return;
    }
    int next = attempt + 1;
    bool counted = r->outcome != NULL && ctrun_rdzv_outcome_counts(r->outcome);
    if (counted && r->plan_restarts + 1 > r->max_restarts) {
        char why[128];
        snprintf(why, sizeof why, "the job failed with no restart left (--max_restarts=%d)",
                 r->max_restarts);
        ctrun_etcd_rdzv__propose_closed(r, why);
        return;
    }
    if (r->round > 0 && (int)r->nmembers < r->min_nodes) {
        char why[256];
        snprintf(why, sizeof why, "%s; %zu node%s left, fewer than the minimum of %d (--nnodes)",
                 r->outcome, r->nmembers, r->nmembers == 1 ? " is" : "s are", r->min_nodes);
        ctrun_etcd_rdzv__propose_closed(r, why);
        return;
    }
    int ready = 0;
    for (size_t i = 0; i < r->nmembers; i++)
        ready += ctrun_etcd_rdzv__ready(r, &r->members[i], next);
    ctrun_rdzv_decision_t d =
        ctrun_rdzv_round_decide(next, ready, (int)r->nmembers, r->min_nodes, r->max_nodes);
    if (d == CTRUN_RDZV_ROUND_WAIT) {
        uv_timer_stop(&r->last_call_timer);
        r->last_call_running = r->last_call_expired = false;
        return;
    }
    if (d == CTRUN_RDZV_ROUND_CLOSE || r->last_call_expired || r->last_call_ms <= 0) {
        ctrun_etcd_rdzv__propose(r, next, r->plan_restarts + (counted ? 1 : 0));
        return;
    }
    if (!r->last_call_running) {
        r->last_call_running = true;
        ct_log_debug("etcd rendezvous: attempt %d has %d nodes (minimum %d); last call in %" PRId64
                     " ms",
                     next, ready, r->min_nodes, r->last_call_ms);
        uv_timer_start(&r->last_call_timer, ctrun_etcd_rdzv__on_last_call,
                       (uint64_t)r->last_call_ms, 0);
    }
}

static void ctrun_etcd_rdzv__on_last_call(uv_timer_t *t)
{
    ctrun_etcd_rdzv_t *r = t->data;
    r->last_call_running = false;
    r->last_call_expired = true;
    ctrun_etcd_rdzv__evaluate(r);
}

static void ctrun_etcd_rdzv__on_join_timeout(uv_timer_t *t)
{
    ctrun_etcd_rdzv_t *r = t->data;
    double s = (double)r->join_timeout_ms / 1000.0;
    if (r->round > 0 && r->outcome == NULL && ctrun_etcd_rdzv__in_plan(r, r->id) < 0)
        ctrun_etcd_rdzv__error(r, -ETIMEDOUT,
                               "etcd rendezvous timed out after %g s: this node waited for a "
                               "round with room for it (the job runs with %d nodes, --nnodes "
                               "maximum %d; etcd %s, keys under %s; see --rdzv_conf "
                               "join_timeout=SECONDS)",
                               s, r->plan_n, r->max_nodes, r->endpoints, r->prefix);
    else
        ctrun_etcd_rdzv__error(r, -ETIMEDOUT,
                               "etcd rendezvous of attempt %d timed out after %g s: %zu node%s "
                               "joined, fewer than the minimum of %d (etcd %s, keys under %s; "
                               "see --rdzv_conf join_timeout=SECONDS)",
                               ctrun_etcd_rdzv__attempt(r) + 1, s, r->nmembers,
                               r->nmembers == 1 ? "" : "s", r->min_nodes, r->endpoints, r->prefix);
}

/* ---- the group's events -------------------------------------------------------------------- */

/* <prefix>a/<k>/...: outcomes, ok marks and failure reports of the latest round. */
static void ctrun_etcd_rdzv__on_key(ctrun_etcd_rdzv_t *r, const ctrun_etcd_group_event_t *ev)
{
    int k = -1, used = 0;
    char what[16] = "";
    if (ev->deleted || sscanf(ev->key, "a/%d/%15[a-z]%n", &k, what, &used) != 2 ||
        k != ctrun_etcd_rdzv__attempt(r) || r->closed)
        return;
    const char *rest = ev->key + used;
    if (strcmp(what, "outcome") == 0 && rest[0] == '\0') {
        if (r->outcome != NULL)
            return;
        if ((r->outcome = strdup(ev->value)) == NULL) {
            ctrun_etcd_rdzv__error(r, -ENOMEM, "etcd rendezvous: out of memory");
            return;
        }
        uv_timer_stop(&r->last_call_timer);
        r->last_call_running = r->last_call_expired = false;
        ctrun_etcd_rdzv__emit(r, CTRUN_ETCD_RDZV_ENDED, NULL, r->outcome, 0);
    } else if (strcmp(what, "store") == 0 && rest[0] == '\0') {
        if (r->store != NULL || r->outcome != NULL)
            return;
        if ((r->store = strdup(ev->value)) == NULL) {
            ctrun_etcd_rdzv__error(r, -ENOMEM, "etcd rendezvous: out of memory");
            return;
        }
        ctrun_etcd_rdzv__tell_store(r);
    } else if (strcmp(what, "failures") == 0 && rest[0] == '/') {
        ctrun_etcd_rdzv__emit(r, CTRUN_ETCD_RDZV_FAILURE, rest + 1, ev->value, 0);
    } else if (strcmp(what, "ok") == 0 && rest[0] == '/') {
        int i = ctrun_etcd_rdzv__in_plan(r, rest + 1);
        if (i < 0)
            return;
        r->plan_ok[i] = true;
        bool all = true;
        for (int j = 0; j < r->plan_n; j++)
            all = all && r->plan_ok[j];
        if (all && r->outcome == NULL)
            ctrun_etcd_rdzv__write_outcome(r, "succeeded", NULL, NULL);
    }
}

static void ctrun_etcd_rdzv__on_group(void *data, const ctrun_etcd_group_event_t *ev)
{
    ctrun_etcd_rdzv_t *r = data;
    if (r->closing || r->errored)
        return;
    if (ev->kind == CTRUN_ETCD_GROUP_FAILED) {
        ctrun_etcd_rdzv__error(r, ev->rc, "etcd rendezvous (%s): %s", r->endpoints, ev->error);
        return;
    }
    if (ctrun_etcd_rdzv__set_members(r, ev->members, ev->nmembers) != 0) {
        ctrun_etcd_rdzv__error(r, -ENOMEM, "etcd rendezvous: out of memory");
        return;
    }
    if (!ctrun_etcd_rdzv__set_round(r, ev->round, ev->plan))
        return;
    switch (ev->kind) {
    case CTRUN_ETCD_GROUP_JOINED:
        r->joined = true;
        break;
    case CTRUN_ETCD_GROUP_KEY:
        ctrun_etcd_rdzv__on_key(r, ev);
        break;
    case CTRUN_ETCD_GROUP_PROPOSED:
        /* Won or lost, the round key has changed: the watch brings the new round. A proposal
         * that etcd did not decide is made again at the next evaluation. */
        if (ev->rc != 0)
            ct_log_warn("etcd rendezvous: a proposal failed: %s", ev->error);
        else
            r->decided_base = r->proposal_base;
        r->asked_close = false;
        break;
    case CTRUN_ETCD_GROUP_MEMBERS:
    case CTRUN_ETCD_GROUP_ROUND:
    case CTRUN_ETCD_GROUP_FAILED:
        break;
    }
    ctrun_etcd_rdzv__evaluate(r);
}

/* ---- the API ------------------------------------------------------------------------------- */

static void ctrun_etcd_rdzv__free(ctrun_etcd_rdzv_t *r)
{
    ctrun_etcd_rdzv__free_members(r);
    ctrun_etcd_rdzv__free_plan(r);
    free(r->outcome);
    free(r->store);
    free(r->closed_reason);
    free(r->id);
    free(r->host);
    free(r);
}

static void ctrun_etcd_rdzv__on_timer_closed(uv_handle_t *h)
{
    ctrun_etcd_rdzv_t *r = h->data;
    if (--r->open_timers == 0)
        ctrun_etcd_rdzv__free(r);
}

int ctrun_etcd_rdzv_start(uv_loop_t *loop, const ctrun_etcd_rdzv_params_t *p, ctrun_etcd_rdzv_cb cb,
                          void *data, ctrun_etcd_rdzv_t **out, ct_errbuf_t *eb)
{
    *out = NULL;
    const char *run_id = p->run_id ? p->run_id : "";
    const char *id = p->id ? p->id : "";
    if (run_id[0] == '\0' || strlen(run_id) > 200 || strpbrk(run_id, "/ \t\r\n") != NULL)
        return ct_errbuf_set(eb, -EINVAL,
                             "etcd rendezvous: run id '%s' must be 1 to 200 bytes without '/' "
                             "or spaces",
                             run_id);
    if (strchr(id, ',') != NULL)
        return ct_errbuf_set(eb, -EINVAL, "etcd rendezvous: node id '%s' has a ','", id);
    if (p->min_nodes < 1 || p->max_nodes < p->min_nodes || p->max_nodes > CTRUN_RDZV_MAX_NODES ||
        p->nproc < 1 || p->max_restarts < 0)
        return ct_errbuf_set(eb, -EINVAL,
                             "etcd rendezvous: bad sizes (nnodes %d:%d, nproc %d, max_restarts "
                             "%d)",
                             p->min_nodes, p->max_nodes, p->nproc, p->max_restarts);
    ctrun_etcd_rdzv_t *r = calloc(1, sizeof *r);
    if (r == NULL || (r->id = strdup(id)) == NULL ||
        (r->host = strdup(p->host ? p->host : "?")) == NULL) {
        if (r != NULL)
            free(r->id);
        free(r);
        return ct_errbuf_set(eb, -ENOMEM, "etcd rendezvous: out of memory");
    }
    r->loop = loop;
    r->cb = cb;
    r->data = data;
    snprintf(r->prefix, sizeof r->prefix, "/ctrun/%s/", run_id);
    snprintf(r->endpoints, sizeof r->endpoints, "%s", p->etcd.endpoints ? p->etcd.endpoints : "");
    r->nproc = p->nproc;
    r->min_nodes = p->min_nodes;
    r->max_nodes = p->max_nodes;
    r->max_restarts = p->max_restarts;
    r->last_call_ms = p->last_call_ms;
    r->join_timeout_ms = p->join_timeout_ms;
    r->done = -1;
    r->decided_base = -1;
    int rc = ctrun_etcd_create(loop, &p->etcd, &r->etcd, eb);
    if (rc != 0) {
        ctrun_etcd_rdzv__free(r);
        return rc;
    }
    char value[512];
    snprintf(value, sizeof value, "nproc=%d done=-1 host=%s", r->nproc, r->host);
    ctrun_etcd_group_opts_t go = {.etcd = p->etcd,
                                  .prefix = r->prefix,
                                  .id = id,
                                  .value = value,
                                  .ttl_s = p->ttl_s,
                                  .keepalive_ms = p->keepalive_ms};
    rc = ctrun_etcd_group_join(loop, &go, ctrun_etcd_rdzv__on_group, r, &r->g, eb);
    if (rc != 0) {
        ctrun_etcd_destroy(r->etcd);
        ctrun_etcd_rdzv__free(r);
        return rc;
    }
    uv_timer_init(loop, &r->last_call_timer);
    uv_timer_init(loop, &r->join_timer);
    r->last_call_timer.data = r->join_timer.data = r;
    r->open_timers = 2;
    if (r->join_timeout_ms > 0)
        uv_timer_start(&r->join_timer, ctrun_etcd_rdzv__on_join_timeout,
                       (uint64_t)r->join_timeout_ms, 0);
    *out = r;
    return 0;
}

int ctrun_etcd_rdzv_next(ctrun_etcd_rdzv_t *r)
{
    if (r == NULL || r->closing || r->errored || r->outcome == NULL ||
        ctrun_etcd_rdzv__in_plan(r, r->id) < 0)
        return CT_ESTATE;
    r->done = ctrun_etcd_rdzv__attempt(r);
    char value[512];
    snprintf(value, sizeof value, "nproc=%d done=%d host=%s", r->nproc, r->done, r->host);
    int rc = ctrun_etcd_group_set_value(r->g, value);
    if (rc == 0 && r->join_timeout_ms > 0)
        uv_timer_start(&r->join_timer, ctrun_etcd_rdzv__on_join_timeout,
                       (uint64_t)r->join_timeout_ms, 0);
    return rc;
}

int ctrun_etcd_rdzv_succeeded(ctrun_etcd_rdzv_t *r)
{
    if (r == NULL || r->closing || r->errored || r->round == 0 ||
        ctrun_etcd_rdzv__in_plan(r, r->id) < 0)
        return CT_ESTATE;
    char key[CTRUN_ETCD_RDZV__KEY_MAX];
    snprintf(key, sizeof key, "%sa/%d/ok/%s", r->prefix, ctrun_etcd_rdzv__attempt(r), r->id);
    return ctrun_etcd_put(r->etcd, key, strlen(key), "1", 1, 0, ctrun_etcd_rdzv__on_written, r);
}

int ctrun_etcd_rdzv_failed(ctrun_etcd_rdzv_t *r, const char *report)
{
    if (r == NULL || r->closing || r->errored || r->round == 0 ||
        ctrun_etcd_rdzv__in_plan(r, r->id) < 0)
        return CT_ESTATE;
    char text[64], key[CTRUN_ETCD_RDZV__KEY_MAX];
    snprintf(text, sizeof text, "failed %d", r->plan.group_rank);
    snprintf(key, sizeof key, "failures/%s", r->id);
    return ctrun_etcd_rdzv__write_outcome(r, text, key, report);
}

int ctrun_etcd_rdzv_outcome(ctrun_etcd_rdzv_t *r, const char *text)
{
    if (r == NULL || r->closing || r->errored || r->round == 0 || r->outcome != NULL ||
        ctrun_etcd_rdzv__in_plan(r, r->id) < 0)
        return CT_ESTATE;
    return ctrun_etcd_rdzv__write_outcome(r, text, NULL, NULL);
}

int ctrun_etcd_rdzv_publish_store(ctrun_etcd_rdzv_t *r, const char *addr)
{
    if (r == NULL || r->closing || r->errored || r->round == 0 || r->outcome != NULL ||
        r->plan.group_rank != 0)
        return CT_ESTATE;
    char key[CTRUN_ETCD_RDZV__KEY_MAX];
    snprintf(key, sizeof key, "%sa/%d/store", r->prefix, ctrun_etcd_rdzv__attempt(r));
    return ctrun_etcd_put(r->etcd, key, strlen(key), addr, strlen(addr), 0,
                          ctrun_etcd_rdzv__on_written, r);
}

int ctrun_etcd_rdzv_group_rank(const ctrun_etcd_rdzv_t *r, const char *id)
{
    return r == NULL ? -1 : ctrun_etcd_rdzv__in_plan(r, id);
}

const char *ctrun_etcd_rdzv_prefix(const ctrun_etcd_rdzv_t *r)
{
    return r->prefix;
}

/* ---- leaving ------------------------------------------------------------------------------- */

static void ctrun_etcd_rdzv__left(ctrun_etcd_rdzv_t *r)
{
    ctrun_etcd_destroy(r->etcd);
    r->etcd = NULL;
    uv_close((uv_handle_t *)&r->last_call_timer, ctrun_etcd_rdzv__on_timer_closed);
    uv_close((uv_handle_t *)&r->join_timer, ctrun_etcd_rdzv__on_timer_closed);
}

static void ctrun_etcd_rdzv__on_removed(void *data, const ctrun_etcd_result_t *res)
{
    ctrun_etcd_rdzv_t *r = data;
    if (res->rc != 0)
        ct_log_warn("etcd rendezvous: cannot remove the job's keys under %s: %s", r->prefix,
                    res->error);
    ctrun_etcd_rdzv__left(r);
}

static void ctrun_etcd_rdzv__on_members_left(void *data, const ctrun_etcd_result_t *res)
{
    ctrun_etcd_rdzv_t *r = data;
    /* The last node out (no member key left) removes the job; a node leaving at the same time
     * may do so too, which is harmless. */
    if (res->rc == 0 && res->nkvs == 0 &&
        ctrun_etcd_delete(r->etcd, r->prefix, strlen(r->prefix), true, ctrun_etcd_rdzv__on_removed,
                          r) == 0)
        return;
    if (res->rc != 0)
        ct_log_warn("etcd rendezvous: cannot read the members under %s: %s", r->prefix, res->error);
    ctrun_etcd_rdzv__left(r);
}

static void ctrun_etcd_rdzv__on_revoked(void *data, const ctrun_etcd_result_t *res)
{
    ctrun_etcd_rdzv_t *r = data;
    (void)res; /* a lease that is gone already is as good as revoked */
    char key[CTRUN_ETCD_RDZV__KEY_MAX];
    snprintf(key, sizeof key, "%smembers/", r->prefix);
    if (r->leave == CTRUN_ETCD_RDZV_FINISH &&
        ctrun_etcd_range(r->etcd, key, strlen(key), true, ctrun_etcd_rdzv__on_members_left, r) == 0)
        return;
    ctrun_etcd_rdzv__left(r);
}

void ctrun_etcd_rdzv_close(ctrun_etcd_rdzv_t *r, ctrun_etcd_rdzv_leave_t how)
{
    if (r == NULL || r->closing)
        return;
    r->closing = true;
    r->leave = how;
    uv_timer_stop(&r->last_call_timer);
    uv_timer_stop(&r->join_timer);
    int64_t lease = ctrun_etcd_group_lease(r->g);
    ctrun_etcd_group_close(r->g, false);
    r->g = NULL;
    if (how != CTRUN_ETCD_RDZV_SILENT && lease != 0 &&
        ctrun_etcd_lease_revoke(r->etcd, lease, ctrun_etcd_rdzv__on_revoked, r) == 0)
        return;
    ctrun_etcd_rdzv__left(r);
}
