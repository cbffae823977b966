/*
 * ctrun_agent_step.c - the agent's states, events and its transition function
 * (ctrun_agent__step).
 *
 * Every callback (kv replies, worker exits and closes, heartbeats, signals, timers) turns into
 * one ctrun_agent__event_t and goes through ctrun_agent__step. The states are listed in
 * ctrun_agent_internal.h. One attempt, as this node sees it:
 *
 *   RENDEZVOUS  ctrun_rdzv runs attempt k's round; its plan arrives as RDZV_REPLY -> COMPLETE.
 *   RUNNING     workers started; a GET of /ctrun/a/<k>/outcome is pending from the start.
 *               - a worker fails (non-zero, signal, spawn failure, watchdog): its record is
 *                 appended to /ctrun/a/<k>/failures, "failed <g>" is compare-set into the
 *                 outcome, every local worker gets SIGTERM -> STOPPING.
 *               - the outcome arrives first (another node failed or stopped) -> STOPPING.
 *               - a handled signal: forwarded to every worker, "stopped <g> <sig>" -> STOPPING.
 *               - every worker exited 0: ADD /ctrun/a/<k>/ok; whoever brings it to N writes
 *                 "succeeded" -> SUCCEEDED (waits for the outcome; a late failure elsewhere
 *                 still moves it to STOPPING, with nothing left to stop).
 *   STOPPING    grace timer -> SIGKILL. Once every worker is GONE and the outcome is known:
 *               restarts left -> RENDEZVOUS of k+1; otherwise the report (failures read from
 *               the store) -> EXITING.
 *   EXITING     exit barrier: a client ADDs /ctrun/left and leaves; the host waits (bounded)
 *               until the others have, so nobody loses the store while reading it -> DONE.
 *
 * The job-wide restart count is the attempt number the coordinator publishes in each plan;
 * --max_restarts is the host's (carried in the plan), so every node restarts the same number
 * of times.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_log.h"
#include "ct_time.h"
#include "ctrun_agent_internal.h"
#include "ctrun_signal.h"

static const char *const ctrun__state_names[] = {
    [CTRUN_AGENT_INIT] = "INIT",         [CTRUN_AGENT_RENDEZVOUS] = "RENDEZVOUS",
    [CTRUN_AGENT_RUNNING] = "RUNNING",   [CTRUN_AGENT_SUCCEEDED] = "SUCCEEDED",
    [CTRUN_AGENT_STOPPING] = "STOPPING", [CTRUN_AGENT_EXITING] = "EXITING",
    [CTRUN_AGENT_DONE] = "DONE",
};

void ctrun_agent__set_state(ctrun_agent_t *a, ctrun_agent_state_t s)
{
    ct_log_debug("agent: %s -> %s (attempt %d)", ctrun__state_names[a->state],
                 ctrun__state_names[s], a->attempt);
    a->state = s;
}

static int ctrun__live_workers(const ctrun_agent_t *a)
{
    int n = 0;
    for (int i = 0; i < a->nworkers; i++)
        n += a->workers[i].state == CTRUN_WORKER_RUNNING ||
             a->workers[i].state == CTRUN_WORKER_STOPPING;
    return n;
}

static void ctrun__signal_all(ctrun_agent_t *a, int sig)
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

/* Every live worker gets sig (SIGTERM for a failure, the handled signal otherwise) and the
 * grace period starts. */
static void ctrun__stop_workers(ctrun_agent_t *a, int sig)
{
    ctrun__signal_all(a, sig);
    uv_timer_stop(&a->watchdog_timer);
    uv_timer_stop(&a->inject_timer);
    /* One deadline per attempt: a later signal does not extend it. */
    if (!uv_is_active((uv_handle_t *)&a->grace_timer) && ctrun__live_workers(a) > 0) {
        uint64_t ms = (uint64_t)(a->cfg->grace_period_s * 1000.0 + 0.5);
        uv_timer_start(&a->grace_timer, a->grace_timer.timer_cb, ms, 0);
    }
}

/* This node's attempt failed first-hand: tell the others, stop the rest. */
void ctrun_agent__fail_attempt(ctrun_agent_t *a)
{
    ctrun_agent__post_failed(a);
    ctrun__stop_workers(a, SIGTERM);
}

double ctrun_agent__rdzv_timeout_s(const ctrun_agent_t *a)
{
    return a->rdzv_kind == CTRUN_RDZV_KIND_STATIC ? a->cfg->rdzv_conf.timeout_s
                                                  : a->cfg->rdzv_conf.join_timeout_s;
}

static void ctrun__start_rendezvous(ctrun_agent_t *a, int attempt)
{
    a->attempt = attempt;
    a->outcome = CTRUN_OUTCOME_NONE;
    a->failure_posted = false;
    a->killed = false;
    ctrun_agent__set_state(a, CTRUN_AGENT_RENDEZVOUS);
    uv_timer_start(&a->rdzv_timer, a->rdzv_timer.timer_cb,
                   (uint64_t)(ctrun_agent__rdzv_timeout_s(a) * 1000.0), 0);
    int rc = ctrun_rdzv_start(&a->rdzv, attempt);
    if (rc != 0) {
        ct_log_error("%s", a->rdzv.error);
        ctrun_agent__done(a, CTRUN_EXIT_FAILED);
    }
}

/* The plan of the attempt is known: start every local worker. */
static void ctrun__start_workers(ctrun_agent_t *a)
{
    ct_errbuf_t eb = {{0}};
    uv_timer_stop(&a->rdzv_timer);
    a->attempt = a->rdzv.attempt; /* a new node learns the round from the rendezvous */
    a->plan = a->rdzv.plan;
    if (ctrun_group_prepare(a, &eb) != 0) {
        ct_log_error("preparing attempt %d: %s", a->attempt, eb.msg);
        ctrun_group_free(a);
        ctrun_agent__done(a, CTRUN_EXIT_FAILED);
        return;
    }
    ctrun_group_log_rendezvous(a);
    char key[CTRUN_RDZV_KEY_MAX];
    ctrun_rdzv_key(key, "a/%d/outcome", a->attempt);
    ctrun_agent__kv(a, ctrun_kv_get(a->kv, key, ctrun_agent__tag(a, CTRUN_AGENT__KV_OUTCOME)));
    ctrun_agent__set_state(a, CTRUN_AGENT_RUNNING);
    a->attempt_start_ms = uv_now(&a->loop);
    for (size_t k = 0; k < a->inject.n; k++) {
        a->inject_in_attempt[k] = 0;
        int missing = ctrun_inject_missing_rank(&a->inject, k, a->plan.world_size);
        if (missing >= 0 && a->plan.group_rank == 0)
            ct_log_warn("fault injection: spec %zu (%s) names rank %d, but attempt %d has %d "
                        "rank%s: it cannot fire in this attempt",
                        k + 1, a->inject.specs[k].text, missing, a->attempt, a->plan.world_size,
                        a->plan.world_size == 1 ? "" : "s");
    }
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
        ctrun_agent__set_state(a, CTRUN_AGENT_STOPPING);
        return;
    }
    ctrun_agent__inject_schedule(a);
}

/* --restart_backoff: base * 2^(k-1) before restart k, at most max(60 s, base). */
static double ctrun__backoff_s(double base, int k)
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
static bool ctrun__no_progress(ctrun_agent_t *a)
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

/* STOPPING or SUCCEEDED: move on once every worker is gone and the outcome is known. */
static void ctrun__progress(ctrun_agent_t *a)
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
        if (a->outcome == CTRUN_OUTCOME_SUCCEEDED)
            ctrun_agent__finish(a, 0);
        else if (a->outcome != CTRUN_OUTCOME_NONE)
            ctrun_agent__set_state(a, CTRUN_AGENT_STOPPING); /* handled just below */
        else if (a->store_lost)
            ctrun_agent__finish(a, CTRUN_EXIT_FAILED);
    }
    if (a->state != CTRUN_AGENT_STOPPING)
        return;
    /* A stop by signal needs no outcome: this node leaves whatever the others decide. */
    if (a->outcome == CTRUN_OUTCOME_NONE && !a->store_lost && a->stop_signal == 0)
        return;
    uv_timer_stop(&a->grace_timer);
    if (a->stop_signal != 0) {
        ctrun_group_free(a);
        ctrun_agent__finish(a, 128 + a->stop_signal);
        return;
    }
    if (a->store_lost) {
        ctrun_agent__report(a, NULL);
        ctrun_group_free(a);
        return;
    }
    if (a->outcome == CTRUN_OUTCOME_STOPPED) {
        char sn[32];
        ct_log_error("node %d was stopped by %s; stopping this node too", a->outcome_node,
                     ctrun_signal_name(a->outcome_signal, sn, sizeof sn));
        ctrun_group_free(a);
        ctrun_agent__finish(a, CTRUN_EXIT_FAILED);
        return;
    }
    if (a->outcome == CTRUN_OUTCOME_SUCCEEDED) { /* a stop request lost the race */
        ctrun_group_free(a);
        ctrun_agent__finish(a, 0);
        return;
    }
    ctrun_recovery_end_attempt(&a->recovery, a->attempt);
    /* Every worker is gone; whatever they started and that left their process groups goes
     * now, before the next attempt. */
    ctrun_cgroup_kill(&a->cgroup);
    if (a->outcome == CTRUN_OUTCOME_REJOIN) {
        /* torchrun's membership change: a restart that uses up nothing. */
        ct_log_info("[%s] Detected new nodes (node %d waits to join); will restart worker group",
                    a->cfg->role, a->outcome_node);
        ctrun_group_free(a);
        ctrun__start_rendezvous(a, a->attempt + 1);
        return;
    }
    int left = a->plan.max_restarts - a->plan.restarts;
    if (a->outcome == CTRUN_OUTCOME_LOST) {
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
            ctrun__start_rendezvous(a, a->attempt + 1);
            return;
        } else {
            ct_log_error("node %d (%s) was lost and no restart is left (--max_restarts=%d); "
                         "the job stops",
                         a->outcome_node, a->outcome_host, a->plan.max_restarts);
        }
        ctrun_group_free(a);
        ctrun_agent__finish(a, CTRUN_EXIT_FAILED);
        return;
    }
    if (left > 0 && ctrun__no_progress(a))
        left = 0;
    if (left > 0) {
        ct_log_info("[%s] Worker group FAILED. %d/%d attempts left; will restart worker group",
                    a->cfg->role, left, a->plan.max_restarts);
        ctrun_group_free(a);
        double wait = ctrun__backoff_s(a->cfg->restart_backoff_s, a->attempt + 1);
        if (wait > 0) {
            ct_log_warn("restart %d in %.3g s (--restart_backoff)", a->attempt + 1, wait);
            a->restart_pending = true;
            uv_timer_start(&a->restart_timer, a->restart_timer.timer_cb,
                           (uint64_t)(wait * 1000.0 + 0.5), 0);
            return;
        }
        ctrun__start_rendezvous(a, a->attempt + 1);
        return;
    }
    /* The last attempt failed: the report needs every node's records. */
    char key[CTRUN_RDZV_KEY_MAX];
    ctrun_rdzv_key(key, "a/%d/failures", a->attempt);
    ctrun_agent__set_state(a, CTRUN_AGENT_EXITING);
    ctrun_agent__kv(a, ctrun_kv_get(a->kv, key, ctrun_agent__tag(a, CTRUN_AGENT__KV_FAILURES)));
    if (a->store_lost) {
        ctrun_agent__report(a, NULL);
        ctrun_group_free(a);
    }
}

static void ctrun__on_kv(ctrun_agent_t *a, const ctrun_kv_reply_t *r)
{
    if (CTRUN_TAG_OWNER(r->tag) == CTRUN_TAG_RDZV) {
        if (a->state != CTRUN_AGENT_RENDEZVOUS)
            return;
        switch (ctrun_rdzv_on_reply(&a->rdzv, r)) {
        case CTRUN_RDZV_PENDING:
            return;
        case CTRUN_RDZV_ERROR:
            ct_log_error("%s", a->rdzv.error);
            ctrun_agent__done(a, CTRUN_EXIT_FAILED);
            return;
        case CTRUN_RDZV_COMPLETE:
            ctrun__start_workers(a);
            return;
        }
        return;
    }
    unsigned kind = CTRUN_TAG_KIND(r->tag);
    if (kind == CTRUN_AGENT__KV_HB) {
        if (r->rc == 0) {
            a->hb_ok_ms = uv_now(&a->loop);
        } else if (r->rc != -ECANCELED && a->state != CTRUN_AGENT_DONE) {
            ctrun_agent__event_t ev = {.kind = CTRUN_AGENT__EV_STORE_GONE};
            ctrun_agent__store_lost(a, r->error);
            ctrun_agent__step(a, &ev);
        }
        return;
    }
    if (kind == CTRUN_AGENT__KV_LEFT) {
        if (a->state == CTRUN_AGENT_EXITING)
            ctrun_agent__done(a, a->exit_code);
        return;
    }
    if (CTRUN_TAG_ATTEMPT(r->tag) != a->attempt || a->state == CTRUN_AGENT_DONE)
        return; /* a reply about an attempt that is over */
    if (r->rc != 0) {
        if (r->rc == -ECANCELED)
            return;
        ctrun_agent__store_lost(a, r->error);
        if (a->state == CTRUN_AGENT_RUNNING || a->state == CTRUN_AGENT_SUCCEEDED) {
            /* Nobody can tell us how the job goes on: stop here. */
            ctrun__stop_workers(a, SIGTERM);
            ctrun_agent__set_state(a, CTRUN_AGENT_STOPPING);
        }
        if (a->state == CTRUN_AGENT_EXITING && kind == CTRUN_AGENT__KV_FAILURES) {
            ctrun_agent__report(a, NULL);
            ctrun_group_free(a);
            return;
        }
        ctrun__progress(a);
        return;
    }
    const char *value = (const char *)r->data;
    switch (kind) {
    case CTRUN_AGENT__KV_OUTCOME:
    case CTRUN_AGENT__KV_POST:
        ctrun_agent__note_outcome(a, value);
        if (a->state == CTRUN_AGENT_RUNNING && a->outcome != CTRUN_OUTCOME_NONE &&
            a->outcome != CTRUN_OUTCOME_SUCCEEDED) {
            if (a->outcome == CTRUN_OUTCOME_FAILED)
                ct_log_warn("attempt %d failed on node %d; stopping this node's workers",
                            a->attempt, a->outcome_node);
            else if (a->outcome == CTRUN_OUTCOME_LOST)
                ct_log_warn("node %d (%s) is lost (no heartbeat); stopping this node's workers",
                            a->outcome_node, a->outcome_host);
            else if (a->outcome == CTRUN_OUTCOME_REJOIN)
                ct_log_info("node %d waits to join; stopping this node's workers to re-form the "
                            "job",
                            a->outcome_node);
            ctrun__stop_workers(a, SIGTERM);
            ctrun_agent__set_state(a, CTRUN_AGENT_STOPPING);
        }
        ctrun__progress(a);
        return;
    case CTRUN_AGENT__KV_OK:
        if (r->num == a->plan.nnodes)
            ctrun_agent__post_outcome(a, "succeeded");
        return;
    case CTRUN_AGENT__KV_FAILURES:
        if (a->state == CTRUN_AGENT_EXITING) {
            ctrun_agent__report(a, value);
            ctrun_group_free(a);
        }
        return;
    default:
        return;
    }
}

static void ctrun__on_worker_exit(ctrun_agent_t *a, int i, int exitcode)
{
    ctrun_worker_t *w = &a->workers[i];
    ctrun_worker_state_t prev = w->state;
    w->exitcode = exitcode;
    w->state = CTRUN_WORKER_EXITED;
    a->nrunning--;
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
        if (a->state == CTRUN_AGENT_RUNNING || a->state == CTRUN_AGENT_STOPPING) {
            ctrun_agent__fail_attempt(a);
            ctrun_agent__set_state(a, CTRUN_AGENT_STOPPING);
        }
        return;
    }
    if (a->state == CTRUN_AGENT_RUNNING && a->nrunning == 0 && a->nfailures == 0) {
        /* Every local worker exited 0. */
        ctrun_agent__set_state(a, CTRUN_AGENT_SUCCEEDED);
        uv_timer_stop(&a->watchdog_timer);
        if (a->store_lost)
            return;
        char key[CTRUN_RDZV_KEY_MAX];
        ctrun_rdzv_key(key, "a/%d/ok", a->attempt);
        ctrun_agent__kv(a, ctrun_kv_add(a->kv, key, 1, ctrun_agent__tag(a, CTRUN_AGENT__KV_OK)));
    }
}

static void ctrun__on_signal(ctrun_agent_t *a, int sig)
{
    char sn[32];
    ctrun_signal_name(sig, sn, sizeof sn);
    switch (a->state) {
    case CTRUN_AGENT_INIT:
    case CTRUN_AGENT_RENDEZVOUS:
        /* No worker exists yet. */
        ct_log_warn("Received %d death signal, shutting down (no worker was started)", sig);
        ctrun_agent__done(a, 128 + sig);
        return;
    case CTRUN_AGENT_RUNNING:
    case CTRUN_AGENT_SUCCEEDED:
        ct_log_warn("Received %d death signal, shutting down workers", sig);
        a->stop_signal = sig;
        if (sig == SIGINT)
            a->sigint_count++;
        {
            char text[64];
            snprintf(text, sizeof text, "stopped %d %d", a->plan.group_rank, sig);
            ctrun_agent__post_outcome(a, text);
        }
        ctrun__stop_workers(a, sig);
        ctrun_agent__set_state(a, CTRUN_AGENT_STOPPING);
        ctrun__progress(a);
        return;
    case CTRUN_AGENT_STOPPING:
        if (a->stop_signal == 0)
            a->stop_signal = sig;
        if (sig == SIGINT && ++a->sigint_count >= 2) {
            ct_log_warn("Received %s again: killing every worker now", sn);
            a->killed = true;
            ctrun__signal_all(a, SIGKILL);
        } else {
            ctrun__signal_all(a, sig);
        }
        ctrun__progress(a);
        return;
    case CTRUN_AGENT_EXITING:
        ctrun_agent__done(a, 128 + sig);
        return;
    case CTRUN_AGENT_DONE:
        return;
    }
}

static void ctrun__on_grace(ctrun_agent_t *a)
{
    if (a->state != CTRUN_AGENT_STOPPING || a->killed)
        return;
    a->killed = true;
    for (int i = 0; i < a->nworkers; i++) {
        ctrun_worker_t *w = &a->workers[i];
        if (w->state == CTRUN_WORKER_STOPPING || w->state == CTRUN_WORKER_RUNNING)
            ct_log_warn("Unable to shutdown process %d via %s, forcefully exiting via SIGKILL",
                        (int)w->proc.pid, a->stop_signal ? "the forwarded signal" : "SIGTERM");
        /* Exited workers may have left children in their group; those go too. */
        if (w->state != CTRUN_WORKER_IDLE && w->state != CTRUN_WORKER_GONE)
            ctrun_proc_signal(&w->proc, SIGKILL);
    }
    ctrun_cgroup_kill(&a->cgroup); /* and those that left their group */
}

/* The store's host is gone (or cut off): nobody can coordinate this node any more. */
static void ctrun__on_store_gone(ctrun_agent_t *a)
{
    switch (a->state) {
    case CTRUN_AGENT_INIT:
    case CTRUN_AGENT_RENDEZVOUS:
        ctrun_agent__done(a, CTRUN_EXIT_FAILED);
        return;
    case CTRUN_AGENT_RUNNING:
    case CTRUN_AGENT_SUCCEEDED:
        ctrun__stop_workers(a, SIGTERM);
        ctrun_agent__set_state(a, CTRUN_AGENT_STOPPING);
        ctrun__progress(a);
        return;
    case CTRUN_AGENT_STOPPING:
        ctrun__progress(a);
        return;
    case CTRUN_AGENT_EXITING:
        ctrun_agent__done(a, a->exit_code);
        return;
    case CTRUN_AGENT_DONE:
        return;
    }
}

void ctrun_agent__step(ctrun_agent_t *a, const ctrun_agent__event_t *ev)
{
    switch (ev->kind) {
    case CTRUN_AGENT__EV_START:
        ctrun__start_rendezvous(a, 0);
        return;
    case CTRUN_AGENT__EV_KV:
        ctrun__on_kv(a, ev->reply);
        return;
    case CTRUN_AGENT__EV_RDZV_TIMEOUT: {
        if (a->state != CTRUN_AGENT_RENDEZVOUS)
            return;
        int64_t since = 0;
        /* Not a slow job when a connection has waited a while for the endpoint to answer the
         * store handshake: whatever listens there is not answering as a store. */
        if (ctrun_kv_unanswered(a->kv, &since) && ct_time_ms() - since >= 1000)
            ct_log_error("rendezvous of attempt %d timed out after %g s: no answer from %s:%d "
                         "in %.1f s: it accepted the connection but never answered the store "
                         "handshake (is --rdzv_endpoint / --master_addr a ctrun store?)",
                         a->attempt, ctrun_agent__rdzv_timeout_s(a), a->master_addr, a->master_port,
                         (double)(ct_time_ms() - since) / 1000.0);
        else if (a->rdzv.waited)
            ct_log_error("rendezvous timed out after %g s: this node waited for a round with "
                         "room for it (the job runs with --nnodes maximum %d; store %s:%d; see "
                         "--rdzv_conf join_timeout=SECONDS)",
                         ctrun_agent__rdzv_timeout_s(a), a->cfg->max_nodes, a->master_addr,
                         a->master_port);
        else
            ct_log_error(
                "rendezvous of attempt %d timed out after %g s: %s %d nodes joined "
                "(store %s:%d; see --rdzv_conf %s=SECONDS)",
                a->attempt, ctrun_agent__rdzv_timeout_s(a),
                a->rdzv_kind == CTRUN_RDZV_KIND_STATIC || a->cfg->min_nodes == a->cfg->max_nodes
                    ? "not all"
                    : "fewer than",
                a->rdzv_kind == CTRUN_RDZV_KIND_STATIC ? a->cfg->max_nodes : a->cfg->min_nodes,
                a->master_addr, a->master_port,
                a->rdzv_kind == CTRUN_RDZV_KIND_STATIC ? "timeout" : "join_timeout");
        ctrun_agent__done(a, CTRUN_EXIT_FAILED);
        return;
    }
    case CTRUN_AGENT__EV_WORKER_EXIT:
        ctrun__on_worker_exit(a, ev->worker, ev->value);
        ctrun__progress(a);
        return;
    case CTRUN_AGENT__EV_WORKER_GONE: {
        ctrun_worker_t *w = &a->workers[ev->worker];
        if (w->state != CTRUN_WORKER_GONE) {
            w->state = CTRUN_WORKER_GONE;
            a->ngone++;
        }
        if (a->state == CTRUN_AGENT_DONE)
            return;
        ctrun__progress(a);
        return;
    }
    case CTRUN_AGENT__EV_WATCHDOG:
        ctrun_agent__on_watchdog(a, ev->worker);
        return;
    case CTRUN_AGENT__EV_INJECT:
        ctrun_agent__on_inject(a);
        return;
    case CTRUN_AGENT__EV_RESTART:
        if (!a->restart_pending)
            return;
        a->restart_pending = false;
        if (a->state == CTRUN_AGENT_STOPPING)
            ctrun__start_rendezvous(a, a->attempt + 1);
        return;

    case CTRUN_AGENT__EV_SIGNAL:
        ctrun__on_signal(a, ev->value);
        return;
    case CTRUN_AGENT__EV_GRACE:
        ctrun__on_grace(a);
        return;
    case CTRUN_AGENT__EV_LEFT:
        if (ev->value < 0) {
            ct_log_error("rendezvous coordinator: %s", a->coord.error);
            if (a->state == CTRUN_AGENT_RENDEZVOUS)
                ctrun_agent__done(a, CTRUN_EXIT_FAILED);
            return;
        }
        if (a->state == CTRUN_AGENT_EXITING && ev->value >= ctrun_agent__barrier_target(a))
            ctrun_agent__done(a, a->exit_code);
        return;
    case CTRUN_AGENT__EV_STORE_GONE:
        ctrun__on_store_gone(a);
        return;
    case CTRUN_AGENT__EV_BARRIER_TIMEOUT:
        if (a->state != CTRUN_AGENT_EXITING)
            return;
        ct_log_warn("exit barrier: %d of %d other nodes finished within %g s; exiting anyway",
                    a->coord.left, a->plan.nnodes - 1, a->cfg->grace_period_s + 30.0);
        ctrun_agent__done(a, a->exit_code);
        return;
    }
}

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
