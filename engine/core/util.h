/* util.h -- small helpers shared by the engine's modules. */
#ifndef HP_UTIL_H
#define HP_UTIL_H

#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "headprune.h"

/* Format one line into err (may be NULL) and return st. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
enum hp_status hp_fail(struct hp_error *err, enum hp_status st, const char *fmt, ...);

/*
 * A file name built from a path, printf-style, into a fresh string *out
 * (free() it): paths have no fixed limit here, the system says when one is
 * too long. Out of memory: *out is NULL, HP_ERR_NOMEM.
 */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
enum hp_status hp_path_make(char **out, struct hp_error *err, const char *fmt, ...);

/* strerror(e), except that ENAMETOOLONG says which limits a path is over. */
const char *hp_strerror(int e);

/*
 * Read a whole text file (NUL-terminated) into *out, freed by the caller.
 * A file over max_bytes fails with too_big and "path: over N bytes, too large
 * for <what>"; a missing or unreadable one with HP_ERR_IO.
 */
enum hp_status hp_read_text(const char *path, size_t max_bytes, enum hp_status too_big, const char *what,
                            char **out, size_t *len, struct hp_error *err);

/*
 * Write one byte of each page of a fresh buffer of this many bytes, the
 * pages split over the OpenMP threads, so that the kernel maps (and zeroes)
 * them now. Touched first inside a product instead, a page fault stalls one
 * of BLIS's threads while the other waits at its barrier: a gradient pass's
 * kept activations (hundreds of MB) cost about twice as long that way. For
 * buffers that are wholly written before they are read; the contents are
 * unspecified afterwards, as malloc's.
 */
void hp_prefault(void *p, size_t bytes);

/* Seconds on the monotonic clock: for durations only (its zero is arbitrary). */
double hp_now(void);

/* "layers 0-2", or "only layer 0" when n is 1: the range of valid indices for
 * error hints (many/one: the plural and singular noun). */
void hp_range_text(char *buf, size_t cap, const char *many, const char *one, int n);

/* qsort for arrays that may be empty: qsort's base must not be NULL even for n = 0
 * (C11 7.22.5), and an empty array is often NULL. */
static inline void hp_qsort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *))
{
    if (n > 1)
        qsort(base, n, size, cmp);
}

/* splitmix64: the next number of the stream x (Steele, Lea and Flood's generator), for reproducible draws. */
static inline uint64_t hp_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n) from the splitmix64 stream x, by rejection (no modulo bias); n >= 1. */
static inline uint64_t hp_splitmix64_below(uint64_t *x, uint64_t n)
{
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t r;
    do
        r = hp_splitmix64(x);
    while (r >= limit);
    return r % n;
}

/* xoshiro256** (Blackman and Vigna): the next number of the generator s, seeded from hp_splitmix64. Plans'
 * random draws and gate training's noise both use it: small, fast, and the same on every machine. */
static inline uint64_t hp_xoshiro256ss(uint64_t s[4])
{
    const uint64_t x = s[1] * 5, r = ((x << 7) | (x >> 57)) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return r;
}

/* FNV-1a (64-bit) of a NUL-terminated name: what a study's name adds to its generator's seed. */
static inline uint64_t hp_fnv1a(const char *name)
{
    uint64_t h = 0xCBF29CE484222325ull;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        h = (h ^ *c) * 0x100000001B3ull;
    return h;
}

/* OpenMP's thread count and this thread's number, 1 and 0 in a build without OpenMP. */
static inline int hp_max_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static inline int hp_thread_num(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

#endif
