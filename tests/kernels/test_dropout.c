/*
 * test_dropout.c - dropout with regenerated masks and the timeline mask (kernels/cpu/dropout.c).
 * Proves: the mask is the documented function of (seed, stream, offset + i) - the same one the
 * float64 reference derives draw by draw, and the same as thresholding ct_rng_uniform_cpu; the
 * backward (the same call on the gradient) regenerates exactly the forward's mask; a tensor
 * processed in pieces at shifted offsets (a rank's slice of the batch) equals one processed
 * whole; seeds and streams give independent masks; the keep rate is 1 - p; p = 0 is the
 * identity; in-place use works; every output element is written.
 */
#include <string.h>

#include "kcheck.h"
#include "ref64.h"

enum { N = 1 << 15 };

static void test_mask_rule(void)
{
    static float x[N], y[N], u[N];
    ct_dropout_t d = {0.2f, 42, 7, 1000};
    kc_fill(x, N, -2.0f, 2.0f, 1);
    kc_poison(y, N);
    ct_dropout_cpu(y, x, N, d);
    KC_ASSERT_FINITE(y, N);
    ct_rng_uniform_cpu(u, N, d.seed, d.stream, d.offset);
    const float keep_scale = 1.0f / (1.0f - d.p);
    int kept = 0;
    for (int i = 0; i < N; i++) {
        int keep = u[i] >= d.p;
        kept += keep;
        CT_ASSERT_MSG(y[i] == (keep ? x[i] * keep_scale : 0.0f), "element %d: %g from %g (u=%g)", i,
                      (double)y[i], (double)x[i], (double)u[i]);
        /* The float64 reference derives each draw on its own from ct_philox_block_at. */
        double f = ref_dropout_factor(d, (uint64_t)i);
        CT_ASSERT_MSG((f != 0.0) == keep, "element %d: reference factor %g, op keep %d", i, f,
                      keep);
    }
    /* Binomial(32768, 0.8): standard deviation 72, so +-1% (328) is a 4.5-sigma bound. */
    CT_ASSERT_CLOSE(kept, 0.8 * N, 0.01 * N, 0);
}

static void test_backward_regenerates(void)
{
    /* Forward on the activation, backward on the gradient, separate calls, nothing kept in
     * between: the gradient is zero exactly where the activation was dropped and scaled by the
     * same 1/(1-p) elsewhere - the derivative of the forward, checked element by element. */
    static float x[N], y[N], g[N], dx[N];
    ct_dropout_t d = {0.5f, 3, 11, 0};
    kc_fill(x, N, 0.5f, 1.5f, 2); /* never zero, so a dropped element is recognisable */
    kc_fill(g, N, 0.5f, 1.5f, 3);
    ct_dropout_cpu(y, x, N, d);
    kc_poison(dx, N);
    ct_dropout_cpu(dx, g, N, d);
    KC_ASSERT_FINITE(dx, N);
    for (int i = 0; i < N; i++) {
        float fwd = y[i] / x[i], bwd = dx[i] / g[i];
        CT_ASSERT_MSG(fwd == bwd || (y[i] == 0.0f && dx[i] == 0.0f),
                      "element %d: forward factor %g, backward factor %g", i, (double)fwd,
                      (double)bwd);
    }
    /* Same call twice: same bits. */
    static float y2[N];
    ct_dropout_cpu(y2, x, N, d);
    CT_ASSERT(memcmp(y, y2, sizeof y) == 0);
}

static void test_pieces_and_independence(void)
{
    static float x[N], whole[N], pieces[N], other[N];
    ct_dropout_t d = {0.3f, 5, 9, 123};
    kc_fill(x, N, 0.5f, 1.5f, 4);
    ct_dropout_cpu(whole, x, N, d);
    const int cuts[] = {0, 1, 3, 4, 7, 50, 1001, 1002, 20000, N};
    for (size_t i = 0; i + 1 < sizeof cuts / sizeof cuts[0]; i++) {
        ct_dropout_t di = d;
        di.offset = d.offset + (uint64_t)cuts[i];
        ct_dropout_cpu(pieces + cuts[i], x + cuts[i], cuts[i + 1] - cuts[i], di);
    }
    CT_ASSERT(memcmp(whole, pieces, sizeof whole) == 0);

    /* Another stream, another seed, another offset: different masks, agreeing on about
     * p^2 + (1-p)^2 = 58% of elements as independent masks do (+-2%, many sigma). */
    ct_dropout_t vary[3] = {d, d, d};
    vary[0].stream++;
    vary[1].seed++;
    vary[2].offset += 1;
    for (int k = 0; k < 3; k++) {
        ct_dropout_cpu(other, x, N, vary[k]);
        int same = 0;
        for (int i = 0; i < N; i++)
            same += (other[i] == 0.0f) == (whole[i] == 0.0f);
        CT_ASSERT_CLOSE(same, 0.58 * N, 0.02 * N, 0);
    }
}

static void test_identity_and_in_place(void)
{
    static float x[N], y[N], z[N];
    kc_fill(x, N, -1.0f, 1.0f, 5);
    ct_dropout_t off = {0};
    kc_poison(y, N);
    ct_dropout_cpu(y, x, N, off);
    CT_ASSERT(memcmp(x, y, sizeof x) == 0);
    ct_dropout_cpu(y, y, N, off); /* in place, p = 0: untouched */
    CT_ASSERT(memcmp(x, y, sizeof x) == 0);

    ct_dropout_t d = {0.1f, 8, 8, 8};
    ct_dropout_cpu(z, x, N, d);
    ct_dropout_cpu(y, y, N, d); /* in place equals out of place */
    CT_ASSERT(memcmp(z, y, sizeof z) == 0);
}

static void test_timeline_mask(void)
{
    enum { R = 7, C = 5 };
    int32_t seq[R] = {0, 0, 3, 0, 9, 1, 0};
    float x[R * C], y[R * C];
    kc_fill(x, R * C, -1.0f, 1.0f, 6);
    kc_poison(y, R * C);
    ct_timeline_mask_cpu(y, x, seq, R, C);
    KC_ASSERT_FINITE(y, R * C);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            CT_ASSERT(y[r * C + c] == (seq[r] ? x[r * C + c] : 0.0f));
    /* In place, and as its own backward (the derivative of x -> mask * x is the mask). */
    ct_timeline_mask_cpu(x, x, seq, R, C);
    CT_ASSERT(memcmp(x, y, sizeof x) == 0);
}

int main(void)
{
    CT_RUN(test_mask_rule);
    CT_RUN(test_backward_regenerates);
    CT_RUN(test_pieces_and_independence);
    CT_RUN(test_identity_and_in_place);
    CT_RUN(test_timeline_mask);
    return 0;
}
