/*
 * ct_worker_init.c - ct_worker_init and ct_worker_close (ctworker.h section 7): the
 * communicator's variables (CTRUN_COMM_TIMEOUT, CTRUN_COMM_BACKEND, CTRUN_COMM_ADDR), the store
 * connection, the key namespace of the run and attempt, and the choice and creation of the
 * backend. Reading the torchrun variables themselves is ct_worker_env.c's job; moving data is
 * the backends'.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_comm_internal.h"
#include "ct_env.h"
#include "ct_store_client.h"

#define CT__ENV_TIMEOUT "CTRUN_COMM_TIMEOUT"
#define CT__ENV_BACKEND "CTRUN_COMM_BACKEND"
#define CT__ENV_ADDR    "CTRUN_COMM_ADDR"

/* The most a timeout may be: about 115 days, far beyond any use, well within int64 ms. */
#define CT__TIMEOUT_MAX_S 1e7

static int ct_worker_init__read_comm_env(const ct_worker_opts_t *opts, int64_t *timeout_ms,
                                         ct_comm_backend_t *backend, ct_errbuf_t *eb)
{
    int rc;
    if (opts->timeout_ms < 0)
        return ct_errbuf_set(eb, -EINVAL, "ct_worker_init: negative timeout %lld ms",
                             (long long)opts->timeout_ms);
    if (opts->timeout_ms > 0) {
        *timeout_ms = opts->timeout_ms;
    } else {
        double s;
        bool found;
        rc = ct_env_double(CT__ENV_TIMEOUT, 0, CT__TIMEOUT_MAX_S, 0, &s, &found, eb);
        if (rc != 0)
            return rc;
        if (found && !(s > 0))
            return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                                 "environment variable " CT__ENV_TIMEOUT "=\"%s\": the timeout "
                                 "must be above 0 seconds",
                                 ct_env_str(CT__ENV_TIMEOUT));
        *timeout_ms = found ? (int64_t)(s * 1000.0 + 0.5) : CT_WORKER_DEFAULT_TIMEOUT_MS;
        if (*timeout_ms < 1)
            *timeout_ms = 1;
    }
    if (opts->backend != CT_COMM_AUTO) {
        if (opts->backend != CT_COMM_CPU && opts->backend != CT_COMM_NCCL)
            return ct_errbuf_set(eb, -EINVAL, "ct_worker_init: unknown backend %d",
                                 (int)opts->backend);
        *backend = opts->backend;
    } else if (ct_env_is_set(CT__ENV_BACKEND)) {
        rc = ct_comm_backend_parse(ct_env_str(CT__ENV_BACKEND), backend, eb);
        if (rc != 0)
            return ct_errbuf_wrap(eb, rc, "environment variable " CT__ENV_BACKEND);
    } else {
        *backend = CT_COMM_AUTO;
    }
    const char *addr = ct_env_str(CT__ENV_ADDR);
    if (addr != NULL) {
        ct_host_kind_t kind;
        rc = ct_host_validate(addr, &kind, eb);
        if (rc != 0)
            return ct_errbuf_wrap(eb, rc, "environment variable " CT__ENV_ADDR);
    }
    return 0;
}

static int ct_worker_init__connect_store(ct_worker_t *w, ct_errbuf_t *eb)
{
    ct_store_client_t *st = calloc(1, sizeof *st);
    if (st == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    ct_store_client_opts_t so = {
        .dialect = CT_STORE_V2, .timeout_ms = w->timeout_ms, .connect_timeout_ms = w->timeout_ms};
    int rc = ct_store_client_connect(st, w->env.master_addr, w->env.master_port, &so, eb);
    if (rc != 0) {
        ct_store_client_close(st);
        free(st);
        return ct_errbuf_wrap(eb, rc,
                              "connecting to the store at MASTER_ADDR=%s MASTER_PORT=%d (timeout "
                              "%.3g s, " CT__ENV_TIMEOUT ")",
                              w->env.master_addr, w->env.master_port,
                              (double)w->timeout_ms / 1000.0);
    }
    w->store = st;
    return 0;
}

int ct_worker_init(ct_worker_t *w, const ct_worker_opts_t *opts, ct_errbuf_t *eb)
{
    static const ct_worker_opts_t defaults = {0};
    memset(w, 0, sizeof *w);
    if (opts == NULL)
        opts = &defaults;
    ct_comm_backend_t backend;
    int rc = ct_worker_env_read(&w->env, eb);
    if (rc != 0 || (rc = ct_worker_init__read_comm_env(opts, &w->timeout_ms, &backend, eb)) != 0)
        return rc;
    if (w->env.world_size > 1 && ct_env_is_set("TORCHELASTIC_USE_AGENT_STORE") &&
        !w->env.use_agent_store)
        return ct_errbuf_set(eb, CT_ESTATE,
                             "environment variable TORCHELASTIC_USE_AGENT_STORE=%s: the worker "
                             "would have to host the store itself (rank 0 does in PyTorch), "
                             "which libctworker does not do; launch with ctrun or torchrun's "
                             "static or c10d rendezvous, or unset it and start ctrun-store at "
                             "MASTER_ADDR:MASTER_PORT",
                             ct_env_str("TORCHELASTIC_USE_AGENT_STORE"));
    int n = snprintf(w->key_prefix, sizeof w->key_prefix, "ctworker/%s/attempt_%d/", w->env.run_id,
                     w->env.restart_count);
    if (n < 0 || (size_t)n >= sizeof w->key_prefix)
        return ct_errbuf_set(eb, CT_ELIMIT, "store key prefix too long");

    if ((rc = ct_worker_setup(&w->env, opts->flags, eb)) != 0)
        return rc;
    if (w->env.has_master && (rc = ct_worker_init__connect_store(w, eb)) != 0)
        goto fail;

    if (backend == CT_COMM_AUTO) {
        backend = CT_COMM_CPU;
#if CT_HAVE_NCCL
        /* NCCL only when each rank of this node can have a GPU of its own: NCCL refuses two
         * ranks on one device. */
        if (ct__comm_gpu_count() >= w->env.local_world_size)
            backend = CT_COMM_NCCL;
#endif
    }
    ct__comm_cfg_t cfg = {.rank = w->env.rank,
                          .world_size = w->env.world_size,
                          .local_rank = w->env.local_rank,
                          .local_world_size = w->env.local_world_size,
                          .store = w->store,
                          .key_prefix = w->key_prefix,
                          .timeout_ms = w->timeout_ms,
                          .listen_addr = ct_env_str(CT__ENV_ADDR)};
    if (backend == CT_COMM_NCCL) {
#if CT_HAVE_NCCL
        rc = ct__comm_nccl_create(&w->comm, &cfg, eb);
#else
        rc = ct_errbuf_set(eb, CT_ENOTBUILT,
                           "the NCCL backend was asked for (" CT__ENV_BACKEND " or the "
                           "program) but this libctworker was built without NCCL");
#endif
    } else {
        rc = ct__comm_ring_create(&w->comm, &cfg, eb);
    }
    if (rc != 0) {
        ct_errbuf_wrap(eb, rc, "creating the %s communicator (rank %d of %d, timeout %.3g s)",
                       ct_comm_backend_name(backend), w->env.rank, w->env.world_size,
                       (double)w->timeout_ms / 1000.0);
        goto fail;
    }
    w->ready = true;
    return 0;
fail:
    ct_worker_close(w);
    w->ready = false;
    ct_worker_cleanup();
    return rc;
}

void ct_worker_close(ct_worker_t *w)
{
    if (w == NULL)
        return;
    ct__comm_destroy(w->comm);
    w->comm = NULL;
    if (w->store != NULL) {
        ct_store_client_close(w->store);
        free(w->store);
        w->store = NULL;
    }
    if (w->ready) {
        ct_worker_cleanup();
        w->ready = false;
    }
}
