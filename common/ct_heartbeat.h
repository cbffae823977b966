/*
 * ct_heartbeat.h - the heartbeat wire format between a worker (libctworker's sender) and the
 * launcher's watchdog (ctrun reads the pipe), like the store codec a contract of both sides.
 *
 * Fixed 32-byte records in the host's byte order (both ends run on the same machine), written
 * with one write(2) each. Pipe writes of at most PIPE_BUF bytes are atomic, so a reader reading
 * multiples of 32 bytes never sees a torn record. `seq` counts write attempts from 1; a gap in
 * seq means records were dropped because the pipe was full (the reader was slow), and `dropped`
 * is their running total. `time_ns` is the worker's CLOCK_MONOTONIC, comparable with the
 * launcher's on the same host. The pipe is inherited as CTRUN_HEARTBEAT_FD.
 *
 * When a worker's heartbeats stop for the watchdog timeout, the launcher first sends it
 * CT_HEARTBEAT_DUMP_SIGNAL, on which libctworker prints the stuck threads' stacks, then stops it.
 *
 * Not here: sending (ctworker.h's ct_heartbeat_*), reading and judging silence (ctrun).
 */
#ifndef CT_HEARTBEAT_H
#define CT_HEARTBEAT_H

#include <signal.h>
#include <stdint.h>

#define CT_HEARTBEAT_MAGIC   0x42485443u /* the bytes "CTHB" read as a little-endian u32 */
#define CT_HEARTBEAT_VERSION 1u

/* The stack-dump signal (SIGUSR1, the signal Python's faulthandler.register is usually given,
 * so a Python worker can answer it too). */
#define CT_HEARTBEAT_DUMP_SIGNAL SIGUSR1

typedef struct ct_heartbeat_record {
    uint32_t magic;   /* CT_HEARTBEAT_MAGIC */
    uint16_t version; /* CT_HEARTBEAT_VERSION */
    uint16_t size;    /* sizeof(ct_heartbeat_record_t) = 32 */
    uint32_t seq;
    uint32_t dropped;
    uint64_t step;
    uint64_t time_ns;
} ct_heartbeat_record_t;

#endif /* CT_HEARTBEAT_H */
