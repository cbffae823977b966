/*
 * foreign_peer.h - something that is not a store, listening where a test points a store
 * client, a ctrun agent or the etcd client: an HTTP server, one that answers 200 with broken
 * JSON, an SSH server, a peer that answers with binary junk, or one that accepts connections and
 * never answers. It runs on its own thread on 127.0.0.1 and a port the kernel picks.
 *
 * Test code only; not here: anything that speaks the store protocol.
 */
#ifndef FOREIGN_PEER_H
#define FOREIGN_PEER_H

#include <pthread.h>

typedef enum foreign_kind {
    FOREIGN_HTTP,          /* reads the request, answers "HTTP/1.1 400 Bad Request", closes */
    FOREIGN_SSH,           /* sends an SSH banner at once, then keeps the connection, silent */
    FOREIGN_BINARY,        /* reads, answers 8 bytes no store sends, keeps the connection */
    FOREIGN_SILENT,        /* accepts and keeps the connection, never reading or writing */
    FOREIGN_HTTP_BAD_JSON, /* reads the request, answers 200 with a truncated JSON body, closes */
} foreign_kind_t;

typedef struct foreign_peer {
    foreign_kind_t kind;
    int lfd, port;
    int stop[2]; /* a pipe: written to stop the thread */
    pthread_t thread;
    int held[256]; /* connections kept open until the peer stops */
    int nheld;
    int accepted; /* connections accepted so far (read after foreign_peer_stop) */
} foreign_peer_t;

/* Listens on 127.0.0.1:0 and starts answering; 0 or a negative errno. */
int foreign_peer_start(foreign_peer_t *p, foreign_kind_t kind);
/* Stops the thread and closes every socket. */
void foreign_peer_stop(foreign_peer_t *p);

#endif
