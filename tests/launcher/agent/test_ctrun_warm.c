/*
 * test_ctrun_warm.c - --warm_restart's standbys (launcher/agent/ctrun_warm.c and
 * ctrun_standby.py) with a stand-in `torch` package on PYTHONPATH, so that no PyTorch is
 * needed: a worker forked from a standby is this process's child, watched by ctrun_proc like a
 * cold one (exit status, output, its own session, argv, environment, working directory); a
 * signal to its group reaches it and not the standby, which serves the next fork too; a standby
 * whose import fails, or that finds CUDA initialised, or that died, makes the fork fail with the
 * reason (the caller's cue to start cold); a missing ctrun_standby.py is reported at init.
 *
 *   test_ctrun_warm CTRUN_EXE PYTHON   (ctrun_standby.py sits next to CTRUN_EXE)
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
#include "ctrun_proc.h"
#include "ctrun_warm.h"

static const char *ctrun_exe, *python;
static const char *scratch;

typedef struct result {
    int exits, dones, exitcode;
} result_t;

static void on_exit_cb(ctrun_proc_t *p, int exitcode, void *data)
{
    result_t *r = data;
    (void)p;
    r->exits++;
    r->exitcode = exitcode;
}

static void on_done_cb(ctrun_proc_t *p, void *data)
{
    result_t *r = data;
    (void)p;
    r->dones++;
}

static const ctrun_proc_callbacks_t callbacks = {on_exit_cb, NULL, on_done_cb};

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CT_ASSERT(f != NULL);
    CT_ASSERT(fputs(text, f) >= 0);
    CT_ASSERT_OK(fclose(f));
}

/* A folder with a `torch` package whose __init__.py is body; returns the folder. */
static const char *fake_torch(const char *name, const char *body)
{
    static char dir[512];
    char pkg[600], init[700];
    snprintf(dir, sizeof dir, "%s/%s", scratch, name);
    snprintf(pkg, sizeof pkg, "%s/torch", dir);
    snprintf(init, sizeof init, "%s/__init__.py", pkg);
    mkdir(dir, 0700);
    mkdir(pkg, 0700);
    write_file(init, body);
    return dir;
}

static const char *const torch_ok = "class cuda:\n"
                                    "    @staticmethod\n"
                                    "    def is_initialized():\n"
                                    "        return False\n";

/* Standby 0 with PYTHONPATH=dir started on w. */
static void start_standby(ctrun_warm_t *w, const char *dir)
{
    ct_errbuf_t eb = {{0}};
    int rc = ctrun_warm_init(w, ctrun_exe, python, NULL, 1, &eb);
    CT_ASSERT_MSG(rc == 0, "init: %s", eb.msg);
    char pp[600];
    snprintf(pp, sizeof pp, "PYTHONPATH=%s", dir);
    char *envp[] = {pp, "CTRUN_HEARTBEAT_FD=3", "PATH=/usr/bin:/bin", NULL};
    rc = ctrun_warm_start(w, 0, envp, &eb);
    CT_ASSERT_MSG(rc == 0, "start: %s", eb.msg);
    CT_ASSERT(ctrun_warm_alive(w, 0));
}

typedef struct warm_ctx {
    ctrun_warm_t *w;
    ctrun_warm_req_t req;
} warm_ctx_t;

static int warm_start(void *data, int out_fd, int err_fd, int hb_fd, pid_t *pid, ct_errbuf_t *eb)
{
    warm_ctx_t *c = data;
    c->req.out_fd = out_fd;
    c->req.err_fd = err_fd;
    c->req.hb_fd = hb_fd;
    return ctrun_warm_fork(c->w, 0, &c->req, pid, eb);
}

/* Forks script (a file in scratch) with args from standby 0 under a loop, stdout into a file;
 * sig > 0 is sent to its group once it started. Returns its output (malloc'd). */
static char *run_warm(ctrun_warm_t *w, const char *script, char *const *args, int sig, result_t *r)
{
    uv_loop_t loop;
    CT_ASSERT_OK(uv_loop_init(&loop));
    char outpath[512], path[512];
    snprintf(outpath, sizeof outpath, "%s/out.txt", scratch);
    snprintf(path, sizeof path, "%s/%s", scratch, script);
    int fd = open(outpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CT_ASSERT(fd >= 0);
    ctrun_sink_t sink;
    CT_ASSERT_OK(ctrun_sink_init(&sink, -1, fd, NULL, 0));
    char *envp[] = {"WARM_TEST=yes", "PATH=/usr/bin:/bin", NULL};
    warm_ctx_t c = {
        .w = w,
        .req = {.cwd = scratch, .target = path, .args = args, .envp = envp, .cgroup_fd = -1}};
    ctrun_proc_opts_t o = {.out = &sink, .heartbeat = true, .start = warm_start, .start_data = &c};
    ctrun_proc_t p;
    ct_errbuf_t eb = {{0}};
    memset(r, 0, sizeof *r);
    int rc = ctrun_proc_spawn(&p, &loop, &o, &callbacks, r, &eb);
    CT_ASSERT_MSG(rc == 0, "spawn: %s", eb.msg);
    CT_ASSERT(p.pid > 0);
    CT_ASSERT_NE(p.pid, w->sb[0].pid);
    if (sig > 0) {
        /* Once the script says it is ready (its handler installed). */
        for (int i = 0; i < 500; i++) {
            struct stat st;
            if (stat(outpath, &st) == 0 && st.st_size > 0)
                break;
            uv_run(&loop, UV_RUN_NOWAIT);
            usleep(10000);
        }
        CT_ASSERT_OK(ctrun_proc_signal(&p, sig));
    }
    CT_ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
    CT_ASSERT_EQ(r->exits, 1);
    CT_ASSERT_EQ(r->dones, 1);
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

static void test_fork_is_our_child(void)
{
    ctrun_warm_t w;
    start_standby(&w, fake_torch("ok", torch_ok));
    char script[512];
    snprintf(script, sizeof script, "%s/show.py", scratch);
    write_file(script, "import os, sys\n"
                       "print(__name__, sys.argv[1:], os.environ.get('WARM_TEST'),\n"
                       "      os.environ.get('PYTHONPATH'), os.getcwd() == sys.argv[1],\n"
                       "      os.getppid(), os.getsid(0) == os.getpid(),\n"
                       "      os.getpgid(0) == os.getpid(), 'torch' in sys.modules)\n"
                       "sys.exit(7)\n");
    char parent[32];
    snprintf(parent, sizeof parent, "%d", (int)getpid());
    char *args[] = {(char *)scratch, "b c", NULL};
    result_t r;
    char *out = run_warm(&w, "show.py", args, 0, &r);
    CT_ASSERT_EQ(r.exitcode, 7);
    char want[1024];
    snprintf(want, sizeof want, "__main__ ['%s', 'b c'] yes None True %s True True True\n", scratch,
             parent);
    CT_ASSERT_STR_EQ(out, want);
    free(out);
    CT_ASSERT(ctrun_warm_alive(&w, 0)); /* and it serves again */
    out = run_warm(&w, "show.py", args, 0, &r);
    CT_ASSERT_EQ(r.exitcode, 7);
    free(out);
    ctrun_warm_free(&w);
}

static void test_signal_reaches_worker(void)
{
    ctrun_warm_t w;
    start_standby(&w, fake_torch("ok", torch_ok));
    char script[512];
    snprintf(script, sizeof script, "%s/wait.py", scratch);
    write_file(script, "import os, signal, sys, time\n"
                       "signal.signal(signal.SIGUSR1, lambda s, f: sys.exit(5))\n"
                       "print('ready', flush=True)\n"
                       "time.sleep(30)\n");
    char *args[] = {NULL};
    result_t r;
    free(run_warm(&w, "wait.py", args, SIGUSR1, &r));
    CT_ASSERT_EQ(r.exitcode, 5);
    free(run_warm(&w, "wait.py", args, SIGKILL, &r));
    CT_ASSERT_EQ(r.exitcode, -SIGKILL);
    CT_ASSERT(ctrun_warm_alive(&w, 0));
    ctrun_warm_free(&w);
}

/* A fork from a standby that cannot serve fails with reason want, and the standby is gone. */
static void fork_fails(ctrun_warm_t *w, const char *want)
{
    char *args[] = {NULL};
    char *envp[] = {"A=1", NULL};
    ctrun_warm_req_t req = {.cwd = "/",
                            .target = "/nonexistent.py",
                            .args = args,
                            .envp = envp,
                            .out_fd = 2,
                            .err_fd = 2,
                            .hb_fd = -1,
                            .cgroup_fd = -1};
    pid_t pid = 0;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT(ctrun_warm_fork(w, 0, &req, &pid, &eb) < 0);
    CT_ASSERT_EQ(pid, -1);
    CT_ASSERT_STR_CONTAINS(eb.msg, want);
    CT_ASSERT(!ctrun_warm_alive(w, 0));
}

static void test_import_failure(void)
{
    ctrun_warm_t w;
    start_standby(&w, fake_torch("bad", "raise ImportError('no torch in this test')\n"));
    fork_fails(&w, "FAIL import torch: ImportError: no torch in this test");
    ctrun_warm_free(&w);
}

static void test_cuda_initialised(void)
{
    ctrun_warm_t w;
    start_standby(&w, fake_torch("cuda", "class cuda:\n"
                                         "    @staticmethod\n"
                                         "    def is_initialized():\n"
                                         "        return True\n"));
    fork_fails(&w, "CUDA was initialised");
    ctrun_warm_free(&w);
}

static void test_standby_died(void)
{
    ctrun_warm_t w;
    start_standby(&w, fake_torch("ok", torch_ok));
    CT_ASSERT_OK(kill(w.sb[0].pid, SIGKILL));
    usleep(100000);
    fork_fails(&w, "no standby for local rank 0");
    ctrun_warm_free(&w);
}

static void test_script_missing(void)
{
    ctrun_warm_t w;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_ERR(ctrun_warm_init(&w, "/nonexistent/bin/ctrun", python, NULL, 1, &eb), -ENOENT);
    CT_ASSERT_STR_CONTAINS(eb.msg, "ctrun_standby.py not found");
    CT_ASSERT(!w.on);
}

int main(int argc, char **argv)
{
    if (argc < 3)
        CT_SKIP("usage: test_ctrun_warm CTRUN_EXE PYTHON");
    ctrun_exe = argv[1];
    python = argv[2];
    if (access(python, X_OK) != 0)
        CT_SKIP("no Python interpreter at %s", python);
    signal(SIGPIPE, SIG_IGN);
    scratch = ct_test_tmpdir("test_ctrun_warm.");
    CT_RUN(test_fork_is_our_child);
    CT_RUN(test_signal_reaches_worker);
    CT_RUN(test_import_failure);
    CT_RUN(test_cuda_initialised);
    CT_RUN(test_standby_died);
    CT_RUN(test_script_missing);
    return 0;
}
