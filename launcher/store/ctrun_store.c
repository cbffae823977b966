/*
 * ctrun_store.c - the store server of ctrun_store.h.
 *
 * Layout of the state:
 * - entries: one per key that has a value, a queue, waiters or v1 watchers, in a chained hash
 *   table keyed with SipHash-1-3 under a random key (a client cannot choose keys that collide);
 * - waits: one record per unanswered WAIT or BARRIER, listed on its connection, holding one
 *   registration per awaited key; each registration is also linked into its entry's FIFO.
 *   A write walks only its own entry's waiters; a cancel or a disconnect walks only that
 *   connection's registrations. Nothing is ever O(all waiters).
 * - connections: an input buffer that holds only a partial request (complete requests are
 *   parsed straight out of one shared read buffer), an output buffer being filled and one being
 *   written; a connection whose output backs up is not read from until it drains, which it
 *   may do at once (a flush the socket takes whole) or in a write's completion: both resume it.
 *
 * Every entry point from the loop (read, write completion, accept, timer) and every in-process
 * API call ends by flushing the connections that received output, so pipelined replies and
 * wake-ups leave in as few writes as possible. User watch callbacks run only after a change is
 * fully applied, on a copy of the key and value, so they may change the store themselves.
 */
#include "ctrun_store.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ct_log.h"
#include "ct_store_auth.h"
#include "ctrun_store_internal.h"

#define CTRUN__READ_CHUNK      (64u * 1024u)
#define CTRUN__HIGH_WATER      (4u << 20)
#define CTRUN__LOW_WATER       (1u << 20)
#define CTRUN__AUTH_TIMEOUT_MS 10000
#define CTRUN__LOG_PER_SECOND  20
#define CTRUN__ENTRY_OVERHEAD  64 /* bytes charged per entry, queue item, wait, ... */

typedef struct ctrun__entry ctrun__entry_t;
typedef struct ctrun__wait ctrun__wait_t;
typedef struct ctrun__reg ctrun__reg_t;
typedef struct ctrun__kwatch ctrun__kwatch_t;
typedef struct ctrun__item ctrun__item_t;

struct ctrun__item {
    ctrun__item_t *next;
    size_t len;
    uint8_t data[];
};

/* One (wait, key) pair: the wait is answered when all its registrations are gone. */
struct ctrun__reg {
    ctrun__reg_t *kprev, *knext; /* in the entry's FIFO of waiters */
    ctrun__reg_t *wprev, *wnext; /* in the wait's list */
    ctrun__entry_t *entry;
    ctrun__wait_t *wait;
    bool barrier; /* released only when its barrier completes, or by another kind of write */
};

struct ctrun__wait {
    ctrun__wait_t *prev, *next; /* in the connection's list */
    ctrun__conn_t *conn;
    ctrun__reg_t *regs;
    uint64_t remaining;
};

/* A v1 WATCH_KEY subscription of a connection to an entry. */
struct ctrun__kwatch {
    ctrun__kwatch_t *eprev, *enext;
    ctrun__kwatch_t *cprev, *cnext;
    ctrun__entry_t *entry;
    ctrun__conn_t *conn;
};

struct ctrun__entry {
    ctrun__entry_t *hnext;
    uint64_t hash;
    uint8_t *value;
    size_t vlen, vcap;
    bool has_value;
    ctrun__item_t *qhead, *qtail;
    uint64_t qlen;
    ctrun__reg_t *whead, *wtail;
    ctrun__kwatch_t *watchers;
    uint32_t klen;
    uint8_t key[];
};

enum { CTRUN__AUTH_HELLO, CTRUN__AUTH_PROOF, CTRUN__DETECT, CTRUN__READY };

struct ctrun__conn {
    uv_tcp_t tcp; /* first: the handle's address is the connection's */
    ctrun_store_t *s;
    ctrun__conn_t *prev, *next; /* all open connections */
    ctrun__conn_t *dnext;       /* connections with output to flush */
    bool dirty, closing, is_virtual, paused, writing, oom;
    bool doomed;       /* to be closed at the next flush: see ctrun__doom */
    bool parsing;      /* inside ctrun__process: its input buffer holds the request being handled */
    size_t shed_bytes; /* doomed for its input buffer (ctrun__shed_input): how much it held */
    uint8_t state;
    bool validated;
    ct_store_dialect_t dialect;
    uint8_t *in; /* unparsed input: a partial request */
    size_t in_len, in_cap;
    size_t need; /* bytes the current message needs before parsing can progress */
    ct_store_cursor_t cursor;
    uint8_t *out; /* output being assembled */
    size_t out_len, out_cap;
    uint8_t *wbuf; /* output being written */
    size_t wbuf_cap, inflight;
    size_t woff; /* where the unwritten rest of wbuf starts */
    uv_write_t wreq;
    /* Test connections only: a pretend socket that takes up to vroom unread bytes at once (as
     * uv_try_write does); more waits as an in-flight write until the peer reads. */
    uint8_t *vsock;
    size_t vsock_len, vsock_cap, vroom;
    ctrun__wait_t *waits;
    ctrun__kwatch_t *kwatches;
    uint64_t opened_ms;
    uint8_t cn[CT_STORE_AUTH_NONCE_LEN], sn[CT_STORE_AUTH_NONCE_LEN];
};

struct ctrun_store_watch {
    ctrun_store_watch_t *next;
    ctrun_store_watch_cb cb;
    void *data;
    bool prefix, dead;
    size_t klen;
    char key[];
};

struct ctrun_store {
    uv_loop_t *loop;
    /* Connections are accepted here rather than by uv_listen, whose answer to running out of
     * file descriptors is to accept and close pending connections without a word. */
    uv_poll_t listener;
    int listen_fd;
    int spare_fd;            /* /dev/null, given up for a moment to refuse connections */
    uv_timer_t accept_timer; /* restarts accepting after it had to stop (ctrun__accept_pause) */
    bool has_accept_timer;
    bool fd_starved;        /* out of file descriptors since the last accepted connection */
    bool fd_starved_logged; /* and said so */
    uint64_t fd_refused;    /* connections refused for want of a descriptor, in all */
    uint64_t fd_log_ms;     /* when the last "cannot accept" line was logged */
    uv_timer_t auth_timer;
    uv_timer_t linger_timer; /* ctrun_store_close_gently's deadline */
    bool has_listener, has_timer, has_linger, lingering, closing;
    int port;
    char address[96];
    ct_store_limits_t limits;
    uint64_t max_connections, max_bytes;
    char *token;
    size_t token_len;

    uint64_t sipkey[2];
    ctrun__entry_t **tab;
    size_t tab_mask, nentries;

    ctrun__conn_t *conns;
    ctrun__conn_t *dirty;
    uint8_t *rbuf; /* shared read buffer */
    ctrun_store_watch_t *watches;
    int notify_depth;
    bool watches_dead;

    uint64_t open_handles;
    void (*close_cb)(void *);
    void *close_data;
    void (*linger_cb)(void *); /* what ctrun_store_close_gently passes on to the close */
    void *linger_data;

    ctrun_store_stats_t st;
    uint64_t memory;     /* == st.stored_bytes */
    uint64_t shed_bytes; /* input buffers of connections doomed by ctrun__shed_input */

    uint64_t log_window_ms, log_in_window, log_suppressed;
};

/* ---- hashing ---------------------------------------------------------------------------- */

static inline uint64_t ctrun__rotl(uint64_t x, int b)
{
    return (x << b) | (x >> (64 - b));
}

#define CTRUN__SIPROUND           \
    do {                          \
        v0 += v1;                 \
        v1 = ctrun__rotl(v1, 13); \
        v1 ^= v0;                 \
        v0 = ctrun__rotl(v0, 32); \
        v2 += v3;                 \
        v3 = ctrun__rotl(v3, 16); \
        v3 ^= v2;                 \
        v0 += v3;                 \
        v3 = ctrun__rotl(v3, 21); \
        v3 ^= v0;                 \
        v2 += v1;                 \
        v1 = ctrun__rotl(v1, 17); \
        v1 ^= v2;                 \
        v2 = ctrun__rotl(v2, 32); \
    } while (0)

/* SipHash-1-3 (Aumasson & Bernstein), the keyed hash that hash-flooding defences use. */
static uint64_t ctrun__hash(const ctrun_store_t *s, const uint8_t *p, size_t n)
{
    uint64_t k0 = s->sipkey[0], k1 = s->sipkey[1];
    uint64_t v0 = k0 ^ 0x736f6d6570736575ULL, v1 = k1 ^ 0x646f72616e646f6dULL;
    uint64_t v2 = k0 ^ 0x6c7967656e657261ULL, v3 = k1 ^ 0x7465646279746573ULL;
    size_t full = n & ~(size_t)7;
    for (size_t i = 0; i < full; i += 8) {
        uint64_t m;
        memcpy(&m, p + i, 8);
        v3 ^= m;
        CTRUN__SIPROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)n << 56;
    for (size_t i = 0; i < (n & 7); i++)
        b |= (uint64_t)p[full + i] << (8 * i);
    v3 ^= b;
    CTRUN__SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    CTRUN__SIPROUND;
    CTRUN__SIPROUND;
    CTRUN__SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

/* ---- memory accounting ------------------------------------------------------------------ */

/*
 * The cap holds stored data (keys, values, queued items, waiter bookkeeping) and connections'
 * buffered partial requests together, and charges the connection that holds the memory:
 * - stored data is refused only when it alone would exceed the cap (ctrun__charge);
 * - a connection that wants more input buffer than stored data and the other buffers leave
 *   room for is refused and closed (ctrun__in_reserve);
 * - when stored data grows into room that buffered input holds, the connections holding the
 *   most buffered input are closed until everything fits again (ctrun__shed_input, from the
 *   next flush, once the request being handled has released its own input).
 * So one client's half-sent large requests never get another client's small write refused.
 */

/* Buffered input that still counts: not that of connections already doomed for it. */
static uint64_t ctrun__buffered(const ctrun_store_t *s)
{
    return s->st.buffered_bytes - s->shed_bytes;
}

static bool ctrun__charge(ctrun_store_t *s, uint64_t n)
{
    if (s->memory + n > s->max_bytes)
        return false;
    s->memory += n;
    return true;
}

static void ctrun__uncharge(ctrun_store_t *s, uint64_t n)
{
    s->memory -= n;
}

/* ---- logging ---------------------------------------------------------------------------- */

/* At most CTRUN__LOG_PER_SECOND lines a second about connections, so that a flood of bad
 * clients cannot flood the log too. */
__attribute__((format(printf, 2, 3))) static void ctrun__log_conn(ctrun_store_t *s, const char *fmt,
                                                                  ...)
{
    uint64_t now = uv_now(s->loop);
    if (now - s->log_window_ms >= 1000) {
        if (s->log_suppressed > 0)
            ct_log_warn("store: %llu more connection messages suppressed",
                        (unsigned long long)s->log_suppressed);
        s->log_window_ms = now;
        s->log_in_window = 0;
        s->log_suppressed = 0;
    }
    if (s->log_in_window >= CTRUN__LOG_PER_SECOND) {
        s->log_suppressed++;
        return;
    }
    s->log_in_window++;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ct_log_warn("store: %s", msg);
}

static void ctrun__peer(ctrun__conn_t *c, char *buf, size_t size)
{
    struct sockaddr_storage ss;
    int len = sizeof ss;
    snprintf(buf, size, "?");
    if (c->is_virtual) {
        snprintf(buf, size, "(in-process test connection)");
        return;
    }
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) != 0)
        return;
    char ip[64] = "?";
    if (ss.ss_family == AF_INET6) {
        uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof ip);
        snprintf(buf, size, "[%s]:%d", ip, ntohs(((struct sockaddr_in6 *)&ss)->sin6_port));
    } else if (ss.ss_family == AF_INET) {
        uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof ip);
        snprintf(buf, size, "%s:%d", ip, ntohs(((struct sockaddr_in *)&ss)->sin_port));
    }
}

/* ---- entries ---------------------------------------------------------------------------- */

static ctrun__entry_t *ctrun__lookup(ctrun_store_t *s, const uint8_t *key, size_t klen,
                                     uint64_t *hash_out)
{
    uint64_t h = ctrun__hash(s, key, klen);
    if (hash_out != NULL)
        *hash_out = h;
    for (ctrun__entry_t *e = s->tab[h & s->tab_mask]; e != NULL; e = e->hnext)
        if (e->hash == h && e->klen == klen && memcmp(e->key, key, klen) == 0)
            return e;
    return NULL;
}

static void ctrun__grow_table(ctrun_store_t *s)
{
    size_t ncap = (s->tab_mask + 1) * 2;
    ctrun__entry_t **nt = calloc(ncap, sizeof *nt);
    if (nt == NULL)
        return; /* longer chains, still correct */
    for (size_t i = 0; i <= s->tab_mask; i++) {
        ctrun__entry_t *e = s->tab[i];
        while (e != NULL) {
            ctrun__entry_t *next = e->hnext;
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

static size_t ctrun__entry_charge(size_t klen)
{
    return sizeof(ctrun__entry_t) + klen + CTRUN__ENTRY_OVERHEAD;
}

/* The entry of key, created empty if needed; NULL when the memory cap forbids it. */
static ctrun__entry_t *ctrun__obtain(ctrun_store_t *s, const uint8_t *key, size_t klen)
{
    uint64_t h;
    ctrun__entry_t *e = ctrun__lookup(s, key, klen, &h);
    if (e != NULL)
        return e;
    if (!ctrun__charge(s, ctrun__entry_charge(klen)))
        return NULL;
    e = calloc(1, sizeof *e + klen);
    if (e == NULL) {
        ctrun__uncharge(s, ctrun__entry_charge(klen));
        return NULL;
    }
    e->hash = h;
    e->klen = (uint32_t)klen;
    memcpy(e->key, key, klen);
    if (s->nentries + 1 > s->tab_mask + 1)
        ctrun__grow_table(s);
    size_t b = h & s->tab_mask;
    e->hnext = s->tab[b];
    s->tab[b] = e;
    s->nentries++;
    return e;
}

/* Frees an entry nobody needs any more: no value, no queue, no waiter, no watcher. */
static void ctrun__release(ctrun_store_t *s, ctrun__entry_t *e)
{
    if (e->has_value || e->qlen > 0 || e->whead != NULL || e->watchers != NULL)
        return;
    ctrun__entry_t **pp = &s->tab[e->hash & s->tab_mask];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    s->nentries--;
    ctrun__uncharge(s, ctrun__entry_charge(e->klen));
    free(e->value);
    free(e);
}

static bool ctrun__exists(const ctrun__entry_t *e)
{
    return e != NULL && (e->has_value || e->qlen > 0);
}

/* ---- connection output ------------------------------------------------------------------ */

static void ctrun__conn_close(ctrun__conn_t *c);

static void ctrun__mark_dirty(ctrun__conn_t *c)
{
    if (c->dirty)
        return;
    c->dirty = true;
    c->dnext = c->s->dirty;
    c->s->dirty = c;
}

static size_t ctrun__pending(const ctrun__conn_t *c)
{
    return c->out_len + (c->writing ? c->inflight : 0);
}

/*
 * Marks a connection to be closed by the next ctrun__flush_dirty. Output is produced for other
 * connections while walking a key's waiters or watchers; closing one of them there would free
 * registrations and entries under the walk, so those paths doom instead of closing.
 */
static void ctrun__doom(ctrun__conn_t *c)
{
    if (c->doomed || c->closing)
        return;
    c->doomed = true;
    c->s->st.dropped++;
    ctrun__mark_dirty(c);
}

/* Room for n more output bytes, or NULL (the connection is then doomed: out of memory, or,
 * for pushed bytes, a peer that does not read). */
static uint8_t *ctrun__out(ctrun__conn_t *c, size_t n, bool pushed)
{
    if (c->closing || c->doomed)
        return NULL;
    if (pushed && ctrun__pending(c) + n > c->s->limits.max_message_len + CTRUN__HIGH_WATER) {
        char peer[96];
        ctrun__peer(c, peer, sizeof peer);
        ctrun__log_conn(c->s,
                        "closed connection from %s: it does not read its replies (%zu bytes "
                        "pending)",
                        peer, ctrun__pending(c));
        ctrun__doom(c);
        return NULL;
    }
    if (c->out_len + n > c->out_cap) {
        size_t ncap = c->out_cap ? c->out_cap : 256;
        while (ncap < c->out_len + n)
            ncap *= 2;
        uint8_t *nb = realloc(c->out, ncap);
        if (nb == NULL) {
            ctrun__log_conn(c->s, "closed a connection: out of memory for a %zu-byte reply", n);
            ctrun__doom(c);
            return NULL;
        }
        c->out = nb;
        c->out_cap = ncap;
    }
    uint8_t *p = c->out + c->out_len;
    c->out_len += n;
    ctrun__mark_dirty(c);
    return p;
}

static void ctrun__reply_u8(ctrun__conn_t *c, uint8_t v, bool pushed)
{
    uint8_t *p = ctrun__out(c, 1, pushed);
    if (p != NULL)
        *p = v;
}

static void ctrun__reply_u64(ctrun__conn_t *c, uint64_t v)
{
    uint8_t *p = ctrun__out(c, 8, false);
    if (p != NULL)
        ct_store_put_u64(p, v);
}

static void ctrun__reply_bytes(ctrun__conn_t *c, const void *data, size_t len)
{
    uint8_t *p = ctrun__out(c, 8 + len, false);
    if (p != NULL)
        ct_store_put_bytes(p, data, len);
}

static void ctrun__on_write(uv_write_t *req, int status);

/* What the socket takes at once of n bytes: uv_try_write for a network connection, the room
 * left in the pretend socket for a test connection. 0 when it takes nothing now; negative on
 * an error that ends the connection. */
static ssize_t ctrun__try_write(ctrun__conn_t *c, const uint8_t *p, size_t n)
{
    if (c->is_virtual) {
        size_t room = c->vroom > c->vsock_len ? c->vroom - c->vsock_len : 0;
        size_t k = n < room ? n : room;
        if (k == 0)
            return 0;
        if (c->vsock_len + k > c->vsock_cap) {
            size_t ncap = c->vsock_cap ? c->vsock_cap : 4096;
            while (ncap < c->vsock_len + k)
                ncap *= 2;
            uint8_t *nb = realloc(c->vsock, ncap);
            if (nb == NULL)
                return -ENOMEM;
            c->vsock = nb;
            c->vsock_cap = ncap;
        }
        memcpy(c->vsock + c->vsock_len, p, k);
        c->vsock_len += k;
        return (ssize_t)k;
    }
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
    int w = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    return w == UV_EAGAIN ? 0 : w;
}

static void ctrun__flush(ctrun__conn_t *c)
{
    if (c->closing || c->writing || c->out_len == 0)
        return;
    ssize_t n = ctrun__try_write(c, c->out, c->out_len);
    if (n == (ssize_t)c->out_len) {
        c->out_len = 0;
        if (c->out_cap > 256 * 1024) { /* do not keep a big reply's buffer for an idle peer */
            free(c->out);
            c->out = NULL;
            c->out_cap = 0;
        }
        return;
    }
    if (n < 0) {
        ctrun__conn_close(c);
        return;
    }
    /* The rest goes out asynchronously from wbuf while new output gathers in out. */
    uint8_t *tb = c->wbuf;
    size_t tcap = c->wbuf_cap;
    c->wbuf = c->out;
    c->wbuf_cap = c->out_cap;
    c->woff = (size_t)n;
    c->inflight = c->out_len - (size_t)n;
    c->out = tb;
    c->out_cap = tcap;
    c->out_len = 0;
    c->writing = true;
    if (c->is_virtual)
        return; /* completed by ctrun__test_conn_output as the peer reads */
    uv_buf_t wb = uv_buf_init((char *)c->wbuf + n, (unsigned)c->inflight);
    c->wreq.data = c;
    if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &wb, 1, ctrun__on_write) != 0) {
        c->writing = false;
        ctrun__conn_close(c);
    }
}

static void ctrun__resume(ctrun__conn_t *c);

/* A connection paused for its pending output is read from again once that output has drained
 * below the low water mark: after a write completes, and equally after a flush that the socket
 * took whole at once (no write callback follows that one). */
static void ctrun__maybe_resume(ctrun__conn_t *c)
{
    if (c->paused && !c->closing && !c->doomed && ctrun__pending(c) < CTRUN__LOW_WATER)
        ctrun__resume(c);
}

/*
 * Stored data has grown into room that buffered input holds (see "memory accounting"): dooms
 * the connections holding the most buffered input until everything fits under the cap again.
 * Connections inside ctrun__process are spared (their buffer holds the request being handled,
 * and is released when it ends). Returns how many were doomed.
 */
static int ctrun__shed_input(ctrun_store_t *s)
{
    int n = 0;
    while (s->memory + ctrun__buffered(s) > s->max_bytes) {
        ctrun__conn_t *victim = NULL;
        for (ctrun__conn_t *c = s->conns; c != NULL; c = c->next)
            if (!c->doomed && !c->closing && !c->parsing && c->in_cap > 0 &&
                (victim == NULL || c->in_cap > victim->in_cap))
                victim = c;
        if (victim == NULL)
            break;
        char peer[96];
        ctrun__peer(victim, peer, sizeof peer);
        ctrun__log_conn(s,
                        "closed connection from %s: its partial request holds %zu bytes of "
                        "input, more than the memory cap of %llu bytes leaves beside %llu bytes "
                        "of stored data",
                        peer, victim->in_cap, (unsigned long long)s->max_bytes,
                        (unsigned long long)s->memory);
        victim->shed_bytes = victim->in_cap;
        s->shed_bytes += victim->in_cap;
        ctrun__doom(victim);
        n++;
    }
    return n;
}

static void ctrun__flush_dirty(ctrun_store_t *s)
{
    /* A resumed connection parses its buffered input and may come back onto the list with
     * new output; the loop runs until no connection has anything left to send, and no input
     * buffer is left over the memory cap. */
    do {
        while (s->dirty != NULL) {
            ctrun__conn_t *c = s->dirty;
            s->dirty = c->dnext;
            c->dirty = false;
            c->dnext = NULL;
            if (c->doomed) {
                ctrun__conn_close(c);
            } else {
                ctrun__flush(c);
                ctrun__maybe_resume(c);
            }
        }
    } while (ctrun__shed_input(s) > 0);
}

/* ---- waiters ---------------------------------------------------------------------------- */

static void ctrun__reg_unlink(ctrun_store_t *s, ctrun__reg_t *r)
{
    ctrun__entry_t *e = r->entry;
    if (r->kprev)
        r->kprev->knext = r->knext;
    else
        e->whead = r->knext;
    if (r->knext)
        r->knext->kprev = r->kprev;
    else
        e->wtail = r->kprev;
    ctrun__wait_t *w = r->wait;
    if (r->wprev)
        r->wprev->wnext = r->wnext;
    else
        w->regs = r->wnext;
    if (r->wnext)
        r->wnext->wprev = r->wprev;
    s->st.wait_registrations--;
    ctrun__uncharge(s, sizeof *r + CTRUN__ENTRY_OVERHEAD);
    free(r);
}

static void ctrun__wait_free(ctrun_store_t *s, ctrun__wait_t *w)
{
    ctrun__conn_t *c = w->conn;
    if (w->prev)
        w->prev->next = w->next;
    else
        c->waits = w->next;
    if (w->next)
        w->next->prev = w->prev;
    s->st.pending_waits--;
    ctrun__uncharge(s, sizeof *w + CTRUN__ENTRY_OVERHEAD);
    free(w);
}

static ctrun__wait_t *ctrun__wait_new(ctrun__conn_t *c)
{
    ctrun_store_t *s = c->s;
    if (!ctrun__charge(s, sizeof(ctrun__wait_t) + CTRUN__ENTRY_OVERHEAD))
        return NULL;
    ctrun__wait_t *w = calloc(1, sizeof *w);
    if (w == NULL) {
        ctrun__uncharge(s, sizeof *w + CTRUN__ENTRY_OVERHEAD);
        return NULL;
    }
    w->conn = c;
    w->next = c->waits;
    if (c->waits)
        c->waits->prev = w;
    c->waits = w;
    s->st.pending_waits++;
    return w;
}

static bool ctrun__reg_add(ctrun_store_t *s, ctrun__wait_t *w, ctrun__entry_t *e, bool barrier)
{
    if (!ctrun__charge(s, sizeof(ctrun__reg_t) + CTRUN__ENTRY_OVERHEAD))
        return false;
    ctrun__reg_t *r = calloc(1, sizeof *r);
    if (r == NULL) {
        ctrun__uncharge(s, sizeof *r + CTRUN__ENTRY_OVERHEAD);
        return false;
    }
    r->entry = e;
    r->wait = w;
    r->barrier = barrier;
    r->kprev = e->wtail;
    if (e->wtail)
        e->wtail->knext = r;
    else
        e->whead = r;
    e->wtail = r;
    r->wnext = w->regs;
    if (w->regs)
        w->regs->wprev = r;
    w->regs = r;
    w->remaining++;
    s->st.wait_registrations++;
    return true;
}

/* One awaited key was written: count the wait down and answer it at zero. */
static void ctrun__reg_fire(ctrun_store_t *s, ctrun__reg_t *r)
{
    ctrun__wait_t *w = r->wait;
    ctrun__reg_unlink(s, r);
    if (--w->remaining == 0) {
        ctrun__conn_t *c = w->conn;
        ctrun__wait_free(s, w);
        ctrun__reply_u8(c, CT_STORE_WAIT_STOP, true);
    }
}

enum { CTRUN__WAKE_ALL, CTRUN__WAKE_NOT_BARRIER, CTRUN__WAKE_ONE };

static void ctrun__wake(ctrun_store_t *s, ctrun__entry_t *e, int mode)
{
    ctrun__reg_t *r = e->whead;
    while (r != NULL) {
        ctrun__reg_t *next = r->knext;
        if (mode != CTRUN__WAKE_NOT_BARRIER || !r->barrier) {
            ctrun__reg_fire(s, r);
            if (mode == CTRUN__WAKE_ONE)
                return;
        }
        r = next;
    }
}

/* Drops every wait of a connection (CANCEL_WAIT, or the connection closing). */
static void ctrun__drop_waits(ctrun__conn_t *c)
{
    ctrun_store_t *s = c->s;
    while (c->waits != NULL) {
        ctrun__wait_t *w = c->waits;
        while (w->regs != NULL) {
            ctrun__entry_t *e = w->regs->entry;
            ctrun__reg_unlink(s, w->regs);
            ctrun__release(s, e);
        }
        ctrun__wait_free(s, w);
    }
}

/* ---- watches ---------------------------------------------------------------------------- */

static void ctrun__kwatch_free(ctrun_store_t *s, ctrun__kwatch_t *k)
{
    ctrun__entry_t *e = k->entry;
    if (k->eprev)
        k->eprev->enext = k->enext;
    else
        e->watchers = k->enext;
    if (k->enext)
        k->enext->eprev = k->eprev;
    ctrun__conn_t *c = k->conn;
    if (k->cprev)
        k->cprev->cnext = k->cnext;
    else
        c->kwatches = k->cnext;
    if (k->cnext)
        k->cnext->cprev = k->cprev;
    ctrun__uncharge(s, sizeof *k + CTRUN__ENTRY_OVERHEAD);
    free(k);
    ctrun__release(s, e);
}

/* v1 watch events for the connections that sent WATCH_KEY on this entry. */
static void ctrun__push_kwatch(ctrun_store_t *s, ctrun__entry_t *e, ct_store_watch_kind_t kind,
                               const uint8_t *old, size_t old_len)
{
    (void)s;
    ct_store_watch_event_t ev = {
        .kind = kind,
        .key = {.data = e->key, .len = e->klen},
        .old_value = {.data = old, .len = old_len},
        .new_value = {.data = e->has_value ? e->value : NULL, .len = e->has_value ? e->vlen : 0},
    };
    size_t n = ct_store_encode_watch_event(&ev, NULL, 0);
    ctrun__kwatch_t *k = e->watchers;
    while (k != NULL) {
        ctrun__kwatch_t *next = k->enext; /* a closing connection drops its subscriptions */
        uint8_t *p = ctrun__out(k->conn, n, true);
        if (p != NULL)
            ct_store_encode_watch_event(&ev, p, n);
        k = next;
    }
}

static bool ctrun__watch_matches(const ctrun_store_watch_t *w, const uint8_t *key, size_t klen)
{
    if (w->dead)
        return false;
    if (w->prefix)
        return klen >= w->klen && memcmp(key, w->key, w->klen) == 0;
    return klen == w->klen && memcmp(key, w->key, klen) == 0;
}

static void ctrun__sweep_watches(ctrun_store_t *s)
{
    if (s->notify_depth > 0 || !s->watches_dead)
        return;
    ctrun_store_watch_t **pp = &s->watches;
    while (*pp != NULL) {
        ctrun_store_watch_t *w = *pp;
        if (w->dead) {
            *pp = w->next;
            free(w);
        } else {
            pp = &w->next;
        }
    }
    s->watches_dead = false;
}

/* In-process watch callbacks, on copies: a callback may change or delete this very key. */
static void ctrun__notify(ctrun_store_t *s, const uint8_t *key, size_t klen,
                          ct_store_watch_kind_t kind, const uint8_t *value, size_t vlen,
                          ct_store_op_t op, bool in_process)
{
    bool any = false;
    for (ctrun_store_watch_t *w = s->watches; w != NULL && !any; w = w->next)
        any = ctrun__watch_matches(w, key, klen);
    if (!any)
        return;
    uint8_t *copy = malloc(klen + vlen + 1);
    if (copy == NULL) {
        ct_log_error("store: out of memory: a watch event for a %zu-byte value was lost", vlen);
        return;
    }
    memcpy(copy, key, klen);
    if (vlen > 0)
        memcpy(copy + klen, value, vlen);
    ctrun_store_event_t ev = {.kind = kind,
                              .key = {.data = copy, .len = klen},
                              .value = {.data = copy + klen, .len = vlen},
                              .op = op,
                              .in_process = in_process};
    s->notify_depth++;
    for (ctrun_store_watch_t *w = s->watches; w != NULL; w = w->next)
        if (ctrun__watch_matches(w, copy, klen) && !s->closing)
            w->cb(s, &ev, w->data);
    s->notify_depth--;
    free(copy);
    ctrun__sweep_watches(s);
}

/* ---- the operations (shared by network requests and the in-process API) ----------------- */

typedef struct ctrun__ctx {
    ctrun__conn_t *conn; /* NULL: in-process */
    ct_store_op_t op;
} ctrun__ctx_t;

/*
 * Writes (or, with append, extends) the value of key, wakes its waiters (wake_mode), sends v1
 * watch events and runs watch callbacks. CT_ELIMIT when the memory cap forbids it.
 */
static int ctrun__write(ctrun_store_t *s, const ctrun__ctx_t *ctx, const uint8_t *key, size_t klen,
                        const uint8_t *val, size_t vlen, bool append, int wake_mode,
                        ct_errbuf_t *eb)
{
    ctrun__entry_t *e = ctrun__obtain(s, key, klen);
    if (e == NULL)
        return ct_errbuf_set(eb, CT_ELIMIT, "store memory cap of %llu bytes reached",
                             (unsigned long long)s->max_bytes);
    bool had = e->has_value;
    size_t old_len = had ? e->vlen : 0;
    size_t new_len = append ? old_len + vlen : vlen;
    /* The new bytes are charged before the old ones are released: both exist for a moment. */
    size_t charge = new_len;
    if (new_len > s->limits.max_value_len) {
        ctrun__release(s, e);
        return ct_errbuf_set(eb, CT_ELIMIT, "APPEND would make a %zu-byte value (limit %llu)",
                             new_len, (unsigned long long)s->limits.max_value_len);
    }
    if (!ctrun__charge(s, charge)) {
        ctrun__release(s, e);
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
                ctrun__uncharge(s, charge);
                ctrun__release(s, e);
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
            ctrun__uncharge(s, charge);
            ctrun__release(s, e);
            return ct_errbuf_set(eb, -ENOMEM, "out of memory for a %zu-byte value", vlen);
        }
        if (vlen > 0)
            memcpy(nb, val, vlen);
        old = e->value;
        e->value = nb;
        e->vcap = vlen;
    }
    ctrun__uncharge(s, old_len);
    e->vlen = new_len;
    e->has_value = true;
    if (!had)
        s->st.keys++;
    ct_store_watch_kind_t kind = had ? CT_STORE_WATCH_UPDATED : CT_STORE_WATCH_CREATED;
    ctrun__wake(s, e, wake_mode);
    if (e->watchers != NULL)
        ctrun__push_kwatch(s, e, kind, append ? e->value : old, old_len);
    free(old);
    if (s->watches != NULL)
        ctrun__notify(s, key, klen, kind, e->value, e->vlen, ctx->op, ctx->conn == NULL);
    return 0;
}

static bool ctrun__delete(ctrun_store_t *s, const ctrun__ctx_t *ctx, const uint8_t *key,
                          size_t klen)
{
    ctrun__entry_t *e = ctrun__lookup(s, key, klen, NULL);
    if (e == NULL || !e->has_value)
        return false;
    uint8_t *old = e->value;
    size_t old_len = e->vlen;
    e->value = NULL;
    e->vlen = e->vcap = 0;
    e->has_value = false;
    s->st.keys--;
    ctrun__uncharge(s, old_len);
    if (e->watchers != NULL)
        ctrun__push_kwatch(s, e, CT_STORE_WATCH_DELETED, old, old_len);
    free(old);
    ctrun__release(s, e);
    if (s->watches != NULL)
        ctrun__notify(s, key, klen, CT_STORE_WATCH_DELETED, NULL, 0, ctx->op, ctx->conn == NULL);
    return true;
}

/* std::stoll on the stored bytes: leading blanks, a sign, at least one digit, junk after the
 * digits ignored, int64 range. */
static int ctrun__parse_counter(const uint8_t *p, size_t n, int64_t *out)
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
static int ctrun__add(ctrun_store_t *s, const ctrun__ctx_t *ctx, const uint8_t *key, size_t klen,
                      int64_t delta, int wake_mode, int64_t *result, ct_errbuf_t *eb)
{
    int64_t cur = 0;
    ctrun__entry_t *e = ctrun__lookup(s, key, klen, NULL);
    if (e != NULL && e->has_value) {
        int rc = ctrun__parse_counter(e->value, e->vlen, &cur);
        if (rc != 0)
            return ct_errbuf_set(eb, rc, "key \"%.*s\" holds %zu bytes that are %s",
                                 (int)(klen > 80 ? 80 : klen), (const char *)key, e->vlen,
                                 rc == CT_EPARSE ? "not a number" : "outside the int64 range");
    }
    /* PyTorch adds in int64 and wraps in practice; unsigned arithmetic wraps without UB. */
    int64_t v = (int64_t)((uint64_t)cur + (uint64_t)delta);
    char text[24];
    int n = snprintf(text, sizeof text, "%lld", (long long)v);
    int rc =
        ctrun__write(s, ctx, key, klen, (const uint8_t *)text, (size_t)n, false, wake_mode, eb);
    if (rc == 0)
        *result = v;
    return rc;
}

/* PyTorch's compare_set; *reply receives what the COMPARE_SET reply carries. The reply view
 * points at the request's bytes (desired or expected) or at the stored value. */
static int ctrun__compare_set(ctrun_store_t *s, const ctrun__ctx_t *ctx, const uint8_t *key,
                              size_t klen, ct_store_bytes_t expected, ct_store_bytes_t desired,
                              ct_store_bytes_t *reply, ct_errbuf_t *eb)
{
    ctrun__entry_t *e = ctrun__lookup(s, key, klen, NULL);
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
    int rc = ctrun__write(s, ctx, key, klen, desired.data, desired.len, false, CTRUN__WAKE_ALL, eb);
    if (rc == 0)
        *reply = desired;
    return rc;
}

static bool ctrun__wipe_match(const ctrun__entry_t *e, const char *const *prefixes, size_t n,
                              bool except)
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
static int ctrun__wipe(ctrun_store_t *s, const char *const *prefixes, size_t n, bool except,
                       size_t *ndeleted)
{
    size_t count = 0, cap = 0;
    uint8_t **deleted = NULL; /* keys (u32 length + bytes) for the watch callbacks */
    bool want_events = s->watches != NULL;
    for (size_t b = 0; b <= s->tab_mask; b++) {
        ctrun__entry_t *e = s->tab[b];
        while (e != NULL) {
            ctrun__entry_t *next = e->hnext;
            if ((e->has_value || e->qlen > 0) && ctrun__wipe_match(e, prefixes, n, except)) {
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
                        ctrun__push_kwatch(s, e, CT_STORE_WATCH_DELETED, old, old_len);
                        e->has_value = true;
                    }
                    ctrun__uncharge(s, e->vlen);
                    free(e->value);
                    e->value = NULL;
                    e->vlen = e->vcap = 0;
                    e->has_value = false;
                    s->st.keys--;
                }
                while (e->qhead != NULL) {
                    ctrun__item_t *it = e->qhead;
                    e->qhead = it->next;
                    ctrun__uncharge(s, sizeof *it + it->len + CTRUN__ENTRY_OVERHEAD);
                    free(it);
                }
                if (e->qlen > 0)
                    s->st.queues--;
                e->qtail = NULL;
                e->qlen = 0;
                ctrun__release(s, e);
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
            ctrun__notify(s, deleted[i] + 4, kl, CT_STORE_WATCH_DELETED, NULL, 0,
                          CT_STORE_OP_DELETE_KEY, true);
            free(deleted[i]);
        }
        free(deleted);
    }
    return 0;
}

/* ---- network requests ------------------------------------------------------------------- */

__attribute__((format(printf, 2, 3))) static void ctrun__drop(ctrun__conn_t *c, const char *fmt,
                                                              ...)
{
    if (c->closing)
        return;
    char msg[384], peer[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ctrun__peer(c, peer, sizeof peer);
    ctrun__log_conn(c->s, "closed connection from %s: %s", peer, msg);
    c->s->st.dropped++;
    ctrun__conn_close(c);
}

static void ctrun__req_wait(ctrun__conn_t *c, const ct_store_req_t *req)
{
    ctrun_store_t *s = c->s;
    ct_store_list_iter_t it;
    ct_store_bytes_t k;
    uint64_t missing = 0;
    ct_store_list_begin(&req->keys, &it);
    while (ct_store_list_next(&it, &k, NULL))
        if (!ctrun__exists(ctrun__lookup(s, k.data, k.len, NULL)))
            missing++;
    if (missing == 0) {
        ctrun__reply_u8(c, CT_STORE_WAIT_STOP, false);
        return;
    }
    ctrun__wait_t *w = ctrun__wait_new(c);
    if (w == NULL) {
        ctrun__drop(c, "WAIT: store memory cap of %llu bytes reached",
                    (unsigned long long)s->max_bytes);
        return;
    }
    ct_store_list_begin(&req->keys, &it);
    while (ct_store_list_next(&it, &k, NULL)) {
        ctrun__entry_t *e = ctrun__lookup(s, k.data, k.len, NULL);
        if (ctrun__exists(e))
            continue;
        if (e == NULL)
            e = ctrun__obtain(s, k.data, k.len);
        if (e == NULL || !ctrun__reg_add(s, w, e, false)) {
            if (e != NULL)
                ctrun__release(s, e);
            ctrun__drop(c, "WAIT: store memory cap of %llu bytes reached",
                        (unsigned long long)s->max_bytes);
            return;
        }
    }
}

static void ctrun__req_barrier(ctrun__conn_t *c, const ct_store_req_t *req)
{
    ctrun_store_t *s = c->s;
    ctrun__ctx_t ctx = {.conn = c, .op = CT_STORE_OP_BARRIER};
    ct_errbuf_t eb;
    int64_t count = 0;
    /* Peek first: whether this arrival completes the barrier decides whom the write wakes. */
    int64_t cur = 0;
    ctrun__entry_t *e = ctrun__lookup(s, req->key.data, req->key.len, NULL);
    if (e != NULL && e->has_value && ctrun__parse_counter(e->value, e->vlen, &cur) != 0)
        cur = 0; /* ctrun__add reports it */
    bool done = (int64_t)((uint64_t)cur + 1) >= req->num;
    int rc = ctrun__add(s, &ctx, req->key.data, req->key.len, 1,
                        done ? CTRUN__WAKE_ALL : CTRUN__WAKE_NOT_BARRIER, &count, &eb);
    if (rc != 0) {
        ctrun__drop(c, "BARRIER: %s", eb.msg);
        return;
    }
    if (count >= req->num) {
        ctrun__reply_u8(c, CT_STORE_WAIT_STOP, false);
        return;
    }
    /* Looked up again: a watch callback may have deleted the key in the meantime. */
    ctrun__wait_t *w = ctrun__wait_new(c);
    e = w != NULL ? ctrun__obtain(s, req->key.data, req->key.len) : NULL;
    if (w == NULL || e == NULL || !ctrun__reg_add(s, w, e, true)) {
        if (e != NULL)
            ctrun__release(s, e);
        ctrun__drop(c, "BARRIER: store memory cap of %llu bytes reached",
                    (unsigned long long)s->max_bytes);
    }
}

static void ctrun__req_multi_get(ctrun__conn_t *c, const ct_store_req_t *req)
{
    ctrun_store_t *s = c->s;
    ct_store_list_iter_t it;
    ct_store_bytes_t k;
    uint64_t total = 0;
    ct_store_list_begin(&req->keys, &it);
    while (ct_store_list_next(&it, &k, NULL)) {
        ctrun__entry_t *e = ctrun__lookup(s, k.data, k.len, NULL);
        total += 8 + (e != NULL && e->has_value ? e->vlen : 0);
    }
    if (total > s->limits.max_message_len) {
        ctrun__drop(c, "MULTI_GET reply of %llu bytes exceeds the %llu-byte limit",
                    (unsigned long long)total, (unsigned long long)s->limits.max_message_len);
        return;
    }
    if (total == 0) /* MULTI_GET of no keys: an empty reply */
        return;
    uint8_t *p = ctrun__out(c, (size_t)total, false);
    if (p == NULL)
        return;
    ct_store_list_begin(&req->keys, &it);
    while (ct_store_list_next(&it, &k, NULL)) {
        ctrun__entry_t *e = ctrun__lookup(s, k.data, k.len, NULL);
        bool has = e != NULL && e->has_value;
        p = ct_store_put_bytes(p, has ? e->value : NULL, has ? e->vlen : 0);
    }
}

static void ctrun__req_list_keys(ctrun__conn_t *c)
{
    ctrun_store_t *s = c->s;
    size_t total = 8;
    for (size_t b = 0; b <= s->tab_mask; b++)
        for (ctrun__entry_t *e = s->tab[b]; e != NULL; e = e->hnext)
            if (e->has_value)
                total += 8 + e->klen;
    uint8_t *p = ctrun__out(c, total, false);
    if (p == NULL)
        return;
    p = ct_store_put_u64(p, s->st.keys);
    for (size_t b = 0; b <= s->tab_mask; b++)
        for (ctrun__entry_t *e = s->tab[b]; e != NULL; e = e->hnext)
            if (e->has_value)
                p = ct_store_put_bytes(p, e->key, e->klen);
}

static void ctrun__req_queue_push(ctrun__conn_t *c, const ct_store_req_t *req)
{
    ctrun_store_t *s = c->s;
    size_t charge = sizeof(ctrun__item_t) + req->value.len + CTRUN__ENTRY_OVERHEAD;
    ctrun__entry_t *e = ctrun__obtain(s, req->key.data, req->key.len);
    ctrun__item_t *it = NULL;
    if (e != NULL && ctrun__charge(s, charge)) {
        it = malloc(sizeof *it + req->value.len);
        if (it == NULL)
            ctrun__uncharge(s, charge);
    }
    if (it == NULL) {
        if (e != NULL)
            ctrun__release(s, e);
        ctrun__drop(c, "QUEUE_PUSH: store memory cap of %llu bytes reached",
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
    ctrun__wake(s, e, CTRUN__WAKE_ONE);
}

static void ctrun__req_queue_pop(ctrun__conn_t *c, const ct_store_req_t *req)
{
    ctrun_store_t *s = c->s;
    ctrun__entry_t *e = ctrun__lookup(s, req->key.data, req->key.len, NULL);
    uint64_t n = e != NULL ? e->qlen : 0;
    ctrun__reply_u64(c, n);
    if (n == 0)
        return;
    ctrun__item_t *it = e->qhead;
    ctrun__reply_bytes(c, it->data, it->len);
    e->qhead = it->next;
    if (e->qhead == NULL)
        e->qtail = NULL;
    if (--e->qlen == 0)
        s->st.queues--;
    ctrun__uncharge(s, sizeof *it + it->len + CTRUN__ENTRY_OVERHEAD);
    free(it);
    ctrun__release(s, e);
}

static void ctrun__req_watch_key(ctrun__conn_t *c, const ct_store_req_t *req)
{
    ctrun_store_t *s = c->s;
    ctrun__entry_t *e = ctrun__obtain(s, req->key.data, req->key.len);
    ctrun__kwatch_t *k = NULL;
    if (e != NULL && ctrun__charge(s, sizeof *k + CTRUN__ENTRY_OVERHEAD)) {
        k = calloc(1, sizeof *k);
        if (k == NULL)
            ctrun__uncharge(s, sizeof *k + CTRUN__ENTRY_OVERHEAD);
    }
    if (k == NULL) {
        if (e != NULL)
            ctrun__release(s, e);
        ctrun__drop(c, "WATCH_KEY: store memory cap of %llu bytes reached",
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
    ctrun__reply_u8(c, CT_STORE_WATCH_REGISTERED, false);
}

static void ctrun__handle(ctrun__conn_t *c, const ct_store_req_t *req)
{
    ctrun_store_t *s = c->s;
    ctrun__ctx_t ctx = {.conn = c, .op = req->op};
    ct_errbuf_t eb;
    ct_store_bytes_t reply;
    int64_t num = 0;
    int rc = 0;
    s->st.requests++;
    if (req->op == CT_STORE_OP_VALIDATE) {
        if (c->validated)
            ctrun__drop(c, "VALIDATE is only valid as the first request");
        c->validated = true;
        return;
    }
    switch (req->op) {
    case CT_STORE_OP_SET:
    case CT_STORE_OP_APPEND:
        rc = ctrun__write(s, &ctx, req->key.data, req->key.len, req->value.data, req->value.len,
                          req->op == CT_STORE_OP_APPEND, CTRUN__WAKE_ALL, &eb);
        break;
    case CT_STORE_OP_MULTI_SET: {
        ct_store_list_iter_t it;
        ct_store_bytes_t k, v;
        ct_store_list_begin(&req->keys, &it);
        while (rc == 0 && !c->closing && ct_store_list_next(&it, &k, &v))
            rc = ctrun__write(s, &ctx, k.data, k.len, v.data, v.len, false, CTRUN__WAKE_ALL, &eb);
        break;
    }
    case CT_STORE_OP_GET: {
        ctrun__entry_t *e = ctrun__lookup(s, req->key.data, req->key.len, NULL);
        bool has = e != NULL && e->has_value;
        ctrun__reply_bytes(c, has ? e->value : NULL, has ? e->vlen : 0);
        break;
    }
    case CT_STORE_OP_ADD:
        rc = ctrun__add(s, &ctx, req->key.data, req->key.len, req->num, CTRUN__WAKE_ALL, &num, &eb);
        if (rc == 0)
            ctrun__reply_u64(c, (uint64_t)num);
        break;
    case CT_STORE_OP_COMPARE_SET:
        rc = ctrun__compare_set(s, &ctx, req->key.data, req->key.len, req->value, req->desired,
                                &reply, &eb);
        if (rc == 0)
            ctrun__reply_bytes(c, reply.data, reply.len);
        break;
    case CT_STORE_OP_CHECK: {
        ct_store_list_iter_t it;
        ct_store_bytes_t k;
        bool ready = true;
        ct_store_list_begin(&req->keys, &it);
        while (ready && ct_store_list_next(&it, &k, NULL))
            ready = ctrun__exists(ctrun__lookup(s, k.data, k.len, NULL));
        ctrun__reply_u8(c, ready ? CT_STORE_CHECK_READY : CT_STORE_CHECK_NOT_READY, false);
        break;
    }
    case CT_STORE_OP_WAIT:
        ctrun__req_wait(c, req);
        break;
    case CT_STORE_OP_GETNUMKEYS:
        ctrun__reply_u64(c, s->st.keys);
        break;
    case CT_STORE_OP_DELETE_KEY:
        ctrun__reply_u64(c, ctrun__delete(s, &ctx, req->key.data, req->key.len) ? 1 : 0);
        break;
    case CT_STORE_OP_MULTI_GET:
        ctrun__req_multi_get(c, req);
        break;
    case CT_STORE_OP_CANCEL_WAIT:
        ctrun__drop_waits(c);
        ctrun__reply_u8(c, CT_STORE_WAIT_CANCELED, false);
        break;
    case CT_STORE_OP_PING: {
        uint8_t *p = ctrun__out(c, 4, false);
        if (p != NULL)
            ct_store_put_u32(p, req->num32);
        break;
    }
    case CT_STORE_OP_QUEUE_PUSH:
        ctrun__req_queue_push(c, req);
        break;
    case CT_STORE_OP_QUEUE_POP:
        ctrun__req_queue_pop(c, req);
        break;
    case CT_STORE_OP_QUEUE_LEN: {
        ctrun__entry_t *e = ctrun__lookup(s, req->key.data, req->key.len, NULL);
        ctrun__reply_u64(c, e != NULL ? e->qlen : 0);
        break;
    }
    case CT_STORE_OP_LIST_KEYS:
        ctrun__req_list_keys(c);
        break;
    case CT_STORE_OP_BARRIER:
        ctrun__req_barrier(c, req);
        break;
    case CT_STORE_OP_WATCH_KEY:
        ctrun__req_watch_key(c, req);
        break;
    case CT_STORE_OP_VALIDATE:
    case CT_STORE_OP_COUNT:
        break;
    }
    if (rc != 0)
        ctrun__drop(c, "%s: %s", ct_store_op_name(req->op), eb.msg);
}

/* One message from p: > 0 consumed, 0 needs more (c->need set), < 0 the connection closed. */
static ssize_t ctrun__step(ctrun__conn_t *c, const uint8_t *p, size_t n)
{
    /* (A doomed connection is never stepped: ctrun__process stops first.) */
    ctrun_store_t *s = c->s;
    ct_errbuf_t eb;
    ssize_t r;
    uint8_t mac[CT_STORE_AUTH_MAC_LEN], want[CT_STORE_AUTH_MAC_LEN];
    uint8_t *o;
    switch (c->state) {
    case CTRUN__AUTH_HELLO:
        r = ct_store_decode_auth_hello(p, n, c->cn, &eb);
        if (r == 0)
            c->need = CT_STORE_AUTH_HELLO_LEN;
        if (r <= 0)
            break;
        if (ct_store_auth_nonce(c->sn, &eb) != 0) {
            r = CT_EAUTH;
            break;
        }
        o = ctrun__out(c, CT_STORE_AUTH_HELLO_LEN, false);
        if (o != NULL)
            ct_store_encode_auth_hello(c->sn, o);
        c->state = CTRUN__AUTH_PROOF;
        return r;
    case CTRUN__AUTH_PROOF:
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
        o = ctrun__out(c, CT_STORE_AUTH_PROOF_LEN, false);
        if (o != NULL)
            ct_store_encode_auth_mac(CT_STORE_AUTH_ACCEPT, mac, o);
        c->state = CTRUN__DETECT;
        return r;
    case CTRUN__DETECT:
        if (p[0] == CT_STORE_AUTH_HELLO && s->token == NULL) {
            ctrun__drop(c, "the client tried to authenticate, but this store has no token");
            return -1;
        }
        if (ct_store_detect_dialect(p, n, &c->dialect) == 0) {
            c->need = 5;
            return 0;
        }
        c->state = CTRUN__READY;
        /* fall through */
    case CTRUN__READY: {
        ct_store_req_t req;
        size_t need = 0;
        r = ct_store_decode_request(c->dialect, p, n, &s->limits, &req, &c->cursor, &need, &eb);
        if (r == 0) {
            c->need = need;
            return 0;
        }
        if (r < 0) {
            ctrun__drop(c, "%s", eb.msg);
            return -1;
        }
        ctrun__handle(c, &req);
        return c->closing || c->doomed ? -1 : r;
    }
    default:
        return -1;
    }
    if (r < 0) {
        ctrun__drop(c, "authentication failed: %s", eb.msg);
        return -1;
    }
    return 0;
}

static int ctrun__in_reserve(ctrun__conn_t *c, size_t want)
{
    ctrun_store_t *s = c->s;
    if (want <= c->in_cap)
        return 0;
    size_t ncap = c->in_cap ? c->in_cap : 4096;
    while (ncap < want)
        ncap *= 2;
    /* The last step to the size the parser needs for the whole message takes just that: a
     * half-sent 8 MiB value holds (and is charged) 8 MiB, not 16. */
    if (want == c->need)
        ncap = want;
    size_t extra = ncap - c->in_cap;
    if (s->memory + ctrun__buffered(s) + extra > s->max_bytes)
        return CT_ELIMIT;
    uint8_t *nb = realloc(c->in, ncap);
    if (nb == NULL)
        return -ENOMEM;
    c->in = nb;
    c->in_cap = ncap;
    s->st.buffered_bytes += extra;
    return 0;
}

static void ctrun__in_shrink(ctrun__conn_t *c)
{
    if (c->in_len == 0 && c->in_cap > 0 && !c->closing) {
        c->s->st.buffered_bytes -= c->in_cap;
        free(c->in);
        c->in = NULL;
        c->in_cap = 0;
    }
}

static void ctrun__on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void ctrun__on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

static void ctrun__pause(ctrun__conn_t *c)
{
    c->paused = true;
    if (!c->is_virtual)
        uv_read_stop((uv_stream_t *)&c->tcp);
}

/* Parses and handles every complete message in data; keeps the rest in c->in. */
static void ctrun__process_input(ctrun__conn_t *c, const uint8_t *data, size_t len, bool shared)
{
    size_t off = 0;
    while (!c->closing && !c->doomed && !c->paused && off < len && len - off >= c->need) {
        ssize_t n = ctrun__step(c, data + off, len - off);
        if (n <= 0)
            break;
        off += (size_t)n;
        c->need = 0;
        c->cursor = (ct_store_cursor_t){0};
        if (ctrun__pending(c) > CTRUN__HIGH_WATER)
            ctrun__pause(c);
    }
    if (c->closing)
        return;
    size_t rest = len - off;
    if (shared) {
        if (rest > 0) {
            int rc = ctrun__in_reserve(c, rest);
            if (rc != 0) {
                ctrun__drop(c,
                            "no room to buffer a partial request (store memory cap of %llu "
                            "bytes)",
                            (unsigned long long)c->s->max_bytes);
                return;
            }
            memcpy(c->in, data + off, rest);
        }
        c->in_len = rest;
    } else {
        if (off > 0 && rest > 0)
            memmove(c->in, c->in + off, rest);
        c->in_len = rest;
        ctrun__in_shrink(c);
    }
}

static void ctrun__process(ctrun__conn_t *c, const uint8_t *data, size_t len, bool shared)
{
    bool was = c->parsing;
    c->parsing = true;
    ctrun__process_input(c, data, len, shared);
    c->parsing = was;
}

static void ctrun__resume(ctrun__conn_t *c)
{
    c->paused = false;
    if (c->in_len > 0)
        ctrun__process(c, c->in, c->in_len, false);
    if (!c->closing && !c->paused && !c->is_virtual)
        uv_read_start((uv_stream_t *)&c->tcp, ctrun__on_alloc, ctrun__on_read);
}

/* The in-flight write has completed (status 0) or failed: the one place where a write ends,
 * for network connections (ctrun__on_write) and test connections alike. */
static void ctrun__write_done(ctrun__conn_t *c, int status)
{
    ctrun_store_t *s = c->s;
    c->writing = false;
    c->inflight = 0;
    c->woff = 0;
    if (c->closing)
        return;
    if (status < 0) {
        ctrun__conn_close(c);
        ctrun__flush_dirty(s);
        return;
    }
    if (c->wbuf_cap > 256 * 1024) {
        free(c->wbuf);
        c->wbuf = NULL;
        c->wbuf_cap = 0;
    }
    ctrun__flush(c);
    ctrun__maybe_resume(c);
    ctrun__flush_dirty(s);
}

static void ctrun__on_write(uv_write_t *req, int status)
{
    ctrun__write_done(req->data, status);
}

static void ctrun__on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    ctrun__conn_t *c = h->data;
    ctrun_store_t *s = c->s;
    (void)suggested;
    if (c->in_len == 0) {
        *buf = uv_buf_init((char *)s->rbuf, CTRUN__READ_CHUNK);
        return;
    }
    /* A partial request: read into its own buffer, growing geometrically towards the size the
     * parser said it needs (never beyond the message limit, which the parser enforces). */
    size_t want = c->in_len + CTRUN__READ_CHUNK;
    if (c->need > want) {
        size_t twice = c->in_cap * 2;
        want = c->need < twice ? c->need : twice;
        if (want < c->in_len + CTRUN__READ_CHUNK)
            want = c->in_len + CTRUN__READ_CHUNK;
    }
    if (ctrun__in_reserve(c, want) != 0) {
        c->oom = true;
        *buf = uv_buf_init(NULL, 0);
        return;
    }
    *buf = uv_buf_init((char *)c->in + c->in_len, (unsigned)(c->in_cap - c->in_len));
}

static void ctrun__on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    ctrun__conn_t *c = st->data;
    ctrun_store_t *s = c->s;
    if (nread == 0 || c->closing)
        return;
    if (nread < 0) {
        if (nread == UV_ENOBUFS || c->oom)
            ctrun__drop(c, "no room to buffer a partial request (store memory cap of %llu bytes)",
                        (unsigned long long)s->max_bytes);
        else
            ctrun__conn_close(c); /* EOF or reset: a client going away is normal */
        ctrun__flush_dirty(s);
        return;
    }
    if (buf->base == (char *)s->rbuf) {
        ctrun__process(c, s->rbuf, (size_t)nread, true);
    } else {
        c->in_len += (size_t)nread;
        ctrun__process(c, c->in, c->in_len, false);
    }
    ctrun__flush_dirty(s);
}

/* ---- connections ------------------------------------------------------------------------ */

static void ctrun__maybe_finish(ctrun_store_t *s);

static void ctrun__conn_free(ctrun__conn_t *c)
{
    free(c->in);
    free(c->out);
    free(c->wbuf);
    free(c->vsock);
    free(c);
}

static void ctrun__on_conn_closed(uv_handle_t *h)
{
    ctrun__conn_t *c = h->data;
    ctrun_store_t *s = c->s;
    ctrun__conn_free(c);
    s->open_handles--;
    ctrun__maybe_finish(s);
}

static void ctrun__conn_close(ctrun__conn_t *c)
{
    if (c->closing)
        return;
    ctrun_store_t *s = c->s;
    c->closing = true;
    /* Its input buffer stops counting against the cap now; the memory goes with the handle
     * (the request being handled may still point into it). */
    s->st.buffered_bytes -= c->in_cap;
    s->shed_bytes -= c->shed_bytes;
    c->shed_bytes = 0;
    ctrun__drop_waits(c);
    while (c->kwatches != NULL)
        ctrun__kwatch_free(s, c->kwatches);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->st.connections--;
    if (!c->is_virtual)
        uv_close((uv_handle_t *)&c->tcp, ctrun__on_conn_closed);
    /* The last client of a lingering store is gone: close on the next loop turn (not here,
     * inside a read or write callback of the connection being closed). */
    if (s->lingering && !s->closing && s->st.connections == 0)
        uv_timer_start(&s->linger_timer, s->linger_timer.timer_cb, 0, 0);
}

static ctrun__conn_t *ctrun__conn_new(ctrun_store_t *s)
{
    ctrun__conn_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->s = s;
    c->state = s->token != NULL ? CTRUN__AUTH_HELLO : CTRUN__DETECT;
    c->opened_ms = uv_now(s->loop);
    c->tcp.data = c;
    return c;
}

static void ctrun__conn_link(ctrun_store_t *s, ctrun__conn_t *c)
{
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->st.connections++;
    s->st.accepted++;
}

/* Takes an accepted socket on as a connection. */
static void ctrun__accepted(ctrun_store_t *s, int fd)
{
    ctrun__conn_t *c = ctrun__conn_new(s);
    if (c == NULL || uv_tcp_init(s->loop, &c->tcp) != 0) {
        ctrun__log_conn(s, "out of memory accepting a connection");
        free(c);
        close(fd);
        return;
    }
    s->open_handles++;
    c->tcp.data = c;
    if (uv_tcp_open(&c->tcp, fd) != 0) {
        close(fd);
        uv_close((uv_handle_t *)&c->tcp, ctrun__on_conn_closed);
        return;
    }
    ctrun__conn_link(s, c);
    if (s->st.connections > s->max_connections) {
        s->st.refused++;
        s->st.accepted--;
        char peer[96];
        ctrun__peer(c, peer, sizeof peer);
        ctrun__log_conn(s, "refused connection from %s: %llu connections is the maximum", peer,
                        (unsigned long long)s->max_connections);
        ctrun__conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    if (uv_read_start((uv_stream_t *)&c->tcp, ctrun__on_alloc, ctrun__on_read) != 0)
        ctrun__conn_close(c);
}

static void ctrun__on_listen_ready(uv_poll_t *h, int status, int events);

static void ctrun__on_accept_timer(uv_timer_t *t)
{
    ctrun_store_t *s = t->data;
    if (s->closing || !s->has_listener)
        return;
    if (s->spare_fd < 0)
        s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    uv_poll_start(&s->listener, UV_READABLE, ctrun__on_listen_ready);
}

/* Stops accepting for 100 ms: when pending connections can be neither accepted nor refused,
 * the listening socket stays readable and would otherwise spin the loop. */
static void ctrun__accept_pause(ctrun_store_t *s)
{
    if (!s->has_accept_timer)
        return;
    uv_poll_stop(&s->listener);
    uv_timer_start(&s->accept_timer, ctrun__on_accept_timer, 100, 0);
}

/*
 * accept() failed with EMFILE or ENFILE: refuses every pending connection (the spare
 * descriptor is given up for a moment so that each can be accepted and closed at once, which
 * the client sees as its connection closing rather than as silence), and says so once for the
 * whole shortage (at most once a minute), with the limit. Accepting resumes by itself: the
 * next accept() that succeeds ends the shortage.
 */
static void ctrun__refuse_for_fds(ctrun_store_t *s, int err)
{
    uint64_t n = 0;
    if (s->spare_fd >= 0) {
        close(s->spare_fd);
        s->spare_fd = -1;
        for (;;) {
            int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0) {
                close(fd);
                n++;
            } else if (errno != EINTR && errno != ECONNABORTED) {
                break;
            }
        }
        s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    s->st.refused += n;
    s->fd_refused += n;
    uint64_t now = uv_now(s->loop);
    if (!s->fd_starved) {
        s->fd_starved = true;
        s->fd_starved_logged = false;
        if (s->fd_log_ms == 0 || now - s->fd_log_ms >= 60000) {
            s->fd_starved_logged = true;
            s->fd_log_ms = now == 0 ? 1 : now;
            char limit[32] = "unknown";
            struct rlimit rl;
            if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
                snprintf(limit, sizeof limit, "%llu", (unsigned long long)rl.rlim_cur);
            if (err == EMFILE)
                ct_log_error("store: cannot accept connections: out of file descriptors (limit "
                             "%s, RLIMIT_NOFILE); %llu refused so far",
                             limit, (unsigned long long)s->fd_refused);
            else
                ct_log_error("store: cannot accept connections: the system is out of file "
                             "descriptors (ENFILE, see fs.file-max); %llu refused so far",
                             (unsigned long long)s->fd_refused);
        }
    }
    if (s->spare_fd < 0) /* nothing to refuse them with: leave them waiting a moment */
        ctrun__accept_pause(s);
}

#define CTRUN__ACCEPT_BATCH 128 /* per readiness event, so that clients get served meanwhile */

static void ctrun__on_listen_ready(uv_poll_t *h, int status, int events)
{
    ctrun_store_t *s = h->data;
    (void)events;
    if (status < 0) {
        ctrun__log_conn(s, "listening socket: %s", uv_strerror(status));
        ctrun__accept_pause(s);
        return;
    }
    for (int i = 0; i < CTRUN__ACCEPT_BATCH && !s->closing; i++) {
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            if (s->fd_starved) {
                s->fd_starved = false;
                if (s->fd_starved_logged)
                    ct_log_info("store: accepting connections again (%llu refused so far for "
                                "want of file descriptors)",
                                (unsigned long long)s->fd_refused);
            }
            ctrun__accepted(s, fd);
            continue;
        }
        int err = errno;
        if (err == EAGAIN || err == EWOULDBLOCK)
            break;
        /* A connection that failed before it was accepted (ECONNABORTED, and on Linux the
         * pending network errors accept() passes on) says nothing about the next one. */
        if (err == EINTR || err == ECONNABORTED || err == EPROTO || err == ENETDOWN ||
            err == ENOPROTOOPT || err == EHOSTDOWN || err == ENONET || err == EHOSTUNREACH ||
            err == EOPNOTSUPP || err == ENETUNREACH)
            continue;
        if (err == EMFILE || err == ENFILE) {
            ctrun__refuse_for_fds(s, err);
            break;
        }
        ctrun__log_conn(s, "accept failed: %s", strerror(err));
        ctrun__accept_pause(s);
        break;
    }
    ctrun__flush_dirty(s);
}

/* Closes connections that have not authenticated in time (only when a token is set). */
static void ctrun__on_auth_timer(uv_timer_t *t)
{
    ctrun_store_t *s = t->data;
    uint64_t now = uv_now(s->loop);
    ctrun__conn_t *c = s->conns;
    while (c != NULL) {
        ctrun__conn_t *next = c->next;
        if (c->state < CTRUN__DETECT && now - c->opened_ms >= CTRUN__AUTH_TIMEOUT_MS)
            ctrun__drop(c, "did not authenticate within %d s", CTRUN__AUTH_TIMEOUT_MS / 1000);
        c = next;
    }
    ctrun__flush_dirty(s);
}

/* ---- listening -------------------------------------------------------------------------- */

static int ctrun__somaxconn(void)
{
    FILE *f = fopen("/proc/sys/net/core/somaxconn", "r");
    int v = 0;
    if (f != NULL) {
        if (fscanf(f, "%d", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v > 0 ? v : SOMAXCONN;
}

static int ctrun__bind_fd(int family, const struct sockaddr *sa, socklen_t len, int *out)
{
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    /* Dual-stack on purpose, whatever net.ipv6.bindv6only says: v4 clients reach [::]. */
    if (family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    if (bind(fd, sa, len) != 0) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    *out = fd;
    return 0;
}

static int ctrun__listen(ctrun_store_t *s, const char *host, int port, ct_errbuf_t *eb)
{
    int fd = -1, rc;
    if (host == NULL || host[0] == '\0') {
        struct sockaddr_in6 a6 = {.sin6_family = AF_INET6,
                                  .sin6_port = htons((uint16_t)port),
                                  .sin6_addr = IN6ADDR_ANY_INIT};
        rc = ctrun__bind_fd(AF_INET6, (struct sockaddr *)&a6, sizeof a6, &fd);
        if (rc == -EAFNOSUPPORT || rc == -EADDRNOTAVAIL || rc == -EPROTONOSUPPORT) {
            ct_log_info("store: IPv6 unavailable (%s); listening on IPv4 only", ct_strerror(rc));
            struct sockaddr_in a4 = {.sin_family = AF_INET,
                                     .sin_port = htons((uint16_t)port),
                                     .sin_addr = {htonl(INADDR_ANY)}};
            rc = ctrun__bind_fd(AF_INET, (struct sockaddr *)&a4, sizeof a4, &fd);
        }
        if (rc != 0)
            return ct_errbuf_set(eb, rc, "store: cannot listen on port %d: %s", port,
                                 ct_strerror(rc));
    } else {
        char ps[16];
        snprintf(ps, sizeof ps, "%d", port);
        struct addrinfo hints = {.ai_family = AF_UNSPEC,
                                 .ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
        struct addrinfo *res = NULL;
        int gai = getaddrinfo(host, ps, &hints, &res);
        if (gai != 0)
            return ct_errbuf_set(eb, CT_EPARSE, "store: cannot resolve listen host \"%s\": %s",
                                 host, gai_strerror(gai));
        rc = -EADDRNOTAVAIL;
        for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next)
            rc = ctrun__bind_fd(ai->ai_family, ai->ai_addr, ai->ai_addrlen, &fd);
        freeaddrinfo(res);
        if (fd < 0)
            return ct_errbuf_set(eb, rc, "store: cannot listen on %s:%d: %s", host, port,
                                 ct_strerror(rc));
    }
    s->listen_fd = fd; /* closed with the store's state, after the poll handle */
    int backlog = ctrun__somaxconn();
    if (listen(fd, backlog) != 0) {
        rc = -errno;
        return ct_errbuf_set(eb, rc, "store: listen on port %d: %s", port, ct_strerror(rc));
    }
    rc = uv_poll_init(s->loop, &s->listener, fd);
    if (rc != 0)
        return ct_errbuf_set(eb, rc, "store: uv_poll_init: %s", uv_strerror(rc));
    s->listener.data = s;
    s->has_listener = true;
    s->open_handles++;
    rc = uv_timer_init(s->loop, &s->accept_timer);
    if (rc != 0)
        return ct_errbuf_set(eb, rc, "store: timer: %s", uv_strerror(rc));
    s->accept_timer.data = s;
    s->has_accept_timer = true;
    s->open_handles++;
    s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    rc = uv_poll_start(&s->listener, UV_READABLE, ctrun__on_listen_ready);
    if (rc != 0)
        return ct_errbuf_set(eb, rc, "store: listen on port %d: %s", port, uv_strerror(rc));
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &len);
    char ip[64] = "?";
    if (ss.ss_family == AF_INET6) {
        s->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof ip);
        snprintf(s->address, sizeof s->address, "[%s]:%d", ip, s->port);
    } else {
        s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof ip);
        snprintf(s->address, sizeof s->address, "%s:%d", ip, s->port);
    }
    ct_log_debug("store: listening on %s (backlog %d)", s->address, backlog);
    return 0;
}

/* ---- lifecycle -------------------------------------------------------------------------- */

static void ctrun__free_state(ctrun_store_t *s)
{
    for (size_t b = 0; s->tab != NULL && b <= s->tab_mask; b++) {
        ctrun__entry_t *e = s->tab[b];
        while (e != NULL) {
            ctrun__entry_t *next = e->hnext;
            while (e->qhead != NULL) {
                ctrun__item_t *it = e->qhead;
                e->qhead = it->next;
                free(it);
            }
            free(e->value);
            free(e);
            e = next;
        }
    }
    free(s->tab);
    while (s->watches != NULL) {
        ctrun_store_watch_t *w = s->watches;
        s->watches = w->next;
        free(w);
    }
    if (s->token != NULL) {
        memset(s->token, 0, s->token_len);
        free(s->token);
    }
    free(s->rbuf);
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    if (s->spare_fd >= 0)
        close(s->spare_fd);
}

static void ctrun__maybe_finish(ctrun_store_t *s)
{
    if (!s->closing || s->open_handles > 0)
        return;
    void (*cb)(void *) = s->close_cb;
    void *data = s->close_data;
    ctrun__free_state(s);
    free(s);
    if (cb != NULL)
        cb(data);
}

static void ctrun__on_handle_closed(uv_handle_t *h)
{
    ctrun_store_t *s = h->data;
    s->open_handles--;
    ctrun__maybe_finish(s);
}

int ctrun_store_create(uv_loop_t *loop, const ctrun_store_opts_t *opts, ctrun_store_t **out,
                       ct_errbuf_t *eb)
{
    static const ctrun_store_opts_t defaults = {0};
    if (opts == NULL)
        opts = &defaults;
    *out = NULL;
    if (opts->port < 0 || opts->port > 65535)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "store port %d out of range (0..65535)",
                             opts->port);
    if (opts->token != NULL) {
        int rc = ct_store_auth_check_token(opts->token, "store token", eb);
        if (rc != 0)
            return rc;
    }
    ctrun_store_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    s->loop = loop;
    s->listen_fd = -1;
    s->spare_fd = -1;
    s->limits = opts->limits ? *opts->limits : ct_store_default_limits;
    s->max_connections =
        opts->max_connections ? opts->max_connections : CTRUN_STORE_DEFAULT_MAX_CONNECTIONS;
    s->max_bytes = opts->max_bytes ? opts->max_bytes : CTRUN_STORE_DEFAULT_MAX_BYTES;
    s->tab_mask = 1023;
    s->tab = calloc(s->tab_mask + 1, sizeof *s->tab);
    s->rbuf = malloc(CTRUN__READ_CHUNK);
    if (opts->token != NULL) {
        s->token_len = strlen(opts->token);
        s->token = malloc(s->token_len + 1);
        if (s->token != NULL)
            memcpy(s->token, opts->token, s->token_len + 1);
    }
    if (s->tab == NULL || s->rbuf == NULL || (opts->token != NULL && s->token == NULL)) {
        ctrun__free_state(s);
        free(s);
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    }
    if (getrandom(s->sipkey, sizeof s->sipkey, 0) != (ssize_t)sizeof s->sipkey) {
        s->sipkey[0] = (uint64_t)uv_hrtime();
        s->sipkey[1] = (uint64_t)getpid() * 0x9E3779B97F4A7C15ULL;
    }
    /* A peer vanishing mid-write must cost a connection, not the process. */
    struct sigaction sa;
    if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) {
        signal(SIGPIPE, SIG_IGN);
        ct_log_debug("store: SIGPIPE set to SIG_IGN");
    }
    int rc = ctrun__listen(s, opts->host, opts->port, eb);
    if (rc == 0 && s->token != NULL) {
        rc = uv_timer_init(loop, &s->auth_timer);
        if (rc == 0) {
            s->has_timer = true;
            s->open_handles++;
            s->auth_timer.data = s;
            rc = uv_timer_start(&s->auth_timer, ctrun__on_auth_timer, 1000, 1000);
        }
        if (rc != 0)
            ct_errbuf_set(eb, rc, "store: timer: %s", uv_strerror(rc));
    }
    if (rc != 0) {
        if (s->open_handles == 0) {
            ctrun__free_state(s);
            free(s);
        } else {
            /* Handles were opened: they must close through the loop before the memory goes. */
            ctrun_store_close(s, NULL, NULL);
        }
        return rc;
    }
    *out = s;
    return 0;
}

void ctrun_store_close(ctrun_store_t *s, void (*cb)(void *data), void *data)
{
    if (s == NULL || s->closing)
        return;
    s->closing = true;
    s->close_cb = cb;
    s->close_data = data;
    while (s->conns != NULL)
        ctrun__conn_close(s->conns);
    s->dirty = NULL; /* closing connections are never flushed */
    if (s->has_listener) {
        s->listener.data = s;
        uv_close((uv_handle_t *)&s->listener, ctrun__on_handle_closed);
    }
    if (s->has_accept_timer)
        uv_close((uv_handle_t *)&s->accept_timer, ctrun__on_handle_closed);
    s->has_accept_timer = false;
    if (s->has_timer)
        uv_close((uv_handle_t *)&s->auth_timer, ctrun__on_handle_closed);
    if (s->has_linger)
        uv_close((uv_handle_t *)&s->linger_timer, ctrun__on_handle_closed);
    s->has_linger = false;
    s->lingering = false;
    /* With nothing open (not even a listener), the memory can go now; cb still runs later
     * from the loop's point of view only if handles were open, so call it here. */
    ctrun__maybe_finish(s);
}

static void ctrun__on_linger_timer(uv_timer_t *t)
{
    ctrun_store_t *s = t->data;
    if (s->st.connections > 0)
        ct_log_debug("store: closing with %llu client connection%s still open",
                     (unsigned long long)s->st.connections, s->st.connections == 1 ? "" : "s");
    ctrun_store_close(s, s->linger_cb, s->linger_data);
}

void ctrun_store_close_gently(ctrun_store_t *s, uint64_t linger_ms, void (*cb)(void *data),
                              void *data)
{
    if (s == NULL || s->closing || s->lingering)
        return;
    if (s->st.connections == 0 || linger_ms == 0 || uv_timer_init(s->loop, &s->linger_timer) != 0) {
        ctrun_store_close(s, cb, data);
        return;
    }
    s->has_linger = true;
    s->lingering = true;
    s->open_handles++;
    s->linger_cb = cb;
    s->linger_data = data;
    s->linger_timer.data = s;
    uv_timer_start(&s->linger_timer, ctrun__on_linger_timer, linger_ms, 0);
}

int ctrun_store_port(const ctrun_store_t *s)
{
    return s->port;
}

const char *ctrun_store_address(const ctrun_store_t *s)
{
    return s->address;
}

/* ---- in-process API --------------------------------------------------------------------- */

static int ctrun__api_key(const ctrun_store_t *s, const char *key, size_t *klen, ct_errbuf_t *eb)
{
    if (s->closing)
        return ct_errbuf_set(eb, CT_ESTATE, "store is closing");
    if (key == NULL)
        return ct_errbuf_set(eb, CT_EPARSE, "NULL key");
    *klen = strlen(key);
    if (*klen > s->limits.max_key_len)
        return ct_errbuf_set(eb, CT_ELIMIT, "key of %zu bytes exceeds the %llu-byte limit", *klen,
                             (unsigned long long)s->limits.max_key_len);
    return 0;
}

int ctrun_store_set(ctrun_store_t *s, const char *key, const void *value, size_t len,
                    ct_errbuf_t *eb)
{
    size_t klen = 0;
    int rc = ctrun__api_key(s, key, &klen, eb);
    if (rc != 0)
        return rc;
    if (len > s->limits.max_value_len)
        return ct_errbuf_set(eb, CT_ELIMIT, "value of %zu bytes exceeds the %llu-byte limit", len,
                             (unsigned long long)s->limits.max_value_len);
    ctrun__ctx_t ctx = {.conn = NULL, .op = CT_STORE_OP_SET};
    rc = ctrun__write(s, &ctx, (const uint8_t *)key, klen, value, len, false, CTRUN__WAKE_ALL, eb);
    ctrun__flush_dirty(s);
    return rc;
}

int ctrun_store_get(ctrun_store_t *s, const char *key, ct_store_bytes_t *value)
{
    size_t klen = 0;
    int rc = ctrun__api_key(s, key, &klen, NULL);
    if (rc != 0)
        return rc;
    ctrun__entry_t *e = ctrun__lookup(s, (const uint8_t *)key, klen, NULL);
    if (e == NULL || !e->has_value)
        return -ENOENT;
    *value = (ct_store_bytes_t){.data = e->value, .len = e->vlen};
    return 0;
}

int ctrun_store_add(ctrun_store_t *s, const char *key, int64_t delta, int64_t *result,
                    ct_errbuf_t *eb)
{
    size_t klen = 0;
    int rc = ctrun__api_key(s, key, &klen, eb);
    if (rc != 0)
        return rc;
    ctrun__ctx_t ctx = {.conn = NULL, .op = CT_STORE_OP_ADD};
    int64_t v = 0;
    rc = ctrun__add(s, &ctx, (const uint8_t *)key, klen, delta, CTRUN__WAKE_ALL, &v, eb);
    if (rc == 0 && result != NULL)
        *result = v;
    ctrun__flush_dirty(s);
    return rc;
}

int ctrun_store_compare_set(ctrun_store_t *s, const char *key, const void *expected,
                            size_t expected_len, const void *desired, size_t desired_len,
                            ct_store_bytes_t *current, ct_errbuf_t *eb)
{
    size_t klen = 0;
    int rc = ctrun__api_key(s, key, &klen, eb);
    if (rc != 0)
        return rc;
    if (desired_len > s->limits.max_value_len)
        return ct_errbuf_set(eb, CT_ELIMIT, "value of %zu bytes exceeds the %llu-byte limit",
                             desired_len, (unsigned long long)s->limits.max_value_len);
    ctrun__ctx_t ctx = {.conn = NULL, .op = CT_STORE_OP_COMPARE_SET};
    ct_store_bytes_t reply;
    rc = ctrun__compare_set(s, &ctx, (const uint8_t *)key, klen,
                            (ct_store_bytes_t){.data = expected, .len = expected_len},
                            (ct_store_bytes_t){.data = desired, .len = desired_len}, &reply, eb);
    if (rc == 0 && current != NULL) {
        /* After a swap, point at the stored copy rather than at the caller's own buffer. */
        ctrun__entry_t *e = ctrun__lookup(s, (const uint8_t *)key, klen, NULL);
        if (reply.data == desired && e != NULL && e->has_value)
            reply = (ct_store_bytes_t){.data = e->value, .len = e->vlen};
        *current = reply;
    }
    ctrun__flush_dirty(s);
    return rc;
}

int ctrun_store_delete(ctrun_store_t *s, const char *key, bool *deleted)
{
    size_t klen = 0;
    int rc = ctrun__api_key(s, key, &klen, NULL);
    if (rc != 0)
        return rc;
    ctrun__ctx_t ctx = {.conn = NULL, .op = CT_STORE_OP_DELETE_KEY};
    bool d = ctrun__delete(s, &ctx, (const uint8_t *)key, klen);
    if (deleted != NULL)
        *deleted = d;
    ctrun__flush_dirty(s);
    return 0;
}

int64_t ctrun_store_num_keys(const ctrun_store_t *s)
{
    return (int64_t)s->st.keys;
}

size_t ctrun_store_foreach(ctrun_store_t *s, const char *prefix,
                           void (*fn)(ct_store_bytes_t key, ct_store_bytes_t value, void *data),
                           void *data)
{
    size_t pl = prefix != NULL ? strlen(prefix) : 0, n = 0;
    for (size_t b = 0; b <= s->tab_mask; b++) {
        for (ctrun__entry_t *e = s->tab[b]; e != NULL; e = e->hnext) {
            if (!e->has_value || e->klen < pl || (pl > 0 && memcmp(e->key, prefix, pl) != 0))
                continue;
            n++;
            if (fn != NULL)
                fn((ct_store_bytes_t){.data = e->key, .len = e->klen},
                   (ct_store_bytes_t){.data = e->value, .len = e->vlen}, data);
        }
    }
    return n;
}

int ctrun_store_wipe_prefix(ctrun_store_t *s, const char *prefix, size_t *ndeleted)
{
    if (s->closing)
        return CT_ESTATE;
    if (prefix == NULL)
        return CT_EPARSE;
    int rc = ctrun__wipe(s, &prefix, 1, false, ndeleted);
    ctrun__flush_dirty(s);
    return rc;
}

int ctrun_store_wipe_except(ctrun_store_t *s, const char *const *keep, size_t nkeep,
                            size_t *ndeleted)
{
    if (s->closing)
        return CT_ESTATE;
    for (size_t i = 0; i < nkeep; i++)
        if (keep[i] == NULL)
            return CT_EPARSE;
    int rc = ctrun__wipe(s, keep, nkeep, true, ndeleted);
    ctrun__flush_dirty(s);
    return rc;
}

int ctrun_store_watch(ctrun_store_t *s, const char *key, bool prefix, ctrun_store_watch_cb cb,
                      void *data, ctrun_store_watch_t **out, ct_errbuf_t *eb)
{
    size_t klen = 0;
    int rc = ctrun__api_key(s, key, &klen, eb);
    if (rc != 0)
        return rc;
    if (cb == NULL)
        return ct_errbuf_set(eb, CT_EPARSE, "watch without a callback");
    ctrun_store_watch_t *w = calloc(1, sizeof *w + klen + 1);
    if (w == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    w->cb = cb;
    w->data = data;
    w->prefix = prefix;
    w->klen = klen;
    memcpy(w->key, key, klen + 1);
    /* Appended at the end: watches fire in the order they were added. */
    ctrun_store_watch_t **pp = &s->watches;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = w;
    if (out != NULL)
        *out = w;
    return 0;
}

void ctrun_store_unwatch(ctrun_store_t *s, ctrun_store_watch_t *w)
{
    if (s == NULL || w == NULL || w->dead)
        return;
    w->dead = true;
    s->watches_dead = true;
    ctrun__sweep_watches(s);
}

void ctrun_store_stats(const ctrun_store_t *s, ctrun_store_stats_t *out)
{
    *out = s->st;
    out->stored_bytes = s->memory;
}

/* ---- test and fuzzing hooks (ctrun_store_internal.h) ------------------------------------ */

ctrun__conn_t *ctrun__test_conn_open(ctrun_store_t *s)
{
    ctrun__conn_t *c = ctrun__conn_new(s);
    if (c == NULL)
        return NULL;
    c->is_virtual = true;
    ctrun__conn_link(s, c);
    return c;
}

int ctrun__test_conn_feed(ctrun__conn_t *c, const void *data, size_t len)
{
    ctrun_store_t *s = c->s;
    if (c->closing || c->doomed)
        return CT_EPEER;
    /* The same two paths as on_read: straight from the shared buffer when nothing is pending,
     * else appended to the connection's own buffer. */
    const uint8_t *p = data;
    while (len > 0 && !c->closing) {
        size_t n = len < CTRUN__READ_CHUNK ? len : CTRUN__READ_CHUNK;
        if (c->paused) {
            if (ctrun__in_reserve(c, c->in_len + n) != 0) {
                ctrun__drop(c, "no room to buffer input");
                break;
            }
            memcpy(c->in + c->in_len, p, n);
            c->in_len += n;
        } else if (c->in_len == 0) {
            memcpy(s->rbuf, p, n);
            ctrun__process(c, s->rbuf, n, true);
        } else {
            if (ctrun__in_reserve(c, c->in_len + n) != 0) {
                ctrun__drop(c, "no room to buffer input");
                break;
            }
            memcpy(c->in + c->in_len, p, n);
            c->in_len += n;
            ctrun__process(c, c->in, c->in_len, false);
        }
        p += n;
        len -= n;
    }
    ctrun__flush_dirty(s);
    return c->closing ? CT_EPEER : 0;
}

void ctrun__test_conn_set_room(ctrun__conn_t *c, size_t nbytes)
{
    c->vroom = nbytes;
}

/* The peer reads: first what the pretend socket holds, then the in-flight write, whose end
 * completes it exactly as a network write completes (ctrun__write_done: the next flush, and
 * resuming a paused connection). Nothing here resumes a connection by itself. */
size_t ctrun__test_conn_output(ctrun__conn_t *c, uint8_t *buf, size_t cap)
{
    size_t got = 0;
    while (got < cap) {
        size_t k = c->vsock_len < cap - got ? c->vsock_len : cap - got;
        if (k > 0) {
            if (buf != NULL)
                memcpy(buf + got, c->vsock, k);
            memmove(c->vsock, c->vsock + k, c->vsock_len - k);
            c->vsock_len -= k;
            got += k;
            continue;
        }
        if (!c->writing)
            break;
        k = c->inflight < cap - got ? c->inflight : cap - got;
        if (buf != NULL && k > 0)
            memcpy(buf + got, c->wbuf + c->woff, k);
        c->woff += k;
        c->inflight -= k;
        got += k;
        if (c->inflight > 0)
            break;
        ctrun__write_done(c, 0);
    }
    return got;
}

bool ctrun__test_conn_closed(const ctrun__conn_t *c)
{
    return c->closing || c->doomed;
}

void ctrun__test_conn_free(ctrun__conn_t *c)
{
    if (c == NULL)
        return;
    ctrun_store_t *s = c->s;
    ctrun__conn_close(c);
    /* Drop it from the dirty list before the memory goes. */
    for (ctrun__conn_t **pp = &s->dirty; *pp != NULL; pp = &(*pp)->dnext) {
        if (*pp == c) {
            *pp = c->dnext;
            break;
        }
    }
    ctrun__conn_free(c);
}

int ctrun__test_check(const ctrun_store_t *s, ct_errbuf_t *eb)
{
    uint64_t keys = 0, queues = 0, regs = 0, waits = 0, entries = 0, mem = 0;
    for (size_t b = 0; b <= s->tab_mask; b++) {
        for (const ctrun__entry_t *e = s->tab[b]; e != NULL; e = e->hnext) {
            entries++;
            mem += ctrun__entry_charge(e->klen);
            if ((e->hash & s->tab_mask) != b)
                return ct_errbuf_set(eb, CT_ESTATE, "entry in the wrong bucket");
            if (!e->has_value && e->qlen == 0 && e->whead == NULL && e->watchers == NULL)
                return ct_errbuf_set(eb, CT_ESTATE, "empty entry \"%.*s\" kept", (int)e->klen,
                                     (const char *)e->key);
            if (e->has_value) {
                keys++;
                mem += e->vlen;
            } else if (e->vlen != 0) {
                return ct_errbuf_set(eb, CT_ESTATE, "value length without a value");
            }
            uint64_t q = 0;
            for (const ctrun__item_t *it = e->qhead; it != NULL; it = it->next) {
                q++;
                mem += sizeof *it + it->len + CTRUN__ENTRY_OVERHEAD;
            }
            if (q != e->qlen)
                return ct_errbuf_set(eb, CT_ESTATE, "queue length %llu, %llu items",
                                     (unsigned long long)e->qlen, (unsigned long long)q);
            queues += q > 0;
            const ctrun__reg_t *prev = NULL;
            for (const ctrun__reg_t *r = e->whead; r != NULL; prev = r, r = r->knext) {
                if (r->entry != e || r->kprev != prev)
                    return ct_errbuf_set(eb, CT_ESTATE, "waiter list of an entry is broken");
                if (r->wait->conn->closing)
                    return ct_errbuf_set(eb, CT_ESTATE, "a closed connection still waits");
            }
            if (e->wtail != prev)
                return ct_errbuf_set(eb, CT_ESTATE, "waiter list tail is wrong");
            for (const ctrun__kwatch_t *k = e->watchers; k != NULL; k = k->enext)
                mem += sizeof *k + CTRUN__ENTRY_OVERHEAD;
        }
    }
    uint64_t buffered = 0, shed = 0;
    for (const ctrun__conn_t *c = s->conns; c != NULL; c = c->next) {
        buffered += c->in_cap;
        shed += c->shed_bytes;
        if (c->in_len > c->in_cap || (c->shed_bytes > 0 && !c->doomed))
            return ct_errbuf_set(eb, CT_ESTATE, "input buffer of a connection is inconsistent");
        for (const ctrun__wait_t *w = c->waits; w != NULL; w = w->next) {
            waits++;
            mem += sizeof *w + CTRUN__ENTRY_OVERHEAD;
            uint64_t n = 0;
            for (const ctrun__reg_t *r = w->regs; r != NULL; r = r->wnext) {
                n++;
                if (r->wait != w || r->entry->whead == NULL)
                    return ct_errbuf_set(eb, CT_ESTATE, "registration list of a wait is broken");
            }
            if (n != w->remaining || n == 0)
                return ct_errbuf_set(eb, CT_ESTATE, "wait counts %llu but has %llu registrations",
                                     (unsigned long long)w->remaining, (unsigned long long)n);
            regs += n;
            mem += n * (sizeof(ctrun__reg_t) + CTRUN__ENTRY_OVERHEAD);
        }
    }
    if (buffered != s->st.buffered_bytes || shed != s->shed_bytes)
        return ct_errbuf_set(eb, CT_ESTATE, "buffered input %llu/%llu, of it shed %llu/%llu",
                             (unsigned long long)buffered, (unsigned long long)s->st.buffered_bytes,
                             (unsigned long long)shed, (unsigned long long)s->shed_bytes);
    if (entries != s->nentries || keys != s->st.keys || queues != s->st.queues ||
        regs != s->st.wait_registrations || waits != s->st.pending_waits || mem != s->memory)
        return ct_errbuf_set(eb, CT_ESTATE,
                             "counters disagree: entries %llu/%llu keys %llu/%llu queues "
                             "%llu/%llu regs %llu/%llu waits %llu/%llu memory %llu/%llu",
                             (unsigned long long)entries, (unsigned long long)s->nentries,
                             (unsigned long long)keys, (unsigned long long)s->st.keys,
                             (unsigned long long)queues, (unsigned long long)s->st.queues,
                             (unsigned long long)regs, (unsigned long long)s->st.wait_registrations,
                             (unsigned long long)waits, (unsigned long long)s->st.pending_waits,
                             (unsigned long long)mem, (unsigned long long)s->memory);
    return 0;
}
