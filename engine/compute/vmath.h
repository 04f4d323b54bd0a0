/*
 * vmath.h -- vectorised elementwise math (engine/compute/vmath.c).
 */
#ifndef HP_VMATH_H
#define HP_VMATH_H

#include <stddef.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

/* y[i] = expf(x[i] - shift) for i < n; x finite. y may equal x. */
void hp_vexpf(float *y, const float *x, float shift, size_t n);

/*
 * The lanes of the engine's double sums (hp_vsum_d, hp_vdot_d, ops.c's row
 * statistics), and their total in one fixed tree: the order of additions its
 * numbers rest on (HP_NUMERIC_VERSION).
 */
#define HP_VLANES 8

static inline double hp_vlanes_total(const double acc[HP_VLANES])
{
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/*
 * The sum of x (n) in double over 8 fixed lanes: vectorisable, and the same
 * order of additions whatever the threads or the buffer's alignment. Inline,
 * so it is compiled with its caller's flags, never vmath.c's -ffast-math
 * (which would let the compiler reorder the additions).
 */
static inline double hp_vsum_d(const float *x, size_t n)
{
    double acc[HP_VLANES] = {0};
    size_t i = 0;
    for (; i + HP_VLANES <= n; i += HP_VLANES)
        for (int j = 0; j < HP_VLANES; j++)
            acc[j] += x[i + j];
    for (; i < n; i++)
        acc[i % HP_VLANES] += x[i];
    return hp_vlanes_total(acc);
}

/* The dot product of x and y (n) in double, in hp_vsum_d's order of additions. */
static inline double hp_vdot_d(const float *x, const float *y, size_t n)
{
    double acc[HP_VLANES] = {0};
    size_t i = 0;
    for (; i + HP_VLANES <= n; i += HP_VLANES)
        for (int j = 0; j < HP_VLANES; j++)
            acc[j] += (double)x[i + j] * y[i + j];
    for (; i < n; i++)
        acc[i % HP_VLANES] += (double)x[i] * y[i];
    return hp_vlanes_total(acc);
}

/*
 * The largest of x (n >= 1), x finite: 16 running maxima side by side (one
 * AVX-512 register), then the largest of them; the same number as a scan's.
 */
static inline float hp_vmax(const float *x, size_t n)
{
    float m = x[0];
    size_t i = 0;
#ifdef __AVX512F__
    if (n >= 16) {
        __m512 v = _mm512_loadu_ps(x);
        for (i = 16; i + 16 <= n; i += 16)
            v = _mm512_max_ps(_mm512_loadu_ps(x + i), v);
        m = _mm512_reduce_max_ps(v);
    }
#endif
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

/* The first index of v in x (n), or n: with hp_vmax, the first index of the largest, as a scan finds it.
 * n only for a NaN maximum, whose row's sum of exponentials is NaN too: the LM heads' callers compare the
 * index with a target and never index with it, and report the row's loss as not finite. */
static inline size_t hp_vfind(const float *x, size_t n, float v)
{
    size_t i = 0;
    while (i < n && !(x[i] == v))
        i++;
    return i;
}

#endif
