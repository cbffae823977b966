/*
 * test_embed_gpu.c (gpu suite) - the embedding gather and its backward on the GPU against the
 * CPU twins (kernels/cpu/embed.c), both positional-id rules and no positional table.
 *
 * Bit for bit where the GPU does the CPU's arithmetic in the CPU's order: the forward (one
 * multiply and one add per element), the positional gradient (one owner per row, sequences in
 * order), and the item-table gradient with scratch (rows sorted by item, stable, added in
 * (b, t) order). The atomic item-table gradient (no scratch) adds rows that share an item in
 * whatever order the hardware takes: each element is a sum of at most k = 40 terms of size
 * <= sqrt(50) = 7.1 (random in [-1,1) times the scale), whose different rounding order moves it
 * by about sqrt(k) * 6e-8 * (partial sums of ~20) = 1e-5 typically; atol = 1e-4, rtol = 1e-5
 * leave a 10x margin, while a lost or doubled row moves an element by order 1.
 *
 * Gradients start from random values and get two backward calls (the += contract), compared
 * with the CPU after two calls. The padding rows (item 0; positional row 0 with padded ids) get
 * nothing: they stay at their initial value.
 */
#include "gcheck.h"

enum { V = 9 }; /* few items, so most items have many rows and the sorted runs are long */

static void make_seq(int32_t *seq, int B, int L, uint64_t stream)
{
    float *u = gk_host_rand((int64_t)B * L, 0.0f, 1.0f, stream);
    for (int b = 0; b < B; b++) {
        int pad = (int)(u[b * L] * (float)L) / 2; /* left padding of up to half the row */
        for (int t = 0; t < L; t++)
            seq[b * L + t] = t < pad ? 0 : 1 + (int32_t)(u[b * L + t] * (V - 1));
    }
    free(u);
}

static void check_case(int B, int L, int C, ct_pos_mode_t mode, int with_wpe)
{
    printf("case B=%d L=%d C=%d %s%s\n", B, L, C, mode == CT_POS_PADDED ? "padded" : "absolute",
           with_wpe ? "" : ", no positional table");
    const int P = mode == CT_POS_PADDED ? L + 1 : L, N = B * L;
    const float scale = sqrtf((float)C);
    int32_t *seq = KC_ALLOC(int32_t, N);
    make_seq(seq, B, L, 21);
    float *wte = gk_host_rand((int64_t)V * C, -1.0f, 1.0f, 22);
    float *wpe = gk_host_rand((int64_t)P * C, -1.0f, 1.0f, 23);
    float *dout = gk_host_rand((int64_t)N * C, -1.0f, 1.0f, 24);
    float *dwte0 = gk_host_rand((int64_t)V * C, -1.0f, 1.0f, 25);
    float *dwpe0 = gk_host_rand((int64_t)P * C, -1.0f, 1.0f, 26);
    float *ref = KC_ALLOC(float, (int64_t)N *C), *got = KC_ALLOC(float, (int64_t)N *C);
    float *rdwte = KC_ALLOC(float, V *C), *rdwpe = KC_ALLOC(float, P *C);
    float *gdwte = KC_ALLOC(float, V *C), *gdwpe = KC_ALLOC(float, P *C);

    int32_t *d_seq = gk_dup(int32_t, seq, N);
    float *d_wte = gk_dup(float, wte, V *C), *d_wpe = gk_dup(float, wpe, P *C);
    float *d_out = gk_alloc(float, (int64_t)N *C), *d_dout = gk_dup(float, dout, (int64_t)N *C);
    float *d_dwte = gk_alloc(float, V *C), *d_dwpe = gk_alloc(float, P *C);
    const float *wp = with_wpe ? wpe : NULL;
    const float *d_wp = with_wpe ? d_wpe : NULL;

    ct_embed_forward_cpu(ref, wte, wp, seq, B, L, C, scale, mode);
    CT_ASSERT_OK(ct_embed_forward_cuda(d_out, d_wte, d_wp, d_seq, B, L, C, scale, mode, NULL));
    gk_download(got, d_out, sizeof(float) * N * C);
    GK_ASSERT_BITEQ("forward", got, ref, (int64_t)N * C);

    /* CPU: two backward calls from random initial gradients. */
    memcpy(rdwte, dwte0, sizeof(float) * V * C);
    memcpy(rdwpe, dwpe0, sizeof(float) * P * C);
    for (int k = 0; k < 2; k++)
        ct_embed_backward_cpu(rdwte, with_wpe ? rdwpe : NULL, dout, seq, B, L, C, scale, mode);

    /* GPU with scratch: the CPU's bits. */
    size_t nbytes = 0;
    CT_ASSERT_OK(ct_embed_backward_cuda_scratch(&nbytes, B, L));
    CT_ASSERT(nbytes >= 3 * (size_t)N * sizeof(int32_t));
    void *scratch = gk_alloc_bytes(nbytes);
    gk_upload(d_dwte, dwte0, sizeof(float) * V * C);
    gk_upload(d_dwpe, dwpe0, sizeof(float) * P * C);
    for (int k = 0; k < 2; k++)
        CT_ASSERT_OK(ct_embed_backward_cuda(d_dwte, with_wpe ? d_dwpe : NULL, scratch, d_dout,
                                            d_seq, B, L, C, scale, mode, NULL));
    gk_download(gdwte, d_dwte, sizeof(float) * V * C);
    gk_download(gdwpe, d_dwpe, sizeof(float) * P * C);
    GK_ASSERT_BITEQ("dwte x2 (sorted)", gdwte, rdwte, V * C);
    if (with_wpe)
        GK_ASSERT_BITEQ("dwpe x2", gdwpe, rdwpe, P * C);
    else
        GK_ASSERT_BITEQ("dwpe untouched (NULL)", gdwpe, dwpe0, P * C);

    /* GPU with atomics: within rounding. */
    gk_upload(d_dwte, dwte0, sizeof(float) * V * C);
    for (int k = 0; k < 2; k++)
        CT_ASSERT_OK(
            ct_embed_backward_cuda(d_dwte, NULL, NULL, d_dout, d_seq, B, L, C, scale, mode, NULL));
    gk_download(gdwte, d_dwte, sizeof(float) * V * C);
    gk_check("dwte x2 (atomics)", gdwte, rdwte, V * C, 1e-4, 1e-5);
    GK_ASSERT_BITEQ("dwte padding row (atomics)", gdwte, dwte0, C);

    gk_free_all();
    free(seq), free(wte), free(wpe), free(dout), free(dwte0), free(dwpe0), free(ref), free(got);
    free(rdwte), free(rdwpe), free(gdwte), free(gdwpe);
}

static void test_embed(void)
{
    check_case(3, 7, 50, CT_POS_PADDED, 1);
    check_case(3, 7, 50, CT_POS_ABSOLUTE, 1);
    check_case(2, 5, 8, CT_POS_PADDED, 0);
    check_case(13, 40, 20, CT_POS_PADDED, 1); /* B not a multiple of the 8-row load batch */
}

static void test_bad_arguments(void)
{
    CT_ASSERT_ERR(
        ct_embed_forward_cuda(NULL, NULL, NULL, NULL, -1, 4, 4, 1.0f, CT_POS_PADDED, NULL),
        CT_ERANGE_VALUE);
    CT_ASSERT_ERR(
        ct_embed_backward_cuda(NULL, NULL, NULL, NULL, NULL, 2, 2, 2, 1.0f, (ct_pos_mode_t)7, NULL),
        CT_ERANGE_VALUE);
    /* The sorted scatter needs 16-byte aligned scratch. */
    float *d = gk_alloc(float, 64);
    int32_t *s = gk_alloc(int32_t, 4);
    GK_CUDA_OK(cudaMemset(s, 0, 4 * sizeof(int32_t)));
    CT_ASSERT_ERR(
        ct_embed_backward_cuda(d, NULL, (char *)d + 4, d, s, 2, 2, 2, 1.0f, CT_POS_PADDED, NULL),
        CT_ERANGE_VALUE);
    gk_free_all();
}

int main(void)
{
    gk_require_gpu();
    CT_RUN(test_embed);
    CT_RUN(test_bad_arguments);
    return 0;
}
