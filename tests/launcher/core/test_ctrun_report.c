/*
 * test_ctrun_report.c - the failure report, byte for byte against text produced by
 * torchrun 1.13's own ChildFailedError.format_msg (Debian python3-torch, TZ=UTC, host
 * "node-7.cluster", the same failures), minus its leading newline: exit code without an error
 * file, a signal, several failures with the root cause not first and a tie on time, and the
 * three error-file layouts. Also malformed error files, the one-line failure log, and the
 * launcher's own TORCHELASTIC_ERROR_FILE.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "ct_errfile.h"
#include "ct_test.h"
#include "ctrun_report.h"

static void ct__write(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CT_ASSERT(f != NULL);
    fputs(text, f);
    fclose(f);
}

static char *ct__report(const char *name, ctrun_failure_t *f, size_t n)
{
    char *out = NULL;
    CT_ASSERT_OK(ctrun_report_format(name, f, n, &out));
    for (size_t i = 0; i < n; i++)
        ctrun_failure_free(&f[i]);
    return out;
}

#define CT_ASSERT_REPORT(got, want)    \
    do {                               \
        char *ct__g = (got);           \
        CT_ASSERT_STR_EQ(ct__g, want); \
        free(ct__g);                   \
    } while (0)

static const char *const ct__host = "node-7.cluster";

static void test_exit_code_without_error_file(void)
{
    ctrun_failure_t f[1];
    CT_ASSERT_OK(ctrun_failure_init(&f[0], 1, 1, 11291, 3, 1700000000, ct__host, "absent.json"));
    CT_ASSERT(f[0].error_file == NULL);
    CT_ASSERT_REPORT(ct__report("./fail.sh", f, 1),
                     "============================================================\n"
                     "./fail.sh FAILED\n"
                     "------------------------------------------------------------\n"
                     "Failures:\n"
                     "  <NO_OTHER_FAILURES>\n"
                     "------------------------------------------------------------\n"
                     "Root Cause (first observed failure):\n"
                     "[0]:\n"
                     "  time      : 2023-11-14_22:13:20\n"
                     "  host      : node-7.cluster\n"
                     "  rank      : 1 (local_rank: 1)\n"
                     "  exitcode  : 3 (pid: 11291)\n"
                     "  error_file: <N/A>\n"
                     "  traceback : To enable traceback see: "
                     "https://pytorch.org/docs/stable/elastic/errors.html\n"
                     "============================================================\n");
}

static void test_signal(void)
{
    ctrun_failure_t f[1];
    CT_ASSERT_OK(ctrun_failure_init(&f[0], 0, 0, 4242, -11, 1700000000, ct__host, NULL));
    CT_ASSERT_REPORT(ct__report("rec.py", f, 1),
                     "======================================================\n"
                     "rec.py FAILED\n"
                     "------------------------------------------------------\n"
                     "Failures:\n"
                     "  <NO_OTHER_FAILURES>\n"
                     "------------------------------------------------------\n"
                     "Root Cause (first observed failure):\n"
                     "[0]:\n"
                     "  time      : 2023-11-14_22:13:20\n"
                     "  host      : node-7.cluster\n"
                     "  rank      : 0 (local_rank: 0)\n"
                     "  exitcode  : -11 (pid: 4242)\n"
                     "  error_file: <N/A>\n"
                     "  traceback : Signal 11 (SIGSEGV) received by PID 4242\n"
                     "======================================================\n");
}

static void test_several_failures_root_not_first(void)
{
    ct__write(
        "dict.json",
        "{\"message\": {\"message\": \"ValueError: bad lr\", \"extraInfo\": {\"py_callstack\": "
        "\"Traceback (most recent call last):\\n  File \\\"/w/train.py\\\", line 9, in "
        "<module>\\n    main()\\nValueError: bad lr\\n\", \"timestamp\": \"1700000005\"}}}");
    ctrun_failure_t f[3];
    /* Noticed at 1700000009, but the error file's own time (…05) is what counts. */
    CT_ASSERT_OK(ctrun_failure_init(&f[0], 2, 0, 100, 1, 1700000009, ct__host, "dict.json"));
    CT_ASSERT_EQ(f[0].timestamp, 1700000005);
    CT_ASSERT_OK(ctrun_failure_init(&f[1], 0, 0, 101, -15, 1700000003, ct__host, NULL));
    CT_ASSERT_OK(ctrun_failure_init(&f[2], 3, 1, 102, 2, 1700000003, ct__host, ""));
    CT_ASSERT_EQ(ctrun_report_root(f, 3), 1);
    CT_ASSERT_REPORT(ct__report("train.py", f, 3),
                     "============================================================\n"
                     "train.py FAILED\n"
                     "------------------------------------------------------------\n"
                     "Failures:\n"
                     "[0]:\n"
                     "  time      : 2023-11-14_22:13:25\n"
                     "  host      : node-7.cluster\n"
                     "  rank      : 2 (local_rank: 0)\n"
                     "  exitcode  : 1 (pid: 100)\n"
                     "  error_file: dict.json\n"
                     "  traceback : Traceback (most recent call last):\n"
                     "    File \"/w/train.py\", line 9, in <module>\n"
                     "      main()\n"
                     "  ValueError: bad lr\n"
                     "  \n"
                     "[2]:\n"
                     "  time      : 2023-11-14_22:13:23\n"
                     "  host      : node-7.cluster\n"
                     "  rank      : 3 (local_rank: 1)\n"
                     "  exitcode  : 2 (pid: 102)\n"
                     "  error_file: <N/A>\n"
                     "  traceback : To enable traceback see: "
                     "https://pytorch.org/docs/stable/elastic/errors.html\n"
                     "------------------------------------------------------------\n"
                     "Root Cause (first observed failure):\n"
                     "[1]:\n"
                     "  time      : 2023-11-14_22:13:23\n"
                     "  host      : node-7.cluster\n"
                     "  rank      : 0 (local_rank: 0)\n"
                     "  exitcode  : -15 (pid: 101)\n"
                     "  error_file: <N/A>\n"
                     "  traceback : Signal 15 (SIGTERM) received by PID 101\n"
                     "============================================================\n");
}

static void test_string_and_short_layouts(void)
{
    ct__write("str.json", "{\"message\": \"worker gave up\", \"timestamp\": 1700000001}");
    ct__write("nocs.json", "{\"message\": {\"message\": \"RuntimeError: x\", \"extraInfo\": "
                           "{\"timestamp\": \"1700000002\"}}}");
    static const char *const files[2] = {"str.json", "nocs.json"};
    static const char *const times[2] = {"2023-11-14_22:13:21", "2023-11-14_22:13:22"};
    static const char *const msgs[2] = {"worker gave up", "RuntimeError: x"};
    for (int i = 0; i < 2; i++) {
        ctrun_failure_t f[1];
        CT_ASSERT_OK(ctrun_failure_init(&f[0], 5, 1, 7, 1, 1800000000, ct__host, files[i]));
        char want[1024];
        snprintf(want, sizeof want,
                 "=================================\n"
                 "w FAILED\n"
                 "---------------------------------\n"
                 "Failures:\n"
                 "  <NO_OTHER_FAILURES>\n"
                 "---------------------------------\n"
                 "Root Cause (first observed failure):\n"
                 "[0]:\n"
                 "  time      : %s\n"
                 "  host      : node-7.cluster\n"
                 "  rank      : 5 (local_rank: 1)\n"
                 "  exitcode  : 1 (pid: 7)\n"
                 "  error_file: %s\n"
                 "  traceback : %s\n"
                 "=================================\n",
                 times[i], files[i], msgs[i]);
        CT_ASSERT_REPORT(ct__report("w", f, 1), want);
    }
}

static void test_malformed_error_file_is_a_note(void)
{
    ct__write("broken.json", "{\"message\": {\"message\": \"Value");
    ctrun_failure_t f;
    CT_ASSERT_OK(ctrun_failure_init(&f, 0, 0, 9, 1, 1700000000, ct__host, "broken.json"));
    CT_ASSERT_STR_EQ(f.error_file, "broken.json");
    CT_ASSERT(!f.error_file_ok);
    CT_ASSERT_EQ(f.timestamp, 1700000000);
    CT_ASSERT_STR_CONTAINS(f.message, "ctrun: error file broken.json is not valid JSON (line 1");
    char *out = NULL;
    CT_ASSERT_OK(ctrun_report_format("m.py", &f, 1, &out));
    CT_ASSERT_STR_CONTAINS(out, "  error_file: broken.json\n  traceback : ctrun: error file "
                                "broken.json is not valid JSON");
    free(out);
    ctrun_failure_free(&f);
    ctrun_failure_free(&f);

    /* Valid JSON without "message", and an empty file (a worker killed mid-write). */
    ct__write("broken.json", "{}");
    CT_ASSERT_OK(ctrun_failure_init(&f, 0, 0, 9, 1, 1, ct__host, "broken.json"));
    CT_ASSERT_STR_EQ(f.message, "ctrun: error file broken.json has no \"message\" field");
    ctrun_failure_free(&f);
    ct__write("broken.json", "");
    CT_ASSERT_OK(ctrun_failure_init(&f, 0, 0, 9, -9, 1, ct__host, "broken.json"));
    CT_ASSERT_STR_CONTAINS(f.message, "is not valid JSON");
    ctrun_failure_free(&f);
}

static void test_width_counts_characters_and_caps_at_60(void)
{
    ctrun_failure_t f[1];
    /* A 2-byte character in the title counts once: "é FAILED" is 8 wide, below the block. */
    CT_ASSERT_OK(ctrun_failure_init(&f[0], 0, 0, 1, 1, 1700000000, "h", NULL));
    free(f[0].message);
    f[0].message = strdup("m");
    char *out = ct__report("\xc3\xa9", f, 1);
    CT_ASSERT_EQ(strncmp(out, "=================================\n", 34),
                 0); /* 33: the time line */
    free(out);
    char longname[128];
    memset(longname, 'n', 100);
    longname[100] = '\0';
    CT_ASSERT_OK(ctrun_failure_init(&f[0], 0, 0, 1, 1, 1700000000, "h", NULL));
    out = ct__report(longname, f, 1);
    CT_ASSERT_EQ(strcspn(out, "\n"), 60);
    free(out);
}

static void test_failed_line(void)
{
    ctrun_failure_t f;
    CT_ASSERT_OK(ctrun_failure_init(&f, 1, 1, 11291, 3, 1, ct__host, NULL));
    char buf[256];
    CT_ASSERT_OK(ctrun_report_failed_line(&f, "./fail.sh", buf, sizeof buf));
    CT_ASSERT_STR_EQ(buf, "failed (exitcode: 3) local_rank: 1 (pid: 11291) of binary: ./fail.sh");
    CT_ASSERT_EQ(ctrun_report_failed_line(&f, "./fail.sh", buf, 10), -ENAMETOOLONG);
    ctrun_failure_free(&f);
}

static void test_propagate_to_launcher_error_file(void)
{
    ct_errbuf_t eb = {{0}};
    ctrun_failure_t f;
    /* With a worker error file: copied, errorCode added (checklist 32). */
    ct__write("child.json",
              "{\"message\": {\"message\": \"E: x\", \"extraInfo\": {\"py_callstack\": "
              "\"tb\", \"timestamp\": \"9\"}}}");
    CT_ASSERT_OK(ctrun_failure_init(&f, 0, 0, 5, 1, 1, ct__host, "child.json"));
    ct__write("parent.json", "stale");
    CT_ASSERT_OK(ctrun_report_propagate(&f, "parent.json", &eb));
    ct_errfile_t ef;
    CT_ASSERT_OK(ct_errfile_read("parent.json", &ef, &eb));
    CT_ASSERT_STR_EQ(ef.message, "E: x");
    CT_ASSERT_STR_EQ(ef.traceback, "tb");
    CT_ASSERT(ef.has_error_code);
    CT_ASSERT_EQ(ef.error_code, 1);
    ct_errfile_free(&ef);
    /* No parent file defined: -ENOENT and torchrun's message. */
    CT_ASSERT_EQ(ctrun_report_propagate(&f, NULL, &eb), -ENOENT);
    CT_ASSERT_STR_EQ(eb.msg, "no error file defined for parent, to copy child error file "
                             "(child.json)");
    ctrun_failure_free(&f);

    /* Without a worker error file ctrun writes the record itself. */
    CT_ASSERT_OK(ctrun_failure_init(&f, 0, 0, 77, -11, 1700000000, ct__host, NULL));
    CT_ASSERT_OK(ctrun_report_propagate(&f, "parent.json", &eb));
    CT_ASSERT_OK(ct_errfile_read("parent.json", &ef, &eb));
    CT_ASSERT_STR_EQ(ef.message, "Signal 11 (SIGSEGV) received by PID 77");
    CT_ASSERT_EQ(ef.timestamp, 1700000000);
    CT_ASSERT_EQ(ef.error_code, -11);
    ct_errfile_free(&ef);
    CT_ASSERT_EQ(ctrun_report_propagate(&f, "/nonexistent-dir/p.json", &eb), -ENOENT);
    CT_ASSERT_STR_CONTAINS(eb.msg, "/nonexistent-dir/p.json");
    ctrun_failure_free(&f);
}

static void test_json_round_trip(void)
{
    /* Records travel between agents as JSON lines: every field survives, a message with quotes,
     * newlines and non-ASCII text included; the copy is never taken for a readable local file. */
    ctrun_failure_t f, g;
    CT_ASSERT_OK(ctrun_failure_init(&f, 5, 1, 777, -11, 1700000123, "node-2.cluster", NULL));
    free(f.message);
    f.message = strdup("ValueError: \"bad\"\n  at line 2 \xc3\xa9");
    f.error_file = strdup("/logs/run/attempt_0/1/error.json");
    f.error_file_ok = true;
    char *json = NULL;
    CT_ASSERT_OK(ctrun_failure_to_json(&f, 3, &json));
    CT_ASSERT(strchr(json, '\n') == NULL);
    int node = -1;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ctrun_failure_from_json(json, &g, &node, &eb));
    CT_ASSERT_EQ(node, 3);
    CT_ASSERT_EQ(g.rank, 5);
    CT_ASSERT_EQ(g.local_rank, 1);
    CT_ASSERT_EQ(g.pid, 777);
    CT_ASSERT_EQ(g.exitcode, -11);
    CT_ASSERT_EQ(g.timestamp, 1700000123);
    CT_ASSERT_STR_EQ(g.host, "node-2.cluster");
    CT_ASSERT_STR_EQ(g.error_file, f.error_file);
    CT_ASSERT_STR_EQ(g.message, f.message);
    CT_ASSERT(!g.error_file_ok);
    ctrun_failure_free(&g);
    free(json);
    /* No error file: null, and back to NULL. */
    free(f.error_file);
    f.error_file = NULL;
    CT_ASSERT_OK(ctrun_failure_to_json(&f, 0, &json));
    CT_ASSERT_STR_CONTAINS(json, "\"error_file\":null");
    CT_ASSERT_OK(ctrun_failure_from_json(json, &g, &node, &eb));
    CT_ASSERT(g.error_file == NULL);
    ctrun_failure_free(&g);
    free(json);
    ctrun_failure_free(&f);
    /* Bad input: one line naming the problem. */
    CT_ASSERT_ERR(ctrun_failure_from_json("{\"node\": 1}", &g, &node, &eb), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "failure record: ");
    CT_ASSERT_ERR(ctrun_failure_from_json("not json", &g, &node, &eb), CT_EPARSE);
    CT_ASSERT_ERR(ctrun_failure_from_json("{\"node\":0,\"rank\":0,\"local_rank\":0,\"pid\":1,"
                                          "\"exitcode\":1,\"timestamp\":1,\"host\":\"h\","
                                          "\"error_file\":7,\"message\":\"m\"}",
                                          &g, &node, &eb),
                  CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "error_file is neither a string nor null");
}

static void test_fqdn(void)
{
    char host[256] = "";
    ctrun_host_fqdn(host, sizeof host);
    CT_ASSERT(host[0] != '\0');
    CT_ASSERT(strchr(host, ' ') == NULL);
}

int main(void)
{
    setenv("TZ", "UTC", 1);
    tzset();
    char dir[] = "/tmp/ctrun_report_XXXXXX";
    CT_ASSERT(mkdtemp(dir) != NULL);
    CT_ASSERT_EQ(chdir(dir), 0); /* short relative paths, as in the reference output */
    CT_RUN(test_exit_code_without_error_file);
    CT_RUN(test_signal);
    CT_RUN(test_several_failures_root_not_first);
    CT_RUN(test_string_and_short_layouts);
    CT_RUN(test_malformed_error_file_is_a_note);
    CT_RUN(test_width_counts_characters_and_caps_at_60);
    CT_RUN(test_failed_line);
    CT_RUN(test_propagate_to_launcher_error_file);
    CT_RUN(test_json_round_trip);
    CT_RUN(test_fqdn);
    CT_ASSERT_EQ(chdir("/"), 0);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CT_ASSERT_EQ(system(cmd), 0);
    return 0;
}
