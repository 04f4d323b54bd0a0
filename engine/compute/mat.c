/*
 * mat.c -- products with weight matrices in their stored dtype.
 *
 * The design is in mat.h's opening comment: f32 weights go to hp_gemm as
 * they are; f16 and bf16 weights are converted, quantized ones dequantized,
 * a panel of output columns (the whole depth k) at a time into one scratch
 * buffer, then multiplied.
 * Invariant: a product's result does not depend on the panel width or the
 * thread count (panels split only n; the conversion is exact, and a block
 * dequantizes to the same floats whichever part of it a panel keeps).
 * Must not: call BLIS (blas.c's hp_gemm does), allocate in hp_mat_gemm, print,
 * or read a model (model.c sizes a model's panel: hp_mat_buf_new).
 */
#include "mat.h"

#include <assert.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif
#include <stdlib.h>

#include "blas.h"
#include "ops.h"

// --- conversions --------------------------------------------------------------

/* f16 bits to f32, exactly; a NaN keeps its sign and payload and is made quiet, as F16C's vcvtph2ps does. */
static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: renormalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint16_t load16(const unsigned char *s)
{
    return (uint16_t)(s[0] | (s[1] << 8)); /* little-endian, as safetensors stores */
}

void hp_mat_cvt(float *y, const void *x, enum hp_dtype dt, size_t n)
{
    const unsigned char *s = x;
    size_t i = 0;
    if (dt == HP_DT_F32) {
        memcpy(y, x, n * sizeof(float));
        return;
    }
#ifdef __AVX512F__
    /* 16 at a time: unaligned 256-bit loads, 512-bit stores */
    if (dt == HP_DT_BF16)
        for (; i + 16 <= n; i += 16) {
            __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s + 2 * i)));
            _mm512_storeu_ps(y + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
        }
    else
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + 2 * i))));
#endif
    if (dt == HP_DT_BF16) {
        for (; i < n; i++) {
            uint32_t bits = (uint32_t)load16(s + 2 * i) << 16;
            memcpy(&y[i], &bits, sizeof bits);
        }
    } else {
        for (; i < n; i++)
            y[i] = half_to_float(load16(s + 2 * i));
    }
}

// --- quantized rows -------------------------------------------------------------

/*
 * Elements [c, c + n) of Hugging Face row r of q into out: the blocks they
 * touch dequantized, whole blocks straight into out, a block cut by either
 * end through a block of scratch. A span outside the row is a caller's
 * mistake (q_run splits runs at rows' ends).
 */
static void q_span(const struct hp_qrows *q, int64_t r, int64_t c, int64_t n, float *out)
{
    assert(r >= 0 && r < q->rows && c >= 0 && n >= 0 && c + n <= q->cols);
    const uint8_t *row = q->data + (size_t)hp_qrows_src(q, r) * q->row_bytes;
    const int64_t bs = q->block;
    float tmp[HP_QBLOCK_MAX];
    while (n > 0) {
        const int64_t b = c / bs, in = c - b * bs; /* the block holding c, and c's place in it */
        const uint8_t *src = row + (size_t)b * (size_t)q->block_bytes;
        if (in == 0 && n >= bs) { /* whole blocks */
            const int64_t nb = n / bs;
            q->to_f32(src, out, nb);
            out += nb * bs, c += nb * bs, n -= nb * bs;
        } else {
            const int64_t take = bs - in < n ? bs - in : n;
            q->to_f32(src, tmp, 1);
            memcpy(out, tmp + in, (size_t)take * sizeof *out);
            out += take, c += take, n -= take;
        }
    }
}

/* Where element e (row-major) of q's matrix is: its row and column. */
static void q_place(const struct hp_qrows *q, ptrdiff_t e, int64_t *r, int64_t *c)
{
    assert(e >= 0 && e < q->rows * q->cols);
    *r = e / q->cols;
    *c = e % q->cols;
}

/*
 * n elements of w from (i, j) along its unit stride (cs == 1: a row; rs == 1: a column) into out: a run of
 * consecutive elements of q's row-major matrix, each row's part read from that row (the file's
 * hp_qrows_src), so a run over a row's end goes on at the next row's start, as in an f32 matrix.
 */
static void q_run(struct hp_mat w, ptrdiff_t i, ptrdiff_t j, int64_t n, float *out)
{
    if (n <= 0)
        return;
    int64_t r, c;
    q_place(w.q, w.off + i * w.rs + j * w.cs, &r, &c);
    assert((r * w.q->cols + c) + n <= w.q->rows * w.q->cols); /* inside the matrix, as any view must be */
    while (n > 0) {
        const int64_t take = w.q->cols - c < n ? w.q->cols - c : n;
        q_span(w.q, r, c, take, out);
        out += take, n -= take;
        r++, c = 0;
    }
}

float hp_mat_qget(struct hp_mat w, ptrdiff_t i, ptrdiff_t j)
{
    assert(w.dt == HP_DT_Q);
    float f;
    q_run(w, i, j, 1, &f);
    return f;
}

void hp_mat_tensor_f32(const struct hp_st_tensor *t, float *out)
{
    size_t n = 1;
    for (int d = 0; d < t->n_dims; d++)
        n *= (size_t)t->shape[d];
    if (t->dtype != HP_DT_Q) {
        hp_mat_cvt(out, t->data, t->dtype, n);
        return;
    }
    const struct hp_qrows *q = t->q;
    assert(q && (size_t)(q->rows * q->cols) == n);
#pragma omp parallel for schedule(static) if (hp_op_par(n))
    for (int64_t r = 0; r < q->rows; r++)
        q_span(q, r, 0, q->cols, out + (size_t)r * (size_t)q->cols);
}

// --- rows ------------------------------------------------------------------------

void hp_mat_row(struct hp_mat w, ptrdiff_t i, int n, float *out)
{
    assert(w.cs == 1);
    if (w.dt == HP_DT_Q)
        q_run(w, i, 0, n, out);
    else
        hp_mat_cvt(out, hp_mat_at(w, i, 0).p, w.dt, (size_t)n);
}

void hp_mat_row_add(struct hp_mat w, ptrdiff_t i, int n, float *x)
{
    assert(w.cs == 1);
    if (w.dt == HP_DT_F32) {
        hp_op_add_into(x, hp_mat_at(w, i, 0).p, (size_t)n);
        return;
    }
    float tmp[256];
    for (int j0 = 0; j0 < n; j0 += 256) {
        const int nj = n - j0 < 256 ? n - j0 : 256;
        if (w.dt == HP_DT_Q)
            q_run(w, i, j0, nj, tmp);
        else
            hp_mat_cvt(tmp, hp_mat_at(w, i, j0).p, w.dt, (size_t)nj);
        for (int j = 0; j < nj; j++)
            x[j0 + j] += tmp[j];
    }
}

// --- the scratch panel ----------------------------------------------------------

struct hp_mat_buf {
    float *p;   /* (cap) */
    size_t cap; /* floats; 0 for a model whose matrices are all f32 */
};

struct hp_mat_buf *hp_mat_buf_alloc(size_t kmax, size_t largest)
{
    struct hp_mat_buf *b = calloc(1, sizeof *b);
    if (!b || kmax == 0)
        return b;
    size_t cap = kmax * HP_MAT_NB_MIN > HP_MAT_PANEL ? kmax * HP_MAT_NB_MIN : HP_MAT_PANEL;
    b->cap = cap < largest ? cap : largest;
    b->p = aligned_alloc(64, (b->cap * sizeof(float) + 63) / 64 * 64);
    if (!b->p) {
        free(b);
        return NULL;
    }
    return b;
}

void hp_mat_buf_free(struct hp_mat_buf *b)
{
    if (!b)
        return;
    free(b->p);
    free(b);
}

// --- products -------------------------------------------------------------------

/* n elements of w from (i, j) along its unit stride into out, as f32. */
static void run(struct hp_mat w, ptrdiff_t i, ptrdiff_t j, int n, float *out)
{
    if (w.dt == HP_DT_Q)
        q_run(w, i, j, n, out);
    else
        hp_mat_cvt(out, hp_mat_at(w, i, j).p, w.dt, (size_t)n);
}

/*
 * Columns [j0, j0 + nb) of w (k rows) into buf, as f32, keeping w's unit
 * stride: contiguous runs are converted (or dequantized) whole. The layout's
 * strides go to *rs, *cs.
 */
static void panel(struct hp_mat w, int k, int j0, int nb, float *buf, ptrdiff_t *rs, ptrdiff_t *cs)
{
    const bool par = hp_op_par((size_t)k * nb);
    if (w.cs == 1) { /* rows of nb: GPT-2's Conv1D, a Linear read transposed, a table's rows */
        *rs = nb, *cs = 1;
#pragma omp parallel for schedule(static) if (par)
        for (int i = 0; i < k; i++)
            run(w, i, j0, nb, buf + (size_t)i * nb);
    } else if (w.rs == 1) { /* columns of k: a Linear (out, in) as B, a table read transposed */
        *rs = 1, *cs = k;
#pragma omp parallel for schedule(static) if (par)
        for (int j = 0; j < nb; j++)
            run(w, 0, j0 + j, k, buf + (size_t)j * k);
    } else { /* no unit stride: no stored matrix is viewed so, but any view works */
        *rs = nb, *cs = 1;
#pragma omp parallel for schedule(static) if (par)
        for (int i = 0; i < k; i++)
            for (int j = 0; j < nb; j++)
                buf[(size_t)i * nb + j] = hp_mat_get(w, i, j0 + j);
    }
}

void hp_mat_gemm(struct hp_mat_buf *b, int m, int n, int k, float alpha, const float *a, ptrdiff_t rsa,
                 ptrdiff_t csa, struct hp_mat w, float beta, float *c, ptrdiff_t rsc, ptrdiff_t csc)
{
    if (w.dt == HP_DT_F32) {
        hp_gemm(m, n, k, alpha, a, rsa, csa, w.p, w.rs, w.cs, beta, c, rsc, csc);
        return;
    }
    if (m == 0 || n == 0)
        return;
    if (k == 0) { /* C = beta C: no panel to read */
        hp_gemm(m, n, 0, alpha, a, rsa, csa, b->p, n, 1, beta, c, rsc, csc);
        return;
    }
    assert(b && (size_t)k <= b->cap);
    /* panels as wide as the buffer holds, in whole micro-tiles when narrower than n */
    size_t nb = b->cap / (size_t)k;
    if (nb >= (size_t)n)
        nb = (size_t)n;
    else if (nb >= HP_MAT_NB_MIN)
        nb -= nb % HP_MAT_NB_MIN;
    /* a quantized matrix read transposed: panels of whole blocks where they fit (a block cut by a panel's
     * edge is dequantized by both panels; the floats are the same either way) */
    if (w.dt == HP_DT_Q && w.cs == 1 && nb < (size_t)n && nb >= (size_t)w.q->block)
        nb -= nb % (size_t)w.q->block;
    for (int j0 = 0; j0 < n; j0 += (int)nb) {
        const int w_j = n - j0 < (int)nb ? n - j0 : (int)nb;
        ptrdiff_t rs, cs;
        panel(w, k, j0, w_j, b->p, &rs, &cs);
        hp_gemm(m, w_j, k, alpha, a, rsa, csa, b->p, rs, cs, beta, c + (ptrdiff_t)j0 * csc, rsc, csc);
    }
}
