/*
 * test_worker_rng.c - ct_rng: its draws are exactly those of the kernels' Philox fill
 * (ct_rng_u32_cpu, itself checked against known answers in tests/kernels), from any offset;
 * ct_rng_below stays in range for every size class and is unbiased where a modulo reduction
 * would be badly biased; uniform floats match the kernels' and stay in [0, 1).
 */
#include "ct_kernels.h"
#include "ct_test.h"
#include "ctworker.h"

static void test_matches_kernels(void)
{
    static const uint64_t seeds[] = {0, 1, 0x123456789abcdefULL, UINT64_MAX};
    static const uint64_t offsets[] = {0, 1, 3, 4, 5, 1000001};
    for (size_t s = 0; s < 4; s++) {
        for (size_t o = 0; o < 6; o++) {
            uint64_t stream = CT_RNG_STREAM(CT_RNG_PURPOSE_SHUFFLE, s * 7 + o);
            uint32_t want[37];
            float fwant[37];
            ct_rng_u32_cpu(want, 37, seeds[s], stream, offsets[o]);
            ct_rng_uniform_cpu(fwant, 37, seeds[s], stream, offsets[o]);
            ct_rng_t r, f;
            ct_rng_init(&r, seeds[s], stream, offsets[o]);
            ct_rng_init(&f, seeds[s], stream, offsets[o]);
            for (int i = 0; i < 37; i++) {
                CT_ASSERT_EQ_U64(ct_rng_u32(&r), want[i]);
                float u = ct_rng_uniform(&f);
                CT_ASSERT(u == fwant[i] && u >= 0.0f && u < 1.0f);
            }
            CT_ASSERT_EQ_U64(r.offset, offsets[o] + 37);
            ct_rng_init(&r, seeds[s], stream, offsets[o]);
            CT_ASSERT_EQ_U64(ct_rng_u64(&r), want[0] | (uint64_t)want[1] << 32);
        }
    }
    CT_ASSERT_EQ_U64(CT_RNG_STREAM(2, 5), (2ULL << 48) | 5);
    CT_ASSERT_EQ_U64(CT_RNG_STREAM(1, 1ULL << 50), 1ULL << 48); /* sub-key keeps 48 bits */
}

static void test_below_in_range(void)
{
    static const uint64_t ns[] = {2, 3, 5, 7, 10, 1000, (1ULL << 31) + 1, (1ULL << 32) - 1,
                                  1ULL << 32, (1ULL << 32) + 1, (1ULL << 40) + 3,
                                  (1ULL << 63) + 5, UINT64_MAX};
    ct_rng_t r;
    ct_rng_init(&r, 99, 1, 0);
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        uint64_t max = 0;
        for (int k = 0; k < 4000; k++) {
            uint64_t x = ct_rng_below(&r, ns[i]);
            CT_ASSERT_MSG(x < ns[i], "%llu >= %llu", (unsigned long long)x,
                          (unsigned long long)ns[i]);
            max = x > max ? x : max;
        }
        CT_ASSERT(max >= ns[i] / 2); /* the upper half is reached */
    }
    uint64_t before = r.offset;
    CT_ASSERT_EQ(ct_rng_below(&r, 0), 0);
    CT_ASSERT_EQ(ct_rng_below(&r, 1), 0);
    CT_ASSERT_EQ_U64(r.offset, before); /* no draw spent on a certain result */
}

/* n = 3 * 2^k just below a power of two: x % n would put half the mass on the first third
 * (2/4 instead of 1/3); an unbiased draw puts 1/3 there. 200000 draws give a standard error
 * of 0.001, so a tolerance of 0.01 is ten of them. */
static void check_unbiased(uint64_t n, uint64_t seed)
{
    ct_rng_t r;
    ct_rng_init(&r, seed, 3, 0);
    const int draws = 200000;
    int low = 0;
    for (int i = 0; i < draws; i++)
        low += ct_rng_below(&r, n) < n / 3;
    double frac = (double)low / draws;
    CT_ASSERT_CLOSE(frac, 1.0 / 3.0, 0.01, 0);
}

static void test_below_unbiased(void)
{
    check_unbiased(3ULL << 30, 5);  /* Lemire path, rejection zone of 1/4 */
    check_unbiased(3ULL << 62, 6);  /* masked path */
    /* The rejection actually happens on the Lemire path (about 1 draw in 4 is rejected). */
    ct_rng_t r;
    ct_rng_init(&r, 7, 3, 0);
    for (int i = 0; i < 10000; i++)
        ct_rng_below(&r, 3ULL << 30);
    CT_ASSERT_GT(r.offset, 12000);
    CT_ASSERT_LT(r.offset, 14500);
    /* Small n: each value of 0..5 about equally often. */
    int count[6] = {0};
    ct_rng_init(&r, 8, 3, 0);
    for (int i = 0; i < 60000; i++)
        count[ct_rng_below(&r, 6)]++;
    for (int v = 0; v < 6; v++)
        CT_ASSERT_CLOSE(count[v], 10000, 500, 0); /* 500 = about 5 standard errors */
}

int main(void)
{
    CT_RUN(test_matches_kernels);
    CT_RUN(test_below_in_range);
    CT_RUN(test_below_unbiased);
    return 0;
}
