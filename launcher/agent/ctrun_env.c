/*
 * ctrun_env.c - overlay of the worker variables on a copy of the base environment. Lookups
 * are linear: an environment holds tens to a few hundred entries and this runs once per
 * worker start.
 */
#include "ctrun_env.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrun_cmd.h"

/* The agent's own environment, read when a worker's is built: workers inherit it whole
 * (torchrun's rule), so it is copied as it is at spawn time rather than captured at parse time
 * with the variables ctrun itself acts on (ctrun_cli.h). */
extern char **environ;

static const char ctrun_env__omp_notice[] =
    "*****************************************\n"
    "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to "
    "avoid your system being overloaded, please further tune the variable for optimal "
    "performance in your application as needed. \n"
    "*****************************************";

const char *ctrun_env_omp_notice(void)
{
    return ctrun_env__omp_notice;
}

static const char *ctrun_env__lookup(const char *const *env, const char *name)
{
    size_t n = strlen(name);
    for (const char *const *e = env; *e != NULL; e++) {
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    }
    return NULL;
}

bool ctrun_env_omp_notice_needed(const char *const *base, int local_world_size)
{
    if (base == NULL)
        base = (const char *const *)environ;
    return local_world_size > 1 && ctrun_env__lookup(base, "OMP_NUM_THREADS") == NULL;
}

void ctrun_worker_info_init(ctrun_worker_info_t *w, const ctrun_config_t *cfg)
{
    memset(w, 0, sizeof *w);
    w->local_world_size = cfg->nproc_per_node;
    w->world_size = cfg->nproc_per_node;
    w->role_world_size = cfg->nproc_per_node;
    w->group_world_size = 1;
    w->role_name = cfg->role;
    w->master_addr = cfg->store_addr.host;
    w->master_port = cfg->store_addr.port;
    w->max_restarts = cfg->max_restarts;
    w->run_id = cfg->run_id;
    w->error_file = "";
    w->signals_to_handle = cfg->signals_to_handle;
    w->heartbeat_fd = -1;
}

#define CTRUN_ENV__OVERLAY_MAX 32

typedef struct ctrun_env__overlay {
    const char *name[CTRUN_ENV__OVERLAY_MAX];
    char *entry[CTRUN_ENV__OVERLAY_MAX]; /* "NAME=value", or NULL: remove the variable */
    bool used[CTRUN_ENV__OVERLAY_MAX];
    int n;
    bool oom;
} ctrun_env__overlay_t;

__attribute__((format(printf, 3, 4))) static void
ctrun_env__put(ctrun_env__overlay_t *o, const char *name, const char *fmt, ...)
{
    char *value = NULL;
    if (fmt != NULL) {
        va_list ap;
        va_start(ap, fmt);
        int n = vasprintf(&value, fmt, ap);
        va_end(ap);
        if (n < 0) {
            o->oom = true;
            return;
        }
    }
    char *entry = NULL;
    if (value != NULL && asprintf(&entry, "%s=%s", name, value) < 0)
        o->oom = true;
    free(value);
    if (o->n == CTRUN_ENV__OVERLAY_MAX) { /* more variables than the table holds: a bug */
        free(entry);
        o->oom = true;
        return;
    }
    o->name[o->n] = name;
    o->entry[o->n] = entry;
    o->n++;
}

static int ctrun_env__find(const ctrun_env__overlay_t *o, const char *entry)
{
    for (int i = 0; i < o->n; i++) {
        size_t n = strlen(o->name[i]);
        if (strncmp(entry, o->name[i], n) == 0 && entry[n] == '=')
            return i;
    }
    return -1;
}

int ctrun_env_build(const char *const *base, const ctrun_worker_info_t *w, char ***envp_out)
{
    if (base == NULL)
        base = (const char *const *)environ;
    ctrun_env__overlay_t o = {.n = 0};
    ctrun_env__put(&o, "LOCAL_RANK", "%d", w->device != NULL ? 0 : w->local_rank);
    ctrun_env__put(&o, "RANK", "%d", w->rank);
    ctrun_env__put(&o, "GROUP_RANK", "%d", w->group_rank);
    ctrun_env__put(&o, "ROLE_RANK", "%d", w->role_rank);
    ctrun_env__put(&o, "ROLE_NAME", "%s", w->role_name);
    ctrun_env__put(&o, "LOCAL_WORLD_SIZE", "%d", w->local_world_size);
    ctrun_env__put(&o, "WORLD_SIZE", "%d", w->world_size);
    ctrun_env__put(&o, "GROUP_WORLD_SIZE", "%d", w->group_world_size);
    ctrun_env__put(&o, "ROLE_WORLD_SIZE", "%d", w->role_world_size);
    ctrun_env__put(&o, "MASTER_ADDR", "%s", w->master_addr);
    ctrun_env__put(&o, "MASTER_PORT", "%d", w->master_port);
    ctrun_env__put(&o, "TORCHELASTIC_RESTART_COUNT", "%d", w->restart_count);
    ctrun_env__put(&o, "TORCHELASTIC_MAX_RESTARTS", "%d", w->max_restarts);
    ctrun_env__put(&o, "TORCHELASTIC_RUN_ID", "%s", w->run_id);
    ctrun_env__put(&o, "TORCHELASTIC_USE_AGENT_STORE", "%s", "True");
    ctrun_env__put(&o, "TORCHELASTIC_ERROR_FILE", "%s", w->error_file ? w->error_file : "");
    if (ctrun_env__lookup(base, "TORCH_NCCL_ASYNC_ERROR_HANDLING") == NULL)
        ctrun_env__put(&o, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "%s", "1");
    if (ctrun_env__lookup(base, "NCCL_ASYNC_ERROR_HANDLING") == NULL)
        ctrun_env__put(&o, "NCCL_ASYNC_ERROR_HANDLING", "%s", "1");
    if (ctrun_env_omp_notice_needed(base, w->local_world_size))
        ctrun_env__put(&o, "OMP_NUM_THREADS", "%s", "1");
    if (w->signals_to_handle != NULL)
        ctrun_env__put(&o, "TORCHELASTIC_SIGNALS_TO_HANDLE", "%s", w->signals_to_handle);
    if (w->heartbeat_fd >= 0)
        ctrun_env__put(&o, "CTRUN_HEARTBEAT_FD", "%d", w->heartbeat_fd);
    else
        ctrun_env__put(&o, "CTRUN_HEARTBEAT_FD", NULL); /* an inherited one is not ours to give */
    if (w->device != NULL) {
        ctrun_env__put(&o, "CUDA_VISIBLE_DEVICES", "%s", w->device);
        if (w->device_hip)
            ctrun_env__put(&o, "HIP_VISIBLE_DEVICES", "%s", w->device);
    }
    if (w->fault != NULL && w->fault[0] != '\0')
        ctrun_env__put(&o, "CTRUN_INJECT", "%s", w->fault);
    else
        ctrun_env__put(&o, "CTRUN_INJECT", NULL); /* only the agent arms faults */
    if (w->job_tag != NULL && w->job_tag[0] != '\0')
        ctrun_env__put(&o, "CTRUN_JOB_TAG", "%s", w->job_tag);
    else
        ctrun_env__put(&o, "CTRUN_JOB_TAG", NULL); /* an enclosing job's is not this one's */
    if (w->timer_file != NULL && w->timer_file[0] != '\0')
        ctrun_env__put(&o, "TORCHELASTIC_TIMER_FILE", "%s", w->timer_file);

    size_t nbase = 0;
    while (base[nbase] != NULL)
        nbase++;
    char **envp = o.oom ? NULL : calloc(nbase + (size_t)o.n + 1, sizeof *envp);
    size_t k = 0;
    for (size_t i = 0; envp != NULL && i < nbase; i++) {
        int idx = ctrun_env__find(&o, base[i]);
        const char *src = base[i];
        if (idx >= 0) {
            if (o.used[idx] || o.entry[idx] == NULL)
                continue; /* a later duplicate, or a variable to remove */
            o.used[idx] = true;
            src = o.entry[idx];
        }
        if ((envp[k] = strdup(src)) == NULL) {
            o.oom = true;
            break;
        }
        k++;
    }
    for (int i = 0; envp != NULL && !o.oom && i < o.n; i++) {
        if (o.used[i] || o.entry[i] == NULL)
            continue;
        if ((envp[k] = strdup(o.entry[i])) == NULL) {
            o.oom = true;
            break;
        }
        k++;
    }
    for (int i = 0; i < o.n; i++)
        free(o.entry[i]);
    if (envp == NULL || o.oom) {
        ctrun_argv_free(envp);
        return -ENOMEM;
    }
    *envp_out = envp;
    return 0;
}
