/*
 * ctrun_recovery.c - the end-of-job recovery table and per-attempt progress (definitions in
 * ctrun_recovery.h). Bookkeeping and formatting only; the agent feeds it.
 */
#include "ctrun_recovery.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ctrun_recovery__attempt(ctrun_recovery_t *r, int k, ctrun_recovery_attempt_t **out)
{
    if (k < 0)
        return -EINVAL;
    if ((size_t)k >= r->nattempts) {
        size_t n = (size_t)k + 1;
        ctrun_recovery_attempt_t *g = realloc(r->attempts, n * sizeof *g);
        if (g == NULL)
            return -ENOMEM;
        for (size_t i = r->nattempts; i < n; i++)
            g[i] = (ctrun_recovery_attempt_t){.first_step = -1, .max_step = -1};
        r->attempts = g;
        r->nattempts = n;
    }
    *out = &r->attempts[k];
    return 0;
}

int ctrun_recovery_add(ctrun_recovery_t *r, int attempt, int rank, int local_rank,
                       const char *cause, uint64_t detected_ns, int64_t detect_ns)
{
    ctrun_recovery_row_t *g = realloc(r->rows, (r->n + 1) * sizeof *g);
    if (g == NULL)
        return -ENOMEM;
    r->rows = g;
    ctrun_recovery_row_t *row = &g[r->n++];
    memset(row, 0, sizeof *row);
    row->attempt = attempt;
    row->rank = rank;
    row->local_rank = local_rank;
    snprintf(row->cause, sizeof row->cause, "%s", cause ? cause : "");
    row->detected_ns = detected_ns;
    row->detect_ns = detect_ns;
    row->resume_ns = -1;
    row->failed_step = -1;
    row->resume_step = -1;
    ctrun_recovery_attempt_t *a;
    if (ctrun_recovery__attempt(r, attempt, &a) == 0)
        row->failed_step = a->max_step;
    return 0;
}

int ctrun_recovery_heartbeat(ctrun_recovery_t *r, int attempt, int64_t step, uint64_t now_ns)
{
    ctrun_recovery_attempt_t *a;
    int rc = ctrun_recovery__attempt(r, attempt, &a);
    if (rc != 0)
        return rc;
    r->any_heartbeat = true;
    if (step > a->max_step)
        a->max_step = step;
    if (a->first_step >= 0)
        return 0;
    a->first_step = step;
    a->first_ns = now_ns;
    for (size_t i = 0; i < r->n; i++) {
        ctrun_recovery_row_t *row = &r->rows[i];
        if (row->attempt >= attempt || row->resume_ns >= 0)
            continue;
        row->resume_ns = now_ns >= row->detected_ns ? (int64_t)(now_ns - row->detected_ns) : 0;
        row->resume_step = step;
    }
    return 0;
}

int ctrun_recovery_started(ctrun_recovery_t *r, int attempt, int workers, int warm)
{
    ctrun_recovery_attempt_t *a;
    int rc = ctrun_recovery__attempt(r, attempt, &a);
    if (rc != 0)
        return rc;
    a->workers = workers;
    a->warm = warm;
    return 0;
}

void ctrun_recovery_end_attempt(ctrun_recovery_t *r, int attempt)
{
    if (attempt < 0 || (size_t)attempt >= r->nattempts)
        return;
    for (size_t i = 0; i < r->n; i++)
        if (r->rows[i].attempt == attempt && r->attempts[attempt].max_step > r->rows[i].failed_step)
            r->rows[i].failed_step = r->attempts[attempt].max_step;
}

bool ctrun_recovery_progressed(const ctrun_recovery_t *r, int attempt)
{
    if (attempt < 0 || (size_t)attempt >= r->nattempts)
        return false;
    const ctrun_recovery_attempt_t *a = &r->attempts[attempt];
    return a->first_step >= 0 && a->max_step > a->first_step;
}

static void ctrun_recovery__ms(char *buf, size_t size, int64_t ns)
{
    if (ns < 0)
        snprintf(buf, size, "-");
    else if (ns < 10000000)
        snprintf(buf, size, "%.2f ms", (double)ns / 1e6);
    else if (ns < 10000000000LL)
        snprintf(buf, size, "%.0f ms", (double)ns / 1e6);
    else
        snprintf(buf, size, "%.1f s", (double)ns / 1e9);
}

int ctrun_recovery_format(const ctrun_recovery_t *r, int attempts, char **out)
{
    size_t cap = 256 + r->n * 320 + r->nattempts * 96;
    char *s = malloc(cap);
    if (s == NULL)
        return -ENOMEM;
    size_t len = 0;
    len += (size_t)snprintf(s + len, cap - len,
                            "ctrun recovery: %zu failure%s over %d attempt%s\n"
                            "  %-7s %-5s %-44s %-10s %-10s %s\n",
                            r->n, r->n == 1 ? "" : "s", attempts, attempts == 1 ? "" : "s",
                            "attempt", "rank", "cause", "detect", "resume", "replayed");
    for (size_t i = 0; i < r->n && len < cap; i++) {
        const ctrun_recovery_row_t *row = &r->rows[i];
        char det[32], res[32], rep[96];
        ctrun_recovery__ms(det, sizeof det, row->detect_ns);
        ctrun_recovery__ms(res, sizeof res, row->resume_ns);
        if (row->failed_step >= 0 && row->resume_step >= 0)
            snprintf(rep, sizeof rep, "%lld (%lld -> %lld)",
                     (long long)(row->failed_step > row->resume_step
                                     ? row->failed_step - row->resume_step
                                     : 0),
                     (long long)row->failed_step, (long long)row->resume_step);
        else
            snprintf(rep, sizeof rep, "-");
        len += (size_t)snprintf(s + len, cap - len, "  %-7d %-5d %-44.44s %-10s %-10s %s\n",
                                row->attempt, row->rank, row->cause, det, res, rep);
    }
    for (size_t k = 0; k < r->nattempts && len < cap; k++) {
        if (r->attempts[k].warm > 0 && len + 96 < cap)
            len += (size_t)snprintf(s + len, cap - len,
                                    "  attempt %zu: %d of %d local workers forked from warm "
                                    "standbys\n",
                                    k, r->attempts[k].warm, r->attempts[k].workers);
    }
    if (len >= cap)
        s[cap - 1] = '\0';
    *out = s;
    return 0;
}

static json_t *ctrun_recovery__ms_json(int64_t ns)
{
    return ns < 0 ? json_null() : json_real((double)ns / 1e6);
}

int ctrun_recovery_json(const ctrun_recovery_t *r, int attempts, int exit_code, char **out)
{
    json_t *root = json_object(), *list = json_array();
    if (root == NULL || list == NULL) {
        json_decref(root);
        json_decref(list);
        return -ENOMEM;
    }
    json_object_set_new(root, "exit_code", json_integer(exit_code));
    json_object_set_new(root, "attempts", json_integer(attempts));
    for (size_t i = 0; i < r->n; i++) {
        const ctrun_recovery_row_t *row = &r->rows[i];
        bool both = row->failed_step >= 0 && row->resume_step >= 0;
        json_t *o = json_object();
        json_object_set_new(o, "attempt", json_integer(row->attempt));
        json_object_set_new(o, "rank", json_integer(row->rank));
        json_object_set_new(o, "local_rank", json_integer(row->local_rank));
        json_object_set_new(o, "cause", json_string(row->cause));
        json_object_set_new(o, "detection_latency_ms", ctrun_recovery__ms_json(row->detect_ns));
        json_object_set_new(o, "time_to_resume_ms", ctrun_recovery__ms_json(row->resume_ns));
        json_object_set_new(o, "failed_step",
                            row->failed_step >= 0 ? json_integer(row->failed_step) : json_null());
        json_object_set_new(o, "resume_step",
                            row->resume_step >= 0 ? json_integer(row->resume_step) : json_null());
        json_object_set_new(o, "steps_replayed",
                            both ? json_integer(row->failed_step > row->resume_step
                                                    ? row->failed_step - row->resume_step
                                                    : 0)
                                 : json_null());
        json_array_append_new(list, o);
    }
    json_object_set_new(root, "failures", list);
    /* Per attempt this node started: its local workers, and how many were forked warm. */
    json_t *starts = json_array();
    for (size_t k = 0; starts != NULL && k < r->nattempts; k++) {
        if (r->attempts[k].workers == 0)
            continue;
        json_t *o = json_object();
        json_object_set_new(o, "attempt", json_integer((json_int_t)k));
        json_object_set_new(o, "workers", json_integer(r->attempts[k].workers));
        json_object_set_new(o, "warm_workers", json_integer(r->attempts[k].warm));
        json_array_append_new(starts, o);
    }
    json_object_set_new(root, "attempt_starts", starts);
    char *text = json_dumps(root, JSON_INDENT(2));
    json_decref(root);
    if (text == NULL)
        return -ENOMEM;
    *out = text;
    return 0;
}

void ctrun_recovery_free(ctrun_recovery_t *r)
{
    free(r->rows);
    free(r->attempts);
    memset(r, 0, sizeof *r);
}
