/*
 * test_lm_hf.c - Hugging Face folders for the language-model family (models/lm/ctrain_lm_cfg.c,
 * ctrain_lm_hf.c):
 *   - float16 and bfloat16 widen exactly (every one of the 65,536 codes of each);
 *   - config.json: GPT-2 and Qwen2 keys and transformers' defaults, and one line naming the file
 *     and the key for what ctrain does not run;
 *   - the tensor list: names, shapes and the fused groups;
 *   - weights: a single model.safetensors and a sharded index, float32 / float16 / bfloat16
 *     tensors mixed, names with and without the backbone prefix, and the errors (missing tensor,
 *     wrong shape, wrong dtype, no weights, a shard outside the folder), each naming the tensor
 *     and the shape expected;
 *   - saving a folder and reading it back;
 *   - with transformers (the PyTorch 2.x venv; that case skips without it): tiny GPT2LMHeadModel,
 *     GPT2Model, Qwen2ForCausalLM (tied, float16, sharded) and Qwen2Model saved by
 *     save_pretrained are read with the values transformers holds, saved back, and
 *     from_pretrained loads the saved folders with the same values (lm_hf.py).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_child.h"
#include "ct_test.h"
#include "ctrain_lm_cfg.h"
#include "ctrain_lm_hf.h"
#include "ctworker.h"

static const char *tmp_root;
static const char *script;

static void hf_write_text(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    CT_ASSERT(f != NULL);
    fputs(text, f);
    fclose(f);
}

static void make_dir(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", tmp_root, name);
    CT_ASSERT(mkdir(out, 0755) == 0 || errno == EEXIST);
}

/* ---- half floats ------------------------------------------------------------------------------
 */

static void test_half_floats(void)
{
    for (uint32_t h = 0; h < 65536; h++) {
        int e = (h >> 10) & 31, m = h & 1023;
        double s = (h & 0x8000) ? -1.0 : 1.0;
        float got = ctrain_lm_hf_f16_to_f32((uint16_t)h);
        if (e == 31) {
            CT_ASSERT_MSG(m ? isnan(got) : got == (float)(s * INFINITY), "f16 %04x", h);
            continue;
        }
        double ref = e == 0 ? s * ldexp(m, -24) : s * ldexp(1024 + m, e - 25);
        CT_ASSERT_MSG((double)got == ref && !!signbit(got) == (s < 0), "f16 %04x: %.9g vs %.9g", h,
                      (double)got, ref);
    }
    for (uint32_t h = 0; h < 65536; h++) {
        float got = ctrain_lm_hf_bf16_to_f32((uint16_t)h);
        uint32_t u;
        memcpy(&u, &got, sizeof u);
        CT_ASSERT_EQ(u, h << 16);
    }
}

/* ---- config.json -------------------------------------------------------------------------------
 */

static int read_cfg(const char *json, ctrain_lm_cfg_t *c, ct_errbuf_t *eb)
{
    char dir[300];
    make_dir(dir, sizeof dir, "cfg");
    hf_write_text(dir, "config.json", json);
    return ctrain_lm_cfg_read(dir, c, eb);
}

static void test_config(void)
{
    ctrain_lm_cfg_t c;
    ct_errbuf_t eb;
    /* GPT-2 small as the hub's config.json has it */
    CT_ASSERT_OK(
        read_cfg("{\"architectures\": [\"GPT2LMHeadModel\"], \"model_type\": \"gpt2\", "
                 "\"n_embd\": 768, \"n_head\": 12, \"n_layer\": 12, \"n_positions\": 1024, "
                 "\"n_ctx\": 1024, \"vocab_size\": 50257, \"activation_function\": "
                 "\"gelu_new\", \"layer_norm_epsilon\": 1e-05, \"n_inner\": null}",
                 &c, &eb));
    CT_ASSERT_EQ(c.arch, CTRAIN_LM_GPT2);
    CT_ASSERT(c.head && c.tied && c.scale_attn && !c.scale_by_layer);
    CT_ASSERT_EQ(c.hidden, 768);
    CT_ASSERT_EQ(c.inner, 3072);
    CT_ASSERT_EQ(c.head_dim, 64);
    CT_ASSERT_EQ(c.kv_heads, 12);
    CT_ASSERT_EQ(c.act, CTRAIN_LM_ACT_GELU_TANH);
    CT_ASSERT_STR_EQ(c.prefix, "transformer.");
    CT_ASSERT_EQ(ctrain_lm_cfg_num_params(&c), 124439808); /* GPT-2 small */
    /* every key missing: GPT2Config's defaults from model_type */
    CT_ASSERT_OK(read_cfg("{\"model_type\": \"gpt2\"}", &c, &eb));
    CT_ASSERT_EQ(c.vocab, 50257);
    CT_ASSERT_EQ(c.layers, 12);
    CT_ASSERT_EQ(c.max_pos, 1024);
    /* Qwen2.5-0.5B's config.json */
    CT_ASSERT_OK(read_cfg(
        "{\"architectures\": [\"Qwen2ForCausalLM\"], \"hidden_size\": 896, \"intermediate_size\": "
        "4864, \"num_hidden_layers\": 24, \"num_attention_heads\": 14, \"num_key_value_heads\": 2, "
        "\"max_position_embeddings\": 32768, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, "
        "\"tie_word_embeddings\": true, \"vocab_size\": 151936, \"hidden_act\": \"silu\", "
        "\"use_sliding_window\": false, \"sliding_window\": 32768, \"max_window_layers\": 21, "
        "\"rope_scaling\": null, \"torch_dtype\": \"bfloat16\"}",
        &c, &eb));
    CT_ASSERT_EQ(c.arch, CTRAIN_LM_QWEN2);
    CT_ASSERT_EQ(c.head_dim, 64);
    CT_ASSERT_EQ(c.kv_heads, 2);
    CT_ASSERT(c.tied);
    CT_ASSERT_EQ(c.pad_id, -1);
    CT_ASSERT_CLOSE(c.rope_theta, 1e6, 0, 0);
    CT_ASSERT_STR_EQ(c.prefix, "model.");
    CT_ASSERT_EQ(ctrain_lm_cfg_num_params(&c), 494032768); /* Qwen2.5-0.5B */
    /* transformers 5's rope_parameters, an explicit head_dim, a pad token */
    CT_ASSERT_OK(read_cfg("{\"architectures\": [\"Qwen2Model\"], \"hidden_size\": 16, "
                          "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": "
                          "6, \"rope_parameters\": {\"rope_theta\": 500.0, \"rope_type\": "
                          "\"default\"}, \"pad_token_id\": 3, \"vocab_size\": 40}",
                          &c, &eb));
    CT_ASSERT(!c.head && c.tied);
    CT_ASSERT_EQ(c.head_dim, 6);
    CT_ASSERT_EQ(c.pad_id, 3);
    CT_ASSERT_CLOSE(c.rope_theta, 500.0, 0, 0);
    CT_ASSERT_STR_EQ(c.prefix, "");
    ctrain_lm_cfg_t back;
    json_t *j = ctrain_lm_cfg_to_json(&c);
    CT_ASSERT_OK(ctrain_lm_cfg_from_json(j, &back, &eb));
    json_decref(j);
    char what[128];
    CT_ASSERT(ctrain_lm_cfg_diff(&c, &back, what, sizeof what) == NULL);
    back.kv_heads = 4;
    CT_ASSERT_STR_EQ(ctrain_lm_cfg_diff(&c, &back, what, sizeof what), "kv_heads");
    CT_ASSERT_STR_EQ(what, "kv_heads: 2 vs 4");

    /* what ctrain does not run: one line naming the file and the key */
    static const struct {
        const char *json, *want;
    } bad[] = {
        {"{\"architectures\": [\"LlamaForCausalLM\"]}", "architecture \"LlamaForCausalLM\""},
        {"{\"model_type\": \"llama\"}", "model_type \"llama\""},
        {"{\"model_type\": \"qwen2\", \"use_sliding_window\": true}", "use_sliding_window"},
        {"{\"model_type\": \"qwen2\", \"rope_scaling\": {\"type\": \"yarn\"}}", "\"yarn\""},
        {"{\"model_type\": \"qwen2\", \"hidden_act\": \"gelu\"}", "hidden_act \"gelu\""},
        {"{\"model_type\": \"gpt2\", \"activation_function\": \"relu\"}", "\"relu\""},
        {"{\"model_type\": \"gpt2\", \"n_head\": 5}", "n_head 5 does not divide n_embd 768"},
        {"{\"model_type\": \"qwen2\", \"num_key_value_heads\": 5}", "5 key/value heads"},
        {"{\"model_type\": \"gpt2\", \"n_layer\": \"12\"}", "\"n_layer\" must be an integer"},
        {"{\"model_type\": \"gpt2\", \"add_cross_attention\": true}", "add_cross_attention"},
        {"[1, 2]", "not a JSON object"},
        {"{\"model_type\": \"gpt2\",}", "config.json:1:"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = read_cfg(bad[i].json, &c, &eb);
        CT_ASSERT_MSG(rc != 0, "accepted %s", bad[i].json);
        CT_ASSERT_STR_CONTAINS(eb.msg, bad[i].want);
        CT_ASSERT_STR_CONTAINS(eb.msg, "config.json");
        CT_ASSERT(strchr(eb.msg, '\n') == NULL);
    }
    char dir[300];
    make_dir(dir, sizeof dir, "nocfg");
    CT_ASSERT_ERR(ctrain_lm_cfg_read(dir, &c, &eb), -ENOENT);
    CT_ASSERT_STR_CONTAINS(eb.msg, "nocfg/config.json");
}

/* ---- the tensors ---------------------------------------------------------------------------- */

static void tiny_gpt2(ctrain_lm_cfg_t *c)
{
    memset(c, 0, sizeof *c);
    c->arch = CTRAIN_LM_GPT2;
    c->head = true;
    c->vocab = 11, c->hidden = 8, c->layers = 2, c->heads = 2, c->kv_heads = 2, c->head_dim = 4;
    c->inner = 12, c->max_pos = 6, c->eps = 1e-5, c->tied = true, c->scale_attn = true;
    c->pad_id = -1;
    c->act = CTRAIN_LM_ACT_GELU_TANH;
    snprintf(c->prefix, sizeof c->prefix, "transformer.");
}

static void test_tensor_list(void)
{
    ctrain_lm_cfg_t c;
    tiny_gpt2(&c);
    ctrain_lm_tensor_t *t;
    int n;
    CT_ASSERT_OK(ctrain_lm_cfg_tensors(&c, &t, &n));
    CT_ASSERT_EQ(n, 2 + 12 * 2 + 2);
    CT_ASSERT_STR_EQ(t[0].name, "transformer.wte.weight");
    CT_ASSERT_STR_EQ(t[4].name, "transformer.h.0.attn.c_attn.weight");
    CT_ASSERT_EQ(t[4].shape[0], 8);
    CT_ASSERT_EQ(t[4].shape[1], 24); /* Conv1D: (in, out) */
    CT_ASSERT_STR_EQ(t[n - 1].name, "transformer.ln_f.bias");
    free(t);
    c.tied = false;
    CT_ASSERT_OK(ctrain_lm_cfg_tensors(&c, &t, &n));
    CT_ASSERT_STR_EQ(t[n - 1].name, "lm_head.weight");
    free(t);

    /* Qwen2: q, k, v weights next to each other with one group number, then their biases */
    memset(&c, 0, sizeof c);
    c.arch = CTRAIN_LM_QWEN2, c.head = true, c.vocab = 20, c.hidden = 8, c.layers = 1;
    c.heads = 4, c.kv_heads = 2, c.head_dim = 2, c.inner = 6, c.max_pos = 16, c.eps = 1e-6;
    c.rope_theta = 1e4, c.act = CTRAIN_LM_ACT_SILU, c.pad_id = -1;
    snprintf(c.prefix, sizeof c.prefix, "model.");
    CT_ASSERT_OK(ctrain_lm_cfg_tensors(&c, &t, &n));
    CT_ASSERT_EQ(n, 1 + 12 + 1 + 1);
    CT_ASSERT_STR_EQ(t[2].name, "model.layers.0.self_attn.q_proj.weight");
    CT_ASSERT_EQ(t[2].shape[0], 8);
    CT_ASSERT_STR_EQ(t[3].name, "model.layers.0.self_attn.k_proj.weight");
    CT_ASSERT_EQ(t[3].shape[0], 4);
    CT_ASSERT(t[2].group > 0 && t[2].group == t[3].group && t[3].group == t[4].group);
    CT_ASSERT_STR_EQ(t[5].name, "model.layers.0.self_attn.q_proj.bias");
    CT_ASSERT(t[5].group > 0 && t[5].group != t[2].group && t[7].group == t[5].group);
    CT_ASSERT_STR_EQ(t[8].name, "model.layers.0.self_attn.o_proj.weight");
    CT_ASSERT_EQ(t[8].shape[1], 8);
    CT_ASSERT(t[10].role == CTRAIN_LM_T_GATE_W && t[11].role == CTRAIN_LM_T_UP_W);
    CT_ASSERT_STR_EQ(t[n - 1].name, "lm_head.weight");
    free(t);
}

/* ---- weights -------------------------------------------------------------------------------- */

typedef struct model_bufs {
    ctrain_lm_tensor_t *t;
    int n;
    ct_tensor_view_t *v; /* F32 views of the values */
    float **data;
} model_bufs_t;

/* The model's tensors as F32 views holding value(tensor i, element k) = a small dyadic number,
 * exact in float16 and bfloat16. */
static void make_model(model_bufs_t *m, const ctrain_lm_cfg_t *c)
{
    CT_ASSERT_OK(ctrain_lm_cfg_tensors(c, &m->t, &m->n));
    m->v = calloc((size_t)m->n, sizeof *m->v);
    m->data = calloc((size_t)m->n, sizeof *m->data);
    for (int i = 0; i < m->n; i++) {
        int64_t numel = m->t[i].shape[0] * (m->t[i].ndim == 2 ? m->t[i].shape[1] : 1);
        m->data[i] = malloc((size_t)numel * sizeof(float));
        for (int64_t k = 0; k < numel; k++)
            m->data[i][k] = (float)((int)((k * 7 + i * 13) % 29) - 14) / 8.0f;
        m->v[i] = (ct_tensor_view_t){
            .name = m->t[i].name, .dtype = CT_DTYPE_F32, .ndim = m->t[i].ndim, .data = m->data[i]};
        m->v[i].shape[0] = m->t[i].shape[0];
        m->v[i].shape[1] = m->t[i].shape[1];
    }
}

static void free_model(model_bufs_t *m)
{
    for (int i = 0; i < m->n; i++)
        free(m->data[i]);
    free(m->data), free(m->v), free(m->t);
}

/* Writes views [from, to) of m into dir/file; tensor i is stored as dtype(i) (F32/F16/BF16,
 * alternating), under name with strip_prefix removed. */
static void write_st(const char *dir, const char *file, const model_bufs_t *m, int from, int to,
                     bool half, const char *strip_prefix)
{
    ct_tensor_view_t *v = calloc((size_t)m->n, sizeof *v);
    uint16_t **h = calloc((size_t)m->n, sizeof *h);
    char(*names)[CTRAIN_LM_NAME_MAX] = calloc((size_t)m->n, sizeof *names);
    int k = 0;
    for (int i = from; i < to; i++, k++) {
        v[k] = m->v[i];
        const char *nm = m->t[i].name;
        size_t pl = strip_prefix ? strlen(strip_prefix) : 0;
        if (pl && strncmp(nm, strip_prefix, pl) == 0)
            nm += pl;
        snprintf(names[k], sizeof names[k], "%s", nm);
        v[k].name = names[k];
        int kind = half ? i % 3 : 0;
        if (kind != 0) {
            int64_t numel = ct_tensor_numel(&m->v[i]);
            h[k] = malloc((size_t)numel * 2);
            for (int64_t e = 0; e < numel; e++) {
                float f = m->data[i][e];
                uint32_t u;
                memcpy(&u, &f, 4);
                if (kind == 1) { /* bfloat16: the top half (exact for these values) */
                    h[k][e] = (uint16_t)(u >> 16);
                } else { /* float16: sign, exponent - 112, 10 bits of mantissa */
                    uint16_t s = (uint16_t)((u >> 16) & 0x8000u);
                    uint32_t ex = (u >> 23) & 0xffu;
                    h[k][e] =
                        f == 0.0f ? s : (uint16_t)(s | ((ex - 112u) << 10) | ((u >> 13) & 0x3ffu));
                }
            }
            v[k].dtype = kind == 1 ? CT_DTYPE_BF16 : CT_DTYPE_F16;
            v[k].data = h[k];
        }
    }
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    ct_errbuf_t eb;
    int rc = ct_st_save(path, v, (size_t)k, NULL, 0, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
    for (int i = 0; i < m->n; i++)
        free(h[i]);
    free(h), free(v), free(names);
}

/* Reads every tensor of m's model from dir into fresh buffers and compares them bit for bit. */
static int read_and_compare(const char *dir, const model_bufs_t *m, const char *prefix,
                            ct_errbuf_t *eb)
{
    ctrain_lm_hf_t *h = NULL;
    int rc = ctrain_lm_hf_open(&h, dir, eb);
    if (rc != 0)
        return rc;
    ct_tensor_view_t *v = calloc((size_t)m->n, sizeof *v);
    for (int i = 0; i < m->n; i++) {
        v[i] = m->v[i];
        v[i].data = malloc((size_t)ct_tensor_nbytes(&m->v[i]));
    }
    rc = ctrain_lm_hf_read(h, v, (size_t)m->n, prefix, eb);
    for (int i = 0; i < m->n && rc == 0; i++)
        CT_ASSERT_MSG(memcmp(v[i].data, m->data[i], (size_t)ct_tensor_nbytes(&m->v[i])) == 0,
                      "%s differs", m->t[i].name);
    for (int i = 0; i < m->n; i++)
        free(v[i].data);
    free(v);
    ctrain_lm_hf_close(h);
    return rc;
}

static void test_single_file(void)
{
    ctrain_lm_cfg_t c;
    tiny_gpt2(&c);
    model_bufs_t m;
    make_model(&m, &c);
    char dir[300];
    ct_errbuf_t eb;
    make_dir(dir, sizeof dir, "single");
    write_st(dir, "model.safetensors", &m, 0, m.n, true, NULL);
    int rc = read_and_compare(dir, &m, c.prefix, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
    /* saved by the bare model (no "transformer." prefix), as the hub's gpt2 is */
    make_dir(dir, sizeof dir, "bare");
    write_st(dir, "model.safetensors", &m, 0, m.n, true, "transformer.");
    rc = read_and_compare(dir, &m, c.prefix, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
    free_model(&m);
}

static void test_sharded(void)
{
    ctrain_lm_cfg_t c;
    tiny_gpt2(&c);
    model_bufs_t m;
    make_model(&m, &c);
    char dir[300];
    ct_errbuf_t eb;
    make_dir(dir, sizeof dir, "sharded");
    int cut = m.n / 2;
    write_st(dir, "model-00001-of-00002.safetensors", &m, 0, cut, true, NULL);
    write_st(dir, "model-00002-of-00002.safetensors", &m, cut, m.n, false, NULL);
    char *index = malloc(65536);
    size_t k =
        (size_t)snprintf(index, 65536, "{\"metadata\": {\"total_size\": 1}, \"weight_map\": {");
    for (int i = 0; i < m.n; i++)
        k += (size_t)snprintf(index + k, 65536 - k,
                              "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "",
                              m.t[i].name, i < cut ? 1 : 2);
    snprintf(index + k, 65536 - k, "}}");
    hf_write_text(dir, "model.safetensors.index.json", index);
    int rc = read_and_compare(dir, &m, c.prefix, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);

    /* an index naming a file outside the folder */
    make_dir(dir, sizeof dir, "badindex");
    hf_write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\": {\"transformer.wte.weight\": \"../x.safetensors\"}}");
    ctrain_lm_hf_t *h = NULL;
    CT_ASSERT_ERR(ctrain_lm_hf_open(&h, dir, &eb), CT_EFORMAT);
    CT_ASSERT_STR_CONTAINS(eb.msg, "weight_map[\"transformer.wte.weight\"] is not a file name");
    free(index);
    free_model(&m);
}

static void test_errors(void)
{
    ctrain_lm_cfg_t c;
    tiny_gpt2(&c);
    model_bufs_t m;
    make_model(&m, &c);
    char dir[300];
    ct_errbuf_t eb;

    /* a missing tensor: its name and the shape expected */
    make_dir(dir, sizeof dir, "missing");
    write_st(dir, "model.safetensors", &m, 0, m.n - 1, true, NULL);
    CT_ASSERT_ERR(read_and_compare(dir, &m, c.prefix, &eb), CT_EMISMATCH);
    CT_ASSERT_STR_CONTAINS(eb.msg, "no tensor \"transformer.ln_f.bias\" (expected shape (8))");

    /* a wrong shape */
    make_dir(dir, sizeof dir, "shape");
    int64_t saved = m.v[4].shape[1];
    m.v[4].shape[1] = 8; /* c_attn (8, 8) instead of (8, 24): the first 64 values */
    write_st(dir, "model.safetensors", &m, 0, m.n, true, NULL);
    m.v[4].shape[1] = saved;
    CT_ASSERT_ERR(read_and_compare(dir, &m, c.prefix, &eb), CT_EMISMATCH);
    CT_ASSERT_STR_CONTAINS(eb.msg, "tensor \"transformer.h.0.attn.c_attn.weight\" has shape "
                                   "(8, 8), expected (8, 24)");

    /* a tensor that is not a float type */
    make_dir(dir, sizeof dir, "dtype");
    int32_t *ints = calloc(8, sizeof *ints);
    ct_tensor_view_t iv = {
        .name = "transformer.ln_f.bias", .dtype = CT_DTYPE_I32, .ndim = 1, .data = ints};
    iv.shape[0] = 8;
    ct_tensor_view_t *all = calloc((size_t)m.n, sizeof *all);
    memcpy(all, m.v, (size_t)m.n * sizeof *all);
    all[m.n - 1] = iv;
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CT_ASSERT_OK(ct_st_save(path, all, (size_t)m.n, NULL, 0, &eb));
    CT_ASSERT_ERR(read_and_compare(dir, &m, c.prefix, &eb), CT_EMISMATCH);
    CT_ASSERT_STR_CONTAINS(eb.msg, "tensor \"transformer.ln_f.bias\" is I32, expected F32, F16 "
                                   "or BF16 of shape (8)");
    free(ints), free(all);

    /* no weights at all; pytorch_model.bin only */
    make_dir(dir, sizeof dir, "empty");
    ctrain_lm_hf_t *h = NULL;
    CT_ASSERT_ERR(ctrain_lm_hf_open(&h, dir, &eb), -ENOENT);
    CT_ASSERT_STR_CONTAINS(eb.msg, "no model.safetensors or model.safetensors.index.json");
    hf_write_text(dir, "pytorch_model.bin", "x");
    CT_ASSERT_ERR(ctrain_lm_hf_open(&h, dir, &eb), -ENOENT);
    CT_ASSERT_STR_CONTAINS(eb.msg, "safe_serialization=True");
    /* a damaged file shows when the folder is opened */
    hf_write_text(dir, "model.safetensors", "not safetensors");
    CT_ASSERT(ctrain_lm_hf_open(&h, dir, &eb) != 0);
    CT_ASSERT_STR_CONTAINS(eb.msg, "empty/model.safetensors");
    free_model(&m);
}

static void test_save(void)
{
    ctrain_lm_cfg_t c;
    tiny_gpt2(&c);
    model_bufs_t m;
    make_model(&m, &c);
    char src[300], out[300];
    ct_errbuf_t eb;
    make_dir(src, sizeof src, "src");
    hf_write_text(src, "config.json", "{\"model_type\": \"gpt2\"}\n");
    hf_write_text(src, "tokenizer.json", "{\"tok\": 1}\n");
    snprintf(out, sizeof out, "%s/out/deeper", tmp_root);
    CT_ASSERT_OK(ctrain_lm_hf_save(out, src, m.v, (size_t)m.n, &eb));
    int rc = read_and_compare(out, &m, c.prefix, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
    char path[512], buf[64] = "";
    snprintf(path, sizeof path, "%s/tokenizer.json", out);
    FILE *f = fopen(path, "r");
    CT_ASSERT(f && fgets(buf, sizeof buf, f));
    fclose(f);
    CT_ASSERT_STR_EQ(buf, "{\"tok\": 1}\n");
    snprintf(path, sizeof path, "%s/vocab.json", out);
    CT_ASSERT(access(path, F_OK) != 0); /* not in the source: not written */
    ct_st_file_t *st = NULL;
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    CT_ASSERT_OK(ct_st_open(&st, path, &eb));
    CT_ASSERT_STR_EQ(ct_st_meta(st, "format"), "pt");
    ct_st_close(st);
    free_model(&m);
}

/* ---- with transformers ------------------------------------------------------------------------
 */

static void test_transformers(void)
{
    const char *py = ct_test_torch2_python();
    if (access(py, X_OK) != 0)
        CT_SKIP("no PyTorch 2.x interpreter at %s (set CTRUN_TORCH2_PYTHON)", py);
    char dir[300];
    make_dir(dir, sizeof dir, "hf");
    ct_child_t ch;
    char *argv[] = {(char *)py, (char *)script, "make", dir, NULL};
    CT_ASSERT_OK(ct_child_run(&ch, argv, NULL, 300000));
    if (ch.exit_code == 77) {
        printf("%s", ch.out);
        ct_child_close(&ch);
        CT_SKIP("%s cannot import torch and transformers", py);
    }
    CT_ASSERT_MSG(ch.exit_code == 0, "lm_hf.py make failed:\n%s%s", ch.out, ch.err);
    ct_child_close(&ch);
    static const char *const models[] = {"gpt2", "gpt2_bare", "qwen2_tied_f16_sharded",
                                         "qwen2_bf16", "qwen2_bare"};
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++) {
        char mdir[400], ref[500], out[400];
        snprintf(mdir, sizeof mdir, "%s/%s", dir, models[k]);
        snprintf(ref, sizeof ref, "%s/%s.ref.safetensors", dir, models[k]);
        snprintf(out, sizeof out, "%s/%s.saved", dir, models[k]);
        ctrain_lm_cfg_t c;
        ct_errbuf_t eb;
        int rc = ctrain_lm_cfg_read(mdir, &c, &eb);
        CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
        model_bufs_t m;
        make_model(&m, &c);
        /* the values transformers holds (float32, by state_dict name) */
        ct_st_file_t *rf = NULL;
        CT_ASSERT_OK(ct_st_open(&rf, ref, &eb));
        rc = ct_st_read(rf, m.v, (size_t)m.n, CT_ST_ALLOW_EXTRA, &eb);
        CT_ASSERT_MSG(rc == 0, "%s: %s", models[k], eb.msg);
        ct_st_close(rf);
        rc = read_and_compare(mdir, &m, c.prefix, &eb);
        CT_ASSERT_MSG(rc == 0, "%s: %s", models[k], eb.msg);
        printf("  %-24s %s, %d tensors: as transformers holds them\n", models[k],
               ctrain_lm_arch_name(&c), m.n);
        CT_ASSERT_OK(ctrain_lm_hf_save(out, mdir, m.v, (size_t)m.n, &eb));
        free_model(&m);
    }
    char *argv2[] = {(char *)py, (char *)script, "check", dir, NULL};
    CT_ASSERT_OK(ct_child_run(&ch, argv2, NULL, 300000));
    printf("%s", ch.out);
    CT_ASSERT_MSG(ch.exit_code == 0, "lm_hf.py check failed:\n%s%s", ch.out, ch.err);
    ct_child_close(&ch);
}

/* argv[1]: lm_hf.py; argv[2] "transformers" runs that case alone (meson test lm_hf_transformers,
 * which may skip), otherwise the others run. */
int main(int argc, char **argv)
{
    CT_ASSERT(argc >= 2);
    script = argv[1];
    tmp_root = ct_test_tmpdir("ct_lm_hf_");
    if (argc >= 3 && strcmp(argv[2], "transformers") == 0) {
        CT_RUN(test_transformers);
        return 0;
    }
    CT_RUN(test_half_floats);
    CT_RUN(test_config);
    CT_RUN(test_tensor_list);
    CT_RUN(test_single_file);
    CT_RUN(test_sharded);
    CT_RUN(test_errors);
    CT_RUN(test_save);
    return 0;
}
