/*
 * test_ctrain_synth.c - the synthetic dataset: deterministic in its options, the documented
 * structure really is there (a short-gap step follows one successor map, a long-gap step
 * follows the map applied twice), timestamps scale to the documented intervals, and the spec
 * parser accepts and rejects what it should.
 */
#include <stdlib.h>

#include "ctrain_data.h"
#include "ct_test.h"

static void test_deterministic(void)
{
    ctrain_synth_opts_t o = CTRAIN_SYNTH_OPTS_DEFAULT;
    o.num_users = 200;
    ctrain_dataset_t a, b;
    CT_ASSERT_OK(ctrain_data_synthetic(&a, &o, NULL));
    CT_ASSERT_OK(ctrain_data_synthetic(&b, &o, NULL));
    CT_ASSERT_EQ(a.num_interactions, b.num_interactions);
    CT_ASSERT(memcmp(a.items, b.items, (size_t)a.num_interactions * 4) == 0);
    CT_ASSERT(memcmp(a.times, b.times, (size_t)a.num_interactions * 8) == 0);
    ctrain_data_free(&b);
    o.seed = 2;
    CT_ASSERT_OK(ctrain_data_synthetic(&b, &o, NULL));
    CT_ASSERT(a.num_interactions != b.num_interactions ||
              memcmp(a.items, b.items, (size_t)a.num_interactions * 4) != 0);
    CT_ASSERT_EQ(a.num_eval_users, 200); /* every user has >= 5 interactions */
    ctrain_data_free(&a);
    ctrain_data_free(&b);
}

/* Most frequent value of counts[item * (I+1) + next] per item. */
static int32_t mode_of(const int32_t *counts, int32_t I, int32_t item)
{
    int32_t best = 0;
    for (int32_t j = 1; j <= I; j++) {
        if (counts[item * (I + 1) + j] > counts[item * (I + 1) + best])
            best = j;
    }
    return best;
}

static void test_structure(void)
{
    ctrain_synth_opts_t o = CTRAIN_SYNTH_OPTS_DEFAULT; /* 1000 users, 500 items, len 40, noise 0.15 */
    ctrain_dataset_t ds;
    CT_ASSERT_OK(ctrain_data_synthetic(&ds, &o, NULL));
    int32_t I = ds.num_items;
    int32_t *after_short = calloc((size_t)(I + 1) * (I + 1), sizeof(int32_t));
    int32_t *after_long = calloc((size_t)(I + 1) * (I + 1), sizeof(int32_t));
    int64_t steps = 0;
    for (int32_t u = 1; u <= ds.num_users; u++) {
        int64_t s = ds.user_start[u], e = ds.user_start[u + 1];
        for (int64_t k = s + 1; k + 1 < e; k++) {
            int64_t gap = ds.time_scaled[k] - ds.time_scaled[k - 1];
            /* Scaled gaps are 1..5 (short) or 30..229 (long), per the documented generator. */
            CT_ASSERT_MSG((gap >= 1 && gap <= 5) || (gap >= 30 && gap <= 229), "gap %lld",
                          (long long)gap);
            int32_t *c = gap <= 5 ? after_short : after_long;
            c[ds.items[k] * (I + 1) + ds.items[k + 1]]++;
            steps++;
        }
    }
    /* Recover the successor map from short-gap steps, then check how often each rule holds. */
    int64_t short_ok = 0, short_n = 0, long_ok = 0, long_n = 0;
    int32_t *succ = calloc((size_t)I + 1, sizeof(int32_t));
    for (int32_t i = 1; i <= I; i++)
        succ[i] = mode_of(after_short, I, i);
    for (int32_t i = 1; i <= I; i++) {
        for (int32_t j = 1; j <= I; j++) {
            short_n += after_short[i * (I + 1) + j];
            long_n += after_long[i * (I + 1) + j];
            if (j == succ[i])
                short_ok += after_short[i * (I + 1) + j];
            if (succ[i] != 0 && j == succ[succ[i]])
                long_ok += after_long[i * (I + 1) + j];
        }
    }
    double fs = (double)short_ok / (double)short_n, fl = (double)long_ok / (double)long_n;
    printf("# %lld steps: short-gap rule holds %.3f, long-gap rule %.3f (noise %.2f)\n",
           (long long)steps, fs, fl, o.noise);
    /* 1 - noise = 0.85 plus the chance that a noise draw hits the rule's item. */
    CT_ASSERT(fs > 0.8 && fs < 0.9);
    CT_ASSERT(fl > 0.8 && fl < 0.9);
    free(after_short);
    free(after_long);
    free(succ);
    ctrain_data_free(&ds);
}

static void test_parse(void)
{
    ctrain_synth_opts_t o;
    CT_ASSERT_OK(ctrain_synth_parse("synthetic", &o, NULL));
    CT_ASSERT_EQ(o.num_users, 1000);
    CT_ASSERT_OK(ctrain_synth_parse("synthetic:users=50,items=20,len=10,noise=0,seed=3", &o, NULL));
    CT_ASSERT(o.num_users == 50 && o.num_items == 20 && o.mean_len == 10 && o.seed == 3);
    CT_ASSERT_CLOSE(o.noise, 0.0, 0, 0);
    ct_errbuf_t eb;
    CT_ASSERT_ERR(ctrain_synth_parse("synthetic:users=5", &o, &eb), CT_ERANGE_VALUE);
    CT_ASSERT_STR_EQ(eb.msg, "synthetic spec option users: 5 is out of range (expected 10..10000000)");
    CT_ASSERT_ERR(ctrain_synth_parse("synthetic:colour=blue", &o, &eb), CT_EPARSE);
    CT_ASSERT_ERR(ctrain_synth_parse("synthetic:users", &o, &eb), CT_EPARSE);
    CT_ASSERT_ERR(ctrain_synth_parse("synthetic:noise=2", &o, &eb), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ctrain_synth_parse("synth", &o, &eb), CT_EPARSE);
    CT_ASSERT_ERR(ctrain_synth_parse("synthetic:users=10,,", &o, &eb), CT_EPARSE);
}

int main(void)
{
    CT_RUN(test_deterministic);
    CT_RUN(test_structure);
    CT_RUN(test_parse);
    return 0;
}
