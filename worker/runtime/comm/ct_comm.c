/*
 * ct_comm.c - the public face of the communicators (ctworker.h section 7): argument checks,
 * the deadline of each call, the collective counter, and the failure rule - a backend error
 * aborts the communicator and every later call returns CT_ESTATE with the first message. The
 * backends (ct_comm_ring.c, ct_comm_nccl.c) only move data. Nothing here talks to the store.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_comm_internal.h"
#include "ct_time.h"

int ct__comm_alloc(ct_comm_t **out, const ct__comm_ops_t *ops, ct_comm_backend_t backend,
                   const ct__comm_cfg_t *cfg, void *impl, ct_errbuf_t *eb)
{
    ct_comm_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for a communicator");
    c->ops = ops;
    c->backend = backend;
    c->rank = cfg->rank;
    c->world = cfg->world_size;
    c->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : CT_WORKER_DEFAULT_TIMEOUT_MS;
    c->impl = impl;
    *out = c;
    return 0;
}

void ct__comm_destroy(ct_comm_t *c)
{
    if (c == NULL)
        return;
    c->ops->destroy(c);
    free(c);
}

uint64_t ct__comm_fingerprint(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* A failed backend call: remember why, abort, and return the code. */
static int ct_comm__fail(ct_comm_t *c, int rc, const char *what, ct_errbuf_t *eb)
{
    ct_errbuf_t tmp;
    if (eb == NULL)
        eb = &tmp;
    ct_errbuf_wrap(eb, rc, "%s (collective #%llu, rank %d of %d, %s)", what,
                   (unsigned long long)c->seq, c->rank, c->world, ct_comm_backend_name(c->backend));
    c->failed = rc;
    snprintf(c->failure, sizeof c->failure, "%s", eb->msg);
    c->ops->abort(c);
    return rc;
}

/* Common entry checks; fills *deadline and counts the collective. */
static int ct_comm__begin(ct_comm_t *c, const char *what, int64_t *deadline, ct_errbuf_t *eb)
{
    if (c == NULL)
        return ct_errbuf_set(eb, -EINVAL,
                             "%s: no communicator (ct_worker_init not called, or "
                             "it failed)",
                             what);
    if (c->failed)
        return ct_errbuf_set(eb, CT_ESTATE,
                             "%s: the communicator was aborted by an earlier "
                             "error: %s",
                             what, c->failure);
    *deadline = ct_deadline_after_ms(c->timeout_ms);
    c->seq++;
    return 0;
}

static size_t ct_comm__reduce_esize(ct_dtype_t dt)
{
    switch (dt) {
    case CT_DTYPE_F32:
    case CT_DTYPE_F64:
    case CT_DTYPE_BF16:
        return ct_dtype_size(dt);
    default:
        return 0;
    }
}

int ct_comm_allreduce(ct_comm_t *c, void *buf, int64_t count, ct_dtype_t dtype, ct_comm_op_t op,
                      ct_errbuf_t *eb)
{
    size_t es = ct_comm__reduce_esize(dtype);
    if (es == 0)
        return ct_errbuf_set(eb, -EINVAL, "allreduce: dtype %s is not supported (F32, F64, BF16)",
                             ct_dtype_name(dtype));
    if (op != CT_COMM_SUM && op != CT_COMM_AVG)
        return ct_errbuf_set(eb, -EINVAL, "allreduce: unknown reduction %d", (int)op);
    if (count < 0 || (uint64_t)count > SIZE_MAX / es)
        return ct_errbuf_set(eb, -EINVAL, "allreduce: bad count %lld", (long long)count);
    if (count > 0 && buf == NULL)
        return ct_errbuf_set(eb, -EINVAL, "allreduce: NULL buffer");
    int64_t deadline = 0;
    int rc = ct_comm__begin(c, "allreduce", &deadline, eb);
    if (rc != 0)
        return rc;
    rc = c->ops->allreduce(c, buf, count, dtype, op, deadline, eb);
    return rc == 0 ? 0 : ct_comm__fail(c, rc, "allreduce", eb);
}

int ct_comm_broadcast(ct_comm_t *c, void *buf, size_t nbytes, int root, ct_errbuf_t *eb)
{
    if (c != NULL && (root < 0 || root >= c->world))
        return ct_errbuf_set(eb, -EINVAL, "broadcast: root %d is not a rank of %d", root, c->world);
    if (nbytes > 0 && buf == NULL)
        return ct_errbuf_set(eb, -EINVAL, "broadcast: NULL buffer");
    int64_t deadline = 0;
    int rc = ct_comm__begin(c, "broadcast", &deadline, eb);
    if (rc != 0)
        return rc;
    rc = c->ops->broadcast(c, buf, nbytes, root, deadline, eb);
    return rc == 0 ? 0 : ct_comm__fail(c, rc, "broadcast", eb);
}

int ct_comm_allgather(ct_comm_t *c, const void *sendbuf, void *recvbuf, size_t nbytes,
                      ct_errbuf_t *eb)
{
    if (c != NULL && nbytes > SIZE_MAX / (size_t)c->world)
        return ct_errbuf_set(eb, -EINVAL, "allgather: %zu bytes per rank overflow", nbytes);
    if (nbytes > 0 && (sendbuf == NULL || recvbuf == NULL))
        return ct_errbuf_set(eb, -EINVAL, "allgather: NULL buffer");
    int64_t deadline = 0;
    int rc = ct_comm__begin(c, "allgather", &deadline, eb);
    if (rc != 0)
        return rc;
    rc = c->ops->allgather(c, sendbuf, recvbuf, nbytes, deadline, eb);
    return rc == 0 ? 0 : ct_comm__fail(c, rc, "allgather", eb);
}

int ct_comm_barrier(ct_comm_t *c, ct_errbuf_t *eb)
{
    int64_t deadline = 0;
    int rc = ct_comm__begin(c, "barrier", &deadline, eb);
    if (rc != 0)
        return rc;
    rc = c->ops->barrier(c, deadline, eb);
    return rc == 0 ? 0 : ct_comm__fail(c, rc, "barrier", eb);
}

int ct_comm_rank(const ct_comm_t *c)
{
    return c ? c->rank : 0;
}

int ct_comm_size(const ct_comm_t *c)
{
    return c ? c->world : 1;
}

ct_comm_backend_t ct_comm_backend(const ct_comm_t *c)
{
    return c ? c->backend : CT_COMM_AUTO;
}

uint64_t ct_comm_count(const ct_comm_t *c)
{
    return c ? c->seq : 0;
}

void ct_comm_set_timeout(ct_comm_t *c, int64_t timeout_ms)
{
    if (c)
        c->timeout_ms = timeout_ms > 0 ? timeout_ms : CT_WORKER_DEFAULT_TIMEOUT_MS;
}

int64_t ct_comm_timeout(const ct_comm_t *c)
{
    return c ? c->timeout_ms : CT_WORKER_DEFAULT_TIMEOUT_MS;
}

const char *ct_comm_backend_name(ct_comm_backend_t backend)
{
    switch (backend) {
    case CT_COMM_AUTO:
        return "auto";
    case CT_COMM_CPU:
        return "cpu";
    case CT_COMM_NCCL:
        return "nccl";
    }
    return "?";
}

int ct_comm_backend_parse(const char *text, ct_comm_backend_t *out, ct_errbuf_t *eb)
{
    if (text == NULL)
        text = "";
    if (strcmp(text, "auto") == 0)
        *out = CT_COMM_AUTO;
    else if (strcmp(text, "cpu") == 0 || strcmp(text, "ring") == 0)
        *out = CT_COMM_CPU;
    else if (strcmp(text, "nccl") == 0)
        *out = CT_COMM_NCCL;
    else
        return ct_errbuf_set(
            eb, CT_EPARSE, "\"%s\" is not a communicator backend (auto, cpu, ring or nccl)", text);
    return 0;
}

bool ct_comm_backend_built(ct_comm_backend_t backend)
{
    return backend != CT_COMM_NCCL || CT_HAVE_NCCL;
}
