/*
 * ctrun_metrics.c - the metrics endpoint (--metrics_port): GET /metrics in the Prometheus text
 * exposition format (version 0.0.4) and GET /healthz, served from the agent's own libuv loop.
 *
 * HTTP is libmicrohttpd's, run without a thread of its own: MHD_USE_EPOLL gives one epoll
 * descriptor, which a uv_poll_t watches; when it is readable, or when MHD's timeout (a
 * uv_timer_t) fires, the loop calls MHD_run, which accepts, reads, answers and closes without
 * blocking. The answer is built from the agent's state in the access callback, on the loop, so
 * nothing is shared with another thread. Bounds, so that slow or malformed clients cannot stall
 * the agent or grow its memory: at most CTRUN_METRICS__MAX_CONNECTIONS connections (more are
 * closed at accept), CTRUN_METRICS__MEMORY bytes per connection for the request line and headers
 * (larger requests get 431 or a closed connection), CTRUN_METRICS__TIMEOUT_S seconds of
 * inactivity before a connection is closed, and no request body is read.
 *
 * Deliberately not here: keeping the numbers (ctrun_agent_observe.c, the heartbeat and store
 * code), deciding anything; the endpoint only reads the agent's state.
 */
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "ct_log.h"
#include "ctrun_agent_internal.h"

#define CTRUN_METRICS__MAX_CONNECTIONS 16
#define CTRUN_METRICS__MEMORY          (16 * 1024)
#define CTRUN_METRICS__TIMEOUT_S       5

struct ctrun_metrics {
    struct MHD_Daemon *daemon;
    uv_poll_t poll;
    uv_timer_t timer;
    int open_handles; /* poll and timer not yet closed */
    int port;
};

static const char *const ctrun_metrics__agent_states[] = {
    [CTRUN_AGENT_INIT] = "init",         [CTRUN_AGENT_RENDEZVOUS] = "rendezvous",
    [CTRUN_AGENT_RUNNING] = "running",   [CTRUN_AGENT_SUCCEEDED] = "succeeded",
    [CTRUN_AGENT_STOPPING] = "stopping", [CTRUN_AGENT_EXITING] = "exiting",
    [CTRUN_AGENT_DONE] = "done",
};
#define CTRUN_METRICS__NSTATES (sizeof ctrun_metrics__agent_states / sizeof(char *))

static const char *const ctrun_metrics__worker_states[] = {
    [CTRUN_WORKER_IDLE] = "idle",         [CTRUN_WORKER_RUNNING] = "running",
    [CTRUN_WORKER_STOPPING] = "stopping", [CTRUN_WORKER_EXITED] = "exited",
    [CTRUN_WORKER_GONE] = "gone",
};
#define CTRUN_METRICS__NWSTATES (sizeof ctrun_metrics__worker_states / sizeof(char *))

static void ctrun_metrics__head(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

int ctrun_metrics_format(ctrun_agent_t *a, char **out)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        return -ENOMEM;
    uint64_t now_ms = uv_now(&a->loop);

    ctrun_metrics__head(f, "ctrun_job_state", "gauge",
                        "1 for the agent's current state, 0 for the others");
    for (size_t s = 0; s < CTRUN_METRICS__NSTATES; s++)
        fprintf(f, "ctrun_job_state{state=\"%s\"} %d\n", ctrun_metrics__agent_states[s],
                (size_t)a->state == s);
    ctrun_metrics__head(f, "ctrun_attempt", "gauge",
                        "The current attempt (rendezvous round) of the workers");
    fprintf(f, "ctrun_attempt %d\n", a->attempt);
    ctrun_metrics__head(f, "ctrun_restart_count", "gauge",
                        "Restarts used so far (TORCHELASTIC_RESTART_COUNT of the workers)");
    fprintf(f, "ctrun_restart_count %d\n", a->plan.restarts);
    ctrun_metrics__head(f, "ctrun_max_restarts", "gauge", "Restarts the job may use");
    fprintf(f, "ctrun_max_restarts %d\n", a->cfg->max_restarts);
    int total = 0;
    for (int c = 0; c < CTRUN_AGENT__CAUSES; c++)
        total += a->restart_causes[c];
    ctrun_metrics__head(f, "ctrun_restarts_total", "counter",
                        "New rendezvous rounds after the first, whatever their cause");
    fprintf(f, "ctrun_restarts_total %d\n", total);
    ctrun_metrics__head(f, "ctrun_restarts_by_cause_total", "counter",
                        "New rendezvous rounds by cause: a local worker's exit status, a signal, "
                        "a hang, a timer, a lost node, a failure on another node, a joining node");
    for (int c = 0; c < CTRUN_AGENT__CAUSES; c++)
        fprintf(f, "ctrun_restarts_by_cause_total{cause=\"%s\"} %d\n", ctrun_agent__cause_names[c],
                a->restart_causes[c]);

    int by_state[CTRUN_METRICS__NWSTATES] = {0};
    for (int i = 0; i < a->nworkers; i++) {
        if ((size_t)a->workers[i].state < CTRUN_METRICS__NWSTATES)
            by_state[a->workers[i].state]++;
    }
    ctrun_metrics__head(f, "ctrun_workers", "gauge", "This node's workers of the attempt by state");
    for (size_t s = 0; s < CTRUN_METRICS__NWSTATES; s++)
        fprintf(f, "ctrun_workers{state=\"%s\"} %d\n", ctrun_metrics__worker_states[s],
                by_state[s]);

    /* Per rank: only workers that sent heartbeats (libctworker's, or the test worker's). */
    ctrun_metrics__head(f, "ctrun_worker_last_step", "gauge",
                        "The last step a worker reported in a heartbeat");
    for (int i = 0; i < a->nworkers; i++) {
        const ctrun_worker_t *w = &a->workers[i];
        if (w->hb_count > 0)
            fprintf(f, "ctrun_worker_last_step{rank=\"%d\",local_rank=\"%d\"} %llu\n", w->rank,
                    w->local_rank, (unsigned long long)w->hb_step);
    }
    ctrun_metrics__head(f, "ctrun_worker_heartbeat_age_seconds", "gauge",
                        "Seconds since a worker's last heartbeat");
    for (int i = 0; i < a->nworkers; i++) {
        const ctrun_worker_t *w = &a->workers[i];
        if (w->hb_count > 0)
            fprintf(f, "ctrun_worker_heartbeat_age_seconds{rank=\"%d\",local_rank=\"%d\"} %.3f\n",
                    w->rank, w->local_rank,
                    now_ms > w->hb_last_ms ? (double)(now_ms - w->hb_last_ms) / 1000.0 : 0.0);
    }
    ctrun_metrics__head(f, "ctrun_worker_steps_per_second", "gauge",
                        "A worker's steps per second, measured over at least one second of "
                        "heartbeats");
    for (int i = 0; i < a->nworkers; i++) {
        const ctrun_worker_t *w = &a->workers[i];
        if (w->hb_count > 1 && w->steps_per_s >= 0)
            fprintf(f, "ctrun_worker_steps_per_second{rank=\"%d\",local_rank=\"%d\"} %.6g\n",
                    w->rank, w->local_rank, w->steps_per_s);
    }

    ctrun_metrics__head(f, "ctrun_failure_detection_latency_seconds", "histogram",
                        "Time from a local worker's failure (its death, or its last heartbeat "
                        "for a hang) to the agent noticing it");
    uint64_t cum = 0;
    for (int b = 0; b <= CTRUN_AGENT__DETECT_BUCKETS; b++) {
        cum += a->detect_count[b];
        if (b < CTRUN_AGENT__DETECT_BUCKETS)
            fprintf(f, "ctrun_failure_detection_latency_seconds_bucket{le=\"%g\"} %llu\n",
                    ctrun_agent__detect_bounds[b], (unsigned long long)cum);
        else
            fprintf(f, "ctrun_failure_detection_latency_seconds_bucket{le=\"+Inf\"} %llu\n",
                    (unsigned long long)cum);
    }
    fprintf(f, "ctrun_failure_detection_latency_seconds_sum %.9f\n", a->detect_sum_s);
    fprintf(f, "ctrun_failure_detection_latency_seconds_count %llu\n", (unsigned long long)cum);

    ctrun_metrics__head(f, "ctrun_rendezvous_round", "gauge",
                        "The last rendezvous round this node was in");
    fprintf(f, "ctrun_rendezvous_round %d\n", a->plan.attempt);
    ctrun_metrics__head(f, "ctrun_rendezvous_nodes", "gauge", "Nodes in that round");
    fprintf(f, "ctrun_rendezvous_nodes %d\n", a->plan.nnodes);
    ctrun_metrics__head(f, "ctrun_store_host", "gauge", "1 when this node hosts the store");
    fprintf(f, "ctrun_store_host %d\n", a->is_host && a->store != NULL);
    if (a->is_host && a->store != NULL) {
        ctrun_store_stats_t st;
        ctrun_store_stats(a->store, &st);
        ctrun_metrics__head(f, "ctrun_store_connections", "gauge", "Open store connections");
        fprintf(f, "ctrun_store_connections %llu\n", (unsigned long long)st.connections);
        ctrun_metrics__head(f, "ctrun_store_keys", "gauge", "Keys in the store");
        fprintf(f, "ctrun_store_keys %llu\n", (unsigned long long)st.keys);
        ctrun_metrics__head(f, "ctrun_store_operations_total", "counter",
                            "Store requests of network clients handled (other nodes' agents, "
                            "workers; the agent's own in-process operations are not counted)");
        fprintf(f, "ctrun_store_operations_total %llu\n", (unsigned long long)st.requests);
        ctrun_metrics__head(f, "ctrun_store_connections_accepted_total", "counter",
                            "Store connections accepted");
        fprintf(f, "ctrun_store_connections_accepted_total %llu\n",
                (unsigned long long)st.accepted);
        ctrun_metrics__head(f, "ctrun_store_stored_bytes", "gauge",
                            "Bytes of keys, values and queued items in the store");
        fprintf(f, "ctrun_store_stored_bytes %llu\n", (unsigned long long)st.stored_bytes);
    }
    ctrun_metrics__head(f, "ctrun_uptime_seconds", "gauge", "Seconds since ctrun started");
    fprintf(f, "ctrun_uptime_seconds %.3f\n",
            now_ms > a->start_ms ? (double)(now_ms - a->start_ms) / 1000.0 : 0.0);
    if (fclose(f) != 0) {
        free(text);
        return -ENOMEM;
    }
    *out = text;
    return 0;
}

static enum MHD_Result ctrun_metrics__reply(struct MHD_Connection *c, unsigned int status,
                                            const char *type, char *body, size_t len)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (r == NULL) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result ctrun_metrics__access(void *cls, struct MHD_Connection *c, const char *url,
                                             const char *method, const char *version,
                                             const char *upload_data, size_t *upload_size,
                                             void **req_cls)
{
    (void)version;
    (void)upload_data;
    ctrun_agent_t *a = cls;
    if (*req_cls == NULL) { /* headers only so far: answer once they are complete */
        *req_cls = a;
        return MHD_YES;
    }
    if (*upload_size != 0)
        return MHD_NO; /* no request carries a body here */
    const char *text_type = "text/plain; charset=utf-8";
    bool get = strcmp(method, MHD_HTTP_METHOD_GET) == 0;
    if (!get && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
        char *body = strdup("only GET and HEAD\n");
        return body ? ctrun_metrics__reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, text_type, body,
                                           strlen(body))
                    : MHD_NO;
    }
    if (strcmp(url, "/metrics") == 0) {
        char *body = NULL;
        if (ctrun_metrics_format(a, &body) != 0)
            return MHD_NO;
        return ctrun_metrics__reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8",
                                    body, strlen(body));
    }
    if (strcmp(url, "/healthz") == 0) {
        /* Healthy while the agent runs the job; 503 once it is ending. */
        bool ending = a->state == CTRUN_AGENT_EXITING || a->state == CTRUN_AGENT_DONE;
        char *body = strdup(ending ? "ending\n" : "ok\n");
        return body ? ctrun_metrics__reply(c, ending ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK,
                                           text_type, body, strlen(body))
                    : MHD_NO;
    }
    char *body = strdup("not found: try /metrics or /healthz\n");
    return body ? ctrun_metrics__reply(c, MHD_HTTP_NOT_FOUND, text_type, body, strlen(body))
                : MHD_NO;
}

/* MHD's next deadline (a connection's inactivity timeout) as a one-shot timer; none when it has
 * no connection. */
static void ctrun_metrics__timer_cb(uv_timer_t *t);

static void ctrun_metrics__rearm(struct ctrun_metrics *m)
{
    MHD_UNSIGNED_LONG_LONG ms = 0;
    uv_timer_stop(&m->timer);
    if (MHD_get_timeout(m->daemon, &ms) == MHD_YES)
        uv_timer_start(&m->timer, ctrun_metrics__timer_cb, (uint64_t)ms, 0);
}

/* One round of MHD's work. At the connection limit MHD stops watching the listening socket and
 * takes it back at the start of its next round; a round that closed connections is therefore
 * followed by another, or connections waiting in the backlog would wait for an unrelated event. */
static void ctrun_metrics__run(struct ctrun_metrics *m)
{
    const union MHD_DaemonInfo *before =
        MHD_get_daemon_info(m->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    unsigned int n0 = before ? before->num_connections : 0;
    MHD_run(m->daemon);
    const union MHD_DaemonInfo *after =
        MHD_get_daemon_info(m->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    if (after != NULL && after->num_connections < n0)
        MHD_run(m->daemon);
    ctrun_metrics__rearm(m);
}

static void ctrun_metrics__timer_cb(uv_timer_t *t)
{
    ctrun_metrics__run(t->data);
}

static void ctrun_metrics__poll_cb(uv_poll_t *p, int status, int events)
{
    (void)status;
    (void)events;
    ctrun_metrics__run(p->data);
}

/* The address to listen on: the first result of getaddrinfo for cfg->metrics_addr. */
static int ctrun_metrics__resolve(const char *host, int port, struct sockaddr_storage *ss,
                                  ct_errbuf_t *eb)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    int rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0)
        return ct_errbuf_set(eb, -EINVAL, "--metrics_addr %s: %s", host, gai_strerror(rc));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

int ctrun_metrics_start(ctrun_agent_t *a, ct_errbuf_t *eb)
{
    const ctrun_config_t *cfg = a->cfg;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    int rc = ctrun_metrics__resolve(cfg->metrics_addr, cfg->metrics_port, &ss, eb);
    if (rc != 0)
        return rc;
    struct ctrun_metrics *m = calloc(1, sizeof *m);
    if (m == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    unsigned int flags = MHD_USE_EPOLL | (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    m->daemon = MHD_start_daemon(
        flags, (uint16_t)cfg->metrics_port, NULL, NULL, ctrun_metrics__access, a,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned int)CTRUN_METRICS__MAX_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned int)CTRUN_METRICS__TIMEOUT_S, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)CTRUN_METRICS__MEMORY, MHD_OPTION_END);
    if (m->daemon == NULL) {
        free(m);
        return ct_errbuf_set(eb, -EADDRINUSE,
                             "cannot serve metrics on %s port %d (in use, or not an address of "
                             "this machine)",
                             cfg->metrics_addr, cfg->metrics_port);
    }
    const union MHD_DaemonInfo *epfd = MHD_get_daemon_info(m->daemon, MHD_DAEMON_INFO_EPOLL_FD);
    const union MHD_DaemonInfo *port = MHD_get_daemon_info(m->daemon, MHD_DAEMON_INFO_BIND_PORT);
    if (epfd == NULL || port == NULL ||
        (rc = uv_poll_init(&a->loop, &m->poll, epfd->epoll_fd)) != 0) {
        MHD_stop_daemon(m->daemon);
        free(m);
        return ct_errbuf_set(eb, rc ? rc : -EINVAL, "metrics endpoint: cannot watch its sockets");
    }
    uv_timer_init(&a->loop, &m->timer);
    m->poll.data = m->timer.data = m;
    m->open_handles = 2;
    m->port = port->port;
    uv_poll_start(&m->poll, UV_READABLE, ctrun_metrics__poll_cb);
    ctrun_metrics__rearm(m);
    a->metrics = m;
    /* A port the kernel chose is printed whatever the log level: nobody else knows it. */
    ct_log(cfg->metrics_port == 0 ? CT_LOG_WARN : CT_LOG_INFO,
           "metrics endpoint at http://%s%s%s:%d/metrics", ss.ss_family == AF_INET6 ? "[" : "",
           cfg->metrics_addr, ss.ss_family == AF_INET6 ? "]" : "", m->port);
    return 0;
}

static void ctrun_metrics__closed(uv_handle_t *h)
{
    struct ctrun_metrics *m = h->data;
    if (--m->open_handles > 0)
        return;
    /* libuv no longer watches the epoll descriptor: MHD may close it with its sockets. */
    MHD_stop_daemon(m->daemon);
    free(m);
}

void ctrun_metrics_close(ctrun_agent_t *a)
{
    struct ctrun_metrics *m = a->metrics;
    if (m == NULL)
        return;
    a->metrics = NULL;
    uv_close((uv_handle_t *)&m->poll, ctrun_metrics__closed);
    uv_close((uv_handle_t *)&m->timer, ctrun_metrics__closed);
}
