/*
 * store_host.c - test helper: hosts a ctrun store and answers commands on stdin, so that
 * tests written in Python (the PyTorch compatibility tests) can look inside the store and use
 * the launcher's in-process API between PyTorch runs.
 *
 *   store_host [--token T]      prints the port, then reads one command per line:
 *     stats                     "connections=N keys=N waits=N registrations=N dropped=N"
 *     keys                      every key with a value, one per line (C-escaped), then "."
 *     get KEY                   the value in hex, or "-" when absent
 *     wipe-except PREFIX...     deletes every other key; "wiped N"
 *     quit                      closes the store and exits 0 (so does end of input)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "ct_log.h"
#include "ct_store_codec.h"
#include "ctrun_store.h"

static uv_loop_t loop;
static uv_pipe_t in;
static ctrun_store_t *store;
static char line[65536];
static size_t line_len;

static void print_escaped(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\')
            putchar(p[i]);
        else
            printf("\\x%02x", p[i]);
    }
    putchar('\n');
}

static void print_key(ct_store_bytes_t key, ct_store_bytes_t value, void *data)
{
    (void)value;
    (void)data;
    print_escaped(key.data, key.len);
}

static void on_close_all(void)
{
    ctrun_store_close(store, NULL, NULL);
    uv_close((uv_handle_t *)&in, NULL);
}

static void command(char *cmd)
{
    char *save = NULL, *verb = strtok_r(cmd, " ", &save);
    if (verb == NULL)
        return;
    if (strcmp(verb, "stats") == 0) {
        ctrun_store_stats_t st;
        ctrun_store_stats(store, &st);
        printf("connections=%llu keys=%llu waits=%llu registrations=%llu dropped=%llu\n",
               (unsigned long long)st.connections, (unsigned long long)st.keys,
               (unsigned long long)st.pending_waits, (unsigned long long)st.wait_registrations,
               (unsigned long long)st.dropped);
    } else if (strcmp(verb, "keys") == 0) {
        ctrun_store_foreach(store, NULL, print_key, NULL);
        printf(".\n");
    } else if (strcmp(verb, "get") == 0) {
        char *key = strtok_r(NULL, "", &save);
        ct_store_bytes_t v;
        if (key == NULL || ctrun_store_get(store, key, &v) != 0) {
            printf("-\n");
        } else {
            for (size_t i = 0; i < v.len; i++)
                printf("%02x", v.data[i]);
            printf("\n");
        }
    } else if (strcmp(verb, "wipe-except") == 0) {
        const char *keep[16];
        size_t n = 0;
        char *p;
        while (n < 16 && (p = strtok_r(NULL, " ", &save)) != NULL)
            keep[n++] = p;
        size_t wiped = 0;
        ctrun_store_wipe_except(store, keep, n, &wiped);
        printf("wiped %zu\n", wiped);
    } else if (strcmp(verb, "quit") == 0) {
        on_close_all();
        return;
    } else {
        printf("? %s\n", verb);
    }
    fflush(stdout);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    static char chunk[4096];
    (void)h;
    (void)suggested;
    *buf = uv_buf_init(chunk, sizeof chunk);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    (void)s;
    if (n < 0) {
        on_close_all();
        return;
    }
    for (ssize_t i = 0; i < n; i++) {
        char ch = buf->base[i];
        if (ch == '\n') {
            line[line_len] = '\0';
            command(line);
            line_len = 0;
        } else if (line_len + 1 < sizeof line) {
            line[line_len++] = ch;
        }
    }
}

int main(int argc, char **argv)
{
    ct_errbuf_t eb;
    ct_log_init("[store_host]", &eb);
    ctrun_store_opts_t o = {0};
    if (argc == 3 && strcmp(argv[1], "--token") == 0)
        o.token = argv[2];
    uv_loop_init(&loop);
    if (ctrun_store_create(&loop, &o, &store, &eb) != 0) {
        fprintf(stderr, "store_host: %s\n", eb.msg);
        return 1;
    }
    printf("%d\n", ctrun_store_port(store));
    fflush(stdout);
    uv_pipe_init(&loop, &in, 0);
    uv_pipe_open(&in, 0);
    uv_read_start((uv_stream_t *)&in, on_alloc, on_read);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return 0;
}
