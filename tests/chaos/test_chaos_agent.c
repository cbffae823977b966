/*
 * test_chaos_agent.c - an agent killed (kill_agent:node=1:at=time=T): a 2-node static job (two
 * agents on this machine, one ctrain rank each) loses node 1's agent to SIGKILL; its worker dies
 * with it (parent-death signal), node 0's rank sees its ring peer close the connection and
 * fails, and node 0 learns from the missing heartbeats that node 1 is lost (a static job cannot
 * go on without it), so the job ends with status 1 in bounded time - and no process of either
 * node survives.
 */
#include <stdio.h>
#include <stdlib.h>

#include "chaos.h"
#include "ctrun_e2e.h"

static void test_kill_agent(void)
{
    char dir[600], logs[600], port[32];
    chaos_dir(dir, sizeof dir, "train");
    chaos_dir(logs, sizeof logs, "logs0");
    snprintf(port, sizeof port, "--master_port=%d", e2e_free_port());
    const char *env[] = {"CT_CHAOS_TAG=agent-kill", "CTRUN_COMM_ADDR=127.0.0.1",
                         "CTRUN_COMM_TIMEOUT=20", NULL};
    ct_child_t node[2];
    for (int k = 1; k >= 0; k--) {
        const char *rank = k ? "--node_rank=1" : "--node_rank=0";
        const char *args[] = {chaos_ctrun, "--nnodes=2", "--nproc_per_node=1", port, rank,
                              "--max_restarts=1", "--rdzv_conf", "timeout=5", "--log_dir",
                              k ? "/dev/null" : logs, "--inject",
                              "kill_agent:node=1:at=time=1500ms", CHAOS_TRAIN_ARGS(dir, "200"),
                              NULL};
        char *argv[64];
        size_t n = 0;
        for (size_t i = 0; args[i] != NULL; i++)
            argv[n++] = (char *)(strcmp(args[i], "CTRAIN") == 0 ? chaos_ctrain : args[i]);
        argv[n] = NULL;
        ct_child_opts_t opts = {.env = env};
        CT_ASSERT_OK(ct_child_start(&node[k], argv, &opts));
    }
    CT_ASSERT_OK(ct_child_wait_all(node, 2, 180000));
    CT_ASSERT_MSG(node[1].term_signal == SIGKILL, "node 1: exit %d signal %d\n%.1500s",
                  node[1].exit_code, node[1].term_signal, chaos_tail(&node[1]));
    CT_ASSERT_STR_CONTAINS(node[1].err, "killing this agent (node 1");
    CT_ASSERT_MSG(node[0].exit_code == 1, "node 0: exit %d\n%.1500s", node[0].exit_code,
                  chaos_tail(&node[0]));
    CT_ASSERT_STR_CONTAINS(node[0].err, "node 1 (");
    CT_ASSERT_STR_CONTAINS(node[0].err, "was lost");
    json_t *r = chaos_report(logs);
    CT_ASSERT_EQ(chaos_count_causes(r, "exit 1"), 1);
    json_decref(r);
    ct_child_close(&node[0]);
    ct_child_close(&node[1]);
    chaos_assert_no_survivors("agent-kill", 10000);
}

int main(int argc, char **argv)
{
    chaos_init(argc, argv, "chaos_agent");
    CT_RUN(test_kill_agent);
    return 0;
}
