/*
 * test_errfile.c - the error file and the fatal paths: the async-signal-safe writer's JSON
 * (escapes, UTF-8, invalid bytes) parsed back with jansson; ct_worker_fail and the fatal-signal
 * handler in child processes (exit status, stderr, the file's message and C backtrace); the
 * file read by Python's json and, when PyTorch is present, by torchrun's own ProcessFailure /
 * ChildFailedError (check_errfile.py).
 *
 * Usage: test_errfile CHECK_SCRIPT. The children are this executable in a mode ("fail", ...).
 */
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_child.h"
#include "ct_errfile.h"
#include "ct_test.h"
#include "ctworker.h"

static char dir[256], errpath[512], self[4096];
static const char *check_script;

/* ---- child modes ----------------------------------------------------------------------------- */

static int child_main(const char *mode)
{
    ct_worker_env_t env;
    ct_errbuf_t eb;
    if (strcmp(mode, "fail") == 0)
        ct_worker_fail("bad thing: %d \"quoted\"\n", 42);
    if (ct_worker_env_read(&env, &eb) != 0)
        ct_worker_fail("%s", eb.msg);
    unsigned flags = strcmp(mode, "fail-setup") == 0 ? 0 : CT_WORKER_CATCH_SIGNALS;
    if (ct_worker_setup(&env, flags, &eb) != 0)
        ct_worker_fail("%s", eb.msg);
    if (strcmp(mode, "fail-setup") == 0)
        ct_worker_fail("after setup");
    if (strcmp(mode, "segv") == 0)
        raise(SIGSEGV);
    if (strcmp(mode, "abort") == 0)
        abort();
    if (strcmp(mode, "bus") == 0)
        raise(SIGBUS);
    if (strcmp(mode, "quiet") == 0) {
        ct_worker_cleanup();
        return 0;
    }
    return 3;
}

/* ---- helpers --------------------------------------------------------------------------------- */

static const char *python(void)
{
    const char *py = ct_test_torch2_python();
    return getenv("CTRUN_TORCH2_PYTHON") != NULL || access(py, X_OK) == 0 ? py : "python3";
}

/* check_errfile.py on errpath, with PyTorch's reader when with_torch (importing torch takes
 * seconds, so only a few cases ask for it); prints whether torch took part. */
static void python_check(const char *message, const char *fragment, bool with_torch)
{
    char *argv[] = {with_torch ? (char *)python() : "python3", (char *)check_script, errpath, (char *)message,
                    (char *)fragment, NULL};
    ct_child_t c;
    int rc = ct_child_run(&c, argv, NULL, 120000);
    if (rc == -ENOENT) {
        printf("# %s not found: Python check skipped\n", argv[0]);
        return;
    }
    CT_ASSERT_OK(rc);
    CT_ASSERT_MSG(c.exit_code == 0, "check_errfile.py: %s%s", c.out, c.err);
    printf("# %s: %s", argv[0], c.out);
    ct_child_close(&c);
}

static json_t *load_errfile(void)
{
    json_error_t jerr;
    json_t *j = json_load_file(errpath, 0, &jerr);
    CT_ASSERT_MSG(j != NULL, "%s: %s", errpath, jerr.text);
    return j;
}

static const char *jstr(json_t *root, const char *a, const char *b, const char *c)
{
    json_t *v = json_object_get(root, a);
    if (b != NULL)
        v = json_object_get(v, b);
    if (c != NULL)
        v = json_object_get(v, c);
    CT_ASSERT_MSG(json_is_string(v), "%s.%s.%s is not a string", a, b ? b : "", c ? c : "");
    return json_string_value(v);
}

static void run_child(ct_child_t *c, const char *mode, const char *const *env)
{
    char *argv[] = {self, "child", (char *)mode, NULL};
    ct_child_opts_t opts = {.env = env};
    CT_ASSERT_OK(ct_child_run(c, argv, &opts, 60000));
    CT_ASSERT(!c->timed_out);
}

/* ---- cases ------------------------------------------------------------------------------------ */

static void test_writer_escapes(void)
{
    unlink(errpath);
    /* quotes, backslash, control characters, 2- and 4-byte UTF-8, an invalid byte, DEL */
    const char *msg = "say \"hi\"\\ \t\n\x01 caf\xc3\xa9 \xf0\x9f\x98\x80 bad\xff end\x7f";
    const char *want = "say \"hi\"\\ \t\n\x01 caf\xc3\xa9 \xf0\x9f\x98\x80 bad\xef\xbf\xbd end\x7f";
    CT_ASSERT_OK(ct_errfile_write_path(errpath, msg, "line 1\nline 2\n", 1700000000, 0, NULL));
    FILE *f = fopen(errpath, "rb");
    CT_ASSERT(f != NULL);
    char raw[2048];
    size_t n = fread(raw, 1, sizeof raw - 1, f);
    fclose(f);
    raw[n] = '\0';
    for (size_t i = 0; i < n; i++)
        CT_ASSERT_MSG((unsigned char)raw[i] < 0x80, "non-ASCII byte at %zu", i);
    CT_ASSERT_STR_CONTAINS(raw, "\\ud83d\\ude00"); /* the emoji as a surrogate pair */
    CT_ASSERT_STR_CONTAINS(raw, "\"timestamp\": \"1700000000\"");
    json_t *j = load_errfile();
    CT_ASSERT_STR_EQ(jstr(j, "message", "message", NULL), want);
    CT_ASSERT_STR_EQ(jstr(j, "message", "extraInfo", "py_callstack"), "line 1\nline 2\n");
    CT_ASSERT_STR_EQ(jstr(j, "message", "extraInfo", "timestamp"), "1700000000");
    json_decref(j);
    python_check(want, "line 2", false);
}

static void test_writer_plain_and_errors(void)
{
    CT_ASSERT_OK(ct_errfile_write_path(errpath, "plain message", NULL, 1700000001, 0, NULL));
    json_t *j = load_errfile();
    CT_ASSERT_STR_EQ(jstr(j, "message", "extraInfo", "py_callstack"), "");
    json_decref(j);
    python_check("plain message", NULL, false);

    ct_errbuf_t eb;
    char bad[600];
    snprintf(bad, sizeof bad, "%s/missing-dir/error.json", dir);
    CT_ASSERT_ERR(ct_errfile_write_path(bad, "m", NULL, 1, 0, &eb), -ENOENT);
    CT_ASSERT_STR_CONTAINS(eb.msg, "cannot open its directory");
    snprintf(bad, sizeof bad, "%s/", dir);
    CT_ASSERT_ERR(ct_errfile_write_path(bad, "m", NULL, 1, 0, &eb), -EISDIR);
    ct_errfile_target_t t = {.dirfd = -1};
    CT_ASSERT_ERR(ct_errfile_write(&t, "m", NULL, 1, 0), -EBADF);
}

static void test_worker_fail(void)
{
    unlink(errpath);
    char envvar[600];
    snprintf(envvar, sizeof envvar, "TORCHELASTIC_ERROR_FILE=%s", errpath);
    const char *env[] = {envvar, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", NULL};
    ct_child_t c;
    run_child(&c, "fail", env);
    CT_ASSERT_EQ(c.exit_code, CT_WORKER_FAIL_EXIT);
    CT_ASSERT_STR_CONTAINS(c.err, "error: bad thing: 42 \"quoted\"\n");
    CT_ASSERT_STR_CONTAINS(c.err, "C backtrace (most recent call first):\n  #0 ");
    ct_child_close(&c);
    json_t *j = load_errfile();
    CT_ASSERT_STR_EQ(jstr(j, "message", "message", NULL), "bad thing: 42 \"quoted\"");
    const char *cs = jstr(j, "message", "extraInfo", "py_callstack");
    CT_ASSERT_STR_CONTAINS(cs, "C backtrace (most recent call first):\n  #0 ");
    CT_ASSERT_STR_CONTAINS(cs, "  #1 ");
    CT_ASSERT_STR_CONTAINS(cs, "test_errfile"); /* frames name the executable */
    json_decref(j);
    python_check("bad thing: 42 \"quoted\"", "C backtrace", true);
}

static void test_worker_fail_after_setup_and_bad_env(void)
{
    unlink(errpath);
    char envvar[600];
    snprintf(envvar, sizeof envvar, "TORCHELASTIC_ERROR_FILE=%s", errpath);
    const char *env[] = {envvar,         "RANK=1",          "WORLD_SIZE=2", "LOCAL_RANK=1",
                         "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500",
                         NULL};
    ct_child_t c;
    run_child(&c, "fail-setup", env);
    CT_ASSERT_EQ(c.exit_code, CT_WORKER_FAIL_EXIT);
    CT_ASSERT_STR_CONTAINS(c.err, "[rank 1/2] error: after setup\n");
    ct_child_close(&c);
    json_t *j = load_errfile();
    CT_ASSERT_STR_EQ(jstr(j, "message", "message", NULL), "after setup");
    json_decref(j);

    /* A bad environment is reported through the same path, before any setup. */
    unlink(errpath);
    env[1] = "RANK=5";
    run_child(&c, "fail-setup", env);
    CT_ASSERT_EQ(c.exit_code, CT_WORKER_FAIL_EXIT);
    ct_child_close(&c);
    j = load_errfile();
    CT_ASSERT_STR_EQ(jstr(j, "message", "message", NULL),
                     "environment variable RANK=5 is not below WORLD_SIZE=2");
    json_decref(j);

    /* Without TORCHELASTIC_ERROR_FILE: the message on stderr, no file anywhere. */
    unlink(errpath);
    const char *noenv[] = {"TORCHELASTIC_ERROR_FILE", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                           "LOCAL_WORLD_SIZE", NULL};
    run_child(&c, "fail", noenv);
    CT_ASSERT_EQ(c.exit_code, CT_WORKER_FAIL_EXIT);
    CT_ASSERT_STR_CONTAINS(c.err, "bad thing: 42");
    ct_child_close(&c);
    CT_ASSERT(access(errpath, F_OK) != 0);
}

/* Under AddressSanitizer the handler hands SEGV, BUS and FPE on to ASan's own handler (the one
 * installed before it), which reports and aborts; elsewhere the default action ends the
 * process with the signal itself. */
#if defined(__SANITIZE_ADDRESS__)
#define CT_UNDER_ASAN 1
#else
#define CT_UNDER_ASAN 0
#endif

static void check_signal_child(const char *mode, int sig, const char *signame)
{
    unlink(errpath);
    char envvar[600];
    snprintf(envvar, sizeof envvar, "TORCHELASTIC_ERROR_FILE=%s", errpath);
    const char *env[] = {envvar, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", NULL};
    ct_child_t c;
    run_child(&c, mode, env);
    if (CT_UNDER_ASAN && (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE))
        CT_ASSERT(c.term_signal != 0 || c.exit_code != 0);
    else
        CT_ASSERT_MSG(c.term_signal == sig, "exit %d signal %d: %s", c.exit_code, c.term_signal,
                      c.err);
    char want[128];
    snprintf(want, sizeof want, "Signal %d (%s) received by PID %d", sig, signame, (int)c.pid);
    CT_ASSERT_STR_CONTAINS(c.err, "[rank 0/1] fatal: ");
    CT_ASSERT_STR_CONTAINS(c.err, want);
    CT_ASSERT_STR_CONTAINS(c.err, "C backtrace (most recent call first):\n  #0 ");
    ct_child_close(&c);
    json_t *j = load_errfile();
    CT_ASSERT_STR_EQ(jstr(j, "message", "message", NULL), want);
    CT_ASSERT_STR_CONTAINS(jstr(j, "message", "extraInfo", "py_callstack"), "  #2 ");
    json_decref(j);
    python_check(want, "C backtrace", sig == SIGSEGV);
}

static void test_fatal_signals(void)
{
    check_signal_child("segv", SIGSEGV, "SIGSEGV");
    check_signal_child("abort", SIGABRT, "SIGABRT");
    check_signal_child("bus", SIGBUS, "SIGBUS");
}

static void test_handler_creates_nothing_without_a_crash(void)
{
    unlink(errpath);
    char envvar[600];
    snprintf(envvar, sizeof envvar, "TORCHELASTIC_ERROR_FILE=%s", errpath);
    const char *env[] = {envvar, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", NULL};
    ct_child_t c;
    run_child(&c, "quiet", env);
    CT_ASSERT_EQ(c.exit_code, 0);
    ct_child_close(&c);
    CT_ASSERT(access(errpath, F_OK) != 0); /* torchrun would try to parse an empty file */

    /* In-process: install and remove, dispositions restored. */
    setenv("TORCHELASTIC_ERROR_FILE", errpath, 1);
    struct sigaction before, during, after;
    sigaction(SIGSEGV, NULL, &before);
    CT_ASSERT_OK(ct_worker_catch_fatal_signals(NULL));
    CT_ASSERT_OK(ct_worker_catch_fatal_signals(NULL)); /* idempotent */
    sigaction(SIGSEGV, NULL, &during);
    CT_ASSERT(during.sa_flags & SA_SIGINFO);
    ct_worker_cleanup();
    sigaction(SIGSEGV, NULL, &after);
    CT_ASSERT(after.sa_handler == before.sa_handler);
    CT_ASSERT(access(errpath, F_OK) != 0);

    char bad[600];
    snprintf(bad, sizeof bad, "%s/missing-dir/error.json", dir);
    setenv("TORCHELASTIC_ERROR_FILE", bad, 1);
    ct_errbuf_t eb;
    CT_ASSERT_ERR(ct_worker_catch_fatal_signals(&eb), -ENOENT);
    CT_ASSERT_STR_CONTAINS(eb.msg, "fatal-signal handler: error file");
    unsetenv("TORCHELASTIC_ERROR_FILE");
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "child") == 0)
        return child_main(argv[2]);
    CT_ASSERT_MSG(argc == 2, "usage: test_errfile CHECK_SCRIPT");
    check_script = argv[1];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    CT_ASSERT(n > 0);
    self[n] = '\0';
    snprintf(dir, sizeof dir, "/tmp/ct-errfile-test.XXXXXX");
    CT_ASSERT(mkdtemp(dir) != NULL);
    snprintf(errpath, sizeof errpath, "%s/error.json", dir);
    CT_RUN(test_writer_escapes);
    CT_RUN(test_writer_plain_and_errors);
    CT_RUN(test_worker_fail);
    CT_RUN(test_worker_fail_after_setup_and_bad_env);
    CT_RUN(test_fatal_signals);
    CT_RUN(test_handler_creates_nothing_without_a_crash);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CT_ASSERT_EQ(system(cmd), 0);
    return 0;
}
