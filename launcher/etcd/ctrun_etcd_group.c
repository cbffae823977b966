/*
 * ctrun_etcd_group.c - the membership and round of ctrun_etcd_group.h on ctrun_etcd: the join
 * transaction and its snapshot, the prefix watch (started again after a lost etcd member), the
 * keepalive timer, proposals, and the member list in join order.
 *
 * Lifetime: every request's callback gets the group; after ctrun_etcd_group_close the group
 * destroys its client (which drops every pending callback) and is freed when its timer's handle
 * is closed, so no callback ever sees a freed group.
 *
 * Not here: the rendezvous rules that decide what to propose and when.
 */
#include "ctrun_etcd_group.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_time.h"

#define CTRUN_ETCD_GROUP__KEY_MAX 512

typedef struct ctrun_etcd_group__member {
    char *id, *value;
    int64_t joined;
} ctrun_etcd_group__member_t;

typedef enum ctrun_etcd_group__state {
    CTRUN_ETCD_GROUP__JOINING = 0,
    CTRUN_ETCD_GROUP__JOINED,
    CTRUN_ETCD_GROUP__FAILED,
} ctrun_etcd_group__state_t;

struct ctrun_etcd_group {
    uv_loop_t *loop;
    ctrun_etcd_t *etcd;
    ctrun_etcd_group_cb cb;
    void *data;
    char prefix[CTRUN_ETCD_GROUP__KEY_MAX];
    char self_key[CTRUN_ETCD_GROUP__KEY_MAX], members_key[CTRUN_ETCD_GROUP__KEY_MAX],
        round_key[CTRUN_ETCD_GROUP__KEY_MAX];
    char *id, *value;
    int64_t ttl_s, keepalive_ms, lease;
    ctrun_etcd_group__state_t state;
    bool closing, ka_inflight, proposing, watch_created;
    int64_t last_ka_ok_ms;
    uv_timer_t timer;
    ctrun_etcd_watch_t *watch;
    int64_t seen_rev; /* every change up to this revision is reflected below */
    ctrun_etcd_group__member_t *members;
    size_t nmembers, cap;
    int64_t round, round_mod_rev;
    char *plan;
    ctrun_etcd_member_t *view;  /* the public copy of members handed to callbacks */
    const char *watch_endpoint; /* the etcd member of the last watch message (client-owned) */
};

static void ctrun_etcd_group__emit(ctrun_etcd_group_t *g, ctrun_etcd_group_event_kind_t kind,
                                   bool won, int rc, const char *error)
{
    if (g->closing)
        return;
    long self = -1;
    for (size_t i = 0; i < g->nmembers; i++) {
        g->view[i] =
            (ctrun_etcd_member_t){g->members[i].id, g->members[i].value, g->members[i].joined};
        if (strcmp(g->members[i].id, g->id) == 0)
            self = (long)i;
    }
    ctrun_etcd_group_event_t ev = {.kind = kind,
                                   .members = g->view,
                                   .nmembers = g->nmembers,
                                   .self = self,
                                   .round = g->round,
                                   .plan = g->plan ? g->plan : "",
                                   .won = won,
                                   .rc = rc,
                                   .error = error ? error : ""};
    g->cb(g->data, &ev);
}

/* A KEY event for one of the caller's keys (kv under the prefix, neither a member nor the round);
 * -ENOMEM drops it. */
static void ctrun_etcd_group__emit_key(ctrun_etcd_group_t *g, const ctrun_etcd_kv_t *kv,
                                       bool deleted)
{
    size_t plen = strlen(g->prefix);
    if (g->closing || kv->key_len <= plen)
        return;
    char *key = strndup((const char *)kv->key + plen, kv->key_len - plen);
    char *value = deleted ? strdup("") : strndup((const char *)kv->value, kv->value_len);
    if (key != NULL && value != NULL) {
        ctrun_etcd_group_event_t ev = {.kind = CTRUN_ETCD_GROUP_KEY,
                                       .members = g->view,
                                       .nmembers = g->nmembers,
                                       .self = -1,
                                       .round = g->round,
                                       .plan = g->plan ? g->plan : "",
                                       .error = "",
                                       .key = key,
                                       .value = value,
                                       .value_len = deleted ? 0 : kv->value_len,
                                       .deleted = deleted};
        for (size_t i = 0; i < g->nmembers; i++) {
            g->view[i] =
                (ctrun_etcd_member_t){g->members[i].id, g->members[i].value, g->members[i].joined};
            if (strcmp(g->members[i].id, g->id) == 0)
                ev.self = (long)i;
        }
        g->cb(g->data, &ev);
    }
    free(key);
    free(value);
}

/* Whether kv is the round key. */
static bool ctrun_etcd_group__is_round(const ctrun_etcd_group_t *g, const ctrun_etcd_kv_t *kv)
{
    return kv->key_len == strlen(g->round_key) && memcmp(kv->key, g->round_key, kv->key_len) == 0;
}

/* Stops everything and reports FAILED once; the caller closes the group. */
__attribute__((format(printf, 3, 4))) static void
ctrun_etcd_group__fail(ctrun_etcd_group_t *g, int rc, const char *fmt, ...)
{
    if (g->state == CTRUN_ETCD_GROUP__FAILED || g->closing)
        return;
    g->state = CTRUN_ETCD_GROUP__FAILED;
    uv_timer_stop(&g->timer);
    ctrun_etcd_watch_cancel(g->watch);
    g->watch = NULL;
    char line[CT_ERRBUF_SIZE * 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    ctrun_etcd_group__emit(g, CTRUN_ETCD_GROUP_FAILED, false, rc, line);
}

/* ---- the member list ----------------------------------------------------------------------- */

/* The id of a member key, or NULL when key is not one. */
static char *ctrun_etcd_group__member_id(ctrun_etcd_group_t *g, const ctrun_etcd_kv_t *kv)
{
    size_t plen = strlen(g->members_key);
    if (kv->key_len <= plen || memcmp(kv->key, g->members_key, plen) != 0)
        return NULL;
    return strndup((const char *)kv->key + plen, kv->key_len - plen);
}

static void ctrun_etcd_group__member_free(ctrun_etcd_group__member_t *m)
{
    free(m->id);
    free(m->value);
}

static bool ctrun_etcd_group__remove(ctrun_etcd_group_t *g, const char *id)
{
    for (size_t i = 0; i < g->nmembers; i++) {
        if (strcmp(g->members[i].id, id) == 0) {
            ctrun_etcd_group__member_free(&g->members[i]);
            memmove(&g->members[i], &g->members[i + 1],
                    (g->nmembers - i - 1) * sizeof g->members[0]);
            g->nmembers--;
            return true;
        }
    }
    return false;
}

/* Adds (or updates) a member, keeping join order; -ENOMEM. */
static int ctrun_etcd_group__upsert(ctrun_etcd_group_t *g, const ctrun_etcd_kv_t *kv)
{
    char *id = ctrun_etcd_group__member_id(g, kv);
    char *value = strndup((const char *)kv->value, kv->value_len);
    if (id == NULL || value == NULL) {
        free(id);
        free(value);
        return -ENOMEM;
    }
    ctrun_etcd_group__remove(g, id);
    if (g->nmembers == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 16;
        ctrun_etcd_group__member_t *m = realloc(g->members, cap * sizeof *m);
        ctrun_etcd_member_t *v = m ? realloc(g->view, cap * sizeof *v) : NULL;
        if (m != NULL)
            g->members = m;
        if (v == NULL) {
            free(id);
            free(value);
            return -ENOMEM;
        }
        g->view = v;
        g->cap = cap;
    }
    size_t at = g->nmembers;
    while (at > 0 && g->members[at - 1].joined > kv->create_revision)
        at--;
    memmove(&g->members[at + 1], &g->members[at], (g->nmembers - at) * sizeof g->members[0]);
    g->members[at] = (ctrun_etcd_group__member_t){id, value, kv->create_revision};
    g->nmembers++;
    return 0;
}

/* The round key's value "<k> <plan>"; false when malformed. */
static bool ctrun_etcd_group__set_round(ctrun_etcd_group_t *g, const ctrun_etcd_kv_t *kv)
{
    char *text = strndup((const char *)kv->value, kv->value_len);
    if (text == NULL)
        return false;
    char *end = NULL;
    long long k = strtoll(text, &end, 10);
    if (end == text || k <= 0 || (*end != ' ' && *end != '\0')) {
        free(text);
        return false;
    }
    free(g->plan);
    g->plan = strdup(*end == ' ' ? end + 1 : end);
    free(text);
    g->round = k;
    g->round_mod_rev = kv->mod_revision;
    return g->plan != NULL;
}

/* ---- watching ------------------------------------------------------------------------------ */

static void ctrun_etcd_group__watch_start(ctrun_etcd_group_t *g);

static void ctrun_etcd_group__on_watch(void *data, const ctrun_etcd_result_t *res)
{
    ctrun_etcd_group_t *g = data;
    if (g->closing || g->state == CTRUN_ETCD_GROUP__FAILED)
        return;
    if (res->rc != 0) {
        /* A stream that ended after etcd confirmed it (its etcd member was lost): watch again
         * from the next revision. One that no member confirmed: etcd is out of reach. */
        ctrun_etcd_watch_cancel(g->watch);
        g->watch = NULL;
        if (!g->watch_created || res->rc == -ERANGE) {
            ctrun_etcd_group__fail(g, res->rc, "%s", res->error);
            return;
        }
        ctrun_etcd_group__watch_start(g);
        return;
    }
    if (res->created)
        g->watch_created = true;
    g->watch_endpoint = res->endpoint;
    bool members_changed = false, round_changed = false;
    /* Events of one transaction share a revision: compare with what was seen before this
     * message, so that none of them is mistaken for a replay. */
    int64_t seen_before = g->seen_rev;
    for (size_t i = 0; i < res->nevents; i++) {
        const ctrun_etcd_event_t *ev = &res->events[i];
        if (ev->kv.mod_revision <= seen_before)
            continue; /* replayed after a restart */
        if (ev->kv.mod_revision > g->seen_rev)
            g->seen_rev = ev->kv.mod_revision;
        char *id = ctrun_etcd_group__member_id(g, &ev->kv);
        if (id != NULL) {
            if (ev->deleted) {
                members_changed |= ctrun_etcd_group__remove(g, id);
                if (strcmp(id, g->id) == 0) {
                    free(id);
                    ctrun_etcd_group__fail(g, CT_EPEER,
                                           "etcd: this node's membership key %s is gone (its "
                                           "lease expired or was revoked: the others count it "
                                           "as lost)",
                                           g->self_key);
                    return;
                }
            } else if (ctrun_etcd_group__upsert(g, &ev->kv) == 0) {
                members_changed = true;
            }
            free(id);
        } else if (ctrun_etcd_group__is_round(g, &ev->kv)) {
            if (ev->deleted)
                continue;
            if (!ctrun_etcd_group__set_round(g, &ev->kv)) {
                ctrun_etcd_group__fail(g, CT_EPARSE, "etcd: %s holds a malformed round",
                                       g->round_key);
                return;
            }
            round_changed = true;
        } else {
            /* The caller's key: what changed before it in this message is told first. */
            if (members_changed)
                ctrun_etcd_group__emit(g, CTRUN_ETCD_GROUP_MEMBERS, false, 0, NULL);
            if (round_changed && !g->closing && g->state != CTRUN_ETCD_GROUP__FAILED)
                ctrun_etcd_group__emit(g, CTRUN_ETCD_GROUP_ROUND, false, 0, NULL);
            members_changed = round_changed = false;
            if (g->closing || g->state == CTRUN_ETCD_GROUP__FAILED)
                return;
            ctrun_etcd_group__emit_key(g, &ev->kv, ev->deleted);
            if (g->closing || g->state == CTRUN_ETCD_GROUP__FAILED)
                return;
        }
    }
    if (members_changed && !g->closing && g->state != CTRUN_ETCD_GROUP__FAILED)
        ctrun_etcd_group__emit(g, CTRUN_ETCD_GROUP_MEMBERS, false, 0, NULL);
    if (round_changed && !g->closing && g->state != CTRUN_ETCD_GROUP__FAILED)
        ctrun_etcd_group__emit(g, CTRUN_ETCD_GROUP_ROUND, false, 0, NULL);
}

static void ctrun_etcd_group__watch_start(ctrun_etcd_group_t *g)
{
    g->watch_created = false;
    int rc = ctrun_etcd_watch(g->etcd, g->prefix, strlen(g->prefix), true, g->seen_rev + 1,
                              ctrun_etcd_group__on_watch, g, &g->watch);
    if (rc != 0)
        ctrun_etcd_group__fail(g, rc, "etcd: cannot watch %s: %s", g->prefix, ct_strerror(rc));
}

/* ---- keepalive ----------------------------------------------------------------------------- */

static void ctrun_etcd_group__on_keepalive(void *data, const ctrun_etcd_result_t *res)
{
    ctrun_etcd_group_t *g = data;
    g->ka_inflight = false;
    if (g->closing || g->state == CTRUN_ETCD_GROUP__FAILED)
        return;
    if (res->rc == 0) {
        g->last_ka_ok_ms = ct_time_ms();
        return;
    }
    if (res->rc == -ENOENT)
        ctrun_etcd_group__fail(g, res->rc,
                               "%s (this node's lease is gone: the others count it "
                               "as lost)",
                               res->error);
    else if (ct_time_ms() - g->last_ka_ok_ms >= g->ttl_s * 1000)
        ctrun_etcd_group__fail(g, res->rc, "no keepalive for %" PRId64 " s, the lease's TTL: %s",
                               g->ttl_s, res->error);
}

static void ctrun_etcd_group__on_timer(uv_timer_t *t)
{
    ctrun_etcd_group_t *g = t->data;
    if (g->closing || g->ka_inflight || g->state != CTRUN_ETCD_GROUP__JOINED)
        return;
    if (ctrun_etcd_lease_keepalive(g->etcd, g->lease, ctrun_etcd_group__on_keepalive, g) == 0)
        g->ka_inflight = true;
}

/* ---- joining ------------------------------------------------------------------------------- */

static void ctrun_etcd_group__on_joined(void *data, const ctrun_etcd_result_t *res)
{
    ctrun_etcd_group_t *g = data;
    if (g->closing)
        return;
    if (res->rc != 0) {
        ctrun_etcd_group__fail(g, res->rc, "joining %s: %s", g->prefix, res->error);
        return;
    }
    /* A compare that failed against this node's own key: an earlier attempt of this very
     * transaction was applied (its answer was lost, the client sent it again). The failure
     * branch read the same snapshot, so the join goes on from it. */
    bool ours = false;
    for (size_t i = 0; !res->succeeded && i < res->nkvs; i++)
        ours =
            ours || (res->kvs[i].lease == g->lease && res->kvs[i].key_len == strlen(g->self_key) &&
                     memcmp(res->kvs[i].key, g->self_key, res->kvs[i].key_len) == 0);
    if (!res->succeeded && !ours) {
        ctrun_etcd_group__fail(g, CT_ESTATE,
                               "joining %s: a node with id '%s' is already a member (etcd %s "
                               "exists)",
                               g->prefix, g->id, g->self_key);
        return;
    }
    g->seen_rev = res->revision;
    for (size_t i = 0; i < res->nkvs; i++) {
        const ctrun_etcd_kv_t *kv = &res->kvs[i];
        char *id = ctrun_etcd_group__member_id(g, kv);
        bool member = id != NULL;
        free(id);
        if (ctrun_etcd_group__is_round(g, kv)) {
            if (!ctrun_etcd_group__set_round(g, kv)) {
                ctrun_etcd_group__fail(g, CT_EPARSE, "etcd: %s holds a malformed round",
                                       g->round_key);
                return;
            }
        } else if (!member) {
            continue; /* the caller's key: told after JOINED */
        } else if (ctrun_etcd_group__upsert(g, kv) != 0) {
            ctrun_etcd_group__fail(g, -ENOMEM, "joining %s: out of memory", g->prefix);
            return;
        }
    }
    g->state = CTRUN_ETCD_GROUP__JOINED;
    g->last_ka_ok_ms = ct_time_ms();
    uv_timer_start(&g->timer, ctrun_etcd_group__on_timer, (uint64_t)g->keepalive_ms,
                   (uint64_t)g->keepalive_ms);
    ctrun_etcd_group__watch_start(g);
    /* The caller's keys of the snapshot first, so that JOINED finds them all told. */
    for (size_t i = 0; i < res->nkvs && g->state == CTRUN_ETCD_GROUP__JOINED && !g->closing; i++) {
        const ctrun_etcd_kv_t *kv = &res->kvs[i];
        char *id = ctrun_etcd_group__member_id(g, kv);
        if (id == NULL && !ctrun_etcd_group__is_round(g, kv))
            ctrun_etcd_group__emit_key(g, kv, false);
        free(id);
    }
    if (g->state == CTRUN_ETCD_GROUP__JOINED)
        ctrun_etcd_group__emit(g, CTRUN_ETCD_GROUP_JOINED, false, 0, NULL);
}

static void ctrun_etcd_group__on_lease(void *data, const ctrun_etcd_result_t *res)
{
    ctrun_etcd_group_t *g = data;
    if (g->closing)
        return;
    if (res->rc != 0) {
        ctrun_etcd_group__fail(g, res->rc, "joining %s: %s", g->prefix, res->error);
        return;
    }
    g->lease = res->lease_id;
    /* Create this node's key only if absent, and read everything in the same revision. */
    ctrun_etcd_cmp_t absent = {.key = g->self_key,
                               .key_len = strlen(g->self_key),
                               .target = CTRUN_ETCD_CREATE,
                               .result = CTRUN_ETCD_EQUAL,
                               .num = 0};
    ctrun_etcd_op_t ops[2] = {
        {.kind = CTRUN_ETCD_OP_PUT,
         .key = g->self_key,
         .key_len = strlen(g->self_key),
         .value = g->value,
         .value_len = strlen(g->value),
         .lease = g->lease},
        {.kind = CTRUN_ETCD_OP_RANGE,
         .key = g->prefix,
         .key_len = strlen(g->prefix),
         .prefix = true},
    };
    /* Failed (the key exists): the same snapshot, to tell this node's own key (a retried
     * transaction) from another node's. */
    int rc =
        ctrun_etcd_txn(g->etcd, &absent, 1, ops, 2, &ops[1], 1, ctrun_etcd_group__on_joined, g);
    if (rc != 0)
        ctrun_etcd_group__fail(g, rc, "joining %s: %s", g->prefix, ct_strerror(rc));
}

static void ctrun_etcd_group__on_timer_closed(uv_handle_t *h)
{
    ctrun_etcd_group_t *g = h->data;
    for (size_t i = 0; i < g->nmembers; i++)
        ctrun_etcd_group__member_free(&g->members[i]);
    free(g->members);
    free(g->view);
    free(g->plan);
    free(g->id);
    free(g->value);
    free(g);
}

int ctrun_etcd_group_join(uv_loop_t *loop, const ctrun_etcd_group_opts_t *opts,
                          ctrun_etcd_group_cb cb, void *data, ctrun_etcd_group_t **out,
                          ct_errbuf_t *eb)
{
    *out = NULL;
    const char *id = opts->id ? opts->id : "";
    size_t plen = opts->prefix ? strlen(opts->prefix) : 0;
    if (plen == 0 || opts->prefix[plen - 1] != '/' || plen + 140 > CTRUN_ETCD_GROUP__KEY_MAX)
        return ct_errbuf_set(eb, -EINVAL,
                             "etcd group: prefix '%s' must end with '/' and be "
                             "shorter than %d bytes",
                             opts->prefix ? opts->prefix : "", CTRUN_ETCD_GROUP__KEY_MAX - 140);
    if (id[0] == '\0' || strlen(id) > 128 || strpbrk(id, "/ \t\r\n") != NULL)
        return ct_errbuf_set(eb, -EINVAL,
                             "etcd group: node id '%s' must be 1 to 128 bytes "
                             "without '/' or spaces",
                             id);
    if (opts->ttl_s <= 0 || opts->keepalive_ms < 0)
        return ct_errbuf_set(eb, -EINVAL, "etcd group: TTL %" PRId64 " s must be positive",
                             opts->ttl_s);
    ctrun_etcd_group_t *g = calloc(1, sizeof *g);
    if (g == NULL || (g->id = strdup(id)) == NULL ||
        (g->value = strdup(opts->value ? opts->value : "")) == NULL) {
        if (g != NULL)
            free(g->id);
        free(g);
        return ct_errbuf_set(eb, -ENOMEM, "etcd group: out of memory");
    }
    int rc = ctrun_etcd_create(loop, &opts->etcd, &g->etcd, eb);
    if (rc != 0) {
        free(g->id);
        free(g->value);
        free(g);
        return rc;
    }
    g->loop = loop;
    g->cb = cb;
    g->data = data;
    snprintf(g->prefix, sizeof g->prefix, "%s", opts->prefix);
    snprintf(g->members_key, sizeof g->members_key, "%smembers/", opts->prefix);
    snprintf(g->self_key, sizeof g->self_key, "%smembers/%s", opts->prefix, id);
    snprintf(g->round_key, sizeof g->round_key, "%sround", opts->prefix);
    g->ttl_s = opts->ttl_s;
    g->keepalive_ms = opts->keepalive_ms > 0 ? opts->keepalive_ms : opts->ttl_s * 1000 / 3;
    if (g->keepalive_ms < 1)
        g->keepalive_ms = 1;
    uv_timer_init(loop, &g->timer);
    g->timer.data = g;
    rc = ctrun_etcd_lease_grant(g->etcd, g->ttl_s, ctrun_etcd_group__on_lease, g);
    if (rc != 0) {
        g->closing = true;
        ctrun_etcd_destroy(g->etcd);
        uv_close((uv_handle_t *)&g->timer, ctrun_etcd_group__on_timer_closed);
        return ct_errbuf_set(eb, rc, "etcd group: cannot ask for a lease: %s", ct_strerror(rc));
    }
    *out = g;
    return 0;
}

/* ---- rounds -------------------------------------------------------------------------------- */

static void ctrun_etcd_group__on_proposed(void *data, const ctrun_etcd_result_t *res)
{
    ctrun_etcd_group_t *g = data;
    g->proposing = false;
    if (g->closing || g->state == CTRUN_ETCD_GROUP__FAILED)
        return;
    ctrun_etcd_group__emit(g, CTRUN_ETCD_GROUP_PROPOSED, res->rc == 0 && res->succeeded, res->rc,
                           res->rc != 0 ? res->error : NULL);
}

int ctrun_etcd_group_propose(ctrun_etcd_group_t *g, int64_t round, const char *plan)
{
    if (g == NULL || g->closing || g->state != CTRUN_ETCD_GROUP__JOINED || g->proposing)
        return CT_ESTATE;
    if (round <= 0 || strchr(plan, '\n') != NULL)
        return -EINVAL;
    size_t n = strlen(plan) + 32;
    char *text = malloc(n);
    if (text == NULL)
        return -ENOMEM;
    snprintf(text, n, "%" PRId64 " %s", round, plan);
    /* The round key unchanged since this node saw it (mod_revision 0: still absent). */
    ctrun_etcd_cmp_t same = {.key = g->round_key,
                             .key_len = strlen(g->round_key),
                             .target = CTRUN_ETCD_MOD,
                             .result = CTRUN_ETCD_EQUAL,
                             .num = g->round_mod_rev};
    ctrun_etcd_op_t put = {.kind = CTRUN_ETCD_OP_PUT,
                           .key = g->round_key,
                           .key_len = strlen(g->round_key),
                           .value = text,
                           .value_len = strlen(text)};
    int rc = ctrun_etcd_txn(g->etcd, &same, 1, &put, 1, NULL, 0, ctrun_etcd_group__on_proposed, g);
    free(text);
    if (rc == 0)
        g->proposing = true;
    return rc;
}

static void ctrun_etcd_group__on_set(void *data, const ctrun_etcd_result_t *res)
{
    (void)data;
    (void)res; /* a key that is gone is reported by the watch (FAILED) */
}

int ctrun_etcd_group_set_value(ctrun_etcd_group_t *g, const char *value)
{
    if (g == NULL || g->closing || g->state != CTRUN_ETCD_GROUP__JOINED)
        return CT_ESTATE;
    char *copy = strdup(value);
    if (copy == NULL)
        return -ENOMEM;
    free(g->value);
    g->value = copy;
    /* Only while the key exists: a lost node must not come back by writing. */
    ctrun_etcd_cmp_t exists = {.key = g->self_key,
                               .key_len = strlen(g->self_key),
                               .target = CTRUN_ETCD_VERSION,
                               .result = CTRUN_ETCD_GREATER,
                               .num = 0};
    ctrun_etcd_op_t put = {.kind = CTRUN_ETCD_OP_PUT,
                           .key = g->self_key,
                           .key_len = strlen(g->self_key),
                           .value = g->value,
                           .value_len = strlen(g->value),
                           .lease = g->lease};
    return ctrun_etcd_txn(g->etcd, &exists, 1, &put, 1, NULL, 0, ctrun_etcd_group__on_set, g);
}

int64_t ctrun_etcd_group_lease(const ctrun_etcd_group_t *g)
{
    return g->lease;
}

const char *ctrun_etcd_group_endpoint(const ctrun_etcd_group_t *g)
{
    return g->watch != NULL && g->watch_created && g->watch_endpoint ? g->watch_endpoint : "";
}

/* ---- closing ------------------------------------------------------------------------------- */

static void ctrun_etcd_group__finish_close(ctrun_etcd_group_t *g)
{
    ctrun_etcd_watch_cancel(g->watch);
    g->watch = NULL;
    ctrun_etcd_destroy(g->etcd); /* drops every pending callback */
    g->etcd = NULL;
    uv_close((uv_handle_t *)&g->timer, ctrun_etcd_group__on_timer_closed);
}

static void ctrun_etcd_group__on_revoked(void *data, const ctrun_etcd_result_t *res)
{
    (void)res; /* a lease that is gone already is as good as revoked */
    ctrun_etcd_group__finish_close(data);
}

void ctrun_etcd_group_close(ctrun_etcd_group_t *g, bool revoke)
{
    if (g == NULL || g->closing)
        return;
    g->closing = true;
    uv_timer_stop(&g->timer);
    ctrun_etcd_watch_cancel(g->watch);
    g->watch = NULL;
    if (revoke && g->lease != 0 &&
        ctrun_etcd_lease_revoke(g->etcd, g->lease, ctrun_etcd_group__on_revoked, g) == 0)
        return;
    ctrun_etcd_group__finish_close(g);
}
