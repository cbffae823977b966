/*
 * ctrun_numa.c - the four binding modes of ctrun_numa.h over sysfs files. CPU sets are sorted
 * int arrays (a node has at most a few hundred CPUs); every file is read whole with one read.
 */
#include "ctrun_numa.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_parse.h"

static const char *const ctrun_numa__names[] = {
    [CTRUN_NUMA_NONE] = "none",
    [CTRUN_NUMA_NODE] = "node",
    [CTRUN_NUMA_SOCKET] = "socket",
    [CTRUN_NUMA_EXCLUSIVE] = "exclusive",
    [CTRUN_NUMA_CORE_COMPLEX] = "core-complex",
};

int ctrun_numa_mode_parse(const char *text, ctrun_numa_mode_t *mode, ct_errbuf_t *eb)
{
    for (int m = CTRUN_NUMA_NODE; m <= CTRUN_NUMA_CORE_COMPLEX; m++) {
        if (strcmp(text, ctrun_numa__names[m]) == 0) {
            *mode = (ctrun_numa_mode_t)m;
            return 0;
        }
    }
    return ct_errbuf_set(eb, CT_EPARSE,
                         "invalid choice \"%.64s\" (choose from node, socket, exclusive, "
                         "core-complex)",
                         text);
}

const char *ctrun_numa_mode_name(ctrun_numa_mode_t mode)
{
    return mode <= CTRUN_NUMA_CORE_COMPLEX ? ctrun_numa__names[mode] : "?";
}

void ctrun_cpu_list_free(ctrun_cpu_list_t *list)
{
    free(list->cpus);
    list->cpus = NULL;
    list->count = 0;
}

static int ctrun_numa__cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Appends v (sorted and deduplicated later by ctrun_numa__normalize). The capacity is 8, then
 * doubles whenever the list is full: at counts 8, 16, 32... */
static int ctrun_numa__push(ctrun_cpu_list_t *l, int v)
{
    if (l->count == 0 || (l->count >= 8 && (l->count & (l->count - 1)) == 0)) {
        size_t cap = l->count ? l->count * 2 : 8;
        int *g = realloc(l->cpus, cap * sizeof *g);
        if (g == NULL)
            return -ENOMEM;
        l->cpus = g;
    }
    l->cpus[l->count++] = v;
    return 0;
}

static void ctrun_numa__normalize(ctrun_cpu_list_t *l)
{
    if (l->count == 0)
        return;
    qsort(l->cpus, l->count, sizeof *l->cpus, ctrun_numa__cmp_int);
    size_t k = 1;
    for (size_t i = 1; i < l->count; i++) {
        if (l->cpus[i] != l->cpus[k - 1])
            l->cpus[k++] = l->cpus[i];
    }
    l->count = k;
}

static bool ctrun_numa__has(const ctrun_cpu_list_t *l, int v)
{
    return l->count > 0 &&
           bsearch(&v, l->cpus, l->count, sizeof *l->cpus, ctrun_numa__cmp_int) != NULL;
}

int ctrun_cpu_list_parse(const char *text, ctrun_cpu_list_t *out, ct_errbuf_t *eb)
{
    *out = (ctrun_cpu_list_t){0};
    const char *p = text;
    while (*p != '\0') {
        while (*p != '\0' && isspace((unsigned char)*p))
            p++;
        if (*p == '\0')
            break;
        if (*p == ',') {
            p++;
            continue;
        }
        char *end = NULL;
        errno = 0;
        long a = strtol(p, &end, 10);
        long b = a;
        if (end == p || errno != 0 || a < 0 || a > 1 << 20)
            goto bad;
        p = end;
        if (*p == '-') {
            b = strtol(p + 1, &end, 10);
            if (end == p + 1 || errno != 0 || b < a || b > 1 << 20)
                goto bad;
            p = end;
        }
        while (*p != '\0' && isspace((unsigned char)*p))
            p++;
        if (*p != '\0' && *p != ',')
            goto bad;
        for (long v = a; v <= b; v++) {
            if (ctrun_numa__push(out, (int)v) != 0) {
                ctrun_cpu_list_free(out);
                return ct_errbuf_set(eb, -ENOMEM, "out of memory");
            }
        }
    }
    ctrun_numa__normalize(out);
    return 0;
bad:
    ctrun_cpu_list_free(out);
    return ct_errbuf_set(eb, CT_EPARSE, "\"%.64s\" is not a CPU list", text);
}

void ctrun_cpu_list_format(const ctrun_cpu_list_t *list, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < list->count && used < size;) {
        size_t j = i;
        while (j + 1 < list->count && list->cpus[j + 1] == list->cpus[j] + 1)
            j++;
        int n = j == i ? snprintf(buf + used, size - used, "%s%d", used ? "," : "", list->cpus[i])
                       : snprintf(buf + used, size - used, "%s%d-%d", used ? "," : "",
                                  list->cpus[i], list->cpus[j]);
        if (n < 0)
            break;
        used += (size_t)n;
        i = j + 1;
    }
}

int ctrun_cpu_list_allowed(ctrun_cpu_list_t *out, ct_errbuf_t *eb)
{
    *out = (ctrun_cpu_list_t){0};
    for (int ncpu = 1024; ncpu <= (1 << 20); ncpu *= 2) {
        cpu_set_t *set = CPU_ALLOC((size_t)ncpu);
        if (set == NULL)
            return ct_errbuf_set(eb, -ENOMEM, "out of memory");
        size_t bytes = CPU_ALLOC_SIZE((size_t)ncpu);
        if (sched_getaffinity(0, bytes, set) != 0) {
            int e = errno;
            CPU_FREE(set);
            if (e == EINVAL)
                continue;
            return ct_errbuf_set(eb, -e, "sched_getaffinity: %s", strerror(e));
        }
        int rc = 0;
        for (int c = 0; c < ncpu && rc == 0; c++) {
            if (CPU_ISSET_S((size_t)c, bytes, set))
                rc = ctrun_numa__push(out, c);
        }
        CPU_FREE(set);
        if (rc != 0) {
            ctrun_cpu_list_free(out);
            return ct_errbuf_set(eb, rc, "out of memory");
        }
        return 0;
    }
    return ct_errbuf_set(eb, -EINVAL, "sched_getaffinity: too many CPUs");
}

/* ---- sysfs ------------------------------------------------------------------------------- */

typedef struct ctrun_numa__ctx {
    const char *sysfs;
    const char *const *pci;
    int ndevices;
    const ctrun_cpu_list_t *allowed;
    ct_errbuf_t *eb;
} ctrun_numa__ctx_t;

/* Formats a path under the sysfs root into path. Errors name the root. */
__attribute__((format(printf, 3, 4))) static int
ctrun_numa__path(ctrun_numa__ctx_t *c, char path[512], const char *fmt, ...)
{
    int n = snprintf(path, 512, "%s/", c->sysfs);
    va_list ap;
    va_start(ap, fmt);
    int m = n < 0 || n >= 512 ? -1 : vsnprintf(path + n, 512 - (size_t)n, fmt, ap);
    va_end(ap);
    if (m < 0 || n + m >= 512)
        return ct_errbuf_set(c->eb, -ENAMETOOLONG, "a sysfs path under %.64s is too long",
                             c->sysfs);
    return 0;
}

/* Reads a small sysfs file into buf (NUL-terminated). Errors name the path. */
static int ctrun_numa__read(ctrun_numa__ctx_t *c, const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ct_errbuf_set(c->eb, -errno, "%s: %s", path, strerror(errno));
    ssize_t r = read(fd, buf, size - 1);
    int e = errno;
    close(fd);
    if (r < 0)
        return ct_errbuf_set(c->eb, -e, "%s: %s", path, strerror(e));
    buf[r] = '\0';
    return 0;
}

static int ctrun_numa__read_int(ctrun_numa__ctx_t *c, const char *path, int *out)
{
    char buf[64];
    int rc = ctrun_numa__read(c, path, buf, sizeof buf);
    if (rc != 0)
        return rc;
    buf[strcspn(buf, "\n")] = '\0';
    if (ct_parse_int(buf, -1, 1 << 20, out, NULL) != 0)
        return ct_errbuf_set(c->eb, CT_EPARSE, "%s: \"%.32s\" is not a number", path, buf);
    return 0;
}

static int ctrun_numa__read_list(ctrun_numa__ctx_t *c, const char *path, ctrun_cpu_list_t *out)
{
    char buf[4096];
    int rc = ctrun_numa__read(c, path, buf, sizeof buf);
    if (rc != 0)
        return rc;
    return ctrun_cpu_list_parse(buf, out, c->eb);
}

/* The NUMA node of CUDA device d (-1 in sysfs, a single-node machine, is node 0). */
static int ctrun_numa__device_node(ctrun_numa__ctx_t *c, int d, int *node)
{
    char path[512];
    int rc = ctrun_numa__path(c, path, "bus/pci/devices/%s/numa_node", c->pci[d]);
    if (rc == 0)
        rc = ctrun_numa__read_int(c, path, node);
    if (rc == 0 && *node < 0)
        *node = 0;
    return rc;
}

/* The allowed CPUs of NUMA node n. */
static int ctrun_numa__node_cpus(ctrun_numa__ctx_t *c, int n, ctrun_cpu_list_t *out)
{
    ctrun_cpu_list_t all = {0};
    *out = (ctrun_cpu_list_t){0};
    char path[512];
    int rc = ctrun_numa__path(c, path, "devices/system/node/node%d/cpulist", n);
    if (rc == 0)
        rc = ctrun_numa__read_list(c, path, &all);
    if (rc != 0)
        return ct_errbuf_wrap(c->eb, rc, "could not determine the CPUs of NUMA node %d", n);
    for (size_t i = 0; i < all.count && rc == 0; i++) {
        if (ctrun_numa__has(c->allowed, all.cpus[i]))
            rc = ctrun_numa__push(out, all.cpus[i]);
    }
    ctrun_cpu_list_free(&all);
    if (rc != 0) {
        ctrun_cpu_list_free(out);
        return ct_errbuf_set(c->eb, rc, "out of memory");
    }
    return 0;
}

static int ctrun_numa__socket_of_cpu(ctrun_numa__ctx_t *c, int cpu, int *socket)
{
    char path[512];
    int rc =
        ctrun_numa__path(c, path, "devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
    return rc == 0 ? ctrun_numa__read_int(c, path, socket) : rc;
}

/* The smallest CPU of cpu's thread siblings: one key per physical core. */
static int ctrun_numa__core_key(ctrun_numa__ctx_t *c, int cpu, int *key)
{
    ctrun_cpu_list_t sib = {0};
    char path[512];
    int rc =
        ctrun_numa__path(c, path, "devices/system/cpu/cpu%d/topology/thread_siblings_list", cpu);
    if (rc == 0)
        rc = ctrun_numa__read_list(c, path, &sib);
    if (rc == 0 && sib.count == 0)
        rc = ct_errbuf_set(c->eb, CT_EPARSE, "CPU %d has no thread siblings listed", cpu);
    if (rc == 0)
        *key = sib.cpus[0];
    ctrun_cpu_list_free(&sib);
    return rc;
}

/* The smallest CPU sharing cpu's highest-level data or unified cache: one key per core
 * complex. */
static int ctrun_numa__cache_key(ctrun_numa__ctx_t *c, int cpu, int *key)
{
    char dir[512];
    int rc = ctrun_numa__path(c, dir, "devices/system/cpu/cpu%d/cache", cpu);
    if (rc != 0)
        return rc;
    DIR *d = opendir(dir);
    if (d == NULL)
        return ct_errbuf_set(c->eb, -errno, "%s: %s", dir, strerror(errno));
    int max_level = -1;
    *key = -1;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (strncmp(n, "index", 5) != 0 || n[5] == '\0' ||
            strspn(n + 5, "0123456789") != strlen(n + 5))
            continue;
        char path[512], buf[64];
        if ((rc = ctrun_numa__path(c, path, "devices/system/cpu/cpu%d/cache/%s/type", cpu, n)) !=
                0 ||
            (rc = ctrun_numa__read(c, path, buf, sizeof buf)) != 0)
            break;
        buf[strcspn(buf, "\n")] = '\0';
        if (strcmp(buf, "Unified") != 0 && strcmp(buf, "Data") != 0)
            continue;
        int level = 0;
        if ((rc = ctrun_numa__path(c, path, "devices/system/cpu/cpu%d/cache/%s/level", cpu, n)) !=
                0 ||
            (rc = ctrun_numa__read_int(c, path, &level)) != 0)
            break;
        if (level <= max_level)
            continue;
        max_level = level;
        ctrun_cpu_list_t shared = {0};
        if ((rc = ctrun_numa__path(c, path, "devices/system/cpu/cpu%d/cache/%s/shared_cpu_list",
                                   cpu, n)) != 0 ||
            (rc = ctrun_numa__read_list(c, path, &shared)) != 0)
            break;
        *key = shared.count > 0 ? shared.cpus[0] : -1;
        ctrun_cpu_list_free(&shared);
    }
    closedir(d);
    if (rc == 0 && *key < 0)
        rc = ct_errbuf_set(c->eb, CT_EPARSE, "%s: no data or unified cache shared by CPU %d", dir,
                           cpu);
    return rc;
}

/* Groups of node's CPUs by key (core or cache); groups[i] are the CPUs of key keys[i]. */
typedef struct ctrun_numa__groups {
    int *keys;
    ctrun_cpu_list_t *groups;
    size_t count;
} ctrun_numa__groups_t;

static void ctrun_numa__groups_free(ctrun_numa__groups_t *g)
{
    for (size_t i = 0; i < g->count; i++)
        ctrun_cpu_list_free(&g->groups[i]);
    free(g->groups);
    free(g->keys);
    *g = (ctrun_numa__groups_t){0};
}

static int ctrun_numa__group(ctrun_numa__ctx_t *c, const ctrun_cpu_list_t *cpus, bool by_cache,
                             ctrun_numa__groups_t *g)
{
    *g = (ctrun_numa__groups_t){0};
    g->keys = calloc(cpus->count ? cpus->count : 1, sizeof *g->keys);
    g->groups = calloc(cpus->count ? cpus->count : 1, sizeof *g->groups);
    if (g->keys == NULL || g->groups == NULL) {
        ctrun_numa__groups_free(g);
        return ct_errbuf_set(c->eb, -ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < cpus->count; i++) {
        int key = 0;
        int rc = by_cache ? ctrun_numa__cache_key(c, cpus->cpus[i], &key)
                          : ctrun_numa__core_key(c, cpus->cpus[i], &key);
        size_t k = 0;
        while (rc == 0 && k < g->count && g->keys[k] != key)
            k++;
        if (rc == 0 && k == g->count)
            g->keys[g->count++] = key;
        if (rc == 0 && ctrun_numa__push(&g->groups[k], cpus->cpus[i]) != 0)
            rc = ct_errbuf_set(c->eb, -ENOMEM, "out of memory");
        if (rc != 0) {
            ctrun_numa__groups_free(g);
            return rc;
        }
    }
    return 0;
}

/* Orders groups: by key (cores), or by size descending then key (caches), as torchrun does. */
static void ctrun_numa__sort_groups(ctrun_numa__groups_t *g, bool largest_first)
{
    for (size_t i = 1; i < g->count; i++) {
        for (size_t j = i; j > 0; j--) {
            size_t a = j - 1, b = j;
            bool swap = largest_first && g->groups[a].count != g->groups[b].count
                            ? g->groups[a].count < g->groups[b].count
                            : g->keys[a] > g->keys[b];
            if (!swap)
                break;
            int tk = g->keys[a];
            g->keys[a] = g->keys[b];
            g->keys[b] = tk;
            ctrun_cpu_list_t tl = g->groups[a];
            g->groups[a] = g->groups[b];
            g->groups[b] = tl;
        }
    }
}

/* Device d's position among the devices of its NUMA node (in device order), and their count. */
static int ctrun_numa__node_devices(ctrun_numa__ctx_t *c, int d, int node, int *index, int *count)
{
    *index = 0;
    *count = 0;
    for (int k = 0; k < c->ndevices; k++) {
        int n = 0;
        int rc = ctrun_numa__device_node(c, k, &n);
        if (rc != 0)
            return rc;
        if (n != node)
            continue;
        if (k == d)
            *index = *count;
        (*count)++;
    }
    return 0;
}

static int ctrun_numa__socket(ctrun_numa__ctx_t *c, int node, ctrun_cpu_list_t *out)
{
    ctrun_cpu_list_t mine = {0}, possible = {0};
    int socket = 0, rc = ctrun_numa__node_cpus(c, node, &mine);
    if (rc == 0 && mine.count == 0)
        rc = ct_errbuf_set(c->eb, CT_ERANGE_VALUE, "NUMA node %d has no CPU this process may use",
                           node);
    if (rc == 0)
        rc = ctrun_numa__socket_of_cpu(c, mine.cpus[0], &socket);
    char path[512];
    if (rc == 0 && (rc = ctrun_numa__path(c, path, "devices/system/node/possible")) == 0)
        rc = ctrun_numa__read_list(c, path, &possible);
    for (size_t i = 0; rc == 0 && i < possible.count; i++) {
        ctrun_cpu_list_t cpus = {0};
        int s = 0;
        rc = ctrun_numa__node_cpus(c, possible.cpus[i], &cpus);
        /* A node without usable CPUs (memory only) belongs to no socket's binding. */
        if (rc == 0 && cpus.count > 0 &&
            (rc = ctrun_numa__socket_of_cpu(c, cpus.cpus[0], &s)) == 0 && s == socket) {
            for (size_t k = 0; rc == 0 && k < cpus.count; k++)
                rc = ctrun_numa__push(out, cpus.cpus[k]);
        }
        ctrun_cpu_list_free(&cpus);
    }
    ctrun_cpu_list_free(&mine);
    ctrun_cpu_list_free(&possible);
    return rc;
}

/* The CPUs of device d. */
static int ctrun_numa__device(ctrun_numa__ctx_t *c, ctrun_numa_mode_t mode, int d,
                              ctrun_cpu_list_t *out)
{
    *out = (ctrun_cpu_list_t){0};
    int node = 0;
    int rc = ctrun_numa__device_node(c, d, &node);
    if (rc != 0)
        return rc;
    if (mode == CTRUN_NUMA_NODE)
        return ctrun_numa__node_cpus(c, node, out);
    if (mode == CTRUN_NUMA_SOCKET) {
        rc = ctrun_numa__socket(c, node, out);
        ctrun_numa__normalize(out);
        return rc;
    }
    int index = 0, ndev = 0;
    ctrun_cpu_list_t cpus = {0};
    ctrun_numa__groups_t g = {0};
    if ((rc = ctrun_numa__node_devices(c, d, node, &index, &ndev)) != 0 ||
        (rc = ctrun_numa__node_cpus(c, node, &cpus)) != 0 ||
        (rc = ctrun_numa__group(c, &cpus, mode == CTRUN_NUMA_CORE_COMPLEX, &g)) != 0)
        goto done;
    if (g.count == 0) {
        rc = ct_errbuf_set(c->eb, CT_ERANGE_VALUE, "NUMA node %d has no CPU this process may use",
                           node);
        goto done;
    }
    size_t first, last; /* groups [first, last) */
    if (mode == CTRUN_NUMA_EXCLUSIVE) {
        ctrun_numa__sort_groups(&g, false);
        size_t per = g.count / (size_t)ndev, extra = g.count % (size_t)ndev;
        if (per < 1) {
            rc = ct_errbuf_set(c->eb, CT_ERANGE_VALUE,
                               "there are only %zu physical cores on NUMA node %d, but %d devices "
                               "on that node",
                               g.count, node, ndev);
            goto done;
        }
        size_t i = (size_t)index;
        first = i * per + (i < extra ? i : extra);
        last = first + per + (i < extra ? 1 : 0);
    } else {
        ctrun_numa__sort_groups(&g, true);
        first = (size_t)index % g.count;
        last = first + 1;
    }
    for (size_t k = first; k < last && rc == 0; k++) {
        for (size_t j = 0; j < g.groups[k].count && rc == 0; j++)
            rc = ctrun_numa__push(out, g.groups[k].cpus[j]);
    }
    if (rc != 0)
        rc = ct_errbuf_set(c->eb, rc, "out of memory");
    ctrun_numa__normalize(out);
done:
    ctrun_numa__groups_free(&g);
    ctrun_cpu_list_free(&cpus);
    if (rc != 0)
        ctrun_cpu_list_free(out);
    return rc;
}

int ctrun_numa_bind(const char *sysfs, ctrun_numa_mode_t mode, const char *const *pci, int ndevices,
                    const ctrun_cpu_list_t *allowed, int nranks, ctrun_cpu_list_t *out,
                    ct_errbuf_t *eb)
{
    ctrun_numa__ctx_t c = {.sysfs = sysfs ? sysfs : "/sys",
                           .pci = pci,
                           .ndevices = ndevices,
                           .allowed = allowed,
                           .eb = eb};
    for (int i = 0; i < nranks; i++)
        out[i] = (ctrun_cpu_list_t){0};
    for (int i = 0; i < nranks; i++) {
        int rc = 0;
        if (i >= ndevices)
            rc = ct_errbuf_set(eb, CT_ERANGE_VALUE,
                               "local rank %d has no CUDA device to bind near (the driver shows "
                               "%d)",
                               i, ndevices);
        if (rc == 0 && (rc = ctrun_numa__device(&c, mode, i, &out[i])) != 0)
            rc = ct_errbuf_wrap(eb, rc, "local rank %d (device %s)", i, pci[i]);
        if (rc == 0 && out[i].count == 0)
            rc = ct_errbuf_set(eb, CT_ERANGE_VALUE, "local rank %d (device %s): no CPU to bind to",
                               i, pci[i]);
        if (rc != 0) {
            for (int k = 0; k <= i; k++)
                ctrun_cpu_list_free(&out[k]);
            return rc;
        }
    }
    return 0;
}
