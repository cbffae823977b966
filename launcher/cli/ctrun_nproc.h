/*
 * ctrun_nproc.h - --nproc_per_node: an integer, or cpu/gpu/auto resolved to a count, and how
 * many CUDA GPUs this process may use, found without making CUDA a dependency of the launcher.
 *
 * The CUDA driver library (libcuda.so.1, or CTRUN_LIBCUDA) is loaded with dlopen in a short
 * forked child that calls cuInit and cuDeviceGetCount and reports the count through a pipe,
 * so the driver honours CUDA_VISIBLE_DEVICES (and MIG) exactly as it will for the workers,
 * while the launcher itself never holds a CUDA context, driver threads or driver memory.
 */
#ifndef CTRUN_NPROC_H
#define CTRUN_NPROC_H

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Counts the visible GPUs using the driver library at lib (NULL: "libcuda.so.1"). No driver,
 * a driver without devices or CUDA_VISIBLE_DEVICES hiding them all give *count = 0 and
 * return 0, with the reason in eb ("libcuda.so.1: cannot open shared object file", "cuInit
 * failed with CUDA error 100"). Only a failure to run the probe at all (fork, pipe) is an
 * error (-errno). */
int ctrun_gpu_count(const char *lib, int *count, ct_errbuf_t *eb);

/* The PCI address of each visible CUDA device, in device order ("0000:3b:00.0"), read by the
 * same probe (cuDeviceGetAttribute: PCI domain, bus and device), for --numa_binding. At most
 * CTRUN_GPU_PCI_MAX devices. No device (no driver, none visible) is CT_EPARSE with the reason;
 * a failure to run the probe -errno. */
#define CTRUN_GPU_PCI_MAX 64
#define CTRUN_GPU_PCI_LEN 16
int ctrun_gpu_pci(const char *lib, char (*pci)[CTRUN_GPU_PCI_LEN], int *count, ct_errbuf_t *eb);

/* The most workers one node may run. */
#define CTRUN_NPROC_MAX 65536

typedef enum ctrun_nproc_kind {
    CTRUN_NPROC_INT = 0, /* a number was given */
    CTRUN_NPROC_CPU,     /* "cpu": number of online CPUs */
    CTRUN_NPROC_GPU,     /* "gpu": visible CUDA devices; an error when there are none */
    CTRUN_NPROC_AUTO,    /* "auto": GPUs when there are any, else CPUs */
} ctrun_nproc_kind_t;

/* Resolves a --nproc_per_node value as torchrun does: an integer as Python's int() reads it
 * (1..CTRUN_NPROC_MAX), "cpu", "gpu" or "auto" (libcuda is the driver library for the GPU
 * count, NULL for the default). Errors (CT_EPARSE, CT_ERANGE_VALUE) say what was wrong: an
 * unsupported word, a count out of range, or "gpu" with no GPU visible and why. */
int ctrun_nproc_resolve(const char *text, const char *libcuda, ctrun_nproc_kind_t *kind, int *count,
                        ct_errbuf_t *eb);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_NPROC_H */
