/*
 * ct_log.c - formatting and the single-write output of ct_log lines. The prefix and level are
 * process-wide: programs set them once in main() (and a worker again once it knows its rank).
 */
#include "ct_log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int ct_log__threshold = CT_LOG_INFO;
static char ct_log__log_prefix[64] = "";
static ct_log_output_fn ct_log__log_output;
static void *ct_log__log_output_arg;

static const char *const ct_log__level_names[] = {"debug", "info", "warn", "error", "off"};

void ct_log_set_prefix(const char *prefix)
{
    snprintf(ct_log__log_prefix, sizeof ct_log__log_prefix, "%s", prefix != NULL ? prefix : "");
}

void ct_log_set_output(ct_log_output_fn fn, void *arg)
{
    ct_log__log_output = fn;
    ct_log__log_output_arg = arg;
}

int ct_log_parse_level(const char *text, ct_log_level_t *out, ct_errbuf_t *eb)
{
    if (text == NULL || text[0] == '\0')
        return ct_errbuf_set(eb, CT_EPARSE,
                             "empty log level (expected debug, info, warn, error or off)");
    for (int i = 0; i <= CT_LOG_OFF; i++) {
        if (strcasecmp(text, ct_log__level_names[i]) == 0) {
            *out = (ct_log_level_t)i;
            return 0;
        }
    }
    if (strcasecmp(text, "warning") == 0) {
        *out = CT_LOG_WARN;
        return 0;
    }
    if (text[0] >= '0' && text[0] <= '4' && text[1] == '\0') {
        *out = (ct_log_level_t)(text[0] - '0');
        return 0;
    }
    return ct_errbuf_set(
        eb, CT_EPARSE, "unknown log level \"%s\" (expected debug, info, warn, error or off)", text);
}

int ct_log_init(const char *prefix, ct_errbuf_t *eb)
{
    ct_log_set_prefix(prefix);
    const char *env = getenv("CT_LOG_LEVEL");
    if (env == NULL)
        return 0;
    ct_log_level_t level;
    int rc = ct_log_parse_level(env, &level, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, rc, "CT_LOG_LEVEL");
    ct_log_set_level(level);
    return 0;
}

void ct_log_set_level(ct_log_level_t level)
{
    if ((int)level < CT_LOG_DEBUG)
        level = CT_LOG_DEBUG;
    if ((int)level > CT_LOG_OFF)
        level = CT_LOG_OFF;
    ct_log__threshold = (int)level;
}

ct_log_level_t ct_log_get_level(void)
{
    return (ct_log_level_t)ct_log__threshold;
}

void ct_log_write(int level, const char *fmt, ...)
{
    if (level < CT_LOG_DEBUG || level >= CT_LOG_OFF)
        return;
    int saved_errno = errno; /* logging must not clobber the caller's errno */
    char line[4096];
    size_t cap = sizeof line - 1; /* room kept for the newline */
    int n = snprintf(line, cap, "%s%s%s: ", ct_log__log_prefix, ct_log__log_prefix[0] ? " " : "",
                     ct_log__level_names[level]);
    size_t len = n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;

    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + len, cap - len, fmt, ap);
    va_end(ap);
    if (m > 0) {
        if ((size_t)m >= cap - len) {
            len = cap - 1;
            memcpy(line + len - 3, "...", 3);
        } else {
            len += (size_t)m;
        }
    }
    while (len > 0 && line[len - 1] == '\n')
        len--; /* the message's own trailing newline would make an empty line */
    line[len++] = '\n';

    if (ct_log__log_output != NULL) {
        ct_log__log_output(line, len, ct_log__log_output_arg);
        errno = saved_errno;
        return;
    }
    const char *p = line;
    while (len > 0) {
        ssize_t w = write(STDERR_FILENO, p, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        p += w;
        len -= (size_t)w;
    }
    errno = saved_errno;
}
