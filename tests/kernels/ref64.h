/*
 * ref64.h - a float64 reference of every forward op in ct_kernels.h, written the naive way
 * (plain loops straight from the formulas, no BLAS, no tiling, no skipping) so that it shares
 * no code path with the ops under test. Only the dropout mask rule is shared - deliberately:
 * the reference must drop exactly the elements the op drops - and it is re-derived here from
 * ct_philox_block_at one draw at a time, not through the ops' span helper.
 *
 * Tests differentiate these functions with central finite differences to get reference
 * gradients; there is no reference backward.
 */
#ifndef REF64_H
#define REF64_H

#include <stdint.h>

#include "ct_kernels.h"

/* The dropout factor (0 or 1/(1-p)) of element index `i` of a tensor under drop. */
double ref_dropout_factor(ct_dropout_t drop, uint64_t i);

void ref_embed(double *out, const double *wte, const double *wpe, const int32_t *seq, int B, int L,
               int C, double scale, ct_pos_mode_t mode);
void ref_dropout(double *x, int64_t n, ct_dropout_t drop); /* in place */
void ref_timeline_mask(double *x, const int32_t *seq, int N, int C);
void ref_layernorm(double *out, const double *inp, const double *w, const double *b, int N, int C,
                   double eps);
void ref_linear(double *out, const double *inp, const double *w, const double *b, int N, int IC,
                int OC);
/* q from xq, k and v from xkv, packed (N,3C). */
void ref_qkv(double *qkv, const double *xq, const double *xkv, const double *w, const double *b,
             int N, int C);
/* Causal attention over every query row (no skipping), dropout on the probabilities. */
void ref_attention(double *out, const double *qkv, int B, int L, int C, int NH, ct_dropout_t drop);
void ref_relu(double *x, int64_t n); /* in place */
void ref_score(double *logits, const double *feats, const double *wte, const int32_t *ids, int N,
               int C);
double ref_bce(const double *pos_logits, const double *neg_logits, const int32_t *pos, int N,
               double count);
double ref_l2(const double *w, int64_t n, double lambda, ct_l2_mode_t mode);

/* TiSASRec's attention as TiSASRec.pytorch computes it: the (B,L,L,C) interval key and value
 * tensors materialised (each element with its dropout factor), padding query rows (seq == 0)
 * with uniform weights over all L keys, real rows causal; no output projection. */
void ref_tisas_attention(double *out, const double *q, const double *k, const double *v,
                         const double *rk, const double *rv, const int64_t *tseq,
                         const int32_t *seq, int B, int L, int C, int NH, int T,
                         ct_dropout_t drop_att, ct_dropout_t drop_rk, ct_dropout_t drop_rv);
/* Sinkhorn-Knopp on one n x n matrix (n <= 8): exp, then iters x (rows, columns). */
void ref_sinkhorn(double *out, const double *z, int n, int iters);
/* mHC's per-token mappings, hpre (N,n), hpost (N,n), hres (N,n,n). */
void ref_mhc_coeffs(double *hpre, double *hpost, double *hres, const double *X, const double *phi,
                    const double *alpha, const double *bias, int N, int n, int C, int iters,
                    double eps);
void ref_mhc_pre(double *u, const double *X, const double *hpre, int N, int n, int C);
void ref_mhc_post(double *Y, const double *X, const double *f, const double *hres,
                  const double *hpost, int N, int n, int C);
/* The cross-entropy losses (classes 1..V-1; the positive and a row's M negatives). */
double ref_ce(const double *feats, const double *wte, const int32_t *pos, int N, int C, int V,
              double count);
double ref_sampled_ce(const double *feats, const double *wte, const int32_t *pos,
                      const int32_t *neg, int B, int L, int C, int M, double count);

/* The language models' ops (kernels/cpu/lm.c). RoPE takes the op's own float32 table, widened:
 * the table is what transformers defines (float32 angles), checked on its own. */
void ref_rmsnorm(double *out, const double *inp, const double *w, int N, int C, double eps);
void ref_gelu(double *out, const double *inp, int64_t n, ct_gelu_kind_t kind);
void ref_swiglu(double *out, const double *gate, const double *up, int64_t n);
void ref_rope(double *out, const double *inp, const double *cos_t, const double *sin_t,
              const int32_t *pos, int N, int NH, int HD);
/* Grouped-query causal attention over the packed (B,L,(NH+2KVH)*HD) projection. */
void ref_gqa_attention(double *out, const double *qkv, int B, int L, int NH, int KVH, int HD,
                       double scale);
/* The next-token loss: classes 0..V-1, rows with tgt < 0 skipped, the sum over count. */
double ref_lm_ce(const double *feats, const double *wte, const int32_t *tgt, int N, int C, int V,
                 double count);

#endif /* REF64_H */
