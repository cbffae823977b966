/*
 * store_thread.h - runs a ctrun store on its own loop in a background thread, for tests that
 * talk to it over real sockets from the test's own thread(s).
 *
 * The store's API belongs to its loop's thread, so the test reaches it only through
 * store_thread_call(), which runs a function on that thread and waits for it.
 */
#ifndef STORE_THREAD_H
#define STORE_THREAD_H

#include <pthread.h>
#include <stdbool.h>

#include <uv.h>

#include "ctrun_store.h"

typedef struct store_thread {
    uv_loop_t loop;
    uv_async_t async;
    pthread_t thread;
    ctrun_store_t *store;
    int port;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    void (*fn)(ctrun_store_t *s, void *arg);
    void *arg;
    bool pending, stop;
} store_thread_t;

/* Creates the store (opts as ctrun_store_create) and starts the thread. */
int store_thread_start(store_thread_t *t, const ctrun_store_opts_t *opts, ct_errbuf_t *eb);
/* Runs fn(store, arg) on the store's thread and returns when it has. */
void store_thread_call(store_thread_t *t, void (*fn)(ctrun_store_t *s, void *arg), void *arg);
/* The store's counters, read on its thread. */
void store_thread_stats(store_thread_t *t, ctrun_store_stats_t *out);
/* Closes the store, joins the thread and closes the loop (asserting it closes cleanly). */
void store_thread_stop(store_thread_t *t);

#endif
