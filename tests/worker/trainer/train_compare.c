/*
 * train_compare.c - see train_compare.h.
 */
#include "train_compare.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ct_test.h"
#include "ctworker.h"

static int read_metrics(const char *dir, json_t **out, int max)
{
    char p[600], line[8192];
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    FILE *f = fopen(p, "r");
    CT_ASSERT(f != NULL);
    int n = 0;
    while (fgets(line, sizeof line, f) && n < max)
        CT_ASSERT((out[n++] = json_loads(line, 0, NULL)) != NULL);
    fclose(f);
    return n;
}

void train_same_metrics(const char *a, const char *b)
{
    json_t *ma[8], *mb[8];
    int na = read_metrics(a, ma, 8), nb = read_metrics(b, mb, 8);
    CT_ASSERT_EQ(na, nb);
    for (int i = 0; i < na; i++) {
        double la = json_number_value(json_object_get(ma[i], "train_loss"));
        double lb = json_number_value(json_object_get(mb[i], "train_loss"));
        printf("  epoch %d: train loss %.7f vs %.7f\n", i + 1, la, lb);
        CT_ASSERT_CLOSE(lb, la, 1e-6, 1e-5);
        for (int w = 0; w < 2; w++) {
            const char *split = w ? "test" : "valid";
            json_t *sa = json_object_get(ma[i], split), *sb = json_object_get(mb[i], split);
            CT_ASSERT_EQ(json_integer_value(json_object_get(sa, "users")),
                         json_integer_value(json_object_get(sb, "users")));
            const char *k[] = {"hr@10", "ndcg@10", "full_hr@10", "full_ndcg@10"};
            for (int q = 0; q < 4; q++)
                /* one user's rank moving by one place changes a mean by <= 1/250 */
                CT_ASSERT_CLOSE(json_number_value(json_object_get(sb, k[q])),
                                json_number_value(json_object_get(sa, k[q])), 0.0041, 0);
        }
        json_decref(ma[i]), json_decref(mb[i]);
    }
}

void train_same_params(const char *a, const char *b)
{
    char pa[600], pb[600];
    snprintf(pa, sizeof pa, "%s/final.safetensors", a);
    snprintf(pb, sizeof pb, "%s/final.safetensors", b);
    ct_st_file_t *fa = NULL, *fb = NULL;
    ct_errbuf_t eb;
    CT_ASSERT_OK(ct_st_open(&fa, pa, &eb));
    CT_ASSERT_OK(ct_st_open(&fb, pb, &eb));
    double worst = 0;
    for (size_t i = 0; i < ct_st_count(fa); i++) {
        const ct_st_tensor_t *t = ct_st_tensor_at(fa, i);
        if (strncmp(t->name, "optimizer.", 10) == 0)
            continue;
        size_t n = t->nbytes / sizeof(float);
        float *x = malloc(t->nbytes), *y = malloc(t->nbytes);
        ct_tensor_view_t v = {.name = t->name, .dtype = CT_DTYPE_F32, .ndim = t->ndim, .data = x};
        memcpy(v.shape, t->shape, sizeof v.shape);
        CT_ASSERT_OK(ct_st_read(fa, &v, 1, CT_ST_ALLOW_EXTRA, &eb));
        v.data = y;
        CT_ASSERT_OK(ct_st_read(fb, &v, 1, CT_ST_ALLOW_EXTRA, &eb));
        bool in_bias = strstr(t->name, "in_proj_bias") != NULL;
        bool key_bias = strstr(t->name, "K_w.bias") != NULL; /* TiSASRec's key bias */
        size_t C = n / 3;
        for (size_t k = 0; k < n; k++) {
            if (key_bias || (in_bias && k >= C && k < 2 * C))
                continue; /* key bias: see train_compare.h */
            double d = fabs((double)x[k] - y[k]);
            worst = d > worst ? d : worst;
            CT_ASSERT_MSG(d <= 1e-4 + 1e-4 * fabs((double)x[k]), "%s[%zu]: %.8g vs %.8g", t->name,
                          k, (double)x[k], (double)y[k]);
        }
        free(x), free(y);
    }
    printf("  parameters: largest difference %.2e\n", worst);
    ct_st_close(fa);
    ct_st_close(fb);
}

void train_same_bits(const char *a, const char *b)
{
    char pa[600], pb[600];
    snprintf(pa, sizeof pa, "%s/final.safetensors", a);
    snprintf(pb, sizeof pb, "%s/final.safetensors", b);
    ct_st_file_t *fa = NULL, *fb = NULL;
    ct_errbuf_t eb;
    CT_ASSERT_MSG(ct_st_open(&fa, pa, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_MSG(ct_st_open(&fb, pb, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_EQ(ct_st_count(fa), ct_st_count(fb));
    CT_ASSERT_STR_EQ(ct_st_meta(fa, "step"), ct_st_meta(fb, "step"));
    size_t n = 0;
    for (size_t i = 0; i < ct_st_count(fa); i++) {
        const ct_st_tensor_t *ta = ct_st_tensor_at(fa, i), *tb = ct_st_find(fb, ta->name);
        CT_ASSERT_MSG(tb != NULL && tb->nbytes == ta->nbytes, "%s", ta->name);
        void *x = malloc(ta->nbytes + 1), *y = malloc(ta->nbytes + 1);
        CT_ASSERT(x && y);
        ct_tensor_view_t v = {.name = ta->name, .dtype = ta->dtype, .ndim = ta->ndim, .data = x};
        memcpy(v.shape, ta->shape, sizeof v.shape);
        CT_ASSERT_OK(ct_st_read(fa, &v, 1, CT_ST_ALLOW_EXTRA, &eb));
        v.data = y;
        CT_ASSERT_OK(ct_st_read(fb, &v, 1, CT_ST_ALLOW_EXTRA, &eb));
        CT_ASSERT_MSG(memcmp(x, y, ta->nbytes) == 0, "tensor %s differs between %s and %s",
                      ta->name, pa, pb);
        n += ta->nbytes;
        free(x), free(y);
    }
    printf("  %zu tensors, %zu bytes: identical\n", ct_st_count(fa), n);
    ct_st_close(fa);
    ct_st_close(fb);
}
