/*
 * ctrun_template.c - one pass over the text into a growing buffer; no regular expressions,
 * no allocation per variable.
 */
#include "ctrun_template.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct ctrun_template__buf {
    char *data;
    size_t len, cap;
    bool oom;
} ctrun_template__buf_t;

static void ctrun_template__put(ctrun_template__buf_t *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (d == NULL) {
            b->oom = true;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static bool ctrun_template__id_start(char c)
{
    return c == '_' || isalpha((unsigned char)c);
}

static bool ctrun_template__id_char(char c)
{
    return c == '_' || isalnum((unsigned char)c);
}

static const char *ctrun_template__lookup(const ctrun_template_var_t *vars, size_t nvars,
                                          const char *id, size_t len)
{
    for (size_t i = 0; i < nvars; i++) {
        if (strlen(vars[i].name) == len && memcmp(vars[i].name, id, len) == 0)
            return vars[i].value;
    }
    return NULL;
}

int ctrun_template_substitute(const char *text, const ctrun_template_var_t *vars, size_t nvars,
                              char **out)
{
    ctrun_template__buf_t b = {0};
    ctrun_template__put(&b, "", 0);
    const char *p = text;
    while (*p != '\0') {
        const char *dollar = strchr(p, '$');
        if (dollar == NULL) {
            ctrun_template__put(&b, p, strlen(p));
            break;
        }
        ctrun_template__put(&b, p, (size_t)(dollar - p));
        const char *q = dollar + 1;
        if (*q == '$') {
            ctrun_template__put(&b, "$", 1);
            p = q + 1;
            continue;
        }
        bool braced = *q == '{';
        const char *id = braced ? q + 1 : q;
        const char *e = id;
        if (ctrun_template__id_start(*e)) {
            while (ctrun_template__id_char(*e))
                e++;
        }
        if (e == id || (braced && *e != '}')) {
            /* Not a placeholder: the '$' stays and scanning resumes right after it. */
            ctrun_template__put(&b, "$", 1);
            p = q;
            continue;
        }
        const char *end = braced ? e + 1 : e;
        const char *value = ctrun_template__lookup(vars, nvars, id, (size_t)(e - id));
        if (value != NULL)
            ctrun_template__put(&b, value, strlen(value));
        else
            ctrun_template__put(&b, dollar, (size_t)(end - dollar));
        p = end;
    }
    if (b.oom) {
        free(b.data);
        return -ENOMEM;
    }
    *out = b.data;
    return 0;
}
