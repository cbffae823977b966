/*
 * ct_tensor.c - dtypes (safetensors' names and element sizes) and tensor views: element and
 * byte counts with overflow checks, the validation both the safetensors reader and writer
 * apply to a caller's view, and the header checksum rule both of them compute. No I/O here.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "ct_worker_internal.h"
#include "ctworker.h"

static const struct {
    const char *name;
    size_t size;
} ct_tensor__dtypes[CT_DTYPE_COUNT] = {
    [CT_DTYPE_BOOL] = {"BOOL", 1},   [CT_DTYPE_U8] = {"U8", 1},
    [CT_DTYPE_I8] = {"I8", 1},       [CT_DTYPE_F8_E4M3] = {"F8_E4M3", 1},
    [CT_DTYPE_F8_E5M2] = {"F8_E5M2", 1}, [CT_DTYPE_I16] = {"I16", 2},
    [CT_DTYPE_U16] = {"U16", 2},     [CT_DTYPE_F16] = {"F16", 2},
    [CT_DTYPE_BF16] = {"BF16", 2},   [CT_DTYPE_I32] = {"I32", 4},
    [CT_DTYPE_U32] = {"U32", 4},     [CT_DTYPE_F32] = {"F32", 4},
    [CT_DTYPE_I64] = {"I64", 8},     [CT_DTYPE_U64] = {"U64", 8},
    [CT_DTYPE_F64] = {"F64", 8},
};

size_t ct_dtype_size(ct_dtype_t dtype)
{
    return (unsigned)dtype < CT_DTYPE_COUNT ? ct_tensor__dtypes[dtype].size : 0;
}

const char *ct_dtype_name(ct_dtype_t dtype)
{
    return (unsigned)dtype < CT_DTYPE_COUNT ? ct_tensor__dtypes[dtype].name : "?";
}

int ct_dtype_parse(const char *text, ct_dtype_t *out)
{
    for (int i = 0; i < CT_DTYPE_COUNT; i++) {
        if (strcmp(text, ct_tensor__dtypes[i].name) == 0) {
            *out = (ct_dtype_t)i;
            return 0;
        }
    }
    return CT_EFORMAT;
}

/* numel of a shape, -1 on a negative dimension or overflow. */
int64_t ct__numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || __builtin_mul_overflow(n, shape[i], &n))
            return -1;
    }
    return n;
}

int64_t ct_tensor_numel(const ct_tensor_view_t *v)
{
    if (v->ndim < 0 || v->ndim > CT_TENSOR_MAX_DIMS)
        return -1;
    return ct__numel(v->ndim, v->shape);
}

int64_t ct_tensor_nbytes(const ct_tensor_view_t *v)
{
    int64_t n = ct_tensor_numel(v), bytes;
    size_t size = ct_dtype_size(v->dtype);
    if (n < 0 || size == 0 || __builtin_mul_overflow(n, (int64_t)size, &bytes))
        return -1;
    return bytes;
}

/* "[2, 3]" for messages. */
const char *ct__shape_str(int ndim, const int64_t *shape, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    len += (size_t)snprintf(buf + len, size - len, "[");
    for (int i = 0; i < ndim && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%lld", i ? ", " : "",
                                (long long)shape[i]);
    if (len < size)
        snprintf(buf + len, size - len, "]");
    return buf;
}

/* Checks one view for saving or loading; -EINVAL with the reason. */
int ct__check_view(const ct_tensor_view_t *v, size_t i, ct_errbuf_t *eb)
{
    if (v->name == NULL || v->name[0] == '\0')
        return ct_errbuf_set(eb, -EINVAL, "tensor view %zu has no name", i);
    if (ct_dtype_size(v->dtype) == 0)
        return ct_errbuf_set(eb, -EINVAL, "tensor \"%s\": invalid dtype %d", v->name,
                             (int)v->dtype);
    if (v->ndim < 0 || v->ndim > CT_TENSOR_MAX_DIMS)
        return ct_errbuf_set(eb, -EINVAL, "tensor \"%s\": %d dimensions (at most %d)", v->name,
                             v->ndim, CT_TENSOR_MAX_DIMS);
    int64_t nbytes = ct_tensor_nbytes(v);
    if (nbytes < 0)
        return ct_errbuf_set(eb, -EINVAL, "tensor \"%s\": negative dimension or size overflow",
                             v->name);
    if (nbytes > 0 && v->data == NULL)
        return ct_errbuf_set(eb, -EINVAL, "tensor \"%s\": %lld bytes but no data pointer",
                             v->name, (long long)nbytes);
    return 0;
}

int ct__st_header_crc(const char *hdr, size_t len, size_t *at, uint32_t *crc)
{
    static const char needle[] = "\"" CT__ST_HEADER_CRC_KEY "\":\"";
    const size_t nlen = sizeof needle - 1;
    const char *hit = memmem(hdr, len, needle, nlen);
    if (hit == NULL)
        return -1;
    size_t pos = (size_t)(hit - hdr) + nlen;
    /* A second key of that name (possible only in a hand-made header: the reader rejects
     * duplicates within one object, but not across objects) makes the value ambiguous. */
    if (len - pos < 9 || hdr[pos + 8] != '"' || memmem(hdr + pos, len - pos, needle, nlen) != NULL)
        return -1;
    uLong c = crc32_z(0L, Z_NULL, 0);
    c = crc32_z(c, (const unsigned char *)hdr, pos);
    c = crc32_z(c, (const unsigned char *)"00000000", 8);
    c = crc32_z(c, (const unsigned char *)hdr + pos + 8, len - pos - 8);
    *at = pos;
    *crc = (uint32_t)c;
    return 0;
}
