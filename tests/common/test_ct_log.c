/*
 * test_ct_log.c - log lines: prefix and level format, threshold from CT_LOG_LEVEL, bad level
 * values reported, one write per line with long messages cut, arguments of disabled lines not
 * evaluated, an output function taking every line instead of stderr.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "ct_log.h"
#include "ct_test.h"

/* Runs fn with stderr redirected to a temporary file and returns what it wrote. */
static char captured[8192];
static const char *capture(void (*fn)(void))
{
    char path[] = "/tmp/ct_log_testXXXXXX";
    int fd = mkstemp(path);
    CT_ASSERT(fd >= 0);
    unlink(path);
    int saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    fn();
    dup2(saved, STDERR_FILENO);
    close(saved);
    off_t n = lseek(fd, 0, SEEK_CUR);
    lseek(fd, 0, SEEK_SET);
    ssize_t r = read(fd, captured, sizeof captured - 1);
    close(fd);
    CT_ASSERT_EQ(r, n);
    captured[r < 0 ? 0 : r] = '\0';
    return captured;
}

static void emit_levels(void)
{
    ct_log_debug("d %d", 1);
    ct_log_info("i %s", "two");
    ct_log_warn("w");
    ct_log_error("e\n");
}

static void test_format_and_threshold(void)
{
    ct_log_set_prefix("[ctrun]");
    ct_log_set_level(CT_LOG_INFO);
    CT_ASSERT_STR_EQ(capture(emit_levels), "[ctrun] info: i two\n[ctrun] warn: w\n[ctrun] error: e\n");
    ct_log_set_level(CT_LOG_DEBUG);
    CT_ASSERT_STR_CONTAINS(capture(emit_levels), "[ctrun] debug: d 1\n");
    ct_log_set_level(CT_LOG_OFF);
    CT_ASSERT_STR_EQ(capture(emit_levels), "");
    ct_log_set_prefix("");
    ct_log_set_level(CT_LOG_WARN);
    CT_ASSERT_STR_EQ(capture(emit_levels), "warn: w\nerror: e\n");
}

static int evaluated;
static int side_effect(void)
{
    return ++evaluated;
}
static void emit_disabled(void)
{
    ct_log_debug("%d", side_effect());
}

static void test_disabled_lines_do_not_evaluate(void)
{
    ct_log_set_level(CT_LOG_INFO);
    evaluated = 0;
    CT_ASSERT_STR_EQ(capture(emit_disabled), "");
    CT_ASSERT_EQ(evaluated, 0);
}

static void emit_long(void)
{
    char big[6000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ct_log_warn("%s", big);
}

static void test_long_line_is_cut(void)
{
    ct_log_set_prefix("[rank 0/2]");
    ct_log_set_level(CT_LOG_INFO);
    const char *out = capture(emit_long);
    size_t n = strlen(out);
    CT_ASSERT_LE(n, 4096);
    CT_ASSERT_EQ(out[n - 1], '\n');
    CT_ASSERT(memcmp(out + n - 4, "...\n", 4) == 0);
    CT_ASSERT(strncmp(out, "[rank 0/2] warn: xxx", 20) == 0);
}

static void test_level_from_environment(void)
{
    ct_errbuf_t eb;
    setenv("CT_LOG_LEVEL", "error", 1);
    CT_ASSERT_OK(ct_log_init("[t]", &eb));
    CT_ASSERT_EQ(ct_log_get_level(), CT_LOG_ERROR);
    setenv("CT_LOG_LEVEL", "WARNING", 1);
    CT_ASSERT_OK(ct_log_init("[t]", &eb));
    CT_ASSERT_EQ(ct_log_get_level(), CT_LOG_WARN);
    setenv("CT_LOG_LEVEL", "0", 1);
    CT_ASSERT_OK(ct_log_init("[t]", &eb));
    CT_ASSERT_EQ(ct_log_get_level(), CT_LOG_DEBUG);

    ct_log_set_level(CT_LOG_INFO);
    setenv("CT_LOG_LEVEL", "loud", 1);
    CT_ASSERT_ERR(ct_log_init("[t]", &eb), CT_EPARSE);
    CT_ASSERT_STR_EQ(eb.msg, "CT_LOG_LEVEL: unknown log level \"loud\" (expected debug, info, "
                             "warn, error or off)");
    CT_ASSERT_EQ(ct_log_get_level(), CT_LOG_INFO); /* unchanged */
    setenv("CT_LOG_LEVEL", "", 1);
    CT_ASSERT_ERR(ct_log_init("[t]", &eb), CT_EPARSE);
    unsetenv("CT_LOG_LEVEL");
    CT_ASSERT_OK(ct_log_init("[t]", &eb));
}

static char hooked[256];
static size_t hooked_len;
static void hook(const char *line, size_t nbytes, void *arg)
{
    CT_ASSERT_STR_EQ((const char *)arg, "arg");
    CT_ASSERT_LT(hooked_len + nbytes, sizeof hooked);
    memcpy(hooked + hooked_len, line, nbytes);
    hooked_len += nbytes;
    hooked[hooked_len] = '\0';
}
static void emit_two(void)
{
    ct_log_warn("first");
    ct_log_error("second %d", 2);
}

static void test_output_function(void)
{
    /* With an output function every line goes there, whole, and nothing to stderr. */
    ct_log_set_prefix("[ctrun]");
    ct_log_set_level(CT_LOG_WARN);
    ct_log_set_output(hook, "arg");
    CT_ASSERT_STR_EQ(capture(emit_two), "");
    CT_ASSERT_STR_EQ(hooked, "[ctrun] warn: first\n[ctrun] error: second 2\n");
    ct_log_set_output(NULL, NULL);
    CT_ASSERT_STR_EQ(capture(emit_two), "[ctrun] warn: first\n[ctrun] error: second 2\n");
}

int main(void)
{
    CT_RUN(test_format_and_threshold);
    CT_RUN(test_disabled_lines_do_not_evaluate);
    CT_RUN(test_long_line_is_cut);
    CT_RUN(test_level_from_environment);
    CT_RUN(test_output_function);
    return 0;
}
