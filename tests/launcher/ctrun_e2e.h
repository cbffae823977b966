/*
 * ctrun_e2e.h - shared helpers of the launcher's end-to-end tests (suite e2e): run the ctrun
 * binary with the test worker (ctrun_test_worker.c), a scratch folder per test, the files the
 * worker leaves there, free ports, and process checks. Header-only and static, like ct_test.h.
 *
 * Every program runs through ct_child.h (own process group, deadline, group kill), so nothing
 * outlives a test; deadlines are generous because CI machines are loaded.
 */
#ifndef CTRUN_E2E_H
#define CTRUN_E2E_H

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_child.h"
#include "ct_proc.h"
#include "ct_test.h"
#include "ct_time.h"

/* Paths given on the command line by meson: the ctrun binary and the test worker. */
static const char *e2e_ctrun;
static const char *e2e_worker;

/* A scratch folder, removed at exit unless the test failed (then kept for a look). */
static char e2e_root[512];

static int e2e__rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void e2e__cleanup(void)
{
    if (e2e_root[0] != '\0')
        nftw(e2e_root, e2e__rm, 16, FTW_DEPTH | FTW_PHYS);
}

__attribute__((unused)) static void e2e_init(int argc, char **argv, const char *name)
{
    if (argc < 3)
        CT_SKIP("usage: %s CTRUN TEST_WORKER", name);
    e2e_ctrun = argv[1];
    e2e_worker = argv[2];
    const char *tmp = getenv("TMPDIR");
    snprintf(e2e_root, sizeof e2e_root, "%s/%s.XXXXXX", tmp && tmp[0] ? tmp : "/tmp", name);
    CT_ASSERT(mkdtemp(e2e_root) != NULL);
    atexit(e2e__cleanup);
}

/* A fresh sub-folder of the scratch folder: <root>/<name>. */
__attribute__((unused)) static const char *e2e_dir(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", e2e_root, name);
    CT_ASSERT_MSG(mkdir(buf, 0755) == 0, "mkdir %s: %s", buf, strerror(errno));
    return buf;
}

/* A port that can be bound right now (on every address, as ctrun's store binds), chosen below
 * the kernel's ephemeral range: a port the kernel hands out for bind(0) or as the local end of
 * an outgoing connection could be taken by any other test's socket between this check and
 * ctrun's bind, while ports below the range only go to explicit binds. */
__attribute__((unused)) static int e2e_free_port(void)
{
    int low = 32768;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f != NULL) {
        if (fscanf(f, "%d", &low) != 1)
            low = 32768;
        fclose(f);
    }
    if (low < 12000)
        low = 65536; /* an unusual range: use the top instead */
    unsigned seed = (unsigned)getpid() ^ (unsigned)ct_time_ns();
    for (int tries = 0; tries < 1000; tries++) {
        seed = seed * 1103515245u + 12345u;
        int port = low < 65536 ? 10000 + (int)((seed >> 8) % (unsigned)(low - 10000))
                               : 61000 + (int)((seed >> 8) % 4000u);
        int fd = socket(AF_INET6, SOCK_STREAM, 0);
        CT_ASSERT(fd >= 0);
        int zero = 0;
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
        int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
        close(fd);
        if (ok)
            return port;
    }
    CT_ASSERT_MSG(0, "no free port found");
    return -1;
}

/* argv for ctrun: the NULL-terminated list args, where the word "WORKER" is replaced by the
 * test worker's path. */
static void e2e__argv(char **argv, size_t max, const char *const *args)
{
    size_t n = 0;
    argv[n++] = (char *)e2e_ctrun;
    for (size_t i = 0; args[i] != NULL && n + 1 < max; i++)
        argv[n++] = (char *)(strcmp(args[i], "WORKER") == 0 ? e2e_worker : args[i]);
    argv[n] = NULL;
}

/* Starts ctrun with args and env changes (ct_child_opts_t.env; NULL for none). */
__attribute__((unused)) static void e2e_start(ct_child_t *c, const char *const *env,
                                              const char *const *args)
{
    char *argv[96];
    e2e__argv(argv, 96, args);
    ct_child_opts_t opts = {.env = env};
    CT_ASSERT_OK(ct_child_start(c, argv, &opts));
}

/* Runs ctrun to the end (60 s at most). */
__attribute__((unused)) static void e2e_run(ct_child_t *c, const char *const *env,
                                            const char *const *args)
{
    e2e_start(c, env, args);
    int rc = ct_child_wait(c, 60000);
    CT_ASSERT_MSG(rc == 0, "ctrun timed out; stderr:\n%s", c->err ? c->err : "");
}

/* The whole content of a file (malloc'd, NUL-terminated), or NULL when it cannot be read. */
__attribute__((unused)) static char *e2e_read(const char *fmt, ...)
{
    char path[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof path, fmt, ap);
    va_end(ap);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (size_t r; buf != NULL && (r = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += r;
        if (n + 1 == cap) {
            char *g = realloc(buf, cap * 2);
            if (g == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = g;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf != NULL)
        buf[n] = '\0';
    return buf;
}

__attribute__((unused)) static bool e2e_exists(const char *fmt, ...)
{
    char path[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof path, fmt, ap);
    va_end(ap);
    struct stat st;
    return stat(path, &st) == 0;
}

/* The value of NAME in an env dump ("NAME=value" lines), copied into buf; NULL when absent. */
__attribute__((unused)) static const char *e2e_env_get(const char *dump, const char *name,
                                                       char *buf, size_t size)
{
    size_t n = strlen(name);
    for (const char *p = dump; p != NULL && *p != '\0';) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len > n && strncmp(p, name, n) == 0 && p[n] == '=') {
            size_t v = len - n - 1;
            if (v >= size)
                v = size - 1;
            memcpy(buf, p + n + 1, v);
            buf[v] = '\0';
            return buf;
        }
        p = nl ? nl + 1 : NULL;
    }
    return NULL;
}

/* Asserts that the env dump of (rank, attempt) in dir has NAME=want (want NULL: absent). */
#define E2E_ENV_EQ(dump, name, want)                                                              \
    do {                                                                                          \
        char e2e__v[4096];                                                                        \
        const char *e2e__got = e2e_env_get((dump), (name), e2e__v, sizeof e2e__v);                \
        const char *e2e__want = (want);                                                           \
        if (e2e__want == NULL)                                                                    \
            CT_ASSERT_MSG(e2e__got == NULL, "%s should be unset, is \"%.900s\"", name, e2e__got); \
        else                                                                                      \
            CT_ASSERT_MSG(e2e__got != NULL && strcmp(e2e__got, e2e__want) == 0,                   \
                          "%s: got \"%.900s\", want \"%.900s\"", name,                            \
                          e2e__got ? e2e__got : "(unset)", e2e__want);                            \
    } while (0)

/* Lines of D/starts: how many workers started (in attempt k, or any when k < 0). */
__attribute__((unused)) static int e2e_count_starts(const char *dir, int attempt)
{
    char *s = e2e_read("%s/starts", dir);
    int n = 0;
    for (char *p = s; p != NULL && *p != '\0';) {
        int r, lr, k, pid, pgid;
        if (sscanf(p, "%d %d %d %d %d", &r, &lr, &k, &pid, &pgid) == 5 &&
            (attempt < 0 || k == attempt))
            n++;
        char *nl = strchr(p, '\n');
        p = nl ? nl + 1 : NULL;
    }
    free(s);
    return n;
}

/* Waits up to ms until no pid and no process group of the worker records in dir/starts (and no
 * pid in dir/children) is alive; returns whether that happened. */
__attribute__((unused)) static bool e2e_all_gone(const char *dir, int64_t ms)
{
    int64_t deadline = ct_time_ms() + ms;
    for (;;) {
        bool alive = false;
        char *s = e2e_read("%s/starts", dir);
        for (char *p = s; p != NULL && *p != '\0';) {
            int r, lr, k, pid, pgid;
            if (sscanf(p, "%d %d %d %d %d", &r, &lr, &k, &pid, &pgid) == 5)
                alive = alive || ct_proc_alive(pid) || ct_pgid_alive(pgid);
            char *nl = strchr(p, '\n');
            p = nl ? nl + 1 : NULL;
        }
        free(s);
        char *c = e2e_read("%s/children", dir);
        for (char *p = c; p != NULL && *p != '\0';) {
            alive = alive || ct_proc_alive(atoi(p));
            char *nl = strchr(p, '\n');
            p = nl ? nl + 1 : NULL;
        }
        free(c);
        if (!alive)
            return true;
        if (ct_time_ms() > deadline)
            return false;
        ct_sleep_ms(20);
    }
}

/* Waits up to ms until dir/starts has at least n lines. */
__attribute__((unused)) static bool e2e_wait_starts(const char *dir, int n, int64_t ms)
{
    int64_t deadline = ct_time_ms() + ms;
    while (e2e_count_starts(dir, -1) < n) {
        if (ct_time_ms() > deadline)
            return false;
        ct_sleep_ms(10);
    }
    return true;
}

/* The only run folder of a --log_dir (asserts there is exactly one), into buf. */
__attribute__((unused)) static void e2e_run_dir(const char *base, char *buf, size_t size)
{
    DIR *d = opendir(base);
    CT_ASSERT(d != NULL);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(buf, size, "%.500s/%.255s", base, e->d_name);
        n++;
    }
    closedir(d);
    CT_ASSERT_EQ(n, 1);
}

/* Counts non-overlapping occurrences of needle in hay. */
__attribute__((unused)) static int e2e_count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; p != NULL && (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

#endif /* CTRUN_E2E_H */
