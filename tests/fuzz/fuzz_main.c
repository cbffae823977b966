/*
 * fuzz_main.c - runs a libFuzzer target without libFuzzer: the regression and smoke run that
 * CI does with gcc (and under ASan+UBSan), where clang's -fsanitize=fuzzer is not used.
 *
 *   fuzz_X_run [--seconds S] [--seed N] [FILE|DIR]...
 *   fuzz_X_run --write-seeds DIR     (the built-in seeds as files, to start a libFuzzer corpus)
 *
 * Runs the target's built-in seeds, then every given corpus file, then random mutations of
 * them for S seconds (default 2). A failing check aborts inside the target; the input being
 * run is then printed in hex on stderr so that it can be turned into a corpus file.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_time.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t ct_fuzz_seed(int i, uint8_t *buf, size_t cap);
void ct_fuzz_teardown(void);

#define FUZZ_MAX_INPUT 4096

typedef struct item {
    uint8_t *data;
    size_t len;
} item_t;

static item_t *pool;
static size_t npool, cappool;
static const uint8_t *current;
static size_t current_len;

static void on_abort(int sig)
{
    static const char hexd[] = "0123456789abcdef";
    const char head[] = "\nfuzz input that failed (hex):\n";
    if (write(2, head, sizeof head - 1) < 0)
        _exit(1);
    for (size_t i = 0; current != NULL && i < current_len; i++) {
        char b[2] = {hexd[current[i] >> 4], hexd[current[i] & 15]};
        if (write(2, b, 2) < 0)
            break;
    }
    if (write(2, "\n", 1) < 0)
        _exit(1);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void run(const uint8_t *data, size_t len)
{
    current = data;
    current_len = len;
    LLVMFuzzerTestOneInput(data, len);
    current = NULL;
}

static void add(const uint8_t *data, size_t len)
{
    if (len > FUZZ_MAX_INPUT)
        len = FUZZ_MAX_INPUT;
    if (npool == cappool) {
        cappool = cappool ? cappool * 2 : 64;
        pool = realloc(pool, cappool * sizeof *pool);
        if (pool == NULL)
            abort();
    }
    pool[npool].data = malloc(len ? len : 1);
    if (pool[npool].data == NULL)
        abort();
    memcpy(pool[npool].data, data, len);
    pool[npool].len = len;
    npool++;
}

static int add_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -errno;
    uint8_t buf[FUZZ_MAX_INPUT];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    add(buf, n);
    run(buf, n);
    return 0;
}

static int add_path(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "fuzz: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(sb.st_mode))
        return add_file(path);
    DIR *d = opendir(path);
    if (d == NULL)
        return -1;
    struct dirent *e;
    int count = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", path, e->d_name);
        if (add_file(full) == 0)
            count++;
    }
    closedir(d);
    return count;
}

static uint64_t rng;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* One random edit of buf (length *len, capacity FUZZ_MAX_INPUT). */
static void mutate(uint8_t *buf, size_t *len)
{
    static const uint64_t lengths[] = {0,     1,      2,      5,          7,         8,    63,
                                       64,    65,     4095,   4096,       8192,      8193, 16383,
                                       16384, 131072, 131073, 1ull << 40, UINT64_MAX};
    static const uint8_t bytes[] = {0,  1,  2,  3,    5,    7,    8,    9,    12,  13,
                                    17, 18, 19, 0x7f, 0x80, 0xa5, 0xa6, 0xce, 0xff};
    size_t n = *len;
    switch (next() % 7) {
    case 0:
        if (n > 0)
            buf[next() % n] ^= (uint8_t)(1u << (next() % 8));
        break;
    case 1:
        if (n > 0)
            buf[next() % n] = bytes[next() % sizeof bytes];
        break;
    case 2: { /* insert */
        size_t k = 1 + next() % 8, at = n ? next() % (n + 1) : 0;
        if (n + k > FUZZ_MAX_INPUT)
            break;
        memmove(buf + at + k, buf + at, n - at);
        for (size_t i = 0; i < k; i++)
            buf[at + i] = (uint8_t)next();
        *len = n + k;
        break;
    }
    case 3: { /* delete */
        if (n == 0)
            break;
        size_t at = next() % n, k = 1 + next() % (n - at);
        memmove(buf + at, buf + at + k, n - at - k);
        *len = n - k;
        break;
    }
    case 4: { /* an interesting length in place */
        if (n < 8)
            break;
        uint64_t v = lengths[next() % (sizeof lengths / sizeof lengths[0])];
        memcpy(buf + next() % (n - 7), &v, 8);
        break;
    }
    case 5: { /* duplicate a chunk */
        if (n == 0)
            break;
        size_t from = next() % n, k = 1 + next() % (n - from);
        if (n + k > FUZZ_MAX_INPUT)
            break;
        memmove(buf + n, buf + from, k);
        *len = n + k;
        break;
    }
    default: { /* splice in part of another input */
        item_t *o = &pool[next() % npool];
        if (o->len == 0)
            break;
        size_t from = next() % o->len, k = 1 + next() % (o->len - from);
        if (n + k > FUZZ_MAX_INPUT)
            break;
        memcpy(buf + n, o->data + from, k);
        *len = n + k;
        break;
    }
    }
}

int main(int argc, char **argv)
{
    double seconds = 2;
    uint64_t seed = (uint64_t)ct_time_ns() ^ (uint64_t)getpid();
    int nfiles = 0;
    signal(SIGABRT, on_abort);
    signal(SIGSEGV, on_abort);
    uint8_t buf[FUZZ_MAX_INPUT * 2];
    if (argc == 3 && strcmp(argv[1], "--write-seeds") == 0) {
        for (int i = 0;; i++) {
            size_t n = ct_fuzz_seed(i, buf, FUZZ_MAX_INPUT);
            if (n == 0)
                return 0;
            char path[4096];
            snprintf(path, sizeof path, "%s/seed-%03d", argv[2], i);
            FILE *f = fopen(path, "wb");
            if (f == NULL || fwrite(buf, 1, n, f) != n) {
                fprintf(stderr, "fuzz: cannot write %s\n", path);
                return 1;
            }
            fclose(f);
        }
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            seconds = atof(argv[++i]);
        } else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 0);
        } else {
            int n = add_path(argv[i]);
            if (n < 0)
                return 2;
            nfiles += n;
        }
    }
    rng = seed ? seed : 1;
    int nseeds = 0;
    for (int i = 0;; i++) {
        size_t n = ct_fuzz_seed(i, buf, FUZZ_MAX_INPUT);
        if (n == 0)
            break;
        add(buf, n);
        run(buf, n);
        nseeds++;
    }
    if (npool == 0)
        add((const uint8_t *)"", 0);
    int64_t end = ct_time_ms() + (int64_t)(seconds * 1000);
    uint64_t runs = 0;
    while (ct_time_ms() < end) {
        for (int batch = 0; batch < 64; batch++) {
            item_t *it = &pool[next() % npool];
            size_t len = it->len;
            memcpy(buf, it->data, len);
            int edits = 1 + (int)(next() % 6);
            for (int e = 0; e < edits; e++)
                mutate(buf, &len);
            run(buf, len);
            runs++;
        }
    }
    printf("# %d seeds, %d corpus files, %llu mutated inputs in %.1f s (seed 0x%llx)\n", nseeds,
           nfiles, (unsigned long long)runs, seconds, (unsigned long long)seed);
    ct_fuzz_teardown();
    for (size_t i = 0; i < npool; i++)
        free(pool[i].data);
    free(pool);
    return 0;
}
