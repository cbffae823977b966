/*
 * ctrun_agent_end.c - the actions at the end of the job for this node: the failure report
 * (every node's records from the store, or this node's own) and the error file it copies, the
 * exit barrier (a client's ADD of /ctrun/left, the host's bounded wait), closing every handle,
 * and after the loop the recovery table, report.json and the tidying of empty log folders.
 *
 * Deliberately not here: deciding that the job is over, with which exit status, and when the
 * barrier is passed (ctrun_agent_step.c: EXITING and DONE are entered there).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_log.h"
#include "ctrun_agent_internal.h"

static void ctrun_agent__close_cb(uv_handle_t *h)
{
    (void)h;
}

static void ctrun_agent__store_closed(void *data)
{
    ctrun_agent_t *a = data;
    a->store = NULL;
}

/* Closes every handle (whatever is still alive is killed first); uv_run then returns. */
void ctrun_agent__close(ctrun_agent_t *a)
{
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
    if (a->use_etcd)
        ctrun_agent__etcd_close(a);
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
        ctrun_store_close_gently(a->store, CTRUN_STORE_LINGER_MS, ctrun_agent__store_closed, a);
    }
    ctrun_metrics_close(a);
    for (int i = 0; i < a->nsignals; i++)
        uv_close((uv_handle_t *)&a->signals[i], ctrun_agent__close_cb);
    a->nsignals = 0;
    uv_close((uv_handle_t *)&a->grace_timer, ctrun_agent__close_cb);
    uv_close((uv_handle_t *)&a->rdzv_timer, ctrun_agent__close_cb);
    uv_close((uv_handle_t *)&a->watchdog_timer, ctrun_agent__close_cb);
    uv_close((uv_handle_t *)&a->barrier_timer, ctrun_agent__close_cb);
    uv_close((uv_handle_t *)&a->hb_timer, ctrun_agent__close_cb);
    uv_close((uv_handle_t *)&a->inject_timer, ctrun_agent__close_cb);
    uv_close((uv_handle_t *)&a->restart_timer, ctrun_agent__close_cb);
    ctrun_agent__ftimer_close(a);
}

/* The job is over for this node: nothing of the attempt may fire any more. */
void ctrun_agent__end_timers(ctrun_agent_t *a)
{
    uv_timer_stop(&a->grace_timer);
    uv_timer_stop(&a->rdzv_timer);
    uv_timer_stop(&a->watchdog_timer);
    uv_timer_stop(&a->inject_timer);
    uv_timer_stop(&a->restart_timer);
    a->restart_pending = false;
}

/* How many other nodes the host waits for at the exit barrier: a lost node never comes. */
int ctrun_agent__barrier_target(const ctrun_agent_t *a)
{
    return a->plan.nnodes - 1 - (a->outcome == CTRUN_OUTCOME_LOST ? 1 : 0);
}

/* A client's side of the exit barrier: ADD /ctrun/left (its reply ends the wait). */
int ctrun_agent__barrier_leave(ctrun_agent_t *a)
{
    char key[CTRUN_RDZV_KEY_MAX];
    ctrun_rdzv_key(key, "left");
    return ctrun_kv_add(a->kv, key, 1,
                        CTRUN_TAG(CTRUN_TAG_AGENT, a->attempt, CTRUN_AGENT__KV_LEFT));
}

/* The host's side: waits for the others to leave, but not for ever. */
void ctrun_agent__barrier_wait(ctrun_agent_t *a)
{
    /* The others only have to stop their workers and read the outcome and the failures. */
    uint64_t ms = (uint64_t)((a->cfg->grace_period_s + 30.0) * 1000.0);
    uv_timer_start(&a->barrier_timer, a->barrier_timer.timer_cb, ms, 0);
}

/* Prints the failure report (records from every node when the store has them, else this node's
 * own) and copies the root cause's error file to the launcher's own (TORCHELASTIC_ERROR_FILE). */
void ctrun_agent__report(ctrun_agent_t *a, const char *lines)
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
        char *with_line = NULL;
        /* torchrun's exception line first, as its traceback ends on every node that fails. */
        if (ctrun_report_format(a->entrypoint, shown, nshown, &text) == 0 &&
            asprintf(&with_line, "%s\n%s", CTRUN_REPORT_EXCEPTION_LINE, text) >= 0)
            ctrun_agent__print(a, with_line);
        free(with_line);
        free(text);
        ct_errbuf_t eb = {{0}};
        const ctrun_failure_t *root = &shown[ctrun_report_root(shown, nshown)];
        int rc = ctrun_report_propagate(root, a->cfg->error_file, &eb);
        if (rc == -ENOENT)
            ct_log_debug("no error file defined for parent, to copy child error file (%s)",
                         root->error_file ? root->error_file : "<N/A>");
        else if (rc != 0)
            ct_log_error("%s", eb.msg);
    }
    for (size_t i = 0; i < n; i++)
        ctrun_failure_free(&list[i]);
    free(list);
}

/* Removes the run's empty log folders (all of them when no worker wrote a file). On some
 * filesystems each rmdir costs a journal commit and a discard, milliseconds apiece, so a child
 * does it while ctrun exits: the job's end is not delayed by its own tidying. The child has
 * nothing of the job (every worker is gone, the store and its threads are closed), never writes
 * to the console, and exits without running exit handlers. */
void ctrun_agent__tidy_logs(const ctrun_logs_t *logs)
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
void ctrun_agent__recovery_report(ctrun_agent_t *a)
{
    int attempts = a->attempt + 1;
    if (a->recovery.n > 0) {
        char *text = NULL;
        if (ctrun_recovery_format(&a->recovery, attempts, &text) == 0)
            ctrun_agent__print(a, text);
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
