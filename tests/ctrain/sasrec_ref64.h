/*
 * sasrec_ref64.h - an independent float64 forward pass of SASRec for the whole-model tests:
 * the naive reference ops of tests/kernels/ref64.h composed by the block equations of
 * sasrec-spec.md 2.3, reading the real model's parameters by their state_dict names (never by
 * the model's internal offsets), with the dropout masks of ct_model_dropout_site. It shares no
 * code with worker/ct_sasrec.c, so a gradient check of that file against finite differences of
 * this one tests the model, not a copy of it. Test code: allocates freely, forward only.
 */
#ifndef SASREC_REF64_H
#define SASREC_REF64_H

#include <stdint.h>

#include "ct_model.h"

/* The BCE loss of B rows (the model's forward_backward's *loss, without l2_emb) with
 * parameters W (a float64 copy of m's flat params), and the logits (B*L each, may be NULL).
 * Dropout as the model draws it for (seed, step) with the rows at row0.. of the global batch.
 * feats (B,C), may be NULL: the final hidden state of column L-1 of each row. */
double sasrec_ref_forward(const ct_model_t *m, const double *W, const int32_t *seq,
                          const int32_t *pos, const int32_t *neg, int B, double count,
                          uint64_t seed, int64_t step, int64_t row0, bool dropout,
                          double *pos_logits, double *neg_logits, double *feats);

#endif /* SASREC_REF64_H */
