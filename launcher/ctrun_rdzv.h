/*
 * ctrun_rdzv.h - how the agents of one job meet in the store: the launcher's keys, the
 * per-attempt rendezvous every agent runs (a small explicit state machine over ctrun_kv), and
 * the coordinator that the agent hosting the store runs on the store itself.
 *
 * Keys (all under CTRUN_RDZV_PREFIX, which the per-attempt wipe keeps; everything else is the
 * workers' key space and is deleted before each attempt starts):
 *
 *   /ctrun/job                 "run_id=<id> backend=<b> nnodes=<N> max_restarts=<R>", set by
 *                              the host when the store is created; a joining agent compares
 *                              it with its own configuration and refuses a different job.
 *   /ctrun/joined              c10d: ADD counter handing out group ranks in join order.
 *   /ctrun/node/<g>            "<nproc> <pid> <nonce> <host>": the agent holding group rank g
 *                              (COMPARE_SET from missing, so a rank is taken once).
 *   /ctrun/a/<k>/ready         ADD counter: agents whose workers of attempt k-1 are all gone.
 *   /ctrun/a/<k>/go            the plan of attempt k, set by the coordinator once every agent
 *                              is ready, right after wiping the workers' key space:
 *                              "attempt=<k> nnodes=<N> world_size=<W> max_restarts=<R>
 *                              nproc=<n0>,<n1>,..."
 *   /ctrun/a/<k>/ok            ADD counter: agents whose workers all exited 0; the agent that
 *                              brings it to N writes the outcome "succeeded".
 *   /ctrun/a/<k>/outcome       how attempt k ended, written once (COMPARE_SET from missing):
 *                              "succeeded", "failed <g>" (a worker of node g failed first) or
 *                              "stopped <g> <signal>" (node g's agent was told to stop).
 *                              Every agent waits on it from the start of the attempt.
 *   /ctrun/a/<k>/failures      APPEND: one JSON line per node with a failure (its first failed
 *                              worker), read for the report.
 *   /ctrun/left                ADD counter of agents that have finished (exit barrier): the
 *                              host keeps the store up until it reaches N-1.
 *
 * Backends: static (group rank = --node_rank) and c10d with a fixed node count (group rank =
 * join order through /ctrun/joined; --standalone is this with one node). Both complete a round
 * when all N agents are ready, so rounds differ only in how a rank is obtained (the RANK state);
 * a dynamic MIN:MAX backend adds its own membership states beside them.
 *
 * Deliberately not here: workers, timeouts (the agent times the rendezvous), outcomes (the
 * agent writes and reads them with the key helpers below).
 */
#ifndef CTRUN_RDZV_H
#define CTRUN_RDZV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ct_error.h"
#include "ctrun_kv.h"
#include "ctrun_store.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CTRUN_RDZV_PREFIX  "/ctrun/"
#define CTRUN_RDZV_KEY_MAX 256

/* The largest node count a plan can describe. */
#define CTRUN_RDZV_MAX_NODES 4096

/* Tags of the kv requests the rendezvous makes: the top byte marks them, so the agent can route
 * replies; the attempt is in bits 8..39 so that a late reply of an earlier attempt is told
 * apart. */
#define CTRUN_TAG_RDZV  0x01u
#define CTRUN_TAG_AGENT 0x02u
#define CTRUN_TAG(owner, attempt, kind) \
    (((uint64_t)(owner) << 56) | (((uint64_t)(uint32_t)(attempt)) << 8) | (uint64_t)(kind))
#define CTRUN_TAG_OWNER(tag)   ((unsigned)((tag) >> 56))
#define CTRUN_TAG_ATTEMPT(tag) ((int)(uint32_t)((tag) >> 8))
#define CTRUN_TAG_KIND(tag)    ((unsigned)((tag)&0xffu))

/* Writes CTRUN_RDZV_PREFIX + printf(fmt, ...) into buf (CTRUN_RDZV_KEY_MAX bytes). */
void ctrun_rdzv_key(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

typedef enum ctrun_rdzv_kind {
    CTRUN_RDZV_KIND_STATIC = 0, /* group rank = node_rank */
    CTRUN_RDZV_KIND_C10D = 1,   /* group rank = join order, fixed node count */
} ctrun_rdzv_kind_t;

/* What an attempt's plan says, from this node's point of view. */
typedef struct ctrun_rdzv_plan {
    int attempt;
    int nnodes;       /* GROUP_WORLD_SIZE */
    int world_size;   /* workers of all nodes */
    int max_restarts; /* the host's --max_restarts, which the whole job follows */
    int group_rank;   /* this node */
    int rank_base;    /* RANK of this node's local rank 0 */
    int local_world_size;
} ctrun_rdzv_plan_t;

typedef enum ctrun_rdzv_state {
    CTRUN_RDZV_IDLE = 0,
    CTRUN_RDZV_JOB,   /* reading /ctrun/job: are we in the same job? */
    CTRUN_RDZV_RANK,  /* c10d: taking a group rank from /ctrun/joined */
    CTRUN_RDZV_NODE,  /* claiming /ctrun/node/<g> */
    CTRUN_RDZV_READY, /* counting in at /ctrun/a/<k>/ready */
    CTRUN_RDZV_GO,    /* waiting for /ctrun/a/<k>/go */
    CTRUN_RDZV_DONE,  /* plan holds the attempt's plan */
    CTRUN_RDZV_FAILED /* error says why */
} ctrun_rdzv_state_t;

/* One agent's side of the rendezvous. */
typedef struct ctrun_rdzv {
    ctrun_rdzv_state_t state;
    ctrun_rdzv_kind_t kind;
    ctrun_kv_t *kv;
    char job[512];   /* this agent's job descriptor */
    char token[512]; /* this agent's /ctrun/node/<g> value */
    int nnodes;
    int node_rank; /* static: the configured rank; c10d: -1 until taken */
    int nproc;
    int attempt;
    bool registered; /* the node key is ours (from attempt 0 on) */
    ctrun_rdzv_plan_t plan;
    char error[CT_ERRBUF_SIZE];
} ctrun_rdzv_t;

typedef struct ctrun_rdzv_params {
    ctrun_rdzv_kind_t kind;
    const char *run_id;
    int nnodes;
    int node_rank; /* static only */
    int nproc;
    int max_restarts;
    const char *host; /* this node's name, for messages and reports */
} ctrun_rdzv_params_t;

/* The job descriptor text for params (what /ctrun/job holds). */
void ctrun_rdzv_job_text(const ctrun_rdzv_params_t *p, char *buf, size_t size);

void ctrun_rdzv_init(ctrun_rdzv_t *r, ctrun_kv_t *kv, const ctrun_rdzv_params_t *params);

/* Starts the rendezvous of attempt k (0 = joining the job). Returns 0 or a kv error. */
int ctrun_rdzv_start(ctrun_rdzv_t *r, int attempt);

typedef enum ctrun_rdzv_result {
    CTRUN_RDZV_PENDING = 0,
    CTRUN_RDZV_COMPLETE = 1, /* r->plan is set */
    CTRUN_RDZV_ERROR = 2,    /* r->error says why */
} ctrun_rdzv_result_t;

/* Feeds a kv reply whose tag has owner CTRUN_TAG_RDZV. Replies of another attempt are
 * ignored (PENDING). This is the machine's one transition function. */
ctrun_rdzv_result_t ctrun_rdzv_on_reply(ctrun_rdzv_t *r, const ctrun_kv_reply_t *reply);

/* ---- plans ---------------------------------------------------------------------------- */

/* Builds the go text of attempt k from the nproc of every node (nproc[0..nnodes)). */
int ctrun_rdzv_plan_text(int attempt, int nnodes, int max_restarts, const int *nproc, char *buf,
                         size_t size);

/* Reads a go text for the node group_rank. Errors: CT_EPARSE / CT_EMISMATCH in eb. */
int ctrun_rdzv_plan_parse(const char *text, int group_rank, ctrun_rdzv_plan_t *plan,
                          ct_errbuf_t *eb);

/* ---- the coordinator (the agent that hosts the store) ------------------------------------ */

typedef struct ctrun_rdzv_coord {
    ctrun_store_t *store;
    ctrun_store_watch_t *ready_watch, *left_watch;
    int nnodes, max_restarts;
    int left; /* /ctrun/left seen so far */
    void (*on_left)(void *data, int left);
    void *data;
    char error[CT_ERRBUF_SIZE]; /* a plan that could not be built */
    bool failed;
} ctrun_rdzv_coord_t;

/* Writes /ctrun/job and starts watching: when /ctrun/a/<k>/ready reaches nnodes it wipes every
 * key outside CTRUN_RDZV_PREFIX and writes /ctrun/a/<k>/go; each change of /ctrun/left calls
 * on_left(data, value), and a plan that cannot be built calls on_left(data, -1) with the reason
 * in c->error. Errors from the store in eb. */
int ctrun_rdzv_coord_init(ctrun_rdzv_coord_t *c, ctrun_store_t *store,
                          const ctrun_rdzv_params_t *params, void (*on_left)(void *, int),
                          void *data, ct_errbuf_t *eb);

/* Stops watching (the store must still be open). Safe to call twice. */
void ctrun_rdzv_coord_close(ctrun_rdzv_coord_t *c);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_RDZV_H */
