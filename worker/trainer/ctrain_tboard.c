/*
 * ctrain_tboard.c - TFRecord framing with masked CRC32C and a minimal protobuf encoder for the
 * Event/Summary messages of scalar summaries.
 */
#include "ctrain_tboard.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "ct_time.h"

/* CRC32C with the reflected polynomial 0x82F63B78, one table computed on first use. */
static uint32_t ctrain_tboard__crc_table[256];
static int ctrain_tboard__crc_ready;

uint32_t ctrain_tboard_crc32c(const void *data, size_t n)
{
    if (!ctrain_tboard__crc_ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            ctrain_tboard__crc_table[i] = c;
        }
        ctrain_tboard__crc_ready = 1;
    }
    const unsigned char *p = data;
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        crc = ctrain_tboard__crc_table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}

/* TensorFlow's masking: rotate right by 15 and add a constant. */
static uint32_t ctrain_tboard__masked_crc(const void *data, size_t n)
{
    uint32_t crc = ctrain_tboard_crc32c(data, n);
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* ---- protobuf encoding ------------------------------------------------------------------ */

typedef struct ctrain_tboard__pb {
    unsigned char buf[1200];
    size_t n;
} ctrain_tboard__pb_t;

static void ctrain_tboard__pb_varint(ctrain_tboard__pb_t *pb, uint64_t v)
{
    do {
        unsigned char b = v & 0x7F;
        v >>= 7;
        pb->buf[pb->n++] = b | (v ? 0x80 : 0);
    } while (v);
}

static void ctrain_tboard__pb_key(ctrain_tboard__pb_t *pb, unsigned field, unsigned wire)
{
    ctrain_tboard__pb_varint(pb, (uint64_t)field << 3 | wire);
}

static void ctrain_tboard__pb_bytes(ctrain_tboard__pb_t *pb, unsigned field, const void *data,
                                    size_t n)
{
    ctrain_tboard__pb_key(pb, field, 2);
    ctrain_tboard__pb_varint(pb, n);
    memcpy(pb->buf + pb->n, data, n);
    pb->n += n;
}

static void ctrain_tboard__pb_double(ctrain_tboard__pb_t *pb, unsigned field, double v)
{
    ctrain_tboard__pb_key(pb, field, 1);
    memcpy(pb->buf + pb->n, &v, 8); /* little-endian host, as the wire format */
    pb->n += 8;
}

static void ctrain_tboard__pb_float(ctrain_tboard__pb_t *pb, unsigned field, float v)
{
    ctrain_tboard__pb_key(pb, field, 5);
    memcpy(pb->buf + pb->n, &v, 4);
    pb->n += 4;
}

static int ctrain_tboard__write_record(ctrain_tboard_t *tb, const void *data, size_t n,
                                       ct_errbuf_t *eb)
{
    unsigned char head[12];
    uint64_t len = n;
    memcpy(head, &len, 8);
    uint32_t hc = ctrain_tboard__masked_crc(head, 8), dc = ctrain_tboard__masked_crc(data, n);
    memcpy(head + 8, &hc, 4);
    if (fwrite(head, 1, 12, tb->f) != 12 || fwrite(data, 1, n, tb->f) != n ||
        fwrite(&dc, 1, 4, tb->f) != 4 || fflush(tb->f) != 0)
        return ct_errbuf_set(eb, -EIO, "%s: write failed: %s", tb->path, strerror(errno));
    return 0;
}

int ctrain_tboard_open(ctrain_tboard_t *tb, const char *dir, ct_errbuf_t *eb)
{
    memset(tb, 0, sizeof *tb);
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    double now = ct_time_unix_s();
    /* The same process may open several files within one second (a trainer run twice in a
     * test, a restart that reuses the pid): a counter after the pid keeps the names apart. */
    for (int k = 0; k < 1000; k++) {
        if (k == 0)
            snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%lld.%s.%d.ctrain", dir,
                     (long long)now, host, (int)getpid());
        else
            snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%lld.%s.%d.%d.ctrain",
                     dir, (long long)now, host, (int)getpid(), k);
        tb->f = fopen(tb->path, "wbx");
        if (tb->f != NULL || errno != EEXIST)
            break;
    }
    if (tb->f == NULL)
        return ct_errbuf_set(eb, -errno, "%s: %s", tb->path, strerror(errno));
    ctrain_tboard__pb_t pb = {.n = 0};
    ctrain_tboard__pb_double(&pb, 1, now);
    ctrain_tboard__pb_bytes(&pb, 3, "brain.Event:2", 13);
    int rc = ctrain_tboard__write_record(tb, pb.buf, pb.n, eb);
    if (rc != 0)
        ctrain_tboard_close(tb);
    return rc;
}

int ctrain_tboard_scalar(ctrain_tboard_t *tb, const char *tag, int64_t step, double value,
                     ct_errbuf_t *eb)
{
    if (tb->f == NULL)
        return ct_errbuf_set(eb, CT_ESTATE, "event file is not open");
    size_t tag_len = strlen(tag);
    if (tag_len > 512)
        return ct_errbuf_set(eb, CT_ELIMIT, "summary tag longer than 512 bytes");
    /* Summary.Value{tag = 1, simple_value = 2} inside Summary{value = 1} inside
     * Event{wall_time = 1, step = 2, summary = 5}. */
    ctrain_tboard__pb_t val = {.n = 0}, summary = {.n = 0}, event = {.n = 0};
    ctrain_tboard__pb_bytes(&val, 1, tag, tag_len);
    ctrain_tboard__pb_float(&val, 2, (float)value);
    ctrain_tboard__pb_bytes(&summary, 1, val.buf, val.n);
    ctrain_tboard__pb_double(&event, 1, ct_time_unix_s());
    ctrain_tboard__pb_key(&event, 2, 0);
    ctrain_tboard__pb_varint(&event, (uint64_t)step);
    ctrain_tboard__pb_bytes(&event, 5, summary.buf, summary.n);
    return ctrain_tboard__write_record(tb, event.buf, event.n, eb);
}

void ctrain_tboard_close(ctrain_tboard_t *tb)
{
    if (tb->f != NULL)
        fclose(tb->f);
    tb->f = NULL;
}
