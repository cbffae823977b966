/*
 * ctrain_temporal.h - the temporal encoder as a ctrain model family (--model temporal): the
 * TemporalModel of examples/pytorch/temporal_encoder_ddp.py (the projector in --stage align). A curve of S points, normalised by its own mean and (unbiased) standard deviation
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
 * --stage align adds the reference's Projector (K learned queries, nn.MultiheadAttention over the
 * encoder's final LayerNorm output, + the queries, LayerNorm, Linear, erf GELU, Linear to the
 * LM's width): the K soft tokens, then the prompt's and the description's token embeddings
 * (the LM's table) go into the frozen LM, whose next-token cross-entropy over the description's
 * tokens is the loss. A micro-batch's loss is its token mean weighted by its share of the
 * step's curves: the reference's mean of per-rank (and per-accumulation) token means.
 *
 * The passes run on the op table (ct_ops.h), the same code on every backend; the LM's rows are
 * built on the backend (the model owns them). Not here: the data, the masks' draws, evaluation
 * and outputs (the trainer's task, ctrain_temporal_task.c).
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
    /* --stage align (stage 0: reconstruct): the projector's parameters exist, and a
     * micro-batch's loss is the description cross-entropy of the frozen lm */
    int stage;
    int soft_tokens;         /* K */
    int lm_hidden;           /* the LM's width (the soft tokens') */
    struct ctrain_lm *lm;    /* frozen (no gradient), the task's; set before the first pass */
    const int32_t *text;     /* (curves, text_cap) each description's ids, eos last; the task's */
    const int32_t *text_len; /* (curves) */
    int text_cap;            /* max_text_tokens */
    const int32_t *prompt;   /* (n_prompt) the prompt's ids */
    int n_prompt;
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

/* --stage align, forward only: the description cross-entropy of B curves (curve[r]) each
 * followed by the description of text[r] (the curve's own, or another's for the shuffled
 * reference): *sum over the description's tokens (eos included), *tokens their count. */
int ctrain_temporal_align_eval(ctrain_model_t *m, const int32_t *curve, const int32_t *text, int B,
                               double *sum, int64_t *tokens, ct_errbuf_t *eb);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_TEMPORAL_H */
