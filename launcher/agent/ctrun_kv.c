/*
 * ctrun_kv.c - the two backends of ctrun_kv.h. Requests and completions are one struct, moved
 * between singly linked FIFOs: a lane's queue (remote), the pending-watch list (local GETs of
 * missing keys), and the completion queue that the uv_async callback drains on the loop.
 */
#include "ctrun_kv.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "ct_store_client.h"

typedef struct ctrun_kv__req ctrun_kv__req_t;
struct ctrun_kv__req {
    ctrun_kv__req_t *next;
    ctrun_kv_t *kv;
    ctrun_kv_op_t op;
    uint64_t tag;
    char *key;
    uint8_t *value, *desired;
    size_t len, desired_len;
    int64_t delta;
    /* result */
    int rc;
    char error[CT_ERRBUF_SIZE];
    int64_t num;
    uint8_t *out; /* NUL-terminated copy */
    size_t out_len;
    ctrun_store_watch_t *watch; /* local GET waiting for its key */
};

typedef struct ctrun_kv__fifo {
    ctrun_kv__req_t *head, *tail;
} ctrun_kv__fifo_t;

static void ctrun_kv__push(ctrun_kv__fifo_t *q, ctrun_kv__req_t *r)
{
    r->next = NULL;
    if (q->tail != NULL)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
}

static ctrun_kv__req_t *ctrun_kv__pop(ctrun_kv__fifo_t *q)
{
    ctrun_kv__req_t *r = q->head;
    if (r != NULL) {
        q->head = r->next;
        if (q->head == NULL)
            q->tail = NULL;
        r->next = NULL;
    }
    return r;
}

static void ctrun_kv__req_free(ctrun_kv__req_t *r)
{
    if (r == NULL)
        return;
    free(r->key);
    free(r->value);
    free(r->desired);
    free(r->out);
    free(r);
}

/* One helper thread with its own connection. */
typedef struct ctrun_kv__lane {
    ctrun_kv_t *kv;
    pthread_t thread;
    bool started;
    ctrun_kv__fifo_t queue; /* guarded by kv->mutex */
    pthread_cond_t cond;
    ct_store_client_t client;
    ct_store_client_progress_t progress; /* its client's connecting, read from the loop */
    bool connected;
    bool waits; /* this lane runs GETs */
} ctrun_kv__lane_t;

struct ctrun_kv {
    uv_loop_t *loop;
    ctrun_kv_cb cb;
    void *cb_data;
    uv_async_t async;
    bool closing;
    ctrun_kv__fifo_t done; /* completions for the loop; guarded by mutex when remote */
    /* local */
    ctrun_store_t *store;
    ctrun_kv__req_t *watching; /* local GETs registered as watches (linked through next) */
    /* remote */
    bool remote;
    pthread_mutex_t mutex;
    bool stop; /* guarded by mutex */
    int cancel_fd;
    ctrun_kv__lane_t lanes[2];
    ctrun_kv_remote_opts_t opts;
    char *host, *token;
};

/* ---- completion delivery (loop thread) -------------------------------------------------- */

static void ctrun_kv__deliver(uv_async_t *h)
{
    ctrun_kv_t *kv = h->data;
    for (;;) {
        if (kv->remote)
            pthread_mutex_lock(&kv->mutex);
        ctrun_kv__req_t *r = ctrun_kv__pop(&kv->done);
        if (kv->remote)
            pthread_mutex_unlock(&kv->mutex);
        if (r == NULL || kv->closing) {
            ctrun_kv__req_free(r);
            if (r == NULL)
                return;
            continue;
        }
        ctrun_kv_reply_t reply = {
            .tag = r->tag,
            .op = r->op,
            .key = r->key,
            .rc = r->rc,
            .error = r->error,
            .num = r->num,
            .data = r->out,
            .len = r->out_len,
        };
        kv->cb(kv->cb_data, &reply);
        ctrun_kv__req_free(r);
    }
}

static void ctrun_kv__set_out(ctrun_kv__req_t *r, const void *data, size_t len)
{
    r->out = malloc(len + 1);
    if (r->out == NULL) {
        r->rc = -ENOMEM;
        snprintf(r->error, sizeof r->error, "out of memory for a %zu-byte value of %s", len,
                 r->key);
        return;
    }
    if (len > 0)
        memcpy(r->out, data, len);
    r->out[len] = '\0';
    r->out_len = len;
}

/* ---- local backend ------------------------------------------------------------------------ */

static void ctrun_kv__local_complete(ctrun_kv_t *kv, ctrun_kv__req_t *r)
{
    ctrun_kv__push(&kv->done, r);
    uv_async_send(&kv->async);
}

static void ctrun_kv__local_unlink(ctrun_kv_t *kv, ctrun_kv__req_t *r)
{
    for (ctrun_kv__req_t **p = &kv->watching; *p != NULL; p = &(*p)->next) {
        if (*p == r) {
            *p = r->next;
            r->next = NULL;
            return;
        }
    }
}

static void ctrun_kv__local_watch_cb(ctrun_store_t *s, const ctrun_store_event_t *ev, void *data)
{
    ctrun_kv__req_t *r = data;
    if (ev->kind == CT_STORE_WATCH_DELETED)
        return;
    ctrun_kv_t *kv = r->kv;
    ctrun_store_unwatch(s, r->watch);
    r->watch = NULL;
    ctrun_kv__local_unlink(kv, r);
    ctrun_kv__set_out(r, ev->value.data, ev->value.len);
    ctrun_kv__local_complete(kv, r);
}

static void ctrun_kv__local_run(ctrun_kv_t *kv, ctrun_kv__req_t *r)
{
    ct_errbuf_t eb = {{0}};
    ct_store_bytes_t cur = {0};
    switch (r->op) {
    case CTRUN_KV_SET:
        r->rc = ctrun_store_set(kv->store, r->key, r->value, r->len, &eb);
        break;
    case CTRUN_KV_ADD:
        r->rc = ctrun_store_add(kv->store, r->key, r->delta, &r->num, &eb);
        break;
    case CTRUN_KV_CAS:
        r->rc = ctrun_store_compare_set(kv->store, r->key, r->value, r->len, r->desired,
                                        r->desired_len, &cur, &eb);
        if (r->rc == 0)
            ctrun_kv__set_out(r, cur.data, cur.len);
        break;
    case CTRUN_KV_APPEND: {
        /* No in-process append: get + set is atomic here, since the store only changes on this
         * thread. */
        ct_store_bytes_t old = {0};
        int g = ctrun_store_get(kv->store, r->key, &old);
        size_t n = (g == 0 ? old.len : 0) + r->len;
        uint8_t *joined = malloc(n ? n : 1);
        if (joined == NULL) {
            r->rc = ct_errbuf_set(&eb, -ENOMEM, "out of memory appending to %s", r->key);
            break;
        }
        if (g == 0 && old.len > 0)
            memcpy(joined, old.data, old.len);
        if (r->len > 0)
            memcpy(joined + (g == 0 ? old.len : 0), r->value, r->len);
        r->rc = ctrun_store_set(kv->store, r->key, joined, n, &eb);
        free(joined);
        break;
    }
    case CTRUN_KV_GET:
        r->rc = ctrun_store_get(kv->store, r->key, &cur);
        if (r->rc == 0) {
            ctrun_kv__set_out(r, cur.data, cur.len);
            break;
        }
        /* Missing: complete when it is written. */
        r->rc = ctrun_store_watch(kv->store, r->key, false, ctrun_kv__local_watch_cb, r, &r->watch,
                                  &eb);
        if (r->rc == 0) {
            r->next = kv->watching;
            kv->watching = r;
            return;
        }
        break;
    }
    if (r->rc != 0)
        snprintf(r->error, sizeof r->error, "%s", eb.msg[0] ? eb.msg : ct_strerror(r->rc));
    ctrun_kv__local_complete(kv, r);
}

/* ---- remote backend ----------------------------------------------------------------------- */

static void ctrun_kv__remote_run(ctrun_kv__lane_t *lane, ctrun_kv__req_t *r)
{
    ctrun_kv_t *kv = lane->kv;
    ct_errbuf_t eb = {{0}};
    if (!lane->connected) {
        ct_store_client_opts_t o = {
            .timeout_ms = lane->waits ? -1 : kv->opts.op_timeout_ms,
            .connect_timeout_ms = kv->opts.connect_timeout_ms,
            /* A store that accepted the connection answers the handshake at once; one that
             * does not within an operation's deadline is not going to. */
            .handshake_timeout_ms = kv->opts.op_timeout_ms,
            .backoff_max_ms = kv->opts.backoff_max_ms,
            .token = kv->token,
            .cancel_fd = kv->cancel_fd,
            .progress = &lane->progress,
        };
        r->rc = ct_store_client_connect(&lane->client, kv->host, kv->opts.port, &o, &eb);
        if (r->rc != 0) {
            ct_store_client_close(&lane->client);
            snprintf(r->error, sizeof r->error, "%s", eb.msg);
            return;
        }
        lane->connected = true;
    }
    ct_store_client_t *c = &lane->client;
    ct_store_bytes_t cur = {0};
    switch (r->op) {
    case CTRUN_KV_SET:
        r->rc = ct_store_set(c, r->key, r->value, r->len, &eb);
        break;
    case CTRUN_KV_ADD:
        r->rc = ct_store_add(c, r->key, r->delta, &r->num, &eb);
        break;
    case CTRUN_KV_CAS:
        r->rc = ct_store_compare_set(c, r->key, r->value, r->len, r->desired, r->desired_len, &cur,
                                     &eb);
        if (r->rc == 0)
            ctrun_kv__set_out(r, cur.data, cur.len);
        break;
    case CTRUN_KV_APPEND:
        r->rc = ct_store_append(c, r->key, r->value, r->len, &eb);
        break;
    case CTRUN_KV_GET:
        r->rc = ct_store_get(c, r->key, &cur, &eb);
        if (r->rc == 0)
            ctrun_kv__set_out(r, cur.data, cur.len);
        break;
    }
    if (r->rc != 0 && r->error[0] == '\0')
        snprintf(r->error, sizeof r->error, "%s", eb.msg[0] ? eb.msg : ct_strerror(r->rc));
}

static void *ctrun_kv__lane_main(void *arg)
{
    ctrun_kv__lane_t *lane = arg;
    ctrun_kv_t *kv = lane->kv;
    pthread_mutex_lock(&kv->mutex);
    for (;;) {
        while (!kv->stop && lane->queue.head == NULL)
            pthread_cond_wait(&lane->cond, &kv->mutex);
        if (kv->stop)
            break;
        ctrun_kv__req_t *r = ctrun_kv__pop(&lane->queue);
        pthread_mutex_unlock(&kv->mutex);
        ctrun_kv__remote_run(lane, r);
        pthread_mutex_lock(&kv->mutex);
        ctrun_kv__push(&kv->done, r);
        uv_async_send(&kv->async);
    }
    pthread_mutex_unlock(&kv->mutex);
    ct_store_client_close(&lane->client);
    return NULL;
}

/* ---- common ------------------------------------------------------------------------------- */

static int ctrun_kv__open(uv_loop_t *loop, ctrun_kv_cb cb, void *data, ctrun_kv_t **out,
                          ct_errbuf_t *eb)
{
    ctrun_kv_t *kv = calloc(1, sizeof *kv);
    if (kv == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    kv->loop = loop;
    kv->cb = cb;
    kv->cb_data = data;
    kv->cancel_fd = -1;
    int rc = uv_async_init(loop, &kv->async, ctrun_kv__deliver);
    if (rc != 0) {
        free(kv);
        return ct_errbuf_set(eb, rc, "uv_async_init: %s", uv_strerror(rc));
    }
    kv->async.data = kv;
    *out = kv;
    return 0;
}

int ctrun_kv_open_local(uv_loop_t *loop, ctrun_store_t *store, ctrun_kv_cb cb, void *data,
                        ctrun_kv_t **out, ct_errbuf_t *eb)
{
    int rc = ctrun_kv__open(loop, cb, data, out, eb);
    if (rc == 0)
        (*out)->store = store;
    return rc;
}

static void ctrun_kv__free_cb(uv_handle_t *h)
{
    ctrun_kv_t *kv = h->data;
    free(kv->host);
    if (kv->token != NULL) {
        memset(kv->token, 0, strlen(kv->token));
        free(kv->token);
    }
    free(kv);
}

static void ctrun_kv__stop_lanes(ctrun_kv_t *kv)
{
    pthread_mutex_lock(&kv->mutex);
    kv->stop = true;
    for (int i = 0; i < 2; i++)
        pthread_cond_signal(&kv->lanes[i].cond);
    pthread_mutex_unlock(&kv->mutex);
    uint64_t one = 1;
    /* Level-triggered: every later poll of the clients sees it too. */
    while (write(kv->cancel_fd, &one, sizeof one) < 0 && errno == EINTR) {
    }
    for (int i = 0; i < 2; i++) {
        if (kv->lanes[i].started)
            pthread_join(kv->lanes[i].thread, NULL);
        kv->lanes[i].started = false;
        ctrun_kv__req_t *r;
        while ((r = ctrun_kv__pop(&kv->lanes[i].queue)) != NULL)
            ctrun_kv__req_free(r);
        pthread_cond_destroy(&kv->lanes[i].cond);
    }
    close(kv->cancel_fd);
    kv->cancel_fd = -1;
    pthread_mutex_destroy(&kv->mutex);
}

int ctrun_kv_open_remote(uv_loop_t *loop, const ctrun_kv_remote_opts_t *opts, ctrun_kv_cb cb,
                         void *data, ctrun_kv_t **out, ct_errbuf_t *eb)
{
    ctrun_kv_t *kv = NULL;
    int rc = ctrun_kv__open(loop, cb, data, &kv, eb);
    if (rc != 0 || kv == NULL) /* kv is set when rc is 0; the check tells the compiler so */
        return rc != 0 ? rc : -ENOMEM;
    kv->remote = true;
    kv->opts = *opts;
    kv->host = strdup(opts->host);
    kv->token = opts->token ? strdup(opts->token) : NULL;
    kv->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (kv->host == NULL || (opts->token != NULL && kv->token == NULL) || kv->cancel_fd < 0) {
        rc = kv->cancel_fd < 0 ? -errno : -ENOMEM;
        if (kv->cancel_fd >= 0)
            close(kv->cancel_fd);
        uv_close((uv_handle_t *)&kv->async, ctrun_kv__free_cb);
        return ct_errbuf_set(eb, rc, "opening the store client: %s", ct_strerror(rc));
    }
    pthread_mutex_init(&kv->mutex, NULL);
    /* The helper threads take no signals: those belong to the loop's signal handles. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    for (int i = 0; i < 2; i++) {
        ctrun_kv__lane_t *lane = &kv->lanes[i];
        lane->kv = kv;
        lane->waits = i == 1;
        lane->client.fd = -1;
        pthread_cond_init(&lane->cond, NULL);
    }
    for (int i = 0; i < 2; i++) {
        ctrun_kv__lane_t *lane = &kv->lanes[i];
        rc = -pthread_create(&lane->thread, NULL, ctrun_kv__lane_main, lane);
        lane->started = rc == 0;
        if (rc != 0)
            break;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        ctrun_kv__stop_lanes(kv);
        uv_close((uv_handle_t *)&kv->async, ctrun_kv__free_cb);
        return ct_errbuf_set(eb, rc, "starting a store client thread: %s", ct_strerror(rc));
    }
    *out = kv;
    return 0;
}

/* Submits one request (key NUL-terminated; value/desired copied). Returns 0, -ENOMEM, or
 * CT_ESTATE after close. */
static int ctrun_kv__submit(ctrun_kv_t *kv, ctrun_kv_op_t op, const char *key, const void *value,
                            size_t len, const void *desired, size_t desired_len, int64_t delta,
                            uint64_t tag)
{
    if (kv->closing)
        return CT_ESTATE;
    ctrun_kv__req_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return -ENOMEM;
    r->kv = kv;
    r->op = op;
    r->tag = tag;
    r->delta = delta;
    r->key = strdup(key);
    r->len = len;
    r->desired_len = desired_len;
    r->value = malloc(len ? len : 1);
    r->desired = malloc(desired_len ? desired_len : 1);
    if (r->key == NULL || r->value == NULL || r->desired == NULL) {
        ctrun_kv__req_free(r);
        return -ENOMEM;
    }
    if (len > 0)
        memcpy(r->value, value, len);
    if (desired_len > 0)
        memcpy(r->desired, desired, desired_len);
    if (!kv->remote) {
        ctrun_kv__local_run(kv, r);
        return 0;
    }
    ctrun_kv__lane_t *lane = &kv->lanes[op == CTRUN_KV_GET ? 1 : 0];
    pthread_mutex_lock(&kv->mutex);
    ctrun_kv__push(&lane->queue, r);
    pthread_cond_signal(&lane->cond);
    pthread_mutex_unlock(&kv->mutex);
    return 0;
}

int ctrun_kv_set(ctrun_kv_t *kv, const char *key, const char *value, uint64_t tag)
{
    return ctrun_kv__submit(kv, CTRUN_KV_SET, key, value, strlen(value), NULL, 0, 0, tag);
}

int ctrun_kv_add(ctrun_kv_t *kv, const char *key, int64_t delta, uint64_t tag)
{
    return ctrun_kv__submit(kv, CTRUN_KV_ADD, key, NULL, 0, NULL, 0, delta, tag);
}

int ctrun_kv_cas(ctrun_kv_t *kv, const char *key, const char *expected, const char *desired,
                 uint64_t tag)
{
    return ctrun_kv__submit(kv, CTRUN_KV_CAS, key, expected, strlen(expected), desired,
                            strlen(desired), 0, tag);
}

int ctrun_kv_get(ctrun_kv_t *kv, const char *key, uint64_t tag)
{
    return ctrun_kv__submit(kv, CTRUN_KV_GET, key, NULL, 0, NULL, 0, 0, tag);
}

int ctrun_kv_append(ctrun_kv_t *kv, const char *key, const char *value, uint64_t tag)
{
    return ctrun_kv__submit(kv, CTRUN_KV_APPEND, key, value, strlen(value), NULL, 0, 0, tag);
}

bool ctrun_kv_unanswered(const ctrun_kv_t *kv, int64_t *since_ms)
{
    if (kv == NULL || !kv->remote)
        return false;
    int64_t earliest = INT64_MAX;
    for (int i = 0; i < 2; i++) {
        const ct_store_client_progress_t *p = &kv->lanes[i].progress;
        if (__atomic_load_n(&p->phase, __ATOMIC_ACQUIRE) != CT_STORE_PHASE_HANDSHAKE)
            continue;
        int64_t t = __atomic_load_n(&p->since_ms, __ATOMIC_RELAXED);
        if (t < earliest)
            earliest = t;
    }
    if (earliest == INT64_MAX)
        return false;
    if (since_ms != NULL)
        *since_ms = earliest;
    return true;
}

void ctrun_kv_close(ctrun_kv_t *kv)
{
    if (kv == NULL || kv->closing)
        return;
    kv->closing = true;
    if (kv->remote) {
        ctrun_kv__stop_lanes(kv);
    } else {
        ctrun_kv__req_t *r;
        while ((r = kv->watching) != NULL) {
            kv->watching = r->next;
            ctrun_store_unwatch(kv->store, r->watch);
            ctrun_kv__req_free(r);
        }
    }
    ctrun_kv__req_t *r;
    while ((r = ctrun_kv__pop(&kv->done)) != NULL)
        ctrun_kv__req_free(r);
    uv_close((uv_handle_t *)&kv->async, ctrun_kv__free_cb);
}
