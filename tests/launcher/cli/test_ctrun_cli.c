/*
 * test_ctrun_cli.c - ctrun_cli_parse turns command lines and environments into the right
 * configuration: defaults, every option in both spellings and both value forms, PET_* and
 * the other fallbacks with the command line winning, argparse's scanning rules, the
 * rendezvous settings after --standalone, --rdzv_conf, and the entry rule. (Rejected values
 * and their messages are tested through the binary in test_ctrun_cli_exe.c.)
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

#include "ct_test.h"
#include "ctrun_cli.h"

static const char *const ct__noenv[] = {NULL};

/* Parses "ctrun" followed by the NULL-terminated arguments with env. */
static int ct__parse(ctrun_config_t *cfg, const char *const *env, ct_errbuf_t *eb, ...)
{
    char *argv[64];
    int argc = 0;
    argv[argc++] = "ctrun";
    va_list ap;
    va_start(ap, eb);
    for (char *a; (a = va_arg(ap, char *)) != NULL;)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    ctrun_cli_action_t action;
    int rc = ctrun_cli_parse(argc, argv, env, cfg, &action, eb);
    if (rc == 0)
        CT_ASSERT_EQ(action, CTRUN_CLI_RUN);
    return rc;
}

static void test_defaults(void)
{
    ctrun_config_t c;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "train.py", NULL));
    CT_ASSERT_EQ(c.min_nodes, 1);
    CT_ASSERT_EQ(c.max_nodes, 1);
    CT_ASSERT_EQ(c.nproc_kind, CTRUN_NPROC_INT);
    CT_ASSERT_EQ(c.nproc_per_node, 1);
    /* A single node given no port: its own store on a free port (torchrun 2.x). */
    CT_ASSERT_EQ(c.rdzv_backend, CTRUN_RDZV_C10D);
    CT_ASSERT(!c.standalone && c.free_port);
    CT_ASSERT_STR_EQ(c.rdzv_endpoint, "localhost:0");
    CT_ASSERT_EQ(strlen(c.run_id), 36);
    CT_ASSERT_EQ(c.node_rank, 0);
    CT_ASSERT_STR_EQ(c.master_addr, "127.0.0.1");
    CT_ASSERT_EQ(c.master_port, 29500);
    CT_ASSERT(c.local_addr == NULL);
    CT_ASSERT_STR_EQ(c.store_addr.host, "localhost");
    CT_ASSERT_EQ(c.store_addr.port, 0);
    CT_ASSERT_EQ(c.max_restarts, 0);
    CT_ASSERT_CLOSE(c.monitor_interval_s, 0.1, 1e-12, 0);
    CT_ASSERT_STR_EQ(c.start_method, "spawn");
    CT_ASSERT_CLOSE(c.grace_period_s, 30, 0, 0);
    CT_ASSERT_CLOSE(c.watchdog_timeout_s, 120, 0, 0);
    CT_ASSERT_CLOSE(c.restart_backoff_s, 0, 0, 0);
    CT_ASSERT_EQ(c.progress_guard, 3);
    CT_ASSERT(c.inject == NULL);
    CT_ASSERT_EQ(c.inject_seed, 0);
    CT_ASSERT_STR_EQ(c.signals_to_handle, "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
    CT_ASSERT_EQ(c.nsignals, 4);
    CT_ASSERT_STR_EQ(c.role, "default");
    CT_ASSERT(c.log_dir == NULL);
    CT_ASSERT_EQ(ctrun_std_get(&c.redirects, 0), 0);
    CT_ASSERT_EQ(ctrun_std_get(&c.tee, 0), 0);
    CT_ASSERT_EQ(c.local_ranks_filter.count, 0);
    CT_ASSERT(!c.module && !c.no_python && !c.run_path);
    CT_ASSERT(c.use_python);
    CT_ASSERT_STR_EQ(c.python, "python3");
    CT_ASSERT_EQ(c.python_source, CTRUN_PYTHON_PATH);
    CT_ASSERT_STR_EQ(c.script, "train.py");
    CT_ASSERT_EQ(c.nscript_args, 0);
    CT_ASSERT(c.script_args != NULL && c.script_args[0] == NULL);
    CT_ASSERT_EQ(c.nwarnings, 0);
    CT_ASSERT_EQ(c.rdzv_conf.count, 0);
    CT_ASSERT_CLOSE(c.rdzv_conf.timeout_s, 900, 0, 0);
    CT_ASSERT_CLOSE(c.rdzv_conf.join_timeout_s, 600, 0, 0);
    CT_ASSERT_CLOSE(c.rdzv_conf.last_call_timeout_s, 30, 0, 0);
    CT_ASSERT_CLOSE(c.rdzv_conf.close_timeout_s, 30, 0, 0);
    CT_ASSERT_CLOSE(c.rdzv_conf.read_timeout_s, 60, 0, 0);
    CT_ASSERT_CLOSE(c.rdzv_conf.heartbeat_timeout_s, 5, 0, 0);
    CT_ASSERT_CLOSE(c.rdzv_conf.keep_alive_interval_s, 5, 0, 0);
    CT_ASSERT_EQ(c.rdzv_conf.keep_alive_max_attempt, 3);
    /* ctrun's node heartbeats: every second, lost after 4 s of silence. */
    CT_ASSERT_CLOSE(c.rdzv_conf.node_hb_interval_s, 1, 0, 0);
    CT_ASSERT_CLOSE(c.rdzv_conf.node_hb_timeout_s, 4, 0, 0);
    CT_ASSERT_EQ(c.rdzv_conf.is_host, -1);
    CT_ASSERT(c.rdzv_conf.store_token == NULL);
    CT_ASSERT(!c.virtual_local_rank && c.virtual_devices == NULL);
    CT_ASSERT_EQ(c.dup_filters[0].count, 0);
    CT_ASSERT_EQ(c.dup_filters[1].count, 0);
    CT_ASSERT_EQ(c.numa_mode, CTRUN_NUMA_NONE);
    CT_ASSERT(c.numa_cpus == NULL);
    CT_ASSERT_STR_EQ(c.event_log_handler, "null");
    CT_ASSERT(!c.event_log_console);
    CT_ASSERT(!c.launch && !c.use_env && c.local_rank_arg == NULL);
    CT_ASSERT_EQ(c.metrics_port, -1);
    CT_ASSERT_STR_EQ(c.metrics_addr, "127.0.0.1");
    ctrun_config_free(&c);
    ctrun_config_free(&c);
}

/* ---- every valued option, both spellings, both forms ----------------------------------------- */

typedef void (*ct__check_fn)(const ctrun_config_t *c);

static void ck_nnodes(const ctrun_config_t *c)
{
    CT_ASSERT_EQ(c->min_nodes, 2);
    CT_ASSERT_EQ(c->max_nodes, 4);
}
static void ck_nproc(const ctrun_config_t *c)
{
    CT_ASSERT_EQ(c->nproc_per_node, 3);
}
static void ck_backend(const ctrun_config_t *c)
{
    CT_ASSERT_EQ(c->rdzv_backend, CTRUN_RDZV_C10D);
}
static void ck_endpoint(const ctrun_config_t *c)
{
    CT_ASSERT_STR_EQ(c->rdzv_endpoint, "node0.cluster:1234");
    CT_ASSERT_STR_EQ(c->store_addr.host, "node0.cluster");
    CT_ASSERT_EQ(c->store_addr.port, 1234);
}
static void ck_id(const ctrun_config_t *c)
{
    CT_ASSERT_STR_EQ(c->run_id, "job42");
}
static void ck_conf(const ctrun_config_t *c)
{
    CT_ASSERT_CLOSE(c->rdzv_conf.join_timeout_s, 7, 0, 0);
}
static void ck_node_rank(const ctrun_config_t *c)
{
    CT_ASSERT_EQ(c->node_rank, 1);
}
static void ck_master_addr(const ctrun_config_t *c)
{
    CT_ASSERT_STR_EQ(c->master_addr, "10.0.0.5");
    /* Without a port the single node takes a free one on localhost (test_single_node_port_rule),
     * where torchrun ignores --master_addr too. */
    CT_ASSERT_STR_EQ(c->store_addr.host, c->free_port ? "localhost" : "10.0.0.5");
}
static void ck_master_port(const ctrun_config_t *c)
{
    CT_ASSERT_EQ(c->master_port, 4567);
    CT_ASSERT_EQ(c->store_addr.port, 4567);
}
static void ck_local_addr(const ctrun_config_t *c)
{
    CT_ASSERT_STR_EQ(c->local_addr, "fe80::1");
}
static void ck_max_restarts(const ctrun_config_t *c)
{
    CT_ASSERT_EQ(c->max_restarts, 5);
}
static void ck_monitor(const ctrun_config_t *c)
{
    CT_ASSERT_CLOSE(c->monitor_interval_s, 0.5, 0, 0);
}
static void ck_start_method(const ctrun_config_t *c)
{
    CT_ASSERT_STR_EQ(c->start_method, "fork");
}
static void ck_signals(const ctrun_config_t *c)
{
    CT_ASSERT_STR_EQ(c->signals_to_handle, "SIGUSR1,SIGTERM");
    CT_ASSERT_EQ(c->nsignals, 2);
}
static void ck_grace(const ctrun_config_t *c)
{
    CT_ASSERT_CLOSE(c->grace_period_s, 2.5, 0, 0);
}
static void ck_watchdog(const ctrun_config_t *c)
{
    CT_ASSERT_CLOSE(c->watchdog_timeout_s, 60, 0, 0);
}
static void ck_backoff(const ctrun_config_t *c)
{
    CT_ASSERT_CLOSE(c->restart_backoff_s, 0.25, 0, 0);
}
static void ck_guard(const ctrun_config_t *c)
{
    CT_ASSERT_EQ(c->progress_guard, 0);
}
static void ck_inject(const ctrun_config_t *c)
{
    CT_ASSERT_STR_EQ(c->inject, "kill:rank=1:at=step=5;hang:rank=any:every=2s");
    /* Parsed once, here: the agent takes these. */
    CT_ASSERT_EQ(c->inject_specs.n, 2);
    CT_ASSERT_EQ(c->inject_specs.specs[0].rank, 1);
    CT_ASSERT_EQ(c->inject_specs.specs[1].rank, CTRUN_INJECT_ANY);
}
static void ck_inject_seed(const ctrun_config_t *c)
{
    CT_ASSERT_EQ(c->inject_seed, 77);
}
static void ck_handler(const ctrun_config_t *c)
{
    CT_ASSERT_EQ(c->nwarnings, 0);
}
static void ck_role(const ctrun_config_t *c)
{
    CT_ASSERT_STR_EQ(c->role, "trainer");
}
static void ck_python(const ctrun_config_t *c)
{
    CT_ASSERT_STR_EQ(c->python, "/usr/bin/python3");
}
static void ck_log_dir(const ctrun_config_t *c)
{
    CT_ASSERT_STR_EQ(c->log_dir, "/var/log/job");
}
static void ck_redirects(const ctrun_config_t *c)
{
    CT_ASSERT_EQ(ctrun_std_get(&c->redirects, 0), 1);
    CT_ASSERT_EQ(ctrun_std_get(&c->redirects, 1), 2);
    CT_ASSERT_EQ(ctrun_std_get(&c->redirects, 2), 0);
}
static void ck_tee(const ctrun_config_t *c)
{
    CT_ASSERT_EQ(ctrun_std_get(&c->tee, 5), 3);
}
static void ck_dup_out(const ctrun_config_t *c)
{
    CT_ASSERT_EQ(c->dup_filters[CTRUN_STREAM_STDOUT].count, 2);
    CT_ASSERT_STR_EQ(c->dup_filters[CTRUN_STREAM_STDOUT].needles[0], "loss");
    CT_ASSERT_STR_EQ(c->dup_filters[CTRUN_STREAM_STDOUT].needles[1], "a,b");
    CT_ASSERT_EQ(c->dup_filters[CTRUN_STREAM_STDERR].count, 0);
}
static void ck_dup_err(const ctrun_config_t *c)
{
    CT_ASSERT_EQ(c->dup_filters[CTRUN_STREAM_STDERR].count, 1);
    CT_ASSERT_STR_EQ(c->dup_filters[CTRUN_STREAM_STDERR].needles[0], "Traceback");
}
static void ck_template(const ctrun_config_t *c)
{
    CT_ASSERT_STR_EQ(c->log_line_prefix_template, "${rank}|");
}
static void ck_shutdown(const ctrun_config_t *c)
{
    CT_ASSERT_CLOSE(c->grace_period_s, 7, 0, 0);
}
static void ck_metrics_port(const ctrun_config_t *c)
{
    CT_ASSERT_EQ(c->metrics_port, 9464);
}
static void ck_metrics_addr(const ctrun_config_t *c)
{
    CT_ASSERT_STR_EQ(c->metrics_addr, "::1");
}
static void ck_local_rank_arg(const ctrun_config_t *c)
{
    CT_ASSERT(c->launch);
    CT_ASSERT_STR_EQ(c->local_rank_arg, "--local_rank");
}
static void ck_filter(const ctrun_config_t *c)
{
    CT_ASSERT_EQ(c->local_ranks_filter.count, 2);
    CT_ASSERT(ctrun_rank_filter_shows(&c->local_ranks_filter, 2));
    CT_ASSERT(!ctrun_rank_filter_shows(&c->local_ranks_filter, 1));
}

static const struct {
    const char *name; /* canonical spelling */
    const char *value;
    const char *extra; /* another option the value needs, or NULL */
    ct__check_fn check;
} ct__valued[] = {
    {"nnodes", "2:4", NULL, ck_nnodes},
    {"nproc_per_node", "3", NULL, ck_nproc},
    {"rdzv_backend", "c10d", NULL, ck_backend},
    {"rdzv_endpoint", "node0.cluster:1234", NULL, ck_endpoint},
    {"rdzv_id", "job42", NULL, ck_id},
    {"rdzv_conf", "join_timeout=7", NULL, ck_conf},
    {"node_rank", "1", "--nnodes=2", ck_node_rank},
    {"master_addr", "10.0.0.5", "--master_port=29500", ck_master_addr},
    {"master_port", "4567", NULL, ck_master_port},
    {"local_addr", "[fe80::1]", NULL, ck_local_addr},
    {"max_restarts", "5", NULL, ck_max_restarts},
    {"monitor_interval", "0.5", NULL, ck_monitor},
    {"start_method", "fork", NULL, ck_start_method},
    {"signals_to_handle", "SIGUSR1,SIGTERM", NULL, ck_signals},
    {"grace_period", "2.5", NULL, ck_grace},
    {"watchdog_timeout", "60", NULL, ck_watchdog},
    {"restart_backoff", "0.25", NULL, ck_backoff},
    {"progress_guard", "0", NULL, ck_guard},
    {"inject", "kill:rank=1:at=step=5;hang:rank=any:every=2s", "--nproc_per_node=2", ck_inject},
    {"inject_seed", "77", NULL, ck_inject_seed},
    {"event_log_handler", "null", NULL, ck_handler},
    {"role", "trainer", NULL, ck_role},
    {"python", "/usr/bin/python3", NULL, ck_python},
    {"log_dir", "/var/log/job", NULL, ck_log_dir},
    {"redirects", "0:1,1:2", NULL, ck_redirects},
    {"tee", "5:3", NULL, ck_tee},
    {"local_ranks_filter", "2,0", "--nproc_per_node=3", ck_filter},
    {"duplicate_stdout_filters", "loss,a,,b", NULL, ck_dup_out},
    {"duplicate_stderr_filters", "Traceback", NULL, ck_dup_err},
    {"log_line_prefix_template", "${rank}|", NULL, ck_template},
    {"shutdown_timeout", "7", NULL, ck_shutdown},
    {"local_rank_arg", "local_rank", "--launch_compat", ck_local_rank_arg},
    {"metrics_port", "9464", NULL, ck_metrics_port},
    {"metrics_addr", "[::1]", NULL, ck_metrics_addr},
};

static void test_every_valued_option_both_spellings(void)
{
    for (size_t i = 0; i < sizeof ct__valued / sizeof ct__valued[0]; i++) {
        char under[64], dash[64], joined[160];
        snprintf(under, sizeof under, "--%s", ct__valued[i].name);
        snprintf(dash, sizeof dash, "%s", under);
        for (char *p = dash + 2; *p; p++)
            *p = *p == '_' ? '-' : *p;
        const char *spellings[2] = {under, dash};
        for (int s = 0; s < 2; s++) {
            for (int form = 0; form < 2; form++) {
                ctrun_config_t c;
                ct_errbuf_t eb = {{0}};
                const char *extra = ct__valued[i].extra ? ct__valued[i].extra : "--role=default";
                int rc;
                if (form == 0) {
                    snprintf(joined, sizeof joined, "%s=%s", spellings[s], ct__valued[i].value);
                    rc = ct__parse(&c, ct__noenv, &eb, extra, joined, "w.py", NULL);
                } else {
                    rc = ct__parse(&c, ct__noenv, &eb, extra, spellings[s], ct__valued[i].value,
                                   "w.py", NULL);
                }
                CT_ASSERT_MSG(rc == 0, "%s %s: %s", spellings[s], ct__valued[i].value, eb.msg);
                ct__valued[i].check(&c);
                ctrun_config_free(&c);
            }
        }
    }
}

static void test_short_forms_and_flags(void)
{
    ctrun_config_t c;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "-r", "3", "-t1", "-m", "pkg.train", NULL));
    CT_ASSERT_EQ(ctrun_std_get(&c.redirects, 7), 3);
    CT_ASSERT_EQ(ctrun_std_get(&c.tee, 0), 1);
    CT_ASSERT(c.module && c.use_python);
    CT_ASSERT_STR_EQ(c.script, "pkg.train");
    ctrun_config_free(&c);

    /* argparse clusters: -mr=2 is -m then -r 2. */
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "-mr=2", "mod", NULL));
    CT_ASSERT(c.module);
    CT_ASSERT_EQ(ctrun_std_get(&c.redirects, 0), 2);
    ctrun_config_free(&c);

    static const char *const flags[][2] = {{"--standalone", NULL},
                                           {"--module", NULL},
                                           {"--no_python", "--no-python"},
                                           {"--run_path", "--run-path"}};
    for (size_t i = 0; i < 4; i++) {
        for (int s = 0; s < 2 && flags[i][s] != NULL; s++) {
            CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, flags[i][s], "w.py", NULL));
            bool v = i == 0 ? c.standalone : i == 1 ? c.module : i == 2 ? c.no_python : c.run_path;
            CT_ASSERT_MSG(v, "%s", flags[i][s]);
            ctrun_config_free(&c);
        }
    }
}

static void test_scanning_rules(void)
{
    ctrun_config_t c;
    ct_errbuf_t eb = {{0}};
    /* Everything after the script is the script's, torchrun-looking flags and "--" included. */
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "--nproc_per_node=2", "./w.sh", "a",
                           "--nproc_per_node=9", "--", "-m", "${local_rank}", NULL));
    CT_ASSERT_EQ(c.nproc_per_node, 2);
    CT_ASSERT_STR_EQ(c.script, "./w.sh");
    CT_ASSERT_EQ(c.nscript_args, 5);
    CT_ASSERT_STR_EQ(c.script_args[1], "--nproc_per_node=9");
    CT_ASSERT_STR_EQ(c.script_args[2], "--");
    CT_ASSERT_STR_EQ(c.script_args[4], "${local_rank}");
    CT_ASSERT(c.script_args[5] == NULL);
    CT_ASSERT(!c.module);
    ctrun_config_free(&c);

    /* "--" ends the options, so a script may start with '-'. */
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "--role", "r", "--", "-odd-name", "x", NULL));
    CT_ASSERT_STR_EQ(c.script, "-odd-name");
    CT_ASSERT_STR_EQ(c.role, "r");
    ctrun_config_free(&c);

    /* Unique prefixes, in either spelling, and the last occurrence wins. */
    CT_ASSERT_OK(
        ct__parse(&c, ct__noenv, &eb, "--nproc", "2", "--max-r=4", "--nproc-per=3", "w.py", NULL));
    CT_ASSERT_EQ(c.nproc_per_node, 3);
    CT_ASSERT_EQ(c.max_restarts, 4);
    ctrun_config_free(&c);

    /* An empty value is a value; a negative number is a value (then range-checked). */
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "--role=", "--rdzv_conf", "", "w.py", NULL));
    CT_ASSERT_STR_EQ(c.role, "");
    ctrun_config_free(&c);
    CT_ASSERT_ERR(ct__parse(&c, ct__noenv, &eb, "--max_restarts", "-1", "w.py", NULL),
                  CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct__parse(&c, ct__noenv, &eb, "--role", "--tee", "1", "w.py", NULL), CT_EPARSE);
    CT_ASSERT_STR_EQ(eb.msg, "--role: missing value");

    /* --help/--version win wherever they appear before the script, and not after it. */
    char *help[] = {"ctrun", "--nnodes=1", "--help", "--bogus", NULL};
    ctrun_cli_action_t action;
    CT_ASSERT_OK(ctrun_cli_parse(4, help, ct__noenv, &c, &action, &eb));
    CT_ASSERT_EQ(action, CTRUN_CLI_HELP);
    char *h2[] = {"ctrun", "-h", NULL};
    CT_ASSERT_OK(ctrun_cli_parse(2, h2, ct__noenv, &c, &action, &eb));
    CT_ASSERT_EQ(action, CTRUN_CLI_HELP);
    char *ver[] = {"ctrun", "--vers", NULL};
    CT_ASSERT_OK(ctrun_cli_parse(2, ver, ct__noenv, &c, &action, &eb));
    CT_ASSERT_EQ(action, CTRUN_CLI_VERSION);
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "w.py", "--help", NULL));
    CT_ASSERT_STR_EQ(c.script_args[0], "--help");
    ctrun_config_free(&c);
}

/* ---- environment fallbacks ------------------------------------------------------------------- */

static void test_pet_fallbacks(void)
{
    static const struct {
        const char *var, *value;
        ct__check_fn check;
    } cases[] = {
        {"PET_NNODES", "2:4", ck_nnodes},
        {"PET_NPROC_PER_NODE", "3", ck_nproc},
        {"PET_RDZV_BACKEND", "c10d", ck_backend},
        {"PET_RDZV_ENDPOINT", "node0.cluster:1234", ck_endpoint},
        {"PET_RDZV_ID", "job42", ck_id},
        {"PET_RDZV_CONF", "join_timeout=7", ck_conf},
        {"PET_MASTER_ADDR", "10.0.0.5", ck_master_addr},
        {"PET_MASTER_PORT", "4567", ck_master_port},
        {"PET_LOCAL_ADDR", "fe80::1", ck_local_addr},
        {"PET_MAX_RESTARTS", "5", ck_max_restarts},
        {"PET_MONITOR_INTERVAL", "0.5", ck_monitor},
        {"PET_START_METHOD", "fork", ck_start_method},
        {"PET_SIGNALS_TO_HANDLE", "SIGUSR1,SIGTERM", ck_signals},
        {"PET_EVENT_LOG_HANDLER", "null", ck_handler},
        {"PET_ROLE", "trainer", ck_role},
        {"PET_LOG_DIR", "/var/log/job", ck_log_dir},
        {"PET_REDIRECTS", "0:1,1:2", ck_redirects},
        {"PET_TEE", "5:3", ck_tee},
        {"PET_LOCAL_RANKS_FILTER", "2,0", ck_filter},
        {"CTRUN_PYTHON", "/usr/bin/python3", ck_python},
        {"PYTHON_EXEC", "/usr/bin/python3", ck_python},
        {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "2.5", ck_grace},
        {"CTRUN_WATCHDOG_TIMEOUT", "60", ck_watchdog},
        {"CTRUN_RESTART_BACKOFF", "0.25", ck_backoff},
        {"CTRUN_PROGRESS_GUARD", "0", ck_guard},
        {"CTRUN_INJECT", "kill:rank=1:at=step=5;hang:rank=any:every=2s", ck_inject},
        {"CTRUN_INJECT_SEED", "77", ck_inject_seed},
        {"PET_DUPLICATE_STDOUT_FILTERS", "loss,a,,b", ck_dup_out},
        {"PET_DUPLICATE_STDERR_FILTERS", "Traceback", ck_dup_err},
        {"PET_LOG_LINE_PREFIX_TEMPLATE", "${rank}|", ck_template},
        {"PET_SHUTDOWN_TIMEOUT", "7", ck_shutdown},
        {"CTRUN_METRICS_PORT", "9464", ck_metrics_port},
        {"CTRUN_METRICS_ADDR", "::1", ck_metrics_addr},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char entry[128];
        snprintf(entry, sizeof entry, "%s=%s", cases[i].var, cases[i].value);
        /* Three workers, so that the ranks these values name exist. */
        bool nproc = strcmp(cases[i].var, "PET_NPROC_PER_NODE") == 0;
        const char *env[] = {"UNRELATED=1", entry, nproc ? NULL : "PET_NPROC_PER_NODE=3", NULL};
        ctrun_config_t c;
        ct_errbuf_t eb = {{0}};
        CT_ASSERT_MSG(ct__parse(&c, env, &eb, "w.py", NULL) == 0, "%s: %s", entry, eb.msg);
        cases[i].check(&c);
        ctrun_config_free(&c);
    }
    /* PET_NODE_RANK with PET_NNODES. */
    const char *env[] = {"PET_NNODES=2", "PET_NODE_RANK=1", NULL};
    ctrun_config_t c;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ct__parse(&c, env, &eb, "w.py", NULL));
    ck_node_rank(&c);
    ctrun_config_free(&c);
}

static void test_flag_fallbacks_and_precedence(void)
{
    ctrun_config_t c;
    ct_errbuf_t eb = {{0}};
    const char *on[] = {"PET_STANDALONE=1", "PET_MODULE=1", NULL};
    CT_ASSERT_OK(ct__parse(&c, on, &eb, "w", NULL));
    CT_ASSERT(c.standalone && c.module && !c.no_python && c.use_python);
    ctrun_config_free(&c);
    const char *nopy[] = {"PET_NO_PYTHON=1", NULL};
    CT_ASSERT_OK(ct__parse(&c, nopy, &eb, "w.py", NULL));
    CT_ASSERT(c.no_python && !c.use_python);
    ctrun_config_free(&c);
    /* bool(int(...)): " 2 " is true, "0" is false. */
    const char *two[] = {"PET_RUN_PATH= 2 ", "PET_STANDALONE=0", NULL};
    CT_ASSERT_OK(ct__parse(&c, two, &eb, "w", NULL));
    CT_ASSERT(c.run_path && !c.standalone && c.use_python);
    ctrun_config_free(&c);
    /* The command line wins over the environment, and the variable is not even parsed. */
    const char *bad[] = {"PET_STANDALONE=yes", "PET_NPROC_PER_NODE=3", "PET_ROLE=env", NULL};
    CT_ASSERT_OK(ct__parse(&c, bad, &eb, "--standalone", "--nproc_per_node=2", "w.py", NULL));
    CT_ASSERT(c.standalone);
    CT_ASSERT_EQ(c.nproc_per_node, 2);
    CT_ASSERT_STR_EQ(c.role, "env");
    ctrun_config_free(&c);
    CT_ASSERT_ERR(ct__parse(&c, bad, &eb, "w.py", NULL), CT_EPARSE);
    CT_ASSERT_STR_EQ(eb.msg, "PET_STANDALONE: \"yes\" is not an integer");
    /* CTRUN_PYTHON beats PYTHON_EXEC; --python beats both. */
    const char *py[] = {"PYTHON_EXEC=/a/python", "CTRUN_PYTHON=/b/python", NULL};
    CT_ASSERT_OK(ct__parse(&c, py, &eb, "w.py", NULL));
    CT_ASSERT_STR_EQ(c.python, "/b/python");
    ctrun_config_free(&c);
    CT_ASSERT_OK(ct__parse(&c, py, &eb, "--python", "/c/python", "w.py", NULL));
    CT_ASSERT_STR_EQ(c.python, "/c/python");
    ctrun_config_free(&c);
    /* An empty PET_LOG_DIR means no log dir; an empty PET_MAX_RESTARTS is an error. */
    const char *empty[] = {"PET_LOG_DIR=", NULL};
    CT_ASSERT_OK(ct__parse(&c, empty, &eb, "w.py", NULL));
    CT_ASSERT(c.log_dir == NULL);
    ctrun_config_free(&c);
    const char *empty2[] = {"PET_MAX_RESTARTS=", NULL};
    CT_ASSERT_ERR(ct__parse(&c, empty2, &eb, "w.py", NULL), CT_EPARSE);
    CT_ASSERT_STR_EQ(eb.msg, "PET_MAX_RESTARTS: empty value (expected an integer)");
    /* A process environment (env == NULL) is read too. */
    setenv("PET_MAX_RESTARTS", "6", 1);
    CT_ASSERT_OK(ct__parse(&c, NULL, &eb, "w.py", NULL));
    CT_ASSERT_EQ(c.max_restarts, 6);
    ctrun_config_free(&c);
    unsetenv("PET_MAX_RESTARTS");
}

/* ---- rendezvous ------------------------------------------------------------------------------ */

static bool ct__is_uuid4(const char *s)
{
    if (strlen(s) != 36 || s[14] != '4' || strchr("89ab", s[19]) == NULL)
        return false;
    for (int i = 0; i < 36; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : !isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i]))
            return false;
    }
    return true;
}

static void test_standalone(void)
{
    ctrun_config_t a, b;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ct__parse(&a, ct__noenv, &eb, "--standalone", "--nproc_per_node=2", "w.py", NULL));
    CT_ASSERT_OK(ct__parse(&b, ct__noenv, &eb, "--standalone", "w.py", NULL));
    CT_ASSERT_EQ(a.rdzv_backend, CTRUN_RDZV_C10D);
    CT_ASSERT_STR_EQ(a.rdzv_endpoint, "localhost:0");
    CT_ASSERT_STR_EQ(a.store_addr.host, "localhost");
    CT_ASSERT_EQ(a.store_addr.port, 0);
    CT_ASSERT_MSG(ct__is_uuid4(a.run_id), "%s", a.run_id);
    CT_ASSERT(strcmp(a.run_id, b.run_id) != 0);
    CT_ASSERT_EQ(a.nwarnings, 0);
    ctrun_config_free(&a);
    ctrun_config_free(&b);

    /* Explicit rendezvous values are ignored, with a warning; invalid ones too. */
    CT_ASSERT_OK(ct__parse(&a, ct__noenv, &eb, "--standalone", "--rdzv_id=x",
                           "--rdzv_endpoint=bad:host:x", "--nnodes=1:2", "w.py", NULL));
    CT_ASSERT_EQ(a.nwarnings, 1);
    CT_ASSERT_STR_CONTAINS(a.warnings[0], "are ignored");
    CT_ASSERT(strcmp(a.run_id, "x") != 0);
    ctrun_config_free(&a);
    CT_ASSERT_ERR(ct__parse(&a, ct__noenv, &eb, "--standalone", "--nnodes=2", "w.py", NULL),
                  CT_EPARSE);
    CT_ASSERT_STR_EQ(eb.msg, "--standalone runs a single-node job, but --nnodes asks for at "
                             "least 2 nodes");
    /* A rendezvous plan lists every node: there is a ceiling. */
    CT_ASSERT_ERR(ct__parse(&a, ct__noenv, &eb, "--nnodes=1:5000", "w.py", NULL), CT_ERANGE_VALUE);
    CT_ASSERT_STR_EQ(eb.msg, "--nnodes: \"1:5000\": at most 4096 nodes");
}

static void test_store_address(void)
{
    ctrun_config_t c;
    ct_errbuf_t eb = {{0}};
    /* static: the endpoint beats master_addr/port; IPv6 in brackets. */
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "--master_addr=10.1.1.1", "--rdzv_endpoint",
                           "[::1]:1234", "w.py", NULL));
    CT_ASSERT_STR_EQ(c.store_addr.host, "::1");
    CT_ASSERT_EQ(c.store_addr.kind, CT_HOST_IPV6);
    CT_ASSERT_EQ(c.store_addr.port, 1234);
    ctrun_config_free(&c);
    CT_ASSERT_OK(
        ct__parse(&c, ct__noenv, &eb, "--master_addr=[::1]", "--master_port=+29501", "w.py", NULL));
    CT_ASSERT_STR_EQ(c.master_addr, "::1");
    CT_ASSERT_STR_EQ(c.store_addr.host, "::1");
    CT_ASSERT_EQ(c.store_addr.port, 29501);
    ctrun_config_free(&c);
    /* c10d: localhost:29400 by default, port 29400 when the endpoint has none. */
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "--rdzv_backend=c10d", "--nnodes=2", "--node_rank=7",
                           "w.py", NULL));
    CT_ASSERT_STR_EQ(c.store_addr.host, "localhost");
    CT_ASSERT_EQ(c.store_addr.port, 29400);
    CT_ASSERT_EQ(c.node_rank, 7); /* not range-checked: c10d assigns ranks itself */
    ctrun_config_free(&c);
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "--rdzv_backend=c10d", "--rdzv_endpoint=h1",
                           "--master_addr=10.0.0.1", "w.py", NULL));
    CT_ASSERT_STR_EQ(c.store_addr.host, "h1");
    CT_ASSERT_EQ(c.store_addr.port, 29400);
    CT_ASSERT_EQ(c.nwarnings, 0);
    ctrun_config_free(&c);
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "--rdzv_backend=c10d", "--master_addr=10.0.0.1",
                           "w.py", NULL));
    CT_ASSERT_EQ(c.nwarnings, 1);
    CT_ASSERT_STR_CONTAINS(c.warnings[0], "only used by the static backend");
    ctrun_config_free(&c);
    /* etcd-v3: the endpoint lists etcd's members, port 2379 by default; the first is store_addr
     * (for the INFO block). */
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "--rdzv_backend=etcd-v3",
                           "--rdzv_endpoint=e1,[::1]:2380,e3:2381", "w.py", NULL));
    CT_ASSERT_EQ(c.rdzv_backend, CTRUN_RDZV_ETCD_V3);
    CT_ASSERT_STR_EQ(c.rdzv_endpoint, "e1:2379,[::1]:2380,e3:2381");
    CT_ASSERT_STR_EQ(c.store_addr.host, "e1");
    CT_ASSERT_EQ(c.store_addr.port, 2379);
    ctrun_config_free(&c);
    /* Port 0 on a single node; static MIN:MAX waits for MAX (a warning says so). */
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "--master_port=0", "w.py", NULL));
    CT_ASSERT_EQ(c.store_addr.port, 0);
    ctrun_config_free(&c);
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "--nnodes=2:3", "--node_rank=2", "w.py", NULL));
    CT_ASSERT_EQ(c.nwarnings, 1);
    CT_ASSERT_STR_EQ(c.warnings[0], "static rendezvous waits for all 3 nodes of --nnodes=2:3");
    ctrun_config_free(&c);
}

static void test_rdzv_conf(void)
{
    ctrun_config_t c;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "--rdzv_conf",
                           " join_timeout=5, last_call_timeout = 1.5,is_host=yes,"
                           "store_token=s=cret,foo=bar,keep_alive_max_attempt=4,join_timeout=6 ",
                           "w.py", NULL));
    CT_ASSERT_CLOSE(c.rdzv_conf.join_timeout_s, 6, 0, 0);
    CT_ASSERT_CLOSE(c.rdzv_conf.last_call_timeout_s, 1.5, 0, 0);
    CT_ASSERT_EQ(c.rdzv_conf.is_host, 1);
    CT_ASSERT_STR_EQ(c.rdzv_conf.store_token, "s=cret");
    CT_ASSERT_EQ(c.rdzv_conf.keep_alive_max_attempt, 4);
    CT_ASSERT_EQ(c.rdzv_conf.count, 6);
    CT_ASSERT_CLOSE(c.rdzv_conf.node_hb_interval_s, 1, 0, 0);
    CT_ASSERT_CLOSE(c.rdzv_conf.node_hb_timeout_s, 4, 0, 0);
    CT_ASSERT_STR_EQ(ctrun_rdzv_conf_get(&c.rdzv_conf, "foo"), "bar");
    CT_ASSERT(ctrun_rdzv_conf_get(&c.rdzv_conf, "missing") == NULL);
    CT_ASSERT_EQ(c.nwarnings, 1);
    CT_ASSERT_STR_EQ(c.warnings[0], "--rdzv_conf: unknown key \"foo\" is ignored");
    ctrun_config_free(&c);

    /* torchrun's keep-alive keys give the heartbeat interval and, times the attempts, the
     * timeout; heartbeat_timeout sets the timeout directly. */
    ctrun_rdzv_conf_t hc;
    CT_ASSERT_OK(ctrun_rdzv_conf_parse("keep_alive_interval=2,keep_alive_max_attempt=3", &hc, &eb));
    CT_ASSERT_CLOSE(hc.node_hb_interval_s, 2, 0, 0);
    CT_ASSERT_CLOSE(hc.node_hb_timeout_s, 6, 0, 0);
    ctrun_rdzv_conf_free(&hc);
    CT_ASSERT_OK(ctrun_rdzv_conf_parse("heartbeat_timeout=1.5,keep_alive_interval=0.5", &hc, &eb));
    CT_ASSERT_CLOSE(hc.node_hb_interval_s, 0.5, 0, 0);
    CT_ASSERT_CLOSE(hc.node_hb_timeout_s, 1.5, 0, 0);
    ctrun_rdzv_conf_free(&hc);

    static const char *const bad[][2] = {
        {"timeout=0", "timeout: 0 is out of range (expected 0.001..1e+09)"},
        {"heartbeat_timeout=0.5", "heartbeat_timeout: 0.5 s is not longer than the heartbeat "
                                  "interval (keep_alive_interval) 1 s"},
        {"keep_alive_max_attempt=0", "keep_alive_max_attempt: 0 is out of range (expected "
                                     "1..2147483647)"},
        {"is_host=maybe", "is_host: \"maybe\" is not a boolean (expected 1/0, true/false, yes/no, "
                          "on/off)"},
        {"store_type=file", "store_type: the file store is not supported by ctrun (use tcp)"},
        {"rank=x", "rank: \"x\" is not an integer"},
        {"=1", "\"=1\" is not in the format <key1>=<value1>,...,<keyN>=<valueN>"},
        {"a", "option \"a\" must have a value"},
        {"a= ", "option \"a\" must have a value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ctrun_rdzv_conf_t rc;
        CT_ASSERT_MSG(ctrun_rdzv_conf_parse(bad[i][0], &rc, &eb) != 0, "%s", bad[i][0]);
        CT_ASSERT_STR_EQ(eb.msg, bad[i][1]);
    }
}

static void test_entry_rule(void)
{
    static const struct {
        const char *a1, *a2, *a3;
        bool python;
    } cases[] = {
        {"train.py", NULL, NULL, true},
        {"./train", NULL, NULL, false},
        {"python3", "train.py", NULL, false},
        {"-m", "pkg.mod", NULL, true},
        {"--no_python", "train.py", NULL, false},
        {"--run_path", "--no_python", "train", true},
        {"--run-path", "-m", "--no-python", true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ctrun_config_t c;
        ct_errbuf_t eb = {{0}};
        int rc = cases[i].a3 ? ct__parse(&c, ct__noenv, &eb, cases[i].a1, cases[i].a2, cases[i].a3,
                                         "s.py", NULL)
                 : cases[i].a2 ? ct__parse(&c, ct__noenv, &eb, cases[i].a1, cases[i].a2, NULL)
                               : ct__parse(&c, ct__noenv, &eb, cases[i].a1, NULL);
        CT_ASSERT_MSG(rc == 0, "case %zu: %s", i, eb.msg);
        CT_ASSERT_MSG(c.use_python == cases[i].python, "case %zu", i);
        ctrun_config_free(&c);
    }
}

/* Values that name a rank or node are checked against the job's size at parse time. */
static void test_values_must_exist_in_the_job(void)
{
    ctrun_config_t c;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_ERR(ct__parse(&c, ct__noenv, &eb, "--inject", "kill:rank=5:at=time=1s", "w.py", NULL),
                  CT_ERANGE_VALUE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "rank 5 does not exist");
    CT_ASSERT_ERR(
        ct__parse(&c, ct__noenv, &eb, "--inject", "kill_agent:node=7:at=time=1s", "w.py", NULL),
        CT_ERANGE_VALUE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "node 7 does not exist");
    CT_ASSERT_ERR(ct__parse(&c, ct__noenv, &eb, "--nnodes=2", "--inject",
                            "kill_agent:node=2:at=time=1s", "w.py", NULL),
                  CT_ERANGE_VALUE);
    /* Several nodes: ranks add up over nodes that may run different --nproc_per_node counts,
     * so only the node is known before the rendezvous. */
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "--nnodes=1:3", "--nproc_per_node=2", "--inject",
                           "kill:rank=9:at=step=1;kill_agent:node=2:at=time=1s;"
                           "torn_ckpt:at=step=3:rank=4;hang:rank=any:every=1s",
                           "w.py", NULL));
    CT_ASSERT_EQ(c.inject_specs.n, 4);
    CT_ASSERT_EQ(ctrun_inject_missing_rank(&c.inject_specs, 0, 6), 9);
    CT_ASSERT_EQ(ctrun_inject_missing_rank(&c.inject_specs, 0, 10), -1);
    CT_ASSERT_EQ(ctrun_inject_missing_rank(&c.inject_specs, 1, 1), -1); /* a node, not a rank */
    CT_ASSERT_EQ(ctrun_inject_missing_rank(&c.inject_specs, 2, 4), 4);
    CT_ASSERT_EQ(ctrun_inject_missing_rank(&c.inject_specs, 3, 1), -1); /* any */
    ctrun_config_free(&c);
    /* One node: its --nproc_per_node is the whole job. */
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "--nproc_per_node=2", "--inject",
                           "kill:rank=1:at=step=1", "w.py", NULL));
    ctrun_config_free(&c);
    CT_ASSERT_ERR(ct__parse(&c, ct__noenv, &eb, "--nproc_per_node=2", "--inject",
                            "hang:rank=2:at=step=1", "w.py", NULL),
                  CT_ERANGE_VALUE);
    /* --local_ranks_filter: local ranks of this node only. */
    CT_ASSERT_ERR(ct__parse(&c, ct__noenv, &eb, "--local_ranks_filter", "5", "w.py", NULL),
                  CT_ERANGE_VALUE);
    CT_ASSERT_STR_EQ(eb.msg, "--local_ranks_filter: local rank 5 does not exist on this node "
                             "(--nproc_per_node 1: local ranks 0..0)");
    CT_ASSERT_ERR(ct__parse(&c, ct__noenv, &eb, "--nproc_per_node=2", "--local-ranks-filter=0,2",
                            "w.py", NULL),
                  CT_ERANGE_VALUE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "--local-ranks-filter: local rank 2");
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "--nproc_per_node=2", "--local_ranks_filter=1,0",
                           "w.py", NULL));
    ctrun_config_free(&c);
    /* CTRUN_CONSOLE_BUFFER. */
    const char *env[] = {"CTRUN_CONSOLE_BUFFER=64K", NULL};
    CT_ASSERT_OK(ct__parse(&c, env, &eb, "w.py", NULL));
    CT_ASSERT_EQ(c.console_buffer, 65536);
    ctrun_config_free(&c);
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "w.py", NULL));
    CT_ASSERT_EQ(c.console_buffer, 0);
    ctrun_config_free(&c);
    const char *small[] = {"CTRUN_CONSOLE_BUFFER=100", NULL};
    CT_ASSERT_ERR(ct__parse(&c, small, &eb, "w.py", NULL), CT_ERANGE_VALUE);
    const char *big[] = {"CTRUN_CONSOLE_BUFFER=2G", NULL};
    CT_ASSERT_ERR(ct__parse(&c, big, &eb, "w.py", NULL), CT_ERANGE_VALUE);
}

/* The variables the agent acts on are read here, from the environment the parse is given, and
 * never again: the agent takes them from the configuration. */
static void test_agent_environment(void)
{
    ctrun_config_t c;
    ct_errbuf_t eb = {{0}};
    /* Set in this process, absent from the environment the parse is given: not read. */
    setenv("TORCHELASTIC_ERROR_FILE", "/proc-env/error.json", 1);
    setenv("CTRUN_CGROUP", "off", 1);
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "w.py", NULL));
    CT_ASSERT(c.log_line_prefix_template == NULL);
    CT_ASSERT(c.error_file == NULL);
    CT_ASSERT(c.cgroup);
    CT_ASSERT_STR_EQ(c.tmp_dir, "/tmp");
    ctrun_config_free(&c);
    unsetenv("TORCHELASTIC_ERROR_FILE");
    unsetenv("CTRUN_CGROUP");

    char tmp[] = "/tmp/ctrun_cli_tmp_XXXXXX";
    CT_ASSERT(mkdtemp(tmp) != NULL);
    char tmpdir[64], temp[64];
    snprintf(tmpdir, sizeof tmpdir, "TMPDIR=%s", tmp);
    snprintf(temp, sizeof temp, "TEMP=%s", tmp);
    const char *env[] = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=[${role_name}${rank}]: ",
                         "TORCHELASTIC_ERROR_FILE=/job/error.json",
                         "CTRUN_CGROUP=off",
                         tmpdir,
                         "TORCHELASTIC_ENABLE_FILE_TIMER=1",
                         "TORCHELASTIC_TIMER_FILE=/job/timer",
                         NULL};
    CT_ASSERT_OK(ct__parse(&c, env, &eb, "w.py", NULL));
    CT_ASSERT_STR_EQ(c.log_line_prefix_template, "[${role_name}${rank}]: ");
    CT_ASSERT_STR_EQ(c.error_file, "/job/error.json");
    CT_ASSERT(!c.cgroup);
    CT_ASSERT(c.file_timer);
    CT_ASSERT_STR_EQ(c.timer_file, "/job/timer");
    CT_ASSERT_STR_EQ(c.tmp_dir, tmp);
    ctrun_config_free(&c);
    ctrun_config_free(&c); /* twice is fine */
    /* An unusable TMPDIR gives way to TEMP; CTRUN_CGROUP other than "off" keeps the cgroup. */
    const char *env2[] = {"TMPDIR=/nonexistent-ctrun-dir", temp, "CTRUN_CGROUP=on", NULL};
    CT_ASSERT_OK(ct__parse(&c, env2, &eb, "w.py", NULL));
    CT_ASSERT_STR_EQ(c.tmp_dir, tmp);
    CT_ASSERT(c.cgroup);
    /* Off unless TORCHELASTIC_ENABLE_FILE_TIMER is "1" (torchrun's test). */
    CT_ASSERT(!c.file_timer);
    CT_ASSERT(c.timer_file == NULL);
    ctrun_config_free(&c);
    CT_ASSERT_EQ(rmdir(tmp), 0);
}

/* torchrun 2.x: a single node given neither a port nor an endpoint takes a free port; anything
 * that names a port or more nodes keeps the static rendezvous on 29500. */
static void test_single_node_port_rule(void)
{
    ctrun_config_t c;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "--rdzv_backend=static", "--rdzv_id=job7",
                           "--nnodes=1:1", "w.py", NULL));
    CT_ASSERT(c.free_port && !c.standalone);
    CT_ASSERT_EQ(c.rdzv_backend, CTRUN_RDZV_C10D);
    CT_ASSERT_EQ(c.store_addr.port, 0);
    CT_ASSERT_STR_EQ(c.run_id, "job7"); /* a given id stays */
    CT_ASSERT_EQ(c.nwarnings, 0);
    ctrun_config_free(&c);
    const char *pet_port[] = {"PET_MASTER_PORT=29511", NULL};
    const char *pet_ep[] = {"PET_RDZV_ENDPOINT=h0:29512", NULL};
    struct {
        const char *const *env;
        const char *arg;
        int port;
    } keep[] = {
        {ct__noenv, "--master_port=29500", 29500},
        {ct__noenv, "--nnodes=2", 29500},
        {ct__noenv, "--nnodes=1:2", 29500},
        {pet_port, "--role=x", 29511},
        {pet_ep, "--role=x", 29512},
    };
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        CT_ASSERT_OK(ct__parse(&c, keep[i].env, &eb, keep[i].arg, "w.py", NULL));
        CT_ASSERT_MSG(!c.free_port && c.rdzv_backend == CTRUN_RDZV_STATIC, "case %zu", i);
        CT_ASSERT_EQ(c.store_addr.port, keep[i].port);
        ctrun_config_free(&c);
    }
    /* c10d named without an endpoint stays on localhost:29400, as before. */
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "--rdzv_backend=c10d", "w.py", NULL));
    CT_ASSERT(!c.free_port);
    CT_ASSERT_EQ(c.store_addr.port, 29400);
    ctrun_config_free(&c);
}

static void test_newer_torchrun_options(void)
{
    ctrun_config_t c;
    ct_errbuf_t eb = {{0}};
    /* --virtual_local_rank: entry <local rank> of the agent's device list, blanks trimmed. */
    const char *cvd[] = {"CUDA_VISIBLE_DEVICES=3, 5,7", "PET_VIRTUAL_LOCAL_RANK=1", NULL};
    CT_ASSERT_OK(ct__parse(&c, cvd, &eb, "--nproc_per_node=2", "w.py", NULL));
    CT_ASSERT(c.virtual_local_rank && !c.virtual_hip);
    CT_ASSERT_STR_EQ(c.virtual_devices[0], "3");
    CT_ASSERT_STR_EQ(c.virtual_devices[1], "5");
    ctrun_config_free(&c);
    CT_ASSERT_OK(
        ct__parse(&c, ct__noenv, &eb, "--virtual-local-rank", "--nproc_per_node=2", "w.py", NULL));
    CT_ASSERT_STR_EQ(c.virtual_devices[1], "1");
    ctrun_config_free(&c);
    const char *hip[] = {"HIP_VISIBLE_DEVICES=4,6", "CUDA_VISIBLE_DEVICES=0", NULL};
    CT_ASSERT_OK(
        ct__parse(&c, hip, &eb, "--virtual_local_rank", "--nproc_per_node=2", "w.py", NULL));
    CT_ASSERT(c.virtual_hip);
    CT_ASSERT_STR_EQ(c.virtual_devices[1], "6");
    ctrun_config_free(&c);
    const char *two[] = {"CUDA_VISIBLE_DEVICES=0,1", NULL};
    CT_ASSERT_ERR(
        ct__parse(&c, two, &eb, "--virtual_local_rank", "--nproc_per_node=3", "w.py", NULL),
        CT_ERANGE_VALUE);
    CT_ASSERT_STR_EQ(eb.msg, "--virtual_local_rank: local rank 2 exceeds the GPUs in "
                             "CUDA_VISIBLE_DEVICES=0,1 (--nproc_per_node 3)");

    /* --shutdown_timeout is --grace_period: the command line, then PET_SHUTDOWN_TIMEOUT, then
     * TORCH_ELASTIC_SHUTDOWN_TIMEOUT. */
    const char *sd[] = {"PET_SHUTDOWN_TIMEOUT=9", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=4", NULL};
    CT_ASSERT_OK(ct__parse(&c, sd, &eb, "w.py", NULL));
    CT_ASSERT_CLOSE(c.grace_period_s, 9, 0, 0);
    ctrun_config_free(&c);
    CT_ASSERT_OK(ct__parse(&c, sd, &eb, "--grace_period=2", "w.py", NULL));
    CT_ASSERT_CLOSE(c.grace_period_s, 2, 0, 0);
    ctrun_config_free(&c);
    CT_ASSERT_OK(ct__parse(&c, sd, &eb, "--shutdown-timeout", "3", "w.py", NULL));
    CT_ASSERT_CLOSE(c.grace_period_s, 3, 0, 0);
    ctrun_config_free(&c);
    const char *sd_old[] = {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT=4", NULL};
    CT_ASSERT_OK(ct__parse(&c, sd_old, &eb, "w.py", NULL));
    CT_ASSERT_CLOSE(c.grace_period_s, 4, 0, 0);
    ctrun_config_free(&c);
    CT_ASSERT_OK(
        ct__parse(&c, ct__noenv, &eb, "--shutdown_timeout=5", "--grace_period=5", "w.py", NULL));
    ctrun_config_free(&c);
    CT_ASSERT_ERR(
        ct__parse(&c, ct__noenv, &eb, "--shutdown_timeout=5", "--grace_period=6", "w.py", NULL),
        CT_EPARSE);
    CT_ASSERT_STR_EQ(eb.msg, "--shutdown_timeout 5 and --grace_period 6 are the same setting with "
                             "different values");
    CT_ASSERT_ERR(ct__parse(&c, ct__noenv, &eb, "--shutdown_timeout=-1", "w.py", NULL),
                  CT_ERANGE_VALUE);
    CT_ASSERT_STR_EQ(eb.msg, "--shutdown_timeout: must be non-negative, got -1");
    CT_ASSERT_ERR(ct__parse(&c, ct__noenv, &eb, "--shutdown_timeout=2.5", "w.py", NULL), CT_EPARSE);

    /* Filters: PET_*, and "" is one empty needle (every line), as torchrun's list makes it. */
    const char *df[] = {"PET_DUPLICATE_STDERR_FILTERS=", NULL};
    CT_ASSERT_OK(ct__parse(&c, df, &eb, "w.py", NULL));
    CT_ASSERT_EQ(c.dup_filters[CTRUN_STREAM_STDERR].count, 1);
    CT_ASSERT_STR_EQ(c.dup_filters[CTRUN_STREAM_STDERR].needles[0], "");
    ctrun_config_free(&c);

    /* The template option wins over TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE; empty falls back. */
    const char *tmpl[] = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=E ", NULL};
    CT_ASSERT_OK(ct__parse(&c, tmpl, &eb, "--log_line_prefix_template=O", "w.py", NULL));
    CT_ASSERT_STR_EQ(c.log_line_prefix_template, "O");
    ctrun_config_free(&c);
    CT_ASSERT_OK(ct__parse(&c, tmpl, &eb, "--log_line_prefix_template=", "w.py", NULL));
    CT_ASSERT_STR_EQ(c.log_line_prefix_template, "E ");
    ctrun_config_free(&c);

    /* --event_log_handler: console prints unless LOGLEVEL is above INFO. */
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "--event_log_handler=console", "w.py", NULL));
    CT_ASSERT(c.event_log_console);
    ctrun_config_free(&c);
    const char *quiet[] = {"PET_EVENT_LOG_HANDLER=console", "LOGLEVEL=WARNING", NULL};
    CT_ASSERT_OK(ct__parse(&c, quiet, &eb, "w.py", NULL));
    CT_ASSERT(!c.event_log_console);
    ctrun_config_free(&c);
    CT_ASSERT_OK(
        ct__parse(&c, ct__noenv, &eb, "--event_log_handler=dynamic_rendezvous", "w.py", NULL));
    CT_ASSERT(!c.event_log_console);
    ctrun_config_free(&c);
    CT_ASSERT_ERR(ct__parse(&c, ct__noenv, &eb, "--event_log_handler=file", "w.py", NULL),
                  CT_EPARSE);
    CT_ASSERT_STR_EQ(eb.msg, "--event_log_handler: invalid choice \"file\" (choose from null, "
                             "console, dynamic_rendezvous)");

    /* --logs_specs names a Python plugin. */
    CT_ASSERT_ERR(ct__parse(&c, ct__noenv, &eb, "--logs-specs=mine", "w.py", NULL), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "--logs-specs: \"mine\" names a Python plugin");
    /* --numa_binding: torchrun's choices; a binding needs a CUDA device. */
    CT_ASSERT_ERR(ct__parse(&c, ct__noenv, &eb, "--numa_binding=all", "w.py", NULL), CT_EPARSE);
    CT_ASSERT_STR_EQ(eb.msg, "--numa_binding: invalid choice \"all\" (choose from node, socket, "
                             "exclusive, core-complex)");
    const char *nocuda[] = {"CTRUN_LIBCUDA=/nonexistent/libcuda.so.1", NULL};
    CT_ASSERT_ERR(ct__parse(&c, nocuda, &eb, "--numa_binding=node", "w.py", NULL), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "--numa_binding node: no CUDA device: /nonexistent/libcuda");
}

/* torch.distributed.launch's command line: --use_env, --local-rank=N otherwise. */
static void test_launch_compat(void)
{
    ctrun_config_t c;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "--launch_compat", "--nproc_per_node=4",
                           "--master_port=29500", "main.py", "--lr", "1", NULL));
    CT_ASSERT(c.launch && !c.use_env);
    CT_ASSERT_STR_EQ(c.local_rank_arg, "--local-rank");
    CT_ASSERT_EQ(c.master_port, 29500);
    ctrun_config_free(&c);
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "--launch_compat", "--use_env", "main.py", NULL));
    CT_ASSERT(c.use_env && c.local_rank_arg == NULL);
    ctrun_config_free(&c);
    CT_ASSERT_OK(ct__parse(&c, ct__noenv, &eb, "--launch_compat", "--use-env", "--no_python",
                           "./run.sh", NULL));
    ctrun_config_free(&c);
    CT_ASSERT_ERR(ct__parse(&c, ct__noenv, &eb, "--launch_compat", "--no_python", "./run.sh", NULL),
                  CT_EPARSE);
    CT_ASSERT_STR_EQ(eb.msg, "when using the '--no-python' flag, you must also set the "
                             "'--use-env' flag");
    const char *style[] = {"CTRUN_LOCAL_RANK_ARG=local_rank", NULL};
    CT_ASSERT_OK(ct__parse(&c, style, &eb, "--launch_compat", "main.py", NULL));
    CT_ASSERT_STR_EQ(c.local_rank_arg, "--local_rank");
    ctrun_config_free(&c);
    CT_ASSERT_ERR(
        ct__parse(&c, ct__noenv, &eb, "--launch_compat", "--local_rank_arg=lr", "main.py", NULL),
        CT_EPARSE);
    /* Without launch's command line, its options are refused with the way to get it. */
    CT_ASSERT_ERR(ct__parse(&c, ct__noenv, &eb, "--use_env", "main.py", NULL), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "--use_env is an option of torch.distributed.launch's "
                                   "command line: run ctrun-launch");
}

int main(void)
{
    CT_RUN(test_defaults);
    CT_RUN(test_every_valued_option_both_spellings);
    CT_RUN(test_short_forms_and_flags);
    CT_RUN(test_scanning_rules);
    CT_RUN(test_pet_fallbacks);
    CT_RUN(test_flag_fallbacks_and_precedence);
    CT_RUN(test_standalone);
    CT_RUN(test_store_address);
    CT_RUN(test_rdzv_conf);
    CT_RUN(test_entry_rule);
    CT_RUN(test_values_must_exist_in_the_job);
    CT_RUN(test_agent_environment);
    CT_RUN(test_single_node_port_rule);
    CT_RUN(test_newer_torchrun_options);
    CT_RUN(test_launch_compat);
    return 0;
}
