/*
 * ctrain_lm_hf.c - reading a Hugging Face folder's weights into float32 views and writing a
 * folder back (ctrain_lm_hf.h). Reads go through libctworker's safetensors reader, one call per
 * file and group of tensors: float32 tensors straight into their views, half tensors into a
 * bounded temporary buffer that is then widened, so loading a bfloat16 model never needs more
 * than CTRAIN_LM_HF__TMP_BYTES beside the float32 weights.
 */
#include "ctrain_lm_hf.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_fs.h"

#define CTRAIN_LM_HF__TMP_BYTES ((size_t)256 << 20)
#define CTRAIN_LM_HF__PATH_MAX  4200

typedef struct ctrain_lm_hf__shard {
    char name[256];
    ct_st_file_t *f; /* NULL until first used */
} ctrain_lm_hf__shard_t;

struct ctrain_lm_hf {
    char dir[CTRAIN_LM_HF__PATH_MAX];
    char source[64]; /* "model.safetensors" or "model.safetensors.index.json" */
    ctrain_lm_hf__shard_t *shards;
    size_t n_shards;
    json_t *weight_map; /* name -> shard file name; NULL for a single file */
};

/* ---- half floats ------------------------------------------------------------------------------
 */

float ctrain_lm_hf_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float ctrain_lm_hf_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13); /* inf, NaN (payload kept) */
    } else if (exp != 0) {
        u = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        u = sign; /* +-0 */
    } else {
        /* subnormal: man * 2^-24, normalised */
        int e = -1;
        do {
            man <<= 1;
            e++;
        } while (!(man & 0x400u));
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- opening -------------------------------------------------------------------------------- */

static bool ctrain_lm_hf__exists(const char *dir, const char *name)
{
    char p[CTRAIN_LM_HF__PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static int ctrain_lm_hf__add_shard(ctrain_lm_hf_t *h, const char *name)
{
    for (size_t i = 0; i < h->n_shards; i++)
        if (strcmp(h->shards[i].name, name) == 0)
            return 0;
    ctrain_lm_hf__shard_t *s = realloc(h->shards, (h->n_shards + 1) * sizeof *s);
    if (!s)
        return -ENOMEM;
    h->shards = s;
    memset(&s[h->n_shards], 0, sizeof *s);
    snprintf(s[h->n_shards].name, sizeof s[h->n_shards].name, "%s", name);
    h->n_shards++;
    return 0;
}

static int ctrain_lm_hf__open_index(ctrain_lm_hf_t *h, ct_errbuf_t *eb)
{
    char path[CTRAIN_LM_HF__PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", h->dir, h->source);
    json_error_t je;
    json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!o)
        return ct_errbuf_set(eb, CT_EFORMAT, "%s:%d: %s", path, je.line, je.text);
    json_t *map = json_object_get(o, "weight_map");
    if (!json_is_object(map) || json_object_size(map) == 0) {
        json_decref(o);
        return ct_errbuf_set(eb, CT_EFORMAT, "%s: no \"weight_map\" object", path);
    }
    const char *key;
    json_t *v;
    json_object_foreach(map, key, v)
    {
        const char *file = json_string_value(v);
        if (!file || file[0] == '\0' || strchr(file, '/') || strcmp(file, ".") == 0 ||
            strcmp(file, "..") == 0 || strlen(file) >= sizeof h->shards[0].name) {
            /* the message before the decref: key lives in o */
            int rc = ct_errbuf_set(eb, CT_EFORMAT,
                                   "%s: weight_map[\"%.64s\"] is not a file name inside the folder",
                                   path, key);
            json_decref(o);
            return rc;
        }
        if (ctrain_lm_hf__add_shard(h, file) != 0) {
            json_decref(o);
            return ct_errbuf_set(eb, -ENOMEM, "out of memory");
        }
    }
    h->weight_map = json_incref(map);
    json_decref(o);
    return 0;
}

/* Shard i, opened on first use. */
static int ctrain_lm_hf__shard(ctrain_lm_hf_t *h, size_t i, ct_st_file_t **f, ct_errbuf_t *eb)
{
    ctrain_lm_hf__shard_t *s = &h->shards[i];
    if (!s->f) {
        char path[CTRAIN_LM_HF__PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", h->dir, s->name);
        int rc = ct_st_open(&s->f, path, eb);
        if (rc != 0)
            return rc;
    }
    if (f)
        *f = s->f;
    return 0;
}

int ctrain_lm_hf_open(ctrain_lm_hf_t **out, const char *dir, ct_errbuf_t *eb)
{
    *out = NULL;
    if (strlen(dir) >= CTRAIN_LM_HF__PATH_MAX - 64)
        return ct_errbuf_set(eb, -ENAMETOOLONG, "model folder path too long");
    ctrain_lm_hf_t *h = calloc(1, sizeof *h);
    if (!h)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    snprintf(h->dir, sizeof h->dir, "%s", dir);
    int rc;
    if (ctrain_lm_hf__exists(dir, "model.safetensors")) {
        snprintf(h->source, sizeof h->source, "model.safetensors");
        rc = ctrain_lm_hf__add_shard(h, "model.safetensors") == 0
                 ? 0
                 : ct_errbuf_set(eb, -ENOMEM, "out of memory");
    } else if (ctrain_lm_hf__exists(dir, "model.safetensors.index.json")) {
        snprintf(h->source, sizeof h->source, "model.safetensors.index.json");
        rc = ctrain_lm_hf__open_index(h, eb);
    } else {
        bool bin = ctrain_lm_hf__exists(dir, "pytorch_model.bin") ||
                   ctrain_lm_hf__exists(dir, "pytorch_model.bin.index.json");
        rc = ct_errbuf_set(eb, -ENOENT,
                           "%s: no model.safetensors or model.safetensors.index.json%s", dir,
                           bin ? " (it has pytorch_model.bin: save the model with "
                                 "save_pretrained(..., safe_serialization=True) for ctrain)"
                               : "");
    }
    if (rc == 0 && h->weight_map == NULL)
        rc = ctrain_lm_hf__shard(h, 0, NULL, eb); /* a damaged single file shows at open */
    if (rc != 0) {
        ctrain_lm_hf_close(h);
        return rc;
    }
    *out = h;
    return 0;
}

void ctrain_lm_hf_close(ctrain_lm_hf_t *h)
{
    if (!h)
        return;
    for (size_t i = 0; i < h->n_shards; i++)
        ct_st_close(h->shards[i].f);
    free(h->shards);
    json_decref(h->weight_map);
    free(h);
}

/* ---- reading --------------------------------------------------------------------------------- */

static void ctrain_lm_hf__shape_text(char *buf, size_t size, int ndim, const int64_t *shape)
{
    size_t k = (size_t)snprintf(buf, size, "(");
    for (int i = 0; i < ndim && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < size)
        snprintf(buf + k, size - k, ")");
}

/* The shard index holding name, or -1. */
static long ctrain_lm_hf__shard_of(const ctrain_lm_hf_t *h, const char *name)
{
    if (!h->weight_map)
        return 0;
    const char *file = json_string_value(json_object_get(h->weight_map, name));
    if (!file)
        return -1;
    for (size_t i = 0; i < h->n_shards; i++)
        if (strcmp(h->shards[i].name, file) == 0)
            return (long)i;
    return -1;
}

/* Where name lives: the file's entry and the name it has there. Tries name, then name without
 * the backbone prefix, then with it. 1 found, 0 not found, < 0 error opening a shard. */
static int ctrain_lm_hf__find(ctrain_lm_hf_t *h, const char *name, const char *prefix,
                              size_t *shard, const ct_st_tensor_t **t, ct_errbuf_t *eb)
{
    char alt[3][256];
    int n = 0;
    snprintf(alt[n++], sizeof alt[0], "%s", name);
    size_t pl = prefix ? strlen(prefix) : 0;
    if (pl > 0 && strncmp(name, prefix, pl) == 0)
        snprintf(alt[n++], sizeof alt[0], "%s", name + pl);
    else if (strncmp(name, "lm_head.", 8) != 0) {
        /* a bare model's name may come from a checkpoint with a head */
        snprintf(alt[n++], sizeof alt[0], "transformer.%s", name);
        snprintf(alt[n++], sizeof alt[0], "model.%s", name);
    }
    for (int k = 0; k < n; k++) {
        long i = ctrain_lm_hf__shard_of(h, alt[k]);
        if (i < 0)
            continue;
        ct_st_file_t *f;
        int rc = ctrain_lm_hf__shard(h, (size_t)i, &f, eb);
        if (rc != 0)
            return rc;
        const ct_st_tensor_t *e = ct_st_find(f, alt[k]);
        if (e) {
            *shard = (size_t)i;
            *t = e;
            return 1;
        }
    }
    return 0;
}

typedef struct ctrain_lm_hf__job {
    size_t view;  /* index into the caller's views */
    size_t shard; /* file */
    const ct_st_tensor_t *t;
} ctrain_lm_hf__job_t;

static int ctrain_lm_hf__cmp_job(const void *a, const void *b)
{
    const ctrain_lm_hf__job_t *x = a, *y = b;
    if (x->shard != y->shard)
        return x->shard < y->shard ? -1 : 1;
    return x->t->offset < y->t->offset ? -1 : x->t->offset > y->t->offset;
}

/* Reads jobs[0..n) (one shard) through views of the file's dtype: float32 in place, half
 * types into tmp and widened. */
static int ctrain_lm_hf__read_group(ctrain_lm_hf_t *h, const ct_tensor_view_t *views,
                                    const ctrain_lm_hf__job_t *jobs, size_t n, uint16_t *tmp,
                                    ct_errbuf_t *eb)
{
    ct_tensor_view_t *fv = calloc(n, sizeof *fv);
    if (!fv)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        const ct_st_tensor_t *t = jobs[i].t;
        fv[i] = views[jobs[i].view];
        fv[i].name = t->name;
        fv[i].dtype = t->dtype;
        if (t->dtype != CT_DTYPE_F32) {
            fv[i].data = tmp + used;
            used += (size_t)t->nbytes / 2;
        }
    }
    ct_st_file_t *f = h->shards[jobs[0].shard].f;
    int rc = ct_st_read(f, fv, n, CT_ST_ALLOW_EXTRA, eb);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const ct_st_tensor_t *t = jobs[i].t;
        if (t->dtype == CT_DTYPE_F32)
            continue;
        const uint16_t *src = fv[i].data;
        float *dst = views[jobs[i].view].data;
        size_t cnt = (size_t)t->nbytes / 2;
        for (size_t k = 0; k < cnt; k++)
            dst[k] = t->dtype == CT_DTYPE_BF16 ? ctrain_lm_hf_bf16_to_f32(src[k])
                                               : ctrain_lm_hf_f16_to_f32(src[k]);
    }
    free(fv);
    return rc;
}

int ctrain_lm_hf_read(ctrain_lm_hf_t *h, const ct_tensor_view_t *views, size_t n,
                      const char *prefix, ct_errbuf_t *eb)
{
    ctrain_lm_hf__job_t *jobs = calloc(n ? n : 1, sizeof *jobs);
    if (!jobs)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    int rc = 0;
    size_t tmp_need = 0, tmp_total = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const ct_tensor_view_t *v = &views[i];
        char want[96], got[96];
        ctrain_lm_hf__shape_text(want, sizeof want, v->ndim, v->shape);
        int found = ctrain_lm_hf__find(h, v->name, prefix, &jobs[i].shard, &jobs[i].t, eb);
        if (found < 0) {
            rc = found;
            break;
        }
        if (found == 0) {
            rc = ct_errbuf_set(eb, CT_EMISMATCH, "%s: no tensor \"%s\" (expected shape %s) in %s",
                               h->dir, v->name, want, h->source);
            break;
        }
        const ct_st_tensor_t *t = jobs[i].t;
        const char *file = h->shards[jobs[i].shard].name;
        ctrain_lm_hf__shape_text(got, sizeof got, t->ndim, t->shape);
        if (t->dtype != CT_DTYPE_F32 && t->dtype != CT_DTYPE_F16 && t->dtype != CT_DTYPE_BF16) {
            rc = ct_errbuf_set(eb, CT_EMISMATCH,
                               "%s/%s: tensor \"%s\" is %s, expected F32, F16 or BF16 of shape %s",
                               h->dir, file, t->name, ct_dtype_name(t->dtype), want);
            break;
        }
        bool same = t->ndim == v->ndim;
        for (int d = 0; same && d < t->ndim; d++)
            same = t->shape[d] == v->shape[d];
        if (!same) {
            rc = ct_errbuf_set(eb, CT_EMISMATCH,
                               "%s/%s: tensor \"%s\" has shape %s, expected %s (does config.json "
                               "describe these weights?)",
                               h->dir, file, t->name, got, want);
            break;
        }
        for (size_t j = 0; j < i; j++)
            if (jobs[j].t == t) {
                rc = ct_errbuf_set(eb, -EINVAL, "two views read tensor \"%s\"", t->name);
                break;
            }
        jobs[i].view = i;
        if (t->dtype != CT_DTYPE_F32) {
            tmp_total += (size_t)t->nbytes;
            if ((size_t)t->nbytes > tmp_need)
                tmp_need = (size_t)t->nbytes;
        }
    }
    uint16_t *tmp = NULL;
    if (rc == 0) {
        /* the largest half tensor, at least, and the bound, at most what is needed */
        size_t cap = tmp_need > CTRAIN_LM_HF__TMP_BYTES ? tmp_need : CTRAIN_LM_HF__TMP_BYTES;
        if (cap > tmp_total)
            cap = tmp_total;
        tmp = tmp_need > 0 ? malloc(cap) : NULL;
        if (tmp_need > 0 && !tmp)
            rc =
                ct_errbuf_set(eb, -ENOMEM, "out of memory for %zu bytes of conversion buffer", cap);
        qsort(jobs, n, sizeof *jobs, ctrain_lm_hf__cmp_job);
        /* groups: one shard, half tensors summing to at most the buffer */
        size_t i = 0;
        while (rc == 0 && i < n) {
            size_t j = i, half = 0;
            while (j < n && jobs[j].shard == jobs[i].shard) {
                size_t nb = jobs[j].t->dtype == CT_DTYPE_F32 ? 0 : (size_t)jobs[j].t->nbytes;
                if (j > i && half + nb > cap)
                    break;
                half += nb;
                j++;
            }
            rc = ctrain_lm_hf__read_group(h, views, jobs + i, j - i, tmp, eb);
            if (rc != 0)
                ct_errbuf_wrap(eb, rc, "%s", h->dir);
            i = j;
        }
    }
    free(tmp);
    free(jobs);
    return rc;
}

/* ---- writing ------------------------------------------------------------------------------------
 */

/* dirfd/name <- the bytes of src_dir/name, when that file exists. */
static int ctrain_lm_hf__copy(int dirfd, const char *src_dir, const char *name, ct_errbuf_t *eb)
{
    char path[CTRAIN_LM_HF__PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", src_dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        int rc = -errno;
        return ct_errbuf_set(eb, rc, "%s: %s", path, strerror(-rc));
    }
    struct stat st;
    char *buf = NULL;
    int rc = fstat(fd, &st) != 0 ? -errno : 0;
    if (rc == 0 && (buf = malloc((size_t)st.st_size + 1)) == NULL)
        rc = -ENOMEM;
    if (rc == 0)
        rc = ct_fs_read_full(fd, buf, (size_t)st.st_size, 0);
    close(fd);
    if (rc != 0) {
        free(buf);
        return ct_errbuf_set(eb, rc, "reading %s: %s", path, ct_strerror(rc));
    }
    rc = ct_fs_replace_at(dirfd, name, buf, (size_t)st.st_size, eb);
    free(buf);
    return rc;
}

int ctrain_lm_hf_save(const char *dir, const char *src_dir, const ct_tensor_view_t *views, size_t n,
                      ct_errbuf_t *eb)
{
    static const char *const copied[] = {"config.json",
                                         "generation_config.json",
                                         "tokenizer.json",
                                         "tokenizer_config.json",
                                         "special_tokens_map.json",
                                         "vocab.json",
                                         "merges.txt",
                                         "added_tokens.json"};
    int rc = ct_fs_mkdir_p(dir, 0755, eb);
    if (rc != 0)
        return rc;
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) {
        rc = -errno;
        return ct_errbuf_set(eb, rc, "%s: %s", dir, strerror(-rc));
    }
    for (size_t i = 0; i < sizeof copied / sizeof copied[0] && rc == 0; i++)
        rc = ctrain_lm_hf__copy(dirfd, src_dir, copied[i], eb);
    if (rc == 0 && unlinkat(dirfd, "model.safetensors.index.json", 0) != 0 && errno != ENOENT) {
        rc = -errno;
        ct_errbuf_set(eb, rc, "%s/model.safetensors.index.json: %s", dir, strerror(-rc));
    }
    const ct_st_kv_t meta[1] = {{"format", "pt"}};
    if (rc == 0 && (rc = ct_st_save_at(dirfd, "model.safetensors", views, n, meta, 1, eb)) != 0)
        ct_errbuf_wrap(eb, rc, "%s/model.safetensors", dir);
    close(dirfd);
    return rc;
}
