/*
 * test_ct_error.c - ct_strerror/ct_err_name over project codes and errno, and the errbuf
 * helpers (set, wrap, NULL buffers, truncation).
 */
#include <errno.h>

#include "ct_error.h"
#include "ct_test.h"

static void test_project_codes_have_names_and_messages(void)
{
    CT_ASSERT_STR_EQ(ct_err_name(CT_EPARSE), "CT_EPARSE");
    CT_ASSERT_STR_EQ(ct_strerror(CT_EPARSE), "malformed input");
    CT_ASSERT_STR_EQ(ct_err_name(CT_ENOGPU), "CT_ENOGPU");
    CT_ASSERT_STR_EQ(ct_strerror(0), "success");
    CT_ASSERT_STR_EQ(ct_err_name(0), "OK");
    /* Project codes must stay outside errno's range. */
    CT_ASSERT_LT(CT_EPARSE, -1000);
}

static void test_errno_codes_use_system_text(void)
{
    CT_ASSERT_STR_EQ(ct_err_name(-ETIMEDOUT), "ETIMEDOUT");
    CT_ASSERT_STR_CONTAINS(ct_strerror(-ENOENT), "No such file");
    CT_ASSERT_STR_EQ(ct_err_name(-99999), "UNKNOWN");
    CT_ASSERT_STR_EQ(ct_strerror(-99999), "unknown error");
    CT_ASSERT_STR_EQ(ct_strerror(12345), "unknown error");
}

static void test_errbuf_set_and_wrap(void)
{
    ct_errbuf_t eb;
    ct_errbuf_clear(&eb);
    CT_ASSERT_EQ(ct_errbuf_set(&eb, CT_EPARSE, "bad %s at %d", "byte", 7), CT_EPARSE);
    CT_ASSERT_STR_EQ(eb.msg, "bad byte at 7");
    CT_ASSERT_EQ(ct_errbuf_wrap(&eb, CT_EPARSE, "file %s", "x.txt"), CT_EPARSE);
    CT_ASSERT_STR_EQ(eb.msg, "file x.txt: bad byte at 7");

    /* Wrapping an empty buffer falls back to the code's description. */
    ct_errbuf_clear(&eb);
    ct_errbuf_wrap(&eb, -ENOENT, "open %s", "/nope");
    CT_ASSERT_STR_CONTAINS(eb.msg, "open /nope: No such file");

    /* NULL buffers are allowed everywhere and still return the code. */
    CT_ASSERT_EQ(ct_errbuf_set(NULL, CT_ELIMIT, "x"), CT_ELIMIT);
    CT_ASSERT_EQ(ct_errbuf_wrap(NULL, CT_ELIMIT, "x"), CT_ELIMIT);
    ct_errbuf_clear(NULL);
}

static void test_errbuf_truncates_safely(void)
{
    ct_errbuf_t eb;
    char big[2000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ct_errbuf_set(&eb, CT_EPARSE, "%s", big);
    CT_ASSERT_EQ(strlen(eb.msg), CT_ERRBUF_SIZE - 1);
    ct_errbuf_wrap(&eb, CT_EPARSE, "%s", big);
    CT_ASSERT_EQ(strlen(eb.msg), CT_ERRBUF_SIZE - 1);
}

int main(void)
{
    CT_RUN(test_project_codes_have_names_and_messages);
    CT_RUN(test_errno_codes_use_system_text);
    CT_RUN(test_errbuf_set_and_wrap);
    CT_RUN(test_errbuf_truncates_safely);
    return 0;
}
