/*
 * ct_reduce.c - the single-process reducer and the choice of reducer from the environment.
 * The multi-process communicators live in libctworker; this file only refuses WORLD_SIZE > 1
 * until one is connected.
 */
#include "ct_reduce.h"

#include <string.h>

static int ct__local_f32(ct_reducer_t *r, float *buf, int64_t n, ct_errbuf_t *eb)
{
    (void)r, (void)buf, (void)n, (void)eb;
    return 0; /* the sum over one rank */
}

static int ct__local_f64(ct_reducer_t *r, double *buf, int64_t n, ct_errbuf_t *eb)
{
    (void)r, (void)buf, (void)n, (void)eb;
    return 0;
}

static int ct__local_broadcast(ct_reducer_t *r, void *buf, size_t nbytes, int root, ct_errbuf_t *eb)
{
    (void)r, (void)buf, (void)nbytes;
    if (root != 0)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "broadcast from rank %d in a world of 1", root);
    return 0;
}

static void ct__local_close(ct_reducer_t *r)
{
    (void)r;
}

void ct_reducer_local_init(ct_reducer_t *r)
{
    *r = (ct_reducer_t){.rank = 0,
                        .world_size = 1,
                        .name = "local",
                        .allreduce_f32 = ct__local_f32,
                        .allreduce_f64 = ct__local_f64,
                        .broadcast = ct__local_broadcast,
                        .close = ct__local_close};
}

int ct_reducer_open(ct_reducer_t *r, const ct_worker_env_t *env, const char *backend,
                    ct_errbuf_t *eb)
{
    memset(r, 0, sizeof *r);
    if (env->world_size == 1) {
        ct_reducer_local_init(r);
        return 0;
    }
    return ct_errbuf_set(eb, CT_ENOTBUILT,
                         "WORLD_SIZE=%d (rank %d) but this ctrain has no communicator yet (the "
                         "CPU ring and NCCL backends, --backend %s, are not built in); refusing "
                         "to let each rank train alone",
                         env->world_size, env->rank, backend);
}

void ct_reducer_close(ct_reducer_t *r)
{
    if (r->close)
        r->close(r);
    memset(r, 0, sizeof *r);
}
