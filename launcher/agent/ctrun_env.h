/*
 * ctrun_env.h - the environment of one worker: the agent's whole environment overlaid with
 * torchrun's variables (docs/torchrun-compatibility.md §2):
 *
 *   LOCAL_RANK RANK GROUP_RANK ROLE_RANK ROLE_NAME LOCAL_WORLD_SIZE WORLD_SIZE
 *   GROUP_WORLD_SIZE ROLE_WORLD_SIZE MASTER_ADDR MASTER_PORT TORCHELASTIC_RESTART_COUNT
 *   TORCHELASTIC_MAX_RESTARTS TORCHELASTIC_RUN_ID TORCHELASTIC_USE_AGENT_STORE=True
 *   TORCHELASTIC_ERROR_FILE TORCH_NCCL_ASYNC_ERROR_HANDLING / NCCL_ASYNC_ERROR_HANDLING
 *   (1 unless the agent has them), OMP_NUM_THREADS=1 (only when unset and more than one
 *   worker per node), TORCHELASTIC_SIGNALS_TO_HANDLE, CTRUN_HEARTBEAT_FD when the agent
 *   passes a heartbeat pipe (an inherited one is removed otherwise), CTRUN_INJECT when
 *   --inject armed a fault for this worker (removed otherwise), CTRUN_JOB_TAG, the job's
 *   mark for its reaper (an inherited one, of an enclosing job, is replaced or removed), and
 *   TORCHELASTIC_TIMER_FILE when the agent serves FileTimer requests. With
 *   --virtual_local_rank, LOCAL_RANK is 0 and CUDA_VISIBLE_DEVICES (and HIP_VISIBLE_DEVICES
 *   when the agent has it) names the worker's one device.
 *
 * A pure function of its inputs: the base environment is passed in, nothing is read from or
 * written to the process environment, and the result is a NULL-terminated envp the spawner
 * can hand to uv_spawn. Deliberately not here: rank assignment (the rendezvous does it) and
 * printing the OMP notice (the agent prints ctrun_env_omp_notice once).
 */
#ifndef CTRUN_ENV_H
#define CTRUN_ENV_H

#include <stdbool.h>

#include "ctrun_cli.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What differs between workers and attempts; everything else comes from the config. */
typedef struct ctrun_worker_info {
    int local_rank, rank, group_rank, role_rank;
    int local_world_size, world_size, group_world_size, role_world_size;
    const char *role_name;
    const char *master_addr; /* the store workers connect to (no IPv6 brackets) */
    int master_port;
    int restart_count, max_restarts;
    const char *run_id;
    const char *error_file;        /* TORCHELASTIC_ERROR_FILE; "" when log files are off */
    const char *signals_to_handle; /* TORCHELASTIC_SIGNALS_TO_HANDLE, or NULL to leave it out */
    int heartbeat_fd;              /* CTRUN_HEARTBEAT_FD, or -1 for none */
    const char *fault;             /* CTRUN_INJECT (ctrun_inject.h), or NULL to remove it */
    const char *job_tag;           /* CTRUN_JOB_TAG (ctrun_reaper.h), or NULL/"" to remove it */
    const char *timer_file;        /* TORCHELASTIC_TIMER_FILE, or NULL/"" to leave it as it is */
    const char *device;            /* --virtual_local_rank: the worker's one device, else NULL */
    bool device_hip;               /* ... set HIP_VISIBLE_DEVICES too */
} ctrun_worker_info_t;

/* Fills the fields that come from the configuration (role, world sizes of a single-node job,
 * restarts, run id, signals, the store address from cfg->store_addr) and sets every rank to
 * 0, heartbeat_fd to -1, error_file to "". The agent then sets the ranks, the sizes agreed in
 * the rendezvous, the attempt and the paths, and master_port when the store was asked for a
 * kernel-chosen port (port 0: --standalone, --master_port 0). */
void ctrun_worker_info_init(ctrun_worker_info_t *w, const ctrun_config_t *cfg);

/* Builds the worker's envp from base (NULL-terminated "NAME=value" list; NULL means the
 * process environment). Variables the overlay sets replace every copy in base, in place of
 * the first; new ones follow base in the order above. Free with ctrun_argv_free. Returns 0 or
 * -ENOMEM. */
int ctrun_env_build(const char *const *base, const ctrun_worker_info_t *w, char ***envp_out);

/* True when torchrun would set OMP_NUM_THREADS=1 and print its notice: base lacks
 * OMP_NUM_THREADS and more than one worker runs per node. */
bool ctrun_env_omp_notice_needed(const char *const *base, int local_world_size);

/* torchrun's notice, framed by lines of 41 '*' (no trailing newline). */
const char *ctrun_env_omp_notice(void);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_ENV_H */
