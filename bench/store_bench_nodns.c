/*
 * store_bench_nodns.c - an LD_PRELOAD shim for the PyTorch servers that store_bench runs.
 *
 * PyTorch >= 2.x servers look up the host name of every client that connects (getnameinfo).
 * On a machine whose resolver has no reachable DNS server for such reverse lookups (this
 * project's build machines: /etc/hosts has no entry for ::1 or ::ffff:127.0.0.1), each lookup
 * blocks the server thread until the resolver's timeout, which turns a 1,000-client storm into
 * minutes of DNS waiting and measures the resolver, not the store. The shim answers reverse
 * lookups of loopback addresses numerically, as a resolver with those entries would, and
 * leaves everything else to the real getnameinfo.
 */
#include <dlfcn.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*ct_getnameinfo_fn)(const struct sockaddr *, socklen_t, char *, socklen_t, char *,
                                 socklen_t, int);

static int ct__is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return 1;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return 0;
}

int getnameinfo(const struct sockaddr *sa, socklen_t salen, char *host, socklen_t hostlen,
                char *serv, socklen_t servlen, int flags)
{
    static ct_getnameinfo_fn real;
    if (real == NULL)
        real = (ct_getnameinfo_fn)dlsym(RTLD_NEXT, "getnameinfo");
    if (sa != NULL && host != NULL && hostlen > 0 && ct__is_loopback(sa))
        flags = (flags | NI_NUMERICHOST) & ~NI_NAMEREQD;
    return real(sa, salen, host, hostlen, serv, servlen, flags);
}
