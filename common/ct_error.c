/*
 * ct_error.c - ct_strerror / ct_err_name from the X-macro list, and the error buffer helpers.
 * Negated errno values are described with glibc's thread-safe strerrordesc_np and
 * strerrorname_np rather than the non-reentrant strerror.
 */
#include "ct_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *ct_strerror(int code)
{
    switch (code) {
#define CT__ERR_MSG(name, value, msg)                                                             \
    case value:                                                                                   \
        return msg;
        CT_ERRNO_MAP(CT__ERR_MSG)
#undef CT__ERR_MSG
    case 0:
        return "success";
    default:
        break;
    }
    if (code < 0 && code > -4096) {
        const char *text = strerrordesc_np(-code);
        if (text != NULL)
            return text;
    }
    return "unknown error";
}

const char *ct_err_name(int code)
{
    switch (code) {
#define CT__ERR_NAME(name, value, msg)                                                            \
    case value:                                                                                   \
        return #name;
        CT_ERRNO_MAP(CT__ERR_NAME)
#undef CT__ERR_NAME
    case 0:
        return "OK";
    default:
        break;
    }
    if (code < 0 && code > -4096) {
        const char *name = strerrorname_np(-code);
        if (name != NULL)
            return name;
    }
    return "UNKNOWN";
}

int ct_errbuf_set(ct_errbuf_t *eb, int code, const char *fmt, ...)
{
    if (eb != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(eb->msg, sizeof eb->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

int ct_errbuf_wrap(ct_errbuf_t *eb, int code, const char *fmt, ...)
{
    if (eb == NULL)
        return code;
    char prefix[CT_ERRBUF_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);

    /* Build "prefix: old" in a buffer large enough for both, then cut to size. */
    char joined[2 * CT_ERRBUF_SIZE + 4];
    const char *rest = eb->msg[0] != '\0' ? eb->msg : ct_strerror(code);
    snprintf(joined, sizeof joined, "%s: %.*s", prefix, CT_ERRBUF_SIZE - 1, rest);
    size_t n = strlen(joined);
    if (n >= sizeof eb->msg)
        n = sizeof eb->msg - 1;
    memcpy(eb->msg, joined, n);
    eb->msg[n] = '\0';
    return code;
}

void ct_errbuf_clear(ct_errbuf_t *eb)
{
    if (eb != NULL)
        eb->msg[0] = '\0';
}
