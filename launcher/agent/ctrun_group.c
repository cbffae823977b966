/*
 * ctrun_group.c - one attempt's local workers, mechanically: the environment and command line
 * of each (ctrun_env.h, ctrun_cmd.h), its output sinks per the --redirects/--tee/filter plan
 * and the attempt's filtered_std{out,err}.log (ctrun_logs.h, ctrun_sink.h), spawning (with the
 * --numa_binding CPUs) and signalling (ctrun_proc.h), and freeing. With --warm_restart, a later
 * attempt's Python worker is forked from its local rank's standby (ctrun_warm.h) and started
 * cold, with a warning, when that fails; each rank's standby is (re)started after its spawn.
 *
 * Deliberately not here: deciding anything. Worker states change only in the agent's transition
 * function; the proc callbacks below just forward to it.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_log.h"
#include "ctrun_agent_internal.h"
#include "ctrun_cmd.h"
#include "ctrun_env.h"
#include "ctrun_info.h"
#include "ctrun_signal.h"

static void ctrun_group__on_exit(ctrun_proc_t *p, int exitcode, void *data)
{
    ctrun_worker_t *w = data;
    (void)p;
    ctrun_agent__worker_exit(w->agent, w->local_rank, exitcode);
}

static void ctrun_group__on_heartbeat(ctrun_proc_t *p, const ct_heartbeat_record_t *rec, void *data)
{
    ctrun_worker_t *w = data;
    (void)p;
    ctrun_agent__worker_heartbeat(w->agent, w->local_rank, rec);
}

static void ctrun_group__on_done(ctrun_proc_t *p, void *data)
{
    ctrun_worker_t *w = data;
    (void)p;
    ctrun_agent__worker_gone(w->agent, w->local_rank);
}

static const ctrun_proc_callbacks_t ctrun_group__proc_cb = {
    .on_exit = ctrun_group__on_exit,
    .on_heartbeat = ctrun_group__on_heartbeat,
    .on_done = ctrun_group__on_done,
};

int ctrun_group_prepare(ctrun_agent_t *a, ct_errbuf_t *eb)
{
    int n = a->plan.local_world_size;
    a->workers = calloc((size_t)n, sizeof *a->workers);
    if (a->workers == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for %d workers", n);
    a->nworkers = n;
    a->nrunning = a->ngone = 0;
    /* A fresh cgroup folder for this attempt's workers (ctrun_cgroup.h says why). */
    int crc = ctrun_cgroup_attempt(&a->cgroup);
    if (crc != 0)
        ct_log_debug("no cgroup folder for this attempt (%s); workers join the job's folder",
                     strerror(-crc));
    for (int i = 0; i < n; i++) {
        ctrun_worker_t *w = &a->workers[i];
        w->agent = a;
        w->local_rank = i;
        w->rank = a->plan.rank_base + i;
        w->fault_spec = -1;
        w->armed = ctrun_inject_arm(&a->inject, w->rank, a->plan.world_size, w->fault_text,
                                    sizeof w->fault_text);
        if (w->armed >= 0)
            ct_log_warn("fault injection: spec %d (%s) armed for rank %d as CTRUN_INJECT=%s",
                        w->armed + 1, a->inject.specs[w->armed].text, w->rank, w->fault_text);
        w->state = CTRUN_WORKER_IDLE;
        w->out_file = w->err_file = -1;
        ctrun_logs_path(&a->logs, a->plan.restarts, i, CTRUN_LOG_ERROR, w->error_file,
                        sizeof w->error_file);
    }
    int rc = ctrun_logs_attempt_prepare(&a->logs, a->plan.restarts, n, eb);
    /* --duplicate_std{out,err}_filters: one file per stream for the attempt's tee'd lines. */
    for (int k = 0; k < 2 && rc == 0; k++) {
        if (a->cfg->dup_filters[k].count > 0 && !a->logs.disabled)
            rc = ctrun_logs_filtered_open(&a->logs, a->plan.restarts, (ctrun_stream_t)k,
                                          &a->filtered_fd[k], eb);
    }
    return rc;
}

static void ctrun_group__worker_info(const ctrun_agent_t *a, const ctrun_worker_t *w,
                                     ctrun_worker_info_t *wi)
{
    ctrun_worker_info_init(wi, a->cfg);
    wi->local_rank = w->local_rank;
    wi->rank = w->rank;
    wi->group_rank = a->plan.group_rank;
    wi->role_rank = w->rank;
    wi->local_world_size = a->plan.local_world_size;
    wi->world_size = a->plan.world_size;
    wi->group_world_size = a->plan.nnodes;
    wi->role_world_size = a->plan.world_size;
    wi->master_addr = a->master_addr;
    wi->master_port = a->master_port;
    wi->restart_count = a->plan.restarts;
    wi->max_restarts = a->plan.max_restarts;
    wi->error_file = w->error_file;
    wi->heartbeat_fd = CTRUN_PROC_HEARTBEAT_FD;
    wi->fault = w->armed >= 0 ? w->fault_text : NULL;
    wi->job_tag = a->job_tag;
    wi->timer_file = a->ftimer_path;
    if (a->cfg->virtual_local_rank) {
        wi->device = a->cfg->virtual_devices[w->local_rank];
        wi->device_hip = a->cfg->virtual_hip;
    }
}

/* The sink of one stream, or NULL when the stream is discarded. */
static int ctrun_group__sink(ctrun_agent_t *a, ctrun_worker_t *w, ctrun_stream_t stream,
                             ctrun_sink_t **out, ct_errbuf_t *eb)
{
    const ctrun_config_t *cfg = a->cfg;
    *out = NULL;
    ctrun_stream_plan_t plan = ctrun_logs_plan(&cfg->redirects, &cfg->tee, &cfg->local_ranks_filter,
                                               !a->logs.disabled, w->local_rank, stream);
    if (!plan.to_file && !plan.to_console)
        return 0;
    bool is_out = stream == CTRUN_STREAM_STDOUT;
    int *file = is_out ? &w->out_file : &w->err_file;
    int rc;
    if (plan.to_file &&
        (rc = ctrun_logs_open(&a->logs, a->plan.restarts, w->local_rank, stream, file, eb)) != 0)
        return rc;
    char *prefix = NULL;
    if (plan.prefixed && ctrun_logs_prefix(a->prefix_template, cfg->role, w->rank, w->local_rank,
                                           a->plan.group_rank, a->plan.restarts, &prefix) != 0)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    ctrun_sink_t *sink = is_out ? &w->out_sink : &w->err_sink;
    int console = plan.to_console ? (is_out ? STDOUT_FILENO : STDERR_FILENO) : -1;
    rc = ctrun_sink_init(sink, console, *file, prefix, 0);
    if (rc == 0 && a->console != NULL)
        ctrun_sink_use_console(sink, a->console);
    if (rc == 0 && plan.prefixed)
        ctrun_sink_duplicate(sink, a->filtered_fd[stream], &cfg->dup_filters[stream]);
    free(prefix);
    if (rc != 0)
        return ct_errbuf_set(eb, rc, "out of memory");
    if (is_out)
        w->out_sink_used = true;
    else
        w->err_sink_used = true;
    *out = sink;
    return 0;
}

static void ctrun_group__release_outputs(ctrun_worker_t *w)
{
    if (w->out_sink_used)
        ctrun_sink_close(&w->out_sink);
    if (w->err_sink_used)
        ctrun_sink_close(&w->err_sink);
    w->out_sink_used = w->err_sink_used = false;
    if (w->out_file >= 0)
        close(w->out_file);
    if (w->err_file >= 0)
        close(w->err_file);
    w->out_file = w->err_file = -1;
}

/* --warm_restart: ctrun_proc's start function, forking worker i from its standby. */
typedef struct ctrun_group__warm_ctx {
    ctrun_agent_t *a;
    int i;
    ctrun_warm_req_t req;
} ctrun_group__warm_ctx_t;

static int ctrun_group__warm_start(void *data, int out_fd, int err_fd, int hb_fd, pid_t *pid,
                                   ct_errbuf_t *eb)
{
    ctrun_group__warm_ctx_t *c = data;
    c->req.out_fd = out_fd;
    c->req.err_fd = err_fd;
    c->req.hb_fd = hb_fd;
    return ctrun_warm_fork(&c->a->warm, c->i, &c->req, pid, eb);
}

/* Starts worker i from its standby when this is a later attempt and one is alive; false when
 * it started cold (or must: the caller then does), with the reason logged once. */
static bool ctrun_group__spawn_warm(ctrun_agent_t *a, int i, char **argv, char **envp,
                                    ctrun_sink_t *out, ctrun_sink_t *err)
{
    ctrun_worker_t *w = &a->workers[i];
    const ctrun_config_t *cfg = a->cfg;
    if (!a->warm.on || a->attempt == 0 || i >= a->warm.n)
        return false;
    if (!ctrun_warm_alive(&a->warm, i)) {
        ct_log_warn("--warm_restart: local rank %d has no standby (it exited); starting it cold",
                    i);
        return false;
    }
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd) == NULL) {
        ct_log_warn("--warm_restart: getcwd: %s; starting local rank %d cold", strerror(errno), i);
        return false;
    }
    /* argv is `<python> -u [-m] target args...` (ctrun_cmd.h). */
    bool module = cfg->module && !cfg->run_path;
    size_t head = module ? 3 : 2;
    ctrun_group__warm_ctx_t c = {
        .a = a,
        .i = i,
        .req =
            {
                .cwd = cwd,
                .module = module,
                .target = argv[head],
                .args = &argv[head + 1],
                .envp = envp,
                .cgroup_fd = a->cgroup.attempt_procs_fd >= 0 ? a->cgroup.attempt_procs_fd
                                                             : a->cgroup.procs_fd,
                .cpus = cfg->numa_cpus ? cfg->numa_cpus[i].cpus : NULL,
                .ncpus = cfg->numa_cpus ? cfg->numa_cpus[i].count : 0,
            },
    };
    ctrun_proc_opts_t po = {
        .out = out,
        .err = err,
        .heartbeat = true,
        .start = ctrun_group__warm_start,
        .start_data = &c,
    };
    ct_errbuf_t web = {{0}};
    uint64_t t0 = uv_hrtime();
    if (ctrun_proc_spawn(&w->proc, &a->loop, &po, &ctrun_group__proc_cb, w, &web) != 0) {
        if (!w->proc.done) {
            /* Forked, then could not be watched (and was killed): its handles are closing. */
            ct_log_warn("--warm_restart: local rank %d: %s", i, web.msg);
            return true;
        }
        ct_log_warn("--warm_restart: local rank %d: %s; starting it cold", i, web.msg);
        memset(&w->proc, 0, sizeof w->proc);
        w->proc.pid = -1;
        return false;
    }
    w->warm = true;
    ct_log_info("local rank %d: worker %d forked from standby %d in %.1f ms", i, (int)w->proc.pid,
                (int)a->warm.sb[i].pid, (double)(uv_hrtime() - t0) / 1e6);
    return true;
}

int ctrun_group_spawn(ctrun_agent_t *a, int i, ct_errbuf_t *eb)
{
    ctrun_worker_t *w = &a->workers[i];
    ctrun_worker_info_t wi;
    ctrun_group__worker_info(a, w, &wi);
    char **argv = NULL, **envp = NULL;
    ctrun_sink_t *out = NULL, *err = NULL;
    int rc = ctrun_cmd_argv(a->cfg, i, &argv);
    if (rc == 0)
        rc = ctrun_env_build(NULL, &wi, &envp);
    if (rc != 0) {
        ct_errbuf_set(eb, rc, "out of memory");
        goto out;
    }
    if ((rc = ctrun_group__sink(a, w, CTRUN_STREAM_STDOUT, &out, eb)) != 0 ||
        (rc = ctrun_group__sink(a, w, CTRUN_STREAM_STDERR, &err, eb)) != 0)
        goto out;
    if (ctrun_group__spawn_warm(a, i, argv, envp, out, err)) {
        rc = w->proc.done ? CT_ESPAWN : 0;
        if (rc != 0)
            ct_errbuf_set(eb, rc, "the worker forked from the standby could not be watched");
        goto started;
    }
    ctrun_proc_opts_t po = {
        .file = argv[0],
        .argv = argv,
        .envp = envp,
        .out = out,
        .err = err,
        .heartbeat = true,
        .cgroup_dir_fd = a->cgroup.attempt_dir_fd,
        .cgroup_fd =
            a->cgroup.attempt_procs_fd >= 0 ? a->cgroup.attempt_procs_fd : a->cgroup.procs_fd,
        .cpus = a->cfg->numa_cpus ? a->cfg->numa_cpus[i].cpus : NULL,
        .ncpus = a->cfg->numa_cpus ? a->cfg->numa_cpus[i].count : 0,
    };
    rc = ctrun_proc_spawn(&w->proc, &a->loop, &po, &ctrun_group__proc_cb, w, eb);
started:
    if (w->proc.pid > 0)
        ctrun_reaper_track(&a->reaper, w->proc.pid);
    /* --warm_restart: this rank's standby for the next attempt, if it has none. */
    if (a->warm.on && i < a->warm.n && !ctrun_warm_alive(&a->warm, i)) {
        ct_errbuf_t seb = {{0}};
        if (ctrun_warm_start(&a->warm, i, envp, &seb) != 0)
            ct_log_warn("--warm_restart: no standby for local rank %d: %s", i, seb.msg);
    }
out:
    ctrun_argv_free(argv);
    ctrun_argv_free(envp);
    if (rc != 0 && (w->proc.done || w->proc.pid <= 0))
        ctrun_group__release_outputs(w);
    return rc;
}

void ctrun_group_signal(ctrun_agent_t *a, int i, int sig)
{
    ctrun_worker_t *w = &a->workers[i];
    if (w->proc.pid <= 0 || w->state == CTRUN_WORKER_IDLE)
        return;
    if (sig != SIGKILL && (w->state == CTRUN_WORKER_RUNNING || w->state == CTRUN_WORKER_STOPPING)) {
        char name[32];
        ctrun_signal_name(sig, name, sizeof name);
        ct_log_warn("Sending process %d closing signal %s", (int)w->proc.pid, name);
    }
    ctrun_proc_signal(&w->proc, sig);
}

void ctrun_group_kill(ctrun_agent_t *a)
{
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

void ctrun_group_free(ctrun_agent_t *a)
{
    ctrun_agent__observe_free(a);
    for (int i = 0; i < a->nworkers; i++) {
        ctrun_worker_t *w = &a->workers[i];
        /* The worker is gone; what it started and left in its process group (a dataloader, a
         * shell's children) goes with it, also when it exited 0. */
        if (w->proc.pid > 0) {
            killpg(w->proc.pid, SIGKILL);
            ctrun_reaper_untrack(&a->reaper, w->proc.pid);
        }
        ctrun_group__release_outputs(w);
    }
    free(a->workers);
    a->workers = NULL;
    a->nworkers = 0;
    for (int k = 0; k < 2; k++) {
        if (a->filtered_fd[k] >= 0)
            close(a->filtered_fd[k]);
        a->filtered_fd[k] = -1;
    }
    for (size_t i = 0; i < a->nfailures; i++)
        ctrun_failure_free(&a->failures[i]);
    free(a->failures);
    a->failures = NULL;
    a->nfailures = 0;
}

void ctrun_group_log_rendezvous(ctrun_agent_t *a)
{
    if (CT_LOG_INFO < ct_log__threshold || a->nworkers == 0)
        return;
    ctrun_worker_info_t *wi = calloc((size_t)a->nworkers, sizeof *wi);
    char *text = NULL;
    if (wi == NULL)
        return;
    for (int i = 0; i < a->nworkers; i++)
        ctrun_group__worker_info(a, &a->workers[i], &wi[i]);
    if (ctrun_info_rendezvous(wi, (size_t)a->nworkers, &text) == 0)
        ct_log_info("%s", text);
    free(text);
    free(wi);
}
