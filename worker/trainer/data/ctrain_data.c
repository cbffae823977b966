/*
 * ctrain_data.c - loading interaction files into the CSR dataset of ctrain_data.h, with the
 * filtering, re-indexing, chronological sort, leave-one-out split and TiSASRec time scaling
 * of docs/models.md §1 and §3.1. The file is streamed through a fixed buffer and parsed line
 * by line as it arrives, with a strict hand-written field parser (a million lines must load in
 * well under a second; sscanf/strtol would accept junk such as "12abc"): the first bad line
 * stops the load before the rest of the file is read, and the raw text is never held whole -
 * only the parsed rows are.
 */
#include "ctrain_data.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CT__DATA_CHUNK    ((size_t)1 << 20) /* bytes read at a time */
#define CT__DATA_LINE_MAX ((size_t)65536)   /* a longer line is an error, not a reason to grow */

/* One parsed line: ids in the source's numbering, the timestamp (0 without time), and the
 * line number for messages. */
typedef struct ctrain_data__row {
    int64_t user, item, time;
    int64_t line;
} ctrain_data__row_t;

typedef struct ctrain_data__rows {
    ctrain_data__row_t *v;
    size_t n, cap;
} ctrain_data__rows_t;

static int ctrain_data__rows_push(ctrain_data__rows_t *r, ctrain_data__row_t row)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 65536;
        ctrain_data__row_t *v = realloc(r->v, cap * sizeof *v);
        if (v == NULL)
            return -ENOMEM;
        r->v = v;
        r->cap = cap;
    }
    r->v[r->n++] = row;
    return 0;
}

int ctrain_data_parse_format(const char *text, ctrain_data_format_t *out, ct_errbuf_t *eb)
{
    static const struct {
        const char *name;
        ctrain_data_format_t f;
    } names[] = {{"auto", CTRAIN_DATA_AUTO},
                 {"sasrec", CTRAIN_DATA_SASREC},
                 {"tsv", CTRAIN_DATA_TSV},
                 {"ml1m", CTRAIN_DATA_ML1M}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(text, names[i].name) == 0) {
            *out = names[i].f;
            return 0;
        }
    }
    return ct_errbuf_set(
        eb, CT_EPARSE, "unknown data format \"%.40s\" (expected auto, sasrec, tsv or ml1m)", text);
}

/* A decimal integer spanning exactly [s, s+len): optional '-', digits, within int64. */
static bool ctrain_data__int_field(const char *s, size_t len, int64_t *out)
{
    size_t i = 0;
    bool neg = false;
    if (len > 0 && (s[0] == '-' || s[0] == '+')) {
        neg = s[0] == '-';
        i = 1;
    }
    if (i == len || len - i > 18)
        return false;
    int64_t v = 0;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = neg ? -v : v;
    return true;
}

/* A decimal number (the rating column): digits with at most one '.', optional sign. */
static bool ctrain_data__num_field(const char *s, size_t len)
{
    size_t i = (len > 0 && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
    bool digit = false, dot = false;
    for (; i < len; i++) {
        if (s[i] >= '0' && s[i] <= '9')
            digit = true;
        else if (s[i] == '.' && !dot)
            dot = true;
        else
            return false;
    }
    return digit;
}

typedef struct ctrain_data__field {
    const char *p;
    size_t len;
} ctrain_data__field_t;

/* Splits [s, e) at sep ("\t", "::") or, with sep NULL, at runs of blanks. Returns the number of
 * fields found (at most max + 1, so "too many" can be reported). */
static int ctrain_data__split_fields(const char *s, const char *e, const char *sep,
                                     ctrain_data__field_t *f, int max)
{
    int n = 0;
    if (sep == NULL) {
        const char *p = s;
        while (p < e) {
            while (p < e && (*p == ' ' || *p == '\t'))
                p++;
            if (p == e)
                break;
            const char *q = p;
            while (q < e && *q != ' ' && *q != '\t')
                q++;
            if (n <= max)
                f[n] = (ctrain_data__field_t){p, (size_t)(q - p)};
            n++;
            p = q;
        }
        return n;
    }
    size_t sl = strlen(sep);
    const char *p = s;
    for (;;) {
        const char *q = p;
        while (q + sl <= e && memcmp(q, sep, sl) != 0)
            q++;
        if (q + sl > e)
            q = e;
        if (n <= max)
            f[n] = (ctrain_data__field_t){p, (size_t)(q - p)};
        n++;
        if (q == e)
            break;
        p = q + sl;
    }
    return n;
}

/* The format of a file whose first line is [s, e): "::" -> ML1M, a tab -> TSV, else SASREC. */
static ctrain_data_format_t ctrain_data__detect(const char *s, const char *e)
{
    size_t n = (size_t)(e - s);
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] == ':' && s[i + 1] == ':')
            return CTRAIN_DATA_ML1M;
    }
    if (memchr(s, '\t', n) != NULL)
        return CTRAIN_DATA_TSV;
    return CTRAIN_DATA_SASREC;
}

/* One line [p, e) (no newline) of the file, number `line`, into rows. */
static int ctrain_data__parse_line(const char *path, int64_t line, const char *p, const char *e,
                          ctrain_data_format_t fmt, ctrain_data__rows_t *rows, ct_errbuf_t *eb)
{
    const char *sep = fmt == CTRAIN_DATA_TSV ? "\t" : fmt == CTRAIN_DATA_ML1M ? "::" : NULL;
    if (e > p && e[-1] == '\r')
        e--; /* CRLF files */
    if (e == p)
        return ct_errbuf_set(eb, CT_EPARSE, "%s:%lld: empty line", path, (long long)line);
    if (memchr(p, '\0', (size_t)(e - p)) != NULL)
        return ct_errbuf_set(eb, CT_EFORMAT, "%s:%lld: contains a NUL byte (not a text file)", path,
                             (long long)line);

    ctrain_data__field_t f[5];
    int nf = ctrain_data__split_fields(p, e, sep, f, 4);
    ctrain_data__row_t row = {.line = line};
    if (fmt == CTRAIN_DATA_SASREC) {
        if (nf != 2)
            return ct_errbuf_set(eb, CT_EPARSE, "%s:%lld: expected 2 fields \"user item\", got %d",
                                 path, (long long)line, nf);
    } else if (fmt == CTRAIN_DATA_TSV) {
        if (nf != 3 && nf != 4)
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "%s:%lld: expected 3 or 4 tab-separated fields "
                                 "(user, item, [rating,] timestamp), got %d",
                                 path, (long long)line, nf);
    } else if (nf != 4) {
        return ct_errbuf_set(eb, CT_EPARSE,
                             "%s:%lld: expected 4 fields \"user::item::rating::timestamp\", "
                             "got %d",
                             path, (long long)line, nf);
    }
    static const char *const what[] = {"user", "item"};
    int64_t ids[2];
    for (int k = 0; k < 2; k++) {
        int64_t lo = fmt == CTRAIN_DATA_SASREC ? 1 : 0;
        if (!ctrain_data__int_field(f[k].p, f[k].len, &ids[k]) || ids[k] < lo || ids[k] > INT32_MAX)
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "%s:%lld: %s id \"%.*s\" is not an integer in %lld..%d", path,
                                 (long long)line, what[k], (int)(f[k].len > 40 ? 40 : f[k].len),
                                 f[k].p, (long long)lo, INT32_MAX);
    }
    row.user = ids[0];
    row.item = ids[1];
    if (fmt != CTRAIN_DATA_SASREC) {
        ctrain_data__field_t ts = f[nf - 1];
        if (nf == 4 && !ctrain_data__num_field(f[2].p, f[2].len))
            return ct_errbuf_set(eb, CT_EPARSE, "%s:%lld: rating \"%.*s\" is not a number", path,
                                 (long long)line, (int)(f[2].len > 40 ? 40 : f[2].len), f[2].p);
        if (!ctrain_data__int_field(ts.p, ts.len, &row.time))
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "%s:%lld: timestamp \"%.*s\" is not an integer (Unix seconds)",
                                 path, (long long)line, (int)(ts.len > 40 ? 40 : ts.len), ts.p);
    }
    if (ctrain_data__rows_push(rows, row) != 0)
        return ct_errbuf_set(eb, -ENOMEM, "%s: out of memory", path);
    return 0;
}

/* Streams path through a buffer of CT__DATA_CHUNK + CT__DATA_LINE_MAX bytes, parsing each line
 * as soon as it is complete; *fmt (CTRAIN_DATA_AUTO: decided from the first line) is the format
 * used. Stops at the first bad line, having read only the chunks up to it. */
static int ctrain_data__read_rows(const char *path, ctrain_data_format_t *fmt,
                                  ctrain_data__rows_t *rows, ct_errbuf_t *eb)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ct_errbuf_set(eb, -errno, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        close(fd);
        return ct_errbuf_set(eb, -EISDIR, "%s: is a directory, not a data file", path);
    }
    const size_t cap = CT__DATA_CHUNK + CT__DATA_LINE_MAX;
    char *buf = malloc(cap);
    if (buf == NULL) {
        close(fd);
        return ct_errbuf_set(eb, -ENOMEM, "%s: out of memory", path);
    }
    size_t start = 0, end = 0; /* unparsed bytes: buf[start, end) */
    bool eof = false;
    int64_t line = 0;
    int rc = 0;
    for (;;) {
        char *nl = memchr(buf + start, '\n', end - start);
        if (nl == NULL && !eof) {
            /* An incomplete line: it must fit in the buffer; then read more behind it. */
            if (end - start > CT__DATA_LINE_MAX) {
                rc = ct_errbuf_set(eb, CT_EPARSE,
                                   "%s:%lld: line longer than %zu bytes (not an interaction "
                                   "file?)",
                                   path, (long long)line + 1, CT__DATA_LINE_MAX);
                break;
            }
            memmove(buf, buf + start, end - start);
            end -= start;
            start = 0;
            ssize_t got = read(fd, buf + end, cap - end);
            if (got < 0 && errno == EINTR)
                continue;
            if (got < 0) {
                rc = ct_errbuf_set(eb, -errno, "%s: read error: %s", path, strerror(errno));
                break;
            }
            if (got == 0)
                eof = true;
            end += (size_t)got;
            continue;
        }
        if (nl == NULL && start == end)
            break; /* the end of the file, after a final newline or no line at all */
        const char *e = nl != NULL ? nl : buf + end;
        line++;
        if (*fmt == CTRAIN_DATA_AUTO)
            *fmt = ctrain_data__detect(buf + start, e);
        if ((rc = ctrain_data__parse_line(path, line, buf + start, e, *fmt, rows, eb)) != 0)
            break;
        start = (size_t)(e - buf) + (nl != NULL);
    }
    free(buf);
    close(fd);
    if (rc == 0 && rows->n == 0)
        rc = ct_errbuf_set(eb, CT_EFORMAT, "%s: no interactions", path);
    return rc;
}

static int ctrain_data__cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Sorted unique values of ids[0..n); returns the count. */
static size_t ctrain_data__unique(int64_t *ids, size_t n)
{
    qsort(ids, n, sizeof *ids, ctrain_data__cmp_i64);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m == 0 || ids[m - 1] != ids[i])
            ids[m++] = ids[i];
    }
    return m;
}

static int64_t ctrain_data__index_of(const int64_t *sorted, size_t n, int64_t v)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (sorted[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (int64_t)lo; /* v is always present: callers look up ids taken from the same rows */
}

/* Re-indexes rows' users and items to 1..N in ascending original order. */
static int ctrain_data__reindex(ctrain_data__rows_t *rows, int32_t *num_users, int32_t *num_items)
{
    int64_t *u = malloc(rows->n * sizeof *u);
    int64_t *it = malloc(rows->n * sizeof *it);
    if (u == NULL || it == NULL) {
        free(u);
        free(it);
        return -ENOMEM;
    }
    for (size_t i = 0; i < rows->n; i++) {
        u[i] = rows->v[i].user;
        it[i] = rows->v[i].item;
    }
    size_t nu = ctrain_data__unique(u, rows->n), ni = ctrain_data__unique(it, rows->n);
    for (size_t i = 0; i < rows->n; i++) {
        rows->v[i].user = ctrain_data__index_of(u, nu, rows->v[i].user) + 1;
        rows->v[i].item = ctrain_data__index_of(it, ni, rows->v[i].item) + 1;
    }
    free(u);
    free(it);
    *num_users = (int32_t)nu;
    *num_items = (int32_t)ni;
    return 0;
}

/* One counting pass, then drop rows whose user or item has fewer than min_count rows (the
 * rule of SASRec's and TiSASRec's preprocessing; not an iterative k-core). */
static int ctrain_data__filter(ctrain_data__rows_t *rows, int min_count)
{
    int32_t nu, ni;
    int rc = ctrain_data__reindex(rows, &nu, &ni);
    if (rc != 0)
        return rc;
    int64_t *cu = calloc((size_t)nu + 1, sizeof *cu);
    int64_t *ci = calloc((size_t)ni + 1, sizeof *ci);
    if (cu == NULL || ci == NULL) {
        free(cu);
        free(ci);
        return -ENOMEM;
    }
    for (size_t i = 0; i < rows->n; i++) {
        cu[rows->v[i].user]++;
        ci[rows->v[i].item]++;
    }
    size_t m = 0;
    for (size_t i = 0; i < rows->n; i++) {
        if (cu[rows->v[i].user] >= min_count && ci[rows->v[i].item] >= min_count)
            rows->v[m++] = rows->v[i];
    }
    rows->n = m;
    free(cu);
    free(ci);
    return 0;
}

static int ctrain_data__cmp_time_then_line(const void *a, const void *b)
{
    const ctrain_data__row_t *x = a, *y = b;
    if (x->time != y->time)
        return (x->time > y->time) - (x->time < y->time);
    return (x->line > y->line) - (x->line < y->line); /* stable: file order breaks ties */
}

void ctrain_data_free(ctrain_dataset_t *ds)
{
    free(ds->user_start);
    free(ds->items);
    free(ds->times);
    free(ds->time_scaled);
    free(ds->train_len);
    free(ds->valid_item);
    free(ds->test_item);
    free(ds->train_sorted);
    memset(ds, 0, sizeof *ds);
}

static int ctrain_data__cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* TiSASRec's per-user time scaling (docs/models.md §3.1): t' = round((t - min_u) / s_u) + 1
 * with s_u the smallest non-zero gap between consecutive timestamps (1 if none); Python's
 * round() rounds half to even, as rint() does in the default rounding mode. */
static void ctrain_data__scale_times(ctrain_dataset_t *ds)
{
    for (int32_t u = 1; u <= ds->num_users; u++) {
        int64_t s = ds->user_start[u], e = ds->user_start[u + 1];
        if (s == e)
            continue;
        int64_t tmin = ds->times[s], scale = 0;
        for (int64_t k = s + 1; k < e; k++) {
            int64_t gap = ds->times[k] - ds->times[k - 1];
            if (gap > 0 && (scale == 0 || gap < scale))
                scale = gap;
            if (ds->times[k] < tmin)
                tmin = ds->times[k];
        }
        if (scale == 0)
            scale = 1;
        for (int64_t k = s; k < e; k++)
            ds->time_scaled[k] = (int64_t)rint((double)(ds->times[k] - tmin) / (double)scale) + 1;
    }
}

/* Builds the split and the sorted train copies once the CSR arrays are filled. */
static int ctrain_data__make_split(ctrain_dataset_t *ds, int min_eval_len)
{
    free(ds->train_len);
    free(ds->valid_item);
    free(ds->test_item);
    free(ds->train_sorted);
    size_t nu = (size_t)ds->num_users + 1;
    ds->train_len = calloc(nu, sizeof *ds->train_len);
    ds->valid_item = calloc(nu, sizeof *ds->valid_item);
    ds->test_item = calloc(nu, sizeof *ds->test_item);
    ds->train_sorted = malloc(((size_t)ds->num_interactions + 1) * sizeof *ds->train_sorted);
    if (!ds->train_len || !ds->valid_item || !ds->test_item || !ds->train_sorted)
        return -ENOMEM;
    ds->num_eval_users = 0;
    for (int32_t u = 1; u <= ds->num_users; u++) {
        int64_t s = ds->user_start[u];
        int64_t n = ds->user_start[u + 1] - s;
        if (n >= min_eval_len && n >= 3) {
            ds->train_len[u] = (int32_t)(n - 2);
            ds->valid_item[u] = ds->items[s + n - 2];
            ds->test_item[u] = ds->items[s + n - 1];
            ds->num_eval_users++;
        } else {
            ds->train_len[u] = (int32_t)n;
        }
        memcpy(ds->train_sorted + s, ds->items + s, (size_t)ds->train_len[u] * sizeof(int32_t));
        qsort(ds->train_sorted + s, (size_t)ds->train_len[u], sizeof(int32_t),
              ctrain_data__cmp_i32);
    }
    return 0;
}

/* Fills ds from rows already numbered 1..num_users / 1..num_items: a stable counting sort by
 * user, then (with time) a stable sort by timestamp within each user. */
static int ctrain_data__build(ctrain_dataset_t *ds, ctrain_data__rows_t *rows, bool with_time,
                              int min_eval_len)
{
    size_t n = rows->n;
    ds->num_interactions = (int64_t)n;
    ds->user_start = calloc((size_t)ds->num_users + 2, sizeof *ds->user_start);
    ds->items = malloc((n + 1) * sizeof *ds->items);
    ctrain_data__row_t *sorted = malloc((n + 1) * sizeof *sorted);
    if (ds->user_start == NULL || ds->items == NULL || sorted == NULL) {
        free(sorted);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        ds->user_start[rows->v[i].user + 1]++;
    /* Each user's count sits in slot user + 1, so the prefix sum leaves user_start[u] = the
     * number of rows of users below u = the first slot of u. */
    for (int32_t u = 1; u <= ds->num_users + 1; u++)
        ds->user_start[u] += ds->user_start[u - 1];
    int64_t *fill = malloc(((size_t)ds->num_users + 2) * sizeof *fill);
    if (fill == NULL) {
        free(sorted);
        return -ENOMEM;
    }
    memcpy(fill, ds->user_start, ((size_t)ds->num_users + 2) * sizeof *fill);
    for (size_t i = 0; i < n; i++)
        sorted[fill[rows->v[i].user]++] = rows->v[i];
    free(fill);
    if (with_time) {
        for (int32_t u = 1; u <= ds->num_users; u++) {
            int64_t s = ds->user_start[u], e = ds->user_start[u + 1];
            qsort(sorted + s, (size_t)(e - s), sizeof *sorted, ctrain_data__cmp_time_then_line);
        }
        ds->times = malloc((n + 1) * sizeof *ds->times);
        if (ds->times == NULL) {
            free(sorted);
            return -ENOMEM;
        }
    }
    for (size_t i = 0; i < n; i++) {
        ds->items[i] = (int32_t)sorted[i].item;
        if (with_time)
            ds->times[i] = sorted[i].time;
    }
    free(sorted);
    return ctrain_data_finish(ds, min_eval_len);
}

int ctrain_data_finish(ctrain_dataset_t *ds, int min_eval_len)
{
    if (ds->times != NULL) {
        if (ds->time_scaled == NULL)
            ds->time_scaled = malloc(((size_t)ds->num_interactions + 1) * sizeof *ds->time_scaled);
        if (ds->time_scaled == NULL)
            return -ENOMEM;
        ctrain_data__scale_times(ds);
    }
    return ctrain_data__make_split(ds, min_eval_len);
}

int ctrain_data_load(ctrain_dataset_t *ds, const char *path, ctrain_data_format_t format,
                 const ctrain_data_opts_t *opts, ct_errbuf_t *eb)
{
    ctrain_data_opts_t o = CTRAIN_DATA_OPTS_DEFAULT;
    if (opts != NULL)
        o = *opts;
    memset(ds, 0, sizeof *ds);
    snprintf(ds->source, sizeof ds->source, "%s", path);

    ctrain_data__rows_t rows = {0};
    int rc = ctrain_data__read_rows(path, &format, &rows, eb);
    if (rc != 0)
        goto out;

    if (format == CTRAIN_DATA_SASREC) {
        /* Already re-indexed: keep the ids (published checkpoints depend on them). */
        int64_t mu = 0, mi = 0;
        for (size_t i = 0; i < rows.n; i++) {
            if (rows.v[i].user > mu)
                mu = rows.v[i].user;
            if (rows.v[i].item > mi)
                mi = rows.v[i].item;
        }
        ds->num_users = (int32_t)mu;
        ds->num_items = (int32_t)mi;
        rc = ctrain_data__build(ds, &rows, false, o.min_eval_len);
    } else {
        rc = ctrain_data__filter(&rows, o.min_count);
        if (rc == 0 && rows.n == 0) {
            rc = ct_errbuf_set(eb, CT_EFORMAT,
                               "%s: no interactions left after dropping users and items with "
                               "fewer than %d rows",
                               path, o.min_count);
            goto out;
        }
        if (rc == 0)
            rc = ctrain_data__reindex(&rows, &ds->num_users, &ds->num_items);
        if (rc == 0)
            rc = ctrain_data__build(ds, &rows, true, o.min_eval_len);
    }
    if (rc == -ENOMEM)
        ct_errbuf_set(eb, rc, "%s: out of memory building the dataset", path);
out:
    free(rows.v);
    if (rc != 0) {
        ctrain_data_free(ds);
        return rc;
    }
    return 0;
}

bool ctrain_data_in_train(const ctrain_dataset_t *ds, int32_t u, int32_t item)
{
    const int32_t *a = ds->train_sorted + ds->user_start[u];
    int32_t lo = 0, hi = ds->train_len[u];
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (a[mid] < item)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < ds->train_len[u] && a[lo] == item;
}

double ctrain_data_mean_train_len(const ctrain_dataset_t *ds)
{
    int64_t total = 0, users = 0;
    for (int32_t u = 1; u <= ds->num_users; u++) {
        if (ds->train_len[u] > 0) {
            total += ds->train_len[u];
            users++;
        }
    }
    return users ? (double)total / (double)users : 0.0;
}
