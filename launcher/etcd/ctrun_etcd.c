/*
 * ctrun_etcd.c - the etcd v3 client of ctrun_etcd.h: request bodies and replies of etcd's JSON
 * gateway (jansson, base64), libcurl's multi-socket interface driven by libuv (a uv_poll_t per
 * socket curl asks us to watch, one uv_timer_t for curl's timeouts), failover between members,
 * and watch streams split into messages.
 *
 * How work flows: curl only ever runs inside curl_multi_socket_action, called from the poll and
 * timer callbacks; its write callback only appends bytes to the request's buffer. After each
 * call, ctrun_etcd__after_curl delivers complete watch messages and finished transfers, outside
 * any curl callback, so user callbacks may submit, cancel or destroy freely. A second timer
 * (the tick) runs only while a request waits for its next round or a watch waits for etcd's
 * confirmation with a deadline.
 *
 * Not here: TLS, authentication, keeping leases alive on a schedule, and what keys mean.
 */
#include "ctrun_etcd.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "ct_addr.h"
#include "ct_log.h"
#include "ct_time.h"

#define CTRUN_ETCD__REPLY_MAX     (64u << 20) /* a reply (or unread watch data) larger is an error */
#define CTRUN_ETCD__ENDPOINTS_MAX 64
#define CTRUN_ETCD__EP_ERR        160
#define CTRUN_ETCD__TICK_MS       50
#define CTRUN_ETCD__BACKOFF_MS    100 /* pause after a round where no member answered, doubled */
#define CTRUN_ETCD__BACKOFF_MAX   1000

typedef enum ctrun_etcd__kind {
    CTRUN_ETCD__PUT = 0,
    CTRUN_ETCD__RANGE,
    CTRUN_ETCD__DELETE,
    CTRUN_ETCD__TXN,
    CTRUN_ETCD__GRANT,
    CTRUN_ETCD__KEEPALIVE,
    CTRUN_ETCD__REVOKE,
    CTRUN_ETCD__WATCH,
    CTRUN_ETCD__AUTH, /* the client's own: a token for its user */
} ctrun_etcd__kind_t;

static const struct {
    const char *name, *path;
    bool mutating;
} ctrun_etcd__kinds[] = {
    [CTRUN_ETCD__PUT] = {"put", "/v3/kv/put", true},
    [CTRUN_ETCD__RANGE] = {"range", "/v3/kv/range", false},
    [CTRUN_ETCD__DELETE] = {"delete", "/v3/kv/deleterange", true},
    [CTRUN_ETCD__TXN] = {"txn", "/v3/kv/txn", true},
    [CTRUN_ETCD__GRANT] = {"lease grant", "/v3/lease/grant", true},
    [CTRUN_ETCD__KEEPALIVE] = {"lease keepalive", "/v3/lease/keepalive", false},
    [CTRUN_ETCD__REVOKE] = {"lease revoke", "/v3/lease/revoke", true},
    [CTRUN_ETCD__WATCH] = {"watch", "/v3/watch", false},
    [CTRUN_ETCD__AUTH] = {"authenticate", "/v3/auth/authenticate", false},
};

typedef struct ctrun_etcd__ep {
    char name[CT_HOST_MAX + 16]; /* host:port as the user wrote it (normalized) */
    char base[CT_HOST_MAX + 32]; /* http[s]://host:port */
} ctrun_etcd__ep_t;

/* One socket curl asked us to watch. */
typedef struct ctrun_etcd__sock {
    uv_poll_t poll;
    ctrun_etcd_t *e;
    curl_socket_t fd;
    struct ctrun_etcd__sock *prev, *next;
} ctrun_etcd__sock_t;

/* A request, or a watch (the caller's handle). */
struct ctrun_etcd_watch {
    ctrun_etcd_t *e; /* NULL once the client was destroyed under a watch */
    ctrun_etcd__kind_t kind;
    char *body;
    size_t body_len;
    CURL *easy;
    char *resp;
    size_t resp_len, resp_cap, resp_used; /* resp_used: watch bytes already delivered */
    size_t ep_start, ep_idx;
    int rounds;
    int64_t deadline_ms, attempt_deadline_ms, retry_at_ms;
    bool in_multi, waiting_retry, ambiguous, attempt_sent;
    bool created, finished, cancelled, delivering, pending;
    bool waiting_auth;          /* not started: waits for the token of authentication auth_gen */
    uint64_t auth_gen;          /* ... and, once sent, the token it carries */
    int auth_retries;           /* sent again after an expired token */
    struct curl_slist *headers; /* the client's headers plus Authorization, NULL without */
    char *ep_errs;              /* neps * CTRUN_ETCD__EP_ERR: what went wrong at each member */
    ctrun_etcd_cb cb;
    void *data;
    struct ctrun_etcd_watch *prev, *next;
};
typedef struct ctrun_etcd_watch ctrun_etcd__req_t;

struct ctrun_etcd {
    uv_loop_t *loop;
    CURLM *multi;
    struct curl_slist *headers;
    uv_timer_t curl_timer, tick;
    bool tick_on;
    ctrun_etcd__ep_t *eps;
    size_t neps, current;
    int64_t connect_timeout_ms, attempt_timeout_ms, request_timeout_ms;
    ctrun_etcd__req_t *reqs;
    ctrun_etcd__sock_t *socks;
    int open_handles;
    bool closing;
    /* TLS and authentication (ctrun_etcd_opts_t) */
    bool https;
    char *cacert, *cert, *key, *user, *password;
    char *token;       /* NULL until authenticated (or after it expired) */
    uint64_t auth_gen; /* the authentication running or done last; tokens are numbered alike */
    bool auth_inflight;
};

/* ---- base64 ------------------------------------------------------------------------------- */

static const char ctrun_etcd__b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t ctrun_etcd_b64_encode(const void *in, size_t n, char *out)
{
    const uint8_t *p = in;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        out[o++] = ctrun_etcd__b64[(v >> 18) & 63];
        out[o++] = ctrun_etcd__b64[(v >> 12) & 63];
        out[o++] = i + 1 < n ? ctrun_etcd__b64[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? ctrun_etcd__b64[v & 63] : '=';
    }
    out[o] = '\0';
    return o;
}

static int ctrun_etcd__b64_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int ctrun_etcd_b64_decode(const char *in, size_t len, uint8_t *out, size_t *out_len)
{
    if (len % 4 != 0)
        return CT_EPARSE;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        int v[4];
        int pad = 0;
        for (int j = 0; j < 4; j++) {
            char c = in[i + (size_t)j];
            if (c == '=' && i + 4 == len && j >= 2) {
                pad++;
                v[j] = 0;
                continue;
            }
            if (pad > 0 || (v[j] = ctrun_etcd__b64_value(c)) < 0)
                return CT_EPARSE;
        }
        uint32_t w =
            (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (uint8_t)(w >> 16);
        if (pad < 2)
            out[o++] = (uint8_t)(w >> 8);
        if (pad < 1)
            out[o++] = (uint8_t)w;
    }
    *out_len = o;
    return 0;
}

size_t ctrun_etcd_prefix_end(const void *prefix, size_t prefix_len, uint8_t *out)
{
    const uint8_t *p = prefix;
    for (size_t i = prefix_len; i > 0; i--) {
        if (p[i - 1] != 0xff) {
            memcpy(out, p, i - 1);
            out[i - 1] = (uint8_t)(p[i - 1] + 1);
            return i;
        }
    }
    out[0] = 0;
    return 1;
}

/* ---- request bodies ------------------------------------------------------------------------ */

static json_t *ctrun_etcd__json_bytes(const void *p, size_t n)
{
    char *text = malloc(4 * ((n + 2) / 3) + 1);
    if (text == NULL)
        return NULL;
    ctrun_etcd_b64_encode(p, n, text);
    json_t *s = json_string(text);
    free(text);
    return s;
}

static json_t *ctrun_etcd__json_int(int64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    return json_string(buf);
}

/* Sets key (and range_end for a prefix) on o; false on allocation failure. */
static bool ctrun_etcd__set_key(json_t *o, const void *key, size_t key_len, bool prefix)
{
    if (json_object_set_new(o, "key", ctrun_etcd__json_bytes(key, key_len)) != 0)
        return false;
    if (!prefix)
        return true;
    uint8_t *end = malloc(key_len + 1);
    if (end == NULL)
        return false;
    size_t n = ctrun_etcd_prefix_end(key, key_len, end);
    int rc = json_object_set_new(o, "range_end", ctrun_etcd__json_bytes(end, n));
    free(end);
    return rc == 0;
}

static json_t *ctrun_etcd__json_put(const void *key, size_t key_len, const void *value,
                                    size_t value_len, int64_t lease)
{
    json_t *o = json_object();
    if (o == NULL || !ctrun_etcd__set_key(o, key, key_len, false) ||
        json_object_set_new(o, "value", ctrun_etcd__json_bytes(value, value_len)) != 0 ||
        (lease != 0 && json_object_set_new(o, "lease", ctrun_etcd__json_int(lease)) != 0)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *ctrun_etcd__json_keyed(const void *key, size_t key_len, bool prefix)
{
    json_t *o = json_object();
    if (o == NULL || !ctrun_etcd__set_key(o, key, key_len, prefix)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *ctrun_etcd__json_ops(const ctrun_etcd_op_t *ops, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < n; i++) {
        const ctrun_etcd_op_t *op = &ops[i];
        json_t *inner = NULL;
        const char *name = NULL;
        switch (op->kind) {
        case CTRUN_ETCD_OP_PUT:
            inner = ctrun_etcd__json_put(op->key, op->key_len, op->value, op->value_len, op->lease);
            name = "request_put";
            break;
        case CTRUN_ETCD_OP_RANGE:
            inner = ctrun_etcd__json_keyed(op->key, op->key_len, op->prefix);
            name = "request_range";
            break;
        case CTRUN_ETCD_OP_DELETE:
            inner = ctrun_etcd__json_keyed(op->key, op->key_len, op->prefix);
            name = "request_delete_range";
            break;
        }
        json_t *wrap = json_object();
        if (inner == NULL || wrap == NULL || json_object_set_new(wrap, name, inner) != 0 ||
            json_array_append_new(a, wrap) != 0) {
            json_decref(wrap);
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

static json_t *ctrun_etcd__json_cmps(const ctrun_etcd_cmp_t *cmps, size_t n)
{
    static const char *const targets[] = {"VERSION", "CREATE", "MOD", "VALUE"};
    static const char *const fields[] = {"version", "create_revision", "mod_revision", "value"};
    static const char *const results[] = {"EQUAL", "NOT_EQUAL", "LESS", "GREATER"};
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < n; i++) {
        const ctrun_etcd_cmp_t *c = &cmps[i];
        json_t *o = json_object();
        json_t *v = c->target == CTRUN_ETCD_VALUE ? ctrun_etcd__json_bytes(c->value, c->value_len)
                                                  : ctrun_etcd__json_int(c->num);
        if (o == NULL || !ctrun_etcd__set_key(o, c->key, c->key_len, false) ||
            json_object_set_new(o, "target", json_string(targets[c->target])) != 0 ||
            json_object_set_new(o, "result", json_string(results[c->result])) != 0 ||
            json_object_set_new(o, fields[c->target], v) != 0 || json_array_append_new(a, o) != 0) {
            json_decref(o);
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* ---- replies ------------------------------------------------------------------------------- */

/* An int64 field etcd writes as a string (or a number); 0 when absent. */
static int64_t ctrun_etcd__int(const json_t *o, const char *name)
{
    const json_t *v = json_object_get(o, name);
    if (json_is_integer(v))
        return (int64_t)json_integer_value(v);
    if (json_is_string(v))
        return (int64_t)strtoll(json_string_value(v), NULL, 10);
    return 0;
}

/* Decoded replies: arrays and bytes live until the callback returns. */
typedef struct ctrun_etcd__parsed {
    ctrun_etcd_result_t res;
    ctrun_etcd_kv_t *kvs;
    ctrun_etcd_event_t *events;
    uint8_t *arena;
    size_t arena_used, arena_cap;
    size_t kv_cap, ev_cap;
    char *token;
} ctrun_etcd__parsed_t;

static void ctrun_etcd__parsed_free(ctrun_etcd__parsed_t *p)
{
    free(p->token);
    free(p->kvs);
    free(p->events);
    free(p->arena);
}

/* Decodes the base64 string field name of o into the arena. */
static int ctrun_etcd__bytes(ctrun_etcd__parsed_t *p, const json_t *o, const char *name,
                             const uint8_t **out, size_t *out_len)
{
    const json_t *v = json_object_get(o, name);
    *out = (const uint8_t *)"";
    *out_len = 0;
    if (v == NULL)
        return 0;
    if (!json_is_string(v))
        return CT_EPARSE;
    size_t len = json_string_length(v);
    if (p->arena_used + len + 1 > p->arena_cap)
        return CT_EPARSE; /* cannot happen: the arena was sized from the reply */
    uint8_t *dst = p->arena + p->arena_used;
    size_t n = 0;
    if (ctrun_etcd_b64_decode(json_string_value(v), len, dst, &n) != 0)
        return CT_EPARSE;
    dst[n] = 0;
    p->arena_used += n + 1;
    *out = dst;
    *out_len = n;
    return 0;
}

static int ctrun_etcd__kv(ctrun_etcd__parsed_t *p, const json_t *o, ctrun_etcd_kv_t *kv)
{
    if (!json_is_object(o))
        return CT_EPARSE;
    int rc = ctrun_etcd__bytes(p, o, "key", &kv->key, &kv->key_len);
    if (rc == 0)
        rc = ctrun_etcd__bytes(p, o, "value", &kv->value, &kv->value_len);
    kv->create_revision = ctrun_etcd__int(o, "create_revision");
    kv->mod_revision = ctrun_etcd__int(o, "mod_revision");
    kv->version = ctrun_etcd__int(o, "version");
    kv->lease = ctrun_etcd__int(o, "lease");
    return rc;
}

static int ctrun_etcd__add_kvs(ctrun_etcd__parsed_t *p, const json_t *arr)
{
    if (arr == NULL)
        return 0;
    if (!json_is_array(arr))
        return CT_EPARSE;
    size_t n = json_array_size(arr);
    if (p->res.nkvs + n > p->kv_cap) {
        size_t cap = p->res.nkvs + n;
        ctrun_etcd_kv_t *k = realloc(p->kvs, cap * sizeof *k);
        if (k == NULL)
            return -ENOMEM;
        p->kvs = k;
        p->kv_cap = cap;
    }
    for (size_t i = 0; i < n; i++) {
        int rc = ctrun_etcd__kv(p, json_array_get(arr, i), &p->kvs[p->res.nkvs]);
        if (rc != 0)
            return rc;
        p->res.nkvs++;
    }
    return 0;
}

static int ctrun_etcd__add_events(ctrun_etcd__parsed_t *p, const json_t *arr)
{
    if (arr == NULL)
        return 0;
    if (!json_is_array(arr))
        return CT_EPARSE;
    size_t n = json_array_size(arr);
    p->events = calloc(n + 1, sizeof *p->events);
    if (p->events == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const json_t *ev = json_array_get(arr, i);
        const json_t *type = json_object_get(ev, "type");
        p->events[i].deleted =
            json_is_string(type) && strcmp(json_string_value(type), "DELETE") == 0;
        int rc = ctrun_etcd__kv(p, json_object_get(ev, "kv"), &p->events[i].kv);
        if (rc != 0)
            return rc;
    }
    p->res.nevents = n;
    return 0;
}

/* Fills p from a successful reply of kind; CT_EPARSE when it does not have etcd's shape. */
static int ctrun_etcd__parse_ok(ctrun_etcd__kind_t kind, json_t *root, size_t text_len,
                                ctrun_etcd__parsed_t *p)
{
    p->arena_cap = text_len + 16;
    p->arena = malloc(p->arena_cap);
    if (p->arena == NULL)
        return -ENOMEM;
    if (kind == CTRUN_ETCD__KEEPALIVE || kind == CTRUN_ETCD__WATCH) {
        root = json_object_get(root, "result"); /* streamed methods wrap each message */
        if (!json_is_object(root))
            return CT_EPARSE;
    }
    const json_t *header = json_object_get(root, "header");
    if (!json_is_object(header))
        return CT_EPARSE;
    p->res.revision = ctrun_etcd__int(header, "revision");
    int rc = 0;
    switch (kind) {
    case CTRUN_ETCD__RANGE:
        rc = ctrun_etcd__add_kvs(p, json_object_get(root, "kvs"));
        break;
    case CTRUN_ETCD__DELETE:
        p->res.deleted = ctrun_etcd__int(root, "deleted");
        break;
    case CTRUN_ETCD__TXN: {
        p->res.succeeded = json_is_true(json_object_get(root, "succeeded"));
        const json_t *rs = json_object_get(root, "responses");
        for (size_t i = 0; rc == 0 && i < json_array_size(rs); i++) {
            const json_t *r = json_array_get(rs, i);
            const json_t *range = json_object_get(r, "response_range");
            if (range != NULL)
                rc = ctrun_etcd__add_kvs(p, json_object_get(range, "kvs"));
            const json_t *del = json_object_get(r, "response_delete_range");
            if (del != NULL)
                p->res.deleted += ctrun_etcd__int(del, "deleted");
        }
        break;
    }
    case CTRUN_ETCD__GRANT:
    case CTRUN_ETCD__KEEPALIVE:
        p->res.lease_id = ctrun_etcd__int(root, "ID");
        p->res.ttl = ctrun_etcd__int(root, "TTL");
        break;
    case CTRUN_ETCD__WATCH:
        p->res.created = json_is_true(json_object_get(root, "created"));
        rc = ctrun_etcd__add_events(p, json_object_get(root, "events"));
        break;
    case CTRUN_ETCD__AUTH: {
        const json_t *t = json_object_get(root, "token");
        if (!json_is_string(t) || json_string_length(t) == 0 || json_string_length(t) > 4096 ||
            strpbrk(json_string_value(t), "\r\n") != NULL)
            return CT_EPARSE;
        if ((p->token = strdup(json_string_value(t))) == NULL)
            return -ENOMEM;
        p->res.token = p->token;
        break;
    }
    default:
        break;
    }
    p->res.kvs = p->kvs;
    p->res.events = p->events;
    return rc;
}

/* gRPC status codes as etcd's gateway reports them, to our codes. */
static int ctrun_etcd__grpc_rc(int64_t code)
{
    switch (code) {
    case 3:
        return -EINVAL; /* InvalidArgument */
    case 4:
        return -ETIMEDOUT; /* DeadlineExceeded */
    case 5:
        return -ENOENT; /* NotFound */
    case 7:
        return -EACCES; /* PermissionDenied */
    case 8:
        return CT_ELIMIT; /* ResourceExhausted */
    case 9:
        return CT_ESTATE; /* FailedPrecondition */
    case 14:
        return CT_EPEER; /* Unavailable */
    case 16:
        return CT_EAUTH; /* Unauthenticated */
    default:
        return CT_EPROTOCOL;
    }
}

/* ---- requests: lifecycle ------------------------------------------------------------------ */

static void ctrun_etcd__attempt_or_fail(ctrun_etcd__req_t *r);
static void ctrun_etcd__update_tick(ctrun_etcd_t *e);
static void ctrun_etcd__need_auth(ctrun_etcd_t *e);

static void ctrun_etcd__list_remove(ctrun_etcd__req_t *r)
{
    if (r->e == NULL)
        return;
    if (r->prev != NULL)
        r->prev->next = r->next;
    else if (r->e->reqs == r)
        r->e->reqs = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    r->prev = r->next = NULL;
}

static void ctrun_etcd__detach(ctrun_etcd__req_t *r)
{
    if (r->in_multi && r->e != NULL && r->e->multi != NULL)
        curl_multi_remove_handle(r->e->multi, r->easy);
    r->in_multi = false;
    if (r->easy != NULL)
        curl_easy_cleanup(r->easy);
    r->easy = NULL;
}

static void ctrun_etcd__req_free(ctrun_etcd__req_t *r)
{
    ctrun_etcd__detach(r);
    ctrun_etcd__list_remove(r);
    curl_slist_free_all(r->headers);
    free(r->body);
    free(r->resp);
    free(r->ep_errs);
    free(r);
}

/* Calls back with res (rc, error filled by the caller); a unary request is freed afterwards, a
 * watch is marked finished (the caller frees it with ctrun_etcd_watch_cancel). */
static void ctrun_etcd__finish(ctrun_etcd__req_t *r, ctrun_etcd_result_t *res)
{
    ctrun_etcd_t *e = r->e;
    ctrun_etcd__detach(r);
    res->endpoint = e->eps[r->ep_idx].name;
    if (res->error == NULL)
        res->error = "";
    if (r->kind == CTRUN_ETCD__WATCH) {
        r->finished = true;
        r->waiting_retry = false;
        r->delivering = true;
        r->cb(r->data, res);
        r->delivering = false;
        if (r->cancelled)
            ctrun_etcd__req_free(r);
        return;
    }
    ctrun_etcd__list_remove(r);
    r->e = NULL;
    r->cb(r->data, res);
    curl_slist_free_all(r->headers);
    free(r->body);
    free(r->resp);
    free(r->ep_errs);
    free(r);
}

__attribute__((format(printf, 3, 4))) static void ctrun_etcd__fail(ctrun_etcd__req_t *r, int rc,
                                                                   const char *fmt, ...)
{
    char line[CT_ERRBUF_SIZE * 2];
    int n = snprintf(line, sizeof line, "etcd %s: ", ctrun_etcd__kinds[r->kind].name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    ctrun_etcd_result_t res = {.rc = rc, .error = line, .ambiguous = r->ambiguous};
    ctrun_etcd__finish(r, &res);
}

/* Every member failed until the deadline: one line naming each and what went wrong there. */
static void ctrun_etcd__fail_all(ctrun_etcd__req_t *r)
{
    ctrun_etcd_t *e = r->e;
    char list[CT_ERRBUF_SIZE * 2];
    size_t n = 0;
    list[0] = '\0';
    for (size_t i = 0; i < e->neps && n + 1 < sizeof list; i++) {
        const char *what = r->ep_errs + i * CTRUN_ETCD__EP_ERR;
        int w = snprintf(list + n, sizeof list - n, "%s%s: %s", i ? "; " : "", e->eps[i].name,
                         what[0] ? what : "not tried");
        if (w < 0)
            break;
        n += (size_t)w;
    }
    ctrun_etcd__fail(r, CT_EPEER, "no member answered within %" PRId64 " ms (%s)",
                     e->request_timeout_ms, list);
}

__attribute__((format(printf, 2, 3))) static void ctrun_etcd__ep_error(ctrun_etcd__req_t *r,
                                                                       const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->ep_errs + r->ep_idx * CTRUN_ETCD__EP_ERR, CTRUN_ETCD__EP_ERR, fmt, ap);
    va_end(ap);
}

/* This member failed (its error recorded): the next one, or after a round a pause, or the end. */
static void ctrun_etcd__next_endpoint(ctrun_etcd__req_t *r)
{
    ctrun_etcd_t *e = r->e;
    if (r->attempt_sent && ctrun_etcd__kinds[r->kind].mutating)
        r->ambiguous = true;
    r->ep_idx = (r->ep_idx + 1) % e->neps;
    int64_t now = ct_time_ms();
    if (now >= r->deadline_ms) {
        ctrun_etcd__fail_all(r);
        return;
    }
    if (r->ep_idx != r->ep_start) {
        ctrun_etcd__attempt_or_fail(r);
        return;
    }
    int64_t pause = CTRUN_ETCD__BACKOFF_MS << (r->rounds < 4 ? r->rounds : 4);
    if (pause > CTRUN_ETCD__BACKOFF_MAX)
        pause = CTRUN_ETCD__BACKOFF_MAX;
    r->rounds++;
    if (now + pause >= r->deadline_ms) {
        ctrun_etcd__fail_all(r);
        return;
    }
    r->retry_at_ms = now + pause;
    r->waiting_retry = true;
    ctrun_etcd__update_tick(e);
}

static size_t ctrun_etcd__on_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    ctrun_etcd__req_t *r = userdata;
    size_t n = size * nmemb;
    if (r->resp_len + n > CTRUN_ETCD__REPLY_MAX)
        return 0; /* CURLE_WRITE_ERROR */
    if (r->resp_len + n + 1 > r->resp_cap) {
        size_t cap = r->resp_cap ? r->resp_cap : 4096;
        while (cap < r->resp_len + n + 1)
            cap *= 2;
        char *b = realloc(r->resp, cap);
        if (b == NULL)
            return 0;
        r->resp = b;
        r->resp_cap = cap;
    }
    memcpy(r->resp + r->resp_len, ptr, n);
    r->resp_len += n;
    r->resp[r->resp_len] = '\0';
    r->pending = true;
    return n;
}

/* Starts one attempt on member ep_idx: 0, or -ENOMEM when curl refuses the transfer (the
 * caller reports it). Nothing completes here: adding a transfer only arms curl's timer. */
static int ctrun_etcd__start_attempt(ctrun_etcd__req_t *r)
{
    ctrun_etcd_t *e = r->e;
    if (e->user != NULL && r->kind != CTRUN_ETCD__AUTH) {
        if (e->token == NULL) {
            /* Started once a token is there (ctrun_etcd__on_auth). */
            r->waiting_auth = true;
            ctrun_etcd__need_auth(e);
            r->auth_gen = e->auth_gen;
            return 0;
        }
        curl_slist_free_all(r->headers);
        r->headers = NULL;
        char auth[4200];
        snprintf(auth, sizeof auth, "Authorization: %s", e->token);
        for (struct curl_slist *h = e->headers; h != NULL; h = h->next) {
            struct curl_slist *n = curl_slist_append(r->headers, h->data);
            if (n == NULL)
                return -ENOMEM;
            r->headers = n;
        }
        struct curl_slist *n = curl_slist_append(r->headers, auth);
        if (n == NULL)
            return -ENOMEM;
        r->headers = n;
        r->auth_gen = e->auth_gen;
    }
    int64_t left = r->deadline_ms - ct_time_ms();
    if (left < 1)
        left = 1; /* the transfer's own timeout ends it; the round logic then gives up */
    int64_t attempt = e->attempt_timeout_ms < left ? e->attempt_timeout_ms : left;
    int64_t connect = e->connect_timeout_ms < attempt ? e->connect_timeout_ms : attempt;
    r->attempt_deadline_ms = ct_time_ms() + attempt;
    r->attempt_sent = false;
    r->resp_len = r->resp_used = 0;
    r->pending = false;
    if (r->easy == NULL)
        r->easy = curl_easy_init();
    else
        curl_easy_reset(r->easy);
    if (r->easy == NULL)
        return -ENOMEM;
    char url[sizeof e->eps[0].base + 32];
    snprintf(url, sizeof url, "%s%s", e->eps[r->ep_idx].base, ctrun_etcd__kinds[r->kind].path);
    CURL *c = r->easy;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PRIVATE, r);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, e->https ? "https" : "http");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, r->headers ? r->headers : e->headers);
    if (e->https) {
        if (e->cacert != NULL)
            curl_easy_setopt(c, CURLOPT_CAINFO, e->cacert);
        if (e->cert != NULL)
            curl_easy_setopt(c, CURLOPT_SSLCERT, e->cert);
        if (e->key != NULL)
            curl_easy_setopt(c, CURLOPT_SSLKEY, e->key);
    }
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, r->body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, ctrun_etcd__on_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)connect);
    /* A watch streams for as long as it lives; its wait for "created" is timed by the tick. */
    if (r->kind != CTRUN_ETCD__WATCH)
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)attempt);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPIDLE, 5L);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPINTVL, 2L);
    if (curl_multi_add_handle(e->multi, c) != CURLM_OK)
        return -ENOMEM;
    r->in_multi = true;
    if (r->kind == CTRUN_ETCD__WATCH)
        ctrun_etcd__update_tick(e);
    return 0;
}

/* The next attempt of a request already submitted; a failure to start it finishes it. */
static void ctrun_etcd__attempt_or_fail(ctrun_etcd__req_t *r)
{
    if (ctrun_etcd__start_attempt(r) != 0)
        ctrun_etcd__fail(r, -ENOMEM, "cannot start a transfer to %s (out of memory)",
                         r->e->eps[r->ep_idx].name);
}

/* What a failed transfer means, in a few words, for the member's entry in the error line. */
static void ctrun_etcd__transfer_error(ctrun_etcd__req_t *r, CURLcode cc)
{
    ctrun_etcd_t *e = r->e;
    long sent = 0; /* bytes of request headers written: the member may have the request */
    curl_easy_getinfo(r->easy, CURLINFO_REQUEST_SIZE, &sent);
    long os_errno = 0;
    curl_easy_getinfo(r->easy, CURLINFO_OS_ERRNO, &os_errno);
    r->attempt_sent = sent > 0;
    switch (cc) {
    case CURLE_COULDNT_CONNECT:
        ctrun_etcd__ep_error(r, "cannot connect (%s)",
                             os_errno ? strerror((int)os_errno) : "unreachable");
        break;
    case CURLE_OPERATION_TIMEDOUT:
        if (sent > 0)
            ctrun_etcd__ep_error(r, "no answer within %" PRId64 " ms", e->attempt_timeout_ms);
        else
            ctrun_etcd__ep_error(r, "connection not established within %" PRId64 " ms",
                                 e->connect_timeout_ms);
        break;
    case CURLE_GOT_NOTHING:
        ctrun_etcd__ep_error(r, "closed the connection without answering");
        break;
    default:
        ctrun_etcd__ep_error(r, "%s", curl_easy_strerror(cc));
        break;
    }
}

/* An answer with a body: success, etcd's error, or something that is not etcd. */
static void ctrun_etcd__complete(ctrun_etcd__req_t *r, long status)
{
    ctrun_etcd_t *e = r->e;
    const char *ep = e->eps[r->ep_idx].name;
    json_error_t jerr;
    json_t *root = json_loadb(r->resp ? r->resp : "", r->resp_len, 0, &jerr);
    if (status != 200) {
        const json_t *code = json_object_get(root, "code");
        const json_t *msg = json_object_get(root, "message");
        int64_t grpc = json_is_integer(code) ? (int64_t)json_integer_value(code) : -1;
        if (status == 503 || grpc == 14) {
            /* The member cannot serve now (no leader, stopping): another one may. */
            r->attempt_sent = true;
            ctrun_etcd__ep_error(r, "unavailable (%s)",
                                 json_is_string(msg) ? json_string_value(msg) : "HTTP 503");
            json_decref(root);
            ctrun_etcd__next_endpoint(r);
            return;
        }
        if (grpc == 16 && e->user != NULL && r->kind != CTRUN_ETCD__AUTH && r->auth_retries < 1) {
            /* The token expired (or etcd restarted): once more with a fresh one. */
            ct_log_debug("etcd %s: %s refused the token of %s (%s); authenticating again",
                         ctrun_etcd__kinds[r->kind].name, ep, e->user,
                         json_is_string(msg) ? json_string_value(msg) : "unauthenticated");
            r->auth_retries++;
            if (r->auth_gen == e->auth_gen) {
                free(e->token);
                e->token = NULL;
            }
            json_decref(root);
            ctrun_etcd__attempt_or_fail(r);
            return;
        }
        if (json_is_string(msg))
            ctrun_etcd__fail(r, ctrun_etcd__grpc_rc(grpc), "%s: HTTP %ld: %s", ep, status,
                             json_string_value(msg));
        else
            ctrun_etcd__fail(r, CT_EPROTOCOL,
                             "%s: HTTP %ld without an etcd error (not etcd's "
                             "v3 gateway?)",
                             ep, status);
        json_decref(root);
        return;
    }
    if (root == NULL) {
        ctrun_etcd__fail(r, CT_EPARSE, "%s: malformed JSON in the reply to %s (%s at byte %d)", ep,
                         ctrun_etcd__kinds[r->kind].path, jerr.text, jerr.position);
        return;
    }
    ctrun_etcd__parsed_t p = {0};
    int rc = ctrun_etcd__parse_ok(r->kind, root, r->resp_len, &p);
    if (rc == 0 && r->kind == CTRUN_ETCD__KEEPALIVE && p.res.ttl <= 0)
        rc = -ENOENT;
    json_decref(root);
    e->current = r->ep_idx;
    if (rc == -ENOENT)
        ctrun_etcd__fail(r, rc, "%s: lease %" PRId64 " not found (expired or revoked)", ep,
                         p.res.lease_id);
    else if (rc != 0)
        ctrun_etcd__fail(r, rc, "%s: the reply to %s does not have etcd's shape", ep,
                         ctrun_etcd__kinds[r->kind].path);
    else
        ctrun_etcd__finish(r, &p.res);
    ctrun_etcd__parsed_free(&p);
}

/* Delivers the complete lines of a watch's stream; false when the watch finished. */
static bool ctrun_etcd__deliver(ctrun_etcd__req_t *w)
{
    ctrun_etcd_t *e = w->e;
    w->pending = false;
    while (!w->finished && !w->cancelled && !e->closing) {
        char *start = w->resp + w->resp_used;
        char *nl = memchr(start, '\n', w->resp_len - w->resp_used);
        if (nl == NULL)
            break;
        size_t len = (size_t)(nl - start);
        w->resp_used += len + 1;
        if (len == 0)
            continue;
        json_error_t jerr;
        json_t *root = json_loadb(start, len, 0, &jerr);
        const char *ep = e->eps[w->ep_idx].name;
        if (root == NULL) {
            ctrun_etcd__fail(w, CT_EPARSE, "%s: malformed JSON in the watch stream (%s)", ep,
                             jerr.text);
            return false;
        }
        const json_t *err = json_object_get(root, "error");
        const json_t *result = json_object_get(root, "result");
        if (err != NULL || !json_is_object(result)) {
            const json_t *msg = json_object_get(err, "message");
            ctrun_etcd__fail(w, ctrun_etcd__grpc_rc(ctrun_etcd__int(err, "grpc_code")),
                             "%s: watch ended: %s", ep,
                             json_is_string(msg) ? json_string_value(msg) : "no result");
            json_decref(root);
            return false;
        }
        if (json_is_true(json_object_get(result, "canceled"))) {
            const json_t *why = json_object_get(result, "cancel_reason");
            int64_t compact = ctrun_etcd__int(result, "compact_revision");
            ctrun_etcd__fail(w, compact > 0 ? -ERANGE : CT_EPEER,
                             "%s: watch canceled by etcd: %s (compacted up to %" PRId64 ")", ep,
                             json_is_string(why) ? json_string_value(why) : "no reason", compact);
            json_decref(root);
            return false;
        }
        ctrun_etcd__parsed_t p = {0};
        int rc = ctrun_etcd__parse_ok(CTRUN_ETCD__WATCH, root, len, &p);
        json_decref(root);
        if (rc != 0) {
            ctrun_etcd__parsed_free(&p);
            ctrun_etcd__fail(w, rc, "%s: a watch message does not have etcd's shape", ep);
            return false;
        }
        if (p.res.created) {
            w->created = true;
            e->current = w->ep_idx;
        }
        p.res.endpoint = ep;
        p.res.error = "";
        w->delivering = true;
        w->cb(w->data, &p.res);
        w->delivering = false;
        ctrun_etcd__parsed_free(&p);
        if (w->cancelled) {
            ctrun_etcd__req_free(w);
            return false;
        }
    }
    if (!w->finished && !w->cancelled && w->resp_used > 0) {
        /* Keep only the partial line, so a long-lived watch's buffer does not grow. */
        memmove(w->resp, w->resp + w->resp_used, w->resp_len - w->resp_used);
        w->resp_len -= w->resp_used;
        w->resp_used = 0;
        w->resp[w->resp_len] = '\0';
    }
    return !w->finished;
}

/* Watch messages, then finished transfers; user callbacks run here, outside curl. */
static void ctrun_etcd__after_curl(ctrun_etcd_t *e)
{
    for (;;) {
        ctrun_etcd__req_t *w = e->reqs;
        while (w != NULL && !(w->kind == CTRUN_ETCD__WATCH && w->pending && !w->finished))
            w = w->next;
        if (w == NULL || e->closing)
            break;
        ctrun_etcd__deliver(w);
        if (e->closing)
            return;
    }
    CURLMsg *m;
    int left;
    while (!e->closing && e->multi != NULL && (m = curl_multi_info_read(e->multi, &left)) != NULL) {
        if (m->msg != CURLMSG_DONE)
            continue;
        ctrun_etcd__req_t *r = NULL;
        CURLcode cc = m->data.result;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
        curl_multi_remove_handle(e->multi, m->easy_handle);
        r->in_multi = false;
        long status = 0;
        curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
        if (r->kind == CTRUN_ETCD__WATCH) {
            if (r->resp_len > r->resp_used && !ctrun_etcd__deliver(r))
                continue;
            if (e->closing)
                return;
            if (r->created) {
                ctrun_etcd__fail(r, CT_EPEER, "%s: watch stream ended (%s)", e->eps[r->ep_idx].name,
                                 cc == CURLE_OK ? "closed by the member" : curl_easy_strerror(cc));
                continue;
            }
            if (cc == CURLE_OK && status != 200 && status != 0) {
                ctrun_etcd__complete(r, status); /* etcd's error, as for a request */
                continue;
            }
            if (cc == CURLE_OK)
                ctrun_etcd__ep_error(r, "closed the watch before confirming it");
            else
                ctrun_etcd__transfer_error(r, cc);
            ctrun_etcd__next_endpoint(r);
            continue;
        }
        if (cc != CURLE_OK) {
            ctrun_etcd__transfer_error(r, cc);
            ctrun_etcd__next_endpoint(r);
            continue;
        }
        ctrun_etcd__complete(r, status);
    }
}

/* ---- libuv <-> curl ------------------------------------------------------------------------ */

static void ctrun_etcd__maybe_free(ctrun_etcd_t *e)
{
    if (e->closing && e->open_handles == 0) {
        free(e->cacert);
        free(e->cert);
        free(e->key);
        free(e->user);
        free(e->password);
        free(e->token);
        free(e->eps);
        free(e);
    }
}

static void ctrun_etcd__on_handle_closed(uv_handle_t *h)
{
    ctrun_etcd_t *e = h->data;
    e->open_handles--;
    ctrun_etcd__maybe_free(e);
}

static void ctrun_etcd__on_sock_closed(uv_handle_t *h)
{
    ctrun_etcd__sock_t *k = (ctrun_etcd__sock_t *)h;
    ctrun_etcd_t *e = k->e;
    free(k);
    e->open_handles--;
    ctrun_etcd__maybe_free(e);
}

static void ctrun_etcd__sock_close(ctrun_etcd__sock_t *k)
{
    ctrun_etcd_t *e = k->e;
    if (k->prev != NULL)
        k->prev->next = k->next;
    else
        e->socks = k->next;
    if (k->next != NULL)
        k->next->prev = k->prev;
    uv_poll_stop(&k->poll);
    uv_close((uv_handle_t *)&k->poll, ctrun_etcd__on_sock_closed);
}

static void ctrun_etcd__on_poll(uv_poll_t *h, int status, int events)
{
    ctrun_etcd__sock_t *k = h->data;
    ctrun_etcd_t *e = k->e;
    int flags = 0;
    if (status < 0)
        flags = CURL_CSELECT_ERR;
    if (events & UV_READABLE)
        flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE)
        flags |= CURL_CSELECT_OUT;
    int running = 0;
    curl_multi_socket_action(e->multi, k->fd, flags, &running);
    ctrun_etcd__after_curl(e);
}

static int ctrun_etcd__on_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    (void)easy;
    ctrun_etcd_t *e = userp;
    ctrun_etcd__sock_t *k = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (k != NULL) {
            curl_multi_assign(e->multi, s, NULL);
            ctrun_etcd__sock_close(k);
        }
        return 0;
    }
    if (k == NULL) {
        k = calloc(1, sizeof *k);
        if (k == NULL)
            return -1;
        if (uv_poll_init_socket(e->loop, &k->poll, s) != 0) {
            free(k);
            return -1;
        }
        k->poll.data = k;
        k->e = e;
        k->fd = s;
        k->next = e->socks;
        if (e->socks != NULL)
            e->socks->prev = k;
        e->socks = k;
        e->open_handles++;
        curl_multi_assign(e->multi, s, k);
    }
    int ev = 0;
    if (what & CURL_POLL_IN)
        ev |= UV_READABLE;
    if (what & CURL_POLL_OUT)
        ev |= UV_WRITABLE;
    uv_poll_start(&k->poll, ev, ctrun_etcd__on_poll);
    return 0;
}

static void ctrun_etcd__on_curl_timer(uv_timer_t *t)
{
    ctrun_etcd_t *e = t->data;
    int running = 0;
    curl_multi_socket_action(e->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    ctrun_etcd__after_curl(e);
}

static int ctrun_etcd__on_timer_change(CURLM *multi, long timeout_ms, void *userp)
{
    (void)multi;
    ctrun_etcd_t *e = userp;
    if (timeout_ms < 0)
        uv_timer_stop(&e->curl_timer);
    else
        uv_timer_start(&e->curl_timer, ctrun_etcd__on_curl_timer, (uint64_t)timeout_ms, 0);
    return 0;
}

/* A request due for its next round, or a watch whose member has not confirmed it in time. */
static ctrun_etcd__req_t *ctrun_etcd__due(ctrun_etcd_t *e, int64_t now, bool *any)
{
    *any = false;
    for (ctrun_etcd__req_t *r = e->reqs; r != NULL; r = r->next) {
        bool waits = r->waiting_retry ||
                     (r->kind == CTRUN_ETCD__WATCH && r->in_multi && !r->created && !r->finished);
        if (r->waiting_auth && !e->auth_inflight) {
            *any = true;
            return r; /* its authentication could not even be sent */
        }
        if (!waits)
            continue;
        *any = true;
        if (r->waiting_retry ? now >= r->retry_at_ms
                             : (now >= r->attempt_deadline_ms && r->resp_len == 0))
            return r;
    }
    return NULL;
}

static void ctrun_etcd__on_tick(uv_timer_t *t)
{
    ctrun_etcd_t *e = t->data;
    bool any;
    ctrun_etcd__req_t *r;
    while (!e->closing && (r = ctrun_etcd__due(e, ct_time_ms(), &any)) != NULL) {
        if (r->waiting_auth) {
            r->waiting_auth = false;
            ctrun_etcd__fail(r, -ENOMEM, "cannot send the authentication request (out of memory)");
        } else if (r->waiting_retry) {
            r->waiting_retry = false;
            ctrun_etcd__attempt_or_fail(r);
        } else {
            curl_multi_remove_handle(e->multi, r->easy);
            r->in_multi = false;
            r->attempt_sent = true;
            ctrun_etcd__ep_error(r, "did not confirm the watch within %" PRId64 " ms",
                                 e->attempt_timeout_ms);
            ctrun_etcd__next_endpoint(r);
        }
    }
    if (!e->closing)
        ctrun_etcd__update_tick(e);
}

static void ctrun_etcd__update_tick(ctrun_etcd_t *e)
{
    bool any;
    (void)ctrun_etcd__due(e, INT64_MIN, &any);
    if (any && !e->tick_on)
        uv_timer_start(&e->tick, ctrun_etcd__on_tick, CTRUN_ETCD__TICK_MS, CTRUN_ETCD__TICK_MS);
    else if (!any && e->tick_on)
        uv_timer_stop(&e->tick);
    e->tick_on = any;
}

/* ---- authentication ------------------------------------------------------------------------ */

static int ctrun_etcd__submit(ctrun_etcd_t *e, ctrun_etcd__kind_t kind, json_t *body,
                              ctrun_etcd_cb cb, void *data, ctrun_etcd__req_t **out);

/* The first request of authentication gen still waiting for it, or NULL. */
static ctrun_etcd__req_t *ctrun_etcd__waiting(ctrun_etcd_t *e, uint64_t gen)
{
    for (ctrun_etcd__req_t *r = e->reqs; r != NULL; r = r->next)
        if (r->waiting_auth && r->auth_gen == gen)
            return r;
    return NULL;
}

static void ctrun_etcd__on_auth(void *data, const ctrun_etcd_result_t *res)
{
    ctrun_etcd_t *e = data;
    uint64_t gen = e->auth_gen;
    e->auth_inflight = false;
    if (res->rc == 0) {
        free(e->token);
        e->token = strdup(res->token);
    }
    ctrun_etcd__req_t *r;
    while (!e->closing && (r = ctrun_etcd__waiting(e, gen)) != NULL) {
        r->waiting_auth = false;
        if (e->token != NULL) {
            ctrun_etcd__attempt_or_fail(r);
            continue;
        }
        if (res->rc == 0)
            ctrun_etcd__fail(r, -ENOMEM, "authenticating as %s: out of memory", e->user);
        else
            ctrun_etcd__fail(r, res->rc, "authenticating as %s: %s", e->user, res->error);
    }
}

/* Asks etcd for a token (once at a time); waiting requests start when it comes. */
static void ctrun_etcd__need_auth(ctrun_etcd_t *e)
{
    if (e->auth_inflight)
        return;
    e->auth_inflight = true;
    e->auth_gen++;
    json_t *body = json_pack("{s:s, s:s}", "name", e->user, "password", e->password);
    if (ctrun_etcd__submit(e, CTRUN_ETCD__AUTH, body, ctrun_etcd__on_auth, e, NULL) != 0) {
        e->auth_inflight = false; /* the tick fails the waiting requests */
        ctrun_etcd__update_tick(e);
    }
}

/* ---- public -------------------------------------------------------------------------------- */

static pthread_once_t ctrun_etcd__once = PTHREAD_ONCE_INIT;
static CURLcode ctrun_etcd__global_rc;

static void ctrun_etcd__global_init(void)
{
    ctrun_etcd__global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int ctrun_etcd__parse_endpoints(ctrun_etcd_t *e, const char *text, ct_errbuf_t *eb)
{
    if (text == NULL || text[0] == '\0')
        return ct_errbuf_set(eb, CT_EPARSE,
                             "etcd endpoints: empty list (expected "
                             "HOST:PORT[,HOST:PORT...])");
    e->eps = calloc(CTRUN_ETCD__ENDPOINTS_MAX, sizeof *e->eps);
    if (e->eps == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "etcd endpoints: out of memory");
    const char *p = text;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[CT_HOST_MAX + 16];
        if (len == 0 || len >= sizeof item)
            return ct_errbuf_set(eb, CT_EPARSE, "etcd endpoints '%s': %s member at offset %zu",
                                 text, len == 0 ? "empty" : "too long a", (size_t)(p - text));
        if (e->neps == CTRUN_ETCD__ENDPOINTS_MAX)
            return ct_errbuf_set(eb, CT_ELIMIT, "etcd endpoints '%s': more than %d members", text,
                                 CTRUN_ETCD__ENDPOINTS_MAX);
        memcpy(item, p, len);
        item[len] = '\0';
        ct_hostport_t hp;
        ct_errbuf_t sub;
        int rc = ct_hostport_parse(item, -1, false, &hp, &sub);
        if (rc != 0)
            return ct_errbuf_set(eb, rc, "etcd endpoints: member '%s': %s", item, sub.msg);
        ctrun_etcd__ep_t *ep = &e->eps[e->neps++];
        ct_hostport_format(&hp, ep->name, sizeof ep->name);
        snprintf(ep->base, sizeof ep->base, "%s://%s", e->https ? "https" : "http", ep->name);
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    return 0;
}

int ctrun_etcd_create(uv_loop_t *loop, const ctrun_etcd_opts_t *opts, ctrun_etcd_t **out,
                      ct_errbuf_t *eb)
{
    *out = NULL;
    pthread_once(&ctrun_etcd__once, ctrun_etcd__global_init);
    if (ctrun_etcd__global_rc != CURLE_OK)
        return ct_errbuf_set(eb, CT_ESTATE, "etcd client: curl_global_init: %s",
                             curl_easy_strerror(ctrun_etcd__global_rc));
    ctrun_etcd_t *e = calloc(1, sizeof *e);
    if (e == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "etcd client: out of memory");
    e->https = opts->https;
    if (opts->user != NULL && opts->password == NULL) {
        free(e);
        return ct_errbuf_set(eb, -EINVAL, "etcd client: user %s without a password", opts->user);
    }
    int rc = ctrun_etcd__parse_endpoints(e, opts->endpoints, eb);
    char **strs[] = {&e->cacert, &e->cert, &e->key, &e->user, &e->password};
    const char *from[] = {opts->cacert, opts->cert, opts->key, opts->user, opts->password};
    for (size_t i = 0; rc == 0 && i < sizeof strs / sizeof strs[0]; i++)
        if (from[i] != NULL && (*strs[i] = strdup(from[i])) == NULL)
            rc = ct_errbuf_set(eb, -ENOMEM, "etcd client: out of memory");
    if (rc != 0) {
        for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
            free(*strs[i]);
        free(e->eps);
        free(e);
        return rc;
    }
    e->loop = loop;
    /* A TLS connection includes the handshake and, the first time, loading the CA bundle. */
    e->connect_timeout_ms = opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms
                            : e->https                   ? 3000
                                                         : 1000;
    e->attempt_timeout_ms = opts->attempt_timeout_ms > 0 ? opts->attempt_timeout_ms
                            : e->https                   ? 5000
                                                         : 2000;
    e->request_timeout_ms = opts->request_timeout_ms > 0 ? opts->request_timeout_ms : 10000;
    e->multi = curl_multi_init();
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    struct curl_slist *h2 = h ? curl_slist_append(h, "Expect:") : NULL; /* no 100-continue */
    if (e->multi == NULL || h2 == NULL) {
        if (e->multi != NULL)
            curl_multi_cleanup(e->multi);
        curl_slist_free_all(h);
        free(e->eps);
        free(e);
        return ct_errbuf_set(eb, -ENOMEM, "etcd client: cannot create curl's multi handle");
    }
    e->headers = h2;
    curl_multi_setopt(e->multi, CURLMOPT_SOCKETFUNCTION, ctrun_etcd__on_socket);
    curl_multi_setopt(e->multi, CURLMOPT_SOCKETDATA, e);
    curl_multi_setopt(e->multi, CURLMOPT_TIMERFUNCTION, ctrun_etcd__on_timer_change);
    curl_multi_setopt(e->multi, CURLMOPT_TIMERDATA, e);
    uv_timer_init(loop, &e->curl_timer);
    uv_timer_init(loop, &e->tick);
    e->curl_timer.data = e->tick.data = e;
    e->open_handles = 2;
    *out = e;
    return 0;
}

void ctrun_etcd_destroy(ctrun_etcd_t *e)
{
    if (e == NULL || e->closing)
        return;
    e->closing = true;
    while (e->reqs != NULL) {
        ctrun_etcd__req_t *r = e->reqs;
        ctrun_etcd__detach(r);
        ctrun_etcd__list_remove(r);
        if (r->kind == CTRUN_ETCD__WATCH) {
            r->e = NULL; /* the caller still cancels it, which frees it */
            r->finished = true;
        } else {
            r->e = NULL;
            ctrun_etcd__req_free(r);
        }
    }
    /* Our poll handles leave epoll while curl's sockets are still open; then curl closes its
     * cached connections without calling us back. */
    while (e->socks != NULL)
        ctrun_etcd__sock_close(e->socks);
    curl_multi_setopt(e->multi, CURLMOPT_SOCKETFUNCTION, NULL);
    curl_multi_setopt(e->multi, CURLMOPT_TIMERFUNCTION, NULL);
    curl_multi_cleanup(e->multi);
    e->multi = NULL;
    curl_slist_free_all(e->headers);
    e->headers = NULL;
    uv_close((uv_handle_t *)&e->curl_timer, ctrun_etcd__on_handle_closed);
    uv_close((uv_handle_t *)&e->tick, ctrun_etcd__on_handle_closed);
}

/* Queues a request with body (taken over, freed on failure). */
static int ctrun_etcd__submit(ctrun_etcd_t *e, ctrun_etcd__kind_t kind, json_t *body,
                              ctrun_etcd_cb cb, void *data, ctrun_etcd__req_t **out)
{
    if (e == NULL || e->closing) {
        json_decref(body);
        return CT_ESTATE;
    }
    if (body == NULL)
        return -ENOMEM;
    ctrun_etcd__req_t *r = calloc(1, sizeof *r);
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (r != NULL)
        r->ep_errs = calloc(e->neps, CTRUN_ETCD__EP_ERR);
    if (r == NULL || text == NULL || r->ep_errs == NULL) {
        if (r != NULL)
            free(r->ep_errs);
        free(r);
        free(text);
        return -ENOMEM;
    }
    r->e = e;
    r->kind = kind;
    r->body = text;
    r->body_len = strlen(text);
    r->cb = cb;
    r->data = data;
    r->ep_start = r->ep_idx = e->current;
    r->deadline_ms = ct_time_ms() + e->request_timeout_ms;
    r->easy = curl_easy_init();
    if (r->easy == NULL) {
        free(r->ep_errs);
        free(r->body);
        free(r);
        return -ENOMEM;
    }
    r->next = e->reqs;
    if (e->reqs != NULL)
        e->reqs->prev = r;
    e->reqs = r;
    int rc = ctrun_etcd__start_attempt(r);
    if (rc != 0) {
        ctrun_etcd__req_free(r);
        return rc;
    }
    if (out != NULL)
        *out = r;
    return 0;
}

int ctrun_etcd_put(ctrun_etcd_t *e, const void *key, size_t key_len, const void *value,
                   size_t value_len, int64_t lease, ctrun_etcd_cb cb, void *data)
{
    if (key_len == 0)
        return -EINVAL;
    return ctrun_etcd__submit(e, CTRUN_ETCD__PUT,
                              ctrun_etcd__json_put(key, key_len, value, value_len, lease), cb, data,
                              NULL);
}

int ctrun_etcd_range(ctrun_etcd_t *e, const void *key, size_t key_len, bool prefix,
                     ctrun_etcd_cb cb, void *data)
{
    if (key_len == 0)
        return -EINVAL;
    return ctrun_etcd__submit(e, CTRUN_ETCD__RANGE, ctrun_etcd__json_keyed(key, key_len, prefix),
                              cb, data, NULL);
}

int ctrun_etcd_delete(ctrun_etcd_t *e, const void *key, size_t key_len, bool prefix,
                      ctrun_etcd_cb cb, void *data)
{
    if (key_len == 0)
        return -EINVAL;
    return ctrun_etcd__submit(e, CTRUN_ETCD__DELETE, ctrun_etcd__json_keyed(key, key_len, prefix),
                              cb, data, NULL);
}

int ctrun_etcd_txn(ctrun_etcd_t *e, const ctrun_etcd_cmp_t *cmps, size_t ncmps,
                   const ctrun_etcd_op_t *success, size_t nsuccess, const ctrun_etcd_op_t *failure,
                   size_t nfailure, ctrun_etcd_cb cb, void *data)
{
    for (size_t i = 0; i < ncmps; i++)
        if (cmps[i].key_len == 0 || (unsigned)cmps[i].target > CTRUN_ETCD_VALUE ||
            (unsigned)cmps[i].result > CTRUN_ETCD_GREATER)
            return -EINVAL;
    for (size_t i = 0; i < nsuccess + nfailure; i++) {
        const ctrun_etcd_op_t *op = i < nsuccess ? &success[i] : &failure[i - nsuccess];
        if (op->key_len == 0 || (unsigned)op->kind > CTRUN_ETCD_OP_DELETE)
            return -EINVAL;
    }
    json_t *o = json_object();
    if (o == NULL || json_object_set_new(o, "compare", ctrun_etcd__json_cmps(cmps, ncmps)) != 0 ||
        json_object_set_new(o, "success", ctrun_etcd__json_ops(success, nsuccess)) != 0 ||
        json_object_set_new(o, "failure", ctrun_etcd__json_ops(failure, nfailure)) != 0) {
        json_decref(o);
        o = NULL;
    }
    return ctrun_etcd__submit(e, CTRUN_ETCD__TXN, o, cb, data, NULL);
}

static json_t *ctrun_etcd__json_one(const char *name, int64_t v)
{
    json_t *o = json_object();
    if (o == NULL || json_object_set_new(o, name, ctrun_etcd__json_int(v)) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int ctrun_etcd_lease_grant(ctrun_etcd_t *e, int64_t ttl_s, ctrun_etcd_cb cb, void *data)
{
    if (ttl_s <= 0)
        return -EINVAL;
    return ctrun_etcd__submit(e, CTRUN_ETCD__GRANT, ctrun_etcd__json_one("TTL", ttl_s), cb, data,
                              NULL);
}

int ctrun_etcd_lease_keepalive(ctrun_etcd_t *e, int64_t lease_id, ctrun_etcd_cb cb, void *data)
{
    return ctrun_etcd__submit(e, CTRUN_ETCD__KEEPALIVE, ctrun_etcd__json_one("ID", lease_id), cb,
                              data, NULL);
}

int ctrun_etcd_lease_revoke(ctrun_etcd_t *e, int64_t lease_id, ctrun_etcd_cb cb, void *data)
{
    return ctrun_etcd__submit(e, CTRUN_ETCD__REVOKE, ctrun_etcd__json_one("ID", lease_id), cb, data,
                              NULL);
}

int ctrun_etcd_watch(ctrun_etcd_t *e, const void *key, size_t key_len, bool prefix,
                     int64_t start_revision, ctrun_etcd_cb cb, void *data, ctrun_etcd_watch_t **out)
{
    *out = NULL;
    if (key_len == 0 || start_revision < 0)
        return -EINVAL;
    json_t *create = ctrun_etcd__json_keyed(key, key_len, prefix);
    json_t *o = json_object();
    if (create != NULL && start_revision > 0 &&
        json_object_set_new(create, "start_revision", ctrun_etcd__json_int(start_revision)) != 0) {
        json_decref(create);
        create = NULL;
    }
    if (o == NULL || create == NULL || json_object_set_new(o, "create_request", create) != 0) {
        json_decref(o);
        o = NULL;
    }
    return ctrun_etcd__submit(e, CTRUN_ETCD__WATCH, o, cb, data, out);
}

void ctrun_etcd_watch_cancel(ctrun_etcd_watch_t *w)
{
    if (w == NULL || w->cancelled)
        return;
    w->cancelled = true;
    if (w->delivering)
        return; /* freed when its callback returns */
    ctrun_etcd__req_free(w);
}
