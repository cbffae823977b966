/*
 * test_st_interop.c - safetensors files cross the language boundary both ways: a file
 * libctworker writes (every dtype, a scalar, an empty and a large tensor, metadata, CRCs) is
 * read and checked value by value by Python's safetensors (numpy, and PyTorch for BF16/F8),
 * whose zlib.crc32 must match our CRC entries; and a file Python writes is read by us and
 * checked the same way (st_interop.py holds the shared value pattern).
 *
 * Usage: test_st_interop SCRIPT. Python: $CTRUN_TORCH2_PYTHON, else ~/.venvs/torch2/bin/python,
 * else python3; exits 77 when that Python cannot import safetensors and numpy.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_child.h"
#include "ct_test.h"
#include "ctworker.h"

enum { BIG = 300000 };

static char dir[256], path[512], py[4096];
static const char *script;

/* Element j of the pattern tensor of dtype d (see st_interop.py), written at out. */
static void gen(ct_dtype_t d, int64_t n, void *out)
{
    for (int64_t j = 0; j < n; j++) {
        uint64_t u = (uint64_t)j;
        double h = (double)(j % 64) * 0.25 - 8;
        switch (d) {
        case CT_DTYPE_BOOL: ((uint8_t *)out)[j] = j % 3 == 0; break;
        case CT_DTYPE_U8: ((uint8_t *)out)[j] = (uint8_t)(j * 7 % 256); break;
        case CT_DTYPE_I8: ((int8_t *)out)[j] = (int8_t)(j * 5 % 256 - 128); break;
        case CT_DTYPE_I16: ((int16_t *)out)[j] = (int16_t)(j * 37 - 1000); break;
        case CT_DTYPE_U16: ((uint16_t *)out)[j] = (uint16_t)(j * 4099 % 65536); break;
        case CT_DTYPE_I32: ((int32_t *)out)[j] = (int32_t)(j * 100003 - 50000); break;
        case CT_DTYPE_U32: ((uint32_t *)out)[j] = (uint32_t)(u * 2654435761u); break;
        case CT_DTYPE_I64: ((int64_t *)out)[j] = j * 1000000000000LL - 7; break;
        case CT_DTYPE_U64: ((uint64_t *)out)[j] = u * 0x9E3779B97F4A7C15ULL; break;
        case CT_DTYPE_F16: ((_Float16 *)out)[j] = (_Float16)h; break;
        case CT_DTYPE_BF16: {
            float f = (float)h; /* exact in bf16: truncating the low half loses nothing */
            uint32_t bits;
            memcpy(&bits, &f, 4);
            ((uint16_t *)out)[j] = (uint16_t)(bits >> 16);
            break;
        }
        case CT_DTYPE_F32: ((float *)out)[j] = (float)j * 0.5f - 3; break;
        case CT_DTYPE_F64: ((double *)out)[j] = (double)j * 0.125 - 1e6; break;
        case CT_DTYPE_F8_E4M3:
        case CT_DTYPE_F8_E5M2: ((uint8_t *)out)[j] = (uint8_t)(j * 3 % 120); break;
        default: CT_ASSERT(0);
        }
    }
}

typedef struct tensors {
    char names[CT_DTYPE_COUNT][32];
    ct_tensor_view_t v[CT_DTYPE_COUNT + 3];
    uint8_t data[CT_DTYPE_COUNT][15 * 8];
    double scalar;
    float *big;
} tensors_t;

/* The pattern tensors; data_out selects the buffers' contents (pattern or poison). */
static void tensors_init(tensors_t *t, bool pattern)
{
    for (int d = 0; d < CT_DTYPE_COUNT; d++) {
        snprintf(t->names[d], sizeof t->names[d], "t_%s", ct_dtype_name((ct_dtype_t)d));
        t->v[d] = (ct_tensor_view_t){.name = t->names[d], .dtype = (ct_dtype_t)d, .ndim = 2,
                                     .shape = {3, 5}, .data = t->data[d]};
        if (pattern)
            gen((ct_dtype_t)d, 15, t->data[d]);
        else
            memset(t->data[d], 0xA5, sizeof t->data[d]);
    }
    t->scalar = pattern ? 2.5 : -1;
    t->big = malloc(BIG * sizeof(float));
    for (int i = 0; i < BIG; i++)
        t->big[i] = pattern ? (float)i * 0.5f : -1.0f;
    t->v[CT_DTYPE_COUNT] = (ct_tensor_view_t){.name = "scalar", .dtype = CT_DTYPE_F64,
                                              .ndim = 0, .data = &t->scalar};
    t->v[CT_DTYPE_COUNT + 1] = (ct_tensor_view_t){.name = "empty", .dtype = CT_DTYPE_F32,
                                                  .ndim = 2, .shape = {0, 4}};
    t->v[CT_DTYPE_COUNT + 2] = (ct_tensor_view_t){.name = "big", .dtype = CT_DTYPE_F32,
                                                  .ndim = 1, .shape = {BIG}, .data = t->big};
}

static ct_child_t run_py(const char *mode)
{
    char *argv[] = {py, (char *)script, (char *)mode, path, NULL};
    ct_child_t c;
    CT_ASSERT_OK(ct_child_run(&c, argv, NULL, 180000));
    CT_ASSERT_MSG(c.exit_code == 0, "st_interop.py %s: %s%s", mode, c.out, c.err);
    printf("# %s", c.out);
    return c;
}

static void test_python_reads_ours(void)
{
    static tensors_t t;
    tensors_init(&t, true);
    ct_st_kv_t meta[] = {{"format", "pt"}, {"step", "12"}};
    ct_errbuf_t eb;
    CT_ASSERT_OK(ct_st_save(path, t.v, CT_DTYPE_COUNT + 3, meta, 2, &eb));
    ct_child_t c = run_py("read");
    CT_ASSERT_STR_CONTAINS(c.out, "tensors checked");
    ct_child_close(&c);
    free(t.big);
}

static void test_we_read_pythons(void)
{
    unlink(path);
    ct_child_t c = run_py("write");
    bool with_torch = strstr(c.out, "write: torch") != NULL;
    ct_child_close(&c);

    static tensors_t want, got;
    tensors_init(&want, true);
    tensors_init(&got, false);
    ct_st_file_t *f;
    ct_errbuf_t eb;
    CT_ASSERT_OK(ct_st_open(&f, path, &eb));
    CT_ASSERT_STR_EQ(ct_st_meta(f, "who"), "python");
    CT_ASSERT(ct_st_meta(f, "ctrun_format") == NULL);
    /* Python's files carry no CRCs; BF16/F8 only when it wrote through PyTorch. */
    ct_tensor_view_t views[CT_DTYPE_COUNT + 3];
    size_t n = 0;
    for (int i = 0; i < CT_DTYPE_COUNT + 3; i++) {
        bool torch_only = i == CT_DTYPE_BF16 || i == CT_DTYPE_F8_E4M3 || i == CT_DTYPE_F8_E5M2;
        if (torch_only && !with_torch) {
            CT_ASSERT(ct_st_find(f, got.v[i].name) == NULL);
            continue;
        }
        const ct_st_tensor_t *ti = ct_st_find(f, got.v[i].name);
        CT_ASSERT_MSG(ti != NULL, "%s missing", got.v[i].name);
        CT_ASSERT(!ti->has_crc);
        views[n++] = got.v[i];
    }
    CT_ASSERT_EQ(ct_st_count(f), n);
    CT_ASSERT_OK(ct_st_read(f, views, n, 0, &eb));
    CT_ASSERT_OK(ct_st_verify(f, &eb));
    ct_st_close(f);
    for (int d = 0; d < CT_DTYPE_COUNT; d++) {
        bool torch_only = d == CT_DTYPE_BF16 || d == CT_DTYPE_F8_E4M3 || d == CT_DTYPE_F8_E5M2;
        if (torch_only && !with_torch)
            continue;
        CT_ASSERT_MSG(memcmp(got.data[d], want.data[d], 15 * ct_dtype_size((ct_dtype_t)d)) == 0,
                      "%s differs", want.names[d]);
    }
    CT_ASSERT(got.scalar == 2.5);
    CT_ASSERT(memcmp(got.big, want.big, BIG * sizeof(float)) == 0);
    free(want.big);
    free(got.big);
    printf("# read Python's file: %zu tensors%s\n", n, with_torch ? "" : " (no BF16/F8)");
}

int main(int argc, char **argv)
{
    CT_ASSERT_MSG(argc == 2, "usage: test_st_interop SCRIPT");
    script = argv[1];
    const char *t2 = ct_test_torch2_python();
    snprintf(py, sizeof py, "%s",
             getenv("CTRUN_TORCH2_PYTHON") != NULL || access(t2, X_OK) == 0 ? t2 : "python3");
    char *probe[] = {py, "-c", "import safetensors, numpy", NULL};
    ct_child_t c;
    int rc = ct_child_run(&c, probe, NULL, 60000);
    if (rc != 0 || c.exit_code != 0) {
        ct_child_close(&c);
        CT_SKIP("%s cannot import safetensors and numpy (set CTRUN_TORCH2_PYTHON to a Python "
                "that can)", py);
    }
    ct_child_close(&c);
    snprintf(dir, sizeof dir, "/tmp/ct-st-interop.XXXXXX");
    CT_ASSERT(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/x.safetensors", dir);
    CT_RUN(test_python_reads_ours);
    CT_RUN(test_we_read_pythons);
    unlink(path);
    rmdir(dir);
    return 0;
}
