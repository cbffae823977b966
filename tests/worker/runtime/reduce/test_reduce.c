/*
 * test_reduce.c - libctworker's reducer (ctworker.h section 8) on host memory: a world of one
 * is the identity for every call; a custom backend (two threads here) receives every sum and
 * broadcast, with what ct_reducer_ready took still reduced once by the final sum; arguments are
 * checked. The device paths (host staging, NCCL buckets) run in the gpu suite through ctrain.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ct_test.h"
#include "ctworker.h"

static void test_world_of_one(void)
{
    ct_errbuf_t eb;
    ct_reducer_t *r = NULL;
    CT_ASSERT_OK(ct_reducer_create(&r, NULL, &eb));
    CT_ASSERT_EQ(ct_reducer_rank(r), 0);
    CT_ASSERT_EQ(ct_reducer_world_size(r), 1);
    CT_ASSERT_STR_EQ(ct_reducer_name(r), "local");
    CT_ASSERT(!ct_reducer_overlaps(r));
    float f[3] = {1.5f, -2.0f, 3.25f};
    const int64_t ranges[1][2] = {{0, 2}};
    CT_ASSERT_OK(ct_reducer_ready(r, f, ranges, 1, &eb));
    CT_ASSERT_OK(ct_reducer_sum_f32(r, f, 3, &eb));
    CT_ASSERT(f[0] == 1.5f && f[1] == -2.0f && f[2] == 3.25f);
    double d[2] = {0.25, 7.0};
    CT_ASSERT_OK(ct_reducer_sum_f64(r, d, 2, &eb));
    CT_ASSERT(d[0] == 0.25 && d[1] == 7.0);
    char b[4] = "abc";
    CT_ASSERT_OK(ct_reducer_broadcast(r, b, sizeof b, 0, &eb));
    CT_ASSERT_STR_EQ(b, "abc");
    CT_ASSERT_ERR(ct_reducer_broadcast(r, b, sizeof b, 1, &eb), CT_ERANGE_VALUE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "rank 1 in a world of 1");
    CT_ASSERT_ERR(ct_reducer_ready(r, NULL, ranges, 1, &eb), -EINVAL);
    ct_reducer_destroy(r);
    ct_reducer_destroy(NULL);
}

/* ---- two threads joined by a backend over shared memory ---- */

typedef struct pair {
    pthread_barrier_t bar;
    void *slot[2];
    int sums, broadcasts;
} pair_t;

typedef struct side {
    pair_t *p;
    int rank;
    ct_reducer_t *r;
    float f[4];
    double d[2];
    char text[8];
} side_t;

static int pair_sum(void *ctx, void *buf, int64_t n, ct_dtype_t dtype, ct_errbuf_t *eb)
{
    (void)eb;
    side_t *s = ctx;
    pair_t *p = s->p;
    p->slot[s->rank] = buf;
    pthread_barrier_wait(&p->bar);
    if (s->rank == 0) {
        p->sums++;
        for (int64_t i = 0; i < n; i++) {
            if (dtype == CT_DTYPE_F32) {
                float v = ((float *)p->slot[0])[i] + ((float *)p->slot[1])[i];
                ((float *)p->slot[0])[i] = ((float *)p->slot[1])[i] = v;
            } else {
                double v = ((double *)p->slot[0])[i] + ((double *)p->slot[1])[i];
                ((double *)p->slot[0])[i] = ((double *)p->slot[1])[i] = v;
            }
        }
    }
    pthread_barrier_wait(&p->bar);
    return 0;
}

static int pair_broadcast(void *ctx, void *buf, size_t nbytes, int root, ct_errbuf_t *eb)
{
    (void)eb;
    side_t *s = ctx;
    pair_t *p = s->p;
    p->slot[s->rank] = buf;
    pthread_barrier_wait(&p->bar);
    if (s->rank != root)
        memcpy(buf, p->slot[root], nbytes);
    else
        p->broadcasts++;
    pthread_barrier_wait(&p->bar);
    return 0;
}

static void *side_main(void *arg)
{
    side_t *s = arg;
    ct_errbuf_t eb;
    /* the first two floats are declared final early: on host memory that starts nothing, and
     * the final sum still reduces them exactly once */
    const int64_t ranges[1][2] = {{0, 2}};
    CT_ASSERT_OK(ct_reducer_ready(s->r, s->f, ranges, 1, &eb));
    CT_ASSERT_OK(ct_reducer_sum_f32(s->r, s->f, 4, &eb));
    CT_ASSERT_OK(ct_reducer_sum_f64(s->r, s->d, 2, &eb));
    CT_ASSERT_OK(ct_reducer_broadcast(s->r, s->text, sizeof s->text, 1, &eb));
    return NULL;
}

static void test_custom_backend(void)
{
    pair_t p;
    memset(&p, 0, sizeof p);
    CT_ASSERT(pthread_barrier_init(&p.bar, NULL, 2) == 0);
    side_t s[2];
    pthread_t th[2];
    ct_errbuf_t eb;
    for (int k = 0; k < 2; k++) {
        memset(&s[k], 0, sizeof s[k]);
        s[k].p = &p;
        s[k].rank = k;
        for (int i = 0; i < 4; i++)
            s[k].f[i] = (float)(10 * k + i);
        s[k].d[0] = 0.5 * (k + 1);
        s[k].d[1] = -1.0;
        snprintf(s[k].text, sizeof s[k].text, "rank%d", k);
        ct_reducer_backend_t be = {.name = "pair",
                                   .rank = k,
                                   .world_size = 2,
                                   .ctx = &s[k],
                                   .sum = pair_sum,
                                   .broadcast = pair_broadcast};
        CT_ASSERT_OK(ct_reducer_create_custom(&s[k].r, &be, &eb));
        CT_ASSERT_STR_EQ(ct_reducer_name(s[k].r), "pair");
        CT_ASSERT_EQ(ct_reducer_world_size(s[k].r), 2);
        CT_ASSERT(!ct_reducer_overlaps(s[k].r));
    }
    for (int k = 0; k < 2; k++)
        CT_ASSERT(pthread_create(&th[k], NULL, side_main, &s[k]) == 0);
    for (int k = 0; k < 2; k++)
        pthread_join(th[k], NULL);
    CT_ASSERT_EQ(p.sums, 2);
    CT_ASSERT_EQ(p.broadcasts, 1);
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 4; i++)
            CT_ASSERT_CLOSE(s[k].f[i], (double)(10 + 2 * i), 0, 0);
        CT_ASSERT_CLOSE(s[k].d[0], 1.5, 0, 0);
        CT_ASSERT_CLOSE(s[k].d[1], -2.0, 0, 0);
        CT_ASSERT_STR_EQ(s[k].text, "rank1");
        ct_reducer_destroy(s[k].r);
    }
    pthread_barrier_destroy(&p.bar);

    /* a backend without its functions, or with a rank outside its world, is refused */
    ct_reducer_t *r = NULL;
    ct_reducer_backend_t bad = {
        .rank = 2, .world_size = 2, .sum = pair_sum, .broadcast = pair_broadcast};
    CT_ASSERT_ERR(ct_reducer_create_custom(&r, &bad, &eb), -EINVAL);
    bad.rank = 0;
    bad.sum = NULL;
    CT_ASSERT_ERR(ct_reducer_create_custom(&r, &bad, &eb), -EINVAL);
    CT_ASSERT(r == NULL);
}

int main(void)
{
    CT_RUN(test_world_of_one);
    CT_RUN(test_custom_backend);
    return 0;
}
