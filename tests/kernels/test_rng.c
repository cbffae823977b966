/*
 * test_rng.c - the CPU Philox generator: the published Philox4x32-10 known-answer vectors
 * (Random123's kat_vectors), the project's (seed, stream, index) mapping, and the property
 * resume depends on: a buffer filled in pieces at any offsets equals one filled at once.
 */
#include "ct_kernels.h"
#include "ct_philox.h"
#include "ct_test.h"

static void test_known_answers(void)
{
    static const struct {
        uint32_t ctr[4], key[2], want[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        ct_philox_block_t c = {{kat[i].ctr[0], kat[i].ctr[1], kat[i].ctr[2], kat[i].ctr[3]}};
        ct_philox_block_t r = ct_philox4x32_10(c, kat[i].key[0], kat[i].key[1]);
        for (int l = 0; l < 4; l++)
            CT_ASSERT_EQ_U64(r.v[l], kat[i].want[l]);
    }
}

static void test_mapping(void)
{
    /* seed and stream split into their 32-bit halves as documented in ct_philox.h. */
    uint64_t seed = 0x299f31d0a4093822ull, stream = 0x0370734413198a2eull;
    uint64_t block = 0x85a308d3243f6a88ull;
    ct_philox_block_t r = ct_philox_block_at(seed, stream, block);
    CT_ASSERT_EQ_U64(r.v[0], 0xd16cfe09);
    CT_ASSERT_EQ_U64(r.v[3], 0x24126ea1);

    /* Draw k is lane k % 4 of block k / 4 (draw indices are 64-bit, so blocks stay below
     * 2^62): a fill starting at lane 2 takes lanes 2 and 3, then the next block. */
    uint64_t b = 0x05a308d3243f6a88ull;
    ct_philox_block_t first = ct_philox_block_at(seed, stream, b);
    ct_philox_block_t next = ct_philox_block_at(seed, stream, b + 1);
    uint32_t out[6];
    ct_rng_u32_cpu(out, 6, seed, stream, b * 4 + 2);
    CT_ASSERT_EQ_U64(out[0], first.v[2]);
    CT_ASSERT_EQ_U64(out[1], first.v[3]);
    CT_ASSERT_EQ_U64(out[2], next.v[0]);
    CT_ASSERT_EQ_U64(out[5], next.v[3]);
}

static void test_pieces_equal_whole(void)
{
    enum { N = 1000 };
    uint32_t whole[N], pieces[N];
    ct_rng_u32_cpu(whole, N, 42, 7, 13);
    const int cuts[] = {0, 1, 2, 5, 8, 9, 100, 333, 334, 998, N};
    for (size_t i = 0; i + 1 < sizeof cuts / sizeof cuts[0]; i++)
        ct_rng_u32_cpu(pieces + cuts[i], cuts[i + 1] - cuts[i], 42, 7, 13 + (uint64_t)cuts[i]);
    CT_ASSERT(memcmp(whole, pieces, sizeof whole) == 0);

    /* Different streams and seeds give different numbers. */
    uint32_t other[N];
    ct_rng_u32_cpu(other, N, 42, 8, 13);
    CT_ASSERT(memcmp(whole, other, sizeof whole) != 0);
    ct_rng_u32_cpu(other, N, 43, 7, 13);
    CT_ASSERT(memcmp(whole, other, sizeof whole) != 0);
}

static void test_uniform_range_and_moments(void)
{
    enum { N = 1 << 16 };
    static float u[N];
    static uint32_t raw[N];
    ct_rng_uniform_cpu(u, N, 1, 2, 3);
    ct_rng_u32_cpu(raw, N, 1, 2, 3);
    double sum = 0, sumsq = 0;
    for (int i = 0; i < N; i++) {
        CT_ASSERT(u[i] >= 0.0f && u[i] < 1.0f);
        CT_ASSERT(u[i] == (float)(raw[i] >> 8) / 16777216.0f);
        sum += u[i];
        sumsq += (double)u[i] * u[i];
    }
    /* Mean 1/2 and variance 1/12; with 65536 draws the standard error of the mean is
     * 0.0011, so 0.01 is a 9-sigma bound that a broken generator still fails. */
    double mean = sum / N, var = sumsq / N - mean * mean;
    CT_ASSERT_CLOSE(mean, 0.5, 0.01, 0);
    CT_ASSERT_CLOSE(var, 1.0 / 12.0, 0.005, 0);
    CT_ASSERT_CLOSE(ct_philox_to_unit_float(0xffffffffu), 16777215.0 / 16777216.0, 0, 0);
}

int main(void)
{
    CT_RUN(test_known_answers);
    CT_RUN(test_mapping);
    CT_RUN(test_pieces_equal_whole);
    CT_RUN(test_uniform_range_and_moments);
    return 0;
}
