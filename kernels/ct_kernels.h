/*
 * ct_kernels.h - the CPU compute functions. Every op has a CPU function here, in
 * kernels/cpu/<op>.c, and (in builds with CUDA) a twin in ct_kernels_cuda.h with the same name
 * stem and argument order plus a trailing stream (a cuBLAS context for the matrix-product ops;
 * GPU-only scratch where the GPU needs some - that header lists the differences). Arguments go
 * outputs first (scratch right after the outputs), then inputs, then sizes, then configuration;
 * each buffer is commented with its shape.
 *
 * The CPU versions are the reference the GPU versions are tested against, and also the fast
 * CPU path: they must stay readable and exact. They never allocate (callers pass scratch, sized
 * by the macros below), never start threads (BLAS runs with the count set by
 * ct_cpu_set_threads, 1 for one thread per rank) and sum in a fixed order, so the same inputs
 * give the same bits on every run.
 *
 * What this header deliberately does not hold: the model (parameter tables, block layouts, the
 * training loop) - the trainer composes these ops; the ops know nothing of SASRec's layouts.
 *
 * ---- legend (dimension letters used in the shape comments) ----------------------------------
 *   B   sequences in the batch            L   sequence length (maxlen), column t = 0..L-1,
 *                                             left-padded, the newest item in column L-1
 *   C   hidden width (d, 50 in SASRec)    NH  attention heads; HS = C / NH is the head width
 *   N   rows of a row-wise op (B*L)       V   rows of the item table: items + 1, row 0 = padding
 *   P   rows of the positional table      U   users scored at once in evaluation
 *   K   candidates per user               n   elements of a flat buffer (mHC: streams)
 *   T   TiSASRec's time_span: interval buckets 0..T
 *   M   sampled negatives per sequence (sampled softmax) or matrices (Sinkhorn)
 *
 * ---- conventions every function follows -------------------------------------------------------
 * - Forward functions overwrite every element of their outputs (tests poison outputs with NaN).
 * - Backward functions ACCUMULATE (+=) into every gradient they produce, input gradients and
 *   weight gradients alike (llm.c's CPU rule). So the caller zeroes the flat gradient buffer once
 *   per optimizer step (one memset, which also makes gradient accumulation over micro-batches and
 *   the tied item embedding work) and zeroes an activation-gradient buffer before the first
 *   backward that adds into it; residual branches and tensors with several consumers then need
 *   no extra code. Where a gradient pointer may be NULL ("not wanted") it says so.
 * - Ops that are their own backward (dropout, timeline mask) are one function that overwrites
 *   and may run in place; the BCE loss writes d(logits) (it starts the backward pass).
 * - Ids (items, positions) are int32 and must lie inside their tables; the ops do not check.
 * - Random numbers: every dropout mask comes from the counter-based generator of ct_philox.h,
 *   addressed by a ct_dropout_t; masks are regenerated in the backward pass, never stored. A
 *   tensor's element index is its row-major index in the full tensor, so a rank that holds rows
 *   b0.. of a global batch passes offset + b0 * (elements per row) and draws exactly the numbers
 *   a single process would.
 */
#ifndef CT_KERNELS_H
#define CT_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- random numbers (kernels/cpu/rng.c) -------------------------------------------------
 * Draw k of stream (seed, stream) is lane k % 4 of Philox4x32-10 block k / 4; see
 * ct_philox.h. out[i] is draw offset + i, so a buffer can be filled in pieces, on any device,
 * in any order, and always holds the same numbers. */

/* out: (n) raw 32-bit draws. */
void ct_rng_u32_cpu(uint32_t *out, int64_t n, uint64_t seed, uint64_t stream, uint64_t offset);

/* out: (n) uniform floats in [0, 1). */
void ct_rng_uniform_cpu(float *out, int64_t n, uint64_t seed, uint64_t stream, uint64_t offset);

/* ---- defaults of the reference (docs/models.md §2.1) ------------------------------------- */
#define CT_SASREC_LN_EPS     1e-8f /* every LayerNorm */
#define CT_SASREC_ADAM_BETA1 0.9
#define CT_SASREC_ADAM_BETA2 0.98
#define CT_SASREC_ADAM_EPS   1e-8

/* ---- threads (kernels/cpu/blas.c) ----------------------------------------------------------
 * Sets the number of threads BLAS may use; the ops themselves are single-threaded. OpenBLAS
 * starts one thread per core unless told otherwise, so a trainer with one rank per core calls
 * ct_cpu_set_threads(1) before its first op. (OpenBLAS has created its idle pool by then; with
 * OPENBLAS_NUM_THREADS=1 or OMP_NUM_THREADS=1 in the environment, as torchrun-style launchers
 * set for multi-process jobs, it never creates one: about 5% faster on a busy 2-core machine.)
 * Returns 0, CT_ERANGE_VALUE for n < 1, or CT_ENOTBUILT when the BLAS in this build has no
 * thread control and n != 1. */
int ct_cpu_set_threads(int n);

/* ---- dropout (kernels/cpu/dropout.c) -------------------------------------------------------
 * Where a dropout mask comes from. Element i of the tensor uses draw offset + i of stream
 * (seed, stream); it is kept iff ct_philox_to_unit_float(draw) >= p and a kept element is
 * scaled by 1 / (1 - p) (ct_philox_dropout_factor). p == 0 is the identity and draws nothing,
 * so a config of all zeros means "no dropout" (evaluation). */
typedef struct ct_dropout {
    float p;         /* drop probability in [0, 1) */
    uint64_t seed;   /* generator key (the run's seed) */
    uint64_t stream; /* one stream per dropout site and step: the caller's numbering */
    uint64_t offset; /* draw index of element 0 */
} ct_dropout_t;

/* out = inp * mask / (1 - p). Forward and backward are this same call (applied to the
 * activation, then to its gradient, with the same ct_dropout_t). out may equal inp.
 *   out: (n)   inp: (n) */
void ct_dropout_cpu(float *out, const float *inp, int64_t n, ct_dropout_t drop);

/* ---- timeline mask (kernels/cpu/dropout.c) --------------------------------------------------
 * out[r,:] = inp[r,:] * (seq[r] != 0): the 2020/TF variant's zeroing of padding rows. Its own
 * backward. out may equal inp.
 *   out: (N,C)   inp: (N,C)   seq: (N) item ids, 0 = padding */
void ct_timeline_mask_cpu(float *out, const float *inp, const int32_t *seq, int N, int C);

/* ---- embedding (kernels/cpu/embed.c) -------------------------------------------------------
 * out[b,t,:] = scale * wte[seq[b,t],:] + wpe[pid(b,t),:]   (SASRec: scale = sqrt(C))
 * The positional id pid(b,t) follows one of the two rules of docs/models.md §2.1: */
typedef enum ct_pos_mode {
    /* HEAD / 2024: P = L + 1 rows, row 0 = padding; pid = t + 1 where seq[b,t] != 0, else 0.
     * Padding positions add row 0, and row 0 gets no gradient (padding_idx = 0). */
    CT_POS_PADDED = 0,
    /* 2020 / TF: P >= L rows; pid = t in every column, padding included (a timeline mask is
     * what zeroes padding rows in that variant). Every used row gets gradient. */
    CT_POS_ABSOLUTE = 1,
} ct_pos_mode_t;

/* out: (B,L,C)   wte: (V,C) item table   wpe: (P,C) positional table, or NULL for none
 * (TiSASRec adds no positional vector)   seq: (B,L) item ids, 0 = padding */
void ct_embed_forward_cpu(float *out, const float *wte, const float *wpe, const int32_t *seq, int B,
                          int L, int C, float scale, ct_pos_mode_t pos_mode);

/* dwte[seq[b,t]] += scale * dout[b,t] except for seq == 0 (the item table's padding_idx);
 * dwpe[pid] += dout[b,t], except pid 0 in CT_POS_PADDED. Rows are visited in (b, t) order.
 *   dwte: (V,C) +=   dwpe: (P,C) +=, or NULL   dout: (B,L,C)   seq: (B,L) */
void ct_embed_backward_cpu(float *dwte, float *dwpe, const float *dout, const int32_t *seq, int B,
                           int L, int C, float scale, ct_pos_mode_t pos_mode);

/* TiSASRec's absolute-position key and value rows, one copy per sequence (the reference gathers
 * them per sequence and drops them out per element, so each sequence needs its own copy before
 * its dropout): out[b,t,:] = table[t,:].
 *   out: (B,L,C)   table: (L,C) */
void ct_rows_broadcast_forward_cpu(float *out, const float *table, int B, int L, int C);

/* dtable[t] += sum over b (in order) of dout[b,t].   dtable: (L,C) +=   dout: (B,L,C) */
void ct_rows_broadcast_backward_cpu(float *dtable, const float *dout, int B, int L, int C);

/* ---- layernorm (kernels/cpu/layernorm.c) ----------------------------------------------------
 * out = (inp - mean) * rstd * weight + bias per row, biased variance, rstd = 1/sqrt(var + eps)
 * (PyTorch's LayerNorm; SASRec uses eps = CT_SASREC_LN_EPS).
 *   out: (N,C)   mean: (N) saved for backward   rstd: (N) saved for backward
 *   inp: (N,C)   weight: (C)   bias: (C) */
void ct_layernorm_forward_cpu(float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int N, int C, float eps);

/*   dinp: (N,C) +=   dweight: (C) +=   dbias: (C) +=   dout: (N,C)   inp: (N,C)   weight: (C)
 *   mean, rstd: (N) from the forward */
void ct_layernorm_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int N, int C);

/* ---- linear (kernels/cpu/linear.c) ----------------------------------------------------------
 * out = inp W^T + b (PyTorch's Linear; a Conv1d with kernel size 1 is the same with its weight
 * read as (OC,IC)). One sgemm.
 *   out: (N,OC)   inp: (N,IC)   weight: (OC,IC)   bias: (OC) or NULL */
void ct_linear_forward_cpu(float *out, const float *inp, const float *weight, const float *bias,
                           int N, int IC, int OC);

/* dinp += dout W; dweight += dout^T inp; dbias += column sums of dout (rows in order).
 *   dinp: (N,IC) +=, or NULL   dweight: (OC,IC) +=, or NULL (a frozen weight)
 *   dbias: (OC) +=, or NULL
 *   dout: (N,OC)   inp: (N,IC)   weight: (OC,IC) */
void ct_linear_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int IC, int OC);

/* GPT-2's Conv1D: out = inp W + b with the weight stored (in, out), as transformers keeps it.
 *   out: (N,OC)   inp: (N,IC)   weight: (IC,OC)   bias: (OC) or NULL */
void ct_conv1d_forward_cpu(float *out, const float *inp, const float *weight, const float *bias,
                           int N, int IC, int OC);
/* dinp += dout W^T; dweight += inp^T dout; dbias += column sums of dout (rows in order).
 *   dinp: (N,IC) += or NULL   dweight: (IC,OC) += or NULL   dbias: (OC) += or NULL */
void ct_conv1d_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int IC, int OC);

/* ---- attention input projection (kernels/cpu/linear.c) --------------------------------------
 * PyTorch MultiheadAttention's packed in_proj: q = xq Wq^T + bq, k = xkv Wk^T + bk,
 * v = xkv Wv^T + bv, with W = [Wq; Wk; Wv] and the result packed as qkv[r] = [q | k | v].
 * Self-attention (post_ln, pre_ln) passes xq == xkv and costs one sgemm; the original layout
 * passes xq = LN(x), xkv = x.
 *   qkv: (N,3C)   xq: (N,C)   xkv: (N,C)   weight: (3C,C)   bias: (3C) */
void ct_qkv_forward_cpu(float *qkv, const float *xq, const float *xkv, const float *weight,
                        const float *bias, int N, int C);

/* dxq += dq Wq; dxkv += [dk|dv] [Wk;Wv]; dweight, dbias += as ct_linear_backward_cpu.
 * dxq may equal dxkv (self-attention: one input, one gradient).
 *   dxq: (N,C) +=   dxkv: (N,C) +=   dweight: (3C,C) +=   dbias: (3C) +=   dqkv: (N,3C)
 *   xq, xkv: (N,C)   weight: (3C,C) */
void ct_qkv_backward_cpu(float *dxq, float *dxkv, float *dweight, float *dbias, const float *dqkv,
                         const float *xq, const float *xkv, const float *weight, int N, int C);

/* ---- causal multi-head attention (kernels/cpu/attention.c) -----------------------------------
 * For each sequence b and head h (head h = columns h*HS .. h*HS+HS-1 of q, k, v and out):
 *   S[i,j] = q_i . k_j / sqrt(HS) for j <= i   (causal mask; NO key-padding mask: real queries
 *            attend to padding keys, as in SASRec.pytorch, docs/models.md §2.6)
 *   att[i,:] = softmax_j S[i,:]                (zeros above the diagonal)
 *   out_i = sum_j drop(att)[i,j] v_j           dropout on the probabilities, element
 *            (b,h,i,j) drawing index offset + ((b*NH + h)*L + i)*L + j
 * The output projection is a separate ct_linear_* call.
 *
 * Skipping padding queries (qmask): where qmask is not NULL, query rows with qmask[b,i] == 0
 * are skipped: their out row and att row are written as zeros, and the backward pass treats
 * their dout as zero. Every other row, and every gradient, is bit-for-bit what qmask == NULL
 * gives provided the caller only skips rows whose outputs nothing downstream uses (their
 * incoming gradient is exactly zero). Keys and values are never skipped. Safe uses:
 *   - the last block of any layout with qmask = seq: its rows go row-wise to the logits, and
 *     the loss ignores positions where pos == 0, which are exactly those where seq == 0;
 *   - every block when a timeline mask follows it (2020 variant): padding rows are zeroed;
 *   - evaluation: only column L-1 is scored, so the last block may skip all other rows.
 * Not safe: earlier blocks of HEAD's layouts, whose padding rows become keys and values of the
 * next block. Skipping is done in row tiles whose edges do not move, so a partly skipped tile
 * computes its skipped rows and then zeroes them, which is why the used rows come out bitwise
 * equal.
 *
 *   out: (B,L,C)   att: (B,NH,L,L) softmax probabilities before dropout, saved for backward
 *   scratch: CT_ATTENTION_FWD_SCRATCH(L) floats (unused when drop.p == 0; may be NULL then)
 *   qkv: (B,L,3C) packed [q|k|v]   qmask: (B,L) or NULL */
#define CT_ATTENTION_FWD_SCRATCH(L) ((size_t)(L) * (size_t)(L))
void ct_attention_forward_cpu(float *out, float *att, float *scratch, const float *qkv,
                              const int32_t *qmask, int B, int L, int C, int NH, ct_dropout_t drop);

/*   dqkv: (B,L,3C) +=   scratch: CT_ATTENTION_BWD_SCRATCH(L) floats   dout: (B,L,C)
 *   att: (B,NH,L,L) from the forward   qkv: (B,L,3C)   qmask, drop: as in the forward */
#define CT_ATTENTION_BWD_SCRATCH(L) (2 * (size_t)(L) * (size_t)(L) + (size_t)(L))
void ct_attention_backward_cpu(float *dqkv, float *scratch, const float *dout, const float *att,
                               const float *qkv, const int32_t *qmask, int B, int L, int C, int NH,
                               ct_dropout_t drop);

/* ---- time-aware attention (kernels/cpu/tisas.c) ---------------------------------------------
 * TiSASRec's attention (docs/models.md §3.3) for each sequence b and head h (head h = columns
 * h*HS .. h*HS+HS-1), with tau_ij = min(|tseq[b,i] - tseq[b,j]|, T):
 *   S[i,j] = (q_i . k_j + sum_c q_ic rk[tau_ij,c] fK[b,i,j,c]) / sqrt(HS)   for j <= i
 *   att[i,:] = softmax_j S[i,:]       (zeros above the diagonal)
 *   out_i = sum_j drop(att)[i,j] (v_j + rv[tau_ij] * fV[b,i,j,:])
 * k and v are the key and value rows with the absolute-position rows already added (the
 * reference's K_w x + P^K and V_w x + P^V, their dropout included), rk and rv the interval
 * key and value tables. fK and fV are the dropout factors (0 or 1/(1-p_rkv)) of the
 * reference's (B,L,L,C) interval tensors, given as keep bits by ct_tisas_mask_cpu (NULL: no
 * dropout on that tensor); no (B,L,L,C) float tensor is formed (see tisas.c). The
 * probabilities' dropout is attention.c's: element (b,h,i,j) draws offset +
 * ((b*NH + h)*L + i)*L + j of drop_att, regenerated. No output projection (TiSASRec has
 * none).
 *
 * qmask (B,L): query rows with qmask == 0 are not computed; their out and att rows are written
 * as zeros and their dout is ignored. TiSASRec.pytorch gives padding query rows uniform weights
 * over all L keys, but the timeline mask after every block zeroes whatever those rows hold, so
 * nothing downstream reads them: the model passes seq (and, in evaluation, a mask of column
 * L-1 for the last block). Keys and values are never skipped: real queries attend to padding
 * keys, as in the reference. qmask NULL computes every row as a real query.
 *
 *   out: (B,L,C)   att: (B,NH,L,L) probabilities before dropout, for the backward
 *   scratch: CT_TISAS_ATTENTION_FWD_SCRATCH(L,C) floats   q, k, v: (B,L,C)
 *   rk, rv: (T+1,C)   tseq: (B,L) scaled times, 0 at padding   qmask: (B,L) or NULL
 *   mask_rk, mask_rv: (B,L,CT_TISAS_MASK_WORDS(L,C)) or NULL */
#define CT_TISAS_ATTENTION_FWD_SCRATCH(L, C) \
    ((size_t)(L) * (size_t)(L) + 2 * (size_t)(L) * (size_t)(C) + (size_t)(L))
void ct_tisas_attention_forward_cpu(float *out, float *att, float *scratch, const float *q,
                                    const float *k, const float *v, const float *rk,
                                    const float *rv, const int64_t *tseq, const int32_t *qmask,
                                    int B, int L, int C, int NH, int T, ct_dropout_t drop_att,
                                    const uint32_t *mask_rk, const uint32_t *mask_rv, float p_rkv);

/*   dq, dk, dv: (B,L,C) +=   drk, drv: (T+1,C) +=
 *   scratch: CT_TISAS_ATTENTION_BWD_SCRATCH(L,C) floats   dout: (B,L,C)   att: from the forward
 *   the rest as in the forward */
#define CT_TISAS_ATTENTION_BWD_SCRATCH(L, C) \
    (2 * (size_t)(L) * (size_t)(L) + 2 * (size_t)(L) * (size_t)(C) + 2 * (size_t)(L))
void ct_tisas_attention_backward_cpu(float *dq, float *dk, float *dv, float *drk, float *drv,
                                     float *scratch, const float *dout, const float *att,
                                     const float *q, const float *k, const float *v,
                                     const float *rk, const float *rv, const int64_t *tseq,
                                     const int32_t *qmask, int B, int L, int C, int NH, int T,
                                     ct_dropout_t drop_att, const uint32_t *mask_rk,
                                     const uint32_t *mask_rv, float p_rkv);

/* The dropout masks of the (B,L,L,C) interval key or value tensor as keep bits, for the query
 * rows the attention computes: row (b,i) at word (b*L + i) * CT_TISAS_MASK_WORDS(L,C), bit
 * j*C + c (j = 0..i) is 1 iff element (b,i,j,c) is kept, the element drawing index offset +
 * ((b*L + i)*L + j)*C + c of drop (one draw per element, as the reference drops each element).
 * Rows with qmask == 0 are not written (NULL: every row). The model draws each mask once per
 * pass and every block's forward and backward reads it: B*L*L*C bits, 1/32 of the float tensor.
 *   bits: (B,L,CT_TISAS_MASK_WORDS(L,C))   qmask: (B,L) or NULL */
#define CT_TISAS_MASK_WORDS(L, C) (((size_t)(L) * (size_t)(C) + 31) / 32)
void ct_tisas_mask_cpu(uint32_t *bits, const int32_t *qmask, int B, int L, int C,
                       ct_dropout_t drop);

/* ---- mHC residual streams (kernels/cpu/mhc.c) -------------------------------------------------
 * Manifold-constrained hyper-connections (docs/models.md §7): every token carries n streams of
 * C channels, X (n,C) row-major, and each sub-layer F (with its own pre-norm) is wrapped as
 *   X' = H^res X + (H^post)^T F(H^pre X)
 * with per-token mappings computed from the flattened streams. */
#define CT_MHC_MAX_STREAMS 8
/* Columns of the projection: n (pre) + n (post) + n*n (res, row-major). */
#define CT_MHC_COEFFS(n) (2 * (n) + (n) * (n))

/* Sinkhorn-Knopp on M matrices of n x n (n <= CT_MHC_MAX_STREAMS): M0 = exp(Z - max Z), then
 * iters times: divide every row by its sum, then every column by its sum. The result has
 * columns summing to 1 exactly (to rounding) and rows to within the method's convergence
 * (after 20 iterations on mHC's logits, 1e-6 and better).
 *   out: (M,n,n)   logits: (M,n,n) */
void ct_sinkhorn_forward_cpu(float *out, const float *logits, int M, int n, int iters);

/* dlogits += the gradient through all iters iterations (iterates recomputed per matrix).
 *   dlogits: (M,n,n) +=   scratch: CT_SINKHORN_BWD_SCRATCH(n, iters) floats
 *   dout: (M,n,n)   logits: (M,n,n) */
#define CT_SINKHORN_BWD_SCRATCH(n, iters) \
    ((size_t)(2 * (iters) + 1) * (size_t)(n) * (size_t)(n) + 2 * (size_t)(iters) * (size_t)(n))
void ct_sinkhorn_backward_cpu(float *dlogits, float *scratch, const float *dout,
                              const float *logits, int M, int n, int iters);

/* The mappings of one mHC layer for N tokens (docs/models.md §7.2). With D = n*C and
 * xh = X_r / sqrt(mean(X_r^2) + eps) (RMSNorm of the flattened streams, no gain: phi carries
 * any scale) and proj = xh phi (K = CT_MHC_COEFFS(n) columns):
 *   hpre  = sigmoid(alpha[0] proj[0:n] + bias[0:n])
 *   hpost = 2 sigmoid(alpha[1] proj[n:2n] + bias[n:2n])
 *   hres  = Sinkhorn(alpha[2] proj[2n:] + bias[2n:], iters)
 *   hpre, hpost: (N,n)   hres: (N,n,n)   proj: (N,K) saved for the backward   rstd: (N) saved
 *   X: (N,D)   phi: (D,K)   alpha: (3)   bias: (K) */
void ct_mhc_coeffs_forward_cpu(float *hpre, float *hpost, float *hres, float *proj, float *rstd,
                               const float *X, const float *phi, const float *alpha,
                               const float *bias, int N, int n, int C, int iters, float eps);

/*   dX: (N,D) +=   dphi: (D,K) +=   dalpha: (3) +=   dbias: (K) +=
 *   scratch: CT_MHC_COEFFS_BWD_SCRATCH(N, n, iters) floats
 *   dhpre, dhpost: (N,n)   dhres: (N,n,n)   the rest as in the forward */
#define CT_MHC_COEFFS_BWD_SCRATCH(N, n, iters) \
    ((size_t)(N) * (size_t)CT_MHC_COEFFS(n) + CT_SINKHORN_BWD_SCRATCH(n, iters))
void ct_mhc_coeffs_backward_cpu(float *dX, float *dphi, float *dalpha, float *dbias, float *scratch,
                                const float *dhpre, const float *dhpost, const float *dhres,
                                const float *X, const float *phi, const float *alpha,
                                const float *bias, const float *proj, const float *rstd, int N,
                                int n, int C, int iters);

/* The sub-layer input: u_r = sum_s hpre[r,s] X[r,s,:].   u: (N,C)   X: (N,n,C)   hpre: (N,n) */
void ct_mhc_pre_forward_cpu(float *u, const float *X, const float *hpre, int N, int n, int C);
/*   dX: (N,n,C) +=   dhpre: (N,n) +=   du: (N,C) */
void ct_mhc_pre_backward_cpu(float *dX, float *dhpre, const float *du, const float *X,
                             const float *hpre, int N, int n, int C);

/* The new streams: Y[r,s,:] = sum_t hres[r,s,t] X[r,t,:] + hpost[r,s] f[r,:].
 *   Y: (N,n,C)   X: (N,n,C)   f: (N,C) the sub-layer output   hres: (N,n,n)   hpost: (N,n) */
void ct_mhc_post_forward_cpu(float *Y, const float *X, const float *f, const float *hres,
                             const float *hpost, int N, int n, int C);
/*   dX: (N,n,C) +=   df: (N,C) +=   dhres: (N,n,n) +=   dhpost: (N,n) +=   dY: (N,n,C) */
void ct_mhc_post_backward_cpu(float *dX, float *df, float *dhres, float *dhpost, const float *dY,
                              const float *X, const float *f, const float *hres, const float *hpost,
                              int N, int n, int C);

/* The ends of the network: the embedding copied into every stream (X[r,s,:] = x[r,:]), and the
 * streams averaged before the final LayerNorm (x[r,:] = mean_s X[r,s,:]).
 *   X: (N,n,C)   x: (N,C);  backward: dx += sum_s dX[r,s,:]  /  dX[r,s,:] += dx[r,:] / n */
void ct_mhc_expand_forward_cpu(float *X, const float *x, int N, int n, int C);
void ct_mhc_expand_backward_cpu(float *dx, const float *dX, int N, int n, int C);
void ct_mhc_collapse_forward_cpu(float *x, const float *X, int N, int n, int C);
void ct_mhc_collapse_backward_cpu(float *dX, const float *dx, int N, int n, int C);

/* ---- the language models' ops (kernels/cpu/lm.c) ----------------------------------------------
 * What transformers computes in float32 for GPT-2 and Qwen2 (CUDA twins: kernels/cuda/lm.cu;
 * RoPE's table is computed here only and copied to the device).
 *   HD  a head's width (Qwen2: C / NH unless head_dim says otherwise), H = HD / 2 */

/* RMSNorm over the last dimension (Qwen2RMSNorm): out = weight * (x * rstd), rstd = 1 /
 * sqrt(mean(x^2) + eps), saved for the backward.   out: (N,C)   rstd: (N)   inp: (N,C)
 * weight: (C) */
void ct_rmsnorm_forward_cpu(float *out, float *rstd, const float *inp, const float *weight, int N,
                            int C, float eps);
/*   dinp: (N,C) +=   dweight: (C) +=   dout, inp: (N,C)   weight: (C)   rstd: (N) */
void ct_rmsnorm_backward_cpu(float *dinp, float *dweight, const float *dout, const float *inp,
                             const float *weight, const float *rstd, int N, int C);

/* GELU: the tanh approximation (GPT-2's gelu_new, gelu_pytorch_tanh) or the erf form (gelu). */
typedef enum ct_gelu_kind {
    CT_GELU_TANH = 0,
    CT_GELU_ERF = 1,
} ct_gelu_kind_t;

/* out = gelu(inp); out may equal inp only when the backward gets the input some other way.
 *   out, inp: (n) */
void ct_gelu_forward_cpu(float *out, const float *inp, int64_t n, ct_gelu_kind_t kind);
/* dinp += dout * gelu'(inp).   dinp: (n) +=   dout, inp: (n) */
void ct_gelu_backward_cpu(float *dinp, const float *dout, const float *inp, int64_t n,
                          ct_gelu_kind_t kind);

/* SwiGLU's gate (Qwen2MLP): out = silu(gate) * up.   out, gate, up: (n) */
void ct_swiglu_forward_cpu(float *out, const float *gate, const float *up, int64_t n);
/*   dgate, dup: (n) +=   dout, gate, up: (n) */
void ct_swiglu_backward_cpu(float *dgate, float *dup, const float *dout, const float *gate,
                            const float *up, int64_t n);

/* RoPE's table (Qwen2RotaryEmbedding, default rope_type): cos and sin of p * inv_freq[i] for
 * positions p < P, inv_freq[i] = 1 / theta^(2i / HD), computed in float32 step for step as
 * transformers does (so that long positions round the same way).   cos_t, sin_t: (P,H) */
void ct_rope_table_cpu(float *cos_t, float *sin_t, int P, int HD, float theta);

/* Rotates each head of row r by position pos[r] (apply_rotary_pos_emb, halves not interleaved):
 * o[i] = x[i] cos - x[i+H] sin, o[i+H] = x[i+H] cos + x[i] sin. out may equal inp.
 *   out, inp: (N,NH,HD)   cos_t, sin_t: (P,H)   pos: (N), each < P */
void ct_rope_forward_cpu(float *out, const float *inp, const float *cos_t, const float *sin_t,
                         const int32_t *pos, int N, int NH, int HD);
/*   dinp: (N,NH,HD) +=   dout: (N,NH,HD) */
void ct_rope_backward_cpu(float *dinp, const float *dout, const float *cos_t, const float *sin_t,
                          const int32_t *pos, int N, int NH, int HD);

/* Grouped-query causal attention (Qwen2; GPT-2 with KVH = NH) over a packed projection: row t
 * of sequence b holds [q heads 0..NH-1 | k heads 0..KVH-1 | v heads 0..KVH-1], HD wide each
 * (Qwen2's q_proj, k_proj and v_proj as one linear; GPT-2's c_attn). Query head h uses key and
 * value head h / (NH / KVH), as transformers' repeat_kv. For each b, h:
 *   S[i,j] = scale * q_i . k_j for j <= i (causal; no padding mask: right-padded lines put
 *            their padding after every real token, where no real query looks),
 *   att[i,:] = softmax_j S[i,:] (zeros above the diagonal), out_i = sum_j att[i,j] v_j.
 * scale: 1 / sqrt(HD), GPT-2's scale_attn_by_inverse_layer_idx also / (layer + 1). NH % KVH == 0.
 *   out: (B,L,NH*HD)   att: (B,NH,L,L) saved for the backward   qkv: (B,L,(NH+2KVH)*HD) */
void ct_gqa_attention_forward_cpu(float *out, float *att, const float *qkv, int B, int L, int NH,
                                  int KVH, int HD, float scale);
/*   dqkv: (B,L,(NH+2KVH)*HD) +=   scratch: (L) floats   dout: (B,L,NH*HD)   att, qkv: as above */
void ct_gqa_attention_backward_cpu(float *dqkv, float *scratch, const float *dout, const float *att,
                                   const float *qkv, int B, int L, int NH, int KVH, int HD,
                                   float scale);

/* The token embedding, plus GPT-2's learned positions: out[r] = wte[ids[r]] (+ wpe[pos[r]]).
 * Unlike SASRec's ct_embed_*, every id is a real token (GPT-2's id 0 is "!").
 *   out: (N,C)   wte: (V,C)   wpe: (P,C) or NULL (Qwen2)   ids: (N)   pos: (N) (unused without
 *   wpe) */
void ct_lm_embed_forward_cpu(float *out, const float *wte, const float *wpe, const int32_t *ids,
                             const int32_t *pos, int N, int C);
/* dwte[ids[r]] += dout[r] except where ids[r] == skip_id (Qwen2's padding_idx; -1: none);
 * dwpe[pos[r]] += dout[r]. Rows in order. dwte or dwpe NULL: a frozen table, no gradient.
 *   dwte: (V,C) += or NULL   dwpe: (P,C) += or NULL   dout: (N,C) */
void ct_lm_embed_backward_cpu(float *dwte, float *dwpe, const float *dout, const int32_t *ids,
                              const int32_t *pos, int N, int C, int32_t skip_id);

/* ---- element-wise ops (kernels/cpu/elementwise.c) -------------------------------------------- */

/* out = max(inp, 0); out may equal inp.   out: (n)   inp: (n) */
void ct_relu_forward_cpu(float *out, const float *inp, int64_t n);

/* dinp += dout where out > 0. Takes the forward's OUTPUT (out > 0 iff inp > 0), so the
 * forward may run in place.   dinp: (n) +=   dout: (n)   out: (n) */
void ct_relu_backward_cpu(float *dinp, const float *dout, const float *out, int64_t n);

/* out = inp1 + inp2; out may equal either input.   out, inp1, inp2: (n) */
void ct_residual_forward_cpu(float *out, const float *inp1, const float *inp2, int64_t n);

/* dinp1 += dout; dinp2 += dout.   dinp1, dinp2: (n) +=   dout: (n) */
void ct_residual_backward_cpu(float *dinp1, float *dinp2, const float *dout, int64_t n);

/* x *= s.   x: (n) */
void ct_scale_cpu(float *x, float s, int64_t n);

/* ---- scores and loss (kernels/cpu/loss.c) ----------------------------------------------------
 * Training scores with the tied item table: logits[r] = feats[r] . wte[ids[r]], for every row
 * (padding rows included, as the reference does; the loss ignores them).
 *   logits: (N)   feats: (N,C) final-LN output   wte: (V,C)   ids: (N) pos or neg item ids */
void ct_score_forward_cpu(float *logits, const float *feats, const float *wte, const int32_t *ids,
                          int N, int C);

/* dfeats[r] += dlogits[r] * wte[ids[r]]; dwte[ids[r]] += dlogits[r] * feats[r] except for id 0
 * (padding_idx). Rows in order.
 *   dfeats: (N,C) +=   dwte: (V,C) +=   dlogits: (N)   feats: (N,C)   wte: (V,C)   ids: (N) */
void ct_score_backward_cpu(float *dfeats, float *dwte, const float *dlogits, const float *feats,
                           const float *wte, const int32_t *ids, int N, int C);

/* SASRec's loss, BCE with logits and one negative per position (docs/models.md §2.1):
 *   loss = ( sum_{r: pos[r] != 0} softplus(-pos_logits[r]) + softplus(neg_logits[r]) ) / count
 * which is the reference's mean over the positive terms plus the mean over the negative terms
 * (both means run over the same positions). count is the number of positions with pos != 0
 * that the mean runs over: this batch's (ct_count_nonzero_cpu) for one process, the global
 * batch's in data-parallel runs or over accumulated micro-batches, so that summed gradients are
 * those of one big batch. softplus is evaluated stably (max(x,0) + log1p(exp(-|x|))), the sum
 * in double in row order. count <= 0 gives loss 0 and zero gradients.
 *   loss: (1)   dpos: (N) d loss / d pos_logits, WRITTEN (not +=); 0 where pos == 0
 *   dneg: (N) likewise   pos_logits, neg_logits: (N)   pos: (N) positive ids, 0 = no target */
void ct_bce_loss_cpu(float *loss, float *dpos, float *dneg, const float *pos_logits,
                     const float *neg_logits, const int32_t *pos, int N, float count);

/* The GPT-2 recommender's BPR (docs/models.md §9) over B interactions, row r's indices at
 * idx + r * CT_BPR_IDX: user u, positive p, negative n, and the rows mp, mn of proj holding p's
 * and n's projected texts (ignored when proj is NULL: ID embeddings only). With
 * v+ = item_p (+ proj_mp), v- = item_n (+ proj_mn), x = user_u . v+ - user_u . v-:
 *   loss = sum_r softplus(-x) / count (summed in double in row order, WRITTEN)
 *   du_r = g (v+ - v-) + l2 user_u,  dv+_r = g user_u + l2 v+,  dv-_r = -g user_u + l2 v-
 * with g = -1 / (count (1 + e^x)) and l2 = 2 lambda / count (the reference's penalty
 * lambda (|u|^2 + |v+|^2 + |v-|^2) / count, in the gradients only). du (B, D) and dvpn (2B, D):
 * rows 2r and 2r+1 are dv+ and dv-, so lm_embed_backward with ids (p0, n0, p1, n1, ...) adds
 * them into the item table in row order. WRITTEN. */
#define CT_BPR_IDX 5
void ct_bpr_loss_cpu(float *loss, float *du, float *dvpn, const float *user, const float *item,
                     const float *proj, const int32_t *idx, int B, int D, float count,
                     float lambda);
/* out (N, C) <- the mean of h (N, L, C) over rows 0 .. len[k]-1 of each k (1 <= len <= L), the
 * sum in row order; the backward WRITES dh (N, L, C): dout / len on those rows, 0 after. */
void ct_mean_pool_forward_cpu(float *out, const float *h, const int32_t *len, int N, int L, int C);
void ct_mean_pool_backward_cpu(float *dh, const float *dout, const int32_t *len, int N, int L,
                               int C);

/* Softmax cross-entropy over the whole catalogue (BERT4Rec's loss; SASRec+ of Klenitskiy &
 * Vasilev, RecSys 2023): for every row with pos[r] != 0,
 *   loss += (logsumexp_{i=1..V-1} feats_r . wte_i  -  feats_r . wte_pos[r]) / count
 * Item 0 (padding) is not a class. Loss and gradient in one pass over chunks of CT_CE_CHUNK
 * target rows: dfeats (rows with a target) and dwte rows 1..V-1 are ACCUMULATED, the loss
 * (summed in double in row order) is written. count <= 0 gives 0 and adds nothing.
 *   loss: (1)   dfeats: (N,C) +=   dwte: (V,C) +=   scratch: CT_CE_SCRATCH(V,C) floats
 *   feats: (N,C)   wte: (V,C)   pos: (N) */
#define CT_CE_CHUNK         128
#define CT_CE_SCRATCH(V, C) ((size_t)CT_CE_CHUNK * ((size_t)(V) + 2 * (size_t)(C) + 1))
void ct_ce_loss_cpu(float *loss, float *dfeats, float *dwte, float *scratch, const float *feats,
                    const float *wte, const int32_t *pos, int N, int C, int V, float count);

/* The language models' next-token loss through the (tied or separate) LM head wte: the same
 * chunked pass over CT_CE_CHUNK rows (the N x V logits never exist at once), with every token
 * 0..V-1 a class; row r has a target iff tgt[r] >= 0 (transformers' ignore index -100 is any
 * negative). dfeats NULL: no feature gradient (evaluation); dwte NULL: a frozen head gets no
 * gradient.
 *   loss: (1)   dfeats: (N,C) += or NULL   dwte: (V,C) += or NULL
 *   scratch: CT_CE_SCRATCH(V,C) floats   feats: (N,C)   wte: (V,C)   tgt: (N) */
void ct_lm_ce_loss_cpu(float *loss, float *dfeats, float *dwte, float *scratch, const float *feats,
                       const float *wte, const int32_t *tgt, int N, int C, int V, float count);

/* Sampled softmax cross-entropy with M negatives per sequence, shared by all its positions
 * (Klenitskiy & Vasilev's "SASRec+ with N negatives"): for row (b,t) with pos != 0,
 *   loss += (logsumexp(s0, s1..sM) - s0) / count,  s0 = f . wte[pos],  sk = f . wte[neg[b,k-1]]
 * Loss and gradient in one pass; negative ids 0 get no gradient.
 *   loss: (1)   dfeats: (B,L,C) +=   dwte: (V,C) +=
 *   scratch: CT_SAMPLED_CE_SCRATCH(L,M,C) floats   feats: (B,L,C)   pos: (B,L)   neg: (B,M) */
#define CT_SAMPLED_CE_SCRATCH(L, M, C)                               \
    (2 * (size_t)(M) * (size_t)(C) + 2 * (size_t)(L) * (size_t)(C) + \
     (size_t)(L) * ((size_t)(M) + 1) + (size_t)(L))
void ct_sampled_ce_loss_cpu(float *loss, float *dfeats, float *dwte, float *scratch,
                            const float *feats, const float *wte, const int32_t *pos,
                            const int32_t *neg, int B, int L, int C, int M, float count);

/* The number of non-zero ids (targets) among n. */
int64_t ct_count_nonzero_cpu(const int32_t *ids, int64_t n);

/* The l2_emb regulariser of the references on one table w, added to the loss by the caller:
 *   CT_L2_SQUARED       lambda * sum w^2         (SASRec.pytorch HEAD since Sept 2025)
 *   CT_L2_NORM          lambda * sqrt(sum w^2)   (earlier SASRec.pytorch, TiSASRec.pytorch)
 *   CT_L2_HALF_SQUARED  lambda * sum w^2 / 2     (the TF originals' l2 regulariser)
 * It is part of the loss, not decoupled weight decay: its gradient goes into dw before Adam,
 * exactly as autograd would put it there. (In data-parallel runs the step's gradient reduction
 * is a sum - each rank's gradients are already divided by the global target count - and the
 * trainer adds this term once, after the reduction, on every rank to the same summed buffer,
 * so it is counted once: ct__step, docs/models.md §5.1.)
 *   penalty: (1) written   dw: (n) +=   w: (n) */
typedef enum ct_l2_mode {
    CT_L2_SQUARED = 0,
    CT_L2_NORM = 1,
    CT_L2_HALF_SQUARED = 2,
} ct_l2_mode_t;
void ct_l2_penalty_cpu(float *penalty, float *dw, const float *w, int64_t n, float lambda,
                       ct_l2_mode_t mode);

/* ---- optimizer (kernels/cpu/adam.c) ----------------------------------------------------------
 * One Adam step over a flat buffer, as torch.optim.Adam (no weight decay, no amsgrad) computes
 * it, with g = grads * grad_scale (grad_scale folds in clipping; the reduced gradients are
 * already those of the whole global batch, so no averaging over ranks is needed):
 *   m = lerp(m, g, 1 - beta1)      v = beta2 v + (1 - beta2) g^2
 *   params += -(lr / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
 * The scalars are formed in double and rounded to float once, the per-element work is float.
 * step counts from 1. SASRec: beta1 0.9, beta2 0.98, eps 1e-8 (CT_SASREC_ADAM_*).
 *   params, m, v: (n) updated in place   grads: (n) */
void ct_adam_update_cpu(float *params, float *m, float *v, const float *grads, int64_t n, double lr,
                        double beta1, double beta2, double eps, float grad_scale, int64_t step);

/* Sum of squares of x (accumulated in double, in order): the square of the global gradient norm
 * when x is the flat gradient buffer.   out: (1)   x: (n) */
void ct_sumsq_cpu(float *out, const float *x, int64_t n);

/* The factor torch.nn.utils.clip_grad_norm_ scales gradients by: min(1, max_norm / (norm +
 * 1e-6)) with norm = sqrt(sumsq). A host-side helper, the same for every device; pass the
 * result to ct_adam_update_cpu as (part of) grad_scale. max_norm <= 0 means no clipping (1). */
float ct_clip_coef(float sumsq, float max_norm);

/* ---- evaluation scores (kernels/cpu/eval.c) ------------------------------------------------
 * Scores of items for users: score = feats_u . wte[item]. feats row u starts at feats + u*ldf,
 * so ldf = C reads packed (U,C) vectors, and ldf = L*C with feats pointing at column L-1 of a
 * (U,L,C) final-LN output reads each sequence's last position without a copy. */

/* Candidate lists (the sampled protocol: the target and 100 negatives).
 *   scores: (U,K)   feats: (U,ldf)   wte: (V,C)   cand: (U,K) item ids */
void ct_score_candidates_cpu(float *scores, const float *feats, const float *wte,
                             const int32_t *cand, int U, int K, int C, int ldf);

/* Every item, one sgemm (full ranking; column 0 is the padding item, which callers exclude).
 *   scores: (U,V)   feats: (U,ldf)   wte: (V,C) */
void ct_score_all_cpu(float *scores, const float *feats, const float *wte, int U, int V, int C,
                      int ldf);

/* Full ranking without sorting: ranks[u] = the number of items i in 1..V-1, other than the
 * target t = targets[u] and not excluded, with !(scores[u,i] < scores[u,t]) - higher, equal or
 * NaN, so ties count against the target (ctrain_eval_rank's rule in
 * worker/trainer/data/ctrain_batch.h). Item 0 (the padding row) never counts. The excluded items of
 * user u (usually the items it has seen) are excl[excl_off[u] .. excl_off[u+1]), sorted ascending;
 * an entry equal to the one before it, 0, out of 1..V-1, or the target itself is ignored. excl_off
 * == NULL: nothing excluded. Targets must lie in 1..V-1. A rank is an integer count, so every
 * device gives the same ranks. ranks: (U)   scores: (U,V)   targets: (U)   excl_off: (U+1) or NULL
 * excl: (excl_off[U]) */
void ct_rank_all_cpu(int32_t *ranks, const float *scores, const int32_t *targets,
                     const int32_t *excl_off, const int32_t *excl, int U, int V);

/* ---- the temporal encoder's ops (kernels/cpu/encoder.c) -------------------------------------
 * Bidirectional multi-head attention over a packed projection (ct_qkv_forward_cpu's layout,
 * row t = [q | k | v]): every query attends to every key of its sequence, no mask,
 *   att[b,h,i,j] = softmax_j(q_i . k_j / sqrt(HS)),   out_i = sum_j drop(att)[i,j] v_j
 * with dropout on the probabilities (element index ((b*NH + h)*L + i)*L + j of drop's stream)
 * as torch.nn.MultiheadAttention applies it. att keeps the probabilities before dropout. L <= 4096.
 *   out: (B,L,C)   att: (B,NH,L,L)   scratch: (L*C/NH)   qkv: (B,L,3C) */
void ct_enc_attention_forward_cpu(float *out, float *att, float *scratch, const float *qkv, int B,
                                  int L, int C, int NH, ct_dropout_t drop);
#define CT_ENC_ATTENTION_FWD_SCRATCH(L, C, NH) ((size_t)(L) * (size_t)((C) / (NH)))
#define CT_ENC_ATTENTION_BWD_SCRATCH(L, C, NH) \
    (2 * (size_t)(L) + (size_t)(L) * (size_t)((C) / (NH)))
/*   dqkv: (B,L,3C) +=   scratch: (2L + L*C/NH)   dout: (B,L,C)   att, qkv: the forward's */
void ct_enc_attention_backward_cpu(float *dqkv, float *scratch, const float *dout, const float *att,
                                   const float *qkv, int B, int L, int C, int NH,
                                   ct_dropout_t drop);

/* The mask token: out[r] = token where mask[r] != 0, else inp[r].
 *   out: (N,C)   inp: (N,C)   token: (C)   mask: (N) */
void ct_mask_token_forward_cpu(float *out, const float *inp, const float *token,
                               const int32_t *mask, int N, int C);
/*   dinp: (N,C) += (masked rows untouched)   dtoken: (C) += sum of the masked rows' dout */
void ct_mask_token_backward_cpu(float *dinp, float *dtoken, const float *dout, const int32_t *mask,
                                int N, int C);

/* Squared error over the rows with mask[r] != 0, divided by count (the masked elements of the
 * whole optimizer step): *loss (host) = sum / count, dpred = 2 (pred - target) / count on masked
 * rows and 0 elsewhere (overwritten; NULL for none). Sums in double, rows in order.
 *   loss: (1)   dpred: (N,P) or NULL   pred, target: (N,P)   mask: (N) */
void ct_masked_mse_cpu(float *loss, float *dpred, const float *pred, const float *target,
                       const int32_t *mask, int N, int P, float count);

/* The projector's attention (the temporal encoder's stage 2): K learned queries, the same for
 * every sequence, attend to the L keys of each sequence (no mask, no dropout):
 *   att[b,h,t,j] = softmax_j(q_t . k_bj / sqrt(C/NH)),   out_bt = sum_j att[b,h,t,j] v_bj
 * per head on its C/NH columns. L <= 4096.
 *   out: (B,K,C)   att: (B,NH,K,L)   q: (K,C)   k, v: (B,L,C) */
void ct_query_attention_forward_cpu(float *out, float *att, const float *q, const float *k,
                                    const float *v, int B, int K, int L, int C, int NH);
/*   dq: (K,C) +=   dk, dv: (B,L,C) +=   dout: (B,K,C)   att, q, k, v: the forward's */
void ct_query_attention_backward_cpu(float *dq, float *dk, float *dv, const float *dout,
                                     const float *att, const float *q, const float *k,
                                     const float *v, int B, int K, int L, int C, int NH);

#ifdef __cplusplus
}
#endif

#endif /* CT_KERNELS_H */
