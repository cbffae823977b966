/*
 * embed.cu - item + positional embedding gather and its backward, the twins of
 * kernels/cpu/embed.c; and the item-table scatter shared with the score backward (loss.cu).
 *
 * The positional gradient has one owner per (row, channel): a thread walks the sequences in
 * order, so it adds what the CPU adds in the CPU's order. The item-table gradient cannot be
 * owned that simply (any row may hold any item), so it comes in two flavours: float atomics
 * (no scratch; rows sharing an item are summed in a varying order), or a stable radix sort of
 * the rows by item id (CUB) followed by one warp per item that adds its rows in row order, which
 * is the CPU's loop exactly. Arithmetic is the CPU's single multiply and add per element, with
 * round-to-nearest intrinsics so that no fused multiply-add changes the rounding.
 *
 * Not here: dropout and the timeline mask after the embedding (dropout.cu).
 */
#include <cub/device/device_radix_sort.cuh>

#include "ct_cuda_common.h"

__global__ void ct_cuda_embed__embed_fwd_kernel(float *out, const float *wte, const float *wpe,
                                     const int32_t *seq, int64_t n, int L, int C, float scale,
                                     int padded)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / C;
        const int c = (int)(i - r * C), t = (int)(r % L);
        const int32_t id = seq[r];
        const float e = __fmul_rn(wte[(int64_t)id * C + c], scale);
        if (wpe) {
            const int pid = padded ? (id != 0 ? t + 1 : 0) : t;
            out[i] = __fadd_rn(e, wpe[(int64_t)pid * C + c]);
        } else {
            out[i] = e;
        }
    }
}

extern "C" int ct_embed_forward_cuda(float *out, const float *wte, const float *wpe,
                                     const int32_t *seq, int B, int L, int C, float scale,
                                     ct_pos_mode_t pos_mode, ct_stream_t stream)
{
    CT_CUDA_REQUIRE(B >= 0 && L >= 0 && C >= 0);
    CT_CUDA_REQUIRE(pos_mode == CT_POS_PADDED || pos_mode == CT_POS_ABSOLUTE);
    const int64_t n = (int64_t)B * L * C;
    if (n == 0)
        return 0;
    CT_LAUNCH(ct_cuda_embed__embed_fwd_kernel, ct__grid_1d(n, CT__THREADS), CT__THREADS, 0, stream,
              out, wte, wpe, seq, n, L, C, scale, pos_mode == CT_POS_PADDED);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

/* dwpe[pid(t), c] += dout[b, t, c] for b = 0..B-1 in order: one thread per (t, c). The loads of
 * eight sequences are issued before their additions so that the chain of dependent adds does
 * not wait on one load at a time. */
__global__ void ct_cuda_embed__embed_dwpe_kernel(float *dwpe, const float *dout, const int32_t *seq,
                                                 int B, int L, int C, int padded)
{
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= (int64_t)L * C)
        return;
    const int t = (int)(i / C), c = (int)(i % C);
    float *d = dwpe + (int64_t)(padded ? t + 1 : t) * C + c;
    float acc = *d;
    int b = 0;
    for (; b + 8 <= B; b += 8) {
        float v[8];
        bool keep[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int64_t r = (int64_t)(b + u) * L + t;
            keep[u] = !padded || seq[r] != 0;
            v[u] = dout[r * C + c];
        }
#pragma unroll
        for (int u = 0; u < 8; u++)
            if (keep[u])
                acc = __fadd_rn(acc, v[u]);
    }
    for (; b < B; b++) {
        const int64_t r = (int64_t)b * L + t;
        if (!padded || seq[r] != 0)
            acc = __fadd_rn(acc, dout[r * C + c]);
    }
    *d = acc;
}

extern "C" int ct_embed_backward_cuda(float *dwte, float *dwpe, void *scratch, const float *dout,
                                      const int32_t *seq, int B, int L, int C, float scale,
                                      ct_pos_mode_t pos_mode, ct_stream_t stream)
{
    CT_CUDA_REQUIRE(B >= 0 && L >= 0 && C >= 0);
    CT_CUDA_REQUIRE((int64_t)B * L <= INT32_MAX);
    CT_CUDA_REQUIRE(pos_mode == CT_POS_PADDED || pos_mode == CT_POS_ABSOLUTE);
    if ((int64_t)B * L * C == 0)
        return 0;
    int rc = ct__scatter_rows_cuda(dwte, scratch, dout, seq, NULL, scale, B * L, C, 0,
                                   (cudaStream_t)stream);
    if (rc != 0)
        return rc;
    if (dwpe) {
        const int64_t n = (int64_t)L * C;
        CT_LAUNCH(ct_cuda_embed__embed_dwpe_kernel, (unsigned)CT_CEIL_DIV(n, (int64_t)CT__THREADS),
                  CT__THREADS, 0, stream, dwpe, dout, seq, B, L, C, pos_mode == CT_POS_PADDED);
        CT_CUDA_CHECK_LAUNCH();
    }
    return 0;
}

extern "C" int ct_embed_backward_cuda_scratch(size_t *nbytes, int B, int L)
{
    CT_CUDA_REQUIRE(B >= 0 && L >= 0 && (int64_t)B * L <= INT32_MAX);
    return ct__scatter_rows_scratch(nbytes, B * L);
}

/* ---- the item scatter --------------------------------------------------------------------- */

__global__ void ct_cuda_embed__scatter_atomic_kernel(float *dst, const float *src,
                                                     const int32_t *ids, const float *rowscale,
                                                     float scale, int64_t total, int C,
                                                     int32_t skip)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / C;
        const int32_t id = ids[r];
        if (id == skip)
            continue; /* the padding row gets no gradient */
        const float s = rowscale ? rowscale[r] : scale;
        atomicAdd(dst + (int64_t)id * C + (i - r * C), __fmul_rn(src[i], s));
    }
}

__global__ void ct_cuda_embed__iota_kernel(int32_t *x, int n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = (int32_t)i;
}

/* One warp per position of the sorted ids; the warp at the first position of an id's run adds
 * the run's rows (which the stable sort left in row order) into that id's row, lanes over
 * channels. Every other warp returns at once. The loads of eight rows are issued before their
 * (ordered) additions, so a popular item's long run does not wait on one load at a time. */
__global__ void ct_cuda_embed__scatter_sorted_kernel(float *dst, const int32_t *skeys,
                                                     const int32_t *srows, const float *src,
                                                     const float *rowscale, float scale, int n,
                                                     int C, int32_t skip)
{
    const int64_t w = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
    const int lane = (int)(threadIdx.x & 31);
    if (w >= n)
        return;
    const int32_t id = skeys[w];
    if (id == skip || (w > 0 && skeys[w - 1] == id))
        return;
    int64_t end = w + 1;
    while (end < n && skeys[end] == id)
        end++;
    for (int c = lane; c < C; c += 32) {
        float *d = dst + (int64_t)id * C + c;
        float acc = *d;
        int64_t k = w;
        for (; k + 8 <= end; k += 8) {
            float v[8], s[8];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const int32_t r = srows[k + u];
                s[u] = rowscale ? rowscale[r] : scale;
                v[u] = src[(int64_t)r * C + c];
            }
#pragma unroll
            for (int u = 0; u < 8; u++)
                acc = __fadd_rn(acc, __fmul_rn(v[u], s[u]));
        }
        for (; k < end; k++) {
            const int32_t r = srows[k];
            const float s = rowscale ? rowscale[r] : scale;
            acc = __fadd_rn(acc, __fmul_rn(src[(int64_t)r * C + c], s));
        }
        *d = acc;
    }
}

static size_t ct_cuda_embed__align16(size_t x)
{
    return (x + 15) & ~(size_t)15;
}

/* The sort's temporary size for n keys, as CUB reports it. */
static int ct_cuda_embed__sort_temp_bytes(size_t *bytes, int n)
{
    *bytes = 0;
    CT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(NULL, *bytes, (const int32_t *)NULL,
                                                  (int32_t *)NULL, (const int32_t *)NULL,
                                                  (int32_t *)NULL, n, 0, 32, (cudaStream_t)0),
                  NULL);
    return 0;
}

int ct__scatter_rows_scratch(size_t *nbytes, int n)
{
    size_t temp = 0;
    *nbytes = 0;
    int rc = ct_cuda_embed__sort_temp_bytes(&temp, n);
    if (rc != 0)
        return rc;
    /* sorted ids, row numbers 0..n-1, sorted row numbers, then CUB's temporary storage */
    *nbytes =
        3 * ct_cuda_embed__align16((size_t)n * sizeof(int32_t)) + ct_cuda_embed__align16(temp);
    return 0;
}

int ct__scatter_rows_cuda(float *dst, void *scratch, const float *src, const int32_t *ids,
                          const float *rowscale, float scale, int n, int C, int32_t skip,
                          cudaStream_t stream)
{
    if ((int64_t)n * C == 0)
        return 0;
    if (!scratch) {
        const int64_t total = (int64_t)n * C;
        CT_LAUNCH(ct_cuda_embed__scatter_atomic_kernel, ct__grid_1d(total, CT__THREADS),
                  CT__THREADS, 0, stream, dst, src, ids, rowscale, scale, total, C, skip);
        CT_CUDA_CHECK_LAUNCH();
        return 0;
    }
    CT_CUDA_REQUIRE(((uintptr_t)scratch & 15) == 0);
    size_t temp = 0;
    int rc = ct_cuda_embed__sort_temp_bytes(&temp, n);
    if (rc != 0)
        return rc;
    const size_t part = ct_cuda_embed__align16((size_t)n * sizeof(int32_t));
    char *base = (char *)scratch;
    int32_t *skeys = (int32_t *)base;
    int32_t *rows = (int32_t *)(base + part);
    int32_t *srows = (int32_t *)(base + 2 * part);
    void *tmp = base + 3 * part;

    CT_LAUNCH(ct_cuda_embed__iota_kernel, ct__grid_1d(n, CT__THREADS), CT__THREADS, 0, stream, rows,
              n);
    CT_CUDA_CHECK_LAUNCH();
    /* Radix sort is stable: rows sharing an id stay in row order. Ids are non-negative, all
     * 32 bits are sorted (the table size is not an argument of the ops). */
    CT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(tmp, temp, ids, skeys, (const int32_t *)rows,
                                                  srows, n, 0, 32, stream), NULL);
    const int64_t threads = (int64_t)n * 32;
    CT_LAUNCH(ct_cuda_embed__scatter_sorted_kernel,
              (unsigned)CT_CEIL_DIV(threads, (int64_t)CT__THREADS), CT__THREADS, 0, stream, dst,
              skeys, srows, src, rowscale, scale, n, C, skip);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}
