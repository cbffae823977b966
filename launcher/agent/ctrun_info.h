/*
 * ctrun_info.h - the two INFO blocks torchrun logs at LOGLEVEL=INFO, which users and tests
 * diff against the workers' environment (docs/torchrun-compatibility.md §5.6, §7 item 34):
 *
 *   Starting elastic_operator with launch configs:
 *     entrypoint       : train.py
 *     ...
 *   [default] Rendezvous complete for workers. Result:
 *     restart_count=0
 *     master_addr=127.0.0.1
 *     ...
 *     global_ranks=[0, 1]
 *
 * Same labels, order and list syntax as torchrun (Python reprs of lists and of the rdzv
 * configuration dict); the values are ctrun's. Pure formatting: the agent logs the text.
 */
#ifndef CTRUN_INFO_H
#define CTRUN_INFO_H

#include <stddef.h>

#include "ctrun_cli.h"
#include "ctrun_env.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The launch configuration block (no trailing newline). *out is malloc'd; 0 or -ENOMEM. */
int ctrun_info_launch_config(const ctrun_config_t *cfg, char **out);

/* The rendezvous result of this node: workers[0..n) are its local workers in local-rank order
 * (as passed to ctrun_env_build). No trailing newline. 0 or -ENOMEM. */
int ctrun_info_rendezvous(const ctrun_worker_info_t *workers, size_t n, char **out);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_INFO_H */
