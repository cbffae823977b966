/*
 * ctrain_temporal_task.c - the trainer's task for --model temporal (ctrain_train_internal.h),
 * --stage reconstruct and --stage align: the curve cache (--dataset DIR, the folder
 * examples/pytorch/pregenerate_temporal_data.py writes: meta.json, curves.npy float32 (N, S)),
 * its split (the last max(1, floor(N * val_fraction)) curves validate), each curve normalised
 * by its mean and unbiased standard deviation + 1e-5 as the reference does, the patch masks,
 * the evaluation (mean squared error over the masked patches of the validation curves, and
 * beside it the mean-of-visible-patches predictor's), and --inference_only (that evaluation of
 * --state_dict_path; with --dataset a CSV file of real curves, one series per row, their
 * embeddings instead: --train_dir/embeddings.npy, float32 (rows, d_model), each row the mean
 * over the curve's patches of the encoder's final LayerNorm output, computed by rank 0).
 *
 * Without --dataset the curves are generated at start, into memory: --num_samples curves of
 * --seq_len points of seed --data_seed (data.num_samples, data.seq_len, data.seed of --config),
 * curve i and its description those of temporal_curves.make(seed, i, seq_len)
 * (models/temporal/ctrain_temporal_gen.c, --threads threads), the split the same, so a run on
 * the fly is the run on the cache `ctrain --pregenerate` writes with that seed, count and length,
 * bit for bit - the reference's Curves without data.cache_dir.
 *
 * Masks: every curve has k = max(1, round(mask_ratio * n)) masked patches out of n (round half
 * to even, as Python's round). In training epoch e (from 0) curve i masks the k patches with
 * the smallest of the n uniform draws (ties to the lower index) at offset i * n of stream
 * CT_RNG_STREAM(CTRAIN_TEMPORAL_PURPOSE_MASK, e); in evaluation, the same from stream
 * CT_RNG_STREAM(CTRAIN_TEMPORAL_PURPOSE_EVAL_MASK, 0), so every evaluation scores the same
 * masks. (The reference draws its masks from torch.rand in batch order; a keyed draw is what
 * makes a resumed or re-sharded run mask exactly as the uninterrupted one.)
 *
 * The training loss of a step is the sum of squared errors over the masked points of its
 * global batch divided by their count (k * P per curve), so a step on W ranks is the step on
 * one. Evaluation splits the validation curves over ranks in contiguous blocks; the W partial
 * sums are added in rank order on every rank.
 *
 * --stage align also reads the cache's descriptions.jsonl ({"i", "text"} per line), tokenized by
 * --lm_dir's tokenizer without special tokens, cut to --max_text_tokens - 1 and ended by
 * config.json's eos_token_id (the reference's Collate with HFTokenizer), tokenizes --prompt, and
 * opens the LM frozen (its weights are not in the checkpoints). Nothing is masked. A stage-1
 * file as --state_dict_path (no projector.* tensors) initialises the encoder; the projector
 * keeps its initialisation. Evaluation: val_loss (the validation descriptions' mean token
 * cross-entropy after their curves) and shuffled_val_loss (see ctrain_temporal_task__eval_align).
 *
 * --stage align without --lm_dir (the reference's lm.path null): the word-level tokenizer of the
 * training descriptions and the prompt (models/lm/ctrain_lm_wordtok.h, <eos> 2 ends every
 * description) and the tiny random Qwen2 (models/temporal/ctrain_temporal_wordlm.h), which rank 0
 * initialises and pretrains at every start and broadcasts through the reducer before it is
 * frozen; deterministic, so it is not in the checkpoints either.
 *
 * Not here: the model (models/temporal/ctrain_temporal.c), the LM, the loop.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pthread.h>

#include "ct_config.h"
#include "ct_fs.h"
#include "ct_log.h"
#include "ct_time.h"
#include "ctrain_lm.h"
#include "ctrain_lm_cfg.h"
#include "ctrain_lm_tok.h"
#include "ctrain_lm_wordtok.h"
#include "ctrain_temporal.h"
#include "ctrain_temporal_gen.h"
#include "ctrain_temporal_wordlm.h"
#include "ctrain_train.h"
#include "ctrain_train_internal.h"

#define CTRAIN_TEMPORAL_PURPOSE_MASK      270u
#define CTRAIN_TEMPORAL_PURPOSE_EVAL_MASK 271u

typedef struct ctrain_temporal_task__state {
    ctrain_temporal_spec_t spec;
    char path[CTRAIN_TRAIN_PATH_MAX];
    int64_t n_curves, n_train, n_val;
    int S, n, P, k;
    bool csv;       /* --dataset is a CSV file of curves to embed (--inference_only) */
    bool generated; /* no --dataset: the curves of --data_seed, generated at start */
    uint64_t data_seed;
    float *patches;      /* (n_curves, S) normalised */
    int32_t *ids, *mask; /* evaluation rows, (micro, n) */
    /* --stage align */
    ctrain_lm_cfg_t lmcfg;
    ctrain_lm_t *lm;
    int32_t *text, *text_len, *prompt;
    int n_prompt, L; /* L: the longest row, K + prompt + max_text_tokens */
    int32_t *etext;  /* evaluation rows' descriptions, (micro) */
    /* without --lm_dir: the training descriptions' ids for the tiny LM's pretraining */
    int32_t *pre_ids;
    int64_t *pre_off; /* (n_train + 1) */
    size_t pre_cap;
} ctrain_temporal_task__state_t;

/* ---- the cache ------------------------------------------------------------------------------- */

/* dir/curves.npy's float32 (N, S) array into *out (malloc'd). */
static int ctrain_temporal_task__read_npy(const char *dir, int64_t N, int S, float **out,
                                          ct_errbuf_t *eb)
{
    char path[CTRAIN_TRAIN_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/curves.npy", dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return ct_errbuf_set(eb, -errno, "%s: %s", path, strerror(errno));
    unsigned char pre[10];
    int rc = 0;
    char *hdr = NULL;
    *out = NULL;
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0 || pre[6] != 1) {
        rc = ct_errbuf_set(eb, CT_EFORMAT, "%s: not a version 1 .npy file", path);
        goto out;
    }
    const size_t hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
    hdr = calloc(1, hlen + 1);
    if (!hdr || fread(hdr, 1, hlen, f) != hlen) {
        rc = ct_errbuf_set(eb, CT_EFORMAT, "%s: its header is cut short", path);
        goto out;
    }
    char want[96];
    snprintf(want, sizeof want, "'shape': (%lld, %d)", (long long)N, S);
    if (!strstr(hdr, "'descr': '<f4'") || !strstr(hdr, "'fortran_order': False") ||
        !strstr(hdr, want)) {
        rc = ct_errbuf_set(eb, CT_EFORMAT,
                           "%s: expected little-endian float32 curves in C order of shape (%lld, "
                           "%d) as meta.json says; the header is %.200s",
                           path, (long long)N, S, hdr);
        goto out;
    }
    const size_t cells = (size_t)N * (size_t)S;
    *out = malloc(cells * sizeof **out);
    if (!*out) {
        rc = ct_errbuf_set(eb, -ENOMEM, "%s: out of memory for %zu points", path, cells);
        goto out;
    }
    if (fread(*out, sizeof **out, cells, f) != cells) {
        rc = ct_errbuf_set(eb, CT_EFORMAT, "%s: fewer than the %zu points of its header", path,
                           cells);
        free(*out);
        *out = NULL;
    }
out:
    free(hdr);
    fclose(f);
    return rc;
}

/* The cache folder's meta.json and curves. */
static int ctrain_temporal_task__read_cache(ctrain_temporal_task__state_t *s, const char *dir,
                                            ct_errbuf_t *eb)
{
    char path[CTRAIN_TRAIN_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/meta.json", dir);
    json_error_t je;
    json_t *meta = json_load_file(path, 0, &je);
    if (!meta)
        return ct_errbuf_set(eb, CT_EFORMAT,
                             "%s: %s (--dataset names a curve cache folder, as "
                             "pregenerate_temporal_data.py or ctrain --pregenerate write)",
                             path, je.text);
    json_t *num = json_object_get(meta, "num_samples"), *len = json_object_get(meta, "length");
    int rc = 0;
    if (!json_is_integer(num) || !json_is_integer(len) || json_integer_value(num) < 2 ||
        json_integer_value(len) < 1 || json_integer_value(len) > (1 << 24) ||
        json_integer_value(num) > INT32_MAX)
        rc = ct_errbuf_set(eb, CT_EFORMAT,
                           "%s: needs num_samples (>= 2) and length (>= 1) as integers", path);
    if (rc == 0) {
        s->n_curves = json_integer_value(num);
        s->S = (int)json_integer_value(len);
    }
    json_decref(meta);
    if (rc != 0)
        return rc;
    float *raw = NULL;
    if ((rc = ctrain_temporal_task__read_npy(dir, s->n_curves, s->S, &raw, eb)) != 0)
        return rc;
    s->patches = raw;
    return 0;
}

typedef struct ctrain_temporal_task__gen_job {
    uint64_t seed;
    int64_t first, count;
    int length;
    float *out; /* (count, length) */
    int rc;
} ctrain_temporal_task__gen_job_t;

static void *ctrain_temporal_task__gen_run(void *arg)
{
    ctrain_temporal_task__gen_job_t *j = arg;
    for (int64_t k = 0; k < j->count && j->rc == 0; k++)
        j->rc = ctrain_temporal_gen_make(j->seed, (uint64_t)(j->first + k), j->length,
                                         j->out + (size_t)k * (size_t)j->length, NULL);
    return NULL;
}

/* No --dataset: --num_samples curves of --seq_len points of --data_seed, generated with
 * --threads threads into s->patches. */
static int ctrain_temporal_task__generate(ctrain_temporal_task__state_t *s, const ctrain_cfg_t *c,
                                          ct_errbuf_t *eb)
{
    s->n_curves = c->num_samples;
    s->S = c->seq_len;
    s->data_seed = c->data_seed;
    s->patches = malloc((size_t)s->n_curves * (size_t)s->S * sizeof *s->patches);
    if (!s->patches)
        return ct_errbuf_set(eb, -ENOMEM,
                             "--num_samples %lld: out of memory for %lld curves of %d "
                             "points",
                             (long long)s->n_curves, (long long)s->n_curves, s->S);
    enum { CTRAIN_TEMPORAL_TASK__GEN_THREADS = 64 };
    int T = c->threads < 1 ? 1 : c->threads;
    T = T > CTRAIN_TEMPORAL_TASK__GEN_THREADS ? CTRAIN_TEMPORAL_TASK__GEN_THREADS : T;
    if (T > s->n_curves)
        T = (int)s->n_curves;
    ctrain_temporal_task__gen_job_t jobs[CTRAIN_TEMPORAL_TASK__GEN_THREADS];
    pthread_t tids[CTRAIN_TEMPORAL_TASK__GEN_THREADS];
    bool started[CTRAIN_TEMPORAL_TASK__GEN_THREADS];
    for (int q = 0; q < T; q++) {
        const int64_t lo = s->n_curves * q / T, hi = s->n_curves * (q + 1) / T;
        jobs[q] = (ctrain_temporal_task__gen_job_t){.seed = c->data_seed,
                                                    .first = lo,
                                                    .count = hi - lo,
                                                    .length = s->S,
                                                    .out = s->patches + (size_t)lo * s->S};
        /* the first share on this thread, the others on their own */
        started[q] =
            q > 0 && pthread_create(&tids[q], NULL, ctrain_temporal_task__gen_run, &jobs[q]) == 0;
    }
    ctrain_temporal_task__gen_run(&jobs[0]);
    int rc = jobs[0].rc;
    for (int q = 1; q < T; q++) {
        if (started[q])
            pthread_join(tids[q], NULL);
        else
            ctrain_temporal_task__gen_run(&jobs[q]);
        rc = rc != 0 ? rc : jobs[q].rc;
    }
    if (rc != 0)
        return ct_errbuf_set(eb, rc, "--seq_len %d: generating the curves: %s", s->S,
                             ct_strerror(rc));
    return 0;
}

/* Each curve <- (curve - mean) / (std + 1e-5), std with Bessel's correction (torch.std's
 * default), as the reference's TemporalModel.patches. */
static void ctrain_temporal_task__normalise(ctrain_temporal_task__state_t *s)
{
    float *raw = s->patches;
    for (int64_t i = 0; i < s->n_curves; i++) {
        float *c = raw + (size_t)i * s->S;
        double mu = 0.0, ss = 0.0;
        for (int t = 0; t < s->S; t++)
            mu += c[t];
        mu /= s->S;
        for (int t = 0; t < s->S; t++)
            ss += (c[t] - mu) * (c[t] - mu);
        const float mean = (float)mu;
        const float sd = (float)sqrt(s->S > 1 ? ss / (s->S - 1) : NAN) + 1e-5f;
        for (int t = 0; t < s->S; t++)
            c[t] = (c[t] - mean) / sd;
    }
}

/* A CSV file of curves, one series per row (numbers separated by commas; blank lines skipped),
 * every row as long as the first: *out (malloc'd, rows x S). Errors name the file and line. */
static int ctrain_temporal_task__read_csv(ctrain_temporal_task__state_t *s, const char *path,
                                          ct_errbuf_t *eb)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return ct_errbuf_set(eb, -errno, "%s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0, have = 0, room = 0;
    float *x = NULL;
    long lineno = 0;
    int rc = 0;
    s->S = 0;
    s->n_curves = 0;
    while (rc == 0 && getline(&line, &cap, f) >= 0) {
        lineno++;
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\n' || *p == '\r' || *p == '\0')
            continue;
        int cols = 0;
        for (;;) {
            char *end;
            errno = 0;
            float v = strtof(p, &end);
            if (end == p || errno == ERANGE || !isfinite(v)) {
                rc = ct_errbuf_set(eb, CT_EFORMAT, "%s:%ld: column %d is not a finite number", path,
                                   lineno, cols + 1);
                break;
            }
            if (have == room) {
                room = room ? 2 * room : 4096;
                float *nx = realloc(x, room * sizeof *x);
                if (!nx) {
                    rc = ct_errbuf_set(eb, -ENOMEM, "%s: out of memory", path);
                    break;
                }
                x = nx;
            }
            x[have++] = v;
            cols++;
            p = end;
            while (*p == ' ' || *p == '\t')
                p++;
            if (*p != ',')
                break;
            p++;
        }
        if (rc != 0)
            break;
        if (*p != '\n' && *p != '\r' && *p != '\0') {
            rc = ct_errbuf_set(eb, CT_EFORMAT, "%s:%ld: unexpected text after column %d", path,
                               lineno, cols);
        } else if (s->S == 0) {
            s->S = cols;
        } else if (cols != s->S) {
            rc = ct_errbuf_set(eb, CT_EFORMAT,
                               "%s:%ld: %d points, where the first series has %d (every row "
                               "must be as long)",
                               path, lineno, cols, s->S);
        }
        s->n_curves++;
    }
    free(line);
    fclose(f);
    if (rc == 0 && s->n_curves == 0)
        rc = ct_errbuf_set(eb, CT_EFORMAT, "%s: no series", path);
    if (rc != 0) {
        free(x);
        return rc;
    }
    s->patches = x;
    return 0;
}

/* mask[0..n) <- curve i's patch mask from stream (seed, stream). */
static void ctrain_temporal_task__draw_mask(int32_t *mask, int n, int k, uint64_t seed,
                                            uint64_t stream, int64_t i)
{
    float u[CTRAIN_MODEL_MAX_LEN];
    ct_rng_uniform_cpu(u, n, seed, stream, (uint64_t)i * (uint64_t)n);
    for (int j = 0; j < n; j++) {
        int below = 0; /* draws that come before j's in (value, index) order */
        for (int q = 0; q < n; q++)
            below += u[q] < u[j] || (u[q] == u[j] && q < j);
        mask[j] = below < k;
    }
}

/* ---- --stage align: the descriptions and the frozen LM --------------------------------------- */

/* config.json's eos_token_id (the first of a list) into *eos. */
static int ctrain_temporal_task__eos(const char *dir, int32_t *eos, ct_errbuf_t *eb)
{
    char path[CTRAIN_TRAIN_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    if (!o)
        return ct_errbuf_set(eb, CT_EFORMAT, "%s: %s", path, je.text);
    json_t *e = json_object_get(o, "eos_token_id");
    if (json_is_array(e))
        e = json_array_get(e, 0);
    int rc = 0;
    if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT32_MAX)
        rc = ct_errbuf_set(eb, CT_EFORMAT,
                           "%s: needs eos_token_id (the token that ends every description)", path);
    else
        *eos = (int32_t)json_integer_value(e);
    json_decref(o);
    return rc;
}

/* Every curve's description into descs[0..n_curves) (malloc'd strings): dir/descriptions.jsonl
 * ({"i": i, "text": ...} per line, in order), or the generated ones. */
static int ctrain_temporal_task__descriptions(ctrain_temporal_task__state_t *s,
                                              const ctrain_cfg_t *c, char **descs, ct_errbuf_t *eb)
{
    char path[CTRAIN_TRAIN_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/descriptions.jsonl", c->dataset);
    if (s->generated) {
        for (int64_t i = 0; i < s->n_curves; i++) {
            /* temporal_curves.describe(sample_params(seed, i)), as make() returns it */
            ctrain_temporal_params_t par;
            char desc[CTRAIN_TEMPORAL_TEXT_MAX];
            ctrain_temporal_gen_params(s->data_seed, (uint64_t)i, &par);
            ctrain_temporal_gen_describe(&par, desc);
            if (!(descs[i] = strdup(desc)))
                return ct_errbuf_set(eb, -ENOMEM, "out of memory for the descriptions");
        }
        return 0;
    }
    FILE *f = fopen(path, "r");
    if (!f)
        return ct_errbuf_set(eb, -errno, "%s: %s", path, strerror(errno));
    char *line = NULL;
    size_t lcap = 0;
    int64_t i = 0;
    int rc = 0;
    while (i < s->n_curves && getline(&line, &lcap, f) >= 0) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        json_t *txt = o ? json_object_get(o, "text") : NULL;
        if (!json_is_string(txt)) {
            json_decref(o);
            rc = ct_errbuf_set(eb, CT_EFORMAT, "%s:%lld: not a {\"i\": ..., \"text\": ...} line",
                               path, (long long)i + 1);
            break;
        }
        if (strlen(json_string_value(txt)) != json_string_length(txt)) {
            json_decref(o);
            rc = ct_errbuf_set(eb, CT_EFORMAT, "%s:%lld: the text holds a NUL character", path,
                               (long long)i + 1);
            break;
        }
        descs[i] = strdup(json_string_value(txt));
        json_decref(o);
        if (!descs[i]) {
            rc = ct_errbuf_set(eb, -ENOMEM, "out of memory for the descriptions");
            break;
        }
        i++;
    }
    fclose(f);
    free(line);
    if (rc == 0 && i < s->n_curves)
        rc = ct_errbuf_set(eb, CT_EFORMAT, "%s: %lld descriptions, meta.json says %lld curves",
                           path, (long long)i, (long long)s->n_curves);
    return rc;
}

/* The tokenizer of the run: --lm_dir's (BPE), or the word-level one of the tiny random LM. */
typedef struct ctrain_temporal_task__tok {
    ctrain_lm_tok_t *bpe;
    ctrain_lm_wordtok_t *word;
} ctrain_temporal_task__tok_t;

static int ctrain_temporal_task__encode(const ctrain_temporal_task__tok_t *k, const char *text,
                                        ctrain_lm_ids_t *ids, ct_errbuf_t *eb)
{
    return k->bpe ? ctrain_lm_tok_encode(k->bpe, text, strlen(text), ids, eb)
                  : ctrain_lm_wordtok_encode(k->word, text, strlen(text), ids, eb);
}

/* Without --lm_dir: the word-level tokenizer of the training descriptions and the prompt (the
 * reference's WordTokenizer(all_texts[:n_train] + [prompt])) and the tiny Qwen2's configuration
 * over its vocabulary. */
static int ctrain_temporal_task__word_tok(ctrain_temporal_task__state_t *s, const ctrain_cfg_t *c,
                                          char *const *descs, ctrain_lm_wordtok_t **out,
                                          ct_errbuf_t *eb)
{
    int rc = ctrain_lm_wordtok_create(out, eb);
    for (int64_t i = 0; rc == 0 && i < s->n_train; i++)
        if ((rc = ctrain_lm_wordtok_add(*out, descs[i], strlen(descs[i]), eb)) != 0)
            rc = ct_errbuf_wrap(eb, rc, "the description of curve %lld", (long long)i);
    if (rc == 0 && (rc = ctrain_lm_wordtok_add(*out, c->prompt, strlen(c->prompt), eb)) != 0)
        rc = ct_errbuf_wrap(eb, rc, "--prompt");
    if (rc != 0)
        return rc;
    const ctrain_temporal_wordlm_sizes_t z = {.vocab = ctrain_lm_wordtok_size(*out),
                                              .hidden = c->lm_hidden_size,
                                              .layers = c->lm_num_layers,
                                              .heads = c->lm_num_heads,
                                              .kv_heads = c->lm_num_kv_heads,
                                              .inner = c->lm_intermediate_size};
    if ((rc = ctrain_temporal_wordlm_cfg(&z, &s->lmcfg, eb)) != 0)
        return ct_errbuf_wrap(eb, rc, "the tiny random LM (--lm_hidden_size, ...)");
    return 0;
}

/* The descriptions tokenized by --lm_dir's tokenizer as the reference's HFTokenizer (no special
 * tokens; config.json's eos_token_id), or without --lm_dir by the word-level tokenizer (<eos>
 * 2), cut to max_text_tokens - 1 and ended by eos; the prompt's ids; without --lm_dir also the
 * training descriptions' whole ids, <eos> ended, for the LM's pretraining. */
static int ctrain_temporal_task__texts(ctrain_temporal_task__state_t *s, const ctrain_cfg_t *c,
                                       ct_errbuf_t *eb)
{
    const bool word = c->lm_dir[0] == '\0';
    const char *lm_name = word ? "the tiny random LM" : "--lm_dir";
    int32_t eos = CTRAIN_LM_WORDTOK_EOS;
    ctrain_temporal_task__tok_t tok = {0};
    int rc = 0;
    char **descs = calloc((size_t)s->n_curves, sizeof *descs);
    if (!descs)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for the descriptions");
    if ((rc = ctrain_temporal_task__descriptions(s, c, descs, eb)) != 0)
        goto done;
    if (word) {
        if ((rc = ctrain_temporal_task__word_tok(s, c, descs, &tok.word, eb)) != 0)
            goto done;
    } else if ((rc = ctrain_temporal_task__eos(c->lm_dir, &eos, eb)) != 0 ||
               (rc = ctrain_lm_cfg_read(c->lm_dir, &s->lmcfg, eb)) != 0 ||
               (rc = ctrain_lm_tok_load(&tok.bpe, c->lm_dir, eb)) != 0) {
        rc = ct_errbuf_wrap(eb, rc, "--lm_dir");
        goto done;
    }
    const int cap = c->max_text_tokens;
    char path[CTRAIN_TRAIN_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/descriptions.jsonl", c->dataset);
    ctrain_lm_ids_t ids = {0};
    s->text = malloc((size_t)s->n_curves * (size_t)cap * sizeof *s->text);
    s->text_len = malloc((size_t)s->n_curves * sizeof *s->text_len);
    if (word)
        s->pre_off = calloc((size_t)s->n_train + 1, sizeof *s->pre_off);
    /* errors name the file and line, or the generated description's curve */
    char where[CTRAIN_TRAIN_PATH_MAX + 48];
    snprintf(where, sizeof where, "%s:", path);
    if (s->generated)
        snprintf(where, sizeof where, "the generated description of curve ");
    const long long line0 = s->generated ? 0 : 1;
    if (!s->text || !s->text_len || (word && !s->pre_off)) {
        rc = ct_errbuf_set(eb, -ENOMEM, "out of memory for the descriptions");
        goto out;
    }
    for (int64_t i = 0; i < s->n_curves; i++) {
        ids.n = 0;
        ct_errbuf_t teb;
        if ((rc = ctrain_temporal_task__encode(&tok, descs[i], &ids, &teb)) != 0) {
            rc = ct_errbuf_set(eb, rc, "%s%lld: %s", where, (long long)i + line0, teb.msg);
            goto out;
        }
        int32_t *row = s->text + (size_t)i * cap;
        const int len = ids.n < (size_t)cap - 1 ? (int)ids.n : cap - 1;
        for (int j = 0; j < cap; j++)
            row[j] = j < len ? ids.ids[j] : j == len ? eos : 0;
        s->text_len[i] = len + 1;
        for (int j = 0; j <= len; j++)
            if (row[j] >= s->lmcfg.vocab) {
                rc = ct_errbuf_set(eb, CT_EFORMAT,
                                   "%s%lld: token id %d is outside the vocabulary of %d of %s",
                                   where, (long long)i + line0, row[j], s->lmcfg.vocab, lm_name);
                goto out;
            }
        if (word && i < s->n_train) { /* the whole description and <eos>, for pretraining */
            const size_t need = (size_t)s->pre_off[i] + ids.n + 1;
            if (need > s->pre_cap) {
                const size_t ncap = 2 * need + 1024;
                int32_t *p = realloc(s->pre_ids, ncap * sizeof *p);
                if (!p) {
                    rc = ct_errbuf_set(eb, -ENOMEM, "out of memory for the descriptions");
                    goto out;
                }
                s->pre_ids = p, s->pre_cap = ncap;
            }
            if (ids.n)
                memcpy(s->pre_ids + s->pre_off[i], ids.ids, ids.n * sizeof *ids.ids);
            s->pre_ids[s->pre_off[i] + (int64_t)ids.n] = eos;
            s->pre_off[i + 1] = s->pre_off[i] + (int64_t)ids.n + 1;
        }
    }
    ids.n = 0;
    if ((rc = ctrain_temporal_task__encode(&tok, c->prompt, &ids, eb)) != 0) {
        rc = ct_errbuf_wrap(eb, rc, "--prompt");
        goto out;
    }
    s->n_prompt = (int)ids.n;
    s->prompt = malloc((ids.n + 1) * sizeof *s->prompt);
    if (!s->prompt) {
        rc = ct_errbuf_set(eb, -ENOMEM, "out of memory");
        goto out;
    }
    if (ids.n)
        memcpy(s->prompt, ids.ids, ids.n * sizeof *s->prompt);
    s->L = c->num_soft_tokens + s->n_prompt + cap;
    if (s->L > s->lmcfg.max_pos)
        rc = ct_errbuf_set(eb, CT_ERANGE_VALUE,
                           "--max_text_tokens %d: %d soft tokens + %d prompt tokens + %d are "
                           "over the %d positions of %s",
                           cap, c->num_soft_tokens, s->n_prompt, cap, s->lmcfg.max_pos, lm_name);
out:
    ctrain_lm_ids_free(&ids);
done:
    for (int64_t i = 0; i < s->n_curves; i++)
        free(descs[i]);
    free(descs);
    ctrain_lm_tok_destroy(tok.bpe);
    ctrain_lm_wordtok_destroy(tok.word);
    return rc;
}

static void ctrain_temporal_task__pretrain_log(void *ctx, int step, int steps, float loss)
{
    (void)ctx;
    if (step == 1 || step % 50 == 0 || step == steps)
        printf("# lm: pretraining step %d of %d: loss %.4f\n", step, steps, (double)loss);
    if (step == steps)
        printf("# lm: the random LM learnt the descriptions' language in %d steps (loss %.3f)\n",
               steps, (double)loss);
    fflush(stdout);
}

/* Without --lm_dir: rank 0 initialises the tiny random Qwen2 and pretrains it on the training
 * descriptions (ctrain_temporal_wordlm.h), the other ranks receive its weights through the
 * reducer, and every rank stores them into its frozen LM. Every start of the job does this
 * again with the same draws and the same result, so the LM is not in the checkpoints. */
static int ctrain_temporal_task__word_lm(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    const ctrain_cfg_t *c = t->cfg;
    ctrain_temporal_task__state_t *s = t->task_state;
    const size_t P = (size_t)ctrain_lm_cfg_num_params(&s->lmcfg);
    float *w = calloc(P, sizeof *w);
    if (!w)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for the tiny random LM");
    int rc = 0, rc0 = 0;
    if (t->rank0) {
        const ctrain_temporal_wordlm_texts_t tx = {.ids = s->pre_ids,
                                                   .off = s->pre_off,
                                                   .n = s->n_train,
                                                   .prompt = s->prompt,
                                                   .n_prompt = s->n_prompt,
                                                   .k = c->num_soft_tokens};
        printf("# lm: tiny random Qwen2 (no --lm_dir): vocabulary %d (word-level), width %d, %d "
               "layers, %d heads, %d key/value heads, FFN %d, %lld parameters; seed %llu, %d "
               "pretraining steps\n",
               s->lmcfg.vocab, s->lmcfg.hidden, s->lmcfg.layers, s->lmcfg.heads, s->lmcfg.kv_heads,
               s->lmcfg.inner, (long long)P, (unsigned long long)c->lm_seed, c->lm_pretrain_steps);
        fflush(stdout);
        /* on the CPU table whatever the run's backend: the same LM on either */
        ct_ops_t cpu;
        ct_ops_cpu_init(&cpu);
        rc0 = ctrain_temporal_wordlm_pretrain(&s->lmcfg, &cpu, c->lm_seed, c->lm_pretrain_steps,
                                              &tx, ctrain_temporal_task__pretrain_log, NULL, w, eb);
    }
    if (t->env->world_size > 1) {
        /* rank 0's outcome first, so that every rank fails together */
        int32_t flag = rc0;
        ct_errbuf_t beb;
        if ((rc = ct_reducer_broadcast(t->red, &flag, sizeof flag, 0, &beb)) == 0 && flag == 0)
            rc = ct_reducer_broadcast(t->red, w, P * sizeof *w, 0, &beb);
        if (rc != 0)
            rc = ct_errbuf_set(eb, rc, "broadcasting the tiny random LM: %s", beb.msg);
        else if (flag != 0 && !t->rank0)
            rc = ct_errbuf_set(eb, flag, "rank 0 could not pretrain the tiny random LM");
    }
    if (rc == 0)
        rc = rc0;
    if (rc == 0 && (rc = ctrain_temporal_wordlm_store(s->lm, w)) != 0)
        rc = ct_errbuf_set(eb, rc, "storing the tiny random LM's weights failed");
    free(w);
    return rc;
}

/* The frozen LM (weights only: no gradient buffer); the model builds its rows. */
static int ctrain_temporal_task__open_lm(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    const ctrain_cfg_t *c = t->cfg;
    ctrain_temporal_task__state_t *s = t->task_state;
    const ctrain_lm_opts_t opts = {.recompute = c->grad_checkpointing, .weights_only = true};
    int rc;
    if (c->lm_dir[0] == '\0') {
        if ((rc = ctrain_lm_create_opts(&s->lm, &s->lmcfg, &t->ops, t->micro * s->L, s->L, &opts,
                                        eb)) != 0 ||
            (rc = ctrain_temporal_task__word_lm(t, eb)) != 0)
            return rc;
    } else if ((rc = ctrain_lm_open_opts(&s->lm, c->lm_dir, &t->ops, t->micro * s->L, s->L, &opts,
                                         eb)) != 0) {
        return ct_errbuf_wrap(eb, rc, "--lm_dir");
    }
    s->spec.lm = s->lm;
    return 0;
}

/* --state_dict_path: a file with the projector's tensors loads whole; a stage-1 file (without
 * them) initialises the encoder and leaves the projector as initialised. */
static int ctrain_temporal_task__load(ctrain_trainer_t *t, const char *path, ct_errbuf_t *eb)
{
    ctrain_temporal_task__state_t *s = t->task_state;
    ct_st_file_t *f = NULL;
    int rc = ct_st_open(&f, path, eb);
    if (rc != 0)
        return rc;
    const bool whole = s->spec.stage != 1 || ct_st_find(f, "projector.queries") != NULL;
    ct_st_close(f);
    if (whole)
        return ctrain_model_load_params(t->model, path, eb);
    /* the encoder's parameters come first, in the same order: load them into a stage-1 model
     * and copy that model's buffer over the prefix */
    ctrain_temporal_spec_t sp1 = s->spec;
    sp1.stage = 0;
    ctrain_model_cfg_t mc = t->mcfg;
    mc.ext = &sp1;
    ctrain_model_t *m1 = NULL;
    if ((rc = ctrain_model_create(&m1, &mc, &t->ops, 1, eb)) == 0 &&
        (rc = ctrain_model_load_params(m1, path, eb)) == 0)
        t->ops.copy(&t->ops, t->model->params_mem, m1->params_mem, m1->num_params * sizeof(float),
                    CT_COPY_D2D);
    ctrain_model_destroy(m1);
    return rc;
}

static void ctrain_temporal_task__fill(const void *ctx, ctrain_batch_t *b, int r, int32_t sample,
                                       uint64_t seed, uint64_t key)
{
    const ctrain_temporal_task__state_t *s = ctx;
    const uint64_t epoch = key / (uint64_t)s->n_train;
    int32_t *ids = b->seq + (size_t)r * b->L;
    memset(ids, 0, (size_t)b->L * sizeof *ids);
    ids[0] = sample;
    if (s->spec.stage == 1) { /* nothing masked in stage 2 */
        memset(b->pos + (size_t)r * b->L, 0, (size_t)b->L * sizeof *b->pos);
        return;
    }
    ctrain_temporal_task__draw_mask(b->pos + (size_t)r * b->L, s->n, s->k, seed,
                                    CT_RNG_STREAM(CTRAIN_TEMPORAL_PURPOSE_MASK, epoch), sample);
}

/* ---- set-up ---------------------------------------------------------------------------------- */

static int ctrain_temporal_task__setup(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    const ctrain_cfg_t *c = t->cfg;
    ctrain_temporal_task__state_t *s = calloc(1, sizeof *s);
    if (!s)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    t->task_state = s;
    snprintf(s->path, sizeof s->path, "%s", c->dataset);
    struct stat st;
    s->generated = strcmp(c->dataset, "synthetic") == 0;
    s->csv =
        !s->generated && c->inference_only && stat(c->dataset, &st) == 0 && !S_ISDIR(st.st_mode);
    int rc;
    if (s->generated) {
        snprintf(s->path, sizeof s->path, "generated (data seed %llu)",
                 (unsigned long long)c->data_seed);
        if ((rc = ctrain_temporal_task__generate(s, c, eb)) != 0)
            return rc;
    } else if ((rc = s->csv ? ctrain_temporal_task__read_csv(s, c->dataset, eb)
                            : ctrain_temporal_task__read_cache(s, c->dataset, eb)) != 0) {
        return ct_errbuf_wrap(eb, rc, "--dataset");
    }
    ctrain_temporal_task__normalise(s);
    s->P = c->patch_len;
    if (s->S % s->P != 0 || s->S / s->P > CTRAIN_MODEL_MAX_LEN)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "--patch_len %d: the curves of %s have %d points, not a multiple of "
                             "it (or more than %d patches)",
                             s->P, s->path, s->S, CTRAIN_MODEL_MAX_LEN);
    s->n = s->S / s->P;
    s->k = (int)nearbyint(c->mask_ratio * s->n);
    s->k = s->k < 1 ? 1 : s->k > s->n ? s->n : s->k;
    s->n_val = (int64_t)floor((double)s->n_curves * c->val_fraction);
    s->n_val = s->n_val < 1 ? 1 : s->n_val;
    s->n_train = s->n_curves - s->n_val;
    if (s->csv)
        s->n_val = s->n_curves, s->n_train = 0; /* all embedded, nothing trained */
    else if (s->n_train < 1)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "--val_fraction %g leaves no training curve of the %lld in %s",
                             c->val_fraction, (long long)s->n_curves, s->path);
    s->spec = (ctrain_temporal_spec_t){.patch_len = s->P,
                                       .ff_dim = c->ff_dim,
                                       .weight_decay = c->weight_decay,
                                       .patches = s->patches,
                                       .curves = s->n_curves,
                                       .stage = c->stage};
    if (c->stage == 1 && !s->csv) {
        if ((rc = ctrain_temporal_task__texts(s, c, eb)) != 0)
            return rc;
        s->spec.soft_tokens = c->num_soft_tokens;
        s->spec.lm_hidden = s->lmcfg.hidden;
        s->spec.text = s->text;
        s->spec.text_len = s->text_len;
        s->spec.text_cap = c->max_text_tokens;
        s->spec.prompt = s->prompt;
        s->spec.n_prompt = s->n_prompt;
    } else if (c->stage == 1) {
        return ct_errbuf_set(eb, CT_EPARSE,
                             "--stage align: --dataset %s is a CSV file; embeddings are "
                             "exported in --stage reconstruct",
                             c->dataset);
    }
    t->mcfg = (ctrain_model_cfg_t){.kind = CTRAIN_MODEL_TEMPORAL,
                                   .layout = CTRAIN_LAYOUT_PRE_LN,
                                   .maxlen = s->n,
                                   .hidden = c->hidden_units,
                                   .num_heads = c->num_heads,
                                   .num_blocks = c->num_blocks,
                                   .dropout = (float)c->dropout_rate,
                                   .ext = &s->spec};
    t->n_samples = s->n_train;
    t->samples = malloc(((size_t)t->n_samples + 1) * sizeof *t->samples);
    t->targets = malloc(((size_t)t->n_samples + 1) * sizeof *t->targets);
    if (!t->samples || !t->targets)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    for (int64_t i = 0; i < t->n_samples; i++) {
        t->samples[i] = (int32_t)i;
        /* stage 2 weighs micro-batches by their curves (ctrain_temporal.h) */
        t->targets[i] = c->stage == 1 ? 1 : s->k * s->P;
    }
    return 0;
}

static int ctrain_temporal_task__init(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    const ctrain_cfg_t *c = t->cfg;
    ctrain_temporal_task__state_t *s = t->task_state;
    int rc;
    if ((rc = ctrain_model_init_params(t->model, c->seed)) != 0)
        return ct_errbuf_set(eb, rc, "initialising the model failed");
    if (c->state_dict_path[0] != '\0' &&
        (rc = ctrain_temporal_task__load(t, c->state_dict_path, eb)) != 0)
        return ct_errbuf_wrap(eb, rc, "--state_dict_path");
    if (s->spec.stage == 1 && (rc = ctrain_temporal_task__open_lm(t, eb)) != 0)
        return rc;
    const size_t cells = (size_t)t->micro * (size_t)s->n;
    s->ids = calloc(cells, sizeof *s->ids);
    s->mask = calloc(cells, sizeof *s->mask);
    s->etext = calloc((size_t)t->micro, sizeof *s->etext);
    if (!s->ids || !s->mask || !s->etext)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    return 0;
}

static void ctrain_temporal_task__teardown(ctrain_trainer_t *t)
{
    ctrain_temporal_task__state_t *s = t->task_state;
    if (!s)
        return;
    free(s->patches);
    free(s->ids);
    free(s->mask);
    free(s->etext);
    ctrain_lm_destroy(s->lm);
    free(s->text);
    free(s->text_len);
    free(s->prompt);
    free(s->pre_ids);
    free(s->pre_off);
    free(s);
    t->task_state = NULL;
}

static json_t *ctrain_temporal_task__model_json(const ctrain_trainer_t *t)
{
    const ctrain_temporal_task__state_t *s = t->task_state;
    const ctrain_model_cfg_t *mc = &t->mcfg;
    json_t *o =
        json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "kind", "temporal", "stage",
                  s->spec.stage == 1 ? "align" : "reconstruct", "patch_len", s->P, "patches", s->n,
                  "d_model", mc->hidden, "num_layers", mc->num_blocks, "num_heads", mc->num_heads,
                  "ff_dim", s->spec.ff_dim, "masked_patches", s->k);
    if (o && s->spec.stage == 1) {
        json_object_set_new(o, "soft_tokens", json_integer(s->spec.soft_tokens));
        json_object_set_new(o, "lm_hidden", json_integer(s->spec.lm_hidden));
        json_object_set_new(o, "prompt_tokens", json_integer(s->n_prompt));
        json_object_set_new(o, "max_text_tokens", json_integer(s->spec.text_cap));
        if (t->cfg->lm_dir[0] == '\0') { /* the tiny random LM: its sizes and draws */
            json_object_set_new(o, "lm", ctrain_lm_cfg_to_json(&s->lmcfg));
            json_object_set_new(o, "lm_seed", json_integer((json_int_t)t->cfg->lm_seed));
            json_object_set_new(o, "lm_pretrain_steps", json_integer(t->cfg->lm_pretrain_steps));
        }
    }
    return o;
}

static void ctrain_temporal_task__header(ctrain_trainer_t *t)
{
    const ctrain_cfg_t *c = t->cfg;
    const ctrain_temporal_task__state_t *s = t->task_state;
    if (s->spec.stage == 1)
        printf("# ctrain %s: temporal encoder, stage align: %d soft tokens of width %d and %d "
               "prompt tokens before the description (up to %d tokens) into the frozen %s\n",
               CT_VERSION, s->spec.soft_tokens, s->spec.lm_hidden, s->n_prompt, s->spec.text_cap,
               c->lm_dir[0] ? c->lm_dir : "tiny random Qwen2 (no --lm_dir)");
    printf("# ctrain %s: temporal encoder, stage %s: %d patches of %d points, d_model %d, "
           "%d layers, %d heads, feed-forward %d, dropout %g; %zu parameters; AdamW weight decay "
           "%g\n",
           CT_VERSION, s->spec.stage == 1 ? "align" : "reconstruct", s->n, s->P, c->hidden_units,
           c->num_blocks, c->num_heads, c->ff_dim, c->dropout_rate, t->model->num_params,
           c->weight_decay);
    if (s->spec.stage == 1)
        printf("# data: %s: %lld curves of %d points and their descriptions; %lld train, %lld "
               "validation (the last); nothing masked\n",
               s->path, (long long)s->n_curves, s->S, (long long)s->n_train, (long long)s->n_val);
    else
        printf("# data: %s: %lld curves of %d points; %lld train, %lld validation (the last); %d "
               "of %d patches masked per curve\n",
               s->path, (long long)s->n_curves, s->S, (long long)s->n_train, (long long)s->n_val,
               s->k, s->n);
    ctrain_out_training_line(t, "curves");
    if (s->spec.stage == 1)
        printf("# evaluation every %d epoch%s: the validation descriptions' token cross-entropy "
               "after their own curves (val_loss) and after another's (shuffled_val_loss, the "
               "reference column); best checkpoint = lowest val_loss\n",
               c->eval_every, c->eval_every == 1 ? "" : "s");
    else
        printf("# evaluation every %d epoch%s: mean squared error over the masked patches of the "
               "validation curves (val_loss) and the mean-of-visible-patches predictor's "
               "(baseline_val_loss, the reference column); best checkpoint = lowest val_loss\n",
               c->eval_every, c->eval_every == 1 ? "" : "s");
    fflush(stdout);
}

static json_t *ctrain_temporal_task__ckpt_json(const ctrain_trainer_t *t)
{
    const ctrain_temporal_task__state_t *s = t->task_state;
    return json_pack("{s:o, s:{s:s, s:I, s:i}}", "model", ctrain_temporal_task__model_json(t),
                     "data", "source", s->path, "curves", (json_int_t)s->n_curves, "length", s->S);
}

static int ctrain_temporal_task__check_ckpt(const ctrain_trainer_t *t, const json_t *o,
                                            const char *name, ct_errbuf_t *eb)
{
    const ctrain_temporal_task__state_t *s = t->task_state;
    json_t *model = json_object_get(o, "model"), *data = json_object_get(o, "data");
    json_t *mine = ctrain_temporal_task__model_json(t);
    int rc = 0;
    if (!json_is_object(model) || !json_is_object(data)) {
        rc = ct_errbuf_set(eb, CT_EFORMAT,
                           "refusing to resume from %s/%s: it is not a ctrain training "
                           "checkpoint (no usable configuration)",
                           t->ckpt.path, name);
    } else if (!json_equal(model, mine)) {
        char *a = json_dumps(model, JSON_COMPACT), *b = json_dumps(mine, JSON_COMPACT);
        rc = ct_errbuf_set(eb, CT_EMISMATCH,
                           "refusing to resume from %s/%s: its model configuration differs from "
                           "this run's (%.300s vs %.300s); use another --train_dir or --resume "
                           "never",
                           t->ckpt.path, name, a ? a : "?", b ? b : "?");
        free(a);
        free(b);
    } else {
        json_t *curves = json_object_get(data, "curves"), *len = json_object_get(data, "length");
        if (!json_is_integer(curves) || !json_is_integer(len) ||
            json_integer_value(curves) != s->n_curves || json_integer_value(len) != s->S)
            rc = ct_errbuf_set(eb, CT_EMISMATCH,
                               "refusing to resume from %s/%s: it was trained on other data "
                               "(this run: %lld curves of %d points)",
                               t->ckpt.path, name, (long long)s->n_curves, s->S);
    }
    json_decref(mine);
    return rc;
}

static int ctrain_temporal_task__start(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    const ctrain_cfg_t *c = t->cfg;
    const ctrain_temporal_task__state_t *s = t->task_state;
    return ctrain_loader_init(&t->loader, ctrain_temporal_task__fill, s, t->samples, t->targets,
                              &t->shard, t->micro, s->n, false, 0, c->seed, t->step, t->total_steps,
                              c->num_workers > 0, eb);
}

/* ---- evaluation ------------------------------------------------------------------------------ */

/* The squared error of the mean-of-visible-patches predictor over curve i's masked points. */
static double ctrain_temporal_task__baseline(const ctrain_temporal_task__state_t *s, const float *x,
                                             const int32_t *mask)
{
    double mean[4096], sum = 0.0;
    const int P = s->P;
    int visible = 0;
    for (int e = 0; e < P && e < 4096; e++)
        mean[e] = 0.0;
    for (int j = 0; j < s->n; j++)
        if (!mask[j]) {
            visible++;
            for (int e = 0; e < P; e++)
                mean[e] += x[(size_t)j * P + e];
        }
    for (int e = 0; e < P; e++)
        mean[e] = visible ? mean[e] / visible : 0.0;
    for (int j = 0; j < s->n; j++)
        if (mask[j])
            for (int e = 0; e < P; e++) {
                const double d = (double)x[(size_t)j * P + e] - mean[e];
                sum += d * d;
            }
    return sum;
}

/* --stage align: val_loss (the validation descriptions' token cross-entropy, each after its own
 * curve) and shuffled_val_loss (validation curve i's description after curve
 * n_train + (i - n_train + 1) mod n_val: a cyclic shift by one, a derangement when there are
 * two or more validation curves), every rank the same numbers. */
static int ctrain_temporal_task__eval_align(ctrain_trainer_t *t, ctrain_temporal_result_t *r,
                                            ct_errbuf_t *eb)
{
    ctrain_temporal_task__state_t *s = t->task_state;
    const int W = t->env->world_size, R = t->env->rank;
    const int64_t lo = s->n_train + s->n_val * R / W, hi = s->n_train + s->n_val * (R + 1) / W;
    double sums[4] = {0.0, 0.0, 0.0, 0.0}; /* real sum, tokens, shuffled sum, tokens */
    int rc;
    for (int pass = 0; pass < 2; pass++)
        for (int64_t i = lo; i < hi; i += t->micro) {
            const int B = (int)(hi - i < t->micro ? hi - i : t->micro);
            for (int b = 0; b < B; b++) {
                const int64_t j = i + b;
                s->ids[b] = (int32_t)j;
                s->etext[b] =
                    (int32_t)(pass == 0 ? j : s->n_train + (j - s->n_train + 1) % s->n_val);
            }
            double part = 0.0;
            int64_t tokens = 0;
            if ((rc = ctrain_temporal_align_eval(t->model, s->ids, s->etext, B, &part, &tokens,
                                                 eb)) != 0)
                return ct_errbuf_wrap(eb, rc, "evaluating %s", s->path);
            sums[2 * pass] += part;
            sums[2 * pass + 1] += (double)tokens;
            ct_worker_progress((uint64_t)t->step);
        }
    double total[4] = {0.0, 0.0, 0.0, 0.0};
    for (int root = 0; root < W; root++) {
        double v[4] = {sums[0], sums[1], sums[2], sums[3]};
        ct_errbuf_t beb;
        if (W > 1 && (rc = ct_reducer_broadcast(t->red, v, sizeof v, root, &beb)) != 0)
            return ct_errbuf_set(eb, rc, "evaluation: gathering the losses: %s", beb.msg);
        for (int q = 0; q < 4; q++)
            total[q] += v[q];
    }
    r->curves = s->n_val;
    r->val_loss = total[0] / (total[1] > 0 ? total[1] : 1);
    r->shuffled_val_loss = total[2] / (total[3] > 0 ? total[3] : 1);
    r->baseline_val_loss = NAN;
    return 0;
}

/* val_loss and baseline_val_loss over all ranks (every rank gets the same numbers). */
static int ctrain_temporal_task__eval_val(ctrain_trainer_t *t, ctrain_temporal_result_t *r,
                                          ct_errbuf_t *eb)
{
    ctrain_temporal_task__state_t *s = t->task_state;
    if (s->spec.stage == 1)
        return ctrain_temporal_task__eval_align(t, r, eb);
    const int W = t->env->world_size, R = t->env->rank, n = s->n;
    const int64_t lo = s->n_train + s->n_val * R / W, hi = s->n_train + s->n_val * (R + 1) / W;
    const uint64_t stream = CT_RNG_STREAM(CTRAIN_TEMPORAL_PURPOSE_EVAL_MASK, 0);
    double sums[2] = {0.0, 0.0};
    int rc;
    for (int64_t i = lo; i < hi; i += t->micro) {
        const int B = (int)(hi - i < t->micro ? hi - i : t->micro);
        for (int b = 0; b < B; b++) {
            int32_t *mk = s->mask + (size_t)b * n;
            s->ids[(size_t)b * n] = (int32_t)(i + b);
            ctrain_temporal_task__draw_mask(mk, n, s->k, t->cfg->seed, stream, i + b);
            sums[1] += ctrain_temporal_task__baseline(s, s->patches + (size_t)(i + b) * s->S, mk);
        }
        double part = 0.0;
        if ((rc = ctrain_temporal_eval(t->model, s->ids, s->mask, B, &part, eb)) != 0)
            return ct_errbuf_wrap(eb, rc, "evaluating %s", s->path);
        sums[0] += part;
        ct_worker_progress((uint64_t)t->step);
    }
    double total[2] = {0.0, 0.0};
    for (int root = 0; root < W; root++) {
        double v[2] = {sums[0], sums[1]};
        ct_errbuf_t beb;
        if (W > 1 && (rc = ct_reducer_broadcast(t->red, v, sizeof v, root, &beb)) != 0)
            return ct_errbuf_set(eb, rc, "evaluation: gathering the errors: %s", beb.msg);
        total[0] += v[0];
        total[1] += v[1];
    }
    const double points = (double)s->n_val * s->k * s->P;
    r->curves = s->n_val;
    r->val_loss = total[0] / points;
    r->baseline_val_loss = total[1] / points;
    r->shuffled_val_loss = NAN;
    return 0;
}

static int ctrain_temporal_task__evaluate(ctrain_trainer_t *t, int64_t epoch, ctrain_result_t *r,
                                          ct_errbuf_t *eb)
{
    int rc = ctrain_temporal_task__eval_val(t, &r->temporal, eb);
    if (rc != 0 || isfinite(r->temporal.val_loss))
        return rc;
    return ctrain_train_eval_nonfinite(t, epoch, "loss", eb);
}

static double ctrain_temporal_task__select(const ctrain_cfg_t *c, const ctrain_result_t *r)
{
    (void)c;
    return -r->temporal.val_loss;
}

static const char *ctrain_temporal_task__selected_on(const ctrain_cfg_t *c)
{
    (void)c;
    return "valid.val_loss (lowest)";
}

static json_t *ctrain_temporal_task__result_json(const ctrain_result_t *r)
{
    const ctrain_temporal_result_t *v = &r->temporal;
    json_t *o = json_pack("{s:{s:o, s:o, s:I}}", "valid", "val_loss", ctrain_out_num(v->val_loss),
                          "baseline_val_loss", ctrain_out_num(v->baseline_val_loss), "curves",
                          (json_int_t)v->curves);
    if (o && !isnan(v->shuffled_val_loss))
        json_object_set_new(json_object_get(o, "valid"), "shuffled_val_loss",
                            ctrain_out_num(v->shuffled_val_loss));
    return o;
}

static int ctrain_temporal_task__result_from_json(const json_t *o, ctrain_result_t *r)
{
    json_t *v = json_object_get(o, "valid");
    if (!json_is_object(v))
        return -1;
    json_t *loss = json_object_get(v, "val_loss"), *base = json_object_get(v, "baseline_val_loss"),
           *curves = json_object_get(v, "curves"), *shuf = json_object_get(v, "shuffled_val_loss");
    if (!json_is_integer(curves) || !(json_is_number(loss) || json_is_null(loss)) ||
        !(json_is_number(base) || json_is_null(base)))
        return -1;
    r->temporal.val_loss = json_is_null(loss) ? NAN : json_number_value(loss);
    r->temporal.baseline_val_loss = json_is_number(base) ? json_number_value(base) : NAN;
    r->temporal.shuffled_val_loss = json_is_number(shuf) ? json_number_value(shuf) : NAN;
    r->temporal.curves = json_integer_value(curves);
    return 0;
}

static void ctrain_temporal_task__row_out(int64_t epoch, int64_t step, double loss, double rate,
                                          const ctrain_result_t *r)
{
    if (r == NULL) {
        printf("#  epoch      step train_loss   points/s   val_loss  reference\n");
        fflush(stdout);
        return;
    }
    printf("%8lld %9lld", (long long)epoch, (long long)step);
    if (isfinite(loss))
        printf(" %10.6f", loss);
    else
        printf(" %10s", "-");
    printf(" %10.1f", rate);
    if (isfinite(r->temporal.val_loss))
        printf(" %10.6f", r->temporal.val_loss);
    else
        printf(" %10s", "-");
    printf(" %10.6f\n", isnan(r->temporal.baseline_val_loss) ? r->temporal.shuffled_val_loss
                                                             : r->temporal.baseline_val_loss);
    fflush(stdout);
}

static size_t ctrain_temporal_task__scalars(const ctrain_result_t *r, ctrain_scalar_t *sc)
{
    sc[0] = (ctrain_scalar_t){"valid/val_loss", r->temporal.val_loss};
    if (isnan(r->temporal.baseline_val_loss)) {
        sc[1] = (ctrain_scalar_t){"valid/shuffled_val_loss", r->temporal.shuffled_val_loss};
        return 2;
    }
    sc[1] = (ctrain_scalar_t){"valid/baseline_val_loss", r->temporal.baseline_val_loss};
    return 2;
}

static void ctrain_temporal_task__summary(ctrain_trainer_t *t, json_t *o)
{
    if (!t->has_last)
        return;
    json_object_set_new(o, "val_loss", ctrain_out_num(t->last.temporal.val_loss));
    if (isnan(t->last.temporal.baseline_val_loss))
        json_object_set_new(o, "shuffled_val_loss",
                            ctrain_out_num(t->last.temporal.shuffled_val_loss));
    else
        json_object_set_new(o, "baseline_val_loss",
                            ctrain_out_num(t->last.temporal.baseline_val_loss));
}

static const char *ctrain_temporal_task__log_stage(const ctrain_trainer_t *t)
{
    return t->cfg->stage == 1 ? "align" : "reconstruct";
}

static int ctrain_temporal_task__finish(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    (void)t, (void)eb;
    return 0; /* nothing to export after stage 1: the checkpoints hold the encoder */
}

/* ---- --inference_only ------------------------------------------------------------------------ */

/* dir/name <- a float32 (rows, cols) .npy file, atomically (temporary file, fsync, rename). */
static int ctrain_temporal_task__write_npy(const char *dir, const char *name, const float *x,
                                           int64_t rows, int cols, ct_errbuf_t *eb)
{
    char path[CTRAIN_TRAIN_PATH_MAX + 32], tmp[CTRAIN_TRAIN_PATH_MAX + 40];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    char hdr[128];
    int h = snprintf(hdr, sizeof hdr,
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, "
                     "%d), }",
                     (long long)rows, cols);
    const int total = (10 + h + 1 + 63) / 64 * 64; /* magic, version, length, header, '\n' */
    while (10 + h + 1 < total)
        hdr[h++] = ' ';
    hdr[h++] = '\n';
    unsigned char pre[10] = {
        0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(h & 0xff), (unsigned char)(h >> 8)};
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return ct_errbuf_set(eb, -errno, "%s: %s", dir, strerror(errno));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return ct_errbuf_set(eb, -errno, "%s: %s", tmp, strerror(errno));
    const size_t bytes = (size_t)rows * (size_t)cols * sizeof *x;
    int rc = ct_fs_write_full(fd, pre, sizeof pre, 0);
    if (rc == 0)
        rc = ct_fs_write_full(fd, hdr, (size_t)h, (off_t)sizeof pre);
    if (rc == 0)
        rc = ct_fs_write_full(fd, x, bytes, (off_t)(sizeof pre + (size_t)h));
    if (rc == 0 && fsync(fd) != 0)
        rc = -errno;
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -errno;
    if (rc != 0) {
        unlink(tmp);
        return ct_errbuf_set(eb, rc, "%s: %s", path, ct_strerror(rc));
    }
    return 0;
}

/* The embeddings of every curve of the CSV file into --train_dir/embeddings.npy (rank 0). */
static int ctrain_temporal_task__export(ctrain_trainer_t *t, ct_errbuf_t *eb)
{
    ctrain_temporal_task__state_t *s = t->task_state;
    const int C = t->mcfg.hidden, n = s->n;
    float *emb = malloc((size_t)s->n_curves * (size_t)C * sizeof *emb);
    if (!emb)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for %lld embeddings",
                             (long long)s->n_curves);
    memset(s->mask, 0, (size_t)t->micro * (size_t)n * sizeof *s->mask);
    int rc = 0;
    for (int64_t i = 0; i < s->n_curves && rc == 0; i += t->micro) {
        const int B = (int)(s->n_curves - i < t->micro ? s->n_curves - i : t->micro);
        for (int b = 0; b < B; b++)
            s->ids[(size_t)b * n] = (int32_t)(i + b);
        rc = ctrain_temporal_embed(t->model, s->ids, s->mask, B, emb + (size_t)i * C, eb);
    }
    if (rc == 0)
        rc = ctrain_temporal_task__write_npy(t->cfg->train_dir, "embeddings.npy", emb, s->n_curves,
                                             C, eb);
    free(emb);
    return rc;
}

static int ctrain_temporal_task__infer(const ctrain_cfg_t *cfg, const ct_worker_env_t *env,
                                       ct_reducer_t *red, ct_errbuf_t *eb)
{
    int64_t t0 = ct_time_ns();
    ctrain_trainer_t *t = calloc(1, sizeof *t);
    if (!t)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    t->cfg = cfg;
    t->task = &ctrain_temporal_task;
    t->env = env;
    t->red = red;
    t->rank0 = env->rank == 0;
    t->micro = ctrain_train_eval_chunk(cfg, env->world_size);
    ctrain_result_t r;
    memset(&r, 0, sizeof r);
    int rc = ctrain_temporal_task__setup(t, eb);
    if (rc == 0)
        rc = ctrain_train_backend(cfg, env, &t->ops, eb);
    if (rc == 0)
        rc = ctrain_model_create(&t->model, &t->mcfg, &t->ops, t->micro, eb);
    if (rc == 0)
        rc = ctrain_temporal_task__init(t, eb);
    const ctrain_temporal_task__state_t *s = t->task_state;
    const bool csv = s != NULL && s->csv;
    if (rc == 0 && csv) {
        if (t->rank0 && (rc = ctrain_temporal_task__export(t, eb)) == 0) {
            char out[CTRAIN_TRAIN_PATH_MAX + 32];
            snprintf(out, sizeof out, "%s/embeddings.npy", cfg->train_dir);
            json_t *o =
                json_pack("{s:s, s:I, s:i, s:s, s:f}", "inference", cfg->state_dict_path,
                          "embedded", (json_int_t)s->n_curves, "dim", t->mcfg.hidden, "embeddings",
                          out, "wall_seconds", (double)(ct_time_ns() - t0) / 1e9);
            ctrain_out_print_summary(o, JSON_COMPACT);
        }
    } else if (rc == 0) {
        rc = ctrain_temporal_task__eval_val(t, &r.temporal, eb);
    }
    if (rc == 0 && t->rank0 && !csv) {
        json_t *o = json_object();
        json_object_set_new(o, "inference", json_string(cfg->state_dict_path));
        json_object_set_new(o, "model", ctrain_temporal_task__model_json(t));
        json_object_set_new(o, "val_loss", ctrain_out_num(r.temporal.val_loss));
        if (isnan(r.temporal.baseline_val_loss))
            json_object_set_new(o, "shuffled_val_loss",
                                ctrain_out_num(r.temporal.shuffled_val_loss));
        else
            json_object_set_new(o, "baseline_val_loss",
                                ctrain_out_num(r.temporal.baseline_val_loss));
        json_object_set_new(o, "curves", json_integer((json_int_t)r.temporal.curves));
        json_object_set_new(o, "wall_seconds", json_real((double)(ct_time_ns() - t0) / 1e9));
        ctrain_out_print_summary(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
    }
    ctrain_temporal_task__teardown(t);
    ctrain_model_destroy(t->model);
    ct_ops_close(&t->ops);
    free(t->samples);
    free(t->targets);
    free(t);
    return rc;
}

const ctrain_task_t ctrain_temporal_task = {
    .setup = ctrain_temporal_task__setup,
    .init = ctrain_temporal_task__init,
    .teardown = ctrain_temporal_task__teardown,
    .header = ctrain_temporal_task__header,
    .ckpt_json = ctrain_temporal_task__ckpt_json,
    .check_ckpt = ctrain_temporal_task__check_ckpt,
    .start = ctrain_temporal_task__start,
    .evaluate = ctrain_temporal_task__evaluate,
    .select = ctrain_temporal_task__select,
    .selected_on = ctrain_temporal_task__selected_on,
    .result_json = ctrain_temporal_task__result_json,
    .result_from_json = ctrain_temporal_task__result_from_json,
    .row = ctrain_temporal_task__row_out,
    .scalars = ctrain_temporal_task__scalars,
    .summary = ctrain_temporal_task__summary,
    .finish = ctrain_temporal_task__finish,
    .infer = ctrain_temporal_task__infer,
    .epoch_names = true,
    .log_stage = ctrain_temporal_task__log_stage,
};
