/*
 * ctrun_signal.c - signal names from glibc's sigabbrev_np, which gives the primary names
 * Python's signal module uses (SIGABRT for 6) except for 29 (glibc POLL, Python IO), plus the
 * aliases users still type. Real-time signals are written relative to SIGRTMIN, as `kill -l` does.
 */
#include "ctrun_signal.h"

#include <ctype.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "ct_parse.h"

/* glibc names signal 29 POLL; Python (and kill -l on most shells) say IO. */
static const char *ctrun_signal__abbrev(int sig)
{
    if (sig == SIGIO)
        return "IO";
    return (sig > 0 && sig < SIGRTMIN) ? sigabbrev_np(sig) : NULL;
}

const char *ctrun_signal_name(int sig, char *buf, size_t size)
{
    const char *abbrev = ctrun_signal__abbrev(sig);
    if (abbrev != NULL)
        snprintf(buf, size, "SIG%s", abbrev);
    else if (sig == SIGRTMIN)
        snprintf(buf, size, "SIGRTMIN");
    else if (sig > SIGRTMIN && sig <= SIGRTMAX)
        snprintf(buf, size, "SIGRTMIN+%d", sig - SIGRTMIN);
    else
        snprintf(buf, size, "SIG%d", sig);
    return buf;
}

int ctrun_signal_from_name(const char *name, int *sig, ct_errbuf_t *eb)
{
    static const struct {
        const char *name;
        int sig;
    } aliases[] = {{"IOT", SIGABRT}, {"POLL", SIGPOLL}, {"IO", SIGIO}, {"CLD", SIGCHLD}};
    const char *n = name;
    if (strncasecmp(n, "SIG", 3) == 0)
        n += 3;
    if (n[0] != '\0' && isdigit((unsigned char)n[0]) && n == name) {
        int v;
        if (ct_parse_int(n, 1, SIGRTMAX, &v, NULL) == 0) {
            *sig = v;
            return 0;
        }
        return ct_errbuf_set(eb, CT_EPARSE, "\"%.32s\" is not a signal number (1..%d)", name,
                             SIGRTMAX);
    }
    for (int s = 1; s < SIGRTMIN; s++) {
        const char *abbrev = sigabbrev_np(s);
        if (abbrev != NULL && strcasecmp(abbrev, n) == 0) {
            *sig = s;
            return 0;
        }
    }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
        if (strcasecmp(aliases[i].name, n) == 0) {
            *sig = aliases[i].sig;
            return 0;
        }
    }
    if (strncasecmp(n, "RTMIN", 5) == 0) {
        int off = 0;
        if (n[5] == '\0' ||
            (n[5] == '+' && ct_parse_int(n + 6, 0, SIGRTMAX - SIGRTMIN, &off, NULL) == 0)) {
            *sig = SIGRTMIN + off;
            return 0;
        }
    }
    return ct_errbuf_set(eb, CT_EPARSE, "\"%.32s\" is not a signal name", name);
}

int ctrun_signal_list_parse(const char *text, int *sigs, size_t max, size_t *count, ct_errbuf_t *eb)
{
    size_t n = 0;
    const char *p = text;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        while (len > 0 && isspace((unsigned char)*p)) {
            p++;
            len--;
        }
        while (len > 0 && isspace((unsigned char)p[len - 1]))
            len--;
        if (len == 0)
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "empty signal name in \"%.64s\" (expected e.g. SIGTERM,SIGINT)",
                                 text);
        char name[32];
        if (len >= sizeof name)
            return ct_errbuf_set(eb, CT_EPARSE, "\"%.*s\" is not a signal name", (int)len, p);
        memcpy(name, p, len);
        name[len] = '\0';
        int sig;
        int rc = ctrun_signal_from_name(name, &sig, eb);
        if (rc != 0)
            return rc;
        if (sig == SIGKILL || sig == SIGSTOP || sig == SIGCHLD) {
            char sn[32];
            return ct_errbuf_set(eb, CT_EPARSE, "%s cannot be handled and forwarded",
                                 ctrun_signal_name(sig, sn, sizeof sn));
        }
        bool dup = false;
        for (size_t i = 0; i < n; i++)
            dup = dup || sigs[i] == sig;
        if (!dup) {
            if (n == max)
                return ct_errbuf_set(eb, CT_ELIMIT, "more than %zu signals", max);
            sigs[n++] = sig;
        }
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    *count = n;
    return 0;
}
