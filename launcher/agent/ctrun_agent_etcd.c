/*
 * ctrun_agent_etcd.c - the agent's side of --rdzv_backend=etcd-v3: joins the rendezvous kept in
 * etcd (ctrun_etcd_rdzv.h) and turns its events into the agent's ETCD events; hosts the workers'
 * store of a round whose group rank 0 this node is (a fresh store on a free port every such
 * round, its address published in etcd) and reads the address another node published; writes
 * this node's outcomes, ok mark and failure record through the rendezvous; keeps the failure
 * records of the running attempt for the report; leaves etcd when the agent closes.
 *
 * With etcd there is no store coordinator, no node heartbeat to a store and no exit barrier: a
 * node's lease is its heartbeat (TTL = the node heartbeat timeout), and the workers' store moves
 * with group rank 0, so the loss of any node is a lost node like any other.
 *
 * Deliberately not here: what an event changes in the agent's state (ctrun_agent_step.c), the
 * rendezvous rules (ctrun_etcd_rdzv.c), the etcd client (launcher/etcd/).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_addr.h"
#include "ct_log.h"
#include "ctrun_agent_internal.h"
#include "ctrun_etcd_rdzv.h"

static void ctrun_agent_etcd__on_event(void *data, const ctrun_etcd_rdzv_event_t *ev)
{
    ctrun_agent__event_t e = {.kind = CTRUN_AGENT__EV_ETCD, .etcd = ev};
    ctrun_agent__step(data, &e);
}

/* The name other nodes reach this one by: --local_addr, else the FQDN. */
static const char *ctrun_agent_etcd__advertised(ctrun_agent_t *a)
{
    return a->cfg->local_addr ? a->cfg->local_addr : ctrun_agent__host(a);
}

int ctrun_agent__etcd_rendezvous(ctrun_agent_t *a)
{
    free(a->etcd_failures);
    a->etcd_failures = NULL;
    free(a->etcd_report);
    a->etcd_report = NULL;
    a->etcd_round = false;
    if (a->etcd != NULL) {
        int rc = ctrun_etcd_rdzv_next(a->etcd);
        if (rc != 0)
            ct_log_error("etcd rendezvous: cannot ask for attempt %d: %s", a->attempt,
                         ct_strerror(rc));
        return rc;
    }
    const ctrun_config_t *cfg = a->cfg;
    /* Unique in the job, stable for the agent's life: the node's name and the agent's pid. */
    snprintf(a->etcd_id, sizeof a->etcd_id, "%.100s-%d", ctrun_agent_etcd__advertised(a),
             (int)getpid());
    for (char *p = a->etcd_id; *p; p++)
        if (*p == '/' || *p == ',' || *p == ' ' || *p == '\t')
            *p = '_';
    double ttl = ceil(cfg->rdzv_conf.node_hb_timeout_s);
    ctrun_etcd_rdzv_params_t p = {
        .etcd = {.endpoints = cfg->rdzv_endpoint,
                 .request_timeout_ms = (int64_t)(cfg->rdzv_conf.etcd_timeout_s * 1000.0 + 0.5),
                 .https = cfg->rdzv_conf.etcd_https,
                 .cacert = cfg->rdzv_conf.etcd_cacert,
                 .cert = cfg->rdzv_conf.etcd_cert,
                 .key = cfg->rdzv_conf.etcd_key,
                 .user = cfg->rdzv_conf.etcd_user,
                 .password = cfg->rdzv_conf.etcd_password},
        .run_id = cfg->run_id,
        .id = a->etcd_id,
        .host = ctrun_agent_etcd__advertised(a),
        .nproc = cfg->nproc_per_node,
        .min_nodes = cfg->min_nodes,
        .max_nodes = cfg->max_nodes,
        .max_restarts = cfg->max_restarts,
        .last_call_ms = (int64_t)(cfg->rdzv_conf.last_call_timeout_s * 1000.0 + 0.5),
        .join_timeout_ms = (int64_t)(cfg->rdzv_conf.join_timeout_s * 1000.0 + 0.5),
        .ttl_s = ttl < 1 ? 1 : (int64_t)ttl,
        .keepalive_ms = (int64_t)(cfg->rdzv_conf.node_hb_interval_s * 1000.0 + 0.5),
    };
    ct_errbuf_t eb = {{0}};
    int rc = ctrun_etcd_rdzv_start(&a->loop, &p, ctrun_agent_etcd__on_event, a, &a->etcd, &eb);
    if (rc != 0)
        ct_log_error("%s", eb.msg);
    else
        ct_log_info("etcd rendezvous: node %s joins the job under %s at %s (lease TTL %lld s)",
                    a->etcd_id, ctrun_etcd_rdzv_prefix(a->etcd), cfg->rdzv_endpoint,
                    (long long)p.ttl_s);
    return rc;
}

static void ctrun_agent_etcd__old_store_closed(void *data)
{
    (void)data;
}

/* The store this node hosted for an earlier round: its workers are gone, nobody uses it. */
static void ctrun_agent_etcd__drop_store(ctrun_agent_t *a)
{
    if (a->store != NULL && !a->store_closing) {
        ctrun_store_close_gently(a->store, CTRUN_STORE_LINGER_MS,
                                 ctrun_agent_etcd__old_store_closed, NULL);
        a->store = NULL;
    }
}

int ctrun_agent__etcd_host_store(ctrun_agent_t *a)
{
    ctrun_agent_etcd__drop_store(a);
    ct_errbuf_t eb = {{0}};
    ctrun_store_opts_t so = {.host = NULL, .port = 0, .token = a->cfg->rdzv_conf.store_token};
    int rc = ctrun_store_create(&a->loop, &so, &a->store, &eb);
    if (rc != 0) {
        ct_log_error("cannot host the workers' store of attempt %d: %s", a->attempt, eb.msg);
        return rc;
    }
    ct_hostport_t hp = {.port = ctrun_store_port(a->store), .has_port = true};
    snprintf(hp.host, sizeof hp.host, "%s", ctrun_agent_etcd__advertised(a));
    ct_errbuf_t heb = {{0}};
    ct_host_validate(hp.host, &hp.kind, &heb);
    char addr[CT_HOST_MAX + 16];
    ct_hostport_format(&hp, addr, sizeof addr);
    snprintf(a->master_addr, sizeof a->master_addr, "%s", hp.host);
    a->master_port = hp.port;
    rc = ctrun_etcd_rdzv_publish_store(a->etcd, addr);
    if (rc != 0)
        ct_log_error("cannot publish the workers' store of attempt %d in etcd: %s", a->attempt,
                     ct_strerror(rc));
    else
        ct_log_info("this node (group rank 0) hosts the workers' store of attempt %d at %s",
                    a->attempt, addr);
    return rc;
}

int ctrun_agent__etcd_use_store(ctrun_agent_t *a, const char *addr)
{
    ctrun_agent_etcd__drop_store(a);
    ct_hostport_t hp;
    ct_errbuf_t eb = {{0}};
    int rc = ct_hostport_parse(addr, -1, false, &hp, &eb);
    if (rc != 0) {
        ct_log_error("etcd: the workers' store of attempt %d is \"%.64s\": %s", a->attempt, addr,
                     eb.msg);
        return rc;
    }
    snprintf(a->master_addr, sizeof a->master_addr, "%s", hp.host);
    a->master_port = hp.port;
    ct_log_debug("the workers' store of attempt %d is at %s", a->attempt, addr);
    return 0;
}

/* Appends line (and a newline) to *text. */
static void ctrun_agent_etcd__append(char **text, const char *line)
{
    size_t have = *text ? strlen(*text) : 0, n = strlen(line);
    char *grown = realloc(*text, have + n + 2);
    if (grown == NULL) {
        ct_log_warn("out of memory: the report misses a failure record");
        return;
    }
    memcpy(grown + have, line, n);
    grown[have + n] = '\n';
    grown[have + n + 1] = '\0';
    *text = grown;
}

void ctrun_agent__etcd_failure(ctrun_agent_t *a, const char *node, const char *record)
{
    /* This node's own record is in etcd_report already (it may arrive here late, or never). */
    if (strcmp(node, a->etcd_id) != 0 && record[0] != '\0')
        ctrun_agent_etcd__append(&a->etcd_failures, record);
}

const char *ctrun_agent__etcd_report_lines(ctrun_agent_t *a)
{
    if (a->etcd_report == NULL)
        return a->etcd_failures;
    char *all = NULL;
    ctrun_agent_etcd__append(&all, a->etcd_report);
    if (all != NULL && a->etcd_failures != NULL) {
        size_t n = strlen(all), m = strlen(a->etcd_failures);
        char *grown = realloc(all, n + m + 1);
        if (grown != NULL) {
            memcpy(grown + n, a->etcd_failures, m + 1);
            all = grown;
        }
    }
    free(a->etcd_failures);
    a->etcd_failures = all;
    free(a->etcd_report);
    a->etcd_report = NULL;
    return a->etcd_failures;
}

void ctrun_agent__etcd_note_outcome(ctrun_agent_t *a, const char *text)
{
    char id[256];
    if (sscanf(text, "lost %255s", id) == 1 || sscanf(text, "rejoin %255s", id) == 1) {
        bool lost = text[0] == 'l';
        char norm[300];
        snprintf(norm, sizeof norm, "%s %d", lost ? "lost" : "rejoin",
                 ctrun_etcd_rdzv_group_rank(a->etcd, id));
        ctrun_agent__note_outcome(a, norm);
        snprintf(a->outcome_host, sizeof a->outcome_host, "%.63s", id);
        return;
    }
    ctrun_agent__note_outcome(a, text);
}

void ctrun_agent__etcd_post(ctrun_agent_t *a, const char *text)
{
    int rc = ctrun_etcd_rdzv_outcome(a->etcd, text);
    if (rc != 0 && rc != CT_ESTATE)
        ct_log_warn("etcd: cannot write the outcome \"%s\" of attempt %d: %s", text, a->attempt,
                    ct_strerror(rc));
}

void ctrun_agent__etcd_post_failed(ctrun_agent_t *a)
{
    int rc = ctrun_etcd_rdzv_failed(a->etcd, a->etcd_report ? a->etcd_report : "");
    if (rc != 0 && rc != CT_ESTATE)
        ct_log_warn("etcd: cannot record the failure of attempt %d: %s", a->attempt,
                    ct_strerror(rc));
}

void ctrun_agent__etcd_post_ok(ctrun_agent_t *a)
{
    int rc = ctrun_etcd_rdzv_succeeded(a->etcd);
    if (rc != 0)
        ct_log_warn("etcd: cannot record the success of attempt %d: %s", a->attempt,
                    ct_strerror(rc));
}

void ctrun_agent__etcd_close(ctrun_agent_t *a)
{
    /* Without etcd, leaving would wait out a request timeout per request for nothing: the
     * lease expires on its own. */
    ctrun_etcd_rdzv_close(a->etcd, a->store_lost ? CTRUN_ETCD_RDZV_SILENT : CTRUN_ETCD_RDZV_FINISH);
    a->etcd = NULL;
    free(a->etcd_failures);
    a->etcd_failures = NULL;
    free(a->etcd_report);
    a->etcd_report = NULL;
}
