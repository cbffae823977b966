/*
 * ct_addr.c - endpoint parsing. The grammar is the one torchrun's parse_rendezvous_endpoint
 * accepts, made strict: brackets for IPv6 with a port, a single ':' otherwise, digits only in
 * the port.
 */
#include "ct_addr.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "ct_parse.h"

int ct_port_parse(const char *text, bool allow_zero, int *out, ct_errbuf_t *eb)
{
    if (text == NULL || text[0] == '\0')
        return ct_errbuf_set(eb, CT_EPARSE, "empty port");
    for (const char *c = text; *c != '\0'; c++) {
        if (!isdigit((unsigned char)*c))
            return ct_errbuf_set(eb, CT_EPARSE, "port \"%.32s\" is not a number", text);
    }
    int port;
    if (ct_parse_int(text, 0, 65535, &port, NULL) != 0)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "port %.32s is out of range (expected %d..65535)",
                             text, allow_zero ? 0 : 1);
    if (port == 0 && !allow_zero)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "port 0 is not allowed here (expected 1..65535)");
    *out = port;
    return 0;
}

static bool ct_addr__is_ipv6(const char *host)
{
    /* inet_pton does not know zone ids ("%eth0"); validate the address part only. */
    char buf[CT_HOST_MAX];
    size_t n = strcspn(host, "%");
    if (n >= sizeof buf)
        return false;
    if (host[n] == '%' && host[n + 1] == '\0')
        return false;
    memcpy(buf, host, n);
    buf[n] = '\0';
    struct in6_addr a6;
    return inet_pton(AF_INET6, buf, &a6) == 1;
}

int ct_host_validate(const char *host, ct_host_kind_t *kind, ct_errbuf_t *eb)
{
    size_t len = strlen(host);
    if (len == 0)
        return ct_errbuf_set(eb, CT_EPARSE, "empty host");
    if (len >= CT_HOST_MAX)
        return ct_errbuf_set(eb, CT_EPARSE, "host name is %zu characters long (at most 253)", len);
    if (strchr(host, ':') != NULL) {
        if (!ct_addr__is_ipv6(host))
            return ct_errbuf_set(eb, CT_EPARSE, "\"%.64s\" is not a valid IPv6 address", host);
        *kind = CT_HOST_IPV6;
        return 0;
    }

    /* A dotted name whose labels are all digits must be an IPv4 address: "256.1.1.1" and
     * "10.0.0" are typos, not host names. */
    bool all_numeric = true;
    int labels = 0;
    size_t label_len = 0;
    for (size_t i = 0; i <= len; i++) {
        char c = host[i];
        if (c == '.' || c == '\0') {
            if (label_len == 0)
                return ct_errbuf_set(eb, CT_EPARSE, "host \"%.64s\" has an empty label", host);
            if (label_len > 63)
                return ct_errbuf_set(eb, CT_EPARSE, "host \"%.64s\" has a label over 63 characters",
                                     host);
            if (host[i - 1] == '-' || host[i - label_len] == '-')
                return ct_errbuf_set(
                    eb, CT_EPARSE, "host \"%.64s\" has a label that starts or ends with '-'", host);
            labels++;
            label_len = 0;
            continue;
        }
        if (!isalnum((unsigned char)c) && c != '-' && c != '_')
            return ct_errbuf_set(
                eb, CT_EPARSE, "host \"%.64s\" contains '%c', which is not allowed in a host name",
                host, isprint((unsigned char)c) ? c : '?');
        if (!isdigit((unsigned char)c))
            all_numeric = false;
        label_len++;
    }
    if (len > 253)
        return ct_errbuf_set(eb, CT_EPARSE, "host name is %zu characters long (at most 253)", len);
    if (all_numeric) {
        struct in_addr a4;
        if (labels != 4 || inet_pton(AF_INET, host, &a4) != 1)
            return ct_errbuf_set(eb, CT_EPARSE, "\"%.64s\" is not a valid IPv4 address", host);
        *kind = CT_HOST_IPV4;
        return 0;
    }
    *kind = CT_HOST_NAME;
    return 0;
}

int ct_hostport_parse(const char *text, int default_port, bool allow_port_zero,
                      ct_hostport_t *out, ct_errbuf_t *eb)
{
    if (text == NULL || text[0] == '\0')
        return ct_errbuf_set(eb, CT_EPARSE, "empty address (expected host:port)");
    size_t len = strlen(text);
    if (len >= CT_HOST_MAX + 8)
        return ct_errbuf_set(eb, CT_EPARSE, "address is %zu characters long", len);

    char host[CT_HOST_MAX + 8];
    const char *port_text = NULL;
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (close == NULL)
            return ct_errbuf_set(eb, CT_EPARSE, "address \"%.80s\": '[' without ']'", text);
        size_t hlen = (size_t)(close - text - 1);
        memcpy(host, text + 1, hlen);
        host[hlen] = '\0';
        if (close[1] == ':')
            port_text = close + 2;
        else if (close[1] != '\0')
            return ct_errbuf_set(eb, CT_EPARSE, "address \"%.80s\": unexpected text after ']'",
                                 text);
        if (strchr(host, ':') == NULL)
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "address \"%.80s\": brackets are only for IPv6 addresses", text);
    } else {
        const char *colon = strchr(text, ':');
        if (colon != NULL && strchr(colon + 1, ':') != NULL) {
            /* Several colons without brackets: only a bare IPv6 address (no port) fits. */
            if (!ct_addr__is_ipv6(text))
                return ct_errbuf_set(eb, CT_EPARSE,
                                     "address \"%.80s\": write IPv6 addresses with a port as "
                                     "[addr]:port",
                                     text);
            memcpy(host, text, len + 1);
        } else if (colon != NULL) {
            size_t hlen = (size_t)(colon - text);
            memcpy(host, text, hlen);
            host[hlen] = '\0';
            port_text = colon + 1;
        } else {
            memcpy(host, text, len + 1);
        }
    }

    ct_hostport_t hp = {0};
    int rc = ct_host_validate(host, &hp.kind, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, rc, "address \"%.80s\"", text);
    memcpy(hp.host, host, strlen(host) + 1); /* fits: ct_host_validate checked the length */

    if (port_text != NULL) {
        if (port_text[0] == '\0')
            return ct_errbuf_set(eb, CT_EPARSE, "address \"%.80s\": missing port after ':'", text);
        rc = ct_port_parse(port_text, allow_port_zero, &hp.port, eb);
        if (rc != 0)
            return ct_errbuf_wrap(eb, rc, "address \"%.80s\"", text);
        hp.has_port = true;
    } else {
        if (default_port < 0)
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "address \"%.80s\": missing port (expected host:port)", text);
        hp.port = default_port;
        hp.has_port = false;
    }
    *out = hp;
    return 0;
}

int ct_hostport_format(const ct_hostport_t *hp, char *buf, size_t size)
{
    if (hp->kind == CT_HOST_IPV6)
        return snprintf(buf, size, "[%s]:%d", hp->host, hp->port);
    return snprintf(buf, size, "%s:%d", hp->host, hp->port);
}
