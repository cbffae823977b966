/*
 * ctrun_agent.c - ctrun_agent_run: sets the agent up (console queue, timers, signal handlers,
 * job cgroup and its reaper, log folder, the store - hosted or reached as a client - the kv, the
 * rendezvous and, on the host, its coordinator; with etcd-v3 none of the store's parts), hands the
 * result to the transition function as the START event, runs the loop until the job is over, and
 * tears down. Also this node's name, printing through the console queue, and what a node can say
 * about a rendezvous that timed out.
 *
 * Deliberately not here: the states and what moves them (ctrun_agent_step.c), the job's end
 * (ctrun_agent_end.c), heartbeats (ctrun_agent_hb.c), fault injection (ctrun_agent_inject.c).
 */
#include "ctrun_agent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_log.h"
#include "ct_time.h"
#include "ctrun_agent_internal.h"
#include "ctrun_cmd.h"
#include "ctrun_env.h"
#include "ctrun_info.h"

/* This node's name for reports and the rendezvous, looked up on first use: the lookup reads the
 * resolver's files, which a one-node job that never fails does not need to pay for. */
const char *ctrun_agent__host(ctrun_agent_t *a)
{
    if (a->host[0] == '\0')
        ctrun_host_fqdn(a->host, sizeof a->host);
    return a->host;
}

/* A block of text (a report) for ctrun's stderr, through the console queue. */
void ctrun_agent__print(ctrun_agent_t *a, const char *text)
{
    if (a->console != NULL) {
        struct iovec iov = {.iov_base = (void *)text, .iov_len = strlen(text)};
        ctrun_console_write(a->console, STDERR_FILENO, &iov, 1, CTRUN_CONSOLE_OWN);
        return;
    }
    fputs(text, stderr);
    fflush(stderr);
}

/* ---- rendezvous ------------------------------------------------------------------------------ */

double ctrun_agent__rdzv_timeout_s(const ctrun_agent_t *a)
{
    return a->rdzv_kind == CTRUN_RDZV_KIND_STATIC ? a->cfg->rdzv_conf.timeout_s
                                                  : a->cfg->rdzv_conf.join_timeout_s;
}

/* Why the rendezvous of the attempt timed out, as far as this node can tell. */
void ctrun_agent__log_rdzv_timeout(ctrun_agent_t *a)
{
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
        ct_log_error("rendezvous of attempt %d timed out after %g s: %s %d nodes joined "
                     "(store %s:%d; see --rdzv_conf %s=SECONDS)",
                     a->attempt, ctrun_agent__rdzv_timeout_s(a),
                     a->rdzv_kind == CTRUN_RDZV_KIND_STATIC ||
                             a->cfg->min_nodes == a->cfg->max_nodes
                         ? "not all"
                         : "fewer than",
                     a->rdzv_kind == CTRUN_RDZV_KIND_STATIC ? a->cfg->max_nodes : a->cfg->min_nodes,
                     a->master_addr, a->master_port,
                     a->rdzv_kind == CTRUN_RDZV_KIND_STATIC ? "timeout" : "join_timeout");
}

/* ---- set-up ---------------------------------------------------------------------------------- */

/* c10d: does the endpoint name this machine? (torchrun's is_host inference: loopback,
 * localhost, this host's names, --local_addr, or an address of one of its interfaces.) */
static bool ctrun_agent__endpoint_is_local(const ctrun_config_t *cfg, const char *fqdn)
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

static int ctrun_agent__setup_store(ctrun_agent_t *a, ct_errbuf_t *eb)
{
    const ctrun_config_t *cfg = a->cfg;
    snprintf(a->master_addr, sizeof a->master_addr, "%s", cfg->store_addr.host);
    a->master_port = cfg->store_addr.port;
    bool want_host, may_fall_back = false;
    if (a->rdzv_kind == CTRUN_RDZV_KIND_STATIC) {
        want_host = cfg->node_rank == 0;
    } else if (cfg->standalone || cfg->free_port) {
        want_host = true;
    } else if (cfg->rdzv_conf.is_host >= 0) {
        want_host = cfg->rdzv_conf.is_host == 1;
    } else {
        want_host = ctrun_agent__endpoint_is_local(cfg, ctrun_agent__host(a));
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
            if (cfg->free_port)
                ct_log_info("single-node job without --master_port or --rdzv_endpoint: the "
                            "rendezvous store is on free port %d (the workers' MASTER_PORT)",
                            a->master_port);
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
        return ctrun_kv_open_local(&a->loop, a->store, ctrun_agent__kv_cb, a, &a->kv, eb);
    double timeout_s = ctrun_agent__rdzv_timeout_s(a);
    ctrun_kv_remote_opts_t ko = {
        .host = cfg->store_addr.host,
        .port = cfg->store_addr.port,
        /* The rendezvous timer owns the attempt's deadline and says why it passed; connecting
         * gives up a second later, so a silent endpoint is reported once, by the timer. */
        .connect_timeout_ms = (int64_t)(timeout_s * 1000.0) + 1000,
        .op_timeout_ms = (int64_t)(cfg->rdzv_conf.read_timeout_s * 1000.0),
        .backoff_max_ms = 1000,
        .token = cfg->rdzv_conf.store_token,
    };
    return ctrun_kv_open_remote(&a->loop, &ko, ctrun_agent__kv_cb, a, &a->kv, eb);
}

static int ctrun_agent__setup(ctrun_agent_t *a, ct_errbuf_t *eb)
{
    const ctrun_config_t *cfg = a->cfg;
    a->rdzv_kind =
        cfg->rdzv_backend == CTRUN_RDZV_STATIC ? CTRUN_RDZV_KIND_STATIC : CTRUN_RDZV_KIND_C10D;
    a->use_etcd = cfg->rdzv_backend == CTRUN_RDZV_ETCD_V3;
    a->entrypoint = ctrun_cmd_entrypoint_name(cfg);
    a->prefix_template = cfg->log_line_prefix_template;

    uv_timer_init(&a->loop, &a->grace_timer);
    uv_timer_init(&a->loop, &a->rdzv_timer);
    uv_timer_init(&a->loop, &a->watchdog_timer);
    uv_timer_init(&a->loop, &a->barrier_timer);
    uv_timer_init(&a->loop, &a->hb_timer);
    a->grace_timer.data = a->rdzv_timer.data = a->watchdog_timer.data = a->barrier_timer.data = a;
    a->hb_timer.data = a;
    a->grace_timer.timer_cb = ctrun_agent__grace_cb;
    a->rdzv_timer.timer_cb = ctrun_agent__rdzv_timer_cb;
    a->barrier_timer.timer_cb = ctrun_agent__barrier_cb;
    uv_timer_t *more[] = {&a->inject_timer, &a->restart_timer};
    uv_timer_cb more_cb[] = {ctrun_agent__inject_cb, ctrun_agent__restart_cb};
    for (int i = 0; i < 2; i++) {
        uv_timer_init(&a->loop, more[i]);
        more[i]->data = a;
        more[i]->timer_cb = more_cb[i];
    }
    a->start_ms = uv_now(&a->loop);
    a->fail_exit = CTRUN_EXIT_FAILED;
    a->cgroup.procs_fd = a->cgroup.attempt_dir_fd = a->cgroup.attempt_procs_fd = -1;
    if (cfg->cgroup) {
        ct_errbuf_t ceb = {{0}};
        if (ctrun_cgroup_create(&a->cgroup, NULL, NULL, &ceb) == 0)
            ct_log_debug("workers run in the cgroup %s", a->cgroup.path);
        else
            ct_log_debug("no job cgroup (%s); process groups only", ceb.msg);
    }
    /* The reaper, before any worker exists: whatever ends the agent, the job goes with it. */
    ct_errbuf_t reb = {{0}};
    if (ctrun_reaper_tag(a->job_tag) != 0)
        a->job_tag[0] = '\0';
    if (ctrun_reaper_start(&a->reaper, a->cgroup.path, a->job_tag, &reb) == 0)
        ct_log_debug("reaper %d watches this agent", (int)a->reaper.pid);
    else
        ct_log_warn("no reaper (%s): if ctrun is killed with SIGKILL, processes its workers "
                    "started may survive it",
                    reb.msg);
    int frc = ctrun_agent__ftimer_setup(a, eb);
    if (frc != 0)
        return frc;
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
        int rc = uv_signal_start(h, ctrun_agent__signal_cb, cfg->signals[i]);
        if (rc != 0)
            return ct_errbuf_set(eb, rc, "cannot handle signal %d: %s", cfg->signals[i],
                                 uv_strerror(rc));
    }

    int rc = ctrun_logs_init(&a->logs, cfg->log_dir, cfg->tmp_dir, cfg->run_id, eb);
    if (rc != 0)
        return rc;
    /* etcd-v3: no store until this node hosts a round's workers' store (ctrun_agent_etcd.c). */
    if (!a->use_etcd && (rc = ctrun_agent__setup_store(a, eb)) != 0)
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
                                  : ctrun_agent__host(a),
        .last_call_ms = (int64_t)(cfg->rdzv_conf.last_call_timeout_s * 1000.0 + 0.5),
        .heartbeat_timeout_ms = multi ? (int64_t)a->hb_timeout_ms : 0,
    };
    if (a->is_host) {
        if ((rc = ctrun_rdzv_coord_init(&a->coord, &a->loop, a->store, &rp, ctrun_agent__left_cb, a,
                                        eb)) != 0)
            return rc;
        a->coord_open = true;
    }
    if (multi && !a->use_etcd) /* etcd: the node's lease is its heartbeat */
        uv_timer_start(&a->hb_timer, ctrun_agent__hb_cb, a->hb_interval_ms / 4 + 1,
                       a->hb_interval_ms);
    ctrun_rdzv_init(&a->rdzv, a->kv, &rp);
    a->plan.nnodes = cfg->max_nodes;
    if (cfg->metrics_port >= 0 && (rc = ctrun_metrics_start(a, eb)) != 0)
        return rc;
    return 0;
}

/* ct_log lines of every thread of the agent go through the console queue. */
static void ctrun_agent__log_output(const char *line, size_t nbytes, void *arg)
{
    struct iovec iov = {.iov_base = (void *)line, .iov_len = nbytes};
    ctrun_console_write(arg, STDERR_FILENO, &iov, 1, CTRUN_CONSOLE_OWN);
}

/* How long the end of the job waits for a console reader that takes nothing: the job is over,
 * so ctrun waits as long as the reader makes progress, but not for one that never reads. */
#define CTRUN_AGENT__CONSOLE_EXIT_STALL_MS 10000

static void ctrun_agent__walk_close(uv_handle_t *h, void *arg)
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
    a->reaper.pid = a->reaper.fd = -1;
    a->ftimer_fd = a->ftimer_wfd = -1;
    a->filtered_fd[0] = a->filtered_fd[1] = -1;
    a->ev_group_rank = a->ev_group_world = -1;
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
        ct_log_set_output(ctrun_agent__log_output, a->console);

    if (ctrun_env_omp_notice_needed(NULL, cfg->nproc_per_node))
        ct_log_warn("\n%s", ctrun_env_omp_notice());
    if (CT_LOG_INFO >= ct_log__threshold) {
        char *text = NULL;
        if (ctrun_info_launch_config(cfg, &text) == 0)
            ct_log_info("%s", text);
        free(text);
        if (cfg->use_python)
            ct_log_info("worker interpreter: %s (%s)", cfg->python,
                        ctrun_python_source_text(cfg->python_source));
        for (int i = 0; cfg->numa_cpus != NULL && i < cfg->nproc_per_node; i++) {
            char list[512];
            ctrun_cpu_list_format(&cfg->numa_cpus[i], list, sizeof list);
            ct_log_info("--numa_binding %s: local rank %d runs on CPUs %s",
                        ctrun_numa_mode_name(cfg->numa_mode), i, list);
        }
    }

    ct_errbuf_t seb = {{0}};
    rc = ctrun_agent__setup(a, &seb);
    if (rc != 0)
        ct_log_error("%s", seb.msg);
    else if (a->logs.run_dir != NULL)
        ct_log_info("log directory set to: %s", a->logs.run_dir);
    /* A failed set-up is DONE at once (the transition function says so). */
    ctrun_agent__event_t ev = {.kind = CTRUN_AGENT__EV_START, .value = rc};
    ctrun_agent__step(a, &ev);
    uv_run(&a->loop, UV_RUN_DEFAULT);
    /* Everything was closed on the way to DONE; anything left is a bug worth not hanging on. */
    uv_walk(&a->loop, ctrun_agent__walk_close, NULL);
    uv_run(&a->loop, UV_RUN_DEFAULT);
    uv_loop_close(&a->loop);
    ctrun_group_free(a);
    ctrun_agent__observe_end(a);
    free(a->last);
    ctrun_cgroup_destroy(&a->cgroup, 2000);
    ctrun_reaper_close(&a->reaper);
    ctrun_agent__ftimer_cleanup(a);
    ctrun_agent__recovery_report(a);
    ctrun_recovery_free(&a->recovery);
    ctrun_inject_free(&a->inject);
    free(a->inject_in_attempt);
    ctrun_agent__tidy_logs(&a->logs);
    ctrun_logs_close(&a->logs);
    /* Every other thread is gone (the store's and the kv helpers'): logging goes direct again. */
    ct_log_set_output(NULL, NULL);
    ctrun_console_destroy(a->console, CTRUN_AGENT__CONSOLE_EXIT_STALL_MS);
    *exit_code = a->exit_code;
    free(a);
    return 0;
}
