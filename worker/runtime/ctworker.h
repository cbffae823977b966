/*
 * ctworker.h - the public interface of libctworker, the runtime every native ctrun worker links
 * (ctrain, and any C program a user writes). Installed as <ctworker/ctworker.h>; pkg-config
 * name `ctworker`. C17, no CUDA or libuv types; every function returns 0 or a negative code
 * (a negated errno or a CT_E* code from ct_error.h) with the detail in a caller-owned
 * ct_errbuf_t, except where noted.
 *
 * What is here:
 *   1. the torchrun environment (RANK, WORLD_SIZE, ...), read and cross-checked;
 *   2. the process-wide runtime: log prefix, heartbeat to the launcher, error file, fatal-
 *      signal handler (ct_worker_setup, ct_worker_progress, ct_worker_fail);
 *   3. a counter-based random generator (Philox4x32-10, the same numbers as the kernels');
 *   4. data sharding: which samples of each global batch this rank owns;
 *   5. tensors in safetensors files (reader and atomic writer);
 *   6. checkpoints: a directory of safetensors files with a `latest` pointer, retention and
 *      fallback to the previous checkpoint when the newest is damaged.
 *
 *   7. the worker as a whole (ct_worker_init: environment, runtime, store connection,
 *      communicator) and the communicators: allreduce, broadcast, allgather and barrier over a
 *      CPU ring of TCP connections or NCCL, every call bounded by a timeout;
 *   8. the reductions of data-parallel training over either communicator: the step's
 *      gradients from host or device memory, in buckets overlapped with the backward pass on
 *      NCCL, with a collective watchdog.
 *
 * Threading: sections 3-6 are reentrant (no hidden state). Section 2 is process-wide state,
 * set up once from the main thread; ct_worker_progress is meant for one (the training) thread.
 * A communicator (section 7) belongs to one thread at a time.
 */
#ifndef CTWORKER_H
#define CTWORKER_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ct_error.h"
#include "ct_heartbeat.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CT_WORKER_HOST_MAX   256
#define CT_WORKER_RUN_ID_MAX 256
#define CT_WORKER_PATH_MAX   4096
#define CT_WORKER_MAX_WORLD  1048576 /* the largest WORLD_SIZE accepted */

/* ==== 1. Environment ========================================================================
 *
 * The variables torchrun (and ctrun) set for each worker; see docs/torchrun-compatibility.md §2.
 * When none of RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE is set the program runs as a single
 * process (rank 0 of 1, `launched` false), so ctrain works without a launcher. Otherwise all four
 * must be set and consistent. */
typedef struct ct_worker_env {
    bool launched;        /* the rank variables were present */
    int rank;             /* RANK, 0..world_size-1 */
    int world_size;       /* WORLD_SIZE */
    int local_rank;       /* LOCAL_RANK, 0..local_world_size-1 (selects the GPU) */
    int local_world_size; /* LOCAL_WORLD_SIZE, <= world_size */
    int group_rank;       /* GROUP_RANK (node rank), 0 when unset */
    int restart_count;    /* TORCHELASTIC_RESTART_COUNT, 0 when unset */
    int max_restarts;     /* TORCHELASTIC_MAX_RESTARTS, 0 when unset */
    bool use_agent_store; /* TORCHELASTIC_USE_AGENT_STORE (torchrun spells it True/False) */
    bool has_master;      /* MASTER_ADDR and MASTER_PORT were set (required when world_size > 1) */
    char master_addr[CT_WORKER_HOST_MAX]; /* host name or IP, without brackets */
    int master_port;                      /* 1..65535, 0 when unset */
    char run_id[CT_WORKER_RUN_ID_MAX];    /* TORCHELASTIC_RUN_ID, "none" when unset */
    char error_file[CT_WORKER_PATH_MAX];  /* TORCHELASTIC_ERROR_FILE, "" when unset or empty */
    int heartbeat_fd;                     /* CTRUN_HEARTBEAT_FD (a writable pipe), -1 when unset */
} ct_worker_env_t;

/* Reads and checks the variables above. Errors (CT_EPARSE, CT_ERANGE_VALUE, CT_ESTATE) come
 * with one line naming the variable: a value that is not a number or out of range, RANK >=
 * WORLD_SIZE, LOCAL_RANK >= LOCAL_WORLD_SIZE, LOCAL_WORLD_SIZE > WORLD_SIZE, LOCAL_RANK > RANK,
 * GROUP_RANK >= WORLD_SIZE, a partial set (RANK without WORLD_SIZE, MASTER_ADDR without
 * MASTER_PORT), no master address with WORLD_SIZE > 1, a bad host or port, restart count above
 * the maximum, an empty/over-long/control-character run id, an over-long error file path, or a
 * heartbeat fd that is not an open, writable pipe or socket. */
int ct_worker_env_read(ct_worker_env_t *env, ct_errbuf_t *eb);

/* ==== 2. The process-wide runtime =============================================================
 *
 * ct_worker_setup: sets the log prefix to "[rank R/W]", remembers the error file for
 * ct_worker_fail, attaches the heartbeat pipe (when env->heartbeat_fd >= 0) and, with
 * CT_WORKER_CATCH_SIGNALS, installs the fatal-signal handler. Call it once, after
 * ct_worker_env_read; ct_worker_cleanup undoes it (closes the heartbeat fd, restores the
 * signal dispositions). */
#define CT_WORKER_CATCH_SIGNALS 0x1u

/* The exit status of ct_worker_fail (Python exits 1 on an uncaught exception, too). */
#define CT_WORKER_FAIL_EXIT 1

/* Rate limit of the runtime's heartbeat: at most one record per this many milliseconds. */
#define CT_WORKER_HEARTBEAT_INTERVAL_MS 100

int ct_worker_setup(const ct_worker_env_t *env, unsigned flags, ct_errbuf_t *eb);
void ct_worker_cleanup(void);

/* Reports that training reached `step`. With a heartbeat pipe it writes a record (see section
 * 2a) at most every CT_WORKER_HEARTBEAT_INTERVAL_MS, without ever blocking; otherwise it does
 * nothing. Returns 0 (written, rate-limited or no pipe), -EAGAIN when the pipe was full and
 * the record was dropped (and counted), -EPIPE when the launcher closed its end (the heartbeat
 * then stops). Costs one clock read when rate-limited, one write(2) otherwise. */
int ct_worker_progress(uint64_t step);

/* The fatal path: formats the message, prints it to stderr (one line, with the rank prefix)
 * with a C backtrace, writes TORCHELASTIC_ERROR_FILE (when set) in the layout of PyTorch's
 * @record ({"message": {"message": <text>, "extraInfo": {"py_callstack": <backtrace>,
 * "timestamp": "<unix seconds>"}}}), flushes stdio and ends the process with
 * CT_WORKER_FAIL_EXIT. Usable before ct_worker_setup (it then reads the variable itself), so
 * a worker can report a bad environment this way. The one function of this library that
 * exits, like abort(). */
void ct_worker_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* Installs handlers for SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT that write the error file
 * ("Signal 11 (SIGSEGV) received by PID <pid>" and the C backtrace) and a line to stderr, then
 * re-raise the signal with its default action (so the exit status still says which signal).
 * Limits, because only async-signal-safe work is allowed there: the error file's directory is
 * opened and the backtrace machinery loaded here, in advance (the file itself is created only
 * on a crash); the backtrace has at most 64 frames, with function names only for exported
 * symbols (link the program with -rdynamic to see its own) and non-UTF-8 bytes replaced; the
 * alternate signal stack (for stack overflows) is set up for the calling thread only; a crash
 * inside malloc or with a corrupt stack may still lose the backtrace. A second fatal signal
 * while the handler runs goes straight to the next handler or the default action. Uses the
 * error file given to ct_worker_setup, else TORCHELASTIC_ERROR_FILE.
 *
 * It also installs, when the program left CT_WORKER_DUMP_SIGNAL at its default action, a
 * handler that prints the stack of the main thread (and of the thread the signal landed on,
 * if another) to stderr and returns: ctrun's watchdog sends it to a silent worker before
 * stopping it, so the worker's log shows where it was stuck. */
int ct_worker_catch_fatal_signals(ct_errbuf_t *eb);

/* The stack-dump signal the launcher's watchdog sends (ct_heartbeat.h). */
#define CT_WORKER_DUMP_SIGNAL CT_HEARTBEAT_DUMP_SIGNAL

/* ---- 2a. Heartbeat ----------------------------------------------------------------------
 *
 * The record format the launcher's watchdog reads is in ct_heartbeat.h (shared with ctrun):
 * fixed 32-byte records, one write(2) each, `seq` counting attempts and `dropped` the records
 * lost to a full pipe. */
/* A heartbeat sender; ct_worker_progress drives one owned by the runtime. */
typedef struct ct_heartbeat {
    int fd;                  /* -1: disabled (no pipe, closed, or reader gone) */
    int64_t min_interval_ns; /* 0: every call writes */
    int64_t last_ns;         /* time of the last attempt */
    uint32_t seq;            /* attempts so far */
    uint32_t dropped;        /* attempts that found the pipe full */
    uint64_t sent;           /* records written */
} ct_heartbeat_t;

/* Takes ownership of fd (a pipe or socket open for writing; -1 for a disabled heartbeat), makes
 * it non-blocking and close-on-exec, and ignores SIGPIPE if it still has its default action
 * (a dead launcher must not kill the worker through a heartbeat write). */
int ct_heartbeat_init(ct_heartbeat_t *hb, int fd, int64_t min_interval_ms, ct_errbuf_t *eb);

/* Sends one record for step unless the last attempt was less than min_interval ago. Returns as
 * ct_worker_progress does. */
int ct_heartbeat_beat(ct_heartbeat_t *hb, uint64_t step);

/* Closes the fd; safe to call twice. */
void ct_heartbeat_close(ct_heartbeat_t *hb);

/* ---- 2b. Injected faults ----------------------------------------------------------------
 *
 * `ctrun --inject` arms at most one fault per worker and attempt, in the variable
 * CTRUN_INJECT, for the faults only the worker can time exactly:
 *
 *   kill@N          SIGKILL at the first ct_worker_progress(step) with step >= N
 *   stop@N          SIGSTOP there instead (a hang, for the watchdog); fires once
 *   torn@N:PHASE    SIGKILL inside the first checkpoint write of a step >= N, at PHASE:
 *                   data   - the temporary file holds the tensors but no header yet
 *                   file   - the new file is complete and renamed, `latest` not yet moved
 *                   latest - `latest` names the new file, older files not yet pruned
 *
 * ct_worker_setup reads it (a malformed value is an error naming CTRUN_INJECT); before the
 * signal the worker writes one heartbeat record past the rate limit and a warning line to
 * stderr. Unset or empty: nothing happens. */
typedef enum ct_inject_kind {
    CT_INJECT_NONE = 0,
    CT_INJECT_KILL,
    CT_INJECT_STOP,
    CT_INJECT_TORN,
} ct_inject_kind_t;

typedef enum ct_inject_ckpt_phase {
    CT_INJECT_PHASE_DATA = 0,
    CT_INJECT_PHASE_FILE,
    CT_INJECT_PHASE_LATEST,
} ct_inject_ckpt_phase_t;

typedef struct ct_inject {
    ct_inject_kind_t kind;
    int64_t step;
    ct_inject_ckpt_phase_t phase; /* torn only */
} ct_inject_t;

/* Parses a CTRUN_INJECT value (NULL or "" gives CT_INJECT_NONE). CT_EPARSE / CT_ERANGE_VALUE
 * with one line naming CTRUN_INJECT. */
int ct_inject_parse(const char *text, ct_inject_t *f, ct_errbuf_t *eb);

/* ==== 3. Counter-based random numbers =========================================================
 *
 * Draw k of (seed, stream) is lane k % 4 of the Philox4x32-10 block k / 4 (kernels/ct_philox.h),
 * the same numbers ct_rng_u32_cpu and the CUDA kernels produce. A stream names a purpose and a
 * sub-key (usually the epoch), so every use of randomness has its own sequence and a resumed
 * run replays exactly the draws of the run it replaces. Purposes 1..255 are reserved for
 * libctworker; programs number theirs from 256. */
#define CT_RNG_STREAM(purpose, sub)                                                               \
    (((uint64_t)(purpose) << 48) | ((uint64_t)(sub) & 0xFFFFFFFFFFFFull))
#define CT_RNG_PURPOSE_SHUFFLE 1u /* epoch permutations of ct_shard */

typedef struct ct_rng {
    uint64_t seed, stream;
    uint64_t offset;       /* index of the next 32-bit draw */
    uint64_t cached_block; /* block held in cache[], UINT64_MAX for none */
    uint32_t cache[4];
} ct_rng_t;

void ct_rng_init(ct_rng_t *r, uint64_t seed, uint64_t stream, uint64_t offset);
uint32_t ct_rng_u32(ct_rng_t *r);
uint64_t ct_rng_u64(ct_rng_t *r); /* two draws, the first is the low half */
/* Uniform in [0, n) without modulo bias (Lemire's multiply-and-reject for n <= 2^32, masked
 * rejection above); n = 0 returns 0. Uses a variable number of draws. */
uint64_t ct_rng_below(ct_rng_t *r, uint64_t n);
/* Uniform in [0, 1) with 24 random bits, as ct_philox_to_unit_float. */
float ct_rng_uniform(ct_rng_t *r);

/* ==== 4. Data sharding ========================================================================
 *
 * The global batch of B samples is split across the W ranks, so the union of the ranks' shards
 * is the global batch whatever W is, and the training trajectory depends on W only through the
 * floating-point order of the gradient sum. Epoch e visits the samples in the order of a
 * permutation drawn by Fisher-Yates from stream CT_RNG_STREAM(CT_RNG_PURPOSE_SHUFFLE, e) of the
 * seed (identity order with shuffle = false); global batch s of the epoch is permutation
 * positions [s*B, s*B + b) with b = B, except for the last partial batch.
 *
 * Last partial batch: with drop_last, the N % B samples that do not fill a batch are skipped
 * (every step has exactly B samples). Without it the last batch has b = N % B samples, split
 * the same way. Within a batch rank r takes a contiguous slice of b/W samples, and the first
 * b % W ranks one more each; so ranks may hold different counts, or none (b < W). To keep the
 * trajectory independent of W, scale each rank's summed per-sample gradients by 1/b (not by
 * its own count) and allreduce with SUM. */
typedef struct ct_shard {
    int64_t n_samples;    /* N >= 1 */
    int64_t global_batch; /* B >= 1 */
    int world_size;       /* W >= 1 */
    int rank;             /* 0..W-1 */
    uint64_t seed;
    bool shuffle;   /* false: epoch order = dataset order */
    bool drop_last; /* skip a last partial batch */
} ct_shard_t;

/* Checks the fields (ranges above; with drop_last N must be >= B). */
int ct_shard_check(const ct_shard_t *s, ct_errbuf_t *eb);

/* Global batches per epoch: ceil(N/B), or floor(N/B) with drop_last. */
int64_t ct_shard_steps_per_epoch(const ct_shard_t *s);

/* The most samples a rank gets in one step, ceil(B/W): the size for ct_shard_indices' out. */
int64_t ct_shard_max_local(const ct_shard_t *s);

/* Splits a global step count (steps done since the start of training) into the epoch and the
 * step within it; the data position a checkpoint stores. */
void ct_shard_locate(const ct_shard_t *s, int64_t global_step, int64_t *epoch, int64_t *step);

/* perm: (N) the visiting order of epoch `epoch`. Every rank computes the same one. */
void ct_shard_permutation(const ct_shard_t *s, int64_t epoch, int64_t *perm);

/* b: the size of global batch `step` of an epoch (0 for a step past the end). */
int64_t ct_shard_batch_size(const ct_shard_t *s, int64_t step);

/* This rank's slice of global batch `step`: permutation positions [*begin, *begin + *count). */
void ct_shard_range(const ct_shard_t *s, int64_t step, int64_t *begin, int64_t *count);

/* out: (ct_shard_max_local) the dataset indices this rank owns in global batch `step` of the
 * epoch whose permutation is perm. Returns how many were written. */
int64_t ct_shard_indices(const ct_shard_t *s, const int64_t *perm, int64_t step, int64_t *out);

/* ==== 5. Tensors and safetensors files =======================================================
 *
 * The format (huggingface/safetensors): an 8-byte little-endian header length N, N bytes of
 * JSON ({"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [..], "data_offsets":
 * [begin, end]}, ...}), then the data region, which the tensors' byte ranges must cover
 * exactly, without gaps or overlaps. Data are little-endian, row-major.
 *
 * Our writer pads the header with spaces to a multiple of 8 and orders tensors by decreasing
 * element size, so every tensor starts at a multiple of its element size in the file (as the
 * reference writer does), and adds to __metadata__ "ctrun_format": "2", for every tensor
 * "crc32.<name>": 8 lowercase hex digits (zlib's CRC-32 of its bytes), and
 * "ctrun_header_crc32": the header's own checksum, 8 lowercase hex digits. That checksum is
 * zlib's CRC-32 (the one of Python's zlib.crc32) of the N header bytes exactly as stored -
 * compact JSON and the padding spaces, the 8-byte length not included - with the 8 characters
 * of its own value replaced by "00000000"; the value is found as the one occurrence of the
 * bytes "ctrun_header_crc32":" (quotes included) in the header. It covers every metadata entry
 * (step, epoch, data position, configuration, the tensor CRCs) and the tensor table (names,
 * dtypes, shapes, offsets), none of which the tensor CRCs protect. The reader checks: the
 * header length (>= 2, <= CT_ST_MAX_HEADER, within the file), that the header starts with '{'
 * and is JSON without duplicate keys, the header checksum when __metadata__ has one (a
 * mismatch is CT_ECRC), the metadata (strings only), dtypes, shapes (<= CT_TENSOR_MAX_DIMS
 * dimensions, no overflow), that each byte range matches shape x dtype size, lies inside the
 * data region and that the ranges tile it; and CRCs when the file carries them (files with
 * "ctrun_format" must carry one per tensor; with "ctrun_format": "2", a header checksum too).
 * Files written before the header checksum existed ("ctrun_format": "1") are read as before,
 * their header unverified unless they carry one (ct_st_header_checked tells). It does not
 * require alignment: other writers (MLX, old safetensors) do not pad, and data are copied into
 * the caller's buffers, never used in place. */
typedef enum ct_dtype {
    CT_DTYPE_BOOL = 0,
    CT_DTYPE_U8,
    CT_DTYPE_I8,
    CT_DTYPE_F8_E4M3,
    CT_DTYPE_F8_E5M2,
    CT_DTYPE_I16,
    CT_DTYPE_U16,
    CT_DTYPE_F16,
    CT_DTYPE_BF16,
    CT_DTYPE_I32,
    CT_DTYPE_U32,
    CT_DTYPE_F32,
    CT_DTYPE_I64,
    CT_DTYPE_U64,
    CT_DTYPE_F64,
    CT_DTYPE_COUNT
} ct_dtype_t;

/* Bytes per element (0 for an invalid dtype). */
size_t ct_dtype_size(ct_dtype_t dtype);
/* The safetensors spelling ("F32", "BF16", ...), or "?" for an invalid dtype. */
const char *ct_dtype_name(ct_dtype_t dtype);
/* The dtype named text; CT_EFORMAT for an unknown name. */
int ct_dtype_parse(const char *text, ct_dtype_t *out);

#define CT_TENSOR_MAX_DIMS 8
#define CT_ST_MAX_HEADER   100000000u /* the reference implementation's limit, in bytes */

/* A named view of host memory: the trainer's table of parameter, gradient and optimizer views
 * into its flat buffers. data holds numel * ct_dtype_size(dtype) bytes. */
typedef struct ct_tensor_view {
    const char *name;
    ct_dtype_t dtype;
    int ndim;                            /* 0 (a scalar) .. CT_TENSOR_MAX_DIMS */
    int64_t shape[CT_TENSOR_MAX_DIMS];   /* the first ndim entries, each >= 0 */
    void *data;                          /* may be NULL only when the view holds 0 bytes */
} ct_tensor_view_t;

/* Element and byte counts of a view; -1 when a dimension is negative or the count overflows. */
int64_t ct_tensor_numel(const ct_tensor_view_t *v);
int64_t ct_tensor_nbytes(const ct_tensor_view_t *v);

/* One __metadata__ entry. */
typedef struct ct_st_kv {
    const char *key;
    const char *value;
} ct_st_kv_t;

/* Writes the n views and the metadata as a safetensors file, atomically: a temporary file in
 * the same directory, fsync, rename over path, fsync of the directory; a crash leaves either
 * the old file or the new one, never a torn file. Data are written straight from the views
 * (no copy). Errors: -EINVAL (and the reason) for a bad view (no name, duplicate or
 * "__metadata__" name, invalid UTF-8, bad dtype/shape, NULL data) or a reserved metadata key
 * ("ctrun_format", "ctrun_header_crc32", "crc32.*"); a negated errno from the file system. */
int ct_st_save(const char *path, const ct_tensor_view_t *views, size_t n,
               const ct_st_kv_t *meta, size_t n_meta, ct_errbuf_t *eb);
/* The same, into the directory open at dirfd. */
int ct_st_save_at(int dirfd, const char *name, const ct_tensor_view_t *views, size_t n,
                  const ct_st_kv_t *meta, size_t n_meta, ct_errbuf_t *eb);

/* An open, validated safetensors file (header parsed; data not read yet). */
typedef struct ct_st_file ct_st_file_t;

/* A tensor as the file describes it. */
typedef struct ct_st_tensor {
    const char *name; /* valid until ct_st_close */
    ct_dtype_t dtype;
    int ndim;
    int64_t shape[CT_TENSOR_MAX_DIMS];
    uint64_t offset; /* of its first byte, from the start of the file */
    uint64_t nbytes;
    bool has_crc;
    uint32_t crc32;
} ct_st_tensor_t;

/* Opens and validates the header (with its checksum, when it has one) and layout: everything
 * but the tensor CRCs. Errors: a negated errno (cannot open or read), CT_EFORMAT (damaged or
 * not safetensors), CT_ECRC (the header checksum does not match), CT_ELIMIT (header over
 * CT_ST_MAX_HEADER), each with one line naming the file and the first problem. */
int ct_st_open(ct_st_file_t **out, const char *path, ct_errbuf_t *eb);
int ct_st_open_at(ct_st_file_t **out, int dirfd, const char *name, ct_errbuf_t *eb);
void ct_st_close(ct_st_file_t *f); /* NULL is fine */

/* The tensors, in file (offset) order; ct_st_find returns NULL for an unknown name. */
size_t ct_st_count(const ct_st_file_t *f);
const ct_st_tensor_t *ct_st_tensor_at(const ct_st_file_t *f, size_t i);
const ct_st_tensor_t *ct_st_find(const ct_st_file_t *f, const char *name);

/* True when the header carried "ctrun_header_crc32" (and, the file being open, it matched);
 * false for files of other writers and for ctrun files written before header checksums. */
bool ct_st_header_checked(const ct_st_file_t *f);

/* __metadata__: the value of key, or NULL; and the entries by index (0..count-1). */
const char *ct_st_meta(const ct_st_file_t *f, const char *key);
size_t ct_st_meta_count(const ct_st_file_t *f);
void ct_st_meta_at(const ct_st_file_t *f, size_t i, const char **key, const char **value);

/* Reads the tensors named by the views into their memory, checking each view's dtype and shape
 * against the file (CT_EMISMATCH when a view is not in the file or differs, or when the file
 * has a tensor no view names, unless CT_ST_ALLOW_EXTRA) before any byte is read, then every
 * tensor's CRC when the file carries CRCs (CT_ECRC), reading the file once in offset order.
 * Tensors not loaded under CT_ST_ALLOW_EXTRA are still CRC-checked. On an error after reading
 * started, the views' contents are unspecified. */
#define CT_ST_ALLOW_EXTRA 0x1u
int ct_st_read(ct_st_file_t *f, const ct_tensor_view_t *views, size_t n, unsigned flags,
               ct_errbuf_t *eb);

/* Reads the whole data region and checks every CRC, loading nothing. */
int ct_st_verify(ct_st_file_t *f, ct_errbuf_t *eb);

/* ==== 6. Checkpoints ==========================================================================
 *
 * A directory of safetensors files: step_<012 digits>.safetensors for periodic checkpoints (the
 * newest keep_last kept), best.safetensors and final.safetensors, and `latest`, a small text
 * file naming the newest step or final checkpoint. Every file, `latest` included, is replaced
 * atomically (temporary file, fsync, rename, fsync of the directory), and `latest` moves only
 * after the file it names is durable, so after a crash at any point it names a complete file.
 * Rank 0 writes (writer = true); all ranks read.
 *
 * Metadata (all strings in __metadata__): "format": "pt", "ctrun_kind" (step/best/final),
 * "step", "epoch", "data_position", "world_size", "config" (JSON text, when given), "metric"
 * (when given), plus the tensor CRCs and the header checksum of section 5, which covers all of
 * these: a checkpoint whose metadata was changed after it was written is damaged. */
#define CT_CKPT_CONFIG_MAX 16384
#define CT_CKPT_NAME_MAX   64

typedef enum ct_ckpt_kind {
    CT_CKPT_STEP = 0,
    CT_CKPT_BEST = 1,
    CT_CKPT_FINAL = 2,
} ct_ckpt_kind_t;

typedef struct ct_ckpt_meta {
    int64_t step;          /* optimizer steps done (>= 0) */
    int64_t epoch;         /* epoch in progress (>= 0) */
    int64_t data_position; /* global batches of that epoch already consumed (>= 0) */
    int world_size;        /* ranks that trained it (>= 1) */
    bool has_metric;
    double metric;                  /* e.g. validation NDCG@10 of a `best` checkpoint */
    char config[CT_CKPT_CONFIG_MAX]; /* JSON text of the training configuration, "" for none */
} ct_ckpt_meta_t;

typedef struct ct_ckpt_dir {
    int dirfd; /* -1 when closed */
    int keep_last;
    bool writer;
    char path[CT_WORKER_PATH_MAX];
} ct_ckpt_dir_t;

/* Creates the directory (and its parents) when missing and opens it. keep_last >= 1. A writer
 * also removes temporary files a killed writer left behind and applies the retention rule of
 * ct_ckpt_save to the step `latest` names (a writer killed before pruning leaves one file too
 * many). */
int ct_ckpt_dir_init(ct_ckpt_dir_t *d, const char *path, int keep_last, bool writer,
                     ct_errbuf_t *eb);
void ct_ckpt_dir_close(ct_ckpt_dir_t *d); /* safe to call twice */

/* Writes a checkpoint of the views. STEP: step_<meta->step>.safetensors, then `latest`, then
 * retention: step files with a larger step (left by a run this one resumed before) are
 * removed, and of the rest the newest keep_last kept. FINAL: final.safetensors, then `latest`.
 * BEST: best.safetensors only. CT_ESTATE when d is not the writer; -EINVAL for bad meta (a
 * negative count, config that is not JSON or longer than CT_CKPT_CONFIG_MAX - 1). */
int ct_ckpt_save(ct_ckpt_dir_t *d, ct_ckpt_kind_t kind, const ct_tensor_view_t *views, size_t n,
                 const ct_ckpt_meta_t *meta, ct_errbuf_t *eb);

/* Loads the checkpoint `latest` names into the views (an exact match of names, dtypes and
 * shapes) and its metadata into meta. When that file is damaged (unreadable, bad format, a
 * header or tensor CRC that does not match, a step file whose metadata names another step),
 * says so in one warning line naming the file and tries the newest older checkpoint, and so
 * on. When `latest` itself is unusable (empty, not a regular file, naming a path outside the
 * directory or a file that is not a step or final checkpoint) or missing while checkpoints
 * exist, says so in one warning line with the reason and takes the newest intact checkpoint
 * among the step files and final.safetensors, ordered by the step their metadata records
 * (best.safetensors is never resumed from). Whenever it did not take `latest`'s file, one info
 * line names the file it used. The writer (rank 0) also notes, in one info line, a checkpoint
 * written before header checksums: it loads, its metadata unverified. name (at least
 * CT_CKPT_NAME_MAX bytes, may be NULL) receives the file used. Returns 0; -ENOENT when the
 * directory has no checkpoint (a fresh start); CT_EMISMATCH when a checkpoint does not fit the
 * views (no fallback: an older one would not fit either); the last damage code when every
 * checkpoint is damaged. For all ranks to resume from the same file even if one of them hits a
 * damaged read, rank 0 can load with this and share `name`, the others use ct_ckpt_load. */
int ct_ckpt_load_latest(ct_ckpt_dir_t *d, const ct_tensor_view_t *views, size_t n,
                        ct_ckpt_meta_t *meta, char *name, ct_errbuf_t *eb);

/* Loads the checkpoint file `name` of the directory (e.g. "best.safetensors"), no fallback.
 * Damage is CT_EFORMAT, CT_ECRC, CT_ELIMIT or a negated errno (-ENOENT, -EIO, -EISDIR). */
int ct_ckpt_load(ct_ckpt_dir_t *d, const char *name, const ct_tensor_view_t *views, size_t n,
                 ct_ckpt_meta_t *meta, ct_errbuf_t *eb);

/* Removes every checkpoint of the directory (step files, best, final) and the `latest`
 * pointer - `latest` first - so that a run starting afresh in a used directory is never
 * resumed from the previous run's files. Writer only (CT_ESTATE otherwise). */
int ct_ckpt_clear(ct_ckpt_dir_t *d, ct_errbuf_t *eb);

/* The file name of a kind (step: of that step) into buf; returns its length or -EINVAL. */
int ct_ckpt_file_name(ct_ckpt_kind_t kind, int64_t step, char *buf, size_t size);

/* ==== 7. The worker and its communicator ======================================================
 *
 * ct_worker_init does everything a native worker needs before its first collective:
 *   1. reads the environment (ct_worker_env_read) and the communicator's own variables:
 *        CTRUN_COMM_TIMEOUT  seconds (a positive number, fractions allowed) that bound the
 *                            store connection, the communicator's set-up and every collective;
 *                            default CT_WORKER_DEFAULT_TIMEOUT_MS (300 s, PyTorch's default);
 *        CTRUN_COMM_BACKEND  auto (default), cpu (alias ring) or nccl;
 *        CTRUN_COMM_ADDR     the address this rank's CPU ring listens on (see below);
 *      values given in ct_worker_opts_t take precedence over the variables;
 *   2. sets up the runtime (ct_worker_setup with opts->flags);
 *   3. connects to the store at MASTER_ADDR:MASTER_PORT (the v2 TCPStore dialect, retried with
 *      backoff until the timeout) whenever MASTER_ADDR is set. With WORLD_SIZE > 1 the store is
 *      that of the launcher's agent (TORCHELASTIC_USE_AGENT_STORE=True, as ctrun and torchrun's
 *      static and c10d rendezvous set it); a worker never hosts one, so the value False, which
 *      tells a PyTorch rank 0 to host the store itself, is rejected. Without the variable the
 *      store is expected to be there (start ctrun-store yourself);
 *   4. creates the communicator (below).
 * Without any rank variable (no launcher) the worker is rank 0 of 1, with no store and a
 * communicator of one rank: every collective is then a local copy or nothing, and programs run
 * unchanged without a launcher.
 *
 * Store keys are namespaced by the run and the attempt: every key this library writes starts
 * with key_prefix = "ctworker/<TORCHELASTIC_RUN_ID>/attempt_<TORCHELASTIC_RESTART_COUNT>/", so a
 * restarted group never reads the keys of an earlier attempt even when the launcher did not wipe
 * them. The NCCL unique ID is under key_prefix + "nccl/0" (128 raw bytes), the CPU ring's
 * addresses under key_prefix + "ring/<rank>" ("host:port").
 *
 * Backends (CT_COMM_AUTO picks NCCL when the library was built with it and at least
 * LOCAL_WORLD_SIZE GPUs are visible - one per rank of the node - and the CPU ring otherwise):
 *   - CT_COMM_NCCL: the GPU is LOCAL_RANK's among the visible ones (CUDA_VISIBLE_DEVICES
 *     applies; with a single visible GPU every rank takes it, for launchers that give each rank
 *     its own). Rank 0 calls ncclGetUniqueId and SETs the ID, the others WAIT and GET it, as
 *     PyTorch's ProcessGroupNCCL does; the communicator is created non-blocking and polled
 *     against the deadline. Buffers may be device memory, used in place, or host memory, staged
 *     through a device buffer. Work runs on the communicator's own stream, which waits for the
 *     legacy default stream; each call returns when its result is complete.
 *   - CT_COMM_CPU, a ring of TCP connections: each rank listens on an ephemeral port (port 0)
 *     of the address it reaches the store from (the local address of its store connection;
 *     loopback when MASTER_ADDR is local, which is refused for a job that spans nodes:
 *     LOCAL_WORLD_SIZE < WORLD_SIZE), or of CTRUN_COMM_ADDR; publishes "host:port"; connects to
 *     rank + 1 and accepts rank - 1 (mod WORLD_SIZE), both sides checking a hello that names
 *     the namespace, the world size and the rank, so strays are turned away (a refused
 *     connection - a stale address left by an earlier job in the same namespace - is retried,
 *     re-reading the key, until the deadline). Buffers are host memory. Data move in chunks
 *     with non-blocking sockets and poll(2); receiving, reducing and forwarding overlap, so a
 *     collective streams at the speed of the slowest link.
 *
 * CPU ring allreduce and its summation order. The count N is cut into W segments; segment k
 * (k = 0..W-1) holds floor(N/W) elements, plus one for k < N % W, in order. A reduce-scatter
 * (W - 1 steps: rank r sends segment r - s and adds what it receives into segment r - s - 1,
 * mod W) leaves segment k fully summed on rank k - 1, and an allgather (W - 1 steps) copies it
 * to every rank. So element i of segment k is, on every rank and bit for bit,
 *     (...((x[k][i] + x[k+1][i]) + x[k+2][i]) + ...) + x[k+W-1][i]      (rank indices mod W)
 * with each addition rounded to the element type (f32, f64; bf16 adds in float and rounds to
 * nearest even after every addition). AVG divides that sum by W in the element type (bf16: in
 * float, then rounded). The order depends on W and N only - never on timing or chunk size - so
 * results repeat exactly from run to run, and all ranks hold identical bits. NCCL's order is
 * NCCL's (deterministic for a fixed configuration in practice, not promised).
 *
 * Every call is bounded by the communicator's timeout. A dead or stuck peer turns into an
 * error, never a hang: CT_EPEER when a connection closes or resets (a peer exited, or a
 * neighbour gave up), -ETIMEDOUT when the call is not complete by its deadline (its start plus
 * the timeout), CT_EPROTOCOL when the ranks disagree about the collective (each call carries a
 * header with its kind, size, dtype, root and sequence number), CT_ENCCL / CT_ECUDA for NCCL
 * and CUDA errors (with ncclGetLastError's text). After such an error the communicator is
 * aborted: its connections are closed (so neighbours fail fast rather than at their own
 * deadline) or the NCCL communicator is aborted, and every later call returns CT_ESTATE with the
 * original message. Argument errors (-EINVAL) leave it usable. */
#define CT_WORKER_DEFAULT_TIMEOUT_MS 300000
#define CT_WORKER_KEY_PREFIX_MAX     (CT_WORKER_RUN_ID_MAX + 48)

typedef struct ct_comm ct_comm_t;

typedef enum ct_comm_backend {
    CT_COMM_AUTO = 0,
    CT_COMM_CPU = 1, /* the CPU ring over TCP */
    CT_COMM_NCCL = 2,
} ct_comm_backend_t;

typedef enum ct_comm_op {
    CT_COMM_SUM = 0,
    CT_COMM_AVG = 1,
} ct_comm_op_t;

typedef struct ct_worker_opts {
    ct_comm_backend_t backend; /* CT_COMM_AUTO: CTRUN_COMM_BACKEND, else automatic */
    int64_t timeout_ms;        /* 0: CTRUN_COMM_TIMEOUT, else CT_WORKER_DEFAULT_TIMEOUT_MS */
    unsigned flags;            /* for ct_worker_setup: CT_WORKER_CATCH_SIGNALS */
} ct_worker_opts_t;

typedef struct ct_worker {
    ct_worker_env_t env;                       /* what ct_worker_env_read found */
    ct_comm_t *comm;                           /* the communicator of all WORLD_SIZE ranks */
    int64_t timeout_ms;                        /* the timeout in force */
    char key_prefix[CT_WORKER_KEY_PREFIX_MAX]; /* the store namespace of this run and attempt */
    void *store;                               /* private: the store connection, or NULL */
    bool ready;                                /* between a successful init and close */
} ct_worker_t;

/* Initialises w as above; opts may be NULL (all defaults). On failure w is left closed (and
 * ct_worker_close is still safe) and the message names the variable or the step that failed:
 * a bad variable (CT_EPARSE, CT_ERANGE_VALUE, CT_ESTATE), a store that cannot be reached in
 * time (-ETIMEDOUT, naming MASTER_ADDR:MASTER_PORT), peers that do not show up (-ETIMEDOUT),
 * CT_ENOTBUILT for NCCL in a build without it, CT_ENOGPU for NCCL without a visible GPU. */
int ct_worker_init(ct_worker_t *w, const ct_worker_opts_t *opts, ct_errbuf_t *eb);

/* Destroys the communicator, closes the store connection and undoes ct_worker_setup. Safe to
 * call twice and after a failed init. */
void ct_worker_close(ct_worker_t *w);

/* buf (count elements of dtype: CT_DTYPE_F32, CT_DTYPE_F64 or CT_DTYPE_BF16) <- the sum or the
 * average over the ranks, in place. */
int ct_comm_allreduce(ct_comm_t *c, void *buf, int64_t count, ct_dtype_t dtype, ct_comm_op_t op,
                      ct_errbuf_t *eb);
/* buf (nbytes) <- root's buf. */
int ct_comm_broadcast(ct_comm_t *c, void *buf, size_t nbytes, int root, ct_errbuf_t *eb);
/* recvbuf (world size x nbytes) <- every rank's sendbuf (nbytes), in rank order. sendbuf may
 * be this rank's slot of recvbuf. */
int ct_comm_allgather(ct_comm_t *c, const void *sendbuf, void *recvbuf, size_t nbytes,
                      ct_errbuf_t *eb);
/* Returns once every rank has entered the barrier. */
int ct_comm_barrier(ct_comm_t *c, ct_errbuf_t *eb);

int ct_comm_rank(const ct_comm_t *c);
int ct_comm_size(const ct_comm_t *c);
ct_comm_backend_t ct_comm_backend(const ct_comm_t *c);
/* Collectives started so far (the sequence number of the next one). */
uint64_t ct_comm_count(const ct_comm_t *c);
/* The timeout of later calls; timeout_ms <= 0 restores CT_WORKER_DEFAULT_TIMEOUT_MS. */
void ct_comm_set_timeout(ct_comm_t *c, int64_t timeout_ms);
int64_t ct_comm_timeout(const ct_comm_t *c);

/* Whether this build of libctworker has the backend (NCCL needs a build with CUDA and NCCL;
 * auto and the CPU ring are always there). */
bool ct_comm_backend_built(ct_comm_backend_t backend);

/* "auto", "cpu", "nccl" ("?" for an invalid value). */
const char *ct_comm_backend_name(ct_comm_backend_t backend);
/* Parses "auto", "cpu", "ring" (the same as cpu) or "nccl"; CT_EPARSE otherwise. */
int ct_comm_backend_parse(const char *text, ct_comm_backend_t *out, ct_errbuf_t *eb);

/* ==== 8. Reductions for data-parallel training ==============================================
 *
 * One reducer per process, over the worker's communicator, for what a data-parallel trainer
 * reduces: the step's float buffer (the gradients, with scalars such as the loss in its tail),
 * whose ranges may be declared final early so that their reduction overlaps the rest of the
 * backward pass; sums of doubles (evaluation counts); a broadcast of bytes (which checkpoint to
 * resume from). Every rank makes the same calls in the same order. Sums, never averages: a
 * trainer that divides by the global count before reducing gets a result that does not depend
 * on the world size (the CPU ring's summation order is section 7's).
 *
 * Float buffers are host memory, or CUDA device memory after ct_reducer_use_device, and the
 * caller does not need to know what then happens to them:
 *   - over NCCL they are reduced in buckets on a communication stream of the reducer's own,
 *     ordered after the work queued so far on the caller's stream by an event, and the caller's
 *     stream waits for the last bucket by another, so the host never waits; ranges given to
 *     ct_reducer_ready start at once, and ct_reducer_sum_f32 reduces the rest. A watchdog
 *     thread ends the process through ct_worker_fail (error file, non-zero exit) when a
 *     reduction is not complete within the timeout, or NCCL reports an asynchronous error,
 *     aborting the communicator first (bounded: an abort stuck on a wedged stream does not
 *     keep the process);
 *   - over the CPU ring (or a custom backend) they go through host memory, after the caller's
 *     stream is synchronised;
 *   - in a world of one nothing moves (unless asked to go through NCCL anyway).
 * Doubles and broadcasts are always host memory.
 *
 * ct_reducer_create_custom reduces through functions the caller supplies (a test joins threads
 * of one process this way), with the same staging of device buffers. */
typedef struct ct_reducer ct_reducer_t;

/* A caller's reduction functions: host memory only; sum is a SUM allreduce of n elements of
 * dtype (CT_DTYPE_F32 or CT_DTYPE_F64) in place. */
typedef struct ct_reducer_backend {
    const char *name; /* for messages: "shm", ... */
    int rank, world_size;
    void *ctx;
    int (*sum)(void *ctx, void *buf, int64_t n, ct_dtype_t dtype, ct_errbuf_t *eb);
    int (*broadcast)(void *ctx, void *buf, size_t nbytes, int root, ct_errbuf_t *eb);
} ct_reducer_backend_t;

/* The reducer over comm (NULL, or a communicator of one rank: every call is the identity, which
 * is exactly a sum over one rank). The reducer borrows comm, which must outlive it. */
int ct_reducer_create(ct_reducer_t **out, ct_comm_t *comm, ct_errbuf_t *eb);
/* The reducer over be (copied). */
int ct_reducer_create_custom(ct_reducer_t **out, const ct_reducer_backend_t *be, ct_errbuf_t *eb);
/* Waits for reductions in flight, stops the watchdog, frees; NULL is fine. */
void ct_reducer_destroy(ct_reducer_t *r);

#define CT_REDUCER_BUCKET_BYTES ((size_t)8 << 20)

typedef struct ct_reducer_device {
    void *stream;        /* the cudaStream_t the caller's work on the buffers is queued on */
    size_t bucket_bytes; /* NCCL bucket size; 0: CT_REDUCER_BUCKET_BYTES */
    int64_t timeout_ms;  /* the NCCL reduction's deadline; <= 0: the communicator's timeout */
    bool nccl_alone;     /* go through NCCL in a world of one too (to test or time it) */
} ct_reducer_device_t;

/* From now on the float buffers are CUDA device memory on the current device. CT_ENOTBUILT in
 * builds without CUDA; -EINVAL when called twice. */
int ct_reducer_use_device(ct_reducer_t *r, const ct_reducer_device_t *dev, ct_errbuf_t *eb);

int ct_reducer_rank(const ct_reducer_t *r);
int ct_reducer_world_size(const ct_reducer_t *r);
/* "local", "ring", "nccl" or the custom backend's name. */
const char *ct_reducer_name(const ct_reducer_t *r);

/* Whether ct_reducer_ready starts work early (device buffers over NCCL); when false, ready
 * only checks its arguments and ct_reducer_sum_f32 reduces everything. */
bool ct_reducer_overlaps(const ct_reducer_t *r);

/* The n ranges {offset, length} of buf are final for the coming ct_reducer_sum_f32 over buf (in
 * the order of the caller's stream) and may be reduced now, while the caller computes the rest.
 * Every rank gives the same ranges in the same order. */
int ct_reducer_ready(ct_reducer_t *r, float *buf, const int64_t (*ranges)[2], int n,
                     ct_errbuf_t *eb);

/* buf[i] <- the sum over ranks of buf[i], i < n (what ct_reducer_ready took included). With
 * device buffers over NCCL it returns once the work is queued; the caller's stream waits for it.
 */
int ct_reducer_sum_f32(ct_reducer_t *r, float *buf, int64_t n, ct_errbuf_t *eb);
/* The same for doubles in host memory; returns when done. */
int ct_reducer_sum_f64(ct_reducer_t *r, double *buf, int64_t n, ct_errbuf_t *eb);
/* buf (nbytes of host memory) <- root's buf. */
int ct_reducer_broadcast(ct_reducer_t *r, void *buf, size_t nbytes, int root, ct_errbuf_t *eb);

#ifdef __cplusplus
}
#endif

#endif /* CTWORKER_H */
