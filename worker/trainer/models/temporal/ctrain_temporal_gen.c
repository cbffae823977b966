/*
 * ctrain_temporal_gen.c - the synthetic curves of the temporal encoder, bit-identical to
 * examples/pytorch/temporal_curves.py (see ctrain_temporal_gen.h): numpy's SeedSequence, PCG64
 * and the Generator draws that file makes, the curve's float64 arithmetic in the same order as
 * numpy evaluates it, and the description's text.
 *
 * Every floating-point expression here is written in the order numpy evaluates it, and this file
 * is compiled without contraction of a * b + c into fused multiply-adds (meson.build), so each
 * rounding happens where numpy's does.
 *
 * Not here: other numpy distributions, the 64-bit Lemire path (no draw here needs a range
 * wider than 32 bits), files, threads (every call owns its generator; the ziggurat tables are
 * built once under pthread_once).
 */
#include "ctrain_temporal_gen.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_error.h"

/* ---- SeedSequence ---------------------------------------------------------------------------- */

#define CTRAIN_TEMPORAL_GEN__POOL   4
#define CTRAIN_TEMPORAL_GEN__INIT_A 0x43b0d7e5u
#define CTRAIN_TEMPORAL_GEN__MULT_A 0x931e8875u
#define CTRAIN_TEMPORAL_GEN__INIT_B 0x8b51f9ddu
#define CTRAIN_TEMPORAL_GEN__MULT_B 0x58f38dedu
#define CTRAIN_TEMPORAL_GEN__MIX_L  0xca01f9ddu
#define CTRAIN_TEMPORAL_GEN__MIX_R  0x4973f715u

static uint32_t ctrain_temporal_gen__hashmix(uint32_t v, uint32_t *hc)
{
    v ^= *hc;
    *hc *= CTRAIN_TEMPORAL_GEN__MULT_A;
    v *= *hc;
    return v ^ (v >> 16);
}

static uint32_t ctrain_temporal_gen__mix(uint32_t x, uint32_t y)
{
    uint32_t r = CTRAIN_TEMPORAL_GEN__MIX_L * x - CTRAIN_TEMPORAL_GEN__MIX_R * y;
    return r ^ (r >> 16);
}

/* A Python int's 32-bit words, least significant first; 0 is one word. */
static int ctrain_temporal_gen__words(uint64_t v, uint32_t *w)
{
    int n = 0;
    do {
        w[n++] = (uint32_t)v;
        v >>= 32;
    } while (v);
    return n;
}

/* SeedSequence(entropy).generate_state(4, uint64) for the entropy words w[0..n). */
static void ctrain_temporal_gen__seed_state(const uint32_t *w, int n, uint64_t out[4])
{
    uint32_t pool[CTRAIN_TEMPORAL_GEN__POOL];
    uint32_t hc = CTRAIN_TEMPORAL_GEN__INIT_A;
    for (int i = 0; i < CTRAIN_TEMPORAL_GEN__POOL; i++)
        pool[i] = ctrain_temporal_gen__hashmix(i < n ? w[i] : 0u, &hc);
    for (int s = 0; s < CTRAIN_TEMPORAL_GEN__POOL; s++)
        for (int d = 0; d < CTRAIN_TEMPORAL_GEN__POOL; d++)
            if (s != d)
                pool[d] =
                    ctrain_temporal_gen__mix(pool[d], ctrain_temporal_gen__hashmix(pool[s], &hc));
    for (int s = CTRAIN_TEMPORAL_GEN__POOL; s < n; s++)
        for (int d = 0; d < CTRAIN_TEMPORAL_GEN__POOL; d++)
            pool[d] = ctrain_temporal_gen__mix(pool[d], ctrain_temporal_gen__hashmix(w[s], &hc));
    uint32_t hb = CTRAIN_TEMPORAL_GEN__INIT_B, st[8];
    for (int i = 0; i < 8; i++) {
        uint32_t v = pool[i % CTRAIN_TEMPORAL_GEN__POOL];
        v ^= hb;
        hb *= CTRAIN_TEMPORAL_GEN__MULT_B;
        v *= hb;
        st[i] = v ^ (v >> 16);
    }
    for (int i = 0; i < 4; i++)
        out[i] = (uint64_t)st[2 * i] | (uint64_t)st[2 * i + 1] << 32;
}

/* ---- PCG64 ----------------------------------------------------------------------------------- */

typedef unsigned __int128 ctrain_temporal_gen__u128;

typedef struct ctrain_temporal_gen__rng {
    ctrain_temporal_gen__u128 state, inc;
    bool has32;   /* the upper half of the last 64-bit draw is waiting for next32 */
    uint32_t u32; /* that half */
} ctrain_temporal_gen__rng_t;

#define CTRAIN_TEMPORAL_GEN__MULT \
    (((ctrain_temporal_gen__u128)0x2360ed051fc65da4ull << 64) | 0x4385df649fccf645ull)

static void ctrain_temporal_gen__step(ctrain_temporal_gen__rng_t *g)
{
    g->state = g->state * CTRAIN_TEMPORAL_GEN__MULT + g->inc;
}

static void ctrain_temporal_gen__seed(ctrain_temporal_gen__rng_t *g, const uint32_t *w, int n)
{
    uint64_t v[4];
    ctrain_temporal_gen__seed_state(w, n, v);
    ctrain_temporal_gen__u128 s = (ctrain_temporal_gen__u128)v[0] << 64 | v[1];
    ctrain_temporal_gen__u128 q = (ctrain_temporal_gen__u128)v[2] << 64 | v[3];
    g->state = 0;
    g->inc = q << 1 | 1u;
    ctrain_temporal_gen__step(g);
    g->state += s;
    ctrain_temporal_gen__step(g);
    g->has32 = false;
    g->u32 = 0;
}

static uint64_t ctrain_temporal_gen__next64(ctrain_temporal_gen__rng_t *g)
{
    ctrain_temporal_gen__step(g);
    uint64_t x = (uint64_t)(g->state >> 64) ^ (uint64_t)g->state;
    unsigned rot = (unsigned)(g->state >> 122);
    return (x >> rot) | (x << ((64u - rot) & 63u));
}

static uint32_t ctrain_temporal_gen__next32(ctrain_temporal_gen__rng_t *g)
{
    if (g->has32) {
        g->has32 = false;
        return g->u32;
    }
    uint64_t x = ctrain_temporal_gen__next64(g);
    g->has32 = true;
    g->u32 = (uint32_t)(x >> 32);
    return (uint32_t)x;
}

static double ctrain_temporal_gen__double(ctrain_temporal_gen__rng_t *g)
{
    return (double)(ctrain_temporal_gen__next64(g) >> 11) * (1.0 / 9007199254740992.0);
}

/* An integer in [0, rng], rng < 2^32 - 1: Lemire's multiply-and-reject on 32-bit draws; 0 draws
 * nothing (numpy's random_bounded_uint64 and its fill for ranges of 32 bits). */
static uint32_t ctrain_temporal_gen__bounded(ctrain_temporal_gen__rng_t *g, uint32_t rng)
{
    if (rng == 0)
        return 0;
    uint32_t excl = rng + 1;
    uint64_t m = (uint64_t)ctrain_temporal_gen__next32(g) * excl;
    uint32_t left = (uint32_t)m;
    if (left < excl) {
        uint32_t threshold = (UINT32_MAX - rng) % excl;
        while (left < threshold) {
            m = (uint64_t)ctrain_temporal_gen__next32(g) * excl;
            left = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

static double ctrain_temporal_gen__uniform(ctrain_temporal_gen__rng_t *g, double lo, double hi)
{
    double range = hi - lo;
    return lo + range * ctrain_temporal_gen__double(g);
}

/* choice(range(n), p=p): the index of the first cumulative probability (divided by the last)
 * above one draw. */
static int ctrain_temporal_gen__choice_p(ctrain_temporal_gen__rng_t *g, const double *p, int n)
{
    double cdf[8];
    cdf[0] = p[0];
    for (int k = 1; k < n; k++)
        cdf[k] = cdf[k - 1] + p[k];
    double last = cdf[n - 1];
    for (int k = 0; k < n; k++)
        cdf[k] /= last;
    double u = ctrain_temporal_gen__double(g);
    int idx = 0;
    while (idx < n && cdf[idx] <= u)
        idx++;
    return idx;
}

/* ---- the normal distribution: numpy's ziggurat ----------------------------------------------- */

#define CTRAIN_TEMPORAL_GEN__ZIG_R     3.6541528853610087963519472518
#define CTRAIN_TEMPORAL_GEN__ZIG_INV_R 0.27366123732975827203338247596
#define CTRAIN_TEMPORAL_GEN__ZIG_V     0.0049286732339746519 /* the area of each layer */

/* The layers' widths: wi[k] * 2^52 is layer k's right edge x_k (k >= 1; x_0 = 0, x_255 = r);
 * wi[0] = V / f(r) / 2^52 serves the base layer. These are numpy's values, measured from its
 * draws by scripts/temporal_ziggurat_wi.py: numpy computed them once with the recurrence
 * x_{k-1} = f^-1(f(x_k) + V / x_k), f(x) = exp(-x^2 / 2), in float64, and that recurrence
 * amplifies the last-bit differences between C libraries' exp and log - recomputed here with
 * glibc, 151 of the 256 widths differ by a few units in the last place, and so do 14% of the
 * float64 draws. */
static const double ctrain_temporal_gen__wi[256] = {
    0x1.f493b7815d979p-51, 0x1.b8d0be3fdf6c6p-55, 0x1.250af3c2c5bb4p-54, 0x1.57cb938443b61p-54,
    0x1.801fce82fa70cp-54, 0x1.a230c2e4cd0bcp-54, 0x1.c004d2f3861f7p-54, 0x1.dac2f5a747274p-54,
    0x1.f32482d4cd5c3p-54, 0x1.04d32278ebbadp-53, 0x1.0f5053b025d43p-53, 0x1.192a697413677p-53,
    0x1.227a28f7a1af5p-53, 0x1.2b52e3863d880p-53, 0x1.33c3fc05791f5p-53, 0x1.3bd9ec1a2b12fp-53,
    0x1.439ef8dff9b55p-53, 0x1.4b1bb363dfea7p-53, 0x1.52575621ad374p-53, 0x1.59580a707ce96p-53,
    0x1.60231cfd97eeap-53, 0x1.66bd261a37c3dp-53, 0x1.6d2a292000570p-53, 0x1.736dad346f8a6p-53,
    0x1.798ad10b32a77p-53, 0x1.7f845ad46f543p-53, 0x1.855cc53430a77p-53, 0x1.8b1649e7b769ap-53,
    0x1.90b2ea94ecf98p-53, 0x1.96347822c1eeap-53, 0x1.9b9c98e38c546p-53, 0x1.a0eccdca4a72cp-53,
    0x1.a62676d77cd59p-53, 0x1.ab4ad6e101630p-53, 0x1.b05b16d136c9cp-53, 0x1.b558487427a29p-53,
    0x1.ba4368e529f3ap-53, 0x1.bf1d62abf8232p-53, 0x1.c3e70f9594ef3p-53, 0x1.c8a13a5323b61p-53,
    0x1.cd4c9fe72268bp-53, 0x1.d1e9f0e80b748p-53, 0x1.d679d29e41f10p-53, 0x1.dafce0023b8c3p-53,
    0x1.df73aa9f17653p-53, 0x1.e3debb5d2edfep-53, 0x1.e83e9337a6f00p-53, 0x1.ec93abdf982cep-53,
    0x1.f0de784f06226p-53, 0x1.f51f654d8f688p-53, 0x1.f956d9e87d7aep-53, 0x1.fd8537dfa2eacp-53,
    0x1.00d56e04234ecp-52, 0x1.02e40f5398f9ap-52, 0x1.04eea9e16a5fcp-52, 0x1.06f565b72a010p-52,
    0x1.08f869071f40bp-52, 0x1.0af7d84bc6113p-52, 0x1.0cf3d664bcc7fp-52, 0x1.0eec84b16086bp-52,
    0x1.10e20329515eep-52, 0x1.12d4707310fbep-52, 0x1.14c3e9f8e9141p-52, 0x1.16b08bfc4201ep-52,
    0x1.189a71a78da34p-52, 0x1.1a81b51ee6d88p-52, 0x1.1c666f8f82acbp-52, 0x1.1e48b93e0d42ep-52,
    0x1.2028a9940a09fp-52, 0x1.2206572c4c6e9p-52, 0x1.23e1d7de9c31fp-52, 0x1.25bb40ca96bfbp-52,
    0x1.2792a661dd37fp-52, 0x1.29681c719d71bp-52, 0x1.2b3bb62b82edap-52, 0x1.2d0d862e1b853p-52,
    0x1.2edd9e8cba98ep-52, 0x1.30ac10d6e48d7p-52, 0x1.3278ee1f4b930p-52, 0x1.3444470265ea1p-52,
    0x1.360e2baca52d5p-52, 0x1.37d6abe05586ap-52, 0x1.399dd6fb2b264p-52, 0x1.3b63bbfb83d03p-52,
    0x1.3d28698561de0p-52, 0x1.3eebede725a83p-52, 0x1.40ae571e09e74p-52, 0x1.426fb2da6745dp-52,
    0x1.44300e83c30a4p-52, 0x1.45ef773cac75dp-52, 0x1.47adf9e66c336p-52, 0x1.496ba32488f2fp-52,
    0x1.4b287f602415dp-52, 0x1.4ce49acb311dcp-52, 0x1.4ea001638a605p-52, 0x1.505abef5e5562p-52,
    0x1.5214df20a8b5ap-52, 0x1.53ce6d56a664fp-52, 0x1.558774e1bb2c8p-52, 0x1.574000e555f78p-52,
    0x1.58f81c60e8514p-52, 0x1.5aafd23241b59p-52, 0x1.5c672d17d733dp-52, 0x1.5e1e37b2f8cd3p-52,
    0x1.5fd4fc89f5e38p-52, 0x1.618b860a31fc3p-52, 0x1.6341de8a2b0a2p-52, 0x1.64f8104b7260bp-52,
    0x1.66ae257c99672p-52, 0x1.6864283b13137p-52, 0x1.6a1a22950b2b1p-52, 0x1.6bd01e8b343bbp-52,
    0x1.6d8626128d352p-52, 0x1.6f3c43161f854p-52, 0x1.70f27f78b68ebp-52, 0x1.72a8e516914c6p-52,
    0x1.745f7dc70eedcp-52, 0x1.7616535e5731fp-52, 0x1.77cd6faeff449p-52, 0x1.7984dc8babd93p-52,
    0x1.7b3ca3c8b1409p-52, 0x1.7cf4cf3db22fbp-52, 0x1.7ead68c73dee7p-52, 0x1.80667a486ea1fp-52,
    0x1.82200dac88676p-52, 0x1.83da2ce899f15p-52, 0x1.8594e1fd1f5bdp-52, 0x1.875036f7a7ec5p-52,
    0x1.890c35f47f72dp-52, 0x1.8ac8e9205c043p-52, 0x1.8c865aba10c9cp-52, 0x1.8e44951446a27p-52,
    0x1.9003a2973b58fp-52, 0x1.91c38dc288347p-52, 0x1.9384612ef0afcp-52, 0x1.954627903a28ap-52,
    0x1.9708ebb70d5eep-52, 0x1.98ccb892e2a31p-52, 0x1.9a919933f99bfp-52, 0x1.9c5798cd5d92cp-52,
    0x1.9e1ec2b6f7411p-52, 0x1.9fe7226fad24ap-52, 0x1.a1b0c39f93692p-52, 0x1.a37bb21a2c85bp-52,
    0x1.a547f9e0bbb88p-52, 0x1.a715a724aa9a4p-52, 0x1.a8e4c64a0313dp-52, 0x1.aab563e9ff108p-52,
    0x1.ac878cd5af5cep-52, 0x1.ae5b4e18bb336p-52, 0x1.b030b4fc3a11ap-52, 0x1.b207cf09a985bp-52,
    0x1.b3e0aa0e00c00p-52, 0x1.b5bb541ce3d03p-52, 0x1.b797db93f8927p-52, 0x1.b9764f1e5f73cp-52,
    0x1.bb56bdb85256ep-52, 0x1.bd3936b2ec0a2p-52, 0x1.bf1dc9b81ae83p-52, 0x1.c10486cec16a0p-52,
    0x1.c2ed7e5f07a2dp-52, 0x1.c4d8c136e0d1cp-52, 0x1.c6c6608ec8705p-52, 0x1.c8b66e0eba617p-52,
    0x1.caa8fbd36a2abp-52, 0x1.cc9e1c73bd690p-52, 0x1.ce95e3068e037p-52, 0x1.d0906328b8f6ep-52,
    0x1.d28db1037ef20p-52, 0x1.d48de1533c647p-52, 0x1.d691096e7f123p-52, 0x1.d8973f4d7fba5p-52,
    0x1.daa0999206e70p-52, 0x1.dcad2f8fc490ep-52, 0x1.debd195522e37p-52, 0x1.e0d06fb49d21cp-52,
    0x1.e2e74c4ea46f6p-52, 0x1.e501c99c1d188p-52, 0x1.e72002f97fe25p-52, 0x1.e94214b2abf0ap-52,
    0x1.eb681c0f76f08p-52, 0x1.ed9237610a73ap-52, 0x1.efc086101eca9p-52, 0x1.f1f328ac25321p-52,
    0x1.f42a40fb74d6dp-52, 0x1.f665f20c90168p-52, 0x1.f8a6604899782p-52, 0x1.faebb187122bfp-52,
    0x1.fd360d22fe785p-52, 0x1.ff859c118f60bp-52, 0x1.00ed447d3a075p-51, 0x1.021a8028fc947p-51,
    0x1.034a983a902abp-51, 0x1.047da4e3ef5c7p-51, 0x1.05b3bf6adb37ep-51, 0x1.06ed023a72668p-51,
    0x1.082988f632e17p-51, 0x1.0969708e8a254p-51, 0x1.0aacd7571c0c4p-51, 0x1.0bf3dd1eed448p-51,
    0x1.0d3ea34aa3d30p-51, 0x1.0e8d4cf116593p-51, 0x1.0fdffefa69fb6p-51, 0x1.1136e04207041p-51,
    0x1.129219bbb5d35p-51, 0x1.13f1d69c4096dp-51, 0x1.1556448602e3bp-51, 0x1.16bf93b9deef3p-51,
    0x1.182df74d21261p-51, 0x1.19a1a564eebacp-51, 0x1.1b1ad777f2f8ep-51, 0x1.1c99ca971a694p-51,
    0x1.1e1ebfbe4ae39p-51, 0x1.1fa9fc2e2d901p-51, 0x1.213bc9d04cc81p-51, 0x1.22d477a6fd3eep-51,
    0x1.24745a4ac9c24p-51, 0x1.261bcc77658e0p-51, 0x1.27cb2faa8592ep-51, 0x1.2982ecd770e78p-51,
    0x1.2b437532a0a52p-51, 0x1.2d0d43196db97p-51, 0x1.2ee0db1a978f5p-51, 0x1.30becd256aeeep-51,
    0x1.32a7b5e68a4a3p-51, 0x1.349c405ae12a3p-51, 0x1.369d27a33a840p-51, 0x1.38ab39256410ap-51,
    0x1.3ac7570ae88fap-51, 0x1.3cf27b31704a6p-51, 0x1.3f2dbaa60f475p-51, 0x1.417a49cb9e5dap-51,
    0x1.43d9815545e94p-51, 0x1.464ce44a73a15p-51, 0x1.48d62759c43bcp-51, 0x1.4b7739d6b5a27p-51,
    0x1.4e3250dcd8902p-51, 0x1.5109f53e9ac41p-51, 0x1.54011523a7e42p-51, 0x1.571b1a94ae41bp-51,
    0x1.5a5c08b718dd9p-51, 0x1.5dc8a243ad0fep-51, 0x1.61669cf861e4cp-51, 0x1.653ce7b006aeap-51,
    0x1.69540be9fe5c3p-51, 0x1.6db6b8d09e232p-51, 0x1.72728f05f7a34p-51, 0x1.7799556090673p-51,
    0x1.7d42df4d6ce8cp-51, 0x1.839030529f234p-51, 0x1.8ab0fbfaa7c14p-51, 0x1.92ee0946f4496p-51,
    0x1.9cbee014057abp-51, 0x1.a8fdc7894775ap-51, 0x1.b981f3878fdb1p-51, 0x1.d3bb48209ad33p-51};

/* ki: the share of each layer inside the one above, x_{k-1} / x_k scaled to 2^52 and rounded
 * half to even (the base layer: the rectangle's share r f(r) / V); fi: f(x_k). Computed from
 * the widths above at first use, as numpy's table generator computed them from its edges. */
static uint64_t ctrain_temporal_gen__ki[256];
static double ctrain_temporal_gen__fi[256];
static pthread_once_t ctrain_temporal_gen__once = PTHREAD_ONCE_INIT;

static double ctrain_temporal_gen__pdf(double x)
{
    return exp(-0.5 * x * x);
}

static void ctrain_temporal_gen__tables(void)
{
    const double r = CTRAIN_TEMPORAL_GEN__ZIG_R, v = CTRAIN_TEMPORAL_GEN__ZIG_V;
    const double scale = 4503599627370496.0; /* 2^52 */
    double x[256];
    x[0] = 0.0;
    for (int k = 1; k < 256; k++)
        x[k] = ctrain_temporal_gen__wi[k] * scale;
    ctrain_temporal_gen__ki[0] = (uint64_t)nearbyint(r * ctrain_temporal_gen__pdf(r) / v * scale);
    for (int k = 1; k < 256; k++)
        ctrain_temporal_gen__ki[k] = (uint64_t)nearbyint(x[k - 1] / x[k] * scale);
    for (int k = 0; k < 256; k++)
        ctrain_temporal_gen__fi[k] = ctrain_temporal_gen__pdf(x[k]);
}

static double ctrain_temporal_gen__std_normal(ctrain_temporal_gen__rng_t *g)
{
    for (;;) {
        uint64_t r = ctrain_temporal_gen__next64(g);
        int idx = (int)(r & 0xff);
        r >>= 8;
        bool neg = r & 1u;
        uint64_t rabs = (r >> 1) & 0x000fffffffffffffull;
        double x = (double)rabs * ctrain_temporal_gen__wi[idx];
        if (neg)
            x = -x;
        if (rabs < ctrain_temporal_gen__ki[idx])
            return x;
        if (idx == 0) {
            for (;;) {
                double xx =
                    -CTRAIN_TEMPORAL_GEN__ZIG_INV_R * log1p(-ctrain_temporal_gen__double(g));
                double yy = -log1p(-ctrain_temporal_gen__double(g));
                if (yy + yy > xx * xx)
                    return ((rabs >> 8) & 1u) ? -(CTRAIN_TEMPORAL_GEN__ZIG_R + xx)
                                              : CTRAIN_TEMPORAL_GEN__ZIG_R + xx;
            }
        }
        if ((ctrain_temporal_gen__fi[idx - 1] - ctrain_temporal_gen__fi[idx]) *
                    ctrain_temporal_gen__double(g) +
                ctrain_temporal_gen__fi[idx] <
            exp(-0.5 * x * x))
            return x;
    }
}

#define CTRAIN_TEMPORAL_GEN__PI 3.14159265358979323846 /* np.pi, the double nearest pi */

/* ---- sample_params, render, describe --------------------------------------------------------- */

void ctrain_temporal_gen_params(uint64_t seed, uint64_t i, ctrain_temporal_params_t *p)
{
    static const int periods[6] = {8, 12, 16, 24, 32, 48};
    static const double p_trend[3] = {0.35, 0.35, 0.30}, p_shift[3] = {0.5, 0.35, 0.15},
                        p_spike[4] = {0.45, 0.25, 0.2, 0.1};
    uint32_t w[4];
    int n = ctrain_temporal_gen__words(seed, w);
    n += ctrain_temporal_gen__words(i, w + n);
    ctrain_temporal_gen__rng_t g;
    ctrain_temporal_gen__seed(&g, w, n);

    memset(p, 0, sizeof *p);
    static const int trends[3] = {1, -1, 0};
    p->trend = trends[ctrain_temporal_gen__choice_p(&g, p_trend, 3)];
    p->slope = p->trend == 0 ? 0.0 : ctrain_temporal_gen__uniform(&g, 1.0, 3.0);
    p->seasonal = ctrain_temporal_gen__double(&g) < 0.7;
    p->period = p->seasonal ? periods[ctrain_temporal_gen__bounded(&g, 5)] : 0;
    p->amplitude = p->seasonal ? ctrain_temporal_gen__uniform(&g, 0.5, 1.5) : 0.0;
    p->phase = ctrain_temporal_gen__uniform(&g, 0, 2 * CTRAIN_TEMPORAL_GEN__PI);
    p->n_shift = ctrain_temporal_gen__choice_p(&g, p_shift, 3);
    for (int k = 0; k < p->n_shift; k++) {
        p->shift_where[k] = ctrain_temporal_gen__uniform(&g, 0.15, 0.85);
        double sign = ctrain_temporal_gen__bounded(&g, 1) ? 1.0 : -1.0;
        p->shift_size[k] = sign * ctrain_temporal_gen__uniform(&g, 1.0, 2.5);
    }
    p->spikes = ctrain_temporal_gen__choice_p(&g, p_spike, 4);
    p->noise_high = ctrain_temporal_gen__bounded(&g, 1) == 1;
    p->stream = ctrain_temporal_gen__bounded(&g, 0x7fffffffu);
}

static void ctrain_temporal_gen__init_tables(void)
{
    ctrain_temporal_gen__tables();
}

int ctrain_temporal_gen_render(const ctrain_temporal_params_t *p, int length, float *out)
{
    if (length < 1 || p->spikes > length)
        return CT_ERANGE_VALUE;
    pthread_once(&ctrain_temporal_gen__once, ctrain_temporal_gen__init_tables);
    double *y = malloc((size_t)length * sizeof *y);
    if (!y)
        return -ENOMEM;
    uint32_t w[1] = {p->stream};
    ctrain_temporal_gen__rng_t g;
    ctrain_temporal_gen__seed(&g, w, 1);

    double denom = (double)(length - 1 > 1 ? length - 1 : 1);
    double ss = (double)p->trend * p->slope;
    for (int k = 0; k < length; k++) {
        double t = (double)k, u = t / denom;
        double v = ss * u;
        if (p->seasonal)
            v = v +
                p->amplitude * sin(2 * CTRAIN_TEMPORAL_GEN__PI * t / (double)p->period + p->phase);
        for (int s = 0; s < p->n_shift; s++)
            v = v + p->shift_size[s] * (u >= p->shift_where[s] ? 1.0 : 0.0);
        y[k] = v;
    }
    if (p->spikes) {
        /* choice(length, size=spikes, replace=False): Floyd's algorithm (a draw in [0, j] for
         * j = length - k .. length - 1; a repeat takes j itself), then the picks shuffled. */
        int64_t pos[4];
        int k = p->spikes;
        for (int64_t j = length - k; j < length; j++) {
            int64_t val = ctrain_temporal_gen__bounded(&g, (uint32_t)j);
            int m = (int)(j - (length - k));
            for (int q = 0; q < m; q++)
                if (pos[q] == val) {
                    val = j;
                    break;
                }
            pos[m] = val;
        }
        for (int q = k - 1; q >= 1; q--) {
            int r = (int)ctrain_temporal_gen__bounded(&g, (uint32_t)q);
            int64_t tmp = pos[r];
            pos[r] = pos[q];
            pos[q] = tmp;
        }
        double sign[4], mag[4];
        for (int q = 0; q < k; q++)
            sign[q] = ctrain_temporal_gen__bounded(&g, 1) ? 1.0 : -1.0;
        for (int q = 0; q < k; q++)
            mag[q] = ctrain_temporal_gen__uniform(&g, 3.0, 5.0);
        for (int q = 0; q < k; q++)
            y[pos[q]] = y[pos[q]] + sign[q] * mag[q];
    }
    double sd = p->noise_high ? 0.3 : 0.05;
    for (int k = 0; k < length; k++)
        out[k] = (float)(y[k] + (0.0 + sd * ctrain_temporal_gen__std_normal(&g)));
    free(y);
    return 0;
}

static const char *ctrain_temporal_gen__num(int n)
{
    static const char *words[5] = {"no", "one", "two", "three", "four"};
    return words[n];
}

void ctrain_temporal_gen_describe(const ctrain_temporal_params_t *p, char *text)
{
    /* sized so that no part can be cut whatever the compiler assumes of the lengths (the
     * longest sentence is under 150 bytes) */
    char parts[4][96];
    int np = 0;
    if (p->trend == 0)
        snprintf(parts[np++], sizeof parts[0], "a flat curve");
    else
        snprintf(parts[np++], sizeof parts[0], "a %s %s trend", p->slope > 2.0 ? "steep" : "gentle",
                 p->trend > 0 ? "upward" : "downward");
    if (p->seasonal)
        snprintf(parts[np++], sizeof parts[0], "a seasonal cycle of period %d", p->period);
    else
        snprintf(parts[np++], sizeof parts[0], "no seasonality");
    if (p->n_shift) {
        int ups = 0;
        for (int s = 0; s < p->n_shift; s++)
            ups += p->shift_size[s] > 0;
        int downs = p->n_shift - ups;
        char up[40] = "", down[40] = "";
        if (ups)
            snprintf(up, sizeof up, "%s upward level shift%s", ctrain_temporal_gen__num(ups),
                     ups > 1 ? "s" : "");
        if (downs)
            snprintf(down, sizeof down, "%s downward level shift%s",
                     ctrain_temporal_gen__num(downs), downs > 1 ? "s" : "");
        snprintf(parts[np++], sizeof parts[0], "%s%s%s", up, ups && downs ? " and " : "", down);
    }
    snprintf(parts[np++], sizeof parts[0], "%s spike%s", ctrain_temporal_gen__num(p->spikes),
             p->spikes == 1 ? "" : "s");
    /* "%s with %s, %s and %s noise." % (parts[0], ", ".join(parts[1:-1]), parts[-1], noise) */
    char middle[2 * (96 + 2)] = "";
    for (int k = 1; k < np - 1; k++) {
        size_t len = strlen(middle);
        snprintf(middle + len, sizeof middle - len, "%s%s", k > 1 ? ", " : "", parts[k]);
    }
    char full[96 + sizeof middle + 96 + 32];
    snprintf(full, sizeof full, "%s with %s, %s and %s noise.", parts[0], middle, parts[np - 1],
             p->noise_high ? "high" : "low");
    size_t n = strlen(full);
    n = n < CTRAIN_TEMPORAL_TEXT_MAX ? n : CTRAIN_TEMPORAL_TEXT_MAX - 1;
    memcpy(text, full, n);
    text[n] = '\0';
    text[0] = (char)(text[0] - 'a' + 'A'); /* every sentence opens with "a" */
}

void ctrain_temporal_gen_normals(uint64_t seed, int64_t n, double *out)
{
    pthread_once(&ctrain_temporal_gen__once, ctrain_temporal_gen__init_tables);
    uint32_t w[2];
    ctrain_temporal_gen__rng_t g;
    ctrain_temporal_gen__seed(&g, w, ctrain_temporal_gen__words(seed, w));
    for (int64_t k = 0; k < n; k++)
        out[k] = ctrain_temporal_gen__std_normal(&g);
}

int ctrain_temporal_gen_make(uint64_t seed, uint64_t i, int length, float *curve, char *text)
{
    ctrain_temporal_params_t p;
    ctrain_temporal_gen_params(seed, i, &p);
    int rc = ctrain_temporal_gen_render(&p, length, curve);
    if (rc == 0 && text)
        ctrain_temporal_gen_describe(&p, text);
    return rc;
}
