/*
 * ct_env.c - getenv plus ct_parse, with the variable's name and value put in front of the
 * parser's message.
 */
#include "ct_env.h"

#include <stdlib.h>

#include "ct_parse.h"

const char *ct_env_str(const char *name)
{
    return getenv(name);
}

bool ct_env_is_set(const char *name)
{
    return getenv(name) != NULL;
}

/* Shared prologue: returns 1 when the variable is unset (default applies), 0 when a value is
 * there to parse. */
static int ct_env__env_lookup(const char *name, const char **value, bool *found)
{
    *value = getenv(name);
    if (found != NULL)
        *found = *value != NULL;
    return *value == NULL;
}

int ct_env_int64(const char *name, int64_t min, int64_t max, int64_t dflt, int64_t *out,
                 bool *found, ct_errbuf_t *eb)
{
    const char *value;
    if (ct_env__env_lookup(name, &value, found)) {
        *out = dflt;
        return 0;
    }
    int rc = ct_parse_int64(value, min, max, out, eb);
    return rc == 0 ? 0 : ct_errbuf_wrap(eb, rc, "environment variable %s", name);
}

int ct_env_int(const char *name, int min, int max, int dflt, int *out, bool *found,
               ct_errbuf_t *eb)
{
    int64_t v;
    int rc = ct_env_int64(name, min, max, dflt, &v, found, eb);
    if (rc == 0)
        *out = (int)v;
    return rc;
}

int ct_env_double(const char *name, double min, double max, double dflt, double *out,
                  bool *found, ct_errbuf_t *eb)
{
    const char *value;
    if (ct_env__env_lookup(name, &value, found)) {
        *out = dflt;
        return 0;
    }
    int rc = ct_parse_double(value, min, max, out, eb);
    return rc == 0 ? 0 : ct_errbuf_wrap(eb, rc, "environment variable %s", name);
}

int ct_env_bool(const char *name, bool dflt, bool *out, bool *found, ct_errbuf_t *eb)
{
    const char *value;
    if (ct_env__env_lookup(name, &value, found)) {
        *out = dflt;
        return 0;
    }
    int rc = ct_parse_bool(value, out, eb);
    return rc == 0 ? 0 : ct_errbuf_wrap(eb, rc, "environment variable %s", name);
}
