/*
 * foreign_peer.c - the not-a-store peers of foreign_peer.h: one accept loop on a thread,
 * serving one connection at a time (each answer is a single short exchange).
 */
#include "foreign_peer.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void foreign__hold(foreign_peer_t *p, int fd)
{
    if (p->nheld < (int)(sizeof p->held / sizeof p->held[0]))
        p->held[p->nheld++] = fd;
    else
        close(fd);
}

/* Reads what the client sent first (up to 1 s), as a server would before answering. */
static void foreign__read_some(int fd)
{
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    char buf[4096];
    if (poll(&pf, 1, 1000) > 0)
        (void)recv(fd, buf, sizeof buf, 0);
}

static void foreign__send(int fd, const void *p, size_t n)
{
    (void)send(fd, p, n, MSG_NOSIGNAL);
}

static void *foreign__main(void *arg)
{
    foreign_peer_t *p = arg;
    static const char http[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n"
                               "Connection: close\r\n\r\n";
    static const char bad_json[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                   "Content-Length: 12\r\nConnection: close\r\n\r\n"
                                   "{\"header\":{\"";
    static const char ssh[] = "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n";
    static const unsigned char junk[8] = {0xde, 0xad, 0xbe, 0xef, 0x01, 0x02, 0x03, 0x04};
    for (;;) {
        struct pollfd pf[2] = {{.fd = p->lfd, .events = POLLIN},
                               {.fd = p->stop[0], .events = POLLIN}};
        if (poll(pf, 2, -1) < 0 && errno != EINTR)
            break;
        if (pf[1].revents != 0)
            break;
        if (pf[0].revents == 0)
            continue;
        int fd = accept(p->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        p->accepted++;
        switch (p->kind) {
        case FOREIGN_HTTP:
            foreign__read_some(fd);
            foreign__send(fd, http, sizeof http - 1);
            close(fd);
            break;
        case FOREIGN_HTTP_BAD_JSON:
            foreign__read_some(fd);
            foreign__send(fd, bad_json, sizeof bad_json - 1);
            close(fd);
            break;
        case FOREIGN_SSH:
            foreign__send(fd, ssh, sizeof ssh - 1);
            foreign__hold(p, fd);
            break;
        case FOREIGN_BINARY:
            foreign__read_some(fd);
            foreign__send(fd, junk, sizeof junk);
            foreign__hold(p, fd);
            break;
        case FOREIGN_SILENT:
            foreign__hold(p, fd);
            break;
        }
    }
    return NULL;
}

int foreign_peer_start(foreign_peer_t *p, foreign_kind_t kind)
{
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (p->lfd < 0)
        return -errno;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr = {htonl(INADDR_LOOPBACK)}};
    socklen_t len = sizeof a;
    if (bind(p->lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(p->lfd, 64) != 0 ||
        getsockname(p->lfd, (struct sockaddr *)&a, &len) != 0 || pipe(p->stop) != 0) {
        int rc = -errno;
        close(p->lfd);
        return rc;
    }
    p->port = ntohs(a.sin_port);
    int rc = -pthread_create(&p->thread, NULL, foreign__main, p);
    if (rc != 0) {
        close(p->lfd);
        close(p->stop[0]);
        close(p->stop[1]);
    }
    return rc;
}

void foreign_peer_stop(foreign_peer_t *p)
{
    (void)write(p->stop[1], "x", 1);
    pthread_join(p->thread, NULL);
    for (int i = 0; i < p->nheld; i++)
        close(p->held[i]);
    close(p->lfd);
    close(p->stop[0]);
    close(p->stop[1]);
}
