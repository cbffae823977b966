/*
 * test_ctrain_cli.c - the ctrain executable end to end, on tiny synthetic data:
 *   - flags: every kind of bad value is exit 2 with exactly one line on stderr naming the flag;
 *     --help lists every flag; --version; both spellings (--a_b, --a-b, --a=b) are the same;
 *   - WORLD_SIZE > 1 with no store at MASTER_ADDR:MASTER_PORT: one line naming them, the error
 *     file, exit 1 within CTRUN_COMM_TIMEOUT - never a rank training alone (2-rank training
 *     itself is tests/worker/trainer/test_ctrain_ring.c);
 *   - a short run learns: NDCG@10 (sampled and full) at least 3x the popularity baseline's,
 *     loss falling, every output file present and well-formed (metrics.jsonl keys, args.json,
 *     summary.json, the event file, checkpoints);
 *   - resume: a run SIGKILLed at an arbitrary point after a checkpoint and restarted (as an
 *     elastic restart, TORCHELASTIC_RESTART_COUNT=1) continues from the checkpoint's step and
 *     ends with parameters and Adam moments bit-identical to an uninterrupted run, and the
 *     same metrics; a checkpoint of another model configuration is refused with a clear line;
 *     --resume never starts over;
 *   - --inference_only on the best checkpoint reproduces that evaluation exactly, adopts the
 *     checkpoint's model flags, rejects conflicting ones, and also loads a plain state dict;
 *   - a non-finite loss fails the run with a clear line, or is skipped with
 *     --skip_invalid_loss; so do non-finite evaluation scores (weights turned NaN/inf by a
 *     step whose loss was still finite), whose metrics are then null, never 0.0;
 *   - an error in the run (bad data line, non-finite loss, unfit checkpoint) is one line, in
 *     stderr and the error file, without a C backtrace; the progress line's epoch is that of
 *     the last step done;
 *   - a finished run whose final checkpoint's metadata was changed resumes from the previous
 *     checkpoint with a warning naming the file; with `latest` removed, from the intact final
 *     checkpoint with one warning;
 *   - the model flags: the four variants (TiSASRec + mHC by default, --no_mhc, --no_time and
 *     both) train and say what they are, the softmax losses learn, TiSASRec refuses data
 *     without times, and TiSASRec beats SASRec by a wide margin on data whose next item
 *     depends on the last time gap;
 *   - the TensorBoard event file read back by TensorBoard's reader equals metrics.jsonl.
 * Usage: test_ctrain_cli PATH_TO_CTRAIN
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "ct_child.h"
#include "ct_test.h"
#include "ct_time.h"
#include "ctworker.h"

static const char *ctrain;
static char root[256];

#define DATA "synthetic:users=240,items=120,len=24,seed=3"
#define TINY                                                                         \
    "--dataset", DATA, "--maxlen", "20", "--hidden_units", "16", "--num_heads", "2", \
        "--batch_size", "32", "--lr", "0.005", "--seed", "7"

/* Environment of a plain single-process run: no torchrun variables from the test's caller. */
static const char *const plain_env[] = {"RANK",
                                        "WORLD_SIZE",
                                        "LOCAL_RANK",
                                        "LOCAL_WORLD_SIZE",
                                        "TORCHELASTIC_RESTART_COUNT",
                                        "TORCHELASTIC_ERROR_FILE",
                                        "CTRUN_HEARTBEAT_FD",
                                        "MASTER_ADDR",
                                        "MASTER_PORT",
                                        NULL};

static void run(ct_child_t *c, const char *const *env, const char *first, ...)
{
    char *argv[64];
    int n = 0;
    argv[n++] = (char *)ctrain;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a; a = va_arg(ap, const char *)) {
        CT_ASSERT(n < 63);
        argv[n++] = (char *)a;
    }
    va_end(ap);
    argv[n] = NULL;
    ct_child_opts_t o = {.env = env ? env : plain_env};
    int rc = ct_child_run(c, argv, &o, 300000);
    CT_ASSERT_MSG(rc == 0, "ctrain did not finish: %s", ct_strerror(rc));
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static void dir_path(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", root, name);
}

static json_t *load_json(const char *dir, const char *file)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    json_error_t je;
    json_t *o = json_load_file(p, 0, &je);
    CT_ASSERT_MSG(o != NULL, "%s: %s", p, je.text);
    return o;
}

static double jnum(json_t *o, const char *path)
{
    /* path like "best.test.full_ndcg@10" */
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *cur = o;
    for (char *tok = strtok(buf, "."); tok; tok = strtok(NULL, ".")) {
        /* keys contain '@' but no '.', so splitting on '.' is safe */
        cur = json_object_get(cur, tok);
        CT_ASSERT_MSG(cur != NULL, "no %s in JSON", path);
    }
    CT_ASSERT_MSG(json_is_number(cur), "%s is not a number", path);
    return json_number_value(cur);
}

/* The lines of metrics.jsonl. */
static int read_metrics(const char *dir, json_t **out, int max)
{
    char p[600];
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    FILE *f = fopen(p, "r");
    CT_ASSERT_MSG(f != NULL, "%s: %s", p, strerror(errno));
    char line[8192];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        CT_ASSERT(n < max);
        json_error_t je;
        out[n] = json_loads(line, 0, &je);
        CT_ASSERT_MSG(out[n] != NULL, "%s line %d: %s", p, n + 1, je.text);
        n++;
    }
    fclose(f);
    return n;
}

/* ---- flags ------------------------------------------------------------------------------- */

static void expect_usage_error(const char *needle, const char *a1, const char *a2, const char *a3,
                               const char *a4)
{
    ct_child_t c;
    run(&c, NULL, a1, a2, a3, a4, NULL);
    CT_ASSERT_MSG(c.exit_code == 2, "%s %s %s %s: exit %d (want 2), stderr: %s", a1, a2 ? a2 : "",
                  a3 ? a3 : "", a4 ? a4 : "", c.exit_code, c.err);
    CT_ASSERT_MSG(count_lines(c.err) == 1, "want one line, got: %s", c.err);
    CT_ASSERT_STR_CONTAINS(c.err, needle);
    CT_ASSERT_EQ(c.out_len, 0);
    ct_child_close(&c);
}

static void test_flags(void)
{
    expect_usage_error("--batch_size", "--batch_size", "abc", NULL, NULL);
    expect_usage_error("--batch_size", "--batch-size=0", NULL, NULL, NULL);
    expect_usage_error("--lr", "--lr", "0", NULL, NULL);
    expect_usage_error("--lr", "--lr", "nan", NULL, NULL);
    expect_usage_error("--dropout_rate", "--dropout_rate", "1.5", NULL, NULL);
    expect_usage_error("--layout", "--layout", "sideways", NULL, NULL);
    expect_usage_error("--eval", "--eval", "some", NULL, NULL);
    expect_usage_error("--device", "--device", "cuda", NULL, NULL);
    expect_usage_error("--device", "--device", "tpu", NULL, NULL);
    expect_usage_error("--backend", "--backend", "nccl", NULL, NULL);
    expect_usage_error("--use_amp", "--use_amp", "--device", "cpu", NULL);
    expect_usage_error("--norm_first", "--norm_first", "--layout", "original", NULL);
    expect_usage_error("--num_heads", "--num_heads", "3", NULL, NULL);
    expect_usage_error("unknown flag --frobnicate", "--frobnicate", "1", NULL, NULL);
    expect_usage_error("unexpected argument", "train.py", NULL, NULL, NULL);
    expect_usage_error("--dataset", "--dataset", "/nonexistent/ml-1m.txt", NULL, NULL);
    expect_usage_error("--dataset", "--dataset", "synthetic:users=x", NULL, NULL);
    expect_usage_error("--inference_only", "--inference_only", "true", NULL, NULL);
    expect_usage_error("--state_dict_path", "--state_dict_path", "/nonexistent.safetensors", NULL,
                       NULL);
    expect_usage_error("--maxlen: missing value", "--maxlen", NULL, NULL, NULL);
    expect_usage_error("--resume", "--resume", "sometimes", NULL, NULL);
    expect_usage_error("--lr_schedule", "--lr-schedule", "step", NULL, NULL);
    expect_usage_error("--lr_scale", "--lr_scale", "cubic", NULL, NULL);
    expect_usage_error("--grad_accum", "--grad_accum", "0", NULL, NULL);
    expect_usage_error("--threads", "--threads", "-1", NULL, NULL);
    expect_usage_error("--seed", "--seed", "-5", NULL, NULL);
    expect_usage_error("--skip_invalid_loss", "--skip_invalid_loss=maybe", NULL, NULL, NULL);
    expect_usage_error("--model", "--model", "bert4rec", NULL, NULL);
    expect_usage_error("--no_time: conflicts with --model tisasrec", "--no_time", "--model",
                       "tisasrec", NULL);
    expect_usage_error("--no_mhc: conflicts with --mhc", "--mhc", "true", "--no_mhc", NULL);
    expect_usage_error("--layout: post_ln conflicts with mHC", "--layout", "post_ln", NULL, NULL);
    expect_usage_error("--layout: TiSASRec runs", "--no_mhc", "--layout", "original", NULL);
    expect_usage_error("--time_span", "--time_span", "0", NULL, NULL);
    expect_usage_error("--time_span: SASRec has no time intervals", "--no_time", "--time_span", "9",
                       NULL);
    expect_usage_error("--loss", "--loss", "bpr", NULL, NULL);
    expect_usage_error("--num_negatives: only --loss sampled_ce", "--num_negatives", "8", NULL,
                       NULL);
    expect_usage_error("--min_count: the synthetic dataset", "--min_count", "2", NULL, NULL);

    ct_child_t c;
    run(&c, NULL, "--help", NULL);
    CT_ASSERT_EQ(c.exit_code, 0);
    const char *flags[] = {"dataset",
                           "train_dir",
                           "batch_size",
                           "lr",
                           "maxlen",
                           "hidden_units",
                           "num_blocks",
                           "num_epochs",
                           "num_heads",
                           "dropout_rate",
                           "l2_emb",
                           "device",
                           "inference_only",
                           "state_dict_path",
                           "norm_first",
                           "seed",
                           "eval_every",
                           "eval",
                           "backend",
                           "num_workers",
                           "layout",
                           "data_format",
                           "min_count",
                           "ckpt_every_steps",
                           "keep_checkpoints",
                           "resume",
                           "grad_clip",
                           "warmup_steps",
                           "lr_schedule",
                           "grad_accum",
                           "lr_scale",
                           "base_batch_size",
                           "skip_invalid_loss",
                           "threads",
                           "model",
                           "mhc",
                           "no_mhc",
                           "no_time",
                           "time_span",
                           "loss",
                           "num_negatives",
                           "use_amp",
                           "collective_timeout",
                           "overlap_reduction"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        char f[64];
        snprintf(f, sizeof f, "--%s ", flags[i]);
        CT_ASSERT_STR_CONTAINS(c.out, f);
    }
    ct_child_close(&c);
    run(&c, NULL, "--version", NULL);
    CT_ASSERT_EQ(c.exit_code, 0);
    CT_ASSERT_STR_CONTAINS(c.out, "ctrain ");
    ct_child_close(&c);
}

/* --a-b VALUE, --a_b=VALUE and --flag alone mean what --a_b VALUE means. */
static void test_spellings(void)
{
    char dir[300];
    dir_path(dir, sizeof dir, "spell");
    ct_child_t c;
    run(&c, NULL, "--train-dir", dir, "--dataset=" DATA, "--maxlen", "10", "--hidden-units=8",
        "--batch-size", "40", "--num-epochs", "1", "--norm-first", "--eval", "sampled",
        "--grad-clip=1.5", "--lr-schedule", "cosine", "--warmup-steps", "2", "--lr-scale", "sqrt",
        "--base-batch-size", "10", "--num_workers", "3", NULL);
    CT_ASSERT_MSG(c.exit_code == 0, "exit %d: %s", c.exit_code, c.err);
    ct_child_close(&c);
    json_t *a = load_json(dir, "args.json");
    CT_ASSERT_EQ(json_integer_value(json_object_get(a, "batch_size")), 40);
    CT_ASSERT_EQ(json_integer_value(json_object_get(a, "hidden_units")), 8);
    CT_ASSERT_STR_EQ(json_string_value(json_object_get(a, "layout")), "pre_ln");
    CT_ASSERT(json_is_true(json_object_get(a, "norm_first")));
    CT_ASSERT_STR_EQ(json_string_value(json_object_get(a, "eval")), "sampled");
    CT_ASSERT_STR_EQ(json_string_value(json_object_get(a, "lr_schedule")), "cosine");
    CT_ASSERT_STR_EQ(json_string_value(json_object_get(a, "lr_scale")), "sqrt");
    CT_ASSERT(json_real_value(json_object_get(a, "grad_clip")) == 1.5);
    json_decref(a);
    /* --eval sampled: the full-ranking numbers are null, the sampled ones are not. */
    json_t *m[4];
    int n = read_metrics(dir, m, 4);
    CT_ASSERT_EQ(n, 1);
    CT_ASSERT(json_is_null(json_object_get(json_object_get(m[0], "test"), "full_ndcg@10")));
    CT_ASSERT(json_is_number(json_object_get(json_object_get(m[0], "test"), "ndcg@10")));
    json_decref(m[0]);
}

/* ---- the environment ---------------------------------------------------------------------- */

/* WORLD_SIZE > 1 and no store at MASTER_ADDR:MASTER_PORT: one line naming them, the error
 * file, exit 1 - within the CTRUN_COMM_TIMEOUT, never a rank training alone. */
static void test_store_unreachable(void)
{
    char errfile[300], dir[300];
    dir_path(errfile, sizeof errfile, "error.json");
    dir_path(dir, sizeof dir, "world2");
    char ef[400], port[64], want[96];
    snprintf(ef, sizeof ef, "TORCHELASTIC_ERROR_FILE=%s", errfile);
    int hold = -1;
    int p = ct_test_refused_port(&hold);
    snprintf(port, sizeof port, "MASTER_PORT=%d", p);
    snprintf(want, sizeof want, "MASTER_ADDR=127.0.0.1 MASTER_PORT=%d", p);
    const char *env[] = {"RANK=1",
                         "WORLD_SIZE=2",
                         "LOCAL_RANK=1",
                         "LOCAL_WORLD_SIZE=2",
                         "MASTER_ADDR=127.0.0.1",
                         port,
                         "CTRUN_COMM_TIMEOUT=1.5",
                         ef,
                         "TORCHELASTIC_RESTART_COUNT",
                         "CTRUN_HEARTBEAT_FD",
                         NULL};
    ct_child_t c;
    run(&c, env, "--train_dir", dir, TINY, NULL);
    CT_ASSERT_EQ(c.exit_code, 1);
    CT_ASSERT_MSG(count_lines(c.err) == 1, "want one line, got: %s", c.err);
    CT_ASSERT_STR_CONTAINS(c.err, want);
    CT_ASSERT_STR_CONTAINS(c.err, "not reachable");
    CT_ASSERT_STR_CONTAINS(c.err, "CTRUN_COMM_TIMEOUT");
    CT_ASSERT_MSG(c.elapsed_ms < 60000, "took %lld ms", (long long)c.elapsed_ms);
    ct_child_close(&c);
    close(hold);
    json_error_t je;
    json_t *e = json_load_file(errfile, 0, &je);
    CT_ASSERT_MSG(e != NULL, "error file: %s", je.text);
    const char *msg = json_string_value(json_object_get(json_object_get(e, "message"), "message"));
    CT_ASSERT_STR_CONTAINS(msg, want);
    json_decref(e);
}

/* ---- learning, outputs --------------------------------------------------------------------- */

/* ctrain's event file read back by TensorBoard's own reader: every scalar of metrics.jsonl at
 * its step, as float32 (rtol 1e-6). The Python with the tensorboard package is
 * $CTRUN_TORCH2_PYTHON or ~/.venvs/torch2/bin/python; without it this check says so and is
 * skipped (the writer's framing is tested byte by byte in
 * tests/worker/trainer/test_ctrain_tboard.c). */
static void check_event_file(const char *dir)
{
    const char *py = ct_test_torch2_python();
    if (access(py, X_OK) != 0) {
        printf("  # %s not found: the TensorBoard reader check of ctrain's event file is "
               "skipped\n",
               py);
        return;
    }
    static const char script[] =
        "import glob, sys\n"
        "try:\n"
        "    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader\n"
        "except Exception as e:\n"
        "    print('no tensorboard:', e); sys.exit(77)\n"
        "files = glob.glob(sys.argv[1] + '/events.out.tfevents.*')\n"
        "assert len(files) == 1, files\n"
        "for ev in EventFileLoader(files[0]).Load():\n"
        "    for v in ev.summary.value:\n"
        "        x = v.simple_value if v.HasField('simple_value') else v.tensor.float_val[0]\n"
        "        print(v.tag, ev.step, repr(x))\n";
    ct_child_t c;
    char *argv[] = {(char *)py, "-c", (char *)script, (char *)dir, NULL};
    CT_ASSERT_OK(ct_child_run(&c, argv, NULL, 120000));
    if (c.exit_code == 77) {
        printf("  # %s", c.out);
        ct_child_close(&c);
        return;
    }
    CT_ASSERT_MSG(c.exit_code == 0, "tensorboard reader: %s%s", c.out, c.err);
    json_t *m[8];
    int n = read_metrics(dir, m, 8);
    static const char *const tags[][2] = {{"train/loss", "train_loss"},
                                          {"train/positions_per_s", "positions_per_s"},
                                          {"train/lr", "lr"},
                                          {"valid/hr@10", "valid.hr@10"},
                                          {"valid/ndcg@10", "valid.ndcg@10"},
                                          {"valid/full_hr@10", "valid.full_hr@10"},
                                          {"valid/full_ndcg@10", "valid.full_ndcg@10"},
                                          {"test/hr@10", "test.hr@10"},
                                          {"test/ndcg@10", "test.ndcg@10"},
                                          {"test/full_hr@10", "test.full_hr@10"},
                                          {"test/full_ndcg@10", "test.full_ndcg@10"}};
    const size_t nt = sizeof tags / sizeof tags[0];
    int found = 0;
    for (int i = 0; i < n; i++) {
        long long step = (long long)json_integer_value(json_object_get(m[i], "step"));
        for (size_t k = 0; k < nt; k++) {
            char want[128];
            snprintf(want, sizeof want, "%s %lld ", tags[k][0], step);
            const char *line = strstr(c.out, want);
            CT_ASSERT_MSG(line != NULL, "the event file has no %s at step %lld", tags[k][0], step);
            double got = atof(line + strlen(want)), ref = jnum(m[i], tags[k][1]);
            CT_ASSERT_CLOSE(got, ref, 1e-9, 1e-6);
            found++;
        }
        json_decref(m[i]);
    }
    CT_ASSERT_EQ(found, n * (int)nt);
    printf("  TensorBoard's reader: %d scalars at %d steps, equal to metrics.jsonl\n", found, n);
    ct_child_close(&c);
}

static void test_learns(void)
{
    char dir[300];
    dir_path(dir, sizeof dir, "learn");
    ct_child_t c;
    run(&c, NULL, "--train_dir", dir, TINY, "--num_epochs", "12", "--eval_every", "4", NULL);
    CT_ASSERT_MSG(c.exit_code == 0, "exit %d: %s", c.exit_code, c.err);
    CT_ASSERT_STR_CONTAINS(c.out, "# popularity baseline");
    CT_ASSERT_STR_CONTAINS(c.out, "# summary: {");
    CT_ASSERT_STR_CONTAINS(c.out, "the user's history");
    ct_child_close(&c);

    json_t *s = load_json(dir, "summary.json");
    const char *keys[][2] = {{"best.test.ndcg@10", "popularity.test.ndcg@10"},
                             {"best.test.full_ndcg@10", "popularity.test.full_ndcg@10"},
                             {"best.valid.full_ndcg@10", "popularity.valid.full_ndcg@10"}};
    for (int i = 0; i < 3; i++) {
        double model = jnum(s, keys[i][0]), pop = jnum(s, keys[i][1]);
        printf("  %s %.4f vs %s %.4f\n", keys[i][0], model, keys[i][1], pop);
        CT_ASSERT_MSG(model >= 3.0 * pop && pop > 0, "%s %.4f is not 3x the popularity %.4f",
                      keys[i][0], model, pop);
    }
    CT_ASSERT_STR_EQ(json_string_value(json_object_get(json_object_get(s, "best"), "selected_on")),
                     "valid.full_ndcg@10");
    json_decref(s);

    json_t *m[8];
    int n = read_metrics(dir, m, 8);
    CT_ASSERT_EQ(n, 3);
    for (int i = 0; i < n; i++) {
        CT_ASSERT_EQ(json_integer_value(json_object_get(m[i], "epoch")), 4 * (i + 1));
        CT_ASSERT_EQ(json_integer_value(json_object_get(m[i], "step")), 32 * (i + 1));
        CT_ASSERT(json_number_value(json_object_get(m[i], "positions_per_s")) > 0);
        for (int w = 0; w < 2; w++) {
            json_t *sp = json_object_get(m[i], w ? "test" : "valid");
            const char *mk[] = {"hr@10", "ndcg@10", "full_hr@10", "full_ndcg@10"};
            for (int k = 0; k < 4; k++) {
                double v = json_number_value(json_object_get(sp, mk[k]));
                CT_ASSERT(json_is_number(json_object_get(sp, mk[k])) && v >= 0 && v <= 1);
            }
        }
    }
    double l0 = json_number_value(json_object_get(m[0], "train_loss"));
    double l2 = json_number_value(json_object_get(m[2], "train_loss"));
    CT_ASSERT_MSG(l2 < l0, "train loss %g after %g", l2, l0);
    for (int i = 0; i < n; i++)
        json_decref(m[i]);

    const char *files[] = {"args.json", "popularity.json", "latest", "best.safetensors",
                           "final.safetensors"};
    struct stat st;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        CT_ASSERT_MSG(stat(p, &st) == 0, "%s missing", p);
    }
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls %s/events.out.tfevents.* >/dev/null 2>&1", dir);
    CT_ASSERT_MSG(system(cmd) == 0, "no TensorBoard event file in %s", dir);
    check_event_file(dir);
}

/* ---- the models and losses ------------------------------------------------------------------ */

/* The four variants of the seed guide and the two softmax losses: each trains, says what it is
 * in its header and args.json, and (the losses) learns well above the popularity baseline.
 * TiSASRec on data without timestamps fails (exit 1) with a line saying so. */
static void test_variants(void)
{
    static const struct {
        const char *flags[2];
        const char *title, *layout;
        int mhc_streams;
    } v[] = {
        {{NULL, NULL}, "TiSASRec+mHC layout pre_ln", "pre_ln", 4},
        {{"--no_mhc", NULL}, "TiSASRec layout original2020", "original2020", 0},
        {{"--no_time", NULL}, "SASRec+mHC layout pre_ln", "pre_ln", 4},
        {{"--no_time", "--no_mhc"}, "SASRec layout post_ln", "post_ln", 0},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char dir[300], name[32];
        snprintf(name, sizeof name, "variant%zu", i);
        dir_path(dir, sizeof dir, name);
        ct_child_t c;
        const char *f0 = v[i].flags[0] ? v[i].flags[0] : "--seed",
                   *f1 = v[i].flags[0] ? (v[i].flags[1] ? v[i].flags[1] : "--seed") : "7";
        if (v[i].flags[0] && !v[i].flags[1])
            run(&c, NULL, "--train_dir", dir, TINY, "--num_epochs", "2", f0, NULL);
        else
            run(&c, NULL, "--train_dir", dir, TINY, "--num_epochs", "2", f0, f1, NULL);
        CT_ASSERT_MSG(c.exit_code == 0, "%s: exit %d: %s", v[i].title, c.exit_code, c.err);
        CT_ASSERT_STR_CONTAINS(c.out, v[i].title);
        ct_child_close(&c);
        json_t *a = load_json(dir, "args.json");
        CT_ASSERT_STR_EQ(json_string_value(json_object_get(a, "layout")), v[i].layout);
        CT_ASSERT_EQ(json_integer_value(json_object_get(a, "mhc_streams")), v[i].mhc_streams);
        json_decref(a);
        printf("  %s: trained\n", v[i].title);
    }

    /* the softmax losses learn: NDCG@10 (full ranking, the one they are for) 3x popularity's */
    static const char *const losses[][4] = {{"--loss", "ce", NULL, NULL},
                                            {"--loss", "sampled_ce", "--num_negatives", "20"}};
    for (int i = 0; i < 2; i++) {
        char dir[300];
        dir_path(dir, sizeof dir, i ? "loss_sampled" : "loss_ce");
        ct_child_t c;
        run(&c, NULL, "--train_dir", dir, TINY, "--num_epochs", "12", "--eval_every", "12",
            "--no_time", "--no_mhc", losses[i][0], losses[i][1], losses[i][2], losses[i][3], NULL);
        CT_ASSERT_MSG(c.exit_code == 0, "%s: exit %d: %s", losses[i][1], c.exit_code, c.err);
        CT_ASSERT_STR_CONTAINS(c.out, i ? "loss sampled_ce" : "loss ce");
        ct_child_close(&c);
        json_t *s = load_json(dir, "summary.json");
        double model = jnum(s, "best.test.full_ndcg@10"),
               pop = jnum(s, "popularity.test.full_ndcg@10");
        printf("  --loss %s: test full_ndcg@10 %.4f, popularity %.4f\n", losses[i][1], model, pop);
        CT_ASSERT_MSG(model >= 3.0 * pop, "--loss %s: %.4f is not 3x the popularity %.4f",
                      losses[i][1], model, pop);
        json_decref(s);
    }

    /* TiSASRec (the default) needs timestamps: a "user item" file has none */
    char file[300], dir[300];
    dir_path(file, sizeof file, "no_times.txt");
    dir_path(dir, sizeof dir, "no_times");
    FILE *f = fopen(file, "w");
    CT_ASSERT(f != NULL);
    for (int u = 1; u <= 20; u++)
        for (int k = 0; k < 8; k++)
            fprintf(f, "%d %d\n", u, 1 + (u * 7 + k * 3) % 30);
    fclose(f);
    ct_child_t c;
    run(&c, NULL, "--train_dir", dir, "--dataset", file, "--num_epochs", "1", NULL);
    CT_ASSERT_EQ(c.exit_code, 1);
    CT_ASSERT_STR_CONTAINS(c.err, "has no timestamps");
    CT_ASSERT_STR_CONTAINS(c.err, "--no_time");
    ct_child_close(&c);
    run(&c, NULL, "--train_dir", dir, "--dataset", file, "--num_epochs", "1", "--no_time",
        "--maxlen", "10", NULL);
    CT_ASSERT_MSG(c.exit_code == 0, "SASRec on the same file: exit %d: %s", c.exit_code, c.err);
    ct_child_close(&c);
}

/* Time intervals matter on data built so that they do: on synthetic data where a long gap
 * before the last item means the next item skips one step of the hidden cycle (ctrain_synth.c;
 * noise 0 and 30 items, so a short run learns), TiSASRec ranks the next item first almost
 * always while SASRec, blind to the gaps, can only split its guesses between the two possible
 * items. Measured over seeds 1-3 after 40 epochs: TiSASRec test full NDCG@10 0.999-1.000,
 * TiSASRec+mHC 1.000, SASRec 0.889-0.904 (SASRec's ceiling is about 0.5 + 0.5/log2(3) = 0.82
 * on the cycle steps plus what the first items allow). The assertion asks for half that margin.
 * A learning run, not a code-path test: skipped under the sanitizers, where it would only be
 * slow (the code paths run in the other tests). */
static void test_time_matters(void)
{
#if defined(__SANITIZE_ADDRESS__)
    printf("  # a learning comparison: skipped under AddressSanitizer (it would only be slow)\n");
    return;
#endif
    double ndcg[2];
    for (int i = 0; i < 2; i++) {
        char dir[300];
        dir_path(dir, sizeof dir, i ? "time_sasrec" : "time_tisasrec");
        ct_child_t c;
        run(&c, NULL, "--train_dir", dir, "--dataset",
            "synthetic:users=500,items=30,len=30,noise=0", "--maxlen", "30", "--hidden_units", "32",
            "--batch_size", "64", "--lr", "0.005", "--dropout_rate", "0.1", "--l2_emb", "0",
            "--num_epochs", "40", "--eval_every", "40", "--eval", "full", "--seed", "3", "--no_mhc",
            i ? "--no_time" : NULL, NULL);
        CT_ASSERT_MSG(c.exit_code == 0, "exit %d: %s", c.exit_code, c.err);
        ct_child_close(&c);
        json_t *s = load_json(dir, "summary.json");
        ndcg[i] = jnum(s, "final.test.full_ndcg@10");
        json_decref(s);
    }
    printf("  test full NDCG@10 after 40 epochs: TiSASRec %.4f, SASRec %.4f\n", ndcg[0], ndcg[1]);
    CT_ASSERT_MSG(ndcg[0] >= ndcg[1] + 0.05, "TiSASRec %.4f does not beat SASRec %.4f by 0.05",
                  ndcg[0], ndcg[1]);
    CT_ASSERT_MSG(ndcg[0] >= 0.95, "TiSASRec %.4f did not learn the interval rule", ndcg[0]);
}

/* ---- resume --------------------------------------------------------------------------------- */

/* SASRec (the former default): the kill can land anywhere in a run long enough to reach it,
 * and SASRec's steps are the cheapest under the sanitizers; the default model's resume is
 * checked bit for bit by test_resume_default_model. */
#define LONG_RUN                                                                \
    TINY, "--no_time", "--no_mhc", "--num_epochs", "100", "--eval_every", "25", \
        "--ckpt_every_steps", "7"

/* Every tensor of two checkpoint files, byte for byte. */
static void same_checkpoint(const char *a, const char *b)
{
    ct_st_file_t *fa = NULL, *fb = NULL;
    ct_errbuf_t eb;
    CT_ASSERT_MSG(ct_st_open(&fa, a, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_MSG(ct_st_open(&fb, b, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_EQ(ct_st_count(fa), ct_st_count(fb));
    CT_ASSERT_OK(ct_st_verify(fa, &eb));
    CT_ASSERT_OK(ct_st_verify(fb, &eb));
    for (size_t i = 0; i < ct_st_count(fa); i++) {
        const ct_st_tensor_t *ta = ct_st_tensor_at(fa, i), *tb = ct_st_find(fb, ta->name);
        CT_ASSERT_MSG(tb != NULL && tb->nbytes == ta->nbytes, "%s", ta->name);
        CT_ASSERT_MSG(!ta->has_crc || ta->crc32 == tb->crc32, "%s differs (CRC %08x vs %08x)",
                      ta->name, ta->crc32, tb->crc32);
    }
    /* the CRCs cover the data; compare the data too, to be independent of them */
    for (size_t i = 0; i < ct_st_count(fa); i++) {
        const ct_st_tensor_t *ta = ct_st_tensor_at(fa, i);
        void *da = malloc(ta->nbytes ? ta->nbytes : 1), *db = malloc(ta->nbytes ? ta->nbytes : 1);
        ct_tensor_view_t va = {.name = ta->name, .dtype = ta->dtype, .ndim = ta->ndim, .data = da};
        memcpy(va.shape, ta->shape, sizeof va.shape);
        ct_tensor_view_t vb = va;
        vb.data = db;
        CT_ASSERT_OK(ct_st_read(fa, &va, 1, CT_ST_ALLOW_EXTRA, &eb));
        CT_ASSERT_OK(ct_st_read(fb, &vb, 1, CT_ST_ALLOW_EXTRA, &eb));
        CT_ASSERT_MSG(memcmp(da, db, ta->nbytes) == 0, "tensor %s differs", ta->name);
        free(da), free(db);
    }
    CT_ASSERT_STR_EQ(ct_st_meta(fa, "step"), ct_st_meta(fb, "step"));
    ct_st_close(fa);
    ct_st_close(fb);
}

static void test_resume_bit_identical(void)
{
    char ref[300], dir[300], fa[400], fb[400], latest[400];
    dir_path(ref, sizeof ref, "resume_ref");
    dir_path(dir, sizeof dir, "resume_killed");
    ct_child_t c;
    run(&c, NULL, "--train_dir", ref, LONG_RUN, NULL);
    CT_ASSERT_MSG(c.exit_code == 0, "reference run: exit %d: %s", c.exit_code, c.err);
    ct_child_close(&c);

    /* The same run, killed (SIGKILL, no chance to clean up) once a checkpoint past step 13
     * exists: wherever that lands, the restart must end in the same place. */
    char *argv[] = {(char *)ctrain, "--train_dir", dir, LONG_RUN, NULL};
    ct_child_opts_t o = {.env = plain_env};
    CT_ASSERT_OK(ct_child_start(&c, argv, &o));
    snprintf(latest, sizeof latest, "%s/latest", dir);
    int64_t deadline = ct_time_ms() + 120000;
    bool killed = false;
    while (ct_time_ms() < deadline) {
        ct_child_poll_output(&c, 2);
        FILE *f = fopen(latest, "r");
        long long step = -1;
        if (f) {
            if (fscanf(f, "step_%lld", &step) != 1)
                step = -1;
            fclose(f);
        }
        if (step >= 14) {
            ct_child_signal(&c, SIGKILL);
            killed = true;
            break;
        }
        CT_ASSERT_MSG(ct_pgid_alive(c.pid), "the run ended before it could be killed");
    }
    CT_ASSERT_MSG(killed, "no checkpoint past step 13 appeared");
    ct_child_wait(&c, 60000);
    CT_ASSERT_EQ(c.term_signal, SIGKILL);
    ct_child_close(&c);
    snprintf(fa, sizeof fa, "%s/final.safetensors", dir);
    CT_ASSERT(access(fa, F_OK) != 0);

    const char *env[] = {"TORCHELASTIC_RESTART_COUNT=1",
                         "RANK",
                         "WORLD_SIZE",
                         "LOCAL_RANK",
                         "LOCAL_WORLD_SIZE",
                         "TORCHELASTIC_ERROR_FILE",
                         "CTRUN_HEARTBEAT_FD",
                         NULL};
    /* --num_workers 0 (batches built inline) must give the same stream as the default
     * prefetching thread the reference run used. */
    run(&c, env, "--train_dir", dir, LONG_RUN, "--resume", "never", "--num_workers", "0", NULL);
    CT_ASSERT_MSG(c.exit_code == 0, "restarted run: exit %d: %s", c.exit_code, c.err);
    CT_ASSERT_STR_CONTAINS(c.out, "# resumed from");
    long long resumed_at = -1, r_epoch = -1, r_batch = -1;
    const char *r = strstr(c.out, ": step ");
    CT_ASSERT(r && sscanf(r, ": step %lld (epoch %lld, batch %lld", &resumed_at, &r_epoch,
                          &r_batch) == 3);
    printf("  killed, restarted from step %lld (epoch %lld, batch %lld of it)\n", resumed_at,
           r_epoch, r_batch);
    /* checkpoints are written every 7 steps and at every epoch's end: a loaded machine may let
     * the run pass step 14 and reach the end of epoch 2 (step 16) before the kill lands */
    CT_ASSERT(resumed_at >= 14 && (resumed_at % 7 == 0 || r_batch == 0));
    ct_child_close(&c);

    snprintf(fa, sizeof fa, "%s/final.safetensors", ref);
    snprintf(fb, sizeof fb, "%s/final.safetensors", dir);
    same_checkpoint(fa, fb);
    printf("  final parameters and Adam moments bit-identical to the uninterrupted run\n");

    /* The same evaluations, each once (records after the checkpoint were dropped and
     * replayed). */
    json_t *ma[8], *mb[8];
    int na = read_metrics(ref, ma, 8), nb = read_metrics(dir, mb, 8);
    CT_ASSERT_EQ(na, 4);
    CT_ASSERT_EQ(nb, na);
    for (int i = 0; i < na; i++) {
        json_object_del(ma[i], "positions_per_s");
        json_object_del(mb[i], "positions_per_s");
        CT_ASSERT_MSG(json_equal(ma[i], mb[i]), "metrics record %d differs", i);
        json_decref(ma[i]), json_decref(mb[i]);
    }
}

/* The default model (TiSASRec + mHC, whose interval masks and streams are new state for the
 * keyed generator to reproduce): 3 epochs, then extended to 6 by resuming its final
 * checkpoint, against 6 epochs in one go - the same bits. */
static void test_resume_default_model(void)
{
    char a[300], b[300], fa[400], fb[400];
    dir_path(a, sizeof a, "resume_default_whole");
    dir_path(b, sizeof b, "resume_default_parts");
    ct_child_t c;
    run(&c, NULL, "--train_dir", a, TINY, "--num_epochs", "6", "--eval_every", "3", NULL);
    CT_ASSERT_MSG(c.exit_code == 0, "exit %d: %s", c.exit_code, c.err);
    ct_child_close(&c);
    run(&c, NULL, "--train_dir", b, TINY, "--num_epochs", "3", "--eval_every", "3", NULL);
    CT_ASSERT_MSG(c.exit_code == 0, "exit %d: %s", c.exit_code, c.err);
    ct_child_close(&c);
    run(&c, NULL, "--train_dir", b, TINY, "--num_epochs", "6", "--eval_every", "3", NULL);
    CT_ASSERT_MSG(c.exit_code == 0, "exit %d: %s", c.exit_code, c.err);
    CT_ASSERT_STR_CONTAINS(c.out, "final.safetensors: step 24");
    ct_child_close(&c);
    snprintf(fa, sizeof fa, "%s/final.safetensors", a);
    snprintf(fb, sizeof fb, "%s/final.safetensors", b);
    same_checkpoint(fa, fb);
    printf("  TiSASRec+mHC resumed: parameters and Adam moments bit-identical\n");
}

static void test_resume_refused_and_never(void)
{
    char dir[300];
    dir_path(dir, sizeof dir, "learn"); /* finished by test_learns */
    ct_child_t c;
    run(&c, NULL, "--train_dir", dir, "--dataset", DATA, "--maxlen", "20", "--hidden_units", "24",
        "--num_heads", "2", "--batch_size", "32", "--seed", "7", NULL);
    CT_ASSERT_EQ(c.exit_code, 1);
    CT_ASSERT_STR_CONTAINS(c.err, "refusing to resume");
    CT_ASSERT_STR_CONTAINS(c.err, "hidden_units: 16 vs 24");
    ct_child_close(&c);
    run(&c, NULL, "--train_dir", dir, TINY, "--num_epochs", "12", "--batch_size", "48", NULL);
    CT_ASSERT_EQ(c.exit_code, 1);
    CT_ASSERT_STR_CONTAINS(c.err, "--batch_size");
    ct_child_close(&c);

    /* --resume never: a fresh run in the used directory. */
    char dir2[300];
    dir_path(dir2, sizeof dir2, "never");
    run(&c, NULL, "--train_dir", dir2, TINY, "--num_epochs", "2", NULL);
    CT_ASSERT_EQ(c.exit_code, 0);
    ct_child_close(&c);
    run(&c, NULL, "--train_dir", dir2, TINY, "--num_epochs", "3", "--resume", "never", NULL);
    CT_ASSERT_EQ(c.exit_code, 0);
    CT_ASSERT_STR_NOT_CONTAINS(c.out, "resumed");
    ct_child_close(&c);
    json_t *s = load_json(dir2, "summary.json");
    CT_ASSERT_EQ((int64_t)jnum(s, "steps"), 3 * 8);
    json_decref(s);
    /* and auto extends a finished run by resuming its final checkpoint */
    run(&c, NULL, "--train_dir", dir2, TINY, "--num_epochs", "4", NULL);
    CT_ASSERT_EQ(c.exit_code, 0);
    CT_ASSERT_STR_CONTAINS(c.out, "resumed from");
    CT_ASSERT_STR_CONTAINS(c.out, "final.safetensors: step 24");
    ct_child_close(&c);
}

/* ---- errors in the run: one line ------------------------------------------------------------- */

/* An error ctrain detects after start-up (bad data, a non-finite loss) is one line naming what
 * and where, in stderr and in the error file, exit 1 - no C backtrace, which is for crashes. */
static void test_run_errors_one_line(void)
{
    char data[300], errfile[300], env_errfile[340], dir[300];
    dir_path(data, sizeof data, "bad_line3.txt");
    dir_path(errfile, sizeof errfile, "error.json");
    dir_path(dir, sizeof dir, "errors");
    FILE *f = fopen(data, "w");
    CT_ASSERT(f != NULL);
    fputs("1 2\n1 3\n1 x\n2 4\n", f);
    fclose(f);
    snprintf(env_errfile, sizeof env_errfile, "TORCHELASTIC_ERROR_FILE=%s", errfile);
    const char *env[] = {env_errfile,          "RANK",
                         "WORLD_SIZE",         "LOCAL_RANK",
                         "LOCAL_WORLD_SIZE",   "TORCHELASTIC_RESTART_COUNT",
                         "CTRUN_HEARTBEAT_FD", "MASTER_ADDR",
                         "MASTER_PORT",        NULL};
    ct_child_t c;
    run(&c, env, "--train_dir", dir, "--dataset", data, NULL);
    CT_ASSERT_EQ(c.exit_code, 1);
    CT_ASSERT_MSG(count_lines(c.err) == 1, "want one line, got: %s", c.err);
    char want[400];
    snprintf(want, sizeof want, "%s:3: item id \"x\" is not an integer", data);
    CT_ASSERT_STR_CONTAINS(c.err, want);
    ct_child_close(&c);
    json_error_t je;
    json_t *e = json_load_file(errfile, 0, &je);
    CT_ASSERT_MSG(e != NULL, "%s: %s", errfile, je.text);
    json_t *msg = json_object_get(e, "message");
    CT_ASSERT_STR_CONTAINS(json_string_value(json_object_get(msg, "message")), want);
    CT_ASSERT_STR_EQ(
        json_string_value(json_object_get(json_object_get(msg, "extraInfo"), "py_callstack")), "");
    json_decref(e);

    /* A failure inside training: the error line and the progress lines before it, no more. */
    run(&c, NULL, "--train_dir", dir, TINY, "--num_epochs", "2", "--lr", "1e30", NULL);
    CT_ASSERT_EQ(c.exit_code, 1);
    CT_ASSERT_STR_CONTAINS(c.err, "error: non-finite training loss at step 1");
    CT_ASSERT_STR_NOT_CONTAINS(c.err, "backtrace");
    CT_ASSERT_STR_NOT_CONTAINS(c.err, "#0 ");
    ct_child_close(&c);

    /* A checkpoint that does not fit. */
    char learn[300];
    dir_path(learn, sizeof learn, "learn"); /* finished by test_learns */
    run(&c, NULL, "--train_dir", learn, "--dataset", DATA, "--maxlen", "20", "--hidden_units", "24",
        "--num_heads", "2", "--batch_size", "32", "--seed", "7", NULL);
    CT_ASSERT_EQ(c.exit_code, 1);
    CT_ASSERT_MSG(count_lines(c.err) == 1, "want one line, got: %s", c.err);
    CT_ASSERT_STR_CONTAINS(c.err, "refusing to resume");
    ct_child_close(&c);

    /* Nobody to evaluate: the line names the chosen model's minimum (TiSASRec 3, SASRec 4). */
    dir_path(data, sizeof data, "two_each.tsv");
    dir_path(dir, sizeof dir, "two_each");
    f = fopen(data, "w");
    CT_ASSERT(f != NULL);
    fputs("1\t10\t100\n1\t11\t200\n2\t10\t100\n2\t11\t300\n", f);
    fclose(f);
    for (int sasrec = 0; sasrec < 2; sasrec++) {
        run(&c, NULL, "--train_dir", dir, "--dataset", data, "--min_count", "1",
            sasrec ? "--no_time" : NULL, NULL);
        CT_ASSERT_EQ(c.exit_code, 1);
        CT_ASSERT_MSG(count_lines(c.err) == 1, "want one line, got: %s", c.err);
        CT_ASSERT_STR_CONTAINS(c.err, sasrec ? "no user has the 4 interactions"
                                             : "no user has the 3 interactions");
        ct_child_close(&c);
    }
}

/* The progress line names the epoch of the last step done: after the only step of a
 * one-epoch run, "epoch 1/1", not the epoch after it. */
static void test_progress_epoch(void)
{
    char dir[300];
    dir_path(dir, sizeof dir, "progress");
    ct_child_t c;
    run(&c, NULL, "--train_dir", dir, TINY, "--num_epochs", "1", "--batch_size", "240", NULL);
    CT_ASSERT_MSG(c.exit_code == 0, "exit %d: %s", c.exit_code, c.err);
    CT_ASSERT_STR_CONTAINS(c.err, "epoch 1/1 step 1/1 ");
    CT_ASSERT_STR_NOT_CONTAINS(c.err, "epoch 2/1");
    ct_child_close(&c);
}

/* ---- damaged checkpoints and pointers, end to end ------------------------------------------ */

static size_t slurp(const char *path, unsigned char **out)
{
    FILE *f = fopen(path, "rb");
    CT_ASSERT_MSG(f != NULL, "%s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc((size_t)n);
    CT_ASSERT_EQ(fread(*out, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return (size_t)n;
}

static void spit(const char *path, const unsigned char *buf, size_t n)
{
    FILE *f = fopen(path, "wb");
    CT_ASSERT(f != NULL);
    CT_ASSERT_EQ(fwrite(buf, 1, n, f), n);
    CT_ASSERT_EQ(fclose(f), 0);
}

static int count_lines_with(const char *text, const char *needle)
{
    int n = 0;
    for (const char *l = text; *l;) {
        const char *e = strchr(l, '\n');
        size_t len = e ? (size_t)(e - l) : strlen(l);
        char line[2048];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), l);
        n += strstr(line, needle) != NULL;
        l += len + (e != NULL);
    }
    return n;
}

/* A finished 2-epoch run (step_8, final at step 16) extended to 3 epochs after its final
 * checkpoint's metadata was changed - the step, or adam_steps in the training state - resumes
 * from step 8 with a warning naming final.safetensors; with `latest` removed instead, it
 * resumes from the newer, intact final checkpoint, with one warning saying `latest` is
 * missing. */
static void test_damaged_final(void)
{
    static const char *const swaps[][2] = {{"\"step\":\"16\"", "\"step\":\"14\""},
                                           {"\"step\":\"16\"", "\"step\":\"36\""},
                                           {"adam_steps\\\":16", "adam_steps\\\":17"}};
    for (int k = 0; k <= 3; k++) {
        char dir[300], final[400], latest[400];
        dir_path(dir, sizeof dir, "damaged_final");
        snprintf(final, sizeof final, "%s/final.safetensors", dir);
        snprintf(latest, sizeof latest, "%s/latest", dir);
        ct_child_t c;
        run(&c, NULL, "--train_dir", dir, TINY, "--no_time", "--no_mhc", "--num_epochs", "2",
            "--resume", "never", NULL);
        CT_ASSERT_MSG(c.exit_code == 0, "exit %d: %s", c.exit_code, c.err);
        ct_child_close(&c);
        if (k < 3) {
            unsigned char *buf;
            size_t n = slurp(final, &buf);
            unsigned char *p = memmem(buf, n, swaps[k][0], strlen(swaps[k][0]));
            CT_ASSERT_MSG(p != NULL, "no %s in %s", swaps[k][0], final);
            memcpy(p, swaps[k][1], strlen(swaps[k][1]));
            spit(final, buf, n);
            free(buf);
        } else {
            CT_ASSERT_EQ(unlink(latest), 0);
        }
        run(&c, NULL, "--train_dir", dir, TINY, "--no_time", "--no_mhc", "--num_epochs", "3", NULL);
        CT_ASSERT_MSG(c.exit_code == 0, "exit %d: %s", c.exit_code, c.err);
        CT_ASSERT_EQ(count_lines_with(c.err, "warn:"), 1);
        if (k < 3) {
            CT_ASSERT_STR_CONTAINS(c.out, "step_000000000008.safetensors: step 8 ");
            CT_ASSERT_STR_CONTAINS(c.err, "final.safetensors is damaged");
            CT_ASSERT_STR_CONTAINS(c.err, "header CRC32 mismatch");
            printf("  final.safetensors with %s: resumed from step 8, with a warning\n",
                   swaps[k][1]);
        } else {
            CT_ASSERT_STR_CONTAINS(c.out, "final.safetensors: step 16 ");
            CT_ASSERT_STR_CONTAINS(c.err, "latest is missing");
            printf("  latest missing: resumed from final.safetensors (step 16), one warning\n");
        }
        ct_child_close(&c);
        json_t *s = load_json(dir, "summary.json");
        CT_ASSERT_EQ((int64_t)jnum(s, "steps"), 24);
        json_decref(s);
    }
}

/* ---- inference ------------------------------------------------------------------------------ */

static json_t *summary_line(const char *out)
{
    const char *p = strstr(out, "# summary: ");
    CT_ASSERT_MSG(p != NULL, "no summary line in: %s", out);
    json_error_t je;
    json_t *o = json_loadb(p + 11, strcspn(p + 11, "\n"), 0, &je);
    CT_ASSERT_MSG(o != NULL, "summary: %s", je.text);
    return o;
}

static void test_inference(void)
{
    char dir[300], best[400];
    dir_path(dir, sizeof dir, "learn");
    snprintf(best, sizeof best, "%s/best.safetensors", dir);
    json_t *s = load_json(dir, "summary.json");
    json_t *want = json_object_get(s, "best");
    ct_child_t c;
    /* no model flags: they come from the checkpoint */
    run(&c, NULL, "--inference_only", "true", "--state_dict_path", best, "--dataset", DATA,
        "--batch_size", "50", NULL);
    CT_ASSERT_MSG(c.exit_code == 0, "exit %d: %s", c.exit_code, c.err);
    json_t *got = summary_line(c.out);
    json_t *res = json_object_get(got, "result");
    for (int w = 0; w < 2; w++) {
        const char *split = w ? "test" : "valid";
        CT_ASSERT_MSG(json_equal(json_object_get(res, split), json_object_get(want, split)),
                      "%s metrics of --inference_only differ from the training run's", split);
    }
    printf("  --inference_only reproduces the best evaluation exactly\n");
    json_decref(got);
    ct_child_close(&c);

    /* --state_dict_path without --inference_only: training starts from those weights, so
     * the first epoch's loss is far below a fresh model's (about 1.39 = 2 ln 2). */
    char warm[300];
    dir_path(warm, sizeof warm, "warm");
    run(&c, NULL, "--train_dir", warm, TINY, "--num_epochs", "1", "--state_dict_path", best, NULL);
    CT_ASSERT_MSG(c.exit_code == 0, "exit %d: %s", c.exit_code, c.err);
    ct_child_close(&c);
    json_t *wm[2];
    CT_ASSERT_EQ(read_metrics(warm, wm, 2), 1);
    double warm_loss = json_number_value(json_object_get(wm[0], "train_loss"));
    printf("  first epoch from the best checkpoint: train loss %.4f\n", warm_loss);
    CT_ASSERT(warm_loss < 1.2);
    json_decref(wm[0]);

    run(&c, NULL, "--inference_only", "--state_dict_path", best, "--dataset", DATA,
        "--hidden_units", "32", NULL);
    CT_ASSERT_EQ(c.exit_code, 1);
    CT_ASSERT_STR_CONTAINS(c.err, "--hidden_units was given as 32");
    ct_child_close(&c);

    /* A plain state dict (parameters only, no ctrain metadata), as the converter writes:
     * hidden_units and num_blocks come from the shapes, the rest from the flags. */
    ct_st_file_t *f = NULL;
    ct_errbuf_t eb;
    CT_ASSERT_OK(ct_st_open(&f, best, &eb));
    ct_tensor_view_t v[64];
    void *bufs[64];
    size_t n = 0;
    for (size_t i = 0; i < ct_st_count(f); i++) {
        const ct_st_tensor_t *t = ct_st_tensor_at(f, i);
        if (strncmp(t->name, "optimizer.", 10) == 0)
            continue;
        CT_ASSERT(n < 64);
        bufs[n] = malloc(t->nbytes);
        v[n] = (ct_tensor_view_t){
            .name = strdup(t->name), .dtype = t->dtype, .ndim = t->ndim, .data = bufs[n]};
        memcpy(v[n].shape, t->shape, sizeof v[n].shape);
        n++;
    }
    CT_ASSERT_OK(ct_st_read(f, v, n, CT_ST_ALLOW_EXTRA, &eb));
    ct_st_close(f);
    char plain[400];
    dir_path(plain, sizeof plain, "plain.safetensors");
    CT_ASSERT_OK(ct_st_save(plain, v, n, NULL, 0, &eb));
    for (size_t i = 0; i < n; i++)
        free((void *)v[i].name), free(bufs[i]);
    run(&c, NULL, "--inference_only", "--state_dict_path", plain, "--dataset", DATA, "--maxlen",
        "20", "--num_heads", "2", NULL);
    CT_ASSERT_MSG(c.exit_code == 0, "exit %d: %s", c.exit_code, c.err);
    got = summary_line(c.out);
    CT_ASSERT(json_equal(json_object_get(json_object_get(got, "result"), "test"),
                         json_object_get(want, "test")));
    json_decref(got);
    ct_child_close(&c);
    json_decref(s);
}

/* ---- non-finite loss ------------------------------------------------------------------------ */

/* A run whose only step makes the weights non-finite while its loss is still finite (one step
 * per epoch, lr 1e30): evaluation sees NaN/inf scores. Without --skip_invalid_loss that is one
 * error line and exit 1; with it, a warning and metrics left empty (null), never 0.0 numbers
 * that read like a model that learnt nothing. */
static void test_nonfinite_scores(void)
{
    char dir[300];
    dir_path(dir, sizeof dir, "nonfinite");
    ct_child_t c;
    run(&c, NULL, "--train_dir", dir, TINY, "--no_time", "--no_mhc", "--num_epochs", "1",
        "--batch_size", "240", "--lr", "1e30", NULL);
    CT_ASSERT_MSG(c.exit_code == 1, "exit %d: %s", c.exit_code, c.err);
    CT_ASSERT_STR_CONTAINS(c.err, "error: evaluation after epoch 1 (step 1): the model's scores "
                                  "are NaN or infinite for 240 of 240 validation and 240 of 240 "
                                  "test users: its weights are not finite");
    CT_ASSERT_STR_NOT_CONTAINS(c.err, "backtrace");
    CT_ASSERT_STR_NOT_CONTAINS(c.out, "0.0000");
    ct_child_close(&c);

    run(&c, NULL, "--train_dir", dir, TINY, "--no_time", "--no_mhc", "--num_epochs", "1",
        "--batch_size", "240", "--lr", "1e30", "--skip_invalid_loss", "--resume", "never", NULL);
    CT_ASSERT_MSG(c.exit_code == 0, "exit %d: %s", c.exit_code, c.err);
    CT_ASSERT_STR_CONTAINS(c.err, "warn: evaluation after epoch 1 (step 1): the model's scores "
                                  "are NaN or infinite");
    CT_ASSERT_STR_NOT_CONTAINS(c.out, "0.0000");
    ct_child_close(&c);
    json_t *m[2];
    CT_ASSERT_EQ(read_metrics(dir, m, 2), 1);
    for (int w = 0; w < 2; w++) {
        json_t *split = json_object_get(m[0], w ? "test" : "valid");
        CT_ASSERT(json_is_null(json_object_get(split, "ndcg@10")));
        CT_ASSERT(json_is_null(json_object_get(split, "full_ndcg@10")));
        CT_ASSERT_EQ(json_integer_value(json_object_get(split, "nonfinite_users")), 240);
    }
    json_decref(m[0]);
    json_t *s = load_json(dir, "summary.json");
    CT_ASSERT(json_object_get(s, "best") == NULL); /* no evaluation had metrics */
    CT_ASSERT(json_is_null(
        json_object_get(json_object_get(json_object_get(s, "final"), "valid"), "full_ndcg@10")));
    json_decref(s);
}

static void test_invalid_loss(void)
{
    char dir[300];
    dir_path(dir, sizeof dir, "nan");
    ct_child_t c;
    /* lr 1e30 turns the parameters to inf/NaN after the first update. */
    run(&c, NULL, "--train_dir", dir, TINY, "--num_epochs", "2", "--lr", "1e30", NULL);
    CT_ASSERT_EQ(c.exit_code, 1);
    CT_ASSERT_STR_CONTAINS(c.err, "non-finite training loss at step 1");
    ct_child_close(&c);
    run(&c, NULL, "--train_dir", dir, TINY, "--num_epochs", "2", "--lr", "1e30",
        "--skip_invalid_loss", "--resume", "never", NULL);
    CT_ASSERT_MSG(c.exit_code == 0, "exit %d: %s", c.exit_code, c.err);
    ct_child_close(&c);
    json_t *s = load_json(dir, "summary.json");
    CT_ASSERT_EQ((int64_t)jnum(s, "skipped_steps"), 15);
    json_decref(s);
}

int main(int argc, char **argv)
{
    CT_ASSERT(argc == 2);
    ctrain = argv[1];
    /* ctrain here runs on the CPU: no GPU is visible to it (an invalid first index hides every
     * device), so "--device cuda" and "--backend nccl" must be refused on any machine. */
    setenv("CUDA_VISIBLE_DEVICES", "-1", 1);
    snprintf(root, sizeof root, "/tmp/ct_ctrain_cli.XXXXXX");
    CT_ASSERT(mkdtemp(root) != NULL);
    CT_RUN(test_flags);
    CT_RUN(test_spellings);
    CT_RUN(test_store_unreachable);
    CT_RUN(test_learns);
    CT_RUN(test_variants);
    CT_RUN(test_time_matters);
    CT_RUN(test_resume_bit_identical);
    CT_RUN(test_resume_default_model);
    CT_RUN(test_resume_refused_and_never);
    CT_RUN(test_inference);
    CT_RUN(test_invalid_loss);
    CT_RUN(test_nonfinite_scores);
    CT_RUN(test_run_errors_one_line);
    CT_RUN(test_progress_epoch);
    CT_RUN(test_damaged_final);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", root);
    return 0;
}
