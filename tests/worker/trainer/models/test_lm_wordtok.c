/*
 * test_lm_wordtok.c - the word-level tokenizer (models/lm/ctrain_lm_wordtok.c): known splits
 * and ids, errors on text that is not UTF-8; and, with the PyTorch 2.x interpreter (lm_wordtok.py
 * imports `tokenizers` and the reference's WordTokenizer; skipped, 77, without it), the same
 * vocabulary size and the same ids, element for element, for every description of two generated
 * sets, the prompt and texts with unseen words, Unicode classes and white space of every kind.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "ct_child.h"
#include "ct_test.h"
#include "ctrain_lm_wordtok.h"

static const char *wordtok_script;

static void test_known(void)
{
    ctrain_lm_wordtok_t *t = NULL;
    ct_errbuf_t eb;
    CT_ASSERT_OK(ctrain_lm_wordtok_create(&t, &eb));
    CT_ASSERT_EQ(ctrain_lm_wordtok_size(t), 3);
    const char *a = "the curve rises, then falls!!";
    const char *b = "Describe the curve:";
    CT_ASSERT_OK(ctrain_lm_wordtok_add(t, a, strlen(a), &eb));
    CT_ASSERT_OK(ctrain_lm_wordtok_add(t, b, strlen(b), &eb));
    /* sorted: !! , : Describe curve falls rises the then */
    CT_ASSERT_EQ(ctrain_lm_wordtok_size(t), 12);
    ctrain_lm_ids_t ids = {0};
    const char *c = "the  curve\tfalls , then rises: unseen!!";
    CT_ASSERT_OK(ctrain_lm_wordtok_encode(t, c, strlen(c), &ids, &eb));
    const int32_t want[] = {10, 7, 8, 4, 11, 9, 5, 1, 3};
    CT_ASSERT_EQ((int)ids.n, 9);
    for (int i = 0; i < 9; i++)
        CT_ASSERT_MSG(ids.ids[i] == want[i], "id %d: %d, expected %d", i, ids.ids[i], want[i]);
    const char *bad = "ok \xff";
    CT_ASSERT(ctrain_lm_wordtok_add(t, bad, strlen(bad), &eb) == CT_EFORMAT);
    CT_ASSERT_MSG(strstr(eb.msg, "byte 3") != NULL, "%s", eb.msg);
    ids.n = 0;
    CT_ASSERT(ctrain_lm_wordtok_encode(t, bad, strlen(bad), &ids, &eb) == CT_EFORMAT);
    CT_ASSERT_EQ(ctrain_lm_wordtok_size(t), 12);
    ctrain_lm_ids_free(&ids);
    ctrain_lm_wordtok_destroy(t);
}

static void test_reference(void)
{
    const char *py = ct_test_torch2_python();
    if (access(py, X_OK) != 0)
        CT_SKIP("no PyTorch 2.x interpreter at %s (set CTRUN_TORCH2_PYTHON)", py);
    char dir[] = "/tmp/ct_lm_wordtok_XXXXXX", path[64];
    CT_ASSERT(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/expected.json", dir);
    ct_child_t ch;
    char *argv[] = {(char *)py, (char *)wordtok_script, path, NULL};
    CT_ASSERT_OK(ct_child_run(&ch, argv, NULL, 300000));
    if (ch.exit_code == 77) {
        printf("%s", ch.out);
        ct_child_close(&ch);
        rmdir(dir);
        CT_SKIP("%s cannot import tokenizers or the reference", py);
    }
    CT_ASSERT_MSG(ch.exit_code == 0, "lm_wordtok.py failed:\n%s%s", ch.out, ch.err);
    printf("%s", ch.out);
    ct_child_close(&ch);
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    unlink(path);
    rmdir(dir);
    CT_ASSERT_MSG(o != NULL, "%s: %s", path, je.text);
    size_t si, total = 0;
    json_t *set;
    json_array_foreach(json_object_get(o, "sets"), si, set)
    {
        ctrain_lm_wordtok_t *t = NULL;
        ct_errbuf_t eb;
        CT_ASSERT_OK(ctrain_lm_wordtok_create(&t, &eb));
        size_t i;
        json_t *s;
        json_array_foreach(json_object_get(set, "build"), i, s)
        {
            CT_ASSERT_OK(
                ctrain_lm_wordtok_add(t, json_string_value(s), json_string_length(s), &eb));
        }
        CT_ASSERT_EQ(ctrain_lm_wordtok_size(t),
                     (int)json_integer_value(json_object_get(set, "vocab_size")));
        json_t *want_all = json_object_get(set, "ids");
        json_array_foreach(json_object_get(set, "encode"), i, s)
        {
            ctrain_lm_ids_t ids = {0};
            CT_ASSERT_OK(ctrain_lm_wordtok_encode(t, json_string_value(s), json_string_length(s),
                                                  &ids, &eb));
            json_t *want = json_array_get(want_all, i);
            CT_ASSERT_MSG(ids.n == json_array_size(want),
                          "set %zu text %zu \"%s\": %zu ids, %zu expected", si, i,
                          json_string_value(s), ids.n, json_array_size(want));
            for (size_t j = 0; j < ids.n; j++)
                CT_ASSERT_MSG(ids.ids[j] == json_integer_value(json_array_get(want, j)),
                              "set %zu text %zu \"%s\" id %zu: %d, expected %lld", si, i,
                              json_string_value(s), j, ids.ids[j],
                              (long long)json_integer_value(json_array_get(want, j)));
            total += ids.n;
            ctrain_lm_ids_free(&ids);
        }
        ctrain_lm_wordtok_destroy(t);
    }
    printf("  %zu ids equal to the reference's WordTokenizer\n", total);
    json_decref(o);
}

int main(int argc, char **argv)
{
    CT_ASSERT(argc >= 2);
    wordtok_script = argv[1];
    CT_RUN(test_known);
    CT_RUN(test_reference);
    return 0;
}
