/*
 * ctrun_rdzv.c - the rendezvous protocol of ctrun_rdzv.h: text values (readable with any store
 * client, e.g. `store_cli`), one transition function for an agent's side, and the coordinator's
 * store watches.
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
    snprintf(buf, size, "run_id=%s backend=%s nnodes=%d", p->run_id,
             p->kind == CTRUN_RDZV_KIND_STATIC ? "static" : "c10d", p->nnodes);
}

void ctrun_rdzv_init(ctrun_rdzv_t *r, ctrun_kv_t *kv, const ctrun_rdzv_params_t *params)
{
    memset(r, 0, sizeof *r);
    r->kv = kv;
    r->kind = params->kind;
    r->nnodes = params->nnodes;
    r->node_rank = params->kind == CTRUN_RDZV_KIND_STATIC ? params->node_rank : -1;
    r->nproc = params->nproc;
    ctrun_rdzv_job_text(params, r->job, sizeof r->job);
    uint64_t nonce = 0;
    if (getrandom(&nonce, sizeof nonce, GRND_NONBLOCK) != (ssize_t)sizeof nonce)
        nonce = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)r;
    snprintf(r->token, sizeof r->token, "%d %d %016" PRIx64 " %s", params->nproc, (int)getpid(),
             nonce, params->host ? params->host : "?");
}

static uint64_t ctrun__tag(const ctrun_rdzv_t *r, ctrun_rdzv_state_t step)
{
    return CTRUN_TAG(CTRUN_TAG_RDZV, r->attempt, step);
}

/* Enters state s and makes its request. */
static int ctrun__enter(ctrun_rdzv_t *r, ctrun_rdzv_state_t s)
{
    char key[CTRUN_RDZV_KEY_MAX];
    int rc = 0;
    r->state = s;
    switch (s) {
    case CTRUN_RDZV_JOB:
        ctrun_rdzv_key(key, "job");
        rc = ctrun_kv_get(r->kv, key, ctrun__tag(r, s));
        break;
    case CTRUN_RDZV_RANK:
        ctrun_rdzv_key(key, "joined");
        rc = ctrun_kv_add(r->kv, key, 1, ctrun__tag(r, s));
        break;
    case CTRUN_RDZV_NODE:
        ctrun_rdzv_key(key, "node/%d", r->node_rank);
        rc = ctrun_kv_cas(r->kv, key, "", r->token, ctrun__tag(r, s));
        break;
    case CTRUN_RDZV_READY:
        ctrun_rdzv_key(key, "a/%d/ready", r->attempt);
        rc = ctrun_kv_add(r->kv, key, 1, ctrun__tag(r, s));
        break;
    case CTRUN_RDZV_GO:
        ctrun_rdzv_key(key, "a/%d/go", r->attempt);
        rc = ctrun_kv_get(r->kv, key, ctrun__tag(r, s));
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
        return ctrun__enter(r, CTRUN_RDZV_JOB);
    return ctrun__enter(r, CTRUN_RDZV_READY);
}

__attribute__((format(printf, 2, 3))) static ctrun_rdzv_result_t ctrun__fail(ctrun_rdzv_t *r,
                                                                             const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->error, sizeof r->error, fmt, ap);
    va_end(ap);
    r->state = CTRUN_RDZV_FAILED;
    return CTRUN_RDZV_ERROR;
}

ctrun_rdzv_result_t ctrun_rdzv_on_reply(ctrun_rdzv_t *r, const ctrun_kv_reply_t *reply)
{
    if (CTRUN_TAG_ATTEMPT(reply->tag) != r->attempt ||
        CTRUN_TAG_KIND(reply->tag) != (unsigned)r->state)
        return CTRUN_RDZV_PENDING; /* a stale reply */
    if (reply->rc != 0)
        return ctrun__fail(r, "rendezvous (%s): %s", reply->key, reply->error);
    const char *value = (const char *)reply->data;
    ctrun_rdzv_state_t next = CTRUN_RDZV_FAILED;
    switch (r->state) {
    case CTRUN_RDZV_JOB:
        if (strcmp(value, r->job) != 0)
            return ctrun__fail(r,
                               "the store belongs to another job: it has \"%s\", this node was "
                               "started with \"%s\" (check --rdzv_id, --nnodes, --rdzv_backend "
                               "and the port)",
                               value, r->job);
        next = r->kind == CTRUN_RDZV_KIND_C10D ? CTRUN_RDZV_RANK : CTRUN_RDZV_NODE;
        break;
    case CTRUN_RDZV_RANK:
        if (reply->num > r->nnodes)
            return ctrun__fail(r,
                               "the rendezvous already has its %d nodes; this node is number "
                               "%" PRId64 " (an elastic --nnodes MIN:MAX range lets nodes join a "
                               "running job)",
                               r->nnodes, reply->num);
        r->node_rank = (int)reply->num - 1;
        next = CTRUN_RDZV_NODE;
        break;
    case CTRUN_RDZV_NODE:
        if (strcmp(value, r->token) != 0) {
            /* "<nproc> <pid> <nonce> <host>": name the holder by host and pid. */
            int nproc = 0, pid = 0;
            char nonce[32] = "", host[256] = "?";
            sscanf(value, "%d %d %31s %255s", &nproc, &pid, nonce, host);
            return ctrun__fail(r,
                               "group rank %d is already taken by the agent with pid %d on %s "
                               "(two nodes were started with --node_rank=%d)",
                               r->node_rank, pid, host, r->node_rank);
        }
        r->registered = true;
        next = CTRUN_RDZV_READY;
        break;
    case CTRUN_RDZV_READY:
        next = CTRUN_RDZV_GO;
        break;
    case CTRUN_RDZV_GO: {
        ct_errbuf_t eb = {{0}};
        if (ctrun_rdzv_plan_parse(value, r->node_rank, &r->plan, &eb) != 0)
            return ctrun__fail(r, "rendezvous plan of attempt %d: %s", r->attempt, eb.msg);
        if (r->plan.local_world_size != r->nproc)
            return ctrun__fail(r, "rendezvous plan gives node %d %d workers, not %d", r->node_rank,
                               r->plan.local_world_size, r->nproc);
        r->state = CTRUN_RDZV_DONE;
        return CTRUN_RDZV_COMPLETE;
    }
    case CTRUN_RDZV_IDLE:
    case CTRUN_RDZV_DONE:
    case CTRUN_RDZV_FAILED:
        return CTRUN_RDZV_PENDING;
    }
    if (ctrun__enter(r, next) != 0)
        return CTRUN_RDZV_ERROR;
    return CTRUN_RDZV_PENDING;
}

/* ---- plans ---------------------------------------------------------------------------- */

int ctrun_rdzv_plan_text(int attempt, int nnodes, int max_restarts, const int *nproc, char *buf,
                         size_t size)
{
    long long world = 0;
    for (int i = 0; i < nnodes; i++)
        world += nproc[i];
    size_t pos = 0;
    int w =
        snprintf(buf, size, "attempt=%d nnodes=%d world_size=%lld max_restarts=%d nproc=", attempt,
                 nnodes, world, max_restarts);
    if (w < 0 || (size_t)w >= size)
        return -ENAMETOOLONG;
    pos = (size_t)w;
    for (int i = 0; i < nnodes; i++) {
        w = snprintf(buf + pos, size - pos, "%s%d", i ? "," : "", nproc[i]);
        if (w < 0 || (size_t)w >= size - pos)
            return -ENAMETOOLONG;
        pos += (size_t)w;
    }
    return 0;
}

int ctrun_rdzv_plan_parse(const char *text, int group_rank, ctrun_rdzv_plan_t *plan,
                          ct_errbuf_t *eb)
{
    memset(plan, 0, sizeof *plan);
    long long world = 0;
    int used = 0;
    if (sscanf(text, "attempt=%d nnodes=%d world_size=%lld max_restarts=%d nproc=%n",
               &plan->attempt, &plan->nnodes, &world, &plan->max_restarts, &used) != 4 ||
        used == 0)
        return ct_errbuf_set(eb, CT_EPARSE, "\"%.128s\" is not a plan", text);
    if (plan->nnodes < 1 || plan->nnodes > CTRUN_RDZV_MAX_NODES || group_rank < 0 ||
        group_rank >= plan->nnodes)
        return ct_errbuf_set(eb, CT_EMISMATCH, "plan for %d nodes has no group rank %d",
                             plan->nnodes, group_rank);
    const char *p = text + used;
    long long sum = 0;
    for (int i = 0; i < plan->nnodes; i++) {
        char *end = NULL;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno != 0 || v < 1 || v > 1000000 || (*end != ',' && *end != '\0') ||
            (*end == '\0' && i + 1 < plan->nnodes))
            return ct_errbuf_set(eb, CT_EPARSE, "bad nproc list in plan \"%.128s\"", text);
        if (i < group_rank)
            plan->rank_base += (int)v;
        if (i == group_rank)
            plan->local_world_size = (int)v;
        sum += v;
        p = *end == ',' ? end + 1 : end;
    }
    if (*p != '\0' || sum != world || world > 1 << 30)
        return ct_errbuf_set(eb, CT_EMISMATCH, "plan \"%.128s\" does not add up", text);
    plan->world_size = (int)world;
    plan->group_rank = group_rank;
    return 0;
}

/* ---- the coordinator -------------------------------------------------------------------- */

/* Every agent of attempt k is ready: their previous workers are gone, so the workers' key space
 * can be wiped without a late writer refilling it, and the plan published. */
static void ctrun__coord_go(ctrun_rdzv_coord_t *c, int attempt)
{
    size_t text_size = 128 + (size_t)c->nnodes * 12;
    int *nproc = calloc((size_t)c->nnodes, sizeof *nproc);
    char *text = malloc(text_size);
    char key[CTRUN_RDZV_KEY_MAX];
    ct_errbuf_t eb = {{0}};
    if (nproc == NULL || text == NULL) {
        snprintf(c->error, sizeof c->error, "out of memory for the plan of attempt %d", attempt);
        c->failed = true;
        goto out;
    }
    for (int i = 0; i < c->nnodes; i++) {
        ctrun_rdzv_key(key, "node/%d", i);
        ct_store_bytes_t v = {0};
        char head[32] = "";
        if (ctrun_store_get(c->store, key, &v) == 0) {
            size_t n = v.len < sizeof head - 1 ? v.len : sizeof head - 1;
            memcpy(head, v.data, n);
            head[n] = '\0';
        }
        if (sscanf(head, "%d", &nproc[i]) != 1 || nproc[i] < 1) {
            /* Readiness is counted after registration, so this is a foreign writer. */
            snprintf(c->error, sizeof c->error, "attempt %d: %s is missing or malformed", attempt,
                     key);
            c->failed = true;
            goto out;
        }
    }
    static const char *const keep[] = {CTRUN_RDZV_PREFIX};
    size_t wiped = 0;
    ctrun_store_wipe_except(c->store, keep, 1, &wiped);
    ctrun_rdzv_plan_text(attempt, c->nnodes, c->max_restarts, nproc, text, text_size);
    ctrun_rdzv_key(key, "a/%d/go", attempt);
    if (ctrun_store_set(c->store, key, text, strlen(text), &eb) != 0) {
        snprintf(c->error, sizeof c->error, "publishing the plan of attempt %d: %.400s", attempt,
                 eb.msg);
        c->failed = true;
    }
out:
    free(nproc);
    free(text);
    if (c->failed && c->on_left != NULL)
        c->on_left(c->data, -1);
}

static int64_t ctrun__num(ct_store_bytes_t v)
{
    char buf[32];
    size_t n = v.len < sizeof buf - 1 ? v.len : sizeof buf - 1;
    memcpy(buf, v.data, n);
    buf[n] = '\0';
    return strtoll(buf, NULL, 10);
}

static void ctrun__coord_ready(ctrun_store_t *s, const ctrun_store_event_t *ev, void *data)
{
    ctrun_rdzv_coord_t *c = data;
    (void)s;
    if (ev->kind == CT_STORE_WATCH_DELETED)
        return;
    /* "/ctrun/a/<k>/ready" */
    int attempt = -1, used = 0;
    char key[CTRUN_RDZV_KEY_MAX];
    size_t n = ev->key.len < sizeof key - 1 ? ev->key.len : sizeof key - 1;
    memcpy(key, ev->key.data, n);
    key[n] = '\0';
    if (sscanf(key, CTRUN_RDZV_PREFIX "a/%d/ready%n", &attempt, &used) != 1 || key[used] != '\0')
        return;
    if (ctrun__num(ev->value) == c->nnodes)
        ctrun__coord_go(c, attempt);
}

static void ctrun__coord_left(ctrun_store_t *s, const ctrun_store_event_t *ev, void *data)
{
    ctrun_rdzv_coord_t *c = data;
    (void)s;
    if (ev->kind == CT_STORE_WATCH_DELETED)
        return;
    c->left = (int)ctrun__num(ev->value);
    if (c->on_left != NULL)
        c->on_left(c->data, c->left);
}

int ctrun_rdzv_coord_init(ctrun_rdzv_coord_t *c, ctrun_store_t *store,
                          const ctrun_rdzv_params_t *params, void (*on_left)(void *, int),
                          void *data, ct_errbuf_t *eb)
{
    memset(c, 0, sizeof *c);
    c->store = store;
    c->nnodes = params->nnodes;
    c->max_restarts = params->max_restarts;
    c->on_left = on_left;
    c->data = data;
    char key[CTRUN_RDZV_KEY_MAX], job[512];
    ctrun_rdzv_job_text(params, job, sizeof job);
    ctrun_rdzv_key(key, "job");
    int rc = ctrun_store_set(store, key, job, strlen(job), eb);
    if (rc != 0)
        return rc;
    ctrun_rdzv_key(key, "a/");
    rc = ctrun_store_watch(store, key, true, ctrun__coord_ready, c, &c->ready_watch, eb);
    if (rc != 0)
        return rc;
    ctrun_rdzv_key(key, "left");
    rc = ctrun_store_watch(store, key, false, ctrun__coord_left, c, &c->left_watch, eb);
    if (rc != 0) {
        ctrun_store_unwatch(store, c->ready_watch);
        c->ready_watch = NULL;
    }
    return rc;
}

void ctrun_rdzv_coord_close(ctrun_rdzv_coord_t *c)
{
    if (c->ready_watch != NULL)
        ctrun_store_unwatch(c->store, c->ready_watch);
    if (c->left_watch != NULL)
        ctrun_store_unwatch(c->store, c->left_watch);
    c->ready_watch = c->left_watch = NULL;
}
