/*
 * test_cuda_args.c (kernels suite, CUDA builds) - the CUDA launchers' argument checks, which
 * run before any CUDA call and therefore behave the same with or without a GPU: every launcher
 * refuses a shape it cannot take with CT_ERANGE_VALUE (and says why in the log) instead of
 * launching a kernel on it, and empty shapes are no-ops that touch nothing (NULL pointers
 * pass). The context: CT_ENOGPU without a device, a working handle with one; closing is safe on
 * a failed or zeroed context and twice. Runs on every CUDA build, GPU or not.
 */
#include <string.h>

#include "ct_kernels_cuda.h"
#include "ct_log.h"
#include "ct_test.h"

static ct_dropout_t nodrop = {0.0f, 0, 0, 0};

static void test_refused(void)
{
    ct_cuda_ctx_t none;
    memset(&none, 0, sizeof none);
    ct_dropout_t bad = {1.5f, 0, 0, 0};
    CT_ASSERT_ERR(ct_dropout_cuda(NULL, NULL, 8, bad, NULL), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_timeline_mask_cuda(NULL, NULL, NULL, 4, -1, NULL), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(
        ct_embed_forward_cuda(NULL, NULL, NULL, NULL, 2, -3, 4, 1.0f, CT_POS_PADDED, NULL),
        CT_ERANGE_VALUE);
    CT_ASSERT_ERR(
        ct_embed_backward_cuda(NULL, NULL, NULL, NULL, NULL, 2, 2, 2, 1.0f, (ct_pos_mode_t)9, NULL),
        CT_ERANGE_VALUE);
    size_t nbytes = 1;
    CT_ASSERT_ERR(ct_embed_backward_cuda_scratch(&nbytes, -1, 4), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_score_backward_cuda_scratch(&nbytes, -1), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_layernorm_forward_cuda(NULL, NULL, NULL, NULL, NULL, NULL, 4, 0, 1e-5f, NULL),
                  CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_layernorm_backward_cuda(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                             4, CT_LAYERNORM_CUDA_MAX_C + 1, NULL),
                  CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_linear_forward_cuda(NULL, NULL, NULL, NULL, 4, 4, 4, &none), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_linear_forward_cuda(NULL, NULL, NULL, NULL, 4, 4, 4, NULL), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_linear_backward_cuda(NULL, NULL, NULL, NULL, NULL, NULL, 4, 4, 4, &none),
                  CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_qkv_forward_cuda(NULL, NULL, NULL, NULL, NULL, 4, 4, &none), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_qkv_backward_cuda(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 4, 4, &none),
                  CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_attention_forward_cuda(NULL, NULL, NULL, NULL, NULL, 2,
                                            CT_ATTENTION_CUDA_MAX_L + 1, 8, 1, nodrop, NULL),
                  CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_attention_forward_cuda(NULL, NULL, NULL, NULL, NULL, 2, 8, 9, 2, nodrop, NULL),
                  CT_ERANGE_VALUE); /* C not a multiple of NH */
    CT_ASSERT_ERR(ct_attention_backward_cuda(NULL, NULL, NULL, NULL, NULL, NULL, 2, 8,
                                             CT_ATTENTION_CUDA_MAX_HS + 1, 1, nodrop, NULL),
                  CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_attention_backward_cuda(NULL, NULL, NULL, NULL, NULL, NULL, 70000, 8, 8, 1,
                                             nodrop, NULL),
                  CT_ERANGE_VALUE); /* more sequences than a grid dimension */
    CT_ASSERT_ERR(ct_relu_forward_cuda(NULL, NULL, -1, NULL), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_relu_backward_cuda(NULL, NULL, NULL, -1, NULL), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_residual_forward_cuda(NULL, NULL, NULL, -1, NULL), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_residual_backward_cuda(NULL, NULL, NULL, -1, NULL), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_scale_cuda(NULL, 2.0f, -1, NULL), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_score_forward_cuda(NULL, NULL, NULL, NULL, -1, 4, NULL), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_score_backward_cuda(NULL, NULL, NULL, NULL, NULL, NULL, NULL, 4, -4, NULL),
                  CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_bce_loss_cuda(NULL, NULL, NULL, NULL, NULL, NULL, NULL, -1, 1.0f, NULL),
                  CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_count_nonzero_cuda(NULL, NULL, -1, NULL), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_l2_penalty_cuda(NULL, NULL, NULL, NULL, 4, 1.0f, (ct_l2_mode_t)5, NULL),
                  CT_ERANGE_VALUE);
    CT_ASSERT_ERR(
        ct_adam_update_cuda(NULL, NULL, NULL, NULL, 4, 1e-3, 0.9, 0.98, 1e-8, 1.0f, 0, NULL),
        CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_sumsq_cuda(NULL, NULL, NULL, -1, NULL), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_score_candidates_cuda(NULL, NULL, NULL, NULL, 4, 4, 50, 49, NULL),
                  CT_ERANGE_VALUE); /* rows closer than their width */
    CT_ASSERT_ERR(ct_score_all_cuda(NULL, NULL, NULL, 4, 4, 50, 50, &none), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_rank_all_cuda(NULL, NULL, NULL, NULL, NULL, 4, 1, NULL), CT_ERANGE_VALUE);
}

static void test_empty_shapes(void)
{
    /* Nothing to do: no kernel, no CUDA call, so this passes without a GPU too. */
    CT_ASSERT_OK(ct_dropout_cuda(NULL, NULL, 0, nodrop, NULL));
    CT_ASSERT_OK(ct_timeline_mask_cuda(NULL, NULL, NULL, 0, 50, NULL));
    CT_ASSERT_OK(
        ct_embed_forward_cuda(NULL, NULL, NULL, NULL, 0, 200, 50, 7.0f, CT_POS_PADDED, NULL));
    CT_ASSERT_OK(ct_embed_backward_cuda(NULL, NULL, NULL, NULL, NULL, 0, 200, 50, 7.0f,
                                        CT_POS_PADDED, NULL));
    CT_ASSERT_OK(ct_layernorm_forward_cuda(NULL, NULL, NULL, NULL, NULL, NULL, 0, 50, 1e-8f, NULL));
    CT_ASSERT_OK(ct_layernorm_backward_cuda(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0,
                                            50, NULL));
    CT_ASSERT_OK(
        ct_attention_forward_cuda(NULL, NULL, NULL, NULL, NULL, 0, 200, 50, 1, nodrop, NULL));
    CT_ASSERT_OK(
        ct_attention_backward_cuda(NULL, NULL, NULL, NULL, NULL, NULL, 4, 0, 50, 1, nodrop, NULL));
    CT_ASSERT_OK(ct_relu_forward_cuda(NULL, NULL, 0, NULL));
    CT_ASSERT_OK(ct_residual_backward_cuda(NULL, NULL, NULL, 0, NULL));
    CT_ASSERT_OK(ct_score_forward_cuda(NULL, NULL, NULL, NULL, 0, 50, NULL));
    CT_ASSERT_OK(ct_score_backward_cuda(NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, 50, NULL));
    CT_ASSERT_OK(
        ct_adam_update_cuda(NULL, NULL, NULL, NULL, 0, 1e-3, 0.9, 0.98, 1e-8, 1.0f, 1, NULL));
    CT_ASSERT_OK(ct_score_candidates_cuda(NULL, NULL, NULL, NULL, 0, 101, 50, 50, NULL));
    CT_ASSERT_OK(ct_rank_all_cuda(NULL, NULL, NULL, NULL, NULL, 0, 100, NULL));
}

static void test_context(void)
{
    ct_cuda_ctx_t ctx;
    int rc = ct_cuda_ctx_init(&ctx, NULL, 0);
    if (ct_cuda_device_count() < 1) {
        CT_ASSERT_ERR(rc, CT_ENOGPU);
        CT_ASSERT(ctx.blas == NULL && ctx.workspace == NULL && ctx.scratch == NULL);
    } else {
        CT_ASSERT_OK(rc);
        CT_ASSERT(ctx.blas != NULL && ctx.workspace_nbytes == CT_CUDA_CTX_WORKSPACE_NBYTES);
    }
    ct_cuda_ctx_close(&ctx);
    ct_cuda_ctx_close(&ctx);
    ct_cuda_ctx_close(NULL);
}

int main(void)
{
    ct_log_set_level(CT_LOG_OFF); /* the refusals log their reasons; not this test's output */
    CT_RUN(test_refused);
    CT_RUN(test_empty_shapes);
    CT_RUN(test_context);
    return 0;
}
