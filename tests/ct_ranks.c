/*
 * ct_ranks.c - see ct_ranks.h.
 */
#include "ct_ranks.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_time.h"

int ct_store_proc_start(ct_store_proc_t *s, const char *exe)
{
    memset(s, 0, sizeof *s);
    char *argv[] = {(char *)exe, "--port", "0", "--host", "127.0.0.1", NULL};
    const char *env[] = {"CTRUN_STORE_TOKEN", NULL};
    ct_child_opts_t o = {.env = env};
    int rc = ct_child_start(&s->child, argv, &o);
    if (rc != 0)
        return rc;
    int64_t deadline = ct_deadline_after_ms(10000);
    while (!ct_deadline_passed(deadline)) {
        ct_child_poll_output(&s->child, 20);
        if (s->child.out != NULL && strchr(s->child.out, '\n') != NULL) {
            s->port = atoi(s->child.out);
            if (s->port > 0 && s->port < 65536)
                return 0;
            break;
        }
        if (ct_child_exited(&s->child))
            break;
    }
    fprintf(stderr, "ctrun-store gave no port; stdout: %s stderr: %s\n",
            s->child.out ? s->child.out : "", s->child.err ? s->child.err : "");
    ct_child_close(&s->child);
    return -ETIMEDOUT;
}

void ct_store_proc_stop(ct_store_proc_t *s)
{
    if (s->child.pid > 0 && !s->child.reaped) {
        ct_child_signal(&s->child, SIGTERM);
        ct_child_wait(&s->child, 5000);
    }
    ct_child_close(&s->child);
}

int ct_ranks_start(ct_ranks_t *g, const ct_ranks_opts_t *o, char *const argv[])
{
    memset(g, 0, sizeof *g);
    if (o->world < 1 || o->world > CT_RANKS_MAX)
        return -EINVAL;
    for (int r = 0; r < o->world; r++) {
        char v[10][96];
        snprintf(v[0], sizeof v[0], "RANK=%d", r);
        snprintf(v[1], sizeof v[1], "WORLD_SIZE=%d", o->world);
        snprintf(v[2], sizeof v[2], "LOCAL_RANK=%d", r);
        snprintf(v[3], sizeof v[3], "LOCAL_WORLD_SIZE=%d", o->world);
        snprintf(v[4], sizeof v[4], "MASTER_PORT=%d", o->port);
        snprintf(v[5], sizeof v[5], "TORCHELASTIC_RUN_ID=%s", o->run_id ? o->run_id : "ct-test");
        snprintf(v[6], sizeof v[6], "TORCHELASTIC_RESTART_COUNT=%d", o->restart_count);
        snprintf(v[7], sizeof v[7], "TORCHELASTIC_MAX_RESTARTS=%d",
                 o->restart_count > 3 ? o->restart_count : 3);
        if (o->timeout_s > 0)
            snprintf(v[8], sizeof v[8], "CTRUN_COMM_TIMEOUT=%g", o->timeout_s);
        else
            snprintf(v[8], sizeof v[8], "CTRUN_COMM_TIMEOUT");
        const char *env[64];
        int n = 0;
        for (int i = 0; i < 9; i++)
            env[n++] = v[i];
        env[n++] = "GROUP_RANK=0";
        env[n++] = "MASTER_ADDR=127.0.0.1";
        env[n++] = "TORCHELASTIC_USE_AGENT_STORE=True";
        env[n++] = "TORCHELASTIC_ERROR_FILE";
        env[n++] = "CTRUN_HEARTBEAT_FD";
        env[n++] = "CTRUN_COMM_BACKEND";
        env[n++] = "CTRUN_COMM_ADDR";
        for (int i = 0; o->env != NULL && o->env[i] != NULL && n < 63; i++)
            env[n++] = o->env[i];
        env[n] = NULL;
        ct_child_opts_t co = {.env = env, .cwd = o->cwd};
        int rc = ct_child_start(&g->child[r], argv, &co);
        if (rc != 0) {
            ct_ranks_close(g);
            return rc;
        }
        g->n = r + 1;
    }
    return 0;
}

int ct_ranks_wait(ct_ranks_t *g, int64_t timeout_ms)
{
    if (ct_child_wait_all(g->child, g->n, timeout_ms) != 0)
        return -ETIMEDOUT;
    for (int r = 0; r < g->n; r++)
        if (g->child[r].exit_code != 0)
            return 1;
    return 0;
}

void ct_ranks_dump(const ct_ranks_t *g)
{
    for (int r = 0; r < g->n; r++) {
        const ct_child_t *c = &g->child[r];
        fprintf(stderr, "---- rank %d: exit %d, signal %d%s, %lld ms\n", r, c->exit_code,
                c->term_signal, c->timed_out ? " (timed out)" : "", (long long)c->elapsed_ms);
        fprintf(stderr, "stdout:\n%s\nstderr:\n%s\n", c->out ? c->out : "", c->err ? c->err : "");
    }
}

void ct_ranks_close(ct_ranks_t *g)
{
    for (int r = 0; r < g->n; r++)
        ct_child_close(&g->child[r]);
    g->n = 0;
}
