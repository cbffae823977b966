/*
 * gcheck.h - helpers of the GPU twin tests (test_*_gpu.c, suite gpu): skipping without a GPU,
 * device buffers that are freed at exit, uploads and downloads with checked CUDA calls, device
 * poisoning, and the comparisons of a GPU result with its CPU twin's (bit for bit, or within a
 * tolerance that each call site explains). Header-only and static like kcheck.h, on which it
 * builds.
 *
 * The same test sources are also built against the CPU emulator of tests/kernels/emu (suite
 * kernels), where every CUDA call below goes to the emulator instead of a GPU.
 */
#ifndef GCHECK_H
#define GCHECK_H

#include <cuda_runtime_api.h>
#include <string.h>

#include "ct_kernels_cuda.h"
#include "kcheck.h"

#define GK_CUDA_OK(call)                                                                 \
    do {                                                                                 \
        cudaError_t gk__e = (call);                                                      \
        CT_ASSERT_MSG(gk__e == cudaSuccess, "%s: %s", #call, cudaGetErrorString(gk__e)); \
    } while (0)

/* Exits 77 unless a CUDA device is visible. */
__attribute__((unused)) static void gk_require_gpu(void)
{
    if (ct_cuda_device_count() < 1)
        CT_SKIP("no CUDA device visible");
}

/* Device allocations of the running test, freed by gk_free_all. */
#define GK_MAX_BUFFERS 256
__attribute__((unused)) static void *gk__bufs[GK_MAX_BUFFERS];
__attribute__((unused)) static int gk__nbufs;

__attribute__((unused)) static void *gk_alloc_bytes(size_t nbytes)
{
    void *p = NULL;
    CT_ASSERT(gk__nbufs < GK_MAX_BUFFERS);
    GK_CUDA_OK(cudaMalloc(&p, nbytes ? nbytes : 1));
    /* 0xFF bytes: NaN as floats, -1 as ints; an element a kernel forgets shows. */
    GK_CUDA_OK(cudaMemset(p, 0xff, nbytes ? nbytes : 1));
    gk__bufs[gk__nbufs++] = p;
    return p;
}

__attribute__((unused)) static void gk_free_all(void)
{
    GK_CUDA_OK(cudaDeviceSynchronize());
    for (int i = 0; i < gk__nbufs; i++)
        GK_CUDA_OK(cudaFree(gk__bufs[i]));
    gk__nbufs = 0;
}

#define gk_alloc(type, n) ((type *)gk_alloc_bytes((size_t)(n) * sizeof(type)))

__attribute__((unused)) static void gk_upload(void *dev, const void *host, size_t nbytes)
{
    GK_CUDA_OK(cudaMemcpy(dev, host, nbytes, cudaMemcpyHostToDevice));
}

/* Waits for the device, then copies back; any asynchronous failure of the kernels before shows
 * here (and cudaGetLastError must be clean). */
__attribute__((unused)) static void gk_download(void *host, const void *dev, size_t nbytes)
{
    GK_CUDA_OK(cudaDeviceSynchronize());
    GK_CUDA_OK(cudaGetLastError());
    GK_CUDA_OK(cudaMemcpy(host, dev, nbytes, cudaMemcpyDeviceToHost));
}

/* A device copy of a host array. */
#define gk_dup(type, host, n) ((type *)gk_dup_bytes((host), (size_t)(n) * sizeof(type)))
__attribute__((unused)) static void *gk_dup_bytes(const void *host, size_t nbytes)
{
    void *d = gk_alloc_bytes(nbytes);
    gk_upload(d, host, nbytes);
    return d;
}

/* Poisons a device float buffer with NaN (0xFF bytes). */
__attribute__((unused)) static void gk_poison(void *dev, size_t nbytes)
{
    GK_CUDA_OK(cudaMemset(dev, 0xff, nbytes));
}

/* got (downloaded from the GPU) equals ref (the CPU twin's, or another GPU run's) bit for bit. */
#define GK_ASSERT_BITEQ(what, got, ref, n) gk_assert_biteq_at(__FILE__, __LINE__, what, got, ref, n)
__attribute__((unused)) static void gk_assert_biteq_at(const char *file, int line, const char *what,
                                                       const float *got, const float *ref,
                                                       int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t g, r;
        memcpy(&g, &got[i], sizeof g);
        memcpy(&r, &ref[i], sizeof r);
        if (g != r)
            ct_test__fail(file, line,
                          "%s[%lld]: got %.9g (%08x), ref %.9g (%08x): not bit-identical", what,
                          (long long)i, (double)got[i], g, (double)ref[i], r);
    }
    printf("  %-28s n=%-6lld bit-identical\n", what, (long long)n);
}

/* got (GPU) against ref (CPU, float) with kcheck's rule |got - ref| <= atol + rtol |ref|; the
 * worst element is printed as a percentage of its tolerance. */
#define gk_check(what, got, ref, n, atol, rtol) \
    gk_check_at(__FILE__, __LINE__, what, got, ref, n, atol, rtol)
__attribute__((unused)) static double gk_check_at(const char *file, int line, const char *what,
                                                  const float *got, const float *ref, int64_t n,
                                                  double atol, double rtol)
{
    double *r = KC_ALLOC(double, n);
    kc_to_double(r, ref, n);
    double worst = kc_check_at(file, line, what, got, r, n, atol, rtol);
    free(r);
    return worst;
}

/* Host buffers: random floats in [lo, hi) (kcheck's generator, stream chosen per buffer). */
__attribute__((unused)) static float *gk_host_rand(int64_t n, float lo, float hi, uint64_t stream)
{
    float *x = KC_ALLOC(float, n);
    kc_fill(x, n, lo, hi, stream);
    return x;
}

#endif /* GCHECK_H */
