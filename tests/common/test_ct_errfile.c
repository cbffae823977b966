/*
 * test_ct_errfile.c - the TORCHELASTIC_ERROR_FILE reader and writer: both layouts PyTorch
 * writes, tolerant reading of odd timestamps, clear errors for missing and malformed files,
 * byte-exact output in Python's json.dumps style, and the launcher's copy with errorCode.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_errfile.h"
#include "ct_test.h"

static char ct__dir[] = "/tmp/ct_errfile_test_XXXXXX";

static void ct__path(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", ct__dir, name);
}

static void ct__write(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CT_ASSERT(f != NULL);
    fputs(text, f);
    fclose(f);
}

static char *ct__slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    CT_ASSERT(f != NULL);
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void test_read_record_layout(void)
{
    char p[256];
    ct__path(p, sizeof p, "record.json");
    /* What @record wrote in the 1.13 run (docs/torchrun-compatibility.md §4.8). */
    ct__write(p,
              "{\"message\": {\"message\": \"ValueError: boom\", \"extraInfo\": {\"py_callstack\": "
              "\"Traceback (most recent call last):\\n  File \\\"x.py\\\", line 3\\nValueError: "
              "boom\\n\", \"timestamp\": \"1700000000\"}}}");
    ct_errfile_t ef;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ct_errfile_read(p, &ef, &eb));
    CT_ASSERT(ef.dict_form);
    CT_ASSERT_STR_EQ(ef.message, "ValueError: boom");
    CT_ASSERT_STR_EQ(
        ef.traceback,
        "Traceback (most recent call last):\n  File \"x.py\", line 3\nValueError: boom\n");
    CT_ASSERT_EQ(ef.timestamp, 1700000000);
    CT_ASSERT(!ef.has_error_code);
    ct_errfile_free(&ef);
    ct_errfile_free(&ef); /* twice is allowed */
}

static void test_read_string_layout_and_odd_fields(void)
{
    char p[256];
    ct__path(p, sizeof p, "string.json");
    ct__write(p, "{\"message\": \"plain text\", \"timestamp\": 1600000000}");
    ct_errfile_t ef;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ct_errfile_read(p, &ef, &eb));
    CT_ASSERT(!ef.dict_form);
    CT_ASSERT_STR_EQ(ef.message, "plain text");
    CT_ASSERT(ef.traceback == NULL);
    CT_ASSERT_EQ(ef.timestamp, 1600000000);
    ct_errfile_free(&ef);

    /* A numeric timestamp, no py_callstack, an errorCode: all tolerated. */
    ct__write(p, "{\"message\": {\"message\": \"X\", \"extraInfo\": {\"timestamp\": 5}, "
                 "\"errorCode\": -11}}");
    CT_ASSERT_OK(ct_errfile_read(p, &ef, &eb));
    CT_ASSERT_STR_EQ(ef.message, "X");
    CT_ASSERT(ef.traceback == NULL);
    CT_ASSERT_EQ(ef.timestamp, 5);
    CT_ASSERT(ef.has_error_code);
    CT_ASSERT_EQ(ef.error_code, -11);
    ct_errfile_free(&ef);

    /* A timestamp that is not a number reads as 0 rather than failing. */
    ct__write(p, "{\"message\": {\"message\": \"X\", \"extraInfo\": {\"timestamp\": \"soon\"}}}");
    CT_ASSERT_OK(ct_errfile_read(p, &ef, &eb));
    CT_ASSERT_EQ(ef.timestamp, 0);
    ct_errfile_free(&ef);
}

static void test_read_errors(void)
{
    char p[256];
    ct_errfile_t ef;
    ct_errbuf_t eb = {{0}};
    ct__path(p, sizeof p, "absent.json");
    CT_ASSERT_EQ(ct_errfile_read(p, &ef, &eb), -ENOENT);
    CT_ASSERT_STR_CONTAINS(eb.msg, "absent.json");

    ct__path(p, sizeof p, "bad.json");
    ct__write(p, "{\"message\": {\"message\": \"cut off");
    CT_ASSERT_ERR(ct_errfile_read(p, &ef, &eb), CT_EFORMAT);
    CT_ASSERT_STR_CONTAINS(eb.msg, "bad.json is not valid JSON (line 1");

    ct__write(p, "");
    CT_ASSERT_ERR(ct_errfile_read(p, &ef, &eb), CT_EFORMAT);

    ct__write(p, "[1, 2]");
    CT_ASSERT_ERR(ct_errfile_read(p, &ef, &eb), CT_EFORMAT);
    CT_ASSERT_STR_CONTAINS(eb.msg, "has no \"message\" field");
}

static void test_write_is_python_json(void)
{
    char p[256];
    ct__path(p, sizeof p, "out.json");
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ct_errfile_write_path(p, "RuntimeError: NCCL error", "frame 1\nframe 2\n",
                                       1700000001, 0, &eb));
    CT_ASSERT_STR_EQ(
        ct__slurp(p),
        "{\"message\": {\"message\": \"RuntimeError: NCCL error\", \"extraInfo\": "
        "{\"py_callstack\": \"frame 1\\nframe 2\\n\", \"timestamp\": \"1700000001\"}}}");
    /* Non-ASCII is escaped as json.dumps does by default; errorCode when given. */
    CT_ASSERT_OK(ct_errfile_write_path(p, "caf\xc3\xa9", NULL, 7, 3, &eb));
    CT_ASSERT_STR_EQ(ct__slurp(p), "{\"message\": {\"message\": \"caf\\u00e9\", \"extraInfo\": "
                                   "{\"py_callstack\": \"\", \"timestamp\": \"7\"}, "
                                   "\"errorCode\": 3}}");
    /* Round trip. */
    ct_errfile_t ef;
    CT_ASSERT_OK(ct_errfile_read(p, &ef, &eb));
    CT_ASSERT_STR_EQ(ef.message, "caf\xc3\xa9");
    CT_ASSERT_EQ(ef.error_code, 3);
    ct_errfile_free(&ef);

    /* Invalid UTF-8 becomes U+FFFD (a crash message must still get out); a negative exit
     * code (a signal) is written signed. */
    CT_ASSERT_OK(ct_errfile_write_path(p, "\xff\xfe", NULL, 1, -11, &eb));
    CT_ASSERT_STR_EQ(ct__slurp(p), "{\"message\": {\"message\": \"\\ufffd\\ufffd\", \"extraInfo\": "
                                   "{\"py_callstack\": \"\", \"timestamp\": \"1\"}, "
                                   "\"errorCode\": -11}}");

    /* An unwritable place is an errno error naming the path, with no temp file left. */
    CT_ASSERT_EQ(ct_errfile_write_path("/nonexistent-dir/e.json", "m", NULL, 1, 0, &eb), -ENOENT);
    CT_ASSERT_STR_CONTAINS(eb.msg, "/nonexistent-dir/e.json");
}

static void test_copy_adds_error_code(void)
{
    char src[256], dst[256];
    ct__path(src, sizeof src, "child.json");
    ct__path(dst, sizeof dst, "parent.json");
    ct_errbuf_t eb = {{0}};
    ct__write(src,
              "{\"message\": {\"message\": \"E: x\", \"extraInfo\": {\"py_callstack\": \"tb\", "
              "\"timestamp\": \"9\"}}}");
    ct__write(dst, "old content that must go");
    CT_ASSERT_OK(ct_errfile_copy(src, dst, -11, &eb));
    CT_ASSERT_STR_EQ(ct__slurp(dst), "{\"message\": {\"message\": \"E: x\", \"extraInfo\": "
                                     "{\"py_callstack\": \"tb\", \"timestamp\": \"9\"}, "
                                     "\"errorCode\": -11}}");
    /* The string layout is copied unchanged (torchrun skips the override there). */
    ct__write(src, "{\"message\": \"text\", \"timestamp\": 4}");
    CT_ASSERT_OK(ct_errfile_copy(src, dst, 1, &eb));
    CT_ASSERT_STR_EQ(ct__slurp(dst), "{\"message\": \"text\", \"timestamp\": 4}");
    /* A malformed source is reported, the destination untouched. */
    ct__write(src, "nope");
    CT_ASSERT_ERR(ct_errfile_copy(src, dst, 1, &eb), CT_EFORMAT);
    CT_ASSERT_STR_EQ(ct__slurp(dst), "{\"message\": \"text\", \"timestamp\": 4}");
}

static void ct__cleanup(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", ct__dir);
    CT_ASSERT_EQ(system(cmd), 0);
}

int main(void)
{
    CT_ASSERT(mkdtemp(ct__dir) != NULL);
    CT_RUN(test_read_record_layout);
    CT_RUN(test_read_string_layout_and_odd_fields);
    CT_RUN(test_read_errors);
    CT_RUN(test_write_is_python_json);
    CT_RUN(test_copy_adds_error_code);
    ct__cleanup();
    return 0;
}
