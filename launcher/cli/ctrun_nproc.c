/*
 * ctrun_nproc.c - worker counts. The GPU probe is a child that does dlopen, cuInit(0),
 * cuDeviceGetCount, writes one small record to a pipe and _exits; the parent waits for it
 * (tens of milliseconds on a GPU machine, far less where no driver is installed). For
 * --numa_binding the same child also reads each device's PCI address. The CPU
 * count is the number of online CPUs, as Python's os.cpu_count() reports it.
 */
#include "ctrun_nproc.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ct_parse.h"

typedef int (*ctrun_nproc__cu_init_fn)(unsigned int flags);
typedef int (*ctrun_nproc__cu_count_fn)(int *count);
typedef int (*ctrun_nproc__cu_get_fn)(int *device, int ordinal);
typedef int (*ctrun_nproc__cu_attr_fn)(int *value, int attribute, int device);

/* CUdevice_attribute values of the PCI location (cuda.h). */
enum {
    CTRUN_NPROC__PCI_BUS_ID = 33,
    CTRUN_NPROC__PCI_DEVICE_ID = 34,
    CTRUN_NPROC__PCI_DOMAIN_ID = 50,
};

/* What the child sends: the count, or -1 and a reason; with want_pci, each device's PCI
 * address. */
typedef struct ctrun_nproc__probe_msg {
    int count;
    char reason[200];
    char pci[CTRUN_GPU_PCI_MAX][CTRUN_GPU_PCI_LEN];
} ctrun_nproc__probe_msg_t;

/* Each device's "dddd:bb:dd.0", as torch/numa/binding.py formats it from the same attributes. */
static void ctrun_nproc__probe_pci(void *h, ctrun_nproc__probe_msg_t *m)
{
    ctrun_nproc__cu_get_fn cu_get = (ctrun_nproc__cu_get_fn)dlsym(h, "cuDeviceGet");
    ctrun_nproc__cu_attr_fn cu_attr = (ctrun_nproc__cu_attr_fn)dlsym(h, "cuDeviceGetAttribute");
    if (cu_get == NULL || cu_attr == NULL) {
        snprintf(m->reason, sizeof m->reason, "the driver has no cuDeviceGet/GetAttribute");
        m->count = -1;
        return;
    }
    for (int i = 0; i < m->count && i < CTRUN_GPU_PCI_MAX; i++) {
        int dev = 0, domain = 0, bus = 0, device = 0;
        int rc = cu_get(&dev, i);
        if (rc == 0)
            rc = cu_attr(&domain, CTRUN_NPROC__PCI_DOMAIN_ID, dev);
        if (rc == 0)
            rc = cu_attr(&bus, CTRUN_NPROC__PCI_BUS_ID, dev);
        if (rc == 0)
            rc = cu_attr(&device, CTRUN_NPROC__PCI_DEVICE_ID, dev);
        if (rc != 0) {
            snprintf(m->reason, sizeof m->reason,
                     "reading the PCI address of CUDA device %d failed with CUDA error %d", i, rc);
            m->count = -1;
            return;
        }
        snprintf(m->pci[i], sizeof m->pci[i], "%04x:%02x:%02x.0", (unsigned)domain & 0xffffu,
                 (unsigned)bus & 0xffu, (unsigned)device & 0xffu);
    }
}

static void ctrun_nproc__probe(const char *lib, bool want_pci, ctrun_nproc__probe_msg_t *m)
{
    m->count = -1;
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        snprintf(m->reason, sizeof m->reason, "%s", dlerror());
        return;
    }
    ctrun_nproc__cu_init_fn cu_init = (ctrun_nproc__cu_init_fn)dlsym(h, "cuInit");
    ctrun_nproc__cu_count_fn cu_count = (ctrun_nproc__cu_count_fn)dlsym(h, "cuDeviceGetCount");
    if (cu_init == NULL || cu_count == NULL) {
        snprintf(m->reason, sizeof m->reason, "%s has no cuInit/cuDeviceGetCount", lib);
        return;
    }
    int rc = cu_init(0);
    if (rc != 0) {
        snprintf(m->reason, sizeof m->reason, "cuInit failed with CUDA error %d%s", rc,
                 rc == 100 ? " (no CUDA-capable device is detected)" : "");
        return;
    }
    int n = 0;
    rc = cu_count(&n);
    if (rc != 0) {
        snprintf(m->reason, sizeof m->reason, "cuDeviceGetCount failed with CUDA error %d", rc);
        return;
    }
    m->count = n;
    if (want_pci)
        ctrun_nproc__probe_pci(h, m);
}

/* Runs the probe in a child; *m is its answer (count -1 and the reason when it failed). */
static int ctrun_nproc__run_probe(const char *lib, bool want_pci, ctrun_nproc__probe_msg_t *m,
                                  ct_errbuf_t *eb)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return ct_errbuf_set(eb, -errno, "GPU probe: pipe: %s", strerror(errno));
    fflush(NULL); /* nothing buffered may be written twice by the child */
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(fds[0]);
        close(fds[1]);
        return ct_errbuf_set(eb, -e, "GPU probe: fork: %s", strerror(e));
    }
    if (pid == 0) {
        close(fds[0]);
        memset(m, 0, sizeof *m);
        ctrun_nproc__probe(lib, want_pci, m);
        ssize_t w = write(fds[1], m, sizeof *m);
        _exit(w == (ssize_t)sizeof *m ? 0 : 1);
    }
    close(fds[1]);
    size_t got = 0;
    while (got < sizeof *m) {
        ssize_t r = read(fds[0], (char *)m + got, sizeof *m - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (got != sizeof *m) {
        m->count = -1;
        snprintf(m->reason, sizeof m->reason, "the GPU probe using %s crashed", lib);
    }
    m->reason[sizeof m->reason - 1] = '\0';
    return 0;
}

int ctrun_gpu_count(const char *lib, int *count, ct_errbuf_t *eb)
{
    if (lib == NULL || lib[0] == '\0')
        lib = "libcuda.so.1";
    *count = 0;
    ctrun_nproc__probe_msg_t m;
    int rc = ctrun_nproc__run_probe(lib, false, &m, eb);
    if (rc != 0)
        return rc;
    if (m.count < 0) {
        ct_errbuf_set(eb, 0, "%s", m.reason);
        return 0;
    }
    *count = m.count;
    if (m.count == 0)
        ct_errbuf_set(eb, 0, "the CUDA driver reports no device");
    return 0;
}

int ctrun_gpu_pci(const char *lib, char (*pci)[CTRUN_GPU_PCI_LEN], int *count, ct_errbuf_t *eb)
{
    if (lib == NULL || lib[0] == '\0')
        lib = "libcuda.so.1";
    *count = 0;
    ctrun_nproc__probe_msg_t m;
    int rc = ctrun_nproc__run_probe(lib, true, &m, eb);
    if (rc != 0)
        return rc;
    if (m.count < 0)
        return ct_errbuf_set(eb, CT_EPARSE, "no CUDA device: %s", m.reason);
    if (m.count == 0)
        return ct_errbuf_set(eb, CT_EPARSE, "no CUDA device: the CUDA driver reports none");
    *count = m.count < CTRUN_GPU_PCI_MAX ? m.count : CTRUN_GPU_PCI_MAX;
    for (int i = 0; i < *count; i++)
        memcpy(pci[i], m.pci[i], CTRUN_GPU_PCI_LEN);
    return 0;
}

int ctrun_nproc_resolve(const char *text, const char *libcuda, ctrun_nproc_kind_t *kind, int *count,
                        ct_errbuf_t *eb)
{
    int rc = ct_parse_int(text, 1, CTRUN_NPROC_MAX, count, eb);
    if (rc != CT_EPARSE) {
        *kind = CTRUN_NPROC_INT;
        return rc;
    }
    bool cpu = strcmp(text, "cpu") == 0, gpu = strcmp(text, "gpu") == 0;
    bool autosel = strcmp(text, "auto") == 0;
    if (!cpu && !gpu && !autosel) {
        if (strcmp(text, "xpu") == 0)
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "\"xpu\" is not supported by ctrun (expected a "
                                 "positive integer, auto, cpu or gpu)");
        return ct_errbuf_set(eb, CT_EPARSE,
                             "unsupported value \"%.64s\" (expected a positive integer, auto, cpu "
                             "or gpu)",
                             text);
    }
    if (gpu || autosel) {
        int n = 0;
        ct_errbuf_t why = {{0}};
        rc = ctrun_gpu_count(libcuda, &n, &why);
        if (rc != 0)
            return ct_errbuf_set(eb, rc, "%s", why.msg);
        if (n > 0) {
            *kind = gpu ? CTRUN_NPROC_GPU : CTRUN_NPROC_AUTO;
            *count = n < CTRUN_NPROC_MAX ? n : CTRUN_NPROC_MAX;
            return 0;
        }
        if (gpu)
            return ct_errbuf_set(
                eb, CT_EPARSE, "\"gpu\" needs a CUDA GPU, but Cuda is not available (%s)", why.msg);
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    *kind = cpu ? CTRUN_NPROC_CPU : CTRUN_NPROC_AUTO;
    *count = ncpu < 1 ? 1 : ncpu > CTRUN_NPROC_MAX ? CTRUN_NPROC_MAX : (int)ncpu;
    return 0;
}
