/*
 * device.cu - questions about the GPUs visible to this process.
 */
#include "ct_cuda_common.h"

extern "C" int ct_cuda_device_count(void)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        /* No driver or no device: a normal situation on CPU machines, not an error. */
        ct_log_debug("no usable CUDA device: %s", cudaGetErrorString(e));
        (void)cudaGetLastError(); /* clear the sticky error state */
        return 0;
    }
    return count;
}
