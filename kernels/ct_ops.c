/*
 * ct_ops.c - choosing a backend (ct_ops_open): the one place outside kernels/cuda that knows
 * whether this build has CUDA, so the model code and the trainer never do.
 */
#include "ct_ops.h"

#include <stdlib.h>
#include <string.h>

#include "ct_config.h"
#if CT_HAVE_CUDA
#include "ct_kernels_cuda.h"
#endif

int ct_ops_device_count(void)
{
#if CT_HAVE_CUDA
    return ct_cuda_device_count();
#else
    return 0;
#endif
}

bool ct_ops_have_cuda(void)
{
    return CT_HAVE_CUDA != 0;
}

int ct_ops_open(ct_ops_t *o, const char *device, int local_rank, bool amp, ct_errbuf_t *eb)
{
    const bool cuda = strcmp(device, "cuda") == 0;
    if (!ct_ops_have_cuda() && (cuda || amp))
        return ct_errbuf_set(eb, CT_ENOGPU,
                             "%s: this build has no CUDA (configure with -Dcuda=enabled)",
                             cuda ? "cuda" : "amp");
    const int n = cuda || strcmp(device, "auto") == 0 ? ct_ops_device_count() : 0;
    if (cuda && n < 1) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        return ct_errbuf_set(eb, CT_ENOGPU,
                             "cuda: no CUDA device is visible (CUDA_VISIBLE_DEVICES=%s)",
                             vis ? vis : "(unset)");
    }
#if CT_HAVE_CUDA
    if (n > 0) {
        const int dev = local_rank % n;
        int rc = ct_ops_cuda_init(o, dev, amp);
        if (rc != 0)
            return ct_errbuf_set(eb, rc, "%s: setting up CUDA device %d failed (%s)", device, dev,
                                 ct_strerror(rc));
        return 0;
    }
#else
    (void)local_rank;
#endif
    if (amp)
        return ct_errbuf_set(eb, CT_ENOGPU,
                             "amp: no CUDA device is visible, and the CPU computes in float32");
    ct_ops_cpu_init(o);
    return 0;
}
