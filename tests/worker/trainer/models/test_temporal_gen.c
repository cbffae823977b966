/*
 * test_temporal_gen.c - the temporal encoder's curve generator (models/temporal/
 * ctrain_temporal_gen.c) against examples/pytorch/temporal_curves.py:
 *   - without arguments: known answers computed with numpy 2.4 (the FNV-1a hash of each curve's
 *     float32 bytes and its description, for seeds and indices of one, two and three 32-bit
 *     words of entropy and lengths 8 to 1000), and the refusal of more spikes than points;
 *   - with temporal_gen.py as argument (the PyTorch 2.x venv's interpreter, which has numpy;
 *     skipped without it): that script compares, bit for bit, every curve and description this
 *     executable writes in its `dump` mode with temporal_curves.make's, and the float64 normal
 *     draws (ziggurat and tail, which the float32 curves can hide) with numpy's.
 *
 * Usage: test_temporal_gen [TEMPORAL_GEN_PY]
 *        test_temporal_gen dump SEED FIRST COUNT LENGTH OUT
 *        test_temporal_gen normal SEED COUNT OUT
 *   dump writes, per sample, one status byte (0: made, 1: refused), then when made the LENGTH
 *   float32 values and the description as a 16-bit little-endian length and its bytes;
 *   normal writes COUNT float64 draws of np.random.default_rng(SEED).standard_normal.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_child.h"
#include "ct_test.h"
#include "ctrain_temporal_gen.h"

static uint64_t temporal_gen_fnv(const float *x, int n)
{
    const unsigned char *b = (const unsigned char *)x;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t k = 0; k < (size_t)n * sizeof(float); k++)
        h = (h ^ b[k]) * 0x100000001b3ull;
    return h;
}

/* np.random.default_rng([seed, i]) for entropy of 2, 3 and 4 words; the curve hashes pin the
 * ziggurat's tables, the Floyd draw and the shuffle (three spikes), the shifts and the sine. */
static void test_known_answers(void)
{
    static const struct {
        uint64_t seed, i;
        int length;
        uint64_t fnv;
        const char *text;
    } cases[] = {
        {0ull, 0ull, 256, 0xb3f25144f07bc4c7ull,
         "A gentle downward trend with a seasonal cycle of period 8, one downward level shift, "
         "three spikes and low noise."},
        {0ull, 1ull, 256, 0xe41c4812375244a5ull,
         "A flat curve with a seasonal cycle of period 12, two spikes and high noise."},
        {1ull, 12345ull, 64, 0xcb8146558a87a2feull,
         "A steep downward trend with no seasonality, one downward level shift, no spikes and "
         "high noise."},
        {42ull, 1099511627779ull, 17, 0xc543b3c42cb75b12ull,
         "A steep upward trend with a seasonal cycle of period 16, one upward level shift, three "
         "spikes and low noise."},
        {7ull, 5ull, 1000, 0x3016c45fc4bf0e67ull,
         "A steep upward trend with a seasonal cycle of period 32, one downward level shift, no "
         "spikes and high noise."},
        {8589934593ull, 18446744073709551615ull, 8, 0xc2574d91b32af487ull,
         "A flat curve with no seasonality, two spikes and high noise."},
    };
    float *c = malloc(1000 * sizeof *c);
    CT_ASSERT(c != NULL);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char text[CTRAIN_TEMPORAL_TEXT_MAX];
        CT_ASSERT_OK(ctrain_temporal_gen_make(cases[k].seed, cases[k].i, cases[k].length, c, text));
        CT_ASSERT_STR_EQ(text, cases[k].text);
        CT_ASSERT_EQ_U64(temporal_gen_fnv(c, cases[k].length), cases[k].fnv);
    }
    /* Sample 0 of seed 0 has three spikes: numpy refuses two or one point, so does this. */
    CT_ASSERT_ERR(ctrain_temporal_gen_make(0, 0, 2, c, NULL), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ctrain_temporal_gen_make(0, 0, 0, c, NULL), CT_ERANGE_VALUE);
    CT_ASSERT_OK(ctrain_temporal_gen_make(0, 0, 3, c, NULL));
    free(c);
}

static int temporal_gen_dump(char **argv)
{
    uint64_t seed = strtoull(argv[2], NULL, 10), first = strtoull(argv[3], NULL, 10);
    long count = atol(argv[4]);
    int length = atoi(argv[5]);
    FILE *f = fopen(argv[6], "wb");
    float *c = malloc((size_t)(length > 0 ? length : 1) * sizeof *c);
    if (!f || !c) {
        fprintf(stderr, "dump: cannot open %s\n", argv[6]);
        return 1;
    }
    for (long k = 0; k < count; k++) {
        char text[CTRAIN_TEMPORAL_TEXT_MAX];
        int rc = ctrain_temporal_gen_make(seed, first + (uint64_t)k, length, c, text);
        unsigned char status = rc != 0;
        fwrite(&status, 1, 1, f);
        if (rc == 0) {
            uint16_t n = (uint16_t)strlen(text);
            fwrite(c, sizeof *c, (size_t)length, f);
            fwrite(&n, sizeof n, 1, f);
            fwrite(text, 1, n, f);
        }
    }
    free(c);
    return fclose(f) == 0 ? 0 : 1;
}

static int temporal_gen_normals(char **argv)
{
    uint64_t seed = strtoull(argv[2], NULL, 10);
    long count = atol(argv[3]);
    double *x = malloc((size_t)count * sizeof *x);
    FILE *f = fopen(argv[4], "wb");
    if (!f || !x) {
        fprintf(stderr, "normal: cannot open %s\n", argv[4]);
        return 1;
    }
    ctrain_temporal_gen_normals(seed, count, x);
    fwrite(x, sizeof *x, (size_t)count, f);
    free(x);
    return fclose(f) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 7 && strcmp(argv[1], "dump") == 0)
        return temporal_gen_dump(argv);
    if (argc == 5 && strcmp(argv[1], "normal") == 0)
        return temporal_gen_normals(argv);
    if (argc == 1) {
        test_known_answers();
        printf("ok\n");
        return 0;
    }
    CT_ASSERT_EQ(argc, 2);
    const char *py = ct_test_torch2_python();
    if (access(py, X_OK) != 0)
        CT_SKIP("no PyTorch 2.x interpreter (numpy) at %s (set CTRUN_TORCH2_PYTHON)", py);
    const char *dir = ct_test_tmpdir("ct_temporal_gen_");
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    CT_ASSERT(n > 0);
    self[n] = '\0';
    char *args[] = {(char *)py, argv[1], self, (char *)dir, NULL};
    ct_child_t c;
    CT_ASSERT_OK(ct_child_start(&c, args, NULL));
    CT_ASSERT_OK(ct_child_wait(&c, 600000));
    printf("%s", c.out);
    fprintf(stderr, "%s", c.err);
    int code = c.exit_code;
    ct_child_close(&c);
    if (code == 77)
        CT_SKIP("%s has no numpy", py);
    CT_ASSERT_EQ(code, 0);
    return 0;
}
