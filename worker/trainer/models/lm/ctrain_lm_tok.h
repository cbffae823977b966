/*
 * ctrain_lm_tok.h - the byte-level BPE tokenizer of GPT-2 and Qwen2, giving the ids Hugging Face's
 * `tokenizers` library gives (encode(text, add_special_tokens=False)) for the same files:
 *
 *   1. added tokens (tokenizer.json's "added_tokens": the special tokens and any others) are cut
 *      out of the text first, leftmost-longest, honouring single_word, lstrip and rstrip; those
 *      with normalized = false are matched in the raw text, the others after normalisation;
 *   2. the normaliser: none (GPT-2) or NFC (Qwen2);
 *   3. the pre-tokenizer: GPT-2's rule (ByteLevel with use_regex) or Qwen2's (a Split on its
 *      pattern, then ByteLevel without a pattern), optionally with ByteLevel's add_prefix_space;
 *      the two patterns are implemented as the regular expressions match, over Unicode letters
 *      (\p{L}), numbers (\p{N}) and white space (\s) as `tokenizers`' regex engine has them -
 *      see ctrain_lm_pretok.c and the table ctrain_lm_unicode.c;
 *   4. BPE over the bytes of each piece (byte-level: every byte is a symbol), merging the pair of
 *      lowest rank first, leftmost among equals, as `tokenizers` does; ignore_merges takes a whole
 *      piece that is in the vocabulary as it is.
 *
 * Files: dir/tokenizer.json; else dir/vocab.json and dir/merges.txt (the slow tokenizers' files)
 * with the pre-tokenization of tokenizer_config.json's tokenizer_class (Qwen2Tokenizer: Qwen2's
 * rule and NFC; otherwise GPT-2's), the added tokens of its added_tokens_decoder, and the
 * special tokens it names (bos/eos/unk/pad_token, additional_special_tokens; "<|endoftext|>" for
 * eos and unk when unnamed, as transformers' GPT2Tokenizer and Qwen2Tokenizer default) that
 * vocab.json has.
 *
 * The tokenizer is read-only once loaded: ctrain_lm_tok_encode may run on several threads.
 *
 * Not here: special tokens added around a text (ctrain never adds any), decoding, truncation.
 */
#ifndef CTRAIN_LM_TOK_H
#define CTRAIN_LM_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ctrain_lm_tok ctrain_lm_tok_t;

/* The two pre-tokenization rules. */
typedef enum ctrain_lm_pretok_rule {
    CTRAIN_LM_PRETOK_GPT2 = 0,
    CTRAIN_LM_PRETOK_QWEN2 = 1,
} ctrain_lm_pretok_rule_t;

/* A growable array of token ids. */
typedef struct ctrain_lm_ids {
    int32_t *ids;
    size_t n, cap;
} ctrain_lm_ids_t;

void ctrain_lm_ids_free(ctrain_lm_ids_t *ids);

/* Loads the tokenizer of a model folder (see above). Errors are one line naming the file and
 * what ctrain does not handle (another model type than BPE, byte fallback, a pre-tokenizer
 * pattern other than GPT-2's or Qwen2's, a normaliser other than NFC, a merge whose parts or
 * result are not in the vocabulary). */
int ctrain_lm_tok_load(ctrain_lm_tok_t **out, const char *dir, ct_errbuf_t *eb);
void ctrain_lm_tok_destroy(ctrain_lm_tok_t *t); /* NULL is fine */

/* Appends the ids of the n bytes of UTF-8 text to ids. CT_EPARSE when the text is not UTF-8
 * (eb names the byte offset), -ENOMEM. */
int ctrain_lm_tok_encode(const ctrain_lm_tok_t *t, const char *text, size_t n, ctrain_lm_ids_t *ids,
                         ct_errbuf_t *eb);

/* One more than the largest id the tokenizer can produce. */
int32_t ctrain_lm_tok_size(const ctrain_lm_tok_t *t);

/* ---- the pre-tokenization rules (ctrain_lm_pretok.c), exposed for tests ------------------------
 * Cuts n bytes of valid UTF-8 into the pieces the rule's regular expression matches, one after
 * the other: cuts[0] = 0 < cuts[1] < ... < cuts[*count] = n (byte offsets); cuts needs room for
 * n + 1 entries. 0, or -ENOMEM. */
int ctrain_lm_pretok_split(ctrain_lm_pretok_rule_t rule, const char *s, size_t n, size_t *cuts,
                           size_t *count);

/* Unicode classes as the patterns use them: \p{L}, \p{N}, \s; and \w, the word characters an
 * added token with single_word must not touch (Rust regex's: alphabetic, marks, decimal digits,
 * connector punctuation, joiners). */
bool ctrain_lm_pretok_is_letter(uint32_t cp);
bool ctrain_lm_pretok_is_number(uint32_t cp);
bool ctrain_lm_pretok_is_space(uint32_t cp);
bool ctrain_lm_pretok_is_word(uint32_t cp);

/* The generated table behind them (ctrain_lm_unicode.c): a code point's CTRAIN_LM_UNICODE_* bits.
 */
enum {
    CTRAIN_LM_UNICODE_L = 1,
    CTRAIN_LM_UNICODE_N = 2,
    CTRAIN_LM_UNICODE_W = 4,
};
unsigned ctrain_lm_unicode_class(uint32_t cp);

/* Decodes the code point at s[0..n) (n >= 1) into *cp; returns its length in bytes, or 0 for
 * invalid UTF-8 (overlong forms, surrogates and values above U+10FFFF are invalid). */
size_t ctrain_lm_pretok_utf8(const unsigned char *s, size_t n, uint32_t *cp);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_LM_TOK_H */
