/*
 * fake_libcuda.c - a stand-in for the CUDA driver library, loaded by ctrun's GPU probe in the
 * tests: cuInit returns CT_FAKE_CUINIT (default 0) and cuDeviceGetCount reports
 * CT_FAKE_CUDA_DEVICES (default 0), so every branch of --nproc_per_node gpu/auto can be
 * exercised without a GPU.
 */
#include <stdlib.h>

int cuInit(unsigned int flags);
int cuDeviceGetCount(int *count);

int cuInit(unsigned int flags)
{
    (void)flags;
    const char *rc = getenv("CT_FAKE_CUINIT");
    return rc ? atoi(rc) : 0;
}

int cuDeviceGetCount(int *count)
{
    const char *n = getenv("CT_FAKE_CUDA_DEVICES");
    *count = n ? atoi(n) : 0;
    return 0;
}
