/*
 * comm_check.h - what the communicator tests compare against: deterministic inputs (a pure
 * function of case seed, rank and element index, so every rank can compute every other rank's
 * input without any exchange) and the CPU ring's documented allreduce, written again here from
 * ctworker.h's description (segments, and the fold that starts at the segment's own rank), not
 * taken from the implementation. Header-only, for the threaded test and the multi-process
 * worker.
 */
#ifndef COMM_CHECK_H
#define COMM_CHECK_H

#include <stdint.h>
#include <string.h>

#include "ctworker.h"

static inline uint64_t cc_mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Rank r's element i: a sign, a 23-bit mantissa and an exponent spread over 2^-12 .. 2^12, so
 * sums round differently in different orders (an implementation that adds in another order
 * fails the bitwise comparison). */
static inline float cc_input_f32(uint64_t seed, int rank, uint64_t i)
{
    uint64_t h = cc_mix(seed * 0x100000001B3ull ^ cc_mix(((uint64_t)rank << 48) ^ i));
    uint32_t mant = (uint32_t)(h & 0x7FFFFFu);
    uint32_t exp = 127u - 12u + (uint32_t)((h >> 23) % 25u);
    uint32_t sign = (uint32_t)(h >> 63) << 31;
    uint32_t u = sign | (exp << 23) | mant;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline double cc_input_f64(uint64_t seed, int rank, uint64_t i)
{
    /* A double that is not a float: the low mantissa bits matter too. */
    uint64_t h = cc_mix(seed ^ cc_mix(((uint64_t)rank << 40) ^ i ^ 0xD00Bull));
    return (double)cc_input_f32(seed, rank, i) * (1.0 + (double)(h >> 11) * 0x1p-60);
}

static inline float cc_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest, ties to even (inputs here are never NaN). */
static inline uint16_t cc_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline uint16_t cc_input_bf16(uint64_t seed, int rank, uint64_t i)
{
    return cc_f32_to_bf16(cc_input_f32(seed, rank, i));
}

/* Fills buf (count elements of dtype) with rank's input. */
static inline void cc_fill(void *buf, uint64_t count, ct_dtype_t dt, uint64_t seed, int rank)
{
    for (uint64_t i = 0; i < count; i++) {
        if (dt == CT_DTYPE_F64)
            ((double *)buf)[i] = cc_input_f64(seed, rank, i);
        else if (dt == CT_DTYPE_BF16)
            ((uint16_t *)buf)[i] = cc_input_bf16(seed, rank, i);
        else
            ((float *)buf)[i] = cc_input_f32(seed, rank, i);
    }
}

/* The segment (0..W-1) that element i of a count-element allreduce falls in: W segments in
 * order, the first count % W one element longer. */
static inline int cc_segment_of(uint64_t i, uint64_t count, int w)
{
    uint64_t base = count / (uint64_t)w, rem = count % (uint64_t)w;
    uint64_t big = rem * (base + 1); /* elements in the long segments */
    if (i < big)
        return (int)(i / (base + 1));
    return (int)(rem + (i - big) / base);
}

/* Element i of the documented result: the fold from the segment's rank k over k, k+1, ...,
 * k+W-1 (mod W), each addition rounded to the type; AVG then divides by W. */
static inline void cc_expect(void *out, uint64_t i, uint64_t count, ct_dtype_t dt, ct_comm_op_t op,
                             uint64_t seed, int w)
{
    int k = cc_segment_of(i, count, w);
    if (dt == CT_DTYPE_F64) {
        double acc = cc_input_f64(seed, k, i);
        for (int j = 1; j < w; j++)
            acc += cc_input_f64(seed, (k + j) % w, i);
        if (op == CT_COMM_AVG)
            acc /= (double)w;
        memcpy(out, &acc, sizeof acc);
    } else if (dt == CT_DTYPE_BF16) {
        uint16_t acc = cc_input_bf16(seed, k, i);
        for (int j = 1; j < w; j++)
            acc = cc_f32_to_bf16(cc_bf16_to_f32(acc) +
                                 cc_bf16_to_f32(cc_input_bf16(seed, (k + j) % w, i)));
        if (op == CT_COMM_AVG)
            acc = cc_f32_to_bf16(cc_bf16_to_f32(acc) / (float)w);
        memcpy(out, &acc, sizeof acc);
    } else {
        float acc = cc_input_f32(seed, k, i);
        for (int j = 1; j < w; j++)
            acc += cc_input_f32(seed, (k + j) % w, i);
        if (op == CT_COMM_AVG)
            acc /= (float)w;
        memcpy(out, &acc, sizeof acc);
    }
}

/* Compares buf with the documented result bit for bit; returns the first differing index or
 * -1, and the two values as raw bits in *got / *want. */
static inline int64_t cc_check(const void *buf, uint64_t count, ct_dtype_t dt, ct_comm_op_t op,
                               uint64_t seed, int w, uint64_t *got, uint64_t *want)
{
    size_t es = ct_dtype_size(dt);
    for (uint64_t i = 0; i < count; i++) {
        uint64_t e = 0, g = 0;
        cc_expect(&e, i, count, dt, op, seed, w);
        memcpy(&g, (const uint8_t *)buf + i * es, es);
        if (g != e) {
            *got = g;
            *want = e;
            return (int64_t)i;
        }
    }
    return -1;
}

#endif /* COMM_CHECK_H */
