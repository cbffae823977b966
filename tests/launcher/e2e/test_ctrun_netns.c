/*
 * test_ctrun_netns.c (suite e2e) - two ctrun agents on separate "hosts": two network namespaces
 * joined by a veth pair, each agent and its workers inside its own namespace (`ip netns exec`),
 * so the store, the heartbeats and MASTER_ADDR cross a real (virtual) link. It proves:
 *   - a dynamic c10d job across the namespaces runs: ranks by join order, one world size, and
 *     MASTER_ADDR is the endpoint address, which resolves in both namespaces; the agent whose
 *     interface has the endpoint's address hosts the store; --local_addr names a node in the
 *     store and in messages;
 *   - cutting the link (the veth's peer goes down) is node loss: the store's host declares the
 *     other node lost within the heartbeat timeout (plus one check period), the cut-off node
 *     loses the store within the same time, both stop their workers and exit 1 naming the other
 *     side, and no worker survives.
 * Needs root and iproute2 (`ip netns`); exits 77 (skip) with the reason otherwise.
 */
#include <stdarg.h>

#include "ctrun_e2e.h"

static char ns[2][32], veth[2][16], addr[2][32];
static bool made[2];

/* Runs a shell command line; returns its exit status (output kept in *out when out given). */
__attribute__((format(printf, 2, 3))) static int sh(char **out, const char *fmt, ...)
{
    char cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char *argv[] = {"sh", "-c", cmd, NULL};
    ct_child_t c;
    int rc = ct_child_run(&c, argv, NULL, 30000);
    int status = rc == 0 && !c.timed_out ? c.exit_code : -1;
    if (out != NULL)
        *out = strdup(c.err ? c.err : "");
    ct_child_close(&c);
    return status;
}

static void teardown(void)
{
    for (int i = 0; i < 2; i++)
        if (made[i])
            sh(NULL, "ip netns del %s", ns[i]);
}

static void setup(void)
{
    if (geteuid() != 0)
        CT_SKIP("network namespaces need root");
    if (sh(NULL, "command -v ip >/dev/null") != 0)
        CT_SKIP("no `ip` (install iproute2)");
    int id = (int)getpid();
    unsigned net = 1 + (unsigned)id % 250;
    for (int i = 0; i < 2; i++) {
        snprintf(ns[i], sizeof ns[i], "ctrun%c%d", 'a' + i, id);
        snprintf(veth[i], sizeof veth[i], "ctv%c%d", 'a' + i, id % 1000000);
        snprintf(addr[i], sizeof addr[i], "10.231.%u.%d", net, i + 1);
    }
    char *err = NULL;
    if (sh(&err, "ip netns add %s", ns[0]) != 0)
        CT_SKIP("cannot create a network namespace: %s", err);
    free(err);
    made[0] = true;
    atexit(teardown);
    CT_ASSERT_EQ(sh(NULL, "ip netns add %s", ns[1]), 0);
    made[1] = true;
    CT_ASSERT_EQ(sh(NULL, "ip link add %s type veth peer name %s", veth[0], veth[1]), 0);
    for (int i = 0; i < 2; i++) {
        CT_ASSERT_EQ(sh(NULL, "ip link set %s netns %s", veth[i], ns[i]), 0);
        CT_ASSERT_EQ(sh(NULL, "ip -n %s addr add %s/24 dev %s", ns[i], addr[i], veth[i]), 0);
        CT_ASSERT_EQ(
            sh(NULL, "ip -n %s link set %s up && ip -n %s link set lo up", ns[i], veth[i], ns[i]),
            0);
    }
    /* The link is up once a ping gets across (DAD and carrier take a moment). */
    int64_t deadline = ct_time_ms() + 20000;
    while (sh(NULL, "ip netns exec %s ping -c1 -W1 %s >/dev/null 2>&1", ns[1], addr[0]) != 0) {
        if (sh(NULL, "command -v ping >/dev/null") != 0) {
            ct_sleep_ms(1500);
            break;
        }
        CT_ASSERT_MSG(ct_time_ms() < deadline, "the veth link did not come up");
        ct_sleep_ms(100);
    }
}

/* Starts node i's agent inside its namespace. */
static void start_node(ct_child_t *c, int i, int port, const char *dir, const char *const *work)
{
    char ep[64], local[64];
    snprintf(ep, sizeof ep, "--rdzv_endpoint=%s:%d", addr[0], port);
    snprintf(local, sizeof local, "--local_addr=%s", addr[i]);
    const char *args[48] = {"ip",
                            "netns",
                            "exec",
                            ns[i],
                            e2e_ctrun,
                            "--rdzv_backend=c10d",
                            ep,
                            "--rdzv_id=netns",
                            "--nnodes=2",
                            "--nproc_per_node=2",
                            "--rdzv_conf=heartbeat_timeout=2,keep_alive_interval=0.5",
                            "--grace_period=5",
                            "--log_dir=/dev/null"};
    size_t n = 13;
    /* Node 0 finds out that it hosts the store from its interface's address; node 1 names
     * itself with --local_addr. */
    if (i == 1)
        args[n++] = local;
    const char *const tail[] = {"--no_python", e2e_worker, "--dir", dir};
    for (size_t j = 0; j < 4; j++)
        args[n++] = tail[j];
    for (size_t j = 0; work[j] != NULL && n + 1 < 48; j++)
        args[n++] = work[j];
    args[n] = NULL;
    ct_child_opts_t o = {0};
    CT_ASSERT_OK(ct_child_start(c, (char *const *)args, &o));
}

static void test_job_across_namespaces(void)
{
    char d[2][600];
    e2e_dir(d[0], sizeof d[0], "ns_job0");
    e2e_dir(d[1], sizeof d[1], "ns_job1");
    int port = e2e_free_port();
    const char *const work[] = {NULL};
    ct_child_t c[2];
    start_node(&c[0], 0, port, d[0], work);
    ct_sleep_ms(300); /* node 0 first, so that it is group rank 0 */
    start_node(&c[1], 1, port, d[1], work);
    int rc = ct_child_wait_all(c, 2, 90000);
    for (int i = 0; i < 2; i++)
        CT_ASSERT_MSG(rc == 0 && c[i].exit_code == 0, "node %d exit %d:\n%s", i, c[i].exit_code,
                      c[i].err);
    for (int i = 0; i < 2; i++) {
        for (int lr = 0; lr < 2; lr++) {
            int r = 2 * i + lr;
            char *dump = e2e_read("%s/env.%d.0", d[i], r);
            CT_ASSERT_MSG(dump != NULL, "node %d has no rank %d", i, r);
            char g[8];
            snprintf(g, sizeof g, "%d", i);
            E2E_ENV_EQ(dump, "GROUP_RANK", g);
            E2E_ENV_EQ(dump, "WORLD_SIZE", "4");
            E2E_ENV_EQ(dump, "MASTER_ADDR", addr[0]);
            free(dump);
        }
    }
    ct_child_close(&c[0]);
    ct_child_close(&c[1]);
}

static void test_cut_link_is_node_loss(void)
{
    char d[2][600];
    e2e_dir(d[0], sizeof d[0], "ns_cut0");
    e2e_dir(d[1], sizeof d[1], "ns_cut1");
    int port = e2e_free_port();
    const char *const work[] = {"--sleep-ms", "60000", NULL};
    ct_child_t c[2];
    start_node(&c[0], 0, port, d[0], work);
    ct_sleep_ms(300);
    start_node(&c[1], 1, port, d[1], work);
    for (int i = 0; i < 2; i++) {
        int64_t deadline = ct_time_ms() + 30000;
        while (e2e_count_starts(d[i], -1) < 2) {
            ct_child_poll_output(&c[0], 0);
            ct_child_poll_output(&c[1], 0);
            CT_ASSERT_MSG(ct_time_ms() < deadline, "node %d did not start:\n%s", i,
                          c[i].err ? c[i].err : "");
            ct_sleep_ms(20);
        }
    }
    int64_t t0 = ct_time_ms();
    CT_ASSERT_EQ(sh(NULL, "ip -n %s link set %s down", ns[1], veth[1]), 0);
    int rc = ct_child_wait_all(c, 2, 60000);
    int64_t took = ct_time_ms() - t0;
    CT_ASSERT_MSG(rc == 0, "timed out (%d/%d); node 0:\n%s\nnode 1:\n%s", c[0].timed_out,
                  c[1].timed_out, c[0].err, c[1].err);
    CT_ASSERT_MSG(c[0].exit_code == 1, "node 0 exit %d:\n%s", c[0].exit_code, c[0].err);
    CT_ASSERT_MSG(c[1].exit_code == 1, "node 1 exit %d:\n%s", c[1].exit_code, c[1].err);
    char want[128];
    snprintf(want, sizeof want, "node 1 (%s) is lost: no heartbeat for", addr[1]);
    CT_ASSERT_STR_CONTAINS(c[0].err, want);
    snprintf(want, sizeof want, "lost the rendezvous store at %s:%d", addr[0], port);
    CT_ASSERT_STR_CONTAINS(c[1].err, want);
    /* 2 s heartbeat timeout; the rest is stopping workers and exiting on a loaded machine. */
    CT_ASSERT_MSG(took < 20000, "detecting the cut took %lld ms", (long long)took);
    printf("# cut link: both sides done %lld ms after the cut\n", (long long)took);
    CT_ASSERT(e2e_all_gone(d[0], 10000));
    CT_ASSERT(e2e_all_gone(d[1], 10000));
    ct_child_close(&c[0]);
    ct_child_close(&c[1]);
}

int main(int argc, char **argv)
{
    e2e_init(argc, argv, "test_ctrun_netns");
    setup();
    CT_RUN(test_job_across_namespaces);
    CT_RUN(test_cut_link_is_node_loss);
    return 0;
}
