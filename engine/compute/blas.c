/*
 * blas.c -- the only module that talks to BLIS.
 *
 * Owns: kernel-set selection (BLIS reads BLIS_ARCH_TYPE once, at its own
 * initialisation, so the choice is made here before the first BLIS call),
 * the thread count, and a strided sgemm wrapper.
 * Invariant: every matrix product in the engine goes through hp_gemm.
 * Global state, on purpose and process-wide (said in headprune.h's
 * hp_runtime_init contract): the globals below, BLIS_ARCH_TYPE set with
 * setenv before bli_init, BLIS's thread count and omp_set_num_threads. BLIS
 * reads its kernel choice once per process, so a per-context choice could
 * not be honoured anyway; thread counts apply to every model in the process.
 * Must not: allocate, print, or read anything but the environment.
 */
#define _POSIX_C_SOURCE 200809L
#include "blas.h"

#include <blis.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static bool g_inited;
static rntm_t g_serial; /* one thread: small products cost more to split than to run */
/* the threads set (hp_runtime_init); both without BLIS's small-matrix ("sup") path, whose kernels (zen3,
 * haswell: the AVX2 sets) sum in another order than the large path's, so a product's bits would depend on
 * its shape, e.g. on how many sequences a chunk holds */
static rntm_t g_threads;
static bool g_from_env;

static bool cpu_has_avx512f(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
#else
    return false;
#endif
}

void hp_runtime_init(int n_threads)
{
    if (!g_inited) {
        const char *user = getenv("BLIS_ARCH_TYPE");
        g_from_env = user != NULL && user[0] != '\0';
        /* Debian's BLIS 0.9 falls back to the AVX2 kernels on these Xeons even
         * when AVX-512 is present; skx runs sgemm about 1.8x faster. */
        if (!g_from_env && cpu_has_avx512f()) {
            char num[16];
            snprintf(num, sizeof num, "%d", (int)BLIS_ARCH_SKX);
            setenv("BLIS_ARCH_TYPE", num, 1);
        }
        bli_init();
        bli_rntm_init(&g_serial);
        bli_rntm_set_num_threads(1, &g_serial);
        bli_rntm_set_l3_sup(false, &g_serial);
        g_inited = true;
    }
    if (n_threads > 0) {
        bli_thread_set_num_threads(n_threads);
#ifdef _OPENMP
        omp_set_num_threads(n_threads); /* the engine's own row-wise loops */
#endif
    }
    bli_rntm_init_from_global(&g_threads);
    bli_rntm_set_l3_sup(false, &g_threads);
}

double hp_runtime_sgemm_gflops(float *a, float *b, float *c, int n, double min_seconds)
{
    for (size_t i = 0; i < (size_t)n * n; i++) {
        a[i] = (float)(i % 7) * 0.125f;
        b[i] = (float)(i % 5) * 0.25f;
    }
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    double secs = 0;
    long reps = 0;
    do {
        hp_gemm(n, n, n, 1.0f, a, n, 1, b, n, 1, 0.0f, c, n, 1);
        reps++;
        clock_gettime(CLOCK_MONOTONIC, &t);
        secs = (double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec);
    } while (secs < min_seconds);
    return secs > 0 ? 2.0 * n * n * (double)n * (double)reps / secs / 1e9 : 0;
}

const char *hp_runtime_kernel(void)
{
    if (!g_inited)
        hp_runtime_init(0);
    return bli_arch_string(bli_arch_query_id());
}

bool hp_runtime_kernel_from_env(void)
{
    return g_from_env;
}

static void gemm(bool serial, int m, int n, int k, float alpha, const float *a, ptrdiff_t rsa, ptrdiff_t csa,
                 const float *b, ptrdiff_t rsb, ptrdiff_t csb, float beta, float *c, ptrdiff_t rsc, ptrdiff_t csc)
{
    if (!g_inited)
        hp_runtime_init(0);
    if (m == 0 || n == 0)
        return;
    float al = alpha, be = beta;
    /* BLIS takes non-const pointers but does not write a or b. Below about
     * 2 MFLOP, waking a second thread costs more than it saves (and with the
     * other core busy, OpenMP's spinning barriers stall). Threads only split
     * the m and n loops, so the result is the same either way. */
    rntm_t *r = serial || (double)m * n * k < (1 << 20) ? &g_serial : &g_threads;
    bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &al, (float *)a,
                 rsa, csa, (float *)b, rsb, csb, &be, c, rsc, csc, NULL, r);
}

void hp_gemm(int m, int n, int k, float alpha, const float *a, ptrdiff_t rsa,
             ptrdiff_t csa, const float *b, ptrdiff_t rsb, ptrdiff_t csb,
             float beta, float *c, ptrdiff_t rsc, ptrdiff_t csc)
{
    gemm(false, m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc);
}

void hp_gemm1(int m, int n, int k, float alpha, const float *a, ptrdiff_t rsa,
              ptrdiff_t csa, const float *b, ptrdiff_t rsb, ptrdiff_t csb,
              float beta, float *c, ptrdiff_t rsc, ptrdiff_t csc)
{
    gemm(true, m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc);
}
