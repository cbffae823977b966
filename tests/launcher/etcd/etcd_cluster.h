/*
 * etcd_cluster.h - a real etcd for tests: one member or a cluster of several, each an `etcd`
 * process on 127.0.0.1 with its client and peer ports chosen below the kernel's ephemeral range
 * (e2e_free_port) and its data in a temporary folder, started through ct_child.h (own process
 * group, parent-death signal) and waited for until it answers /health.
 *
 * Everything started is killed and reaped, and the folders removed, by etcd_cluster_stop and, in
 * any case, at exit (a failed assertion exits through exit(1), so atexit runs); a test killed by
 * a signal takes its members with it through the parent-death signal. Without an `etcd` on PATH
 * (or $CTRUN_ETCD) the test skips with 77. Header-only and static, like ct_test.h; test code
 * only.
 */
#ifndef ETCD_CLUSTER_H
#define ETCD_CLUSTER_H

#include <curl/curl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_child.h"
#include "ct_test.h"
#include "ct_time.h"
#include "ctrun_e2e.h"

#define ETCD_MEMBERS_MAX 5

typedef struct etcd_member {
    ct_child_t child;
    bool running;
    int client_port, peer_port;
    char endpoint[64]; /* 127.0.0.1:<client_port> */
    char log[600];
} etcd_member_t;

typedef struct etcd_cluster {
    int n;
    etcd_member_t m[ETCD_MEMBERS_MAX];
    char root[512];
    char endpoints[ETCD_MEMBERS_MAX * 64]; /* every member's endpoint, comma-separated */
    char ca[512]; /* etcd_cluster_start_tls: the CA that signed the members' certificate */
} etcd_cluster_t;

static etcd_cluster_t *etcd__clusters[8];

/* The etcd binary: $CTRUN_ETCD, else `etcd` on PATH; skips the test when there is none. */
static const char *etcd__binary(void)
{
    static char path[4096];
    const char *env = getenv("CTRUN_ETCD");
    if (env != NULL && env[0] != '\0') {
        if (access(env, X_OK) != 0)
            CT_SKIP("CTRUN_ETCD=%s is not an executable", env);
        return env;
    }
    const char *dirs = getenv("PATH");
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", dirs ? dirs : "/usr/bin:/bin");
    for (char *save = NULL, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(path, sizeof path, "%s/etcd", d);
        if (access(path, X_OK) == 0)
            return path;
    }
    CT_SKIP("no etcd on PATH (Debian: apt-get install etcd-server, as scripts/bootstrap does)");
    return NULL;
}

static int etcd__rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

/* Kills and reaps every member, removes the data folders. Safe to call twice. */
__attribute__((unused)) static void etcd_cluster_stop(etcd_cluster_t *c)
{
    for (int i = 0; i < c->n; i++) {
        if (c->m[i].child.pid > 0)
            ct_child_close(&c->m[i].child);
        c->m[i].running = false;
    }
    if (c->root[0] != '\0')
        nftw(c->root, etcd__rm, 16, FTW_DEPTH | FTW_PHYS);
    c->root[0] = '\0';
    for (size_t i = 0; i < sizeof etcd__clusters / sizeof etcd__clusters[0]; i++)
        if (etcd__clusters[i] == c)
            etcd__clusters[i] = NULL;
}

static void etcd__atexit(void)
{
    for (size_t i = 0; i < sizeof etcd__clusters / sizeof etcd__clusters[0]; i++)
        if (etcd__clusters[i] != NULL)
            etcd_cluster_stop(etcd__clusters[i]);
}

/* The last lines of member i's log, for a failure message. */
static const char *etcd__log_tail(etcd_cluster_t *c, int i)
{
    static char tail[1024];
    tail[0] = '\0';
    FILE *f = fopen(c->m[i].log, "r");
    if (f == NULL)
        return "(no log)";
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, size > (long)sizeof tail - 1 ? size - (long)sizeof tail + 1 : 0, SEEK_SET);
    size_t n = fread(tail, 1, sizeof tail - 1, f);
    tail[n] = '\0';
    fclose(f);
    return tail;
}

static size_t etcd__sink(char *p, size_t size, size_t n, void *data)
{
    (void)p;
    (void)data;
    return size * n;
}

/* Whether member i answers its /health with 200 (it has a leader). */
static bool etcd__healthy(etcd_cluster_t *c, int i)
{
    char url[128];
    snprintf(url, sizeof url, "%s://%s/health", c->ca[0] ? "https" : "http", c->m[i].endpoint);
    CURL *h = curl_easy_init();
    CT_ASSERT(h != NULL);
    curl_easy_setopt(h, CURLOPT_URL, url);
    if (c->ca[0])
        curl_easy_setopt(h, CURLOPT_CAINFO, c->ca);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 1000L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, etcd__sink);
    long status = 0;
    bool ok = curl_easy_perform(h) == CURLE_OK &&
              curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK && status == 200;
    curl_easy_cleanup(h);
    return ok;
}

/* Starts n members forming one cluster and waits (20 s at most) until each answers; with cert
 * (and key, ca), clients speak TLS to the members; extra: more flags for every member (NULL). */
static void etcd__start(etcd_cluster_t *c, int n, const char *cert, const char *key, const char *ca,
                        const char *extra)
{
    const char *bin = etcd__binary();
    CT_ASSERT(n >= 1 && n <= ETCD_MEMBERS_MAX);
    memset(c, 0, sizeof *c);
    c->n = n;
    if (cert != NULL)
        snprintf(c->ca, sizeof c->ca, "%s", ca);
    static bool registered;
    if (!registered) {
        atexit(etcd__atexit);
        curl_global_init(CURL_GLOBAL_DEFAULT);
        registered = true;
    }
    size_t slot = 0;
    while (slot < sizeof etcd__clusters / sizeof etcd__clusters[0] && etcd__clusters[slot])
        slot++;
    CT_ASSERT(slot < sizeof etcd__clusters / sizeof etcd__clusters[0]);
    etcd__clusters[slot] = c;

    const char *tmp = getenv("TMPDIR");
    snprintf(c->root, sizeof c->root, "%s/ctrun-etcd.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    CT_ASSERT(mkdtemp(c->root) != NULL);

    int ports[2 * ETCD_MEMBERS_MAX];
    for (int i = 0; i < 2 * n; i++) {
        bool dup;
        do {
            ports[i] = e2e_free_port();
            dup = false;
            for (int j = 0; j < i; j++)
                dup = dup || ports[j] == ports[i];
        } while (dup);
    }
    char initial[ETCD_MEMBERS_MAX * 64] = "";
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        c->m[i].client_port = ports[2 * i];
        c->m[i].peer_port = ports[2 * i + 1];
        snprintf(c->m[i].endpoint, sizeof c->m[i].endpoint, "127.0.0.1:%d", ports[2 * i]);
        len += (size_t)snprintf(initial + len, sizeof initial - len, "%sm%d=http://127.0.0.1:%d",
                                i ? "," : "", i, ports[2 * i + 1]);
        snprintf(c->endpoints + strlen(c->endpoints), sizeof c->endpoints - strlen(c->endpoints),
                 "%s%s", i ? "," : "", c->m[i].endpoint);
    }
    for (int i = 0; i < n; i++) {
        etcd_member_t *m = &c->m[i];
        char name[16], dir[600], client[96], peer[96], token[64];
        snprintf(name, sizeof name, "m%d", i);
        snprintf(dir, sizeof dir, "%s/%s", c->root, name);
        snprintf(m->log, sizeof m->log, "%s/%s.log", c->root, name);
        snprintf(client, sizeof client, "%s://%s", cert ? "https" : "http", m->endpoint);
        snprintf(peer, sizeof peer, "http://127.0.0.1:%d", m->peer_port);
        snprintf(token, sizeof token, "ctrun-test-%d-%d", (int)getpid(), ports[0]);
        /* The log goes to a file: nobody reads the child's pipes while the test runs. */
        char *const argv[] = {"sh",
                              "-c",
                              "log=$1; shift; exec \"$@\" >\"$log\" 2>&1",
                              "sh",
                              m->log,
                              (char *)bin,
                              "--name",
                              name,
                              "--data-dir",
                              dir,
                              "--listen-client-urls",
                              client,
                              "--advertise-client-urls",
                              client,
                              "--listen-peer-urls",
                              peer,
                              "--initial-advertise-peer-urls",
                              peer,
                              "--initial-cluster",
                              initial,
                              "--initial-cluster-state",
                              "new",
                              "--initial-cluster-token",
                              token,
                              "--heartbeat-interval",
                              "100",
                              "--election-timeout",
                              "1000",
                              cert ? "--cert-file" : NULL,
                              (char *)cert,
                              "--key-file",
                              (char *)key,
                              (char *)extra,
                              NULL};
        CT_ASSERT_OK(ct_child_start(&m->child, argv, NULL));
        m->running = true;
    }
    int64_t deadline = ct_time_ms() + 20000;
    for (int i = 0; i < n; i++) {
        while (!etcd__healthy(c, i)) {
            CT_ASSERT_MSG(!ct_child_exited(&c->m[i].child), "etcd member %d exited: %s", i,
                          etcd__log_tail(c, i));
            CT_ASSERT_MSG(ct_time_ms() < deadline, "etcd member %d not healthy in 20 s: %s", i,
                          etcd__log_tail(c, i));
            ct_sleep_ms(50);
        }
    }
}

__attribute__((unused)) static void etcd_cluster_start(etcd_cluster_t *c, int n)
{
    etcd__start(c, n, NULL, NULL, NULL, NULL);
}

/* One member whose clients speak TLS (cert and key signed by ca), with one extra flag (or NULL). */
__attribute__((unused)) static void etcd_cluster_start_tls(etcd_cluster_t *c, const char *cert,
                                                           const char *key, const char *ca,
                                                           const char *extra)
{
    etcd__start(c, 1, cert, key, ca, extra);
}

/* SIGKILLs member i and reaps it. */
__attribute__((unused)) static void etcd_member_kill(etcd_cluster_t *c, int i)
{
    ct_child_close(&c->m[i].child);
    c->m[i].running = false;
}

#endif /* ETCD_CLUSTER_H */
