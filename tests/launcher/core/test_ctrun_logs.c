/*
 * test_ctrun_logs.c - the --redirects/--tee grammar, --local_ranks_filter, the per-stream
 * plan for every combination docs/torchrun-compatibility.md §5 and its §7 items 26, 27 and 33
 * name, tee prefixes, and the log folder layout: run folders made with mkdtemp semantics, attempt
 * folders wiped and recreated, /dev/null, and the clean-up of empty folders.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_test.h"
#include "ctrun_logs.h"

static void test_std_grammar(void)
{
    ctrun_std_spec_t s;
    ct_errbuf_t eb = {{0}};
    for (int v = 0; v <= 3; v++) {
        char t[2] = {(char)('0' + v), 0};
        CT_ASSERT_OK(ctrun_std_parse(t, &s, &eb));
        CT_ASSERT(!s.is_map);
        CT_ASSERT_EQ(ctrun_std_get(&s, 0), v);
        CT_ASSERT_EQ(ctrun_std_get(&s, 57), v);
    }
    CT_ASSERT_OK(ctrun_std_parse("0:3,1:0,2:1,3:2,1:1", &s, &eb));
    CT_ASSERT(s.is_map);
    CT_ASSERT_EQ(ctrun_std_get(&s, 0), CTRUN_STD_ALL);
    CT_ASSERT_EQ(ctrun_std_get(&s, 1), CTRUN_STD_OUT); /* the repeated key: last wins */
    CT_ASSERT_EQ(ctrun_std_get(&s, 2), CTRUN_STD_OUT);
    CT_ASSERT_EQ(ctrun_std_get(&s, 3), CTRUN_STD_ERR);
    CT_ASSERT_EQ(ctrun_std_get(&s, 4), CTRUN_STD_NONE); /* unlisted */
    CT_ASSERT_EQ(ctrun_std_get(&s, 10), CTRUN_STD_NONE);
    static const char *const bad[] = {"4",    "",    "00",      "0:4", "10:1", "0:1,",
                                      ",0:1", "0-1", "0:1;1:2", "a:1", " 1",   "0:1,1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CT_ASSERT_MSG(ctrun_std_parse(bad[i], &s, &eb) == CT_EPARSE, "\"%s\"", bad[i]);
        CT_ASSERT_STR_CONTAINS(eb.msg, "is not 0..3 or a list like 0:1,1:2");
    }
}

static void test_rank_filter(void)
{
    ctrun_rank_filter_t f;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ctrun_rank_filter_parse("", &f, &eb));
    CT_ASSERT_EQ(f.count, 0);
    CT_ASSERT(ctrun_rank_filter_shows(&f, 5));
    CT_ASSERT(ctrun_rank_filter_shows(NULL, 5));
    CT_ASSERT_OK(ctrun_rank_filter_parse("0, 12 ,3", &f, &eb));
    CT_ASSERT_EQ(f.count, 3);
    CT_ASSERT(ctrun_rank_filter_shows(&f, 12));
    CT_ASSERT(!ctrun_rank_filter_shows(&f, 1));
    ctrun_rank_filter_free(&f);
    ctrun_rank_filter_free(&f);
    static const char *const bad[] = {"a", "0,", ",0", "0,,1", "-1", "1.5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = ctrun_rank_filter_parse(bad[i], &f, &eb);
        CT_ASSERT_MSG(rc == CT_EPARSE || rc == CT_ERANGE_VALUE, "\"%s\"", bad[i]);
        CT_ASSERT_STR_CONTAINS(eb.msg, "is not a comma-separated list of local ranks");
        CT_ASSERT(f.ranks == NULL);
    }
}

static ctrun_std_spec_t ct__std(const char *t)
{
    ctrun_std_spec_t s;
    CT_ASSERT_OK(ctrun_std_parse(t, &s, NULL));
    return s;
}

/* "f" file, "c" console, "p" prefixed, "-" discarded; out and err of one rank. */
static const char *ct__plan(const char *redir, const char *tee, const char *filter, bool files,
                            int lr)
{
    static char buf[16];
    ctrun_std_spec_t r = ct__std(redir), t = ct__std(tee);
    ctrun_rank_filter_t f;
    CT_ASSERT_OK(ctrun_rank_filter_parse(filter, &f, NULL));
    buf[0] = '\0';
    for (int s = 0; s < 2; s++) {
        ctrun_stream_plan_t p = ctrun_logs_plan(&r, &t, &f, files, lr, (ctrun_stream_t)s);
        if (!p.to_file && !p.to_console)
            strcat(buf, "-");
        if (p.to_file)
            strcat(buf, "f");
        if (p.to_console)
            strcat(buf, "c");
        if (p.prefixed)
            strcat(buf, "p");
        strcat(buf, s == 0 ? "/" : "");
    }
    ctrun_rank_filter_free(&f);
    return buf;
}

static void test_plans(void)
{
    /* Default: console, no files, no prefix. */
    CT_ASSERT_STR_EQ(ct__plan("0", "0", "", true, 0), "c/c");
    /* --tee 1 (item 26): stdout to file and prefixed console, stderr plain console. */
    CT_ASSERT_STR_EQ(ct__plan("0", "1", "", true, 1), "fcp/c");
    /* --redirects 1 (item 27): stdout only in the file. */
    CT_ASSERT_STR_EQ(ct__plan("1", "0", "", true, 0), "f/c");
    CT_ASSERT_STR_EQ(ct__plan("3", "0", "", true, 0), "f/f");
    /* Redirect and tee together: tee wins for the console. */
    CT_ASSERT_STR_EQ(ct__plan("3", "2", "", true, 0), "f/fcp");
    /* Per-rank maps: only rank 0 redirected. */
    CT_ASSERT_STR_EQ(ct__plan("0:1", "0", "", true, 0), "f/c");
    CT_ASSERT_STR_EQ(ct__plan("0:1", "0", "", true, 1), "c/c");
    /* --local_ranks_filter 0 (item 33): rank 1 discarded without tee, file-only with tee. */
    CT_ASSERT_STR_EQ(ct__plan("0", "0", "0", true, 0), "c/c");
    CT_ASSERT_STR_EQ(ct__plan("0", "0", "0", true, 1), "-/-");
    CT_ASSERT_STR_EQ(ct__plan("0", "3", "0", true, 0), "fcp/fcp");
    CT_ASSERT_STR_EQ(ct__plan("0", "3", "0", true, 1), "f/f");
    /* --log_dir /dev/null: no files; tee still reaches the console. */
    CT_ASSERT_STR_EQ(ct__plan("1", "2", "", false, 0), "-/cp");
}

static void test_prefix(void)
{
    char *p = NULL;
    CT_ASSERT_OK(ctrun_logs_prefix(NULL, "default", 5, 0, 2, 0, &p));
    CT_ASSERT_STR_EQ(p, "[default0]:");
    free(p);
    CT_ASSERT_OK(ctrun_logs_prefix(NULL, "trainer", 5, 3, 2, 0, &p));
    CT_ASSERT_STR_EQ(p, "[trainer3]:");
    free(p);
    CT_ASSERT_OK(ctrun_logs_prefix("[${role_name}:${rank}/$local_rank g$group_rank "
                                   "a${restart_count} $other $$]: ",
                                   "default", 5, 1, 2, 4, &p));
    CT_ASSERT_STR_EQ(p, "[default:5/1 g2 a4 $other $]: ");
    free(p);
}

static int ct__count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static bool ct__is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static void test_layout(void)
{
    char base[] = "/tmp/ctrun_logs_test_XXXXXX";
    CT_ASSERT(mkdtemp(base) != NULL);
    char log_dir[PATH_MAX];
    snprintf(log_dir, sizeof log_dir, "%s/deep/er", base); /* made with its parents */
    ct_errbuf_t eb = {{0}};
    ctrun_logs_t a, b;
    CT_ASSERT_OK(ctrun_logs_init(&a, log_dir, NULL, "job", &eb));
    CT_ASSERT_OK(ctrun_logs_init(&b, log_dir, NULL, "job", &eb));
    CT_ASSERT(!a.disabled && !a.base_created);
    CT_ASSERT_STR_EQ(a.base_dir, log_dir);
    /* <log_dir>/job_<8 chars of [a-z0-9_]>, a different one per agent (item 28). */
    size_t bl = strlen(log_dir);
    CT_ASSERT_EQ(strncmp(a.run_dir, log_dir, bl), 0);
    const char *leaf = a.run_dir + bl;
    CT_ASSERT_EQ(strlen(leaf), strlen("/job_") + 8);
    CT_ASSERT_EQ(strncmp(leaf, "/job_", 5), 0);
    CT_ASSERT_EQ(strspn(leaf + 5, "abcdefghijklmnopqrstuvwxyz0123456789_"), 8);
    CT_ASSERT(strcmp(a.run_dir, b.run_dir) != 0);
    struct stat st;
    CT_ASSERT_EQ(stat(a.run_dir, &st), 0);
    CT_ASSERT_EQ(st.st_mode & 0777, 0700);
    CT_ASSERT_EQ(ct__count_entries(log_dir), 2);

    /* Attempt folders with one folder per local rank; paths of the three files. */
    CT_ASSERT_OK(ctrun_logs_attempt_prepare(&a, 0, 3, &eb));
    char p[PATH_MAX], want[PATH_MAX];
    CT_ASSERT_OK(ctrun_logs_path(&a, 0, 2, CTRUN_LOG_ERROR, p, sizeof p));
    snprintf(want, sizeof want, "%s/attempt_0/2/error.json", a.run_dir);
    CT_ASSERT_STR_EQ(p, want);
    CT_ASSERT_OK(ctrun_logs_path(&a, 0, 1, CTRUN_LOG_STDOUT, p, sizeof p));
    snprintf(want, sizeof want, "%s/attempt_0/1/stdout.log", a.run_dir);
    CT_ASSERT_STR_EQ(p, want);
    CT_ASSERT_OK(ctrun_logs_path(&a, 7, 0, CTRUN_LOG_STDERR, p, sizeof p));
    snprintf(want, sizeof want, "%s/attempt_7/0/stderr.log", a.run_dir);
    CT_ASSERT_STR_EQ(p, want);
    CT_ASSERT_EQ(ctrun_logs_path(&a, 0, 0, CTRUN_LOG_STDERR, p, 10), -ENAMETOOLONG);
    snprintf(want, sizeof want, "%s/attempt_0", a.run_dir);
    CT_ASSERT_EQ(ct__count_entries(want), 3);
    /* The error file's folder exists, the file does not (item 8). */
    CT_ASSERT_OK(ctrun_logs_path(&a, 0, 2, CTRUN_LOG_ERROR, p, sizeof p));
    CT_ASSERT_EQ(access(p, F_OK), -1);

    /* Log files open for writing; an attempt folder is wiped when prepared again. */
    int fd = -1;
    CT_ASSERT_OK(ctrun_logs_open(&a, 0, 1, CTRUN_STREAM_STDERR, &fd, &eb));
    CT_ASSERT_EQ(write(fd, "x\n", 2), 2);
    CT_ASSERT(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    close(fd);
    snprintf(want, sizeof want, "%s/attempt_0/1/stderr.log", a.run_dir);
    CT_ASSERT_EQ(access(want, F_OK), 0);
    CT_ASSERT_OK(ctrun_logs_attempt_prepare(&a, 0, 2, &eb));
    CT_ASSERT_EQ(access(want, F_OK), -1);
    snprintf(want, sizeof want, "%s/attempt_0", a.run_dir);
    CT_ASSERT_EQ(ct__count_entries(want), 2);
    CT_ASSERT_OK(ctrun_logs_attempt_prepare(&a, 1, 2, &eb));
    CT_ASSERT_EQ(ct__count_entries(a.run_dir), 2);

    /* Clean-up keeps folders that hold files and removes the rest. */
    CT_ASSERT_OK(ctrun_logs_open(&a, 1, 0, CTRUN_STREAM_STDOUT, &fd, &eb));
    close(fd);
    ctrun_logs_remove_empty(&a);
    snprintf(want, sizeof want, "%s/attempt_1/0/stdout.log", a.run_dir);
    CT_ASSERT_EQ(access(want, F_OK), 0);
    snprintf(want, sizeof want, "%s/attempt_1/1", a.run_dir);
    CT_ASSERT(!ct__is_dir(want));
    snprintf(want, sizeof want, "%s/attempt_0", a.run_dir);
    CT_ASSERT(!ct__is_dir(want));
    ctrun_logs_remove_empty(&b); /* b had nothing: its run folder goes, the log dir stays */
    CT_ASSERT(!ct__is_dir(b.run_dir));
    CT_ASSERT(ct__is_dir(log_dir));
    ctrun_logs_close(&a);
    ctrun_logs_close(&b);
    ctrun_logs_close(&b);

    /* A relative --log_dir gives absolute paths (workers may change directory). */
    char cwd[PATH_MAX];
    CT_ASSERT(getcwd(cwd, sizeof cwd) != NULL);
    CT_ASSERT_EQ(chdir(base), 0);
    CT_ASSERT_OK(ctrun_logs_init(&a, "rel/logs", NULL, "none", &eb));
    snprintf(want, sizeof want, "%s/rel/logs/none_", base);
    CT_ASSERT_EQ(strncmp(a.run_dir, want, strlen(want)), 0);
    ctrun_logs_close(&a);
    CT_ASSERT_EQ(chdir(cwd), 0);

    /* Errors: a run id with '/', a log dir that is a file. */
    CT_ASSERT_ERR(ctrun_logs_init(&a, log_dir, NULL, "a/b", &eb), CT_EPARSE);
    snprintf(want, sizeof want, "%s/file", base);
    close(open(want, O_CREAT | O_WRONLY, 0600));
    CT_ASSERT_EQ(ctrun_logs_init(&a, want, NULL, "job", &eb), -ENOTDIR);
    CT_ASSERT_STR_CONTAINS(eb.msg, want);
    snprintf(want, sizeof want, "%s/file/sub", base);
    CT_ASSERT_EQ(ctrun_logs_init(&a, want, NULL, "job", &eb), -ENOTDIR);
    CT_ASSERT_STR_CONTAINS(eb.msg, "cannot create log folder");

    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    CT_ASSERT_EQ(system(cmd), 0);
}

static void test_temp_and_disabled(void)
{
    char tmp[] = "/tmp/ctrun_logs_tmp_XXXXXX";
    CT_ASSERT(mkdtemp(tmp) != NULL);
    /* TMPDIR, TEMP, TMP: the first writable folder, as Python's tempfile picks it. */
    const char *none[] = {NULL, "", "/nonexistent-ctrun-dir"};
    CT_ASSERT_STR_EQ(ctrun_logs_tmpdir(none, 3), "/tmp");
    const char *third[] = {NULL, "/nonexistent-ctrun-dir", tmp};
    CT_ASSERT_STR_EQ(ctrun_logs_tmpdir(third, 3), tmp);
    const char *first[] = {tmp, "/tmp", NULL};
    CT_ASSERT_STR_EQ(ctrun_logs_tmpdir(first, 3), tmp);
    ctrun_logs_t l;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ctrun_logs_init(&l, NULL, tmp, "none", &eb));
    CT_ASSERT(l.base_created);
    CT_ASSERT_EQ(strncmp(l.base_dir, tmp, strlen(tmp)), 0);
    CT_ASSERT_EQ(strncmp(l.base_dir + strlen(tmp), "/ctrun_", 7), 0);
    CT_ASSERT_EQ(strlen(l.base_dir), strlen(tmp) + 7 + 8);
    CT_ASSERT_OK(ctrun_logs_attempt_prepare(&l, 0, 1, &eb));
    ctrun_logs_remove_empty(&l); /* nothing written: the temp base folder goes too */
    CT_ASSERT_EQ(ct__count_entries(tmp), 0);
    ctrun_logs_close(&l);
    CT_ASSERT_OK(ctrun_logs_init(&l, "", tmp, "none", &eb)); /* "" is no log dir */
    CT_ASSERT(l.base_created);
    ctrun_logs_remove_empty(&l);
    ctrun_logs_close(&l);
    CT_ASSERT_EQ(rmdir(tmp), 0);

    CT_ASSERT_OK(ctrun_logs_init(&l, "/dev/null", NULL, "none", &eb));
    CT_ASSERT(l.disabled && l.run_dir == NULL);
    CT_ASSERT_OK(ctrun_logs_attempt_prepare(&l, 0, 4, &eb));
    char p[64] = "junk";
    CT_ASSERT_OK(ctrun_logs_path(&l, 0, 0, CTRUN_LOG_ERROR, p, sizeof p));
    CT_ASSERT_STR_EQ(p, "");
    int fd;
    CT_ASSERT_EQ(ctrun_logs_open(&l, 0, 0, CTRUN_STREAM_STDOUT, &fd, &eb), -ENOENT);
    ctrun_logs_remove_empty(&l);
    ctrun_logs_close(&l);
}

/* torchrun's comma_separated_list: ",," is a comma inside a needle; "" is one empty needle. */
static void test_line_filters(void)
{
    static const struct {
        const char *text;
        size_t count;
        const char *needles[4];
    } cases[] = {
        {"apple,orange", 2, {"apple", "orange"}},
        {"a,,b", 1, {"a,b"}},
        {"a,,,b", 2, {"a,", "b"}},
        {"", 1, {""}},
        {",x,", 3, {"", "x", ""}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ctrun_line_filter_t f;
        ct_errbuf_t eb = {{0}};
        CT_ASSERT_OK(ctrun_line_filter_parse(cases[i].text, &f, &eb));
        CT_ASSERT_MSG(f.count == cases[i].count, "case %zu: %zu needles", i, f.count);
        for (size_t k = 0; k < f.count; k++)
            CT_ASSERT_STR_EQ(f.needles[k], cases[i].needles[k]);
        ctrun_line_filter_free(&f);
    }
    ctrun_line_filter_t f;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ctrun_line_filter_parse("needle", &f, &eb));
    CT_ASSERT(ctrun_line_filter_match(&f, "a needle", 8, "", 0));
    CT_ASSERT(ctrun_line_filter_match(&f, "nee", 3, "dle\n", 4)); /* across the two pieces */
    CT_ASSERT(ctrun_line_filter_match(&f, "", 0, "needle", 6));
    CT_ASSERT(!ctrun_line_filter_match(&f, "needl", 5, "", 0));
    CT_ASSERT(!ctrun_line_filter_match(&f, "need", 4, "x", 1));
    ctrun_line_filter_free(&f);
    CT_ASSERT_OK(ctrun_line_filter_parse("", &f, &eb));
    CT_ASSERT(ctrun_line_filter_match(&f, "", 0, "", 0));
    ctrun_line_filter_free(&f);
}

int main(void)
{
    CT_RUN(test_std_grammar);
    CT_RUN(test_rank_filter);
    CT_RUN(test_plans);
    CT_RUN(test_prefix);
    CT_RUN(test_layout);
    CT_RUN(test_temp_and_disabled);
    CT_RUN(test_line_filters);
    return 0;
}
