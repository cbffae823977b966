/*
 * ctrun_agent_inject.c - the agent's side of --inject (ctrun_inject.h): per attempt, the
 * every= counts and a warning for specs that name a missing rank; the timer of the
 * time-triggered specs and firing them (SIGKILL or SIGSTOP to a worker, SIGKILL to this agent);
 * telling whether a worker's death was an injected fault. Step triggers are armed per worker in
 * ctrun_group.c and executed by the worker itself.
 *
 * Deliberately not here: parsing the specs (ctrun_inject.c, once, at parse time; the agent
 * works on a copy of the parsed specs because it counts firings in them), and any state
 * change (the transition function calls ctrun_agent__inject_fire in RUNNING only).
 */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include "ct_log.h"
#include "ctrun_agent_internal.h"

static bool ctrun_agent__inject_timed(const ctrun_inject_spec_t *s)
{
    return s->trigger == CTRUN_INJECT_AT_TIME || s->trigger == CTRUN_INJECT_EVERY;
}

static uint64_t ctrun_agent__inject_due(const ctrun_agent_t *a, size_t i)
{
    const ctrun_inject_spec_t *s = &a->inject.specs[i];
    if (s->trigger == CTRUN_INJECT_AT_TIME)
        return a->start_ms + (uint64_t)(s->seconds * 1000.0 + 0.5);
    return a->attempt_start_ms +
           (uint64_t)(s->seconds * 1000.0 * (double)(a->inject_in_attempt[i] + 1) + 0.5);
}

/* An attempt's workers are about to start: its every= periods count from now, and the host
 * says which specs name a rank the attempt does not have. */
void ctrun_agent__inject_attempt(ctrun_agent_t *a)
{
    for (size_t k = 0; k < a->inject.n; k++) {
        a->inject_in_attempt[k] = 0;
        int missing = ctrun_inject_missing_rank(&a->inject, k, a->plan.world_size);
        if (missing >= 0 && a->plan.group_rank == 0)
            ct_log_warn("fault injection: spec %zu (%s) names rank %d, but attempt %d has %d "
                        "rank%s: it cannot fire in this attempt",
                        k + 1, a->inject.specs[k].text, missing, a->attempt, a->plan.world_size,
                        a->plan.world_size == 1 ? "" : "s");
    }
}

/* Starts the injection timer for the next due time-triggered spec (RUNNING only). */
void ctrun_agent__inject_schedule(ctrun_agent_t *a)
{
    uv_timer_stop(&a->inject_timer);
    if (a->state != CTRUN_AGENT_RUNNING)
        return;
    uint64_t now = uv_now(&a->loop), next = UINT64_MAX;
    for (size_t i = 0; i < a->inject.n; i++) {
        if (!ctrun_agent__inject_timed(&a->inject.specs[i]) || !ctrun_inject_pending(&a->inject, i))
            continue;
        uint64_t due = ctrun_agent__inject_due(a, i);
        uint64_t in = due > now ? due - now : 0;
        if (in < next)
            next = in;
    }
    if (next != UINT64_MAX)
        uv_timer_start(&a->inject_timer, a->inject_timer.timer_cb, next, 0);
}

/* Fires every due time-triggered spec (RUNNING only). Every agent of the job counts every
 * firing (so their seeded draws agree); the one that owns the target acts. */
void ctrun_agent__inject_fire(ctrun_agent_t *a)
{
    uint64_t now = uv_now(&a->loop);
    for (size_t i = 0; i < a->inject.n; i++) {
        ctrun_inject_spec_t *s = &a->inject.specs[i];
        if (!ctrun_agent__inject_timed(s) || !ctrun_inject_pending(&a->inject, i) ||
            ctrun_agent__inject_due(a, i) > now)
            continue;
        if (s->kind == CTRUN_INJECT_KILL_AGENT) {
            s->fired++;
            if (s->node == a->plan.group_rank) {
                ct_log_warn("fault injection: spec %zu (%s): killing this agent (node %d, pid "
                            "%d) with SIGKILL",
                            i + 1, s->text, s->node, (int)getpid());
                if (a->console != NULL)
                    ctrun_console_flush(a->console, 1000); /* the line above, then the kill */
                raise(SIGKILL);
            }
            continue;
        }
        int rank = ctrun_inject_rank(&a->inject, i, a->plan.world_size);
        s->fired++;
        a->inject_in_attempt[i]++;
        int local = rank - a->plan.rank_base;
        if (local < 0 || local >= a->nworkers)
            continue;
        ctrun_worker_t *w = &a->workers[local];
        if (w->state != CTRUN_WORKER_RUNNING)
            continue;
        int sig = s->kind == CTRUN_INJECT_HANG ? SIGSTOP : SIGKILL;
        ct_log_warn("fault injection: spec %zu (%s): %s to rank %d (pid %d)", i + 1, s->text,
                    sig == SIGKILL ? "SIGKILL" : "SIGSTOP", rank, (int)w->proc.pid);
        w->fault_spec = (int)i;
        w->fault_ns = uv_hrtime();
        kill(w->proc.pid, sig);
    }
    ctrun_agent__inject_schedule(a);
}

/* Why worker i ended with exitcode, for the recovery table, and whether an injected fault
 * did it (then that spec counts as fired). *detect_ns: the detection latency, -1 unknown. */
void ctrun_agent__exit_cause(ctrun_agent_t *a, int i, int exitcode, char *cause, size_t size,
                             int64_t *detect_ns)
{
    ctrun_worker_t *w = &a->workers[i];
    uint64_t now = uv_hrtime();
    *detect_ns = -1;
    if (w->fault_spec >= 0) { /* the agent itself sent the signal */
        const ctrun_inject_spec_t *s = &a->inject.specs[w->fault_spec];
        snprintf(cause, size, "injected %s (spec %d)", ctrun_inject_kind_name(s->kind),
                 w->fault_spec + 1);
        *detect_ns = now > w->fault_ns ? (int64_t)(now - w->fault_ns) : 0;
        return;
    }
    /* An armed worker raises SIGKILL on itself right after a heartbeat at the fault's step;
     * a SIGKILL from the agent (a->killed) is not the fault. */
    if (w->armed >= 0 && exitcode == -SIGKILL && !a->killed && w->hb_count > 0 &&
        (int64_t)w->hb_step >= a->inject.specs[w->armed].step) {
        ctrun_inject_spec_t *s = &a->inject.specs[w->armed];
        s->fired++;
        snprintf(cause, size, "injected %s at step %llu (spec %d)", ctrun_inject_kind_name(s->kind),
                 (unsigned long long)w->hb_step, w->armed + 1);
        *detect_ns = now > w->hb_time_ns ? (int64_t)(now - w->hb_time_ns) : 0;
        w->armed = -1;
        return;
    }
    /* A hang that fired but was ended by something else than the watchdog (a peer's
     * collective timeout, say): it happened, so it does not fire again. */
    if (w->armed >= 0 && a->inject.specs[w->armed].kind == CTRUN_INJECT_HANG && w->hb_count > 0 &&
        (int64_t)w->hb_step >= a->inject.specs[w->armed].step) {
        a->inject.specs[w->armed].fired++;
        w->armed = -1;
    }
    char sn[32];
    if (exitcode < 0)
        snprintf(cause, size, "signal %s", ctrun_signal_name(-exitcode, sn, sizeof sn));
    else
        snprintf(cause, size, "exit %d", exitcode);
}

void ctrun_agent__inject_cb(uv_timer_t *t)
{
    ctrun_agent__event_t ev = {.kind = CTRUN_AGENT__EV_INJECT};
    ctrun_agent__step(t->data, &ev);
}
