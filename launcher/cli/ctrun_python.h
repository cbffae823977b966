/*
 * ctrun_python.h - which Python interpreter runs .py scripts and -m modules: the one torchrun
 * would use. torchrun runs its workers with PYTHON_EXEC, else its own sys.executable, so
 * /opt/venv/bin/torchrun uses that environment without activating it; ctrun, a native program,
 * finds the same interpreter this way:
 *
 *   1. --python, CTRUN_PYTHON or PYTHON_EXEC (the caller passes the first one given);
 *   2. the Python of the environment ctrun itself was installed into with pip: ctrun's own
 *      executable lies in <prefix>/bin, pip's record of the ctrun package lies in
 *      <prefix>/lib/python3.X/site-packages (or dist-packages) as ctrun-<version>.dist-info,
 *      and <prefix>/bin holds python3 (or python);
 *   3. an active virtual environment ($VIRTUAL_ENV/bin/python) or conda environment
 *      ($CONDA_PREFIX/bin/python);
 *   4. python3, looked up in PATH when the worker starts.
 *
 * Deliberately not here: reading the environment or /proc (the caller passes the values, so the
 * rules can be tested), running the interpreter, and the decision whether a script runs under
 * Python at all (ctrun_cli.c).
 */
#ifndef CTRUN_PYTHON_H
#define CTRUN_PYTHON_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ctrun_python_source {
    CTRUN_PYTHON_GIVEN = 0, /* --python, CTRUN_PYTHON or PYTHON_EXEC */
    CTRUN_PYTHON_INSTALLED, /* the environment ctrun was pip-installed into */
    CTRUN_PYTHON_VENV,      /* $VIRTUAL_ENV */
    CTRUN_PYTHON_CONDA,     /* $CONDA_PREFIX */
    CTRUN_PYTHON_PATH,      /* python3 from PATH */
} ctrun_python_source_t;

/* Chooses the interpreter by the rules above. given: the first of --python, CTRUN_PYTHON,
 * PYTHON_EXEC that is set, or NULL; self_exe: the path of ctrun's own executable (NULL when
 * unknown); virtual_env, conda_prefix: the variables' values or NULL. *out is malloc'd (a path,
 * or "python3"). Returns 0 or -ENOMEM. */
int ctrun_python_choose(const char *given, const char *self_exe, const char *virtual_env,
                        const char *conda_prefix, char **out, ctrun_python_source_t *source);

/* Words for INFO lines: "given with --python, CTRUN_PYTHON or PYTHON_EXEC", "the environment
 * ctrun is installed in", ... */
const char *ctrun_python_source_text(ctrun_python_source_t source);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_PYTHON_H */
