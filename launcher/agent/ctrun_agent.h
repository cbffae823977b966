/*
 * ctrun_agent.h - the ctrun agent: one node's share of a job, on one libuv loop.
 *
 * The agent hosts the rendezvous store (static node_rank 0, --standalone, or the c10d endpoint's
 * host) or reaches it as a client, meets the other agents (ctrun_rdzv.h), starts its workers
 * (ctrun_proc.h), supervises them, stops and restarts the whole job together with the other
 * nodes, prints the failure report, and returns the exit status. See ctrun_agent_step.c for
 * the states, events and the transition code, and docs/torchrun-compatibility.md §3 and §4 for
 * the life of a job (rendezvous, supervision, restarts, the end of the job).
 *
 * Threads: the loop's thread does everything; a non-hosting agent has two more threads inside
 * its store client (ctrun_kv.h) that only ever block on the network.
 */
#ifndef CTRUN_AGENT_H
#define CTRUN_AGENT_H

#include "ct_error.h"
#include "ctrun_cli.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exit statuses besides 0, 1 (job failed) and CTRUN_EXIT_USAGE (2): 128 + signal when a
 * handled signal stopped the job. */
#define CTRUN_EXIT_FAILED 1
/* The no-progress guard stopped the restarts (--progress_guard): the last K attempts of
 * heartbeating workers made no step progress, so restarting again would not help. */
#define CTRUN_EXIT_NO_PROGRESS 3

/* Runs the job of cfg until it ends and sets *exit_code to what ctrun exits with: 0 when every
 * worker of every node exited 0, 1 when the job failed (a worker with no restart left, a
 * rendezvous or store failure; the reason has been logged), 128+N after signal N. Returns 0
 * whenever it ran; a negative error only when no loop could be set up (eb). */
int ctrun_agent_run(const ctrun_config_t *cfg, int *exit_code, ct_errbuf_t *eb);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_AGENT_H */
