/*
 * ct_ckpt.c - a checkpoint directory: naming, the `latest` pointer, retention of the last K
 * step checkpoints (plus best and final), the training metadata in __metadata__, and loading
 * with fallback to the previous checkpoint when the newest is damaged, or to the newest intact
 * step or final checkpoint when `latest` is unusable or missing.
 *
 * Crash safety rests on ordering: a checkpoint file is durable (fsync, rename, directory
 * fsync; see ct_st_save_at) before `latest` names it, `latest` is replaced the same way, and
 * old files are removed only after `latest` has moved past them. The file format itself is
 * ct_safetensors.c's business; who writes (rank 0) and when is the trainer's.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_log.h"
#include "ct_parse.h"
#include "ct_fs.h"
#include "ct_worker_internal.h"
#include "ctworker.h"

#define CT__LATEST      "latest"
#define CT__STEP_PREFIX "step_"
#define CT__SUFFIX      ".safetensors"

static const char *const ct_ckpt__kind_names[] = {"step", "best", "final"};

int ct_ckpt_file_name(ct_ckpt_kind_t kind, int64_t step, char *buf, size_t size)
{
    int n;
    switch (kind) {
    case CT_CKPT_STEP:
        if (step < 0)
            return -EINVAL;
        n = snprintf(buf, size, CT__STEP_PREFIX "%012lld" CT__SUFFIX, (long long)step);
        break;
    case CT_CKPT_BEST: n = snprintf(buf, size, "best" CT__SUFFIX); break;
    case CT_CKPT_FINAL: n = snprintf(buf, size, "final" CT__SUFFIX); break;
    default: return -EINVAL;
    }
    return n < 0 || (size_t)n >= size ? -EINVAL : n;
}

/* "step_<digits>.safetensors" -> the step; -1 for any other name. */
static int64_t ct_ckpt__step_of(const char *name)
{
    size_t plen = strlen(CT__STEP_PREFIX), slen = strlen(CT__SUFFIX), len = strlen(name);
    if (len <= plen + slen || len - plen - slen > 18 || strncmp(name, CT__STEP_PREFIX, plen) != 0 ||
        strcmp(name + len - slen, CT__SUFFIX) != 0)
        return -1;
    int64_t step = 0;
    for (size_t i = plen; i < len - slen; i++) {
        if (name[i] < '0' || name[i] > '9')
            return -1;
        step = step * 10 + (name[i] - '0');
    }
    return step;
}

/* Every step in the directory, largest first, in a malloc'd array. */
static int ct_ckpt__list_steps(ct_ckpt_dir_t *d, int64_t **out, size_t *count, ct_errbuf_t *eb)
{
    *out = NULL;
    *count = 0;
    int fd = openat(d->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    if (dir == NULL) {
        int rc = -errno;
        if (fd >= 0)
            close(fd);
        return ct_errbuf_set(eb, rc, "%s: cannot list: %s", d->path, ct_strerror(rc));
    }
    int64_t *steps = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(dir)) != NULL) {
        int64_t s = ct_ckpt__step_of(de->d_name);
        if (s < 0)
            continue;
        if (n == cap) {
            size_t ncap = cap ? 2 * cap : 16;
            int64_t *grown = realloc(steps, ncap * sizeof *steps);
            if (grown == NULL) {
                rc = ct_errbuf_set(eb, -ENOMEM, "%s: out of memory listing", d->path);
                break;
            }
            steps = grown;
            cap = ncap;
        }
        steps[n++] = s;
    }
    closedir(dir);
    if (rc != 0) {
        free(steps);
        return rc;
    }
    /* Descending; a few dozen entries at most, so insertion sort is plenty. */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && steps[j - 1] < steps[j]; j--) {
            int64_t t = steps[j];
            steps[j] = steps[j - 1];
            steps[j - 1] = t;
        }
    *out = steps;
    *count = n;
    return 0;
}

static int ct_ckpt__read_latest(ct_ckpt_dir_t *d, char *name, size_t size, char *why, size_t wsize);
static void ct_ckpt__prune(ct_ckpt_dir_t *d, int64_t step);

static void ct_ckpt__remove_stale_tmp(ct_ckpt_dir_t *d)
{
    int fd = openat(d->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    if (dir == NULL) {
        if (fd >= 0)
            close(fd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(dir)) != NULL)
        if (ct_fs_is_tmp_name(de->d_name) && unlinkat(d->dirfd, de->d_name, 0) == 0)
            ct_log_info("removed %s/%s, left by an interrupted checkpoint write", d->path,
                        de->d_name);
    closedir(dir);
}

int ct_ckpt_dir_init(ct_ckpt_dir_t *d, const char *path, int keep_last, bool writer,
                     ct_errbuf_t *eb)
{
    d->dirfd = -1;
    d->keep_last = keep_last;
    d->writer = writer;
    d->path[0] = '\0';
    if (keep_last < 1)
        return ct_errbuf_set(eb, -EINVAL, "checkpoints: keep_last %d (expected >= 1)", keep_last);
    int rc = ct_fs_mkdir_p(path, 0755, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, rc, "checkpoint directory");
    snprintf(d->path, sizeof d->path, "%s", path);
    d->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d->dirfd < 0) {
        rc = -errno;
        return ct_errbuf_set(eb, rc, "checkpoint directory %s: %s", path, ct_strerror(rc));
    }
    if (writer) {
        /* A writer killed between saving and pruning leaves one step file too many, and
         * several such kills in a row would pile up; retention relative to what `latest`
         * names (as if that save had just finished) restores the bound of keep_last. */
        ct_ckpt__remove_stale_tmp(d);
        char latest[CT_CKPT_NAME_MAX], why[160];
        if (ct_ckpt__read_latest(d, latest, sizeof latest, why, sizeof why) == 1 &&
            ct_ckpt__step_of(latest) >= 0)
            ct_ckpt__prune(d, ct_ckpt__step_of(latest));
    }
    return 0;
}

void ct_ckpt_dir_close(ct_ckpt_dir_t *d)
{
    if (d->dirfd >= 0)
        close(d->dirfd);
    d->dirfd = -1;
}

int ct_ckpt_clear(ct_ckpt_dir_t *d, ct_errbuf_t *eb)
{
    if (!d->writer)
        return ct_errbuf_set(eb, CT_ESTATE, "checkpoints %s: only the writer may clear them",
                             d->path);
    /* `latest` first: from then on no reader resumes from this directory's old files, even
     * if removing one of them fails below. */
    if (unlinkat(d->dirfd, CT__LATEST, 0) != 0 && errno != ENOENT) {
        int rc = -errno;
        return ct_errbuf_set(eb, rc, "%s/%s: cannot remove: %s", d->path, CT__LATEST,
                             ct_strerror(rc));
    }
    int64_t *steps;
    size_t count;
    int rc = ct_ckpt__list_steps(d, &steps, &count, eb);
    if (rc != 0)
        return rc;
    char names[CT_CKPT_NAME_MAX];
    for (size_t i = 0; i < count + 2 && rc == 0; i++) {
        if (i < count)
            ct_ckpt_file_name(CT_CKPT_STEP, steps[i], names, sizeof names);
        else
            ct_ckpt_file_name(i == count ? CT_CKPT_BEST : CT_CKPT_FINAL, 0, names, sizeof names);
        if (unlinkat(d->dirfd, names, 0) != 0 && errno != ENOENT) {
            rc = -errno;
            ct_errbuf_set(eb, rc, "%s/%s: cannot remove: %s", d->path, names, ct_strerror(rc));
        }
    }
    free(steps);
    if (rc == 0 && fsync(d->dirfd) != 0 && errno != EINVAL) {
        rc = -errno;
        ct_errbuf_set(eb, rc, "%s: fsync: %s", d->path, ct_strerror(rc));
    }
    return rc;
}

/* Retention after step `step` was saved: drop steps above it (an abandoned future), then all
 * but the newest keep_last. Failures only warn: the checkpoint itself is safe. */
static void ct_ckpt__prune(ct_ckpt_dir_t *d, int64_t step)
{
    ct_errbuf_t eb;
    int64_t *steps;
    size_t n;
    if (ct_ckpt__list_steps(d, &steps, &n, &eb) != 0) {
        ct_log_warn("checkpoint retention skipped: %s", eb.msg);
        return;
    }
    int kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (steps[i] <= step && kept < d->keep_last) {
            kept++;
            continue;
        }
        char name[CT_CKPT_NAME_MAX];
        ct_ckpt_file_name(CT_CKPT_STEP, steps[i], name, sizeof name);
        if (unlinkat(d->dirfd, name, 0) != 0 && errno != ENOENT)
            ct_log_warn("checkpoint retention: cannot remove %s/%s: %s", d->path, name,
                        ct_strerror(-errno));
    }
    free(steps);
}

static int ct_ckpt__check_meta(const ct_ckpt_meta_t *m, ct_errbuf_t *eb)
{
    if (m->step < 0 || m->epoch < 0 || m->data_position < 0)
        return ct_errbuf_set(eb, -EINVAL, "checkpoint metadata: negative step, epoch or position");
    if (m->world_size < 1)
        return ct_errbuf_set(eb, -EINVAL, "checkpoint metadata: world size %d", m->world_size);
    if (m->has_metric && !isfinite(m->metric))
        return ct_errbuf_set(eb, -EINVAL, "checkpoint metadata: metric is not finite");
    size_t clen = strnlen(m->config, sizeof m->config);
    if (clen == sizeof m->config)
        return ct_errbuf_set(eb, -EINVAL, "checkpoint metadata: config is not NUL-terminated "
                                          "within %d bytes", CT_CKPT_CONFIG_MAX);
    if (clen > 0) {
        json_error_t jerr;
        json_t *j = json_loadb(m->config, clen, JSON_DECODE_ANY, &jerr);
        if (j == NULL)
            return ct_errbuf_set(eb, -EINVAL, "checkpoint metadata: config is not JSON: %s",
                                 jerr.text);
        json_decref(j);
    }
    return 0;
}

int ct_ckpt_save(ct_ckpt_dir_t *d, ct_ckpt_kind_t kind, const ct_tensor_view_t *views, size_t n,
                 const ct_ckpt_meta_t *meta, ct_errbuf_t *eb)
{
    if (d->dirfd < 0 || !d->writer)
        return ct_errbuf_set(eb, CT_ESTATE, "checkpoint directory %s is not open for writing",
                             d->path);
    char name[CT_CKPT_NAME_MAX];
    if (ct_ckpt_file_name(kind, meta->step, name, sizeof name) < 0)
        return ct_errbuf_set(eb, -EINVAL, "checkpoint: bad kind %d or step %lld", (int)kind,
                             (long long)meta->step);
    int rc = ct_ckpt__check_meta(meta, eb);
    if (rc != 0)
        return rc;

    char step[24], epoch[24], pos[24], world[16], metric[32];
    snprintf(step, sizeof step, "%lld", (long long)meta->step);
    snprintf(epoch, sizeof epoch, "%lld", (long long)meta->epoch);
    snprintf(pos, sizeof pos, "%lld", (long long)meta->data_position);
    snprintf(world, sizeof world, "%d", meta->world_size);
    snprintf(metric, sizeof metric, "%.17g", meta->metric);
    ct_st_kv_t kv[8] = {
        {"format", "pt"}, {"ctrun_kind", ct_ckpt__kind_names[kind]}, {"step", step},
        {"epoch", epoch}, {"data_position", pos},               {"world_size", world},
    };
    size_t nkv = 6;
    if (meta->config[0] != '\0')
        kv[nkv++] = (ct_st_kv_t){"config", meta->config};
    if (meta->has_metric)
        kv[nkv++] = (ct_st_kv_t){"metric", metric};

    /* The fault-injection points (ct_inject.c) mark the three windows a crash can hit. */
    ct__inject_ckpt_begin(meta->step);
    rc = ct_st_save_at(d->dirfd, name, views, n, kv, nkv, eb);
    if (rc != 0) {
        ct__inject_ckpt_end();
        return ct_errbuf_wrap(eb, rc, "checkpoint %s", d->path);
    }
    ct__inject_ckpt_point(CT_INJECT_PHASE_FILE);
    if (kind != CT_CKPT_BEST) {
        char text[CT_CKPT_NAME_MAX + 1];
        int len = snprintf(text, sizeof text, "%s\n", name);
        rc = ct_fs_replace_at(d->dirfd, CT__LATEST, text, (size_t)len, eb);
        if (rc != 0) {
            ct__inject_ckpt_end();
            return ct_errbuf_wrap(eb, rc, "checkpoint %s", d->path);
        }
        ct__inject_ckpt_point(CT_INJECT_PHASE_LATEST);
    }
    ct__inject_ckpt_end();
    if (kind == CT_CKPT_STEP)
        ct_ckpt__prune(d, meta->step);
    return 0;
}

/* ---- loading -----------------------------------------------------------------------------------
 */

static void ct_ckpt__one_line(ct_errbuf_t *eb)
{
    for (char *p = eb != NULL ? eb->msg : ""; *p != '\0'; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7F)
            *p = '?';
}

static int ct_ckpt__meta_int(ct_st_file_t *f, const char *name, const char *key, int64_t min,
                        int64_t max, int64_t *out, ct_errbuf_t *eb)
{
    const char *v = ct_st_meta(f, key);
    if (v == NULL)
        return ct_errbuf_set(eb, CT_EFORMAT, "%s: __metadata__ has no \"%s\"", name, key);
    int rc = ct_parse_int64(v, min, max, out, eb);
    if (rc != 0) {
        ct_errbuf_wrap(eb, CT_EFORMAT, "%s: __metadata__ \"%s\"", name, key);
        ct_ckpt__one_line(eb); /* the message quotes the file's value */
        return CT_EFORMAT;
    }
    return 0;
}

static int ct_ckpt__read_meta(ct_st_file_t *f, const char *name, ct_ckpt_meta_t *m, ct_errbuf_t *eb)
{
    if (ct_st_meta(f, "ctrun_format") == NULL)
        return ct_errbuf_set(eb, CT_EFORMAT,
                             "%s: not a ctrun checkpoint (no ctrun_format in __metadata__)", name);
    int64_t world;
    int rc;
    if ((rc = ct_ckpt__meta_int(f, name, "step", 0, INT64_MAX, &m->step, eb)) != 0 ||
        (rc = ct_ckpt__meta_int(f, name, "epoch", 0, INT64_MAX, &m->epoch, eb)) != 0 ||
        (rc = ct_ckpt__meta_int(f, name, "data_position", 0, INT64_MAX, &m->data_position, eb)) !=
            0 ||
        (rc = ct_ckpt__meta_int(f, name, "world_size", 1, CT_WORKER_MAX_WORLD, &world, eb)) != 0)
        return rc;
    m->world_size = (int)world;
    const char *metric = ct_st_meta(f, "metric");
    m->has_metric = metric != NULL;
    m->metric = 0;
    if (metric != NULL && ct_parse_double(metric, -INFINITY, INFINITY, &m->metric, eb) != 0) {
        ct_errbuf_wrap(eb, CT_EFORMAT, "%s: __metadata__ \"metric\"", name);
        ct_ckpt__one_line(eb);
        return CT_EFORMAT;
    }
    const char *config = ct_st_meta(f, "config");
    size_t clen = config != NULL ? strlen(config) : 0;
    if (clen >= sizeof m->config)
        return ct_errbuf_set(eb, CT_EFORMAT, "%s: config of %zu bytes (at most %d)", name, clen,
                             CT_CKPT_CONFIG_MAX - 1);
    memcpy(m->config, config != NULL ? config : "", clen + 1);
    return 0;
}

int ct_ckpt_load(ct_ckpt_dir_t *d, const char *name, const ct_tensor_view_t *views, size_t n,
                 ct_ckpt_meta_t *meta, ct_errbuf_t *eb)
{
    ct_st_file_t *f;
    int rc = ct_st_open_at(&f, d->dirfd, name, eb);
    if (rc != 0)
        return rc;
    rc = ct_ckpt__read_meta(f, name, meta, eb);
    /* A step file's name says its step too: the two must agree (a check that also covers the
     * files written before header checksums). */
    int64_t named = ct_ckpt__step_of(name);
    if (rc == 0 && named >= 0 && named != meta->step)
        rc = ct_errbuf_set(eb, CT_EFORMAT,
                           "%s: __metadata__ \"step\" is %lld, the file name says %lld", name,
                           (long long)meta->step, (long long)named);
    if (rc == 0)
        rc = ct_st_read(f, views, n, 0, eb);
    if (rc == 0 && !ct_st_header_checked(f) && d->writer)
        ct_log_info("checkpoint %s/%s was written before header checksums (no %s): loaded, "
                    "its metadata unverified",
                    d->path, name, CT__ST_HEADER_CRC_KEY);
    ct_st_close(f);
    return rc;
}

/* Damage worth falling back from, as opposed to a checkpoint that does not fit the model or
 * a file system refusing access, which an older checkpoint would not cure. */
static bool ct_ckpt__is_damage(int rc)
{
    return rc == CT_EFORMAT || rc == CT_ECRC || rc == CT_ELIMIT || rc == -ENOENT || rc == -EIO ||
           rc == -EISDIR;
}

/* The name `latest` holds: 1 found, 0 absent, or -1 unusable, with the reason in why (said
 * by the caller: the writer's set-up reads it too, and the reason is told once). Only a step
 * or final checkpoint of this directory is a valid target. */
static int ct_ckpt__read_latest(ct_ckpt_dir_t *d, char *name, size_t size, char *why, size_t wsize)
{
    int fd = openat(d->dirfd, CT__LATEST, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        snprintf(why, wsize, "cannot be opened (%s)", ct_strerror(-errno));
        return -1;
    }
    char buf[CT_CKPT_NAME_MAX + 2];
    ssize_t got = read(fd, buf, sizeof buf - 1);
    int err = got < 0 ? errno : 0;
    struct stat st;
    bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    close(fd);
    if (!regular) {
        snprintf(why, wsize, "is not a regular file%s", err == EISDIR ? " (a directory)" : "");
        return -1;
    }
    if (got < 0) {
        snprintf(why, wsize, "cannot be read (%s)", ct_strerror(-err));
        return -1;
    }
    size_t len = (size_t)got;
    buf[len] = '\0';
    if (len > 0 && buf[len - 1] == '\n')
        buf[--len] = '\0';
    if (len == 0) {
        snprintf(why, wsize, "is empty");
        return -1;
    }
    if (len >= size || strlen(buf) != len) {
        snprintf(why, wsize, "is damaged (it does not hold a file name)");
        return -1;
    }
    if (strchr(buf, '/') != NULL) {
        snprintf(why, wsize, "names a path outside the directory");
        return -1;
    }
    if (ct_ckpt__step_of(buf) < 0 && strcmp(buf, "final" CT__SUFFIX) != 0) {
        for (char *p = buf; *p != '\0'; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7F)
                *p = '?';
        snprintf(why, wsize, "is damaged (\"%.40s\" is not a step or final checkpoint)", buf);
        return -1;
    }
    memcpy(name, buf, len + 1);
    return 1;
}

/* The step final.safetensors records: 1 (step set), 0 when there is no such file, or the
 * error of reading its header (a damaged one included). */
static int ct_ckpt__final_step(ct_ckpt_dir_t *d, int64_t *step, ct_errbuf_t *eb)
{
    const char *name = "final" CT__SUFFIX;
    ct_st_file_t *f;
    int rc = ct_st_open_at(&f, d->dirfd, name, eb);
    if (rc == -ENOENT)
        return 0;
    if (rc != 0)
        return rc;
    if (ct_st_meta(f, "ctrun_format") == NULL)
        rc = ct_errbuf_set(eb, CT_EFORMAT,
                           "%s: not a ctrun checkpoint (no ctrun_format in __metadata__)", name);
    else
        rc = ct_ckpt__meta_int(f, name, "step", 0, INT64_MAX, step, eb);
    ct_st_close(f);
    return rc == 0 ? 1 : rc;
}

/* Fallback bookkeeping: one warning line per damaged file, and the newest damage kept for the
 * error when nothing loads. */
typedef struct ct_ckpt__fallback {
    int damaged;
    int last_rc;
    char newest[CT_ERRBUF_SIZE];
} ct_ckpt__fallback_t;

static void ct_ckpt__damaged(ct_ckpt_dir_t *d, const char *name, int rc, const ct_errbuf_t *eb,
                        ct_ckpt__fallback_t *fb)
{
    const char *msg = eb != NULL ? eb->msg : ct_strerror(rc);
    ct_log_warn("checkpoint %s/%s is damaged (%s); trying the previous one", d->path, name, msg);
    if (fb->damaged++ == 0)
        snprintf(fb->newest, sizeof fb->newest, "%s", msg);
    fb->last_rc = rc;
}

int ct_ckpt_load_latest(ct_ckpt_dir_t *d, const ct_tensor_view_t *views, size_t n,
                        ct_ckpt_meta_t *meta, char *name, ct_errbuf_t *eb)
{
    char first[CT_CKPT_NAME_MAX], why[160] = "";
    int64_t bound = INT64_MAX; /* only checkpoints of a smaller step are candidates */
    bool final_tried = false;
    ct_ckpt__fallback_t fb = {0};

    const int latest = ct_ckpt__read_latest(d, first, sizeof first, why, sizeof why);
    if (latest == 1) {
        int rc = ct_ckpt_load(d, first, views, n, meta, eb);
        if (rc == 0) {
            if (name != NULL)
                snprintf(name, CT_CKPT_NAME_MAX, "%s", first);
            return 0;
        }
        if (!ct_ckpt__is_damage(rc))
            return ct_errbuf_wrap(eb, rc, "checkpoint %s", d->path);
        ct_ckpt__damaged(d, first, rc, eb, &fb);
        int64_t s = ct_ckpt__step_of(first);
        if (s >= 0)
            bound = s;
        else
            final_tried = true;
    }

    /* The candidates, newest first: the step files and final.safetensors, ordered by the step
     * each holds (final first on a tie: it is written after a step file of the same step). */
    int64_t *steps;
    size_t count;
    int rc = ct_ckpt__list_steps(d, &steps, &count, eb);
    if (rc != 0)
        return rc;
    int64_t final_step = -1;
    if (!final_tried) {
        rc = ct_ckpt__final_step(d, &final_step, eb);
        if (rc < 0 && !ct_ckpt__is_damage(rc)) {
            free(steps);
            return ct_errbuf_wrap(eb, rc, "checkpoint %s", d->path);
        }
        if (rc < 0)
            ct_ckpt__damaged(d, "final" CT__SUFFIX, rc, eb, &fb);
        if (rc != 1 || final_step >= bound)
            final_step = -1;
    }
    size_t usable = final_step >= 0;
    for (size_t i = 0; i < count; i++)
        usable += steps[i] < bound;
    if (latest == 0 && usable > 0)
        ct_log_warn("checkpoint pointer %s/%s is missing, but the directory holds checkpoints; "
                    "resuming from the newest intact one",
                    d->path, CT__LATEST);
    else if (latest < 0)
        ct_log_warn("checkpoint pointer %s/%s %s; %s", d->path, CT__LATEST, why,
                    usable > 0 ? "resuming from the newest intact checkpoint"
                               : "the directory holds no checkpoint to resume from");

    size_t i = 0;
    while (i < count || final_step >= 0) {
        char cand[CT_CKPT_NAME_MAX];
        if (i < count && steps[i] >= bound) {
            i++;
            continue;
        }
        if (final_step >= 0 && (i == count || final_step >= steps[i])) {
            snprintf(cand, sizeof cand, "final" CT__SUFFIX);
            final_step = -1;
        } else {
            ct_ckpt_file_name(CT_CKPT_STEP, steps[i++], cand, sizeof cand);
        }
        rc = ct_ckpt_load(d, cand, views, n, meta, eb);
        if (rc == 0) {
            free(steps);
            if (name != NULL)
                snprintf(name, CT_CKPT_NAME_MAX, "%s", cand);
            if (fb.damaged > 0 || latest != 1)
                ct_log_info("resuming from %s/%s (step %lld)", d->path, cand,
                            (long long)meta->step);
            return 0;
        }
        if (!ct_ckpt__is_damage(rc)) {
            free(steps);
            return ct_errbuf_wrap(eb, rc, "checkpoint %s", d->path);
        }
        ct_ckpt__damaged(d, cand, rc, eb, &fb);
    }
    free(steps);
    if (fb.damaged == 0)
        return ct_errbuf_set(eb, -ENOENT, "no checkpoint in %s", d->path);
    return ct_errbuf_set(eb, fb.last_rc, "no usable checkpoint in %s: %d damaged, the newest: %s",
                         d->path, fb.damaged, fb.newest);
}
