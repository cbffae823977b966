/*
 * ct_st_read.c - the safetensors reader, which treats every file as hostile: each number is
 * checked before it is used, a byte range is trusted only after the ranges are known to tile
 * the data region, and messages quoting the file are kept to one printable line. A header
 * that carries a checksum (ctrun_header_crc32) is checked against it before anything in it is
 * believed. Tensors are copied into the caller's buffers (never used in place, so alignment in
 * the file does not matter), their CRCs checked on the way. JSON through jansson, CRC-32
 * through zlib.
 *
 * Not here: writing (ct_st_write.c), checkpoint directories (ct_ckpt.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "ct_fs.h"
#include "ct_worker_internal.h"
#include "ctworker.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data are little-endian; this code copies them without conversion"
#endif

struct ct_st_file {
    int fd;
    uint64_t file_size;
    uint64_t data_start; /* 8 + header length */
    uint64_t data_len;
    json_t *root; /* owns the names and metadata strings */
    json_t *meta; /* __metadata__, or NULL */
    bool ours;    /* written by ctrun: CRCs are mandatory */
    bool header_crc; /* it carried a header checksum, which matched */
    size_t n;
    ct_st_tensor_t *t;                /* (n) by offset */
    const ct_st_tensor_t **by_name;   /* (n) sorted by name */
    size_t *view_of;                  /* (n) scratch of ct_st_read: view index + 1, or 0 */
    size_t n_meta;
    const char **meta_kv;             /* (2 * n_meta) key, value, key, value, ... */
    char label[256];
};

__attribute__((format(printf, 4, 5))) static int ct_st_read__err(const ct_st_file_t *f,
                                                            ct_errbuf_t *eb, int code,
                                                            const char *fmt, ...)
{
    char text[CT_ERRBUF_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    /* The text quotes the file (names, jansson's excerpt near a JSON error), which may hold
     * control characters; the message must stay one printable line. */
    for (char *p = text; *p != '\0'; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7F)
            *p = '?';
    return ct_errbuf_set(eb, code, "%s: %s", f->label, text);
}

static int ct_st_read__cmp_offset(const void *a, const void *b)
{
    const ct_st_tensor_t *x = a, *y = b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes)
        return x->nbytes < y->nbytes ? -1 : 1;
    return 0;
}

static int ct_st_read__cmp_name(const void *a, const void *b)
{
    const ct_st_tensor_t *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

static int ct_st_read__parse_hex32(const char *s, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < 8; i++) {
        char c = s[i];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (unsigned)(c - 'A' + 10);
        else
            return -1;
        v = v << 4 | d;
    }
    if (s[8] != '\0')
        return -1;
    *out = v;
    return 0;
}

/* The header checksum, when __metadata__ has one: checked first, so that a damaged header is
 * reported as such (CT_ECRC) rather than by whatever its damage breaks further on. */
static int ct_st_read__check_header_crc(ct_st_file_t *f, const char *hdr, size_t hlen,
                                        ct_errbuf_t *eb)
{
    json_t *v = json_is_object(f->meta) ? json_object_get(f->meta, CT__ST_HEADER_CRC_KEY) : NULL;
    if (v == NULL)
        return 0;
    uint32_t want, got;
    size_t at;
    /* Lowercase only, as written: the value is outside what it covers, so it has one
     * spelling, and a changed letter case is damage too. */
    const char *hex = json_is_string(v) ? json_string_value(v) : "";
    if (strspn(hex, "0123456789abcdef") != 8 || ct_st_read__parse_hex32(hex, &want) != 0)
        return ct_st_read__err(f, eb, CT_EFORMAT, "__metadata__ %s is not 8 lowercase hex digits",
                          CT__ST_HEADER_CRC_KEY);
    if (ct__st_header_crc(hdr, hlen, &at, &got) != 0 || memcmp(hdr + at, hex, 8) != 0)
        return ct_st_read__err(f, eb, CT_ECRC,
                          "header checksum: %s is not found exactly once as a key with an "
                          "8-character string value (damaged header)",
                          CT__ST_HEADER_CRC_KEY);
    if (got != want)
        return ct_st_read__err(f, eb, CT_ECRC,
                          "header CRC32 mismatch (__metadata__ says %08x, the header gives %08x): "
                          "the metadata or the tensor table is damaged",
                          want, got);
    f->header_crc = true;
    return 0;
}

/* One tensor entry of the header into t (offsets still relative to the data region). */
static int ct_st_read__parse_entry(ct_st_file_t *f, const char *name, json_t *e, ct_st_tensor_t *t,
                           ct_errbuf_t *eb)
{
    t->name = name;
    if (!json_is_object(e))
        return ct_st_read__err(f, eb, CT_EFORMAT, "tensor \"%.64s\": entry is not a JSON object",
                               name);
    json_t *dt = json_object_get(e, "dtype");
    json_t *shape = json_object_get(e, "shape");
    json_t *offs = json_object_get(e, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(shape) || !json_is_array(offs))
        return ct_st_read__err(f, eb, CT_EFORMAT,
                          "tensor \"%.64s\": needs \"dtype\" (string), \"shape\" and "
                          "\"data_offsets\" (arrays)",
                          name);
    if (ct_dtype_parse(json_string_value(dt), &t->dtype) != 0)
        return ct_st_read__err(f, eb, CT_EFORMAT, "tensor \"%.64s\": unknown dtype \"%.16s\"", name,
                          json_string_value(dt));
    size_t ndim = json_array_size(shape);
    if (ndim > CT_TENSOR_MAX_DIMS)
        return ct_st_read__err(f, eb, CT_EFORMAT, "tensor \"%.64s\": %zu dimensions (at most %d)",
                          name, ndim, CT_TENSOR_MAX_DIMS);
    t->ndim = (int)ndim;
    for (size_t i = 0; i < ndim; i++) {
        json_t *d = json_array_get(shape, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return ct_st_read__err(f, eb, CT_EFORMAT,
                              "tensor \"%.64s\": dimension %zu is not a non-negative integer",
                              name, i);
        t->shape[i] = json_integer_value(d);
    }
    json_t *b = json_array_get(offs, 0), *en = json_array_get(offs, 1);
    if (json_array_size(offs) != 2 || !json_is_integer(b) || !json_is_integer(en) ||
        json_integer_value(b) < 0 || json_integer_value(en) < json_integer_value(b))
        return ct_st_read__err(f, eb, CT_EFORMAT,
                          "tensor \"%.64s\": data_offsets must be [begin, end] with "
                          "0 <= begin <= end",
                          name);
    uint64_t begin = (uint64_t)json_integer_value(b), end = (uint64_t)json_integer_value(en);
    int64_t numel = ct__numel(t->ndim, t->shape), need;
    if (numel < 0 ||
        __builtin_mul_overflow(numel, (int64_t)ct_dtype_size(t->dtype), &need))
        return ct_st_read__err(f, eb, CT_EFORMAT, "tensor \"%.64s\": shape overflows", name);
    if ((uint64_t)need != end - begin) {
        char sb[160];
        return ct_st_read__err(f, eb, CT_EFORMAT,
                          "tensor \"%.64s\": shape %s of %s needs %lld bytes but data_offsets "
                          "[%llu, %llu] span %llu",
                          name, ct__shape_str(t->ndim, t->shape, sb, sizeof sb),
                          ct_dtype_name(t->dtype), (long long)need, (unsigned long long)begin,
                          (unsigned long long)end, (unsigned long long)(end - begin));
    }
    if (end > f->data_len)
        return ct_st_read__err(f, eb, CT_EFORMAT,
                          "tensor \"%.64s\": data_offsets [%llu, %llu] out of bounds (data region "
                          "has %llu bytes; truncated file?)",
                          name, (unsigned long long)begin, (unsigned long long)end,
                          (unsigned long long)f->data_len);
    t->offset = begin;
    t->nbytes = end - begin;
    return 0;
}

/* __metadata__: strings only; the format marker and the CRCs. */
static int ct_st_read__parse_meta(ct_st_file_t *f, ct_errbuf_t *eb)
{
    if (f->meta == NULL)
        return 0;
    if (!json_is_object(f->meta))
        return ct_st_read__err(f, eb, CT_EFORMAT, "__metadata__ is not a JSON object");
    f->n_meta = json_object_size(f->meta);
    f->meta_kv = calloc(2 * f->n_meta + 1, sizeof *f->meta_kv);
    if (f->meta_kv == NULL)
        return ct_st_read__err(f, eb, -ENOMEM, "out of memory");
    size_t i = 0;
    const char *key;
    json_t *v;
    json_object_foreach(f->meta, key, v) {
        if (!json_is_string(v))
            return ct_st_read__err(f, eb, CT_EFORMAT,
                                   "__metadata__ value of \"%.64s\" is not a string", key);
        f->meta_kv[i++] = key;
        f->meta_kv[i++] = json_string_value(v);
    }
    const char *format = ct_st_meta(f, CT__ST_FORMAT_KEY);
    if (format == NULL)
        return 0;
    /* 1: written before header checksums; 2: the header checksum is part of the format, so a
     * damaged key cannot pass the file off as an older one. */
    if (strcmp(format, "1") != 0 && strcmp(format, "2") != 0)
        return ct_st_read__err(f, eb, CT_EFORMAT,
                          "unsupported %s \"%.16s\" (this build reads 1 and 2)",
                          CT__ST_FORMAT_KEY, format);
    if (format[0] == '2' && !f->header_crc)
        return ct_st_read__err(f, eb, CT_EFORMAT, "%s 2 without a %s entry (damaged header)",
                          CT__ST_FORMAT_KEY, CT__ST_HEADER_CRC_KEY);
    f->ours = true;
    return 0;
}

/* CRCs of a ctrun file: one per tensor, each naming a tensor. */
static int ct_st_read__attach_crcs(ct_st_file_t *f, ct_errbuf_t *eb)
{
    if (!f->ours)
        return 0;
    size_t plen = strlen(CT__ST_CRC_PREFIX), ncrc = 0;
    for (size_t i = 0; i < f->n_meta; i++) {
        const char *key = f->meta_kv[2 * i];
        if (strncmp(key, CT__ST_CRC_PREFIX, plen) != 0)
            continue;
        ct_st_tensor_t *t = (ct_st_tensor_t *)ct_st_find(f, key + plen);
        if (t == NULL)
            return ct_st_read__err(f, eb, CT_EFORMAT, "__metadata__ has %.80s but no such tensor",
                                   key);
        if (ct_st_read__parse_hex32(f->meta_kv[2 * i + 1], &t->crc32) != 0)
            return ct_st_read__err(f, eb, CT_EFORMAT, "%.80s = \"%.16s\" is not 8 hex digits", key,
                              f->meta_kv[2 * i + 1]);
        t->has_crc = true;
        ncrc++;
    }
    for (size_t i = 0; i < f->n && ncrc != f->n; i++)
        if (!f->t[i].has_crc)
            return ct_st_read__err(f, eb, CT_EFORMAT, "tensor \"%.64s\" has no %s entry",
                                   f->t[i].name, CT__ST_CRC_PREFIX);
    return 0;
}

/* The ranges, sorted by offset, must tile [0, data_len). */
static int ct_st_read__check_layout(ct_st_file_t *f, ct_errbuf_t *eb)
{
    qsort(f->t, f->n, sizeof *f->t, ct_st_read__cmp_offset);
    uint64_t expect = 0;
    for (size_t i = 0; i < f->n; i++) {
        const ct_st_tensor_t *t = &f->t[i];
        if (t->offset < expect)
            return ct_st_read__err(f, eb, CT_EFORMAT,
                              "tensors \"%.64s\" and \"%.64s\" overlap (bytes %llu..%llu)",
                              f->t[i - 1].name, t->name, (unsigned long long)t->offset,
                              (unsigned long long)expect);
        if (t->offset > expect)
            return ct_st_read__err(f, eb, CT_EFORMAT,
                              "data bytes %llu..%llu belong to no tensor (a gap before \"%.64s\")",
                              (unsigned long long)expect, (unsigned long long)t->offset, t->name);
        expect = t->offset + t->nbytes;
    }
    if (expect != f->data_len)
        return ct_st_read__err(f, eb, CT_EFORMAT,
                               "%llu bytes after the last tensor belong to no tensor",
                               (unsigned long long)(f->data_len - expect));
    for (size_t i = 0; i < f->n; i++)
        f->t[i].offset += f->data_start; /* from here on, absolute file offsets */
    for (size_t i = 0; i < f->n; i++)
        f->by_name[i] = &f->t[i];
    qsort(f->by_name, f->n, sizeof *f->by_name, ct_st_read__cmp_name);
    return 0;
}

static int ct_st_read__st_parse(ct_st_file_t *f, ct_errbuf_t *eb)
{
    struct stat st;
    if (fstat(f->fd, &st) != 0) {
        int rc = -errno;
        return ct_st_read__err(f, eb, rc, "fstat: %s", ct_strerror(rc));
    }
    if (!S_ISREG(st.st_mode))
        return ct_st_read__err(f, eb, CT_EFORMAT, "not a regular file");
    f->file_size = (uint64_t)st.st_size;
    if (f->file_size < 8)
        return ct_st_read__err(f, eb, CT_EFORMAT,
                          "truncated: %llu bytes, shorter than the 8-byte header length",
                          (unsigned long long)f->file_size);
    unsigned char lenbuf[8];
    int rc = ct_fs_read_full(f->fd, lenbuf, 8, 0);
    if (rc != 0)
        return ct_st_read__err(f, eb, rc, "reading the header length: %s", ct_strerror(rc));
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | lenbuf[i];
    if (hlen > CT_ST_MAX_HEADER)
        return ct_st_read__err(f, eb, CT_ELIMIT,
                          "header length %llu exceeds the limit of %u bytes (not safetensors, or "
                          "damaged)",
                          (unsigned long long)hlen, CT_ST_MAX_HEADER);
    if (hlen < 2)
        return ct_st_read__err(f, eb, CT_EFORMAT,
                               "header length %llu is too small for a JSON object",
                               (unsigned long long)hlen);
    if (hlen > f->file_size - 8)
        return ct_st_read__err(f, eb, CT_EFORMAT,
                          "truncated: the header says %llu bytes but only %llu follow",
                          (unsigned long long)hlen, (unsigned long long)(f->file_size - 8));
    f->data_start = 8 + hlen;
    f->data_len = f->file_size - f->data_start;

    char *hdr = malloc(hlen);
    if (hdr == NULL)
        return ct_st_read__err(f, eb, -ENOMEM, "out of memory for a %llu-byte header",
                          (unsigned long long)hlen);
    rc = ct_fs_read_full(f->fd, hdr, hlen, 8);
    if (rc != 0) {
        free(hdr);
        return ct_st_read__err(f, eb, rc, "reading the header: %s", ct_strerror(rc));
    }
    if (hdr[0] != '{') {
        free(hdr);
        return ct_st_read__err(f, eb, CT_EFORMAT, "the header does not start with '{'");
    }
    json_error_t jerr;
    f->root = json_loadb(hdr, hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (f->root == NULL) {
        free(hdr);
        return ct_st_read__err(f, eb, CT_EFORMAT, "header is not valid JSON: %s (byte %d)",
                               jerr.text, jerr.position);
    }
    if (!json_is_object(f->root)) {
        free(hdr);
        return ct_st_read__err(f, eb, CT_EFORMAT, "header is not a JSON object");
    }
    f->meta = json_object_get(f->root, "__metadata__");
    rc = ct_st_read__check_header_crc(f, hdr, hlen, eb);
    free(hdr);
    if (rc != 0)
        return rc;
    size_t total = json_object_size(f->root);
    f->n = total - (f->meta != NULL ? 1 : 0);
    f->t = calloc(f->n + 1, sizeof *f->t);
    f->by_name = calloc(f->n + 1, sizeof *f->by_name);
    f->view_of = calloc(f->n + 1, sizeof *f->view_of);
    if (f->t == NULL || f->by_name == NULL || f->view_of == NULL)
        return ct_st_read__err(f, eb, -ENOMEM, "out of memory for %zu tensors", f->n);
    if ((rc = ct_st_read__parse_meta(f, eb)) != 0)
        return rc;
    size_t i = 0;
    const char *key;
    json_t *v;
    json_object_foreach(f->root, key, v) {
        if (strcmp(key, "__metadata__") == 0)
            continue;
        if ((rc = ct_st_read__parse_entry(f, key, v, &f->t[i++], eb)) != 0)
            return rc;
    }
    if ((rc = ct_st_read__check_layout(f, eb)) != 0)
        return rc;
    return ct_st_read__attach_crcs(f, eb);
}

static int ct_st_read__st_open_fd(ct_st_file_t **out, int fd, const char *label, ct_errbuf_t *eb)
{
    *out = NULL;
    ct_st_file_t *f = calloc(1, sizeof *f);
    if (f == NULL) {
        close(fd);
        return ct_errbuf_set(eb, -ENOMEM, "%s: out of memory", label);
    }
    f->fd = fd;
    snprintf(f->label, sizeof f->label, "%s", label);
    int rc = ct_st_read__st_parse(f, eb);
    if (rc != 0) {
        ct_st_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

int ct_st_open(ct_st_file_t **out, const char *path, ct_errbuf_t *eb)
{
    return ct_st_open_at(out, AT_FDCWD, path, eb);
}

int ct_st_open_at(ct_st_file_t **out, int dirfd, const char *name, ct_errbuf_t *eb)
{
    *out = NULL;
    int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int rc = -errno;
        return ct_errbuf_set(eb, rc, "%s: cannot open: %s", name, ct_strerror(rc));
    }
    return ct_st_read__st_open_fd(out, fd, name, eb);
}

void ct_st_close(ct_st_file_t *f)
{
    if (f == NULL)
        return;
    if (f->fd >= 0)
        close(f->fd);
    json_decref(f->root);
    free(f->t);
    free(f->by_name);
    free(f->view_of);
    free(f->meta_kv);
    free(f);
}

size_t ct_st_count(const ct_st_file_t *f)
{
    return f->n;
}

const ct_st_tensor_t *ct_st_tensor_at(const ct_st_file_t *f, size_t i)
{
    return i < f->n ? &f->t[i] : NULL;
}

const ct_st_tensor_t *ct_st_find(const ct_st_file_t *f, const char *name)
{
    ct_st_tensor_t key = {.name = name};
    const ct_st_tensor_t *kp = &key;
    const ct_st_tensor_t **hit =
        bsearch(&kp, f->by_name, f->n, sizeof *f->by_name, ct_st_read__cmp_name);
    return hit != NULL ? *hit : NULL;
}

const char *ct_st_meta(const ct_st_file_t *f, const char *key)
{
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_kv[2 * i], key) == 0)
            return f->meta_kv[2 * i + 1];
    return NULL;
}

bool ct_st_header_checked(const ct_st_file_t *f)
{
    return f->header_crc;
}

size_t ct_st_meta_count(const ct_st_file_t *f)
{
    return f->n_meta;
}

void ct_st_meta_at(const ct_st_file_t *f, size_t i, const char **key, const char **value)
{
    *key = i < f->n_meta ? f->meta_kv[2 * i] : NULL;
    *value = i < f->n_meta ? f->meta_kv[2 * i + 1] : NULL;
}

/* Reads tensor t into dst (or, with dst NULL, through a bounce buffer) and checks its CRC. */
static int ct_st_read__st_load_one(ct_st_file_t *f, const ct_st_tensor_t *t, void *dst,
                                   ct_errbuf_t *eb)
{
    unsigned char bounce[64 * 1024];
    uLong crc = crc32_z(0L, Z_NULL, 0);
    uint64_t done = 0;
    while (done < t->nbytes) {
        size_t cap = dst != NULL ? CT__ST_CHUNK : sizeof bounce;
        size_t n = t->nbytes - done < cap ? (size_t)(t->nbytes - done) : cap;
        unsigned char *p = dst != NULL ? (unsigned char *)dst + done : bounce;
        int rc = ct_fs_read_full(f->fd, p, n, (off_t)(t->offset + done));
        if (rc == CT_EFORMAT)
            return ct_st_read__err(
                f, eb, rc, "tensor \"%.64s\": file ends early (truncated while open?)", t->name);
        if (rc != 0)
            return ct_st_read__err(f, eb, rc, "tensor \"%.64s\": read failed: %s", t->name,
                              ct_strerror(rc));
        if (t->has_crc)
            crc = crc32_z(crc, p, n);
        done += n;
    }
    if (t->has_crc && (uint32_t)crc != t->crc32)
        return ct_st_read__err(f, eb, CT_ECRC,
                          "tensor \"%.64s\": CRC32 mismatch (header says %08x, data give %08x)",
                          t->name, t->crc32, (uint32_t)crc);
    return 0;
}

int ct_st_read(ct_st_file_t *f, const ct_tensor_view_t *views, size_t n, unsigned flags,
               ct_errbuf_t *eb)
{
    if ((flags & ~CT_ST_ALLOW_EXTRA) != 0)
        return ct_st_read__err(f, eb, -EINVAL, "unknown flags 0x%x", flags);
    memset(f->view_of, 0, f->n * sizeof *f->view_of);
    for (size_t i = 0; i < n; i++) {
        const ct_tensor_view_t *v = &views[i];
        int rc = ct__check_view(v, i, eb);
        if (rc != 0)
            return rc;
        const ct_st_tensor_t *t = ct_st_find(f, v->name);
        if (t == NULL)
            return ct_st_read__err(f, eb, CT_EMISMATCH, "has no tensor \"%.64s\"", v->name);
        size_t idx = (size_t)(t - f->t);
        if (f->view_of[idx] != 0)
            return ct_errbuf_set(eb, -EINVAL, "two tensor views are named \"%.64s\"", v->name);
        if (t->dtype != v->dtype)
            return ct_st_read__err(f, eb, CT_EMISMATCH,
                                   "tensor \"%.64s\" is %s in the file, %s here", v->name,
                                   ct_dtype_name(t->dtype), ct_dtype_name(v->dtype));
        if (t->ndim != v->ndim || memcmp(t->shape, v->shape, (size_t)t->ndim * sizeof(int64_t))) {
            char a[160], b[160];
            return ct_st_read__err(f, eb, CT_EMISMATCH,
                              "tensor \"%.64s\" has shape %s in the file, %s here", v->name,
                              ct__shape_str(t->ndim, t->shape, a, sizeof a),
                              ct__shape_str(v->ndim, v->shape, b, sizeof b));
        }
        f->view_of[idx] = i + 1;
    }
    if (!(flags & CT_ST_ALLOW_EXTRA)) {
        for (size_t j = 0; j < f->n; j++)
            if (f->view_of[j] == 0)
                return ct_st_read__err(f, eb, CT_EMISMATCH,
                                  "has tensor \"%.64s\", which none of the %zu views names",
                                  f->t[j].name, n);
    }
    for (size_t j = 0; j < f->n; j++) {
        const ct_st_tensor_t *t = &f->t[j];
        void *dst = f->view_of[j] != 0 ? views[f->view_of[j] - 1].data : NULL;
        if (dst == NULL && !t->has_crc)
            continue;
        int rc = ct_st_read__st_load_one(f, t, dst, eb);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int ct_st_verify(ct_st_file_t *f, ct_errbuf_t *eb)
{
    for (size_t j = 0; j < f->n; j++) {
        if (!f->t[j].has_crc)
            continue;
        int rc = ct_st_read__st_load_one(f, &f->t[j], NULL, eb);
        if (rc != 0)
            return rc;
    }
    return 0;
}
