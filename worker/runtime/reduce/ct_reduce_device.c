/*
 * ct_reduce_device.c - device float buffers over a host backend (the CPU ring, a custom one):
 * the caller's stream is synchronised, the buffer copied to a host staging buffer (grown on first
 * use, kept), reduced there and copied back on the caller's stream. CUDA builds only; the
 * bucketed NCCL path is ct_reduce_nccl.c.
 */
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "ct_cuda_check.h"
#include "ct_reduce_internal.h"

int ct__reduce_staged_f32(ct_reducer_t *r, float *dbuf, int64_t n, ct_errbuf_t *eb)
{
    if (n <= 0)
        return 0;
    if ((size_t)n > r->stage_cap) {
        float *p = NULL;
        CT_CUDA_CHECK(cudaMallocHost((void **)&p, (size_t)n * sizeof(float)), eb);
        ct__reduce_stage_free(r);
        r->stage = p;
        r->stage_cap = (size_t)n;
    }
    cudaStream_t st = (cudaStream_t)r->stream;
    const size_t nbytes = (size_t)n * sizeof(float);
    CT_CUDA_CHECK(cudaMemcpyAsync(r->stage, dbuf, nbytes, cudaMemcpyDeviceToHost, st), eb);
    CT_CUDA_CHECK(cudaStreamSynchronize(st), eb);
    int rc = ct__reduce_host_sum(r, r->stage, n, CT_DTYPE_F32, eb);
    if (rc != 0)
        return rc;
    /* The caller's next work waits for this copy on its stream; the next reduction's copy into
     * the staging buffer comes after it on the same stream, so the host need not wait here. */
    CT_CUDA_CHECK(cudaMemcpyAsync(dbuf, r->stage, nbytes, cudaMemcpyHostToDevice, st), eb);
    return 0;
}

void ct__reduce_stage_free(ct_reducer_t *r)
{
    if (r->stage != NULL)
        (void)cudaFreeHost(r->stage);
    r->stage = NULL;
    r->stage_cap = 0;
}
