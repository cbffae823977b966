/*
 * fuzz_store_server.c - fuzz target for the store server's request handling (libFuzzer entry
 * point), through test connections (ctrun_store_internal.h): the real parser, handlers,
 * waiters, queues, watches and limits, without sockets.
 *
 * An input is a script. Byte 0: bits 0-1 = connections - 1, bits 2-5 = which of them start
 * with a v2 VALIDATE. Then records [ctl][len][len bytes]: ctl bits 0-1 pick the connection,
 * bits 2-4 the action: feed the bytes, reconnect, stop or resume reading replies, an
 * in-process set / add / delete / wipe with the bytes as key, or resize the connection's
 * pretend socket (room for 2^(first byte % 24) unread bytes, none without bytes). After every
 * record the server's indexes and counters are recounted (ctrun_store__test_check); after every
 * input all connections go, the store is wiped, and it must hold no memory at all.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "ct_log.h"
#include "ct_store_codec.h"
#include "ctrun_store.h"
#include "ctrun_store_internal.h"
#include "fuzz_samples.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t ct_fuzz_seed(int i, uint8_t *buf, size_t cap);
void ct_fuzz_teardown(void);

static uv_loop_t fuzz_loop;
static ctrun_store_t *store;

#define FUZZ_CHECK(cond, ...)                                                \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "fuzz_store_server: check failed: %s: ", #cond); \
            fprintf(stderr, __VA_ARGS__);                                    \
            fputc('\n', stderr);                                             \
            abort();                                                         \
        }                                                                    \
    } while (0)

/* A watch that writes back into the store from its callback. */
static void echo_watch(ctrun_store_t *s, const ctrun_store_event_t *ev, void *data)
{
    (void)data;
    if (ev->kind != CT_STORE_WATCH_DELETED)
        ctrun_store_set(s, "/echo", ev->value.data, ev->value.len > 64 ? 64 : ev->value.len, NULL);
}

static void setup(void)
{
    if (store != NULL)
        return;
    /* Small limits so that the fuzzer reaches them with short inputs. */
    static const ct_store_limits_t lim = {
        .max_key_len = 64, .max_value_len = 4096, .max_keys = 32, .max_message_len = 16384};
    ctrun_store_opts_t o = {
        .host = "127.0.0.1", .port = 0, .max_bytes = 256 * 1024, .limits = &lim};
    ct_errbuf_t eb;
    if (uv_loop_init(&fuzz_loop) != 0 || ctrun_store_create(&fuzz_loop, &o, &store, &eb) != 0) {
        fprintf(stderr, "fuzz_store_server: cannot create the store\n");
        abort();
    }
    ctrun_store_watch(store, "/w/", true, echo_watch, NULL, NULL, NULL);
    ct_log_set_level(CT_LOG_OFF);
}

static void check(void)
{
    ct_errbuf_t eb;
    FUZZ_CHECK(ctrun_store__test_check(store, &eb) == 0, "%s", eb.msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (size == 0)
        return 0;
    enum { MAXC = 4 };
    ctrun_store__conn_t *conns[MAXC] = {0};
    bool stalled[MAXC] = {0};
    int n = 1 + (data[0] & 3);
    static const uint8_t validate[5] = {0x00, 0xCE, 0xF7, 0x85, 0x3C};
    for (int i = 0; i < n; i++) {
        conns[i] = ctrun_store__test_conn_open(store);
        if (data[0] & (4 << i))
            ctrun_store__test_conn_feed(conns[i], validate, 5);
    }
    size_t pos = 1;
    while (pos + 2 <= size) {
        uint8_t ctl = data[pos], len = data[pos + 1];
        pos += 2;
        size_t take = len <= size - pos ? len : size - pos;
        const uint8_t *p = data + pos;
        pos += take;
        int ci = (ctl & 3) % n;
        char key[80];
        snprintf(key, sizeof key, "%.*s", (int)(take > 70 ? 70 : take), (const char *)p);
        switch ((ctl >> 2) & 7) {
        case 1: /* the client goes away (mid-wait, mid-request...) and a new one comes */
            ctrun_store__test_conn_free(conns[ci]);
            conns[ci] = ctrun_store__test_conn_open(store);
            stalled[ci] = false;
            break;
        case 2:
            stalled[ci] = !stalled[ci];
            break;
        case 3:
            ctrun_store_set(store, key, p, take, NULL);
            break;
        case 4: {
            int64_t v;
            ctrun_store_add(store, key, (int64_t)take - 100, &v, NULL);
            break;
        }
        case 5:
            ctrun_store_delete(store, key, NULL);
            break;
        case 6: {
            const char *keep[1] = {key};
            ctrun_store_wipe_except(store, keep, 1, NULL);
            break;
        }
        case 7:
            ctrun_store__test_conn_set_room(conns[ci], take == 0 ? 0 : (size_t)1 << (p[0] % 24));
            break;
        default:
            ctrun_store__test_conn_feed(conns[ci], p, take);
            break;
        }
        for (int i = 0; i < n; i++)
            if (!stalled[i])
                while (ctrun_store__test_conn_output(conns[i], NULL, 1u << 20) > 0) {
                }
        check();
    }
    for (int i = 0; i < n; i++)
        ctrun_store__test_conn_free(conns[i]);
    size_t wiped = 0;
    ctrun_store_wipe_except(store, NULL, 0, &wiped);
    check();
    ctrun_store_stats_t st;
    ctrun_store_stats(store, &st);
    FUZZ_CHECK(st.keys == 0 && st.stored_bytes == 0 && st.buffered_bytes == 0 &&
                   st.connections == 0 && st.pending_waits == 0,
               "left behind: %llu keys, %llu bytes stored, %llu buffered, %llu connections",
               (unsigned long long)st.keys, (unsigned long long)st.stored_bytes,
               (unsigned long long)st.buffered_bytes, (unsigned long long)st.connections);
    return 0;
}

/* Seeds: each sample request fed to connection 0 (v2 ones after VALIDATE), then pairs of a
 * WAIT on one connection and the write that wakes it on another. */
size_t ct_fuzz_seed(int i, uint8_t *buf, size_t cap)
{
    uint8_t req[512];
    ct_store_dialect_t d;
    ct_store_op_t op;
    size_t n = fuzz_sample(i, &d, &op, req, sizeof req);
    if (n > 0) {
        if (n + 3 > cap || n > 255)
            return 0;
        buf[0] = d == CT_STORE_V2 ? 4 : 0;
        buf[1] = 0;
        buf[2] = (uint8_t)n;
        memcpy(buf + 3, req, n);
        return n + 3;
    }
    int j = i - 2 * CT_STORE_OP_COUNT;
    if (j < 0 || j >= 4)
        return 0;
    /* Two v1 connections: conn 0 waits on /k, conn 1 writes /k (SET, ADD, CAS, DELETE+SET). */
    static const char *scripts[4] = {
        "05 0100000000000000 0200000000000000 2f6b",
        "05 0200000000000000 0200000000000000 2f6b 0200000000000000 2f6b",
        "05 0100000000000000 0200000000000000 2f6b",
        "04 0100000000000000 0200000000000000 2f6b",
    };
    static const char *writes[4] = {
        "00 0200000000000000 2f6b 0100000000000000 76",
        "03 0200000000000000 2f6b 0100000000000000",
        "01 0200000000000000 2f6b 0000000000000000 0100000000000000 78",
        "08 0200000000000000 2f6b",
    };
    size_t pos = 0;
    buf[pos++] = 1; /* two connections, v1 */
    for (int part = 0; part < 2; part++) {
        const char *text = part == 0 ? scripts[j] : writes[j];
        uint8_t bytes[128];
        size_t bn = 0;
        int hi = -1;
        for (const char *t = text; *t; t++) {
            int v = *t >= '0' && *t <= '9' ? *t - '0' : *t >= 'a' && *t <= 'f' ? *t - 'a' + 10 : -1;
            if (v < 0)
                continue;
            if (hi < 0) {
                hi = v;
            } else {
                bytes[bn++] = (uint8_t)(hi << 4 | v);
                hi = -1;
            }
        }
        if (pos + 2 + bn > cap)
            return 0;
        buf[pos++] = (uint8_t)part;
        buf[pos++] = (uint8_t)bn;
        memcpy(buf + pos, bytes, bn);
        pos += bn;
    }
    return pos;
}

void ct_fuzz_teardown(void)
{
    if (store == NULL)
        return;
    ctrun_store_close(store, NULL, NULL);
    uv_run(&fuzz_loop, UV_RUN_DEFAULT);
    uv_loop_close(&fuzz_loop);
    store = NULL;
}
