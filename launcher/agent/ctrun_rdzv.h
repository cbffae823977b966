/*
 * ctrun_rdzv.h - how the agents of one job meet in the store: the launcher's keys, the
 * per-round rendezvous every agent runs (a small explicit state machine over ctrun_kv), and
 * the coordinator that the agent hosting the store runs on the store itself (it decides who
 * is in each round, watches the nodes' heartbeats and declares lost nodes).
 *
 * Keys (all under CTRUN_RDZV_PREFIX, which the per-attempt wipe keeps; everything else is the
 * workers' key space and is deleted before each round's workers start):
 *
 *   /ctrun/job                 "run_id=<id> backend=<b> nnodes=<N|MIN:MAX>", set by the host
 *                              when the store is created; a joining agent compares it with its
 *                              own configuration and refuses a different job.
 *   /ctrun/joined              c10d: ADD counter handing out node ids in join order.
 *   /ctrun/node/<id>           "<nproc> <pid> <nonce> <host>": the agent holding node id <id>
 *                              (static: id = --node_rank; c10d: join order). COMPARE_SET from
 *                              missing, so an id is taken once.
 *   /ctrun/hb/<id>             the node's heartbeat counter, ADDed every keep_alive_interval (an
 *                              ADD is answered, so the agent also learns the store is there);
 *                              the coordinator times the writes with its own clock.
 *   /ctrun/round               the round a newly registered agent should join (the open round,
 *                              or the running one: a late joiner learns from its plan that it is
 *                              not in it and waits for the next).
 *   /ctrun/a/<k>/ready         APPEND "<id> <nproc>\n": agents that want to be in round k (their
 *                              workers of the previous round are all gone).
 *   /ctrun/a/<k>/go            the plan of round k, set by the coordinator when the round closes,
 *                              right after wiping the workers' key space:
 *                              "attempt=<k> nnodes=<N> world_size=<W> max_restarts=<R>
 *                              restarts=<r> nproc=<n0>,<n1>,... ids=<id0>,<id1>,..."
 *                              (group rank g is node ids[g]; ids ascend, so ranks follow join
 *                              order and keep their order across rounds), or "closed <reason>"
 *                              when no further round will run (the job finished, or too few
 *                              nodes are left).
 *   /ctrun/a/<k>/ok            ADD counter: agents whose workers all exited 0; the agent that
 *                              brings it to N writes the outcome "succeeded".
 *   /ctrun/a/<k>/outcome       how round k ended, written once (COMPARE_SET from missing):
 *                              "succeeded", "failed <g>" (a worker of node g failed first),
 *                              "stopped <g> <signal>" (node g's agent was told to stop),
 *                              "lost <id> <host>" (the coordinator saw no heartbeat of node <id>
 *                              for heartbeat_timeout) or "rejoin <id>" (node <id> is waiting to
 *                              join and the round has room: scale up). Every agent waits on it
 *                              from the start of the round.
 *   /ctrun/a/<k>/failures      APPEND: one JSON line per node with a failure (its first failed
 *                              worker), read for the report.
 *   /ctrun/left                ADD counter of agents that have finished (exit barrier): the
 *                              host keeps the store up until it reaches N-1.
 *
 * Rounds and restarts: a round k is one attempt of the workers. The restart count the workers
 * see (TORCHELASTIC_RESTART_COUNT, attempt_<r> log folders) is `restarts` in the plan: it grows
 * when a round ends with "failed" or "lost" and stays when a round ends with "rejoin"
 * (membership changes do not use up --max_restarts, as in torchrun).
 *
 * When a round closes (torchrun's dynamic rendezvous rules, judged by the coordinator with
 * ctrun_rdzv_round_decide, which ctrun_etcd_rdzv.c follows too):
 * - at once when MAX nodes are ready;
 * - after a re-rendezvous (k > 0), at once when every live node of the job (the previous
 *   round's survivors and the nodes waiting to join) is ready and they are at least MIN;
 * - otherwise last_call_timeout after the MIN-th node became ready.
 * Static rendezvous is the case MIN = MAX = --nnodes with ids = node ranks.
 *
 * Deliberately not here: workers, the agent's own timeouts (join_timeout is timed by the
 * agent), outcomes other than "lost"/"rejoin" (the agent writes and reads them with the key
 * helpers below).
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

/* The largest node count a plan can describe (CTRUN_MAX_NODES of the command line). */
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
    CTRUN_RDZV_KIND_STATIC = 0, /* node id = node_rank, all --nnodes nodes */
    CTRUN_RDZV_KIND_C10D = 1,   /* node id = join order, --nnodes MIN:MAX */
} ctrun_rdzv_kind_t;

/* What a round's plan says, from this node's point of view. */
typedef struct ctrun_rdzv_plan {
    int attempt;      /* the round */
    int restarts;     /* restarts used before this round (TORCHELASTIC_RESTART_COUNT) */
    int nnodes;       /* GROUP_WORLD_SIZE */
    int world_size;   /* workers of all nodes */
    int max_restarts; /* the host's --max_restarts, which the whole job follows */
    int group_rank;   /* this node, or -1 when the plan does not include it */
    int rank_base;    /* RANK of this node's local rank 0 */
    int local_world_size;
} ctrun_rdzv_plan_t;

typedef enum ctrun_rdzv_state {
    CTRUN_RDZV_IDLE = 0,
    CTRUN_RDZV_JOB,   /* reading /ctrun/job: are we in the same job? */
    CTRUN_RDZV_RANK,  /* c10d: taking a node id from /ctrun/joined */
    CTRUN_RDZV_NODE,  /* claiming /ctrun/node/<id> */
    CTRUN_RDZV_ROUND, /* a new agent reads /ctrun/round */
    CTRUN_RDZV_READY, /* appending to /ctrun/a/<k>/ready */
    CTRUN_RDZV_GO,    /* waiting for /ctrun/a/<k>/go */
    CTRUN_RDZV_DONE,  /* plan holds the round's plan */
    CTRUN_RDZV_FAILED /* error says why */
} ctrun_rdzv_state_t;

/* One agent's side of the rendezvous. */
typedef struct ctrun_rdzv {
    ctrun_rdzv_state_t state;
    ctrun_rdzv_kind_t kind;
    ctrun_kv_t *kv;
    char job[512];   /* this agent's job descriptor */
    char token[512]; /* this agent's /ctrun/node/<id> value */
    int node_id;     /* static: the configured rank; c10d: -1 until taken */
    int nproc;
    int attempt;
    bool registered; /* the node key is ours */
    bool waited;     /* a round closed without this node (it waits for the next) */
    ctrun_rdzv_plan_t plan;
    char error[CT_ERRBUF_SIZE];
} ctrun_rdzv_t;

typedef struct ctrun_rdzv_params {
    ctrun_rdzv_kind_t kind;
    const char *run_id;
    int min_nodes, nnodes; /* --nnodes MIN:MAX (nnodes = MAX; static: MIN = MAX) */
    int node_rank;         /* static only */
    int nproc;
    int max_restarts;
    const char *host; /* this node's name, for messages and reports */
    /* coordinator only (ms; 0 = off): the last call after MIN nodes are ready, and how long a
     * node may go without a heartbeat before it is declared lost. */
    int64_t last_call_ms;
    int64_t heartbeat_timeout_ms;
} ctrun_rdzv_params_t;

/* The job descriptor text for params (what /ctrun/job holds). */
void ctrun_rdzv_job_text(const ctrun_rdzv_params_t *p, char *buf, size_t size);

void ctrun_rdzv_init(ctrun_rdzv_t *r, ctrun_kv_t *kv, const ctrun_rdzv_params_t *params);

/* Starts the rendezvous of round k (for an agent not yet registered, k is only a hint: it
 * joins the round /ctrun/round names). Returns 0 or a kv error. */
int ctrun_rdzv_start(ctrun_rdzv_t *r, int attempt);

typedef enum ctrun_rdzv_result {
    CTRUN_RDZV_PENDING = 0,
    CTRUN_RDZV_COMPLETE = 1, /* r->plan is set (r->attempt = the round) */
    CTRUN_RDZV_ERROR = 2,    /* r->error says why */
} ctrun_rdzv_result_t;

/* Feeds a kv reply whose tag has owner CTRUN_TAG_RDZV. Replies of another round are
 * ignored (PENDING). This is the machine's one transition function. */
ctrun_rdzv_result_t ctrun_rdzv_on_reply(ctrun_rdzv_t *r, const ctrun_kv_reply_t *reply);

/* ---- plans ---------------------------------------------------------------------------- */

/* Builds the go text of round k from the nproc and id of every node (ids ascending). Errors:
 * -ENAMETOOLONG when buf is too small. */
int ctrun_rdzv_plan_text(int attempt, int restarts, int nnodes, int max_restarts, const int *nproc,
                         const int *ids, char *buf, size_t size);

/* Reads a go text for the node node_id (group_rank -1 when the plan leaves it out). Errors:
 * CT_EPARSE / CT_EMISMATCH in eb; CT_ESTATE with the reason for "closed <reason>". */
int ctrun_rdzv_plan_parse(const char *text, int node_id, ctrun_rdzv_plan_t *plan, ct_errbuf_t *eb);

/* ---- the rules (pure; the coordinator here and the etcd rendezvous both follow them) ------ */

typedef enum ctrun_rdzv_decision {
    CTRUN_RDZV_ROUND_WAIT = 0,  /* fewer than MIN ready: keep collecting */
    CTRUN_RDZV_ROUND_LAST_CALL, /* MIN ready: close when the last call ends */
    CTRUN_RDZV_ROUND_CLOSE,     /* close now */
} ctrun_rdzv_decision_t;

/* What an open round `attempt` does with `ready` nodes ready for it, of `wanting` live nodes
 * that want to be in the job: close at once at MAX, or (after a re-rendezvous) when every live
 * node is ready and they are at least MIN; a last call from MIN; otherwise wait. */
ctrun_rdzv_decision_t ctrun_rdzv_round_decide(int attempt, int ready, int wanting, int min_nodes,
                                              int max_nodes);

/* Whether a round's outcome uses up a restart ("failed ..." and "lost ..."). */
bool ctrun_rdzv_outcome_counts(const char *outcome);

/* Whether a round's outcome ends the job ("succeeded", "stopped ..."). */
bool ctrun_rdzv_outcome_final(const char *outcome);

/* ---- the coordinator (the agent that hosts the store) ------------------------------------ */

typedef struct ctrun_rdzv_node ctrun_rdzv_node_t;

typedef struct ctrun_rdzv_coord {
    ctrun_store_t *store;
    uv_loop_t *loop;
    ctrun_store_watch_t *ready_watch, *left_watch, *node_watch, *hb_watch;
    uv_timer_t last_call_timer, check_timer;
    bool timers_open;
    ctrun_rdzv_kind_t kind;
    int min_nodes, nnodes, max_restarts;
    int64_t last_call_ms, heartbeat_timeout_ms;
    /* the current round */
    int round, restarts;
    bool running;    /* its plan is out; false: it is open (collecting ready nodes) */
    bool closed;     /* no further round will run */
    bool last_call;  /* the last-call timer runs for this round */
    int plan_nnodes; /* nodes in the running round */
    uint64_t last_check_ms;
    /* every node that registered, by id */
    ctrun_rdzv_node_t *nodes;
    int nnode_slots;
    void *priv; /* the ready lists' read offsets */
    int left;   /* /ctrun/left seen so far */
    void (*on_left)(void *data, int left);
    void *data;
    char error[CT_ERRBUF_SIZE]; /* a plan that could not be built */
    bool failed;
} ctrun_rdzv_coord_t;

/* Writes /ctrun/job and /ctrun/round and starts watching the rendezvous keys and heartbeats
 * (timers on loop). Each change of /ctrun/left calls on_left(data, value); a plan that cannot
 * be built calls on_left(data, -1) with the reason in c->error. Errors from the store in eb. */
int ctrun_rdzv_coord_init(ctrun_rdzv_coord_t *c, uv_loop_t *loop, ctrun_store_t *store,
                          const ctrun_rdzv_params_t *params, void (*on_left)(void *, int),
                          void *data, ct_errbuf_t *eb);

/* Publishes "closed <reason>" as the next round's plan (once), so that agents waiting to join
 * learn that the job will not run another round. */
void ctrun_rdzv_coord_shut(ctrun_rdzv_coord_t *c, const char *reason);

/* Stops watching and closes the timers (the store must still be open; the loop must run once
 * more before c is freed). Safe to call twice. */
void ctrun_rdzv_coord_close(ctrun_rdzv_coord_t *c);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_RDZV_H */
