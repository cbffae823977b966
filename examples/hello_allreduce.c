/*
 * hello_allreduce.c - the smallest useful libctworker program: join the job, sum a vector over
 * all ranks each step, keep a step counter in a checkpoint, and pick up where the last run (or
 * the last attempt, after ctrun restarted the job) stopped.
 *
 *   ctrun --nproc_per_node=2 build/examples/hello_allreduce [--steps N] [--count N] [--dir D]
 *   build/examples/hello_allreduce          (alone: rank 0 of 1, no launcher, no store)
 *
 * Each step every rank fills the vector with rank + 1 and sums it over the ranks; every element
 * must then be 1 + 2 + ... + W, exactly. Rank 0 writes the counter to D (default
 * ./hello_allreduce.ckpt) after every step; at start rank 0 loads the newest checkpoint and
 * broadcasts its name, so every rank resumes from the same file. Exit 0 when every step summed
 * correctly, 1 otherwise (through ct_worker_fail, which also writes TORCHELASTIC_ERROR_FILE for
 * ctrun's report).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctworker.h"

static long arg_long(int argc, char **argv, const char *name, long dflt)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) {
            char *end;
            long v = strtol(argv[i + 1], &end, 10);
            if (*end != '\0' || v < 0)
                ct_worker_fail("%s %s: not a count", name, argv[i + 1]);
            return v;
        }
    return dflt;
}

static const char *arg_str(int argc, char **argv, const char *name, const char *dflt)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return argv[i + 1];
    return dflt;
}

int main(int argc, char **argv)
{
    long steps = arg_long(argc, argv, "--steps", 5);
    long count = arg_long(argc, argv, "--count", 1 << 20);
    const char *dir = arg_str(argc, argv, "--dir", "hello_allreduce.ckpt");

    /* 1. Join: environment, store, communicator (the CPU ring, or NCCL on a GPU machine). */
    ct_errbuf_t eb;
    ct_worker_t w;
    if (ct_worker_init(&w, NULL, &eb) != 0)
        ct_worker_fail("%s", eb.msg);
    const int rank = w.env.rank, world = w.env.world_size;

    /* 2. Resume: rank 0 picks the newest readable checkpoint, everyone loads that one. */
    int64_t counter = 0;
    ct_tensor_view_t view = {.name = "counter", .dtype = CT_DTYPE_I64, .ndim = 1, .data = &counter};
    view.shape[0] = 1;
    ct_ckpt_dir_t ckpt;
    if (ct_ckpt_dir_init(&ckpt, dir, 2, rank == 0, &eb) != 0)
        ct_worker_fail("%s", eb.msg);
    static ct_ckpt_meta_t meta; /* large (it holds a configuration text) */
    struct {
        int32_t rc;
        char name[CT_CKPT_NAME_MAX];
    } pick = {0, ""};
    if (rank == 0)
        pick.rc = ct_ckpt_load_latest(&ckpt, &view, 1, &meta, pick.name, &eb);
    if (ct_comm_broadcast(w.comm, &pick, sizeof pick, 0, &eb) != 0)
        ct_worker_fail("%s", eb.msg);
    if (pick.rc == 0 && rank != 0)
        pick.rc = ct_ckpt_load(&ckpt, pick.name, &view, 1, &meta, &eb);
    if (pick.rc != 0 && pick.rc != -ENOENT)
        ct_worker_fail("resuming from %s: %s", dir, rank == 0 ? eb.msg : ct_strerror(pick.rc));
    if (rank == 0)
        printf("hello_allreduce: %d rank%s, %s backend, starting at step %lld of %ld\n", world,
               world == 1 ? "" : "s", ct_comm_backend_name(ct_comm_backend(w.comm)),
               (long long)counter, steps);

    /* 3. Work: one allreduce per step, checked exactly. */
    float *v = malloc((size_t)(count > 0 ? count : 1) * sizeof *v);
    if (v == NULL)
        ct_worker_fail("out of memory for %ld floats", count);
    const float want = (float)world * (float)(world + 1) / 2.0f;
    for (; counter < steps; counter++) {
        ct_worker_progress((uint64_t)counter);
        for (long i = 0; i < count; i++)
            v[i] = (float)(rank + 1);
        if (ct_comm_allreduce(w.comm, v, count, CT_DTYPE_F32, CT_COMM_SUM, &eb) != 0)
            ct_worker_fail("step %lld: %s", (long long)counter, eb.msg);
        for (long i = 0; i < count; i++)
            if (v[i] != want)
                ct_worker_fail("step %lld: element %ld is %g, expected %g", (long long)counter, i,
                               (double)v[i], (double)want);
        /* 4. Checkpoint the counter (rank 0 writes; the file is replaced atomically). */
        meta = (ct_ckpt_meta_t){.step = counter + 1, .world_size = world};
        int64_t next = counter + 1;
        ct_tensor_view_t out = view;
        out.data = &next;
        if (rank == 0 && ct_ckpt_save(&ckpt, CT_CKPT_STEP, &out, 1, &meta, &eb) != 0)
            ct_worker_fail("step %lld: %s", (long long)counter, eb.msg);
        if (rank == 0)
            printf("step %lld: sum of %ld floats over %d ranks = %g on every element\n",
                   (long long)counter, count, world, (double)want);
    }
    if (rank == 0)
        printf("hello_allreduce: done, counter %lld\n", (long long)counter);
    free(v);
    ct_ckpt_dir_close(&ckpt);
    ct_worker_close(&w);
    return 0;
}
