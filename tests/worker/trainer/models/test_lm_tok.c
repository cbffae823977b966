/*
 * test_lm_tok.c - the language models' tokenizer (models/lm/ctrain_lm_tok.c, ctrain_lm_pretok.c)
 * against Hugging Face's `tokenizers`. lm_tok.py (run by the PyTorch 2.x interpreter, which has
 * `tokenizers`; skipped, 77, without it) trains GPT-2-style, Qwen2-style and option-laden
 * byte-level BPE tokenizers, saves them as tokenizer.json and as vocab.json + merges.txt (with
 * and without tokenizer_config.json), and encodes 5,000+ texts; this test checks, for every text:
 *   - the pieces of GPT-2's and Qwen2's pre-tokenization patterns (ctrain_lm_pretok_split)
 *     against a Split on the same pattern in `tokenizers`;
 *   - the ids of each of the seven folders, equal element for element;
 * and, for every Unicode code point, that \s, \p{L}, \p{N} and \w are the classes `tokenizers`
 * uses (the generated table ctrain_lm_unicode.c). Then the errors: patterns, models and normalisers
 * ctrain does not run, and text that is not UTF-8.
 *
 * With "ml-100k" as second argument (meson test lm_tok_ml-100k) the texts include MovieLens'
 * 1,682 titles from $CT_DATA_DIR/ml-100k/u.item (read as latin-1); skipped without the file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "ct_child.h"
#include "ct_test.h"
#include "ctrain_lm_tok.h"

static char tok_root[256];
static const char *tok_script;
static const char *tok_items; /* u.item, or NULL */
static json_t *tok_expected;

static void tok_remove_tmp(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tok_root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tok_root);
}

/* text, escaped for a failure message */
static const char *tok_show(const char *s, size_t n)
{
    static char buf[400];
    size_t k = 0;
    for (size_t i = 0; i < n && k + 8 < sizeof buf; i++) {
        unsigned char c = (unsigned char)s[i];
        k += (size_t)(c >= 32 && c < 127 && c != '\\'
                          ? snprintf(buf + k, sizeof buf - k, "%c", c)
                          : snprintf(buf + k, sizeof buf - k, "\\x%02x", c));
    }
    buf[k] = '\0';
    return buf;
}

static void tok_run_python(void)
{
    const char *py = ct_test_torch2_python();
    if (access(py, X_OK) != 0)
        CT_SKIP("no PyTorch 2.x interpreter at %s (set CTRUN_TORCH2_PYTHON)", py);
    ct_child_t ch;
    char *argv[] = {(char *)py, (char *)tok_script, tok_root, (char *)tok_items, NULL};
    CT_ASSERT_OK(ct_child_run(&ch, argv, NULL, 300000));
    if (ch.exit_code == 77) {
        ct_child_close(&ch);
        CT_SKIP("%s cannot import tokenizers", py);
    }
    CT_ASSERT_MSG(ch.exit_code == 0, "lm_tok.py failed:\n%s%s", ch.out, ch.err);
    printf("%s", ch.out);
    ct_child_close(&ch);
    char path[400];
    snprintf(path, sizeof path, "%s/expected.json", tok_root);
    json_error_t je;
    tok_expected = json_load_file(path, JSON_ALLOW_NUL, &je);
    CT_ASSERT_MSG(tok_expected != NULL, "%s: %s", path, je.text);
}

static void test_classes(void)
{
    char path[400];
    snprintf(path, sizeof path, "%s/classes.json", tok_root);
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    CT_ASSERT_MSG(o != NULL, "%s: %s", path, je.text);
    static const char *const names[4] = {"s", "L", "N", "W"};
    bool (*const fn[4])(uint32_t) = {ctrain_lm_pretok_is_space, ctrain_lm_pretok_is_letter,
                                     ctrain_lm_pretok_is_number, ctrain_lm_pretok_is_word};
    for (int k = 0; k < 4; k++) {
        unsigned char *in = calloc(0x110000, 1);
        json_t *ranges = json_object_get(o, names[k]);
        size_t i;
        json_t *r;
        json_array_foreach(ranges, i, r)
        {
            for (json_int_t c = json_integer_value(json_array_get(r, 0));
                 c <= json_integer_value(json_array_get(r, 1)); c++)
                in[c] = 1;
        }
        long members = 0;
        for (uint32_t cp = 0; cp < 0x110000; cp++) {
            if ((cp >= 0xD800 && cp <= 0xDFFF) || cp == 1) /* U+0001 marks members in lm_tok.py */
                continue;
            members += in[cp];
            CT_ASSERT_MSG(fn[k](cp) == (in[cp] != 0), "U+%04X: %s says %d, tokenizers %d", cp,
                          names[k], (int)fn[k](cp), in[cp]);
        }
        printf("  class %-2s %7ld code points, every one as tokenizers has it\n", names[k],
               members);
        free(in);
    }
    json_decref(o);
}

static void test_pretokenize(void)
{
    json_t *texts = json_object_get(tok_expected, "texts");
    static const char *const rules[2] = {"gpt2", "qwen2"};
    for (int r = 0; r < 2; r++) {
        json_t *pieces = json_object_get(json_object_get(tok_expected, "pieces"), rules[r]);
        size_t total = 0;
        for (size_t i = 0; i < json_array_size(texts); i++) {
            const char *s = json_string_value(json_array_get(texts, i));
            size_t n = json_string_length(json_array_get(texts, i));
            size_t *cuts = malloc((n + 2) * sizeof *cuts), count = 0;
            CT_ASSERT_OK(ctrain_lm_pretok_split((ctrain_lm_pretok_rule_t)r, s, n, cuts, &count));
            json_t *want = json_array_get(pieces, i);
            CT_ASSERT_MSG(count == json_array_size(want),
                          "%s: \"%s\" cut into %zu pieces, tokenizers %zu", rules[r],
                          tok_show(s, n), count, json_array_size(want));
            for (size_t p = 0; p < count; p++) {
                json_t *w = json_array_get(want, p);
                CT_ASSERT_MSG(
                    json_string_length(w) == cuts[p + 1] - cuts[p] &&
                        memcmp(json_string_value(w), s + cuts[p], cuts[p + 1] - cuts[p]) == 0,
                    "%s: \"%s\": piece %zu differs", rules[r], tok_show(s, n), p);
            }
            total += count;
            free(cuts);
        }
        printf("  %-5s pattern: %zu texts, %zu pieces, all as tokenizers cuts them\n", rules[r],
               json_array_size(texts), total);
    }
}

static void test_ids(void)
{
    json_t *texts = json_object_get(tok_expected, "texts");
    json_t *ids = json_object_get(tok_expected, "ids");
    const char *name;
    json_t *per_text;
    json_object_foreach(ids, name, per_text)
    {
        char dir[400];
        snprintf(dir, sizeof dir, "%s/%s", tok_root, name);
        ctrain_lm_tok_t *t = NULL;
        ct_errbuf_t eb;
        int rc = ctrain_lm_tok_load(&t, dir, &eb);
        CT_ASSERT_MSG(rc == 0, "%s: %s", name, eb.msg);
        size_t tokens = 0;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (size_t i = 0; i < json_array_size(texts); i++) {
            const char *s = json_string_value(json_array_get(texts, i));
            size_t n = json_string_length(json_array_get(texts, i));
            ctrain_lm_ids_t got = {0};
            rc = ctrain_lm_tok_encode(t, s, n, &got, &eb);
            CT_ASSERT_MSG(rc == 0, "%s: \"%s\": %s", name, tok_show(s, n), eb.msg);
            json_t *want = json_array_get(per_text, i);
            bool same = got.n == json_array_size(want);
            for (size_t k = 0; same && k < got.n; k++)
                same = got.ids[k] == json_integer_value(json_array_get(want, k));
            if (!same) {
                char a[300] = "", b[300] = "";
                for (size_t k = 0; k < got.n && strlen(a) < 250; k++)
                    snprintf(a + strlen(a), sizeof a - strlen(a), " %d", got.ids[k]);
                for (size_t k = 0; k < json_array_size(want) && strlen(b) < 250; k++)
                    snprintf(b + strlen(b), sizeof b - strlen(b), " %lld",
                             (long long)json_integer_value(json_array_get(want, k)));
                CT_ASSERT_MSG(same, "%s: \"%s\":\n    ctrain    [%s ]\n    tokenizers [%s ]", name,
                              tok_show(s, n), a, b);
            }
            tokens += got.n;
            ctrain_lm_ids_free(&got);
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
        printf("  %-10s %zu texts, %zu ids, all equal (%.0f ids/ms)\n", name,
               json_array_size(texts), tokens, (double)tokens / (s * 1e3));
        ctrain_lm_tok_destroy(t);
    }
}

static void tok_write(const char *dir, const char *name, const char *text)
{
    char path[500];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    CT_ASSERT(f != NULL);
    fputs(text, f);
    fclose(f);
}

static void test_errors(void)
{
    char dir[400];
    snprintf(dir, sizeof dir, "%s/bad", tok_root);
    CT_ASSERT(mkdir(dir, 0755) == 0 || errno == EEXIST);
    ctrain_lm_tok_t *t = NULL;
    ct_errbuf_t eb;
    CT_ASSERT_ERR(ctrain_lm_tok_load(&t, dir, &eb), -ENOENT);
    CT_ASSERT_STR_CONTAINS(eb.msg, "no tokenizer.json, and no vocab.json with merges.txt");
    static const struct {
        const char *json, *want;
    } bad[] = {
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}",
         "the model is WordPiece, not BPE"},
        {"{\"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"vocab\": {}, \"merges\": []}}",
         "byte_fallback"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
         "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\p{N}{1,3}\"}, "
         "\"behavior\": \"Isolated\", \"invert\": false}}",
         "neither GPT-2's nor Qwen2's"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
         "\"normalizer\": {\"type\": \"NFKC\"}}",
         "normalizer NFKC"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
         "\"pre_tokenizer\": {\"type\": \"Whitespace\"}}",
         "pre-tokenizer Whitespace"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
         "no ByteLevel pre-tokenizer"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}, "
         "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
         "merge 0 (\"a\" \"b\")"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tok_write(dir, "tokenizer.json", bad[i].json);
        CT_ASSERT_MSG(ctrain_lm_tok_load(&t, dir, &eb) != 0, "accepted %s", bad[i].json);
        CT_ASSERT_STR_CONTAINS(eb.msg, bad[i].want);
        CT_ASSERT_STR_CONTAINS(eb.msg, "bad/tokenizer.json");
        CT_ASSERT(strchr(eb.msg, '\n') == NULL);
    }
    char path[500];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    CT_ASSERT(unlink(path) == 0);

    /* vocab.json + merges.txt: each file's own errors name it */
    static const struct {
        const char *vocab, *merges, *config, *want;
    } slow[] = {
        {"{\"a\": 0,", "", NULL, "bad/vocab.json:1:"},
        {"[1, 2]", "", NULL, "bad/vocab.json: the vocabulary is not a JSON object"},
        {"{\"a\": \"x\"}", "", NULL, "bad/vocab.json: token \"a\" has no integer id"},
        {"{\"a\": 0, \"b\": 1, \"ab\": 2}", "#version: 0.2\na b c\n", NULL,
         "bad/merges.txt: line \"a b c\" is not \"a b\""},
        {"{\"a\": 0, \"b\": 1}", "a b\n", NULL, "bad/merges.txt: merge 0 (\"a\" \"b\")"},
        {"{\"a\": 0, \"b\": 1, \"ab\": 2}", "a b\n",
         "{\"tokenizer_class\": ", "bad/tokenizer_config.json:1:"},
        {"{\"a\": 0, \"b\": 1, \"ab\": 2}", "a b\n",
         "{\"added_tokens_decoder\": {\"x\": {\"content\": \"<s>\"}}}",
         "bad/tokenizer_config.json: added_tokens_decoder[\"x\"] is not an id with a content"},
    };
    for (size_t i = 0; i < sizeof slow / sizeof slow[0]; i++) {
        tok_write(dir, "vocab.json", slow[i].vocab);
        tok_write(dir, "merges.txt", slow[i].merges);
        snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
        if (slow[i].config)
            tok_write(dir, "tokenizer_config.json", slow[i].config);
        else
            (void)unlink(path);
        CT_ASSERT_MSG(ctrain_lm_tok_load(&t, dir, &eb) != 0, "accepted %s", slow[i].vocab);
        CT_ASSERT_STR_CONTAINS(eb.msg, slow[i].want);
        CT_ASSERT(strchr(eb.msg, '\n') == NULL);
    }
    snprintf(path, sizeof path, "%s/merges.txt", dir);
    CT_ASSERT(unlink(path) == 0);
    CT_ASSERT(ctrain_lm_tok_load(&t, dir, &eb) != 0);
    CT_ASSERT_STR_CONTAINS(eb.msg, "bad/merges.txt: No such file or directory");

    /* text that is not UTF-8: the byte offset */
    char gdir[400];
    snprintf(gdir, sizeof gdir, "%s/gpt2", tok_root);
    CT_ASSERT_OK(ctrain_lm_tok_load(&t, gdir, &eb));
    ctrain_lm_ids_t ids = {0};
    CT_ASSERT_ERR(ctrain_lm_tok_encode(t, "ok \xe9t\xe9", 6, &ids, &eb), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "not UTF-8 at byte 3 (0xe9)");
    CT_ASSERT_ERR(ctrain_lm_tok_encode(t, "\xed\xa0\x80", 3, &ids, &eb), CT_EPARSE); /* surrogate */
    CT_ASSERT_ERR(ctrain_lm_tok_encode(t, "\xc0\xaf", 2, &ids, &eb), CT_EPARSE);     /* overlong */
    ctrain_lm_ids_free(&ids);
    ctrain_lm_tok_destroy(t);
}

int main(int argc, char **argv)
{
    CT_ASSERT(argc >= 2);
    tok_script = argv[1];
    static char items[4200];
    if (argc >= 3 && strcmp(argv[2], "ml-100k") == 0) {
        const char *data = getenv("CT_DATA_DIR");
        if (!data || !data[0])
            CT_SKIP("CT_DATA_DIR is not set (MovieLens-100k's u.item is needed)");
        snprintf(items, sizeof items, "%s/ml-100k/u.item", data);
        if (access(items, R_OK) != 0)
            CT_SKIP("no %s", items);
        tok_items = items;
    }
    snprintf(tok_root, sizeof tok_root, "/tmp/ct_lm_tok_XXXXXX");
    CT_ASSERT(mkdtemp(tok_root) != NULL);
    atexit(tok_remove_tmp);
    tok_run_python();
    if (!tok_items)
        CT_RUN(test_classes);
    CT_RUN(test_pretokenize);
    CT_RUN(test_ids);
    if (!tok_items)
        CT_RUN(test_errors);
    json_decref(tok_expected);
    return 0;
}
