/*
 * ctrain_batch.c - training rows with Philox-drawn negatives, evaluation rows and candidates.
 * A uniform item is drawn as 1 + (x * I >> 32) from a 32-bit draw x (the same on CPU and GPU;
 * the bias is below I / 2^32, under 1e-6 for any catalogue we train).
 */
#include "ctrain_batch.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ct_philox.h"

/* Purposes mixed into the Philox stream so that different uses never share draws. */
enum { CT__PURPOSE_TRAIN_NEG = 1, CT__PURPOSE_EVAL_NEG = 2, CT__PURPOSE_ROW_NEG = 3 };
#define CT__MAX_REDRAWS 32

static uint32_t ctrain_batch__draw(uint64_t seed, uint64_t stream, uint64_t index)
{
    return ct_philox_block_at(seed, stream, index / 4).v[index % 4];
}

static int32_t ctrain_batch__item_of(uint32_t x, int32_t num_items)
{
    return 1 + (int32_t)(((uint64_t)x * (uint64_t)num_items) >> 32);
}

/* An item user u has not interacted with in training: draws index, index + 1, ... of the stream
 * until one is unseen. After CT__MAX_REDRAWS rejections (a user who has seen most of the
 * catalogue) it walks upward from the last draw to the next unseen item: still deterministic,
 * and it ends because the split leaves some item unseen. */
static int32_t ctrain_batch__unseen(const ctrain_dataset_t *ds, int32_t u, uint64_t seed,
                                    uint64_t stream, uint64_t index)
{
    int32_t item = 0;
    for (int k = 0; k < CT__MAX_REDRAWS; k++) {
        item = ctrain_batch__item_of(ctrain_batch__draw(seed, stream, index + (uint64_t)k),
                                     ds->num_items);
        if (!ctrain_data_in_train(ds, u, item))
            break;
    }
    for (int32_t tries = 0; ctrain_data_in_train(ds, u, item) && tries < ds->num_items; tries++)
        item = item % ds->num_items + 1;
    return item;
}

int ctrain_batch_init(ctrain_batch_t *b, int B, int L, int num_neg, bool with_time)
{
    memset(b, 0, sizeof *b);
    b->B = B;
    b->L = L;
    b->num_neg = num_neg;
    size_t bl = (size_t)B * (size_t)L;
    b->user = calloc((size_t)B, sizeof *b->user);
    b->seq = calloc(bl, sizeof *b->seq);
    b->pos = calloc(bl, sizeof *b->pos);
    b->neg = calloc(bl * (size_t)(num_neg > 0 ? num_neg : 1), sizeof *b->neg);
    if (with_time)
        b->tseq = calloc(bl, sizeof *b->tseq);
    if (!b->user || !b->seq || !b->pos || !b->neg || (with_time && !b->tseq)) {
        ctrain_batch_close(b);
        return -ENOMEM;
    }
    return 0;
}

int ctrain_batch_add_row_neg(ctrain_batch_t *b, int n)
{
    free(b->row_neg);
    b->num_row_neg = n;
    b->row_neg = calloc((size_t)b->B * (size_t)n, sizeof *b->row_neg);
    return b->row_neg ? 0 : -ENOMEM;
}

void ctrain_batch_close(ctrain_batch_t *b)
{
    free(b->row_neg);
    free(b->user);
    free(b->seq);
    free(b->pos);
    free(b->neg);
    free(b->tseq);
    memset(b, 0, sizeof *b);
}

void ctrain_batch_clear_row(ctrain_batch_t *b, int r)
{
    size_t L = (size_t)b->L, o = (size_t)r * L;
    b->user[r] = 0;
    memset(b->seq + o, 0, L * sizeof *b->seq);
    memset(b->pos + o, 0, L * sizeof *b->pos);
    memset(b->neg + o * (size_t)b->num_neg, 0, L * (size_t)b->num_neg * sizeof *b->neg);
    if (b->tseq)
        memset(b->tseq + o, 0, L * sizeof *b->tseq);
    if (b->row_neg)
        memset(b->row_neg + (size_t)r * b->num_row_neg, 0,
               (size_t)b->num_row_neg * sizeof *b->row_neg);
}

/* Copies items[from..to) (and their scaled times) right-aligned into row r of seq/tseq. */
static void ctrain_batch__place(ctrain_batch_t *b, int r, const ctrain_dataset_t *ds, int64_t from,
                                int64_t to, int32_t *dst)
{
    int64_t L = b->L;
    int64_t n = to - from;
    if (n > L) {
        from = to - L;
        n = L;
    }
    int32_t *row = dst + (int64_t)r * L;
    memcpy(row + (L - n), ds->items + from, (size_t)n * sizeof *row);
    if (dst == b->seq && b->tseq != NULL && ds->time_scaled != NULL) {
        int64_t *trow = b->tseq + (int64_t)r * L;
        memcpy(trow + (L - n), ds->time_scaled + from, (size_t)n * sizeof *trow);
    }
}

void ctrain_batch_fill_train(ctrain_batch_t *b, int r, const ctrain_dataset_t *ds, int32_t u,
                             uint64_t seed, uint64_t key)
{
    ctrain_batch_clear_row(b, r);
    b->user[r] = u;
    int64_t s = ds->user_start[u];
    int64_t m = ds->train_len[u];
    if (m < 2)
        return;
    ctrain_batch__place(b, r, ds, s, s + m - 1, b->seq);
    ctrain_batch__place(b, r, ds, s + 1, s + m, b->pos);

    const int64_t L = b->L;
    const int K = b->num_neg;
    const uint64_t stream = (key << 4) | CT__PURPOSE_TRAIN_NEG;
    const int32_t *pos = b->pos + (int64_t)r * L;
    int32_t *neg = b->neg + (int64_t)r * L * K;
    for (int64_t t = 0; t < L; t++) {
        if (pos[t] == 0)
            continue;
        for (int j = 0; j < K; j++)
            neg[t * K + j] = ctrain_batch__unseen(
                ds, u, seed, stream, ((uint64_t)t * (uint64_t)K + (uint64_t)j) * CT__MAX_REDRAWS);
    }
    if (b->row_neg) {
        const uint64_t rs = (key << 4) | CT__PURPOSE_ROW_NEG;
        int32_t *rn = b->row_neg + (size_t)r * b->num_row_neg;
        for (int j = 0; j < b->num_row_neg; j++)
            rn[j] = ctrain_batch__unseen(ds, u, seed, rs, (uint64_t)j * CT__MAX_REDRAWS);
    }
}

int32_t ctrain_eval_target(const ctrain_dataset_t *ds, int32_t u, ctrain_eval_split_t which)
{
    return which == CTRAIN_EVAL_VALID ? ds->valid_item[u] : ds->test_item[u];
}

void ctrain_batch_fill_eval(ctrain_batch_t *b, int r, const ctrain_dataset_t *ds, int32_t u,
                            ctrain_eval_split_t which)
{
    ctrain_batch_clear_row(b, r);
    b->user[r] = u;
    int64_t s = ds->user_start[u];
    int64_t m = ds->train_len[u] + (which == CTRAIN_EVAL_TEST && ds->valid_item[u] != 0 ? 1 : 0);
    ctrain_batch__place(b, r, ds, s, s + m, b->seq);
}

/* Items the evaluation input holds (training items; on the test split also the valid item) are
 * never negatives; with exclude_target neither is the target. */
static bool ctrain_batch__excluded(const ctrain_dataset_t *ds, int32_t u, int32_t item,
                                   ctrain_eval_split_t which, bool exclude_target)
{
    if (ctrain_data_in_train(ds, u, item))
        return true;
    if (which == CTRAIN_EVAL_TEST && item == ds->valid_item[u])
        return true;
    return exclude_target && item == ctrain_eval_target(ds, u, which);
}

void ctrain_eval_candidates(int32_t *cand, int num_neg, const ctrain_dataset_t *ds, int32_t u,
                            ctrain_eval_split_t which, bool exclude_target, uint64_t seed)
{
    int32_t target = ctrain_eval_target(ds, u, which);
    cand[0] = target;
    uint64_t stream = ((uint64_t)u << 8) | ((uint64_t)which << 4) | CT__PURPOSE_EVAL_NEG;
    uint64_t next = 0;
    for (int j = 1; j <= num_neg; j++) {
        int32_t item = 0;
        bool found = false;
        for (int k = 0; k < 1000 && !found; k++) {
            item = ctrain_batch__item_of(ctrain_batch__draw(seed, stream, next++), ds->num_items);
            found = !ctrain_batch__excluded(ds, u, item, which, exclude_target);
        }
        /* A user who has seen (nearly) the whole catalogue: walk upward to an unseen item. If
         * there is none at all, the last draw stands, so the list is always filled. */
        for (int32_t tries = 0; !found && tries < ds->num_items; tries++) {
            item = item % ds->num_items + 1;
            found = !ctrain_batch__excluded(ds, u, item, which, exclude_target);
        }
        cand[j] = item;
    }
}

int ctrain_eval_rank(const float *scores, const int32_t *cand, int n)
{
    float t = scores[0];
    int rank = 0;
    for (int i = 1; i < n; i++) {
        if (cand[i] != cand[0] && !(scores[i] < t))
            rank++; /* another item scoring higher, equal, or NaN */
    }
    return rank;
}

double ctrain_eval_ndcg(int rank, int k)
{
    return rank < k ? 1.0 / log2((double)rank + 2.0) : 0.0;
}
