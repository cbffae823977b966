/*
 * test_ctrun_store_main.c - the ctrun-store program: its command line, the port it prints,
 * serving, token options, a bind conflict, and a clean exit on SIGTERM and SIGINT.
 *
 * Usage: test_ctrun_store_main PATH-TO-ctrun-store
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_child.h"
#include "ct_store_client.h"
#include "ct_test.h"
#include "ct_time.h"

static const char *exe;

static void run_expect(char **argv, int code, const char *out_has, const char *err_has)
{
    ct_child_t c;
    CT_ASSERT_OK(ct_child_run(&c, argv, NULL, 20000));
    CT_ASSERT_MSG(c.exit_code == code, "%s %s: exit %d, stderr: %s", argv[1],
                  argv[2] ? argv[2] : "", c.exit_code, c.err);
    if (out_has != NULL)
        CT_ASSERT_STR_CONTAINS(c.out, out_has);
    if (err_has != NULL)
        CT_ASSERT_STR_CONTAINS(c.err, err_has);
    ct_child_close(&c);
}

/* Starts the server and returns the port from its first stdout line. */
static int start_server(ct_child_t *c, char **argv, const ct_child_opts_t *opts)
{
    CT_ASSERT_OK(ct_child_start(c, argv, opts));
    int64_t deadline = ct_deadline_after_ms(20000);
    while (!ct_deadline_passed(deadline)) {
        ct_child_poll_output(c, 50);
        if (c->out != NULL && strchr(c->out, '\n') != NULL)
            return atoi(c->out);
    }
    CT_ASSERT_MSG(0, "no port printed; stderr: %s", c->err ? c->err : "");
    return -1;
}

static void test_command_line(void)
{
    char *help[] = {(char *)exe, "--help", NULL};
    run_expect(help, 0, "usage: ctrun-store --port P", NULL);
    char *version[] = {(char *)exe, "--version", NULL};
    run_expect(version, 0, "ctrun-store 0.", NULL);
    char *noport[] = {(char *)exe, NULL};
    run_expect(noport, 2, NULL, "--port is required");
    char *badport[] = {(char *)exe, "--port", "http", NULL};
    run_expect(badport, 2, NULL, "--port:");
    char *bigport[] = {(char *)exe, "--port=70000", NULL};
    run_expect(bigport, 2, NULL, "--port:");
    char *novalue[] = {(char *)exe, "--port", NULL};
    run_expect(novalue, 2, NULL, "--port needs a value");
    char *unknown[] = {(char *)exe, "--port", "0", "--frobnicate", NULL};
    run_expect(unknown, 2, NULL, "unknown argument '--frobnicate'");
    char *smallmem[] = {(char *)exe, "--port", "0", "--max-bytes", "10", NULL};
    run_expect(smallmem, 2, NULL, "--max-bytes:");
    char *badconn[] = {(char *)exe, "--port", "0", "--max-connections", "0", NULL};
    run_expect(badconn, 2, NULL, "--max-connections:");
    char *badhost[] = {(char *)exe, "--port", "0", "--host", "bad host!", NULL};
    run_expect(badhost, 2, NULL, "--host:");
    char *emptytok[] = {(char *)exe, "--port", "0", "--token", "", NULL};
    run_expect(emptytok, 2, NULL, "empty");
    char *nofile[] = {(char *)exe, "--port", "0", "--token-file", "/nonexistent/tok", NULL};
    run_expect(nofile, 2, NULL, "cannot open");
    char *both[] = {(char *)exe, "--port", "0", "--token", "a", "--token-file", "/x", NULL};
    run_expect(both, 2, NULL, "not both");
}

static void test_serve_and_signals(void)
{
    int sigs[2] = {SIGTERM, SIGINT};
    for (int i = 0; i < 2; i++) {
        ct_child_t srv;
        char *argv[] = {(char *)exe, "--port", "0", "--host", "127.0.0.1", NULL};
        int port = start_server(&srv, argv, NULL);
        CT_ASSERT(port > 0 && port < 65536);
        ct_store_client_t c;
        ct_errbuf_t eb = {{0}};
        ct_store_client_opts_t o = {.timeout_ms = 10000, .no_env_token = true};
        CT_ASSERT_OK(ct_store_client_connect(&c, "127.0.0.1", port, &o, &eb));
        int64_t n = 0;
        CT_ASSERT_OK(ct_store_add(&c, "init/", 1, &n, &eb));
        CT_ASSERT_EQ(n, 1);
        /* A second server on the same port cannot bind. */
        char portstr[16];
        snprintf(portstr, sizeof portstr, "%d", port);
        char *dup[] = {(char *)exe, "--port", portstr, "--host", "127.0.0.1", NULL};
        run_expect(dup, 1, NULL, "cannot listen");
        /* A waiter is connected while the server shuts down: it sees the close. */
        ct_child_signal(&srv, sigs[i]);
        CT_ASSERT_OK(ct_child_wait(&srv, 10000));
        CT_ASSERT_EQ(srv.exit_code, 0);
        CT_ASSERT_STR_CONTAINS(srv.err, "listening on 127.0.0.1:");
        CT_ASSERT_STR_CONTAINS(srv.err, i == 0 ? "SIGTERM" : "SIGINT");
        CT_ASSERT(ct_store_add(&c, "init/", 1, &n, &eb) != 0);
        ct_store_client_close(&c);
        ct_child_close(&srv);
    }
}

static void test_token_file(void)
{
    char path[] = "/tmp/ctrun-store-token-XXXXXX";
    int fd = mkstemp(path);
    CT_ASSERT(fd >= 0);
    CT_ASSERT_EQ(write(fd, "tok-123\n", 8), 8);
    close(fd);
    ct_child_t srv;
    char *argv[] = {(char *)exe, "--port", "0", "--token-file", path, NULL};
    const char *env[] = {"CTRUN_STORE_TOKEN", NULL};
    ct_child_opts_t copts = {.env = env};
    int port = start_server(&srv, argv, &copts);
    ct_store_client_t c;
    ct_errbuf_t eb = {{0}};
    ct_store_client_opts_t o = {.timeout_ms = 5000, .token = "tok-123"};
    CT_ASSERT_OK(ct_store_client_connect(&c, "127.0.0.1", port, &o, &eb));
    CT_ASSERT_OK(ct_store_ping(&c, &eb));
    ct_store_client_close(&c);
    o.token = "tok-124";
    CT_ASSERT_ERR(ct_store_client_connect(&c, "127.0.0.1", port, &o, &eb), CT_EAUTH);
    ct_store_client_close(&c);
    ct_child_signal(&srv, SIGTERM);
    CT_ASSERT_OK(ct_child_wait(&srv, 10000));
    CT_ASSERT_EQ(srv.exit_code, 0);
    CT_ASSERT_STR_CONTAINS(srv.err, "clients must authenticate");
    CT_ASSERT_STR_CONTAINS(srv.err, "authentication failed: wrong token");
    ct_child_close(&srv);
    unlink(path);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        CT_SKIP("usage: %s PATH-TO-ctrun-store", argv[0]);
    exe = argv[1];
    CT_RUN(test_command_line);
    CT_RUN(test_serve_and_signals);
    CT_RUN(test_token_file);
    return 0;
}
