/*
 * ctrun_cli.h - ctrun's command line and its environment fallbacks, parsed into one
 * ctrun_config_t that the rest of the launcher reads.
 *
 * The grammar is torchrun's: options (both --a_b and --a-b spellings, unique prefixes,
 * --opt=value and --opt value, -m/-r/-t short forms, clustered as argparse allows) come
 * before the training script; "--" may end them; everything after the script is passed to
 * it verbatim. Valued options fall back to PET_<NAME> (NAME in upper case with '_'), boolean
 * ones to bool(int(PET_<NAME>)); the command line wins. Values are validated here, so that a
 * bad flag or value is one line naming it and exit status 2, before anything starts. Every
 * other variable the agent acts on (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE,
 * TORCHELASTIC_ERROR_FILE, CTRUN_CGROUP, TMPDIR/TEMP/TMP, CTRUN_CONSOLE_BUFFER, CTRUN_LIBCUDA,
 * CUDA_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES for --virtual_local_rank, LOGLEVEL for
 * --event_log_handler, VIRTUAL_ENV and CONDA_PREFIX for the interpreter) is read here too, once, so that the agent never reads its
 * environment; only the copy of the environment each worker gets (ctrun_env.h) and the PATH
 * lookup of the worker's program (ctrun_proc.h) use the agent's environment as it is when they
 * run. The GPU probe (ctrun_nproc.h) and sysfs (ctrun_numa.h) are read here too when
 * --nproc_per_node or --numa_binding need them, and ctrun's own executable's path for the
 * interpreter rule (ctrun_python.h).
 *
 * Deliberately not here: anything that runs (the agent), worker environments (ctrun_env.h),
 * worker command lines (ctrun_cmd.h), and printing other than --help/--version text.
 */
#ifndef CTRUN_CLI_H
#define CTRUN_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ct_addr.h"
#include "ct_error.h"
#include "ctrun_inject.h"
#include "ctrun_logs.h"
#include "ctrun_nproc.h"
#include "ctrun_numa.h"
#include "ctrun_python.h"
#include "ctrun_rdzv_conf.h"
#include "ctrun_signal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exit status for a bad flag or value (argparse's). */
#define CTRUN_EXIT_USAGE 2

/* Default ports: static rendezvous (--master_port) and c10d endpoints without a port. */
#define CTRUN_DEFAULT_MASTER_PORT 29500
#define CTRUN_DEFAULT_C10D_PORT   29400
#define CTRUN_DEFAULT_ETCD_PORT   2379 /* etcd-v3: an endpoint without a port */

/* The most nodes a job may have (a rendezvous plan lists them all: CTRUN_RDZV_MAX_NODES). */
#define CTRUN_MAX_NODES 4096

/* Default --watchdog_timeout: long enough for a checkpoint or an evaluation between two
 * heartbeats (libctworker's trainers report progress during evaluation too). */
#define CTRUN_DEFAULT_WATCHDOG_S 120.0

typedef enum ctrun_rdzv_backend {
    CTRUN_RDZV_STATIC = 0,  /* fixed --nnodes, group rank = --node_rank (torchrun's default) */
    CTRUN_RDZV_C10D = 1,    /* dynamic: store at --rdzv_endpoint, ranks by join order */
    CTRUN_RDZV_ETCD_V3 = 2, /* dynamic as c10d, the rendezvous kept in the etcd cluster at
                             * --rdzv_endpoint (HOST:PORT,...); group rank 0 hosts the workers'
                             * store each round */
} ctrun_rdzv_backend_t;

typedef struct ctrun_config {
    /* nodes and workers */
    int min_nodes, max_nodes;      /* --nnodes N or MIN:MAX */
    ctrun_nproc_kind_t nproc_kind; /* how --nproc_per_node was given */
    int nproc_per_node;            /* resolved count (>= 1) */

    /* rendezvous (after --standalone's rewrite) */
    ctrun_rdzv_backend_t rdzv_backend;
    bool standalone;     /* --standalone */
    bool free_port;      /* torchrun 2.x's rule: a single-node job given no --master_port,
                          * PET_MASTER_PORT or endpoint hosts its own store on a free port, as
                          * --standalone does (c10d, localhost:0) */
    char *rdzv_endpoint; /* as given ("" when not); etcd-v3: the etcd members, comma-separated */
    char *run_id;        /* --rdzv_id; a fresh uuid4 with --standalone */
    ctrun_rdzv_conf_t rdzv_conf;
    int node_rank;     /* --node_rank (static: this node's group rank) */
    char *master_addr; /* --master_addr, without IPv6 brackets */
    int master_port;   /* --master_port */
    char *local_addr;  /* --local_addr, or NULL */
    /* Where the agents' store is: static: --rdzv_endpoint or master_addr:master_port;
     * c10d: --rdzv_endpoint (default port 29400) or localhost:29400; standalone: localhost:0
     * (port 0 = kernel-chosen). */
    ct_hostport_t store_addr;

    /* supervision */
    int max_restarts;
    double monitor_interval_s;      /* accepted and stored; ctrun is event-driven */
    char *start_method;             /* accepted and stored: spawn, fork or forkserver */
    double grace_period_s;          /* SIGTERM -> SIGKILL grace (--grace_period) */
    double watchdog_timeout_s;      /* heartbeat watchdog for libctworker workers; 0 = off */
    double restart_backoff_s;       /* --restart_backoff: first wait, doubling; 0 = none */
    int progress_guard;            /* --progress_guard K; 0 = guard off */
    char *inject;                   /* --inject specs as given, or NULL */
    ctrun_inject_t inject_specs;    /* ... parsed; nodes (and ranks of a one-node job) exist */
    uint64_t inject_seed;           /* --inject_seed */
    int signals[CTRUN_SIGNALS_MAX]; /* --signals_to_handle, forwarded to workers */
    size_t nsignals;
    char *signals_to_handle; /* the same list as given (TORCHELASTIC_SIGNALS_TO_HANDLE) */

    /* workers and their output */
    char *role;    /* --role */
    char *log_dir; /* --log_dir, or NULL (a new temp dir) */
    ctrun_std_spec_t redirects, tee;
    ctrun_rank_filter_t local_ranks_filter; /* local ranks of this node only */
    size_t console_buffer; /* CTRUN_CONSOLE_BUFFER: bytes of console output held for a slow
                            * reader, per destination (ctrun_console.h); 0 = the default */

    /* the environment the agent acts on, read once here */
    char *log_line_prefix_template; /* TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, or NULL */
    char *tmp_dir;    /* where a run folder goes without --log_dir: TMPDIR, TEMP or TMP (the first
                       * writable folder), else /tmp (ctrun_logs_tmpdir) */
    char *error_file; /* TORCHELASTIC_ERROR_FILE: ctrun's own error file, which gets the root
                       * cause's when the job fails; NULL when unset */
    bool cgroup;      /* a cgroup v2 for the job's workers when possible: CTRUN_CGROUP is not
                       * "off" (ctrun_cgroup.h) */
    bool file_timer;  /* TORCHELASTIC_ENABLE_FILE_TIMER=1: serve FileTimerClient's timers */
    char *timer_file; /* TORCHELASTIC_TIMER_FILE: the named pipe to use; NULL: ctrun makes one */

    /* what to run */
    bool module, no_python, run_path;
    bool use_python;    /* the script runs as `<python> -u [-m] script args` */
    char *python;       /* the interpreter (ctrun_python.h) */
    ctrun_python_source_t python_source; /* why it was chosen */
    char *script;       /* training_script */
    char **script_args; /* everything after it, NULL-terminated */
    size_t nscript_args;

    /* torchrun 2.x's newest options, torch.distributed.launch */
    bool virtual_local_rank;  /* LOCAL_RANK=0, one device per worker */
    char **virtual_devices;   /* ... each local rank's CUDA_VISIBLE_DEVICES (nproc_per_node) */
    bool virtual_hip;         /* ... and HIP_VISIBLE_DEVICES too (the agent had it) */
    ctrun_line_filter_t dup_filters[2]; /* --duplicate_std{out,err}_filters, by ctrun_stream_t */
    ctrun_numa_mode_t numa_mode;        /* --numa_binding */
    ctrun_cpu_list_t *numa_cpus;        /* ... each local rank's CPUs (nproc_per_node) */
    bool event_log_console; /* --event_log_handler console, and LOGLEVEL lets INFO through */
    char *event_log_handler;
    bool launch;          /* torch.distributed.launch's command line (--launch_compat) */
    bool use_env;         /* ... --use_env */
    char *local_rank_arg; /* ... "--local-rank" or "--local_rank" appended as ARG=N, or NULL */
    int metrics_port;     /* --metrics_port, -1 when off, 0 kernel-chosen */
    char *metrics_addr;   /* --metrics_addr (default 127.0.0.1) */

    /* Non-fatal remarks for the agent to log as warnings (e.g. an unknown --rdzv_conf key). */
    char **warnings;
    size_t nwarnings;
} ctrun_config_t;

typedef enum ctrun_cli_action {
    CTRUN_CLI_RUN = 0,     /* cfg holds a job to run */
    CTRUN_CLI_HELP = 1,    /* --help/-h: print ctrun_cli_help, exit 0 */
    CTRUN_CLI_VERSION = 2, /* --version: print ctrun_cli_version, exit 0 */
} ctrun_cli_action_t;

/* Parses argv[1..argc) with env (a NULL-terminated "NAME=value" array; NULL means the
 * process environment) for the PET_* and other fallbacks. On success *action says what to do
 * and, for CTRUN_CLI_RUN, cfg is filled (free with ctrun_config_free). On failure returns
 * CT_EPARSE / CT_ERANGE_VALUE / -ENOMEM with one line in eb naming the flag or variable and
 * what is wrong ("--nnodes: \"1:2:3\" is not in \"MIN:MAX\" format"); cfg is left empty. */
int ctrun_cli_parse(int argc, char *const argv[], const char *const *env, ctrun_config_t *cfg,
                    ctrun_cli_action_t *action, ct_errbuf_t *eb);

/* Frees everything cfg owns. Safe to call twice and on a zeroed config. */
void ctrun_config_free(ctrun_config_t *cfg);

/* Writes the --help text (every flag with both spellings, its PET_ variable, default). */
void ctrun_cli_help(FILE *out);

/* Writes "ctrun <version>\n". */
void ctrun_cli_version(FILE *out);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_CLI_H */
