/*
 * ctrain_synth.c - the deterministic synthetic dataset (`--dataset synthetic`, ctrain's default).
 *
 * Structure, chosen so that a short training run visibly learns and time features matter:
 *   - A hidden cycle over all items gives every item a successor succ(i).
 *   - Timestamps advance by a short gap (1..5 minutes) or a long gap (30..229 minutes), each
 *     with probability 1/2 (the first gap is always one minute); TiSASRec's per-user scaling
 *     turns these into intervals 1..5 and 30..229, below the default time_span of 256.
 *   - Next item: after a short last gap the user continues the cycle, x[t+1] = succ(x[t]);
 *     after a long last gap (they were away) they skip one, x[t+1] = succ(succ(x[t])). With
 *     probability `noise` the step is instead an item drawn from a Zipf-like popularity law.
 *   - Lengths: 5 + an exponential with mean (mean_len - 5), capped at 8 x mean_len.
 * A popularity ranking therefore gets little right (items are near-uniform along the cycle),
 * a sequence model that learns succ gets about half of the next items right from the last item
 * alone, and a model that also sees the last interval (TiSASRec) can get nearly all non-noise
 * steps right.
 *
 * Every draw comes from Philox (kernels/ct_philox.h) keyed by the seed, so the data is a pure
 * function of the options on any machine.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain_data.h"
#include "ct_parse.h"
#include "ct_philox.h"

/* Sequential draws from one Philox stream. */
typedef struct ctrain_synth__draws {
    uint64_t seed, stream, next;
} ctrain_synth__draws_t;

static uint32_t ctrain_synth__u32(ctrain_synth__draws_t *d)
{
    uint64_t k = d->next++;
    return ct_philox_block_at(d->seed, d->stream, k / 4).v[k % 4];
}

/* Uniform in [0, 1) with 53 random bits. */
static double ctrain_synth__unit(ctrain_synth__draws_t *d)
{
    uint64_t hi = ctrain_synth__u32(d) >> 5, lo = ctrain_synth__u32(d) >> 6;
    return ((double)hi * 67108864.0 + (double)lo) * (1.0 / 9007199254740992.0);
}

/* Uniform integer in [0, n) without modulo bias (rejection). */
static uint32_t ctrain_synth__below(ctrain_synth__draws_t *d, uint32_t n)
{
    uint32_t limit = UINT32_MAX - UINT32_MAX % n;
    uint32_t x;
    do {
        x = ctrain_synth__u32(d);
    } while (x >= limit);
    return x % n;
}

enum { CT__STREAM_CYCLE = 1, CT__STREAM_POP = 2, CT__STREAM_USER = 3 };

int ctrain_synth_parse(const char *text, ctrain_synth_opts_t *opts, ct_errbuf_t *eb)
{
    ctrain_synth_opts_t o = CTRAIN_SYNTH_OPTS_DEFAULT;
    if (strncmp(text, "synthetic", 9) != 0 || (text[9] != '\0' && text[9] != ':'))
        return ct_errbuf_set(eb, CT_EPARSE, "\"%.60s\" is not a synthetic dataset spec", text);
    const char *p = text[9] == ':' ? text + 10 : text + 9;
    while (*p != '\0') {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char item[128];
        if (n == 0 || n >= sizeof item)
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "synthetic spec \"%.60s\": empty or overlong option", text);
        memcpy(item, p, n);
        item[n] = '\0';
        char *eq = strchr(item, '=');
        if (eq == NULL)
            return ct_errbuf_set(eb, CT_EPARSE, "synthetic spec: \"%s\" is not key=value", item);
        *eq = '\0';
        const char *v = eq + 1;
        int rc;
        int64_t iv;
        if (strcmp(item, "users") == 0) {
            rc = ct_parse_int64(v, 10, 10000000, &iv, eb);
            o.num_users = (int32_t)iv;
        } else if (strcmp(item, "items") == 0) {
            rc = ct_parse_int64(v, 10, 10000000, &iv, eb);
            o.num_items = (int32_t)iv;
        } else if (strcmp(item, "len") == 0) {
            rc = ct_parse_int64(v, 6, 100000, &iv, eb);
            o.mean_len = (int32_t)iv;
        } else if (strcmp(item, "noise") == 0) {
            rc = ct_parse_double(v, 0.0, 1.0, &o.noise, eb);
        } else if (strcmp(item, "seed") == 0) {
            rc = ct_parse_int64(v, 0, INT64_MAX, &iv, eb);
            o.seed = (uint64_t)iv;
        } else {
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "synthetic spec: unknown option \"%s\" (expected users, items, "
                                 "len, noise, seed)",
                                 item);
        }
        if (rc != 0)
            return ct_errbuf_wrap(eb, rc, "synthetic spec option %s", item);
        p += n;
        if (*p == ',')
            p++;
    }
    *opts = o;
    return 0;
}

int ctrain_data_synthetic(ctrain_dataset_t *ds, const ctrain_synth_opts_t *opts, ct_errbuf_t *eb)
{
    ctrain_synth_opts_t o = CTRAIN_SYNTH_OPTS_DEFAULT;
    if (opts != NULL)
        o = *opts;
    if (o.num_users < 1 || o.num_items < 3 || o.mean_len < 6 || !(o.noise >= 0 && o.noise <= 1))
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "synthetic dataset: need users >= 1, items >= 3, len >= 6, "
                             "0 <= noise <= 1");
    memset(ds, 0, sizeof *ds);
    snprintf(ds->source, sizeof ds->source,
             "synthetic(users=%d,items=%d,len=%d,noise=%g,seed=%llu)", o.num_users, o.num_items,
             o.mean_len, o.noise, (unsigned long long)o.seed);
    ds->num_users = o.num_users;
    ds->num_items = o.num_items;

    int rc = -ENOMEM;
    int32_t *succ = malloc(((size_t)o.num_items + 1) * sizeof *succ);
    int32_t *order = malloc((size_t)o.num_items * sizeof *order);
    double *pop_cdf = malloc((size_t)o.num_items * sizeof *pop_cdf);
    int32_t *pop_item = malloc((size_t)o.num_items * sizeof *pop_item);
    int32_t *lens = malloc(((size_t)o.num_users + 1) * sizeof *lens);
    if (!succ || !order || !pop_cdf || !pop_item || !lens)
        goto fail;

    /* The hidden cycle: a random order of all items, each pointing at the next. */
    ctrain_synth__draws_t dc = {o.seed, CT__STREAM_CYCLE, 0};
    for (int32_t i = 0; i < o.num_items; i++)
        order[i] = i + 1;
    for (int32_t i = o.num_items - 1; i > 0; i--) {
        int32_t j = (int32_t)ctrain_synth__below(&dc, (uint32_t)i + 1);
        int32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int32_t i = 0; i < o.num_items; i++)
        succ[order[i]] = order[(i + 1) % o.num_items];

    /* Popularity: Zipf-like weights 1/(rank+10)^0.8 over another random order. */
    ctrain_synth__draws_t dp = {o.seed, CT__STREAM_POP, 0};
    for (int32_t i = 0; i < o.num_items; i++)
        pop_item[i] = i + 1;
    for (int32_t i = o.num_items - 1; i > 0; i--) {
        int32_t j = (int32_t)ctrain_synth__below(&dp, (uint32_t)i + 1);
        int32_t t = pop_item[i];
        pop_item[i] = pop_item[j];
        pop_item[j] = t;
    }
    double acc = 0;
    for (int32_t i = 0; i < o.num_items; i++) {
        acc += pow((double)i + 10.0, -0.8);
        pop_cdf[i] = acc;
    }

    /* Lengths first (their own stream per user), to size the arrays. */
    int64_t total = 0;
    for (int32_t u = 1; u <= o.num_users; u++) {
        ctrain_synth__draws_t du = {o.seed, ((uint64_t)u << 8) | CT__STREAM_USER, 0};
        double x = -log(1.0 - ctrain_synth__unit(&du)) * (double)(o.mean_len - 5);
        double cap = 8.0 * o.mean_len;
        lens[u] = 5 + (int32_t)(x < cap ? x : cap);
        total += lens[u];
    }
    ds->num_interactions = total;
    ds->user_start = malloc(((size_t)o.num_users + 2) * sizeof *ds->user_start);
    ds->items = malloc((size_t)total * sizeof *ds->items);
    ds->times = malloc((size_t)total * sizeof *ds->times);
    ds->time_scaled = malloc((size_t)total * sizeof *ds->time_scaled);
    if (!ds->user_start || !ds->items || !ds->times || !ds->time_scaled)
        goto fail;
    ds->user_start[0] = ds->user_start[1] = 0;
    for (int32_t u = 1; u <= o.num_users; u++)
        ds->user_start[u + 1] = ds->user_start[u] + lens[u];

    for (int32_t u = 1; u <= o.num_users; u++) {
        ctrain_synth__draws_t du = {o.seed, ((uint64_t)u << 8) | CT__STREAM_USER, 2};
        int64_t s = ds->user_start[u];
        int64_t t = 1600000000 + (int64_t)ctrain_synth__below(&du, 10000000);
        bool last_gap_long = false;
        int32_t cur = 0;
        for (int32_t k = 0; k < lens[u]; k++) {
            int32_t next;
            if (k == 0 || ctrain_synth__unit(&du) < o.noise) {
                double r = ctrain_synth__unit(&du) * acc;
                int32_t lo = 0, hi = o.num_items - 1;
                while (lo < hi) {
                    int32_t mid = (lo + hi) / 2;
                    if (pop_cdf[mid] <= r)
                        lo = mid + 1;
                    else
                        hi = mid;
                }
                next = pop_item[lo];
            } else {
                next = last_gap_long ? succ[succ[cur]] : succ[cur];
            }
            if (k == 1) {
                /* The first gap is always one minute, so every user's smallest gap (TiSASRec's
                 * time unit) is 60 s and scaled intervals mean the same for all users. */
                last_gap_long = false;
                t += 60;
            } else if (k > 1) {
                last_gap_long = ctrain_synth__below(&du, 2) == 1;
                t += 60 * (last_gap_long ? 30 + (int64_t)ctrain_synth__below(&du, 200)
                                         : 1 + (int64_t)ctrain_synth__below(&du, 5));
            }
            ds->items[s + k] = next;
            ds->times[s + k] = t;
            cur = next;
        }
    }
    free(succ);
    free(order);
    free(pop_cdf);
    free(pop_item);
    free(lens);
    /* Time scaling and the split exactly as for a loaded file. */
    rc = ctrain_data_finish(ds, 3);
    if (rc != 0) {
        ctrain_data_free(ds);
        return ct_errbuf_set(eb, rc, "synthetic dataset: out of memory");
    }
    return 0;

fail:
    free(succ);
    free(order);
    free(pop_cdf);
    free(pop_item);
    free(lens);
    ctrain_data_free(ds);
    return ct_errbuf_set(eb, rc, "synthetic dataset: out of memory");
}
