/*
 * ct_worker_rt.c - the process-wide part of libctworker that needs no store: the log prefix,
 * the heartbeat behind ct_worker_progress, and the error file the fatal paths write. One
 * instance per process, set up by ct_worker_setup from the main thread.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_log.h"
#include "ct_worker_internal.h"
#include "ctworker.h"

static struct {
    bool ready;
    ct_heartbeat_t hb;
    char prefix[64];
    char error_file[CT_WORKER_PATH_MAX];
} ct_worker_rt__rt = {.hb = {.fd = -1}};

const char *ct__runtime_error_file(void)
{
    return ct_worker_rt__rt.ready ? ct_worker_rt__rt.error_file : NULL;
}

const char *ct__runtime_prefix(void)
{
    return ct_worker_rt__rt.prefix;
}

int ct_worker_setup(const ct_worker_env_t *env, unsigned flags, ct_errbuf_t *eb)
{
    if (ct_worker_rt__rt.ready)
        return ct_errbuf_set(eb, CT_ESTATE, "ct_worker_setup: already set up");
    if ((flags & ~CT_WORKER_CATCH_SIGNALS) != 0)
        return ct_errbuf_set(eb, -EINVAL, "ct_worker_setup: unknown flags 0x%x", flags);
    int rc = ct_heartbeat_init(&ct_worker_rt__rt.hb, env->heartbeat_fd,
                               CT_WORKER_HEARTBEAT_INTERVAL_MS, eb);
    if (rc != 0)
        return rc;
    snprintf(ct_worker_rt__rt.prefix, sizeof ct_worker_rt__rt.prefix, "[rank %d/%d]", env->rank,
             env->world_size);
    ct_log_set_prefix(ct_worker_rt__rt.prefix);
    memcpy(ct_worker_rt__rt.error_file, env->error_file, sizeof ct_worker_rt__rt.error_file);
    ct_worker_rt__rt.error_file[sizeof ct_worker_rt__rt.error_file - 1] = '\0';
    if ((rc = ct__inject_setup(getenv("CTRUN_INJECT"), eb)) != 0) {
        ct_heartbeat_close(&ct_worker_rt__rt.hb);
        ct_log_set_prefix("");
        return rc;
    }
    ct_worker_rt__rt.ready = true;
    if (flags & CT_WORKER_CATCH_SIGNALS) {
        rc = ct_worker_catch_fatal_signals(eb);
        if (rc != 0) {
            ct_worker_cleanup();
            return rc;
        }
    }
    return 0;
}

void ct_worker_cleanup(void)
{
    ct__fatal_signals_restore();
    ct__inject_reset();
    ct_heartbeat_close(&ct_worker_rt__rt.hb);
    ct_worker_rt__rt.ready = false;
    ct_worker_rt__rt.prefix[0] = '\0';
    ct_worker_rt__rt.error_file[0] = '\0';
}

int ct_worker_progress(uint64_t step)
{
    ct__inject_progress(step);
    return ct_heartbeat_beat(&ct_worker_rt__rt.hb, step);
}

void ct__runtime_beat_now(uint64_t step)
{
    ct_worker_rt__rt.hb.last_ns = INT64_MIN / 2; /* past any rate limit */
    ct_heartbeat_beat(&ct_worker_rt__rt.hb, step);
}
