/*
 * test_ctrun_numa.c - --numa_binding's CPU choice on a made-up machine in a temporary sysfs
 * tree: two sockets, three NUMA nodes (node 2 has no CPU), two threads per core, one
 * last-level cache per four cores, and four GPUs (two on node 0, one on node 1, one whose
 * numa_node is -1). Each expectation is worked out by hand from torch/numa/binding.py's rules
 * (ctrun_numa.h); a restricted affinity mask and the error cases are checked too.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_test.h"
#include "ctrun_numa.h"

static char ct__root[64];

__attribute__((format(printf, 2, 3))) static void ct__write(const char *text, const char *fmt, ...)
{
    char path[512];
    int n = snprintf(path, sizeof path, "%s/", ct__root);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path + n, sizeof path - (size_t)n, fmt, ap);
    va_end(ap);
    char dir[512];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = dir + strlen(ct__root) + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        mkdir(dir, 0755);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    CT_ASSERT(f != NULL);
    fputs(text, f);
    fclose(f);
}

/* CPUs 0-7 on socket 0 / node 0, 8-15 on socket 1 / node 1; within each group of eight, CPUs
 * n and n+4 are one core ({0,4}, {1,5}, {2,6}, {3,7} on node 0); last-level caches {0,1,4,5}
 * and {2,3,6,7} on node 0, {8-15} on node 1. */
static void ct__machine(void)
{
    snprintf(ct__root, sizeof ct__root, "/tmp/ctrun_numa_XXXXXX");
    CT_ASSERT(mkdtemp(ct__root) != NULL);
    ct__write("0-2\n", "devices/system/node/possible");
    ct__write("0-7\n", "devices/system/node/node0/cpulist");
    ct__write("8-15\n", "devices/system/node/node1/cpulist");
    ct__write("\n", "devices/system/node/node2/cpulist");
    for (int c = 0; c < 16; c++) {
        int base = c < 8 ? 0 : 8, within = c - base;
        char sib[32], llc[32];
        snprintf(sib, sizeof sib, "%d,%d\n", base + within % 4, base + within % 4 + 4);
        if (c < 8)
            snprintf(llc, sizeof llc, "%s\n", (within % 4) < 2 ? "0-1,4-5" : "2-3,6-7");
        else
            snprintf(llc, sizeof llc, "8-15\n");
        ct__write(c < 8 ? "0\n" : "1\n", "devices/system/cpu/cpu%d/topology/physical_package_id",
                  c);
        ct__write(sib, "devices/system/cpu/cpu%d/topology/thread_siblings_list", c);
        /* L1 data and instruction, L2 per core, L3 (the last level) shared */
        ct__write("Data\n", "devices/system/cpu/cpu%d/cache/index0/type", c);
        ct__write("1\n", "devices/system/cpu/cpu%d/cache/index0/level", c);
        ct__write(sib, "devices/system/cpu/cpu%d/cache/index0/shared_cpu_list", c);
        ct__write("Instruction\n", "devices/system/cpu/cpu%d/cache/index1/type", c);
        ct__write("1\n", "devices/system/cpu/cpu%d/cache/index1/level", c);
        ct__write(sib, "devices/system/cpu/cpu%d/cache/index1/shared_cpu_list", c);
        ct__write("Unified\n", "devices/system/cpu/cpu%d/cache/index2/type", c);
        ct__write("3\n", "devices/system/cpu/cpu%d/cache/index2/level", c);
        ct__write(llc, "devices/system/cpu/cpu%d/cache/index2/shared_cpu_list", c);
        ct__write("Unified\n", "devices/system/cpu/cpu%d/cache/index3/type", c);
        ct__write("2\n", "devices/system/cpu/cpu%d/cache/index3/level", c);
        ct__write(sib, "devices/system/cpu/cpu%d/cache/index3/shared_cpu_list", c);
    }
    ct__write("0\n", "bus/pci/devices/0000:1b:00.0/numa_node");
    ct__write("0\n", "bus/pci/devices/0000:2c:00.0/numa_node");
    ct__write("1\n", "bus/pci/devices/0000:9d:00.0/numa_node");
    ct__write("-1\n", "bus/pci/devices/0001:0e:00.0/numa_node");
}

static const char *const ct__pci[] = {"0000:1b:00.0", "0000:2c:00.0", "0000:9d:00.0",
                                      "0001:0e:00.0"};

/* The lists of local ranks 0..3, formatted and joined with " | ". */
static const char *ct__bind(ctrun_numa_mode_t mode, const ctrun_cpu_list_t *allowed, int nranks)
{
    static char out[512];
    ctrun_cpu_list_t lists[4];
    ct_errbuf_t eb = {{0}};
    int rc = ctrun_numa_bind(ct__root, mode, ct__pci, 4, allowed, nranks, lists, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
    out[0] = '\0';
    for (int i = 0; i < nranks; i++) {
        char one[128];
        ctrun_cpu_list_format(&lists[i], one, sizeof one);
        strcat(out, i ? " | " : "");
        strcat(out, one);
        ctrun_cpu_list_free(&lists[i]);
    }
    return out;
}

static void test_cpu_lists(void)
{
    ctrun_cpu_list_t l;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ctrun_cpu_list_parse(" 8-9,0,3-5,4\n", &l, &eb));
    char buf[64];
    ctrun_cpu_list_format(&l, buf, sizeof buf);
    CT_ASSERT_STR_EQ(buf, "0,3-5,8-9");
    ctrun_cpu_list_free(&l);
    CT_ASSERT_OK(ctrun_cpu_list_parse("\n", &l, &eb));
    CT_ASSERT_EQ(l.count, 0);
    CT_ASSERT_ERR(ctrun_cpu_list_parse("1-x", &l, &eb), CT_EPARSE);
    CT_ASSERT_ERR(ctrun_cpu_list_parse("5-3", &l, &eb), CT_EPARSE);
    ctrun_numa_mode_t m;
    CT_ASSERT_OK(ctrun_numa_mode_parse("core-complex", &m, &eb));
    CT_ASSERT_EQ(m, CTRUN_NUMA_CORE_COMPLEX);
    CT_ASSERT_ERR(ctrun_numa_mode_parse("core_complex", &m, &eb), CT_EPARSE);
    CT_ASSERT_OK(ctrun_cpu_list_allowed(&l, &eb));
    CT_ASSERT(l.count >= 1);
    ctrun_cpu_list_free(&l);
}

static void test_modes(void)
{
    ctrun_cpu_list_t all = {0};
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ctrun_cpu_list_parse("0-15", &all, &eb));
    /* node: the device's node; numa_node -1 counts as node 0. */
    CT_ASSERT_STR_EQ(ct__bind(CTRUN_NUMA_NODE, &all, 4), "0-7 | 0-7 | 8-15 | 0-7");
    /* socket: every node of the socket; node 2 (no CPU) belongs to none. */
    CT_ASSERT_STR_EQ(ct__bind(CTRUN_NUMA_SOCKET, &all, 4), "0-7 | 0-7 | 8-15 | 0-7");
    /* exclusive: node 0's four cores among its three devices (0, 1 and 3): 2, 1, 1 cores. */
    CT_ASSERT_STR_EQ(ct__bind(CTRUN_NUMA_EXCLUSIVE, &all, 4), "0-1,4-5 | 2,6 | 8-15 | 3,7");
    /* core-complex: node 0 has two caches of four CPUs; devices 0, 1, 3 take 0, 1, 0. */
    CT_ASSERT_STR_EQ(ct__bind(CTRUN_NUMA_CORE_COMPLEX, &all, 4),
                     "0-1,4-5 | 2-3,6-7 | 8-15 | 0-1,4-5");
    /* Only allowed CPUs: without CPU 0 and 4, core {0,4} is gone from node 0 and the larger
     * cache comes first. */
    ctrun_cpu_list_t some = {0};
    CT_ASSERT_OK(ctrun_cpu_list_parse("1-3,5-15", &some, &eb));
    CT_ASSERT_STR_EQ(ct__bind(CTRUN_NUMA_NODE, &some, 1), "1-3,5-7");
    CT_ASSERT_STR_EQ(ct__bind(CTRUN_NUMA_EXCLUSIVE, &some, 2), "1,5 | 2,6");
    CT_ASSERT_STR_EQ(ct__bind(CTRUN_NUMA_CORE_COMPLEX, &some, 2), "2-3,6-7 | 1,5");
    ctrun_cpu_list_free(&some);

    /* Errors: more local ranks than devices; a device without sysfs entry; too few cores. */
    ctrun_cpu_list_t lists[5];
    CT_ASSERT_ERR(ctrun_numa_bind(ct__root, CTRUN_NUMA_NODE, ct__pci, 4, &all, 5, lists, &eb),
                  CT_ERANGE_VALUE);
    CT_ASSERT_STR_EQ(eb.msg, "local rank 4 has no CUDA device to bind near (the driver shows 4)");
    const char *missing[] = {"0000:ff:00.0"};
    CT_ASSERT_ERR(ctrun_numa_bind(ct__root, CTRUN_NUMA_NODE, missing, 1, &all, 1, lists, &eb),
                  -ENOENT);
    CT_ASSERT_STR_CONTAINS(eb.msg, "local rank 0 (device 0000:ff:00.0): ");
    CT_ASSERT_STR_CONTAINS(eb.msg, "bus/pci/devices/0000:ff:00.0/numa_node: No such file");
    ctrun_cpu_list_t one = {0};
    CT_ASSERT_OK(ctrun_cpu_list_parse("0,4,8-15", &one, &eb));
    CT_ASSERT_ERR(ctrun_numa_bind(ct__root, CTRUN_NUMA_EXCLUSIVE, ct__pci, 4, &one, 2, lists, &eb),
                  CT_ERANGE_VALUE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "only 1 physical cores on NUMA node 0, but 3 devices");
    ctrun_cpu_list_free(&one);
    ctrun_cpu_list_free(&all);
}

int main(void)
{
    ct__machine();
    CT_RUN(test_cpu_lists);
    CT_RUN(test_modes);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", ct__root);
    CT_ASSERT_EQ(system(cmd), 0);
    return 0;
}
