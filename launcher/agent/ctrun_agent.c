/*
 * ctrun_agent.c - the agent's states, events and its one transition function (ctrun__step).
 *
 * Every callback (kv replies, worker exits and closes, heartbeats, signals, timers) turns into
 * one ctrun__event_t and goes through ctrun__step, which is the only place that changes the
 * agent's or a worker's state; the helpers it calls act (send a signal, submit a request,
 * print) and return. The states are listed in ctrun_agent_internal.h. One attempt, as this
 * node sees it:
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
#include "ctrun_agent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ct_log.h"
#include "ct_proc.h"
#include "ct_time.h"
#include "ctrun_agent_internal.h"
#include "ctrun_cmd.h"
#include "ctrun_env.h"
#include "ctrun_info.h"
#include "ctrun_signal.h"

/* Kinds of the agent's own kv requests (the rendezvous has its own, see ctrun_rdzv.h). */
enum {
    CTRUN__KV_OUTCOME = 1, /* GET /ctrun/a/<k>/outcome */
    CTRUN__KV_POST,        /* COMPARE_SET of the outcome */
    CTRUN__KV_APPEND,      /* APPEND a failure record */
    CTRUN__KV_OK,          /* ADD /ctrun/a/<k>/ok */
    CTRUN__KV_FAILURES,    /* GET /ctrun/a/<k>/failures */
    CTRUN__KV_LEFT,        /* ADD /ctrun/left */
    CTRUN__KV_HB,          /* ADD /ctrun/hb/<id> */
};

typedef enum ctrun__event_kind {
    CTRUN__EV_START = 0,
    CTRUN__EV_KV,           /* reply */
    CTRUN__EV_RDZV_TIMEOUT, /* the round did not complete in time */
    CTRUN__EV_WORKER_EXIT,  /* worker, value = exit code */
    CTRUN__EV_WORKER_GONE,  /* worker */
    CTRUN__EV_WATCHDOG,     /* worker silent for --watchdog_timeout */
    CTRUN__EV_SIGNAL,       /* value = signal */
    CTRUN__EV_GRACE,        /* the grace period after SIGTERM is over */
    CTRUN__EV_LEFT,         /* host: value = agents that left, -1 = coordinator error */
    CTRUN__EV_BARRIER_TIMEOUT,
    CTRUN__EV_STORE_GONE, /* a heartbeat failed or got no reply in time (client agents) */
    CTRUN__EV_INJECT,     /* a time-triggered --inject spec is due */
    CTRUN__EV_RESTART,    /* --restart_backoff is over */
} ctrun__event_kind_t;

typedef struct ctrun__event {
    ctrun__event_kind_t kind;
    int worker;
    int value;
    const ctrun_kv_reply_t *reply;
} ctrun__event_t;

static void ctrun__step(ctrun_agent_t *a, const ctrun__event_t *ev);
static void ctrun__inject_schedule(ctrun_agent_t *a);

static const char *const ctrun__state_names[] = {
    [CTRUN_AGENT_INIT] = "INIT",         [CTRUN_AGENT_RENDEZVOUS] = "RENDEZVOUS",
    [CTRUN_AGENT_RUNNING] = "RUNNING",   [CTRUN_AGENT_SUCCEEDED] = "SUCCEEDED",
    [CTRUN_AGENT_STOPPING] = "STOPPING", [CTRUN_AGENT_EXITING] = "EXITING",
    [CTRUN_AGENT_DONE] = "DONE",
};

static void ctrun__set_state(ctrun_agent_t *a, ctrun_agent_state_t s)
{
    ct_log_debug("agent: %s -> %s (attempt %d)", ctrun__state_names[a->state],
                 ctrun__state_names[s], a->attempt);
    a->state = s;
}

/* ---- small actions ------------------------------------------------------------------------ */

/* This node's name for reports and the rendezvous, looked up on first use: the lookup reads the
 * resolver's files, which a one-node job that never fails does not need to pay for. */
static const char *ctrun__host(ctrun_agent_t *a)
{
    if (a->host[0] == '\0')
        ctrun_host_fqdn(a->host, sizeof a->host);
    return a->host;
}

/* A block of text (a report) for ctrun's stderr, through the console queue. */
static void ctrun__print(ctrun_agent_t *a, const char *text)
{
    if (a->console != NULL) {
        struct iovec iov = {.iov_base = (void *)text, .iov_len = strlen(text)};
        ctrun_console_write(a->console, STDERR_FILENO, &iov, 1, CTRUN_CONSOLE_OWN);
        return;
    }
    fputs(text, stderr);
    fflush(stderr);
}

static uint64_t ctrun__tag(const ctrun_agent_t *a, unsigned kind)
{
    return CTRUN_TAG(CTRUN_TAG_AGENT, a->attempt, kind);
}

static int ctrun__live_workers(const ctrun_agent_t *a)
{
    int n = 0;
    for (int i = 0; i < a->nworkers; i++)
        n += a->workers[i].state == CTRUN_WORKER_RUNNING ||
             a->workers[i].state == CTRUN_WORKER_STOPPING;
    return n;
}

/* A store request could not be made or failed: from here on the agent works alone. */
static void ctrun__store_lost(ctrun_agent_t *a, const char *what)
{
    if (!a->store_lost)
        ct_log_error("lost the rendezvous store at %s:%d: %s", a->master_addr, a->master_port,
                     what);
    a->store_lost = true;
}

static void ctrun__kv(ctrun_agent_t *a, int rc)
{
    if (rc != 0)
        ctrun__store_lost(a, ct_strerror(rc));
}

static ctrun_outcome_t ctrun__parse_outcome(const char *text, int *node, int *sig)
{
    *node = -1;
    *sig = 0;
    if (strcmp(text, "succeeded") == 0)
        return CTRUN_OUTCOME_SUCCEEDED;
    if (sscanf(text, "failed %d", node) == 1)
        return CTRUN_OUTCOME_FAILED;
    if (sscanf(text, "stopped %d %d", node, sig) == 2)
        return CTRUN_OUTCOME_STOPPED;
    if (sscanf(text, "lost %d", node) == 1)
        return CTRUN_OUTCOME_LOST;
    if (sscanf(text, "rejoin %d", node) == 1)
        return CTRUN_OUTCOME_REJOIN;
    return CTRUN_OUTCOME_NONE;
}

static void ctrun__note_outcome(ctrun_agent_t *a, const char *text)
{
    if (a->outcome != CTRUN_OUTCOME_NONE)
        return;
    a->outcome = ctrun__parse_outcome(text, &a->outcome_node, &a->outcome_signal);
    snprintf(a->outcome_host, sizeof a->outcome_host, "?");
    if (a->outcome == CTRUN_OUTCOME_LOST)
        sscanf(text, "lost %*d %63s", a->outcome_host);
    if (a->outcome == CTRUN_OUTCOME_NONE)
        ct_log_warn("ignoring a malformed outcome of attempt %d: \"%.64s\"", a->attempt, text);
}

/* Writes the outcome of the attempt unless one is there already; the reply tells the winner. */
static void ctrun__post_outcome(ctrun_agent_t *a, const char *text)
{
    if (a->store_lost) {
        ctrun__note_outcome(a, text);
        return;
    }
    char key[CTRUN_RDZV_KEY_MAX];
    ctrun_rdzv_key(key, "a/%d/outcome", a->attempt);
    ctrun__kv(a, ctrun_kv_cas(a->kv, key, "", text, ctrun__tag(a, CTRUN__KV_POST)));
    if (a->store_lost)
        ctrun__note_outcome(a, text);
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

/* Records worker i's failure, logs torchrun's line, and publishes the record; cause and
 * detect_ns (-1: unknown) go into the recovery table. */
static void ctrun__record_failure(ctrun_agent_t *a, int i, int exitcode, const char *message,
                                  const char *cause, int64_t detect_ns)
{
    ctrun_worker_t *w = &a->workers[i];
    w->failed = true;
    if (ctrun_recovery_add(&a->recovery, a->attempt, w->rank, i, cause, uv_hrtime(), detect_ns) !=
        0)
        ct_log_warn("out of memory: the recovery table misses a failure of rank %d", w->rank);
    ctrun_failure_t *grown = realloc(a->failures, (a->nfailures + 1) * sizeof *grown);
    if (grown == NULL) {
        ct_log_error("out of memory recording the failure of local rank %d", i);
        return;
    }
    a->failures = grown;
    ctrun_failure_t *f = &a->failures[a->nfailures];
    const char *ef = a->logs.disabled ? NULL : w->error_file;
    if (ctrun_failure_init(f, w->rank, i, (int)w->proc.pid, exitcode, (int64_t)ct_time_unix_s(),
                           ctrun__host(a), ef) != 0) {
        ct_log_error("out of memory recording the failure of local rank %d", i);
        return;
    }
    if (message != NULL && !f->error_file_ok) {
        char *m = strdup(message);
        if (m != NULL) {
            free(f->message);
            f->message = m;
        }
    }
    a->nfailures++;
    char line[1024];
    ctrun_report_failed_line(f, a->entrypoint, line, sizeof line);
    ct_log_error("%s", line);
    if (w->hb_count > 0)
        ct_log_warn("local rank %d (rank %d) last reported step %llu, %.1f s before it failed", i,
                    w->rank, (unsigned long long)w->hb_step,
                    (double)(uv_now(&a->loop) - w->hb_last_ms) / 1000.0);
    if (a->store_lost)
        return;
    char *json = NULL;
    if (ctrun_failure_to_json(f, a->plan.group_rank, &json) == 0) {
        size_t n = strlen(json);
        char *line_nl = malloc(n + 2);
        if (line_nl != NULL) {
            memcpy(line_nl, json, n);
            line_nl[n] = '\n';
            line_nl[n + 1] = '\0';
            char key[CTRUN_RDZV_KEY_MAX];
            ctrun_rdzv_key(key, "a/%d/failures", a->attempt);
            ctrun__kv(a, ctrun_kv_append(a->kv, key, line_nl, ctrun__tag(a, CTRUN__KV_APPEND)));
            free(line_nl);
        }
        free(json);
    }
}

/* This node's attempt failed first-hand: tell the others (once per attempt). */
static void ctrun__post_failed(ctrun_agent_t *a)
{
    if (!a->failure_posted) {
        a->failure_posted = true;
        char text[64];
        snprintf(text, sizeof text, "failed %d", a->plan.group_rank);
        ctrun__post_outcome(a, text);
    }
}

/* This node's attempt failed first-hand: tell the others, stop the rest. */
static void ctrun__fail_attempt(ctrun_agent_t *a)
{
    ctrun__post_failed(a);
    ctrun__stop_workers(a, SIGTERM);
}

/* ---- ending --------------------------------------------------------------------------------- */

static void ctrun__close_cb(uv_handle_t *h)
{
    (void)h;
}

static void ctrun__store_closed(void *data)
{
    ctrun_agent_t *a = data;
    a->store = NULL;
}

/* Closes every handle; uv_run then returns. */
static void ctrun__done(ctrun_agent_t *a, int exit_code)
{
    a->exit_code = exit_code;
    ctrun__set_state(a, CTRUN_AGENT_DONE);
    uv_timer_stop(&a->grace_timer);
    uv_timer_stop(&a->rdzv_timer);
    uv_timer_stop(&a->watchdog_timer);
    uv_timer_stop(&a->barrier_timer);
    uv_timer_stop(&a->hb_timer);
    uv_timer_stop(&a->inject_timer);
    uv_timer_stop(&a->restart_timer);
    a->restart_pending = false;
    /* Whatever is still alive (a signal during a rendezvous never started workers; a lost
     * store leaves none running) must not outlive the agent. */
    for (int i = 0; i < a->nworkers; i++) {
        ctrun_worker_t *w = &a->workers[i];
        if (w->state == CTRUN_WORKER_RUNNING || w->state == CTRUN_WORKER_STOPPING ||
            w->state == CTRUN_WORKER_EXITED) {
            ctrun_proc_signal(&w->proc, SIGKILL);
            ctrun_proc_close(&w->proc);
        }
    }
    ctrun_kv_close(a->kv);
    a->kv = NULL;
    if (a->coord_open) {
        /* Nodes still waiting to join learn why no round will come. */
        ctrun_rdzv_coord_shut(&a->coord, "the job has ended (its store's host is leaving)");
        ctrun_rdzv_coord_close(&a->coord);
    }
    a->coord_open = false;
    if (a->store != NULL && !a->store_closing) {
        a->store_closing = true;
        /* Clients may be mid-request: a node waiting for room, woken by the "closed" plan
         * just written, reads it in a second request. Serve them until they hang up. */
        ctrun_store_close_gently(a->store, CTRUN_STORE_LINGER_MS, ctrun__store_closed, a);
    }
    for (int i = 0; i < a->nsignals; i++)
        uv_close((uv_handle_t *)&a->signals[i], ctrun__close_cb);
    a->nsignals = 0;
    uv_close((uv_handle_t *)&a->grace_timer, ctrun__close_cb);
    uv_close((uv_handle_t *)&a->rdzv_timer, ctrun__close_cb);
    uv_close((uv_handle_t *)&a->watchdog_timer, ctrun__close_cb);
    uv_close((uv_handle_t *)&a->barrier_timer, ctrun__close_cb);
    uv_close((uv_handle_t *)&a->hb_timer, ctrun__close_cb);
    uv_close((uv_handle_t *)&a->inject_timer, ctrun__close_cb);
    uv_close((uv_handle_t *)&a->restart_timer, ctrun__close_cb);
}

/* How many other nodes the host waits for at the exit barrier: a lost node never comes. */
static int ctrun__barrier_target(const ctrun_agent_t *a)
{
    return a->plan.nnodes - 1 - (a->outcome == CTRUN_OUTCOME_LOST ? 1 : 0);
}

/* The job is over for this node: the exit barrier, then DONE. */
static void ctrun__finish(ctrun_agent_t *a, int exit_code)
{
    a->exit_code = exit_code;
    ctrun__set_state(a, CTRUN_AGENT_EXITING);
    uv_timer_stop(&a->grace_timer);
    uv_timer_stop(&a->rdzv_timer);
    uv_timer_stop(&a->watchdog_timer);
    uv_timer_stop(&a->inject_timer);
    uv_timer_stop(&a->restart_timer);
    a->restart_pending = false;
    if (a->store_lost || a->plan.nnodes <= 1) {
        ctrun__done(a, exit_code);
        return;
    }
    if (!a->is_host) {
        char key[CTRUN_RDZV_KEY_MAX];
        ctrun_rdzv_key(key, "left");
        int rc =
            ctrun_kv_add(a->kv, key, 1, CTRUN_TAG(CTRUN_TAG_AGENT, a->attempt, CTRUN__KV_LEFT));
        if (rc != 0)
            ctrun__done(a, exit_code);
        return;
    }
    if (a->coord.left >= ctrun__barrier_target(a)) {
        ctrun__done(a, exit_code);
        return;
    }
    /* The others only have to stop their workers and read the outcome and the failures. */
    uint64_t ms = (uint64_t)((a->cfg->grace_period_s + 30.0) * 1000.0);
    uv_timer_start(&a->barrier_timer, a->barrier_timer.timer_cb, ms, 0);
}

/* Prints the failure report (records from every node when the store has them) and finishes. */
static void ctrun__report(ctrun_agent_t *a, const char *lines)
{
    ctrun_failure_t *list = NULL;
    size_t n = 0, cap = 0;
    bool from_store = lines != NULL && lines[0] != '\0';
    if (from_store) {
        char *copy = strdup(lines);
        char *save = NULL;
        for (char *line = copy ? strtok_r(copy, "\n", &save) : NULL; line != NULL;
             line = strtok_r(NULL, "\n", &save)) {
            if (n == cap) {
                cap = cap ? cap * 2 : 8;
                ctrun_failure_t *g = realloc(list, cap * sizeof *g);
                if (g == NULL)
                    break;
                list = g;
            }
            int node = -1;
            ct_errbuf_t eb = {{0}};
            if (ctrun_failure_from_json(line, &list[n], &node, &eb) != 0) {
                ct_log_warn("skipping a failure record from the store: %s", eb.msg);
                continue;
            }
            /* Our own workers' error files are here to copy (see ctrun_report_propagate). */
            list[n].error_file_ok = node == a->plan.group_rank && list[n].error_file != NULL;
            n++;
        }
        free(copy);
        from_store = n > 0;
    }
    const ctrun_failure_t *shown = from_store ? list : a->failures;
    size_t nshown = from_store ? n : a->nfailures;
    if (nshown > 0) {
        char *text = NULL;
        if (ctrun_report_format(a->entrypoint, shown, nshown, &text) == 0)
            ctrun__print(a, text);
        free(text);
        ct_errbuf_t eb = {{0}};
        const ctrun_failure_t *root = &shown[ctrun_report_root(shown, nshown)];
        int rc = ctrun_report_propagate(root, getenv("TORCHELASTIC_ERROR_FILE"), &eb);
        if (rc == -ENOENT)
            ct_log_debug("no error file defined for parent, to copy child error file (%s)",
                         root->error_file ? root->error_file : "<N/A>");
        else if (rc != 0)
            ct_log_error("%s", eb.msg);
    }
    for (size_t i = 0; i < n; i++)
        ctrun_failure_free(&list[i]);
    free(list);
    ctrun__finish(a, a->fail_exit);
}

/* ---- attempts ------------------------------------------------------------------------------- */

static double ctrun__rdzv_timeout_s(const ctrun_agent_t *a)
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
    ctrun__set_state(a, CTRUN_AGENT_RENDEZVOUS);
    uv_timer_start(&a->rdzv_timer, a->rdzv_timer.timer_cb,
                   (uint64_t)(ctrun__rdzv_timeout_s(a) * 1000.0), 0);
    int rc = ctrun_rdzv_start(&a->rdzv, attempt);
    if (rc != 0) {
        ct_log_error("%s", a->rdzv.error);
        ctrun__done(a, CTRUN_EXIT_FAILED);
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
        ctrun__done(a, CTRUN_EXIT_FAILED);
        return;
    }
    ctrun_group_log_rendezvous(a);
    char key[CTRUN_RDZV_KEY_MAX];
    ctrun_rdzv_key(key, "a/%d/outcome", a->attempt);
    ctrun__kv(a, ctrun_kv_get(a->kv, key, ctrun__tag(a, CTRUN__KV_OUTCOME)));
    ctrun__set_state(a, CTRUN_AGENT_RUNNING);
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
        ctrun__record_failure(a, i, 127, msg, "could not start (exit 127)", -1);
        for (int j = i; j < a->nworkers; j++) {
            ctrun_worker_t *wj = &a->workers[j];
            if (j == i && !wj->proc.done) {
                wj->state = CTRUN_WORKER_EXITED; /* its handles are still closing */
                continue;
            }
            wj->state = CTRUN_WORKER_GONE;
            a->ngone++;
        }
        ctrun__fail_attempt(a);
        ctrun__set_state(a, CTRUN_AGENT_STOPPING);
        return;
    }
    ctrun__inject_schedule(a);
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

/* ---- fault injection (time triggers; step triggers are armed in ctrun_group_prepare) ---- */

static bool ctrun__inject_timed(const ctrun_inject_spec_t *s)
{
    return s->trigger == CTRUN_INJECT_AT_TIME || s->trigger == CTRUN_INJECT_EVERY;
}

static uint64_t ctrun__inject_due(const ctrun_agent_t *a, size_t i)
{
    const ctrun_inject_spec_t *s = &a->inject.specs[i];
    if (s->trigger == CTRUN_INJECT_AT_TIME)
        return a->start_ms + (uint64_t)(s->seconds * 1000.0 + 0.5);
    return a->attempt_start_ms +
           (uint64_t)(s->seconds * 1000.0 * (double)(a->inject_in_attempt[i] + 1) + 0.5);
}

/* Starts the injection timer for the next due time-triggered spec (RUNNING only). */
static void ctrun__inject_schedule(ctrun_agent_t *a)
{
    uv_timer_stop(&a->inject_timer);
    if (a->state != CTRUN_AGENT_RUNNING)
        return;
    uint64_t now = uv_now(&a->loop), next = UINT64_MAX;
    for (size_t i = 0; i < a->inject.n; i++) {
        if (!ctrun__inject_timed(&a->inject.specs[i]) || !ctrun_inject_pending(&a->inject, i))
            continue;
        uint64_t due = ctrun__inject_due(a, i);
        uint64_t in = due > now ? due - now : 0;
        if (in < next)
            next = in;
    }
    if (next != UINT64_MAX)
        uv_timer_start(&a->inject_timer, a->inject_timer.timer_cb, next, 0);
}

/* Fires every due time-triggered spec. Every agent of the job counts every firing (so their
 * seeded draws agree); the one that owns the target acts. */
static void ctrun__on_inject(ctrun_agent_t *a)
{
    if (a->state != CTRUN_AGENT_RUNNING)
        return;
    uint64_t now = uv_now(&a->loop);
    for (size_t i = 0; i < a->inject.n; i++) {
        ctrun_inject_spec_t *s = &a->inject.specs[i];
        if (!ctrun__inject_timed(s) || !ctrun_inject_pending(&a->inject, i) ||
            ctrun__inject_due(a, i) > now)
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
    ctrun__inject_schedule(a);
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
            ctrun__finish(a, 0);
        else if (a->outcome != CTRUN_OUTCOME_NONE)
            ctrun__set_state(a, CTRUN_AGENT_STOPPING); /* handled just below */
        else if (a->store_lost)
            ctrun__finish(a, CTRUN_EXIT_FAILED);
    }
    if (a->state != CTRUN_AGENT_STOPPING)
        return;
    /* A stop by signal needs no outcome: this node leaves whatever the others decide. */
    if (a->outcome == CTRUN_OUTCOME_NONE && !a->store_lost && a->stop_signal == 0)
        return;
    uv_timer_stop(&a->grace_timer);
    if (a->stop_signal != 0) {
        ctrun_group_free(a);
        ctrun__finish(a, 128 + a->stop_signal);
        return;
    }
    if (a->store_lost) {
        ctrun__report(a, NULL);
        ctrun_group_free(a);
        return;
    }
    if (a->outcome == CTRUN_OUTCOME_STOPPED) {
        char sn[32];
        ct_log_error("node %d was stopped by %s; stopping this node too", a->outcome_node,
                     ctrun_signal_name(a->outcome_signal, sn, sizeof sn));
        ctrun_group_free(a);
        ctrun__finish(a, CTRUN_EXIT_FAILED);
        return;
    }
    if (a->outcome == CTRUN_OUTCOME_SUCCEEDED) { /* a stop request lost the race */
        ctrun_group_free(a);
        ctrun__finish(a, 0);
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
        ctrun__finish(a, CTRUN_EXIT_FAILED);
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
    ctrun__set_state(a, CTRUN_AGENT_EXITING);
    ctrun__kv(a, ctrun_kv_get(a->kv, key, ctrun__tag(a, CTRUN__KV_FAILURES)));
    if (a->store_lost) {
        ctrun__report(a, NULL);
        ctrun_group_free(a);
    }
}

/* ---- the transition function ----------------------------------------------------------------- */

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
            ctrun__done(a, CTRUN_EXIT_FAILED);
            return;
        case CTRUN_RDZV_COMPLETE:
            ctrun__start_workers(a);
            return;
        }
        return;
    }
    unsigned kind = CTRUN_TAG_KIND(r->tag);
    if (kind == CTRUN__KV_HB) {
        if (r->rc == 0) {
            a->hb_ok_ms = uv_now(&a->loop);
        } else if (r->rc != -ECANCELED && a->state != CTRUN_AGENT_DONE) {
            ctrun__event_t ev = {.kind = CTRUN__EV_STORE_GONE};
            ctrun__store_lost(a, r->error);
            ctrun__step(a, &ev);
        }
        return;
    }
    if (kind == CTRUN__KV_LEFT) {
        if (a->state == CTRUN_AGENT_EXITING)
            ctrun__done(a, a->exit_code);
        return;
    }
    if (CTRUN_TAG_ATTEMPT(r->tag) != a->attempt || a->state == CTRUN_AGENT_DONE)
        return; /* a reply about an attempt that is over */
    if (r->rc != 0) {
        if (r->rc == -ECANCELED)
            return;
        ctrun__store_lost(a, r->error);
        if (a->state == CTRUN_AGENT_RUNNING || a->state == CTRUN_AGENT_SUCCEEDED) {
            /* Nobody can tell us how the job goes on: stop here. */
            ctrun__stop_workers(a, SIGTERM);
            ctrun__set_state(a, CTRUN_AGENT_STOPPING);
        }
        if (a->state == CTRUN_AGENT_EXITING && kind == CTRUN__KV_FAILURES) {
            ctrun__report(a, NULL);
            ctrun_group_free(a);
            return;
        }
        ctrun__progress(a);
        return;
    }
    const char *value = (const char *)r->data;
    switch (kind) {
    case CTRUN__KV_OUTCOME:
    case CTRUN__KV_POST:
        ctrun__note_outcome(a, value);
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
            ctrun__set_state(a, CTRUN_AGENT_STOPPING);
        }
        ctrun__progress(a);
        return;
    case CTRUN__KV_OK:
        if (r->num == a->plan.nnodes)
            ctrun__post_outcome(a, "succeeded");
        return;
    case CTRUN__KV_FAILURES:
        if (a->state == CTRUN_AGENT_EXITING) {
            ctrun__report(a, value);
            ctrun_group_free(a);
        }
        return;
    default:
        return;
    }
}

/* Why worker i ended with exitcode, for the recovery table, and whether an injected fault
 * did it (then that spec counts as fired). *detect_ns: the detection latency, -1 unknown. */
static void ctrun__exit_cause(ctrun_agent_t *a, int i, int exitcode, char *cause, size_t size,
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
        ctrun__exit_cause(a, i, exitcode, cause, sizeof cause, &detect_ns);
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
        ctrun__record_failure(a, i, exitcode, NULL, cause, detect_ns);
        if (a->state == CTRUN_AGENT_RUNNING || a->state == CTRUN_AGENT_STOPPING) {
            ctrun__fail_attempt(a);
            ctrun__set_state(a, CTRUN_AGENT_STOPPING);
        }
        return;
    }
    if (a->state == CTRUN_AGENT_RUNNING && a->nrunning == 0 && a->nfailures == 0) {
        /* Every local worker exited 0. */
        ctrun__set_state(a, CTRUN_AGENT_SUCCEEDED);
        uv_timer_stop(&a->watchdog_timer);
        if (a->store_lost)
            return;
        char key[CTRUN_RDZV_KEY_MAX];
        ctrun_rdzv_key(key, "a/%d/ok", a->attempt);
        ctrun__kv(a, ctrun_kv_add(a->kv, key, 1, ctrun__tag(a, CTRUN__KV_OK)));
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
        ctrun__done(a, 128 + sig);
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
            ctrun__post_outcome(a, text);
        }
        ctrun__stop_workers(a, sig);
        ctrun__set_state(a, CTRUN_AGENT_STOPPING);
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
        ctrun__done(a, 128 + sig);
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

/* Worker i was silent for --watchdog_timeout. Every silent or stopped worker is asked for a
 * stack dump (CT_WORKER_DUMP_SIGNAL); the stuck rank - a stopped one if any, else i, the first
 * overdue - is recorded with its last step; then the attempt fails as for a crash. The stop's
 * SIGTERM comes after the dump signal, and a pending SIGUSR1 (10) is delivered before a
 * pending SIGTERM (15), so a stopped worker, once continued by the stop, prints its stack and
 * only then ends (libctworker's handler defers SIGTERM until it has printed). */
static void ctrun__on_watchdog(ctrun_agent_t *a, int i)
{
    if (a->state != CTRUN_AGENT_RUNNING || a->workers[i].state != CTRUN_WORKER_RUNNING)
        return;
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
                    (unsigned long long)w->hb_step, CT_WORKER_DUMP_SIGNAL);
        kill(w->proc.pid, CT_WORKER_DUMP_SIGNAL);
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
    ctrun__record_failure(a, victim, -SIGTERM, msg, cause, detect);
    ctrun__fail_attempt(a);
    ctrun__set_state(a, CTRUN_AGENT_STOPPING);
}

/* The store's host is gone (or cut off): nobody can coordinate this node any more. */
static void ctrun__on_store_gone(ctrun_agent_t *a)
{
    switch (a->state) {
    case CTRUN_AGENT_INIT:
    case CTRUN_AGENT_RENDEZVOUS:
        ctrun__done(a, CTRUN_EXIT_FAILED);
        return;
    case CTRUN_AGENT_RUNNING:
    case CTRUN_AGENT_SUCCEEDED:
        ctrun__stop_workers(a, SIGTERM);
        ctrun__set_state(a, CTRUN_AGENT_STOPPING);
        ctrun__progress(a);
        return;
    case CTRUN_AGENT_STOPPING:
        ctrun__progress(a);
        return;
    case CTRUN_AGENT_EXITING:
        ctrun__done(a, a->exit_code);
        return;
    case CTRUN_AGENT_DONE:
        return;
    }
}

static void ctrun__step(ctrun_agent_t *a, const ctrun__event_t *ev)
{
    switch (ev->kind) {
    case CTRUN__EV_START:
        ctrun__start_rendezvous(a, 0);
        return;
    case CTRUN__EV_KV:
        ctrun__on_kv(a, ev->reply);
        return;
    case CTRUN__EV_RDZV_TIMEOUT: {
        if (a->state != CTRUN_AGENT_RENDEZVOUS)
            return;
        int64_t since = 0;
        /* Not a slow job when a connection has waited a while for the endpoint to answer the
         * store handshake: whatever listens there is not answering as a store. */
        if (ctrun_kv_unanswered(a->kv, &since) && ct_time_ms() - since >= 1000)
            ct_log_error("rendezvous of attempt %d timed out after %g s: no answer from %s:%d "
                         "in %.1f s: it accepted the connection but never answered the store "
                         "handshake (is --rdzv_endpoint / --master_addr a ctrun store?)",
                         a->attempt, ctrun__rdzv_timeout_s(a), a->master_addr, a->master_port,
                         (double)(ct_time_ms() - since) / 1000.0);
        else if (a->rdzv.waited)
            ct_log_error("rendezvous timed out after %g s: this node waited for a round with "
                         "room for it (the job runs with --nnodes maximum %d; store %s:%d; see "
                         "--rdzv_conf join_timeout=SECONDS)",
                         ctrun__rdzv_timeout_s(a), a->cfg->max_nodes, a->master_addr,
                         a->master_port);
        else
            ct_log_error(
                "rendezvous of attempt %d timed out after %g s: %s %d nodes joined "
                "(store %s:%d; see --rdzv_conf %s=SECONDS)",
                a->attempt, ctrun__rdzv_timeout_s(a),
                a->rdzv_kind == CTRUN_RDZV_KIND_STATIC || a->cfg->min_nodes == a->cfg->max_nodes
                    ? "not all"
                    : "fewer than",
                a->rdzv_kind == CTRUN_RDZV_KIND_STATIC ? a->cfg->max_nodes : a->cfg->min_nodes,
                a->master_addr, a->master_port,
                a->rdzv_kind == CTRUN_RDZV_KIND_STATIC ? "timeout" : "join_timeout");
        ctrun__done(a, CTRUN_EXIT_FAILED);
        return;
    }
    case CTRUN__EV_WORKER_EXIT:
        ctrun__on_worker_exit(a, ev->worker, ev->value);
        ctrun__progress(a);
        return;
    case CTRUN__EV_WORKER_GONE: {
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
    case CTRUN__EV_WATCHDOG:
        ctrun__on_watchdog(a, ev->worker);
        return;
    case CTRUN__EV_INJECT:
        ctrun__on_inject(a);
        return;
    case CTRUN__EV_RESTART:
        if (!a->restart_pending)
            return;
        a->restart_pending = false;
        if (a->state == CTRUN_AGENT_STOPPING)
            ctrun__start_rendezvous(a, a->attempt + 1);
        return;

    case CTRUN__EV_SIGNAL:
        ctrun__on_signal(a, ev->value);
        return;
    case CTRUN__EV_GRACE:
        ctrun__on_grace(a);
        return;
    case CTRUN__EV_LEFT:
        if (ev->value < 0) {
            ct_log_error("rendezvous coordinator: %s", a->coord.error);
            if (a->state == CTRUN_AGENT_RENDEZVOUS)
                ctrun__done(a, CTRUN_EXIT_FAILED);
            return;
        }
        if (a->state == CTRUN_AGENT_EXITING && ev->value >= ctrun__barrier_target(a))
            ctrun__done(a, a->exit_code);
        return;
    case CTRUN__EV_STORE_GONE:
        ctrun__on_store_gone(a);
        return;
    case CTRUN__EV_BARRIER_TIMEOUT:
        if (a->state != CTRUN_AGENT_EXITING)
            return;
        ct_log_warn("exit barrier: %d of %d other nodes finished within %g s; exiting anyway",
                    a->coord.left, a->plan.nnodes - 1, a->cfg->grace_period_s + 30.0);
        ctrun__done(a, a->exit_code);
        return;
    }
}

/* ---- callbacks into events ------------------------------------------------------------------ */

static void ctrun__kv_cb(void *data, const ctrun_kv_reply_t *reply)
{
    ctrun__event_t ev = {.kind = CTRUN__EV_KV, .reply = reply};
    ctrun__step(data, &ev);
}

void ctrun__agent_worker_exit(ctrun_agent_t *a, int i, int exitcode)
{
    ctrun__event_t ev = {.kind = CTRUN__EV_WORKER_EXIT, .worker = i, .value = exitcode};
    ctrun__step(a, &ev);
}

void ctrun__agent_worker_gone(ctrun_agent_t *a, int i)
{
    ctrun__event_t ev = {.kind = CTRUN__EV_WORKER_GONE, .worker = i};
    ctrun__step(a, &ev);
}

static void ctrun__watchdog_cb(uv_timer_t *t)
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
            ctrun__event_t ev = {.kind = CTRUN__EV_WATCHDOG, .worker = i};
            ctrun__step(a, &ev);
            return;
        }
        if (due - now < next)
            next = due - now;
    }
    if (next != UINT64_MAX)
        uv_timer_start(t, ctrun__watchdog_cb, next, 0);
}

void ctrun__agent_worker_heartbeat(ctrun_agent_t *a, int i, const ct_heartbeat_record_t *rec)
{
    /* Bookkeeping only (not a state change): the watchdog timer turns silence into an event. */
    ctrun_worker_t *w = &a->workers[i];
    w->hb_count++;
    w->hb_step = rec->step;
    w->hb_last_ms = uv_now(&a->loop);
    w->hb_time_ns = rec->time_ns;
    if (a->state == CTRUN_AGENT_RUNNING || a->state == CTRUN_AGENT_SUCCEEDED ||
        a->state == CTRUN_AGENT_STOPPING) /* records read after a failure still count */
        ctrun_recovery_heartbeat(&a->recovery, a->attempt, (int64_t)rec->step, uv_hrtime());
    if (a->cfg->watchdog_timeout_s > 0 && a->state == CTRUN_AGENT_RUNNING &&
        !uv_is_active((uv_handle_t *)&a->watchdog_timer))
        uv_timer_start(&a->watchdog_timer, ctrun__watchdog_cb,
                       (uint64_t)(a->cfg->watchdog_timeout_s * 1000.0), 0);
}

static void ctrun__inject_cb(uv_timer_t *t)
{
    ctrun__event_t ev = {.kind = CTRUN__EV_INJECT};
    ctrun__step(t->data, &ev);
}

static void ctrun__restart_cb(uv_timer_t *t)
{
    ctrun__event_t ev = {.kind = CTRUN__EV_RESTART};
    ctrun__step(t->data, &ev);
}

static void ctrun__signal_cb(uv_signal_t *h, int sig)
{
    ctrun__event_t ev = {.kind = CTRUN__EV_SIGNAL, .value = sig};
    ctrun__step(h->data, &ev);
}

static void ctrun__grace_cb(uv_timer_t *t)
{
    ctrun__event_t ev = {.kind = CTRUN__EV_GRACE};
    ctrun__step(t->data, &ev);
}

static void ctrun__rdzv_timer_cb(uv_timer_t *t)
{
    ctrun__event_t ev = {.kind = CTRUN__EV_RDZV_TIMEOUT};
    ctrun__step(t->data, &ev);
}

static void ctrun__barrier_cb(uv_timer_t *t)
{
    ctrun__event_t ev = {.kind = CTRUN__EV_BARRIER_TIMEOUT};
    ctrun__step(t->data, &ev);
}

static void ctrun__left_cb(void *data, int left)
{
    ctrun__event_t ev = {.kind = CTRUN__EV_LEFT, .value = left};
    ctrun__step(data, &ev);
}

/* Node heartbeat: one SET per interval once this node is registered. A client agent that has
 * had no reply for the timeout has lost the store's host (a dead machine or a cut link answers
 * nothing, so a failed request alone would come too late). */
static void ctrun__hb_cb(uv_timer_t *t)
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
        ctrun__store_lost(a, why);
        ctrun__event_t ev = {.kind = CTRUN__EV_STORE_GONE};
        ctrun__step(a, &ev);
        return;
    }
    /* An ADD, not a SET: the store answers it, so a reply proves the round trip (a SET has no
     * reply and "succeeds" into the socket buffer of a dead link). */
    char key[CTRUN_RDZV_KEY_MAX];
    ctrun_rdzv_key(key, "hb/%d", a->rdzv.node_id);
    a->hb_seq++;
    ctrun__kv(a, ctrun_kv_add(a->kv, key, 1, ctrun__tag(a, CTRUN__KV_HB)));
}

/* ---- set-up ---------------------------------------------------------------------------------- */

/* c10d: does the endpoint name this machine? (torchrun's is_host inference: loopback,
 * localhost, this host's names, --local_addr, or an address of one of its interfaces.) */
static bool ctrun__endpoint_is_local(const ctrun_config_t *cfg, const char *fqdn)
{
    const char *h = cfg->store_addr.host;
    char name[256] = "";
    gethostname(name, sizeof name - 1);
    if (strcmp(h, "localhost") == 0 || strncmp(h, "127.", 4) == 0 || strcmp(h, "::1") == 0 ||
        strcmp(h, name) == 0 || strcmp(h, fqdn) == 0 ||
        (cfg->local_addr != NULL && strcmp(h, cfg->local_addr) == 0))
        return true;
    /* An address literal of one of this machine's interfaces. */
    unsigned char want[16];
    int family = inet_pton(AF_INET, h, want) == 1    ? AF_INET
                 : inet_pton(AF_INET6, h, want) == 1 ? AF_INET6
                                                     : 0;
    struct ifaddrs *list = NULL;
    if (family == 0 || getifaddrs(&list) != 0)
        return false;
    bool found = false;
    for (struct ifaddrs *i = list; i != NULL && !found; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != family)
            continue;
        const void *got = family == AF_INET
                              ? (const void *)&((struct sockaddr_in *)i->ifa_addr)->sin_addr
                              : (const void *)&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
        found = memcmp(got, want, family == AF_INET ? 4 : 16) == 0;
    }
    freeifaddrs(list);
    return found;
}

static int ctrun__setup_store(ctrun_agent_t *a, ct_errbuf_t *eb)
{
    const ctrun_config_t *cfg = a->cfg;
    snprintf(a->master_addr, sizeof a->master_addr, "%s", cfg->store_addr.host);
    a->master_port = cfg->store_addr.port;
    bool want_host, may_fall_back = false;
    if (a->rdzv_kind == CTRUN_RDZV_KIND_STATIC) {
        want_host = cfg->node_rank == 0;
    } else if (cfg->standalone) {
        want_host = true;
    } else if (cfg->rdzv_conf.is_host >= 0) {
        want_host = cfg->rdzv_conf.is_host == 1;
    } else {
        want_host = ctrun__endpoint_is_local(cfg, ctrun__host(a));
        may_fall_back = true; /* another agent on this machine may host it (torchrun's rule) */
    }
    if (want_host) {
        ctrun_store_opts_t so = {
            .host = NULL, /* every address: other nodes reach it by whatever name they use */
            .port = cfg->store_addr.port,
            .token = cfg->rdzv_conf.store_token,
        };
        int rc = ctrun_store_create(&a->loop, &so, &a->store, eb);
        if (rc == 0) {
            a->is_host = true;
            a->master_port = ctrun_store_port(a->store);
            ct_log_debug("store listening at %s", ctrun_store_address(a->store));
        } else if (may_fall_back && rc == -EADDRINUSE) {
            ct_log_info("port %d is taken on this machine (another agent hosts the store?); "
                        "joining as a client of %s:%d",
                        cfg->store_addr.port, cfg->store_addr.host, cfg->store_addr.port);
        } else {
            return ct_errbuf_wrap(eb, rc, "cannot host the rendezvous store on port %d",
                                  cfg->store_addr.port);
        }
    }
    if (a->is_host)
        return ctrun_kv_open_local(&a->loop, a->store, ctrun__kv_cb, a, &a->kv, eb);
    double timeout_s = ctrun__rdzv_timeout_s(a);
    ctrun_kv_remote_opts_t ko = {
        .host = cfg->store_addr.host,
        .port = cfg->store_addr.port,
        .connect_timeout_ms = (int64_t)(timeout_s * 1000.0),
        .op_timeout_ms = (int64_t)(cfg->rdzv_conf.read_timeout_s * 1000.0),
        .backoff_max_ms = 1000,
        .token = cfg->rdzv_conf.store_token,
    };
    return ctrun_kv_open_remote(&a->loop, &ko, ctrun__kv_cb, a, &a->kv, eb);
}

static int ctrun__setup(ctrun_agent_t *a, ct_errbuf_t *eb)
{
    const ctrun_config_t *cfg = a->cfg;
    a->rdzv_kind =
        cfg->rdzv_backend == CTRUN_RDZV_STATIC ? CTRUN_RDZV_KIND_STATIC : CTRUN_RDZV_KIND_C10D;
    a->entrypoint = ctrun_cmd_entrypoint_name(cfg);
    a->prefix_template = getenv("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");

    uv_timer_init(&a->loop, &a->grace_timer);
    uv_timer_init(&a->loop, &a->rdzv_timer);
    uv_timer_init(&a->loop, &a->watchdog_timer);
    uv_timer_init(&a->loop, &a->barrier_timer);
    uv_timer_init(&a->loop, &a->hb_timer);
    a->grace_timer.data = a->rdzv_timer.data = a->watchdog_timer.data = a->barrier_timer.data = a;
    a->hb_timer.data = a;
    a->grace_timer.timer_cb = ctrun__grace_cb;
    a->rdzv_timer.timer_cb = ctrun__rdzv_timer_cb;
    a->barrier_timer.timer_cb = ctrun__barrier_cb;
    uv_timer_t *more[] = {&a->inject_timer, &a->restart_timer};
    uv_timer_cb more_cb[] = {ctrun__inject_cb, ctrun__restart_cb};
    for (int i = 0; i < 2; i++) {
        uv_timer_init(&a->loop, more[i]);
        more[i]->data = a;
        more[i]->timer_cb = more_cb[i];
    }
    a->start_ms = uv_now(&a->loop);
    a->fail_exit = CTRUN_EXIT_FAILED;
    a->cgroup.procs_fd = -1;
    const char *cgmode = getenv("CTRUN_CGROUP");
    if (cgmode == NULL || strcmp(cgmode, "off") != 0) {
        ct_errbuf_t ceb = {{0}};
        if (ctrun_cgroup_create(&a->cgroup, NULL, NULL, &ceb) == 0)
            ct_log_debug("workers run in the cgroup %s", a->cgroup.path);
        else
            ct_log_debug("no job cgroup (%s); process groups only", ceb.msg);
    }
    if (cfg->inject_specs.n > 0) {
        if (ctrun_inject_copy(&a->inject, &cfg->inject_specs) != 0)
            return ct_errbuf_set(eb, -ENOMEM, "out of memory");
        a->inject_in_attempt = calloc(a->inject.n + 1, sizeof *a->inject_in_attempt);
        if (a->inject_in_attempt == NULL)
            return ct_errbuf_set(eb, -ENOMEM, "out of memory");
        ct_log_warn("fault injection: %zu spec%s, seed %llu: %s", a->inject.n,
                    a->inject.n == 1 ? "" : "s", (unsigned long long)cfg->inject_seed, cfg->inject);
    }

    /* Signals are handled from the start: one during the rendezvous ends the agent at once
     * with 128+signal (no worker exists yet). */
    for (size_t i = 0; i < cfg->nsignals; i++) {
        uv_signal_t *h = &a->signals[a->nsignals];
        uv_signal_init(&a->loop, h);
        h->data = a;
        a->nsignals++;
        int rc = uv_signal_start(h, ctrun__signal_cb, cfg->signals[i]);
        if (rc != 0)
            return ct_errbuf_set(eb, rc, "cannot handle signal %d: %s", cfg->signals[i],
                                 uv_strerror(rc));
    }

    int rc = ctrun_logs_init(&a->logs, cfg->log_dir, cfg->run_id, eb);
    if (rc != 0)
        return rc;
    if ((rc = ctrun__setup_store(a, eb)) != 0)
        return rc;
    bool multi = cfg->max_nodes > 1;
    a->hb_interval_ms = (uint64_t)(cfg->rdzv_conf.node_hb_interval_s * 1000.0 + 0.5);
    a->hb_timeout_ms = (uint64_t)(cfg->rdzv_conf.node_hb_timeout_s * 1000.0 + 0.5);
    ctrun_rdzv_params_t rp = {
        .kind = a->rdzv_kind,
        .run_id = cfg->run_id,
        .min_nodes = cfg->min_nodes,
        .nnodes = cfg->max_nodes,
        .node_rank = cfg->node_rank,
        .nproc = cfg->nproc_per_node,
        .max_restarts = cfg->max_restarts,
        /* the name other nodes know this one by: --local_addr, else the FQDN */
        .host = !multi            ? "localhost"
                : cfg->local_addr ? cfg->local_addr
                                  : ctrun__host(a),
        .last_call_ms = (int64_t)(cfg->rdzv_conf.last_call_timeout_s * 1000.0 + 0.5),
        .heartbeat_timeout_ms = multi ? (int64_t)a->hb_timeout_ms : 0,
    };
    if (a->is_host) {
        if ((rc = ctrun_rdzv_coord_init(&a->coord, &a->loop, a->store, &rp, ctrun__left_cb, a,
                                        eb)) != 0)
            return rc;
        a->coord_open = true;
    }
    if (multi)
        uv_timer_start(&a->hb_timer, ctrun__hb_cb, a->hb_interval_ms / 4 + 1, a->hb_interval_ms);
    ctrun_rdzv_init(&a->rdzv, a->kv, &rp);
    a->plan.nnodes = cfg->max_nodes;
    return 0;
}

/* Removes the run's empty log folders (all of them when no worker wrote a file). On some
 * filesystems each rmdir costs a journal commit and a discard, milliseconds apiece, so a child
 * does it while ctrun exits: the job's end is not delayed by its own tidying. The child has
 * nothing of the job (every worker is gone, the store and its threads are closed), never writes
 * to the console, and exits without running exit handlers. */
static void ctrun__tidy_logs(const ctrun_logs_t *logs)
{
    if (logs->run_dir == NULL)
        return;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        setsid(); /* not part of the job's process group: a group kill after ctrun exits (a
                   * shell, a scheduler) does not cut the tidying short */
        int fd = open("/dev/null", O_RDWR);
        for (int i = 0; fd >= 0 && i < 3; i++)
            dup2(fd, i);
        ctrun_logs_remove_empty(logs);
        _exit(0);
    }
    if (pid < 0)
        ctrun_logs_remove_empty(logs);
}

/* The end-of-job recovery table on stderr (when there were failures) and report.json in the
 * run's log folder (when there were failures, or --log_dir was given). */
static void ctrun__recovery_report(ctrun_agent_t *a)
{
    int attempts = a->attempt + 1;
    if (a->recovery.n > 0) {
        char *text = NULL;
        if (ctrun_recovery_format(&a->recovery, attempts, &text) == 0)
            ctrun__print(a, text);
        free(text);
    }
    if (a->logs.disabled || a->logs.run_dir == NULL ||
        (a->recovery.n == 0 && a->cfg->log_dir == NULL))
        return;
    char *json = NULL;
    if (ctrun_recovery_json(&a->recovery, attempts, a->exit_code, &json) != 0)
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s/report.json", a->logs.run_dir);
    FILE *f = fopen(path, "w");
    if (f == NULL || fputs(json, f) < 0 || fputc('\n', f) < 0) {
        ct_log_warn("cannot write %s: %s", path, strerror(errno));
    } else if (a->recovery.n > 0) {
        ct_log_info("recovery report written to %s", path);
    }
    if (f != NULL)
        fclose(f);
    free(json);
}

/* ct_log lines of every thread of the agent go through the console queue. */
static void ctrun__log_output(const char *line, size_t nbytes, void *arg)
{
    struct iovec iov = {.iov_base = (void *)line, .iov_len = nbytes};
    ctrun_console_write(arg, STDERR_FILENO, &iov, 1, CTRUN_CONSOLE_OWN);
}

/* How long the end of the job waits for a console reader that takes nothing: the job is over,
 * so ctrun waits as long as the reader makes progress, but not for one that never reads. */
#define CTRUN__CONSOLE_EXIT_STALL_MS 10000

static void ctrun__walk_close(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

int ctrun_agent_run(const ctrun_config_t *cfg, int *exit_code, ct_errbuf_t *eb)
{
    ctrun_agent_t *a = calloc(1, sizeof *a);
    if (a == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    a->cfg = cfg;
    int rc = uv_loop_init(&a->loop);
    if (rc != 0) {
        free(a);
        return ct_errbuf_set(eb, rc, "uv_loop_init: %s", uv_strerror(rc));
    }
    /* A vanished console reader must not kill the agent; workers get SIGPIPE back. */
    signal(SIGPIPE, SIG_IGN);
    /* From here on nothing the agent prints waits for the console's reader. */
    rc = ctrun_console_create(STDOUT_FILENO, STDERR_FILENO, cfg->console_buffer, "[ctrun]",
                              ct_log_get_level() <= CT_LOG_WARN, &a->console);
    if (rc != 0)
        ct_log_warn("console queue: %s; writing the console directly", strerror(-rc));
    else
        ct_log_set_output(ctrun__log_output, a->console);

    if (ctrun_env_omp_notice_needed(NULL, cfg->nproc_per_node))
        ct_log_warn("\n%s", ctrun_env_omp_notice());
    if (CT_LOG_INFO >= ct_log__threshold) {
        char *text = NULL;
        if (ctrun_info_launch_config(cfg, &text) == 0)
            ct_log_info("%s", text);
        free(text);
    }

    ct_errbuf_t seb = {{0}};
    if (ctrun__setup(a, &seb) != 0) {
        ct_log_error("%s", seb.msg);
        ctrun__done(a, CTRUN_EXIT_FAILED);
    } else {
        if (a->logs.run_dir != NULL)
            ct_log_info("log directory set to: %s", a->logs.run_dir);
        ctrun__event_t ev = {.kind = CTRUN__EV_START};
        ctrun__step(a, &ev);
    }
    uv_run(&a->loop, UV_RUN_DEFAULT);
    /* Everything was closed by ctrun__done; anything left is a bug worth not hanging on. */
    uv_walk(&a->loop, ctrun__walk_close, NULL);
    uv_run(&a->loop, UV_RUN_DEFAULT);
    uv_loop_close(&a->loop);
    ctrun_group_free(a);
    ctrun_cgroup_destroy(&a->cgroup, 2000);
    ctrun__recovery_report(a);
    ctrun_recovery_free(&a->recovery);
    ctrun_inject_free(&a->inject);
    free(a->inject_in_attempt);
    ctrun__tidy_logs(&a->logs);
    ctrun_logs_close(&a->logs);
    /* Every other thread is gone (the store's and the kv helpers'): logging goes direct again. */
    ct_log_set_output(NULL, NULL);
    ctrun_console_destroy(a->console, CTRUN__CONSOLE_EXIT_STALL_MS);
    *exit_code = a->exit_code;
    free(a);
    return 0;
}
