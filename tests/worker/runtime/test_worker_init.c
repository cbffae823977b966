/*
 * test_worker_init.c - ct_worker_init and ct_worker_close in one process:
 *   - the single-process fallback (no launcher variables): rank 0 of 1, no store, a
 *     communicator of one rank whose collectives are the identity;
 *   - a launched world of one connects to the store; the key namespace carries the run id and
 *     the attempt;
 *   - every bad variable - the torchrun ones (passed through from ct_worker_env_read) and the
 *     communicator's own (CTRUN_COMM_TIMEOUT, CTRUN_COMM_BACKEND, CTRUN_COMM_ADDR,
 *     TORCHELASTIC_USE_AGENT_STORE=False with WORLD_SIZE > 1) - fails with one line naming it,
 *     and leaves the process able to try again (the runtime was undone);
 *   - options win over the variables; a store that is not there is -ETIMEDOUT within the
 *     timeout, naming MASTER_ADDR and MASTER_PORT; a job spanning nodes is refused a loopback
 *     ring address; NCCL asked for where it cannot run says why.
 * Usage: test_worker_init PATH_TO_CTRUN_STORE
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ct_comm_internal.h"
#include "ct_config.h"
#include "ct_ranks.h"
#include "ct_test.h"
#include "ct_time.h"

static ct_store_proc_t store;

static const char *const all_vars[] = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_ERROR_FILE",
    "TORCHELASTIC_USE_AGENT_STORE",
    "CTRUN_HEARTBEAT_FD",
    "CTRUN_COMM_TIMEOUT",
    "CTRUN_COMM_BACKEND",
    "CTRUN_COMM_ADDR",
    NULL,
};

static void clear_env(void)
{
    for (int i = 0; all_vars[i] != NULL; i++)
        unsetenv(all_vars[i]);
}

/* Rank 0 of a launched world of one, on the test's store. */
static void set_launched_env(void)
{
    clear_env();
    char port[16];
    snprintf(port, sizeof port, "%d", store.port);
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    setenv("LOCAL_RANK", "0", 1);
    setenv("LOCAL_WORLD_SIZE", "1", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", port, 1);
    setenv("TORCHELASTIC_RUN_ID", "job-7", 1);
    setenv("TORCHELASTIC_RESTART_COUNT", "2", 1);
    setenv("TORCHELASTIC_MAX_RESTARTS", "3", 1);
    setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
    setenv("CTRUN_COMM_TIMEOUT", "20", 1);
}

static void expect_init_error(const ct_worker_opts_t *opts, int code, const char *frag1,
                              const char *frag2)
{
    ct_worker_t w;
    ct_errbuf_t eb;
    eb.msg[0] = '\0';
    CT_ASSERT_ERR(ct_worker_init(&w, opts, &eb), code);
    CT_ASSERT_STR_CONTAINS(eb.msg, frag1);
    if (frag2 != NULL)
        CT_ASSERT_STR_CONTAINS(eb.msg, frag2);
    CT_ASSERT(strchr(eb.msg, '\n') == NULL);
    CT_ASSERT(!w.ready && w.comm == NULL && w.store == NULL);
    ct_worker_close(&w); /* safe after a failed init */
}

static void test_single_process(void)
{
    clear_env();
    ct_worker_t w;
    ct_errbuf_t eb;
    CT_ASSERT_OK(ct_worker_init(&w, NULL, &eb));
    CT_ASSERT(w.ready && !w.env.launched && w.store == NULL);
    CT_ASSERT_EQ(w.env.rank, 0);
    CT_ASSERT_EQ(ct_comm_size(w.comm), 1);
    CT_ASSERT_EQ(ct_comm_rank(w.comm), 0);
    CT_ASSERT_EQ(ct_comm_backend(w.comm), CT_COMM_CPU); /* no GPU here, or no NCCL */
    CT_ASSERT_EQ(w.timeout_ms, CT_WORKER_DEFAULT_TIMEOUT_MS);
    CT_ASSERT_EQ(ct_comm_timeout(w.comm), CT_WORKER_DEFAULT_TIMEOUT_MS);
    CT_ASSERT_STR_EQ(w.key_prefix, "ctworker/none/attempt_0/");
    float v[4] = {1.0f, 2.5f, -3.0f, 1e30f};
    CT_ASSERT_OK(ct_comm_allreduce(w.comm, v, 4, CT_DTYPE_F32, CT_COMM_SUM, &eb));
    CT_ASSERT(v[0] == 1.0f && v[1] == 2.5f && v[2] == -3.0f && v[3] == 1e30f);
    CT_ASSERT_OK(ct_comm_barrier(w.comm, &eb));
    ct_worker_close(&w);
    ct_worker_close(&w);
    CT_ASSERT(w.comm == NULL && !w.ready);
}

static void test_launched_world_of_one(void)
{
    set_launched_env();
    ct_worker_t w;
    ct_errbuf_t eb;
    CT_ASSERT_MSG(ct_worker_init(&w, NULL, &eb) == 0, "%s", eb.msg);
    CT_ASSERT(w.env.launched && w.store != NULL);
    CT_ASSERT_STR_EQ(w.key_prefix, "ctworker/job-7/attempt_2/");
    CT_ASSERT_EQ(w.timeout_ms, 20000);
    double d[2] = {0.25, -7.0};
    CT_ASSERT_OK(ct_comm_allreduce(w.comm, d, 2, CT_DTYPE_F64, CT_COMM_AVG, &eb));
    CT_ASSERT(d[0] == 0.25 && d[1] == -7.0);
    ct_worker_close(&w);

    /* The options win over the variables. */
    ct_worker_opts_t o = {.timeout_ms = 1234, .backend = CT_COMM_CPU};
    setenv("CTRUN_COMM_BACKEND", "nccl", 1);
    CT_ASSERT_MSG(ct_worker_init(&w, &o, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_EQ(w.timeout_ms, 1234);
    CT_ASSERT_EQ(ct_comm_backend(w.comm), CT_COMM_CPU);
    ct_worker_close(&w);
    setenv("CTRUN_COMM_BACKEND", "ring", 1);
    setenv("CTRUN_COMM_TIMEOUT", "2.5", 1);
    CT_ASSERT_MSG(ct_worker_init(&w, NULL, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_EQ(w.timeout_ms, 2500);
    ct_worker_close(&w);
}

static void test_bad_variables(void)
{
    struct {
        const char *var, *value;
        int code;
    } cases[] = {
        {"CTRUN_COMM_TIMEOUT", "soon", CT_EPARSE},
        {"CTRUN_COMM_TIMEOUT", "0", CT_ERANGE_VALUE},
        {"CTRUN_COMM_TIMEOUT", "-3", CT_ERANGE_VALUE},
        {"CTRUN_COMM_TIMEOUT", "1e12", CT_ERANGE_VALUE},
        {"CTRUN_COMM_TIMEOUT", "", CT_EPARSE},
        {"CTRUN_COMM_BACKEND", "gpu", CT_EPARSE},
        {"CTRUN_COMM_BACKEND", "", CT_EPARSE},
        {"CTRUN_COMM_ADDR", "no such host!", CT_EPARSE},
        {"RANK", "x", CT_EPARSE},
        {"RANK", "1", CT_ERANGE_VALUE}, /* not below WORLD_SIZE=1 */
        {"WORLD_SIZE", "0", CT_ERANGE_VALUE},
        {"LOCAL_RANK", "-1", CT_ERANGE_VALUE},
        {"LOCAL_WORLD_SIZE", "2", CT_ERANGE_VALUE},
        {"MASTER_PORT", "70000", CT_ERANGE_VALUE},
        {"MASTER_ADDR", "bad host", CT_EPARSE},
        {"TORCHELASTIC_RESTART_COUNT", "9", CT_ERANGE_VALUE}, /* above the maximum, 3 */
        {"TORCHELASTIC_RUN_ID", "", CT_EPARSE},
        {"TORCHELASTIC_USE_AGENT_STORE", "perhaps", CT_EPARSE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        set_launched_env();
        setenv(cases[i].var, cases[i].value, 1);
        expect_init_error(NULL, cases[i].code, cases[i].var, NULL);
    }
    /* A variable that is missing. */
    set_launched_env();
    unsetenv("LOCAL_WORLD_SIZE");
    expect_init_error(NULL, CT_ESTATE, "LOCAL_WORLD_SIZE", "is not set");
    set_launched_env();
    unsetenv("MASTER_PORT");
    expect_init_error(NULL, CT_ESTATE, "MASTER_PORT", NULL);
    set_launched_env();
    setenv("WORLD_SIZE", "2", 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    expect_init_error(NULL, CT_ESTATE, "MASTER_ADDR", "WORLD_SIZE=2");
    /* A worker is never the store's host. */
    set_launched_env();
    setenv("WORLD_SIZE", "2", 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    setenv("TORCHELASTIC_USE_AGENT_STORE", "False", 1);
    expect_init_error(NULL, CT_ESTATE, "TORCHELASTIC_USE_AGENT_STORE=False", "ctrun-store");
    /* Bad options. */
    set_launched_env();
    ct_worker_opts_t o = {.timeout_ms = -1};
    expect_init_error(&o, -EINVAL, "negative timeout", NULL);
    o = (ct_worker_opts_t){.backend = (ct_comm_backend_t)7};
    expect_init_error(&o, -EINVAL, "backend", NULL);
    o = (ct_worker_opts_t){.flags = 0x80};
    expect_init_error(&o, -EINVAL, "flags", NULL);

    /* After all of that the process can still initialise. */
    set_launched_env();
    ct_worker_t w;
    ct_errbuf_t eb;
    CT_ASSERT_MSG(ct_worker_init(&w, NULL, &eb) == 0, "%s", eb.msg);
    ct_worker_close(&w);
}

static void test_unreachable_store(void)
{
    set_launched_env();
    char port[16], want[80];
    int hold = -1;
    int p = ct_test_refused_port(&hold);
    snprintf(port, sizeof port, "%d", p);
    snprintf(want, sizeof want, "MASTER_ADDR=127.0.0.1 MASTER_PORT=%d", p);
    setenv("MASTER_PORT", port, 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    setenv("CTRUN_COMM_TIMEOUT", "0.8", 1);
    int64_t t0 = ct_time_ms();
    expect_init_error(NULL, -ETIMEDOUT, want, "CTRUN_COMM_TIMEOUT");
    int64_t dt = ct_time_ms() - t0;
    CT_ASSERT_GE(dt, 700);
    CT_ASSERT_LT(dt, 20000);
    close(hold);
}

/* Rank 1 of 2, alone on its node: a loopback ring address would be unreachable. */
static void test_loopback_refused_across_nodes(void)
{
    set_launched_env();
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("GROUP_RANK", "1", 1);
    expect_init_error(NULL, CT_ESTATE, "loopback", "CTRUN_COMM_ADDR");
}

static void test_nccl_where_it_cannot_run(void)
{
    set_launched_env();
    setenv("CTRUN_COMM_BACKEND", "nccl", 1);
#if CT_HAVE_NCCL
    if (ct__comm_gpu_count() > 0) {
        printf("  a GPU is visible: NCCL can run here (tests/worker/runtime/comm/test_comm_nccl.c)\n");
        return;
    }
    expect_init_error(NULL, CT_ENOGPU, "needs a GPU", "CTRUN_COMM_BACKEND=cpu");
#else
    expect_init_error(NULL, CT_ENOTBUILT, "without NCCL", NULL);
#endif
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_worker_init PATH_TO_CTRUN_STORE\n");
        return 2;
    }
    CT_ASSERT_OK(ct_store_proc_start(&store, argv[1]));
    CT_RUN(test_single_process);
    CT_RUN(test_launched_world_of_one);
    CT_RUN(test_bad_variables);
    CT_RUN(test_unreachable_store);
    CT_RUN(test_loopback_refused_across_nodes);
    CT_RUN(test_nccl_where_it_cannot_run);
    ct_store_proc_stop(&store);
    return 0;
}
