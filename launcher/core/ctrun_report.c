/*
 * ctrun_report.c - failure records and torchrun's summary template, rebuilt with plain
 * string building (the template and the width rule are torchrun's ChildFailedError.format_msg).
 */
#include "ctrun_report.h"

#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "ct_errfile.h"
#include "ctrun_signal.h"

typedef struct ctrun_report__str {
    char *data;
    size_t len, cap;
    bool oom;
} ctrun_report__str_t;

__attribute__((format(printf, 2, 3))) static void ctrun_report__addf(ctrun_report__str_t *s,
                                                                     const char *fmt, ...)
{
    if (s->oom)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        s->oom = true;
        return;
    }
    if (s->len + (size_t)n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->len + (size_t)n + 1)
            cap *= 2;
        char *d = realloc(s->data, cap);
        if (d == NULL) {
            s->oom = true;
            return;
        }
        s->data = d;
        s->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(s->data + s->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    s->len += (size_t)n;
}

int ctrun_failure_init(ctrun_failure_t *f, int rank, int local_rank, int pid, int exitcode,
                       int64_t noticed_s, const char *host, const char *error_file)
{
    memset(f, 0, sizeof *f);
    f->rank = rank;
    f->local_rank = local_rank;
    f->pid = pid;
    f->exitcode = exitcode;
    f->timestamp = noticed_s;
    f->host = strdup(host ? host : "");
    if (f->host == NULL)
        return -ENOMEM;

    char note[CT_ERRBUF_SIZE + 16] = "";
    if (error_file != NULL && error_file[0] != '\0') {
        ct_errfile_t ef;
        ct_errbuf_t eb = {{0}};
        int rc = ct_errfile_read(error_file, &ef, &eb);
        if (rc == 0) {
            f->error_file_ok = true;
            if (ef.timestamp > 0)
                f->timestamp = ef.timestamp;
            const char *m = ef.dict_form ? (ef.traceback ? ef.traceback : ef.message) : ef.message;
            f->message = strdup(m ? m : "<N/A>");
            ct_errfile_free(&ef);
            if (f->message == NULL)
                goto oom;
        } else if (rc == -ENOMEM) {
            goto oom;
        } else if (rc != -ENOENT) {
            snprintf(note, sizeof note, "ctrun: %s", eb.msg);
        }
        if (rc != -ENOENT && (f->error_file = strdup(error_file)) == NULL)
            goto oom;
    }
    if (f->message == NULL) {
        char buf[CT_ERRBUF_SIZE + 64];
        char sn[32];
        if (note[0] != '\0')
            snprintf(buf, sizeof buf, "%s", note);
        else if (exitcode < 0)
            snprintf(buf, sizeof buf, "Signal %d (%s) received by PID %d", -exitcode,
                     ctrun_signal_name(-exitcode, sn, sizeof sn), pid);
        else
            snprintf(buf, sizeof buf, "%s", CTRUN_REPORT_HINT);
        if ((f->message = strdup(buf)) == NULL)
            goto oom;
    }
    return 0;
oom:
    ctrun_failure_free(f);
    return -ENOMEM;
}

void ctrun_failure_free(ctrun_failure_t *f)
{
    free(f->host);
    free(f->error_file);
    free(f->message);
    f->host = f->error_file = f->message = NULL;
}

int ctrun_failure_to_json(const ctrun_failure_t *f, int node, char **out)
{
    json_t *o =
        json_pack("{s:i, s:i, s:i, s:i, s:i, s:I, s:s, s:s?, s:s}", "node", node, "rank", f->rank,
                  "local_rank", f->local_rank, "pid", f->pid, "exitcode", f->exitcode, "timestamp",
                  (json_int_t)f->timestamp, "host", f->host ? f->host : "", "error_file",
                  f->error_file, "message", f->message ? f->message : "");
    if (o == NULL)
        return -ENOMEM;
    *out = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(o);
    return *out ? 0 : -ENOMEM;
}

int ctrun_failure_from_json(const char *text, ctrun_failure_t *f, int *node, ct_errbuf_t *eb)
{
    memset(f, 0, sizeof *f);
    json_error_t err;
    json_t *o = json_loads(text, 0, &err);
    if (o == NULL)
        return ct_errbuf_set(eb, CT_EPARSE, "failure record: %s", err.text);
    const char *host = NULL, *file = NULL, *message = NULL;
    json_t *jfile = NULL;
    json_int_t ts = 0;
    int rc = json_unpack_ex(o, &err, 0, "{s:i, s:i, s:i, s:i, s:i, s:I, s:s, s:o, s:s}", "node",
                            node, "rank", &f->rank, "local_rank", &f->local_rank, "pid", &f->pid,
                            "exitcode", &f->exitcode, "timestamp", &ts, "host", &host, "error_file",
                            &jfile, "message", &message);
    if (rc == 0 && !json_is_null(jfile) && (file = json_string_value(jfile)) == NULL) {
        snprintf(err.text, sizeof err.text, "error_file is neither a string nor null");
        rc = -1;
    }
    if (rc != 0) {
        json_decref(o);
        return ct_errbuf_set(eb, CT_EPARSE, "failure record: %s", err.text);
    }
    f->timestamp = ts;
    f->host = strdup(host);
    f->error_file = file ? strdup(file) : NULL;
    f->message = strdup(message);
    json_decref(o);
    if (f->host == NULL || f->message == NULL || (file != NULL && f->error_file == NULL)) {
        ctrun_failure_free(f);
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    }
    return 0;
}

size_t ctrun_report_root(const ctrun_failure_t *failures, size_t n)
{
    size_t root = 0;
    for (size_t i = 1; i < n; i++) {
        if (failures[i].timestamp < failures[root].timestamp)
            root = i;
    }
    return root;
}

/* Characters (UTF-8 code points) in the longest line of text, as Python's len() counts. */
static size_t ctrun_report__widest_line(const char *text)
{
    size_t best = 0, cur = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p != '\0'; p++) {
        if (*p == '\n') {
            cur = 0;
            continue;
        }
        if ((*p & 0xC0) != 0x80 && ++cur > best)
            best = cur;
    }
    return best;
}

/* One "[idx]:" block, without a trailing newline. */
static void ctrun_report__block(ctrun_report__str_t *s, size_t idx, const ctrun_failure_t *f)
{
    char when[32] = "";
    time_t t = (time_t)f->timestamp;
    struct tm tm;
    if (localtime_r(&t, &tm) != NULL)
        strftime(when, sizeof when, "%Y-%m-%d_%H:%M:%S", &tm);
    ctrun_report__addf(s, "[%zu]:\n  time      : %s\n  host      : %s\n", idx, when, f->host);
    ctrun_report__addf(s, "  rank      : %d (local_rank: %d)\n", f->rank, f->local_rank);
    ctrun_report__addf(s, "  exitcode  : %d (pid: %d)\n", f->exitcode, f->pid);
    ctrun_report__addf(s,
                       "  error_file: %s\n  traceback : ", f->error_file ? f->error_file : "<N/A>");
    for (const char *p = f->message;;) {
        const char *nl = strchr(p, '\n');
        if (nl == NULL) {
            ctrun_report__addf(s, "%s", p);
            break;
        }
        ctrun_report__addf(s, "%.*s\n  ", (int)(nl - p), p);
        p = nl + 1;
    }
}

static void ctrun_report__rule(ctrun_report__str_t *s, char c, size_t width)
{
    char line[64];
    memset(line, c, width);
    line[width] = '\0';
    ctrun_report__addf(s, "%s\n", line);
}

int ctrun_report_format(const char *name, const ctrun_failure_t *failures, size_t n, char **out)
{
    size_t root = ctrun_report_root(failures, n);
    ctrun_report__str_t title = {0}, others = {0}, rootfmt = {0}, text = {0};
    ctrun_report__addf(&title, "%s FAILED", name);
    size_t width = ctrun_report__widest_line(title.data ? title.data : "");
    for (size_t i = 0; i < n; i++) {
        ctrun_report__str_t block = {0};
        ctrun_report__block(&block, i, &failures[i]);
        if (block.oom) {
            free(block.data);
            others.oom = true;
            break;
        }
        size_t w = ctrun_report__widest_line(block.data);
        width = w > width ? w : width;
        if (i == root)
            ctrun_report__addf(&rootfmt, "%s", block.data);
        else
            ctrun_report__addf(&others, "%s%s", others.len ? "\n" : "", block.data);
        free(block.data);
    }
    width = width < 60 ? width : 60;
    ctrun_report__rule(&text, '=', width);
    ctrun_report__addf(&text, "%s\n", title.data ? title.data : "");
    ctrun_report__rule(&text, '-', width);
    ctrun_report__addf(&text, "Failures:\n%s\n",
                       others.len ? others.data : "  <NO_OTHER_FAILURES>");
    ctrun_report__rule(&text, '-', width);
    ctrun_report__addf(&text, "Root Cause (first observed failure):\n%s\n",
                       rootfmt.data ? rootfmt.data : "");
    ctrun_report__rule(&text, '=', width);
    bool oom = title.oom || others.oom || rootfmt.oom || text.oom;
    free(title.data);
    free(others.data);
    free(rootfmt.data);
    if (oom) {
        free(text.data);
        return -ENOMEM;
    }
    *out = text.data;
    return 0;
}

int ctrun_report_failed_line(const ctrun_failure_t *f, const char *name, char *buf, size_t size)
{
    int n = snprintf(buf, size, "failed (exitcode: %d) local_rank: %d (pid: %d) of binary: %s",
                     f->exitcode, f->local_rank, f->pid, name);
    return (n < 0 || (size_t)n >= size) ? -ENAMETOOLONG : 0;
}

int ctrun_report_propagate(const ctrun_failure_t *root, const char *parent_path, ct_errbuf_t *eb)
{
    if (parent_path == NULL || parent_path[0] == '\0')
        return ct_errbuf_set(eb, -ENOENT,
                             "no error file defined for parent, to copy child "
                             "error file (%s)",
                             root->error_file ? root->error_file : "<N/A>");
    if (root->error_file != NULL && root->error_file_ok) {
        int rc = ct_errfile_copy(root->error_file, parent_path, root->exitcode, eb);
        if (rc != CT_EFORMAT && rc != -ENOENT)
            return rc;
        /* The file changed or vanished since it was read: fall back to the record. */
    }
    return ct_errfile_write_path(parent_path, root->message, NULL, root->timestamp, root->exitcode,
                                 eb);
}

void ctrun_host_fqdn(char *buf, size_t size)
{
    char host[256];
    if (gethostname(host, sizeof host) != 0) {
        snprintf(buf, size, "localhost");
        return;
    }
    host[sizeof host - 1] = '\0';
    snprintf(buf, size, "%s", host);

    /* Python: gethostbyaddr(gethostname()) -> (name, aliases, addrs); the first of name and
     * aliases containing a dot, else name. The address comes from getaddrinfo, as there. */
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    if (getaddrinfo(host, NULL, &hints, &ai) != 0 || ai == NULL)
        return;
    const void *addr = ai->ai_family == AF_INET
                           ? (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
                           : (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;
    socklen_t alen = ai->ai_family == AF_INET ? 4 : 16;
    struct hostent he, *res = NULL;
    char tmp[4096];
    int herr;
    if (gethostbyaddr_r(addr, alen, ai->ai_family, &he, tmp, sizeof tmp, &res, &herr) == 0 &&
        res != NULL && res->h_name != NULL) {
        const char *pick = res->h_name;
        if (strchr(pick, '.') == NULL) {
            for (char **a = res->h_aliases; a != NULL && *a != NULL; a++) {
                if (strchr(*a, '.') != NULL) {
                    pick = *a;
                    break;
                }
            }
        }
        snprintf(buf, size, "%s", pick);
    }
    freeaddrinfo(ai);
}
