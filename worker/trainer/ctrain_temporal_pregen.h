/*
 * ctrain_temporal_pregen.h - ctrain --model temporal --pregenerate: the curve cache of
 * pregenerate_temporal_data.py written by ctrain (ctrain_temporal_pregen.c says how).
 * Not here: reading the cache, training.
 */
#ifndef CTRAIN_TEMPORAL_PREGEN_H
#define CTRAIN_TEMPORAL_PREGEN_H

#include "ct_error.h"
#include "ctrain_cfg.h"

/* Writes c->pregenerate curves of c->seq_len points of seed c->data_seed into c->output_dir
 * (rank 0; other ranks return 0 at once) and prints one line saying so. eb says what failed;
 * nothing half-written is left behind. */
int ctrain_temporal_pregenerate(const ctrain_cfg_t *c, int rank, ct_errbuf_t *eb);

#endif /* CTRAIN_TEMPORAL_PREGEN_H */
