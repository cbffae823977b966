/*
 * ctrun_store.h - the TCPStore-compatible rendezvous store server, on a caller's libuv loop.
 *
 * Owns: listening (dual-stack [::] with a fallback to 0.0.0.0, or a given host; backlog =
 * somaxconn; TCP_NODELAY; out of file descriptors, it closes new connections at once and logs
 * one line for the whole shortage, then serves again as descriptors free up), the connections
 * (per-connection dialect detection, incremental parsing, optional authentication, limits,
 * backpressure), the key/value map, queues, waiters, and the in-process API the launcher's agent
 * uses: read and write keys, wipe keyspaces between restart attempts, and watch keys.
 *
 * Not here: the wire format (ct_store_codec.h), the client (ct_store_client.h), command-line
 * handling (ctrun_store_main.c), rendezvous logic (the agent's, built on this API).
 *
 * Semantics are PyTorch's (docs/store-protocol.md §2), with these chosen quirks (its §3.3
 * compares them with PyTorch's two servers):
 * - GET and MULTI_GET of a missing key answer an empty value (libuv server), never close.
 * - Every write wakes waiters of its key: SET, ADD, APPEND, MULTI_SET, and a COMPARE_SET that
 *   creates or replaces the value (PyTorch 1.13 does not wake on compare_set at all; its libuv
 *   server wakes even when nothing changed, which wakes waiters of a still-missing key). A
 *   COMPARE_SET that changes nothing wakes nobody.
 * - QUEUE_PUSH wakes one waiter of its key and removes it from the waiters (the libuv server
 *   forgets to remove it, so its count can later underflow).
 * - Several WAITs pipelined on one connection are tracked separately and each is answered when
 *   its own keys exist (PyTorch keeps one counter per connection and overwrites it).
 * - BARRIER below world_size does not release earlier BARRIER callers (as PyTorch), but it does
 *   wake plain WAITs of the key, since the key now exists.
 * - ADD on a value that is not a decimal number (strtoll rules: leading blanks, optional sign,
 *   trailing junk ignored), or out of int64 range, closes the connection (as PyTorch); the sum
 *   wraps around like PyTorch's does.
 * - A violating connection (unknown request type, VALIDATE not first or repeated, a length or
 *   count over the limits, a write over the memory cap, an ADD as above) is closed with one log
 *   line; nothing is ever sent back to explain, as in PyTorch.
 * Memory: the cap `max_bytes` bounds stored keys, values and queued items plus buffered
 * unparsed input, and is charged to the connection that holds the memory: a write is refused
 * only when stored data alone would exceed the cap; a connection whose partial request needs
 * more input buffer than the cap leaves is closed; and when stored data grows into room that
 * partial requests hold, the connections holding the most are closed (one log line each) until
 * it fits. A connection that stops reading its replies is not read from until they drain
 * (4 MiB high water), and one that lets more than max_message_len + 4 MiB of pushed bytes
 * (wake-ups, v1 watch events) pile up is closed.
 *
 * Lifecycle (libuv style): ctrun_store_create() starts listening at once; ctrun_store_close()
 * closes every handle and frees the store, then calls its callback from the loop. The process
 * must not die of SIGPIPE when a peer vanishes mid-write: create() sets SIGPIPE to SIG_IGN if
 * it is still at its default action (and logs that it did).
 *
 * Threads: everything runs on the loop's thread; none of these functions may be called from
 * another thread.
 */
#ifndef CTRUN_STORE_H
#define CTRUN_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "ct_error.h"
#include "ct_store_codec.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ctrun_store ctrun_store_t;
typedef struct ctrun_store_watch ctrun_store_watch_t;

#define CTRUN_STORE_DEFAULT_MAX_CONNECTIONS 65536
#define CTRUN_STORE_DEFAULT_MAX_BYTES       (1ull << 30) /* 1 GiB */

typedef struct ctrun_store_opts {
    /* Address to listen on: NULL or "" = every address (dual-stack [::], else 0.0.0.0); or a
     * name / IPv4 / IPv6 literal (without brackets). */
    const char *host;
    int port;                 /* 0 = let the kernel choose; see ctrun_store_port() */
    uint64_t max_connections; /* 0 = CTRUN_STORE_DEFAULT_MAX_CONNECTIONS */
    uint64_t max_bytes;       /* 0 = CTRUN_STORE_DEFAULT_MAX_BYTES */
    /* Authentication token (NUL-terminated, copied); NULL = none. When set, every connection
     * must complete the exchange of ct_store_codec.h within 10 s before anything else; stock
     * PyTorch clients then cannot connect. */
    const char *token;
    const ct_store_limits_t *limits; /* NULL = ct_store_default_limits; copied */
} ctrun_store_opts_t;

/* Creates the store and starts listening on loop. Errors: the bind or listen failure
 * (-EADDRINUSE, ...), CT_EPARSE for a bad host, with detail in eb. On failure *out is NULL and
 * there is nothing to close; handles that were already open close (and their memory goes) the
 * next time the loop runs. */
int ctrun_store_create(uv_loop_t *loop, const ctrun_store_opts_t *opts, ctrun_store_t **out,
                       ct_errbuf_t *eb);

/* Stops listening, closes every connection (pending waiters see their connection close),
 * frees everything, and then calls cb(data) from the loop (cb may be NULL). After this call
 * the store must not be used; calling it again before cb has run does nothing. */
void ctrun_store_close(ctrun_store_t *s, void (*cb)(void *data), void *data);

/* Ends the store without cutting off a client in the middle of a request: it goes on serving
 * (and accepting) until no client connection is open or linger_ms has passed, whichever comes
 * first, and then closes as ctrun_store_close. For the end of a job, when the last write (the
 * "closed" plan) has just woken clients that still have to read it. The store must not be used
 * after this call either (beyond ctrun_store_close, which ends the lingering at once); a second
 * call does nothing. */
void ctrun_store_close_gently(ctrun_store_t *s, uint64_t linger_ms, void (*cb)(void *data),
                              void *data);

/* The port it listens on (the kernel's choice when created with port 0). */
int ctrun_store_port(const ctrun_store_t *s);

/* "[::]:29500" or "0.0.0.0:29500" or "127.0.0.1:29500": where it listens, for messages. */
const char *ctrun_store_address(const ctrun_store_t *s);

/* ---- in-process access: same semantics, waking and watch events as network requests ---- */
/* Keys are NUL-terminated strings; values are byte ranges. Writes are subject to the same key
 * and value limits and memory cap (CT_ELIMIT). */

int ctrun_store_set(ctrun_store_t *s, const char *key, const void *value, size_t len,
                    ct_errbuf_t *eb);
/* -ENOENT when the key has no value. The view stays valid until the store next changes. */
int ctrun_store_get(ctrun_store_t *s, const char *key, ct_store_bytes_t *value);
/* CT_EPARSE when the current value is not a number (a network ADD would close the client). */
int ctrun_store_add(ctrun_store_t *s, const char *key, int64_t delta, int64_t *result,
                    ct_errbuf_t *eb);
/* PyTorch's compare_set; *current as in the COMPARE_SET reply (valid until the next change). */
int ctrun_store_compare_set(ctrun_store_t *s, const char *key, const void *expected,
                            size_t expected_len, const void *desired, size_t desired_len,
                            ct_store_bytes_t *current, ct_errbuf_t *eb);
/* Removes the value (waiters keep waiting). *deleted may be NULL. */
int ctrun_store_delete(ctrun_store_t *s, const char *key, bool *deleted);
int64_t ctrun_store_num_keys(const ctrun_store_t *s);

/* Calls fn for every key that has a value and starts with prefix (NULL or "" = all), in no
 * particular order; returns how many. fn must not change the store (collect, then act). */
size_t ctrun_store_foreach(ctrun_store_t *s, const char *prefix,
                           void (*fn)(ct_store_bytes_t key, ct_store_bytes_t value, void *data),
                           void *data);

/* Deletes every key (and queue) whose name starts with prefix. *ndeleted may be NULL. Waiters
 * are not disturbed, as with DELETE. */
int ctrun_store_wipe_prefix(ctrun_store_t *s, const char *prefix, size_t *ndeleted);

/* Deletes every key (and queue) that starts with none of the nkeep prefixes: the keyspace of a
 * finished restart attempt, keeping the launcher's own keys (e.g. keep = {"/ctrun/"}). PyTorch
 * >= 2.2 workers expect a fresh store on each attempt. */
int ctrun_store_wipe_except(ctrun_store_t *s, const char *const *keep, size_t nkeep,
                            size_t *ndeleted);

/* ---- watches ----------------------------------------------------------------------------- */

typedef struct ctrun_store_event {
    ct_store_watch_kind_t kind; /* CREATED, UPDATED or DELETED */
    ct_store_bytes_t key;
    ct_store_bytes_t value; /* the new value; empty for DELETED */
    ct_store_op_t op;       /* the request that caused it (DELETE_KEY for wipes) */
    bool in_process;        /* caused by this API rather than a network client */
} ctrun_store_event_t;

/* Called after a change has been applied and its waiters woken. The event's views are valid
 * during the call until the callback itself changes the store. A callback may use every
 * function of this header, including unwatch (of any watch) and close. */
typedef void (*ctrun_store_watch_cb)(ctrun_store_t *s, const ctrun_store_event_t *ev, void *data);

/* Watches one key (prefix = false) or every key starting with `key` (prefix = true). Changes of
 * queues are not reported. The handle is freed by ctrun_store_unwatch or when the store closes.
 * Watches are checked in a list on every write: meant for a handful of launcher watches, not
 * thousands. */
int ctrun_store_watch(ctrun_store_t *s, const char *key, bool prefix, ctrun_store_watch_cb cb,
                      void *data, ctrun_store_watch_t **out, ct_errbuf_t *eb);
void ctrun_store_unwatch(ctrun_store_t *s, ctrun_store_watch_t *w);

/* ---- introspection -------------------------------------------------------------------- */

typedef struct ctrun_store_stats {
    uint64_t connections;        /* open now */
    uint64_t keys;               /* what GETNUMKEYS answers */
    uint64_t queues;             /* non-empty queues */
    uint64_t stored_bytes;       /* keys + values + queued items */
    uint64_t buffered_bytes;     /* input buffers of connections */
    uint64_t pending_waits;      /* WAIT/BARRIER requests not yet answered */
    uint64_t wait_registrations; /* (wait, key) pairs in the waiter index */
    uint64_t accepted;           /* connections accepted since creation */
    uint64_t refused;            /* closed at accept: over max_connections, or no descriptor */
    uint64_t dropped;            /* closed for a protocol, limit or authentication violation */
    uint64_t requests;           /* requests handled */
} ctrun_store_stats_t;

void ctrun_store_stats(const ctrun_store_t *s, ctrun_store_stats_t *out);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_STORE_H */
