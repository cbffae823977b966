/*
 * test_ct_parse.c - the strict text-to-value converters: what they accept (Python int()'s
 * forms, torchrun's boolean spellings, size suffixes) and the one-line messages for what
 * they reject.
 */
#include "ct_parse.h"
#include "ct_test.h"

static void test_int_accepts_python_forms(void)
{
    int64_t v = 0;
    CT_ASSERT_OK(ct_parse_int64("2", 0, 10, &v, NULL));
    CT_ASSERT_EQ(v, 2);
    CT_ASSERT_OK(ct_parse_int64(" 2", 0, 10, &v, NULL));
    CT_ASSERT_EQ(v, 2);
    CT_ASSERT_OK(ct_parse_int64("+2 ", 0, 10, &v, NULL));
    CT_ASSERT_EQ(v, 2);
    CT_ASSERT_OK(ct_parse_int64("-7", -10, 10, &v, NULL));
    CT_ASSERT_EQ(v, -7);
    CT_ASSERT_OK(ct_parse_int64("9223372036854775807", 0, INT64_MAX, &v, NULL));
    CT_ASSERT_EQ_U64(v, INT64_MAX);
    CT_ASSERT_OK(ct_parse_int64("-9223372036854775808", INT64_MIN, 0, &v, NULL));
    CT_ASSERT(v == INT64_MIN);
}

static void test_int_rejects_with_message(void)
{
    ct_errbuf_t eb;
    int64_t v = 42;
    const char *junk[] = {"", "   ", "abc", "2abc", "2.0", "0x10", "1e3", "+", "-", "2 3", "--2",
                          "1_000"};
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
        CT_ASSERT_ERR(ct_parse_int64(junk[i], 0, 100, &v, &eb), CT_EPARSE);
        CT_ASSERT(strchr(eb.msg, '\n') == NULL);
    }
    CT_ASSERT_EQ(v, 42); /* untouched on failure */
    ct_parse_int64("2abc", 0, 100, &v, &eb);
    CT_ASSERT_STR_EQ(eb.msg, "\"2abc\" is not an integer");
    ct_parse_int64("", 0, 100, &v, &eb);
    CT_ASSERT_STR_EQ(eb.msg, "empty value (expected an integer)");

    CT_ASSERT_ERR(ct_parse_int64("101", 0, 100, &v, &eb), CT_ERANGE_VALUE);
    CT_ASSERT_STR_EQ(eb.msg, "101 is out of range (expected 0..100)");
    CT_ASSERT_ERR(ct_parse_int64("99999999999999999999", 0, 100, &v, &eb), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_parse_int64("9223372036854775808", INT64_MIN, INT64_MAX, &v, &eb),
                  CT_ERANGE_VALUE);
    int iv;
    CT_ASSERT_ERR(ct_parse_int("4294967296", 0, 2147483647, &iv, &eb), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_parse_int64(NULL, 0, 1, &v, &eb), CT_EPARSE);

    /* Control characters are escaped so the message stays on one line. */
    CT_ASSERT_ERR(ct_parse_int64("1\n2", 0, 100, &v, &eb), CT_EPARSE);
    CT_ASSERT_STR_EQ(eb.msg, "\"1\\x0a2\" is not an integer");
}

static void test_double(void)
{
    double d = 0;
    CT_ASSERT_OK(ct_parse_double("0.1", 0, 10, &d, NULL));
    CT_ASSERT_CLOSE(d, 0.1, 0, 1e-15);
    CT_ASSERT_OK(ct_parse_double("5", 0, 10, &d, NULL));
    CT_ASSERT_CLOSE(d, 5.0, 0, 0);
    CT_ASSERT_OK(ct_parse_double(" 1e-3 ", 0, 10, &d, NULL));
    CT_ASSERT_CLOSE(d, 1e-3, 0, 1e-15);
    ct_errbuf_t eb;
    CT_ASSERT_ERR(ct_parse_double("nan", 0, 10, &d, &eb), CT_EPARSE);
    CT_ASSERT_ERR(ct_parse_double("inf", 0, 10, &d, &eb), CT_EPARSE);
    CT_ASSERT_ERR(ct_parse_double("0x1p3", 0, 10, &d, &eb), CT_EPARSE);
    CT_ASSERT_ERR(ct_parse_double("1.2.3", 0, 10, &d, &eb), CT_EPARSE);
    CT_ASSERT_ERR(ct_parse_double("", 0, 10, &d, &eb), CT_EPARSE);
    CT_ASSERT_ERR(ct_parse_double("-1", 0, 10, &d, &eb), CT_ERANGE_VALUE);
    CT_ASSERT_STR_EQ(eb.msg, "-1 is out of range (expected 0..10)");
    CT_ASSERT_ERR(ct_parse_double("1e999", 0, 1e300, &d, &eb), CT_ERANGE_VALUE);
}

static void test_bool_spellings(void)
{
    const char *yes[] = {"1", "true", "TRUE", "True", "yes", "Y", "t", "on", " 1 ", "2", "-1"};
    const char *no[] = {"0", "false", "False", "no", "N", "f", "off", "00"};
    bool b;
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        b = false;
        CT_ASSERT_OK(ct_parse_bool(yes[i], &b, NULL));
        CT_ASSERT_MSG(b, "%s should be true", yes[i]);
    }
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        b = true;
        CT_ASSERT_OK(ct_parse_bool(no[i], &b, NULL));
        CT_ASSERT_MSG(!b, "%s should be false", no[i]);
    }
    ct_errbuf_t eb;
    CT_ASSERT_ERR(ct_parse_bool("maybe", &b, &eb), CT_EPARSE);
    CT_ASSERT_STR_EQ(eb.msg, "\"maybe\" is not a boolean (expected 1/0, true/false, yes/no, on/off)");
    CT_ASSERT_ERR(ct_parse_bool("", &b, &eb), CT_EPARSE);
    CT_ASSERT_ERR(ct_parse_bool("truex", &b, &eb), CT_EPARSE);
}

static void test_size(void)
{
    uint64_t s = 0;
    CT_ASSERT_OK(ct_parse_size("4096", UINT64_MAX, &s, NULL));
    CT_ASSERT_EQ_U64(s, 4096);
    CT_ASSERT_OK(ct_parse_size("8K", UINT64_MAX, &s, NULL));
    CT_ASSERT_EQ_U64(s, 8192);
    CT_ASSERT_OK(ct_parse_size("8KiB", UINT64_MAX, &s, NULL));
    CT_ASSERT_EQ_U64(s, 8192);
    CT_ASSERT_OK(ct_parse_size("64m", UINT64_MAX, &s, NULL));
    CT_ASSERT_EQ_U64(s, 64ull << 20);
    CT_ASSERT_OK(ct_parse_size("2GB", UINT64_MAX, &s, NULL));
    CT_ASSERT_EQ_U64(s, 2ull << 30);
    ct_errbuf_t eb;
    CT_ASSERT_ERR(ct_parse_size("8X", UINT64_MAX, &s, &eb), CT_EPARSE);
    CT_ASSERT_ERR(ct_parse_size("K", UINT64_MAX, &s, &eb), CT_EPARSE);
    CT_ASSERT_ERR(ct_parse_size("-1", UINT64_MAX, &s, &eb), CT_EPARSE);
    CT_ASSERT_ERR(ct_parse_size("8Kx", UINT64_MAX, &s, &eb), CT_EPARSE);
    CT_ASSERT_ERR(ct_parse_size("17179869184T", UINT64_MAX, &s, &eb), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_parse_size("2M", 1 << 20, &s, &eb), CT_ERANGE_VALUE);
    CT_ASSERT_STR_EQ(eb.msg, "2M is out of range (at most 1048576 bytes)");
}

int main(void)
{
    CT_RUN(test_int_accepts_python_forms);
    CT_RUN(test_int_rejects_with_message);
    CT_RUN(test_double);
    CT_RUN(test_bool_spellings);
    CT_RUN(test_size);
    return 0;
}
