/*
 * ct_fs.h - the file-system plumbing every writer of durable files shares: whole-buffer reads
 * and writes that resume after EINTR and short transfers, directory fsync, and the one way a
 * file is replaced: write a temporary file beside it, fsync, rename over the name, fsync the
 * directory. A crash at any point leaves the old file or the new one, never a torn one.
 * Checkpoints and their `latest` pointer, safetensors files, ctrain's outputs and the error
 * file all replace files through this.
 *
 * Also mkdir -p. Not here: formats, and the async-signal-safe error-file writer
 * (ct_errfile_write.c), which may only make system calls and so keeps its own
 * open/write/renameat sequence.
 */
#ifndef CT_FS_H
#define CT_FS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes all n bytes at offset (pwrite) or at the file position (off < 0). 0 or -errno. */
int ct_fs_write_full(int fd, const void *buf, size_t n, off_t off);

/* Reads exactly n bytes at offset. 0, -errno, or CT_EFORMAT when the file ends first. */
int ct_fs_read_full(int fd, void *buf, size_t n, off_t off);

/* The temporary name used while writing name: ".<name>.tmp.<pid>". -ENAMETOOLONG when it does
 * not fit. */
int ct_fs_tmp_name(const char *name, char *buf, size_t size);

/* True for names made by ct_fs_tmp_name (any pid): leftovers of a writer that was killed. */
bool ct_fs_is_tmp_name(const char *name);

/* Ends the replacement of dirfd/name by the temporary file tmp, open for writing as fd: fsync,
 * close, rename over name, fsync of the directory. fd is closed and, on failure, tmp removed,
 * whatever happens; the message names `name` and the step that failed. */
int ct_fs_commit_at(int dirfd, int fd, const char *tmp, const char *name, ct_errbuf_t *eb);

/* Creates the directory path and its missing parents with mode (the umask applies), as
 * mkdir -p. 0, or -EINVAL (empty or longer than PATH_MAX) / -errno with a line naming the
 * directory that could not be made. */
int ct_fs_mkdir_p(const char *path, mode_t mode, ct_errbuf_t *eb);

/* Replaces dirfd/name with the n bytes of text (temporary file, fsync, rename, directory
 * fsync). */
int ct_fs_replace_at(int dirfd, const char *name, const void *text, size_t n, ct_errbuf_t *eb);

/* The same for a path (its directory is opened for the fsync). */
int ct_fs_replace(const char *path, const void *text, size_t n, ct_errbuf_t *eb);

#ifdef __cplusplus
}
#endif

#endif /* CT_FS_H */
