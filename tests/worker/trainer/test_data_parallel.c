/*
 * test_data_parallel.c - ctrain's data-parallel path in one process: the trainer
 * (ctrain_train_run, unchanged) runs as W "ranks" on W threads of this process, joined by a
 * reducer backend implemented here over shared memory (sum in rank order, broadcast by copy),
 * given to libctworker's reducer as a custom backend (test_ctrain_ring.c runs ctrain as real
 * processes on the ring). It proves what the design promises:
 *   - W = 2 and W = 3 (uneven slices: 11/11/10 of a batch of 32) train the same trajectory as
 *     one process with the same global batch, up to float summation order: same losses, same
 *     evaluation, same parameters (dropout on, so the per-row keying of the masks and the
 *     per-example keying of the negatives are exercised across ranks);
 *   - --grad_accum K cuts the optimizer batch into K micro-batches without changing it;
 *   - resuming under W = 2 goes through the rank-0-loads-and-broadcasts path, and a run may
 *     resume with another world size.
 *
 * Tolerances (train_compare.h): the runs differ only in how the gradient sums are grouped
 * (per rank, then across ranks), ~1e-7 relative per step; over 16 Adam steps of lr 0.005
 * parameters stay within 1e-4 of each other.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ctrain_model.h"
#include "ct_test.h"
#include "ctrain_train.h"
#include "ctrain_cfg.h"
#include "train_compare.h"

enum { MAX_W = 4 };

/* ---- a shared-memory reducer for W threads -------------------------------------------------- */

typedef struct shm {
    int world;
    pthread_barrier_t bar;
    void *slot[MAX_W];
    size_t cap[MAX_W];
} shm_t;

typedef struct shm_rank {
    shm_t *s;
    int rank;
} shm_rank_t;

static void *slot_of(shm_rank_t *r, size_t nbytes)
{
    shm_t *s = r->s;
    if (s->cap[r->rank] < nbytes) {
        s->slot[r->rank] = realloc(s->slot[r->rank], nbytes);
        CT_ASSERT(s->slot[r->rank] != NULL);
        s->cap[r->rank] = nbytes;
    }
    return s->slot[r->rank];
}

#define SUM_IMPL(NAME, T)                                                      \
    static int NAME(shm_rank_t *r, T *buf, int64_t n)                          \
    {                                                                          \
        shm_t *s = r->s;                                                       \
        memcpy(slot_of(r, (size_t)n * sizeof(T)), buf, (size_t)n * sizeof(T)); \
        pthread_barrier_wait(&s->bar);                                         \
        for (int64_t i = 0; i < n; i++) {                                      \
            T acc = 0;                                                         \
            for (int k = 0; k < s->world; k++)                                 \
                acc += ((T *)s->slot[k])[i];                                   \
            buf[i] = acc;                                                      \
        }                                                                      \
        pthread_barrier_wait(&s->bar);                                         \
        return 0;                                                              \
    }
SUM_IMPL(shm_f32, float)
SUM_IMPL(shm_f64, double)

static int shm_sum(void *ctx, void *buf, int64_t n, ct_dtype_t dtype, ct_errbuf_t *eb)
{
    (void)eb;
    return dtype == CT_DTYPE_F32 ? shm_f32(ctx, buf, n) : shm_f64(ctx, buf, n);
}

static int shm_broadcast(void *ctx, void *buf, size_t nbytes, int root, ct_errbuf_t *eb)
{
    (void)eb;
    shm_rank_t *r = ctx;
    shm_t *s = r->s;
    if (r->rank == root)
        memcpy(slot_of(r, nbytes), buf, nbytes);
    pthread_barrier_wait(&s->bar);
    if (r->rank != root)
        memcpy(buf, s->slot[root], nbytes);
    pthread_barrier_wait(&s->bar);
    return 0;
}

/* ---- runs ------------------------------------------------------------------------------------ */

typedef struct job {
    const ctrain_cfg_t *cfg;
    ct_worker_env_t env;
    ct_reducer_t *red;
    shm_rank_t sr;
    int rc;
    ct_errbuf_t eb;
} job_t;

static void *job_main(void *p)
{
    job_t *j = p;
    j->rc = ctrain_train_run(j->cfg, &j->env, j->red, &j->eb);
    return NULL;
}

static void base_cfg(ctrain_cfg_t *c, const char *dir, int epochs)
{
    ctrain_cfg_default(c);
    c->model = CTRAIN_MODEL_SASREC,
    c->mhc = false; /* SASRec HEAD (post_ln), the data-parallel case */
    ctrain_train_model_defaults(c);
    snprintf(c->dataset, sizeof c->dataset, "synthetic:users=250,items=120,len=24,seed=5");
    snprintf(c->train_dir, sizeof c->train_dir, "%s", dir);
    c->maxlen = 20, c->hidden_units = 16, c->num_heads = 2, c->batch_size = 32, c->lr = 0.005;
    c->num_epochs = epochs, c->eval_every = 1, c->dropout_rate = 0.2, c->seed = 11;
}

/* Trains cfg with W threads (W = 1: the plain local reducer). */
static void train(const ctrain_cfg_t *cfg, int W)
{
    static shm_t s;
    memset(&s, 0, sizeof s);
    s.world = W;
    CT_ASSERT(pthread_barrier_init(&s.bar, NULL, (unsigned)W) == 0);
    job_t jobs[MAX_W];
    pthread_t th[MAX_W];
    for (int r = 0; r < W; r++) {
        job_t *j = &jobs[r];
        memset(j, 0, sizeof *j);
        j->cfg = cfg;
        j->env = (ct_worker_env_t){.launched = W > 1,
                                   .rank = r,
                                   .world_size = W,
                                   .local_rank = r,
                                   .local_world_size = W,
                                   .heartbeat_fd = -1};
        ct_errbuf_t eb;
        if (W == 1) {
            CT_ASSERT_OK(ct_reducer_create(&j->red, NULL, &eb));
        } else {
            j->sr = (shm_rank_t){&s, r};
            ct_reducer_backend_t be = {.name = "shm",
                                       .rank = r,
                                       .world_size = W,
                                       .ctx = &j->sr,
                                       .sum = shm_sum,
                                       .broadcast = shm_broadcast};
            CT_ASSERT_OK(ct_reducer_create_custom(&j->red, &be, &eb));
        }
        CT_ASSERT(pthread_create(&th[r], NULL, job_main, j) == 0);
    }
    for (int r = 0; r < W; r++) {
        pthread_join(th[r], NULL);
        CT_ASSERT_MSG(jobs[r].rc == 0, "rank %d of %d: %s", r, W, jobs[r].eb.msg);
        ct_reducer_destroy(jobs[r].red);
    }
    pthread_barrier_destroy(&s.bar);
    for (int r = 0; r < W; r++)
        free(s.slot[r]);
}

static char root[256];

static void test_world_sizes(void)
{
    char d1[300], d2[300], d3[300];
    snprintf(d1, sizeof d1, "%s/w1", root);
    snprintf(d2, sizeof d2, "%s/w2", root);
    snprintf(d3, sizeof d3, "%s/w3", root);
    ctrain_cfg_t c1, c2, c3;
    base_cfg(&c1, d1, 2);
    base_cfg(&c2, d2, 2);
    base_cfg(&c3, d3, 2);
    train(&c1, 1);
    train(&c2, 2);
    train(&c3, 3);
    printf("W=2 against W=1\n");
    train_same_metrics(d1, d2);
    train_same_params(d1, d2);
    printf("W=3 against W=1\n");
    train_same_metrics(d1, d3);
    train_same_params(d1, d3);
}

/* --grad_accum K with --batch_size B is an optimizer batch of K*B cut into K micro-batches:
 * the same trajectory as --batch_size K*B, alone and combined with W = 2. */
static void test_grad_accum(void)
{
    char d1[300], d2[300], d3[300];
    snprintf(d1, sizeof d1, "%s/a1", root);
    snprintf(d2, sizeof d2, "%s/a2", root);
    snprintf(d3, sizeof d3, "%s/a3", root);
    ctrain_cfg_t c;
    base_cfg(&c, d1, 2);
    train(&c, 1);
    base_cfg(&c, d2, 2);
    c.batch_size = 8, c.grad_accum = 4;
    train(&c, 1);
    base_cfg(&c, d3, 2);
    c.batch_size = 16, c.grad_accum = 2;
    train(&c, 2);
    printf("batch 8 x 4 accumulation against batch 32\n");
    train_same_metrics(d1, d2);
    train_same_params(d1, d2);
    printf("batch 16 x 2 accumulation on 2 ranks against batch 32\n");
    train_same_metrics(d1, d3);
    train_same_params(d1, d3);
}

/* Resume under W = 2 (rank 0 picks the checkpoint and broadcasts its name), from a checkpoint
 * written by a W = 3 run; the result matches W = 1 trained for the whole length. */
static void test_resume_across_world_sizes(void)
{
    char d1[300], d2[300];
    snprintf(d1, sizeof d1, "%s/r1", root);
    snprintf(d2, sizeof d2, "%s/r2", root);
    ctrain_cfg_t c;
    base_cfg(&c, d1, 3);
    train(&c, 1);
    base_cfg(&c, d2, 1);
    train(&c, 3);
    base_cfg(&c, d2, 3);
    train(&c, 2); /* resumes the W=3 run's final checkpoint (step 8) and trains 16 more */
    printf("W=3 for 1 epoch, then W=2 for 2 more, against W=1 for 3\n");
    train_same_metrics(d1, d2);
    train_same_params(d1, d2);
}

int main(void)
{
    CT_ASSERT_OK(ct_cpu_set_threads(1));
    snprintf(root, sizeof root, "/tmp/ct_dp.XXXXXX");
    CT_ASSERT(mkdtemp(root) != NULL);
    CT_RUN(test_world_sizes);
    CT_RUN(test_grad_accum);
    CT_RUN(test_resume_across_world_sizes);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", root);
    return 0;
}
