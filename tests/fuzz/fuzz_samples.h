/*
 * fuzz_samples.h - well-formed store requests of every kind, encoded with the codec: the seed
 * material of the fuzzers (a mutation of a valid request reaches far deeper than random
 * bytes). Header-only: each harness includes it once.
 */
#ifndef FUZZ_SAMPLES_H
#define FUZZ_SAMPLES_H

#include <string.h>

#include "ct_store_codec.h"

/* Encodes sample i into buf; returns its length, or 0 when i is past the last sample. */
static size_t fuzz_sample(int i, ct_store_dialect_t *dialect, ct_store_op_t *op_out, uint8_t *buf,
                          size_t cap)
{
    static const ct_store_bytes_t keys[3] = {
        {(const uint8_t *)"/k", 2}, {(const uint8_t *)"init/", 5}, {(const uint8_t *)"/w/x", 4}};
    static const ct_store_bytes_t vals[3] = {
        {(const uint8_t *)"v", 1}, {(const uint8_t *)"12", 2}, {(const uint8_t *)"", 0}};
    int nops = CT_STORE_OP_COUNT;
    if (i < 0 || i >= 2 * nops)
        return 0;
    ct_store_dialect_t d = i < nops ? CT_STORE_V1 : CT_STORE_V2;
    ct_store_op_t op = (ct_store_op_t)(i % nops);
    if (ct_store_op_code(d, op) < 0)
        op = CT_STORE_OP_ADD;
    ct_store_req_t r = {.op = op,
                        .key = keys[i % 3],
                        .value = vals[i % 3],
                        .desired = vals[(i + 1) % 3],
                        .num = 1 + i % 3,
                        .num32 = op == CT_STORE_OP_VALIDATE ? CT_STORE_VALIDATE_MAGIC : 77,
                        .key_array = keys,
                        .value_array = vals,
                        .nkeys = 1 + (uint64_t)(i % 3)};
    ssize_t n = ct_store_encode_request(d, &r, buf, cap, NULL);
    if (n <= 0 || (size_t)n > cap)
        return 0;
    *dialect = d;
    *op_out = op;
    return (size_t)n;
}

#endif
