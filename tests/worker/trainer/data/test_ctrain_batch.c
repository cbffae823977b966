/*
 * test_ctrain_batch.c - training rows (layout, right alignment, truncation to L, negatives never
 * among the user's training items, determinism by key), evaluation rows and candidates (the
 * items each rule excludes), and the rank/metric rules (ties, NaN, copies of the target).
 */
#include <math.h>
#include <stdlib.h>

#include "ctrain_batch.h"
#include "ct_test.h"

/* A dataset built in code: user 1 = 1..8 (train 1..6, valid 7, test 8) with times 10, 20, ...;
 * user 2 = {3, 9, 4} (train {3}, valid 9, test 4); user 3 has seen items 1..9 except 10 in
 * train (plus valid/test); 10 items in all. */
static void make_dataset(ctrain_dataset_t *ds)
{
    static const int32_t u1[] = {1, 2, 3, 4, 5, 6, 7, 8};
    static const int32_t u2[] = {3, 9, 4};
    static const int32_t u3[] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 2, 1};
    memset(ds, 0, sizeof *ds);
    ds->num_users = 3;
    ds->num_items = 10;
    ds->num_interactions = 8 + 3 + 11;
    ds->user_start = malloc(5 * sizeof *ds->user_start);
    ds->items = malloc((size_t)ds->num_interactions * sizeof *ds->items);
    ds->times = malloc((size_t)ds->num_interactions * sizeof *ds->times);
    int64_t starts[] = {0, 0, 8, 11, 22};
    memcpy(ds->user_start, starts, sizeof starts);
    memcpy(ds->items, u1, sizeof u1);
    memcpy(ds->items + 8, u2, sizeof u2);
    memcpy(ds->items + 11, u3, sizeof u3);
    for (int64_t k = 0; k < ds->num_interactions; k++)
        ds->times[k] = 10 * (k + 1);
    CT_ASSERT_OK(ctrain_data_finish(ds, 3));
}

static void test_train_rows(void)
{
    ctrain_dataset_t ds;
    make_dataset(&ds);
    ctrain_batch_t b;
    CT_ASSERT_OK(ctrain_batch_init(&b, 3, 8, 2, true));

    ctrain_batch_fill_train(&b, 0, &ds, 1, 42, 1000);
    /* train = 1..6: seq = 1..5 and pos = 2..6, right-aligned in 8 columns. */
    int32_t seq[] = {0, 0, 0, 1, 2, 3, 4, 5}, pos[] = {0, 0, 0, 2, 3, 4, 5, 6};
    int64_t tseq[] = {0, 0, 0, 1, 2, 3, 4, 5}; /* scale 10 -> t' = k + 1 */
    for (int t = 0; t < 8; t++) {
        CT_ASSERT_EQ(b.seq[t], seq[t]);
        CT_ASSERT_EQ(b.pos[t], pos[t]);
        CT_ASSERT_EQ(b.tseq[t], tseq[t]);
        for (int j = 0; j < 2; j++) {
            int32_t n = b.neg[t * 2 + j];
            if (pos[t] == 0) {
                CT_ASSERT_EQ(n, 0);
            } else {
                CT_ASSERT(n >= 1 && n <= 10);
                CT_ASSERT_MSG(!ctrain_data_in_train(&ds, 1, n), "negative %d is a training item",
                              n);
            }
        }
    }
    CT_ASSERT_EQ(b.user[0], 1);

    /* Same key -> same row; another key -> other negatives (over many keys some differ). */
    ctrain_batch_fill_train(&b, 1, &ds, 1, 42, 1000);
    CT_ASSERT(memcmp(b.neg, b.neg + 16, 16 * sizeof(int32_t)) == 0);
    int differ = 0;
    for (uint64_t key = 1001; key < 1021; key++) {
        ctrain_batch_fill_train(&b, 1, &ds, 1, 42, key);
        differ += memcmp(b.neg, b.neg + 16, 16 * sizeof(int32_t)) != 0;
    }
    CT_ASSERT_GE(differ, 15);

    /* Truncation to the last L: with L = 3, seq = 3,4,5 and pos = 4,5,6. */
    ctrain_batch_t s;
    CT_ASSERT_OK(ctrain_batch_init(&s, 1, 3, 1, false));
    ctrain_batch_fill_train(&s, 0, &ds, 1, 42, 7);
    CT_ASSERT(s.tseq == NULL);
    CT_ASSERT(s.seq[0] == 3 && s.seq[1] == 4 && s.seq[2] == 5);
    CT_ASSERT(s.pos[0] == 4 && s.pos[1] == 5 && s.pos[2] == 6);
    /* A user with a single training item gives an all-padding row. */
    ctrain_batch_fill_train(&s, 0, &ds, 2, 42, 7);
    CT_ASSERT(s.seq[2] == 0 && s.pos[2] == 0 && s.neg[2] == 0);
    CT_ASSERT_EQ(s.user[0], 2);
    /* A user who has seen items 1..9: every negative must be 10 (the redraw fallback). */
    ctrain_batch_fill_train(&s, 0, &ds, 3, 42, 7);
    for (int t = 0; t < 3; t++)
        CT_ASSERT_EQ(s.neg[t], 10);
    ctrain_batch_close(&s);
    ctrain_batch_close(&b);
    ctrain_data_free(&ds);
}

static void test_eval_rows_and_candidates(void)
{
    ctrain_dataset_t ds;
    make_dataset(&ds);
    ctrain_batch_t b;
    CT_ASSERT_OK(ctrain_batch_init(&b, 1, 4, 1, true));
    ctrain_batch_fill_eval(&b, 0, &ds, 1, CTRAIN_EVAL_VALID);
    CT_ASSERT(b.seq[0] == 3 && b.seq[3] == 6); /* last 4 train items */
    CT_ASSERT_EQ(b.tseq[3], 6);
    CT_ASSERT_EQ(b.pos[3], 0);
    ctrain_batch_fill_eval(&b, 0, &ds, 1, CTRAIN_EVAL_TEST);
    CT_ASSERT(b.seq[0] == 4 && b.seq[3] == 7); /* train then the valid item */
    CT_ASSERT_EQ(ctrain_eval_target(&ds, 1, CTRAIN_EVAL_VALID), 7);
    CT_ASSERT_EQ(ctrain_eval_target(&ds, 1, CTRAIN_EVAL_TEST), 8);
    ctrain_batch_close(&b);

    int32_t cand[101], again[101];
    ctrain_eval_candidates(cand, 100, &ds, 1, CTRAIN_EVAL_TEST, false, 99);
    CT_ASSERT_EQ(cand[0], 8);
    bool saw_target = false;
    for (int j = 1; j <= 100; j++) {
        CT_ASSERT(cand[j] >= 1 && cand[j] <= 10);
        CT_ASSERT(!ctrain_data_in_train(&ds, 1, cand[j]));
        /* SASRec.pytorch HEAD's rule: the valid item (7) is part of the test input, never a
         * negative; the target (8) may be drawn (3 allowed items: 8, 9, 10) */
        CT_ASSERT_MSG(cand[j] != 7, "negative %d on the test split is the valid item 7", j);
        saw_target |= cand[j] == 8;
    }
    CT_ASSERT(saw_target);
    /* on the valid split nothing but the training items is excluded: 7 (the target) and 8 */
    ctrain_eval_candidates(again, 100, &ds, 1, CTRAIN_EVAL_VALID, false, 99);
    CT_ASSERT_EQ(again[0], 7);
    bool saw_valid = false, saw_test = false;
    for (int j = 1; j <= 100; j++) {
        CT_ASSERT(again[j] >= 7 && again[j] <= 10);
        saw_valid |= again[j] == 7;
        saw_test |= again[j] == 8;
    }
    CT_ASSERT(saw_valid && saw_test);
    ctrain_eval_candidates(again, 100, &ds, 1, CTRAIN_EVAL_TEST, false, 99);
    CT_ASSERT(memcmp(cand, again, sizeof cand) == 0);
    ctrain_eval_candidates(again, 100, &ds, 1, CTRAIN_EVAL_TEST, false, 100);
    CT_ASSERT(memcmp(cand, again, sizeof cand) != 0);
    ctrain_eval_candidates(cand, 100, &ds, 1, CTRAIN_EVAL_TEST, true, 99);
    for (int j = 1; j <= 100; j++)
        CT_ASSERT(cand[j] == 9 || cand[j] == 10); /* TiSASRec's rule: not 7 or 8 either */
    /* ... and on the valid split only the target (7) goes: the test item stays possible */
    ctrain_eval_candidates(cand, 100, &ds, 1, CTRAIN_EVAL_VALID, true, 99);
    saw_test = false;
    for (int j = 1; j <= 100; j++) {
        CT_ASSERT(cand[j] == 8 || cand[j] == 9 || cand[j] == 10);
        saw_test |= cand[j] == 8;
    }
    CT_ASSERT(saw_test);
    ctrain_data_free(&ds);
}

/* A row's own negatives (sampled softmax): outside the user's training items, keyed like the
 * per-position ones, zeroed with the row. */
static void test_row_negatives(void)
{
    ctrain_dataset_t ds;
    make_dataset(&ds);
    ctrain_batch_t b;
    CT_ASSERT_OK(ctrain_batch_init(&b, 2, 8, 1, false));
    CT_ASSERT_OK(ctrain_batch_add_row_neg(&b, 50));
    ctrain_batch_fill_train(&b, 0, &ds, 1, 42, 7);
    ctrain_batch_fill_train(&b, 1, &ds, 1, 42, 7);
    CT_ASSERT(memcmp(b.row_neg, b.row_neg + 50, 50 * sizeof(int32_t)) == 0);
    int seen[11] = {0};
    for (int j = 0; j < 50; j++) {
        int32_t n = b.row_neg[j];
        CT_ASSERT(n >= 1 && n <= 10);
        CT_ASSERT_MSG(!ctrain_data_in_train(&ds, 1, n), "row negative %d is a training item", n);
        seen[n]++;
    }
    for (int i = 7; i <= 10; i++)
        CT_ASSERT_MSG(seen[i] > 0, "item %d never drawn in 50 draws over 4 allowed items", i);
    ctrain_batch_fill_train(&b, 1, &ds, 1, 42, 8);
    CT_ASSERT(memcmp(b.row_neg, b.row_neg + 50, 50 * sizeof(int32_t)) != 0);
    ctrain_batch_clear_row(&b, 1);
    for (int j = 0; j < 50; j++)
        CT_ASSERT_EQ(b.row_neg[50 + j], 0);
    ctrain_batch_close(&b);
    ctrain_data_free(&ds);
}

static void test_rank_and_metrics(void)
{
    const int32_t c[] = {5, 1, 2, 3, 4};
    float s[] = {0.5f, 0.1f, 0.9f, 0.5f, -1.0f};
    CT_ASSERT_EQ(ctrain_eval_rank(s, c, 5), 2); /* 0.9 higher, 0.5 tied: both count against */
    float all_same[] = {1, 1, 1};
    CT_ASSERT_EQ(ctrain_eval_rank(all_same, c, 3), 2);
    float best[] = {3, 1, 2};
    CT_ASSERT_EQ(ctrain_eval_rank(best, c, 3), 0);
    float nan_other[] = {1, NAN};
    CT_ASSERT_EQ(ctrain_eval_rank(nan_other, c, 2), 1);
    float nan_target[] = {NAN, 0, 1};
    CT_ASSERT_EQ(ctrain_eval_rank(nan_target, c, 3), 2);
    /* copies of the target item among the negatives score exactly as the target: they are the
     * target, not other items, and never count; another item's tie still does */
    const int32_t copies[] = {5, 5, 2, 5, 3};
    float sc[] = {0.5f, 0.5f, 0.9f, 0.5f, 0.5f};
    CT_ASSERT_EQ(ctrain_eval_rank(sc, copies, 5), 2); /* item 2 higher, item 3 tied */
    const int32_t only_copies[] = {4, 4, 4};
    CT_ASSERT_EQ(ctrain_eval_rank(all_same, only_copies, 3), 0);
    CT_ASSERT_CLOSE(ctrain_eval_ndcg(0, 10), 1.0, 0, 0);
    CT_ASSERT_CLOSE(ctrain_eval_ndcg(1, 10), 1.0 / log2(3.0), 1e-15, 0);
    CT_ASSERT_CLOSE(ctrain_eval_ndcg(9, 10), 1.0 / log2(11.0), 1e-15, 0);
    CT_ASSERT_CLOSE(ctrain_eval_ndcg(10, 10), 0.0, 0, 0);
    CT_ASSERT_CLOSE(ctrain_eval_hr(9, 10), 1.0, 0, 0);
    CT_ASSERT_CLOSE(ctrain_eval_hr(10, 10), 0.0, 0, 0);
}

int main(void)
{
    CT_RUN(test_train_rows);
    CT_RUN(test_eval_rows_and_candidates);
    CT_RUN(test_row_negatives);
    CT_RUN(test_rank_and_metrics);
    return 0;
}
