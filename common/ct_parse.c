/*
 * ct_parse.c - strtoll/strtod wrapped with the checks atoi and friends leave out: the whole
 * text must be consumed, overflow is an error, and every message quotes the offending text
 * (shortened when it is long, with control characters escaped so a message stays one line).
 */
#include "ct_parse.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Copies text into buf for quoting in a message: at most 64 characters, control and non-ASCII
 * bytes as \xNN. */
static const char *ct_parse__quote(const char *text, char *buf, size_t size)
{
    size_t o = 0;
    for (size_t i = 0; text[i] != '\0'; i++) {
        unsigned char c = (unsigned char)text[i];
        if (o + 8 >= size || i >= 64) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\')
            o += (size_t)snprintf(buf + o, size - o, "\\x%02x", c);
        else
            buf[o++] = (char)c;
    }
    buf[o] = '\0';
    return buf;
}

/* Returns a pointer past leading blanks and sets *end_out to the end of the text without its
 * trailing blanks. */
static const char *ct_parse__trim(const char *text, const char **end_out)
{
    while (*text != '\0' && isspace((unsigned char)*text))
        text++;
    const char *end = text + strlen(text);
    while (end > text && isspace((unsigned char)end[-1]))
        end--;
    *end_out = end;
    return text;
}

int ct_parse_int64(const char *text, int64_t min, int64_t max, int64_t *out, ct_errbuf_t *eb)
{
    char q[96];
    if (text == NULL)
        return ct_errbuf_set(eb, CT_EPARSE, "missing value (expected an integer)");
    const char *end;
    const char *p = ct_parse__trim(text, &end);
    if (p == end)
        return ct_errbuf_set(eb, CT_EPARSE, "empty value (expected an integer)");
    const char *d = p;
    if (*d == '+' || *d == '-')
        d++;
    if (d == end)
        return ct_errbuf_set(eb, CT_EPARSE, "\"%s\" is not an integer",
                             ct_parse__quote(text, q, sizeof q));
    for (const char *c = d; c < end; c++) {
        if (!isdigit((unsigned char)*c))
            return ct_errbuf_set(eb, CT_EPARSE, "\"%s\" is not an integer",
                                 ct_parse__quote(text, q, sizeof q));
    }
    char digits[32];
    size_t n = (size_t)(end - p);
    if (n >= sizeof digits)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "\"%s\" is out of range (expected %lld..%lld)",
                             ct_parse__quote(text, q, sizeof q), (long long)min, (long long)max);
    memcpy(digits, p, n);
    digits[n] = '\0';
    errno = 0;
    long long v = strtoll(digits, NULL, 10);
    if (errno == ERANGE || v < min || v > max)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "%s is out of range (expected %lld..%lld)",
                             ct_parse__quote(text, q, sizeof q), (long long)min, (long long)max);
    *out = v;
    return 0;
}

int ct_parse_int(const char *text, int min, int max, int *out, ct_errbuf_t *eb)
{
    int64_t v;
    int rc = ct_parse_int64(text, min, max, &v, eb);
    if (rc == 0)
        *out = (int)v;
    return rc;
}

int ct_parse_double(const char *text, double min, double max, double *out, ct_errbuf_t *eb)
{
    char q[96];
    if (text == NULL)
        return ct_errbuf_set(eb, CT_EPARSE, "missing value (expected a number)");
    const char *end;
    const char *p = ct_parse__trim(text, &end);
    if (p == end)
        return ct_errbuf_set(eb, CT_EPARSE, "empty value (expected a number)");
    /* strtod also takes hex floats, "inf" and "nan"; only plain decimals are numbers here. */
    for (const char *c = p; c < end; c++) {
        if (!isdigit((unsigned char)*c) && strchr("+-.eE", *c) == NULL)
            return ct_errbuf_set(eb, CT_EPARSE, "\"%s\" is not a number",
                                 ct_parse__quote(text, q, sizeof q));
    }
    char buf[64];
    size_t n = (size_t)(end - p);
    if (n >= sizeof buf)
        return ct_errbuf_set(eb, CT_EPARSE, "\"%s\" is not a number",
                             ct_parse__quote(text, q, sizeof q));
    memcpy(buf, p, n);
    buf[n] = '\0';
    char *stop;
    errno = 0;
    double v = strtod(buf, &stop);
    if (stop != buf + n || stop == buf)
        return ct_errbuf_set(eb, CT_EPARSE, "\"%s\" is not a number",
                             ct_parse__quote(text, q, sizeof q));
    if (errno == ERANGE || !isfinite(v) || v < min || v > max)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "%s is out of range (expected %g..%g)",
                             ct_parse__quote(text, q, sizeof q), min, max);
    *out = v;
    return 0;
}

int ct_parse_bool(const char *text, bool *out, ct_errbuf_t *eb)
{
    static const char *const yes[] = {"1", "true", "yes", "t", "y", "on"};
    static const char *const no[] = {"0", "false", "no", "f", "n", "off"};
    char q[96];
    if (text == NULL)
        return ct_errbuf_set(eb, CT_EPARSE, "missing value (expected a boolean)");
    const char *end;
    const char *p = ct_parse__trim(text, &end);
    size_t n = (size_t)(end - p);
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strlen(yes[i]) == n && strncasecmp(p, yes[i], n) == 0) {
            *out = true;
            return 0;
        }
        if (strlen(no[i]) == n && strncasecmp(p, no[i], n) == 0) {
            *out = false;
            return 0;
        }
    }
    int64_t v;
    if (n > 0 && ct_parse_int64(text, INT64_MIN, INT64_MAX, &v, NULL) == 0) {
        *out = v != 0;
        return 0;
    }
    return ct_errbuf_set(eb, CT_EPARSE,
                         "\"%s\" is not a boolean (expected 1/0, true/false, yes/no, on/off)",
                         ct_parse__quote(text, q, sizeof q));
}

int ct_parse_size(const char *text, uint64_t max, uint64_t *out, ct_errbuf_t *eb)
{
    char q[96];
    if (text == NULL)
        return ct_errbuf_set(eb, CT_EPARSE, "missing value (expected a size)");
    const char *end;
    const char *p = ct_parse__trim(text, &end);
    const char *d = p;
    while (d < end && isdigit((unsigned char)*d))
        d++;
    if (d == p)
        return ct_errbuf_set(eb, CT_EPARSE, "\"%s\" is not a size (expected e.g. 4096, 8K, 64M)",
                             ct_parse__quote(text, q, sizeof q));
    size_t suffix_len = (size_t)(end - d);
    unsigned shift = 0;
    if (suffix_len > 0) {
        char s = (char)toupper((unsigned char)*d);
        const char *rest = d + 1;
        size_t rest_len = suffix_len - 1;
        if (s == 'K')
            shift = 10;
        else if (s == 'M')
            shift = 20;
        else if (s == 'G')
            shift = 30;
        else if (s == 'T')
            shift = 40;
        if (shift == 0 ||
            !(rest_len == 0 || (rest_len == 1 && (rest[0] == 'B' || rest[0] == 'b')) ||
              (rest_len == 2 && strncasecmp(rest, "iB", 2) == 0)))
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "\"%s\" is not a size (expected e.g. 4096, 8K, 64M)",
                                 ct_parse__quote(text, q, sizeof q));
    }
    char digits[32];
    size_t n = (size_t)(d - p);
    if (n >= sizeof digits)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "%s is too large",
                             ct_parse__quote(text, q, sizeof q));
    memcpy(digits, p, n);
    digits[n] = '\0';
    errno = 0;
    unsigned long long v = strtoull(digits, NULL, 10);
    if (errno == ERANGE || (shift > 0 && v > (UINT64_MAX >> shift)))
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "%s is too large",
                             ct_parse__quote(text, q, sizeof q));
    uint64_t bytes = (uint64_t)v << shift;
    if (bytes > max)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "%s is out of range (at most %llu bytes)",
                             ct_parse__quote(text, q, sizeof q), (unsigned long long)max);
    *out = bytes;
    return 0;
}
