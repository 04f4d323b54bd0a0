/*
 * mat.h -- weight matrices in the dtype they are stored in, and the
 * products that read them (engine/compute/mat.c).
 *
 * Why: an 8B-class checkpoint in bf16 is 16 GB; converted to f32 at load it
 * would be 32 GB, more than a 24 GB machine holds. So a weight matrix stays
 * a view into the mapped checkpoint, f32, f16 or bf16 as stored (only
 * vectors, norms and biases, are converted at load: model.c), and every
 * product that reads one goes through hp_mat_gemm:
 * - f32: hp_gemm on the view, with the same arguments as before 16-bit
 *   weights were streamed (bit for bit the old path);
 * - f16 / bf16: the B operand goes a panel of output columns at a time
 *   through a scratch buffer (hp_mat_buf): each panel, every one of its k
 *   rows, is converted to f32 (by all threads), then hp_gemm runs on it.
 *   A panel holds the whole depth k and BLIS's threads split only the m and
 *   n loops, so every output element is the same sum, in the same order, as
 *   a product with the whole matrix converted: the result equals the
 *   converted-at-load path (hp_model_open_ex's HP_MODEL_CONVERT) bit for
 *   bit. Never splitting k is what keeps that; it costs a panel of at least
 *   k x HP_MAT_NB_MIN floats.
 * - quantized (HP_DT_Q: a GGUF file's matrix, in its blocks in the file's
 *   mapping): the same panels, each made by dequantizing Hugging Face rows
 *   with the file's row dequantizer (gguf.c's, bit for bit gguf-py's), so
 *   the product equals one on the matrix dequantized at open (gguf_model.c
 *   with HP_MODEL_CONVERT) bit for bit, as the 16-bit path's does.
 * A quantized matrix (struct hp_qrows) is stored as rows of whole blocks
 * along its Hugging Face columns (GGUF's ne[0], a Linear's input): a panel
 * of a Linear's output columns is a set of those rows, read whole. A view
 * of one (hp_mat_at, hp_mat_t) keeps the element offset and the strides in
 * the (rows, cols) matrix instead of a pointer, so any view the engine
 * makes is honoured: per-head slices whose columns start inside a block
 * (a K-quant's 256 beside a head of 64) and the transposed reads of the
 * backward pass (a panel is then a run of columns of each row) dequantize
 * the blocks they touch and keep their part. Rows may be read through a
 * permutation: llama.cpp's converter interleaves q's and k's rows per head
 * for its rotary, and row r of Hugging Face's order is read from the
 * file's row hp_qrows_src(q, r) (transformers' reverse_permute_weights as
 * an index map, so nothing is moved). A view that no stored matrix has
 * (both strides other than 1) reads element by element, a block each.
 * BLIS 0.9 has no 16-bit float datatype (its num_t: float, double, scomplex,
 * dcomplex; its mixed-datatype gemm mixes only those), so there is no
 * mixed-precision product to call instead.
 * Conversions are exact (every f16 and bf16 value is an f32 value): bf16 is
 * the high half of an f32 (a 16-bit shift), f16 goes through F16C's
 * vcvtph2ps; both vectorised with AVX-512 when the build targets it
 * (-march=native on such a CPU), else plain C. A NaN stays a NaN (F16C
 * quiets a signalling one).
 * Memory: the mapping (the stored bytes, paged in as they are read) plus one
 * bounded panel per workspace: at most HP_MAT_PANEL floats, or k x
 * HP_MAT_NB_MIN when a matrix is deeper, never more than its largest matrix.
 * A quantized matrix so costs its file's bytes, not f32's four a weight.
 * Must not: call BLIS but through blas.c, allocate outside hp_mat_buf_alloc,
 * print, run inside an OpenMP parallel region (the conversion splits
 * over threads itself), know the model (model.h includes this header:
 * model.c sizes a model's panel), or know GGUF (gguf.c includes this header
 * for hp_mat_cvt: a quantized matrix brings its dequantizer along).
 */
#ifndef HP_MAT_H
#define HP_MAT_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "safetensors.h"

/* A panel's floats (8 MB): wide enough that BLIS's packing of the left
 * operand, repeated per panel, stays small beside the product. */
#define HP_MAT_PANEL ((size_t)1 << 21)
/* The narrowest panel, in columns: BLIS's micro-tiles are 12 to 32 wide. */
#define HP_MAT_NB_MIN 32

/* The largest block of a quantized type (the K-quants' 256 elements). */
#define HP_QBLOCK_MAX 256

/*
 * A quantized matrix (rows, cols) in Hugging Face's orientation, stored as
 * rows of whole blocks (a GGUF tensor of ne = {cols, rows}). Made by
 * gguf_model.c, which owns it; the blocks are the file's mapping.
 */
struct hp_qrows {
    const uint8_t *data;   /* rows x row_bytes, the file's rows in its order; any alignment */
    int64_t rows, cols;    /* cols a multiple of block */
    size_t row_bytes;      /* cols / block x block_bytes */
    int block;             /* elements a block: 1 (F32, F16, BF16) to HP_QBLOCK_MAX */
    int block_bytes;
    /* n_blocks blocks at src to n_blocks x block floats at dst (gguf.c's, via hp_gguf_type_info) */
    void (*to_f32)(const uint8_t *src, float *dst, int64_t n_blocks);
    int64_t perm_heads;    /* 0: rows as stored; else llama.cpp's q / k order over that many heads (rows a
                            * multiple of 2 perm_heads): row r is the file's hp_qrows_src(q, r) */
};

/* The file's row holding Hugging Face's row r: of each head's 2 half rows, row j half + i is the file's 2 i + j
 * (transformers' reverse_permute_weights). */
static inline int64_t hp_qrows_src(const struct hp_qrows *q, int64_t r)
{
    if (!q->perm_heads)
        return r;
    const int64_t per = q->rows / q->perm_heads, half = per / 2, h = r / per, rr = r % per;
    return h * per + 2 * (rr % half) + rr / half;
}

/*
 * A weight matrix as the B operand (k, n) of y = x B, or a stored table:
 * element (i, j) is p[i * rs + j * cs] of dtype dt. Views into the mapping
 * (or an f32 copy model.c owns); they never own. HP_DT_Q: p is q->data
 * (non-NULL: present) and element (i, j) is element off + i * rs + j * cs
 * of q's (rows, cols) matrix in row-major order.
 */
struct hp_mat {
    const void *p;    /* NULL: absent */
    ptrdiff_t rs, cs; /* strides over (rows, columns), in elements */
    enum hp_dtype dt; /* HP_DT_F32, HP_DT_F16, HP_DT_BF16 or HP_DT_Q */
    const struct hp_qrows *q; /* HP_DT_Q: the matrix; else NULL */
    ptrdiff_t off;            /* HP_DT_Q: element (0, 0)'s place in q's matrix; else 0 */
};

static inline size_t hp_dtype_size(enum hp_dtype dt)
{
    assert(dt == HP_DT_F32 || dt == HP_DT_F16 || dt == HP_DT_BF16); /* a quantized element has no size */
    return dt == HP_DT_F32 ? 4 : 2;
}

/* q's whole matrix as a table (rows, cols), row-major. */
static inline struct hp_mat hp_mat_of_q(const struct hp_qrows *q)
{
    return (struct hp_mat){q->data, (ptrdiff_t)q->cols, 1, HP_DT_Q, q, 0};
}

/* The view whose element (0, 0) is w's (i, j). */
static inline struct hp_mat hp_mat_at(struct hp_mat w, ptrdiff_t i, ptrdiff_t j)
{
    if (w.dt == HP_DT_Q)
        w.off += i * w.rs + j * w.cs;
    else
        w.p = (const char *)w.p + (i * w.rs + j * w.cs) * (ptrdiff_t)hp_dtype_size(w.dt);
    return w;
}

/* The transpose: rows become columns (a weight's B^T for a data gradient). */
static inline struct hp_mat hp_mat_t(struct hp_mat w)
{
    ptrdiff_t r = w.rs;
    w.rs = w.cs;
    w.cs = r;
    return w;
}

/* y[i] = x[i] as f32 for n elements of dtype dt at x (any alignment). y must not overlap x. */
void hp_mat_cvt(float *y, const void *x, enum hp_dtype dt, size_t n);

/* Element (i, j) of a quantized w (its block dequantized). */
float hp_mat_qget(struct hp_mat w, ptrdiff_t i, ptrdiff_t j);

/* Element (i, j) of w. */
static inline float hp_mat_get(struct hp_mat w, ptrdiff_t i, ptrdiff_t j)
{
    if (w.dt == HP_DT_Q)
        return hp_mat_qget(w, i, j);
    const void *p = hp_mat_at(w, i, j).p;
    float f;
    if (w.dt == HP_DT_F32)
        memcpy(&f, p, sizeof f);
    else
        hp_mat_cvt(&f, p, w.dt, 1);
    return f;
}

/* out (n) = row i of w, whose columns are contiguous (cs == 1). */
void hp_mat_row(struct hp_mat w, ptrdiff_t i, int n, float *out);

/* x (n) += row i of w (cs == 1), each sum in f32 as hp_op_add_into's. */
void hp_mat_row_add(struct hp_mat w, ptrdiff_t i, int n, float *x);

/* All of stored tensor t as f32 into out (its element count of floats): converted, or (HP_DT_Q) its rows
 * dequantized in Hugging Face's order. */
void hp_mat_tensor_f32(const struct hp_st_tensor *t, float *out);

struct hp_mat_buf; /* the scratch panel of one workspace */

/* A scratch for products with 16-bit or quantized matrices of depth up to kmax, the
 * largest of largest elements: HP_MAT_PANEL floats, or kmax x HP_MAT_NB_MIN
 * when deeper, never more than largest. kmax = 0: it holds nothing (a model
 * whose matrices are all f32). model.c's hp_mat_buf_new gives a model's.
 * Destructor: hp_mat_buf_free. NULL on OOM. */
struct hp_mat_buf *hp_mat_buf_alloc(size_t kmax, size_t largest);
void hp_mat_buf_free(struct hp_mat_buf *b);

/*
 * C (m, n) = alpha * A (m, k) * W (k, n) + beta * C, A and C f32 by pointer
 * and strides as hp_gemm's, W a view of a matrix of the model b was made for.
 * With beta == 0, C need not be initialised. Not from inside a parallel region.
 */
void hp_mat_gemm(struct hp_mat_buf *b, int m, int n, int k, float alpha, const float *a, ptrdiff_t rsa,
                 ptrdiff_t csa, struct hp_mat w, float beta, float *c, ptrdiff_t rsc, ptrdiff_t csc);

#endif
