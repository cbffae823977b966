/*
 * ctrain_lm_tok.c - loading a byte-level BPE tokenizer (tokenizer.json, or vocab.json and
 * merges.txt) and encoding text with it (ctrain_lm_tok.h): added tokens, NFC (libutf8proc), the
 * pre-tokenizer steps, and BPE over bytes.
 *
 * The vocabulary is held as raw bytes: a byte-level token string ("Ġthe") is mapped back
 * through GPT-2's bytes_to_unicode table (" the"), so BPE runs on the text's own bytes and the
 * merges are a table of (left id, right id) -> (rank, merged id). Merging follows `tokenizers`'
 * Word::merge_all: a heap of candidate pairs ordered by (rank, position), a popped pair applied
 * only if it is still adjacent and still merges to the same token.
 *
 * Not here: the pre-tokenization patterns and Unicode classes (ctrain_lm_pretok.c).
 */
#include "ctrain_lm_tok.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <utf8proc.h>

#define CTRAIN_LM_TOK__PATH_MAX 4200

/* ---- small containers --------------------------------------------------------------------------
 */

void ctrain_lm_ids_free(ctrain_lm_ids_t *ids)
{
    free(ids->ids);
    ids->ids = NULL;
    ids->n = ids->cap = 0;
}

static int ctrain_lm_tok__push(ctrain_lm_ids_t *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? 2 * ids->cap : 64;
        int32_t *p = realloc(ids->ids, cap * sizeof *p);
        if (!p)
            return -ENOMEM;
        ids->ids = p, ids->cap = cap;
    }
    ids->ids[ids->n++] = id;
    return 0;
}

static uint64_t ctrain_lm_tok__hash(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* Byte strings -> id, open addressing, at most half full. */
typedef struct ctrain_lm_tok__slot {
    size_t off; /* into blob; SIZE_MAX = empty */
    uint32_t len;
    int32_t id;
} ctrain_lm_tok__slot_t;

typedef struct ctrain_lm_tok__vmap {
    ctrain_lm_tok__slot_t *slot;
    size_t cap, count; /* cap a power of two */
    char *blob;
    size_t blob_len, blob_cap;
} ctrain_lm_tok__vmap_t;

static int32_t ctrain_lm_tok__vmap_get(const ctrain_lm_tok__vmap_t *m, const void *k, size_t n)
{
    if (m->cap == 0)
        return -1;
    for (size_t i = ctrain_lm_tok__hash(k, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (m->slot[i].off == SIZE_MAX)
            return -1;
        if (m->slot[i].len == n && memcmp(m->blob + m->slot[i].off, k, n) == 0)
            return m->slot[i].id;
    }
}

static int ctrain_lm_tok__vmap_grow(ctrain_lm_tok__vmap_t *m)
{
    size_t cap = m->cap ? 2 * m->cap : 1024;
    ctrain_lm_tok__slot_t *ns = malloc(cap * sizeof *ns);
    if (!ns)
        return -ENOMEM;
    for (size_t i = 0; i < cap; i++)
        ns[i].off = SIZE_MAX;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slot[i].off == SIZE_MAX)
            continue;
        size_t j = ctrain_lm_tok__hash(m->blob + m->slot[i].off, m->slot[i].len) & (cap - 1);
        while (ns[j].off != SIZE_MAX)
            j = (j + 1) & (cap - 1);
        ns[j] = m->slot[i];
    }
    free(m->slot);
    m->slot = ns, m->cap = cap;
    return 0;
}

/* key -> id; a later put of the same key replaces the id. */
static int ctrain_lm_tok__vmap_put(ctrain_lm_tok__vmap_t *m, const void *k, size_t n, int32_t id)
{
    if (2 * (m->count + 1) > m->cap && ctrain_lm_tok__vmap_grow(m) != 0)
        return -ENOMEM;
    size_t i = ctrain_lm_tok__hash(k, n) & (m->cap - 1);
    for (; m->slot[i].off != SIZE_MAX; i = (i + 1) & (m->cap - 1))
        if (m->slot[i].len == n && memcmp(m->blob + m->slot[i].off, k, n) == 0) {
            m->slot[i].id = id;
            return 0;
        }
    if (m->blob_len + n > m->blob_cap) {
        size_t cap = m->blob_cap ? m->blob_cap : 4096;
        while (cap < m->blob_len + n)
            cap *= 2;
        char *b = realloc(m->blob, cap);
        if (!b)
            return -ENOMEM;
        m->blob = b, m->blob_cap = cap;
    }
    memcpy(m->blob + m->blob_len, k, n);
    m->slot[i] = (ctrain_lm_tok__slot_t){m->blob_len, (uint32_t)n, id};
    m->blob_len += n;
    m->count++;
    return 0;
}

static void ctrain_lm_tok__vmap_free(ctrain_lm_tok__vmap_t *m)
{
    free(m->slot);
    free(m->blob);
    memset(m, 0, sizeof *m);
}

/* (left id, right id) -> (rank, merged id), open addressing, at most half full. */
typedef struct ctrain_lm_tok__merge {
    uint64_t key; /* UINT64_MAX = empty */
    uint32_t rank;
    int32_t id;
} ctrain_lm_tok__merge_t;

typedef struct ctrain_lm_tok__mmap {
    ctrain_lm_tok__merge_t *slot;
    size_t cap, count;
} ctrain_lm_tok__mmap_t;

static uint64_t ctrain_lm_tok__pair(int32_t a, int32_t b)
{
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

static size_t ctrain_lm_tok__mix(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k;
}

static const ctrain_lm_tok__merge_t *ctrain_lm_tok__mmap_get(const ctrain_lm_tok__mmap_t *m,
                                                             int32_t a, int32_t b)
{
    if (m->cap == 0)
        return NULL;
    uint64_t k = ctrain_lm_tok__pair(a, b);
    for (size_t i = ctrain_lm_tok__mix(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (m->slot[i].key == UINT64_MAX)
            return NULL;
        if (m->slot[i].key == k)
            return &m->slot[i];
    }
}

/* The first merge of a pair wins, as `tokenizers` keeps the lowest rank. */
static int ctrain_lm_tok__mmap_put(ctrain_lm_tok__mmap_t *m, int32_t a, int32_t b, uint32_t rank,
                                   int32_t id)
{
    if (2 * (m->count + 1) > m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 1024;
        ctrain_lm_tok__merge_t *ns = malloc(cap * sizeof *ns);
        if (!ns)
            return -ENOMEM;
        for (size_t i = 0; i < cap; i++)
            ns[i].key = UINT64_MAX;
        for (size_t i = 0; i < m->cap; i++) {
            if (m->slot[i].key == UINT64_MAX)
                continue;
            size_t j = ctrain_lm_tok__mix(m->slot[i].key) & (cap - 1);
            while (ns[j].key != UINT64_MAX)
                j = (j + 1) & (cap - 1);
            ns[j] = m->slot[i];
        }
        free(m->slot);
        m->slot = ns, m->cap = cap;
    }
    uint64_t k = ctrain_lm_tok__pair(a, b);
    size_t i = ctrain_lm_tok__mix(k) & (m->cap - 1);
    for (; m->slot[i].key != UINT64_MAX; i = (i + 1) & (m->cap - 1))
        if (m->slot[i].key == k)
            return 0;
    m->slot[i] = (ctrain_lm_tok__merge_t){k, rank, id};
    m->count++;
    return 0;
}

/* ---- the tokenizer ------------------------------------------------------------------------------
 */

typedef struct ctrain_lm_tok__added {
    char *content;
    size_t len;
    int32_t id;
    bool single_word, lstrip, rstrip, normalized;
} ctrain_lm_tok__added_t;

typedef enum ctrain_lm_tok__step_kind {
    CTRAIN_LM_TOK__SPLIT = 0, /* a pattern, behaviour Isolated */
    CTRAIN_LM_TOK__BYTE_LEVEL = 1,
} ctrain_lm_tok__step_kind_t;

typedef struct ctrain_lm_tok__step {
    ctrain_lm_tok__step_kind_t kind;
    ctrain_lm_pretok_rule_t rule; /* SPLIT */
    bool prefix_space, use_regex; /* BYTE_LEVEL */
} ctrain_lm_tok__step_t;

#define CTRAIN_LM_TOK__MAX_STEPS 4

struct ctrain_lm_tok {
    ctrain_lm_tok__vmap_t vocab; /* byte strings of byte-level tokens -> id */
    ctrain_lm_tok__mmap_t merges;
    int32_t byte_id[256]; /* the token of each single byte, -1 when the vocabulary lacks it */
    ctrain_lm_tok__added_t *added;
    size_t n_added;
    bool nfc;
    ctrain_lm_tok__step_t steps[CTRAIN_LM_TOK__MAX_STEPS];
    int n_steps;
    bool ignore_merges, fuse_unk;
    int32_t unk_id; /* -1: bytes without a token are dropped, as `tokenizers` does without unk */
    int32_t size;   /* 1 + the largest id */
};

int32_t ctrain_lm_tok_size(const ctrain_lm_tok_t *t)
{
    return t->size;
}

void ctrain_lm_tok_destroy(ctrain_lm_tok_t *t)
{
    if (!t)
        return;
    ctrain_lm_tok__vmap_free(&t->vocab);
    free(t->merges.slot);
    for (size_t i = 0; i < t->n_added; i++)
        free(t->added[i].content);
    free(t->added);
    free(t);
}

/* GPT-2's bytes_to_unicode: the printable bytes stand for themselves, the other 68 map to
 * U+0100.. in byte order. */
static uint32_t ctrain_lm_tok__byte_cp(unsigned b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))
        return b;
    unsigned k = 0;
    for (unsigned x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255)))
            k++;
    return 256 + k;
}

/* The bytes a byte-level token string stands for, into out (room for strlen(s)); the length,
 * or -1 when s has a character outside the byte-level alphabet (or is not UTF-8). */
static long ctrain_lm_tok__unmap(const int16_t *inv, const char *s, size_t n, unsigned char *out)
{
    long k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = ctrain_lm_pretok_utf8((const unsigned char *)s + i, n - i, &cp);
        if (len == 0 || cp >= 324 || inv[cp] < 0)
            return -1;
        out[k++] = (unsigned char)inv[cp];
        i += len;
    }
    return k;
}

typedef struct ctrain_lm_tok__loader {
    ctrain_lm_tok_t *t;
    const char *path;                            /* for messages */
    char path_buf[CTRAIN_LM_TOK__PATH_MAX + 64]; /* vocab.json, merges.txt, tokenizer_config.json */
    ct_errbuf_t *eb;
    int16_t inv[324]; /* code point -> byte */
    unsigned char *buf;
    size_t buf_cap;
} ctrain_lm_tok__loader_t;

static int ctrain_lm_tok__add_vocab(ctrain_lm_tok__loader_t *L, const char *s, size_t n, int32_t id)
{
    if (n + 1 > L->buf_cap) {
        unsigned char *b = realloc(L->buf, n + 1);
        if (!b)
            return ct_errbuf_set(L->eb, -ENOMEM, "out of memory");
        L->buf = b, L->buf_cap = n + 1;
    }
    if (id < 0)
        return ct_errbuf_set(L->eb, CT_EFORMAT, "%s: token \"%.40s\" has a negative id", L->path,
                             s);
    if (id >= L->t->size)
        L->t->size = id + 1;
    long k = ctrain_lm_tok__unmap(L->inv, s, n, L->buf);
    if (k < 0)
        return 0; /* not byte-level: reachable only as an added token */
    if (ctrain_lm_tok__vmap_put(&L->t->vocab, L->buf, (size_t)k, id) != 0)
        return ct_errbuf_set(L->eb, -ENOMEM, "out of memory");
    if (k == 1 && L->t->byte_id[L->buf[0]] < 0)
        L->t->byte_id[L->buf[0]] = id;
    return 0;
}

static int ctrain_lm_tok__vocab_json(ctrain_lm_tok__loader_t *L, const json_t *vocab)
{
    if (!json_is_object(vocab))
        return ct_errbuf_set(L->eb, CT_EFORMAT, "%s: the vocabulary is not a JSON object", L->path);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)vocab, key, v)
    {
        if (!json_is_integer(v) || json_integer_value(v) > INT32_MAX)
            return ct_errbuf_set(L->eb, CT_EFORMAT, "%s: token \"%.40s\" has no integer id",
                                 L->path, key);
        int rc = ctrain_lm_tok__add_vocab(L, key, strlen(key), (int32_t)json_integer_value(v));
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* One merge "a b" (rank r): both parts and their concatenation must be tokens. */
static int ctrain_lm_tok__merge(ctrain_lm_tok__loader_t *L, const char *a, size_t na, const char *b,
                                size_t nb, uint32_t rank)
{
    size_t need = 2 * (na + nb) + 1;
    if (need > L->buf_cap) {
        unsigned char *x = realloc(L->buf, need);
        if (!x)
            return ct_errbuf_set(L->eb, -ENOMEM, "out of memory");
        L->buf = x, L->buf_cap = need;
    }
    long ka = ctrain_lm_tok__unmap(L->inv, a, na, L->buf);
    long kb = ka < 0 ? -1 : ctrain_lm_tok__unmap(L->inv, b, nb, L->buf + ka);
    int32_t ia = ka < 0 ? -1 : ctrain_lm_tok__vmap_get(&L->t->vocab, L->buf, (size_t)ka);
    int32_t ib = kb < 0 ? -1 : ctrain_lm_tok__vmap_get(&L->t->vocab, L->buf + ka, (size_t)kb);
    int32_t im = kb < 0 ? -1 : ctrain_lm_tok__vmap_get(&L->t->vocab, L->buf, (size_t)(ka + kb));
    if (ia < 0 || ib < 0 || im < 0)
        return ct_errbuf_set(L->eb, CT_EFORMAT,
                             "%s: merge %u (\"%.*s\" \"%.*s\"): a part or the merged token is not "
                             "in the vocabulary",
                             L->path, rank, (int)(na > 40 ? 40 : na), a, (int)(nb > 40 ? 40 : nb),
                             b);
    if (ctrain_lm_tok__mmap_put(&L->t->merges, ia, ib, rank, im) != 0)
        return ct_errbuf_set(L->eb, -ENOMEM, "out of memory");
    return 0;
}

static int ctrain_lm_tok__merges_json(ctrain_lm_tok__loader_t *L, const json_t *merges)
{
    if (!json_is_array(merges))
        return ct_errbuf_set(L->eb, CT_EFORMAT, "%s: \"merges\" is not a list", L->path);
    for (size_t r = 0; r < json_array_size(merges); r++) {
        const json_t *m = json_array_get(merges, r);
        int rc;
        if (json_is_string(m)) { /* "a b" */
            const char *s = json_string_value(m), *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return ct_errbuf_set(L->eb, CT_EFORMAT, "%s: merge %zu \"%.40s\" is not \"a b\"",
                                     L->path, r, s);
            rc = ctrain_lm_tok__merge(L, s, (size_t)(sp - s), sp + 1, strlen(sp + 1), (uint32_t)r);
        } else if (json_is_array(m) && json_array_size(m) == 2 &&
                   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
            const json_t *a = json_array_get(m, 0), *b = json_array_get(m, 1);
            rc = ctrain_lm_tok__merge(L, json_string_value(a), json_string_length(a),
                                      json_string_value(b), json_string_length(b), (uint32_t)r);
        } else {
            return ct_errbuf_set(L->eb, CT_EFORMAT, "%s: merge %zu is not a pair of strings",
                                 L->path, r);
        }
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int ctrain_lm_tok__add_added(ctrain_lm_tok__loader_t *L, const char *content, int32_t id,
                                    bool single_word, bool lstrip, bool rstrip, bool normalized)
{
    ctrain_lm_tok_t *t = L->t;
    if (content[0] == '\0')
        return ct_errbuf_set(L->eb, CT_EFORMAT, "%s: added token %d is empty", L->path, id);
    if (id < 0)
        return ct_errbuf_set(L->eb, CT_EFORMAT, "%s: added token \"%.40s\" has a negative id",
                             L->path, content);
    for (size_t i = 0; i < t->n_added; i++)
        if (strcmp(t->added[i].content, content) == 0) {
            t->added[i].id = id; /* a token listed twice: the later entry */
            return 0;
        }
    ctrain_lm_tok__added_t *a = realloc(t->added, (t->n_added + 1) * sizeof *a);
    if (!a)
        return ct_errbuf_set(L->eb, -ENOMEM, "out of memory");
    t->added = a;
    a = &t->added[t->n_added];
    a->content = strdup(content);
    if (!a->content)
        return ct_errbuf_set(L->eb, -ENOMEM, "out of memory");
    a->len = strlen(content);
    a->id = id;
    a->single_word = single_word, a->lstrip = lstrip, a->rstrip = rstrip;
    a->normalized = normalized;
    t->n_added++;
    if (id >= t->size)
        t->size = id + 1;
    return 0;
}

/* ---- tokenizer.json ----------------------------------------------------------------------------
 */

static const char *const ctrain_lm_tok__patterns[2] = {
    [CTRAIN_LM_PRETOK_GPT2] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
                              "\\s+(?!\\S)|\\s+",
    [CTRAIN_LM_PRETOK_QWEN2] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                               "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|"
                               "\\s+",
};

static bool ctrain_lm_tok__flag(const json_t *o, const char *key, bool def)
{
    const json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : def;
}

static int ctrain_lm_tok__pre_step(ctrain_lm_tok__loader_t *L, const json_t *p)
{
    ctrain_lm_tok_t *t = L->t;
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!type)
        return ct_errbuf_set(L->eb, CT_EFORMAT, "%s: a pre-tokenizer has no \"type\"", L->path);
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(p, "pretokenizers");
        for (size_t i = 0; json_is_array(list) && i < json_array_size(list); i++) {
            int rc = ctrain_lm_tok__pre_step(L, json_array_get(list, i));
            if (rc != 0)
                return rc;
        }
        return 0;
    }
    if (t->n_steps == CTRAIN_LM_TOK__MAX_STEPS)
        return ct_errbuf_set(L->eb, CT_EFORMAT, "%s: more than %d pre-tokenizers", L->path,
                             CTRAIN_LM_TOK__MAX_STEPS);
    ctrain_lm_tok__step_t *s = &t->steps[t->n_steps];
    if (strcmp(type, "ByteLevel") == 0) {
        s->kind = CTRAIN_LM_TOK__BYTE_LEVEL;
        s->prefix_space = ctrain_lm_tok__flag(p, "add_prefix_space", true);
        s->use_regex = ctrain_lm_tok__flag(p, "use_regex", true);
    } else if (strcmp(type, "Split") == 0) {
        const char *re = json_string_value(json_object_get(json_object_get(p, "pattern"), "Regex"));
        const char *behavior = json_string_value(json_object_get(p, "behavior"));
        int rule = -1;
        for (int k = 0; re && k < 2; k++)
            if (strcmp(re, ctrain_lm_tok__patterns[k]) == 0)
                rule = k;
        if (rule < 0 || !behavior || strcmp(behavior, "Isolated") != 0 ||
            ctrain_lm_tok__flag(p, "invert", false))
            return ct_errbuf_set(L->eb, CT_EFORMAT,
                                 "%s: the Split pre-tokenizer (pattern \"%.60s\", behavior %s) is "
                                 "neither GPT-2's nor Qwen2's, the two ctrain implements",
                                 L->path, re ? re : "(not a regex)", behavior ? behavior : "?");
        s->kind = CTRAIN_LM_TOK__SPLIT;
        s->rule = (ctrain_lm_pretok_rule_t)rule;
    } else {
        return ct_errbuf_set(L->eb, CT_EFORMAT,
                             "%s: pre-tokenizer %s is not one ctrain runs (ByteLevel, Split on "
                             "GPT-2's or Qwen2's pattern, Sequence)",
                             L->path, type);
    }
    t->n_steps++;
    return 0;
}

static int ctrain_lm_tok__normalizer(ctrain_lm_tok__loader_t *L, const json_t *n)
{
    if (!n || json_is_null(n))
        return 0;
    const char *type = json_string_value(json_object_get(n, "type"));
    if (type && strcmp(type, "NFC") == 0) {
        L->t->nfc = true;
        return 0;
    }
    if (type && strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(n, "normalizers");
        for (size_t i = 0; json_is_array(list) && i < json_array_size(list); i++) {
            int rc = ctrain_lm_tok__normalizer(L, json_array_get(list, i));
            if (rc != 0)
                return rc;
        }
        return 0;
    }
    return ct_errbuf_set(L->eb, CT_EFORMAT,
                         "%s: normalizer %s is not one ctrain runs (none, or NFC)", L->path,
                         type ? type : "(no type)");
}

static int ctrain_lm_tok__model(ctrain_lm_tok__loader_t *L, const json_t *m)
{
    ctrain_lm_tok_t *t = L->t;
    const char *type = json_string_value(json_object_get(m, "type"));
    if (!json_is_object(m) || (type && strcmp(type, "BPE") != 0))
        return ct_errbuf_set(L->eb, CT_EFORMAT, "%s: the model is %s, not BPE", L->path,
                             type ? type : "missing");
    if (ctrain_lm_tok__flag(m, "byte_fallback", false))
        return ct_errbuf_set(L->eb, CT_EFORMAT,
                             "%s: byte_fallback BPE (SentencePiece style) is not byte-level BPE",
                             L->path);
    const char *keys[2] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        const char *v = json_string_value(json_object_get(m, keys[k]));
        if (v && v[0])
            return ct_errbuf_set(L->eb, CT_EFORMAT, "%s: %s \"%.20s\" is not byte-level BPE's",
                                 L->path, keys[k], v);
    }
    const json_t *dropout = json_object_get(m, "dropout");
    if (json_is_number(dropout) && json_number_value(dropout) > 0.0)
        return ct_errbuf_set(L->eb, CT_EFORMAT,
                             "%s: BPE dropout makes encoding random; ctrain encodes without",
                             L->path);
    t->ignore_merges = ctrain_lm_tok__flag(m, "ignore_merges", false);
    t->fuse_unk = ctrain_lm_tok__flag(m, "fuse_unk", false);
    int rc = ctrain_lm_tok__vocab_json(L, json_object_get(m, "vocab"));
    if (rc == 0)
        rc = ctrain_lm_tok__merges_json(L, json_object_get(m, "merges"));
    const char *unk = json_string_value(json_object_get(m, "unk_token"));
    if (rc == 0 && unk) {
        const json_t *id = json_object_get(json_object_get(m, "vocab"), unk);
        if (!json_is_integer(id))
            return ct_errbuf_set(L->eb, CT_EFORMAT,
                                 "%s: unk_token \"%.40s\" is not in the vocabulary", L->path, unk);
        t->unk_id = (int32_t)json_integer_value(id);
    }
    return rc;
}

static int ctrain_lm_tok__added_json(ctrain_lm_tok__loader_t *L, const json_t *list)
{
    for (size_t i = 0; json_is_array(list) && i < json_array_size(list); i++) {
        const json_t *a = json_array_get(list, i);
        const char *content = json_string_value(json_object_get(a, "content"));
        const json_t *id = json_object_get(a, "id");
        if (!content || !json_is_integer(id) || json_integer_value(id) > INT32_MAX)
            return ct_errbuf_set(L->eb, CT_EFORMAT,
                                 "%s: added_tokens[%zu] needs \"content\" and an integer \"id\"",
                                 L->path, i);
        bool special = ctrain_lm_tok__flag(a, "special", false);
        int rc = ctrain_lm_tok__add_added(L, content, (int32_t)json_integer_value(id),
                                          ctrain_lm_tok__flag(a, "single_word", false),
                                          ctrain_lm_tok__flag(a, "lstrip", false),
                                          ctrain_lm_tok__flag(a, "rstrip", false),
                                          ctrain_lm_tok__flag(a, "normalized", !special));
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int ctrain_lm_tok__from_json(ctrain_lm_tok__loader_t *L, const json_t *o)
{
    ctrain_lm_tok_t *t = L->t;
    int rc = ctrain_lm_tok__model(L, json_object_get(o, "model"));
    if (rc == 0)
        rc = ctrain_lm_tok__normalizer(L, json_object_get(o, "normalizer"));
    const json_t *pre = json_object_get(o, "pre_tokenizer");
    if (rc == 0 && pre && !json_is_null(pre))
        rc = ctrain_lm_tok__pre_step(L, pre);
    if (rc == 0) {
        bool byte_level = false;
        for (int i = 0; i < t->n_steps; i++)
            byte_level |= t->steps[i].kind == CTRAIN_LM_TOK__BYTE_LEVEL;
        if (!byte_level)
            return ct_errbuf_set(L->eb, CT_EFORMAT,
                                 "%s: no ByteLevel pre-tokenizer: not a byte-level BPE tokenizer",
                                 L->path);
    }
    if (rc == 0)
        rc = ctrain_lm_tok__added_json(L, json_object_get(o, "added_tokens"));
    return rc;
}

/* ---- vocab.json + merges.txt -------------------------------------------------------------------
 */

static json_t *ctrain_lm_tok__load_json(const char *path, ct_errbuf_t *eb, int *rc)
{
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    if (!o)
        *rc = ct_errbuf_set(eb, CT_EFORMAT, "%s:%d: %s", path, je.line, je.text);
    return o;
}

/* The special tokens transformers' slow GPT2Tokenizer and Qwen2Tokenizer split out of a text:
 * tokenizer_config.json's bos/eos/unk/pad_token and additional_special_tokens (a string, or an
 * object with "content"; null for none), and "<|endoftext|>" for eos and unk when it does not name
 * them (both classes' default). Each that vocab.json has and that is not an added token yet
 * becomes one, matched in the raw text; one vocab.json lacks is left out. */
static int ctrain_lm_tok__slow_specials(ctrain_lm_tok__loader_t *L, const json_t *cfg,
                                        const json_t *vocab)
{
    static const char *const keys[4] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    const json_t *extra = json_object_get(cfg, "additional_special_tokens");
    const size_t n_extra = json_is_array(extra) ? json_array_size(extra) : 0;
    for (size_t i = 0; i < 4 + n_extra; i++) {
        const json_t *v = i < 4 ? json_object_get(cfg, keys[i]) : json_array_get(extra, i - 4);
        const char *content =
            json_string_value(json_is_object(v) ? json_object_get(v, "content") : v);
        if (i < 4 && !v && (i == 1 || i == 2))
            content = "<|endoftext|>";
        const json_t *id = content ? json_object_get(vocab, content) : NULL;
        if (!json_is_integer(id) || json_integer_value(id) > INT32_MAX)
            continue;
        bool known = false;
        for (size_t k = 0; k < L->t->n_added; k++)
            known |= strcmp(L->t->added[k].content, content) == 0;
        if (known)
            continue;
        int rc = ctrain_lm_tok__add_added(L, content, (int32_t)json_integer_value(id), false, false,
                                          false, false);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int ctrain_lm_tok__slow_merges(ctrain_lm_tok__loader_t *L, const char *dir);
static int ctrain_lm_tok__slow_config(ctrain_lm_tok__loader_t *L, const char *dir,
                                      const json_t *vocab);

/* vocab.json, merges.txt and tokenizer_config.json (optional). */
static int ctrain_lm_tok__from_slow(ctrain_lm_tok__loader_t *L, const char *dir)
{
    int rc = 0;
    snprintf(L->path_buf, sizeof L->path_buf, "%s/vocab.json", dir);
    L->path = L->path_buf;
    json_t *vocab = ctrain_lm_tok__load_json(L->path, L->eb, &rc);
    if (!vocab)
        return rc;
    rc = ctrain_lm_tok__vocab_json(L, vocab);
    if (rc == 0)
        rc = ctrain_lm_tok__slow_merges(L, dir);
    if (rc == 0)
        rc = ctrain_lm_tok__slow_config(L, dir, vocab);
    json_decref(vocab);
    return rc;
}

/* merges.txt: "a b" a line, in rank order, after an optional "#version" line. */
static int ctrain_lm_tok__slow_merges(ctrain_lm_tok__loader_t *L, const char *dir)
{
    int rc = 0;
    snprintf(L->path_buf, sizeof L->path_buf, "%s/merges.txt", dir);
    const char *mpath = L->path = L->path_buf;
    FILE *f = fopen(mpath, "r");
    if (!f) {
        rc = -errno;
        return ct_errbuf_set(L->eb, rc, "%s: %s", mpath, strerror(-rc));
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    uint32_t rank = 0;
    while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len == 0 || (rank == 0 && strncmp(line, "#version", 8) == 0))
            continue;
        char *sp = strchr(line, ' ');
        if (!sp || strchr(sp + 1, ' ')) {
            rc = ct_errbuf_set(L->eb, CT_EFORMAT, "%s: line \"%.40s\" is not \"a b\"", mpath, line);
            break;
        }
        rc = ctrain_lm_tok__merge(L, line, (size_t)(sp - line), sp + 1, strlen(sp + 1), rank++);
    }
    free(line);
    fclose(f);
    return rc;
}

/* tokenizer_config.json: the class (Qwen2's rule and NFC, or GPT-2's) and the added tokens. */
static int ctrain_lm_tok__slow_config(ctrain_lm_tok__loader_t *L, const char *dir,
                                      const json_t *vocab)
{
    ctrain_lm_tok_t *t = L->t;
    int rc = 0;
    snprintf(L->path_buf, sizeof L->path_buf, "%s/tokenizer_config.json", dir);
    const char *cpath = L->path = L->path_buf;
    json_t *cfg = NULL;
    FILE *probe = fopen(cpath, "r");
    if (probe) {
        fclose(probe);
        if (!(cfg = ctrain_lm_tok__load_json(cpath, L->eb, &rc)))
            return rc;
    }
    const char *cls = json_string_value(json_object_get(cfg, "tokenizer_class"));
    bool qwen = cls && strncmp(cls, "Qwen2Tokenizer", 14) == 0;
    t->nfc = qwen;
    if (qwen) {
        t->steps[t->n_steps++] =
            (ctrain_lm_tok__step_t){.kind = CTRAIN_LM_TOK__SPLIT, .rule = CTRAIN_LM_PRETOK_QWEN2};
        t->steps[t->n_steps++] = (ctrain_lm_tok__step_t){.kind = CTRAIN_LM_TOK__BYTE_LEVEL};
    } else {
        t->steps[t->n_steps++] = (ctrain_lm_tok__step_t){
            .kind = CTRAIN_LM_TOK__BYTE_LEVEL,
            .prefix_space = ctrain_lm_tok__flag(cfg, "add_prefix_space", false),
            .use_regex = true};
    }
    const json_t *dec = json_object_get(cfg, "added_tokens_decoder");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)dec, key, v)
    {
        const char *content = json_string_value(json_object_get(v, "content"));
        char *end;
        long id = strtol(key, &end, 10);
        if (!content || *end != '\0' || id < 0 || id > INT32_MAX) {
            rc = ct_errbuf_set(L->eb, CT_EFORMAT,
                               "%s: added_tokens_decoder[\"%.20s\"] is not an id with a content",
                               cpath, key);
            break;
        }
        bool special = ctrain_lm_tok__flag(v, "special", false);
        if ((rc = ctrain_lm_tok__add_added(
                 L, content, (int32_t)id, ctrain_lm_tok__flag(v, "single_word", false),
                 ctrain_lm_tok__flag(v, "lstrip", false), ctrain_lm_tok__flag(v, "rstrip", false),
                 ctrain_lm_tok__flag(v, "normalized", !special))) != 0)
            break;
    }
    if (rc == 0)
        rc = ctrain_lm_tok__slow_specials(L, cfg, vocab);
    json_decref(cfg);
    return rc;
}

int ctrain_lm_tok_load(ctrain_lm_tok_t **out, const char *dir, ct_errbuf_t *eb)
{
    *out = NULL;
    if (strlen(dir) >= CTRAIN_LM_TOK__PATH_MAX)
        return ct_errbuf_set(eb, -ENAMETOOLONG, "model folder path too long");
    ctrain_lm_tok_t *t = calloc(1, sizeof *t);
    if (!t)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    for (int b = 0; b < 256; b++)
        t->byte_id[b] = -1;
    t->unk_id = -1;
    ctrain_lm_tok__loader_t L = {.t = t, .eb = eb};
    for (int i = 0; i < 324; i++)
        L.inv[i] = -1;
    for (unsigned b = 0; b < 256; b++)
        L.inv[ctrain_lm_tok__byte_cp(b)] = (int16_t)b;
    char path[CTRAIN_LM_TOK__PATH_MAX + 64], vpath[CTRAIN_LM_TOK__PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    snprintf(vpath, sizeof vpath, "%s/vocab.json", dir);
    int rc = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        fclose(f);
        L.path = path;
        json_t *o = ctrain_lm_tok__load_json(path, eb, &rc);
        if (o)
            rc = ctrain_lm_tok__from_json(&L, o);
        json_decref(o);
    } else if ((f = fopen(vpath, "r")) != NULL) {
        fclose(f);
        rc = ctrain_lm_tok__from_slow(&L, dir);
    } else {
        rc = ct_errbuf_set(eb, -ENOENT, "%s: no tokenizer.json, and no vocab.json with merges.txt",
                           dir);
    }
    free(L.buf);
    if (rc == 0) {
        int missing = 0;
        for (int b = 0; b < 256; b++)
            missing += t->byte_id[b] < 0;
        if (missing == 256)
            rc = ct_errbuf_set(eb, CT_EFORMAT,
                               "%s: no token stands for a single byte: not a byte-level "
                               "vocabulary",
                               L.path == path ? path : vpath);
    }
    if (rc != 0) {
        ctrain_lm_tok_destroy(t);
        return rc;
    }
    *out = t;
    return 0;
}

/* ---- encoding ----------------------------------------------------------------------------------
 */

/* One candidate merge of the heap: the pair starting at symbol pos. */
typedef struct ctrain_lm_tok__cand {
    uint32_t rank, pos;
    int32_t id;
} ctrain_lm_tok__cand_t;

static bool ctrain_lm_tok__before(const ctrain_lm_tok__cand_t *a, const ctrain_lm_tok__cand_t *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

typedef struct ctrain_lm_tok__work {
    int32_t *sym;         /* symbol ids */
    int32_t *prev, *next; /* links; -1 at the ends */
    ctrain_lm_tok__cand_t *heap;
    size_t heap_n, cap;
    char *arena[2]; /* pre-tokenizer pieces: bytes of each step's output */
    size_t arena_cap[2];
    size_t *piece[2]; /* (offset, length) pairs into the arena */
    size_t piece_cap[2];
    size_t *cuts;
    size_t cuts_cap;
} ctrain_lm_tok__work_t;

static void ctrain_lm_tok__work_free(ctrain_lm_tok__work_t *w)
{
    free(w->sym), free(w->prev), free(w->next), free(w->heap), free(w->cuts);
    for (int k = 0; k < 2; k++)
        free(w->arena[k]), free(w->piece[k]);
}

static int ctrain_lm_tok__reserve(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return -ENOMEM;
    *p = q, *cap = c;
    return 0;
}

static void ctrain_lm_tok__heap_push(ctrain_lm_tok__work_t *w, ctrain_lm_tok__cand_t c)
{
    size_t i = w->heap_n++;
    w->heap[i] = c;
    while (i > 0 && ctrain_lm_tok__before(&w->heap[i], &w->heap[(i - 1) / 2])) {
        ctrain_lm_tok__cand_t x = w->heap[i];
        w->heap[i] = w->heap[(i - 1) / 2];
        w->heap[(i - 1) / 2] = x;
        i = (i - 1) / 2;
    }
}

static ctrain_lm_tok__cand_t ctrain_lm_tok__heap_pop(ctrain_lm_tok__work_t *w)
{
    ctrain_lm_tok__cand_t top = w->heap[0];
    w->heap[0] = w->heap[--w->heap_n];
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < w->heap_n && ctrain_lm_tok__before(&w->heap[l], &w->heap[m]))
            m = l;
        if (r < w->heap_n && ctrain_lm_tok__before(&w->heap[r], &w->heap[m]))
            m = r;
        if (m == i)
            break;
        ctrain_lm_tok__cand_t x = w->heap[i];
        w->heap[i] = w->heap[m];
        w->heap[m] = x;
        i = m;
    }
    return top;
}

/* The candidate for the pair starting at symbol i, if it merges. */
static void ctrain_lm_tok__consider(const ctrain_lm_tok_t *t, ctrain_lm_tok__work_t *w, int32_t i)
{
    if (i < 0 || w->next[i] < 0)
        return;
    const ctrain_lm_tok__merge_t *m =
        ctrain_lm_tok__mmap_get(&t->merges, w->sym[i], w->sym[w->next[i]]);
    if (m)
        ctrain_lm_tok__heap_push(w, (ctrain_lm_tok__cand_t){m->rank, (uint32_t)i, m->id});
}

/* BPE of one piece's bytes, ids appended. */
static int ctrain_lm_tok__bpe(const ctrain_lm_tok_t *t, ctrain_lm_tok__work_t *w,
                              const unsigned char *s, size_t n, ctrain_lm_ids_t *ids)
{
    if (n == 0)
        return 0;
    if (t->ignore_merges) {
        int32_t id = ctrain_lm_tok__vmap_get(&t->vocab, s, n);
        if (id >= 0)
            return ctrain_lm_tok__push(ids, id);
    }
    if (n > w->cap) {
        /* sym, prev, next: one per byte; the heap: twice that (see below) */
        size_t cap = w->cap ? w->cap : 64;
        while (cap < n)
            cap *= 2;
        int32_t *a = realloc(w->sym, cap * sizeof *a);
        if (a)
            w->sym = a;
        int32_t *p = a ? realloc(w->prev, cap * sizeof *p) : NULL;
        if (p)
            w->prev = p;
        int32_t *q = p ? realloc(w->next, cap * sizeof *q) : NULL;
        if (q)
            w->next = q;
        ctrain_lm_tok__cand_t *h = q ? realloc(w->heap, 2 * cap * sizeof *h) : NULL;
        if (!h)
            return -ENOMEM;
        w->heap = h;
        w->cap = cap;
    }
    const size_t cap = w->cap;
    /* symbols: one per byte that has a token (others are dropped, or become unk) */
    int32_t m = 0;
    bool last_unk = false;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[s[i]];
        if (id < 0) {
            if (t->unk_id < 0 || (t->fuse_unk && last_unk))
                continue;
            id = t->unk_id;
            last_unk = true;
        } else {
            last_unk = false;
        }
        w->sym[m] = id;
        w->prev[m] = m - 1;
        w->next[m] = m + 1;
        m++;
    }
    if (m == 0)
        return 0;
    w->next[m - 1] = -1;
    w->heap_n = 0;
    for (int32_t i = 0; i + 1 < m; i++)
        ctrain_lm_tok__consider(t, w, i);
    while (w->heap_n > 0) {
        ctrain_lm_tok__cand_t c = ctrain_lm_tok__heap_pop(w);
        int32_t i = (int32_t)c.pos, j = w->next[i];
        if (w->sym[i] < 0 || j < 0)
            continue; /* merged away, or the last symbol now */
        const ctrain_lm_tok__merge_t *mm =
            ctrain_lm_tok__mmap_get(&t->merges, w->sym[i], w->sym[j]);
        if (!mm || mm->id != c.id)
            continue; /* the pair changed since it was queued */
        w->sym[i] = c.id;
        w->sym[j] = -1;
        w->next[i] = w->next[j];
        if (w->next[j] >= 0)
            w->prev[w->next[j]] = i;
        /* the heap never holds more than one entry per merge applied plus the initial pairs */
        if (w->heap_n + 2 > 2 * cap)
            return -ENOMEM;
        ctrain_lm_tok__consider(t, w, w->prev[i]);
        ctrain_lm_tok__consider(t, w, i);
    }
    for (int32_t i = 0; i >= 0; i = w->next[i])
        if (ctrain_lm_tok__push(ids, w->sym[i]) != 0)
            return -ENOMEM;
    return 0;
}

/* The pre-tokenizer steps over one piece, then BPE of every final piece. */
static int ctrain_lm_tok__pieces(const ctrain_lm_tok_t *t, ctrain_lm_tok__work_t *w, const char *s,
                                 size_t n, ctrain_lm_ids_t *ids)
{
    if (n == 0)
        return 0;
    int cur = 0;
    if (ctrain_lm_tok__reserve((void **)&w->arena[0], &w->arena_cap[0], n, 1) != 0 ||
        ctrain_lm_tok__reserve((void **)&w->piece[0], &w->piece_cap[0], 2, sizeof(size_t)) != 0)
        return -ENOMEM;
    memcpy(w->arena[0], s, n);
    w->piece[0][0] = 0, w->piece[0][1] = n;
    size_t np = 1;
    for (int k = 0; k < t->n_steps; k++) {
        const ctrain_lm_tok__step_t *st = &t->steps[k];
        const bool split = st->kind == CTRAIN_LM_TOK__SPLIT || st->use_regex;
        const ctrain_lm_pretok_rule_t rule =
            st->kind == CTRAIN_LM_TOK__SPLIT ? st->rule : CTRAIN_LM_PRETOK_GPT2;
        const bool prefix = st->kind == CTRAIN_LM_TOK__BYTE_LEVEL && st->prefix_space;
        if (!split && !prefix)
            continue;
        int nx = 1 - cur;
        size_t used = 0, nq = 0;
        for (size_t i = 0; i < np; i++) {
            const size_t off = w->piece[cur][2 * i], len = w->piece[cur][2 * i + 1];
            const bool add = prefix && (len == 0 || w->arena[cur][off] != ' ');
            const size_t plen = len + (add ? 1 : 0);
            if (ctrain_lm_tok__reserve((void **)&w->arena[nx], &w->arena_cap[nx], used + plen, 1) !=
                    0 ||
                ctrain_lm_tok__reserve((void **)&w->cuts, &w->cuts_cap, plen + 1, sizeof(size_t)) !=
                    0)
                return -ENOMEM;
            char *dst = w->arena[nx] + used;
            if (add)
                dst[0] = ' ';
            memcpy(dst + (add ? 1 : 0), w->arena[cur] + off, len);
            size_t count = 1;
            w->cuts[0] = 0, w->cuts[1] = plen;
            if (split && ctrain_lm_pretok_split(rule, dst, plen, w->cuts, &count) != 0)
                return -ENOMEM;
            if (ctrain_lm_tok__reserve((void **)&w->piece[nx], &w->piece_cap[nx], 2 * (nq + count),
                                       sizeof(size_t)) != 0)
                return -ENOMEM;
            for (size_t c = 0; c < count; c++) {
                w->piece[nx][2 * nq] = used + w->cuts[c];
                w->piece[nx][2 * nq + 1] = w->cuts[c + 1] - w->cuts[c];
                nq++;
            }
            used += plen;
        }
        cur = nx;
        np = nq;
    }
    for (size_t i = 0; i < np; i++) {
        int rc =
            ctrain_lm_tok__bpe(t, w, (const unsigned char *)w->arena[cur] + w->piece[cur][2 * i],
                               w->piece[cur][2 * i + 1], ids);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* The code point ending at s[end) (end > 0), for single_word. */
static uint32_t ctrain_lm_tok__cp_before(const char *s, size_t end)
{
    size_t i = end - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80)
        i--;
    uint32_t cp = 0;
    if (ctrain_lm_pretok_utf8((const unsigned char *)s + i, end - i, &cp) == 0)
        cp = 0xFFFD;
    return cp;
}

/* The stage of added-token matching: the tokens with normalized == want. For each piece between
 * matches, calls next(). */
typedef int (*ctrain_lm_tok__next_fn)(const ctrain_lm_tok_t *t, ctrain_lm_tok__work_t *w,
                                      const char *s, size_t n, ctrain_lm_ids_t *ids);

static int ctrain_lm_tok__split_added(const ctrain_lm_tok_t *t, ctrain_lm_tok__work_t *w,
                                      const char *s, size_t n, bool want_normalized,
                                      ctrain_lm_tok__next_fn next, ctrain_lm_ids_t *ids)
{
    size_t start_offset = 0, pos = 0;
    int rc = 0;
    while (pos < n && rc == 0) {
        /* leftmost-longest: the first position where a token starts, its longest token */
        const ctrain_lm_tok__added_t *best = NULL;
        size_t at = pos;
        for (; at < n && !best; at++)
            for (size_t k = 0; k < t->n_added; k++) {
                const ctrain_lm_tok__added_t *a = &t->added[k];
                if (a->normalized != want_normalized || a->len > n - at ||
                    memcmp(s + at, a->content, a->len) != 0)
                    continue;
                if (!best || a->len > best->len)
                    best = a;
            }
        if (!best)
            break;
        at--;
        size_t start = at, stop = at + best->len;
        pos = stop; /* the next search starts after this match, used or not */
        if (best->single_word) {
            bool before =
                start == 0 || !ctrain_lm_pretok_is_word(ctrain_lm_tok__cp_before(s, start));
            uint32_t cp = 0;
            bool after =
                stop == n ||
                ctrain_lm_pretok_utf8((const unsigned char *)s + stop, n - stop, &cp) == 0 ||
                !ctrain_lm_pretok_is_word(cp);
            if (!before || !after)
                continue;
        }
        if (best->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                uint32_t cp = ctrain_lm_tok__cp_before(s, ns);
                if (!ctrain_lm_pretok_is_space(cp))
                    break;
                size_t len = 1;
                while (len < ns && ((unsigned char)s[ns - len] & 0xC0) == 0x80)
                    len++;
                ns -= len;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (best->rstrip) {
            uint32_t cp;
            size_t len;
            while (stop < n &&
                   (len = ctrain_lm_pretok_utf8((const unsigned char *)s + stop, n - stop, &cp)) >
                       0 &&
                   ctrain_lm_pretok_is_space(cp))
                stop += len;
            /* the search goes on after the match itself, as `tokenizers`' does */
        }
        if (start_offset < start)
            rc = next(t, w, s + start_offset, start - start_offset, ids);
        if (rc == 0)
            rc = ctrain_lm_tok__push(ids, best->id);
        start_offset = stop;
    }
    if (rc == 0 && start_offset < n)
        rc = next(t, w, s + start_offset, n - start_offset, ids);
    return rc;
}

/* Text between raw added tokens: normalise, then the normalised added tokens, then pieces. */
static int ctrain_lm_tok__normalized_stage(const ctrain_lm_tok_t *t, ctrain_lm_tok__work_t *w,
                                           const char *s, size_t n, ctrain_lm_ids_t *ids)
{
    if (!t->nfc)
        return ctrain_lm_tok__split_added(t, w, s, n, true, ctrain_lm_tok__pieces, ids);
    utf8proc_uint8_t *norm = NULL;
    utf8proc_ssize_t len = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &norm,
                                        UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (len < 0) {
        free(norm);
        return len == UTF8PROC_ERROR_NOMEM ? -ENOMEM : CT_EPARSE;
    }
    int rc = ctrain_lm_tok__split_added(t, w, (const char *)norm, (size_t)len, true,
                                        ctrain_lm_tok__pieces, ids);
    free(norm);
    return rc;
}

int ctrain_lm_tok_encode(const ctrain_lm_tok_t *t, const char *text, size_t n, ctrain_lm_ids_t *ids,
                         ct_errbuf_t *eb)
{
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = ctrain_lm_pretok_utf8((const unsigned char *)text + i, n - i, &cp);
        if (len == 0)
            return ct_errbuf_set(eb, CT_EPARSE, "not UTF-8 at byte %zu (0x%02x)", i,
                                 (unsigned char)text[i]);
        i += len;
    }
    ctrain_lm_tok__work_t w;
    memset(&w, 0, sizeof w);
    int rc =
        ctrain_lm_tok__split_added(t, &w, text, n, false, ctrain_lm_tok__normalized_stage, ids);
    ctrain_lm_tok__work_free(&w);
    if (rc == -ENOMEM)
        return ct_errbuf_set(eb, rc, "out of memory while tokenizing");
    if (rc != 0)
        return ct_errbuf_set(eb, rc, "the text could not be normalised (NFC)");
    return 0;
}
