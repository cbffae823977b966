/*
 * test_ctrun_nproc.c - --nproc_per_node values: integers as Python's int() takes them, cpu,
 * and gpu/auto through the forked driver probe, run against a stand-in driver library
 * (argv[1]) and against a library that does not exist.
 */
#include <stdlib.h>
#include <unistd.h>

#include "ct_test.h"
#include "ctrun_nproc.h"

static const char *ct__fake;

static void test_integers_and_words(void)
{
    ctrun_nproc_kind_t kind;
    int n = 0;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ctrun_nproc_resolve("4", ct__fake, &kind, &n, &eb));
    CT_ASSERT_EQ(kind, CTRUN_NPROC_INT);
    CT_ASSERT_EQ(n, 4);
    CT_ASSERT_OK(ctrun_nproc_resolve(" +2 ", ct__fake, &kind, &n, &eb));
    CT_ASSERT_EQ(n, 2);
    CT_ASSERT_ERR(ctrun_nproc_resolve("0", ct__fake, &kind, &n, &eb), CT_ERANGE_VALUE);
    CT_ASSERT_STR_EQ(eb.msg, "0 is out of range (expected 1..65536)");
    CT_ASSERT_ERR(ctrun_nproc_resolve("-3", ct__fake, &kind, &n, &eb), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ctrun_nproc_resolve("foo", ct__fake, &kind, &n, &eb), CT_EPARSE);
    CT_ASSERT_STR_EQ(eb.msg,
                     "unsupported value \"foo\" (expected a positive integer, auto, cpu or gpu)");
    CT_ASSERT_ERR(ctrun_nproc_resolve("xpu", ct__fake, &kind, &n, &eb), CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "not supported by ctrun");
    CT_ASSERT_ERR(ctrun_nproc_resolve("2.0", ct__fake, &kind, &n, &eb), CT_EPARSE);
    CT_ASSERT_OK(ctrun_nproc_resolve("cpu", ct__fake, &kind, &n, &eb));
    CT_ASSERT_EQ(kind, CTRUN_NPROC_CPU);
    CT_ASSERT_EQ(n, sysconf(_SC_NPROCESSORS_ONLN));
}

static void test_gpu_through_the_probe(void)
{
    ctrun_nproc_kind_t kind;
    int n = 0;
    ct_errbuf_t eb = {{0}};
    setenv("CT_FAKE_CUDA_DEVICES", "3", 1);
    CT_ASSERT_OK(ctrun_gpu_count(ct__fake, &n, &eb));
    CT_ASSERT_EQ(n, 3);
    CT_ASSERT_OK(ctrun_nproc_resolve("gpu", ct__fake, &kind, &n, &eb));
    CT_ASSERT_EQ(kind, CTRUN_NPROC_GPU);
    CT_ASSERT_EQ(n, 3);
    CT_ASSERT_OK(ctrun_nproc_resolve("auto", ct__fake, &kind, &n, &eb));
    CT_ASSERT_EQ(kind, CTRUN_NPROC_AUTO);
    CT_ASSERT_EQ(n, 3);

    /* No device: gpu is an error naming the reason, auto falls back to the CPUs. */
    setenv("CT_FAKE_CUDA_DEVICES", "0", 1);
    CT_ASSERT_ERR(ctrun_nproc_resolve("gpu", ct__fake, &kind, &n, &eb), CT_EPARSE);
    CT_ASSERT_STR_EQ(eb.msg, "\"gpu\" needs a CUDA GPU, but Cuda is not available (the CUDA "
                             "driver reports no device)");
    CT_ASSERT_OK(ctrun_nproc_resolve("auto", ct__fake, &kind, &n, &eb));
    CT_ASSERT_EQ(n, sysconf(_SC_NPROCESSORS_ONLN));

    /* cuInit failing (100 = CUDA_ERROR_NO_DEVICE, e.g. CUDA_VISIBLE_DEVICES="") likewise. */
    setenv("CT_FAKE_CUDA_DEVICES", "2", 1);
    setenv("CT_FAKE_CUINIT", "100", 1);
    CT_ASSERT_OK(ctrun_gpu_count(ct__fake, &n, &eb));
    CT_ASSERT_EQ(n, 0);
    CT_ASSERT_STR_EQ(eb.msg, "cuInit failed with CUDA error 100 (no CUDA-capable device is "
                             "detected)");
    unsetenv("CT_FAKE_CUINIT");

    /* No driver library at all. */
    CT_ASSERT_OK(ctrun_gpu_count("/nonexistent/libcuda.so.1", &n, &eb));
    CT_ASSERT_EQ(n, 0);
    CT_ASSERT_STR_CONTAINS(eb.msg, "/nonexistent/libcuda.so.1");
    CT_ASSERT_ERR(ctrun_nproc_resolve("gpu", "/nonexistent/libcuda.so.1", &kind, &n, &eb),
                  CT_EPARSE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "Cuda is not available (/nonexistent/libcuda.so.1");

    /* A library without the driver entry points. */
    CT_ASSERT_OK(ctrun_gpu_count("libm.so.6", &n, &eb));
    CT_ASSERT_EQ(n, 0);
    CT_ASSERT_STR_EQ(eb.msg, "libm.so.6 has no cuInit/cuDeviceGetCount");
}

int main(int argc, char **argv)
{
    if (argc < 2)
        CT_SKIP("usage: test_ctrun_nproc FAKE_LIBCUDA");
    ct__fake = argv[1];
    CT_RUN(test_integers_and_words);
    CT_RUN(test_gpu_through_the_probe);
    return 0;
}
