/*
 * test_comm_ring.c - the CPU ring communicator, W ranks on W threads of this process over
 * loopback TCP, each with its own store client on a ctrun-store child (so it runs under the
 * sanitizers, which the multi-process tests in test_comm_e2e.c do not):
 *   - allreduce of f32 / f64 / bf16, sum and avg, for W = 2, 3, 4 and sizes from 0 to a few
 *     chunks, equals comm_check.h's documented fold bit for bit, on every rank, whatever the
 *     chunk size (the default and 8 bytes, which makes every element its own chunk);
 *   - broadcast from every root, allgather (separate and in-place send buffer), a barrier that
 *     no rank leaves before the last one entered;
 *   - ranks that disagree about a collective fail at once (CT_EPROTOCOL where it is seen,
 *     CT_EPEER elsewhere), and later calls return CT_ESTATE;
 *   - a rank that never joins a collective: the others fail within the timeout (-ETIMEDOUT or,
 *     once a neighbour gave up, CT_EPEER), never hang;
 *   - a rank that closes its communicator mid-run: the others get CT_EPEER long before the
 *     timeout;
 *   - a stray connection to a rank's listener (wrong namespace) is turned away and the ring
 *     still forms; a world of one needs no store.
 * Usage: test_comm_ring PATH_TO_CTRUN_STORE
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm_check.h"
#include "ct_comm_internal.h"
#include "ct_ranks.h"
#include "ct_store_client.h"
#include "ct_test.h"
#include "ct_time.h"

enum { MAX_W = 4 };

static ct_store_proc_t store;
static int run_counter;

/* ---- W threads, one communicator each --------------------------------------------------- */

typedef struct rank_ctx rank_ctx_t;
typedef void (*body_fn)(rank_ctx_t *r);

struct rank_ctx {
    int rank, world;
    char prefix[96];
    int64_t timeout_ms;
    size_t chunk;
    ct_store_client_t st;
    ct_comm_t *comm;
    body_fn body;
    int create_rc;
    ct_errbuf_t eb;
    /* results the bodies leave for the checks */
    int rc[8];
    char msg[8][CT_ERRBUF_SIZE];
    int64_t t[4];
    void *arg;
};

static void *rank_main(void *p)
{
    rank_ctx_t *r = p;
    ct_store_client_opts_t so = {.timeout_ms = 20000};
    r->create_rc = ct_store_client_connect(&r->st, "127.0.0.1", store.port, &so, &r->eb);
    if (r->create_rc == 0) {
        ct__comm_cfg_t cfg = {.rank = r->rank,
                              .world_size = r->world,
                              .local_rank = r->rank,
                              .local_world_size = r->world,
                              .store = &r->st,
                              .key_prefix = r->prefix,
                              .timeout_ms = r->timeout_ms,
                              .chunk_bytes = r->chunk};
        r->create_rc = ct__comm_ring_create(&r->comm, &cfg, &r->eb);
    }
    if (r->create_rc == 0)
        r->body(r);
    ct__comm_destroy(r->comm);
    r->comm = NULL;
    ct_store_client_close(&r->st);
    return NULL;
}

/* Runs body on W ranks of a fresh namespace; ranks[] keeps the results. */
static void run_ranks(rank_ctx_t *ranks, int w, body_fn body, int64_t timeout_ms, size_t chunk,
                      void *arg)
{
    pthread_t th[MAX_W];
    int id = ++run_counter;
    for (int r = 0; r < w; r++) {
        memset(&ranks[r], 0, sizeof ranks[r]);
        ranks[r].rank = r;
        ranks[r].world = w;
        snprintf(ranks[r].prefix, sizeof ranks[r].prefix, "ctworker/ring-test-%d/attempt_0/", id);
        ranks[r].timeout_ms = timeout_ms;
        ranks[r].chunk = chunk;
        ranks[r].body = body;
        ranks[r].arg = arg;
        CT_ASSERT(pthread_create(&th[r], NULL, rank_main, &ranks[r]) == 0);
    }
    for (int r = 0; r < w; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < w; r++)
        CT_ASSERT_MSG(ranks[r].create_rc == 0, "rank %d of %d: %s", r, w, ranks[r].eb.msg);
}

/* ---- allreduce against the documented order ------------------------------------------------ */

static const uint64_t sizes[] = {0, 1, 2, 3, 4, 5, 7, 13, 64, 1000, 65535, 65536 + 7, 200003};

static void body_allreduce(rank_ctx_t *r)
{
    static const ct_dtype_t dts[] = {CT_DTYPE_F32, CT_DTYPE_F64, CT_DTYPE_BF16};
    bool small_chunk = r->chunk != 0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        uint64_t n = sizes[s];
        if (small_chunk && n > 5000)
            continue; /* 8-byte chunks: one poll round per element, keep it short */
        for (int d = 0; d < 3; d++) {
            for (int op = 0; op < 2; op++) {
                ct_dtype_t dt = dts[d];
                uint64_t seed = 1000 * s + 10 * (uint64_t)d + (uint64_t)op + 7;
                void *buf = malloc(n * 8 + 8);
                CT_ASSERT(buf != NULL);
                cc_fill(buf, n, dt, seed, r->rank);
                ct_errbuf_t eb;
                int rc = ct_comm_allreduce(r->comm, buf, (int64_t)n, dt, (ct_comm_op_t)op, &eb);
                CT_ASSERT_MSG(rc == 0, "rank %d: %s", r->rank, eb.msg);
                uint64_t got, want;
                int64_t bad = cc_check(buf, n, dt, (ct_comm_op_t)op, seed, r->world, &got, &want);
                CT_ASSERT_MSG(bad < 0,
                              "W=%d rank %d: allreduce %s of %llu %s: element %lld is 0x%llx, "
                              "the documented order gives 0x%llx",
                              r->world, r->rank, op ? "avg" : "sum", (unsigned long long)n,
                              ct_dtype_name(dt), (long long)bad, (unsigned long long)got,
                              (unsigned long long)want);
                free(buf);
            }
        }
    }
    r->rc[0] = (int)ct_comm_count(r->comm);
}

static void test_allreduce_order(void)
{
    rank_ctx_t ranks[MAX_W];
    for (int w = 2; w <= MAX_W; w++) {
        run_ranks(ranks, w, body_allreduce, 60000, 0, NULL);
        printf("  W=%d: %d allreduces equal the documented fold bit for bit\n", w, ranks[0].rc[0]);
        run_ranks(ranks, w, body_allreduce, 60000, 8, NULL);
        printf("  W=%d with 8-byte chunks: the same\n", w);
    }
}

/* ---- broadcast, allgather, barrier -------------------------------------------------------- */

static void body_bcast_gather(rank_ctx_t *r)
{
    static const size_t bsizes[] = {0, 1, 1000, (1u << 20) + 1};
    ct_errbuf_t eb;
    for (size_t s = 0; s < 4; s++) {
        size_t n = bsizes[s];
        uint8_t *buf = malloc(n + 1);
        CT_ASSERT(buf != NULL);
        for (int root = 0; root < r->world; root++) {
            for (size_t i = 0; i < n; i++)
                buf[i] = r->rank == root ? (uint8_t)(cc_mix(i + 31 * (uint64_t)root) >> 7)
                                         : (uint8_t)0xEE;
            CT_ASSERT_MSG(ct_comm_broadcast(r->comm, buf, n, root, &eb) == 0, "%s", eb.msg);
            for (size_t i = 0; i < n; i++)
                CT_ASSERT_MSG(buf[i] == (uint8_t)(cc_mix(i + 31 * (uint64_t)root) >> 7),
                              "broadcast of %zu bytes from %d: byte %zu wrong on rank %d", n, root,
                              i, r->rank);
        }
        free(buf);
    }
    static const size_t gsizes[] = {0, 1, 333, 100000};
    for (size_t s = 0; s < 4; s++) {
        size_t n = gsizes[s];
        uint8_t *send = malloc(n + 1), *recv = malloc(n * (size_t)r->world + 1);
        CT_ASSERT(send && recv);
        for (int inplace = 0; inplace < 2; inplace++) {
            memset(recv, 0xEE, n * (size_t)r->world);
            uint8_t *src = inplace ? recv + n * (size_t)r->rank : send;
            for (size_t i = 0; i < n; i++)
                src[i] = (uint8_t)(cc_mix(i * 7 + (uint64_t)r->rank) >> 9);
            CT_ASSERT_MSG(ct_comm_allgather(r->comm, src, recv, n, &eb) == 0, "%s", eb.msg);
            for (int k = 0; k < r->world; k++)
                for (size_t i = 0; i < n; i++)
                    CT_ASSERT_MSG(recv[(size_t)k * n + i] ==
                                      (uint8_t)(cc_mix(i * 7 + (uint64_t)k) >> 9),
                                  "allgather of %zu bytes: rank %d's byte %zu wrong on rank %d", n,
                                  k, i, r->rank);
        }
        free(send);
        free(recv);
    }
    /* Barrier: ranks arrive 0, 80, 160, ... ms apart; nobody may leave before the last came. */
    for (int round = 0; round < 3; round++) {
        ct_sleep_ms(80 * ((r->rank + round) % r->world));
        r->t[0] = ct_time_ms();
        CT_ASSERT_MSG(ct_comm_barrier(r->comm, &eb) == 0, "%s", eb.msg);
        r->t[1] = ct_time_ms();
        int64_t times[2 * MAX_W];
        int64_t mine[2] = {r->t[0], r->t[1]};
        CT_ASSERT_MSG(ct_comm_allgather(r->comm, mine, times, sizeof mine, &eb) == 0, "%s", eb.msg);
        for (int k = 0; k < r->world; k++)
            CT_ASSERT_MSG(r->t[1] >= times[2 * k],
                          "rank %d left the barrier at %lld, before rank %d entered at %lld",
                          r->rank, (long long)r->t[1], k, (long long)times[2 * k]);
    }
}

static void test_broadcast_allgather_barrier(void)
{
    rank_ctx_t ranks[MAX_W];
    for (int w = 2; w <= MAX_W; w++)
        run_ranks(ranks, w, body_bcast_gather, 60000, 0, NULL);
}

/* ---- failures ------------------------------------------------------------------------------ */

static void body_mismatch(rank_ctx_t *r)
{
    float v[16] = {0};
    ct_errbuf_t eb;
    int64_t t0 = ct_time_ms();
    r->rc[0] =
        ct_comm_allreduce(r->comm, v, r->rank == 0 ? 10 : 11, CT_DTYPE_F32, CT_COMM_SUM, &eb);
    r->t[0] = ct_time_ms() - t0;
    snprintf(r->msg[0], sizeof r->msg[0], "%s", eb.msg);
    r->rc[1] = ct_comm_barrier(r->comm, &eb);
    snprintf(r->msg[1], sizeof r->msg[1], "%s", eb.msg);
}

static void test_mismatch(void)
{
    rank_ctx_t ranks[MAX_W];
    run_ranks(ranks, 3, body_mismatch, 30000, 0, NULL);
    int protocol = 0;
    for (int r = 0; r < 3; r++) {
        printf("  rank %d: %s (%lld ms)\n", r, ranks[r].msg[0], (long long)ranks[r].t[0]);
        CT_ASSERT_MSG(ranks[r].rc[0] == CT_EPROTOCOL || ranks[r].rc[0] == CT_EPEER, "rank %d: %s",
                      r, ranks[r].msg[0]);
        protocol += ranks[r].rc[0] == CT_EPROTOCOL;
        CT_ASSERT_MSG(ranks[r].t[0] < 15000, "rank %d took %lld ms to notice", r,
                      (long long)ranks[r].t[0]);
        CT_ASSERT_ERR(ranks[r].rc[1], CT_ESTATE);
        CT_ASSERT_STR_CONTAINS(ranks[r].msg[1], "aborted by an earlier error");
    }
    CT_ASSERT_GE(protocol, 1);
    bool named = false;
    for (int r = 0; r < 3; r++)
        named |= strstr(ranks[r].msg[0], "allreduce of 10 F32") != NULL &&
                 strstr(ranks[r].msg[0], "allreduce of 11 F32") != NULL;
    CT_ASSERT_MSG(named, "no message names both calls");
}

static void body_absent(rank_ctx_t *r)
{
    float v[1000];
    for (int i = 0; i < 1000; i++)
        v[i] = 1.0f;
    ct_errbuf_t eb;
    if (r->rank == r->world - 1) {
        /* Joins the first collective, then stays away until the others have given up. */
        r->rc[0] = ct_comm_allreduce(r->comm, v, 1000, CT_DTYPE_F32, CT_COMM_SUM, &eb);
        ct_sleep_ms(r->timeout_ms + 3000);
        return;
    }
    r->rc[0] = ct_comm_allreduce(r->comm, v, 1000, CT_DTYPE_F32, CT_COMM_SUM, &eb);
    int64_t t0 = ct_time_ms();
    r->rc[1] = ct_comm_allreduce(r->comm, v, 1000, CT_DTYPE_F32, CT_COMM_SUM, &eb);
    r->t[0] = ct_time_ms() - t0;
    snprintf(r->msg[1], sizeof r->msg[1], "%s", eb.msg);
}

static void test_absent_peer_times_out(void)
{
    rank_ctx_t ranks[MAX_W];
    run_ranks(ranks, 3, body_absent, 1500, 0, NULL);
    bool timed_out = false;
    for (int r = 0; r < 2; r++) {
        printf("  rank %d: %s after %lld ms\n", r, ranks[r].msg[1], (long long)ranks[r].t[0]);
        CT_ASSERT_OK(ranks[r].rc[0]);
        CT_ASSERT_MSG(ranks[r].rc[1] == -ETIMEDOUT || ranks[r].rc[1] == CT_EPEER, "rank %d: %s", r,
                      ranks[r].msg[1]);
        timed_out |= ranks[r].rc[1] == -ETIMEDOUT;
        if (ranks[r].rc[1] == -ETIMEDOUT)
            CT_ASSERT_GE(ranks[r].t[0], 1400);
        /* the timeout, plus generous slack for a loaded machine */
        CT_ASSERT_MSG(ranks[r].t[0] < 1500 + 10000, "rank %d waited %lld ms", r,
                      (long long)ranks[r].t[0]);
    }
    CT_ASSERT(timed_out);
}

static void body_leaver(rank_ctx_t *r)
{
    float v[4096];
    ct_errbuf_t eb;
    for (int i = 0; i < 4096; i++)
        v[i] = 1.0f;
    r->rc[0] = ct_comm_allreduce(r->comm, v, 4096, CT_DTYPE_F32, CT_COMM_SUM, &eb);
    if (r->rank == 1) {
        ct__comm_destroy(r->comm); /* gone, as a process that exits */
        r->comm = NULL;
        return;
    }
    int64_t t0 = ct_time_ms();
    r->rc[1] = ct_comm_allreduce(r->comm, v, 4096, CT_DTYPE_F32, CT_COMM_SUM, &eb);
    r->t[0] = ct_time_ms() - t0;
    snprintf(r->msg[1], sizeof r->msg[1], "%s", eb.msg);
}

static void test_leaving_peer_is_noticed(void)
{
    rank_ctx_t ranks[MAX_W];
    run_ranks(ranks, 4, body_leaver, 60000, 0, NULL);
    for (int r = 0; r < 4; r++) {
        CT_ASSERT_OK(ranks[r].rc[0]);
        if (r == 1)
            continue;
        printf("  rank %d: %s after %lld ms\n", r, ranks[r].msg[1], (long long)ranks[r].t[0]);
        CT_ASSERT_ERR(ranks[r].rc[1], CT_EPEER);
        CT_ASSERT_MSG(ranks[r].t[0] < 30000, "rank %d needed %lld ms (the timeout is 60 s)", r,
                      (long long)ranks[r].t[0]);
    }
}

/* ---- set-up ------------------------------------------------------------------------------- */

static void body_sum_one(rank_ctx_t *r)
{
    float v = (float)(r->rank + 1);
    ct_errbuf_t eb;
    r->rc[0] = ct_comm_allreduce(r->comm, &v, 1, CT_DTYPE_F32, CT_COMM_SUM, &eb);
    r->rc[1] = (int)v;
}

typedef struct stray {
    char prefix[96];
    int closed; /* 1 when rank 0 closed the stray connection */
} stray_t;

static void *stray_main(void *p)
{
    stray_t *s = p;
    ct_store_client_t st;
    ct_errbuf_t eb;
    ct_store_client_opts_t so = {.timeout_ms = 20000};
    CT_ASSERT_OK(ct_store_client_connect(&st, "127.0.0.1", store.port, &so, &eb));
    char key[160];
    snprintf(key, sizeof key, "%sring/0", s->prefix);
    ct_store_bytes_t v;
    CT_ASSERT_OK(ct_store_get(&st, key, &v, &eb));
    char addr[64];
    snprintf(addr, sizeof addr, "%.*s", (int)v.len, (const char *)v.data);
    ct_store_client_close(&st);
    int port = atoi(strrchr(addr, ':') + 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CT_ASSERT(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    uint8_t hello[32] = {0x43, 0x54, 0x52, 0x48, 1}; /* "CTRH", version 1, namespace 0 */
    CT_ASSERT(send(fd, hello, sizeof hello, 0) == (ssize_t)sizeof hello);
    uint8_t b;
    struct timeval tv = {.tv_sec = 30};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    s->closed = recv(fd, &b, 1, 0) == 0;
    close(fd);
    return NULL;
}

static void test_stray_connection_turned_away(void)
{
    rank_ctx_t ranks[2];
    stray_t s;
    int id = ++run_counter;
    snprintf(s.prefix, sizeof s.prefix, "ctworker/ring-test-%d/attempt_0/", id);
    pthread_t th[2], sth;
    for (int r = 0; r < 2; r++) {
        memset(&ranks[r], 0, sizeof ranks[r]);
        ranks[r].rank = r;
        ranks[r].world = 2;
        snprintf(ranks[r].prefix, sizeof ranks[r].prefix, "%s", s.prefix);
        ranks[r].timeout_ms = 30000;
        ranks[r].body = body_sum_one;
    }
    /* Rank 0 listens and waits for rank 1's address; the stray gets into its backlog first. */
    CT_ASSERT(pthread_create(&th[0], NULL, rank_main, &ranks[0]) == 0);
    CT_ASSERT(pthread_create(&sth, NULL, stray_main, &s) == 0);
    ct_sleep_ms(300);
    CT_ASSERT(pthread_create(&th[1], NULL, rank_main, &ranks[1]) == 0);
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    pthread_join(sth, NULL);
    for (int r = 0; r < 2; r++) {
        CT_ASSERT_MSG(ranks[r].create_rc == 0, "rank %d: %s", r, ranks[r].eb.msg);
        CT_ASSERT_OK(ranks[r].rc[0]);
        CT_ASSERT_EQ(ranks[r].rc[1], 3);
    }
    CT_ASSERT_EQ(s.closed, 1);
}

static void test_world_of_one(void)
{
    ct__comm_cfg_t cfg = {.rank = 0,
                          .world_size = 1,
                          .local_world_size = 1,
                          .key_prefix = "ctworker/one/attempt_0/",
                          .timeout_ms = 1000};
    ct_comm_t *c = NULL;
    ct_errbuf_t eb;
    CT_ASSERT_OK(ct__comm_ring_create(&c, &cfg, &eb));
    float v[3] = {1.5f, -2.0f, 3.0f};
    CT_ASSERT_OK(ct_comm_allreduce(c, v, 3, CT_DTYPE_F32, CT_COMM_SUM, &eb));
    CT_ASSERT(v[0] == 1.5f && v[1] == -2.0f && v[2] == 3.0f);
    CT_ASSERT_OK(ct_comm_allreduce(c, v, 3, CT_DTYPE_F32, CT_COMM_AVG, &eb));
    CT_ASSERT(v[0] == 1.5f);
    uint8_t s[4] = {1, 2, 3, 4}, g[4] = {0};
    CT_ASSERT_OK(ct_comm_broadcast(c, s, 4, 0, &eb));
    CT_ASSERT_OK(ct_comm_allgather(c, s, g, 4, &eb));
    CT_ASSERT(memcmp(s, g, 4) == 0);
    CT_ASSERT_OK(ct_comm_barrier(c, &eb));
    CT_ASSERT_EQ(ct_comm_count(c), 5);
    /* argument errors leave it usable */
    CT_ASSERT_ERR(ct_comm_allreduce(c, v, 3, CT_DTYPE_I32, CT_COMM_SUM, &eb), -EINVAL);
    CT_ASSERT_STR_CONTAINS(eb.msg, "I32");
    CT_ASSERT_ERR(ct_comm_broadcast(c, s, 4, 1, &eb), -EINVAL);
    CT_ASSERT_ERR(ct_comm_allreduce(c, NULL, 3, CT_DTYPE_F32, CT_COMM_SUM, &eb), -EINVAL);
    CT_ASSERT_OK(ct_comm_barrier(c, &eb));
    CT_ASSERT_EQ(ct_comm_size(c), 1);
    CT_ASSERT_EQ(ct_comm_backend(c), CT_COMM_CPU);
    ct__comm_destroy(c);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_comm_ring PATH_TO_CTRUN_STORE\n");
        return 2;
    }
    CT_ASSERT_OK(ct_store_proc_start(&store, argv[1]));
    CT_RUN(test_world_of_one);
    CT_RUN(test_allreduce_order);
    CT_RUN(test_broadcast_allgather_barrier);
    CT_RUN(test_mismatch);
    CT_RUN(test_absent_peer_times_out);
    CT_RUN(test_leaving_peer_is_noticed);
    CT_RUN(test_stray_connection_turned_away);
    ct_store_proc_stop(&store);
    return 0;
}
