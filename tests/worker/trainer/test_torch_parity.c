/*
 * test_torch_parity.c - ctrain's SASRec and TiSASRec against PyTorch. torch_parity.py builds
 * small models (B=4, L=7, d=16, 2 heads, 2 blocks, 30 items) with torch_ref.py, written op for
 * op as SASRec.pytorch (each of the four block layouts) and TiSASRec.pytorch (time_span 5, with
 * times whose intervals clip) do, saves each state dict as a .pth and converts it with
 * examples/convert_pytorch_checkpoint.py; this test loads that file through the trainer's own
 * loader (ctrain_model_load_params: names, the (d,d,1) conv shapes, the padded pos table, the
 * interval tables) and checks, per model, with dropout 0:
 *   - pos/neg logits and the loss (BCEWithLogits means + l2_emb in the model's form -
 *     sum(item_emb^2) for SASRec in half the layouts, the norm of each of its five tables for
 *     TiSASRec) of one training forward;
 *   - every gradient, by state_dict name;
 *   - the parameters after one Adam step (lr 1e-3, betas 0.9/0.98, eps 1e-8);
 *   - the eval-mode final features of column L-1 after that step.
 *
 * Tolerances (atol + rtol |ref|): both sides are float32 with different summation orders
 * (cuBLAS-free MKL/OpenBLAS sgemm in PyTorch, OpenBLAS and our fused loops here), so values of
 * order 1 agree to about 1e-7 relative; through two blocks of LayerNorms the largest
 * differences measured are 6e-7 (features) and 7e-8 (gradients). Forward values and gradients:
 * atol 2e-6, rtol 2e-5, a margin of 3x and more (a wrong layout, mask, position rule or scale -
 * errors of 1e-2 and more - fails by orders of magnitude). Adam moves
 * every parameter by about lr = 1e-3 in the direction of its gradient's sign, so after one step
 * the parameters agree to the rounding of that update: atol 1e-6.
 *
 * Python: $CTRUN_TORCH_PYTHON, else Debian's /usr/bin/python3 (python3-torch 1.13), else
 * ~/.venvs/torch2/bin/python; skipped (77) when none of them imports torch.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_child.h"
#include "ctrain_model.h"
#include "kcheck.h"

static char py[512], dir[256];
static const char *script, *converter;
static ct_ops_t ops;

static bool imports_torch(const char *python)
{
    if (access(python, X_OK) != 0)
        return false;
    ct_child_t c;
    char *argv[] = {(char *)python, "-c", "import torch", NULL};
    int rc = ct_child_run(&c, argv, NULL, 120000);
    bool ok = rc == 0 && c.exit_code == 0;
    ct_child_close(&c);
    return ok;
}

static void find_python(void)
{
    const char *env = getenv("CTRUN_TORCH_PYTHON");
    const char *cands[] = {env, "/usr/bin/python3", ct_test_torch2_python()};
    for (size_t i = 0; i < 3; i++) {
        if (cands[i] && cands[i][0] && strlen(cands[i]) < sizeof py && imports_torch(cands[i])) {
            memcpy(py, cands[i], strlen(cands[i]) + 1);
            return;
        }
    }
    CT_SKIP("no Python with PyTorch (tried $CTRUN_TORCH_PYTHON, /usr/bin/python3, "
            "~/.venvs/torch2/bin/python; scripts/bootstrap --torch installs Debian's)");
}

/* Reads float tensor name of f into a fresh double array (n elements expected). */
static double *read_f32(ct_st_file_t *f, const char *name, size_t n)
{
    const ct_st_tensor_t *t = ct_st_find(f, name);
    CT_ASSERT_MSG(t != NULL, "reference has no %s", name);
    CT_ASSERT_EQ(t->nbytes, n * sizeof(float));
    float *tmp = KC_ALLOC(float, n);
    ct_tensor_view_t v = {.name = name, .dtype = CT_DTYPE_F32, .ndim = t->ndim, .data = tmp};
    memcpy(v.shape, t->shape, sizeof v.shape);
    ct_errbuf_t eb;
    int rc = ct_st_read(f, &v, 1, CT_ST_ALLOW_EXTRA, &eb);
    CT_ASSERT_MSG(rc == 0, "%s: %s", name, eb.msg);
    double *d = KC_ALLOC(double, n);
    kc_to_double(d, tmp, (int64_t)n);
    free(tmp);
    return d;
}

static void read_i32(ct_st_file_t *f, const char *name, int32_t *out, int B, int L)
{
    ct_tensor_view_t v = {
        .name = name, .dtype = CT_DTYPE_I32, .ndim = 2, .shape = {B, L}, .data = out};
    ct_errbuf_t eb;
    int rc = ct_st_read(f, &v, 1, CT_ST_ALLOW_EXTRA, &eb);
    CT_ASSERT_MSG(rc == 0, "%s: %s", name, eb.msg);
}

static int meta_int(ct_st_file_t *f, const char *key)
{
    const char *v = ct_st_meta(f, key);
    CT_ASSERT_MSG(v != NULL, "reference metadata has no %s", key);
    return atoi(v);
}

static void check_layout(const char *name, ctrain_model_kind_t kind, ctrain_layout_t layout)
{
    printf("model %s\n", name);
    char path[600];
    snprintf(path, sizeof path, "%s/ref_%s.safetensors", dir, name);
    ct_st_file_t *f = NULL;
    ct_errbuf_t eb;
    int rc = ct_st_open(&f, path, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
    const int B = meta_int(f, "B"), L = meta_int(f, "L");
    const double lr = atof(ct_st_meta(f, "lr")), l2 = atof(ct_st_meta(f, "l2"));
    ctrain_model_cfg_t cfg = {.kind = kind,
                              .layout = layout,
                              .num_items = meta_int(f, "items"),
                              .maxlen = L,
                              .hidden = meta_int(f, "d"),
                              .num_heads = meta_int(f, "heads"),
                              .num_blocks = meta_int(f, "blocks"),
                              .time_span =
                                  kind == CTRAIN_MODEL_TISASREC ? meta_int(f, "time_span") : 0};
    ctrain_model_t *m = NULL;
    CT_ASSERT_OK(ctrain_model_create(&m, &cfg, &ops, B, &eb));
    snprintf(path, sizeof path, "%s/model_%s.safetensors", dir, name);
    rc = ctrain_model_load_params(m, path, &eb);
    CT_ASSERT_MSG(rc == 0, "loading the converted state dict: %s", eb.msg);

    int32_t *seq = KC_ALLOC(int32_t, B * L), *pos = KC_ALLOC(int32_t, B * L),
            *neg = KC_ALLOC(int32_t, B * L);
    read_i32(f, "seq", seq, B, L);
    read_i32(f, "pos", pos, B, L);
    read_i32(f, "neg", neg, B, L);
    int64_t *tseq = KC_ALLOC(int64_t, B * L);
    ct_tensor_view_t tv = {
        .name = "tseq", .dtype = CT_DTYPE_I64, .ndim = 2, .shape = {B, L}, .data = tseq};
    rc = ct_st_read(f, &tv, 1, CT_ST_ALLOW_EXTRA, &eb);
    CT_ASSERT_MSG(rc == 0, "tseq: %s", eb.msg);
    float count = (float)ct_count_nonzero_cpu(pos, (int64_t)B * L);

    ctrain_model_zero_grad(m);
    ctrain_model_batch_t mb = {.B = B, .seq = seq, .pos = pos, .neg = neg, .tseq = tseq, .row0 = 0};
    float loss = 0, pen = 0;
    CT_ASSERT_OK(ctrain_model_forward_backward(m, &mb, count, 1, 0, &loss));
    CT_ASSERT_OK(ctrain_model_l2(m, (float)l2, ctrain_model_l2_mode(&m->cfg), &pen));
    loss += pen;
    float *pl = KC_ALLOC(float, B *L), *nl = KC_ALLOC(float, B *L);
    CT_ASSERT_OK(m->vt->logits(m, pl, nl, (int64_t)B * L));
    double *rl = read_f32(f, "loss", 1), *rpl = read_f32(f, "pos_logits", (size_t)B * L),
           *rnl = read_f32(f, "neg_logits", (size_t)B * L);
    printf("  loss ctrain %.7f, torch %.7f (l2_emb %g)\n", (double)loss, rl[0], l2);
    kc_check("loss", &loss, rl, 1, 2e-6, 2e-5);
    kc_check("pos_logits", pl, rpl, B * L, 2e-6, 2e-5);
    kc_check("neg_logits", nl, rnl, B * L, 2e-6, 2e-5);

    double worst = 0;
    char key[CTRAIN_PARAM_NAME_MAX + 16];
    for (int i = 0; i < m->n_params; i++) {
        const ctrain_param_t *p = &m->params[i];
        snprintf(key, sizeof key, "grad.%s", p->name);
        double *g = read_f32(f, key, p->numel);
        worst =
            fmax(worst, kc_check(key, m->grads_mem + p->offset, g, (int64_t)p->numel, 2e-6, 2e-5));
        free(g);
    }
    printf("  gradients: worst tensor %.1f%% of its tolerance\n", worst);

    /* Adam's first step moves a parameter by about lr * sign(gradient) however small the
     * gradient is, so where the true gradient is zero and both sides hold only rounding noise
     * (the attention's key bias: adding it shifts every logit of a softmax row equally) the
     * two steps are arbitrary. Those elements (|torch's gradient| < 1e-6) are left out of the
     * comparison and counted; everything else must agree. */
    float *before = KC_ALLOC(float, m->num_params);
    memcpy(before, m->params_mem, m->num_params * sizeof *before);
    CT_ASSERT_OK(ctrain_model_adam(m, lr, 1.0f, 1));
    worst = 0;
    int64_t noise = 0;
    for (int i = 0; i < m->n_params; i++) {
        const ctrain_param_t *p = &m->params[i];
        snprintf(key, sizeof key, "grad.%s", p->name);
        double *g = read_f32(f, key, p->numel);
        snprintf(key, sizeof key, "adam1.%s", p->name);
        double *w = read_f32(f, key, p->numel);
        float *got = KC_ALLOC(float, p->numel);
        memcpy(got, m->params_mem + p->offset, p->numel * sizeof *got);
        for (size_t k = 0; k < p->numel; k++) {
            double mine = m->grads_mem[p->offset + k];
            if (fabs(g[k]) < 1e-6 && fabs(mine) < 1e-6 && (g[k] != 0.0 || mine != 0.0)) {
                got[k] = before[p->offset + k];
                w[k] = before[p->offset + k];
                noise++;
            }
        }
        worst = fmax(worst, kc_check(key, got, w, (int64_t)p->numel, 1e-6, 0));
        free(g), free(w), free(got);
    }
    printf("  after one Adam step: worst tensor %.1f%% of its tolerance (%lld elements with a "
           "noise-only gradient left out)\n",
           worst, (long long)noise);
    CT_ASSERT_LT(noise, (int64_t)m->num_params / 20);
    free(before);

    const float *feats = NULL;
    int ldf = 0;
    CT_ASSERT_OK(ctrain_model_forward_features(m, seq, tseq, B, &feats, &ldf));
    float *got = KC_ALLOC(float, (size_t)B *cfg.hidden);
    for (int b = 0; b < B; b++)
        memcpy(got + (size_t)b * cfg.hidden, feats + (size_t)b * ldf,
               (size_t)cfg.hidden * sizeof *got);
    double *rf = read_f32(f, "feats", (size_t)B * cfg.hidden);
    kc_check("eval features (column L-1)", got, rf, B * cfg.hidden, 2e-6, 2e-5);

    free(got), free(rf), free(rl), free(rpl), free(rnl), free(pl), free(nl);
    free(seq), free(pos), free(neg), free(tseq);
    ctrain_model_destroy(m);
    ct_st_close(f);
}

static void test_parity(void)
{
    static const char *const names[] = {"post_ln", "pre_ln", "original", "original2020"};
    for (int k = 0; k < 4; k++)
        check_layout(names[k], CTRAIN_MODEL_SASREC, (ctrain_layout_t)k);
}

static void test_parity_tisasrec(void)
{
    check_layout("tisasrec", CTRAIN_MODEL_TISASREC, CTRAIN_LAYOUT_ORIGINAL2020);
}

/* The converter's reverse direction: a ctrain-style safetensors file back to a .pth that
 * PyTorch loads with the same values (Adam state dropped by default). */
static void test_converter_roundtrip(void)
{
    char st[600], pth[600], check[1400];
    snprintf(st, sizeof st, "%s/model_post_ln.safetensors", dir);
    snprintf(pth, sizeof pth, "%s/back.pth", dir);
    char *argv1[] = {py, (char *)converter, "--to-pth", st, pth, NULL};
    ct_child_t c;
    CT_ASSERT_OK(ct_child_run(&c, argv1, NULL, 120000));
    CT_ASSERT_MSG(c.exit_code == 0, "converter --to-pth failed: %s", c.err);
    ct_child_close(&c);
    snprintf(check, sizeof check,
             "import torch; a = torch.load('%s/model_post_ln.pth'); b = torch.load('%s');"
             "assert list(a) == list(b), (list(a), list(b));"
             "assert all(torch.equal(a[k], b[k]) for k in a); print('same', len(a))",
             dir, pth);
    char *argv2[] = {py, "-c", check, NULL};
    CT_ASSERT_OK(ct_child_run(&c, argv2, NULL, 120000));
    CT_ASSERT_MSG(c.exit_code == 0, "round trip differs: %s", c.err);
    CT_ASSERT_STR_CONTAINS(c.out, "same");
    ct_child_close(&c);
    /* A damaged input is one line and exit 1. */
    snprintf(st, sizeof st, "%s/garbage.pth", dir);
    FILE *g = fopen(st, "w");
    CT_ASSERT(g != NULL);
    fputs("not a checkpoint", g);
    fclose(g);
    char *argv3[] = {py, (char *)converter, st, pth, NULL};
    CT_ASSERT_OK(ct_child_run(&c, argv3, NULL, 120000));
    CT_ASSERT_EQ(c.exit_code, 1);
    CT_ASSERT_STR_CONTAINS(c.err, "convert_pytorch_checkpoint:");
    ct_child_close(&c);
}

int main(int argc, char **argv)
{
    CT_ASSERT(argc == 3);
    script = argv[1];
    converter = argv[2];
    CT_ASSERT_OK(ct_cpu_set_threads(1));
    ct_ops_cpu_init(&ops);
    find_python();
    snprintf(dir, sizeof dir, "/tmp/ct_torch_parity.XXXXXX");
    CT_ASSERT(mkdtemp(dir) != NULL);
    ct_child_t c;
    char *args[] = {py, (char *)script, dir, (char *)converter, NULL};
    CT_ASSERT_OK(ct_child_run(&c, args, NULL, 600000));
    printf("%s", c.out);
    CT_ASSERT_MSG(c.exit_code == 0, "torch_parity.py failed (exit %d): %s", c.exit_code, c.err);
    ct_child_close(&c);
    CT_RUN(test_parity);
    CT_RUN(test_parity_tisasrec);
    CT_RUN(test_converter_roundtrip);
    char rm[300];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    if (system(rm) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return 0;
}
