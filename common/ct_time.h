/*
 * ct_time.h - monotonic time and deadlines.
 *
 * Everything that waits in ctrun (store operations, collectives, process teardown) takes a
 * deadline on CLOCK_MONOTONIC, never the wall clock, so a clock step cannot shorten or extend
 * a timeout. A deadline is an absolute time in milliseconds; CT_DEADLINE_NEVER means "no
 * limit". Wall-clock time is offered separately, for timestamps that people read.
 */
#ifndef CT_TIME_H
#define CT_TIME_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CT_DEADLINE_NEVER INT64_MAX

/* Monotonic clock readings. */
int64_t ct_time_ns(void);
int64_t ct_time_ms(void);

/* Wall-clock (CLOCK_REALTIME) time since the Unix epoch, for reports and error files. */
double ct_time_unix_s(void);

/* The deadline timeout_ms from now; a negative timeout means CT_DEADLINE_NEVER. */
int64_t ct_deadline_after_ms(int64_t timeout_ms);

/* Milliseconds left before deadline (0 once it has passed; INT64_MAX for NEVER). */
int64_t ct_deadline_left_ms(int64_t deadline_ms);

/* The milliseconds left as an int for poll(2): -1 (infinite) for NEVER, else clamped to
 * [0, INT_MAX]. */
int ct_deadline_poll_ms(int64_t deadline_ms);

bool ct_deadline_passed(int64_t deadline_ms);

/* Sleeps for ms milliseconds, resuming after signals. */
void ct_sleep_ms(int64_t ms);

#ifdef __cplusplus
}
#endif

#endif /* CT_TIME_H */
