/*
 * ctrain_eval.c - the two evaluation protocols and the popularity baseline of ctrain_eval.h. The
 * model is only asked for the final hidden state of column L-1 of each user's input window;
 * scoring goes through the backend's ops (one gather-dot per candidate list, one sgemm for the
 * full catalogue) and ranking is done on the host.
 */
#include "ctrain_eval.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CT__K (1 + CTRAIN_EVAL_NEGATIVES)

int64_t ctrain_eval_rank_full(const float *scores, int32_t V, int32_t target, const int32_t *excl,
                              int64_t n, int32_t extra_excl)
{
    const float t = scores[target];
    int64_t rank = 0;
    for (int32_t i = 1; i < V; i++)
        rank += i != target && !(scores[i] < t);
    bool extra_seen = false;
    for (int64_t k = 0; k < n; k++) {
        int32_t e = excl[k];
        if (k > 0 && e == excl[k - 1])
            continue; /* a re-consumed item is excluded once */
        extra_seen |= e == extra_excl;
        if (e != 0 && e != target && e < V && !(scores[e] < t))
            rank--;
    }
    if (extra_excl != 0 && !extra_seen && extra_excl != target && extra_excl < V &&
        !(scores[extra_excl] < t))
        rank--;
    return rank;
}

int ctrain_evaluator_init(ctrain_evaluator_t *ev, const ctrain_dataset_t *ds, ct_ops_t *ops,
                          int chunk, int L, ctrain_eval_mode_t mode, bool exclude_target, int rank,
                          int world, ct_errbuf_t *eb)
{
    memset(ev, 0, sizeof *ev);
    ev->ds = ds;
    ev->ops = ops;
    ev->chunk = chunk;
    ev->L = L;
    ev->mode = mode;
    ev->exclude_target = exclude_target;
    ev->rank = rank;
    ev->world = world;

    /* Users with a held-out pair, in id order, then this rank's contiguous share. */
    int64_t total = 0;
    for (int32_t u = 1; u <= ds->num_users; u++)
        total += ds->valid_item[u] != 0;
    int64_t begin = total * rank / world, end = total * (rank + 1) / world;
    size_t V = (size_t)ds->num_items + 1, K = CT__K;
    size_t width = V > K ? V : K;
    ev->users = malloc((size_t)(end - begin > 0 ? end - begin : 1) * sizeof *ev->users);
    ev->cand = malloc((size_t)chunk * K * sizeof *ev->cand);
    ev->scores = malloc((size_t)chunk * width * sizeof *ev->scores);
    ev->nonfinite = calloc((size_t)chunk, sizeof *ev->nonfinite);
    ev->pop = calloc(V, sizeof *ev->pop);
    /* TiSASRec needs the input window's times; they are there whenever the data has them */
    int rc = ctrain_batch_init(&ev->batch, chunk, L, 1, ds->time_scaled != NULL);
    if (!ev->users || !ev->cand || !ev->scores || !ev->nonfinite || !ev->pop || rc != 0) {
        ctrain_evaluator_close(ev);
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for evaluation");
    }
    int64_t k = 0, n = 0;
    for (int32_t u = 1; u <= ds->num_users; u++) {
        if (ds->valid_item[u] == 0)
            continue;
        if (k >= begin && k < end)
            ev->users[n++] = u;
        k++;
    }
    ev->n_users = n;
    for (int32_t u = 1; u <= ds->num_users; u++) {
        const int32_t *it = ctrain_data_user_items(ds, u);
        for (int32_t j = 0; j < ds->train_len[u]; j++)
            ev->pop[it[j]] += 1.0f;
    }
    if (ops->host_memory) {
        ev->cand_dev = ev->cand;
        ev->scores_dev = ev->scores;
    } else if (ops->alloc(ops, (void **)&ev->cand_dev, (size_t)chunk * K * sizeof(int32_t)) != 0 ||
               ops->alloc(ops, (void **)&ev->scores_dev, (size_t)chunk * width * sizeof(float)) !=
                   0) {
        ctrain_evaluator_close(ev);
        return ct_errbuf_set(eb, -ENOMEM, "out of %s memory for evaluation", ops->name);
    }
    return 0;
}

void ctrain_evaluator_close(ctrain_evaluator_t *ev)
{
    if (ev->ops && !ev->ops->host_memory) {
        ev->ops->release(ev->ops, ev->cand_dev);
        ev->ops->release(ev->ops, ev->scores_dev);
    }
    free(ev->users);
    free(ev->cand);
    free(ev->scores);
    free(ev->nonfinite);
    free(ev->pop);
    ctrain_batch_close(&ev->batch);
    memset(ev, 0, sizeof *ev);
}

/* Sums over users: [hr, ndcg, full_hr, full_ndcg, users, users with a non-finite score] per
 * split. */
typedef struct ctrain_eval__sums {
    double v[2][6];
} ctrain_eval__sums_t;

/* True when all n scores are finite. */
static bool ctrain_eval__all_finite(const float *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(s[i]))
            return false;
    return true;
}

/* The items the full ranking leaves out for user u: the training items (sorted) and, for the
 * test split, the validation item. */
static void ctrain_eval__history(const ctrain_dataset_t *ds, int32_t u, ctrain_eval_split_t which,
                                 const int32_t **excl, int64_t *n, int32_t *extra)
{
    *excl = ds->train_sorted + ds->user_start[u];
    *n = ds->train_len[u];
    *extra = which == CTRAIN_EVAL_TEST ? ds->valid_item[u] : 0;
}

static void ctrain_eval__add(ctrain_eval__sums_t *s, ctrain_eval_split_t which, int metric,
                             int64_t rank)
{
    s->v[which][metric] +=
        ctrain_eval_hr((int)(rank < INT32_MAX ? rank : INT32_MAX), CTRAIN_EVAL_TOPK);
    s->v[which][metric + 1] +=
        ctrain_eval_ndcg((int)(rank < INT32_MAX ? rank : INT32_MAX), CTRAIN_EVAL_TOPK);
}

/* One chunk of users for one split. model NULL: the popularity baseline. */
static int ctrain_eval__chunk(ctrain_evaluator_t *ev, ctrain_model_t *m, const int32_t *users,
                              int n, ctrain_eval_split_t which, ctrain_eval__sums_t *s)
{
    const ctrain_dataset_t *ds = ev->ds;
    ct_ops_t *o = ev->ops;
    const int32_t V = ds->num_items + 1;
    const float *feats = NULL;
    int ldf = 0, rc = 0;
    memset(ev->nonfinite, 0, (size_t)n * sizeof *ev->nonfinite);
    if (m) {
        for (int r = 0; r < n; r++)
            ctrain_batch_fill_eval(&ev->batch, r, ds, users[r], which);
        rc = ctrain_model_forward_features(m, ev->batch.seq, ev->batch.tseq, n, &feats, &ldf);
        if (rc != 0)
            return rc;
    }
    if (ev->mode & CTRAIN_EVAL_MODE_SAMPLED) {
        for (int r = 0; r < n; r++)
            ctrain_eval_candidates(ev->cand + (size_t)r * CT__K, CTRAIN_EVAL_NEGATIVES, ds,
                                   users[r], which, ev->exclude_target, CTRAIN_EVAL_SEED);
        if (m) {
            o->copy(o, ev->cand_dev, ev->cand, (size_t)n * CT__K * sizeof(int32_t), CT_COPY_H2D);
            o->score_candidates(o, ev->scores_dev, feats, ctrain_model_item_table(m), ev->cand_dev,
                                n, CT__K, m->cfg.hidden, ldf);
            o->copy(o, ev->scores, ev->scores_dev, (size_t)n * CT__K * sizeof(float), CT_COPY_D2H);
            if ((rc = o->sync(o)) != 0)
                return rc;
        } else {
            for (size_t i = 0; i < (size_t)n * CT__K; i++)
                ev->scores[i] = ev->pop[ev->cand[i]];
        }
        for (int r = 0; r < n; r++) {
            const float *row = ev->scores + (size_t)r * CT__K;
            ev->nonfinite[r] |= !ctrain_eval__all_finite(row, CT__K);
            ctrain_eval__add(s, which, 0,
                             ctrain_eval_rank(row, ev->cand + (size_t)r * CT__K, CT__K));
        }
    }
    if (ev->mode & CTRAIN_EVAL_MODE_FULL) {
        if (m) {
            o->score_all(o, ev->scores_dev, feats, ctrain_model_item_table(m), n, V, m->cfg.hidden,
                         ldf);
            o->copy(o, ev->scores, ev->scores_dev, (size_t)n * (size_t)V * sizeof(float),
                    CT_COPY_D2H);
            if ((rc = o->sync(o)) != 0)
                return rc;
        }
        for (int r = 0; r < n; r++) {
            const int32_t *excl;
            int64_t nx;
            int32_t extra;
            ctrain_eval__history(ds, users[r], which, &excl, &nx, &extra);
            const float *row = m ? ev->scores + (size_t)r * (size_t)V : ev->pop;
            ev->nonfinite[r] |=
                !ctrain_eval__all_finite(row + 1, (size_t)V - 1); /* item 0 is padding */
            ctrain_eval__add(s, which, 2,
                             ctrain_eval_rank_full(row, V, ctrain_eval_target(ds, users[r], which),
                                                   excl, nx, extra));
        }
    }
    s->v[which][4] += n;
    for (int r = 0; r < n; r++)
        s->v[which][5] += ev->nonfinite[r];
    return 0;
}

static int ctrain_eval__run(ctrain_evaluator_t *ev, ctrain_model_t *m, ct_reducer_t *red,
                            ctrain_eval_result_t *out, ct_errbuf_t *eb)
{
    ctrain_eval__sums_t s;
    memset(&s, 0, sizeof s);
    for (int w = 0; w < 2; w++) {
        ctrain_eval_split_t which = w == 0 ? CTRAIN_EVAL_VALID : CTRAIN_EVAL_TEST;
        for (int64_t i = 0; i < ev->n_users; i += ev->chunk) {
            int n = (int)(ev->n_users - i < ev->chunk ? ev->n_users - i : ev->chunk);
            int rc = ctrain_eval__chunk(ev, m, ev->users + i, n, which, &s);
            if (rc != 0)
                return ct_errbuf_set(eb, rc, "evaluation: the %s backend failed (%s)",
                                     ev->ops->name, ct_strerror(rc));
            if (ev->progress)
                ev->progress(ev->progress_ctx);
        }
    }
    int rc = ct_reducer_sum_f64(red, &s.v[0][0], 12, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, rc, "evaluation: reducing the metrics");
    ctrain_eval_split_result_t *r[2] = {&out->valid, &out->test};
    for (int w = 0; w < 2; w++) {
        double users = s.v[w][4];
        double d = users > 0 ? users : 1.0;
        r[w]->users = (int64_t)users;
        r[w]->nonfinite = (int64_t)s.v[w][5];
        bool ok = r[w]->nonfinite == 0;
        bool sampled = ok && (ev->mode & CTRAIN_EVAL_MODE_SAMPLED);
        bool full = ok && (ev->mode & CTRAIN_EVAL_MODE_FULL);
        r[w]->hr = sampled ? s.v[w][0] / d : NAN;
        r[w]->ndcg = sampled ? s.v[w][1] / d : NAN;
        r[w]->full_hr = full ? s.v[w][2] / d : NAN;
        r[w]->full_ndcg = full ? s.v[w][3] / d : NAN;
    }
    return 0;
}

int ctrain_eval_model(ctrain_evaluator_t *ev, ctrain_model_t *m, ct_reducer_t *red,
                      ctrain_eval_result_t *out, ct_errbuf_t *eb)
{
    if (m->max_batch < ev->chunk)
        return ct_errbuf_set(eb, -EINVAL, "evaluation chunk %d over the model's %d rows", ev->chunk,
                             m->max_batch);
    return ctrain_eval__run(ev, m, red, out, eb);
}

int ctrain_eval_popularity(ctrain_evaluator_t *ev, ct_reducer_t *red, ctrain_eval_result_t *out,
                           ct_errbuf_t *eb)
{
    return ctrain_eval__run(ev, NULL, red, out, eb);
}
