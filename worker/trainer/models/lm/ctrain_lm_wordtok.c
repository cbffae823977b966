/*
 * ctrain_lm_wordtok.c - the word-level tokenizer (ctrain_lm_wordtok.h): the Whitespace
 * pre-tokenizer's split, the set of distinct words (an open-addressing hash table over the
 * words in the order first seen) and their ids by sorted rank, computed again after additions.
 *
 * Not here: the Unicode classes (ctrain_lm_unicode.c through ctrain_lm_tok.h), BPE.
 */
#include "ctrain_lm_wordtok.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct ctrain_lm_wordtok__word {
    char *s;
    size_t n;
} ctrain_lm_wordtok__word_t;

struct ctrain_lm_wordtok {
    ctrain_lm_wordtok__word_t *words; /* in the order first seen */
    size_t n_words, cap_words;
    int32_t *slots; /* (n_slots) index into words, -1 empty; n_slots a power of two */
    size_t n_slots;
    int32_t *rank; /* (n_words) sorted position, valid when ranked */
    bool ranked;
};

static uint64_t ctrain_lm_wordtok__hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* The slot of s[0..n): the word's, or the empty one where it would go. */
static size_t ctrain_lm_wordtok__slot(const ctrain_lm_wordtok_t *t, const char *s, size_t n)
{
    size_t i = (size_t)ctrain_lm_wordtok__hash(s, n) & (t->n_slots - 1);
    for (;;) {
        const int32_t w = t->slots[i];
        if (w < 0 || (t->words[w].n == n && memcmp(t->words[w].s, s, n) == 0))
            return i;
        i = (i + 1) & (t->n_slots - 1);
    }
}

static int ctrain_lm_wordtok__grow(ctrain_lm_wordtok_t *t)
{
    const size_t n_slots = t->n_slots * 2;
    int32_t *slots = malloc(n_slots * sizeof *slots);
    if (!slots)
        return -ENOMEM;
    for (size_t i = 0; i < n_slots; i++)
        slots[i] = -1;
    free(t->slots);
    t->slots = slots;
    t->n_slots = n_slots;
    for (size_t w = 0; w < t->n_words; w++)
        t->slots[ctrain_lm_wordtok__slot(t, t->words[w].s, t->words[w].n)] = (int32_t)w;
    return 0;
}

int ctrain_lm_wordtok_create(ctrain_lm_wordtok_t **out, ct_errbuf_t *eb)
{
    ctrain_lm_wordtok_t *t = calloc(1, sizeof *t);
    if (t) {
        t->n_slots = 64;
        t->slots = malloc(t->n_slots * sizeof *t->slots);
    }
    if (!t || !t->slots) {
        free(t);
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for the word tokenizer");
    }
    for (size_t i = 0; i < t->n_slots; i++)
        t->slots[i] = -1;
    t->ranked = true;
    *out = t;
    return 0;
}

void ctrain_lm_wordtok_destroy(ctrain_lm_wordtok_t *t)
{
    if (!t)
        return;
    for (size_t w = 0; w < t->n_words; w++)
        free(t->words[w].s);
    free(t->words);
    free(t->slots);
    free(t->rank);
    free(t);
}

int ctrain_lm_wordtok_split(const char *text, size_t n, size_t *starts, size_t *ends, size_t *count,
                            ct_errbuf_t *eb)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, k = 0;
    int run = 0; /* 0 none, 1 word characters, 2 others (neither word nor space) */
    while (i < n) {
        uint32_t cp;
        const size_t len = ctrain_lm_pretok_utf8(s + i, n - i, &cp);
        if (len == 0)
            return ct_errbuf_set(eb, CT_EFORMAT, "not UTF-8 at byte %zu", i);
        const int kind = ctrain_lm_pretok_is_word(cp) ? 1 : ctrain_lm_pretok_is_space(cp) ? 0 : 2;
        if (kind != run) {
            if (run != 0)
                ends[k++] = i;
            if (kind != 0)
                starts[k] = i;
            run = kind;
        }
        i += len;
    }
    if (run != 0)
        ends[k++] = n;
    *count = k;
    return 0;
}

/* The split into freshly allocated starts and ends. */
static int ctrain_lm_wordtok__split(const char *text, size_t n, size_t **starts, size_t **ends,
                                    size_t *count, ct_errbuf_t *eb)
{
    *starts = malloc((n + 1) * sizeof **starts);
    *ends = malloc((n + 1) * sizeof **ends);
    if (!*starts || !*ends) {
        free(*starts);
        free(*ends);
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for the word tokenizer");
    }
    int rc = ctrain_lm_wordtok_split(text, n, *starts, *ends, count, eb);
    if (rc != 0) {
        free(*starts);
        free(*ends);
    }
    return rc;
}

int ctrain_lm_wordtok_add(ctrain_lm_wordtok_t *t, const char *text, size_t n, ct_errbuf_t *eb)
{
    size_t *starts, *ends, count;
    int rc = ctrain_lm_wordtok__split(text, n, &starts, &ends, &count, eb);
    if (rc != 0)
        return rc;
    for (size_t j = 0; j < count && rc == 0; j++) {
        const char *w = text + starts[j];
        const size_t len = ends[j] - starts[j];
        size_t slot = ctrain_lm_wordtok__slot(t, w, len);
        if (t->slots[slot] >= 0)
            continue;
        if (t->n_words >= (size_t)INT32_MAX - 3) {
            rc = ct_errbuf_set(eb, CT_ERANGE_VALUE, "more than %d distinct words", INT32_MAX - 3);
            break;
        }
        if (t->n_words == t->cap_words) {
            const size_t cap = t->cap_words ? 2 * t->cap_words : 256;
            ctrain_lm_wordtok__word_t *p = realloc(t->words, cap * sizeof *p);
            if (!p) {
                rc = -ENOMEM;
                break;
            }
            t->words = p, t->cap_words = cap;
        }
        char *copy = malloc(len + 1);
        if (!copy) {
            rc = -ENOMEM;
            break;
        }
        memcpy(copy, w, len);
        copy[len] = '\0';
        t->words[t->n_words] = (ctrain_lm_wordtok__word_t){copy, len};
        t->slots[slot] = (int32_t)t->n_words++;
        t->ranked = false;
        if (2 * t->n_words > t->n_slots && (rc = ctrain_lm_wordtok__grow(t)) != 0)
            break;
    }
    free(starts);
    free(ends);
    if (rc == -ENOMEM)
        return ct_errbuf_set(eb, rc, "out of memory for the word tokenizer");
    return rc;
}

static int ctrain_lm_wordtok__cmp(const void *a, const void *b)
{
    const ctrain_lm_wordtok__word_t *x = *(const ctrain_lm_wordtok__word_t *const *)a;
    const ctrain_lm_wordtok__word_t *y = *(const ctrain_lm_wordtok__word_t *const *)b;
    const int c = memcmp(x->s, y->s, x->n < y->n ? x->n : y->n);
    return c != 0 ? c : (x->n > y->n) - (x->n < y->n);
}

/* rank[w] = w's position in byte order (UTF-8's byte order is code-point order, Python's). */
static int ctrain_lm_wordtok__rank(ctrain_lm_wordtok_t *t)
{
    if (t->ranked)
        return 0;
    const ctrain_lm_wordtok__word_t **order = malloc((t->n_words + 1) * sizeof *order);
    int32_t *rank = realloc(t->rank, (t->n_words + 1) * sizeof *rank);
    if (rank)
        t->rank = rank;
    if (!order || !rank) {
        free(order);
        return -ENOMEM;
    }
    for (size_t w = 0; w < t->n_words; w++)
        order[w] = &t->words[w];
    qsort(order, t->n_words, sizeof *order, ctrain_lm_wordtok__cmp);
    for (size_t r = 0; r < t->n_words; r++)
        t->rank[order[r] - t->words] = (int32_t)r;
    free(order);
    t->ranked = true;
    return 0;
}

int ctrain_lm_wordtok_encode(ctrain_lm_wordtok_t *t, const char *text, size_t n,
                             ctrain_lm_ids_t *ids, ct_errbuf_t *eb)
{
    if (ctrain_lm_wordtok__rank(t) != 0)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for the word tokenizer");
    size_t *starts, *ends, count;
    int rc = ctrain_lm_wordtok__split(text, n, &starts, &ends, &count, eb);
    if (rc != 0)
        return rc;
    if (ids->n + count > ids->cap) {
        const size_t cap = ids->n + count + 64;
        int32_t *p = realloc(ids->ids, cap * sizeof *p);
        if (!p)
            rc = ct_errbuf_set(eb, -ENOMEM, "out of memory for the token ids");
        else
            ids->ids = p, ids->cap = cap;
    }
    for (size_t j = 0; j < count && rc == 0; j++) {
        const int32_t w =
            t->slots[ctrain_lm_wordtok__slot(t, text + starts[j], ends[j] - starts[j])];
        ids->ids[ids->n++] = w < 0 ? CTRAIN_LM_WORDTOK_UNK : 3 + t->rank[w];
    }
    free(starts);
    free(ends);
    return rc;
}

int32_t ctrain_lm_wordtok_size(const ctrain_lm_wordtok_t *t)
{
    return 3 + (int32_t)t->n_words;
}
