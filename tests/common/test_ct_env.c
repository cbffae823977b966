/*
 * test_ct_env.c - typed environment reading: defaults when unset, values when valid, and a
 * one-line error naming the variable and quoting the value when not.
 */
#include <stdlib.h>

#include "ct_env.h"
#include "ct_test.h"

static void test_unset_gives_default(void)
{
    unsetenv("CT_TEST_INT");
    int v = -1;
    bool found = true;
    CT_ASSERT_OK(ct_env_int("CT_TEST_INT", 0, 10, 7, &v, &found, NULL));
    CT_ASSERT_EQ(v, 7);
    CT_ASSERT(!found);
    CT_ASSERT(!ct_env_is_set("CT_TEST_INT"));
    CT_ASSERT(ct_env_str("CT_TEST_INT") == NULL);
    bool b = false;
    CT_ASSERT_OK(ct_env_bool("CT_TEST_INT", true, &b, NULL, NULL));
    CT_ASSERT(b);
}

static void test_valid_values(void)
{
    setenv("CT_TEST_INT", "3", 1);
    int v = -1;
    bool found = false;
    CT_ASSERT_OK(ct_env_int("CT_TEST_INT", 0, 10, 7, &v, &found, NULL));
    CT_ASSERT_EQ(v, 3);
    CT_ASSERT(found);
    setenv("CT_TEST_BOOL", "True", 1);
    bool b = false;
    CT_ASSERT_OK(ct_env_bool("CT_TEST_BOOL", false, &b, &found, NULL));
    CT_ASSERT(b && found);
    setenv("CT_TEST_DBL", "0.25", 1);
    double d = 0;
    CT_ASSERT_OK(ct_env_double("CT_TEST_DBL", 0, 1, 0.5, &d, NULL, NULL));
    CT_ASSERT_CLOSE(d, 0.25, 0, 0);
    int64_t big = 0;
    setenv("CT_TEST_I64", "1099511627776", 1);
    CT_ASSERT_OK(ct_env_int64("CT_TEST_I64", 0, INT64_MAX, 0, &big, NULL, NULL));
    CT_ASSERT_EQ(big, 1099511627776LL);
}

static void test_errors_name_variable_and_value(void)
{
    ct_errbuf_t eb;
    int v = 5;
    setenv("WORLD_SIZE", "0", 1);
    CT_ASSERT_ERR(ct_env_int("WORLD_SIZE", 1, 1048576, 1, &v, NULL, &eb), CT_ERANGE_VALUE);
    CT_ASSERT_STR_EQ(eb.msg,
                     "environment variable WORLD_SIZE: 0 is out of range (expected 1..1048576)");
    CT_ASSERT_EQ(v, 5);

    setenv("RANK", "abc", 1);
    CT_ASSERT_ERR(ct_env_int("RANK", 0, 100, 0, &v, NULL, &eb), CT_EPARSE);
    CT_ASSERT_STR_EQ(eb.msg, "environment variable RANK: \"abc\" is not an integer");

    /* Set but empty is an error, not the default. */
    setenv("LOCAL_RANK", "", 1);
    bool found = false;
    CT_ASSERT_ERR(ct_env_int("LOCAL_RANK", 0, 100, 0, &v, &found, &eb), CT_EPARSE);
    CT_ASSERT(found);
    CT_ASSERT_STR_EQ(eb.msg, "environment variable LOCAL_RANK: empty value (expected an integer)");

    setenv("PET_STANDALONE", "sometimes", 1);
    bool b;
    CT_ASSERT_ERR(ct_env_bool("PET_STANDALONE", false, &b, NULL, &eb), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "PET_STANDALONE");
    CT_ASSERT_STR_CONTAINS(eb.msg, "\"sometimes\"");

    setenv("CT_TEST_DBL", "fast", 1);
    double d;
    CT_ASSERT_ERR(ct_env_double("CT_TEST_DBL", 0, 1, 0, &d, NULL, &eb), CT_EPARSE);
    CT_ASSERT_STR_EQ(eb.msg, "environment variable CT_TEST_DBL: \"fast\" is not a number");
    CT_ASSERT(strchr(eb.msg, '\n') == NULL);
}

int main(void)
{
    CT_RUN(test_unset_gives_default);
    CT_RUN(test_valid_values);
    CT_RUN(test_errors_name_variable_and_value);
    return 0;
}
