/*
 * ctrain_loader.c - the micro-batch stream of ctrain_loader.h. The producer's position (step,
 * offset, permutation) belongs to whoever fills chunks - the background thread when there is
 * one, the caller otherwise - so only the hand-over of the two buffers needs the lock.
 */
#include "ctrain_loader.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Fills ch with the chunk at the producer's position and advances it. */
static void ctrain_loader__fill(ctrain_loader_t *b, ctrain_train_chunk_t *ch)
{
    int64_t epoch, pos, begin, count;
    ct_shard_locate(&b->shard, b->step, &epoch, &pos);
    if (b->perm_epoch != epoch) {
        ct_shard_permutation(&b->shard, epoch, b->perm);
        b->perm_epoch = epoch;
    }
    const int64_t g0 = pos * b->shard.global_batch, bsz = ct_shard_batch_size(&b->shard, pos);
    ct_shard_range(&b->shard, pos, &begin, &count);
    if (b->off == 0) {
        /* Every rank counts the whole global batch's targets itself: the loss normaliser
         * needs no communication. */
        double t = 0;
        for (int64_t j = g0; j < g0 + bsz; j++)
            t += b->targets[b->perm[j]];
        b->step_targets = t;
    }
    int64_t left = count - b->off;
    int n = (int)(left < b->micro ? left : b->micro);
    if (n < 0)
        n = 0;
    for (int r = 0; r < n; r++) {
        int64_t j = begin + b->off + r;
        b->fill(b->fill_ctx, &ch->batch, r, b->samples[b->perm[j]], b->seed,
                (uint64_t)(epoch * b->shard.n_samples + j));
    }
    ch->n = n;
    ch->step = b->step;
    ch->epoch = epoch;
    ch->row0 = begin + b->off - g0;
    ch->targets = b->step_targets;
    b->off += n;
    ch->last = b->off >= count;
    if (ch->last) {
        b->step++;
        b->off = 0;
    }
}

static void *ctrain_loader__producer(void *arg)
{
    ctrain_loader_t *b = arg;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        while (!b->stop && (b->filled == 2 || b->step >= b->total_steps))
            pthread_cond_wait(&b->cv, &b->mu);
        if (b->stop)
            break;
        int slot = (b->head + b->filled) % 2;
        pthread_mutex_unlock(&b->mu);
        ctrain_loader__fill(b, &b->chunk[slot]);
        pthread_mutex_lock(&b->mu);
        b->filled++;
        pthread_cond_broadcast(&b->cv);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

int ctrain_loader_init(ctrain_loader_t *b, ctrain_loader_fill_t fill, const void *fill_ctx,
                       const int32_t *samples, const int32_t *targets, const ct_shard_t *shard,
                       int micro, int L, bool with_time, int row_neg, uint64_t seed,
                       int64_t start_step, int64_t total_steps, bool threaded, ct_errbuf_t *eb)
{
    memset(b, 0, sizeof *b);
    b->fill = fill;
    b->fill_ctx = fill_ctx;
    b->samples = samples;
    b->targets = targets;
    b->shard = *shard;
    b->micro = micro;
    b->seed = seed;
    b->step = start_step;
    b->total_steps = total_steps;
    b->perm_epoch = -1;
    b->threaded = threaded;
    b->perm = malloc((size_t)shard->n_samples * sizeof *b->perm);
    int nbuf = threaded ? 2 : 1;
    if (!b->perm)
        goto oom;
    for (int i = 0; i < nbuf; i++)
        if (ctrain_batch_init(&b->chunk[i].batch, micro, L, 1, with_time) != 0 ||
            (row_neg > 0 && ctrain_batch_add_row_neg(&b->chunk[i].batch, row_neg) != 0))
            goto oom;
    if (threaded) {
        int rc = pthread_mutex_init(&b->mu, NULL);
        if (rc == 0 && (rc = pthread_cond_init(&b->cv, NULL)) != 0)
            pthread_mutex_destroy(&b->mu);
        if (rc == 0 && (rc = pthread_create(&b->thread, NULL, ctrain_loader__producer, b)) != 0) {
            pthread_cond_destroy(&b->cv);
            pthread_mutex_destroy(&b->mu);
        }
        if (rc != 0) {
            b->threaded = false;
            ctrain_loader_close(b);
            return ct_errbuf_set(eb, -rc, "starting the batch thread: %s", strerror(rc));
        }
        b->started = true;
    }
    return 0;
oom:
    ctrain_loader_close(b);
    return ct_errbuf_set(eb, -ENOMEM, "out of memory for training batches");
}

const ctrain_train_chunk_t *ctrain_loader_next(ctrain_loader_t *b)
{
    if (!b->threaded) {
        ctrain_loader__fill(b, &b->chunk[0]);
        return &b->chunk[0];
    }
    pthread_mutex_lock(&b->mu);
    if (b->held) {
        /* The consumer is done with the chunk it held: hand its buffer back. */
        b->head = (b->head + 1) % 2;
        b->filled--;
        b->held = 0;
        pthread_cond_broadcast(&b->cv);
    }
    while (b->filled == 0)
        pthread_cond_wait(&b->cv, &b->mu);
    b->held = 1;
    const ctrain_train_chunk_t *ch = &b->chunk[b->head];
    pthread_mutex_unlock(&b->mu);
    return ch;
}

void ctrain_loader_close(ctrain_loader_t *b)
{
    if (b->started) {
        pthread_mutex_lock(&b->mu);
        b->stop = true;
        pthread_cond_broadcast(&b->cv);
        pthread_mutex_unlock(&b->mu);
        pthread_join(b->thread, NULL);
        pthread_cond_destroy(&b->cv);
        pthread_mutex_destroy(&b->mu);
        b->started = false;
    }
    for (int i = 0; i < 2; i++)
        ctrain_batch_close(&b->chunk[i].batch);
    free(b->perm);
    b->perm = NULL;
}
