/*
 * ct_worker_internal.h - helpers shared by libctworker's source files and not part of its
 * public interface: the safetensors pieces shared by the reader and the writer, and the
 * runtime's state the fatal paths read. (File I/O and durable replacement: ct_fs.h.)
 */
#ifndef CT_WORKER_INTERNAL_H
#define CT_WORKER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ct_error.h"
#include "ctworker.h"

/* Internal functions stay out of libctworker.so's dynamic symbol table. */
#pragma GCC visibility push(hidden)

/* ---- safetensors (ct_tensor.c, ct_st_read.c, ct_st_write.c) ---- */
#define CT__ST_CRC_PREFIX "crc32."       /* __metadata__ key of a tensor's CRC: crc32.<name> */
#define CT__ST_FORMAT_KEY "ctrun_format" /* "2" in files we write ("1" before header CRCs) */
#define CT__ST_CHUNK      ((size_t)16 << 20) /* I/O and CRC granularity for large tensors */
#define CT__ST_HEADER_CRC_KEY "ctrun_header_crc32" /* __metadata__ key of the header's CRC */

/* The header checksum of a safetensors header (hdr: the len bytes after the 8-byte length,
 * padding included): zlib's CRC-32 of those bytes with the 8 characters of the
 * "ctrun_header_crc32" value counted as "00000000". *at receives the offset of those 8
 * characters. -1 when hdr does not hold exactly one `"ctrun_header_crc32":"` followed by 8
 * characters and a '"' (see ctworker.h, section 5). */
int ct__st_header_crc(const char *hdr, size_t len, size_t *at, uint32_t *crc);

/* numel of a shape; -1 on a negative dimension or overflow. */
int64_t ct__numel(int ndim, const int64_t *shape);

/* "[2, 3]" into buf, for messages; returns buf. */
const char *ct__shape_str(int ndim, const int64_t *shape, char *buf, size_t size);

/* Checks view i of a caller's table (name, dtype, dims, sizes, data pointer); -EINVAL. */
int ct__check_view(const ct_tensor_view_t *v, size_t i, ct_errbuf_t *eb);

/* The error file the runtime was set up with ("" when none, NULL before ct_worker_setup). */
const char *ct__runtime_error_file(void);

/* The runtime's log prefix ("[rank 1/4]", "" before ct_worker_setup); a static array, so a
 * signal handler may read it. */
const char *ct__runtime_prefix(void);

/* Puts back the signal dispositions ct_worker_catch_fatal_signals replaced and releases what
 * it opened (ct_fatal.c). */
void ct__fatal_signals_restore(void);

/* Writes one heartbeat record for step now, past the rate limit (ct_worker_rt.c). */
void ct__runtime_beat_now(uint64_t step);

/* ---- injected faults (ct_inject.c; see CTRUN_INJECT in ctworker.h) ---- */
int ct__inject_setup(const char *text, ct_errbuf_t *eb); /* parses and arms CTRUN_INJECT */
void ct__inject_reset(void);
void ct__inject_progress(uint64_t step);    /* from ct_worker_progress */
void ct__inject_ckpt_begin(int64_t step);   /* ct_ckpt_save: a checkpoint of step is written */
void ct__inject_ckpt_end(void);             /* ... and is done (or failed) */
void ct__inject_ckpt_point(ct_inject_ckpt_phase_t phase); /* a moment of that write */

#pragma GCC visibility pop

#endif /* CT_WORKER_INTERNAL_H */
