/*
 * sasrec_tiny.h - a whole SASRec (embedding, blocks, final LayerNorm, tied scores, BCE loss,
 * l2_emb) built twice for the whole-model gradient check: once in float from the ct_* ops,
 * forward and backward (through an op table, so the same code also runs on the CUDA twins), and
 * once in float64 from the naive reference ops of ref64.h, forward only. Test code: it allocates
 * freely and is written for a tiny model; the trainer has its own model code and does not use this.
 *
 * The three block layouts are those of sasrec-spec.md 2.3 (x is the (N,C) stream; LNa, LNf the
 * block's LayerNorms; FFN = conv1 -> dropout -> ReLU -> conv2 -> dropout):
 *   post_ln   x = LNa(x + MHA(x, x, x));  x = LNf(x + FFN(x))
 *   pre_ln    x = x + MHA(LNa(x) x3);     x = x + FFN(LNf(x))
 *   original  q = LNa(x); x = q + MHA(q, x, x); x = LNf(x); x = x + FFN(x)
 * each optionally followed by the timeline mask (the 2020 variant sets it, with absolute
 * positions). Parameter names follow SASRec.pytorch's state_dict.
 */
#ifndef SASREC_TINY_H
#define SASREC_TINY_H

#include <stddef.h>
#include <stdint.h>

#include "ct_kernels.h"

#define TINY_MAX_BLOCKS 4

typedef enum tiny_layout { TINY_POST_LN, TINY_PRE_LN, TINY_ORIGINAL } tiny_layout_t;

typedef struct tiny_cfg {
    int B, L, C, NH, V, nblocks;
    tiny_layout_t layout;
    ct_pos_mode_t pos_mode;
    int timeline;     /* timeline mask after the embedding and after every block */
    float p_drop;     /* every dropout site (embedding, attention probabilities, FFN x2) */
    uint64_t seed;    /* dropout seed; site s uses stream s (embedding 0, block l: 1+3l..3+3l) */
    float l2_emb;     /* lambda of CT_L2_SQUARED on the item table (HEAD's l2_emb) */
    int skip_padding; /* pass qmask = seq to attentions whose padding rows are unused */
} tiny_cfg_t;

/* Offsets (in floats) of every tensor in the flat parameter buffer. */
typedef struct tiny_block_params {
    size_t ln1_w, ln1_b; /* attention_layernorms.i.{weight,bias} (C) */
    size_t in_w, in_b;   /* attention_layers.i.in_proj_{weight (3C,C), bias (3C)} */
    size_t out_w, out_b; /* attention_layers.i.out_proj.{weight (C,C), bias (C)} */
    size_t ln2_w, ln2_b; /* forward_layernorms.i.{weight,bias} (C) */
    size_t c1_w, c1_b;   /* forward_layers.i.conv1.{weight (C,C,1), bias (C)} */
    size_t c2_w, c2_b;   /* forward_layers.i.conv2.{weight (C,C,1), bias (C)} */
} tiny_block_params_t;

typedef struct tiny_params {
    size_t wte; /* item_emb.weight (V,C) */
    size_t wpe; /* pos_emb.weight (P,C) */
    int P;      /* L + 1 (padded ids) or L (absolute) */
    tiny_block_params_t blk[TINY_MAX_BLOCKS];
    size_t lnf_w, lnf_b; /* last_layernorm.{weight,bias} (C) */
    size_t total;
} tiny_params_t;

void tiny_params_layout(tiny_params_t *pt, const tiny_cfg_t *cfg);

/* Random parameters: tables and matrices U(-0.5, 0.5), LayerNorm weights 1 + U(-0.2, 0.2),
 * biases U(-0.1, 0.1); row 0 of the item table, and of the positional table in padded mode,
 * zero (as HEAD re-zeros them). */
void tiny_params_init(float *params, const tiny_params_t *pt, const tiny_cfg_t *cfg,
                      uint64_t stream);

/* The float model: activations allocated by tiny_model_create for one cfg, on the CPU ops;
 * tiny_model_create_on runs it on another op table (sasrec_tiny_ops.h), which stays the
 * caller's and holds the model's buffers. */
typedef struct tiny_model tiny_model_t;
typedef struct tiny_ops tiny_ops_t;
tiny_model_t *tiny_model_create(const tiny_cfg_t *cfg);
tiny_model_t *tiny_model_create_on(const tiny_cfg_t *cfg, tiny_ops_t *ops);
void tiny_model_destroy(tiny_model_t *m);

/* Forward and backward in float with the model's ops. grads (pt->total) is zeroed here, then
 * filled. Returns the loss (BCE + l2); pos_logits / neg_logits (B*L) are copied out to the host
 * when not NULL. params, grads, seq, pos and neg live where the ops work (host memory for the
 * CPU ops).
 *   seq, pos, neg: (B,L) */
float tiny_forward_backward(tiny_model_t *m, const tiny_params_t *pt, const float *params,
                            float *grads, const int32_t *seq, const int32_t *pos,
                            const int32_t *neg, float *pos_logits, float *neg_logits);

/* The same loss from the float64 reference ops (forward only). */
double tiny_loss_ref(const tiny_cfg_t *cfg, const tiny_params_t *pt, const double *params,
                     const int32_t *seq, const int32_t *pos, const int32_t *neg, double *pos_logits,
                     double *neg_logits);

#endif /* SASREC_TINY_H */
