/*
 * ctrun_agent_observe.c - torchelastic's event records for --event_log_handler console
 * (ctrun_events.h), at the points where torchrun's agent records them.
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
 * they return).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_log.h"
#include "ct_time.h"
#include "ctrun_agent_internal.h"
#include "ctrun_events.h"

/* A new rendezvous begins: when, for its duration. */
void ctrun_agent__observe_rendezvous(ctrun_agent_t *a)
{
    a->rdzv_start_ns = uv_hrtime();
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
    ev->rdzv_backend = a->rdzv_kind == CTRUN_RDZV_KIND_STATIC ? "static" : "c10d";
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
