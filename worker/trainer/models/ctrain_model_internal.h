/*
 * ctrain_model_internal.h - what the model kinds (ctrain_sasrec.c: SASRec and TiSASRec) share with
 * the generic model code of ctrain_model.c, and nothing else: building the parameter table and
 * carving an activation arena. Not for the trainer.
 */
#ifndef CTRAIN_MODEL_INTERNAL_H
#define CTRAIN_MODEL_INTERNAL_H

#include <stddef.h>

#include "ctrain_model.h"

/* Appends a parameter to m's table (offsets assigned in order). shape has ndim entries.
 * Returns a pointer to the entry (valid until the next append) or NULL on out-of-memory. */
ctrain_param_t *ctrain_model__param_add(ctrain_model_t *m, const char *name, int ndim,
                                        const int64_t *shape, ctrain_param_init_t init);

/* Sub-allocation of one arena: run a layout function once with base == NULL to learn the
 * size, allocate, run it again with the base. Every piece is 64-byte aligned. */
typedef struct ctrain_model__carve {
    char *base;
    size_t used;
} ctrain_model__carve_t;

static inline void *ctrain_model__carve_take(ctrain_model__carve_t *c, size_t nbytes)
{
    size_t off = c->used;
    c->used += (nbytes + 63) / 64 * 64;
    return c->base ? (void *)(c->base + off) : NULL;
}

#define CTRAIN_MODEL__CARVE_F32(c, n) \
    ((float *)ctrain_model__carve_take((c), (size_t)(n) * sizeof(float)))
#define CTRAIN_MODEL__CARVE_I32(c, n) \
    ((int32_t *)ctrain_model__carve_take((c), (size_t)(n) * sizeof(int32_t)))
#define CTRAIN_MODEL__CARVE_I64(c, n) \
    ((int64_t *)ctrain_model__carve_take((c), (size_t)(n) * sizeof(int64_t)))

#endif /* CTRAIN_MODEL_INTERNAL_H */
