/*
 * ctrain_train.c - the training job of ctrain_train.h: set-up (the family's data, the model, the
 * checkpoint directory), resume, the step (micro-batches, the one gradient reduction, l2_emb,
 * NaN check, clipping, Adam), the epoch loop with evaluation and checkpoints (and the epoch
 * names a task asks for: epoch_{e}_step_{s}), and the final summary; the table of the families'
 * tasks (ctrain_train_internal.h) and the recommenders' task (user sequences, negatives,
 * HR/NDCG, the popularity baseline). The loop asks the task and never tests the kind. What is
 * printed and written lives in ctrain_out.c; the language model's task in ctrain_lm_task.c.
 */
#include "ctrain_train.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_log.h"
#include "ct_time.h"
#include "ctrain_train_internal.h"

/* ---- set-up shared with inference ------------------------------------------------------------ */

int ctrain_train_load_data(const ctrain_cfg_t *cfg, ctrain_dataset_t *ds, ct_errbuf_t *eb)
{
    /* the family's rule for the users it evaluates (SASRec.pytorch HEAD: >= 4 interactions,
     * TiSASRec.pytorch: >= 3; docs/models.md §1.3) */
    ctrain_data_opts_t opts = CTRAIN_DATA_OPTS_DEFAULT;
    opts.min_eval_len = ctrain_family(cfg->model)->min_eval_len;
    opts.min_count = cfg->min_count;
    int rc;
    if (strncmp(cfg->dataset, "synthetic", 9) == 0 &&
        (cfg->dataset[9] == '\0' || cfg->dataset[9] == ':')) {
        ctrain_synth_opts_t so;
        rc = ctrain_synth_parse(cfg->dataset, &so, eb);
        if (rc == 0)
            rc = ctrain_data_synthetic(ds, &so, eb);
    } else {
        rc = ctrain_data_load(ds, cfg->dataset, cfg->data_format, &opts, eb);
        /* only the tsv and ml1m formats have timestamps, and only they are filtered */
        if (rc == 0 && cfg->set_min_count && ds->times == NULL) {
            ctrain_data_free(ds);
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "--min_count: %s is a sasrec file (\"user item\" lines), used "
                                 "as it is (the count filter applies to tsv and ml1m files)",
                                 cfg->dataset);
        }
    }
    if (rc == 0 && ds->num_eval_users == 0) {
        ctrain_data_free(ds);
        return ct_errbuf_set(eb, CT_EFORMAT,
                             "%s: no user has the %d interactions a validation and a test item "
                             "need",
                             cfg->dataset, opts.min_eval_len);
    }
    return rc;
}

int ctrain_train_backend(const ctrain_cfg_t *cfg, const ct_worker_env_t *env, ct_ops_t *ops,
                         ct_errbuf_t *eb)
{
    ct_errbuf_t oeb;
    const char *device = cfg->device;
    if (strcmp(device, "auto") == 0 && ctrain_family(cfg->model)->cpu_only) {
        /* a family whose passes run on the CPU only: auto means the CPU, said once */
        if (env->rank == 0 && ct_ops_have_cuda())
            ct_log_warn("--device auto: %s runs on the CPU backend only; training on the CPU",
                        ctrain_family(cfg->model)->title);
        device = "cpu";
    }
    bool amp = cfg->use_amp;
    if (cfg->yaml_fp16 && !amp) {
        /* the reference's fp16 autocast: bf16 products where a GPU trains, float32 elsewhere */
        const bool gpu =
            ct_ops_have_cuda() && (strcmp(device, "cuda") == 0 ||
                                   (strcmp(device, "auto") == 0 && ct_ops_device_count() > 0));
        amp = gpu;
        if (env->rank == 0)
            ct_log_info("training.fp16: %s", gpu ? "bf16 matrix products on the GPU (--use_amp)"
                                                 : "the CPU trains in float32");
    }
    int rc = ct_ops_open(ops, device, env->local_rank, amp, &oeb);
    if (rc == 0 && strcmp(device, "auto") == 0 && ops->host_memory && env->rank == 0)
        ct_log_warn("--device auto: %s; training on the CPU",
                    ct_ops_have_cuda() ? "no CUDA device is visible" : "this build has no CUDA");
    if (rc == 0)
        return 0;
    /* ct_ops_open's line starts with what failed: the device, or amp */
    if (strncmp(oeb.msg, "amp: ", 5) == 0)
        return ct_errbuf_set(
            eb, rc, "--use_amp: %s%s", oeb.msg + 5,
            rc == CT_ENOGPU && ct_ops_have_cuda() ? " (drop --use_amp or run on a GPU)" : "");
    return ct_errbuf_set(eb, rc, "--device %s", oeb.msg);
}

int ctrain_train_eval_nonfinite(const ctrain_trainer_t *t, int64_t epoch, const char *what,
                                ct_errbuf_t *eb)
{
    if (!t->cfg->skip_invalid_loss)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "evaluation after epoch %lld (step %lld): the validation %s is not "
                             "finite: the model's weights are not (lower --lr, set --grad_clip, or "
                             "pass --skip_invalid_loss to go on without metrics)",
                             (long long)epoch, (long long)t->step, what);
    if (t->rank0)
        ct_log_warn("evaluation after epoch %lld: the validation %s is not finite",
                    (long long)epoch, what);
    return 0;
}

int ctrain_train_check_device(const ctrain_model_cfg_t *mc, const ct_ops_t *ops, ct_errbuf_t *eb)
{
    const ctrain_family_t *fam = ctrain_family(mc->kind);
    return fam->check_backend != NULL ? fam->check_backend(mc, ops, eb) : 0;
}

int ctrain_train_check_data(const ctrain_model_cfg_t *mc, const ctrain_dataset_t *ds,
                            ct_errbuf_t *eb)
{
    const ctrain_family_t *fam = ctrain_family(mc->kind);
    if (fam->uses_times && ds->time_scaled == NULL)
        return ct_errbuf_set(eb, CT_EFORMAT,
                             "%s has no timestamps, which %s needs; give --no_time (SASRec) or "
                             "a file with times (user item rating time)",
                             ds->source, fam->title);
    return 0;
}

int ctrain_train_eval_chunk(const ctrain_cfg_t *cfg, int world)
{
    return (cfg->batch_size + world - 1) / world;
}

/* ---- checkpoint configuration and state ------------------------------------------------------ */

static json_t *ctrain_train__state_json(const ctrain_trainer_t *t, const ctrain_train_state_t *s)
{
    json_t *o =
        json_pack("{s:I, s:I, s:b, s:f, s:I, s:I, s:f, s:I, s:f}", "adam_steps",
                  (json_int_t)s->adam_steps, "skipped_steps", (json_int_t)s->skipped_steps,
                  "has_best", s->has_best, "best_metric", s->best_metric, "best_epoch",
                  (json_int_t)s->best_epoch, "best_step", (json_int_t)s->best_step, "loss_sum",
                  s->loss_sum, "loss_steps", (json_int_t)s->loss_steps, "positions", s->positions);
    json_object_set_new(o, "best", t->task->result_json(&s->best));
    return o;
}

static int ctrain_train__state_from_json(const ctrain_trainer_t *t, const json_t *o,
                                         ctrain_train_state_t *s, ct_errbuf_t *eb)
{
    json_int_t adam = 0, skipped = 0, be = 0, bs = 0, ls = 0;
    int has_best = 0;
    json_t *best = NULL;
    json_error_t je;
    if (json_unpack_ex((json_t *)o, &je, 0, "{s:I, s:I, s:b, s:F, s:I, s:I, s:F, s:I, s:F, s:o}",
                       "adam_steps", &adam, "skipped_steps", &skipped, "has_best", &has_best,
                       "best_metric", &s->best_metric, "best_epoch", &be, "best_step", &bs,
                       "loss_sum", &s->loss_sum, "loss_steps", &ls, "positions", &s->positions,
                       "best", &best) != 0)
        return ct_errbuf_set(eb, CT_EFORMAT, "training state: %s", je.text);
    s->adam_steps = adam, s->skipped_steps = skipped, s->has_best = has_best;
    s->best_epoch = be, s->best_step = bs, s->loss_steps = ls;
    if (t->task->result_from_json(best, &s->best) != 0)
        return ct_errbuf_set(eb, CT_EFORMAT, "training state: bad \"best\" metrics");
    return 0;
}

/* "epoch_<e>_step_<s>.safetensors" (the task's epoch_names) -> true. */
static bool ctrain_train__is_epoch_name(const char *name)
{
    long long e, s;
    int end = 0;
    return sscanf(name, "epoch_%lld_step_%lld.safetensors%n", &e, &s, &end) == 2 && end > 0 &&
           name[end] == '\0';
}

/* Rank 0, a task with epoch_names: the checkpoint file `file` (of step t->step, the end of
 * epoch t->step / steps_per_epoch) also as epoch_{e}_step_{s}.safetensors, a hard link that
 * replaces an older file of that name; the directory is synced. */
static int ctrain_train__epoch_link(ctrain_trainer_t *t, const char *file, ct_errbuf_t *eb)
{
    if (!t->rank0 || !t->task->epoch_names || t->steps_per_epoch < 1 || t->step < 1 ||
        t->step % t->steps_per_epoch != 0)
        return 0;
    char name[CT_CKPT_NAME_MAX + 32];
    snprintf(name, sizeof name, "epoch_%lld_step_%lld.safetensors",
             (long long)(t->step / t->steps_per_epoch), (long long)t->step);
    const int dfd = t->ckpt.dirfd;
    struct stat a, b;
    if (fstatat(dfd, name, &b, 0) == 0 && fstatat(dfd, file, &a, 0) == 0 && a.st_ino == b.st_ino &&
        a.st_dev == b.st_dev)
        return 0; /* already that file */
    int rc = 0;
    if (unlinkat(dfd, name, 0) != 0 && errno != ENOENT)
        rc = -errno;
    if (rc == 0 && linkat(dfd, file, dfd, name, 0) != 0)
        rc = -errno;
    if (rc == 0 && fsync(dfd) != 0 && errno != EINVAL)
        rc = -errno;
    if (rc != 0)
        return ct_errbuf_set(eb, rc, "checkpoint %s/%s as %s: %s", t->ckpt.path, file, name,
                             ct_strerror(rc));
    return 0;
}

/* Rank 0, a task with epoch_names, a run starting afresh (--resume never): the epoch names an
 * earlier run left go with its other checkpoints. */
static int ctrain_train__epoch_clear(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    if (!t->rank0 || !t->task->epoch_names)
        return 0;
    int fd = openat(t->ckpt.dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    if (dir == NULL) {
        int rc = -errno;
        if (fd >= 0)
            close(fd);
        return ct_errbuf_set(eb, rc, "%s: cannot list: %s", t->ckpt.path, ct_strerror(rc));
    }
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(dir)) != NULL)
        if (ctrain_train__is_epoch_name(de->d_name) &&
            unlinkat(t->ckpt.dirfd, de->d_name, 0) != 0 && errno != ENOENT) {
            rc = -errno;
            ct_errbuf_set(eb, rc, "%s/%s: cannot remove: %s", t->ckpt.path, de->d_name,
                          ct_strerror(rc));
        }
    closedir(dir);
    return rc;
}

/* The checkpoint's "config": what must match to resume, and the state. */
static json_t *ctrain_train__ckpt_config(const ctrain_trainer_t *t)
{
    const ctrain_cfg_t *c = t->cfg;
    json_t *o = json_object();
    json_object_set_new(o, "ctrain_checkpoint", json_integer(1));
    json_t *md = t->task->ckpt_json(t); /* "model" and "data" */
    json_object_update(o, md);
    json_decref(md);
    json_object_set_new(o, "train",
                        json_pack("{s:i, s:i, s:I, s:i, s:f}", "batch_size", c->batch_size,
                                  "grad_accum", c->grad_accum, "seed", (json_int_t)c->seed,
                                  "num_epochs", c->num_epochs, "lr", c->lr));
    json_object_set_new(o, "state", ctrain_train__state_json(t, &t->st));
    return o;
}

static int ctrain_train__save(ctrain_trainer_t *t, ct_ckpt_kind_t kind, ct_errbuf_t *eb)
{
    if (!t->rank0)
        return 0;
    int rc = ctrain_model_to_host(t->model);
    if (rc != 0)
        return ct_errbuf_set(eb, rc, "checkpoint: copying the model to the host failed");
    ct_ckpt_meta_t *meta = calloc(1, sizeof *meta);
    if (!meta)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    meta->step = t->step;
    ct_shard_locate(&t->shard, t->step, &meta->epoch, &meta->data_position);
    meta->world_size = t->env->world_size;
    if (kind == CT_CKPT_BEST) {
        meta->has_metric = true;
        meta->metric = t->st.best_metric;
    }
    json_t *cfg = ctrain_train__ckpt_config(t);
    char *text = json_dumps(cfg, JSON_COMPACT);
    json_decref(cfg);
    if (!text || strlen(text) >= sizeof meta->config) {
        free(text);
        free(meta);
        return ct_errbuf_set(eb, -EINVAL, "checkpoint configuration too long");
    }
    memcpy(meta->config, text, strlen(text) + 1);
    free(text);
    rc = ct_ckpt_save(&t->ckpt, kind, t->views, t->n_views, meta, eb);
    free(meta);
    if (rc == 0 && kind != CT_CKPT_BEST) {
        char file[CT_CKPT_NAME_MAX];
        ct_ckpt_file_name(kind, t->step, file, sizeof file);
        rc = ctrain_train__epoch_link(t, file, eb);
        if (rc == 0 && t->log && t->step % t->steps_per_epoch == 0) {
            char name[CT_CKPT_NAME_MAX + 32];
            if (t->task->epoch_names)
                snprintf(name, sizeof name, "epoch_%lld_step_%lld.safetensors",
                         (long long)(t->step / t->steps_per_epoch), (long long)t->step);
            else
                snprintf(name, sizeof name, "%s", file);
            ctrain_out_log(t, "saved %s/%s%s", t->ckpt.path, name,
                           t->st.has_best && t->st.best_step == t->step
                               ? " (best so far: best.safetensors)"
                               : "");
        }
    }
    return rc;
}

/* Checks that this run may resume from a checkpoint with this configuration, and restores
 * the training state it records. Returns 0, or CT_EFORMAT / CT_EMISMATCH with the reason. */
static int ctrain_train__check_resume(ctrain_trainer_t *t, const char *name, const char *config,
                                      ct_errbuf_t *eb)
{
    json_error_t je;
    json_t *o = json_loads(config, 0, &je);
    int rc = 0;
    json_int_t bs = 0, accum = 0, seed = 0;
    json_t *state = NULL;
    if (!o || json_unpack_ex(o, &je, 0, "{s:{s:I, s:I, s:I}, s:o}", "train", "batch_size", &bs,
                             "grad_accum", &accum, "seed", &seed, "state", &state) != 0) {
        rc = ct_errbuf_set(eb, CT_EFORMAT,
                           "refusing to resume from %s/%s: it is not a ctrain training "
                           "checkpoint (no usable configuration)",
                           t->ckpt.path, name);
        goto out;
    }
    /* the family's model and data */
    if ((rc = t->task->check_ckpt(t, o, name, eb)) != 0)
        goto out;
    if (bs != t->cfg->batch_size || accum != t->cfg->grad_accum || (uint64_t)seed != t->cfg->seed) {
        rc =
            ct_errbuf_set(eb, CT_EMISMATCH,
                          "refusing to resume from %s/%s: --batch_size, --grad_accum and --seed "
                          "(%lld, %lld, %lld) must stay what they were, since they define the "
                          "data order (this run: %d, %d, %llu)",
                          t->ckpt.path, name, (long long)bs, (long long)accum, (long long)seed,
                          t->cfg->batch_size, t->cfg->grad_accum, (unsigned long long)t->cfg->seed);
        goto out;
    }
    rc = ctrain_train__state_from_json(t, state, &t->st, eb);
out:
    json_decref(o);
    return rc;
}

/* Resumes from the latest checkpoint when there is one: rank 0 picks the file (with fallback
 * past damaged ones) and broadcasts its name, the others load exactly that file. Sets
 * *resumed. */
static int ctrain_train__resume(ctrain_trainer_t *t, bool *resumed, ct_errbuf_t *eb)
{
    *resumed = false;
    struct {
        int32_t rc;
        char name[CT_CKPT_NAME_MAX];
    } pick = {0, ""};
    ct_ckpt_meta_t *meta = calloc(1, sizeof *meta);
    if (!meta)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    int rc = 0;
    if (t->rank0)
        pick.rc = ct_ckpt_load_latest(&t->ckpt, t->views, t->n_views, meta, pick.name, eb);
    ct_errbuf_t beb;
    if ((rc = ct_reducer_broadcast(t->red, &pick, sizeof pick, 0, &beb)) != 0) {
        ct_errbuf_set(eb, rc, "broadcasting the checkpoint to resume from: %s", beb.msg);
        goto out;
    }
    if (!t->rank0 && pick.rc == 0)
        pick.rc = ct_ckpt_load(&t->ckpt, pick.name, t->views, t->n_views, meta, eb);
    rc = pick.rc;
    if (rc == -ENOENT) {
        rc = 0; /* nothing to resume */
        goto out;
    }
    if (rc == CT_EMISMATCH && meta->config[0] != '\0') {
        /* The tensors do not fit: say which configuration field is why. */
        ct_errbuf_t ceb;
        int crc =
            ctrain_train__check_resume(t, pick.name[0] ? pick.name : "latest", meta->config, &ceb);
        if (crc != 0)
            *eb = ceb;
        goto out;
    }
    if (rc != 0)
        goto out;
    if ((rc = ctrain_train__check_resume(t, pick.name, meta->config, eb)) != 0)
        goto out;
    if ((rc = ctrain_model_from_host(t->model)) != 0) {
        ct_errbuf_set(eb, rc, "copying the checkpoint to the %s backend failed", t->ops.name);
        goto out;
    }
    t->step = meta->step;
    *resumed = true;
    snprintf(t->resumed_from, sizeof t->resumed_from, "%s", pick.name);
    /* a run killed between an epoch's checkpoint and its epoch name */
    if ((rc = ctrain_train__epoch_link(t, pick.name, eb)) != 0)
        goto out;
    if (t->rank0) {
        int64_t e, p;
        ct_shard_locate(&t->shard, t->step, &e, &p);
        printf("# resumed from %s/%s: step %lld (epoch %lld, batch %lld of it), trained by %d "
               "rank%s\n",
               t->ckpt.path, pick.name, (long long)t->step, (long long)e, (long long)p,
               meta->world_size, meta->world_size == 1 ? "" : "s");
        fflush(stdout);
    }
out:
    free(meta);
    return rc;
}

/* ---- set-up and tear-down -------------------------------------------------------------------- */

static void ctrain_train__eval_progress(void *ctx)
{
    ctrain_trainer_t *t = ctx;
    ct_worker_progress((uint64_t)t->step);
}

static int ctrain_train__setup(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    const ctrain_cfg_t *c = t->cfg;
    const int W = t->env->world_size, R = t->env->rank;
    int rc = t->task->setup(t, eb); /* data, t->mcfg, samples */
    if (rc != 0)
        return rc;
    if ((rc = ctrain_train_backend(c, t->env, &t->ops, eb)) != 0 ||
        (rc = ctrain_train_check_device(&t->mcfg, &t->ops, eb)) != 0)
        return rc;
    t->shard = (ct_shard_t){.n_samples = t->n_samples,
                            .global_batch = (int64_t)c->batch_size * c->grad_accum,
                            .world_size = W,
                            .rank = R,
                            .seed = c->seed,
                            .shuffle = true,
                            .drop_last = false};
    if ((rc = ct_shard_check(&t->shard, eb)) != 0)
        return rc;
    t->steps_per_epoch = ct_shard_steps_per_epoch(&t->shard);
    t->total_steps = t->steps_per_epoch * c->num_epochs;
    t->micro = ctrain_train_eval_chunk(c, W);

    if ((rc = ctrain_model_create(&t->model, &t->mcfg, &t->ops, t->micro, eb)) != 0)
        return rc;
    if ((rc = t->task->init(t, eb)) != 0) /* first weights, evaluation */
        return rc;
    t->views = calloc((size_t)t->model->n_params * 3, sizeof *t->views);
    if (!t->views)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    t->n_views =
        ctrain_model_views(t->model, CTRAIN_MODEL_VIEW_PARAMS | CTRAIN_MODEL_VIEW_ADAM, t->views);
    if (!t->ops.host_memory) {
        /* device gradients: the reducer decides how they travel (NCCL buckets, or host memory
         * for the CPU ring); over NCCL a world of one still reduces when --backend nccl asks */
        ct_reducer_device_t dev = {.stream = t->ops.stream,
                                   .bucket_bytes = CT_REDUCER_BUCKET_BYTES,
                                   .timeout_ms = (int64_t)(c->collective_timeout * 1000.0 + 0.5),
                                   .nccl_alone = strcmp(c->backend, "nccl") == 0};
        if ((rc = ct_reducer_use_device(t->red, &dev, eb)) != 0)
            return rc;
    }
    return ct_ckpt_dir_init(&t->ckpt, c->train_dir, c->keep_checkpoints, t->rank0, eb);
}

static void ctrain_train__teardown(ctrain_trainer_t *t)
{
    ctrain_out_close(t);
    ct_ckpt_dir_close(&t->ckpt);
    ctrain_loader_close(&t->loader);
    if (t->task)
        t->task->teardown(t);
    ctrain_model_destroy(t->model);
    ct_ops_close(&t->ops);
    free(t->views);
    free(t->samples);
    free(t->targets);
}

/* ---- one optimizer step ---------------------------------------------------------------------- */

/* The model's grads_ready during the last micro-batch's backward: the reducer starts on the
 * gradients each block has finished while the earlier blocks are still computed. */
static int ctrain_train__grads_ready(void *ctx, float *grads, const int64_t (*ranges)[2], int n)
{
    ctrain_trainer_t *t = ctx;
    return ct_reducer_ready(t->red, grads, ranges, n, &t->ready_eb);
}

static int ctrain_train__step(ctrain_trainer_t *t, int64_t epoch, ct_errbuf_t *eb)
{
    const ctrain_cfg_t *c = t->cfg;
    ctrain_model_t *m = t->model;
    ct_ops_t *o = &t->ops;
    ctrain_model_zero_grad(m);
    float local_loss = 0.0f;
    double targets = 0;
    const ctrain_train_chunk_t *ch;
    do {
        ch = ctrain_loader_next(&t->loader);
        if (ch->step != t->step)
            return ct_errbuf_set(eb, CT_ESTATE, "batch stream at step %lld, trainer at %lld",
                                 (long long)ch->step, (long long)t->step);
        targets = ch->targets;
        if (ch->n == 0)
            continue;
        ctrain_model_batch_t mb = {.B = ch->n,
                                   .seq = ch->batch.seq,
                                   .pos = ch->batch.pos,
                                   .neg = ch->batch.neg,
                                   .tseq = ch->batch.tseq,
                                   .row_neg = ch->batch.row_neg,
                                   .row0 = ch->row0};
        float l = 0.0f;
        const bool early = ch->last && c->overlap_reduction && ct_reducer_overlaps(t->red);
        m->grads_ready = early ? ctrain_train__grads_ready : NULL;
        m->grads_ready_ctx = t;
        t->ready_eb.msg[0] = '\0';
        int rc = ctrain_model_forward_backward(m, &mb, (float)targets, c->seed, t->step, &l);
        m->grads_ready = NULL;
        if (rc != 0 && t->ready_eb.msg[0])
            return ct_errbuf_set(eb, rc, "step %lld: gradient reduction: %s", (long long)t->step,
                                 t->ready_eb.msg);
        if (rc != 0)
            return ct_errbuf_set(eb, rc, "step %lld: the %s backend failed (%s)",
                                 (long long)t->step, o->name, ct_strerror(rc));
        local_loss += l;
    } while (!ch->last);

    /* The one reduction of the step: gradients, with the loss in the slot after them. */
    float *tail = m->grads_mem + m->num_params;
    o->copy(o, tail, &local_loss, sizeof local_loss, CT_COPY_H2D);
    const int64_t ng = (int64_t)m->num_params + CTRAIN_MODEL_GRAD_EXTRA;
    int rc = ct_reducer_sum_f32(t->red, m->grads_mem, ng, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, rc, "step %lld: gradient reduction", (long long)t->step);
    float loss = 0.0f, penalty = 0.0f, sumsq = 0.0f;
    o->copy(o, &loss, tail, sizeof loss, CT_COPY_D2H);
    /* After the reduction every rank holds the same buffers, so what follows - and the
     * decision to skip - is identical everywhere. */
    if ((rc = ctrain_model_l2(m, (float)c->l2_emb, ctrain_model_l2_mode(&m->cfg), &penalty)) != 0 ||
        (rc = ctrain_model_grad_sumsq(m, &sumsq)) != 0)
        return ct_errbuf_set(eb, rc, "step %lld: the %s backend failed", (long long)t->step,
                             o->name);
    loss += penalty;
    if (!isfinite(loss) || !isfinite(sumsq)) {
        if (!c->skip_invalid_loss)
            return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                                 "non-finite training loss at step %lld (epoch %lld): loss %g, "
                                 "squared gradient norm %g (lower --lr, set --grad_clip, or pass "
                                 "--skip_invalid_loss to skip such steps)",
                                 (long long)t->step, (long long)epoch + 1, (double)loss,
                                 (double)sumsq);
        t->st.skipped_steps++;
        if (t->rank0)
            ct_log_warn("step %lld: non-finite loss %g / squared gradient norm %g; step skipped "
                        "(%lld so far)",
                        (long long)t->step, (double)loss, (double)sumsq,
                        (long long)t->st.skipped_steps);
        return 0;
    }
    float scale = ct_clip_coef(sumsq, (float)c->grad_clip);
    t->lr_now = ctrain_train_lr_at(c, t->step, t->total_steps);
    t->st.adam_steps++;
    if ((rc = ctrain_model_adam(m, t->lr_now, scale, t->st.adam_steps)) != 0)
        return ct_errbuf_set(eb, rc, "step %lld: Adam on the %s backend failed", (long long)t->step,
                             o->name);
    t->step_loss = loss;
    t->st.loss_sum += loss;
    t->st.loss_steps++;
    t->st.positions += targets;
    t->rate_positions += targets;
    return 0;
}

/* ---- evaluation inside training -------------------------------------------------------------- */

int ctrain_train_check_scores(const ctrain_cfg_t *cfg, const ctrain_eval_result_t *r, bool speak,
                              const char *when, ct_errbuf_t *eb)
{
    const ctrain_eval_split_result_t *v = &r->valid, *te = &r->test;
    if (v->nonfinite == 0 && te->nonfinite == 0)
        return 0;
    char what[200];
    snprintf(what, sizeof what,
             "the model's scores are NaN or infinite for %lld of %lld validation and %lld of %lld "
             "test users: its weights are not finite",
             (long long)v->nonfinite, (long long)v->users, (long long)te->nonfinite,
             (long long)te->users);
    if (!cfg->skip_invalid_loss)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "%s: %s (lower --lr, set --grad_clip, or pass --skip_invalid_loss to "
                             "go on without metrics)",
                             when, what);
    if (speak)
        ct_log_warn("%s: %s; no metrics for %s (null in the outputs)", when, what,
                    v->nonfinite > 0 && te->nonfinite > 0 ? "either split"
                    : v->nonfinite > 0                    ? "the validation split"
                                                          : "the test split");
    return 0;
}

static int ctrain_train__evaluate(ctrain_trainer_t *t, int64_t epoch, ct_errbuf_t *eb)
{
    ctrain_result_t r;
    memset(&r, 0, sizeof r);
    double train_s = t->train_seconds;
    int rc = t->task->evaluate(t, epoch, &r, eb);
    if (rc != 0)
        return rc;
    double loss = t->st.loss_steps > 0 ? t->st.loss_sum / (double)t->st.loss_steps : NAN;
    double pps = train_s > 0 ? t->rate_positions / train_s : 0.0;
    t->last = r;
    t->last_epoch = epoch;
    t->last_step = t->step;
    t->has_last = true;
    double metric = t->task->select(t->cfg, &r);
    /* an evaluation without metrics (non-finite scores) is never the best one */
    bool better = isfinite(metric) && (!t->st.has_best || metric > t->st.best_metric);
    if (better) {
        t->st.has_best = true;
        t->st.best_metric = metric;
        t->st.best_epoch = epoch;
        t->st.best_step = t->step;
        t->st.best = r;
    }
    if (t->rank0) {
        ctrain_out_progress_clear(t);
        t->task->row(epoch, t->step, loss, pps, &r);
        if ((rc = ctrain_out_metrics(t, epoch, loss, pps, &r, eb)) != 0)
            return rc;
        ctrain_out_log_eval(t, epoch, loss, train_s, &r);
    }
    t->rate_step0 = t->step;
    t->st.loss_sum = 0;
    t->st.loss_steps = 0;
    t->st.positions = 0;
    t->rate_positions = 0;
    t->train_seconds = 0;
    if (better && (rc = ctrain_train__save(t, CT_CKPT_BEST, eb)) != 0)
        return rc;
    return 0;
}

/* ---- the recommender task (SASRec, TiSASRec): user sequences, negatives, HR/NDCG ------------ */

static int ctrain_train__rec_setup(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    const ctrain_cfg_t *c = t->cfg;
    int rc = ctrain_train_load_data(c, &t->ds, eb);
    if (rc != 0)
        return rc;
    t->mcfg = ctrain_train_model_cfg(c, t->ds.num_items);
    if ((rc = ctrain_train_check_data(&t->mcfg, &t->ds, eb)) != 0)
        return rc;
    /* Samples: users that yield at least one training target. */
    t->samples = malloc(((size_t)t->ds.num_users + 1) * sizeof *t->samples);
    t->targets = malloc(((size_t)t->ds.num_users + 1) * sizeof *t->targets);
    if (!t->samples || !t->targets)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    for (int32_t u = 1; u <= t->ds.num_users; u++) {
        int32_t m = t->ds.train_len[u];
        if (m < 2)
            continue;
        t->samples[t->n_samples] = u;
        t->targets[t->n_samples++] = m - 1 < c->maxlen ? m - 1 : c->maxlen;
    }
    if (t->n_samples == 0)
        return ct_errbuf_set(eb, CT_EFORMAT, "%s: no user has 2 training interactions",
                             t->ds.source);
    return 0;
}

static int ctrain_train__rec_init(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    const ctrain_cfg_t *c = t->cfg;
    int rc;
    if ((rc = ctrain_model_init_params(t->model, c->seed)) != 0)
        return ct_errbuf_set(eb, rc, "initialising the model failed");
    if (c->state_dict_path[0] != '\0' &&
        (rc = ctrain_model_load_params(t->model, c->state_dict_path, eb)) != 0)
        return ct_errbuf_wrap(eb, rc, "--state_dict_path");
    if ((rc = ctrain_evaluator_init(&t->ev, &t->ds, &t->ops, t->micro, c->maxlen, c->eval,
                                    ctrain_family(t->mcfg.kind)->eval_excludes_target, t->env->rank,
                                    t->env->world_size, eb)) != 0)
        return rc;
    t->ev.progress = ctrain_train__eval_progress;
    t->ev.progress_ctx = t;
    return 0;
}

static void ctrain_train__rec_teardown(ctrain_trainer_t *t)
{
    ctrain_evaluator_close(&t->ev);
    ctrain_data_free(&t->ds);
}

static json_t *ctrain_train__rec_ckpt_json(const ctrain_trainer_t *t)
{
    return json_pack("{s:o, s:o}", "model", ctrain_model_cfg_to_json(&t->mcfg), "data",
                     json_pack("{s:s, s:I, s:I, s:I}", "source", t->ds.source, "num_users",
                               (json_int_t)t->ds.num_users, "num_items",
                               (json_int_t)t->ds.num_items, "num_interactions",
                               (json_int_t)t->ds.num_interactions));
}

static int ctrain_train__rec_check_ckpt(const ctrain_trainer_t *t, const json_t *o,
                                        const char *name, ct_errbuf_t *eb)
{
    json_error_t je;
    ctrain_model_cfg_t mc = {0};
    json_int_t users = 0, items = 0, inter = 0;
    if (ctrain_model_cfg_from_json(json_object_get(o, "model"), &mc, eb) != 0 ||
        json_unpack_ex((json_t *)o, &je, 0, "{s:{s:I, s:I, s:I}}", "data", "num_users", &users,
                       "num_items", &items, "num_interactions", &inter) != 0)
        return ct_errbuf_set(eb, CT_EFORMAT,
                             "refusing to resume from %s/%s: it is not a ctrain training "
                             "checkpoint (no usable configuration)",
                             t->ckpt.path, name);
    char what[160];
    const char *field = ctrain_model_cfg_diff(&mc, &t->mcfg, what, sizeof what);
    if (field)
        return ct_errbuf_set(eb, CT_EMISMATCH,
                             "refusing to resume from %s/%s: its model configuration differs from "
                             "this run's (%s); use another --train_dir or --resume never",
                             t->ckpt.path, name, what);
    if (users != t->ds.num_users || items != t->ds.num_items || inter != t->ds.num_interactions)
        return ct_errbuf_set(eb, CT_EMISMATCH,
                             "refusing to resume from %s/%s: it was trained on other data (%lld "
                             "users, %lld items, %lld interactions; this run has %d, %d, %lld)",
                             t->ckpt.path, name, (long long)users, (long long)items,
                             (long long)inter, t->ds.num_users, t->ds.num_items,
                             (long long)t->ds.num_interactions);
    return 0;
}

static void ctrain_train__rec_fill(const void *ctx, ctrain_batch_t *b, int r, int32_t sample,
                                   uint64_t seed, uint64_t key)
{
    const ctrain_trainer_t *t = ctx;
    ctrain_batch_fill_train(b, r, &t->ds, sample, seed, key);
}

static int ctrain_train__rec_start(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    const ctrain_cfg_t *cfg = t->cfg;
    int rc = ctrain_eval_popularity(&t->ev, t->red, &t->popularity, eb);
    if (rc != 0)
        return rc;
    if (t->rank0) {
        ctrain_out_popularity(&t->popularity);
        json_t *pop = ctrain_out_result_json(&t->popularity);
        rc = ctrain_out_write_json(cfg->train_dir, "popularity.json", pop, eb);
        json_decref(pop);
        if (rc != 0)
            return rc;
    }
    return ctrain_loader_init(&t->loader, ctrain_train__rec_fill, t, t->samples, t->targets,
                              &t->shard, t->micro, cfg->maxlen,
                              ctrain_family(t->mcfg.kind)->uses_times,
                              cfg->loss == CTRAIN_LOSS_SAMPLED_CE ? cfg->num_negatives : 0,
                              cfg->seed, t->step, t->total_steps, cfg->num_workers > 0, eb);
}

static int ctrain_train__rec_evaluate(ctrain_trainer_t *t, int64_t epoch, ctrain_result_t *r,
                                      ct_errbuf_t *eb)
{
    int rc = ctrain_eval_model(&t->ev, t->model, t->red, &r->rec, eb);
    if (rc != 0)
        return rc;
    char when[96];
    snprintf(when, sizeof when, "evaluation after epoch %lld (step %lld)", (long long)epoch,
             (long long)t->step);
    /* every rank holds the same reduced counts, so all of them fail (or go on) together */
    return ctrain_train_check_scores(t->cfg, &r->rec, t->rank0, when, eb);
}

/* The number models are selected on: validation full-ranking NDCG@10 when full ranking is
 * evaluated (docs/models.md §4.3), else the sampled one. Never a test number. */
static double ctrain_train__rec_select(const ctrain_cfg_t *c, const ctrain_result_t *r)
{
    return (c->eval & CTRAIN_EVAL_MODE_FULL) ? r->rec.valid.full_ndcg : r->rec.valid.ndcg;
}

static const char *ctrain_train__rec_selected_on(const ctrain_cfg_t *c)
{
    return (c->eval & CTRAIN_EVAL_MODE_FULL) ? "valid.full_ndcg@10" : "valid.ndcg@10";
}

static json_t *ctrain_train__rec_result_json(const ctrain_result_t *r)
{
    return ctrain_out_result_json(&r->rec);
}

static int ctrain_train__rec_result_from_json(const json_t *o, ctrain_result_t *r)
{
    return ctrain_out_result_from_json(o, &r->rec);
}

static void ctrain_train__rec_row(int64_t epoch, int64_t step, double loss, double rate,
                                  const ctrain_result_t *r)
{
    if (r == NULL)
        ctrain_out_row_header();
    else
        ctrain_out_row(epoch, step, loss, rate, &r->rec);
}

static size_t ctrain_train__rec_scalars(const ctrain_result_t *res, ctrain_scalar_t *sc)
{
    const ctrain_eval_result_t *r = &res->rec;
    const ctrain_scalar_t all[] = {{"valid/hr@10", r->valid.hr},
                                   {"valid/ndcg@10", r->valid.ndcg},
                                   {"valid/full_hr@10", r->valid.full_hr},
                                   {"valid/full_ndcg@10", r->valid.full_ndcg},
                                   {"test/hr@10", r->test.hr},
                                   {"test/ndcg@10", r->test.ndcg},
                                   {"test/full_hr@10", r->test.full_hr},
                                   {"test/full_ndcg@10", r->test.full_ndcg}};
    memcpy(sc, all, sizeof all);
    return sizeof all / sizeof all[0];
}

static void ctrain_train__rec_summary(ctrain_trainer_t *t, json_t *o)
{
    json_object_set_new(o, "popularity", ctrain_out_result_json(&t->popularity));
}

static int ctrain_train__rec_finish(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    (void)t, (void)eb;
    return 0;
}

const ctrain_task_t ctrain_rec_task = {
    .setup = ctrain_train__rec_setup,
    .init = ctrain_train__rec_init,
    .teardown = ctrain_train__rec_teardown,
    .header = ctrain_out_header,
    .ckpt_json = ctrain_train__rec_ckpt_json,
    .check_ckpt = ctrain_train__rec_check_ckpt,
    .start = ctrain_train__rec_start,
    .evaluate = ctrain_train__rec_evaluate,
    .select = ctrain_train__rec_select,
    .selected_on = ctrain_train__rec_selected_on,
    .result_json = ctrain_train__rec_result_json,
    .result_from_json = ctrain_train__rec_result_from_json,
    .row = ctrain_train__rec_row,
    .scalars = ctrain_train__rec_scalars,
    .summary = ctrain_train__rec_summary,
    .finish = ctrain_train__rec_finish,
    .infer = ctrain_infer_rec,
};

/* Every family's task, by kind (ctrain_registry.c lists the families). */
static const ctrain_task_t *const ctrain_train__tasks[] = {
    [CTRAIN_MODEL_SASREC] = &ctrain_rec_task,
    [CTRAIN_MODEL_TISASREC] = &ctrain_rec_task,
    [CTRAIN_MODEL_LM] = &ctrain_lm_task,
    [CTRAIN_MODEL_GPT2REC] = &ctrain_gpt2rec_task,
    [CTRAIN_MODEL_TEMPORAL] = &ctrain_temporal_task,
};

const ctrain_task_t *ctrain_task_of(const ctrain_cfg_t *cfg)
{
    return ctrain_train__tasks[cfg->model];
}

/* ---- the job --------------------------------------------------------------------------------- */

static int ctrain_train__loop(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    const ctrain_cfg_t *c = t->cfg;
    int rc;
    t->t_phase_ns = ct_time_ns();
    while (t->step < t->total_steps) {
        int64_t epoch, pos;
        ct_shard_locate(&t->shard, t->step, &epoch, &pos);
        ct_worker_progress((uint64_t)t->step);
        if ((rc = ctrain_train__step(t, epoch, eb)) != 0)
            return rc;
        t->step++;
        if (t->log && t->step % c->log_interval == 0)
            ctrain_out_log(t, "epoch %lld step %lld %s loss %.4f lr %.3g", (long long)epoch + 1,
                           (long long)t->step, t->task->log_stage(t), t->step_loss, t->lr_now);
        int64_t now = ct_time_ns();
        double dt = (double)(now - t->t_phase_ns) / 1e9;
        t->train_seconds += dt;
        t->total_train_seconds += dt;
        if (t->rank0)
            ctrain_out_progress(
                t, t->st.loss_steps ? t->st.loss_sum / (double)t->st.loss_steps : NAN, false);
        bool epoch_end = t->step % t->steps_per_epoch == 0;
        int64_t done = t->step / t->steps_per_epoch; /* epochs completed */
        if (epoch_end &&
            ((c->eval_every > 0 && done % c->eval_every == 0) || done == c->num_epochs)) {
            if ((rc = ctrain_train__evaluate(t, done, eb)) != 0)
                return rc;
        }
        if (epoch_end || (c->ckpt_every_steps > 0 && t->step % c->ckpt_every_steps == 0)) {
            if (t->step < t->total_steps && (rc = ctrain_train__save(t, CT_CKPT_STEP, eb)) != 0)
                return rc;
        }
        t->t_phase_ns = ct_time_ns();
    }
    return 0;
}

int ctrain_train_run(const ctrain_cfg_t *cfg, const ct_worker_env_t *env, ct_reducer_t *red,
                     ct_errbuf_t *eb)
{
    ctrain_trainer_t *t = calloc(1, sizeof *t);
    if (!t)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    t->cfg = cfg;
    t->task = ctrain_task_of(cfg);
    t->env = env;
    t->red = red;
    t->rank0 = env->rank == 0;
    t->t_start_ns = ct_time_ns();
    int rc = ctrain_train__setup(t, eb);
    if (rc != 0)
        goto out;
    if (t->rank0)
        t->task->header(t);

    bool resumed = false;
    if (!cfg->resume_never || env->restart_count > 0) {
        if ((rc = ctrain_train__resume(t, &resumed, eb)) != 0)
            goto out;
    } else if (t->rank0) {
        /* --resume never on a first attempt: this run must not be resumed from an earlier
         * run's files after an elastic restart, so they go now. */
        if ((rc = ct_ckpt_clear(&t->ckpt, eb)) != 0 || (rc = ctrain_train__epoch_clear(t, eb)) != 0)
            goto out;
    }
    /* baselines, then the batch stream from the step resumed at */
    if ((rc = t->task->start(t, eb)) != 0)
        goto out;
    if (t->rank0) {
        if ((rc = ctrain_out_open(t, resumed, t->step, eb)) != 0)
            goto out;
        t->rate_step0 = t->step;
        if ((rc = ctrain_out_log_open(t, eb)) != 0)
            goto out;
        t->task->row(0, 0, 0.0, 0.0, NULL);
    }
    if ((rc = ctrain_train__loop(t, eb)) != 0)
        goto out;
    if ((rc = ctrain_train__save(t, CT_CKPT_FINAL, eb)) != 0 || (rc = t->task->finish(t, eb)) != 0)
        goto out;
    if (t->rank0) {
        ctrain_out_progress_clear(t);
        ctrain_out_log_done(t);
        json_t *s = ctrain_out_summary(t);
        char *line = json_dumps(s, JSON_COMPACT | JSON_REAL_PRECISION(6));
        char *pretty = json_dumps(s, JSON_INDENT(2));
        json_decref(s);
        printf("# summary: %s\n", line ? line : "{}");
        fflush(stdout);
        rc = pretty ? ctrain_out_write_file(cfg->train_dir, "summary.json", pretty, eb) : -ENOMEM;
        free(line);
        free(pretty);
    }
out:
    ctrain_train__teardown(t);
    free(t);
    return rc;
}
