/*
 * test_worker_env.c - ct_worker_env_read: the single-process fallback, a full torchrun
 * environment, and for every variable each way it can be missing, malformed or inconsistent,
 * a non-zero code and one line naming the variable.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_test.h"
#include "ctworker.h"

static const char *const all_vars[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
    "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_USE_AGENT_STORE",
    "CTRUN_HEARTBEAT_FD", NULL,
};

static void clear_env(void)
{
    for (int i = 0; all_vars[i] != NULL; i++)
        unsetenv(all_vars[i]);
}

/* A consistent two-node environment for rank 3 of 4 (local rank 1 of 2). */
static void set_torchrun_env(void)
{
    clear_env();
    setenv("RANK", "3", 1);
    setenv("WORLD_SIZE", "4", 1);
    setenv("LOCAL_RANK", "1", 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    setenv("GROUP_RANK", "1", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "29500", 1);
    setenv("TORCHELASTIC_RESTART_COUNT", "2", 1);
    setenv("TORCHELASTIC_MAX_RESTARTS", "3", 1);
    setenv("TORCHELASTIC_RUN_ID", "job-42", 1);
    setenv("TORCHELASTIC_ERROR_FILE", "/tmp/attempt_2/1/error.json", 1);
    setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
}

/* Expects ct_worker_env_read to fail with code and a one-line message containing each of the
 * NULL-terminated fragments. */
static void expect_error(int code, const char *frag1, const char *frag2)
{
    ct_worker_env_t env;
    ct_errbuf_t eb;
    eb.msg[0] = '\0';
    CT_ASSERT_ERR(ct_worker_env_read(&env, &eb), code);
    CT_ASSERT_STR_CONTAINS(eb.msg, frag1);
    if (frag2 != NULL)
        CT_ASSERT_STR_CONTAINS(eb.msg, frag2);
    CT_ASSERT(strchr(eb.msg, '\n') == NULL);
}

static void test_single_process_fallback(void)
{
    clear_env();
    ct_worker_env_t env;
    CT_ASSERT_OK(ct_worker_env_read(&env, NULL));
    CT_ASSERT(!env.launched);
    CT_ASSERT_EQ(env.rank, 0);
    CT_ASSERT_EQ(env.world_size, 1);
    CT_ASSERT_EQ(env.local_rank, 0);
    CT_ASSERT_EQ(env.local_world_size, 1);
    CT_ASSERT_EQ(env.group_rank, 0);
    CT_ASSERT_EQ(env.restart_count, 0);
    CT_ASSERT(!env.has_master);
    CT_ASSERT_EQ(env.master_port, 0);
    CT_ASSERT_STR_EQ(env.run_id, "none");
    CT_ASSERT_STR_EQ(env.error_file, "");
    CT_ASSERT_EQ(env.heartbeat_fd, -1);
    CT_ASSERT(!env.use_agent_store);

    /* A master address alone is fine for one process, and is still checked. */
    setenv("MASTER_ADDR", "localhost", 1);
    setenv("MASTER_PORT", "1234", 1);
    CT_ASSERT_OK(ct_worker_env_read(&env, NULL));
    CT_ASSERT(env.has_master);
    CT_ASSERT_STR_EQ(env.master_addr, "localhost");
    CT_ASSERT_EQ(env.master_port, 1234);
}

static void test_full_torchrun_env(void)
{
    set_torchrun_env();
    ct_worker_env_t env;
    CT_ASSERT_OK(ct_worker_env_read(&env, NULL));
    CT_ASSERT(env.launched);
    CT_ASSERT_EQ(env.rank, 3);
    CT_ASSERT_EQ(env.world_size, 4);
    CT_ASSERT_EQ(env.local_rank, 1);
    CT_ASSERT_EQ(env.local_world_size, 2);
    CT_ASSERT_EQ(env.group_rank, 1);
    CT_ASSERT(env.has_master);
    CT_ASSERT_STR_EQ(env.master_addr, "127.0.0.1");
    CT_ASSERT_EQ(env.master_port, 29500);
    CT_ASSERT_EQ(env.restart_count, 2);
    CT_ASSERT_EQ(env.max_restarts, 3);
    CT_ASSERT_STR_EQ(env.run_id, "job-42");
    CT_ASSERT_STR_EQ(env.error_file, "/tmp/attempt_2/1/error.json");
    CT_ASSERT(env.use_agent_store);

    /* IPv6 master addresses, bracketed or not; torchrun's empty error file means none. */
    setenv("MASTER_ADDR", "[::1]", 1);
    setenv("TORCHELASTIC_ERROR_FILE", "", 1);
    setenv("TORCHELASTIC_USE_AGENT_STORE", "False", 1);
    CT_ASSERT_OK(ct_worker_env_read(&env, NULL));
    CT_ASSERT_STR_EQ(env.master_addr, "::1");
    CT_ASSERT_STR_EQ(env.error_file, "");
    CT_ASSERT(!env.use_agent_store);
    setenv("MASTER_ADDR", "fe80::1", 1);
    CT_ASSERT_OK(ct_worker_env_read(&env, NULL));
    CT_ASSERT_STR_EQ(env.master_addr, "fe80::1");
}

static void test_partial_rank_sets(void)
{
    static const char *const vars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
    /* Each one alone names a missing partner. */
    for (int i = 0; i < 4; i++) {
        clear_env();
        setenv(vars[i], "0", 1);
        if (i == 1 || i == 3)
            setenv(vars[i], "1", 1);
        expect_error(CT_ESTATE, "is not set", vars[i]);
    }
    /* Each one missing from an otherwise full set is named. */
    for (int i = 0; i < 4; i++) {
        set_torchrun_env();
        unsetenv(vars[i]);
        ct_worker_env_t env;
        ct_errbuf_t eb;
        CT_ASSERT_ERR(ct_worker_env_read(&env, &eb), CT_ESTATE);
        char want[64];
        snprintf(want, sizeof want, "variable %s is not set", vars[i]);
        CT_ASSERT_STR_CONTAINS(eb.msg, want);
    }
}

static void test_bad_numbers(void)
{
    static const struct {
        const char *var, *value;
        int code;
    } cases[] = {
        {"RANK", "abc", CT_EPARSE},          {"RANK", "", CT_EPARSE},
        {"RANK", "-1", CT_ERANGE_VALUE},     {"RANK", "1.0", CT_EPARSE},
        {"WORLD_SIZE", "0", CT_ERANGE_VALUE}, {"WORLD_SIZE", "x", CT_EPARSE},
        {"WORLD_SIZE", "99999999999", CT_ERANGE_VALUE},
        {"LOCAL_RANK", "one", CT_EPARSE},    {"LOCAL_WORLD_SIZE", "0", CT_ERANGE_VALUE},
        {"GROUP_RANK", "-2", CT_ERANGE_VALUE}, {"GROUP_RANK", "g", CT_EPARSE},
        {"TORCHELASTIC_RESTART_COUNT", "-1", CT_ERANGE_VALUE},
        {"TORCHELASTIC_RESTART_COUNT", "two", CT_EPARSE},
        {"TORCHELASTIC_MAX_RESTARTS", "many", CT_EPARSE},
        {"TORCHELASTIC_USE_AGENT_STORE", "maybe", CT_EPARSE},
        {"CTRUN_HEARTBEAT_FD", "pipe", CT_EPARSE},
        {"CTRUN_HEARTBEAT_FD", "-1", CT_ERANGE_VALUE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        set_torchrun_env();
        setenv(cases[i].var, cases[i].value, 1);
        expect_error(cases[i].code, cases[i].var, NULL);
    }
}

static void test_inconsistent_ranks(void)
{
    set_torchrun_env();
    setenv("RANK", "4", 1);
    expect_error(CT_ERANGE_VALUE, "RANK=4 is not below WORLD_SIZE=4", NULL);

    set_torchrun_env();
    setenv("LOCAL_RANK", "2", 1);
    expect_error(CT_ERANGE_VALUE, "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2", NULL);

    set_torchrun_env();
    setenv("LOCAL_WORLD_SIZE", "8", 1);
    expect_error(CT_ERANGE_VALUE, "LOCAL_WORLD_SIZE=8 exceeds WORLD_SIZE=4", NULL);

    set_torchrun_env();
    setenv("RANK", "0", 1);
    expect_error(CT_ERANGE_VALUE, "LOCAL_RANK=1 exceeds RANK=0", NULL);

    set_torchrun_env();
    setenv("GROUP_RANK", "4", 1);
    expect_error(CT_ERANGE_VALUE, "GROUP_RANK=4 is not below WORLD_SIZE=4", NULL);

    set_torchrun_env();
    setenv("TORCHELASTIC_RESTART_COUNT", "4", 1);
    expect_error(CT_ERANGE_VALUE, "TORCHELASTIC_RESTART_COUNT=4 exceeds", "MAX_RESTARTS=3");
}

static void test_master_address(void)
{
    set_torchrun_env();
    unsetenv("MASTER_PORT");
    expect_error(CT_ESTATE, "MASTER_PORT is not set but MASTER_ADDR is", NULL);

    set_torchrun_env();
    unsetenv("MASTER_ADDR");
    expect_error(CT_ESTATE, "MASTER_ADDR is not set but MASTER_PORT is", NULL);

    set_torchrun_env();
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    expect_error(CT_ESTATE, "MASTER_ADDR is not set", "WORLD_SIZE=4");

    static const struct {
        const char *var, *value;
        int code;
    } bad[] = {
        {"MASTER_PORT", "0", CT_ERANGE_VALUE},  {"MASTER_PORT", "65536", CT_ERANGE_VALUE},
        {"MASTER_PORT", "http", CT_EPARSE},     {"MASTER_PORT", "", CT_EPARSE},
        {"MASTER_ADDR", "", CT_EPARSE},         {"MASTER_ADDR", "bad host", CT_EPARSE},
        {"MASTER_ADDR", "[::1", CT_EPARSE},     {"MASTER_ADDR", "1.2.3.4.5", CT_EPARSE},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        set_torchrun_env();
        setenv(bad[i].var, bad[i].value, 1);
        expect_error(bad[i].code, bad[i].var, NULL);
    }
}

static void test_strings(void)
{
    set_torchrun_env();
    setenv("TORCHELASTIC_RUN_ID", "", 1);
    expect_error(CT_EPARSE, "TORCHELASTIC_RUN_ID is empty", NULL);

    set_torchrun_env();
    setenv("TORCHELASTIC_RUN_ID", "a\nb", 1);
    expect_error(CT_EPARSE, "TORCHELASTIC_RUN_ID", "control character");

    char big[5000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    set_torchrun_env();
    setenv("TORCHELASTIC_RUN_ID", big, 1);
    expect_error(CT_EPARSE, "TORCHELASTIC_RUN_ID", "characters long");

    set_torchrun_env();
    setenv("TORCHELASTIC_ERROR_FILE", big, 1);
    expect_error(CT_EPARSE, "TORCHELASTIC_ERROR_FILE", "characters long");
}

static void test_heartbeat_fd(void)
{
    int p[2];
    CT_ASSERT_OK(pipe(p));
    char text[16];

    set_torchrun_env();
    snprintf(text, sizeof text, "%d", p[1]);
    setenv("CTRUN_HEARTBEAT_FD", text, 1);
    ct_worker_env_t env;
    CT_ASSERT_OK(ct_worker_env_read(&env, NULL));
    CT_ASSERT_EQ(env.heartbeat_fd, p[1]);

    snprintf(text, sizeof text, "%d", p[0]); /* the read end */
    setenv("CTRUN_HEARTBEAT_FD", text, 1);
    expect_error(CT_ESTATE, "CTRUN_HEARTBEAT_FD", "not open for writing");

    int closed = dup(p[1]);
    close(closed);
    snprintf(text, sizeof text, "%d", closed);
    setenv("CTRUN_HEARTBEAT_FD", text, 1);
    expect_error(CT_ESTATE, "CTRUN_HEARTBEAT_FD", "is not open");

    int file = open("/dev/null", O_WRONLY);
    snprintf(text, sizeof text, "%d", file);
    setenv("CTRUN_HEARTBEAT_FD", text, 1);
    expect_error(CT_ESTATE, "CTRUN_HEARTBEAT_FD", "is not a pipe");
    close(file);
    close(p[0]);
    close(p[1]);
}

int main(void)
{
    CT_RUN(test_single_process_fallback);
    CT_RUN(test_full_torchrun_env);
    CT_RUN(test_partial_rank_sets);
    CT_RUN(test_bad_numbers);
    CT_RUN(test_inconsistent_ranks);
    CT_RUN(test_master_address);
    CT_RUN(test_strings);
    CT_RUN(test_heartbeat_fd);
    clear_env();
    return 0;
}
