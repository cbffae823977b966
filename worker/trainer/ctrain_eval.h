/*
 * ctrain_eval.h - evaluation of next-item models (docs/models.md §4): HR@10 and NDCG@10 on the
 * validation and test splits under two protocols, and the popularity baseline.
 *
 *   sampled  the target and 100 negatives drawn uniformly from 1..I with replacement, redrawn
 *            while in the user's training items or, on the test split, equal to the valid
 *            item (TiSASRec also redraws the target; SASRec may draw it, and its copies do not
 *            count in the rank) - ctrain_eval_candidates with a fixed evaluation seed, so every
 *            evaluation of every run uses the same candidates;
 *   full     every item 1..I except the user's history: the training items, and for the test
 *            split also the validation item (the model saw it as input); the target itself is
 *            never excluded.
 * Rank = the number of other items among the candidates scoring at least as high as the target
 * (ties and NaN count against it), HR@10 = [rank < 10], NDCG@10 = 1/log2(rank + 2) when
 * rank < 10. A user whose scores (of the candidates, or of the whole catalogue) include a NaN or
 * an infinity is counted in `nonfinite`, and a split with any such user has no metrics (NAN):
 * ranks among NaNs would only measure the tie rule, and read as a model that learnt nothing.
 * Users: every user with a held-out pair (all of them; SASRec.pytorch's 10,000-user sampling
 * for large datasets is not reproduced), split over ranks in contiguous blocks, then the
 * per-rank sums are reduced with the trainer's reducer, so the result does not depend on the
 * world size. Inputs are batched through the model's forward (only column L-1 is computed in
 * the last block, see ctrain_sasrec.c), with the window's TiSASRec times whenever the dataset has
 * them.
 *
 * Not here: choosing the best checkpoint (the trainer selects on validation, never on test),
 * writing metrics.
 */
#ifndef CTRAIN_EVAL_H
#define CTRAIN_EVAL_H

#include <stdbool.h>
#include <stdint.h>

#include "ctrain_batch.h"
#include "ctrain_model.h"
#include "ctrain_cfg.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CTRAIN_EVAL_NEGATIVES 100
#define CTRAIN_EVAL_TOPK      10
#define CTRAIN_EVAL_SEED      20180601u /* fixed: every evaluation draws the same negatives */

typedef struct ctrain_eval_split_result {
    int64_t users;             /* users evaluated (all ranks) */
    int64_t nonfinite;         /* of them, users with a NaN or infinite score (all ranks) */
    double hr, ndcg;           /* sampled protocol; NAN when not computed or nonfinite > 0 */
    double full_hr, full_ndcg; /* full ranking; NAN when not computed or nonfinite > 0 */
} ctrain_eval_split_result_t;

typedef struct ctrain_eval_result {
    ctrain_eval_split_result_t valid, test;
} ctrain_eval_result_t;

typedef struct ctrain_evaluator {
    const ctrain_dataset_t *ds;
    ct_ops_t *ops;
    int chunk, L;
    ctrain_eval_mode_t mode;
    bool exclude_target;
    int rank, world;
    int32_t *users;       /* this rank's evaluated users */
    int64_t n_users;      /* how many */
    ctrain_batch_t batch; /* chunk rows */
    int32_t *cand;        /* host (chunk, 1 + CTRAIN_EVAL_NEGATIVES) */
    float *scores;        /* host (chunk, max(1 + CTRAIN_EVAL_NEGATIVES, I + 1)) */
    bool *nonfinite;      /* (chunk) rows of the current chunk with a NaN or infinite score */
    int32_t *cand_dev;    /* backend copies (the host buffers on a host-memory backend) */
    float *scores_dev;
    float *pop; /* (I + 1) training-set frequency of each item (the baseline's scores) */
    void (*progress)(void *ctx); /* called once per chunk (heartbeat), may be NULL */
    void *progress_ctx;
} ctrain_evaluator_t;

/* Sets up evaluation of ds for this rank (chunk rows at a time, windows of L). Allocates
 * everything it will need. exclude_target: TiSASRec's candidate rule (the target is never a
 * negative). */
int ctrain_evaluator_init(ctrain_evaluator_t *ev, const ctrain_dataset_t *ds, ct_ops_t *ops,
                          int chunk, int L, ctrain_eval_mode_t mode, bool exclude_target, int rank,
                          int world, ct_errbuf_t *eb);
void ctrain_evaluator_close(ctrain_evaluator_t *ev);

/* Evaluates the model (its forward_features) on both splits; every rank calls it. */
int ctrain_eval_model(ctrain_evaluator_t *ev, ctrain_model_t *m, ct_reducer_t *red,
                      ctrain_eval_result_t *out, ct_errbuf_t *eb);

/* The popularity baseline: score = how often the item occurs in the training split. */
int ctrain_eval_popularity(ctrain_evaluator_t *ev, ct_reducer_t *red, ctrain_eval_result_t *out,
                           ct_errbuf_t *eb);

/* The full-ranking rank of target among items 1..V-1 of scores (V): the number of other items
 * scoring >= scores[target] (or NaN), not counting item 0, the items of excl (n entries,
 * sorted ascending, duplicates allowed) and extra_excl (0 for none) - except the target. */
int64_t ctrain_eval_rank_full(const float *scores, int32_t V, int32_t target, const int32_t *excl,
                              int64_t n, int32_t extra_excl);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_EVAL_H */
