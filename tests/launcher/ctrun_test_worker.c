/*
 * ctrun_test_worker.c - a worker for the launcher's end-to-end tests: it records what it was
 * given and does what its flags say, so that a test can check what ctrun did from the files it
 * leaves. Not a test itself.
 *
 *   ctrun_test_worker [flags]
 *     --dir D            record into D: a line "<rank> <local_rank> <attempt> <pid> <pgid>" in
 *                        D/starts, and the environment (sorted "NAME=value" lines), argv, its
 *                        open fds and whether the error file and its folder exist in
 *                        D/env.<rank>.<attempt>
 *                        (written whole: temp name, then rename)
 *     --when-rank R      the action below applies to global rank R only (default: every rank)
 *     --when-attempt K   ... and to attempt K only (TORCHELASTIC_RESTART_COUNT; default: all)
 *     --when-world W     ... and only when WORLD_SIZE is W (default: any; tells rounds of an
 *                        elastic job apart, which share a restart count)
 *     --delay-ms N       wait N ms before the action
 *     --exit CODE        action: exit with CODE
 *     --signal SIG       action: kill itself with SIG
 *     --errfile MSG      action: first write TORCHELASTIC_ERROR_FILE (@record's layout) with
 *                        message MSG and a two-line traceback, then exit 1 (unless --exit)
 *     --sleep-ms N       without an action (or when it does not apply): sleep N ms, then exit
 *                        0; -1 sleeps until killed
 *     --ignore SIG       ignore SIG (repeatable)
 *     --child            start a grandchild that sleeps until killed; its pid goes to
 *                        D/children
 *     --daemon           the same, but the grandchild leaves the worker's session and process
 *                        group (setsid) and its output (/dev/null), as a daemon does
 *     --daemonize        start a real daemon besides: fork, setsid, fork again; the middle
 *                        process exits, so the daemon's parent is no longer the worker (as
 *                        daemon(3) does); its pid goes to D/children too
 *     --heartbeat N      send N heartbeat records (steps 1..N) through CTRUN_HEARTBEAT_FD
 *     --heartbeat-ms MS  ... MS milliseconds apart (default 0: all at once)
 *     --out TEXT         print TEXT and a newline to stdout (repeatable)
 *     --err TEXT         print TEXT and a newline to stderr (repeatable)
 *     --long N           print N bytes of 'x' to stdout with no newline at the end
 *     --flood            while sleeping (--sleep-ms), print numbered lines "flood <i>" (i from 0)
 *                        to stdout, 64 at a time with a 1 ms pause between batches
 *   Other arguments are ignored (they still show in the env dump), so the worker can stand in
 *   for a Python interpreter.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ct_errfile.h"
#include "ct_time.h"
#include "ctworker.h"

extern char **environ;

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v ? atoi(v) : dflt;
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

static void append_line(const char *path, const char *line)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    write_all(fd, line, strlen(line)); /* one write: O_APPEND keeps lines whole */
    close(fd);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

static void dump_env(const char *dir, int rank, int attempt, int argc, char **argv)
{
    size_t n = 0;
    while (environ[n] != NULL)
        n++;
    char **sorted = malloc((n + 1) * sizeof *sorted);
    if (sorted == NULL)
        return;
    memcpy(sorted, environ, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_str);
    char tmp[4200], path[4096];
    snprintf(path, sizeof path, "%.4000s/env.%d.%d", dir, rank, attempt);
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (f != NULL) {
        for (size_t i = 0; i < n; i++)
            fprintf(f, "%s\n", sorted[i]);
        for (int i = 0; i < argc; i++)
            fprintf(f, "ARGV[%d]=%s\n", i, argv[i]);
        /* The open file descriptors (what the launcher let through). */
        DIR *fds = opendir("/proc/self/fd");
        if (fds != NULL) {
            int list[64], nfd = 0, self = dirfd(fds);
            for (struct dirent *e; (e = readdir(fds)) != NULL;) {
                int fd = atoi(e->d_name);
                if (e->d_name[0] != '.' && fd != self && fd != fileno(f) && nfd < 64)
                    list[nfd++] = fd;
            }
            closedir(fds);
            qsort(list, (size_t)nfd, sizeof list[0], cmp_int);
            fprintf(f, "FDS=");
            for (int i = 0; i < nfd; i++)
                fprintf(f, "%s%d", i ? "," : "", list[i]);
            fprintf(f, "\n");
        }
        /* Whether the folder of TORCHELASTIC_ERROR_FILE exists while the worker runs (the
         * launcher may remove empty folders when the job is over). */
        const char *ef = getenv("TORCHELASTIC_ERROR_FILE");
        if (ef != NULL && strrchr(ef, '/') != NULL) {
            char d[4096];
            snprintf(d, sizeof d, "%.*s", (int)(strrchr(ef, '/') - ef), ef);
            struct stat st;
            fprintf(f, "ERROR_FILE_DIR=%s\n",
                    stat(d, &st) == 0 && S_ISDIR(st.st_mode) ? "exists" : "missing");
            fprintf(f, "ERROR_FILE=%s\n", access(ef, F_OK) == 0 ? "exists" : "missing");
        }
        fclose(f);
        rename(tmp, path);
    }
    free(sorted);
}

static void sleep_ms(long ms)
{
    if (ms < 0) {
        for (;;)
            pause();
    }
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Numbered lines on stdout for ms milliseconds (-1: until killed), each written whole. */
static void flood_ms(long ms)
{
    int64_t end = ms < 0 ? INT64_MAX : ct_time_ms() + ms;
    char buf[64 * 24];
    for (long i = 0; ct_time_ms() < end;) {
        size_t n = 0;
        for (int k = 0; k < 64; k++)
            n += (size_t)snprintf(buf + n, sizeof buf - n, "flood %ld\n", i++);
        write_all(1, buf, n);
        sleep_ms(1);
    }
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *errfile_msg = NULL;
    int when_rank = -1, when_attempt = -1, when_world = -1, exit_code = -1, sig = 0, heartbeat = 0,
        heartbeat_ms = 0;
    long delay_ms = 0, sleep_ms_v = 0, long_n = 0;
    bool child = false, daemon_child = false, double_fork = false, flood = false;
    int rank = env_int("RANK", 0), local_rank = env_int("LOCAL_RANK", 0);
    int attempt = env_int("TORCHELASTIC_RESTART_COUNT", 0);

    /* Pass 1: everything that must happen at once (ignoring signals, recording the start). */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ignore") == 0 && i + 1 < argc)
            signal(atoi(argv[++i]), SIG_IGN);
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = v != NULL;
        if (strcmp(a, "--dir") == 0 && takes)
            dir = v;
        else if (strcmp(a, "--when-rank") == 0 && takes)
            when_rank = atoi(v);
        else if (strcmp(a, "--when-attempt") == 0 && takes)
            when_attempt = atoi(v);
        else if (strcmp(a, "--when-world") == 0 && takes)
            when_world = atoi(v);
        else if (strcmp(a, "--delay-ms") == 0 && takes)
            delay_ms = atol(v);
        else if (strcmp(a, "--exit") == 0 && takes)
            exit_code = atoi(v);
        else if (strcmp(a, "--signal") == 0 && takes)
            sig = atoi(v);
        else if (strcmp(a, "--errfile") == 0 && takes)
            errfile_msg = v;
        else if (strcmp(a, "--sleep-ms") == 0 && takes)
            sleep_ms_v = atol(v);
        else if (strcmp(a, "--heartbeat") == 0 && takes)
            heartbeat = atoi(v);
        else if (strcmp(a, "--heartbeat-ms") == 0 && takes)
            heartbeat_ms = atoi(v);
        else if (strcmp(a, "--long") == 0 && takes)
            long_n = atol(v);
        else if (strcmp(a, "--flood") == 0) {
            flood = true;
            continue;
        } else if (strcmp(a, "--child") == 0 || strcmp(a, "--daemon") == 0) {
            child = true;
            daemon_child = daemon_child || strcmp(a, "--daemon") == 0;
            continue;
        } else if (strcmp(a, "--daemonize") == 0) {
            double_fork = true;
            continue;
        } else if ((strcmp(a, "--out") == 0 || strcmp(a, "--err") == 0 ||
                    strcmp(a, "--ignore") == 0) &&
                   takes) {
            /* handled in order below / above */
        } else {
            continue; /* not ours (e.g. "-u script.py" from a stand-in interpreter): ignored */
        }
        i++;
    }
    char line[256];
    if (dir != NULL) {
        char path[4096];
        snprintf(path, sizeof path, "%s/starts", dir);
        snprintf(line, sizeof line, "%d %d %d %d %d\n", rank, local_rank, attempt, (int)getpid(),
                 (int)getpgrp());
        append_line(path, line);
        dump_env(dir, rank, attempt, argc, argv);
    }
    if (double_fork) {
        /* The daemon sends its pid back through a pipe; the worker records it, so the record
         * exists before the worker goes on. */
        int p[2];
        if (pipe(p) != 0)
            return 3;
        pid_t mid = fork();
        if (mid == 0) {
            setsid();
            pid_t d = fork();
            if (d != 0)
                _exit(d > 0 ? 0 : 1);
            int self = (int)getpid();
            write_all(p[1], (const char *)&self, sizeof self);
            int fd = open("/dev/null", O_RDWR);
            for (int k = 0; fd >= 0 && k < 3; k++)
                dup2(fd, k);
            for (int k = 3; k < 64; k++)
                close(k);
            for (;;)
                pause();
        }
        close(p[1]);
        int daemon_pid = 0;
        if (mid > 0 && read(p[0], &daemon_pid, sizeof daemon_pid) == sizeof daemon_pid &&
            dir != NULL) {
            char path[4096];
            snprintf(path, sizeof path, "%s/children", dir);
            snprintf(line, sizeof line, "%d\n", daemon_pid);
            append_line(path, line);
        }
        close(p[0]);
        if (mid > 0)
            waitpid(mid, NULL, 0);
    }
    if (child) {
        pid_t c = fork();
        if (c == 0) {
            if (daemon_child) {
                setsid();
                int fd = open("/dev/null", O_RDWR);
                for (int k = 0; fd >= 0 && k < 3; k++)
                    dup2(fd, k);
                if (env_int("CTRUN_HEARTBEAT_FD", -1) > 2)
                    close(env_int("CTRUN_HEARTBEAT_FD", -1));
            }
            for (;;)
                pause();
        }
        if (dir != NULL && c > 0) {
            char path[4096];
            snprintf(path, sizeof path, "%s/children", dir);
            snprintf(line, sizeof line, "%d\n", (int)c);
            append_line(path, line);
        }
    }
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--out") == 0 || strcmp(argv[i], "--err") == 0) {
            int fd = argv[i][2] == 'o' ? 1 : 2;
            write_all(fd, argv[i + 1], strlen(argv[i + 1]));
            write_all(fd, "\n", 1);
            i++;
        }
    }
    if (long_n > 0) {
        char *buf = malloc((size_t)long_n);
        if (buf != NULL) {
            memset(buf, 'x', (size_t)long_n);
            write_all(1, buf, (size_t)long_n);
            free(buf);
        }
    }
    if (heartbeat > 0) {
        ct_heartbeat_t hb;
        ct_errbuf_t eb = {{0}};
        if (ct_heartbeat_init(&hb, env_int("CTRUN_HEARTBEAT_FD", -1), 0, &eb) == 0) {
            for (int s = 1; s <= heartbeat; s++) {
                if (s > 1 && heartbeat_ms > 0) {
                    struct timespec ts = {heartbeat_ms / 1000,
                                          (long)(heartbeat_ms % 1000) * 1000000L};
                    nanosleep(&ts, NULL);
                }
                ct_heartbeat_beat(&hb, (uint64_t)s);
            }
            ct_heartbeat_close(&hb);
        }
    }
    bool applies = (when_rank < 0 || when_rank == rank) &&
                   (when_attempt < 0 || when_attempt == attempt) &&
                   (when_world < 0 || when_world == env_int("WORLD_SIZE", 0));
    bool action = exit_code >= 0 || sig != 0 || errfile_msg != NULL;
    if (!applies || !action) {
        if (flood)
            flood_ms(sleep_ms_v);
        else
            sleep_ms(sleep_ms_v);
        return 0;
    }
    sleep_ms(delay_ms);
    if (errfile_msg != NULL) {
        const char *path = getenv("TORCHELASTIC_ERROR_FILE");
        ct_errbuf_t eb = {{0}};
        if (path != NULL && path[0] != '\0')
            ct_errfile_write_path(path, errfile_msg,
                                  "Traceback (most recent call last):\n  File \"w.py\", line 1",
                                  (int64_t)ct_time_unix_s(), 0, &eb);
        if (exit_code < 0 && sig == 0)
            exit_code = 1;
    }
    if (sig != 0) {
        signal(sig, SIG_DFL);
        raise(sig);
    }
    return exit_code;
}
