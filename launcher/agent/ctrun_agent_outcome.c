/*
 * ctrun_agent_outcome.c - how an attempt ends, through the store: the outcome key
 * /ctrun/a/<k>/outcome (awaited from the start of RUNNING, parsed and noted, and compare-set
 * so that the first writer wins: "failed <g>", "stopped <g> <sig>", "left <id> <sig> <host>",
 * "succeeded"), the
 * /ctrun/a/<k>/ok count of nodes whose workers all exited 0, and this node's failure records
 * (kept for the report, logged as torchrun does, appended to /ctrun/a/<k>/failures, and read
 * back from every node for the report). With etcd-v3 the same writes go through the
 * rendezvous in etcd (ctrun_agent_etcd.c).
 *
 * Deliberately not here: deciding what an outcome leads to (ctrun_agent_step.c) and the report
 * itself (ctrun_agent_end.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_log.h"
#include "ct_time.h"
#include "ctrun_agent_internal.h"

static ctrun_outcome_t ctrun_agent__parse_outcome(const char *text, int *node, int *sig)
{
    *node = -1;
    *sig = 0;
    if (strcmp(text, "succeeded") == 0)
        return CTRUN_OUTCOME_SUCCEEDED;
    if (sscanf(text, "failed %d", node) == 1)
        return CTRUN_OUTCOME_FAILED;
    if (sscanf(text, "stopped %d %d", node, sig) == 2)
        return CTRUN_OUTCOME_STOPPED;
    if (sscanf(text, "lost %d", node) == 1)
        return CTRUN_OUTCOME_LOST;
    if (sscanf(text, "rejoin %d", node) == 1)
        return CTRUN_OUTCOME_REJOIN;
    if (sscanf(text, "left %d %d", node, sig) == 2)
        return CTRUN_OUTCOME_LEFT;
    return CTRUN_OUTCOME_NONE;
}

void ctrun_agent__note_outcome(ctrun_agent_t *a, const char *text)
{
    if (a->outcome != CTRUN_OUTCOME_NONE)
        return;
    a->outcome = ctrun_agent__parse_outcome(text, &a->outcome_node, &a->outcome_signal);
    snprintf(a->outcome_host, sizeof a->outcome_host, "?");
    if (a->outcome == CTRUN_OUTCOME_LOST)
        sscanf(text, "lost %*d %63s", a->outcome_host);
    if (a->outcome == CTRUN_OUTCOME_LEFT)
        sscanf(text, "left %*d %*d %63s", a->outcome_host);
    if (a->outcome == CTRUN_OUTCOME_NONE)
        ct_log_warn("ignoring a malformed outcome of attempt %d: \"%.64s\"", a->attempt, text);
}

/* Writes the outcome of the attempt unless one is there already; the reply tells the winner. */
void ctrun_agent__post_outcome(ctrun_agent_t *a, const char *text)
{
    if (a->store_lost) {
        ctrun_agent__note_outcome(a, text);
        return;
    }
    if (a->use_etcd) {
        ctrun_agent__etcd_post(a, text);
        return;
    }
    char key[CTRUN_RDZV_KEY_MAX];
    ctrun_rdzv_key(key, "a/%d/outcome", a->attempt);
    ctrun_agent__kv(a,
                    ctrun_kv_cas(a->kv, key, "", text, ctrun_agent__tag(a, CTRUN_AGENT__KV_POST)));
    if (a->store_lost)
        ctrun_agent__note_outcome(a, text);
}

/* Records worker i's failure, logs torchrun's line, and publishes the record; cause and
 * detect_ns (-1: unknown) go into the recovery table. */
void ctrun_agent__record_failure(ctrun_agent_t *a, int i, int exitcode, const char *message,
                                 const char *cause, int64_t detect_ns)
{
    ctrun_worker_t *w = &a->workers[i];
    w->failed = true;
    ctrun_agent__observe_detect(a, detect_ns);
    if (ctrun_recovery_add(&a->recovery, a->attempt, w->rank, i, cause, uv_hrtime(), detect_ns) !=
        0)
        ct_log_warn("out of memory: the recovery table misses a failure of rank %d", w->rank);
    ctrun_failure_t *grown = realloc(a->failures, (a->nfailures + 1) * sizeof *grown);
    if (grown == NULL) {
        ct_log_error("out of memory recording the failure of local rank %d", i);
        return;
    }
    a->failures = grown;
    ctrun_failure_t *f = &a->failures[a->nfailures];
    const char *ef = a->logs.disabled ? NULL : w->error_file;
    if (ctrun_failure_init(f, w->rank, i, (int)w->proc.pid, exitcode, (int64_t)ct_time_unix_s(),
                           ctrun_agent__host(a), ef) != 0) {
        ct_log_error("out of memory recording the failure of local rank %d", i);
        return;
    }
    if (message != NULL && !f->error_file_ok) {
        char *m = strdup(message);
        if (m != NULL) {
            free(f->message);
            f->message = m;
        }
    }
    a->nfailures++;
    char line[1024];
    ctrun_report_failed_line(f, a->entrypoint, line, sizeof line);
    ct_log_error("%s", line);
    if (w->hb_count > 0)
        ct_log_warn("local rank %d (rank %d) last reported step %llu, %.1f s before it failed", i,
                    w->rank, (unsigned long long)w->hb_step,
                    (double)(uv_now(&a->loop) - w->hb_last_ms) / 1000.0);
    if (a->store_lost)
        return;
    char *json = NULL;
    if (a->use_etcd) {
        /* One record per node and attempt in etcd: its first failure. */
        if (a->etcd_report == NULL && ctrun_failure_to_json(f, a->plan.group_rank, &json) == 0)
            a->etcd_report = json;
        return;
    }
    if (ctrun_failure_to_json(f, a->plan.group_rank, &json) == 0) {
        size_t n = strlen(json);
        char *line_nl = malloc(n + 2);
        if (line_nl != NULL) {
            memcpy(line_nl, json, n);
            line_nl[n] = '\n';
            line_nl[n + 1] = '\0';
            char key[CTRUN_RDZV_KEY_MAX];
            ctrun_rdzv_key(key, "a/%d/failures", a->attempt);
            ctrun_agent__kv(a, ctrun_kv_append(a->kv, key, line_nl,
                                               ctrun_agent__tag(a, CTRUN_AGENT__KV_APPEND)));
            free(line_nl);
        }
        free(json);
    }
}

/* This node's attempt failed first-hand: tell the others (once per attempt). */
void ctrun_agent__post_failed(ctrun_agent_t *a)
{
    if (!a->failure_posted) {
        a->failure_posted = true;
        if (a->use_etcd && !a->store_lost) {
            ctrun_agent__etcd_post_failed(a);
            return;
        }
        char text[64];
        snprintf(text, sizeof text, "failed %d", a->plan.group_rank);
        ctrun_agent__post_outcome(a, text);
    }
}

/* This node was stopped by a handled signal: tell the others. */
void ctrun_agent__post_stopped(ctrun_agent_t *a, int sig)
{
    char text[64];
    snprintf(text, sizeof text, "stopped %d %d", a->plan.group_rank, sig);
    ctrun_agent__post_outcome(a, text);
}

/* A signal may make this node leave rather than stop the job: an elastic c10d job (MIN < MAX)
 * that goes on without it, unless it hosts the store, without which nobody can (with etcd, the
 * next round hosts a new one). */
bool ctrun_agent__can_leave(const ctrun_agent_t *a)
{
    if (a->use_etcd)
        return a->cfg->min_nodes < a->cfg->max_nodes && !a->store_lost;
    return a->rdzv_kind == CTRUN_RDZV_KIND_C10D && a->cfg->min_nodes < a->cfg->max_nodes &&
           !a->is_host && !a->store_lost;
}

/* This node leaves the job after a signal (ctrun_agent__can_leave): tell the others, who
 * re-form without it. */
void ctrun_agent__post_left(ctrun_agent_t *a, int sig)
{
    char text[128];
    snprintf(text, sizeof text, "left %d %d %s", a->rdzv.node_id, sig, ctrun_agent__host(a));
    ctrun_agent__post_outcome(a, text);
}

/* Every local worker exited 0: count this node in /ctrun/a/<k>/ok (whoever brings it to the
 * number of nodes writes "succeeded"). */
void ctrun_agent__post_ok(ctrun_agent_t *a)
{
    if (a->use_etcd) {
        ctrun_agent__etcd_post_ok(a);
        return;
    }
    char key[CTRUN_RDZV_KEY_MAX];
    ctrun_rdzv_key(key, "a/%d/ok", a->attempt);
    ctrun_agent__kv(a, ctrun_kv_add(a->kv, key, 1, ctrun_agent__tag(a, CTRUN_AGENT__KV_OK)));
}

/* The attempt's outcome, whoever writes it: a GET that waits for the key. */
void ctrun_agent__await_outcome(ctrun_agent_t *a)
{
    if (a->use_etcd)
        return; /* the rendezvous passes every outcome on (ENDED) */
    char key[CTRUN_RDZV_KEY_MAX];
    ctrun_rdzv_key(key, "a/%d/outcome", a->attempt);
    ctrun_agent__kv(a, ctrun_kv_get(a->kv, key, ctrun_agent__tag(a, CTRUN_AGENT__KV_OUTCOME)));
}

/* Every node's failure records of the attempt, for the report. */
void ctrun_agent__fetch_failures(ctrun_agent_t *a)
{
    if (a->use_etcd)
        return; /* collected as they came (ctrun_agent__etcd_report_lines) */
    char key[CTRUN_RDZV_KEY_MAX];
    ctrun_rdzv_key(key, "a/%d/failures", a->attempt);
    ctrun_agent__kv(a, ctrun_kv_get(a->kv, key, ctrun_agent__tag(a, CTRUN_AGENT__KV_FAILURES)));
}

/* Says why this node stops its workers for an outcome another node wrote. */
void ctrun_agent__log_outcome(const ctrun_agent_t *a)
{
    if (a->outcome == CTRUN_OUTCOME_FAILED)
        ct_log_warn("attempt %d failed on node %d; stopping this node's workers", a->attempt,
                    a->outcome_node);
    else if (a->outcome == CTRUN_OUTCOME_LOST)
        ct_log_warn("node %d (%s) is lost (no heartbeat); stopping this node's workers",
                    a->outcome_node, a->outcome_host);
    else if (a->outcome == CTRUN_OUTCOME_REJOIN)
        ct_log_info("node %d waits to join; stopping this node's workers to re-form the job",
                    a->outcome_node);
    else if (a->outcome == CTRUN_OUTCOME_LEFT)
        ct_log_warn("node %d (%s) leaves the job; stopping this node's workers to re-form the "
                    "job without it",
                    a->outcome_node, a->outcome_host);
}
