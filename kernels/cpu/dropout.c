/*
 * dropout.c - dropout with regenerated masks, and the timeline mask. Both are their own
 * backward: the forward multiplies the activation by a mask, the backward multiplies the
 * gradient by the same mask, which for dropout is recomputed from (seed, stream, offset) with
 * the Philox generator instead of being stored.
 *
 * ct__dropout_span (and ct__keep_bits_span, the same decisions as bits, for TiSASRec's stored
 * interval masks) are shared with attention.c and tisas.c (declared in ct_kernels_cpu.h).
 * Generating the draws is the whole cost of dropout (ten rounds of 32x32->64-bit multiplies
 * per four draws), so on x86-64 a span runs several Philox blocks at once in vector registers:
 * sixteen with AVX-512 and eight with AVX2 where the CPU has them (checked at run time, so the
 * build stays portable; a span uses the widest that fits and the narrower ones on its tail),
 * otherwise four with SSE2 (part of the x86-64 baseline). The partial blocks at either end, and
 * other architectures, use the scalar ct_philox_block_at. All paths produce the same bits: the
 * vector code is the same integer arithmetic, and the factor is applied as the same float
 * multiply (test_dropout compares them with the scalar rule element by element, over lengths
 * and offsets that exercise every path).
 */
#include <string.h>

#include "ct_kernels.h"
#include "ct_kernels_cpu.h"
#include "ct_philox.h"

#if defined(__SSE2__)
#include <immintrin.h>

/* 16 consecutive elements starting at a block boundary: blocks b .. b+3 in the four lanes. */
static inline void ct_cpu_dropout__dropout16_sse2(float *out, const float *inp, __m128 p,
                                                  __m128 keep_scale, uint64_t seed, uint64_t stream,
                                                  uint64_t b)
{
    /* Structure of arrays: lane j of c[k] is word k of the counter of block b + j. */
    __m128i c0 = _mm_set_epi32((int)(uint32_t)(b + 3), (int)(uint32_t)(b + 2),
                               (int)(uint32_t)(b + 1), (int)(uint32_t)b);
    __m128i c1 = _mm_set_epi32((int)(uint32_t)((b + 3) >> 32), (int)(uint32_t)((b + 2) >> 32),
                               (int)(uint32_t)((b + 1) >> 32), (int)(uint32_t)(b >> 32));
    __m128i c2 = _mm_set1_epi32((int)(uint32_t)stream);
    __m128i c3 = _mm_set1_epi32((int)(uint32_t)(stream >> 32));
    const __m128i m0 = _mm_set1_epi32((int)CT_PHILOX_M0), m1 = _mm_set1_epi32((int)CT_PHILOX_M1);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        /* 64-bit products of lanes 0,2 (e) and 1,3 (o); then gather their low and high words
         * back into lane order. */
        __m128i e0 = _mm_mul_epu32(c0, m0), o0 = _mm_mul_epu32(_mm_srli_epi64(c0, 32), m0);
        __m128i e1 = _mm_mul_epu32(c2, m1), o1 = _mm_mul_epu32(_mm_srli_epi64(c2, 32), m1);
        __m128i lo0 = _mm_unpacklo_epi32(_mm_shuffle_epi32(e0, _MM_SHUFFLE(0, 0, 2, 0)),
                                         _mm_shuffle_epi32(o0, _MM_SHUFFLE(0, 0, 2, 0)));
        __m128i hi0 = _mm_unpacklo_epi32(_mm_shuffle_epi32(e0, _MM_SHUFFLE(0, 0, 3, 1)),
                                         _mm_shuffle_epi32(o0, _MM_SHUFFLE(0, 0, 3, 1)));
        __m128i lo1 = _mm_unpacklo_epi32(_mm_shuffle_epi32(e1, _MM_SHUFFLE(0, 0, 2, 0)),
                                         _mm_shuffle_epi32(o1, _MM_SHUFFLE(0, 0, 2, 0)));
        __m128i hi1 = _mm_unpacklo_epi32(_mm_shuffle_epi32(e1, _MM_SHUFFLE(0, 0, 3, 1)),
                                         _mm_shuffle_epi32(o1, _MM_SHUFFLE(0, 0, 3, 1)));
        /* ct_philox4x32_round: v0 = hi(M1 c2) ^ c1 ^ k0, v1 = lo(M1 c2),
         *                      v2 = hi(M0 c0) ^ c3 ^ k1, v3 = lo(M0 c0) */
        __m128i n0 = _mm_xor_si128(_mm_xor_si128(hi1, c1), _mm_set1_epi32((int)k0));
        __m128i n2 = _mm_xor_si128(_mm_xor_si128(hi0, c3), _mm_set1_epi32((int)k1));
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += CT_PHILOX_W0;
        k1 += CT_PHILOX_W1;
    }
    /* Back to draw order: block j's words are draws 4j .. 4j+3. */
    __m128i t0 = _mm_unpacklo_epi32(c0, c1), t1 = _mm_unpacklo_epi32(c2, c3);
    __m128i t2 = _mm_unpackhi_epi32(c0, c1), t3 = _mm_unpackhi_epi32(c2, c3);
    __m128i d[4] = {_mm_unpacklo_epi64(t0, t1), _mm_unpackhi_epi64(t0, t1),
                    _mm_unpacklo_epi64(t2, t3), _mm_unpackhi_epi64(t2, t3)};
    const __m128 unit = _mm_set1_ps(1.0f / 16777216.0f);
    for (int j = 0; j < 4; j++) {
        /* ct_philox_dropout_factor: (x >> 8) * 2^-24 >= p ? keep_scale : 0 */
        __m128 u = _mm_mul_ps(_mm_cvtepi32_ps(_mm_srli_epi32(d[j], 8)), unit);
        __m128 f = _mm_and_ps(_mm_cmpge_ps(u, p), keep_scale);
        _mm_storeu_ps(out + 4 * j, _mm_mul_ps(_mm_loadu_ps(inp + 4 * j), f));
    }
}

/* Draws of blocks b .. b+7 with AVX2, in draw order: d[j]'s low half holds block j's four draws,
 * its high half block 4 + j's. Every shuffle of the SSE2 version works within 128-bit lanes,
 * so this is that code twice as wide. */
__attribute__((target("avx2"))) static inline void
ct_cpu_dropout__philox8_avx2(__m256i d[4], uint64_t seed, uint64_t stream, uint64_t b)
{
    __m256i c0 =
        _mm256_set_epi32((int)(uint32_t)(b + 7), (int)(uint32_t)(b + 6), (int)(uint32_t)(b + 5),
                         (int)(uint32_t)(b + 4), (int)(uint32_t)(b + 3), (int)(uint32_t)(b + 2),
                         (int)(uint32_t)(b + 1), (int)(uint32_t)b);
    __m256i c1 = _mm256_set_epi32((int)(uint32_t)((b + 7) >> 32), (int)(uint32_t)((b + 6) >> 32),
                                  (int)(uint32_t)((b + 5) >> 32), (int)(uint32_t)((b + 4) >> 32),
                                  (int)(uint32_t)((b + 3) >> 32), (int)(uint32_t)((b + 2) >> 32),
                                  (int)(uint32_t)((b + 1) >> 32), (int)(uint32_t)(b >> 32));
    __m256i c2 = _mm256_set1_epi32((int)(uint32_t)stream);
    __m256i c3 = _mm256_set1_epi32((int)(uint32_t)(stream >> 32));
    const __m256i m0 = _mm256_set1_epi32((int)CT_PHILOX_M0);
    const __m256i m1 = _mm256_set1_epi32((int)CT_PHILOX_M1);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        __m256i e0 = _mm256_mul_epu32(c0, m0), o0 = _mm256_mul_epu32(_mm256_srli_epi64(c0, 32), m0);
        __m256i e1 = _mm256_mul_epu32(c2, m1), o1 = _mm256_mul_epu32(_mm256_srli_epi64(c2, 32), m1);
        __m256i lo0 = _mm256_unpacklo_epi32(_mm256_shuffle_epi32(e0, _MM_SHUFFLE(0, 0, 2, 0)),
                                            _mm256_shuffle_epi32(o0, _MM_SHUFFLE(0, 0, 2, 0)));
        __m256i hi0 = _mm256_unpacklo_epi32(_mm256_shuffle_epi32(e0, _MM_SHUFFLE(0, 0, 3, 1)),
                                            _mm256_shuffle_epi32(o0, _MM_SHUFFLE(0, 0, 3, 1)));
        __m256i lo1 = _mm256_unpacklo_epi32(_mm256_shuffle_epi32(e1, _MM_SHUFFLE(0, 0, 2, 0)),
                                            _mm256_shuffle_epi32(o1, _MM_SHUFFLE(0, 0, 2, 0)));
        __m256i hi1 = _mm256_unpacklo_epi32(_mm256_shuffle_epi32(e1, _MM_SHUFFLE(0, 0, 3, 1)),
                                            _mm256_shuffle_epi32(o1, _MM_SHUFFLE(0, 0, 3, 1)));
        __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32((int)k0));
        __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32((int)k1));
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += CT_PHILOX_W0;
        k1 += CT_PHILOX_W1;
    }
    __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpacklo_epi32(c2, c3);
    __m256i t2 = _mm256_unpackhi_epi32(c0, c1), t3 = _mm256_unpackhi_epi32(c2, c3);
    d[0] = _mm256_unpacklo_epi64(t0, t1);
    d[1] = _mm256_unpackhi_epi64(t0, t1);
    d[2] = _mm256_unpacklo_epi64(t2, t3);
    d[3] = _mm256_unpackhi_epi64(t2, t3);
}

/* ct_philox_dropout_factor's keep test on eight draws: (x >> 8) * 2^-24 >= p. */
__attribute__((target("avx2"))) static inline __m256 ct_cpu_dropout__keep8_avx2(__m256i d,
                                                                                __m256 pv)
{
    const __m256 unit = _mm256_set1_ps(1.0f / 16777216.0f);
    __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(d, 8)), unit);
    return _mm256_cmp_ps(u, pv, _CMP_GE_OQ);
}

/* 32 elements (blocks b .. b+7) with AVX2. */
__attribute__((target("avx2"))) static void
ct_cpu_dropout__dropout32_avx2(float *out, const float *inp, float p, float keep_scale,
                               uint64_t seed, uint64_t stream, uint64_t b)
{
    __m256i d[4];
    ct_cpu_dropout__philox8_avx2(d, seed, stream, b);
    const __m256 pv = _mm256_set1_ps(p), ks = _mm256_set1_ps(keep_scale);
    for (int j = 0; j < 4; j++) {
        __m256 f = _mm256_and_ps(ct_cpu_dropout__keep8_avx2(d[j], pv), ks);
        __m128 flo = _mm256_castps256_ps128(f), fhi = _mm256_extractf128_ps(f, 1);
        _mm_storeu_ps(out + 4 * j, _mm_mul_ps(_mm_loadu_ps(inp + 4 * j), flo));
        _mm_storeu_ps(out + 16 + 4 * j, _mm_mul_ps(_mm_loadu_ps(inp + 16 + 4 * j), fhi));
    }
}

/* The keep decisions of draws 4b .. 4b+31 as 32 bits (bit k = draw 4b + k). */
__attribute__((target("avx2"))) static uint32_t
ct_cpu_dropout__keep32_avx2(float p, uint64_t seed, uint64_t stream, uint64_t b)
{
    __m256i d[4];
    ct_cpu_dropout__philox8_avx2(d, seed, stream, b);
    const __m256 pv = _mm256_set1_ps(p);
    uint32_t lo = 0, hi = 0;
    for (int j = 0; j < 4; j++) {
        /* lane bits 0..3 are block j's draws (4j..4j+3), bits 4..7 block 4 + j's */
        uint32_t m = (uint32_t)_mm256_movemask_ps(ct_cpu_dropout__keep8_avx2(d[j], pv));
        lo |= (m & 0xFu) << (4 * j);
        hi |= (m >> 4) << (4 * j);
    }
    return lo | hi << 16;
}

/* Draws of blocks b .. b+15 with AVX-512, in draw order (out[v] = draws 16v .. 16v+15). The
 * round is the SSE2 one: 64-bit products of the even lanes and of the odd lanes shifted down,
 * their high and low words blended back into lane order with a mask. */
__attribute__((target("avx512f"))) static inline void
ct_cpu_dropout__philox16_avx512(__m512i out[4], uint64_t seed, uint64_t stream, uint64_t b)
{
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i lo_b = _mm512_set1_epi32((int)(uint32_t)b);
    __m512i c0 = _mm512_add_epi32(lo_b, iota);
    /* the carry into the high word where b + j wraps past 2^32 */
    const __mmask16 carry = _mm512_cmplt_epu32_mask(c0, lo_b);
    __m512i c1 =
        _mm512_mask_add_epi32(_mm512_set1_epi32((int)(uint32_t)(b >> 32)), carry,
                              _mm512_set1_epi32((int)(uint32_t)(b >> 32)), _mm512_set1_epi32(1));
    __m512i c2 = _mm512_set1_epi32((int)(uint32_t)stream);
    __m512i c3 = _mm512_set1_epi32((int)(uint32_t)(stream >> 32));
    const __m512i m0 = _mm512_set1_epi32((int)CT_PHILOX_M0);
    const __m512i m1 = _mm512_set1_epi32((int)CT_PHILOX_M1);
    const __mmask16 odd = 0xAAAA;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        __m512i e0 = _mm512_mul_epu32(c0, m0), o0 = _mm512_mul_epu32(_mm512_srli_epi64(c0, 32), m0);
        __m512i e1 = _mm512_mul_epu32(c2, m1), o1 = _mm512_mul_epu32(_mm512_srli_epi64(c2, 32), m1);
        __m512i lo0 = _mm512_mask_blend_epi32(odd, e0, _mm512_slli_epi64(o0, 32));
        __m512i hi0 = _mm512_mask_blend_epi32(odd, _mm512_srli_epi64(e0, 32), o0);
        __m512i lo1 = _mm512_mask_blend_epi32(odd, e1, _mm512_slli_epi64(o1, 32));
        __m512i hi1 = _mm512_mask_blend_epi32(odd, _mm512_srli_epi64(e1, 32), o1);
        __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32((int)k0));
        __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32((int)k1));
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += CT_PHILOX_W0;
        k1 += CT_PHILOX_W1;
    }
    /* per 128-bit lane q: d[j] = block 4q + j's four draws; then gather the lanes so that
     * out[v] holds blocks 4v .. 4v+3 */
    __m512i t0 = _mm512_unpacklo_epi32(c0, c1), t1 = _mm512_unpacklo_epi32(c2, c3);
    __m512i t2 = _mm512_unpackhi_epi32(c0, c1), t3 = _mm512_unpackhi_epi32(c2, c3);
    __m512i d0 = _mm512_unpacklo_epi64(t0, t1), d1 = _mm512_unpackhi_epi64(t0, t1);
    __m512i d2 = _mm512_unpacklo_epi64(t2, t3), d3 = _mm512_unpackhi_epi64(t2, t3);
    __m512i x = _mm512_shuffle_i32x4(d0, d1, _MM_SHUFFLE(1, 0, 1, 0));
    __m512i y = _mm512_shuffle_i32x4(d2, d3, _MM_SHUFFLE(1, 0, 1, 0));
    __m512i z = _mm512_shuffle_i32x4(d0, d1, _MM_SHUFFLE(3, 2, 3, 2));
    __m512i w = _mm512_shuffle_i32x4(d2, d3, _MM_SHUFFLE(3, 2, 3, 2));
    out[0] = _mm512_shuffle_i32x4(x, y, _MM_SHUFFLE(2, 0, 2, 0));
    out[1] = _mm512_shuffle_i32x4(x, y, _MM_SHUFFLE(3, 1, 3, 1));
    out[2] = _mm512_shuffle_i32x4(z, w, _MM_SHUFFLE(2, 0, 2, 0));
    out[3] = _mm512_shuffle_i32x4(z, w, _MM_SHUFFLE(3, 1, 3, 1));
}

__attribute__((target("avx512f"))) static inline __mmask16 ct_cpu_dropout__keep16_avx512(__m512i d,
                                                                                         __m512 pv)
{
    const __m512 unit = _mm512_set1_ps(1.0f / 16777216.0f);
    __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(d, 8)), unit);
    return _mm512_cmp_ps_mask(u, pv, _CMP_GE_OQ);
}

/* 64 elements (blocks b .. b+15) with AVX-512: out = inp * (keep ? keep_scale : 0), the
 * multiply done as in the other paths (so NaN and signed zeros come out alike). */
__attribute__((target("avx512f"))) static void
ct_cpu_dropout__dropout64_avx512(float *out, const float *inp, float p, float keep_scale,
                                 uint64_t seed, uint64_t stream, uint64_t b)
{
    __m512i d[4];
    ct_cpu_dropout__philox16_avx512(d, seed, stream, b);
    const __m512 pv = _mm512_set1_ps(p), ks = _mm512_set1_ps(keep_scale);
    for (int v = 0; v < 4; v++) {
        __m512 f = _mm512_maskz_mov_ps(ct_cpu_dropout__keep16_avx512(d[v], pv), ks);
        _mm512_storeu_ps(out + 16 * v, _mm512_mul_ps(_mm512_loadu_ps(inp + 16 * v), f));
    }
}

/* The keep decisions of draws 4b .. 4b+63 as 64 bits. */
__attribute__((target("avx512f"))) static uint64_t
ct_cpu_dropout__keep64_avx512(float p, uint64_t seed, uint64_t stream, uint64_t b)
{
    __m512i d[4];
    ct_cpu_dropout__philox16_avx512(d, seed, stream, b);
    const __m512 pv = _mm512_set1_ps(p);
    uint64_t m = 0;
    for (int v = 0; v < 4; v++)
        m |= (uint64_t)ct_cpu_dropout__keep16_avx512(d[v], pv) << (16 * v);
    return m;
}
#endif

/* One block's worth (or less) of the scalar rule, for the ends of a span. */
static inline int64_t ct_cpu_dropout__dropout_scalar(float *out, const float *inp, int64_t i,
                                                     int64_t n, float p, float keep_scale,
                                                     uint64_t seed, uint64_t stream, uint64_t first)
{
    uint64_t k = first + (uint64_t)i;
    ct_philox_block_t b = ct_philox_block_at(seed, stream, k / 4);
    for (unsigned lane = (unsigned)(k % 4); lane < 4 && i < n; lane++, i++)
        out[i] = inp[i] * ct_philox_dropout_factor(b.v[lane], p, keep_scale);
    return i;
}

void ct__dropout_span(float *out, const float *inp, int64_t n, float p, float keep_scale,
                      uint64_t seed, uint64_t stream, uint64_t first)
{
    int64_t i = 0;
    if (n > 0 && first % 4 != 0)
        i = ct_cpu_dropout__dropout_scalar(out, inp, 0, n, p, keep_scale, seed, stream, first);
#if defined(__SSE2__)
    if (__builtin_cpu_supports("avx512f"))
        for (; i + 64 <= n; i += 64)
            ct_cpu_dropout__dropout64_avx512(out + i, inp + i, p, keep_scale, seed, stream,
                                             (first + (uint64_t)i) / 4);
    if (__builtin_cpu_supports("avx2"))
        for (; i + 32 <= n; i += 32)
            ct_cpu_dropout__dropout32_avx2(out + i, inp + i, p, keep_scale, seed, stream,
                                           (first + (uint64_t)i) / 4);
    const __m128 pv = _mm_set1_ps(p), ks = _mm_set1_ps(keep_scale);
    for (; i + 16 <= n; i += 16)
        ct_cpu_dropout__dropout16_sse2(out + i, inp + i, pv, ks, seed, stream,
                                       (first + (uint64_t)i) / 4);
#endif
    while (i < n)
        i = ct_cpu_dropout__dropout_scalar(out, inp, i, n, p, keep_scale, seed, stream, first);
}

void ct__keep_bits_span(uint32_t *bits, int64_t n, float p, uint64_t seed, uint64_t stream,
                        uint64_t first)
{
    const int64_t words = (n + 31) / 32;
    memset(bits, 0, (size_t)words * sizeof *bits);
    int64_t k = 0;
#if defined(__SSE2__)
    /* Whole vectors only where element k's draw starts a block and k starts a word. */
    if (first % 4 == 0) {
        if (__builtin_cpu_supports("avx512f"))
            for (; k + 64 <= n; k += 64) {
                uint64_t m =
                    ct_cpu_dropout__keep64_avx512(p, seed, stream, (first + (uint64_t)k) / 4);
                bits[k / 32] = (uint32_t)m;
                bits[k / 32 + 1] = (uint32_t)(m >> 32);
            }
        if (__builtin_cpu_supports("avx2"))
            for (; k + 32 <= n; k += 32)
                bits[k / 32] =
                    ct_cpu_dropout__keep32_avx2(p, seed, stream, (first + (uint64_t)k) / 4);
    }
#endif
    while (k < n) {
        uint64_t x = first + (uint64_t)k;
        ct_philox_block_t b = ct_philox_block_at(seed, stream, x / 4);
        for (unsigned lane = (unsigned)(x % 4); lane < 4 && k < n; lane++, k++)
            if (ct_philox_dropout_factor(b.v[lane], p, 1.0f) != 0.0f)
                bits[k / 32] |= 1u << (k % 32);
    }
}

void ct_dropout_cpu(float *out, const float *inp, int64_t n, ct_dropout_t drop)
{
    if (drop.p <= 0.0f) {
        if (out != inp)
            memmove(out, inp, (size_t)n * sizeof *out);
        return;
    }
    ct__dropout_span(out, inp, n, drop.p, 1.0f / (1.0f - drop.p), drop.seed, drop.stream,
                     drop.offset);
}

void ct_timeline_mask_cpu(float *out, const float *inp, const int32_t *seq, int N, int C)
{
    for (int r = 0; r < N; r++) {
        float *o = out + (size_t)r * C;
        const float *x = inp + (size_t)r * C;
        if (seq[r] != 0) {
            if (o != x)
                memcpy(o, x, (size_t)C * sizeof *o);
        } else {
            /* Written as zeros rather than x * 0, which keeps NaN/inf of padding rows out. */
            memset(o, 0, (size_t)C * sizeof *o);
        }
    }
}
