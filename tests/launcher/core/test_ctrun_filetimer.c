/*
 * test_ctrun_filetimer.c - FileTimerClient's requests (ctrun_filetimer.h): the exact lines
 * PyTorch 2.x writes for acquire and release parse; malformed, oversized and mistyped ones are
 * refused with a reason and never crash; the table re-arms, releases, forgets a worker's timers,
 * names the earliest expiry, and pops expired timers one worker at a time, earliest first, with
 * every other timer of that worker gone; the cause line.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_test.h"
#include "ctrun_filetimer.h"

static int parse(const char *line, ctrun_filetimer_req_t *req, ct_errbuf_t *eb)
{
    ct_errbuf_clear(eb);
    return ctrun_filetimer_parse(line, strlen(line), req, eb);
}

static void test_pytorch_lines(void)
{
    ctrun_filetimer_req_t r;
    ct_errbuf_t eb = {{0}};
    /* FileTimerRequest.to_json of an acquire (expires(after=2) at 1700000000.25) and a
     * release, as json.dumps writes them. */
    CT_ASSERT_OK(parse("{\"version\": 1, \"pid\": 4242, \"scope_id\": \"step\", "
                       "\"expiration_time\": 1700000000.25, \"signal\": 9}",
                       &r, &eb));
    CT_ASSERT_EQ(r.pid, 4242);
    CT_ASSERT_STR_EQ(r.scope, "step");
    CT_ASSERT(r.expiration == 1700000000.25);
    CT_ASSERT_EQ(r.signal, SIGKILL);
    CT_ASSERT_OK(parse("{\"version\": 1, \"pid\": 4242, \"scope_id\": \"step\", "
                       "\"expiration_time\": -1, \"signal\": 0}",
                       &r, &eb));
    CT_ASSERT(r.expiration < 0);
    CT_ASSERT_EQ(r.signal, 0);
}

static void test_bad_requests(void)
{
    ctrun_filetimer_req_t r;
    ct_errbuf_t eb = {{0}};
    static const struct {
        const char *line, *why;
    } bad[] = {
        {"", "not JSON"},
        {"{\"version\": 1, \"pid\": 1", "not JSON"},
        {"[1, 2]", "not a JSON object"},
        {"{\"pid\": 5, \"scope_id\": \"s\", \"expiration_time\": 1, \"signal\": 9}", "version"},
        {"{\"version\": 2, \"pid\": 5, \"scope_id\": \"s\", \"expiration_time\": 1, \"signal\": 9}",
         "version"},
        {"{\"version\": 1, \"pid\": 0, \"scope_id\": \"s\", \"expiration_time\": 1, \"signal\": 9}",
         "pid"},
        {"{\"version\": 1, \"pid\": \"5\", \"scope_id\": \"s\", \"expiration_time\": 1, "
         "\"signal\": 9}",
         "pid"},
        {"{\"version\": 1, \"pid\": 5, \"scope_id\": 7, \"expiration_time\": 1, \"signal\": 9}",
         "scope_id"},
        {"{\"version\": 1, \"pid\": 5, \"scope_id\": \"s\", \"expiration_time\": \"soon\", "
         "\"signal\": 9}",
         "expiration_time"},
        {"{\"version\": 1, \"pid\": 5, \"scope_id\": \"s\", \"expiration_time\": 1, \"signal\": "
         "99}",
         "signal"},
        {"{\"version\": 1, \"pid\": 5, \"pid\": 6, \"scope_id\": \"s\", \"expiration_time\": 1, "
         "\"signal\": 9}",
         "not JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CT_ASSERT_ERR(parse(bad[i].line, &r, &eb), -EINVAL);
        CT_ASSERT_MSG(strstr(eb.msg, bad[i].why) != NULL, "case %zu: \"%s\"", i, eb.msg);
    }
    /* Longer than PIPE_BUF: refused before it is parsed. */
    size_t n = CTRUN_FILETIMER_REQUEST_MAX + 1;
    char *big = malloc(n + 1);
    CT_ASSERT(big != NULL);
    memset(big, ' ', n);
    big[n] = '\0';
    CT_ASSERT_ERR(parse(big, &r, &eb), -EMSGSIZE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "more than 4096");
    free(big);
    /* A scope id that does not fit. */
    char line[1024];
    char scope[CTRUN_FILETIMER_SCOPE_MAX + 1];
    memset(scope, 'x', sizeof scope - 1);
    scope[sizeof scope - 1] = '\0';
    snprintf(line, sizeof line,
             "{\"version\": 1, \"pid\": 5, \"scope_id\": \"%s\", \"expiration_time\": 1, "
             "\"signal\": 9}",
             scope);
    CT_ASSERT_ERR(parse(line, &r, &eb), -EINVAL);
    CT_ASSERT_STR_CONTAINS(eb.msg, "scope_id");
}

static ctrun_filetimer_req_t req(pid_t pid, const char *scope, double exp, int sig)
{
    ctrun_filetimer_req_t r = {.pid = pid, .expiration = exp, .signal = sig};
    snprintf(r.scope, sizeof r.scope, "%s", scope);
    return r;
}

static void test_table(void)
{
    ctrun_filetimers_t ts = {0};
    double when;
    ctrun_filetimer_req_t out;
    CT_ASSERT(!ctrun_filetimers_next(&ts, &when));
    ctrun_filetimer_req_t a = req(10, "step", 100.0, SIGKILL), b = req(10, "eval", 105.0, SIGTERM),
                          c = req(20, "step", 102.0, SIGUSR1);
    CT_ASSERT_OK(ctrun_filetimers_apply(&ts, &a));
    CT_ASSERT_OK(ctrun_filetimers_apply(&ts, &b));
    CT_ASSERT_OK(ctrun_filetimers_apply(&ts, &c));
    CT_ASSERT(ctrun_filetimers_next(&ts, &when) && when == 100.0);
    /* Re-armed: the same (pid, scope) moves, no second timer. */
    a.expiration = 103.0;
    CT_ASSERT_OK(ctrun_filetimers_apply(&ts, &a));
    CT_ASSERT_EQ(ts.n, 3);
    CT_ASSERT(ctrun_filetimers_next(&ts, &when) && when == 102.0);
    CT_ASSERT(!ctrun_filetimers_pop_expired(&ts, 101.9, &out));
    /* At 104, pid 20's timer (102) comes first, then pid 10's earliest (103); popping pid 10
     * takes its "eval" timer too. */
    CT_ASSERT(ctrun_filetimers_pop_expired(&ts, 104.0, &out));
    CT_ASSERT_EQ(out.pid, 20);
    CT_ASSERT_EQ(out.signal, SIGUSR1);
    CT_ASSERT(ctrun_filetimers_pop_expired(&ts, 104.0, &out));
    CT_ASSERT_EQ(out.pid, 10);
    CT_ASSERT_STR_EQ(out.scope, "step");
    CT_ASSERT_EQ(ts.n, 0);
    CT_ASSERT(!ctrun_filetimers_pop_expired(&ts, 1e12, &out));
    /* Release, and a release of a timer that is not armed. */
    CT_ASSERT_OK(ctrun_filetimers_apply(&ts, &b));
    ctrun_filetimer_req_t rel = req(10, "eval", -1, 0);
    CT_ASSERT_OK(ctrun_filetimers_apply(&ts, &rel));
    CT_ASSERT_OK(ctrun_filetimers_apply(&ts, &rel));
    CT_ASSERT_EQ(ts.n, 0);
    /* A worker that exited: its timers are forgotten, the others stay. */
    CT_ASSERT_OK(ctrun_filetimers_apply(&ts, &a));
    CT_ASSERT_OK(ctrun_filetimers_apply(&ts, &b));
    CT_ASSERT_OK(ctrun_filetimers_apply(&ts, &c));
    ctrun_filetimers_forget(&ts, 10);
    CT_ASSERT_EQ(ts.n, 1);
    CT_ASSERT_EQ(ts.t[0].pid, 20);
    ctrun_filetimers_free(&ts);
}

static void test_cause(void)
{
    char buf[128];
    ctrun_filetimer_req_t r = req(4242, "step", 100.0, SIGKILL);
    ctrun_filetimer_cause(&r, 102.04, 1, buf, sizeof buf);
    CT_ASSERT_STR_EQ(buf, "timer 'step' expired 2.0 s ago in rank 1, pid 4242");
}

int main(void)
{
    CT_RUN(test_pytorch_lines);
    CT_RUN(test_bad_requests);
    CT_RUN(test_table);
    CT_RUN(test_cause);
    return 0;
}
