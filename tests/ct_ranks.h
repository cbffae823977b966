/*
 * ct_ranks.h - launch a group of worker processes the way torchrun / ctrun would, for tests
 * and benchmarks that cannot wait for the launcher: a ctrun-store process on loopback, then W
 * ranks, each a ct_child with the torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK,
 * LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID,
 * TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_USE_AGENT_STORE=True,
 * CTRUN_COMM_TIMEOUT), all on one node. Every child is reaped by ct_ranks_close /
 * ct_store_proc_stop (and dies with the test through ct_child's parent-death signal).
 *
 * Not a launcher: no restarts, no heartbeat, no log files; the caller decides what a failure
 * means.
 */
#ifndef CT_RANKS_H
#define CT_RANKS_H

#include <stdbool.h>
#include <stdint.h>

#include "ct_child.h"

#define CT_RANKS_MAX 16

typedef struct ct_store_proc {
    ct_child_t child;
    int port;
} ct_store_proc_t;

/* Starts `exe --port 0 --host 127.0.0.1` and reads the port it prints. Returns 0 or -errno /
 * -ETIMEDOUT (no port line within 10 s). */
int ct_store_proc_start(ct_store_proc_t *s, const char *exe);
/* SIGTERM, then reaps (SIGKILL after 5 s). */
void ct_store_proc_stop(ct_store_proc_t *s);

typedef struct ct_ranks_opts {
    int world;              /* W, 1..CT_RANKS_MAX */
    int port;               /* the store's */
    const char *run_id;     /* NULL: "ct-test" */
    int restart_count;      /* TORCHELASTIC_RESTART_COUNT */
    double timeout_s;       /* CTRUN_COMM_TIMEOUT; <= 0: leave it unset */
    const char *const *env; /* more changes for every rank ("NAME=value" / "NAME"), or NULL */
    const char *cwd;        /* NULL: the test's */
} ct_ranks_opts_t;

typedef struct ct_ranks {
    int n;
    ct_child_t child[CT_RANKS_MAX];
} ct_ranks_t;

/* Starts W copies of argv[0] with argv. Returns 0 or the start error of a rank (those already
 * started are killed). */
int ct_ranks_start(ct_ranks_t *g, const ct_ranks_opts_t *o, char *const argv[]);

/* Waits for every rank (ct_child_wait_all). Returns 0 when all exited 0, -ETIMEDOUT when some
 * had to be killed, 1 when one exited otherwise. */
int ct_ranks_wait(ct_ranks_t *g, int64_t timeout_ms);

/* Prints each rank's exit status and output to stderr (for a failing test). */
void ct_ranks_dump(const ct_ranks_t *g);

/* Kills and reaps every rank, frees the output. Safe twice. */
void ct_ranks_close(ct_ranks_t *g);

#endif /* CT_RANKS_H */
