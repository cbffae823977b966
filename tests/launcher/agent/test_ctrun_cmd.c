/*
 * test_ctrun_cmd.c - worker command lines: <python> -u [-m] script args for Python entry
 * points, the program itself otherwise, and ${local_rank} substitution in every argument
 * after argv[0] (docs/torchrun-compatibility.md §7 items 9–11).
 */
#include <stdlib.h>

#include "ct_test.h"
#include "ctrun_cmd.h"

static char **ct__argv(const char *const *args, int nargs, const char *const *env, int local_rank)
{
    char *argv[32];
    argv[0] = "ctrun";
    for (int i = 0; i < nargs; i++)
        argv[i + 1] = (char *)args[i];
    argv[nargs + 1] = NULL;
    ctrun_config_t cfg;
    ctrun_cli_action_t action;
    ct_errbuf_t eb = {{0}};
    int rc = ctrun_cli_parse(nargs + 1, argv, env, &cfg, &action, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
    char **out = NULL;
    CT_ASSERT_OK(ctrun_cmd_argv(&cfg, local_rank, &out));
    ctrun_config_free(&cfg);
    return out;
}

/* Joins argv with '|' for one comparison. */
static const char *ct__join(char **argv)
{
    static char buf[1024];
    buf[0] = '\0';
    for (char **a = argv; *a != NULL; a++) {
        strcat(buf, a == argv ? "" : "|");
        strcat(buf, *a);
    }
    ctrun_argv_free(argv);
    return buf;
}

static const char *const ct__env[] = {NULL};

static void test_python_and_direct(void)
{
    const char *a1[] = {"train.py", "--lr", "0.1"};
    CT_ASSERT_STR_EQ(ct__join(ct__argv(a1, 3, ct__env, 0)), "python3|-u|train.py|--lr|0.1");
    const char *a2[] = {"-m", "pkg.train", "x"};
    CT_ASSERT_STR_EQ(ct__join(ct__argv(a2, 3, ct__env, 0)), "python3|-u|-m|pkg.train|x");
    const char *a3[] = {"--no_python", "./fail.sh", "a", "b"};
    CT_ASSERT_STR_EQ(ct__join(ct__argv(a3, 4, ct__env, 1)), "./fail.sh|a|b");
    const char *a4[] = {"ctrain", "--epochs", "3"};
    CT_ASSERT_STR_EQ(ct__join(ct__argv(a4, 3, ct__env, 0)), "ctrain|--epochs|3");
    const char *a5[] = {"--run_path", "-m", "/abs/s", "z"};
    CT_ASSERT_STR_EQ(ct__join(ct__argv(a5, 4, ct__env, 0)), "python3|-u|/abs/s|z");
    /* The interpreter from the environment (PYTHON_EXEC, torchrun's variable). */
    const char *env[] = {"PYTHON_EXEC=/usr/bin/python3", NULL};
    CT_ASSERT_STR_EQ(ct__join(ct__argv(a1, 3, env, 0)), "/usr/bin/python3|-u|train.py|--lr|0.1");
}

static void test_local_rank_macro(void)
{
    const char *a[] = {"--no_python", "./w${local_rank}.sh", "${local_rank}",     "a${local_rank}b",
                       "$local_rank", "$$local_rank",        "--nproc_per_node=9"};
    CT_ASSERT_STR_EQ(ct__join(ct__argv(a, 7, ct__env, 3)),
                     "./w${local_rank}.sh|3|a3b|3|$local_rank|--nproc_per_node=9");
    const char *p[] = {"s.py", "--out=/tmp/r${local_rank}"};
    CT_ASSERT_STR_EQ(ct__join(ct__argv(p, 2, ct__env, 12)), "python3|-u|s.py|--out=/tmp/r12");
}

/* torch.distributed.launch's command line: --local-rank=N right after the script (or the
 * module), before the script's own arguments; none with --use_env. */
static void test_launch_local_rank_argument(void)
{
    const char *py[] = {"CTRUN_PYTHON=py", NULL};
    const char *a1[] = {
        "--launch_compat", "--nproc_per_node=4", "--master_port=29500", "main.py", "--lr", "1"};
    CT_ASSERT_STR_EQ(ct__join(ct__argv(a1, 6, py, 3)), "py|-u|main.py|--local-rank=3|--lr|1");
    const char *a2[] = {"--launch_compat", "--local_rank_arg=local_rank", "-m", "pkg.train", "x"};
    CT_ASSERT_STR_EQ(ct__join(ct__argv(a2, 5, py, 1)), "py|-u|-m|pkg.train|--local_rank=1|x");
    const char *a3[] = {"--launch_compat", "--use_env", "main.py", "x"};
    CT_ASSERT_STR_EQ(ct__join(ct__argv(a3, 4, py, 2)), "py|-u|main.py|x");
    const char *a4[] = {"--nproc_per_node=2", "main.py", "x"};
    CT_ASSERT_STR_EQ(ct__join(ct__argv(a4, 3, py, 1)), "py|-u|main.py|x");
}

int main(void)
{
    CT_RUN(test_python_and_direct);
    CT_RUN(test_local_rank_macro);
    CT_RUN(test_launch_local_rank_argument);
    return 0;
}
