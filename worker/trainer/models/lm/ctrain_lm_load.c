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

int ctrain_lm_load(ctrain_lm_t *m, const char *dir, ct_errbuf_t *eb)
{
    ct_ops_t *o = m->ops;
    float *host = NULL;
    if (!o->host_memory) {
        host = malloc(m->num_params * sizeof *host);
        if (!host)
            return -ENOMEM;
    }
    ct_tensor_view_t *v = calloc((size_t)m->n_tensors, sizeof *v);
    if (!v) {
        free(host);
        return -ENOMEM;
    }
    ctrain_lm_views(m, false, v);
    if (host)
        for (int i = 0; i < m->n_tensors; i++)
            v[i].data = host + m->offset[i];
    ctrain_lm_hf_t *h = NULL;
    int rc = ctrain_lm_hf_open(&h, dir, eb);
    if (rc == 0)
        rc = ctrain_lm_hf_read(h, v, (size_t)m->n_tensors, m->cfg.prefix, eb);
    ctrain_lm_hf_close(h);
    if (rc == 0 && host) {
        o->copy(o, m->params_mem, host, m->num_params * sizeof *host, CT_COPY_H2D);
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
