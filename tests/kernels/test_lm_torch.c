/*
 * test_lm_torch.c (suites kernels, compat) - the language models' CPU ops (kernels/cpu/lm.c,
 * ct_lm_ce_loss_cpu) against what transformers computes: lm_torch.py, run by the PyTorch 2.x
 * interpreter (skipped, 77, without it), evaluates Qwen2RMSNorm, NewGELUActivation and the erf
 * GELU, SiLU times up, Qwen2RotaryEmbedding with apply_rotary_pos_emb (positions up to 40,000,
 * rope_theta 1e6), causal attention with repeat_kv (4 query heads on 2 key/value heads), and
 * cross-entropy with ignore_index -100, on the inputs it writes; this test runs the ops on the
 * same inputs. The finite-difference tests (test_lm) check the ops against their own formulas;
 * this one checks that the formulas, the head mapping and the float32 rounding of RoPE's table
 * are transformers'.
 *
 * Tolerances: both sides compute in float32 with different libraries and summation orders:
 * atol 1e-6, rtol 1e-5 (values of order 1..10); the RoPE table 2e-6 (cosf / sinf of the same
 * float32 angle in two libraries); the loss 1e-6 relative.
 */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "ct_child.h"
#include "kcheck.h"

static json_t *lt_data;

static float *lt_floats(const json_t *o, const char *key, size_t *n)
{
    const json_t *a = json_object_get(o, key);
    CT_ASSERT_MSG(json_is_array(a), "no list %s", key);
    float *x = KC_ALLOC(float, json_array_size(a));
    for (size_t i = 0; i < json_array_size(a); i++)
        x[i] = (float)json_number_value(json_array_get(a, i));
    if (n)
        *n = json_array_size(a);
    return x;
}

static double *lt_doubles(const json_t *o, const char *key, size_t *n)
{
    size_t k;
    float *f = lt_floats(o, key, &k);
    double *d = KC_ALLOC(double, k);
    kc_to_double(d, f, (int64_t)k);
    free(f);
    if (n)
        *n = k;
    return d;
}

static int lt_int(const json_t *o, const char *key)
{
    return (int)json_integer_value(json_object_get(o, key));
}

static void test_rmsnorm(void)
{
    const json_t *o = json_object_get(lt_data, "rms");
    enum { N = 6, C = 64 };
    float *x = lt_floats(o, "x", NULL), *w = lt_floats(o, "w", NULL), out[N * C], rstd[N];
    double *y = lt_doubles(o, "y", NULL);
    ct_rmsnorm_forward_cpu(out, rstd, x, w, N, C, 1e-6f);
    kc_check("rmsnorm vs Qwen2RMSNorm", out, y, N * C, 1e-6, 1e-5);
    free(x), free(w), free(y);
}

static void test_gelu_swiglu(void)
{
    const json_t *o = json_object_get(lt_data, "gelu");
    size_t n;
    float *x = lt_floats(o, "x", &n), *out = KC_ALLOC(float, n);
    double *t = lt_doubles(o, "tanh", NULL), *e = lt_doubles(o, "erf", NULL);
    ct_gelu_forward_cpu(out, x, (int64_t)n, CT_GELU_TANH);
    kc_check("gelu tanh vs NewGELUActivation", out, t, (int64_t)n, 1e-6, 1e-5);
    ct_gelu_forward_cpu(out, x, (int64_t)n, CT_GELU_ERF);
    /* 1 + erf(x / sqrt 2) cancels for x near -4 on both sides, each with its own erff */
    kc_check("gelu erf vs F.gelu", out, e, (int64_t)n, 2e-6, 1e-5);
    free(x), free(out), free(t), free(e);
    o = json_object_get(lt_data, "swiglu");
    float *g = lt_floats(o, "gate", &n), *u = lt_floats(o, "up", NULL);
    float *s = KC_ALLOC(float, n);
    double *y = lt_doubles(o, "y", NULL);
    ct_swiglu_forward_cpu(s, g, u, (int64_t)n);
    kc_check("swiglu vs silu(gate) * up", s, y, (int64_t)n, 1e-6, 1e-5);
    free(g), free(u), free(s), free(y);
}

static void test_rope(void)
{
    const json_t *o = json_object_get(lt_data, "rope");
    enum { L = 6, NH = 4, HD = 64, H = HD / 2, P = 40001 };
    const json_t *pj = json_object_get(o, "pos");
    int32_t pos[L];
    for (int i = 0; i < L; i++)
        pos[i] = (int32_t)json_integer_value(json_array_get(pj, (size_t)i));
    float *cs = KC_ALLOC(float, (size_t)P *H), *sn = KC_ALLOC(float, (size_t)P *H);
    ct_rope_table_cpu(cs, sn, P, HD, (float)json_number_value(json_object_get(o, "theta")));
    float *hc = lt_floats(o, "cos", NULL), *hs = lt_floats(o, "sin", NULL);
    float gc[L * H], gs[L * H];
    double rc[L * H], rs[L * H];
    for (int i = 0; i < L; i++)
        for (int k = 0; k < H; k++) {
            gc[i * H + k] = cs[(size_t)pos[i] * H + k], gs[i * H + k] = sn[(size_t)pos[i] * H + k];
            rc[i * H + k] = hc[i * H + k], rs[i * H + k] = hs[i * H + k];
        }
    kc_check("rope cos vs Qwen2RotaryEmbedding", gc, rc, L * H, 2e-6, 0);
    kc_check("rope sin vs Qwen2RotaryEmbedding", gs, rs, L * H, 2e-6, 0);
    float *q = lt_floats(o, "q", NULL), out[L * NH * HD];
    double *y = lt_doubles(o, "y", NULL);
    ct_rope_forward_cpu(out, q, cs, sn, pos, L, NH, HD);
    kc_check("rope vs apply_rotary_pos_emb", out, y, L * NH * HD, 1e-5, 1e-5);
    free(cs), free(sn), free(hc), free(hs), free(q), free(y);
}

static void test_gqa(void)
{
    const json_t *o = json_object_get(lt_data, "gqa");
    const int L = lt_int(o, "L"), NH = lt_int(o, "NH"), KVH = lt_int(o, "KVH"),
              HD = lt_int(o, "HD");
    float *qkv = lt_floats(o, "qkv", NULL), *out = KC_ALLOC(float, (size_t)L *NH *HD);
    float *att = KC_ALLOC(float, (size_t)NH *L *L);
    double *y = lt_doubles(o, "y", NULL);
    ct_gqa_attention_forward_cpu(out, att, qkv, 1, L, NH, KVH, HD, 1.0f / sqrtf((float)HD));
    kc_check("gqa vs repeat_kv attention", out, y, (int64_t)L * NH * HD, 1e-6, 1e-5);
    free(qkv), free(out), free(att), free(y);
}

static void test_ce(void)
{
    const json_t *o = json_object_get(lt_data, "ce");
    const int N = lt_int(o, "N"), C = lt_int(o, "C"), V = lt_int(o, "V");
    float *f = lt_floats(o, "feats", NULL), *w = lt_floats(o, "wte", NULL);
    int32_t *tgt = KC_ALLOC(int32_t, N);
    int count = 0;
    for (int r = 0; r < N; r++) {
        tgt[r] = (int32_t)json_integer_value(json_array_get(json_object_get(o, "tgt"), (size_t)r));
        count += tgt[r] >= 0;
    }
    float *scr = KC_ALLOC(float, CT_CE_SCRATCH(V, C)), loss = NAN;
    ct_lm_ce_loss_cpu(&loss, NULL, NULL, scr, f, w, tgt, N, C, V, (float)count);
    const double want = json_number_value(json_object_get(o, "loss"));
    printf("  lm ce %.7f, F.cross_entropy %.7f\n", loss, want);
    CT_ASSERT_CLOSE(loss, want, 0, 1e-6);
    free(f), free(w), free(tgt), free(scr);
}

int main(int argc, char **argv)
{
    CT_ASSERT(argc >= 2);
    const char *py = ct_test_torch2_python();
    if (access(py, X_OK) != 0)
        CT_SKIP("no PyTorch 2.x interpreter at %s (set CTRUN_TORCH2_PYTHON)", py);
    char path[] = "/tmp/ct_lm_torch_XXXXXX.json";
    int fd = mkstemps(path, 5);
    CT_ASSERT(fd >= 0);
    close(fd);
    ct_child_t ch;
    char *args[] = {(char *)py, argv[1], path, NULL};
    CT_ASSERT_OK(ct_child_run(&ch, args, NULL, 120000));
    if (ch.exit_code == 77) {
        ct_child_close(&ch);
        unlink(path);
        CT_SKIP("%s cannot import torch or transformers", py);
    }
    CT_ASSERT_MSG(ch.exit_code == 0, "lm_torch.py failed:\n%s%s", ch.out, ch.err);
    ct_child_close(&ch);
    json_error_t je;
    lt_data = json_load_file(path, 0, &je);
    unlink(path);
    CT_ASSERT_MSG(lt_data != NULL, "%s: %s", path, je.text);
    CT_RUN(test_rmsnorm);
    CT_RUN(test_gelu_swiglu);
    CT_RUN(test_rope);
    CT_RUN(test_gqa);
    CT_RUN(test_ce);
    json_decref(lt_data);
    return 0;
}
