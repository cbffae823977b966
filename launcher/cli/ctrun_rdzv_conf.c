/*
 * ctrun_rdzv_conf.c - torchrun's _parse_rendezvous_config, then per-key checks. A key that
 * only the etcd backend or PyTorch's own store uses (use_libuv) is accepted so that command
 * lines written for torchrun keep working.
 */
#include "ctrun_rdzv_conf.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_parse.h"

static const char *const ctrun_rdzv_conf__known_keys[] = {
    "timeout",
    "join_timeout",
    "last_call_timeout",
    "close_timeout",
    "read_timeout",
    "heartbeat_timeout",
    "keep_alive_interval",
    "keep_alive_max_attempt",
    "is_host",
    "store_type",
    "store_token",
    "rank",
    "use_libuv",
    "etcd_timeout",
    "protocol",
    "cacert",
    "cert",
    "key",
    "user",
    "password_file",
};

bool ctrun_rdzv_conf_known(const char *key)
{
    for (size_t i = 0;
         i < sizeof ctrun_rdzv_conf__known_keys / sizeof ctrun_rdzv_conf__known_keys[0]; i++) {
        if (strcmp(key, ctrun_rdzv_conf__known_keys[i]) == 0)
            return true;
    }
    return false;
}

const char *ctrun_rdzv_conf_get(const ctrun_rdzv_conf_t *conf, const char *key)
{
    for (size_t i = 0; i < conf->count; i++) {
        if (strcmp(conf->items[i].key, key) == 0)
            return conf->items[i].value;
    }
    return NULL;
}

void ctrun_rdzv_conf_free(ctrun_rdzv_conf_t *conf)
{
    for (size_t i = 0; i < conf->count; i++) {
        free(conf->items[i].key);
        free(conf->items[i].value);
    }
    free(conf->items);
    conf->items = NULL;
    conf->count = 0;
    conf->store_token = NULL;
    conf->etcd_cacert = conf->etcd_cert = conf->etcd_key = conf->etcd_user = NULL;
    free(conf->etcd_password);
    conf->etcd_password = NULL;
}

/* etcd-v3's TLS and authentication keys: files must be readable; the password is the first
 * line of password_file. */
static int ctrun_rdzv_conf__etcd(ctrun_rdzv_conf_t *c, ct_errbuf_t *eb)
{
    const char *v = ctrun_rdzv_conf_get(c, "protocol");
    if (v != NULL && strcmp(v, "http") != 0 && strcmp(v, "https") != 0)
        return ct_errbuf_set(eb, CT_EPARSE, "protocol: \"%.32s\" (expected http or https)", v);
    c->etcd_https = v != NULL && strcmp(v, "https") == 0;
    const char *names[] = {"cacert", "cert", "key"};
    const char **dst[] = {&c->etcd_cacert, &c->etcd_cert, &c->etcd_key};
    for (size_t i = 0; i < 3; i++) {
        *dst[i] = ctrun_rdzv_conf_get(c, names[i]);
        if (*dst[i] == NULL)
            continue;
        if (!c->etcd_https)
            return ct_errbuf_set(eb, CT_EPARSE, "%s: needs protocol=https", names[i]);
        if (access(*dst[i], R_OK) != 0)
            return ct_errbuf_set(eb, CT_EPARSE, "%s: cannot read %.200s: %s", names[i], *dst[i],
                                 strerror(errno));
    }
    if ((c->etcd_cert == NULL) != (c->etcd_key == NULL))
        return ct_errbuf_set(eb, CT_EPARSE, "%s: needs %s too", c->etcd_cert ? "cert" : "key",
                             c->etcd_cert ? "key" : "cert");
    c->etcd_user = ctrun_rdzv_conf_get(c, "user");
    const char *pf = ctrun_rdzv_conf_get(c, "password_file");
    if ((c->etcd_user == NULL) != (pf == NULL))
        return ct_errbuf_set(eb, CT_EPARSE, "%s: needs %s too", pf ? "password_file" : "user",
                             pf ? "user" : "password_file");
    if (pf == NULL)
        return 0;
    FILE *f = fopen(pf, "r");
    if (f == NULL)
        return ct_errbuf_set(eb, CT_EPARSE, "password_file: cannot read %.200s: %s", pf,
                             strerror(errno));
    char line[1024];
    bool got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    line[got ? strcspn(line, "\r\n") : 0] = '\0';
    if (line[0] == '\0')
        return ct_errbuf_set(eb, CT_EPARSE,
                             "password_file: %.200s has no password on its first "
                             "line",
                             pf);
    if ((c->etcd_password = strdup(line)) == NULL)
        return -ENOMEM;
    return 0;
}

/* A copy of [p, p+len) without surrounding blanks. */
static char *ctrun_rdzv_conf__trimmed(const char *p, size_t len)
{
    while (len > 0 && isspace((unsigned char)*p)) {
        p++;
        len--;
    }
    while (len > 0 && isspace((unsigned char)p[len - 1]))
        len--;
    return strndup(p, len);
}

static int ctrun_rdzv_conf__add(ctrun_rdzv_conf_t *c, char *key, char *value)
{
    for (size_t i = 0; i < c->count; i++) {
        if (strcmp(c->items[i].key, key) == 0) {
            free(key);
            free(c->items[i].value);
            c->items[i].value = value;
            return 0;
        }
    }
    ctrun_kv_t *items = realloc(c->items, (c->count + 1) * sizeof *items);
    if (items == NULL) {
        free(key);
        free(value);
        return -ENOMEM;
    }
    c->items = items;
    c->items[c->count++] = (ctrun_kv_t){.key = key, .value = value};
    return 0;
}

static int ctrun_rdzv_conf__seconds(const ctrun_rdzv_conf_t *c, const char *key, double dflt,
                                    double *out, ct_errbuf_t *eb)
{
    const char *v = ctrun_rdzv_conf_get(c, key);
    *out = dflt;
    if (v == NULL)
        return 0;
    int rc = ct_parse_double(v, 1e-3, 1e9, out, eb);
    return rc == 0 ? 0 : ct_errbuf_wrap(eb, rc, "%s", key);
}

/* Typed values of the known keys. */
static int ctrun_rdzv_conf__typed(ctrun_rdzv_conf_t *c, ct_errbuf_t *eb)
{
    int rc;
    if ((rc = ctrun_rdzv_conf__seconds(c, "timeout", 900, &c->timeout_s, eb)) != 0 ||
        (rc = ctrun_rdzv_conf__seconds(c, "join_timeout", 600, &c->join_timeout_s, eb)) != 0 ||
        (rc = ctrun_rdzv_conf__seconds(c, "last_call_timeout", 30, &c->last_call_timeout_s, eb)) !=
            0 ||
        (rc = ctrun_rdzv_conf__seconds(c, "close_timeout", 30, &c->close_timeout_s, eb)) != 0 ||
        (rc = ctrun_rdzv_conf__seconds(c, "read_timeout", 60, &c->read_timeout_s, eb)) != 0 ||
        (rc = ctrun_rdzv_conf__seconds(c, "heartbeat_timeout", 5, &c->heartbeat_timeout_s, eb)) !=
            0 ||
        (rc = ctrun_rdzv_conf__seconds(c, "keep_alive_interval", 5, &c->keep_alive_interval_s,
                                       eb)) != 0 ||
        (rc = ctrun_rdzv_conf__seconds(c, "etcd_timeout", 10, &c->etcd_timeout_s, eb)) != 0)
        return rc;
    const char *v = ctrun_rdzv_conf_get(c, "keep_alive_max_attempt");
    c->keep_alive_max_attempt = 3;
    if (v != NULL && (rc = ct_parse_int(v, 1, INT_MAX, &c->keep_alive_max_attempt, eb)) != 0)
        return ct_errbuf_wrap(eb, rc, "keep_alive_max_attempt");
    bool interval_given = ctrun_rdzv_conf_get(c, "keep_alive_interval") != NULL;
    c->node_hb_interval_s = interval_given ? c->keep_alive_interval_s : 1.0;
    if (ctrun_rdzv_conf_get(c, "heartbeat_timeout") != NULL)
        c->node_hb_timeout_s = c->heartbeat_timeout_s;
    else if (interval_given)
        c->node_hb_timeout_s = c->keep_alive_interval_s * c->keep_alive_max_attempt;
    else
        c->node_hb_timeout_s = 4.0; /* + the store host's check period: lost within 5 s */
    if (c->node_hb_timeout_s <= c->node_hb_interval_s)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "heartbeat_timeout: %g s is not longer than the heartbeat interval "
                             "(keep_alive_interval) %g s",
                             c->node_hb_timeout_s, c->node_hb_interval_s);
    c->is_host = -1;
    if ((v = ctrun_rdzv_conf_get(c, "is_host")) != NULL) {
        bool b;
        if ((rc = ct_parse_bool(v, &b, eb)) != 0)
            return ct_errbuf_wrap(eb, rc, "is_host");
        c->is_host = b;
    }
    if ((v = ctrun_rdzv_conf_get(c, "use_libuv")) != NULL) {
        bool b;
        if ((rc = ct_parse_bool(v, &b, eb)) != 0)
            return ct_errbuf_wrap(eb, rc, "use_libuv");
    }
    if ((v = ctrun_rdzv_conf_get(c, "rank")) != NULL) {
        int r;
        if ((rc = ct_parse_int(v, 0, INT_MAX, &r, eb)) != 0)
            return ct_errbuf_wrap(eb, rc, "rank");
    }
    if ((v = ctrun_rdzv_conf_get(c, "store_type")) != NULL && strcmp(v, "tcp") != 0) {
        if (strcmp(v, "file") == 0)
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "store_type: the file store is not supported by ctrun (use tcp)");
        return ct_errbuf_set(eb, CT_EPARSE,
                             "store_type: unknown store type \"%.32s\" (expected tcp)", v);
    }
    c->store_token = ctrun_rdzv_conf_get(c, "store_token");
    return ctrun_rdzv_conf__etcd(c, eb);
}

int ctrun_rdzv_conf_parse(const char *text, ctrun_rdzv_conf_t *out, ct_errbuf_t *eb)
{
    ctrun_rdzv_conf_t c = {0};
    int rc = 0;
    const char *p = text;
    while (*p != '\0' && isspace((unsigned char)*p))
        p++;
    size_t total = strlen(p);
    while (total > 0 && isspace((unsigned char)p[total - 1]))
        total--;
    const char *end = p + total;
    while (rc == 0 && p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma ? comma : end;
        const char *eq = memchr(p, '=', (size_t)(stop - p));
        char *key = ctrun_rdzv_conf__trimmed(p, (size_t)((eq ? eq : stop) - p));
        char *value = eq ? ctrun_rdzv_conf__trimmed(eq + 1, (size_t)(stop - eq - 1)) : strdup("");
        if (key == NULL || value == NULL) {
            free(key);
            free(value);
            rc = -ENOMEM;
        } else if (key[0] == '\0') {
            rc = ct_errbuf_set(eb, CT_EPARSE,
                               "\"%.80s\" is not in the format <key1>=<value1>,...,<keyN>=<valueN>",
                               text);
            free(key);
            free(value);
        } else if (value[0] == '\0') {
            rc = ct_errbuf_set(eb, CT_EPARSE, "option \"%.64s\" must have a value", key);
            free(key);
            free(value);
        } else {
            rc = ctrun_rdzv_conf__add(&c, key, value);
        }
        p = comma ? comma + 1 : end;
        if (rc == 0 && comma != NULL && p == end)
            rc = ct_errbuf_set(eb, CT_EPARSE,
                               "\"%.80s\" is not in the format <key1>=<value1>,...,<keyN>=<valueN>",
                               text);
    }
    if (rc == 0)
        rc = ctrun_rdzv_conf__typed(&c, eb);
    if (rc != 0) {
        ctrun_rdzv_conf_free(&c);
        return rc;
    }
    *out = c;
    return 0;
}
