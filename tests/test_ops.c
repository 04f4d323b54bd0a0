/*
 * test_ops.c -- the row operations' vectorised paths against plain scans.
 *
 *  1. hp_vmax is a scan's maximum and hp_vfind its first index, at every
 *     length across the 16-lane blocks, with ties and signed zeros.
 *  2. hp_op_softmax_rows equals a softmax computed in double (1e-6), with
 *     and without a key mask, causal or not; a score that is not a number,
 *     or +inf, at a visible key makes the row's span NaN (as Hugging Face),
 *     one at a masked key changes nothing, and a row with no visible key is
 *     uniform.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "util.h"
#include "vmath.h"

/* Uniform in [-4, 4), from the splitmix stream x. */
static float draw(uint64_t *x)
{
    return (float)((double)(hp_splitmix64(x) >> 11) / 9007199254740992.0 * 8.0 - 4.0);
}

Test(ops, vmax_and_vfind_are_a_scans)
{
    uint64_t seed = 7;
    float x[100];
    for (int n = 1; n <= 100; n++)
        for (int trial = 0; trial < 20; trial++) {
            for (int i = 0; i < n; i++)
                x[i] = draw(&seed);
            if (trial % 3 == 1 && n > 2) /* a tie: the first index must win */
                x[n - 1] = x[(int)(hp_splitmix64(&seed) % (uint64_t)(n - 1))] = 9.0f;
            if (trial % 3 == 2) { /* signed zeros at the top */
                for (int i = 0; i < n; i++)
                    x[i] = -fabsf(x[i]) - 1.0f;
                x[n / 2] = -0.0f;
                x[n - 1] = 0.0f;
            }
            float m = x[0];
            int at = 0;
            for (int i = 1; i < n; i++)
                if (x[i] > x[at])
                    at = i;
            m = x[at];
            cr_assert(hp_vmax(x, (size_t)n) == m, "n %d trial %d: %g, the scan %g", n, trial, hp_vmax(x, (size_t)n), m);
            cr_assert_eq(hp_vfind(x, (size_t)n, m), (size_t)at, "n %d trial %d: first index", n, trial);
        }
}

/* Row i of a (T, T) score matrix softmaxed in double over its visible keys, as the model defines them. */
static void softmax_ref(const float *s, double *p, int T, int i, bool causal, const uint8_t *km)
{
    const int n = causal ? i + 1 : T;
    double mx = -INFINITY, sum = 0;
    for (int j = 0; j < n; j++)
        if (!km || km[j])
            mx = fmax(mx, s[(size_t)i * T + j]);
    for (int j = 0; j < T; j++) {
        p[j] = j < n && (!km || km[j]) ? exp(s[(size_t)i * T + j] - mx) : 0.0;
        sum += p[j];
    }
    for (int j = 0; j < T; j++)
        p[j] /= sum;
}

static void check_softmax(int T, bool causal, bool masked)
{
    uint64_t seed = (uint64_t)T * 31 + causal * 2 + masked;
    float *a = malloc((size_t)T * T * sizeof *a), *s = malloc((size_t)T * T * sizeof *s);
    double *p = malloc((size_t)T * sizeof *p);
    uint8_t *km = malloc((size_t)T);
    for (int j = 0; j < T; j++)
        km[j] = !masked || j % 5 != 3;
    for (size_t k = 0; k < (size_t)T * T; k++)
        s[k] = a[k] = 3.0f * draw(&seed);
    hp_op_softmax_rows(a, T, causal, 0, masked ? km : NULL);
    for (int i = 0; i < T; i++) {
        softmax_ref(s, p, T, i, causal, masked ? km : NULL);
        for (int j = 0; j < T; j++)
            cr_assert(fabs(a[(size_t)i * T + j] - p[j]) <= 1e-6, "T %d causal %d masked %d: p[%d][%d] %.9g, ref %.9g",
                      T, causal, masked, i, j, a[(size_t)i * T + j], p[j]);
    }
    /* a NaN or +inf score at a visible key: the row's visible span is NaN; at a masked key: no change */
    for (int bad = 0; bad < 2; bad++)
        for (int i = 0; i < T; i++) {
            const int n = causal ? i + 1 : T, j = (n - 1) / 2;
            memcpy(a, s, (size_t)T * T * sizeof *a);
            a[(size_t)i * T + j] = bad ? INFINITY : NAN;
            hp_op_softmax_rows(a, T, causal, 0, masked ? km : NULL);
            const bool seen = !masked || km[j];
            softmax_ref(s, p, T, i, causal, masked ? km : NULL);
            for (int k = 0; k < T; k++) {
                const float v = a[(size_t)i * T + k];
                if (seen)
                    cr_assert(k < n ? isnan(v) : v == 0.0f, "T %d row %d: %s at key %d, entry %d is %g", T, i,
                              bad ? "+inf" : "NaN", j, k, v);
                else
                    cr_assert(fabs(v - p[k]) <= 1e-6, "T %d row %d: a NaN at masked key %d changed entry %d", T, i,
                              j, k);
            }
        }
    /* no visible key: uniform over the span, as Hugging Face's additive mask makes it */
    for (int j = 0; j < T; j++)
        km[j] = 0;
    memcpy(a, s, (size_t)T * T * sizeof *a);
    hp_op_softmax_rows(a, T, causal, 0, km);
    for (int i = 0; i < T; i++)
        for (int k = 0; k < T; k++) {
            const int n = causal ? i + 1 : T;
            cr_assert(a[(size_t)i * T + k] == (k < n ? 1.0f / (float)n : 0.0f), "T %d: row %d with no key", T, i);
        }
    free(a), free(s), free(p), free(km);
}

Test(ops, softmax_rows_match_double_and_keep_nan_rows)
{
    const int sizes[4] = {5, 16, 17, 70};
    for (int k = 0; k < 4; k++)
        for (int causal = 0; causal < 2; causal++)
            for (int masked = 0; masked < 2; masked++)
                check_softmax(sizes[k], causal, masked);
}
