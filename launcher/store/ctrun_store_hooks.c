/*
 * ctrun_store_hooks.c - the hooks of ctrun_store_internal.h for tests and fuzzers: test
 * connections, which have no socket (bytes are fed in and replies read back through a pretend
 * socket, exercising exactly the parsing, handling and output code of network connections), and
 * a recount of every index and counter of the server's state.
 *
 * Deliberately not here: anything a production path calls.
 */
#include <string.h>

#include "ctrun_store_internal.h"

ctrun_store__conn_t *ctrun_store__test_conn_open(ctrun_store_t *s)
{
    ctrun_store__conn_t *c = ctrun_store__conn_new(s);
    if (c == NULL)
        return NULL;
    c->is_virtual = true;
    ctrun_store__conn_link(s, c);
    return c;
}

int ctrun_store__test_conn_feed(ctrun_store__conn_t *c, const void *data, size_t len)
{
    ctrun_store_t *s = c->s;
    if (c->closing || c->doomed)
        return CT_EPEER;
    /* The same two paths as on_read: straight from the shared buffer when nothing is pending,
     * else appended to the connection's own buffer. */
    const uint8_t *p = data;
    while (len > 0 && !c->closing) {
        size_t n = len < CTRUN_STORE__READ_CHUNK ? len : CTRUN_STORE__READ_CHUNK;
        if (c->paused) {
            if (ctrun_store__in_reserve(c, c->in_len + n) != 0) {
                ctrun_store__drop(c, "no room to buffer input");
                break;
            }
            memcpy(c->in + c->in_len, p, n);
            c->in_len += n;
        } else if (c->in_len == 0) {
            memcpy(s->rbuf, p, n);
            ctrun_store__process(c, s->rbuf, n, true);
        } else {
            if (ctrun_store__in_reserve(c, c->in_len + n) != 0) {
                ctrun_store__drop(c, "no room to buffer input");
                break;
            }
            memcpy(c->in + c->in_len, p, n);
            c->in_len += n;
            ctrun_store__process(c, c->in, c->in_len, false);
        }
        p += n;
        len -= n;
    }
    ctrun_store__flush_dirty(s);
    return c->closing ? CT_EPEER : 0;
}

void ctrun_store__test_conn_set_room(ctrun_store__conn_t *c, size_t nbytes)
{
    c->vroom = nbytes;
}

/* The peer reads: first what the pretend socket holds, then the in-flight write, whose end
 * completes it exactly as a network write completes (ctrun_store__write_done: the next flush, and
 * resuming a paused connection). Nothing here resumes a connection by itself. */
size_t ctrun_store__test_conn_output(ctrun_store__conn_t *c, uint8_t *buf, size_t cap)
{
    size_t got = 0;
    while (got < cap) {
        size_t k = c->vsock_len < cap - got ? c->vsock_len : cap - got;
        if (k > 0) {
            if (buf != NULL)
                memcpy(buf + got, c->vsock, k);
            memmove(c->vsock, c->vsock + k, c->vsock_len - k);
            c->vsock_len -= k;
            got += k;
            continue;
        }
        if (!c->writing)
            break;
        k = c->inflight < cap - got ? c->inflight : cap - got;
        if (buf != NULL && k > 0)
            memcpy(buf + got, c->wbuf + c->woff, k);
        c->woff += k;
        c->inflight -= k;
        got += k;
        if (c->inflight > 0)
            break;
        ctrun_store__write_done(c, 0);
    }
    return got;
}

bool ctrun_store__test_conn_closed(const ctrun_store__conn_t *c)
{
    return c->closing || c->doomed;
}

void ctrun_store__test_conn_free(ctrun_store__conn_t *c)
{
    if (c == NULL)
        return;
    ctrun_store_t *s = c->s;
    ctrun_store__conn_close(c);
    /* Drop it from the dirty list before the memory goes. */
    for (ctrun_store__conn_t **pp = &s->dirty; *pp != NULL; pp = &(*pp)->dnext) {
        if (*pp == c) {
            *pp = c->dnext;
            break;
        }
    }
    ctrun_store__conn_free(c);
}

int ctrun_store__test_check(const ctrun_store_t *s, ct_errbuf_t *eb)
{
    uint64_t keys = 0, queues = 0, regs = 0, waits = 0, entries = 0, mem = 0;
    for (size_t b = 0; b <= s->tab_mask; b++) {
        for (const ctrun_store__entry_t *e = s->tab[b]; e != NULL; e = e->hnext) {
            entries++;
            mem += ctrun_store__entry_charge(e->klen);
            if ((e->hash & s->tab_mask) != b)
                return ct_errbuf_set(eb, CT_ESTATE, "entry in the wrong bucket");
            if (!e->has_value && e->qlen == 0 && e->whead == NULL && e->watchers == NULL)
                return ct_errbuf_set(eb, CT_ESTATE, "empty entry \"%.*s\" kept", (int)e->klen,
                                     (const char *)e->key);
            if (e->has_value) {
                keys++;
                mem += e->vlen;
            } else if (e->vlen != 0) {
                return ct_errbuf_set(eb, CT_ESTATE, "value length without a value");
            }
            uint64_t q = 0;
            for (const ctrun_store__item_t *it = e->qhead; it != NULL; it = it->next) {
                q++;
                mem += sizeof *it + it->len + CTRUN_STORE__ENTRY_OVERHEAD;
            }
            if (q != e->qlen)
                return ct_errbuf_set(eb, CT_ESTATE, "queue length %llu, %llu items",
                                     (unsigned long long)e->qlen, (unsigned long long)q);
            queues += q > 0;
            const ctrun_store__reg_t *prev = NULL;
            for (const ctrun_store__reg_t *r = e->whead; r != NULL; prev = r, r = r->knext) {
                if (r->entry != e || r->kprev != prev)
                    return ct_errbuf_set(eb, CT_ESTATE, "waiter list of an entry is broken");
                if (r->wait->conn->closing)
                    return ct_errbuf_set(eb, CT_ESTATE, "a closed connection still waits");
            }
            if (e->wtail != prev)
                return ct_errbuf_set(eb, CT_ESTATE, "waiter list tail is wrong");
            for (const ctrun_store__kwatch_t *k = e->watchers; k != NULL; k = k->enext)
                mem += sizeof *k + CTRUN_STORE__ENTRY_OVERHEAD;
        }
    }
    uint64_t buffered = 0, shed = 0;
    for (const ctrun_store__conn_t *c = s->conns; c != NULL; c = c->next) {
        buffered += c->in_cap;
        shed += c->shed_bytes;
        if (c->in_len > c->in_cap || (c->shed_bytes > 0 && !c->doomed))
            return ct_errbuf_set(eb, CT_ESTATE, "input buffer of a connection is inconsistent");
        for (const ctrun_store__wait_t *w = c->waits; w != NULL; w = w->next) {
            waits++;
            mem += sizeof *w + CTRUN_STORE__ENTRY_OVERHEAD;
            uint64_t n = 0;
            for (const ctrun_store__reg_t *r = w->regs; r != NULL; r = r->wnext) {
                n++;
                if (r->wait != w || r->entry->whead == NULL)
                    return ct_errbuf_set(eb, CT_ESTATE, "registration list of a wait is broken");
            }
            if (n != w->remaining || n == 0)
                return ct_errbuf_set(eb, CT_ESTATE, "wait counts %llu but has %llu registrations",
                                     (unsigned long long)w->remaining, (unsigned long long)n);
            regs += n;
            mem += n * (sizeof(ctrun_store__reg_t) + CTRUN_STORE__ENTRY_OVERHEAD);
        }
    }
    if (buffered != s->st.buffered_bytes || shed != s->shed_bytes)
        return ct_errbuf_set(eb, CT_ESTATE, "buffered input %llu/%llu, of it shed %llu/%llu",
                             (unsigned long long)buffered, (unsigned long long)s->st.buffered_bytes,
                             (unsigned long long)shed, (unsigned long long)s->shed_bytes);
    if (entries != s->nentries || keys != s->st.keys || queues != s->st.queues ||
        regs != s->st.wait_registrations || waits != s->st.pending_waits || mem != s->memory)
        return ct_errbuf_set(eb, CT_ESTATE,
                             "counters disagree: entries %llu/%llu keys %llu/%llu queues "
                             "%llu/%llu regs %llu/%llu waits %llu/%llu memory %llu/%llu",
                             (unsigned long long)entries, (unsigned long long)s->nentries,
                             (unsigned long long)keys, (unsigned long long)s->st.keys,
                             (unsigned long long)queues, (unsigned long long)s->st.queues,
                             (unsigned long long)regs, (unsigned long long)s->st.wait_registrations,
                             (unsigned long long)waits, (unsigned long long)s->st.pending_waits,
                             (unsigned long long)mem, (unsigned long long)s->memory);
    return 0;
}
