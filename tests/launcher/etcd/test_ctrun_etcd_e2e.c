/*
 * test_ctrun_etcd_e2e.c - real ctrun jobs with --rdzv_backend=etcd-v3 against real etcd members
 * (etcd_cluster.h) on loopback ports:
 *   - three agents (--nnodes=2:3) train with ctrain, checkpointing: SIGKILL of the agent that hosts
 *     the workers' store -> the other two re-form around a new group rank 0 that hosts a new
 *     store, resume from the checkpoint and finish all epochs, both exit 0; the killed agent's
 *     worker is gone and the job leaves no key in etcd. The failover time (SIGKILL -> a survivor's
 *     worker resumed from the checkpoint) is printed;
 *   - a three-member etcd loses the member the agents use mid-job: the job goes on and succeeds
 *     in its first attempt;
 *   - etcd stopped entirely mid-job: every agent exits 1 within the bounded wait (etcd_timeout
 *     plus the lease TTL, plus the grace period), naming etcd, and no worker survives;
 *   - no etcd at the endpoint at start: one line naming etcd and the endpoint, exit 1;
 *   - etcd over TLS (a CA and a certificate for 127.0.0.1 made by openssl) with authentication
 *     and tokens that expire after 1 s: without the CA, or with a wrong password, one line and
 *     exit 1; with both, the job runs, authenticating again once its token expired.
 * Skips with 77 when no etcd is installed.
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_cluster.h"

static const char *ctrain; /* argv[3] */

#define AGENTS 3

static void poll_all(ct_child_t *c, int n)
{
    for (int i = 0; i < n; i++)
        if (c[i].pid > 0)
            ct_child_poll_output(&c[i], 0);
}

/* Whether any process but this one has `needle` in its command line. */
static bool process_with(const char *needle)
{
    DIR *d = opendir("/proc");
    if (d == NULL)
        return false;
    bool found = false;
    for (struct dirent *e; !found && (e = readdir(d)) != NULL;) {
        int pid = atoi(e->d_name);
        if (pid <= 0 || pid == getpid())
            continue;
        /* cmdline is NUL-separated: look at every argument */
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
        FILE *f = fopen(path, "r");
        char buf[8192];
        size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f)
            fclose(f);
        buf[n] = '\0';
        for (size_t at = 0; at < n && !found; at += strlen(buf + at) + 1)
            found = strstr(buf + at, needle) != NULL;
    }
    closedir(d);
    return found;
}

/* The job's keys under /ctrun/<run_id>/ in etcd (through member i's gateway). */
static size_t job_keys(etcd_cluster_t *c, int i, const char *run_id)
{
    char prefix[256], end[256], b64k[512], b64e[512], url[128], body[1200];
    snprintf(prefix, sizeof prefix, "/ctrun/%s/", run_id);
    snprintf(end, sizeof end, "/ctrun/%s0", run_id); /* '/' + 1 */
    const char *tbl = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *outs[2] = {b64k, b64e};
    const char *ins[2] = {prefix, end};
    for (int k = 0; k < 2; k++) {
        const unsigned char *s = (const unsigned char *)ins[k];
        size_t n = strlen(ins[k]), o = 0;
        for (size_t j = 0; j < n; j += 3) {
            unsigned v = (unsigned)s[j] << 16 | (j + 1 < n ? (unsigned)s[j + 1] << 8 : 0) |
                         (j + 2 < n ? s[j + 2] : 0);
            outs[k][o++] = tbl[v >> 18 & 63];
            outs[k][o++] = tbl[v >> 12 & 63];
            outs[k][o++] = j + 1 < n ? tbl[v >> 6 & 63] : '=';
            outs[k][o++] = j + 2 < n ? tbl[v & 63] : '=';
        }
        outs[k][o] = '\0';
    }
    snprintf(url, sizeof url, "http://%s/v3/kv/range", c->m[i].endpoint);
    snprintf(body, sizeof body, "{\"key\":\"%s\",\"range_end\":\"%s\",\"count_only\":true}", b64k,
             b64e);
    CURL *h = curl_easy_init();
    CT_ASSERT(h != NULL);
    char reply[4096] = "";
    FILE *mem = fmemopen(reply, sizeof reply - 1, "w");
    CT_ASSERT(mem != NULL);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, mem);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
    CURLcode rc = curl_easy_perform(h);
    curl_easy_cleanup(h);
    fclose(mem);
    CT_ASSERT_MSG(rc == CURLE_OK, "etcd range: %s", curl_easy_strerror(rc));
    const char *count = strstr(reply, "\"count\":\"");
    return count ? (size_t)strtoull(count + 9, NULL, 10) : 0;
}

static void test_ctrain_store_host_killed(void)
{
    if (ctrain == NULL)
        CT_SKIP("no ctrain given");
    etcd_cluster_t etcd = {0};
    etcd_cluster_start(&etcd, 1);
    char ep[600], train_dir[600];
    snprintf(ep, sizeof ep, "--rdzv_endpoint=%s", etcd.endpoints);
    e2e_dir(train_dir, sizeof train_dir, "train_out");
    ct_child_t c[AGENTS];
    memset(c, 0, sizeof c);
    for (int i = 0; i < AGENTS; i++) {
        const char *const args[] = {"--rdzv_backend=etcd-v3",
                                    ep,
                                    "--rdzv_id=etcdtrain",
                                    "--nnodes=2:3",
                                    "--local_addr=127.0.0.1",
                                    "--rdzv_conf=last_call_timeout=30,heartbeat_timeout=2",
                                    "--max_restarts=3",
                                    "--grace_period=5",
                                    "--log_dir=/dev/null",
                                    "--no_python",
                                    ctrain,
                                    "--train_dir",
                                    train_dir,
                                    "--num_epochs",
                                    "40",
                                    "--ckpt_every_steps",
                                    "2",
                                    "--eval_every",
                                    "0",
                                    "--dataset",
                                    "synthetic:users=250,items=120,len=24,seed=5",
                                    "--maxlen",
                                    "20",
                                    "--hidden_units",
                                    "16",
                                    "--num_heads",
                                    "2",
                                    "--batch_size",
                                    "32",
                                    "--seed",
                                    "11",
                                    NULL};
        const char *const env[] = {"OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1",
                                   "CTRUN_COMM_ADDR=127.0.0.1", "CT_LOG_LEVEL=info", NULL};
        e2e_start(&c[i], env, args);
    }
    /* The three train; once a checkpoint exists, the agent hosting the store dies. */
    int64_t deadline = ct_time_ms() + 90000;
    int host = -1;
    while (host < 0 || !e2e_exists("%s/latest", train_dir)) {
        poll_all(c, AGENTS);
        for (int i = 0; i < AGENTS && host < 0; i++)
            if (c[i].err && strstr(c[i].err, "hosts the workers' store of attempt 0"))
                host = i;
        CT_ASSERT_MSG(ct_time_ms() < deadline, "no store host or no checkpoint:\n%s\n%s",
                      c[0].err ? c[0].err : "", etcd__log_tail(&etcd, 0));
        ct_sleep_ms(20);
    }
    int64_t t0 = ct_time_ms();
    kill(c[host].pid, SIGKILL);
    int s[2], ns = 0;
    for (int i = 0; i < AGENTS; i++)
        if (i != host)
            s[ns++] = i;
    /* Failover: until a survivor's worker has resumed from the checkpoint. */
    int64_t resumed_ms = -1;
    deadline = ct_time_ms() + 90000;
    while (resumed_ms < 0) {
        poll_all(c, AGENTS);
        for (int j = 0; j < 2; j++)
            if (c[s[j]].out && strstr(c[s[j]].out, "# resumed from"))
                resumed_ms = ct_time_ms() - t0;
        CT_ASSERT_MSG(ct_time_ms() < deadline, "no resume:\n%s\n%s", c[s[0]].err, c[s[1]].err);
        ct_sleep_ms(5);
    }
    printf("# failover (etcd-v3, lease TTL 2 s): SIGKILL of the store's host -> survivors' "
           "workers resumed from the checkpoint: %lld ms\n",
           (long long)resumed_ms);
    for (int j = 0; j < 2; j++) {
        CT_ASSERT_OK(ct_child_wait(&c[s[j]], 120000));
        CT_ASSERT_MSG(c[s[j]].exit_code == 0, "agent %d exit %d:\n%s", s[j], c[s[j]].exit_code,
                      c[s[j]].err);
    }
    /* One survivor is the new group rank 0: it hosted the next round's store; the resumed
     * rank 0 finished all 40 epochs. */
    const char *all_err[2] = {c[s[0]].err, c[s[1]].err}, *all_out[2] = {c[s[0]].out, c[s[1]].out};
    bool new_host = false, summary = false;
    for (int j = 0; j < 2; j++) {
        new_host = new_host || strstr(all_err[j], "hosts the workers' store of attempt 1") != NULL;
        summary = summary || strstr(all_out[j], "# summary: {\"epochs\":40") != NULL;
    }
    CT_ASSERT_MSG(new_host, "no new store host:\n%s\n%s", all_err[0], all_err[1]);
    CT_ASSERT_MSG(summary, "no summary:\n%s\n%s", all_out[0], all_out[1]);
    CT_ASSERT(e2e_exists("%s/final.safetensors", train_dir));
    CT_ASSERT_MSG(resumed_ms < 30000, "failover took %lld ms", (long long)resumed_ms);
    /* Nothing of the job survives: the killed agent's worker (its reaper), the job's keys. */
    deadline = ct_time_ms() + 15000;
    while (process_with(train_dir)) {
        CT_ASSERT_MSG(ct_time_ms() < deadline, "a ctrain of the job is still running");
        ct_sleep_ms(50);
    }
    CT_ASSERT_EQ(job_keys(&etcd, 0, "etcdtrain"), 0);
    for (int i = 0; i < AGENTS; i++)
        ct_child_close(&c[i]);
    etcd_cluster_stop(&etcd);
}

/* Two agents, --nnodes=2, the test worker sleeping sleep_ms in dirs d[]. */
static void start_pair(ct_child_t *c, char d[][600], const char *endpoints, const char *run_id,
                       const char *conf, const char *sleep_ms)
{
    char ep[600], id[128];
    snprintf(ep, sizeof ep, "--rdzv_endpoint=%s", endpoints);
    snprintf(id, sizeof id, "--rdzv_id=%s", run_id);
    for (int i = 0; i < 2; i++) {
        const char *const args[] = {"--rdzv_backend=etcd-v3",
                                    ep,
                                    id,
                                    "--nnodes=2",
                                    "--nproc_per_node=2",
                                    "--local_addr=127.0.0.1",
                                    conf,
                                    "--grace_period=3",
                                    "--log_dir=/dev/null",
                                    "--no_python",
                                    "WORKER",
                                    "--dir",
                                    d[i],
                                    "--sleep-ms",
                                    sleep_ms,
                                    NULL};
        e2e_start(&c[i], NULL, args);
    }
}

static void test_etcd_member_lost(void)
{
    etcd_cluster_t etcd = {0};
    etcd_cluster_start(&etcd, 3);
    char d[2][600];
    e2e_dir(d[0], sizeof d[0], "member0");
    e2e_dir(d[1], sizeof d[1], "member1");
    ct_child_t c[2];
    start_pair(c, d, etcd.endpoints, "memberloss", "--rdzv_conf=heartbeat_timeout=4", "8000");
    for (int i = 0; i < 2; i++)
        CT_ASSERT_MSG(e2e_wait_starts(d[i], 2, 60000), "node %d did not start:\n%s", i,
                      c[i].err ? c[i].err : "");
    /* The agents talk to the first member (the one that answered last): it goes. */
    etcd_member_kill(&etcd, 0);
    for (int i = 0; i < 2; i++) {
        CT_ASSERT_OK(ct_child_wait(&c[i], 60000));
        CT_ASSERT_MSG(c[i].exit_code == 0, "agent %d exit %d:\n%s", i, c[i].exit_code, c[i].err);
        CT_ASSERT_EQ(e2e_count_starts(d[i], 0), 2);
        CT_ASSERT_EQ(e2e_count_starts(d[i], -1), 2); /* no restart */
    }
    CT_ASSERT_EQ(job_keys(&etcd, 1, "memberloss"), 0);
    for (int i = 0; i < 2; i++)
        ct_child_close(&c[i]);
    etcd_cluster_stop(&etcd);
}

static void test_etcd_stopped(void)
{
    etcd_cluster_t etcd = {0};
    etcd_cluster_start(&etcd, 1);
    char d[2][600];
    e2e_dir(d[0], sizeof d[0], "stop0");
    e2e_dir(d[1], sizeof d[1], "stop1");
    ct_child_t c[2];
    /* The bound: etcd_timeout (3 s) + the lease TTL (2 s), then the grace period (3 s). */
    start_pair(c, d, etcd.endpoints, "stopped", "--rdzv_conf=etcd_timeout=3,heartbeat_timeout=2",
               "-1");
    for (int i = 0; i < 2; i++)
        CT_ASSERT_MSG(e2e_wait_starts(d[i], 2, 60000), "node %d did not start:\n%s", i,
                      c[i].err ? c[i].err : "");
    int64_t t0 = ct_time_ms();
    etcd_cluster_stop(&etcd);
    for (int i = 0; i < 2; i++) {
        CT_ASSERT_OK(ct_child_wait(&c[i], 60000));
        int64_t took = ct_time_ms() - t0;
        printf("# agent %d exited %lld ms after etcd stopped\n", i, (long long)took);
        CT_ASSERT_MSG(c[i].exit_code == 1, "agent %d exit %d:\n%s", i, c[i].exit_code, c[i].err);
        CT_ASSERT_STR_CONTAINS(c[i].err, "etcd");
        CT_ASSERT_MSG(took < 3000 + 2000 + 3000 + 7000, "agent %d took %lld ms:\n%s", i,
                      (long long)took, c[i].err);
    }
    for (int i = 0; i < 2; i++) {
        CT_ASSERT(e2e_all_gone(d[i], 10000));
        ct_child_close(&c[i]);
    }
}

static void test_unreachable_at_start(void)
{
    char ep[64], d[600];
    snprintf(ep, sizeof ep, "--rdzv_endpoint=127.0.0.1:%d", e2e_free_port());
    e2e_dir(d, sizeof d, "unreachable");
    const char *const args[] = {"--rdzv_backend=etcd-v3",
                                ep,
                                "--nnodes=1:2",
                                "--rdzv_conf=etcd_timeout=2",
                                "--no_python",
                                "WORKER",
                                "--dir",
                                d,
                                NULL};
    ct_child_t c;
    int64_t t0 = ct_time_ms();
    e2e_run(&c, NULL, args);
    int64_t took = ct_time_ms() - t0;
    CT_ASSERT_MSG(c.exit_code == 1, "exit %d:\n%s", c.exit_code, c.err);
    CT_ASSERT_STR_CONTAINS(c.err, "etcd");
    CT_ASSERT_STR_CONTAINS(c.err, ep + strlen("--rdzv_endpoint="));
    CT_ASSERT_MSG(took < 15000, "took %lld ms", (long long)took);
    CT_ASSERT_EQ(e2e_count_starts(d, -1), 0);
    ct_child_close(&c);
}

/* openssl makes a CA and a certificate for 127.0.0.1 in dir; false when it cannot. */
static bool make_certs(const char *dir)
{
    if (system("command -v openssl >/dev/null 2>&1") != 0)
        return false;
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt "
             "-days 2 -subj '/CN=ctrun test CA' && openssl req -newkey rsa:2048 -nodes -keyout "
             "server.key -out server.csr -subj '/CN=127.0.0.1' && printf "
             "'subjectAltName=IP:127.0.0.1\\n' >ext && openssl x509 -req -in server.csr -CA ca.crt "
             "-CAkey ca.key -CAcreateserial -out server.crt -days 2 -extfile ext",
             dir);
    char quiet[4200];
    snprintf(quiet, sizeof quiet, "(%s) >/dev/null 2>&1", cmd);
    return system(quiet) == 0;
}

/* POST body to path on the TLS member; asserts HTTP 200. */
static void etcd_tls_post(etcd_cluster_t *c, const char *path, const char *body)
{
    char url[256];
    snprintf(url, sizeof url, "https://%s%s", c->m[0].endpoint, path);
    CURL *h = curl_easy_init();
    CT_ASSERT(h != NULL);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CAINFO, c->ca);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, etcd__sink);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
    long status = 0;
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    CT_ASSERT_MSG(rc == CURLE_OK && status == 200, "%s: %s, HTTP %ld", path, curl_easy_strerror(rc),
                  status);
}

/* One agent of --nnodes=1:2 against the TLS member with conf; the worker sleeps sleep_ms. */
static void run_tls_agent(ct_child_t *c, etcd_cluster_t *etcd, const char *conf, const char *dir,
                          const char *sleep_ms)
{
    char ep[600];
    snprintf(ep, sizeof ep, "--rdzv_endpoint=%s", etcd->endpoints);
    const char *const args[] = {"--rdzv_backend=etcd-v3",
                                ep,
                                "--rdzv_id=tls",
                                "--nnodes=1:2",
                                "--local_addr=127.0.0.1",
                                conf,
                                "--log_dir=/dev/null",
                                "--no_python",
                                "WORKER",
                                "--dir",
                                dir,
                                "--sleep-ms",
                                sleep_ms,
                                NULL};
    const char *const env[] = {"CT_LOG_LEVEL=debug", NULL};
    e2e_start(c, env, args);
    CT_ASSERT_MSG(ct_child_wait(c, 60000) == 0, "timed out:\n%s", c->err ? c->err : "");
}

static void test_tls_and_auth(void)
{
    char certs[600], d[3][600], conf[2048], pw[700], badpw[700];
    e2e_dir(certs, sizeof certs, "certs");
    if (!make_certs(certs)) {
        printf("# skipped: openssl cannot make a certificate\n");
        return;
    }
    char ca[700], cert[700], key[700];
    snprintf(ca, sizeof ca, "%s/ca.crt", certs);
    snprintf(cert, sizeof cert, "%s/server.crt", certs);
    snprintf(key, sizeof key, "%s/server.key", certs);
    etcd_cluster_t etcd = {0};
    etcd_cluster_start_tls(&etcd, cert, key, ca, "--auth-token-ttl=1");
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "tls%d", i);
        e2e_dir(d[i], sizeof d[i], name);
    }
    ct_child_t c;
    /* TLS without the CA: the member's certificate is not trusted. */
    run_tls_agent(&c, &etcd, "--rdzv_conf=last_call_timeout=1,protocol=https,etcd_timeout=6", d[0],
                  "0");
    CT_ASSERT_MSG(c.exit_code == 1, "exit %d:\n%s", c.exit_code, c.err);
    CT_ASSERT_STR_CONTAINS(c.err, "etcd rendezvous (127.0.0.1:");
    CT_ASSERT_STR_CONTAINS(c.err, "certificate");
    CT_ASSERT_EQ(e2e_count_starts(d[0], -1), 0);
    ct_child_close(&c);
    /* Authentication on: user root, password "s3cret". */
    etcd_tls_post(&etcd, "/v3/auth/user/add", "{\"name\":\"root\",\"password\":\"s3cret\"}");
    etcd_tls_post(&etcd, "/v3/auth/user/grant", "{\"user\":\"root\",\"role\":\"root\"}");
    etcd_tls_post(&etcd, "/v3/auth/enable", "{}");
    snprintf(pw, sizeof pw, "%s/pw", certs);
    snprintf(badpw, sizeof badpw, "%s/badpw", certs);
    FILE *f = fopen(pw, "w");
    CT_ASSERT(f != NULL && fputs("s3cret\n", f) >= 0 && fclose(f) == 0);
    f = fopen(badpw, "w");
    CT_ASSERT(f != NULL && fputs("wrong\n", f) >= 0 && fclose(f) == 0);
    snprintf(conf, sizeof conf,
             "--rdzv_conf=last_call_timeout=1,protocol=https,cacert=%s,etcd_timeout=3,user=root,"
             "password_file=%s",
             ca, badpw);
    run_tls_agent(&c, &etcd, conf, d[1], "0");
    CT_ASSERT_MSG(c.exit_code == 1, "exit %d:\n%s", c.exit_code, c.err);
    CT_ASSERT_STR_CONTAINS(c.err, "authenticating as root");
    CT_ASSERT_STR_CONTAINS(c.err, "authentication failed");
    CT_ASSERT_EQ(e2e_count_starts(d[1], -1), 0);
    ct_child_close(&c);
    /* The right password; requests 2.5 s apart outlive the 1 s tokens: authenticated again. */
    snprintf(conf, sizeof conf,
             "--rdzv_conf=last_call_timeout=1,protocol=https,cacert=%s,etcd_timeout=3,user=root,"
             "password_file=%s,keep_alive_interval=2.5,heartbeat_timeout=8",
             ca, pw);
    run_tls_agent(&c, &etcd, conf, d[2], "6000");
    CT_ASSERT_MSG(c.exit_code == 0, "exit %d:\n%s", c.exit_code, c.err);
    CT_ASSERT_EQ(e2e_count_starts(d[2], -1), 1);
    CT_ASSERT_STR_CONTAINS(c.err, "authenticating again");
    ct_child_close(&c);
    etcd_cluster_stop(&etcd);
}

int main(int argc, char **argv)
{
    e2e_init(argc, argv, "test_ctrun_etcd_e2e");
    ctrain = argc > 3 ? argv[3] : NULL;
    etcd__binary(); /* skips (77) without etcd */
    CT_RUN(test_unreachable_at_start);
    CT_RUN(test_tls_and_auth);
    CT_RUN(test_etcd_stopped);
    CT_RUN(test_etcd_member_lost);
    CT_RUN(test_ctrain_store_host_killed);
    return 0;
}
