/*
 * lm_bench.c - ctrain's side of the language-model benchmark (lm_bench.py runs it and PyTorch in
 * one run): a GPT-2 or Qwen2 model from a Hugging Face folder (ctrain_lm_open_opts), then timed
 * optimizer-free steps (zero the gradients, forward, backward) on rows of token ids read from a
 * file, printing one JSON line: the seconds of each step, the loss, the parameter count and the
 * activation arena's bytes.
 *
 * Not here: creating the model or the ids, PyTorch's side, the peak memory (the parent measures
 * this process's), the table (lm_bench.py), the gradient reduction between ranks.
 *
 *   lm_bench --lm_dir DIR --ids FILE --batch B --seq L [--row0 R] [--steps S] [--warmup W]
 *            [--threads T] [--device cpu|cuda] [--recompute]
 *
 * FILE holds int32 token ids, rows of L; the pass takes rows R .. R+B-1, targets the next token
 * of the same row (none for the last column, as transformers' labels=input_ids).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ct_error.h"
#include "ct_kernels.h"
#include "ct_ops.h"
#include "ct_parse.h"
#include "ctrain_lm.h"

static double lm_bench__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int lm_bench__usage(const char *what)
{
    fprintf(stderr,
            "lm_bench: %s\nusage: lm_bench --lm_dir DIR --ids FILE --batch B --seq L [--row0 R] "
            "[--steps S] [--warmup W] [--threads T] [--device cpu|cuda] [--recompute]\n",
            what);
    return 2;
}

/* rows row0 .. row0+B-1 of L ids from path into ids (B*L); 0 or -1 with a message. */
static int lm_bench__read_ids(const char *path, int row0, int B, int L, int32_t *ids)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "lm_bench: --ids %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t n = (size_t)B * (size_t)L;
    int rc = fseek(f, (long)((size_t)row0 * (size_t)L * sizeof *ids), SEEK_SET);
    if (rc == 0 && fread(ids, sizeof *ids, n, f) != n)
        rc = -1;
    fclose(f);
    if (rc != 0)
        fprintf(stderr, "lm_bench: --ids %s: fewer than %d rows of %d ids from row %d\n", path, B,
                L, row0);
    return rc;
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *ids_path = NULL, *device = "cpu";
    int B = 0, L = 0, row0 = 0, steps = 3, warmup = 1, threads = 1;
    bool recompute = false;
    ct_errbuf_t eb;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--recompute") == 0) {
            recompute = true;
            continue;
        }
        if (i + 1 >= argc)
            return lm_bench__usage("an option without its value");
        const char *v = argv[++i];
        int rc = 0;
        if (strcmp(a, "--lm_dir") == 0)
            dir = v;
        else if (strcmp(a, "--ids") == 0)
            ids_path = v;
        else if (strcmp(a, "--device") == 0)
            device = v;
        else if (strcmp(a, "--batch") == 0)
            rc = ct_parse_int(v, 1, 1 << 20, &B, &eb);
        else if (strcmp(a, "--seq") == 0)
            rc = ct_parse_int(v, 2, 1 << 20, &L, &eb);
        else if (strcmp(a, "--row0") == 0)
            rc = ct_parse_int(v, 0, 1 << 20, &row0, &eb);
        else if (strcmp(a, "--steps") == 0)
            rc = ct_parse_int(v, 1, 100000, &steps, &eb);
        else if (strcmp(a, "--warmup") == 0)
            rc = ct_parse_int(v, 0, 100000, &warmup, &eb);
        else if (strcmp(a, "--threads") == 0)
            rc = ct_parse_int(v, 1, 1024, &threads, &eb);
        else
            return lm_bench__usage(a);
        if (rc != 0) {
            fprintf(stderr, "lm_bench: %s: %s\n", a, eb.msg);
            return 2;
        }
    }
    if (!dir || !ids_path || B == 0 || L == 0)
        return lm_bench__usage("--lm_dir, --ids, --batch and --seq are required");

    ct_ops_t ops;
    if (ct_ops_open(&ops, device, 0, false, &eb) != 0) {
        fprintf(stderr, "lm_bench: --device %s\n", eb.msg);
        return 1;
    }
    if (ops.host_memory && ct_cpu_set_threads(threads) != 0) {
        fprintf(stderr, "lm_bench: --threads %d: this build's BLAS has no thread control\n",
                threads);
        ct_ops_close(&ops);
        return 1;
    }
    const size_t n = (size_t)B * (size_t)L;
    int32_t *ids = malloc(n * sizeof *ids), *tgt = malloc(n * sizeof *tgt);
    ctrain_lm_t *m = NULL;
    int status = 1;
    if (!ids || !tgt) {
        fprintf(stderr, "lm_bench: out of memory for %zu ids\n", n);
        goto out;
    }
    if (lm_bench__read_ids(ids_path, row0, B, L, ids) != 0)
        goto out;
    for (size_t r = 0; r < n; r++)
        tgt[r] = (r + 1) % (size_t)L == 0 ? -100 : ids[r + 1];
    const ctrain_lm_opts_t opts = {.recompute = recompute};
    double t0 = lm_bench__now();
    if (ctrain_lm_open_opts(&m, dir, &ops, B * L, L, &opts, &eb) != 0) {
        fprintf(stderr, "lm_bench: %s: %s\n", dir, eb.msg);
        goto out;
    }
    const double load_s = lm_bench__now() - t0;
    const ctrain_lm_batch_t b = {B, L, ids, NULL, tgt, NULL};
    const float count = (float)((size_t)B * (size_t)(L - 1));
    printf("{\"impl\": \"ctrain\", \"device\": \"%s\", \"threads\": %d, \"B\": %d, \"L\": %d, "
           "\"recompute\": %s, \"load_s\": %.3f, \"num_params\": %zu, \"act_bytes\": %zu, "
           "\"step_s\": [",
           device, threads, B, L, recompute ? "true" : "false", load_s, m->num_params,
           m->act_bytes);
    float loss = 0.0f;
    for (int s = 0; s < warmup + steps; s++) {
        t0 = lm_bench__now();
        ctrain_lm_zero_grad(m);
        if (ctrain_lm_forward_backward(m, &b, count, true, &loss, &eb) != 0) {
            fprintf(stderr, "\nlm_bench: step %d: %s\n", s, eb.msg);
            goto out;
        }
        const double dt = lm_bench__now() - t0;
        if (s >= warmup)
            printf("%s%.4f", s > warmup ? ", " : "", dt);
        fflush(stdout);
    }
    printf("], \"loss\": %.6f}\n", (double)loss);
    status = 0;
out:
    ctrain_lm_destroy(m);
    ct_ops_close(&ops);
    free(ids);
    free(tgt);
    return status;
}
