/*
 * ctrun_kv.h - the agent's asynchronous access to the rendezvous store: the same few requests
 * whether the store lives in this process (the agent hosts it) or on another node.
 *
 * Every request completes later, on the loop's thread, through the one callback given at open,
 * with the caller's 64-bit tag; nothing ever completes inside the submitting call, so the
 * agent's transition function is never re-entered. Two backends:
 *
 * - local: requests run at once against a ctrun_store_t on the same loop; a GET of a missing key
 *   registers a store watch and completes when the key is written. Completions are queued and
 *   delivered from a uv_async callback on the next loop iteration.
 * - remote: two helper threads, each with its own blocking ct_store_client (ct_store_client.h),
 *   so that network waits never block the loop. The "ops" lane runs SET, ADD, COMPARE_SET and
 *   APPEND in submission order; the "waits" lane runs GETs, which wait for their key first and
 *   may block for as long as the job runs (an attempt's outcome). Results go back through a
 *   uv_async handle. Closing writes an eventfd that both clients poll (the client's cancel_fd),
 *   so a thread blocked in a WAIT returns at once and is joined; no thread outlives the kv.
 *   Order is kept within a lane, not across lanes.
 *
 * Deliberately not here: key names and what they mean (ctrun_rdzv.h), retries (a failed request
 * is reported; the agent decides), and wiping key spaces (only the hosting agent can, through
 * ctrun_store.h directly).
 */
#ifndef CTRUN_KV_H
#define CTRUN_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "ct_error.h"
#include "ctrun_store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ctrun_kv ctrun_kv_t;

typedef enum ctrun_kv_op {
    CTRUN_KV_SET = 0, /* key = value */
    CTRUN_KV_ADD,     /* key += delta; reply.num is the new value */
    CTRUN_KV_CAS,     /* compare_set(key, expected = value, desired); reply.value = current */
    CTRUN_KV_GET,     /* waits until key exists; reply.value */
    CTRUN_KV_APPEND,  /* key += value (bytes), created when missing */
} ctrun_kv_op_t;

typedef struct ctrun_kv_reply {
    uint64_t tag;
    ctrun_kv_op_t op;
    const char *key;
    int rc;              /* 0, or a negative errno / CT_E* code */
    const char *error;   /* what failed, when rc != 0 ("" otherwise) */
    int64_t num;         /* ADD */
    const uint8_t *data; /* GET, CAS; NUL-terminated copy, valid during the callback */
    size_t len;
} ctrun_kv_reply_t;

typedef void (*ctrun_kv_cb)(void *data, const ctrun_kv_reply_t *reply);

/* A kv over an in-process store on loop. The store must outlive the kv (close the kv first). */
int ctrun_kv_open_local(uv_loop_t *loop, ctrun_store_t *store, ctrun_kv_cb cb, void *data,
                        ctrun_kv_t **out, ct_errbuf_t *eb);

typedef struct ctrun_kv_remote_opts {
    const char *host; /* without IPv6 brackets */
    int port;
    int64_t connect_timeout_ms; /* each lane's first connection (retried with backoff) */
    int64_t op_timeout_ms;      /* deadline of SET/ADD/CAS/APPEND, and of the store handshake
                                 * of each connection; GETs wait without one */
    int64_t backoff_max_ms;     /* longest pause between connection attempts */
    const char *token;          /* store authentication token, or NULL */
} ctrun_kv_remote_opts_t;

/* A kv over a store on the network. Returns at once: the lanes connect on their first request
 * (a request queued while its lane connects waits for the connection). Errors: thread or
 * eventfd creation (-errno). */
int ctrun_kv_open_remote(uv_loop_t *loop, const ctrun_kv_remote_opts_t *opts, ctrun_kv_cb cb,
                         void *data, ctrun_kv_t **out, ct_errbuf_t *eb);

/* Submit one request each (key NUL-terminated; values copied). Return 0, -ENOMEM, or
 * CT_ESTATE after close. */
int ctrun_kv_set(ctrun_kv_t *kv, const char *key, const char *value, uint64_t tag);
int ctrun_kv_add(ctrun_kv_t *kv, const char *key, int64_t delta, uint64_t tag);
int ctrun_kv_cas(ctrun_kv_t *kv, const char *key, const char *expected, const char *desired,
                 uint64_t tag);
int ctrun_kv_get(ctrun_kv_t *kv, const char *key, uint64_t tag);
int ctrun_kv_append(ctrun_kv_t *kv, const char *key, const char *value, uint64_t tag);

/* Remote kv only: true while one of its connections has reached the store's address, which
 * accepted it, and is still waiting for the store handshake to be answered; *since_ms (may be
 * NULL) is when that wait began (ct_time_ms()). For saying what a rendezvous that times out
 * was waiting for: an endpoint that accepts connections but never answers is not a store. */
bool ctrun_kv_unanswered(const ctrun_kv_t *kv, int64_t *since_ms);

/* Drops every pending request without calling back, stops and joins the helper threads,
 * closes the handles and frees the kv once they are closed (from the loop). NULL is fine. */
void ctrun_kv_close(ctrun_kv_t *kv);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_KV_H */
