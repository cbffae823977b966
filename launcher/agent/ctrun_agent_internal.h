/*
 * ctrun_agent_internal.h - the agent's data, shared by its two files: ctrun_agent.c (states,
 * events, the transition function, store and signals) and ctrun_group.c (the mechanics of one
 * attempt's workers: environments, output sinks, spawning, signalling, freeing).
 *
 * Two explicit state machines, both changed only by ctrun__agent_step in ctrun_agent.c:
 *
 *   agent:  INIT -> RENDEZVOUS -> RUNNING -> (SUCCEEDED | STOPPING) -> ... -> EXITING -> DONE
 *           (STOPPING -> RENDEZVOUS for the next attempt while restarts remain)
 *   worker: IDLE -> RUNNING -> [STOPPING] -> EXITED -> GONE
 */
#ifndef CTRUN_AGENT_INTERNAL_H
#define CTRUN_AGENT_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "ctrun_agent.h"
#include "ctrun_cgroup.h"
#include "ctrun_console.h"
#include "ctrun_inject.h"
#include "ctrun_kv.h"
#include "ctrun_logs.h"
#include "ctrun_proc.h"
#include "ctrun_rdzv.h"
#include "ctrun_recovery.h"
#include "ctrun_report.h"
#include "ctrun_sink.h"
#include "ctrun_store.h"

typedef struct ctrun_agent ctrun_agent_t;

/* How long the hosting agent keeps serving the store after the job's end while clients are
 * still connected (a waiting node reading the "closed" plan, another agent's last request). */
#define CTRUN_STORE_LINGER_MS 2000

typedef enum ctrun_agent_state {
    CTRUN_AGENT_INIT = 0,
    CTRUN_AGENT_RENDEZVOUS, /* joining attempt k; no worker exists */
    CTRUN_AGENT_RUNNING,    /* attempt k's workers run */
    CTRUN_AGENT_SUCCEEDED,  /* every local worker exited 0; waiting for the job's outcome */
    CTRUN_AGENT_STOPPING,   /* attempt k is over: stopping local workers, learning the outcome */
    CTRUN_AGENT_EXITING,    /* the job is over: report, exit barrier */
    CTRUN_AGENT_DONE,       /* exit status known; handles closing */
} ctrun_agent_state_t;

typedef enum ctrun_worker_state {
    CTRUN_WORKER_IDLE = 0, /* not started */
    CTRUN_WORKER_RUNNING,  /* started, not asked to stop */
    CTRUN_WORKER_STOPPING, /* signalled to stop */
    CTRUN_WORKER_EXITED,   /* exit status known; output still draining */
    CTRUN_WORKER_GONE,     /* every handle closed, or it never started */
} ctrun_worker_state_t;

/* How an attempt ended, as /ctrun/a/<k>/outcome says. */
typedef enum ctrun_outcome {
    CTRUN_OUTCOME_NONE = 0,
    CTRUN_OUTCOME_SUCCEEDED,
    CTRUN_OUTCOME_FAILED,
    CTRUN_OUTCOME_STOPPED,
    CTRUN_OUTCOME_LOST,   /* the coordinator lost a node's heartbeats (outcome_node = its id) */
    CTRUN_OUTCOME_REJOIN, /* a node waits to join: restart without using up a restart */
} ctrun_outcome_t;

typedef struct ctrun_worker {
    ctrun_agent_t *agent;
    int local_rank, rank;
    ctrun_worker_state_t state;
    ctrun_proc_t proc;
    ctrun_sink_t out_sink, err_sink;
    bool out_sink_used, err_sink_used;
    int out_file, err_file; /* log files, -1 when none */
    char error_file[PATH_MAX];
    int exitcode;
    bool failed; /* ended on its own with a non-zero status (or was the watchdog's victim) */
    /* heartbeat */
    uint64_t hb_count, hb_step;
    uint64_t hb_last_ms;  /* uv_now of the last record */
    uint64_t hb_time_ns;  /* the worker's CLOCK_MONOTONIC in the last record */
    /* fault injection (ctrun_inject.h) */
    int armed;                 /* spec armed in CTRUN_FAULT, -1 none */
    char fault_text[48];       /* its CTRUN_FAULT value */
    int fault_spec;            /* spec the agent itself fired at this worker, -1 none */
    uint64_t fault_ns;         /* when (uv_hrtime) */
} ctrun_worker_t;

struct ctrun_agent {
    const ctrun_config_t *cfg;
    uv_loop_t loop;
    ctrun_agent_state_t state;
    int exit_code;

    /* store */
    bool is_host;
    ctrun_store_t *store;
    bool store_closing;
    ctrun_rdzv_coord_t coord;
    bool coord_open;
    ctrun_kv_t *kv;
    bool store_lost; /* a store request failed: no more requests, no exit barrier */
    char master_addr[CT_HOST_MAX];
    int master_port;
    ctrun_rdzv_t rdzv;
    ctrun_rdzv_kind_t rdzv_kind;

    /* the current attempt */
    int attempt;
    ctrun_rdzv_plan_t plan;
    ctrun_worker_t *workers;
    int nworkers, nrunning, ngone;
    ctrun_outcome_t outcome;
    int outcome_node, outcome_signal;
    char outcome_host[64];     /* LOST: the lost node's name */
    ctrun_failure_t *failures; /* this node's failed workers of this attempt, in order */
    size_t nfailures;
    bool failure_posted;

    /* signals and timers */
    uv_signal_t signals[CTRUN_SIGNALS_MAX];
    int nsignals;
    int stop_signal; /* the first handled signal received, 0 if none */
    int sigint_count;
    uv_timer_t grace_timer, rdzv_timer, watchdog_timer, barrier_timer;
    /* node heartbeats (multi-node jobs): written every interval once registered; a client
     * that gets no reply for the timeout has lost the store's host */
    uv_timer_t hb_timer;
    uint64_t hb_seq, hb_ok_ms, hb_tick_ms;
    bool hb_on;
    uint64_t hb_interval_ms, hb_timeout_ms;
    bool killed; /* SIGKILL already sent to this attempt's workers */

    /* fault tolerance: injection, restart policy, the recovery table */
    ctrun_inject_t inject;
    int *inject_in_attempt;    /* per spec: firings in the current attempt (every=) */
    uv_timer_t inject_timer, restart_timer;
    uint64_t start_ms, attempt_start_ms; /* uv_now at ctrun's start, at the attempt's start */
    bool restart_pending;      /* waiting out --restart_backoff */
    int no_progress_run;       /* consecutive attempts without step progress */
    int fail_exit;             /* exit status of a failed job (CTRUN_EXIT_FAILED or ..._NO_PROGRESS) */
    ctrun_recovery_t recovery;
    ctrun_cgroup_t cgroup; /* the job's cgroup v2, empty when unavailable */

    /* output */
    ctrun_console_t *console; /* ctrun's stdout and stderr (ctrun_console.h); NULL: direct */
    ctrun_logs_t logs;
    const char *prefix_template; /* TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE */
    char host[256];              /* this node's name (FQDN), for reports */
    const char *entrypoint;
};

/* ---- ctrun_group.c ---------------------------------------------------------------------- */

/* Creates the attempt's worker array (all IDLE) and the log folder of the attempt. */
int ctrun_group_prepare(ctrun_agent_t *a, ct_errbuf_t *eb);

/* Starts worker i: environment, command line, sinks, spawn. On success it is RUNNING; on
 * failure eb says why and the worker is GONE (or will be, when its handles close). */
int ctrun_group_spawn(ctrun_agent_t *a, int i, ct_errbuf_t *eb);

/* Sends sig to worker i's process group; logs torchrun's line for SIGTERM. */
void ctrun_group_signal(ctrun_agent_t *a, int i, int sig);

/* Frees the attempt's workers (every one must be GONE). */
void ctrun_group_free(ctrun_agent_t *a);

/* The INFO block of the attempt's rendezvous result (logged at INFO). */
void ctrun_group_log_rendezvous(ctrun_agent_t *a);

/* Called by the proc callbacks (in ctrun_agent.c). */
void ctrun__agent_worker_exit(ctrun_agent_t *a, int i, int exitcode);
void ctrun__agent_worker_gone(ctrun_agent_t *a, int i);
void ctrun__agent_worker_heartbeat(ctrun_agent_t *a, int i, const ct_heartbeat_record_t *rec);

#endif /* CTRUN_AGENT_INTERNAL_H */
