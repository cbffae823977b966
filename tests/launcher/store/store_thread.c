/*
 * store_thread.c - a store on a background loop thread, for socket-level tests.
 */
#include "store_thread.h"

#include <string.h>

#include "ct_test.h"

static void on_async(uv_async_t *a)
{
    store_thread_t *t = a->data;
    pthread_mutex_lock(&t->mu);
    if (t->pending) {
        t->fn(t->store, t->arg);
        t->pending = false;
        pthread_cond_broadcast(&t->cv);
    }
    bool stop = t->stop;
    pthread_mutex_unlock(&t->mu);
    if (stop) {
        ctrun_store_close(t->store, NULL, NULL);
        uv_close((uv_handle_t *)&t->async, NULL);
    }
}

static void *run(void *arg)
{
    store_thread_t *t = arg;
    uv_run(&t->loop, UV_RUN_DEFAULT);
    return NULL;
}

int store_thread_start(store_thread_t *t, const ctrun_store_opts_t *opts, ct_errbuf_t *eb)
{
    memset(t, 0, sizeof *t);
    CT_ASSERT_OK(uv_loop_init(&t->loop));
    int rc = ctrun_store_create(&t->loop, opts, &t->store, eb);
    if (rc != 0) {
        uv_run(&t->loop, UV_RUN_DEFAULT);
        uv_loop_close(&t->loop);
        return rc;
    }
    t->port = ctrun_store_port(t->store);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    CT_ASSERT_OK(uv_async_init(&t->loop, &t->async, on_async));
    t->async.data = t;
    CT_ASSERT_OK(pthread_create(&t->thread, NULL, run, t));
    return 0;
}

void store_thread_call(store_thread_t *t, void (*fn)(ctrun_store_t *s, void *arg), void *arg)
{
    pthread_mutex_lock(&t->mu);
    t->fn = fn;
    t->arg = arg;
    t->pending = true;
    uv_async_send(&t->async);
    while (t->pending)
        pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

static void get_stats(ctrun_store_t *s, void *arg)
{
    ctrun_store_stats(s, arg);
}

void store_thread_stats(store_thread_t *t, ctrun_store_stats_t *out)
{
    store_thread_call(t, get_stats, out);
}

void store_thread_stop(store_thread_t *t)
{
    pthread_mutex_lock(&t->mu);
    t->stop = true;
    pthread_mutex_unlock(&t->mu);
    uv_async_send(&t->async);
    pthread_join(t->thread, NULL);
    CT_ASSERT_EQ(uv_loop_close(&t->loop), 0);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
}
