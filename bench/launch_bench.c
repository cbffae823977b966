/*
 * launch_bench.c - ctrun against torchrun, measured in the same run:
 *
 *   launch_bench --ctrun PATH [--runs N] [--no-torchrun]
 *
 * (1) no-op job: wall time from starting the launcher until it exits, for
 *     `--standalone --nproc_per_node=2 --no_python true`;
 * (2) restart latency: in a `--standalone --nproc_per_node=2 --max_restarts=1` job of this
 *     program's own worker mode, the time from a worker's SIGKILL until every local worker of
 *     the next attempt has started. Workers write their start time (CLOCK_MONOTONIC, the same
 *     clock as the kill's) to a file; the launcher's own start-up is outside the interval.
 * ctrun runs twice: with its per-job cgroup (where cgroup v2 is writable) and with
 * CTRUN_CGROUP=off, so the cgroup's share of both figures shows in the same run.
 * Median (and min, max) of N runs each (default 10). torchrun is PyTorch's
 * `python -m torch.distributed.run` with --monitor_interval=0.1 as in current releases, from
 * CTRUN_TORCH13_PYTHON (default /usr/bin/python3; it also gets --redirects 9:0 --tee 9:0, without
 * which 1.13 crashes on Python 3.11) and CTRUN_TORCH2_PYTHON (default
 * ~/.venvs/torch2/bin/python); a missing one is skipped with a '#' note. Output: '#' header,
 * one fixed-width row per launcher, ratios to ctrun in the footer.
 *
 * Not a test: nothing here asserts speed. Every launched job runs in its own session and is
 * killed as a group when a run ends, so an interrupted benchmark leaves nothing behind; the
 * next run starts once that session is empty, so one launcher's teardown does not weigh on the
 * next measurement. Launchers take turns run by run, so a change of machine load hits all alike.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ct_config.h"
#include "ct_time.h"

#define MAX_RUNS 1000

/* ---- worker mode -------------------------------------------------------------------------- */

/* `launch_bench --worker FILE`: appends "<attempt> <local_rank> <pid> <start ns>" to FILE, then
 * sleeps until killed in attempt 0, or exits 0 at once in later attempts. */
static int worker_main(const char *file)
{
    int64_t t = ct_time_ns();
    const char *a = getenv("TORCHELASTIC_RESTART_COUNT");
    const char *lr = getenv("LOCAL_RANK");
    int attempt = a ? atoi(a) : 0;
    char line[128];
    int n = snprintf(line, sizeof line, "%d %s %d %lld\n", attempt, lr ? lr : "0", (int)getpid(),
                     (long long)t);
    int fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, line, (size_t)n) != n)
        return 2;
    close(fd);
    if (attempt > 0)
        return 0;
    for (;;)
        pause();
}

/* ---- launchers ---------------------------------------------------------------------------- */

typedef struct launcher {
    const char *name;
    char version[64];
    const char *python; /* NULL for ctrun */
    const char *env;    /* one NAME=VALUE for the launcher, or NULL */
    bool pt13;
    bool available;
    double noop[MAX_RUNS], noop_cpu[MAX_RUNS], restart[MAX_RUNS];
    int nnoop, nrestart, failures;
} launcher_t;

static const char *ctrun_path;
static char self_path[4096];
static char scratch[256];

/* Starts argv in its own session with env (NAME=VALUE, or NULL) added, output to log (or
 * /dev/null); returns the pid. */
static pid_t start(char *const *argv, const char *env, const char *log)
{
    pid_t pid = fork();
    if (pid == 0) {
        setsid();
        int fd = open(log ? log : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, 0);
        setenv("OMP_NUM_THREADS", "1", 1); /* no notice to print */
        if (env != NULL)
            putenv((char *)env);
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* Waits for pid up to timeout_ms; kills its session on timeout. Returns the exit status or -1. */
static int finish(pid_t pid, int64_t timeout_ms)
{
    int64_t deadline = ct_time_ms() + timeout_ms;
    int st = 0;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            break;
        if (ct_time_ms() > deadline) {
            kill(-pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        ct_sleep_ms(1);
    }
    kill(-pid, SIGKILL); /* anything of the job still in its session */
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Between runs: until nothing of the last job is left (a killed PyTorch process takes a while
 * to free its memory), then a short pause, so that one run's teardown is not the next run's
 * load. Zombies reparented to us are reaped here too. */
static void settle(pid_t session)
{
    int64_t deadline = ct_time_ms() + 10000;
    while (kill(-session, 0) == 0 && ct_time_ms() < deadline) {
        while (waitpid(-1, NULL, WNOHANG) > 0) {
        }
        ct_sleep_ms(5);
    }
    ct_sleep_ms(100);
}

static int build_argv(const launcher_t *l, char **argv, const char *const *job)
{
    int n = 0;
    if (l->python == NULL) {
        argv[n++] = (char *)ctrun_path;
    } else {
        argv[n++] = (char *)l->python;
        argv[n++] = "-m";
        argv[n++] = "torch.distributed.run";
        argv[n++] = "--monitor_interval=0.1";
        if (l->pt13) {
            argv[n++] = "--redirects";
            argv[n++] = "9:0";
            argv[n++] = "--tee";
            argv[n++] = "9:0";
        }
    }
    for (int i = 0; job[i] != NULL; i++)
        argv[n++] = (char *)job[i];
    argv[n] = NULL;
    return n;
}

/* User + system CPU time in ms (of the launcher and every process it waited for). */
static double cpu_ms(const struct rusage *r)
{
    return (double)(r->ru_utime.tv_sec + r->ru_stime.tv_sec) * 1e3 +
           (double)(r->ru_utime.tv_usec + r->ru_stime.tv_usec) / 1e3;
}

static void noop_once(launcher_t *l)
{
    const char *const job[] = {"--standalone", "--nproc_per_node=2", "--no_python", "true", NULL};
    char *argv[32];
    build_argv(l, argv, job);
    struct rusage r0, r1;
    getrusage(RUSAGE_CHILDREN, &r0);
    int64_t t0 = ct_time_ns();
    pid_t pid = start(argv, l->env, NULL);
    int st = finish(pid, 120000);
    int64_t t1 = ct_time_ns();
    getrusage(RUSAGE_CHILDREN, &r1);
    settle(pid);
    if (st != 0) {
        l->failures++;
        return;
    }
    l->noop_cpu[l->nnoop] = cpu_ms(&r1) - cpu_ms(&r0);
    l->noop[l->nnoop++] = (double)(t1 - t0) / 1e6;
}

/* Parses the start records: fills starts[attempt][local_rank] (ns) and pids. */
static int read_starts(const char *file, int64_t starts[2][2], int pids[2][2])
{
    FILE *f = fopen(file, "r");
    int n = 0;
    if (f == NULL)
        return 0;
    int a, lr, pid;
    long long t;
    while (fscanf(f, "%d %d %d %lld", &a, &lr, &pid, &t) == 4) {
        if (a >= 0 && a < 2 && lr >= 0 && lr < 2) {
            starts[a][lr] = t;
            pids[a][lr] = pid;
            n++;
        }
    }
    fclose(f);
    return n;
}

static void restart_once(launcher_t *l, int run)
{
    char file[512], log[512];
    snprintf(file, sizeof file, "%s/starts.%s.%d", scratch, l->name, run);
    snprintf(log, sizeof log, "%s/log.%s.%d", scratch, l->name, run);
    for (char *p = file + strlen(scratch); *p; p++)
        if (*p == ' ' || *p == '(' || *p == ')')
            *p = '_';
    for (char *p = log + strlen(scratch); *p; p++)
        if (*p == ' ' || *p == '(' || *p == ')')
            *p = '_';
    unlink(file);
    const char *const job[] = {"--standalone",
                               "--nproc_per_node=2",
                               "--max_restarts=1",
                               "--no_python",
                               self_path,
                               "--worker",
                               file,
                               NULL};
    char *argv[32];
    build_argv(l, argv, job);
    pid_t pid = start(argv, l->env, log);
    int64_t starts[2][2] = {{0}}, deadline = ct_time_ms() + 120000;
    int pids[2][2] = {{0}};
    while (read_starts(file, starts, pids) < 2 && ct_time_ms() < deadline)
        ct_sleep_ms(2);
    if (starts[0][0] == 0 || starts[0][1] == 0) {
        l->failures++;
        finish(pid, 1);
        settle(pid);
        return;
    }
    ct_sleep_ms(100); /* let the launcher settle into supervising */
    int64_t t_kill = ct_time_ns();
    kill(pids[0][1], SIGKILL);
    while ((starts[1][0] == 0 || starts[1][1] == 0) && ct_time_ms() < deadline) {
        read_starts(file, starts, pids);
        ct_sleep_ms(1);
    }
    int st = finish(pid, 60000);
    settle(pid);
    if (st != 0 || starts[1][0] == 0 || starts[1][1] == 0) {
        l->failures++;
        return;
    }
    int64_t last = starts[1][0] > starts[1][1] ? starts[1][0] : starts[1][1];
    l->restart[l->nrestart++] = (double)(last - t_kill) / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    if (n == 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The interpreter's torch version, or false when it has none. */
static bool probe_torch(launcher_t *l)
{
    if (access(l->python, X_OK) != 0)
        return false;
    char cmd[4200];
    snprintf(cmd, sizeof cmd,
             "'%s' -c 'import torch.distributed.run, torch; print(torch.__version__)' "
             "2>/dev/null",
             l->python);
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        return false;
    bool ok = fgets(l->version, sizeof l->version, p) != NULL;
    pclose(p);
    l->version[strcspn(l->version, "\n")] = '\0';
    return ok && l->version[0] != '\0';
}

static void print_row(launcher_t *l)
{
    double nm = median(l->noop, l->nnoop), rm = median(l->restart, l->nrestart);
    double cm = median(l->noop_cpu, l->nnoop);
    printf("%-18s %-14s %10.2f %10.2f %10.2f %10.2f   %10.2f %10.2f %10.2f %5d\n", l->name,
           l->version, nm, l->nnoop ? l->noop[0] : 0, l->nnoop ? l->noop[l->nnoop - 1] : 0, cm, rm,
           l->nrestart ? l->restart[0] : 0, l->nrestart ? l->restart[l->nrestart - 1] : 0,
           l->failures);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--worker") == 0)
        return worker_main(argv[2]);
    int runs = 10;
    bool torchrun = true;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ctrun") == 0 && i + 1 < argc)
            ctrun_path = argv[++i];
        else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--no-torchrun") == 0)
            torchrun = false;
        else {
            fprintf(stderr, "usage: launch_bench --ctrun PATH [--runs N] [--no-torchrun]\n");
            return 2;
        }
    }
    if (ctrun_path == NULL || runs < 1 || runs > MAX_RUNS) {
        fprintf(stderr, "usage: launch_bench --ctrun PATH [--runs N (1..%d)] [--no-torchrun]\n",
                MAX_RUNS);
        return 2;
    }
    ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    if (n <= 0)
        return 1;
    self_path[n] = '\0';
    snprintf(scratch, sizeof scratch, "/tmp/launch_bench.XXXXXX");
    if (mkdtemp(scratch) == NULL)
        return 1;

    static launcher_t ls[4];
    int nl = 0;
    ls[nl] = (launcher_t){.name = "ctrun", .available = true};
    snprintf(ls[nl].version, sizeof ls[nl].version, "%s", CT_VERSION);
    nl++;
    ls[nl] =
        (launcher_t){.name = "ctrun (no cgroup)", .env = "CTRUN_CGROUP=off", .available = true};
    snprintf(ls[nl].version, sizeof ls[nl].version, "%s", CT_VERSION);
    nl++;
    char py2[4096];
    const char *home = getenv("HOME");
    snprintf(py2, sizeof py2, "%s/.venvs/torch2/bin/python", home ? home : "");
    const char *p13 = getenv("CTRUN_TORCH13_PYTHON"), *p2 = getenv("CTRUN_TORCH2_PYTHON");
    launcher_t t13 = {
        .name = "torchrun (1.13)", .python = p13 ? p13 : "/usr/bin/python3", .pt13 = true};
    launcher_t t2 = {.name = "torchrun (>=2.2)", .python = p2 ? p2 : py2};
    struct utsname u;
    uname(&u);
    double load[3] = {0};
    getloadavg(load, 3);
    printf("# launch_bench: ctrun vs torchrun, median (min, max) of %d runs, milliseconds\n", runs);
    printf("# host %s, kernel %s, %ld CPUs, load average %.2f %.2f %.2f\n", u.nodename, u.release,
           sysconf(_SC_NPROCESSORS_ONLN), load[0], load[1], load[2]);
    printf("# noop: --standalone --nproc_per_node=2 --no_python true, launch to exit (noop_cpu: "
           "user+system CPU of the launcher and its workers)\n");
    printf("# restart: kill -9 of one of 2 workers until both workers of the next attempt have "
           "started\n");
    if (torchrun) {
        launcher_t *cands[2] = {&t13, &t2};
        for (int i = 0; i < 2; i++) {
            if (!probe_torch(cands[i])) {
                printf("# %s: skipped, no PyTorch at %s\n", cands[i]->name, cands[i]->python);
                continue;
            }
            bool is13 = strncmp(cands[i]->version, "1.", 2) == 0;
            if (is13 != cands[i]->pt13) {
                printf("# %s: skipped, %s has PyTorch %s\n", cands[i]->name, cands[i]->python,
                       cands[i]->version);
                continue;
            }
            cands[i]->available = true;
            ls[nl++] = *cands[i];
        }
    }
    fflush(stdout);
    /* Interleaved, so that a change of machine load hits every launcher alike. */
    for (int r = 0; r < runs; r++) {
        for (int i = 0; i < nl; i++) {
            noop_once(&ls[i]);
            restart_once(&ls[i], r);
        }
    }
    printf("%-18s %-14s %10s %10s %10s %10s   %10s %10s %10s %5s\n", "# launcher", "version",
           "noop_ms", "min", "max", "noop_cpu", "restart_ms", "min", "max", "fail");
    for (int i = 0; i < nl; i++)
        print_row(&ls[i]);
    double cn = median(ls[0].noop, ls[0].nnoop), cr = median(ls[0].restart, ls[0].nrestart);
    for (int i = 1; i < nl; i++)
        if (ls[i].python != NULL)
            printf("# %s / ctrun: noop %.0fx, restart %.0fx\n", ls[i].name,
                   median(ls[i].noop, ls[i].nnoop) / cn,
                   median(ls[i].restart, ls[i].nrestart) / cr);
    printf("# targets: ctrun noop <= 10 ms (%s) and >= 100x faster than torchrun; restart <= 50 ms "
           "(%s)\n",
           cn <= 10 ? "met" : "not met", cr <= 50 ? "met" : "not met");
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
    if (system(cmd) != 0)
        fprintf(stderr, "# could not remove %s\n", scratch);
    for (int i = 0; i < nl; i++)
        if (ls[i].failures > 0)
            return 1;
    return 0;
}
