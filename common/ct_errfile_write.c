/*
 * ct_errfile_write.c - the async-signal-safe error-file writer (the one writer of the format;
 * ct_errfile.c reads and copies). Everything below the target
 * open/close pair uses only functions POSIX lists as async-signal-safe (openat, write, close,
 * renameat, unlinkat, getpid) and a stack buffer; JSON escaping and number formatting are done
 * by hand because snprintf is not on that list.
 */
#include "ct_errfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int ct_errfile_target_open(ct_errfile_target_t *t, const char *path, ct_errbuf_t *eb)
{
    t->dirfd = -1;
    t->name[0] = '\0';
    const char *slash = strrchr(path, '/');
    const char *base = slash != NULL ? slash + 1 : path;
    if (base[0] == '\0')
        return ct_errbuf_set(eb, -EISDIR, "error file \"%s\" names a directory", path);
    if (strlen(base) >= sizeof t->name)
        return ct_errbuf_set(eb, CT_ELIMIT, "error file \"%s\": name longer than %d bytes", path,
                             CT_ERRFILE_NAME_MAX - 1);
    char dir[4096];
    if (slash == NULL) {
        strcpy(dir, ".");
    } else if (slash == path) {
        strcpy(dir, "/");
    } else {
        size_t n = (size_t)(slash - path);
        if (n >= sizeof dir)
            return ct_errbuf_set(eb, CT_ELIMIT, "error file path longer than %zu bytes",
                                 sizeof dir - 1);
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        int rc = -errno;
        return ct_errbuf_set(eb, rc, "error file \"%s\": cannot open its directory: %s", path,
                             ct_strerror(rc));
    }
    t->dirfd = fd;
    memcpy(t->name, base, strlen(base) + 1);
    return 0;
}

void ct_errfile_target_close(ct_errfile_target_t *t)
{
    if (t->dirfd >= 0)
        close(t->dirfd);
    t->dirfd = -1;
}

/* ---- a buffered, signal-safe output stream ------------------------------------------------ */

typedef struct ct_errfile_write__out {
    int fd;
    int err; /* first write error (negated errno), sticky */
    size_t len;
    char buf[1024];
} ct_errfile_write__out_t;

static void ct_errfile_write__out_flush(ct_errfile_write__out_t *o)
{
    const char *p = o->buf;
    size_t left = o->len;
    while (left > 0 && o->err == 0) {
        ssize_t w = write(o->fd, p, left);
        if (w < 0) {
            if (errno != EINTR)
                o->err = -errno;
            continue;
        }
        p += w;
        left -= (size_t)w;
    }
    o->len = 0;
}

static void ct_errfile_write__out_char(ct_errfile_write__out_t *o, char c)
{
    if (o->len == sizeof o->buf)
        ct_errfile_write__out_flush(o);
    o->buf[o->len++] = c;
}

static void ct_errfile_write__out_str(ct_errfile_write__out_t *o, const char *s)
{
    while (*s != '\0')
        ct_errfile_write__out_char(o, *s++);
}

static void ct_errfile_write__out_u64(ct_errfile_write__out_t *o, uint64_t v)
{
    char digits[24];
    int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (n > 0)
        ct_errfile_write__out_char(o, digits[--n]);
}

static void ct_errfile_write__out_u16_escape(ct_errfile_write__out_t *o, unsigned cp)
{
    static const char hex[] = "0123456789abcdef";
    ct_errfile_write__out_str(o, "\\u");
    for (int shift = 12; shift >= 0; shift -= 4)
        ct_errfile_write__out_char(o, hex[(cp >> shift) & 0xF]);
}

/* Decodes one UTF-8 sequence at s (n bytes left). Returns its length, or 0 when s does not
 * start a valid sequence (overlong forms, surrogates and values above U+10FFFF are invalid). */
static size_t ct_errfile_write__utf8_decode(const unsigned char *s, size_t n, unsigned *cp)
{
    unsigned c = s[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        *cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        *cp = c & 0x0F;
        if (c == 0xE0)
            lo = 0xA0;
        if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        *cp = c & 0x07;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F;
    } else {
        return 0;
    }
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    *cp = (*cp << 6) | (s[1] & 0x3F);
    for (size_t i = 2; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        *cp = (*cp << 6) | (s[i] & 0x3F);
    }
    return len;
}

/* A JSON string literal in Python's ensure_ascii style. */
static void ct_errfile_write__out_json_string(ct_errfile_write__out_t *o, const char *text)
{
    const unsigned char *s = (const unsigned char *)(text != NULL ? text : "");
    size_t n = strlen((const char *)s);
    ct_errfile_write__out_char(o, '"');
    while (n > 0) {
        unsigned cp;
        size_t len = ct_errfile_write__utf8_decode(s, n, &cp);
        if (len == 0) {
            cp = 0xFFFD;
            len = 1;
        }
        s += len;
        n -= len;
        switch (cp) {
        case '"': ct_errfile_write__out_str(o, "\\\""); continue;
        case '\\': ct_errfile_write__out_str(o, "\\\\"); continue;
        case '\n': ct_errfile_write__out_str(o, "\\n"); continue;
        case '\r': ct_errfile_write__out_str(o, "\\r"); continue;
        case '\t': ct_errfile_write__out_str(o, "\\t"); continue;
        case '\b': ct_errfile_write__out_str(o, "\\b"); continue;
        case '\f': ct_errfile_write__out_str(o, "\\f"); continue;
        default: break;
        }
        if (cp < 0x20 || (cp >= 0x80 && cp <= 0xFFFF)) {
            ct_errfile_write__out_u16_escape(o, cp);
        } else if (cp > 0xFFFF) {
            cp -= 0x10000;
            ct_errfile_write__out_u16_escape(o, 0xD800 | (cp >> 10));
            ct_errfile_write__out_u16_escape(o, 0xDC00 | (cp & 0x3FF));
        } else {
            ct_errfile_write__out_char(o, (char)cp);
        }
    }
    ct_errfile_write__out_char(o, '"');
}

/* ".<name>.tmp.<pid>" into buf (big enough: name is at most 255 bytes). */
static void ct_errfile_write__tmp_name(char *buf, const char *name)
{
    size_t n = 0;
    buf[n++] = '.';
    for (const char *p = name; *p != '\0'; p++)
        buf[n++] = *p;
    memcpy(buf + n, ".tmp.", 5);
    n += 5;
    char digits[16];
    int d = 0;
    unsigned long pid = (unsigned long)getpid();
    do {
        digits[d++] = (char)('0' + pid % 10);
        pid /= 10;
    } while (pid != 0);
    while (d > 0)
        buf[n++] = digits[--d];
    buf[n] = '\0';
}

int ct_errfile_write(const ct_errfile_target_t *t, const char *message, const char *callstack,
                     int64_t timestamp, int error_code)
{
    if (t->dirfd < 0)
        return -EBADF;
    char tmp[CT_ERRFILE_NAME_MAX + 32];
    ct_errfile_write__tmp_name(tmp, t->name);
    int fd = openat(t->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;

    ct_errfile_write__out_t o;
    o.fd = fd;
    o.err = 0;
    o.len = 0;
    ct_errfile_write__out_str(&o, "{\"message\": {\"message\": ");
    ct_errfile_write__out_json_string(&o, message);
    ct_errfile_write__out_str(&o, ", \"extraInfo\": {\"py_callstack\": ");
    ct_errfile_write__out_json_string(&o, callstack);
    ct_errfile_write__out_str(&o, ", \"timestamp\": \"");
    ct_errfile_write__out_u64(&o, timestamp > 0 ? (uint64_t)timestamp : 0);
    ct_errfile_write__out_str(&o, "\"}");
    if (error_code != 0) {
        /* What a launcher adds when it copies a worker's file up (torchrun's errorCode). */
        ct_errfile_write__out_str(&o, ", \"errorCode\": ");
        if (error_code < 0)
            ct_errfile_write__out_char(&o, '-');
        ct_errfile_write__out_u64(&o, error_code < 0 ? (uint64_t)(-(int64_t)error_code)
                                                     : (uint64_t)error_code);
    }
    ct_errfile_write__out_str(&o,
                              "}}"); /* no trailing newline: byte-identical to Python's json.dump */
    ct_errfile_write__out_flush(&o);

    int rc = o.err;
    if (close(fd) != 0 && rc == 0 && errno != EINTR)
        rc = -errno;
    if (rc == 0 && renameat(t->dirfd, tmp, t->dirfd, t->name) != 0)
        rc = -errno;
    if (rc != 0)
        unlinkat(t->dirfd, tmp, 0);
    return rc;
}

int ct_errfile_write_path(const char *path, const char *message, const char *callstack,
                          int64_t timestamp, int error_code, ct_errbuf_t *eb)
{
    ct_errfile_target_t t;
    int rc = ct_errfile_target_open(&t, path, eb);
    if (rc != 0)
        return rc;
    rc = ct_errfile_write(&t, message, callstack, timestamp, error_code);
    ct_errfile_target_close(&t);
    if (rc != 0)
        return ct_errbuf_set(eb, rc, "error file \"%s\": %s", path, ct_strerror(rc));
    return 0;
}
