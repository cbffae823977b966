/*
 * ctrain_registry.c - the model families ctrain knows (ctrain_model.h's registry): one table
 * entry per family, in kind order, and the lookups by kind and by name. A family's descriptor
 * lives with its code (models/<family>/); this file only lists them.
 */
#include "ctrain_model.h"

#include <stdio.h>
#include <string.h>

/* The descriptors, defined by the families' own files. */
extern const ctrain_family_t ctrain_sasrec_family;   /* models/sasrec/ctrain_sasrec.c */
extern const ctrain_family_t ctrain_tisasrec_family; /* models/sasrec/ctrain_sasrec.c */
extern const ctrain_family_t ctrain_lm_family;       /* models/lm/ctrain_lm_family.c */
extern const ctrain_family_t ctrain_gpt2rec_family;  /* models/gpt2rec/ctrain_gpt2rec.c */
extern const ctrain_family_t ctrain_temporal_family; /* models/temporal/ctrain_temporal.c */

static const ctrain_family_t *const ctrain_registry__table[] = {
    [CTRAIN_MODEL_SASREC] = &ctrain_sasrec_family,
    [CTRAIN_MODEL_TISASREC] = &ctrain_tisasrec_family,
    [CTRAIN_MODEL_LM] = &ctrain_lm_family,
    [CTRAIN_MODEL_GPT2REC] = &ctrain_gpt2rec_family,
    [CTRAIN_MODEL_TEMPORAL] = &ctrain_temporal_family,
};

#define CTRAIN_REGISTRY__N (sizeof ctrain_registry__table / sizeof ctrain_registry__table[0])

const ctrain_family_t *ctrain_family(ctrain_model_kind_t kind)
{
    return (unsigned)kind < CTRAIN_REGISTRY__N ? ctrain_registry__table[kind] : NULL;
}
static const ctrain_family_t *ctrain_family_find(const char *name)
{
    for (size_t i = 0; i < CTRAIN_REGISTRY__N; i++)
        if (strcmp(ctrain_registry__table[i]->name, name) == 0)
            return ctrain_registry__table[i];
    return NULL;
}
static const char *ctrain_family_names(void)
{
    static char names[256];
    if (names[0] == '\0') {
        size_t used = 0;
        for (size_t i = 0; i < CTRAIN_REGISTRY__N && used < sizeof names; i++) {
            const char *sep = i == 0 ? "" : i + 1 == CTRAIN_REGISTRY__N ? " or " : ", ";
            int n = snprintf(names + used, sizeof names - used, "%s%s", sep,
                             ctrain_registry__table[i]->name);
            used += n > 0 ? (size_t)n : 0;
        }
    }
    return names;
}

const char *ctrain_model_kind_name(ctrain_model_kind_t kind)
{
    const ctrain_family_t *f = ctrain_family(kind);
    return f != NULL ? f->name : "?";
}

int ctrain_model_kind_parse(const char *text, ctrain_model_kind_t *out, ct_errbuf_t *eb)
{
    const ctrain_family_t *f = ctrain_family_find(text);
    if (f == NULL)
        return ct_errbuf_set(eb, CT_EPARSE, "\"%s\" is not a model (expected %s)", text,
                             ctrain_family_names());
    *out = f->kind;
    return 0;
}
