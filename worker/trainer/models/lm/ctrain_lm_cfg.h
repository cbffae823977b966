/*
 * ctrain_lm_cfg.h - the language-model family's configuration: what a Hugging Face config.json
 * says about a GPT-2 or Qwen2 decoder (GPT2LMHeadModel, GPT2Model, Qwen2ForCausalLM, Qwen2Model;
 * Qwen2.5 checkpoints use the Qwen2 classes), read with transformers' defaults for the keys a file
 * leaves out, and the list of tensors such a model has, under the names transformers gives them,
 * so that weights load from and save back to a folder transformers reads.
 *
 * ---- legend ---------------------------------------------------------------------------------
 *   V vocabulary, C hidden width, NH attention heads, KVH key/value heads (grouped-query
 *   attention: head h reads key/value head h / (NH / KVH)), HD head width, I the FFN's inner
 *   width, P the largest position.
 *
 * Not here: reading the weights (ctrain_lm_hf.h), the tokenizer (ctrain_lm_tok.h), the passes
 * (ctrain_lm.c).
 */
#ifndef CTRAIN_LM_CFG_H
#define CTRAIN_LM_CFG_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ctrain_lm_arch {
    CTRAIN_LM_GPT2 = 0,  /* LayerNorm, learned positions, Conv1D (weights (in,out)), GELU MLP */
    CTRAIN_LM_QWEN2 = 1, /* RMSNorm, RoPE, grouped-query attention with q/k/v biases, SwiGLU */
} ctrain_lm_arch_t;

typedef enum ctrain_lm_act {
    CTRAIN_LM_ACT_GELU_TANH = 0, /* gelu_new, gelu_pytorch_tanh: GPT-2's */
    CTRAIN_LM_ACT_GELU = 1,      /* gelu: the exact erf form */
    CTRAIN_LM_ACT_SILU = 2,      /* silu in SwiGLU: Qwen2's */
} ctrain_lm_act_t;

#define CTRAIN_LM_MAX_LAYERS 256
#define CTRAIN_LM_MAX_VOCAB  (1 << 24)
#define CTRAIN_LM_MAX_HIDDEN 65536
#define CTRAIN_LM_MAX_POS    (1 << 20)
#define CTRAIN_LM_PREFIX_MAX 16

typedef struct ctrain_lm_cfg {
    ctrain_lm_arch_t arch;
    bool head;  /* GPT2LMHeadModel / Qwen2ForCausalLM; false for the bare GPT2Model / Qwen2Model */
    int vocab;  /* V (vocab_size) */
    int hidden; /* C (n_embd, hidden_size) */
    int layers; /* n_layer, num_hidden_layers */
    int heads;  /* NH */
    int kv_heads;      /* KVH (GPT-2: NH) */
    int head_dim;      /* HD (C / NH unless Qwen2's head_dim says otherwise) */
    int inner;         /* I (n_inner or 4C; intermediate_size) */
    int max_pos;       /* P (n_positions; max_position_embeddings) */
    double eps;        /* layer_norm_epsilon; rms_norm_eps */
    double rope_theta; /* Qwen2 */
    ctrain_lm_act_t act;
    bool tied; /* the logits use the token table (tie_word_embeddings; always for bare models) */
    bool scale_attn;     /* GPT-2 scale_attn_weights: scores / sqrt(HD) (Qwen2: always) */
    bool scale_by_layer; /* GPT-2 scale_attn_by_inverse_layer_idx: layer l also / (l + 1) */
    int pad_id;          /* Qwen2's embedding padding_idx (pad_token_id; its row gets no gradient),
                            -1 for none */
    /* The prefix of the backbone's tensor names in the architecture's state dict:
     * "transformer." (GPT2LMHeadModel), "model." (Qwen2ForCausalLM), "" (bare models). */
    char prefix[CTRAIN_LM_PREFIX_MAX];
} ctrain_lm_cfg_t;

/* The architecture names of config.json's "architectures" ("GPT2LMHeadModel", ...). */
const char *ctrain_lm_arch_name(const ctrain_lm_cfg_t *c);

/* Reads dir/config.json: "architectures" (or "model_type" when it is missing: the *LMHead /
 * ForCausalLM class), the sizes and the options that change the computation. Keys the file leaves
 * out take transformers' defaults (GPT2Config, Qwen2Config). Errors (CT_EFORMAT, CT_ERANGE_VALUE,
 * -errno) are one line naming the file and the key: an unknown architecture, an activation,
 * RoPE scaling or sliding window ctrain does not run, sizes that do not fit together. */
int ctrain_lm_cfg_read(const char *dir, ctrain_lm_cfg_t *cfg, ct_errbuf_t *eb);

/* Ranges and consistency (heads divide, key/value heads divide heads, ...): one line. */
int ctrain_lm_cfg_check(const ctrain_lm_cfg_t *c, ct_errbuf_t *eb);

/* The configuration as JSON (checkpoints record it) and back; equal configurations give equal
 * objects. from_json checks. */
json_t *ctrain_lm_cfg_to_json(const ctrain_lm_cfg_t *c);
int ctrain_lm_cfg_from_json(const json_t *o, ctrain_lm_cfg_t *c, ct_errbuf_t *eb);

/* NULL when a and b describe the same model, else the first field that differs, with
 * "field: a vs b" in what. */
const char *ctrain_lm_cfg_diff(const ctrain_lm_cfg_t *a, const ctrain_lm_cfg_t *b, char *what,
                               size_t size);

/* ---- the tensors --------------------------------------------------------------------------- */

/* What a tensor is, for the model's table. */
typedef enum ctrain_lm_role {
    CTRAIN_LM_T_WTE = 0, /* (V,C) token table: wte / embed_tokens */
    CTRAIN_LM_T_WPE,     /* (P,C) GPT-2 positions */
    CTRAIN_LM_T_LN1_W,   /* (C) ln_1 / input_layernorm */
    CTRAIN_LM_T_LN1_B,   /* (C) GPT-2 */
    CTRAIN_LM_T_QKV_W,   /* GPT-2 c_attn (C,3C) */
    CTRAIN_LM_T_QKV_B,   /* GPT-2 (3C) */
    CTRAIN_LM_T_Q_W,     /* Qwen2 q_proj (NH*HD,C) */
    CTRAIN_LM_T_K_W,     /* (KVH*HD,C) */
    CTRAIN_LM_T_V_W,     /* (KVH*HD,C) */
    CTRAIN_LM_T_Q_B,     /* (NH*HD) */
    CTRAIN_LM_T_K_B,     /* (KVH*HD) */
    CTRAIN_LM_T_V_B,     /* (KVH*HD) */
    CTRAIN_LM_T_O_W,     /* GPT-2 attn.c_proj (C,C); Qwen2 o_proj (C,NH*HD) */
    CTRAIN_LM_T_O_B,     /* GPT-2 (C) */
    CTRAIN_LM_T_LN2_W,   /* (C) ln_2 / post_attention_layernorm */
    CTRAIN_LM_T_LN2_B,   /* (C) GPT-2 */
    CTRAIN_LM_T_FC_W,    /* GPT-2 mlp.c_fc (C,I) */
    CTRAIN_LM_T_FC_B,    /* (I) */
    CTRAIN_LM_T_FC2_W,   /* GPT-2 mlp.c_proj (I,C) */
    CTRAIN_LM_T_FC2_B,   /* (C) */
    CTRAIN_LM_T_GATE_W,  /* Qwen2 gate_proj (I,C) */
    CTRAIN_LM_T_UP_W,    /* (I,C) */
    CTRAIN_LM_T_DOWN_W,  /* (C,I) */
    CTRAIN_LM_T_LNF_W,   /* (C) ln_f / norm */
    CTRAIN_LM_T_LNF_B,   /* (C) GPT-2 */
    CTRAIN_LM_T_HEAD,    /* (V,C) lm_head, untied models only */
    CTRAIN_LM_T_COUNT
} ctrain_lm_role_t;

#define CTRAIN_LM_NAME_MAX 96

typedef struct ctrain_lm_tensor {
    char name[CTRAIN_LM_NAME_MAX]; /* the state_dict name, prefix included */
    ctrain_lm_role_t role;
    int layer; /* 0..layers-1, or -1 outside the blocks */
    int ndim;
    int64_t shape[2];
    /* Tensors that the passes read as one (q, k and v weights; their biases; gate and up) share
     * a group number > 0 and sit next to each other in the list, in that order. */
    int group;
} ctrain_lm_tensor_t;

/* The model's tensors in the order the passes want them in the flat buffers (per block: the
 * attention's, then the FFN's, then the norms), lm_head last. *out is malloc'd; *n its length.
 * 0 or -ENOMEM. */
int ctrain_lm_cfg_tensors(const ctrain_lm_cfg_t *c, ctrain_lm_tensor_t **out, int *n);

/* Parameters of the model (the sum of the tensors' elements). */
int64_t ctrain_lm_cfg_num_params(const ctrain_lm_cfg_t *c);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_LM_CFG_H */
