/*
 * test_encoder_gpu.c (gpu suite) - the temporal encoder's CUDA ops (kernels/cuda/encoder.cu)
 * against their CPU twins (kernels/cpu/encoder.c): the bidirectional attention with and without
 * dropout on the probabilities (the kernels draw the CPU's Philox numbers themselves), the
 * projector's attention of K learned queries, the mask token and the masked squared error.
 * Forward outputs start poisoned (every element must be written); backward gradients start from
 * random values and are taken twice (the += contract). Shapes: sequences shorter and longer
 * than a warp (5, 37), head widths below and above a warp (4, 8, 64), one to three heads.
 *
 * Tolerances. The mask token and dpred are one float operation per element, and the token's
 * gradient adds the masked rows in the CPU's order: bit for bit. The squared error's loss sums
 * rows of doubles in another order: relative 1e-6 (a float's rounding). The attentions compute
 * each score with the CPU's order and rounding; only the softmax's max and sum and the
 * backward's row dot are warp sums and expf is the device's, so a probability differs by a few
 * float ulps (atol 1e-6, rtol 1e-5), an output, a sum of <= 40 probability-weighted values of
 * size <= 1.5, by a few 1e-7 (atol 1e-5, rtol 1e-4), and a gradient, which adds the row dot's
 * rounding times a probability to each dS before summing <= 40 of them times values of order 1,
 * by a few 1e-6 (atol 3e-5, rtol 2e-4). A wrong index, scale, dropout element or lost row moves
 * values by 1e-3 or more.
 */
#include "gcheck.h"

static void check_enc_attention(int B, int L, int C, int NH, float p)
{
    printf("enc attention B=%d L=%d C=%d NH=%d p=%g\n", B, L, C, NH, (double)p);
    const int64_t nqkv = (int64_t)B * L * 3 * C, nout = (int64_t)B * L * C;
    const int64_t natt = (int64_t)B * NH * L * L;
    ct_dropout_t drop = {p, 2026, 7 + (uint64_t)L, 5 * (uint64_t)C};
    float *qkv = gk_host_rand(nqkv, -1.5f, 1.5f, 11), *dout = gk_host_rand(nout, -1.0f, 1.0f, 12);
    float *dqkv0 = gk_host_rand(nqkv, -1.0f, 1.0f, 13);
    float *out = KC_ALLOC(float, nout), *att = KC_ALLOC(float, natt);
    float *dqkv = KC_ALLOC(float, nqkv), *got = KC_ALLOC(float, natt + nqkv);
    float *scr = KC_ALLOC(float, CT_ENC_ATTENTION_BWD_SCRATCH(L, C, NH));
    ct_enc_attention_forward_cpu(out, att, scr, qkv, B, L, C, NH, drop);
    memcpy(dqkv, dqkv0, sizeof(float) * nqkv);
    ct_enc_attention_backward_cpu(dqkv, scr, dout, att, qkv, B, L, C, NH, drop);
    ct_enc_attention_backward_cpu(dqkv, scr, dout, att, qkv, B, L, C, NH, drop);

    float *d_qkv = gk_dup(float, qkv, nqkv), *d_out = gk_alloc(float, nout);
    float *d_att = gk_alloc(float, natt), *d_dout = gk_dup(float, dout, nout);
    float *d_dqkv = gk_dup(float, dqkv0, nqkv);
    float *d_scr = gk_alloc(float, CT_ENC_ATTENTION_BWD_CUDA_SCRATCH(B, L, NH));
    CT_ASSERT_OK(ct_enc_attention_forward_cuda(d_out, d_att, d_qkv, B, L, C, NH, drop, NULL));
    gk_download(got, d_att, sizeof(float) * natt);
    gk_check("att (probabilities)", got, att, natt, 1e-6, 1e-5);
    gk_download(got, d_out, sizeof(float) * nout);
    gk_check("out", got, out, nout, 1e-5, 1e-4);
    /* the backward from the CPU's probabilities, so that only its own sums differ */
    gk_upload(d_att, att, sizeof(float) * natt);
    CT_ASSERT_OK(ct_enc_attention_backward_cuda(d_dqkv, d_scr, d_dout, d_att, d_qkv, B, L, C, NH,
                                                drop, NULL));
    gk_poison(d_scr, sizeof(float) * CT_ENC_ATTENTION_BWD_CUDA_SCRATCH(B, L, NH));
    CT_ASSERT_OK(ct_enc_attention_backward_cuda(d_dqkv, d_scr, d_dout, d_att, d_qkv, B, L, C, NH,
                                                drop, NULL));
    gk_download(got, d_dqkv, sizeof(float) * nqkv);
    gk_check("dqkv x2", got, dqkv, nqkv, 3e-5, 2e-4);
    gk_free_all();
    free(qkv), free(dout), free(dqkv0), free(out), free(att), free(dqkv), free(got), free(scr);
}

static void test_enc_attention(void)
{
    check_enc_attention(2, 5, 8, 2, 0.0f);
    check_enc_attention(2, 5, 8, 2, 0.3f);
    check_enc_attention(3, 37, 24, 3, 0.1f);
    check_enc_attention(1, 16, 64, 1, 0.2f);
}

/* Dropout must use the CPU's element indices: the same call with another offset gives other
 * outputs (so the check above could see a wrong index), and p = 0 draws nothing. */
static void test_enc_attention_dropout_differs(void)
{
    const int B = 2, L = 9, C = 8, NH = 2;
    const int64_t nqkv = (int64_t)B * L * 3 * C, nout = (int64_t)B * L * C;
    float *qkv = gk_host_rand(nqkv, -1.5f, 1.5f, 21);
    float *a = KC_ALLOC(float, nout), *b = KC_ALLOC(float, nout);
    float *d_qkv = gk_dup(float, qkv, nqkv), *d_out = gk_alloc(float, nout);
    float *d_att = gk_alloc(float, (int64_t)B *NH *L *L);
    ct_dropout_t d0 = {0.5f, 1, 2, 0}, d1 = {0.5f, 1, 2, 1};
    CT_ASSERT_OK(ct_enc_attention_forward_cuda(d_out, d_att, d_qkv, B, L, C, NH, d0, NULL));
    gk_download(a, d_out, sizeof(float) * nout);
    CT_ASSERT_OK(ct_enc_attention_forward_cuda(d_out, d_att, d_qkv, B, L, C, NH, d1, NULL));
    gk_download(b, d_out, sizeof(float) * nout);
    int differ = 0;
    for (int64_t i = 0; i < nout; i++)
        differ += a[i] != b[i];
    CT_ASSERT_MSG(differ > nout / 4, "offset 0 and 1 gave %d of %lld outputs different", differ,
                  (long long)nout);
    gk_free_all();
    free(qkv), free(a), free(b);
}

static void check_query_attention(int B, int K, int L, int C, int NH)
{
    printf("query attention B=%d K=%d L=%d C=%d NH=%d\n", B, K, L, C, NH);
    const int64_t nq = (int64_t)K * C, nkv = (int64_t)B * L * C, nout = (int64_t)B * K * C;
    const int64_t natt = (int64_t)B * NH * K * L;
    float *q = gk_host_rand(nq, -1.5f, 1.5f, 31), *k = gk_host_rand(nkv, -1.5f, 1.5f, 32);
    float *v = gk_host_rand(nkv, -1.5f, 1.5f, 33), *dout = gk_host_rand(nout, -1.0f, 1.0f, 34);
    float *dq0 = gk_host_rand(nq, -1.0f, 1.0f, 35), *dk0 = gk_host_rand(nkv, -1.0f, 1.0f, 36);
    float *dv0 = gk_host_rand(nkv, -1.0f, 1.0f, 37);
    float *out = KC_ALLOC(float, nout), *att = KC_ALLOC(float, natt);
    float *dq = KC_ALLOC(float, nq), *dk = KC_ALLOC(float, nkv), *dv = KC_ALLOC(float, nkv);
    float *got = KC_ALLOC(float, natt + nkv + nout);
    ct_query_attention_forward_cpu(out, att, q, k, v, B, K, L, C, NH);
    memcpy(dq, dq0, sizeof(float) * nq);
    memcpy(dk, dk0, sizeof(float) * nkv);
    memcpy(dv, dv0, sizeof(float) * nkv);
    for (int rep = 0; rep < 2; rep++)
        ct_query_attention_backward_cpu(dq, dk, dv, dout, att, q, k, v, B, K, L, C, NH);

    float *d_q = gk_dup(float, q, nq), *d_k = gk_dup(float, k, nkv), *d_v = gk_dup(float, v, nkv);
    float *d_out = gk_alloc(float, nout), *d_att = gk_alloc(float, natt);
    float *d_dout = gk_dup(float, dout, nout), *d_dq = gk_dup(float, dq0, nq);
    float *d_dk = gk_dup(float, dk0, nkv), *d_dv = gk_dup(float, dv0, nkv);
    float *d_scr = gk_alloc(float, CT_QUERY_ATTENTION_BWD_CUDA_SCRATCH(B, K, L, NH));
    CT_ASSERT_OK(
        ct_query_attention_forward_cuda(d_out, d_att, d_q, d_k, d_v, B, K, L, C, NH, NULL));
    gk_download(got, d_att, sizeof(float) * natt);
    gk_check("att (probabilities)", got, att, natt, 1e-6, 1e-5);
    gk_download(got, d_out, sizeof(float) * nout);
    gk_check("out", got, out, nout, 1e-5, 1e-4);
    gk_upload(d_att, att, sizeof(float) * natt);
    for (int rep = 0; rep < 2; rep++) {
        gk_poison(d_scr, sizeof(float) * CT_QUERY_ATTENTION_BWD_CUDA_SCRATCH(B, K, L, NH));
        CT_ASSERT_OK(ct_query_attention_backward_cuda(d_dq, d_dk, d_dv, d_scr, d_dout, d_att, d_q,
                                                      d_k, d_v, B, K, L, C, NH, NULL));
    }
    gk_download(got, d_dq, sizeof(float) * nq);
    gk_check("dq x2", got, dq, nq, 3e-5, 2e-4);
    gk_download(got, d_dk, sizeof(float) * nkv);
    gk_check("dk x2", got, dk, nkv, 3e-5, 2e-4);
    gk_download(got, d_dv, sizeof(float) * nkv);
    gk_check("dv x2", got, dv, nkv, 3e-5, 2e-4);
    gk_free_all();
    free(q), free(k), free(v), free(dout), free(dq0), free(dk0), free(dv0), free(out), free(att);
    free(dq), free(dk), free(dv), free(got);
}

static void test_query_attention(void)
{
    check_query_attention(2, 3, 5, 8, 2);
    check_query_attention(3, 4, 40, 24, 3);
    check_query_attention(1, 2, 16, 64, 1);
}

static void test_mask_token_and_mse(void)
{
    const int N = 301, C = 40, P = 33;
    int32_t *mask = KC_ALLOC(int32_t, N);
    for (int r = 0; r < N; r++)
        mask[r] = (r * 7 + 3) % 5 < 2; /* 40% masked, not periodic in the warp */
    float *inp = gk_host_rand((int64_t)N * C, -1.0f, 1.0f, 41);
    float *tok = gk_host_rand(C, -1.0f, 1.0f, 42), *dout = gk_host_rand((int64_t)N * C, -1, 1, 43);
    float *dinp0 = gk_host_rand((int64_t)N * C, -1.0f, 1.0f, 44);
    float *dtok0 = gk_host_rand(C, -1.0f, 1.0f, 45);
    float *ref = KC_ALLOC(float, (int64_t)N *C), *got = KC_ALLOC(float, (int64_t)N *C);
    float *dtok = KC_ALLOC(float, C);
    int32_t *d_mask = gk_dup(int32_t, mask, N);
    float *d_inp = gk_dup(float, inp, (int64_t)N *C), *d_tok = gk_dup(float, tok, C);
    float *d_out = gk_alloc(float, (int64_t)N *C);
    ct_mask_token_forward_cpu(ref, inp, tok, mask, N, C);
    CT_ASSERT_OK(ct_mask_token_forward_cuda(d_out, d_inp, d_tok, d_mask, N, C, NULL));
    gk_download(got, d_out, sizeof(float) * N * C);
    GK_ASSERT_BITEQ("mask token forward", got, ref, (int64_t)N * C);

    memcpy(ref, dinp0, sizeof(float) * N * C);
    memcpy(dtok, dtok0, sizeof(float) * C);
    float *d_dout = gk_dup(float, dout, (int64_t)N *C), *d_dinp = gk_dup(float, dinp0, N *C);
    float *d_dtok = gk_dup(float, dtok0, C);
    for (int rep = 0; rep < 2; rep++) {
        ct_mask_token_backward_cpu(ref, dtok, dout, mask, N, C);
        CT_ASSERT_OK(ct_mask_token_backward_cuda(d_dinp, d_dtok, d_dout, d_mask, N, C, NULL));
    }
    gk_download(got, d_dinp, sizeof(float) * N * C);
    GK_ASSERT_BITEQ("mask token dinp x2", got, ref, (int64_t)N * C);
    gk_download(got, d_dtok, sizeof(float) * C);
    GK_ASSERT_BITEQ("mask token dtoken x2", got, dtok, C);

    /* the masked squared error over (N, P) */
    float *pred = gk_host_rand((int64_t)N * P, -1.0f, 1.0f, 46);
    float *tgt = gk_host_rand((int64_t)N * P, -1.0f, 1.0f, 47);
    float loss = 0.0f, gloss = 0.0f;
    const float count = 1234.0f;
    ct_masked_mse_cpu(&loss, ref, pred, tgt, mask, N, P, count);
    float *d_pred = gk_dup(float, pred, (int64_t)N *P), *d_tgt = gk_dup(float, tgt, N *P);
    float *d_dpred = gk_alloc(float, (int64_t)N *P), *d_loss = gk_alloc(float, 1);
    double *d_scr = gk_alloc(double, N);
    CT_ASSERT_OK(
        ct_masked_mse_cuda(d_loss, d_dpred, d_scr, d_pred, d_tgt, d_mask, N, P, count, NULL));
    gk_download(got, d_dpred, sizeof(float) * N * P);
    GK_ASSERT_BITEQ("masked mse dpred", got, ref, (int64_t)N * P);
    gk_download(&gloss, d_loss, sizeof gloss);
    CT_ASSERT_MSG(fabs((double)gloss - loss) <= 1e-6 * fabs((double)loss) && loss > 0.0f,
                  "masked mse loss %.9g, CPU %.9g", (double)gloss, (double)loss);
    /* without dpred: the loss alone */
    CT_ASSERT_OK(ct_masked_mse_cuda(d_loss, NULL, d_scr, d_pred, d_tgt, d_mask, N, P, count, NULL));
    gk_download(&gloss, d_loss, sizeof gloss);
    CT_ASSERT_MSG(fabs((double)gloss - loss) <= 1e-6 * fabs((double)loss),
                  "masked mse loss without dpred %.9g, CPU %.9g", (double)gloss, (double)loss);
    gk_free_all();
    free(mask), free(inp), free(tok), free(dout), free(dinp0), free(dtok0), free(ref), free(got);
    free(dtok), free(pred), free(tgt);
}

static void test_bad_args(void)
{
    ct_dropout_t none = {0.0f, 0, 0, 0}, all = {1.0f, 0, 0, 0};
    CT_ASSERT_ERR(ct_enc_attention_forward_cuda(NULL, NULL, NULL, 1,
                                                CT_ENC_ATTENTION_CUDA_MAX_L + 1, 8, 2, none, NULL),
                  CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_enc_attention_forward_cuda(NULL, NULL, NULL, 1, 4, 9, 2, none, NULL),
                  CT_ERANGE_VALUE);
    CT_ASSERT_ERR(
        ct_enc_attention_backward_cuda(NULL, NULL, NULL, NULL, NULL, 1, 4, 8, 2, all, NULL),
        CT_ERANGE_VALUE);
    CT_ASSERT_ERR(
        ct_query_attention_forward_cuda(NULL, NULL, NULL, NULL, NULL, 1, 0, 4, 8, 2, NULL),
        CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_mask_token_forward_cuda(NULL, NULL, NULL, NULL, -1, 8, NULL), CT_ERANGE_VALUE);
    CT_ASSERT_OK(ct_enc_attention_forward_cuda(NULL, NULL, NULL, 0, 4, 8, 2, none, NULL));
}

int main(void)
{
    gk_require_gpu();
    CT_RUN(test_enc_attention);
    CT_RUN(test_enc_attention_dropout_differs);
    CT_RUN(test_query_attention);
    CT_RUN(test_mask_token_and_mse);
    CT_RUN(test_bad_args);
    return 0;
}
