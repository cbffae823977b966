/*
 * ct_kernels_cuda.h - the CUDA twins of ct_kernels.h: same name stem with _cuda instead of
 * _cpu, same arguments in the same order, plus a trailing stream. Pointers are device pointers
 * unless a comment says otherwise; shapes, the accumulate (+=) contract of backward functions,
 * the dropout indexing and the padding-query skip contract are those of ct_kernels.h, which
 * stays the specification. Only builds with CUDA compile and link these.
 *
 * ---- calling conventions ----------------------------------------------------------------------
 * - Every launcher returns 0, CT_ERANGE_VALUE for a shape it cannot take (checked before any
 *   CUDA call, so a bad call fails the same way with or without a GPU), CT_ECUDA or CT_ECUBLAS.
 *   The detail goes to the log with file and line. Each launch is checked with
 *   cudaGetLastError, which also reports an earlier asynchronous failure on the device.
 * - Launchers only enqueue work on their stream: they never synchronise, never allocate and
 *   never copy to the host. Scratch comes from the caller, sized by the *_CUDA_SCRATCH macros
 *   below where the GPU needs other scratch than the CPU (a scratch argument sits right after
 *   the outputs, as in ct_kernels.h). Results that are scalars (loss, penalty, norms, counts)
 *   are written to device memory.
 * - The ops that call cuBLAS (linear, packed QKV, all-item scores, the LM attention) take a
 *   ct_cuda_ctx_t in the stream's place: the context holds the stream, a cuBLAS handle bound to
 *   it and to a workspace, and a small scratch for the launchers' own partial sums. One context
 *   per stream and host thread (a cuBLAS handle must not be used by two threads at once);
 *   create it once with ct_cuda_ctx_init and pass ctx->stream to the other launchers.
 * - Determinism: every reduction (row sums, column sums, the loss, norms) runs over a fixed
 *   split into blocks that depends on the shape only, never on the device or on timing, and
 *   combines the pieces in a fixed order, so the same inputs give the same bits on every run.
 *   The one exception is the item-table scatter of ct_embed_backward_cuda and
 *   ct_score_backward_cuda without scratch, which uses atomics (rows that share an item are
 *   added in whatever order the hardware takes); with scratch they sort the rows by item first
 *   and add them in the CPU's order, which gives the CPU's bits.
 * - Where the CPU op's per-element arithmetic is a short formula (dropout, masks, embedding,
 *   layernorm's normalisation, residuals, Adam), the kernels spell it with round-to-nearest
 *   intrinsics (no fused multiply-add), so they round exactly as the CPU does; what differs
 *   from the CPU then is only the order of the additions inside reductions and matrix products.
 * - Sizes and indices inside the kernels are 64-bit where a product of dimensions can pass
 *   2^31 (B*NH*L*L attention probabilities, flat buffers).
 *
 * The header is plain C: the stream and the cuBLAS handle are declared through CUDA's own
 * opaque struct names, so C code can pass them without including CUDA headers.
 */
#ifndef CT_KERNELS_CUDA_H
#define CT_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "ct_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *ct_stream_t; /* identical to cudaStream_t; NULL = default stream */

/* Number of CUDA devices this process can use (CUDA_VISIBLE_DEVICES respected); 0 when there
 * is no GPU or no driver. Never fails: the reason for 0 is logged at debug level. */
int ct_cuda_device_count(void);

/* ---- context for the cuBLAS ops (kernels/cuda/context.cu) -------------------------------------
 * Created once per stream (not per step): it allocates the cuBLAS workspace and the scratch,
 * which the launchers then reuse. All fields are read-only for callers. */
typedef struct ct_cuda_ctx {
    ct_stream_t stream;         /* where every launcher given this context enqueues its work */
    struct cublasContext *blas; /* cublasHandle_t, bound to stream and workspace */
    void *workspace;            /* cuBLAS workspace, workspace_nbytes (device) */
    size_t workspace_nbytes;
    float *scratch; /* CT_CUDA_CTX_SCRATCH floats (device): partial sums of bias gradients */
    unsigned flags; /* the CT_CUDA_CTX_* flags it was made with */
} ct_cuda_ctx_t;

/* cuBLAS's workspace: 32 MiB, what NVIDIA recommends for Hopper GPUs. */
#define CT_CUDA_CTX_WORKSPACE_NBYTES ((size_t)32 << 20)
#define CT_CUDA_CTX_SCRATCH          ((size_t)1 << 16)

/* Flags of ct_cuda_ctx_init. Without CT_CUDA_CTX_TF32, cuBLAS computes float products in full
 * float precision (the CPU twins' tolerances hold); with it, the tensor cores may round the
 * factors to TF32 (10-bit mantissa), which is faster and about 1e-3 relative off. */
#define CT_CUDA_CTX_TF32 1u
/* With CT_CUDA_CTX_BF16 every matrix product of the launchers that take a context (linear, QKV,
 * the mHC projections, the CE logits, all-item scores) runs as cublasGemmEx with
 * CUBLAS_COMPUTE_32F_FAST_16BF: cuBLAS rounds the float factors to bfloat16 and the tensor
 * cores accumulate the products in float; inputs, outputs and everything else stay float (the
 * autocast of --use_amp: bf16 products, fp32 master weights, fp32 accumulation and reductions;
 * bf16's exponent range is float's, so no loss scaling is needed). */
#define CT_CUDA_CTX_BF16 2u

/* Creates the cuBLAS handle on the current device, binds it to stream (NULL = the default
 * stream; the stream stays the caller's) and allocates workspace and scratch. Returns 0,
 * CT_ENOGPU when no device is visible, CT_ECUDA or CT_ECUBLAS; on failure nothing is left
 * allocated and ct_cuda_ctx_close is still safe to call. */
int ct_cuda_ctx_init(ct_cuda_ctx_t *ctx, ct_stream_t stream, unsigned flags);

/* Frees what ct_cuda_ctx_init made (waiting for the stream's work first); safe to call twice
 * and on a zeroed or failed context. */
void ct_cuda_ctx_close(ct_cuda_ctx_t *ctx);

/* ---- random numbers (kernels/cuda/rng.cu) ------------------------------------------------------
 */

/* out: (n) raw 32-bit draws, as ct_rng_u32_cpu. */
int ct_rng_u32_cuda(uint32_t *out, int64_t n, uint64_t seed, uint64_t stream, uint64_t offset,
                    ct_stream_t s);

/* out: (n) uniform floats in [0, 1), as ct_rng_uniform_cpu. */
int ct_rng_uniform_cuda(float *out, int64_t n, uint64_t seed, uint64_t stream, uint64_t offset,
                        ct_stream_t s);

/* ---- dropout and timeline mask (kernels/cuda/dropout.cu) --------------------------------------
 * Bit-identical to the CPU: the same Philox draw per element, the same keep rule and the same
 * single float multiply. out may equal inp. */
int ct_dropout_cuda(float *out, const float *inp, int64_t n, ct_dropout_t drop, ct_stream_t stream);

int ct_timeline_mask_cuda(float *out, const float *inp, const int32_t *seq, int N, int C,
                          ct_stream_t stream);

/* ---- embedding (kernels/cuda/embed.cu) ---------------------------------------------------------
 */

int ct_embed_forward_cuda(float *out, const float *wte, const float *wpe, const int32_t *seq, int B,
                          int L, int C, float scale, ct_pos_mode_t pos_mode, ct_stream_t stream);

/* dwpe is owned per row (one thread per positional row and channel, sequences in order): the
 * CPU's bits. dwte: with scratch == NULL, atomics (fast, the order of rows sharing an item
 * varies between runs); with scratch, the rows are sorted by item (stable, so (b, t) order is
 * kept) and each item's rows added in that order: the CPU's bits.
 *   scratch: NULL, or ct_embed_backward_cuda_scratch(B, L) bytes, 16-byte aligned */
int ct_embed_backward_cuda(float *dwte, float *dwpe, void *scratch, const float *dout,
                           const int32_t *seq, int B, int L, int C, float scale,
                           ct_pos_mode_t pos_mode, ct_stream_t stream);

/* Bytes of scratch for the sorted (deterministic) item scatter of B*L rows, in *nbytes. The
 * sort's own temporary size is asked of the CUDA library, hence a function rather than a
 * macro; it needs a device. Returns 0, CT_ERANGE_VALUE or CT_ECUDA. */
int ct_embed_backward_cuda_scratch(size_t *nbytes, int B, int L);

/* ---- layernorm (kernels/cuda/layernorm.cu) -----------------------------------------------------
 * One warp per row; row sums in double (as the CPU), so mean and rstd nearly always round to
 * the CPU's floats, and the normalisation is the CPU's float formula. C <= 1024. */
#define CT_LAYERNORM_CUDA_MAX_C 1024
int ct_layernorm_forward_cuda(float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int N, int C, float eps,
                              ct_stream_t stream);

/* dweight and dbias are sums over rows: each block of CT_LAYERNORM_BWD_CUDA_ROWS rows writes
 * partial sums to scratch, a second kernel adds them in a fixed order (one warp per column).
 * ct_layernorm_backward_4warp_cuda is the previous launch (4 warps a block, one thread per
 * column for the partials), kept as the GPU benchmark's baseline; dinp is the same bits, dweight
 * and dbias are summed in another order.
 *   scratch: CT_LAYERNORM_BWD_CUDA_SCRATCH(N, C) floats */
#define CT_LAYERNORM_BWD_CUDA_ROWS 64
#define CT_LAYERNORM_BWD_CUDA_SCRATCH(N, C) \
    (2 * (size_t)(C) *                      \
     (((size_t)(N) + CT_LAYERNORM_BWD_CUDA_ROWS - 1) / CT_LAYERNORM_BWD_CUDA_ROWS))
int ct_layernorm_backward_cuda(float *dinp, float *dweight, float *dbias, float *scratch,
                               const float *dout, const float *inp, const float *weight,
                               const float *mean, const float *rstd, int N, int C,
                               ct_stream_t stream);
int ct_layernorm_backward_4warp_cuda(float *dinp, float *dweight, float *dbias, float *scratch,
                                     const float *dout, const float *inp, const float *weight,
                                     const float *mean, const float *rstd, int N, int C,
                                     ct_stream_t stream);

/* ---- linear and packed QKV (kernels/cuda/linear.cu): cuBLAS sgemm ----------------------------
 * Shapes as the CPU's; IC >= 1. The bias of the forward is broadcast into out and the product
 * added with beta = 1 (as the CPU); the bias gradient is a deterministic column sum (partials
 * in ctx->scratch). */
int ct_linear_forward_cuda(float *out, const float *inp, const float *weight, const float *bias,
                           int N, int IC, int OC, const ct_cuda_ctx_t *ctx);

int ct_linear_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int IC, int OC,
                            const ct_cuda_ctx_t *ctx);

/* GPT-2's Conv1D (weight (IC,OC)), as ct_conv1d_*_cpu; dinp, dweight, dbias may be NULL. */
int ct_conv1d_forward_cuda(float *out, const float *inp, const float *weight, const float *bias,
                           int N, int IC, int OC, const ct_cuda_ctx_t *ctx);
int ct_conv1d_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int IC, int OC,
                            const ct_cuda_ctx_t *ctx);

int ct_qkv_forward_cuda(float *qkv, const float *xq, const float *xkv, const float *weight,
                        const float *bias, int N, int C, const ct_cuda_ctx_t *ctx);

int ct_qkv_backward_cuda(float *dxq, float *dxkv, float *dweight, float *dbias, const float *dqkv,
                         const float *xq, const float *xkv, const float *weight, int N, int C,
                         const ct_cuda_ctx_t *ctx);

/* ---- causal multi-head attention (kernels/cuda/attention.cu) ---------------------------------
 * Fused kernels: one warp per query row computes scores, softmax, the dropout factors (drawn in
 * the kernel from the same Philox indices as the CPU) and the weighted sum of values, with the
 * keys and values of the row's tile staged in shared memory. The backward is two kernels that
 * compute dP and dS once: one per query tile (dQ, and each row's dS_ij and dropout pattern,
 * stored in scratch: dS as floats, the kept/dropped draws as one bit each), one per key tile
 * (dK = scale dS^T Q and dV = drop(P)^T dO from the stored dS, att and the bits, summed over
 * query rows in row order). No atomics; padding queries (qmask) are skipped as on the CPU, and a
 * skipped tile's or chunk's work is not done at all.
 * ct_attention_backward_recompute_cuda is the previous backward, kept as the baseline the GPU
 * benchmark times against and the tests check the same way: its dK/dV kernel recomputes dP_ij
 * and the dropout factors instead of reading them (it uses only the first B*NH*L floats of the
 * scratch).
 * Range of the fused kernels: L <= CT_ATTENTION_CUDA_MAX_L, head width C / NH <=
 * CT_ATTENTION_CUDA_MAX_HS; other shapes return CT_ERANGE_VALUE.
 *   forward scratch: unused (the GPU never materialises dropped probabilities); may be NULL
 *   backward scratch: CT_ATTENTION_BWD_CUDA_SCRATCH(B, L, NH) floats: the row constants
 *   (B*NH*L), dS (B*NH*L*L), the dropout bits (B*NH*L*ceil(L/32) words) */
#define CT_ATTENTION_CUDA_MAX_L                 256
#define CT_ATTENTION_CUDA_MAX_HS                64
#define CT_ATTENTION_FWD_CUDA_SCRATCH(B, L, NH) ((size_t)0)
#define CT_ATTENTION_BWD_CUDA_SCRATCH(B, L, NH) \
    ((size_t)(B) * (size_t)(NH) * (size_t)(L) * ((size_t)1 + (size_t)(L) + ((size_t)(L) + 31) / 32))
int ct_attention_forward_cuda(float *out, float *att, float *scratch, const float *qkv,
                              const int32_t *qmask, int B, int L, int C, int NH, ct_dropout_t drop,
                              ct_stream_t stream);

int ct_attention_backward_cuda(float *dqkv, float *scratch, const float *dout, const float *att,
                               const float *qkv, const int32_t *qmask, int B, int L, int C, int NH,
                               ct_dropout_t drop, ct_stream_t stream);
int ct_attention_backward_recompute_cuda(float *dqkv, float *scratch, const float *dout,
                                         const float *att, const float *qkv, const int32_t *qmask,
                                         int B, int L, int C, int NH, ct_dropout_t drop,
                                         ct_stream_t stream);

/* ---- element-wise ops (kernels/cuda/elementwise.cu) ------------------------------------------ */

int ct_relu_forward_cuda(float *out, const float *inp, int64_t n, ct_stream_t stream);
int ct_relu_backward_cuda(float *dinp, const float *dout, const float *out, int64_t n,
                          ct_stream_t stream);
int ct_residual_forward_cuda(float *out, const float *inp1, const float *inp2, int64_t n,
                             ct_stream_t stream);
int ct_residual_backward_cuda(float *dinp1, float *dinp2, const float *dout, int64_t n,
                              ct_stream_t stream);
int ct_scale_cuda(float *x, float s, int64_t n, ct_stream_t stream);

/* ---- the language models' ops (kernels/cuda/lm.cu) ---------------------------------------------
 * RMSNorm: one warp per row, row sums in double as the CPU (any C); the weight gradient is a
 * column sum: one partial per warp of each block of CT_RMSNORM_BWD_CUDA_ROWS rows in scratch,
 * added in order by a second kernel. RoPE takes the CPU's table (ct_rope_table_cpu) in device
 * memory and gives the CPU's bits; GELU and SwiGLU use the device's erff, expf. */
int ct_rmsnorm_forward_cuda(float *out, float *rstd, const float *inp, const float *weight, int N,
                            int C, float eps, ct_stream_t stream);
/*   scratch: CT_RMSNORM_BWD_CUDA_SCRATCH(N, C) floats */
#define CT_RMSNORM_CUDA_WARPS    4 /* warps per block */
#define CT_RMSNORM_BWD_CUDA_ROWS 64
#define CT_RMSNORM_BWD_CUDA_SCRATCH(N, C)  \
    (CT_RMSNORM_CUDA_WARPS * (size_t)(C) * \
     (((size_t)(N) + CT_RMSNORM_BWD_CUDA_ROWS - 1) / CT_RMSNORM_BWD_CUDA_ROWS))
int ct_rmsnorm_backward_cuda(float *dinp, float *dweight, float *scratch, const float *dout,
                             const float *inp, const float *weight, const float *rstd, int N, int C,
                             ct_stream_t stream);
int ct_gelu_forward_cuda(float *out, const float *inp, int64_t n, ct_gelu_kind_t kind,
                         ct_stream_t stream);
int ct_gelu_backward_cuda(float *dinp, const float *dout, const float *inp, int64_t n,
                          ct_gelu_kind_t kind, ct_stream_t stream);
int ct_swiglu_forward_cuda(float *out, const float *gate, const float *up, int64_t n,
                           ct_stream_t stream);
int ct_swiglu_backward_cuda(float *dgate, float *dup, const float *dout, const float *gate,
                            const float *up, int64_t n, ct_stream_t stream);
int ct_rope_forward_cuda(float *out, const float *inp, const float *cos_t, const float *sin_t,
                         const int32_t *pos, int N, int NH, int HD, ct_stream_t stream);
int ct_rope_backward_cuda(float *dinp, const float *dout, const float *cos_t, const float *sin_t,
                          const int32_t *pos, int N, int NH, int HD, ct_stream_t stream);
/* Grouped-query causal attention: the products on cuBLAS (one strided batch over the sequences
 * per query head, float products also under CT_CUDA_CTX_BF16), the softmax and its backward one
 * warp per row; the group's heads add into dk and dv in a fixed order (no atomics). att holds
 * the (B, NH, L, L) probabilities; the backward keeps dP, then dS, in scratch.
 *   scratch: CT_GQA_BWD_CUDA_SCRATCH(B, NH, L) floats */
#define CT_GQA_BWD_CUDA_SCRATCH(B, NH, L) ((size_t)(B) * (size_t)(NH) * (size_t)(L) * (size_t)(L))
int ct_gqa_attention_forward_cuda(float *out, float *att, const float *qkv, int B, int L, int NH,
                                  int KVH, int HD, float scale, const ct_cuda_ctx_t *ctx);
int ct_gqa_attention_backward_cuda(float *dqkv, float *scratch, const float *dout, const float *att,
                                   const float *qkv, int B, int L, int NH, int KVH, int HD,
                                   float scale, const ct_cuda_ctx_t *ctx);
/* Baseline of the two above, kept for bench/gpu/kernels_bench_gpu: one warp per query row
 * (forward; backward d scores and dq), one per key row (dk, dv), same arguments and scratch. */
int ct_gqa_attention_forward_rowwise_cuda(float *out, float *att, const float *qkv, int B, int L,
                                          int NH, int KVH, int HD, float scale,
                                          ct_stream_t stream);
int ct_gqa_attention_backward_rowwise_cuda(float *dqkv, float *scratch, const float *dout,
                                           const float *att, const float *qkv, int B, int L,
                                           int NH, int KVH, int HD, float scale,
                                           ct_stream_t stream);
/* The token embedding. The backward scatters rows into the tables as ct_embed_backward_cuda
 * does: with scratch (ct_embed_backward_cuda_scratch(&bytes, 1, N)) sorted, the CPU's order and
 * bits; with NULL scratch by float atomics. */
int ct_lm_embed_forward_cuda(float *out, const float *wte, const float *wpe, const int32_t *ids,
                             const int32_t *pos, int N, int C, ct_stream_t stream);
int ct_lm_embed_backward_cuda(float *dwte, float *dwpe, void *scratch, const float *dout,
                              const int32_t *ids, const int32_t *pos, int N, int C, int32_t skip_id,
                              ct_stream_t stream);

/* ---- scores and loss (kernels/cuda/loss.cu) ---------------------------------------------------
 */

int ct_score_forward_cuda(float *logits, const float *feats, const float *wte, const int32_t *ids,
                          int N, int C, ct_stream_t stream);

/* dfeats rows are owned (the CPU's bits); dwte as in ct_embed_backward_cuda: atomics without
 * scratch, the CPU's order and bits with it.
 *   scratch: NULL, or ct_score_backward_cuda_scratch(N) bytes, 16-byte aligned */
int ct_score_backward_cuda(float *dfeats, float *dwte, void *scratch, const float *dlogits,
                           const float *feats, const float *wte, const int32_t *ids, int N, int C,
                           ct_stream_t stream);
int ct_score_backward_cuda_scratch(size_t *nbytes, int N);

/* The reductions below (loss, penalty, sum of squares) add per-block partial sums in double,
 * CT_REDUCE_CUDA_PARTS blocks at most, then one block adds the partials in order. */
#define CT_REDUCE_CUDA_PARTS 256

/* loss: (1) written on the device; count is the host's float, as on the CPU.
 *   scratch: CT_BCE_LOSS_CUDA_SCRATCH doubles */
#define CT_BCE_LOSS_CUDA_SCRATCH ((size_t)CT_REDUCE_CUDA_PARTS)
int ct_bce_loss_cuda(float *loss, float *dpos, float *dneg, double *scratch,
                     const float *pos_logits, const float *neg_logits, const int32_t *pos, int N,
                     float count, ct_stream_t stream);

/* The temporal encoder's ops (kernels/cpu/encoder.c's twins, encoder.cu).
 * Bidirectional attention with dropout on the probabilities (ct_enc_attention_*_cpu's
 * arguments but the scratch): one warp per query row; the scores, the weighted sums and every
 * gradient accumulate in the CPU's order with its rounding, the softmax's max and sum and the
 * backward's row dot are warp sums (another order: within float rounding), expf is the device's.
 * The dropout factors are the CPU's draws (element ((b*NH + h)*L + i)*L + j of drop's stream).
 * L <= CT_ENC_ATTENTION_CUDA_MAX_L.
 *   backward scratch: CT_ENC_ATTENTION_BWD_CUDA_SCRATCH(B, L, NH) floats */
#define CT_ENC_ATTENTION_CUDA_MAX_L 2048
#define CT_ENC_ATTENTION_BWD_CUDA_SCRATCH(B, L, NH) \
    (2 * (size_t)(B) * (size_t)(NH) * (size_t)(L) * (size_t)(L))
int ct_enc_attention_forward_cuda(float *out, float *att, const float *qkv, int B, int L, int C,
                                  int NH, ct_dropout_t drop, ct_stream_t stream);
int ct_enc_attention_backward_cuda(float *dqkv, float *scratch, const float *dout, const float *att,
                                   const float *qkv, int B, int L, int C, int NH, ct_dropout_t drop,
                                   ct_stream_t stream);
/* The mask token: the CPU's bits (dtoken adds the masked rows in row order per channel). */
int ct_mask_token_forward_cuda(float *out, const float *inp, const float *token,
                               const int32_t *mask, int N, int C, ct_stream_t stream);
int ct_mask_token_backward_cuda(float *dinp, float *dtoken, const float *dout, const int32_t *mask,
                                int N, int C, ct_stream_t stream);
/* The masked squared error: dpred the CPU's bits; loss (1) on the device, each row's sum in
 * double in the CPU's order, the rows' sums added in a fixed order (another than the CPU's).
 *   scratch: N doubles */
int ct_masked_mse_cuda(float *loss, float *dpred, double *scratch, const float *pred,
                       const float *target, const int32_t *mask, int N, int P, float count,
                       ct_stream_t stream);
/* The projector's attention (ct_query_attention_*_cpu's arguments): one warp per (sequence,
 * head, query) for the forward and for the scores' gradients, which go to scratch; dk and dv
 * one warp per key row, dq one warp per (head, query) over the sequences: every gradient in the
 * CPU's order, only the softmax's max and sum and the row dot are warp sums. L <= 4096.
 *   backward scratch: CT_QUERY_ATTENTION_BWD_CUDA_SCRATCH(B, K, L, NH) floats */
#define CT_QUERY_ATTENTION_BWD_CUDA_SCRATCH(B, K, L, NH) \
    ((size_t)(B) * (size_t)(NH) * (size_t)(K) * (size_t)(L))
int ct_query_attention_forward_cuda(float *out, float *att, const float *q, const float *k,
                                    const float *v, int B, int K, int L, int C, int NH,
                                    ct_stream_t stream);
int ct_query_attention_backward_cuda(float *dq, float *dk, float *dv, float *scratch,
                                     const float *dout, const float *att, const float *q,
                                     const float *k, const float *v, int B, int K, int L, int C,
                                     int NH, ct_stream_t stream);
/* The GPT-2 recommender's BPR (ct_bpr_loss_cpu's arguments): one warp per interaction, the
 * rows' softplus summed in double in a fixed order. loss: (1) written on the device.
 *   scratch: B doubles */
int ct_bpr_loss_cuda(float *loss, float *du, float *dvpn, double *scratch, const float *user,
                     const float *item, const float *proj, const int32_t *idx, int B, int D,
                     float count, float lambda, ct_stream_t stream);
/* ct_mean_pool_*_cpu's twins: the CPU's bits. */
int ct_mean_pool_forward_cuda(float *out, const float *h, const int32_t *len, int N, int L, int C,
                              ct_stream_t stream);
int ct_mean_pool_backward_cuda(float *dh, const float *dout, const int32_t *len, int N, int L,
                               int C, ct_stream_t stream);

/* count: (1) int64 on the device (the CPU version returns it). */
int ct_count_nonzero_cuda(int64_t *count, const int32_t *ids, int64_t n, ct_stream_t stream);

/*   penalty: (1) written on the device   scratch: CT_L2_PENALTY_CUDA_SCRATCH doubles */
#define CT_L2_PENALTY_CUDA_SCRATCH ((size_t)CT_REDUCE_CUDA_PARTS)
int ct_l2_penalty_cuda(float *penalty, float *dw, double *scratch, const float *w, int64_t n,
                       float lambda, ct_l2_mode_t mode, ct_stream_t stream);

/* ---- optimizer (kernels/cuda/adam.cu) ----------------------------------------------------------
 * The scalars are formed on the host in double exactly as the CPU forms them; the per-element
 * float work rounds as the CPU's, so parameters and moments come out bit-identical. */
int ct_adam_update_cuda(float *params, float *m, float *v, const float *grads, int64_t n, double lr,
                        double beta1, double beta2, double eps, float grad_scale, int64_t step,
                        ct_stream_t stream);

/*   out: (1) written on the device   scratch: CT_SUMSQ_CUDA_SCRATCH doubles */
#define CT_SUMSQ_CUDA_SCRATCH ((size_t)CT_REDUCE_CUDA_PARTS)
int ct_sumsq_cuda(float *out, double *scratch, const float *x, int64_t n, ct_stream_t stream);

/* ---- evaluation (kernels/cuda/eval.cu) --------------------------------------------------------
 */

int ct_score_candidates_cuda(float *scores, const float *feats, const float *wte,
                             const int32_t *cand, int U, int K, int C, int ldf, ct_stream_t stream);

/* One sgemm, as the CPU. */
int ct_score_all_cuda(float *scores, const float *feats, const float *wte, int U, int V, int C,
                      int ldf, const ct_cuda_ctx_t *ctx);

/* As ct_rank_all_cpu: the rank of each user's target among all items, counted on the device,
 * so full ranking needs U ints back instead of U*V scores. Exact (integer counts). */
int ct_rank_all_cuda(int32_t *ranks, const float *scores, const int32_t *targets,
                     const int32_t *excl_off, const int32_t *excl, int U, int V,
                     ct_stream_t stream);

/* ---- TiSASRec (kernels/cuda/tisas.cu) -----------------------------------------------------------
 * The absolute-position row broadcast (backward: one thread per table element, sequences in
 * order: the CPU's bits), the interval masks (the CPU's bits), and the time-aware attention:
 * one warp per query row in the forward and in the dQ half of the backward, one warp per key
 * row for dK and dV. The interval-table gradients d R^K, d R^V are added with float atomics
 * (their order varies between runs); everything else is deterministic. Range: L <=
 * CT_TISAS_CUDA_MAX_L, head width <= CT_TISAS_CUDA_MAX_HS.
 *   forward scratch: unused (may be NULL)
 *   backward scratch: CT_TISAS_ATTENTION_BWD_CUDA_SCRATCH(B, L, NH) floats (dS and the dropped
 *   probabilities, the size of att each) */
#define CT_TISAS_CUDA_MAX_L  1024
#define CT_TISAS_CUDA_MAX_HS 256
#define CT_TISAS_ATTENTION_BWD_CUDA_SCRATCH(B, L, NH) \
    (2 * (size_t)(B) * (size_t)(NH) * (size_t)(L) * (size_t)(L))

int ct_rows_broadcast_forward_cuda(float *out, const float *table, int B, int L, int C,
                                   ct_stream_t stream);
int ct_rows_broadcast_backward_cuda(float *dtable, const float *dout, int B, int L, int C,
                                    ct_stream_t stream);
int ct_tisas_mask_cuda(uint32_t *bits, const int32_t *qmask, int B, int L, int C, ct_dropout_t drop,
                       ct_stream_t stream);
/* The previous mask launch (one thread per word of every row, right of the diagonal included),
 * the same bits; kept as the GPU benchmark's baseline. */
int ct_tisas_mask_perword_cuda(uint32_t *bits, const int32_t *qmask, int B, int L, int C,
                               ct_dropout_t drop, ct_stream_t stream);
int ct_tisas_attention_forward_cuda(float *out, float *att, float *scratch, const float *q,
                                    const float *k, const float *v, const float *rk,
                                    const float *rv, const int64_t *tseq, const int32_t *qmask,
                                    int B, int L, int C, int NH, int T, ct_dropout_t drop_att,
                                    const uint32_t *mask_rk, const uint32_t *mask_rv, float p_rkv,
                                    ct_stream_t stream);
int ct_tisas_attention_backward_cuda(float *dq, float *dk, float *dv, float *drk, float *drv,
                                     float *scratch, const float *dout, const float *att,
                                     const float *q, const float *k, const float *v,
                                     const float *rk, const float *rv, const int64_t *tseq,
                                     const int32_t *qmask, int B, int L, int C, int NH, int T,
                                     ct_dropout_t drop_att, const uint32_t *mask_rk,
                                     const uint32_t *mask_rv, float p_rkv, ct_stream_t stream);

/* ---- mHC residual streams (kernels/cuda/mhc.cu) ---------------------------------------------
 * Sinkhorn, one thread per matrix, the CPU's loops (exp by the CPU's polynomial); its backward
 * recomputes the iterates per matrix into scratch, spread so that element e of matrix r sits at
 * e * M + r (a warp's matrices touch consecutive words). The mappings: proj = X phi by cuBLAS,
 * then one thread per token for the RMS factor (a double sum in the CPU's order), the gates and
 * Sinkhorn; the backward keeps d(pre-activation) per token in scratch (the Sinkhorn iterates
 * spread over tokens as above), applies the RMS factor's path to dX one thread per element, sums
 * the bias and gate gradients over tokens in a fixed order (double; 32 slices of rows per
 * column, then the slices in order), and adds the (X phi) path with two sgemms.
 * ct_mhc_coeffs_backward_pertoken_cuda is the previous launch (each token's iterates contiguous,
 * its thread adding the RMS path over its own row of dX, one block per column for the sums),
 * kept as the baseline the GPU benchmark times against: dX and dphi are the same bits, dbias and
 * dalpha the same double sums in another order.
 * The stream-mixing ops give one thread per output element, sums in the CPU's order.
 *   sinkhorn backward scratch: CT_SINKHORN_BWD_CUDA_SCRATCH(M, n, iters) floats
 *   mappings backward scratch: CT_MHC_COEFFS_BWD_CUDA_SCRATCH(N, n, iters) floats */
#define CT_SINKHORN_BWD_CUDA_SCRATCH(M, n, iters) ((size_t)(M)*CT_SINKHORN_BWD_SCRATCH(n, iters))
#define CT_MHC_COEFFS_BWD_CUDA_SCRATCH(N, n, iters)                                             \
    ((size_t)(N) * (2 * (size_t)CT_MHC_COEFFS(n) + CT_SINKHORN_BWD_SCRATCH(n, iters) + 1) + 2 + \
     2 * 32 * ((size_t)CT_MHC_COEFFS(n) + 3))

int ct_sinkhorn_forward_cuda(float *out, const float *logits, int M, int n, int iters,
                             ct_stream_t stream);
int ct_sinkhorn_backward_cuda(float *dlogits, float *scratch, const float *dout,
                              const float *logits, int M, int n, int iters, ct_stream_t stream);
int ct_mhc_coeffs_forward_cuda(float *hpre, float *hpost, float *hres, float *proj, float *rstd,
                               const float *X, const float *phi, const float *alpha,
                               const float *bias, int N, int n, int C, int iters, float eps,
                               const ct_cuda_ctx_t *ctx);
int ct_mhc_coeffs_backward_cuda(float *dX, float *dphi, float *dalpha, float *dbias, float *scratch,
                                const float *dhpre, const float *dhpost, const float *dhres,
                                const float *X, const float *phi, const float *alpha,
                                const float *bias, const float *proj, const float *rstd, int N,
                                int n, int C, int iters, const ct_cuda_ctx_t *ctx);
int ct_mhc_coeffs_backward_pertoken_cuda(float *dX, float *dphi, float *dalpha, float *dbias,
                                         float *scratch, const float *dhpre, const float *dhpost,
                                         const float *dhres, const float *X, const float *phi,
                                         const float *alpha, const float *bias, const float *proj,
                                         const float *rstd, int N, int n, int C, int iters,
                                         const ct_cuda_ctx_t *ctx);
int ct_mhc_pre_forward_cuda(float *u, const float *X, const float *hpre, int N, int n, int C,
                            ct_stream_t stream);
int ct_mhc_pre_backward_cuda(float *dX, float *dhpre, const float *du, const float *X,
                             const float *hpre, int N, int n, int C, ct_stream_t stream);
int ct_mhc_post_forward_cuda(float *Y, const float *X, const float *f, const float *hres,
                             const float *hpost, int N, int n, int C, ct_stream_t stream);
int ct_mhc_post_backward_cuda(float *dX, float *df, float *dhres, float *dhpost, const float *dY,
                              const float *X, const float *f, const float *hres, const float *hpost,
                              int N, int n, int C, ct_stream_t stream);
int ct_mhc_expand_forward_cuda(float *X, const float *x, int N, int n, int C, ct_stream_t stream);
int ct_mhc_expand_backward_cuda(float *dx, const float *dX, int N, int n, int C,
                                ct_stream_t stream);
int ct_mhc_collapse_forward_cuda(float *x, const float *X, int N, int n, int C, ct_stream_t stream);
int ct_mhc_collapse_backward_cuda(float *dX, const float *dx, int N, int n, int C,
                                  ct_stream_t stream);

/* ---- softmax cross-entropy losses (kernels/cuda/xent.cu) ------------------------------------
 * Full CE: rows in chunks of CT_CE_CUDA_ROWS(V): the chunk's logits against items 1..V-1 by one
 * sgemm, one block per row for the softmax and its gradient (rows without a target get a zero
 * gradient row; a row of up to 4096 classes is read once and written once, held in registers;
 * ct_ce_loss_multipass_cuda, kept as the GPU benchmark's baseline, reads every row three times
 * and writes it twice, with the same results bit for bit), then d feats += d logits E and d E += d
 * logits^T feats by two sgemms. Unlike the CPU, rows without a target are not compacted out (they
 * cost their share of the sgemms). Sampled CE: one warp per position for the M + 1 logits, the
 * softmax and d feats; one block per sequence for the negatives' table gradients, which (like the
 * positives') are added to dwte with float atomics, since sequences share items. The loss is the
 * rows' double terms summed in a fixed order, times 1 / count. CE scratch: CT_CE_CUDA_SCRATCH(N, V)
 * floats   sampled-CE scratch: CT_SAMPLED_CE_CUDA_SCRATCH(N, M) floats */
#define CT_CE_CUDA_ROWS(V)                                     \
    ((size_t)(16u << 20) / (size_t)(V) < 32     ? (size_t)32   \
     : (size_t)(16u << 20) / (size_t)(V) > 4096 ? (size_t)4096 \
                                                : (size_t)(16u << 20) / (size_t)(V))
#define CT_CE_CUDA_SCRATCH(N, V) \
    (CT_CE_CUDA_ROWS(V) * (size_t)(V) + 2 * (size_t)(N) + 2 * (size_t)CT_REDUCE_CUDA_PARTS)
#define CT_SAMPLED_CE_CUDA_SCRATCH(N, M) \
    ((size_t)(N) * ((size_t)(M) + 1) + 2 * (size_t)(N) + 2 * (size_t)CT_REDUCE_CUDA_PARTS)

int ct_ce_loss_cuda(float *loss, float *dfeats, float *dwte, float *scratch, const float *feats,
                    const float *wte, const int32_t *pos, int N, int C, int V, float count,
                    const ct_cuda_ctx_t *ctx);
int ct_ce_loss_multipass_cuda(float *loss, float *dfeats, float *dwte, float *scratch,
                              const float *feats, const float *wte, const int32_t *pos, int N,
                              int C, int V, float count, const ct_cuda_ctx_t *ctx);
/* The language models' loss (ct_lm_ce_loss_cpu): the same kernels over classes 0..V-1, rows
 * with tgt < 0 without a target, NULL gradients skipped. Scratch: CT_CE_CUDA_SCRATCH(N, V). */
int ct_lm_ce_loss_cuda(float *loss, float *dfeats, float *dwte, float *scratch, const float *feats,
                       const float *wte, const int32_t *tgt, int N, int C, int V, float count,
                       const ct_cuda_ctx_t *ctx);
int ct_sampled_ce_loss_cuda(float *loss, float *dfeats, float *dwte, float *scratch,
                            const float *feats, const float *wte, const int32_t *pos,
                            const int32_t *neg, int B, int L, int C, int M, float count,
                            ct_stream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* CT_KERNELS_CUDA_H */
