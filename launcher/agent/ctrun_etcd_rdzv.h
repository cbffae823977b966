/*
 * ctrun_etcd_rdzv.h - the rendezvous of a c10d-style elastic job (--nnodes MIN:MAX) kept in etcd,
 * on ctrun_etcd_group: every node runs the same rules on the same view of etcd, and etcd's
 * revision-compared transactions make one proposal win, so no node coordinates the others and
 * the loss of any node (or of an etcd member while etcd keeps its quorum) leaves the rest going.
 *
 * Keys, under "/ctrun/<run_id>/" (the group's prefix):
 *
 *   members/<id>             "nproc=<n> done=<k> host=<host>" on the node's lease (the group);
 *                            done is the latest attempt whose workers this node has left behind
 *                            (-1: none). Join order is the key's create revision.
 *   round                    "<attempt + 1> <plan>" (the group's round): the plan of the latest
 *                            round, the c10d plan text of ctrun_rdzv_plan_text (group ranks are
 *                            its ids 0..n-1) followed by " members=<id0>,<id1>,..." in group
 *                            rank order; or "closed <reason>" when no further round will run.
 *   a/<k>/outcome            how attempt k ended, written once (created only if absent):
 *                            "succeeded", "failed <group rank>", "lost <id>" or "rejoin <id>".
 *   a/<k>/ok/<id>            node <id>'s workers of attempt k all exited 0; the node that sees
 *                            every node of the round there writes "succeeded".
 *   a/<k>/failures/<id>      node <id>'s failure report for attempt k.
 *   a/<k>/store              "<host>:<port>": the workers' store of attempt k, hosted by the
 *                            round's group rank 0 (ctrun_etcd_rdzv_publish_store).
 *
 * The rules are c10d's (ctrun_rdzv_round_decide, ctrun_rdzv_outcome_counts, the plan text):
 * a round forms when MAX nodes are ready, or at least MIN are and last_call_ms has passed since
 * this node saw the MIN-th (after a re-rendezvous also as soon as every live node is ready).
 * A node is ready for attempt k when it was not in attempt k - 1 or has left it (done). Ranks
 * follow join order. A node that arrives while a round runs waits (WAITING); when the round has
 * fewer than MAX nodes it ends the round with "rejoin <id>", which does not use up a restart;
 * "failed" and "lost" do, and past max_restarts the rendezvous closes. A node of the running
 * round whose member key disappears (its lease expired: killed, cut off) is reported by every
 * other node as LOST and ends the round with "lost <id>". A node that has not been given a round
 * within join_timeout_ms (from the start, and from each ctrun_etcd_rdzv_next) gets ERROR, one
 * line naming etcd and how many nodes it saw.
 *
 * Deliberately not here: workers, hosting the workers' store (only its address passes through),
 * the command line, TLS; reading failure reports beyond passing them on.
 */
#ifndef CTRUN_ETCD_RDZV_H
#define CTRUN_ETCD_RDZV_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "ct_error.h"
#include "ctrun_etcd.h"
#include "ctrun_rdzv.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ctrun_etcd_rdzv ctrun_etcd_rdzv_t;

typedef struct ctrun_etcd_rdzv_params {
    ctrun_etcd_opts_t etcd;
    const char *run_id;       /* keys under "/ctrun/<run_id>/": printable, no '/' or space */
    const char *id;           /* this node, unique in the job: no '/', ',' or space */
    const char *host;         /* this node's name, for messages */
    int nproc;                /* its workers */
    int min_nodes, max_nodes; /* --nnodes MIN:MAX */
    int max_restarts;
    int64_t last_call_ms;    /* 0: a round forms as soon as MIN nodes are ready */
    int64_t join_timeout_ms; /* 0: no limit */
    int64_t ttl_s;           /* the membership lease: how long a silent node stays a member */
    int64_t keepalive_ms;    /* 0: a third of the TTL */
} ctrun_etcd_rdzv_params_t;

typedef enum ctrun_etcd_rdzv_event_kind {
    CTRUN_ETCD_RDZV_ROUND = 0, /* a round with this node formed: plan (attempt, ranks, restarts) */
    CTRUN_ETCD_RDZV_WAITING,   /* a round formed without this node: it waits for the next */
    CTRUN_ETCD_RDZV_LOST,      /* node `node` of the running round was lost (lease expired) */
    CTRUN_ETCD_RDZV_FAILURE,   /* node `node` recorded a failure in this attempt: text */
    CTRUN_ETCD_RDZV_ENDED,     /* the running round ended: text is its outcome */
    CTRUN_ETCD_RDZV_CLOSED,    /* no further round will run: text says why */
    CTRUN_ETCD_RDZV_ERROR,     /* this node cannot go on: text (one line); nothing follows */
    CTRUN_ETCD_RDZV_STORE,     /* the workers' store of this node's round: text "host:port"
                                * (after ROUND, at most once per round) */
} ctrun_etcd_rdzv_event_kind_t;

typedef struct ctrun_etcd_rdzv_event {
    ctrun_etcd_rdzv_event_kind_t kind;
    int attempt;                   /* the latest round's attempt (-1 before the first) */
    const ctrun_rdzv_plan_t *plan; /* ROUND: this node's view of the plan */
    const char *node;              /* LOST, FAILURE: the node's id */
    const char *text;              /* FAILURE, ENDED, CLOSED, ERROR; "" otherwise */
    int rc;                        /* ERROR */
} ctrun_etcd_rdzv_event_t;

typedef void (*ctrun_etcd_rdzv_cb)(void *data, const ctrun_etcd_rdzv_event_t *ev);

/* Joins the job's rendezvous; events follow through cb on the loop's thread. Returns 0, or an
 * error with eb set (bad parameters, bad endpoints). */
int ctrun_etcd_rdzv_start(uv_loop_t *loop, const ctrun_etcd_rdzv_params_t *p, ctrun_etcd_rdzv_cb cb,
                          void *data, ctrun_etcd_rdzv_t **out, ct_errbuf_t *eb);

/* This node's workers of the ended round are gone: it is ready for the next round (the join
 * timeout starts again). CT_ESTATE when no round of this node has ended. */
int ctrun_etcd_rdzv_next(ctrun_etcd_rdzv_t *r);

/* This node's workers of the running round all exited 0. */
int ctrun_etcd_rdzv_succeeded(ctrun_etcd_rdzv_t *r);

/* Records this node's failure report (one line) for the running round, which ends "failed <its
 * group rank>" unless it has ended already; every node gets FAILURE. */
int ctrun_etcd_rdzv_failed(ctrun_etcd_rdzv_t *r, const char *report);

/* Writes the running round's outcome unless one is there (e.g. "stopped <g> <signal>" or "left
 * <g> <signal> <host>"): every node gets ENDED with the first outcome written. */
int ctrun_etcd_rdzv_outcome(ctrun_etcd_rdzv_t *r, const char *text);

/* Publishes the address of the workers' store of the running round (this node is its group rank
 * 0); every node of the round gets STORE. */
int ctrun_etcd_rdzv_publish_store(ctrun_etcd_rdzv_t *r, const char *addr);

/* The group rank of node id in the latest round, -1 when it is not in it. */
int ctrun_etcd_rdzv_group_rank(const ctrun_etcd_rdzv_t *r, const char *id);

typedef enum ctrun_etcd_rdzv_leave {
    CTRUN_ETCD_RDZV_SILENT = 0, /* as a killed node: the key stays until its lease expires */
    CTRUN_ETCD_RDZV_REVOKE,     /* the key goes at once */
    CTRUN_ETCD_RDZV_FINISH,     /* revoke; the last node out removes every key of the job */
} ctrun_etcd_rdzv_leave_t;

/* Leaves and frees the rendezvous (no callback after this call; freed from the loop once its
 * requests are done, each bounded by the client's request timeout). NULL is fine. */
void ctrun_etcd_rdzv_close(ctrun_etcd_rdzv_t *r, ctrun_etcd_rdzv_leave_t how);

/* "/ctrun/<run_id>/". */
const char *ctrun_etcd_rdzv_prefix(const ctrun_etcd_rdzv_t *r);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_ETCD_RDZV_H */
