/*
 * ct_store_codec.h - the wire format of PyTorch's TCPStore, in both dialects, as a pure codec.
 *
 * Owns: the byte layout of every request and response (docs/store-protocol.md §1–2), the
 * mapping between wire type codes and dialect-neutral operations, telling the dialects apart
 * from the first bytes of a connection, the size limits, and the messages of ctrun's optional
 * authentication exchange. Server, client and fuzzers all go through this file, so there is one
 * definition of the protocol.
 *
 * Deliberately not here: sockets, buffering, timeouts, the store's semantics, cryptography
 * (ct_store_auth.h computes the MACs that the auth messages carry).
 *
 * Contract (the shape of picohttpparser): a decoder is given (buf, len) and returns
 *   > 0                  the number of bytes one complete message occupies;
 *   CT_STORE_NEED_MORE   (0) the bytes so far are a valid prefix; call again with more;
 *   < 0                  a CT_E* error: CT_EPROTOCOL (unknown type, bad magic, bad value),
 *                        CT_ELIMIT (a length or count over the limits).
 * It keeps no state and allocates nothing: decoded keys and values point into buf, which must
 * outlive their use. Limits are checked as soon as a length field has arrived, before any of
 * the bytes it announces, so a caller never buffers (or allocates for) an oversized message.
 * Lists (the keys of WAIT, CHECK, MULTI_GET, MULTI_SET, the values of a MULTI_GET reply, the
 * keys of a LIST reply) stay in their wire form; walk them with ct_store_list_next().
 *
 * Every integer is in host byte order (little-endian on every platform PyTorch supports) and
 * every string is a u64 length followed by raw bytes, as PyTorch sends them.
 */
#ifndef CT_STORE_CODEC_H
#define CT_STORE_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- dialects and operations ---------------------------------------------------------- */

typedef enum ct_store_dialect {
    CT_STORE_V1 = 1, /* PyTorch 1.13 (and 2.0): no handshake, SET = 0, WATCH_KEY */
    CT_STORE_V2 = 2, /* PyTorch >= 2.2: VALIDATE first, SET = 1, APPEND ... BARRIER */
} ct_store_dialect_t;

/* Dialect-neutral operations; ct_store_op_code() gives each one's wire code. */
typedef enum ct_store_op {
    CT_STORE_OP_VALIDATE = 0, /* v2 only, first message only */
    CT_STORE_OP_SET,
    CT_STORE_OP_COMPARE_SET,
    CT_STORE_OP_GET,
    CT_STORE_OP_ADD,
    CT_STORE_OP_CHECK,
    CT_STORE_OP_WAIT,
    CT_STORE_OP_GETNUMKEYS,
    CT_STORE_OP_WATCH_KEY, /* v1 only */
    CT_STORE_OP_DELETE_KEY,
    CT_STORE_OP_APPEND, /* v2 ... */
    CT_STORE_OP_MULTI_GET,
    CT_STORE_OP_MULTI_SET,
    CT_STORE_OP_CANCEL_WAIT,
    CT_STORE_OP_PING,
    CT_STORE_OP_QUEUE_PUSH,
    CT_STORE_OP_QUEUE_POP,
    CT_STORE_OP_QUEUE_LEN,
    CT_STORE_OP_LIST_KEYS,
    CT_STORE_OP_BARRIER, /* newest PyTorch: counter + wait in one request */
    CT_STORE_OP_COUNT
} ct_store_op_t;

/* The wire code of op in dialect d, or -1 when that dialect has no such request. */
int ct_store_op_code(ct_store_dialect_t d, ct_store_op_t op);

/* The operation a wire code means in dialect d; false for an unknown code. */
bool ct_store_op_from_code(ct_store_dialect_t d, uint8_t code, ct_store_op_t *op);

/* "SET", "WAIT", ... ("?" for an out-of-range value). */
const char *ct_store_op_name(ct_store_op_t op);

/* True when the op has a reply on the wire (SET, APPEND, MULTI_SET, QUEUE_PUSH and VALIDATE are
 * fire-and-forget). */
bool ct_store_op_has_reply(ct_store_op_t op);

/* Reply codes, one byte each. */
enum {
    CT_STORE_CHECK_READY = 0,
    CT_STORE_CHECK_NOT_READY = 1,
    CT_STORE_WAIT_STOP = 0,        /* STOP_WAITING: every awaited key was written */
    CT_STORE_WAIT_CANCELED = 1,    /* reply to CANCEL_WAIT (v2) */
    CT_STORE_WATCH_REGISTERED = 3, /* reply to WATCH_KEY (v1) */
};

/* Kinds of a v1 watch event pushed to a WATCH_KEY connection. */
typedef enum ct_store_watch_kind {
    CT_STORE_WATCH_UPDATED = 0,
    CT_STORE_WATCH_CREATED = 1,
    CT_STORE_WATCH_DELETED = 2,
} ct_store_watch_kind_t;

#define CT_STORE_VALIDATE_MAGIC 0x3C85F7CEu

/* ---- limits --------------------------------------------------------------------------- */

typedef struct ct_store_limits {
    uint64_t max_key_len;     /* bytes in one key */
    uint64_t max_value_len;   /* bytes in one value */
    uint64_t max_keys;        /* keys in one CHECK, WAIT, MULTI_GET or MULTI_SET */
    uint64_t max_message_len; /* bytes of one whole request or reply */
} ct_store_limits_t;

/* PyTorch's libuv server limits (8 KiB keys, 8 MiB values, 131072 keys per request) and a
 * 64 MiB cap on a whole message, which neither PyTorch server has: without it a legal WAIT of
 * 131072 keys of 8 KiB would be a 1 GiB request. */
#define CT_STORE_MAX_KEY_LEN     (8u * 1024u)
#define CT_STORE_MAX_VALUE_LEN   (8u * 1024u * 1024u)
#define CT_STORE_MAX_KEYS        (128u * 1024u)
#define CT_STORE_MAX_MESSAGE_LEN (64u * 1024u * 1024u)
extern const ct_store_limits_t ct_store_default_limits;

/* ---- decoded views -------------------------------------------------------------------- */

typedef struct ct_store_bytes {
    const uint8_t *data;
    uint64_t len;
} ct_store_bytes_t;

/* A validated list in wire form: n items, each a str (keys) or a (str, bytes) pair (the body of
 * a MULTI_SET). */
typedef struct ct_store_list {
    const uint8_t *data; /* first byte of the first item */
    size_t nbytes;       /* bytes of all items */
    uint64_t n;          /* items */
    bool pairs;          /* each item is key + value */
} ct_store_list_t;

typedef struct ct_store_list_iter {
    const uint8_t *p, *end;
    bool pairs;
} ct_store_list_iter_t;

void ct_store_list_begin(const ct_store_list_t *list, ct_store_list_iter_t *it);
/* Yields the next item (value only filled for pairs); false at the end. The list was validated
 * when it was decoded, so no error is possible. */
bool ct_store_list_next(ct_store_list_iter_t *it, ct_store_bytes_t *key, ct_store_bytes_t *value);

/*
 * A request. Which fields an op uses:
 *   VALIDATE            num32 (the magic)           PING          num32 (nonce)
 *   SET, APPEND,        key, value                  COMPARE_SET   key, value (expected),
 *   QUEUE_PUSH                                                    desired
 *   GET, DELETE_KEY,    key                         ADD           key, num (delta)
 *   QUEUE_POP/LEN,                                  BARRIER       key, num (world size)
 *   WATCH_KEY
 *   CHECK, WAIT,        keys                        MULTI_SET     keys (pairs)
 *   MULTI_GET
 *   GETNUMKEYS, CANCEL_WAIT, LIST_KEYS: nothing
 * For encoding, a list can be given either as arrays (key_array/value_array with nkeys items)
 * or, when key_array is NULL, as an already encoded `keys` list (re-encoding a decoded request).
 */
typedef struct ct_store_req {
    ct_store_op_t op;
    ct_store_bytes_t key;
    ct_store_bytes_t value;
    ct_store_bytes_t desired;
    int64_t num;
    uint32_t num32;
    ct_store_list_t keys;
    const ct_store_bytes_t *key_array;   /* encoding only */
    const ct_store_bytes_t *value_array; /* encoding only (MULTI_SET) */
    uint64_t nkeys;                      /* encoding only: items in the arrays */
} ct_store_req_t;

/*
 * A reply. Which fields an op uses:
 *   GET, COMPARE_SET    value                       CHECK, WAIT, CANCEL_WAIT,   code
 *   ADD, GETNUMKEYS,    num                         BARRIER, WATCH_KEY
 *   DELETE_KEY, QUEUE_LEN                           PING                        num32
 *   QUEUE_POP           num (queue length before the pop), value when num > 0
 *   MULTI_GET           list of n values (n = keys in the request)
 *   LIST_KEYS           num (count) and list of keys
 * Encoding takes lists as value_array/key_array with num or nkeys items, like requests.
 */
typedef struct ct_store_resp {
    ct_store_op_t op;
    uint8_t code;
    int64_t num;
    uint32_t num32;
    ct_store_bytes_t value;
    ct_store_list_t list;
    const ct_store_bytes_t *item_array; /* encoding only: MULTI_GET values, LIST keys */
    uint64_t nitems;                    /* encoding only */
} ct_store_resp_t;

/* Resumption point for decoding a long list across calls (picohttpparser's `last_len`): zero it
 * before the first call for a message, pass the same one again with the grown buffer, and the
 * decoder skips the items it already validated. NULL: always start from the beginning. The
 * cursor only ever describes a prefix of the same message, so a stale one is a caller bug. */
typedef struct ct_store_cursor {
    size_t offset;  /* bytes of the message validated so far (0 = nothing) */
    uint64_t items; /* complete list items inside that prefix */
} ct_store_cursor_t;

/* ---- decoding ------------------------------------------------------------------------- */

#define CT_STORE_NEED_MORE 0

/* Looks at the first bytes of a connection: `00 CE F7 85 3C` is a v2 VALIDATE; any other
 * start is v1 (a v1 SET also begins with 00, but its next four bytes are the low half of a key
 * length, and 0x3C85F7CE is not a realistic one). Returns 1 with *out set, or 0 when more bytes
 * are needed to tell (a leading 00 with fewer than 5 bytes). */
int ct_store_detect_dialect(const void *buf, size_t len, ct_store_dialect_t *out);

/* Decodes one request of dialect d. lim NULL = ct_store_default_limits. need (optional)
 * receives, on NEED_MORE, the buffer length below which another call cannot make progress
 * (always > len). cursor: see ct_store_cursor_t. */
ssize_t ct_store_decode_request(ct_store_dialect_t d, const void *buf, size_t len,
                                const ct_store_limits_t *lim, ct_store_req_t *req,
                                ct_store_cursor_t *cursor, size_t *need, ct_errbuf_t *eb);

/* Decodes the reply to a request of op. nkeys is the number of keys the request carried (only
 * MULTI_GET's reply depends on it; the reply to a MULTI_GET of no keys is empty, so there is
 * nothing to decode: CT_EPROTOCOL). */
ssize_t ct_store_decode_response(ct_store_op_t op, uint64_t nkeys, const void *buf, size_t len,
                                 const ct_store_limits_t *lim, ct_store_resp_t *resp,
                                 ct_store_cursor_t *cursor, size_t *need, ct_errbuf_t *eb);

/* A v1 watch event: u8 kind, str key, bytes old value, bytes new value. */
typedef struct ct_store_watch_event {
    ct_store_watch_kind_t kind;
    ct_store_bytes_t key, old_value, new_value;
} ct_store_watch_event_t;

ssize_t ct_store_decode_watch_event(const void *buf, size_t len, const ct_store_limits_t *lim,
                                    ct_store_watch_event_t *ev, size_t *need, ct_errbuf_t *eb);

/* ---- encoding ------------------------------------------------------------------------- */

/* Each encoder returns the encoded size, and writes the bytes only when it is <= cap (snprintf
 * style: call with cap 0 to size a buffer). A negative return is CT_EPROTOCOL (the op does not
 * exist in that dialect, or has no reply) with the reason in eb. Encoders do not apply limits:
 * a client may choose to send what a server will refuse. */
ssize_t ct_store_encode_request(ct_store_dialect_t d, const ct_store_req_t *req, void *out,
                                size_t cap, ct_errbuf_t *eb);
ssize_t ct_store_encode_response(const ct_store_resp_t *resp, void *out, size_t cap,
                                 ct_errbuf_t *eb);
size_t ct_store_encode_watch_event(const ct_store_watch_event_t *ev, void *out, size_t cap);

/* Primitive writers for code that assembles replies in place (the server): each writes at p and
 * returns the position after what it wrote. */
uint8_t *ct_store_put_u32(uint8_t *p, uint32_t v);
uint8_t *ct_store_put_u64(uint8_t *p, uint64_t v);
uint8_t *ct_store_put_bytes(uint8_t *p, const void *data, uint64_t len); /* u64 len + bytes */
uint64_t ct_store_get_u64(const uint8_t *p);
uint32_t ct_store_get_u32(const uint8_t *p);

/* ---- authentication messages (ctrun extension, never sent to stock PyTorch) ----------- */
/*
 * When a store has a token, each connection opens with this exchange, before any v1 or v2
 * byte:
 *   C>S HELLO      A5 "CTSA" 01 <32-byte client nonce>
 *   S>C CHALLENGE  A5 "CTSA" 01 <32-byte server nonce>
 *   C>S PROOF      A6 <32-byte HMAC-SHA256(token, "ctrun-store-auth-v1 client" | cn | sn)>
 *   S>C ACCEPT     A7 <32-byte HMAC-SHA256(token, "ctrun-store-auth-v1 server" | cn | sn)>
 * after which the connection starts over with dialect detection (a v2 client sends VALIDATE).
 * 0xA5 is neither a v1 (0..8) nor a v2 (0..18) type code, and not an ASCII letter, so a hello
 * can never be mistaken for a request, nor a port scanner's probe for a hello. A server
 * rejects by closing the connection; it never says why on the wire.
 */
#define CT_STORE_AUTH_HELLO     0xA5
#define CT_STORE_AUTH_PROOF     0xA6
#define CT_STORE_AUTH_ACCEPT    0xA7
#define CT_STORE_AUTH_VERSION   1
#define CT_STORE_AUTH_NONCE_LEN 32
#define CT_STORE_AUTH_MAC_LEN   32
#define CT_STORE_AUTH_HELLO_LEN (1 + 4 + 1 + CT_STORE_AUTH_NONCE_LEN)
#define CT_STORE_AUTH_PROOF_LEN (1 + CT_STORE_AUTH_MAC_LEN)

/* HELLO and CHALLENGE share a layout. Decoders: > 0 consumed, 0 need more, CT_EAUTH on a
 * wrong type byte, magic or version. */
size_t ct_store_encode_auth_hello(const uint8_t nonce[CT_STORE_AUTH_NONCE_LEN], void *out);
ssize_t ct_store_decode_auth_hello(const void *buf, size_t len,
                                   uint8_t nonce[CT_STORE_AUTH_NONCE_LEN], ct_errbuf_t *eb);
/* PROOF (type A6) and ACCEPT (type A7) share a layout. */
size_t ct_store_encode_auth_mac(uint8_t type, const uint8_t mac[CT_STORE_AUTH_MAC_LEN], void *out);
ssize_t ct_store_decode_auth_mac(uint8_t type, const void *buf, size_t len,
                                 uint8_t mac[CT_STORE_AUTH_MAC_LEN], ct_errbuf_t *eb);

#ifdef __cplusplus
}
#endif

#endif /* CT_STORE_CODEC_H */
