/*
 * kernels_bench.c - times the CPU ops of one SASRec block, forward and backward, at ml-1m sizes
 * (B = 128, L = 200, d = 50, h = 1, dropout 0.2, post_ln: HEAD's default layout), plus the
 * per-step pieces outside the blocks, and compares the total with the FLOP count of
 * docs/models.md §6.2. Not a test: it asserts nothing and CI does not run it.
 *
 *   build/bench/kernels_bench [reps]      (default 5; each row is the fastest of reps runs)
 *
 * Output: '#' header lines (machine, BLAS, sizes), then one fixed-width row per op:
 *   op dir ms GFLOP GFLOP/s GB/s
 * GFLOP is the op's count in docs/models.md §6.2 (2 per multiply-add; attention counted dense,
 * as there, so its GFLOP/s is "dense-equivalent" - the op itself skips the work above the
 * diagonal); element-wise ops show the bytes they move instead. Backward rows count 2x the
 * forward FLOPs (forward + backward = 3x forward). The footer adds the rows up and
 * projects a training step (2 blocks + the rest) and an ml-1m epoch (48 steps).
 *
 * Deliberately not here: a PyTorch comparison (bench/train_bench) and GPU timings (bench/gpu/).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_kernels.h"
#include "ct_time.h"

#if CT_HAVE_OPENBLAS
#include <cblas.h>
#endif

enum { B = 128, L = 200, C = 50, NH = 1, V = 3417, NBLOCKS = 2, STEPS_PER_EPOCH = 48 };
#define N     (B * L)
#define NC    ((size_t)N * C)
#define PDROP 0.2f

typedef struct row {
    const char *op, *dir;
    double ms, gflop, gbytes;
} row_t;

static row_t rows[64];
static int nrows;
static int reps = 5;

/* The fastest of reps runs of fn (the first run also warms caches and BLAS buffers). */
#define TIME(op_, dir_, gflop_, gbytes_, ...)                       \
    do {                                                            \
        double best_ = 1e30;                                        \
        for (int r_ = 0; r_ < reps; r_++) {                         \
            int64_t t0_ = ct_time_ns();                             \
            __VA_ARGS__;                                            \
            double ms_ = (double)(ct_time_ns() - t0_) / 1e6;        \
            best_ = ms_ < best_ ? ms_ : best_;                      \
        }                                                           \
        rows[nrows++] = (row_t){op_, dir_, best_, gflop_, gbytes_}; \
    } while (0)

static float *alloc_fill(size_t n, float lo, float hi, uint64_t stream)
{
    float *p = malloc(n * sizeof *p);
    if (!p) {
        fprintf(stderr, "kernels_bench: out of memory\n");
        exit(1);
    }
    ct_rng_uniform_cpu(p, (int64_t)n, 1, stream, 0);
    for (size_t i = 0; i < n; i++)
        p[i] = lo + (hi - lo) * p[i];
    return p;
}

static void print_header(void)
{
    char model[256] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "model name", 10) == 0) {
                char *c = strchr(line, ':');
                if (c) {
                    snprintf(model, sizeof model, "%s", c + 2);
                    model[strcspn(model, "\n")] = 0;
                }
                break;
            }
        }
        fclose(f);
    }
    printf("# kernels_bench: CPU ops of one SASRec block, forward + backward\n");
    printf("# cpu: %s, 1 thread (ct_cpu_set_threads(1))\n", model);
#if CT_HAVE_OPENBLAS
    printf("# blas: %s, core %s\n", openblas_get_config(), openblas_get_corename());
#else
    printf("# blas: generic CBLAS\n");
#endif
    printf("# sizes: B=%d L=%d d=%d h=%d dropout=%.1f layout=post_ln items=%d, fastest of %d\n", B,
           L, C, NH, (double)PDROP, V - 1, reps);
    printf("# GFLOP: docs/models.md §6.2 counts (attention dense); backward = 2x forward\n");
    printf("# %-22s %-4s %9s %8s %9s %7s\n", "op", "dir", "ms", "GFLOP", "GFLOP/s", "GB/s");
}

static void print_rows(int from, int to, double *ms_sum, double *gf_sum)
{
    for (int i = from; i < to; i++) {
        row_t *r = &rows[i];
        char gf[16] = "-", gfs[16] = "-", gbs[16] = "-";
        if (r->gflop > 0) {
            snprintf(gf, sizeof gf, "%.3f", r->gflop);
            snprintf(gfs, sizeof gfs, "%.1f", r->gflop / (r->ms / 1e3));
        }
        if (r->gbytes > 0)
            snprintf(gbs, sizeof gbs, "%.1f", r->gbytes / (r->ms / 1e3));
        printf("  %-22s %-4s %9.3f %8s %9s %7s\n", r->op, r->dir, r->ms, gf, gfs, gbs);
        *ms_sum += r->ms;
        *gf_sum += r->gflop;
    }
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        reps = atoi(argv[1]);
        if (reps < 1 || reps > 1000) {
            fprintf(stderr, "kernels_bench: reps must be 1..1000, got '%s'\n", argv[1]);
            return 2;
        }
    }
    if (ct_cpu_set_threads(1) != 0) {
        fprintf(stderr, "kernels_bench: cannot set BLAS threads to 1\n");
        return 1;
    }

    /* Inputs: a left-padded batch, about half of its slots real (ml-1m: 53.6% at L = 200; the
     * footer prints the count). */
    int32_t *seq = malloc((size_t)N * sizeof *seq), *pos = malloc((size_t)N * sizeof *pos);
    int32_t *neg = malloc((size_t)N * sizeof *neg);
    if (!seq || !pos || !neg)
        return 1;
    int64_t real = 0;
    for (int b = 0; b < B; b++) {
        int len = 16 + (b * 37) % 184; /* 16 .. 199 items, mean ~107 */
        for (int t = 0; t < L; t++) {
            int on = t >= L - len;
            seq[b * L + t] = on ? 1 + (b * 131 + t * 17) % (V - 1) : 0;
            pos[b * L + t] = on ? 1 + (b * 71 + t * 29) % (V - 1) : 0;
            neg[b * L + t] = on ? 1 + (b * 53 + t * 41) % (V - 1) : 0;
            real += on;
        }
    }

    float *x = alloc_fill(NC, -1, 1, 1), *qkv = alloc_fill(3 * NC, -1, 1, 2);
    float *att = alloc_fill((size_t)B * NH * L * L, 0, 1, 3), *ao = alloc_fill(NC, -1, 1, 4);
    float *a = alloc_fill(NC, -1, 1, 5), *s1 = alloc_fill(NC, -1, 1, 6);
    float *y = alloc_fill(NC, -1, 1, 7), *h = alloc_fill(NC, -1, 1, 8);
    float *f = alloc_fill(NC, -1, 1, 9), *s2 = alloc_fill(NC, -1, 1, 10);
    float *out = alloc_fill(NC, -1, 1, 11), *mean = alloc_fill(N, 0, 1, 12);
    float *rstd = alloc_fill(N, 0, 1, 13), *mean2 = alloc_fill(N, 0, 1, 14);
    float *rstd2 = alloc_fill(N, 0, 1, 15);
    float *w_in = alloc_fill(3 * C * C, -0.2f, 0.2f, 20), *b_in = alloc_fill(3 * C, 0, 0, 21);
    float *w_o = alloc_fill(C * C, -0.2f, 0.2f, 22), *b_o = alloc_fill(C, 0, 0, 23);
    float *w_1 = alloc_fill(C * C, -0.2f, 0.2f, 24), *b_1 = alloc_fill(C, 0, 0, 25);
    float *w_2 = alloc_fill(C * C, -0.2f, 0.2f, 26), *b_2 = alloc_fill(C, 0, 0, 27);
    float *ln_w = alloc_fill(C, 1, 1, 28), *ln_b = alloc_fill(C, 0, 0, 29);
    float *g[8];
    for (int i = 0; i < 8; i++)
        g[i] = alloc_fill(NC, -1, 1, 30 + (uint64_t)i);
    float *gqkv = alloc_fill(3 * NC, 0, 0, 40), *gw = alloc_fill(3 * C * C, 0, 0, 41);
    float *gb = alloc_fill(3 * C, 0, 0, 42);
    float *fs = alloc_fill(CT_ATTENTION_FWD_SCRATCH(L), 0, 0, 43);
    float *bs = alloc_fill(CT_ATTENTION_BWD_SCRATCH(L), 0, 0, 44);
    float *wte = alloc_fill((size_t)V * C, -0.1f, 0.1f, 45),
          *wpe = alloc_fill((L + 1) * C, 0, 0, 46);
    float *gwte = alloc_fill((size_t)V * C, 0, 0, 47), *gwpe = alloc_fill((L + 1) * C, 0, 0, 48);
    float *pl = alloc_fill(N, 0, 0, 49), *nl = alloc_fill(N, 0, 0, 50);
    float *dpl = alloc_fill(N, 0, 0, 51), *dnl = alloc_fill(N, 0, 0, 52);
    const size_t nparams = 212000;
    float *params = alloc_fill(nparams, -0.1f, 0.1f, 53), *pgrad = alloc_fill(nparams, -1, 1, 54);
    float *pm = alloc_fill(nparams, 0, 0, 55), *pv = alloc_fill(nparams, 0, 0, 56);

    const double lin = 2.0 * N * C * C / 1e9;               /* one d x d linear, forward */
    const double attn = 4.0 * (double)B * L * L * C / 1e9;  /* QK^T + AV, dense */
    const double nbytes = (double)NC * sizeof(float) / 1e9; /* one (B,L,C) tensor */
    ct_dropout_t d_attn = {PDROP, 7, 1, 0}, d_ffn1 = {PDROP, 7, 2, 0}, d_ffn2 = {PDROP, 7, 3, 0};
    ct_dropout_t d_none = {0};
    const float eps = CT_SASREC_LN_EPS;

    print_header();

    /* ---- one post_ln block, forward ---- */
    int blk0 = nrows;
    TIME("qkv projection", "fwd", 3 * lin, 0, ct_qkv_forward_cpu(qkv, x, x, w_in, b_in, N, C));
    TIME("attention", "fwd", attn, 0,
         ct_attention_forward_cpu(ao, att, fs, qkv, NULL, B, L, C, NH, d_attn));
    TIME("out projection", "fwd", lin, 0, ct_linear_forward_cpu(a, ao, w_o, b_o, N, C, C));
    TIME("residual", "fwd", 0, 3 * nbytes, ct_residual_forward_cpu(s1, x, a, (int64_t)NC));
    TIME("layernorm", "fwd", 0, 2 * nbytes,
         ct_layernorm_forward_cpu(y, mean, rstd, s1, ln_w, ln_b, N, C, eps));
    TIME("ffn conv1", "fwd", lin, 0, ct_linear_forward_cpu(h, y, w_1, b_1, N, C, C));
    TIME("dropout", "fwd", 0, 2 * nbytes, ct_dropout_cpu(h, h, (int64_t)NC, d_ffn1));
    TIME("relu", "fwd", 0, 2 * nbytes, ct_relu_forward_cpu(h, h, (int64_t)NC));
    TIME("ffn conv2", "fwd", lin, 0, ct_linear_forward_cpu(f, h, w_2, b_2, N, C, C));
    TIME("dropout", "fwd", 0, 2 * nbytes, ct_dropout_cpu(f, f, (int64_t)NC, d_ffn2));
    TIME("residual", "fwd", 0, 3 * nbytes, ct_residual_forward_cpu(s2, y, f, (int64_t)NC));
    TIME("layernorm", "fwd", 0, 2 * nbytes,
         ct_layernorm_forward_cpu(out, mean2, rstd2, s2, ln_w, ln_b, N, C, eps));
    int blk_fwd_end = nrows;

    /* ---- the same block, backward (the gradient buffers are zeroed inside each timed run as
     * the trainer would: that memset is part of the cost of the accumulate contract) ---- */
    float *gout = g[0], *gs2 = g[1], *gy = g[2], *gf = g[3], *gh = g[4], *ghp = g[5];
    float *gs1 = g[6], *gao = g[7];
    const size_t nb = NC * sizeof(float);
    TIME("layernorm", "bwd", 0, 4 * nbytes, memset(gs2, 0, nb);
         ct_layernorm_backward_cpu(gs2, gw, gb, gout, s2, ln_w, mean2, rstd2, N, C));
    TIME("residual", "bwd", 0, 3 * nbytes, memset(gy, 0, nb); memset(gf, 0, nb);
         ct_residual_backward_cpu(gy, gf, gs2, (int64_t)NC));
    TIME("dropout", "bwd", 0, 2 * nbytes, ct_dropout_cpu(gf, gf, (int64_t)NC, d_ffn2));
    TIME("ffn conv2", "bwd", 2 * lin, 0, memset(gh, 0, nb);
         ct_linear_backward_cpu(gh, gw, gb, gf, h, w_2, N, C, C));
    TIME("relu", "bwd", 0, 3 * nbytes, memset(ghp, 0, nb);
         ct_relu_backward_cpu(ghp, gh, h, (int64_t)NC));
    TIME("dropout", "bwd", 0, 2 * nbytes, ct_dropout_cpu(ghp, ghp, (int64_t)NC, d_ffn1));
    TIME("ffn conv1", "bwd", 2 * lin, 0, ct_linear_backward_cpu(gy, gw, gb, ghp, y, w_1, N, C, C));
    TIME("layernorm", "bwd", 0, 4 * nbytes, memset(gs1, 0, nb);
         ct_layernorm_backward_cpu(gs1, gw, gb, gy, s1, ln_w, mean, rstd, N, C));
    TIME("residual", "bwd", 0, 3 * nbytes, memset(gout, 0, nb); memset(gf, 0, nb);
         ct_residual_backward_cpu(gout, gf, gs1, (int64_t)NC));
    TIME("out projection", "bwd", 2 * lin, 0, memset(gao, 0, nb);
         ct_linear_backward_cpu(gao, gw, gb, gf, ao, w_o, N, C, C));
    TIME("attention", "bwd", 2 * attn, 0, memset(gqkv, 0, 3 * nb);
         ct_attention_backward_cpu(gqkv, bs, gao, att, qkv, NULL, B, L, C, NH, d_attn));
    TIME("qkv projection", "bwd", 6 * lin, 0,
         ct_qkv_backward_cpu(gout, gout, gw, gb, gqkv, x, x, w_in, N, C));
    int blk_end = nrows;

    /* ---- per step, outside the blocks ---- */
    float loss, ss;
    TIME("embedding", "fwd", 0, 2 * nbytes,
         ct_embed_forward_cpu(x, wte, wpe, seq, B, L, C, sqrtf((float)C), CT_POS_PADDED));
    TIME("dropout", "fwd", 0, 2 * nbytes, ct_dropout_cpu(x, x, (int64_t)NC, d_attn));
    TIME("final layernorm", "fwd", 0, 2 * nbytes,
         ct_layernorm_forward_cpu(y, mean, rstd, out, ln_w, ln_b, N, C, eps));
    TIME("scores pos+neg", "fwd", 4.0 * N * C / 1e9, 0, ct_score_forward_cpu(pl, y, wte, pos, N, C);
         ct_score_forward_cpu(nl, y, wte, neg, N, C));
    TIME("bce loss", "f+b", 0, 0, ct_bce_loss_cpu(&loss, dpl, dnl, pl, nl, pos, N, (float)real));
    TIME("scores pos+neg", "bwd", 8.0 * N * C / 1e9, 0, memset(gy, 0, nb);
         ct_score_backward_cpu(gy, gwte, dpl, y, wte, pos, N, C);
         ct_score_backward_cpu(gy, gwte, dnl, y, wte, neg, N, C));
    TIME("final layernorm", "bwd", 0, 4 * nbytes, memset(gout, 0, nb);
         ct_layernorm_backward_cpu(gout, gw, gb, gy, out, ln_w, mean, rstd, N, C));
    TIME("dropout", "bwd", 0, 2 * nbytes, ct_dropout_cpu(gout, gout, (int64_t)NC, d_attn));
    TIME("embedding", "bwd", 0, 2 * nbytes,
         ct_embed_backward_cpu(gwte, gwpe, gout, seq, B, L, C, sqrtf((float)C), CT_POS_PADDED));
    TIME("grad norm", "-", 0, (double)nparams * 4 / 1e9, ct_sumsq_cpu(&ss, pgrad, nparams));
    TIME("adam", "-", 0, (double)nparams * 4 * 5 / 1e9,
         ct_adam_update_cpu(params, pm, pv, pgrad, nparams, 1e-3, 0.9, 0.98, 1e-8, 1.0f, 1));
    int step_end = nrows;

    /* ---- variants: attention without dropout, and with the last block's padding skip ---- */
    TIME("attention p=0", "fwd", attn, 0,
         ct_attention_forward_cpu(ao, att, fs, qkv, NULL, B, L, C, NH, d_none));
    TIME("attention p=0", "bwd", 2 * attn, 0, memset(gqkv, 0, 3 * nb);
         ct_attention_backward_cpu(gqkv, bs, gao, att, qkv, NULL, B, L, C, NH, d_none));
    TIME("attention skip-pad", "fwd", attn, 0,
         ct_attention_forward_cpu(ao, att, fs, qkv, seq, B, L, C, NH, d_attn));
    TIME("attention skip-pad", "bwd", 2 * attn, 0, memset(gqkv, 0, 3 * nb);
         ct_attention_backward_cpu(gqkv, bs, gao, att, qkv, seq, B, L, C, NH, d_attn));
    int var_end = nrows;

    double fwd_ms = 0, fwd_gf = 0, bwd_ms = 0, bwd_gf = 0, rest_ms = 0, rest_gf = 0, v_ms = 0,
           v_gf = 0;
    printf("# one block, forward\n");
    print_rows(blk0, blk_fwd_end, &fwd_ms, &fwd_gf);
    printf("# one block, backward\n");
    print_rows(blk_fwd_end, blk_end, &bwd_ms, &bwd_gf);
    printf("# per step, outside the blocks\n");
    print_rows(blk_end, step_end, &rest_ms, &rest_gf);
    printf("# variants (not in the totals)\n");
    print_rows(step_end, var_end, &v_ms, &v_gf);

    const double spec_block = 3 * 14.0e6 * B / 1e9; /* fwd+bwd, dense attention, per block */
    const double spec_step = 11.2;                  /* docs/models.md §6.2, per step */
    double blk_ms = fwd_ms + bwd_ms;
    double step_ms = NBLOCKS * blk_ms + rest_ms;
    printf("# totals\n");
    printf("  %-27s %9.3f %8.3f %9.1f\n", "block fwd", fwd_ms, fwd_gf, fwd_gf / (fwd_ms / 1e3));
    printf("  %-27s %9.3f %8.3f %9.1f\n", "block bwd", bwd_ms, bwd_gf, bwd_gf / (bwd_ms / 1e3));
    printf("  %-27s %9.3f %8.3f %9.1f   (count: %.3f GFLOP per block fwd+bwd)\n", "block fwd+bwd",
           blk_ms, fwd_gf + bwd_gf, (fwd_gf + bwd_gf) / (blk_ms / 1e3), spec_block);
    printf("  %-27s %9.3f %8.3f %9.1f   (count: %.1f GFLOP per step)\n", "step (2 blocks + rest)",
           step_ms, spec_step, spec_step / (step_ms / 1e3), spec_step);
    printf("# projected: %.2f s per ml-1m epoch (%d steps), %.0f target positions/s "
           "(%lld real of %d slots per step)\n",
           STEPS_PER_EPOCH * step_ms / 1e3, STEPS_PER_EPOCH, (double)real / (step_ms / 1e3),
           (long long)real, N);
    printf("# (loss %.4f, |g|^2 %.1f: printed so the work cannot be optimised away)\n",
           (double)loss, (double)ss);

    free(seq), free(pos), free(neg), free(x), free(qkv), free(att), free(ao), free(a), free(s1);
    free(y), free(h), free(f), free(s2), free(out), free(mean), free(rstd), free(mean2);
    free(rstd2), free(w_in), free(b_in), free(w_o), free(b_o), free(w_1), free(b_1), free(w_2);
    free(b_2), free(ln_w), free(ln_b), free(gqkv), free(gw), free(gb), free(fs), free(bs);
    free(wte), free(wpe), free(gwte), free(gwpe), free(pl), free(nl), free(dpl), free(dnl);
    free(params), free(pgrad), free(pm), free(pv);
    for (int i = 0; i < 8; i++)
        free(g[i]);
    return 0;
}
