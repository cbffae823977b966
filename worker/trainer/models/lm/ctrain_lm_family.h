/*
 * ctrain_lm_family.h - the language model as a ctrain model family (--model lm): a
 * ctrain_model_t whose parameter table is the TRAINABLE tensors of a GPT-2 or Qwen2 decoder
 * under their transformers names, so that the trainer's flat parameter, gradient and Adam
 * buffers, its one gradient reduction, Adam, checkpoints and exact resume work unchanged.
 * Frozen tensors (name prefixes) are not in the table: they live in a parameter-only buffer of
 * their own (no gradient, no Adam moments, not reduced, not in the checkpoint's views); the
 * passes still send gradients through them to the inputs.
 *
 * A micro-batch (ctrain_model_batch_t) carries token ids in seq and next-token targets in pos,
 * (B, maxlen) each, rows right-padded, targets < 0 for none; a pass runs on the columns up to
 * the last target of any row.
 *
 * Not here: the passes (ctrain_lm.c), the text data, evaluation and outputs (the trainer's task,
 * ctrain_lm_task.c).
 */
#ifndef CTRAIN_LM_FAMILY_H
#define CTRAIN_LM_FAMILY_H

#include "ctrain_lm.h"
#include "ctrain_model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CTRAIN_LM_FREEZE_MAX 1024

/* What ctrain_model_cfg_t.ext points at for CTRAIN_MODEL_LM. The model cfg's maxlen is the
 * tokens per row (<= cfg.max_pos); hidden, num_heads and num_blocks mirror cfg's for messages. */
typedef struct ctrain_lm_model_spec {
    ctrain_lm_cfg_t cfg;
    char freeze[CTRAIN_LM_FREEZE_MAX]; /* comma-separated tensor-name prefixes, "" for none */
    bool recompute; /* activation recomputation (ctrain_lm_opts_t.recompute) */
} ctrain_lm_model_spec_t;

/* The decoder of a CTRAIN_MODEL_LM model with its buffers bound to m's (valid until m is
 * destroyed). */
ctrain_lm_t *ctrain_lm_family_lm(ctrain_model_t *m);

/* Floats of the frozen tensors' buffer (0 when nothing is frozen). */
size_t ctrain_lm_family_frozen_floats(const ctrain_model_t *m);

/* Forward only of B rows of L tokens (L <= maxlen): *sum = the sum over targets of the
 * next-token cross-entropy, *count the number of targets. eb says what failed. */
int ctrain_lm_family_eval(ctrain_model_t *m, const int32_t *ids, const int32_t *tgt, int B, int L,
                          double *sum, ct_errbuf_t *eb);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_LM_FAMILY_H */
