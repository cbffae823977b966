/*
 * ctrain_gpt2rec.c - the GPT-2 recommender of ctrain_gpt2rec.h: reading and splitting the ratings
 * and item texts, the keyed negatives, and the model family (its parameter table, the BPR pass of
 * a micro-batch, the item vectors evaluation scores with; in dynamic mode the LM's passes on the
 * items' texts through ctrain_lm.c). The passes run on the op table (ct_ops.h: BPR, the mean
 * pool, the projection, the row scatter), the same code on the CPU and CUDA backends.
 *
 * Not here: tokenizing the texts and the text cache (ctrain_gpt2rec_task.c), evaluation.
 */
#include "ctrain_gpt2rec.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_fs.h"
#include "ctrain_model_internal.h"

#define CTRAIN_GPT2REC__PURPOSE_NEG  270u
#define CTRAIN_GPT2REC__PURPOSE_INIT 271u
#define CTRAIN_GPT2REC__GROUPS       4 /* LM passes per set of items, by token count */

static const char *const ctrain_gpt2rec__genres[19] = {
    "unknown",     "Action", "Adventure", "Animation", "Children's", "Comedy",  "Crime",
    "Documentary", "Drama",  "Fantasy",   "Film-Noir", "Horror",     "Musical", "Mystery",
    "Romance",     "Sci-Fi", "Thriller",  "War",       "Western"};

/* ---- reading -----------------------------------------------------------------------------------
 */

static int ctrain_gpt2rec__slurp(const char *path, const char *flag, char **text, size_t *size,
                                 ct_errbuf_t *eb)
{
    *text = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return ct_errbuf_set(eb, -e, "%s %s: %s", flag, path, strerror(e));
    }
    *text = malloc((size_t)st.st_size + 1);
    int rc = *text ? ct_fs_read_full(fd, *text, (size_t)st.st_size, 0) : -ENOMEM;
    close(fd);
    if (rc != 0) {
        free(*text);
        *text = NULL;
        return ct_errbuf_set(eb, rc, "%s %s: %s", flag, path, ct_strerror(rc));
    }
    (*text)[st.st_size] = '\0';
    *size = (size_t)st.st_size;
    return 0;
}

/* An integer filling [s, s + n) exactly (surrounding blanks allowed, as Python's int()). */
static bool ctrain_gpt2rec__int(const char *s, size_t n, int64_t *out)
{
    char buf[32];
    while (n > 0 && (*s == ' ' || *s == '\t' || *s == '\r')) {
        s++;
        n--;
    }
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        n--;
    if (n == 0 || n >= sizeof buf)
        return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *out = v;
    return true;
}

typedef struct ctrain_gpt2rec__row {
    int64_t u, i, t, line;
} ctrain_gpt2rec__row_t;

static int ctrain_gpt2rec__cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int ctrain_gpt2rec__cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Sorted unique values of v (n) into *out, *m of them. */
static int ctrain_gpt2rec__unique(const int64_t *v, int64_t n, int64_t **out, int32_t *m)
{
    int64_t *s = malloc((size_t)n * sizeof *s);
    if (!s)
        return -ENOMEM;
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, ctrain_gpt2rec__cmp_i64);
    int64_t k = 0;
    for (int64_t j = 0; j < n; j++)
        if (k == 0 || s[k - 1] != s[j])
            s[k++] = s[j];
    *out = s;
    *m = (int32_t)k;
    return 0;
}

static int32_t ctrain_gpt2rec__index(const int64_t *sorted, int32_t n, int64_t v)
{
    int32_t lo = 0, hi = n;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (sorted[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && sorted[lo] == v ? lo : -1;
}

static int ctrain_gpt2rec__read_ratings(const char *path, ctrain_gpt2rec__row_t **rows, int64_t *n,
                                        ct_errbuf_t *eb)
{
    char *text = NULL;
    size_t size = 0;
    int rc = ctrain_gpt2rec__slurp(path, "--dataset", &text, &size, eb);
    if (rc != 0)
        return rc;
    size_t cap = 0;
    *rows = NULL;
    *n = 0;
    int64_t lineno = 0;
    for (size_t off = 0; off < size;) {
        char *line = text + off;
        char *nl = memchr(line, '\n', size - off);
        size_t len = nl ? (size_t)(nl - line) : size - off;
        off += len + (nl != NULL);
        lineno++;
        /* fields: "::"-separated when the line has "::", else blank-separated */
        const char *f[4];
        size_t fl[4];
        int nf = 0;
        bool blank = true;
        for (size_t j = 0; j < len; j++)
            if (line[j] != ' ' && line[j] != '\t' && line[j] != '\r')
                blank = false;
        if (blank)
            continue;
        line[len] = '\0';
        if (strstr(line, "::")) {
            for (const char *p = line; nf < 4;) {
                const char *q = strstr(p, "::");
                f[nf] = p;
                fl[nf++] = q ? (size_t)(q - p) : strlen(p);
                if (!q)
                    break;
                p = q + 2;
            }
        } else {
            for (const char *p = line; *p && nf < 4;) {
                while (*p == ' ' || *p == '\t' || *p == '\r')
                    p++;
                if (!*p)
                    break;
                const char *q = p;
                while (*q && *q != ' ' && *q != '\t' && *q != '\r')
                    q++;
                f[nf] = p;
                fl[nf++] = (size_t)(q - p);
                p = q;
            }
        }
        ctrain_gpt2rec__row_t r = {.line = lineno, .t = lineno};
        if (nf < 2 || !ctrain_gpt2rec__int(f[0], fl[0], &r.u) ||
            !ctrain_gpt2rec__int(f[1], fl[1], &r.i) ||
            (nf >= 4 && !ctrain_gpt2rec__int(f[3], fl[3], &r.t))) {
            rc = ct_errbuf_set(eb, CT_EFORMAT,
                               "--dataset %s:%lld: expected user, item[, rating, time], got "
                               "\"%.60s\"",
                               path, (long long)lineno, line);
            goto out;
        }
        if ((size_t)*n == cap) {
            cap = cap ? 2 * cap : 4096;
            ctrain_gpt2rec__row_t *g = realloc(*rows, cap * sizeof *g);
            if (!g) {
                rc = ct_errbuf_set(eb, -ENOMEM, "--dataset %s: out of memory", path);
                goto out;
            }
            *rows = g;
        }
        (*rows)[(*n)++] = r;
    }
    if (*n == 0)
        rc = ct_errbuf_set(eb, CT_EFORMAT, "--dataset %s: no ratings", path);
    else if (*n > INT32_MAX)
        rc = ct_errbuf_set(eb, CT_ERANGE_VALUE, "--dataset %s: more than %d ratings", path,
                           INT32_MAX);
out:
    free(text);
    if (rc != 0) {
        free(*rows);
        *rows = NULL;
    }
    return rc;
}

/* Appends the Latin-1 bytes s[0..n) as UTF-8 to buf (room checked by the caller: 2n). */
static size_t ctrain_gpt2rec__latin1(char *buf, const char *s, size_t n)
{
    size_t k = 0;
    for (size_t j = 0; j < n; j++) {
        unsigned char c = (unsigned char)s[j];
        if (c < 0x80) {
            buf[k++] = (char)c;
        } else {
            buf[k++] = (char)(0xC0 | (c >> 6));
            buf[k++] = (char)(0x80 | (c & 0x3F));
        }
    }
    return k;
}

static void ctrain_gpt2rec__strip(const char **s, size_t *n)
{
    while (*n > 0 && (**s == ' ' || **s == '\t' || **s == '\r' || **s == '\n' || **s == '\f' ||
                      **s == '\v')) {
        (*s)++;
        (*n)--;
    }
    while (*n > 0 && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t' || (*s)[*n - 1] == '\r' ||
                      (*s)[*n - 1] == '\n' || (*s)[*n - 1] == '\f' || (*s)[*n - 1] == '\v'))
        (*n)--;
}

/* The texts of the catalogue's items from path: d->text, text_off, text_len. */
static int ctrain_gpt2rec__read_text(ctrain_gpt2rec_data_t *d, const char *path, ct_errbuf_t *eb)
{
    char *src = NULL;
    size_t size = 0;
    int rc = ctrain_gpt2rec__slurp(path, "--item_text", &src, &size, eb);
    if (rc != 0)
        return rc;
    /* each item's text, Latin-1 widened, in a per-line buffer; the last line of an id wins */
    char **per = calloc((size_t)d->n_items, sizeof *per);
    int32_t *plen = calloc((size_t)d->n_items, sizeof *plen);
    char *tmp = malloc(2 * size + 64);
    if (!per || !plen || !tmp) {
        rc = ct_errbuf_set(eb, -ENOMEM, "--item_text %s: out of memory", path);
        goto out;
    }
    int64_t lineno = 0;
    for (size_t off = 0; off < size;) {
        char *line = src + off;
        char *nl = memchr(line, '\n', size - off);
        size_t len = nl ? (size_t)(nl - line) : size - off;
        off += len + (nl != NULL);
        lineno++;
        const char *chk = line;
        size_t cl = len;
        ctrain_gpt2rec__strip(&chk, &cl);
        if (cl == 0)
            continue;
        line[len] = '\0';
        int64_t id = 0;
        size_t k = 0;
        bool ok = false;
        char *dc = strstr(line, "::");
        int bars = 0;
        for (size_t j = 0; j < len; j++)
            bars += line[j] == '|';
        if (dc) { /* movies.dat: id::Title::Genre|Genre */
            char *t = dc + 2, *t2 = strstr(t, "::");
            if (t2 && ctrain_gpt2rec__int(line, (size_t)(dc - line), &id)) {
                const char *title = t, *gen = t2 + 2;
                size_t tl = (size_t)(t2 - t), gl = strcspn(gen, ":");
                const char *g3 = strstr(gen, "::");
                gl = g3 ? (size_t)(g3 - gen) : strlen(gen);
                ctrain_gpt2rec__strip(&title, &tl);
                ctrain_gpt2rec__strip(&gen, &gl);
                k = ctrain_gpt2rec__latin1(tmp, title, tl);
                memcpy(tmp + k, " | ", 3);
                k += 3;
                k += ctrain_gpt2rec__latin1(tmp + k, gen, gl);
                ok = true;
            }
        } else if (bars >= 19 + 1) { /* u.item: id|title|date|video date|url|19 genre flags */
            const char *fields[64];
            size_t fls[64];
            int nf = 0;
            for (const char *p = line; nf < 64;) {
                const char *q = strchr(p, '|');
                fields[nf] = p;
                fls[nf++] = q ? (size_t)(q - p) : strlen(p);
                if (!q)
                    break;
                p = q + 1;
            }
            if (nf >= 20 && nf < 64 && ctrain_gpt2rec__int(fields[0], fls[0], &id)) {
                const char *title = fields[1];
                size_t tl = fls[1];
                ctrain_gpt2rec__strip(&title, &tl);
                k = ctrain_gpt2rec__latin1(tmp, title, tl);
                memcpy(tmp + k, " | ", 3);
                k += 3;
                bool first = true;
                for (int g = 0; g < 19; g++) {
                    const char *fv = fields[nf - 19 + g];
                    size_t fvl = fls[nf - 19 + g];
                    ctrain_gpt2rec__strip(&fv, &fvl);
                    if (fvl == 1 && fv[0] == '1') {
                        if (!first)
                            tmp[k++] = '|';
                        first = false;
                        size_t gl = strlen(ctrain_gpt2rec__genres[g]);
                        memcpy(tmp + k, ctrain_gpt2rec__genres[g], gl);
                        k += gl;
                    }
                }
                ok = true;
            }
        } else { /* id<TAB>text */
            char *tab = strchr(line, '\t');
            if (tab && ctrain_gpt2rec__int(line, (size_t)(tab - line), &id)) {
                const char *t = tab + 1;
                size_t tl = strlen(t);
                ctrain_gpt2rec__strip(&t, &tl);
                k = ctrain_gpt2rec__latin1(tmp, t, tl);
                ok = true;
            }
        }
        if (!ok) {
            rc = ct_errbuf_set(eb, CT_EFORMAT,
                               "--item_text %s:%lld: expected u.item, movies.dat or "
                               "\"id<TAB>text\" fields, got \"%.60s\"",
                               path, (long long)lineno, line);
            goto out;
        }
        int32_t j = ctrain_gpt2rec__index(d->raw_item, d->n_items, id);
        if (j < 0)
            continue; /* not rated: not in the catalogue */
        free(per[j]);
        per[j] = malloc(k + 1);
        if (!per[j]) {
            rc = ct_errbuf_set(eb, -ENOMEM, "--item_text %s: out of memory", path);
            goto out;
        }
        memcpy(per[j], tmp, k);
        plen[j] = (int32_t)k;
    }
    size_t total = 0;
    for (int32_t j = 0; j < d->n_items; j++)
        total += per[j] ? (size_t)plen[j] : 32;
    d->text = malloc(total + 1);
    d->text_off = malloc((size_t)d->n_items * sizeof *d->text_off);
    d->text_len = malloc((size_t)d->n_items * sizeof *d->text_len);
    if (!d->text || !d->text_off || !d->text_len) {
        rc = ct_errbuf_set(eb, -ENOMEM, "--item_text %s: out of memory", path);
        goto out;
    }
    size_t at = 0;
    for (int32_t j = 0; j < d->n_items; j++) {
        d->text_off[j] = (int64_t)at;
        if (per[j]) {
            memcpy(d->text + at, per[j], (size_t)plen[j]);
            d->text_len[j] = plen[j];
        } else {
            d->missing_text++;
            d->text_len[j] = snprintf(d->text + at, 32, "item %lld", (long long)d->raw_item[j]);
        }
        at += (size_t)d->text_len[j];
    }
out:
    if (per)
        for (int32_t j = 0; j < d->n_items; j++)
            free(per[j]);
    free(per);
    free(plen);
    free(tmp);
    free(src);
    return rc;
}

int ctrain_gpt2rec_split_parse(const char *text, double f[3], ct_errbuf_t *eb)
{
    char *end;
    const char *p = text;
    for (int k = 0; k < 3; k++) {
        errno = 0;
        f[k] = strtod(p, &end);
        if (end == p || errno != 0 || (k < 2 ? *end != ',' : *end != '\0'))
            goto bad;
        p = end + 1;
    }
    if (f[0] <= 0 || f[1] < 0 || f[2] < 0 || fabs(f[0] + f[1] + f[2] - 1.0) >= 1e-6)
        goto bad;
    return 0;
bad:
    return ct_errbuf_set(eb, CT_EPARSE,
                         "--split %.60s: expected three fractions summing to 1, e.g. 0.8,0.1,0.1",
                         text);
}

static int ctrain_gpt2rec__cmp_rows(const void *a, const void *b)
{
    const ctrain_gpt2rec__row_t *x = a, *y = b;
    if (x->u != y->u)
        return (x->u > y->u) - (x->u < y->u);
    if (x->t != y->t)
        return (x->t > y->t) - (x->t < y->t);
    return (x->line > y->line) - (x->line < y->line);
}

int ctrain_gpt2rec_data_load(ctrain_gpt2rec_data_t *d, const char *ratings, const char *text_path,
                             const double fr[3], ct_errbuf_t *eb)
{
    memset(d, 0, sizeof *d);
    snprintf(d->source, sizeof d->source, "%s", ratings);
    ctrain_gpt2rec__row_t *rows = NULL;
    int64_t n = 0;
    int rc = ctrain_gpt2rec__read_ratings(ratings, &rows, &n, eb);
    if (rc != 0)
        return rc;
    int64_t *tmp = malloc((size_t)n * sizeof *tmp);
    int8_t *part = malloc((size_t)n);
    ctrain_gpt2rec__row_t *sorted = malloc((size_t)n * sizeof *sorted);
    if (!tmp || !part || !sorted) {
        rc = ct_errbuf_set(eb, -ENOMEM, "--dataset %s: out of memory", ratings);
        goto out;
    }
    for (int64_t j = 0; j < n; j++)
        tmp[j] = rows[j].u;
    if ((rc = ctrain_gpt2rec__unique(tmp, n, &d->raw_user, &d->n_users)) != 0)
        goto oom;
    for (int64_t j = 0; j < n; j++)
        tmp[j] = rows[j].i;
    if ((rc = ctrain_gpt2rec__unique(tmp, n, &d->raw_item, &d->n_items)) != 0)
        goto oom;
    for (int64_t j = 0; j < n; j++) {
        rows[j].u = ctrain_gpt2rec__index(d->raw_user, d->n_users, rows[j].u);
        rows[j].i = ctrain_gpt2rec__index(d->raw_item, d->n_items, rows[j].i);
    }
    d->n_inter = n;
    /* the split: each user's rows in time order (file order among equal times) */
    memcpy(sorted, rows, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, ctrain_gpt2rec__cmp_rows);
    for (int64_t a = 0; a < n;) {
        int64_t b = a;
        while (b < n && sorted[b].u == sorted[a].u)
            b++;
        const int64_t m = b - a;
        int64_t ntr = (int64_t)nearbyint((double)m * fr[0]);
        if (ntr < 1)
            ntr = 1;
        int64_t nva = (int64_t)nearbyint((double)m * fr[1]);
        if (nva > m - ntr)
            nva = m - ntr;
        for (int64_t j = 0; j < m; j++)
            sorted[a + j].t = j < ntr ? 0 : j < ntr + nva ? 1 : 2; /* t reused: the part */
        a = b;
    }
    /* back to file order: rows[] holds the rows in file order, line numbers increasing */
    {
        for (int64_t j = 0; j < n; j++) {
            int64_t lo = 0, hi = n;
            while (lo < hi) {
                int64_t mid = lo + (hi - lo) / 2;
                if (rows[mid].line < sorted[j].line)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            part[lo] = (int8_t)sorted[j].t;
        }
    }
    d->tr_off = calloc((size_t)d->n_users + 1, sizeof *d->tr_off);
    d->va_off = calloc((size_t)d->n_users + 1, sizeof *d->va_off);
    d->te_off = calloc((size_t)d->n_users + 1, sizeof *d->te_off);
    d->train_count = calloc((size_t)d->n_items, sizeof *d->train_count);
    if (!d->tr_off || !d->va_off || !d->te_off || !d->train_count)
        goto oom;
    for (int64_t j = 0; j < n; j++) {
        int64_t *off = part[j] == 0 ? d->tr_off : part[j] == 1 ? d->va_off : d->te_off;
        off[rows[j].u + 1]++;
        d->n_train += part[j] == 0;
        d->n_valid += part[j] == 1;
        d->n_test += part[j] == 2;
    }
    for (int32_t u = 0; u < d->n_users; u++) {
        d->tr_off[u + 1] += d->tr_off[u];
        d->va_off[u + 1] += d->va_off[u];
        d->te_off[u + 1] += d->te_off[u];
    }
    d->tr_items = malloc((size_t)(d->n_train ? d->n_train : 1) * sizeof *d->tr_items);
    d->va_items = malloc((size_t)(d->n_valid ? d->n_valid : 1) * sizeof *d->va_items);
    d->te_items = malloc((size_t)(d->n_test ? d->n_test : 1) * sizeof *d->te_items);
    d->tr_u = malloc((size_t)(d->n_train ? d->n_train : 1) * sizeof *d->tr_u);
    d->tr_i = malloc((size_t)(d->n_train ? d->n_train : 1) * sizeof *d->tr_i);
    int64_t *fill = calloc(3 * ((size_t)d->n_users + 1), sizeof *fill);
    if (!d->tr_items || !d->va_items || !d->te_items || !d->tr_u || !d->tr_i || !fill) {
        free(fill);
        goto oom;
    }
    int64_t k = 0;
    for (int64_t j = 0; j < n; j++) {
        const int32_t u = (int32_t)rows[j].u, i = (int32_t)rows[j].i;
        if (part[j] == 0) {
            d->tr_u[k] = u;
            d->tr_i[k++] = i;
            d->tr_items[d->tr_off[u] + fill[u]++] = i;
            d->train_count[i]++;
        } else if (part[j] == 1) {
            d->va_items[d->va_off[u] + fill[d->n_users + 1 + u]++] = i;
        } else {
            d->te_items[d->te_off[u] + fill[2 * (d->n_users + 1) + u]++] = i;
        }
    }
    free(fill);
    /* sort each user's lists; targets made unique (the reference's sorted(set(...))) */
    int64_t *offs[3] = {d->tr_off, d->va_off, d->te_off};
    int32_t *items[3] = {d->tr_items, d->va_items, d->te_items};
    for (int s = 0; s < 3; s++)
        for (int32_t u = 0; u < d->n_users; u++)
            qsort(items[s] + offs[s][u], (size_t)(offs[s][u + 1] - offs[s][u]), sizeof(int32_t),
                  ctrain_gpt2rec__cmp_i32);
    for (int s = 1; s < 3; s++) {
        int64_t w = 0, start = 0;
        for (int32_t u = 0; u < d->n_users; u++) {
            int64_t a = start, b = offs[s][u + 1];
            start = b;
            offs[s][u] = w;
            for (int64_t j = a; j < b; j++)
                if (j == a || items[s][j] != items[s][j - 1])
                    items[s][w++] = items[s][j];
        }
        offs[s][d->n_users] = w;
    }
    if (d->n_train == 0) {
        rc = ct_errbuf_set(eb, CT_EFORMAT, "--dataset %s: no training interactions", ratings);
        goto out;
    }
    if (text_path)
        rc = ctrain_gpt2rec__read_text(d, text_path, eb);
    goto out;
oom:
    rc = ct_errbuf_set(eb, -ENOMEM, "--dataset %s: out of memory", ratings);
out:
    free(rows);
    free(tmp);
    free(part);
    free(sorted);
    if (rc != 0)
        ctrain_gpt2rec_data_free(d);
    return rc;
}

void ctrain_gpt2rec_data_free(ctrain_gpt2rec_data_t *d)
{
    free(d->raw_user);
    free(d->raw_item);
    free(d->tr_u);
    free(d->tr_i);
    free(d->tr_off);
    free(d->va_off);
    free(d->te_off);
    free(d->tr_items);
    free(d->va_items);
    free(d->te_items);
    free(d->train_count);
    free(d->text);
    free(d->text_off);
    free(d->text_len);
    memset(d, 0, sizeof *d);
}

bool ctrain_gpt2rec_in_train(const ctrain_gpt2rec_data_t *d, int32_t u, int32_t i)
{
    int64_t lo = d->tr_off[u], hi = d->tr_off[u + 1];
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (d->tr_items[mid] < i)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < d->tr_off[u + 1] && d->tr_items[lo] == i;
}

int32_t ctrain_gpt2rec_negative(const ctrain_gpt2rec_data_t *d, int32_t u, uint64_t seed,
                                uint64_t key)
{
    ct_rng_t r;
    ct_rng_init(&r, seed, CT_RNG_STREAM(CTRAIN_GPT2REC__PURPOSE_NEG, key), 0);
    int32_t n = (int32_t)ct_rng_below(&r, (uint64_t)d->n_items);
    for (int k = 0; k < 5 && ctrain_gpt2rec_in_train(d, u, n); k++)
        n = (int32_t)ct_rng_below(&r, (uint64_t)d->n_items);
    return n;
}

/* ---- the model -----------------------------------------------------------------------------
 * Every pass runs on the op table, so one code path serves the CPU and the CUDA backends; on the
 * CPU it computes what the loops it replaced computed, bit for bit. A micro-batch's indices are
 * built on the host in ix and copied to the backend (d_ix) once: */

/* ix's sections, for max_batch rows mb and max_u pass items mu */
#define CTRAIN_GPT2REC__IX_IDX(mb)      0                   /* (mb, CT_BPR_IDX) */
#define CTRAIN_GPT2REC__IX_ITEMS(mb)    ((size_t)5 * (mb))  /* (2 mb) p0, n0, p1, n1, ... */
#define CTRAIN_GPT2REC__IX_USERS(mb)    ((size_t)7 * (mb))  /* (mb) */
#define CTRAIN_GPT2REC__IX_PROJ(mb)     ((size_t)8 * (mb))  /* (2 mb) the items' rows of pu */
#define CTRAIN_GPT2REC__IX_UNIQ(mb)     ((size_t)10 * (mb)) /* (mu) the pass's items */
#define CTRAIN_GPT2REC__IX_LEN(mb, mu)  ((size_t)10 * (mb) + (mu)) /* (mu) their token counts */
#define CTRAIN_GPT2REC__IX_SIZE(mb, mu) ((size_t)10 * (mb) + 2 * (size_t)(mu))

typedef struct ctrain_gpt2rec__impl {
    /* backend memory */
    float *text;      /* (n_items, T) the cached embeddings, or dynamic mode's of the last
                         ctrain_gpt2rec_item_vectors; NULL before either */
    float *vout;      /* (n_items, D) ctrain_gpt2rec_item_vectors' result before its copy out */
    float *du, *dvpn; /* (max_batch, D), (2 max_batch, D) the rows' gradients (bpr_loss) */
    float *loss;      /* (1) */
    int32_t *d_ix;    /* ix's copy */
    /* host memory */
    int32_t *ix;      /* CTRAIN_GPT2REC__IX_SIZE ints, the sections above */
    float *user_host; /* (n_users, D) ctrain_gpt2rec_user_table's copy off a device */
    /* with a text side: the distinct items of a pass */
    int max_u;    /* distinct items one pass takes: min(2 * max_batch, n_items); 0 without */
    int32_t *map; /* (n_items) host: item -> its index among the pass's items, -1 */
    float *txt;   /* (max_u, T) backend: the pass's items' texts */
    float *pu;    /* (max_u, D) backend: their projections */
    float *dpu;   /* (max_u, D) backend: and the gradient */
    /* dynamic mode */
    ctrain_lm_t *lm;
    size_t frozen_floats;
    int32_t *rows;      /* (max_u * L) host: the token ids of a pass */
    int32_t *order;     /* (max_u) host: ctrain_gpt2rec__by_length's result */
    int32_t *len_count; /* (L + 2) host */
    float *dh;          /* (max_u * L * T) backend */
    float *dtxt;        /* (max_u, T) backend: the gradient of the pass's texts */
} ctrain_gpt2rec__impl_t;

static const ctrain_gpt2rec_spec_t *ctrain_gpt2rec__spec(const ctrain_model_t *m)
{
    return m->cfg.ext;
}

ctrain_lm_t *ctrain_gpt2rec_lm(ctrain_model_t *m)
{
    ctrain_gpt2rec__impl_t *im = m->impl;
    if (!im->lm)
        return NULL;
    im->lm->params_mem = m->params_mem;
    im->lm->grads_mem = m->grads_mem;
    return im->lm;
}

/* The token counts of items[0..n) into ix's LEN section and its backend copy; returns the copy. */
static const int32_t *ctrain_gpt2rec__lens(ctrain_model_t *m, const int32_t *items, int n)
{
    const ctrain_gpt2rec_spec_t *s = ctrain_gpt2rec__spec(m);
    ctrain_gpt2rec__impl_t *im = m->impl;
    const size_t off = CTRAIN_GPT2REC__IX_LEN(m->max_batch, im->max_u);
    for (int k = 0; k < n; k++)
        im->ix[off + k] = s->tok_len[items[k]];
    m->ops->copy(m->ops, im->d_ix + off, im->ix + off, (size_t)n * sizeof(int32_t), CT_COPY_H2D);
    return im->d_ix + off;
}

/* Dynamic mode: the LM on the texts of items[0..n) (host; n <= max_u, their token counts in
 * d_len, backend) into out (n, T, backend), the mean of the final hidden states over each item's
 * tokens; with dout, the backward pass from d loss / d out (gradients added to the LM's; the
 * forward runs again inside, as the LM's backward starts from its own forward). The items run in
 * CTRAIN_GPT2REC__GROUPS consecutive groups, each padded only to its own longest text: with the
 * items in order of token count (a training pass's are, see ctrain_gpt2rec__by_length) little
 * of the work is padding, as in the reference's text(). */
static int ctrain_gpt2rec__lm_pass(ctrain_model_t *m, const int32_t *items, const int32_t *d_len,
                                   int n, float *out, const float *dout)
{
    const ctrain_gpt2rec_spec_t *s = ctrain_gpt2rec__spec(m);
    ctrain_gpt2rec__impl_t *im = m->impl;
    ct_ops_t *o = m->ops;
    const int L = s->text_len, T = s->text_dim;
    ctrain_lm_t *lm = ctrain_gpt2rec_lm(m);
    const int per = (n + CTRAIN_GPT2REC__GROUPS - 1) / CTRAIN_GPT2REC__GROUPS;
    for (int g0 = 0; g0 < n; g0 += per) {
        const int gn = n - g0 < per ? n - g0 : per;
        const int32_t *gi = items + g0;
        int Lc = 1;
        for (int k = 0; k < gn; k++)
            Lc = s->tok_len[gi[k]] > Lc ? s->tok_len[gi[k]] : Lc;
        for (int k = 0; k < gn; k++)
            memcpy(im->rows + (size_t)k * Lc, s->tokens + (size_t)gi[k] * L,
                   (size_t)Lc * sizeof *im->rows);
        ctrain_lm_batch_t b = {.B = gn, .L = Lc, .ids = im->rows};
        ct_errbuf_t eb;
        float unused = 0.0f;
        int rc;
        if (dout) {
            o->mean_pool_backward(o, im->dh, dout + (size_t)g0 * T, d_len + g0, gn, Lc, T);
            if ((rc = ctrain_lm_backward_hidden(lm, &b, im->dh, &eb)) != 0)
                return rc;
            continue;
        }
        if ((rc = ctrain_lm_forward_backward(lm, &b, 1.0f, false, &unused, &eb)) != 0)
            return rc;
        o->mean_pool_forward(o, out + (size_t)g0 * T, ctrain_lm_hidden(lm), d_len + g0, gn, Lc, T);
    }
    return 0;
}

/* Dynamic mode: a pass's distinct items uniq[0..n) reordered by token count (a stable counting
 * sort: deterministic); returns to (n), to[old index] = new index. im->map must be all -1. */
static const int32_t *ctrain_gpt2rec__by_length(ctrain_model_t *m, int32_t *uniq, int n)
{
    const ctrain_gpt2rec_spec_t *s = ctrain_gpt2rec__spec(m);
    ctrain_gpt2rec__impl_t *im = m->impl;
    const int L = s->text_len;
    int32_t *cnt = im->len_count, *to = im->order; /* to[old index] = new index */
    for (int j = 0; j <= L + 1; j++)
        cnt[j] = 0;
    for (int k = 0; k < n; k++)
        cnt[s->tok_len[uniq[k]] + 1]++;
    for (int j = 1; j <= L + 1; j++)
        cnt[j] += cnt[j - 1];
    for (int k = 0; k < n; k++)
        to[k] = cnt[s->tok_len[uniq[k]]]++;
    for (int k = 0; k < n; k++) /* uniq's new order, through the map's slots */
        im->map[to[k]] = uniq[k];
    for (int k = 0; k < n; k++) {
        uniq[k] = im->map[k];
        im->map[k] = -1;
    }
    return to;
}

static int ctrain_gpt2rec__forward_backward(ctrain_model_t *m, const ctrain_model_batch_t *b,
                                            float count, uint64_t seed, int64_t step, float *loss)
{
    (void)seed, (void)step; /* no dropout */
    const ctrain_gpt2rec_spec_t *s = ctrain_gpt2rec__spec(m);
    ctrain_gpt2rec__impl_t *im = m->impl;
    ct_ops_t *o = m->ops;
    const int D = s->dim, T = s->text_dim, B = b->B, mb = m->max_batch;
    const bool dyn = im->lm != NULL;
    if (T > 0 && !dyn && !im->text)
        return -EINVAL;
    if (B < 0 || B > mb)
        return -EINVAL;
    for (int r = 0; r < B; r++)
        if (b->seq[r] < 0 || b->seq[r] >= s->n_users || b->pos[r] < 0 || b->pos[r] >= s->n_items ||
            b->neg[r] < 0 || b->neg[r] >= s->n_items)
            return -EINVAL;
    int32_t *idx = im->ix + CTRAIN_GPT2REC__IX_IDX(mb),
            *items = im->ix + CTRAIN_GPT2REC__IX_ITEMS(mb);
    int32_t *users = im->ix + CTRAIN_GPT2REC__IX_USERS(mb),
            *prow = im->ix + CTRAIN_GPT2REC__IX_PROJ(mb);
    int32_t *uniq = im->ix + CTRAIN_GPT2REC__IX_UNIQ(mb);
    int n_u = 0;
    for (int r = 0; r < B; r++) {
        const int32_t two[2] = {b->pos[r], b->neg[r]};
        int32_t rows2[2] = {0, 0};
        for (int k = 0; T > 0 && k < 2; k++) { /* the batch's distinct items, in first-seen order */
            if (im->map[two[k]] < 0) {
                im->map[two[k]] = n_u;
                uniq[n_u++] = two[k];
            }
            rows2[k] = im->map[two[k]];
        }
        int32_t *x5 = idx + (size_t)r * CT_BPR_IDX;
        x5[0] = b->seq[r], x5[1] = two[0], x5[2] = two[1], x5[3] = rows2[0], x5[4] = rows2[1];
        items[2 * r] = two[0], items[2 * r + 1] = two[1];
        prow[2 * r] = rows2[0], prow[2 * r + 1] = rows2[1];
        users[r] = b->seq[r];
    }
    for (int k = 0; k < n_u; k++)
        im->map[uniq[k]] = -1;
    if (dyn) { /* the LM's groups by token count: the items in that order, the rows renumbered */
        const int32_t *to = ctrain_gpt2rec__by_length(m, uniq, n_u);
        for (int r = 0; r < B; r++) {
            int32_t *x5 = idx + (size_t)r * CT_BPR_IDX;
            x5[3] = to[x5[3]], x5[4] = to[x5[4]];
            prow[2 * r] = x5[3], prow[2 * r + 1] = x5[4];
        }
    }
    o->copy(o, im->d_ix, im->ix,
            CTRAIN_GPT2REC__IX_UNIQ(mb) * sizeof(int32_t) + n_u * sizeof(int32_t), CT_COPY_H2D);
    const int32_t *d_uniq = im->d_ix + CTRAIN_GPT2REC__IX_UNIQ(mb);
    int rc = 0;
    const float *W = NULL, *bias = NULL;
    const int32_t *d_len = T > 0 && dyn ? ctrain_gpt2rec__lens(m, uniq, n_u) : NULL;
    if (T > 0) {
        /* the batch's distinct items: their texts (the cache's, or the LM's now) projected */
        if (dyn) {
            if ((rc = ctrain_gpt2rec__lm_pass(m, uniq, d_len, n_u, im->txt, NULL)) != 0)
                return rc;
        } else {
            o->lm_embed_forward(o, im->txt, im->text, NULL, d_uniq, NULL, n_u, T);
        }
        W = m->params_mem + m->params[2].offset;
        bias = m->params_mem + m->params[3].offset;
        o->linear_forward(o, im->pu, im->txt, W, bias, n_u, T, D);
        o->zero(o, im->dpu, (size_t)n_u * D * sizeof *im->dpu);
    }
    const float *U = m->params_mem + m->params[0].offset, *I = m->params_mem + m->params[1].offset;
    o->bpr_loss(o, im->loss, im->du, im->dvpn, U, I, T > 0 ? im->pu : NULL,
                im->d_ix + CTRAIN_GPT2REC__IX_IDX(mb), B, D, count, s->l2);
    /* the rows' gradients into the tables in row order, each row's positive before its negative:
     * per element the sums the per-row loops made */
    o->lm_embed_backward(o, m->grads_mem + m->params[1].offset, NULL, im->dvpn,
                         im->d_ix + CTRAIN_GPT2REC__IX_ITEMS(mb), NULL, 2 * B, D, -1);
    if (T > 0)
        o->lm_embed_backward(o, im->dpu, NULL, im->dvpn, im->d_ix + CTRAIN_GPT2REC__IX_PROJ(mb),
                             NULL, 2 * B, D, -1);
    o->lm_embed_backward(o, m->grads_mem + m->params[0].offset, NULL, im->du,
                         im->d_ix + CTRAIN_GPT2REC__IX_USERS(mb), NULL, B, D, -1);
    o->copy(o, loss, im->loss, sizeof *loss, CT_COPY_D2H);
    if (T > 0) {
        if (dyn)
            o->zero(o, im->dtxt, (size_t)n_u * T * sizeof *im->dtxt);
        o->linear_backward(o, dyn ? im->dtxt : NULL, m->grads_mem + m->params[2].offset,
                           m->grads_mem + m->params[3].offset, im->dpu, im->txt, W, n_u, T, D);
        if (dyn)
            rc = ctrain_gpt2rec__lm_pass(m, uniq, d_len, n_u, NULL, im->dtxt);
    }
    return rc;
}

static int ctrain_gpt2rec__features(ctrain_model_t *m, const int32_t *seq, const int64_t *tseq,
                                    int B, const float **feats, int *ldf)
{
    (void)m, (void)seq, (void)tseq, (void)B, (void)feats, (void)ldf;
    return -ENOTSUP; /* evaluated by the task over all items (ctrain_gpt2rec_item_vectors) */
}

static int ctrain_gpt2rec__logits(ctrain_model_t *m, float *pos_logits, float *neg_logits,
                                  int64_t n)
{
    (void)m, (void)pos_logits, (void)neg_logits, (void)n;
    return -EINVAL;
}

static void ctrain_gpt2rec__destroy(ctrain_model_t *m)
{
    ctrain_gpt2rec__impl_t *im = m->impl;
    if (!im)
        return;
    ct_ops_t *o = m->ops;
    o->sync(o);
    if (im->lm) {
        o->release(o, im->lm->frozen_mem);
        ctrain_lm_destroy(im->lm);
    }
    float *fbufs[] = {im->text, im->vout, im->du,  im->dvpn, im->loss,
                      im->txt,  im->pu,   im->dpu, im->dh,   im->dtxt};
    for (size_t k = 0; k < sizeof fbufs / sizeof fbufs[0]; k++)
        o->release(o, fbufs[k]);
    o->release(o, im->d_ix);
    free(im->ix);
    free(im->user_host);
    free(im->map);
    free(im->rows);
    free(im->order);
    free(im->len_count);
    free(im);
    m->impl = NULL;
}

static const ctrain_model_vtbl_t ctrain_gpt2rec__vt = {
    .forward_backward = ctrain_gpt2rec__forward_backward,
    .forward_features = ctrain_gpt2rec__features,
    .logits = ctrain_gpt2rec__logits,
    .destroy = ctrain_gpt2rec__destroy,
};

int ctrain_gpt2rec_set_text(ctrain_model_t *m, const float *text)
{
    const ctrain_gpt2rec_spec_t *s = ctrain_gpt2rec__spec(m);
    ctrain_gpt2rec__impl_t *im = m->impl;
    ct_ops_t *o = m->ops;
    if (s->text_dim == 0 || im->lm)
        return -EINVAL;
    const size_t n = (size_t)s->n_items * (size_t)s->text_dim * sizeof(float);
    if (!im->text && o->alloc(o, (void **)&im->text, n) != 0)
        return -ENOMEM;
    o->copy(o, im->text, text, n, CT_COPY_H2D);
    return o->sync(o);
}

int ctrain_gpt2rec_item_vectors(ctrain_model_t *m, float *out)
{
    const ctrain_gpt2rec_spec_t *s = ctrain_gpt2rec__spec(m);
    ctrain_gpt2rec__impl_t *im = m->impl;
    ct_ops_t *o = m->ops;
    const int T = s->text_dim, D = s->dim;
    const float *item = m->params_mem + m->params[1].offset;
    if (im->lm) {
        if (!im->text &&
            o->alloc(o, (void **)&im->text, (size_t)s->n_items * T * sizeof(float)) != 0)
            return -ENOMEM;
        int32_t *uniq = im->ix + CTRAIN_GPT2REC__IX_UNIQ(m->max_batch);
        for (int32_t i0 = 0; i0 < s->n_items; i0 += im->max_u) {
            const int n = s->n_items - i0 < im->max_u ? s->n_items - i0 : im->max_u;
            for (int k = 0; k < n; k++)
                uniq[k] = i0 + k;
            int rc = ctrain_gpt2rec__lm_pass(m, uniq, ctrain_gpt2rec__lens(m, uniq, n), n,
                                             im->text + (size_t)i0 * T, NULL);
            if (rc != 0)
                return rc;
        }
    }
    const size_t nbytes = (size_t)s->n_items * D * sizeof(float);
    if (T == 0) {
        o->copy(o, out, item, nbytes, CT_COPY_D2H);
        return o->sync(o);
    }
    if (!im->text)
        return -EINVAL;
    if (!im->vout && o->alloc(o, (void **)&im->vout, nbytes) != 0)
        return -ENOMEM;
    o->linear_forward(o, im->vout, im->text, m->params_mem + m->params[2].offset,
                      m->params_mem + m->params[3].offset, s->n_items, T, D);
    o->residual_forward(o, im->vout, item, im->vout, (int64_t)s->n_items * D);
    o->copy(o, out, im->vout, nbytes, CT_COPY_D2H);
    return o->sync(o);
}

const float *ctrain_gpt2rec_user_table(ctrain_model_t *m)
{
    const ctrain_gpt2rec_spec_t *s = ctrain_gpt2rec__spec(m);
    ctrain_gpt2rec__impl_t *im = m->impl;
    ct_ops_t *o = m->ops;
    const float *users = m->params_mem + m->params[0].offset;
    if (o->host_memory)
        return users;
    const size_t nbytes = (size_t)s->n_users * s->dim * sizeof(float);
    if (!im->user_host && !(im->user_host = malloc(nbytes)))
        return NULL;
    o->copy(o, im->user_host, users, nbytes, CT_COPY_D2H);
    return o->sync(o) == 0 ? im->user_host : NULL;
}

int ctrain_gpt2rec_init(ctrain_model_t *m, uint64_t seed)
{
    int rc = ctrain_model_init_params(m, seed); /* proj's U(+-1/sqrt(T)), Adam zeroed */
    if (rc != 0)
        return rc;
    ct_ops_t *o = m->ops;
    float *host = o->host_memory ? m->params_mem : m->host_mirror;
    for (int t = 0; t < 2; t++) {
        const ctrain_param_t *p = &m->params[t];
        float *w = host + p->offset;
        ct_rng_t r;
        ct_rng_init(&r, seed, CT_RNG_STREAM(CTRAIN_GPT2REC__PURPOSE_INIT, (uint64_t)t), 0);
        for (size_t j = 0; j < p->numel; j += 2) { /* Box-Muller, two normals per pair */
            double u1 = ((double)ct_rng_u32(&r) + 1.0) / 4294967296.0;
            double u2 = (double)ct_rng_u32(&r) / 4294967296.0;
            double rad = sqrt(-2.0 * log(u1));
            w[j] = (float)(0.1 * rad * cos(2.0 * M_PI * u2));
            if (j + 1 < p->numel)
                w[j + 1] = (float)(0.1 * rad * sin(2.0 * M_PI * u2));
        }
        if (!o->host_memory)
            o->copy(o, m->params_mem + p->offset, w, p->numel * sizeof(float), CT_COPY_H2D);
    }
    return o->sync(o);
}

/* Dynamic mode: the LM's tensors after the recommender's, its scratch. */
static int ctrain_gpt2rec__build_lm(ctrain_model_t *m, ctrain_gpt2rec__impl_t *im,
                                    const ctrain_gpt2rec_spec_t *s, ct_errbuf_t *eb)
{
    const int L = s->text_len, T = s->text_dim;
    if ((int64_t)im->max_u * L > INT32_MAX / 4)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "gpt2rec: %d items of %d tokens per pass",
                             im->max_u, L);
    int rc = ctrain_lm_create_shared(&im->lm, s->lm, m->ops, im->max_u * L, L, eb);
    if (rc != 0)
        return rc;
    ctrain_lm_t *lm = im->lm;
    if (!s->lm->tied && (rc = ctrain_lm_freeze(lm, "lm_head.", true, eb)) != 0)
        return rc;
    const size_t pl = strlen(s->lm->prefix);
    m->lr2_from = m->num_params;
    for (int i = 0; i < lm->n_tensors; i++) {
        const ctrain_lm_tensor_t *t = &lm->tensors[i];
        const size_t numel = (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1);
        if (lm->frozen[i]) { /* the LM head: never read (no targets) */
            lm->offset[i] = im->frozen_floats;
            im->frozen_floats += numel;
            continue;
        }
        char name[CTRAIN_PARAM_NAME_MAX];
        const char *local = strncmp(t->name, s->lm->prefix, pl) == 0 ? t->name + pl : t->name;
        const size_t ln = strlen(local);
        if (ln + 5 >= sizeof name)
            return ct_errbuf_set(eb, CT_ERANGE_VALUE, "gpt2rec: the LM tensor name %s is too long",
                                 t->name);
        memcpy(name, "gpt2.", 5);
        memcpy(name + 5, local, ln + 1);
        int64_t shape[3] = {t->shape[0], t->ndim == 2 ? t->shape[1] : 0, 0};
        ctrain_param_t *p = ctrain_model__param_add(m, name, t->ndim, shape, CTRAIN_INIT_ZEROS);
        if (!p)
            return ct_errbuf_set(eb, -ENOMEM, "out of memory for the model");
        if (i == 0 || m->lr2_from > p->offset)
            m->lr2_from = p->offset;
        lm->offset[i] = p->offset;
    }
    m->lr2_ratio = s->lm_lr_ratio;
    ct_ops_t *o = m->ops;
    if (im->frozen_floats > 0) {
        if (o->alloc(o, (void **)&lm->frozen_mem, im->frozen_floats * sizeof(float)) != 0)
            return ct_errbuf_set(eb, -ENOMEM, "out of memory for the model");
        o->zero(o, lm->frozen_mem, im->frozen_floats * sizeof(float));
    }
    const size_t u = (size_t)im->max_u;
    im->rows = malloc(u * L * sizeof *im->rows);
    im->order = malloc(u * sizeof *im->order);
    im->len_count = malloc(((size_t)L + 2) * sizeof *im->len_count);
    if (!im->rows || !im->order || !im->len_count ||
        o->alloc(o, (void **)&im->dh, u * L * T * sizeof(float)) != 0 ||
        o->alloc(o, (void **)&im->dtxt, u * T * sizeof(float)) != 0)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for the model");
    return 0;
}

static int ctrain_gpt2rec__build(ctrain_model_t *m, ct_errbuf_t *eb)
{
    const ctrain_gpt2rec_spec_t *s = m->cfg.ext;
    ctrain_gpt2rec__impl_t *im = calloc(1, sizeof *im);
    if (!im)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for the model");
    m->impl = im;
    m->vt = &ctrain_gpt2rec__vt;
    ct_ops_t *o = m->ops;
    int64_t us[3] = {s->n_users, s->dim, 0}, is[3] = {s->n_items, s->dim, 0};
    if (!ctrain_model__param_add(m, "user.weight", 2, us, CTRAIN_INIT_ZEROS) ||
        !ctrain_model__param_add(m, "item.weight", 2, is, CTRAIN_INIT_ZEROS))
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for the model");
    if (s->text_dim > 0) {
        int64_t ws[3] = {s->dim, s->text_dim, 0}, bs[3] = {s->dim, 0, 0};
        ctrain_param_t *w =
            ctrain_model__param_add(m, "proj.weight", 2, ws, CTRAIN_INIT_FANIN_UNIFORM);
        if (w)
            w->fan_in = s->text_dim;
        ctrain_param_t *b =
            w ? ctrain_model__param_add(m, "proj.bias", 1, bs, CTRAIN_INIT_FANIN_UNIFORM) : NULL;
        if (!b)
            return ct_errbuf_set(eb, -ENOMEM, "out of memory for the model");
        b->fan_in = s->text_dim;
        im->max_u = 2 * m->max_batch < s->n_items ? 2 * m->max_batch : s->n_items;
    }
    const size_t mb = (size_t)m->max_batch, u = (size_t)im->max_u, D = (size_t)s->dim;
    const size_t nix = CTRAIN_GPT2REC__IX_SIZE(mb, u);
    im->ix = calloc(nix, sizeof *im->ix);
    if (!im->ix || o->alloc(o, (void **)&im->d_ix, nix * sizeof(int32_t)) != 0 ||
        o->alloc(o, (void **)&im->du, mb * D * sizeof(float)) != 0 ||
        o->alloc(o, (void **)&im->dvpn, 2 * mb * D * sizeof(float)) != 0 ||
        o->alloc(o, (void **)&im->loss, sizeof(float)) != 0)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for the model");
    if (s->text_dim == 0)
        return 0;
    im->map = malloc((size_t)s->n_items * sizeof *im->map);
    if (!im->map || o->alloc(o, (void **)&im->txt, u * s->text_dim * sizeof(float)) != 0 ||
        o->alloc(o, (void **)&im->pu, u * D * sizeof(float)) != 0 ||
        o->alloc(o, (void **)&im->dpu, u * D * sizeof(float)) != 0)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for the model");
    for (int32_t i = 0; i < s->n_items; i++)
        im->map[i] = -1;
    return s->lm ? ctrain_gpt2rec__build_lm(m, im, s, eb) : 0;
}

static int ctrain_gpt2rec__check_backend(const ctrain_model_cfg_t *mc, const ct_ops_t *ops,
                                         ct_errbuf_t *eb)
{
    (void)mc, (void)ops, (void)eb; /* every pass runs on the op table */
    return 0;
}

static int ctrain_gpt2rec__check_cfg(const ctrain_model_cfg_t *mc, ct_errbuf_t *eb)
{
    const ctrain_gpt2rec_spec_t *s = mc->ext;
    if (s == NULL)
        return ct_errbuf_set(eb, -EINVAL, "gpt2rec: no configuration");
    if (s->n_users < 1 || s->n_items < 1 || s->dim < 1 || s->text_dim < 0)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "gpt2rec: %d users, %d items, width %d",
                             s->n_users, s->n_items, s->dim);
    return 0;
}

const ctrain_family_t ctrain_gpt2rec_family = {
    .name = "gpt2rec",
    .title = "GPT2Rec",
    .kind = CTRAIN_MODEL_GPT2REC,
    .uses_times = false,
    .min_eval_len = 0,
    .eval_excludes_target = false,
    .layout = CTRAIN_LAYOUT_PRE_LN,
    .layouts = 1u << CTRAIN_LAYOUT_PRE_LN,
    .maxlen = 1,
    .num_epochs = 20,
    .eval_every = 1, /* the reference evaluates after every epoch */
    .l2_emb = 1e-4,
    .has_time_span = false,
    .build = ctrain_gpt2rec__build,
    .check_backend = ctrain_gpt2rec__check_backend,
    .check_cfg = ctrain_gpt2rec__check_cfg,
    .takes_mhc = false,
    .own_weights = false,
    .batch_size = 2048,
    .adam_beta2 = 0.999,
    .state_dict_hint = "check --embed_dim, --lm_dir, --text_mode and the dataset; a checkpoint of "
                       "gpt2rec_ddp.py loads after examples/convert_pytorch_checkpoint.py",
};
