/*
 * ctrain_main.c - main() of ctrain, the native trainer (recommenders, causal LMs): flags (exit
 * 2 on a bad one), the worker (ct_worker_init: torchrun environment, runtime - heartbeat, error
 * file, fatal signals - store and communicator), the reducer over it, then training or
 * --inference_only. An error ctrain detects - in how it was started (a bad variable, a store that
 * cannot be reached, peers that do not show up) or in the run (bad data, a checkpoint that does not
 * fit, a non-finite loss) - is one line on stderr and in TORCHELASTIC_ERROR_FILE, and exit 1: the
 * line says what and where, and a backtrace would only show main(). Backtraces are for crashes (the
 * fatal signal handler of ct_fatal.c) and for the NCCL watchdog. The work itself is in
 * ctrain_train.c, ctrain_infer.c and what they call.
 *
 * The communicator: the CPU ring for --device cpu (host buffers); NCCL for --backend nccl, and
 * with --backend auto on a GPU (CT_COMM_AUTO: NCCL when every local rank has a GPU), where the
 * trainer reduces its device gradients with ct_reduce_nccl.c. --collective_timeout bounds
 * every collective (the communicator's timeout, and the NCCL reduction's watchdog).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ct_config.h"
#include "ct_errfile.h"
#include "ct_kernels.h"
#include "ct_log.h"
#include "ctrain_train.h"
#include "ctrain_cfg.h"
#include "ctrain_temporal_pregen.h"
#include "ctworker.h"

/* An error ctrain detected: one line (the message says what and where), the error file for
 * the launcher's report, exit 1. No backtrace: it would only show main(). _exit, as
 * ct_worker_fail does: a communicator's threads (NCCL) may still run, and atexit handlers or
 * library destructors could then hang. */
static void __attribute__((noreturn)) ctrain_fail(const char *msg)
{
    ct_log_error("%s", msg);
    const char *path = getenv("TORCHELASTIC_ERROR_FILE");
    if (path && path[0]) {
        ct_errbuf_t eb;
        if (ct_errfile_write_path(path, msg, "", (int64_t)time(NULL), 0, &eb) != 0)
            ct_log_warn("could not write the error file: %s", eb.msg);
    }
    fflush(stdout);
    fflush(stderr);
    ct_worker_cleanup();
    _exit(CT_WORKER_FAIL_EXIT);
}

int main(int argc, char **argv)
{
    ct_errbuf_t eb;
    if (ct_log_init("[ctrain]", &eb) != 0)
        ct_log_warn("%s", eb.msg);

    static ctrain_cfg_t cfg; /* large (paths); static, not on the stack */
    ctrain_cfg_default(&cfg);
    ctrain_args_action_t action;
    if (ctrain_args_parse(&cfg, argc, argv, &action, &eb) != 0) {
        fprintf(stderr, "ctrain: %s\n", eb.msg);
        return 2;
    }
    if (action == CTRAIN_ARGS_HELP) {
        ctrain_args_usage(stdout);
        return 0;
    }
    if (action == CTRAIN_ARGS_VERSION) {
        printf("ctrain %s\n", CT_VERSION);
        return 0;
    }

    if (cfg.pregenerate > 0) {
        /* no communicator: rank 0 writes the cache, the other ranks have nothing to do */
        const char *r = getenv("RANK");
        if (ctrain_temporal_pregenerate(&cfg, r && r[0] ? atoi(r) : 0, &eb) != 0)
            ctrain_fail(eb.msg);
        return 0;
    }
    int rc = ct_cpu_set_threads(cfg.threads);
    if (rc != 0) {
        snprintf(eb.msg, sizeof eb.msg, "--threads %d: %s", cfg.threads, ct_strerror(rc));
        ctrain_fail(eb.msg);
    }
    static ct_worker_t w;
    ct_worker_opts_t wo = {.backend = CT_COMM_CPU,
                           .timeout_ms = (int64_t)(cfg.collective_timeout * 1000.0 + 0.5),
                           .flags = CT_WORKER_CATCH_SIGNALS};
    /* NCCL when asked for, or by default when training on a GPU (the CPU path keeps the ring) */
    if (strcmp(cfg.backend, "nccl") == 0)
        wo.backend = CT_COMM_NCCL;
    else if (strcmp(cfg.backend, "auto") == 0 && strcmp(cfg.device, "cpu") != 0 &&
             ct_comm_backend_built(CT_COMM_NCCL))
        wo.backend = CT_COMM_AUTO;
    if (ct_worker_init(&w, &wo, &eb) != 0)
        ctrain_fail(eb.msg);
    ct_reducer_t *red = NULL;
    if (ct_reducer_create(&red, w.comm, &eb) != 0)
        ctrain_fail(eb.msg);

    rc = cfg.inference_only ? ctrain_infer_run(&cfg, &w.env, red, &eb)
                            : ctrain_train_run(&cfg, &w.env, red, &eb);
    ct_reducer_destroy(red);
    if (rc != 0)
        ctrain_fail(eb.msg);
    ct_worker_close(&w);
    return 0;
}
