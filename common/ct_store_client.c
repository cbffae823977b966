/*
 * ct_store_client.c - the blocking store client of ct_store_client.h.
 *
 * The socket stays non-blocking for its whole life and every wait is a poll(2) bounded by the
 * current request's deadline, which is how "never a hang past the deadline" holds even for a
 * server that stops answering mid-reply. Requests are encoded and replies decoded only through
 * ct_store_codec.h.
 */
#include "ct_store_client.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ct_log.h"
#include "ct_store_auth.h"
#include "ct_time.h"

#define CT__BACKOFF_INITIAL_MS 500
#define CT__BACKOFF_MAX_MS     60000
#define CT__CANCEL_GRACE_MS    30000

/* ---- small helpers -------------------------------------------------------------------- */

static uint64_t ct_store_client__rand(ct_store_client_t *c)
{
    /* xorshift64*: jitter only needs to decorrelate clients, not to be unpredictable. */
    uint64_t x = c->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    c->rng = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static int64_t ct_store_client__deadline(int64_t timeout_ms)
{
    return ct_deadline_after_ms(timeout_ms);
}

static void ct_store_client__drop(ct_store_client_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->rpos = c->rlen = 0;
}

static int ct_store_client__reserve(uint8_t **buf, size_t *cap, size_t want, ct_errbuf_t *eb)
{
    if (want <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : 4096;
    while (ncap < want)
        ncap *= 2;
    uint8_t *nb = realloc(*buf, ncap);
    if (nb == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for a %zu-byte store buffer", ncap);
    *buf = nb;
    *cap = ncap;
    return 0;
}

/* Waits for events on fd (or only for the deadline when fd < 0) until the deadline, or until
 * the client's cancel fd becomes readable. 0: ready; -ETIMEDOUT; -ECANCELED; -errno. */
static int ct_store_client__poll(const ct_store_client_t *c, int fd, short events, int64_t deadline)
{
    for (;;) {
        struct pollfd p[2] = {{.fd = fd, .events = events}, {.fd = c->cancel_fd, .events = POLLIN}};
        /* poll ignores negative fds, so the slots of an absent socket or cancel fd are inert. */
        int rc = poll(p, 2, ct_deadline_poll_ms(deadline));
        if (rc > 0 && p[1].revents != 0)
            return -ECANCELED;
        if (rc > 0)
            return 0; /* errors and hang-ups surface in the following send/recv */
        if (rc == 0)
            return -ETIMEDOUT;
        if (errno != EINTR)
            return -errno;
    }
}

static int ct_store_client__send_all(ct_store_client_t *c, const void *buf, size_t n,
                                     int64_t deadline, const char *what, ct_errbuf_t *eb)
{
    const uint8_t *p = buf;
    while (n > 0) {
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int rc = ct_store_client__poll(c, c->fd, POLLOUT, deadline);
            if (rc == -ETIMEDOUT)
                return ct_errbuf_set(eb, -ETIMEDOUT, "%s: timed out sending to %s:%d", what,
                                     c->host, c->port);
            if (rc < 0)
                return ct_errbuf_set(eb, rc, "%s: poll: %s", what, ct_strerror(rc));
            continue;
        }
        int err = w < 0 ? errno : EPIPE;
        if (err == EPIPE || err == ECONNRESET)
            return ct_errbuf_set(eb, CT_EPEER, "%s: %s:%d closed the connection (%s)", what,
                                 c->host, c->port, strerror(err));
        return ct_errbuf_set(eb, -err, "%s: send to %s:%d: %s", what, c->host, c->port,
                             strerror(err));
    }
    return 0;
}

/* Makes at least `need` bytes available from rpos, reading at least once if they are not yet
 * there. */
static int ct_store_client__fill(ct_store_client_t *c, size_t need, int64_t deadline,
                                 const char *what, ct_errbuf_t *eb)
{
    if (c->rpos > 0 && c->rpos == c->rlen) {
        c->rpos = c->rlen = 0;
    } else if (c->rpos > 0 && c->rpos + need > c->rcap) {
        memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
        c->rlen -= c->rpos;
        c->rpos = 0;
    }
    int rc = ct_store_client__reserve(&c->rbuf, &c->rcap, c->rpos + need, eb);
    if (rc != 0)
        return rc;
    for (;;) {
        ssize_t r = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, 0);
        if (r > 0) {
            c->rlen += (size_t)r;
            return 0;
        }
        if (r == 0)
            return ct_errbuf_set(eb, CT_EPEER,
                                 "%s: %s:%d closed the connection (a store closes connections "
                                 "that send malformed or oversized requests, or ADD to a "
                                 "non-numeric value)",
                                 what, c->host, c->port);
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            rc = ct_store_client__poll(c, c->fd, POLLIN, deadline);
            if (rc == -ETIMEDOUT)
                return ct_errbuf_set(eb, -ETIMEDOUT, "%s: no reply from %s:%d before the deadline",
                                     what, c->host, c->port);
            if (rc < 0)
                return ct_errbuf_set(eb, rc, "%s: poll: %s", what, ct_strerror(rc));
            continue;
        }
        if (errno == ECONNRESET)
            return ct_errbuf_set(eb, CT_EPEER, "%s: %s:%d reset the connection", what, c->host,
                                 c->port);
        return ct_errbuf_set(eb, -errno, "%s: recv from %s:%d: %s", what, c->host, c->port,
                             strerror(errno));
    }
}

static int ct_store_client__recv_resp(ct_store_client_t *c, ct_store_op_t op, uint64_t nkeys,
                                      ct_store_resp_t *resp, int64_t deadline, ct_errbuf_t *eb)
{
    ct_store_cursor_t cur = {0};
    for (;;) {
        size_t need = 0;
        ssize_t n = ct_store_decode_response(op, nkeys, c->rbuf + c->rpos, c->rlen - c->rpos,
                                             &c->limits, resp, &cur, &need, eb);
        if (n > 0) {
            c->rpos += (size_t)n;
            return 0;
        }
        if (n < 0)
            return ct_errbuf_wrap(eb, (int)n, "reply from %s:%d", c->host, c->port);
        int rc = ct_store_client__fill(c, need, deadline, ct_store_op_name(op), eb);
        if (rc != 0)
            return rc;
    }
}

/* Reads exactly n raw bytes (authentication messages). */
static int ct_store_client__recv_exact(ct_store_client_t *c, uint8_t *out, size_t n,
                                       int64_t deadline, const char *what, ct_errbuf_t *eb)
{
    while (c->rlen - c->rpos < n) {
        int rc = ct_store_client__fill(c, n, deadline, what, eb);
        if (rc != 0)
            return rc;
    }
    memcpy(out, c->rbuf + c->rpos, n);
    c->rpos += n;
    return 0;
}

/* ---- connecting ----------------------------------------------------------------------- */

static bool ct_store_client__retryable(int rc)
{
    switch (rc) {
    case -ECONNREFUSED:
    case -ECONNRESET:
    case -ETIMEDOUT:
    case -EHOSTUNREACH:
    case -ENETUNREACH:
    case -EADDRNOTAVAIL:
    case -EAGAIN:
    case CT_EPEER:
        return true;
    default:
        return false;
    }
}

/* One TCP connection attempt to one address. */
static int ct_store_client__connect_addr(const ct_store_client_t *c, const struct addrinfo *ai,
                                         int64_t deadline, int *fd_out)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0)
        return -errno;
    int rc = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
            rc = -errno;
            close(fd);
            return rc;
        }
        rc = ct_store_client__poll(c, fd, POLLOUT, deadline);
        if (rc == 0) {
            int err = 0;
            socklen_t len = sizeof err;
            if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
                err = errno;
            rc = -err;
        }
        if (rc != 0) {
            close(fd);
            return rc;
        }
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    *fd_out = fd;
    return 0;
}

/* Resolves and tries every address, IPv6 (with v4-mapped addresses) first, then IPv4. */
static int ct_store_client__connect_tcp(ct_store_client_t *c, int64_t deadline, ct_errbuf_t *eb)
{
    char port[16];
    snprintf(port, sizeof port, "%d", c->port);
    int last = -ECONNREFUSED;
    bool resolved = false;
    static const int families[2] = {AF_INET6, AF_INET};
    for (int f = 0; f < 2; f++) {
        struct addrinfo hints = {
            .ai_family = families[f], .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
        if (families[f] == AF_INET6)
            hints.ai_flags |= AI_V4MAPPED | AI_ALL;
        struct addrinfo *res = NULL;
        int gai = getaddrinfo(c->host, port, &hints, &res);
        if (gai != 0)
            continue;
        resolved = true;
        for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
            int fd = -1;
            int rc = ct_store_client__connect_addr(c, ai, deadline, &fd);
            if (rc == 0) {
                freeaddrinfo(res);
                c->fd = fd;
                return 0;
            }
            /* A family the kernel lacks (IPv6 disabled) says nothing about the server. */
            if (rc != -EAFNOSUPPORT && rc != -EPROTONOSUPPORT)
                last = rc;
        }
        freeaddrinfo(res);
    }
    if (!resolved)
        return ct_errbuf_set(eb, -EHOSTUNREACH, "cannot resolve \"%s\"", c->host);
    return ct_errbuf_set(eb, last, "connect to %s:%d: %s", c->host, c->port, ct_strerror(last));
}

static int ct_store_client__authenticate(ct_store_client_t *c, int64_t deadline, ct_errbuf_t *eb)
{
    uint8_t cn[CT_STORE_AUTH_NONCE_LEN], sn[CT_STORE_AUTH_NONCE_LEN];
    uint8_t msg[CT_STORE_AUTH_HELLO_LEN], mac[CT_STORE_AUTH_MAC_LEN], want[CT_STORE_AUTH_MAC_LEN];
    int rc = ct_store_auth_nonce(cn, eb);
    if (rc != 0)
        return rc;
    size_t n = ct_store_encode_auth_hello(cn, msg);
    rc = ct_store_client__send_all(c, msg, n, deadline, "authentication", eb);
    if (rc != 0)
        return rc;
    rc = ct_store_client__recv_exact(c, msg, CT_STORE_AUTH_HELLO_LEN, deadline, "authentication",
                                     eb);
    if (rc == CT_EPEER)
        return ct_errbuf_set(eb, CT_EAUTH,
                             "%s:%d closed the connection after the authentication hello: it "
                             "has no token configured, or is not a ctrun store",
                             c->host, c->port);
    if (rc != 0)
        return rc;
    if (ct_store_decode_auth_hello(msg, sizeof msg, sn, eb) <= 0)
        return ct_errbuf_wrap(eb, CT_EAUTH, "challenge from %s:%d", c->host, c->port);
    rc = ct_store_auth_mac(c->token, c->token_len, false, cn, sn, mac, eb);
    if (rc != 0)
        return rc;
    n = ct_store_encode_auth_mac(CT_STORE_AUTH_PROOF, mac, msg);
    rc = ct_store_client__send_all(c, msg, n, deadline, "authentication", eb);
    if (rc != 0)
        return rc;
    rc = ct_store_client__recv_exact(c, msg, CT_STORE_AUTH_PROOF_LEN, deadline, "authentication",
                                     eb);
    if (rc == CT_EPEER)
        return ct_errbuf_set(eb, CT_EAUTH, "%s:%d rejected the store token", c->host, c->port);
    if (rc != 0)
        return rc;
    if (ct_store_decode_auth_mac(CT_STORE_AUTH_ACCEPT, msg, CT_STORE_AUTH_PROOF_LEN, mac, eb) <= 0)
        return ct_errbuf_wrap(eb, CT_EAUTH, "reply from %s:%d", c->host, c->port);
    rc = ct_store_auth_mac(c->token, c->token_len, true, cn, sn, want, eb);
    if (rc != 0)
        return rc;
    if (!ct_store_auth_mac_equal(mac, want))
        return ct_errbuf_set(eb, CT_EAUTH, "%s:%d does not know the store token", c->host, c->port);
    return 0;
}

/* ---- what is at the other end ------------------------------------------------------- */

static void ct_store_client__progress(ct_store_client_t *c, ct_store_client_phase_t phase)
{
    if (c->progress == NULL)
        return;
    __atomic_store_n(&c->progress->since_ms, ct_time_ms(), __ATOMIC_RELAXED);
    __atomic_store_n(&c->progress->phase, (int)phase, __ATOMIC_RELEASE);
}

/* Up to max bytes of p as a quoted one-line excerpt: printable ASCII kept, the rest escaped,
 * cut at the first line break. */
static void ct_store_client__excerpt(const uint8_t *p, size_t n, size_t max, char *out, size_t cap)
{
    size_t o = 0;
    out[o++] = '"';
    for (size_t i = 0; i < n && i < max && o + 6 < cap; i++) {
        if (p[i] == '\r' || p[i] == '\n')
            break;
        if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '"' && p[i] != '\\')
            out[o++] = (char)p[i];
        else
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", p[i]);
    }
    if (o + 2 <= cap)
        out[o++] = '"';
    out[o < cap ? o : cap - 1] = '\0';
}

/* What the first bytes a peer sent in answer to the store handshake say about it: "it
 * answered like an HTTP server: ..." and so on. True when they are recognisably not a store's
 * (text, or a known protocol); false for unrecognised binary, still described in out. */
static bool ct_store_client__describe_answer(const uint8_t *p, size_t n, char *out, size_t cap)
{
    char ex[96];
    ct_store_client__excerpt(p, n, 60, ex, sizeof ex);
    if (n >= 5 && memcmp(p, "HTTP/", 5) == 0) {
        snprintf(out, cap, "it answered like an HTTP server: %s", ex);
        return true;
    }
    if (n >= 4 && memcmp(p, "SSH-", 4) == 0) {
        snprintf(out, cap, "it answered like an SSH server: %s", ex);
        return true;
    }
    if (n >= 3 && (p[0] == 0x15 || p[0] == 0x16) && p[1] == 0x03 && p[2] <= 0x04) {
        snprintf(out, cap, "it answered like a TLS server");
        return true;
    }
    size_t text = 0, look = n < 16 ? n : 16;
    for (size_t i = 0; i < look; i++)
        text += (p[i] >= 0x20 && p[i] < 0x7f) || p[i] == '\r' || p[i] == '\n' || p[i] == '\t';
    if (look >= 4 && text == look) {
        snprintf(out, cap, "it answered with text: %s", ex);
        return true;
    }
    int o = snprintf(out, cap, "it answered with the bytes");
    for (size_t i = 0; i < n && i < 8 && o > 0 && (size_t)o < cap; i++)
        o += snprintf(out + o, cap - (size_t)o, " %02x", p[i]);
    return false;
}

/* ---- connecting (continued) ---------------------------------------------------------- */

static int ct_store_client__handshake_steps(ct_store_client_t *c, int64_t deadline, ct_errbuf_t *eb)
{
    int rc;
    if (c->token != NULL && (rc = ct_store_client__authenticate(c, deadline, eb)) != 0)
        return rc;
    if (c->dialect != CT_STORE_V2)
        return 0;
    /* VALIDATE and PING go out in one write; the server parses them one after the other. */
    uint8_t msg[16];
    ct_store_req_t req = {.op = CT_STORE_OP_VALIDATE, .num32 = CT_STORE_VALIDATE_MAGIC};
    ssize_t n = ct_store_encode_request(CT_STORE_V2, &req, msg, sizeof msg, NULL);
    if (!c->no_ping) {
        c->ping_nonce = (uint32_t)ct_store_client__rand(c);
        ct_store_req_t ping = {.op = CT_STORE_OP_PING, .num32 = c->ping_nonce};
        n += ct_store_encode_request(CT_STORE_V2, &ping, msg + n, sizeof msg - (size_t)n, NULL);
    }
    rc = ct_store_client__send_all(c, msg, (size_t)n, deadline, "handshake", eb);
    if (rc != 0 || c->no_ping)
        return rc;
    ct_store_resp_t resp;
    rc = ct_store_client__recv_resp(c, CT_STORE_OP_PING, 0, &resp, deadline, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, rc,
                              "v2 handshake (a PyTorch 1.13 or 2.0 store needs the v1 dialect; "
                              "one of PyTorch 2.2-2.4 does not answer PING)");
    if (resp.num32 != c->ping_nonce)
        return ct_errbuf_set(eb, CT_EPROTOCOL, "ping to %s:%d returned 0x%08x, expected 0x%08x",
                             c->host, c->port, resp.num32, c->ping_nonce);
    return 0;
}

/*
 * Authentication (with a token) and the v2 handshake, on a fresh connection, within
 * handshake_timeout_ms. Sets *final when the failure says what the peer is rather than that it
 * is not there yet: retrying would only repeat it. Silence counts as an answer when the
 * handshake had its full time: its own deadline, or the whole connect deadline on the first
 * attempt (a later attempt cut short by the connect deadline proves nothing).
 */
static int ct_store_client__handshake(ct_store_client_t *c, int64_t deadline, bool first,
                                      bool *final, ct_errbuf_t *eb)
{
    *final = false;
    int64_t start = ct_time_ms();
    int64_t hs_deadline = deadline;
    if (c->handshake_timeout_ms > 0) {
        int64_t d = ct_deadline_after_ms(c->handshake_timeout_ms);
        if (d < deadline)
            hs_deadline = d;
    }
    ct_store_client__progress(c, CT_STORE_PHASE_HANDSHAKE);
    int rc = ct_store_client__handshake_steps(c, hs_deadline, eb);
    if (rc == 0)
        return 0;
    /* The bytes received so far on this connection are all at the start of rbuf. */
    const uint8_t *got = c->rbuf;
    size_t ngot = c->rlen;
    char what[160];
    bool full_wait = ct_deadline_passed(hs_deadline) && (hs_deadline < deadline || first);
    if (rc == -ETIMEDOUT && ngot == 0 && full_wait) {
        *final = true;
        return ct_errbuf_set(eb, -ETIMEDOUT,
                             "no answer from %s:%d in %.1f s: it accepted the connection but "
                             "never answered the store handshake",
                             c->host, c->port, (double)(ct_time_ms() - start) / 1000.0);
    }
    if (ngot > 0 && (rc == CT_EPROTOCOL || rc == CT_EAUTH || rc == -ETIMEDOUT || rc == CT_EPEER)) {
        /* A ping answered with the wrong nonce is never a store's, nor is a short answer and
         * then silence; other failures are when the bytes are recognisably something else. */
        bool foreign = ct_store_client__describe_answer(got, ngot, what, sizeof what);
        bool bad_ping = rc == CT_EPROTOCOL && c->token == NULL && c->dialect == CT_STORE_V2;
        bool stalled = rc == -ETIMEDOUT && full_wait;
        if (foreign || bad_ping || stalled) {
            *final = true;
            return ct_errbuf_set(eb, CT_EPROTOCOL, "%s:%d is not a ctrun/PyTorch store (%s)",
                                 c->host, c->port, what);
        }
    }
    return rc;
}

/* Connects with backoff until deadline; the error of the last attempt explains a timeout. */
static int ct_store_client__connect_loop(ct_store_client_t *c, int64_t deadline, ct_errbuf_t *eb)
{
    int64_t start = ct_time_ms();
    double interval = CT__BACKOFF_INITIAL_MS;
    ct_errbuf_t last;
    snprintf(last.msg, sizeof last.msg, "no attempt was made");
    for (int attempt = 1;; attempt++) {
        ct_errbuf_clear(&last);
        ct_store_client__progress(c, CT_STORE_PHASE_CONNECTING);
        bool final = false;
        int rc = ct_store_client__connect_tcp(c, deadline, &last);
        if (rc == 0) {
            rc = ct_store_client__handshake(c, deadline, attempt == 1, &final, &last);
            if (rc != 0)
                ct_store_client__drop(c);
        }
        if (rc == 0) {
            ct_store_client__progress(c, CT_STORE_PHASE_READY);
            return 0;
        }
        if (final) {
            ct_store_client__progress(c, CT_STORE_PHASE_IDLE);
            return ct_errbuf_set(eb, rc, "%s", last.msg);
        }
        if (!ct_store_client__retryable(rc) || ct_deadline_passed(deadline)) {
            ct_store_client__progress(c, CT_STORE_PHASE_IDLE);
            if (rc == -ETIMEDOUT || ct_deadline_passed(deadline))
                return ct_errbuf_set(eb, -ETIMEDOUT,
                                     "store %s:%d not reachable after %lld ms and %d attempts; "
                                     "last error: %s",
                                     c->host, c->port, (long long)(ct_time_ms() - start), attempt,
                                     last.msg);
            return ct_errbuf_set(eb, rc, "%s", last.msg);
        }
        ct_store_client__progress(c, CT_STORE_PHASE_CONNECTING);
        /* ExponentialBackoffWithJitter: the interval +-50 %, then x1.5 up to 60 s. */
        double jitter = 0.5 + (double)(ct_store_client__rand(c) >> 11) / (double)(1ULL << 53);
        int64_t sleep_ms = (int64_t)(interval * jitter);
        int64_t left = ct_deadline_left_ms(deadline);
        if (sleep_ms > left)
            sleep_ms = left;
        ct_log_debug("store %s:%d: attempt %d failed (%s); retrying in %lld ms", c->host, c->port,
                     attempt, last.msg, (long long)sleep_ms);
        if (ct_store_client__poll(c, -1, 0, ct_deadline_after_ms(sleep_ms)) == -ECANCELED) {
            ct_store_client__progress(c, CT_STORE_PHASE_IDLE);
            return ct_errbuf_set(eb, -ECANCELED, "connecting to store %s:%d: canceled", c->host,
                                 c->port);
        }
        interval *= 1.5;
        if (interval > (double)c->backoff_max_ms)
            interval = (double)c->backoff_max_ms;
    }
}

int ct_store_client_connect(ct_store_client_t *c, const char *host, int port,
                            const ct_store_client_opts_t *opts, ct_errbuf_t *eb)
{
    static const ct_store_client_opts_t defaults = {0};
    if (opts == NULL)
        opts = &defaults;
    memset(c, 0, sizeof *c);
    c->fd = -1;
    c->cancel_fd = -1;
    c->initialized = true;
    if (host == NULL || host[0] == '\0' || strlen(host) >= sizeof c->host)
        return ct_errbuf_set(eb, CT_EPARSE, "store host \"%s\" is empty or too long",
                             host ? host : "");
    if (port <= 0 || port > 65535)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "store port %d out of range (1..65535)", port);
    snprintf(c->host, sizeof c->host, "%s", host);
    c->port = port;
    c->dialect = opts->dialect ? opts->dialect : CT_STORE_V2;
    if (c->dialect != CT_STORE_V1 && c->dialect != CT_STORE_V2)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "unknown store dialect %d", (int)c->dialect);
    c->timeout_ms = opts->timeout_ms == 0 ? CT_STORE_DEFAULT_TIMEOUT_MS : opts->timeout_ms;
    c->cancel_grace_ms = opts->cancel_grace_ms > 0 ? opts->cancel_grace_ms : CT__CANCEL_GRACE_MS;
    c->no_ping = opts->no_ping;
    c->cancel_fd = opts->cancel_fd > 0 ? opts->cancel_fd : -1;
    c->backoff_max_ms = opts->backoff_max_ms > 0 ? opts->backoff_max_ms : CT__BACKOFF_MAX_MS;
    c->handshake_timeout_ms = opts->handshake_timeout_ms > 0 ? opts->handshake_timeout_ms : 0;
    c->progress = opts->progress;
    c->limits = opts->limits ? *opts->limits : ct_store_default_limits;
    c->rng = (uint64_t)ct_time_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)c;
    if (c->rng == 0)
        c->rng = 0x9E3779B97F4A7C15ULL;

    const char *token = opts->token;
    const char *source = "token option";
    if (token == NULL && !opts->no_env_token) {
        token = getenv(CT_STORE_TOKEN_ENV);
        source = CT_STORE_TOKEN_ENV;
    }
    if (token != NULL) {
        int rc = ct_store_auth_check_token(token, source, eb);
        if (rc != 0)
            return rc;
        c->token_len = strlen(token);
        c->token = malloc(c->token_len + 1);
        if (c->token == NULL)
            return ct_errbuf_set(eb, -ENOMEM, "out of memory");
        memcpy(c->token, token, c->token_len + 1);
    }
    int64_t t = opts->connect_timeout_ms != 0 ? opts->connect_timeout_ms : c->timeout_ms;
    int rc = ct_store_client__connect_loop(c, ct_store_client__deadline(t), eb);
    return rc;
}

void ct_store_client_close(ct_store_client_t *c)
{
    if (c == NULL || !c->initialized)
        return;
    ct_store_client__drop(c);
    free(c->rbuf);
    free(c->wbuf);
    if (c->token != NULL) {
        memset(c->token, 0, c->token_len);
        free(c->token);
    }
    memset(c, 0, sizeof *c);
    c->fd = -1;
    c->cancel_fd = -1;
}

void ct_store_client_set_timeout(ct_store_client_t *c, int64_t timeout_ms)
{
    c->timeout_ms = timeout_ms;
}

bool ct_store_client_connected(const ct_store_client_t *c)
{
    return c->initialized && c->fd >= 0;
}

/* ---- request plumbing ----------------------------------------------------------------- */

/* Before a request: reconnect if the last one broke the stream; bytes nobody asked for mean
 * the stream is out of step, so start over rather than misread them. */
static int ct_store_client__begin(ct_store_client_t *c, int64_t deadline, ct_errbuf_t *eb)
{
    if (!c->initialized)
        return ct_errbuf_set(eb, CT_ESTATE, "store client used before ct_store_client_connect");
    if (c->fd >= 0 && c->rpos < c->rlen) {
        ct_log_warn("store %s:%d: %zu unexpected bytes from the server; reconnecting", c->host,
                    c->port, c->rlen - c->rpos);
        ct_store_client__drop(c);
    }
    c->rpos = c->rlen = 0;
    if (c->fd < 0)
        return ct_store_client__connect_loop(c, deadline, eb);
    return 0;
}

static int ct_store_client__send_req(ct_store_client_t *c, const ct_store_req_t *req,
                                     int64_t deadline, ct_errbuf_t *eb)
{
    ssize_t n = ct_store_encode_request(c->dialect, req, NULL, 0, eb);
    if (n < 0)
        return (int)n;
    if ((uint64_t)n > c->limits.max_message_len)
        return ct_errbuf_set(eb, CT_ELIMIT, "%s request of %zd bytes exceeds the %llu-byte limit",
                             ct_store_op_name(req->op), n,
                             (unsigned long long)c->limits.max_message_len);
    int rc = ct_store_client__reserve(&c->wbuf, &c->wcap, (size_t)n, eb);
    if (rc != 0)
        return rc;
    ct_store_encode_request(c->dialect, req, c->wbuf, c->wcap, NULL);
    return ct_store_client__send_all(c, c->wbuf, (size_t)n, deadline, ct_store_op_name(req->op),
                                     eb);
}

/* One request and its reply (if it has one); any failure drops the connection. */
static int ct_store_client__roundtrip(ct_store_client_t *c, const ct_store_req_t *req,
                                      uint64_t nkeys, ct_store_resp_t *resp, int64_t deadline,
                                      ct_errbuf_t *eb)
{
    int rc = ct_store_client__send_req(c, req, deadline, eb);
    if (rc == 0 && ct_store_op_has_reply(req->op))
        rc = ct_store_client__recv_resp(c, req->op, nkeys, resp, deadline, eb);
    if (rc != 0 && rc != CT_ELIMIT)
        ct_store_client__drop(c);
    return rc;
}

static int ct_store_client__need_v2(ct_store_client_t *c, ct_store_op_t op, ct_errbuf_t *eb)
{
    if (c->dialect == CT_STORE_V2)
        return 0;
    return ct_errbuf_set(eb, -ENOTSUP, "%s needs the v2 store dialect (PyTorch >= 2.2)",
                         ct_store_op_name(op));
}

static ct_store_bytes_t ct_store_client__str(const char *s)
{
    return (ct_store_bytes_t){.data = (const uint8_t *)s, .len = s ? strlen(s) : 0};
}

static int ct_store_client__key_array(const char *const *keys, size_t n, ct_store_bytes_t **out,
                                      ct_errbuf_t *eb)
{
    *out = malloc((n ? n : 1) * sizeof **out);
    if (*out == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for %zu keys", n);
    for (size_t i = 0; i < n; i++)
        (*out)[i] = ct_store_client__str(keys[i]);
    return 0;
}

/* "/a, /b, ..." for messages. */
static void ct_store_client__keys_text(const ct_store_bytes_t *keys, size_t n, char *buf,
                                       size_t size)
{
    size_t pos = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && pos + 8 < size; i++) {
        int w = snprintf(buf + pos, size - pos, "%s%.*s", i ? ", " : "",
                         (int)(keys[i].len > 64 ? 64 : keys[i].len), (const char *)keys[i].data);
        if (w < 0)
            break;
        pos += (size_t)w;
    }
    if (pos >= size - 8 && size > 4)
        snprintf(buf + size - 5, 5, "...");
}

/*
 * Sends a WAIT-like request (WAIT or BARRIER) and waits for STOP_WAITING until the deadline.
 * On timeout in v2: CANCEL_WAIT, then read WAIT_CANCELED (possibly after a STOP_WAITING that
 * crossed the cancel on the wire), as PyTorch's doWait does; the connection stays in step.
 */
static int ct_store_client__wait_req(ct_store_client_t *c, const ct_store_req_t *req,
                                     const ct_store_bytes_t *keys, size_t n, int64_t timeout_ms,
                                     ct_errbuf_t *eb)
{
    if (timeout_ms < 0)
        timeout_ms = c->timeout_ms;
    int64_t deadline = ct_store_client__deadline(timeout_ms);
    int rc = ct_store_client__begin(c, deadline, eb);
    if (rc != 0)
        return rc;
    rc = ct_store_client__send_req(c, req, deadline, eb);
    if (rc != 0) {
        if (rc != CT_ELIMIT)
            ct_store_client__drop(c);
        return rc;
    }
    ct_store_resp_t resp;
    ct_errbuf_t sub;
    rc = ct_store_client__recv_resp(c, req->op, 0, &resp, deadline, &sub);
    if (rc == 0) {
        if (resp.code == CT_STORE_WAIT_STOP)
            return 0;
        ct_store_client__drop(c);
        return ct_errbuf_set(eb, CT_EPROTOCOL, "%s: WAIT_CANCELED without a cancel from %s:%d",
                             ct_store_op_name(req->op), c->host, c->port);
    }
    if (rc != -ETIMEDOUT) {
        ct_store_client__drop(c);
        return ct_errbuf_set(eb, rc, "%s", sub.msg);
    }
    char ktext[256];
    ct_store_client__keys_text(keys, n, ktext, sizeof ktext);
    if (c->dialect == CT_STORE_V1) {
        /* No cancel in v1: a late STOP_WAITING would be read as the next reply. */
        ct_store_client__drop(c);
        return ct_errbuf_set(eb, -ETIMEDOUT, "%s timed out after %lld ms (keys: %s)",
                             ct_store_op_name(req->op), (long long)timeout_ms, ktext);
    }
    int64_t grace = ct_store_client__deadline(c->cancel_grace_ms);
    ct_store_req_t cancel = {.op = CT_STORE_OP_CANCEL_WAIT};
    rc = ct_store_client__send_req(c, &cancel, grace, &sub);
    if (rc == 0)
        rc = ct_store_client__recv_resp(c, CT_STORE_OP_CANCEL_WAIT, 0, &resp, grace, &sub);
    if (rc == 0 && resp.code == CT_STORE_WAIT_STOP)
        rc = ct_store_client__recv_resp(c, CT_STORE_OP_CANCEL_WAIT, 0, &resp, grace, &sub);
    if (rc == 0 && resp.code != CT_STORE_WAIT_CANCELED)
        rc = ct_errbuf_set(&sub, CT_EPROTOCOL, "second STOP_WAITING after CANCEL_WAIT");
    if (rc != 0) {
        ct_store_client__drop(c);
        return ct_errbuf_set(eb, -ETIMEDOUT,
                             "%s timed out after %lld ms (keys: %s), and CANCEL_WAIT failed: %s",
                             ct_store_op_name(req->op), (long long)timeout_ms, ktext, sub.msg);
    }
    return ct_errbuf_set(eb, -ETIMEDOUT, "%s timed out after %lld ms (keys: %s)",
                         ct_store_op_name(req->op), (long long)timeout_ms, ktext);
}

static int ct_store_client__wait_keys(ct_store_client_t *c, const ct_store_bytes_t *keys, size_t n,
                                      int64_t timeout_ms, ct_errbuf_t *eb)
{
    ct_store_req_t req = {.op = CT_STORE_OP_WAIT, .key_array = keys, .nkeys = n};
    return ct_store_client__wait_req(c, &req, keys, n, timeout_ms, eb);
}

/* A request with a deadline from the client's timeout. */
static int ct_store_client__simple(ct_store_client_t *c, const ct_store_req_t *req, uint64_t nkeys,
                                   ct_store_resp_t *resp, ct_errbuf_t *eb)
{
    int64_t deadline = ct_store_client__deadline(c->timeout_ms);
    int rc = ct_store_client__begin(c, deadline, eb);
    if (rc != 0)
        return rc;
    return ct_store_client__roundtrip(c, req, nkeys, resp, deadline, eb);
}

/* ---- requests ------------------------------------------------------------------------- */

int ct_store_set(ct_store_client_t *c, const char *key, const void *value, size_t len,
                 ct_errbuf_t *eb)
{
    ct_store_req_t req = {.op = CT_STORE_OP_SET,
                          .key = ct_store_client__str(key),
                          .value = {.data = value, .len = len}};
    return ct_store_client__simple(c, &req, 0, NULL, eb);
}

int ct_store_get(ct_store_client_t *c, const char *key, ct_store_bytes_t *value, ct_errbuf_t *eb)
{
    ct_store_bytes_t k = ct_store_client__str(key);
    int rc = ct_store_client__wait_keys(c, &k, 1, -1, eb);
    if (rc != 0)
        return rc;
    ct_store_req_t req = {.op = CT_STORE_OP_GET, .key = k};
    ct_store_resp_t resp;
    rc = ct_store_client__simple(c, &req, 0, &resp, eb);
    if (rc == 0)
        *value = resp.value;
    return rc;
}

int ct_store_add(ct_store_client_t *c, const char *key, int64_t delta, int64_t *result,
                 ct_errbuf_t *eb)
{
    ct_store_req_t req = {.op = CT_STORE_OP_ADD, .key = ct_store_client__str(key), .num = delta};
    ct_store_resp_t resp;
    int rc = ct_store_client__simple(c, &req, 0, &resp, eb);
    if (rc == 0 && result != NULL)
        *result = resp.num;
    return rc;
}

int ct_store_compare_set(ct_store_client_t *c, const char *key, const void *expected,
                         size_t expected_len, const void *desired, size_t desired_len,
                         ct_store_bytes_t *current, ct_errbuf_t *eb)
{
    ct_store_req_t req = {.op = CT_STORE_OP_COMPARE_SET,
                          .key = ct_store_client__str(key),
                          .value = {.data = expected, .len = expected_len},
                          .desired = {.data = desired, .len = desired_len}};
    ct_store_resp_t resp;
    int rc = ct_store_client__simple(c, &req, 0, &resp, eb);
    if (rc == 0 && current != NULL)
        *current = resp.value;
    return rc;
}

int ct_store_check(ct_store_client_t *c, const char *const *keys, size_t n, bool *ready,
                   ct_errbuf_t *eb)
{
    ct_store_bytes_t *arr;
    int rc = ct_store_client__key_array(keys, n, &arr, eb);
    if (rc != 0)
        return rc;
    ct_store_req_t req = {.op = CT_STORE_OP_CHECK, .key_array = arr, .nkeys = n};
    ct_store_resp_t resp;
    rc = ct_store_client__simple(c, &req, 0, &resp, eb);
    free(arr);
    if (rc == 0)
        *ready = resp.code == CT_STORE_CHECK_READY;
    return rc;
}

int ct_store_wait(ct_store_client_t *c, const char *const *keys, size_t n, int64_t timeout_ms,
                  ct_errbuf_t *eb)
{
    ct_store_bytes_t *arr;
    int rc = ct_store_client__key_array(keys, n, &arr, eb);
    if (rc != 0)
        return rc;
    rc = ct_store_client__wait_keys(c, arr, n, timeout_ms, eb);
    free(arr);
    return rc;
}

int ct_store_num_keys(ct_store_client_t *c, int64_t *n, ct_errbuf_t *eb)
{
    ct_store_req_t req = {.op = CT_STORE_OP_GETNUMKEYS};
    ct_store_resp_t resp;
    int rc = ct_store_client__simple(c, &req, 0, &resp, eb);
    if (rc == 0)
        *n = resp.num;
    return rc;
}

int ct_store_delete(ct_store_client_t *c, const char *key, bool *deleted, ct_errbuf_t *eb)
{
    ct_store_req_t req = {.op = CT_STORE_OP_DELETE_KEY, .key = ct_store_client__str(key)};
    ct_store_resp_t resp;
    int rc = ct_store_client__simple(c, &req, 0, &resp, eb);
    if (rc == 0 && deleted != NULL)
        *deleted = resp.num == 1;
    return rc;
}

int ct_store_append(ct_store_client_t *c, const char *key, const void *value, size_t len,
                    ct_errbuf_t *eb)
{
    int rc = ct_store_client__need_v2(c, CT_STORE_OP_APPEND, eb);
    if (rc != 0)
        return rc;
    ct_store_req_t req = {.op = CT_STORE_OP_APPEND,
                          .key = ct_store_client__str(key),
                          .value = {.data = value, .len = len}};
    return ct_store_client__simple(c, &req, 0, NULL, eb);
}

int ct_store_multi_get(ct_store_client_t *c, const char *const *keys, size_t n,
                       ct_store_bytes_t *values, ct_errbuf_t *eb)
{
    int rc = ct_store_client__need_v2(c, CT_STORE_OP_MULTI_GET, eb);
    if (rc != 0 || n == 0) /* no keys: PyTorch's exchange would carry no reply bytes */
        return rc;
    ct_store_bytes_t *arr;
    if ((rc = ct_store_client__key_array(keys, n, &arr, eb)) != 0)
        return rc;
    rc = ct_store_client__wait_keys(c, arr, n, -1, eb);
    if (rc == 0) {
        ct_store_req_t req = {.op = CT_STORE_OP_MULTI_GET, .key_array = arr, .nkeys = n};
        ct_store_resp_t resp;
        rc = ct_store_client__simple(c, &req, n, &resp, eb);
        if (rc == 0) {
            ct_store_list_iter_t it;
            ct_store_list_begin(&resp.list, &it);
            for (size_t i = 0; i < n; i++)
                ct_store_list_next(&it, &values[i], NULL);
        }
    }
    free(arr);
    return rc;
}

int ct_store_multi_set(ct_store_client_t *c, const char *const *keys,
                       const ct_store_bytes_t *values, size_t n, ct_errbuf_t *eb)
{
    int rc = ct_store_client__need_v2(c, CT_STORE_OP_MULTI_SET, eb);
    if (rc != 0)
        return rc;
    ct_store_bytes_t *arr;
    if ((rc = ct_store_client__key_array(keys, n, &arr, eb)) != 0)
        return rc;
    ct_store_req_t req = {
        .op = CT_STORE_OP_MULTI_SET, .key_array = arr, .value_array = values, .nkeys = n};
    rc = ct_store_client__simple(c, &req, 0, NULL, eb);
    free(arr);
    return rc;
}

int ct_store_ping(ct_store_client_t *c, ct_errbuf_t *eb)
{
    int rc = ct_store_client__need_v2(c, CT_STORE_OP_PING, eb);
    if (rc != 0)
        return rc;
    uint32_t nonce = (uint32_t)ct_store_client__rand(c);
    ct_store_req_t req = {.op = CT_STORE_OP_PING, .num32 = nonce};
    ct_store_resp_t resp;
    rc = ct_store_client__simple(c, &req, 0, &resp, eb);
    if (rc == 0 && resp.num32 != nonce) {
        ct_store_client__drop(c);
        return ct_errbuf_set(eb, CT_EPROTOCOL, "ping returned 0x%08x, expected 0x%08x", resp.num32,
                             nonce);
    }
    return rc;
}

int ct_store_queue_push(ct_store_client_t *c, const char *key, const void *value, size_t len,
                        ct_errbuf_t *eb)
{
    int rc = ct_store_client__need_v2(c, CT_STORE_OP_QUEUE_PUSH, eb);
    if (rc != 0)
        return rc;
    ct_store_req_t req = {.op = CT_STORE_OP_QUEUE_PUSH,
                          .key = ct_store_client__str(key),
                          .value = {.data = value, .len = len}};
    return ct_store_client__simple(c, &req, 0, NULL, eb);
}

int ct_store_queue_pop(ct_store_client_t *c, const char *key, bool block, ct_store_bytes_t *value,
                       ct_errbuf_t *eb)
{
    int rc = ct_store_client__need_v2(c, CT_STORE_OP_QUEUE_POP, eb);
    if (rc != 0)
        return rc;
    ct_store_bytes_t k = ct_store_client__str(key);
    if (block && (rc = ct_store_client__wait_keys(c, &k, 1, -1, eb)) != 0)
        return rc;
    ct_store_req_t req = {.op = CT_STORE_OP_QUEUE_POP, .key = k};
    ct_store_resp_t resp;
    rc = ct_store_client__simple(c, &req, 0, &resp, eb);
    if (rc != 0)
        return rc;
    if (resp.num <= 0)
        return ct_errbuf_set(eb, -ENODATA, "queue \"%s\" is empty", key);
    *value = resp.value;
    return 0;
}

int ct_store_queue_len(ct_store_client_t *c, const char *key, int64_t *n, ct_errbuf_t *eb)
{
    int rc = ct_store_client__need_v2(c, CT_STORE_OP_QUEUE_LEN, eb);
    if (rc != 0)
        return rc;
    ct_store_req_t req = {.op = CT_STORE_OP_QUEUE_LEN, .key = ct_store_client__str(key)};
    ct_store_resp_t resp;
    rc = ct_store_client__simple(c, &req, 0, &resp, eb);
    if (rc == 0)
        *n = resp.num;
    return rc;
}

int ct_store_list_keys(ct_store_client_t *c, ct_store_list_t *keys, ct_errbuf_t *eb)
{
    int rc = ct_store_client__need_v2(c, CT_STORE_OP_LIST_KEYS, eb);
    if (rc != 0)
        return rc;
    ct_store_req_t req = {.op = CT_STORE_OP_LIST_KEYS};
    ct_store_resp_t resp;
    rc = ct_store_client__simple(c, &req, 0, &resp, eb);
    if (rc == 0)
        *keys = resp.list;
    return rc;
}

int ct_store_barrier(ct_store_client_t *c, const char *key, int64_t world_size, int64_t timeout_ms,
                     ct_errbuf_t *eb)
{
    int rc = ct_store_client__need_v2(c, CT_STORE_OP_BARRIER, eb);
    if (rc != 0)
        return rc;
    ct_store_bytes_t k = ct_store_client__str(key);
    ct_store_req_t req = {.op = CT_STORE_OP_BARRIER, .key = k, .num = world_size};
    return ct_store_client__wait_req(c, &req, &k, 1, timeout_ms, eb);
}
