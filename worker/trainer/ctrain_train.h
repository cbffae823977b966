/*
 * ctrain_train.h - ctrain's two jobs, called by its main(): training (with evaluation,
 * checkpoints and resume) and evaluating a saved model (--inference_only).
 *
 * Training, in one paragraph: an epoch is a permutation (ct_shard, Philox-shuffled per epoch)
 * of the users with at least two training items - one sample per user per epoch, unlike
 * SASRec.pytorch's three free-running sampler processes - visited in optimizer batches of
 * batch_size * grad_accum users, ceil(samples / that) steps per epoch. Every rank takes its
 * contiguous slice of each optimizer batch (ct_shard_range) and processes it in micro-batches
 * of at most ceil(batch_size / world_size) rows; a user's negatives are keyed by its global
 * example index (epoch * samples + permutation position) and dropout by (step, site, row in the
 * optimizer batch), so the draws do not depend on the number of ranks or on grad_accum. The
 * loss is normalised by the optimizer batch's target count (computed by every rank from the
 * permutation, no communication), gradients are summed with ONE reduction per step whose tail
 * carries the loss, and the l2_emb term, the gradient norm and the NaN/inf check are computed
 * after it on identical buffers - so every rank takes the same decision about skipping a step.
 * Everything is a function of (seed, data, flags): a resumed run replays the interrupted one
 * bit for bit (same world size), and a different world size differs only by summation order.
 *
 * Errors come back as a code with one line in eb; main() reports that line (stderr and the
 * error file, no backtrace) and exits 1.
 */
#ifndef CTRAIN_TRAIN_H
#define CTRAIN_TRAIN_H

#include "ct_error.h"
#include "ctrain_cfg.h"
#include "ctworker.h"

#ifdef __cplusplus
extern "C" {
#endif

int ctrain_train_run(const ctrain_cfg_t *cfg, const ct_worker_env_t *env, ct_reducer_t *red,
                     ct_errbuf_t *eb);

int ctrain_infer_run(const ctrain_cfg_t *cfg, const ct_worker_env_t *env, ct_reducer_t *red,
                     ct_errbuf_t *eb);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_TRAIN_H */
