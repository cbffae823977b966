/*
 * ctrun_events.c - the event records of ctrun_events.h, built with jansson in insertion order.
 */
#include "ctrun_events.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* Python's json.dumps defaults: ", " and ": " between items, ASCII only, keys as inserted. */
#define CTRUN_EVENTS__FLAGS (JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII)

static json_t *ctrun_events__int_or_null(int64_t v)
{
    return v < 0 ? json_null() : json_integer(v);
}

static json_t *ctrun_events__str_or_null(const char *s)
{
    return s == NULL ? json_null() : json_string(s);
}

/* [v] or [null]: torchrun keeps these as one-element tuples. */
static json_t *ctrun_events__one(json_t *v)
{
    json_t *a = json_array();
    json_array_append_new(a, v);
    return a;
}

int ctrun_event_format(const ctrun_event_t *ev, char **out)
{
    *out = NULL;
    json_t *md = json_object();
    json_object_set_new(md, "group_world_size", ctrun_events__int_or_null(ev->group_world_size));
    json_object_set_new(md, "entry_point", ctrun_events__str_or_null(ev->entry_point));
    if (ev->worker) {
        json_object_set_new(md, "local_rank", ctrun_events__one(json_integer(ev->local_rank)));
        json_object_set_new(md, "role_rank", ctrun_events__one(json_integer(ev->role_rank)));
        json_object_set_new(md, "role_world_size",
                            ctrun_events__one(json_integer(ev->role_world_size)));
        json_object_set_new(
            md, "exit_code",
            ctrun_events__one(ev->has_exit ? json_integer(ev->exit_code) : json_null()));
        json_object_set_new(
            md, "worker_pid",
            ctrun_events__one(ev->has_exit ? json_integer(ev->worker_pid) : json_null()));
    }
    char *md_text = json_dumps(md, CTRUN_EVENTS__FLAGS);
    json_decref(md);
    if (md_text == NULL)
        return -ENOMEM;

    json_t *meta = json_object();
    json_object_set_new(meta, "run_id", ctrun_events__str_or_null(ev->run_id));
    json_object_set_new(meta, "global_rank", ctrun_events__int_or_null(ev->global_rank));
    json_object_set_new(meta, "group_rank", ctrun_events__int_or_null(ev->group_rank));
    json_object_set_new(meta, "worker_id", ctrun_events__str_or_null(ev->worker_id));
    json_object_set_new(meta, "role", ctrun_events__str_or_null(ev->role));
    json_object_set_new(meta, "hostname", ctrun_events__str_or_null(ev->hostname));
    json_object_set_new(meta, "state", ctrun_events__str_or_null(ev->state));
    json_object_set_new(meta, "total_run_time", json_integer(ev->total_run_time));
    json_object_set_new(meta, "rdzv_backend", ctrun_events__str_or_null(ev->rdzv_backend));
    json_object_set_new(meta, "raw_error", ctrun_events__str_or_null(ev->raw_error));
    json_object_set_new(meta, "metadata", json_string(md_text));
    json_object_set_new(meta, "agent_restarts", json_integer(ev->agent_restarts));
    json_object_set_new(meta, "duration_ms",
                        ev->duration_ms < 0 ? json_null() : json_real(ev->duration_ms));
    free(md_text);

    char name[128];
    snprintf(name, sizeof name, "torchelastic.worker.status.%s", ev->state ? ev->state : "");
    json_t *root = json_object();
    json_object_set_new(root, "name", json_string(name));
    json_object_set_new(root, "source", json_string(ev->worker ? "WORKER" : "AGENT"));
    json_object_set_new(root, "timestamp", json_integer(ev->timestamp_ms));
    json_object_set_new(root, "metadata", meta);
    char *text = json_dumps(root, CTRUN_EVENTS__FLAGS);
    json_decref(root);
    if (text == NULL)
        return -ENOMEM;
    size_t n = strlen(text);
    char *line = realloc(text, n + 2);
    if (line == NULL) {
        free(text);
        return -ENOMEM;
    }
    line[n] = '\n';
    line[n + 1] = '\0';
    *out = line;
    return 0;
}

int ctrun_event_raw_error(const char *error_file, int exitcode, char **out)
{
    json_t *data = error_file != NULL && error_file[0] != '\0'
                       ? json_load_file(error_file, JSON_DECODE_ANY, NULL)
                       : NULL;
    if (data == NULL) {
        data = json_object();
        json_object_set_new(data, "message", json_string("<NONE>"));
        if (exitcode >= 0) {
            json_t *traits = json_object();
            json_object_set_new(traits, "category", json_string("system_terminated_error"));
            json_object_set_new(traits, "retryability", json_string("False"));
            json_object_set_new(data, "errorTraits", traits);
        }
    }
    *out = json_dumps(data, CTRUN_EVENTS__FLAGS | JSON_ENCODE_ANY);
    json_decref(data);
    return *out == NULL ? -ENOMEM : 0;
}
