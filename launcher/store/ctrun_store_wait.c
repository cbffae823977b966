/*
 * ctrun_store_wait.c - who waits for what: WAIT and BARRIER waits with their per-key
 * registrations (linked both into the connection's list and into the entry's FIFO, so that a
 * write walks only its own entry's waiters and a disconnect only its own registrations), v1
 * WATCH_KEY subscriptions and their events, and the in-process watches of ctrun_store_watch.
 *
 * Deliberately not here: deciding when a key counts as written (the operations in
 * ctrun_store_table.c call ctrun_store__wake and the watch functions), and parsing WAIT, BARRIER or
 * WATCH_KEY requests (ctrun_store_req.c).
 */
#include <stdlib.h>
#include <string.h>

#include "ct_log.h"
#include "ctrun_store_internal.h"

/* ---- waiters ---------------------------------------------------------------------------- */

static void ctrun_store__reg_unlink(ctrun_store_t *s, ctrun_store__reg_t *r)
{
    ctrun_store__entry_t *e = r->entry;
    if (r->kprev)
        r->kprev->knext = r->knext;
    else
        e->whead = r->knext;
    if (r->knext)
        r->knext->kprev = r->kprev;
    else
        e->wtail = r->kprev;
    ctrun_store__wait_t *w = r->wait;
    if (r->wprev)
        r->wprev->wnext = r->wnext;
    else
        w->regs = r->wnext;
    if (r->wnext)
        r->wnext->wprev = r->wprev;
    s->st.wait_registrations--;
    ctrun_store__uncharge(s, sizeof *r + CTRUN_STORE__ENTRY_OVERHEAD);
    free(r);
}

static void ctrun_store__wait_free(ctrun_store_t *s, ctrun_store__wait_t *w)
{
    ctrun_store__conn_t *c = w->conn;
    if (w->prev)
        w->prev->next = w->next;
    else
        c->waits = w->next;
    if (w->next)
        w->next->prev = w->prev;
    s->st.pending_waits--;
    ctrun_store__uncharge(s, sizeof *w + CTRUN_STORE__ENTRY_OVERHEAD);
    free(w);
}

ctrun_store__wait_t *ctrun_store__wait_new(ctrun_store__conn_t *c)
{
    ctrun_store_t *s = c->s;
    if (!ctrun_store__charge(s, sizeof(ctrun_store__wait_t) + CTRUN_STORE__ENTRY_OVERHEAD))
        return NULL;
    ctrun_store__wait_t *w = calloc(1, sizeof *w);
    if (w == NULL) {
        ctrun_store__uncharge(s, sizeof *w + CTRUN_STORE__ENTRY_OVERHEAD);
        return NULL;
    }
    w->conn = c;
    w->next = c->waits;
    if (c->waits)
        c->waits->prev = w;
    c->waits = w;
    s->st.pending_waits++;
    return w;
}

bool ctrun_store__reg_add(ctrun_store_t *s, ctrun_store__wait_t *w, ctrun_store__entry_t *e,
                          bool barrier)
{
    if (!ctrun_store__charge(s, sizeof(ctrun_store__reg_t) + CTRUN_STORE__ENTRY_OVERHEAD))
        return false;
    ctrun_store__reg_t *r = calloc(1, sizeof *r);
    if (r == NULL) {
        ctrun_store__uncharge(s, sizeof *r + CTRUN_STORE__ENTRY_OVERHEAD);
        return false;
    }
    r->entry = e;
    r->wait = w;
    r->barrier = barrier;
    r->kprev = e->wtail;
    if (e->wtail)
        e->wtail->knext = r;
    else
        e->whead = r;
    e->wtail = r;
    r->wnext = w->regs;
    if (w->regs)
        w->regs->wprev = r;
    w->regs = r;
    w->remaining++;
    s->st.wait_registrations++;
    return true;
}

/* One awaited key was written: count the wait down and answer it at zero. */
static void ctrun_store__reg_fire(ctrun_store_t *s, ctrun_store__reg_t *r)
{
    ctrun_store__wait_t *w = r->wait;
    ctrun_store__reg_unlink(s, r);
    if (--w->remaining == 0) {
        ctrun_store__conn_t *c = w->conn;
        ctrun_store__wait_free(s, w);
        ctrun_store__reply_u8(c, CT_STORE_WAIT_STOP, true);
    }
}

void ctrun_store__wake(ctrun_store_t *s, ctrun_store__entry_t *e, int mode)
{
    ctrun_store__reg_t *r = e->whead;
    while (r != NULL) {
        ctrun_store__reg_t *next = r->knext;
        if (mode != CTRUN_STORE__WAKE_NOT_BARRIER || !r->barrier) {
            ctrun_store__reg_fire(s, r);
            if (mode == CTRUN_STORE__WAKE_ONE)
                return;
        }
        r = next;
    }
}

/* Drops every wait of a connection (CANCEL_WAIT, or the connection closing). */
void ctrun_store__drop_waits(ctrun_store__conn_t *c)
{
    ctrun_store_t *s = c->s;
    while (c->waits != NULL) {
        ctrun_store__wait_t *w = c->waits;
        while (w->regs != NULL) {
            ctrun_store__entry_t *e = w->regs->entry;
            ctrun_store__reg_unlink(s, w->regs);
            ctrun_store__release(s, e);
        }
        ctrun_store__wait_free(s, w);
    }
}

/* ---- watches ---------------------------------------------------------------------------- */

void ctrun_store__kwatch_free(ctrun_store_t *s, ctrun_store__kwatch_t *k)
{
    ctrun_store__entry_t *e = k->entry;
    if (k->eprev)
        k->eprev->enext = k->enext;
    else
        e->watchers = k->enext;
    if (k->enext)
        k->enext->eprev = k->eprev;
    ctrun_store__conn_t *c = k->conn;
    if (k->cprev)
        k->cprev->cnext = k->cnext;
    else
        c->kwatches = k->cnext;
    if (k->cnext)
        k->cnext->cprev = k->cprev;
    ctrun_store__uncharge(s, sizeof *k + CTRUN_STORE__ENTRY_OVERHEAD);
    free(k);
    ctrun_store__release(s, e);
}

/* v1 watch events for the connections that sent WATCH_KEY on this entry. */
void ctrun_store__push_kwatch(ctrun_store_t *s, ctrun_store__entry_t *e, ct_store_watch_kind_t kind,
                              const uint8_t *old, size_t old_len)
{
    (void)s;
    ct_store_watch_event_t ev = {
        .kind = kind,
        .key = {.data = e->key, .len = e->klen},
        .old_value = {.data = old, .len = old_len},
        .new_value = {.data = e->has_value ? e->value : NULL, .len = e->has_value ? e->vlen : 0},
    };
    size_t n = ct_store_encode_watch_event(&ev, NULL, 0);
    ctrun_store__kwatch_t *k = e->watchers;
    while (k != NULL) {
        ctrun_store__kwatch_t *next = k->enext; /* a closing connection drops its subscriptions */
        uint8_t *p = ctrun_store__out(k->conn, n, true);
        if (p != NULL)
            ct_store_encode_watch_event(&ev, p, n);
        k = next;
    }
}

static bool ctrun_store__watch_matches(const ctrun_store_watch_t *w, const uint8_t *key,
                                       size_t klen)
{
    if (w->dead)
        return false;
    if (w->prefix)
        return klen >= w->klen && memcmp(key, w->key, w->klen) == 0;
    return klen == w->klen && memcmp(key, w->key, klen) == 0;
}

void ctrun_store__sweep_watches(ctrun_store_t *s)
{
    if (s->notify_depth > 0 || !s->watches_dead)
        return;
    ctrun_store_watch_t **pp = &s->watches;
    while (*pp != NULL) {
        ctrun_store_watch_t *w = *pp;
        if (w->dead) {
            *pp = w->next;
            free(w);
        } else {
            pp = &w->next;
        }
    }
    s->watches_dead = false;
}

/* In-process watch callbacks, on copies: a callback may change or delete this very key. */
void ctrun_store__notify(ctrun_store_t *s, const uint8_t *key, size_t klen,
                         ct_store_watch_kind_t kind, const uint8_t *value, size_t vlen,
                         ct_store_op_t op, bool in_process)
{
    bool any = false;
    for (ctrun_store_watch_t *w = s->watches; w != NULL && !any; w = w->next)
        any = ctrun_store__watch_matches(w, key, klen);
    if (!any)
        return;
    uint8_t *copy = malloc(klen + vlen + 1);
    if (copy == NULL) {
        ct_log_error("store: out of memory: a watch event for a %zu-byte value was lost", vlen);
        return;
    }
    memcpy(copy, key, klen);
    if (vlen > 0)
        memcpy(copy + klen, value, vlen);
    ctrun_store_event_t ev = {.kind = kind,
                              .key = {.data = copy, .len = klen},
                              .value = {.data = copy + klen, .len = vlen},
                              .op = op,
                              .in_process = in_process};
    s->notify_depth++;
    for (ctrun_store_watch_t *w = s->watches; w != NULL; w = w->next)
        if (ctrun_store__watch_matches(w, copy, klen) && !s->closing)
            w->cb(s, &ev, w->data);
    s->notify_depth--;
    free(copy);
    ctrun_store__sweep_watches(s);
}
