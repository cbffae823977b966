/*
 * ct_errfile.c - reading and copying error files. jansson does the JSON; this file does the
 * schema, the tolerant reading (a timestamp may be a string or a number; missing pieces are
 * NULL, not errors) and the atomic rewrite of a copied file, in what Python's json.dumps
 * writes: ", " and ": " separators, key order kept, non-ASCII as \u escapes. Writing a new
 * file is ct_errfile_write.c's job.
 */
#include "ct_errfile.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_fs.h"
#include "ct_parse.h"

static int ct_errfile__load(const char *path, json_t **root, ct_errbuf_t *eb)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        int e = errno;
        return ct_errbuf_set(eb, -e, "error file %s: %s", path, strerror(e));
    }
    json_error_t jerr;
    json_t *j = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    fclose(f);
    if (j == NULL)
        return ct_errbuf_set(eb, CT_EFORMAT,
                             "error file %s is not valid JSON (line %d, column %d: %s)", path,
                             jerr.line, jerr.column, jerr.text);
    if (!json_is_object(j) || json_object_get(j, "message") == NULL) {
        json_decref(j);
        return ct_errbuf_set(eb, CT_EFORMAT, "error file %s has no \"message\" field", path);
    }
    *root = j;
    return 0;
}

static int64_t ct_errfile__timestamp(json_t *v)
{
    int64_t ts = 0;
    if (json_is_integer(v))
        ts = (int64_t)json_integer_value(v);
    else if (json_is_real(v))
        ts = (int64_t)json_real_value(v);
    else if (json_is_string(v) &&
             ct_parse_int64(json_string_value(v), 0, INT64_MAX, &ts, NULL) != 0)
        ts = 0;
    return ts < 0 ? 0 : ts;
}

static char *ct_errfile__dup_string(json_t *v)
{
    return json_is_string(v) ? strdup(json_string_value(v)) : NULL;
}

int ct_errfile_read(const char *path, ct_errfile_t *out, ct_errbuf_t *eb)
{
    memset(out, 0, sizeof *out);
    json_t *root;
    int rc = ct_errfile__load(path, &root, eb);
    if (rc != 0)
        return rc;
    json_t *msg = json_object_get(root, "message");
    if (json_is_object(msg)) {
        out->dict_form = true;
        out->message = ct_errfile__dup_string(json_object_get(msg, "message"));
        json_t *extra = json_object_get(msg, "extraInfo");
        out->traceback = ct_errfile__dup_string(json_object_get(extra, "py_callstack"));
        out->timestamp = ct_errfile__timestamp(json_object_get(extra, "timestamp"));
        json_t *code = json_object_get(msg, "errorCode");
        if (json_is_integer(code) && json_integer_value(code) >= INT_MIN &&
            json_integer_value(code) <= INT_MAX) {
            out->has_error_code = true;
            out->error_code = (int)json_integer_value(code);
        }
    } else {
        out->message = ct_errfile__dup_string(msg);
        if (out->message == NULL && !json_is_null(msg))
            out->message = json_dumps(msg, JSON_ENCODE_ANY);
        out->timestamp = ct_errfile__timestamp(json_object_get(root, "timestamp"));
    }
    json_decref(root);
    return 0;
}

void ct_errfile_free(ct_errfile_t *ef)
{
    free(ef->message);
    free(ef->traceback);
    ef->message = NULL;
    ef->traceback = NULL;
}

/* Writes root as JSON over path, durably (ct_fs.h: a temporary file beside it, renamed). */
static int ct_errfile__save(const char *path, json_t *root, ct_errbuf_t *eb)
{
    char *text = json_dumps(root, JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
    if (text == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "error file %s: out of memory", path);
    /* jansson writes \u00E9, Python \u00e9: lower-case the hex of every \u escape. */
    for (char *p = text; *p != '\0'; p++) {
        if (*p != '\\')
            continue;
        p++;
        for (int k = 1; *p == 'u' && k <= 4 && p[k] != '\0'; k++)
            p[k] = (char)tolower((unsigned char)p[k]);
    }
    ct_errbuf_t feb;
    int rc = ct_fs_replace(path, text, strlen(text), &feb);
    free(text);
    if (rc != 0)
        return ct_errbuf_set(eb, rc, "error file %s: cannot write: %s", path, feb.msg);
    return 0;
}

int ct_errfile_copy(const char *src, const char *dst, int error_code, ct_errbuf_t *eb)
{
    json_t *root;
    int rc = ct_errfile__load(src, &root, eb);
    if (rc != 0)
        return rc;
    json_t *msg = json_object_get(root, "message");
    if (error_code != 0 && json_is_object(msg))
        json_object_set_new(msg, "errorCode", json_integer(error_code));
    rc = ct_errfile__save(dst, root, eb);
    json_decref(root);
    return rc;
}
