/*
 * test_ctrun_template.c - ${name} substitution matches Python's
 * string.Template.safe_substitute case for case (the expected values were produced by
 * Python 3.11 for local_rank="7").
 */
#include <stdlib.h>

#include "ct_test.h"
#include "ctrun_template.h"

static void ct__check(const char *in, const char *want)
{
    const ctrun_template_var_t vars[] = {{"local_rank", "7"}, {"rank", "12"}};
    char *out = NULL;
    CT_ASSERT_OK(ctrun_template_substitute(in, vars, 1, &out));
    CT_ASSERT_MSG(strcmp(out, want) == 0, "in \"%s\": got \"%s\", want \"%s\"", in, out, want);
    free(out);
}

static void test_python_cases(void)
{
    static const char *const cases[][2] = {
        {"${local_rank}", "7"},
        {"a${local_rank}b", "a7b"},
        {"$local_rank", "7"},
        {"$local_rankx", "$local_rankx"},
        {"${local_rank}x", "7x"},
        {"$$local_rank", "$local_rank"},
        {"$$$local_rank", "$7"},
        {"$", "$"},
        {"a$", "a$"},
        {"$ x", "$ x"},
        {"${local_rank", "${local_rank"},
        {"${ local_rank}", "${ local_rank}"},
        {"$LOCAL_RANK", "$LOCAL_RANK"},
        {"$1", "$1"},
        {"${other}", "${other}"},
        {"$other", "$other"},
        {"x$$y", "x$y"},
        {"$_", "$_"},
        {"${}", "${}"},
        {"$local_rank.$local_rank", "7.7"},
        {"$$$$", "$$"},
        {"${local_rank}}", "7}"},
        {"", ""},
        {"no dollar", "no dollar"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ct__check(cases[i][0], cases[i][1]);
}

static void test_several_names(void)
{
    /* Only the first nvars entries count: "rank" was passed but nvars was 1 above. */
    const ctrun_template_var_t vars[] = {{"role_name", "trainer"}, {"rank", "12"}};
    char *out = NULL;
    CT_ASSERT_OK(ctrun_template_substitute("[${role_name}:$rank] $ranks", vars, 2, &out));
    CT_ASSERT_STR_EQ(out, "[trainer:12] $ranks");
    free(out);
    ct__check("$rank", "$rank");
}

int main(void)
{
    CT_RUN(test_python_cases);
    CT_RUN(test_several_names);
    return 0;
}
