/*
 * ct_comm_ring_sum.c - the element-wise loops of the CPU ring's reduction: acc += in and the
 * division of an average, for f32, f64 and bf16. Built on its own with -O3 (like the CPU
 * kernels), because GCC vectorizes loops of unknown length only there; optimisation never
 * changes a result here (no -ffast-math, ISO C mode keeps -ffp-contract=off), so every build
 * adds the same bits. What it does not do: choose the order of summation (the ring does that:
 * each call adds one rank's contribution to a running sum).
 */
#include <string.h>

#include "ct_comm_internal.h"

/* bf16 <-> float (round to nearest even; NaN stays NaN). */
static float ct_comm_ring_sum__bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint16_t ct_comm_ring_sum__f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0)
        return (uint16_t)((u >> 16) | 0x0040u); /* a NaN stays a (quiet) NaN */
    u += 0x7FFFu + ((u >> 16) & 1u);            /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

void ct__comm_sum_f32(float *restrict acc, const float *restrict in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        acc[i] += in[i];
}

void ct__comm_sum_f64(double *restrict acc, const double *restrict in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        acc[i] += in[i];
}

void ct__comm_sum_bf16(uint16_t *restrict acc, const uint16_t *restrict in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        acc[i] = ct_comm_ring_sum__f32_to_bf16(ct_comm_ring_sum__bf16_to_f32(acc[i]) +
                                               ct_comm_ring_sum__bf16_to_f32(in[i]));
}

void ct__comm_div_f32(float *buf, size_t n, int w)
{
    const float d = (float)w;
    for (size_t i = 0; i < n; i++)
        buf[i] /= d;
}

void ct__comm_div_f64(double *buf, size_t n, int w)
{
    const double d = (double)w;
    for (size_t i = 0; i < n; i++)
        buf[i] /= d;
}

void ct__comm_div_bf16(uint16_t *buf, size_t n, int w)
{
    const float d = (float)w;
    for (size_t i = 0; i < n; i++)
        buf[i] = ct_comm_ring_sum__f32_to_bf16(ct_comm_ring_sum__bf16_to_f32(buf[i]) / d);
}
