/*
 * ct_kernels_cpu.h - helpers shared between the files of kernels/cpu and nothing else (not
 * installed, not for callers of ct_kernels.h).
 */
#ifndef CT_KERNELS_CPU_H
#define CT_KERNELS_CPU_H

#include <stdint.h>

/* The loops of the ops are compiled for AVX-512 and AVX2 as well as the x86-64 baseline, the
 * best chosen when the program loads (GCC's function multi-versioning, ifunc), so one portable
 * binary vectorizes as wide as the CPU allows. The versions compute the same bits: ISO C mode
 * forbids contracting a * b + c into an FMA, and without -ffast-math the compiler never
 * reorders a float sum (the eight-accumulator sums below are eight independent chains in every
 * version), so wider vectors only do the same operations more at a time. (Measured at
 * TiSASRec's sizes: the fused attention loops ran 5x faster than the SSE2 baseline build.) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CT__MULTIVERSION __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CT__MULTIVERSION
#endif

/* out[i] = inp[i] * (keep ? keep_scale : 0) with the keep decision of draw first + i of
 * (seed, stream) (ct_philox_dropout_factor). out may equal inp. */
void ct__dropout_span(float *out, const float *inp, int64_t n, float p, float keep_scale,
                      uint64_t seed, uint64_t stream, uint64_t first);

/* bits[0 .. ceil(n/32)) <- the keep decisions of draws first .. first+n-1 of (seed, stream):
 * bit k % 32 of word k / 32 is 1 iff element k is kept (ct_philox_dropout_factor != 0); the
 * bits past n in the last word are 0. */
void ct__keep_bits_span(uint32_t *bits, int64_t n, float p, uint64_t seed, uint64_t stream,
                        uint64_t first);

/* ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)): how eight partial sums are combined. */
static inline double ct__combine8_f64(const double *a)
{
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* Sums with eight partial accumulators: element k goes to accumulator k % 8, and the eight
 * are combined pairwise, ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)). A fixed order, so results are
 * the same on every run, but not a serial chain: the compiler keeps the partials in a vector
 * register instead of waiting on one dependent add per element. Used for the row sums of
 * layernorm and attention (rows of 50 to a few hundred elements). */
static inline double ct__sum8_f64(const float *x, int n)
{
    double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            a[k] += (double)x[i + k];
    for (int k = 0; i < n; i++, k++)
        a[k] += (double)x[i];
    return ct__combine8_f64(a);
}

/* The same in float, for the attention rows. */
static inline float ct__sum8_f32(const float *x, int n)
{
    float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            a[k] += x[i + k];
    for (int k = 0; i < n; i++, k++)
        a[k] += x[i];
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

static inline float ct__dot8_f32(const float *x, const float *y, int n)
{
    float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            a[k] += x[i + k] * y[i + k];
    for (int k = 0; i < n; i++, k++)
        a[k] += x[i] * y[i];
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* e^x for x <= 0, the softmaxes' x - max: Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2,
 * Cephes's degree-6 polynomial for e^r (2 ulp at most against the exact value), times 2^n
 * made from the exponent bits; 0 below -87.3 (where e^x leaves the normal floats). Plain float
 * arithmetic, no library call and no branch, so a loop of these vectorizes in every version
 * of ct__MULTIVERSION - libm's expf does not, and was 5% of a SASRec step. Every version
 * computes the same bits (the operations are the same; nothing is contracted or reordered). */
static inline float ct__exp_nonpos(float x)
{
    const float big = 12582912.0f; /* 1.5 * 2^23: adding and subtracting it rounds to an int */
    float xc = x < -87.3f ? -87.3f : x;
    float n = (xc * 1.44269504088896341f + big) - big;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float e = p * (r * r) + r + 1.0f;
    union {
        int32_t i;
        float f;
    } two = {.i = (int32_t)((uint32_t)((int32_t)n + 127) << 23)}; /* a NaN x: no signed shift */
    return x < -87.3f ? 0.0f : e * two.f;
}

/* max of x[0..n-1], n >= 1 (the order cannot change a maximum). */
static inline float ct__max_f32(const float *x, int n)
{
    float m = x[0];
    for (int i = 1; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

#endif /* CT_KERNELS_CPU_H */
