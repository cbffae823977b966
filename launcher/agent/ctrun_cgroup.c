/*
 * ctrun_cgroup.c - the job's cgroup v2 (see ctrun_cgroup.h): finding the unified hierarchy
 * and the agent's place in it, creating, killing and removing the job's folder.
 */
#include "ctrun_cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The mount point of the cgroup2 file system from mountinfo ("... - cgroup2 ..."). */
static int ctrun_cgroup__mount(const char *mountinfo, char *out, size_t size)
{
    FILE *f = fopen(mountinfo, "r");
    if (f == NULL)
        return -errno;
    char line[4096];
    int rc = -ENOENT;
    while (fgets(line, sizeof line, f) != NULL) {
        const char *sep = strstr(line, " - ");
        if (sep == NULL || strncmp(sep + 3, "cgroup2 ", 8) != 0)
            continue;
        /* fields: id parent major:minor root mount_point ... */
        char root[PATH_MAX], mnt[PATH_MAX];
        if (sscanf(line, "%*s %*s %*s %4095s %4095s", root, mnt) != 2)
            continue;
        if (strlen(mnt) >= size)
            continue;
        snprintf(out, size, "%s", mnt);
        rc = 0;
        break;
    }
    fclose(f);
    return rc;
}

/* The caller's cgroup v2 path ("0::/a/b" in /proc/self/cgroup). */
static int ctrun_cgroup__self(const char *self_cgroup, char *out, size_t size)
{
    FILE *f = fopen(self_cgroup, "r");
    if (f == NULL)
        return -errno;
    char line[4096];
    int rc = -ENOENT;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "0::", 3) != 0)
            continue;
        size_t n = strcspn(line + 3, "\n");
        if (n + 1 > size)
            break;
        memcpy(out, line + 3, n);
        out[n] = '\0';
        rc = 0;
        break;
    }
    fclose(f);
    return rc;
}

/* Folders ctrun-<pid> beside ours whose agent is dead (it was SIGKILLed and could not remove
 * its cgroup): what is left in them is an orphan of that job, so it is killed, and the folder
 * removed. A live agent's folder is never touched. */
static void ctrun_cgroup__reap_stale(const char *parent)
{
    DIR *d = opendir(parent);
    if (d == NULL)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *name = de->d_name;
        if (strncmp(name, "ctrun-", 6) != 0 || name[6] == '\0' ||
            strspn(name + 6, "0123456789") != strlen(name + 6) || strlen(name + 6) > 9)
            continue;
        pid_t pid = (pid_t)atol(name + 6);
        if (pid <= 0 || pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH)
            continue;
        ctrun_cgroup_t stale = {.procs_fd = -1, .attempt_dir_fd = -1, .attempt_procs_fd = -1};
        int n = snprintf(stale.path, sizeof stale.path, "%s/%s", parent, name);
        if (n > 0 && (size_t)n < sizeof stale.path)
            ctrun_cgroup_destroy(&stale, 200);
    }
    closedir(d);
}

int ctrun_cgroup_create(ctrun_cgroup_t *cg, const char *mountinfo, const char *self_cgroup,
                        ct_errbuf_t *eb)
{
    cg->path[0] = '\0';
    cg->procs_fd = -1;
    cg->attempt_dir_fd = cg->attempt_procs_fd = -1;
    cg->attempts = 0;
    char mnt[PATH_MAX], self[PATH_MAX];
    int rc = ctrun_cgroup__mount(mountinfo ? mountinfo : "/proc/self/mountinfo", mnt, sizeof mnt);
    if (rc != 0)
        return ct_errbuf_set(eb, rc, "no cgroup v2 hierarchy mounted");
    rc = ctrun_cgroup__self(self_cgroup ? self_cgroup : "/proc/self/cgroup", self, sizeof self);
    if (rc != 0)
        return ct_errbuf_set(eb, rc, "this process has no cgroup v2 path");
    char parent[PATH_MAX], path[PATH_MAX];
    int n = snprintf(parent, sizeof parent, "%s%s", mnt, strcmp(self, "/") == 0 ? "" : self);
    if (n < 0 || (size_t)n >= sizeof parent ||
        (n = snprintf(path, sizeof path, "%s/ctrun-%d", parent, (int)getpid())) < 0 ||
        (size_t)n >= sizeof path)
        return ct_errbuf_set(eb, -ENAMETOOLONG, "cgroup path too long");
    ctrun_cgroup__reap_stale(parent);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        rc = -errno;
        return ct_errbuf_set(eb, rc, "cannot create %s: %s", path, strerror(errno));
    }
    char procs[PATH_MAX + 16];
    snprintf(procs, sizeof procs, "%s/cgroup.procs", path);
    cg->procs_fd = open(procs, O_WRONLY | O_CLOEXEC);
    char kill_file[PATH_MAX + 16];
    snprintf(kill_file, sizeof kill_file, "%s/cgroup.kill", path);
    if (cg->procs_fd < 0 || access(kill_file, W_OK) != 0) {
        rc = -errno;
        if (cg->procs_fd >= 0)
            close(cg->procs_fd);
        cg->procs_fd = -1;
        rmdir(path);
        return ct_errbuf_set(eb, rc, "%s is not usable (cgroup.procs, cgroup.kill): %s", path,
                             strerror(-rc));
    }
    snprintf(cg->path, sizeof cg->path, "%s", path);
    return 0;
}

/* Removes the folders of attempts in the job's folder; those still populated stay for a later
 * call. */
static void ctrun_cgroup__remove_attempts(const char *path)
{
    DIR *d = opendir(path);
    if (d == NULL)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "attempt-", 8) != 0)
            continue;
        unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
    }
    closedir(d);
}

static void ctrun_cgroup__close_attempt(ctrun_cgroup_t *cg)
{
    if (cg->attempt_dir_fd >= 0)
        close(cg->attempt_dir_fd);
    if (cg->attempt_procs_fd >= 0)
        close(cg->attempt_procs_fd);
    cg->attempt_dir_fd = cg->attempt_procs_fd = -1;
}

int ctrun_cgroup_attempt(ctrun_cgroup_t *cg)
{
    if (cg->path[0] == '\0')
        return 0;
    ctrun_cgroup__close_attempt(cg);
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/attempt-%d", cg->path, cg->attempts++);
    ctrun_cgroup__remove_attempts(cg->path);
    int rc = 0;
    if (mkdir(path, 0755) != 0)
        return -errno;
    cg->attempt_dir_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cg->attempt_dir_fd >= 0)
        cg->attempt_procs_fd = openat(cg->attempt_dir_fd, "cgroup.procs", O_WRONLY | O_CLOEXEC);
    if (cg->attempt_dir_fd < 0 || cg->attempt_procs_fd < 0) {
        rc = -errno;
        ctrun_cgroup__close_attempt(cg);
        rmdir(path);
    }
    return rc;
}

int ctrun_cgroup_kill(ctrun_cgroup_t *cg)
{
    if (cg->path[0] == '\0')
        return 0;
    char file[PATH_MAX + 16];
    snprintf(file, sizeof file, "%s/cgroup.kill", cg->path);
    int fd = open(file, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = write(fd, "1", 1) == 1 ? 0 : -errno;
    close(fd);
    return rc;
}

bool ctrun_cgroup_populated(const ctrun_cgroup_t *cg)
{
    if (cg->path[0] == '\0')
        return false;
    char file[PATH_MAX + 16], buf[256];
    snprintf(file, sizeof file, "%s/cgroup.events", cg->path);
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    return strstr(buf, "populated 1") != NULL;
}

void ctrun_cgroup_destroy(ctrun_cgroup_t *cg, int64_t wait_ms)
{
    if (cg->path[0] == '\0')
        return;
    ctrun_cgroup_kill(cg);
    struct timespec step = {0, 5 * 1000000};
    for (int64_t waited = 0; ctrun_cgroup_populated(cg) && waited < wait_ms; waited += 5)
        nanosleep(&step, NULL);
    if (cg->procs_fd >= 0)
        close(cg->procs_fd);
    cg->procs_fd = -1;
    ctrun_cgroup__close_attempt(cg);
    ctrun_cgroup__remove_attempts(cg->path);
    rmdir(cg->path);
    cg->path[0] = '\0';
}
