/*
 * ct_cuda_emu.cc - the emulator of ct_cuda_emu.h: runtime API on host memory, launches run as
 * fibers with real barriers, cuBLAS sgemm on the CPU BLAS. Test support only; see the header
 * for what is and is not modelled.
 *
 * Scheduling: the fibers of a block are resumed in index order (or reverse, CT_EMU_ORDER), each
 * running until it waits at a barrier or ends; a barrier releases when every live thread of its
 * scope (the block, or the warp) has arrived, and the last arriver runs on. A pass that resumes
 * nobody while threads still wait is a deadlock: the emulator prints who waits where and aborts,
 * which makes the test fail loudly instead of hanging.
 */
#include "ct_cuda_emu.h"

#include <cblas.h>
#include <map>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <ucontext.h>
#include <vector>

#include "cublas_v2.h"

/* ---- context switching -----------------------------------------------------------------------
 * On x86-64 a fiber switch is six callee-saved registers and the stack pointer (the System V ABI
 * leaves everything else to the caller): ct_emu__switch below, no system call. glibc's
 * swapcontext also saves the signal mask with a system call on every switch, which made the
 * emulator spend most of its time in the kernel; it remains the fallback for other machines and
 * for sanitizer builds, which only understand stack switches they are told about. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define CT_EMU_ASM_SWITCH 1
extern "C" void ct_emu__switch(void **save_sp, void *load_sp);
__asm__(".text\n"
        ".globl ct_emu__switch\n"
        ".type ct_emu__switch,@function\n"
        "ct_emu__switch:\n"
        "    pushq %rbp\n"
        "    pushq %rbx\n"
        "    pushq %r12\n"
        "    pushq %r13\n"
        "    pushq %r14\n"
        "    pushq %r15\n"
        "    movq %rsp, (%rdi)\n"
        "    movq %rsi, %rsp\n"
        "    popq %r15\n"
        "    popq %r14\n"
        "    popq %r13\n"
        "    popq %r12\n"
        "    popq %rbx\n"
        "    popq %rbp\n"
        "    ret\n"
        ".size ct_emu__switch, .-ct_emu__switch\n");
#else
#define CT_EMU_ASM_SWITCH 0
#endif

/* ---- fibers and barriers ----------------------------------------------------------------------
 */

enum ct_emu_state { CT_EMU_RUNNABLE, CT_EMU_WAIT_BLOCK, CT_EMU_WAIT_WARP, CT_EMU_DONE };

struct ct_emu_fiber {
    ucontext_t ctx;
    void *sp; /* saved stack pointer (CT_EMU_ASM_SWITCH) */
    char *stack;
    dim3 tid;
    int linear, warp, lane;
    ct_emu_state state;
    unsigned wait_gen;
};

struct ct_emu_warp {
    int live;        /* lanes not yet ended */
    unsigned exited; /* lane bits of ended lanes */
    int arrived;     /* lanes waiting at the current warp barrier */
    unsigned gen;    /* completed warp barriers */
    uint64_t slot[2][32];
    unsigned slot_gen[2][32]; /* the barrier generation each slot was written for */
};

ct_emu_fiber *ct_emu__cur;
dim3 ct_emu__block_idx, ct_emu__block_dim, ct_emu__grid_dim;

#if CT_EMU_ASM_SWITCH
static void *ct_emu__sched_sp;
#else
static ucontext_t ct_emu__sched;
#endif
static std::vector<ct_emu_fiber> ct_emu__fibers;

/* Frees the fiber stacks at exit (before the vector holding them goes), so leak checkers see a
 * clean exit. */
static struct ct_emu_stacks_owner {
    ~ct_emu_stacks_owner()
    {
        for (ct_emu_fiber &f : ct_emu__fibers)
            free(f.stack);
        ct_emu__fibers.clear();
    }
} ct_emu__stacks_owner;
static std::vector<ct_emu_warp> ct_emu__warps;
static const std::function<void()> *ct_emu__body;
static int ct_emu__nthreads, ct_emu__block_live, ct_emu__block_arrived;
static unsigned ct_emu__block_gen;
static unsigned char *ct_emu__smem;
static size_t ct_emu__smem_size;
static cudaError_t ct_emu__last_error = cudaSuccess;
static uint64_t ct_emu__launches;
static std::map<const void *, int> ct_emu__smem_attr;

static const size_t CT_EMU_STACK = 256 * 1024;
static const int CT_EMU_SMEM_DEFAULT = 48 * 1024;
static const int CT_EMU_SMEM_OPTIN = 232448; /* H100: 227 KiB */

[[noreturn]] static void ct_emu__die(const char *what)
{
    fprintf(stderr, "cuda-emu: %s (block %u,%u,%u)\n", what, ct_emu__block_idx.x,
            ct_emu__block_idx.y, ct_emu__block_idx.z);
    fflush(stderr);
    abort();
}

const dim3 &ct_emu_thread_idx(void)
{
    if (!ct_emu__cur)
        ct_emu__die("threadIdx read outside a kernel");
    return ct_emu__cur->tid;
}

int ct_emu_lane(void)
{
    if (!ct_emu__cur)
        ct_emu__die("lane asked outside a kernel");
    return ct_emu__cur->lane;
}

static void ct_emu__yield(void)
{
    ct_emu_fiber *me = ct_emu__cur;
#if CT_EMU_ASM_SWITCH
    ct_emu__switch(&me->sp, ct_emu__sched_sp);
#else
    if (swapcontext(&me->ctx, &ct_emu__sched) != 0)
        ct_emu__die("swapcontext failed");
#endif
}

static void ct_emu__resume(ct_emu_fiber *f)
{
#if CT_EMU_ASM_SWITCH
    ct_emu__switch(&ct_emu__sched_sp, f->sp);
#else
    if (swapcontext(&ct_emu__sched, &f->ctx) != 0)
        ct_emu__die("swapcontext failed");
#endif
}

static void ct_emu__wake(ct_emu_state waiting, int warp)
{
    for (int k = 0; k < ct_emu__nthreads; k++) {
        ct_emu_fiber &f = ct_emu__fibers[(size_t)k];
        if (f.state == waiting && (warp < 0 || f.warp == warp))
            f.state = CT_EMU_RUNNABLE;
    }
}

/* The block barrier completes when its arrivals reach the live threads (threads that ended
 * count as arrived, as on the hardware). */
static void ct_emu__block_check_release(void)
{
    if (ct_emu__block_arrived > 0 && ct_emu__block_arrived == ct_emu__block_live) {
        ct_emu__block_arrived = 0;
        ct_emu__block_gen++;
        ct_emu__wake(CT_EMU_WAIT_BLOCK, -1);
    }
}

void __syncthreads(void)
{
    ct_emu_fiber *me = ct_emu__cur;
    if (!me)
        ct_emu__die("__syncthreads outside a kernel");
    const unsigned gen = ct_emu__block_gen;
    ct_emu__block_arrived++;
    ct_emu__block_check_release();
    if (ct_emu__block_gen != gen)
        return; /* this thread completed it */
    me->state = CT_EMU_WAIT_BLOCK;
    me->wait_gen = gen;
    ct_emu__yield();
}

static void ct_emu__warp_check_release(ct_emu_warp &w, int warp)
{
    if (w.arrived > 0 && w.arrived == w.live) {
        w.arrived = 0;
        w.gen++;
        ct_emu__wake(CT_EMU_WAIT_WARP, warp);
    }
}

/* A warp barrier over the full mask of live lanes. Only full-warp masks are used by the kernels;
 * a mask naming a lane that has ended is a bug there (its value would be undefined). */
static void ct_emu__warp_barrier(unsigned mask)
{
    ct_emu_fiber *me = ct_emu__cur;
    if (!me)
        ct_emu__die("warp barrier outside a kernel");
    ct_emu_warp &w = ct_emu__warps[(size_t)me->warp];
    const int nthreads = (int)(ct_emu__block_dim.x * ct_emu__block_dim.y * ct_emu__block_dim.z);
    const int width = nthreads - me->warp * 32 < 32 ? nthreads - me->warp * 32 : 32;
    const unsigned full = width == 32 ? 0xffffffffu : ((1u << width) - 1u);
    if (mask != full)
        ct_emu__die("warp intrinsic with a partial mask (the kernels use full warps)");
    const unsigned gen = w.gen;
    w.arrived++;
    ct_emu__warp_check_release(w, me->warp);
    if (w.gen != gen)
        return;
    me->state = CT_EMU_WAIT_WARP;
    me->wait_gen = gen;
    ct_emu__yield();
}

void __syncwarp(unsigned mask)
{
    ct_emu__warp_barrier(mask);
}

uint64_t ct_emu_exchange(unsigned mask, uint64_t mine, int src_lane)
{
    ct_emu_fiber *me = ct_emu__cur;
    if (!me)
        ct_emu__die("shuffle outside a kernel");
    ct_emu_warp &w = ct_emu__warps[(size_t)me->warp];
    const unsigned gen = w.gen, parity = gen & 1u;
    w.slot[parity][me->lane] = mine;
    w.slot_gen[parity][me->lane] = gen;
    ct_emu__warp_barrier(mask);
    /* Every live lane has written this generation's slot; the next exchange writes the other
     * set, and the one after that cannot start before every lane has read this one. A slot
     * from another generation belongs to a lane that ended before this shuffle. */
    if (w.slot_gen[parity][src_lane] != gen)
        ct_emu__die("shuffle reads a lane that did not take part (ended before it)");
    return w.slot[parity][src_lane];
}

static void ct_emu__trampoline(void)
{
    ct_emu_fiber *me = ct_emu__cur;
    (*ct_emu__body)();
    me->state = CT_EMU_DONE;
    ct_emu_warp &w = ct_emu__warps[(size_t)me->warp];
    w.live--;
    w.exited |= 1u << me->lane;
    if (w.arrived > 0)
        ct_emu__die("a lane ended while others of its warp wait at a warp barrier");
    ct_emu__block_live--;
    ct_emu__block_check_release();
    ct_emu__yield();
    ct_emu__die("an ended fiber was resumed");
}

/* Prepares fiber f to start in ct_emu__trampoline on its own stack. */
static void ct_emu__prepare(ct_emu_fiber *f)
{
#if CT_EMU_ASM_SWITCH
    /* The frame ct_emu__switch pops: six registers, then the address `ret` jumps to; above it a
     * null return address, so the trampoline starts with the stack aligned as after a call. */
    uintptr_t top = ((uintptr_t)f->stack + CT_EMU_STACK) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = NULL;
    *--sp = (void *)ct_emu__trampoline;
    for (int k = 0; k < 6; k++)
        *--sp = NULL;
    f->sp = sp;
#else
    if (getcontext(&f->ctx) != 0)
        ct_emu__die("getcontext failed");
    f->ctx.uc_stack.ss_sp = f->stack;
    f->ctx.uc_stack.ss_size = CT_EMU_STACK;
    f->ctx.uc_link = NULL;
    makecontext(&f->ctx, ct_emu__trampoline, 0);
#endif
}

static bool ct_emu__reverse(void)
{
    const char *o = getenv("CT_EMU_ORDER");
    return o && strcmp(o, "reverse") == 0;
}

static void ct_emu__run_block(int nthreads)
{
    const bool reverse = ct_emu__reverse();
    ct_emu__nthreads = nthreads;
    ct_emu__block_live = nthreads;
    ct_emu__block_arrived = 0;
    ct_emu__block_gen = 0;
    const int nwarps = (nthreads + 31) / 32;
    ct_emu__warps.assign((size_t)nwarps, ct_emu_warp());
    for (int w = 0; w < nwarps; w++)
        ct_emu__warps[(size_t)w].live = nthreads - w * 32 < 32 ? nthreads - w * 32 : 32;
    if (ct_emu__smem_size)
        memset(ct_emu__smem, 0xff, ct_emu__smem_size); /* NaN until written */
    for (int t = 0; t < nthreads; t++) {
        ct_emu_fiber &f = ct_emu__fibers[(size_t)t];
        f.linear = t;
        f.warp = t / 32;
        f.lane = t % 32;
        f.tid = dim3((unsigned)t % ct_emu__block_dim.x,
                     ((unsigned)t / ct_emu__block_dim.x) % ct_emu__block_dim.y,
                     (unsigned)t / (ct_emu__block_dim.x * ct_emu__block_dim.y));
        f.state = CT_EMU_RUNNABLE;
        ct_emu__prepare(&f);
    }
    for (;;) {
        bool ran = false, waiting = false;
        for (int k = 0; k < nthreads; k++) {
            ct_emu_fiber &f = ct_emu__fibers[(size_t)(reverse ? nthreads - 1 - k : k)];
            if (f.state == CT_EMU_RUNNABLE) {
                ct_emu__cur = &f;
                ct_emu__resume(&f);
                ct_emu__cur = NULL;
                ran = true;
            }
        }
        for (int k = 0; k < nthreads; k++)
            waiting |= ct_emu__fibers[(size_t)k].state != CT_EMU_DONE;
        if (!waiting)
            return;
        if (!ran) {
            for (int k = 0; k < nthreads; k++) {
                const ct_emu_fiber &f = ct_emu__fibers[(size_t)k];
                if (f.state == CT_EMU_WAIT_BLOCK || f.state == CT_EMU_WAIT_WARP)
                    fprintf(stderr, "cuda-emu: thread %d (warp %d lane %d) waits at a %s barrier\n",
                            k, f.warp, f.lane, f.state == CT_EMU_WAIT_BLOCK ? "block" : "warp");
            }
            ct_emu__die("deadlock: threads wait at barriers that cannot complete");
        }
    }
}

void *ct_emu_dynamic_smem(void)
{
    return ct_emu__smem;
}

cudaError_t ct_emu_func_set_attribute(const void *kernel, enum cudaFuncAttribute attr, int value)
{
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
        value > CT_EMU_SMEM_OPTIN)
        return ct_emu__last_error = cudaErrorInvalidValue;
    ct_emu__smem_attr[kernel] = value;
    return cudaSuccess;
}

void ct_emu_launch(const void *kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   const std::function<void()> &body)
{
    (void)stream;
    const uint64_t nthreads = (uint64_t)block.x * block.y * block.z;
    const auto it = ct_emu__smem_attr.find(kernel);
    const size_t smem_max = it != ct_emu__smem_attr.end() && it->second > CT_EMU_SMEM_DEFAULT
                                ? (size_t)it->second
                                : (size_t)CT_EMU_SMEM_DEFAULT;
    if (nthreads == 0 || nthreads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 ||
        grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) {
        ct_emu__last_error = cudaErrorInvalidConfiguration;
        return;
    }
    if (smem > smem_max) {
        /* The driver refuses a launch asking more than the kernel's limit. */
        ct_emu__last_error = cudaErrorInvalidValue;
        return;
    }
    ct_emu__launches++;
    if (ct_emu__fibers.size() < nthreads) {
        size_t old = ct_emu__fibers.size();
        ct_emu__fibers.resize(nthreads);
        for (size_t k = old; k < nthreads; k++) {
            ct_emu__fibers[k].stack = (char *)malloc(CT_EMU_STACK);
            if (!ct_emu__fibers[k].stack)
                ct_emu__die("out of memory for fiber stacks");
        }
    }
    std::vector<unsigned char> smem_buf(smem ? smem + 16 : 0);
    ct_emu__smem =
        smem ? (unsigned char *)(((uintptr_t)smem_buf.data() + 15) & ~(uintptr_t)15) : NULL;
    ct_emu__smem_size = smem;
    ct_emu__body = &body;
    ct_emu__block_dim = block;
    ct_emu__grid_dim = grid;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                ct_emu__block_idx = dim3(x, y, z);
                ct_emu__run_block((int)nthreads);
            }
    ct_emu__body = NULL;
    ct_emu__smem = NULL;
    ct_emu__smem_size = 0;
}

/* ---- runtime API ------------------------------------------------------------------------------
 */

extern "C" {

uint64_t ct_emu_launch_count(void)
{
    return ct_emu__launches;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    return device == 0 ? cudaSuccess : (ct_emu__last_error = cudaErrorInvalidValue);
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    if (device != 0)
        return ct_emu__last_error = cudaErrorInvalidValue;
    switch (attr) {
    case cudaDevAttrMultiProcessorCount:
        *value = 132;
        return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
        *value = CT_EMU_SMEM_OPTIN;
        return cudaSuccess;
    }
    return ct_emu__last_error = cudaErrorInvalidValue;
}

const char *cudaGetErrorName(cudaError_t error)
{
    switch (error) {
    case cudaSuccess:
        return "cudaSuccess";
    case cudaErrorInvalidValue:
        return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
        return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
        return "cudaErrorInvalidConfiguration";
    case cudaErrorNoDevice:
        return "cudaErrorNoDevice";
    case cudaErrorLaunchFailure:
        return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported:
        return "cudaErrorNotSupported";
    case cudaErrorUnknown:
        return "cudaErrorUnknown";
    }
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t error)
{
    switch (error) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInvalidConfiguration:
        return "invalid configuration argument";
    case cudaErrorNoDevice:
        return "no CUDA-capable device is detected";
    case cudaErrorLaunchFailure:
        return "unspecified launch failure";
    case cudaErrorNotSupported:
        return "operation not supported (by the CPU emulator)";
    case cudaErrorUnknown:
        return "unknown error";
    }
    return "unknown error";
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = ct_emu__last_error;
    ct_emu__last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    return ct_emu__last_error;
}

cudaError_t cudaMalloc(void **ptr, size_t size)
{
    void *p = NULL;
    if (posix_memalign(&p, 256, size ? size : 1) != 0) {
        *ptr = NULL;
        return ct_emu__last_error = cudaErrorMemoryAllocation;
    }
    memset(p, 0xff, size); /* device memory starts as garbage: NaN here */
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaFree(void *ptr)
{
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    (void)kind;
    if (count)
        memmove(dst, src, count);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    (void)stream;
    return cudaMemcpy(dst, src, count, kind);
}

cudaError_t cudaMemset(void *ptr, int value, size_t count)
{
    if (count)
        memset(ptr, value, count);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *ptr, int value, size_t count, cudaStream_t stream)
{
    (void)stream;
    return cudaMemset(ptr, value, count);
}

cudaError_t cudaDeviceSynchronize(void)
{
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *stream)
{
    /* A distinct non-NULL handle; streams are synchronous here. */
    *stream = (cudaStream_t)malloc(1);
    return *stream ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    free(stream);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    (void)stream;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    if (device != 0)
        return ct_emu__last_error = cudaErrorInvalidValue;
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "%s", "CPU emulator (tests/kernels/emu)");
    prop->totalGlobalMem = (size_t)1 << 30;
    prop->multiProcessorCount = 132;
    prop->major = 9;
    prop->minor = 0;
    prop->sharedMemPerBlockOptin = CT_EMU_SMEM_OPTIN;
    return cudaSuccess;
}

struct CUevent_st {
    double ms;
};

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    *event = (cudaEvent_t)calloc(1, sizeof(struct CUevent_st));
    return *event ? cudaSuccess : (ct_emu__last_error = cudaErrorMemoryAllocation);
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    free(event);
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    (void)stream;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    event->ms = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    (void)event;
    return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    *ms = (float)(end->ms - start->ms);
    return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    (void)stream;
    (void)mode;
    return cudaErrorNotSupported;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph)
{
    (void)stream;
    *graph = NULL;
    return cudaErrorNotSupported;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags)
{
    (void)graph;
    (void)flags;
    *exec = NULL;
    return cudaErrorNotSupported;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream)
{
    (void)exec;
    (void)stream;
    return cudaErrorNotSupported;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    (void)exec;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    (void)graph;
    return cudaSuccess;
}

/* ---- cuBLAS -----------------------------------------------------------------------------------
 */

struct cublasContext {
    cudaStream_t stream;
    void *workspace;
    size_t workspace_size;
    int math;
};

cublasStatus_t cublasCreate(cublasHandle_t *handle)
{
    cublasContext *h = (cublasContext *)calloc(1, sizeof *h);
    if (!h)
        return CUBLAS_STATUS_ALLOC_FAILED;
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    free(handle);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = stream;
    handle->workspace = NULL; /* as cuBLAS: back to the default workspace */
    handle->workspace_size = 0;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void *workspace, size_t size)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (((uintptr_t)workspace & 255) != 0)
        return CUBLAS_STATUS_INVALID_VALUE; /* cuBLAS wants 256-byte alignment */
    handle->workspace = workspace;
    handle->workspace_size = size;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->math = (int)mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode(cublasHandle_t handle, cublasPointerMode_t mode)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    return mode == CUBLAS_POINTER_MODE_HOST ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

const char *cublasGetStatusString(cublasStatus_t status)
{
    switch (status) {
    case CUBLAS_STATUS_SUCCESS:
        return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
        return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "the GPU program failed to execute";
    }
    return "unknown cuBLAS status";
}

/* cuBLAS's argument rules for gemm (column-major): lda >= rows of A as stored, and so on. */
cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa,
                           cublasOperation_t transb, int m, int n, int k, const float *alpha,
                           const float *A, int lda, const float *B, int ldb, const float *beta,
                           float *C, int ldc)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    const int arows = transa == CUBLAS_OP_N ? m : k;
    const int brows = transb == CUBLAS_OP_N ? k : n;
    if (m < 0 || n < 0 || k < 0 || lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) ||
        ldc < (m > 1 ? m : 1) || (transa != CUBLAS_OP_N && transa != CUBLAS_OP_T) ||
        (transb != CUBLAS_OP_N && transb != CUBLAS_OP_T))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    if (k == 0) {
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++)
                C[(size_t)j * ldc + i] = *beta == 0.0f ? 0.0f : *beta * C[(size_t)j * ldc + i];
        return CUBLAS_STATUS_SUCCESS;
    }
    cblas_sgemm(CblasColMajor, transa == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                transb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, *alpha, A, lda, B, ldb,
                *beta, C, ldc);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda,
                                         long long int strideA, const float *B, int ldb,
                                         long long int strideB, const float *beta, float *C,
                                         int ldc, long long int strideC, int batchCount)
{
    if (batchCount < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    for (int i = 0; i < batchCount; i++) {
        const cublasStatus_t st = cublasSgemm(handle, transa, transb, m, n, k, alpha, A + i * strideA,
                                              lda, B + i * strideB, ldb, beta, C + i * strideC, ldc);
        if (st != CUBLAS_STATUS_SUCCESS)
            return st;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* x rounded to the nearest bfloat16 (ties to even), as a float; NaN stays NaN. */
static float ct_emu__bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu))
        return x;
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* A copy of the (rows x cols, ld) column-major matrix with every element rounded to bf16. */
static std::vector<float> ct_emu__bf16_copy(const float *a, int rows, int cols, int ld)
{
    std::vector<float> r((size_t)ld * (size_t)(cols > 0 ? cols : 1), 0.0f);
    for (int j = 0; j < cols; j++)
        for (int i = 0; i < rows; i++)
            r[(size_t)j * ld + i] = ct_emu__bf16(a[(size_t)j * ld + i]);
    return r;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void *alpha,
                            const void *A, cudaDataType_t Atype, int lda, const void *B,
                            cudaDataType_t Btype, int ldb, const void *beta, void *C,
                            cudaDataType_t Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo)
{
    if (Atype != CUDA_R_32F || Btype != CUDA_R_32F || Ctype != CUDA_R_32F ||
        algo != CUBLAS_GEMM_DEFAULT ||
        (computeType != CUBLAS_COMPUTE_32F && computeType != CUBLAS_COMPUTE_32F_FAST_16BF))
        return CUBLAS_STATUS_INVALID_VALUE; /* not what kernels/cuda calls */
    const float *a = (const float *)A, *b = (const float *)B;
    std::vector<float> ar, br;
    if (computeType == CUBLAS_COMPUTE_32F_FAST_16BF && m > 0 && n > 0 && k > 0) {
        const int arows = transa == CUBLAS_OP_N ? m : k, acols = transa == CUBLAS_OP_N ? k : m;
        const int brows = transb == CUBLAS_OP_N ? k : n, bcols = transb == CUBLAS_OP_N ? n : k;
        if (lda >= arows && ldb >= brows) {
            ar = ct_emu__bf16_copy(a, arows, acols, lda);
            br = ct_emu__bf16_copy(b, brows, bcols, ldb);
            a = ar.data(), b = br.data();
        }
    }
    return cublasSgemm(handle, transa, transb, m, n, k, (const float *)alpha, a, lda, b, ldb,
                       (const float *)beta, (float *)C, ldc);
}

} /* extern "C" */
