/*
 * ctrun_store_internal.h - hooks into the store server for its tests and fuzzers only.
 *
 * A "test connection" has no socket: bytes are fed to it directly and its replies are read
 * back from its output buffer, through exactly the parsing and request handling that network
 * connections use. This is what lets a fuzzer drive the server's request handling at
 * millions of inputs a second, and lets tests check the server's internal invariants.
 * Test connections must be freed before the store is closed.
 */
#ifndef CTRUN_STORE_INTERNAL_H
#define CTRUN_STORE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctrun_store.h"

typedef struct ctrun__conn ctrun__conn_t;

ctrun__conn_t *ctrun__test_conn_open(ctrun_store_t *s);
/* Processes bytes as if they had been read from the socket. Returns 0, or CT_EPEER once the
 * server has closed the connection (for a violation). */
int ctrun__test_conn_feed(ctrun__conn_t *c, const void *data, size_t len);
/* Moves up to cap bytes of pending replies into buf (NULL discards), returns how many. */
size_t ctrun__test_conn_output(ctrun__conn_t *c, uint8_t *buf, size_t cap);
bool ctrun__test_conn_closed(const ctrun__conn_t *c);
/* Closes (if needed) and frees a test connection. */
void ctrun__test_conn_free(ctrun__conn_t *c);
/* Recounts every index and counter from scratch; CT_ESTATE with the first disagreement. */
int ctrun__test_check(const ctrun_store_t *s, ct_errbuf_t *eb);

#endif /* CTRUN_STORE_INTERNAL_H */
