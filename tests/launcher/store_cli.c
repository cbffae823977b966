/*
 * store_cli.c - test helper: runs a sequence of store requests with the C client, so that
 * Python tests can make "our client" and PyTorch's talk to the same store.
 *
 *   store_cli [--v1] [--timeout MS] HOST PORT COMMAND... where COMMAND is one of
 *     set K V | get K | add K N | cas K EXPECTED DESIRED | wait K | check K | numkeys |
 *     delete K | append K V | ping | sleep MS
 *   Values are text, or hex:0a0b... for bytes. Each command that has a result prints one line
 *   (values in hex). The first failure prints "error: NAME: message" on stderr, exit 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_store_client.h"
#include "ct_time.h"

static uint8_t valbuf[1 << 20];

static size_t value(const char *arg, const void **out)
{
    if (strncmp(arg, "hex:", 4) != 0) {
        *out = arg;
        return strlen(arg);
    }
    size_t n = 0;
    for (const char *p = arg + 4; p[0] && p[1] && n < sizeof valbuf; p += 2) {
        unsigned v;
        sscanf(p, "%2x", &v);
        valbuf[n++] = (uint8_t)v;
    }
    *out = valbuf;
    return n;
}

static void print_hex(ct_store_bytes_t v)
{
    for (uint64_t i = 0; i < v.len; i++)
        printf("%02x", v.data[i]);
    printf("\n");
}

int main(int argc, char **argv)
{
    ct_store_client_opts_t o = {.timeout_ms = 30000};
    int i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
        if (strcmp(argv[i], "--v1") == 0)
            o.dialect = CT_STORE_V1;
        else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc)
            o.timeout_ms = atoll(argv[++i]);
    }
    if (argc - i < 2) {
        fprintf(stderr, "usage: store_cli [--v1] [--timeout MS] HOST PORT COMMAND...\n");
        return 2;
    }
    const char *host = argv[i++];
    int port = atoi(argv[i++]);
    ct_store_client_t c;
    ct_errbuf_t eb = {{0}};
    int rc = ct_store_client_connect(&c, host, port, &o, &eb);
    const char *what = "connect";
    while (rc == 0 && i < argc) {
        const char *cmd = argv[i++];
        what = cmd;
        const char *a1 = i < argc ? argv[i] : "", *a2 = i + 1 < argc ? argv[i + 1] : "";
        const char *a3 = i + 2 < argc ? argv[i + 2] : "";
        ct_store_bytes_t v;
        const void *p;
        size_t n;
        int64_t num = 0;
        bool flag = false;
        if (strcmp(cmd, "set") == 0) {
            n = value(a2, &p);
            rc = ct_store_set(&c, a1, p, n, &eb);
            i += 2;
        } else if (strcmp(cmd, "append") == 0) {
            n = value(a2, &p);
            rc = ct_store_append(&c, a1, p, n, &eb);
            i += 2;
        } else if (strcmp(cmd, "get") == 0) {
            rc = ct_store_get(&c, a1, &v, &eb);
            if (rc == 0)
                print_hex(v);
            i += 1;
        } else if (strcmp(cmd, "add") == 0) {
            rc = ct_store_add(&c, a1, atoll(a2), &num, &eb);
            if (rc == 0)
                printf("%lld\n", (long long)num);
            i += 2;
        } else if (strcmp(cmd, "cas") == 0) {
            const void *e;
            size_t en = value(a2, &e);
            static uint8_t ebuf[1 << 20];
            memcpy(ebuf, e, en);
            n = value(a3, &p);
            rc = ct_store_compare_set(&c, a1, ebuf, en, p, n, &v, &eb);
            if (rc == 0)
                print_hex(v);
            i += 3;
        } else if (strcmp(cmd, "wait") == 0) {
            rc = ct_store_wait(&c, &a1, 1, -1, &eb);
            i += 1;
        } else if (strcmp(cmd, "check") == 0) {
            rc = ct_store_check(&c, &a1, 1, &flag, &eb);
            if (rc == 0)
                printf("%d\n", flag ? 1 : 0);
            i += 1;
        } else if (strcmp(cmd, "delete") == 0) {
            rc = ct_store_delete(&c, a1, &flag, &eb);
            if (rc == 0)
                printf("%d\n", flag ? 1 : 0);
            i += 1;
        } else if (strcmp(cmd, "numkeys") == 0) {
            rc = ct_store_num_keys(&c, &num, &eb);
            if (rc == 0)
                printf("%lld\n", (long long)num);
        } else if (strcmp(cmd, "ping") == 0) {
            rc = ct_store_ping(&c, &eb);
        } else if (strcmp(cmd, "sleep") == 0) {
            ct_sleep_ms(atoll(a1));
            i += 1;
        } else {
            fprintf(stderr, "store_cli: unknown command %s\n", cmd);
            ct_store_client_close(&c);
            return 2;
        }
        fflush(stdout);
    }
    if (rc != 0)
        fprintf(stderr, "error: %s: %s: %s\n", ct_err_name(rc), what, eb.msg);
    ct_store_client_close(&c);
    return rc == 0 ? 0 : 1;
}
