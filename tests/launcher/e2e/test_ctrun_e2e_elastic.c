/*
 * test_ctrun_e2e_elastic.c (suite e2e) - several ctrun agents on 127.0.0.1 as the nodes of one
 * job, with the test worker. It proves:
 *   - three static nodes with 1, 2 and 3 workers: RANK, GROUP_RANK, WORLD_SIZE and
 *     LOCAL_WORLD_SIZE add up on every worker; a worker failing on node 1 restarts the workers
 *     of every node;
 *   - three c10d nodes with different worker counts: ranks by join order, one world size; a
 *     worker failing on one node restarts every node's workers (restart count 1 everywhere);
 *   - --nnodes=2:3: two agents start a round after the last call; a third agent arriving
 *     later is included at the next round, which uses up no restart (--max_restarts=0);
 *   - a node arriving at a job that already has its MAX nodes waits, and leaves with "the job
 *     has finished" when it does;
 *   - SIGKILL of one agent of three: the others notice it through the heartbeats, stop their
 *     workers and re-form with two nodes (a restart used), and the job finishes; the same with
 *     ctrain, which resumes from its checkpoint on the smaller world and finishes training;
 *   - SIGKILL below MIN: the survivor exits 1 with a message naming the lost node, no worker
 *     left behind;
 *   - SIGKILL of the agent hosting the store: the other exits 1 naming the store, no orphans;
 *   - SIGKILL of a static node: node 0 stops at once and exits 1 naming it (a static job cannot
 *     re-form), well before any worker would have ended;
 *   - SIGKILL of one agent of two whose workers started children and double-forked daemons:
 *     1 s later nothing of that node's job is left;
 *   - SIGTERM to one agent of three (--nnodes=2:3, --max_restarts=0): it leaves with 143, the
 *     other two re-form without it at once and finish, without using up a restart (the store
 *     host's metrics count a membership restart); of two
 *     (MIN 2) the other exits 1 naming the node that left; with MIN == MAX (--nnodes=2) a
 *     signalled node still stops the job.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "ctrun_e2e.h"

static const char *ctrain; /* argv[3] */

#define AGENTS_MAX 3

/* Waits until something accepts connections on 127.0.0.1:port (the first agent's store). */
static void wait_listening(int port)
{
    int64_t deadline = ct_time_ms() + 30000;
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        CT_ASSERT(fd >= 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
        close(fd);
        if (ok)
            return;
        CT_ASSERT_MSG(ct_time_ms() < deadline, "nothing listens on port %d", port);
        ct_sleep_ms(20);
    }
}

/* Rank -> group rank, from the env dumps of attempt k in dirs; asserts every rank of
 * 0..world-1 shows up exactly once, with the expected world and node counts. */
static void check_ranks(char dirs[][600], int n, int attempt, int world, int nnodes,
                        int *group_of_rank)
{
    for (int r = 0; r < world; r++)
        group_of_rank[r] = -1;
    for (int i = 0; i < n; i++) {
        for (int r = 0; r < world; r++) {
            char *dump = e2e_read("%s/env.%d.%d", dirs[i], r, attempt);
            if (dump == NULL)
                continue;
            char v[64], want[16];
            CT_ASSERT_MSG(group_of_rank[r] < 0, "rank %d twice", r);
            group_of_rank[r] = atoi(e2e_env_get(dump, "GROUP_RANK", v, sizeof v));
            snprintf(want, sizeof want, "%d", world);
            E2E_ENV_EQ(dump, "WORLD_SIZE", want);
            snprintf(want, sizeof want, "%d", nnodes);
            E2E_ENV_EQ(dump, "GROUP_WORLD_SIZE", want);
            E2E_ENV_EQ(dump, "MASTER_ADDR", "127.0.0.1");
            free(dump);
        }
    }
    for (int r = 0; r < world; r++)
        CT_ASSERT_MSG(group_of_rank[r] >= 0, "no worker had rank %d", r);
    for (int r = 1; r < world; r++)
        CT_ASSERT_MSG(group_of_rank[r] >= group_of_rank[r - 1], "ranks out of node order");
}

static void wait_all(ct_child_t *c, int n)
{
    int rc = ct_child_wait_all(c, n, 90000);
    for (int i = 0; i < n; i++)
        CT_ASSERT_MSG(rc == 0 && !c[i].timed_out, "agent %d timed out:\n%s", i,
                      c[i].err ? c[i].err : "");
}

static void test_three_static_nodes_and_a_restart(void)
{
    char d[AGENTS_MAX][600], port[32], rank[32], nproc[32];
    snprintf(port, sizeof port, "--master_port=%d", e2e_free_port());
    ct_child_t c[AGENTS_MAX];
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "static%d", i);
        e2e_dir(d[i], sizeof d[i], name);
    }
    /* Node 2 starts first. Rank 1 (node 1's local rank 0) fails in attempt 0; the workers of
     * nodes 0 and 2 would sleep a minute in attempt 0 and exit 0 at once in attempt 1. */
    const char *const fail[] = {"--when-attempt", "0", "--when-rank", "1",   "--delay-ms", "300",
                                "--exit",         "7", "--sleep-ms",  "100", NULL};
    const char *const calm[] = {"--when-attempt", "1", "--exit", "0", "--sleep-ms", "60000", NULL};
    for (int i = 2; i >= 0; i--) {
        snprintf(rank, sizeof rank, "--node_rank=%d", i);
        snprintf(nproc, sizeof nproc, "--nproc_per_node=%d", i + 1);
        const char *args[40] = {"--nnodes=3",  rank,
                                nproc,         "--max_restarts=1",
                                port,          "--log_dir=/dev/null",
                                "--no_python", "WORKER",
                                "--dir",       d[i]};
        size_t n = 10;
        const char *const *work = i == 1 ? fail : calm;
        for (size_t j = 0; work[j] != NULL; j++)
            args[n++] = work[j];
        args[n] = NULL;
        e2e_start(&c[i], NULL, args);
    }
    wait_all(c, 3);
    for (int i = 0; i < 3; i++)
        CT_ASSERT_MSG(c[i].exit_code == 0, "node %d exit %d:\n%s", i, c[i].exit_code, c[i].err);
    /* Attempt 0 and attempt 1 ran on every node with every worker, with the right ranks. */
    int g[6];
    check_ranks(d, 3, 0, 6, 3, g);
    CT_ASSERT(g[0] == 0 && g[1] == 1 && g[2] == 1 && g[3] == 2 && g[4] == 2 && g[5] == 2);
    check_ranks(d, 3, 1, 6, 3, g);
    for (int i = 0; i < 3; i++) {
        CT_ASSERT_EQ(e2e_count_starts(d[i], 0), i + 1);
        CT_ASSERT_EQ(e2e_count_starts(d[i], 1), i + 1);
    }
    CT_ASSERT_STR_CONTAINS(c[0].err, "attempt 0 failed on node 1");
    CT_ASSERT_STR_CONTAINS(c[2].err, "attempt 0 failed on node 1");
    for (int i = 0; i < 3; i++)
        ct_child_close(&c[i]);
}

static void test_three_c10d_nodes(void)
{
    char d[AGENTS_MAX][600], ep[64], nproc[32];
    int port = e2e_free_port();
    snprintf(ep, sizeof ep, "--rdzv_endpoint=127.0.0.1:%d", port);
    ct_child_t c[AGENTS_MAX];
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "c10d%d", i);
        e2e_dir(d[i], sizeof d[i], name);
        snprintf(nproc, sizeof nproc, "--nproc_per_node=%d", 3 - i);
        const char *const args[] = {"--rdzv_backend=c10d",
                                    ep,
                                    "--rdzv_id=three",
                                    "--nnodes=3",
                                    nproc,
                                    "--log_dir=/dev/null",
                                    "--no_python",
                                    "WORKER",
                                    "--dir",
                                    d[i],
                                    NULL};
        e2e_start(&c[i], NULL, args);
        if (i == 0)
            wait_listening(port); /* the first agent hosts the store */
    }
    wait_all(c, 3);
    for (int i = 0; i < 3; i++)
        CT_ASSERT_MSG(c[i].exit_code == 0, "agent %d exit %d:\n%s", i, c[i].exit_code, c[i].err);
    int g[6];
    check_ranks(d, 3, 0, 6, 3, g);
    for (int i = 0; i < 3; i++)
        ct_child_close(&c[i]);
}

static void test_three_c10d_nodes_restart(void)
{
    char d[AGENTS_MAX][600], ep[64];
    int port = e2e_free_port();
    snprintf(ep, sizeof ep, "--rdzv_endpoint=127.0.0.1:%d", port);
    ct_child_t c[AGENTS_MAX];
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "c10dre%d", i);
        e2e_dir(d[i], sizeof d[i], name);
        /* Rank 1 fails in attempt 0; everyone else sleeps 2 s (and is stopped early). */
        const char *const args[] = {"--rdzv_backend=c10d",
                                    ep,
                                    "--rdzv_id=three",
                                    "--nnodes=3",
                                    "--nproc_per_node=1",
                                    "--max_restarts=1",
                                    "--log_dir=/dev/null",
                                    "--no_python",
                                    "WORKER",
                                    "--dir",
                                    d[i],
                                    "--when-attempt",
                                    "0",
                                    "--when-rank",
                                    "1",
                                    "--delay-ms",
                                    "300",
                                    "--exit",
                                    "7",
                                    "--sleep-ms",
                                    "2000",
                                    NULL};
        e2e_start(&c[i], NULL, args);
        if (i == 0)
            wait_listening(port);
    }
    wait_all(c, 3);
    int failed_node = -1;
    for (int i = 0; i < 3; i++) {
        CT_ASSERT_MSG(c[i].exit_code == 0, "agent %d exit %d:\n%s", i, c[i].exit_code, c[i].err);
        CT_ASSERT_EQ(e2e_count_starts(d[i], 0), 1);
        CT_ASSERT_EQ(e2e_count_starts(d[i], 1), 1);
        if (strstr(c[i].err, "failed (exitcode: 7)") != NULL)
            failed_node = i;
    }
    CT_ASSERT(failed_node >= 0);
    for (int i = 0; i < 3; i++)
        if (i != failed_node)
            CT_ASSERT_STR_CONTAINS(c[i].err, "attempt 0 failed on node 1");
    int g[3];
    check_ranks(d, 3, 1, 3, 3, g);
    for (int i = 0; i < 3; i++)
        ct_child_close(&c[i]);
}

/* Starts c10d agent i of a --nnodes=nnodes job on ep whose workers run `work`. */
/* Last calls: SHORT where a round of MIN < MAX nodes is meant to start; LONG where all MAX
 * agents start together, so that a slow third agent on a loaded machine cannot miss round 0. */
#define SHORT "--rdzv_conf=last_call_timeout=1,join_timeout=60"
#define LONG  "--rdzv_conf=last_call_timeout=30,join_timeout=60"

/* The same, with one more option for ctrun (or NULL). */
static void start_elastic_with(ct_child_t *c, const char *ep, const char *nnodes, const char *conf,
                               const char *dir, const char *max_restarts, const char *option,
                               const char *const *work)
{
    char mr[32];
    snprintf(mr, sizeof mr, "--max_restarts=%s", max_restarts);
    const char *args[40] = {
        "--rdzv_backend=c10d", ep, "--rdzv_id=elastic", nnodes, conf, mr, "--grace_period=5",
        "--log_dir=/dev/null"};
    size_t n = 8;
    if (option != NULL)
        args[n++] = option;
    const char *const tail[] = {"--no_python", "WORKER", "--dir", dir};
    for (size_t i = 0; i < 4; i++)
        args[n++] = tail[i];
    for (size_t i = 0; work[i] != NULL && n + 1 < 40; i++)
        args[n++] = work[i];
    args[n] = NULL;
    const char *const env[] = {"CT_LOG_LEVEL=info", NULL};
    e2e_start(c, env, args);
}

static void start_elastic(ct_child_t *c, const char *ep, const char *nnodes, const char *conf,
                          const char *dir, const char *max_restarts, const char *const *work)
{
    start_elastic_with(c, ep, nnodes, conf, dir, max_restarts, NULL, work);
}

/* GET /metrics from 127.0.0.1:port (malloc'd), or NULL. */
static char *scrape_metrics(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return NULL;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const char req[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    if (buf == NULL || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        write(fd, req, sizeof req - 1) != (ssize_t)(sizeof req - 1)) {
        free(buf);
        close(fd);
        return NULL;
    }
    for (ssize_t n; len + 1 < cap && (n = read(fd, buf + len, cap - len - 1)) > 0;)
        len += (size_t)n;
    buf[len] = '\0';
    close(fd);
    return buf;
}

static void test_scale_up(void)
{
    char d[AGENTS_MAX][600], ep[64];
    int port = e2e_free_port();
    snprintf(ep, sizeof ep, "--rdzv_endpoint=127.0.0.1:%d", port);
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "up%d", i);
        e2e_dir(d[i], sizeof d[i], name);
    }
    /* Workers sleep while the world has 2 workers, and exit 0 once it has 3. */
    const char *const work[] = {"--when-world", "3", "--exit", "0", "--sleep-ms", "60000", NULL};
    ct_child_t c[AGENTS_MAX];
    start_elastic(&c[0], ep, "--nnodes=2:3", SHORT, d[0], "0", work);
    wait_listening(port);
    start_elastic(&c[1], ep, "--nnodes=2:3", SHORT, d[1], "0", work);
    /* The round of two starts after the last call (1 s). */
    CT_ASSERT_MSG(e2e_wait_starts(d[0], 1, 30000) && e2e_wait_starts(d[1], 1, 30000),
                  "the first two nodes did not start:\n%s", c[0].err ? c[0].err : "");
    start_elastic(&c[2], ep, "--nnodes=2:3", SHORT, d[2], "0", work);
    wait_all(c, 3);
    for (int i = 0; i < 3; i++)
        CT_ASSERT_MSG(c[i].exit_code == 0, "agent %d exit %d:\n%s", i, c[i].exit_code, c[i].err);
    /* The first two ran twice (world 2, then 3), the third once; the restart count stayed 0
     * (max_restarts is 0: a counted restart would have failed the job). */
    CT_ASSERT_EQ(e2e_count_starts(d[0], 0), 2);
    CT_ASSERT_EQ(e2e_count_starts(d[1], 0), 2);
    CT_ASSERT_EQ(e2e_count_starts(d[2], 0), 1);
    int g[3];
    check_ranks(d, 3, 0, 3, 3, g);
    CT_ASSERT(g[0] == 0 && g[1] == 1 && g[2] == 2);
    char *dump = e2e_read("%s/env.2.0", d[2]);
    CT_ASSERT(dump != NULL);
    E2E_ENV_EQ(dump, "TORCHELASTIC_RESTART_COUNT", "0");
    free(dump);
    CT_ASSERT_STR_CONTAINS(c[0].err, "Detected new nodes (node 2 waits to join)");
    for (int i = 0; i < 3; i++)
        ct_child_close(&c[i]);
}

static void test_full_job_newcomer_waits(void)
{
    char d[AGENTS_MAX][600], ep[64];
    int port = e2e_free_port();
    snprintf(ep, sizeof ep, "--rdzv_endpoint=127.0.0.1:%d", port);
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "full%d", i);
        e2e_dir(d[i], sizeof d[i], name);
    }
    const char *const work[] = {"--sleep-ms", "3000", NULL};
    ct_child_t c[AGENTS_MAX];
    start_elastic(&c[0], ep, "--nnodes=2", SHORT, d[0], "0", work);
    wait_listening(port);
    start_elastic(&c[1], ep, "--nnodes=2", SHORT, d[1], "0", work);
    for (int i = 0; i < 2; i++)
        CT_ASSERT_MSG(e2e_wait_starts(d[i], 1, 30000), "node %d did not start", i);
    start_elastic(&c[2], ep, "--nnodes=2", SHORT, d[2], "0", work);
    wait_all(c, 3);
    for (int i = 0; i < 2; i++)
        CT_ASSERT_MSG(c[i].exit_code == 0, "agent %d exit %d:\n%s", i, c[i].exit_code, c[i].err);
    CT_ASSERT_MSG(c[2].exit_code == 1, "newcomer exit %d:\n%s", c[2].exit_code, c[2].err);
    CT_ASSERT_STR_CONTAINS(c[2].err, "the rendezvous is closed: the job has finished");
    CT_ASSERT_EQ(e2e_count_starts(d[0], -1), 1); /* no restart for a node that had no room */
    CT_ASSERT_EQ(e2e_count_starts(d[2], -1), 0);
    for (int i = 0; i < 3; i++)
        ct_child_close(&c[i]);
}

static void test_sigkill_one_of_three_reforms(void)
{
    char d[AGENTS_MAX][600], ep[64];
    int port = e2e_free_port();
    snprintf(ep, sizeof ep, "--rdzv_endpoint=127.0.0.1:%d", port);
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "kill%d", i);
        e2e_dir(d[i], sizeof d[i], name);
    }
    const char *const work[] = {"--when-world", "2", "--exit", "0", "--sleep-ms", "60000", NULL};
    ct_child_t c[AGENTS_MAX];
    start_elastic(&c[0], ep, "--nnodes=2:3", LONG, d[0], "3", work);
    wait_listening(port);
    start_elastic(&c[1], ep, "--nnodes=2:3", LONG, d[1], "3", work);
    start_elastic(&c[2], ep, "--nnodes=2:3", LONG, d[2], "3", work);
    for (int i = 0; i < 3; i++)
        CT_ASSERT_MSG(e2e_wait_starts(d[i], 1, 30000), "node %d did not start", i);
    int64_t t0 = ct_time_ms();
    kill(c[2].pid, SIGKILL);
    wait_all(c, 2);
    int64_t took = ct_time_ms() - t0;
    for (int i = 0; i < 2; i++) {
        CT_ASSERT_MSG(c[i].exit_code == 0, "agent %d exit %d:\n%s", i, c[i].exit_code, c[i].err);
        CT_ASSERT_STR_CONTAINS(c[i].err, "was lost; re-forming the job without it");
        CT_ASSERT_EQ(e2e_count_starts(d[i], 1), 1); /* restart count 1 */
    }
    CT_ASSERT(e2e_all_gone(d[2], 10000)); /* the killed agent's workers went with it */
    CT_ASSERT_MSG(took < 40000, "re-forming took %lld ms", (long long)took);
    int g[2];
    check_ranks(d, 2, 1, 2, 2, g);
    ct_child_close(&c[2]);
    for (int i = 0; i < 2; i++)
        ct_child_close(&c[i]);
}

static void test_sigkill_during_ctrain(void)
{
    if (ctrain == NULL) {
        printf("# skipped: no ctrain given\n");
        return;
    }
    char d[AGENTS_MAX][600], ep[64], train_dir[600];
    int port = e2e_free_port();
    snprintf(ep, sizeof ep, "--rdzv_endpoint=127.0.0.1:%d", port);
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "train%d", i);
        e2e_dir(d[i], sizeof d[i], name);
    }
    e2e_dir(train_dir, sizeof train_dir, "train_out");
    ct_child_t c[AGENTS_MAX];
    for (int i = 0; i < 3; i++) {
        const char *const args[] = {"--rdzv_backend=c10d",
                                    ep,
                                    "--rdzv_id=train",
                                    "--nnodes=2:3",
                                    "--rdzv_conf=last_call_timeout=30,heartbeat_timeout=2",
                                    "--max_restarts=3",
                                    "--grace_period=5",
                                    "--log_dir=/dev/null",
                                    "--no_python",
                                    ctrain,
                                    "--train_dir",
                                    train_dir,
                                    "--num_epochs",
                                    "40",
                                    "--ckpt_every_steps",
                                    "2",
                                    "--eval_every",
                                    "0",
                                    "--dataset",
                                    "synthetic:users=250,items=120,len=24,seed=5",
                                    "--maxlen",
                                    "20",
                                    "--hidden_units",
                                    "16",
                                    "--num_heads",
                                    "2",
                                    "--batch_size",
                                    "32",
                                    "--seed",
                                    "11",
                                    NULL};
        /* Every "node" is this machine: the ring may use loopback. */
        const char *const env[] = {"OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1",
                                   "CTRUN_COMM_ADDR=127.0.0.1", NULL};
        e2e_start(&c[i], env, args);
        if (i == 0)
            wait_listening(port);
    }
    /* The three train; once a checkpoint exists, the third agent dies. */
    int64_t deadline = ct_time_ms() + 60000;
    while (!e2e_exists("%s/latest", train_dir)) {
        for (int i = 0; i < 3; i++)
            ct_child_poll_output(&c[i], 0);
        CT_ASSERT_MSG(ct_time_ms() < deadline, "no checkpoint:\n%s", c[0].err ? c[0].err : "");
        ct_sleep_ms(20);
    }
    kill(c[2].pid, SIGKILL);
    wait_all(c, 2);
    for (int i = 0; i < 2; i++)
        CT_ASSERT_MSG(c[i].exit_code == 0, "agent %d exit %d:\n%s", i, c[i].exit_code, c[i].err);
    /* Rank 0 lives on the first agent: it resumed on two ranks and finished all 40 epochs. */
    CT_ASSERT_STR_CONTAINS(c[0].out, "# resumed from");
    CT_ASSERT_STR_CONTAINS(c[0].out, "trained by 3 ranks");
    CT_ASSERT_STR_CONTAINS(c[0].out, "# summary: {\"epochs\":40");
    CT_ASSERT(e2e_exists("%s/final.safetensors", train_dir));
    ct_child_close(&c[2]);
    for (int i = 0; i < 2; i++)
        ct_child_close(&c[i]);
}

static void test_sigkill_below_min(void)
{
    char d[2][600], ep[64];
    int port = e2e_free_port();
    snprintf(ep, sizeof ep, "--rdzv_endpoint=127.0.0.1:%d", port);
    e2e_dir(d[0], sizeof d[0], "min0");
    e2e_dir(d[1], sizeof d[1], "min1");
    const char *const work[] = {"--sleep-ms", "60000", NULL};
    ct_child_t c[2];
    start_elastic(&c[0], ep, "--nnodes=2:3", SHORT, d[0], "3", work);
    wait_listening(port);
    start_elastic(&c[1], ep, "--nnodes=2:3", SHORT, d[1], "3", work);
    for (int i = 0; i < 2; i++)
        CT_ASSERT_MSG(e2e_wait_starts(d[i], 1, 30000), "node %d did not start", i);
    kill(c[1].pid, SIGKILL);
    wait_all(c, 1);
    CT_ASSERT_MSG(c[0].exit_code == 1, "exit %d:\n%s", c[0].exit_code, c[0].err);
    CT_ASSERT_STR_CONTAINS(c[0].err, "node 1 (");
    CT_ASSERT_STR_CONTAINS(c[0].err, "was lost; 1 node is left, fewer than the minimum of 2");
    CT_ASSERT(e2e_all_gone(d[0], 10000));
    CT_ASSERT(e2e_all_gone(d[1], 10000));
    ct_child_close(&c[0]);
    ct_child_close(&c[1]);
}

static void test_store_host_killed(void)
{
    char d[2][600], ep[64];
    int port = e2e_free_port();
    snprintf(ep, sizeof ep, "--rdzv_endpoint=127.0.0.1:%d", port);
    e2e_dir(d[0], sizeof d[0], "host0");
    e2e_dir(d[1], sizeof d[1], "host1");
    const char *const work[] = {"--sleep-ms", "60000", NULL};
    ct_child_t c[2];
    start_elastic(&c[0], ep, "--nnodes=2", SHORT, d[0], "3", work);
    wait_listening(port);
    start_elastic(&c[1], ep, "--nnodes=2", SHORT, d[1], "3", work);
    for (int i = 0; i < 2; i++)
        CT_ASSERT_MSG(e2e_wait_starts(d[i], 1, 30000), "node %d did not start", i);
    int64_t t0 = ct_time_ms();
    kill(c[0].pid, SIGKILL);
    CT_ASSERT_OK(ct_child_wait(&c[1], 60000));
    int64_t took = ct_time_ms() - t0;
    CT_ASSERT_MSG(c[1].exit_code == 1, "exit %d:\n%s", c[1].exit_code, c[1].err);
    CT_ASSERT_STR_CONTAINS(c[1].err, "lost the rendezvous store at 127.0.0.1:");
    CT_ASSERT_MSG(took < 30000, "took %lld ms", (long long)took);
    CT_ASSERT(e2e_all_gone(d[0], 10000));
    CT_ASSERT(e2e_all_gone(d[1], 10000));
    ct_child_close(&c[0]);
    ct_child_close(&c[1]);
}

/* SIGKILL of one agent of a two-node c10d job whose workers each started a child in their group
 * and a double-forked setsid daemon: 1 s later nothing of that node's job is left (its reaper);
 * the other node stops, and nothing of it is left either. */
static void test_sigkill_agent_leaves_nothing(void)
{
    char d[2][600], ep[64];
    int port = e2e_free_port();
    snprintf(ep, sizeof ep, "--rdzv_endpoint=127.0.0.1:%d", port);
    e2e_dir(d[0], sizeof d[0], "orphan0");
    e2e_dir(d[1], sizeof d[1], "orphan1");
    const char *const work[] = {"--child", "--daemonize", "--sleep-ms", "60000", NULL};
    ct_child_t c[2];
    start_elastic(&c[0], ep, "--nnodes=2", SHORT, d[0], "0", work);
    wait_listening(port);
    start_elastic(&c[1], ep, "--nnodes=2", SHORT, d[1], "0", work);
    for (int i = 0; i < 2; i++) {
        int64_t deadline = ct_time_ms() + 30000;
        for (;;) { /* a worker, its child and its daemon on each node */
            char *ch = e2e_read("%s/children", d[i]);
            int lines = e2e_count(ch, "\n");
            free(ch);
            if (lines >= 2 && e2e_count_starts(d[i], -1) >= 1)
                break;
            CT_ASSERT_MSG(ct_time_ms() < deadline, "node %d did not start", i);
            ct_sleep_ms(10);
        }
    }
    kill(c[1].pid, SIGKILL);
    CT_ASSERT_OK(ct_child_wait(&c[1], 30000));
    CT_ASSERT_MSG(e2e_all_gone(d[1], 1000), "something of node 1 outlived its agent by 1 s");
    CT_ASSERT_OK(ct_child_wait(&c[0], 60000));
    CT_ASSERT_MSG(c[0].exit_code == 1, "exit %d:\n%s", c[0].exit_code, c[0].err);
    CT_ASSERT(e2e_all_gone(d[0], 5000));
    ct_child_close(&c[0]);
    ct_child_close(&c[1]);
}

/* SIGTERM to the third agent of an elastic job: it leaves (143); the others re-form without it
 * at once, with the restart count unchanged (--max_restarts=0), and finish in the world of 2. */
static void test_sigterm_node_leaves(void)
{
    char d[AGENTS_MAX][600], ep[64];
    int port = e2e_free_port();
    snprintf(ep, sizeof ep, "--rdzv_endpoint=127.0.0.1:%d", port);
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "leave%d", i);
        e2e_dir(d[i], sizeof d[i], name);
    }
    /* Workers of the world of 2 wait a little, for the scrape below. */
    const char *const work[] = {"--when-world", "2",     "--delay-ms", "1500", "--exit", "0",
                                "--sleep-ms",   "60000", NULL};
    int mport = e2e_free_port();
    char mopt[48];
    snprintf(mopt, sizeof mopt, "--metrics_port=%d", mport);
    ct_child_t c[AGENTS_MAX];
    start_elastic_with(&c[0], ep, "--nnodes=2:3", LONG, d[0], "0", mopt, work);
    wait_listening(port);
    start_elastic(&c[1], ep, "--nnodes=2:3", LONG, d[1], "0", work);
    start_elastic(&c[2], ep, "--nnodes=2:3", LONG, d[2], "0", work);
    for (int i = 0; i < 3; i++)
        CT_ASSERT_MSG(e2e_wait_starts(d[i], 1, 30000), "node %d did not start", i);
    int64_t t0 = ct_time_ms();
    kill(c[2].pid, SIGTERM);
    /* The survivors' workers of the re-formed world (restart count still 0). */
    for (int i = 0; i < 2; i++)
        CT_ASSERT_MSG(e2e_wait_starts(d[i], 2, 30000), "node %d did not re-form", i);
    int64_t took = ct_time_ms() - t0;
    printf("# SIGTERM to one of three nodes -> both survivors' workers running again: %lld ms\n",
           (long long)took);
    /* The re-forming counts as a membership restart, not as a failure. */
    char *m = scrape_metrics(mport);
    CT_ASSERT_MSG(m != NULL, "no metrics on port %d", mport);
    CT_ASSERT_STR_CONTAINS(m, "ctrun_restarts_by_cause_total{cause=\"membership\"} 1");
    CT_ASSERT_STR_CONTAINS(m, "ctrun_restarts_by_cause_total{cause=\"remote\"} 0");
    free(m);
    wait_all(c, 3);
    CT_ASSERT_MSG(c[2].exit_code == 143, "leaving agent exit %d:\n%s", c[2].exit_code, c[2].err);
    CT_ASSERT_STR_CONTAINS(c[2].err, "leaves the elastic job (SIGTERM)");
    CT_ASSERT(e2e_all_gone(d[2], 5000));
    for (int i = 0; i < 2; i++) {
        CT_ASSERT_MSG(c[i].exit_code == 0, "agent %d exit %d:\n%s", i, c[i].exit_code, c[i].err);
        CT_ASSERT_STR_CONTAINS(c[i].err, "left the job (SIGTERM); re-forming the job without it");
        CT_ASSERT_EQ(e2e_count_starts(d[i], 0), 2);
        CT_ASSERT_EQ(e2e_count_starts(d[i], 1), 0);
    }
    int g[2];
    check_ranks(d, 2, 0, 2, 2, g);
    CT_ASSERT_MSG(took < 10000, "re-forming took %lld ms", (long long)took);
    for (int i = 0; i < 3; i++)
        ct_child_close(&c[i]);
}

/* Two agents, MIN 2 (--nnodes=2:3, or MIN == MAX with --nnodes=2): SIGTERM to the second; it
 * exits 143 and the first exits 1 at once, naming why. */
static void sigterm_one_of_two(const char *nnodes, const char *conf, const char *name,
                               const char *why)
{
    char d[2][600], ep[64];
    int port = e2e_free_port();
    snprintf(ep, sizeof ep, "--rdzv_endpoint=127.0.0.1:%d", port);
    for (int i = 0; i < 2; i++) {
        char n[32];
        snprintf(n, sizeof n, "%s%d", name, i);
        e2e_dir(d[i], sizeof d[i], n);
    }
    const char *const work[] = {"--sleep-ms", "60000", NULL};
    ct_child_t c[2];
    start_elastic(&c[0], ep, nnodes, conf, d[0], "3", work);
    wait_listening(port);
    start_elastic(&c[1], ep, nnodes, conf, d[1], "3", work);
    for (int i = 0; i < 2; i++)
        CT_ASSERT_MSG(e2e_wait_starts(d[i], 1, 30000), "node %d did not start", i);
    int64_t t0 = ct_time_ms();
    kill(c[1].pid, SIGTERM);
    wait_all(c, 2);
    CT_ASSERT_MSG(c[1].exit_code == 143, "signalled agent exit %d:\n%s", c[1].exit_code, c[1].err);
    CT_ASSERT_MSG(c[0].exit_code == 1, "agent 0 exit %d:\n%s", c[0].exit_code, c[0].err);
    CT_ASSERT_STR_CONTAINS(c[0].err, why);
    CT_ASSERT_MSG(ct_time_ms() - t0 < 20000, "stopping took %lld ms",
                  (long long)(ct_time_ms() - t0));
    CT_ASSERT_EQ(e2e_count_starts(d[0], -1), 1);
    for (int i = 0; i < 2; i++) {
        CT_ASSERT(e2e_all_gone(d[i], 5000));
        ct_child_close(&c[i]);
    }
}

static void test_sigterm_below_min(void)
{
    sigterm_one_of_two("--nnodes=2:3", SHORT, "leavemin",
                       "left the job; 1 node is left, fewer than the minimum of 2");
}

static void test_sigterm_min_equals_max(void)
{
    sigterm_one_of_two("--nnodes=2", LONG, "leavefix",
                       "was stopped by SIGTERM; stopping this node too");
}

static void test_static_node_lost(void)
{
    char d[2][600], port[32], rank[32];
    snprintf(port, sizeof port, "--master_port=%d", e2e_free_port());
    e2e_dir(d[0], sizeof d[0], "stlost0");
    e2e_dir(d[1], sizeof d[1], "stlost1");
    ct_child_t c[2];
    for (int i = 0; i < 2; i++) {
        snprintf(rank, sizeof rank, "--node_rank=%d", i);
        const char *const args[] = {"--nnodes=2",
                                    rank,
                                    port,
                                    "--max_restarts=2",
                                    "--rdzv_conf=heartbeat_timeout=2,keep_alive_interval=0.5",
                                    "--log_dir=/dev/null",
                                    "--no_python",
                                    "WORKER",
                                    "--dir",
                                    d[i],
                                    "--sleep-ms",
                                    "60000",
                                    NULL};
        e2e_start(&c[i], NULL, args);
    }
    for (int i = 0; i < 2; i++)
        CT_ASSERT_MSG(e2e_wait_starts(d[i], 1, 30000), "node %d did not start", i);
    kill(c[1].pid, SIGKILL);
    wait_all(c, 1);
    CT_ASSERT_MSG(c[0].exit_code == 1, "exit %d:\n%s", c[0].exit_code, c[0].err);
    CT_ASSERT_STR_CONTAINS(c[0].err, "was lost; a static job cannot go on without it");
    CT_ASSERT_MSG(c[0].elapsed_ms < 40000, "took %lld ms", (long long)c[0].elapsed_ms);
    CT_ASSERT_EQ(e2e_count_starts(d[0], -1), 1);
    CT_ASSERT(e2e_all_gone(d[0], 10000));
    CT_ASSERT(e2e_all_gone(d[1], 10000));
    ct_child_close(&c[0]);
    ct_child_close(&c[1]);
}

int main(int argc, char **argv)
{
    e2e_init(argc, argv, "test_ctrun_e2e_elastic");
    ctrain = argc > 3 ? argv[3] : NULL;
    CT_RUN(test_three_static_nodes_and_a_restart);
    CT_RUN(test_three_c10d_nodes);
    CT_RUN(test_three_c10d_nodes_restart);
    CT_RUN(test_scale_up);
    CT_RUN(test_full_job_newcomer_waits);
    CT_RUN(test_sigkill_one_of_three_reforms);
    CT_RUN(test_sigkill_during_ctrain);
    CT_RUN(test_sigkill_below_min);
    CT_RUN(test_store_host_killed);
    CT_RUN(test_static_node_lost);
    CT_RUN(test_sigkill_agent_leaves_nothing);
    CT_RUN(test_sigterm_node_leaves);
    CT_RUN(test_sigterm_below_min);
    CT_RUN(test_sigterm_min_equals_max);
    return 0;
}
