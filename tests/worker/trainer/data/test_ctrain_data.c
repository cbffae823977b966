/*
 * test_ctrain_data.c - dataset loading: the three file formats, filtering and re-indexing, the
 * stable chronological sort, TiSASRec time scaling, the leave-one-out split, and a file:line
 * error for every kind of malformed line; a large file with a bad third line is rejected
 * without being read whole (the peak memory of a child process that loads it is measured), as
 * is a file with no line break at all. With `--real ml-1m-r` or `--real ml-100k` it checks only
 * that real dataset under $CT_DATA_DIR against statistics computed independently with Python,
 * and skips (77) with a message when CT_DATA_DIR is unset or the file is absent.
 */
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ct_time.h"

#include "ctrain_data.h"
#include "ct_test.h"

static char tmpdir[] = "/tmp/ct_data_testXXXXXX";

static const char *write_file(const char *name, const char *text)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    CT_ASSERT(f != NULL);
    fwrite(text, 1, strlen(text), f);
    fclose(f);
    return path;
}

static void expect_user(const ctrain_dataset_t *ds, int32_t u, const int32_t *items, int n)
{
    CT_ASSERT_EQ(ds->user_start[u + 1] - ds->user_start[u], n);
    for (int k = 0; k < n; k++)
        CT_ASSERT_MSG(ds->items[ds->user_start[u] + k] == items[k], "user %d item %d: %d vs %d", u,
                      k, ds->items[ds->user_start[u] + k], items[k]);
}

/* The first interactions of user u (which has more). */
static void expect_prefix(const ctrain_dataset_t *ds, int32_t u, const int32_t *items, int n)
{
    CT_ASSERT_GE(ds->user_start[u + 1] - ds->user_start[u], n);
    for (int k = 0; k < n; k++)
        CT_ASSERT_EQ(ds->items[ds->user_start[u] + k], items[k]);
}

static void test_sasrec_format(void)
{
    /* Users not grouped and with a gap (user 3 absent): ids are kept, order is file order. */
    const char *p = write_file("s.txt", "1 5\n1 3\n2 2\n1 4\n2 1\n2 7\n4 1\n4 2\n4 3\n4 4\n");
    ctrain_dataset_t ds;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_MSG(ctrain_data_load(&ds, p, CTRAIN_DATA_AUTO, NULL, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_EQ(ds.num_users, 4);
    CT_ASSERT_EQ(ds.num_items, 7);
    CT_ASSERT_EQ(ds.num_interactions, 10);
    CT_ASSERT(ds.times == NULL && ds.time_scaled == NULL);
    expect_user(&ds, 1, (int32_t[]){5, 3, 4}, 3);
    expect_user(&ds, 2, (int32_t[]){2, 1, 7}, 3);
    expect_user(&ds, 3, NULL, 0);
    expect_user(&ds, 4, (int32_t[]){1, 2, 3, 4}, 4);
    /* Split: n >= 3 -> valid = S[n-2], test = S[n-1]. */
    CT_ASSERT_EQ(ds.train_len[1], 1);
    CT_ASSERT_EQ(ds.valid_item[1], 3);
    CT_ASSERT_EQ(ds.test_item[1], 4);
    CT_ASSERT_EQ(ds.train_len[3], 0);
    CT_ASSERT_EQ(ds.valid_item[3], 0);
    CT_ASSERT_EQ(ds.train_len[4], 2);
    CT_ASSERT_EQ(ds.num_eval_users, 3);
    CT_ASSERT(ctrain_data_in_train(&ds, 4, 1) && ctrain_data_in_train(&ds, 4, 2));
    CT_ASSERT(!ctrain_data_in_train(&ds, 4, 3) && !ctrain_data_in_train(&ds, 4, 4));
    CT_ASSERT(!ctrain_data_in_train(&ds, 3, 1));
    CT_ASSERT_CLOSE(ctrain_data_mean_train_len(&ds), (1 + 1 + 2) / 3.0, 1e-12, 0);
    ctrain_data_free(&ds);
    ctrain_data_free(&ds); /* twice is safe */

    /* min_eval_len = 4 (SASRec.pytorch HEAD): users with 3 interactions are all train. */
    ctrain_data_opts_t o = {.min_count = 5, .min_eval_len = 4};
    CT_ASSERT_OK(ctrain_data_load(&ds, p, CTRAIN_DATA_SASREC, &o, &eb));
    CT_ASSERT_EQ(ds.train_len[1], 3);
    CT_ASSERT_EQ(ds.valid_item[1], 0);
    CT_ASSERT_EQ(ds.num_eval_users, 1);
    ctrain_data_free(&ds);
}

static void test_tsv_filter_reindex_sort(void)
{
    /* Users 10 and 20 have 5 rows each, user 30 only 1 (dropped); items 100 and 200 have 5
     * rows each, item 300 has 1 (dropped). Timestamps out of order with a tie (t=50) that
     * must keep file order. */
    const char *p = write_file("t.tsv",
                               "20\t200\t4\t90\n"
                               "10\t100\t3\t50\n"
                               "10\t200\t5\t50\n"
                               "10\t100\t3\t10\n"
                               "20\t100\t1\t70\n"
                               "10\t200\t2.5\t30\n"
                               "20\t200\t4\t80\n"
                               "30\t100\t3\t5\n"
                               "10\t300\t3\t60\n"
                               "20\t100\t4\t85\n"
                               "20\t200\t4\t95\n"
                               "10\t100\t3\t40\n");
    ctrain_dataset_t ds;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_MSG(ctrain_data_load(&ds, p, CTRAIN_DATA_AUTO, NULL, &eb) == 0, "%s", eb.msg);
    /* After the single counting pass: user 10 keeps 5 rows (item 300 dropped), user 20 5. */
    CT_ASSERT_EQ(ds.num_users, 2);
    CT_ASSERT_EQ(ds.num_items, 2);
    CT_ASSERT_EQ(ds.num_interactions, 10);
    /* User 10 -> 1; times 10,30,40,50,50 -> items 100,200,100,100,200 -> 1,2,1,1,2. */
    expect_user(&ds, 1, (int32_t[]){1, 2, 1, 1, 2}, 5);
    expect_user(&ds, 2, (int32_t[]){1, 2, 1, 2, 2}, 5);
    CT_ASSERT(ds.times != NULL);
    CT_ASSERT_EQ(ds.times[0], 10);
    CT_ASSERT_EQ(ds.times[4], 50);
    /* Scaling for user 1: gaps 20,10,10,0 -> s = 10; t' = (t - 10)/10 + 1 = 1,3,4,5,5. */
    int64_t want1[] = {1, 3, 4, 5, 5};
    for (int k = 0; k < 5; k++)
        CT_ASSERT_EQ(ds.time_scaled[k], want1[k]);
    /* User 2: times 70,80,85,90,95 -> s = 5; t' = 1,3,4,5,6. */
    int64_t want2[] = {1, 3, 4, 5, 6};
    for (int k = 0; k < 5; k++)
        CT_ASSERT_EQ(ds.time_scaled[5 + k], want2[k]);
    ctrain_data_free(&ds);

    /* Three columns (no rating) are accepted too; rounding is half to even (Python round). */
    p = write_file("t3.tsv", "1\t1\t0\n1\t2\t2\n1\t1\t5\n");
    ctrain_data_opts_t o = {.min_count = 1, .min_eval_len = 3};
    CT_ASSERT_MSG(ctrain_data_load(&ds, p, CTRAIN_DATA_TSV, &o, &eb) == 0, "%s", eb.msg);
    /* s = 2 (gaps 2 and 3): (5-0)/2 = 2.5 -> 2 (even), +1 = 3. */
    CT_ASSERT_EQ(ds.time_scaled[0], 1);
    CT_ASSERT_EQ(ds.time_scaled[1], 2);
    CT_ASSERT_EQ(ds.time_scaled[2], 3);
    ctrain_data_free(&ds);
}

static void test_ml1m_format(void)
{
    const char *p = write_file("ratings.dat", "1::1193::5::978300760\r\n1::661::3::978302109\r\n"
                                              "2::1193::4::978298413\r\n1::914::3::978301968\r\n");
    ctrain_dataset_t ds;
    ct_errbuf_t eb;
    ctrain_data_opts_t o = {.min_count = 1, .min_eval_len = 3};
    CT_ASSERT_MSG(ctrain_data_load(&ds, p, CTRAIN_DATA_AUTO, &o, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_EQ(ds.num_users, 2);
    CT_ASSERT_EQ(ds.num_items, 3); /* 661 -> 1, 914 -> 2, 1193 -> 3 */
    expect_user(&ds, 1, (int32_t[]){3, 2, 1}, 3);
    expect_user(&ds, 2, (int32_t[]){3}, 1);
    ctrain_data_free(&ds);
    /* With the default min_count 5 nothing survives: a clear error, not an empty dataset. */
    CT_ASSERT_ERR(ctrain_data_load(&ds, p, CTRAIN_DATA_ML1M, NULL, &eb), CT_EFORMAT);
    CT_ASSERT_STR_CONTAINS(eb.msg, "fewer than 5 rows");
}

static void expect_error(const char *name, const char *text, ctrain_data_format_t f, const char *want)
{
    const char *p = write_file(name, text);
    ctrain_dataset_t ds;
    ct_errbuf_t eb = {{0}};
    ctrain_data_opts_t o = {.min_count = 1, .min_eval_len = 3};
    int rc = ctrain_data_load(&ds, p, f, &o, &eb);
    CT_ASSERT_MSG(rc != 0, "%s should be rejected", name);
    char full[600];
    snprintf(full, sizeof full, "%s/%s%s", tmpdir, name, want);
    CT_ASSERT_STR_EQ(eb.msg, full);
    CT_ASSERT(strchr(eb.msg, '\n') == NULL);
    CT_ASSERT(ds.items == NULL && ds.user_start == NULL); /* nothing left allocated */
}

static void test_malformed_lines(void)
{
    expect_error("a.txt", "1 2\n1 x\n", CTRAIN_DATA_SASREC,
                 ":2: item id \"x\" is not an integer in 1..2147483647");
    expect_error("b.txt", "1 2\n1 2 3\n", CTRAIN_DATA_SASREC,
                 ":2: expected 2 fields \"user item\", got 3");
    expect_error("c.txt", "1 2\n\n1 3\n", CTRAIN_DATA_SASREC, ":2: empty line");
    expect_error("d.txt", "0 2\n", CTRAIN_DATA_SASREC,
                 ":1: user id \"0\" is not an integer in 1..2147483647");
    expect_error("e.txt", "12abc 2\n", CTRAIN_DATA_SASREC,
                 ":1: user id \"12abc\" is not an integer in 1..2147483647");
    expect_error("f.txt", "1 99999999999\n", CTRAIN_DATA_SASREC,
                 ":1: item id \"99999999999\" is not an integer in 1..2147483647");
    expect_error("g.tsv", "1\t2\t3\t4\n1\t2\n", CTRAIN_DATA_TSV,
                 ":2: expected 3 or 4 tab-separated fields (user, item, [rating,] timestamp), got 2");
    expect_error("h.tsv", "1\t2\tgood\t4\n", CTRAIN_DATA_TSV, ":1: rating \"good\" is not a number");
    expect_error("i.tsv", "1\t2\t3\t4.5\n", CTRAIN_DATA_TSV,
                 ":1: timestamp \"4.5\" is not an integer (Unix seconds)");
    expect_error("j.dat", "1::2::3\n", CTRAIN_DATA_ML1M,
                 ":1: expected 4 fields \"user::item::rating::timestamp\", got 3");
    expect_error("k.txt", "", CTRAIN_DATA_SASREC, ": no interactions");
    const char nul[] = {'1', ' ', '2', '\n', '1', '\0', '3', '\n', 0};
    const char *p = write_file("l.txt", "x");
    FILE *f = fopen(p, "wb");
    fwrite(nul, 1, 8, f);
    fclose(f);
    ctrain_dataset_t ds;
    ct_errbuf_t eb;
    CT_ASSERT_ERR(ctrain_data_load(&ds, p, CTRAIN_DATA_AUTO, NULL, &eb), CT_EFORMAT);
    CT_ASSERT_STR_CONTAINS(eb.msg, "l.txt:2: contains a NUL byte");
    CT_ASSERT(ctrain_data_load(&ds, "/nonexistent/data.txt", CTRAIN_DATA_AUTO, NULL, &eb) < 0);
    CT_ASSERT_STR_EQ(eb.msg, "/nonexistent/data.txt: No such file or directory");
    ctrain_data_format_t fmt;
    CT_ASSERT_ERR(ctrain_data_parse_format("csv", &fmt, &eb), CT_EPARSE);
    CT_ASSERT_OK(ctrain_data_parse_format("ml1m", &fmt, &eb));
    CT_ASSERT_EQ(fmt, CTRAIN_DATA_ML1M);
}

/* Peak resident memory of this process (VmHWM of /proc/self/status), in KiB; -1 if unknown. */
static long peak_rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return -1;
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

/* Loads path in a forked child (so the peak is that of the load alone); returns the child's
 * growth of peak memory in KiB and its error message. */
static long load_in_child(const char *path, char *msg, size_t size, double *seconds)
{
    int fds[2];
    CT_ASSERT_EQ(pipe(fds), 0);
    int64_t t0 = ct_time_ns();
    pid_t pid = fork();
    CT_ASSERT(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        long before = peak_rss_kib();
        ctrain_dataset_t ds;
        ct_errbuf_t eb = {{0}};
        int rc = ctrain_data_load(&ds, path, CTRAIN_DATA_AUTO, NULL, &eb);
        long grown = peak_rss_kib() - before;
        char out[CT_ERRBUF_SIZE + 64];
        int n = snprintf(out, sizeof out, "%ld %d %s", grown, rc, eb.msg);
        ssize_t w = write(fds[1], out, (size_t)n);
        _exit(w == n ? 0 : 3);
    }
    close(fds[1]);
    char out[CT_ERRBUF_SIZE + 64];
    size_t got = 0;
    ssize_t r;
    while ((r = read(fds[0], out + got, sizeof out - 1 - got)) > 0)
        got += (size_t)r;
    out[got] = '\0';
    close(fds[0]);
    int status;
    CT_ASSERT_EQ(waitpid(pid, &status, 0), pid);
    *seconds = (double)(ct_time_ns() - t0) / 1e9;
    CT_ASSERT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    long grown;
    int rc, used = 0;
    CT_ASSERT(sscanf(out, "%ld %d %n", &grown, &rc, &used) == 2);
    CT_ASSERT_MSG(rc != 0, "the load succeeded");
    snprintf(msg, size, "%s", out + used);
    return grown;
}

/* A 128 MiB file whose third line is bad: the error names line 3 and the load stops there,
 * its peak memory a small fraction of the file (before streaming, the whole file was read
 * into memory first: 128 MiB and more). A file without any newline stops at the line limit. */
static void test_large_file_bad_early(void)
{
    enum { BLOCK = 1 << 20, BLOCKS = 128 };
    char path[300];
    snprintf(path, sizeof path, "%s/large.txt", tmpdir);
    FILE *f = fopen(path, "wb");
    CT_ASSERT(f != NULL);
    fputs("1 2\n1 3\n1 x\n", f);
    char *block = malloc(BLOCK);
    size_t len = 0;
    for (int u = 1; len + 32 < BLOCK; u++)
        len += (size_t)snprintf(block + len, BLOCK - len, "%d %d\n", u, u % 977 + 1);
    for (int b = 0; b < BLOCKS; b++)
        CT_ASSERT_EQ(fwrite(block, 1, len, f), len);
    CT_ASSERT_EQ(fclose(f), 0);
    char msg[CT_ERRBUF_SIZE];
    double s;
    long grown = load_in_child(path, msg, sizeof msg, &s);
    printf("  bad line 3 of a %d MiB file: %.3f s, peak memory +%ld KiB: %s\n", BLOCKS, s, grown,
           msg);
    char want[400];
    snprintf(want, sizeof want, "%s:3: item id \"x\" is not an integer", path);
    CT_ASSERT_STR_CONTAINS(msg, want);
    CT_ASSERT_LT(grown, 16 * 1024);
    CT_ASSERT(s < 10.0); /* generous: it reads one 1 MiB chunk */

    /* No line break at all: an error at the line limit, not the whole file in one line. */
    f = fopen(path, "wb");
    CT_ASSERT(f != NULL);
    memset(block, '7', BLOCK);
    for (int b = 0; b < 32; b++)
        CT_ASSERT_EQ(fwrite(block, 1, BLOCK, f), (size_t)BLOCK);
    CT_ASSERT_EQ(fclose(f), 0);
    grown = load_in_child(path, msg, sizeof msg, &s);
    printf("  a 32 MiB line: %.3f s, peak memory +%ld KiB: %s\n", s, grown, msg);
    snprintf(want, sizeof want, "%s:1: line longer than 65536 bytes", path);
    CT_ASSERT_STR_CONTAINS(msg, want);
    CT_ASSERT_LT(grown, 16 * 1024);
    free(block);
    unlink(path);
}

/* The real datasets, found through CT_DATA_DIR only (docs/CONTRIBUTING.md, "Datasets"). Expected
 * values computed independently (Python) from the files of the documented hashes. */
static char real_path[512]; /* the file of --real NAME under $CT_DATA_DIR */

static void test_real_ml1m_r(void)
{
    ctrain_dataset_t ds;
    ct_errbuf_t eb;
    CT_ASSERT_MSG(ctrain_data_load(&ds, real_path, CTRAIN_DATA_AUTO, NULL, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_EQ(ds.num_users, 6040);
    CT_ASSERT_EQ(ds.num_items, 3416);
    CT_ASSERT_EQ(ds.num_interactions, 994083);
    CT_ASSERT_EQ(ds.num_eval_users, 6040);
    CT_ASSERT_CLOSE(ctrain_data_mean_train_len(&ds), 162.58327814569537, 1e-9, 0);
    CT_ASSERT_EQ(ds.valid_item[1], 77);
    CT_ASSERT_EQ(ds.test_item[1], 79);
    ctrain_data_free(&ds);
}

static void test_real_ml100k(void)
{
    ctrain_dataset_t ds;
    ct_errbuf_t eb;
    CT_ASSERT_MSG(ctrain_data_load(&ds, real_path, CTRAIN_DATA_AUTO, NULL, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_EQ(ds.num_users, 943);
    CT_ASSERT_EQ(ds.num_items, 1349);
    CT_ASSERT_EQ(ds.num_interactions, 99287);
    expect_prefix(&ds, 1, (int32_t[]){167, 171, 164, 155, 195}, 5);
    CT_ASSERT_EQ(ds.user_start[2] - ds.user_start[1], 271);
    CT_ASSERT_EQ(ds.valid_item[1], 74);
    CT_ASSERT_EQ(ds.test_item[1], 102);
    int64_t want[] = {1, 1, 41, 79, 200};
    for (int k = 0; k < 5; k++)
        CT_ASSERT_EQ(ds.time_scaled[k], want[k]);
    CT_ASSERT_EQ(ds.time_scaled[270], 14786259);
    ctrain_data_free(&ds);
}

/* `--real NAME`: that real dataset's check, or a skip (77) saying what is missing. */
static int run_real(const char *name)
{
    bool is_ml1m = strcmp(name, "ml-1m-r") == 0;
    if (!is_ml1m && strcmp(name, "ml-100k") != 0) {
        fprintf(stderr, "test_ct_data: --real %s: unknown dataset (expected ml-1m-r or ml-100k)\n",
                name);
        return 2;
    }
    const char *dir = getenv("CT_DATA_DIR");
    if (dir == NULL || dir[0] == '\0')
        CT_SKIP("CT_DATA_DIR is not set: the %s check needs the real dataset (see "
                "docs/CONTRIBUTING.md, \"Datasets\")",
                name);
    snprintf(real_path, sizeof real_path, "%s/%s", dir,
             is_ml1m ? "ml-1m-r/ml-1m-r.txt" : "ml-100k/u.data");
    if (access(real_path, R_OK) != 0)
        CT_SKIP("%s absent (CT_DATA_DIR=%s): skipping the %s check", real_path, dir, name);
    if (is_ml1m)
        CT_RUN(test_real_ml1m_r);
    else
        CT_RUN(test_real_ml100k);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--real") == 0)
        return run_real(argv[2]);
    CT_ASSERT(mkdtemp(tmpdir) != NULL);
    CT_RUN(test_sasrec_format);
    CT_RUN(test_tsv_filter_reindex_sort);
    CT_RUN(test_ml1m_format);
    CT_RUN(test_malformed_lines);
    CT_RUN(test_large_file_bad_early);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    CT_ASSERT_EQ(system(cmd), 0);
    return 0;
}
