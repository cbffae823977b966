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
/* Reads up to cap bytes of replies into buf (NULL discards), as the peer of a socket would;
 * returns how many. Reading completes the connection's in-flight write once all of it is read,
 * through the same code as a network write's completion, so what follows (the next write,
 * resuming a connection paused for its pending output) is the server's own doing. */
size_t ctrun__test_conn_output(ctrun__conn_t *c, uint8_t *buf, size_t cap);
/* How many unread bytes the connection's pretend socket accepts at once, as a kernel socket
 * buffer does (default 0: every reply waits, in flight, until it is read). A large room makes
 * every flush complete at once, without a write completion, as uv_try_write does on a fast
 * local connection. */
void ctrun__test_conn_set_room(ctrun__conn_t *c, size_t nbytes);
bool ctrun__test_conn_closed(const ctrun__conn_t *c);
/* Closes (if needed) and frees a test connection. */
void ctrun__test_conn_free(ctrun__conn_t *c);
/* Recounts every index and counter from scratch; CT_ESTATE with the first disagreement. */
int ctrun__test_check(const ctrun_store_t *s, ct_errbuf_t *eb);

#endif /* CTRUN_STORE_INTERNAL_H */
