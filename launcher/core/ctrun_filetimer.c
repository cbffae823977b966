/*
 * ctrun_filetimer.c - FileTimerClient's requests parsed with jansson, and the table of armed
 * timers (see ctrun_filetimer.h): a small unordered array, searched linearly (a worker holds a
 * handful of timers at a time).
 */
#include "ctrun_filetimer.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ctrun_filetimer_parse(const char *line, size_t len, ctrun_filetimer_req_t *req, ct_errbuf_t *eb)
{
    memset(req, 0, sizeof *req);
    if (len > CTRUN_FILETIMER_REQUEST_MAX)
        return ct_errbuf_set(eb, -EMSGSIZE, "timer request of %zu bytes, more than %d", len,
                             CTRUN_FILETIMER_REQUEST_MAX);
    json_error_t jerr;
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        return ct_errbuf_set(eb, -EINVAL, "timer request is not JSON: %s (column %d)", jerr.text,
                             jerr.column);
    int rc = 0;
    json_t *version = json_object_get(root, "version"), *pid = json_object_get(root, "pid");
    json_t *scope = json_object_get(root, "scope_id");
    json_t *exp = json_object_get(root, "expiration_time"), *sig = json_object_get(root, "signal");
    if (!json_is_object(root)) {
        rc = ct_errbuf_set(eb, -EINVAL, "timer request is not a JSON object");
    } else if (!json_is_integer(version) || json_integer_value(version) != 1) {
        rc = ct_errbuf_set(eb, -EINVAL, "timer request without \"version\": 1");
    } else if (!json_is_integer(pid) || json_integer_value(pid) <= 0 ||
               json_integer_value(pid) > 0x7fffffff) {
        rc = ct_errbuf_set(eb, -EINVAL, "timer request without a valid \"pid\"");
    } else if (!json_is_string(scope) || json_string_length(scope) >= CTRUN_FILETIMER_SCOPE_MAX ||
               strlen(json_string_value(scope)) != json_string_length(scope)) {
        rc = ct_errbuf_set(eb, -EINVAL,
                           "timer request without a valid \"scope_id\" (a string "
                           "of at most %d bytes)",
                           CTRUN_FILETIMER_SCOPE_MAX - 1);
    } else if (!json_is_number(exp)) {
        rc = ct_errbuf_set(eb, -EINVAL, "timer request without a numeric \"expiration_time\"");
    } else if (!json_is_integer(sig) || json_integer_value(sig) < 0 ||
               json_integer_value(sig) > 64) {
        rc = ct_errbuf_set(eb, -EINVAL, "timer request without a valid \"signal\" (0..64)");
    } else {
        req->pid = (pid_t)json_integer_value(pid);
        snprintf(req->scope, sizeof req->scope, "%s", json_string_value(scope));
        req->expiration = json_number_value(exp);
        req->signal = (int)json_integer_value(sig);
    }
    json_decref(root);
    return rc;
}

/* The index of timer (pid, scope), or -1. */
static long ctrun_filetimer__find(const ctrun_filetimers_t *ts, pid_t pid, const char *scope)
{
    for (size_t i = 0; i < ts->n; i++)
        if (ts->t[i].pid == pid && strcmp(ts->t[i].scope, scope) == 0)
            return (long)i;
    return -1;
}

static void ctrun_filetimer__remove(ctrun_filetimers_t *ts, size_t i)
{
    ts->t[i] = ts->t[--ts->n];
}

int ctrun_filetimers_apply(ctrun_filetimers_t *ts, const ctrun_filetimer_req_t *req)
{
    long i = ctrun_filetimer__find(ts, req->pid, req->scope);
    if (req->expiration < 0) {
        if (i >= 0)
            ctrun_filetimer__remove(ts, (size_t)i);
        return 0;
    }
    if (i >= 0) {
        ts->t[i] = *req;
        return 0;
    }
    if (ts->n == ts->cap) {
        size_t cap = ts->cap ? ts->cap * 2 : 8;
        ctrun_filetimer_req_t *grown = realloc(ts->t, cap * sizeof *grown);
        if (grown == NULL)
            return -ENOMEM;
        ts->t = grown;
        ts->cap = cap;
    }
    ts->t[ts->n++] = *req;
    return 0;
}

void ctrun_filetimers_forget(ctrun_filetimers_t *ts, pid_t pid)
{
    for (size_t i = 0; i < ts->n;) {
        if (ts->t[i].pid == pid)
            ctrun_filetimer__remove(ts, i);
        else
            i++;
    }
}

bool ctrun_filetimers_next(const ctrun_filetimers_t *ts, double *when)
{
    if (ts->n == 0)
        return false;
    double w = ts->t[0].expiration;
    for (size_t i = 1; i < ts->n; i++)
        if (ts->t[i].expiration < w)
            w = ts->t[i].expiration;
    *when = w;
    return true;
}

bool ctrun_filetimers_pop_expired(ctrun_filetimers_t *ts, double now, ctrun_filetimer_req_t *out)
{
    long first = -1;
    for (size_t i = 0; i < ts->n; i++)
        if (ts->t[i].expiration <= now &&
            (first < 0 || ts->t[i].expiration < ts->t[first].expiration))
            first = (long)i;
    if (first < 0)
        return false;
    *out = ts->t[first];
    ctrun_filetimers_forget(ts, out->pid);
    return true;
}

void ctrun_filetimer_cause(const ctrun_filetimer_req_t *req, double now, int rank, char *buf,
                           size_t size)
{
    double ago = now - req->expiration;
    snprintf(buf, size, "timer '%s' expired %.1f s ago in rank %d, pid %d", req->scope,
             ago > 0 ? ago : 0.0, rank, (int)req->pid);
}

void ctrun_filetimers_free(ctrun_filetimers_t *ts)
{
    free(ts->t);
    ts->t = NULL;
    ts->n = ts->cap = 0;
}
