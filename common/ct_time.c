/*
 * ct_time.c - clock readings and deadline arithmetic over clock_gettime.
 */
#include "ct_time.h"

#include <errno.h>
#include <limits.h>
#include <time.h>

static int64_t ct_time__clock_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t ct_time_ns(void)
{
    return ct_time__clock_ns(CLOCK_MONOTONIC);
}

int64_t ct_time_ms(void)
{
    return ct_time_ns() / 1000000;
}

double ct_time_unix_s(void)
{
    return (double)ct_time__clock_ns(CLOCK_REALTIME) * 1e-9;
}

int64_t ct_deadline_after_ms(int64_t timeout_ms)
{
    if (timeout_ms < 0)
        return CT_DEADLINE_NEVER;
    int64_t now = ct_time_ms();
    if (timeout_ms > CT_DEADLINE_NEVER - now)
        return CT_DEADLINE_NEVER;
    return now + timeout_ms;
}

int64_t ct_deadline_left_ms(int64_t deadline_ms)
{
    if (deadline_ms == CT_DEADLINE_NEVER)
        return CT_DEADLINE_NEVER;
    int64_t left = deadline_ms - ct_time_ms();
    return left > 0 ? left : 0;
}

int ct_deadline_poll_ms(int64_t deadline_ms)
{
    if (deadline_ms == CT_DEADLINE_NEVER)
        return -1;
    int64_t left = ct_deadline_left_ms(deadline_ms);
    return left > INT_MAX ? INT_MAX : (int)left;
}

bool ct_deadline_passed(int64_t deadline_ms)
{
    return deadline_ms != CT_DEADLINE_NEVER && ct_time_ms() >= deadline_ms;
}

void ct_sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec req = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000};
    while (nanosleep(&req, &req) != 0 && errno == EINTR) {
    }
}
