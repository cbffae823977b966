/*
 * ctrain_data.h - interaction datasets for ctrain: loading, filtering, re-indexing, the
 * leave-one-out split, TiSASRec's time scaling, and the synthetic dataset.
 *
 * A dataset is a set of users, each with a chronological list of item ids (and, when the
 * source has them, timestamps), stored as one CSR structure: user u's interactions are
 * [user_start[u], user_start[u+1]) in items/times. Users are 1..num_users and items
 * 1..num_items; id 0 is padding and never an item. The split follows docs/models.md §1.3:
 * for a user with n >= min_eval_len interactions, valid = S[n-2], test = S[n-1] and train =
 * S[0..n-3]; shorter users keep everything in train and are not evaluated.
 *
 * Sources (docs/models.md §1):
 *   CTRAIN_DATA_SASREC  "user item" per line, ids already 1-based and re-indexed (SASRec's
 *                   ml-1m.txt, Video.txt); file order is chronological; no filtering.
 *   CTRAIN_DATA_TSV     "user\titem\trating\ttimestamp" or "user\titem\ttimestamp" (TiSASRec,
 *                   MovieLens-100k u.data); one counting pass drops rows whose user or item
 *                   has fewer than min_count rows; ids re-indexed in ascending original order;
 *                   each user's rows stably sorted by timestamp.
 *   CTRAIN_DATA_ML1M    MovieLens-1M ratings.dat, "user::item::rating::timestamp"; same rules.
 * A malformed line is an error naming file:line; nothing is skipped silently. Files are
 * streamed: the first bad line ends the load before the rest is read, and only the parsed
 * interactions are kept, never the file's text.
 *
 * Not here: batching and negative sampling (ctrain_batch.h), models, evaluation.
 */
#ifndef CTRAIN_DATA_H
#define CTRAIN_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ctrain_data_format {
    CTRAIN_DATA_AUTO = 0, /* decide from the first line: "::" -> ML1M, tabs -> TSV, else SASREC */
    CTRAIN_DATA_SASREC,
    CTRAIN_DATA_TSV,
    CTRAIN_DATA_ML1M,
} ctrain_data_format_t;

typedef struct ctrain_data_opts {
    int min_count;    /* TSV/ML1M: drop rows whose user or item has fewer rows (default 5) */
    int min_eval_len; /* users with fewer interactions are not split (default 3) */
} ctrain_data_opts_t;

#define CTRAIN_DATA_OPTS_DEFAULT {.min_count = 5, .min_eval_len = 3}

typedef struct ctrain_dataset {
    int32_t num_users; /* user ids 1..num_users (some may have no interactions) */
    int32_t num_items; /* item ids 1..num_items */
    int64_t num_interactions;
    int64_t
        *user_start; /* (num_users + 2) CSR offsets; user u is [user_start[u], user_start[u+1]) */
    int32_t *items;      /* (num_interactions) chronological within each user */
    int64_t *times;      /* (num_interactions) source timestamps (seconds), NULL without time */
    int64_t *time_scaled; /* (num_interactions) TiSASRec's per-user scaled time t' >= 1, or NULL */

    /* Leave-one-out split. */
    int32_t *train_len;  /* (num_users + 1) interactions of u used for training (a prefix) */
    int32_t *valid_item; /* (num_users + 1) S[n-2], or 0 when u is not evaluated */
    int32_t *test_item;  /* (num_users + 1) S[n-1], or 0 */
    int32_t num_eval_users;

    /* Each user's train items sorted ascending (same CSR offsets as user_start; only the first
     * train_len[u] entries of u's range are used), for membership tests. */
    int32_t *train_sorted;

    char source[256]; /* file path or "synthetic(...)" for messages */
} ctrain_dataset_t;

/* Loads path in the given format into ds (which the caller provides; ctrain_data_free releases
 * what this allocates). On failure nothing stays allocated and eb names file:line. */
int ctrain_data_load(ctrain_dataset_t *ds, const char *path, ctrain_data_format_t format,
                 const ctrain_data_opts_t *opts, ct_errbuf_t *eb);

/* For a dataset whose CSR arrays (user_start, items, and times or NULL) were filled in code:
 * computes time_scaled (when times exist) and the split. Returns 0 or -ENOMEM. */
int ctrain_data_finish(ctrain_dataset_t *ds, int min_eval_len);

/* Parses a format name: auto, sasrec, tsv, ml1m. */
int ctrain_data_parse_format(const char *text, ctrain_data_format_t *out, ct_errbuf_t *eb);

/* Frees everything; safe on a zeroed or already freed dataset. */
void ctrain_data_free(ctrain_dataset_t *ds);

/* True when item is among user u's training items (binary search). */
bool ctrain_data_in_train(const ctrain_dataset_t *ds, int32_t u, int32_t item);

/* Training interactions of user u: ds->items + ds->user_start[u], ds->train_len[u] long. */
static inline const int32_t *ctrain_data_user_items(const ctrain_dataset_t *ds, int32_t u)
{
    return ds->items + ds->user_start[u];
}

/* Mean training-sequence length over users with any training interactions (what SASRec's code
 * prints as "average sequence length"). */
double ctrain_data_mean_train_len(const ctrain_dataset_t *ds);

/* ---- synthetic data --------------------------------------------------------------------- */

typedef struct ctrain_synth_opts {
    int32_t num_users;  /* default 1000 */
    int32_t num_items;  /* default 500 */
    int32_t mean_len;   /* mean interactions per user (default 40; at least 5 each) */
    double noise;       /* probability that a step is a popularity draw instead of the rule */
    uint64_t seed;      /* default 1 */
} ctrain_synth_opts_t;

#define CTRAIN_SYNTH_OPTS_DEFAULT                                                     \
    {                                                                                 \
        .num_users = 1000, .num_items = 500, .mean_len = 40, .noise = 0.15, .seed = 1 \
    }

/* Generates the synthetic dataset (with timestamps) and splits it like a loaded one. The
 * structure (see ctrain_synth.c): every item has a successor in a hidden cycle over all items; a
 * user's next item is the successor of the last one after a short gap and the successor's
 * successor after a long gap, except for popularity-skewed noise. A sequence model learns the
 * cycle quickly (far above popularity), and a model that sees time intervals can also tell
 * which of the two steps comes next. Deterministic in (opts). */
int ctrain_data_synthetic(ctrain_dataset_t *ds, const ctrain_synth_opts_t *opts, ct_errbuf_t *eb);

/* Parses "synthetic" or "synthetic:users=N,items=N,len=N,noise=X,seed=N" into opts. */
int ctrain_synth_parse(const char *text, ctrain_synth_opts_t *opts, ct_errbuf_t *eb);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_DATA_H */
