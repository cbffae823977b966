/*
 * test_ctrun_cgroup.c - the job's cgroup v2 (ctrun_cgroup.h): the mount and the caller's path
 * from mountinfo and /proc/self/cgroup look-alikes (a missing hierarchy is a clean error); and,
 * where this machine has a writable cgroup v2 (otherwise that part skips), a real job folder:
 * a process moved in is killed by ctrun_cgroup_kill, the folder is removed by destroy, and a
 * stale folder of a dead agent (with a process left in it) is emptied and removed by the next
 * create.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ct_test.h"
#include "ct_time.h"
#include "ctrun_cgroup.h"

static char scratch[256];

static const char *write_file(const char *name, const char *text)
{
    static char path[2][512];
    static int k;
    char *p = path[k++ % 2];
    snprintf(p, 512, "%s/%s", scratch, name);
    FILE *f = fopen(p, "w");
    CT_ASSERT(f != NULL);
    fputs(text, f);
    fclose(f);
    return p;
}

static void test_no_hierarchy(void)
{
    const char *mi = write_file("mountinfo",
                                "22 1 0:21 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
    const char *self = write_file("cgroup", "0::/\n");
    ctrun_cgroup_t cg;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_ERR(ctrun_cgroup_create(&cg, mi, self, &eb), -ENOENT);
    CT_ASSERT_STR_EQ(eb.msg, "no cgroup v2 hierarchy mounted");
    CT_ASSERT_EQ(cg.path[0], '\0');
    CT_ASSERT_EQ(cg.procs_fd, -1);
    CT_ASSERT_OK(ctrun_cgroup_kill(&cg)); /* no-ops */
    CT_ASSERT(!ctrun_cgroup_populated(&cg));
    ctrun_cgroup_destroy(&cg, 0);
    /* a hierarchy in a folder that is not a cgroup file system: not usable */
    char fake[400];
    snprintf(fake, sizeof fake, "30 1 0:26 / %s rw - cgroup2 cgroup2 rw\n", scratch);
    mi = write_file("mountinfo", fake);
    CT_ASSERT(ctrun_cgroup_create(&cg, mi, self, &eb) != 0);
    CT_ASSERT_STR_CONTAINS(eb.msg, "is not usable");
}

static pid_t sleeper(void)
{
    pid_t pid = fork();
    CT_ASSERT(pid >= 0);
    if (pid == 0) {
        for (;;)
            pause();
    }
    return pid;
}

static bool reaped_by_signal(pid_t pid, int64_t ms)
{
    int64_t deadline = ct_time_ms() + ms;
    int st;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
        if (ct_time_ms() > deadline)
            return false;
        ct_sleep_ms(5);
    }
}

static void test_real_cgroup(void)
{
    ctrun_cgroup_t cg;
    ct_errbuf_t eb = {{0}};
    if (ctrun_cgroup_create(&cg, NULL, NULL, &eb) != 0) {
        printf("# skip: %s\n", eb.msg);
        return;
    }
    /* A process in the job's cgroup is killed by ctrun_cgroup_kill. */
    pid_t p = sleeper();
    char line[32];
    int n = snprintf(line, sizeof line, "%d", (int)p);
    CT_ASSERT_EQ(write(cg.procs_fd, line, (size_t)n), n);
    CT_ASSERT(ctrun_cgroup_populated(&cg));
    CT_ASSERT_OK(ctrun_cgroup_kill(&cg));
    CT_ASSERT(reaped_by_signal(p, 5000));
    char path[sizeof cg.path];
    snprintf(path, sizeof path, "%s", cg.path);
    ctrun_cgroup_destroy(&cg, 2000);
    struct stat st;
    CT_ASSERT(stat(path, &st) != 0 && errno == ENOENT);

    /* A dead agent's folder with a process left in it: the next create cleans it up. */
    pid_t dead = fork();
    CT_ASSERT(dead >= 0);
    if (dead == 0)
        _exit(0);
    CT_ASSERT_EQ(waitpid(dead, NULL, 0), dead);
    char parent[sizeof path];
    snprintf(parent, sizeof parent, "%s", path);
    *strrchr(parent, '/') = '\0';
    char stale[sizeof path + 32], procs[sizeof stale + 16];
    snprintf(stale, sizeof stale, "%s/ctrun-%d", parent, (int)dead);
    CT_ASSERT_EQ(mkdir(stale, 0755), 0);
    snprintf(procs, sizeof procs, "%s/cgroup.procs", stale);
    p = sleeper();
    FILE *f = fopen(procs, "w");
    CT_ASSERT(f != NULL);
    fprintf(f, "%d", (int)p);
    CT_ASSERT_EQ(fclose(f), 0);
    CT_ASSERT_OK(ctrun_cgroup_create(&cg, NULL, NULL, &eb));
    CT_ASSERT(reaped_by_signal(p, 5000));
    CT_ASSERT(stat(stale, &st) != 0 && errno == ENOENT);
    ctrun_cgroup_destroy(&cg, 2000);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(scratch, sizeof scratch, "%s/ctrun_cgroup_XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    CT_ASSERT(mkdtemp(scratch) != NULL);
    CT_RUN(test_no_hierarchy);
    CT_RUN(test_real_cgroup);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
    return system(cmd) == 0 ? 0 : 1;
}
