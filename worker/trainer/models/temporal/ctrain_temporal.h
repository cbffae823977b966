/*
 * ctrain_temporal.h - the temporal encoder as a ctrain model family (--model temporal, stage
 * reconstruct): the TemporalModel of examples/pytorch/temporal_encoder_ddp.py without its
 * projector. A curve of S points, normalised by its own mean and (unbiased) standard deviation
 * + 1e-5, is cut into n = S / P non-overlapping patches of P points; a linear patch embedding,
 * the learned mask token in place of masked patches, a learned position table, num_blocks
 * pre-LN Transformer encoder layers (bidirectional attention, ReLU feed-forward of ff_dim,
 * torch.nn.TransformerEncoderLayer(norm_first=True)), a final LayerNorm and a linear head
 * reconstruct the patches; the loss is the mean squared error over the masked patches.
 * Parameters carry the reference's state_dict names (embed.weight, layers.0.self_attn.
 * in_proj_weight, ..., recon.bias), so its weights load either way.
 *
 * A micro-batch (ctrain_model_batch_t) holds, per row r, the curve's index into the spec's
 * patches in seq[r * n] and the patch mask in pos[r * n + j] (1 = masked), (B, n) each.
 * The curves themselves are the task's (spec.patches); the model reads them from there.
 *
 * Runs on the CPU backend (check_backend refuses others). Not here: the data, the masks'
 * draws, evaluation and outputs (the trainer's task, ctrain_temporal_task.c).
 */
#ifndef CTRAIN_TEMPORAL_H
#define CTRAIN_TEMPORAL_H

#include "ctrain_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What ctrain_model_cfg_t.ext points at for CTRAIN_MODEL_TEMPORAL; the model cfg's maxlen is
 * n (patches per curve), hidden d_model, num_heads and num_blocks the encoder's, dropout every
 * dropout site (attention probabilities, after the attention, inside and after the
 * feed-forward). */
typedef struct ctrain_temporal_spec {
    int patch_len; /* P */
    int ff_dim;
    double weight_decay;  /* AdamW's decoupled decay */
    const float *patches; /* (curves, n * P) normalised curves, host; the task's */
    int64_t curves;
} ctrain_temporal_spec_t;

#define CTRAIN_TEMPORAL_LN_EPS 1e-5f /* torch.nn.LayerNorm's default */

/* Forward only (no dropout) of B rows of ids and masks as in a micro-batch: *sum = the sum of
 * squared errors over the masked patches' points. eb says what failed. */
int ctrain_temporal_eval(ctrain_model_t *m, const int32_t *ids, const int32_t *mask, int B,
                         double *sum, ct_errbuf_t *eb);

/* The embeddings of B curves (ids as in a micro-batch, nothing masked, no dropout): row r of out
 * (B, hidden) is the mean over the curve's patches of the encoder's output after its final
 * LayerNorm (the states the reference's projector reads). */
int ctrain_temporal_embed(ctrain_model_t *m, const int32_t *ids, const int32_t *zero_mask, int B,
                          float *out, ct_errbuf_t *eb);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_TEMPORAL_H */
