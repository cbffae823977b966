/*
 * ctrain_temporal_gen.h - the synthetic curves of the temporal encoder, bit for bit those of
 * examples/pytorch/temporal_curves.py: sample i of a seed is drawn from its own stream,
 * numpy's np.random.default_rng([seed, i]) (SeedSequence -> PCG64 -> Generator), and made of a
 * trend, a seasonal cycle, level shifts, spikes and Gaussian noise (float64, cast to float32 at
 * the end), with one English sentence describing it built from the same parameters.
 *
 * The generator reproduces, exactly as numpy 2.x computes them: SeedSequence's hash mixing of
 * the entropy words into its 4-word pool and generate_state; PCG64 (128-bit LCG, XSL-RR 64-bit
 * output, the 32-bit draws served from the upper half of a 64-bit one kept for the next call);
 * and the Generator methods the Python file calls: random(), uniform(lo, hi), choice(list)
 * (integers(0, n): Lemire's bounded draw on 32 bits), choice(list, p) (cumulative sum divided by
 * its last entry, searched with side='right'), integers(0, 2**31), choice(n, size=k,
 * replace=False) (Floyd's algorithm, then a Fisher-Yates shuffle of the k picks),
 * choice([-1, 1], size=k), uniform(3, 5, size=k) and normal(0, s, size=n) (the 256-layer
 * ziggurat with its tail; its layer widths are numpy's, measured from numpy's draws by
 * scripts/temporal_ziggurat_wi.py, the thresholds and heights computed from them at first use).
 * The sine is the C library's sin(), which numpy 2.4's float64 sine equals on every argument
 * measured (docs/models.md).
 *
 * Not here: the cache's files (ctrain_temporal_task.c), splitting, batching, normalising.
 */
#ifndef CTRAIN_TEMPORAL_GEN_H
#define CTRAIN_TEMPORAL_GEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CTRAIN_TEMPORAL_TEXT_MAX 192 /* longest description + NUL, with room */

/* sample_params(seed, i) of temporal_curves.py. */
typedef struct ctrain_temporal_params {
    int trend; /* 1 up, -1 down, 0 flat */
    double slope;
    bool seasonal;
    int period;
    double amplitude, phase;
    int n_shift;
    double shift_where[2], shift_size[2];
    int spikes;
    bool noise_high;
    uint32_t stream; /* the seed of render()'s own generator */
} ctrain_temporal_params_t;

/* The parameters of sample i of seed. */
void ctrain_temporal_gen_params(uint64_t seed, uint64_t i, ctrain_temporal_params_t *p);

/* The curve of p, length points, into out (length floats). CT_ERANGE_VALUE when length < 1 or p
 * has more spikes than points (numpy's choice(replace=False) refuses that too), -ENOMEM. */
int ctrain_temporal_gen_render(const ctrain_temporal_params_t *p, int length, float *out);

/* describe(p): the sentence, NUL-terminated, into text (CTRAIN_TEMPORAL_TEXT_MAX bytes). */
void ctrain_temporal_gen_describe(const ctrain_temporal_params_t *p, char *text);

/* make(seed, i, length): curve (length floats) and, when text is not NULL, its description
 * (CTRAIN_TEMPORAL_TEXT_MAX bytes). Errors as ctrain_temporal_gen_render. */
int ctrain_temporal_gen_make(uint64_t seed, uint64_t i, int length, float *curve, char *text);

/* np.random.default_rng(seed).standard_normal(n) into out (float64): the ziggurat on its own,
 * bit for bit (the curves show its draws only after the cast to float32). */
void ctrain_temporal_gen_normals(uint64_t seed, int64_t n, double *out);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_TEMPORAL_GEN_H */
