/*
 * test_inject.c - libctworker's half of fault injection (CTRUN_INJECT, ct_inject.c) and the
 * watchdog's stack dump: the value's grammar; kill@N dies by SIGKILL at exactly step N after
 * one heartbeat record for N (past the rate limit); stop@N stops the process there; torn@N at
 * each of the three checkpoint phases leaves a directory whose `latest` still loads a complete
 * checkpoint; SIGUSR1 prints the main thread's stack and the program goes on.
 *
 * Each case runs in a forked child (the fault ends it); the parent reaps it and inspects the
 * pipe, the status and the directory.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ct_test.h"
#include "ctworker.h"

static char root[256];

static void test_parse(void)
{
    ct_inject_t f;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ct_inject_parse(NULL, &f, &eb));
    CT_ASSERT_EQ(f.kind, CT_INJECT_NONE);
    CT_ASSERT_OK(ct_inject_parse("kill@50", &f, &eb));
    CT_ASSERT_EQ(f.kind, CT_INJECT_KILL);
    CT_ASSERT_EQ(f.step, 50);
    CT_ASSERT_OK(ct_inject_parse("stop@0", &f, &eb));
    CT_ASSERT_EQ(f.kind, CT_INJECT_STOP);
    CT_ASSERT_OK(ct_inject_parse("torn@7:latest", &f, &eb));
    CT_ASSERT_EQ(f.kind, CT_INJECT_TORN);
    CT_ASSERT_EQ(f.phase, CT_INJECT_PHASE_LATEST);
    static const char *const bad[][2] = {
        {"kill", "CTRUN_INJECT: \"kill\" is not KIND@STEP (kill, stop or torn)"},
        {"boom@3", "CTRUN_INJECT: unknown fault \"boom\" (expected kill, stop or torn)"},
        {"kill@x", "CTRUN_INJECT: step: \"x\" is not an integer"},
        {"torn@3", "CTRUN_INJECT: \"torn@3\": torn needs :data, :file or :latest"},
        {"torn@3:mid", "CTRUN_INJECT: unknown checkpoint phase \"mid\" (expected data, file or "
                       "latest)"},
        {"kill@3:data", "CTRUN_INJECT: \"kill@3:data\": only torn takes a phase"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ct_errbuf_clear(&eb);
        CT_ASSERT_MSG(ct_inject_parse(bad[i][0], &f, &eb) != 0, "%s", bad[i][0]);
        CT_ASSERT_STR_EQ(eb.msg, bad[i][1]);
    }
    /* ct_worker_setup refuses a malformed value. */
    setenv("CTRUN_INJECT", "kill@", 1);
    ct_worker_env_t env;
    CT_ASSERT_OK(ct_worker_env_read(&env, &eb));
    CT_ASSERT(ct_worker_setup(&env, 0, &eb) != 0);
    CT_ASSERT_STR_CONTAINS(eb.msg, "CTRUN_INJECT");
    unsetenv("CTRUN_INJECT");
}

/* Forks a child with CTRUN_INJECT=fault and a heartbeat pipe; the child runs body(arg).
 * Returns the child's wait status; *last_step gets the step of the last heartbeat record. */
static int run_child(const char *fault, void (*body)(void *), void *arg, int64_t *last_step,
                     bool stop_expected)
{
    int p[2];
    CT_ASSERT_EQ(pipe(p), 0);
    pid_t pid = fork();
    CT_ASSERT(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        char fd[16];
        snprintf(fd, sizeof fd, "%d", p[1]);
        setenv("CTRUN_HEARTBEAT_FD", fd, 1);
        setenv("CTRUN_INJECT", fault, 1);
        ct_worker_env_t env;
        ct_errbuf_t eb = {{0}};
        if (ct_worker_env_read(&env, &eb) != 0 || ct_worker_setup(&env, 0, &eb) != 0) {
            fprintf(stderr, "setup: %s\n", eb.msg);
            _exit(3);
        }
        body(arg);
        _exit(0);
    }
    close(p[1]);
    int status = 0;
    if (stop_expected) {
        CT_ASSERT_EQ(waitpid(pid, &status, WUNTRACED), pid);
        CT_ASSERT_MSG(WIFSTOPPED(status), "status 0x%x", status);
        kill(pid, SIGKILL);
    }
    CT_ASSERT_EQ(waitpid(pid, stop_expected ? NULL : &status, 0), pid);
    *last_step = -1;
    ct_heartbeat_record_t rec;
    while (read(p[0], &rec, sizeof rec) == (ssize_t)sizeof rec)
        *last_step = (int64_t)rec.step;
    close(p[0]);
    return status;
}

static void progress_loop(void *arg)
{
    (void)arg;
    for (uint64_t s = 0; s < 100; s++)
        ct_worker_progress(s);
}

static void test_kill_and_stop_at_step(void)
{
    int64_t last;
    int status = run_child("kill@37", progress_loop, NULL, &last, false);
    CT_ASSERT_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "status 0x%x", status);
    CT_ASSERT_EQ(last, 37); /* the record written past the 100 ms rate limit */
    status = run_child("stop@5", progress_loop, NULL, &last, true);
    CT_ASSERT_EQ(last, 5);
    status = run_child("kill@1000", progress_loop, NULL, &last, false);
    CT_ASSERT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status 0x%x", status);
}

typedef struct ckpt_case {
    char dir[300];
} ckpt_case_t;

static float weights[1024];

static void save_steps(void *arg)
{
    ckpt_case_t *c = arg;
    ct_ckpt_dir_t d;
    ct_errbuf_t eb = {{0}};
    if (ct_ckpt_dir_init(&d, c->dir, 3, true, &eb) != 0)
        _exit(4);
    ct_tensor_view_t v = {.name = "w", .dtype = CT_DTYPE_F32, .ndim = 1, .shape = {1024},
                          .data = weights};
    for (int64_t step = 1; step <= 6; step++) {
        for (int i = 0; i < 1024; i++)
            weights[i] = (float)(step * 1000 + i);
        ct_ckpt_meta_t *m = calloc(1, sizeof *m);
        m->step = step;
        m->world_size = 1;
        if (ct_ckpt_save(&d, CT_CKPT_STEP, &v, 1, m, &eb) != 0)
            _exit(5);
        free(m);
        ct_worker_progress((uint64_t)step);
    }
    ct_ckpt_dir_close(&d);
}

static void test_torn_checkpoint_phases(void)
{
    static const char *const phases[] = {"data", "file", "latest"};
    /* After a kill while writing step 4, `latest` names step 3 (data, file) or 4 (latest),
     * and what it names loads completely. */
    static const int64_t want[] = {3, 3, 4};
    for (int p = 0; p < 3; p++) {
        ckpt_case_t c;
        snprintf(c.dir, sizeof c.dir, "%s/torn_%s", root, phases[p]);
        char fault[32];
        snprintf(fault, sizeof fault, "torn@4:%s", phases[p]);
        int64_t last;
        int status = run_child(fault, save_steps, &c, &last, false);
        CT_ASSERT_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "%s: status 0x%x",
                      phases[p], status);
        CT_ASSERT_EQ(last, 4);
        char tmp[400];
        snprintf(tmp, sizeof tmp, "%s/step_000000000004.safetensors", c.dir);
        struct stat st;
        CT_ASSERT_EQ(stat(tmp, &st) == 0, p != 0); /* data: only a temporary file exists */
        ct_ckpt_dir_t d;
        ct_errbuf_t eb = {{0}};
        CT_ASSERT_OK(ct_ckpt_dir_init(&d, c.dir, 3, false, &eb));
        float back[1024];
        ct_tensor_view_t v = {.name = "w", .dtype = CT_DTYPE_F32, .ndim = 1, .shape = {1024},
                              .data = back};
        ct_ckpt_meta_t *m = calloc(1, sizeof *m);
        char name[CT_CKPT_NAME_MAX];
        CT_ASSERT_OK(ct_ckpt_load_latest(&d, &v, 1, m, name, &eb));
        CT_ASSERT_EQ(m->step, want[p]);
        for (int i = 0; i < 1024; i++)
            CT_ASSERT_EQ(back[i], (float)(want[p] * 1000 + i));
        free(m);
        ct_ckpt_dir_close(&d);
    }
}

static void test_stack_dump_signal(void)
{
    int err[2];
    CT_ASSERT_EQ(pipe(err), 0);
    pid_t pid = fork();
    CT_ASSERT(pid >= 0);
    if (pid == 0) {
        close(err[0]);
        dup2(err[1], 2);
        ct_worker_env_t env;
        ct_errbuf_t eb = {{0}};
        if (ct_worker_env_read(&env, &eb) != 0 ||
            ct_worker_setup(&env, CT_WORKER_CATCH_SIGNALS, &eb) != 0)
            _exit(3);
        raise(CT_WORKER_DUMP_SIGNAL);
        fprintf(stderr, "still running\n");
        _exit(0);
    }
    close(err[1]);
    char buf[16384];
    size_t n = 0;
    for (ssize_t r; (r = read(err[0], buf + n, sizeof buf - 1 - n)) > 0;)
        n += (size_t)r;
    buf[n] = '\0';
    close(err[0]);
    int status;
    CT_ASSERT_EQ(waitpid(pid, &status, 0), pid);
    CT_ASSERT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status 0x%x\n%.1500s", status, buf);
    CT_ASSERT_STR_CONTAINS(buf, "stack dump on signal 10");
    CT_ASSERT_STR_CONTAINS(buf, "the main thread");
    CT_ASSERT_STR_CONTAINS(buf, "C backtrace (most recent call first):");
    CT_ASSERT_STR_CONTAINS(buf, "  #0 ");
    CT_ASSERT_STR_CONTAINS(buf, "still running");
}

int main(void)
{
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("LOCAL_RANK");
    unsetenv("LOCAL_WORLD_SIZE");
    unsetenv("TORCHELASTIC_ERROR_FILE");
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/ct_fault_XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    CT_ASSERT(mkdtemp(root) != NULL);
    CT_RUN(test_parse);
    CT_RUN(test_kill_and_stop_at_step);
    CT_RUN(test_torn_checkpoint_phases);
    CT_RUN(test_stack_dump_signal);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : 1;
}
