/*
 * ctrain_gpt2rec.h - the GPT-2 recommender (--model gpt2rec, examples/pytorch/gpt2rec_ddp.py's
 * model): its data and its model family.
 *
 * Data: MovieLens-style ratings (ml-1m's "user::item::rating::time", ml-100k's tab-separated
 * "user item rating time", or "user item [...]" lines, which take their line number as time);
 * every rating is an interaction. Users and items are numbered 0.. in the order of their raw ids
 * (the reference's np.unique); the rated items are the catalogue. Each user's interactions, in
 * time order (file order among equal times), are cut into training, validation and test by the
 * split fractions: n_train = max(1, round(n * f0)), n_valid = min(round(n * f1), n - n_train),
 * the rest test (Python's round: halves to even). Item texts (--item_text): ml-100k's u.item
 * ("title | genre|genre"), ml-1m's movies.dat ("title | genres") or "id<TAB>text" lines, read as
 * Latin-1 (turned into UTF-8); an item without text gets "item <raw id>", as the reference does.
 *
 * Model: score(u, i) = <user_u, item_i + proj(text_i)>, with user.weight (U, D), item.weight
 * (I, D) and, with a text side, proj.weight (D, T) and proj.bias (D) - the reference's state_dict
 * names and shapes. text_i is the mean over the item's tokens of the language model's final
 * hidden states, computed once (cached mode) and handed to the model with
 * ctrain_gpt2rec_set_text; in dynamic mode the LM is part of the model: each micro-batch runs it
 * on the texts of the batch's distinct items (forward, then forward and backward from the
 * gradient of the pooled states), and evaluation runs it on every item. Without a text side
 * the model is matrix factorisation.
 *
 * A micro-batch (ctrain_model_batch_t, L = 1) holds one interaction per row: seq = the user, pos =
 * the positive item, neg = the sampled negative. The loss is BPR, -log sigmoid(s+ - s-), summed
 * and divided by the step's count, plus the reference's penalty l2 * (|u|^2 + |v+|^2 + |v-|^2) /
 * count whose gradient is added but whose value is not part of the reported loss (the reference
 * logs the BPR term alone).
 *
 * Not here: the task (ctrain_gpt2rec_task.c: batches, evaluation, the text cache), the LM.
 */
#ifndef CTRAIN_GPT2REC_H
#define CTRAIN_GPT2REC_H

#include <stdbool.h>
#include <stdint.h>

#include "ctrain_lm.h"
#include "ctrain_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ctrain_gpt2rec_data {
    char source[4096];
    int32_t n_users, n_items;
    int64_t *raw_user, *raw_item; /* (n_users), (n_items) raw ids, ascending */
    int64_t n_inter, n_train, n_valid, n_test;
    int32_t *tr_u, *tr_i; /* (n_train) the training interactions, in file order */
    /* per user, sorted: training items (with repeats), validation and test targets (unique) */
    int64_t *tr_off, *va_off, *te_off; /* (n_users + 1) */
    int32_t *tr_items, *va_items, *te_items;
    int64_t *train_count; /* (n_items) training interactions of each item */
    /* item texts (UTF-8), item j's at text + text_off[j], text_len[j] bytes; NULL without */
    char *text;
    int64_t *text_off;
    int32_t *text_len;
    int64_t missing_text; /* items that got "item <id>" */
} ctrain_gpt2rec_data_t;

/* Reads ratings (and texts when text_path is not NULL) and splits them. Bad rows: one line
 * naming the file and line; CT_EFORMAT, CT_EPARSE or a negated errno. */
int ctrain_gpt2rec_data_load(ctrain_gpt2rec_data_t *d, const char *ratings, const char *text_path,
                             const double fractions[3], ct_errbuf_t *eb);
void ctrain_gpt2rec_data_free(ctrain_gpt2rec_data_t *d);

/* "a,b,c": three fractions >= 0, a > 0, summing to 1 (1e-6). */
int ctrain_gpt2rec_split_parse(const char *text, double fractions[3], ct_errbuf_t *eb);

/* Whether item i is among user u's training items. */
bool ctrain_gpt2rec_in_train(const ctrain_gpt2rec_data_t *d, int32_t u, int32_t i);

/* The negative of training interaction `key` (its global index: epoch * samples + position) of
 * user u: uniform over the items, drawn again (up to 5 more times, as the reference) while it is
 * one of u's training items. Keyed by (seed, key): the same on any rank and after a resume. */
int32_t ctrain_gpt2rec_negative(const ctrain_gpt2rec_data_t *d, int32_t u, uint64_t seed,
                                uint64_t key);

/* What ctrain_model_cfg_t.ext points at for the gpt2rec family. */
typedef struct ctrain_gpt2rec_spec {
    int32_t n_users, n_items;
    int dim;      /* D, --embed_dim */
    int text_dim; /* T, the LM's width; 0: ID embeddings only */
    float l2;     /* the penalty's lambda (--l2_emb) */
    /* Dynamic mode (the LM fine-tuned with the recommender): the LM's configuration, or NULL
     * (cached mode, or no text side). Its tensors join the parameter table as "gpt2.<name>"
     * (the backbone prefix dropped: the reference's GPT2Model under model.gpt2) and are stepped
     * with lr * lm_lr_ratio. */
    const ctrain_lm_cfg_t *lm;
    double lm_lr_ratio;
    int text_len;           /* L: columns of tokens */
    const int32_t *tokens;  /* (n_items, L) each item's token ids, right-padded with 0 */
    const int32_t *tok_len; /* (n_items) tokens of each item, 1..L */
} ctrain_gpt2rec_spec_t;

/* Dynamic mode: the LM with its buffers bound to m's (valid until m is destroyed), for loading
 * its weights; NULL in the other modes. */
ctrain_lm_t *ctrain_gpt2rec_lm(ctrain_model_t *m);

/* The text embeddings (n_items, T), host memory, copied into the model. */
int ctrain_gpt2rec_set_text(ctrain_model_t *m, const float *text);

/* Every item's vector item_i + proj(text_i) into out (n_items, D), host memory (dynamic mode:
 * the LM embeds every item's text first). */
int ctrain_gpt2rec_item_vectors(ctrain_model_t *m, float *out);

/* The user table (n_users, D), host memory (valid until the next step; a copy off a device,
 * NULL when that copy failed). */
const float *ctrain_gpt2rec_user_table(ctrain_model_t *m);

/* Initialises user.weight and item.weight N(0, 0.1^2) (the reference's nn.init.normal_) and
 * proj as PyTorch's nn.Linear (U(+-1/sqrt(T)) for weight and bias), from Philox keyed by seed. */
int ctrain_gpt2rec_init(ctrain_model_t *m, uint64_t seed);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_GPT2REC_H */
