/*
 * ctrun_inject.c - parsing of --inject specs and the seeded choices behind them (see
 * ctrun_inject.h for the grammar). Pure functions of the text, the seed and the firing counts
 * the agent keeps in the specs; nothing here sends a signal or reads a clock.
 */
#include "ctrun_inject.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_parse.h"

static const char *const ctrun_inject__kind_names[] = {
    [CTRUN_INJECT_KILL] = "kill",
    [CTRUN_INJECT_HANG] = "hang",
    [CTRUN_INJECT_TORN] = "torn_ckpt",
    [CTRUN_INJECT_KILL_AGENT] = "kill_agent",
};

static const char *const ctrun_inject__phase_names[] = {"data", "file", "latest"};

const char *ctrun_inject_kind_name(ctrun_inject_kind_t kind)
{
    return (unsigned)kind < 4 ? ctrun_inject__kind_names[kind] : "?";
}

/* splitmix64: a well-mixed 64-bit draw from (seed, spec, firing, purpose). Reproducible on
 * every node, which is all the seed promises. */
static uint64_t ctrun_inject__draw(uint64_t seed, uint64_t spec, uint64_t k, uint64_t purpose)
{
    uint64_t z = seed ^ (spec * 0x9E3779B97F4A7C15ull) ^ (k * 0xBF58476D1CE4E5B9ull) ^
                 (purpose * 0x94D049BB133111EBull);
    for (int r = 0; r < 2; r++) {
        z += 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
    }
    return z;
}

/* "5", "2.5s", "500ms", "1m" -> seconds (> 0). */
static int ctrun_inject__seconds(const char *v, double *out, ct_errbuf_t *eb)
{
    char num[48];
    size_t len = strlen(v);
    double scale = 1.0;
    if (len > 2 && strcmp(v + len - 2, "ms") == 0) {
        scale = 0.001;
        len -= 2;
    } else if (len > 1 && v[len - 1] == 's') {
        len -= 1;
    } else if (len > 1 && v[len - 1] == 'm') {
        scale = 60.0;
        len -= 1;
    }
    if (len == 0 || len >= sizeof num)
        return ct_errbuf_set(eb, CT_EPARSE, "\"%.40s\" is not a duration (e.g. 5s, 500ms)", v);
    memcpy(num, v, len);
    num[len] = '\0';
    double s;
    if (ct_parse_double(num, 0.0, 1e9, &s, eb) != 0)
        return ct_errbuf_set(eb, CT_EPARSE, "\"%.40s\" is not a duration (e.g. 5s, 500ms)", v);
    s *= scale;
    if (!(s > 0.0))
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "duration \"%.40s\" must be above zero", v);
    *out = s;
    return 0;
}

/* One spec into *s; messages without the "--inject: spec N" frame (the caller adds it). */
static int ctrun_inject__parse_spec(char *text, ctrun_inject_spec_t *s, ct_errbuf_t *eb)
{
    memset(s, 0, sizeof *s);
    s->rank = 0;
    s->phase = 0;
    s->node = -1;
    bool have_rank = false, have_at = false, have_every = false, have_node = false,
         have_phase = false, have_count = false;
    char *save = NULL;
    char *kind = strtok_r(text, ":", &save);
    if (kind == NULL)
        return ct_errbuf_set(eb, CT_EPARSE, "empty spec");
    int k = -1;
    for (int i = 0; i < 4; i++)
        if (strcmp(kind, ctrun_inject__kind_names[i]) == 0)
            k = i;
    if (k < 0)
        return ct_errbuf_set(eb, CT_EPARSE,
                             "unknown fault \"%.32s\" (expected kill, hang, torn_ckpt or "
                             "kill_agent)",
                             kind);
    s->kind = (ctrun_inject_kind_t)k;
    int rc;
    for (char *f = strtok_r(NULL, ":", &save); f != NULL; f = strtok_r(NULL, ":", &save)) {
        char *eq = strchr(f, '=');
        if (eq == NULL)
            return ct_errbuf_set(eb, CT_EPARSE, "\"%.32s\" is not KEY=VALUE", f);
        *eq = '\0';
        const char *key = f, *val = eq + 1;
        if (strcmp(key, "rank") == 0 && !have_rank) {
            have_rank = true;
            if (strcmp(val, "any") == 0)
                s->rank = CTRUN_INJECT_ANY;
            else if ((rc = ct_parse_int(val, 0, 1 << 20, &s->rank, eb)) != 0)
                return ct_errbuf_wrap(eb, rc, "rank (a number or any)");
        } else if (strcmp(key, "node") == 0 && !have_node) {
            have_node = true;
            if ((rc = ct_parse_int(val, 0, 1 << 20, &s->node, eb)) != 0)
                return ct_errbuf_wrap(eb, rc, "node");
        } else if (strcmp(key, "at") == 0 && !have_at && !have_every) {
            have_at = true;
            /* at=step=N or at=time=T: the value holds the second '='. */
            const char *eq2 = strchr(val, '=');
            if (eq2 != NULL && strncmp(val, "step=", 5) == 0) {
                s->trigger = CTRUN_INJECT_AT_STEP;
                if ((rc = ct_parse_int64(eq2 + 1, 0, INT64_MAX / 2, &s->step, eb)) != 0)
                    return ct_errbuf_wrap(eb, rc, "at=step");
            } else if (eq2 != NULL && strncmp(val, "time=", 5) == 0) {
                s->trigger = CTRUN_INJECT_AT_TIME;
                if ((rc = ctrun_inject__seconds(eq2 + 1, &s->seconds, eb)) != 0)
                    return ct_errbuf_wrap(eb, rc, "at=time");
            } else {
                return ct_errbuf_set(eb, CT_EPARSE,
                                     "at=\"%.32s\": expected at=step=N or at=time=T", val);
            }
        } else if (strcmp(key, "every") == 0 && !have_every && !have_at) {
            have_every = true;
            s->trigger = CTRUN_INJECT_EVERY;
            if ((rc = ctrun_inject__seconds(val, &s->seconds, eb)) != 0)
                return ct_errbuf_wrap(eb, rc, "every");
        } else if (strcmp(key, "count") == 0 && !have_count) {
            have_count = true;
            if ((rc = ct_parse_int(val, 1, 1 << 20, &s->count, eb)) != 0)
                return ct_errbuf_wrap(eb, rc, "count");
        } else if (strcmp(key, "phase") == 0 && !have_phase) {
            have_phase = true;
            s->phase = -2;
            if (strcmp(val, "any") == 0)
                s->phase = CTRUN_INJECT_ANY;
            for (int p = 0; p < 3; p++)
                if (strcmp(val, ctrun_inject__phase_names[p]) == 0)
                    s->phase = p;
            if (s->phase == -2)
                return ct_errbuf_set(eb, CT_EPARSE,
                                     "phase \"%.32s\" (expected data, file, latest or any)", val);
        } else {
            bool known = strcmp(key, "rank") == 0 || strcmp(key, "node") == 0 ||
                         strcmp(key, "at") == 0 || strcmp(key, "every") == 0 ||
                         strcmp(key, "count") == 0 || strcmp(key, "phase") == 0;
            if (known && (strcmp(key, "at") == 0 || strcmp(key, "every") == 0))
                return ct_errbuf_set(eb, CT_EPARSE, "give one trigger: at= or every=");
            return ct_errbuf_set(eb, CT_EPARSE,
                                 known ? "\"%s\" given twice" : "unknown key \"%.32s\"", key);
        }
    }
    if (!have_at && !have_every)
        return ct_errbuf_set(eb, CT_EPARSE, "needs a trigger: at=step=N, at=time=T or every=T");
    if (have_count && !have_every)
        return ct_errbuf_set(eb, CT_EPARSE, "count= goes with every=");
    switch (s->kind) {
    case CTRUN_INJECT_KILL:
    case CTRUN_INJECT_HANG:
        if (!have_rank)
            return ct_errbuf_set(eb, CT_EPARSE, "needs rank=R or rank=any");
        if (have_node || have_phase)
            return ct_errbuf_set(eb, CT_EPARSE, "takes rank= and a trigger only");
        return 0;
    case CTRUN_INJECT_TORN:
        if (s->trigger != CTRUN_INJECT_AT_STEP)
            return ct_errbuf_set(eb, CT_EPARSE, "needs at=step=N (a checkpoint write)");
        if (have_node)
            return ct_errbuf_set(eb, CT_EPARSE, "takes no node=");
        if (s->rank == CTRUN_INJECT_ANY)
            return ct_errbuf_set(eb, CT_EPARSE, "rank=any: name the rank that writes checkpoints");
        return 0;
    case CTRUN_INJECT_KILL_AGENT:
        if (!have_node)
            return ct_errbuf_set(eb, CT_EPARSE, "needs node=N");
        if (s->trigger != CTRUN_INJECT_AT_TIME)
            return ct_errbuf_set(eb, CT_EPARSE, "needs at=time=T");
        if (have_rank || have_phase)
            return ct_errbuf_set(eb, CT_EPARSE, "takes node= and at=time= only");
        return 0;
    }
    return 0;
}

int ctrun_inject_parse(const char *text, uint64_t seed, ctrun_inject_t *inj, ct_errbuf_t *eb)
{
    memset(inj, 0, sizeof *inj);
    inj->seed = seed;
    if (text == NULL)
        return 0;
    char *copy = strdup(text);
    if (copy == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    int rc = 0;
    size_t index = 0;
    char *save = NULL;
    for (char *part = strtok_r(copy, ";", &save); part != NULL && rc == 0;
         part = strtok_r(NULL, ";", &save)) {
        while (*part == ' ')
            part++;
        size_t len = strlen(part);
        while (len > 0 && part[len - 1] == ' ')
            part[--len] = '\0';
        if (len == 0)
            continue;
        index++;
        ctrun_inject_spec_t *g = realloc(inj->specs, (inj->n + 1) * sizeof *g);
        if (g == NULL) {
            rc = ct_errbuf_set(eb, -ENOMEM, "out of memory");
            break;
        }
        inj->specs = g;
        char shown[CTRUN_INJECT_TEXT_MAX];
        snprintf(shown, sizeof shown, "%s", part);
        ct_errbuf_t seb = {{0}};
        rc = ctrun_inject__parse_spec(part, &inj->specs[inj->n], &seb);
        if (rc != 0) {
            ct_errbuf_set(eb, rc, "--inject: spec %zu \"%s\": %s", index, shown, seb.msg);
            break;
        }
        snprintf(inj->specs[inj->n].text, CTRUN_INJECT_TEXT_MAX, "%s", shown);
        inj->n++;
    }
    free(copy);
    if (rc != 0)
        ctrun_inject_free(inj);
    return rc;
}

int ctrun_inject_check(const ctrun_inject_t *inj, int max_nodes, long long max_world,
                       ct_errbuf_t *eb)
{
    for (size_t i = 0; i < inj->n; i++) {
        const ctrun_inject_spec_t *s = &inj->specs[i];
        if (s->kind == CTRUN_INJECT_KILL_AGENT && s->node >= max_nodes)
            return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                                 "--inject: spec %zu \"%s\": node %d does not exist: the job has "
                                 "at most %d node%s (--nnodes), so it could never fire",
                                 i + 1, s->text, s->node, max_nodes, max_nodes == 1 ? "" : "s");
        if (max_world >= 0 && s->kind != CTRUN_INJECT_KILL_AGENT && s->rank != CTRUN_INJECT_ANY &&
            s->rank >= max_world)
            return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                                 "--inject: spec %zu \"%s\": rank %d does not exist: the job has "
                                 "%lld rank%s (--nproc_per_node %lld), so it could never fire",
                                 i + 1, s->text, s->rank, max_world, max_world == 1 ? "" : "s",
                                 max_world);
    }
    return 0;
}

int ctrun_inject_missing_rank(const ctrun_inject_t *inj, size_t i, int world_size)
{
    const ctrun_inject_spec_t *s = &inj->specs[i];
    if (s->kind == CTRUN_INJECT_KILL_AGENT || s->rank == CTRUN_INJECT_ANY || s->rank < world_size)
        return -1;
    return s->rank;
}

int ctrun_inject_copy(ctrun_inject_t *dst, const ctrun_inject_t *src)
{
    memset(dst, 0, sizeof *dst);
    dst->seed = src->seed;
    if (src->n == 0)
        return 0;
    dst->specs = malloc(src->n * sizeof *dst->specs);
    if (dst->specs == NULL)
        return -ENOMEM;
    memcpy(dst->specs, src->specs, src->n * sizeof *dst->specs);
    dst->n = src->n;
    return 0;
}

void ctrun_inject_free(ctrun_inject_t *inj)
{
    free(inj->specs);
    inj->specs = NULL;
    inj->n = 0;
}

bool ctrun_inject_pending(const ctrun_inject_t *inj, size_t i)
{
    const ctrun_inject_spec_t *s = &inj->specs[i];
    if (s->trigger == CTRUN_INJECT_EVERY)
        return s->count == 0 || s->fired < s->count;
    return s->fired == 0;
}

int ctrun_inject_rank(const ctrun_inject_t *inj, size_t i, int world_size)
{
    const ctrun_inject_spec_t *s = &inj->specs[i];
    if (s->rank != CTRUN_INJECT_ANY)
        return s->rank;
    if (world_size < 1)
        return 0;
    return (int)(ctrun_inject__draw(inj->seed, i, (uint64_t)s->fired, 1) % (uint64_t)world_size);
}

int ctrun_inject_phase(const ctrun_inject_t *inj, size_t i)
{
    const ctrun_inject_spec_t *s = &inj->specs[i];
    if (s->phase != CTRUN_INJECT_ANY)
        return s->phase;
    return (int)(ctrun_inject__draw(inj->seed, i, (uint64_t)s->fired, 2) % 3u);
}

int ctrun_inject_arm(const ctrun_inject_t *inj, int rank, int world_size, char *buf,
                     size_t size)
{
    int best = -1;
    if (size > 0)
        buf[0] = '\0';
    for (size_t i = 0; i < inj->n; i++) {
        const ctrun_inject_spec_t *s = &inj->specs[i];
        if (s->trigger != CTRUN_INJECT_AT_STEP || s->kind == CTRUN_INJECT_KILL_AGENT ||
            !ctrun_inject_pending(inj, i) || ctrun_inject_rank(inj, i, world_size) != rank)
            continue;
        if (best < 0 || s->step < inj->specs[best].step)
            best = (int)i;
    }
    if (best < 0)
        return -1;
    const ctrun_inject_spec_t *s = &inj->specs[best];
    switch (s->kind) {
    case CTRUN_INJECT_KILL: snprintf(buf, size, "kill@%lld", (long long)s->step); break;
    case CTRUN_INJECT_HANG: snprintf(buf, size, "stop@%lld", (long long)s->step); break;
    default:
        snprintf(buf, size, "torn@%lld:%s", (long long)s->step,
                 ctrun_inject__phase_names[ctrun_inject_phase(inj, (size_t)best)]);
        break;
    }
    return best;
}
