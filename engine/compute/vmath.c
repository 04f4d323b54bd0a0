/*
 * vmath.c -- vectorised elementwise exponentials through glibc's libmvec.
 *
 * glibc declares SIMD variants of expf (_ZGVeN16v_expf and friends, within
 * 4 ulp) only under __FAST_MATH__, so this file alone is compiled with
 * -ffast-math (see meson.build); nothing else is in it, so the flag changes
 * no other arithmetic. Inputs must be finite (callers subtract a row
 * maximum first); results are the same whatever the thread count.
 */
#include "vmath.h"

#include <math.h>

void hp_vexpf(float *y, const float *x, float shift, size_t n)
{
#ifdef __AVX512F__
#pragma omp simd simdlen(16) /* libmvec's AVX-512 expf: GCC prefers 256-bit vectors on these CPUs otherwise */
#else
#pragma omp simd
#endif
    for (size_t i = 0; i < n; i++)
        y[i] = expf(x[i] - shift);
}
