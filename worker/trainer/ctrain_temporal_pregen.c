/*
 * ctrain_temporal_pregen.c - ctrain --model temporal --pregenerate N --output_dir DIR: the curve
 * cache of examples/pytorch/pregenerate_temporal_data.py, byte for byte (curves.npy float32
 * (N, seq_len) as np.save writes it, descriptions.jsonl with json.dumps' {"i": i, "text": ...}
 * lines, meta.json as json.dump writes {"seed", "num_samples", "length", "version": 1}), made by
 * the generator of ctrain_temporal_gen.c with --threads threads.
 *
 * Atomic: the files are written under temporary names (the Python program's), fsync'd and
 * renamed into place, meta.json last; an older meta.json is removed first, so a cache folder is
 * either complete or has no meta.json (which every reader refuses). On failure the temporary
 * files are removed. Under ctrun rank 0 writes the cache; the other ranks return at once.
 *
 * Not here: reading the cache (ctrain_temporal_task.c), training.
 */
#include "ctrain_temporal_pregen.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_fs.h"
#include "ct_time.h"
#include "ctrain_temporal_gen.h"

#define CTRAIN_TEMPORAL_PREGEN__CHUNK 8192 /* curves generated between two writes */

typedef struct ctrain_temporal_pregen__job {
    uint64_t seed;
    int64_t first, count; /* samples of this thread */
    int length;
    float *curves; /* (count, length) */
    char *texts;   /* (count, CTRAIN_TEMPORAL_TEXT_MAX) */
    int rc;
} ctrain_temporal_pregen__job_t;

static void *ctrain_temporal_pregen__run(void *arg)
{
    ctrain_temporal_pregen__job_t *j = arg;
    for (int64_t k = 0; k < j->count && j->rc == 0; k++)
        j->rc = ctrain_temporal_gen_make(j->seed, (uint64_t)(j->first + k), j->length,
                                         j->curves + k * j->length,
                                         j->texts + k * CTRAIN_TEMPORAL_TEXT_MAX);
    return NULL;
}

/* json.dumps of a string (ensure_ascii): quotes, backslash escapes, \u00XX below 0x20 and for
 * bytes above 0x7e (the descriptions are ASCII). */
static size_t ctrain_temporal_pregen__json_str(const char *s, char *out)
{
    size_t n = 0;
    out[n++] = '"';
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') {
            out[n++] = '\\';
            out[n++] = (char)ch;
        } else if (ch == '\n') {
            out[n++] = '\\';
            out[n++] = 'n';
        } else if (ch < 0x20 || ch > 0x7e) {
            n += (size_t)sprintf(out + n, "\\u%04x", ch);
        } else {
            out[n++] = (char)ch;
        }
    }
    out[n++] = '"';
    return n;
}

/* np.save's header for a float32 (rows, cols) array: the dict, spare spaces for the first axis
 * to grow to 21 digits, padding to a multiple of 64 bytes, '\n'. */
static size_t ctrain_temporal_pregen__npy_header(int64_t rows, int cols, unsigned char *out)
{
    char dict[256];
    int h = snprintf(dict, sizeof dict,
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %d), }",
                     (long long)rows, cols);
    char digits[32];
    int spare = 21 - snprintf(digits, sizeof digits, "%lld", (long long)rows);
    for (int k = 0; k < spare; k++)
        dict[h++] = ' ';
    size_t hlen = (size_t)h + 1;
    size_t pad = 64 - (10 + hlen) % 64;
    if (pad == 64)
        pad = 0;
    hlen += pad;
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (unsigned char)(hlen & 0xff);
    out[9] = (unsigned char)(hlen >> 8);
    memcpy(out + 10, dict, (size_t)h);
    memset(out + 10 + h, ' ', pad);
    out[10 + hlen - 1] = '\n';
    return 10 + hlen;
}

static int ctrain_temporal_pregen__fsync_close(int fd)
{
    int rc = fsync(fd) != 0 ? -errno : 0;
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    return rc;
}

int ctrain_temporal_pregenerate(const ctrain_cfg_t *c, int rank, ct_errbuf_t *eb)
{
    if (rank != 0)
        return 0;
    const char *dir = c->output_dir;
    const int64_t N = c->pregenerate;
    const int L = c->seq_len;
    const int T = c->threads > 0 ? c->threads : 1;
    const int64_t t0 = ct_time_ns();
    int rc = ct_fs_mkdir_p(dir, 0755, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, rc, "--output_dir");

    char p_npy[CTRAIN_TRAIN_PATH_MAX + 32], p_txt[CTRAIN_TRAIN_PATH_MAX + 32],
        p_meta[CTRAIN_TRAIN_PATH_MAX + 32], t_npy[CTRAIN_TRAIN_PATH_MAX + 32],
        t_txt[CTRAIN_TRAIN_PATH_MAX + 32], t_meta[CTRAIN_TRAIN_PATH_MAX + 32];
    snprintf(p_npy, sizeof p_npy, "%s/curves.npy", dir);
    snprintf(p_txt, sizeof p_txt, "%s/descriptions.jsonl", dir);
    snprintf(p_meta, sizeof p_meta, "%s/meta.json", dir);
    snprintf(t_npy, sizeof t_npy, "%s/curves.tmp.npy", dir);
    snprintf(t_txt, sizeof t_txt, "%s/descriptions.jsonl.tmp", dir);
    snprintf(t_meta, sizeof t_meta, "%s/meta.json.tmp", dir);

    float *curves = malloc((size_t)CTRAIN_TEMPORAL_PREGEN__CHUNK * (size_t)L * sizeof *curves);
    char *texts = malloc((size_t)CTRAIN_TEMPORAL_PREGEN__CHUNK * CTRAIN_TEMPORAL_TEXT_MAX);
    char *lines =
        malloc((size_t)CTRAIN_TEMPORAL_PREGEN__CHUNK * (CTRAIN_TEMPORAL_TEXT_MAX * 6 + 48));
    ctrain_temporal_pregen__job_t *jobs = calloc((size_t)T, sizeof *jobs);
    pthread_t *tids = calloc((size_t)T, sizeof *tids);
    bool *started = calloc((size_t)T, sizeof *started);
    int fd_npy = -1, fd_txt = -1;
    const char *what = dir;
    if (!curves || !texts || !lines || !jobs || !tids || !started) {
        rc = -ENOMEM;
        goto out;
    }
    if (unlink(p_meta) != 0 && errno != ENOENT) {
        rc = -errno;
        what = p_meta;
        goto out;
    }
    fd_npy = open(t_npy, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_npy < 0) {
        rc = -errno;
        what = t_npy;
        goto out;
    }
    fd_txt = open(t_txt, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_txt < 0) {
        rc = -errno;
        what = t_txt;
        goto out;
    }
    unsigned char hdr[512];
    size_t hlen = ctrain_temporal_pregen__npy_header(N, L, hdr);
    off_t off_npy = 0, off_txt = 0;
    if ((rc = ct_fs_write_full(fd_npy, hdr, hlen, 0)) != 0) {
        what = t_npy;
        goto out;
    }
    off_npy = (off_t)hlen;
    for (int64_t base = 0; base < N; base += CTRAIN_TEMPORAL_PREGEN__CHUNK) {
        const int64_t n =
            N - base < CTRAIN_TEMPORAL_PREGEN__CHUNK ? N - base : CTRAIN_TEMPORAL_PREGEN__CHUNK;
        for (int t = 0; t < T; t++) {
            int64_t lo = n * t / T, hi = n * (t + 1) / T;
            jobs[t] =
                (ctrain_temporal_pregen__job_t){.seed = c->data_seed,
                                                .first = base + lo,
                                                .count = hi - lo,
                                                .length = L,
                                                .curves = curves + lo * L,
                                                .texts = texts + lo * CTRAIN_TEMPORAL_TEXT_MAX};
            /* thread 0 is this one; a thread that cannot start runs its share here */
            started[t] =
                t > 0 && pthread_create(&tids[t], NULL, ctrain_temporal_pregen__run, &jobs[t]) == 0;
            if (!started[t])
                ctrain_temporal_pregen__run(&jobs[t]);
        }
        for (int t = 1; t < T; t++)
            if (started[t])
                pthread_join(tids[t], NULL);
        for (int t = 0; t < T && rc == 0; t++)
            rc = jobs[t].rc;
        if (rc != 0)
            goto out;
        size_t bytes = (size_t)n * (size_t)L * sizeof *curves;
        if ((rc = ct_fs_write_full(fd_npy, curves, bytes, off_npy)) != 0) {
            what = t_npy;
            goto out;
        }
        off_npy += (off_t)bytes;
        size_t m = 0;
        for (int64_t k = 0; k < n; k++) {
            m += (size_t)sprintf(lines + m, "{\"i\": %lld, \"text\": ", (long long)(base + k));
            m += ctrain_temporal_pregen__json_str(texts + k * CTRAIN_TEMPORAL_TEXT_MAX, lines + m);
            lines[m++] = '}';
            lines[m++] = '\n';
        }
        if ((rc = ct_fs_write_full(fd_txt, lines, m, off_txt)) != 0) {
            what = t_txt;
            goto out;
        }
        off_txt += (off_t)m;
    }
    rc = ctrain_temporal_pregen__fsync_close(fd_npy);
    fd_npy = -1;
    if (rc != 0) {
        what = t_npy;
        goto out;
    }
    rc = ctrain_temporal_pregen__fsync_close(fd_txt);
    fd_txt = -1;
    if (rc != 0) {
        what = t_txt;
        goto out;
    }
    if (rename(t_npy, p_npy) != 0) {
        rc = -errno;
        what = p_npy;
        goto out;
    }
    if (rename(t_txt, p_txt) != 0) {
        rc = -errno;
        what = p_txt;
        goto out;
    }
    char meta[256];
    int mlen = snprintf(meta, sizeof meta,
                        "{\"seed\": %llu, \"num_samples\": %lld, \"length\": %d, \"version\": 1}",
                        (unsigned long long)c->data_seed, (long long)N, L);
    rc = ct_fs_replace(p_meta, meta, (size_t)mlen, eb);
    if (rc != 0) {
        goto out_free;
    }
    printf("wrote %lld curves of %d points (seed %llu) to %s in %.1f s\n", (long long)N, L,
           (unsigned long long)c->data_seed, dir, (double)(ct_time_ns() - t0) / 1e9);
    fflush(stdout);
out:
    if (fd_npy >= 0)
        close(fd_npy);
    if (fd_txt >= 0)
        close(fd_txt);
    if (rc != 0) {
        unlink(t_npy);
        unlink(t_txt);
        unlink(t_meta);
        rc = ct_errbuf_set(eb, rc, "--pregenerate: %s: %s", what, ct_strerror(rc));
    }
out_free:
    free(started);
    free(curves);
    free(texts);
    free(lines);
    free(jobs);
    free(tids);
    return rc;
}
