/*
 * ctrain_lm_wordtok.h - the word-level tokenizer of the temporal encoder's tiny random LM (the
 * reference's WordTokenizer: a `tokenizers` WordLevel model behind the Whitespace pre-tokenizer):
 * the vocabulary is ids 0 <pad>, 1 <unk>, 2 <eos>, then every distinct word of the texts it is
 * built from, sorted as Python sorts strings (by code point, which is the byte order of UTF-8);
 * a text encodes to the ids of its words, 1 for a word outside the vocabulary.
 *
 * Words are the matches of \w+|[^\w\s]+ (Rust regex's Unicode \w and \s, the classes of
 * ctrain_lm_tok.h), leftmost first: a run of word characters, or a run of characters that are
 * neither word characters nor white space; white space separates and is dropped.
 *
 * Not here: byte-level BPE tokenizers of Hugging Face folders (ctrain_lm_tok.h), special tokens
 * inside the text (<eos> in a text is three words), normalisation, saving the vocabulary.
 */
#ifndef CTRAIN_LM_WORDTOK_H
#define CTRAIN_LM_WORDTOK_H

#include <stddef.h>
#include <stdint.h>

#include "ct_error.h"
#include "ctrain_lm_tok.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CTRAIN_LM_WORDTOK_PAD 0
#define CTRAIN_LM_WORDTOK_UNK 1
#define CTRAIN_LM_WORDTOK_EOS 2

typedef struct ctrain_lm_wordtok ctrain_lm_wordtok_t;

/* An empty builder (its vocabulary the three specials until texts are added). 0 or -ENOMEM. */
int ctrain_lm_wordtok_create(ctrain_lm_wordtok_t **out, ct_errbuf_t *eb);
void ctrain_lm_wordtok_destroy(ctrain_lm_wordtok_t *t); /* NULL is fine */

/* Adds the words of text[0..n) to the vocabulary. The ids of every word change with each
 * addition: encode after the last one. 0, CT_EFORMAT (not UTF-8: one line naming the byte
 * offset) or -ENOMEM. */
int ctrain_lm_wordtok_add(ctrain_lm_wordtok_t *t, const char *text, size_t n, ct_errbuf_t *eb);

/* The ids of text[0..n)'s words appended to ids. 0, CT_EFORMAT (not UTF-8) or -ENOMEM. */
int ctrain_lm_wordtok_encode(ctrain_lm_wordtok_t *t, const char *text, size_t n,
                             ctrain_lm_ids_t *ids, ct_errbuf_t *eb);

/* The vocabulary's size (3 + distinct words). */
int32_t ctrain_lm_wordtok_size(const ctrain_lm_wordtok_t *t);

/* Splits text[0..n) into words: their start and end byte offsets into starts and ends (room
 * for n entries each), their count into *count. 0 or CT_EFORMAT (not UTF-8; eb may be NULL). */
int ctrain_lm_wordtok_split(const char *text, size_t n, size_t *starts, size_t *ends, size_t *count,
                            ct_errbuf_t *eb);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_LM_WORDTOK_H */
