/*
 * ctrun_main.c - the ctrun executable: parse the command line, answer --help and --version,
 * reject bad flags with one line and exit status 2.
 *
 * This build has no agent yet (rendezvous, spawning and supervision come with the store), so a
 * valid command line is not run: ctrun says so in one line and exits with EX_UNAVAILABLE (69)
 * rather than pretending to have run the job.
 */
#include <errno.h>
#include <stdio.h>

#include "ct_log.h"
#include "ctrun_cli.h"

/* sysexits.h's EX_UNAVAILABLE: distinct from every status a real job run can end with. */
#define CTRUN_EXIT_UNAVAILABLE 69

int main(int argc, char **argv)
{
    ct_errbuf_t eb = {{0}};
    if (ct_log_init("[ctrun]", &eb) != 0)
        ct_log_warn("%s", eb.msg);

    ctrun_config_t cfg;
    ctrun_cli_action_t action;
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
    fprintf(stderr,
            "ctrun: the launcher agent is not available in this build; %s was not "
            "started\n",
            cfg.script);
    ctrun_config_free(&cfg);
    return CTRUN_EXIT_UNAVAILABLE;
}
