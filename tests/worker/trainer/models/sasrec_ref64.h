/*
 * sasrec_ref64.h - an independent float64 forward pass of SASRec, TiSASRec and their mHC
 * variants for the whole-model tests: the naive reference ops of tests/kernels/ref64.h composed
 * by the equations of docs/models.md (§2.3 block layouts, §3 TiSASRec as TiSASRec.pytorch
 * computes it - materialised (B,L,L,C) interval tensors, padding query rows with uniform
 * weights - §7 mHC), reading the real model's parameters by their state_dict names (never by
 * the model's internal offsets), with the dropout masks of ctrain_model_dropout_site. It shares no
 * code with worker/ctrain_sasrec.c, so a gradient check of that file against finite differences of
 * this one tests the model, not a copy of it. Test code: allocates freely, forward only.
 */
#ifndef SASREC_REF64_H
#define SASREC_REF64_H

#include <stdbool.h>
#include <stdint.h>

#include "ctrain_model.h"

/* One micro-batch for the reference: as ctrain_model_batch_t, plus the loss normaliser and the
 * dropout keying. */
typedef struct ref_batch {
    int B;
    const int32_t *seq, *pos, *neg; /* (B,L); pos/neg NULL: features only */
    const int64_t *tseq;            /* (B,L) TiSASRec */
    const int32_t *row_neg;         /* (B, num_negatives) sampled cross-entropy */
    double count;
    uint64_t seed;
    int64_t step, row0;
    bool dropout;
} ref_batch_t;

/* The loss of the model's cfg.loss over B rows (the model's forward_backward's *loss, without
 * l2_emb) with parameters W (a float64 copy of m's flat params), and the BCE logits (B*L each,
 * may be NULL). feats (B,C), may be NULL: the final hidden state of column L-1 of each row. */
double sasrec_ref_forward(const ctrain_model_t *m, const double *W, const ref_batch_t *b,
                          double *pos_logits, double *neg_logits, double *feats);

#endif /* SASREC_REF64_H */
