/*
 * ctrun_etcd.h - an asynchronous etcd v3 client on the agent's libuv loop: requests to etcd's
 * JSON gateway (HTTP/1.1 POSTs under /v3/, keys and values base64-encoded as the gateway wants)
 * through libcurl's multi-socket interface, whose sockets and timer are libuv handles, so the
 * loop's thread does everything and no helper thread exists.
 *
 * Requests: put, range, delete (one key or a prefix), transactions (compares on version,
 * create_revision, mod_revision or value, then puts, ranges and deletes), lease grant,
 * keepalive and revoke, and watches (a streamed response: one JSON message per line).
 * Keys and values are bytes with a length (NUL and any other byte allowed).
 *
 * Every request completes later, on the loop's thread, through its callback, exactly once; never
 * inside the submitting call, and not at all after ctrun_etcd_destroy. A submit that returns an
 * error never calls back.
 *
 * Endpoints and failover: the client holds a list of members ("host:port,host:port,..."). A
 * request goes to the member that answered last; when that member cannot be reached, does not
 * answer within attempt_timeout_ms, or answers "unavailable" (HTTP 503 / gRPC code 14: no
 * leader, member stopping), the request goes to the next member, round after round with a
 * short pause between rounds, until request_timeout_ms after submission; then it fails with one
 * line naming each member and what went wrong there. A mutating request that was sent to a
 * member which then did not answer may have been applied there: its result says so
 * (`ambiguous`), and a caller comparing revisions reads back rather than trusting a failed
 * compare. Errors etcd itself reports (a failed precondition, a lease not found, invalid
 * arguments) are final, not retried.
 *
 * Watches fail over the same way until etcd confirms the watch ("created"); after that, the end
 * of the stream (member killed, connection lost) is reported once through the watch's callback
 * with rc != 0, and the caller watches again from the revision after the last event it saw.
 *
 * TLS (https to every member, with a CA bundle and a client certificate when given) and etcd's
 * authentication: with a user, the client gets a token from /v3/auth/authenticate before its
 * first request and sends it in every request's Authorization header; a request that etcd
 * refuses as unauthenticated (the token expired) is sent again, once, after a fresh token.
 *
 * Deliberately not here: what keys mean (the rendezvous), retries of requests etcd answered with
 * any other error, and keeping leases alive on a timer (the caller sends keepalives when it
 * wants).
 */
#ifndef CTRUN_ETCD_H
#define CTRUN_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ctrun_etcd ctrun_etcd_t;
typedef struct ctrun_etcd_watch ctrun_etcd_watch_t;

typedef struct ctrun_etcd_opts {
    const char *endpoints;      /* "host:port[,host:port...]", IPv6 hosts in brackets */
    int64_t connect_timeout_ms; /* one connection attempt to one member (0: 1000; https 3000) */
    int64_t attempt_timeout_ms; /* one member's answer, connection included (0: 2000; https
                                 * 5000) */
    int64_t request_timeout_ms; /* a request, over every member and round (0: 10000) */
    bool https;                 /* TLS to every member */
    const char *cacert;         /* https: CA bundle that signs the members (NULL: the system's) */
    const char *cert, *key;     /* https: this client's certificate and key files (NULL: none) */
    const char *user;           /* etcd authentication: the user (NULL: none) */
    const char *password;       /* ... and its password */
} ctrun_etcd_opts_t;

/* A key-value pair as etcd returns it (value empty for a deleted key's event). */
typedef struct ctrun_etcd_kv {
    const uint8_t *key;
    size_t key_len;
    const uint8_t *value;
    size_t value_len;
    int64_t create_revision, mod_revision, version, lease;
} ctrun_etcd_kv_t;

typedef struct ctrun_etcd_event {
    bool deleted; /* DELETE (or lease expiry); otherwise PUT */
    ctrun_etcd_kv_t kv;
} ctrun_etcd_event_t;

/* What a request (or a watch message) brought back; everything valid during the callback. */
typedef struct ctrun_etcd_result {
    int rc;                     /* 0, or a negative errno / CT_E* code (see ctrun_etcd_*) */
    const char *error;          /* one line when rc != 0, "" otherwise */
    bool ambiguous;             /* rc != 0 after a mutating request may have reached a member */
    const char *endpoint;       /* the member that answered, or the last one tried */
    int64_t revision;           /* header.revision: the store's revision after the request */
    bool succeeded;             /* txn: the compares held */
    const ctrun_etcd_kv_t *kvs; /* range; txn: the kvs of every range op, in order */
    size_t nkvs;
    int64_t deleted;                  /* delete; txn: the sum over delete ops */
    int64_t lease_id;                 /* lease grant / keepalive */
    int64_t ttl;                      /* lease grant / keepalive: seconds */
    const ctrun_etcd_event_t *events; /* watch */
    size_t nevents;
    bool created;      /* watch: etcd confirmed it (the first message) */
    const char *token; /* the client's authentication: the token etcd gave */
} ctrun_etcd_result_t;

typedef void (*ctrun_etcd_cb)(void *data, const ctrun_etcd_result_t *res);

typedef enum ctrun_etcd_target {
    CTRUN_ETCD_VERSION = 0,
    CTRUN_ETCD_CREATE, /* create_revision; 0 = the key does not exist */
    CTRUN_ETCD_MOD,    /* mod_revision */
    CTRUN_ETCD_VALUE,
} ctrun_etcd_target_t;

typedef enum ctrun_etcd_cmp_result {
    CTRUN_ETCD_EQUAL = 0,
    CTRUN_ETCD_NOT_EQUAL,
    CTRUN_ETCD_LESS,
    CTRUN_ETCD_GREATER,
} ctrun_etcd_cmp_result_t;

typedef struct ctrun_etcd_cmp {
    const void *key;
    size_t key_len;
    ctrun_etcd_target_t target;
    ctrun_etcd_cmp_result_t result;
    int64_t num;       /* VERSION, CREATE, MOD */
    const void *value; /* VALUE */
    size_t value_len;
} ctrun_etcd_cmp_t;

typedef enum ctrun_etcd_op_kind {
    CTRUN_ETCD_OP_PUT = 0,
    CTRUN_ETCD_OP_RANGE,
    CTRUN_ETCD_OP_DELETE,
} ctrun_etcd_op_kind_t;

typedef struct ctrun_etcd_op {
    ctrun_etcd_op_kind_t kind;
    const void *key;
    size_t key_len;
    const void *value; /* PUT */
    size_t value_len;
    int64_t lease; /* PUT: 0 for none */
    bool prefix;   /* RANGE, DELETE: every key starting with key */
} ctrun_etcd_op_t;

/* A client on loop. Parses the endpoints (CT_EPARSE naming the bad one); connects nothing yet. */
int ctrun_etcd_create(uv_loop_t *loop, const ctrun_etcd_opts_t *opts, ctrun_etcd_t **out,
                      ct_errbuf_t *eb);

/* Drops every pending request and watch without calling back, closes the handles and frees the
 * client once they are closed (run the loop). May be called from a callback. NULL is fine. */
void ctrun_etcd_destroy(ctrun_etcd_t *e);

/* Requests: 0 when submitted (cb will be called once), -ENOMEM, -EINVAL (empty key), or
 * CT_ESTATE after destroy. Keys, values and arrays are copied. */
int ctrun_etcd_put(ctrun_etcd_t *e, const void *key, size_t key_len, const void *value,
                   size_t value_len, int64_t lease, ctrun_etcd_cb cb, void *data);
int ctrun_etcd_range(ctrun_etcd_t *e, const void *key, size_t key_len, bool prefix,
                     ctrun_etcd_cb cb, void *data);
int ctrun_etcd_delete(ctrun_etcd_t *e, const void *key, size_t key_len, bool prefix,
                      ctrun_etcd_cb cb, void *data);
int ctrun_etcd_txn(ctrun_etcd_t *e, const ctrun_etcd_cmp_t *cmps, size_t ncmps,
                   const ctrun_etcd_op_t *success, size_t nsuccess, const ctrun_etcd_op_t *failure,
                   size_t nfailure, ctrun_etcd_cb cb, void *data);
/* res.lease_id and res.ttl. */
int ctrun_etcd_lease_grant(ctrun_etcd_t *e, int64_t ttl_s, ctrun_etcd_cb cb, void *data);
/* res.ttl: the lease's new TTL; a lease that expired or was revoked gives -ENOENT. */
int ctrun_etcd_lease_keepalive(ctrun_etcd_t *e, int64_t lease_id, ctrun_etcd_cb cb, void *data);
/* Deletes the lease and every key attached to it; an unknown lease gives -ENOENT. */
int ctrun_etcd_lease_revoke(ctrun_etcd_t *e, int64_t lease_id, ctrun_etcd_cb cb, void *data);

/* Watches key (or every key under it with prefix) from start_revision (0: from now). cb runs
 * once per message: first with res.created, then with res.events; a call with rc != 0 is the
 * last. *out is the caller's until ctrun_etcd_watch_cancel, which must be called once in
 * every case (also after the last call, and after ctrun_etcd_destroy; from inside the watch's
 * own callback too). */
int ctrun_etcd_watch(ctrun_etcd_t *e, const void *key, size_t key_len, bool prefix,
                     int64_t start_revision, ctrun_etcd_cb cb, void *data,
                     ctrun_etcd_watch_t **out);
/* Stops the watch without calling back and frees it. NULL is fine. */
void ctrun_etcd_watch_cancel(ctrun_etcd_watch_t *w);

/* The end of the range of every key starting with prefix: the prefix with its last byte that is
 * not 0xff incremented and the bytes after it dropped; "\0" (length 1, meaning "to the end")
 * when every byte is 0xff or prefix is empty. Returns the length written to out (prefix_len
 * bytes at most, or 1). */
size_t ctrun_etcd_prefix_end(const void *prefix, size_t prefix_len, uint8_t *out);

/* Base64 (standard alphabet, padded) as the gateway writes bytes. encode writes the NUL-terminated
 * text into out (4 * ceil(n / 3) + 1 bytes) and returns its length; decode returns the number
 * of bytes written to out (3 * len / 4 at most), or CT_EPARSE. */
size_t ctrun_etcd_b64_encode(const void *in, size_t n, char *out);
int ctrun_etcd_b64_decode(const char *in, size_t len, uint8_t *out, size_t *out_len);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_ETCD_H */
