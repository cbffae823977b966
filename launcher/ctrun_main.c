/*
 * ctrun_main.c - the ctrun executable: parse the command line (answer --help and --version,
 * reject a bad flag or value with one line and exit status 2), set the log level, and run the
 * agent (ctrun_agent.h), whose result is the exit status.
 *
 * Built twice: as ctrun, and as ctrun-launch (CTRUN_MAIN_LAUNCH=1), which takes
 * torch.distributed.launch's command line: the same as `ctrun --launch_compat ARGS`, so
 * `python -m torch.distributed.launch ARGS` becomes `ctrun-launch ARGS`.
 *
 * Log level: CT_LOG_LEVEL when set; otherwise torchrun's LOGLEVEL (Python level names), so that
 * LOGLEVEL=INFO shows the same INFO blocks as torchrun; otherwise warnings and errors only, as
 * torchrun prints by default.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

#include "ct_log.h"
#include "ctrun_agent.h"
#include "ctrun_cli.h"

#ifndef CTRUN_MAIN_LAUNCH
#define CTRUN_MAIN_LAUNCH 0
#endif

static void ctrun_main__log_level(void)
{
    if (getenv("CT_LOG_LEVEL") != NULL)
        return; /* ct_log_init read it */
    const char *py = getenv("LOGLEVEL");
    ct_log_level_t level = CT_LOG_WARN;
    if (py != NULL) {
        if (strcasecmp(py, "CRITICAL") == 0 || strcasecmp(py, "FATAL") == 0)
            level = CT_LOG_ERROR;
        else if (ct_log_parse_level(py, &level, NULL) != 0)
            level = CT_LOG_WARN;
    }
    ct_log_set_level(level);
}

/* A descriptor 0-2 that ctrun was started without would be the first one it opens (a worker's
 * pipe), which libuv refuses to close: each gets /dev/null, close-on-exec, so workers still
 * start without it as they would have. */
static void ctrun_main__std_fds(void)
{
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
            continue;
        int n = open("/dev/null", (fd == 0 ? O_RDONLY : O_WRONLY) | O_CLOEXEC);
        if (n >= 0 && n != fd) {
            dup3(n, fd, O_CLOEXEC);
            close(n);
        }
    }
}

int main(int argc, char **argv)
{
    ct_errbuf_t eb = {{0}};
    ctrun_main__std_fds();
    if (ct_log_init("[ctrun]", &eb) != 0)
        ct_log_warn("%s", eb.msg);
    ctrun_main__log_level();

    ctrun_config_t cfg;
    ctrun_cli_action_t action;
#if CTRUN_MAIN_LAUNCH
    /* ctrun-launch ARGS = ctrun --launch_compat ARGS */
    char **largv = calloc((size_t)argc + 2, sizeof *largv);
    if (largv == NULL) {
        fprintf(stderr, "ctrun-launch: error: out of memory\n");
        return 1;
    }
    largv[0] = argv[0];
    largv[1] = "--launch_compat";
    for (int i = 1; i < argc; i++)
        largv[i + 1] = argv[i];
    argc++;
    argv = largv;
#endif
    int rc = ctrun_cli_parse(argc, argv, NULL, &cfg, &action, &eb);
    if (rc != 0) {
        fprintf(stderr, "ctrun: error: %s\n", eb.msg);
        return rc == -ENOMEM ? 1 : CTRUN_EXIT_USAGE;
    }
    if (action == CTRUN_CLI_HELP) {
        ctrun_cli_help(stdout);
        return 0;
    }
    if (action == CTRUN_CLI_VERSION) {
        ctrun_cli_version(stdout);
        return 0;
    }
    for (size_t i = 0; i < cfg.nwarnings; i++)
        ct_log_warn("%s", cfg.warnings[i]);
    int exit_code = CTRUN_EXIT_FAILED;
    if (ctrun_agent_run(&cfg, &exit_code, &eb) != 0) {
        fprintf(stderr, "ctrun: error: %s\n", eb.msg);
        exit_code = CTRUN_EXIT_FAILED;
    }
    ctrun_config_free(&cfg);
#if CTRUN_MAIN_LAUNCH
    free(largv);
#endif
    return exit_code;
}
