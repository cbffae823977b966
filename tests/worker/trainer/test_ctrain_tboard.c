/*
 * test_ctrain_tboard.c - the TensorBoard event writer: CRC32C known answers, the record framing
 * checked byte by byte, and (when Python's tensorboard package is importable) the file read
 * back by TensorBoard's own event reader with the same tags, steps and values.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ct_child.h"
#include "ctrain_tboard.h"
#include "ct_test.h"

static void test_crc32c(void)
{
    /* The standard check value of CRC-32C, and RFC 3720's 32 zero bytes. */
    CT_ASSERT_EQ_U64(ctrain_tboard_crc32c("123456789", 9), 0xE3069283u);
    unsigned char zeros[32] = {0};
    CT_ASSERT_EQ_U64(ctrain_tboard_crc32c(zeros, 32), 0x8A9136AAu);
    CT_ASSERT_EQ_U64(ctrain_tboard_crc32c("", 0), 0);
}

static char dir[] = "/tmp/ct_tboard_testXXXXXX";

static void test_framing(void)
{
    ctrain_tboard_t tb;
    ct_errbuf_t eb;
    CT_ASSERT_OK(ctrain_tboard_open(&tb, dir, &eb));
    CT_ASSERT_OK(ctrain_tboard_scalar(&tb, "train/loss", 7, 0.5, &eb));
    CT_ASSERT_OK(ctrain_tboard_scalar(&tb, "valid/ndcg@10", 100, 0.25, &eb));
    char path[1024];
    snprintf(path, sizeof path, "%s", tb.path);
    ctrain_tboard_close(&tb);
    ctrain_tboard_close(&tb);
    CT_ASSERT_ERR(ctrain_tboard_scalar(&tb, "x", 0, 0, &eb), CT_ESTATE);
    CT_ASSERT_STR_CONTAINS(path, "/events.out.tfevents.");

    FILE *f = fopen(path, "rb");
    CT_ASSERT(f != NULL);
    unsigned char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    size_t off = 0;
    int records = 0;
    while (off < n) {
        uint64_t len;
        uint32_t hc, dc;
        CT_ASSERT_LE(off + 12, n);
        memcpy(&len, buf + off, 8);
        memcpy(&hc, buf + off + 8, 4);
        uint32_t c = ctrain_tboard_crc32c(buf + off, 8);
        CT_ASSERT_EQ_U64(hc, ((c >> 15) | (c << 17)) + 0xa282ead8u);
        CT_ASSERT_LE(off + 12 + len + 4, n);
        memcpy(&dc, buf + off + 12 + len, 4);
        c = ctrain_tboard_crc32c(buf + off + 12, len);
        CT_ASSERT_EQ_U64(dc, ((c >> 15) | (c << 17)) + 0xa282ead8u);
        off += 12 + len + 4;
        records++;
    }
    CT_ASSERT_EQ(off, n);
    CT_ASSERT_EQ(records, 3);
    CT_ASSERT(memmem(buf, n, "brain.Event:2", 13) != NULL);
    CT_ASSERT(memmem(buf, n, "valid/ndcg@10", 13) != NULL);

    /* TensorBoard's reader, when available. */
    const char *py = ct_test_torch2_python();
    char script[2048];
    snprintf(
        script, sizeof script,
        "import sys\n"
        "try:\n"
        "    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader\n"
        "except Exception as e:\n"
        "    print('no tensorboard:', e); sys.exit(77)\n"
        "got = []\n"
        "for ev in EventFileLoader(sys.argv[1]).Load():\n"
        "    for v in ev.summary.value:\n"
        "        x = v.simple_value if v.HasField('simple_value') else v.tensor.float_val[0]\n"
        "        got.append((v.tag, ev.step, round(x, 6)))\n"
        "print(got)\n"
        "sys.exit(0 if got == [('train/loss', 7, 0.5), ('valid/ndcg@10', 100, 0.25)] else 1)\n");
    if (access(py, X_OK) != 0) {
        printf("# %s not found: TensorBoard reader check skipped\n", py);
        return;
    }
    ct_child_t c;
    char *argv[] = {(char *)py, "-c", script, path, NULL};
    CT_ASSERT_OK(ct_child_run(&c, argv, NULL, 120000));
    if (c.exit_code == 77)
        printf("# %s", c.out);
    else
        CT_ASSERT_MSG(c.exit_code == 0, "tensorboard reader: %s%s", c.out, c.err);
    ct_child_close(&c);
}

int main(void)
{
    CT_ASSERT(mkdtemp(dir) != NULL);
    CT_RUN(test_crc32c);
    CT_RUN(test_framing);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CT_ASSERT_EQ(system(cmd), 0);
    return 0;
}
