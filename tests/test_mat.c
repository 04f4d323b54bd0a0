/*
 * test_mat.c -- weights in their stored dtype (engine/compute/mat.c, and model.c binding them).
 *
 * References, each independent of the code under test:
 * - the conversions against the IEEE half and bfloat16 formats worked out
 *   here in double, for every one of the 65536 bit patterns of each;
 * - products with 16-bit weights against hp_gemm on the whole matrix
 *   converted up front, over the panel widths and the strides the engine uses;
 * - whole models streamed (the default) against the same checkpoint opened
 *   with HP_MODEL_CONVERT (converted to f32 at load, the path before 16-bit
 *   weights were streamed): eval metrics on both evaluation paths, outputs,
 *   and the gradients at the gates with their attribution estimates, within
 *   1e-6 relative. On the bf16 and f16 fixtures (llama-tied-bf16,
 *   qwen2-bias) and on 16-bit copies of f32 fixtures written here: GPT-2's
 *   Conv1D layout and position table, BERT's MLM head, classifier and token
 *   types, a Llama with GQA; one copy with every tensor at an odd byte
 *   address, one with f32, f16 and bf16 tensors mixed;
 * - memory: a bf16 model's anonymous memory grows by a small part of its
 *   stored size when it is opened and run (streamed), by twice its stored
 *   size when converted at load.
 */
#define _DEFAULT_SOURCE /* mkdtemp, in testutil.h */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "blas.h"
#include "forward.h"
#include "gguf.h"
#include "headprune.h"
#include "model.h"
#include "safetensors.h"
#include "testutil.h"

#define REL_TOL 1e-6

static char tmp[64];

static void setup(void) { tu_mkdtemp(tmp, sizeof tmp, "mat"); }
static void teardown(void) { tu_rmrf(tmp); }

TestSuite(mat, .init = setup, .fini = teardown);

// --- conversions ------------------------------------------------------------------

/* The value of half-precision bits h by the format's definition (sign, 5-bit exponent biased 15, 10-bit fraction). */
static double half_value(uint16_t h)
{
    const int s = h >> 15, e = (h >> 10) & 31, f = h & 1023;
    const double v = e == 0 ? ldexp(f, -24) : e == 31 ? (f ? NAN : INFINITY) : ldexp(1024 + f, e - 25);
    return s ? -v : v;
}

/* The value of bfloat16 bits b (sign, 8-bit exponent biased 127, 7-bit fraction). */
static double bf16_value(uint16_t b)
{
    const int s = b >> 15, e = (b >> 7) & 255, f = b & 127;
    const double v = e == 0 ? ldexp(f, -133) : e == 255 ? (f ? NAN : INFINITY) : ldexp(128 + f, e - 134);
    return s ? -v : v;
}

static void check_all_patterns(enum hp_dtype dt, double (*value)(uint16_t), const char *name)
{
    /* every pattern once, from an odd byte address and with a tail shorter than a vector */
    const size_t n = 65536;
    unsigned char *raw = malloc(2 * n + 1);
    float *got = malloc(n * sizeof *got);
    for (size_t i = 0; i < n; i++) {
        raw[1 + 2 * i] = (unsigned char)(i & 0xff);
        raw[2 + 2 * i] = (unsigned char)(i >> 8);
    }
    hp_mat_cvt(got, raw + 1, dt, n - 3);
    hp_mat_cvt(got + n - 3, raw + 1 + 2 * (n - 3), dt, 3);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        const double want = value((uint16_t)i);
        const bool same_sign = !signbit(got[i]) == !signbit(want);
        const bool ok = same_sign && (isnan(want) ? isnan(got[i]) : (double)got[i] == want);
        if (!ok && bad++ < 5)
            cr_log_error("%s 0x%04zx: got %.9g, the format says %.9g", name, i, got[i], want);
    }
    cr_assert_eq(bad, 0, "%s: %d of 65536 patterns converted wrongly", name, bad);
    free(raw);
    free(got);
}

Test(mat, bf16_every_pattern) { check_all_patterns(HP_DT_BF16, bf16_value, "bf16"); }
Test(mat, f16_every_pattern) { check_all_patterns(HP_DT_F16, half_value, "f16"); }

// --- products -----------------------------------------------------------------------

static uint64_t rng = 12345;

static double uniform(void)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* x rounded to the nearest bf16 (ties to even) or f16, as their bits. */
static uint16_t to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static uint16_t to_f16(float x)
{
    _Float16 h = (_Float16)x;
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

static uint16_t to_16(enum hp_dtype dt, float x) { return dt == HP_DT_BF16 ? to_bf16(x) : to_f16(x); }

/*
 * A fake one-layer model whose only matrix is wq (k, n) stored as dt, Linear
 * (rs 1, cs k) or Conv1D (rs n, cs 1); the scratch it makes is sized by these
 * dims as a real model's. Compares hp_mat_gemm on W and on W^T against hp_gemm
 * on the f32 values, bit for bit.
 */
static void check_product(enum hp_dtype dt, bool linear, int m, int k, int n)
{
    uint16_t *w16 = malloc((size_t)k * n * sizeof *w16);
    float *w32 = malloc((size_t)k * n * sizeof *w32);
    for (size_t i = 0; i < (size_t)k * n; i++) {
        w16[i] = to_16(dt, (float)(uniform() - 0.5));
        hp_mat_cvt(&w32[i], &w16[i], dt, 1);
    }
    struct hp_layer L = {0};
    L.wq = (struct hp_mat){w16, linear ? 1 : n, linear ? k : 1, dt, NULL, 0};
    struct hp_model mdl = {0};
    mdl.info.n_layers = 1;
    mdl.info.d_model = k;
    mdl.info.n_heads = 1;
    mdl.info.d_head = n;
    mdl.info.d_ff = 1;
    mdl.layers = &L;
    struct hp_mat_buf *mb = hp_mat_buf_new(&mdl);
    cr_assert_not_null(mb);
    const int mm = m > 0 ? m : 1, big = k > n ? k : n;
    float *a = malloc((size_t)mm * big * sizeof *a), *c1 = malloc((size_t)mm * big * sizeof *c1),
          *c2 = malloc((size_t)mm * big * sizeof *c2);
    for (size_t i = 0; i < (size_t)mm * big; i++)
        a[i] = (float)(uniform() - 0.5);
    for (int t = 0; t < 2; t++) { /* W (k, n), then W^T (n, k) as a data gradient reads it */
        const struct hp_mat w = t ? hp_mat_t(L.wq) : L.wq;
        const int kk = t ? n : k, nn = t ? k : n;
        for (size_t i = 0; i < (size_t)mm * nn; i++)
            c1[i] = c2[i] = (float)i; /* beta = 0.5 reads them */
        hp_mat_gemm(mb, m, nn, kk, 0.75f, a, kk, 1, w, 0.5f, c1, nn, 1);
        hp_gemm(m, nn, kk, 0.75f, a, kk, 1, w32, w.rs, w.cs, 0.5f, c2, nn, 1);
        cr_assert(memcmp(c1, c2, (size_t)mm * nn * sizeof *c1) == 0,
                  "%s %s %s (%d x %d x %d): the streamed product differs from the converted one",
                  dt == HP_DT_BF16 ? "bf16" : "f16", linear ? "Linear" : "Conv1D", t ? "transposed" : "", m, nn, kk);
    }
    hp_mat_buf_free(mb);
    free(a), free(c1), free(c2), free(w16), free(w32);
}

/* Small products fit one panel; 4096 x 1024 (4M floats) takes several of HP_MAT_PANEL. */
Test(mat, products_equal_the_converted_matrix)
{
    hp_runtime_init(2);
    for (int lin = 0; lin <= 1; lin++) {
        check_product(HP_DT_BF16, lin, 5, 32, 48);
        check_product(HP_DT_F16, lin, 3, 17, 9);
        check_product(HP_DT_BF16, lin, 7, 4096, 1024);
        check_product(HP_DT_F16, lin, 2, 4096, 1000);
    }
    check_product(HP_DT_BF16, true, 0, 64, 64); /* no rows: nothing to do */
}

// --- quantized matrices -------------------------------------------------------------

/* An f16's bits at p, a scale of either sign between 1/64 and 1/16: finite products, no NaN. */
static void put_scale(uint8_t *p)
{
    const double mag = (1.0 + 3.0 * uniform()) / 64.0;
    const uint16_t h = to_f16((float)(uniform() < 0.5 ? -mag : mag));
    memcpy(p, &h, 2);
}

/*
 * rows x cols of type at random, as a GGUF file stores them (rows of blocks): the quantized types' bytes at
 * random with their f16 scales set (every other bit pattern is a valid block), F32, F16 and BF16 values
 * uniform in [-0.5, 0.5).
 */
static void random_rows(enum hp_gguf_type type, uint8_t *p, size_t n_blocks)
{
    const struct hp_gguf_type_info *ti = hp_gguf_type_info(type);
    for (size_t b = 0; b < n_blocks; b++) {
        uint8_t *blk = p + b * (size_t)ti->block_bytes;
        const float x = (float)(uniform() - 0.5);
        if (type == HP_GGUF_F32) {
            memcpy(blk, &x, 4);
            continue;
        }
        if (type == HP_GGUF_F16 || type == HP_GGUF_BF16) {
            const uint16_t h = to_16(type == HP_GGUF_F16 ? HP_DT_F16 : HP_DT_BF16, x);
            memcpy(blk, &h, 2);
            continue;
        }
        for (int i = 0; i < ti->block_bytes; i++)
            blk[i] = (uint8_t)(uniform() * 256);
        if (type == HP_GGUF_Q6_K) { /* d last */
            put_scale(blk + 208);
        } else { /* d first; Q4_1's m, the K-quants' dmin after it */
            put_scale(blk);
            if (type != HP_GGUF_Q8_0 && type != HP_GGUF_Q4_0)
                put_scale(blk + 2);
        }
    }
}

/* C = A W through a quantized view and through the same view of the f32 matrix: the same bits. */
static int same_product(struct hp_mat_buf *mb, struct hp_mat wq, struct hp_mat wf, int m, int k, int n,
                        const char *what, const char *type)
{
    float *a = malloc((size_t)m * k * sizeof *a), *c1 = malloc((size_t)m * n * sizeof *c1),
          *c2 = malloc((size_t)m * n * sizeof *c2);
    for (size_t i = 0; i < (size_t)m * k; i++)
        a[i] = (float)(uniform() - 0.5);
    for (size_t i = 0; i < (size_t)m * n; i++)
        c1[i] = c2[i] = (float)i; /* beta = 0.5 reads them */
    hp_mat_gemm(mb, m, n, k, 0.75f, a, k, 1, wq, 0.5f, c1, n, 1);
    hp_mat_gemm(mb, m, n, k, 0.75f, a, k, 1, wf, 0.5f, c2, n, 1);
    int bad = 0;
    for (size_t i = 0; i < (size_t)m * n; i++)
        if (memcmp(&c1[i], &c2[i], sizeof *c1) != 0 && bad++ < 3)
            cr_log_error("%s %s (%d x %d x %d): C[%zu] streamed %.9g, on the dequantized matrix %.9g", type, what, m,
                         n, k, i, c1[i], c2[i]);
    free(a), free(c1), free(c2);
    return bad != 0;
}

/*
 * A quantized matrix of type, rows x cols in Hugging Face's order, its rows permuted as llama.cpp stores q and k
 * when heads > 0, at an odd byte address; against the whole matrix dequantized row by row with hp_gguf_dequant
 * (gguf-py's bits: test_gguf.c) and put back in Hugging Face's order here, by the definition of
 * reverse_permute_weights (the file's row h per + 2 i + j is row h per + j half + i), bit for bit: every view the
 * passes take (the Linear, a head's columns, a slice of its depth starting inside a block, each transposed as the
 * backward pass reads it, a strided view), through panels of whole blocks, of parts of blocks and one wide panel;
 * rows, parts of rows, row sums, elements, and the whole tensor.
 */
static int check_quant(enum hp_gguf_type type, int64_t rows, int64_t cols, int64_t heads)
{
    const struct hp_gguf_type_info *ti = hp_gguf_type_info(type);
    const size_t row_bytes = (size_t)(cols / ti->block_size) * (size_t)ti->block_bytes;
    uint8_t *raw = malloc((size_t)rows * row_bytes + 1), *data = raw + 1;
    random_rows(type, data, (size_t)rows * row_bytes / (size_t)ti->block_bytes);
    const struct hp_qrows q = {data, rows, cols, row_bytes, ti->block_size, ti->block_bytes, ti->to_f32, heads};
    float *w = malloc((size_t)(rows * cols) * sizeof *w);
    const int64_t per = heads ? rows / heads : rows, half = per / 2;
    for (int64_t h = 0; h < (heads ? heads : 1); h++)
        for (int64_t i = 0; i < (heads ? half : per); i++)
            for (int64_t j = 0; j < (heads ? 2 : 1); j++) {
                const int64_t file = heads ? h * per + 2 * i + j : i, hf = heads ? h * per + j * half + i : i;
                cr_assert_eq(hp_gguf_dequant(type, data + (size_t)file * row_bytes, w + hf * cols, cols), HP_OK);
            }
    const char *tn = ti->name;
    int bad = 0;
    /* a narrow scratch (panels of 32 columns, or 64: whole blocks of 32, parts of 256) and a wide one */
    const size_t kmax = (size_t)(rows > cols ? rows : cols);
    struct hp_mat_buf *bufs[3] = {hp_mat_buf_alloc(kmax, kmax * 40), hp_mat_buf_alloc(kmax, kmax * 72),
                                  hp_mat_buf_alloc(kmax, (size_t)1 << 30)};
    const struct hp_mat bq = hp_mat_t(hp_mat_of_q(&q)), bf = {w, 1, (ptrdiff_t)cols, HP_DT_F32, NULL, 0};
    /* views of B = W^T (cols, rows): (i0, j0) and the depth and width they keep */
    const int64_t i0s[] = {0, 0, 64, 64}, j0s[] = {0, rows / 4, 0, rows / 4};
    for (int b = 0; b < 3; b++)
        for (int v = 0; v < 4; v++) {
            const int k = (int)(i0s[v] ? 128 : cols), n = (int)(rows - 2 * j0s[v]);
            const struct hp_mat vq = hp_mat_at(bq, i0s[v], j0s[v]), vf = hp_mat_at(bf, i0s[v], j0s[v]);
            char what[96];
            snprintf(what, sizeof what, "view %d at (%lld, %lld), scratch %d", v, (long long)i0s[v],
                     (long long)j0s[v], b);
            bad += same_product(bufs[b], vq, vf, 5, k, n, what, tn);
            strcat(what, ", transposed");
            bad += same_product(bufs[b], hp_mat_t(vq), hp_mat_t(vf), 3, n, k, what, tn);
        }
    /* no unit stride: every other element of each row's first half */
    struct hp_mat sq = bq, sf = bf;
    sq.rs = sf.rs = 2;
    bad += same_product(bufs[0], sq, sf, 2, (int)(cols / 4), (int)rows, "strided", tn);
    /* rows (the embedding's reads), from their start and from inside a block, added, elements */
    const struct hp_mat tq = hp_mat_of_q(&q);
    float *row = malloc((size_t)cols * sizeof *row), *acc = malloc(2 * (size_t)cols * sizeof *acc);
    for (int64_t r = 0; r < rows; r++) {
        hp_mat_row(tq, r, (int)cols, row);
        bad += memcmp(row, w + r * cols, (size_t)cols * sizeof *row) != 0;
        hp_mat_row(hp_mat_at(tq, 0, 40), r, (int)(cols - 72), row);
        bad += memcmp(row, w + r * cols + 40, (size_t)(cols - 72) * sizeof *row) != 0;
        for (int64_t c = 0; c < cols; c++)
            acc[c] = acc[cols + c] = (float)c;
        hp_mat_row_add(tq, r, (int)cols, acc);
        for (int64_t c = 0; c < cols; c++)
            acc[cols + c] += w[r * cols + c];
        bad += memcmp(acc, acc + cols, (size_t)cols * sizeof *acc) != 0;
        const int64_t c = (int64_t)(uniform() * (double)cols);
        const float e = hp_mat_get(tq, r, c);
        bad += memcmp(&e, &w[r * cols + c], sizeof e) != 0;
    }
    /* the whole tensor, as HP_MODEL_CONVERT and an export read it */
    struct hp_st_tensor t = {.dtype = HP_DT_Q, .n_dims = 2, .shape = {rows, cols}, .data = data, .q = &q};
    float *all = malloc((size_t)(rows * cols) * sizeof *all);
    hp_mat_tensor_f32(&t, all);
    bad += memcmp(all, w, (size_t)(rows * cols) * sizeof *all) != 0;
    if (bad)
        cr_log_error("%s, %lld x %lld, %lld heads: %d comparisons differ", tn, (long long)rows, (long long)cols,
                     (long long)heads, bad);
    for (int b = 0; b < 3; b++)
        hp_mat_buf_free(bufs[b]);
    free(all), free(row), free(acc), free(w), free(raw);
    return bad;
}

Test(mat, quantized_products_equal_the_dequantized_matrix)
{
    hp_runtime_init(2);
    static const enum hp_gguf_type types[] = {HP_GGUF_Q8_0, HP_GGUF_Q4_0, HP_GGUF_Q4_1, HP_GGUF_Q4_K,
                                              HP_GGUF_Q5_K, HP_GGUF_Q6_K, HP_GGUF_F16, HP_GGUF_BF16, HP_GGUF_F32};
    int bad = 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        bad += check_quant(types[i], 96, 512, 0);  /* as stored */
        bad += check_quant(types[i], 96, 512, 4);  /* a q projection of 4 heads of 24 rows */
        bad += check_quant(types[i], 64, 768, 2);  /* 3 K-quant blocks a row */
    }
    cr_assert_eq(bad, 0, "%d comparisons differ between streamed and dequantized matrices", bad);
}

// --- 16-bit copies of fixtures ------------------------------------------------------

enum copy_mode { ALL_BF16, ALL_F16, MIXED };

static void fixture_dir(char *buf, size_t n, const char *name)
{
    const char *root = getenv("HP_FIXTURES");
    cr_assert(root, "HP_FIXTURES not set (run through meson test)");
    snprintf(buf, n, "%s/%s", root, name);
}

static void copy_file(const char *from, const char *to)
{
    size_t n;
    char *s = tu_slurp(from, &n);
    tu_spit(to, s, n);
    free(s);
}

/*
 * The f32 fixture `name` written to tmp/<out> with its tensors rounded to
 * bf16, f16, or (MIXED) tensor i kept f32, made bf16, made f16 by i mod 3;
 * with odd, a one-byte tensor first puts every other at an odd byte address.
 */
static void write_copy(const char *name, const char *out, enum copy_mode mode, bool odd, char *dir, size_t cap)
{
    char src[1024], path[1200];
    fixture_dir(src, sizeof src, name);
    snprintf(dir, cap, "%s/%s", tmp, out);
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/config.json", src);
    char to[1200];
    snprintf(to, sizeof to, "%s/config.json", dir);
    copy_file(path, to);
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    struct hp_st_set *set;
    struct hp_error err = {0};
    cr_assert_eq(hp_st_open(path, &set, &err), HP_OK, "%s", err.msg);
    const int n = hp_st_count(set);
    struct hp_st_out *o = calloc((size_t)n + 1, sizeof *o);
    enum hp_dtype *dts = calloc((size_t)n, sizeof *dts);
    int k = 0;
    /* the padding is named as a buffer transformers keeps beside the weights, which the loader accepts unread
     * (every other tensor it does not read is refused) */
    const char *pad = strncmp(name, "gpt2", 4) == 0 ? "transformer.h.0.attn.masked_bias" : "embeddings.position_ids";
    if (odd)
        o[k++] = (struct hp_st_out){pad, "U8", 1, {1}, 1};
    for (int i = 0; i < n; i++) {
        const struct hp_st_tensor *t = hp_st_at(set, i);
        cr_assert_eq(t->dtype, HP_DT_F32, "%s: %s is not f32", name, t->name);
        dts[i] = mode == ALL_BF16 ? HP_DT_BF16 : mode == ALL_F16 ? HP_DT_F16 : (enum hp_dtype)(i % 3);
        o[k] = (struct hp_st_out){t->name, dts[i] == HP_DT_F32 ? "F32" : dts[i] == HP_DT_F16 ? "F16" : "BF16",
                                  t->n_dims, {0}, t->nbytes / (dts[i] == HP_DT_F32 ? 1 : 2)};
        memcpy(o[k].shape, t->shape, sizeof o[k].shape);
        k++;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    cr_assert_eq(hp_st_write_header(f, path, o, k, &err), HP_OK, "%s", err.msg);
    if (odd)
        fputc(0x5a, f);
    for (int i = 0; i < n; i++) {
        const struct hp_st_tensor *t = hp_st_at(set, i);
        const size_t ne = t->nbytes / 4;
        for (size_t e = 0; e < ne; e++) {
            float x;
            memcpy(&x, (const char *)t->data + 4 * e, 4);
            if (dts[i] == HP_DT_F32) {
                fwrite(&x, 4, 1, f);
            } else {
                uint16_t h = to_16(dts[i], x);
                fwrite(&h, 2, 1, f);
            }
        }
    }
    cr_assert_eq(fclose(f), 0);
    hp_st_close(set);
    free(o);
    free(dts);
}

// --- the streamed model against the converted one ------------------------------------

/* The fixture's held-out data, named by its reference.json. */
static struct hp_data *fixture_data(const char *name)
{
    char dir[1024], path[1200];
    fixture_dir(dir, sizeof dir, name);
    snprintf(path, sizeof path, "%s/reference.json", dir);
    char *txt = tu_slurp(path, NULL);
    cJSON *ref = cJSON_Parse(txt);
    snprintf(path, sizeof path, "%s/%s", dir, cJSON_GetObjectItem(ref, "data")->valuestring);
    cJSON_Delete(ref);
    free(txt);
    struct hp_data *d;
    struct hp_error err = {0};
    cr_assert_eq(hp_data_load(path, 0, &d, &err), HP_OK, "%s", err.msg);
    return d;
}

/* The largest relative difference seen, for the log. */
static double worst;

static int close_rel(const char *what, double got, double want, double scale)
{
    const double tol = REL_TOL * fmax(1.0, scale);
    worst = fmax(worst, fabs(got - want) / fmax(1.0, scale));
    if (fabs(got - want) <= tol)
        return 0;
    cr_log_error("%s: streamed %.10g, converted at load %.10g (diff %.3g > %.3g)", what, got, want, fabs(got - want),
                 tol);
    return 1;
}

static int same_metrics(const char *what, const struct hp_metrics *a, const struct hp_metrics *b)
{
    int bad = 0;
    cr_assert_eq(a->n_tokens, b->n_tokens, "%s: tokens", what);
    if (b->has_loss) {
        bad += close_rel("loss", a->loss, b->loss, fabs(b->loss));
        bad += close_rel("kl", a->kl, b->kl, fabs(b->loss));
        bad += a->acc != b->acc;
        for (int s = 0; s < b->n_seqs; s++)
            bad += close_rel("per-sequence loss", a->seq_loss[s], b->seq_loss[s], fabs(b->seq_loss[s]));
    }
    if (b->has_cos)
        bad += close_rel("cos", a->cos, b->cos, 1.0);
    return bad;
}

/* How many of m's layer matrices and LM head are stored 16-bit (read through panels). */
static int count16(const struct hp_model *m)
{
    int n = m->lm_head.p && m->lm_head.dt != HP_DT_F32;
    for (int l = 0; l < m->info.n_layers; l++) {
        const struct hp_layer *L = &m->layers[l];
        const struct hp_mat *w[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_up, &L->w_gate, &L->w_down};
        for (int i = 0; i < 7; i++)
            n += w[i]->p && w[i]->dt != HP_DT_F32;
    }
    return n;
}

/*
 * dir opened both ways on the fixture's data: metrics (no mask, two heads
 * zeroed, the same under mean ablation; reuse and plain paths), outputs
 * under the mask, and gradients at the mask (loss, or 1 - cos) with atp.
 */
static void compare_paths(const char *dir, const char *fixture, const char *spec)
{
    struct hp_error err = {0};
    struct hp_model *ms, *mc;
    cr_assert_eq(hp_model_open(dir, &ms, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_model_open_ex(dir, HP_MODEL_CONVERT, &mc, &err), HP_OK, "%s", err.msg);
    const struct hp_model_info *in = hp_model_get_info(ms);
    cr_assert_eq(in->n_params, hp_model_get_info(mc)->n_params);
    cr_assert_gt(count16(ms), 0, "%s: no matrix is streamed", dir);
    cr_assert_eq(count16(mc), 0, "%s: HP_MODEL_CONVERT left a matrix 16-bit", dir);
    struct hp_data *d = fixture_data(fixture);
    struct hp_mask *mask;
    cr_assert_eq(hp_mask_parse(spec, false, in, &mask, &err), HP_OK, "%s", err.msg);
    worst = 0;
    int bad = 0;
    struct hp_evaluator *es, *ec;
    cr_assert_eq(hp_evaluator_new(ms, d, &es, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_new(mc, d, &ec, &err), HP_OK, "%s", err.msg);
    const enum hp_ablation abls[2] = {HP_ABLATE_ZERO, HP_ABLATE_MEAN};
    for (int plain = 0; plain <= 1; plain++)
        for (int ai = 0; ai < 2; ai++)
            for (int mi = 0; mi < 2; mi++) {
                hp_evaluator_set_plain(es, plain);
                hp_evaluator_set_plain(ec, plain);
                struct hp_metrics *a, *b;
                const struct hp_mask *mk = mi ? mask : NULL;
                cr_assert_eq(hp_evaluator_run(es, mk, abls[ai], &a, &err), HP_OK, "%s", err.msg);
                cr_assert_eq(hp_evaluator_run(ec, mk, abls[ai], &b, &err), HP_OK, "%s", err.msg);
                bad += same_metrics(dir, a, b);
                hp_metrics_free(a);
                hp_metrics_free(b);
            }

    /* outputs under the mask, every sequence */
    const int W = in->n_labels ? in->n_labels : in->has_lm_head ? in->n_vocab : in->d_model;
    float *x = malloc((size_t)d->seq_len * W * sizeof *x), *y = malloc((size_t)d->seq_len * W * sizeof *y);
    double maxref = 0, maxdiff = 0;
    for (int s = 0; s < d->n_seqs; s++) {
        const size_t off = (size_t)s * d->seq_len;
        const uint8_t *am = d->attn_mask ? d->attn_mask + off : NULL;
        const int32_t *tt = d->type_ids ? d->type_ids + off : NULL;
        cr_assert_eq(hp_model_forward(ms, d->ids + off, am, tt, d->seq_len, mask, x, &err), HP_OK, "%s", err.msg);
        cr_assert_eq(hp_model_forward(mc, d->ids + off, am, tt, d->seq_len, mask, y, &err), HP_OK, "%s", err.msg);
        const size_t n = (in->n_labels ? 1 : (size_t)d->seq_len) * W;
        for (size_t i = 0; i < n; i++) {
            maxref = fmax(maxref, fabs(y[i]));
            maxdiff = fmax(maxdiff, fabs(x[i] - y[i]));
        }
    }
    bad += close_rel("outputs' largest difference", maxdiff, 0, maxref);

    /* gradients at the mask, zero and mean ablation */
    const int HH = in->n_layers * in->n_heads;
    const enum hp_metric metric = in->causal || in->n_labels || in->has_lm_head ? HP_METRIC_LOSS : HP_METRIC_COS;
    double *ga = malloc(4 * (size_t)HH * sizeof *ga), *gb = ga + HH, *ta = gb + HH, *tb = ta + HH;
    for (int ai = 0; ai < 2; ai++) {
        double va, vb;
        cr_assert_eq(hp_evaluator_grad(es, metric, mask, abls[ai], ga, ta, &va, &err), HP_OK, "%s", err.msg);
        cr_assert_eq(hp_evaluator_grad(ec, metric, mask, abls[ai], gb, tb, &vb, &err), HP_OK, "%s", err.msg);
        bad += close_rel("the gradient's value", va, vb, fabs(vb));
        double big = 0;
        for (int i = 0; i < HH; i++)
            big = fmax(big, fmax(fabs(gb[i]), fabs(tb[i])));
        cr_assert_gt(big, 0, "%s: the gradients are all 0", dir);
        for (int i = 0; i < HH; i++) {
            bad += close_rel("grad", ga[i], gb[i], big);
            bad += close_rel("atp", ta[i], tb[i], big);
        }
    }
    cr_log_info("%s (%s): streamed against converted at load, largest relative difference %.3g", fixture, in->dtype,
                worst);
    cr_assert_eq(bad, 0, "%s: %d values differ between the streamed and the converted-at-load model", dir, bad);
    free(ga), free(x), free(y);
    hp_evaluator_free(es);
    hp_evaluator_free(ec);
    hp_mask_free(mask);
    hp_data_free(d);
    hp_model_close(ms);
    hp_model_close(mc);
}

static void compare_fixture(const char *name, const char *spec, const char *dtype)
{
    char dir[1024];
    fixture_dir(dir, sizeof dir, name);
    struct hp_model *m;
    struct hp_error err = {0};
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_str_eq(hp_model_get_info(m)->dtype, dtype);
    cr_assert_neq(m->layers[0].wq.dt, HP_DT_F32, "%s: the matrices stay 16-bit", name);
    hp_model_close(m);
    compare_paths(dir, name, spec);
}

static void compare_copy(const char *name, const char *spec, enum copy_mode mode, bool odd)
{
    char dir[1024];
    write_copy(name, "copy", mode, odd, dir, sizeof dir);
    compare_paths(dir, name, spec);
}

Test(mat, llama_bf16_fixture) { compare_fixture("llama-tied-bf16", "0.1,1.2", "bf16"); }
Test(mat, qwen2_f16_fixture) { compare_fixture("qwen2-bias", "0.1,kv:1.0", "f16"); }
Test(mat, gpt2_bf16_copy) { compare_copy("gpt2-tiny", "0.1,2.3", ALL_BF16, false); }
Test(mat, gpt2_f16_copy_at_odd_addresses) { compare_copy("gpt2-tiny", "1.0,1.1", ALL_F16, true); }
Test(mat, bert_mlm_bf16_copy) { compare_copy("bert-mlm", "0.0,1.3", ALL_BF16, false); }
Test(mat, bert_classifier_f16_copy) { compare_copy("bert-cls", "1.0", ALL_F16, false); }
Test(mat, bert_encoder_bf16_copy) { compare_copy("bert-encoder", "0.1,1.2", ALL_BF16, true); }
Test(mat, llama_gqa_mixed_dtypes) { compare_copy("llama-gqa", "0.1,kv:1.1", MIXED, false); }

/*
 * A GGUF model (tests/fixtures/llama-gguf: Q8_0, Q4_0, Q4_1, F16 and F32 matrices, q and k permuted, a head of 8
 * inside blocks of 32) read in its blocks against the same file dequantized at open (HP_MODEL_CONVERT): every
 * path of compare_paths, and then the outputs and the gradients at the gates, bit for bit.
 */
Test(mat, llama_gguf_fixture)
{
    char dir[1024];
    fixture_dir(dir, sizeof dir, "llama-gguf");
    compare_paths(dir, "llama-gguf", "0.1,kv:1.0");
    struct hp_error err = {0};
    struct hp_model *ms, *mc;
    cr_assert_eq(hp_model_open(dir, &ms, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_model_open_ex(dir, HP_MODEL_CONVERT, &mc, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(ms->layers[0].wq.dt, HP_DT_Q, "q stays in its blocks");
    cr_assert_eq(mc->layers[0].wq.dt, HP_DT_F32, "HP_MODEL_CONVERT dequantizes it");
    const struct hp_model_info *in = hp_model_get_info(ms);
    struct hp_data *d = fixture_data("llama-gguf");
    struct hp_mask *mask;
    cr_assert_eq(hp_mask_parse("0.1,1.2", false, in, &mask, &err), HP_OK, "%s", err.msg);
    const size_t n = (size_t)d->seq_len * in->n_vocab;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    for (int s = 0; s < d->n_seqs; s++) {
        const int32_t *ids = d->ids + (size_t)s * d->seq_len;
        cr_assert_eq(hp_model_forward(ms, ids, NULL, NULL, d->seq_len, mask, x, &err), HP_OK, "%s", err.msg);
        cr_assert_eq(hp_model_forward(mc, ids, NULL, NULL, d->seq_len, mask, y, &err), HP_OK, "%s", err.msg);
        cr_assert(memcmp(x, y, n * sizeof *x) == 0, "sequence %d: the logits differ", s);
    }
    struct hp_evaluator *es, *ec;
    cr_assert_eq(hp_evaluator_new(ms, d, &es, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_new(mc, d, &ec, &err), HP_OK, "%s", err.msg);
    const int HH = in->n_layers * in->n_heads;
    double *ga = calloc(4 * (size_t)HH, sizeof *ga), *gb = ga + HH, *ta = gb + HH, *tb = ta + HH, va, vb;
    cr_assert_eq(hp_evaluator_grad(es, HP_METRIC_LOSS, mask, HP_ABLATE_MEAN, ga, ta, &va, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_grad(ec, HP_METRIC_LOSS, mask, HP_ABLATE_MEAN, gb, tb, &vb, &err), HP_OK, "%s", err.msg);
    cr_assert(va == vb && memcmp(ga, gb, (size_t)HH * sizeof *ga) == 0 && memcmp(ta, tb, (size_t)HH * sizeof *ta) == 0,
              "the gradients differ (loss %.17g and %.17g)", va, vb);
    free(ga), free(x), free(y);
    hp_evaluator_free(es);
    hp_evaluator_free(ec);
    hp_mask_free(mask);
    hp_data_free(d);
    hp_model_close(ms);
    hp_model_close(mc);
}

// --- memory -------------------------------------------------------------------------

/* This process's resident anonymous and file-backed memory, bytes (/proc/self/status). */
static void rss_now(double *anon, double *file)
{
    FILE *f = fopen("/proc/self/status", "r");
    cr_assert(f);
    char line[256];
    *anon = *file = -1;
    while (fgets(line, sizeof line, f)) {
        long kb;
        if (sscanf(line, "RssAnon: %ld", &kb) == 1)
            *anon = 1024.0 * kb;
        if (sscanf(line, "RssFile: %ld", &kb) == 1)
            *file = 1024.0 * kb;
    }
    fclose(f);
    cr_assert(*anon >= 0 && *file >= 0, "no RssAnon / RssFile in /proc/self/status");
}

/* One tensor of random bf16 values around 0 (norm gains around 1), written in chunks. */
static void put_bf16(FILE *f, size_t n, bool gain)
{
    uint16_t buf[4096];
    for (size_t i = 0; i < n; i += 4096) {
        const size_t c = n - i < 4096 ? n - i : 4096;
        for (size_t j = 0; j < c; j++)
            buf[j] = to_bf16((float)((gain ? 1.0 : 0.0) + 0.1 * (uniform() - 0.5)));
        cr_assert_eq(fwrite(buf, 2, c, f), c);
    }
}

/*
 * A Llama of 8 layers, d_model 512, d_ff 1536, vocabulary 2048, untied,
 * stored bf16 (59 MB: 29.4M parameters), opened and run over 16 tokens
 * with the pass's workspace alive: its weights are read in place from the
 * mapping (file-backed memory grows by about the stored size), anonymous
 * memory grows by a small part of it; converted at load, by twice it. A
 * first pass, not counted, makes what the process keeps whatever the model
 * (BLIS's packing buffers, which MALLOC_PERTURB_ makes resident).
 */
Test(mat, bf16_model_takes_its_stored_size)
{
    const int L = 8, d = 512, f = 1536, V = 2048, T = 16;
    char dir[128], path[256];
    snprintf(dir, sizeof dir, "%s/big", tmp);
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/config.json", dir);
    char cfg[512];
    int n = snprintf(cfg, sizeof cfg,
                     "{\"model_type\": \"llama\", \"hidden_size\": %d, \"intermediate_size\": %d, "
                     "\"num_hidden_layers\": %d, \"num_attention_heads\": 8, \"num_key_value_heads\": 8, "
                     "\"vocab_size\": %d, \"max_position_embeddings\": 64, \"tie_word_embeddings\": false}",
                     d, f, L, V);
    tu_spit(path, cfg, (size_t)n);
    /* the tensors, in the order written: (name, rows, cols; cols 0 = a vector) */
    struct spec { char name[64]; int r, c; } *sp = calloc((size_t)L * 9 + 3, sizeof *sp);
    int k = 0;
    sp[k++] = (struct spec){"model.embed_tokens.weight", V, d};
    static const char *const lin[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                       "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
    for (int l = 0; l < L; l++) {
        snprintf(sp[k].name, sizeof sp[k].name, "model.layers.%d.input_layernorm.weight", l), sp[k].r = d, k++;
        snprintf(sp[k].name, sizeof sp[k].name, "model.layers.%d.post_attention_layernorm.weight", l), sp[k].r = d, k++;
        for (int i = 0; i < 7; i++) {
            snprintf(sp[k].name, sizeof sp[k].name, "model.layers.%d.%s.weight", l, lin[i]);
            sp[k].r = i < 4 ? d : i < 6 ? f : d;
            sp[k].c = i < 4 ? d : i < 6 ? d : f;
            k++;
        }
    }
    sp[k++] = (struct spec){"model.norm.weight", d, 0};
    sp[k++] = (struct spec){"lm_head.weight", V, d};
    struct hp_st_out *o = calloc((size_t)k, sizeof *o);
    double stored = 0;
    for (int i = 0; i < k; i++) {
        o[i] = (struct hp_st_out){sp[i].name, "BF16", sp[i].c ? 2 : 1, {sp[i].r, sp[i].c},
                                  (size_t)sp[i].r * (sp[i].c ? sp[i].c : 1) * 2};
        stored += (double)o[i].nbytes;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *fp = fopen(path, "wb");
    struct hp_error err = {0};
    cr_assert_eq(hp_st_write_header(fp, path, o, k, &err), HP_OK, "%s", err.msg);
    for (int i = 0; i < k; i++)
        put_bf16(fp, o[i].nbytes / 2, sp[i].c == 0);
    cr_assert_eq(fclose(fp), 0);
    free(o);
    free(sp);

    int32_t ids[16];
    for (int t = 0; t < T; t++)
        ids[t] = (int32_t)(uniform() * V);
    const struct hp_fwd_in fi = {.ids = ids, .T = T, .n_seqs = 1};
    /* one thread: BLIS keeps packing buffers for as many products as ever ran at once, which attention's
     * threads make a matter of timing (2 x 16.6 MB more in some runs, none in others) */
    hp_runtime_init(1);
    double anon_grow[3], file_grow[3], logit[3];
    /* pass 0 warms up what the process keeps whatever the model (BLIS's packing buffers, OpenMP's
     * threads); then streamed, then converted at load */
    for (int pass = 0; pass < 3; pass++) {
        const int conv = pass == 2;
        double a0, f0, a1, f1;
        rss_now(&a0, &f0);
        struct hp_model *m;
        cr_assert_eq(hp_model_open_ex(dir, conv ? HP_MODEL_CONVERT : 0, &m, &err), HP_OK, "%s", err.msg);
        struct hp_fwd *w = hp_fwd_new(m, T, 1);
        float *out = malloc((size_t)T * V * sizeof *out);
        cr_assert(w && out);
        const struct hp_fwd_taps tp = {.out = out};
        hp_fwd_run(m, w, &fi, NULL, &tp);
        rss_now(&a1, &f1);
        anon_grow[pass] = a1 - a0;
        file_grow[pass] = f1 - f0;
        logit[pass] = out[(size_t)T * V - 1];
        free(out);
        hp_fwd_free(w);
        hp_model_close(m);
    }
    cr_log_info("a bf16 model of %.1f MB: anonymous memory +%.1f MB streamed, +%.1f MB converted at load "
                "(+%.1f MB the first time); file-backed +%.1f MB streamed",
                stored / 1e6, anon_grow[1] / 1e6, anon_grow[2] / 1e6, anon_grow[0] / 1e6, file_grow[1] / 1e6);
    cr_assert_eq(logit[1], logit[2], "the two paths' last logit: %.9g and %.9g", logit[1], logit[2]);
    cr_assert_gt(file_grow[1], 0.9 * stored, "streamed, the weights are read from the mapping (+%.1f MB file-backed)",
                 file_grow[1] / 1e6);
    cr_assert_lt(anon_grow[1], 0.25 * stored, "streamed, anonymous memory grew by %.1f MB for a %.1f MB model",
                 anon_grow[1] / 1e6, stored / 1e6);
    cr_assert_gt(anon_grow[2], 1.5 * stored, "converted at load, anonymous memory grew by only %.1f MB",
                 anon_grow[2] / 1e6);
}
