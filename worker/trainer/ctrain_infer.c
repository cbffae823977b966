/*
 * ctrain_infer.c - --inference_only: the family's task does it (ctrain_infer_run); here the
 * recommender's, which evaluates the weights of --state_dict_path on the dataset and prints the
 * metrics (one row and a "# summary:" line, as training does), writing nothing.
 *
 * The model's shape comes from the file where it can: a ctrain checkpoint carries its whole
 * model configuration; a converted SASRec.pytorch or TiSASRec.pytorch state dict tells the
 * model, hidden_units, num_blocks, the item count, mHC's streams and TiSASRec's maxlen and
 * time_span through its tensors' names and shapes. Flags given explicitly must agree with the
 * file (a clear error otherwise); flags not given take the file's values. The layout and the
 * number of heads of a plain state dict cannot be read from it and come from the flags (the
 * layout's default being the model's: ctrain_train_default_layout).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_log.h"
#include "ct_time.h"
#include "ctrain_train.h"
#include "ctrain_train_internal.h"

/* The model configuration a ctrain checkpoint records, if path is one: 1 found, 0 not a ctrain
 * checkpoint, < 0 error. */
static int ctrain_infer__ckpt_model_cfg(const char *path, ctrain_model_cfg_t *out, ct_errbuf_t *eb)
{
    ct_st_file_t *f = NULL;
    int rc = ct_st_open(&f, path, eb);
    if (rc != 0)
        return rc;
    const char *config = ct_st_meta(f, "config");
    json_t *o = config ? json_loads(config, 0, NULL) : NULL;
    json_t *model = o ? json_object_get(o, "model") : NULL;
    rc = 0;
    if (model) {
        rc = ctrain_model_cfg_from_json(model, out, eb);
        if (rc == 0)
            rc = 1;
        else
            ct_errbuf_wrap(eb, rc, "%s", path);
    }
    json_decref(o);
    ct_st_close(f);
    return rc;
}

static int ctrain_infer__conflict(const char *flag, long long given, long long file,
                                  const char *path, ct_errbuf_t *eb)
{
    return ct_errbuf_set(eb, CT_EMISMATCH, "%s was given as %lld but %s holds a model with %lld",
                         flag, given, path, file);
}

/* The model flags given on the command line against the file's model. */
static int ctrain_infer__check_model_flags(const ctrain_cfg_t *c, const ctrain_model_cfg_t *file,
                                           const char *path, ct_errbuf_t *eb)
{
    if (c->set_model && file->kind != c->model)
        return ct_errbuf_set(eb, CT_EMISMATCH, "--model was given as %s but %s holds a %s model",
                             ctrain_model_kind_name(c->model), path, ctrain_model_title(file));
    if (c->set_mhc && (file->mhc_streams > 0) != c->mhc)
        return ct_errbuf_set(eb, CT_EMISMATCH, "--%s was given but %s holds a %s model",
                             c->mhc ? "mhc" : "no_mhc", path, ctrain_model_title(file));
    if (c->set_time_span && ctrain_family(file->kind)->has_time_span &&
        file->time_span != c->time_span)
        return ctrain_infer__conflict("--time_span", c->time_span, file->time_span, path, eb);
    return 0;
}

static int ctrain_infer__resolve_cfg(const ctrain_cfg_t *c, int32_t num_items,
                                     ctrain_model_cfg_t *mc, ct_errbuf_t *eb)
{
    const char *path = c->state_dict_path;
    *mc = ctrain_train_model_cfg(c, num_items);
    ctrain_model_cfg_t file = *mc;
    int rc = ctrain_infer__ckpt_model_cfg(path, &file, eb);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        if ((rc = ctrain_infer__check_model_flags(c, &file, path, eb)) != 0)
            return rc;
        if (c->set_maxlen && file.maxlen != mc->maxlen)
            return ctrain_infer__conflict("--maxlen", mc->maxlen, file.maxlen, path, eb);
        if (c->set_heads && file.num_heads != mc->num_heads)
            return ctrain_infer__conflict("--num_heads", mc->num_heads, file.num_heads, path, eb);
        if (c->set_layout && file.layout != mc->layout)
            return ct_errbuf_set(eb, CT_EMISMATCH,
                                 "--layout was given as %s but %s holds a "
                                 "model with layout %s",
                                 ctrain_layout_name(mc->layout), path,
                                 ctrain_layout_name(file.layout));
    } else {
        int pos_rows = 0;
        if ((rc = ctrain_model_cfg_from_state_dict(path, &file, &pos_rows, eb)) != 0 ||
            (rc = ctrain_infer__check_model_flags(c, &file, path, eb)) != 0)
            return rc;
        /* a state dict with no pos_emb rows fixes maxlen itself (TiSASRec's abs_pos_K_emb) */
        if (pos_rows == 0 && c->set_maxlen && file.maxlen != c->maxlen)
            return ctrain_infer__conflict("--maxlen", c->maxlen, file.maxlen, path, eb);
        if (!c->set_layout)
            file.layout = ctrain_train_default_layout(file.kind, file.mhc_streams > 0);
    }
    if (c->set_hidden && file.hidden != mc->hidden)
        return ctrain_infer__conflict("--hidden_units", mc->hidden, file.hidden, path, eb);
    if (c->set_blocks && file.num_blocks != mc->num_blocks)
        return ctrain_infer__conflict("--num_blocks", mc->num_blocks, file.num_blocks, path, eb);
    if (file.num_items != num_items)
        return ct_errbuf_set(eb, CT_EMISMATCH,
                             "%s was trained on %d items but the dataset has %d (a different "
                             "dataset or item numbering)",
                             path, file.num_items, num_items);
    file.dropout = 0.0f;
    *mc = file;
    return ctrain_model_cfg_check(mc, eb);
}

int ctrain_infer_run(const ctrain_cfg_t *cfg, const ct_worker_env_t *env, ct_reducer_t *red,
                     ct_errbuf_t *eb)
{
    return ctrain_task_of(cfg)->infer(cfg, env, red, eb);
}

int ctrain_infer_rec(const ctrain_cfg_t *cfg, const ct_worker_env_t *env, ct_reducer_t *red,
                     ct_errbuf_t *eb)
{
    ctrain_dataset_t ds;
    memset(&ds, 0, sizeof ds);
    ct_ops_t ops;
    ctrain_model_t *model = NULL;
    ctrain_evaluator_t ev;
    memset(&ev, 0, sizeof ev);
    ctrain_model_cfg_t mc;
    int64_t t0 = ct_time_ns();
    int rc = ctrain_train_load_data(cfg, &ds, eb);
    if (rc != 0)
        return rc;
    memset(&ops, 0, sizeof ops);
    if ((rc = ctrain_train_backend(cfg, env, &ops, eb)) != 0) {
        ctrain_data_free(&ds);
        return rc;
    }
    int chunk = ctrain_train_eval_chunk(cfg, env->world_size);
    if ((rc = ctrain_infer__resolve_cfg(cfg, ds.num_items, &mc, eb)) != 0 ||
        (rc = ctrain_train_check_data(&mc, &ds, eb)) != 0 ||
        (rc = ctrain_train_check_device(&mc, &ops, eb)) != 0 ||
        (rc = ctrain_model_create(&model, &mc, &ops, chunk, eb)) != 0)
        goto out;
    if ((rc = ctrain_model_load_params(model, cfg->state_dict_path, eb)) != 0)
        goto out;
    if ((rc = ctrain_evaluator_init(&ev, &ds, &ops, chunk, mc.maxlen, cfg->eval,
                                    ctrain_family(mc.kind)->eval_excludes_target, env->rank,
                                    env->world_size, eb)) != 0)
        goto out;
    ctrain_eval_result_t r, pop;
    if ((rc = ctrain_eval_model(&ev, model, red, &r, eb)) != 0 ||
        (rc = ctrain_eval_popularity(&ev, red, &pop, eb)) != 0)
        goto out;
    char when[CTRAIN_TRAIN_PATH_MAX + 32];
    snprintf(when, sizeof when, "--inference_only %s", cfg->state_dict_path);
    if ((rc = ctrain_train_check_scores(cfg, &r, env->rank == 0, when, eb)) != 0)
        goto out;
    if (env->rank == 0) {
        printf("# ctrain --inference_only %s: %s layout %s, hidden_units %d, %d blocks, %d "
               "heads, maxlen %d; %s: %d users evaluated\n",
               cfg->state_dict_path, ctrain_model_title(&mc), ctrain_layout_name(mc.layout),
               mc.hidden, mc.num_blocks, mc.num_heads, mc.maxlen, ds.source, ds.num_eval_users);
        ctrain_out_popularity(&pop);
        ctrain_out_row_header();
        ctrain_out_row(0, 0, NAN, 0.0, &r);
        json_t *s = json_object();
        json_object_set_new(s, "inference", json_string(cfg->state_dict_path));
        json_object_set_new(s, "model", ctrain_model_cfg_to_json(&mc));
        json_object_set_new(s, "result", ctrain_out_result_json(&r));
        json_object_set_new(s, "popularity", ctrain_out_result_json(&pop));
        json_object_set_new(s, "wall_seconds", json_real((double)(ct_time_ns() - t0) / 1e9));
        ctrain_out_print_summary(s, JSON_COMPACT);
    }
out:
    ctrain_evaluator_close(&ev);
    ctrain_model_destroy(model);
    ct_ops_close(&ops);
    ctrain_data_free(&ds);
    return rc;
}
