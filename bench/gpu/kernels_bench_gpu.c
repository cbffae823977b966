/*
 * kernels_bench_gpu.c - times the CUDA ops of one SASRec training step at ml-1m sizes (B = 128,
 * L = 200, d = 50, h = 1, dropout 0.2, post_ln: HEAD's default layout), op by op and as one
 * captured CUDA graph, against the H100 roofline. The GPU twin of bench/kernels_bench.c (same
 * op names and order, so rows line up). Not a test: it asserts nothing but the launchers'
 * return codes, and CI does not run it at these sizes.
 *
 *   build/bench/kernels_bench_gpu [reps] [--size B,L] [--tf32]
 *       reps      timed repetitions per row (default 50); each repetition times 20 back-to-back
 *                 calls between two CUDA events, and a row is the median per call
 *       --size    other batch and sequence sizes (the CPU emulator's smoke run uses tiny ones)
 *       --tf32    let cuBLAS use TF32 tensor cores for the products
 *
 * Output: '#' header lines (device, measured ceilings, sizes), then one fixed-width row per op:
 *   op  dir  ms  GB/s  GFLOP/s  floor_ms  %floor
 * GB/s counts the fewest bytes the op must move (each input read once, each output written
 * once, a += output read and written); GFLOP/s counts useful floating-point operations (2 per
 * multiply-add; attention causal: keys j <= i only). floor_ms = max(bytes / bandwidth, flops /
 * fp32 rate) with the bandwidth measured here (device-to-device copy) and the fp32 rate of the
 * datasheet (H100 SXM: 67 TFLOP/s without tensor cores), and %floor = floor / measured: how
 * close the op runs to its roofline. The footer adds the ops up per step (2 blocks + the rest),
 * then replays the same step captured as a CUDA graph, which removes the launch gaps, and
 * compares it with the estimate of docs/models.md §6.4, 0.2-0.3 ms per step.
 *
 * The variants section also times the ops of the other models at the same sizes: TiSASRec's
 * attention (with its interval masks), one mHC layer (n = 4) and the softmax losses, and the
 * language models' causal attention at GPT-2-small's heads (B = 8, L = 512); and, next to the
 * kernels that replaced them, the previous kernels that ct_kernels_cuda.h keeps as baselines
 * (rows marked recompute, recomp, pertok, multipass, 4-warp, per-word, rows), so that one run
 * times old and new side by side (bench/gpu/kernels_ab.sh prints the pairs).
 *
 * Deliberately not here: PyTorch (bench/gpu/torch_ops.py times the same ops; bench/gpu/run.sh
 * prints the ratios) and ctrain's own step (bench/gpu/step_bench.py).
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_error.h"
#include "ct_kernels.h"
#include "ct_kernels_cuda.h"

#define PDROP   0.2f
#define NBLOCKS 2
#define INNER   20 /* calls per timed repetition */
#define MAXREPS 1000
#define NPARAMS 212000
#define V       3417 /* ml-1m items + 1 */
#define C       50
#define NH      1

static const double peak_fp32 = 67e12; /* H100 SXM, FP32 without tensor cores */

typedef struct row {
    const char *op, *dir;
    double ms, gflop, gbytes;
} row_t;

static row_t rows[96];
static int nrows, reps = 50;
static cudaStream_t s;
static cudaEvent_t ev0, ev1;
static double bw_measured; /* bytes/s */

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "kernels_bench_gpu: %s: %s\n", what, detail);
    exit(1);
}

#define CK(call)                                \
    do {                                        \
        cudaError_t e_ = (call);                \
        if (e_ != cudaSuccess)                  \
            die(#call, cudaGetErrorString(e_)); \
    } while (0)
#define OK(call)                          \
    do {                                  \
        int rc_ = (call);                 \
        if (rc_ != 0)                     \
            die(#call, ct_strerror(rc_)); \
    } while (0)

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median over reps of (INNER calls between two events) / INNER, after 3 warm-up calls. */
#define TIME(op_, dir_, gflop_, gbytes_, ...)                              \
    do {                                                                   \
        static double t_[MAXREPS];                                         \
        for (int w_ = 0; w_ < 3; w_++) {                                   \
            __VA_ARGS__;                                                   \
        }                                                                  \
        for (int r_ = 0; r_ < reps; r_++) {                                \
            CK(cudaEventRecord(ev0, s));                                   \
            for (int k_ = 0; k_ < INNER; k_++) {                           \
                __VA_ARGS__;                                               \
            }                                                              \
            CK(cudaEventRecord(ev1, s));                                   \
            CK(cudaEventSynchronize(ev1));                                 \
            float ms_ = 0;                                                 \
            CK(cudaEventElapsedTime(&ms_, ev0, ev1));                      \
            t_[r_] = ms_ / INNER;                                          \
        }                                                                  \
        qsort(t_, (size_t)reps, sizeof t_[0], cmp_double);                 \
        rows[nrows++] = (row_t){op_, dir_, t_[reps / 2], gflop_, gbytes_}; \
    } while (0)

static float *dev_fill(size_t n, float lo, float hi, uint64_t stream)
{
    float *h = malloc(n * sizeof *h), *d = NULL;
    if (!h)
        die("malloc", "out of memory");
    ct_rng_uniform_cpu(h, (int64_t)n, 1, stream, 0);
    for (size_t i = 0; i < n; i++)
        h[i] = lo + (hi - lo) * h[i];
    CK(cudaMalloc((void **)&d, n * sizeof *d));
    CK(cudaMemcpy(d, h, n * sizeof *d, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static void *dev_bytes(size_t nbytes)
{
    void *d = NULL;
    CK(cudaMalloc(&d, nbytes ? nbytes : 1));
    CK(cudaMemset(d, 0, nbytes ? nbytes : 1));
    return d;
}

/* The two ceilings of the roofline, measured once: a large device-to-device copy (bytes read plus
 * written, 1 GiB) and a large sgemm (cuBLAS through the all-item score op: 4096^3). Small
 * batches (smoke runs) measure small ones. */
static void measure_ceilings(const ct_cuda_ctx_t *ctx, double *gemm_flops, int small)
{
    const size_t nbytes = small ? (size_t)16 << 20 : (size_t)1 << 30;
    void *a = dev_bytes(nbytes), *b = dev_bytes(nbytes);
    float best = 1e30f;
    for (int r = 0; r < 5; r++) {
        float ms = 0;
        CK(cudaEventRecord(ev0, s));
        CK(cudaMemcpyAsync(b, a, nbytes, cudaMemcpyDeviceToDevice, s));
        CK(cudaEventRecord(ev1, s));
        CK(cudaEventSynchronize(ev1));
        CK(cudaEventElapsedTime(&ms, ev0, ev1));
        best = ms < best ? ms : best;
    }
    bw_measured = 2.0 * (double)nbytes / (best / 1e3);
    CK(cudaFree(a));
    CK(cudaFree(b));

    const int M = small ? 256 : 4096, K = M;
    float *x = dev_fill((size_t)M * K, -1, 1, 90), *w = dev_fill((size_t)M * K, -1, 1, 91);
    float *y = dev_bytes((size_t)M * M * sizeof(float));
    best = 1e30f;
    for (int r = 0; r < 5; r++) {
        float ms = 0;
        CK(cudaEventRecord(ev0, s));
        OK(ct_score_all_cuda(y, x, w, M, M, K, K, ctx));
        CK(cudaEventRecord(ev1, s));
        CK(cudaEventSynchronize(ev1));
        CK(cudaEventElapsedTime(&ms, ev0, ev1));
        best = ms < best ? ms : best;
    }
    *gemm_flops = 2.0 * M * M * K / (best / 1e3);
    CK(cudaFree(x));
    CK(cudaFree(w));
    CK(cudaFree(y));
}

static void print_rows(int from, int to, double *ms_sum, double *floor_sum)
{
    for (int i = from; i < to; i++) {
        row_t *r = &rows[i];
        const double sec = r->ms / 1e3;
        const double floor_s = fmax(r->gbytes * 1e9 / bw_measured, r->gflop * 1e9 / peak_fp32);
        char gbs[16] = "-", gfs[16] = "-";
        if (r->gbytes > 0)
            snprintf(gbs, sizeof gbs, "%.1f", r->gbytes / sec);
        if (r->gflop > 0)
            snprintf(gfs, sizeof gfs, "%.1f", r->gflop / sec);
        printf("  %-22s %-4s %9.4f %8s %9s %9.4f %6.1f\n", r->op, r->dir, r->ms, gbs, gfs,
               floor_s * 1e3, 100.0 * floor_s / sec);
        *ms_sum += r->ms;
        *floor_sum += floor_s * 1e3;
    }
}

int main(int argc, char **argv)
{
    int B = 128, L = 200;
    unsigned flags = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
            if (sscanf(argv[++i], "%d,%d", &B, &L) != 2 || B < 1 || B > 4096 || L < 2 ||
                L > CT_ATTENTION_CUDA_MAX_L) {
                fprintf(stderr,
                        "kernels_bench_gpu: --size wants B,L with B in 1..4096 and L in "
                        "2..%d, got '%s'\n",
                        CT_ATTENTION_CUDA_MAX_L, argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--tf32") == 0) {
            flags |= CT_CUDA_CTX_TF32;
        } else {
            char *end = NULL;
            long r = strtol(argv[i], &end, 10);
            if (!*argv[i] || *end || r < 1 || r > MAXREPS) {
                fprintf(stderr, "kernels_bench_gpu: reps must be 1..%d, got '%s'\n", MAXREPS,
                        argv[i]);
                return 2;
            }
            reps = (int)r;
        }
    }
    if (ct_cuda_device_count() < 1) {
        fprintf(stderr, "kernels_bench_gpu: no CUDA device visible\n");
        return 1;
    }
    const int N = B * L;
    const size_t NC = (size_t)N * C;
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    CK(cudaStreamCreate(&s));
    CK(cudaEventCreate(&ev0));
    CK(cudaEventCreate(&ev1));
    ct_cuda_ctx_t ctx;
    OK(ct_cuda_ctx_init(&ctx, s, flags));

    double gemm_flops = 0;
    const int small = B * L < 128 * 200; /* a smoke run: small ceilings and evaluation too */
    measure_ceilings(&ctx, &gemm_flops, small);
    printf("# kernels_bench_gpu: CUDA ops of one SASRec training step\n");
    printf("# device: %s, %d SMs, %.1f GiB, compute capability %d.%d\n", prop.name,
           prop.multiProcessorCount, (double)prop.totalGlobalMem / (1 << 30), prop.major,
           prop.minor);
    printf("# measured: device copy %.0f GB/s (read + write), sgemm %.1f TFLOP/s%s; "
           "fp32 peak for floors %.0f TFLOP/s (H100 SXM datasheet)\n",
           bw_measured / 1e9, gemm_flops / 1e12, flags ? " (TF32 allowed)" : "", peak_fp32 / 1e12);
    printf("# sizes: B=%d L=%d d=%d h=%d dropout=%.1f layout=post_ln items=%d, median of %d x %d "
           "calls\n",
           B, L, C, NH, (double)PDROP, V - 1, reps, INNER);
    printf("# %-22s %-4s %9s %8s %9s %9s %6s\n", "op", "dir", "ms", "GB/s", "GFLOP/s", "floor_ms",
           "%floor");

    /* Inputs: a left-padded batch, about half of its slots real, as the CPU bench's. */
    int32_t *hseq = malloc((size_t)N * sizeof *hseq), *hpos = malloc((size_t)N * sizeof *hpos);
    int32_t *hneg = malloc((size_t)N * sizeof *hneg);
    if (!hseq || !hpos || !hneg)
        die("malloc", "out of memory");
    int64_t real = 0;
    for (int b = 0; b < B; b++) {
        int len = 1 + (16 + (b * 37) % 184) * (L - 1) / 200; /* mean ~ L / 2 */
        for (int t = 0; t < L; t++) {
            int on = t >= L - len;
            hseq[b * L + t] = on ? 1 + (b * 131 + t * 17) % (V - 1) : 0;
            hpos[b * L + t] = on ? 1 + (b * 71 + t * 29) % (V - 1) : 0;
            hneg[b * L + t] = on ? 1 + (b * 53 + t * 41) % (V - 1) : 0;
            real += on;
        }
    }
    int32_t *seq = dev_bytes((size_t)N * 4), *pos = dev_bytes((size_t)N * 4);
    int32_t *neg = dev_bytes((size_t)N * 4);
    CK(cudaMemcpy(seq, hseq, (size_t)N * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(pos, hpos, (size_t)N * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(neg, hneg, (size_t)N * 4, cudaMemcpyHostToDevice));

    const size_t natt = (size_t)B * NH * L * L;
    float *x = dev_fill(NC, -1, 1, 1), *qkv = dev_fill(3 * NC, -1, 1, 2);
    float *att = dev_fill(natt, 0, 0.01f, 3), *ao = dev_fill(NC, -1, 1, 4);
    float *a = dev_fill(NC, -1, 1, 5), *s1 = dev_fill(NC, -1, 1, 6);
    float *y = dev_fill(NC, -1, 1, 7), *h = dev_fill(NC, -1, 1, 8);
    float *f = dev_fill(NC, -1, 1, 9), *s2 = dev_fill(NC, -1, 1, 10);
    float *out = dev_fill(NC, -1, 1, 11), *mean = dev_fill((size_t)N, 0, 1, 12);
    float *rstd = dev_fill((size_t)N, 0.5f, 1, 13), *mean2 = dev_fill((size_t)N, 0, 1, 14);
    float *rstd2 = dev_fill((size_t)N, 0.5f, 1, 15);
    float *w_in = dev_fill(3 * C * C, -0.2f, 0.2f, 20), *b_in = dev_fill(3 * C, 0, 0, 21);
    float *w_o = dev_fill(C * C, -0.2f, 0.2f, 22), *b_o = dev_fill(C, 0, 0, 23);
    float *w_1 = dev_fill(C * C, -0.2f, 0.2f, 24), *b_1 = dev_fill(C, 0, 0, 25);
    float *w_2 = dev_fill(C * C, -0.2f, 0.2f, 26), *b_2 = dev_fill(C, 0, 0, 27);
    float *ln_w = dev_fill(C, 1, 1, 28), *ln_b = dev_fill(C, 0, 0, 29);
    float *g[8];
    for (int i = 0; i < 8; i++)
        g[i] = dev_fill(NC, -1, 1, 30 + (uint64_t)i);
    float *gqkv = dev_fill(3 * NC, 0, 0, 40), *gw = dev_fill(3 * C * C, 0, 0, 41);
    float *gb = dev_fill(3 * C, 0, 0, 42);
    float *wte = dev_fill((size_t)V * C, -0.1f, 0.1f, 45),
          *wpe = dev_fill((size_t)(L + 1) * C, 0, 0, 46);
    float *gwte = dev_fill((size_t)V * C, 0, 0, 47),
          *gwpe = dev_fill((size_t)(L + 1) * C, 0, 0, 48);
    float *pl = dev_fill((size_t)N, 0, 0, 49), *nl = dev_fill((size_t)N, 0, 0, 50);
    float *dpl = dev_fill((size_t)N, 0, 0, 51), *dnl = dev_fill((size_t)N, 0, 0, 52);
    float *params = dev_fill(NPARAMS, -0.1f, 0.1f, 53), *pgrad = dev_fill(NPARAMS, -1, 1, 54);
    float *pm = dev_fill(NPARAMS, 0, 0, 55), *pv = dev_fill(NPARAMS, 0, 0, 56);
    float *loss = dev_fill(2, 0, 0, 57), *ss = dev_fill(1, 0, 0, 58);
    float *att_scr = dev_bytes(CT_ATTENTION_BWD_CUDA_SCRATCH(B, L, NH) * sizeof(float));
    float *ln_scr = dev_bytes(CT_LAYERNORM_BWD_CUDA_SCRATCH(N, C) * sizeof(float));
    double *red_scr = dev_bytes(CT_REDUCE_CUDA_PARTS * sizeof(double));
    size_t sc_a = 0, sc_b = 0;
    OK(ct_embed_backward_cuda_scratch(&sc_a, B, L));
    OK(ct_score_backward_cuda_scratch(&sc_b, N));
    void *sort_scr = dev_bytes(sc_a > sc_b ? sc_a : sc_b);

    const double lin = 2.0 * N * C * C / 1e9; /* one d x d linear */
    const double attn = 4.0 * (double)B * NH * (L * (L + 1.0) / 2) * (C / NH) / 1e9; /* causal */
    const double nb = (double)NC * sizeof(float) / 1e9;   /* one (B,L,C) tensor */
    const double ab = (double)natt * sizeof(float) / 1e9; /* the probabilities */
    const double pb = (double)NPARAMS * sizeof(float) / 1e9;
    ct_dropout_t d_attn = {PDROP, 7, 1, 0}, d_ffn1 = {PDROP, 7, 2, 0}, d_ffn2 = {PDROP, 7, 3, 0};
    ct_dropout_t d_none = {0};
    const float eps = CT_SASREC_LN_EPS, scale = sqrtf((float)C);
    const size_t nbytes = NC * sizeof(float);
    float *gout = g[0], *gs2 = g[1], *gy = g[2], *gf = g[3], *gh = g[4], *ghp = g[5];
    float *gs1 = g[6], *gao = g[7];

    /* ---- one post_ln block, forward ---- */
    int blk0 = nrows;
    TIME("qkv projection", "fwd", 3 * lin, 4 * nb,
         OK(ct_qkv_forward_cuda(qkv, x, x, w_in, b_in, N, C, &ctx)));
    TIME("attention", "fwd", attn, 4 * nb + ab,
         OK(ct_attention_forward_cuda(ao, att, NULL, qkv, NULL, B, L, C, NH, d_attn, s)));
    TIME("out projection", "fwd", lin, 2 * nb,
         OK(ct_linear_forward_cuda(a, ao, w_o, b_o, N, C, C, &ctx)));
    TIME("residual", "fwd", 0, 3 * nb, OK(ct_residual_forward_cuda(s1, x, a, (int64_t)NC, s)));
    TIME("layernorm", "fwd", 0, 2 * nb,
         OK(ct_layernorm_forward_cuda(y, mean, rstd, s1, ln_w, ln_b, N, C, eps, s)));
    TIME("ffn conv1", "fwd", lin, 2 * nb,
         OK(ct_linear_forward_cuda(h, y, w_1, b_1, N, C, C, &ctx)));
    TIME("dropout", "fwd", 0, 2 * nb, OK(ct_dropout_cuda(h, h, (int64_t)NC, d_ffn1, s)));
    TIME("relu", "fwd", 0, 2 * nb, OK(ct_relu_forward_cuda(h, h, (int64_t)NC, s)));
    TIME("ffn conv2", "fwd", lin, 2 * nb,
         OK(ct_linear_forward_cuda(f, h, w_2, b_2, N, C, C, &ctx)));
    TIME("dropout", "fwd", 0, 2 * nb, OK(ct_dropout_cuda(f, f, (int64_t)NC, d_ffn2, s)));
    TIME("residual", "fwd", 0, 3 * nb, OK(ct_residual_forward_cuda(s2, y, f, (int64_t)NC, s)));
    TIME("layernorm", "fwd", 0, 2 * nb,
         OK(ct_layernorm_forward_cuda(out, mean2, rstd2, s2, ln_w, ln_b, N, C, eps, s)));
    int blk_fwd_end = nrows;

    /* ---- the same block, backward (gradient buffers zeroed inside the timed calls, as the
     * trainer does: that memset is part of the cost of the accumulate contract) ---- */
    TIME(
        "layernorm", "bwd", 0, 4 * nb, CK(cudaMemsetAsync(gs2, 0, nbytes, s));
        OK(ct_layernorm_backward_cuda(gs2, gw, gb, ln_scr, gout, s2, ln_w, mean2, rstd2, N, C, s)));
    TIME("residual", "bwd", 0, 3 * nb, CK(cudaMemsetAsync(gy, 0, nbytes, s));
         CK(cudaMemsetAsync(gf, 0, nbytes, s));
         OK(ct_residual_backward_cuda(gy, gf, gs2, (int64_t)NC, s)));
    TIME("dropout", "bwd", 0, 2 * nb, OK(ct_dropout_cuda(gf, gf, (int64_t)NC, d_ffn2, s)));
    TIME("ffn conv2", "bwd", 2 * lin, 4 * nb, CK(cudaMemsetAsync(gh, 0, nbytes, s));
         OK(ct_linear_backward_cuda(gh, gw, gb, gf, h, w_2, N, C, C, &ctx)));
    TIME("relu", "bwd", 0, 3 * nb, CK(cudaMemsetAsync(ghp, 0, nbytes, s));
         OK(ct_relu_backward_cuda(ghp, gh, h, (int64_t)NC, s)));
    TIME("dropout", "bwd", 0, 2 * nb, OK(ct_dropout_cuda(ghp, ghp, (int64_t)NC, d_ffn1, s)));
    TIME("ffn conv1", "bwd", 2 * lin, 4 * nb,
         OK(ct_linear_backward_cuda(gy, gw, gb, ghp, y, w_1, N, C, C, &ctx)));
    TIME("layernorm", "bwd", 0, 4 * nb, CK(cudaMemsetAsync(gs1, 0, nbytes, s));
         OK(ct_layernorm_backward_cuda(gs1, gw, gb, ln_scr, gy, s1, ln_w, mean, rstd, N, C, s)));
    TIME("residual", "bwd", 0, 3 * nb, CK(cudaMemsetAsync(gout, 0, nbytes, s));
         CK(cudaMemsetAsync(gf, 0, nbytes, s));
         OK(ct_residual_backward_cuda(gout, gf, gs1, (int64_t)NC, s)));
    TIME("out projection", "bwd", 2 * lin, 4 * nb, CK(cudaMemsetAsync(gao, 0, nbytes, s));
         OK(ct_linear_backward_cuda(gao, gw, gb, gf, ao, w_o, N, C, C, &ctx)));
    TIME(
        "attention", "bwd", 2 * attn, 10 * nb + ab, CK(cudaMemsetAsync(gqkv, 0, 3 * nbytes, s));
        OK(ct_attention_backward_cuda(gqkv, att_scr, gao, att, qkv, NULL, B, L, C, NH, d_attn, s)));
    TIME("qkv projection", "bwd", 6 * lin, 6 * nb,
         OK(ct_qkv_backward_cuda(gout, gout, gw, gb, gqkv, x, x, w_in, N, C, &ctx)));
    int blk_end = nrows;

    /* ---- per step, outside the blocks ---- */
    TIME("embedding", "fwd", 0, 3 * nb,
         OK(ct_embed_forward_cuda(x, wte, wpe, seq, B, L, C, scale, CT_POS_PADDED, s)));
    TIME("dropout", "fwd", 0, 2 * nb, OK(ct_dropout_cuda(x, x, (int64_t)NC, d_attn, s)));
    TIME("final layernorm", "fwd", 0, 2 * nb,
         OK(ct_layernorm_forward_cuda(y, mean, rstd, out, ln_w, ln_b, N, C, eps, s)));
    TIME("scores pos+neg", "fwd", 4.0 * N * C / 1e9, 4 * nb,
         OK(ct_score_forward_cuda(pl, y, wte, pos, N, C, s));
         OK(ct_score_forward_cuda(nl, y, wte, neg, N, C, s)));
    TIME("bce loss", "f+b", 0, 5.0 * N * 4 / 1e9,
         OK(ct_bce_loss_cuda(loss, dpl, dnl, red_scr, pl, nl, pos, N, (float)real, s)));
    TIME("scores pos+neg", "bwd", 8.0 * N * C / 1e9, 12 * nb, CK(cudaMemsetAsync(gy, 0, nbytes, s));
         OK(ct_score_backward_cuda(gy, gwte, NULL, dpl, y, wte, pos, N, C, s));
         OK(ct_score_backward_cuda(gy, gwte, NULL, dnl, y, wte, neg, N, C, s)));
    TIME("final layernorm", "bwd", 0, 4 * nb, CK(cudaMemsetAsync(gout, 0, nbytes, s));
         OK(ct_layernorm_backward_cuda(gout, gw, gb, ln_scr, gy, out, ln_w, mean, rstd, N, C, s)));
    TIME("dropout", "bwd", 0, 2 * nb, OK(ct_dropout_cuda(gout, gout, (int64_t)NC, d_attn, s)));
    TIME("embedding", "bwd", 0, 3 * nb,
         OK(ct_embed_backward_cuda(gwte, gwpe, NULL, gout, seq, B, L, C, scale, CT_POS_PADDED, s)));
    TIME("grad norm", "-", 0, pb, OK(ct_sumsq_cuda(ss, red_scr, pgrad, NPARAMS, s)));
    TIME(
        "adam", "-", 0, 7 * pb,
        OK(ct_adam_update_cuda(params, pm, pv, pgrad, NPARAMS, 1e-3, 0.9, 0.98, 1e-8, 1.0f, 1, s)));
    int step_end = nrows;

    /* ---- variants (not in the totals) ---- */
    TIME("attention p=0", "fwd", attn, 4 * nb + ab,
         OK(ct_attention_forward_cuda(ao, att, NULL, qkv, NULL, B, L, C, NH, d_none, s)));
    TIME(
        "attention p=0", "bwd", 2 * attn, 10 * nb + ab, CK(cudaMemsetAsync(gqkv, 0, 3 * nbytes, s));
        OK(ct_attention_backward_cuda(gqkv, att_scr, gao, att, qkv, NULL, B, L, C, NH, d_none, s)));
    TIME("attention skip-pad", "fwd", attn, 4 * nb + ab,
         OK(ct_attention_forward_cuda(ao, att, NULL, qkv, seq, B, L, C, NH, d_attn, s)));
    TIME("attention skip-pad", "bwd", 2 * attn, 10 * nb + ab,
         CK(cudaMemsetAsync(gqkv, 0, 3 * nbytes, s));
         OK(ct_attention_backward_cuda(gqkv, att_scr, gao, att, qkv, seq, B, L, C, NH, d_attn, s)));
    TIME("layernorm (4-warp)", "bwd", 0, 4 * nb, CK(cudaMemsetAsync(gs2, 0, nbytes, s));
         OK(ct_layernorm_backward_4warp_cuda(gs2, gw, gb, ln_scr, gout, s2, ln_w, mean2, rstd2, N,
                                             C, s)));
    /* The previous attention backward (dP recomputed in the dK/dV kernel), for the side-by-side
     * comparison with the rows above: same inputs, same work. */
    TIME("attention (recompute)", "bwd", 2 * attn, 10 * nb + ab,
         CK(cudaMemsetAsync(gqkv, 0, 3 * nbytes, s));
         OK(ct_attention_backward_recompute_cuda(gqkv, att_scr, gao, att, qkv, NULL, B, L, C, NH,
                                                 d_attn, s)));
    TIME("att skip-pad (recomp)", "bwd", 2 * attn, 10 * nb + ab,
         CK(cudaMemsetAsync(gqkv, 0, 3 * nbytes, s));
         OK(ct_attention_backward_recompute_cuda(gqkv, att_scr, gao, att, qkv, seq, B, L, C, NH,
                                                 d_attn, s)));
    TIME("scores sorted", "bwd", 8.0 * N * C / 1e9, 12 * nb, CK(cudaMemsetAsync(gy, 0, nbytes, s));
         OK(ct_score_backward_cuda(gy, gwte, sort_scr, dpl, y, wte, pos, N, C, s));
         OK(ct_score_backward_cuda(gy, gwte, sort_scr, dnl, y, wte, neg, N, C, s)));
    TIME("embedding sorted", "bwd", 0, 3 * nb,
         OK(ct_embed_backward_cuda(gwte, gwpe, sort_scr, gout, seq, B, L, C, scale, CT_POS_PADDED,
                                   s)));
    {
        /* Full-ranking evaluation of ml-1m's 6040 users: all-item scores and ranks. */
        const int U = small ? 64 : 6040;
        float *feats = dev_fill((size_t)U * C, -1, 1, 60), *scores = dev_bytes((size_t)U * V * 4);
        int32_t *targets = dev_bytes((size_t)U * 4), *ranks = dev_bytes((size_t)U * 4);
        int32_t *ht = malloc((size_t)U * 4);
        if (!ht)
            die("malloc", "out of memory");
        for (int u = 0; u < U; u++)
            ht[u] = 1 + (u * 7) % (V - 1);
        CK(cudaMemcpy(targets, ht, (size_t)U * 4, cudaMemcpyHostToDevice));
        free(ht);
        TIME("eval score all", "-", 2.0 * U * V * C / 1e9,
             ((double)U * V + (double)(U + V) * C) * 4 / 1e9,
             OK(ct_score_all_cuda(scores, feats, wte, U, V, C, C, &ctx)));
        TIME("eval rank all", "-", 0, (double)U * V * 4 / 1e9,
             OK(ct_rank_all_cuda(ranks, scores, targets, NULL, NULL, U, V, s)));
        CK(cudaFree(feats));
        CK(cudaFree(scores));
        CK(cudaFree(targets));
        CK(cudaFree(ranks));
    }
    {
        /* TiSASRec's attention at these sizes (q, k, v: the packed qkv's thirds; times from the
         * positions, so intervals grow with distance, clipped at T = 256), the interval masks
         * it reads, and the interval tables' gradients. */
        const int T = 256;
        const size_t W = CT_TISAS_MASK_WORDS(L, C);
        int64_t *hts = malloc((size_t)N * sizeof *hts);
        if (!hts)
            die("malloc", "out of memory");
        for (int r = 0; r < N; r++)
            hts[r] = hseq[r] ? 1 + (r % L) * 3 : 0;
        int64_t *ts = dev_bytes((size_t)N * sizeof *ts);
        CK(cudaMemcpy(ts, hts, (size_t)N * sizeof *ts, cudaMemcpyHostToDevice));
        free(hts);
        uint32_t *mk = dev_bytes((size_t)N * W * 4), *mv = dev_bytes((size_t)N * W * 4);
        float *rk = dev_fill((size_t)(T + 1) * C, -0.1f, 0.1f, 70);
        float *rv = dev_fill((size_t)(T + 1) * C, -0.1f, 0.1f, 71);
        float *drk = dev_fill((size_t)(T + 1) * C, 0, 0, 72),
              *drv = dev_fill((size_t)(T + 1) * C, 0, 0, 73);
        float *tscr = dev_bytes(CT_TISAS_ATTENTION_BWD_CUDA_SCRATCH(B, L, NH) * sizeof(float));
        const float *q = qkv, *k = qkv + NC, *v = qkv + 2 * NC;
        float *dq = gqkv, *dk = gqkv + NC, *dv = gqkv + 2 * NC;
        const double mb = (double)N * W * 4 / 1e9;
        ct_dropout_t d_tk = {PDROP, 7, 254, 0}, d_tv = {PDROP, 7, 255, 0};
        TIME("tisas masks (2)", "fwd", 0, 2 * mb, OK(ct_tisas_mask_cuda(mk, seq, B, L, C, d_tk, s));
             OK(ct_tisas_mask_cuda(mv, seq, B, L, C, d_tv, s)));
        TIME("tisas masks (per-word)", "fwd", 0, 2 * mb,
             OK(ct_tisas_mask_perword_cuda(mk, seq, B, L, C, d_tk, s));
             OK(ct_tisas_mask_perword_cuda(mv, seq, B, L, C, d_tv, s)));
        TIME("tisas attention", "fwd", 3 * attn, 4 * nb + ab + 2 * mb,
             OK(ct_tisas_attention_forward_cuda(ao, att, NULL, q, k, v, rk, rv, ts, seq, B, L, C,
                                                NH, T, d_attn, mk, mv, PDROP, s)));
        TIME("tisas attention", "bwd", 6 * attn, 8 * nb + 3 * ab + 2 * mb,
             CK(cudaMemsetAsync(gqkv, 0, 3 * nbytes, s));
             OK(ct_tisas_attention_backward_cuda(dq, dk, dv, drk, drv, tscr, gao, att, q, k, v, rk,
                                                 rv, ts, seq, B, L, C, NH, T, d_attn, mk, mv, PDROP,
                                                 s)));
        CK(cudaFree(ts));
        CK(cudaFree(mk));
        CK(cudaFree(mv));
        CK(cudaFree(rk));
        CK(cudaFree(rv));
        CK(cudaFree(drk));
        CK(cudaFree(drv));
        CK(cudaFree(tscr));
    }
    {
        /* mHC with 4 streams: one layer's mappings and its stream mixing after the sub-layer. */
        const int n = 4, K = CT_MHC_COEFFS(4), D = n * C;
        const size_t NS = NC * n;
        float *X = dev_fill(NS, -1, 1, 80), *Y = dev_fill(NS, 0, 0, 81),
              *dX = dev_fill(NS, 0, 0, 82);
        float *dY = dev_fill(NS, -1, 1, 83), *phi = dev_fill((size_t)D * K, -0.01f, 0.01f, 84);
        float *dphi = dev_fill((size_t)D * K, 0, 0, 85), *alpha = dev_fill(3, 0.01f, 0.01f, 86);
        float *dalpha = dev_fill(3, 0, 0, 87), *bias = dev_fill(K, -1, 1, 88);
        float *dbias = dev_fill(K, 0, 0, 89), *hpre = dev_fill((size_t)N * n, 0, 1, 90);
        float *hpost = dev_fill((size_t)N * n, 0, 2, 91),
              *hres = dev_fill((size_t)N * n * n, 0, 1, 92);
        float *proj = dev_fill((size_t)N * K, 0, 0, 93), *hrstd = dev_fill((size_t)N, 1, 1, 94);
        float *gpre = dev_fill((size_t)N * n, -1, 1, 95),
              *gpost = dev_fill((size_t)N * n, -1, 1, 96);
        float *gres = dev_fill((size_t)N * n * n, -1, 1, 97);
        float *mscr = dev_bytes(CT_MHC_COEFFS_BWD_CUDA_SCRATCH(N, n, 20) * sizeof(float));
        const double sb = (double)NS * 4 / 1e9, fl = 2.0 * N * D * K / 1e9;
        TIME("mhc mappings n=4", "fwd", fl, sb,
             OK(ct_mhc_coeffs_forward_cuda(hpre, hpost, hres, proj, hrstd, X, phi, alpha, bias, N,
                                           n, C, 20, 1e-6f, &ctx)));
        TIME("mhc mappings n=4", "bwd", 2 * fl, 3 * sb,
             OK(ct_mhc_coeffs_backward_cuda(dX, dphi, dalpha, dbias, mscr, gpre, gpost, gres, X,
                                            phi, alpha, bias, proj, hrstd, N, n, C, 20, &ctx)));
        TIME("mhc mappings (pertok)", "bwd", 2 * fl, 3 * sb,
             OK(ct_mhc_coeffs_backward_pertoken_cuda(dX, dphi, dalpha, dbias, mscr, gpre, gpost,
                                                     gres, X, phi, alpha, bias, proj, hrstd, N, n,
                                                     C, 20, &ctx)));
        TIME("mhc post mixing n=4", "fwd", 2.0 * NS * (n + 1) / 1e9, 2 * sb + nb,
             OK(ct_mhc_post_forward_cuda(Y, X, f, hres, hpost, N, n, C, s)));
        TIME("mhc post mixing n=4", "bwd", 4.0 * NS * (n + 1) / 1e9, 4 * sb + 2 * nb,
             OK(ct_mhc_post_backward_cuda(dX, g[1], gres, gpost, dY, X, f, hres, hpost, N, n, C,
                                          s)));
        float *bufs[] = {X,    Y,     dX,   dY,   phi,   dphi, alpha, dalpha, bias, dbias,
                         hpre, hpost, hres, proj, hrstd, gpre, gpost, gres,   mscr};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            CK(cudaFree(bufs[i]));
    }
    {
        /* The softmax losses: full CE over the V - 1 items, sampled CE with 128 negatives. */
        const int M = 128;
        float *cscr = dev_bytes(CT_CE_CUDA_SCRATCH(N, V) * sizeof(float));
        float *sscr = dev_bytes(CT_SAMPLED_CE_CUDA_SCRATCH(N, M) * sizeof(float));
        int32_t *rneg = dev_bytes((size_t)B * M * 4), *hr = malloc((size_t)B * M * 4);
        if (!hr)
            die("malloc", "out of memory");
        for (int x2 = 0; x2 < B * M; x2++)
            hr[x2] = 1 + (x2 * 97) % (V - 1);
        CK(cudaMemcpy(rneg, hr, (size_t)B * M * 4, cudaMemcpyHostToDevice));
        free(hr);
        TIME("full CE loss", "f+b", 6.0 * N * V * C / 1e9, (2.0 * N * C + 2.0 * V * C) * 4 / 1e9,
             OK(ct_ce_loss_cuda(loss, gy, gwte, cscr, y, wte, pos, N, C, V, (float)real, &ctx)));
        TIME("full CE (multipass)", "f+b", 6.0 * N * V * C / 1e9,
             (2.0 * N * C + 2.0 * V * C) * 4 / 1e9,
             OK(ct_ce_loss_multipass_cuda(loss, gy, gwte, cscr, y, wte, pos, N, C, V, (float)real,
                                          &ctx)));
        TIME("sampled CE M=128", "f+b", 6.0 * N * (M + 1) * C / 1e9, 4 * nb,
             OK(ct_sampled_ce_loss_cuda(loss, gy, gwte, sscr, y, wte, pos, rneg, B, L, C, M,
                                        (float)real, s)));
        CK(cudaFree(cscr));
        CK(cudaFree(sscr));
        CK(cudaFree(rneg));
    }
    {
        /* The language models' causal attention at GPT-2-small's heads (12 x 64, one packed QKV
         * row of 2304) on 8 sequences of 512: the cuBLAS products against the row-wise kernels.
         * A smoke run takes 1 sequence of 16 (2 heads of 8). */
        const int lb = small ? 1 : 8, ll = small ? 16 : 512, lh = small ? 2 : 12;
        const int lhd = small ? 8 : 64, lw = 3 * lh * lhd;
        const size_t nq = (size_t)lb * ll * lw, no = (size_t)lb * ll * lh * lhd;
        const size_t na = (size_t)lb * lh * ll * ll;
        float *lq = dev_fill(nq, -1.0f, 1.0f, 90), *ldo = dev_fill(no, -1.0f, 1.0f, 91);
        float *lo = dev_bytes(no * 4), *la = dev_bytes(na * 4), *ldq = dev_bytes(nq * 4);
        float *lsc = dev_bytes(CT_GQA_BWD_CUDA_SCRATCH(lb, lh, ll) * 4);
        const float lscale = 0.125f;
        /* causal: half of the L x L scores, 4 products of (L, L/2, HD) forward-and-back each */
        const double lfl = 2.0 * lb * lh * (double)ll * ll / 2 * lhd / 1e9;
        const double lgb = (2.0 * nq + 2.0 * na) * 4 / 1e9;
        TIME("lm attention", "fwd", 2 * lfl, lgb,
             OK(ct_gqa_attention_forward_cuda(lo, la, lq, lb, ll, lh, lh, lhd, lscale, &ctx)));
        TIME("lm attention (rows)", "fwd", 2 * lfl, lgb,
             OK(ct_gqa_attention_forward_rowwise_cuda(lo, la, lq, lb, ll, lh, lh, lhd, lscale, s)));
        TIME("lm attention", "bwd", 4 * lfl, 2 * lgb,
             OK(ct_gqa_attention_backward_cuda(ldq, lsc, ldo, la, lq, lb, ll, lh, lh, lhd, lscale,
                                               &ctx)));
        TIME("lm attention (rows)", "bwd", 4 * lfl, 2 * lgb,
             OK(ct_gqa_attention_backward_rowwise_cuda(ldq, lsc, ldo, la, lq, lb, ll, lh, lh, lhd,
                                                       lscale, s)));
        CK(cudaFree(lq));
        CK(cudaFree(ldo));
        CK(cudaFree(lo));
        CK(cudaFree(la));
        CK(cudaFree(ldq));
        CK(cudaFree(lsc));
    }
    int var_end = nrows;

    double fwd_ms = 0, fwd_fl = 0, bwd_ms = 0, bwd_fl = 0, rest_ms = 0, rest_fl = 0;
    double v_ms = 0, v_fl = 0;
    printf("# one block, forward\n");
    print_rows(blk0, blk_fwd_end, &fwd_ms, &fwd_fl);
    printf("# one block, backward\n");
    print_rows(blk_fwd_end, blk_end, &bwd_ms, &bwd_fl);
    printf("# per step, outside the blocks\n");
    print_rows(blk_end, step_end, &rest_ms, &rest_fl);
    printf("# variants (not in the totals)\n");
    print_rows(step_end, var_end, &v_ms, &v_fl);

    const double step_ms = NBLOCKS * (fwd_ms + bwd_ms) + rest_ms;
    const double step_floor = NBLOCKS * (fwd_fl + bwd_fl) + rest_fl;
    printf("# totals (sums of the rows' medians)\n");
    printf("  %-27s %9.4f %27.4f %6.1f\n", "block fwd+bwd", fwd_ms + bwd_ms, fwd_fl + bwd_fl,
           100.0 * (fwd_fl + bwd_fl) / (fwd_ms + bwd_ms));
    printf("  %-27s %9.4f %27.4f %6.1f\n", "step (2 blocks + rest)", step_ms, step_floor,
           100.0 * step_floor / step_ms);

    /* ---- the same step as one CUDA graph: no launch gaps. A call that fails while capturing
     * (G, GC) marks the capture failed instead of ending the program: the rows above stand. */
#define G(call)                               \
    do {                                      \
        if (ge == cudaSuccess && (call) != 0) \
            ge = cudaErrorUnknown;            \
    } while (0)
#define GC(call)               \
    do {                       \
        if (ge == cudaSuccess) \
            ge = (call);       \
    } while (0)
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t ge = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    if (ge == cudaSuccess) {
        G(ct_embed_forward_cuda(x, wte, wpe, seq, B, L, C, scale, CT_POS_PADDED, s));
        G(ct_dropout_cuda(x, x, (int64_t)NC, d_attn, s));
        for (int l = 0; l < NBLOCKS; l++) {
            G(ct_qkv_forward_cuda(qkv, x, x, w_in, b_in, N, C, &ctx));
            G(ct_attention_forward_cuda(ao, att, NULL, qkv, NULL, B, L, C, NH, d_attn, s));
            G(ct_linear_forward_cuda(a, ao, w_o, b_o, N, C, C, &ctx));
            G(ct_residual_forward_cuda(s1, x, a, (int64_t)NC, s));
            G(ct_layernorm_forward_cuda(y, mean, rstd, s1, ln_w, ln_b, N, C, eps, s));
            G(ct_linear_forward_cuda(h, y, w_1, b_1, N, C, C, &ctx));
            G(ct_dropout_cuda(h, h, (int64_t)NC, d_ffn1, s));
            G(ct_relu_forward_cuda(h, h, (int64_t)NC, s));
            G(ct_linear_forward_cuda(f, h, w_2, b_2, N, C, C, &ctx));
            G(ct_dropout_cuda(f, f, (int64_t)NC, d_ffn2, s));
            G(ct_residual_forward_cuda(s2, y, f, (int64_t)NC, s));
            G(ct_layernorm_forward_cuda(out, mean2, rstd2, s2, ln_w, ln_b, N, C, eps, s));
        }
        G(ct_layernorm_forward_cuda(y, mean, rstd, out, ln_w, ln_b, N, C, eps, s));
        G(ct_score_forward_cuda(pl, y, wte, pos, N, C, s));
        G(ct_score_forward_cuda(nl, y, wte, neg, N, C, s));
        G(ct_bce_loss_cuda(loss, dpl, dnl, red_scr, pl, nl, pos, N, (float)real, s));
        GC(cudaMemsetAsync(pgrad, 0, NPARAMS * sizeof(float), s));
        GC(cudaMemsetAsync(gy, 0, nbytes, s));
        G(ct_score_backward_cuda(gy, gwte, NULL, dpl, y, wte, pos, N, C, s));
        G(ct_score_backward_cuda(gy, gwte, NULL, dnl, y, wte, neg, N, C, s));
        GC(cudaMemsetAsync(gout, 0, nbytes, s));
        G(ct_layernorm_backward_cuda(gout, gw, gb, ln_scr, gy, out, ln_w, mean, rstd, N, C, s));
        for (int l = 0; l < NBLOCKS; l++) {
            GC(cudaMemsetAsync(gs2, 0, nbytes, s));
            G(ct_layernorm_backward_cuda(gs2, gw, gb, ln_scr, gout, s2, ln_w, mean2, rstd2, N, C,
                                         s));
            GC(cudaMemsetAsync(gy, 0, nbytes, s));
            GC(cudaMemsetAsync(gf, 0, nbytes, s));
            G(ct_residual_backward_cuda(gy, gf, gs2, (int64_t)NC, s));
            G(ct_dropout_cuda(gf, gf, (int64_t)NC, d_ffn2, s));
            GC(cudaMemsetAsync(gh, 0, nbytes, s));
            G(ct_linear_backward_cuda(gh, gw, gb, gf, h, w_2, N, C, C, &ctx));
            GC(cudaMemsetAsync(ghp, 0, nbytes, s));
            G(ct_relu_backward_cuda(ghp, gh, h, (int64_t)NC, s));
            G(ct_dropout_cuda(ghp, ghp, (int64_t)NC, d_ffn1, s));
            G(ct_linear_backward_cuda(gy, gw, gb, ghp, y, w_1, N, C, C, &ctx));
            GC(cudaMemsetAsync(gs1, 0, nbytes, s));
            G(ct_layernorm_backward_cuda(gs1, gw, gb, ln_scr, gy, s1, ln_w, mean, rstd, N, C, s));
            GC(cudaMemsetAsync(gout, 0, nbytes, s));
            GC(cudaMemsetAsync(gf, 0, nbytes, s));
            G(ct_residual_backward_cuda(gout, gf, gs1, (int64_t)NC, s));
            GC(cudaMemsetAsync(gao, 0, nbytes, s));
            G(ct_linear_backward_cuda(gao, gw, gb, gf, ao, w_o, N, C, C, &ctx));
            GC(cudaMemsetAsync(gqkv, 0, 3 * nbytes, s));
            G(ct_attention_backward_cuda(gqkv, att_scr, gao, att, qkv, NULL, B, L, C, NH, d_attn,
                                         s));
            G(ct_qkv_backward_cuda(gout, gout, gw, gb, gqkv, x, x, w_in, N, C, &ctx));
        }
        G(ct_dropout_cuda(gout, gout, (int64_t)NC, d_attn, s));
        G(ct_embed_backward_cuda(gwte, gwpe, NULL, gout, seq, B, L, C, scale, CT_POS_PADDED, s));
        G(ct_adam_update_cuda(params, pm, pv, pgrad, NPARAMS, 1e-3, 0.9, 0.98, 1e-8, 1.0f, 1, s));
        cudaError_t end = cudaStreamEndCapture(s, &graph);
        if (ge == cudaSuccess)
            ge = end;
        if (ge == cudaSuccess)
            ge = cudaGraphInstantiate(&exec, graph, 0);
    }
    if (ge != cudaSuccess) {
        (void)cudaGetLastError();
        if (graph)
            CK(cudaGraphDestroy(graph));
        printf("# step as a CUDA graph: not measured (%s)\n", cudaGetErrorString(ge));
    } else {
        TIME("step (CUDA graph)", "-", 0, 0, CK(cudaGraphLaunch(exec, s)));
        row_t *r = &rows[nrows - 1];
        double g_ms = 0, g_fl = 0;
        printf("# step as one CUDA graph (launch gaps removed)\n");
        print_rows(nrows - 1, nrows, &g_ms, &g_fl);
        printf("# docs/models.md §6.4 estimates 0.2-0.3 ms per step: %.2fx of 0.25 ms; the sum of "
               "the ops' floors is %.4f ms (%.1f%% of the graph's time)\n",
               r->ms / 0.25, step_floor, 100.0 * step_floor / r->ms);
        printf("# projected: %.3f s per ml-1m epoch (48 steps), %.0f target positions/s "
               "(%lld real of %d slots per step)\n",
               48 * r->ms / 1e3, (double)real / (r->ms / 1e3), (long long)real, N);
        CK(cudaGraphExecDestroy(exec));
        CK(cudaGraphDestroy(graph));
    }
    ct_cuda_ctx_close(&ctx);
    CK(cudaEventDestroy(ev0));
    CK(cudaEventDestroy(ev1));
    CK(cudaStreamDestroy(s));
    free(hseq), free(hpos), free(hneg);
    return 0;
}
