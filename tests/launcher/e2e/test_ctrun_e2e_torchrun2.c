/*
 * test_ctrun_e2e_torchrun2.c - torchrun 2.x's newest behaviour in real jobs: ctrun (argv[1])
 * runs the test worker (argv[2]).
 *
 *   - two single-node jobs without a port, started at once, both finish, each on its own free
 *     port, which is the MASTER_PORT its workers see;
 *   - the ChildFailedError line before the failure report, on every node of a failed job;
 *   - the interpreter of an active virtual environment, and the INFO line that names it.
 */
#include "ctrun_e2e.h"

static void test_two_single_node_jobs_at_once(void)
{
    char d[2][600];
    ct_child_t c[2];
    for (int i = 0; i < 2; i++) {
        e2e_dir(d[i], sizeof d[i], i == 0 ? "job_a" : "job_b");
        const char *const args[] = {"--nproc_per_node=2", "--log_dir=/dev/null", "--no_python",
                                    "WORKER", "--dir", d[i], "--sleep-ms", "1500", NULL};
        const char *const env[] = {"LOGLEVEL=INFO", "CT_LOG_LEVEL", NULL};
        e2e_start(&c[i], env, args);
    }
    CT_ASSERT_OK(ct_child_wait_all(c, 2, 60000));
    /* Both finish: neither found its port taken by the other. */
    for (int i = 0; i < 2; i++)
        CT_ASSERT_MSG(c[i].exit_code == 0, "job %d exit %d:\n%s", i, c[i].exit_code, c[i].err);
    int ports[2];
    for (int i = 0; i < 2; i++) {
        const char *info = strstr(c[i].err, "the rendezvous store is on free port ");
        CT_ASSERT_MSG(info != NULL, "job %d:\n%s", i, c[i].err);
        ports[i] = atoi(info + strlen("the rendezvous store is on free port "));
        CT_ASSERT(ports[i] > 0 && ports[i] != 29500);
        char want[16];
        snprintf(want, sizeof want, "%d", ports[i]);
        for (int r = 0; r < 2; r++) {
            char *dump = e2e_read("%s/env.%d.0", d[i], r);
            CT_ASSERT(dump != NULL);
            E2E_ENV_EQ(dump, "MASTER_PORT", want);
            E2E_ENV_EQ(dump, "MASTER_ADDR", "localhost");
            free(dump);
        }
        ct_child_close(&c[i]);
    }
    CT_ASSERT(ports[0] != ports[1]);
}

/* torchrun's traceback ends with the exception's line, then the report: on every node. */
static void test_child_failed_error_line(void)
{
    char d[2][600], port[32];
    snprintf(port, sizeof port, "--master_port=%d", e2e_free_port());
    ct_child_t c[2];
    for (int i = 0; i < 2; i++) {
        e2e_dir(d[i], sizeof d[i], i == 0 ? "cfe0" : "cfe1");
        char rank[32];
        snprintf(rank, sizeof rank, "--node_rank=%d", i);
        const char *const args[] = {"--nnodes=2",  rank,    port,           "--log_dir=/dev/null",
                                    "--no_python", "WORKER", "--when-rank", "1",
                                    "--exit",      "7",      "--sleep-ms",  "-1",
                                    NULL};
        e2e_start(&c[i], NULL, args);
    }
    CT_ASSERT_OK(ct_child_wait_all(c, 2, 60000));
    for (int i = 0; i < 2; i++) {
        CT_ASSERT_MSG(c[i].exit_code == 1, "node %d exit %d:\n%s", i, c[i].exit_code, c[i].err);
        CT_ASSERT_MSG(strstr(c[i].err, "torch.distributed.elastic.multiprocessing.errors."
                                       "ChildFailedError: \n=====") != NULL,
                      "node %d:\n%s", i, c[i].err);
        CT_ASSERT_EQ(e2e_count(c[i].err, "ChildFailedError: "), 1);
        ct_child_close(&c[i]);
    }
}

/* A fake Python that records its argv through the test worker. */
static void e2e_fake_python(const char *dir, char *path, size_t size)
{
    snprintf(path, size, "%s/python", dir);
    FILE *f = fopen(path, "w");
    CT_ASSERT(f != NULL);
    fprintf(f, "#!/bin/sh\nexec \"%s\" --dir \"%s\" \"$@\"\n", e2e_worker, dir);
    fclose(f);
    chmod(path, 0755);
}

/* No --python: an active virtual environment's interpreter, named at INFO. */
static void test_virtual_env_interpreter(void)
{
    char dir[600], bin[700], py[800], venv[720];
    e2e_dir(dir, sizeof dir, "venv");
    snprintf(bin, sizeof bin, "%s/bin", dir);
    CT_ASSERT_EQ(mkdir(bin, 0755), 0);
    e2e_fake_python(bin, py, sizeof py);
    snprintf(venv, sizeof venv, "VIRTUAL_ENV=%s", dir);
    const char *const env[] = {venv, "LOGLEVEL=INFO", "CT_LOG_LEVEL", "CTRUN_PYTHON",
                               "PYTHON_EXEC", NULL};
    const char *const args[] = {"--log_dir=/dev/null", "train.py", NULL};
    ct_child_t c;
    e2e_run(&c, env, args);
    CT_ASSERT_MSG(c.exit_code == 0, "exit %d:\n%s", c.exit_code, c.err);
    char want[900];
    snprintf(want, sizeof want, "worker interpreter: %s (the active virtual environment, "
                                "VIRTUAL_ENV)",
             py);
    CT_ASSERT_STR_CONTAINS(c.err, want);
    char *dump = e2e_read("%s/env.0.0", bin);
    CT_ASSERT_MSG(dump != NULL, "the environment's python did not run:\n%s", c.err);
    E2E_ENV_EQ(dump, "ARGV[4]", "train.py");
    free(dump);
    ct_child_close(&c);
}

int main(int argc, char **argv)
{
    e2e_init(argc, argv, "test_ctrun_e2e_torchrun2");
    CT_RUN(test_two_single_node_jobs_at_once);
    CT_RUN(test_child_failed_error_line);
    CT_RUN(test_virtual_env_interpreter);
    return 0;
}
