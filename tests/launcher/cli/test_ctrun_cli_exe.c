/*
 * test_ctrun_cli_exe.c - the ctrun binary (argv[1]) from the outside: --help lists every
 * option in both spellings, --version, every kind of bad flag or value (command line and
 * environment) ends with exactly one line on stderr naming it and exit status 2, a valid
 * command line runs its job (and an unstartable script is reported at spawn time), the
 * manual page (argv[3]) documents every option in both spellings and every worker variable,
 * and a rendezvous endpoint that is not a store (an HTTP server, a silent peer) is named for
 * what it is in one line.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_child.h"
#include "ct_config.h"
#include "ct_test.h"
#include "foreign_peer.h"

static char *ct__ctrun;
static char *ct__fake_cuda;
static char *ct__man;

static const char *const ct__option_names[] = {
    "nnodes",
    "nproc_per_node",
    "rdzv_backend",
    "rdzv_endpoint",
    "rdzv_id",
    "rdzv_conf",
    "standalone",
    "node_rank",
    "master_addr",
    "master_port",
    "local_addr",
    "max_restarts",
    "monitor_interval",
    "start_method",
    "signals_to_handle",
    "grace_period",
    "watchdog_timeout",
    "restart_backoff",
    "progress_guard",
    "inject",
    "inject_seed",
    "event_log_handler",
    "role",
    "module",
    "no_python",
    "run_path",
    "python",
    "log_dir",
    "redirects",
    "tee",
    "local_ranks_filter",
    "logs_specs",
    "duplicate_stdout_filters",
    "duplicate_stderr_filters",
    "log_line_prefix_template",
    "virtual_local_rank",
    "numa_binding",
    "shutdown_timeout",
    "metrics_port",
    "metrics_addr",
    "launch_compat",
    "use_env",
    "local_rank_arg",
    "help",
    "version",
};
#define CT__NOPTIONS (sizeof ct__option_names / sizeof ct__option_names[0])

/* "--name" in both spellings into under and dash. */
static void ct__spellings(const char *name, char *under, char *dash, size_t size)
{
    snprintf(under, size, "--%s", name);
    snprintf(dash, size, "%s", under);
    for (char *p = dash + 2; *p; p++)
        *p = *p == '_' ? '-' : *p;
}

/* Runs ctrun with up to 8 arguments (NULL-terminated) in an environment made only of env. */
static void ct__run(ct_child_t *c, const char *const *env, const char *const *args)
{
    char *argv[16] = {ct__ctrun};
    int n = 1;
    for (; args[n - 1] != NULL; n++)
        argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    ct_child_opts_t opts = {.env = env, .clear_env = true};
    CT_ASSERT_OK(ct_child_run(c, argv, &opts, 30000));
}

static void test_help_lists_every_option(void)
{
    const char *const env[] = {NULL};
    static const char *const variants[][2] = {{"--help", NULL}, {"-h", NULL}};
    for (int v = 0; v < 2; v++) {
        ct_child_t c;
        ct__run(&c, env, variants[v]);
        CT_ASSERT_EQ(c.exit_code, 0);
        CT_ASSERT_STR_EQ(c.err, "");
        CT_ASSERT_STR_CONTAINS(c.out, "usage: ctrun [options] training_script");
        for (size_t i = 0; i < CT__NOPTIONS; i++) {
            char under[64], dash[64];
            ct__spellings(ct__option_names[i], under, dash, sizeof under);
            CT_ASSERT_MSG(strstr(c.out, under) != NULL, "%s missing from --help", under);
            CT_ASSERT_MSG(strstr(c.out, dash) != NULL, "%s missing from --help", dash);
        }
        static const char *const vars[] = {"PET_NNODES",
                                           "PET_NPROC_PER_NODE",
                                           "PET_STANDALONE",
                                           "PET_NO_PYTHON",
                                           "CTRUN_PYTHON",
                                           "PYTHON_EXEC",
                                           "TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
                                           "-r, --redirects",
                                           "-t, --tee",
                                           "-m, --module"};
        for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
            CT_ASSERT_STR_CONTAINS(c.out, vars[i]);
        /* every exit status of ctrun.1's EXIT STATUS, the no-progress guard's included */
        CT_ASSERT_STR_CONTAINS(c.out, "3 when --progress_guard stopped the restarts");
        ct_child_close(&c);
    }
}

static void test_version(void)
{
    const char *const env[] = {NULL};
    const char *const args[] = {"--version", NULL};
    ct_child_t c;
    ct__run(&c, env, args);
    CT_ASSERT_EQ(c.exit_code, 0);
    CT_ASSERT_STR_EQ(c.out, "ctrun " CT_VERSION "\n");
    CT_ASSERT_STR_EQ(c.err, "");
    ct_child_close(&c);
}

typedef struct ct__bad {
    const char *args[8];
    const char *env[3];
    const char *message; /* the whole stderr, without "ctrun: error: " and the newline */
} ct__bad_t;

static const ct__bad_t ct__bad_cases[] = {
    /* scanning */
    {{"--foo", "x", NULL}, {NULL}, "unrecognized option '--foo' (see ctrun --help)"},
    {{"-x", "x", NULL}, {NULL}, "unrecognized option '-x' (see ctrun --help)"},
    {{"-mq", "x", NULL}, {NULL}, "unrecognized option '-q' in '-mq' (see ctrun --help)"},
    {{"--m", "x", NULL},
     {NULL},
     "ambiguous option '--m' could match --master_addr, --master_port, --max_restarts, "
     "--monitor_interval, --module, --metrics_port, --metrics_addr"},
    {{"--nnodes", NULL}, {NULL}, "--nnodes: missing value"},
    {{"--nnodes", "--standalone", "x", NULL}, {NULL}, "--nnodes: missing value"},
    {{"-r", NULL}, {NULL}, "-r: missing value"},
    {{"--standalone=1", "x", NULL}, {NULL}, "--standalone takes no value (got '--standalone=1')"},
    {{"--no-python=0", "x", NULL}, {NULL}, "--no-python takes no value (got '--no-python=0')"},
    {{NULL},
     {NULL},
     "missing the training script (usage: ctrun [options] training_script "
     "[args...])"},
    {{"--nproc_per_node=2", NULL},
     {NULL},
     "missing the training script (usage: ctrun [options] "
     "training_script [args...])"},
    /* nodes and workers */
    {{"--nnodes=1:2:3", "x", NULL}, {NULL}, "--nnodes: \"1:2:3\" is not in \"MIN:MAX\" format"},
    {{"--nnodes", "2:1", "x", NULL}, {NULL}, "--nnodes: \"2:1\" needs 0 < MIN <= MAX"},
    {{"--nnodes", "0", "x", NULL}, {NULL}, "--nnodes: \"0\" needs 0 < MIN <= MAX"},
    {{"--nnodes", "two", "x", NULL}, {NULL}, "--nnodes: \"two\" is not an integer"},
    {{"--nproc-per-node=foo", "x", NULL},
     {NULL},
     "--nproc-per-node: unsupported value \"foo\" (expected a positive integer, auto, cpu or gpu)"},
    {{"--nproc_per_node", "0", "x", NULL},
     {NULL},
     "--nproc_per_node: 0 is out of range (expected 1..65536)"},
    {{"--nproc_per_node", "gpu", "x", NULL},
     {"CTRUN_LIBCUDA=/nonexistent/libcuda.so.1", NULL},
     "--nproc_per_node: \"gpu\" needs a CUDA GPU, but Cuda is not available "
     "(/nonexistent/libcuda.so.1: cannot open shared object file: No such file or directory)"},
    /* rendezvous */
    {{"--rdzv_backend", "etcd", "x", NULL},
     {NULL},
     "--rdzv_backend: \"etcd\" (etcd's v2 API) is not supported by ctrun (expected static, c10d "
     "or etcd-v3)"},
    {{"--rdzv-backend", "zk", "x", NULL},
     {NULL},
     "--rdzv-backend: unknown backend \"zk\" (expected static, c10d or etcd-v3)"},
    {{"--rdzv_conf", "protocol=ftp", "x", NULL},
     {NULL},
     "--rdzv_conf: protocol: \"ftp\" (expected http or https)"},
    {{"--rdzv_conf", "cacert=/etc/hostname", "x", NULL},
     {NULL},
     "--rdzv_conf: cacert: needs protocol=https"},
    {{"--rdzv_conf", "protocol=https,cacert=/nonexistent", "x", NULL},
     {NULL},
     "--rdzv_conf: cacert: cannot read /nonexistent: No such file or directory"},
    {{"--rdzv_conf", "protocol=https,cert=/etc/hostname", "x", NULL},
     {NULL},
     "--rdzv_conf: cert: needs key too"},
    {{"--rdzv_conf", "user=root", "x", NULL}, {NULL}, "--rdzv_conf: user: needs password_file too"},
    {{"--rdzv_conf", "password_file=/nonexistent,user=u", "x", NULL},
     {NULL},
     "--rdzv_conf: password_file: cannot read /nonexistent: No such file or directory"},
    {{"--rdzv_backend", "etcd-v3", "x", NULL},
     {NULL},
     "--rdzv_backend=etcd-v3 needs --rdzv_endpoint=HOST:PORT[,HOST:PORT...] (etcd's client "
     "URLs)"},
    {{"--rdzv_backend", "etcd-v3", "--rdzv_endpoint", "e1:2379,e2:99999", "x", NULL},
     {NULL},
     "--rdzv_endpoint: address \"e2:99999\": port 99999 is out of range (expected 1..65535)"},
    {{"--rdzv_endpoint", "host", "x", NULL},
     {NULL},
     "--rdzv_endpoint: address \"host\": missing port (expected host:port)"},
    {{"--rdzv_endpoint", "h:99999", "--rdzv_backend=c10d", "x", NULL},
     {NULL},
     "--rdzv_endpoint: address \"h:99999\": port 99999 is out of range (expected 0..65535)"},
    {{"--rdzv_endpoint", "1::2::3:80", "x", NULL},
     {NULL},
     "--rdzv_endpoint: address \"1::2::3:80\": write IPv6 addresses with a port as [addr]:port"},
    {{"--rdzv_endpoint=h:0", "--nnodes=2", "x", NULL},
     {NULL},
     "--rdzv_endpoint: address \"h:0\": port 0 is not allowed here (expected 1..65535)"},
    {{"--rdzv_id", "a/b", "x", NULL},
     {NULL},
     "--rdzv_id: \"a/b\" contains '/' (it names log folders)"},
    {{"--rdzv_conf", "a=1,b", "x", NULL}, {NULL}, "--rdzv_conf: option \"b\" must have a value"},
    {{"--rdzv_conf=read_timeout=-5", "x", NULL},
     {NULL},
     "--rdzv_conf: read_timeout: -5 is out of range (expected 0.001..1e+09)"},
    {{"--standalone", "--nnodes=3", "x", NULL},
     {NULL},
     "--standalone runs a single-node job, but --nnodes asks for at least 3 nodes"},
    {{"--node_rank", "2", "--nnodes=2", "x", NULL},
     {NULL},
     "--node_rank: 2 is out of range for --nnodes=2 (expected 0..1)"},
    {{"--node-rank=-1", "x", NULL},
     {NULL},
     "--node-rank: -1 is out of range (expected 0..2147483647)"},
    {{"--master_addr", "1.2.3", "x", NULL},
     {NULL},
     "--master_addr: \"1.2.3\" is not a valid IPv4 address"},
    {{"--master_addr", "bad host", "x", NULL},
     {NULL},
     "--master_addr: host \"bad host\" contains ' ', which is not allowed in a host name"},
    {{"--master_port", "70000", "x", NULL},
     {NULL},
     "--master_port: 70000 is out of range (expected 0..65535)"},
    {{"--master_port", "0", "--nnodes=2", "x", NULL},
     {NULL},
     "--master_port: port 0 (a kernel-chosen port) only works with --nnodes=1"},
    {{"--local_addr", "[zz::1]", "x", NULL},
     {NULL},
     "--local_addr: \"zz::1\" is not a valid IPv6 address"},
    /* supervision */
    {{"--max_restarts", "-1", "x", NULL},
     {NULL},
     "--max_restarts: -1 is out of range (expected 0..2147483647)"},
    {{"--max-restarts", "3.5", "x", NULL}, {NULL}, "--max-restarts: \"3.5\" is not an integer"},
    {{"--monitor_interval", "fast", "x", NULL},
     {NULL},
     "--monitor_interval: \"fast\" is not a number"},
    {{"--start_method", "thread", "x", NULL},
     {NULL},
     "--start_method: invalid choice \"thread\" (choose from spawn, fork, forkserver)"},
    {{"--signals_to_handle", "SIGTERM,SIGFOO", "x", NULL},
     {NULL},
     "--signals_to_handle: \"SIGFOO\" is not a signal name"},
    {{"--signals-to-handle", "SIGKILL", "x", NULL},
     {NULL},
     "--signals-to-handle: SIGKILL cannot be handled and forwarded"},
    {{"--grace_period", "-1", "x", NULL},
     {NULL},
     "--grace_period: -1 is out of range (expected 0..1e+09)"},
    {{"--watchdog_timeout", "soon", "x", NULL},
     {NULL},
     "--watchdog_timeout: \"soon\" is not a number"},
    {{"--restart_backoff", "-2", "x", NULL},
     {NULL},
     "--restart_backoff: -2 is out of range (expected 0..1e+09)"},
    {{"--progress_guard", "x", "x", NULL}, {NULL}, "--progress_guard: \"x\" is not an integer"},
    {{"--inject", "kill:rank=1:at=step=5;kill:rank=x:at=step=5", "x", NULL},
     {NULL},
     "--inject: spec 2 \"kill:rank=x:at=step=5\": rank (a number or any): \"x\" is not an "
     "integer"},
    {{"--inject", "explode:rank=1:at=step=5", "x", NULL},
     {NULL},
     "--inject: spec 1 \"explode:rank=1:at=step=5\": unknown fault \"explode\" (expected "
     "kill, hang, torn_ckpt or kill_agent)"},
    {{"--inject", "kill:rank=1", "x", NULL},
     {NULL},
     "--inject: spec 1 \"kill:rank=1\": needs a trigger: at=step=N, at=time=T or every=T"},
    {{"--inject", "kill_agent:node=1:at=step=3", "x", NULL},
     {NULL},
     "--inject: spec 1 \"kill_agent:node=1:at=step=3\": needs at=time=T"},
    /* specs that could never fire in this job */
    {{"--inject", "kill:rank=5:at=time=1s", "x", NULL},
     {NULL},
     "--inject: spec 1 \"kill:rank=5:at=time=1s\": rank 5 does not exist: the job has 1 rank "
     "(--nproc_per_node 1), so it could never fire"},
    {{"--nproc_per_node=2", "--inject", "hang:rank=any:every=1s;torn_ckpt:at=step=1:rank=2", "x",
      NULL},
     {NULL},
     "--inject: spec 2 \"torn_ckpt:at=step=1:rank=2\": rank 2 does not exist: the job has 2 "
     "ranks (--nproc_per_node 2), so it could never fire"},
    {{"--nnodes=1:2", "--inject", "kill_agent:node=2:at=time=1s", "x", NULL},
     {NULL},
     "--inject: spec 1 \"kill_agent:node=2:at=time=1s\": node 2 does not exist: the job has at "
     "most 2 nodes (--nnodes), so it could never fire"},
    {{"--inject", "kill_agent:node=7:at=time=1s", "x", NULL},
     {NULL},
     "--inject: spec 1 \"kill_agent:node=7:at=time=1s\": node 7 does not exist: the job has at "
     "most 1 node (--nnodes), so it could never fire"},
    {{"--inject_seed", "-1", "x", NULL},
     {NULL},
     "--inject_seed: -1 is out of range (expected 0..9223372036854775807)"},
    {{"--event_log_handler", "file", "x", NULL},
     {NULL},
     "--event_log_handler: invalid choice \"file\" (choose from null, console, "
     "dynamic_rendezvous)"},
    {{"--shutdown-timeout", "1.5", "x", NULL},
     {NULL},
     "--shutdown-timeout: \"1.5\" is not an integer"},
    {{"x", NULL},
     {"PET_SHUTDOWN_TIMEOUT=-3", NULL},
     "PET_SHUTDOWN_TIMEOUT: must be non-negative, got -3"},
    {{"--metrics_port", "65536", "x", NULL},
     {NULL},
     "--metrics_port: 65536 is out of range (expected 0..65535)"},
    {{"x", NULL},
     {"CTRUN_METRICS_ADDR=no such host!", NULL},
     "CTRUN_METRICS_ADDR: host \"no such host!\" contains ' ', which is not allowed in a host "
     "name"},
    /* workers and output */
    {{"--no_python", "-m", "x", NULL}, {NULL}, "--no_python and --module cannot be used together"},
    {{"--python", "", "x.py", NULL}, {NULL}, "--python: empty interpreter path"},
    {{"--redirects", "4", "x", NULL},
     {NULL},
     "--redirects: \"4\" is not 0..3 or a list like 0:1,1:2 (a one-digit local rank, ':', then "
     "0 none, 1 stdout, 2 stderr, 3 both)"},
    {{"-t", "10:1", "x", NULL},
     {NULL},
     "-t: \"10:1\" is not 0..3 or a list like 0:1,1:2 (a one-digit local rank, ':', then 0 "
     "none, 1 stdout, 2 stderr, 3 both)"},
    {{"--local_ranks_filter", "0,a", "x", NULL},
     {NULL},
     "--local_ranks_filter: \"0,a\" is not a comma-separated list of local ranks (e.g. 0,1,2)"},
    {{"--local_ranks_filter", "5", "x", NULL},
     {NULL},
     "--local_ranks_filter: local rank 5 does not exist on this node (--nproc_per_node 1: local "
     "ranks 0..0)"},
    {{"x", NULL},
     {"PET_NPROC_PER_NODE=2", "PET_LOCAL_RANKS_FILTER=1,2", NULL},
     "PET_LOCAL_RANKS_FILTER: local rank 2 does not exist on this node (--nproc_per_node 2: "
     "local ranks 0..1)"},
    {{"x", NULL},
     {"CTRUN_CONSOLE_BUFFER=1K", NULL},
     "CTRUN_CONSOLE_BUFFER: 1024 bytes is below the minimum of 16K"},
    {{"x", NULL},
     {"CTRUN_CONSOLE_BUFFER=lots", NULL},
     "CTRUN_CONSOLE_BUFFER: \"lots\" is not a size (expected e.g. 4096, 8K, 64M)"},
    {{"--logs_specs", "mine", "x", NULL},
     {NULL},
     "--logs_specs: \"mine\" names a Python plugin (a torchrun.logs_specs entry point) that "
     "ctrun cannot load; ctrun writes torchrun's default layout, which --log_dir, --redirects, "
     "--tee, --local_ranks_filter, --duplicate_stdout_filters and --log_line_prefix_template "
     "adjust"},
    {{"--numa-binding", "node", "x", NULL},
     {"CTRUN_LIBCUDA=/nonexistent/libcuda.so.1", NULL},
     "--numa-binding node: no CUDA device: /nonexistent/libcuda.so.1: cannot open shared object "
     "file: No such file or directory"},
    {{"--virtual-local-rank", "--nproc_per_node", "2", "x", NULL},
     {"CUDA_VISIBLE_DEVICES=0", NULL},
     "--virtual_local_rank: local rank 1 exceeds the GPUs in CUDA_VISIBLE_DEVICES=0 "
     "(--nproc_per_node 2)"},
    {{"--use-env", "x", NULL},
     {NULL},
     "--use-env is an option of torch.distributed.launch's command line: run ctrun-launch, or "
     "give --launch_compat first (ctrun itself always passes the local rank as LOCAL_RANK)"},
    {{"--launch_compat", "--no-python", "x", NULL},
     {NULL},
     "when using the '--no-python' flag, you must also set the '--use-env' flag"},
    /* the same checks reach values from the environment, named by their variable */
    {{"x", NULL}, {"PET_NNODES=1:2:3", NULL}, "PET_NNODES: \"1:2:3\" is not in \"MIN:MAX\" format"},
    {{"x", NULL},
     {"PET_NPROC_PER_NODE=lots", NULL},
     "PET_NPROC_PER_NODE: unsupported value \"lots\" (expected a positive integer, auto, cpu or "
     "gpu)"},
    {{"x", NULL},
     {"PET_MAX_RESTARTS=", NULL},
     "PET_MAX_RESTARTS: empty value (expected an integer)"},
    {{"x", NULL}, {"PET_STANDALONE=yes", NULL}, "PET_STANDALONE: \"yes\" is not an integer"},
    {{"x", NULL}, {"PET_NO_PYTHON=true", NULL}, "PET_NO_PYTHON: \"true\" is not an integer"},
    {{"x", NULL},
     {"PET_TEE=7", NULL},
     "PET_TEE: \"7\" is not 0..3 or a list like 0:1,1:2 (a one-digit local rank, ':', then 0 "
     "none, 1 stdout, 2 stderr, 3 both)"},
    {{"x", NULL}, {"PET_MASTER_PORT=http", NULL}, "PET_MASTER_PORT: \"http\" is not an integer"},
    {{"x", NULL},
     {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT=x", NULL},
     "TORCH_ELASTIC_SHUTDOWN_TIMEOUT: \"x\" is not a number"},
    {{"x.py", NULL}, {"PYTHON_EXEC=", NULL}, "PYTHON_EXEC: empty interpreter path"},
};

static void test_bad_values_exit_2_with_one_line(void)
{
    for (size_t i = 0; i < sizeof ct__bad_cases / sizeof ct__bad_cases[0]; i++) {
        const ct__bad_t *b = &ct__bad_cases[i];
        ct_child_t c;
        ct__run(&c, b->env, b->args);
        char want[1024];
        snprintf(want, sizeof want, "ctrun: error: %s\n", b->message);
        CT_ASSERT_MSG(c.exit_code == 2, "case %zu (%s): exit %d, stderr %s", i,
                      b->args[0] ? b->args[0] : "(none)", c.exit_code, c.err);
        CT_ASSERT_MSG(strcmp(c.err, want) == 0, "case %zu:\n got: %s want: %s", i, c.err, want);
        CT_ASSERT_STR_EQ(c.out, "");
        ct_child_close(&c);
    }
}

static void test_valid_command_runs(void)
{
    const char *const env[] = {"PET_NPROC_PER_NODE=2", NULL};
    const char *const args[] = {"--nnodes=1",
                                "--rdzv-conf=join_timeout=5",
                                "--master_port=0",
                                "--log_dir=/dev/null",
                                "--no_python",
                                "sh",
                                "-c",
                                "echo $LOCAL_RANK/$LOCAL_WORLD_SIZE",
                                NULL};
    ct_child_t c;
    ct__run(&c, env, args);
    CT_ASSERT_MSG(c.exit_code == 0, "exit %d: %s", c.exit_code, c.err);
    CT_ASSERT(strcmp(c.out, "0/2\n1/2\n") == 0 || strcmp(c.out, "1/2\n0/2\n") == 0);
    /* Two workers and no OMP_NUM_THREADS: torchrun's notice, and nothing else. */
    CT_ASSERT_STR_CONTAINS(c.err, "Setting OMP_NUM_THREADS environment variable");
    CT_ASSERT_STR_NOT_CONTAINS(c.err, "error");
    ct_child_close(&c);

    /* Remarks about accepted values go to the log before the job runs. */
    const char *const args2[] = {
        "--rdzv_conf=foo=1", "--master_port=0", "--log_dir=/dev/null", "--no_python", "true", NULL};
    ct__run(&c, env, args2);
    CT_ASSERT_EQ(c.exit_code, 0);
    CT_ASSERT_STR_CONTAINS(c.err, "--rdzv_conf: unknown key \"foo\" is ignored\n");
    ct_child_close(&c);

    /* A script that cannot be started: one line with the reason, then the report, exit 1. */
    const char *const args3[] = {"--master_port=0", "--log_dir=/dev/null", "--no_python",
                                 "./no-such-worker", NULL};
    ct__run(&c, env, args3);
    CT_ASSERT_EQ(c.exit_code, 1);
    CT_ASSERT_STR_CONTAINS(c.err, "cannot start local rank 0: ./no-such-worker: No such file or "
                                  "directory\n");
    CT_ASSERT_STR_CONTAINS(c.err, "./no-such-worker FAILED\n");
    ct_child_close(&c);

    /* A directory given as the script: said so, not "Permission denied". */
    const char *const args4[] = {"--master_port=0", "--log_dir=/dev/null", "--no_python", "/tmp",
                                 NULL};
    ct__run(&c, env, args4);
    CT_ASSERT_EQ(c.exit_code, 1);
    CT_ASSERT_STR_CONTAINS(c.err, "cannot start local rank 0: /tmp: Is a directory\n");
    CT_ASSERT_STR_NOT_CONTAINS(c.err, "Permission denied");
    ct_child_close(&c);
}

static void test_gpu_counts_through_the_binary(void)
{
    char lib[512], devices[] = "CT_FAKE_CUDA_DEVICES=2";
    snprintf(lib, sizeof lib, "CTRUN_LIBCUDA=%s", ct__fake_cuda);
    const char *const env[] = {lib, devices, NULL};
    const char *const args[] = {"--nproc_per_node=gpu",
                                "--master_port=0",
                                "--log_dir=/dev/null",
                                "--no_python",
                                "sh",
                                "-c",
                                "echo $LOCAL_WORLD_SIZE",
                                NULL};
    ct_child_t c;
    ct__run(&c, env, args);
    CT_ASSERT_MSG(c.exit_code == 0, "exit %d: %s", c.exit_code, c.err);
    CT_ASSERT_STR_EQ(c.out, "2\n2\n");
    ct_child_close(&c);
    const char *const env0[] = {lib, "CT_FAKE_CUDA_DEVICES=0", NULL};
    ct__run(&c, env0, args);
    CT_ASSERT_EQ(c.exit_code, 2);
    CT_ASSERT_STR_EQ(c.err, "ctrun: error: --nproc_per_node: \"gpu\" needs a CUDA GPU, but Cuda "
                            "is not available (the CUDA driver reports no device)\n");
    ct_child_close(&c);
    /* auto without a GPU: one worker per CPU. */
    const char *const args_auto[] = {"--nproc_per_node=auto",
                                     "--master_port=0",
                                     "--log_dir=/dev/null",
                                     "--no_python",
                                     "true",
                                     NULL};
    ct__run(&c, env0, args_auto);
    CT_ASSERT_EQ(c.exit_code, 0);
    ct_child_close(&c);
}

static void test_man_page_documents_everything(void)
{
    FILE *f = fopen(ct__man, "r");
    CT_ASSERT(f != NULL);
    static char raw[200000], text[200000];
    size_t n = fread(raw, 1, sizeof raw - 1, f);
    fclose(f);
    raw[n] = '\0';
    /* roff writes '-' as "\-": drop the escape to search the plain spelling. */
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (raw[i] == '\\' && raw[i + 1] == '-')
            continue;
        text[k++] = raw[i];
    }
    text[k] = '\0';
    CT_ASSERT_STR_CONTAINS(text, ".TH CTRUN 1");
    for (size_t i = 0; i < CT__NOPTIONS; i++) {
        char under[64], dash[64];
        ct__spellings(ct__option_names[i], under, dash, sizeof under);
        CT_ASSERT_MSG(strstr(text, under) != NULL, "%s missing from ctrun.1", under);
        CT_ASSERT_MSG(strstr(text, dash) != NULL, "%s missing from ctrun.1", dash);
    }
    static const char *const words[] = {
        "PET_NNODES",
        "PET_NPROC_PER_NODE",
        "PET_RDZV_BACKEND",
        "PET_RDZV_ENDPOINT",
        "PET_RDZV_ID",
        "PET_RDZV_CONF",
        "PET_STANDALONE",
        "PET_MAX_RESTARTS",
        "PET_MONITOR_INTERVAL",
        "PET_START_METHOD",
        "PET_EVENT_LOG_HANDLER",
        "PET_ROLE",
        "PET_MODULE",
        "PET_NO_PYTHON",
        "PET_RUN_PATH",
        "PET_LOG_DIR",
        "PET_REDIRECTS",
        "PET_TEE",
        "PET_LOCAL_RANKS_FILTER",
        "PET_NODE_RANK",
        "PET_MASTER_ADDR",
        "PET_MASTER_PORT",
        "PET_LOCAL_ADDR",
        "PET_SIGNALS_TO_HANDLE",
        "CTRUN_PYTHON",
        "PYTHON_EXEC",
        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
        "CTRUN_WATCHDOG_TIMEOUT",
        "CTRUN_LIBCUDA",
        "CTRUN_CONSOLE_BUFFER",
        "PET_DUPLICATE_STDOUT_FILTERS",
        "PET_DUPLICATE_STDERR_FILTERS",
        "PET_LOG_LINE_PREFIX_TEMPLATE",
        "PET_VIRTUAL_LOCAL_RANK",
        "PET_NUMA_BINDING",
        "PET_SHUTDOWN_TIMEOUT",
        "CTRUN_LOCAL_RANK_ARG",
        "CTRUN_METRICS_PORT",
        "CTRUN_METRICS_ADDR",
        "TORCHELASTIC_HEALTH_CHECK_PORT",
        "/healthz",
        "ctrun_restarts_by_cause_total",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "ctrun-launch",
        "ChildFailedError",
        "HIP_VISIBLE_DEVICES",
        "CUDA_VISIBLE_DEVICES",
        "filtered_stdout.log",
        /* every variable ctrun_env.h sets */
        "LOCAL_RANK",
        "GROUP_RANK",
        "ROLE_RANK",
        "ROLE_NAME",
        "LOCAL_WORLD_SIZE",
        "GROUP_WORLD_SIZE",
        "ROLE_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHELASTIC_USE_AGENT_STORE",
        "TORCHELASTIC_RESTART_COUNT",
        "TORCHELASTIC_MAX_RESTARTS",
        "TORCHELASTIC_RUN_ID",
        "TORCHELASTIC_ERROR_FILE",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "NCCL_ASYNC_ERROR_HANDLING",
        "OMP_NUM_THREADS",
        "TORCHELASTIC_SIGNALS_TO_HANDLE",
        "CTRUN_HEARTBEAT_FD",
        /* the sections ctrun.1 must keep */
        ".SH EXIT STATUS",
        ".SH EXAMPLES",
        ".SH DIFFERENCES FROM TORCHRUN",
        "128",
    };
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        CT_ASSERT_MSG(strstr(text, words[i]) != NULL, "%s missing from ctrun.1", words[i]);
}

/* Counts the lines of text that contain needle. */
static int ct__lines_with(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; p != NULL && *p != '\0';) {
        const char *nl = strchr(p, '\n');
        size_t len = nl != NULL ? (size_t)(nl - p) : strlen(p);
        const char *hit = strstr(p, needle);
        if (hit != NULL && hit < p + len)
            n++;
        p = nl != NULL ? nl + 1 : NULL;
    }
    return n;
}

/*
 * A non-hosting agent pointed at something that is not a store says what is there, in one
 * line, and exits 1 at once or at the handshake deadline (read_timeout), not after the
 * rendezvous timeout: an HTTP server (through --master_addr, and through --rdzv_endpoint), a
 * peer that accepts and never answers; and when the rendezvous times out first (read_timeout
 * longer than timeout), the timeout says it was waiting for an answer.
 */
static void test_endpoint_not_a_store(void)
{
    static const char hs[] = ": it accepted the connection but never answered the store handshake";
    static const struct {
        foreign_kind_t kind;
        bool endpoint; /* --rdzv_endpoint rather than --master_addr/--master_port */
        const char *conf;
        const char *says, *also;
    } cases[] = {
        {FOREIGN_HTTP, false, "timeout=30,read_timeout=2",
         "is not a ctrun/PyTorch store (it answered like an HTTP server: \"HTTP/1.1 400 Bad "
         "Request\")",
         NULL},
        {FOREIGN_HTTP, true, "join_timeout=30,read_timeout=2,is_host=false",
         "is not a ctrun/PyTorch store (it answered like an HTTP server", NULL},
        {FOREIGN_SILENT, false, "timeout=30,read_timeout=2", " in 2.0 s", hs},
        {FOREIGN_SILENT, false, "timeout=2,read_timeout=60", " in ",
         "rendezvous of attempt 0 timed out after 2 s: no answer from"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        foreign_peer_t fp;
        CT_ASSERT_OK(foreign_peer_start(&fp, cases[i].kind));
        char port[32], endpoint[64], conf[96], where[64], want[320];
        snprintf(port, sizeof port, "--master_port=%d", fp.port);
        snprintf(endpoint, sizeof endpoint, "--rdzv_endpoint=127.0.0.1:%d", fp.port);
        snprintf(conf, sizeof conf, "--rdzv_conf=%s", cases[i].conf);
        snprintf(where, sizeof where, "127.0.0.1:%d", fp.port);
        if (cases[i].kind == FOREIGN_SILENT)
            snprintf(want, sizeof want, "no answer from %s%s", where, cases[i].says);
        else
            snprintf(want, sizeof want, "%s %s", where, cases[i].says);
        const char *const with_addr[] = {"--nnodes=2",
                                         "--node_rank=1",
                                         "--master_addr=127.0.0.1",
                                         port,
                                         conf,
                                         "--log_dir=/dev/null",
                                         "--no_python",
                                         "true",
                                         NULL};
        const char *const with_endpoint[] = {
            "--nnodes=2",          "--rdzv_backend=c10d", endpoint, conf,
            "--log_dir=/dev/null", "--no_python",         "true",   NULL};
        const char *const env[] = {NULL};
        ct_child_t c;
        ct__run(&c, env, cases[i].endpoint ? with_endpoint : with_addr);
        CT_ASSERT_MSG(c.exit_code == 1, "case %zu: exit %d, stderr: %s", i, c.exit_code, c.err);
        CT_ASSERT_MSG(strstr(c.err, want) != NULL, "case %zu: stderr: %s\nwant: %s", i, c.err,
                      want);
        if (cases[i].also != NULL)
            CT_ASSERT_STR_CONTAINS(c.err, cases[i].also);
        CT_ASSERT_MSG(ct__lines_with(c.err, "error") == 1, "case %zu: stderr: %s", i, c.err);
        CT_ASSERT_MSG(c.elapsed_ms < 10000, "case %zu took %lld ms", i, (long long)c.elapsed_ms);
        ct_child_close(&c);
        foreign_peer_stop(&fp);
    }
}

int main(int argc, char **argv)
{
    if (argc < 4)
        CT_SKIP("usage: test_ctrun_cli_exe CTRUN FAKE_LIBCUDA CTRUN_1");
    ct__ctrun = argv[1];
    ct__fake_cuda = argv[2];
    ct__man = argv[3];
    CT_RUN(test_help_lists_every_option);
    CT_RUN(test_version);
    CT_RUN(test_bad_values_exit_2_with_one_line);
    CT_RUN(test_valid_command_runs);
    CT_RUN(test_gpu_counts_through_the_binary);
    CT_RUN(test_man_page_documents_everything);
    CT_RUN(test_endpoint_not_a_store);
    return 0;
}
