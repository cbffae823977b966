/*
 * ctrun_cli.c - the option table, the argv scanner (argparse's rules: long names with '-' or
 * '_', unique prefixes, "=value" or the next argument, clustered short options, the first
 * positional ends the options), the environment fallbacks, and the conversion of every raw
 * string into typed, validated configuration. Also the --help text, generated from the same
 * table so it cannot drift from what the parser accepts.
 */
#include "ctrun_cli.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <unistd.h>

#include "ct_config.h"
#include "ct_parse.h"
#include "ctrun_console.h"
#include "ctrun_inject.h"

enum {
    CTRUN_CLI__O_NNODES,
    CTRUN_CLI__O_NPROC_PER_NODE,
    CTRUN_CLI__O_RDZV_BACKEND,
    CTRUN_CLI__O_RDZV_ENDPOINT,
    CTRUN_CLI__O_RDZV_ID,
    CTRUN_CLI__O_RDZV_CONF,
    CTRUN_CLI__O_STANDALONE,
    CTRUN_CLI__O_NODE_RANK,
    CTRUN_CLI__O_MASTER_ADDR,
    CTRUN_CLI__O_MASTER_PORT,
    CTRUN_CLI__O_LOCAL_ADDR,
    CTRUN_CLI__O_MAX_RESTARTS,
    CTRUN_CLI__O_MONITOR_INTERVAL,
    CTRUN_CLI__O_START_METHOD,
    CTRUN_CLI__O_SIGNALS_TO_HANDLE,
    CTRUN_CLI__O_GRACE_PERIOD,
    CTRUN_CLI__O_WATCHDOG_TIMEOUT,
    CTRUN_CLI__O_RESTART_BACKOFF,
    CTRUN_CLI__O_PROGRESS_GUARD,
    CTRUN_CLI__O_INJECT,
    CTRUN_CLI__O_INJECT_SEED,
    CTRUN_CLI__O_EVENT_LOG_HANDLER,
    CTRUN_CLI__O_ROLE,
    CTRUN_CLI__O_MODULE,
    CTRUN_CLI__O_NO_PYTHON,
    CTRUN_CLI__O_RUN_PATH,
    CTRUN_CLI__O_PYTHON,
    CTRUN_CLI__O_LOG_DIR,
    CTRUN_CLI__O_REDIRECTS,
    CTRUN_CLI__O_TEE,
    CTRUN_CLI__O_LOCAL_RANKS_FILTER,
    CTRUN_CLI__O_LOGS_SPECS,
    /* torchrun 2.x's newest options, torch.distributed.launch */
    CTRUN_CLI__O_DUPLICATE_STDOUT_FILTERS,
    CTRUN_CLI__O_DUPLICATE_STDERR_FILTERS,
    CTRUN_CLI__O_LOG_LINE_PREFIX_TEMPLATE,
    CTRUN_CLI__O_VIRTUAL_LOCAL_RANK,
    CTRUN_CLI__O_NUMA_BINDING,
    CTRUN_CLI__O_SHUTDOWN_TIMEOUT,
    CTRUN_CLI__O_METRICS_PORT,
    CTRUN_CLI__O_METRICS_ADDR,
    CTRUN_CLI__O_LAUNCH_COMPAT,
    CTRUN_CLI__O_USE_ENV,
    CTRUN_CLI__O_LOCAL_RANK_ARG,
    CTRUN_CLI__O_HELP,
    CTRUN_CLI__O_VERSION,
    CTRUN_CLI__O_COUNT
};

typedef struct ctrun_cli__opt {
    const char *group;   /* help section that starts at this option, or NULL */
    const char *name;    /* canonical spelling, words joined by '_' */
    char short_name;     /* single-dash form, or 0 */
    bool flag;           /* takes no value */
    const char *env[2];  /* fallback variables, the first set one wins */
    const char *metavar; /* for --help */
    const char *help;    /* for --help */
} ctrun_cli__opt_t;

#define CTRUN_CLI__SIGNALS_DEFAULT "SIGTERM,SIGINT,SIGHUP,SIGQUIT"

/* One row per option; rows read better unwrapped than in clang-format's one-field-per-line. */
/* clang-format off */
static const ctrun_cli__opt_t ctrun_cli__opts[CTRUN_CLI__O_COUNT] = {
    [CTRUN_CLI__O_NNODES] = {"Nodes and workers", "nnodes", 0, false, {"PET_NNODES"}, "N|MIN:MAX",
                         "Number of nodes, or the elastic range MIN:MAX (default 1:1)."},
    [CTRUN_CLI__O_NPROC_PER_NODE] = {NULL, "nproc_per_node", 0, false, {"PET_NPROC_PER_NODE"},
                                 "N|auto|cpu|gpu",
                                 "Workers per node: a number, cpu (one per CPU), gpu (one per "
                                 "visible CUDA device) or auto (gpu when there are GPUs, else "
                                 "cpu) (default 1)."},
    [CTRUN_CLI__O_RDZV_BACKEND] = {"Rendezvous", "rdzv_backend", 0, false, {"PET_RDZV_BACKEND"},
                               "static|c10d|etcd-v3",
                               "static: fixed --nnodes, group rank = --node_rank; c10d: "
                               "dynamic membership through the store at --rdzv_endpoint; "
                               "etcd-v3: as c10d, kept in the etcd cluster at --rdzv_endpoint "
                               "(default static)."},
    [CTRUN_CLI__O_RDZV_ENDPOINT] = {NULL, "rdzv_endpoint", 0, false, {"PET_RDZV_ENDPOINT"},
                                "HOST[:PORT]",
                                "Store address; IPv6 in brackets, [::1]:29400. static: "
                                "overrides --master_addr/--master_port; c10d: default port "
                                "29400; etcd-v3: HOST:PORT[,HOST:PORT...], etcd's members "
                                "(default port 2379)."},
    [CTRUN_CLI__O_RDZV_ID] = {NULL, "rdzv_id", 0, false, {"PET_RDZV_ID"}, "ID",
                          "Job id: TORCHELASTIC_RUN_ID and the log folder prefix (default "
                          "none)."},
    [CTRUN_CLI__O_RDZV_CONF] = {NULL, "rdzv_conf", 0, false, {"PET_RDZV_CONF"}, "K=V,...",
                            "Rendezvous options: timeout, join_timeout, last_call_timeout, "
                            "close_timeout, read_timeout, heartbeat_timeout, "
                            "keep_alive_interval, keep_alive_max_attempt, is_host, "
                            "store_type, store_token."},
    [CTRUN_CLI__O_STANDALONE] = {NULL, "standalone", 0, true, {"PET_STANDALONE"}, NULL,
                             "Single-node job with its own store on a kernel-chosen port and "
                             "a random run id; --rdzv_backend/--rdzv_endpoint/--rdzv_id are "
                             "ignored."},
    [CTRUN_CLI__O_NODE_RANK] = {NULL, "node_rank", 0, false, {"PET_NODE_RANK"}, "N",
                            "This node's rank, static backend only (default 0)."},
    [CTRUN_CLI__O_MASTER_ADDR] = {NULL, "master_addr", 0, false, {"PET_MASTER_ADDR"}, "HOST",
                              "Address of node 0's store, static backend only (default "
                              "127.0.0.1)."},
    [CTRUN_CLI__O_MASTER_PORT] = {NULL, "master_port", 0, false, {"PET_MASTER_PORT"}, "PORT",
                              "Port of node 0's store, static backend only; 0 picks a free "
                              "port on a single node (default 29500; a single-node job given "
                              "neither this nor --rdzv_endpoint gets a free port)."},
    [CTRUN_CLI__O_LOCAL_ADDR] = {NULL, "local_addr", 0, false, {"PET_LOCAL_ADDR"}, "HOST",
                             "This node's address as other nodes reach it (default: its "
                             "fully qualified host name)."},
    [CTRUN_CLI__O_MAX_RESTARTS] = {"Supervision", "max_restarts", 0, false, {"PET_MAX_RESTARTS"},
                               "N",
                               "Restarts of the whole job after a worker failure, counted for "
                               "the job (default 0)."},
    [CTRUN_CLI__O_MONITOR_INTERVAL] = {NULL, "monitor_interval", 0, false,
                                   {"PET_MONITOR_INTERVAL"}, "SECONDS",
                                   "Accepted for compatibility; ctrun sees worker exits at "
                                   "once (default 0.1)."},
    [CTRUN_CLI__O_START_METHOD] = {NULL, "start_method", 0, false, {"PET_START_METHOD"},
                               "spawn|fork|forkserver",
                               "Accepted for compatibility; workers are always new processes "
                               "(default spawn)."},
    [CTRUN_CLI__O_SIGNALS_TO_HANDLE] = {NULL, "signals_to_handle", 0, false,
                                    {"PET_SIGNALS_TO_HANDLE"}, "SIG,...",
                                    "Signals forwarded to the workers (default "
                                    CTRUN_CLI__SIGNALS_DEFAULT ")."},
    [CTRUN_CLI__O_GRACE_PERIOD] = {NULL, "grace_period", 0, false,
                               {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT"}, "SECONDS",
                               "Time between SIGTERM and SIGKILL when workers are stopped "
                               "(default 30)."},
    [CTRUN_CLI__O_WATCHDOG_TIMEOUT] = {NULL, "watchdog_timeout", 0, false,
                                   {"CTRUN_WATCHDOG_TIMEOUT"}, "SECONDS",
                                   "Heartbeat watchdog for libctworker workers: a worker "
                                   "silent this long fails the attempt, after asking it "
                                   "for a stack dump; 0 turns it off (default 120; workers "
                                   "without heartbeats are never watched)."},
    [CTRUN_CLI__O_RESTART_BACKOFF] = {NULL, "restart_backoff", 0, false,
                                  {"CTRUN_RESTART_BACKOFF"}, "SECONDS",
                                  "Wait before restart k: SECONDS * 2^(k-1), at most "
                                  "max(60, SECONDS) (default 0: restart at once)."},
    [CTRUN_CLI__O_PROGRESS_GUARD] = {NULL, "progress_guard", 0, false,
                                  {"CTRUN_PROGRESS_GUARD"}, "K",
                                  "Stop restarting (exit 3) when the last K attempts of "
                                  "heartbeating workers made no step progress; 0 turns the "
                                  "guard off (default 3)."},
    [CTRUN_CLI__O_INJECT] = {NULL, "inject", 0, false, {"CTRUN_INJECT"}, "SPEC[;SPEC...]",
                         "Fault injection, e.g. kill:rank=1:at=step=50, "
                         "kill:rank=any:every=30s, hang:rank=0:at=step=80, "
                         "torn_ckpt:at=step=100, kill_agent:node=1:at=time=5s (see ctrun(1))."},
    [CTRUN_CLI__O_INJECT_SEED] = {NULL, "inject_seed", 0, false, {"CTRUN_INJECT_SEED"}, "N",
                              "Seed of the injection's random choices (rank=any, phase=any; "
                              "default 0)."},
    [CTRUN_CLI__O_EVENT_LOG_HANDLER] = {NULL, "event_log_handler", 0, false,
                                    {"PET_EVENT_LOG_HANDLER"}, "null|console",
                                    "console: torchelastic's event records (rendezvous, worker "
                                    "start and end, the agent's end) as JSON lines on stderr, "
                                    "unless LOGLEVEL is above INFO; null: none (default null)."},
    [CTRUN_CLI__O_ROLE] = {"Workers", "role", 0, false, {"PET_ROLE"}, "NAME",
                       "Worker role: ROLE_NAME and the tee prefix [<role><local_rank>]: "
                       "(default default)."},
    [CTRUN_CLI__O_MODULE] = {NULL, "module", 'm', true, {"PET_MODULE"}, NULL,
                         "Run the script as a Python module: <python> -u -m MODULE."},
    [CTRUN_CLI__O_NO_PYTHON] = {NULL, "no_python", 0, true, {"PET_NO_PYTHON"}, NULL,
                            "Execute the script directly, even a .py file."},
    [CTRUN_CLI__O_RUN_PATH] = {NULL, "run_path", 0, true, {"PET_RUN_PATH"}, NULL,
                           "Run the script with the Python interpreter whatever its name; "
                           "wins over --no_python."},
    [CTRUN_CLI__O_PYTHON] = {NULL, "python", 0, false, {"CTRUN_PYTHON", "PYTHON_EXEC"}, "PATH",
                         "Interpreter for .py scripts and -m (default: the Python of the "
                         "environment ctrun was pip-installed into, else $VIRTUAL_ENV's or "
                         "$CONDA_PREFIX's, else python3 from PATH)."},
    [CTRUN_CLI__O_LOG_DIR] = {"Output", "log_dir", 0, false, {"PET_LOG_DIR"}, "DIR",
                          "Base folder for <run_id>_<random>/attempt_<k>/<local_rank>/ logs "
                          "(default: a new temp folder; /dev/null: no files)."},
    [CTRUN_CLI__O_REDIRECTS] = {NULL, "redirects", 'r', false, {"PET_REDIRECTS"}, "0-3|LR:V,...",
                            "Send streams to the log files only: 0 none, 1 stdout, 2 stderr, "
                            "3 both, for all local ranks or per rank as 0:1,1:2 (default 0)."},
    [CTRUN_CLI__O_TEE] = {NULL, "tee", 't', false, {"PET_TEE"}, "0-3|LR:V,...",
                      "Write streams to the log files and to the console with the "
                      "[<role><local_rank>]: prefix; same values as --redirects (default 0)."},
    [CTRUN_CLI__O_LOCAL_RANKS_FILTER] = {NULL, "local_ranks_filter", 0, false,
                                     {"PET_LOCAL_RANKS_FILTER"}, "LR,...",
                                     "Show only these local ranks' output on the console; "
                                     "files are unaffected."},
    [CTRUN_CLI__O_LOGS_SPECS] = {NULL, "logs_specs", 0, false, {NULL}, "NAME",
                             "Not supported: NAME is a Python plugin of torchrun "
                             "(torchrun.logs_specs); ctrun writes torchrun's default layout, "
                             "set with --log_dir, --redirects, --tee, --local_ranks_filter and "
                             "--log_line_prefix_template."},
    [CTRUN_CLI__O_DUPLICATE_STDOUT_FILTERS] = {NULL, "duplicate_stdout_filters", 0, false,
                                           {"PET_DUPLICATE_STDOUT_FILTERS"}, "TEXT,...",
                                           "Tee'd stdout lines that contain any TEXT also go "
                                           "to attempt_<k>/filtered_stdout.log; ',,' is a "
                                           "comma inside a TEXT (default none)."},
    [CTRUN_CLI__O_DUPLICATE_STDERR_FILTERS] = {NULL, "duplicate_stderr_filters", 0, false,
                                           {"PET_DUPLICATE_STDERR_FILTERS"}, "TEXT,...",
                                           "The same for tee'd stderr lines, into "
                                           "attempt_<k>/filtered_stderr.log (default none)."},
    [CTRUN_CLI__O_LOG_LINE_PREFIX_TEMPLATE] = {NULL, "log_line_prefix_template", 0, false,
                                           {"PET_LOG_LINE_PREFIX_TEMPLATE",
                                            "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"},
                                           "TEMPLATE",
                                           "Console prefix of tee'd lines, with ${role_name}, "
                                           "${rank}, ${local_rank}, ${group_rank}, "
                                           "${restart_count} (default "
                                           "[${role_name}${local_rank}]:)."},
    [CTRUN_CLI__O_VIRTUAL_LOCAL_RANK] = {"Devices and shutdown", "virtual_local_rank", 0, true,
                                     {"PET_VIRTUAL_LOCAL_RANK"}, NULL,
                                     "Every worker gets LOCAL_RANK=0 and sees only its own GPU: "
                                     "CUDA_VISIBLE_DEVICES is entry <local rank> of ctrun's "
                                     "list (or <local rank> without one)."},
    [CTRUN_CLI__O_NUMA_BINDING] = {NULL, "numa_binding", 0, false, {"PET_NUMA_BINDING"},
                               "node|socket|exclusive|core-complex",
                               "Bind each worker to CPUs near its GPU (device <local rank>): its "
                               "NUMA node, its socket, an equal share of the node's cores, or "
                               "one last-level-cache complex (default none)."},
    [CTRUN_CLI__O_SHUTDOWN_TIMEOUT] = {NULL, "shutdown_timeout", 0, false,
                                   {"PET_SHUTDOWN_TIMEOUT"}, "SECONDS",
                                   "torchrun's name for --grace_period: whole seconds between "
                                   "SIGTERM and SIGKILL (default: TORCH_ELASTIC_SHUTDOWN_TIMEOUT, "
                                   "else 30)."},
    [CTRUN_CLI__O_METRICS_PORT] = {"Monitoring", "metrics_port", 0, false, {"CTRUN_METRICS_PORT"},
                                   "PORT",
                                   "Serve GET /metrics (Prometheus text format) and GET /healthz "
                                   "on this port; 0 picks a free port and logs it (default off)."},
    [CTRUN_CLI__O_METRICS_ADDR] = {NULL, "metrics_addr", 0, false, {"CTRUN_METRICS_ADDR"}, "ADDR",
                                   "Address the metrics endpoint listens on (default "
                                   "127.0.0.1)."},
    [CTRUN_CLI__O_LAUNCH_COMPAT] = {"torch.distributed.launch", "launch_compat", 0, true, {NULL},
                                NULL,
                                "Take torch.distributed.launch's command line, as ctrun-launch "
                                "does: --use_env, and --local-rank=N passed to the script "
                                "without it."},
    [CTRUN_CLI__O_USE_ENV] = {NULL, "use_env", 0, true, {NULL}, NULL,
                          "With --launch_compat: pass the local rank in LOCAL_RANK only, not "
                          "as an argument."},
    [CTRUN_CLI__O_LOCAL_RANK_ARG] = {NULL, "local_rank_arg", 0, false,
                                 {"CTRUN_LOCAL_RANK_ARG"}, "local-rank|local_rank",
                                 "With --launch_compat: the argument the script gets, "
                                 "--local-rank=N as PyTorch 2.x's launch passes it, or "
                                 "--local_rank=N as 1.x's did (default local-rank)."},
    [CTRUN_CLI__O_HELP] = {"Information", "help", 'h', true, {NULL}, NULL,
                       "Show this help and exit."},
    [CTRUN_CLI__O_VERSION] = {NULL, "version", 0, true, {NULL}, NULL,
                          "Show the version and exit."},
};
/* clang-format on */

/* What the scanner collected before conversion. */
typedef struct ctrun_cli__raw {
    const char *value[CTRUN_CLI__O_COUNT];
    char source[CTRUN_CLI__O_COUNT][72]; /* "--nnodes", "-r" or "PET_NNODES", for messages */
    bool given[CTRUN_CLI__O_COUNT];      /* on the command line or from the environment */
    bool on_cli[CTRUN_CLI__O_COUNT];
} ctrun_cli__raw_t;

static const char *ctrun_cli__getenv(const char *const *env, const char *name)
{
    if (env == NULL)
        return getenv(name);
    size_t n = strlen(name);
    for (const char *const *e = env; *e != NULL; e++) {
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    }
    return NULL;
}

/* ---- scanning -------------------------------------------------------------------------------- */

/* argparse: "-1" and "-.5" are values, not options, when no option looks like a number. */
static bool ctrun_cli__negative_number(const char *a)
{
    if (a[0] != '-' || a[1] == '\0')
        return false;
    const char *p = a + 1;
    while (isdigit((unsigned char)*p))
        p++;
    if (*p == '.' && isdigit((unsigned char)p[1])) {
        p++;
        while (isdigit((unsigned char)*p))
            p++;
    }
    return *p == '\0' && (isdigit((unsigned char)a[1]) || a[1] == '.');
}

/* True when argument a would be taken as an option rather than as a value. */
static bool ctrun_cli__looks_like_option(const char *a)
{
    return a[0] == '-' && a[1] != '\0' && !ctrun_cli__negative_number(a) && strchr(a, ' ') == NULL;
}

static int ctrun_cli__find_long(const char *arg, size_t len, int *id, ct_errbuf_t *eb)
{
    char norm[64];
    if (len == 0 || len >= sizeof norm)
        return ct_errbuf_set(eb, CT_EPARSE, "unrecognized option '--%.*s' (see ctrun --help)",
                             (int)(len > 64 ? 64 : len), arg);
    for (size_t i = 0; i < len; i++)
        norm[i] = arg[i] == '-' ? '_' : arg[i];
    norm[len] = '\0';
    int found = -1, matches = 0;
    char cands[256] = "";
    for (int o = 0; o < CTRUN_CLI__O_COUNT; o++) {
        if (strcmp(ctrun_cli__opts[o].name, norm) == 0) {
            *id = o;
            return 0;
        }
        if (strncmp(ctrun_cli__opts[o].name, norm, len) == 0) {
            size_t used = strlen(cands);
            snprintf(cands + used, sizeof cands - used, "%s--%s", matches ? ", " : "",
                     ctrun_cli__opts[o].name);
            found = o;
            matches++;
        }
    }
    if (matches == 1) {
        *id = found;
        return 0;
    }
    if (matches > 1)
        return ct_errbuf_set(eb, CT_EPARSE, "ambiguous option '--%s' could match %s", norm, cands);
    return ct_errbuf_set(eb, CT_EPARSE, "unrecognized option '--%.*s' (see ctrun --help)", (int)len,
                         arg);
}

static void ctrun_cli__set(ctrun_cli__raw_t *raw, int id, const char *value, const char *source)
{
    raw->value[id] = value;
    raw->given[id] = true;
    raw->on_cli[id] = true;
    snprintf(raw->source[id], sizeof raw->source[id], "%s", source);
}

/* Scans options up to the script; *script_index is the script's index in argv (argc when
 * there is none). Stops early for --help/--version, setting *action. */
static int ctrun_cli__scan(int argc, char *const argv[], ctrun_cli__raw_t *raw, int *script_index,
                           ctrun_cli_action_t *action, ct_errbuf_t *eb)
{
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (!ctrun_cli__looks_like_option(a))
            break;
        if (a[1] == '-') {
            const char *name = a + 2;
            const char *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            int id = 0;
            int rc = ctrun_cli__find_long(name, len, &id, eb);
            if (rc != 0)
                return rc;
            const ctrun_cli__opt_t *o = &ctrun_cli__opts[id];
            char source[72];
            bool full = strlen(o->name) == len;
            snprintf(source, sizeof source, "--%.*s", (int)(full ? len : 64),
                     full ? name : o->name);
            if (o->flag) {
                if (eq != NULL)
                    return ct_errbuf_set(eb, CT_EPARSE, "%s takes no value (got '%.64s')", source,
                                         a);
                ctrun_cli__set(raw, id, "1", source);
            } else if (eq != NULL) {
                ctrun_cli__set(raw, id, eq + 1, source);
            } else if (i + 1 < argc && !ctrun_cli__looks_like_option(argv[i + 1])) {
                ctrun_cli__set(raw, id, argv[++i], source);
            } else {
                return ct_errbuf_set(eb, CT_EPARSE, "%s: missing value", source);
            }
        } else {
            /* A cluster of short options, argparse style: -m, -r3, -r=3, -mr 3. */
            for (const char *c = a + 1; *c != '\0'; c++) {
                int id = -1;
                for (int o = 0; o < CTRUN_CLI__O_COUNT; o++) {
                    if (ctrun_cli__opts[o].short_name == *c)
                        id = o;
                }
                if (id < 0)
                    return ct_errbuf_set(
                        eb, CT_EPARSE, "unrecognized option '-%c'%s%.64s%s (see ctrun --help)", *c,
                        c == a + 1 ? "" : " in '", c == a + 1 ? "" : a, c == a + 1 ? "" : "'");
                char source[8];
                snprintf(source, sizeof source, "-%c", *c);
                if (ctrun_cli__opts[id].flag) {
                    ctrun_cli__set(raw, id, "1", source);
                    if (id == CTRUN_CLI__O_HELP)
                        break;
                    continue;
                }
                const char *rest = c[1] == '=' ? c + 2 : c + 1;
                if (*rest != '\0')
                    ctrun_cli__set(raw, id, rest, source);
                else if (i + 1 < argc && !ctrun_cli__looks_like_option(argv[i + 1]))
                    ctrun_cli__set(raw, id, argv[++i], source);
                else
                    return ct_errbuf_set(eb, CT_EPARSE, "%s: missing value", source);
                break;
            }
        }
        if (raw->given[CTRUN_CLI__O_HELP] || raw->given[CTRUN_CLI__O_VERSION]) {
            *action = raw->given[CTRUN_CLI__O_HELP] ? CTRUN_CLI_HELP : CTRUN_CLI_VERSION;
            return 0;
        }
    }
    *script_index = i;
    return 0;
}

/* Fills what the command line left out from the fallback variables. */
static void ctrun_cli__env_fallbacks(const char *const *env, ctrun_cli__raw_t *raw)
{
    for (int o = 0; o < CTRUN_CLI__O_COUNT; o++) {
        if (raw->given[o])
            continue;
        for (int k = 0; k < 2 && ctrun_cli__opts[o].env[k] != NULL; k++) {
            const char *v = ctrun_cli__getenv(env, ctrun_cli__opts[o].env[k]);
            if (v != NULL) {
                raw->value[o] = v;
                raw->given[o] = true;
                snprintf(raw->source[o], sizeof raw->source[o], "%s", ctrun_cli__opts[o].env[k]);
                break;
            }
        }
    }
}

/* ---- conversion ------------------------------------------------------------------------------ */

__attribute__((format(printf, 2, 3))) static int ctrun_cli__warn(ctrun_config_t *cfg,
                                                                 const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **w = realloc(cfg->warnings, (cfg->nwarnings + 1) * sizeof *w);
    if (w == NULL)
        return -ENOMEM;
    cfg->warnings = w;
    if ((w[cfg->nwarnings] = strdup(buf)) == NULL)
        return -ENOMEM;
    cfg->nwarnings++;
    return 0;
}

/* A boolean flag: on the command line, or bool(int(PET_X)) as torchrun's check_env does. */
static int ctrun_cli__flag(const ctrun_cli__raw_t *raw, int id, bool *out, ct_errbuf_t *eb)
{
    *out = false;
    if (!raw->given[id])
        return 0;
    if (raw->on_cli[id]) {
        *out = true;
        return 0;
    }
    int64_t v;
    int rc = ct_parse_int64(raw->value[id], INT64_MIN, INT64_MAX, &v, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, rc, "%s", raw->source[id]);
    *out = v != 0;
    return 0;
}

static int ctrun_cli__int(const ctrun_cli__raw_t *raw, int id, int dflt, int min, int max, int *out,
                          ct_errbuf_t *eb)
{
    *out = dflt;
    if (!raw->given[id])
        return 0;
    int rc = ct_parse_int(raw->value[id], min, max, out, eb);
    return rc == 0 ? 0 : ct_errbuf_wrap(eb, rc, "%s", raw->source[id]);
}

static int ctrun_cli__seconds(const ctrun_cli__raw_t *raw, int id, double dflt, double *out,
                              ct_errbuf_t *eb)
{
    *out = dflt;
    if (!raw->given[id])
        return 0;
    int rc = ct_parse_double(raw->value[id], 0, 1e9, out, eb);
    return rc == 0 ? 0 : ct_errbuf_wrap(eb, rc, "%s", raw->source[id]);
}

/* A copy of the value, or of dflt (never NULL). */
static int ctrun_cli__str(const ctrun_cli__raw_t *raw, int id, const char *dflt, char **out)
{
    *out = strdup(raw->given[id] ? raw->value[id] : dflt);
    return *out == NULL ? -ENOMEM : 0;
}

/* A host name or address as given, IPv6 possibly in brackets; stored without them. */
static int ctrun_cli__host(const ctrun_cli__raw_t *raw, int id, const char *dflt, char **out,
                           ct_errbuf_t *eb)
{
    const char *v = raw->given[id] ? raw->value[id] : dflt;
    *out = NULL;
    if (v == NULL)
        return 0;
    size_t len = strlen(v);
    if (len >= 2 && v[0] == '[' && v[len - 1] == ']') {
        v++;
        len -= 2;
    }
    char *host = strndup(v, len);
    if (host == NULL)
        return -ENOMEM;
    ct_host_kind_t kind;
    int rc = ct_host_validate(host, &kind, eb);
    if (rc != 0) {
        free(host);
        return ct_errbuf_wrap(eb, rc, "%s", raw->source[id]);
    }
    *out = host;
    return 0;
}

static int ctrun_cli__nnodes(const ctrun_cli__raw_t *raw, ctrun_config_t *cfg, ct_errbuf_t *eb)
{
    const char *text = raw->given[CTRUN_CLI__O_NNODES] ? raw->value[CTRUN_CLI__O_NNODES] : "1:1";
    const char *src = raw->source[CTRUN_CLI__O_NNODES];
    const char *colon = strchr(text, ':');
    if (colon != NULL && strchr(colon + 1, ':') != NULL)
        return ct_errbuf_set(eb, CT_EPARSE, "%s: \"%.64s\" is not in \"MIN:MAX\" format", src,
                             text);
    char first[64];
    size_t flen = colon ? (size_t)(colon - text) : strlen(text);
    if (flen >= sizeof first)
        return ct_errbuf_set(eb, CT_EPARSE, "%s: \"%.64s\" is not in \"MIN:MAX\" format", src,
                             text);
    memcpy(first, text, flen);
    first[flen] = '\0';
    int rc = ct_parse_int(first, INT_MIN, INT_MAX, &cfg->min_nodes, eb);
    if (rc == 0) {
        cfg->max_nodes = cfg->min_nodes;
        if (colon != NULL)
            rc = ct_parse_int(colon + 1, INT_MIN, INT_MAX, &cfg->max_nodes, eb);
    }
    if (rc != 0)
        return ct_errbuf_wrap(eb, rc, "%s", src);
    if (!(0 < cfg->min_nodes && cfg->min_nodes <= cfg->max_nodes))
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "%s: \"%.64s\" needs 0 < MIN <= MAX", src, text);
    if (cfg->max_nodes > CTRUN_MAX_NODES)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "%s: \"%.64s\": at most %d nodes", src, text,
                             CTRUN_MAX_NODES);
    return 0;
}

/* xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx, as Python's uuid.uuid4(). */
static int ctrun_cli__uuid4(char **out)
{
    unsigned char b[16];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b)
        return -EIO;
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    char s[37];
    snprintf(s, sizeof s, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
    *out = strdup(s);
    return *out ? 0 : -ENOMEM;
}

/* Backend, endpoint, run id and the store address, after --standalone's rewrite. */
/* etcd-v3: --rdzv_endpoint lists etcd's members, HOST[:PORT] each (port 2379 by default; blanks
 * around an entry are dropped), rewritten as HOST:PORT,...; store_addr is the first (for the
 * INFO block). */
static int ctrun_cli__etcd_endpoints(ctrun_config_t *cfg, const char *src, ct_errbuf_t *eb)
{
    if (cfg->rdzv_endpoint[0] == '\0')
        return ct_errbuf_set(eb, CT_EPARSE,
                             "--rdzv_backend=etcd-v3 needs --rdzv_endpoint=HOST:PORT[,HOST:PORT"
                             "...] (etcd's client URLs)");
    size_t size = strlen(cfg->rdzv_endpoint) * 2 + 64, at = 0;
    char *out = malloc(size), *copy = strdup(cfg->rdzv_endpoint);
    int rc = out && copy ? 0 : -ENOMEM;
    char *save = NULL;
    for (char *e = copy ? strtok_r(copy, ",", &save) : NULL; rc == 0 && e != NULL;
         e = strtok_r(NULL, ",", &save)) {
        while (*e == ' ' || *e == '\t')
            e++;
        for (size_t n = strlen(e); n > 0 && (e[n - 1] == ' ' || e[n - 1] == '\t'); n--)
            e[n - 1] = '\0';
        ct_hostport_t hp;
        if ((rc = ct_hostport_parse(e, CTRUN_DEFAULT_ETCD_PORT, false, &hp, eb)) != 0) {
            rc = ct_errbuf_wrap(eb, rc, "%s", src);
            break;
        }
        if (at == 0)
            cfg->store_addr = hp;
        else
            out[at++] = ',';
        char one[CT_HOST_MAX + 16];
        int n = ct_hostport_format(&hp, one, sizeof one);
        if (n < 0 || at + (size_t)n + 2 > size) {
            rc = ct_errbuf_set(eb, CT_EPARSE, "%s: endpoint \"%.64s\" is too long", src, e);
            break;
        }
        memcpy(out + at, one, (size_t)n);
        at += (size_t)n;
    }
    if (rc == 0 && at == 0)
        rc = ct_errbuf_set(eb, CT_EPARSE, "%s: no etcd endpoint in \"%.64s\"", src,
                           cfg->rdzv_endpoint);
    free(copy);
    if (rc != 0) {
        free(out);
        return rc;
    }
    out[at] = '\0';
    free(cfg->rdzv_endpoint);
    cfg->rdzv_endpoint = out;
    return 0;
}

static int ctrun_cli__rendezvous(const ctrun_cli__raw_t *raw, ctrun_config_t *cfg, ct_errbuf_t *eb)
{
    int rc;
    if (cfg->standalone) {
        if (cfg->min_nodes > 1)
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "--standalone runs a single-node job, but --nnodes asks for at "
                                 "least %d nodes",
                                 cfg->min_nodes);
        if (raw->on_cli[CTRUN_CLI__O_RDZV_BACKEND] || raw->on_cli[CTRUN_CLI__O_RDZV_ENDPOINT] ||
            raw->on_cli[CTRUN_CLI__O_RDZV_ID]) {
            if ((rc =
                     ctrun_cli__warn(cfg, "--standalone: the given --rdzv_backend, --rdzv_endpoint "
                                          "and --rdzv_id are ignored")) != 0)
                return rc;
        }
        cfg->rdzv_backend = CTRUN_RDZV_C10D;
        if ((cfg->rdzv_endpoint = strdup("localhost:0")) == NULL)
            return -ENOMEM;
        if ((rc = ctrun_cli__uuid4(&cfg->run_id)) != 0)
            return rc;
        return ct_hostport_parse("localhost:0", -1, true, &cfg->store_addr, eb);
    }

    const char *backend =
        raw->given[CTRUN_CLI__O_RDZV_BACKEND] ? raw->value[CTRUN_CLI__O_RDZV_BACKEND] : "static";
    const char *src = raw->source[CTRUN_CLI__O_RDZV_BACKEND];
    const char *endpoint =
        raw->given[CTRUN_CLI__O_RDZV_ENDPOINT] ? raw->value[CTRUN_CLI__O_RDZV_ENDPOINT] : "";
    if (strcmp(backend, "static") == 0 && endpoint[0] == '\0' &&
        !raw->given[CTRUN_CLI__O_MASTER_PORT] && cfg->max_nodes == 1) {
        /* torchrun 2.x: a single node given no port has nobody to agree on one with, so it
         * takes a free port (c10d on localhost:0) and two such jobs on one machine never
         * collide. A given --rdzv_id stays (torchrun replaces it with a uuid4: only the store's
         * port has to be unique). */
        cfg->free_port = true;
        cfg->rdzv_backend = CTRUN_RDZV_C10D;
        if ((cfg->rdzv_endpoint = strdup("localhost:0")) == NULL)
            return -ENOMEM;
        if (raw->given[CTRUN_CLI__O_RDZV_ID]) {
            if ((cfg->run_id = strdup(raw->value[CTRUN_CLI__O_RDZV_ID])) == NULL)
                return -ENOMEM;
            if (strchr(cfg->run_id, '/') != NULL)
                return ct_errbuf_set(eb, CT_EPARSE,
                                     "%s: \"%.64s\" contains '/' (it names log folders)",
                                     raw->source[CTRUN_CLI__O_RDZV_ID], cfg->run_id);
        } else if ((rc = ctrun_cli__uuid4(&cfg->run_id)) != 0) {
            return rc;
        }
        return ct_hostport_parse("localhost:0", -1, true, &cfg->store_addr, eb);
    }
    if (strcmp(backend, "static") == 0)
        cfg->rdzv_backend = CTRUN_RDZV_STATIC;
    else if (strcmp(backend, "c10d") == 0)
        cfg->rdzv_backend = CTRUN_RDZV_C10D;
    else if (strcmp(backend, "etcd-v3") == 0)
        cfg->rdzv_backend = CTRUN_RDZV_ETCD_V3;
    else if (strcmp(backend, "etcd") == 0 || strcmp(backend, "etcd-v2") == 0)
        return ct_errbuf_set(eb, CT_EPARSE,
                             "%s: \"%s\" (etcd's v2 API) is not supported by ctrun (expected "
                             "static, c10d or etcd-v3)",
                             src, backend);
    else
        return ct_errbuf_set(eb, CT_EPARSE,
                             "%s: unknown backend \"%.64s\" (expected static, c10d or etcd-v3)",
                             src, backend);

    if ((rc = ctrun_cli__str(raw, CTRUN_CLI__O_RDZV_ID, "none", &cfg->run_id)) != 0 ||
        cfg->run_id == NULL)
        return -ENOMEM;
    if (strchr(cfg->run_id, '/') != NULL)
        return ct_errbuf_set(eb, CT_EPARSE, "%s: \"%.64s\" contains '/' (it names log folders)",
                             raw->source[CTRUN_CLI__O_RDZV_ID], cfg->run_id);
    if ((rc = ctrun_cli__str(raw, CTRUN_CLI__O_RDZV_ENDPOINT, "", &cfg->rdzv_endpoint)) != 0 ||
        cfg->rdzv_endpoint == NULL)
        return -ENOMEM;

    bool is_static = cfg->rdzv_backend == CTRUN_RDZV_STATIC;
    const char *ep_src = raw->source[CTRUN_CLI__O_RDZV_ENDPOINT];
    if (cfg->rdzv_backend == CTRUN_RDZV_ETCD_V3)
        return ctrun_cli__etcd_endpoints(cfg, ep_src, eb);
    if (cfg->rdzv_endpoint[0] != '\0') {
        /* static needs the port (torchrun: "Port is missing in endpoint"); port 0 only works
         * where nobody else has to find the store. */
        rc = ct_hostport_parse(cfg->rdzv_endpoint, is_static ? -1 : CTRUN_DEFAULT_C10D_PORT,
                               cfg->max_nodes == 1, &cfg->store_addr, eb);
        if (rc != 0)
            return ct_errbuf_wrap(eb, rc, "%s", ep_src);
    } else if (is_static) {
        cfg->store_addr = (ct_hostport_t){.port = cfg->master_port, .has_port = true};
        snprintf(cfg->store_addr.host, sizeof cfg->store_addr.host, "%s", cfg->master_addr);
        if ((rc = ct_host_validate(cfg->master_addr, &cfg->store_addr.kind, eb)) != 0)
            return rc;
    } else {
        if ((rc = ct_hostport_parse("localhost", CTRUN_DEFAULT_C10D_PORT, false, &cfg->store_addr,
                                    eb)) != 0)
            return rc;
    }
    if (!is_static && cfg->rdzv_endpoint[0] == '\0' &&
        (raw->on_cli[CTRUN_CLI__O_MASTER_ADDR] || raw->on_cli[CTRUN_CLI__O_MASTER_PORT])) {
        if ((rc = ctrun_cli__warn(cfg, "--master_addr/--master_port are only used by the static "
                                       "backend when --rdzv_endpoint is not given")) != 0)
            return rc;
    }
    if (is_static && cfg->min_nodes != cfg->max_nodes) {
        if ((rc = ctrun_cli__warn(cfg, "static rendezvous waits for all %d nodes of --nnodes=%d:%d",
                                  cfg->max_nodes, cfg->min_nodes, cfg->max_nodes)) != 0)
            return rc;
    }
    return 0;
}

static int ctrun_cli__rdzv_conf(const ctrun_cli__raw_t *raw, ctrun_config_t *cfg, ct_errbuf_t *eb)
{
    const char *text = raw->given[CTRUN_CLI__O_RDZV_CONF] ? raw->value[CTRUN_CLI__O_RDZV_CONF] : "";
    int rc = ctrun_rdzv_conf_parse(text, &cfg->rdzv_conf, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, rc, "%s", raw->source[CTRUN_CLI__O_RDZV_CONF]);
    for (size_t i = 0; i < cfg->rdzv_conf.count; i++) {
        const char *key = cfg->rdzv_conf.items[i].key;
        if (!ctrun_rdzv_conf_known(key) &&
            (rc = ctrun_cli__warn(cfg, "%s: unknown key \"%.64s\" is ignored",
                                  raw->source[CTRUN_CLI__O_RDZV_CONF], key)) != 0)
            return rc;
    }
    return 0;
}

static int ctrun_cli__choice(const ctrun_cli__raw_t *raw, int id, const char *dflt,
                             const char *const *choices, char **out, ct_errbuf_t *eb)
{
    const char *v = raw->given[id] ? raw->value[id] : dflt;
    char list[128] = "";
    for (const char *const *c = choices; *c != NULL; c++) {
        if (strcmp(*c, v) == 0) {
            *out = strdup(v);
            return *out ? 0 : -ENOMEM;
        }
        size_t used = strlen(list);
        snprintf(list + used, sizeof list - used, "%s%s", c == choices ? "" : ", ", *c);
    }
    return ct_errbuf_set(eb, CT_EPARSE, "%s: invalid choice \"%.64s\" (choose from %s)",
                         raw->source[id], v, list);
}

static int ctrun_cli__workers(const ctrun_cli__raw_t *raw, ctrun_config_t *cfg,
                              const char *const *env, ct_errbuf_t *eb)
{
    int rc;
    if ((rc = ctrun_cli__str(raw, CTRUN_CLI__O_ROLE, "default", &cfg->role)) != 0)
        return rc;
    const char *log_dir =
        raw->given[CTRUN_CLI__O_LOG_DIR] ? raw->value[CTRUN_CLI__O_LOG_DIR] : NULL;
    if (log_dir != NULL && log_dir[0] != '\0' && (cfg->log_dir = strdup(log_dir)) == NULL)
        return -ENOMEM;
    static const int std_ids[2] = {CTRUN_CLI__O_REDIRECTS, CTRUN_CLI__O_TEE};
    ctrun_std_spec_t *std_out[2] = {&cfg->redirects, &cfg->tee};
    for (int k = 0; k < 2; k++) {
        int id = std_ids[k];
        if ((rc = ctrun_std_parse(raw->given[id] ? raw->value[id] : "0", std_out[k], eb)) != 0)
            return ct_errbuf_wrap(eb, rc, "%s", raw->source[id]);
    }
    const char *filter = raw->given[CTRUN_CLI__O_LOCAL_RANKS_FILTER]
                             ? raw->value[CTRUN_CLI__O_LOCAL_RANKS_FILTER]
                             : "";
    if ((rc = ctrun_rank_filter_parse(filter, &cfg->local_ranks_filter, eb)) != 0)
        return ct_errbuf_wrap(eb, rc, "%s", raw->source[CTRUN_CLI__O_LOCAL_RANKS_FILTER]);
    if (raw->given[CTRUN_CLI__O_LOGS_SPECS])
        return ct_errbuf_set(eb, CT_EPARSE,
                             "%s: \"%.64s\" names a Python plugin (a torchrun.logs_specs entry "
                             "point) that ctrun cannot load; ctrun writes torchrun's default "
                             "layout, which --log_dir, --redirects, --tee, --local_ranks_filter, "
                             "--duplicate_stdout_filters and --log_line_prefix_template adjust",
                             raw->source[CTRUN_CLI__O_LOGS_SPECS],
                             raw->value[CTRUN_CLI__O_LOGS_SPECS]);

    /* What to run: torchrun's flags, then ctrun's entry rule (.py or -m under Python). */
    if ((rc = ctrun_cli__flag(raw, CTRUN_CLI__O_MODULE, &cfg->module, eb)) != 0 ||
        (rc = ctrun_cli__flag(raw, CTRUN_CLI__O_NO_PYTHON, &cfg->no_python, eb)) != 0 ||
        (rc = ctrun_cli__flag(raw, CTRUN_CLI__O_RUN_PATH, &cfg->run_path, eb)) != 0)
        return rc;
    if (cfg->module && cfg->no_python && !cfg->run_path)
        return ct_errbuf_set(eb, CT_EPARSE, "--no_python and --module cannot be used together");
    size_t slen = strlen(cfg->script);
    bool dot_py = slen >= 3 && strcmp(cfg->script + slen - 3, ".py") == 0;
    cfg->use_python = cfg->run_path || (!cfg->no_python && (cfg->module || dot_py));
    char self[PATH_MAX];
    ssize_t self_len = readlink("/proc/self/exe", self, sizeof self - 1);
    self[self_len > 0 ? self_len : 0] = '\0';
    if ((rc = ctrun_python_choose(
             raw->given[CTRUN_CLI__O_PYTHON] ? raw->value[CTRUN_CLI__O_PYTHON] : NULL,
             self_len > 0 ? self : NULL, ctrun_cli__getenv(env, "VIRTUAL_ENV"),
             ctrun_cli__getenv(env, "CONDA_PREFIX"), &cfg->python, &cfg->python_source)) != 0)
        return rc;
    if (cfg->use_python && cfg->python[0] == '\0')
        return ct_errbuf_set(eb, CT_EPARSE, "%s: empty interpreter path",
                             raw->source[CTRUN_CLI__O_PYTHON]);

    const char *nproc =
        raw->given[CTRUN_CLI__O_NPROC_PER_NODE] ? raw->value[CTRUN_CLI__O_NPROC_PER_NODE] : "1";
    rc = ctrun_nproc_resolve(nproc, ctrun_cli__getenv(env, "CTRUN_LIBCUDA"), &cfg->nproc_kind,
                             &cfg->nproc_per_node, eb);
    return rc == 0 ? 0 : ct_errbuf_wrap(eb, rc, "%s", raw->source[CTRUN_CLI__O_NPROC_PER_NODE]);
}

/* ---- torchrun 2.x's newest options, torch.distributed.launch ----------------------------------
 */

/* --virtual_local_rank: each local rank's device, as torchrun's _set_local_rank_env picks it:
 * entry <local rank> of HIP_VISIBLE_DEVICES (when set and not empty) or CUDA_VISIBLE_DEVICES,
 * blanks trimmed, or the local rank itself when neither is set. */
static int ctrun_cli__virtual_devices(ctrun_config_t *cfg, const char *const *env, ct_errbuf_t *eb)
{
    const char *hip = ctrun_cli__getenv(env, "HIP_VISIBLE_DEVICES");
    const char *var =
        hip != NULL && hip[0] != '\0' ? "HIP_VISIBLE_DEVICES" : "CUDA_VISIBLE_DEVICES";
    const char *parent = ctrun_cli__getenv(env, var);
    cfg->virtual_hip = hip != NULL && hip[0] != '\0';
    cfg->virtual_devices = calloc((size_t)cfg->nproc_per_node + 1, sizeof *cfg->virtual_devices);
    if (cfg->virtual_devices == NULL)
        return -ENOMEM;
    for (int i = 0; i < cfg->nproc_per_node; i++) {
        char buf[32];
        const char *item = buf;
        size_t len;
        if (parent == NULL) {
            len = (size_t)snprintf(buf, sizeof buf, "%d", i);
        } else {
            item = parent;
            for (int k = 0; k < i && item != NULL; k++) {
                item = strchr(item, ',');
                item = item ? item + 1 : NULL;
            }
            if (item == NULL)
                return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                                     "--virtual_local_rank: local rank %d exceeds the GPUs in "
                                     "%s=%.64s (--nproc_per_node %d)",
                                     i, var, parent, cfg->nproc_per_node);
            len = strcspn(item, ",");
            while (len > 0 && isspace((unsigned char)*item)) {
                item++;
                len--;
            }
            while (len > 0 && isspace((unsigned char)item[len - 1]))
                len--;
        }
        if ((cfg->virtual_devices[i] = strndup(item, len)) == NULL)
            return -ENOMEM;
    }
    return 0;
}

/* --numa_binding: the CPUs of every local rank, from the CUDA devices' PCI addresses and
 * sysfs. */
static int ctrun_cli__numa(const ctrun_cli__raw_t *raw, ctrun_config_t *cfg, const char *const *env,
                           ct_errbuf_t *eb)
{
    const char *src = raw->source[CTRUN_CLI__O_NUMA_BINDING];
    int rc = ctrun_numa_mode_parse(raw->value[CTRUN_CLI__O_NUMA_BINDING], &cfg->numa_mode, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, rc, "%s", src);
    char(*pci)[CTRUN_GPU_PCI_LEN] = calloc(CTRUN_GPU_PCI_MAX, CTRUN_GPU_PCI_LEN);
    const char **names = calloc(CTRUN_GPU_PCI_MAX, sizeof *names);
    ctrun_cpu_list_t allowed = {0};
    int ndev = 0;
    cfg->numa_cpus = calloc((size_t)cfg->nproc_per_node, sizeof *cfg->numa_cpus);
    if (pci == NULL || names == NULL || cfg->numa_cpus == NULL)
        rc = -ENOMEM;
    if (rc == 0)
        rc = ctrun_gpu_pci(ctrun_cli__getenv(env, "CTRUN_LIBCUDA"), pci, &ndev, eb);
    if (rc == 0)
        rc = ctrun_cpu_list_allowed(&allowed, eb);
    for (int i = 0; rc == 0 && i < ndev; i++)
        names[i] = pci[i];
    if (rc == 0)
        rc = ctrun_numa_bind("/sys", cfg->numa_mode, names, ndev, &allowed, cfg->nproc_per_node,
                             cfg->numa_cpus, eb);
    ctrun_cpu_list_free(&allowed);
    free(pci);
    free(names);
    if (rc == -ENOMEM)
        return rc;
    return rc == 0 ? 0 : ct_errbuf_wrap(eb, rc, "%s %s", src, ctrun_numa_mode_name(cfg->numa_mode));
}

/* --shutdown_timeout and --grace_period are one setting: the command line first (both given
 * must agree), then PET_SHUTDOWN_TIMEOUT, then TORCH_ELASTIC_SHUTDOWN_TIMEOUT, then 30 s. */
static int ctrun_cli__shutdown(const ctrun_cli__raw_t *raw, ctrun_config_t *cfg, ct_errbuf_t *eb)
{
    int id = CTRUN_CLI__O_SHUTDOWN_TIMEOUT;
    const bool grace_cli = raw->on_cli[CTRUN_CLI__O_GRACE_PERIOD];
    if (!raw->given[id] || (grace_cli && !raw->on_cli[id]))
        return 0; /* --grace_period (or its variable, or the default) holds */
    int seconds = 0;
    int rc = ct_parse_int(raw->value[id], INT_MIN, INT_MAX, &seconds, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, rc, "%s", raw->source[id]);
    if (seconds < 0)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "%s: must be non-negative, got %d",
                             raw->source[id], seconds);
    if (grace_cli && cfg->grace_period_s != (double)seconds)
        return ct_errbuf_set(
            eb, CT_EPARSE, "%s %d and %s %g are the same setting with different values",
            raw->source[id], seconds, raw->source[CTRUN_CLI__O_GRACE_PERIOD], cfg->grace_period_s);
    cfg->grace_period_s = seconds;
    return 0;
}

/* torch.distributed.launch's command line: --use_env, and otherwise --local-rank=N (or
 * --local_rank=N) for the script. */
static int ctrun_cli__launch(const ctrun_cli__raw_t *raw, ctrun_config_t *cfg, ct_errbuf_t *eb)
{
    int rc;
    if ((rc = ctrun_cli__flag(raw, CTRUN_CLI__O_LAUNCH_COMPAT, &cfg->launch, eb)) != 0 ||
        (rc = ctrun_cli__flag(raw, CTRUN_CLI__O_USE_ENV, &cfg->use_env, eb)) != 0)
        return rc;
    const int only_launch[] = {CTRUN_CLI__O_USE_ENV, CTRUN_CLI__O_LOCAL_RANK_ARG};
    for (size_t k = 0; !cfg->launch && k < 2; k++) {
        if (raw->on_cli[only_launch[k]])
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "%s is an option of torch.distributed.launch's command line: "
                                 "run ctrun-launch, or give --launch_compat first (ctrun itself "
                                 "always passes the local rank as LOCAL_RANK)",
                                 raw->source[only_launch[k]]);
    }
    if (!cfg->launch)
        return 0;
    static const char *const styles[] = {"local-rank", "local_rank", NULL};
    char *style = NULL;
    if ((rc = ctrun_cli__choice(raw, CTRUN_CLI__O_LOCAL_RANK_ARG, "local-rank", styles, &style,
                                eb)) != 0)
        return rc;
    if (cfg->no_python && !cfg->run_path && !cfg->use_env) {
        free(style);
        return ct_errbuf_set(eb, CT_EPARSE,
                             "when using the '--no-python' flag, you must also set the "
                             "'--use-env' flag");
    }
    if (!cfg->use_env && asprintf(&cfg->local_rank_arg, "--%s", style) < 0)
        cfg->local_rank_arg = NULL, rc = -ENOMEM;
    free(style);
    return rc;
}

/* Python's logging level names above INFO: the events logger prints nothing then. */
static bool ctrun_cli__loglevel_quiet(const char *level)
{
    static const char *const quiet[] = {"WARNING", "WARN", "ERROR", "CRITICAL", "FATAL"};
    for (size_t i = 0; level != NULL && i < sizeof quiet / sizeof quiet[0]; i++) {
        if (strcasecmp(level, quiet[i]) == 0)
            return true;
    }
    return false;
}

static int ctrun_cli__newer(const ctrun_cli__raw_t *raw, ctrun_config_t *cfg,
                            const char *const *env, ct_errbuf_t *eb)
{
    int rc;
    static const int filter_ids[2] = {CTRUN_CLI__O_DUPLICATE_STDOUT_FILTERS,
                                      CTRUN_CLI__O_DUPLICATE_STDERR_FILTERS};
    for (int k = 0; k < 2; k++) {
        if (raw->given[filter_ids[k]] &&
            (rc = ctrun_line_filter_parse(raw->value[filter_ids[k]], &cfg->dup_filters[k], eb)) !=
                0)
            return rc;
    }
    const char *tmpl = raw->given[CTRUN_CLI__O_LOG_LINE_PREFIX_TEMPLATE]
                           ? raw->value[CTRUN_CLI__O_LOG_LINE_PREFIX_TEMPLATE]
                           : "";
    if (tmpl[0] != '\0') { /* torchrun: the option, "or" TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE */
        free(cfg->log_line_prefix_template);
        if ((cfg->log_line_prefix_template = strdup(tmpl)) == NULL)
            return -ENOMEM;
    }
    if ((rc = ctrun_cli__flag(raw, CTRUN_CLI__O_VIRTUAL_LOCAL_RANK, &cfg->virtual_local_rank,
                              eb)) != 0 ||
        (cfg->virtual_local_rank && (rc = ctrun_cli__virtual_devices(cfg, env, eb)) != 0) ||
        (raw->given[CTRUN_CLI__O_NUMA_BINDING] && (rc = ctrun_cli__numa(raw, cfg, env, eb)) != 0) ||
        (rc = ctrun_cli__shutdown(raw, cfg, eb)) != 0 ||
        (rc = ctrun_cli__launch(raw, cfg, eb)) != 0)
        return rc;
    cfg->event_log_console = strcmp(cfg->event_log_handler, "console") == 0 &&
                             !ctrun_cli__loglevel_quiet(ctrun_cli__getenv(env, "LOGLEVEL"));
    /* The metrics endpoint. */
    if ((rc = ctrun_cli__int(raw, CTRUN_CLI__O_METRICS_PORT, -1, 0, 65535, &cfg->metrics_port,
                             eb)) != 0 ||
        (rc = ctrun_cli__host(raw, CTRUN_CLI__O_METRICS_ADDR, "127.0.0.1", &cfg->metrics_addr,
                              eb)) != 0)
        return rc;
    return 0;
}

/* --inject is parsed here (a bad spec is a usage error); ctrun_cli__job_fit checks that every spec
 * can fire once the job's size is known. */
static int ctrun_cli__inject(const ctrun_cli__raw_t *raw, ctrun_config_t *cfg, ct_errbuf_t *eb)
{
    int rc;
    if (raw->given[CTRUN_CLI__O_INJECT_SEED]) {
        int64_t seed;
        if ((rc = ct_parse_int64(raw->value[CTRUN_CLI__O_INJECT_SEED], 0, INT64_MAX, &seed, eb)) !=
            0)
            return ct_errbuf_wrap(eb, rc, "%s", raw->source[CTRUN_CLI__O_INJECT_SEED]);
        cfg->inject_seed = (uint64_t)seed;
    }
    if (!raw->given[CTRUN_CLI__O_INJECT] || raw->value[CTRUN_CLI__O_INJECT][0] == '\0')
        return 0;
    if ((rc = ctrun_inject_parse(raw->value[CTRUN_CLI__O_INJECT], cfg->inject_seed,
                                 &cfg->inject_specs, eb)) != 0)
        return rc;
    cfg->inject = strdup(raw->value[CTRUN_CLI__O_INJECT]);
    return cfg->inject == NULL ? -ENOMEM : 0;
}

/* The environment variables that the agent acts on, read now: their values never make a usage
 * error (an unset or odd one keeps torchrun's behaviour), so they are taken as they are. */
static int ctrun_cli__agent_env(ctrun_config_t *cfg, const char *const *env)
{
    const char *tmpl = ctrun_cli__getenv(env, "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");
    const char *error_file = ctrun_cli__getenv(env, "TORCHELASTIC_ERROR_FILE");
    const char *cgroup = ctrun_cli__getenv(env, "CTRUN_CGROUP");
    const char *file_timer = ctrun_cli__getenv(env, "TORCHELASTIC_ENABLE_FILE_TIMER");
    const char *timer_file = ctrun_cli__getenv(env, "TORCHELASTIC_TIMER_FILE");
    const char *tmp[] = {ctrun_cli__getenv(env, "TMPDIR"), ctrun_cli__getenv(env, "TEMP"),
                         ctrun_cli__getenv(env, "TMP")};
    cfg->cgroup = cgroup == NULL || strcmp(cgroup, "off") != 0;
    cfg->file_timer = file_timer != NULL && strcmp(file_timer, "1") == 0;
    if ((cfg->file_timer && timer_file != NULL && timer_file[0] != '\0' &&
         (cfg->timer_file = strdup(timer_file)) == NULL) ||
        (tmpl != NULL && (cfg->log_line_prefix_template = strdup(tmpl)) == NULL) ||
        (error_file != NULL && (cfg->error_file = strdup(error_file)) == NULL) ||
        (cfg->tmp_dir = strdup(ctrun_logs_tmpdir(tmp, sizeof tmp / sizeof tmp[0]))) == NULL)
        return -ENOMEM;
    return 0;
}

/* Values that must name something that exists in this job, checked once nproc_per_node is
 * known: --inject targets and --local_ranks_filter ranks (a rank that does not exist would
 * silently never fire, or silently hide every line). Also CTRUN_CONSOLE_BUFFER. */
static int ctrun_cli__job_fit(const ctrun_cli__raw_t *raw, ctrun_config_t *cfg,
                              const char *const *env, ct_errbuf_t *eb)
{
    /* One node: its workers are the whole job. Several: another node may run more workers than
     * this one (ranks add up over the nodes), so ranks wait for the rendezvous (the agent says
     * when a rank is missing from an attempt). */
    long long max_world = cfg->max_nodes == 1 ? cfg->nproc_per_node : -1;
    int rc = ctrun_inject_check(&cfg->inject_specs, cfg->max_nodes, max_world, eb);
    if (rc != 0)
        return rc;
    const ctrun_rank_filter_t *f = &cfg->local_ranks_filter;
    for (size_t i = 0; i < f->count; i++) {
        if (f->ranks[i] >= cfg->nproc_per_node)
            return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                                 "%s: local rank %d does not exist on this node (--nproc_per_node "
                                 "%d: local ranks 0..%d)",
                                 raw->source[CTRUN_CLI__O_LOCAL_RANKS_FILTER], f->ranks[i],
                                 cfg->nproc_per_node, cfg->nproc_per_node - 1);
    }
    const char *buffer = ctrun_cli__getenv(env, "CTRUN_CONSOLE_BUFFER");
    if (buffer != NULL) {
        uint64_t v = 0;
        if ((rc = ct_parse_size(buffer, (uint64_t)1 << 30, &v, eb)) != 0)
            return ct_errbuf_wrap(eb, rc, "CTRUN_CONSOLE_BUFFER");
        if (v < CTRUN_CONSOLE_CAPACITY_MIN)
            return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                                 "CTRUN_CONSOLE_BUFFER: %llu bytes is below the minimum of 16K",
                                 (unsigned long long)v);
        cfg->console_buffer = (size_t)v;
    }
    return 0;
}

static int ctrun_cli__convert(const ctrun_cli__raw_t *raw, ctrun_config_t *cfg,
                              const char *const *env, ct_errbuf_t *eb)
{
    static const char *const start_methods[] = {"spawn", "fork", "forkserver", NULL};
    static const char *const log_handlers[] = {"null", "console", "dynamic_rendezvous", NULL};
    int rc;
    if ((rc = ctrun_cli__nnodes(raw, cfg, eb)) != 0 ||
        (rc = ctrun_cli__flag(raw, CTRUN_CLI__O_STANDALONE, &cfg->standalone, eb)) != 0 ||
        (rc = ctrun_cli__host(raw, CTRUN_CLI__O_MASTER_ADDR, "127.0.0.1", &cfg->master_addr, eb)) !=
            0 ||
        (rc = ctrun_cli__int(raw, CTRUN_CLI__O_MASTER_PORT, CTRUN_DEFAULT_MASTER_PORT, 0, 65535,
                             &cfg->master_port, eb)) != 0 ||
        (rc = ctrun_cli__host(raw, CTRUN_CLI__O_LOCAL_ADDR, NULL, &cfg->local_addr, eb)) != 0 ||
        (rc = ctrun_cli__int(raw, CTRUN_CLI__O_NODE_RANK, 0, 0, INT_MAX, &cfg->node_rank, eb)) != 0)
        return rc;
    if (cfg->master_port == 0 && cfg->max_nodes > 1)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "%s: port 0 (a kernel-chosen port) only works with --nnodes=1",
                             raw->source[CTRUN_CLI__O_MASTER_PORT]);
    if ((rc = ctrun_cli__rendezvous(raw, cfg, eb)) != 0 ||
        (rc = ctrun_cli__rdzv_conf(raw, cfg, eb)) != 0)
        return rc;
    if (cfg->rdzv_backend == CTRUN_RDZV_STATIC && cfg->node_rank >= cfg->max_nodes)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "%s: %d is out of range for --nnodes=%d (expected 0..%d)",
                             raw->source[CTRUN_CLI__O_NODE_RANK], cfg->node_rank, cfg->max_nodes,
                             cfg->max_nodes - 1);

    if ((rc = ctrun_cli__int(raw, CTRUN_CLI__O_MAX_RESTARTS, 0, 0, INT_MAX, &cfg->max_restarts,
                             eb)) != 0 ||
        (rc = ctrun_cli__seconds(raw, CTRUN_CLI__O_MONITOR_INTERVAL, 0.1, &cfg->monitor_interval_s,
                                 eb)) != 0 ||
        (rc = ctrun_cli__choice(raw, CTRUN_CLI__O_START_METHOD, "spawn", start_methods,
                                &cfg->start_method, eb)) != 0 ||
        (rc = ctrun_cli__seconds(raw, CTRUN_CLI__O_GRACE_PERIOD, 30, &cfg->grace_period_s, eb)) !=
            0 ||
        (rc = ctrun_cli__seconds(raw, CTRUN_CLI__O_WATCHDOG_TIMEOUT, CTRUN_DEFAULT_WATCHDOG_S,
                                 &cfg->watchdog_timeout_s, eb)) != 0 ||
        (rc = ctrun_cli__seconds(raw, CTRUN_CLI__O_RESTART_BACKOFF, 0, &cfg->restart_backoff_s,
                                 eb)) != 0 ||
        (rc = ctrun_cli__int(raw, CTRUN_CLI__O_PROGRESS_GUARD, 3, 0, INT_MAX, &cfg->progress_guard,
                             eb)) != 0 ||
        (rc = ctrun_cli__str(raw, CTRUN_CLI__O_SIGNALS_TO_HANDLE, CTRUN_CLI__SIGNALS_DEFAULT,
                             &cfg->signals_to_handle)) != 0)
        return rc;
    if ((rc = ctrun_cli__choice(raw, CTRUN_CLI__O_EVENT_LOG_HANDLER, "null", log_handlers,
                                &cfg->event_log_handler, eb)) != 0 ||
        (rc = ctrun_cli__inject(raw, cfg, eb)) != 0)
        return rc;
    rc = ctrun_signal_list_parse(cfg->signals_to_handle, cfg->signals, CTRUN_SIGNALS_MAX,
                                 &cfg->nsignals, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, rc, "%s", raw->source[CTRUN_CLI__O_SIGNALS_TO_HANDLE]);
    if ((rc = ctrun_cli__workers(raw, cfg, env, eb)) != 0 ||
        (rc = ctrun_cli__agent_env(cfg, env)) != 0 ||
        (rc = ctrun_cli__newer(raw, cfg, env, eb)) != 0)
        return rc;
    return ctrun_cli__job_fit(raw, cfg, env, eb);
}

int ctrun_cli_parse(int argc, char *const argv[], const char *const *env, ctrun_config_t *cfg,
                    ctrun_cli_action_t *action, ct_errbuf_t *eb)
{
    memset(cfg, 0, sizeof *cfg);
    *action = CTRUN_CLI_RUN;
    ctrun_cli__raw_t *raw = calloc(1, sizeof *raw);
    if (raw == NULL)
        return -ENOMEM;
    for (int o = 0; o < CTRUN_CLI__O_COUNT; o++) /* messages about defaults name the option */
        snprintf(raw->source[o], sizeof raw->source[o], "--%s", ctrun_cli__opts[o].name);
    int script_index = argc;
    int rc = ctrun_cli__scan(argc, argv, raw, &script_index, action, eb);
    if (rc == 0 && *action != CTRUN_CLI_RUN) {
        free(raw);
        return 0;
    }
    if (rc == 0 && script_index >= argc)
        rc = ct_errbuf_set(eb, CT_EPARSE,
                           "missing the training script (usage: ctrun [options] training_script "
                           "[args...])");
    if (rc == 0) {
        cfg->script = strdup(argv[script_index]);
        cfg->nscript_args = (size_t)(argc - script_index - 1);
        cfg->script_args = calloc(cfg->nscript_args + 1, sizeof *cfg->script_args);
        rc = (cfg->script && cfg->script_args) ? 0 : -ENOMEM;
        for (size_t k = 0; rc == 0 && k < cfg->nscript_args; k++) {
            if ((cfg->script_args[k] = strdup(argv[script_index + 1 + (int)k])) == NULL)
                rc = -ENOMEM;
        }
    }
    if (rc == 0) {
        ctrun_cli__env_fallbacks(env, raw);
        rc = ctrun_cli__convert(raw, cfg, env, eb);
    }
    free(raw);
    if (rc == -ENOMEM)
        ct_errbuf_set(eb, rc, "out of memory");
    if (rc != 0)
        ctrun_config_free(cfg);
    return rc;
}

void ctrun_config_free(ctrun_config_t *cfg)
{
    char **strings[] = {&cfg->rdzv_endpoint,  &cfg->run_id,       &cfg->master_addr,
                        &cfg->local_addr,     &cfg->start_method, &cfg->signals_to_handle,
                        &cfg->role,           &cfg->log_dir,      &cfg->python,
                        &cfg->script,         &cfg->inject,       &cfg->log_line_prefix_template,
                        &cfg->tmp_dir,        &cfg->error_file,   &cfg->event_log_handler,
                        &cfg->local_rank_arg, &cfg->metrics_addr, &cfg->timer_file};
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
        free(*strings[i]);
        *strings[i] = NULL;
    }
    for (size_t i = 0; cfg->script_args != NULL && i < cfg->nscript_args; i++)
        free(cfg->script_args[i]);
    free(cfg->script_args);
    cfg->script_args = NULL;
    cfg->nscript_args = 0;
    for (size_t i = 0; i < cfg->nwarnings; i++)
        free(cfg->warnings[i]);
    free(cfg->warnings);
    cfg->warnings = NULL;
    cfg->nwarnings = 0;
    ctrun_rdzv_conf_free(&cfg->rdzv_conf);
    ctrun_rank_filter_free(&cfg->local_ranks_filter);
    ctrun_inject_free(&cfg->inject_specs);
    for (size_t i = 0; cfg->virtual_devices != NULL && cfg->virtual_devices[i] != NULL; i++)
        free(cfg->virtual_devices[i]);
    free(cfg->virtual_devices);
    cfg->virtual_devices = NULL;
    for (int k = 0; k < 2; k++)
        ctrun_line_filter_free(&cfg->dup_filters[k]);
    for (int i = 0; cfg->numa_cpus != NULL && i < cfg->nproc_per_node; i++)
        ctrun_cpu_list_free(&cfg->numa_cpus[i]);
    free(cfg->numa_cpus);
    cfg->numa_cpus = NULL;
}

/* ---- --help / --version ---------------------------------------------------------------------- */

/* Prints text wrapped at 96 columns, each line indented by `indent` spaces. */
static void ctrun_cli__wrap(FILE *out, const char *text, int indent)
{
    int col = 0;
    const char *p = text;
    while (*p != '\0') {
        while (*p == ' ')
            p++;
        size_t w = strcspn(p, " ");
        if (w == 0)
            break;
        if (col > 0 && col + 1 + (int)w > 96) {
            fputc('\n', out);
            col = 0;
        }
        if (col == 0)
            col = fprintf(out, "%*s%.*s", indent, "", (int)w, p);
        else
            col += fprintf(out, " %.*s", (int)w, p);
        p += w;
    }
    fputc('\n', out);
}

void ctrun_cli_help(FILE *out)
{
    fputs("usage: ctrun [options] training_script [training_script_args ...]\n\n", out);
    ctrun_cli__wrap(
        out,
        "ctrun starts and supervises the workers of a distributed job, as torchrun does, "
        "with torchrun's options and worker environment. Options come before the "
        "training script; everything after the script is passed to it unchanged. A "
        "script ending in .py, or -m MODULE, runs under <python> -u; anything else is "
        "executed directly. Words in option names may be joined by '-' or '_', and a "
        "unique prefix of a name is enough. When an option is not given, the variable "
        "in brackets is read (PET_* as torchrun does; flags take 0 or 1); the command "
        "line wins. See ctrun(1).",
        0);
    for (int o = 0; o < CTRUN_CLI__O_COUNT; o++) {
        const ctrun_cli__opt_t *opt = &ctrun_cli__opts[o];
        if (opt->group != NULL)
            fprintf(out, "\n%s:\n", opt->group);
        char names[160];
        int n = 0;
        if (opt->short_name)
            n += snprintf(names + n, sizeof names - (size_t)n, "-%c, ", opt->short_name);
        if (strchr(opt->name, '_') != NULL) {
            n += snprintf(names + n, sizeof names - (size_t)n, "--");
            for (const char *c = opt->name; *c != '\0'; c++)
                names[n++] = *c == '_' ? '-' : *c;
            names[n] = '\0';
            n += snprintf(names + n, sizeof names - (size_t)n, ", ");
        }
        snprintf(names + n, sizeof names - (size_t)n, "--%s%s%s", opt->name,
                 opt->metavar ? " " : "", opt->metavar ? opt->metavar : "");
        fprintf(out, "  %s\n", names);
        char help[512];
        int h = snprintf(help, sizeof help, "%s", opt->help);
        if (opt->env[0] != NULL)
            snprintf(help + h, sizeof help - (size_t)h, " [%s%s%s]", opt->env[0],
                     opt->env[1] ? ", " : "", opt->env[1] ? opt->env[1] : "");
        ctrun_cli__wrap(out, help, 8);
    }
    fputs("\nExit status: 0 when every worker succeeded; 1 when the job failed (a failure "
          "report\nis printed); 2 for a bad option or value; 3 when --progress_guard stopped the "
          "restarts;\n128+N when ctrun was stopped by signal N.\n",
          out);
}

void ctrun_cli_version(FILE *out)
{
    fprintf(out, "ctrun %s\n", CT_VERSION);
}
