/*
 * ctrun_cmd.h - the command line each worker is started with.
 *
 * A script run under Python (a .py file, -m, or --run_path; see ctrun_config_t.use_python)
 * becomes `<python> -u [-m] script args...`; anything else is `script args...`, executed
 * directly (PATH lookup as execvp does). In every argument after argv[0], ${local_rank} and
 * $local_rank become the worker's local rank, with string.Template.safe_substitute rules
 * ("$$" -> "$"), as torchrun's macro substitution does. With torch.distributed.launch's
 * command line (--launch_compat, ctrun-launch) and no --use_env, `--local-rank=N` (or
 * `--local_rank=N`) comes right after the script, before its own arguments, as launch puts it.
 *
 * Deliberately not here: the environment (ctrun_env.h) and spawning.
 */
#ifndef CTRUN_CMD_H
#define CTRUN_CMD_H

#include "ctrun_cli.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Builds the NULL-terminated argv of local rank local_rank; argv[0] is the program to exec.
 * Free with ctrun_argv_free. Returns 0 or -ENOMEM. */
int ctrun_cmd_argv(const ctrun_config_t *cfg, int local_rank, char ***argv_out);

/* Frees an argv (or envp) built by this module or ctrun_env.h. NULL is fine. */
void ctrun_argv_free(char **argv);

/* The name the failure report's title and log lines use: the script or module as given
 * (torchrun shows the script for Python workers and the binary as typed otherwise). */
const char *ctrun_cmd_entrypoint_name(const ctrun_config_t *cfg);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_CMD_H */
