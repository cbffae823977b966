/*
 * test_ct_time.c - monotonic readings advance, deadlines compute and clamp, NEVER never
 * passes.
 */
#include "ct_test.h"
#include "ct_time.h"

static void test_clock_advances(void)
{
    int64_t a = ct_time_ns();
    ct_sleep_ms(20);
    int64_t b = ct_time_ns();
    CT_ASSERT_GE(b - a, 19 * 1000000LL);
    CT_ASSERT_LT(b - a, 5000 * 1000000LL);
    CT_ASSERT(ct_time_unix_s() > 1.6e9); /* after 2020: the wall clock is real time */
}

static void test_deadlines(void)
{
    int64_t d = ct_deadline_after_ms(50);
    CT_ASSERT(!ct_deadline_passed(d));
    CT_ASSERT_LE(ct_deadline_left_ms(d), 50);
    CT_ASSERT_GT(ct_deadline_poll_ms(d), 0);
    ct_sleep_ms(60);
    CT_ASSERT(ct_deadline_passed(d));
    CT_ASSERT_EQ(ct_deadline_left_ms(d), 0);
    CT_ASSERT_EQ(ct_deadline_poll_ms(d), 0);

    int64_t never = ct_deadline_after_ms(-1);
    CT_ASSERT_EQ(never, CT_DEADLINE_NEVER);
    CT_ASSERT(!ct_deadline_passed(never));
    CT_ASSERT_EQ(ct_deadline_poll_ms(never), -1);
    CT_ASSERT_EQ(ct_deadline_left_ms(never), CT_DEADLINE_NEVER);
    /* A huge timeout saturates instead of overflowing. */
    CT_ASSERT_EQ(ct_deadline_after_ms(INT64_MAX - 5), CT_DEADLINE_NEVER);
    CT_ASSERT_EQ(ct_deadline_poll_ms(ct_deadline_after_ms(INT64_MAX / 4)), 2147483647);
}

int main(void)
{
    CT_RUN(test_clock_advances);
    CT_RUN(test_deadlines);
    return 0;
}
