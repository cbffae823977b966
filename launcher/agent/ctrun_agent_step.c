/*
 * ctrun_agent_step.c - the agent's transition code: the one place where the agent's state
 * (a->state) and its workers' states (w->state, with the nrunning/ngone counts) change.
 *
 * Every callback (kv replies, worker exits and closes, watchdog, heartbeat and injection
 * timers, signals, the coordinator) turns into one ctrun_agent__event_t and goes through
 * ctrun_agent__step. Its handlers enter a new state only through the ctrun_agent__to_*
 * functions below, and what follows the end of an attempt is chosen by
 * ctrun_agent__attempt_over, which calls one decision function per outcome. Everything they
 * call elsewhere acts and returns: it signals workers (ctrun_group.c), submits store requests
 * (ctrun_agent_outcome.c), prints (ctrun_agent_end.c), arms timers; none of it changes a state
 * or calls back into the step. ctrun_group_prepare creates an attempt's workers, all IDLE.
 *
 * One attempt, as this node sees it (the states are listed in ctrun_agent_internal.h):
 *
 *   RENDEZVOUS  ctrun_rdzv runs attempt k's round; its plan arrives as a kv reply ->
 *               ctrun_agent__to_running, which starts every local worker and sends a GET of
 *               /ctrun/a/<k>/outcome that stays pending.
 *   RUNNING     - a worker fails (non-zero exit, signal, spawn failure, watchdog): its record
 *                 is appended to /ctrun/a/<k>/failures, "failed <g>" is compare-set into the
 *                 outcome, every live worker gets SIGTERM -> STOPPING.
 *               - the outcome arrives first (another node failed, was lost, or a node waits
 *                 to join) -> every live worker gets SIGTERM -> STOPPING.
 *               - a handled signal: forwarded to every live worker, "stopped <g> <sig>" ->
 *                 STOPPING.
 *               - a store request fails, or the store's host stops answering heartbeats ->
 *                 SIGTERM -> STOPPING.
 *               - every worker exited 0: ADD /ctrun/a/<k>/ok; whoever brings it to the
 *                 number of nodes writes "succeeded" -> SUCCEEDED.
 *   SUCCEEDED   waits for the outcome: "succeeded" -> EXITING with 0; any other outcome ->
 *               STOPPING (nothing left to stop); the store lost -> EXITING with 1.
 *   STOPPING    the grace timer ends in SIGKILL. Once every worker is GONE and the outcome
 *               is known (or no longer matters), ctrun_agent__attempt_over decides:
 *               - stopped by a signal here -> EXITING with 128+signal;
 *               - store lost -> this node's report -> EXITING with 1;
 *               - stopped by a signal on another node -> EXITING with 1;
 *               - succeeded after all -> EXITING with 0;
 *               - a node waits to join -> RENDEZVOUS of k+1 (no restart used);
 *               - a node lost -> RENDEZVOUS of k+1 (c10d, restarts left) or EXITING with 1;
 *               - failed, restarts left -> RENDEZVOUS of k+1 (after --restart_backoff);
 *               - failed, none left -> EXITING; the report once every node's failure records
 *                 are read.
 *   EXITING     exit barrier: a client ADDs /ctrun/left and leaves on the reply; the host
 *               waits (bounded) until the others have, so nobody loses the store while
 *               reading it -> DONE. A signal here -> DONE with 128+signal.
 *   DONE        every handle closes; uv_run returns.
 *   A signal in INIT or RENDEZVOUS -> DONE with 128+signal; a rendezvous that fails or times
 *   out, or a set-up that failed -> DONE with 1.
 *
 * With etcd-v3 the same machine runs on the rendezvous in etcd (the ETCD event): a round's plan
 * comes as ROUND; group rank 0 hosts the workers' store and starts its workers at once, the
 * others once its address arrives (STORE); outcomes come as ENDED, failure records as FAILURE;
 * etcd out of reach (ERROR) is a lost store; there is no exit barrier.
 *
 * The job-wide restart count is the attempt number the coordinator publishes in each plan;
 * --max_restarts is the host's (carried in the plan), so every node restarts the same number
 * of times.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "ct_log.h"
#include "ctrun_agent_internal.h"
#include "ctrun_etcd_rdzv.h"
#include "ctrun_signal.h"

static const char *const ctrun_agent__state_names[] = {
    [CTRUN_AGENT_INIT] = "INIT",         [CTRUN_AGENT_RENDEZVOUS] = "RENDEZVOUS",
    [CTRUN_AGENT_RUNNING] = "RUNNING",   [CTRUN_AGENT_SUCCEEDED] = "SUCCEEDED",
    [CTRUN_AGENT_STOPPING] = "STOPPING", [CTRUN_AGENT_EXITING] = "EXITING",
    [CTRUN_AGENT_DONE] = "DONE",
};

/* The only write of a->state. */
static void ctrun_agent__enter(ctrun_agent_t *a, ctrun_agent_state_t s)
{
    ct_log_debug("agent: %s -> %s (attempt %d)", ctrun_agent__state_names[a->state],
                 ctrun_agent__state_names[s], a->attempt);
    a->state = s;
}

/* ---- workers ------------------------------------------------------------------------------ */

static int ctrun_agent__live_workers(const ctrun_agent_t *a)
{
    int n = 0;
    for (int i = 0; i < a->nworkers; i++)
        n += a->workers[i].state == CTRUN_WORKER_RUNNING ||
             a->workers[i].state == CTRUN_WORKER_STOPPING;
    return n;
}

/* Every live worker gets sig and is STOPPING from now on. */
static void ctrun_agent__signal_workers(ctrun_agent_t *a, int sig)
{
    for (int i = 0; i < a->nworkers; i++) {
        ctrun_worker_t *w = &a->workers[i];
        if (w->state == CTRUN_WORKER_RUNNING || w->state == CTRUN_WORKER_STOPPING) {
            ctrun_group_signal(a, i, sig);
            /* A stopped worker (a hang, SIGSTOP) only acts on the signal once continued. */
            if (sig != SIGKILL)
                ctrun_proc_signal(&w->proc, SIGCONT);
            w->state = CTRUN_WORKER_STOPPING;
        }
    }
}

/* ---- entering a state --------------------------------------------------------------------- */

/* -> DONE: the exit status is known; every handle closes and uv_run returns. */
static void ctrun_agent__to_done(ctrun_agent_t *a, int exit_code)
{
    a->exit_code = exit_code;
    ctrun_agent__enter(a, CTRUN_AGENT_DONE);
    ctrun_agent__close(a);
}

/* -> EXITING: the job is over for this node. Alone, or without a store, it is DONE at once;
 * otherwise the exit barrier decides when. */
static void ctrun_agent__to_exiting(ctrun_agent_t *a, int exit_code)
{
    a->exit_code = exit_code;
    ctrun_agent__enter(a, CTRUN_AGENT_EXITING);
    ctrun_agent__end_timers(a);
    /* etcd keeps no exit barrier: nothing of ours serves the others after the job's end. */
    if (a->store_lost || a->plan.nnodes <= 1 || a->use_etcd) {
        ctrun_agent__to_done(a, exit_code);
        return;
    }
    if (!a->is_host) {
        if (ctrun_agent__barrier_leave(a) != 0)
            ctrun_agent__to_done(a, exit_code);
        return; /* DONE when the store answers */
    }
    if (a->coord.left >= ctrun_agent__barrier_target(a)) {
        ctrun_agent__to_done(a, exit_code);
        return;
    }
    ctrun_agent__barrier_wait(a);
}

/* -> RENDEZVOUS of attempt k. */
static void ctrun_agent__to_rendezvous(ctrun_agent_t *a, int attempt)
{
    ctrun_agent__observe_rendezvous(a);
    a->attempt = attempt;
    a->outcome = CTRUN_OUTCOME_NONE;
    a->failure_posted = false;
    a->killed = false;
    ctrun_agent__enter(a, CTRUN_AGENT_RENDEZVOUS);
    if (a->use_etcd) {
        /* The rendezvous in etcd times the join itself and says why it gave up. */
        if (ctrun_agent__etcd_rendezvous(a) != 0)
            ctrun_agent__to_done(a, CTRUN_EXIT_FAILED);
        return;
    }
    uv_timer_start(&a->rdzv_timer, a->rdzv_timer.timer_cb,
                   (uint64_t)(ctrun_agent__rdzv_timeout_s(a) * 1000.0), 0);
    int rc = ctrun_rdzv_start(&a->rdzv, attempt);
    if (rc != 0) {
        ct_log_error("%s", a->rdzv.error);
        ctrun_agent__to_done(a, CTRUN_EXIT_FAILED);
    }
}

/* -> STOPPING: every live worker gets sig (SIGTERM for a failure, the handled signal
 * otherwise) and the grace period starts; nothing of the attempt fires any more. */
static void ctrun_agent__to_stopping(ctrun_agent_t *a, int sig)
{
    ctrun_agent__signal_workers(a, sig);
    uv_timer_stop(&a->watchdog_timer);
    uv_timer_stop(&a->inject_timer);
    /* One deadline per attempt: a later signal does not extend it. */
    if (!uv_is_active((uv_handle_t *)&a->grace_timer) && ctrun_agent__live_workers(a) > 0) {
        uint64_t ms = (uint64_t)(a->cfg->grace_period_s * 1000.0 + 0.5);
        uv_timer_start(&a->grace_timer, a->grace_timer.timer_cb, ms, 0);
    }
    ctrun_agent__enter(a, CTRUN_AGENT_STOPPING);
}

/* This node's attempt failed first-hand: tell the others, stop the rest -> STOPPING. */
static void ctrun_agent__fail_attempt(ctrun_agent_t *a)
{
    ctrun_agent__post_failed(a);
    ctrun_agent__to_stopping(a, SIGTERM);
}

/* -> RUNNING: the plan of the attempt is known; every local worker starts. One that cannot
 * start fails the attempt at once, as a crash would (-> STOPPING). */
static void ctrun_agent__to_running(ctrun_agent_t *a)
{
    ct_errbuf_t eb = {{0}};
    uv_timer_stop(&a->rdzv_timer);
    a->attempt = a->rdzv.attempt; /* a new node learns the round from the rendezvous */
    a->plan = a->rdzv.plan;
    uint64_t prepare_start = uv_hrtime();
    if (ctrun_group_prepare(a, &eb) != 0) {
        ct_log_error("preparing attempt %d: %s", a->attempt, eb.msg);
        ctrun_group_free(a);
        ctrun_agent__to_done(a, CTRUN_EXIT_FAILED);
        return;
    }
    ctrun_group_log_rendezvous(a);
    ctrun_agent__await_outcome(a);
    ctrun_agent__enter(a, CTRUN_AGENT_RUNNING);
    a->attempt_start_ms = uv_now(&a->loop);
    ctrun_agent__inject_attempt(a);
    for (int i = 0; i < a->nworkers; i++) {
        ctrun_worker_t *w = &a->workers[i];
        ct_errbuf_clear(&eb);
        if (ctrun_group_spawn(a, i, &eb) == 0) {
            w->state = CTRUN_WORKER_RUNNING;
            a->nrunning++;
            continue;
        }
        /* Reported now, with the reason; the attempt fails like a crash (exit status 127, as
         * a shell reports a command it cannot run). */
        ct_log_error("cannot start local rank %d: %s", i, eb.msg);
        w->exitcode = 127;
        char msg[CT_ERRBUF_SIZE + 32];
        snprintf(msg, sizeof msg, "could not start: %s", eb.msg);
        ctrun_agent__record_failure(a, i, 127, msg, "could not start (exit 127)", -1);
        for (int j = i; j < a->nworkers; j++) {
            ctrun_worker_t *wj = &a->workers[j];
            if (j == i && !wj->proc.done) {
                wj->state = CTRUN_WORKER_EXITED; /* its handles are still closing */
                continue;
            }
            wj->state = CTRUN_WORKER_GONE;
            a->ngone++;
        }
        ctrun_agent__fail_attempt(a);
        return;
    }
    ctrun_agent__observe_started(a, uv_hrtime() - prepare_start);
    ctrun_agent__inject_schedule(a);
}

/* -> SUCCEEDED: every local worker exited 0; this node counts itself in /ctrun/a/<k>/ok and
 * waits for the attempt's outcome. */
static void ctrun_agent__to_succeeded(ctrun_agent_t *a)
{
    ctrun_agent__enter(a, CTRUN_AGENT_SUCCEEDED);
    uv_timer_stop(&a->watchdog_timer);
    if (a->store_lost)
        return;
    ctrun_agent__post_ok(a);
}

/* The failure report (lines: every node's records, or NULL for this node's own), then
 * EXITING with the failed job's status. */
static void ctrun_agent__report_and_exit(ctrun_agent_t *a, const char *lines)
{
    a->fetching_failures = false;
    ctrun_agent__report(a, lines);
    ctrun_agent__to_exiting(a, a->fail_exit);
    ctrun_group_free(a);
}

/* ---- decisions: what follows an attempt, once it is over ---------------------------------- */

/* --restart_backoff: base * 2^(k-1) before restart k, at most max(60 s, base). */
static double ctrun_agent__backoff_s(double base, int k)
{
    if (base <= 0)
        return 0;
    double cap = base > 60.0 ? base : 60.0, w = base;
    for (int i = 1; i < k && w < cap; i++)
        w *= 2;
    return w < cap ? w : cap;
}

/* The no-progress guard: true (and logged, and the exit status set) when the last
 * --progress_guard attempts made no step progress. Only for jobs whose workers report steps:
 * without heartbeats nothing can be said. */
static bool ctrun_agent__no_progress(ctrun_agent_t *a)
{
    int k = a->cfg->progress_guard;
    if (k <= 0 || !a->recovery.any_heartbeat)
        return false;
    if (ctrun_recovery_progressed(&a->recovery, a->attempt)) {
        a->no_progress_run = 0;
        return false;
    }
    if (++a->no_progress_run < k)
        return false;
    ct_log_error("the last %d attempt%s made no step progress; not restarting again (exit "
                 "status %d; see --progress_guard)",
                 k, k == 1 ? "" : "s", CTRUN_EXIT_NO_PROGRESS);
    a->fail_exit = CTRUN_EXIT_NO_PROGRESS;
    return true;
}

/* Stopped by a handled signal on this node: it leaves with 128 + the signal, whatever the
 * other nodes decide. */
static void ctrun_agent__decide_stopped_by_signal(ctrun_agent_t *a)
{
    ctrun_group_free(a);
    ctrun_agent__to_exiting(a, 128 + a->stop_signal);
}

/* The store is lost: nobody can say how the job goes on. A node whose workers all succeeded
 * fails without a report; a stopping one reports its own failures. */
static void ctrun_agent__decide_store_lost(ctrun_agent_t *a)
{
    if (a->state == CTRUN_AGENT_SUCCEEDED) {
        ctrun_agent__to_exiting(a, CTRUN_EXIT_FAILED);
        return;
    }
    ctrun_agent__report_and_exit(a, NULL);
}

/* Another node was stopped by a signal: this one stops too, as a failure. */
static void ctrun_agent__decide_peer_stopped(ctrun_agent_t *a)
{
    char sn[32];
    ct_log_error("node %d was stopped by %s; stopping this node too", a->outcome_node,
                 ctrun_signal_name(a->outcome_signal, sn, sizeof sn));
    ctrun_group_free(a);
    ctrun_agent__to_exiting(a, CTRUN_EXIT_FAILED);
}

/* Every node's workers exited 0. A node that was stopping lost a race (its stop request came
 * after the success was written): its workers are gone and freed now; a SUCCEEDED node keeps
 * them until the end. */
static void ctrun_agent__decide_succeeded(ctrun_agent_t *a)
{
    if (a->state == CTRUN_AGENT_STOPPING)
        ctrun_group_free(a);
    ctrun_agent__to_exiting(a, 0);
}

/* A node waits to join: torchrun's membership change, a restart that uses up nothing. */
static void ctrun_agent__decide_rejoin(ctrun_agent_t *a)
{
    ct_log_info("[%s] Detected new nodes (node %d waits to join); will restart worker group",
                a->cfg->role, a->outcome_node);
    ctrun_group_free(a);
    ctrun_agent__to_rendezvous(a, a->attempt + 1);
}

/* A signalled node left an elastic job: like a membership change, a restart that uses up
 * nothing; the rendezvous ends the job when fewer than MIN nodes remain. */
static void ctrun_agent__decide_left(ctrun_agent_t *a)
{
    char sn[32];
    ct_log_warn("node %d (%s) left the job (%s); re-forming the job without it", a->outcome_node,
                a->outcome_host, ctrun_signal_name(a->outcome_signal, sn, sizeof sn));
    ctrun_group_free(a);
    ctrun_agent__to_rendezvous(a, a->attempt + 1);
}

/* A node was lost (its heartbeats stopped): a c10d job with restarts left re-forms without it;
 * otherwise (this node was the lost one, a static job, no restart left) the job fails. */
static void ctrun_agent__decide_node_lost(ctrun_agent_t *a, int left)
{
    if (a->outcome_node == a->rdzv.node_id) {
        ct_log_error("this node (node %d) was declared lost by the rendezvous store's host: "
                     "its heartbeats did not arrive within %g s; leaving the job",
                     a->outcome_node, (double)a->hb_timeout_ms / 1000.0);
    } else if (a->rdzv_kind == CTRUN_RDZV_KIND_STATIC) {
        ct_log_error("node %d (%s) was lost; a static job cannot go on without it (the "
                     "c10d backend with --nnodes MIN:MAX can)",
                     a->outcome_node, a->outcome_host);
    } else if (left > 0) {
        ct_log_warn("node %d (%s) was lost; re-forming the job without it (%d/%d restarts "
                    "left)",
                    a->outcome_node, a->outcome_host, left, a->plan.max_restarts);
        ctrun_group_free(a);
        ctrun_agent__to_rendezvous(a, a->attempt + 1);
        return;
    } else {
        ct_log_error("node %d (%s) was lost and no restart is left (--max_restarts=%d); "
                     "the job stops",
                     a->outcome_node, a->outcome_host, a->plan.max_restarts);
    }
    ctrun_group_free(a);
    ctrun_agent__to_exiting(a, CTRUN_EXIT_FAILED);
}

/* The attempt failed and restarts are left: the next attempt, after --restart_backoff
 * (STOPPING until the RESTART event). */
static void ctrun_agent__decide_restart(ctrun_agent_t *a, int left)
{
    ct_log_info("[%s] Worker group FAILED. %d/%d attempts left; will restart worker group",
                a->cfg->role, left, a->plan.max_restarts);
    ctrun_group_free(a);
    double wait = ctrun_agent__backoff_s(a->cfg->restart_backoff_s, a->attempt + 1);
    if (wait > 0) {
        ct_log_warn("restart %d in %.3g s (--restart_backoff)", a->attempt + 1, wait);
        a->restart_pending = true;
        uv_timer_start(&a->restart_timer, a->restart_timer.timer_cb,
                       (uint64_t)(wait * 1000.0 + 0.5), 0);
        return;
    }
    ctrun_agent__to_rendezvous(a, a->attempt + 1);
}

/* The attempt failed and no restart is left: the report needs every node's records, read from
 * the store (EXITING until they arrive; without a store, this node's own, at once). */
static void ctrun_agent__decide_failed(ctrun_agent_t *a)
{
    /* The other nodes may leave meanwhile (they read the records first): their leaving must
     * not end this node before its report, nor with another status than the failure's. */
    a->exit_code = a->fail_exit;
    if (a->use_etcd) {
        ctrun_agent__report_and_exit(a, a->store_lost ? NULL : ctrun_agent__etcd_report_lines(a));
        return;
    }
    a->fetching_failures = true;
    ctrun_agent__enter(a, CTRUN_AGENT_EXITING);
    ctrun_agent__fetch_failures(a);
    if (a->store_lost)
        ctrun_agent__report_and_exit(a, NULL);
}

/*
 * After every event that may complete an attempt (a worker gone, an outcome, a signal, a lost
 * store): once every local worker is gone and the outcome is known - or no longer matters,
 * after a signal here or without a store - picks the decision for how the attempt ended.
 * SUCCEEDED and STOPPING only; while --restart_backoff is waited out, only a signal counts.
 */
static void ctrun_agent__attempt_over(ctrun_agent_t *a)
{
    if (a->restart_pending) {
        if (a->stop_signal == 0)
            return;                       /* waiting out --restart_backoff */
        uv_timer_stop(&a->restart_timer); /* a signal ends the job instead */
        a->restart_pending = false;
    }
    if (a->ngone < a->nworkers)
        return;
    if (a->state == CTRUN_AGENT_SUCCEEDED) {
        if (a->outcome == CTRUN_OUTCOME_SUCCEEDED) {
            ctrun_agent__decide_succeeded(a);
            return;
        }
        if (a->outcome == CTRUN_OUTCOME_NONE) {
            if (a->store_lost)
                ctrun_agent__decide_store_lost(a);
            return;
        }
        ctrun_agent__enter(a, CTRUN_AGENT_STOPPING); /* a late failure elsewhere: nothing to stop */
    }
    if (a->state != CTRUN_AGENT_STOPPING)
        return;
    /* A stop by signal needs no outcome: this node leaves whatever the others decide. */
    if (a->outcome == CTRUN_OUTCOME_NONE && !a->store_lost && a->stop_signal == 0)
        return;
    uv_timer_stop(&a->grace_timer);
    if (a->stop_signal != 0) {
        ctrun_agent__decide_stopped_by_signal(a);
        return;
    }
    if (a->store_lost) {
        ctrun_agent__decide_store_lost(a);
        return;
    }
    if (a->outcome == CTRUN_OUTCOME_STOPPED) {
        ctrun_agent__decide_peer_stopped(a);
        return;
    }
    if (a->outcome == CTRUN_OUTCOME_SUCCEEDED) {
        ctrun_agent__decide_succeeded(a);
        return;
    }
    /* Failed, a node lost or one waiting to join: this attempt is over for good. */
    ctrun_recovery_end_attempt(&a->recovery, a->attempt);
    /* Every worker is gone; whatever they started and that left their process groups goes
     * now, before the next attempt. */
    ctrun_cgroup_kill(&a->cgroup);
    if (a->outcome == CTRUN_OUTCOME_REJOIN) {
        ctrun_agent__decide_rejoin(a);
        return;
    }
    if (a->outcome == CTRUN_OUTCOME_LEFT) {
        ctrun_agent__decide_left(a);
        return;
    }
    int left = a->plan.max_restarts - a->plan.restarts;
    if (a->outcome == CTRUN_OUTCOME_LOST) {
        ctrun_agent__decide_node_lost(a, left);
        return;
    }
    if (left > 0 && ctrun_agent__no_progress(a))
        left = 0;
    if (left > 0)
        ctrun_agent__decide_restart(a, left);
    else
        ctrun_agent__decide_failed(a);
}

/* ---- events ------------------------------------------------------------------------------- */

/* The store's host is gone (or cut off): nobody can coordinate this node any more. */
static void ctrun_agent__on_store_gone(ctrun_agent_t *a)
{
    switch (a->state) {
    case CTRUN_AGENT_INIT:
    case CTRUN_AGENT_RENDEZVOUS:
        ctrun_agent__to_done(a, CTRUN_EXIT_FAILED);
        return;
    case CTRUN_AGENT_RUNNING:
    case CTRUN_AGENT_SUCCEEDED:
        ctrun_agent__to_stopping(a, SIGTERM);
        ctrun_agent__attempt_over(a);
        return;
    case CTRUN_AGENT_STOPPING:
        ctrun_agent__attempt_over(a);
        return;
    case CTRUN_AGENT_EXITING:
        ctrun_agent__to_done(a, a->exit_code);
        return;
    case CTRUN_AGENT_DONE:
        return;
    }
}

/* The rendezvous kept in etcd (etcd-v3). */
static void ctrun_agent__on_etcd(ctrun_agent_t *a, const ctrun_etcd_rdzv_event_t *ev)
{
    if (a->state == CTRUN_AGENT_DONE)
        return;
    switch (ev->kind) {
    case CTRUN_ETCD_RDZV_ROUND:
        if (a->state != CTRUN_AGENT_RENDEZVOUS)
            return;
        a->rdzv.attempt = a->attempt = ev->attempt;
        a->rdzv.plan = *ev->plan;
        a->rdzv.node_id = ev->plan->group_rank;
        a->etcd_round = true;
        if (ev->plan->group_rank != 0)
            return; /* RENDEZVOUS until group rank 0 publishes the workers' store */
        if (ctrun_agent__etcd_host_store(a) != 0) {
            ctrun_agent__to_done(a, CTRUN_EXIT_FAILED);
            return;
        }
        ctrun_agent__to_running(a);
        return;
    case CTRUN_ETCD_RDZV_STORE:
        if (a->state != CTRUN_AGENT_RENDEZVOUS || !a->etcd_round || ev->attempt != a->attempt)
            return;
        if (ctrun_agent__etcd_use_store(a, ev->text) != 0) {
            ctrun_agent__to_done(a, CTRUN_EXIT_FAILED);
            return;
        }
        ctrun_agent__to_running(a);
        return;
    case CTRUN_ETCD_RDZV_WAITING:
        ct_log_info("etcd rendezvous: attempt %d runs without this node; it waits for the next "
                    "round",
                    ev->attempt);
        return;
    case CTRUN_ETCD_RDZV_LOST:
        return; /* logged by the rendezvous; its outcome follows (ENDED) */
    case CTRUN_ETCD_RDZV_FAILURE:
        if (ev->attempt == a->attempt)
            ctrun_agent__etcd_failure(a, ev->node, ev->text);
        return;
    case CTRUN_ETCD_RDZV_ENDED:
        if (a->state == CTRUN_AGENT_RENDEZVOUS) {
            /* A round of this node ended before its workers started (its store's host was
             * lost before publishing it): on to the next one. */
            if (a->etcd_round && ev->attempt == a->attempt) {
                ct_log_warn("etcd rendezvous: attempt %d ended (%s) before its workers started",
                            a->attempt, ev->text);
                if (ctrun_agent__etcd_rendezvous(a) != 0)
                    ctrun_agent__to_done(a, CTRUN_EXIT_FAILED);
            }
            return;
        }
        if (ev->attempt != a->attempt || a->state == CTRUN_AGENT_EXITING)
            return;
        ctrun_agent__etcd_note_outcome(a, ev->text);
        if (a->state == CTRUN_AGENT_RUNNING && a->outcome != CTRUN_OUTCOME_NONE &&
            a->outcome != CTRUN_OUTCOME_SUCCEEDED) {
            ctrun_agent__log_outcome(a);
            ctrun_agent__to_stopping(a, SIGTERM);
        }
        ctrun_agent__attempt_over(a);
        return;
    case CTRUN_ETCD_RDZV_CLOSED:
        if (a->state != CTRUN_AGENT_RENDEZVOUS)
            return;
        ct_log_error("etcd rendezvous: no further round will run: %s", ev->text);
        ctrun_agent__to_done(a, CTRUN_EXIT_FAILED);
        return;
    case CTRUN_ETCD_RDZV_ERROR:
        ct_log_error("%s", ev->text);
        switch (a->state) {
        case CTRUN_AGENT_INIT:
        case CTRUN_AGENT_RENDEZVOUS:
            ctrun_agent__to_done(a, CTRUN_EXIT_FAILED);
            return;
        case CTRUN_AGENT_RUNNING:
        case CTRUN_AGENT_SUCCEEDED:
        case CTRUN_AGENT_STOPPING:
            /* Nobody can tell this node how the job goes on: as a lost store. */
            a->store_lost = true;
            if (a->state != CTRUN_AGENT_STOPPING)
                ctrun_agent__to_stopping(a, SIGTERM);
            ctrun_agent__attempt_over(a);
            return;
        case CTRUN_AGENT_EXITING:
            a->store_lost = true;
            if (!a->fetching_failures)
                ctrun_agent__to_done(a, a->exit_code);
            return;
        case CTRUN_AGENT_DONE:
            return;
        }
        return;
    }
}

static void ctrun_agent__on_kv(ctrun_agent_t *a, const ctrun_kv_reply_t *r)
{
    if (CTRUN_TAG_OWNER(r->tag) == CTRUN_TAG_RDZV) {
        if (a->state != CTRUN_AGENT_RENDEZVOUS)
            return;
        switch (ctrun_rdzv_on_reply(&a->rdzv, r)) {
        case CTRUN_RDZV_PENDING:
            return;
        case CTRUN_RDZV_ERROR:
            ct_log_error("%s", a->rdzv.error);
            ctrun_agent__to_done(a, CTRUN_EXIT_FAILED);
            return;
        case CTRUN_RDZV_COMPLETE:
            ctrun_agent__to_running(a);
            return;
        }
        return;
    }
    unsigned kind = CTRUN_TAG_KIND(r->tag);
    if (kind == CTRUN_AGENT__KV_HB) {
        if (r->rc == 0) {
            a->hb_ok_ms = uv_now(&a->loop);
        } else if (r->rc != -ECANCELED && a->state != CTRUN_AGENT_DONE) {
            ctrun_agent__store_lost(a, r->error);
            ctrun_agent__on_store_gone(a);
        }
        return;
    }
    if (kind == CTRUN_AGENT__KV_LEFT) {
        if (a->state == CTRUN_AGENT_EXITING && !a->fetching_failures)
            ctrun_agent__to_done(a, a->exit_code);
        return;
    }
    if (CTRUN_TAG_ATTEMPT(r->tag) != a->attempt || a->state == CTRUN_AGENT_DONE)
        return; /* a reply about an attempt that is over */
    if (r->rc != 0) {
        if (r->rc == -ECANCELED)
            return;
        ctrun_agent__store_lost(a, r->error);
        if (a->state == CTRUN_AGENT_RUNNING || a->state == CTRUN_AGENT_SUCCEEDED)
            ctrun_agent__to_stopping(a, SIGTERM); /* nobody can tell us how the job goes on */
        if (a->state == CTRUN_AGENT_EXITING && kind == CTRUN_AGENT__KV_FAILURES) {
            ctrun_agent__report_and_exit(a, NULL);
            return;
        }
        ctrun_agent__attempt_over(a);
        return;
    }
    const char *value = (const char *)r->data;
    switch (kind) {
    case CTRUN_AGENT__KV_OUTCOME:
    case CTRUN_AGENT__KV_POST:
        ctrun_agent__note_outcome(a, value);
        if (a->state == CTRUN_AGENT_RUNNING && a->outcome != CTRUN_OUTCOME_NONE &&
            a->outcome != CTRUN_OUTCOME_SUCCEEDED) {
            ctrun_agent__log_outcome(a);
            ctrun_agent__to_stopping(a, SIGTERM);
        }
        ctrun_agent__attempt_over(a);
        return;
    case CTRUN_AGENT__KV_OK:
        if (r->num == a->plan.nnodes)
            ctrun_agent__post_outcome(a, "succeeded");
        return;
    case CTRUN_AGENT__KV_FAILURES:
        if (a->state == CTRUN_AGENT_EXITING)
            ctrun_agent__report_and_exit(a, value);
        return;
    default:
        return;
    }
}

static void ctrun_agent__on_worker_exit(ctrun_agent_t *a, int i, int exitcode)
{
    ctrun_worker_t *w = &a->workers[i];
    ctrun_worker_state_t prev = w->state;
    w->exitcode = exitcode;
    w->state = CTRUN_WORKER_EXITED;
    a->nrunning--;
    ctrun_agent__ftimer_forget(a, w->proc.pid);
    char cause[CTRUN_RECOVERY_CAUSE_MAX];
    int64_t detect_ns = -1;
    if (exitcode != 0)
        ctrun_agent__exit_cause(a, i, exitcode, cause, sizeof cause, &detect_ns);
    bool stopped_hang =
        w->fault_spec >= 0 && a->inject.specs[w->fault_spec].kind == CTRUN_INJECT_HANG;
    if (prev != CTRUN_WORKER_RUNNING && exitcode != 0 && !stopped_hang &&
        strncmp(cause, "injected", 8) == 0) {
        /* The fault hit while the attempt was already stopping for a consequence of it seen
         * first (a peer's broken connection): not a failure to report, but the fault's row. (A
         * hang has its row from the watchdog.) */
        ctrun_recovery_add(&a->recovery, a->attempt, w->rank, i, cause, uv_hrtime(), detect_ns);
    }
    if (prev == CTRUN_WORKER_RUNNING && exitcode != 0) {
        ctrun_agent__record_failure(a, i, exitcode, NULL, cause, detect_ns);
        if (a->state == CTRUN_AGENT_RUNNING || a->state == CTRUN_AGENT_STOPPING)
            ctrun_agent__fail_attempt(a);
        return;
    }
    if (a->state == CTRUN_AGENT_RUNNING && a->nrunning == 0 && a->nfailures == 0)
        ctrun_agent__to_succeeded(a); /* every local worker exited 0 */
}

static void ctrun_agent__on_worker_gone(ctrun_agent_t *a, int i)
{
    ctrun_worker_t *w = &a->workers[i];
    if (w->state != CTRUN_WORKER_GONE) {
        w->state = CTRUN_WORKER_GONE;
        a->ngone++;
    }
    if (a->state == CTRUN_AGENT_DONE)
        return;
    ctrun_agent__attempt_over(a);
}

static void ctrun_agent__on_signal(ctrun_agent_t *a, int sig)
{
    char sn[32];
    ctrun_signal_name(sig, sn, sizeof sn);
    switch (a->state) {
    case CTRUN_AGENT_INIT:
    case CTRUN_AGENT_RENDEZVOUS:
        /* No worker exists yet. */
        ct_log_warn("Received %d death signal, shutting down (no worker was started)", sig);
        ctrun_agent__to_done(a, 128 + sig);
        return;
    case CTRUN_AGENT_RUNNING:
    case CTRUN_AGENT_SUCCEEDED:
        ct_log_warn("Received %d death signal, shutting down workers", sig);
        a->stop_signal = sig;
        if (sig == SIGINT)
            a->sigint_count++;
        if (ctrun_agent__can_leave(a)) {
            ct_log_warn("node %d leaves the elastic job (%s); the other nodes re-form without it",
                        a->rdzv.node_id, sn);
            ctrun_agent__post_left(a, sig);
        } else {
            ctrun_agent__post_stopped(a, sig);
        }
        ctrun_agent__to_stopping(a, sig);
        ctrun_agent__attempt_over(a);
        return;
    case CTRUN_AGENT_STOPPING:
        if (a->stop_signal == 0)
            a->stop_signal = sig;
        if (sig == SIGINT && ++a->sigint_count >= 2) {
            ct_log_warn("Received %s again: killing every worker now", sn);
            a->killed = true;
            ctrun_agent__signal_workers(a, SIGKILL);
        } else {
            ctrun_agent__signal_workers(a, sig);
        }
        ctrun_agent__attempt_over(a);
        return;
    case CTRUN_AGENT_EXITING:
        ctrun_agent__to_done(a, 128 + sig);
        return;
    case CTRUN_AGENT_DONE:
        return;
    }
}

/* The transition function: every event of the agent goes through here. */
void ctrun_agent__step(ctrun_agent_t *a, const ctrun_agent__event_t *ev)
{
    switch (ev->kind) {
    case CTRUN_AGENT__EV_START: /* value: the set-up's result */
        if (ev->value != 0)
            ctrun_agent__to_done(a, CTRUN_EXIT_FAILED);
        else
            ctrun_agent__to_rendezvous(a, 0);
        return;
    case CTRUN_AGENT__EV_KV:
        ctrun_agent__on_kv(a, ev->reply);
        return;
    case CTRUN_AGENT__EV_RDZV_TIMEOUT:
        if (a->state != CTRUN_AGENT_RENDEZVOUS)
            return;
        ctrun_agent__log_rdzv_timeout(a);
        ctrun_agent__to_done(a, CTRUN_EXIT_FAILED);
        return;
    case CTRUN_AGENT__EV_WORKER_EXIT:
        ctrun_agent__on_worker_exit(a, ev->worker, ev->value);
        ctrun_agent__attempt_over(a);
        return;
    case CTRUN_AGENT__EV_WORKER_GONE:
        ctrun_agent__on_worker_gone(a, ev->worker);
        return;
    case CTRUN_AGENT__EV_WATCHDOG:
        if (a->state != CTRUN_AGENT_RUNNING || a->workers[ev->worker].state != CTRUN_WORKER_RUNNING)
            return;
        ctrun_agent__watchdog_blame(a, ev->worker);
        ctrun_agent__fail_attempt(a);
        return;
    case CTRUN_AGENT__EV_FILETIMER:
        if (a->state != CTRUN_AGENT_RUNNING || a->workers[ev->worker].state != CTRUN_WORKER_RUNNING)
            return;
        ctrun_agent__ftimer_blame(a, ev->worker);
        ctrun_agent__fail_attempt(a);
        return;
    case CTRUN_AGENT__EV_INJECT:
        if (a->state == CTRUN_AGENT_RUNNING)
            ctrun_agent__inject_fire(a);
        return;
    case CTRUN_AGENT__EV_RESTART:
        if (!a->restart_pending)
            return;
        a->restart_pending = false;
        if (a->state == CTRUN_AGENT_STOPPING)
            ctrun_agent__to_rendezvous(a, a->attempt + 1);
        return;
    case CTRUN_AGENT__EV_SIGNAL:
        ctrun_agent__on_signal(a, ev->value);
        return;
    case CTRUN_AGENT__EV_GRACE:
        if (a->state != CTRUN_AGENT_STOPPING || a->killed)
            return;
        a->killed = true;
        ctrun_group_kill(a);
        return;
    case CTRUN_AGENT__EV_LEFT:
        if (ev->value < 0) {
            ct_log_error("rendezvous coordinator: %s", a->coord.error);
            if (a->state == CTRUN_AGENT_RENDEZVOUS)
                ctrun_agent__to_done(a, CTRUN_EXIT_FAILED);
            return;
        }
        if (a->state == CTRUN_AGENT_EXITING && !a->fetching_failures &&
            ev->value >= ctrun_agent__barrier_target(a))
            ctrun_agent__to_done(a, a->exit_code);
        return;
    case CTRUN_AGENT__EV_STORE_GONE:
        ctrun_agent__on_store_gone(a);
        return;
    case CTRUN_AGENT__EV_ETCD:
        ctrun_agent__on_etcd(a, ev->etcd);
        return;
    case CTRUN_AGENT__EV_BARRIER_TIMEOUT:
        if (a->state != CTRUN_AGENT_EXITING)
            return;
        ct_log_warn("exit barrier: %d of %d other nodes finished within %g s; exiting anyway",
                    a->coord.left, a->plan.nnodes - 1, a->cfg->grace_period_s + 30.0);
        ctrun_agent__to_done(a, a->exit_code);
        return;
    }
}

/* ---- callbacks into events ---------------------------------------------------------------- */

void ctrun_agent__kv_cb(void *data, const ctrun_kv_reply_t *reply)
{
    ctrun_agent__event_t ev = {.kind = CTRUN_AGENT__EV_KV, .reply = reply};
    ctrun_agent__step(data, &ev);
}

void ctrun_agent__worker_exit(ctrun_agent_t *a, int i, int exitcode)
{
    ctrun_agent__event_t ev = {.kind = CTRUN_AGENT__EV_WORKER_EXIT, .worker = i, .value = exitcode};
    ctrun_agent__step(a, &ev);
}

void ctrun_agent__worker_gone(ctrun_agent_t *a, int i)
{
    ctrun_agent__event_t ev = {.kind = CTRUN_AGENT__EV_WORKER_GONE, .worker = i};
    ctrun_agent__step(a, &ev);
}

void ctrun_agent__restart_cb(uv_timer_t *t)
{
    ctrun_agent__event_t ev = {.kind = CTRUN_AGENT__EV_RESTART};
    ctrun_agent__step(t->data, &ev);
}

void ctrun_agent__signal_cb(uv_signal_t *h, int sig)
{
    ctrun_agent__event_t ev = {.kind = CTRUN_AGENT__EV_SIGNAL, .value = sig};
    ctrun_agent__step(h->data, &ev);
}

void ctrun_agent__grace_cb(uv_timer_t *t)
{
    ctrun_agent__event_t ev = {.kind = CTRUN_AGENT__EV_GRACE};
    ctrun_agent__step(t->data, &ev);
}

void ctrun_agent__rdzv_timer_cb(uv_timer_t *t)
{
    ctrun_agent__event_t ev = {.kind = CTRUN_AGENT__EV_RDZV_TIMEOUT};
    ctrun_agent__step(t->data, &ev);
}

void ctrun_agent__barrier_cb(uv_timer_t *t)
{
    ctrun_agent__event_t ev = {.kind = CTRUN_AGENT__EV_BARRIER_TIMEOUT};
    ctrun_agent__step(t->data, &ev);
}

void ctrun_agent__left_cb(void *data, int left)
{
    ctrun_agent__event_t ev = {.kind = CTRUN_AGENT__EV_LEFT, .value = left};
    ctrun_agent__step(data, &ev);
}
