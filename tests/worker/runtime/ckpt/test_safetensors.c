/*
 * test_safetensors.c - the safetensors reader and writer: a round trip of every dtype (plus
 * scalars and empty tensors) with the writer's alignment, then one hand-made file per defect
 * the reader must reject with a clear message (truncation, bit flips caught by the CRC,
 * oversized or short headers, bad JSON, bad dtypes, shapes that disagree with byte ranges,
 * overlapping, out-of-bounds and gapped ranges, bad metadata and CRC entries), the header
 * checksum (its documented rule recomputed here; every header byte changed in turn is caught),
 * and the checks of views against the file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "ct_test.h"
#include "ctworker.h"

static char dir[256];
static char path[512];

/* ---- helpers ---------------------------------------------------------------------------------- */

static void fill_random(void *buf, size_t n, uint64_t seed)
{
    ct_rng_t r;
    ct_rng_init(&r, seed, 7, 0);
    unsigned char *p = buf;
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)ct_rng_u32(&r);
}

static void write_bytes(const char *file, const void *buf, size_t n)
{
    int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CT_ASSERT(fd >= 0);
    CT_ASSERT_EQ(write(fd, buf, n), (ssize_t)n);
    close(fd);
}

static size_t read_bytes(const char *file, void *buf, size_t cap)
{
    int fd = open(file, O_RDONLY);
    CT_ASSERT(fd >= 0);
    ssize_t n = read(fd, buf, cap);
    CT_ASSERT(n >= 0);
    close(fd);
    return (size_t)n;
}

/* A file with the given header text (padded to a multiple of 8) and data bytes. */
static void write_raw(const char *file, const char *header, const void *data, size_t ndata)
{
    size_t hlen = strlen(header);
    size_t total = 8 + hlen + ndata;
    unsigned char *buf = malloc(total + 1);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    memcpy(buf + 8, header, hlen);
    if (ndata > 0)
        memcpy(buf + 8 + hlen, data, ndata);
    write_bytes(file, buf, total);
    free(buf);
}

static void expect_open_error(const char *file, int code, const char *fragment)
{
    ct_st_file_t *f = (ct_st_file_t *)1;
    ct_errbuf_t eb;
    eb.msg[0] = '\0';
    CT_ASSERT_ERR(ct_st_open(&f, file, &eb), code);
    CT_ASSERT(f == NULL);
    CT_ASSERT_STR_CONTAINS(eb.msg, fragment);
    CT_ASSERT_STR_CONTAINS(eb.msg, file); /* names the file */
    CT_ASSERT(strchr(eb.msg, '\n') == NULL);
}

static void expect_raw_error(const char *header, size_t ndata, int code, const char *fragment)
{
    unsigned char data[256] = {0};
    CT_ASSERT(ndata <= sizeof data);
    write_raw(path, header, data, ndata);
    expect_open_error(path, code, fragment);
}

/* ---- round trips ------------------------------------------------------------------------------ */

static void test_round_trip_every_dtype(void)
{
    enum { NT = CT_DTYPE_COUNT + 2 };
    ct_tensor_view_t out[NT], in[NT];
    char names[NT][32];
    void *src[NT], *dst[NT];
    /* Odd sizes first so that a writer that kept the caller's order would misalign the rest. */
    for (int i = 0; i < CT_DTYPE_COUNT; i++) {
        snprintf(names[i], sizeof names[i], "layer.%d.%s", i, ct_dtype_name((ct_dtype_t)i));
        out[i] = (ct_tensor_view_t){.name = names[i], .dtype = (ct_dtype_t)i, .ndim = 2,
                                    .shape = {3, 5 + i}};
    }
    snprintf(names[CT_DTYPE_COUNT], 32, "scalar");
    out[CT_DTYPE_COUNT] = (ct_tensor_view_t){.name = names[CT_DTYPE_COUNT],
                                             .dtype = CT_DTYPE_F64, .ndim = 0};
    snprintf(names[CT_DTYPE_COUNT + 1], 32, "empty");
    out[CT_DTYPE_COUNT + 1] = (ct_tensor_view_t){.name = names[CT_DTYPE_COUNT + 1],
                                                 .dtype = CT_DTYPE_F32, .ndim = 3,
                                                 .shape = {4, 0, 2}};
    for (int i = 0; i < NT; i++) {
        int64_t nb = ct_tensor_nbytes(&out[i]);
        CT_ASSERT(nb >= 0);
        src[i] = malloc((size_t)nb + 1);
        dst[i] = malloc((size_t)nb + 1);
        fill_random(src[i], (size_t)nb, (uint64_t)i);
        memset(dst[i], 0xEE, (size_t)nb);
        out[i].data = src[i];
        in[i] = out[i];
        in[i].data = dst[i];
    }
    CT_ASSERT_EQ(ct_tensor_nbytes(&out[CT_DTYPE_COUNT]), 8);
    CT_ASSERT_EQ(ct_tensor_nbytes(&out[CT_DTYPE_COUNT + 1]), 0);

    ct_st_kv_t meta[] = {{"step", "12"}, {"note", "caf\xc3\xa9 \"quoted\""}};
    ct_errbuf_t eb;
    CT_ASSERT_OK(ct_st_save(path, out, NT, meta, 2, &eb));

    /* The writer's layout: header padded to 8, every tensor aligned to its element size. */
    unsigned char head[8];
    CT_ASSERT_EQ(read_bytes(path, head, 8), 8);
    CT_ASSERT_EQ(head[0] % 8, 0);

    ct_st_file_t *f;
    CT_ASSERT_OK(ct_st_open(&f, path, &eb));
    CT_ASSERT_EQ(ct_st_count(f), NT);
    for (size_t i = 0; i < ct_st_count(f); i++) {
        const ct_st_tensor_t *t = ct_st_tensor_at(f, i);
        CT_ASSERT_MSG(t->offset % ct_dtype_size(t->dtype) == 0, "%s at %llu", t->name,
                      (unsigned long long)t->offset);
        CT_ASSERT(t->has_crc);
    }
    for (int i = 0; i < NT; i++) {
        const ct_st_tensor_t *t = ct_st_find(f, names[i]);
        CT_ASSERT(t != NULL);
        CT_ASSERT_EQ(t->dtype, out[i].dtype);
        CT_ASSERT_EQ(t->ndim, out[i].ndim);
        for (int d = 0; d < t->ndim; d++)
            CT_ASSERT_EQ(t->shape[d], out[i].shape[d]);
        CT_ASSERT_EQ(t->nbytes, ct_tensor_nbytes(&out[i]));
    }
    CT_ASSERT(ct_st_find(f, "nope") == NULL);
    CT_ASSERT_STR_EQ(ct_st_meta(f, "step"), "12");
    CT_ASSERT_STR_EQ(ct_st_meta(f, "note"), "caf\xc3\xa9 \"quoted\"");
    CT_ASSERT_STR_EQ(ct_st_meta(f, "ctrun_format"), "2");
    CT_ASSERT(ct_st_meta(f, "crc32.scalar") != NULL);
    CT_ASSERT(ct_st_header_checked(f));
    CT_ASSERT_EQ(ct_st_meta_count(f), 2 + 2 + NT);
    const char *k, *v;
    ct_st_meta_at(f, 0, &k, &v);
    CT_ASSERT_STR_EQ(k, "step");
    CT_ASSERT_OK(ct_st_verify(f, &eb));
    CT_ASSERT_OK(ct_st_read(f, in, NT, 0, &eb));
    for (int i = 0; i < NT; i++)
        CT_ASSERT_MSG(memcmp(src[i], dst[i], (size_t)ct_tensor_nbytes(&out[i])) == 0, "%s",
                      names[i]);
    ct_st_close(f);

    /* A subset of the tensors with CT_ST_ALLOW_EXTRA; without it, the extra ones are named. */
    CT_ASSERT_OK(ct_st_open(&f, path, &eb));
    memset(dst[2], 0, (size_t)ct_tensor_nbytes(&in[2]));
    CT_ASSERT_OK(ct_st_read(f, &in[2], 1, CT_ST_ALLOW_EXTRA, &eb));
    CT_ASSERT(memcmp(src[2], dst[2], (size_t)ct_tensor_nbytes(&in[2])) == 0);
    CT_ASSERT_ERR(ct_st_read(f, &in[2], 1, 0, &eb), CT_EMISMATCH);
    CT_ASSERT_STR_CONTAINS(eb.msg, "which none of the 1 views names");
    ct_st_close(f);

    for (int i = 0; i < NT; i++) {
        free(src[i]);
        free(dst[i]);
    }
}

static void test_empty_file_and_overwrite(void)
{
    ct_errbuf_t eb;
    CT_ASSERT_OK(ct_st_save(path, NULL, 0, NULL, 0, &eb));
    ct_st_file_t *f;
    CT_ASSERT_OK(ct_st_open(&f, path, &eb));
    CT_ASSERT_EQ(ct_st_count(f), 0);
    CT_ASSERT_OK(ct_st_read(f, NULL, 0, 0, &eb));
    ct_st_close(f);

    /* Replacing a file leaves no temporary behind. */
    float x[4] = {1, 2, 3, 4};
    ct_tensor_view_t v = {.name = "x", .dtype = CT_DTYPE_F32, .ndim = 1, .shape = {4}, .data = x};
    CT_ASSERT_OK(ct_st_save(path, &v, 1, NULL, 0, &eb));
    char cmd[600];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A %s | grep tmp)\"", dir);
    CT_ASSERT_EQ(system(cmd), 0);
}

/* ---- writer argument checks --------------------------------------------------------------------- */

static void test_writer_rejects_bad_views(void)
{
    float x[2] = {0};
    ct_tensor_view_t v[2] = {
        {.name = "a", .dtype = CT_DTYPE_F32, .ndim = 1, .shape = {2}, .data = x},
        {.name = "a", .dtype = CT_DTYPE_F32, .ndim = 1, .shape = {2}, .data = x},
    };
    ct_errbuf_t eb;
    CT_ASSERT_ERR(ct_st_save(path, v, 2, NULL, 0, &eb), -EINVAL);
    CT_ASSERT_STR_CONTAINS(eb.msg, "used twice");
    v[1].name = "__metadata__";
    CT_ASSERT_ERR(ct_st_save(path, v, 2, NULL, 0, &eb), -EINVAL);
    CT_ASSERT_STR_CONTAINS(eb.msg, "reserved");
    v[1].name = "bad\xff";
    CT_ASSERT_ERR(ct_st_save(path, v, 2, NULL, 0, &eb), -EINVAL);
    CT_ASSERT_STR_CONTAINS(eb.msg, "UTF-8");
    v[1].name = NULL;
    CT_ASSERT_ERR(ct_st_save(path, v, 2, NULL, 0, &eb), -EINVAL);
    CT_ASSERT_STR_CONTAINS(eb.msg, "no name");
    v[1].name = "b";
    v[1].data = NULL;
    CT_ASSERT_ERR(ct_st_save(path, v, 2, NULL, 0, &eb), -EINVAL);
    CT_ASSERT_STR_CONTAINS(eb.msg, "no data pointer");
    v[1].data = x;
    v[1].shape[0] = -1;
    CT_ASSERT_ERR(ct_st_save(path, v, 2, NULL, 0, &eb), -EINVAL);
    v[1].shape[0] = 2;
    v[1].ndim = 9;
    CT_ASSERT_ERR(ct_st_save(path, v, 2, NULL, 0, &eb), -EINVAL);
    v[1].ndim = 1;
    v[1].dtype = CT_DTYPE_COUNT;
    CT_ASSERT_ERR(ct_st_save(path, v, 2, NULL, 0, &eb), -EINVAL);
    v[1].dtype = CT_DTYPE_F32;

    ct_st_kv_t meta[] = {{"crc32.a", "0"}};
    CT_ASSERT_ERR(ct_st_save(path, v, 2, meta, 1, &eb), -EINVAL);
    CT_ASSERT_STR_CONTAINS(eb.msg, "reserved");
    meta[0].key = "ctrun_format";
    CT_ASSERT_ERR(ct_st_save(path, v, 2, meta, 1, &eb), -EINVAL);
    meta[0].key = "ctrun_header_crc32";
    CT_ASSERT_ERR(ct_st_save(path, v, 2, meta, 1, &eb), -EINVAL);
    CT_ASSERT_STR_CONTAINS(eb.msg, "reserved");
    ct_st_kv_t twice[] = {{"k", "1"}, {"k", "2"}};
    CT_ASSERT_ERR(ct_st_save(path, v, 2, twice, 2, &eb), -EINVAL);
    CT_ASSERT_STR_CONTAINS(eb.msg, "twice");
    CT_ASSERT_ERR(ct_st_save("/nonexistent-dir/x.safetensors", v, 2, NULL, 0, &eb), -ENOENT);
}

/* ---- damaged files ---------------------------------------------------------------------------- */

/* A valid file of two tensors to damage. */
static size_t make_valid(unsigned char *buf, size_t cap)
{
    float a[16];
    int64_t b[3];
    fill_random(a, sizeof a, 1);
    fill_random(b, sizeof b, 2);
    ct_tensor_view_t v[2] = {
        {.name = "a", .dtype = CT_DTYPE_F32, .ndim = 2, .shape = {4, 4}, .data = a},
        {.name = "b", .dtype = CT_DTYPE_I64, .ndim = 1, .shape = {3}, .data = b},
    };
    ct_errbuf_t eb;
    CT_ASSERT_OK(ct_st_save(path, v, 2, NULL, 0, &eb));
    return read_bytes(path, buf, cap);
}

static void test_truncated(void)
{
    unsigned char buf[4096];
    size_t n = make_valid(buf, sizeof buf);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | buf[i];
    write_bytes(path, buf, 0);
    expect_open_error(path, CT_EFORMAT, "shorter than the 8-byte header length");
    write_bytes(path, buf, 7);
    expect_open_error(path, CT_EFORMAT, "truncated");
    write_bytes(path, buf, 8);
    expect_open_error(path, CT_EFORMAT, "truncated: the header says");
    write_bytes(path, buf, 8 + hlen - 1);
    expect_open_error(path, CT_EFORMAT, "truncated: the header says");
    for (size_t cut = 8 + hlen; cut < n; cut += 7) {
        write_bytes(path, buf, cut);
        expect_open_error(path, CT_EFORMAT, "out of bounds");
    }
    /* Extra bytes after the last tensor are as wrong as missing ones. */
    buf[n] = 0;
    write_bytes(path, buf, n + 1);
    expect_open_error(path, CT_EFORMAT, "after the last tensor");
}

static void test_bit_flips_caught_by_crc(void)
{
    unsigned char buf[4096];
    size_t n = make_valid(buf, sizeof buf);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | buf[i];
    float a[16];
    int64_t b[3];
    ct_tensor_view_t v[2] = {
        {.name = "a", .dtype = CT_DTYPE_F32, .ndim = 2, .shape = {4, 4}, .data = a},
        {.name = "b", .dtype = CT_DTYPE_I64, .ndim = 1, .shape = {3}, .data = b},
    };
    /* Every bit of the data region, one at a time. */
    for (size_t byte = 8 + hlen; byte < n; byte++) {
        for (int bit = 0; bit < 8; bit += 3) {
            buf[byte] ^= (unsigned char)(1u << bit);
            write_bytes(path, buf, n);
            buf[byte] ^= (unsigned char)(1u << bit);
            ct_st_file_t *f;
            ct_errbuf_t eb;
            CT_ASSERT_OK(ct_st_open(&f, path, &eb));
            CT_ASSERT_ERR(ct_st_read(f, v, 2, 0, &eb), CT_ECRC);
            CT_ASSERT_STR_CONTAINS(eb.msg, "CRC32 mismatch");
            CT_ASSERT_ERR(ct_st_verify(f, &eb), CT_ECRC);
            /* A tensor not loaded is still checked: load only the one not hit (b, with the
             * larger elements, comes first in the file). */
            const ct_st_tensor_t *tb = ct_st_find(f, "b");
            bool in_b = byte < tb->offset + tb->nbytes;
            CT_ASSERT_ERR(ct_st_read(f, in_b ? &v[0] : &v[1], 1, CT_ST_ALLOW_EXTRA, &eb), CT_ECRC);
            ct_st_close(f);
        }
    }
}

/* The header checksum. Its rule (ctworker.h, section 5) recomputed here with zlib alone, as
 * another program would; then every byte of the header changed in turn - the metadata values
 * a resume trusts (step, the configuration), dtypes and shapes that keep the byte counts, the
 * CRC entries, the padding - must make the file fail to open, never open with other values. */
static void test_header_checksum(void)
{
    float a[4] = {1, 2, 3, 4};
    int32_t b[4] = {5, 6, 7, 8};
    ct_tensor_view_t v[2] = {
        {.name = "a", .dtype = CT_DTYPE_F32, .ndim = 2, .shape = {2, 2}, .data = a},
        {.name = "b", .dtype = CT_DTYPE_I32, .ndim = 1, .shape = {4}, .data = b},
    };
    ct_st_kv_t meta[] = {{"step", "16"}, {"config", "{\"state\":{\"adam_steps\":16}}"}};
    ct_errbuf_t eb;
    CT_ASSERT_OK(ct_st_save(path, v, 2, meta, 2, &eb));
    unsigned char buf[4096];
    size_t n = read_bytes(path, buf, sizeof buf);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | buf[i];
    CT_ASSERT(8 + hlen <= n);

    static const char key[] = "\"ctrun_header_crc32\":\"";
    unsigned char *hit = memmem(buf + 8, hlen, key, strlen(key));
    CT_ASSERT(hit != NULL);
    size_t at = (size_t)(hit - buf) + strlen(key);
    CT_ASSERT(memmem(buf + at, 8 + hlen - at, key, strlen(key)) == NULL); /* exactly once */
    char stored[9], want[9];
    memcpy(stored, buf + at, 8);
    stored[8] = '\0';
    unsigned char copy[4096];
    memcpy(copy, buf, n);
    memset(copy + at, '0', 8);
    snprintf(want, sizeof want, "%08lx", crc32(0L, copy + 8, (uInt)hlen));
    CT_ASSERT_STR_EQ(stored, want);
    ct_st_file_t *f;
    CT_ASSERT_OK(ct_st_open(&f, path, &eb));
    CT_ASSERT(ct_st_header_checked(f));
    ct_st_close(f);

    /* The changes a hostile probe makes: one value for another of the same length. */
    static const char *const swaps[][2] = {{"\"step\":\"16\"", "\"step\":\"14\""},
                                           {"\"step\":\"16\"", "\"step\":\"36\""},
                                           {"adam_steps\\\":16", "adam_steps\\\":17"},
                                           {"\"dtype\":\"I32\"", "\"dtype\":\"F32\""},
                                           {"\"shape\":[2,2]", "\"shape\":[4,1]"}};
    for (size_t k = 0; k < sizeof swaps / sizeof swaps[0]; k++) {
        memcpy(copy, buf, n);
        unsigned char *p = memmem(copy + 8, hlen, swaps[k][0], strlen(swaps[k][0]));
        CT_ASSERT_MSG(p != NULL, "no %s in the header", swaps[k][0]);
        memcpy(p, swaps[k][1], strlen(swaps[k][1]));
        write_bytes(path, copy, n);
        expect_open_error(path, CT_ECRC, "header CRC32 mismatch");
    }

    /* Every byte, one at a time (two different changes each). */
    int crc_caught = 0;
    for (size_t i = 8; i < 8 + hlen; i++) {
        for (int x = 0; x < 2; x++) {
            memcpy(copy, buf, n);
            copy[i] ^= x ? 0x01 : 0x20;
            write_bytes(path, copy, n);
            f = NULL;
            eb.msg[0] = '\0';
            int rc = ct_st_open(&f, path, &eb);
            CT_ASSERT_MSG(rc != 0, "header byte %zu ('%c' -> '%c') changed, yet the file opened",
                          i - 8, buf[i], copy[i]);
            CT_ASSERT(f == NULL);
            CT_ASSERT_STR_CONTAINS(eb.msg, path);
            crc_caught += rc == CT_ECRC;
        }
    }
    /* Most changes leave valid JSON, and only the checksum tells them. */
    printf("  %d of %d header changes caught by the header checksum, the rest by the parser\n",
           crc_caught, (int)(2 * hlen));
    CT_ASSERT_GT(crc_caught, (int)hlen / 2);
}

static void test_header_length_limits(void)
{
    unsigned char buf[64] = {0};
    /* 200 MB claimed: over the limit, whatever the file size. */
    uint64_t big = 200000000;
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(big >> (8 * i));
    write_bytes(path, buf, sizeof buf);
    expect_open_error(path, CT_ELIMIT, "exceeds the limit");
    memset(buf, 0xFF, 8);
    write_bytes(path, buf, sizeof buf);
    expect_open_error(path, CT_ELIMIT, "exceeds the limit");
    memset(buf, 0, 8);
    buf[0] = 1;
    buf[8] = '{';
    write_bytes(path, buf, 9);
    expect_open_error(path, CT_EFORMAT, "too small");
}

static void test_bad_headers(void)
{
    expect_raw_error("[1, 2]  ", 0, CT_EFORMAT, "does not start with '{'");
    expect_raw_error(" {}", 0, CT_EFORMAT, "does not start with '{'");
    expect_raw_error("{\"a\": ", 0, CT_EFORMAT, "not valid JSON");
    expect_raw_error("{} {}", 0, CT_EFORMAT, "not valid JSON");
    expect_raw_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                     "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                     1, CT_EFORMAT, "not valid JSON");
    expect_raw_error("{\"a\": 5}", 0, CT_EFORMAT, "not a JSON object");
    expect_raw_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4, CT_EFORMAT,
                     "needs \"dtype\"");
    expect_raw_error("{\"a\":{\"dtype\":\"F7\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                     CT_EFORMAT, "unknown dtype \"F7\"");
    expect_raw_error("{\"a\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[0,1]}}", 1,
                     CT_EFORMAT, "unknown dtype");
    expect_raw_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
                     CT_EFORMAT, "not a non-negative integer");
    expect_raw_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4,
                     CT_EFORMAT, "not a non-negative integer");
    expect_raw_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                     "\"data_offsets\":[0,1]}}",
                     1, CT_EFORMAT, "9 dimensions");
    expect_raw_error("{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],"
                     "\"data_offsets\":[0,8]}}",
                     8, CT_EFORMAT, "overflows");
    expect_raw_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
                     CT_EFORMAT, "needs 8 bytes but data_offsets [0, 4] span 4");
    expect_raw_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4,
                     CT_EFORMAT, "0 <= begin <= end");
    expect_raw_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
                     CT_EFORMAT, "[begin, end]");
    expect_raw_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999]}}",
                     4, CT_EFORMAT, "not valid JSON");
}

static void test_bad_layouts(void)
{
    expect_raw_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                     12, CT_EFORMAT, "overlap");
    expect_raw_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                     8, CT_EFORMAT, "overlap");
    expect_raw_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}",
                     8, CT_EFORMAT, "overlap");
    expect_raw_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
                     12, CT_EFORMAT, "out of bounds");
    expect_raw_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
                     CT_EFORMAT, "belong to no tensor");
    expect_raw_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                     12, CT_EFORMAT, "a gap before \"b\"");
    expect_raw_error("{}", 4, CT_EFORMAT, "after the last tensor");
    /* Valid layouts written by others: unaligned, unordered, with empty tensors, no padding. */
    write_raw(path,
              "{\"z\":{\"dtype\":\"BF16\",\"shape\":[0,3],\"data_offsets\":[3,3]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[3,7]},"
              "\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}",
              "\x01\x02\x03\x00\x00\x80\x3f", 7);
    ct_st_file_t *f;
    ct_errbuf_t eb;
    CT_ASSERT_OK(ct_st_open(&f, path, &eb));
    uint8_t a[3];
    float b;
    ct_tensor_view_t v[3] = {
        {.name = "a", .dtype = CT_DTYPE_U8, .ndim = 1, .shape = {3}, .data = a},
        {.name = "b", .dtype = CT_DTYPE_F32, .ndim = 1, .shape = {1}, .data = &b},
        {.name = "z", .dtype = CT_DTYPE_BF16, .ndim = 2, .shape = {0, 3}, .data = NULL},
    };
    CT_ASSERT_OK(ct_st_read(f, v, 3, 0, &eb));
    CT_ASSERT_EQ(a[2], 3);
    CT_ASSERT_CLOSE(b, 1.0, 0, 0);
    CT_ASSERT(!ct_st_find(f, "a")->has_crc);
    ct_st_close(f);
}

static void test_bad_metadata(void)
{
    static const char tensor[] = "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}";
    char h[512];
    snprintf(h, sizeof h, "{\"__metadata__\": [1], %s}", tensor);
    expect_raw_error(h, 1, CT_EFORMAT, "__metadata__ is not a JSON object");
    snprintf(h, sizeof h, "{\"__metadata__\": {\"step\": 3}, %s}", tensor);
    expect_raw_error(h, 1, CT_EFORMAT, "value of \"step\" is not a string");
    snprintf(h, sizeof h, "{\"__metadata__\": {\"ctrun_format\": \"3\"}, %s}", tensor);
    expect_raw_error(h, 1, CT_EFORMAT, "unsupported ctrun_format");
    /* Format 2 makes the header checksum mandatory: without it, the header is damaged. */
    snprintf(h, sizeof h,
             "{\"__metadata__\": {\"ctrun_format\": \"2\", \"crc32.a\": \"d202ef8d\"}, %s}",
             tensor);
    expect_raw_error(h, 1, CT_EFORMAT, "ctrun_format 2 without a ctrun_header_crc32 entry");
    snprintf(h, sizeof h, "{\"__metadata__\": {\"ctrun_format\": \"1\"}, %s}", tensor);
    expect_raw_error(h, 1, CT_EFORMAT, "tensor \"a\" has no crc32. entry");
    snprintf(h, sizeof h,
             "{\"__metadata__\": {\"ctrun_format\": \"1\", \"crc32.a\": \"xyz\"}, %s}", tensor);
    expect_raw_error(h, 1, CT_EFORMAT, "is not 8 hex digits");
    snprintf(h, sizeof h,
             "{\"__metadata__\": {\"ctrun_format\": \"1\", \"crc32.a\": \"d202ef8d\", "
             "\"crc32.b\": \"00000000\"}, %s}",
             tensor);
    expect_raw_error(h, 1, CT_EFORMAT, "crc32.b but no such tensor");
    /* Correct CRC of one zero byte (zlib: d202ef8d): accepted. */
    snprintf(h, sizeof h, "{\"__metadata__\": {\"ctrun_format\": \"1\", \"crc32.a\": \"D202EF8D\"}, %s}",
             tensor);
    unsigned char zero = 0;
    write_raw(path, h, &zero, 1);
    ct_st_file_t *f;
    ct_errbuf_t eb;
    CT_ASSERT_OK(ct_st_open(&f, path, &eb));
    CT_ASSERT_OK(ct_st_verify(f, &eb));
    CT_ASSERT_EQ_U64(ct_st_find(f, "a")->crc32, 0xd202ef8dULL);
    CT_ASSERT(!ct_st_header_checked(f)); /* format 1: written before header checksums */
    ct_st_close(f);
    /* Not a file at all. */
    expect_open_error(dir, CT_EFORMAT, "not a regular file");
    char missing[600];
    snprintf(missing, sizeof missing, "%s/missing.safetensors", dir);
    ct_st_file_t *g;
    CT_ASSERT_ERR(ct_st_open(&g, missing, &eb), -ENOENT);
    CT_ASSERT_STR_CONTAINS(eb.msg, "cannot open");
}

/* ---- views against the file ------------------------------------------------------------------- */

static void test_view_mismatches(void)
{
    unsigned char buf[4096];
    make_valid(buf, sizeof buf);
    float a[16];
    int64_t b[3];
    ct_tensor_view_t v[2] = {
        {.name = "a", .dtype = CT_DTYPE_F32, .ndim = 2, .shape = {4, 4}, .data = a},
        {.name = "b", .dtype = CT_DTYPE_I64, .ndim = 1, .shape = {3}, .data = b},
    };
    ct_st_file_t *f;
    ct_errbuf_t eb;
    CT_ASSERT_OK(ct_st_open(&f, path, &eb));
    v[0].dtype = CT_DTYPE_BF16;
    CT_ASSERT_ERR(ct_st_read(f, v, 2, 0, &eb), CT_EMISMATCH);
    CT_ASSERT_STR_CONTAINS(eb.msg, "tensor \"a\" is F32 in the file, BF16 here");
    v[0].dtype = CT_DTYPE_F32;
    v[0].shape[1] = 2;
    v[0].shape[0] = 8;
    CT_ASSERT_ERR(ct_st_read(f, v, 2, 0, &eb), CT_EMISMATCH);
    CT_ASSERT_STR_CONTAINS(eb.msg, "shape [4, 4] in the file, [8, 2] here");
    v[0].shape[0] = 4;
    v[0].shape[1] = 4;
    v[1].name = "c";
    CT_ASSERT_ERR(ct_st_read(f, v, 2, 0, &eb), CT_EMISMATCH);
    CT_ASSERT_STR_CONTAINS(eb.msg, "has no tensor \"c\"");
    v[1].name = "a";
    CT_ASSERT_ERR(ct_st_read(f, v, 2, 0, &eb), -EINVAL);
    CT_ASSERT_STR_CONTAINS(eb.msg, "two tensor views");
    v[1].name = "b";
    CT_ASSERT_ERR(ct_st_read(f, v, 2, 0x80, &eb), -EINVAL);
    CT_ASSERT_OK(ct_st_read(f, v, 2, 0, &eb));
    ct_st_close(f);
    ct_st_close(NULL);
}

static void test_dtype_table(void)
{
    for (int i = 0; i < CT_DTYPE_COUNT; i++) {
        ct_dtype_t d;
        CT_ASSERT_OK(ct_dtype_parse(ct_dtype_name((ct_dtype_t)i), &d));
        CT_ASSERT_EQ(d, i);
    }
    CT_ASSERT_EQ(ct_dtype_size(CT_DTYPE_BOOL), 1);
    CT_ASSERT_EQ(ct_dtype_size(CT_DTYPE_BF16), 2);
    CT_ASSERT_EQ(ct_dtype_size(CT_DTYPE_F32), 4);
    CT_ASSERT_EQ(ct_dtype_size(CT_DTYPE_I64), 8);
    CT_ASSERT_EQ(ct_dtype_size(CT_DTYPE_COUNT), 0);
    CT_ASSERT_STR_EQ(ct_dtype_name(CT_DTYPE_COUNT), "?");
    ct_dtype_t d;
    CT_ASSERT_ERR(ct_dtype_parse("f32", &d), CT_EFORMAT);
    ct_tensor_view_t v = {.dtype = CT_DTYPE_F64, .ndim = 2, .shape = {INT64_MAX / 2, 4}};
    CT_ASSERT_EQ(ct_tensor_numel(&v), -1);
    v.shape[1] = 2;
    CT_ASSERT_EQ(ct_tensor_nbytes(&v), -1);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/ct-st-test.XXXXXX");
    CT_ASSERT(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/t.safetensors", dir);
    CT_RUN(test_dtype_table);
    CT_RUN(test_round_trip_every_dtype);
    CT_RUN(test_empty_file_and_overwrite);
    CT_RUN(test_writer_rejects_bad_views);
    CT_RUN(test_truncated);
    CT_RUN(test_bit_flips_caught_by_crc);
    CT_RUN(test_header_checksum);
    CT_RUN(test_header_length_limits);
    CT_RUN(test_bad_headers);
    CT_RUN(test_bad_layouts);
    CT_RUN(test_bad_metadata);
    CT_RUN(test_view_mismatches);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CT_ASSERT_EQ(system(cmd), 0);
    return 0;
}
