/*
 * vmath_int.h -- vectorised elementwise math (engine/vmath.c).
 */
#ifndef HP_VMATH_INT_H
#define HP_VMATH_INT_H

#include <stddef.h>

/* y[i] = expf(x[i] - shift) for i < n; x finite. y may equal x. */
void hp_vexpf(float *y, const float *x, float shift, size_t n);

#endif
