/*
 * ct_addr.h - parsing and validation of network endpoints as users write them:
 * "host:port", "host", "1.2.3.4:29500", "[::1]:29500", "[fe80::1%eth0]", bare "::1".
 *
 * Validation is syntactic: a hostname must be a plausible DNS name, an IPv4 literal must have
 * four octets in range, an IPv6 literal must parse. Nothing is resolved here; resolution and
 * connection happen where a deadline is known. Errors quote the input and say what is wrong
 * ("missing port after ':'", "port 70000 out of range").
 */
#ifndef CT_ADDR_H
#define CT_ADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CT_HOST_MAX 256

typedef enum ct_host_kind {
    CT_HOST_NAME = 0, /* a DNS name such as "node-3.cluster" or "localhost" */
    CT_HOST_IPV4 = 1,
    CT_HOST_IPV6 = 2, /* stored without brackets, zone id kept ("fe80::1%eth0") */
} ct_host_kind_t;

typedef struct ct_hostport {
    char host[CT_HOST_MAX];
    ct_host_kind_t kind;
    int port;      /* 0..65535 */
    bool has_port; /* false when the text had no port and the default was used */
} ct_hostport_t;

/* Parses text into out. default_port is used when the text has no port; pass -1 to require
 * one. allow_port_zero lets ":0" through (a listener asking the kernel for a free port).
 * Errors: CT_EPARSE or CT_ERANGE_VALUE with the reason in eb. */
int ct_hostport_parse(const char *text, int default_port, bool allow_port_zero,
                      ct_hostport_t *out, ct_errbuf_t *eb);

/* Parses a decimal port number 0..65535 (1..65535 unless allow_zero). */
int ct_port_parse(const char *text, bool allow_zero, int *out, ct_errbuf_t *eb);

/* Validates a host on its own (no port), filling kind. */
int ct_host_validate(const char *host, ct_host_kind_t *kind, ct_errbuf_t *eb);

/* Writes "host:port", bracketing IPv6 hosts. Returns the snprintf length. */
int ct_hostport_format(const ct_hostport_t *hp, char *buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* CT_ADDR_H */
