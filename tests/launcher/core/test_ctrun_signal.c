/*
 * test_ctrun_signal.c - signal names as Python prints them, and --signals_to_handle lists:
 * spellings, duplicates, and the signals that cannot be forwarded.
 */
#include <signal.h>

#include "ct_test.h"
#include "ctrun_signal.h"

static void test_names(void)
{
    char b[32];
    CT_ASSERT_STR_EQ(ctrun_signal_name(SIGSEGV, b, sizeof b), "SIGSEGV");
    CT_ASSERT_STR_EQ(ctrun_signal_name(SIGABRT, b, sizeof b), "SIGABRT");
    CT_ASSERT_STR_EQ(ctrun_signal_name(SIGKILL, b, sizeof b), "SIGKILL");
    CT_ASSERT_STR_EQ(ctrun_signal_name(SIGIO, b, sizeof b), "SIGIO");
    CT_ASSERT_STR_EQ(ctrun_signal_name(SIGRTMIN, b, sizeof b), "SIGRTMIN");
    CT_ASSERT_STR_EQ(ctrun_signal_name(SIGRTMIN + 2, b, sizeof b), "SIGRTMIN+2");
    CT_ASSERT_STR_EQ(ctrun_signal_name(200, b, sizeof b), "SIG200");
}

static void test_from_name(void)
{
    int s = 0;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ctrun_signal_from_name("SIGTERM", &s, &eb));
    CT_ASSERT_EQ(s, SIGTERM);
    CT_ASSERT_OK(ctrun_signal_from_name("usr1", &s, &eb));
    CT_ASSERT_EQ(s, SIGUSR1);
    CT_ASSERT_OK(ctrun_signal_from_name("SIGIOT", &s, &eb));
    CT_ASSERT_EQ(s, SIGABRT);
    CT_ASSERT_OK(ctrun_signal_from_name("10", &s, &eb));
    CT_ASSERT_EQ(s, 10);
    CT_ASSERT_OK(ctrun_signal_from_name("SIGRTMIN+1", &s, &eb));
    CT_ASSERT_EQ(s, SIGRTMIN + 1);
    CT_ASSERT_ERR(ctrun_signal_from_name("SIGNOPE", &s, &eb), CT_EPARSE);
    CT_ASSERT_STR_EQ(eb.msg, "\"SIGNOPE\" is not a signal name");
    CT_ASSERT_ERR(ctrun_signal_from_name("0", &s, &eb), CT_EPARSE);
    CT_ASSERT_ERR(ctrun_signal_from_name("SIG15", &s, &eb), CT_EPARSE);
}

static void test_list(void)
{
    int sigs[CTRUN_SIGNALS_MAX];
    size_t n = 0;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(
        ctrun_signal_list_parse("SIGTERM,SIGINT,SIGHUP,SIGQUIT", sigs, CTRUN_SIGNALS_MAX, &n, &eb));
    CT_ASSERT_EQ(n, 4);
    CT_ASSERT_EQ(sigs[0], SIGTERM);
    CT_ASSERT_EQ(sigs[3], SIGQUIT);
    CT_ASSERT_OK(
        ctrun_signal_list_parse(" SIGUSR1 , SIGUSR2,SIGUSR1", sigs, CTRUN_SIGNALS_MAX, &n, &eb));
    CT_ASSERT_EQ(n, 2);
    CT_ASSERT_EQ(sigs[1], SIGUSR2);
    CT_ASSERT_ERR(ctrun_signal_list_parse("SIGTERM,,SIGINT", sigs, CTRUN_SIGNALS_MAX, &n, &eb),
                  CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "empty signal name");
    CT_ASSERT_ERR(ctrun_signal_list_parse("SIGTERM,SIGKILL", sigs, CTRUN_SIGNALS_MAX, &n, &eb),
                  CT_EPARSE);
    CT_ASSERT_STR_EQ(eb.msg, "SIGKILL cannot be handled and forwarded");
    CT_ASSERT_ERR(ctrun_signal_list_parse("SIGCHLD", sigs, CTRUN_SIGNALS_MAX, &n, &eb), CT_EPARSE);
    CT_ASSERT_ERR(ctrun_signal_list_parse("SIGTERM,SIGINT", sigs, 1, &n, &eb), CT_ELIMIT);
}

int main(void)
{
    CT_RUN(test_names);
    CT_RUN(test_from_name);
    CT_RUN(test_list);
    return 0;
}
