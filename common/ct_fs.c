/*
 * ct_fs.c - whole-buffer I/O, directory fsync, mkdir -p and durable file replacement (ct_fs.h).
 */
#include "ct_fs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int ct_fs_write_full(int fd, const void *buf, size_t n, off_t off)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = off < 0 ? write(fd, p, n) : pwrite(fd, p, n, off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
        if (off >= 0)
            off += w;
    }
    return 0;
}

int ct_fs_read_full(int fd, void *buf, size_t n, off_t off)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            return CT_EFORMAT;
        p += r;
        n -= (size_t)r;
        off += r;
    }
    return 0;
}
static int ct_fs_fsync_dir(int dirfd)
{
    /* Some file systems refuse fsync on directories (EINVAL); their renames are as durable as
     * they get, so that is not an error. */
    if (fsync(dirfd) != 0 && errno != EINVAL && errno != EROFS)
        return -errno;
    return 0;
}

int ct_fs_tmp_name(const char *name, char *buf, size_t size)
{
    int n = snprintf(buf, size, ".%s.tmp.%ld", name, (long)getpid());
    return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

bool ct_fs_is_tmp_name(const char *name)
{
    if (name[0] != '.')
        return false;
    const char *t = NULL; /* the last ".tmp." */
    for (const char *p = strstr(name, ".tmp."); p != NULL; p = strstr(p + 1, ".tmp."))
        t = p;
    if (t == NULL || t == name)
        return false;
    const char *d = t + 5;
    if (*d == '\0')
        return false;
    for (; *d != '\0'; d++)
        if (*d < '0' || *d > '9')
            return false;
    return true;
}

int ct_fs_commit_at(int dirfd, int fd, const char *tmp, const char *name, ct_errbuf_t *eb)
{
    int rc = 0;
    const char *what = "fsync";
    if (fsync(fd) != 0)
        rc = -errno;
    if (close(fd) != 0 && rc == 0 && errno != EINTR) {
        rc = -errno;
        what = "close";
    }
    if (rc == 0 && renameat(dirfd, tmp, dirfd, name) != 0) {
        rc = -errno;
        what = "rename";
    }
    if (rc != 0) {
        unlinkat(dirfd, tmp, 0);
        return ct_errbuf_set(eb, rc, "%s: %s failed: %s", name, what, ct_strerror(rc));
    }
    rc = ct_fs_fsync_dir(dirfd);
    if (rc != 0)
        return ct_errbuf_set(eb, rc, "%s: fsync of the directory failed: %s", name,
                             ct_strerror(rc));
    return 0;
}

int ct_fs_replace_at(int dirfd, const char *name, const void *text, size_t n, ct_errbuf_t *eb)
{
    char tmp[NAME_MAX + 1];
    int rc = ct_fs_tmp_name(name, tmp, sizeof tmp);
    if (rc != 0)
        return ct_errbuf_set(eb, rc, "%s: name too long", name);
    int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = -errno;
        return ct_errbuf_set(eb, rc, "%s: cannot create: %s", tmp, ct_strerror(rc));
    }
    rc = ct_fs_write_full(fd, text, n, 0);
    if (rc != 0) {
        close(fd);
        unlinkat(dirfd, tmp, 0);
        return ct_errbuf_set(eb, rc, "%s: write failed: %s", name, ct_strerror(rc));
    }
    return ct_fs_commit_at(dirfd, fd, tmp, name, eb);
}

int ct_fs_replace(const char *path, const void *text, size_t n, ct_errbuf_t *eb)
{
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX] = ".";
    const char *name = path;
    if (slash != NULL) {
        size_t len = slash == path ? 1 : (size_t)(slash - path); /* "/x": the root */
        if (len >= sizeof dir)
            return ct_errbuf_set(eb, -ENAMETOOLONG, "%s: path too long", path);
        memcpy(dir, path, len);
        dir[len] = '\0';
        name = slash + 1;
    }
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) {
        int rc = -errno;
        return ct_errbuf_set(eb, rc, "%s: cannot open its directory: %s", path, ct_strerror(rc));
    }
    int rc = ct_fs_replace_at(dirfd, name, text, n, eb);
    close(dirfd);
    return rc;
}

int ct_fs_mkdir_p(const char *path, mode_t mode, ct_errbuf_t *eb)
{
    char buf[PATH_MAX];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof buf)
        return ct_errbuf_set(eb, -EINVAL, "directory \"%.80s\": empty or too long", path);
    memcpy(buf, path, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, mode) != 0 && errno != EEXIST) {
            int rc = -errno;
            return ct_errbuf_set(eb, rc, "cannot create directory %s: %s", buf, strerror(-rc));
        }
        buf[i] = saved;
    }
    return 0;
}
