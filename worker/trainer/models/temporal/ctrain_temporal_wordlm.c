/*
 * ctrain_temporal_wordlm.c - the tiny random Qwen2 of --stage align without --lm_dir
 * (ctrain_temporal_wordlm.h): its configuration, its initialisation from Philox draws and its
 * pretraining on the descriptions (the reference's pretrain_lm) with AdamW on the CPU backend.
 *
 * Not here: the tokenizer (models/lm/ctrain_lm_wordtok.c), the broadcast and the freezing
 * (ctrain_temporal_task.c), the passes (models/lm/ctrain_lm.c).
 */
#include "ctrain_temporal_wordlm.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain_lm_wordtok.h"
#include "ctworker.h"

int ctrain_temporal_wordlm_cfg(const ctrain_temporal_wordlm_sizes_t *z, ctrain_lm_cfg_t *c,
                               ct_errbuf_t *eb)
{
    memset(c, 0, sizeof *c);
    c->arch = CTRAIN_LM_QWEN2;
    c->head = true;
    c->vocab = z->vocab;
    c->hidden = z->hidden;
    c->layers = z->layers;
    c->heads = z->heads;
    c->kv_heads = z->kv_heads;
    c->head_dim = z->heads > 0 ? z->hidden / z->heads : 0;
    c->inner = z->inner;
    c->max_pos = CTRAIN_TEMPORAL_WORDLM_POSITIONS;
    c->eps = 1e-6;
    c->rope_theta = 10000.0;
    c->act = CTRAIN_LM_ACT_SILU;
    c->tied = true;
    c->scale_attn = true;
    c->pad_id = CTRAIN_LM_WORDTOK_PAD;
    snprintf(c->prefix, sizeof c->prefix, "model.");
    return ctrain_lm_cfg_check(c, eb);
}

/* N(0, 1) by Box-Muller from two draws (the first in (0, 1], so that its log is finite). */
static double ctrain_temporal_wordlm__normal(ct_rng_t *r)
{
    const double u1 = ((double)ct_rng_u32(r) + 1.0) / 4294967296.0;
    const double u2 = (double)ct_rng_u32(r) / 4294967296.0;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void ctrain_temporal_wordlm_init(const ctrain_lm_cfg_t *c, uint64_t seed, float *out)
{
    ctrain_lm_tensor_t *ts = NULL;
    int n = 0;
    if (ctrain_lm_cfg_tensors(c, &ts, &n) != 0)
        return;
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        const ctrain_lm_tensor_t *t = &ts[i];
        const int64_t count = t->ndim == 1 ? t->shape[0] : t->shape[0] * t->shape[1];
        float *w = out + at;
        switch (t->role) {
        case CTRAIN_LM_T_LN1_W:
        case CTRAIN_LM_T_LN2_W:
        case CTRAIN_LM_T_LNF_W:
            for (int64_t j = 0; j < count; j++)
                w[j] = 1.0f;
            break;
        case CTRAIN_LM_T_Q_B:
        case CTRAIN_LM_T_K_B:
        case CTRAIN_LM_T_V_B:
            memset(w, 0, (size_t)count * sizeof *w);
            break;
        default: {
            ct_rng_t r;
            ct_rng_init(&r, seed, CT_RNG_STREAM(CTRAIN_TEMPORAL_WORDLM_PURPOSE_INIT, i), 0);
            for (int64_t j = 0; j < count; j++)
                w[j] = (float)(0.02 * ctrain_temporal_wordlm__normal(&r));
            if (t->role == CTRAIN_LM_T_WTE && c->pad_id >= 0) /* padding_idx's row */
                memset(w + (size_t)c->pad_id * (size_t)c->hidden, 0, (size_t)c->hidden * sizeof *w);
        }
        }
        at += (size_t)count;
    }
    free(ts);
}

int ctrain_temporal_wordlm_row_len(const ctrain_temporal_wordlm_texts_t *tx)
{
    int64_t longest = 0;
    for (int64_t j = 0; j < tx->n; j++)
        if (tx->off[j + 1] - tx->off[j] > longest)
            longest = tx->off[j + 1] - tx->off[j];
    const int64_t L = (int64_t)tx->k + tx->n_prompt + longest;
    return L > INT32_MAX ? INT32_MAX : (int)L;
}

int ctrain_temporal_wordlm_store(ctrain_lm_t *m, const float *w)
{
    size_t at = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const ctrain_lm_tensor_t *t = &m->tensors[i];
        const size_t count = (size_t)(t->ndim == 1 ? t->shape[0] : t->shape[0] * t->shape[1]);
        m->ops->copy(m->ops, ctrain_lm_tensor(m, i), w + at, count * sizeof *w, CT_COPY_H2D);
        at += count;
    }
    return m->ops->sync(m->ops);
}

/* One pretraining batch into ids / tgt ((B, L) each, L returned in *len) and its target count. */
static int64_t ctrain_temporal_wordlm__batch(const ctrain_temporal_wordlm_texts_t *tx, int step,
                                             uint64_t seed, int32_t *ids, int32_t *tgt,
                                             int32_t *order, int *len)
{
    const int B = CTRAIN_TEMPORAL_WORDLM_ROWS, k = tx->k, head = k + tx->n_prompt;
    ct_rng_t r;
    ct_rng_init(&r, seed, CT_RNG_STREAM(CTRAIN_TEMPORAL_WORDLM_PURPOSE_BATCH, step), 0);
    int64_t pick[CTRAIN_TEMPORAL_WORDLM_ROWS];
    int64_t longest = 0;
    for (int b = 0; b < B; b++) {
        pick[b] = (int64_t)ct_rng_below(&r, (uint64_t)tx->n);
        const int64_t n = tx->off[pick[b] + 1] - tx->off[pick[b]];
        longest = n > longest ? n : longest;
    }
    const int L = head + (int)longest;
    *len = L;
    int64_t count = 0;
    for (int b = 0; b < B; b++) {
        const int32_t *d = tx->ids + tx->off[pick[b]];
        const int n = (int)(tx->off[pick[b] + 1] - tx->off[pick[b]]); /* <eos> included */
        const int words = n - 1;
        int32_t *row = ids + (size_t)b * L, *t = tgt + (size_t)b * L;
        /* the prefix: a random order of the description's words, the first k of it (fewer
         * words: k draws with replacement from that order) */
        for (int j = 0; j < words; j++)
            order[j] = d[j];
        for (int j = words - 1; j > 0; j--) {
            const int q = (int)ct_rng_below(&r, (uint64_t)j + 1);
            const int32_t x = order[j];
            order[j] = order[q], order[q] = x;
        }
        for (int j = 0; j < k; j++)
            row[j] = words >= k  ? order[j]
                     : words > 0 ? order[ct_rng_below(&r, (uint64_t)words)]
                                 : CTRAIN_LM_WORDTOK_PAD;
        memcpy(row + k, tx->prompt, (size_t)tx->n_prompt * sizeof *row);
        memcpy(row + head, d, (size_t)n * sizeof *row);
        for (int p = head + n; p < L; p++)
            row[p] = CTRAIN_LM_WORDTOK_PAD;
        /* the labels are the description and <eos>: position p predicts p + 1 */
        for (int p = 0; p < L; p++)
            t[p] = p + 1 >= head && p + 1 < head + n ? row[p + 1] : -1;
        count += n;
    }
    return count;
}

int ctrain_temporal_wordlm_pretrain(const ctrain_lm_cfg_t *c, ct_ops_t *ops, uint64_t seed,
                                    int steps, const ctrain_temporal_wordlm_texts_t *tx,
                                    ctrain_temporal_wordlm_log_fn log, void *log_ctx, float *out,
                                    ct_errbuf_t *eb)
{
    ctrain_temporal_wordlm_init(c, seed, out);
    if (steps <= 0 || tx->n <= 0)
        return 0;
    if (!ops->host_memory)
        return ct_errbuf_set(eb, -ENOTSUP, "pretraining the tiny random LM needs the CPU backend");
    const int Lmax = ctrain_temporal_wordlm_row_len(tx);
    if (Lmax > c->max_pos)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "pretraining the tiny random LM: rows of %d soft tokens, %d prompt "
                             "tokens and up to %d description tokens are over its %d positions",
                             tx->k, tx->n_prompt, Lmax - tx->k - tx->n_prompt, c->max_pos);
    const int B = CTRAIN_TEMPORAL_WORDLM_ROWS;
    ctrain_lm_t *m = NULL;
    int rc = ctrain_lm_create(&m, c, ops, B * Lmax, Lmax, eb);
    if (rc != 0)
        return rc;
    const size_t P = m->num_params;
    int32_t *ids = malloc((size_t)B * (size_t)Lmax * sizeof *ids);
    int32_t *tgt = malloc((size_t)B * (size_t)Lmax * sizeof *tgt);
    int32_t *order = malloc(((size_t)Lmax + 1) * sizeof *order);
    float *mom = calloc(P, sizeof *mom), *var = calloc(P, sizeof *var);
    if (!ids || !tgt || !order || !mom || !var) {
        rc = ct_errbuf_set(eb, -ENOMEM, "out of memory for pretraining the tiny random LM");
        goto out;
    }
    if ((rc = ctrain_temporal_wordlm_store(m, out)) != 0) {
        rc = ct_errbuf_set(eb, rc, "the tiny random LM's weights could not be stored");
        goto out;
    }
    const float keep = (float)(1.0 - CTRAIN_TEMPORAL_WORDLM_LR * 0.01);
    for (int s = 0; s < steps; s++) {
        int L = 0;
        const int64_t count = ctrain_temporal_wordlm__batch(tx, s, seed, ids, tgt, order, &L);
        const ctrain_lm_batch_t b = {.B = B, .L = L, .ids = ids, .tgt = tgt};
        float loss = 0.0f;
        ctrain_lm_zero_grad(m);
        if ((rc = ctrain_lm_forward_backward(m, &b, (float)count, true, &loss, eb)) != 0) {
            rc = ct_errbuf_wrap(eb, rc, "pretraining the tiny random LM");
            goto out;
        }
        for (size_t i = 0; i < P; i++) /* AdamW's decoupled weight decay, then Adam */
            m->params_mem[i] *= keep;
        ops->adam_update(ops, m->params_mem, mom, var, m->grads_mem, (int64_t)P,
                         CTRAIN_TEMPORAL_WORDLM_LR, 0.9, 0.999, 1e-8, 1.0f, s + 1);
        if ((rc = ops->sync(ops)) != 0) {
            rc = ct_errbuf_set(eb, rc, "pretraining the tiny random LM: the backend failed");
            goto out;
        }
        if (log)
            log(log_ctx, s + 1, steps, loss);
    }
    /* the tensors are laid out in the table's order, so the flat buffer is out's layout */
    size_t at = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const ctrain_lm_tensor_t *t = &m->tensors[i];
        const size_t count = (size_t)(t->ndim == 1 ? t->shape[0] : t->shape[0] * t->shape[1]);
        memcpy(out + at, ctrain_lm_tensor(m, i), count * sizeof *out);
        at += count;
    }
out:
    free(ids);
    free(tgt);
    free(order);
    free(mom);
    free(var);
    ctrain_lm_destroy(m);
    return rc;
}
