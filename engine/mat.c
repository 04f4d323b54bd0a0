/*
 * mat.c -- products with weight matrices in their stored dtype.
 *
 * The design is in mat_int.h's opening comment: f32 weights go to hp_gemm as
 * they are; f16 and bf16 weights are converted a panel of output columns
 * (the whole depth k) at a time into one scratch buffer, then multiplied.
 * Invariant: a product's result does not depend on the panel width or the
 * thread count (panels split only n; the conversion is exact).
 * Must not: call BLIS (blas.c's hp_gemm does), allocate in hp_mat_gemm, print,
 * or read a model (model.c sizes a model's panel: hp_mat_buf_new).
 */
#include "mat_int.h"

#include <assert.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif
#include <stdlib.h>

#include "blas_int.h"
#include "ops_int.h"

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

void hp_mat_row(struct hp_mat w, ptrdiff_t i, int n, float *out)
{
    assert(w.cs == 1);
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
        hp_mat_cvt(tmp, hp_mat_at(w, i, j0).p, w.dt, (size_t)nj);
        for (int j = 0; j < nj; j++)
            x[j0 + j] += tmp[j];
    }
}

// --- the scratch panel ----------------------------------------------------------

struct hp_mat_buf {
    float *p;   /* (cap) */
    size_t cap; /* floats; 0 for a model without 16-bit matrices */
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

/*
 * Columns [j0, j0 + nb) of w (k rows) into buf, as f32, keeping w's unit
 * stride: contiguous runs are converted whole. The layout's strides go to
 * *rs, *cs.
 */
static void panel(struct hp_mat w, int k, int j0, int nb, float *buf, ptrdiff_t *rs, ptrdiff_t *cs)
{
    const bool par = hp_op_par((size_t)k * nb);
    if (w.cs == 1) { /* rows of nb: GPT-2's Conv1D, a Linear read transposed, a table's rows */
        *rs = nb, *cs = 1;
#pragma omp parallel for schedule(static) if (par)
        for (int i = 0; i < k; i++)
            hp_mat_cvt(buf + (size_t)i * nb, hp_mat_at(w, i, j0).p, w.dt, (size_t)nb);
    } else if (w.rs == 1) { /* columns of k: a Linear (out, in) as B, a table read transposed */
        *rs = 1, *cs = k;
#pragma omp parallel for schedule(static) if (par)
        for (int j = 0; j < nb; j++)
            hp_mat_cvt(buf + (size_t)j * k, hp_mat_at(w, 0, j0 + j).p, w.dt, (size_t)k);
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
    for (int j0 = 0; j0 < n; j0 += (int)nb) {
        const int w_j = n - j0 < (int)nb ? n - j0 : (int)nb;
        ptrdiff_t rs, cs;
        panel(w, k, j0, w_j, b->p, &rs, &cs);
        hp_gemm(m, w_j, k, alpha, a, rsa, csa, b->p, rs, cs, beta, c + (ptrdiff_t)j0 * csc, rsc, csc);
    }
}
