/*
 * ctrun_rdzv_conf.h - --rdzv_conf "k1=v1,k2=v2": torchrun's splitting rules, and typed,
 * validated values for the keys ctrun knows (with torchrun's defaults). Unknown keys are kept
 * (torchrun passes them to the backend) so the caller can warn about them.
 */
#ifndef CTRUN_RDZV_CONF_H
#define CTRUN_RDZV_CONF_H

#include <stdbool.h>
#include <stddef.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One "key=value" of --rdzv_conf, trimmed, in the order given (a repeated key: last wins). */
typedef struct ctrun_kv {
    char *key;
    char *value;
} ctrun_kv_t;

/* --rdzv_conf: the raw pairs plus the typed values of the keys ctrun knows (defaults are
 * torchrun's). Times are seconds. */
typedef struct ctrun_rdzv_conf {
    ctrun_kv_t *items;
    size_t count;
    double timeout_s;             /* timeout: static store wait / op timeout (900) */
    double join_timeout_s;        /* join_timeout (600) */
    double last_call_timeout_s;   /* last_call_timeout (30) */
    double close_timeout_s;       /* close_timeout (30) */
    double read_timeout_s;        /* read_timeout: store connect/op timeout (60) */
    double heartbeat_timeout_s;   /* heartbeat_timeout (5) */
    double keep_alive_interval_s; /* keep_alive_interval (5) */
    int keep_alive_max_attempt;   /* keep_alive_max_attempt (3) */
    /* ctrun's node heartbeats: every node_hb_interval_s, a node silent for node_hb_timeout_s
     * is lost. interval = keep_alive_interval when given, else 1 s; timeout = heartbeat_timeout
     * when given, else interval x keep_alive_max_attempt when keep_alive_interval is given
     * (torchrun's rule), else 4 s (a dead node is declared lost within 5 s). */
    double node_hb_interval_s, node_hb_timeout_s;
    /* etcd-v3: how long one request to etcd may take over every member (etcd_timeout, 10) */
    double etcd_timeout_s;
    /* etcd-v3: protocol=https, cacert, cert, key (readable files; they point into items), user
     * and the first line of password_file (malloc'd) */
    bool etcd_https;
    const char *etcd_cacert, *etcd_cert, *etcd_key, *etcd_user;
    char *etcd_password;
    int is_host;             /* is_host: -1 unset (inferred), 0, 1 */
    const char *store_token; /* store_token: shared secret (points into items), or NULL */
} ctrun_rdzv_conf_t;

/* Parses text: split on ',', then on the first '=', blanks trimmed; "" is an empty conf.
 * Every key needs a value; a repeated key keeps the last value. Known keys are validated:
 * the *_timeout keys and keep_alive_interval are numbers > 0, keep_alive_max_attempt an
 * integer >= 1, is_host and use_libuv booleans, rank an integer >= 0, store_type "tcp"; the
 * node heartbeat timeout must be longer than its interval; protocol http or https, cacert, cert
 * and key readable files (https only; cert and key together), user and password_file together
 * (the file's first line is the password).
 * Errors: CT_EPARSE / CT_ERANGE_VALUE with the key in eb; out is left empty. */
int ctrun_rdzv_conf_parse(const char *text, ctrun_rdzv_conf_t *out, ct_errbuf_t *eb);

void ctrun_rdzv_conf_free(ctrun_rdzv_conf_t *conf);

/* The value of key, or NULL. */
const char *ctrun_rdzv_conf_get(const ctrun_rdzv_conf_t *conf, const char *key);

/* True for the keys ctrun understands. */
bool ctrun_rdzv_conf_known(const char *key);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_RDZV_CONF_H */
