/*
 * ctrain_lm.h - the language-model family's passes: a GPT-2 or Qwen2 decoder (ctrain_lm_cfg.h)
 * whose weights live in one flat parameter buffer and whose gradients go to one flat gradient
 * buffer of the same layout (the tensors of ctrain_lm_cfg_tensors, in that order, each under its
 * transformers name), loaded from a Hugging Face folder (ctrain_lm_hf.h), run forward and
 * backward through the op table (ct_ops.h) on either backend, with per-tensor freezing.
 *
 * The computation is transformers' in float32 evaluation mode (no dropout): for GPT-2
 *   x = wte[id] + wpe[t];  per block: x += c_proj(attn(c_attn(LN1 x))); x += c_proj(gelu(c_fc(LN2
 * x))) and for Qwen2 x = embed_tokens[id]; per block: x += o_proj(attn(rope(qkv_proj(RMS1 x)))); x
 * += down(silu(gate(RMS2 x)) * up(RMS2 x)) then the final norm and the LM head (the token table
 * when tied); positions are 0..L-1 in every row (transformers' default position_ids without an
 * attention mask), so rows are meant to be right-padded, and the next-token loss is the mean over
 * the targets given.
 *
 * With activation recomputation (ctrain_lm_opts_t.recompute) the forward keeps only each block's
 * input and the backward runs each block's forward again just before that block's backward; the
 * ops are deterministic, so the gradients are the same bits as without it.
 *
 * Buffers: ctrain_lm_create allocates the flat buffers itself; ctrain_lm_create_shared leaves
 * them to the caller (the trainer's family, ctrain_lm_family.c, points them into the trainer's
 * flat buffers), who may also keep frozen tensors apart in frozen_mem (no gradient range at all).
 *
 * Not here: the optimizer, the training loop and the trainer's family (ctrain_lm_family.h),
 * mixed precision.
 */
#ifndef CTRAIN_LM_H
#define CTRAIN_LM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ct_error.h"
#include "ct_ops.h"
#include "ctrain_lm_cfg.h"
#include "ctworker.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ctrain_lm {
    ctrain_lm_cfg_t cfg;
    ct_ops_t *ops;
    int max_rows; /* B * L one pass may take */
    int max_len;  /* L, <= cfg.max_pos */

    ctrain_lm_tensor_t *tensors; /* n_tensors, in flat-buffer order */
    int n_tensors;
    size_t *offset;    /* (n_tensors) in floats, into params_mem and grads_mem (a frozen tensor
                          with frozen_mem set: into frozen_mem) */
    bool *frozen;      /* (n_tensors) no gradient */
    size_t num_params; /* floats in the flat buffers (ctrain_lm_create's; 0 when shared) */

    float *params_mem; /* (num_params) backend memory */
    float *grads_mem;  /* (num_params) backend memory, += by the backward */
    float *frozen_mem; /* backend memory of the frozen tensors kept apart, or NULL (shared only) */
    bool own_buffers;  /* params_mem and grads_mem are this struct's (ctrain_lm_create) */

    void *impl; /* activations, scratch and the per-layer pointers */

    bool recompute;    /* activation recomputation (ctrain_lm_opts_t); read-only */
    bool weights_only; /* every tensor frozen for good, grads_mem NULL (ctrain_lm_opts_t) */
    size_t act_bytes;  /* the activation and scratch arena's size in bytes; read-only */
} ctrain_lm_t;

/* How ctrain_lm_create_opts builds a model; all zero (or NULL) is ctrain_lm_create's default. */
typedef struct ctrain_lm_opts {
    bool recompute;    /* keep only each block's input in the forward and run the block's forward
                          again in the backward (gradient checkpointing): the activation memory of
                          one block instead of one per block, for about one more forward */
    bool weights_only; /* a frozen backbone (soft prompts trained through it): every tensor frozen
                          and no gradient buffer allocated - ctrain_lm_freeze cannot thaw it;
                          gradients still reach batch.dembeds */
} ctrain_lm_opts_t;

/* One pass's input, host memory except where said. Rows hold L tokens each. */
typedef struct ctrain_lm_batch {
    int B, L;
    const int32_t *ids;  /* (B,L) token ids; ignored where embeds is given */
    const float *embeds; /* (B,L,C) backend memory: input embeddings used instead of the token
                            table's rows (transformers' inputs_embeds; GPT-2 still adds its
                            positions), or NULL */
    const int32_t *tgt;  /* (B,L) next-token targets, < 0 for none (transformers' -100) */
    float *dembeds;      /* (B,L,C) backend memory: d loss / d embeds is ADDED here, or NULL */
} ctrain_lm_batch_t;

/* A model of cfg on ops for passes of up to max_rows rows of up to max_len tokens in all
 * (B * L <= max_rows, L <= max_len <= cfg->max_pos): the table, the zeroed flat buffers and the
 * activations. Returns 0, CT_ERANGE_VALUE / -EINVAL (eb says what) or -ENOMEM. */
int ctrain_lm_create(ctrain_lm_t **out, const ctrain_lm_cfg_t *cfg, ct_ops_t *ops, int max_rows,
                     int max_len, ct_errbuf_t *eb);

/* ctrain_lm_create with options (opts NULL: the defaults). */
int ctrain_lm_create_opts(ctrain_lm_t **out, const ctrain_lm_cfg_t *cfg, ct_ops_t *ops,
                          int max_rows, int max_len, const ctrain_lm_opts_t *opts, ct_errbuf_t *eb);

/* ctrain_lm_create without the flat buffers: params_mem, grads_mem, frozen_mem and offset[] are
 * the caller's to set (every tensor's offset, before the first pass) and to free. */
int ctrain_lm_create_shared(ctrain_lm_t **out, const ctrain_lm_cfg_t *cfg, ct_ops_t *ops,
                            int max_rows, int max_len, ct_errbuf_t *eb);

/* ctrain_lm_create_shared with options (opts NULL: the defaults). */
int ctrain_lm_create_shared_opts(ctrain_lm_t **out, const ctrain_lm_cfg_t *cfg, ct_ops_t *ops,
                                 int max_rows, int max_len, const ctrain_lm_opts_t *opts,
                                 ct_errbuf_t *eb);

/* Tensor i's weights in backend memory (params_mem, or frozen_mem for a frozen tensor kept
 * apart). */
float *ctrain_lm_tensor(const ctrain_lm_t *m, int i);

/* ctrain_lm_create with dir/config.json's configuration, then the weights of dir. */
int ctrain_lm_open(ctrain_lm_t **out, const char *dir, ct_ops_t *ops, int max_rows, int max_len,
                   ct_errbuf_t *eb);
/* ctrain_lm_open with options (opts NULL: the defaults). */
int ctrain_lm_open_opts(ctrain_lm_t **out, const char *dir, ct_ops_t *ops, int max_rows,
                        int max_len, const ctrain_lm_opts_t *opts, ct_errbuf_t *eb);
void ctrain_lm_destroy(ctrain_lm_t *m); /* NULL is fine */

/* (ctrain_lm_load.c) Reads every tensor from the Hugging Face folder dir (ctrain_lm_hf_read; half
 * types widened) into params_mem. Errors name the tensor and the shape expected. */
int ctrain_lm_load(ctrain_lm_t *m, const char *dir, ct_errbuf_t *eb);

/* Views of the flat buffers (host memory only: a CPU backend) under the transformers names, for
 * ctrain_lm_hf_save; views has room for n_tensors. grads true: the gradient buffer (a frozen
 * tensor kept apart in frozen_mem has no gradient: its view's data is NULL). */
void ctrain_lm_views(const ctrain_lm_t *m, bool grads, ct_tensor_view_t *views);

/* The table entry called name (the state_dict name), or -1. */
int ctrain_lm_find(const ctrain_lm_t *m, const char *name);

/* Freezes (or thaws) every tensor whose name starts with prefix ("" : all of them). q, k and v
 * of one Qwen2 block, their biases, and gate and up are computed as one product: a prefix that
 * takes only some of such a group is refused (CT_ERANGE_VALUE, naming the tensor), as is a
 * prefix that matches nothing. A frozen tensor's gradient range is never written. */
int ctrain_lm_freeze(ctrain_lm_t *m, const char *prefix, bool frozen, ct_errbuf_t *eb);

/* grads_mem <- 0. */
void ctrain_lm_zero_grad(ctrain_lm_t *m);

/* Forward of b and, with backward, the backward: *loss (host) = sum over targets of the
 * next-token cross-entropy / count (count: the targets of the whole step, so that summed
 * gradients are those of its mean); gradients of the trainable tensors are added to grads_mem
 * and d loss / d embeds to b->dembeds. Returns 0, -EINVAL (a shape over the limits, an id or
 * target outside the vocabulary: one line) or the backend's error. */
int ctrain_lm_forward_backward(ctrain_lm_t *m, const ctrain_lm_batch_t *b, float count,
                               bool backward, float *loss, ct_errbuf_t *eb);

/* The backward pass from dhidden ((B,L,C) backend memory, d loss / d final hidden states after
 * the last norm) instead of a next-token loss (b->tgt is ignored): the forward of b, then the
 * backward, gradients added as ctrain_lm_forward_backward adds them. */
int ctrain_lm_backward_hidden(ctrain_lm_t *m, const ctrain_lm_batch_t *b, const float *dhidden,
                              ct_errbuf_t *eb);

/* The final hidden states (after the last norm) of the last pass's rows: (B*L, C) floats in
 * backend memory, valid until the next pass (transformers' last_hidden_state). */
const float *ctrain_lm_hidden(const ctrain_lm_t *m);

/* The logits of the last pass's rows into host memory: (B*L, V) floats, row-major. A pass of
 * b->B * b->L rows must have run. 0, -ENOMEM or the backend's error. */
int ctrain_lm_logits(ctrain_lm_t *m, float *logits, int64_t rows);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_LM_H */
