/*
 * chaos.c - bench/chaos: recovery under many faults, measured. Runs a 2-rank ctrain job on the
 * default synthetic data (the README's main job, longer) once cleanly and once under ctrun with
 * N seeded kills (default 20: kill:rank=any:at=step=S for N distinct steps S drawn from the
 * seed), then prints, per fault, ctrun's detection latency, time to resume (detection to the
 * first step reported by the next attempt) and steps replayed (from ctrun's report.json), their
 * summary, the checkpoint cost behind ctrain's --ckpt_every_steps default, and the verdict: is
 * the chaos run's final.safetensors (model and optimizer) bit for bit the clean run's?
 *
 *   build/bench/chaos --ctrun build/launcher/ctrun --ctrain build/worker/ctrain
 *                     [--kills N] [--epochs E] [--seed S] [--dir DIR]
 *   meson test -C build --benchmark chaos -v
 *
 * Not a test: it asserts nothing and exits 0 unless a run could not be made (1) or the final
 * weights differ (2).
 */
#include <errno.h>
#include <ftw.h>
#include <glob.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ctworker.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Runs argv with stdout and stderr appended to log; returns the exit status (-1: not run). */
static int run(char *const argv[], const char *log)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        FILE *f = fopen(log, "a");
        if (f == NULL)
            _exit(126);
        dup2(fileno(f), 1);
        dup2(fileno(f), 2);
        execv(argv[0], argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Every tensor of the two final.safetensors equal byte for byte; -1 when unreadable. */
static int same_bits(const char *a, const char *b, size_t *bytes)
{
    char pa[800], pb[800];
    snprintf(pa, sizeof pa, "%s/final.safetensors", a);
    snprintf(pb, sizeof pb, "%s/final.safetensors", b);
    ct_st_file_t *fa = NULL, *fb = NULL;
    ct_errbuf_t eb = {{0}};
    if (ct_st_open(&fa, pa, &eb) != 0 || ct_st_open(&fb, pb, &eb) != 0) {
        fprintf(stderr, "chaos: %s\n", eb.msg);
        ct_st_close(fa);
        return -1;
    }
    int same = ct_st_count(fa) == ct_st_count(fb);
    *bytes = 0;
    for (size_t i = 0; same && i < ct_st_count(fa); i++) {
        const ct_st_tensor_t *ta = ct_st_tensor_at(fa, i), *tb = ct_st_find(fb, ta->name);
        if (tb == NULL || tb->nbytes != ta->nbytes) {
            same = 0;
            break;
        }
        void *x = malloc(ta->nbytes + 1), *y = malloc(ta->nbytes + 1);
        ct_tensor_view_t v = {.name = ta->name, .dtype = ta->dtype, .ndim = ta->ndim, .data = x};
        memcpy(v.shape, ta->shape, sizeof v.shape);
        int rc = x && y ? ct_st_read(fa, &v, 1, CT_ST_ALLOW_EXTRA, &eb) : -ENOMEM;
        v.data = y;
        if (rc == 0)
            rc = ct_st_read(fb, &v, 1, CT_ST_ALLOW_EXTRA, &eb);
        same = rc == 0 && memcmp(x, y, ta->nbytes) == 0;
        *bytes += ta->nbytes;
        free(x);
        free(y);
    }
    ct_st_close(fa);
    ct_st_close(fb);
    return same;
}

/* Checkpoint cost of ctrain's default model (101,058 parameters + Adam's two moments). */
static void checkpoint_cost(const char *dir)
{
    enum { N = 3 * 101058, REPS = 20 };
    float *w = calloc(N, sizeof *w);
    ct_tensor_view_t v = {.name = "w", .dtype = CT_DTYPE_F32, .ndim = 1, .shape = {N}, .data = w};
    ct_ckpt_dir_t d;
    ct_errbuf_t eb = {{0}};
    char path[800];
    snprintf(path, sizeof path, "%s/ckpt_cost", dir);
    if (w == NULL || ct_ckpt_dir_init(&d, path, 3, true, &eb) != 0) {
        free(w);
        return;
    }
    double t[REPS], sum = 0, min = 1e9, max = 0;
    for (int i = 0; i < REPS; i++) {
        ct_ckpt_meta_t *m = calloc(1, sizeof *m);
        m->step = i + 1;
        m->world_size = 1;
        double t0 = now_s();
        int rc = ct_ckpt_save(&d, CT_CKPT_STEP, &v, 1, m, &eb);
        t[i] = (now_s() - t0) * 1e3;
        free(m);
        if (rc != 0)
            break;
        sum += t[i];
        min = t[i] < min ? t[i] : min;
        max = t[i] > max ? t[i] : max;
    }
    ct_ckpt_dir_close(&d);
    free(w);
    printf("# checkpoint cost (ctrain's default model, %zu bytes, write + fsync + rename + "
           "`latest`, %d saves): min %.2f ms, mean %.2f ms, max %.2f ms\n",
           (size_t)N * sizeof(float), REPS, min, sum / REPS, max);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int rm_cb(const char *p, const struct stat *s, int f, struct FTW *w)
{
    (void)s;
    (void)f;
    (void)w;
    remove(p);
    return 0;
}

int main(int argc, char **argv)
{
    const char *ctrun = NULL, *ctrain = NULL, *dir_arg = NULL;
    int kills = 20, epochs = 30;
    unsigned seed = 7;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--ctrun") == 0 && v)
            ctrun = argv[++i];
        else if (strcmp(argv[i], "--ctrain") == 0 && v)
            ctrain = argv[++i];
        else if (strcmp(argv[i], "--kills") == 0 && v)
            kills = atoi(argv[++i]);
        else if (strcmp(argv[i], "--epochs") == 0 && v)
            epochs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seed") == 0 && v)
            seed = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--dir") == 0 && v)
            dir_arg = argv[++i];
        else {
            fprintf(stderr, "usage: chaos --ctrun PATH --ctrain PATH [--kills N] [--epochs E] "
                            "[--seed S] [--dir DIR]\n");
            return 1;
        }
    }
    const int steps = epochs * 8; /* 1000 synthetic users, global batch 128 */
    if (ctrun == NULL || ctrain == NULL || kills < 1 || kills > 100 || steps < 2 * kills + 2) {
        fprintf(stderr, "chaos: need --ctrun, --ctrain, 1..100 kills and at least 2 steps per "
                        "kill (8 steps per epoch)\n");
        return 1;
    }
    char dir[600];
    const char *tmp = getenv("TMPDIR");
    if (dir_arg != NULL)
        snprintf(dir, sizeof dir, "%s", dir_arg);
    else
        snprintf(dir, sizeof dir, "%s/ctrun-chaos.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (dir_arg == NULL ? mkdtemp(dir) == NULL : (mkdir(dir, 0755) != 0 && errno != EEXIST)) {
        perror("chaos: scratch folder");
        return 1;
    }
    char clean[700], chaos[700], logs[700], log[700], ep[16];
    snprintf(clean, sizeof clean, "%s/clean", dir);
    snprintf(chaos, sizeof chaos, "%s/chaos", dir);
    snprintf(logs, sizeof logs, "%s/logs", dir);
    snprintf(log, sizeof log, "%s/output.log", dir);
    snprintf(ep, sizeof ep, "%d", epochs);

    /* N distinct kill steps in [1, steps-1]. */
    int *at = calloc((size_t)kills, sizeof *at);
    char *spec = calloc((size_t)kills, 40);
    if (at == NULL || spec == NULL)
        return 1;
    unsigned s = seed;
    for (int k = 0; k < kills; k++) {
        int step, dup;
        do {
            s = s * 1103515245u + 12345u;
            step = 1 + (int)((s >> 8) % (unsigned)(steps - 1));
            dup = 0;
            for (int j = 0; j < k; j++)
                dup |= at[j] == step;
        } while (dup);
        at[k] = step;
        char one[40];
        snprintf(one, sizeof one, "%skill:rank=any:at=step=%d", k ? ";" : "", step);
        strcat(spec, one);
    }
    char restarts[32], seed_s[16];
    snprintf(restarts, sizeof restarts, "--max_restarts=%d", kills * 2 + 2);
    snprintf(seed_s, sizeof seed_s, "%u", seed);
    printf("# chaos: 2-rank ctrain, default synthetic data and model, %d epochs (%d steps), "
           "checkpoints every 10 steps; %d kills (seed %u); output in %s\n",
           epochs, steps, kills, seed, log);
    fflush(stdout);
    char *clean_argv[] = {(char *)ctrun, "--standalone", "--nproc_per_node=2", "--max_restarts=0",
                          (char *)ctrain, "--train_dir", clean, "--num_epochs", ep,
                          "--eval_every", "0", "--ckpt_every_steps", "10", NULL};
    double t0 = now_s();
    int rc = run(clean_argv, log);
    double clean_s = now_s() - t0;
    if (rc != 0) {
        fprintf(stderr, "chaos: the clean run failed (status %d); see %s\n", rc, log);
        return 1;
    }
    char *chaos_argv[] = {(char *)ctrun, "--standalone", "--nproc_per_node=2", restarts,
                          "--log_dir", logs, "--inject", spec, "--inject_seed", seed_s,
                          (char *)ctrain, "--train_dir", chaos, "--num_epochs", ep,
                          "--eval_every", "0", "--ckpt_every_steps", "10", NULL};
    t0 = now_s();
    rc = run(chaos_argv, log);
    double chaos_s = now_s() - t0;
    if (rc != 0) {
        fprintf(stderr, "chaos: the chaos run failed (status %d); see %s\n", rc, log);
        return 1;
    }
    char pattern[800];
    snprintf(pattern, sizeof pattern, "%s/*_*/report.json", logs);
    glob_t g;
    json_t *report = NULL;
    if (glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc == 1)
        report = json_load_file(g.gl_pathv[0], 0, NULL);
    if (glob(pattern, 0, NULL, &g) == 0)
        globfree(&g);
    if (report == NULL) {
        fprintf(stderr, "chaos: no report.json under %s\n", logs);
        return 1;
    }
    json_t *rows = json_object_get(report, "failures");
    size_t n = json_array_size(rows);
    double *det = calloc(n + 1, sizeof *det), *res = calloc(n + 1, sizeof *res);
    size_t nd = 0, nr = 0;
    long replayed = 0, injected = 0;
    printf("%-7s %-5s %-42s %12s %12s %9s\n", "attempt", "rank", "cause", "detect_ms",
           "resume_ms", "replayed");
    for (size_t i = 0; i < n; i++) {
        json_t *r = json_array_get(rows, i);
        const char *cause = json_string_value(json_object_get(r, "cause"));
        json_t *d = json_object_get(r, "detection_latency_ms");
        json_t *t = json_object_get(r, "time_to_resume_ms");
        json_t *p = json_object_get(r, "steps_replayed");
        bool inj = cause != NULL && strncmp(cause, "injected", 8) == 0;
        char ds[32] = "-", ts[32] = "-", ps[32] = "-";
        if (json_is_number(d))
            snprintf(ds, sizeof ds, "%.2f", json_number_value(d));
        if (json_is_number(t))
            snprintf(ts, sizeof ts, "%.1f", json_number_value(t));
        if (json_is_integer(p))
            snprintf(ps, sizeof ps, "%lld", (long long)json_integer_value(p));
        printf("%-7lld %-5lld %-42.42s %12s %12s %9s\n",
               (long long)json_integer_value(json_object_get(r, "attempt")),
               (long long)json_integer_value(json_object_get(r, "rank")), cause ? cause : "?",
               ds, ts, ps);
        if (!inj)
            continue;
        injected++;
        if (json_is_number(d))
            det[nd++] = json_number_value(d);
        if (json_is_number(t))
            res[nr++] = json_number_value(t);
        if (json_is_integer(p))
            replayed += (long)json_integer_value(p);
    }
    qsort(det, nd, sizeof *det, cmp_double);
    qsort(res, nr, sizeof *res, cmp_double);
    printf("# %ld injected kills fired (of %d), %zu failure rows; attempts %lld\n", injected, kills,
           n, (long long)json_integer_value(json_object_get(report, "attempts")));
    if (nd > 0)
        printf("# detection latency: median %.2f ms, max %.2f ms (target <= 10 ms)\n",
               det[nd / 2], det[nd - 1]);
    if (nr > 0)
        printf("# time to resume (detection -> first step of the next attempt): median %.0f ms, "
               "max %.0f ms (target <= 200 ms)\n",
               res[nr / 2], res[nr - 1]);
    printf("# steps replayed: %ld in all (%.1f per kill; checkpoints every 10 steps)\n", replayed,
           injected ? (double)replayed / (double)injected : 0.0);
    printf("# wall time: clean %.1f s, with the kills %.1f s\n", clean_s, chaos_s);
    checkpoint_cost(dir);
    size_t bytes = 0;
    int same = same_bits(clean, chaos, &bytes);
    printf("# bit identity of final.safetensors (model + optimizer, %zu bytes): %s\n", bytes,
           same == 1 ? "IDENTICAL" : same == 0 ? "DIFFERENT" : "unreadable");
    json_decref(report);
    free(det);
    free(res);
    free(at);
    free(spec);
    if (dir_arg == NULL && same == 1)
        nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return same == 1 ? 0 : 2;
}
