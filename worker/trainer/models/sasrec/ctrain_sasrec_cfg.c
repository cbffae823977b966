/*
 * ctrain_sasrec_cfg.c - the SASRec family's configuration (ctrain_model.h): layout, loss and
 * kind names, the layouts' position and timeline rules, the l2_emb form, checks, the JSON a
 * checkpoint carries and the comparison a resume makes, and what a SASRec.pytorch or
 * TiSASRec.pytorch state dict says about its model. The passes are in ctrain_sasrec.c.
 */
#include "ctrain_model.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---- configuration ------------------------------------------------------------------------- */

static const char *const ctrain_sasrec_cfg__layout_names[CTRAIN_LAYOUT_COUNT] = {
    [CTRAIN_LAYOUT_POST_LN] = "post_ln",
    [CTRAIN_LAYOUT_PRE_LN] = "pre_ln",
    [CTRAIN_LAYOUT_ORIGINAL] = "original",
    [CTRAIN_LAYOUT_ORIGINAL2020] = "original2020",
};

const char *ctrain_layout_name(ctrain_layout_t layout)
{
    return (unsigned)layout < CTRAIN_LAYOUT_COUNT ? ctrain_sasrec_cfg__layout_names[layout] : "?";
}

int ctrain_layout_parse(const char *text, ctrain_layout_t *out, ct_errbuf_t *eb)
{
    for (int i = 0; i < CTRAIN_LAYOUT_COUNT; i++) {
        if (strcmp(text, ctrain_sasrec_cfg__layout_names[i]) == 0) {
            *out = (ctrain_layout_t)i;
            return 0;
        }
    }
    return ct_errbuf_set(eb, CT_EPARSE,
                         "\"%s\" is not a layout (expected post_ln, pre_ln, original or "
                         "original2020)",
                         text);
}

static const char *const ctrain_sasrec_cfg__loss_names[CTRAIN_LOSS_COUNT] = {
    [CTRAIN_LOSS_BCE] = "bce",
    [CTRAIN_LOSS_CE] = "ce",
    [CTRAIN_LOSS_SAMPLED_CE] = "sampled_ce",
};

const char *ctrain_loss_name(ctrain_loss_t loss)
{
    return (unsigned)loss < CTRAIN_LOSS_COUNT ? ctrain_sasrec_cfg__loss_names[loss] : "?";
}

int ctrain_loss_parse(const char *text, ctrain_loss_t *out, ct_errbuf_t *eb)
{
    for (int i = 0; i < CTRAIN_LOSS_COUNT; i++) {
        if (strcmp(text, ctrain_sasrec_cfg__loss_names[i]) == 0) {
            *out = (ctrain_loss_t)i;
            return 0;
        }
    }
    return ct_errbuf_set(eb, CT_EPARSE, "\"%s\" is not a loss (expected bce, ce or sampled_ce)",
                         text);
}

ct_pos_mode_t ctrain_layout_pos_mode(ctrain_layout_t layout)
{
    return layout == CTRAIN_LAYOUT_ORIGINAL2020 ? CT_POS_ABSOLUTE : CT_POS_PADDED;
}
static bool ctrain_layout_timeline(ctrain_layout_t layout)
{
    return layout == CTRAIN_LAYOUT_ORIGINAL2020;
}

bool ctrain_model_timeline(const ctrain_model_cfg_t *cfg)
{
    return cfg->kind == CTRAIN_MODEL_TISASREC || ctrain_layout_timeline(cfg->layout);
}

int ctrain_model_pos_rows(const ctrain_model_cfg_t *cfg)
{
    return ctrain_layout_pos_mode(cfg->layout) == CT_POS_PADDED ? cfg->maxlen + 1 : cfg->maxlen;
}

ct_l2_mode_t ctrain_model_l2_mode(const ctrain_model_cfg_t *cfg)
{
    return cfg->kind == CTRAIN_MODEL_TISASREC ? CT_L2_NORM : CT_L2_SQUARED;
}

const char *ctrain_model_title(const ctrain_model_cfg_t *cfg)
{
    bool ti = cfg->kind == CTRAIN_MODEL_TISASREC;
    if (cfg->mhc_streams > 0)
        return ti ? "TiSASRec+mHC" : "SASRec+mHC";
    return ti ? "TiSASRec" : "SASRec";
}

int ctrain_model_cfg_check(const ctrain_model_cfg_t *c, ct_errbuf_t *eb)
{
    if (ctrain_family(c->kind) == NULL)
        return ct_errbuf_set(eb, -EINVAL, "model kind %d is not known", (int)c->kind);
    if ((unsigned)c->layout >= CTRAIN_LAYOUT_COUNT)
        return ct_errbuf_set(eb, -EINVAL, "layout %d is not known", (int)c->layout);
    if (c->mhc_streams != 0 && (c->mhc_streams < 2 || c->mhc_streams > CT_MHC_MAX_STREAMS))
        return ct_errbuf_set(eb, -EINVAL, "mHC streams %d out of range (2..%d, or 0 for none)",
                             c->mhc_streams, CT_MHC_MAX_STREAMS);
    if (c->mhc_streams > 0 && c->layout != CTRAIN_LAYOUT_PRE_LN)
        return ct_errbuf_set(
            eb, -EINVAL,
            "mHC wraps the sub-layers of the pre_ln layout, not %s (docs/models.md "
            "§7.4: the other layouts have no clean identity path)",
            ctrain_layout_name(c->layout));
    if (c->kind == CTRAIN_MODEL_TISASREC) {
        if (c->layout != CTRAIN_LAYOUT_ORIGINAL2020 && c->layout != CTRAIN_LAYOUT_PRE_LN)
            return ct_errbuf_set(eb, -EINVAL,
                                 "TiSASRec runs its reference's layout (original2020) or pre_ln, "
                                 "not %s",
                                 ctrain_layout_name(c->layout));
        if (c->time_span < 1 || c->time_span > CTRAIN_MODEL_MAX_TIME_SPAN)
            return ct_errbuf_set(eb, -EINVAL, "time_span %d out of range (1..%d)", c->time_span,
                                 CTRAIN_MODEL_MAX_TIME_SPAN);
    }
    if ((unsigned)c->loss >= CTRAIN_LOSS_COUNT)
        return ct_errbuf_set(eb, -EINVAL, "loss %d is not known", (int)c->loss);
    if (c->loss == CTRAIN_LOSS_SAMPLED_CE && (c->num_negatives < 1 || c->num_negatives > 1000000))
        return ct_errbuf_set(eb, -EINVAL, "num_negatives %d out of range (1..1000000)",
                             c->num_negatives);
    if (c->num_items < 1)
        return ct_errbuf_set(eb, -EINVAL, "the dataset has no items");
    if (c->maxlen < 1 || c->maxlen > CTRAIN_MODEL_MAX_LEN)
        return ct_errbuf_set(eb, -EINVAL, "maxlen %d out of range (1..%d)", c->maxlen,
                             CTRAIN_MODEL_MAX_LEN);
    if (c->hidden < 1 || c->hidden > CTRAIN_MODEL_MAX_HIDDEN)
        return ct_errbuf_set(eb, -EINVAL, "hidden_units %d out of range (1..%d)", c->hidden,
                             CTRAIN_MODEL_MAX_HIDDEN);
    if (c->num_heads < 1 || c->hidden % c->num_heads != 0)
        return ct_errbuf_set(eb, -EINVAL,
                             "num_heads %d does not divide hidden_units %d (each head gets "
                             "hidden_units / num_heads columns)",
                             c->num_heads, c->hidden);
    if (c->num_blocks < 1 || c->num_blocks > CTRAIN_MODEL_MAX_BLOCKS)
        return ct_errbuf_set(eb, -EINVAL, "num_blocks %d out of range (1..%d)", c->num_blocks,
                             CTRAIN_MODEL_MAX_BLOCKS);
    if (!(c->dropout >= 0.0f && c->dropout < 1.0f))
        return ct_errbuf_set(eb, -EINVAL, "dropout_rate %g out of range [0, 1)",
                             (double)c->dropout);
    return 0;
}

json_t *ctrain_model_cfg_to_json(const ctrain_model_cfg_t *c)
{
    return json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:f, s:i, s:i}", "kind",
                     ctrain_model_kind_name(c->kind), "layout", ctrain_layout_name(c->layout),
                     "num_items", (json_int_t)c->num_items, "maxlen", (json_int_t)c->maxlen,
                     "hidden_units", (json_int_t)c->hidden, "num_heads", (json_int_t)c->num_heads,
                     "num_blocks", (json_int_t)c->num_blocks, "dropout_rate", (double)c->dropout,
                     "mhc_streams", (json_int_t)c->mhc_streams, "time_span",
                     (json_int_t)c->time_span);
}

int ctrain_model_cfg_from_json(const json_t *obj, ctrain_model_cfg_t *c, ct_errbuf_t *eb)
{
    const char *kind = NULL, *layout = NULL;
    json_int_t items = 0, maxlen = 0, hidden = 0, heads = 0, blocks = 0, streams = 0, span = 0;
    double dropout = 0.0;
    json_error_t je;
    if (json_unpack_ex((json_t *)obj, &je, 0, "{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:F, s?I, s?I}",
                       "kind", &kind, "layout", &layout, "num_items", &items, "maxlen", &maxlen,
                       "hidden_units", &hidden, "num_heads", &heads, "num_blocks", &blocks,
                       "dropout_rate", &dropout, "mhc_streams", &streams, "time_span", &span) != 0)
        return ct_errbuf_set(eb, CT_EFORMAT, "model configuration: %s", je.text);
    ctrain_model_cfg_t n = {.kind = CTRAIN_MODEL_SASREC};
    if (ctrain_model_kind_parse(kind, &n.kind, eb) != 0)
        return ct_errbuf_wrap(eb, CT_EFORMAT, "model configuration");
    if (streams < 0 || streams > CT_MHC_MAX_STREAMS || span < 0 ||
        span > CTRAIN_MODEL_MAX_TIME_SPAN)
        return ct_errbuf_set(eb, CT_EFORMAT,
                             "model configuration: mhc_streams or time_span out "
                             "of range");
    n.mhc_streams = (int)streams;
    n.time_span = (int)span;
    int rc = ctrain_layout_parse(layout, &n.layout, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, CT_EFORMAT, "model configuration");
    if (items < 1 || items > INT32_MAX || maxlen < 1 || maxlen > CTRAIN_MODEL_MAX_LEN ||
        hidden < 1 || hidden > CTRAIN_MODEL_MAX_HIDDEN || heads < 1 || heads > hidden ||
        blocks < 1 || blocks > CTRAIN_MODEL_MAX_BLOCKS)
        return ct_errbuf_set(eb, CT_EFORMAT, "model configuration: a size is out of range");
    n.num_items = (int32_t)items;
    n.maxlen = (int)maxlen;
    n.hidden = (int)hidden;
    n.num_heads = (int)heads;
    n.num_blocks = (int)blocks;
    n.dropout = (float)dropout;
    rc = ctrain_model_cfg_check(&n, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, CT_EFORMAT, "model configuration");
    n.no_skip = c->no_skip;
    n.loss = c->loss;
    n.num_negatives = c->num_negatives;
    *c = n;
    return 0;
}

const char *ctrain_model_cfg_diff(const ctrain_model_cfg_t *a, const ctrain_model_cfg_t *b,
                                  char *what, size_t size)
{
    const char *field = NULL;
    long long x = 0, y = 0;
    if (a->kind != b->kind) {
        snprintf(what, size, "kind: %s vs %s", ctrain_model_kind_name(a->kind),
                 ctrain_model_kind_name(b->kind));
        return "kind";
    } else if (a->layout != b->layout) {
        snprintf(what, size, "layout: %s vs %s", ctrain_layout_name(a->layout),
                 ctrain_layout_name(b->layout));
        return "layout";
    } else if (a->num_items != b->num_items)
        field = "num_items", x = a->num_items, y = b->num_items;
    else if (a->maxlen != b->maxlen)
        field = "maxlen", x = a->maxlen, y = b->maxlen;
    else if (a->hidden != b->hidden)
        field = "hidden_units", x = a->hidden, y = b->hidden;
    else if (a->num_heads != b->num_heads)
        field = "num_heads", x = a->num_heads, y = b->num_heads;
    else if (a->num_blocks != b->num_blocks)
        field = "num_blocks", x = a->num_blocks, y = b->num_blocks;
    else if (a->mhc_streams != b->mhc_streams)
        field = "mhc_streams", x = a->mhc_streams, y = b->mhc_streams;
    else if (a->time_span != b->time_span)
        field = "time_span", x = a->time_span, y = b->time_span;
    if (field)
        snprintf(what, size, "%s: %lld vs %lld", field, x, y);
    return field;
}

int ctrain_model_cfg_from_state_dict(const char *path, ctrain_model_cfg_t *cfg, int *pos_rows,
                                     ct_errbuf_t *eb)
{
    ct_st_file_t *f = NULL;
    int rc = ct_st_open(&f, path, eb);
    if (rc != 0)
        return rc;
    const ct_st_tensor_t *e = ct_st_find(f, "item_emb.weight");
    const ct_st_tensor_t *p = ct_st_find(f, "pos_emb.weight");
    const ct_st_tensor_t *pk = ct_st_find(f, "abs_pos_K_emb.weight");
    const ct_st_tensor_t *tv = ct_st_find(f, "time_matrix_V_emb.weight");
    const ct_st_tensor_t *hc = ct_st_find(f, "attention_hc.0.phi");
    bool ti = pk && pk->ndim == 2 && tv && tv->ndim == 2 && tv->shape[0] >= 2;
    if (!e || e->ndim != 2 || e->shape[0] < 2 || (!ti && (!p || p->ndim != 2))) {
        ct_st_close(f);
        return ct_errbuf_set(eb, CT_EMISMATCH,
                             "%s: not a SASRec or TiSASRec state dict (no 2-d item_emb.weight "
                             "with pos_emb.weight or abs_pos_K_emb.weight)",
                             path);
    }
    int blocks = 0;
    for (size_t i = 0; i < ct_st_count(f); i++) {
        const char *name = ct_st_tensor_at(f, i)->name;
        int b = -1, k = 0;
        int got = ti ? sscanf(name, "attention_layers.%d.Q_w.weight%n", &b, &k)
                     : sscanf(name, "attention_layers.%d.in_proj_weight%n", &b, &k);
        if (got == 1 && name[k] == '\0' && b + 1 > blocks)
            blocks = b + 1;
    }
    if (e->shape[0] - 1 > INT32_MAX || e->shape[1] > CTRAIN_MODEL_MAX_HIDDEN || blocks < 1 ||
        blocks > CTRAIN_MODEL_MAX_BLOCKS) {
        ct_st_close(f);
        return ct_errbuf_set(eb, CT_EMISMATCH,
                             "%s: item_emb.weight (%lld x %lld) or %d blocks "
                             "out of range",
                             path, (long long)e->shape[0], (long long)e->shape[1], blocks);
    }
    int streams = 0;
    if (hc && hc->ndim == 2 && e->shape[1] > 0 && hc->shape[0] % e->shape[1] == 0)
        streams = (int)(hc->shape[0] / e->shape[1]);
    if ((ti &&
         (pk->shape[0] > CTRAIN_MODEL_MAX_LEN || tv->shape[0] - 1 > CTRAIN_MODEL_MAX_TIME_SPAN)) ||
        streams > CT_MHC_MAX_STREAMS) {
        ct_st_close(f);
        return ct_errbuf_set(eb, CT_EMISMATCH, "%s: a table or the mHC streams out of range", path);
    }
    cfg->kind = ti ? CTRAIN_MODEL_TISASREC : CTRAIN_MODEL_SASREC;
    cfg->num_items = (int32_t)(e->shape[0] - 1);
    cfg->hidden = (int)e->shape[1];
    cfg->num_blocks = blocks;
    cfg->mhc_streams = streams;
    if (ti) {
        cfg->maxlen = (int)pk->shape[0];
        cfg->time_span = (int)(tv->shape[0] - 1);
        *pos_rows = 0;
    } else {
        cfg->time_span = 0;
        *pos_rows = p->shape[0] > INT32_MAX ? INT32_MAX : (int)p->shape[0];
    }
    ct_st_close(f);
    return 0;
}
