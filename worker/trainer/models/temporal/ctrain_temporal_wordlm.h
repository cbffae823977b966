/*
 * ctrain_temporal_wordlm.h - the temporal encoder's tiny random language model, used by --stage
 * align when no --lm_dir is given (the reference's lm.path null): a Qwen2ForCausalLM of the
 * config's lm.* sizes over the word-level tokenizer's vocabulary (ctrain_lm_wordtok.h), 512
 * positions, tied embeddings, initialised as transformers initialises Qwen2 and taught the
 * descriptions' language by the reference's pretrain_lm.
 *
 * Initialisation (transformers' Qwen2PreTrainedModel._init_weights with initializer_range 0.02):
 * every Linear weight and the token table N(0, 0.02^2), the padding token's row (id 0) zero, the
 * q/k/v biases zero, the RMSNorm weights one. The draws are ctrain's, not torch's: tensor i's
 * values come from Philox stream CT_RNG_STREAM(CTRAIN_TEMPORAL_WORDLM_PURPOSE_INIT, i) of the
 * seed, each N(0, 1) value by Box-Muller from two 32-bit draws; torch's generator cannot be
 * reproduced, so the LM is the reference's in distribution only.
 *
 * Pretraining (pretrain_lm): steps of AdamW (lr 3e-3, betas 0.9 / 0.999, eps 1e-8, weight decay
 * 0.01 decoupled: torch.optim.AdamW's defaults) on batches of 32 training descriptions drawn
 * with replacement; each row is k token embeddings of words drawn from the description itself
 * (a random order of its words without the end token, the first k; with fewer than k words, k
 * draws with replacement from that order), the prompt, the description and <eos>, right-padded
 * with <pad>; the loss is the mean next-token cross-entropy over the description's tokens and
 * <eos>. Step s draws from stream CT_RNG_STREAM(CTRAIN_TEMPORAL_WORDLM_PURPOSE_BATCH, s): the 32
 * descriptions, then row by row the order and the extra draws. The result depends only on the
 * seed, the descriptions, the sizes and the op table, so every start of a job (a resumed one
 * included) computes the same weights.
 *
 * Not here: the tokenizer, the broadcast to the other ranks and the freezing (the task,
 * ctrain_temporal_task.c), the LM's passes (models/lm/ctrain_lm.c).
 */
#ifndef CTRAIN_TEMPORAL_WORDLM_H
#define CTRAIN_TEMPORAL_WORDLM_H

#include <stdint.h>

#include "ct_error.h"
#include "ct_ops.h"
#include "ctrain_lm.h"
#include "ctrain_lm_cfg.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CTRAIN_TEMPORAL_WORDLM_PURPOSE_INIT  272u
#define CTRAIN_TEMPORAL_WORDLM_PURPOSE_BATCH 273u
#define CTRAIN_TEMPORAL_WORDLM_POSITIONS     512 /* max_position_embeddings */
#define CTRAIN_TEMPORAL_WORDLM_ROWS          32  /* descriptions per pretraining step */
#define CTRAIN_TEMPORAL_WORDLM_LR            3e-3

/* The sizes of the tiny Qwen2 (the reference's Qwen2Config: rms_norm_eps 1e-6, rope_theta 1e4,
 * silu, tied embeddings, pad_token_id 0). */
typedef struct ctrain_temporal_wordlm_sizes {
    int vocab, hidden, layers, heads, kv_heads, inner;
} ctrain_temporal_wordlm_sizes_t;

/* The configuration of those sizes into *c, checked (one line on a bad combination). */
int ctrain_temporal_wordlm_cfg(const ctrain_temporal_wordlm_sizes_t *z, ctrain_lm_cfg_t *c,
                               ct_errbuf_t *eb);

/* The initial weights of the model of c, in the tensor order of ctrain_lm_cfg_tensors,
 * concatenated, into out (ctrain_lm_cfg_num_params(c) floats, host memory). */
void ctrain_temporal_wordlm_init(const ctrain_lm_cfg_t *c, uint64_t seed, float *out);

/* The pretraining descriptions: n token rows, row j = ids[off[j] .. off[j+1]) ending with <eos>. */
typedef struct ctrain_temporal_wordlm_texts {
    const int32_t *ids;
    const int64_t *off;
    int64_t n;
    const int32_t *prompt;
    int n_prompt;
    int k; /* the prefix: the number of soft tokens */
} ctrain_temporal_wordlm_texts_t;

/* The longest pretraining row of tx: k + prompt + the longest description. */
int ctrain_temporal_wordlm_row_len(const ctrain_temporal_wordlm_texts_t *tx);

/* Called after every pretraining step with its loss (the batch's token mean). */
typedef void (*ctrain_temporal_wordlm_log_fn)(void *ctx, int step, int steps, float loss);

/* Initialises the model of c from seed and trains it steps steps on tx (on ops, which must use
 * host memory); the weights into out (as ctrain_temporal_wordlm_init's). 0, CT_ERANGE_VALUE
 * (rows over the 512 positions), -ENOTSUP (a backend without host memory), -ENOMEM or the
 * passes' error; one line in eb. */
int ctrain_temporal_wordlm_pretrain(const ctrain_lm_cfg_t *c, ct_ops_t *ops, uint64_t seed,
                                    int steps, const ctrain_temporal_wordlm_texts_t *tx,
                                    ctrain_temporal_wordlm_log_fn log, void *log_ctx, float *out,
                                    ct_errbuf_t *eb);

/* Copies weights laid out as ctrain_temporal_wordlm_init's into m's tensors (backend memory). */
int ctrain_temporal_wordlm_store(ctrain_lm_t *m, const float *w);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_TEMPORAL_WORDLM_H */
