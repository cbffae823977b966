/*
 * ct_log.h - leveled logging to stderr for every ctrun program.
 *
 * One line per call, written with a single write(2) so lines from several processes sharing a
 * terminal never interleave mid-line. Each line carries the program's prefix ("[ctrun]",
 * "[rank 1/4]") and the level. The threshold comes from CT_LOG_LEVEL (debug, info, warn,
 * error, off; default info) and is tested in the macro, so a disabled debug line costs one
 * comparison and never evaluates its arguments' formatting.
 *
 * stdout is reserved for data and results; nothing here writes to it. A program whose own output
 * must never block (ctrun's agent: launcher/core/ctrun_console.h) sets an output function, and every
 * line goes there instead of to stderr.
 */
#ifndef CT_LOG_H
#define CT_LOG_H

#include <stddef.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ct_log_level {
    CT_LOG_DEBUG = 0,
    CT_LOG_INFO = 1,
    CT_LOG_WARN = 2,
    CT_LOG_ERROR = 3,
    CT_LOG_OFF = 4,
} ct_log_level_t;

/* The current threshold; read through ct_log(), set through the functions below. */
extern int ct_log__threshold;

/* Sets the line prefix (copied; at most 63 bytes kept) and reads CT_LOG_LEVEL. An invalid
 * CT_LOG_LEVEL keeps the default level and returns CT_EPARSE with the reason in eb, so that
 * main() can report it; logging still works either way. */
int ct_log_init(const char *prefix, ct_errbuf_t *eb);

/* Replaces the prefix only (a worker learns its rank after start-up). */
void ct_log_set_prefix(const char *prefix);

/* Parses a level name ("debug", "info", "warn"/"warning", "error", "off"; any case) or digit
 * 0..4. Returns 0 or CT_EPARSE. */
int ct_log_parse_level(const char *text, ct_log_level_t *out, ct_errbuf_t *eb);

void ct_log_set_level(ct_log_level_t level);
ct_log_level_t ct_log_get_level(void);

/* Where finished lines go instead of write(2) on stderr: fn gets each whole line, newline
 * included, and must not log. NULL restores the direct write. Set it while no other thread
 * logs (before a program starts its threads, after it has joined them). */
typedef void (*ct_log_output_fn)(const char *line, size_t nbytes, void *arg);
void ct_log_set_output(ct_log_output_fn fn, void *arg);

/* Writes one line: "<prefix> <level>: <message>\n". Lines longer than 4 KiB are cut and end
 * in "...". Use through ct_log(). */
void ct_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define ct_log(level, ...)                                                                        \
    do {                                                                                          \
        if ((int)(level) >= ct_log__threshold)                                                    \
            ct_log_write((int)(level), __VA_ARGS__);                                              \
    } while (0)

#define ct_log_debug(...) ct_log(CT_LOG_DEBUG, __VA_ARGS__)
#define ct_log_info(...)  ct_log(CT_LOG_INFO, __VA_ARGS__)
#define ct_log_warn(...)  ct_log(CT_LOG_WARN, __VA_ARGS__)
#define ct_log_error(...) ct_log(CT_LOG_ERROR, __VA_ARGS__)

#ifdef __cplusplus
}
#endif

#endif /* CT_LOG_H */
