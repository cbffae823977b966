/*
 * ct_cuda_emu.h - a CPU emulator of the part of CUDA that kernels/cuda uses, for tests on
 * machines without a GPU (CI): the same kernel sources, compiled as C++ with
 * -DCT_CUDA_EMULATED, run thread by thread, and the GPU tests run against them unchanged.
 *
 * What it models: a launch runs its blocks one after another; inside a block every CUDA thread
 * is a fiber (ucontext) with its own stack, switched cooperatively at __syncthreads, __syncwarp
 * and the warp shuffles, which are real barriers with exchange slots; a barrier that can never
 * complete (threads waiting at different barriers, a shuffle reading a lane that has exited) is
 * reported and aborts. Launch configurations are checked as the driver checks them (block and
 * grid limits, dynamic shared memory above 48 KiB only after cudaFuncSetAttribute, the H100's
 * 227 KiB opt-in limit); a bad one sets the error that cudaGetLastError returns. Dynamic shared
 * memory and cudaMalloc'd memory start as 0xFF bytes (NaN as floats), so reading what nothing
 * wrote shows. CT_EMU_ORDER=reverse runs the fibers of a block in reverse order, which turns a
 * missing barrier between a writer and a reader into a wrong result in one of the two orders.
 *
 * What it does not model: concurrency between blocks (atomics are trivially atomic, inter-block
 * races are invisible), the memory model beyond barriers, device math libraries (host libm is
 * used, so expf and exp round as glibc does) and fused multiply-add (none is formed), streams
 * (everything is synchronous), timing. cuBLAS sgemm runs on the CPU BLAS after cuBLAS's own
 * argument checks; CUB's radix sort is a stable sort.
 *
 * The C part (runtime API) is what C test programs see through <cuda_runtime_api.h>; the C++
 * part (dim3, float4, thread indices, barriers, shuffles, atomics, intrinsics) is what the
 * kernel sources see.
 */
#ifndef CT_CUDA_EMU_H
#define CT_CUDA_EMU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorNoDevice = 100,
    cudaErrorLaunchFailure = 719,
    cudaErrorNotSupported = 801,
    cudaErrorUnknown = 999,
} cudaError_t;

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;

enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2,
};

/* The fields of the real struct that this project reads. */
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int multiProcessorCount;
    int major, minor;
    size_t sharedMemPerBlockOptin;
};

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
};

enum cudaDeviceAttr {
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device);
const char *cudaGetErrorString(cudaError_t error);
const char *cudaGetErrorName(cudaError_t error);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaMalloc(void **ptr, size_t size);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemset(void *ptr, int value, size_t count);
cudaError_t cudaMemsetAsync(void *ptr, int value, size_t count, cudaStream_t stream);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamCreate(cudaStream_t *stream);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);

/* Events time on the host clock (everything runs synchronously). */
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

/* Graphs: capture is refused (cudaErrorNotSupported); the rest exists so callers compile. */
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                 unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);

/* Emulator statistics and controls for tests: kernels launched since start. */
uint64_t ct_emu_launch_count(void);

#ifdef __cplusplus
}

#include <functional>
#include <math.h>
#include <string.h>

/* ---- the CUDA C++ language, as host C++ ------------------------------------------------- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__   static /* blocks run one at a time: a static is the block's copy */
#define __align__(n) alignas(n)

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};

struct alignas(16) float4 {
    float x, y, z, w;
};
static inline float4 make_float4(float x, float y, float z, float w)
{
    float4 r = {x, y, z, w};
    return r;
}

struct ct_emu_fiber;
extern ct_emu_fiber *ct_emu__cur;
extern dim3 ct_emu__block_idx, ct_emu__block_dim, ct_emu__grid_dim;
const dim3 &ct_emu_thread_idx(void);
#define threadIdx (ct_emu_thread_idx())
#define blockIdx  (ct_emu__block_idx)
#define blockDim  (ct_emu__block_dim)
#define gridDim   (ct_emu__grid_dim)

void __syncthreads(void);
void __syncwarp(unsigned mask = 0xffffffffu);

/* The value src_lane put in, after every live lane of the warp arrived with its own. */
uint64_t ct_emu_exchange(unsigned mask, uint64_t mine, int src_lane);

template <class T> static inline uint64_t ct_emu__bits(T v)
{
    static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    return u;
}
template <class T> static inline T ct_emu__from_bits(uint64_t u)
{
    T v;
    memcpy(&v, &u, sizeof v);
    return v;
}
int ct_emu_lane(void);

template <class T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
    (void)width;
    return ct_emu__from_bits<T>(ct_emu_exchange(mask, ct_emu__bits(v), src & 31));
}
template <class T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
    (void)width;
    return ct_emu__from_bits<T>(
        ct_emu_exchange(mask, ct_emu__bits(v), (ct_emu_lane() ^ lane_mask) & 31));
}
template <class T>
static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    (void)width;
    int src = ct_emu_lane() + (int)delta;
    /* Out of range: the lane keeps its own value (every lane still takes part). */
    uint64_t got = ct_emu_exchange(mask, ct_emu__bits(v), src < 32 ? src : ct_emu_lane());
    return ct_emu__from_bits<T>(got);
}

/* One host thread runs everything: plain read-modify-writes are atomic. */
static inline float atomicAdd(float *p, float v)
{
    float o = *p;
    *p = o + v;
    return o;
}
static inline double atomicAdd(double *p, double v)
{
    double o = *p;
    *p = o + v;
    return o;
}
static inline int atomicAdd(int *p, int v)
{
    int o = *p;
    *p = o + v;
    return o;
}
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)
{
    unsigned long long o = *p;
    *p = o + v;
    return o;
}

/* Round-to-nearest float operations: host float arithmetic (no contraction in ISO C++ mode). */
static inline float __fadd_rn(float a, float b)
{
    return a + b;
}
static inline float __fsub_rn(float a, float b)
{
    return a - b;
}
static inline float __fmul_rn(float a, float b)
{
    return a * b;
}
static inline float __fdiv_rn(float a, float b)
{
    return a / b;
}
static inline float __fsqrt_rn(float a)
{
    return sqrtf(a);
}

/* ---- launches ------------------------------------------------------------------------------ */
void ct_emu_launch(const void *kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   const std::function<void()> &body);
void *ct_emu_dynamic_smem(void);
cudaError_t ct_emu_func_set_attribute(const void *kernel, enum cudaFuncAttribute attr, int value);

template <class T>
static inline cudaError_t cudaFuncSetAttribute(T *kernel, enum cudaFuncAttribute attr, int value)
{
    return ct_emu_func_set_attribute(reinterpret_cast<const void *>(kernel), attr, value);
}

#endif /* __cplusplus */

#endif /* CT_CUDA_EMU_H */
