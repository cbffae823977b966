/*
 * ctrain_lm_load.c - a language model (ctrain_lm.h) from a Hugging Face folder: config.json's
 * configuration (ctrain_lm_cfg.c) and the weights (ctrain_lm_hf.c) copied into the flat
 * parameter buffer, through a host buffer when the backend's memory is not the host's.
 *
 * Not here: the passes (ctrain_lm.c), the safetensors parsing (ctrain_lm_hf.c), saving.
 */
#include <errno.h>
#include <stdlib.h>

#include "ctrain_lm.h"
#include "ctrain_lm_hf.h"

/* A view's element count. */
static size_t ctrain_lm_load__numel(const ct_tensor_view_t *v)
{
    return (size_t)v->shape[0] * (size_t)(v->ndim == 2 ? v->shape[1] : 1);
}

int ctrain_lm_load(ctrain_lm_t *m, const char *dir, ct_errbuf_t *eb)
{
    ct_ops_t *o = m->ops;
    ct_tensor_view_t *v = calloc((size_t)m->n_tensors, sizeof *v);
    if (!v)
        return -ENOMEM;
    ctrain_lm_views(m, false, v);
    float *host = NULL;
    if (!o->host_memory) {
        /* every tensor into its own range of one host buffer (a frozen tensor kept apart lives
         * in frozen_mem, so the backend offsets do not describe one buffer), then up */
        size_t total = 0;
        for (int i = 0; i < m->n_tensors; i++)
            total += ctrain_lm_load__numel(&v[i]);
        if (!(host = malloc(total * sizeof *host))) {
            free(v);
            return -ENOMEM;
        }
        size_t off = 0;
        for (int i = 0; i < m->n_tensors; i++) {
            v[i].data = host + off;
            off += ctrain_lm_load__numel(&v[i]);
        }
    }
    ctrain_lm_hf_t *h = NULL;
    int rc = ctrain_lm_hf_open(&h, dir, eb);
    if (rc == 0)
        rc = ctrain_lm_hf_read(h, v, (size_t)m->n_tensors, m->cfg.prefix, eb);
    ctrain_lm_hf_close(h);
    if (rc == 0 && host) {
        for (int i = 0; i < m->n_tensors; i++)
            o->copy(o, ctrain_lm_tensor(m, i), v[i].data,
                    ctrain_lm_load__numel(&v[i]) * sizeof(float), CT_COPY_H2D);
        rc = o->sync(o);
    }
    free(v);
    free(host);
    return rc;
}

int ctrain_lm_open(ctrain_lm_t **out, const char *dir, ct_ops_t *ops, int max_rows, int max_len,
                   ct_errbuf_t *eb)
{
    return ctrain_lm_open_opts(out, dir, ops, max_rows, max_len, NULL, eb);
}

int ctrain_lm_open_opts(ctrain_lm_t **out, const char *dir, ct_ops_t *ops, int max_rows,
                        int max_len, const ctrain_lm_opts_t *opts, ct_errbuf_t *eb)
{
    ctrain_lm_cfg_t cfg;
    *out = NULL;
    int rc = ctrain_lm_cfg_read(dir, &cfg, eb);
    if (rc != 0)
        return rc;
    ctrain_lm_t *m = NULL;
    rc = ctrain_lm_create_opts(&m, &cfg, ops, max_rows, max_len, opts, eb);
    if (rc == 0)
        rc = ctrain_lm_load(m, dir, eb);
    if (rc != 0) {
        ctrain_lm_destroy(m);
        return rc;
    }
    *out = m;
    return 0;
}
