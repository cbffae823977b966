/*
 * ctrun_recovery.h - the end-of-job recovery table: one row per worker failure this node saw
 * (attempt, rank, cause, detection latency, time to resume, steps replayed), printed by ctrun
 * at the end of a job that had failures and written as JSON into the run's log folder
 * (report.json). Also the per-attempt progress behind the no-progress guard.
 *
 * Definitions (times on this node's CLOCK_MONOTONIC, which the workers' heartbeats share):
 *   detection latency  from the fault to the agent noticing it: known for injected faults
 *                      (the moment the agent sent the signal, or the worker's last heartbeat,
 *                      which libctworker writes just before an injected signal) and for the
 *                      watchdog (the silent worker's last heartbeat); unknown (-1) otherwise.
 *   time to resume     from detecting the failure to the first heartbeat of the next attempt
 *                      (its first reported step, after rendezvous, start-up and checkpoint
 *                      loading); -1 when no later attempt reported one.
 *   steps replayed     the highest step the failed attempt reported minus the step the next
 *                      attempt reported first (its resume point): the work that was lost.
 *                      Heartbeats are rate-limited, so the failed attempt's highest step is a
 *                      lower bound (exact for step-triggered injected faults).
 *
 * Deliberately not here: deciding anything (the agent does) and torchrun's failure report
 * (ctrun_report.h).
 */
#ifndef CTRUN_RECOVERY_H
#define CTRUN_RECOVERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CTRUN_RECOVERY_CAUSE_MAX 160

typedef struct ctrun_recovery_row {
    int attempt, rank, local_rank;
    char cause[CTRUN_RECOVERY_CAUSE_MAX];
    uint64_t detected_ns; /* when the agent noticed */
    int64_t detect_ns;    /* detection latency, -1 unknown */
    int64_t resume_ns;    /* time to resume, -1 none */
    int64_t failed_step;  /* highest step reported by the failed attempt, -1 none */
    int64_t resume_step;  /* first step reported by the next attempt, -1 none */
} ctrun_recovery_row_t;

typedef struct ctrun_recovery_attempt {
    int64_t first_step, max_step; /* -1 until a heartbeat arrives */
    uint64_t first_ns;            /* when the first heartbeat arrived */
    int workers, warm;            /* local workers started, of them forked from a standby */
} ctrun_recovery_attempt_t;

typedef struct ctrun_recovery {
    ctrun_recovery_row_t *rows;
    size_t n;
    ctrun_recovery_attempt_t *attempts; /* indexed by attempt number */
    size_t nattempts;
    bool any_heartbeat; /* some attempt reported a step (the guard applies) */
} ctrun_recovery_t;

/* Adds a row (detect_ns -1 when unknown). 0 or -ENOMEM. */
int ctrun_recovery_add(ctrun_recovery_t *r, int attempt, int rank, int local_rank,
                       const char *cause, uint64_t detected_ns, int64_t detect_ns);

/* A heartbeat of attempt k reporting step at now_ns; the first one of an attempt fills in the
 * resume columns of the earlier attempts' rows still waiting for one. 0 or -ENOMEM. */
int ctrun_recovery_heartbeat(ctrun_recovery_t *r, int attempt, int64_t step, uint64_t now_ns);

/* Attempt k started workers local workers, warm of them forked from a --warm_restart standby
 * (the table and report.json say so). 0 or -ENOMEM. */
int ctrun_recovery_started(ctrun_recovery_t *r, int attempt, int workers, int warm);

/* Marks attempt k as over: its rows get the attempt's highest step. */
void ctrun_recovery_end_attempt(ctrun_recovery_t *r, int attempt);

/* True when attempt k made step progress: it reported a step above the one it reported first
 * (its starting or resume point). An attempt with no heartbeat made none. */
bool ctrun_recovery_progressed(const ctrun_recovery_t *r, int attempt);

/* The table as text (malloc'd), e.g.
 *   ctrun recovery: 2 failures over 3 attempts
 *     attempt rank cause                          detect  resume   replayed
 *     0       1    injected kill (spec 1)         1.2 ms  180 ms   10 (40 -> 30)
 * 0 or -ENOMEM. */
int ctrun_recovery_format(const ctrun_recovery_t *r, int attempts, char **out);

/* {"exit_code": .., "attempts": .., "failures": [{"attempt", "rank", "local_rank", "cause",
 *  "detection_latency_ms", "time_to_resume_ms", "failed_step", "resume_step",
 *  "steps_replayed"}, ...]} with null for unknown values. 0 or -ENOMEM. */
int ctrun_recovery_json(const ctrun_recovery_t *r, int attempts, int exit_code, char **out);

void ctrun_recovery_free(ctrun_recovery_t *r);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_RECOVERY_H */
