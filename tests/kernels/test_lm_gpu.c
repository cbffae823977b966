/*
 * test_lm_gpu.c (gpu suite; kernels suite on the emulator) - the language models' ops on the GPU
 * (kernels/cuda/lm.cu) against their CPU twins (kernels/cpu/lm.c):
 *   - RoPE forward and backward: bit for bit (two products and a sum, the same intrinsics);
 *   - RMSNorm: out, rstd and dinp bit for bit wherever rstd rounds as on the CPU (the row sums
 *     are double on both, in another order), checked within atol 1e-6, rtol 1e-6 and counted;
 *     dweight, a column sum in another order over N rows of terms of order 1: atol 1e-5,
 *     rtol 1e-5 (float rounding 6e-8 per addition, a few hundred rows);
 *   - GELU and SwiGLU: the device's erff, expf are within 2 ulp of glibc's, and the
 *     formulas multiply them by values up to ~6: atol 2e-6, rtol 2e-6.
 *   - the next-token loss (ct_lm_ce_loss_cuda in kernels/cuda/xent.cu): see lce_case;
 *   - grouped-query attention: see gqa_case;
 *   - every language-model entry of the op tables, CPU table against CUDA table (test_tables),
 *     GPT-2's Conv1D and a linear backward with a frozen weight (dweight NULL) included.
 * Outputs are poisoned first; backward gradients start from random values and get two calls
 * (the += contract). Sizes: Qwen2.5-0.5B's width 896 and 7B's 3584 (wider than shared memory
 * would hold), an odd width, and an element count that needs the grid-stride loop's second
 * pass.
 */
#include "ct_ops.h"
#include "gcheck.h"

#define LM_EPS 1e-6f

static void rms_case(int N, int C, uint64_t stream)
{
    printf("rmsnorm N=%d C=%d\n", N, C);
    const int64_t n = (int64_t)N * C;
    float *x = gk_host_rand(n, -2.0f, 2.0f, stream), *w = gk_host_rand(C, 0.5f, 1.5f, stream + 1);
    float *dout = gk_host_rand(n, -1.0f, 1.0f, stream + 2);
    float *dx0 = gk_host_rand(n, -1.0f, 1.0f, stream + 3),
          *dw0 = gk_host_rand(C, -1.0f, 1.0f, stream + 4);
    float *out = KC_ALLOC(float, n), *rstd = KC_ALLOC(float, N), *got = KC_ALLOC(float, n);
    float *gotr = KC_ALLOC(float, N), *dx = KC_ALLOC(float, n), *dw = KC_ALLOC(float, C);
    ct_rmsnorm_forward_cpu(out, rstd, x, w, N, C, LM_EPS);
    memcpy(dx, dx0, (size_t)n * sizeof *dx);
    memcpy(dw, dw0, (size_t)C * sizeof *dw);
    ct_rmsnorm_backward_cpu(dx, dw, dout, x, w, rstd, N, C);
    ct_rmsnorm_backward_cpu(dx, dw, dout, x, w, rstd, N, C);

    float *d_x = gk_dup(float, x, n), *d_w = gk_dup(float, w, C), *d_out = gk_alloc(float, n);
    float *d_rstd = gk_alloc(float, N), *d_dout = gk_dup(float, dout, n);
    float *d_dx = gk_dup(float, dx0, n), *d_dw = gk_dup(float, dw0, C);
    float *d_scr = gk_alloc(float, CT_RMSNORM_BWD_CUDA_SCRATCH(N, C));
    CT_ASSERT_OK(ct_rmsnorm_forward_cuda(d_out, d_rstd, d_x, d_w, N, C, LM_EPS, NULL));
    gk_download(gotr, d_rstd, (size_t)N * sizeof(float));
    gk_download(got, d_out, (size_t)n * sizeof(float));
    int same = 0;
    for (int r = 0; r < N; r++)
        same += gotr[r] == rstd[r];
    printf("  rstd equal to the CPU's bits in %d of %d rows\n", same, N);
    gk_check("rmsnorm rstd", gotr, rstd, N, 0, 1e-6);
    gk_check("rmsnorm out", got, out, n, 1e-6, 1e-6);
    /* the backward from the CPU's rstd, so that dinp's formula is compared on equal inputs */
    gk_upload(d_rstd, rstd, (size_t)N * sizeof(float));
    for (int k = 0; k < 2; k++)
        CT_ASSERT_OK(
            ct_rmsnorm_backward_cuda(d_dx, d_dw, d_scr, d_dout, d_x, d_w, d_rstd, N, C, NULL));
    gk_download(got, d_dx, (size_t)n * sizeof(float));
    gk_check("rmsnorm dinp x2", got, dx, n, 1e-6, 1e-6);
    gk_download(got, d_dw, (size_t)C * sizeof(float));
    gk_check("rmsnorm dweight x2", got, dw, C, 1e-5, 1e-5);
    gk_free_all();
    free(x), free(w), free(dout), free(dx0), free(dw0), free(out), free(rstd), free(got);
    free(gotr), free(dx), free(dw);
}

static void test_rmsnorm(void)
{
    rms_case(70, 896, 10);
    rms_case(9, 3584, 20);
    rms_case(130, 13, 30);
}

static void test_gelu_swiglu(void)
{
    const int64_t n = 300001;
    float *x = gk_host_rand(n, -6.0f, 6.0f, 40), *u = gk_host_rand(n, -2.0f, 2.0f, 41);
    float *dout = gk_host_rand(n, -1.0f, 1.0f, 42), *g0 = gk_host_rand(n, -1.0f, 1.0f, 43);
    float *g1 = gk_host_rand(n, -1.0f, 1.0f, 44);
    float *ref = KC_ALLOC(float, n), *ref2 = KC_ALLOC(float, n), *got = KC_ALLOC(float, n);
    const size_t nb = (size_t)n * sizeof(float);
    float *d_x = gk_dup(float, x, n), *d_u = gk_dup(float, u, n), *d_dout = gk_dup(float, dout, n);
    float *d_out = gk_alloc(float, n), *d_g0 = gk_alloc(float, n), *d_g1 = gk_alloc(float, n);
    for (int kind = CT_GELU_TANH; kind <= CT_GELU_ERF; kind++) {
        printf("gelu %s\n", kind == CT_GELU_TANH ? "tanh" : "erf");
        ct_gelu_forward_cpu(ref, x, n, (ct_gelu_kind_t)kind);
        gk_poison(d_out, nb);
        CT_ASSERT_OK(ct_gelu_forward_cuda(d_out, d_x, n, (ct_gelu_kind_t)kind, NULL));
        gk_download(got, d_out, nb);
        gk_check("gelu forward", got, ref, n, 2e-6, 2e-6);
        memcpy(ref, g0, nb);
        ct_gelu_backward_cpu(ref, dout, x, n, (ct_gelu_kind_t)kind);
        ct_gelu_backward_cpu(ref, dout, x, n, (ct_gelu_kind_t)kind);
        gk_upload(d_g0, g0, nb);
        for (int k = 0; k < 2; k++)
            CT_ASSERT_OK(ct_gelu_backward_cuda(d_g0, d_dout, d_x, n, (ct_gelu_kind_t)kind, NULL));
        gk_download(got, d_g0, nb);
        gk_check("gelu backward x2", got, ref, n, 2e-6, 2e-6);
    }
    printf("swiglu\n");
    ct_swiglu_forward_cpu(ref, x, u, n);
    gk_poison(d_out, nb);
    CT_ASSERT_OK(ct_swiglu_forward_cuda(d_out, d_x, d_u, n, NULL));
    gk_download(got, d_out, nb);
    gk_check("swiglu forward", got, ref, n, 2e-6, 2e-6);
    memcpy(ref, g0, nb);
    memcpy(ref2, g1, nb);
    ct_swiglu_backward_cpu(ref, ref2, dout, x, u, n);
    ct_swiglu_backward_cpu(ref, ref2, dout, x, u, n);
    gk_upload(d_g0, g0, nb);
    gk_upload(d_g1, g1, nb);
    for (int k = 0; k < 2; k++)
        CT_ASSERT_OK(ct_swiglu_backward_cuda(d_g0, d_g1, d_dout, d_x, d_u, n, NULL));
    gk_download(got, d_g0, nb);
    gk_check("swiglu dgate x2", got, ref, n, 2e-6, 2e-6);
    gk_download(got, d_g1, nb);
    gk_check("swiglu dup x2", got, ref2, n, 2e-6, 2e-6);
    gk_free_all();
    free(x), free(u), free(dout), free(g0), free(g1), free(ref), free(ref2), free(got);
}

static void test_rope(void)
{
    enum { N = 37, NH = 14, HD = 64, P = 1000, H = HD / 2 };
    const int64_t n = (int64_t)N * NH * HD;
    const size_t nb = (size_t)n * sizeof(float);
    float *cs = KC_ALLOC(float, (size_t)P *H), *sn = KC_ALLOC(float, (size_t)P *H);
    ct_rope_table_cpu(cs, sn, P, HD, 1000000.0f);
    int32_t pos[N];
    for (int r = 0; r < N; r++)
        pos[r] = (r * 131 + 7) % P;
    float *x = gk_host_rand(n, -2.0f, 2.0f, 50), *dout = gk_host_rand(n, -1.0f, 1.0f, 51);
    float *g0 = gk_host_rand(n, -1.0f, 1.0f, 52);
    float *ref = KC_ALLOC(float, n), *got = KC_ALLOC(float, n);
    float *d_cs = gk_dup(float, cs, (size_t)P *H), *d_sn = gk_dup(float, sn, (size_t)P *H);
    int32_t *d_pos = gk_dup(int32_t, pos, N);
    float *d_x = gk_dup(float, x, n), *d_out = gk_alloc(float, n), *d_dout = gk_dup(float, dout, n);
    float *d_g = gk_dup(float, g0, n);
    ct_rope_forward_cpu(ref, x, cs, sn, pos, N, NH, HD);
    CT_ASSERT_OK(ct_rope_forward_cuda(d_out, d_x, d_cs, d_sn, d_pos, N, NH, HD, NULL));
    gk_download(got, d_out, nb);
    GK_ASSERT_BITEQ("rope forward", got, ref, n);
    CT_ASSERT_OK(ct_rope_forward_cuda(d_x, d_x, d_cs, d_sn, d_pos, N, NH, HD, NULL));
    gk_download(got, d_x, nb);
    GK_ASSERT_BITEQ("rope forward in place", got, ref, n);
    memcpy(ref, g0, nb);
    ct_rope_backward_cpu(ref, dout, cs, sn, pos, N, NH, HD);
    ct_rope_backward_cpu(ref, dout, cs, sn, pos, N, NH, HD);
    for (int k = 0; k < 2; k++)
        CT_ASSERT_OK(ct_rope_backward_cuda(d_g, d_dout, d_cs, d_sn, d_pos, N, NH, HD, NULL));
    gk_download(got, d_g, nb);
    GK_ASSERT_BITEQ("rope backward x2", got, ref, n);
    gk_free_all();
    free(cs), free(sn), free(x), free(dout), free(g0), free(ref), free(got);
}

/* The next-token loss through the LM head against ct_lm_ce_loss_cpu: token 0 and V-1 as
 * targets, ignored rows, more rows than one chunk; then a frozen head (dwte NULL) and the loss
 * alone. Tolerances as the catalogue CE's GPU test (the same kernels): the loss 1e-5 relative,
 * gradients atol 1e-6, rtol 1e-4 (sgemm and the softmax sum in another order). */
static void lce_case(int N, int C, int V)
{
    printf("lm ce N=%d C=%d V=%d rows/chunk=%zu\n", N, C, V, CT_CE_CUDA_ROWS(V));
    float *feats = gk_host_rand((int64_t)N * C, -1, 1, 60);
    float *wte = gk_host_rand((int64_t)V * C, -1, 1, 61);
    int32_t *tgt = KC_ALLOC(int32_t, N);
    int count = 0;
    for (int r = 0; r < N; r++) {
        tgt[r] = r % 7 == 3 ? -100 : (int32_t)(((int64_t)r * 7919) % V);
        count += tgt[r] >= 0;
    }
    tgt[0] = 0, tgt[1] = V - 1;
    float *gf0 = gk_host_rand((int64_t)N * C, -1, 1, 62);
    float *ge0 = gk_host_rand((int64_t)V * C, -1, 1, 63);
    float *rf = KC_ALLOC(float, (int64_t)N *C), *re = KC_ALLOC(float, (int64_t)V *C);
    memcpy(rf, gf0, (size_t)N * C * 4), memcpy(re, ge0, (size_t)V * C * 4);
    float *sc = KC_ALLOC(float, CT_CE_SCRATCH(V, C));
    float loss = 0.0f;
    for (int rep = 0; rep < 2; rep++)
        ct_lm_ce_loss_cpu(&loss, rf, re, sc, feats, wte, tgt, N, C, V, (float)count);

    ct_cuda_ctx_t ctx;
    CT_ASSERT_OK(ct_cuda_ctx_init(&ctx, NULL, 0));
    float *dl = gk_alloc(float, 1), *df = gk_dup(float, gf0, (int64_t)N *C);
    float *de = gk_dup(float, ge0, (int64_t)V *C);
    float *dfe = gk_dup(float, feats, (int64_t)N *C), *dw = gk_dup(float, wte, (int64_t)V *C);
    int32_t *dt = gk_dup(int32_t, tgt, N);
    float *gsc = gk_alloc(float, CT_CE_CUDA_SCRATCH(N, V));
    for (int rep = 0; rep < 2; rep++)
        CT_ASSERT_OK(ct_lm_ce_loss_cuda(dl, df, de, gsc, dfe, dw, dt, N, C, V, (float)count, &ctx));
    float gl;
    float *got = KC_ALLOC(float, (int64_t)(N > V ? N : V) * C);
    gk_download(&gl, dl, 4);
    gk_check("lm ce loss", &gl, &loss, 1, 1e-7, 1e-5);
    gk_download(got, df, (size_t)N * C * 4);
    gk_check("lm ce dfeats x2", got, rf, (int64_t)N * C, 1e-6, 1e-4);
    gk_download(got, de, (size_t)V * C * 4);
    gk_check("lm ce dwte x2", got, re, (int64_t)V * C, 1e-6, 1e-4);
    /* a frozen head: dwte untouched (NULL); then the loss alone */
    gk_upload(df, gf0, (size_t)N * C * 4);
    CT_ASSERT_OK(ct_lm_ce_loss_cuda(dl, df, NULL, gsc, dfe, dw, dt, N, C, V, (float)count, &ctx));
    CT_ASSERT_OK(ct_lm_ce_loss_cuda(dl, NULL, NULL, gsc, dfe, dw, dt, N, C, V, (float)count, &ctx));
    gk_download(&gl, dl, 4);
    gk_check("lm ce loss, no gradients", &gl, &loss, 1, 1e-7, 1e-5);
    memcpy(rf, gf0, (size_t)N * C * 4);
    ct_lm_ce_loss_cpu(&loss, rf, NULL, sc, feats, wte, tgt, N, C, V, (float)count);
    gk_download(got, df, (size_t)N * C * 4);
    gk_check("lm ce dfeats, frozen head", got, rf, (int64_t)N * C, 1e-6, 1e-4);
    ct_cuda_ctx_close(&ctx);
    gk_free_all();
    free(feats), free(wte), free(tgt), free(gf0), free(ge0), free(rf), free(re), free(sc);
    free(got);
}

static void test_lm_ce(void)
{
    lce_case(50, 24, 301);
    /* a vocabulary so wide that a chunk is CT_CE_CUDA_ROWS' minimum of 32 rows: 3 chunks */
    lce_case(70, 8, 600000);
}

/* Grouped-query attention against the CPU twin, both implementations (cuBLAS products with row
 * kernels, and the row-wise baseline): probabilities, outputs and the packed gradient (two calls
 * onto random starting values). The sums run in other orders and expf stands for the
 * CPU's polynomial (both within 2 ulp): probabilities and outputs atol 1e-6, rtol 1e-5.
 * Gradients: dk and dv are sums over the group's heads and the later rows, up to 7 x 70 = 490
 * products of order 1 at Qwen2.5's shape, each sum rounding in its own order on either side
 * (490 x 6e-8 = 3e-5; measured 9e-6 on the emulator): atol 3e-5, rtol 1e-4. A wrong term is
 * off by 1e-2 or more. */
static void gqa_case(int B, int L, int NH, int KVH, int HD)
{
    printf("gqa B=%d L=%d NH=%d KVH=%d HD=%d\n", B, L, NH, KVH, HD);
    const int64_t W = (int64_t)(NH + 2 * KVH) * HD, n = (int64_t)B * L * W;
    const int64_t no = (int64_t)B * L * NH * HD, na = (int64_t)B * NH * L * L;
    const float scale = 1.0f / sqrtf((float)HD);
    float *qkv = gk_host_rand(n, -1.5f, 1.5f, 70), *dout = gk_host_rand(no, -1.0f, 1.0f, 71);
    float *g0 = gk_host_rand(n, -1.0f, 1.0f, 72);
    float *out = KC_ALLOC(float, no), *att = KC_ALLOC(float, na), *dq = KC_ALLOC(float, n);
    float *scr = KC_ALLOC(float, L), *got = KC_ALLOC(float, na > n ? na : n);
    ct_gqa_attention_forward_cpu(out, att, qkv, B, L, NH, KVH, HD, scale);
    memcpy(dq, g0, (size_t)n * sizeof *dq);
    for (int k = 0; k < 2; k++)
        ct_gqa_attention_backward_cpu(dq, scr, dout, att, qkv, B, L, NH, KVH, HD, scale);

    /* impl 0: cuBLAS products + row kernels (what the op table runs); 1: the row-wise baseline */
    ct_cuda_ctx_t ctx;
    CT_ASSERT_OK(ct_cuda_ctx_init(&ctx, NULL, 0));
    for (int impl = 0; impl < 2; impl++) {
        const char *what = impl == 0 ? "gqa" : "gqa rowwise";
        char name[64];
        float *d_qkv = gk_dup(float, qkv, n), *d_dout = gk_dup(float, dout, no);
        float *d_out = gk_alloc(float, no), *d_att = gk_alloc(float, na);
        float *d_g = gk_dup(float, g0, n);
        float *d_scr = gk_alloc(float, CT_GQA_BWD_CUDA_SCRATCH(B, NH, L));
        if (impl == 0)
            CT_ASSERT_OK(ct_gqa_attention_forward_cuda(d_out, d_att, d_qkv, B, L, NH, KVH, HD, scale,
                                                       &ctx));
        else
            CT_ASSERT_OK(ct_gqa_attention_forward_rowwise_cuda(d_out, d_att, d_qkv, B, L, NH, KVH,
                                                               HD, scale, NULL));
        gk_download(got, d_att, (size_t)na * sizeof(float));
        snprintf(name, sizeof name, "%s probabilities", what);
        gk_check(name, got, att, na, 1e-6, 1e-5);
        gk_download(got, d_out, (size_t)no * sizeof(float));
        snprintf(name, sizeof name, "%s out", what);
        gk_check(name, got, out, no, 1e-6, 1e-5);
        /* the backward from the CPU's probabilities: the gradient formulas on equal inputs */
        gk_upload(d_att, att, (size_t)na * sizeof(float));
        for (int k = 0; k < 2; k++) {
            if (impl == 0)
                CT_ASSERT_OK(ct_gqa_attention_backward_cuda(d_g, d_scr, d_dout, d_att, d_qkv, B, L,
                                                            NH, KVH, HD, scale, &ctx));
            else
                CT_ASSERT_OK(ct_gqa_attention_backward_rowwise_cuda(
                    d_g, d_scr, d_dout, d_att, d_qkv, B, L, NH, KVH, HD, scale, NULL));
        }
        gk_download(got, d_g, (size_t)n * sizeof(float));
        snprintf(name, sizeof name, "%s dqkv x2", what);
        gk_check(name, got, dq, n, 3e-5, 1e-4);
    }
    ct_cuda_ctx_close(&ctx);
    gk_free_all();
    free(qkv), free(dout), free(g0), free(out), free(att), free(dq), free(scr), free(got);
}

static void test_gqa_attention(void)
{
    gqa_case(2, 37, 4, 2, 16);
    gqa_case(1, 70, 14, 2, 64); /* Qwen2.5-0.5B's heads: 14 query, 2 key/value, width 64 */
    gqa_case(2, 33, 3, 3, 5);   /* GPT-2's shape (KVH = NH), an odd width */
}

/* The token embedding: forward bit for bit; backward with scratch (sorted rows) bit for bit,
 * with NULL scratch (float atomics, rows in any order) within 1e-6 + 1e-6 relative; a skipped
 * padding id; GPT-2's positions. 3000 rows over 50 ids: long runs per id. */
static void test_lm_embed(void)
{
    enum { N = 3000, C = 40, V = 50, P = 1024 };
    float *wte = gk_host_rand(V * C, -1, 1, 150), *wpe = gk_host_rand(P * C, -1, 1, 151);
    float *dout = gk_host_rand((int64_t)N * C, -1, 1, 152);
    float *g0 = gk_host_rand(V * C, -1, 1, 153), *p0 = gk_host_rand(P * C, -1, 1, 154);
    int32_t *ids = KC_ALLOC(int32_t, N), *pos = KC_ALLOC(int32_t, N);
    for (int r = 0; r < N; r++)
        ids[r] = (int32_t)((r * 7919) % V), pos[r] = r % P;
    float *ref = KC_ALLOC(float, (int64_t)N *C), *got = KC_ALLOC(float, (int64_t)N *C);
    float *rte = KC_ALLOC(float, V *C), *rpe = KC_ALLOC(float, P *C);
    ct_lm_embed_forward_cpu(ref, wte, wpe, ids, pos, N, C);
    memcpy(rte, g0, V * C * sizeof(float));
    memcpy(rpe, p0, P * C * sizeof(float));
    ct_lm_embed_backward_cpu(rte, rpe, dout, ids, pos, N, C, 7);

    float *d_wte = gk_dup(float, wte, V *C), *d_wpe = gk_dup(float, wpe, P *C);
    float *d_dout = gk_dup(float, dout, (int64_t)N *C), *d_out = gk_alloc(float, (int64_t)N *C);
    int32_t *d_ids = gk_dup(int32_t, ids, N), *d_pos = gk_dup(int32_t, pos, N);
    float *d_g = gk_dup(float, g0, V *C), *d_p = gk_dup(float, p0, P *C);
    size_t bytes = 0;
    CT_ASSERT_OK(ct_embed_backward_cuda_scratch(&bytes, 1, N));
    void *d_scr = gk_alloc_bytes(bytes);
    CT_ASSERT_OK(ct_lm_embed_forward_cuda(d_out, d_wte, d_wpe, d_ids, d_pos, N, C, NULL));
    gk_download(got, d_out, (size_t)N * C * sizeof(float));
    GK_ASSERT_BITEQ("embed forward", got, ref, (int64_t)N * C);
    CT_ASSERT_OK(ct_lm_embed_backward_cuda(d_g, d_p, d_scr, d_dout, d_ids, d_pos, N, C, 7, NULL));
    gk_download(got, d_g, V * C * sizeof(float));
    GK_ASSERT_BITEQ("embed dwte, sorted", got, rte, V * C);
    gk_download(got, d_p, P * C * sizeof(float));
    GK_ASSERT_BITEQ("embed dwpe, sorted", got, rpe, P * C);
    gk_upload(d_g, g0, V * C * sizeof(float));
    CT_ASSERT_OK(ct_lm_embed_backward_cuda(d_g, NULL, NULL, d_dout, d_ids, d_pos, N, C, 7, NULL));
    gk_download(got, d_g, V * C * sizeof(float));
    gk_check("embed dwte, atomics", got, rte, V * C, 1e-5, 1e-5);
    gk_free_all();
    free(wte), free(wpe), free(dout), free(g0), free(p0), free(ids), free(pos), free(ref);
    free(got), free(rte), free(rpe);
}

/* ---- through the op tables ---------------------------------------------------------------------
 * Every language-model entry of ct_ops_t, called on the CPU table and on the CUDA table with the
 * same inputs: what a model will call. The entries only pass their arguments on, so the results
 * are those of the functions above; a swapped argument shows as a gross difference. */

static float *lt_up(ct_ops_t *o, const void *host, size_t nbytes)
{
    void *p = NULL;
    CT_ASSERT_OK(o->alloc(o, &p, nbytes ? nbytes : 4));
    o->copy(o, p, host, nbytes, CT_COPY_H2D);
    return (float *)p;
}

static void lt_cmp(const char *what, ct_ops_t *gpu, const float *dev, const float *ref, int64_t n,
                   double atol, double rtol)
{
    float *got = KC_ALLOC(float, n);
    gpu->copy(gpu, got, dev, (size_t)n * sizeof(float), CT_COPY_D2H);
    CT_ASSERT_OK(gpu->sync(gpu));
    gk_check(what, got, ref, n, atol, rtol);
    free(got);
}

static void lt_cmp_bits(const char *what, ct_ops_t *gpu, const float *dev, const float *ref,
                        int64_t n)
{
    float *got = KC_ALLOC(float, n);
    gpu->copy(gpu, got, dev, (size_t)n * sizeof(float), CT_COPY_D2H);
    CT_ASSERT_OK(gpu->sync(gpu));
    GK_ASSERT_BITEQ(what, got, ref, n);
    free(got);
}

static void test_tables(void)
{
    enum { B = 2, L = 9, NH = 4, KVH = 2, HD = 8, C = 32, V = 40, P = 64 };
    const int N = B * L;
    const int64_t W = (int64_t)(NH + 2 * KVH) * HD, nq = (int64_t)N * W, no = (int64_t)N * NH * HD;
    const int64_t na = (int64_t)B * NH * L * L, nc = (int64_t)N * C;
    ct_ops_t cpu, gpu;
    ct_ops_cpu_init(&cpu);
    CT_ASSERT_OK(ct_ops_cuda_init(&gpu, 0, false));
    float *x = gk_host_rand(nc, -2, 2, 80), *w = gk_host_rand(C, 0.5f, 1.5f, 81);
    float *d = gk_host_rand(nc, -1, 1, 82), *u = gk_host_rand(nc, -1, 1, 83);
    float *qkv = gk_host_rand(nq, -1, 1, 84), *dq = gk_host_rand(no, -1, 1, 85);
    float *wte = gk_host_rand((int64_t)V * C, -1, 1, 86),
          *wpe = gk_host_rand((int64_t)P * C, -1, 1, 87);
    float *cs = KC_ALLOC(float, P *HD / 2), *sn = KC_ALLOC(float, P *HD / 2);
    ct_rope_table_cpu(cs, sn, P, HD, 10000.0f);
    int32_t ids[B * L], pos[B * L], tgt[B * L];
    for (int r = 0; r < N; r++)
        ids[r] = (r * 7) % V, pos[r] = r % L, tgt[r] = r % 5 == 2 ? -100 : (r * 11) % V;
    /* CPU results in host buffers; GPU buffers start as copies of the same values */
    float *r1 = KC_ALLOC(float, nq > na ? nq : na), *r2 = KC_ALLOC(float, nc);
    float *r3 = KC_ALLOC(float, (int64_t)V *C), *rs = KC_ALLOC(float, N);
    float *g_x = lt_up(&gpu, x, nc * 4), *g_w = lt_up(&gpu, w, C * 4),
          *g_d = lt_up(&gpu, d, nc * 4);
    float *g_u = lt_up(&gpu, u, nc * 4), *g_o = lt_up(&gpu, d, nc * 4),
          *g_o2 = lt_up(&gpu, u, nc * 4);
    float *g_rs = lt_up(&gpu, rs, N * 4), *g_dw = lt_up(&gpu, w, C * 4);

    printf("rmsnorm\n");
    cpu.rmsnorm_forward(&cpu, r2, rs, x, w, N, C, 1e-6f);
    gpu.rmsnorm_forward(&gpu, g_o, g_rs, g_x, g_w, N, C, 1e-6f);
    lt_cmp("table rmsnorm out", &gpu, g_o, r2, nc, 1e-6, 1e-6);
    memcpy(r2, u, nc * 4);
    float dwc[C];
    memcpy(dwc, w, sizeof dwc);
    gpu.copy(&gpu, g_rs, rs, N * 4, CT_COPY_H2D);
    cpu.rmsnorm_backward(&cpu, r2, dwc, d, x, w, rs, N, C);
    gpu.rmsnorm_backward(&gpu, g_o2, g_dw, g_d, g_x, g_w, g_rs, N, C);
    lt_cmp("table rmsnorm dinp", &gpu, g_o2, r2, nc, 1e-6, 1e-6);
    lt_cmp("table rmsnorm dweight", &gpu, g_dw, dwc, C, 1e-5, 1e-5);

    printf("gelu, swiglu\n");
    cpu.gelu_forward(&cpu, r2, x, nc, CT_GELU_TANH);
    gpu.gelu_forward(&gpu, g_o, g_x, nc, CT_GELU_TANH);
    lt_cmp("table gelu", &gpu, g_o, r2, nc, 2e-6, 2e-6);
    memcpy(r2, u, nc * 4);
    gpu.copy(&gpu, g_o2, u, nc * 4, CT_COPY_H2D);
    cpu.gelu_backward(&cpu, r2, d, x, nc, CT_GELU_ERF);
    gpu.gelu_backward(&gpu, g_o2, g_d, g_x, nc, CT_GELU_ERF);
    lt_cmp("table gelu backward", &gpu, g_o2, r2, nc, 2e-6, 2e-6);
    cpu.swiglu_forward(&cpu, r2, x, u, nc);
    gpu.swiglu_forward(&gpu, g_o, g_x, g_u, nc);
    lt_cmp("table swiglu", &gpu, g_o, r2, nc, 2e-6, 2e-6);
    float *r2b = KC_ALLOC(float, nc);
    memcpy(r2, d, nc * 4), memcpy(r2b, u, nc * 4);
    gpu.copy(&gpu, g_o, d, nc * 4, CT_COPY_H2D);
    gpu.copy(&gpu, g_o2, u, nc * 4, CT_COPY_H2D);
    cpu.swiglu_backward(&cpu, r2, r2b, x, x, u, nc);
    gpu.swiglu_backward(&gpu, g_o, g_o2, g_x, g_x, g_u, nc);
    lt_cmp("table swiglu dgate", &gpu, g_o, r2, nc, 2e-6, 2e-6);
    lt_cmp("table swiglu dup", &gpu, g_o2, r2b, nc, 2e-6, 2e-6);

    printf("rope, attention\n");
    float *g_cs = lt_up(&gpu, cs, P * HD / 2 * 4), *g_sn = lt_up(&gpu, sn, P * HD / 2 * 4);
    int32_t *g_pos = (int32_t *)lt_up(&gpu, pos, sizeof pos),
            *g_ids = (int32_t *)lt_up(&gpu, ids, sizeof ids);
    int32_t *g_tgt = (int32_t *)lt_up(&gpu, tgt, sizeof tgt);
    float *g_q = lt_up(&gpu, qkv, nq * 4), *g_qo = lt_up(&gpu, qkv, nq * 4);
    cpu.rope_forward(&cpu, r1, qkv, cs, sn, pos, N, (int)(W / HD), HD);
    gpu.rope_forward(&gpu, g_qo, g_q, g_cs, g_sn, g_pos, N, (int)(W / HD), HD);
    lt_cmp_bits("table rope", &gpu, g_qo, r1, nq);
    memcpy(r1, qkv, nq * 4);
    gpu.copy(&gpu, g_qo, qkv, nq * 4, CT_COPY_H2D);
    cpu.rope_backward(&cpu, r1, qkv, cs, sn, pos, N, (int)(W / HD), HD);
    gpu.rope_backward(&gpu, g_qo, g_q, g_cs, g_sn, g_pos, N, (int)(W / HD), HD);
    lt_cmp_bits("table rope backward", &gpu, g_qo, r1, nq);
    float *att = KC_ALLOC(float, na), *out = KC_ALLOC(float, no);
    float *g_att = lt_up(&gpu, r1, na * 4), *g_out = lt_up(&gpu, dq, no * 4);
    cpu.gqa_attention_forward(&cpu, out, att, qkv, B, L, NH, KVH, HD, 0.3f);
    gpu.gqa_attention_forward(&gpu, g_out, g_att, g_q, B, L, NH, KVH, HD, 0.3f);
    lt_cmp("table gqa out", &gpu, g_out, out, no, 1e-6, 1e-5);
    float *csc = KC_ALLOC(float, cpu.scratch(&cpu, CT_SCRATCH_GQA_BWD, B, NH, L, N));
    float *g_sc = lt_up(&gpu, csc, gpu.scratch(&gpu, CT_SCRATCH_GQA_BWD, B, NH, L, N) * 4);
    float *g_dq = lt_up(&gpu, dq, no * 4);
    gpu.copy(&gpu, g_att, att, na * 4, CT_COPY_H2D);
    memcpy(r1, qkv, nq * 4);
    gpu.copy(&gpu, g_qo, qkv, nq * 4, CT_COPY_H2D);
    cpu.gqa_attention_backward(&cpu, r1, csc, dq, att, qkv, B, L, NH, KVH, HD, 0.3f);
    gpu.gqa_attention_backward(&gpu, g_qo, g_sc, g_dq, g_att, g_q, B, L, NH, KVH, HD, 0.3f);
    lt_cmp("table gqa dqkv", &gpu, g_qo, r1, nq, 3e-5, 1e-4);

    printf("embedding, loss\n");
    float *g_wte = lt_up(&gpu, wte, V * C * 4), *g_wpe = lt_up(&gpu, wpe, P * C * 4);
    cpu.lm_embed_forward(&cpu, r2, wte, wpe, ids, pos, N, C);
    gpu.lm_embed_forward(&gpu, g_o, g_wte, g_wpe, g_ids, g_pos, N, C);
    lt_cmp_bits("table embed", &gpu, g_o, r2, nc);
    memcpy(r3, wte, V * C * 4);
    float *g_dte = lt_up(&gpu, wte, V * C * 4);
    cpu.lm_embed_backward(&cpu, r3, NULL, d, ids, pos, N, C, 3);
    gpu.lm_embed_backward(&gpu, g_dte, NULL, g_d, g_ids, g_pos, N, C, 3);
    lt_cmp_bits("table embed backward", &gpu, g_dte, r3, V * C);
    float loss = NAN, *lsc = KC_ALLOC(float, cpu.scratch(&cpu, CT_SCRATCH_CE, V, C, 0, N));
    float *g_lsc = lt_up(&gpu, lsc, gpu.scratch(&gpu, CT_SCRATCH_CE, V, C, 0, N) * 4);
    float *g_loss = lt_up(&gpu, &loss, 4);
    memcpy(r2, u, nc * 4);
    gpu.copy(&gpu, g_o2, u, nc * 4, CT_COPY_H2D);
    cpu.lm_ce_loss(&cpu, &loss, r2, NULL, lsc, x, wte, tgt, N, C, V, 14.0f);
    gpu.lm_ce_loss(&gpu, g_loss, g_o2, NULL, g_lsc, g_x, g_wte, g_tgt, N, C, V, 14.0f);
    lt_cmp("table lm ce loss", &gpu, g_loss, &loss, 1, 1e-7, 1e-5);
    lt_cmp("table lm ce dfeats", &gpu, g_o2, r2, nc, 1e-6, 1e-4);

    printf("conv1d (weight (IC,OC)), frozen linear\n");
    enum { OC = 24 }; /* weight: the first C*OC of wte, bias: the first OC of wpe, dout: u */
    float *co = KC_ALLOC(float, N *OC), *cdb = KC_ALLOC(float, OC);
    cpu.conv1d_forward(&cpu, co, x, wte, wpe, N, C, OC);
    float *g_co = lt_up(&gpu, co, (size_t)N * OC * 4);
    gpu.conv1d_forward(&gpu, g_co, g_x, g_wte, g_wpe, N, C, OC);
    lt_cmp("table conv1d", &gpu, g_co, co, (int64_t)N * OC, 1e-5, 1e-5);
    memcpy(r2, d, nc * 4), memcpy(r3, wte, V * C * 4), memcpy(cdb, wpe, OC * 4);
    gpu.copy(&gpu, g_o, d, nc * 4, CT_COPY_H2D);
    gpu.copy(&gpu, g_dte, wte, V * C * 4, CT_COPY_H2D);
    float *g_db = lt_up(&gpu, wpe, OC * 4);
    cpu.conv1d_backward(&cpu, r2, r3, cdb, u, x, wte, N, C, OC);
    gpu.conv1d_backward(&gpu, g_o, g_dte, g_db, g_u, g_x, g_wte, N, C, OC);
    lt_cmp("table conv1d dinp", &gpu, g_o, r2, nc, 1e-5, 1e-5);
    lt_cmp("table conv1d dweight", &gpu, g_dte, r3, (int64_t)C * OC, 1e-5, 1e-5);
    lt_cmp("table conv1d dbias", &gpu, g_db, cdb, OC, 1e-5, 1e-5);
    /* dweight NULL (a frozen weight): dinp only, of the (OC,C) linear */
    cpu.linear_backward(&cpu, r2, NULL, NULL, u, x, wte, N, C, OC);
    gpu.linear_backward(&gpu, g_o, NULL, NULL, g_u, g_x, g_wte, N, C, OC);
    lt_cmp("table linear dinp, frozen weight", &gpu, g_o, r2, nc, 1e-5, 1e-5);

    CT_ASSERT_OK(ct_ops_status(&gpu));
    ct_ops_close(&gpu);
    free(x), free(w), free(d), free(u), free(qkv), free(dq), free(wte), free(wpe), free(cs);
    free(sn), free(r1), free(r2), free(r3), free(rs), free(r2b), free(att), free(out), free(csc);
    free(lsc), free(co), free(cdb);
}

static void test_bad_shapes(void)
{
    CT_ASSERT_ERR(ct_rmsnorm_forward_cuda(NULL, NULL, NULL, NULL, 1, 0, LM_EPS, NULL),
                  CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_rope_forward_cuda(NULL, NULL, NULL, NULL, NULL, 1, 1, 7, NULL),
                  CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_gelu_forward_cuda(NULL, NULL, 1, (ct_gelu_kind_t)9, NULL), CT_ERANGE_VALUE);
    CT_ASSERT_OK(ct_swiglu_forward_cuda(NULL, NULL, NULL, 0, NULL));
    ct_cuda_ctx_t ctx;
    CT_ASSERT_OK(ct_cuda_ctx_init(&ctx, NULL, 0));
    CT_ASSERT_ERR(ct_gqa_attention_forward_cuda(NULL, NULL, NULL, 1, 4, 6, 4, 8, 1.0f, &ctx),
                  CT_ERANGE_VALUE); /* 6 query heads cannot share 4 key heads */
    CT_ASSERT_ERR(ct_gqa_attention_forward_cuda(NULL, NULL, NULL, 1, 4, 4, 4, 8, 1.0f, NULL),
                  CT_ERANGE_VALUE); /* the products need a context */
    CT_ASSERT_ERR(
        ct_gqa_attention_forward_rowwise_cuda(NULL, NULL, NULL, 1, 4, 6, 4, 8, 1.0f, NULL),
        CT_ERANGE_VALUE);
    ct_cuda_ctx_close(&ctx);
}

/* The CUDA table counts its device memory: the workspace and scratch from the start, each
 * alloc until its release, the peak kept. */
static void test_table_memory(void)
{
    ct_ops_t gpu;
    CT_ASSERT_OK(ct_ops_cuda_init(&gpu, 0, false));
    const size_t base = gpu.mem_live;
    CT_ASSERT(base >= CT_CUDA_CTX_WORKSPACE_NBYTES);
    CT_ASSERT(gpu.mem_peak == base);
    void *a = NULL, *b = NULL;
    CT_ASSERT_OK(gpu.alloc(&gpu, &a, 1 << 20));
    CT_ASSERT_OK(gpu.alloc(&gpu, &b, 3 << 20));
    CT_ASSERT(gpu.mem_live == base + (4 << 20));
    gpu.release(&gpu, a);
    CT_ASSERT(gpu.mem_live == base + (3 << 20));
    CT_ASSERT(gpu.mem_peak == base + (4 << 20));
    gpu.release(&gpu, b);
    gpu.release(&gpu, NULL);
    CT_ASSERT(gpu.mem_live == base);
    CT_ASSERT(gpu.mem_peak == base + (4 << 20));
    gpu.close(&gpu);
}

int main(void)
{
    gk_require_gpu();
    CT_RUN(test_rmsnorm);
    CT_RUN(test_gelu_swiglu);
    CT_RUN(test_rope);
    CT_RUN(test_lm_ce);
    CT_RUN(test_gqa_attention);
    CT_RUN(test_lm_embed);
    CT_RUN(test_tables);
    CT_RUN(test_table_memory);
    CT_RUN(test_bad_shapes);
    return 0;
}
