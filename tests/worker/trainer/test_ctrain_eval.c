/*
 * test_ctrain_eval.c - worker/trainer/ctrain_eval.c: the full-ranking rank (exclusions, duplicates,
 * ties, NaN), the popularity baseline on a hand-made dataset whose HR/NDCG are worked out below,
 * that a model-free evaluation split over W ranks and reduced equals W = 1, the evaluator's user
 * sharding, users with NaN or infinite scores counted (their split left without metrics), and
 * the sampled protocol's candidate rule (what is never a negative, and that the target's own
 * copies do not count).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain_eval.h"
#include "ct_test.h"

static void test_rank_full(void)
{
    /* items 1..6; target 3 scores 0.5 */
    const float s[7] = {9.0f, 0.9f, 0.1f, 0.5f, 0.5f, 0.7f, 0.2f};
    /* higher: 1 (0.9), 5 (0.7); tie: 4 (0.5) counts against; item 0 never counts */
    CT_ASSERT_EQ(ctrain_eval_rank_full(s, 7, 3, NULL, 0, 0), 3);
    /* excluding 1 and 5 (history, with a duplicate) leaves the tie */
    const int32_t hist[] = {1, 1, 5};
    CT_ASSERT_EQ(ctrain_eval_rank_full(s, 7, 3, hist, 3, 0), 1);
    /* the extra exclusion (the validation item on the test split) */
    CT_ASSERT_EQ(ctrain_eval_rank_full(s, 7, 3, hist, 3, 4), 0);
    /* the extra item already in the history is not subtracted twice */
    CT_ASSERT_EQ(ctrain_eval_rank_full(s, 7, 3, hist, 3, 5), 1);
    /* the target itself is never excluded, even if the user saw it before */
    const int32_t with_target[] = {3, 5};
    CT_ASSERT_EQ(ctrain_eval_rank_full(s, 7, 3, with_target, 2, 0), 2);
    /* items below the target never count */
    const int32_t low[] = {2, 6};
    CT_ASSERT_EQ(ctrain_eval_rank_full(s, 7, 3, low, 2, 0), 3);
    /* a NaN target loses to everything */
    float n[7] = {0, 1, 2, NAN, 3, 4, 5};
    CT_ASSERT_EQ(ctrain_eval_rank_full(n, 7, 3, NULL, 0, 0), 5);
    /* a NaN competitor counts against the target */
    n[3] = 10.0f, n[6] = NAN;
    CT_ASSERT_EQ(ctrain_eval_rank_full(n, 7, 3, NULL, 0, 0), 1);
}

/* A dataset written by hand: 6 users, 5 items, ids already in place. */
static void make_ds(ctrain_dataset_t *ds)
{
    static const int32_t seqs[6][6] = {
        {1, 2, 1, 2, 3, 0}, /* train 1 2 1, valid 2, test 3 */
        {1, 1, 2, 4, 0, 0}, /* train 1 1, valid 2, test 4 */
        {2, 1, 1, 5, 0, 0}, /* train 2 1, valid 1, test 5 */
        {1, 3, 2, 1, 4, 0}, /* train 1 3 2, valid 1, test 4 */
        {5, 1, 0, 0, 0, 0}, /* too short: train only */
        {1, 2, 1, 3, 1, 2}, /* train 1 2 1 3, valid 1, test 2 */
    };
    memset(ds, 0, sizeof *ds);
    ds->num_users = 6;
    ds->num_items = 5;
    ds->user_start = calloc(8, sizeof *ds->user_start);
    ds->items = calloc(36, sizeof *ds->items);
    int64_t k = 0;
    for (int u = 1; u <= 6; u++) {
        ds->user_start[u] = k;
        for (int j = 0; j < 6 && seqs[u - 1][j]; j++)
            ds->items[k++] = seqs[u - 1][j];
    }
    ds->user_start[7] = k;
    ds->num_interactions = k;
    snprintf(ds->source, sizeof ds->source, "hand-made");
    CT_ASSERT_OK(ctrain_data_finish(ds, 4));
}

static void test_popularity(void)
{
    ctrain_dataset_t ds;
    make_ds(&ds);
    CT_ASSERT_EQ(ds.num_eval_users, 5);
    /* Training counts: item 1: 2+2+1+1+1(user 5)+2 = 9, item 2: 1+1+1+1 = 4, item 3: 1+1 = 2,
     * item 4: 0, item 5: 1 (user 5). Full ranking, every item except the user's history,
     * ties against the target:
     *   valid: u1 target 2 (hist 1,2): others 3(2),4(0),5(1) below -> rank 0
     *          u2 target 2 (hist 1): 3,4,5 below -> rank 0
     *          u3 target 1 (hist 1,2): target in history but never excluded; 3,4,5 below -> 0
     *          u4 target 1 (hist 1,2,3): 4,5 below -> 0
     *          u6 target 1 (hist 1,2,3): -> 0
     *   test:  u1 target 3 (hist 1,2 + valid 2): 4,5 below -> 0
     *          u2 target 4 (hist 1 + valid 2): 3 (2) and 5 (1) above -> rank 2
     *          u3 target 5 (hist 1,2 + valid 1): 3 (2) above, 4 below -> 1
     *          u4 target 4 (hist 1,3,2 + valid 1): 5 (1) above -> 1
     *          u6 target 2 (hist 1,2,3 + valid 1): 4,5 below -> 0 */
    ct_ops_t ops;
    ct_ops_cpu_init(&ops);
    ct_reducer_t *red;
    ct_errbuf_t reb;
    CT_ASSERT_OK(ct_reducer_create(&red, NULL, &reb));
    ctrain_evaluator_t ev;
    ct_errbuf_t eb;
    CT_ASSERT_OK(
        ctrain_evaluator_init(&ev, &ds, &ops, 2, 4, CTRAIN_EVAL_MODE_BOTH, false, 0, 1, &eb));
    CT_ASSERT(ev.pop[1] == 9 && ev.pop[2] == 4 && ev.pop[3] == 2 && ev.pop[4] == 0 &&
              ev.pop[5] == 1);
    ctrain_eval_result_t r;
    CT_ASSERT_OK(ctrain_eval_popularity(&ev, red, &r, &eb));
    CT_ASSERT_EQ(r.valid.users, 5);
    CT_ASSERT_CLOSE(r.valid.full_hr, 1.0, 1e-12, 0);
    CT_ASSERT_CLOSE(r.valid.full_ndcg, 1.0, 1e-12, 0);
    double want = (1.0 + 1.0 / log2(4.0) + 2.0 / log2(3.0) + 1.0) / 5.0;
    CT_ASSERT_CLOSE(r.test.full_hr, 1.0, 1e-12, 0);
    CT_ASSERT_CLOSE(r.test.full_ndcg, want, 1e-12, 0);
    /* Sampled: 100 negatives among items the user has not trained on, scored by popularity;
     * every hr is 1 with 5 items, and the ndcg follows the ranks above or ties with repeats,
     * so only bounds are certain: each user's rank is at most 100. */
    CT_ASSERT(r.valid.hr >= 0 && r.valid.hr <= 1 && r.valid.ndcg <= r.valid.hr);
    ctrain_evaluator_close(&ev);

    /* Split over 3 ranks, each evaluating its share; the sums add up to the whole. */
    double sum_full = 0, sum_sampled = 0;
    int64_t users = 0;
    for (int rank = 0; rank < 3; rank++) {
        CT_ASSERT_OK(ctrain_evaluator_init(&ev, &ds, &ops, 2, 4, CTRAIN_EVAL_MODE_BOTH, false, rank,
                                           3, &eb));
        ctrain_eval_result_t part;
        CT_ASSERT_OK(ctrain_eval_popularity(&ev, red, &part, &eb));
        users += part.test.users;
        sum_full += part.test.full_ndcg * (double)part.test.users;
        sum_sampled += part.test.ndcg * (double)part.test.users;
        ctrain_evaluator_close(&ev);
    }
    CT_ASSERT_EQ(users, 5);
    CT_ASSERT_CLOSE(sum_full / 5.0, r.test.full_ndcg, 1e-12, 0);
    CT_ASSERT_CLOSE(sum_sampled / 5.0, r.test.ndcg, 1e-12, 0);
    ct_reducer_destroy(red);
    ctrain_data_free(&ds);
}

/* Non-finite scores: a user whose scores include a NaN or an infinity is counted once per
 * split (whichever protocol saw it), and a split with any such user has no metrics (NAN) - not
 * ranks decided by the tie rule, which read as 0.0. Popularity scores stand in for a model's
 * here: item 4 is in no evaluated user's training history, so every user scores it. */
static void test_nonfinite_scores(void)
{
    ctrain_dataset_t ds;
    make_ds(&ds);
    ct_ops_t ops;
    ct_ops_cpu_init(&ops);
    ct_reducer_t *red;
    ct_errbuf_t reb;
    CT_ASSERT_OK(ct_reducer_create(&red, NULL, &reb));
    ctrain_evaluator_t ev;
    ct_errbuf_t eb;
    ctrain_eval_result_t r;
    const ctrain_eval_mode_t modes[3] = {CTRAIN_EVAL_MODE_SAMPLED, CTRAIN_EVAL_MODE_FULL,
                                         CTRAIN_EVAL_MODE_BOTH};
    const float bad[2] = {NAN, INFINITY};
    for (int k = 0; k < 3; k++) {
        for (int b = 0; b < 2; b++) {
            CT_ASSERT_OK(ctrain_evaluator_init(&ev, &ds, &ops, 2, 4, modes[k], false, 0, 1, &eb));
            ctrain_eval_result_t clean;
            CT_ASSERT_OK(ctrain_eval_popularity(&ev, red, &clean, &eb));
            CT_ASSERT_EQ(clean.valid.nonfinite, 0);
            CT_ASSERT_EQ(clean.test.nonfinite, 0);
            ev.pop[4] = bad[b];
            CT_ASSERT_OK(ctrain_eval_popularity(&ev, red, &r, &eb));
            /* the full ranking scores every item; the sampled candidates (100 draws from 5
             * items) include item 4 for every user too */
            CT_ASSERT_EQ(r.valid.users, 5);
            CT_ASSERT_EQ(r.valid.nonfinite, 5);
            CT_ASSERT_EQ(r.test.nonfinite, 5);
            CT_ASSERT(isnan(r.valid.hr) && isnan(r.valid.ndcg) && isnan(r.valid.full_hr) &&
                      isnan(r.valid.full_ndcg));
            CT_ASSERT(isnan(r.test.hr) && isnan(r.test.full_ndcg));
            ctrain_evaluator_close(&ev);
        }
    }
    ct_reducer_destroy(red);
    ctrain_data_free(&ds);
}

/* The sampled protocol's candidate rule, end to end through the evaluator: 5 items, one
 * evaluated user A = 1 2 4 5 (train 1 2, valid 4, test 5); B = 4 4 4 and C = 5 5 are too short
 * to split and only add training counts, so the popularity scores are item 1: 1, 2: 1, 3: 0,
 * 4: 3, 5: 2. With 100 draws over so few items every allowed item is drawn, many times.
 *   valid: target 4; allowed negatives 3, 4, 5 (SASRec.pytorch may draw the target itself):
 *          its copies tie with it but are the target, so nothing counts -> rank 0;
 *   test:  target 5; the valid item 4 (score 3) is part of the input and never a negative
 *          (SASRec.pytorch HEAD), 3 scores lower, copies of 5 do not count -> rank 0.
 * Counting the copies as ties, or drawing 4 on the test split, would push both ranks past 10. */
static void test_sampled_candidates(void)
{
    static const int32_t items[] = {1, 2, 4, 5, 4, 4, 4, 5, 5};
    ctrain_dataset_t ds;
    memset(&ds, 0, sizeof ds);
    ds.num_users = 3;
    ds.num_items = 5;
    ds.num_interactions = 9;
    ds.user_start = calloc(5, sizeof *ds.user_start);
    ds.items = malloc(sizeof items);
    memcpy(ds.items, items, sizeof items);
    const int64_t starts[] = {0, 0, 4, 7, 9};
    memcpy(ds.user_start, starts, sizeof starts);
    CT_ASSERT_OK(ctrain_data_finish(&ds, 4));
    CT_ASSERT_EQ(ds.num_eval_users, 1);

    ct_ops_t ops;
    ct_ops_cpu_init(&ops);
    ct_reducer_t *red;
    ct_errbuf_t reb;
    CT_ASSERT_OK(ct_reducer_create(&red, NULL, &reb));
    ct_errbuf_t eb;
    for (int rule = 0; rule < 2; rule++) { /* SASRec's rule, then TiSASRec's */
        ctrain_evaluator_t ev;
        CT_ASSERT_OK(ctrain_evaluator_init(&ev, &ds, &ops, 1, 4, CTRAIN_EVAL_MODE_SAMPLED,
                                           rule == 1, 0, 1, &eb));
        CT_ASSERT(ev.pop[3] == 0 && ev.pop[4] == 3 && ev.pop[5] == 2);
        ctrain_eval_result_t r;
        CT_ASSERT_OK(ctrain_eval_popularity(&ev, red, &r, &eb));
        CT_ASSERT_EQ(r.valid.users, 1);
        CT_ASSERT_CLOSE(r.valid.ndcg, 1.0, 0, 0);
        CT_ASSERT_CLOSE(r.test.ndcg, 1.0, 0, 0);
        CT_ASSERT_CLOSE(r.test.hr, 1.0, 0, 0);
        ctrain_evaluator_close(&ev);
    }
    ct_reducer_destroy(red);
    ctrain_data_free(&ds);
}

int main(void)
{
    CT_RUN(test_rank_full);
    CT_RUN(test_popularity);
    CT_RUN(test_nonfinite_scores);
    CT_RUN(test_sampled_candidates);
    return 0;
}
