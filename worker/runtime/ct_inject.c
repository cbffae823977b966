/*
 * ct_inject.c - the worker's half of ctrun's fault injection (ctrun --inject): the one fault the
 * launcher armed for this worker in this attempt, read from CTRUN_INJECT, fired at the exact
 * point only the worker can see - reaching a training step, or a given moment inside a
 * checkpoint write.
 *
 * Faults that need no such precision (kills and stops at a time, killing an agent) are sent
 * by the launcher itself; so is the choice of which rank, which step and which attempt: this
 * file never decides anything, it executes CTRUN_INJECT. Before raising the signal it writes one
 * heartbeat record regardless of the rate limit (so the launcher learns the step and the
 * moment of the fault, for its detection-latency figure) and one line to stderr (so the log
 * says the death was injected). Not here: parsing the user's --inject specs (launcher/
 * ctrun_inject.c), and any effect when CTRUN_INJECT is unset (everything is then a no-op).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_log.h"
#include "ct_parse.h"
#include "ct_worker_internal.h"
#include "ctworker.h"

static struct {
    ct_inject_kind_t kind; /* CT_INJECT_NONE: nothing armed */
    int64_t step;         /* fires at the first progress report (or checkpoint) at >= step */
    ct_inject_ckpt_phase_t phase;
    int64_t ckpt_step; /* step of the checkpoint being written, -1 outside ct_ckpt_save */
    char text[64];     /* CTRUN_INJECT as given, for the log line */
} ct_inject__inject = {.kind = CT_INJECT_NONE, .ckpt_step = -1};

static const char *const ct_inject__phase_names[] = {
    [CT_INJECT_PHASE_DATA] = "data",
    [CT_INJECT_PHASE_FILE] = "file",
    [CT_INJECT_PHASE_LATEST] = "latest",
};

int ct_inject_parse(const char *text, ct_inject_t *f, ct_errbuf_t *eb)
{
    memset(f, 0, sizeof *f);
    f->kind = CT_INJECT_NONE;
    if (text == NULL || text[0] == '\0')
        return 0;
    static const struct {
        const char *name;
        ct_inject_kind_t kind;
    } kinds[] = {{"kill", CT_INJECT_KILL}, {"stop", CT_INJECT_STOP}, {"torn", CT_INJECT_TORN}};
    const char *at = strchr(text, '@');
    if (at == NULL)
        return ct_errbuf_set(eb, CT_EPARSE,
                             "CTRUN_INJECT: \"%.64s\" is not KIND@STEP (kill, stop or torn)", text);
    size_t klen = (size_t)(at - text);
    f->kind = CT_INJECT_NONE;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strlen(kinds[i].name) == klen && strncmp(text, kinds[i].name, klen) == 0)
            f->kind = kinds[i].kind;
    if (f->kind == CT_INJECT_NONE)
        return ct_errbuf_set(eb, CT_EPARSE,
                             "CTRUN_INJECT: unknown fault \"%.*s\" (expected kill, stop or torn)",
                             (int)(klen < 32 ? klen : 32), text);
    char num[32];
    const char *colon = strchr(at + 1, ':');
    size_t nlen = colon ? (size_t)(colon - at - 1) : strlen(at + 1);
    if (nlen == 0 || nlen >= sizeof num)
        return ct_errbuf_set(eb, CT_EPARSE, "CTRUN_INJECT: \"%.64s\": bad step", text);
    memcpy(num, at + 1, nlen);
    num[nlen] = '\0';
    int rc = ct_parse_int64(num, 0, INT64_MAX, &f->step, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, rc, "CTRUN_INJECT: step");
    f->phase = CT_INJECT_PHASE_DATA;
    if (f->kind == CT_INJECT_TORN) {
        if (colon == NULL)
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "CTRUN_INJECT: \"%.64s\": torn needs :data, :file or :latest",
                                 text);
        bool found = false;
        for (int p = 0; p < 3; p++)
            if (strcmp(colon + 1, ct_inject__phase_names[p]) == 0) {
                f->phase = (ct_inject_ckpt_phase_t)p;
                found = true;
            }
        if (!found)
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "CTRUN_INJECT: unknown checkpoint phase \"%.32s\" (expected "
                                 "data, file or latest)",
                                 colon + 1);
    } else if (colon != NULL) {
        return ct_errbuf_set(eb, CT_EPARSE, "CTRUN_INJECT: \"%.64s\": only torn takes a phase",
                             text);
    }
    return 0;
}

int ct__inject_setup(const char *text, ct_errbuf_t *eb)
{
    ct_inject__inject.kind = CT_INJECT_NONE;
    ct_inject__inject.ckpt_step = -1;
    ct_inject_t f;
    int rc = ct_inject_parse(text, &f, eb);
    if (rc != 0)
        return rc;
    ct_inject__inject.kind = f.kind;
    ct_inject__inject.step = f.step;
    ct_inject__inject.phase = f.phase;
    snprintf(ct_inject__inject.text, sizeof ct_inject__inject.text, "%s", text ? text : "");
    return 0;
}

void ct__inject_reset(void)
{
    ct_inject__inject.kind = CT_INJECT_NONE;
    ct_inject__inject.ckpt_step = -1;
}

static void ct_inject__inject_fire(uint64_t step, int sig, const char *what)
{
    ct__runtime_beat_now(step);
    ct_log_warn("fault injection (CTRUN_INJECT=%s): %s at step %llu", ct_inject__inject.text, what,
                (unsigned long long)step);
    fflush(stdout);
    fflush(stderr);
    raise(sig);
}

void ct__inject_progress(uint64_t step)
{
    if (ct_inject__inject.kind != CT_INJECT_KILL && ct_inject__inject.kind != CT_INJECT_STOP)
        return;
    if ((int64_t)step < ct_inject__inject.step)
        return;
    if (ct_inject__inject.kind == CT_INJECT_KILL) {
        ct_inject__inject_fire(step, SIGKILL, "SIGKILL");
        return;
    }
    /* A stop fires once: after SIGCONT the worker goes on (the launcher is stopping it). */
    ct_inject__inject.kind = CT_INJECT_NONE;
    ct_inject__inject_fire(step, SIGSTOP, "SIGSTOP (a hang)");
}

void ct__inject_ckpt_begin(int64_t step)
{
    ct_inject__inject.ckpt_step = step;
}

void ct__inject_ckpt_end(void)
{
    ct_inject__inject.ckpt_step = -1;
}

void ct__inject_ckpt_point(ct_inject_ckpt_phase_t phase)
{
    if (ct_inject__inject.kind != CT_INJECT_TORN ||
        ct_inject__inject.ckpt_step < ct_inject__inject.step || phase != ct_inject__inject.phase)
        return;
    char what[96];
    snprintf(what, sizeof what, "SIGKILL inside the checkpoint write (phase %s)",
             ct_inject__phase_names[phase]);
    ct_inject__inject_fire((uint64_t)ct_inject__inject.ckpt_step, SIGKILL, what);
}
