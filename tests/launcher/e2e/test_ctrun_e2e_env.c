/*
 * test_ctrun_e2e_env.c - what workers see: ctrun (argv[1]) runs the test worker (argv[2]),
 * which dumps its environment and argv, and the exact values of docs/torchrun-compatibility.md §2
 * are checked: one node with two workers, two static agents on 127.0.0.1 (node 1 started first,
 * different --nproc_per_node per node), --standalone, a c10d pair, the OMP_NUM_THREADS rule,
 * pass-through of the agent's own variables, the ${local_rank} macro, and the error-file paths.
 */
#include "ctrun_e2e.h"

static void expect_worker(const char *dir, int rank, const char *const *pairs)
{
    char *dump = e2e_read("%s/env.%d.0", dir, rank);
    CT_ASSERT_MSG(dump != NULL, "no env dump for rank %d in %s", rank, dir);
    for (size_t i = 0; pairs[i] != NULL; i += 2)
        E2E_ENV_EQ(dump, pairs[i], pairs[i + 1]);
    free(dump);
}

static void test_one_node_two_workers(void)
{
    char dir[600], logs[600], port[16], portarg[32];
    e2e_dir(dir, sizeof dir, "one");
    e2e_dir(logs, sizeof logs, "one_logs");
    snprintf(port, sizeof port, "%d", e2e_free_port());
    snprintf(portarg, sizeof portarg, "--master_port=%s", port);
    const char *const env[] = {"OMP_NUM_THREADS",
                               "FOO=bar",
                               "CUDA_VISIBLE_DEVICES=3,5",
                               "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                               "NCCL_ASYNC_ERROR_HANDLING",
                               "LOGLEVEL",
                               "CT_LOG_LEVEL",
                               NULL};
    const char *const args[] = {"--nproc_per_node=2",
                                portarg,
                                "--log_dir",
                                logs,
                                "--no_python",
                                "WORKER",
                                "--dir",
                                dir,
                                "--out",
                                "a${local_rank}b",
                                "--out",
                                "--nproc_per_node=9",
                                NULL};
    ct_child_t c;
    e2e_run(&c, env, args);
    CT_ASSERT_MSG(c.exit_code == 0, "exit %d, stderr:\n%s", c.exit_code, c.err);
    /* Console: the ${local_rank} macro and a flag-like argument passed through untouched. */
    CT_ASSERT_STR_CONTAINS(c.out, "a0b\n");
    CT_ASSERT_STR_CONTAINS(c.out, "a1b\n");
    CT_ASSERT_EQ(e2e_count(c.out, "--nproc_per_node=9\n"), 2);
    /* torchrun's OMP notice, once. */
    CT_ASSERT_EQ(e2e_count(c.err, "Setting OMP_NUM_THREADS environment variable for each process "
                                  "to be 1 in default"),
                 1);
    for (int r = 0; r < 2; r++) {
        char lr[8], efile_prefix[700];
        snprintf(lr, sizeof lr, "%d", r);
        const char *const pairs[] = {"RANK",
                                     lr,
                                     "LOCAL_RANK",
                                     lr,
                                     "GROUP_RANK",
                                     "0",
                                     "ROLE_RANK",
                                     lr,
                                     "ROLE_NAME",
                                     "default",
                                     "LOCAL_WORLD_SIZE",
                                     "2",
                                     "WORLD_SIZE",
                                     "2",
                                     "GROUP_WORLD_SIZE",
                                     "1",
                                     "ROLE_WORLD_SIZE",
                                     "2",
                                     "MASTER_ADDR",
                                     "127.0.0.1",
                                     "MASTER_PORT",
                                     port,
                                     "TORCHELASTIC_RESTART_COUNT",
                                     "0",
                                     "TORCHELASTIC_MAX_RESTARTS",
                                     "0",
                                     "TORCHELASTIC_RUN_ID",
                                     "none",
                                     "TORCHELASTIC_USE_AGENT_STORE",
                                     "True",
                                     "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                                     "1",
                                     "NCCL_ASYNC_ERROR_HANDLING",
                                     "1",
                                     "OMP_NUM_THREADS",
                                     "1",
                                     "FOO",
                                     "bar",
                                     "CUDA_VISIBLE_DEVICES",
                                     "3,5",
                                     "TORCHELASTIC_SIGNALS_TO_HANDLE",
                                     "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
                                     "CTRUN_HEARTBEAT_FD",
                                     "3",
                                     NULL};
        expect_worker(dir, r, pairs);
        /* <log_dir>/none_XXXXXXXX/attempt_0/<local_rank>/error.json: the folder exists, the
         * file does not. */
        char *dump = e2e_read("%s/env.%d.0", dir, r);
        char ef[4096];
        CT_ASSERT(e2e_env_get(dump, "TORCHELASTIC_ERROR_FILE", ef, sizeof ef) != NULL);
        snprintf(efile_prefix, sizeof efile_prefix, "%s/none_", logs);
        CT_ASSERT_MSG(strncmp(ef, efile_prefix, strlen(efile_prefix)) == 0, "error file %.1000s",
                      ef);
        const char *tail = ef + strlen(efile_prefix) + 8;
        char want_tail[64];
        snprintf(want_tail, sizeof want_tail, "/attempt_0/%d/error.json", r);
        CT_ASSERT_STR_EQ(tail, want_tail);
        E2E_ENV_EQ(dump, "FDS", "0,1,2,3"); /* stdio and the heartbeat pipe, nothing else */
        E2E_ENV_EQ(dump, "ERROR_FILE_DIR", "exists");
        E2E_ENV_EQ(dump, "ERROR_FILE", "missing");
        /* argv as given, with the macro replaced */
        char want[64];
        snprintf(want, sizeof want, "a%db", r);
        E2E_ENV_EQ(dump, "ARGV[4]", want);
        E2E_ENV_EQ(dump, "ARGV[6]", "--nproc_per_node=9");
        free(dump);
    }
    ct_child_close(&c);
}

static void test_two_static_nodes_node1_first(void)
{
    char d0[600], d1[600], portarg[32];
    e2e_dir(d0, sizeof d0, "two0");
    e2e_dir(d1, sizeof d1, "two1");
    int port = e2e_free_port();
    snprintf(portarg, sizeof portarg, "--master_port=%d", port);
    const char *const env[] = {"OMP_NUM_THREADS=4", NULL};
    const char *const a1[] = {"--nnodes=2",
                              "--node_rank=1",
                              "--nproc_per_node=1",
                              "--master_addr=127.0.0.1",
                              portarg,
                              "--log_dir=/dev/null",
                              "--no_python",
                              "WORKER",
                              "--dir",
                              d1,
                              NULL};
    const char *const a0[] = {"--nnodes=2",
                              "--node_rank=0",
                              "--nproc_per_node=2",
                              "--master_addr=127.0.0.1",
                              portarg,
                              "--log_dir=/dev/null",
                              "--no_python",
                              "WORKER",
                              "--dir",
                              d0,
                              NULL};
    ct_child_t c1, c0;
    e2e_start(&c1, env, a1);
    ct_sleep_ms(300); /* node 1 waits for node 0's store */
    CT_ASSERT_EQ(e2e_count_starts(d1, -1), 0);
    e2e_run(&c0, env, a0);
    CT_ASSERT_OK(ct_child_wait(&c1, 60000));
    CT_ASSERT_MSG(c0.exit_code == 0, "node 0 exit %d:\n%s", c0.exit_code, c0.err);
    CT_ASSERT_MSG(c1.exit_code == 0, "node 1 exit %d:\n%s", c1.exit_code, c1.err);
    char p[16];
    snprintf(p, sizeof p, "%d", port);
    for (int r = 0; r < 3; r++) {
        char rs[8], lr[8];
        snprintf(rs, sizeof rs, "%d", r);
        snprintf(lr, sizeof lr, "%d", r < 2 ? r : 0);
        const char *const pairs[] = {"RANK",
                                     rs,
                                     "LOCAL_RANK",
                                     lr,
                                     "GROUP_RANK",
                                     r < 2 ? "0" : "1",
                                     "ROLE_RANK",
                                     rs,
                                     "LOCAL_WORLD_SIZE",
                                     r < 2 ? "2" : "1",
                                     "WORLD_SIZE",
                                     "3",
                                     "GROUP_WORLD_SIZE",
                                     "2",
                                     "ROLE_WORLD_SIZE",
                                     "3",
                                     "MASTER_ADDR",
                                     "127.0.0.1",
                                     "MASTER_PORT",
                                     p,
                                     "OMP_NUM_THREADS",
                                     "4",
                                     "TORCHELASTIC_ERROR_FILE",
                                     "",
                                     NULL};
        expect_worker(r < 2 ? d0 : d1, r, pairs);
    }
    CT_ASSERT_STR_NOT_CONTAINS(c0.err, "Setting OMP_NUM_THREADS");
    ct_child_close(&c0);
    ct_child_close(&c1);
}

static void test_standalone(void)
{
    char dir[600];
    e2e_dir(dir, sizeof dir, "standalone");
    const char *const args[] = {"--standalone",
                                "--nproc_per_node=1",
                                "--log_dir=/dev/null",
                                "--no_python",
                                "WORKER",
                                "--dir",
                                dir,
                                NULL};
    ct_child_t c;
    e2e_run(&c, NULL, args);
    CT_ASSERT_MSG(c.exit_code == 0, "exit %d:\n%s", c.exit_code, c.err);
    char *dump = e2e_read("%s/env.0.0", dir);
    CT_ASSERT(dump != NULL);
    char v[256];
    CT_ASSERT(e2e_env_get(dump, "MASTER_PORT", v, sizeof v) != NULL);
    int port = atoi(v);
    CT_ASSERT_MSG(port > 0 && port != 29400 && port != 29500, "MASTER_PORT %s", v);
    E2E_ENV_EQ(dump, "MASTER_ADDR", "localhost");
    CT_ASSERT(e2e_env_get(dump, "TORCHELASTIC_RUN_ID", v, sizeof v) != NULL);
    CT_ASSERT_EQ(strlen(v), 36); /* a uuid4 */
    CT_ASSERT(v[8] == '-' && v[13] == '-' && v[14] == '4');
    E2E_ENV_EQ(dump, "TORCHELASTIC_USE_AGENT_STORE", "True");
    E2E_ENV_EQ(dump, "WORLD_SIZE", "1");
    /* nproc 1: no notice, and OMP_NUM_THREADS untouched (absent unless inherited). */
    CT_ASSERT_STR_NOT_CONTAINS(c.err, "Setting OMP_NUM_THREADS");
    free(dump);
    ct_child_close(&c);
}

static void test_c10d_pair(void)
{
    char d[2][600], ep[64];
    e2e_dir(d[0], sizeof d[0], "c10d_a");
    e2e_dir(d[1], sizeof d[1], "c10d_b");
    snprintf(ep, sizeof ep, "--rdzv_endpoint=127.0.0.1:%d", e2e_free_port());
    ct_child_t c[2];
    for (int i = 0; i < 2; i++) {
        const char *const args[] = {"--rdzv_backend=c10d",
                                    ep,
                                    "--rdzv_id=job42",
                                    "--nnodes=2",
                                    "--nproc_per_node=2",
                                    "--log_dir=/dev/null",
                                    "--no_python",
                                    "WORKER",
                                    "--dir",
                                    d[i],
                                    NULL};
        const char *const env[] = {"CT_LOG_LEVEL=debug", NULL};
        e2e_start(&c[i], env, args);
    }
    for (int i = 0; i < 2; i++) {
        int rc = ct_child_wait(&c[i], 60000);
        CT_ASSERT_MSG(rc == 0, "agent %d timed out:\n%s\nthe other:\n%s", i, c[i].err,
                      c[1 - i].err ? c[1 - i].err : "(still running)");
        CT_ASSERT_MSG(c[i].exit_code == 0, "agent %d exit %d:\n%s", i, c[i].exit_code, c[i].err);
    }
    /* The ranks 0..3 are split between the two agents by join order, two per agent. */
    int group_of_rank[4] = {-1, -1, -1, -1};
    char port0[16] = "";
    for (int i = 0; i < 2; i++) {
        for (int r = 0; r < 4; r++) {
            char *dump = e2e_read("%s/env.%d.0", d[i], r);
            if (dump == NULL)
                continue;
            char v[64];
            CT_ASSERT(group_of_rank[r] < 0);
            group_of_rank[r] = atoi(e2e_env_get(dump, "GROUP_RANK", v, sizeof v));
            E2E_ENV_EQ(dump, "WORLD_SIZE", "4");
            E2E_ENV_EQ(dump, "GROUP_WORLD_SIZE", "2");
            E2E_ENV_EQ(dump, "TORCHELASTIC_RUN_ID", "job42");
            E2E_ENV_EQ(dump, "MASTER_ADDR", "127.0.0.1");
            e2e_env_get(dump, "MASTER_PORT", v, sizeof v);
            if (port0[0] == '\0')
                snprintf(port0, sizeof port0, "%.15s", v);
            CT_ASSERT_STR_EQ(v, port0);
            free(dump);
        }
    }
    CT_ASSERT_EQ(group_of_rank[0], 0);
    CT_ASSERT_EQ(group_of_rank[1], 0);
    CT_ASSERT_EQ(group_of_rank[2], 1);
    CT_ASSERT_EQ(group_of_rank[3], 1);
    ct_child_close(&c[0]);
    ct_child_close(&c[1]);
}

static void test_python_command_line(void)
{
    /* A .py script runs as `<python> -u script args`; a fake interpreter shows its argv. */
    char dir[600], py[700], script[720];
    e2e_dir(dir, sizeof dir, "python");
    snprintf(py, sizeof py, "%s/fakepython", dir);
    FILE *f = fopen(py, "w");
    CT_ASSERT(f != NULL);
    fprintf(f, "#!/bin/sh\nexec \"%s\" --dir \"%s\" \"$@\"\n", e2e_worker, dir);
    fclose(f);
    chmod(py, 0755);
    snprintf(script, sizeof script, "--python=%s", py);
    const char *const args[] = {"--nproc_per_node=1",
                                "--master_port=0",
                                "--log_dir=/dev/null",
                                script,
                                "train.py",
                                "--sleep-ms",
                                "0",
                                NULL};
    ct_child_t c;
    e2e_run(&c, NULL, args);
    CT_ASSERT_MSG(c.exit_code == 0, "exit %d:\n%s", c.exit_code, c.err);
    char *dump = e2e_read("%s/env.0.0", dir);
    CT_ASSERT(dump != NULL);
    E2E_ENV_EQ(dump, "ARGV[3]", "-u");
    E2E_ENV_EQ(dump, "ARGV[4]", "train.py");
    E2E_ENV_EQ(dump, "ARGV[5]", "--sleep-ms");
    free(dump);
    ct_child_close(&c);
}

int main(int argc, char **argv)
{
    e2e_init(argc, argv, "test_ctrun_e2e_env");
    CT_RUN(test_one_node_two_workers);
    CT_RUN(test_two_static_nodes_node1_first);
    CT_RUN(test_standalone);
    CT_RUN(test_c10d_pair);
    CT_RUN(test_python_command_line);
    return 0;
}
