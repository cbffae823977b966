/*
 * ct_shard.c - which samples each rank trains on: the epoch permutation (Fisher-Yates over
 * Philox draws) and the split of every global batch into contiguous per-rank slices. Pure
 * arithmetic on the caller's buffers; reading the samples is the trainer's business.
 */
#include <errno.h>

#include "ctworker.h"

int ct_shard_check(const ct_shard_t *s, ct_errbuf_t *eb)
{
    if (s->n_samples < 1)
        return ct_errbuf_set(eb, -EINVAL, "sharding: dataset size %lld (expected >= 1)",
                             (long long)s->n_samples);
    if (s->global_batch < 1)
        return ct_errbuf_set(eb, -EINVAL, "sharding: global batch size %lld (expected >= 1)",
                             (long long)s->global_batch);
    if (s->world_size < 1 || s->world_size > CT_WORKER_MAX_WORLD)
        return ct_errbuf_set(eb, -EINVAL, "sharding: world size %d (expected 1..%d)",
                             s->world_size, CT_WORKER_MAX_WORLD);
    if (s->rank < 0 || s->rank >= s->world_size)
        return ct_errbuf_set(eb, -EINVAL, "sharding: rank %d (expected 0..%d)", s->rank,
                             s->world_size - 1);
    if (s->drop_last && s->n_samples < s->global_batch)
        return ct_errbuf_set(eb, -EINVAL,
                             "sharding: with drop_last, dataset size %lld is smaller than one "
                             "global batch of %lld: no step would run",
                             (long long)s->n_samples, (long long)s->global_batch);
    return 0;
}

int64_t ct_shard_steps_per_epoch(const ct_shard_t *s)
{
    int64_t full = s->n_samples / s->global_batch;
    return s->drop_last || s->n_samples % s->global_batch == 0 ? full : full + 1;
}

int64_t ct_shard_max_local(const ct_shard_t *s)
{
    return (s->global_batch + s->world_size - 1) / s->world_size;
}

void ct_shard_locate(const ct_shard_t *s, int64_t global_step, int64_t *epoch, int64_t *step)
{
    int64_t per = ct_shard_steps_per_epoch(s);
    *epoch = global_step / per;
    *step = global_step % per;
}

void ct_shard_permutation(const ct_shard_t *s, int64_t epoch, int64_t *perm)
{
    int64_t n = s->n_samples;
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    if (!s->shuffle)
        return;
    ct_rng_t r;
    ct_rng_init(&r, s->seed, CT_RNG_STREAM(CT_RNG_PURPOSE_SHUFFLE, (uint64_t)epoch), 0);
    /* Fisher-Yates from the top: position i swaps with a uniform j in [0, i]. */
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)ct_rng_below(&r, (uint64_t)i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

int64_t ct_shard_batch_size(const ct_shard_t *s, int64_t step)
{
    if (step < 0 || step >= ct_shard_steps_per_epoch(s))
        return 0;
    int64_t left = s->n_samples - step * s->global_batch;
    return left < s->global_batch ? left : s->global_batch;
}

void ct_shard_range(const ct_shard_t *s, int64_t step, int64_t *begin, int64_t *count)
{
    int64_t b = ct_shard_batch_size(s, step);
    int64_t w = s->world_size, r = s->rank;
    int64_t q = b / w, rem = b % w;
    *count = q + (r < rem ? 1 : 0);
    *begin = (step < 0 ? 0 : step) * s->global_batch + r * q + (r < rem ? r : rem);
}

int64_t ct_shard_indices(const ct_shard_t *s, const int64_t *perm, int64_t step, int64_t *out)
{
    int64_t begin, count;
    ct_shard_range(s, step, &begin, &count);
    for (int64_t i = 0; i < count; i++)
        out[i] = perm[begin + i];
    return count;
}
