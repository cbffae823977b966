/*
 * cub/device/device_radix_sort.cuh of the CPU emulator (tests/kernels/emu): SortPairs as a
 * stable sort on the host. The temporary storage it asks for is treated as real scratch: the
 * arrays and the storage must not overlap (checked), and the storage is filled with garbage on
 * every sort, so nothing can rely on its contents.
 */
#ifndef CT_CUDA_EMU_CUB_RADIX_H
#define CT_CUDA_EMU_CUB_RADIX_H

#include <algorithm>
#include <numeric>
#include <vector>

#include "ct_cuda_emu.h"

namespace cub
{

struct DeviceRadixSort {
    template <class K, class V, class N>
    static cudaError_t SortPairs(void *temp, size_t &temp_bytes, const K *keys_in, K *keys_out,
                                 const V *values_in, V *values_out, N n, int begin_bit = 0,
                                 int end_bit = (int)sizeof(K) * 8, cudaStream_t stream = 0)
    {
        (void)stream;
        const size_t need = 256 + (size_t)n * (sizeof(K) + sizeof(V));
        if (!temp) {
            temp_bytes = need;
            return cudaSuccess;
        }
        if (temp_bytes < need || begin_bit != 0 || end_bit != (int)sizeof(K) * 8)
            return cudaErrorInvalidValue;
        /* The four arrays and the temporary storage must not overlap. */
        const char *lo[5] = {(const char *)temp, (const char *)keys_in, (const char *)keys_out,
                             (const char *)values_in, (const char *)values_out};
        const size_t len[5] = {temp_bytes, (size_t)n * sizeof(K), (size_t)n * sizeof(K),
                               (size_t)n * sizeof(V), (size_t)n * sizeof(V)};
        for (int a = 0; a < 5; a++)
            for (int b = a + 1; b < 5; b++)
                if (len[a] && len[b] && lo[a] < lo[b] + len[b] && lo[b] < lo[a] + len[a])
                    return cudaErrorInvalidValue;
        std::vector<size_t> order((size_t)n);
        std::iota(order.begin(), order.end(), (size_t)0);
        std::stable_sort(order.begin(), order.end(),
                         [&](size_t a, size_t b) { return keys_in[a] < keys_in[b]; });
        std::vector<K> k((size_t)n);
        std::vector<V> v((size_t)n);
        for (size_t i = 0; i < (size_t)n; i++) {
            k[i] = keys_in[order[i]];
            v[i] = values_in[order[i]];
        }
        std::copy(k.begin(), k.end(), keys_out);
        std::copy(v.begin(), v.end(), values_out);
        memset(temp, 0xa5, temp_bytes);
        return cudaSuccess;
    }
};

} // namespace cub

#endif /* CT_CUDA_EMU_CUB_RADIX_H */
