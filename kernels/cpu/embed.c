/*
 * embed.c - item + positional embedding lookup and its scatter-add backward, with both of the
 * reference's positional-id rules (ct_pos_mode_t), and TiSASRec's per-sequence copies of its
 * absolute-position tables. Dropout and the timeline mask that follow the embedding in the
 * model are separate ops; this file only gathers and scatters.
 */
#include <string.h>

#include "ct_kernels.h"
#include "ct_kernels_cpu.h"

/* The positional row of column t; see ct_pos_mode_t. */
static inline int ct_cpu_embed__pos_id(ct_pos_mode_t mode, int32_t item, int t)
{
    if (mode == CT_POS_PADDED)
        return item != 0 ? t + 1 : 0;
    return t;
}

CT__MULTIVERSION void ct_embed_forward_cpu(float *out, const float *wte, const float *wpe,
                                           const int32_t *seq, int B, int L, int C, float scale,
                                           ct_pos_mode_t pos_mode)
{
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < L; t++) {
            int32_t id = seq[(size_t)b * L + t];
            float *o = out + ((size_t)b * L + t) * C;
            const float *e = wte + (size_t)id * C;
            if (wpe) {
                const float *p = wpe + (size_t)ct_cpu_embed__pos_id(pos_mode, id, t) * C;
                for (int c = 0; c < C; c++)
                    o[c] = e[c] * scale + p[c];
            } else {
                for (int c = 0; c < C; c++)
                    o[c] = e[c] * scale;
            }
        }
    }
}

CT__MULTIVERSION void ct_embed_backward_cpu(float *dwte, float *dwpe, const float *dout,
                                            const int32_t *seq, int B, int L, int C, float scale,
                                            ct_pos_mode_t pos_mode)
{
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < L; t++) {
            int32_t id = seq[(size_t)b * L + t];
            const float *d = dout + ((size_t)b * L + t) * C;
            if (id != 0) {
                float *de = dwte + (size_t)id * C;
                for (int c = 0; c < C; c++)
                    de[c] += d[c] * scale;
            }
            if (dwpe) {
                int pid = ct_cpu_embed__pos_id(pos_mode, id, t);
                if (pos_mode == CT_POS_PADDED && pid == 0)
                    continue;
                float *dp = dwpe + (size_t)pid * C;
                for (int c = 0; c < C; c++)
                    dp[c] += d[c];
            }
        }
    }
}

CT__MULTIVERSION void ct_rows_broadcast_forward_cpu(float *out, const float *table, int B, int L,
                                                    int C)
{
    for (int b = 0; b < B; b++)
        memcpy(out + (size_t)b * L * C, table, (size_t)L * C * sizeof *out);
}

CT__MULTIVERSION void ct_rows_broadcast_backward_cpu(float *dtable, const float *dout, int B, int L,
                                                     int C)
{
    const size_t n = (size_t)L * C;
    for (int b = 0; b < B; b++) {
        const float *d = dout + (size_t)b * n;
        for (size_t x = 0; x < n; x++)
            dtable[x] += d[x];
    }
}
