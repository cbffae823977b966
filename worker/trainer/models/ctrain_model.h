/*
 * ctrain_model.h - ctrain's models: configuration, the flat parameter / gradient / Adam buffers
 * with their table of named views, and the interface the training loop and the evaluation
 * call. The loop never knows which model it runs.
 *
 * Buffers (llm.c's rule): params, grads, Adam m and Adam v are each ONE allocation of
 * num_params floats (grads has CTRAIN_MODEL_GRAD_EXTRA more, see below), described by one table
 * of ctrain_param_t whose names are SASRec.pytorch's state_dict names (item_emb.weight,
 * attention_layers.0.in_proj_weight, forward_layers.0.conv1.weight with shape (C,C,1), ...),
 * so a checkpoint is a plain safetensors state dict, zeroing the gradients is one call, the
 * data-parallel reduction is one call and Adam is one call. Activations live in one arena
 * per model, sized at creation for max_batch rows: nothing is allocated inside a step.
 *
 * Memory is the backend's (ct_ops.h): on the CPU plain host memory; on a GPU device memory, in
 * which case host_mirror holds a host copy for checkpoints (ctrain_model_to_host/from_host).
 *
 * Models ("kinds") plug in through ctrain_model_vtbl_t: a kind builds its parameter table and
 * arena in its create function and implements forward_backward (one micro-batch, gradients
 * accumulated) and forward_features (the final hidden state of column L-1, for evaluation).
 * Two kinds: SASRec and TiSASRec (its batches carry tseq, its attention adds absolute-position
 * and time-interval keys and values); both are built by ctrain_sasrec.c, which shares the block
 * layouts between them. mHC residual streams (mhc_streams > 0) are a variant of the pre_ln
 * layout for either kind: every token carries n copies of the residual stream, mixed around
 * each sub-layer (docs/models.md §7). A third family, the causal language model (--model lm,
 * models/lm/ctrain_lm_family.h), puts its trainable GPT-2 / Qwen2 tensors in the same flat
 * buffers. The training loop never knows which it runs.
 *
 * Randomness: every dropout mask is a function of (seed, optimizer step, dropout site, element
 * index in the optimizer step's global batch) - ctrain_model_dropout_site - so a micro-batch that
 * holds rows row0.. of the global batch (another rank's, or another accumulation chunk's) draws
 * exactly the masks one big batch would, and a resumed run draws what the interrupted one
 * would have.
 *
 * Not here: data loading, negatives, the optimizer schedule, reductions, checkpoint files.
 */
#ifndef CTRAIN_MODEL_H
#define CTRAIN_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "ct_error.h"
#include "ct_ops.h"
#include "ctworker.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A model family's index in the registry (ctrain_registry.c); the named ones are those whose
 * own code tells them apart (the SASRec family builds both). */
typedef enum ctrain_model_kind {
    CTRAIN_MODEL_SASREC = 0,
    CTRAIN_MODEL_TISASREC = 1, /* TiSASRec.pytorch (docs/models.md §3) */
    CTRAIN_MODEL_LM = 2,       /* a GPT-2 or Qwen2 causal LM from a Hugging Face folder */
    CTRAIN_MODEL_GPT2REC = 3,  /* user/item embeddings plus LM text embeddings (gpt2rec/) */
    CTRAIN_MODEL_TEMPORAL = 4, /* the temporal encoder of curves (models/temporal/) */
} ctrain_model_kind_t;

/* The training loss after the final LayerNorm. */
typedef enum ctrain_loss {
    CTRAIN_LOSS_BCE = 0, /* the references': one positive and one sampled negative per position */
    CTRAIN_LOSS_CE = 1,  /* softmax cross-entropy over every item (SASRec+ / BERT4Rec's loss) */
    CTRAIN_LOSS_SAMPLED_CE = 2, /* softmax over the positive and num_negatives per sequence */
    CTRAIN_LOSS_COUNT
} ctrain_loss_t;

/* SASRec's block layouts (docs/models.md §2.3). */
typedef enum ctrain_layout {
    CTRAIN_LAYOUT_POST_LN = 0,  /* (a) HEAD's default: x = LNa(x + MHA(x)); x = LNf(x + FFN(x)) */
    CTRAIN_LAYOUT_PRE_LN = 1,   /* (a') --norm_first: x = x + MHA(LNa(x)); x = x + FFN(LNf(x)) */
    CTRAIN_LAYOUT_ORIGINAL = 2, /* (b) the published checkpoints: q = LNa(x); x = q + MHA(q,x,x);
                               x = LNf(x); x = x + FFN(x); padded position ids (2024) */
    CTRAIN_LAYOUT_ORIGINAL2020 = 3, /* (c) (b) with absolute position ids 0..L-1 (an L-row table)
                                   and the timeline mask after the embedding and every block */
    CTRAIN_LAYOUT_COUNT
} ctrain_layout_t;

typedef struct ctrain_model_cfg {
    ctrain_model_kind_t kind;
    ctrain_layout_t layout; /* TiSASRec: original2020 (its own) or pre_ln; mHC: pre_ln */
    int32_t num_items;      /* I: the item table has I + 1 rows, row 0 = padding */
    int maxlen;             /* L */
    int hidden;             /* C (hidden_units) */
    int num_heads;          /* NH, divides C */
    int num_blocks;
    int mhc_streams; /* n: 0 = a plain residual stream; >= 2 (4 in the seed guide) = mHC */
    int time_span;   /* TiSASRec's interval clip T: R^K and R^V have T + 1 rows (0 for SASRec) */
    float dropout;   /* every dropout site (embedding, attention probabilities, FFN x2, and
                        TiSASRec's position and interval tensors) */
    bool no_skip;    /* never skip padding queries (tests prove skipping changes nothing) */
    /* training details that do not change the parameters */
    ctrain_loss_t loss;
    int num_negatives; /* CTRAIN_LOSS_SAMPLED_CE: negatives per sequence (M) */
    /* A family's own configuration, when the fields above do not describe its model (the LM:
     * a ctrain_lm_model_spec_t, ctrain_lm_family.h), owned by whoever fills cfg; NULL for the
     * SASRec family. Not part of the JSON form. */
    const void *ext;
} ctrain_model_cfg_t;

/* mHC constants (docs/models.md §7): Sinkhorn-Knopp iterations, the RMSNorm epsilon of the
 * flattened streams, and the initial gates alpha. */
#define CTRAIN_MHC_ITERS      20
#define CTRAIN_MHC_RMS_EPS    1e-6f
#define CTRAIN_MHC_ALPHA_INIT 0.01f

#define CTRAIN_MODEL_MAX_BLOCKS    64
#define CTRAIN_MODEL_MAX_LEN       4096
#define CTRAIN_MODEL_MAX_HIDDEN    4096
#define CTRAIN_PARAM_NAME_MAX      96
#define CTRAIN_MODEL_MAX_TIME_SPAN (1 << 20)
/* Floats after the gradients in grads_mem: scalars that travel with the one gradient
 * reduction of a step (the trainer puts the step's local loss sum there). */
#define CTRAIN_MODEL_GRAD_EXTRA 1

/* Layout names: post_ln, pre_ln, original, original2020. */
const char *ctrain_layout_name(ctrain_layout_t layout);
int ctrain_layout_parse(const char *text, ctrain_layout_t *out, ct_errbuf_t *eb);
/* Kind names are the families' names (the registry's); loss names: bce, ce, sampled_ce. */
const char *ctrain_model_kind_name(ctrain_model_kind_t kind);
int ctrain_model_kind_parse(const char *text, ctrain_model_kind_t *out, ct_errbuf_t *eb);
const char *ctrain_loss_name(ctrain_loss_t loss);
int ctrain_loss_parse(const char *text, ctrain_loss_t *out, ct_errbuf_t *eb);

/* Positional-id rule and timeline masking of a layout (SASRec's rules). */
ct_pos_mode_t ctrain_layout_pos_mode(ctrain_layout_t layout);

/* Whether the model zeroes padding rows after the embedding and every block: the 2020 SASRec
 * layout, and TiSASRec always. */
bool ctrain_model_timeline(const ctrain_model_cfg_t *cfg);
/* Rows of pos_emb: L + 1 with padded ids, L with absolute ids (SASRec). */
int ctrain_model_pos_rows(const ctrain_model_cfg_t *cfg);
/* The l2_emb form of the reference: SASRec.pytorch HEAD's lambda * sum w^2 on item_emb, or
 * TiSASRec.pytorch's lambda * ||w|| on each of its five tables. */
ct_l2_mode_t ctrain_model_l2_mode(const ctrain_model_cfg_t *cfg);
/* The reference's name of the configuration: "SASRec", "TiSASRec", "SASRec+mHC", ... */
const char *ctrain_model_title(const ctrain_model_cfg_t *cfg);

/* Checks ranges and consistency (heads divide hidden, ...); one line in eb. */
int ctrain_model_cfg_check(const ctrain_model_cfg_t *cfg, ct_errbuf_t *eb);

/* The configuration as a JSON object {"kind", "layout", "num_items", "maxlen", "hidden_units",
 * "num_heads", "num_blocks", "dropout_rate", "mhc_streams", "time_span"} (new reference), and
 * back ("mhc_streams" and "time_span" may be absent: 0, as checkpoints from before them). */
json_t *ctrain_model_cfg_to_json(const ctrain_model_cfg_t *cfg);
int ctrain_model_cfg_from_json(const json_t *obj, ctrain_model_cfg_t *cfg, ct_errbuf_t *eb);

/* Whether a and b describe the same parameters and computation (dropout, no_skip, the loss and
 * num_negatives are training details and do not count). Returns NULL when they agree, else the name
 * of the first field that differs, and writes "field: a vs b" into what (size bytes). */
const char *ctrain_model_cfg_diff(const ctrain_model_cfg_t *a, const ctrain_model_cfg_t *b,
                                  char *what, size_t size);

typedef struct ctrain_model ctrain_model_t;

/* ---- model families: the registry ---------------------------------------------------------
 * A family is what the shared trainer (loop, evaluation, checkpoints, flags) needs to know about
 * one kind of model beyond the ctrain_model_t interface below: its name, what its data must
 * carry, how it is evaluated, the defaults of the flags a user leaves unset, how to build it, and
 * which backends can run its shapes. The trainer asks the family; it never tests the kind.
 * Adding a family: its code in a file or folder under models/ that defines its descriptor, and
 * one entry in the table of ctrain_registry.c; what the trainer does with it (its data, batches,
 * evaluation and outputs) is its task, one entry in the table of ctrain_train.c
 * (ctrain_train_internal.h's ctrain_task_t). */
typedef struct ctrain_family {
    const char *name;  /* the --model value and the checkpoint's "kind" */
    const char *title; /* "SASRec": the reference's name */
    ctrain_model_kind_t kind;
    /* data and evaluation */
    bool uses_times;           /* batches carry the dataset's scaled times, which must exist */
    int min_eval_len;          /* interactions a user needs for a validation and a test item */
    bool eval_excludes_target; /* the sampled protocol never draws the target as a negative */
    /* defaults of the flags a user leaves unset */
    ctrain_layout_t layout; /* without mHC (which wraps pre_ln) */
    unsigned layouts;       /* the layouts it runs without mHC: bit (1u << layout) */
    int maxlen, num_epochs;
    int eval_every; /* --eval_every when not given; 0: ctrain's default (20) */
    double l2_emb;
    bool has_time_span; /* takes --time_span */
    /* The model: fills m->params (ctrain_model__param_add), sets m->vt and m->impl (its arena
     * from m->ops); m->cfg, ops and max_batch are set, the flat buffers come afterwards. */
    int (*build)(ctrain_model_t *m, ct_errbuf_t *eb);
    /* Whether ops' kernels take the configuration's shapes (ct_ops_t.limits): one line naming
     * the limits, before any step runs; NULL when any shape runs everywhere. */
    int (*check_backend)(const ctrain_model_cfg_t *mc, const ct_ops_t *ops, ct_errbuf_t *eb);
    /* The configuration's own check (ctrain_model_create calls it), or NULL for
     * ctrain_model_cfg_check (SASRec's fields). */
    int (*check_cfg)(const ctrain_model_cfg_t *mc, ct_errbuf_t *eb);
    bool takes_mhc;    /* --mhc applies (the SASRec family); otherwise it is off and refused */
    bool own_weights;  /* --inference_only evaluates the weights the family loads itself (the
                          LM's --lm_dir): --state_dict_path is optional */
    int batch_size;    /* --batch_size when not given; 0: ctrain's default */
    double adam_beta2; /* Adam's beta2; 0: SASRec's CT_SASREC_ADAM_BETA2 */
    bool cpu_only;     /* its passes run on host memory only: --device auto means the CPU */
    /* What ctrain_model_load_params's errors advise checking when a state dict's tensor is
     * missing or of another shape ("check --embed_dim, ..."); NULL: SASRec's flags. */
    const char *state_dict_hint;
} ctrain_family_t;

/* The family of a kind, or NULL for an unknown kind. */
const ctrain_family_t *ctrain_family(ctrain_model_kind_t kind);

/* ---- the parameter table ---------------------------------------------------------------- */

typedef enum ctrain_param_init {
    CTRAIN_INIT_XAVIER_NORMAL = 0, /* N(0, 2 / (fan_in + fan_out)), torch.nn.init.xavier_normal_ */
    CTRAIN_INIT_FANIN_UNIFORM = 1, /* U(+-1/sqrt(fan_in)), PyTorch's default for a Conv1d bias */
    CTRAIN_INIT_ZEROS = 2,
    CTRAIN_INIT_ONES = 3,
    CTRAIN_INIT_XAVIER_UNIFORM = 4, /* U(+-sqrt(6 / (fan_in + fan_out))), xavier_uniform_ */
    CTRAIN_INIT_CONSTANT = 5,       /* every element init_value */
    CTRAIN_INIT_MHC_BIAS = 6,       /* an mHC layer's static biases; see ctrain_model_init_params */
    CTRAIN_INIT_NORMAL = 7,         /* N(0, init_value^2): torch.randn(...) * init_value */
} ctrain_param_init_t;

typedef struct ctrain_param {
    char name[CTRAIN_PARAM_NAME_MAX]; /* the state_dict name */
    int ndim;
    int64_t shape[3];
    size_t offset; /* in floats, into params_mem (and grads_mem, m_mem, v_mem) */
    size_t numel;
    ctrain_param_init_t init;
    int fan_in;       /* for CTRAIN_INIT_FANIN_UNIFORM */
    float init_value; /* for CTRAIN_INIT_CONSTANT */
    int init_index;   /* for CTRAIN_INIT_MHC_BIAS: the mHC layer (0, 1, ... in network order) */
    bool zero_row0;   /* a padding row re-zeroed after initialisation (padding_idx = 0) */
    bool l2;          /* part of the l2_emb regulariser */
    int block;        /* the gradient is final once block `block`'s backward is done (the final
                         LayerNorm: num_blocks); -1: only at the end of the backward pass (the
                         embedding tables, and tables every block writes) */
} ctrain_param_t;

/* ---- the model -------------------------------------------------------------------------- */

/* One micro-batch, host memory. Rows are users; every (B,L) array is left-padded. */
typedef struct ctrain_model_batch {
    int B;                  /* rows, <= max_batch */
    const int32_t *seq;     /* (B,L) input items */
    const int32_t *pos;     /* (B,L) next-item targets, 0 = none */
    const int32_t *neg;     /* (B,L) one sampled negative per target (BCE) */
    const int64_t *tseq;    /* (B,L) scaled times (TiSASRec; NULL for SASRec) */
    const int32_t *row_neg; /* (B, num_negatives) a sequence's negatives (sampled CE), or NULL */
    int64_t row0;           /* index of row 0 in the optimizer step's global batch */
} ctrain_model_batch_t;

typedef struct ctrain_model ctrain_model_t;

typedef struct ctrain_model_vtbl {
    /* Forward and backward of one micro-batch: the loss contribution
     * sum_{positions with a target} (softplus(-r+) + softplus(r-)) / count goes to *loss
     * (host), gradients are ADDED to grads_mem. count is the number of targets of the whole
     * optimizer step (all micro-batches, all ranks), so the summed gradients are those of the
     * global batch's mean loss. Dropout keyed by (seed, step, site, row0 + row). */
    int (*forward_backward)(ctrain_model_t *m, const ctrain_model_batch_t *b, float count,
                            uint64_t seed, int64_t step, float *loss);
    /* Dropout-free forward of B rows (seq, tseq as in ctrain_model_batch_t); *feats points at the
     * final hidden state of row 0, column L-1, in backend memory; row r's is at feats + r*ldf.
     * Valid until the next call on m. */
    int (*forward_features)(ctrain_model_t *m, const int32_t *seq, const int64_t *tseq, int B,
                            const float **feats, int *ldf);
    /* The logits of the last forward_backward, (B*L) each, into host buffers (BCE only: the
     * cross-entropy losses keep no per-position logits; -EINVAL for them). */
    int (*logits)(ctrain_model_t *m, float *pos_logits, float *neg_logits, int64_t n);
    void (*destroy)(ctrain_model_t *m); /* frees impl */
} ctrain_model_vtbl_t;

struct ctrain_model {
    ctrain_model_cfg_t cfg;
    ct_ops_t *ops;
    const ctrain_model_vtbl_t *vt;
    int max_batch; /* rows one micro-batch may have */

    ctrain_param_t *params; /* the table, n_params entries, in state_dict order */
    int n_params;
    size_t num_params; /* floats in the flat buffers */

    float *params_mem;  /* (num_params) backend memory */
    float *grads_mem;   /* (num_params + CTRAIN_MODEL_GRAD_EXTRA) */
    float *m_mem;       /* (num_params) Adam first moment */
    float *v_mem;       /* (num_params) Adam second moment */
    float *scalars;     /* (4) backend scratch for scalar results (penalty, sum of squares) */
    float *host_mirror; /* (3 * num_params) host copy of params, m, v; NULL with host memory */

    /* A second learning rate (a family's own, set by its build): floats from lr2_from on are
     * stepped with lr * lr2_ratio; lr2_ratio 0: one learning rate for the whole buffer. */
    size_t lr2_from;
    double lr2_ratio;

    char *view_names; /* storage for the checkpoint view names */
    /* AdamW's decoupled weight decay (params *= 1 - lr * weight_decay before the update, the op
     * table's scale on any backend; 0: none, Adam). Set by the family's build; beta2 is the
     * family's (ctrain_family_t.adam_beta2). */
    double weight_decay;
    void *impl; /* the kind's state: activation arena and offsets */

    /* Early gradient readiness (the data-parallel reduction overlapped with backward): when
     * set, forward_backward calls grads_ready on the host, in backward order, each time the
     * gradients of more tensors are final in stream order (ctrain_model_grads_ready), with their
     * flat ranges {offset, length} merged where adjacent. A non-zero return is kept in
     * ready_rc and reported by forward_backward. Set by the training loop for the last
     * micro-batch of an optimizer step only (earlier ones leave gradients to accumulate). */
    int (*grads_ready)(void *ctx, float *grads, const int64_t (*ranges)[2], int n);
    void *grads_ready_ctx;
    int ready_upto;             /* blocks >= this one were reported in this pass */
    int ready_rc;               /* the first non-zero grads_ready result of the pass */
    int64_t (*ready_ranges)[2]; /* scratch, n_params entries */
};

/* Creates a model of cfg on ops for micro-batches of up to max_batch rows: the table, the
 * flat buffers (zeroed) and the arena. Returns 0, -EINVAL (bad cfg, eb says why) or -ENOMEM. */
int ctrain_model_create(ctrain_model_t **out, const ctrain_model_cfg_t *cfg, ct_ops_t *ops,
                        int max_batch, ct_errbuf_t *eb);
void ctrain_model_destroy(ctrain_model_t *m); /* NULL is fine */

/* The references' initialisation drawn from Philox keyed by seed (one stream per tensor).
 * SASRec.pytorch (docs/models.md §2.1): xavier_normal_ on every tensor with >= 2 dims, Conv1d
 * biases U(+-1/sqrt(C)), attention biases 0, LayerNorm 1 / 0, padding rows zeroed.
 * TiSASRec.pytorch (§3.5): xavier_uniform_ on every tensor with >= 2 dims (the item table's
 * padding row included, as there), Linear and Conv1d biases U(+-1/sqrt(C)), LayerNorm 1 / 0.
 * mHC (§7.3): phi 0, alpha 0.01, and biases that make every mHC layer start as the plain Pre-LN
 * residual it replaces: H^post = 2 sigmoid(0) = 1 for every stream, H^res = Sinkhorn of a
 * matrix with 0 on the diagonal and -8 off it (identity to 1e-3), and H^pre picking stream
 * (layer index mod n) - sigmoid values (0.97, 0.01, ...) that sum to exactly 1, so that while
 * the n streams are equal copies (the embedding, replicated) the sub-layer input is that copy.
 * Adam m and v are zeroed. Deterministic in (cfg, seed), whatever the backend. */
int ctrain_model_init_params(ctrain_model_t *m, uint64_t seed);

/* The table entry called name, or NULL. */
const ctrain_param_t *ctrain_model_find(const ctrain_model_t *m, const char *name);

/* grads_mem <- 0 (all num_params + CTRAIN_MODEL_GRAD_EXTRA floats). */
void ctrain_model_zero_grad(ctrain_model_t *m);

static inline int ctrain_model_forward_backward(ctrain_model_t *m, const ctrain_model_batch_t *b,
                                                float count, uint64_t seed, int64_t step,
                                                float *loss)
{
    m->ready_upto = m->cfg.num_blocks + 1;
    m->ready_rc = 0;
    int rc = m->vt->forward_backward(m, b, count, seed, step, loss);
    return rc != 0 ? rc : m->ready_rc;
}

/* For the kinds' backward passes: every tensor whose block is >= block (and not reported yet in
 * this pass) now has its final gradient queued on the backend's stream; tells grads_ready, if
 * set. */
void ctrain_model_grads_ready(ctrain_model_t *m, int block);

static inline int ctrain_model_forward_features(ctrain_model_t *m, const int32_t *seq,
                                                const int64_t *tseq, int B, const float **feats,
                                                int *ldf)
{
    return m->vt->forward_features(m, seq, tseq, B, feats, ldf);
}

/* The item table (backend memory, (I+1, C)), which scores candidates. */
const float *ctrain_model_item_table(const ctrain_model_t *m);

/* The l2_emb term on every tensor flagged l2: adds its gradient to grads_mem and returns the
 * penalty (host) in *penalty. lambda == 0 adds nothing and gives 0. */
int ctrain_model_l2(ctrain_model_t *m, float lambda, ct_l2_mode_t mode, float *penalty);

/* Sum of squares of the gradients (the square of the global gradient norm), host. */
int ctrain_model_grad_sumsq(ctrain_model_t *m, float *sumsq);

/* One Adam step (beta 0.9, 0.98 - or the family's adam_beta2 -, eps 1e-8: CT_SASREC_ADAM_*, with
 * the model's AdamW weight decay when set) over the whole flat buffer (lr, and lr * lr2_ratio
 * past lr2_from) with g = grads * grad_scale; t counts Adam updates from 1. */
int ctrain_model_adam(ctrain_model_t *m, double lr, float grad_scale, int64_t t);

/* The dropout configuration of one site: stream (seed, CT_RNG_STREAM(CTRAIN_RNG_PURPOSE_DROPOUT,
 * step << 8 | site)), offset row0 * per_row (per_row = elements of the site's tensor per
 * sequence). Sites: 0 the embedding, 1 + 3l block l's attention probabilities, 2 + 3l and
 * 3 + 3l its two FFN dropouts; TiSASRec's four gathered tensors, shared by all blocks as in the
 * reference: CTRAIN_SITE_ABS_POS_K / _V ((B,L,C), per_row L*C) and CTRAIN_SITE_TIME_K / _V
 * ((B,L,L,C), per_row L*L*C). p == 0 gives the identity. */
#define CTRAIN_RNG_PURPOSE_DROPOUT 256u
#define CTRAIN_SITE_ABS_POS_K      252
#define CTRAIN_SITE_ABS_POS_V      253
#define CTRAIN_SITE_TIME_K         254
#define CTRAIN_SITE_TIME_V         255
static inline ct_dropout_t ctrain_model_dropout_site(float p, uint64_t seed, int64_t step, int site,
                                                     int64_t row0, int64_t per_row)
{
    ct_dropout_t d = {
        p, seed, CT_RNG_STREAM(CTRAIN_RNG_PURPOSE_DROPOUT, ((uint64_t)step << 8) | (uint64_t)site),
        (uint64_t)(row0 * per_row)};
    return d;
}

/* ---- checkpoint views ----------------------------------------------------------------------
 * Views over the flat buffers, for ct_ckpt_save / ct_st_read: the parameters under their
 * state_dict names, Adam's moments under "optimizer.exp_avg.<name>" and
 * "optimizer.exp_avg_sq.<name>" (torch.optim.Adam's state names). With a non-host backend the
 * views point into host_mirror: call ctrain_model_to_host before saving and ctrain_model_from_host
 * after loading. */
#define CTRAIN_MODEL_VIEW_PARAMS 0x1u
#define CTRAIN_MODEL_VIEW_ADAM   0x2u

/* Fills views (room for 3 * n_params) and returns how many it wrote. */
size_t ctrain_model_views(ctrain_model_t *m, unsigned which, ct_tensor_view_t *views);
int ctrain_model_to_host(ctrain_model_t *m);
int ctrain_model_from_host(ctrain_model_t *m);

/* Loads parameters (only) from a safetensors file that uses SASRec.pytorch's names - a ctrain
 * checkpoint or a converted .pth. Every parameter must be present with its shape, except that
 * pos_emb.weight (SASRec.pytorch fixed its table at 201 rows for a while) and
 * time_matrix_K_emb.weight (TiSASRec.pytorch sized it by the item count for a while; rows past
 * time_span are never indexed) may have more rows than this model uses: the first rows are
 * taken. Other tensors in the file (optimizer state) are ignored but CRC-checked. Errors name
 * the file and the tensor, and say what to check (the family's state_dict_hint). */
int ctrain_model_load_params(ctrain_model_t *m, const char *path, ct_errbuf_t *eb);
/* The same, except that when the file has no tensor whose name starts with optional_prefix,
 * the parameters under that prefix are not read and keep their values (the GPT-2 recommender's
 * fine-tuned LM, "gpt2.", absent from a cached-mode state dict); *skipped (may be NULL) says
 * whether they were. optional_prefix NULL: ctrain_model_load_params. */
int ctrain_model_load_params_opt(ctrain_model_t *m, const char *path, const char *optional_prefix,
                                 bool *skipped, ct_errbuf_t *eb);

/* Reads what a SASRec or TiSASRec state dict says about its model: the kind (TiSASRec has
 * abs_pos_K_emb.weight), hidden_units (item_emb.weight's columns), num_items (its rows - 1),
 * num_blocks (the attention_layers.N entries), mHC streams (attention_hc.0.phi's rows /
 * hidden_units), TiSASRec's maxlen and time_span (abs_pos_K_emb.weight's rows, and
 * time_matrix_V_emb.weight's rows - 1), and SASRec's pos_emb rows into *pos_rows. Fields the
 * file cannot tell (layout, heads, SASRec's maxlen, dropout) are left as they are. */
int ctrain_model_cfg_from_state_dict(const char *path, ctrain_model_cfg_t *cfg, int *pos_rows,
                                     ct_errbuf_t *eb);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_MODEL_H */
