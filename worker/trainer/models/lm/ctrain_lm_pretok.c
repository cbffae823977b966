/*
 * ctrain_lm_pretok.c - the pre-tokenization of GPT-2 and Qwen2 (ctrain_lm_tok.h): the Unicode
 * classes their patterns use and the two patterns, implemented as a regular-expression engine
 * matches them (leftmost alternative first, greedy, with the backtracking each alternative
 * needs), not through a regex library:
 *
 *   GPT-2  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   Qwen2  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 *          \s*[\r\n]+|\s+(?!\S)|\s+
 *
 * Every code point matches some alternative of either pattern, so the matches tile the text.
 *
 * Classes: \p{L} and \p{N} are the table ctrain_lm_unicode.c, generated from `tokenizers` itself
 * (its regex engine is what the ids must agree with, whatever Unicode version the C library or
 * Python know); \s is the White_Space property (25 code points, unchanged since Unicode 6.3),
 * which is what that engine's \s is. test_lm_tok compares every code point's classes with
 * `tokenizers`' own.
 *
 * Not here: added tokens, normalisation, BPE (ctrain_lm_tok.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain_lm_tok.h"

/* ---- classes ------------------------------------------------------------------------------------
 */

bool ctrain_lm_pretok_is_letter(uint32_t cp)
{
    return (ctrain_lm_unicode_class(cp) & CTRAIN_LM_UNICODE_L) != 0;
}

bool ctrain_lm_pretok_is_number(uint32_t cp)
{
    return (ctrain_lm_unicode_class(cp) & CTRAIN_LM_UNICODE_N) != 0;
}

bool ctrain_lm_pretok_is_word(uint32_t cp)
{
    return (ctrain_lm_unicode_class(cp) & CTRAIN_LM_UNICODE_W) != 0;
}

bool ctrain_lm_pretok_is_space(uint32_t cp)
{
    /* White_Space: TAB..CR, SPACE, NEL, NBSP, OGHAM SPACE MARK, EN QUAD..HAIR SPACE, LINE and
     * PARAGRAPH SEPARATOR, NARROW NBSP, MEDIUM MATHEMATICAL SPACE, IDEOGRAPHIC SPACE */
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

size_t ctrain_lm_pretok_utf8(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char b = s[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if ((b & 0xE0) == 0xC0)
        len = 2, v = b & 0x1Fu, min = 0x80;
    else if ((b & 0xF0) == 0xE0)
        len = 3, v = b & 0x0Fu, min = 0x800;
    else if ((b & 0xF8) == 0xF0)
        len = 4, v = b & 0x07u, min = 0x10000;
    else
        return 0;
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3Fu);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return len;
}

/* ---- the patterns -------------------------------------------------------------------------------
 */

enum {
    CT__L = 1,    /* \p{L} */
    CT__N = 2,    /* \p{N} */
    CT__S = 4,    /* \s */
    CT__CRLF = 8, /* \r or \n */
};

typedef struct ctrain_lm_pretok__text {
    const uint32_t *cp; /* code points */
    const uint8_t *cls; /* their classes */
    size_t n;
} ctrain_lm_pretok__text_t;

#define CT__OTHER(c) (((c) & (CT__L | CT__N | CT__S)) == 0) /* [^\s\p{L}\p{N}] */

/* End of the run of code points from i whose class has a bit of mask. */
static size_t ctrain_lm_pretok__run(const ctrain_lm_pretok__text_t *t, size_t i, unsigned mask)
{
    while (i < t->n && (t->cls[i] & mask))
        i++;
    return i;
}

static size_t ctrain_lm_pretok__run_other(const ctrain_lm_pretok__text_t *t, size_t i)
{
    while (i < t->n && CT__OTHER(t->cls[i]))
        i++;
    return i;
}

/* 's|'t|'re|'ve|'m|'ll|'d at i (case-insensitive for Qwen2, as Unicode case folding has it:
 * the long s U+017F folds to s): the end, or 0 when none matches. */
static size_t ctrain_lm_pretok__contraction(const ctrain_lm_pretok__text_t *t, size_t i, bool fold)
{
    if (t->cp[i] != '\'' || i + 1 >= t->n)
        return 0;
    uint32_t a = t->cp[i + 1], b = i + 2 < t->n ? t->cp[i + 2] : 0;
    if (fold) {
        /* | 32 lowers ASCII capitals; no other code point lands on s t r v m l d e */
        a = a == 0x17F ? 's' : (a < 128 ? (a | 32u) : a);
        b = b == 0x17F ? 's' : (b < 128 ? (b | 32u) : b);
    }
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return i + 2;
    if ((a == 'r' || a == 'v') && b == 'e')
        return i + 3;
    if (a == 'l' && b == 'l')
        return i + 3;
    return 0;
}

/* \s+(?!\S) then \s+ at i (a white-space code point): the end. */
static size_t ctrain_lm_pretok__spaces(const ctrain_lm_pretok__text_t *t, size_t i)
{
    size_t j = ctrain_lm_pretok__run(t, i, CT__S);
    if (j < t->n && j - i >= 2)
        return j - 1; /* leave the last space to the next piece (" word") */
    return j;
}

static size_t ctrain_lm_pretok__gpt2_at(const ctrain_lm_pretok__text_t *t, size_t i)
{
    size_t e = ctrain_lm_pretok__contraction(t, i, false);
    if (e)
        return e;
    const uint8_t c = t->cls[i];
    const bool sp = t->cp[i] == ' ' && i + 1 < t->n;
    const uint8_t c1 = sp ? t->cls[i + 1] : 0;
    if (c & CT__L) /* ?\p{L}+ */
        return ctrain_lm_pretok__run(t, i, CT__L);
    if (sp && (c1 & CT__L))
        return ctrain_lm_pretok__run(t, i + 1, CT__L);
    if (c & CT__N) /* ?\p{N}+ */
        return ctrain_lm_pretok__run(t, i, CT__N);
    if (sp && (c1 & CT__N))
        return ctrain_lm_pretok__run(t, i + 1, CT__N);
    if (CT__OTHER(c)) /* ?[^\s\p{L}\p{N}]+ */
        return ctrain_lm_pretok__run_other(t, i);
    if (sp && CT__OTHER(c1))
        return ctrain_lm_pretok__run_other(t, i + 1);
    return ctrain_lm_pretok__spaces(t, i);
}

static size_t ctrain_lm_pretok__qwen2_at(const ctrain_lm_pretok__text_t *t, size_t i)
{
    size_t e = ctrain_lm_pretok__contraction(t, i, true);
    if (e)
        return e;
    const uint8_t c = t->cls[i];
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (!(c & (CT__CRLF | CT__L | CT__N)) && i + 1 < t->n && (t->cls[i + 1] & CT__L))
        return ctrain_lm_pretok__run(t, i + 1, CT__L);
    if (c & CT__L)
        return ctrain_lm_pretok__run(t, i, CT__L);
    if (c & CT__N) /* \p{N}: one digit at a time */
        return i + 1;
    /* ?[^\s\p{L}\p{N}]+[\r\n]* */
    size_t j = 0;
    if (CT__OTHER(c))
        j = ctrain_lm_pretok__run_other(t, i);
    else if (t->cp[i] == ' ' && i + 1 < t->n && CT__OTHER(t->cls[i + 1]))
        j = ctrain_lm_pretok__run_other(t, i + 1);
    if (j)
        return ctrain_lm_pretok__run(t, j, CT__CRLF);
    /* \s*[\r\n]+: up to the last line break of the white-space run */
    size_t end = ctrain_lm_pretok__run(t, i, CT__S), last = end;
    for (size_t k = i; k < end; k++)
        if (t->cls[k] & CT__CRLF)
            last = k;
    if (last < end)
        return last + 1;
    return ctrain_lm_pretok__spaces(t, i);
}

int ctrain_lm_pretok_split(ctrain_lm_pretok_rule_t rule, const char *s, size_t n, size_t *cuts,
                           size_t *count)
{
    /* One entry per code point (at most n); the byte offset of code point k is off[k]. */
    uint32_t *cp = malloc((n + 1) * sizeof *cp);
    uint8_t *cls = malloc(n + 1);
    size_t *off = malloc((n + 1) * sizeof *off);
    size_t m = 0;
    *count = 0;
    cuts[0] = 0;
    if (!cp || !cls || !off) {
        free(cp), free(cls), free(off);
        return -ENOMEM;
    }
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        uint32_t c;
        size_t len = ctrain_lm_pretok_utf8(u + i, n - i, &c);
        if (len == 0) /* the caller checked; a stray byte stays its own code point */
            c = 0xFFFD, len = 1;
        cp[m] = c;
        off[m] = i;
        cls[m] = (uint8_t)((ctrain_lm_pretok_is_letter(c) ? CT__L : 0) |
                           (ctrain_lm_pretok_is_number(c) ? CT__N : 0) |
                           (ctrain_lm_pretok_is_space(c) ? CT__S : 0) |
                           (c == '\r' || c == '\n' ? CT__CRLF : 0));
        m++;
        i += len;
    }
    off[m] = n;
    ctrain_lm_pretok__text_t t = {cp, cls, m};
    size_t k = 0;
    for (size_t i = 0; i < m;) {
        size_t e = rule == CTRAIN_LM_PRETOK_QWEN2 ? ctrain_lm_pretok__qwen2_at(&t, i)
                                                  : ctrain_lm_pretok__gpt2_at(&t, i);
        cuts[++k] = off[e];
        i = e;
    }
    *count = k;
    free(cp), free(cls), free(off);
    return 0;
}
