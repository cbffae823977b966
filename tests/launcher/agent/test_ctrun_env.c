/*
 * test_ctrun_env.c - worker environments, exact values: one node with 2 workers (the values
 * observed from torchrun 1.13, docs/torchrun-compatibility.md §2.1), two nodes with 2 and 3
 * workers, OMP_NUM_THREADS and the NCCL variables with and without preset values, the agent's own
 * variables passed through, duplicates collapsed, and the heartbeat fd slot.
 */
#include <stdlib.h>

#include "ct_test.h"
#include "ctrun_cmd.h"
#include "ctrun_env.h"

static const char *ct__get(char **envp, const char *name)
{
    size_t n = strlen(name);
    const char *found = NULL;
    int count = 0;
    for (char **e = envp; *e != NULL; e++) {
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') {
            found = *e + n + 1;
            count++;
        }
    }
    CT_ASSERT_MSG(count <= 1, "%s appears %d times", name, count);
    return found;
}

static void ct__env_config(ctrun_config_t *cfg, int nargs, char **args, const char *const *env)
{
    char *argv[16] = {"ctrun"};
    for (int i = 0; i < nargs; i++)
        argv[i + 1] = args[i];
    ctrun_cli_action_t action;
    ct_errbuf_t eb = {{0}};
    int rc = ctrun_cli_parse(nargs + 1, argv, env, cfg, &action, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
}

#define CT_ENV_IS(envp, name, value) CT_ASSERT_STR_EQ(ct__get(envp, name), value)

static void test_one_node_two_workers(void)
{
    const char *base[] = {"PATH=/usr/bin:/bin", "FOO=bar", "CUDA_VISIBLE_DEVICES=0,1",
                          "PET_NPROC_PER_NODE=2", NULL};
    ctrun_config_t cfg;
    char *args[] = {"--master_port=29500", "--no_python", "./w.sh"};
    ct__env_config(&cfg, 3, args, base);
    for (int lr = 0; lr < 2; lr++) {
        ctrun_worker_info_t w;
        ctrun_worker_info_init(&w, &cfg);
        w.local_rank = lr;
        w.rank = lr;
        w.role_rank = lr;
        char path[64];
        snprintf(path, sizeof path, "/logs/none_abcdefgh/attempt_0/%d/error.json", lr);
        w.error_file = path;
        char **envp;
        CT_ASSERT_OK(ctrun_env_build(base, &w, &envp));
        char lrs[8];
        snprintf(lrs, sizeof lrs, "%d", lr);
        CT_ENV_IS(envp, "LOCAL_RANK", lrs);
        CT_ENV_IS(envp, "RANK", lrs);
        CT_ENV_IS(envp, "GROUP_RANK", "0");
        CT_ENV_IS(envp, "ROLE_RANK", lrs);
        CT_ENV_IS(envp, "ROLE_NAME", "default");
        CT_ENV_IS(envp, "LOCAL_WORLD_SIZE", "2");
        CT_ENV_IS(envp, "WORLD_SIZE", "2");
        CT_ENV_IS(envp, "GROUP_WORLD_SIZE", "1");
        CT_ENV_IS(envp, "ROLE_WORLD_SIZE", "2");
        CT_ENV_IS(envp, "MASTER_ADDR", "127.0.0.1");
        CT_ENV_IS(envp, "MASTER_PORT", "29500");
        CT_ENV_IS(envp, "TORCHELASTIC_RESTART_COUNT", "0");
        CT_ENV_IS(envp, "TORCHELASTIC_MAX_RESTARTS", "0");
        CT_ENV_IS(envp, "TORCHELASTIC_RUN_ID", "none");
        CT_ENV_IS(envp, "TORCHELASTIC_USE_AGENT_STORE", "True");
        CT_ENV_IS(envp, "TORCHELASTIC_ERROR_FILE", path);
        CT_ENV_IS(envp, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
        CT_ENV_IS(envp, "NCCL_ASYNC_ERROR_HANDLING", "1");
        CT_ENV_IS(envp, "OMP_NUM_THREADS", "1");
        CT_ENV_IS(envp, "TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
        /* The agent's own environment passes through unchanged, in its order, first. */
        CT_ASSERT_STR_EQ(envp[0], "PATH=/usr/bin:/bin");
        CT_ASSERT_STR_EQ(envp[1], "FOO=bar");
        CT_ASSERT_STR_EQ(envp[2], "CUDA_VISIBLE_DEVICES=0,1");
        CT_ASSERT_STR_EQ(envp[3], "PET_NPROC_PER_NODE=2");
        CT_ASSERT(ct__get(envp, "CTRUN_HEARTBEAT_FD") == NULL);
        int n = 0;
        while (envp[n] != NULL)
            n++;
        CT_ASSERT_EQ(n, 4 + 20); /* base + every variable of the overlay except the fd */
        ctrun_argv_free(envp);
    }
    CT_ASSERT(ctrun_env_omp_notice_needed(base, 2));
    ctrun_config_free(&cfg);
}

/* Two static nodes, node 0 with 2 workers and node 1 with 3: ranks are offset by the workers
 * of the nodes before (the rendezvous computes the offsets; here they are given). */
static void test_two_nodes_different_nproc(void)
{
    const char *base[] = {"HOME=/root", NULL};
    const int nproc[2] = {2, 3}, base_rank[2] = {0, 2};
    for (int node = 0; node < 2; node++) {
        ctrun_config_t cfg;
        char nn[] = "--nnodes=2", np[32], nr[32], port[] = "--master_port=4321",
             addr[] = "--master_addr=10.0.0.1", restarts[] = "--max_restarts=3", s[] = "w.py";
        snprintf(np, sizeof np, "--nproc_per_node=%d", nproc[node]);
        snprintf(nr, sizeof nr, "--node_rank=%d", node);
        char *args[] = {nn, np, nr, port, addr, restarts, s};
        ct__env_config(&cfg, 7, args, base);
        for (int lr = 0; lr < nproc[node]; lr++) {
            ctrun_worker_info_t w;
            ctrun_worker_info_init(&w, &cfg);
            w.local_rank = lr;
            w.rank = w.role_rank = base_rank[node] + lr;
            w.group_rank = node;
            w.group_world_size = 2;
            w.world_size = w.role_world_size = 5;
            w.restart_count = 1;
            char **envp;
            CT_ASSERT_OK(ctrun_env_build(base, &w, &envp));
            char want[16];
            snprintf(want, sizeof want, "%d", base_rank[node] + lr);
            CT_ENV_IS(envp, "RANK", want);
            CT_ENV_IS(envp, "ROLE_RANK", want);
            snprintf(want, sizeof want, "%d", lr);
            CT_ENV_IS(envp, "LOCAL_RANK", want);
            snprintf(want, sizeof want, "%d", node);
            CT_ENV_IS(envp, "GROUP_RANK", want);
            snprintf(want, sizeof want, "%d", nproc[node]);
            CT_ENV_IS(envp, "LOCAL_WORLD_SIZE", want);
            CT_ENV_IS(envp, "WORLD_SIZE", "5");
            CT_ENV_IS(envp, "ROLE_WORLD_SIZE", "5");
            CT_ENV_IS(envp, "GROUP_WORLD_SIZE", "2");
            CT_ENV_IS(envp, "MASTER_ADDR", "10.0.0.1");
            CT_ENV_IS(envp, "MASTER_PORT", "4321");
            CT_ENV_IS(envp, "TORCHELASTIC_RESTART_COUNT", "1");
            CT_ENV_IS(envp, "TORCHELASTIC_MAX_RESTARTS", "3");
            CT_ENV_IS(envp, "TORCHELASTIC_ERROR_FILE", "");
            CT_ENV_IS(envp, "OMP_NUM_THREADS", "1");
            ctrun_argv_free(envp);
        }
        ctrun_config_free(&cfg);
    }
}

static void test_presets_are_kept(void)
{
    const char *base[] = {"OMP_NUM_THREADS=4",
                          "TORCH_NCCL_ASYNC_ERROR_HANDLING=0",
                          "NCCL_ASYNC_ERROR_HANDLING=3",
                          "RANK=99",
                          "WORLD_SIZE=98",
                          "RANK=97",
                          "CTRUN_HEARTBEAT_FD=12",
                          "MASTER_PORT=1",
                          "CTRUN_JOB_TAG=enclosing",
                          NULL};
    ctrun_config_t cfg;
    char *args[] = {"--nproc_per_node=4", "--role=trainer", "--rdzv_id=job", "--master_port=29500",
                    "x.py"};
    ct__env_config(&cfg, 5, args, base);
    ctrun_worker_info_t w;
    ctrun_worker_info_init(&w, &cfg);
    w.rank = 3;
    w.local_rank = 3;
    char **envp;
    CT_ASSERT_OK(ctrun_env_build(base, &w, &envp));
    CT_ENV_IS(envp, "OMP_NUM_THREADS", "4");
    CT_ENV_IS(envp, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "0");
    CT_ENV_IS(envp, "NCCL_ASYNC_ERROR_HANDLING", "3");
    CT_ENV_IS(envp, "RANK", "3"); /* both inherited copies replaced by one */
    CT_ENV_IS(envp, "WORLD_SIZE", "4");
    CT_ENV_IS(envp, "ROLE_NAME", "trainer");
    CT_ENV_IS(envp, "TORCHELASTIC_RUN_ID", "job");
    CT_ENV_IS(envp, "MASTER_PORT", "29500");
    CT_ASSERT_STR_EQ(envp[0], "OMP_NUM_THREADS=4");
    CT_ASSERT_STR_EQ(envp[3], "RANK=3"); /* replaced where the first copy was */
    /* An inherited heartbeat fd is not the worker's: removed unless the agent passes one. */
    CT_ASSERT(ct__get(envp, "CTRUN_HEARTBEAT_FD") == NULL);
    /* An enclosing job's tag is not this job's: the reaper must not take this job for it. */
    CT_ASSERT(ct__get(envp, "CTRUN_JOB_TAG") == NULL);
    ctrun_argv_free(envp);
    CT_ASSERT(!ctrun_env_omp_notice_needed(base, 4));

    w.heartbeat_fd = 5;
    w.signals_to_handle = NULL;
    w.job_tag = "0123456789abcdef0123456789abcdef";
    w.timer_file = "/tmp/ctrun-timer-1";
    CT_ASSERT_OK(ctrun_env_build(base, &w, &envp));
    CT_ENV_IS(envp, "TORCHELASTIC_TIMER_FILE", "/tmp/ctrun-timer-1");
    CT_ENV_IS(envp, "CTRUN_HEARTBEAT_FD", "5");
    CT_ENV_IS(envp, "CTRUN_JOB_TAG", "0123456789abcdef0123456789abcdef");
    CT_ASSERT(ct__get(envp, "TORCHELASTIC_SIGNALS_TO_HANDLE") == NULL);
    ctrun_argv_free(envp);
    ctrun_config_free(&cfg);
}

static void test_single_worker_has_no_omp(void)
{
    const char *base[] = {NULL};
    ctrun_config_t cfg;
    char *args[] = {"x.py"};
    ct__env_config(&cfg, 1, args, base);
    ctrun_worker_info_t w;
    ctrun_worker_info_init(&w, &cfg);
    char **envp;
    CT_ASSERT_OK(ctrun_env_build(base, &w, &envp));
    CT_ASSERT(ct__get(envp, "OMP_NUM_THREADS") == NULL);
    CT_ENV_IS(envp, "WORLD_SIZE", "1");
    ctrun_argv_free(envp);
    CT_ASSERT(!ctrun_env_omp_notice_needed(base, 1));
    ctrun_config_free(&cfg);
}

static void test_omp_notice_text(void)
{
    const char *n = ctrun_env_omp_notice();
    const char *stars = "*****************************************";
    CT_ASSERT_EQ(strlen(stars), 41);
    CT_ASSERT_EQ(strncmp(n, stars, 41), 0);
    CT_ASSERT_EQ(n[41], '\n');
    CT_ASSERT_STR_CONTAINS(n, "Setting OMP_NUM_THREADS environment variable for each process to "
                              "be 1 in default, to avoid your system being overloaded, please "
                              "further tune the variable for optimal performance in your "
                              "application as needed. \n");
    CT_ASSERT_STR_EQ(n + strlen(n) - 42, "\n*****************************************");
}

/* --virtual_local_rank: LOCAL_RANK=0 and the worker's one device in CUDA_VISIBLE_DEVICES (and
 * HIP_VISIBLE_DEVICES when the agent has that list). */
static void test_virtual_local_rank(void)
{
    const char *base[] = {"CUDA_VISIBLE_DEVICES=4,5", "PATH=/bin", NULL};
    ctrun_config_t cfg;
    char *args[] = {"--virtual_local_rank", "--nproc_per_node=2", "--master_port=29500", "x.py"};
    ct__env_config(&cfg, 4, args, base);
    ctrun_worker_info_t w;
    ctrun_worker_info_init(&w, &cfg);
    w.local_rank = 1;
    w.rank = 1;
    w.device = cfg.virtual_devices[1];
    w.device_hip = cfg.virtual_hip;
    char **envp;
    CT_ASSERT_OK(ctrun_env_build(base, &w, &envp));
    CT_ENV_IS(envp, "LOCAL_RANK", "0");
    CT_ENV_IS(envp, "RANK", "1");
    CT_ENV_IS(envp, "CUDA_VISIBLE_DEVICES", "5");
    CT_ASSERT(ct__get(envp, "HIP_VISIBLE_DEVICES") == NULL);
    ctrun_argv_free(envp);
    ctrun_config_free(&cfg);

    const char *hip[] = {"HIP_VISIBLE_DEVICES=6,7", NULL};
    ct__env_config(&cfg, 4, args, hip);
    ctrun_worker_info_init(&w, &cfg);
    w.local_rank = 1;
    w.device = cfg.virtual_devices[1];
    w.device_hip = cfg.virtual_hip;
    CT_ASSERT_OK(ctrun_env_build(hip, &w, &envp));
    CT_ENV_IS(envp, "CUDA_VISIBLE_DEVICES", "7");
    CT_ENV_IS(envp, "HIP_VISIBLE_DEVICES", "7");
    ctrun_argv_free(envp);
    ctrun_config_free(&cfg);
}

int main(void)
{
    CT_RUN(test_one_node_two_workers);
    CT_RUN(test_two_nodes_different_nproc);
    CT_RUN(test_presets_are_kept);
    CT_RUN(test_single_worker_has_no_omp);
    CT_RUN(test_omp_notice_text);
    CT_RUN(test_virtual_local_rank);
    return 0;
}
