/*
 * test_ctrun_python.c - the interpreter rule of ctrun_python.h on made-up installations in a
 * temporary folder: a pip install into a virtual environment (bin/ctrun, bin/python3 and
 * lib/python3.X/site-packages/ctrun-<version>.dist-info), the same folder without pip's record,
 * VIRTUAL_ENV and CONDA_PREFIX, and the order between them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_test.h"
#include "ctrun_python.h"

static char ct__root[64];

static void ct__mkdirs(const char *rel)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", ct__root, rel);
    for (char *p = path + strlen(ct__root) + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    mkdir(path, 0755);
}

static void ct__exe(const char *rel)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", ct__root, rel);
    FILE *f = fopen(path, "w");
    CT_ASSERT(f != NULL);
    fputs("#!/bin/sh\n", f);
    fclose(f);
    CT_ASSERT_EQ(chmod(path, 0755), 0);
}

static const char *ct__choose(const char *given, const char *self, const char *venv,
                              const char *conda, ctrun_python_source_t *src)
{
    static char out[512];
    char self_path[512], venv_path[512], conda_path[512];
    snprintf(self_path, sizeof self_path, "%s/%s", ct__root, self ? self : "");
    snprintf(venv_path, sizeof venv_path, "%s/%s", ct__root, venv ? venv : "");
    snprintf(conda_path, sizeof conda_path, "%s/%s", ct__root, conda ? conda : "");
    char *chosen = NULL;
    CT_ASSERT_OK(ctrun_python_choose(given, self ? self_path : NULL, venv ? venv_path : NULL,
                                     conda ? conda_path : NULL, &chosen, src));
    size_t n = strlen(ct__root);
    snprintf(out, sizeof out, "%s", strncmp(chosen, ct__root, n) == 0 ? chosen + n + 1 : chosen);
    free(chosen);
    return out;
}

static void test_order(void)
{
    snprintf(ct__root, sizeof ct__root, "/tmp/ctrun_python_XXXXXX");
    CT_ASSERT(mkdtemp(ct__root) != NULL);
    /* pip's venv: the record, ctrun and python3 in bin/ */
    ct__mkdirs("venv/bin");
    ct__mkdirs("venv/lib/python3.11/site-packages/ctrun-0.1.0.dist-info");
    ct__exe("venv/bin/ctrun");
    ct__exe("venv/bin/python3");
    ct__exe("venv/bin/python");
    /* a prefix with ctrun and python3 but no record of a pip install (meson install) */
    ct__mkdirs("usr/bin");
    ct__exe("usr/bin/ctrun");
    ct__exe("usr/bin/python3");
    /* an activated virtual environment and a conda environment */
    ct__mkdirs("active/bin");
    ct__exe("active/bin/python");
    ct__mkdirs("conda/bin");
    ct__exe("conda/bin/python");
    /* Debian's pip puts its record in dist-packages, and a prefix may hold only python */
    ct__mkdirs("local/bin");
    ct__mkdirs("local/lib/python3.11/dist-packages/ctrun-0.1.0.dist-info");
    ct__exe("local/bin/ctrun");
    ct__exe("local/bin/python");

    ctrun_python_source_t src;
    CT_ASSERT_STR_EQ(ct__choose("/opt/py", "venv/bin/ctrun", "active", "conda", &src), "/opt/py");
    CT_ASSERT_EQ(src, CTRUN_PYTHON_GIVEN);
    CT_ASSERT_STR_EQ(ct__choose(NULL, "venv/bin/ctrun", "active", "conda", &src),
                     "venv/bin/python3");
    CT_ASSERT_EQ(src, CTRUN_PYTHON_INSTALLED);
    CT_ASSERT_STR_EQ(ct__choose(NULL, "local/bin/ctrun", NULL, NULL, &src), "local/bin/python");
    CT_ASSERT_EQ(src, CTRUN_PYTHON_INSTALLED);
    /* Not installed by pip: the active environment, then conda, then PATH. */
    CT_ASSERT_STR_EQ(ct__choose(NULL, "usr/bin/ctrun", "active", "conda", &src),
                     "active/bin/python");
    CT_ASSERT_EQ(src, CTRUN_PYTHON_VENV);
    CT_ASSERT_STR_EQ(ct__choose(NULL, "usr/bin/ctrun", NULL, "conda", &src), "conda/bin/python");
    CT_ASSERT_EQ(src, CTRUN_PYTHON_CONDA);
    CT_ASSERT_STR_EQ(ct__choose(NULL, "usr/bin/ctrun", "missing", NULL, &src), "python3");
    CT_ASSERT_EQ(src, CTRUN_PYTHON_PATH);
    CT_ASSERT_STR_EQ(ct__choose(NULL, NULL, NULL, NULL, &src), "python3");
    CT_ASSERT_STR_CONTAINS(ctrun_python_source_text(CTRUN_PYTHON_INSTALLED), "installed");

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", ct__root);
    CT_ASSERT_EQ(system(cmd), 0);
}

int main(void)
{
    CT_RUN(test_order);
    return 0;
}
