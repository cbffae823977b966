/*
 * fuzz_store_codec.c - fuzz target for the store codec (libFuzzer entry point).
 *
 * Checks, for any input: no decoder reads outside the input or crashes; a request that decodes
 * re-encodes to exactly the bytes it consumed; decoding in two steps with a cursor gives the
 * same answer as in one step; NEED_MORE always asks for more than it was given.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_store_codec.h"
#include "fuzz_samples.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t ct_fuzz_seed(int i, uint8_t *buf, size_t cap);
void ct_fuzz_teardown(void);

#define FUZZ_CHECK(cond)                                                                        \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            fprintf(stderr, "fuzz_store_codec: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                            \
        }                                                                                       \
    } while (0)

static const ct_store_limits_t small_limits = {
    .max_key_len = 64, .max_value_len = 256, .max_keys = 16, .max_message_len = 4096};

static void one_request(ct_store_dialect_t d, const uint8_t *data, size_t size,
                        const ct_store_limits_t *lim)
{
    ct_store_req_t req, again;
    size_t need = 0;
    ssize_t r = ct_store_decode_request(d, data, size, lim, &req, NULL, &need, NULL);
    FUZZ_CHECK(r <= (ssize_t)size);
    if (r == CT_STORE_NEED_MORE)
        FUZZ_CHECK(need > size);
    if (r > 0) {
        static uint8_t out[1 << 16];
        ssize_t w = ct_store_encode_request(d, &req, out, sizeof out, NULL);
        FUZZ_CHECK(w == r);
        FUZZ_CHECK(memcmp(out, data, (size_t)r) == 0);
    }
    /* Two steps with a cursor agree with one step. */
    size_t half = size / 2;
    ct_store_cursor_t cur = {0};
    ssize_t r1 = ct_store_decode_request(d, data, half, lim, &again, &cur, NULL, NULL);
    if (r1 == CT_STORE_NEED_MORE) {
        ssize_t r2 = ct_store_decode_request(d, data, size, lim, &again, &cur, NULL, NULL);
        FUZZ_CHECK(r2 == r || (r2 < 0 && r < 0));
        if (r2 > 0)
            FUZZ_CHECK(again.keys.n == req.keys.n && again.keys.nbytes == req.keys.nbytes);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int d = CT_STORE_V1; d <= CT_STORE_V2; d++) {
        one_request((ct_store_dialect_t)d, data, size, NULL);
        one_request((ct_store_dialect_t)d, data, size, &small_limits);
    }
    ct_store_dialect_t dd;
    int det = ct_store_detect_dialect(data, size, &dd);
    FUZZ_CHECK(det == 0 || det == 1);
    if (size > 0) {
        /* Replies: the first byte picks the op and the key count. */
        ct_store_op_t op = (ct_store_op_t)(data[0] % CT_STORE_OP_COUNT);
        ct_store_resp_t resp;
        size_t need = 0;
        ct_store_cursor_t cur = {0};
        ssize_t r = ct_store_decode_response(op, data[0] >> 5, data + 1, size - 1, NULL, &resp,
                                             &cur, &need, NULL);
        FUZZ_CHECK(r <= (ssize_t)(size - 1));
        if (r == CT_STORE_NEED_MORE)
            FUZZ_CHECK(need > size - 1);
        if (r > 0) {
            static uint8_t out[1 << 16];
            ssize_t w = ct_store_encode_response(&resp, out, sizeof out, NULL);
            FUZZ_CHECK(w == r && memcmp(out, data + 1, (size_t)r) == 0);
        }
    }
    ct_store_watch_event_t ev;
    ssize_t r = ct_store_decode_watch_event(data, size, NULL, &ev, NULL, NULL);
    FUZZ_CHECK(r <= (ssize_t)size);
    uint8_t nonce[CT_STORE_AUTH_NONCE_LEN], mac[CT_STORE_AUTH_MAC_LEN];
    FUZZ_CHECK(ct_store_decode_auth_hello(data, size, nonce, NULL) <= (ssize_t)size);
    FUZZ_CHECK(ct_store_decode_auth_mac(CT_STORE_AUTH_PROOF, data, size, mac, NULL) <=
               (ssize_t)size);
    return 0;
}

size_t ct_fuzz_seed(int i, uint8_t *buf, size_t cap)
{
    ct_store_dialect_t d;
    ct_store_op_t op;
    return fuzz_sample(i, &d, &op, buf, cap);
}

void ct_fuzz_teardown(void) {}
