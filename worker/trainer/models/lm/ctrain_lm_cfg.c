/*
 * ctrain_lm_cfg.c - config.json of a GPT-2 or Qwen2 checkpoint into ctrain_lm_cfg_t, with
 * transformers' defaults (GPT2Config, Qwen2Config) for missing keys; checks; the configuration
 * as JSON for checkpoints; and the tensor list under transformers' state_dict names.
 */
#include "ctrain_lm_cfg.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- reading config.json -----------------------------------------------------------------------
 */

typedef struct ctrain_lm_cfg__reader {
    const json_t *o;
    const char *path;
    ct_errbuf_t *eb;
    int rc; /* the first error */
} ctrain_lm_cfg__reader_t;

/* The value of key, NULL when it is missing or null (transformers then uses its default). */
static const json_t *ctrain_lm_cfg__get(const ctrain_lm_cfg__reader_t *r, const char *key)
{
    const json_t *v = json_object_get(r->o, key);
    return v && !json_is_null(v) ? v : NULL;
}

static int ctrain_lm_cfg__int(ctrain_lm_cfg__reader_t *r, const char *key, int def, int min,
                              int max)
{
    const json_t *v = ctrain_lm_cfg__get(r, key);
    if (!v || r->rc != 0)
        return def;
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
        r->rc = ct_errbuf_set(r->eb, CT_EFORMAT, "%s: \"%s\" must be an integer in %d..%d", r->path,
                              key, min, max);
        return def;
    }
    return (int)json_integer_value(v);
}

static double ctrain_lm_cfg__num(ctrain_lm_cfg__reader_t *r, const json_t *o, const char *key,
                                 double def)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v) || r->rc != 0)
        return def;
    if (!json_is_number(v) || !isfinite(json_number_value(v))) {
        r->rc = ct_errbuf_set(r->eb, CT_EFORMAT, "%s: \"%s\" must be a number", r->path, key);
        return def;
    }
    return json_number_value(v);
}

static bool ctrain_lm_cfg__bool(ctrain_lm_cfg__reader_t *r, const char *key, bool def)
{
    const json_t *v = ctrain_lm_cfg__get(r, key);
    if (!v || r->rc != 0)
        return def;
    if (!json_is_boolean(v)) {
        r->rc = ct_errbuf_set(r->eb, CT_EFORMAT, "%s: \"%s\" must be true or false", r->path, key);
        return def;
    }
    return json_is_true(v);
}

static const char *ctrain_lm_cfg__str(ctrain_lm_cfg__reader_t *r, const char *key, const char *def)
{
    const json_t *v = ctrain_lm_cfg__get(r, key);
    if (!v || r->rc != 0)
        return def;
    if (!json_is_string(v)) {
        r->rc = ct_errbuf_set(r->eb, CT_EFORMAT, "%s: \"%s\" must be a string", r->path, key);
        return def;
    }
    return json_string_value(v);
}

static const char *const ctrain_lm_cfg__archs[4] = {"GPT2LMHeadModel", "GPT2Model",
                                                    "Qwen2ForCausalLM", "Qwen2Model"};

const char *ctrain_lm_arch_name(const ctrain_lm_cfg_t *c)
{
    return ctrain_lm_cfg__archs[(c->arch == CTRAIN_LM_QWEN2 ? 2 : 0) + (c->head ? 0 : 1)];
}

/* "architectures" (its first entry), else "model_type". */
static int ctrain_lm_cfg__arch(ctrain_lm_cfg__reader_t *r, ctrain_lm_cfg_t *c)
{
    const json_t *a = ctrain_lm_cfg__get(r, "architectures");
    const char *name = NULL;
    if (a) {
        if (!json_is_array(a) || json_array_size(a) < 1 || !json_is_string(json_array_get(a, 0)))
            return ct_errbuf_set(r->eb, CT_EFORMAT,
                                 "%s: \"architectures\" must be a list of class names", r->path);
        name = json_string_value(json_array_get(a, 0));
    } else {
        const char *mt = ctrain_lm_cfg__str(r, "model_type", NULL);
        if (r->rc != 0)
            return r->rc;
        if (mt && strcmp(mt, "gpt2") == 0)
            name = "GPT2LMHeadModel";
        else if (mt && strcmp(mt, "qwen2") == 0)
            name = "Qwen2ForCausalLM";
        else
            return ct_errbuf_set(
                r->eb, CT_EFORMAT,
                "%s: no \"architectures\", and model_type \"%.40s\" is not gpt2 or "
                "qwen2",
                r->path, mt ? mt : "(missing)");
    }
    for (int i = 0; i < 4; i++)
        if (strcmp(name, ctrain_lm_cfg__archs[i]) == 0) {
            c->arch = i < 2 ? CTRAIN_LM_GPT2 : CTRAIN_LM_QWEN2;
            c->head = i % 2 == 0;
            return 0;
        }
    return ct_errbuf_set(r->eb, CT_EFORMAT,
                         "%s: architecture \"%.60s\" is not one ctrain runs (GPT2LMHeadModel, "
                         "GPT2Model, Qwen2ForCausalLM or Qwen2Model)",
                         r->path, name);
}

static void ctrain_lm_cfg__gpt2(ctrain_lm_cfg__reader_t *r, ctrain_lm_cfg_t *c)
{
    /* GPT2Config's defaults; its attribute_map also lets hidden_size etc. stand for n_embd. */
    c->vocab = ctrain_lm_cfg__int(r, "vocab_size", 50257, 1, CTRAIN_LM_MAX_VOCAB);
    c->max_pos = ctrain_lm_cfg__int(
        r, "n_positions",
        ctrain_lm_cfg__int(r, "max_position_embeddings", 1024, 1, CTRAIN_LM_MAX_POS), 1,
        CTRAIN_LM_MAX_POS);
    c->hidden = ctrain_lm_cfg__int(
        r, "n_embd", ctrain_lm_cfg__int(r, "hidden_size", 768, 1, CTRAIN_LM_MAX_HIDDEN), 1,
        CTRAIN_LM_MAX_HIDDEN);
    c->layers = ctrain_lm_cfg__int(
        r, "n_layer", ctrain_lm_cfg__int(r, "num_hidden_layers", 12, 1, CTRAIN_LM_MAX_LAYERS), 1,
        CTRAIN_LM_MAX_LAYERS);
    c->heads = ctrain_lm_cfg__int(
        r, "n_head", ctrain_lm_cfg__int(r, "num_attention_heads", 12, 1, CTRAIN_LM_MAX_HIDDEN), 1,
        CTRAIN_LM_MAX_HIDDEN);
    c->kv_heads = c->heads;
    c->head_dim = c->heads > 0 ? c->hidden / c->heads : 0;
    c->inner = ctrain_lm_cfg__int(r, "n_inner", 4 * c->hidden, 1, 16 * CTRAIN_LM_MAX_HIDDEN);
    c->eps = ctrain_lm_cfg__num(r, r->o, "layer_norm_epsilon", 1e-5);
    c->tied = ctrain_lm_cfg__bool(r, "tie_word_embeddings", true);
    c->scale_attn = ctrain_lm_cfg__bool(r, "scale_attn_weights", true);
    c->scale_by_layer = ctrain_lm_cfg__bool(r, "scale_attn_by_inverse_layer_idx", false);
    c->pad_id = -1;
    c->rope_theta = 0.0;
    const char *act = ctrain_lm_cfg__str(r, "activation_function", "gelu_new");
    if (r->rc != 0)
        return;
    if (strcmp(act, "gelu_new") == 0 || strcmp(act, "gelu_pytorch_tanh") == 0)
        c->act = CTRAIN_LM_ACT_GELU_TANH;
    else if (strcmp(act, "gelu") == 0)
        c->act = CTRAIN_LM_ACT_GELU;
    else
        r->rc = ct_errbuf_set(r->eb, CT_EFORMAT,
                              "%s: activation_function \"%.40s\" is not one ctrain runs (gelu_new, "
                              "gelu_pytorch_tanh or gelu)",
                              r->path, act);
    if (r->rc == 0 && ctrain_lm_cfg__bool(r, "add_cross_attention", false))
        r->rc = ct_errbuf_set(r->eb, CT_EFORMAT,
                              "%s: add_cross_attention is true; ctrain runs GPT-2 as a decoder "
                              "without cross-attention",
                              r->path);
}

/* RoPE: "rope_theta" (transformers 4) or "rope_parameters" (5); any scaling is refused. */
static void ctrain_lm_cfg__rope(ctrain_lm_cfg__reader_t *r, ctrain_lm_cfg_t *c)
{
    c->rope_theta = ctrain_lm_cfg__num(r, r->o, "rope_theta", 10000.0);
    const char *keys[2] = {"rope_parameters", "rope_scaling"};
    for (int k = 0; k < 2 && r->rc == 0; k++) {
        const json_t *p = ctrain_lm_cfg__get(r, keys[k]);
        if (!p)
            continue;
        if (!json_is_object(p)) {
            r->rc =
                ct_errbuf_set(r->eb, CT_EFORMAT, "%s: \"%s\" must be an object", r->path, keys[k]);
            return;
        }
        const json_t *t = json_object_get(p, "rope_type");
        if (!t)
            t = json_object_get(p, "type");
        if (t && !(json_is_string(t) && strcmp(json_string_value(t), "default") == 0)) {
            r->rc = ct_errbuf_set(r->eb, CT_EFORMAT,
                                  "%s: %s asks for RoPE type \"%.40s\"; ctrain runs the default "
                                  "RoPE only",
                                  r->path, keys[k], json_is_string(t) ? json_string_value(t) : "?");
            return;
        }
        c->rope_theta = ctrain_lm_cfg__num(r, p, "rope_theta", c->rope_theta);
    }
}

static void ctrain_lm_cfg__qwen2(ctrain_lm_cfg__reader_t *r, ctrain_lm_cfg_t *c)
{
    c->vocab = ctrain_lm_cfg__int(r, "vocab_size", 151936, 1, CTRAIN_LM_MAX_VOCAB);
    c->hidden = ctrain_lm_cfg__int(r, "hidden_size", 4096, 1, CTRAIN_LM_MAX_HIDDEN);
    c->inner = ctrain_lm_cfg__int(r, "intermediate_size", 22016, 1, 16 * CTRAIN_LM_MAX_HIDDEN);
    c->layers = ctrain_lm_cfg__int(r, "num_hidden_layers", 32, 1, CTRAIN_LM_MAX_LAYERS);
    c->heads = ctrain_lm_cfg__int(r, "num_attention_heads", 32, 1, CTRAIN_LM_MAX_HIDDEN);
    c->kv_heads = ctrain_lm_cfg__int(r, "num_key_value_heads", c->heads, 1, CTRAIN_LM_MAX_HIDDEN);
    c->head_dim = ctrain_lm_cfg__int(r, "head_dim", c->heads > 0 ? c->hidden / c->heads : 0, 1,
                                     CTRAIN_LM_MAX_HIDDEN);
    c->max_pos = ctrain_lm_cfg__int(r, "max_position_embeddings", 32768, 1, CTRAIN_LM_MAX_POS);
    c->eps = ctrain_lm_cfg__num(r, r->o, "rms_norm_eps", 1e-6);
    c->tied = ctrain_lm_cfg__bool(r, "tie_word_embeddings", false);
    c->scale_attn = true;
    c->scale_by_layer = false;
    c->pad_id = ctrain_lm_cfg__int(r, "pad_token_id", -1, -1, CTRAIN_LM_MAX_VOCAB);
    ctrain_lm_cfg__rope(r, c);
    const char *act = ctrain_lm_cfg__str(r, "hidden_act", "silu");
    if (r->rc != 0)
        return;
    if (strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0) {
        r->rc =
            ct_errbuf_set(r->eb, CT_EFORMAT,
                          "%s: hidden_act \"%.40s\" is not one ctrain runs (silu)", r->path, act);
        return;
    }
    c->act = CTRAIN_LM_ACT_SILU;
    if (ctrain_lm_cfg__bool(r, "use_sliding_window", false)) {
        r->rc = ct_errbuf_set(r->eb, CT_EFORMAT,
                              "%s: use_sliding_window is true; ctrain runs Qwen2 with full causal "
                              "attention in every layer",
                              r->path);
        return;
    }
    const json_t *lt = ctrain_lm_cfg__get(r, "layer_types");
    for (size_t i = 0; lt && json_is_array(lt) && i < json_array_size(lt); i++) {
        const json_t *e = json_array_get(lt, i);
        if (!json_is_string(e) || strcmp(json_string_value(e), "full_attention") != 0) {
            r->rc =
                ct_errbuf_set(r->eb, CT_EFORMAT,
                              "%s: layer_types[%zu] is not \"full_attention\"; ctrain runs full "
                              "causal attention in every layer",
                              r->path, i);
            return;
        }
    }
}

int ctrain_lm_cfg_read(const char *dir, ctrain_lm_cfg_t *cfg, ct_errbuf_t *eb)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t je;
    json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!o) {
        FILE *f = fopen(path, "r");
        if (!f) {
            int e = errno;
            return ct_errbuf_set(eb, -e, "%s: %s (is --lm_dir a Hugging Face model folder?)", path,
                                 strerror(e));
        }
        fclose(f);
        return ct_errbuf_set(eb, CT_EFORMAT, "%s:%d: %s", path, je.line, je.text);
    }
    ctrain_lm_cfg_t c;
    memset(&c, 0, sizeof c);
    ctrain_lm_cfg__reader_t r = {o, path, eb, 0};
    int rc = json_is_object(o) ? 0 : ct_errbuf_set(eb, CT_EFORMAT, "%s: not a JSON object", path);
    if (rc == 0)
        rc = ctrain_lm_cfg__arch(&r, &c);
    if (rc == 0) {
        if (c.arch == CTRAIN_LM_GPT2)
            ctrain_lm_cfg__gpt2(&r, &c);
        else
            ctrain_lm_cfg__qwen2(&r, &c);
        rc = r.rc;
    }
    json_decref(o);
    if (rc != 0)
        return rc;
    if (!c.head)
        c.tied = true; /* a bare model has no lm_head: its logits use the token table */
    snprintf(c.prefix, sizeof c.prefix, "%s",
             !c.head                    ? ""
             : c.arch == CTRAIN_LM_GPT2 ? "transformer."
                                        : "model.");
    if ((rc = ctrain_lm_cfg_check(&c, eb)) != 0)
        return ct_errbuf_wrap(eb, rc, "%s", path);
    *cfg = c;
    return 0;
}

int ctrain_lm_cfg_check(const ctrain_lm_cfg_t *c, ct_errbuf_t *eb)
{
    if (c->arch != CTRAIN_LM_GPT2 && c->arch != CTRAIN_LM_QWEN2)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "unknown architecture %d", (int)c->arch);
    if (c->vocab < 1 || c->vocab > CTRAIN_LM_MAX_VOCAB || c->hidden < 1 ||
        c->hidden > CTRAIN_LM_MAX_HIDDEN || c->layers < 1 || c->layers > CTRAIN_LM_MAX_LAYERS ||
        c->max_pos < 1 || c->max_pos > CTRAIN_LM_MAX_POS || c->inner < 1 ||
        c->inner > 16 * CTRAIN_LM_MAX_HIDDEN)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "a size is out of range (vocabulary %d, width %d, %d layers, %d "
                             "positions, inner width %d)",
                             c->vocab, c->hidden, c->layers, c->max_pos, c->inner);
    if (c->heads < 1 || c->kv_heads < 1 || c->heads % c->kv_heads != 0)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "%d key/value heads do not divide %d attention heads", c->kv_heads,
                             c->heads);
    if (c->arch == CTRAIN_LM_GPT2 && (c->hidden % c->heads != 0 || c->kv_heads != c->heads))
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "n_head %d does not divide n_embd %d", c->heads,
                             c->hidden);
    if (c->head_dim < 1 || c->head_dim > 1024 ||
        (int64_t)c->heads * c->head_dim > 4 * (int64_t)CTRAIN_LM_MAX_HIDDEN)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "head width %d out of range (1..1024)",
                             c->head_dim);
    if (c->arch == CTRAIN_LM_QWEN2 && c->head_dim % 2 != 0)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "head width %d is odd (RoPE rotates pairs)",
                             c->head_dim);
    if (!(c->eps > 0.0 && c->eps < 1.0))
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "norm epsilon %g out of range (0, 1)", c->eps);
    if (c->arch == CTRAIN_LM_QWEN2 && !(c->rope_theta > 1.0))
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "rope_theta %g must be above 1", c->rope_theta);
    if (c->pad_id < -1 || c->pad_id >= c->vocab)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "pad_token_id %d is not a token (vocabulary %d)",
                             c->pad_id, c->vocab);
    if ((unsigned)c->act > CTRAIN_LM_ACT_SILU ||
        (c->arch == CTRAIN_LM_QWEN2) != (c->act == CTRAIN_LM_ACT_SILU))
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "activation %d does not fit the architecture",
                             (int)c->act);
    return 0;
}

/* ---- JSON ---------------------------------------------------------------------------------- */

static const char *const ctrain_lm_cfg__act_names[3] = {"gelu_tanh", "gelu", "silu"};

json_t *ctrain_lm_cfg_to_json(const ctrain_lm_cfg_t *c)
{
    return json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:s, s:b, s:b, s:b, "
                     "s:i}",
                     "architecture", ctrain_lm_arch_name(c), "vocab_size", c->vocab, "hidden_size",
                     c->hidden, "layers", c->layers, "heads", c->heads, "kv_heads", c->kv_heads,
                     "head_dim", c->head_dim, "inner", c->inner, "max_positions", c->max_pos, "eps",
                     c->eps, "rope_theta", c->rope_theta, "act", ctrain_lm_cfg__act_names[c->act],
                     "tied", c->tied, "scale_attn", c->scale_attn, "scale_by_layer",
                     c->scale_by_layer, "pad_id", c->pad_id);
}

int ctrain_lm_cfg_from_json(const json_t *o, ctrain_lm_cfg_t *out, ct_errbuf_t *eb)
{
    const char *arch = NULL, *act = NULL;
    int tied = 0, sa = 0, sl = 0;
    ctrain_lm_cfg_t c;
    memset(&c, 0, sizeof c);
    json_error_t je;
    if (json_unpack_ex((json_t *)o, &je, 0,
                       "{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:F, s:F, s:s, s:b, s:b, "
                       "s:b, s:i}",
                       "architecture", &arch, "vocab_size", &c.vocab, "hidden_size", &c.hidden,
                       "layers", &c.layers, "heads", &c.heads, "kv_heads", &c.kv_heads, "head_dim",
                       &c.head_dim, "inner", &c.inner, "max_positions", &c.max_pos, "eps", &c.eps,
                       "rope_theta", &c.rope_theta, "act", &act, "tied", &tied, "scale_attn", &sa,
                       "scale_by_layer", &sl, "pad_id", &c.pad_id) != 0)
        return ct_errbuf_set(eb, CT_EFORMAT, "language model configuration: %s", je.text);
    int a = -1;
    for (int i = 0; i < 4; i++)
        if (strcmp(arch, ctrain_lm_cfg__archs[i]) == 0)
            a = i;
    int k = -1;
    for (int i = 0; i < 3; i++)
        if (strcmp(act, ctrain_lm_cfg__act_names[i]) == 0)
            k = i;
    if (a < 0 || k < 0)
        return ct_errbuf_set(eb, CT_EFORMAT,
                             "language model configuration: unknown architecture or activation");
    c.arch = a < 2 ? CTRAIN_LM_GPT2 : CTRAIN_LM_QWEN2;
    c.head = a % 2 == 0;
    c.act = (ctrain_lm_act_t)k;
    c.tied = tied, c.scale_attn = sa, c.scale_by_layer = sl;
    snprintf(c.prefix, sizeof c.prefix, "%s",
             !c.head                    ? ""
             : c.arch == CTRAIN_LM_GPT2 ? "transformer."
                                        : "model.");
    int rc = ctrain_lm_cfg_check(&c, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, CT_EFORMAT, "language model configuration");
    *out = c;
    return 0;
}

const char *ctrain_lm_cfg_diff(const ctrain_lm_cfg_t *a, const ctrain_lm_cfg_t *b, char *what,
                               size_t size)
{
    static const char *const fields[] = {"architecture",  "vocab_size", "hidden_size",    "layers",
                                         "heads",         "kv_heads",   "head_dim",       "inner",
                                         "max_positions", "eps",        "rope_theta",     "act",
                                         "tied",          "scale_attn", "scale_by_layer", "pad_id"};
    json_t *ja = ctrain_lm_cfg_to_json(a), *jb = ctrain_lm_cfg_to_json(b);
    const char *field = NULL;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0] && !field; i++) {
        json_t *va = json_object_get(ja, fields[i]), *vb = json_object_get(jb, fields[i]);
        if (json_equal(va, vb))
            continue;
        char *sa = json_dumps(va, JSON_ENCODE_ANY), *sb = json_dumps(vb, JSON_ENCODE_ANY);
        snprintf(what, size, "%s: %s vs %s", fields[i], sa ? sa : "?", sb ? sb : "?");
        free(sa), free(sb);
        field = fields[i];
    }
    json_decref(ja);
    json_decref(jb);
    return field;
}

/* ---- the tensors ----------------------------------------------------------------------------- */

typedef struct ctrain_lm_cfg__list {
    ctrain_lm_tensor_t *t;
    int n, cap;
} ctrain_lm_cfg__list_t;

static int ctrain_lm_cfg__add(ctrain_lm_cfg__list_t *l, const ctrain_lm_cfg_t *c,
                              ctrain_lm_role_t role, int layer, int group, const char *local,
                              int64_t d0, int64_t d1)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        ctrain_lm_tensor_t *t = realloc(l->t, (size_t)cap * sizeof *t);
        if (!t)
            return -ENOMEM;
        l->t = t, l->cap = cap;
    }
    ctrain_lm_tensor_t *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    bool head = role == CTRAIN_LM_T_HEAD;
    int len = snprintf(t->name, sizeof t->name, "%s%s", head ? "" : c->prefix, local);
    if (len < 0 || (size_t)len >= sizeof t->name) {
        l->n--;
        return -ENAMETOOLONG;
    }
    t->role = role;
    t->layer = layer;
    t->group = group;
    t->ndim = d1 > 0 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1 > 0 ? d1 : 0;
    return 0;
}

int ctrain_lm_cfg_tensors(const ctrain_lm_cfg_t *c, ctrain_lm_tensor_t **out, int *n)
{
    ctrain_lm_cfg__list_t l = {NULL, 0, 0};
    const int64_t V = c->vocab, C = c->hidden, I = c->inner, P = c->max_pos;
    const int64_t Q = (int64_t)c->heads * c->head_dim, KV = (int64_t)c->kv_heads * c->head_dim;
    int rc = 0, g = 0;
#define CT__T(role, layer, group, d0, d1, ...)                                         \
    do {                                                                               \
        char nm_[CTRAIN_LM_NAME_MAX];                                                  \
        snprintf(nm_, sizeof nm_, __VA_ARGS__);                                        \
        if (rc == 0)                                                                   \
            rc = ctrain_lm_cfg__add(&l, c, (role), (layer), (group), nm_, (d0), (d1)); \
    } while (0)
    if (c->arch == CTRAIN_LM_GPT2) {
        CT__T(CTRAIN_LM_T_WTE, -1, 0, V, C, "wte.weight");
        CT__T(CTRAIN_LM_T_WPE, -1, 0, P, C, "wpe.weight");
        for (int b = 0; b < c->layers; b++) {
            CT__T(CTRAIN_LM_T_LN1_W, b, 0, C, 0, "h.%d.ln_1.weight", b);
            CT__T(CTRAIN_LM_T_LN1_B, b, 0, C, 0, "h.%d.ln_1.bias", b);
            CT__T(CTRAIN_LM_T_QKV_W, b, 0, C, 3 * C, "h.%d.attn.c_attn.weight", b);
            CT__T(CTRAIN_LM_T_QKV_B, b, 0, 3 * C, 0, "h.%d.attn.c_attn.bias", b);
            CT__T(CTRAIN_LM_T_O_W, b, 0, C, C, "h.%d.attn.c_proj.weight", b);
            CT__T(CTRAIN_LM_T_O_B, b, 0, C, 0, "h.%d.attn.c_proj.bias", b);
            CT__T(CTRAIN_LM_T_LN2_W, b, 0, C, 0, "h.%d.ln_2.weight", b);
            CT__T(CTRAIN_LM_T_LN2_B, b, 0, C, 0, "h.%d.ln_2.bias", b);
            CT__T(CTRAIN_LM_T_FC_W, b, 0, C, I, "h.%d.mlp.c_fc.weight", b);
            CT__T(CTRAIN_LM_T_FC_B, b, 0, I, 0, "h.%d.mlp.c_fc.bias", b);
            CT__T(CTRAIN_LM_T_FC2_W, b, 0, I, C, "h.%d.mlp.c_proj.weight", b);
            CT__T(CTRAIN_LM_T_FC2_B, b, 0, C, 0, "h.%d.mlp.c_proj.bias", b);
        }
        CT__T(CTRAIN_LM_T_LNF_W, -1, 0, C, 0, "ln_f.weight");
        CT__T(CTRAIN_LM_T_LNF_B, -1, 0, C, 0, "ln_f.bias");
    } else {
        CT__T(CTRAIN_LM_T_WTE, -1, 0, V, C, "embed_tokens.weight");
        for (int b = 0; b < c->layers; b++) {
            CT__T(CTRAIN_LM_T_LN1_W, b, 0, C, 0, "layers.%d.input_layernorm.weight", b);
            g++; /* q, k, v weights: one (Q + 2 KV, C) matrix */
            CT__T(CTRAIN_LM_T_Q_W, b, g, Q, C, "layers.%d.self_attn.q_proj.weight", b);
            CT__T(CTRAIN_LM_T_K_W, b, g, KV, C, "layers.%d.self_attn.k_proj.weight", b);
            CT__T(CTRAIN_LM_T_V_W, b, g, KV, C, "layers.%d.self_attn.v_proj.weight", b);
            g++; /* and their biases */
            CT__T(CTRAIN_LM_T_Q_B, b, g, Q, 0, "layers.%d.self_attn.q_proj.bias", b);
            CT__T(CTRAIN_LM_T_K_B, b, g, KV, 0, "layers.%d.self_attn.k_proj.bias", b);
            CT__T(CTRAIN_LM_T_V_B, b, g, KV, 0, "layers.%d.self_attn.v_proj.bias", b);
            CT__T(CTRAIN_LM_T_O_W, b, 0, C, Q, "layers.%d.self_attn.o_proj.weight", b);
            CT__T(CTRAIN_LM_T_LN2_W, b, 0, C, 0, "layers.%d.post_attention_layernorm.weight", b);
            g++; /* gate and up: one (2I, C) matrix */
            CT__T(CTRAIN_LM_T_GATE_W, b, g, I, C, "layers.%d.mlp.gate_proj.weight", b);
            CT__T(CTRAIN_LM_T_UP_W, b, g, I, C, "layers.%d.mlp.up_proj.weight", b);
            CT__T(CTRAIN_LM_T_DOWN_W, b, 0, C, I, "layers.%d.mlp.down_proj.weight", b);
        }
        CT__T(CTRAIN_LM_T_LNF_W, -1, 0, C, 0, "norm.weight");
    }
    if (!c->tied)
        CT__T(CTRAIN_LM_T_HEAD, -1, 0, V, C, "lm_head.weight");
#undef CT__T
    if (rc != 0) {
        free(l.t);
        return rc;
    }
    *out = l.t;
    *n = l.n;
    return 0;
}

int64_t ctrain_lm_cfg_num_params(const ctrain_lm_cfg_t *c)
{
    ctrain_lm_tensor_t *t = NULL;
    int n = 0;
    if (ctrain_lm_cfg_tensors(c, &t, &n) != 0)
        return -1;
    int64_t s = 0;
    for (int i = 0; i < n; i++)
        s += t[i].shape[0] * (t[i].ndim == 2 ? t[i].shape[1] : 1);
    free(t);
    return s;
}
