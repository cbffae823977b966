/*
 * ctrun_agent_internal.h - the agent's data and the functions its files share:
 * ctrun_agent.c (set-up, run, teardown), ctrun_agent_step.c (events, the transition function
 * and its decisions), ctrun_agent_observe.c (torchelastic's event records and the numbers
 * behind the metrics endpoint), ctrun_metrics.c (that endpoint), ctrun_agent_outcome.c (an
 * attempt's outcome and failure records in the store), ctrun_agent_etcd.c (the rendezvous kept in
 * etcd: --rdzv_backend=etcd-v3), ctrun_agent_end.c (report, exit barrier, closing),
 * ctrun_agent_hb.c (heartbeats, watchdog, store loss), ctrun_agent_inject.c (fault injection) and
 * ctrun_group.c (the mechanics of one attempt's workers: environments, output sinks, spawning,
 * signalling, freeing).
 *
 * Two explicit state machines, both changed only in ctrun_agent_step.c (the transition code;
 * ctrun_group_prepare creates an attempt's workers IDLE):
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
#include "ctrun_filetimer.h"
#include "ctrun_logs.h"
#include "ctrun_proc.h"
#include "ctrun_rdzv.h"
#include "ctrun_reaper.h"
#include "ctrun_recovery.h"
#include "ctrun_report.h"
#include "ctrun_sink.h"
#include "ctrun_store.h"

typedef struct ctrun_agent ctrun_agent_t;

/* What a restart is blamed on, for the metrics: a local worker's exit status, a signal, a hang
 * seen by the watchdog, a timer (a FileTimer expiry), a lost node, a failure on another node, a
 * node joining (a membership change). */
enum {
    CTRUN_AGENT__CAUSE_EXIT = 0,
    CTRUN_AGENT__CAUSE_SIGNAL,
    CTRUN_AGENT__CAUSE_HANG,
    CTRUN_AGENT__CAUSE_TIMER,
    CTRUN_AGENT__CAUSE_LOST_NODE,
    CTRUN_AGENT__CAUSE_REMOTE,
    CTRUN_AGENT__CAUSE_MEMBERSHIP,
    CTRUN_AGENT__CAUSES
};
extern const char *const ctrun_agent__cause_names[CTRUN_AGENT__CAUSES];

/* Upper bounds (seconds) of the failure detection latency histogram's buckets, +Inf apart. */
#define CTRUN_AGENT__DETECT_BUCKETS 10
extern const double ctrun_agent__detect_bounds[CTRUN_AGENT__DETECT_BUCKETS];

/* A worker of the latest attempt, as the final event records need it after the attempt's
 * workers are freed. */
typedef struct ctrun_agent__last_worker {
    int rank, local_rank, pid, exitcode;
    bool failed;
    char error_file[PATH_MAX];
} ctrun_agent__last_worker_t;

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
    CTRUN_OUTCOME_LEFT,   /* a signalled node of an elastic job leaves (outcome_node = its id,
                           * outcome_signal the signal): re-form without using up a restart */
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
    uint64_t rate_step, rate_ms; /* steps per second: the sample the rate is measured from */
    double steps_per_s;          /* ... the last measured rate, -1 before there is one */
    /* fault injection (ctrun_inject.h) */
    int armed;                 /* spec armed in CTRUN_INJECT, -1 none */
    char fault_text[48];       /* its CTRUN_INJECT value */
    int fault_spec;            /* spec the agent itself fired at this worker, -1 none */
    uint64_t fault_ns;         /* when (uv_hrtime) */
    ctrun_filetimer_req_t timer_expired; /* its FileTimer that expired (the FILETIMER event) */
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
    bool fetching_failures; /* EXITING, reading every node's failure records for the report:
                             * the exit barrier may not end the agent before it printed it */
    char master_addr[CT_HOST_MAX];
    int master_port;
    ctrun_rdzv_t rdzv;
    ctrun_rdzv_kind_t rdzv_kind;

    /* etcd-v3 (ctrun_agent_etcd.c): the rounds are kept in etcd, not in a store of ours; kv,
     * coordinator and node heartbeats are unused, and `store` is the workers' store this node
     * hosts as a round's group rank 0 */
    bool use_etcd;
    struct ctrun_etcd_rdzv *etcd;
    char etcd_id[128];   /* this node in etcd: "<name>-<pid>" */
    bool etcd_round;     /* RENDEZVOUS: a round with this node formed; its store is awaited */
    char *etcd_report;   /* this node's failure record of the attempt (JSON), NULL when none */
    char *etcd_failures; /* the other nodes' records of the attempt seen so far, one a line */

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
    ctrun_reaper_t reaper; /* cleans up after the agent, however it ends (ctrun_reaper.h) */
    /* the FileTimer watchdog (ctrun_agent_ftimer.c) */
    ctrun_filetimers_t ftimers;
    char ftimer_path[PATH_MAX]; /* the named pipe (TORCHELASTIC_TIMER_FILE), "" when off */
    bool ftimer_made;           /* ctrun made it and removes it */
    int ftimer_fd, ftimer_wfd;  /* read end; a write end of its own, so it never reads EOF */
    bool ftimer_open;           /* the poll and timer handles are open */
    uv_poll_t ftimer_poll;
    uv_timer_t ftimer_timer;
    char ftimer_buf[2 * CTRUN_FILETIMER_REQUEST_MAX + 2];
    size_t ftimer_len;
    bool ftimer_skip; /* inside an oversized request: drop until its newline */
    int ftimer_warnings;
    char job_tag[CTRUN_REAPER_TAG_LEN + 1]; /* CTRUN_JOB_TAG of every worker, "" when none */

    /* output */
    ctrun_console_t *console; /* ctrun's stdout and stderr (ctrun_console.h); NULL: direct */
    ctrun_logs_t logs;
    const char *prefix_template; /* TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE (from the config) */
    int filtered_fd[2];          /* attempt_<k>/filtered_{stdout,stderr}.log, -1 when none */
    char host[256];              /* this node's name (FQDN), for reports */
    const char *entrypoint;

    /* torchelastic's event records and the metrics' numbers (ctrun_agent_observe.c) */
    uint64_t rdzv_start_ns;            /* when the current rendezvous began */
    int ev_group_rank, ev_group_world; /* the group before this rendezvous, -1 before any */
    ctrun_agent__last_worker_t *last;  /* the latest attempt's workers, kept past their freeing */
    int nlast;
    int restart_causes[CTRUN_AGENT__CAUSES]; /* restarts by cause (ctrun_agent__cause_names) */
    uint64_t detect_count[CTRUN_AGENT__DETECT_BUCKETS + 1]; /* per bucket, the last is +Inf */
    double detect_sum_s;                                    /* ... and their sum */
    struct ctrun_metrics *metrics;                          /* the HTTP endpoint, NULL when off */
};

/* ---- events and kv requests (ctrun_agent_step.c) ---------------------------------------- */

/* Kinds of the agent's own kv requests (the rendezvous has its own, see ctrun_rdzv.h). */
enum {
    CTRUN_AGENT__KV_OUTCOME = 1, /* GET /ctrun/a/<k>/outcome */
    CTRUN_AGENT__KV_POST,        /* COMPARE_SET of the outcome */
    CTRUN_AGENT__KV_APPEND,      /* APPEND a failure record */
    CTRUN_AGENT__KV_OK,          /* ADD /ctrun/a/<k>/ok */
    CTRUN_AGENT__KV_FAILURES,    /* GET /ctrun/a/<k>/failures */
    CTRUN_AGENT__KV_LEFT,        /* ADD /ctrun/left */
    CTRUN_AGENT__KV_HB,          /* ADD /ctrun/hb/<id> */
};

typedef enum ctrun_agent__event_kind {
    CTRUN_AGENT__EV_START = 0,
    CTRUN_AGENT__EV_KV,           /* reply */
    CTRUN_AGENT__EV_RDZV_TIMEOUT, /* the round did not complete in time */
    CTRUN_AGENT__EV_WORKER_EXIT,  /* worker, value = exit code */
    CTRUN_AGENT__EV_WORKER_GONE,  /* worker */
    CTRUN_AGENT__EV_WATCHDOG,     /* worker silent for --watchdog_timeout */
    CTRUN_AGENT__EV_SIGNAL,       /* value = signal */
    CTRUN_AGENT__EV_GRACE,        /* the grace period after SIGTERM is over */
    CTRUN_AGENT__EV_LEFT,         /* host: value = agents that left, -1 = coordinator error */
    CTRUN_AGENT__EV_BARRIER_TIMEOUT,
    CTRUN_AGENT__EV_STORE_GONE, /* a heartbeat failed or got no reply in time (client agents) */
    CTRUN_AGENT__EV_INJECT,     /* a time-triggered --inject spec is due */
    CTRUN_AGENT__EV_RESTART,    /* --restart_backoff is over */
    CTRUN_AGENT__EV_FILETIMER,  /* worker: its FileTimer expired (worker->timer_expired) */
    CTRUN_AGENT__EV_ETCD,       /* an event of the rendezvous kept in etcd (etcd) */
} ctrun_agent__event_kind_t;

typedef struct ctrun_agent__event {
    ctrun_agent__event_kind_t kind;
    int worker;
    int value;
    const ctrun_kv_reply_t *reply;
    const struct ctrun_etcd_rdzv_event *etcd;
} ctrun_agent__event_t;

static inline uint64_t ctrun_agent__tag(const ctrun_agent_t *a, unsigned kind)
{
    return CTRUN_TAG(CTRUN_TAG_AGENT, a->attempt, kind);
}

/* ---- across the agent's files ------------------------------------------------------------ */

/* ctrun_agent.c: set-up */
const char *ctrun_agent__host(ctrun_agent_t *a);
/* A block of text (a report) for ctrun's stderr, through the console queue. */
void ctrun_agent__print(ctrun_agent_t *a, const char *text);
double ctrun_agent__rdzv_timeout_s(const ctrun_agent_t *a);
void ctrun_agent__log_rdzv_timeout(ctrun_agent_t *a);

/* ctrun_agent_step.c: the transition function, and the callbacks that feed it */
void ctrun_agent__step(ctrun_agent_t *a, const ctrun_agent__event_t *ev);
void ctrun_agent__kv_cb(void *data, const ctrun_kv_reply_t *reply);
void ctrun_agent__left_cb(void *data, int left);
void ctrun_agent__signal_cb(uv_signal_t *h, int sig);
void ctrun_agent__grace_cb(uv_timer_t *t);
void ctrun_agent__rdzv_timer_cb(uv_timer_t *t);
void ctrun_agent__barrier_cb(uv_timer_t *t);
void ctrun_agent__restart_cb(uv_timer_t *t);

/* ctrun_agent_outcome.c: an attempt's end, through the store */
void ctrun_agent__await_outcome(ctrun_agent_t *a);
void ctrun_agent__note_outcome(ctrun_agent_t *a, const char *text);
void ctrun_agent__log_outcome(const ctrun_agent_t *a);
void ctrun_agent__post_outcome(ctrun_agent_t *a, const char *text);
void ctrun_agent__post_failed(ctrun_agent_t *a);
void ctrun_agent__post_stopped(ctrun_agent_t *a, int sig);
bool ctrun_agent__can_leave(const ctrun_agent_t *a);
void ctrun_agent__post_left(ctrun_agent_t *a, int sig);
void ctrun_agent__post_ok(ctrun_agent_t *a);
void ctrun_agent__record_failure(ctrun_agent_t *a, int i, int exitcode, const char *message,
                                 const char *cause, int64_t detect_ns);
void ctrun_agent__fetch_failures(ctrun_agent_t *a);

/* ctrun_agent_etcd.c: the rendezvous kept in etcd */
/* Joins (the first time) or asks for the next round. Returns 0 or an error (logged). */
int ctrun_agent__etcd_rendezvous(ctrun_agent_t *a);
/* Group rank 0: a fresh workers' store, published in etcd (master_addr/port set). */
int ctrun_agent__etcd_host_store(ctrun_agent_t *a);
/* Another node's store "host:port" as the workers' MASTER_ADDR/MASTER_PORT. */
int ctrun_agent__etcd_use_store(ctrun_agent_t *a, const char *addr);
void ctrun_agent__etcd_failure(ctrun_agent_t *a, const char *node, const char *record);
/* Every failure record of the attempt for the report (this node's first), or NULL. */
const char *ctrun_agent__etcd_report_lines(ctrun_agent_t *a);
/* An outcome from etcd (node ids become group ranks) -> ctrun_agent__note_outcome. */
void ctrun_agent__etcd_note_outcome(ctrun_agent_t *a, const char *text);
void ctrun_agent__etcd_post(ctrun_agent_t *a, const char *text);
void ctrun_agent__etcd_post_failed(ctrun_agent_t *a);
void ctrun_agent__etcd_post_ok(ctrun_agent_t *a);
void ctrun_agent__etcd_close(ctrun_agent_t *a);

/* ctrun_agent_end.c: the end of the job */
void ctrun_agent__report(ctrun_agent_t *a, const char *lines);
void ctrun_agent__end_timers(ctrun_agent_t *a);
int ctrun_agent__barrier_target(const ctrun_agent_t *a);
int ctrun_agent__barrier_leave(ctrun_agent_t *a);
void ctrun_agent__barrier_wait(ctrun_agent_t *a);
void ctrun_agent__close(ctrun_agent_t *a);
void ctrun_agent__recovery_report(ctrun_agent_t *a);
void ctrun_agent__tidy_logs(const ctrun_logs_t *logs);

/* ctrun_agent_hb.c: heartbeats, watchdog, store loss */
void ctrun_agent__store_lost(ctrun_agent_t *a, const char *what);
/* A kv submission's result: anything but 0 loses the store. */
void ctrun_agent__kv(ctrun_agent_t *a, int rc);
void ctrun_agent__watchdog_blame(ctrun_agent_t *a, int i);
void ctrun_agent__hb_cb(uv_timer_t *t);

/* ctrun_agent_ftimer.c: the FileTimer watchdog (TORCHELASTIC_ENABLE_FILE_TIMER=1) */
int ctrun_agent__ftimer_setup(ctrun_agent_t *a, ct_errbuf_t *eb);
void ctrun_agent__ftimer_blame(ctrun_agent_t *a, int i);
void ctrun_agent__ftimer_forget(ctrun_agent_t *a, pid_t pid);
void ctrun_agent__ftimer_close(ctrun_agent_t *a);
void ctrun_agent__ftimer_cleanup(ctrun_agent_t *a);

/* ctrun_agent_inject.c: fault injection */
void ctrun_agent__inject_attempt(ctrun_agent_t *a);
void ctrun_agent__inject_schedule(ctrun_agent_t *a);
void ctrun_agent__inject_fire(ctrun_agent_t *a);
void ctrun_agent__exit_cause(ctrun_agent_t *a, int i, int exitcode, char *cause, size_t size,
                             int64_t *detect_ns);
void ctrun_agent__inject_cb(uv_timer_t *t);

/* ctrun_agent_observe.c: torchelastic's event records, the numbers behind the metrics */
void ctrun_agent__observe_rendezvous(ctrun_agent_t *a);
void ctrun_agent__observe_started(ctrun_agent_t *a, uint64_t prepare_ns);
void ctrun_agent__observe_heartbeat(ctrun_agent_t *a, int i);
void ctrun_agent__observe_detect(ctrun_agent_t *a, int64_t detect_ns);
int ctrun_agent__cause_of(const char *recovery_cause);
void ctrun_agent__observe_free(ctrun_agent_t *a);
void ctrun_agent__observe_end(ctrun_agent_t *a);

/* ctrun_metrics.c: the metrics endpoint on the agent's loop (--metrics_port) */
int ctrun_metrics_start(ctrun_agent_t *a, ct_errbuf_t *eb);
void ctrun_metrics_close(ctrun_agent_t *a);
/* The exposition text of the agent's state (malloc'd). Returns 0 or -ENOMEM. */
int ctrun_metrics_format(ctrun_agent_t *a, char **out);

/* ---- ctrun_group.c ---------------------------------------------------------------------- */

/* Creates the attempt's worker array (all IDLE) and the log folder of the attempt. */
int ctrun_group_prepare(ctrun_agent_t *a, ct_errbuf_t *eb);

/* Starts worker i: environment, command line, sinks, spawn. On success it is RUNNING; on
 * failure eb says why and the worker is GONE (or will be, when its handles close). */
int ctrun_group_spawn(ctrun_agent_t *a, int i, ct_errbuf_t *eb);

/* Sends sig to worker i's process group; logs torchrun's line for SIGTERM. */
void ctrun_group_signal(ctrun_agent_t *a, int i, int sig);

/* The grace period is over: SIGKILL to every started worker's process group (torchrun's line
 * for those still running) and to the job's cgroup. */
void ctrun_group_kill(ctrun_agent_t *a);

/* Frees the attempt's workers (every one must be GONE). */
void ctrun_group_free(ctrun_agent_t *a);

/* The INFO block of the attempt's rendezvous result (logged at INFO). */
void ctrun_group_log_rendezvous(ctrun_agent_t *a);

/* Called by the proc callbacks (in ctrun_agent_step.c and ctrun_agent_hb.c). */
void ctrun_agent__worker_exit(ctrun_agent_t *a, int i, int exitcode);
void ctrun_agent__worker_gone(ctrun_agent_t *a, int i);
void ctrun_agent__worker_heartbeat(ctrun_agent_t *a, int i, const ct_heartbeat_record_t *rec);

#endif /* CTRUN_AGENT_INTERNAL_H */
