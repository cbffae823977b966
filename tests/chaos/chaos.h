/*
 * chaos.h - shared helpers of the chaos suite (tests/chaos/): run ctrun with ctrain on a tiny
 * synthetic job, tag every process of the job (an environment variable ctrun passes on to its
 * workers and theirs) so that "no surviving process" can be checked through /proc, and read
 * ctrun's report.json. Header-only and static, like ct_test.h.
 *
 * Every ctrun runs through ct_child.h (own process group, deadline, group kill); deadlines are
 * generous because CI machines are loaded, and no test asserts a speed.
 */
#ifndef CHAOS_H
#define CHAOS_H

#include <dirent.h>
#include <ftw.h>
#include <glob.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_child.h"
#include "ct_test.h"
#include "ct_time.h"

static const char *chaos_ctrun, *chaos_ctrain;
static char chaos_root[512];

static int chaos__rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void chaos__cleanup(void)
{
    if (chaos_root[0] != '\0' && getenv("CT_CHAOS_KEEP") == NULL)
        nftw(chaos_root, chaos__rm, 16, FTW_DEPTH | FTW_PHYS);
}

/* argv: CTRUN CTRAIN. A scratch folder, removed at exit (kept with CT_CHAOS_KEEP set). */
__attribute__((unused)) static void chaos_init(int argc, char **argv, const char *name)
{
    if (argc < 3)
        CT_SKIP("usage: %s CTRUN CTRAIN", name);
    chaos_ctrun = argv[1];
    chaos_ctrain = argv[2];
    const char *tmp = getenv("TMPDIR");
    snprintf(chaos_root, sizeof chaos_root, "%s/%s.XXXXXX", tmp && tmp[0] ? tmp : "/tmp", name);
    CT_ASSERT(mkdtemp(chaos_root) != NULL);
    atexit(chaos__cleanup);
}

/* <root>/<name>, created. */
__attribute__((unused)) static const char *chaos_dir(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", chaos_root, name);
    CT_ASSERT_MSG(mkdir(buf, 0755) == 0, "mkdir %s", buf);
    return buf;
}

/* True while a live process carries CT_CHAOS_TAG=tag in its environment. */
static bool chaos_tag_alive(const char *tag)
{
    char want[128];
    int wlen = snprintf(want, sizeof want, "CT_CHAOS_TAG=%s", tag);
    DIR *d = opendir("/proc");
    if (d == NULL)
        return false;
    bool alive = false;
    struct dirent *de;
    static char buf[1 << 16];
    while (!alive && (de = readdir(d)) != NULL) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        char path[300];
        snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        size_t n = fread(buf, 1, 511, f);
        fclose(f);
        buf[n] = '\0';
        const char *rp = strrchr(buf, ')');
        if (rp == NULL || rp[2] == 'Z' || rp[2] == 'X')
            continue;
        snprintf(path, sizeof path, "/proc/%s/environ", de->d_name);
        f = fopen(path, "r");
        if (f == NULL)
            continue;
        n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        for (size_t i = 0; i + (size_t)wlen <= n; i += strlen(buf + i) + 1)
            if (memcmp(buf + i, want, (size_t)wlen) == 0 && buf[i + (size_t)wlen] == '\0')
                alive = true;
    }
    closedir(d);
    return alive;
}

/* Asserts that within ms no process of the job tagged tag is left. */
__attribute__((unused)) static void chaos_assert_no_survivors(const char *tag, int64_t ms)
{
    int64_t deadline = ct_time_ms() + ms;
    while (chaos_tag_alive(tag)) {
        CT_ASSERT_MSG(ct_time_ms() < deadline, "a process of job %s survived ctrun", tag);
        ct_sleep_ms(20);
    }
}

/* The last 1500 bytes of a child's stderr, for messages. */
static const char *chaos_tail(const ct_child_t *c)
{
    if (c->err == NULL)
        return "";
    return c->err + (c->err_len > 1500 ? c->err_len - 1500 : 0);
}

/* Runs ctrun with the NULL-terminated args (the word CTRAIN is replaced by ctrain's path),
 * tagged with tag, to the end (timeout_ms at most). Extra environment in env (may be NULL). */
__attribute__((unused)) static void chaos_run(ct_child_t *c, const char *tag, const char *const *env,
                                              int64_t timeout_ms, const char *const *args)
{
    char *argv[128];
    size_t n = 0;
    argv[n++] = (char *)chaos_ctrun;
    for (size_t i = 0; args[i] != NULL && n + 1 < 128; i++)
        argv[n++] = (char *)(strcmp(args[i], "CTRAIN") == 0 ? chaos_ctrain : args[i]);
    argv[n] = NULL;
    char tagvar[128];
    snprintf(tagvar, sizeof tagvar, "CT_CHAOS_TAG=%s", tag);
    const char *envs[16];
    size_t k = 0;
    envs[k++] = tagvar;
    for (size_t i = 0; env != NULL && env[i] != NULL && k + 1 < 16; i++)
        envs[k++] = env[i];
    envs[k] = NULL;
    ct_child_opts_t opts = {.env = envs};
    CT_ASSERT_OK(ct_child_start(c, argv, &opts));
    int rc = ct_child_wait(c, timeout_ms);
    CT_ASSERT_MSG(rc == 0, "ctrun timed out; stderr tail:\n%.1500s", chaos_tail(c));
}

/* The run folder ctrun made under log_dir (exactly one). */
__attribute__((unused)) static void chaos_run_dir(const char *log_dir, char *out, size_t size)
{
    char pattern[700];
    snprintf(pattern, sizeof pattern, "%s/*_*", log_dir);
    glob_t g;
    CT_ASSERT_MSG(glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc == 1, "no single run folder in %s",
                  log_dir);
    snprintf(out, size, "%s", g.gl_pathv[0]);
    globfree(&g);
}

/* report.json of the run under log_dir, parsed. */
__attribute__((unused)) static json_t *chaos_report(const char *log_dir)
{
    char run[600], path[700];
    chaos_run_dir(log_dir, run, sizeof run);
    snprintf(path, sizeof path, "%s/report.json", run);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    CT_ASSERT_MSG(j != NULL, "%s: %s", path, je.text);
    return j;
}

/* Failures in a report whose cause contains needle. */
__attribute__((unused)) static int chaos_count_causes(json_t *report, const char *needle)
{
    json_t *list = json_object_get(report, "failures"), *row;
    size_t i;
    int n = 0;
    json_array_foreach(list, i, row)
    {
        const char *cause = json_string_value(json_object_get(row, "cause"));
        n += cause != NULL && strstr(cause, needle) != NULL;
    }
    return n;
}

/* Occurrences of needle in hay. */
__attribute__((unused)) static int chaos_count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; p != NULL && (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* The tiny training job every chaos test runs: 2 ranks x 8 users per micro-batch, 1 block of
 * width 16 on 240 synthetic users (15 steps per epoch), checkpoints every 3 steps. */
#define CHAOS_TRAIN_ARGS(dir, epochs)                                                             \
    "CTRAIN", "--train_dir", (dir), "--dataset", "synthetic:users=240,items=120,len=16",          \
        "--hidden_units", "16", "--maxlen", "16", "--num_blocks", "1", "--batch_size", "16",      \
        "--num_epochs", (epochs), "--eval_every", "0", "--eval", "sampled", "--num_workers", "0", \
        "--ckpt_every_steps", "3"

#endif /* CHAOS_H */
