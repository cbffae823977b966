/*
 * ctrun_info.c - text assembly with open_memstream; Python reprs are produced for the three
 * shapes that occur: lists of ints, strings in single quotes, and the rdzv_configs dict
 * (user keys as strings, then "rank" and the default "timeout" as torchrun inserts them).
 */
#include "ctrun_info.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrun_cmd.h"

/* A str's repr in the common case: single quotes, with ' and \ escaped. */
static void ctrun_info__repr(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s != '\0'; s++) {
        if (*s == '\'' || *s == '\\')
            fputc('\\', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

static int ctrun_info__finish(FILE *f, char **buf, char **out)
{
    if (fclose(f) != 0) {
        free(*buf);
        return -ENOMEM;
    }
    *out = *buf;
    return 0;
}

int ctrun_info_launch_config(const ctrun_config_t *cfg, char **out)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL)
        return -ENOMEM;
    bool is_static = cfg->rdzv_backend == CTRUN_RDZV_STATIC;
    char endpoint[CT_HOST_MAX + 16];
    ct_hostport_format(&cfg->store_addr, endpoint, sizeof endpoint);
    fprintf(f, "Starting elastic_operator with launch configs:\n");
    fprintf(f, "  entrypoint       : %s\n", ctrun_cmd_entrypoint_name(cfg));
    fprintf(f, "  min_nodes        : %d\n", cfg->min_nodes);
    fprintf(f, "  max_nodes        : %d\n", cfg->max_nodes);
    fprintf(f, "  nproc_per_node   : %d\n", cfg->nproc_per_node);
    fprintf(f, "  run_id           : %s\n", cfg->run_id);
    fprintf(f, "  rdzv_backend     : %s\n",
            is_static                                 ? "static"
            : cfg->rdzv_backend == CTRUN_RDZV_ETCD_V3 ? "etcd-v3"
                                                      : "c10d");
    bool own_store = cfg->standalone || cfg->free_port || cfg->rdzv_endpoint[0] == '\0';
    fprintf(f, "  rdzv_endpoint    : %s\n",
            (is_static || own_store) ? endpoint : cfg->rdzv_endpoint);
    fprintf(f, "  rdzv_configs     : {");
    bool has_rank = false, has_timeout = false;
    for (size_t i = 0; i < cfg->rdzv_conf.count; i++) {
        const ctrun_kv_t *kv = &cfg->rdzv_conf.items[i];
        fputs(i ? ", " : "", f);
        ctrun_info__repr(f, kv->key);
        fputs(": ", f);
        if (is_static && strcmp(kv->key, "rank") == 0) {
            fprintf(f, "%d", cfg->node_rank); /* torchrun overwrites it with --node_rank */
            has_rank = true;
        } else {
            ctrun_info__repr(f, kv->value);
        }
        has_timeout = has_timeout || strcmp(kv->key, "timeout") == 0;
    }
    size_t n = cfg->rdzv_conf.count;
    if (is_static && !has_rank)
        fprintf(f, "%s'rank': %d", n++ ? ", " : "", cfg->node_rank);
    if (!has_timeout)
        fprintf(f, "%s'timeout': %g", n ? ", " : "", cfg->rdzv_conf.timeout_s);
    fprintf(f, "}\n");
    fprintf(f, "  max_restarts     : %d\n", cfg->max_restarts);
    fprintf(f, "  monitor_interval : %g\n", cfg->monitor_interval_s);
    fprintf(f, "  log_dir          : %s\n", cfg->log_dir ? cfg->log_dir : "None");
    fprintf(f, "  metrics_cfg      : {}");
    return ctrun_info__finish(f, &buf, out);
}

static void ctrun_info__list(FILE *f, const char *label, const ctrun_worker_info_t *w, size_t n,
                             size_t offset)
{
    fprintf(f, "\n  %s=[", label);
    for (size_t i = 0; i < n; i++) {
        const int *field = (const int *)((const char *)&w[i] + offset);
        fprintf(f, "%s%d", i ? ", " : "", *field);
    }
    fputc(']', f);
}

int ctrun_info_rendezvous(const ctrun_worker_info_t *workers, size_t n, char **out)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL)
        return -ENOMEM;
    const ctrun_worker_info_t *w0 = n ? &workers[0] : NULL;
    fprintf(f, "[%s] Rendezvous complete for workers. Result:\n", w0 ? w0->role_name : "");
    fprintf(f, "  restart_count=%d\n", w0 ? w0->restart_count : 0);
    fprintf(f, "  master_addr=%s\n", w0 ? w0->master_addr : "");
    fprintf(f, "  master_port=%d\n", w0 ? w0->master_port : 0);
    fprintf(f, "  group_rank=%d\n", w0 ? w0->group_rank : 0);
    fprintf(f, "  group_world_size=%d", w0 ? w0->group_world_size : 0);
    ctrun_info__list(f, "local_ranks", workers, n, offsetof(ctrun_worker_info_t, local_rank));
    ctrun_info__list(f, "role_ranks", workers, n, offsetof(ctrun_worker_info_t, role_rank));
    ctrun_info__list(f, "global_ranks", workers, n, offsetof(ctrun_worker_info_t, rank));
    ctrun_info__list(f, "role_world_sizes", workers, n,
                     offsetof(ctrun_worker_info_t, role_world_size));
    ctrun_info__list(f, "global_world_sizes", workers, n,
                     offsetof(ctrun_worker_info_t, world_size));
    return ctrun_info__finish(f, &buf, out);
}
