/*
 * ctrun_store_table.c - the store's key/value table: the keyed hash (SipHash-1-3), entries
 * (lookup, creation under the memory cap, release once nothing needs them, table growth), and
 * the operations on values that network requests and the in-process API share: write (SET,
 * APPEND, and the write behind ADD and COMPARE_SET), delete, add, compare_set, wipe.
 *
 * A write wakes the entry's waiters and sends watch events through ctrun_store_wait.c; memory is
 * charged through the accounting in ctrun_store_internal.h. Deliberately not here: bytes on the
 * wire (ctrun_store_req.c parses requests and writes replies), connections, and the in-process
 * API's argument checks (ctrun_store.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrun_store_internal.h"

/* ---- hashing ---------------------------------------------------------------------------- */

static inline uint64_t ctrun_store__rotl(uint64_t x, int b)
{
    return (x << b) | (x >> (64 - b));
}

#define CTRUN_STORE__SIPROUND           \
    do {                                \
        v0 += v1;                       \
        v1 = ctrun_store__rotl(v1, 13); \
        v1 ^= v0;                       \
        v0 = ctrun_store__rotl(v0, 32); \
        v2 += v3;                       \
        v3 = ctrun_store__rotl(v3, 16); \
        v3 ^= v2;                       \
        v0 += v3;                       \
        v3 = ctrun_store__rotl(v3, 21); \
        v3 ^= v0;                       \
        v2 += v1;                       \
        v1 = ctrun_store__rotl(v1, 17); \
        v1 ^= v2;                       \
        v2 = ctrun_store__rotl(v2, 32); \
    } while (0)

/* SipHash-1-3 (Aumasson & Bernstein), the keyed hash that hash-flooding defences use. */
static uint64_t ctrun_store__hash(const ctrun_store_t *s, const uint8_t *p, size_t n)
{
    uint64_t k0 = s->sipkey[0], k1 = s->sipkey[1];
    uint64_t v0 = k0 ^ 0x736f6d6570736575ULL, v1 = k1 ^ 0x646f72616e646f6dULL;
    uint64_t v2 = k0 ^ 0x6c7967656e657261ULL, v3 = k1 ^ 0x7465646279746573ULL;
    size_t full = n & ~(size_t)7;
    for (size_t i = 0; i < full; i += 8) {
        uint64_t m;
        memcpy(&m, p + i, 8);
        v3 ^= m;
        CTRUN_STORE__SIPROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)n << 56;
    for (size_t i = 0; i < (n & 7); i++)
        b |= (uint64_t)p[full + i] << (8 * i);
    v3 ^= b;
    CTRUN_STORE__SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    CTRUN_STORE__SIPROUND;
    CTRUN_STORE__SIPROUND;
    CTRUN_STORE__SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

/* ---- entries ---------------------------------------------------------------------------- */

ctrun_store__entry_t *ctrun_store__lookup(ctrun_store_t *s, const uint8_t *key, size_t klen,
                                          uint64_t *hash_out)
{
    uint64_t h = ctrun_store__hash(s, key, klen);
    if (hash_out != NULL)
        *hash_out = h;
    for (ctrun_store__entry_t *e = s->tab[h & s->tab_mask]; e != NULL; e = e->hnext)
        if (e->hash == h && e->klen == klen && memcmp(e->key, key, klen) == 0)
            return e;
    return NULL;
}

static void ctrun_store__grow_table(ctrun_store_t *s)
{
    size_t ncap = (s->tab_mask + 1) * 2;
    ctrun_store__entry_t **nt = calloc(ncap, sizeof *nt);
    if (nt == NULL)
        return; /* longer chains, still correct */
    for (size_t i = 0; i <= s->tab_mask; i++) {
        ctrun_store__entry_t *e = s->tab[i];
        while (e != NULL) {
            ctrun_store__entry_t *next = e->hnext;
            size_t b = e->hash & (ncap - 1);
            e->hnext = nt[b];
            nt[b] = e;
            e = next;
        }
    }
    free(s->tab);
    s->tab = nt;
    s->tab_mask = ncap - 1;
}

size_t ctrun_store__entry_charge(size_t klen)
{
    return sizeof(ctrun_store__entry_t) + klen + CTRUN_STORE__ENTRY_OVERHEAD;
}

/* The entry of key, created empty if needed; NULL when the memory cap forbids it. */
ctrun_store__entry_t *ctrun_store__obtain(ctrun_store_t *s, const uint8_t *key, size_t klen)
{
    uint64_t h;
    ctrun_store__entry_t *e = ctrun_store__lookup(s, key, klen, &h);
    if (e != NULL)
        return e;
    if (!ctrun_store__charge(s, ctrun_store__entry_charge(klen)))
        return NULL;
    e = calloc(1, sizeof *e + klen);
    if (e == NULL) {
        ctrun_store__uncharge(s, ctrun_store__entry_charge(klen));
        return NULL;
    }
    e->hash = h;
    e->klen = (uint32_t)klen;
    memcpy(e->key, key, klen);
    if (s->nentries + 1 > s->tab_mask + 1)
        ctrun_store__grow_table(s);
    size_t b = h & s->tab_mask;
    e->hnext = s->tab[b];
    s->tab[b] = e;
    s->nentries++;
    return e;
}

/* Frees an entry nobody needs any more: no value, no queue, no waiter, no watcher. */
void ctrun_store__release(ctrun_store_t *s, ctrun_store__entry_t *e)
{
    if (e->has_value || e->qlen > 0 || e->whead != NULL || e->watchers != NULL)
        return;
    ctrun_store__entry_t **pp = &s->tab[e->hash & s->tab_mask];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    s->nentries--;
    ctrun_store__uncharge(s, ctrun_store__entry_charge(e->klen));
    free(e->value);
    free(e);
}

/* ---- the operations (shared by network requests and the in-process API) ----------------- */

/*
 * Writes (or, with append, extends) the value of key, wakes its waiters (wake_mode), sends v1
 * watch events and runs watch callbacks. CT_ELIMIT when the memory cap forbids it.
 */
int ctrun_store__write(ctrun_store_t *s, const ctrun_store__ctx_t *ctx, const uint8_t *key,
                       size_t klen, const uint8_t *val, size_t vlen, bool append, int wake_mode,
                       ct_errbuf_t *eb)
{
    ctrun_store__entry_t *e = ctrun_store__obtain(s, key, klen);
    if (e == NULL)
        return ct_errbuf_set(eb, CT_ELIMIT, "store memory cap of %llu bytes reached",
                             (unsigned long long)s->max_bytes);
    bool had = e->has_value;
    size_t old_len = had ? e->vlen : 0;
    size_t new_len = append ? old_len + vlen : vlen;
    /* The new bytes are charged before the old ones are released: both exist for a moment. */
    size_t charge = new_len;
    if (new_len > s->limits.max_value_len) {
        ctrun_store__release(s, e);
        return ct_errbuf_set(eb, CT_ELIMIT, "APPEND would make a %zu-byte value (limit %llu)",
                             new_len, (unsigned long long)s->limits.max_value_len);
    }
    if (!ctrun_store__charge(s, charge)) {
        ctrun_store__release(s, e);
        return ct_errbuf_set(eb, CT_ELIMIT, "store memory cap of %llu bytes reached",
                             (unsigned long long)s->max_bytes);
    }
    uint8_t *old = NULL;
    if (append) {
        if (new_len > e->vcap) {
            size_t ncap = e->vcap ? e->vcap : 16;
            while (ncap < new_len)
                ncap *= 2;
            uint8_t *nb = realloc(e->value, ncap);
            if (nb == NULL) {
                ctrun_store__uncharge(s, charge);
                ctrun_store__release(s, e);
                return ct_errbuf_set(eb, -ENOMEM, "out of memory for a %zu-byte value", new_len);
            }
            e->value = nb;
            e->vcap = ncap;
        }
        if (vlen > 0)
            memcpy(e->value + old_len, val, vlen);
    } else {
        uint8_t *nb = NULL;
        if (vlen > 0 && (nb = malloc(vlen)) == NULL) {
            ctrun_store__uncharge(s, charge);
            ctrun_store__release(s, e);
            return ct_errbuf_set(eb, -ENOMEM, "out of memory for a %zu-byte value", vlen);
        }
        if (vlen > 0)
            memcpy(nb, val, vlen);
        old = e->value;
        e->value = nb;
        e->vcap = vlen;
    }
    ctrun_store__uncharge(s, old_len);
    e->vlen = new_len;
    e->has_value = true;
    if (!had)
        s->st.keys++;
    ct_store_watch_kind_t kind = had ? CT_STORE_WATCH_UPDATED : CT_STORE_WATCH_CREATED;
    ctrun_store__wake(s, e, wake_mode);
    if (e->watchers != NULL)
        ctrun_store__push_kwatch(s, e, kind, append ? e->value : old, old_len);
    free(old);
    if (s->watches != NULL)
        ctrun_store__notify(s, key, klen, kind, e->value, e->vlen, ctx->op, ctx->conn == NULL);
    return 0;
}

bool ctrun_store__delete(ctrun_store_t *s, const ctrun_store__ctx_t *ctx, const uint8_t *key,
                         size_t klen)
{
    ctrun_store__entry_t *e = ctrun_store__lookup(s, key, klen, NULL);
    if (e == NULL || !e->has_value)
        return false;
    uint8_t *old = e->value;
    size_t old_len = e->vlen;
    e->value = NULL;
    e->vlen = e->vcap = 0;
    e->has_value = false;
    s->st.keys--;
    ctrun_store__uncharge(s, old_len);
    if (e->watchers != NULL)
        ctrun_store__push_kwatch(s, e, CT_STORE_WATCH_DELETED, old, old_len);
    free(old);
    ctrun_store__release(s, e);
    if (s->watches != NULL)
        ctrun_store__notify(s, key, klen, CT_STORE_WATCH_DELETED, NULL, 0, ctx->op,
                            ctx->conn == NULL);
    return true;
}

/* std::stoll on the stored bytes: leading blanks, a sign, at least one digit, junk after the
 * digits ignored, int64 range. */
int ctrun_store__parse_counter(const uint8_t *p, size_t n, int64_t *out)
{
    size_t i = 0;
    while (i < n && (p[i] == ' ' || (p[i] >= '\t' && p[i] <= '\r')))
        i++;
    bool neg = false;
    if (i < n && (p[i] == '+' || p[i] == '-'))
        neg = p[i++] == '-';
    if (i >= n || p[i] < '0' || p[i] > '9')
        return CT_EPARSE;
    uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < n && p[i] >= '0' && p[i] <= '9'; i++) {
        uint64_t d = (uint64_t)(p[i] - '0');
        if (v > (lim - d) / 10)
            return CT_ERANGE_VALUE;
        v = v * 10 + d;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* ADD and BARRIER's counter: the new value, written as decimal text. */
int ctrun_store__add(ctrun_store_t *s, const ctrun_store__ctx_t *ctx, const uint8_t *key,
                     size_t klen, int64_t delta, int wake_mode, int64_t *result, ct_errbuf_t *eb)
{
    int64_t cur = 0;
    ctrun_store__entry_t *e = ctrun_store__lookup(s, key, klen, NULL);
    if (e != NULL && e->has_value) {
        int rc = ctrun_store__parse_counter(e->value, e->vlen, &cur);
        if (rc != 0)
            return ct_errbuf_set(eb, rc, "key \"%.*s\" holds %zu bytes that are %s",
                                 (int)(klen > 80 ? 80 : klen), (const char *)key, e->vlen,
                                 rc == CT_EPARSE ? "not a number" : "outside the int64 range");
    }
    /* PyTorch adds in int64 and wraps in practice; unsigned arithmetic wraps without UB. */
    int64_t v = (int64_t)((uint64_t)cur + (uint64_t)delta);
    char text[24];
    int n = snprintf(text, sizeof text, "%lld", (long long)v);
    int rc = ctrun_store__write(s, ctx, key, klen, (const uint8_t *)text, (size_t)n, false,
                                wake_mode, eb);
    if (rc == 0)
        *result = v;
    return rc;
}

/* PyTorch's compare_set; *reply receives what the COMPARE_SET reply carries. The reply view
 * points at the request's bytes (desired or expected) or at the stored value. */
int ctrun_store__compare_set(ctrun_store_t *s, const ctrun_store__ctx_t *ctx, const uint8_t *key,
                             size_t klen, ct_store_bytes_t expected, ct_store_bytes_t desired,
                             ct_store_bytes_t *reply, ct_errbuf_t *eb)
{
    ctrun_store__entry_t *e = ctrun_store__lookup(s, key, klen, NULL);
    bool swap;
    if (e == NULL || !e->has_value) {
        if (expected.len != 0) {
            *reply = expected; /* "lying to the caller", as PyTorch does */
            return 0;
        }
        swap = true;
    } else {
        swap = e->vlen == expected.len &&
               (expected.len == 0 || memcmp(e->value, expected.data, expected.len) == 0);
        if (!swap) {
            *reply = (ct_store_bytes_t){.data = e->value, .len = e->vlen};
            return 0;
        }
    }
    int rc = ctrun_store__write(s, ctx, key, klen, desired.data, desired.len, false,
                                CTRUN_STORE__WAKE_ALL, eb);
    if (rc == 0)
        *reply = desired;
    return rc;
}

static bool ctrun_store__wipe_match(const ctrun_store__entry_t *e, const char *const *prefixes,
                                    size_t n, bool except)
{
    bool hit = false;
    for (size_t i = 0; i < n && !hit; i++) {
        size_t pl = strlen(prefixes[i]);
        hit = e->klen >= pl && memcmp(e->key, prefixes[i], pl) == 0;
    }
    return except ? !hit : hit;
}

/* Deletes values and queues of matching keys. Entries are unlinked in a first pass, with no
 * user code running; watch callbacks run afterwards on saved keys. */
int ctrun_store__wipe(ctrun_store_t *s, const char *const *prefixes, size_t n, bool except,
                      size_t *ndeleted)
{
    size_t count = 0, cap = 0;
    uint8_t **deleted = NULL; /* keys (u32 length + bytes) for the watch callbacks */
    bool want_events = s->watches != NULL;
    for (size_t b = 0; b <= s->tab_mask; b++) {
        ctrun_store__entry_t *e = s->tab[b];
        while (e != NULL) {
            ctrun_store__entry_t *next = e->hnext;
            if ((e->has_value || e->qlen > 0) && ctrun_store__wipe_match(e, prefixes, n, except)) {
                if (e->has_value) {
                    count++;
                    if (want_events) {
                        if (count > cap) {
                            cap = cap ? cap * 2 : 64;
                            uint8_t **nd = realloc(deleted, cap * sizeof *nd);
                            if (nd == NULL) {
                                want_events = false;
                            } else {
                                deleted = nd;
                            }
                        }
                        uint8_t *k = want_events ? malloc(4 + e->klen) : NULL;
                        if (want_events && k != NULL) {
                            memcpy(k, &e->klen, 4);
                            memcpy(k + 4, e->key, e->klen);
                        }
                        if (want_events)
                            deleted[count - 1] = k;
                    }
                    if (e->watchers != NULL) {
                        uint8_t *old = e->value;
                        size_t old_len = e->vlen;
                        e->has_value = false;
                        ctrun_store__push_kwatch(s, e, CT_STORE_WATCH_DELETED, old, old_len);
                        e->has_value = true;
                    }
                    ctrun_store__uncharge(s, e->vlen);
                    free(e->value);
                    e->value = NULL;
                    e->vlen = e->vcap = 0;
                    e->has_value = false;
                    s->st.keys--;
                }
                while (e->qhead != NULL) {
                    ctrun_store__item_t *it = e->qhead;
                    e->qhead = it->next;
                    ctrun_store__uncharge(s, sizeof *it + it->len + CTRUN_STORE__ENTRY_OVERHEAD);
                    free(it);
                }
                if (e->qlen > 0)
                    s->st.queues--;
                e->qtail = NULL;
                e->qlen = 0;
                ctrun_store__release(s, e);
            }
            e = next;
        }
    }
    if (ndeleted != NULL)
        *ndeleted = count;
    if (deleted != NULL) {
        for (size_t i = 0; i < count; i++) {
            if (deleted[i] == NULL)
                continue;
            uint32_t kl;
            memcpy(&kl, deleted[i], 4);
            ctrun_store__notify(s, deleted[i] + 4, kl, CT_STORE_WATCH_DELETED, NULL, 0,
                                CT_STORE_OP_DELETE_KEY, true);
            free(deleted[i]);
        }
        free(deleted);
    }
    return 0;
}
