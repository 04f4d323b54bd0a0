/* blas.h -- private interface of blas.c, the engine's one BLIS module. */
#ifndef HP_BLAS_H
#define HP_BLAS_H

#include "headprune.h"

/*
 * C (m, n) = alpha * A (m, k) * B (k, n) + beta * C, every operand given by
 * its pointer and row/column strides, so slices and transposes need no copy.
 * With beta == 0, C need not be initialised.
 */
void hp_gemm(int m, int n, int k, float alpha, const float *a, ptrdiff_t rsa,
             ptrdiff_t csa, const float *b, ptrdiff_t rsb, ptrdiff_t csb,
             float beta, float *c, ptrdiff_t rsc, ptrdiff_t csc);

/* The same on the calling thread only: for products run side by side from
 * an OpenMP loop. Equal to hp_gemm's result bit for bit. */
void hp_gemm1(int m, int n, int k, float alpha, const float *a, ptrdiff_t rsa,
              ptrdiff_t csa, const float *b, ptrdiff_t rsb, ptrdiff_t csb,
              float beta, float *c, ptrdiff_t rsc, ptrdiff_t csc);

#endif
