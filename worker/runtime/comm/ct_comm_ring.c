/*
 * ct_comm_ring.c - the CPU ring communicator: W processes joined in a ring of TCP connections
 * (rank r sends to r + 1 and receives from r - 1, mod W), with allreduce (reduce-scatter then
 * allgather), broadcast, allgather and barrier streamed through it in chunks.
 *
 * Owns: the listening socket and the address it is published under in the store, the
 * connections and their hello (namespace fingerprint, world size, rank: a stray connection -
 * a port scanner, a leftover of an earlier attempt - is turned away and the real peer still
 * accepted), and the transfer engine. The summation order is documented in ctworker.h
 * (section 7); the loops that add live in ct_comm_ring_sum.c.
 *
 * The engine. Every collective is, for this rank, one outgoing byte stream to the right and
 * one incoming stream from the left, each a 32-byte header (kind, dtype, op, root, world,
 * sequence number, size: the receiver checks it against its own call) then a list of phases,
 * each a byte range of the caller's buffer. The outgoing phase p carries what the incoming
 * phase p - shift delivered (shift 1 for allreduce and allgather, 0 for a forwarding
 * broadcast), so a byte may leave as soon as it has arrived and, for a reduction, been added
 * in: the reduction works in chunks (256 KiB by default), received into a staging buffer and
 * then added, so the pipeline never holds more than one chunk of scratch. Sockets are
 * non-blocking; the loop sends and receives until both would block, then polls both with the
 * call's deadline. An EOF or reset on either connection is CT_EPEER; so is a right neighbour
 * that closes while this rank still has bytes for it. Where the data lands in place (a
 * forwarded copy) no byte is overwritten before it was sent on: the data for a range can only
 * come back around the ring after this rank sent its own contribution to that range.
 *
 * What it does not do: multiple rings or trees (one ring is bandwidth-optimal for large
 * buffers; small ones pay W - 1 hops of latency), reconnection after a failure (the
 * communicator is aborted; the job restarts), encryption or authentication beyond the
 * namespace check (the ring trusts the network the store trusts).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ct_addr.h"
#include "ct_comm_internal.h"
#include "ct_log.h"
#include "ct_time.h"

#define CT__RING_HELLO_MAGIC 0x48525443u /* "CTRH" little-endian */
#define CT__RING_ACK_MAGIC   0x41525443u /* "CTRA" */
#define CT__RING_COLL_MAGIC  0x43525443u /* "CTRC" */
#define CT__RING_VERSION     1u
#define CT__RING_MSG         32 /* hello, ack and collective header are all 32 bytes */
#define CT__RING_CHUNK       ((size_t)256 << 10)
#define CT__RING_SOCKBUF     (4 << 20)
#define CT__RING_STRAY_MS    5000 /* how long an accepted connection may take to say hello */
#define CT__RING_BURST       4    /* transfers one way before turning to the other */

enum { CT__K_ALLREDUCE = 1, CT__K_BROADCAST = 2, CT__K_ALLGATHER = 3, CT__K_BARRIER = 4 };

typedef struct ct_comm_ring__ring {
    int left_fd, right_fd; /* receive from the left neighbour, send to the right one */
    int left, right;       /* their ranks */
    size_t chunk;          /* reduction chunk, a multiple of 8 bytes */
    uint8_t *stage;        /* chunk bytes of scratch */
    char left_addr[CT_HOST_MAX + 8], right_addr[CT_HOST_MAX + 8];
} ct_comm_ring__ring_t;

/* ---- little-endian wire helpers ------------------------------------------------------------ */

static void ct_comm_ring__put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void ct_comm_ring__put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t ct_comm_ring__get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t ct_comm_ring__get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* ---- a collective as phases ---------------------------------------------------------------- */

typedef struct ct_comm_ring__plan {
    int kind;
    int rank, world;
    uint8_t *buf;   /* allreduce/broadcast: the buffer; allgather: the receive buffer */
    size_t esize;   /* allreduce: element size; otherwise 1 */
    uint64_t count; /* allreduce: elements; broadcast: bytes; allgather: bytes per rank */
    ct_dtype_t dtype;
    ct_comm_op_t op;
    int root;
    uint64_t seq;
    int nsend, nrecv; /* phases */
    int shift;        /* outgoing phase p carries incoming phase p - shift */
} ct_comm_ring__plan_t;

static int ct_comm_ring__mod(long long a, int w)
{
    long long m = a % w;
    return (int)(m < 0 ? m + w : m);
}

/* Segment k of an allreduce of n elements over w ranks: [*off, *off + *len) in elements. */
static void ct_comm_ring__segment(uint64_t n, int w, int k, uint64_t *off, uint64_t *len)
{
    uint64_t base = n / (uint64_t)w, rem = n % (uint64_t)w;
    *len = base + ((uint64_t)k < rem ? 1 : 0);
    *off = (uint64_t)k * base + ((uint64_t)k < rem ? (uint64_t)k : rem);
}

/* The byte range of outgoing (send = true) or incoming phase p; *reduce for incoming ranges
 * that are added rather than copied. */
static void ct_comm_ring__phase(const ct_comm_ring__plan_t *pl, bool send, int p, size_t *off,
                                size_t *len, bool *reduce)
{
    const int r = pl->rank, w = pl->world;
    int blk = 0;
    *reduce = false;
    switch (pl->kind) {
    case CT__K_ALLREDUCE: {
        if (p <= w - 2) { /* reduce-scatter */
            blk = send ? ct_comm_ring__mod((long long)r - p, w)
                       : ct_comm_ring__mod((long long)r - p - 1, w);
            *reduce = !send;
        } else { /* allgather */
            int q = p - (w - 1);
            blk = send ? ct_comm_ring__mod((long long)r + 1 - q, w)
                       : ct_comm_ring__mod((long long)r - q, w);
        }
        uint64_t eo, el;
        ct_comm_ring__segment(pl->count, w, blk, &eo, &el);
        *off = (size_t)(eo * pl->esize);
        *len = (size_t)(el * pl->esize);
        return;
    }
    case CT__K_ALLGATHER:
    case CT__K_BARRIER:
        blk = send ? ct_comm_ring__mod((long long)r - p, w)
                   : ct_comm_ring__mod((long long)r - p - 1, w);
        *off = (size_t)((uint64_t)blk * pl->count);
        *len = (size_t)pl->count;
        return;
    default: /* broadcast: one phase, the whole buffer */
        *off = 0;
        *len = (size_t)pl->count;
        return;
    }
}

static const char *ct_comm_ring__kind_name(int kind)
{
    switch (kind) {
    case CT__K_ALLREDUCE:
        return "allreduce";
    case CT__K_BROADCAST:
        return "broadcast";
    case CT__K_ALLGATHER:
        return "allgather";
    case CT__K_BARRIER:
        return "barrier";
    }
    return "an unknown collective";
}

static void ct_comm_ring__encode_header(const ct_comm_ring__plan_t *pl, uint8_t *h)
{
    memset(h, 0, CT__RING_MSG);
    ct_comm_ring__put32(h, CT__RING_COLL_MAGIC);
    h[4] = (uint8_t)pl->kind;
    h[5] = (uint8_t)(pl->kind == CT__K_ALLREDUCE ? pl->dtype : 0);
    h[6] = (uint8_t)(pl->kind == CT__K_ALLREDUCE ? pl->op : 0);
    h[7] = (uint8_t)CT__RING_VERSION;
    ct_comm_ring__put32(h + 8, (uint32_t)(pl->kind == CT__K_BROADCAST ? pl->root : 0));
    ct_comm_ring__put32(h + 12, (uint32_t)pl->world);
    ct_comm_ring__put64(h + 16, pl->seq);
    ct_comm_ring__put64(h + 24, pl->count);
}

/* "allreduce of 10 F32 (sum), #3" - one side of a mismatch message. */
static void ct_comm_ring__describe(char *buf, size_t size, int kind, int dtype, int op, int root,
                                   uint64_t count, uint64_t seq)
{
    switch (kind) {
    case CT__K_ALLREDUCE:
        snprintf(buf, size, "allreduce of %llu %s (%s), #%llu", (unsigned long long)count,
                 ct_dtype_name((ct_dtype_t)dtype), op == CT_COMM_AVG ? "avg" : "sum",
                 (unsigned long long)seq);
        break;
    case CT__K_BROADCAST:
        snprintf(buf, size, "broadcast of %llu bytes from rank %d, #%llu",
                 (unsigned long long)count, root, (unsigned long long)seq);
        break;
    case CT__K_ALLGATHER:
        snprintf(buf, size, "allgather of %llu bytes per rank, #%llu", (unsigned long long)count,
                 (unsigned long long)seq);
        break;
    default:
        snprintf(buf, size, "%s, #%llu", ct_comm_ring__kind_name(kind), (unsigned long long)seq);
    }
}

static int ct_comm_ring__check_header(const ct_comm_ring__plan_t *pl,
                                      const ct_comm_ring__ring_t *ring, const uint8_t *got,
                                      ct_errbuf_t *eb)
{
    uint8_t want[CT__RING_MSG];
    ct_comm_ring__encode_header(pl, want);
    if (memcmp(got, want, CT__RING_MSG) == 0)
        return 0;
    if (ct_comm_ring__get32(got) != CT__RING_COLL_MAGIC || got[7] != CT__RING_VERSION)
        return ct_errbuf_set(eb, CT_EPROTOCOL,
                             "rank %d (%s) sent bytes that are not a collective header (magic "
                             "0x%08x, version %u)",
                             ring->left, ring->left_addr, ct_comm_ring__get32(got), got[7]);
    char a[128], b[128];
    ct_comm_ring__describe(a, sizeof a, got[4], got[5], got[6], (int)ct_comm_ring__get32(got + 8),
                           ct_comm_ring__get64(got + 24), ct_comm_ring__get64(got + 16));
    ct_comm_ring__describe(b, sizeof b, pl->kind, pl->dtype, pl->op, pl->root, pl->count, pl->seq);
    return ct_errbuf_set(eb, CT_EPROTOCOL,
                         "collective mismatch: rank %d called %s while this rank called %s",
                         ring->left, a, b);
}

/* ---- the engine ---------------------------------------------------------------------------- */

typedef struct ct_comm_ring__xfer {
    const ct_comm_ring__plan_t *pl;
    ct_comm_ring__ring_t *ring;
    uint8_t shdr[CT__RING_MSG], rhdr[CT__RING_MSG];
    size_t shdr_done, rhdr_done;
    int sp;       /* outgoing phase */
    size_t so;    /* bytes of it sent */
    int rp;       /* incoming phase */
    size_t ro;    /* bytes of it received */
    size_t rdone; /* bytes of it received and added in (what may be forwarded) */
} ct_comm_ring__xfer_t;

static bool ct_comm_ring__send_pending(const ct_comm_ring__xfer_t *x)
{
    return x->pl->nsend > 0 && (x->shdr_done < CT__RING_MSG || x->sp < x->pl->nsend);
}

static bool ct_comm_ring__recv_pending(const ct_comm_ring__xfer_t *x)
{
    return x->pl->nrecv > 0 && (x->rhdr_done < CT__RING_MSG || x->rp < x->pl->nrecv);
}

/* Skips empty phases (segments of a short allreduce). */
static void ct_comm_ring__skip_empty(ct_comm_ring__xfer_t *x)
{
    size_t off, len;
    bool red;
    while (x->sp < x->pl->nsend) {
        ct_comm_ring__phase(x->pl, true, x->sp, &off, &len, &red);
        if (len > 0)
            break;
        x->sp++;
    }
    while (x->rp < x->pl->nrecv) {
        ct_comm_ring__phase(x->pl, false, x->rp, &off, &len, &red);
        if (len > 0)
            break;
        x->rp++;
    }
}

/* How many bytes of the current outgoing phase may be sent now. */
static size_t ct_comm_ring__send_limit(const ct_comm_ring__xfer_t *x, size_t len)
{
    int sp = x->sp;
    if (sp < x->pl->shift)
        return len; /* this rank's own data */
    int q = sp - x->pl->shift;
    if (x->rp > q)
        return len;
    if (x->rp == q && x->rhdr_done == CT__RING_MSG)
        return x->rdone;
    return 0;
}

static int ct_comm_ring__peer_closed(const ct_comm_ring__ring_t *ring, bool left, int err,
                                     ct_errbuf_t *eb)
{
    int peer = left ? ring->left : ring->right;
    const char *addr = left ? ring->left_addr : ring->right_addr;
    const char *side = left ? "left" : "right";
    if (err == 0)
        return ct_errbuf_set(eb, CT_EPEER,
                             "rank %d (the %s neighbour, %s) closed the connection: it exited, "
                             "or failed and gave up",
                             peer, side, addr);
    if (err == ECONNRESET || err == EPIPE)
        return ct_errbuf_set(eb, CT_EPEER,
                             "rank %d (the %s neighbour, %s) reset the connection: it exited, "
                             "or failed and gave up",
                             peer, side, addr);
    return ct_errbuf_set(eb, CT_EPEER, "connection to rank %d (the %s neighbour, %s): %s", peer,
                         side, addr, strerror(err));
}

/* Receives what is available. Returns 1 when bytes moved, 0 when it would block, < 0 on
 * error. */
static int ct_comm_ring__recv_some(ct_comm_ring__xfer_t *x, ct_errbuf_t *eb)
{
    const ct_comm_ring__plan_t *pl = x->pl;
    ct_comm_ring__ring_t *ring = x->ring;
    uint8_t *dst;
    size_t want;
    size_t off = 0, len = 0, cstart = 0, cend = 0;
    bool red = false;
    if (x->rhdr_done < CT__RING_MSG) {
        dst = x->rhdr + x->rhdr_done;
        want = CT__RING_MSG - x->rhdr_done;
    } else {
        ct_comm_ring__phase(pl, false, x->rp, &off, &len, &red);
        if (red) {
            cstart = x->ro / ring->chunk * ring->chunk;
            cend = cstart + ring->chunk < len ? cstart + ring->chunk : len;
            dst = ring->stage + (x->ro - cstart);
            want = cend - x->ro;
        } else {
            dst = pl->buf + off + x->ro;
            want = len - x->ro;
        }
    }
    ssize_t n = recv(ring->left_fd, dst, want, MSG_DONTWAIT);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return 0;
        return ct_comm_ring__peer_closed(ring, true, errno, eb);
    }
    if (n == 0)
        return ct_comm_ring__peer_closed(ring, true, 0, eb);
    if (x->rhdr_done < CT__RING_MSG) {
        x->rhdr_done += (size_t)n;
        if (x->rhdr_done == CT__RING_MSG) {
            int rc = ct_comm_ring__check_header(pl, ring, x->rhdr, eb);
            if (rc != 0)
                return rc;
            ct_comm_ring__skip_empty(x);
        }
        return 1;
    }
    x->ro += (size_t)n;
    if (red) {
        if (x->ro == cend) {
            uint8_t *acc = pl->buf + off + cstart;
            size_t ne = (cend - cstart) / pl->esize;
            switch (pl->dtype) {
            case CT_DTYPE_F64:
                ct__comm_sum_f64((double *)acc, (const double *)ring->stage, ne);
                break;
            case CT_DTYPE_BF16:
                ct__comm_sum_bf16((uint16_t *)acc, (const uint16_t *)ring->stage, ne);
                break;
            default:
                ct__comm_sum_f32((float *)acc, (const float *)ring->stage, ne);
                break;
            }
            x->rdone = x->ro;
        }
    } else {
        x->rdone = x->ro;
    }
    if (x->ro == len) {
        x->rp++;
        x->ro = x->rdone = 0;
        ct_comm_ring__skip_empty(x);
    }
    return 1;
}

/* Sends what may be sent. Returns 1 when bytes moved, 0 when it would block or nothing is
 * ready, < 0 on error. */
static int ct_comm_ring__send_some(ct_comm_ring__xfer_t *x, ct_errbuf_t *eb)
{
    const ct_comm_ring__plan_t *pl = x->pl;
    ct_comm_ring__ring_t *ring = x->ring;
    const uint8_t *src;
    size_t avail;
    size_t off = 0, len = 0;
    bool red;
    if (x->shdr_done < CT__RING_MSG) {
        src = x->shdr + x->shdr_done;
        avail = CT__RING_MSG - x->shdr_done;
    } else {
        ct_comm_ring__phase(pl, true, x->sp, &off, &len, &red);
        size_t lim = ct_comm_ring__send_limit(x, len);
        if (lim <= x->so)
            return 0;
        src = pl->buf + off + x->so;
        avail = lim - x->so;
    }
    ssize_t n = send(ring->right_fd, src, avail, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return 0;
        return ct_comm_ring__peer_closed(ring, false, errno, eb);
    }
    if (x->shdr_done < CT__RING_MSG) {
        x->shdr_done += (size_t)n;
        if (x->shdr_done == CT__RING_MSG)
            ct_comm_ring__skip_empty(x);
        return 1;
    }
    x->so += (size_t)n;
    if (x->so == len) {
        x->sp++;
        x->so = 0;
        ct_comm_ring__skip_empty(x);
    }
    return 1;
}

/* The right neighbour sends nothing during a collective; readable means it closed (or broke
 * the protocol). */
static int ct_comm_ring__check_right(ct_comm_ring__ring_t *ring, ct_errbuf_t *eb)
{
    uint8_t b;
    ssize_t n = recv(ring->right_fd, &b, 1, MSG_DONTWAIT | MSG_PEEK);
    if (n == 0)
        return ct_comm_ring__peer_closed(ring, false, 0, eb);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return 0;
        return ct_comm_ring__peer_closed(ring, false, errno, eb);
    }
    return ct_errbuf_set(eb, CT_EPROTOCOL,
                         "rank %d (the right neighbour, %s) sent unexpected bytes", ring->right,
                         ring->right_addr);
}

static int ct_comm_ring__run(ct_comm_t *c, ct_comm_ring__plan_t *pl, int64_t deadline,
                             ct_errbuf_t *eb)
{
    ct_comm_ring__ring_t *ring = c->impl;
    pl->rank = c->rank;
    pl->world = c->world;
    pl->seq = c->seq;
    ct_comm_ring__xfer_t x = {.pl = pl, .ring = ring};
    ct_comm_ring__encode_header(pl, x.shdr);
    if (pl->nsend == 0)
        x.shdr_done = CT__RING_MSG;
    if (pl->nrecv == 0)
        x.rhdr_done = CT__RING_MSG;
    for (;;) {
        bool sp = ct_comm_ring__send_pending(&x), rp = ct_comm_ring__recv_pending(&x);
        if (!sp && !rp)
            return 0;
        if (ct_deadline_passed(deadline))
            return ct_errbuf_set(
                eb, -ETIMEDOUT, "not complete after %lld ms (still %s)", (long long)c->timeout_ms,
                rp ? "receiving from the left neighbour" : "sending to the right one");
        /* Move what can move before polling - a collective that streams never sleeps - a few
         * transfers each way at a time, so that receiving does not starve forwarding. */
        int moved = 0, rc;
        for (int k = 0; k < CT__RING_BURST && ct_comm_ring__recv_pending(&x); k++) {
            if ((rc = ct_comm_ring__recv_some(&x, eb)) < 0)
                return rc;
            if (rc == 0)
                break;
            moved = 1;
        }
        for (int k = 0; k < CT__RING_BURST && ct_comm_ring__send_pending(&x); k++) {
            if ((rc = ct_comm_ring__send_some(&x, eb)) < 0)
                return rc;
            if (rc == 0)
                break;
            moved = 1;
        }
        if (moved)
            continue;
        sp = ct_comm_ring__send_pending(&x);
        rp = ct_comm_ring__recv_pending(&x);
        bool can_send = false;
        if (sp) {
            if (x.shdr_done < CT__RING_MSG) {
                can_send = true;
            } else {
                size_t off, len;
                bool red;
                ct_comm_ring__phase(pl, true, x.sp, &off, &len, &red);
                can_send = ct_comm_ring__send_limit(&x, len) > x.so;
            }
        }
        struct pollfd pf[2] = {
            {.fd = rp ? ring->left_fd : -1, .events = POLLIN},
            {.fd = sp ? ring->right_fd : -1, .events = (short)(POLLIN | (can_send ? POLLOUT : 0))},
        };
        int n = poll(pf, 2, ct_deadline_poll_ms(deadline));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return ct_errbuf_set(eb, -errno, "poll: %s", strerror(errno));
        }
        if (n == 0) {
            if (rp && !can_send)
                return ct_errbuf_set(eb, -ETIMEDOUT,
                                     "timed out after %lld ms waiting for data from rank %d (%s)",
                                     (long long)c->timeout_ms, ring->left, ring->left_addr);
            return ct_errbuf_set(eb, -ETIMEDOUT,
                                 "timed out after %lld ms: rank %d (%s) does not take the data "
                                 "this rank sends it",
                                 (long long)c->timeout_ms, ring->right, ring->right_addr);
        }
        if (sp && (pf[1].revents & (POLLIN | POLLERR | POLLHUP)) &&
            (rc = ct_comm_ring__check_right(ring, eb)) != 0)
            return rc;
    }
}

/* ---- collectives --------------------------------------------------------------------------- */

static int ct_comm_ring__ring_allreduce(ct_comm_t *c, void *buf, int64_t count, ct_dtype_t dtype,
                                        ct_comm_op_t op, int64_t deadline, ct_errbuf_t *eb)
{
    const int w = c->world;
    if (w > 1) {
        ct_comm_ring__plan_t pl = {.kind = CT__K_ALLREDUCE,
                                   .buf = buf,
                                   .esize = ct_dtype_size(dtype),
                                   .count = (uint64_t)count,
                                   .dtype = dtype,
                                   .op = op,
                                   .nsend = 2 * (w - 1),
                                   .nrecv = 2 * (w - 1),
                                   .shift = 1};
        int rc = ct_comm_ring__run(c, &pl, deadline, eb);
        if (rc != 0)
            return rc;
    }
    if (op == CT_COMM_AVG && w > 1) {
        switch (dtype) {
        case CT_DTYPE_F64:
            ct__comm_div_f64(buf, (size_t)count, w);
            break;
        case CT_DTYPE_BF16:
            ct__comm_div_bf16(buf, (size_t)count, w);
            break;
        default:
            ct__comm_div_f32(buf, (size_t)count, w);
            break;
        }
    }
    return 0;
}

static int ct_comm_ring__ring_broadcast(ct_comm_t *c, void *buf, size_t nbytes, int root,
                                        int64_t deadline, ct_errbuf_t *eb)
{
    const int w = c->world, r = c->rank;
    if (w == 1)
        return 0;
    bool last = ct_comm_ring__mod((long long)root - 1, w) == r; /* receives, forwards nothing */
    ct_comm_ring__plan_t pl = {.kind = CT__K_BROADCAST,
                               .buf = buf,
                               .esize = 1,
                               .count = nbytes,
                               .root = root,
                               .nsend = last ? 0 : 1,
                               .nrecv = r == root ? 0 : 1,
                               .shift = r == root ? 1 : 0};
    return ct_comm_ring__run(c, &pl, deadline, eb);
}

static int ct_comm_ring__ring_allgather(ct_comm_t *c, const void *sendbuf, void *recvbuf,
                                        size_t nbytes, int64_t deadline, ct_errbuf_t *eb)
{
    const int w = c->world;
    uint8_t *mine = (uint8_t *)recvbuf + (size_t)c->rank * nbytes;
    if (nbytes > 0 && mine != sendbuf)
        memmove(mine, sendbuf, nbytes);
    if (w == 1)
        return 0;
    ct_comm_ring__plan_t pl = {.kind = CT__K_ALLGATHER,
                               .buf = recvbuf,
                               .esize = 1,
                               .count = nbytes,
                               .nsend = w - 1,
                               .nrecv = w - 1,
                               .shift = 1};
    return ct_comm_ring__run(c, &pl, deadline, eb);
}

/* An allgather of one byte per rank: this rank can only finish once every rank's byte came
 * around, that is once every rank has entered. */
static int ct_comm_ring__ring_barrier(ct_comm_t *c, int64_t deadline, ct_errbuf_t *eb)
{
    const int w = c->world;
    if (w == 1)
        return 0;
    uint8_t small[64];
    uint8_t *bytes = (size_t)w <= sizeof small ? small : calloc((size_t)w, 1);
    if (bytes == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    bytes[c->rank] = 1;
    ct_comm_ring__plan_t pl = {.kind = CT__K_BARRIER,
                               .buf = bytes,
                               .esize = 1,
                               .count = 1,
                               .nsend = w - 1,
                               .nrecv = w - 1,
                               .shift = 1};
    int rc = ct_comm_ring__run(c, &pl, deadline, eb);
    if (bytes != small)
        free(bytes);
    return rc;
}

static void ct_comm_ring__close_fd(int *fd)
{
    if (*fd >= 0) {
        shutdown(*fd, SHUT_RDWR);
        close(*fd);
        *fd = -1;
    }
}

static void ct_comm_ring__ring_abort(ct_comm_t *c)
{
    ct_comm_ring__ring_t *ring = c->impl;
    ct_comm_ring__close_fd(&ring->left_fd);
    ct_comm_ring__close_fd(&ring->right_fd);
}

static void ct_comm_ring__ring_destroy(ct_comm_t *c)
{
    ct_comm_ring__ring_t *ring = c->impl;
    if (ring == NULL)
        return;
    /* A plain close: after a completed collective nothing is left unread, so the peers see
     * an orderly end of stream, never a reset. */
    if (ring->left_fd >= 0)
        close(ring->left_fd);
    if (ring->right_fd >= 0)
        close(ring->right_fd);
    free(ring->stage);
    free(ring);
    c->impl = NULL;
}

static const ct__comm_ops_t ct_comm_ring__ring_ops = {
    .allreduce = ct_comm_ring__ring_allreduce,
    .broadcast = ct_comm_ring__ring_broadcast,
    .allgather = ct_comm_ring__ring_allgather,
    .barrier = ct_comm_ring__ring_barrier,
    .abort = ct_comm_ring__ring_abort,
    .destroy = ct_comm_ring__ring_destroy,
};

/* ---- set-up: addresses, connections, hello ------------------------------------------------- */

typedef struct ct_comm_ring__addr {
    struct sockaddr_storage ss;
    socklen_t len;
} ct_comm_ring__addr_t;

/* IPv4-mapped IPv6 (what a dual-stack store connection reports) as plain IPv4. */
static void ct_comm_ring__unmap(ct_comm_ring__addr_t *a)
{
    if (a->ss.ss_family != AF_INET6)
        return;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&a->ss;
    if (!IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))
        return;
    struct sockaddr_in s4 = {.sin_family = AF_INET, .sin_port = s6->sin6_port};
    memcpy(&s4.sin_addr, &s6->sin6_addr.s6_addr[12], 4);
    memset(&a->ss, 0, sizeof a->ss);
    memcpy(&a->ss, &s4, sizeof s4);
    a->len = sizeof s4;
}

static bool ct_comm_ring__is_loopback(const ct_comm_ring__addr_t *a)
{
    if (a->ss.ss_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)&a->ss;
        return (ntohl(s4->sin_addr.s_addr) >> 24) == 127;
    }
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&a->ss;
    return IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr);
}

/* "host:port" (IPv6 bracketed, zone kept) of a socket address. */
static int ct_comm_ring__format(const ct_comm_ring__addr_t *a, char *buf, size_t size,
                                ct_errbuf_t *eb)
{
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    int g = getnameinfo((const struct sockaddr *)&a->ss, a->len, host, sizeof host, serv,
                        sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV);
    if (g != 0)
        return ct_errbuf_set(eb, -EINVAL, "cannot format an address: %s", gai_strerror(g));
    int n = a->ss.ss_family == AF_INET6 ? snprintf(buf, size, "[%s]:%s", host, serv)
                                        : snprintf(buf, size, "%s:%s", host, serv);
    if (n < 0 || (size_t)n >= size)
        return ct_errbuf_set(eb, -ENAMETOOLONG, "address %s too long", host);
    return 0;
}

/* Resolves a numeric or named host (and port) to one socket address. */
static int ct_comm_ring__resolve(const char *host, int port, bool passive,
                                 ct_comm_ring__addr_t *out, ct_errbuf_t *eb)
{
    char serv[16];
    snprintf(serv, sizeof serv, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0)};
    struct addrinfo *res = NULL;
    int g = getaddrinfo(host, serv, &hints, &res);
    if (g != 0 || res == NULL)
        return ct_errbuf_set(eb, -EHOSTUNREACH, "cannot resolve \"%s\": %s", host,
                             g != 0 ? gai_strerror(g) : "no address");
    memset(out, 0, sizeof *out);
    memcpy(&out->ss, res->ai_addr, res->ai_addrlen);
    out->len = res->ai_addrlen;
    freeaddrinfo(res);
    ct_comm_ring__unmap(out);
    return 0;
}

static void ct_comm_ring__tune(int fd, int sockbuf)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (sockbuf > 0) {
        /* Before connect / listen, so the window scale is negotiated for it. The kernel caps
         * it at net.core.[rw]mem_max; that is fine. */
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sockbuf, sizeof sockbuf);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sockbuf, sizeof sockbuf);
    }
}

/* Waits until fd is ready for events or the deadline passes: 0, -ETIMEDOUT or -errno. */
static int ct_comm_ring__wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        struct pollfd pf = {.fd = fd, .events = events};
        int n = poll(&pf, 1, ct_deadline_poll_ms(deadline));
        if (n > 0)
            return 0;
        if (n == 0)
            return -ETIMEDOUT;
        if (errno != EINTR)
            return -errno;
    }
}

/* Exactly n bytes, blocking in poll until the deadline: 0, -ETIMEDOUT, CT_EPEER or -errno. */
static int ct_comm_ring__io_full(int fd, void *buf, size_t n, bool out, int64_t deadline)
{
    size_t done = 0;
    while (done < n) {
        ssize_t k = out ? send(fd, (uint8_t *)buf + done, n - done, MSG_DONTWAIT | MSG_NOSIGNAL)
                        : recv(fd, (uint8_t *)buf + done, n - done, MSG_DONTWAIT);
        if (k > 0) {
            done += (size_t)k;
            continue;
        }
        if (k == 0)
            return CT_EPEER;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return errno == ECONNRESET || errno == EPIPE ? CT_EPEER : -errno;
        int rc = ct_comm_ring__wait_fd(fd, out ? POLLOUT : POLLIN, deadline);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static void ct_comm_ring__encode_hello(uint8_t *m, uint32_t magic, int world, int rank, uint64_t ns)
{
    memset(m, 0, CT__RING_MSG);
    ct_comm_ring__put32(m, magic);
    ct_comm_ring__put32(m + 4, CT__RING_VERSION);
    ct_comm_ring__put32(m + 8, (uint32_t)world);
    ct_comm_ring__put32(m + 12, (uint32_t)rank);
    ct_comm_ring__put64(m + 16, ns);
}

/* Checks a hello or ack; the reason for a refusal goes into why. */
static bool ct_comm_ring__check_hello(const uint8_t *m, uint32_t magic, int world, int rank,
                                      uint64_t ns, char *why, size_t size)
{
    if (ct_comm_ring__get32(m) != magic || ct_comm_ring__get32(m + 4) != CT__RING_VERSION) {
        snprintf(why, size, "not a ctworker ring peer (magic 0x%08x, version %u)",
                 ct_comm_ring__get32(m), ct_comm_ring__get32(m + 4));
        return false;
    }
    if (ct_comm_ring__get64(m + 16) != ns) {
        snprintf(why, size, "a peer of another run or attempt (namespace 0x%016llx)",
                 (unsigned long long)ct_comm_ring__get64(m + 16));
        return false;
    }
    if ((int)ct_comm_ring__get32(m + 8) != world || (int)ct_comm_ring__get32(m + 12) != rank) {
        snprintf(why, size, "rank %u of %u, expected rank %d of %d", ct_comm_ring__get32(m + 12),
                 ct_comm_ring__get32(m + 8), rank, world);
        return false;
    }
    return true;
}

/* The address this rank listens on: cfg->listen_addr, or the local end of the store
 * connection (the interface that reaches MASTER_ADDR). */
static int ct_comm_ring__listen_addr(const ct__comm_cfg_t *cfg, ct_comm_ring__addr_t *a,
                                     ct_errbuf_t *eb)
{
    if (cfg->listen_addr != NULL && cfg->listen_addr[0] != '\0') {
        int rc = ct_comm_ring__resolve(cfg->listen_addr, 0, true, a, eb);
        return rc == 0 ? 0 : ct_errbuf_wrap(eb, rc, "CTRUN_COMM_ADDR");
    }
    if (cfg->store == NULL || cfg->store->fd < 0)
        return ct_errbuf_set(eb, CT_ESTATE,
                             "no store connection to take this rank's address from (set "
                             "CTRUN_COMM_ADDR)");
    memset(a, 0, sizeof *a);
    a->len = sizeof a->ss;
    if (getsockname(cfg->store->fd, (struct sockaddr *)&a->ss, &a->len) != 0)
        return ct_errbuf_set(eb, -errno, "getsockname of the store connection: %s",
                             strerror(errno));
    ct_comm_ring__unmap(a);
    if (ct_comm_ring__is_loopback(a) && cfg->local_world_size < cfg->world_size)
        return ct_errbuf_set(eb, CT_ESTATE,
                             "this rank reaches the store at %s through a loopback address, "
                             "which the other nodes of this job (WORLD_SIZE=%d, "
                             "LOCAL_WORLD_SIZE=%d) cannot reach; set MASTER_ADDR to an address "
                             "of the store host on the network the nodes share, or "
                             "CTRUN_COMM_ADDR to this host's address there",
                             cfg->store->host, cfg->world_size, cfg->local_world_size);
    if (a->ss.ss_family == AF_INET)
        ((struct sockaddr_in *)&a->ss)->sin_port = 0;
    else
        ((struct sockaddr_in6 *)&a->ss)->sin6_port = 0;
    return 0;
}

static int ct_comm_ring__listen(const ct__comm_cfg_t *cfg, int *fd_out, char *pub, size_t pub_size,
                                ct_errbuf_t *eb)
{
    ct_comm_ring__addr_t a;
    int rc = ct_comm_ring__listen_addr(cfg, &a, eb);
    if (rc != 0)
        return rc;
    int fd = socket(a.ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return ct_errbuf_set(eb, -errno, "socket: %s", strerror(errno));
    ct_comm_ring__tune(fd, cfg->sockbuf);
    if (bind(fd, (struct sockaddr *)&a.ss, a.len) != 0 || listen(fd, 64) != 0) {
        rc = -errno;
        char txt[CT_HOST_MAX + 8] = "?";
        ct_comm_ring__format(&a, txt, sizeof txt, NULL);
        close(fd);
        return ct_errbuf_set(eb, rc, "cannot listen on %s: %s", txt, strerror(-rc));
    }
    ct_comm_ring__addr_t bound = {.len = sizeof bound.ss};
    if (getsockname(fd, (struct sockaddr *)&bound.ss, &bound.len) != 0) {
        rc = ct_errbuf_set(eb, -errno, "getsockname of the ring listener: %s", strerror(errno));
        close(fd);
        return rc;
    }
    ct_comm_ring__unmap(&bound);
    if ((rc = ct_comm_ring__format(&bound, pub, pub_size, eb)) != 0) {
        close(fd);
        return rc;
    }
    *fd_out = fd;
    return 0;
}

/* Connects to the right neighbour at text ("host:port") and sends the hello. */
static int ct_comm_ring__connect_right(const ct__comm_cfg_t *cfg, ct_comm_ring__ring_t *ring,
                                       const char *text, uint64_t ns, int64_t deadline,
                                       ct_errbuf_t *eb)
{
    ct_hostport_t hp;
    int rc = ct_hostport_parse(text, -1, false, &hp, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, rc, "address of rank %d in the store", ring->right);
    ct_comm_ring__addr_t a;
    if ((rc = ct_comm_ring__resolve(hp.host, hp.port, false, &a, eb)) != 0)
        return ct_errbuf_wrap(eb, rc, "address of rank %d", ring->right);
    int fd = socket(a.ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return ct_errbuf_set(eb, -errno, "socket: %s", strerror(errno));
    ct_comm_ring__tune(fd, cfg->sockbuf);
    if (connect(fd, (struct sockaddr *)&a.ss, a.len) != 0) {
        rc = errno == EINPROGRESS ? ct_comm_ring__wait_fd(fd, POLLOUT, deadline) : -errno;
        if (rc == 0) {
            int err = 0;
            socklen_t len = sizeof err;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
            rc = -err;
        }
        if (rc != 0) {
            close(fd);
            return ct_errbuf_set(eb, rc, "cannot connect to rank %d at %s: %s", ring->right, text,
                                 ct_strerror(rc));
        }
    }
    uint8_t m[CT__RING_MSG];
    ct_comm_ring__encode_hello(m, CT__RING_HELLO_MAGIC, cfg->world_size, cfg->rank, ns);
    if ((rc = ct_comm_ring__io_full(fd, m, sizeof m, true, deadline)) != 0) {
        close(fd);
        return ct_errbuf_set(eb, rc, "sending the hello to rank %d at %s: %s", ring->right, text,
                             ct_strerror(rc));
    }
    ring->right_fd = fd;
    return 0;
}

/* Accepts connections until the left neighbour's hello arrives; strays are closed. */
static int ct_comm_ring__accept_left(const ct__comm_cfg_t *cfg, ct_comm_ring__ring_t *ring, int lfd,
                                     uint64_t ns, int64_t deadline, ct_errbuf_t *eb)
{
    for (;;) {
        int rc = ct_comm_ring__wait_fd(lfd, POLLIN, deadline);
        if (rc == -ETIMEDOUT)
            return ct_errbuf_set(eb, -ETIMEDOUT,
                                 "rank %d (the left neighbour) did not connect within %lld ms",
                                 ring->left, (long long)cfg->timeout_ms);
        if (rc != 0)
            return ct_errbuf_set(eb, rc, "waiting for rank %d: %s", ring->left, ct_strerror(rc));
        ct_comm_ring__addr_t peer = {.len = sizeof peer.ss};
        int fd = accept4(lfd, (struct sockaddr *)&peer.ss, &peer.len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
                continue;
            return ct_errbuf_set(eb, -errno, "accept: %s", strerror(errno));
        }
        ct_comm_ring__unmap(&peer);
        char who[CT_HOST_MAX + 8] = "?";
        ct_comm_ring__format(&peer, who, sizeof who, NULL);
        /* A stray that connects and stays silent may hold us for a while, not for ever. */
        int64_t hello_deadline = ct_time_ms() + CT__RING_STRAY_MS;
        if (hello_deadline > deadline)
            hello_deadline = deadline;
        uint8_t m[CT__RING_MSG];
        char why[160];
        rc = ct_comm_ring__io_full(fd, m, sizeof m, false, hello_deadline);
        if (rc != 0) {
            ct_log_warn("ring: connection from %s said no hello (%s); closed", who,
                        ct_strerror(rc));
            close(fd);
            continue;
        }
        if (!ct_comm_ring__check_hello(m, CT__RING_HELLO_MAGIC, cfg->world_size, ring->left, ns,
                                       why, sizeof why)) {
            ct_log_warn("ring: turned away a connection from %s: %s", who, why);
            close(fd);
            continue;
        }
        ct_comm_ring__encode_hello(m, CT__RING_ACK_MAGIC, cfg->world_size, cfg->rank, ns);
        if ((rc = ct_comm_ring__io_full(fd, m, sizeof m, true, deadline)) != 0) {
            close(fd);
            return ct_errbuf_set(eb, rc, "answering rank %d at %s: %s", ring->left, who,
                                 ct_strerror(rc));
        }
        ct_comm_ring__tune(fd, 0);
        snprintf(ring->left_addr, sizeof ring->left_addr, "%s", who);
        ring->left_fd = fd;
        return 0;
    }
}

/* What is left of the deadline, as a store timeout (at least 1 ms: 0 would mean the default). */
static int64_t ct_comm_ring__left_ms(int64_t deadline)
{
    int64_t left = ct_deadline_left_ms(deadline);
    return left > 0 ? left : 1;
}

static int ct_comm_ring__ring_connect(const ct__comm_cfg_t *cfg, ct_comm_ring__ring_t *ring,
                                      ct_errbuf_t *eb)
{
    const int64_t deadline = ct_deadline_after_ms(cfg->timeout_ms);
    const uint64_t ns = ct__comm_fingerprint(cfg->key_prefix);
    ct_store_client_t *st = cfg->store;
    if (st == NULL)
        return ct_errbuf_set(eb, CT_ESTATE, "the CPU ring of %d ranks needs the store",
                             cfg->world_size);
    char pub[CT_HOST_MAX + 8];
    int lfd = -1;
    int rc = ct_comm_ring__listen(cfg, &lfd, pub, sizeof pub, eb);
    if (rc != 0)
        return rc;

    char key[CT_WORKER_KEY_PREFIX_MAX + 32];
    snprintf(key, sizeof key, "%sring/%d", cfg->key_prefix, cfg->rank);
    /* The store requests share the set-up's deadline. */
    int64_t saved = st->timeout_ms;
    ct_store_client_set_timeout(st, ct_comm_ring__left_ms(deadline));
    rc = ct_store_set(st, key, pub, strlen(pub), eb);
    if (rc != 0) {
        ct_errbuf_wrap(eb, rc, "publishing this rank's ring address %s", pub);
        goto out;
    }
    /* Look the right neighbour up and connect. A refused connection means the address is not
     * (or no longer) a listener: a key left by an earlier job in the same namespace (the same
     * run id and attempt on a store that outlived it) that the neighbour has not overwritten
     * yet. Read the key again and retry until the deadline. */
    snprintf(key, sizeof key, "%sring/%d", cfg->key_prefix, ring->right);
    for (int attempt = 1;; attempt++) {
        ct_store_client_set_timeout(st, ct_comm_ring__left_ms(deadline));
        ct_store_bytes_t v;
        rc = ct_store_get(st, key, &v, eb);
        if (rc != 0) {
            ct_errbuf_wrap(eb, rc, "waiting for rank %d's ring address (store key \"%s\")",
                           ring->right, key);
            goto out;
        }
        if (v.len == 0 || v.len >= sizeof ring->right_addr) {
            rc = ct_errbuf_set(eb, CT_EPROTOCOL, "store key \"%s\" holds %zu bytes, not an address",
                               key, v.len);
            goto out;
        }
        memcpy(ring->right_addr, v.data, v.len);
        ring->right_addr[v.len] = '\0';
        ct_log_debug("ring: listening on %s; right neighbour rank %d at %s (attempt %d)", pub,
                     ring->right, ring->right_addr, attempt);
        rc = ct_comm_ring__connect_right(cfg, ring, ring->right_addr, ns, deadline, eb);
        if (rc != -ECONNREFUSED || ct_deadline_passed(deadline))
            break;
        ct_sleep_ms(attempt < 10 ? 20 * attempt : 200);
    }
    if (rc == -ECONNREFUSED)
        ct_errbuf_set(eb, rc,
                      "rank %d's address in the store, %s, refused connections until the "
                      "deadline (a stale key: did rank %d die, or does another job use the same "
                      "TORCHELASTIC_RUN_ID and attempt on this store?)",
                      ring->right, ring->right_addr, ring->right);
    if (rc != 0)
        goto out;

    if ((rc = ct_comm_ring__accept_left(cfg, ring, lfd, ns, deadline, eb)) != 0)
        goto out;
    uint8_t m[CT__RING_MSG];
    char why[160];
    rc = ct_comm_ring__io_full(ring->right_fd, m, sizeof m, false, deadline);
    if (rc != 0) {
        ct_errbuf_set(eb, rc, "no answer from rank %d at %s: %s", ring->right, ring->right_addr,
                      ct_strerror(rc));
        goto out;
    }
    if (!ct_comm_ring__check_hello(m, CT__RING_ACK_MAGIC, cfg->world_size, ring->right, ns, why,
                                   sizeof why)) {
        rc = ct_errbuf_set(eb, CT_EPROTOCOL, "the process at %s is not rank %d of this job: %s",
                           ring->right_addr, ring->right, why);
        goto out;
    }
out:
    ct_store_client_set_timeout(st, saved);
    close(lfd);
    return rc;
}

int ct__comm_ring_create(ct_comm_t **out, const ct__comm_cfg_t *cfg, ct_errbuf_t *eb)
{
    *out = NULL;
    ct_comm_ring__ring_t *ring = calloc(1, sizeof *ring);
    if (ring == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    ring->left_fd = ring->right_fd = -1;
    ring->left = ct_comm_ring__mod((long long)cfg->rank - 1, cfg->world_size);
    ring->right = ct_comm_ring__mod((long long)cfg->rank + 1, cfg->world_size);
    size_t chunk = cfg->chunk_bytes ? cfg->chunk_bytes : CT__RING_CHUNK;
    ring->chunk = chunk < 8 ? 8 : chunk / 8 * 8; /* whole elements of every dtype */
    snprintf(ring->left_addr, sizeof ring->left_addr, "?");
    snprintf(ring->right_addr, sizeof ring->right_addr, "?");
    ct_comm_t *c = NULL;
    int rc = ct__comm_alloc(&c, &ct_comm_ring__ring_ops, CT_COMM_CPU, cfg, ring, eb);
    if (rc != 0) {
        free(ring);
        return rc;
    }
    if (cfg->world_size > 1) {
        ct__comm_cfg_t tuned = *cfg;
        if (tuned.sockbuf == 0)
            tuned.sockbuf = CT__RING_SOCKBUF;
        ring->stage = malloc(ring->chunk);
        if (ring->stage == NULL)
            rc = ct_errbuf_set(eb, -ENOMEM, "out of memory");
        else
            rc = ct_comm_ring__ring_connect(&tuned, ring, eb);
        if (rc != 0) {
            ct__comm_destroy(c);
            return rc;
        }
    }
    *out = c;
    return 0;
}
