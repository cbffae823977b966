/*
 * ct_fsutil.c - the file-system plumbing of checkpoints and pointers: full reads and writes,
 * directory fsync and the temporary-file-then-rename replacement. Knows nothing of formats.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ct_worker_internal.h"

int ct__write_full(int fd, const void *buf, size_t n, off_t off)
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

int ct__read_full(int fd, void *buf, size_t n, off_t off)
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

int ct__fsync_dir(int dirfd)
{
    /* Some file systems refuse fsync on directories (EINVAL); their renames are as durable as
     * they get, so that is not an error. */
    if (fsync(dirfd) != 0 && errno != EINVAL && errno != EROFS)
        return -errno;
    return 0;
}

int ct__tmp_name_for(const char *name, char *buf, size_t size)
{
    int n = snprintf(buf, size, ".%s.tmp.%ld", name, (long)getpid());
    return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

int ct__is_tmp_name(const char *name)
{
    if (name[0] != '.')
        return 0;
    const char *t = NULL; /* the last ".tmp." */
    for (const char *p = strstr(name, ".tmp."); p != NULL; p = strstr(p + 1, ".tmp."))
        t = p;
    if (t == NULL || t == name)
        return 0;
    const char *d = t + 5;
    if (*d == '\0')
        return 0;
    for (; *d != '\0'; d++)
        if (*d < '0' || *d > '9')
            return 0;
    return 1;
}

int ct__replace_file_at(int dirfd, const char *name, const void *text, size_t n,
                        ct_errbuf_t *eb)
{
    char tmp[512];
    int rc = ct__tmp_name_for(name, tmp, sizeof tmp);
    if (rc != 0)
        return ct_errbuf_set(eb, rc, "%s: name too long", name);
    int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = -errno;
        return ct_errbuf_set(eb, rc, "%s: cannot create: %s", tmp, ct_strerror(rc));
    }
    const char *what = "write";
    rc = ct__write_full(fd, text, n, 0);
    if (rc == 0 && fsync(fd) != 0) {
        rc = -errno;
        what = "fsync";
    }
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
    rc = ct__fsync_dir(dirfd);
    if (rc != 0)
        return ct_errbuf_set(eb, rc, "%s: fsync of the directory failed: %s", name,
                             ct_strerror(rc));
    return 0;
}
