/*
 * ctrun_etcd_group.h - a node's membership of a job kept in etcd, and the job's round, as the
 * building blocks of a rendezvous in etcd: each node's key lives on a lease, so a node that dies
 * or loses its network disappears when the lease expires; the round changes only by a
 * transaction comparing the round key's mod_revision with the one the proposer saw, so of
 * concurrent proposals exactly one wins and everyone sees the same round.
 *
 * Keys, all under the caller's prefix (one per job, e.g. "/ctrun/<run_id>/"):
 *
 *   <prefix>members/<id>   the node's value (the caller's text), put on the node's lease when it
 *                          joins (only if no key of that id exists: a second node with the same
 *                          id is refused). Join order is the key's create_revision, which etcd
 *                          makes unique and increasing: members are listed in that order.
 *   <prefix>round          "<k> <plan>": the current round number and its plan (the caller's
 *                          text), replaced by ctrun_etcd_group_propose.
 *   <prefix><anything else> the caller's keys (written with its own client): the group passes
 *                          each change on as a KEY event, in revision order with the others.
 *
 * A group joins in one transaction that also reads every key under the prefix (one consistent
 * snapshot: the members, the round and the caller's keys), then watches the prefix from the
 * snapshot's next revision, so it misses no change; a watch that ends (the etcd member it used was
 * lost) is started again from the revision after the last change seen, on whichever etcd member
 * answers. The lease is kept alive every keepalive_ms (default a third of the TTL).
 *
 * Events reach the caller through one callback on the loop's thread: JOINED once, MEMBERS when
 * the member list changed, ROUND when the round changed (also for the proposer that won),
 * PROPOSED with the outcome of the caller's own proposal, KEY for each of the caller's keys (those
 * of the snapshot just before JOINED, then one per change), and FAILED at most once, after which
 * the group does nothing more but wait to be closed: this node's key disappeared (its lease
 * expired or was revoked: the others have declared it lost), no keepalive succeeded for a whole
 * TTL, or etcd could not be reached to watch again.
 *
 * Deliberately not here: what plans say, who proposes when (the rendezvous rules: minimum and
 * maximum nodes, last call, join timeout), the workers' store, and the command line.
 */
#ifndef CTRUN_ETCD_GROUP_H
#define CTRUN_ETCD_GROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "ct_error.h"
#include "ctrun_etcd.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ctrun_etcd_group ctrun_etcd_group_t;

typedef struct ctrun_etcd_group_opts {
    ctrun_etcd_opts_t etcd; /* the group's own client */
    const char *prefix;     /* the job's keys, e.g. "/ctrun/job-7/" (ends with '/') */
    const char *id;         /* this node: printable, no '/' or space, at most 128 bytes */
    const char *value;      /* what the others read about this node */
    int64_t ttl_s;          /* the lease: how long after its last keepalive a node is lost */
    int64_t keepalive_ms;   /* 0: ttl_s * 1000 / 3 */
} ctrun_etcd_group_opts_t;

typedef enum ctrun_etcd_group_event_kind {
    CTRUN_ETCD_GROUP_JOINED = 0,
    CTRUN_ETCD_GROUP_MEMBERS,
    CTRUN_ETCD_GROUP_ROUND,
    CTRUN_ETCD_GROUP_PROPOSED,
    CTRUN_ETCD_GROUP_FAILED,
    CTRUN_ETCD_GROUP_KEY,
} ctrun_etcd_group_event_kind_t;

typedef struct ctrun_etcd_member {
    const char *id, *value;
    int64_t joined; /* create_revision of the member's key */
} ctrun_etcd_member_t;

/* The group as this node sees it; valid during the callback. */
typedef struct ctrun_etcd_group_event {
    ctrun_etcd_group_event_kind_t kind;
    const ctrun_etcd_member_t *members; /* in join order */
    size_t nmembers;
    long self;         /* this node's index in members, -1 when it is not (FAILED) */
    int64_t round;     /* the current round, 0 before the first */
    const char *plan;  /* its plan, "" before the first */
    bool won;          /* PROPOSED: this node's proposal became the round */
    int rc;            /* FAILED (and a PROPOSED that could not be decided): the error */
    const char *error; /* one line, "" when rc == 0 */
    /* KEY: the key without the prefix, its value (NUL-terminated; "" when deleted) */
    const char *key, *value;
    size_t value_len;
    bool deleted;
} ctrun_etcd_group_event_t;

typedef void (*ctrun_etcd_group_cb)(void *data, const ctrun_etcd_group_event_t *ev);

/* Starts joining: returns 0 (JOINED or FAILED follows through cb), or an error with eb set
 * (bad options, the client's endpoints). */
int ctrun_etcd_group_join(uv_loop_t *loop, const ctrun_etcd_group_opts_t *opts,
                          ctrun_etcd_group_cb cb, void *data, ctrun_etcd_group_t **out,
                          ct_errbuf_t *eb);

/* Proposes round `round` with plan, winning only if the round key has not changed since this
 * node last saw it. PROPOSED follows (won or not); a win also brings ROUND to everyone.
 * Returns 0, CT_ESTATE before JOINED or after FAILED, -EINVAL for a plan with a newline. */
int ctrun_etcd_group_propose(ctrun_etcd_group_t *g, int64_t round, const char *plan);

/* Replaces this node's value (its key stays on the lease and keeps its join order); the others
 * see MEMBERS. Fire and forget: a node whose key is gone learns it through FAILED. Returns 0,
 * CT_ESTATE before JOINED or after FAILED, -ENOMEM. */
int ctrun_etcd_group_set_value(ctrun_etcd_group_t *g, const char *value);

/* This node's lease (0 before it was granted). */
int64_t ctrun_etcd_group_lease(const ctrun_etcd_group_t *g);

/* The etcd member ("host:port") the group's watch runs through now; "" while no watch is
 * confirmed. For logs, and for tests that take that member away. */
const char *ctrun_etcd_group_endpoint(const ctrun_etcd_group_t *g);

/* Leaves and frees the group: with revoke, the lease is revoked first (the member key goes at
 * once, the others see it; bounded by the client's request timeout), else the key stays until
 * the lease expires, as when the node dies. No callback after this call; the group is freed
 * from the loop once done. NULL is fine. */
void ctrun_etcd_group_close(ctrun_etcd_group_t *g, bool revoke);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_ETCD_GROUP_H */
