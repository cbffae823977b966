/*
 * ctrun_store_conn.c - one client connection and its I/O: taking an accepted socket on,
 * reading (into the shared read buffer, or into the connection's own buffer for a partial
 * request), parsing every complete request through ctrun_store__step, output (the buffer being
 * filled and the one being written, uv_try_write first), backpressure (a connection whose output
 * backs up is paused and resumed once it drains; stored data growing into buffered input sheds the
 * biggest input buffers), and closing. Also the rate-limited log lines about connections.
 *
 * Deliberately not here: what a request means (ctrun_store_req.c), the listening socket and
 * accept(2) (ctrun_store_listen.c), and the store's own lifecycle (ctrun_store.c).
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ct_log.h"
#include "ctrun_store_internal.h"

/* ---- logging ---------------------------------------------------------------------------- */

/* At most CTRUN_STORE__LOG_PER_SECOND lines a second about connections, so that a flood of bad
 * clients cannot flood the log too. */
void ctrun_store__log_conn(ctrun_store_t *s, const char *fmt, ...)
{
    uint64_t now = uv_now(s->loop);
    if (now - s->log_window_ms >= 1000) {
        if (s->log_suppressed > 0)
            ct_log_warn("store: %llu more connection messages suppressed",
                        (unsigned long long)s->log_suppressed);
        s->log_window_ms = now;
        s->log_in_window = 0;
        s->log_suppressed = 0;
    }
    if (s->log_in_window >= CTRUN_STORE__LOG_PER_SECOND) {
        s->log_suppressed++;
        return;
    }
    s->log_in_window++;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ct_log_warn("store: %s", msg);
}

static void ctrun_store__peer(ctrun_store__conn_t *c, char *buf, size_t size)
{
    struct sockaddr_storage ss;
    int len = sizeof ss;
    snprintf(buf, size, "?");
    if (c->is_virtual) {
        snprintf(buf, size, "(in-process test connection)");
        return;
    }
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) != 0)
        return;
    char ip[64] = "?";
    if (ss.ss_family == AF_INET6) {
        uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof ip);
        snprintf(buf, size, "[%s]:%d", ip, ntohs(((struct sockaddr_in6 *)&ss)->sin6_port));
    } else if (ss.ss_family == AF_INET) {
        uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof ip);
        snprintf(buf, size, "%s:%d", ip, ntohs(((struct sockaddr_in *)&ss)->sin_port));
    }
}

/* ---- connection output ------------------------------------------------------------------ */

static void ctrun_store__mark_dirty(ctrun_store__conn_t *c)
{
    if (c->dirty)
        return;
    c->dirty = true;
    c->dnext = c->s->dirty;
    c->s->dirty = c;
}

static size_t ctrun_store__pending(const ctrun_store__conn_t *c)
{
    return c->out_len + (c->writing ? c->inflight : 0);
}

/*
 * Marks a connection to be closed by the next ctrun_store__flush_dirty. Output is produced for
 * other connections while walking a key's waiters or watchers; closing one of them there would free
 * registrations and entries under the walk, so those paths doom instead of closing.
 */
static void ctrun_store__doom(ctrun_store__conn_t *c)
{
    if (c->doomed || c->closing)
        return;
    c->doomed = true;
    c->s->st.dropped++;
    ctrun_store__mark_dirty(c);
}

/* Room for n more output bytes, or NULL (the connection is then doomed: out of memory, or,
 * for pushed bytes, a peer that does not read). */
uint8_t *ctrun_store__out(ctrun_store__conn_t *c, size_t n, bool pushed)
{
    if (c->closing || c->doomed)
        return NULL;
    if (pushed &&
        ctrun_store__pending(c) + n > c->s->limits.max_message_len + CTRUN_STORE__HIGH_WATER) {
        char peer[96];
        ctrun_store__peer(c, peer, sizeof peer);
        ctrun_store__log_conn(c->s,
                              "closed connection from %s: it does not read its replies (%zu bytes "
                              "pending)",
                              peer, ctrun_store__pending(c));
        ctrun_store__doom(c);
        return NULL;
    }
    if (c->out_len + n > c->out_cap) {
        size_t ncap = c->out_cap ? c->out_cap : 256;
        while (ncap < c->out_len + n)
            ncap *= 2;
        uint8_t *nb = realloc(c->out, ncap);
        if (nb == NULL) {
            ctrun_store__log_conn(c->s, "closed a connection: out of memory for a %zu-byte reply",
                                  n);
            ctrun_store__doom(c);
            return NULL;
        }
        c->out = nb;
        c->out_cap = ncap;
    }
    uint8_t *p = c->out + c->out_len;
    c->out_len += n;
    ctrun_store__mark_dirty(c);
    return p;
}

void ctrun_store__reply_u8(ctrun_store__conn_t *c, uint8_t v, bool pushed)
{
    uint8_t *p = ctrun_store__out(c, 1, pushed);
    if (p != NULL)
        *p = v;
}

void ctrun_store__reply_u64(ctrun_store__conn_t *c, uint64_t v)
{
    uint8_t *p = ctrun_store__out(c, 8, false);
    if (p != NULL)
        ct_store_put_u64(p, v);
}

void ctrun_store__reply_bytes(ctrun_store__conn_t *c, const void *data, size_t len)
{
    uint8_t *p = ctrun_store__out(c, 8 + len, false);
    if (p != NULL)
        ct_store_put_bytes(p, data, len);
}

static void ctrun_store__on_write(uv_write_t *req, int status);

/* What the socket takes at once of n bytes: uv_try_write for a network connection, the room
 * left in the pretend socket for a test connection. 0 when it takes nothing now; negative on
 * an error that ends the connection. */
static ssize_t ctrun_store__try_write(ctrun_store__conn_t *c, const uint8_t *p, size_t n)
{
    if (c->is_virtual) {
        size_t room = c->vroom > c->vsock_len ? c->vroom - c->vsock_len : 0;
        size_t k = n < room ? n : room;
        if (k == 0)
            return 0;
        if (c->vsock_len + k > c->vsock_cap) {
            size_t ncap = c->vsock_cap ? c->vsock_cap : 4096;
            while (ncap < c->vsock_len + k)
                ncap *= 2;
            uint8_t *nb = realloc(c->vsock, ncap);
            if (nb == NULL)
                return -ENOMEM;
            c->vsock = nb;
            c->vsock_cap = ncap;
        }
        memcpy(c->vsock + c->vsock_len, p, k);
        c->vsock_len += k;
        return (ssize_t)k;
    }
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
    int w = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    return w == UV_EAGAIN ? 0 : w;
}

static void ctrun_store__flush(ctrun_store__conn_t *c)
{
    if (c->closing || c->writing || c->out_len == 0)
        return;
    ssize_t n = ctrun_store__try_write(c, c->out, c->out_len);
    if (n == (ssize_t)c->out_len) {
        c->out_len = 0;
        if (c->out_cap > 256 * 1024) { /* do not keep a big reply's buffer for an idle peer */
            free(c->out);
            c->out = NULL;
            c->out_cap = 0;
        }
        return;
    }
    if (n < 0) {
        ctrun_store__conn_close(c);
        return;
    }
    /* The rest goes out asynchronously from wbuf while new output gathers in out. */
    uint8_t *tb = c->wbuf;
    size_t tcap = c->wbuf_cap;
    c->wbuf = c->out;
    c->wbuf_cap = c->out_cap;
    c->woff = (size_t)n;
    c->inflight = c->out_len - (size_t)n;
    c->out = tb;
    c->out_cap = tcap;
    c->out_len = 0;
    c->writing = true;
    if (c->is_virtual)
        return; /* completed by ctrun_store__test_conn_output as the peer reads */
    uv_buf_t wb = uv_buf_init((char *)c->wbuf + n, (unsigned)c->inflight);
    c->wreq.data = c;
    if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &wb, 1, ctrun_store__on_write) != 0) {
        c->writing = false;
        ctrun_store__conn_close(c);
    }
}

static void ctrun_store__resume(ctrun_store__conn_t *c);

/* A connection paused for its pending output is read from again once that output has drained
 * below the low water mark: after a write completes, and equally after a flush that the socket
 * took whole at once (no write callback follows that one). */
static void ctrun_store__maybe_resume(ctrun_store__conn_t *c)
{
    if (c->paused && !c->closing && !c->doomed && ctrun_store__pending(c) < CTRUN_STORE__LOW_WATER)
        ctrun_store__resume(c);
}

/*
 * Stored data has grown into room that buffered input holds (see "memory accounting"): dooms
 * the connections holding the most buffered input until everything fits under the cap again.
 * Connections inside ctrun_store__process are spared (their buffer holds the request being handled,
 * and is released when it ends). Returns how many were doomed.
 */
static int ctrun_store__shed_input(ctrun_store_t *s)
{
    int n = 0;
    while (s->memory + ctrun_store__buffered(s) > s->max_bytes) {
        ctrun_store__conn_t *victim = NULL;
        for (ctrun_store__conn_t *c = s->conns; c != NULL; c = c->next)
            if (!c->doomed && !c->closing && !c->parsing && c->in_cap > 0 &&
                (victim == NULL || c->in_cap > victim->in_cap))
                victim = c;
        if (victim == NULL)
            break;
        char peer[96];
        ctrun_store__peer(victim, peer, sizeof peer);
        ctrun_store__log_conn(
            s,
            "closed connection from %s: its partial request holds %zu bytes of "
            "input, more than the memory cap of %llu bytes leaves beside %llu bytes "
            "of stored data",
            peer, victim->in_cap, (unsigned long long)s->max_bytes, (unsigned long long)s->memory);
        victim->shed_bytes = victim->in_cap;
        s->shed_bytes += victim->in_cap;
        ctrun_store__doom(victim);
        n++;
    }
    return n;
}

void ctrun_store__flush_dirty(ctrun_store_t *s)
{
    /* A resumed connection parses its buffered input and may come back onto the list with
     * new output; the loop runs until no connection has anything left to send, and no input
     * buffer is left over the memory cap. */
    do {
        while (s->dirty != NULL) {
            ctrun_store__conn_t *c = s->dirty;
            s->dirty = c->dnext;
            c->dirty = false;
            c->dnext = NULL;
            if (c->doomed) {
                ctrun_store__conn_close(c);
            } else {
                ctrun_store__flush(c);
                ctrun_store__maybe_resume(c);
            }
        }
    } while (ctrun_store__shed_input(s) > 0);
}

/* ---- input ------------------------------------------------------------------------------ */

void ctrun_store__drop(ctrun_store__conn_t *c, const char *fmt, ...)
{
    if (c->closing)
        return;
    char msg[384], peer[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ctrun_store__peer(c, peer, sizeof peer);
    ctrun_store__log_conn(c->s, "closed connection from %s: %s", peer, msg);
    c->s->st.dropped++;
    ctrun_store__conn_close(c);
}

int ctrun_store__in_reserve(ctrun_store__conn_t *c, size_t want)
{
    ctrun_store_t *s = c->s;
    if (want <= c->in_cap)
        return 0;
    size_t ncap = c->in_cap ? c->in_cap : 4096;
    while (ncap < want)
        ncap *= 2;
    /* The last step to the size the parser needs for the whole message takes just that: a
     * half-sent 8 MiB value holds (and is charged) 8 MiB, not 16. */
    if (want == c->need)
        ncap = want;
    size_t extra = ncap - c->in_cap;
    if (s->memory + ctrun_store__buffered(s) + extra > s->max_bytes)
        return CT_ELIMIT;
    uint8_t *nb = realloc(c->in, ncap);
    if (nb == NULL)
        return -ENOMEM;
    c->in = nb;
    c->in_cap = ncap;
    s->st.buffered_bytes += extra;
    return 0;
}

static void ctrun_store__in_shrink(ctrun_store__conn_t *c)
{
    if (c->in_len == 0 && c->in_cap > 0 && !c->closing) {
        c->s->st.buffered_bytes -= c->in_cap;
        free(c->in);
        c->in = NULL;
        c->in_cap = 0;
    }
}

static void ctrun_store__on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void ctrun_store__on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

static void ctrun_store__pause(ctrun_store__conn_t *c)
{
    c->paused = true;
    if (!c->is_virtual)
        uv_read_stop((uv_stream_t *)&c->tcp);
}

/* Parses and handles every complete message in data; keeps the rest in c->in. */
static void ctrun_store__process_input(ctrun_store__conn_t *c, const uint8_t *data, size_t len,
                                       bool shared)
{
    size_t off = 0;
    while (!c->closing && !c->doomed && !c->paused && off < len && len - off >= c->need) {
        ssize_t n = ctrun_store__step(c, data + off, len - off);
        if (n <= 0)
            break;
        off += (size_t)n;
        c->need = 0;
        c->cursor = (ct_store_cursor_t){0};
        if (ctrun_store__pending(c) > CTRUN_STORE__HIGH_WATER)
            ctrun_store__pause(c);
    }
    if (c->closing)
        return;
    size_t rest = len - off;
    if (shared) {
        if (rest > 0) {
            int rc = ctrun_store__in_reserve(c, rest);
            if (rc != 0) {
                ctrun_store__drop(c,
                                  "no room to buffer a partial request (store memory cap of %llu "
                                  "bytes)",
                                  (unsigned long long)c->s->max_bytes);
                return;
            }
            memcpy(c->in, data + off, rest);
        }
        c->in_len = rest;
    } else {
        if (off > 0 && rest > 0)
            memmove(c->in, c->in + off, rest);
        c->in_len = rest;
        ctrun_store__in_shrink(c);
    }
}

void ctrun_store__process(ctrun_store__conn_t *c, const uint8_t *data, size_t len, bool shared)
{
    bool was = c->parsing;
    c->parsing = true;
    ctrun_store__process_input(c, data, len, shared);
    c->parsing = was;
}

static void ctrun_store__resume(ctrun_store__conn_t *c)
{
    c->paused = false;
    if (c->in_len > 0)
        ctrun_store__process(c, c->in, c->in_len, false);
    if (!c->closing && !c->paused && !c->is_virtual)
        uv_read_start((uv_stream_t *)&c->tcp, ctrun_store__on_alloc, ctrun_store__on_read);
}

/* The in-flight write has completed (status 0) or failed: the one place where a write ends,
 * for network connections (ctrun_store__on_write) and test connections alike. */
void ctrun_store__write_done(ctrun_store__conn_t *c, int status)
{
    ctrun_store_t *s = c->s;
    c->writing = false;
    c->inflight = 0;
    c->woff = 0;
    if (c->closing)
        return;
    if (status < 0) {
        ctrun_store__conn_close(c);
        ctrun_store__flush_dirty(s);
        return;
    }
    if (c->wbuf_cap > 256 * 1024) {
        free(c->wbuf);
        c->wbuf = NULL;
        c->wbuf_cap = 0;
    }
    ctrun_store__flush(c);
    ctrun_store__maybe_resume(c);
    ctrun_store__flush_dirty(s);
}

static void ctrun_store__on_write(uv_write_t *req, int status)
{
    ctrun_store__write_done(req->data, status);
}

static void ctrun_store__on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    ctrun_store__conn_t *c = h->data;
    ctrun_store_t *s = c->s;
    (void)suggested;
    if (c->in_len == 0) {
        *buf = uv_buf_init((char *)s->rbuf, CTRUN_STORE__READ_CHUNK);
        return;
    }
    /* A partial request: read into its own buffer, growing geometrically towards the size the
     * parser said it needs (never beyond the message limit, which the parser enforces). */
    size_t want = c->in_len + CTRUN_STORE__READ_CHUNK;
    if (c->need > want) {
        size_t twice = c->in_cap * 2;
        want = c->need < twice ? c->need : twice;
        if (want < c->in_len + CTRUN_STORE__READ_CHUNK)
            want = c->in_len + CTRUN_STORE__READ_CHUNK;
    }
    if (ctrun_store__in_reserve(c, want) != 0) {
        c->oom = true;
        *buf = uv_buf_init(NULL, 0);
        return;
    }
    *buf = uv_buf_init((char *)c->in + c->in_len, (unsigned)(c->in_cap - c->in_len));
}

static void ctrun_store__on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    ctrun_store__conn_t *c = st->data;
    ctrun_store_t *s = c->s;
    if (nread == 0 || c->closing)
        return;
    if (nread < 0) {
        if (nread == UV_ENOBUFS || c->oom)
            ctrun_store__drop(
                c, "no room to buffer a partial request (store memory cap of %llu bytes)",
                (unsigned long long)s->max_bytes);
        else
            ctrun_store__conn_close(c); /* EOF or reset: a client going away is normal */
        ctrun_store__flush_dirty(s);
        return;
    }
    if (buf->base == (char *)s->rbuf) {
        ctrun_store__process(c, s->rbuf, (size_t)nread, true);
    } else {
        c->in_len += (size_t)nread;
        ctrun_store__process(c, c->in, c->in_len, false);
    }
    ctrun_store__flush_dirty(s);
}

/* ---- connections ------------------------------------------------------------------------ */

void ctrun_store__conn_free(ctrun_store__conn_t *c)
{
    free(c->in);
    free(c->out);
    free(c->wbuf);
    free(c->vsock);
    free(c);
}

static void ctrun_store__on_conn_closed(uv_handle_t *h)
{
    ctrun_store__conn_t *c = h->data;
    ctrun_store_t *s = c->s;
    ctrun_store__conn_free(c);
    s->open_handles--;
    ctrun_store__maybe_finish(s);
}

void ctrun_store__conn_close(ctrun_store__conn_t *c)
{
    if (c->closing)
        return;
    ctrun_store_t *s = c->s;
    c->closing = true;
    /* Its input buffer stops counting against the cap now; the memory goes with the handle
     * (the request being handled may still point into it). */
    s->st.buffered_bytes -= c->in_cap;
    s->shed_bytes -= c->shed_bytes;
    c->shed_bytes = 0;
    ctrun_store__drop_waits(c);
    while (c->kwatches != NULL)
        ctrun_store__kwatch_free(s, c->kwatches);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->st.connections--;
    if (!c->is_virtual)
        uv_close((uv_handle_t *)&c->tcp, ctrun_store__on_conn_closed);
    /* The last client of a lingering store is gone: close on the next loop turn (not here,
     * inside a read or write callback of the connection being closed). */
    if (s->lingering && !s->closing && s->st.connections == 0)
        uv_timer_start(&s->linger_timer, s->linger_timer.timer_cb, 0, 0);
}

ctrun_store__conn_t *ctrun_store__conn_new(ctrun_store_t *s)
{
    ctrun_store__conn_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->s = s;
    c->state = s->token != NULL ? CTRUN_STORE__AUTH_HELLO : CTRUN_STORE__DETECT;
    c->opened_ms = uv_now(s->loop);
    c->tcp.data = c;
    return c;
}

void ctrun_store__conn_link(ctrun_store_t *s, ctrun_store__conn_t *c)
{
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->st.connections++;
    s->st.accepted++;
}

/* Takes an accepted socket on as a connection. */
void ctrun_store__accepted(ctrun_store_t *s, int fd)
{
    ctrun_store__conn_t *c = ctrun_store__conn_new(s);
    if (c == NULL || uv_tcp_init(s->loop, &c->tcp) != 0) {
        ctrun_store__log_conn(s, "out of memory accepting a connection");
        free(c);
        close(fd);
        return;
    }
    s->open_handles++;
    c->tcp.data = c;
    if (uv_tcp_open(&c->tcp, fd) != 0) {
        close(fd);
        uv_close((uv_handle_t *)&c->tcp, ctrun_store__on_conn_closed);
        return;
    }
    ctrun_store__conn_link(s, c);
    if (s->st.connections > s->max_connections) {
        s->st.refused++;
        s->st.accepted--;
        char peer[96];
        ctrun_store__peer(c, peer, sizeof peer);
        ctrun_store__log_conn(s, "refused connection from %s: %llu connections is the maximum",
                              peer, (unsigned long long)s->max_connections);
        ctrun_store__conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    if (uv_read_start((uv_stream_t *)&c->tcp, ctrun_store__on_alloc, ctrun_store__on_read) != 0)
        ctrun_store__conn_close(c);
}
