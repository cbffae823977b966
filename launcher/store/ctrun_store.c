/*
 * ctrun_store.c - the store server of ctrun_store.h: its lifecycle (create: limits, table, random
 * hash key, listening socket, authentication timer; close, at once or after a linger; freeing
 * once every handle has closed) and the in-process API the agent uses (set, get, add,
 * compare_set, delete, foreach, wipe, watches, stats), each ending with a flush of the output it
 * caused. How the server's state is laid out is described in ctrun_store_internal.h.
 *
 * Deliberately not here: the table and its operations (ctrun_store_table.c), waits and watches
 * (ctrun_store_wait.c), connections (ctrun_store_conn.c, ctrun_store_listen.c), requests
 * (ctrun_store_req.c), and the hooks for tests (ctrun_store_hooks.c).
 */
#include "ctrun_store.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "ct_log.h"
#include "ct_store_auth.h"
#include "ctrun_store_internal.h"

/* ---- lifecycle -------------------------------------------------------------------------- */

static void ctrun_store__free_state(ctrun_store_t *s)
{
    for (size_t b = 0; s->tab != NULL && b <= s->tab_mask; b++) {
        ctrun_store__entry_t *e = s->tab[b];
        while (e != NULL) {
            ctrun_store__entry_t *next = e->hnext;
            while (e->qhead != NULL) {
                ctrun_store__item_t *it = e->qhead;
                e->qhead = it->next;
                free(it);
            }
            free(e->value);
            free(e);
            e = next;
        }
    }
    free(s->tab);
    while (s->watches != NULL) {
        ctrun_store_watch_t *w = s->watches;
        s->watches = w->next;
        free(w);
    }
    if (s->token != NULL) {
        memset(s->token, 0, s->token_len);
        free(s->token);
    }
    free(s->rbuf);
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    if (s->spare_fd >= 0)
        close(s->spare_fd);
}

void ctrun_store__maybe_finish(ctrun_store_t *s)
{
    if (!s->closing || s->open_handles > 0)
        return;
    void (*cb)(void *) = s->close_cb;
    void *data = s->close_data;
    ctrun_store__free_state(s);
    free(s);
    if (cb != NULL)
        cb(data);
}

static void ctrun_store__on_handle_closed(uv_handle_t *h)
{
    ctrun_store_t *s = h->data;
    s->open_handles--;
    ctrun_store__maybe_finish(s);
}

int ctrun_store_create(uv_loop_t *loop, const ctrun_store_opts_t *opts, ctrun_store_t **out,
                       ct_errbuf_t *eb)
{
    static const ctrun_store_opts_t defaults = {0};
    if (opts == NULL)
        opts = &defaults;
    *out = NULL;
    if (opts->port < 0 || opts->port > 65535)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "store port %d out of range (0..65535)",
                             opts->port);
    if (opts->token != NULL) {
        int rc = ct_store_auth_check_token(opts->token, "store token", eb);
        if (rc != 0)
            return rc;
    }
    ctrun_store_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    s->loop = loop;
    s->listen_fd = -1;
    s->spare_fd = -1;
    s->limits = opts->limits ? *opts->limits : ct_store_default_limits;
    s->max_connections =
        opts->max_connections ? opts->max_connections : CTRUN_STORE_DEFAULT_MAX_CONNECTIONS;
    s->max_bytes = opts->max_bytes ? opts->max_bytes : CTRUN_STORE_DEFAULT_MAX_BYTES;
    s->tab_mask = 1023;
    s->tab = calloc(s->tab_mask + 1, sizeof *s->tab);
    s->rbuf = malloc(CTRUN_STORE__READ_CHUNK);
    if (opts->token != NULL) {
        s->token_len = strlen(opts->token);
        s->token = malloc(s->token_len + 1);
        if (s->token != NULL)
            memcpy(s->token, opts->token, s->token_len + 1);
    }
    if (s->tab == NULL || s->rbuf == NULL || (opts->token != NULL && s->token == NULL)) {
        ctrun_store__free_state(s);
        free(s);
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    }
    if (getrandom(s->sipkey, sizeof s->sipkey, 0) != (ssize_t)sizeof s->sipkey) {
        s->sipkey[0] = (uint64_t)uv_hrtime();
        s->sipkey[1] = (uint64_t)getpid() * 0x9E3779B97F4A7C15ULL;
    }
    /* A peer vanishing mid-write must cost a connection, not the process. */
    struct sigaction sa;
    if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) {
        signal(SIGPIPE, SIG_IGN);
        ct_log_debug("store: SIGPIPE set to SIG_IGN");
    }
    int rc = ctrun_store__listen(s, opts->host, opts->port, eb);
    if (rc == 0 && s->token != NULL) {
        rc = uv_timer_init(loop, &s->auth_timer);
        if (rc == 0) {
            s->has_timer = true;
            s->open_handles++;
            s->auth_timer.data = s;
            rc = uv_timer_start(&s->auth_timer, ctrun_store__on_auth_timer, 1000, 1000);
        }
        if (rc != 0)
            ct_errbuf_set(eb, rc, "store: timer: %s", uv_strerror(rc));
    }
    if (rc != 0) {
        if (s->open_handles == 0) {
            ctrun_store__free_state(s);
            free(s);
        } else {
            /* Handles were opened: they must close through the loop before the memory goes. */
            ctrun_store_close(s, NULL, NULL);
        }
        return rc;
    }
    *out = s;
    return 0;
}

void ctrun_store_close(ctrun_store_t *s, void (*cb)(void *data), void *data)
{
    if (s == NULL || s->closing)
        return;
    s->closing = true;
    s->close_cb = cb;
    s->close_data = data;
    while (s->conns != NULL)
        ctrun_store__conn_close(s->conns);
    s->dirty = NULL; /* closing connections are never flushed */
    if (s->has_listener) {
        s->listener.data = s;
        uv_close((uv_handle_t *)&s->listener, ctrun_store__on_handle_closed);
    }
    if (s->has_accept_timer)
        uv_close((uv_handle_t *)&s->accept_timer, ctrun_store__on_handle_closed);
    s->has_accept_timer = false;
    if (s->has_timer)
        uv_close((uv_handle_t *)&s->auth_timer, ctrun_store__on_handle_closed);
    if (s->has_linger)
        uv_close((uv_handle_t *)&s->linger_timer, ctrun_store__on_handle_closed);
    s->has_linger = false;
    s->lingering = false;
    /* With nothing open (not even a listener), the memory can go now; cb still runs later
     * from the loop's point of view only if handles were open, so call it here. */
    ctrun_store__maybe_finish(s);
}

static void ctrun_store__on_linger_timer(uv_timer_t *t)
{
    ctrun_store_t *s = t->data;
    if (s->st.connections > 0)
        ct_log_debug("store: closing with %llu client connection%s still open",
                     (unsigned long long)s->st.connections, s->st.connections == 1 ? "" : "s");
    ctrun_store_close(s, s->linger_cb, s->linger_data);
}

void ctrun_store_close_gently(ctrun_store_t *s, uint64_t linger_ms, void (*cb)(void *data),
                              void *data)
{
    if (s == NULL || s->closing || s->lingering)
        return;
    if (s->st.connections == 0 || linger_ms == 0 || uv_timer_init(s->loop, &s->linger_timer) != 0) {
        ctrun_store_close(s, cb, data);
        return;
    }
    s->has_linger = true;
    s->lingering = true;
    s->open_handles++;
    s->linger_cb = cb;
    s->linger_data = data;
    s->linger_timer.data = s;
    uv_timer_start(&s->linger_timer, ctrun_store__on_linger_timer, linger_ms, 0);
}

int ctrun_store_port(const ctrun_store_t *s)
{
    return s->port;
}

const char *ctrun_store_address(const ctrun_store_t *s)
{
    return s->address;
}

/* ---- in-process API --------------------------------------------------------------------- */

static int ctrun_store__api_key(const ctrun_store_t *s, const char *key, size_t *klen,
                                ct_errbuf_t *eb)
{
    if (s->closing)
        return ct_errbuf_set(eb, CT_ESTATE, "store is closing");
    if (key == NULL)
        return ct_errbuf_set(eb, CT_EPARSE, "NULL key");
    *klen = strlen(key);
    if (*klen > s->limits.max_key_len)
        return ct_errbuf_set(eb, CT_ELIMIT, "key of %zu bytes exceeds the %llu-byte limit", *klen,
                             (unsigned long long)s->limits.max_key_len);
    return 0;
}

int ctrun_store_set(ctrun_store_t *s, const char *key, const void *value, size_t len,
                    ct_errbuf_t *eb)
{
    size_t klen = 0;
    int rc = ctrun_store__api_key(s, key, &klen, eb);
    if (rc != 0)
        return rc;
    if (len > s->limits.max_value_len)
        return ct_errbuf_set(eb, CT_ELIMIT, "value of %zu bytes exceeds the %llu-byte limit", len,
                             (unsigned long long)s->limits.max_value_len);
    ctrun_store__ctx_t ctx = {.conn = NULL, .op = CT_STORE_OP_SET};
    rc = ctrun_store__write(s, &ctx, (const uint8_t *)key, klen, value, len, false,
                            CTRUN_STORE__WAKE_ALL, eb);
    ctrun_store__flush_dirty(s);
    return rc;
}

int ctrun_store_get(ctrun_store_t *s, const char *key, ct_store_bytes_t *value)
{
    size_t klen = 0;
    int rc = ctrun_store__api_key(s, key, &klen, NULL);
    if (rc != 0)
        return rc;
    ctrun_store__entry_t *e = ctrun_store__lookup(s, (const uint8_t *)key, klen, NULL);
    if (e == NULL || !e->has_value)
        return -ENOENT;
    *value = (ct_store_bytes_t){.data = e->value, .len = e->vlen};
    return 0;
}

int ctrun_store_add(ctrun_store_t *s, const char *key, int64_t delta, int64_t *result,
                    ct_errbuf_t *eb)
{
    size_t klen = 0;
    int rc = ctrun_store__api_key(s, key, &klen, eb);
    if (rc != 0)
        return rc;
    ctrun_store__ctx_t ctx = {.conn = NULL, .op = CT_STORE_OP_ADD};
    int64_t v = 0;
    rc =
        ctrun_store__add(s, &ctx, (const uint8_t *)key, klen, delta, CTRUN_STORE__WAKE_ALL, &v, eb);
    if (rc == 0 && result != NULL)
        *result = v;
    ctrun_store__flush_dirty(s);
    return rc;
}

int ctrun_store_compare_set(ctrun_store_t *s, const char *key, const void *expected,
                            size_t expected_len, const void *desired, size_t desired_len,
                            ct_store_bytes_t *current, ct_errbuf_t *eb)
{
    size_t klen = 0;
    int rc = ctrun_store__api_key(s, key, &klen, eb);
    if (rc != 0)
        return rc;
    if (desired_len > s->limits.max_value_len)
        return ct_errbuf_set(eb, CT_ELIMIT, "value of %zu bytes exceeds the %llu-byte limit",
                             desired_len, (unsigned long long)s->limits.max_value_len);
    ctrun_store__ctx_t ctx = {.conn = NULL, .op = CT_STORE_OP_COMPARE_SET};
    ct_store_bytes_t reply;
    rc = ctrun_store__compare_set(s, &ctx, (const uint8_t *)key, klen,
                                  (ct_store_bytes_t){.data = expected, .len = expected_len},
                                  (ct_store_bytes_t){.data = desired, .len = desired_len}, &reply,
                                  eb);
    if (rc == 0 && current != NULL) {
        /* After a swap, point at the stored copy rather than at the caller's own buffer. */
        ctrun_store__entry_t *e = ctrun_store__lookup(s, (const uint8_t *)key, klen, NULL);
        if (reply.data == desired && e != NULL && e->has_value)
            reply = (ct_store_bytes_t){.data = e->value, .len = e->vlen};
        *current = reply;
    }
    ctrun_store__flush_dirty(s);
    return rc;
}

int ctrun_store_delete(ctrun_store_t *s, const char *key, bool *deleted)
{
    size_t klen = 0;
    int rc = ctrun_store__api_key(s, key, &klen, NULL);
    if (rc != 0)
        return rc;
    ctrun_store__ctx_t ctx = {.conn = NULL, .op = CT_STORE_OP_DELETE_KEY};
    bool d = ctrun_store__delete(s, &ctx, (const uint8_t *)key, klen);
    if (deleted != NULL)
        *deleted = d;
    ctrun_store__flush_dirty(s);
    return 0;
}

int64_t ctrun_store_num_keys(const ctrun_store_t *s)
{
    return (int64_t)s->st.keys;
}

size_t ctrun_store_foreach(ctrun_store_t *s, const char *prefix,
                           void (*fn)(ct_store_bytes_t key, ct_store_bytes_t value, void *data),
                           void *data)
{
    size_t pl = prefix != NULL ? strlen(prefix) : 0, n = 0;
    for (size_t b = 0; b <= s->tab_mask; b++) {
        for (ctrun_store__entry_t *e = s->tab[b]; e != NULL; e = e->hnext) {
            if (!e->has_value || e->klen < pl || (pl > 0 && memcmp(e->key, prefix, pl) != 0))
                continue;
            n++;
            if (fn != NULL)
                fn((ct_store_bytes_t){.data = e->key, .len = e->klen},
                   (ct_store_bytes_t){.data = e->value, .len = e->vlen}, data);
        }
    }
    return n;
}

int ctrun_store_wipe_prefix(ctrun_store_t *s, const char *prefix, size_t *ndeleted)
{
    if (s->closing)
        return CT_ESTATE;
    if (prefix == NULL)
        return CT_EPARSE;
    int rc = ctrun_store__wipe(s, &prefix, 1, false, ndeleted);
    ctrun_store__flush_dirty(s);
    return rc;
}

int ctrun_store_wipe_except(ctrun_store_t *s, const char *const *keep, size_t nkeep,
                            size_t *ndeleted)
{
    if (s->closing)
        return CT_ESTATE;
    for (size_t i = 0; i < nkeep; i++)
        if (keep[i] == NULL)
            return CT_EPARSE;
    int rc = ctrun_store__wipe(s, keep, nkeep, true, ndeleted);
    ctrun_store__flush_dirty(s);
    return rc;
}

int ctrun_store_watch(ctrun_store_t *s, const char *key, bool prefix, ctrun_store_watch_cb cb,
                      void *data, ctrun_store_watch_t **out, ct_errbuf_t *eb)
{
    size_t klen = 0;
    int rc = ctrun_store__api_key(s, key, &klen, eb);
    if (rc != 0)
        return rc;
    if (cb == NULL)
        return ct_errbuf_set(eb, CT_EPARSE, "watch without a callback");
    ctrun_store_watch_t *w = calloc(1, sizeof *w + klen + 1);
    if (w == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    w->cb = cb;
    w->data = data;
    w->prefix = prefix;
    w->klen = klen;
    memcpy(w->key, key, klen + 1);
    /* Appended at the end: watches fire in the order they were added. */
    ctrun_store_watch_t **pp = &s->watches;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = w;
    if (out != NULL)
        *out = w;
    return 0;
}

void ctrun_store_unwatch(ctrun_store_t *s, ctrun_store_watch_t *w)
{
    if (s == NULL || w == NULL || w->dead)
        return;
    w->dead = true;
    s->watches_dead = true;
    ctrun_store__sweep_watches(s);
}

void ctrun_store_stats(const ctrun_store_t *s, ctrun_store_stats_t *out)
{
    *out = s->st;
    out->stored_bytes = s->memory;
}
