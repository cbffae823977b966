/*
 * ctrun_rdzv.c - the agent's side of the rendezvous protocol of ctrun_rdzv.h: text values
 * (readable with any store client, e.g. `store_cli`), plans, and one transition function. The
 * coordinator is in ctrun_rdzv_coord.c.
 */
#include "ctrun_rdzv.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "ct_parse.h"

void ctrun_rdzv_key(char *buf, const char *fmt, ...)
{
    int n = snprintf(buf, CTRUN_RDZV_KEY_MAX, "%s", CTRUN_RDZV_PREFIX);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, CTRUN_RDZV_KEY_MAX - (size_t)n, fmt, ap);
    va_end(ap);
}

void ctrun_rdzv_job_text(const ctrun_rdzv_params_t *p, char *buf, size_t size)
{
    const char *backend = p->kind == CTRUN_RDZV_KIND_STATIC ? "static" : "c10d";
    if (p->kind == CTRUN_RDZV_KIND_C10D && p->min_nodes > 0 && p->min_nodes != p->nnodes)
        snprintf(buf, size, "run_id=%s backend=%s nnodes=%d:%d", p->run_id, backend, p->min_nodes,
                 p->nnodes);
    else
        snprintf(buf, size, "run_id=%s backend=%s nnodes=%d", p->run_id, backend, p->nnodes);
}

void ctrun_rdzv_init(ctrun_rdzv_t *r, ctrun_kv_t *kv, const ctrun_rdzv_params_t *params)
{
    memset(r, 0, sizeof *r);
    r->kv = kv;
    r->kind = params->kind;
    r->node_id = params->kind == CTRUN_RDZV_KIND_STATIC ? params->node_rank : -1;
    r->nproc = params->nproc;
    ctrun_rdzv_job_text(params, r->job, sizeof r->job);
    uint64_t nonce = 0;
    if (getrandom(&nonce, sizeof nonce, GRND_NONBLOCK) != (ssize_t)sizeof nonce)
        nonce = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)r;
    snprintf(r->token, sizeof r->token, "%d %d %016" PRIx64 " %s", params->nproc, (int)getpid(),
             nonce, params->host ? params->host : "?");
}

static uint64_t ctrun_rdzv__tag(const ctrun_rdzv_t *r, ctrun_rdzv_state_t step)
{
    return CTRUN_TAG(CTRUN_TAG_RDZV, r->attempt, step);
}

/* Enters state s and makes its request. */
static int ctrun_rdzv__enter(ctrun_rdzv_t *r, ctrun_rdzv_state_t s)
{
    char key[CTRUN_RDZV_KEY_MAX], line[64];
    int rc = 0;
    r->state = s;
    switch (s) {
    case CTRUN_RDZV_JOB:
        ctrun_rdzv_key(key, "job");
        rc = ctrun_kv_get(r->kv, key, ctrun_rdzv__tag(r, s));
        break;
    case CTRUN_RDZV_RANK:
        ctrun_rdzv_key(key, "joined");
        rc = ctrun_kv_add(r->kv, key, 1, ctrun_rdzv__tag(r, s));
        break;
    case CTRUN_RDZV_NODE:
        ctrun_rdzv_key(key, "node/%d", r->node_id);
        rc = ctrun_kv_cas(r->kv, key, "", r->token, ctrun_rdzv__tag(r, s));
        break;
    case CTRUN_RDZV_ROUND:
        ctrun_rdzv_key(key, "round");
        rc = ctrun_kv_get(r->kv, key, ctrun_rdzv__tag(r, s));
        break;
    case CTRUN_RDZV_READY:
        ctrun_rdzv_key(key, "a/%d/ready", r->attempt);
        snprintf(line, sizeof line, "%d %d\n", r->node_id, r->nproc);
        rc = ctrun_kv_append(r->kv, key, line, ctrun_rdzv__tag(r, s));
        break;
    case CTRUN_RDZV_GO:
        ctrun_rdzv_key(key, "a/%d/go", r->attempt);
        rc = ctrun_kv_get(r->kv, key, ctrun_rdzv__tag(r, s));
        break;
    case CTRUN_RDZV_IDLE:
    case CTRUN_RDZV_DONE:
    case CTRUN_RDZV_FAILED:
        break;
    }
    if (rc != 0) {
        r->state = CTRUN_RDZV_FAILED;
        snprintf(r->error, sizeof r->error, "rendezvous: %s", ct_strerror(rc));
    }
    return rc;
}

int ctrun_rdzv_start(ctrun_rdzv_t *r, int attempt)
{
    r->attempt = attempt;
    r->error[0] = '\0';
    if (!r->registered)
        return ctrun_rdzv__enter(r, CTRUN_RDZV_JOB);
    return ctrun_rdzv__enter(r, CTRUN_RDZV_READY);
}

__attribute__((format(printf, 2, 3))) static ctrun_rdzv_result_t
ctrun_rdzv__fail(ctrun_rdzv_t *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->error, sizeof r->error, fmt, ap);
    va_end(ap);
    r->state = CTRUN_RDZV_FAILED;
    return CTRUN_RDZV_ERROR;
}

/* A request failed because the store's end of the connection went away. */
static bool ctrun_rdzv__is_disconnect(int rc)
{
    return rc == CT_EPEER || rc == -ECONNRESET || rc == -ECONNREFUSED || rc == -EPIPE;
}

ctrun_rdzv_result_t ctrun_rdzv_on_reply(ctrun_rdzv_t *r, const ctrun_kv_reply_t *reply)
{
    if (CTRUN_TAG_ATTEMPT(reply->tag) != r->attempt ||
        CTRUN_TAG_KIND(reply->tag) != (unsigned)r->state)
        return CTRUN_RDZV_PENDING; /* a stale reply */
    if (reply->rc != 0 && r->waited && ctrun_rdzv__is_disconnect(reply->rc))
        /* The store's host ends the job by writing "closed" where a waiting node reads next,
         * and keeps serving until it is read; a disconnect still means the job is over for
         * this node, but it cannot tell whether the job finished or its host was lost. */
        return ctrun_rdzv__fail(r,
                                "the rendezvous store went away while this node waited for room in "
                                "the job (%s): the job has ended (finished, stopped, or lost its "
                                "store's host) without this node",
                                reply->error);
    if (reply->rc != 0)
        return ctrun_rdzv__fail(r, "rendezvous (%s): %s", reply->key, reply->error);
    const char *value = (const char *)reply->data;
    ctrun_rdzv_state_t next = CTRUN_RDZV_FAILED;
    switch (r->state) {
    case CTRUN_RDZV_JOB:
        if (strcmp(value, r->job) != 0)
            return ctrun_rdzv__fail(
                r,
                "the store belongs to another job: it has \"%s\", this node was "
                "started with \"%s\" (check --rdzv_id, --nnodes, --rdzv_backend "
                "and the port)",
                value, r->job);
        next = r->kind == CTRUN_RDZV_KIND_C10D ? CTRUN_RDZV_RANK : CTRUN_RDZV_NODE;
        break;
    case CTRUN_RDZV_RANK:
        if (reply->num < 1 || reply->num > CTRUN_RDZV_MAX_NODES * 16)
            return ctrun_rdzv__fail(
                r, "the rendezvous has handed out %" PRId64 " node ids; no more", reply->num);
        r->node_id = (int)reply->num - 1;
        next = CTRUN_RDZV_NODE;
        break;
    case CTRUN_RDZV_NODE:
        if (strcmp(value, r->token) != 0) {
            /* "<nproc> <pid> <nonce> <host>": name the holder by host and pid. */
            int nproc = 0, pid = 0;
            char nonce[32] = "", host[256] = "?";
            sscanf(value, "%d %d %31s %255s", &nproc, &pid, nonce, host);
            return ctrun_rdzv__fail(r,
                                    "group rank %d is already taken by the agent with pid %d on %s "
                                    "(two nodes were started with --node_rank=%d)",
                                    r->node_id, pid, host, r->node_id);
        }
        r->registered = true;
        next = CTRUN_RDZV_ROUND;
        break;
    case CTRUN_RDZV_ROUND: {
        int round = -1;
        if (sscanf(value, "%d", &round) != 1 || round < 0)
            return ctrun_rdzv__fail(r, "rendezvous: /ctrun/round holds \"%.64s\", not a round",
                                    value);
        r->attempt = round;
        next = CTRUN_RDZV_READY;
        break;
    }
    case CTRUN_RDZV_READY:
        next = CTRUN_RDZV_GO;
        break;
    case CTRUN_RDZV_GO: {
        ct_errbuf_t eb = {{0}};
        int rc = ctrun_rdzv_plan_parse(value, r->node_id, &r->plan, &eb);
        if (rc == CT_ESTATE)
            return ctrun_rdzv__fail(r, "the rendezvous is closed: %s", eb.msg);
        if (rc != 0)
            return ctrun_rdzv__fail(r, "rendezvous plan of round %d: %s", r->attempt, eb.msg);
        if (r->plan.group_rank < 0) {
            /* The round closed without this node (it came late, or the round was full):
             * wait for the next one, where the coordinator counts it in. */
            r->waited = true;
            r->attempt++;
            next = CTRUN_RDZV_READY;
            break;
        }
        if (r->plan.local_world_size != r->nproc)
            return ctrun_rdzv__fail(r, "rendezvous plan gives node %d %d workers, not %d",
                                    r->node_id, r->plan.local_world_size, r->nproc);
        r->state = CTRUN_RDZV_DONE;
        return CTRUN_RDZV_COMPLETE;
    }
    case CTRUN_RDZV_IDLE:
    case CTRUN_RDZV_DONE:
    case CTRUN_RDZV_FAILED:
        return CTRUN_RDZV_PENDING;
    }
    if (ctrun_rdzv__enter(r, next) != 0)
        return CTRUN_RDZV_ERROR;
    return CTRUN_RDZV_PENDING;
}

/* ---- the rules ------------------------------------------------------------------------ */

ctrun_rdzv_decision_t ctrun_rdzv_round_decide(int attempt, int ready, int wanting, int min_nodes,
                                              int max_nodes)
{
    if (ready >= max_nodes || (attempt > 0 && ready == wanting && ready >= min_nodes))
        return CTRUN_RDZV_ROUND_CLOSE;
    return ready >= min_nodes ? CTRUN_RDZV_ROUND_LAST_CALL : CTRUN_RDZV_ROUND_WAIT;
}

bool ctrun_rdzv_outcome_counts(const char *outcome)
{
    return strncmp(outcome, "failed ", 7) == 0 || strncmp(outcome, "lost ", 5) == 0;
}

bool ctrun_rdzv_outcome_final(const char *outcome)
{
    return strcmp(outcome, "succeeded") == 0 || strncmp(outcome, "stopped ", 8) == 0;
}

/* ---- plans ---------------------------------------------------------------------------- */

int ctrun_rdzv_plan_text(int attempt, int restarts, int nnodes, int max_restarts, const int *nproc,
                         const int *ids, char *buf, size_t size)
{
    long long world = 0;
    for (int i = 0; i < nnodes; i++)
        world += nproc[i];
    int n =
        snprintf(buf, size,
                 "attempt=%d nnodes=%d world_size=%lld max_restarts=%d restarts=%d nproc=", attempt,
                 nnodes, world, max_restarts, restarts);
    for (int pass = 0; pass < 2; pass++) {
        const int *v = pass == 0 ? nproc : ids;
        if (pass == 1 && n >= 0 && (size_t)n < size)
            n += snprintf(buf + n, size - (size_t)n, " ids=");
        for (int i = 0; i < nnodes && n >= 0 && (size_t)n < size; i++)
            n += snprintf(buf + n, size - (size_t)n, i ? ",%d" : "%d", v[i]);
    }
    if (n < 0 || (size_t)n >= size)
        return -ENAMETOOLONG;
    return 0;
}

/* Reads nnodes comma-separated integers in [lo, hi] at *p; returns false on bad input. */
static bool ctrun_rdzv__int_list(const char **p, int nnodes, long lo, long hi, int *out_at,
                                 int want, int *found, long long *sum)
{
    const char *q = *p;
    for (int i = 0; i < nnodes; i++) {
        char *end = NULL;
        errno = 0;
        long v = strtol(q, &end, 10);
        if (end == q || errno != 0 || v < lo || v > hi ||
            (i + 1 < nnodes ? *end != ',' : (*end != '\0' && *end != ' ')))
            return false;
        if (out_at != NULL) {
            out_at[i] = (int)v;
        }
        if (found != NULL && v == want && *found < 0)
            *found = i;
        if (sum != NULL)
            *sum += v;
        q = *end == ',' ? end + 1 : end;
    }
    *p = q;
    return true;
}

int ctrun_rdzv_plan_parse(const char *text, int node_id, ctrun_rdzv_plan_t *plan, ct_errbuf_t *eb)
{
    memset(plan, 0, sizeof *plan);
    plan->group_rank = -1;
    if (strncmp(text, "closed ", 7) == 0)
        return ct_errbuf_set(eb, CT_ESTATE, "%.900s", text + 7);
    long long world = 0;
    int used = 0;
    if (sscanf(text, "attempt=%d nnodes=%d world_size=%lld max_restarts=%d restarts=%d nproc=%n",
               &plan->attempt, &plan->nnodes, &world, &plan->max_restarts, &plan->restarts,
               &used) != 5 ||
        used == 0)
        return ct_errbuf_set(eb, CT_EPARSE, "\"%.128s\" is not a plan", text);
    if (plan->nnodes < 1 || plan->nnodes > CTRUN_RDZV_MAX_NODES || plan->restarts < 0)
        return ct_errbuf_set(eb, CT_EMISMATCH, "plan \"%.128s\" has a bad node count", text);
    int *nproc = malloc((size_t)plan->nnodes * sizeof *nproc);
    if (nproc == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    const char *p = text + used;
    long long sum = 0;
    int at = -1;
    int rc = 0;
    if (!ctrun_rdzv__int_list(&p, plan->nnodes, 1, 1000000, nproc, 0, NULL, &sum)) {
        rc = ct_errbuf_set(eb, CT_EPARSE, "bad nproc list in plan \"%.128s\"", text);
    } else if (strncmp(p, " ids=", 5) != 0) {
        rc = ct_errbuf_set(eb, CT_EPARSE, "no ids in plan \"%.128s\"", text);
    } else {
        p += 5;
        if (!ctrun_rdzv__int_list(&p, plan->nnodes, 0, 1L << 30, NULL, node_id, &at, NULL) ||
            *p != '\0')
            rc = ct_errbuf_set(eb, CT_EPARSE, "bad id list in plan \"%.128s\"", text);
        else if (sum != world || world > 1 << 30)
            rc = ct_errbuf_set(eb, CT_EMISMATCH, "plan \"%.128s\" does not add up", text);
    }
    if (rc == 0) {
        plan->world_size = (int)world;
        if (at >= 0) {
            plan->group_rank = at;
            for (int i = 0; i < at; i++)
                plan->rank_base += nproc[i];
            plan->local_world_size = nproc[at];
        }
    }
    free(nproc);
    return rc;
}
