/*
 * ctrun_store_main.c - `ctrun-store`, the rendezvous store as a standalone program.
 *
 * Owns: the command line, the token sources, raising the open-file limit, printing the bound
 * port (one line on stdout, for scripts: `--port 0` lets the kernel choose), and a clean exit
 * on SIGINT/SIGTERM. Everything else is ctrun_store.h on a private loop.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <uv.h>

#include "ct_addr.h"
#include "ct_config.h"
#include "ct_log.h"
#include "ct_parse.h"
#include "ct_store_auth.h"
#include "ctrun_store.h"

static const char ctrun_store_main__usage[] =
    "usage: ctrun-store --port P [--host H] [--max-connections N] [--max-bytes SIZE]\n"
    "                   [--token TOKEN | --token-file PATH]\n"
    "\n"
    "A rendezvous store that speaks PyTorch's TCPStore protocol (PyTorch 1.13 and >= 2.2\n"
    "clients, told apart per connection). Prints the port it listens on as one line on\n"
    "stdout, serves until SIGINT or SIGTERM, then exits 0. See ctrun-store(7).\n"
    "\n"
    "  --port P              TCP port; 0 lets the kernel choose (required)\n"
    "  --host H              listen on this address only (default: every address, IPv6 and\n"
    "                        IPv4)\n"
    "  --max-connections N   refuse connections beyond N (default 65536)\n"
    "  --max-bytes SIZE      cap on stored keys, values and buffered input, e.g. 512M\n"
    "                        (default 1G)\n"
    "  --token TOKEN         require clients to authenticate with this shared secret (stock\n"
    "                        PyTorch clients cannot); visible to other users in ps, prefer:\n"
    "  --token-file PATH     read the token from the first line of PATH\n"
    "  -h, --help            this text\n"
    "  --version             print the version\n"
    "\n"
    "Environment: CTRUN_STORE_TOKEN (token when no option gives one), CT_LOG_LEVEL (debug,\n"
    "info, warn, error, off).\n";

typedef struct ctrun_store_main__main {
    uv_loop_t loop;
    uv_signal_t sigint, sigterm;
    ctrun_store_t *store;
    int signal;
} ctrun_store_main__main_t;

static void ctrun_store_main__on_signal(uv_signal_t *h, int signum)
{
    ctrun_store_main__main_t *m = h->data;
    if (m->signal != 0)
        return;
    m->signal = signum;
    ct_log_info("store: %s received, shutting down", signum == SIGINT ? "SIGINT" : "SIGTERM");
    ctrun_store_close(m->store, NULL, NULL);
    uv_close((uv_handle_t *)&m->sigint, NULL);
    uv_close((uv_handle_t *)&m->sigterm, NULL);
}

/* Takes the value of option `name` from "--name=value" or the next argument. */
static const char *ctrun_store_main__optval(int argc, char **argv, int *i, const char *name)
{
    const char *arg = argv[*i];
    size_t n = strlen(name);
    if (strncmp(arg, name, n) == 0 && arg[n] == '=')
        return arg + n + 1;
    if (strcmp(arg, name) == 0) {
        if (*i + 1 >= argc)
            return NULL;
        return argv[++*i];
    }
    return NULL;
}

static bool ctrun_store_main__is_opt(const char *arg, const char *name)
{
    size_t n = strlen(name);
    return strncmp(arg, name, n) == 0 && (arg[n] == '\0' || arg[n] == '=');
}

static int ctrun_store_main__read_token_file(const char *path, char *buf, size_t size,
                                             ct_errbuf_t *eb)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return ct_errbuf_set(eb, -errno, "--token-file: cannot open %s: %s", path, strerror(errno));
    if (fgets(buf, (int)size, f) == NULL)
        buf[0] = '\0';
    fclose(f);
    buf[strcspn(buf, "\r\n")] = '\0';
    return ct_store_auth_check_token(buf, "--token-file", eb);
}

/* Servers of many connections need many descriptors: take the hard limit. */
static uint64_t ctrun_store_main__raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    return rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
}

int main(int argc, char **argv)
{
    ct_errbuf_t eb;
    if (ct_log_init("[ctrun-store]", &eb) != 0)
        fprintf(stderr, "ctrun-store: %s (using info)\n", eb.msg);

    int port = -1;
    const char *host = NULL, *token = NULL, *token_file = NULL;
    uint64_t max_conn = 0, max_bytes = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int rc = 0;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(ctrun_store_main__usage, stdout);
            return 0;
        } else if (strcmp(a, "--version") == 0) {
            printf("ctrun-store %s\n", CT_VERSION);
            return 0;
        } else if (ctrun_store_main__is_opt(a, "--port")) {
            if ((v = ctrun_store_main__optval(argc, argv, &i, "--port")) == NULL)
                goto missing;
            rc = ct_port_parse(v, true, &port, &eb);
        } else if (ctrun_store_main__is_opt(a, "--host")) {
            if ((v = ctrun_store_main__optval(argc, argv, &i, "--host")) == NULL)
                goto missing;
            ct_host_kind_t kind;
            host = v;
            rc = ct_host_validate(v, &kind, &eb);
        } else if (ctrun_store_main__is_opt(a, "--max-connections")) {
            if ((v = ctrun_store_main__optval(argc, argv, &i, "--max-connections")) == NULL)
                goto missing;
            int64_t n;
            rc = ct_parse_int64(v, 1, INT64_MAX, &n, &eb);
            max_conn = (uint64_t)n;
        } else if (ctrun_store_main__is_opt(a, "--max-bytes")) {
            if ((v = ctrun_store_main__optval(argc, argv, &i, "--max-bytes")) == NULL)
                goto missing;
            rc = ct_parse_size(v, UINT64_MAX / 2, &max_bytes, &eb);
            if (rc == 0 && max_bytes < (1u << 20))
                rc = ct_errbuf_set(&eb, CT_ERANGE_VALUE, "\"%s\" is below the 1M minimum", v);
        } else if (ctrun_store_main__is_opt(a, "--token")) {
            if ((v = ctrun_store_main__optval(argc, argv, &i, "--token")) == NULL)
                goto missing;
            token = v;
            rc = ct_store_auth_check_token(v, "--token", &eb);
        } else if (ctrun_store_main__is_opt(a, "--token-file")) {
            if ((v = ctrun_store_main__optval(argc, argv, &i, "--token-file")) == NULL)
                goto missing;
            token_file = v;
        } else {
            fprintf(stderr, "ctrun-store: unknown argument '%s' (see --help)\n", a);
            return 2;
        }
        if (rc != 0) {
            const char *name = a;
            char opt[64];
            snprintf(opt, sizeof opt, "%.*s", (int)strcspn(name, "="), name);
            fprintf(stderr, "ctrun-store: %s: %s\n", opt, eb.msg);
            return 2;
        }
        continue;
    missing:
        fprintf(stderr, "ctrun-store: %s needs a value (see --help)\n", a);
        return 2;
    }
    if (port < 0) {
        fprintf(stderr, "ctrun-store: --port is required (0 lets the kernel choose; see --help)\n");
        return 2;
    }
    if (token != NULL && token_file != NULL) {
        fprintf(stderr, "ctrun-store: give either --token or --token-file, not both\n");
        return 2;
    }
    static char file_token[CT_STORE_TOKEN_MAX + 2];
    if (token_file != NULL) {
        if (ctrun_store_main__read_token_file(token_file, file_token, sizeof file_token, &eb) !=
            0) {
            fprintf(stderr, "ctrun-store: %s\n", eb.msg);
            return 2;
        }
        token = file_token;
    } else if (token != NULL) {
        ct_log_warn("store: --token is visible to other users in the process list; prefer "
                    "--token-file or CTRUN_STORE_TOKEN");
    } else if (getenv(CT_STORE_TOKEN_ENV) != NULL) {
        token = getenv(CT_STORE_TOKEN_ENV);
        if (ct_store_auth_check_token(token, CT_STORE_TOKEN_ENV, &eb) != 0) {
            fprintf(stderr, "ctrun-store: %s\n", eb.msg);
            return 2;
        }
    }

    uint64_t nofile = ctrun_store_main__raise_nofile();
    uint64_t want_conn = max_conn ? max_conn : CTRUN_STORE_DEFAULT_MAX_CONNECTIONS;
    if (nofile != 0 && nofile < want_conn + 16)
        ct_log_info("store: the open-file limit (%llu) allows about %llu connections",
                    (unsigned long long)nofile, (unsigned long long)(nofile - 16));

    ctrun_store_main__main_t m;
    memset(&m, 0, sizeof m);
    int rc = uv_loop_init(&m.loop);
    if (rc != 0) {
        fprintf(stderr, "ctrun-store: uv_loop_init: %s\n", uv_strerror(rc));
        return 1;
    }
    ctrun_store_opts_t opts = {.host = host,
                               .port = port,
                               .max_connections = max_conn,
                               .max_bytes = max_bytes,
                               .token = token};
    rc = ctrun_store_create(&m.loop, &opts, &m.store, &eb);
    if (rc != 0) {
        fprintf(stderr, "ctrun-store: %s\n", eb.msg);
        uv_run(&m.loop, UV_RUN_DEFAULT); /* lets half-opened handles close */
        uv_loop_close(&m.loop);
        return 1;
    }
    uv_signal_init(&m.loop, &m.sigint);
    uv_signal_init(&m.loop, &m.sigterm);
    m.sigint.data = m.sigterm.data = &m;
    uv_signal_start(&m.sigint, ctrun_store_main__on_signal, SIGINT);
    uv_signal_start(&m.sigterm, ctrun_store_main__on_signal, SIGTERM);

    printf("%d\n", ctrun_store_port(m.store));
    fflush(stdout);
    ct_log_info("store: listening on %s%s", ctrun_store_address(m.store),
                token != NULL ? " (clients must authenticate)" : "");

    uv_run(&m.loop, UV_RUN_DEFAULT);
    rc = uv_loop_close(&m.loop);
    if (rc != 0)
        ct_log_warn("store: loop closed with handles open: %s", uv_strerror(rc));
    return 0;
}
