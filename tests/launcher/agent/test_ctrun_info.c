/*
 * test_ctrun_info.c - the LOGLEVEL=INFO blocks: the launch configuration (rdzv_configs as
 * torchrun 1.13 builds it: user keys, "rank" overwritten by --node_rank, "timeout" 900
 * appended - checked against config_from_args output) and the rendezvous result of a node.
 */
#include <stdlib.h>

#include "ct_test.h"
#include "ctrun_info.h"

static void ct__info_config(ctrun_config_t *cfg, int nargs, char **args)
{
    char *argv[16] = {"ctrun"};
    for (int i = 0; i < nargs; i++)
        argv[i + 1] = args[i];
    const char *const env[] = {NULL};
    ctrun_cli_action_t action;
    ct_errbuf_t eb = {{0}};
    int rc = ctrun_cli_parse(nargs + 1, argv, env, cfg, &action, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
}

static void test_launch_config(void)
{
    ctrun_config_t cfg;
    char *args[] = {"--nproc_per_node=2",
                    "--rdzv_conf",
                    "join_timeout=5,rank=3",
                    "--max_restarts",
                    "1",
                    "--node_rank",
                    "1",
                    "--nnodes",
                    "2",
                    "w.py"};
    ct__info_config(&cfg, 10, args);
    char *text = NULL;
    CT_ASSERT_OK(ctrun_info_launch_config(&cfg, &text));
    CT_ASSERT_STR_EQ(text, "Starting elastic_operator with launch configs:\n"
                           "  entrypoint       : w.py\n"
                           "  min_nodes        : 2\n"
                           "  max_nodes        : 2\n"
                           "  nproc_per_node   : 2\n"
                           "  run_id           : none\n"
                           "  rdzv_backend     : static\n"
                           "  rdzv_endpoint    : 127.0.0.1:29500\n"
                           "  rdzv_configs     : {'join_timeout': '5', 'rank': 1, 'timeout': 900}\n"
                           "  max_restarts     : 1\n"
                           "  monitor_interval : 0.1\n"
                           "  log_dir          : None\n"
                           "  metrics_cfg      : {}");
    free(text);
    ctrun_config_free(&cfg);

    char *args2[] = {"--standalone", "--log_dir=/l", "--rdzv_conf=timeout=20", "./bin"};
    ct__info_config(&cfg, 4, args2);
    CT_ASSERT_OK(ctrun_info_launch_config(&cfg, &text));
    CT_ASSERT_STR_CONTAINS(text, "  rdzv_backend     : c10d\n"
                                 "  rdzv_endpoint    : localhost:0\n"
                                 "  rdzv_configs     : {'timeout': '20'}\n");
    CT_ASSERT_STR_CONTAINS(text, "  entrypoint       : ./bin\n");
    CT_ASSERT_STR_CONTAINS(text, "  log_dir          : /l\n");
    free(text);
    ctrun_config_free(&cfg);
}

static void test_rendezvous_result(void)
{
    ctrun_config_t cfg;
    char *args[] = {"--nproc_per_node=2", "--nnodes=2", "--node_rank=1", "--role=trainer", "w.py"};
    ct__info_config(&cfg, 5, args);
    ctrun_worker_info_t w[2];
    for (int i = 0; i < 2; i++) {
        ctrun_worker_info_init(&w[i], &cfg);
        w[i].local_rank = i;
        w[i].rank = w[i].role_rank = 3 + i;
        w[i].group_rank = 1;
        w[i].group_world_size = 2;
        w[i].world_size = w[i].role_world_size = 5;
        w[i].restart_count = 2;
    }
    char *text = NULL;
    CT_ASSERT_OK(ctrun_info_rendezvous(w, 2, &text));
    CT_ASSERT_STR_EQ(text, "[trainer] Rendezvous complete for workers. Result:\n"
                           "  restart_count=2\n"
                           "  master_addr=127.0.0.1\n"
                           "  master_port=29500\n"
                           "  group_rank=1\n"
                           "  group_world_size=2\n"
                           "  local_ranks=[0, 1]\n"
                           "  role_ranks=[3, 4]\n"
                           "  global_ranks=[3, 4]\n"
                           "  role_world_sizes=[5, 5]\n"
                           "  global_world_sizes=[5, 5]");
    free(text);
    ctrun_config_free(&cfg);
}

int main(void)
{
    CT_RUN(test_launch_config);
    CT_RUN(test_rendezvous_result);
    return 0;
}
