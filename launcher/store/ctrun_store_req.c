/*
 * ctrun_store_req.c - request handling: the parser step of a connection (the authentication
 * handshake when a token is set, dialect detection, then one request at a time through the
 * codec) and the handler of each request, which runs the operation and writes the reply.
 *
 * Deliberately not here: the byte layout of requests and replies (common/ct_store_codec.h),
 * the table and its operations (ctrun_store_table.c), waits and watches (ctrun_store_wait.c),
 * buffering, reading and writing (ctrun_store_conn.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_store_auth.h"
#include "ctrun_store_internal.h"

static void ctrun_store__req_wait(ctrun_store__conn_t *c, const ct_store_req_t *req)
{
    ctrun_store_t *s = c->s;
    ct_store_list_iter_t it;
    ct_store_bytes_t k;
    uint64_t missing = 0;
    ct_store_list_begin(&req->keys, &it);
    while (ct_store_list_next(&it, &k, NULL))
        if (!ctrun_store__exists(ctrun_store__lookup(s, k.data, k.len, NULL)))
            missing++;
    if (missing == 0) {
        ctrun_store__reply_u8(c, CT_STORE_WAIT_STOP, false);
        return;
    }
    ctrun_store__wait_t *w = ctrun_store__wait_new(c);
    if (w == NULL) {
        ctrun_store__drop(c, "WAIT: store memory cap of %llu bytes reached",
                          (unsigned long long)s->max_bytes);
        return;
    }
    ct_store_list_begin(&req->keys, &it);
    while (ct_store_list_next(&it, &k, NULL)) {
        ctrun_store__entry_t *e = ctrun_store__lookup(s, k.data, k.len, NULL);
        if (ctrun_store__exists(e))
            continue;
        if (e == NULL)
            e = ctrun_store__obtain(s, k.data, k.len);
        if (e == NULL || !ctrun_store__reg_add(s, w, e, false)) {
            if (e != NULL)
                ctrun_store__release(s, e);
            ctrun_store__drop(c, "WAIT: store memory cap of %llu bytes reached",
                              (unsigned long long)s->max_bytes);
            return;
        }
    }
}

static void ctrun_store__req_barrier(ctrun_store__conn_t *c, const ct_store_req_t *req)
{
    ctrun_store_t *s = c->s;
    ctrun_store__ctx_t ctx = {.conn = c, .op = CT_STORE_OP_BARRIER};
    ct_errbuf_t eb;
    int64_t count = 0;
    /* Peek first: whether this arrival completes the barrier decides whom the write wakes. */
    int64_t cur = 0;
    ctrun_store__entry_t *e = ctrun_store__lookup(s, req->key.data, req->key.len, NULL);
    if (e != NULL && e->has_value && ctrun_store__parse_counter(e->value, e->vlen, &cur) != 0)
        cur = 0; /* ctrun_store__add reports it */
    bool done = (int64_t)((uint64_t)cur + 1) >= req->num;
    int rc =
        ctrun_store__add(s, &ctx, req->key.data, req->key.len, 1,
                         done ? CTRUN_STORE__WAKE_ALL : CTRUN_STORE__WAKE_NOT_BARRIER, &count, &eb);
    if (rc != 0) {
        ctrun_store__drop(c, "BARRIER: %s", eb.msg);
        return;
    }
    if (count >= req->num) {
        ctrun_store__reply_u8(c, CT_STORE_WAIT_STOP, false);
        return;
    }
    /* Looked up again: a watch callback may have deleted the key in the meantime. */
    ctrun_store__wait_t *w = ctrun_store__wait_new(c);
    e = w != NULL ? ctrun_store__obtain(s, req->key.data, req->key.len) : NULL;
    if (w == NULL || e == NULL || !ctrun_store__reg_add(s, w, e, true)) {
        if (e != NULL)
            ctrun_store__release(s, e);
        ctrun_store__drop(c, "BARRIER: store memory cap of %llu bytes reached",
                          (unsigned long long)s->max_bytes);
    }
}

static void ctrun_store__req_multi_get(ctrun_store__conn_t *c, const ct_store_req_t *req)
{
    ctrun_store_t *s = c->s;
    ct_store_list_iter_t it;
    ct_store_bytes_t k;
    uint64_t total = 0;
    ct_store_list_begin(&req->keys, &it);
    while (ct_store_list_next(&it, &k, NULL)) {
        ctrun_store__entry_t *e = ctrun_store__lookup(s, k.data, k.len, NULL);
        total += 8 + (e != NULL && e->has_value ? e->vlen : 0);
    }
    if (total > s->limits.max_message_len) {
        ctrun_store__drop(c, "MULTI_GET reply of %llu bytes exceeds the %llu-byte limit",
                          (unsigned long long)total, (unsigned long long)s->limits.max_message_len);
        return;
    }
    if (total == 0) /* MULTI_GET of no keys: an empty reply */
        return;
    uint8_t *p = ctrun_store__out(c, (size_t)total, false);
    if (p == NULL)
        return;
    ct_store_list_begin(&req->keys, &it);
    while (ct_store_list_next(&it, &k, NULL)) {
        ctrun_store__entry_t *e = ctrun_store__lookup(s, k.data, k.len, NULL);
        bool has = e != NULL && e->has_value;
        p = ct_store_put_bytes(p, has ? e->value : NULL, has ? e->vlen : 0);
    }
}

static void ctrun_store__req_list_keys(ctrun_store__conn_t *c)
{
    ctrun_store_t *s = c->s;
    size_t total = 8;
    for (size_t b = 0; b <= s->tab_mask; b++)
        for (ctrun_store__entry_t *e = s->tab[b]; e != NULL; e = e->hnext)
            if (e->has_value)
                total += 8 + e->klen;
    uint8_t *p = ctrun_store__out(c, total, false);
    if (p == NULL)
        return;
    p = ct_store_put_u64(p, s->st.keys);
    for (size_t b = 0; b <= s->tab_mask; b++)
        for (ctrun_store__entry_t *e = s->tab[b]; e != NULL; e = e->hnext)
            if (e->has_value)
                p = ct_store_put_bytes(p, e->key, e->klen);
}

static void ctrun_store__req_queue_push(ctrun_store__conn_t *c, const ct_store_req_t *req)
{
    ctrun_store_t *s = c->s;
    size_t charge = sizeof(ctrun_store__item_t) + req->value.len + CTRUN_STORE__ENTRY_OVERHEAD;
    ctrun_store__entry_t *e = ctrun_store__obtain(s, req->key.data, req->key.len);
    ctrun_store__item_t *it = NULL;
    if (e != NULL && ctrun_store__charge(s, charge)) {
        it = malloc(sizeof *it + req->value.len);
        if (it == NULL)
            ctrun_store__uncharge(s, charge);
    }
    if (it == NULL) {
        if (e != NULL)
            ctrun_store__release(s, e);
        ctrun_store__drop(c, "QUEUE_PUSH: store memory cap of %llu bytes reached",
                          (unsigned long long)s->max_bytes);
        return;
    }
    it->next = NULL;
    it->len = req->value.len;
    if (it->len > 0)
        memcpy(it->data, req->value.data, it->len);
    if (e->qtail)
        e->qtail->next = it;
    else
        e->qhead = it;
    e->qtail = it;
    if (e->qlen++ == 0)
        s->st.queues++;
    ctrun_store__wake(s, e, CTRUN_STORE__WAKE_ONE);
}

static void ctrun_store__req_queue_pop(ctrun_store__conn_t *c, const ct_store_req_t *req)
{
    ctrun_store_t *s = c->s;
    ctrun_store__entry_t *e = ctrun_store__lookup(s, req->key.data, req->key.len, NULL);
    uint64_t n = e != NULL ? e->qlen : 0;
    ctrun_store__reply_u64(c, n);
    if (n == 0)
        return;
    ctrun_store__item_t *it = e->qhead;
    ctrun_store__reply_bytes(c, it->data, it->len);
    e->qhead = it->next;
    if (e->qhead == NULL)
        e->qtail = NULL;
    if (--e->qlen == 0)
        s->st.queues--;
    ctrun_store__uncharge(s, sizeof *it + it->len + CTRUN_STORE__ENTRY_OVERHEAD);
    free(it);
    ctrun_store__release(s, e);
}

static void ctrun_store__req_watch_key(ctrun_store__conn_t *c, const ct_store_req_t *req)
{
    ctrun_store_t *s = c->s;
    ctrun_store__entry_t *e = ctrun_store__obtain(s, req->key.data, req->key.len);
    ctrun_store__kwatch_t *k = NULL;
    if (e != NULL && ctrun_store__charge(s, sizeof *k + CTRUN_STORE__ENTRY_OVERHEAD)) {
        k = calloc(1, sizeof *k);
        if (k == NULL)
            ctrun_store__uncharge(s, sizeof *k + CTRUN_STORE__ENTRY_OVERHEAD);
    }
    if (k == NULL) {
        if (e != NULL)
            ctrun_store__release(s, e);
        ctrun_store__drop(c, "WATCH_KEY: store memory cap of %llu bytes reached",
                          (unsigned long long)s->max_bytes);
        return;
    }
    k->entry = e;
    k->conn = c;
    k->enext = e->watchers;
    if (e->watchers)
        e->watchers->eprev = k;
    e->watchers = k;
    k->cnext = c->kwatches;
    if (c->kwatches)
        c->kwatches->cprev = k;
    c->kwatches = k;
    ctrun_store__reply_u8(c, CT_STORE_WATCH_REGISTERED, false);
}

static void ctrun_store__handle(ctrun_store__conn_t *c, const ct_store_req_t *req)
{
    ctrun_store_t *s = c->s;
    ctrun_store__ctx_t ctx = {.conn = c, .op = req->op};
    ct_errbuf_t eb;
    ct_store_bytes_t reply;
    int64_t num = 0;
    int rc = 0;
    s->st.requests++;
    if (req->op == CT_STORE_OP_VALIDATE) {
        if (c->validated)
            ctrun_store__drop(c, "VALIDATE is only valid as the first request");
        c->validated = true;
        return;
    }
    switch (req->op) {
    case CT_STORE_OP_SET:
    case CT_STORE_OP_APPEND:
        rc = ctrun_store__write(s, &ctx, req->key.data, req->key.len, req->value.data,
                                req->value.len, req->op == CT_STORE_OP_APPEND,
                                CTRUN_STORE__WAKE_ALL, &eb);
        break;
    case CT_STORE_OP_MULTI_SET: {
        ct_store_list_iter_t it;
        ct_store_bytes_t k, v;
        ct_store_list_begin(&req->keys, &it);
        while (rc == 0 && !c->closing && ct_store_list_next(&it, &k, &v))
            rc = ctrun_store__write(s, &ctx, k.data, k.len, v.data, v.len, false,
                                    CTRUN_STORE__WAKE_ALL, &eb);
        break;
    }
    case CT_STORE_OP_GET: {
        ctrun_store__entry_t *e = ctrun_store__lookup(s, req->key.data, req->key.len, NULL);
        bool has = e != NULL && e->has_value;
        ctrun_store__reply_bytes(c, has ? e->value : NULL, has ? e->vlen : 0);
        break;
    }
    case CT_STORE_OP_ADD:
        rc = ctrun_store__add(s, &ctx, req->key.data, req->key.len, req->num, CTRUN_STORE__WAKE_ALL,
                              &num, &eb);
        if (rc == 0)
            ctrun_store__reply_u64(c, (uint64_t)num);
        break;
    case CT_STORE_OP_COMPARE_SET:
        rc = ctrun_store__compare_set(s, &ctx, req->key.data, req->key.len, req->value,
                                      req->desired, &reply, &eb);
        if (rc == 0)
            ctrun_store__reply_bytes(c, reply.data, reply.len);
        break;
    case CT_STORE_OP_CHECK: {
        ct_store_list_iter_t it;
        ct_store_bytes_t k;
        bool ready = true;
        ct_store_list_begin(&req->keys, &it);
        while (ready && ct_store_list_next(&it, &k, NULL))
            ready = ctrun_store__exists(ctrun_store__lookup(s, k.data, k.len, NULL));
        ctrun_store__reply_u8(c, ready ? CT_STORE_CHECK_READY : CT_STORE_CHECK_NOT_READY, false);
        break;
    }
    case CT_STORE_OP_WAIT:
        ctrun_store__req_wait(c, req);
        break;
    case CT_STORE_OP_GETNUMKEYS:
        ctrun_store__reply_u64(c, s->st.keys);
        break;
    case CT_STORE_OP_DELETE_KEY:
        ctrun_store__reply_u64(c,
                               ctrun_store__delete(s, &ctx, req->key.data, req->key.len) ? 1 : 0);
        break;
    case CT_STORE_OP_MULTI_GET:
        ctrun_store__req_multi_get(c, req);
        break;
    case CT_STORE_OP_CANCEL_WAIT:
        ctrun_store__drop_waits(c);
        ctrun_store__reply_u8(c, CT_STORE_WAIT_CANCELED, false);
        break;
    case CT_STORE_OP_PING: {
        uint8_t *p = ctrun_store__out(c, 4, false);
        if (p != NULL)
            ct_store_put_u32(p, req->num32);
        break;
    }
    case CT_STORE_OP_QUEUE_PUSH:
        ctrun_store__req_queue_push(c, req);
        break;
    case CT_STORE_OP_QUEUE_POP:
        ctrun_store__req_queue_pop(c, req);
        break;
    case CT_STORE_OP_QUEUE_LEN: {
        ctrun_store__entry_t *e = ctrun_store__lookup(s, req->key.data, req->key.len, NULL);
        ctrun_store__reply_u64(c, e != NULL ? e->qlen : 0);
        break;
    }
    case CT_STORE_OP_LIST_KEYS:
        ctrun_store__req_list_keys(c);
        break;
    case CT_STORE_OP_BARRIER:
        ctrun_store__req_barrier(c, req);
        break;
    case CT_STORE_OP_WATCH_KEY:
        ctrun_store__req_watch_key(c, req);
        break;
    case CT_STORE_OP_VALIDATE:
    case CT_STORE_OP_COUNT:
        break;
    }
    if (rc != 0)
        ctrun_store__drop(c, "%s: %s", ct_store_op_name(req->op), eb.msg);
}

/* One message from p: > 0 consumed, 0 needs more (c->need set), < 0 the connection closed. */
ssize_t ctrun_store__step(ctrun_store__conn_t *c, const uint8_t *p, size_t n)
{
    /* (A doomed connection is never stepped: ctrun_store__process stops first.) */
    ctrun_store_t *s = c->s;
    ct_errbuf_t eb;
    ssize_t r;
    uint8_t mac[CT_STORE_AUTH_MAC_LEN], want[CT_STORE_AUTH_MAC_LEN];
    uint8_t *o;
    switch (c->state) {
    case CTRUN_STORE__AUTH_HELLO:
        r = ct_store_decode_auth_hello(p, n, c->cn, &eb);
        if (r == 0)
            c->need = CT_STORE_AUTH_HELLO_LEN;
        if (r <= 0)
            break;
        if (ct_store_auth_nonce(c->sn, &eb) != 0) {
            r = CT_EAUTH;
            break;
        }
        o = ctrun_store__out(c, CT_STORE_AUTH_HELLO_LEN, false);
        if (o != NULL)
            ct_store_encode_auth_hello(c->sn, o);
        c->state = CTRUN_STORE__AUTH_PROOF;
        return r;
    case CTRUN_STORE__AUTH_PROOF:
        r = ct_store_decode_auth_mac(CT_STORE_AUTH_PROOF, p, n, mac, &eb);
        if (r == 0)
            c->need = CT_STORE_AUTH_PROOF_LEN;
        if (r <= 0)
            break;
        if (ct_store_auth_mac(s->token, s->token_len, false, c->cn, c->sn, want, &eb) != 0) {
            r = CT_EAUTH;
            break;
        }
        if (!ct_store_auth_mac_equal(mac, want)) {
            snprintf(eb.msg, sizeof eb.msg, "wrong token");
            r = CT_EAUTH;
            break;
        }
        if (ct_store_auth_mac(s->token, s->token_len, true, c->cn, c->sn, mac, &eb) != 0) {
            r = CT_EAUTH;
            break;
        }
        o = ctrun_store__out(c, CT_STORE_AUTH_PROOF_LEN, false);
        if (o != NULL)
            ct_store_encode_auth_mac(CT_STORE_AUTH_ACCEPT, mac, o);
        c->state = CTRUN_STORE__DETECT;
        return r;
    case CTRUN_STORE__DETECT:
        if (p[0] == CT_STORE_AUTH_HELLO && s->token == NULL) {
            ctrun_store__drop(c, "the client tried to authenticate, but this store has no token");
            return -1;
        }
        if (ct_store_detect_dialect(p, n, &c->dialect) == 0) {
            c->need = 5;
            return 0;
        }
        c->state = CTRUN_STORE__READY;
        /* fall through */
    case CTRUN_STORE__READY: {
        ct_store_req_t req;
        size_t need = 0;
        r = ct_store_decode_request(c->dialect, p, n, &s->limits, &req, &c->cursor, &need, &eb);
        if (r == 0) {
            c->need = need;
            return 0;
        }
        if (r < 0) {
            ctrun_store__drop(c, "%s", eb.msg);
            return -1;
        }
        ctrun_store__handle(c, &req);
        return c->closing || c->doomed ? -1 : r;
    }
    default:
        return -1;
    }
    if (r < 0) {
        ctrun_store__drop(c, "authentication failed: %s", eb.msg);
        return -1;
    }
    return 0;
}
