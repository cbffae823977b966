/*
 * ct_test.h - the assertions and conventions every test executable uses.
 *
 * A test file is one executable with a main() that runs its cases through CT_RUN. A failed
 * assertion prints both operands with file:line and exits 1 at once (later cases would only
 * add noise); the verdict is always the exit status: 0 passed, 1 failed, 77 skipped (meson's
 * convention), never a message alone. Everything here is header-only and static, so a test
 * links nothing extra for it.
 */
#ifndef CT_TEST_H
#define CT_TEST_H

#include <inttypes.h>
#include <stdarg.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ct_error.h"

#define CT_TEST_SKIP_CODE 77

__attribute__((unused)) static const char *ct_test__current = "(none)";

__attribute__((noreturn, unused, format(printf, 3, 4))) static void ct_test__fail(const char *file, int line,
                                                                          const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "FAIL %s:%d [%s]: ", file, line, ct_test__current);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stdout);
    fflush(stderr);
    exit(1);
}

/* Skips the whole executable with a reason (exit 77). */
#define CT_SKIP(...)                                                                              \
    do {                                                                                          \
        fprintf(stdout, "SKIP: ");                                                                \
        fprintf(stdout, __VA_ARGS__);                                                             \
        fputc('\n', stdout);                                                                      \
        fflush(stdout);                                                                           \
        exit(CT_TEST_SKIP_CODE);                                                                  \
    } while (0)

#define CT_ASSERT(cond)                                                                           \
    do {                                                                                          \
        if (!(cond))                                                                              \
            ct_test__fail(__FILE__, __LINE__, "assertion failed: %s", #cond);                     \
    } while (0)

#define CT_ASSERT_MSG(cond, ...)                                                                  \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            char ct__m[2048];                                                                     \
            snprintf(ct__m, sizeof ct__m, __VA_ARGS__);                                           \
            ct_test__fail(__FILE__, __LINE__, "assertion failed: %s (%s)", #cond, ct__m);         \
        }                                                                                         \
    } while (0)

/* Integer comparisons: both operands are evaluated once and printed on failure. */
#define CT__ASSERT_INT(a, op, b)                                                                  \
    do {                                                                                          \
        long long ct__a = (long long)(a);                                                         \
        long long ct__b = (long long)(b);                                                         \
        if (!(ct__a op ct__b))                                                                    \
            ct_test__fail(__FILE__, __LINE__, "expected %s %s %s, got %lld vs %lld", #a, #op, #b, \
                          ct__a, ct__b);                                                          \
    } while (0)
#define CT_ASSERT_EQ(a, b) CT__ASSERT_INT(a, ==, b)
#define CT_ASSERT_NE(a, b) CT__ASSERT_INT(a, !=, b)
#define CT_ASSERT_LT(a, b) CT__ASSERT_INT(a, <, b)
#define CT_ASSERT_LE(a, b) CT__ASSERT_INT(a, <=, b)
#define CT_ASSERT_GT(a, b) CT__ASSERT_INT(a, >, b)
#define CT_ASSERT_GE(a, b) CT__ASSERT_INT(a, >=, b)

#define CT_ASSERT_EQ_U64(a, b)                                                                    \
    do {                                                                                          \
        uint64_t ct__a = (uint64_t)(a);                                                           \
        uint64_t ct__b = (uint64_t)(b);                                                           \
        if (ct__a != ct__b)                                                                       \
            ct_test__fail(__FILE__, __LINE__, "expected %s == %s, got 0x%" PRIx64 " vs 0x%" PRIx64, \
                          #a, #b, ct__a, ct__b);                                                  \
    } while (0)

/* A ct function's return code: CT_ASSERT_OK expects 0, CT_ASSERT_ERR a given code. */
#define CT_ASSERT_OK(expr)                                                                        \
    do {                                                                                          \
        int ct__rc = (expr);                                                                      \
        if (ct__rc != 0)                                                                          \
            ct_test__fail(__FILE__, __LINE__, "%s returned %d (%s: %s)", #expr, ct__rc,           \
                          ct_err_name(ct__rc), ct_strerror(ct__rc));                              \
    } while (0)
#define CT_ASSERT_ERR(expr, code)                                                                 \
    do {                                                                                          \
        int ct__rc = (expr);                                                                      \
        int ct__want = (code);                                                                    \
        if (ct__rc != ct__want)                                                                   \
            ct_test__fail(__FILE__, __LINE__, "%s returned %d (%s), expected %d (%s)", #expr,     \
                          ct__rc, ct_err_name(ct__rc), ct__want, ct_err_name(ct__want));          \
    } while (0)

#define CT_ASSERT_STR_EQ(a, b)                                                                    \
    do {                                                                                          \
        const char *ct__a = (a);                                                                  \
        const char *ct__b = (b);                                                                  \
        if (ct__a == NULL || ct__b == NULL || strcmp(ct__a, ct__b) != 0)                          \
            ct_test__fail(__FILE__, __LINE__, "expected %s == %s, got \"%s\" vs \"%s\"", #a, #b,  \
                          ct__a ? ct__a : "(null)", ct__b ? ct__b : "(null)");                    \
    } while (0)

#define CT_ASSERT_STR_CONTAINS(hay, needle)                                                       \
    do {                                                                                          \
        const char *ct__h = (hay);                                                                \
        const char *ct__n = (needle);                                                             \
        if (ct__h == NULL || strstr(ct__h, ct__n) == NULL)                                        \
            ct_test__fail(__FILE__, __LINE__, "expected %s to contain \"%s\", got \"%s\"", #hay,  \
                          ct__n, ct__h ? ct__h : "(null)");                                       \
    } while (0)

#define CT_ASSERT_STR_NOT_CONTAINS(hay, needle)                                                   \
    do {                                                                                          \
        const char *ct__h = (hay);                                                                \
        const char *ct__n = (needle);                                                             \
        if (ct__h != NULL && strstr(ct__h, ct__n) != NULL)                                        \
            ct_test__fail(__FILE__, __LINE__, "expected %s not to contain \"%s\", got \"%s\"",    \
                          #hay, ct__n, ct__h);                                                    \
    } while (0)

/* |a - b| <= atol + rtol * |b|, with b the reference; NaN never passes. */
#define CT_ASSERT_CLOSE(a, b, atol, rtol)                                                         \
    do {                                                                                          \
        double ct__a = (double)(a);                                                               \
        double ct__b = (double)(b);                                                               \
        double ct__tol = (double)(atol) + (double)(rtol)*fabs(ct__b);                             \
        if (!(fabs(ct__a - ct__b) <= ct__tol))                                                    \
            ct_test__fail(__FILE__, __LINE__, "expected %s ~= %s, got %.9g vs %.9g (tol %.3g)",   \
                          #a, #b, ct__a, ct__b, ct__tol);                                         \
    } while (0)

/* The PyTorch 2.x interpreter the tests use: $CTRUN_TORCH2_PYTHON when set, else the virtual
 * environment scripts/test creates, ~/.venvs/torch2/bin/python (callers check that it exists and
 * skip, or fall back, when it does not). */
__attribute__((unused)) static const char *ct_test_torch2_python(void)
{
    static char venv[4096];
    const char *p = getenv("CTRUN_TORCH2_PYTHON");
    if (p != NULL && p[0] != '\0')
        return p;
    const char *home = getenv("HOME");
    snprintf(venv, sizeof venv, "%s/.venvs/torch2/bin/python", home ? home : "/root");
    return venv;
}

/* A loopback port that refuses connections: bound on 127.0.0.1 port 0, never listened on. With
 * hold != NULL the socket stays bound (*hold, close-on-exec), so that nothing else on the machine
 * can take the port until the caller closes it; with NULL it is closed at once, and the port is
 * free for the test's own server (and for any other program's). */
__attribute__((unused)) static int ct_test_refused_port(int *hold)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    CT_ASSERT(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
              getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    if (hold != NULL)
        *hold = fd;
    else
        close(fd);
    return ntohs(a.sin_port);
}

static char ct_test__tmp_root[256];

__attribute__((unused)) static void ct_test__remove_tmp(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", ct_test__tmp_root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", ct_test__tmp_root);
}

/* A fresh folder /tmp/<prefix>XXXXXX, removed with all it holds when the test exits; one per
 * process (a second call returns the same folder). */
__attribute__((unused)) static const char *ct_test_tmpdir(const char *prefix)
{
    if (ct_test__tmp_root[0] == '\0') {
        snprintf(ct_test__tmp_root, sizeof ct_test__tmp_root, "/tmp/%sXXXXXX", prefix);
        CT_ASSERT(mkdtemp(ct_test__tmp_root) != NULL);
        atexit(ct_test__remove_tmp);
    }
    return ct_test__tmp_root;
}

/* Whether case `name` runs: all of them, or only those named (comma-separated) in CT_TEST_ONLY,
 * for repeating one case of a long executable. */
__attribute__((unused)) static bool ct_test__selected(const char *name)
{
    const char *only = getenv("CT_TEST_ONLY");
    if (only == NULL || only[0] == '\0')
        return true;
    size_t n = strlen(name);
    for (const char *p = only; (p = strstr(p, name)) != NULL; p += n)
        if ((p == only || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
            return true;
    return false;
}

/* Runs one case: a static void function taking no arguments. */
#define CT_RUN(fn)                                                                                \
    do {                                                                                          \
        ct_test__current = #fn;                                                                   \
        if (ct_test__selected(#fn)) {                                                             \
            fn();                                                                                 \
            printf("ok - %s\n", #fn);                                                             \
        } else {                                                                                  \
            printf("ok - %s # SKIP not in CT_TEST_ONLY\n", #fn);                                  \
        }                                                                                         \
        fflush(stdout);                                                                           \
    } while (0)

#endif /* CT_TEST_H */
