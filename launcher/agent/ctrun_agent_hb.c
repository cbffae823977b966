/*
 * ctrun_agent_hb.c - heartbeats and the loss of the store: node heartbeats (an ADD per interval;
 * a client that gets no reply for the timeout has lost the store's host, which becomes a
 * STORE_GONE event), worker heartbeats (bookkeeping, and the watchdog timer whose expiry becomes
 * a WATCHDOG event), whom the watchdog blames when a worker falls silent, and marking the store
 * lost when a request cannot be made or fails.
 *
 * Deliberately not here: what the agent does about a silent worker or a lost store
 * (ctrun_agent_step.c); changing any state.
 */
#include <signal.h>
#include <stdio.h>

#include "ct_log.h"
#include "ct_proc.h"
#include "ctrun_agent_internal.h"

/* A store request could not be made or failed: from here on the agent works alone. */
void ctrun_agent__store_lost(ctrun_agent_t *a, const char *what)
{
    if (!a->store_lost)
        ct_log_error("lost the rendezvous store at %s:%d: %s", a->master_addr, a->master_port,
                     what);
    a->store_lost = true;
}

void ctrun_agent__kv(ctrun_agent_t *a, int rc)
{
    if (rc != 0)
        ctrun_agent__store_lost(a, ct_strerror(rc));
}

/* Worker i was silent for --watchdog_timeout. Every silent or stopped worker is asked for a
 * stack dump (CT_HEARTBEAT_DUMP_SIGNAL); the stuck rank - a stopped one if any, else i, the first
 * overdue - is recorded as failed with its last step (the transition function then fails the
 * attempt as for a crash). The stop's SIGTERM comes after the dump signal, and a pending
 * SIGUSR1 (10) is delivered before a pending SIGTERM (15), so a stopped worker, once continued
 * by the stop, prints its stack and only then ends (libctworker's handler defers SIGTERM until
 * it has printed). */
void ctrun_agent__watchdog_blame(ctrun_agent_t *a, int i)
{
    uint64_t now = uv_now(&a->loop);
    uint64_t timeout = (uint64_t)(a->cfg->watchdog_timeout_s * 1000.0);
    int victim = i;
    bool victim_stopped = false;
    for (int j = 0; j < a->nworkers; j++) {
        ctrun_worker_t *w = &a->workers[j];
        if (w->state != CTRUN_WORKER_RUNNING || w->hb_count == 0)
            continue;
        /* A stopped worker is stuck whatever its last heartbeat says (its peers, waiting for
         * it in a collective, may well have gone silent first). */
        char st = ct_proc_state(w->proc.pid);
        bool stopped = st == 'T' || st == 't'; /* a SIGSTOP, a debugger */
        if (!stopped && w->hb_last_ms + timeout > now)
            continue;
        if (stopped && !victim_stopped) {
            victim = j;
            victim_stopped = true;
        }
        ct_log_warn("watchdog: local rank %d (rank %d, pid %d) silent for %.1f s after step "
                    "%llu; asking it for a stack dump (signal %d) in its stderr log",
                    j, w->rank, (int)w->proc.pid, (double)(now - w->hb_last_ms) / 1000.0,
                    (unsigned long long)w->hb_step, CT_HEARTBEAT_DUMP_SIGNAL);
        kill(w->proc.pid, CT_HEARTBEAT_DUMP_SIGNAL);
    }
    ctrun_worker_t *w = &a->workers[victim];
    char msg[256], cause[CTRUN_RECOVERY_CAUSE_MAX] = "";
    snprintf(msg, sizeof msg,
             "watchdog: no progress for %g s (last heartbeat at step %llu); see --watchdog_timeout",
             a->cfg->watchdog_timeout_s, (unsigned long long)w->hb_step);
    ct_log_error("local rank %d (rank %d, pid %d): %s", victim, w->rank, (int)w->proc.pid, msg);
    /* An injected hang that fired: the worker stopped itself right after a heartbeat at its
     * step, or the agent stopped it. */
    for (int j = 0; j < a->nworkers; j++) {
        ctrun_worker_t *x = &a->workers[j];
        if (x->armed >= 0 && a->inject.specs[x->armed].kind == CTRUN_INJECT_HANG &&
            x->hb_count > 0 && (int64_t)x->hb_step >= a->inject.specs[x->armed].step) {
            a->inject.specs[x->armed].fired++;
            if (j == victim)
                snprintf(cause, sizeof cause, "watchdog: injected hang at step %llu (spec %d)",
                         (unsigned long long)x->hb_step, x->armed + 1);
            x->armed = -1;
        } else if (j == victim && x->fault_spec >= 0) {
            snprintf(cause, sizeof cause, "watchdog: injected %s (spec %d)",
                     ctrun_inject_kind_name(a->inject.specs[x->fault_spec].kind),
                     x->fault_spec + 1);
        }
    }
    if (cause[0] == '\0')
        snprintf(cause, sizeof cause, "watchdog: silent after step %llu",
                 (unsigned long long)w->hb_step);
    uint64_t hr = uv_hrtime();
    int64_t detect = w->fault_spec >= 0 && hr > w->fault_ns ? (int64_t)(hr - w->fault_ns)
                     : hr > w->hb_time_ns                   ? (int64_t)(hr - w->hb_time_ns)
                                                            : -1;
    ctrun_agent__record_failure(a, victim, -SIGTERM, msg, cause, detect);
}

static void ctrun_agent__watchdog_cb(uv_timer_t *t)
{
    ctrun_agent_t *a = t->data;
    uint64_t now = uv_now(&a->loop);
    uint64_t timeout = (uint64_t)(a->cfg->watchdog_timeout_s * 1000.0);
    uint64_t next = UINT64_MAX;
    for (int i = 0; i < a->nworkers; i++) {
        ctrun_worker_t *w = &a->workers[i];
        if (w->state != CTRUN_WORKER_RUNNING || w->hb_count == 0)
            continue;
        uint64_t due = w->hb_last_ms + timeout;
        if (due <= now) {
            ctrun_agent__event_t ev = {.kind = CTRUN_AGENT__EV_WATCHDOG, .worker = i};
            ctrun_agent__step(a, &ev);
            return;
        }
        if (due - now < next)
            next = due - now;
    }
    if (next != UINT64_MAX)
        uv_timer_start(t, ctrun_agent__watchdog_cb, next, 0);
}

void ctrun_agent__worker_heartbeat(ctrun_agent_t *a, int i, const ct_heartbeat_record_t *rec)
{
    /* Bookkeeping only (not a state change): the watchdog timer turns silence into an event. */
    ctrun_worker_t *w = &a->workers[i];
    w->hb_count++;
    w->hb_step = rec->step;
    w->hb_last_ms = uv_now(&a->loop);
    w->hb_time_ns = rec->time_ns;
    ctrun_agent__observe_heartbeat(a, i);
    if (a->state == CTRUN_AGENT_RUNNING || a->state == CTRUN_AGENT_SUCCEEDED ||
        a->state == CTRUN_AGENT_STOPPING) /* records read after a failure still count */
        ctrun_recovery_heartbeat(&a->recovery, a->attempt, (int64_t)rec->step, uv_hrtime());
    if (a->cfg->watchdog_timeout_s > 0 && a->state == CTRUN_AGENT_RUNNING &&
        !uv_is_active((uv_handle_t *)&a->watchdog_timer))
        uv_timer_start(&a->watchdog_timer, ctrun_agent__watchdog_cb,
                       (uint64_t)(a->cfg->watchdog_timeout_s * 1000.0), 0);
}

/* Node heartbeat: one ADD per interval once this node is registered. A client agent that has
 * had no reply for the timeout has lost the store's host (a dead machine or a cut link answers
 * nothing, so a failed request alone would come too late). */
void ctrun_agent__hb_cb(uv_timer_t *t)
{
    ctrun_agent_t *a = t->data;
    if (a->state == CTRUN_AGENT_DONE || !a->rdzv.registered || a->store_lost)
        return;
    uint64_t now = uv_now(&a->loop);
    if (!a->hb_on) {
        a->hb_on = true;
        a->hb_ok_ms = a->hb_tick_ms = now;
    }
    /* After a stall of this loop, replies that arrived meanwhile are read after the timers:
     * judge the silence on the next tick. */
    bool late = now - a->hb_tick_ms > 2 * a->hb_interval_ms;
    a->hb_tick_ms = now;
    if (!a->is_host && !late && now - a->hb_ok_ms > a->hb_timeout_ms) {
        char why[256];
        snprintf(why, sizeof why,
                 "no heartbeat reply for %.1f s (heartbeat_timeout %.1f s): the node hosting the "
                 "store is gone or unreachable",
                 (double)(now - a->hb_ok_ms) / 1000.0, (double)a->hb_timeout_ms / 1000.0);
        ctrun_agent__store_lost(a, why);
        ctrun_agent__event_t ev = {.kind = CTRUN_AGENT__EV_STORE_GONE};
        ctrun_agent__step(a, &ev);
        return;
    }
    /* An ADD, not a SET: the store answers it, so a reply proves the round trip (a SET has no
     * reply and "succeeds" into the socket buffer of a dead link). */
    char key[CTRUN_RDZV_KEY_MAX];
    ctrun_rdzv_key(key, "hb/%d", a->rdzv.node_id);
    a->hb_seq++;
    ctrun_agent__kv(a, ctrun_kv_add(a->kv, key, 1, ctrun_agent__tag(a, CTRUN_AGENT__KV_HB)));
}
