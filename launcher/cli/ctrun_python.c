/*
 * ctrun_python.c - the interpreter rules of ctrun_python.h: a few stat/access calls and one
 * glob per ctrun start, nothing cached.
 */
#include "ctrun_python.h"

#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* True when dir/name is an executable file; its path goes into buf. */
static bool ctrun_python__exec_in(const char *dir, const char *name, char *buf, size_t size)
{
    int n = snprintf(buf, size, "%s/%s", dir, name);
    return n > 0 && (size_t)n < size && access(buf, X_OK) == 0;
}

/* The environment ctrun was pip-installed into: self_exe is <prefix>/bin/<name> and pip's
 * record of the ctrun distribution is under <prefix>/lib. */
static bool ctrun_python__installed(const char *self_exe, char *buf, size_t size)
{
    if (self_exe == NULL || self_exe[0] != '/')
        return false;
    char bin[PATH_MAX];
    snprintf(bin, sizeof bin, "%s", self_exe);
    char *slash = strrchr(bin, '/');
    if (slash == NULL || slash == bin)
        return false;
    *slash = '\0';
    char prefix[PATH_MAX];
    snprintf(prefix, sizeof prefix, "%s", bin);
    slash = strrchr(prefix, '/');
    if (slash == NULL || strcmp(slash, "/bin") != 0)
        return false;
    *slash = '\0';
    static const char *const layouts[] = {"lib/python3*/site-packages/ctrun-*.dist-info",
                                          "lib/python3*/dist-packages/ctrun-*.dist-info"};
    bool recorded = false;
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0] && !recorded; i++) {
        char pattern[PATH_MAX + 64];
        int n = snprintf(pattern, sizeof pattern, "%s/%s", prefix[0] ? prefix : "", layouts[i]);
        if (n < 0 || (size_t)n >= sizeof pattern)
            return false;
        glob_t g;
        if (glob(pattern, GLOB_NOSORT | GLOB_ONLYDIR, NULL, &g) == 0)
            recorded = g.gl_pathc > 0;
        globfree(&g);
    }
    return recorded && (ctrun_python__exec_in(bin, "python3", buf, size) ||
                        ctrun_python__exec_in(bin, "python", buf, size));
}

int ctrun_python_choose(const char *given, const char *self_exe, const char *virtual_env,
                        const char *conda_prefix, char **out, ctrun_python_source_t *source)
{
    char buf[PATH_MAX + 16];
    const char *chosen = "python3";
    *source = CTRUN_PYTHON_PATH;
    char venv_bin[PATH_MAX], conda_bin[PATH_MAX];
    snprintf(venv_bin, sizeof venv_bin, "%s/bin", virtual_env ? virtual_env : "");
    snprintf(conda_bin, sizeof conda_bin, "%s/bin", conda_prefix ? conda_prefix : "");
    if (given != NULL) {
        chosen = given;
        *source = CTRUN_PYTHON_GIVEN;
    } else if (ctrun_python__installed(self_exe, buf, sizeof buf)) {
        chosen = buf;
        *source = CTRUN_PYTHON_INSTALLED;
    } else if (virtual_env != NULL && virtual_env[0] != '\0' &&
               ctrun_python__exec_in(venv_bin, "python", buf, sizeof buf)) {
        chosen = buf;
        *source = CTRUN_PYTHON_VENV;
    } else if (conda_prefix != NULL && conda_prefix[0] != '\0' &&
               ctrun_python__exec_in(conda_bin, "python", buf, sizeof buf)) {
        chosen = buf;
        *source = CTRUN_PYTHON_CONDA;
    }
    *out = strdup(chosen);
    return *out == NULL ? -ENOMEM : 0;
}

const char *ctrun_python_source_text(ctrun_python_source_t source)
{
    switch (source) {
    case CTRUN_PYTHON_GIVEN:
        return "given with --python, CTRUN_PYTHON or PYTHON_EXEC";
    case CTRUN_PYTHON_INSTALLED:
        return "the Python environment ctrun is installed in";
    case CTRUN_PYTHON_VENV:
        return "the active virtual environment, VIRTUAL_ENV";
    case CTRUN_PYTHON_CONDA:
        return "the active conda environment, CONDA_PREFIX";
    case CTRUN_PYTHON_PATH:
        break;
    }
    return "python3 from PATH";
}
