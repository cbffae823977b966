/*
 * ct_st_write.c - the safetensors writer: tensors streamed straight from the caller's memory
 * into a temporary file, CRCs computed on the way and filled into a header whose length was
 * fixed in advance, the header's own checksum filled in last, then fsync, rename and a
 * directory fsync, so the file appears whole or not at all.
 *
 * Not here: reading (ct_st_read.c), `latest` and retention (ct_ckpt.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "ct_fs.h"
#include "ct_worker_internal.h"
#include "ctworker.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data are little-endian; this code writes memory without conversion"
#endif

typedef struct ct_st_write__order {
    size_t idx;
    size_t esize;
} ct_st_write__order_t;

/* Larger elements first, so every tensor starts aligned to its element size; the view order
 * is kept within a size class. */
static int ct_st_write__cmp_order(const void *a, const void *b)
{
    const ct_st_write__order_t *x = a, *y = b;
    if (x->esize != y->esize)
        return x->esize > y->esize ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int ct_st_write__check_meta(const ct_st_kv_t *meta, size_t n_meta, ct_errbuf_t *eb)
{
    for (size_t i = 0; i < n_meta; i++) {
        const char *k = meta[i].key;
        if (k == NULL || meta[i].value == NULL)
            return ct_errbuf_set(eb, -EINVAL, "metadata entry %zu has no key or value", i);
        if (strcmp(k, CT__ST_FORMAT_KEY) == 0 || strcmp(k, CT__ST_HEADER_CRC_KEY) == 0 ||
            strncmp(k, CT__ST_CRC_PREFIX, strlen(CT__ST_CRC_PREFIX)) == 0)
            return ct_errbuf_set(eb, -EINVAL, "metadata key \"%.64s\" is reserved", k);
        for (size_t j = 0; j < i; j++)
            if (strcmp(meta[j].key, k) == 0)
                return ct_errbuf_set(eb, -EINVAL, "metadata key \"%.64s\" appears twice", k);
    }
    return 0;
}

/* The header JSON: __metadata__ (caller's entries, format marker, the header checksum's
 * placeholder, a CRC placeholder per tensor, returned in crcs[view index]) and the tensors in
 * file order. */
static int ct_st_write__build_header(const ct_tensor_view_t *views, size_t n,
                                     const ct_st_kv_t *meta, size_t n_meta,
                                     const ct_st_write__order_t *order, json_t **out_root,
                                     json_t **crcs, ct_errbuf_t *eb)
{
    json_t *root = json_object(), *m = json_object();
    if (root == NULL || m == NULL || json_object_set_new(root, "__metadata__", m) != 0) {
        json_decref(root);
        return ct_errbuf_set(eb, -ENOMEM, "out of memory building the header");
    }
    for (size_t i = 0; i < n_meta; i++) {
        json_t *s = json_string(meta[i].value);
        if (s == NULL || json_object_set_new(m, meta[i].key, s) != 0) {
            json_decref(root);
            return ct_errbuf_set(eb, -EINVAL, "metadata \"%.64s\": key or value is not UTF-8",
                                 meta[i].key);
        }
    }
    json_object_set_new(m, CT__ST_FORMAT_KEY, json_string("2"));
    json_object_set_new(m, CT__ST_HEADER_CRC_KEY, json_string("00000000"));
    uint64_t offset = 0;
    for (size_t k = 0; k < n; k++) {
        const ct_tensor_view_t *v = &views[order[k].idx];
        if (strcmp(v->name, "__metadata__") == 0 || json_object_get(root, v->name) != NULL) {
            json_decref(root);
            return ct_errbuf_set(eb, -EINVAL, "tensor name \"%.64s\" is %s", v->name,
                                 strcmp(v->name, "__metadata__") == 0 ? "reserved" : "used twice");
        }
        char crc_key[1024];
        if ((size_t)snprintf(crc_key, sizeof crc_key, "%s%s", CT__ST_CRC_PREFIX, v->name) >=
            sizeof crc_key) {
            json_decref(root);
            return ct_errbuf_set(eb, -EINVAL, "tensor name \"%.64s...\" is too long", v->name);
        }
        json_t *shape = json_array(), *offs = json_array(), *e = json_object();
        uint64_t nbytes = (uint64_t)ct_tensor_nbytes(v);
        for (int d = 0; d < v->ndim; d++)
            json_array_append_new(shape, json_integer(v->shape[d]));
        json_array_append_new(offs, json_integer((json_int_t)offset));
        json_array_append_new(offs, json_integer((json_int_t)(offset + nbytes)));
        json_object_set_new(e, "dtype", json_string(ct_dtype_name(v->dtype)));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets", offs);
        /* The _new setters take the value even when they fail (a key that is not UTF-8). */
        if (json_object_set_new(root, v->name, e) != 0) {
            json_decref(root);
            return ct_errbuf_set(eb, -EINVAL, "tensor name \"%.64s\" is not valid UTF-8", v->name);
        }
        json_t *crc = json_string("00000000");
        if (crc == NULL || json_object_set_new(m, crc_key, crc) != 0) {
            json_decref(root);
            return ct_errbuf_set(eb, -ENOMEM, "out of memory building the header");
        }
        crcs[order[k].idx] = crc; /* borrowed: the header object owns it */
        offset += nbytes;
    }
    *out_root = root;
    return 0;
}

/* Writes the tensors after the header, computing their CRCs into the placeholders. */
static int ct_st_write__write_data(int fd, uint64_t start, const ct_tensor_view_t *views, size_t n,
                          const ct_st_write__order_t *order, json_t **crcs)
{
    uint64_t pos = start;
    for (size_t k = 0; k < n; k++) {
        const ct_tensor_view_t *v = &views[order[k].idx];
        uint64_t nbytes = (uint64_t)ct_tensor_nbytes(v);
        uLong crc = crc32_z(0L, Z_NULL, 0);
        for (uint64_t done = 0; done < nbytes;) {
            size_t len = nbytes - done < CT__ST_CHUNK ? (size_t)(nbytes - done) : CT__ST_CHUNK;
            const unsigned char *p = (const unsigned char *)v->data + done;
            crc = crc32_z(crc, p, len);
            int rc = ct_fs_write_full(fd, p, len, (off_t)(pos + done));
            if (rc != 0)
                return rc;
            done += len;
        }
        char hex[9];
        snprintf(hex, sizeof hex, "%08x", (uint32_t)crc);
        json_string_set(crcs[order[k].idx], hex);
        pos += nbytes;
    }
    return 0;
}

int ct_st_save_at(int dirfd, const char *name, const ct_tensor_view_t *views, size_t n,
                  const ct_st_kv_t *meta, size_t n_meta, ct_errbuf_t *eb)
{
    if (name == NULL || name[0] == '\0' || strchr(name, '/') != NULL)
        return ct_errbuf_set(eb, -EINVAL, "\"%s\" is not a file name", name ? name : "(null)");
    int rc = ct_st_write__check_meta(meta, n_meta, eb);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = ct__check_view(&views[i], i, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, rc, "%s", name);

    ct_st_write__order_t *order = calloc(n + 1, sizeof *order);
    json_t **crcs = calloc(n + 1, sizeof *crcs);
    json_t *root = NULL;
    char *dump = NULL, *hdr = NULL;
    int fd = -1;
    char tmp[512];
    bool tmp_made = false;
    if (order == NULL || crcs == NULL) {
        rc = ct_errbuf_set(eb, -ENOMEM, "%s: out of memory", name);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        order[i] = (ct_st_write__order_t){.idx = i, .esize = ct_dtype_size(views[i].dtype)};
    qsort(order, n, sizeof *order, ct_st_write__cmp_order);
    if ((rc = ct_st_write__build_header(views, n, meta, n_meta, order, &root, crcs, eb)) != 0) {
        rc = ct_errbuf_wrap(eb, rc, "%s", name);
        goto out;
    }
    /* The CRC placeholders have the final width, so the header length is known before the
     * data are written and the data need one pass only. */
    dump = json_dumps(root, JSON_COMPACT);
    if (dump == NULL) {
        rc = ct_errbuf_set(eb, -ENOMEM, "%s: out of memory", name);
        goto out;
    }
    size_t jlen = strlen(dump), hlen = (jlen + 7) & ~(size_t)7;
    free(dump);
    dump = NULL;
    if (hlen > CT_ST_MAX_HEADER) {
        rc = ct_errbuf_set(eb, CT_ELIMIT, "%s: header of %zu bytes exceeds %u", name, hlen,
                           CT_ST_MAX_HEADER);
        goto out;
    }

    if ((rc = ct_fs_tmp_name(name, tmp, sizeof tmp)) != 0) {
        ct_errbuf_set(eb, rc, "%s: name too long", name);
        goto out;
    }
    fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = -errno;
        ct_errbuf_set(eb, rc, "%s: cannot create: %s", tmp, ct_strerror(rc));
        goto out;
    }
    tmp_made = true;
    if ((rc = ct_st_write__write_data(fd, 8 + hlen, views, n, order, crcs)) != 0) {
        ct_errbuf_set(eb, rc, "%s: write failed: %s", tmp, ct_strerror(rc));
        goto out;
    }
    ct__inject_ckpt_point(CT_INJECT_PHASE_DATA); /* a torn file: data, no header (ct_inject.c) */
    dump = json_dumps(root, JSON_COMPACT);
    hdr = malloc(8 + hlen);
    if (dump == NULL || hdr == NULL || strlen(dump) != jlen) {
        rc = ct_errbuf_set(eb, dump == NULL || hdr == NULL ? -ENOMEM : CT_ESTATE,
                           "%s: building the final header failed", name);
        goto out;
    }
    for (int i = 0; i < 8; i++)
        hdr[i] = (char)((uint64_t)hlen >> (8 * i));
    memcpy(hdr + 8, dump, jlen);
    memset(hdr + 8 + jlen, ' ', hlen - jlen);
    /* The header checksum covers the final header, tensor CRCs and padding included, with its
     * own value counted as "00000000" (the placeholder written there now). */
    size_t crc_at;
    uint32_t hcrc;
    if (ct__st_header_crc(hdr + 8, hlen, &crc_at, &hcrc) != 0) {
        rc = ct_errbuf_set(eb, CT_ESTATE, "%s: the header checksum's field is not where expected",
                           name);
        goto out;
    }
    char hex[9];
    snprintf(hex, sizeof hex, "%08x", hcrc);
    memcpy(hdr + 8 + crc_at, hex, 8);
    rc = ct_fs_write_full(fd, hdr, 8 + hlen, 0);
    if (rc != 0) {
        ct_errbuf_set(eb, rc, "%s: write failed: %s", name, ct_strerror(rc));
        goto out;
    }
    /* fsync, close, rename over name, fsync of the directory; it closes fd and removes tmp
     * on failure itself */
    rc = ct_fs_commit_at(dirfd, fd, tmp, name, eb);
    fd = -1;
    tmp_made = false;
out:
    if (fd >= 0)
        close(fd);
    if (tmp_made)
        unlinkat(dirfd, tmp, 0);
    free(hdr);
    free(dump);
    json_decref(root);
    free(crcs);
    free(order);
    return rc;
}

int ct_st_save(const char *path, const ct_tensor_view_t *views, size_t n,
               const ct_st_kv_t *meta, size_t n_meta, ct_errbuf_t *eb)
{
    /* The directory is opened, not AT_FDCWD used, because it is fsynced after the rename. */
    const char *slash = strrchr(path, '/');
    const char *base = slash != NULL ? slash + 1 : path;
    char dir[CT_WORKER_PATH_MAX] = ".";
    if (slash != NULL) {
        size_t dlen = slash == path ? 1 : (size_t)(slash - path);
        if (dlen >= sizeof dir)
            return ct_errbuf_set(eb, -ENAMETOOLONG, "%.80s...: path too long", path);
        memcpy(dir, path, dlen);
        dir[dlen] = '\0';
    }
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) {
        int rc = -errno;
        return ct_errbuf_set(eb, rc, "%s: cannot open the directory: %s", dir, ct_strerror(rc));
    }
    int rc = ct_st_save_at(dirfd, base, views, n, meta, n_meta, eb);
    close(dirfd);
    return rc;
}
