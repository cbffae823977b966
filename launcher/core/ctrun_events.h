/*
 * ctrun_events.h - torchelastic's event records (--event_log_handler console): one JSON line
 * per event, with the fields and values of torch.distributed.elastic.events.Event as torchrun's
 * agent builds them (_construct_event):
 *
 *   {"name": "torchelastic.worker.status.<STATE>", "source": "AGENT"|"WORKER",
 *    "timestamp": <ms>, "metadata": {"run_id", "global_rank", "group_rank", "worker_id",
 *    "role", "hostname", "state", "total_run_time", "rdzv_backend", "raw_error", "metadata",
 *    "agent_restarts", "duration_ms"}}
 *
 * where the inner "metadata" is itself a JSON text: {"group_world_size", "entry_point"} and, for
 * a worker, "local_rank", "role_rank", "role_world_size", "exit_code", "worker_pid", each a
 * one-element list (torchrun stores them as tuples). Python's json.dumps separators (", ",
 * ": "), non-ASCII escaped. One difference: torchrun leaves "timestamp" at 0; ctrun writes the
 * time of the event in milliseconds since the epoch, as the field's documentation says.
 *
 * Also torchrun's raw_error of a failed worker: its error file's JSON as the file has it, or
 * {"message": "<NONE>"} when there is none (with torchrun's errorTraits added for an exit code).
 *
 * Deliberately not here: when events happen (the agent) and where the lines go.
 */
#ifndef CTRUN_EVENTS_H
#define CTRUN_EVENTS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One event; -1 (or NULL) for the fields that are JSON null. */
typedef struct ctrun_event {
    const char *state;    /* RENDEZVOUS, ASSIGN_WORKER_RANKS, START, SUCCEEDED, FAILED, ... */
    bool worker;          /* source WORKER (the worker fields below apply), else AGENT */
    int64_t timestamp_ms; /* since the epoch */
    const char *run_id, *role, *hostname, *rdzv_backend, *entry_point;
    int global_rank, group_rank, group_world_size; /* -1: null */
    const char *worker_id;                         /* NULL: null */
    int64_t total_run_time;                        /* seconds */
    const char *raw_error;                         /* NULL: null */
    int agent_restarts;
    double duration_ms; /* < 0: null */
    /* worker fields */
    int local_rank, role_rank, role_world_size;
    bool has_exit; /* exit_code and worker_pid are known (a failure) */
    int exit_code, worker_pid;
} ctrun_event_t;

/* The event as one line ending in '\n' (malloc'd). Returns 0 or -ENOMEM. */
int ctrun_event_format(const ctrun_event_t *ev, char **out);

/* torchrun's raw_error for a worker that failed with exitcode: the JSON of error_file (NULL or
 * unreadable: {"message": "<NONE>"}, plus errorTraits for a non-negative exitcode).
 * Returns 0 or -ENOMEM. */
int ctrun_event_raw_error(const char *error_file, int exitcode, char **out);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_EVENTS_H */
