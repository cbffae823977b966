/*
 * ctrain_out.c - everything the trainer writes, all on rank 0: '#' header lines and one
 * fixed-width row per evaluation on stdout, the progress line on stderr, metrics.jsonl, the
 * TensorBoard event file, train.log (the tasks that ask for it), summary.json and atomically
 * written small files. The numbers come
 * from ctrain_train.c; nothing here decides anything about training.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ct_config.h"
#include "ct_fs.h"
#include "ct_log.h"
#include "ct_time.h"
#include "ctrain_train_internal.h"

#define CT__METRICS "metrics.jsonl"

/* ---- JSON of metrics ----------------------------------------------------------------------- */

json_t *ctrain_out_num(double x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

void ctrain_out_print_summary(json_t *o, size_t flags)
{
    char *line = o ? json_dumps(o, flags) : NULL;
    json_decref(o);
    printf("# summary: %s\n", line ? line : "{}");
    fflush(stdout);
    free(line);
}
static json_t *ctrain_out_split_json(const ctrain_eval_split_result_t *r)
{
    json_t *o = json_object();
    json_object_set_new(o, "hr@10", ctrain_out_num(r->hr));
    json_object_set_new(o, "ndcg@10", ctrain_out_num(r->ndcg));
    json_object_set_new(o, "full_hr@10", ctrain_out_num(r->full_hr));
    json_object_set_new(o, "full_ndcg@10", ctrain_out_num(r->full_ndcg));
    json_object_set_new(o, "users", json_integer((json_int_t)r->users));
    if (r->nonfinite > 0) /* the reason the metrics above are null */
        json_object_set_new(o, "nonfinite_users", json_integer((json_int_t)r->nonfinite));
    return o;
}

json_t *ctrain_out_result_json(const ctrain_eval_result_t *r)
{
    return json_pack("{s:o, s:o}", "valid", ctrain_out_split_json(&r->valid), "test",
                     ctrain_out_split_json(&r->test));
}

static int ctrain_out__split_from_json(const json_t *o, ctrain_eval_split_result_t *r)
{
    static const char *const keys[4] = {"hr@10", "ndcg@10", "full_hr@10", "full_ndcg@10"};
    double *dst[4] = {&r->hr, &r->ndcg, &r->full_hr, &r->full_ndcg};
    if (!json_is_object(o))
        return -1;
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(o, keys[i]);
        if (json_is_null(v))
            *dst[i] = NAN;
        else if (json_is_number(v))
            *dst[i] = json_number_value(v);
        else
            return -1;
    }
    json_t *u = json_object_get(o, "users"), *nf = json_object_get(o, "nonfinite_users");
    if (!json_is_integer(u) || (nf != NULL && !json_is_integer(nf)))
        return -1;
    r->users = json_integer_value(u);
    r->nonfinite = nf != NULL ? json_integer_value(nf) : 0;
    return 0;
}

int ctrain_out_result_from_json(const json_t *o, ctrain_eval_result_t *r)
{
    if (!json_is_object(o))
        return -1;
    if (ctrain_out__split_from_json(json_object_get(o, "valid"), &r->valid) != 0 ||
        ctrain_out__split_from_json(json_object_get(o, "test"), &r->test) != 0)
        return -1;
    return 0;
}

/* ---- stdout -------------------------------------------------------------------------------- */

void ctrain_out_header(ctrain_trainer_t *t)
{
    const ctrain_cfg_t *c = t->cfg;
    const ctrain_model_cfg_t *m = &t->mcfg;
    char extra[96] = "";
    if (ctrain_family(m->kind)->has_time_span)
        snprintf(extra, sizeof extra, ", time_span %d", m->time_span);
    if (m->mhc_streams > 0)
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ", %d mHC streams",
                 m->mhc_streams);
    printf("# ctrain %s: %s layout %s, hidden_units %d, %d block%s, %d head%s, maxlen %d%s, "
           "dropout %g, loss %s, %zu parameters\n",
           CT_VERSION, ctrain_model_title(m), ctrain_layout_name(m->layout), m->hidden,
           m->num_blocks, m->num_blocks == 1 ? "" : "s", m->num_heads, m->num_heads == 1 ? "" : "s",
           m->maxlen, extra, (double)m->dropout, ctrain_loss_name(m->loss), t->model->num_params);
    /* a file with timestamps was read as tsv or ml1m, the formats the count filter applies to */
    char filtered[96] = "";
    if (t->ds.times != NULL && strncmp(t->ds.source, "synthetic(", 10) != 0) {
        if (c->min_count > 1)
            snprintf(filtered, sizeof filtered,
                     " after dropping users and items with fewer than %d rows (--min_count)",
                     c->min_count);
        else
            snprintf(filtered, sizeof filtered, " (no count filter: --min_count 1)");
    }
    printf("# data: %s: %d users, %d items, %lld interactions%s (mean training length %.2f); "
           "%lld training sequences, %d users evaluated\n",
           t->ds.source, t->ds.num_users, t->ds.num_items, (long long)t->ds.num_interactions,
           filtered, ctrain_data_mean_train_len(&t->ds), (long long)t->n_samples,
           t->ds.num_eval_users);
    ctrain_out_training_line(t, "users");
    printf("# evaluation every %d epoch%s: ", c->eval_every, c->eval_every == 1 ? "" : "s");
    if (c->eval & CTRAIN_EVAL_MODE_SAMPLED)
        printf("sampled = the target + %d negatives not among the user's training items (for "
               "test nor the validation item%s) (seed %u)%s",
               CTRAIN_EVAL_NEGATIVES,
               t->ev.exclude_target ? "; nor the target" : "; copies of the target not counted",
               CTRAIN_EVAL_SEED, (c->eval & CTRAIN_EVAL_MODE_FULL) ? "; " : "");
    if (c->eval & CTRAIN_EVAL_MODE_FULL)
        printf("full = every item except item 0 and the user's history (training items; for "
               "test also the validation item)");
    printf("; best checkpoint = highest validation %s\n",
           (c->eval & CTRAIN_EVAL_MODE_FULL) ? "full_ndcg@10" : "ndcg@10");
    fflush(stdout);
}

void ctrain_out_training_line(ctrain_trainer_t *t, const char *rows)
{
    const ctrain_cfg_t *c = t->cfg;
    printf("# training: %d %s x %d accumulation = %lld per optimizer step over %d rank%s "
           "(%s reduction), %lld steps per epoch, %d epochs, lr %g (%s, warmup %lld, scale %s), "
           "l2_emb %g, grad_clip %g, seed %llu; %s backend, %d BLAS thread%s\n",
           c->batch_size, rows, c->grad_accum, (long long)t->shard.global_batch, t->env->world_size,
           t->env->world_size == 1 ? "" : "s", ct_reducer_name(t->red),
           (long long)t->steps_per_epoch, c->num_epochs, c->lr,
           ctrain_lr_schedule_name(c->lr_schedule), (long long)c->warmup_steps,
           ctrain_lr_scale_name(c->lr_scale), c->l2_emb, c->grad_clip, (unsigned long long)c->seed,
           t->ops.name, c->threads, c->threads == 1 ? "" : "s");
}

static void ctrain_out__cell(double x)
{
    if (isfinite(x))
        printf(" %9.4f", x);
    else
        printf(" %9s", "-");
}

void ctrain_out_row_header(void)
{
    printf("#  epoch      step train_loss    pos/s   v_hr@10 v_ndcg@10  v_fhr@10 v_fndcg@10"
           "  t_hr@10 t_ndcg@10  t_fhr@10 t_fndcg@10\n");
    fflush(stdout);
}

void ctrain_out_row(int64_t epoch, int64_t step, double loss, double pos_per_s,
                    const ctrain_eval_result_t *r)
{
    printf("%8lld %9lld", (long long)epoch, (long long)step);
    if (isfinite(loss))
        printf(" %10.5f", loss);
    else
        printf(" %10s", "-");
    printf(" %8.0f", pos_per_s);
    ctrain_out__cell(r->valid.hr), ctrain_out__cell(r->valid.ndcg),
        ctrain_out__cell(r->valid.full_hr);
    ctrain_out__cell(r->valid.full_ndcg), ctrain_out__cell(r->test.hr),
        ctrain_out__cell(r->test.ndcg);
    ctrain_out__cell(r->test.full_hr), ctrain_out__cell(r->test.full_ndcg);
    printf("\n");
    fflush(stdout);
}

void ctrain_out_popularity(const ctrain_eval_result_t *r)
{
    printf("# popularity baseline (score = training frequency):");
    const char *name[2] = {"valid", "test"};
    const ctrain_eval_split_result_t *s[2] = {&r->valid, &r->test};
    for (int i = 0; i < 2; i++) {
        printf(" %s", name[i]);
        if (isfinite(s[i]->hr))
            printf(" hr@10 %.4f ndcg@10 %.4f", s[i]->hr, s[i]->ndcg);
        if (isfinite(s[i]->full_hr))
            printf(" full_hr@10 %.4f full_ndcg@10 %.4f", s[i]->full_hr, s[i]->full_ndcg);
        printf(i == 0 ? ";" : "\n");
    }
    fflush(stdout);
}

/* ---- progress ------------------------------------------------------------------------------- */

void ctrain_out_progress(ctrain_trainer_t *t, double loss, bool force)
{
    int64_t now = ct_time_ns();
    int64_t every = t->tty ? 250000000LL : 10000000000LL;
    if (!force && now - t->t_progress_ns < every)
        return;
    t->t_progress_ns = now;
    /* The epoch of the last step done (t->step steps are done): after the last step of an
     * epoch, that epoch - not the next one, which after the last epoch does not exist. */
    int64_t epoch, pos;
    ct_shard_locate(&t->shard, t->step > 0 ? t->step - 1 : 0, &epoch, &pos);
    /* The ETA extrapolates this process's speed (a resumed run starts counting afresh). */
    char eta[32] = "?";
    if (!t->eta_init) {
        t->eta_init = true;
        t->eta_step0 = t->step;
        t->eta_s0 = t->total_train_seconds;
    }
    double ds = t->total_train_seconds - t->eta_s0;
    int64_t dn = t->step - t->eta_step0;
    if (dn > 0 && ds > 0) {
        double left = (double)(t->total_steps - t->step) * ds / (double)dn;
        snprintf(eta, sizeof eta, "%lldh%02lldm%02llds", (long long)(left / 3600),
                 (long long)fmod(left / 60, 60), (long long)fmod(left, 60));
    }
    char line[256];
    snprintf(
        line, sizeof line, "epoch %lld/%d step %lld/%lld loss %.5f %.0f pos/s train %.0fs eta %s",
        (long long)epoch + 1, t->cfg->num_epochs, (long long)t->step, (long long)t->total_steps,
        loss, t->train_seconds > 0 ? t->rate_positions / t->train_seconds : 0.0,
        t->total_train_seconds, eta);
    if (t->tty) {
        fprintf(stderr, "\r\033[K%s", line);
        fflush(stderr);
    } else {
        ct_log_info("%s", line);
    }
}

void ctrain_out_progress_clear(ctrain_trainer_t *t)
{
    if (t->tty) {
        fprintf(stderr, "\r\033[K");
        fflush(stderr);
    }
}

/* ---- files ---------------------------------------------------------------------------------- */

int ctrain_out_write_json(const char *dir, const char *name, const json_t *o, ct_errbuf_t *eb)
{
    char *text = json_dumps(o, JSON_INDENT(2));
    int rc = text ? ctrain_out_write_file(dir, name, text, eb) : -ENOMEM;
    free(text);
    return rc;
}

int ctrain_out_write_file(const char *dir, const char *name, const char *text, ct_errbuf_t *eb)
{
    char path[CTRAIN_TRAIN_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t len = strlen(text);
    char *line = malloc(len + 2); /* the text and its final newline, in one write */
    if (line == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "%s: out of memory", path);
    memcpy(line, text, len);
    line[len] = '\n';
    int rc = ct_fs_replace(path, line, len + 1, eb);
    free(line);
    return rc;
}

/* metrics.jsonl without the records of steps after keep_step (a resumed run replays them). */
static int ctrain_out__cut_metrics(const char *dir, int64_t keep_step, ct_errbuf_t *eb)
{
    char path[CTRAIN_TRAIN_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, CT__METRICS);
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? 0 : ct_errbuf_set(eb, -errno, "%s: %s", path, strerror(errno));
    size_t cap = 4096, len = 0;
    char *kept = malloc(cap), *line = NULL;
    size_t lcap = 0;
    ssize_t n;
    int dropped = 0;
    if (!kept) {
        fclose(f);
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    }
    kept[0] = '\0';
    while ((n = getline(&line, &lcap, f)) > 0) {
        json_t *o = json_loads(line, 0, NULL);
        json_t *s = o ? json_object_get(o, "step") : NULL;
        bool keep = s && json_is_integer(s) && json_integer_value(s) <= keep_step;
        json_decref(o);
        if (!keep) {
            dropped++;
            continue;
        }
        if (len + (size_t)n + 1 > cap) {
            while (len + (size_t)n + 1 > cap)
                cap *= 2;
            char *g = realloc(kept, cap);
            if (!g) {
                free(kept), free(line), fclose(f);
                return ct_errbuf_set(eb, -ENOMEM, "out of memory");
            }
            kept = g;
        }
        memcpy(kept + len, line, (size_t)n);
        len += (size_t)n;
        kept[len] = '\0';
    }
    free(line);
    fclose(f);
    int rc = 0;
    if (dropped > 0) {
        ct_log_info("%s: dropped %d record%s after step %lld (this run replays those steps)", path,
                    dropped, dropped == 1 ? "" : "s", (long long)keep_step);
        if (len > 0 && kept[len - 1] == '\n')
            kept[--len] = '\0';
        if (len == 0)
            rc = unlink(path) == 0 ? 0 : ct_errbuf_set(eb, -errno, "%s: %s", path, strerror(errno));
        else
            rc = ctrain_out_write_file(dir, CT__METRICS, kept, eb);
    }
    free(kept);
    return rc;
}

int ctrain_out_open(ctrain_trainer_t *t, bool resumed, int64_t keep_step, ct_errbuf_t *eb)
{
    const ctrain_cfg_t *c = t->cfg;
    t->tty = isatty(STDERR_FILENO);
    json_t *args = ctrain_cfg_to_json(c);
    json_object_set_new(args, "world_size", json_integer(t->env->world_size));
    json_object_set_new(args, "version", json_string(CT_VERSION));
    char *text = json_dumps(args, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(args);
    int rc = text ? ctrain_out_write_file(c->train_dir, "args.json", text, eb) : -ENOMEM;
    free(text);
    if (rc != 0)
        return rc;

    char path[CTRAIN_TRAIN_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", c->train_dir, CT__METRICS);
    if (resumed) {
        if ((rc = ctrain_out__cut_metrics(c->train_dir, keep_step, eb)) != 0)
            return rc;
        t->metrics = fopen(path, "a");
    } else {
        t->metrics = fopen(path, "w");
    }
    if (!t->metrics)
        return ct_errbuf_set(eb, -errno, "%s: %s", path, strerror(errno));
    if ((rc = ctrain_tboard_open(&t->tb, c->train_dir, eb)) != 0)
        return rc;
    t->tb_open = true;
    return 0;
}

/* ---- train.log ------------------------------------------------------------------------------ */

void ctrain_out_log(ctrain_trainer_t *t, const char *fmt, ...)
{
    if (!t->log)
        return;
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", localtime_r(&now, &tm));
    va_list ap;
    va_start(ap, fmt);
    bool ok = fprintf(t->log, "%s ", stamp) > 0 && vfprintf(t->log, fmt, ap) >= 0 &&
              fputc('\n', t->log) != EOF && fflush(t->log) == 0;
    va_end(ap);
    if (!ok) { /* the log is a record of the run, not the run: say so once and go on */
        ct_log_warn("train.log: write failed (%s); no more lines are written", strerror(errno));
        fclose(t->log);
        t->log = NULL;
    }
}

int ctrain_out_log_open(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    const ctrain_cfg_t *c = t->cfg;
    if (!t->rank0 || !t->task->log_stage)
        return 0;
    const char *dir = c->log_dir[0] ? c->log_dir : c->train_dir;
    int rc = ct_fs_mkdir_p(dir, 0755, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, rc, "--log_dir");
    char path[CTRAIN_TRAIN_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/train.log", dir);
    if (!(t->log = fopen(path, "a")))
        return ct_errbuf_set(eb, -errno, "--log_dir: %s: %s", path, strerror(errno));
    ctrain_out_log(t, "ctrain %s --model %s: world %d, %s reduction, %s backend, attempt %d",
                   CT_VERSION, ctrain_model_kind_name(c->model), t->env->world_size,
                   ct_reducer_name(t->red), t->ops.name, t->env->restart_count);
    if (t->resumed_from[0])
        ctrain_out_log(t, "resumed from %s/%s at epoch %lld step %lld", t->ckpt.path,
                       t->resumed_from, (long long)(t->step / t->steps_per_epoch),
                       (long long)t->step);
    ctrain_out_log(t,
                   "%lld training samples; %d rank%s x batch %d x accumulation %d = %lld samples "
                   "per step; %lld steps per epoch, %d epochs",
                   (long long)t->n_samples, t->env->world_size, t->env->world_size == 1 ? "" : "s", c->batch_size / t->env->world_size,
                   c->grad_accum, (long long)t->shard.global_batch, (long long)t->steps_per_epoch,
                   c->num_epochs);
    ctrain_out_log(t, "model: %zu parameters", t->model->num_params);
    return 0;
}

/* Samples trained when `step` optimizer steps are done (the last batch of an epoch may be
 * short). */
static int64_t ctrain_out__samples_at(const ctrain_trainer_t *t, int64_t step)
{
    const int64_t e = step / t->steps_per_epoch, p = step % t->steps_per_epoch;
    const int64_t in = p * t->shard.global_batch;
    return e * t->n_samples + (in < t->n_samples ? in : t->n_samples);
}

/* " name=value" for each of the task's scalars of r, the split's prefix left out. */
static void ctrain_out__log_vals(const ctrain_trainer_t *t, const ctrain_result_t *r, char *vals,
                                 size_t size)
{
    size_t len = 0;
    vals[0] = '\0';
    ctrain_scalar_t sc[CTRAIN_TASK_MAX_SCALARS];
    const size_t n = t->task->scalars(r, sc);
    for (size_t i = 0; i < n && len < size; i++) {
        const char *slash = strchr(sc[i].tag, '/');
        len += (size_t)snprintf(vals + len, size - len, " %s=%.4f", slash ? slash + 1 : sc[i].tag,
                                sc[i].v);
    }
}

void ctrain_out_log_eval(ctrain_trainer_t *t, int64_t epoch, double loss, double seconds,
                         const ctrain_result_t *r)
{
    if (!t->log)
        return;
    char vals[512];
    ctrain_out__log_vals(t, r, vals, sizeof vals);
    const int64_t samples =
        ctrain_out__samples_at(t, t->step) - ctrain_out__samples_at(t, t->rate_step0);
    ctrain_out_log(t,
                   "epoch %lld/%d stage=%s step=%lld train_loss=%.4f%s lr=%.3g time=%.1fs "
                   "samples_per_s=%.0f",
                   (long long)epoch, t->cfg->num_epochs, t->task->log_stage(t), (long long)t->step,
                   loss, vals, t->lr_now, seconds, seconds > 0 ? (double)samples / seconds : 0.0);
}

void ctrain_out_log_done(ctrain_trainer_t *t)
{
    if (!t->log)
        return;
    char vals[512] = "";
    if (t->has_last)
        ctrain_out__log_vals(t, &t->last, vals, sizeof vals);
    ctrain_out_log(t, "done: epochs=%d stage=%s step=%lld%s wall=%.1fs", t->cfg->num_epochs,
                   t->task->log_stage(t), (long long)t->step, vals,
                   (double)(ct_time_ns() - t->t_start_ns) / 1e9);
}

void ctrain_out_close(ctrain_trainer_t *t)
{
    if (t->log)
        fclose(t->log);
    t->log = NULL;
    if (t->metrics)
        fclose(t->metrics);
    t->metrics = NULL;
    if (t->tb_open)
        ctrain_tboard_close(&t->tb);
    t->tb_open = false;
}

int ctrain_out_metrics(ctrain_trainer_t *t, int64_t epoch, double loss, double pos_per_s,
                       const ctrain_result_t *r, ct_errbuf_t *eb)
{
    json_t *o = json_object();
    json_object_set_new(o, "epoch", json_integer((json_int_t)epoch));
    json_object_set_new(o, "step", json_integer((json_int_t)t->step));
    json_object_set_new(o, "train_loss", ctrain_out_num(loss));
    json_object_set_new(o, "positions_per_s", json_real(pos_per_s));
    json_object_set_new(o, "lr", json_real(t->lr_now));
    json_object_set_new(o, "skipped_steps", json_integer((json_int_t)t->st.skipped_steps));
    json_t *res = t->task->result_json(r);
    json_object_update(o, res);
    json_decref(res);
    char *text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!text)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    int ok = fprintf(t->metrics, "%s\n", text) > 0 && fflush(t->metrics) == 0;
    free(text);
    if (!ok)
        return ct_errbuf_set(eb, -EIO, "%s/%s: write failed: %s", t->cfg->train_dir, CT__METRICS,
                             strerror(errno));

    ctrain_scalar_t sc[3 + CTRAIN_TASK_MAX_SCALARS] = {
        {"train/loss", loss}, {"train/positions_per_s", pos_per_s}, {"train/lr", t->lr_now}};
    const size_t nsc = 3 + t->task->scalars(r, sc + 3);
    for (size_t i = 0; i < nsc; i++) {
        if (!isfinite(sc[i].v))
            continue;
        int rc = ctrain_tboard_scalar(&t->tb, sc[i].tag, t->step, sc[i].v, eb);
        if (rc != 0)
            return rc;
    }
    return 0;
}

json_t *ctrain_out_summary(ctrain_trainer_t *t)
{
    const ctrain_cfg_t *c = t->cfg;
    json_t *o = json_object();
    json_object_set_new(o, "epochs", json_integer(c->num_epochs));
    json_object_set_new(o, "steps", json_integer((json_int_t)t->step));
    json_object_set_new(o, "skipped_steps", json_integer((json_int_t)t->st.skipped_steps));
    json_object_set_new(o, "train_seconds", json_real(t->total_train_seconds));
    json_object_set_new(o, "wall_seconds", json_real((double)(ct_time_ns() - t->t_start_ns) / 1e9));
    json_object_set_new(o, "parameters", json_integer((json_int_t)t->model->num_params));
    if (t->model->ops && t->model->ops->mem_peak > 0) /* the CUDA backend counts */
        json_object_set_new(o, "device_peak_bytes",
                            json_integer((json_int_t)t->model->ops->mem_peak));
    if (t->st.has_best) {
        json_t *b = t->task->result_json(&t->st.best);
        json_object_set_new(b, "epoch", json_integer((json_int_t)t->st.best_epoch));
        json_object_set_new(b, "step", json_integer((json_int_t)t->st.best_step));
        json_object_set_new(b, "selected_on", json_string(t->task->selected_on(c)));
        json_object_set_new(o, "best", b);
    }
    if (t->has_last) {
        json_t *f = t->task->result_json(&t->last);
        json_object_set_new(f, "epoch", json_integer((json_int_t)t->last_epoch));
        json_object_set_new(f, "step", json_integer((json_int_t)t->last_step));
        json_object_set_new(o, "final", f);
    }
    t->task->summary(t, o);
    return o;
}
