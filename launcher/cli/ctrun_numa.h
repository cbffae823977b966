/*
 * ctrun_numa.h - --numa_binding: the CPUs each worker is bound to, as torchrun 2.15 computes them
 * (torch/numa/binding.py), read from sysfs. Worker i uses CUDA device i (its local rank); the
 * device's NUMA node is /sys/bus/pci/devices/<pci address>/numa_node (-1 counts as node 0), and
 * only CPUs this process may run on (its affinity mask) are ever chosen:
 *
 *   node          every CPU of the device's NUMA node;
 *   socket        every CPU of every NUMA node on the device's socket (physical_package_id);
 *   exclusive     the node's physical cores (thread siblings together) divided evenly among the
 *                 node's devices in device order, the first (cores % devices) getting one more;
 *   core-complex  one group of CPUs that share the last-level cache, a different one for each of
 *                 the node's devices where possible (largest groups first).
 *
 * torchrun wraps each worker's command in `numactl --physcpubind=LIST`; ctrun sets the same CPU
 * list as the worker's affinity between fork and exec (ctrun_proc.h), so numactl is not needed.
 * The binding is computed once, at start: a failure (no CUDA device for a local rank, a sysfs
 * file missing, too few cores for the devices of a node) is an error before any worker starts,
 * where torchrun fails when it starts the workers.
 *
 * Deliberately not here: the CUDA driver (the caller passes each device's PCI address; see
 * ctrun_gpu_pci in ctrun_nproc.h) and applying the binding.
 */
#ifndef CTRUN_NUMA_H
#define CTRUN_NUMA_H

#include <stddef.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ctrun_numa_mode {
    CTRUN_NUMA_NONE = 0,
    CTRUN_NUMA_NODE,
    CTRUN_NUMA_SOCKET,
    CTRUN_NUMA_EXCLUSIVE,
    CTRUN_NUMA_CORE_COMPLEX,
} ctrun_numa_mode_t;

/* The CPUs of one worker, as a sorted list of CPU numbers. */
typedef struct ctrun_cpu_list {
    int *cpus;
    size_t count;
} ctrun_cpu_list_t;

/* Parses a --numa_binding value: node, socket, exclusive or core-complex. CT_EPARSE otherwise,
 * with the choices in the message. */
int ctrun_numa_mode_parse(const char *text, ctrun_numa_mode_t *mode, ct_errbuf_t *eb);
const char *ctrun_numa_mode_name(ctrun_numa_mode_t mode);

/* Computes the CPUs of local ranks 0..nranks-1. sysfs: the sysfs root ("/sys"); pci: the PCI
 * address ("0000:3b:00.0") of each of the ndevices visible CUDA devices, in device order;
 * allowed: the CPUs this process may use. out[nranks] is filled (free each with
 * ctrun_cpu_list_free). Errors: CT_EPARSE / CT_ERANGE_VALUE / -errno with the file or the rank
 * in eb; out is then left empty. */
int ctrun_numa_bind(const char *sysfs, ctrun_numa_mode_t mode, const char *const *pci, int ndevices,
                    const ctrun_cpu_list_t *allowed, int nranks, ctrun_cpu_list_t *out,
                    ct_errbuf_t *eb);

/* Parses a sysfs CPU list ("0-3,8,10-11\n"). CT_EPARSE on anything else. */
int ctrun_cpu_list_parse(const char *text, ctrun_cpu_list_t *out, ct_errbuf_t *eb);

/* Writes the list in numactl's range form ("0-3,8,10-11"); truncated to size. */
void ctrun_cpu_list_format(const ctrun_cpu_list_t *list, char *buf, size_t size);

/* This process's CPUs (sched_getaffinity). */
int ctrun_cpu_list_allowed(ctrun_cpu_list_t *out, ct_errbuf_t *eb);

void ctrun_cpu_list_free(ctrun_cpu_list_t *list);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_NUMA_H */
