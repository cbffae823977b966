/*
 * ctrun_store_internal.h - what the store server's files share, and hooks for its tests and
 * fuzzers.
 *
 * The server is split by concern: ctrun_store_table.c (the hash table, entries and the value
 * operations), ctrun_store_wait.c (waits and watches), ctrun_store_conn.c (a connection's I/O
 * and backpressure), ctrun_store_listen.c (listening and accepting), ctrun_store_req.c (the
 * parser step and one handler per request), ctrun_store.c (lifecycle and the in-process API)
 * and ctrun_store_hooks.c (the test hooks at the end of this header). Nothing here is part of
 * the store's API (ctrun_store.h).
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
#ifndef CTRUN_STORE_INTERNAL_H
#define CTRUN_STORE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "ct_error.h"
#include "ct_store_auth.h"
#include "ct_store_codec.h"
#include "ctrun_store.h"

typedef struct ctrun_store__conn ctrun_store__conn_t;

#define CTRUN_STORE__READ_CHUNK      (64u * 1024u)
#define CTRUN_STORE__HIGH_WATER      (4u << 20)
#define CTRUN_STORE__LOW_WATER       (1u << 20)
#define CTRUN_STORE__AUTH_TIMEOUT_MS 10000
#define CTRUN_STORE__LOG_PER_SECOND  20
#define CTRUN_STORE__ENTRY_OVERHEAD  64 /* bytes charged per entry, queue item, wait, ... */

typedef struct ctrun_store__entry ctrun_store__entry_t;
typedef struct ctrun_store__wait ctrun_store__wait_t;
typedef struct ctrun_store__reg ctrun_store__reg_t;
typedef struct ctrun_store__kwatch ctrun_store__kwatch_t;
typedef struct ctrun_store__item ctrun_store__item_t;

struct ctrun_store__item {
    ctrun_store__item_t *next;
    size_t len;
    uint8_t data[];
};

/* One (wait, key) pair: the wait is answered when all its registrations are gone. */
struct ctrun_store__reg {
    ctrun_store__reg_t *kprev, *knext; /* in the entry's FIFO of waiters */
    ctrun_store__reg_t *wprev, *wnext; /* in the wait's list */
    ctrun_store__entry_t *entry;
    ctrun_store__wait_t *wait;
    bool barrier; /* released only when its barrier completes, or by another kind of write */
};

struct ctrun_store__wait {
    ctrun_store__wait_t *prev, *next; /* in the connection's list */
    ctrun_store__conn_t *conn;
    ctrun_store__reg_t *regs;
    uint64_t remaining;
};

/* A v1 WATCH_KEY subscription of a connection to an entry. */
struct ctrun_store__kwatch {
    ctrun_store__kwatch_t *eprev, *enext;
    ctrun_store__kwatch_t *cprev, *cnext;
    ctrun_store__entry_t *entry;
    ctrun_store__conn_t *conn;
};

struct ctrun_store__entry {
    ctrun_store__entry_t *hnext;
    uint64_t hash;
    uint8_t *value;
    size_t vlen, vcap;
    bool has_value;
    ctrun_store__item_t *qhead, *qtail;
    uint64_t qlen;
    ctrun_store__reg_t *whead, *wtail;
    ctrun_store__kwatch_t *watchers;
    uint32_t klen;
    uint8_t key[];
};

enum { CTRUN_STORE__AUTH_HELLO, CTRUN_STORE__AUTH_PROOF, CTRUN_STORE__DETECT, CTRUN_STORE__READY };

struct ctrun_store__conn {
    uv_tcp_t tcp; /* first: the handle's address is the connection's */
    ctrun_store_t *s;
    ctrun_store__conn_t *prev, *next; /* all open connections */
    ctrun_store__conn_t *dnext;       /* connections with output to flush */
    bool dirty, closing, is_virtual, paused, writing, oom;
    bool doomed; /* to be closed at the next flush: see ctrun_store__doom */
    bool
        parsing; /* inside ctrun_store__process: its input buffer holds the request being handled */
    size_t shed_bytes; /* doomed for its input buffer (ctrun_store__shed_input): how much it held */
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
    ctrun_store__wait_t *waits;
    ctrun_store__kwatch_t *kwatches;
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
    int spare_fd; /* /dev/null, given up for a moment to refuse connections */
    uv_timer_t
        accept_timer; /* restarts accepting after it had to stop (ctrun_store__accept_pause) */
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
    ctrun_store__entry_t **tab;
    size_t tab_mask, nentries;

    ctrun_store__conn_t *conns;
    ctrun_store__conn_t *dirty;
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
    uint64_t shed_bytes; /* input buffers of connections doomed by ctrun_store__shed_input */

    uint64_t log_window_ms, log_in_window, log_suppressed;
};

/* ---- memory accounting ------------------------------------------------------------------ */

/*
 * The cap holds stored data (keys, values, queued items, waiter bookkeeping) and connections'
 * buffered partial requests together, and charges the connection that holds the memory:
 * - stored data is refused only when it alone would exceed the cap (ctrun_store__charge);
 * - a connection that wants more input buffer than stored data and the other buffers leave
 *   room for is refused and closed (ctrun_store__in_reserve);
 * - when stored data grows into room that buffered input holds, the connections holding the
 *   most buffered input are closed until everything fits again (ctrun_store__shed_input, from the
 *   next flush, once the request being handled has released its own input).
 * So one client's half-sent large requests never get another client's small write refused.
 */

/* Buffered input that still counts: not that of connections already doomed for it. */
static inline uint64_t ctrun_store__buffered(const ctrun_store_t *s)
{
    return s->st.buffered_bytes - s->shed_bytes;
}

static inline bool ctrun_store__charge(ctrun_store_t *s, uint64_t n)
{
    if (s->memory + n > s->max_bytes)
        return false;
    s->memory += n;
    return true;
}

static inline void ctrun_store__uncharge(ctrun_store_t *s, uint64_t n)
{
    s->memory -= n;
}

/* ---- ctrun_store_table.c: entries and the operations on values -------------------------- */

/* The entry of key, or NULL; *hash_out (may be NULL) receives the key's hash. */
ctrun_store__entry_t *ctrun_store__lookup(ctrun_store_t *s, const uint8_t *key, size_t klen,
                                          uint64_t *hash_out);
/* The entry of key, created empty if needed; NULL when the memory cap forbids it. */
ctrun_store__entry_t *ctrun_store__obtain(ctrun_store_t *s, const uint8_t *key, size_t klen);
/* Frees an entry nobody needs any more: no value, no queue, no waiter, no watcher. */
void ctrun_store__release(ctrun_store_t *s, ctrun_store__entry_t *e);
/* What an entry of a klen-byte key is charged. */
size_t ctrun_store__entry_charge(size_t klen);

/* A key counts as existing (for WAIT and CHECK) with a value or a queue. */
static inline bool ctrun_store__exists(const ctrun_store__entry_t *e)
{
    return e != NULL && (e->has_value || e->qlen > 0);
}

/* Whom a write wakes among the entry's waiters (ctrun_store__wake). */
enum { CTRUN_STORE__WAKE_ALL, CTRUN_STORE__WAKE_NOT_BARRIER, CTRUN_STORE__WAKE_ONE };

/* Who asked for an operation: the watch events and callbacks say so. */
typedef struct ctrun_store__ctx {
    ctrun_store__conn_t *conn; /* NULL: in-process */
    ct_store_op_t op;
} ctrun_store__ctx_t;

int ctrun_store__write(ctrun_store_t *s, const ctrun_store__ctx_t *ctx, const uint8_t *key,
                       size_t klen, const uint8_t *val, size_t vlen, bool append, int wake_mode,
                       ct_errbuf_t *eb);
bool ctrun_store__delete(ctrun_store_t *s, const ctrun_store__ctx_t *ctx, const uint8_t *key,
                         size_t klen);
int ctrun_store__parse_counter(const uint8_t *p, size_t n, int64_t *out);
int ctrun_store__add(ctrun_store_t *s, const ctrun_store__ctx_t *ctx, const uint8_t *key,
                     size_t klen, int64_t delta, int wake_mode, int64_t *result, ct_errbuf_t *eb);
int ctrun_store__compare_set(ctrun_store_t *s, const ctrun_store__ctx_t *ctx, const uint8_t *key,
                             size_t klen, ct_store_bytes_t expected, ct_store_bytes_t desired,
                             ct_store_bytes_t *reply, ct_errbuf_t *eb);
int ctrun_store__wipe(ctrun_store_t *s, const char *const *prefixes, size_t n, bool except,
                      size_t *ndeleted);

/* ---- ctrun_store_wait.c: waits and watches ---------------------------------------------- */

/* A new wait of connection c, or NULL when the memory cap forbids it. */
ctrun_store__wait_t *ctrun_store__wait_new(ctrun_store__conn_t *c);
/* Registers wait w on entry e; false when the memory cap forbids it. */
bool ctrun_store__reg_add(ctrun_store_t *s, ctrun_store__wait_t *w, ctrun_store__entry_t *e,
                          bool barrier);
/* Entry e was written: fires its registrations as wake_mode says. */
void ctrun_store__wake(ctrun_store_t *s, ctrun_store__entry_t *e, int mode);
/* Drops every wait of a connection (CANCEL_WAIT, or the connection closing). */
void ctrun_store__drop_waits(ctrun_store__conn_t *c);
/* Ends one v1 WATCH_KEY subscription (the connection is closing). */
void ctrun_store__kwatch_free(ctrun_store_t *s, ctrun_store__kwatch_t *k);
/* v1 watch events for the connections that sent WATCH_KEY on this entry. */
void ctrun_store__push_kwatch(ctrun_store_t *s, ctrun_store__entry_t *e, ct_store_watch_kind_t kind,
                              const uint8_t *old, size_t old_len);
/* In-process watch callbacks for a change of key, on copies. */
void ctrun_store__notify(ctrun_store_t *s, const uint8_t *key, size_t klen,
                         ct_store_watch_kind_t kind, const uint8_t *value, size_t vlen,
                         ct_store_op_t op, bool in_process);
/* Frees the in-process watches removed while callbacks ran. */
void ctrun_store__sweep_watches(ctrun_store_t *s);

/* ---- ctrun_store_conn.c: connections ---------------------------------------------------- */

/* A connection message, at most CTRUN_STORE__LOG_PER_SECOND a second. */
__attribute__((format(printf, 2, 3))) void ctrun_store__log_conn(ctrun_store_t *s, const char *fmt,
                                                                 ...);
/* Logs why, counts the connection as dropped and closes it (a protocol or limit violation). */
__attribute__((format(printf, 2, 3))) void ctrun_store__drop(ctrun_store__conn_t *c,
                                                             const char *fmt, ...);
ctrun_store__conn_t *ctrun_store__conn_new(ctrun_store_t *s);
void ctrun_store__conn_link(ctrun_store_t *s, ctrun_store__conn_t *c);
/* Takes an accepted socket on as a connection. */
void ctrun_store__accepted(ctrun_store_t *s, int fd);
void ctrun_store__conn_close(ctrun_store__conn_t *c);
void ctrun_store__conn_free(ctrun_store__conn_t *c);
/* Room for n more output bytes, or NULL (the connection is then doomed). */
uint8_t *ctrun_store__out(ctrun_store__conn_t *c, size_t n, bool pushed);
void ctrun_store__reply_u8(ctrun_store__conn_t *c, uint8_t v, bool pushed);
void ctrun_store__reply_u64(ctrun_store__conn_t *c, uint64_t v);
void ctrun_store__reply_bytes(ctrun_store__conn_t *c, const void *data, size_t len);
/* Writes out every connection that received output (and closes the doomed ones). */
void ctrun_store__flush_dirty(ctrun_store_t *s);
/* Makes the connection's input buffer at least want bytes: 0, CT_ELIMIT or -ENOMEM. */
int ctrun_store__in_reserve(ctrun_store__conn_t *c, size_t want);
/* Parses and handles every complete message in data; keeps the rest in the input buffer. */
void ctrun_store__process(ctrun_store__conn_t *c, const uint8_t *data, size_t len, bool shared);
/* The in-flight write has completed (status 0) or failed. */
void ctrun_store__write_done(ctrun_store__conn_t *c, int status);

/* ---- ctrun_store_listen.c: listening and accepting -------------------------------------- */

int ctrun_store__listen(ctrun_store_t *s, const char *host, int port, ct_errbuf_t *eb);
/* Closes connections that have not authenticated in time (only when a token is set). */
void ctrun_store__on_auth_timer(uv_timer_t *t);

/* ---- ctrun_store_req.c: requests -------------------------------------------------------- */

/* One message from p: > 0 consumed, 0 needs more (c->need set), < 0 the connection closed. */
ssize_t ctrun_store__step(ctrun_store__conn_t *c, const uint8_t *p, size_t n);

/* ---- ctrun_store.c: lifecycle ----------------------------------------------------------- */

/* Frees the store once it is closing and its last handle has closed. */
void ctrun_store__maybe_finish(ctrun_store_t *s);

/* ---- test and fuzzing hooks (ctrun_store_hooks.c) --------------------------------------- */

/*
 * A "test connection" has no socket: bytes are fed to it directly and its replies are read
 * back from its output buffer, through exactly the parsing and request handling that network
 * connections use. This is what lets a fuzzer drive the server's request handling at
 * millions of inputs a second, and lets tests check the server's internal invariants.
 * Test connections must be freed before the store is closed.
 */
ctrun_store__conn_t *ctrun_store__test_conn_open(ctrun_store_t *s);
/* Processes bytes as if they had been read from the socket. Returns 0, or CT_EPEER once the
 * server has closed the connection (for a violation). */
int ctrun_store__test_conn_feed(ctrun_store__conn_t *c, const void *data, size_t len);
/* Reads up to cap bytes of replies into buf (NULL discards), as the peer of a socket would;
 * returns how many. Reading completes the connection's in-flight write once all of it is read,
 * through the same code as a network write's completion, so what follows (the next write,
 * resuming a connection paused for its pending output) is the server's own doing. */
size_t ctrun_store__test_conn_output(ctrun_store__conn_t *c, uint8_t *buf, size_t cap);
/* How many unread bytes the connection's pretend socket accepts at once, as a kernel socket
 * buffer does (default 0: every reply waits, in flight, until it is read). A large room makes
 * every flush complete at once, without a write completion, as uv_try_write does on a fast
 * local connection. */
void ctrun_store__test_conn_set_room(ctrun_store__conn_t *c, size_t nbytes);
bool ctrun_store__test_conn_closed(const ctrun_store__conn_t *c);
/* Closes (if needed) and frees a test connection. */
void ctrun_store__test_conn_free(ctrun_store__conn_t *c);
/* Recounts every index and counter from scratch; CT_ESTATE with the first disagreement. */
int ctrun_store__test_check(const ctrun_store_t *s, ct_errbuf_t *eb);

#endif /* CTRUN_STORE_INTERNAL_H */
