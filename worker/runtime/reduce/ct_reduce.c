/*
 * ct_reduce.c - the reducer of ctworker.h section 8: creation over a communicator or a custom
 * backend, and the dispatch of each call to where its buffers must go - nowhere (a world of
 * one), the host communicator, host staging of device buffers (ct_reduce_device.c) or the
 * bucketed NCCL reduction (ct_reduce_nccl.c). The communicators themselves, their timeouts and
 * failure handling are section 7's (comm/); this file only routes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ct_config.h"
#include "ct_reduce_internal.h"

static bool ct_reduce__alone(const ct_reducer_t *r)
{
    return r->world_size == 1;
}

int ct_reducer_create(ct_reducer_t **out, ct_comm_t *comm, ct_errbuf_t *eb)
{
    *out = NULL;
    ct_reducer_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    r->comm = comm;
    r->rank = comm != NULL ? ct_comm_rank(comm) : 0;
    r->world_size = comm != NULL ? ct_comm_size(comm) : 1;
    r->name = r->world_size == 1                      ? "local"
              : ct_comm_backend(comm) == CT_COMM_NCCL ? "nccl"
                                                      : "ring";
    *out = r;
    return 0;
}

int ct_reducer_create_custom(ct_reducer_t **out, const ct_reducer_backend_t *be, ct_errbuf_t *eb)
{
    *out = NULL;
    if (be == NULL || be->sum == NULL || be->broadcast == NULL || be->world_size < 1 ||
        be->rank < 0 || be->rank >= be->world_size)
        return ct_errbuf_set(eb, -EINVAL, "a reducer backend needs sum, broadcast and a rank");
    ct_reducer_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    r->be = *be;
    r->has_be = true;
    r->rank = be->rank;
    r->world_size = be->world_size;
    r->name = be->name != NULL ? be->name : "custom";
    *out = r;
    return 0;
}

void ct_reducer_destroy(ct_reducer_t *r)
{
    if (r == NULL)
        return;
#if CT_HAVE_NCCL
    if (r->nccl != NULL)
        ct__reduce_nccl_close(r);
#endif
#if CT_HAVE_CUDA
    if (r->stage != NULL)
        ct__reduce_stage_free(r);
#endif
    free(r);
}

int ct_reducer_use_device(ct_reducer_t *r, const ct_reducer_device_t *dev, ct_errbuf_t *eb)
{
    if (r->device)
        return ct_errbuf_set(eb, -EINVAL, "the reducer already reduces device buffers");
#if CT_HAVE_CUDA
    r->device = true;
    r->stream = dev->stream;
#if CT_HAVE_NCCL
    const bool nccl = !r->has_be && r->comm != NULL && ct_comm_backend(r->comm) == CT_COMM_NCCL;
    if (nccl && (!ct_reduce__alone(r) || dev->nccl_alone)) {
        int rc = ct__reduce_nccl_open(r, dev, eb);
        if (rc != 0)
            return rc;
        r->name = "nccl";
    }
#endif
    return 0;
#else
    (void)dev;
    return ct_errbuf_set(eb, CT_ENOTBUILT, "device buffers need a build with CUDA");
#endif
}

int ct_reducer_rank(const ct_reducer_t *r)
{
    return r->rank;
}

int ct_reducer_world_size(const ct_reducer_t *r)
{
    return r->world_size;
}

const char *ct_reducer_name(const ct_reducer_t *r)
{
    return r->name;
}

bool ct_reducer_overlaps(const ct_reducer_t *r)
{
    return r->nccl != NULL;
}

int ct__reduce_host_sum(ct_reducer_t *r, void *buf, int64_t n, ct_dtype_t dtype, ct_errbuf_t *eb)
{
    if (r->has_be)
        return r->be.sum(r->be.ctx, buf, n, dtype, eb);
    if (ct_reduce__alone(r))
        return 0; /* the sum over one rank */
    return ct_comm_allreduce(r->comm, buf, n, dtype, CT_COMM_SUM, eb);
}

int ct_reducer_ready(ct_reducer_t *r, float *buf, const int64_t (*ranges)[2], int n,
                     ct_errbuf_t *eb)
{
    if (n < 0 || (n > 0 && (buf == NULL || ranges == NULL)))
        return ct_errbuf_set(eb, -EINVAL, "ct_reducer_ready: bad ranges");
#if CT_HAVE_NCCL
    if (r->nccl != NULL && n > 0)
        return ct__reduce_nccl_ready(r, buf, ranges, n, eb);
#endif
    return 0; /* the final sum takes everything */
}

int ct_reducer_sum_f32(ct_reducer_t *r, float *buf, int64_t n, ct_errbuf_t *eb)
{
#if CT_HAVE_NCCL
    if (r->nccl != NULL)
        return ct__reduce_nccl_sum(r, buf, n, eb);
#endif
    if (ct_reduce__alone(r) && !r->has_be)
        return 0;
#if CT_HAVE_CUDA
    if (r->device)
        return ct__reduce_staged_f32(r, buf, n, eb);
#endif
    return ct__reduce_host_sum(r, buf, n, CT_DTYPE_F32, eb);
}

int ct_reducer_sum_f64(ct_reducer_t *r, double *buf, int64_t n, ct_errbuf_t *eb)
{
    return ct__reduce_host_sum(r, buf, n, CT_DTYPE_F64, eb);
}

int ct_reducer_broadcast(ct_reducer_t *r, void *buf, size_t nbytes, int root, ct_errbuf_t *eb)
{
    if (root < 0 || root >= r->world_size)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "broadcast from rank %d in a world of %d", root,
                             r->world_size);
    if (r->has_be)
        return r->be.broadcast(r->be.ctx, buf, nbytes, root, eb);
    if (ct_reduce__alone(r))
        return 0;
    return ct_comm_broadcast(r->comm, buf, nbytes, root, eb);
}
