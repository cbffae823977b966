/*
 * ctrain_batch.h - turning users into model inputs: training examples with sampled negatives,
 * evaluation inputs, and the candidate lists of the sampled evaluation protocol.
 *
 * Layout (docs/models.md §2.1–2.2): (B, L) int32 arrays, left-padded with 0, the most recent
 * item in column L-1; only the last L interactions are kept. For a user with training list S
 * of length m, a training row is seq = S[0..m-2] and pos = S[1..m-1], right-aligned; every
 * column with a target gets num_neg negatives drawn uniformly from 1..I, redrawn while they
 * are among the user's training items (SASRec.pytorch's rule); padding columns stay 0. For the
 * sampled softmax loss a row can also carry num_row_neg negatives of its own, shared by all its
 * positions (Klenitskiy & Vasilev's "SASRec+ with N negatives", RecSys 2023): uniform over
 * 1..I, redrawn while among the user's training items, with replacement (so a catalogue
 * smaller than N is no error; duplicates simply count twice in the softmax's denominator).
 *
 * Every draw comes from Philox keyed by (seed, a per-example key), never from a stateful
 * generator: the trainer passes the example's global index in the run, so a rank that builds
 * rows 32..63 of a global batch draws exactly what a single process would for those rows,
 * and a resumed run draws what the interrupted one would have.
 */
#ifndef CTRAIN_BATCH_H
#define CTRAIN_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "ctrain_data.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ctrain_eval_split {
    CTRAIN_EVAL_VALID = 0, /* input: the last L training items; target: the valid item */
    CTRAIN_EVAL_TEST = 1,  /* input: training items then the valid item; target: the test item */
} ctrain_eval_split_t;

typedef struct ctrain_batch {
    int B, L, num_neg;
    int32_t *user; /* (B) user of each row, 0 for an empty row */
    int32_t *seq;  /* (B, L) input items */
    int32_t *pos;  /* (B, L) next-item targets (training rows only) */
    int32_t *neg;  /* (B, L, num_neg) sampled negatives (training rows only) */
    int64_t *tseq; /* (B, L) TiSASRec scaled times of seq, 0 at padding; NULL without time */
    int num_row_neg;
    int32_t *row_neg; /* (B, num_row_neg) a row's own negatives (sampled softmax), or NULL */
} ctrain_batch_t;

/* Allocates a batch (all zero). with_time adds tseq. Returns 0 or -ENOMEM. */
int ctrain_batch_init(ctrain_batch_t *b, int B, int L, int num_neg, bool with_time);
/* Adds row_neg with n > 0 negatives per row to an initialised batch. 0 or -ENOMEM. */
int ctrain_batch_add_row_neg(ctrain_batch_t *b, int n);
void ctrain_batch_close(ctrain_batch_t *b);

/* Zeroes row r (an unused row contributes nothing: no targets). */
void ctrain_batch_clear_row(ctrain_batch_t *b, int r);

/* Row r <- the training example of user u (all padding when u has fewer than 2 training
 * items), with its row negatives when the batch has them. key identifies the example (its
 * global index in the run); seed is the run's seed. */
void ctrain_batch_fill_train(ctrain_batch_t *b, int r, const ctrain_dataset_t *ds, int32_t u,
                             uint64_t seed, uint64_t key);

/* Row r <- the evaluation input of user u for the given split (pos/neg left zero). */
void ctrain_batch_fill_eval(ctrain_batch_t *b, int r, const ctrain_dataset_t *ds, int32_t u,
                            ctrain_eval_split_t which);

/* The evaluation target of u (valid or test item; 0 when u is not evaluated). */
int32_t ctrain_eval_target(const ctrain_dataset_t *ds, int32_t u, ctrain_eval_split_t which);

/* cand[0] = the target, cand[1..num_neg] = negatives drawn uniformly from 1..I with
 * replacement, redrawn while among the items of the evaluation input: u's training items and,
 * on the test split, the valid item (SASRec.pytorch HEAD's and TiSASRec.pytorch's rule). With
 * exclude_target also while equal to the target (TiSASRec.pytorch, whose valid split may still
 * draw the test item); without it (SASRec.pytorch) the target itself may be drawn, and
 * ctrain_eval_rank does not count those copies. Deterministic in (seed, u, which). */
void ctrain_eval_candidates(int32_t *cand, int num_neg, const ctrain_dataset_t *ds, int32_t u,
                            ctrain_eval_split_t which, bool exclude_target, uint64_t seed);

/* The rank of the target cand[0] (score scores[0]) among the n candidates: the number of other
 * items among cand[1..n) scoring strictly higher plus those scoring equal (ties count against
 * the target, so a model that scores everything alike is not rewarded); NaN scores of others
 * count as higher. A candidate that is the target item itself is not another item and never
 * counts (SASRec.pytorch draws such copies and leaves them to its sort's tie order). */
int ctrain_eval_rank(const float *scores, const int32_t *cand, int n);

/* HR@k and NDCG@k contributions of one rank (NDCG@k = 1/log2(rank + 2) when rank < k). */
static inline double ctrain_eval_hr(int rank, int k)
{
    return rank < k ? 1.0 : 0.0;
}
double ctrain_eval_ndcg(int rank, int k);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_BATCH_H */
