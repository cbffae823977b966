/*
 * ctrun_cmd.c - argv assembly: a fixed head (interpreter and flags, or the program) and the
 * script arguments, every element after argv[0] passed through the ${local_rank} macro (the
 * launch-style --local-rank=N is written with the number already in it).
 */
#include "ctrun_cmd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrun_template.h"

void ctrun_argv_free(char **argv)
{
    if (argv == NULL)
        return;
    for (char **a = argv; *a != NULL; a++)
        free(*a);
    free(argv);
}

const char *ctrun_cmd_entrypoint_name(const ctrun_config_t *cfg)
{
    return cfg->script;
}

int ctrun_cmd_argv(const ctrun_config_t *cfg, int local_rank, char ***argv_out)
{
    const char *head[5];
    size_t nhead = 0;
    if (cfg->use_python) {
        head[nhead++] = cfg->python;
        head[nhead++] = "-u";
        if (cfg->module && !cfg->run_path)
            head[nhead++] = "-m";
    }
    head[nhead++] = cfg->script;
    char lr_arg[64];
    if (cfg->local_rank_arg != NULL) {
        snprintf(lr_arg, sizeof lr_arg, "%s=%d", cfg->local_rank_arg, local_rank);
        head[nhead++] = lr_arg;
    }

    size_t total = nhead + cfg->nscript_args;
    char **argv = calloc(total + 1, sizeof *argv);
    if (argv == NULL)
        return -ENOMEM;
    char lr[16];
    snprintf(lr, sizeof lr, "%d", local_rank);
    const ctrun_template_var_t vars[] = {{"local_rank", lr}};
    for (size_t i = 0; i < total; i++) {
        const char *src = i < nhead ? head[i] : cfg->script_args[i - nhead];
        int rc = 0;
        if (i == 0)
            argv[i] = strdup(src);
        else
            rc = ctrun_template_substitute(src, vars, 1, &argv[i]);
        if (rc != 0 || argv[i] == NULL) {
            ctrun_argv_free(argv);
            return -ENOMEM;
        }
    }
    *argv_out = argv;
    return 0;
}
