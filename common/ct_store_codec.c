/*
 * ct_store_codec.c - decoders and encoders of ct_store_codec.h.
 *
 * Decoding walks the buffer with a small reader that knows three outcomes per field: present,
 * missing (record how many bytes would be needed and report NEED_MORE), or invalid (an error
 * naming the field). Lengths are compared with the limits the moment their 8 bytes are in, and
 * with the whole-message cap before the caller is told how much more to buffer.
 */
#include "ct_store_codec.h"

#include <string.h>

const ct_store_limits_t ct_store_default_limits = {
    .max_key_len = CT_STORE_MAX_KEY_LEN,
    .max_value_len = CT_STORE_MAX_VALUE_LEN,
    .max_keys = CT_STORE_MAX_KEYS,
    .max_message_len = CT_STORE_MAX_MESSAGE_LEN,
};

/* ---- op tables ------------------------------------------------------------------------ */

/* Wire codes per op, -1 where the dialect lacks it (docs/store-protocol.md §2.1). */
static const int8_t ct_store_codec__v1_code[CT_STORE_OP_COUNT] = {
    [CT_STORE_OP_VALIDATE] = -1,   [CT_STORE_OP_SET] = 0,          [CT_STORE_OP_COMPARE_SET] = 1,
    [CT_STORE_OP_GET] = 2,         [CT_STORE_OP_ADD] = 3,          [CT_STORE_OP_CHECK] = 4,
    [CT_STORE_OP_WAIT] = 5,        [CT_STORE_OP_GETNUMKEYS] = 6,   [CT_STORE_OP_WATCH_KEY] = 7,
    [CT_STORE_OP_DELETE_KEY] = 8,  [CT_STORE_OP_APPEND] = -1,      [CT_STORE_OP_MULTI_GET] = -1,
    [CT_STORE_OP_MULTI_SET] = -1,  [CT_STORE_OP_CANCEL_WAIT] = -1, [CT_STORE_OP_PING] = -1,
    [CT_STORE_OP_QUEUE_PUSH] = -1, [CT_STORE_OP_QUEUE_POP] = -1,   [CT_STORE_OP_QUEUE_LEN] = -1,
    [CT_STORE_OP_LIST_KEYS] = -1,  [CT_STORE_OP_BARRIER] = -1,
};
static const int8_t ct_store_codec__v2_code[CT_STORE_OP_COUNT] = {
    [CT_STORE_OP_VALIDATE] = 0,    [CT_STORE_OP_SET] = 1,          [CT_STORE_OP_COMPARE_SET] = 2,
    [CT_STORE_OP_GET] = 3,         [CT_STORE_OP_ADD] = 4,          [CT_STORE_OP_CHECK] = 5,
    [CT_STORE_OP_WAIT] = 6,        [CT_STORE_OP_GETNUMKEYS] = 7,   [CT_STORE_OP_WATCH_KEY] = -1,
    [CT_STORE_OP_DELETE_KEY] = 8,  [CT_STORE_OP_APPEND] = 9,       [CT_STORE_OP_MULTI_GET] = 10,
    [CT_STORE_OP_MULTI_SET] = 11,  [CT_STORE_OP_CANCEL_WAIT] = 12, [CT_STORE_OP_PING] = 13,
    [CT_STORE_OP_QUEUE_PUSH] = 14, [CT_STORE_OP_QUEUE_POP] = 15,   [CT_STORE_OP_QUEUE_LEN] = 16,
    [CT_STORE_OP_LIST_KEYS] = 17,  [CT_STORE_OP_BARRIER] = 18,
};
static const char *const ct_store_codec__op_names[CT_STORE_OP_COUNT] = {
    "VALIDATE",   "SET",        "COMPARE_SET", "GET",       "ADD",       "CHECK",     "WAIT",
    "GETNUMKEYS", "WATCH_KEY",  "DELETE_KEY",  "APPEND",    "MULTI_GET", "MULTI_SET", "CANCEL_WAIT",
    "PING",       "QUEUE_PUSH", "QUEUE_POP",   "QUEUE_LEN", "LIST_KEYS", "BARRIER",
};

int ct_store_op_code(ct_store_dialect_t d, ct_store_op_t op)
{
    if ((unsigned)op >= CT_STORE_OP_COUNT)
        return -1;
    if (d == CT_STORE_V1)
        return ct_store_codec__v1_code[op];
    if (d == CT_STORE_V2)
        return ct_store_codec__v2_code[op];
    return -1;
}

bool ct_store_op_from_code(ct_store_dialect_t d, uint8_t code, ct_store_op_t *op)
{
    const int8_t *table = d == CT_STORE_V1   ? ct_store_codec__v1_code
                          : d == CT_STORE_V2 ? ct_store_codec__v2_code
                                             : NULL;
    if (table == NULL)
        return false;
    for (int i = 0; i < CT_STORE_OP_COUNT; i++) {
        if (table[i] == (int)code) {
            *op = (ct_store_op_t)i;
            return true;
        }
    }
    return false;
}

const char *ct_store_op_name(ct_store_op_t op)
{
    return (unsigned)op < CT_STORE_OP_COUNT ? ct_store_codec__op_names[op] : "?";
}

bool ct_store_op_has_reply(ct_store_op_t op)
{
    switch (op) {
    case CT_STORE_OP_VALIDATE:
    case CT_STORE_OP_SET:
    case CT_STORE_OP_APPEND:
    case CT_STORE_OP_MULTI_SET:
    case CT_STORE_OP_QUEUE_PUSH:
        return false;
    default:
        return (unsigned)op < CT_STORE_OP_COUNT;
    }
}

/* ---- primitives ----------------------------------------------------------------------- */

/* memcpy keeps these free of alignment assumptions; host order, as PyTorch sends. */
uint8_t *ct_store_put_u32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
    return p + 4;
}

uint8_t *ct_store_put_u64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
    return p + 8;
}

uint8_t *ct_store_put_bytes(uint8_t *p, const void *data, uint64_t len)
{
    p = ct_store_put_u64(p, len);
    if (len > 0)
        memcpy(p, data, (size_t)len);
    return p + len;
}

uint64_t ct_store_get_u64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

uint32_t ct_store_get_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

void ct_store_list_begin(const ct_store_list_t *list, ct_store_list_iter_t *it)
{
    it->p = list->data;
    it->end = list->data + list->nbytes;
    it->pairs = list->pairs;
}

bool ct_store_list_next(ct_store_list_iter_t *it, ct_store_bytes_t *key, ct_store_bytes_t *value)
{
    if (it->p == NULL || it->p >= it->end)
        return false;
    key->len = ct_store_get_u64(it->p);
    key->data = it->p + 8;
    it->p += 8 + key->len;
    if (it->pairs) {
        ct_store_bytes_t v;
        v.len = ct_store_get_u64(it->p);
        v.data = it->p + 8;
        it->p += 8 + v.len;
        if (value != NULL)
            *value = v;
    }
    return true;
}

int ct_store_detect_dialect(const void *buf, size_t len, ct_store_dialect_t *out)
{
    const uint8_t *b = buf;
    if (len == 0)
        return 0;
    if (b[0] != 0) {
        *out = CT_STORE_V1;
        return 1;
    }
    static const uint8_t magic[4] = {0xCE, 0xF7, 0x85, 0x3C};
    /* A prefix that already differs from the magic cannot become v2. */
    size_t have = len - 1 < 4 ? len - 1 : 4;
    if (memcmp(b + 1, magic, have) != 0) {
        *out = CT_STORE_V1;
        return 1;
    }
    if (have < 4)
        return 0;
    *out = CT_STORE_V2;
    return 1;
}

/* ---- the reader ----------------------------------------------------------------------- */

typedef struct ct_store_codec__rd {
    const uint8_t *b;
    size_t len, pos;
    size_t need; /* set when a field is incomplete */
    const ct_store_limits_t *lim;
    ct_errbuf_t *eb;
    const char *op;   /* "SET", "GET": with `kind`, the subject of error messages */
    const char *kind; /* "request", "reply", "event" */
} ct_store_codec__rd_t;

/* 1: n bytes are available at pos; 0: not yet (need recorded); < 0: the message would exceed
 * the whole-message cap. */
static int ct_store_codec__rd_have(ct_store_codec__rd_t *r, uint64_t n, const char *field)
{
    uint64_t max = r->lim->max_message_len;
    if (n > max || (uint64_t)r->pos + n > max) /* n first: pos + n could wrap */
        return ct_errbuf_set(r->eb, CT_ELIMIT,
                             "%s %s: its %s makes the message longer than the %llu-byte limit",
                             r->op, r->kind, field, (unsigned long long)max);
    uint64_t end = (uint64_t)r->pos + n;
    if (end > r->len) {
        r->need = (size_t)end;
        return 0;
    }
    return 1;
}

static int ct_store_codec__rd_u8(ct_store_codec__rd_t *r, uint8_t *v, const char *field)
{
    int rc = ct_store_codec__rd_have(r, 1, field);
    if (rc <= 0)
        return rc;
    *v = r->b[r->pos++];
    return 1;
}

static int ct_store_codec__rd_u32(ct_store_codec__rd_t *r, uint32_t *v, const char *field)
{
    int rc = ct_store_codec__rd_have(r, 4, field);
    if (rc <= 0)
        return rc;
    *v = ct_store_get_u32(r->b + r->pos);
    r->pos += 4;
    return 1;
}

static int ct_store_codec__rd_u64(ct_store_codec__rd_t *r, uint64_t *v, const char *field)
{
    int rc = ct_store_codec__rd_have(r, 8, field);
    if (rc <= 0)
        return rc;
    *v = ct_store_get_u64(r->b + r->pos);
    r->pos += 8;
    return 1;
}

/* A u64 length and that many bytes, the length checked against max before the bytes. */
static int ct_store_codec__rd_str(ct_store_codec__rd_t *r, ct_store_bytes_t *out, uint64_t max,
                                  const char *field)
{
    uint64_t n;
    int rc = ct_store_codec__rd_u64(r, &n, field);
    if (rc <= 0)
        return rc;
    if (n > max) {
        r->pos -= 8;
        return ct_errbuf_set(r->eb, CT_ELIMIT,
                             "%s %s: %s length %llu exceeds the limit of %llu bytes", r->op,
                             r->kind, field, (unsigned long long)n, (unsigned long long)max);
    }
    rc = ct_store_codec__rd_have(r, n, field);
    if (rc <= 0) {
        r->pos -= 8;
        return rc;
    }
    out->data = r->b + r->pos;
    out->len = n;
    r->pos += (size_t)n;
    return 1;
}

/* n list items starting at pos (keys, or key/value pairs), resuming from the cursor. */
static int ct_store_codec__rd_list(ct_store_codec__rd_t *r, uint64_t n, bool pairs,
                                   bool values_only, ct_store_cursor_t *cur, ct_store_list_t *out)
{
    size_t start = r->pos;
    uint64_t done = 0;
    if (cur != NULL && cur->offset > start && cur->offset <= r->len && cur->items <= n) {
        r->pos = cur->offset;
        done = cur->items;
    }
    uint64_t key_max = values_only ? r->lim->max_value_len : r->lim->max_key_len;
    for (; done < n; done++) {
        ct_store_bytes_t k = {0}, v = {0};
        int rc = ct_store_codec__rd_str(r, &k, key_max, values_only ? "value" : "key");
        if (rc <= 0)
            return rc;
        if (pairs) {
            rc = ct_store_codec__rd_str(r, &v, r->lim->max_value_len, "value");
            if (rc <= 0) {
                r->pos -= 8 + (size_t)k.len;
                return rc;
            }
        }
        if (cur != NULL) {
            cur->offset = r->pos;
            cur->items = done + 1;
        }
    }
    out->data = r->b + start;
    out->nbytes = r->pos - start;
    out->n = n;
    out->pairs = pairs;
    return 1;
}

static int ct_store_codec__rd_count(ct_store_codec__rd_t *r, uint64_t *n, const char *field)
{
    int rc = ct_store_codec__rd_u64(r, n, field);
    if (rc <= 0)
        return rc;
    if (*n > r->lim->max_keys)
        return ct_errbuf_set(r->eb, CT_ELIMIT, "%s %s: %llu %s exceed the limit of %llu", r->op,
                             r->kind, (unsigned long long)*n, field,
                             (unsigned long long)r->lim->max_keys);
    return 1;
}

static ssize_t ct_store_codec__rd_finish(ct_store_codec__rd_t *r, int rc, size_t *need)
{
    if (rc < 0)
        return rc;
    if (rc == 0) {
        if (need != NULL)
            *need = r->need > r->len ? r->need : r->len + 1;
        return CT_STORE_NEED_MORE;
    }
    return (ssize_t)r->pos;
}

/* ---- request decoding ----------------------------------------------------------------- */

ssize_t ct_store_decode_request(ct_store_dialect_t d, const void *buf, size_t len,
                                const ct_store_limits_t *lim, ct_store_req_t *req,
                                ct_store_cursor_t *cursor, size_t *need, ct_errbuf_t *eb)
{
    ct_store_codec__rd_t r = {.b = buf,
                              .len = len,
                              .lim = lim ? lim : &ct_store_default_limits,
                              .eb = eb,
                              .op = "?",
                              .kind = "request"};
    memset(req, 0, sizeof *req);
    if (len == 0) {
        if (need != NULL)
            *need = 1;
        return CT_STORE_NEED_MORE;
    }
    uint8_t code = r.b[0];
    r.pos = 1;
    if (!ct_store_op_from_code(d, code, &req->op))
        return ct_errbuf_set(eb, CT_EPROTOCOL, "unknown request type 0x%02x (%s dialect)", code,
                             d == CT_STORE_V1 ? "v1" : "v2");
    r.op = ct_store_op_name(req->op);

    int rc = 1;
    uint64_t n = 0;
    switch (req->op) {
    case CT_STORE_OP_VALIDATE:
        rc = ct_store_codec__rd_u32(&r, &req->num32, "magic");
        if (rc > 0 && req->num32 != CT_STORE_VALIDATE_MAGIC)
            rc = ct_errbuf_set(eb, CT_EPROTOCOL, "VALIDATE with wrong magic 0x%08x",
                               (unsigned)req->num32);
        break;
    case CT_STORE_OP_PING:
        rc = ct_store_codec__rd_u32(&r, &req->num32, "nonce");
        break;
    case CT_STORE_OP_SET:
    case CT_STORE_OP_APPEND:
    case CT_STORE_OP_QUEUE_PUSH:
        rc = ct_store_codec__rd_str(&r, &req->key, r.lim->max_key_len, "key");
        if (rc > 0)
            rc = ct_store_codec__rd_str(&r, &req->value, r.lim->max_value_len, "value");
        break;
    case CT_STORE_OP_COMPARE_SET:
        rc = ct_store_codec__rd_str(&r, &req->key, r.lim->max_key_len, "key");
        if (rc > 0)
            rc = ct_store_codec__rd_str(&r, &req->value, r.lim->max_value_len, "expected value");
        if (rc > 0)
            rc = ct_store_codec__rd_str(&r, &req->desired, r.lim->max_value_len, "desired value");
        break;
    case CT_STORE_OP_GET:
    case CT_STORE_OP_DELETE_KEY:
    case CT_STORE_OP_QUEUE_POP:
    case CT_STORE_OP_QUEUE_LEN:
    case CT_STORE_OP_WATCH_KEY:
        rc = ct_store_codec__rd_str(&r, &req->key, r.lim->max_key_len, "key");
        break;
    case CT_STORE_OP_ADD:
    case CT_STORE_OP_BARRIER: {
        uint64_t v = 0;
        rc = ct_store_codec__rd_str(&r, &req->key, r.lim->max_key_len, "key");
        if (rc > 0)
            rc =
                ct_store_codec__rd_u64(&r, &v, req->op == CT_STORE_OP_ADD ? "delta" : "world size");
        req->num = (int64_t)v;
        break;
    }
    case CT_STORE_OP_CHECK:
    case CT_STORE_OP_WAIT:
    case CT_STORE_OP_MULTI_GET:
    case CT_STORE_OP_MULTI_SET:
        rc = ct_store_codec__rd_count(&r, &n, req->op == CT_STORE_OP_MULTI_SET ? "pairs" : "keys");
        if (rc > 0)
            rc = ct_store_codec__rd_list(&r, n, req->op == CT_STORE_OP_MULTI_SET, false, cursor,
                                         &req->keys);
        break;
    case CT_STORE_OP_GETNUMKEYS:
    case CT_STORE_OP_CANCEL_WAIT:
    case CT_STORE_OP_LIST_KEYS:
    case CT_STORE_OP_COUNT:
        break;
    }
    return ct_store_codec__rd_finish(&r, rc, need);
}

/* ---- response decoding ---------------------------------------------------------------- */

ssize_t ct_store_decode_response(ct_store_op_t op, uint64_t nkeys, const void *buf, size_t len,
                                 const ct_store_limits_t *lim, ct_store_resp_t *resp,
                                 ct_store_cursor_t *cursor, size_t *need, ct_errbuf_t *eb)
{
    const char *name = ct_store_op_name(op);
    ct_store_codec__rd_t r = {.b = buf,
                              .len = len,
                              .lim = lim ? lim : &ct_store_default_limits,
                              .eb = eb,
                              .op = name,
                              .kind = "reply"};
    memset(resp, 0, sizeof *resp);
    resp->op = op;
    int rc = 1;
    uint64_t v = 0;
    switch (op) {
    case CT_STORE_OP_GET:
    case CT_STORE_OP_COMPARE_SET:
        rc = ct_store_codec__rd_str(&r, &resp->value, r.lim->max_value_len, "value");
        break;
    case CT_STORE_OP_ADD:
    case CT_STORE_OP_GETNUMKEYS:
    case CT_STORE_OP_DELETE_KEY:
    case CT_STORE_OP_QUEUE_LEN:
        rc = ct_store_codec__rd_u64(&r, &v, "number");
        resp->num = (int64_t)v;
        break;
    case CT_STORE_OP_CHECK:
    case CT_STORE_OP_WAIT:
    case CT_STORE_OP_CANCEL_WAIT:
    case CT_STORE_OP_BARRIER:
    case CT_STORE_OP_WATCH_KEY:
        rc = ct_store_codec__rd_u8(&r, &resp->code, "code");
        if (rc > 0) {
            bool ok;
            switch (op) {
            case CT_STORE_OP_CHECK:
                ok = resp->code <= CT_STORE_CHECK_NOT_READY;
                break;
            case CT_STORE_OP_WATCH_KEY:
                ok = resp->code == CT_STORE_WATCH_REGISTERED;
                break;
            default: /* a WAIT reply can be either byte around a CANCEL_WAIT (§2.4) */
                ok = resp->code <= CT_STORE_WAIT_CANCELED;
                break;
            }
            if (!ok)
                rc = ct_errbuf_set(eb, CT_EPROTOCOL, "%s reply: unexpected code %u", name,
                                   resp->code);
        }
        break;
    case CT_STORE_OP_PING:
        rc = ct_store_codec__rd_u32(&r, &resp->num32, "nonce");
        break;
    case CT_STORE_OP_MULTI_GET:
        if (nkeys == 0) /* zero bytes: nothing to wait for, and 0 would read as NEED_MORE */
            return ct_errbuf_set(eb, CT_EPROTOCOL, "a MULTI_GET of no keys has an empty reply");
        if (nkeys > r.lim->max_keys)
            return ct_errbuf_set(eb, CT_ELIMIT, "%s reply: %llu values exceed the limit of %llu",
                                 name, (unsigned long long)nkeys,
                                 (unsigned long long)r.lim->max_keys);
        rc = ct_store_codec__rd_list(&r, nkeys, false, true, cursor, &resp->list);
        break;
    case CT_STORE_OP_QUEUE_POP:
        rc = ct_store_codec__rd_u64(&r, &v, "queue length");
        resp->num = (int64_t)v;
        if (rc > 0 && resp->num > 0)
            rc = ct_store_codec__rd_str(&r, &resp->value, r.lim->max_value_len, "value");
        break;
    case CT_STORE_OP_LIST_KEYS: {
        rc = ct_store_codec__rd_u64(&r, &v, "key count");
        resp->num = (int64_t)v;
        if (rc > 0 && resp->num < 0)
            rc = ct_errbuf_set(eb, CT_EPROTOCOL, "%s reply: negative key count %lld", name,
                               (long long)resp->num);
        /* LIST has no key cap in PyTorch; the whole-message cap bounds it instead. */
        if (rc > 0)
            rc = ct_store_codec__rd_list(&r, v, false, false, cursor, &resp->list);
        break;
    }
    default:
        return ct_errbuf_set(eb, CT_EPROTOCOL, "%s request has no reply", ct_store_op_name(op));
    }
    return ct_store_codec__rd_finish(&r, rc, need);
}

ssize_t ct_store_decode_watch_event(const void *buf, size_t len, const ct_store_limits_t *lim,
                                    ct_store_watch_event_t *ev, size_t *need, ct_errbuf_t *eb)
{
    ct_store_codec__rd_t r = {.b = buf,
                              .len = len,
                              .lim = lim ? lim : &ct_store_default_limits,
                              .eb = eb,
                              .op = "watch",
                              .kind = "event"};
    memset(ev, 0, sizeof *ev);
    uint8_t kind = 0;
    int rc = ct_store_codec__rd_u8(&r, &kind, "kind");
    if (rc > 0 && kind > CT_STORE_WATCH_DELETED)
        rc = ct_errbuf_set(eb, CT_EPROTOCOL, "watch event: unknown kind %u", kind);
    ev->kind = (ct_store_watch_kind_t)kind;
    if (rc > 0)
        rc = ct_store_codec__rd_str(&r, &ev->key, r.lim->max_key_len, "key");
    if (rc > 0)
        rc = ct_store_codec__rd_str(&r, &ev->old_value, r.lim->max_value_len, "old value");
    if (rc > 0)
        rc = ct_store_codec__rd_str(&r, &ev->new_value, r.lim->max_value_len, "new value");
    return ct_store_codec__rd_finish(&r, rc, need);
}

/* ---- encoding ------------------------------------------------------------------------- */

/* A writer that counts always and copies only while the output fits. */
typedef struct ct_store_codec__wr {
    uint8_t *out;
    size_t cap, pos;
} ct_store_codec__wr_t;

static void ct_store_codec__wr_raw(ct_store_codec__wr_t *w, const void *p, size_t n)
{
    if (w->pos + n <= w->cap && n > 0)
        memcpy(w->out + w->pos, p, n);
    w->pos += n;
}

static void ct_store_codec__wr_u8(ct_store_codec__wr_t *w, uint8_t v)
{
    ct_store_codec__wr_raw(w, &v, 1);
}

static void ct_store_codec__wr_u32(ct_store_codec__wr_t *w, uint32_t v)
{
    ct_store_codec__wr_raw(w, &v, 4);
}

static void ct_store_codec__wr_u64(ct_store_codec__wr_t *w, uint64_t v)
{
    ct_store_codec__wr_raw(w, &v, 8);
}

static void ct_store_codec__wr_str(ct_store_codec__wr_t *w, ct_store_bytes_t s)
{
    ct_store_codec__wr_u64(w, s.len);
    ct_store_codec__wr_raw(w, s.data, (size_t)s.len);
}

/* Items from arrays, or an already encoded list when the arrays are absent. */
static void ct_store_codec__wr_list(ct_store_codec__wr_t *w, const ct_store_bytes_t *keys,
                                    const ct_store_bytes_t *values, uint64_t n,
                                    const ct_store_list_t *encoded, bool with_count)
{
    if (keys == NULL && encoded->data != NULL) {
        if (with_count)
            ct_store_codec__wr_u64(w, encoded->n);
        ct_store_codec__wr_raw(w, encoded->data, encoded->nbytes);
        return;
    }
    if (keys == NULL)
        n = 0;
    if (with_count)
        ct_store_codec__wr_u64(w, n);
    for (uint64_t i = 0; i < n; i++) {
        ct_store_codec__wr_str(w, keys[i]);
        if (values != NULL)
            ct_store_codec__wr_str(w, values[i]);
    }
}

ssize_t ct_store_encode_request(ct_store_dialect_t d, const ct_store_req_t *req, void *out,
                                size_t cap, ct_errbuf_t *eb)
{
    int code = ct_store_op_code(d, req->op);
    if (code < 0)
        return ct_errbuf_set(eb, CT_EPROTOCOL, "%s does not exist in the %s dialect",
                             ct_store_op_name(req->op), d == CT_STORE_V1 ? "v1" : "v2");
    ct_store_codec__wr_t w = {.out = out, .cap = out != NULL ? cap : 0};
    ct_store_codec__wr_u8(&w, (uint8_t)code);
    switch (req->op) {
    case CT_STORE_OP_VALIDATE:
    case CT_STORE_OP_PING:
        ct_store_codec__wr_u32(&w, req->num32);
        break;
    case CT_STORE_OP_SET:
    case CT_STORE_OP_APPEND:
    case CT_STORE_OP_QUEUE_PUSH:
        ct_store_codec__wr_str(&w, req->key);
        ct_store_codec__wr_str(&w, req->value);
        break;
    case CT_STORE_OP_COMPARE_SET:
        ct_store_codec__wr_str(&w, req->key);
        ct_store_codec__wr_str(&w, req->value);
        ct_store_codec__wr_str(&w, req->desired);
        break;
    case CT_STORE_OP_GET:
    case CT_STORE_OP_DELETE_KEY:
    case CT_STORE_OP_QUEUE_POP:
    case CT_STORE_OP_QUEUE_LEN:
    case CT_STORE_OP_WATCH_KEY:
        ct_store_codec__wr_str(&w, req->key);
        break;
    case CT_STORE_OP_ADD:
    case CT_STORE_OP_BARRIER:
        ct_store_codec__wr_str(&w, req->key);
        ct_store_codec__wr_u64(&w, (uint64_t)req->num);
        break;
    case CT_STORE_OP_CHECK:
    case CT_STORE_OP_WAIT:
    case CT_STORE_OP_MULTI_GET:
        ct_store_codec__wr_list(&w, req->key_array, NULL, req->nkeys, &req->keys, true);
        break;
    case CT_STORE_OP_MULTI_SET:
        ct_store_codec__wr_list(&w, req->key_array, req->key_array ? req->value_array : NULL,
                                req->nkeys, &req->keys, true);
        break;
    case CT_STORE_OP_GETNUMKEYS:
    case CT_STORE_OP_CANCEL_WAIT:
    case CT_STORE_OP_LIST_KEYS:
    case CT_STORE_OP_COUNT:
        break;
    }
    return (ssize_t)w.pos;
}

ssize_t ct_store_encode_response(const ct_store_resp_t *resp, void *out, size_t cap,
                                 ct_errbuf_t *eb)
{
    ct_store_codec__wr_t w = {.out = out, .cap = out != NULL ? cap : 0};
    switch (resp->op) {
    case CT_STORE_OP_GET:
    case CT_STORE_OP_COMPARE_SET:
        ct_store_codec__wr_str(&w, resp->value);
        break;
    case CT_STORE_OP_ADD:
    case CT_STORE_OP_GETNUMKEYS:
    case CT_STORE_OP_DELETE_KEY:
    case CT_STORE_OP_QUEUE_LEN:
        ct_store_codec__wr_u64(&w, (uint64_t)resp->num);
        break;
    case CT_STORE_OP_CHECK:
    case CT_STORE_OP_WAIT:
    case CT_STORE_OP_CANCEL_WAIT:
    case CT_STORE_OP_BARRIER:
    case CT_STORE_OP_WATCH_KEY:
        ct_store_codec__wr_u8(&w, resp->code);
        break;
    case CT_STORE_OP_PING:
        ct_store_codec__wr_u32(&w, resp->num32);
        break;
    case CT_STORE_OP_MULTI_GET:
        ct_store_codec__wr_list(&w, resp->item_array, NULL, resp->nitems, &resp->list, false);
        break;
    case CT_STORE_OP_QUEUE_POP:
        ct_store_codec__wr_u64(&w, (uint64_t)resp->num);
        if (resp->num > 0)
            ct_store_codec__wr_str(&w, resp->value);
        break;
    case CT_STORE_OP_LIST_KEYS:
        ct_store_codec__wr_list(&w, resp->item_array, NULL, resp->nitems, &resp->list, true);
        break;
    default:
        return ct_errbuf_set(eb, CT_EPROTOCOL, "%s request has no reply",
                             ct_store_op_name(resp->op));
    }
    return (ssize_t)w.pos;
}

size_t ct_store_encode_watch_event(const ct_store_watch_event_t *ev, void *out, size_t cap)
{
    ct_store_codec__wr_t w = {.out = out, .cap = out != NULL ? cap : 0};
    ct_store_codec__wr_u8(&w, (uint8_t)ev->kind);
    ct_store_codec__wr_str(&w, ev->key);
    ct_store_codec__wr_str(&w, ev->old_value);
    ct_store_codec__wr_str(&w, ev->new_value);
    return w.pos;
}

/* ---- authentication messages ---------------------------------------------------------- */

static const uint8_t ct_store_codec__auth_magic[4] = {'C', 'T', 'S', 'A'};

size_t ct_store_encode_auth_hello(const uint8_t nonce[CT_STORE_AUTH_NONCE_LEN], void *out)
{
    uint8_t *p = out;
    p[0] = CT_STORE_AUTH_HELLO;
    memcpy(p + 1, ct_store_codec__auth_magic, 4);
    p[5] = CT_STORE_AUTH_VERSION;
    memcpy(p + 6, nonce, CT_STORE_AUTH_NONCE_LEN);
    return CT_STORE_AUTH_HELLO_LEN;
}

ssize_t ct_store_decode_auth_hello(const void *buf, size_t len,
                                   uint8_t nonce[CT_STORE_AUTH_NONCE_LEN], ct_errbuf_t *eb)
{
    const uint8_t *b = buf;
    /* Reject as early as the bytes allow: a stranger should not be able to hold a slot open
     * by sending a plausible first byte and nothing more. */
    if (len >= 1 && b[0] != CT_STORE_AUTH_HELLO)
        return ct_errbuf_set(eb, CT_EAUTH, "expected an authentication hello, got type 0x%02x",
                             b[0]);
    size_t have = len < 5 ? len : 5;
    if (have > 1 && memcmp(b + 1, ct_store_codec__auth_magic, have - 1) != 0)
        return ct_errbuf_set(eb, CT_EAUTH, "authentication hello with a wrong magic");
    if (len >= 6 && b[5] != CT_STORE_AUTH_VERSION)
        return ct_errbuf_set(eb, CT_EAUTH, "authentication version %u (this build speaks %u)", b[5],
                             CT_STORE_AUTH_VERSION);
    if (len < CT_STORE_AUTH_HELLO_LEN)
        return CT_STORE_NEED_MORE;
    memcpy(nonce, b + 6, CT_STORE_AUTH_NONCE_LEN);
    return CT_STORE_AUTH_HELLO_LEN;
}

size_t ct_store_encode_auth_mac(uint8_t type, const uint8_t mac[CT_STORE_AUTH_MAC_LEN], void *out)
{
    uint8_t *p = out;
    p[0] = type;
    memcpy(p + 1, mac, CT_STORE_AUTH_MAC_LEN);
    return CT_STORE_AUTH_PROOF_LEN;
}

ssize_t ct_store_decode_auth_mac(uint8_t type, const void *buf, size_t len,
                                 uint8_t mac[CT_STORE_AUTH_MAC_LEN], ct_errbuf_t *eb)
{
    const uint8_t *b = buf;
    if (len >= 1 && b[0] != type)
        return ct_errbuf_set(eb, CT_EAUTH, "expected authentication message 0x%02x, got 0x%02x",
                             type, b[0]);
    if (len < CT_STORE_AUTH_PROOF_LEN)
        return CT_STORE_NEED_MORE;
    memcpy(mac, b + 1, CT_STORE_AUTH_MAC_LEN);
    return CT_STORE_AUTH_PROOF_LEN;
}
