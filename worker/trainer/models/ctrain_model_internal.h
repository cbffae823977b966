/*
 * ctrain_model_internal.h - what the model kinds (ctrain_sasrec.c: SASRec and TiSASRec) share with
 * the generic model code of ct_model.c, and nothing else: building the parameter table and carving
 * an activation arena. Not for the trainer.
 */
#ifndef CTRAIN_MODEL_INTERNAL_H
#define CTRAIN_MODEL_INTERNAL_H

#include <stddef.h>

#include "ctrain_model.h"

/* Appends a parameter to m's table (offsets assigned in order). shape has ndim entries.
 * Returns a pointer to the entry (valid until the next append) or NULL on out-of-memory. */
ctrain_param_t *ct__param_add(ctrain_model_t *m, const char *name, int ndim, const int64_t *shape,
                              ctrain_param_init_t init);

/* The kinds' create function (both kinds, any layout, with or without mHC): fills m->params
 * (through ct__param_add), sets m->vt and m->impl with its arena allocated through m->ops.
 * m->cfg, ops and max_batch are set; the flat buffers are allocated afterwards by
 * ctrain_model_create. */
int ct__sasrec_build(ctrain_model_t *m, ct_errbuf_t *eb);

/* Sub-allocation of one arena: run a layout function once with base == NULL to learn the
 * size, allocate, run it again with the base. Every piece is 64-byte aligned. */
typedef struct ct__carve {
    char *base;
    size_t used;
} ct__carve_t;

static inline void *ct__carve_take(ct__carve_t *c, size_t nbytes)
{
    size_t off = c->used;
    c->used += (nbytes + 63) / 64 * 64;
    return c->base ? (void *)(c->base + off) : NULL;
}

#define CT__CARVE_F32(c, n) ((float *)ct__carve_take((c), (size_t)(n) * sizeof(float)))
#define CT__CARVE_I32(c, n) ((int32_t *)ct__carve_take((c), (size_t)(n) * sizeof(int32_t)))
#define CT__CARVE_I64(c, n) ((int64_t *)ct__carve_take((c), (size_t)(n) * sizeof(int64_t)))

#endif /* CTRAIN_MODEL_INTERNAL_H */
