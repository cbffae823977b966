/*
 * test_st_fuzz.c - a mutation fuzzer for the safetensors reader. A valid file is damaged at
 * random (bit flips, byte overwrites, truncation, extension, a random header length, digits
 * and JSON punctuation changed inside the header, chunks duplicated), then opened, verified
 * and read. The reader must never crash or read out of bounds (the test also runs under
 * ASan/UBSan), must reject with a one-line message naming the file, and whatever it accepts
 * must have a layout that tiles the rest of the file.
 *
 * Runs for CT_FUZZ_SECONDS (default 3) or at least 300 cases; CT_FUZZ_SEED picks the sequence
 * (printed, so a failure can be replayed).
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ct_test.h"
#include "ctworker.h"

enum { CAP = 1 << 16 };

static unsigned char orig[CAP], buf[CAP];
static size_t orig_len;
static char path[512];

static void make_valid(void)
{
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t h[5] = {1, 2, 3, 4, 5};
    int64_t c = 42;
    uint8_t m[3] = {1, 0, 1};
    double d[2] = {0.5, -0.25};
    ct_tensor_view_t v[] = {
        {.name = "enc.w", .dtype = CT_DTYPE_F32, .ndim = 2, .shape = {2, 3}, .data = a},
        {.name = "enc.h", .dtype = CT_DTYPE_BF16, .ndim = 1, .shape = {5}, .data = h},
        {.name = "count", .dtype = CT_DTYPE_I64, .ndim = 0, .data = &c},
        {.name = "mask", .dtype = CT_DTYPE_BOOL, .ndim = 1, .shape = {3}, .data = m},
        {.name = "d", .dtype = CT_DTYPE_F64, .ndim = 2, .shape = {1, 2}, .data = d},
        {.name = "none", .dtype = CT_DTYPE_U8, .ndim = 2, .shape = {0, 4}, .data = NULL},
    };
    ct_st_kv_t meta[] = {{"format", "pt"}, {"step", "17"}, {"config", "{\"a\": [1, 2]}"}};
    ct_errbuf_t eb;
    CT_ASSERT_OK(ct_st_save(path, v, sizeof v / sizeof v[0], meta, 3, &eb));
    int fd = open(path, O_RDONLY);
    ssize_t n = read(fd, orig, CAP);
    close(fd);
    CT_ASSERT(n > 0);
    orig_len = (size_t)n;
}

static size_t header_len(const unsigned char *b)
{
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--)
        h = h << 8 | b[i];
    return (size_t)h;
}

static size_t mutate(ct_rng_t *r, size_t len)
{
    size_t hend = 8 + header_len(orig);
    static const char punct[] = "{}[],:\" 0123456789-.eE";
    int kind = (int)ct_rng_below(r, 9);
    int reps = 1 + (int)ct_rng_below(r, 4);
    for (int k = 0; k < reps; k++) {
        switch (kind) {
        case 0: /* bit flips anywhere */
            buf[ct_rng_below(r, len)] ^= (unsigned char)(1u << ct_rng_below(r, 8));
            break;
        case 1: /* random bytes anywhere */
            buf[ct_rng_below(r, len)] = (unsigned char)ct_rng_u32(r);
            break;
        case 2: /* truncation */
            len = (size_t)ct_rng_below(r, len + 1);
            if (len == 0)
                return 0;
            break;
        case 3: { /* extension */
            size_t extra = (size_t)ct_rng_below(r, 64);
            for (size_t i = 0; i < extra && len < CAP; i++)
                buf[len++] = (unsigned char)ct_rng_u32(r);
            break;
        }
        case 4: { /* a random header length, often near the real one */
            uint64_t h = ct_rng_below(r, 2) ? header_len(buf) + ct_rng_below(r, 33) - 16
                                            : ct_rng_u64(r) >> ct_rng_below(r, 64);
            for (int i = 0; i < 8 && len >= 8; i++)
                buf[i] = (unsigned char)(h >> (8 * i));
            break;
        }
        case 5: /* header digits: shapes, offsets, lengths */
        case 6: { /* header punctuation */
            if (hend > len || hend <= 9)
                break;
            size_t at = 8 + (size_t)ct_rng_below(r, hend - 8);
            if (kind == 5 && !(buf[at] >= '0' && buf[at] <= '9'))
                break;
            buf[at] = kind == 5 ? (unsigned char)('0' + ct_rng_below(r, 10))
                                : (unsigned char)punct[ct_rng_below(r, sizeof punct - 1)];
            break;
        }
        case 7: { /* duplicate a chunk over another place */
            size_t from = (size_t)ct_rng_below(r, len), to = (size_t)ct_rng_below(r, len);
            size_t n = (size_t)ct_rng_below(r, 32);
            if (from + n > len)
                n = len - from;
            if (to + n > len)
                n = len - to;
            memmove(buf + to, buf + from, n);
            break;
        }
        default: /* a data byte only: must be a CRC failure */
            if (len > hend)
                buf[hend + ct_rng_below(r, len - hend)] ^= 0x01;
            break;
        }
    }
    return len;
}

/* Everything a reader of the file would do; checks the invariants of an accepted file. */
static int exercise(size_t len, int *stage)
{
    ct_st_file_t *f;
    ct_errbuf_t eb;
    eb.msg[0] = '\0';
    *stage = 0;
    int rc = ct_st_open(&f, path, &eb);
    if (rc != 0) {
        CT_ASSERT(f == NULL);
        CT_ASSERT_MSG(eb.msg[0] != '\0' && strchr(eb.msg, '\n') == NULL, "rc %d: \"%s\"", rc,
                      eb.msg);
        CT_ASSERT_STR_CONTAINS(eb.msg, path);
        return rc;
    }
    *stage = 1;
    size_t n = ct_st_count(f);
    uint64_t expect = n > 0 ? ct_st_tensor_at(f, 0)->offset : 0;
    ct_tensor_view_t views[64];
    static unsigned char space[CAP];
    size_t used = 0;
    CT_ASSERT(n <= 64);
    for (size_t i = 0; i < n; i++) {
        const ct_st_tensor_t *t = ct_st_tensor_at(f, i);
        CT_ASSERT_EQ_U64(t->offset, expect);
        expect += t->nbytes;
        CT_ASSERT(expect <= len);
        CT_ASSERT(ct_st_find(f, t->name) == t);
        views[i] = (ct_tensor_view_t){.name = t->name, .dtype = t->dtype, .ndim = t->ndim,
                                      .data = space + used};
        memcpy(views[i].shape, t->shape, sizeof t->shape);
        used += t->nbytes;
        CT_ASSERT(used <= CAP);
    }
    CT_ASSERT_EQ_U64(expect, n > 0 ? len : expect);
    for (size_t i = 0; i < ct_st_meta_count(f); i++) {
        const char *k, *v;
        ct_st_meta_at(f, i, &k, &v);
        CT_ASSERT(k != NULL && v != NULL);
    }
    rc = ct_st_verify(f, &eb);
    if (rc == 0) {
        *stage = 2;
        rc = ct_st_read(f, views, n, 0, &eb);
        CT_ASSERT_EQ(rc, 0); /* verified: reading all of it cannot fail */
    } else {
        CT_ASSERT_EQ(rc, CT_ECRC);
    }
    ct_st_close(f);
    return rc;
}

int main(void)
{
    char dir[] = "/tmp/ct-st-fuzz.XXXXXX";
    CT_ASSERT(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/f.safetensors", dir);
    make_valid();
    int stage;
    CT_ASSERT_OK(exercise(orig_len, &stage));

    const char *s = getenv("CT_FUZZ_SECONDS");
    double seconds = s != NULL ? atof(s) : 3.0;
    const char *seed_text = getenv("CT_FUZZ_SEED");
    uint64_t seed = seed_text != NULL ? strtoull(seed_text, NULL, 0) : (uint64_t)time(NULL);
    printf("# CT_FUZZ_SEED=%llu\n", (unsigned long long)seed);
    fflush(stdout);
    ct_rng_t r;
    ct_rng_init(&r, seed, 1, 0);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long cases = 0, rejected = 0, crc = 0, accepted = 0;
    for (;; cases++) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        double el = (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9;
        if (el >= seconds && cases >= 300)
            break;
        memcpy(buf, orig, orig_len);
        size_t len = mutate(&r, orig_len);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        CT_ASSERT(fd >= 0);
        CT_ASSERT_EQ(write(fd, buf, len), (ssize_t)len);
        close(fd);
        int rc = exercise(len, &stage);
        if (rc == 0)
            accepted++;
        else if (stage == 0)
            rejected++;
        else
            crc++;
    }
    printf("# %ld cases: %ld rejected at open, %ld by CRC, %ld accepted (harmless changes)\n",
           cases, rejected, crc, accepted);
    CT_ASSERT_GT(rejected, cases / 4);
    CT_ASSERT_GT(crc, 0);
    unlink(path);
    rmdir(dir);
    return 0;
}
