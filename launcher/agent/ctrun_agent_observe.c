/*
 * ctrun_agent_observe.c - torchelastic's event records for --event_log_handler console
 * (ctrun_events.h), at the points where torchrun's agent records them, and the bookkeeping the
 * metrics endpoint reads (restarts by cause, steps per second, failure detection latency).
 *
 * torchrun's records, in its order: per attempt RENDEZVOUS and ASSIGN_WORKER_RANKS (the agent,
 * with their durations; the group fields still those of the group before the rendezvous), then
 * START per worker; at the end of the run one record per worker of the last attempt
 * (SUCCEEDED; or FAILED for those that failed and TERMINATED for the others), then the agent's
 * own: SUCCEEDED when the run came to a result (torchrun records it for a job whose workers
 * failed, too), FAILED when the agent itself was stopped (a signal, a lost store, a failed
 * rendezvous), with no worker records then.
 *
 * Deliberately not here: deciding anything (ctrun_agent_step.c calls these and acts on nothing
 * they return), the HTTP side (ctrun_metrics.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_log.h"
#include "ct_time.h"
#include "ctrun_agent_internal.h"
#include "ctrun_events.h"

const char *const ctrun_agent__cause_names[CTRUN_AGENT__CAUSES] = {
    [CTRUN_AGENT__CAUSE_EXIT] = "exit",
    [CTRUN_AGENT__CAUSE_SIGNAL] = "signal",
    [CTRUN_AGENT__CAUSE_HANG] = "hang",
    [CTRUN_AGENT__CAUSE_TIMER] = "timer",
    [CTRUN_AGENT__CAUSE_LOST_NODE] = "lost_node",
    [CTRUN_AGENT__CAUSE_REMOTE] = "remote",
    [CTRUN_AGENT__CAUSE_MEMBERSHIP] = "membership",
};

const double ctrun_agent__detect_bounds[CTRUN_AGENT__DETECT_BUCKETS] = {
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120};

/* The cause class of a recovery-table cause ("exit 3", "signal SIGKILL", "watchdog: ...",
 * "injected kill (spec 1)", "could not start (exit 127)", a timer's expiry). */
int ctrun_agent__cause_of(const char *cause)
{
    if (strncmp(cause, "watchdog", 8) == 0 || strstr(cause, "injected hang") != NULL)
        return CTRUN_AGENT__CAUSE_HANG;
    if (strstr(cause, "timer") != NULL)
        return CTRUN_AGENT__CAUSE_TIMER;
    if (strncmp(cause, "exit", 4) == 0 || strncmp(cause, "could not start", 15) == 0)
        return CTRUN_AGENT__CAUSE_EXIT;
    return CTRUN_AGENT__CAUSE_SIGNAL; /* "signal ...", injected kills */
}

/* A new rendezvous begins: when (for its duration), and, after the first, what the restart that
 * led here is blamed on. Called before the attempt's outcome is reset. */
void ctrun_agent__observe_rendezvous(ctrun_agent_t *a)
{
    a->rdzv_start_ns = uv_hrtime();
    if (a->state == CTRUN_AGENT_INIT)
        return;
    int cause = CTRUN_AGENT__CAUSE_REMOTE;
    if (a->outcome == CTRUN_OUTCOME_LOST) {
        cause = CTRUN_AGENT__CAUSE_LOST_NODE;
    } else if (a->outcome == CTRUN_OUTCOME_REJOIN || a->outcome == CTRUN_OUTCOME_LEFT) {
        cause = CTRUN_AGENT__CAUSE_MEMBERSHIP; /* a node joined, or one left (scale-down) */
    } else {
        for (size_t i = 0; i < a->recovery.n; i++) {
            if (a->recovery.rows[i].attempt == a->attempt) {
                cause = ctrun_agent__cause_of(a->recovery.rows[i].cause);
                break;
            }
        }
    }
    a->restart_causes[cause]++;
}

/* A local failure was detected detect_ns after it happened (-1: unknown, not counted). */
void ctrun_agent__observe_detect(ctrun_agent_t *a, int64_t detect_ns)
{
    if (detect_ns < 0)
        return;
    double s = (double)detect_ns / 1e9;
    int b = 0;
    while (b < CTRUN_AGENT__DETECT_BUCKETS && s > ctrun_agent__detect_bounds[b])
        b++;
    a->detect_count[b]++;
    a->detect_sum_s += s;
}

/* A heartbeat of worker i arrived: the steps-per-second rate, over at least one second. */
void ctrun_agent__observe_heartbeat(ctrun_agent_t *a, int i)
{
    ctrun_worker_t *w = &a->workers[i];
    if (w->hb_count == 1) {
        w->rate_step = w->hb_step;
        w->rate_ms = w->hb_last_ms;
        w->steps_per_s = -1;
        return;
    }
    if (w->hb_last_ms >= w->rate_ms + 1000) {
        double dt = (double)(w->hb_last_ms - w->rate_ms) / 1000.0;
        w->steps_per_s = w->hb_step >= w->rate_step ? (double)(w->hb_step - w->rate_step) / dt : 0;
        w->rate_step = w->hb_step;
        w->rate_ms = w->hb_last_ms;
    }
}

/* The fields every record of this agent shares. */
static void ctrun_agent__event_base(const ctrun_agent_t *a, ctrun_event_t *ev, const char *state)
{
    const ctrun_config_t *cfg = a->cfg;
    memset(ev, 0, sizeof *ev);
    ev->state = state;
    ev->timestamp_ms = (int64_t)(ct_time_unix_s() * 1000.0);
    ev->run_id = cfg->run_id;
    ev->role = cfg->role;
    ev->hostname = a->host;
    ev->rdzv_backend = a->use_etcd                              ? "etcd-v3"
                       : a->rdzv_kind == CTRUN_RDZV_KIND_STATIC ? "static"
                                                                : "c10d";
    /* torchrun names the program it executes: its interpreter's file name for scripts */
    const char *prog = cfg->use_python ? cfg->python : cfg->script;
    const char *slash = strrchr(prog, '/');
    ev->entry_point = slash ? slash + 1 : prog;
    ev->global_rank = -1;
    ev->group_rank = a->ev_group_rank;
    ev->group_world_size = a->ev_group_world;
    ev->agent_restarts = a->plan.restarts;
    ev->duration_ms = -1;
}

static void ctrun_agent__event_emit(ctrun_agent_t *a, const ctrun_event_t *ev)
{
    char *line = NULL;
    if (ctrun_event_format(ev, &line) == 0)
        ctrun_agent__print(a, line);
    else
        ct_log_warn("out of memory: an event record (%s) is lost", ev->state);
    free(line);
}

static void ctrun_agent__event_worker(ctrun_agent_t *a, ctrun_event_t *ev, int rank, int local_rank,
                                      const char *worker_id)
{
    ev->worker = true;
    ev->global_rank = rank;
    ev->local_rank = local_rank;
    ev->role_rank = rank;
    ev->role_world_size = a->plan.world_size;
    ev->worker_id = worker_id;
}

/* The attempt's workers have started: its RENDEZVOUS and ASSIGN_WORKER_RANKS records, then a
 * START per worker. prepare_ns: how long preparing the attempt took (ranks, folders). */
void ctrun_agent__observe_started(ctrun_agent_t *a, uint64_t prepare_ns)
{
    if (a->cfg->event_log_console) {
        ctrun_event_t ev;
        uint64_t now = uv_hrtime();
        uint64_t rdzv_ns =
            now - a->rdzv_start_ns > prepare_ns ? now - a->rdzv_start_ns - prepare_ns : 0;
        ctrun_agent__event_base(a, &ev, "RENDEZVOUS");
        ev.duration_ms = (double)rdzv_ns / 1e6;
        ctrun_agent__event_emit(a, &ev);
        ctrun_agent__event_base(a, &ev, "ASSIGN_WORKER_RANKS");
        ev.duration_ms = (double)prepare_ns / 1e6;
        ctrun_agent__event_emit(a, &ev);
    }
    a->ev_group_rank = a->plan.group_rank;
    a->ev_group_world = a->plan.nnodes;
    for (int i = 0; a->cfg->event_log_console && i < a->nworkers; i++) {
        const ctrun_worker_t *w = &a->workers[i];
        if (w->state != CTRUN_WORKER_RUNNING)
            continue;
        char id[24];
        snprintf(id, sizeof id, "%d", (int)w->proc.pid);
        ctrun_event_t ev;
        ctrun_agent__event_base(a, &ev, "START");
        ctrun_agent__event_worker(a, &ev, w->rank, w->local_rank, id);
        ctrun_agent__event_emit(a, &ev);
    }
}

/* The attempt's workers are about to be freed: keep what the final records need. */
void ctrun_agent__observe_free(ctrun_agent_t *a)
{
    if (a->nworkers == 0)
        return;
    ctrun_agent__last_worker_t *last = realloc(a->last, (size_t)a->nworkers * sizeof *last);
    if (last == NULL) {
        a->nlast = 0;
        return;
    }
    a->last = last;
    a->nlast = a->nworkers;
    for (int i = 0; i < a->nworkers; i++) {
        const ctrun_worker_t *w = &a->workers[i];
        last[i] = (ctrun_agent__last_worker_t){.rank = w->rank,
                                               .local_rank = w->local_rank,
                                               .pid = (int)w->proc.pid,
                                               .exitcode = w->exitcode,
                                               .failed = w->failed};
        snprintf(last[i].error_file, sizeof last[i].error_file, "%s",
                 a->logs.disabled ? "" : w->error_file);
    }
}

/* The run is over: the last attempt's workers, then the agent. */
void ctrun_agent__observe_end(ctrun_agent_t *a)
{
    if (!a->cfg->event_log_console)
        return;
    int64_t run_s = (int64_t)((uv_now(&a->loop) - a->start_ms) / 1000);
    bool agent_failed = a->nlast == 0 || a->store_lost || a->stop_signal != 0 ||
                        (a->exit_code != 0 && a->exit_code != CTRUN_EXIT_FAILED &&
                         a->exit_code != CTRUN_EXIT_NO_PROGRESS);
    for (int i = 0; !agent_failed && i < a->nlast; i++) {
        const ctrun_agent__last_worker_t *w = &a->last[i];
        const char *state = a->exit_code == 0 ? "SUCCEEDED" : w->failed ? "FAILED" : "TERMINATED";
        char id[24], *raw = NULL;
        snprintf(id, sizeof id, "%d", w->pid);
        ctrun_event_t ev;
        ctrun_agent__event_base(a, &ev, state);
        ctrun_agent__event_worker(a, &ev, w->rank, w->local_rank, id);
        ev.total_run_time = run_s;
        if (w->failed) {
            ev.has_exit = true;
            ev.exit_code = w->exitcode;
            ev.worker_pid = w->pid;
            if (ctrun_event_raw_error(w->error_file, w->exitcode, &raw) == 0)
                ev.raw_error = raw;
        }
        ctrun_agent__event_emit(a, &ev);
        free(raw);
    }
    ctrun_event_t ev;
    ctrun_agent__event_base(a, &ev, agent_failed ? "FAILED" : "SUCCEEDED");
    ev.total_run_time = run_s;
    char why[96] = "";
    if (agent_failed) {
        if (a->stop_signal != 0)
            snprintf(why, sizeof why, "the agent was stopped by signal %d", a->stop_signal);
        else if (a->store_lost)
            snprintf(why, sizeof why, "the rendezvous store was lost");
        else
            snprintf(why, sizeof why, "the agent ended with exit status %d", a->exit_code);
        ev.raw_error = why;
    }
    ctrun_agent__event_emit(a, &ev);
}
