/*
 * test_ctrun_proc.c - worker processes on a libuv loop (launcher/agent/ctrun_proc.c), driving the
 * test worker (argv[1]): exit codes and signals arrive through the pidfd, output through the
 * sinks (raw to a file), heartbeat records through fd 3; exec failures come back from the spawn
 * call with the reason; the worker leads its own session and a group signal reaches its child;
 * a grandchild holding the output pipe does not keep the worker from being done; PATH lookup;
 * where cgroup v2 is writable, workers are created in their attempt's cgroup folder without a
 * migration's wait, also after the job's folder went through cgroup.kill.
 * Every case ends with the loop closing cleanly.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ct_proc.h"
#include "ct_test.h"
#include "ct_time.h"
#include "ctrun_cgroup.h"
#include "ctrun_proc.h"

static const char *worker;
static char scratch[256];

typedef struct result {
    int exits, dones, beats;
    int exitcode;
    uint64_t last_step;
} result_t;

static void on_exit_cb(ctrun_proc_t *p, int exitcode, void *data)
{
    result_t *r = data;
    CT_ASSERT(p->exited);
    r->exits++;
    r->exitcode = exitcode;
}

static void on_heartbeat_cb(ctrun_proc_t *p, const ct_heartbeat_record_t *rec, void *data)
{
    result_t *r = data;
    (void)p;
    CT_ASSERT_EQ(rec->magic, CT_HEARTBEAT_MAGIC);
    r->beats++;
    r->last_step = rec->step;
}

static void on_done_cb(ctrun_proc_t *p, void *data)
{
    result_t *r = data;
    (void)p;
    r->dones++;
}

static const ctrun_proc_callbacks_t callbacks = {on_exit_cb, on_heartbeat_cb, on_done_cb};

/* Runs the test worker with extra arguments; stdout goes raw into a file whose content is
 * returned (malloc'd). */
static char *run_worker(const char *const *extra, result_t *r, bool heartbeat, int64_t drain_ms)
{
    uv_loop_t loop;
    CT_ASSERT_OK(uv_loop_init(&loop));
    char outpath[512];
    snprintf(outpath, sizeof outpath, "%s/out.txt", scratch);
    int fd = open(outpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CT_ASSERT(fd >= 0);
    ctrun_sink_t sink;
    CT_ASSERT_OK(ctrun_sink_init(&sink, -1, fd, NULL, 0));
    char *argv[32] = {(char *)worker, "--dir", scratch};
    int n = 3;
    for (int i = 0; extra[i] != NULL; i++)
        argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    char *envp[] = {"RANK=0", "CTRUN_HEARTBEAT_FD=3", NULL};
    ctrun_proc_opts_t o = {.file = worker,
                           .argv = argv,
                           .envp = envp,
                           .out = &sink,
                           .heartbeat = heartbeat,
                           .drain_ms = drain_ms};
    ctrun_proc_t p;
    ct_errbuf_t eb = {{0}};
    memset(r, 0, sizeof *r);
    int rc = ctrun_proc_spawn(&p, &loop, &o, &callbacks, r, &eb);
    CT_ASSERT_MSG(rc == 0, "spawn: %s", eb.msg);
    CT_ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
    CT_ASSERT_EQ(r->exits, 1);
    CT_ASSERT_EQ(r->dones, 1);
    CT_ASSERT(p.done);
    CT_ASSERT_OK(uv_loop_close(&loop));
    ctrun_sink_close(&sink);
    close(fd);
    FILE *f = fopen(outpath, "r");
    CT_ASSERT(f != NULL);
    static char buf[1 << 16];
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[got] = '\0';
    return strdup(buf);
}

static void test_exit_code_and_output(void)
{
    result_t r;
    const char *const extra[] = {"--out", "hello", "--exit", "7", NULL};
    char *out = run_worker(extra, &r, false, 0);
    CT_ASSERT_EQ(r.exitcode, 7);
    CT_ASSERT_STR_EQ(out, "hello\n");
    free(out);
}

static void test_signal_exit(void)
{
    result_t r;
    const char *const extra[] = {"--signal", "11", NULL};
    free(run_worker(extra, &r, false, 0));
    CT_ASSERT_EQ(r.exitcode, -SIGSEGV);
}

static void test_heartbeat(void)
{
    result_t r;
    const char *const extra[] = {"--heartbeat", "5", NULL};
    free(run_worker(extra, &r, true, 0));
    CT_ASSERT_EQ(r.exitcode, 0);
    CT_ASSERT_EQ(r.beats, 5);
    CT_ASSERT_EQ(r.last_step, 5);
}

static void test_own_session(void)
{
    result_t r;
    const char *const extra[] = {NULL};
    free(run_worker(extra, &r, false, 0));
    char path[512];
    snprintf(path, sizeof path, "%s/starts", scratch);
    FILE *f = fopen(path, "r");
    CT_ASSERT(f != NULL);
    int rank, lr, k, pid = 0, pgid = -1, last_pid = 0, last_pgid = -1;
    while (fscanf(f, "%d %d %d %d %d", &rank, &lr, &k, &pid, &pgid) == 5) {
        last_pid = pid;
        last_pgid = pgid;
    }
    fclose(f);
    CT_ASSERT(last_pid > 0);
    CT_ASSERT_EQ(last_pgid, last_pid);
    CT_ASSERT(getsid(0) != last_pid);
}

static void test_drain_bounded_by_grandchild(void)
{
    /* The worker exits at once, but its child keeps the stdout pipe open: the proc is done once
     * the drain time is over, and the group signal then removes the child. */
    result_t r;
    const char *const extra[] = {"--child", "--out", "bye", NULL};
    int64_t t0 = ct_time_ms();
    char *out = run_worker(extra, &r, false, 200);
    CT_ASSERT_EQ(r.exitcode, 0);
    CT_ASSERT_STR_EQ(out, "bye\n");
    CT_ASSERT_GE(ct_time_ms() - t0, 150);
    free(out);
    char path[512];
    snprintf(path, sizeof path, "%s/children", scratch);
    FILE *f = fopen(path, "r");
    CT_ASSERT(f != NULL);
    int child = 0, c;
    while (fscanf(f, "%d", &c) == 1)
        child = c;
    fclose(f);
    CT_ASSERT(child > 0);
    pid_t group = getpgid(child); /* still there after the worker was done */
    CT_ASSERT(group > 0);
    CT_ASSERT_OK(killpg(group, SIGKILL) == 0 ? 0 : -errno);
}

static void spawn_error(const char *file, int want_rc, const char *want_text)
{
    uv_loop_t loop;
    CT_ASSERT_OK(uv_loop_init(&loop));
    char *argv[] = {(char *)file, NULL};
    char *envp[] = {NULL};
    ctrun_proc_opts_t o = {.file = file, .argv = argv, .envp = envp};
    ctrun_proc_t p;
    ct_errbuf_t eb = {{0}};
    result_t r = {0};
    int rc = ctrun_proc_spawn(&p, &loop, &o, &callbacks, &r, &eb);
    CT_ASSERT_EQ(rc, want_rc);
    CT_ASSERT_STR_CONTAINS(eb.msg, want_text);
    CT_ASSERT(p.done);
    CT_ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
    CT_ASSERT_EQ(r.exits + r.dones, 0);
    CT_ASSERT_OK(uv_loop_close(&loop));
}

static void test_exec_failures_at_spawn(void)
{
    char path[512];
    spawn_error("/nonexistent/prog", CT_ESPAWN, "/nonexistent/prog: No such file or directory");
    spawn_error("no-such-program-in-path", -ENOENT, "not found in PATH");
    /* Not executable. */
    snprintf(path, sizeof path, "%s/noexec", scratch);
    FILE *f = fopen(path, "w");
    CT_ASSERT(f != NULL);
    fputs("#!/bin/sh\n", f);
    fclose(f);
    chmod(path, 0644);
    spawn_error(path, CT_ESPAWN, "Permission denied");
    /* Executable but no known format (no #! line): subprocess reports it; so do we. */
    snprintf(path, sizeof path, "%s/garbage", scratch);
    f = fopen(path, "w");
    CT_ASSERT(f != NULL);
    fputs("\x01\x02\x03 not a program\n", f);
    fclose(f);
    chmod(path, 0755);
    spawn_error(path, CT_ESPAWN, "Exec format error");
    /* A directory: execve says EACCES; the message says what it is. */
    char want[600];
    snprintf(want, sizeof want, "%s: Is a directory", scratch);
    spawn_error(scratch, CT_ESPAWN, want);
}

static void test_resolve(void)
{
    char *out = NULL;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ctrun_proc_resolve("sh", "/nonexistent:/bin:/usr/bin", &out, &eb));
    CT_ASSERT_STR_EQ(out, "/bin/sh");
    free(out);
    CT_ASSERT_OK(ctrun_proc_resolve("./x", "/bin", &out, &eb));
    CT_ASSERT_STR_EQ(out, "./x");
    free(out);
    CT_ASSERT_ERR(ctrun_proc_resolve("definitely-not-here", "/nonexistent", &out, &eb), -ENOENT);
    CT_ASSERT_ERR(ctrun_proc_resolve("", "/bin", &out, &eb), -ENOENT);
}

static void test_close_running(void)
{
    /* Closing a running worker's handles: on_done runs, on_exit does not; the caller then owns
     * the cleanup of the process. */
    uv_loop_t loop;
    CT_ASSERT_OK(uv_loop_init(&loop));
    char *argv[] = {(char *)worker, "--sleep-ms", "-1", NULL};
    char *envp[] = {NULL};
    ctrun_proc_opts_t o = {.file = worker, .argv = argv, .envp = envp, .heartbeat = true};
    ctrun_proc_t p;
    ct_errbuf_t eb = {{0}};
    result_t r = {0};
    CT_ASSERT_OK(ctrun_proc_spawn(&p, &loop, &o, &callbacks, &r, &eb));
    pid_t pid = p.pid;
    CT_ASSERT_OK(ctrun_proc_signal(&p, SIGKILL));
    ctrun_proc_close(&p);
    CT_ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
    CT_ASSERT_EQ(r.dones, 1);
    CT_ASSERT_EQ(r.exits, 0);
    CT_ASSERT_OK(uv_loop_close(&loop));
    int st;
    CT_ASSERT_EQ(waitpid(pid, &st, 0), pid);
    CT_ASSERT(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Spawns the sleeping test worker into cg's current attempt folder (or, without cg, into none),
 * after a pause (a machine between restarts); returns how long the spawn call took (ns). The
 * worker is left running on loop. */
static int64_t spawn_paused(uv_loop_t *loop, ctrun_proc_t *p, result_t *r, const ctrun_cgroup_t *cg)
{
    ct_sleep_ms(150);
    static char *argv[] = {NULL, "--sleep-ms", "-1", NULL};
    static char *envp[] = {NULL};
    argv[0] = (char *)worker;
    ctrun_proc_opts_t o = {.file = worker,
                           .argv = argv,
                           .envp = envp,
                           .cgroup_dir_fd = cg ? cg->attempt_dir_fd : -1,
                           .cgroup_fd = cg ? cg->attempt_procs_fd : -1};
    ct_errbuf_t eb = {{0}};
    memset(r, 0, sizeof *r);
    int64_t t0 = ct_time_ns();
    CT_ASSERT_OK(ctrun_proc_spawn(p, loop, &o, &callbacks, r, &eb));
    return ct_time_ns() - t0;
}

static double min_ms(int64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof v[0], cmp_i64);
    return (double)v[0] / 1e6;
}

/* Five attempts as the agent runs them: a fresh folder, a pause, a worker spawned into it,
 * cgroup.kill of the job's folder. Each worker lands in its attempt's folder and lives until
 * the kill (some kernels SIGKILL a child created in a cgroup that went through cgroup.kill: the
 * folder must be new). Spawning into the cgroup costs no RCU grace period, which a move through
 * cgroup.procs waits for after every pause (5-15 ms on a 2-core VM): compared with spawns
 * without a cgroup after the same pause, taking turns, the fastest costs less than 2 ms more
 * (the fastest of each, as load only ever adds time; not under AddressSanitizer). */
static void test_spawn_into_cgroup(void)
{
    ctrun_cgroup_t cg;
    ct_errbuf_t eb = {{0}};
    if (ctrun_cgroup_create(&cg, NULL, NULL, &eb) != 0) {
        printf("# skip: %s\n", eb.msg);
        return;
    }
    enum { N = 5 };
    int64_t in_cg[N], plain[N];
    for (int k = 0; k < N; k++) {
        uv_loop_t loop;
        CT_ASSERT_OK(uv_loop_init(&loop));
        ctrun_proc_t p;
        result_t r;
        plain[k] = spawn_paused(&loop, &p, &r, NULL);
        CT_ASSERT_OK(ctrun_proc_signal(&p, SIGKILL));
        CT_ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);

        CT_ASSERT_OK(ctrun_cgroup_attempt(&cg));
        in_cg[k] = spawn_paused(&loop, &p, &r, &cg);
        char file[64], want[32], have[4096] = "";
        snprintf(file, sizeof file, "/proc/%d/cgroup", (int)p.pid);
        snprintf(want, sizeof want, "/attempt-%d\n", k);
        int fd = open(file, O_RDONLY | O_CLOEXEC);
        CT_ASSERT(fd >= 0);
        ssize_t n = read(fd, have, sizeof have - 1);
        close(fd);
        have[n > 0 ? n : 0] = '\0';
        CT_ASSERT_MSG(strstr(have, want) != NULL, "worker of attempt %d in:\n%.300s", k, have);
        ct_sleep_ms(50);
        CT_ASSERT_MSG(ct_proc_alive(p.pid), "the worker of attempt %d died at birth", k);
        CT_ASSERT_OK(ctrun_cgroup_kill(&cg));
        CT_ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
        CT_ASSERT_EQ(r.exitcode, -SIGKILL);
        CT_ASSERT_OK(uv_loop_close(&loop));
    }
    ctrun_cgroup_destroy(&cg, 2000);
    double m_cg = min_ms(in_cg, N), m_plain = min_ms(plain, N);
    printf("# spawn after a 150 ms pause, fastest of %d: %.2f ms into a cgroup folder, %.2f ms "
           "without\n",
           N, m_cg, m_plain);
#if defined(__SANITIZE_ADDRESS__)
    /* The spawn copies the page tables, and ASan's shadow memory makes them large: the time
     * says nothing here. */
    printf("# AddressSanitizer build: the time is not checked\n");
#else
    CT_ASSERT_MSG(m_cg - m_plain < 2.0, "spawning into the cgroup cost %.2f ms more",
                  m_cg - m_plain);
#endif
}

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        CT_SKIP("usage: test_ctrun_proc TEST_WORKER");
    worker = argv[1];
    snprintf(scratch, sizeof scratch, "/tmp/test_ctrun_proc.XXXXXX");
    CT_ASSERT(mkdtemp(scratch) != NULL);
    CT_RUN(test_exit_code_and_output);
    CT_RUN(test_signal_exit);
    CT_RUN(test_heartbeat);
    CT_RUN(test_own_session);
    CT_RUN(test_drain_bounded_by_grandchild);
    CT_RUN(test_exec_failures_at_spawn);
    CT_RUN(test_resolve);
    CT_RUN(test_close_running);
    CT_RUN(test_spawn_into_cgroup);
    nftw(scratch, rm_cb, 8, FTW_DEPTH | FTW_PHYS);
    return 0;
}
