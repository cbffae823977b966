/*
 * ctrun_logs.c - the --redirects/--tee grammar, the rank filter, the per-stream plan, the
 * console prefix and the run/attempt folders. Folder names use Python's tempfile alphabet
 * (a-z, 0-9, '_') so a run folder looks like torchrun's ("none_gnvs3oei").
 */
#include "ctrun_logs.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_fs.h"
#include "ct_parse.h"
#include "ctrun_template.h"

/* ---- --redirects / --tee --------------------------------------------------------------------- */

int ctrun_std_parse(const char *text, ctrun_std_spec_t *out, ct_errbuf_t *eb)
{
    ctrun_std_spec_t s = {0};
    size_t len = strlen(text);
    if (len == 1 && text[0] >= '0' && text[0] <= '3') {
        s.all = (unsigned char)(text[0] - '0');
        *out = s;
        return 0;
    }
    /* Entries "d:v" joined by ','; every entry is exactly three characters. */
    bool ok = len >= 3 && (len + 1) % 4 == 0;
    for (size_t i = 0; ok && i < len; i += 4) {
        char r = text[i], c = text[i + 1], v = text[i + 2];
        ok = r >= '0' && r <= '9' && c == ':' && v >= '0' && v <= '3' &&
             (i + 3 == len || text[i + 3] == ',');
        if (ok)
            s.map[r - '0'] = (unsigned char)(v - '0');
    }
    if (!ok)
        return ct_errbuf_set(eb, CT_EPARSE,
                             "\"%.64s\" is not 0..3 or a list like 0:1,1:2 (a one-digit local "
                             "rank, ':', then 0 none, 1 stdout, 2 stderr, 3 both)",
                             text);
    s.is_map = true;
    *out = s;
    return 0;
}

unsigned ctrun_std_get(const ctrun_std_spec_t *spec, int local_rank)
{
    if (!spec->is_map)
        return spec->all;
    return (local_rank >= 0 && local_rank <= 9) ? spec->map[local_rank] : CTRUN_STD_NONE;
}

/* ---- --local_ranks_filter -------------------------------------------------------------------- */

int ctrun_rank_filter_parse(const char *text, ctrun_rank_filter_t *out, ct_errbuf_t *eb)
{
    out->ranks = NULL;
    out->count = 0;
    if (text[0] == '\0')
        return 0;
    size_t n = 1;
    for (const char *c = text; *c != '\0'; c++)
        n += *c == ',';
    int *ranks = calloc(n, sizeof *ranks);
    if (ranks == NULL)
        return -ENOMEM;
    const char *p = text;
    for (size_t i = 0; i < n; i++) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        int rc = CT_EPARSE;
        if (len < sizeof item) {
            memcpy(item, p, len);
            item[len] = '\0';
            rc = ct_parse_int(item, 0, INT_MAX, &ranks[i], NULL);
        }
        if (rc != 0) {
            free(ranks);
            return ct_errbuf_set(eb, rc,
                                 "\"%.64s\" is not a comma-separated list of local ranks "
                                 "(e.g. 0,1,2)",
                                 text);
        }
        p = comma ? comma + 1 : p + len;
    }
    out->ranks = ranks;
    out->count = n;
    return 0;
}

bool ctrun_rank_filter_shows(const ctrun_rank_filter_t *filter, int local_rank)
{
    if (filter == NULL || filter->count == 0)
        return true;
    for (size_t i = 0; i < filter->count; i++) {
        if (filter->ranks[i] == local_rank)
            return true;
    }
    return false;
}

void ctrun_rank_filter_free(ctrun_rank_filter_t *filter)
{
    free(filter->ranks);
    filter->ranks = NULL;
    filter->count = 0;
}

/* ---- decisions ------------------------------------------------------------------------------- */

ctrun_stream_plan_t ctrun_logs_plan(const ctrun_std_spec_t *redirects, const ctrun_std_spec_t *tee,
                                    const ctrun_rank_filter_t *filter, bool files_enabled,
                                    int local_rank, ctrun_stream_t stream)
{
    unsigned bit = stream == CTRUN_STREAM_STDOUT ? CTRUN_STD_OUT : CTRUN_STD_ERR;
    bool teed = (ctrun_std_get(tee, local_rank) & bit) != 0;
    bool redirected = teed || (ctrun_std_get(redirects, local_rank) & bit) != 0;
    bool shown = ctrun_rank_filter_shows(filter, local_rank);
    ctrun_stream_plan_t plan = {
        .to_file = redirected && files_enabled,
        .to_console = shown && (!redirected || teed),
    };
    plan.prefixed = teed && plan.to_console;
    return plan;
}

int ctrun_logs_prefix(const char *tmpl, const char *role, int rank, int local_rank, int group_rank,
                      int restart_count, char **out)
{
    char r[16], lr[16], gr[16], rc[16];
    snprintf(r, sizeof r, "%d", rank);
    snprintf(lr, sizeof lr, "%d", local_rank);
    snprintf(gr, sizeof gr, "%d", group_rank);
    snprintf(rc, sizeof rc, "%d", restart_count);
    if (tmpl == NULL) {
        size_t n = strlen(role) + strlen(lr) + 4;
        char *s = malloc(n);
        if (s == NULL)
            return -ENOMEM;
        snprintf(s, n, "[%s%s]:", role, lr);
        *out = s;
        return 0;
    }
    const ctrun_template_var_t vars[] = {
        {"role_name", role}, {"rank", r},           {"local_rank", lr},
        {"group_rank", gr},  {"restart_count", rc},
    };
    return ctrun_template_substitute(tmpl, vars, sizeof vars / sizeof vars[0], out);
}

/* ---- folders --------------------------------------------------------------------------------- */

/* mkdir -p with mode 0777 (the umask applies), like os.makedirs(exist_ok=True). */
static int ctrun_logs__mkdirs(const char *path, ct_errbuf_t *eb)
{
    int rc = ct_fs_mkdir_p(path, 0777, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, rc, "cannot create log folder");
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return ct_errbuf_set(eb, -ENOTDIR, "log folder %s is not a directory", path);
    return 0;
}

/* Creates "<dir>/<prefix><8 random chars>" with mode 0700, as Python's tempfile.mkdtemp
 * does, and returns its path (malloc'd) in *out. */
static int ctrun_logs__mkdtemp(const char *dir, const char *prefix, char **out, ct_errbuf_t *eb)
{
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789_";
    char path[PATH_MAX];
    for (int attempt = 0; attempt < 100; attempt++) {
        unsigned char rnd[8];
        if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
            return ct_errbuf_set(eb, -EIO, "getrandom failed: %s", strerror(errno));
        char name[9];
        for (int i = 0; i < 8; i++)
            name[i] = alphabet[rnd[i] % (sizeof alphabet - 1)];
        name[8] = '\0';
        int n = snprintf(path, sizeof path, "%s/%s%s", dir, prefix, name);
        if (n < 0 || (size_t)n >= sizeof path)
            return ct_errbuf_set(eb, -ENAMETOOLONG, "log folder under %.200s: path too long", dir);
        if (mkdir(path, 0700) == 0) {
            *out = strdup(path);
            return *out ? 0 : -ENOMEM;
        }
        if (errno != EEXIST)
            return ct_errbuf_set(eb, -errno, "cannot create log folder %s: %s", path,
                                 strerror(errno));
    }
    return ct_errbuf_set(eb, -EEXIST, "cannot create a unique log folder under %s", dir);
}

const char *ctrun_logs_tmpdir(const char *const *candidates, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *v = candidates[i];
        if (v != NULL && v[0] != '\0' && access(v, W_OK | X_OK) == 0)
            return v;
    }
    return "/tmp";
}

int ctrun_logs_init(ctrun_logs_t *logs, const char *log_dir, const char *tmp_dir,
                    const char *run_id, ct_errbuf_t *eb)
{
    memset(logs, 0, sizeof *logs);
    if (log_dir != NULL && strcmp(log_dir, "/dev/null") == 0) {
        logs->disabled = true;
        return 0;
    }
    if (strchr(run_id, '/') != NULL)
        return ct_errbuf_set(eb, CT_EPARSE, "run id \"%.64s\" contains '/'", run_id);
    int rc;
    if (log_dir != NULL && log_dir[0] != '\0') {
        rc = ctrun_logs__mkdirs(log_dir, eb);
        /* Absolute, so that a worker that changes directory still finds its error file. */
        if (rc == 0 && (logs->base_dir = realpath(log_dir, NULL)) == NULL)
            rc = ct_errbuf_set(eb, -errno, "log folder %s: %s", log_dir, strerror(errno));
    } else {
        rc = ctrun_logs__mkdtemp(tmp_dir != NULL ? tmp_dir : "/tmp", "ctrun_", &logs->base_dir, eb);
        logs->base_created = rc == 0;
    }
    if (rc == 0) {
        char prefix[NAME_MAX];
        snprintf(prefix, sizeof prefix, "%.200s_", run_id);
        rc = ctrun_logs__mkdtemp(logs->base_dir, prefix, &logs->run_dir, eb);
    }
    if (rc != 0) {
        if (logs->base_created)
            rmdir(logs->base_dir);
        ctrun_logs_close(logs);
    }
    return rc;
}

static int ctrun_logs__attempt_dir(const ctrun_logs_t *logs, int attempt, char *buf, size_t size)
{
    int n = snprintf(buf, size, "%s/attempt_%d", logs->run_dir, attempt);
    return (n < 0 || (size_t)n >= size) ? -ENAMETOOLONG : 0;
}

static int ctrun_logs__rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return (flag == FTW_DP ? rmdir(path) : unlink(path)) == 0 ? 0 : -1;
}

int ctrun_logs_attempt_prepare(const ctrun_logs_t *logs, int attempt, int nproc, ct_errbuf_t *eb)
{
    if (logs->disabled)
        return 0;
    char dir[PATH_MAX];
    if (ctrun_logs__attempt_dir(logs, attempt, dir, sizeof dir) != 0)
        return ct_errbuf_set(eb, -ENAMETOOLONG, "log folder under %.200s: path too long",
                             logs->run_dir);
    struct stat st;
    if (lstat(dir, &st) == 0 &&
        nftw(dir, ctrun_logs__rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) != 0)
        return ct_errbuf_set(eb, -errno, "cannot remove old log folder %s: %s", dir,
                             strerror(errno));
    if (mkdir(dir, 0777) != 0)
        return ct_errbuf_set(eb, -errno, "cannot create log folder %s: %s", dir, strerror(errno));
    for (int lr = 0; lr < nproc; lr++) {
        char sub[PATH_MAX];
        int n = snprintf(sub, sizeof sub, "%s/%d", dir, lr);
        if (n < 0 || (size_t)n >= sizeof sub)
            return ct_errbuf_set(eb, -ENAMETOOLONG, "log folder under %.200s: path too long", dir);
        if (mkdir(sub, 0777) != 0)
            return ct_errbuf_set(eb, -errno, "cannot create log folder %s: %s", sub,
                                 strerror(errno));
    }
    return 0;
}

int ctrun_logs_path(const ctrun_logs_t *logs, int attempt, int local_rank, ctrun_log_file_t which,
                    char *buf, size_t size)
{
    static const char *const names[] = {"stdout.log", "stderr.log", "error.json"};
    if (size == 0)
        return -ENAMETOOLONG;
    if (logs->disabled) {
        buf[0] = '\0';
        return 0;
    }
    int n = snprintf(buf, size, "%s/attempt_%d/%d/%s", logs->run_dir, attempt, local_rank,
                     names[which]);
    return (n < 0 || (size_t)n >= size) ? -ENAMETOOLONG : 0;
}

int ctrun_logs_open(const ctrun_logs_t *logs, int attempt, int local_rank, ctrun_stream_t stream,
                    int *fd, ct_errbuf_t *eb)
{
    if (logs->disabled)
        return ct_errbuf_set(eb, -ENOENT, "log files are disabled (--log_dir /dev/null)");
    char path[PATH_MAX];
    ctrun_log_file_t which = stream == CTRUN_STREAM_STDOUT ? CTRUN_LOG_STDOUT : CTRUN_LOG_STDERR;
    if (ctrun_logs_path(logs, attempt, local_rank, which, path, sizeof path) != 0)
        return ct_errbuf_set(eb, -ENAMETOOLONG, "log file under %.200s: path too long",
                             logs->run_dir);
    int f = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (f < 0)
        return ct_errbuf_set(eb, -errno, "cannot open log file %s: %s", path, strerror(errno));
    *fd = f;
    return 0;
}

int ctrun_logs_filtered_open(const ctrun_logs_t *logs, int attempt, ctrun_stream_t stream, int *fd,
                             ct_errbuf_t *eb)
{
    if (logs->disabled)
        return ct_errbuf_set(eb, -ENOENT, "log files are disabled (--log_dir /dev/null)");
    char path[PATH_MAX];
    int n = snprintf(path, sizeof path, "%s/attempt_%d/filtered_%s.log", logs->run_dir, attempt,
                     stream == CTRUN_STREAM_STDOUT ? "stdout" : "stderr");
    if (n < 0 || (size_t)n >= sizeof path)
        return ct_errbuf_set(eb, -ENAMETOOLONG, "log file under %.200s: path too long",
                             logs->run_dir);
    int f = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0666);
    if (f < 0)
        return ct_errbuf_set(eb, -errno, "cannot open log file %s: %s", path, strerror(errno));
    *fd = f;
    return 0;
}

/* ---- line filters -------------------------------------------------------------------------- */

int ctrun_line_filter_parse(const char *text, ctrun_line_filter_t *out, ct_errbuf_t *eb)
{
    *out = (ctrun_line_filter_t){0};
    size_t n = 1;
    for (const char *p = text; *p != '\0'; p++) {
        if (p[0] == ',' && p[1] == ',')
            p++; /* an escaped comma, as str.replace(",,", placeholder) reads left to right */
        else if (*p == ',')
            n++;
    }
    out->needles = calloc(n, sizeof *out->needles);
    if (out->needles == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    const char *p = text;
    for (size_t k = 0; k < n; k++) {
        char *needle = malloc(strlen(p) + 1);
        if (needle == NULL) {
            ctrun_line_filter_free(out);
            return ct_errbuf_set(eb, -ENOMEM, "out of memory");
        }
        size_t len = 0;
        while (*p != '\0') {
            if (p[0] == ',' && p[1] == ',') {
                needle[len++] = ',';
                p += 2;
            } else if (*p == ',') {
                p++;
                break;
            } else {
                needle[len++] = *p++;
            }
        }
        needle[len] = '\0';
        out->needles[out->count++] = needle;
    }
    return 0;
}

bool ctrun_line_filter_match(const ctrun_line_filter_t *filter, const char *a, size_t an,
                             const char *b, size_t bn)
{
    for (size_t k = 0; k < filter->count; k++) {
        const char *needle = filter->needles[k];
        size_t nl = strlen(needle);
        if (nl == 0)
            return true;
        if (memmem(a, an, needle, nl) != NULL || memmem(b, bn, needle, nl) != NULL)
            return true;
        /* A needle across the two pieces: it starts in the last nl-1 bytes of a. */
        for (size_t i = an > nl - 1 ? an - (nl - 1) : 0; i < an; i++) {
            size_t head = an - i;
            if (head < nl && nl - head <= bn && memcmp(a + i, needle, head) == 0 &&
                memcmp(b, needle + head, nl - head) == 0)
                return true;
        }
    }
    return false;
}

void ctrun_line_filter_free(ctrun_line_filter_t *filter)
{
    for (size_t k = 0; k < filter->count; k++)
        free(filter->needles[k]);
    free(filter->needles);
    *filter = (ctrun_line_filter_t){0};
}

static int ctrun_logs__rm_empty_dir(const char *path, const struct stat *st, int flag,
                                    struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP)
        rmdir(path); /* fails harmlessly (ENOTEMPTY) when a file is left inside */
    return 0;
}

void ctrun_logs_remove_empty(const ctrun_logs_t *logs)
{
    if (logs->disabled || logs->run_dir == NULL)
        return;
    nftw(logs->run_dir, ctrun_logs__rm_empty_dir, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
    if (logs->base_created)
        rmdir(logs->base_dir);
}

void ctrun_logs_close(ctrun_logs_t *logs)
{
    free(logs->base_dir);
    free(logs->run_dir);
    logs->base_dir = NULL;
    logs->run_dir = NULL;
}
