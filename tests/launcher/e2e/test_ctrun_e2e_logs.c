/*
 * test_ctrun_e2e_logs.c - where worker output goes, with ctrun (argv[1]) and the test worker
 * (argv[2]): the --log_dir layout (<run_id>_<8 chars>/attempt_<k>/<local_rank>/), --redirects
 * and --tee (all ranks and per rank), the [<role><local_rank>]: prefix and its template,
 * --local_ranks_filter with and without tee, a long line without a newline (raw in the file,
 * cut into whole console lines), one run folder per run, and --log_dir /dev/null.
 */
#include "ctrun_e2e.h"

static void run_job(ct_child_t *c, const char *logs, const char *const *flags,
                    const char *const *worker_args, const char *const *env)
{
    char port[32];
    snprintf(port, sizeof port, "--master_port=%d", e2e_free_port());
    const char *args[64] = {"--nproc_per_node=2", port, "--log_dir", logs};
    size_t n = 4;
    for (size_t i = 0; flags[i] != NULL; i++)
        args[n++] = flags[i];
    args[n++] = "--no_python";
    args[n++] = "WORKER";
    for (size_t i = 0; worker_args[i] != NULL; i++)
        args[n++] = worker_args[i];
    args[n] = NULL;
    e2e_run(c, env, args);
    CT_ASSERT_MSG(c->exit_code == 0, "exit %d:\n%s", c->exit_code, c->err);
}

static const char *const hello[] = {"--out", "hello ${local_rank}", "--err", "oops ${local_rank}",
                                    NULL};

static void test_redirect_all(void)
{
    char logs[600], rd[1200];
    e2e_dir(logs, sizeof logs, "redirect");
    const char *const flags[] = {"--redirects", "3", "--rdzv_id", "job1", NULL};
    ct_child_t c;
    run_job(&c, logs, flags, hello, NULL);
    CT_ASSERT_STR_NOT_CONTAINS(c.out, "hello");
    CT_ASSERT_STR_NOT_CONTAINS(c.err, "oops");
    e2e_run_dir(logs, rd, sizeof rd);
    CT_ASSERT_MSG(strncmp(strrchr(rd, '/') + 1, "job1_", 5) == 0 && strlen(strrchr(rd, '/')) == 14,
                  "run folder %s", rd);
    for (int r = 0; r < 2; r++) {
        char want[32];
        char *out = e2e_read("%s/attempt_0/%d/stdout.log", rd, r);
        char *err = e2e_read("%s/attempt_0/%d/stderr.log", rd, r);
        CT_ASSERT(out != NULL && err != NULL);
        snprintf(want, sizeof want, "hello %d\n", r);
        CT_ASSERT_STR_EQ(out, want);
        snprintf(want, sizeof want, "oops %d\n", r);
        CT_ASSERT_STR_EQ(err, want);
        free(out);
        free(err);
    }
    ct_child_close(&c);
}

static void test_tee_stdout_with_role(void)
{
    char logs[600], rd[1200];
    e2e_dir(logs, sizeof logs, "tee");
    const char *const flags[] = {"--tee", "1", "--role", "trainer", NULL};
    ct_child_t c;
    run_job(&c, logs, flags, hello, NULL);
    CT_ASSERT_STR_CONTAINS(c.out, "[trainer0]:hello 0\n");
    CT_ASSERT_STR_CONTAINS(c.out, "[trainer1]:hello 1\n");
    /* stderr is neither tee'd nor redirected: plain console lines, no file. */
    CT_ASSERT_STR_CONTAINS(c.err, "\noops 0\n");
    CT_ASSERT_STR_CONTAINS(c.err, "\noops 1\n");
    e2e_run_dir(logs, rd, sizeof rd);
    char *out = e2e_read("%s/attempt_0/0/stdout.log", rd);
    CT_ASSERT_STR_EQ(out, "hello 0\n");
    free(out);
    CT_ASSERT(!e2e_exists("%s/attempt_0/0/stderr.log", rd));
    ct_child_close(&c);
}

static void test_prefix_template(void)
{
    char logs[600];
    e2e_dir(logs, sizeof logs, "template");
    const char *const env[] = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=[${rank}]: ", NULL};
    const char *const flags[] = {"--tee", "3", NULL};
    ct_child_t c;
    run_job(&c, logs, flags, hello, env);
    CT_ASSERT_STR_CONTAINS(c.out, "[1]: hello 1\n");
    CT_ASSERT_STR_CONTAINS(c.err, "[0]: oops 0\n");
    ct_child_close(&c);
}

static void test_redirect_map(void)
{
    char logs[600], rd[1200];
    e2e_dir(logs, sizeof logs, "map");
    const char *const flags[] = {"--redirects", "0:1", NULL};
    ct_child_t c;
    run_job(&c, logs, flags, hello, NULL);
    CT_ASSERT_STR_NOT_CONTAINS(c.out, "hello 0");
    CT_ASSERT_STR_CONTAINS(c.out, "hello 1\n");
    e2e_run_dir(logs, rd, sizeof rd);
    CT_ASSERT(e2e_exists("%s/attempt_0/0/stdout.log", rd));
    CT_ASSERT(!e2e_exists("%s/attempt_0/1/stdout.log", rd));
    ct_child_close(&c);
}

static void test_local_ranks_filter(void)
{
    char logs[600], rd[1200];
    e2e_dir(logs, sizeof logs, "filter");
    const char *const flags[] = {"--local_ranks_filter", "0", NULL};
    ct_child_t c;
    run_job(&c, logs, flags, hello, NULL);
    CT_ASSERT_STR_CONTAINS(c.out, "hello 0\n");
    CT_ASSERT_STR_NOT_CONTAINS(c.out, "hello 1");
    CT_ASSERT_STR_NOT_CONTAINS(c.err, "oops 1");
    ct_child_close(&c);

    e2e_dir(logs, sizeof logs, "filter_tee");
    const char *const flags2[] = {"--local_ranks_filter", "0", "--tee", "3", NULL};
    run_job(&c, logs, flags2, hello, NULL);
    CT_ASSERT_STR_CONTAINS(c.out, "[default0]:hello 0\n");
    CT_ASSERT_STR_NOT_CONTAINS(c.out, "hello 1");
    e2e_run_dir(logs, rd, sizeof rd);
    char *out1 = e2e_read("%s/attempt_0/1/stdout.log", rd);
    CT_ASSERT_STR_EQ(out1, "hello 1\n");
    free(out1);
    ct_child_close(&c);
}

static void test_long_line_without_newline(void)
{
    char logs[600], rd[1200];
    e2e_dir(logs, sizeof logs, "long");
    const char *const flags[] = {"--tee", "1", NULL};
    const char *const wargs[] = {"--long", "200000", NULL};
    ct_child_t c;
    run_job(&c, logs, flags, wargs, NULL);
    e2e_run_dir(logs, rd, sizeof rd);
    for (int r = 0; r < 2; r++) {
        char *out = e2e_read("%s/attempt_0/%d/stdout.log", rd, r);
        CT_ASSERT(out != NULL);
        CT_ASSERT_EQ(strlen(out), 200000); /* raw bytes, nothing added */
        free(out);
    }
    /* Console: whole lines only, each a prefix and x's; 2 x 200000 x's in all. */
    size_t xs = 0;
    int lines = 0;
    for (char *p = c.out; *p != '\0';) {
        char *nl = strchr(p, '\n');
        CT_ASSERT(nl != NULL);
        CT_ASSERT(strncmp(p, "[default0]:", 11) == 0 || strncmp(p, "[default1]:", 11) == 0);
        for (char *q = p + 11; q < nl; q++)
            CT_ASSERT(*q == 'x');
        xs += (size_t)(nl - p - 11);
        lines++;
        p = nl + 1;
    }
    CT_ASSERT_EQ(xs, 400000);
    CT_ASSERT_GE(lines, 8); /* 64 KiB pieces: at least 4 per worker */
    ct_child_close(&c);
}

static void test_two_runs_two_folders_and_dev_null(void)
{
    char logs[600], dir[600];
    e2e_dir(logs, sizeof logs, "twice");
    e2e_dir(dir, sizeof dir, "twice_rec");
    const char *const flags[] = {"--redirects", "1", NULL};
    const char *const wargs[] = {"--out", "x", NULL};
    ct_child_t c;
    run_job(&c, logs, flags, wargs, NULL);
    ct_child_close(&c);
    run_job(&c, logs, flags, wargs, NULL);
    ct_child_close(&c);
    int n = 0;
    DIR *d = opendir(logs);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strncmp(e->d_name, "none_", 5) == 0;
    closedir(d);
    CT_ASSERT_EQ(n, 2);

    const char *const flags2[] = {"--tee", "3", NULL};
    const char *const wargs2[] = {"--dir", dir, "--out", "still here", NULL};
    run_job(&c, "/dev/null", flags2, wargs2, NULL);
    CT_ASSERT_STR_CONTAINS(c.out, "[default0]:still here\n");
    char *dump = e2e_read("%s/env.0.0", dir);
    E2E_ENV_EQ(dump, "TORCHELASTIC_ERROR_FILE", "");
    free(dump);
    ct_child_close(&c);
}

static void test_default_folder_is_removed(void)
{
    /* Without --log_dir the run lives in a new folder under TMPDIR; when no worker wrote a file
     * the whole folder goes away after the job (removed while ctrun exits). */
    char tmp[600], envt[700], port[32];
    e2e_dir(tmp, sizeof tmp, "tmpdir");
    snprintf(envt, sizeof envt, "TMPDIR=%s", tmp);
    snprintf(port, sizeof port, "--master_port=%d", e2e_free_port());
    const char *const env[] = {envt, NULL};
    const char *const args[] = {"--nproc_per_node=2", port, "--no_python", "WORKER", NULL};
    ct_child_t c;
    e2e_run(&c, env, args);
    CT_ASSERT_EQ(c.exit_code, 0);
    ct_child_close(&c);
    int64_t deadline = ct_time_ms() + 10000;
    for (;;) {
        int n = 0;
        DIR *d = opendir(tmp);
        CT_ASSERT(d != NULL);
        for (struct dirent *e; (e = readdir(d)) != NULL;)
            n += e->d_name[0] != '.';
        closedir(d);
        if (n == 0)
            break;
        CT_ASSERT_MSG(ct_time_ms() < deadline, "%d entries left in %s", n, tmp);
        ct_sleep_ms(20);
    }
}

int main(int argc, char **argv)
{
    e2e_init(argc, argv, "test_ctrun_e2e_logs");
    CT_RUN(test_redirect_all);
    CT_RUN(test_tee_stdout_with_role);
    CT_RUN(test_prefix_template);
    CT_RUN(test_redirect_map);
    CT_RUN(test_local_ranks_filter);
    CT_RUN(test_long_line_without_newline);
    CT_RUN(test_two_runs_two_folders_and_dev_null);
    CT_RUN(test_default_folder_is_removed);
    return 0;
}
