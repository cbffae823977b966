/*
 * ctrun_inject.h - ctrun's fault injection (--inject SPEC[;SPEC...], --inject_seed N): the
 * grammar of a spec, the seeded choices (which rank for rank=any, which checkpoint phase for
 * phase=any), which spec is still pending, and the CTRUN_INJECT text that arms one worker.
 *
 *   kill:rank=R|any:at=step=N      the rank dies by SIGKILL when it reports step N
 *   kill:rank=R|any:at=time=T      ... T after ctrun started (sent by the agent)
 *   kill:rank=R|any:every=T[:count=K]  T after each attempt's workers started (K times at most)
 *   hang:rank=R|any:at=step=N|at=time=T|every=T   the same with SIGSTOP (for the watchdog)
 *   torn_ckpt:at=step=N[:rank=R][:phase=data|file|latest|any]
 *                                  SIGKILL inside the first checkpoint write at a step >= N
 *                                  by rank R (default 0, the usual writer)
 *   kill_agent:node=N:at=time=T    the agent of node N kills itself (SIGKILL) at T
 *
 * T is seconds with an optional unit (500ms, 5s, 2.5, 1m). Each spec fires once per job (an
 * every= spec once per period, up to count=), so a restarted attempt replays the steps without
 * the fault. Step triggers are executed by the worker (libctworker, CTRUN_INJECT) because only
 * it knows when it reaches a step; at most one is armed per rank and attempt, the lowest step
 * first. The agent does everything else (ctrun_agent.c).
 *
 * Deliberately not here: timers, signals and the bookkeeping of what fired (the agent's).
 */
#ifndef CTRUN_INJECT_H
#define CTRUN_INJECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ctrun_inject_kind {
    CTRUN_INJECT_KILL = 0,
    CTRUN_INJECT_HANG,
    CTRUN_INJECT_TORN,
    CTRUN_INJECT_KILL_AGENT,
} ctrun_inject_kind_t;

typedef enum ctrun_inject_trigger {
    CTRUN_INJECT_AT_STEP = 0,
    CTRUN_INJECT_AT_TIME,
    CTRUN_INJECT_EVERY,
} ctrun_inject_trigger_t;

#define CTRUN_INJECT_ANY       (-1) /* rank=any / phase=any */
#define CTRUN_INJECT_TEXT_MAX  96

typedef struct ctrun_inject_spec {
    ctrun_inject_kind_t kind;
    ctrun_inject_trigger_t trigger;
    int rank;        /* CTRUN_INJECT_ANY or a global rank */
    int node;        /* kill_agent: the group rank */
    int64_t step;    /* AT_STEP */
    double seconds;  /* AT_TIME: since ctrun started; EVERY: the period within an attempt */
    int count;       /* EVERY: at most this many firings; 0 = no limit */
    int phase;       /* TORN: a ct_inject_ckpt_phase_t, or CTRUN_INJECT_ANY */
    int fired;       /* how often it fired so far (the agent counts) */
    char text[CTRUN_INJECT_TEXT_MAX]; /* the spec as given (shortened), for messages */
} ctrun_inject_spec_t;

typedef struct ctrun_inject {
    ctrun_inject_spec_t *specs;
    size_t n;
    uint64_t seed;
} ctrun_inject_t;

/* Parses "SPEC[;SPEC...]" (empty parts are skipped). Errors: CT_EPARSE / CT_ERANGE_VALUE with
 * one line naming the spec ("--inject: spec 2 \"kill:rank=x\": rank: ..."). On failure *inj
 * is empty. Free with ctrun_inject_free. */
int ctrun_inject_parse(const char *text, uint64_t seed, ctrun_inject_t *inj, ct_errbuf_t *eb);

/* Rejects a spec that cannot fire in a job of at most max_nodes nodes and max_world ranks: a
 * kill_agent node at or above max_nodes, or a rank (rank=, torn_ckpt's rank) at or above
 * max_world. max_world < 0: not known before the rendezvous (nodes may run different
 * --nproc_per_node counts), ranks are not checked. Error: CT_ERANGE_VALUE with one line naming
 * the spec and the job's size. */
int ctrun_inject_check(const ctrun_inject_t *inj, int max_nodes, long long max_world,
                       ct_errbuf_t *eb);

/* The rank spec i names when it names one that an attempt of world_size ranks does not have,
 * else -1 (rank=any, kill_agent, or a rank that exists). */
int ctrun_inject_missing_rank(const ctrun_inject_t *inj, size_t i, int world_size);

/* A deep copy of src into *dst (the agent counts firings in its own copy). Returns 0 or
 * -ENOMEM (then *dst is empty). */
int ctrun_inject_copy(ctrun_inject_t *dst, const ctrun_inject_t *src);

void ctrun_inject_free(ctrun_inject_t *inj);

/* True while spec i may still fire. */
bool ctrun_inject_pending(const ctrun_inject_t *inj, size_t i);

/* The rank spec i hits on its next firing: its rank=, or for rank=any a draw from the seed,
 * the spec's index and its firing count (so every agent of the job draws the same). */
int ctrun_inject_rank(const ctrun_inject_t *inj, size_t i, int world_size);

/* The checkpoint phase of torn spec i's next firing (a seeded draw for phase=any). */
int ctrun_inject_phase(const ctrun_inject_t *inj, size_t i);

/* The step-triggered fault to arm for global rank `rank` in this attempt: writes its
 * CTRUN_INJECT value ("kill@50", "stop@80", "torn@100:data") into buf and returns the spec's
 * index, or returns -1 (buf "") when none is pending for that rank. */
int ctrun_inject_arm(const ctrun_inject_t *inj, int rank, int world_size, char *buf,
                     size_t size);

/* "kill", "hang", "torn_ckpt" or "kill_agent". */
const char *ctrun_inject_kind_name(ctrun_inject_kind_t kind);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_INJECT_H */
