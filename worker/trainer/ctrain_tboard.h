/*
 * ctrain_tboard.h - a TensorBoard event-file writer for scalar summaries (what ctrain logs to
 * metrics.jsonl: losses, throughput, HR/NDCG), so `tensorboard --logdir <train_dir>` shows
 * training curves without any Python in the trainer.
 *
 * Format (TensorFlow's record_writer / event.proto): a file named
 * events.out.tfevents.<unix seconds>.<host>.<pid>.ctrain holding records of
 *   u64 length (LE) | u32 masked CRC32C of those 8 bytes | data | u32 masked CRC32C of data
 * where each data is a serialised Event protobuf. The first event carries file_version
 * "brain.Event:2"; each scalar is an Event{wall_time, step, summary{value{tag, simple_value}}}.
 * The protobuf is encoded by hand: only those few fields exist here. Writes go straight to
 * the file and are flushed per event, so a crashed run keeps every complete record (a reader
 * skips a torn last record).
 */
#ifndef CTRAIN_TBOARD_H
#define CTRAIN_TBOARD_H

#include <stdint.h>
#include <stdio.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ctrain_tboard {
    FILE *f;
    char path[1024];
} ctrain_tboard_t;

/* Creates a new event file in dir (which must exist). */
int ctrain_tboard_open(ctrain_tboard_t *tb, const char *dir, ct_errbuf_t *eb);

/* Appends one scalar (tag such as "train/loss") at a step. */
int ctrain_tboard_scalar(ctrain_tboard_t *tb, const char *tag, int64_t step, double value,
                     ct_errbuf_t *eb);

/* Closes the file; safe to call twice. */
void ctrain_tboard_close(ctrain_tboard_t *tb);

/* CRC32C (Castagnoli), as used by the record framing; exposed for tests. */
uint32_t ctrain_tboard_crc32c(const void *data, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_TBOARD_H */
