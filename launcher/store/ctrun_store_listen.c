/*
 * ctrun_store_listen.c - connections arriving: the listening socket (dual-stack unless a host is
 * given, backlog from somaxconn), accept(2) in batches from a uv_poll (rather than uv_listen,
 * which answers a shortage of file descriptors by silently closing pending connections), the
 * refusal of connections when descriptors run out (said once per shortage), and closing
 * connections that have not authenticated in time.
 *
 * Deliberately not here: what happens on an accepted connection (ctrun_store_conn.c) and
 * creating or closing the store (ctrun_store.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ct_log.h"
#include "ctrun_store_internal.h"

/* ---- accepting -------------------------------------------------------------------------- */

static void ctrun_store__on_listen_ready(uv_poll_t *h, int status, int events);

static void ctrun_store__on_accept_timer(uv_timer_t *t)
{
    ctrun_store_t *s = t->data;
    if (s->closing || !s->has_listener)
        return;
    if (s->spare_fd < 0)
        s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    uv_poll_start(&s->listener, UV_READABLE, ctrun_store__on_listen_ready);
}

/* Stops accepting for 100 ms: when pending connections can be neither accepted nor refused,
 * the listening socket stays readable and would otherwise spin the loop. */
static void ctrun_store__accept_pause(ctrun_store_t *s)
{
    if (!s->has_accept_timer)
        return;
    uv_poll_stop(&s->listener);
    uv_timer_start(&s->accept_timer, ctrun_store__on_accept_timer, 100, 0);
}

/*
 * accept() failed with EMFILE or ENFILE: refuses every pending connection (the spare
 * descriptor is given up for a moment so that each can be accepted and closed at once, which
 * the client sees as its connection closing rather than as silence), and says so once for the
 * whole shortage (at most once a minute), with the limit. Accepting resumes by itself: the
 * next accept() that succeeds ends the shortage.
 */
static void ctrun_store__refuse_for_fds(ctrun_store_t *s, int err)
{
    uint64_t n = 0;
    if (s->spare_fd >= 0) {
        close(s->spare_fd);
        s->spare_fd = -1;
        for (;;) {
            int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0) {
                close(fd);
                n++;
            } else if (errno != EINTR && errno != ECONNABORTED) {
                break;
            }
        }
        s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    s->st.refused += n;
    s->fd_refused += n;
    uint64_t now = uv_now(s->loop);
    if (!s->fd_starved) {
        s->fd_starved = true;
        s->fd_starved_logged = false;
        if (s->fd_log_ms == 0 || now - s->fd_log_ms >= 60000) {
            s->fd_starved_logged = true;
            s->fd_log_ms = now == 0 ? 1 : now;
            char limit[32] = "unknown";
            struct rlimit rl;
            if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
                snprintf(limit, sizeof limit, "%llu", (unsigned long long)rl.rlim_cur);
            if (err == EMFILE)
                ct_log_error("store: cannot accept connections: out of file descriptors (limit "
                             "%s, RLIMIT_NOFILE); %llu refused so far",
                             limit, (unsigned long long)s->fd_refused);
            else
                ct_log_error("store: cannot accept connections: the system is out of file "
                             "descriptors (ENFILE, see fs.file-max); %llu refused so far",
                             (unsigned long long)s->fd_refused);
        }
    }
    if (s->spare_fd < 0) /* nothing to refuse them with: leave them waiting a moment */
        ctrun_store__accept_pause(s);
}

/* Connections accepted per readiness event, so that clients get served meanwhile. */
#define CTRUN_STORE__ACCEPT_BATCH 128

static void ctrun_store__on_listen_ready(uv_poll_t *h, int status, int events)
{
    ctrun_store_t *s = h->data;
    (void)events;
    if (status < 0) {
        ctrun_store__log_conn(s, "listening socket: %s", uv_strerror(status));
        ctrun_store__accept_pause(s);
        return;
    }
    for (int i = 0; i < CTRUN_STORE__ACCEPT_BATCH && !s->closing; i++) {
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            if (s->fd_starved) {
                s->fd_starved = false;
                if (s->fd_starved_logged)
                    ct_log_info("store: accepting connections again (%llu refused so far for "
                                "want of file descriptors)",
                                (unsigned long long)s->fd_refused);
            }
            ctrun_store__accepted(s, fd);
            continue;
        }
        int err = errno;
        if (err == EAGAIN || err == EWOULDBLOCK)
            break;
        /* A connection that failed before it was accepted (ECONNABORTED, and on Linux the
         * pending network errors accept() passes on) says nothing about the next one. */
        if (err == EINTR || err == ECONNABORTED || err == EPROTO || err == ENETDOWN ||
            err == ENOPROTOOPT || err == EHOSTDOWN || err == ENONET || err == EHOSTUNREACH ||
            err == EOPNOTSUPP || err == ENETUNREACH)
            continue;
        if (err == EMFILE || err == ENFILE) {
            ctrun_store__refuse_for_fds(s, err);
            break;
        }
        ctrun_store__log_conn(s, "accept failed: %s", strerror(err));
        ctrun_store__accept_pause(s);
        break;
    }
    ctrun_store__flush_dirty(s);
}

/* Closes connections that have not authenticated in time (only when a token is set). */
void ctrun_store__on_auth_timer(uv_timer_t *t)
{
    ctrun_store_t *s = t->data;
    uint64_t now = uv_now(s->loop);
    ctrun_store__conn_t *c = s->conns;
    while (c != NULL) {
        ctrun_store__conn_t *next = c->next;
        if (c->state < CTRUN_STORE__DETECT && now - c->opened_ms >= CTRUN_STORE__AUTH_TIMEOUT_MS)
            ctrun_store__drop(c, "did not authenticate within %d s",
                              CTRUN_STORE__AUTH_TIMEOUT_MS / 1000);
        c = next;
    }
    ctrun_store__flush_dirty(s);
}

/* ---- listening -------------------------------------------------------------------------- */

static int ctrun_store__somaxconn(void)
{
    FILE *f = fopen("/proc/sys/net/core/somaxconn", "r");
    int v = 0;
    if (f != NULL) {
        if (fscanf(f, "%d", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v > 0 ? v : SOMAXCONN;
}

static int ctrun_store__bind_fd(int family, const struct sockaddr *sa, socklen_t len, int *out)
{
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    /* Dual-stack on purpose, whatever net.ipv6.bindv6only says: v4 clients reach [::]. */
    if (family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    if (bind(fd, sa, len) != 0) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    *out = fd;
    return 0;
}

int ctrun_store__listen(ctrun_store_t *s, const char *host, int port, ct_errbuf_t *eb)
{
    int fd = -1, rc;
    if (host == NULL || host[0] == '\0') {
        struct sockaddr_in6 a6 = {.sin6_family = AF_INET6,
                                  .sin6_port = htons((uint16_t)port),
                                  .sin6_addr = IN6ADDR_ANY_INIT};
        rc = ctrun_store__bind_fd(AF_INET6, (struct sockaddr *)&a6, sizeof a6, &fd);
        if (rc == -EAFNOSUPPORT || rc == -EADDRNOTAVAIL || rc == -EPROTONOSUPPORT) {
            ct_log_info("store: IPv6 unavailable (%s); listening on IPv4 only", ct_strerror(rc));
            struct sockaddr_in a4 = {.sin_family = AF_INET,
                                     .sin_port = htons((uint16_t)port),
                                     .sin_addr = {htonl(INADDR_ANY)}};
            rc = ctrun_store__bind_fd(AF_INET, (struct sockaddr *)&a4, sizeof a4, &fd);
        }
        if (rc != 0)
            return ct_errbuf_set(eb, rc, "store: cannot listen on port %d: %s", port,
                                 ct_strerror(rc));
    } else {
        char ps[16];
        snprintf(ps, sizeof ps, "%d", port);
        struct addrinfo hints = {.ai_family = AF_UNSPEC,
                                 .ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
        struct addrinfo *res = NULL;
        int gai = getaddrinfo(host, ps, &hints, &res);
        if (gai != 0)
            return ct_errbuf_set(eb, CT_EPARSE, "store: cannot resolve listen host \"%s\": %s",
                                 host, gai_strerror(gai));
        rc = -EADDRNOTAVAIL;
        for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next)
            rc = ctrun_store__bind_fd(ai->ai_family, ai->ai_addr, ai->ai_addrlen, &fd);
        freeaddrinfo(res);
        if (fd < 0)
            return ct_errbuf_set(eb, rc, "store: cannot listen on %s:%d: %s", host, port,
                                 ct_strerror(rc));
    }
    s->listen_fd = fd; /* closed with the store's state, after the poll handle */
    int backlog = ctrun_store__somaxconn();
    if (listen(fd, backlog) != 0) {
        rc = -errno;
        return ct_errbuf_set(eb, rc, "store: listen on port %d: %s", port, ct_strerror(rc));
    }
    rc = uv_poll_init(s->loop, &s->listener, fd);
    if (rc != 0)
        return ct_errbuf_set(eb, rc, "store: uv_poll_init: %s", uv_strerror(rc));
    s->listener.data = s;
    s->has_listener = true;
    s->open_handles++;
    rc = uv_timer_init(s->loop, &s->accept_timer);
    if (rc != 0)
        return ct_errbuf_set(eb, rc, "store: timer: %s", uv_strerror(rc));
    s->accept_timer.data = s;
    s->has_accept_timer = true;
    s->open_handles++;
    s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    rc = uv_poll_start(&s->listener, UV_READABLE, ctrun_store__on_listen_ready);
    if (rc != 0)
        return ct_errbuf_set(eb, rc, "store: listen on port %d: %s", port, uv_strerror(rc));
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &len);
    char ip[64] = "?";
    if (ss.ss_family == AF_INET6) {
        s->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof ip);
        snprintf(s->address, sizeof s->address, "[%s]:%d", ip, s->port);
    } else {
        s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof ip);
        snprintf(s->address, sizeof s->address, "%s:%d", ip, s->port);
    }
    ct_log_debug("store: listening on %s (backlog %d)", s->address, backlog);
    return 0;
}
