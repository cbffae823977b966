/*
 * ct_store_client.h - a blocking TCPStore client for ctrun's agents and native workers.
 *
 * Owns: connecting (name resolution preferring IPv6 with an IPv4 fallback, exponential backoff
 * with jitter as PyTorch does: 500 ms, x1.5, +-50 %, at most 60 s between tries), the optional
 * authentication, the v2 handshake (VALIDATE then PING), and one function per store request,
 * each bounded by a deadline. Plain sockets and poll(2); no libuv, no threads.
 *
 * Not here: key prefixes (PyTorch's TCPStore prepends "/" to user keys; callers of this client
 * pass raw keys, e.g. "/k" to meet a PyTorch get('k')), retries of failed requests, and any
 * shared use: a client belongs to one thread at a time (give each thread its own).
 *
 * Behaviour worth knowing:
 * - Every request honours a deadline (the client's timeout, or an explicit one for WAIT-like
 *   requests): nothing blocks past it, unlike PyTorch, which reads most replies without one.
 * - get() and multi_get() WAIT for their keys first and then read them, as PyTorch does, so
 *   they block until the keys exist or the timeout passes (-ETIMEDOUT).
 * - A WAIT that times out in v2 sends CANCEL_WAIT and reads the reply exactly as PyTorch does
 *   (docs/store-protocol.md §2.4), bounded by cancel_grace_ms; the connection stays usable. In
 *   v1 there is no cancel, and a late STOP_WAITING would desynchronise the stream (the 1.13
 *   bug), so the client drops the connection instead.
 * - After any failure that leaves the stream in an unknown state (a timeout mid-reply, the
 *   server closing, a malformed reply) the socket is closed and the next request reconnects
 *   first, within its own deadline. Errors are returned, never retried behind the caller.
 * - Replies that carry bytes (get, compare_set, multi_get, queue_pop, list_keys) are returned
 *   as views into the client's receive buffer, valid until the next call on the same client.
 *
 * - Connecting says what is at the other end when it is not a store: a peer that answers the
 *   handshake with bytes no store sends is "HOST:PORT is not a ctrun/PyTorch store (it
 *   answered like an HTTP server: ...)" (CT_EPROTOCOL), and one that accepts the connection
 *   but never answers the handshake is "no answer from HOST:PORT in N s" (-ETIMEDOUT) once the
 *   handshake deadline passes. Neither is retried.
 *
 * Errors: -ETIMEDOUT (deadline), -ECANCELED (the cancel fd became readable), -ECONNREFUSED &
 * co. (connect), CT_EPEER (the server closed the connection), CT_EPROTOCOL (a reply that does
 * not parse, or a ping mismatch), CT_EAUTH (authentication), -ENOTSUP (a v2-only request on a
 * v1 client), -ENODATA (queue_pop on an empty queue without blocking), CT_ELIMIT (a request
 * over the limits), with detail in eb.
 */
#ifndef CT_STORE_CLIENT_H
#define CT_STORE_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ct_addr.h"
#include "ct_error.h"
#include "ct_store_codec.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CT_STORE_DEFAULT_TIMEOUT_MS 300000 /* PyTorch's Store::kDefaultTimeout */

/* How far a client's connecting has got (ct_store_client_progress_t.phase). */
typedef enum ct_store_client_phase {
    CT_STORE_PHASE_IDLE = 0,   /* not connecting */
    CT_STORE_PHASE_CONNECTING, /* resolving, connecting, or pausing between attempts */
    CT_STORE_PHASE_HANDSHAKE,  /* connected; waiting for the server to answer the handshake */
    CT_STORE_PHASE_READY,      /* connected and answered */
} ct_store_client_phase_t;

/* Written by the connecting thread with __atomic_store_n, for another thread to read with
 * __atomic_load_n: what a connect that takes long is waiting for. */
typedef struct ct_store_client_progress {
    int phase;        /* ct_store_client_phase_t */
    int64_t since_ms; /* ct_time_ms() when the phase began */
} ct_store_client_progress_t;

typedef struct ct_store_client_opts {
    ct_store_dialect_t dialect; /* 0: CT_STORE_V2 */
    /* Default deadline of every request, and of connecting: 0 = CT_STORE_DEFAULT_TIMEOUT_MS,
     * negative = none. */
    int64_t timeout_ms;
    /* Deadline of the first connection (0 = timeout_ms). */
    int64_t connect_timeout_ms;
    /* How long a server that accepted the connection may take to answer the handshake before
     * the connect fails with "no answer" (0 = until the connect deadline). */
    int64_t handshake_timeout_ms;
    /* After a v2 WAIT timed out and CANCEL_WAIT was sent, how long to wait for its reply
     * (PyTorch waits forever; 0 = 30 s). */
    int64_t cancel_grace_ms;
    /* Authentication token; NULL = CTRUN_STORE_TOKEN when set (unless no_env_token). */
    const char *token;
    bool no_env_token;
    /* v2: skip the PING after VALIDATE (PyTorch 2.2-2.4 servers do not know PING). */
    bool no_ping;
    /* Limits applied to replies; NULL = ct_store_default_limits. Copied. */
    const ct_store_limits_t *limits;
    /* Longest pause between connection attempts (0 = 60 s, PyTorch's cap). A launcher waiting
     * for a peer that starts late wants a short cap, so it connects soon after the peer is up. */
    int64_t backoff_max_ms;
    /* When > 0: a file descriptor the client polls beside its socket; once it is readable,
     * every blocking call (connecting, backoff pauses, sends, replies, waits) returns
     * -ECANCELED and drops the connection. It lets another thread stop a client blocked in a
     * WAIT (e.g. an eventfd written once at shutdown). 0 = none (fd 0 is never one). */
    int cancel_fd;
    /* When not NULL: where the client records its connecting progress (it must outlive the
     * client). */
    ct_store_client_progress_t *progress;
} ct_store_client_opts_t;

typedef struct ct_store_client {
    int fd; /* -1 while disconnected */
    bool initialized;
    ct_store_dialect_t dialect;
    char host[CT_HOST_MAX];
    int port;
    int64_t timeout_ms, cancel_grace_ms;
    bool no_ping;
    int cancel_fd; /* -1: none */
    int64_t backoff_max_ms, handshake_timeout_ms;
    ct_store_client_progress_t *progress;
    char *token; /* owned copy, or NULL */
    size_t token_len;
    ct_store_limits_t limits;
    uint8_t *rbuf; /* received bytes: [rpos, rlen) not yet consumed */
    size_t rpos, rlen, rcap;
    uint8_t *wbuf; /* request being sent */
    size_t wcap;
    uint64_t rng; /* jitter for the backoff */
    uint32_t ping_nonce;
} ct_store_client_t;

/* Connects to host:port (host: a name, an IPv4 or an IPv6 literal without brackets), retrying
 * refused, reset and unreachable connections with backoff until the connect deadline, then
 * authenticates (when a token is set) and performs the dialect's handshake. c may be
 * uninitialised; on failure it is left closed (ct_store_client_close is still safe). */
int ct_store_client_connect(ct_store_client_t *c, const char *host, int port,
                            const ct_store_client_opts_t *opts, ct_errbuf_t *eb);

/* Closes the socket and frees the buffers. Safe to call twice, and on a zeroed struct. */
void ct_store_client_close(ct_store_client_t *c);

/* Changes the default deadline of later requests (negative = none), like set_timeout(). */
void ct_store_client_set_timeout(ct_store_client_t *c, int64_t timeout_ms);

/* True while a socket is open (it reopens on the next request after a failure). */
bool ct_store_client_connected(const ct_store_client_t *c);

/* ---- requests (keys are NUL-terminated, values are byte ranges) ------------------------ */

int ct_store_set(ct_store_client_t *c, const char *key, const void *value, size_t len,
                 ct_errbuf_t *eb);
/* WAIT [key] (with the client's timeout), then GET. */
int ct_store_get(ct_store_client_t *c, const char *key, ct_store_bytes_t *value, ct_errbuf_t *eb);
int ct_store_add(ct_store_client_t *c, const char *key, int64_t delta, int64_t *result,
                 ct_errbuf_t *eb);
/* *current receives the value after the request (desired when swapped, else the current one,
 * or `expected` echoed for a missing key with non-empty expected; §2.2). */
int ct_store_compare_set(ct_store_client_t *c, const char *key, const void *expected,
                         size_t expected_len, const void *desired, size_t desired_len,
                         ct_store_bytes_t *current, ct_errbuf_t *eb);
int ct_store_check(ct_store_client_t *c, const char *const *keys, size_t n, bool *ready,
                   ct_errbuf_t *eb);
/* Blocks until every key exists; timeout_ms < 0 uses the client's timeout. */
int ct_store_wait(ct_store_client_t *c, const char *const *keys, size_t n, int64_t timeout_ms,
                  ct_errbuf_t *eb);
int ct_store_num_keys(ct_store_client_t *c, int64_t *n, ct_errbuf_t *eb);
int ct_store_delete(ct_store_client_t *c, const char *key, bool *deleted, ct_errbuf_t *eb);

/* v2 only. */
int ct_store_append(ct_store_client_t *c, const char *key, const void *value, size_t len,
                    ct_errbuf_t *eb);
/* WAIT for all keys, then MULTI_GET; values[i] receives the i-th value. */
int ct_store_multi_get(ct_store_client_t *c, const char *const *keys, size_t n,
                       ct_store_bytes_t *values, ct_errbuf_t *eb);
int ct_store_multi_set(ct_store_client_t *c, const char *const *keys,
                       const ct_store_bytes_t *values, size_t n, ct_errbuf_t *eb);
int ct_store_ping(ct_store_client_t *c, ct_errbuf_t *eb);
int ct_store_queue_push(ct_store_client_t *c, const char *key, const void *value, size_t len,
                        ct_errbuf_t *eb);
/* block: WAIT for the queue first (client timeout). Empty queue: -ENODATA. */
int ct_store_queue_pop(ct_store_client_t *c, const char *key, bool block, ct_store_bytes_t *value,
                       ct_errbuf_t *eb);
int ct_store_queue_len(ct_store_client_t *c, const char *key, int64_t *n, ct_errbuf_t *eb);
/* Every raw key in the store (PyTorch's list_keys() strips a leading "/"; this does not). */
int ct_store_list_keys(ct_store_client_t *c, ct_store_list_t *keys, ct_errbuf_t *eb);
/* Counts this caller in at key and returns once world_size callers have; timeout as wait. */
int ct_store_barrier(ct_store_client_t *c, const char *key, int64_t world_size, int64_t timeout_ms,
                     ct_errbuf_t *eb);

#ifdef __cplusplus
}
#endif

#endif /* CT_STORE_CLIENT_H */
