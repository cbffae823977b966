/*
 * test_shard.c - data sharding: every epoch order is a permutation, fixed by (seed, epoch)
 * alone, identical across processes; for every world size 1..8 the ranks' slices, in rank
 * order, are exactly the global batch (so the trajectory cannot depend on W), sizes differ by
 * at most one, and an epoch visits every sample once (or all but the dropped tail).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_child.h"
#include "ct_test.h"
#include "ctworker.h"

static ct_shard_t shard(int64_t n, int64_t b, int w, int r, bool drop_last)
{
    return (ct_shard_t){.n_samples = n, .global_batch = b, .world_size = w, .rank = r,
                        .seed = 1234, .shuffle = true, .drop_last = drop_last};
}

static void test_check(void)
{
    ct_errbuf_t eb;
    ct_shard_t s = shard(10, 4, 2, 1, false);
    CT_ASSERT_OK(ct_shard_check(&s, &eb));
    s.rank = 2;
    CT_ASSERT_ERR(ct_shard_check(&s, &eb), -EINVAL);
    CT_ASSERT_STR_CONTAINS(eb.msg, "rank 2 (expected 0..1)");
    s = shard(0, 4, 2, 0, false);
    CT_ASSERT_ERR(ct_shard_check(&s, &eb), -EINVAL);
    CT_ASSERT_STR_CONTAINS(eb.msg, "dataset size 0");
    s = shard(10, 0, 2, 0, false);
    CT_ASSERT_ERR(ct_shard_check(&s, &eb), -EINVAL);
    s = shard(10, 4, 0, 0, false);
    CT_ASSERT_ERR(ct_shard_check(&s, &eb), -EINVAL);
    s = shard(3, 4, 1, 0, true);
    CT_ASSERT_ERR(ct_shard_check(&s, &eb), -EINVAL);
    CT_ASSERT_STR_CONTAINS(eb.msg, "no step would run");
    s.drop_last = false;
    CT_ASSERT_OK(ct_shard_check(&s, &eb));
}

static void test_steps_and_locate(void)
{
    ct_shard_t s = shard(10, 4, 3, 0, false);
    CT_ASSERT_EQ(ct_shard_steps_per_epoch(&s), 3);
    CT_ASSERT_EQ(ct_shard_batch_size(&s, 0), 4);
    CT_ASSERT_EQ(ct_shard_batch_size(&s, 2), 2); /* the partial tail */
    CT_ASSERT_EQ(ct_shard_batch_size(&s, 3), 0);
    CT_ASSERT_EQ(ct_shard_batch_size(&s, -1), 0);
    CT_ASSERT_EQ(ct_shard_max_local(&s), 2);
    int64_t e, st;
    ct_shard_locate(&s, 7, &e, &st);
    CT_ASSERT(e == 2 && st == 1);
    s.drop_last = true;
    CT_ASSERT_EQ(ct_shard_steps_per_epoch(&s), 2);
    CT_ASSERT_EQ(ct_shard_batch_size(&s, 2), 0);
    ct_shard_locate(&s, 7, &e, &st);
    CT_ASSERT(e == 3 && st == 1);
    s = shard(12, 4, 3, 0, false);
    CT_ASSERT_EQ(ct_shard_steps_per_epoch(&s), 3);
}

static void test_permutations(void)
{
    enum { N = 1000 };
    static int64_t p[N], q[N];
    static char seen[N];
    ct_shard_t s = shard(N, 32, 1, 0, false);
    for (int64_t epoch = 0; epoch < 5; epoch++) {
        ct_shard_permutation(&s, epoch, p);
        memset(seen, 0, sizeof seen);
        int fixed = 0;
        for (int i = 0; i < N; i++) {
            CT_ASSERT(p[i] >= 0 && p[i] < N);
            CT_ASSERT_EQ(seen[p[i]], 0);
            seen[p[i]] = 1;
            fixed += p[i] == i;
        }
        CT_ASSERT_LT(fixed, 10); /* a shuffle, not the identity (about 1 expected) */
        ct_shard_permutation(&s, epoch, q);
        CT_ASSERT(memcmp(p, q, sizeof p) == 0);
        ct_shard_permutation(&s, epoch + 1, q);
        CT_ASSERT(memcmp(p, q, sizeof p) != 0);
    }
    /* Only (seed, epoch) matter: not the rank, the world size or the batch size. */
    ct_shard_permutation(&s, 3, p);
    ct_shard_t t = shard(N, 7, 5, 4, true);
    ct_shard_permutation(&t, 3, q);
    CT_ASSERT(memcmp(p, q, sizeof p) == 0);
    t.seed = 1235;
    ct_shard_permutation(&t, 3, q);
    CT_ASSERT(memcmp(p, q, sizeof p) != 0);
    t.shuffle = false;
    ct_shard_permutation(&t, 3, q);
    for (int i = 0; i < N; i++)
        CT_ASSERT_EQ(q[i], i);
    /* Tiny datasets. */
    ct_shard_t one = shard(1, 1, 1, 0, false);
    ct_shard_permutation(&one, 0, p);
    CT_ASSERT_EQ(p[0], 0);
}

/* For every W the ranks' slices, concatenated in rank order, are the global batch. */
static void check_union(int64_t n, int64_t b, bool drop_last)
{
    static int64_t perm[2000], out[2000], cat[2000];
    static int visits[2000];
    ct_shard_t s0 = shard(n, b, 1, 0, drop_last);
    ct_shard_permutation(&s0, 2, perm);
    int64_t steps = ct_shard_steps_per_epoch(&s0);
    for (int w = 1; w <= 8; w++) {
        memset(visits, 0, sizeof visits);
        for (int64_t step = 0; step < steps; step++) {
            int64_t bsz = ct_shard_batch_size(&s0, step), len = 0, lo = INT64_MAX, hi = 0;
            for (int r = 0; r < w; r++) {
                ct_shard_t s = shard(n, b, w, r, drop_last);
                CT_ASSERT_OK(ct_shard_check(&s, NULL));
                int64_t got = ct_shard_indices(&s, perm, step, out);
                CT_ASSERT_LE(got, ct_shard_max_local(&s));
                lo = got < lo ? got : lo;
                hi = got > hi ? got : hi;
                memcpy(cat + len, out, (size_t)got * sizeof *out);
                len += got;
            }
            CT_ASSERT_EQ(len, bsz);
            CT_ASSERT_LE(hi - lo, 1);
            CT_ASSERT_MSG(memcmp(cat, perm + step * b, (size_t)len * sizeof *cat) == 0,
                          "N=%lld B=%lld W=%d step %lld", (long long)n, (long long)b, w,
                          (long long)step);
            for (int64_t i = 0; i < len; i++)
                visits[cat[i]]++;
        }
        int64_t visited = 0;
        for (int64_t i = 0; i < n; i++) {
            CT_ASSERT_LE(visits[i], 1);
            visited += visits[i];
        }
        CT_ASSERT_EQ(visited, drop_last ? n / b * b : n);
    }
}

static void test_union_equals_global_batch(void)
{
    static const int64_t ns[] = {1, 7, 100, 1001};
    static const int64_t bs[] = {1, 3, 8, 32, 100};
    for (size_t i = 0; i < 4; i++)
        for (size_t j = 0; j < 5; j++) {
            check_union(ns[i], bs[j], false);
            if (ns[i] >= bs[j])
                check_union(ns[i], bs[j], true);
        }
    /* A batch smaller than the world: some ranks get nothing, the first ones one each. */
    static int64_t perm[5], out[5];
    ct_shard_t s = shard(5, 3, 8, 0, false);
    ct_shard_permutation(&s, 0, perm);
    for (int r = 0; r < 8; r++) {
        s.rank = r;
        int64_t begin, count;
        ct_shard_range(&s, 0, &begin, &count);
        CT_ASSERT_EQ(count, r < 3 ? 1 : 0);
        CT_ASSERT_EQ(ct_shard_indices(&s, perm, 0, out), count);
        if (count > 0)
            CT_ASSERT_EQ(out[0], perm[r]);
    }
}

/* A digest of a few epochs' orders, for the cross-process comparison. */
static uint64_t digest(void)
{
    static int64_t p[5000];
    ct_shard_t s = shard(5000, 64, 4, 1, false);
    uint64_t h = 1469598103934665603ULL;
    for (int64_t e = 0; e < 3; e++) {
        ct_shard_permutation(&s, e, p);
        for (int i = 0; i < 5000; i++)
            h = (h ^ (uint64_t)p[i]) * 1099511628211ULL;
    }
    return h;
}

static void test_determinism_across_processes(void)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    CT_ASSERT(n > 0);
    self[n] = '\0';
    char want[32];
    snprintf(want, sizeof want, "%016llx\n", (unsigned long long)digest());
    for (int run = 0; run < 2; run++) {
        char *argv[] = {self, "digest", NULL};
        ct_child_t c;
        CT_ASSERT_OK(ct_child_run(&c, argv, NULL, 30000));
        CT_ASSERT_EQ(c.exit_code, 0);
        CT_ASSERT_STR_EQ(c.out, want);
        ct_child_close(&c);
    }
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "digest") == 0) {
        printf("%016llx\n", (unsigned long long)digest());
        return 0;
    }
    CT_RUN(test_check);
    CT_RUN(test_steps_and_locate);
    CT_RUN(test_permutations);
    CT_RUN(test_union_equals_global_batch);
    CT_RUN(test_determinism_across_processes);
    return 0;
}
