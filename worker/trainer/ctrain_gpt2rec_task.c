/*
 * ctrain_gpt2rec_task.c - the trainer's task for --model gpt2rec (ctrain_train_internal.h), the
 * data handling, loss and evaluation of examples/pytorch/gpt2rec_ddp.py: the samples are the
 * training interactions (file order; the loop's seeded shuffle orders each epoch), a row is
 * (user, positive, negative) with the keyed negative of ctrain_gpt2rec_negative, the loss BPR
 * (ctrain_gpt2rec.h). --lm_dir adds the text side; every item's text is tokenized at set-up by
 * every rank (cut at --max_text_len tokens). In dynamic mode the model runs the LM on them
 * (ctrain_gpt2rec.c); in cached mode every item's text is run once through the LM (rank 0), and
 * the mean of its final hidden
 * states over the item's tokens is kept - in memory, and on disk in
 * TRAIN_DIR/text_cache_<key>.safetensors, key = a 64-bit FNV-1a of the LM's weights and of every
 * item's token ids, which later runs reuse. Rank 0 computes or reads it and broadcasts it.
 *
 * Evaluation ranks every item for each user with a validation (test) target, leaving out the
 * user's training items (and validation items for the test): HR@10, NDCG@10, Recall@20 and
 * NDCG@20, averaged over the users; equal scores rank the lower item index first. Users are
 * split over ranks in contiguous blocks; the partial sums are added in rank order on every rank.
 * The popularity baseline (items ranked by their training count) is evaluated the same way at
 * start.
 *
 * Not here: the model and the data files (models/gpt2rec/), the LM's passes, the loop.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_config.h"
#include "ct_fs.h"
#include "ct_log.h"
#include "ct_time.h"
#include "ctrain_gpt2rec.h"
#include "ctrain_lm.h"
#include "ctrain_lm_hf.h"
#include "ctrain_lm_tok.h"
#include "ctrain_train.h"
#include "ctrain_train_internal.h"

#define CTRAIN_GPT2REC_TASK__TOPK  20
#define CTRAIN_GPT2REC_TASK__CHUNK 64 /* items per LM pass */

typedef struct ctrain_gpt2rec_task__state {
    ctrain_gpt2rec_data_t data;
    ctrain_gpt2rec_spec_t spec;
    ctrain_lm_cfg_t lmcfg;
    bool dynamic;
    int L;               /* token columns: min(--max_text_len, the LM's positions) */
    int32_t *tokens;     /* (n_items, L) right-padded with 0 */
    int32_t *tok_len;    /* (n_items) */
    char cache_name[64]; /* the text cache's file name, "" without a text side */
    bool cache_reused;
    double cache_seconds;
    ctrain_gpt2rec_result_t popularity;
    float *items; /* (n_items, D) evaluation scratch */
    float *scores;
} ctrain_gpt2rec_task__state_t;

/* ---- set-up ---------------------------------------------------------------------------------- */

/* Every item's token ids by --lm_dir's tokenizer (no special tokens), cut at L. */
static int ctrain_gpt2rec_task__tokenize(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    const ctrain_cfg_t *c = t->cfg;
    ctrain_gpt2rec_task__state_t *s = t->task_state;
    const ctrain_gpt2rec_data_t *d = &s->data;
    const ctrain_lm_cfg_t *lc = &s->lmcfg;
    const int L = c->max_text_len < lc->max_pos ? c->max_text_len : lc->max_pos;
    s->L = L;
    ctrain_lm_tok_t *tok = NULL;
    ctrain_lm_ids_t ids = {0};
    int rc = ctrain_lm_tok_load(&tok, c->lm_dir, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, rc, "--lm_dir");
    s->tokens = malloc((size_t)d->n_items * (size_t)L * sizeof *s->tokens);
    s->tok_len = malloc((size_t)d->n_items * sizeof *s->tok_len);
    if (!s->tokens || !s->tok_len) {
        rc = ct_errbuf_set(eb, -ENOMEM, "out of memory");
        goto out;
    }
    for (int32_t i = 0; i < d->n_items; i++) {
        ids.n = 0;
        ct_errbuf_t teb;
        if ((rc = ctrain_lm_tok_encode(tok, d->text + d->text_off[i], (size_t)d->text_len[i], &ids,
                                       &teb)) != 0) {
            rc = ct_errbuf_set(eb, rc, "--item_text %s: item %lld: %s", c->item_text,
                               (long long)d->raw_item[i], teb.msg);
            goto out;
        }
        if (ids.n == 0) {
            rc = ct_errbuf_set(eb, CT_EFORMAT, "--item_text %s: item %lld: no tokens", c->item_text,
                               (long long)d->raw_item[i]);
            goto out;
        }
        int32_t *row = s->tokens + (size_t)i * L;
        s->tok_len[i] = ids.n < (size_t)L ? (int32_t)ids.n : L;
        for (int j = 0; j < L; j++)
            row[j] = j < s->tok_len[i] ? ids.ids[j] : 0;
        for (int j = 0; j < s->tok_len[i]; j++)
            if (row[j] >= lc->vocab) {
                rc = ct_errbuf_set(eb, CT_EFORMAT,
                                   "--item_text %s: item %lld: token id %d is outside the "
                                   "model's vocabulary of %d (the tokenizer of --lm_dir does "
                                   "not fit its model)",
                                   c->item_text, (long long)d->raw_item[i], row[j], lc->vocab);
                goto out;
            }
    }
out:
    ctrain_lm_ids_free(&ids);
    ctrain_lm_tok_destroy(tok);
    return rc;
}

static int ctrain_gpt2rec_task__setup(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    const ctrain_cfg_t *c = t->cfg;
    ctrain_gpt2rec_task__state_t *s = calloc(1, sizeof *s);
    if (!s)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    t->task_state = s;
    double fr[3];
    int rc = ctrain_gpt2rec_split_parse(c->split, fr, eb);
    if (rc != 0)
        return rc;
    rc = ctrain_gpt2rec_data_load(&s->data, c->dataset, c->item_text[0] ? c->item_text : NULL, fr,
                                  eb);
    if (rc != 0)
        return rc;
    s->spec = (ctrain_gpt2rec_spec_t){.n_users = s->data.n_users,
                                      .n_items = s->data.n_items,
                                      .dim = c->embed_dim,
                                      .l2 = (float)c->l2_emb};
    if (c->lm_dir[0] != '\0') {
        if (strcmp(c->text_mode, "cached") != 0 && strcmp(c->text_mode, "dynamic") != 0)
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "--text_mode: \"%.60s\" is not a mode (expected cached or "
                                 "dynamic)",
                                 c->text_mode);
        if ((rc = ctrain_lm_cfg_read(c->lm_dir, &s->lmcfg, eb)) != 0)
            return ct_errbuf_wrap(eb, rc, "--lm_dir");
        s->spec.text_dim = s->lmcfg.hidden;
        if ((rc = ctrain_gpt2rec_task__tokenize(t, eb)) != 0)
            return rc;
        s->dynamic = strcmp(c->text_mode, "dynamic") == 0;
        if (s->dynamic) {
            s->spec.lm = &s->lmcfg;
            s->spec.lm_lr_ratio = c->lm_lr / c->lr;
            s->spec.text_len = s->L;
            s->spec.tokens = s->tokens;
            s->spec.tok_len = s->tok_len;
        }
    }
    t->mcfg = (ctrain_model_cfg_t){.kind = CTRAIN_MODEL_GPT2REC,
                                   .layout = CTRAIN_LAYOUT_PRE_LN,
                                   .num_items = s->data.n_items,
                                   .maxlen = 1,
                                   .hidden = c->embed_dim,
                                   .num_heads = 1,
                                   .ext = &s->spec};
    t->n_samples = s->data.n_train;
    t->samples = malloc((size_t)t->n_samples * sizeof *t->samples);
    t->targets = malloc((size_t)t->n_samples * sizeof *t->targets);
    if (!t->samples || !t->targets)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    for (int64_t i = 0; i < t->n_samples; i++) {
        t->samples[i] = (int32_t)i;
        t->targets[i] = 1;
    }
    return 0;
}

/* ---- the text side: the cache ---------------------------------------------------------------- */

static uint64_t ctrain_gpt2rec_task__fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Every item's text embedding into text (n_items, T), computed by the LM of --lm_dir or read
 * from the cache file that holds them. Rank 0 only. */
static int ctrain_gpt2rec_task__text_rank0(ctrain_trainer_t *t, float *text, ct_errbuf_t *eb)
{
    const ctrain_cfg_t *c = t->cfg;
    ctrain_gpt2rec_task__state_t *s = t->task_state;
    const ctrain_gpt2rec_data_t *d = &s->data;
    const int T = s->spec.text_dim;
    int64_t t0 = ct_time_ns();
    ctrain_lm_t *lm = NULL;
    int32_t *rows = NULL;
    float *hid = NULL;
    ct_tensor_view_t *views = NULL;
    ct_st_file_t *f = NULL;
    const int L = s->L;
    const int32_t *all = s->tokens, *len = s->tok_len;
    int rc;
    const int chunk = CTRAIN_GPT2REC_TASK__CHUNK;
    const ctrain_lm_opts_t lm_opts = {.weights_only = true}; /* forward passes only */
    if ((rc = ctrain_lm_open_opts(&lm, c->lm_dir, &t->ops, chunk * L, L, &lm_opts, eb)) != 0) {
        rc = ct_errbuf_wrap(eb, rc, "--lm_dir");
        goto out;
    }
    /* the key: the weights and the token ids */
    uint64_t h = 0xcbf29ce484222325ull;
    views = calloc((size_t)lm->n_tensors, sizeof *views);
    if (!views) {
        rc = ct_errbuf_set(eb, -ENOMEM, "out of memory");
        goto out;
    }
    ctrain_lm_views(lm, false, views);
    for (int i = 0; i < lm->n_tensors; i++) {
        h = ctrain_gpt2rec_task__fnv(h, views[i].name, strlen(views[i].name));
        h = ctrain_gpt2rec_task__fnv(h, views[i].data, (size_t)ct_tensor_nbytes(&views[i]));
    }
    h = ctrain_gpt2rec_task__fnv(h, len, (size_t)d->n_items * sizeof *len);
    h = ctrain_gpt2rec_task__fnv(h, all, (size_t)d->n_items * (size_t)L * sizeof *all);
    snprintf(s->cache_name, sizeof s->cache_name, "text_cache_%016" PRIx64 ".safetensors", h);
    char path[CTRAIN_TRAIN_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", c->train_dir, s->cache_name);
    ct_tensor_view_t tv = {
        .name = "text", .dtype = CT_DTYPE_F32, .ndim = 2, .shape = {d->n_items, T}, .data = text};
    if (access(path, R_OK) == 0) {
        ct_errbuf_t reb;
        if (ct_st_open(&f, path, &reb) == 0 && ct_st_read(f, &tv, 1, 0, &reb) == 0) {
            s->cache_reused = true;
            goto done;
        }
        ct_log_warn("text cache %s unusable (%s); computing it again", path, reb.msg);
    }
    rows = malloc((size_t)chunk * L * sizeof *rows);
    hid = malloc((size_t)chunk * L * T * sizeof *hid);
    if (!rows || !hid) {
        rc = ct_errbuf_set(eb, -ENOMEM, "out of memory");
        goto out;
    }
    for (int32_t i0 = 0; i0 < d->n_items; i0 += chunk) {
        const int B = d->n_items - i0 < chunk ? d->n_items - i0 : chunk;
        int Lc = 1;
        for (int r = 0; r < B; r++)
            Lc = len[i0 + r] > Lc ? len[i0 + r] : Lc;
        for (int r = 0; r < B; r++)
            memcpy(rows + (size_t)r * Lc, all + (size_t)(i0 + r) * L, (size_t)Lc * sizeof *rows);
        ctrain_lm_batch_t b = {.B = B, .L = Lc, .ids = rows};
        float unused = 0.0f;
        if ((rc = ctrain_lm_forward_backward(lm, &b, 1.0f, false, &unused, eb)) != 0) {
            rc = ct_errbuf_wrap(eb, rc, "--lm_dir: embedding the item texts");
            goto out;
        }
        t->ops.copy(&t->ops, hid, ctrain_lm_hidden(lm), (size_t)B * Lc * T * sizeof *hid,
                    CT_COPY_D2H);
        if ((rc = t->ops.sync(&t->ops)) != 0) {
            rc = ct_errbuf_set(eb, rc, "--lm_dir: embedding the item texts failed");
            goto out;
        }
        /* the mean over the item's tokens (right padding: causal attention never sees it) */
        for (int r = 0; r < B; r++) {
            float *o = text + (size_t)(i0 + r) * T;
            for (int k = 0; k < T; k++)
                o[k] = 0.0f;
            for (int j = 0; j < len[i0 + r]; j++) {
                const float *x = hid + ((size_t)r * Lc + j) * T;
                for (int k = 0; k < T; k++)
                    o[k] += x[k];
            }
            for (int k = 0; k < T; k++)
                o[k] /= (float)len[i0 + r];
        }
        ct_worker_progress((uint64_t)t->step);
    }
    if ((rc = ct_fs_mkdir_p(c->train_dir, 0755, eb)) != 0 ||
        (rc = ct_st_save(path, &tv, 1, NULL, 0, eb)) != 0) {
        rc = ct_errbuf_wrap(eb, rc, "writing the text cache");
        goto out;
    }
done:
    s->cache_seconds = (double)(ct_time_ns() - t0) / 1e9;
out:
    ct_st_close(f);
    free(views);
    free(rows);
    free(hid);
    ctrain_lm_destroy(lm);
    return rc;
}

/* The text embeddings on every rank (rank 0's, broadcast with the cache's name), into the
 * model. */
static int ctrain_gpt2rec_task__text(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    ctrain_gpt2rec_task__state_t *s = t->task_state;
    const size_t n = (size_t)s->spec.n_items * (size_t)s->spec.text_dim;
    float *text = calloc(n, sizeof *text);
    if (!text)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for the text embeddings");
    int rc = 0, rc0 = 0;
    if (t->rank0)
        rc0 = ctrain_gpt2rec_task__text_rank0(t, text, eb);
    if (t->env->world_size > 1) {
        /* rank 0's outcome first, so that every rank fails together */
        int32_t flag = rc0;
        ct_errbuf_t beb;
        if ((rc = ct_reducer_broadcast(t->red, &flag, sizeof flag, 0, &beb)) == 0 && flag == 0 &&
            (rc = ct_reducer_broadcast(t->red, s->cache_name, sizeof s->cache_name, 0, &beb)) == 0)
            rc = ct_reducer_broadcast(t->red, text, n * sizeof *text, 0, &beb);
        if (rc != 0)
            rc = ct_errbuf_set(eb, rc, "broadcasting the text embeddings: %s", beb.msg);
        else if (flag != 0 && !t->rank0)
            rc = ct_errbuf_set(eb, flag, "rank 0 could not compute the text embeddings");
    }
    if (rc == 0)
        rc = rc0;
    if (rc == 0 && (rc = ctrain_gpt2rec_set_text(t->model, text)) != 0)
        rc = ct_errbuf_set(eb, rc, "out of memory for the text embeddings");
    free(text);
    return rc;
}

/* Dynamic mode: the LM's weights from the Hugging Face folder dir. */
static int ctrain_gpt2rec_task__load_lm(ctrain_model_t *m, const char *dir, ct_errbuf_t *eb)
{
    return ctrain_lm_load(ctrain_gpt2rec_lm(m), dir, eb);
}

/* --state_dict_path: every tensor of the file must be one of this model's parameters or a ctrain
 * checkpoint's Adam moment (optimizer.*), so that a state dict of another text mode is refused
 * rather than half loaded (the reference's load_state_dict is strict too); the parameters'
 * presence and shapes are ctrain_model_load_params's check. One line naming the tensor. */
static int ctrain_gpt2rec_task__check_names(ctrain_trainer_t *t, const char *path, ct_errbuf_t *eb)
{
    const ctrain_gpt2rec_task__state_t *s = t->task_state;
    ct_st_file_t *f = NULL;
    int rc = ct_st_open(&f, path, eb);
    if (rc != 0)
        return rc;
    ct_tensor_view_t *views = calloc((size_t)t->model->n_params, sizeof *views);
    if (!views) {
        ct_st_close(f);
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    }
    const size_t n = ctrain_model_views(t->model, CTRAIN_MODEL_VIEW_PARAMS, views);
    for (size_t k = 0; k < ct_st_count(f) && rc == 0; k++) {
        const char *name = ct_st_tensor_at(f, k)->name;
        bool known = strncmp(name, "optimizer.", 10) == 0;
        for (size_t i = 0; i < n && !known; i++)
            known = strcmp(name, views[i].name) == 0;
        if (known)
            continue;
        const char *why;
        if (strncmp(name, "module.", 7) == 0)
            why = "DistributedDataParallel's prefix: examples/convert_pytorch_checkpoint.py "
                  "strips it";
        else if (strncmp(name, "gpt2.", 5) == 0 && s->spec.text_dim > 0)
            why = "the LM fine-tuned with the recommender: load it with --text_mode dynamic";
        else if (strncmp(name, "gpt2.", 5) == 0 || strncmp(name, "proj.", 5) == 0)
            why = "a model with a text side: give --lm_dir and --item_text";
        else
            why = "not a tensor of this model";
        rc = ct_errbuf_set(eb, CT_EMISMATCH, "%s: tensor \"%s\" is not part of this %s model (%s)",
                           path, name,
                           s->spec.text_dim == 0 ? "ID-only"
                           : s->dynamic          ? "--text_mode dynamic"
                                                 : "--text_mode cached",
                           why);
    }
    free(views);
    ct_st_close(f);
    return rc;
}

static int ctrain_gpt2rec_task__init(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    const ctrain_cfg_t *c = t->cfg;
    ctrain_gpt2rec_task__state_t *s = t->task_state;
    int rc;
    bool lm_kept = false;
    if ((rc = ctrain_gpt2rec_init(t->model, c->seed)) != 0)
        return ct_errbuf_set(eb, rc, "initialising the model failed");
    if (s->dynamic && (rc = ctrain_gpt2rec_task__load_lm(t->model, c->lm_dir, eb)) != 0)
        return ct_errbuf_wrap(eb, rc, "--lm_dir");
    if (c->state_dict_path[0] != '\0' &&
        ((rc = ctrain_gpt2rec_task__check_names(t, c->state_dict_path, eb)) != 0 ||
         (rc = ctrain_model_load_params_opt(t->model, c->state_dict_path,
                                            s->dynamic ? "gpt2." : NULL, &lm_kept, eb)) != 0))
        return ct_errbuf_wrap(eb, rc, "--state_dict_path");
    if (lm_kept)
        ct_log_info("--state_dict_path %s holds no LM (a cached-mode or earlier state dict): the "
                    "LM starts from --lm_dir %s",
                    c->state_dict_path, c->lm_dir);
    if (s->spec.text_dim > 0 && !s->dynamic && (rc = ctrain_gpt2rec_task__text(t, eb)) != 0)
        return rc;
    s->items = malloc((size_t)s->spec.n_items * (size_t)s->spec.dim * sizeof *s->items);
    s->scores = malloc((size_t)s->spec.n_items * sizeof *s->scores);
    if (!s->items || !s->scores)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    return 0;
}

static void ctrain_gpt2rec_task__teardown(ctrain_trainer_t *t)
{
    ctrain_gpt2rec_task__state_t *s = t->task_state;
    if (!s)
        return;
    ctrain_gpt2rec_data_free(&s->data);
    free(s->tokens);
    free(s->tok_len);
    free(s->items);
    free(s->scores);
    free(s);
    t->task_state = NULL;
}

/* ---- checkpoints, header --------------------------------------------------------------------- */

static json_t *ctrain_gpt2rec_task__model_json(const ctrain_trainer_t *t)
{
    const ctrain_cfg_t *c = t->cfg;
    const ctrain_gpt2rec_task__state_t *s = t->task_state;
    return json_pack("{s:s, s:i, s:i, s:s, s:s, s:i}", "kind", "gpt2rec", "embed_dim", s->spec.dim,
                     "text_dim", s->spec.text_dim, "text_mode",
                     s->spec.text_dim == 0 ? "none"
                     : s->dynamic          ? "dynamic"
                                           : "cached",
                     "text", s->cache_name, "max_text_len",
                     s->spec.text_dim > 0 ? c->max_text_len : 0);
}

static json_t *ctrain_gpt2rec_task__data_json(const ctrain_trainer_t *t)
{
    const ctrain_gpt2rec_task__state_t *s = t->task_state;
    const ctrain_gpt2rec_data_t *d = &s->data;
    return json_pack("{s:s, s:s, s:i, s:i, s:I, s:I, s:I, s:I}", "source", d->source, "split",
                     t->cfg->split, "num_users", d->n_users, "num_items", d->n_items,
                     "num_interactions", (json_int_t)d->n_inter, "train", (json_int_t)d->n_train,
                     "valid", (json_int_t)d->n_valid, "test", (json_int_t)d->n_test);
}

static json_t *ctrain_gpt2rec_task__ckpt_json(const ctrain_trainer_t *t)
{
    return json_pack("{s:o, s:o}", "model", ctrain_gpt2rec_task__model_json(t), "data",
                     ctrain_gpt2rec_task__data_json(t));
}

static int ctrain_gpt2rec_task__check_ckpt(const ctrain_trainer_t *t, const json_t *o,
                                           const char *name, ct_errbuf_t *eb)
{
    json_t *model = json_object_get(o, "model"), *data = json_object_get(o, "data");
    if (!json_is_object(model) || !json_is_object(data))
        return ct_errbuf_set(eb, CT_EFORMAT,
                             "refusing to resume from %s/%s: it is not a ctrain training "
                             "checkpoint (no usable configuration)",
                             t->ckpt.path, name);
    json_t *mm = ctrain_gpt2rec_task__model_json(t), *md = ctrain_gpt2rec_task__data_json(t);
    json_object_del(md, "source"); /* the same data may live elsewhere */
    json_t *od = json_deep_copy(data);
    if (od)
        json_object_del(od, "source");
    const bool same_model = json_equal(model, mm), same_data = od && json_equal(od, md);
    char *a = json_dumps(same_model ? od : model, JSON_COMPACT | JSON_SORT_KEYS);
    char *b = json_dumps(same_model ? md : mm, JSON_COMPACT | JSON_SORT_KEYS);
    int rc = 0;
    if (!same_model || !same_data)
        rc = ct_errbuf_set(eb, CT_EMISMATCH,
                           "refusing to resume from %s/%s: its %s differs from this run's (%.300s "
                           "vs %.300s); use another --train_dir or --resume never",
                           t->ckpt.path, name, same_model ? "data" : "model configuration",
                           a ? a : "?", b ? b : "?");
    free(a);
    free(b);
    json_decref(mm);
    json_decref(md);
    json_decref(od);
    return rc;
}

static void ctrain_gpt2rec_task__header(ctrain_trainer_t *t)
{
    const ctrain_cfg_t *c = t->cfg;
    const ctrain_gpt2rec_task__state_t *s = t->task_state;
    const ctrain_gpt2rec_data_t *d = &s->data;
    printf("# ctrain %s: GPT2Rec: user and item vectors of %d", CT_VERSION, s->spec.dim);
    if (s->spec.text_dim > 0)
        printf(" plus proj(text), text = mean of %s's final hidden states (width %d) over the "
               "item's first %d tokens, ",
               c->lm_dir, s->spec.text_dim, s->L);
    if (s->dynamic)
        printf("the LM fine-tuned with the recommender (lr %g)", c->lm_lr);
    else if (s->spec.text_dim > 0)
        printf("cached in %s/%s (%s, %.1f s)", c->train_dir, s->cache_name,
               s->cache_reused ? "reused" : "computed", s->cache_seconds);
    else
        printf(" (ID embeddings only: matrix factorisation)");
    printf("; %zu parameters; BPR with one sampled negative, penalty %g\n", t->model->num_params,
           c->l2_emb);
    printf("# data: %s: %d users, %d items, %lld interactions -> %lld train, %lld validation, "
           "%lld test (per user in time order, %s)",
           d->source, d->n_users, d->n_items, (long long)d->n_inter, (long long)d->n_train,
           (long long)d->n_valid, (long long)d->n_test, c->split);
    if (d->text)
        printf("; texts from %s (%lld items without one got \"item <id>\")", c->item_text,
               (long long)d->missing_text);
    printf("\n");
    ctrain_out_training_line(t, "interactions");
    printf("# evaluation every %d epoch%s: every item ranked except the user's training items "
           "(test: and validation items); best checkpoint = highest validation NDCG@10\n",
           c->eval_every, c->eval_every == 1 ? "" : "s");
    fflush(stdout);
}

/* ---- batches --------------------------------------------------------------------------------- */

static void ctrain_gpt2rec_task__fill(const void *ctx, ctrain_batch_t *b, int r, int32_t sample,
                                      uint64_t seed, uint64_t key)
{
    const ctrain_gpt2rec_task__state_t *s = ctx;
    const int32_t u = s->data.tr_u[sample];
    b->user[r] = u + 1;
    b->seq[(size_t)r * b->L] = u;
    b->pos[(size_t)r * b->L] = s->data.tr_i[sample];
    b->neg[(size_t)r * b->L * b->num_neg] = ctrain_gpt2rec_negative(&s->data, u, seed, key);
}

/* ---- evaluation ------------------------------------------------------------------------------ */

/* The sums of HR@10, NDCG@10, Recall@20, NDCG@20 over this rank's users of one split, then over
 * every rank (in rank order). U NULL: the popularity scores. */
static int ctrain_gpt2rec_task__eval_split(ctrain_trainer_t *t, const float *U, bool test,
                                           double out[4], int64_t *users, ct_errbuf_t *eb)
{
    ctrain_gpt2rec_task__state_t *s = t->task_state;
    const ctrain_gpt2rec_data_t *d = &s->data;
    const int D = s->spec.dim, K = CTRAIN_GPT2REC_TASK__TOPK;
    const int64_t *toff = test ? d->te_off : d->va_off;
    const int32_t *tit = test ? d->te_items : d->va_items;
    int32_t n_eval = 0;
    for (int32_t u = 0; u < d->n_users; u++)
        n_eval += toff[u + 1] > toff[u];
    const int W = t->env->world_size, R = t->env->rank;
    const int64_t lo = (int64_t)n_eval * R / W, hi = (int64_t)n_eval * (R + 1) / W;
    double disc[CTRAIN_GPT2REC_TASK__TOPK];
    for (int j = 0; j < K; j++)
        disc[j] = 1.0 / log2((double)j + 2.0);
    double sum[4] = {0, 0, 0, 0};
    int64_t idx = 0;
    for (int32_t u = 0; u < d->n_users; u++) {
        if (toff[u + 1] == toff[u])
            continue;
        if (idx < lo || idx >= hi) {
            idx++;
            continue;
        }
        idx++;
        float *sc = s->scores;
        if (U) {
            const float *eu = U + (size_t)u * D;
            for (int32_t i = 0; i < d->n_items; i++) {
                const float *v = s->items + (size_t)i * D;
                float acc = 0.0f;
                for (int k = 0; k < D; k++)
                    acc += eu[k] * v[k];
                sc[i] = acc;
            }
        } else {
            for (int32_t i = 0; i < d->n_items; i++)
                sc[i] = (float)d->train_count[i];
        }
        for (int64_t j = d->tr_off[u]; j < d->tr_off[u + 1]; j++)
            sc[d->tr_items[j]] = -INFINITY;
        if (test)
            for (int64_t j = d->va_off[u]; j < d->va_off[u + 1]; j++)
                sc[d->va_items[j]] = -INFINITY;
        /* the top K, best first; ties: the lower index */
        int32_t top[CTRAIN_GPT2REC_TASK__TOPK];
        float tv[CTRAIN_GPT2REC_TASK__TOPK];
        int nt = 0;
        for (int32_t i = 0; i < d->n_items; i++) {
            const float v = sc[i];
            if (nt == K && !(v > tv[K - 1]))
                continue;
            int p = nt < K ? nt++ : K - 1;
            while (p > 0 && v > tv[p - 1]) {
                tv[p] = tv[p - 1];
                top[p] = top[p - 1];
                p--;
            }
            tv[p] = v;
            top[p] = i;
        }
        const int64_t nt_targets = toff[u + 1] - toff[u];
        double dcg10 = 0, dcg20 = 0, idcg10 = 0, idcg20 = 0;
        int hits10 = 0, hits20 = 0;
        for (int j = 0; j < nt; j++) {
            const int32_t i = top[j];
            int64_t a = toff[u], b = toff[u + 1];
            while (a < b) {
                int64_t mid = a + (b - a) / 2;
                if (tit[mid] < i)
                    a = mid + 1;
                else
                    b = mid;
            }
            if (a < toff[u + 1] && tit[a] == i) {
                if (j < 10) {
                    hits10++;
                    dcg10 += disc[j];
                }
                hits20++;
                dcg20 += disc[j];
            }
        }
        for (int j = 0; j < K && j < nt_targets; j++) {
            if (j < 10)
                idcg10 += disc[j];
            idcg20 += disc[j];
        }
        sum[0] += hits10 > 0;
        sum[1] += dcg10 / idcg10;
        sum[2] += (double)hits20 / (double)nt_targets;
        sum[3] += dcg20 / idcg20;
        if ((idx & 255) == 0)
            ct_worker_progress((uint64_t)t->step);
    }
    for (int k = 0; k < 4; k++)
        out[k] = 0.0;
    for (int root = 0; root < W; root++) {
        double v[4];
        memcpy(v, sum, sizeof v);
        ct_errbuf_t beb;
        int rc;
        if (W > 1 && (rc = ct_reducer_broadcast(t->red, v, sizeof v, root, &beb)) != 0)
            return ct_errbuf_set(eb, rc, "evaluation: gathering the metrics: %s", beb.msg);
        for (int k = 0; k < 4; k++)
            out[k] += v[k];
    }
    for (int k = 0; k < 4; k++)
        out[k] /= n_eval > 0 ? (double)n_eval : 1.0;
    *users = n_eval;
    return 0;
}

static int ctrain_gpt2rec_task__eval(ctrain_trainer_t *t, bool popularity,
                                     ctrain_gpt2rec_result_t *r, ct_errbuf_t *eb)
{
    ctrain_gpt2rec_task__state_t *s = t->task_state;
    const float *U = NULL;
    if (!popularity) {
        int rc = ctrain_gpt2rec_item_vectors(t->model, s->items);
        if (rc != 0)
            return ct_errbuf_set(eb, rc, "evaluation: the item vectors");
        U = ctrain_gpt2rec_user_table(t->model);
        if (!U)
            return ct_errbuf_set(eb, CT_ECUDA, "evaluation: copying the user table off the device");
    }
    int rc = ctrain_gpt2rec_task__eval_split(t, U, false, r->valid, &r->valid_users, eb);
    if (rc == 0)
        rc = ctrain_gpt2rec_task__eval_split(t, U, true, r->test, &r->test_users, eb);
    return rc;
}

static json_t *ctrain_gpt2rec_task__split_json(const double m[4], int64_t users)
{
    return json_pack("{s:o, s:o, s:o, s:o, s:I}", "hr@10", ctrain_out_num(m[0]), "ndcg@10",
                     ctrain_out_num(m[1]), "recall@20", ctrain_out_num(m[2]), "ndcg@20",
                     ctrain_out_num(m[3]), "users", (json_int_t)users);
}

static json_t *ctrain_gpt2rec_task__result_json(const ctrain_result_t *r)
{
    return json_pack("{s:o, s:o}", "valid",
                     ctrain_gpt2rec_task__split_json(r->gpt2rec.valid, r->gpt2rec.valid_users),
                     "test",
                     ctrain_gpt2rec_task__split_json(r->gpt2rec.test, r->gpt2rec.test_users));
}

static int ctrain_gpt2rec_task__split_from_json(const json_t *o, double m[4], int64_t *users)
{
    static const char *const keys[4] = {"hr@10", "ndcg@10", "recall@20", "ndcg@20"};
    if (!json_is_object(o))
        return -1;
    for (int k = 0; k < 4; k++) {
        json_t *v = json_object_get(o, keys[k]);
        if (json_is_number(v))
            m[k] = json_number_value(v);
        else if (json_is_null(v))
            m[k] = NAN;
        else
            return -1;
    }
    json_t *n = json_object_get(o, "users");
    if (!json_is_integer(n))
        return -1;
    *users = json_integer_value(n);
    return 0;
}

static int ctrain_gpt2rec_task__result_from_json(const json_t *o, ctrain_result_t *r)
{
    if (ctrain_gpt2rec_task__split_from_json(json_object_get(o, "valid"), r->gpt2rec.valid,
                                             &r->gpt2rec.valid_users) != 0 ||
        ctrain_gpt2rec_task__split_from_json(json_object_get(o, "test"), r->gpt2rec.test,
                                             &r->gpt2rec.test_users) != 0)
        return -1;
    return 0;
}

static int ctrain_gpt2rec_task__start(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    const ctrain_cfg_t *c = t->cfg;
    ctrain_gpt2rec_task__state_t *s = t->task_state;
    ctrain_gpt2rec_result_t *pop = &s->popularity;
    int rc = ctrain_gpt2rec_task__eval(t, true, pop, eb);
    if (rc != 0)
        return rc;
    if (t->rank0) {
        printf("# popularity baseline: validation HR@10 %.4f NDCG@10 %.4f Recall@20 %.4f "
               "NDCG@20 %.4f; test HR@10 %.4f NDCG@10 %.4f Recall@20 %.4f NDCG@20 %.4f\n",
               pop->valid[0], pop->valid[1], pop->valid[2], pop->valid[3], pop->test[0],
               pop->test[1], pop->test[2], pop->test[3]);
        fflush(stdout);
        ctrain_result_t pr;
        pr.gpt2rec = *pop;
        json_t *j = ctrain_gpt2rec_task__result_json(&pr);
        rc = ctrain_out_write_json(c->train_dir, "popularity.json", j, eb);
        json_decref(j);
        if (rc != 0)
            return rc;
    }
    return ctrain_loader_init(&t->loader, ctrain_gpt2rec_task__fill, s, t->samples, t->targets,
                              &t->shard, t->micro, 1, false, 0, c->seed, t->step, t->total_steps,
                              c->num_workers > 0, eb);
}

static int ctrain_gpt2rec_task__evaluate(ctrain_trainer_t *t, int64_t epoch, ctrain_result_t *r,
                                         ct_errbuf_t *eb)
{
    int rc = ctrain_gpt2rec_task__eval(t, false, &r->gpt2rec, eb);
    if (rc != 0 || isfinite(r->gpt2rec.valid[1]))
        return rc;
    return ctrain_train_eval_nonfinite(t, epoch, "NDCG@10", eb);
}

static double ctrain_gpt2rec_task__select(const ctrain_cfg_t *c, const ctrain_result_t *r)
{
    (void)c;
    return r->gpt2rec.valid[1];
}

static const char *ctrain_gpt2rec_task__selected_on(const ctrain_cfg_t *c)
{
    (void)c;
    return "valid.ndcg@10";
}

static void ctrain_gpt2rec_task__row(int64_t epoch, int64_t step, double loss, double rate,
                                     const ctrain_result_t *r)
{
    if (r == NULL) {
        printf("#  epoch      step train_loss  samples/s   v_hr@10 v_ndcg@10 v_rec@20 v_ndcg@20"
               "   t_hr@10 t_ndcg@10 t_rec@20 t_ndcg@20\n");
    } else {
        printf("%8lld %9lld", (long long)epoch, (long long)step);
        if (isfinite(loss))
            printf(" %10.5f", loss);
        else
            printf(" %10s", "-");
        printf(" %10.0f", rate);
        for (int k = 0; k < 4; k++)
            printf(" %9.4f", r->gpt2rec.valid[k]);
        for (int k = 0; k < 4; k++)
            printf(" %9.4f", r->gpt2rec.test[k]);
        printf("\n");
    }
    fflush(stdout);
}

static size_t ctrain_gpt2rec_task__scalars(const ctrain_result_t *r, ctrain_scalar_t *sc)
{
    static const char *const tags[8] = {"valid/hr@10",    "valid/ndcg@10", "valid/recall@20",
                                        "valid/ndcg@20",  "test/hr@10",    "test/ndcg@10",
                                        "test/recall@20", "test/ndcg@20"};
    for (int k = 0; k < 4; k++) {
        sc[k] = (ctrain_scalar_t){tags[k], r->gpt2rec.valid[k]};
        sc[4 + k] = (ctrain_scalar_t){tags[4 + k], r->gpt2rec.test[k]};
    }
    return 8;
}

static void ctrain_gpt2rec_task__summary(ctrain_trainer_t *t, json_t *o)
{
    const ctrain_gpt2rec_task__state_t *s = t->task_state;
    ctrain_result_t pr;
    pr.gpt2rec = s->popularity;
    json_object_set_new(o, "popularity", ctrain_gpt2rec_task__result_json(&pr));
}

static int ctrain_gpt2rec_task__finish(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    (void)t, (void)eb;
    return 0;
}

/* ---- --inference_only ------------------------------------------------------------------------ */

static int ctrain_gpt2rec_task__infer(const ctrain_cfg_t *cfg, const ct_worker_env_t *env,
                                      ct_reducer_t *red, ct_errbuf_t *eb)
{
    int64_t t0 = ct_time_ns();
    ctrain_trainer_t *t = calloc(1, sizeof *t);
    if (!t)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    t->cfg = cfg;
    t->task = &ctrain_gpt2rec_task;
    t->env = env;
    t->red = red;
    t->rank0 = env->rank == 0;
    t->micro = 1;
    ctrain_result_t r, pop;
    int rc = ctrain_gpt2rec_task__setup(t, eb);
    if (rc == 0)
        rc = ctrain_train_backend(cfg, env, &t->ops, eb);
    if (rc == 0)
        rc = ctrain_train_check_device(&t->mcfg, &t->ops, eb);
    if (rc == 0)
        rc = ctrain_model_create(&t->model, &t->mcfg, &t->ops, t->micro, eb);
    if (rc == 0)
        rc = ctrain_gpt2rec_task__init(t, eb);
    if (rc == 0)
        rc = ctrain_gpt2rec_task__eval(t, false, &r.gpt2rec, eb);
    if (rc == 0)
        rc = ctrain_gpt2rec_task__eval(t, true, &pop.gpt2rec, eb);
    if (rc == 0 && t->rank0) {
        json_t *o = json_object();
        json_object_set_new(o, "inference", json_string(cfg->state_dict_path));
        json_object_set_new(o, "model", ctrain_gpt2rec_task__model_json(t));
        json_object_set_new(o, "data", ctrain_gpt2rec_task__data_json(t));
        json_object_set_new(o, "metrics", ctrain_gpt2rec_task__result_json(&r));
        json_object_set_new(o, "popularity", ctrain_gpt2rec_task__result_json(&pop));
        json_object_set_new(o, "wall_seconds", json_real((double)(ct_time_ns() - t0) / 1e9));
        ctrain_out_print_summary(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
    }
    ctrain_gpt2rec_task__teardown(t);
    ctrain_model_destroy(t->model);
    ct_ops_close(&t->ops);
    free(t->samples);
    free(t->targets);
    free(t);
    return rc;
}

const ctrain_task_t ctrain_gpt2rec_task = {
    .setup = ctrain_gpt2rec_task__setup,
    .init = ctrain_gpt2rec_task__init,
    .teardown = ctrain_gpt2rec_task__teardown,
    .header = ctrain_gpt2rec_task__header,
    .ckpt_json = ctrain_gpt2rec_task__ckpt_json,
    .check_ckpt = ctrain_gpt2rec_task__check_ckpt,
    .start = ctrain_gpt2rec_task__start,
    .evaluate = ctrain_gpt2rec_task__evaluate,
    .select = ctrain_gpt2rec_task__select,
    .selected_on = ctrain_gpt2rec_task__selected_on,
    .result_json = ctrain_gpt2rec_task__result_json,
    .result_from_json = ctrain_gpt2rec_task__result_from_json,
    .row = ctrain_gpt2rec_task__row,
    .scalars = ctrain_gpt2rec_task__scalars,
    .summary = ctrain_gpt2rec_task__summary,
    .finish = ctrain_gpt2rec_task__finish,
    .infer = ctrain_gpt2rec_task__infer,
};
