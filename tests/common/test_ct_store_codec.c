/*
 * test_ct_store_codec.c - the store codec against hand-written bytes.
 *
 * Proves: every request and reply of both dialects decodes from, and encodes to, exactly the
 * bytes PyTorch puts on the wire (the 1.13 capture of docs/store-protocol.md §2.3, and vectors
 * written from §2.2 for v2); every prefix of every message asks for more bytes, with a `need`
 * that never overshoots; limits fire as soon as a length field is complete, before its bytes;
 * unknown codes, bad magic and garbage are errors, never crashes or over-reads.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ct_store_codec.h"
#include "ct_test.h"

/* "03 0200000000000000 2f63" -> bytes; spaces are ignored. */
static size_t hex(const char *text, uint8_t *out, size_t cap)
{
    size_t n = 0;
    int hi = -1;
    for (const char *p = text; *p; p++) {
        int v;
        if (*p >= '0' && *p <= '9')
            v = *p - '0';
        else if (*p >= 'a' && *p <= 'f')
            v = *p - 'a' + 10;
        else if (*p >= 'A' && *p <= 'F')
            v = *p - 'A' + 10;
        else
            continue;
        if (hi < 0) {
            hi = v;
        } else {
            CT_ASSERT(n < cap);
            out[n++] = (uint8_t)(hi << 4 | v);
            hi = -1;
        }
    }
    CT_ASSERT(hi < 0);
    return n;
}

#define U64(v) #v "00000000000000" /* a one-byte little-endian u64: U64(02) */

typedef struct vec {
    ct_store_dialect_t d;
    ct_store_op_t op;
    const char *req;  /* request bytes */
    uint64_t nkeys;   /* keys in the request (MULTI_GET replies) */
    const char *resp; /* reply bytes, NULL when there is none */
} vec_t;

/* The 1.13 capture of §2.3 plus ADD init/ 1 from §1.1, then v2 vectors for every request. */
static const vec_t vectors[] = {
    {CT_STORE_V1, CT_STORE_OP_SET, "00 0200000000000000 2f6b 0100000000000000 76", 0, NULL},
    {CT_STORE_V1, CT_STORE_OP_WAIT, "05 0100000000000000 0200000000000000 2f6b", 1, "00"},
    {CT_STORE_V1, CT_STORE_OP_GET, "02 0200000000000000 2f6b", 0, "0100000000000000 76"},
    {CT_STORE_V1, CT_STORE_OP_ADD, "03 0200000000000000 2f63 0500000000000000", 0,
     "0500000000000000"},
    {CT_STORE_V1, CT_STORE_OP_ADD, "03 0200000000000000 2f63 0500000000000000", 0,
     "0a00000000000000"},
    {CT_STORE_V1, CT_STORE_OP_COMPARE_SET,
     "01 0300000000000000 2f6373 0000000000000000 0100000000000000 78", 0, "0100000000000000 78"},
    {CT_STORE_V1, CT_STORE_OP_COMPARE_SET,
     "01 0600000000000000 2f6e6f6b6579 0100000000000000 61 0100000000000000 62", 0,
     "0100000000000000 61"},
    {CT_STORE_V1, CT_STORE_OP_GETNUMKEYS, "06", 0, "0300000000000000"},
    {CT_STORE_V1, CT_STORE_OP_DELETE_KEY, "08 0200000000000000 2f6b", 0, "0100000000000000"},
    {CT_STORE_V1, CT_STORE_OP_DELETE_KEY, "08 0200000000000000 2f6b", 0, "0000000000000000"},
    {CT_STORE_V1, CT_STORE_OP_WAIT,
     "05 0200000000000000 0200000000000000 2f63 0300000000000000 2f6373", 2, "00"},
    {CT_STORE_V1, CT_STORE_OP_ADD, "03 0500000000000000 696e69742f 0100000000000000", 0,
     "0200000000000000"},
    {CT_STORE_V1, CT_STORE_OP_CHECK, "04 0100000000000000 0200000000000000 2f6b", 1, "01"},
    {CT_STORE_V1, CT_STORE_OP_WATCH_KEY, "07 0200000000000000 2f6b", 0, "03"},
    /* v2 */
    {CT_STORE_V2, CT_STORE_OP_VALIDATE, "00 cef7853c", 0, NULL},
    {CT_STORE_V2, CT_STORE_OP_PING, "0d 39300000", 0, "39300000"},
    {CT_STORE_V2, CT_STORE_OP_SET, "01 0200000000000000 2f6b 0100000000000000 76", 0, NULL},
    {CT_STORE_V2, CT_STORE_OP_COMPARE_SET,
     "02 0300000000000000 2f6373 0000000000000000 0100000000000000 78", 0, "0100000000000000 78"},
    {CT_STORE_V2, CT_STORE_OP_GET, "03 0200000000000000 2f6b", 0, "0000000000000000"},
    {CT_STORE_V2, CT_STORE_OP_ADD, "04 0200000000000000 2f6e fbffffffffffffff", 0,
     "fdffffffffffffff"},
    {CT_STORE_V2, CT_STORE_OP_CHECK, "05 0100000000000000 0200000000000000 2f6b", 1, "00"},
    {CT_STORE_V2, CT_STORE_OP_WAIT, "06 0000000000000000", 0, "00"},
    {CT_STORE_V2, CT_STORE_OP_GETNUMKEYS, "07", 0, "0900000000000000"},
    {CT_STORE_V2, CT_STORE_OP_DELETE_KEY, "08 0200000000000000 2f6b", 0, "0100000000000000"},
    {CT_STORE_V2, CT_STORE_OP_APPEND, "09 0200000000000000 2f61 0100000000000000 78", 0, NULL},
    {CT_STORE_V2, CT_STORE_OP_MULTI_GET,
     "0a 0200000000000000 0300000000000000 2f6d31 0300000000000000 2f6d32", 2,
     "0100000000000000 31 0000000000000000"},
    {CT_STORE_V2, CT_STORE_OP_MULTI_SET,
     "0b 0200000000000000 0300000000000000 2f6d31 0100000000000000 31"
     " 0300000000000000 2f6d32 0100000000000000 32",
     0, NULL},
    {CT_STORE_V2, CT_STORE_OP_CANCEL_WAIT, "0c", 0, "01"},
    {CT_STORE_V2, CT_STORE_OP_QUEUE_PUSH, "0e 0200000000000000 2f71 0100000000000000 31", 0, NULL},
    {CT_STORE_V2, CT_STORE_OP_QUEUE_POP, "0f 0200000000000000 2f71", 0,
     "0100000000000000 0100000000000000 31"},
    {CT_STORE_V2, CT_STORE_OP_QUEUE_POP, "0f 0200000000000000 2f71", 0, "0000000000000000"},
    {CT_STORE_V2, CT_STORE_OP_QUEUE_LEN, "10 0200000000000000 2f71", 0, "0100000000000000"},
    {CT_STORE_V2, CT_STORE_OP_LIST_KEYS, "11", 0,
     "0200000000000000 0200000000000000 2f61 0500000000000000 696e69742f"},
    {CT_STORE_V2, CT_STORE_OP_BARRIER, "12 0200000000000000 2f62 0400000000000000", 0, "00"},
};
#define NVEC (sizeof vectors / sizeof vectors[0])

static void test_op_tables(void)
{
    /* The two numberings of §2.1. */
    static const struct {
        ct_store_op_t op;
        int v1, v2;
    } t[] = {
        {CT_STORE_OP_VALIDATE, -1, 0},   {CT_STORE_OP_SET, 0, 1},
        {CT_STORE_OP_COMPARE_SET, 1, 2}, {CT_STORE_OP_GET, 2, 3},
        {CT_STORE_OP_ADD, 3, 4},         {CT_STORE_OP_CHECK, 4, 5},
        {CT_STORE_OP_WAIT, 5, 6},        {CT_STORE_OP_GETNUMKEYS, 6, 7},
        {CT_STORE_OP_WATCH_KEY, 7, -1},  {CT_STORE_OP_DELETE_KEY, 8, 8},
        {CT_STORE_OP_APPEND, -1, 9},     {CT_STORE_OP_MULTI_GET, -1, 10},
        {CT_STORE_OP_MULTI_SET, -1, 11}, {CT_STORE_OP_CANCEL_WAIT, -1, 12},
        {CT_STORE_OP_PING, -1, 13},      {CT_STORE_OP_QUEUE_PUSH, -1, 14},
        {CT_STORE_OP_QUEUE_POP, -1, 15}, {CT_STORE_OP_QUEUE_LEN, -1, 16},
        {CT_STORE_OP_LIST_KEYS, -1, 17}, {CT_STORE_OP_BARRIER, -1, 18},
    };
    CT_ASSERT_EQ(sizeof t / sizeof t[0], CT_STORE_OP_COUNT);
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        CT_ASSERT_EQ(ct_store_op_code(CT_STORE_V1, t[i].op), t[i].v1);
        CT_ASSERT_EQ(ct_store_op_code(CT_STORE_V2, t[i].op), t[i].v2);
        ct_store_op_t op;
        if (t[i].v1 >= 0) {
            CT_ASSERT(ct_store_op_from_code(CT_STORE_V1, (uint8_t)t[i].v1, &op));
            CT_ASSERT_EQ(op, t[i].op);
        }
        if (t[i].v2 >= 0) {
            CT_ASSERT(ct_store_op_from_code(CT_STORE_V2, (uint8_t)t[i].v2, &op));
            CT_ASSERT_EQ(op, t[i].op);
        }
    }
    ct_store_op_t op;
    CT_ASSERT(!ct_store_op_from_code(CT_STORE_V1, 9, &op));
    CT_ASSERT(!ct_store_op_from_code(CT_STORE_V2, 19, &op));
    CT_ASSERT(!ct_store_op_from_code(CT_STORE_V2, 0xA5, &op));
    CT_ASSERT_STR_EQ(ct_store_op_name(CT_STORE_OP_MULTI_SET), "MULTI_SET");
    CT_ASSERT_STR_EQ(ct_store_op_name((ct_store_op_t)99), "?");
    CT_ASSERT(!ct_store_op_has_reply(CT_STORE_OP_SET));
    CT_ASSERT(!ct_store_op_has_reply(CT_STORE_OP_QUEUE_PUSH));
    CT_ASSERT(ct_store_op_has_reply(CT_STORE_OP_CANCEL_WAIT));
}

/* Every vector decodes to its op, re-encodes to the same bytes, and its reply round-trips. */
static void test_vectors_round_trip(void)
{
    for (size_t i = 0; i < NVEC; i++) {
        uint8_t buf[512], out[512];
        size_t n = hex(vectors[i].req, buf, sizeof buf);
        ct_store_req_t req;
        ct_errbuf_t eb = {{0}};
        ssize_t r = ct_store_decode_request(vectors[i].d, buf, n, NULL, &req, NULL, NULL, &eb);
        CT_ASSERT_MSG(r == (ssize_t)n, "vector %zu (%s): decode returned %zd (%s)", i,
                      ct_store_op_name(vectors[i].op), r, eb.msg);
        CT_ASSERT_EQ(req.op, vectors[i].op);
        ssize_t w = ct_store_encode_request(vectors[i].d, &req, out, sizeof out, &eb);
        CT_ASSERT_EQ(w, (ssize_t)n);
        CT_ASSERT_MSG(memcmp(out, buf, n) == 0, "vector %zu re-encodes differently", i);
        /* Sizing call: no output, same length. */
        CT_ASSERT_EQ(ct_store_encode_request(vectors[i].d, &req, NULL, 0, NULL), (ssize_t)n);
        if (vectors[i].resp == NULL) {
            CT_ASSERT(!ct_store_op_has_reply(vectors[i].op));
            continue;
        }
        n = hex(vectors[i].resp, buf, sizeof buf);
        ct_store_resp_t resp;
        r = ct_store_decode_response(vectors[i].op, vectors[i].nkeys, buf, n, NULL, &resp, NULL,
                                     NULL, &eb);
        CT_ASSERT_MSG(r == (ssize_t)n, "vector %zu reply: %zd (%s)", i, r, eb.msg);
        w = ct_store_encode_response(&resp, out, sizeof out, &eb);
        CT_ASSERT_EQ(w, (ssize_t)n);
        CT_ASSERT_MSG(memcmp(out, buf, n) == 0, "vector %zu reply re-encodes differently", i);
    }
}

/* Field-level checks of a few vectors: the decoder puts the right bytes in the right places. */
static void test_decoded_fields(void)
{
    uint8_t buf[256];
    ct_store_req_t req;
    size_t n = hex(vectors[0].req, buf, sizeof buf);
    CT_ASSERT_EQ(ct_store_decode_request(CT_STORE_V1, buf, n, NULL, &req, NULL, NULL, NULL), 20);
    CT_ASSERT_EQ(req.key.len, 2);
    CT_ASSERT(memcmp(req.key.data, "/k", 2) == 0);
    CT_ASSERT_EQ(req.value.len, 1);
    CT_ASSERT_EQ(req.value.data[0], 'v');
    CT_ASSERT(req.key.data == buf + 9); /* zero-copy: views into the caller's buffer */

    n = hex(vectors[10].req, buf, sizeof buf); /* wait(['c','cs']) */
    CT_ASSERT_EQ(ct_store_decode_request(CT_STORE_V1, buf, n, NULL, &req, NULL, NULL, NULL),
                 (ssize_t)n);
    CT_ASSERT_EQ(req.keys.n, 2);
    ct_store_list_iter_t it;
    ct_store_bytes_t k, v;
    ct_store_list_begin(&req.keys, &it);
    CT_ASSERT(ct_store_list_next(&it, &k, NULL));
    CT_ASSERT(k.len == 2 && memcmp(k.data, "/c", 2) == 0);
    CT_ASSERT(ct_store_list_next(&it, &k, NULL));
    CT_ASSERT(k.len == 3 && memcmp(k.data, "/cs", 3) == 0);
    CT_ASSERT(!ct_store_list_next(&it, &k, NULL));

    n = hex(vectors[26].req, buf, sizeof buf); /* MULTI_SET */
    CT_ASSERT_EQ(ct_store_decode_request(CT_STORE_V2, buf, n, NULL, &req, NULL, NULL, NULL),
                 (ssize_t)n);
    CT_ASSERT_EQ(req.op, CT_STORE_OP_MULTI_SET);
    ct_store_list_begin(&req.keys, &it);
    CT_ASSERT(ct_store_list_next(&it, &k, &v));
    CT_ASSERT(k.len == 3 && memcmp(k.data, "/m1", 3) == 0 && v.len == 1 && v.data[0] == '1');
    CT_ASSERT(ct_store_list_next(&it, &k, &v));
    CT_ASSERT(v.len == 1 && v.data[0] == '2');
    CT_ASSERT(!ct_store_list_next(&it, &k, &v));

    n = hex(vectors[19].req, buf, sizeof buf); /* ADD -5 */
    CT_ASSERT_EQ(ct_store_decode_request(CT_STORE_V2, buf, n, NULL, &req, NULL, NULL, NULL),
                 (ssize_t)n);
    CT_ASSERT_EQ(req.num, -5);
    n = hex(vectors[33].req, buf, sizeof buf); /* BARRIER world 4 */
    CT_ASSERT_EQ(ct_store_decode_request(CT_STORE_V2, buf, n, NULL, &req, NULL, NULL, NULL),
                 (ssize_t)n);
    CT_ASSERT_EQ(req.op, CT_STORE_OP_BARRIER);
    CT_ASSERT_EQ(req.num, 4);

    ct_store_resp_t resp;
    n = hex("0100000000000000 0100000000000000 31", buf, sizeof buf);
    CT_ASSERT_EQ(
        ct_store_decode_response(CT_STORE_OP_QUEUE_POP, 0, buf, n, NULL, &resp, NULL, NULL, NULL),
        (ssize_t)n);
    CT_ASSERT_EQ(resp.num, 1);
    CT_ASSERT(resp.value.len == 1 && resp.value.data[0] == '1');
    n = hex("39300000", buf, sizeof buf);
    CT_ASSERT_EQ(
        ct_store_decode_response(CT_STORE_OP_PING, 0, buf, n, NULL, &resp, NULL, NULL, NULL), 4);
    CT_ASSERT_EQ(resp.num32, 12345);
}

/* Every proper prefix of every message is NEED_MORE, need is > len and never beyond the whole
 * message; growing one byte at a time with a cursor ends at the same result. */
static void test_split_one_byte_at_a_time(void)
{
    for (size_t i = 0; i < NVEC; i++) {
        for (int pass = 0; pass < 2; pass++) {
            const char *text = pass == 0 ? vectors[i].req : vectors[i].resp;
            if (text == NULL)
                continue;
            uint8_t buf[512];
            size_t n = hex(text, buf, sizeof buf);
            ct_store_cursor_t cur = {0};
            for (size_t len = 0; len <= n; len++) {
                /* A fresh heap copy of exactly len bytes: ASan catches any read past it. */
                uint8_t *copy = malloc(len ? len : 1);
                memcpy(copy, buf, len);
                size_t need = 0;
                ssize_t r;
                ct_store_req_t req;
                ct_store_resp_t resp;
                ct_errbuf_t eb = {{0}};
                if (pass == 0)
                    r = ct_store_decode_request(vectors[i].d, copy, len, NULL, &req, &cur, &need,
                                                &eb);
                else
                    r = ct_store_decode_response(vectors[i].op, vectors[i].nkeys, copy, len, NULL,
                                                 &resp, &cur, &need, &eb);
                free(copy);
                if (len < n) {
                    CT_ASSERT_MSG(r == CT_STORE_NEED_MORE, "vector %zu %s prefix %zu: %zd (%s)", i,
                                  pass ? "reply" : "request", len, r, eb.msg);
                    CT_ASSERT_MSG(need > len && need <= n, "vector %zu prefix %zu: need %zu of %zu",
                                  i, len, need, n);
                } else {
                    CT_ASSERT_MSG(r == (ssize_t)n, "vector %zu full: %zd (%s)", i, r, eb.msg);
                }
            }
        }
    }
}

static void test_detect_dialect(void)
{
    uint8_t b[8] = {0};
    ct_store_dialect_t d = 0;
    CT_ASSERT_EQ(ct_store_detect_dialect(b, 0, &d), 0);
    size_t n = hex("00 cef7853c 0d", b, sizeof b);
    for (size_t len = 1; len < 5; len++)
        CT_ASSERT_EQ(ct_store_detect_dialect(b, len, &d), 0);
    CT_ASSERT_EQ(ct_store_detect_dialect(b, n, &d), 1);
    CT_ASSERT_EQ(d, CT_STORE_V2);
    /* A v1 SET begins with 00, but the key length's low bytes differ from the magic. */
    hex("00 02000000", b, sizeof b);
    CT_ASSERT_EQ(ct_store_detect_dialect(b, 2, &d), 1);
    CT_ASSERT_EQ(d, CT_STORE_V1);
    hex("00 ce000000", b, sizeof b);
    CT_ASSERT_EQ(ct_store_detect_dialect(b, 2, &d), 0); /* still could be the magic */
    CT_ASSERT_EQ(ct_store_detect_dialect(b, 3, &d), 1);
    CT_ASSERT_EQ(d, CT_STORE_V1);
    b[0] = 0x03; /* ADD init/ */
    CT_ASSERT_EQ(ct_store_detect_dialect(b, 1, &d), 1);
    CT_ASSERT_EQ(d, CT_STORE_V1);
    b[0] = 'G'; /* an HTTP probe is "v1" and then fails as an unknown type */
    CT_ASSERT_EQ(ct_store_detect_dialect(b, 1, &d), 1);
    CT_ASSERT_EQ(d, CT_STORE_V1);
}

static void test_limits(void)
{
    uint8_t b[64];
    ct_store_req_t req;
    ct_errbuf_t eb = {{0}};
    /* A key length over 8 KiB is refused as soon as the 8 length bytes are in. */
    size_t n = hex("00 0120000000000000", b, sizeof b); /* 8193 */
    CT_ASSERT_ERR(ct_store_decode_request(CT_STORE_V1, b, n, NULL, &req, NULL, NULL, &eb),
                  CT_ELIMIT);
    CT_ASSERT_STR_CONTAINS(eb.msg, "key length 8193");
    n = hex("00 0020000000000000", b, sizeof b); /* 8192: fine, needs the bytes */
    size_t need = 0;
    CT_ASSERT_EQ(ct_store_decode_request(CT_STORE_V1, b, n, NULL, &req, NULL, &need, &eb),
                 CT_STORE_NEED_MORE);
    CT_ASSERT_EQ(need, 9 + 8192); /* through the key: the next field is not known yet */
    /* 2^40 (case 21) and 2^64-1 key lengths. */
    n = hex("00 0000000000010000", b, sizeof b);
    CT_ASSERT_ERR(ct_store_decode_request(CT_STORE_V1, b, n, NULL, &req, NULL, NULL, &eb),
                  CT_ELIMIT);
    n = hex("01 ffffffffffffffff", b, sizeof b);
    CT_ASSERT_ERR(ct_store_decode_request(CT_STORE_V2, b, n, NULL, &req, NULL, NULL, &eb),
                  CT_ELIMIT);
    /* A 64 MiB value (case 21): refused with only the header present. */
    n = hex("00 0100000000000000 6b 0000000400000000", b, sizeof b);
    CT_ASSERT_ERR(ct_store_decode_request(CT_STORE_V1, b, n, NULL, &req, NULL, NULL, &eb),
                  CT_ELIMIT);
    CT_ASSERT_STR_CONTAINS(eb.msg, "value length 67108864");
    n = hex("00 0100000000000000 6b 0100800000000000", b, sizeof b); /* 8 MiB + 1 */
    CT_ASSERT_ERR(ct_store_decode_request(CT_STORE_V1, b, n, NULL, &req, NULL, NULL, &eb),
                  CT_ELIMIT);
    n = hex("00 0100000000000000 6b 0000800000000000", b, sizeof b); /* exactly 8 MiB */
    CT_ASSERT_EQ(ct_store_decode_request(CT_STORE_V1, b, n, NULL, &req, NULL, &need, &eb),
                 CT_STORE_NEED_MORE);
    CT_ASSERT_EQ(need, 1 + 8 + 1 + 8 + (8u << 20));
    /* Counts: 131072 keys is the limit. */
    n = hex("05 0100020000000000", b, sizeof b);
    CT_ASSERT_ERR(ct_store_decode_request(CT_STORE_V1, b, n, NULL, &req, NULL, NULL, &eb),
                  CT_ELIMIT);
    n = hex("05 0000020000000000", b, sizeof b);
    CT_ASSERT_EQ(ct_store_decode_request(CT_STORE_V1, b, n, NULL, &req, NULL, NULL, &eb),
                 CT_STORE_NEED_MORE);
    n = hex("0b 0100020000000000", b, sizeof b); /* MULTI_SET pairs */
    CT_ASSERT_ERR(ct_store_decode_request(CT_STORE_V2, b, n, NULL, &req, NULL, NULL, &eb),
                  CT_ELIMIT);
    /* The whole-message cap, with custom limits. */
    ct_store_limits_t lim = ct_store_default_limits;
    lim.max_message_len = 40;
    n = hex("00 0100000000000000 6b 2000000000000000", b, sizeof b); /* 32-byte value */
    CT_ASSERT_ERR(ct_store_decode_request(CT_STORE_V1, b, n, &lim, &req, NULL, NULL, &eb),
                  CT_ELIMIT);
    n = hex("00 0100000000000000 6b 1600000000000000", b, sizeof b); /* 22 bytes: 40 total */
    CT_ASSERT_EQ(ct_store_decode_request(CT_STORE_V1, b, n, &lim, &req, NULL, &need, &eb),
                 CT_STORE_NEED_MORE);
    CT_ASSERT_EQ(need, 40);
    /* Replies are held to the same limits. */
    ct_store_resp_t resp;
    n = hex("0100800000000000", b, sizeof b);
    CT_ASSERT_ERR(ct_store_decode_response(CT_STORE_OP_GET, 0, b, n, NULL, &resp, NULL, NULL, &eb),
                  CT_ELIMIT);
    CT_ASSERT_ERR(
        ct_store_decode_response(CT_STORE_OP_MULTI_GET, 200000, b, 0, NULL, &resp, NULL, NULL, &eb),
        CT_ELIMIT);
}

static void test_bad_input(void)
{
    uint8_t b[64];
    ct_store_req_t req;
    ct_store_resp_t resp;
    ct_errbuf_t eb = {{0}};
    /* Unknown type codes in each dialect; case 20's HTTP probe. */
    b[0] = 9;
    CT_ASSERT_ERR(ct_store_decode_request(CT_STORE_V1, b, 1, NULL, &req, NULL, NULL, &eb),
                  CT_EPROTOCOL);
    CT_ASSERT_STR_CONTAINS(eb.msg, "0x09");
    b[0] = 19;
    CT_ASSERT_ERR(ct_store_decode_request(CT_STORE_V2, b, 1, NULL, &req, NULL, NULL, &eb),
                  CT_EPROTOCOL);
    b[0] = 0xA5; /* an authentication hello is neither */
    CT_ASSERT_ERR(ct_store_decode_request(CT_STORE_V2, b, 1, NULL, &req, NULL, NULL, &eb),
                  CT_EPROTOCOL);
    CT_ASSERT_ERR(ct_store_decode_request(CT_STORE_V1, b, 1, NULL, &req, NULL, NULL, &eb),
                  CT_EPROTOCOL);
    const char *http = "GET / HTTP/1.0\r\n\r\n";
    CT_ASSERT_ERR(
        ct_store_decode_request(CT_STORE_V1, http, strlen(http), NULL, &req, NULL, NULL, &eb),
        CT_EPROTOCOL);
    /* VALIDATE with a wrong magic. */
    size_t n = hex("00 cef7853d", b, sizeof b);
    CT_ASSERT_ERR(ct_store_decode_request(CT_STORE_V2, b, n, NULL, &req, NULL, NULL, &eb),
                  CT_EPROTOCOL);
    /* Reply codes outside their enums. */
    b[0] = 2;
    CT_ASSERT_ERR(
        ct_store_decode_response(CT_STORE_OP_CHECK, 0, b, 1, NULL, &resp, NULL, NULL, &eb),
        CT_EPROTOCOL);
    CT_ASSERT_ERR(ct_store_decode_response(CT_STORE_OP_WAIT, 0, b, 1, NULL, &resp, NULL, NULL, &eb),
                  CT_EPROTOCOL);
    CT_ASSERT_ERR(
        ct_store_decode_response(CT_STORE_OP_WATCH_KEY, 0, b, 1, NULL, &resp, NULL, NULL, &eb),
        CT_EPROTOCOL);
    CT_ASSERT_ERR(ct_store_decode_response(CT_STORE_OP_SET, 0, b, 1, NULL, &resp, NULL, NULL, &eb),
                  CT_EPROTOCOL);
    n = hex("ffffffffffffffff", b, sizeof b); /* negative LIST count */
    CT_ASSERT_ERR(
        ct_store_decode_response(CT_STORE_OP_LIST_KEYS, 0, b, n, NULL, &resp, NULL, NULL, &eb),
        CT_EPROTOCOL);
    /* Encoding an op the dialect lacks. */
    ct_store_req_t a = {.op = CT_STORE_OP_APPEND};
    CT_ASSERT_ERR(ct_store_encode_request(CT_STORE_V1, &a, NULL, 0, &eb), CT_EPROTOCOL);
    a.op = CT_STORE_OP_WATCH_KEY;
    CT_ASSERT_ERR(ct_store_encode_request(CT_STORE_V2, &a, NULL, 0, &eb), CT_EPROTOCOL);

    /* Random garbage: every call either asks for more, fails, or consumes within len. */
    uint64_t x = 0x1234567;
    for (int round = 0; round < 20000; round++) {
        uint8_t g[48];
        size_t len = (size_t)(round % 48);
        for (size_t i = 0; i < len; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            g[i] = (uint8_t)x;
            if (i > 0 && (x & 0x300) == 0)
                g[i] = 0; /* short lengths are more interesting than huge ones */
        }
        uint8_t *copy = malloc(len ? len : 1);
        memcpy(copy, g, len);
        for (int d = CT_STORE_V1; d <= CT_STORE_V2; d++) {
            ssize_t r = ct_store_decode_request((ct_store_dialect_t)d, copy, len, NULL, &req, NULL,
                                                NULL, NULL);
            CT_ASSERT(r <= (ssize_t)len);
            if (r > 0) { /* then it must re-encode to exactly what it consumed */
                uint8_t out[64];
                CT_ASSERT_EQ(
                    ct_store_encode_request((ct_store_dialect_t)d, &req, out, sizeof out, NULL), r);
                CT_ASSERT(memcmp(out, copy, (size_t)r) == 0);
            }
        }
        for (int op = 0; op < CT_STORE_OP_COUNT; op++) {
            ssize_t r = ct_store_decode_response((ct_store_op_t)op, 2, copy, len, NULL, &resp, NULL,
                                                 NULL, NULL);
            CT_ASSERT(r <= (ssize_t)len);
        }
        free(copy);
    }
}

/* A list decoded across many calls with a cursor gives the same list as in one call. */
static void test_cursor_resumes(void)
{
    enum { N = 1000 };
    ct_store_bytes_t keys[N];
    char names[N][16];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "/key/%d", i);
        keys[i] = (ct_store_bytes_t){(const uint8_t *)names[i], strlen(names[i])};
    }
    ct_store_req_t req = {.op = CT_STORE_OP_WAIT, .key_array = keys, .nkeys = N};
    ssize_t n = ct_store_encode_request(CT_STORE_V2, &req, NULL, 0, NULL);
    uint8_t *buf = malloc((size_t)n);
    CT_ASSERT_EQ(ct_store_encode_request(CT_STORE_V2, &req, buf, (size_t)n, NULL), n);
    ct_store_cursor_t cur = {0};
    ct_store_req_t got;
    size_t len = 0;
    int calls = 0;
    for (;;) {
        size_t need = 0;
        ssize_t r = ct_store_decode_request(CT_STORE_V2, buf, len, NULL, &got, &cur, &need, NULL);
        calls++;
        if (r > 0) {
            CT_ASSERT_EQ(r, n);
            break;
        }
        CT_ASSERT_EQ(r, CT_STORE_NEED_MORE);
        CT_ASSERT(need > len);
        len += 7; /* odd-sized chunks cut items everywhere */
        if (len > (size_t)n)
            len = (size_t)n;
    }
    CT_ASSERT_EQ(got.keys.n, N);
    ct_store_list_iter_t it;
    ct_store_bytes_t k;
    ct_store_list_begin(&got.keys, &it);
    for (int i = 0; i < N; i++) {
        CT_ASSERT(ct_store_list_next(&it, &k, NULL));
        CT_ASSERT(k.len == keys[i].len && memcmp(k.data, keys[i].data, k.len) == 0);
    }
    CT_ASSERT(calls > 100);
    free(buf);
}

static void test_watch_event_and_auth(void)
{
    uint8_t buf[128];
    ct_store_watch_event_t ev = {.kind = CT_STORE_WATCH_UPDATED,
                                 .key = {(const uint8_t *)"/k", 2},
                                 .old_value = {(const uint8_t *)"a", 1},
                                 .new_value = {(const uint8_t *)"bc", 2}};
    size_t n = ct_store_encode_watch_event(&ev, buf, sizeof buf);
    uint8_t want[128];
    size_t wn = hex("00 0200000000000000 2f6b 0100000000000000 61 0200000000000000 6263", want,
                    sizeof want);
    CT_ASSERT_EQ(n, wn);
    CT_ASSERT(memcmp(buf, want, n) == 0);
    ct_store_watch_event_t got;
    for (size_t len = 0; len < n; len++)
        CT_ASSERT_EQ(ct_store_decode_watch_event(buf, len, NULL, &got, NULL, NULL),
                     CT_STORE_NEED_MORE);
    CT_ASSERT_EQ(ct_store_decode_watch_event(buf, n, NULL, &got, NULL, NULL), (ssize_t)n);
    CT_ASSERT_EQ(got.kind, CT_STORE_WATCH_UPDATED);
    CT_ASSERT(got.new_value.len == 2 && memcmp(got.new_value.data, "bc", 2) == 0);
    buf[0] = 7;
    CT_ASSERT_ERR(ct_store_decode_watch_event(buf, n, NULL, &got, NULL, NULL), CT_EPROTOCOL);

    uint8_t nonce[CT_STORE_AUTH_NONCE_LEN], back[CT_STORE_AUTH_NONCE_LEN];
    for (int i = 0; i < CT_STORE_AUTH_NONCE_LEN; i++)
        nonce[i] = (uint8_t)i;
    n = ct_store_encode_auth_hello(nonce, buf);
    CT_ASSERT_EQ(n, CT_STORE_AUTH_HELLO_LEN);
    CT_ASSERT_EQ(buf[0], 0xA5);
    CT_ASSERT(memcmp(buf + 1, "CTSA", 4) == 0);
    CT_ASSERT_EQ(buf[5], 1);
    for (size_t len = 0; len < n; len++)
        CT_ASSERT_EQ(ct_store_decode_auth_hello(buf, len, back, NULL), CT_STORE_NEED_MORE);
    CT_ASSERT_EQ(ct_store_decode_auth_hello(buf, n, back, NULL), (ssize_t)n);
    CT_ASSERT(memcmp(back, nonce, sizeof nonce) == 0);
    /* The hello can be neither a v1 nor a v2 request. */
    ct_store_op_t op;
    CT_ASSERT(!ct_store_op_from_code(CT_STORE_V1, buf[0], &op));
    CT_ASSERT(!ct_store_op_from_code(CT_STORE_V2, buf[0], &op));
    ct_errbuf_t eb = {{0}};
    buf[2] = 'X';
    CT_ASSERT_ERR(ct_store_decode_auth_hello(buf, 3, back, &eb), CT_EAUTH);
    buf[2] = 'T';
    buf[5] = 2;
    CT_ASSERT_ERR(ct_store_decode_auth_hello(buf, 6, back, &eb), CT_EAUTH);
    CT_ASSERT_ERR(ct_store_decode_auth_hello("\x03", 1, back, &eb), CT_EAUTH);

    n = ct_store_encode_auth_mac(CT_STORE_AUTH_PROOF, nonce, buf);
    CT_ASSERT_EQ(n, CT_STORE_AUTH_PROOF_LEN);
    CT_ASSERT_EQ(ct_store_decode_auth_mac(CT_STORE_AUTH_PROOF, buf, n - 1, back, NULL),
                 CT_STORE_NEED_MORE);
    CT_ASSERT_EQ(ct_store_decode_auth_mac(CT_STORE_AUTH_PROOF, buf, n, back, NULL), (ssize_t)n);
    CT_ASSERT_ERR(ct_store_decode_auth_mac(CT_STORE_AUTH_ACCEPT, buf, n, back, &eb), CT_EAUTH);
}

int main(void)
{
    CT_RUN(test_op_tables);
    CT_RUN(test_vectors_round_trip);
    CT_RUN(test_decoded_fields);
    CT_RUN(test_split_one_byte_at_a_time);
    CT_RUN(test_detect_dialect);
    CT_RUN(test_limits);
    CT_RUN(test_bad_input);
    CT_RUN(test_cursor_resumes);
    CT_RUN(test_watch_event_and_auth);
    return 0;
}
