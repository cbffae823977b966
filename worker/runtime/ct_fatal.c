/*
 * ct_fatal.c - the two ways a worker dies on purpose and still tells the launcher why:
 * ct_worker_fail (an error the program detected) and the fatal-signal handler (a crash). Both
 * write the @record-style error file through common/ct_errfile and a C backtrace.
 *
 * The backtrace text comes from glibc's backtrace_symbols_fd, which does not allocate, into a
 * memfd made in advance, read back into a static buffer; everything the handler calls is
 * async-signal-safe except backtrace() itself, whose only unsafe part (loading libgcc_s on
 * first use) is done at install time. Not done: symbolising static functions (addresses
 * only), other threads' stacks, core dumps (the default action still produces one when the
 * system allows).
 *
 * Also here: the stack dump on CT_WORKER_DUMP_SIGNAL (SIGUSR1), which ctrun's watchdog sends
 * to a silent worker before stopping it. That handler prints and returns (the worker goes on;
 * a SIGTERM arriving meanwhile waits until it has printed);
 * when the signal lands on another thread it prints that thread's stack and passes the signal
 * on to the main thread, whose stack is the one that shows where training is stuck.
 */
#include <errno.h>
#include <execinfo.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ct_errfile.h"
#include "ct_log.h"
#include "ct_worker_internal.h"
#include "ctworker.h"

#define CT__MAX_FRAMES 64
#define CT__RAW_MAX    16384 /* backtrace_symbols_fd output kept */
#define CT__TEXT_MAX   20480 /* the formatted callstack */

static const int ct_fatal__fatal_sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
static const char *const ct_fatal__fatal_names[] = {"SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL",
                                              "SIGABRT"};
#define CT__NSIGS ((int)(sizeof ct_fatal__fatal_sigs / sizeof ct_fatal__fatal_sigs[0]))

static struct {
    bool installed;
    bool own_stack;
    int memfd;
    ct_errfile_target_t target;
    struct sigaction old[CT__NSIGS];
    bool dump_installed;
    int dump_memfd;
    pid_t main_tid;
    struct sigaction old_dump;
} ct_fatal__fatal = {.memfd = -1, .dump_memfd = -1, .target = {.dirfd = -1}};

static volatile sig_atomic_t ct_fatal__in_dump;
static char ct_fatal__dump_raw[CT__RAW_MAX];
static char ct_fatal__dump_text[CT__TEXT_MAX];

static volatile sig_atomic_t ct_fatal__in_handler;
static char ct_fatal__altstack[64 * 1024];
static char ct_fatal__sig_raw[CT__RAW_MAX];
static char ct_fatal__sig_text[CT__TEXT_MAX];

/* ---- async-signal-safe text building ------------------------------------------------------ */

static void ct_fatal__append(char *out, size_t cap, size_t *len, const char *s)
{
    while (*s != '\0' && *len + 1 < cap)
        out[(*len)++] = *s++;
    out[*len] = '\0';
}

static void ct_fatal__append_u64(char *out, size_t cap, size_t *len, uint64_t v)
{
    char digits[24];
    int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    char s[24];
    for (int i = 0; i < n; i++)
        s[i] = digits[n - 1 - i];
    s[n] = '\0';
    ct_fatal__append(out, cap, len, s);
}

/* The callstack text: a title line, then "  #i <frame>" per frame. raw is scratch space. */
static size_t ct_fatal__format_backtrace(int memfd, void *const *frames, int n, char *raw,
                                   size_t raw_cap, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = '\0';
    ct_fatal__append(out, cap, &len, "C backtrace (most recent call first):\n");
    ssize_t got = -1;
    if (memfd >= 0 && n > 0 && lseek(memfd, 0, SEEK_SET) == 0 && ftruncate(memfd, 0) == 0) {
        backtrace_symbols_fd(frames, n, memfd);
        got = pread(memfd, raw, raw_cap - 1, 0);
    }
    if (got <= 0) {
        ct_fatal__append(out, cap, &len, "  (unavailable)\n");
        return len;
    }
    raw[got] = '\0';
    int frame = 0;
    for (char *line = raw; *line != '\0';) {
        char *nl = strchr(line, '\n');
        if (nl != NULL)
            *nl = '\0';
        ct_fatal__append(out, cap, &len, "  #");
        ct_fatal__append_u64(out, cap, &len, (uint64_t)frame++);
        ct_fatal__append(out, cap, &len, " ");
        ct_fatal__append(out, cap, &len, line);
        ct_fatal__append(out, cap, &len, "\n");
        if (nl == NULL)
            break;
        line = nl + 1;
    }
    return len;
}

static void ct_fatal__write_stderr(const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, s, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        s += w;
        n -= (size_t)w;
    }
}

/* ---- the signal handler --------------------------------------------------------------------- */

static void ct_fatal__fatal_reraise(int sig, int idx)
{
    /* Hand the signal on: to a handler that was there before us (a sanitizer's, say), else to
     * the default action. It is blocked while we run, so it is delivered when we return. */
    struct sigaction next;
    if (idx >= 0 && !(ct_fatal__fatal.old[idx].sa_flags & SA_SIGINFO) &&
        (ct_fatal__fatal.old[idx].sa_handler == SIG_DFL ||
         ct_fatal__fatal.old[idx].sa_handler == SIG_IGN)) {
        memset(&next, 0, sizeof next);
        next.sa_handler = SIG_DFL;
        sigemptyset(&next.sa_mask);
    } else if (idx >= 0) {
        next = ct_fatal__fatal.old[idx];
    } else {
        memset(&next, 0, sizeof next);
        next.sa_handler = SIG_DFL;
    }
    sigaction(sig, &next, NULL);
    raise(sig);
}

static void ct_fatal__fatal_handler(int sig, siginfo_t *info, void *uctx)
{
    (void)info;
    (void)uctx;
    int idx = -1;
    for (int i = 0; i < CT__NSIGS; i++)
        if (ct_fatal__fatal_sigs[i] == sig)
            idx = i;
    if (ct_fatal__in_handler) {
        ct_fatal__fatal_reraise(sig, idx);
        return;
    }
    ct_fatal__in_handler = 1;
    int saved_errno = errno;

    char msg[160];
    size_t mlen = 0;
    msg[0] = '\0';
    ct_fatal__append(msg, sizeof msg, &mlen, "Signal ");
    ct_fatal__append_u64(msg, sizeof msg, &mlen, (uint64_t)sig);
    ct_fatal__append(msg, sizeof msg, &mlen, " (");
    ct_fatal__append(msg, sizeof msg, &mlen, idx >= 0 ? ct_fatal__fatal_names[idx] : "?");
    ct_fatal__append(msg, sizeof msg, &mlen, ") received by PID ");
    ct_fatal__append_u64(msg, sizeof msg, &mlen, (uint64_t)getpid());

    void *frames[CT__MAX_FRAMES];
    int n = backtrace(frames, CT__MAX_FRAMES);
    size_t tlen = ct_fatal__format_backtrace(ct_fatal__fatal.memfd, frames, n, ct_fatal__sig_raw,
                                             sizeof ct_fatal__sig_raw, ct_fatal__sig_text,
                                             sizeof ct_fatal__sig_text);

    char line[256];
    size_t llen = 0;
    line[0] = '\0';
    const char *prefix = ct__runtime_prefix();
    if (prefix[0] != '\0') {
        ct_fatal__append(line, sizeof line, &llen, prefix);
        ct_fatal__append(line, sizeof line, &llen, " ");
    }
    ct_fatal__append(line, sizeof line, &llen, "fatal: ");
    ct_fatal__append(line, sizeof line, &llen, msg);
    ct_fatal__append(line, sizeof line, &llen, "\n");
    ct_fatal__write_stderr(line, llen);
    ct_fatal__write_stderr(ct_fatal__sig_text, tlen);

    if (ct_fatal__fatal.target.dirfd >= 0)
        ct_errfile_write(&ct_fatal__fatal.target, msg, ct_fatal__sig_text, (int64_t)time(NULL), 0);
    errno = saved_errno;
    ct_fatal__fatal_reraise(sig, idx);
}

/* CT_WORKER_DUMP_SIGNAL: this thread's stack to stderr, then on to the main thread. */
static void ct_fatal__dump_handler(int sig, siginfo_t *info, void *uctx)
{
    (void)info;
    (void)uctx;
    if (ct_fatal__in_dump) /* another thread is printing; one stack at a time */
        return;
    ct_fatal__in_dump = 1;
    int saved_errno = errno;
    pid_t tid = (pid_t)syscall(SYS_gettid);
    bool main_thread = tid == ct_fatal__fatal.main_tid;
    char line[256];
    size_t llen = 0;
    line[0] = '\0';
    const char *prefix = ct__runtime_prefix();
    if (prefix[0] != '\0') {
        ct_fatal__append(line, sizeof line, &llen, prefix);
        ct_fatal__append(line, sizeof line, &llen, " ");
    }
    ct_fatal__append(line, sizeof line, &llen, "stack dump on signal ");
    ct_fatal__append_u64(line, sizeof line, &llen, (uint64_t)sig);
    ct_fatal__append(line, sizeof line, &llen, " (requested by the launcher's watchdog?) in ");
    ct_fatal__append(line, sizeof line, &llen, main_thread ? "the main thread" : "thread ");
    if (!main_thread)
        ct_fatal__append_u64(line, sizeof line, &llen, (uint64_t)tid);
    ct_fatal__append(line, sizeof line, &llen, ", PID ");
    ct_fatal__append_u64(line, sizeof line, &llen, (uint64_t)getpid());
    ct_fatal__append(line, sizeof line, &llen, "\n");
    void *frames[CT__MAX_FRAMES];
    int n = backtrace(frames, CT__MAX_FRAMES);
    size_t tlen = ct_fatal__format_backtrace(ct_fatal__fatal.dump_memfd, frames, n,
                                             ct_fatal__dump_raw, sizeof ct_fatal__dump_raw,
                                             ct_fatal__dump_text, sizeof ct_fatal__dump_text);
    ct_fatal__write_stderr(line, llen);
    ct_fatal__write_stderr(ct_fatal__dump_text, tlen);
    ct_fatal__in_dump = 0;
    if (!main_thread && ct_fatal__fatal.main_tid > 0)
        syscall(SYS_tgkill, getpid(), ct_fatal__fatal.main_tid, sig);
    errno = saved_errno;
}

/* Installs the stack-dump handler unless the program handles or ignores the signal itself. */
static void ct_fatal__dump_install(void)
{
    struct sigaction cur;
    if (sigaction(CT_WORKER_DUMP_SIGNAL, NULL, &cur) != 0 || (cur.sa_flags & SA_SIGINFO) ||
        cur.sa_handler != SIG_DFL)
        return;
    ct_fatal__fatal.dump_memfd = memfd_create("ct-stackdump", MFD_CLOEXEC);
    ct_fatal__fatal.main_tid = (pid_t)syscall(SYS_gettid);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = ct_fatal__dump_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    /* The launcher stops the worker right after asking for the dump: the stop waits until
     * the stack is printed. */
    sigaddset(&sa.sa_mask, SIGTERM);
    if (sigaction(CT_WORKER_DUMP_SIGNAL, &sa, &ct_fatal__fatal.old_dump) == 0) {
        ct_fatal__fatal.dump_installed = true;
    } else if (ct_fatal__fatal.dump_memfd >= 0) {
        close(ct_fatal__fatal.dump_memfd);
        ct_fatal__fatal.dump_memfd = -1;
    }
}

int ct_worker_catch_fatal_signals(ct_errbuf_t *eb)
{
    if (ct_fatal__fatal.installed)
        return 0;
    const char *path = ct__runtime_error_file();
    if (path == NULL)
        path = getenv("TORCHELASTIC_ERROR_FILE");
    if (path != NULL && path[0] != '\0') {
        int rc = ct_errfile_target_open(&ct_fatal__fatal.target, path, eb);
        if (rc != 0)
            return ct_errbuf_wrap(eb, rc, "fatal-signal handler");
    }
    ct_fatal__fatal.memfd = memfd_create("ct-backtrace", MFD_CLOEXEC);
    void *warm[2];
    backtrace(warm, 2); /* loads libgcc_s now rather than inside the handler */

    stack_t cur;
    if (sigaltstack(NULL, &cur) == 0 && (cur.ss_flags & SS_DISABLE)) {
        stack_t ss = {
            .ss_sp = ct_fatal__altstack, .ss_size = sizeof ct_fatal__altstack, .ss_flags = 0};
        ct_fatal__fatal.own_stack = sigaltstack(&ss, NULL) == 0;
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = ct_fatal__fatal_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < CT__NSIGS; i++)
        sigaddset(&sa.sa_mask, ct_fatal__fatal_sigs[i]);
    for (int i = 0; i < CT__NSIGS; i++) {
        if (sigaction(ct_fatal__fatal_sigs[i], &sa, &ct_fatal__fatal.old[i]) != 0) {
            int rc = -errno;
            for (int j = 0; j < i; j++)
                sigaction(ct_fatal__fatal_sigs[j], &ct_fatal__fatal.old[j], NULL);
            ct_fatal__fatal.installed = true; /* so that restore releases the rest */
            ct__fatal_signals_restore();
            return ct_errbuf_set(eb, rc, "fatal-signal handler: sigaction(%s): %s",
                                 ct_fatal__fatal_names[i], ct_strerror(rc));
        }
    }
    ct_fatal__in_handler = 0;
    ct_fatal__fatal.installed = true;
    ct_fatal__dump_install();
    return 0;
}

void ct__fatal_signals_restore(void)
{
    if (!ct_fatal__fatal.installed)
        return;
    if (ct_fatal__fatal.dump_installed)
        sigaction(CT_WORKER_DUMP_SIGNAL, &ct_fatal__fatal.old_dump, NULL);
    ct_fatal__fatal.dump_installed = false;
    if (ct_fatal__fatal.dump_memfd >= 0)
        close(ct_fatal__fatal.dump_memfd);
    ct_fatal__fatal.dump_memfd = -1;
    for (int i = 0; i < CT__NSIGS; i++)
        sigaction(ct_fatal__fatal_sigs[i], &ct_fatal__fatal.old[i], NULL);
    if (ct_fatal__fatal.own_stack) {
        stack_t off = {.ss_sp = NULL, .ss_size = 0, .ss_flags = SS_DISABLE};
        sigaltstack(&off, NULL);
        ct_fatal__fatal.own_stack = false;
    }
    ct_errfile_target_close(&ct_fatal__fatal.target);
    if (ct_fatal__fatal.memfd >= 0)
        close(ct_fatal__fatal.memfd);
    ct_fatal__fatal.memfd = -1;
    ct_fatal__fatal.installed = false;
}

/* ---- ct_worker_fail ---------------------------------------------------------------------------
 */

void ct_worker_fail(const char *fmt, ...)
{
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (m < 0)
        snprintf(msg, sizeof msg, "(unformattable message \"%.200s\")", fmt);
    size_t len = strlen(msg);
    while (len > 0 && msg[len - 1] == '\n')
        msg[--len] = '\0';

    void *frames[CT__MAX_FRAMES];
    int n = backtrace(frames, CT__MAX_FRAMES);
    char raw[CT__RAW_MAX], text[CT__TEXT_MAX]; /* on the stack: two threads may fail at once */
    int memfd = memfd_create("ct-backtrace", MFD_CLOEXEC);
    size_t tlen = ct_fatal__format_backtrace(memfd, frames, n, raw, sizeof raw, text, sizeof text);
    if (memfd >= 0)
        close(memfd);

    ct_log_error("%s", msg);
    ct_fatal__write_stderr(text, tlen);

    const char *path = ct__runtime_error_file();
    if (path == NULL)
        path = getenv("TORCHELASTIC_ERROR_FILE");
    if (path != NULL && path[0] != '\0') {
        ct_errbuf_t eb;
        if (ct_errfile_write_path(path, msg, text, (int64_t)time(NULL), 0, &eb) != 0)
            ct_log_warn("could not write the error file: %s", eb.msg);
    }
    fflush(stdout);
    fflush(stderr);
    /* _exit, not exit: other threads (NCCL, CUDA) may be mid-operation, and atexit handlers
     * or library destructors could then hang the fatal path. stdio was flushed above. */
    _exit(CT_WORKER_FAIL_EXIT);
}
