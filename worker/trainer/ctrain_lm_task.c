/*
 * ctrain_lm_task.c - the trainer's task for --model lm (ctrain_train_internal.h): the text data
 * (one document per line, each tokenized on its own with no special tokens added and cut at the
 * tokens per line L = the model's max positions, or --maxlen if smaller), the rows the loader
 * fills (token ids, next-token targets, right-padded), the evaluation (mean next-token
 * cross-entropy and perplexity over every predicted token of the validation lines: --eval_dataset,
 * or --dataset itself), --inference_only over --dataset, --save_hf.
 *
 * The training loss of a step is the sum over the predicted tokens of its global batch divided by
 * their count over all micro-batches and ranks (the loop's `count`), so a step on W ranks is the
 * step on one. Evaluation splits the lines over ranks in contiguous blocks; each rank sums in
 * double and the W partial sums are added in rank order on every rank.
 *
 * Not here: the passes (ctrain_lm.c), the model family (ctrain_lm_family.c), the loop.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_config.h"
#include "ct_fs.h"
#include "ct_log.h"
#include "ct_time.h"
#include "ctrain_lm_family.h"
#include "ctrain_lm_hf.h"
#include "ctrain_lm_tok.h"
#include "ctrain_train.h"
#include "ctrain_train_internal.h"

/* The kept lines of one file: lines with at least 2 tokens (one prediction). */
typedef struct ctrain_lm_task__corpus {
    char path[CTRAIN_TRAIN_PATH_MAX];
    int32_t *ids;   /* every kept line's tokens, one after the other */
    int64_t *start; /* (n) */
    int32_t *len;   /* (n) tokens of the line, <= L */
    int64_t n;      /* kept lines */
    int64_t read;   /* lines in the file */
    double tokens;  /* predicted tokens: sum(len - 1) */
} ctrain_lm_task__corpus_t;

typedef struct ctrain_lm_task__state {
    ctrain_lm_model_spec_t spec;
    int L;
    ctrain_lm_task__corpus_t train, valid_own;
    const ctrain_lm_task__corpus_t *valid; /* &valid_own, or &train */
    int32_t *ids, *tgt;                    /* evaluation rows, host (micro * L) */
} ctrain_lm_task__state_t;

static void ctrain_lm_task__corpus_free(ctrain_lm_task__corpus_t *c)
{
    free(c->ids);
    free(c->start);
    free(c->len);
    memset(c, 0, sizeof *c);
}

/* The whole of path into *text (malloc'd, *size bytes). */
static int ctrain_lm_task__slurp(const char *path, char **text, size_t *size, ct_errbuf_t *eb)
{
    *text = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return ct_errbuf_set(eb, -e, "%s: %s", path, strerror(e));
    }
    *text = malloc((size_t)st.st_size + 1);
    int rc = *text ? ct_fs_read_full(fd, *text, (size_t)st.st_size, 0) : -ENOMEM;
    close(fd);
    if (rc != 0) {
        free(*text);
        *text = NULL;
        return ct_errbuf_set(eb, rc, "%s: %s", path, ct_strerror(rc));
    }
    *size = (size_t)st.st_size;
    return 0;
}

/* Reads and tokenizes path. Errors name the file and the line. */
static int ctrain_lm_task__read(ctrain_lm_task__corpus_t *c, const char *path,
                                const ctrain_lm_tok_t *tok, int vocab, int L, ct_errbuf_t *eb)
{
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s", path);
    char *text = NULL;
    size_t size = 0;
    int rc = ctrain_lm_task__slurp(path, &text, &size, eb);
    if (rc != 0)
        return rc;
    ctrain_lm_ids_t ids = {0};
    size_t cap = 0, kept_tokens = 0;
    for (size_t off = 0; off < size;) {
        const char *line = text + off;
        const char *nl = memchr(line, '\n', size - off);
        size_t n = nl ? (size_t)(nl - line) : size - off;
        off += n + (nl != NULL);
        c->read++;
        if (n == 0)
            continue;
        ids.n = 0;
        ct_errbuf_t teb;
        if ((rc = ctrain_lm_tok_encode(tok, line, n, &ids, &teb)) != 0) {
            rc = ct_errbuf_set(eb, rc, "%s:%lld: %s", path, (long long)c->read, teb.msg);
            goto out;
        }
        for (size_t i = 0; i < ids.n; i++)
            if (ids.ids[i] >= vocab) {
                rc = ct_errbuf_set(eb, CT_EFORMAT,
                                   "%s:%lld: token id %d is outside the model's vocabulary of %d "
                                   "(the tokenizer of --lm_dir does not fit its model)",
                                   path, (long long)c->read, ids.ids[i], vocab);
                goto out;
            }
        size_t len = ids.n < (size_t)L ? ids.n : (size_t)L;
        if (len < 2)
            continue;
        if (c->n == INT32_MAX) {
            rc = ct_errbuf_set(eb, CT_ERANGE_VALUE, "%s: more than %d lines", path, INT32_MAX);
            goto out;
        }
        if ((size_t)c->n == cap) {
            cap = cap ? 2 * cap : 1024;
            int64_t *s = realloc(c->start, cap * sizeof *s);
            if (s)
                c->start = s;
            int32_t *l = realloc(c->len, cap * sizeof *l);
            if (l)
                c->len = l;
            if (!s || !l) {
                rc = ct_errbuf_set(eb, -ENOMEM, "%s: out of memory", path);
                goto out;
            }
        }
        int32_t *all = realloc(c->ids, (kept_tokens + len) * sizeof *all);
        if (!all) {
            rc = ct_errbuf_set(eb, -ENOMEM, "%s: out of memory", path);
            goto out;
        }
        c->ids = all;
        memcpy(all + kept_tokens, ids.ids, len * sizeof *all);
        c->start[c->n] = (int64_t)kept_tokens;
        c->len[c->n] = (int32_t)len;
        c->n++;
        c->tokens += (double)(len - 1);
        kept_tokens += len;
    }
    if (c->n == 0)
        rc = ct_errbuf_set(eb, CT_EFORMAT,
                           "%s: no line has the 2 tokens a next-token prediction needs (%lld "
                           "lines read)",
                           path, (long long)c->read);
out:
    ctrain_lm_ids_free(&ids);
    free(text);
    if (rc != 0)
        ctrain_lm_task__corpus_free(c);
    return rc;
}

/* Row r of (ids, tgt), L columns: line i's tokens, targets the next token, -1 past it. */
static void ctrain_lm_task__row(const ctrain_lm_task__corpus_t *c, int64_t i, int L, int32_t *ids,
                                int32_t *tgt)
{
    const int32_t *src = c->ids + c->start[i];
    const int n = c->len[i];
    for (int j = 0; j < L; j++) {
        ids[j] = j < n ? src[j] : 0;
        tgt[j] = j + 1 < n ? src[j + 1] : -1;
    }
}

static void ctrain_lm_task__fill(const void *ctx, ctrain_batch_t *b, int r, int32_t sample,
                                 uint64_t seed, uint64_t key)
{
    (void)seed, (void)key;
    const ctrain_lm_task__state_t *s = ctx;
    ctrain_lm_task__row(&s->train, sample, s->L, b->seq + (size_t)r * b->L,
                        b->pos + (size_t)r * b->L);
}

/* ---- set-up ---------------------------------------------------------------------------------- */

static int ctrain_lm_task__setup(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    const ctrain_cfg_t *c = t->cfg;
    ctrain_lm_task__state_t *s = calloc(1, sizeof *s);
    if (!s)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    t->task_state = s;
    int rc = ctrain_lm_cfg_read(c->lm_dir, &s->spec.cfg, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, rc, "--lm_dir");
    if (strlen(c->freeze) >= sizeof s->spec.freeze)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "--freeze: longer than %zu characters",
                             sizeof s->spec.freeze - 1);
    memcpy(s->spec.freeze, c->freeze, strlen(c->freeze) + 1); /* fits: checked above */
    s->spec.recompute = c->grad_checkpointing;
    const int P = s->spec.cfg.max_pos;
    s->L = c->set_maxlen && c->maxlen < P ? c->maxlen : P;
    if (s->L < 2)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "--maxlen %d: a line needs 2 tokens for one prediction", s->L);
    ctrain_lm_tok_t *tok = NULL;
    if ((rc = ctrain_lm_tok_load(&tok, c->lm_dir, eb)) != 0)
        return ct_errbuf_wrap(eb, rc, "--lm_dir");
    rc = ctrain_lm_task__read(&s->train, c->dataset, tok, s->spec.cfg.vocab, s->L, eb);
    s->valid = &s->train;
    if (rc == 0 && c->eval_dataset[0] != '\0' && !c->inference_only) {
        rc = ctrain_lm_task__read(&s->valid_own, c->eval_dataset, tok, s->spec.cfg.vocab, s->L, eb);
        s->valid = &s->valid_own;
    }
    ctrain_lm_tok_destroy(tok);
    if (rc != 0)
        return rc;

    const ctrain_lm_cfg_t *lc = &s->spec.cfg;
    t->mcfg = (ctrain_model_cfg_t){.kind = CTRAIN_MODEL_LM,
                                   .layout = CTRAIN_LAYOUT_PRE_LN,
                                   .maxlen = s->L,
                                   .hidden = lc->hidden,
                                   .num_heads = lc->heads,
                                   .num_blocks = lc->layers,
                                   .ext = &s->spec};
    t->n_samples = s->train.n;
    t->samples = malloc((size_t)t->n_samples * sizeof *t->samples);
    t->targets = malloc((size_t)t->n_samples * sizeof *t->targets);
    if (!t->samples || !t->targets)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    for (int64_t i = 0; i < t->n_samples; i++) {
        t->samples[i] = (int32_t)i;
        t->targets[i] = s->train.len[i] - 1;
    }
    return 0;
}

/* Host copies of every tensor: *host (malloc'd; NULL on a host-memory backend, where the views
 * point at the buffers themselves) and the views. fetch: copy the weights to the host. */
static int ctrain_lm_task__host_views(ctrain_model_t *m, bool fetch, float **host,
                                      ct_tensor_view_t **views)
{
    ctrain_lm_t *lm = ctrain_lm_family_lm(m);
    ct_ops_t *o = m->ops;
    *host = NULL;
    *views = calloc((size_t)lm->n_tensors, sizeof **views);
    if (!*views)
        return -ENOMEM;
    ctrain_lm_views(lm, false, *views);
    if (o->host_memory)
        return 0;
    size_t total = 0;
    for (int i = 0; i < lm->n_tensors; i++)
        total += (size_t)(*views)[i].shape[0] *
                 (size_t)((*views)[i].ndim == 2 ? (*views)[i].shape[1] : 1);
    *host = malloc(total * sizeof **host);
    if (!*host) {
        free(*views);
        *views = NULL;
        return -ENOMEM;
    }
    size_t off = 0;
    for (int i = 0; i < lm->n_tensors; i++) {
        ct_tensor_view_t *v = &(*views)[i];
        size_t n = (size_t)v->shape[0] * (size_t)(v->ndim == 2 ? v->shape[1] : 1);
        if (fetch)
            o->copy(o, *host + off, v->data, n * sizeof(float), CT_COPY_D2H);
        v->data = *host + off;
        off += n;
    }
    return fetch ? o->sync(o) : 0;
}

/* Every tensor, trainable and frozen, from the Hugging Face folder dir. */
static int ctrain_lm_task__load_hf(ctrain_model_t *m, const char *dir, ct_errbuf_t *eb)
{
    ctrain_lm_t *lm = ctrain_lm_family_lm(m);
    ct_ops_t *o = m->ops;
    float *host = NULL;
    ct_tensor_view_t *v = NULL;
    int rc = ctrain_lm_task__host_views(m, false, &host, &v);
    if (rc != 0)
        return ct_errbuf_set(eb, rc, "out of memory reading %s", dir);
    ctrain_lm_hf_t *h = NULL;
    rc = ctrain_lm_hf_open(&h, dir, eb);
    if (rc == 0)
        rc = ctrain_lm_hf_read(h, v, (size_t)lm->n_tensors, lm->cfg.prefix, eb);
    ctrain_lm_hf_close(h);
    if (rc == 0 && host) {
        for (int i = 0; i < lm->n_tensors; i++)
            o->copy(o, ctrain_lm_tensor(lm, i), v[i].data,
                    (size_t)v[i].shape[0] * (size_t)(v[i].ndim == 2 ? v[i].shape[1] : 1) *
                        sizeof(float),
                    CT_COPY_H2D);
        rc = o->sync(o);
    }
    free(v);
    free(host);
    return rc;
}

static int ctrain_lm_task__init(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    const ctrain_cfg_t *c = t->cfg;
    ctrain_lm_task__state_t *s = t->task_state;
    int rc;
    if ((rc = ctrain_model_init_params(t->model, c->seed)) != 0)
        return ct_errbuf_set(eb, rc, "initialising the model failed");
    if ((rc = ctrain_lm_task__load_hf(t->model, c->lm_dir, eb)) != 0)
        return ct_errbuf_wrap(eb, rc, "--lm_dir");
    /* a ctrain checkpoint of this model (the trainable tensors under their names) */
    if (c->state_dict_path[0] != '\0' &&
        (rc = ctrain_model_load_params(t->model, c->state_dict_path, eb)) != 0)
        return ct_errbuf_wrap(eb, rc, "--state_dict_path");
    const size_t cells = (size_t)t->micro * (size_t)s->L;
    s->ids = malloc(cells * sizeof *s->ids);
    s->tgt = malloc(cells * sizeof *s->tgt);
    if (!s->ids || !s->tgt)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    return 0;
}

static void ctrain_lm_task__teardown(ctrain_trainer_t *t)
{
    ctrain_lm_task__state_t *s = t->task_state;
    if (!s)
        return;
    ctrain_lm_task__corpus_free(&s->train);
    ctrain_lm_task__corpus_free(&s->valid_own);
    free(s->ids);
    free(s->tgt);
    free(s);
    t->task_state = NULL;
}

static json_t *ctrain_lm_task__model_json(const ctrain_lm_task__state_t *s)
{
    return json_pack("{s:s, s:o, s:i, s:s}", "kind", "lm", "lm",
                     ctrain_lm_cfg_to_json(&s->spec.cfg), "maxlen", s->L, "freeze", s->spec.freeze);
}

static json_t *ctrain_lm_task__corpus_json(const ctrain_lm_task__corpus_t *c)
{
    return json_pack("{s:s, s:I, s:I, s:f}", "source", c->path, "lines", (json_int_t)c->read,
                     "kept_lines", (json_int_t)c->n, "tokens", c->tokens);
}

static void ctrain_lm_task__header(ctrain_trainer_t *t)
{
    const ctrain_cfg_t *c = t->cfg;
    const ctrain_lm_task__state_t *s = t->task_state;
    const ctrain_lm_cfg_t *lc = &s->spec.cfg;
    const size_t P = t->model->num_params, F = ctrain_lm_family_frozen_floats(t->model);
    printf("# ctrain %s: LM %s from %s: vocab %d, hidden %d, %d layers, %d heads (%d key/value), "
           "%d tokens per line; %zu parameters trained, %zu frozen%s%s (flat buffers %.1f MiB, "
           "activations %.1f MiB%s)\n",
           CT_VERSION, ctrain_lm_arch_name(lc), c->lm_dir, lc->vocab, lc->hidden, lc->layers,
           lc->heads, lc->kv_heads, s->L, P, F, F ? " by --freeze " : "", F ? c->freeze : "",
           (double)(4 * P + F) * sizeof(float) / 1048576.0,
           (double)ctrain_lm_family_lm(t->model)->act_bytes / 1048576.0,
           s->spec.recompute ? ", recomputed by --grad_checkpointing" : "");
    printf("# data: %s: %lld lines, %lld with a prediction, %.0f predicted tokens; validation: "
           "%s (%lld lines, %.0f predicted tokens)\n",
           s->train.path, (long long)s->train.read, (long long)s->train.n, s->train.tokens,
           s->valid->path, (long long)s->valid->n, s->valid->tokens);
    ctrain_out_training_line(t, "lines");
    printf("# evaluation every %d epoch%s: mean next-token cross-entropy (lm_loss) and "
           "perplexity over every predicted token of the validation lines; best checkpoint = "
           "lowest validation lm_loss\n",
           c->eval_every, c->eval_every == 1 ? "" : "s");
    fflush(stdout);
}

static json_t *ctrain_lm_task__ckpt_json(const ctrain_trainer_t *t)
{
    const ctrain_lm_task__state_t *s = t->task_state;
    return json_pack("{s:o, s:o}", "model", ctrain_lm_task__model_json(s), "data",
                     ctrain_lm_task__corpus_json(&s->train));
}

static int ctrain_lm_task__check_ckpt(const ctrain_trainer_t *t, const json_t *o, const char *name,
                                      ct_errbuf_t *eb)
{
    const ctrain_lm_task__state_t *s = t->task_state;
    json_t *model = json_object_get(o, "model"), *data = json_object_get(o, "data");
    json_t *mine = ctrain_lm_task__model_json(s);
    int rc = 0;
    if (!json_is_object(model) || !json_is_object(data)) {
        rc = ct_errbuf_set(eb, CT_EFORMAT,
                           "refusing to resume from %s/%s: it is not a ctrain training "
                           "checkpoint (no usable configuration)",
                           t->ckpt.path, name);
    } else if (!json_equal(model, mine)) {
        char *a = json_dumps(model, JSON_COMPACT), *b = json_dumps(mine, JSON_COMPACT);
        rc = ct_errbuf_set(eb, CT_EMISMATCH,
                           "refusing to resume from %s/%s: its model configuration differs from "
                           "this run's (%.300s vs %.300s); use another --train_dir or --resume "
                           "never",
                           t->ckpt.path, name, a ? a : "?", b ? b : "?");
        free(a);
        free(b);
    } else {
        json_t *lines = json_object_get(data, "kept_lines"), *tok = json_object_get(data, "tokens");
        if (!json_is_integer(lines) || !json_is_number(tok) ||
            json_integer_value(lines) != s->train.n || json_number_value(tok) != s->train.tokens)
            rc = ct_errbuf_set(eb, CT_EMISMATCH,
                               "refusing to resume from %s/%s: it was trained on other data "
                               "(this run: %lld lines with %.0f predicted tokens)",
                               t->ckpt.path, name, (long long)s->train.n, s->train.tokens);
    }
    json_decref(mine);
    return rc;
}

static int ctrain_lm_task__start(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    const ctrain_cfg_t *c = t->cfg;
    const ctrain_lm_task__state_t *s = t->task_state;
    return ctrain_loader_init(&t->loader, ctrain_lm_task__fill, s, t->samples, t->targets,
                              &t->shard, t->micro, s->L, false, 0, c->seed, t->step, t->total_steps,
                              c->num_workers > 0, eb);
}

/* ---- evaluation ------------------------------------------------------------------------------ */

/* The lm_loss of corpus over all ranks (every rank gets the same numbers). */
static int ctrain_lm_task__eval_corpus(ctrain_trainer_t *t, const ctrain_lm_task__corpus_t *c,
                                       ctrain_lm_result_t *r, ct_errbuf_t *eb)
{
    ctrain_lm_task__state_t *s = t->task_state;
    const int W = t->env->world_size, R = t->env->rank, L = s->L;
    const int64_t lo = c->n * R / W, hi = c->n * (R + 1) / W;
    double sum = 0.0;
    int rc;
    for (int64_t i = lo; i < hi; i += t->micro) {
        int B = (int)(hi - i < t->micro ? hi - i : t->micro);
        for (int k = 0; k < B; k++)
            ctrain_lm_task__row(c, i + k, L, s->ids + (size_t)k * L, s->tgt + (size_t)k * L);
        double part = 0.0;
        if ((rc = ctrain_lm_family_eval(t->model, s->ids, s->tgt, B, L, &part, eb)) != 0)
            return ct_errbuf_wrap(eb, rc, "evaluating %s", c->path);
        sum += part;
        ct_worker_progress((uint64_t)t->step);
    }
    /* the partial sums, added in rank order on every rank */
    double total = 0.0;
    for (int root = 0; root < W; root++) {
        double v = sum;
        ct_errbuf_t beb;
        if (W > 1 && (rc = ct_reducer_broadcast(t->red, &v, sizeof v, root, &beb)) != 0)
            return ct_errbuf_set(eb, rc, "evaluation: gathering the losses: %s", beb.msg);
        total += v;
    }
    r->lines = c->n;
    r->tokens = c->tokens;
    r->loss = total / c->tokens;
    r->perplexity = exp(r->loss);
    return 0;
}

static int ctrain_lm_task__evaluate(ctrain_trainer_t *t, int64_t epoch, ctrain_result_t *r,
                                    ct_errbuf_t *eb)
{
    const ctrain_lm_task__state_t *s = t->task_state;
    int rc = ctrain_lm_task__eval_corpus(t, s->valid, &r->lm, eb);
    if (rc != 0 || isfinite(r->lm.loss))
        return rc;
    return ctrain_train_eval_nonfinite(t, epoch, "lm_loss", eb);
}

static double ctrain_lm_task__select(const ctrain_cfg_t *c, const ctrain_result_t *r)
{
    (void)c;
    return -r->lm.loss;
}

static const char *ctrain_lm_task__selected_on(const ctrain_cfg_t *c)
{
    (void)c;
    return "valid.lm_loss (lowest)";
}

static json_t *ctrain_lm_task__split_json(const ctrain_lm_result_t *r)
{
    return json_pack("{s:o, s:o, s:f, s:I}", "lm_loss", ctrain_out_num(r->loss), "perplexity",
                     ctrain_out_num(r->perplexity), "tokens", r->tokens, "lines",
                     (json_int_t)r->lines);
}

static json_t *ctrain_lm_task__result_json(const ctrain_result_t *r)
{
    return json_pack("{s:o}", "valid", ctrain_lm_task__split_json(&r->lm));
}

static int ctrain_lm_task__result_from_json(const json_t *o, ctrain_result_t *r)
{
    json_t *v = json_object_get(o, "valid");
    if (!json_is_object(v))
        return -1;
    json_t *loss = json_object_get(v, "lm_loss"), *tok = json_object_get(v, "tokens"),
           *lines = json_object_get(v, "lines");
    if (!json_is_number(tok) || !json_is_integer(lines) ||
        !(json_is_number(loss) || json_is_null(loss)))
        return -1;
    r->lm.loss = json_is_null(loss) ? NAN : json_number_value(loss);
    r->lm.perplexity = exp(r->lm.loss);
    r->lm.tokens = json_number_value(tok);
    r->lm.lines = json_integer_value(lines);
    return 0;
}

static void ctrain_lm_task__row_out(int64_t epoch, int64_t step, double loss, double rate,
                                    const ctrain_result_t *r)
{
    if (r == NULL) {
        printf("#  epoch      step train_loss   tokens/s  v_lm_loss v_perplexity\n");
    } else {
        printf("%8lld %9lld", (long long)epoch, (long long)step);
        if (isfinite(loss))
            printf(" %10.5f", loss);
        else
            printf(" %10s", "-");
        printf(" %10.0f", rate);
        if (isfinite(r->lm.loss))
            printf(" %10.5f %12.4f\n", r->lm.loss, r->lm.perplexity);
        else
            printf(" %10s %12s\n", "-", "-");
    }
    fflush(stdout);
}

static size_t ctrain_lm_task__scalars(const ctrain_result_t *r, ctrain_scalar_t *sc)
{
    sc[0] = (ctrain_scalar_t){"valid/lm_loss", r->lm.loss};
    sc[1] = (ctrain_scalar_t){"valid/perplexity", r->lm.perplexity};
    return 2;
}

static void ctrain_lm_task__summary(ctrain_trainer_t *t, json_t *o)
{
    json_object_set_new(o, "frozen_parameters",
                        json_integer((json_int_t)ctrain_lm_family_frozen_floats(t->model)));
}

static int ctrain_lm_task__finish(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    const ctrain_cfg_t *c = t->cfg;
    if (!t->rank0 || c->save_hf[0] == '\0')
        return 0;
    float *host = NULL;
    ct_tensor_view_t *v = NULL;
    int rc = ctrain_lm_task__host_views(t->model, true, &host, &v);
    if (rc != 0)
        return ct_errbuf_set(eb, rc, "--save_hf %s: copying the weights failed", c->save_hf);
    rc = ctrain_lm_hf_save(c->save_hf, c->lm_dir, v,
                           (size_t)ctrain_lm_family_lm(t->model)->n_tensors, eb);
    free(v);
    free(host);
    if (rc != 0)
        return ct_errbuf_wrap(eb, rc, "--save_hf %s", c->save_hf);
    printf("# saved the model to %s (step %lld)\n", c->save_hf, (long long)t->step);
    fflush(stdout);
    return 0;
}

/* ---- --inference_only ------------------------------------------------------------------------ */

static int ctrain_lm_task__infer(const ctrain_cfg_t *cfg, const ct_worker_env_t *env,
                                 ct_reducer_t *red, ct_errbuf_t *eb)
{
    int64_t t0 = ct_time_ns();
    ctrain_trainer_t *t = calloc(1, sizeof *t);
    if (!t)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    t->cfg = cfg;
    t->task = &ctrain_lm_task;
    t->env = env;
    t->red = red;
    t->rank0 = env->rank == 0;
    t->micro = ctrain_train_eval_chunk(cfg, env->world_size);
    ctrain_result_t r;
    int rc = ctrain_lm_task__setup(t, eb);
    if (rc == 0)
        rc = ctrain_train_backend(cfg, env, &t->ops, eb);
    if (rc == 0)
        rc = ctrain_model_create(&t->model, &t->mcfg, &t->ops, t->micro, eb);
    if (rc == 0)
        rc = ctrain_lm_task__init(t, eb);
    if (rc == 0)
        rc = ctrain_lm_task__eval_corpus(t, &((ctrain_lm_task__state_t *)t->task_state)->train,
                                         &r.lm, eb);
    if (rc == 0 && t->rank0) {
        const ctrain_lm_task__state_t *s = t->task_state;
        printf("# ctrain --inference_only: LM %s from %s%s%s, %d tokens per line; %s: %lld lines, "
               "%.0f predicted tokens\n",
               ctrain_lm_arch_name(&s->spec.cfg), cfg->lm_dir,
               cfg->state_dict_path[0] ? " with " : "", cfg->state_dict_path, s->L, s->train.path,
               (long long)s->train.n, s->train.tokens);
        json_t *o = json_object();
        json_object_set_new(
            o, "inference",
            json_string(cfg->state_dict_path[0] ? cfg->state_dict_path : cfg->lm_dir));
        json_object_set_new(o, "model", ctrain_lm_task__model_json(s));
        json_object_set_new(o, "lm_loss", ctrain_out_num(r.lm.loss));
        json_object_set_new(o, "perplexity", ctrain_out_num(r.lm.perplexity));
        json_object_set_new(o, "tokens", json_real(r.lm.tokens));
        json_object_set_new(o, "lines", json_integer((json_int_t)r.lm.lines));
        json_object_set_new(o, "wall_seconds", json_real((double)(ct_time_ns() - t0) / 1e9));
        ctrain_out_print_summary(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
    }
    ctrain_lm_task__teardown(t);
    ctrain_model_destroy(t->model);
    ct_ops_close(&t->ops);
    free(t->samples);
    free(t->targets);
    free(t);
    return rc;
}

const ctrain_task_t ctrain_lm_task = {
    .setup = ctrain_lm_task__setup,
    .init = ctrain_lm_task__init,
    .teardown = ctrain_lm_task__teardown,
    .header = ctrain_lm_task__header,
    .ckpt_json = ctrain_lm_task__ckpt_json,
    .check_ckpt = ctrain_lm_task__check_ckpt,
    .start = ctrain_lm_task__start,
    .evaluate = ctrain_lm_task__evaluate,
    .select = ctrain_lm_task__select,
    .selected_on = ctrain_lm_task__selected_on,
    .result_json = ctrain_lm_task__result_json,
    .result_from_json = ctrain_lm_task__result_from_json,
    .row = ctrain_lm_task__row_out,
    .scalars = ctrain_lm_task__scalars,
    .summary = ctrain_lm_task__summary,
    .finish = ctrain_lm_task__finish,
    .infer = ctrain_lm_task__infer,
};
