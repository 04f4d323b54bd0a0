/*
 * test_gates.c -- Hard Concrete gates trained under an L0 penalty (gates.c,
 * the sweep's gates studies).
 *
 *  - the gate's sampling and its derivative in log alpha, the test-time gate,
 *    the L0 penalty and its derivative, Adam and the noise generator against
 *    tools/gen_gate_fixtures.py's float64 reference (tests/fixtures/gates.json),
 *    written from the formulas, not from this code;
 *  - a training step's gradient against central differences of its objective
 *    (the reverse pass itself is test_grad.c's);
 */
#define _DEFAULT_SOURCE /* mkdtemp, in testutil.h */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gates_int.h"
#include "headprune.h"
#include "testutil.h"

static cJSON *g_fix;

static cJSON *fixture(void)
{
    if (!g_fix) {
        char path[1024];
        snprintf(path, sizeof path, "%s/gates.json", getenv("HP_FIXTURES"));
        char *text = tu_slurp(path, NULL);
        g_fix = cJSON_Parse(text);
        free(text);
        cr_assert_not_null(g_fix, "%s does not parse", path);
    }
    return g_fix;
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsNumber(v), "no number '%s'", key);
    return v->valuedouble;
}

/* |got - want| <= tol * max(1, |want|), else counted; the first few printed */
static int check(const char *what, int i, double got, double want, double tol, int *bad, double *worst)
{
    const double d = fabs(got - want) / fmax(1.0, fabs(want));
    if (d > *worst)
        *worst = d;
    if (d > tol || isnan(got) != isnan(want)) {
        if (*bad < 5)
            cr_log_error("%s case %d: got %.17g, want %.17g", what, i, got, want);
        (*bad)++;
    }
    return *bad;
}

#define MATH_TOL 1e-12

Test(gates, sampling_and_its_derivative_match_the_float64_reference)
{
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(fixture(), "sample");
    int i = 0, bad = 0, n_mid = 0, n_clip = 0;
    double worst = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        double dz = NAN;
        const double z = hp_gate_sample(num(c, "log_alpha"), num(c, "u"), num(c, "beta"), &dz);
        check("z", i, z, num(c, "z"), MATH_TOL, &bad, &worst);
        check("dz/dlog_alpha", i, dz, num(c, "dz"), MATH_TOL, &bad, &worst);
        n_mid += z > 0 && z < 1;
        n_clip += z == 0 || z == 1;
        i++;
    }
    cr_log_info("%d samples (%d inside (0, 1), %d clipped): max relative difference %.3g", i, n_mid, n_clip, worst);
    cr_assert_gt(n_mid, 50, "too few samples inside (0, 1) to test the derivative");
    cr_assert_gt(n_clip, 50, "too few clipped samples");
    cr_assert_eq(bad, 0, "%d of %d samples differ from the reference (max %.3g)", bad, i, worst);
}

Test(gates, test_time_gate_and_l0_penalty_match_the_float64_reference)
{
    int i = 0, bad = 0;
    double worst = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(fixture(), "test")) {
        check("test-time gate", i++, hp_gate_test(num(c, "log_alpha")), num(c, "gate"), MATH_TOL, &bad, &worst);
    }
    i = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(fixture(), "l0")) {
        double dp = NAN;
        const double p = hp_gate_l0(num(c, "log_alpha"), num(c, "beta"), &dp);
        check("P(z != 0)", i, p, num(c, "p"), MATH_TOL, &bad, &worst);
        check("dP/dlog_alpha", i, dp, num(c, "dp"), MATH_TOL, &bad, &worst);
        i++;
    }
    cr_assert_eq(bad, 0, "%d values differ from the reference (max %.3g)", bad, worst);
    // the edges of the test-time gate: closed at or below -ln 11, open at or above ln 11
    cr_assert_eq(hp_gate_test(-log(11.0) - 1e-9), 0.0);
    cr_assert_eq(hp_gate_test(log(11.0) + 1e-9), 1.0);
    cr_assert(hp_gate_test(0.0) > 0.49 && hp_gate_test(0.0) < 0.51);
}

Test(gates, adam_and_the_noise_match_the_float64_reference)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(fixture(), "adam");
    double x = num(a, "init"), m = 0, v = 0;
    int t = 0, bad = 0;
    double worst = 0;
    const cJSON *g, *want = cJSON_GetObjectItemCaseSensitive(a, "log_alpha");
    cJSON_ArrayForEach(g, cJSON_GetObjectItemCaseSensitive(a, "grads")) {
        hp_gate_adam(&x, &m, &v, g->valuedouble, t + 1, num(a, "lr"));
        check("Adam", t, x, cJSON_GetArrayItem(want, t)->valuedouble, MATH_TOL, &bad, &worst);
        t++;
    }
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(fixture(), "rng")) {
        uint64_t rng[4];
        const char *seed = cJSON_GetObjectItemCaseSensitive(r, "seed")->valuestring;
        hp_gate_rng_seed(rng, strtoull(seed, NULL, 10), cJSON_GetObjectItemCaseSensitive(r, "study")->valuestring,
                         num(r, "lambda"));
        int k = 0;
        const cJSON *u;
        cJSON_ArrayForEach(u, cJSON_GetObjectItemCaseSensitive(r, "uniforms")) {
            const double got = hp_gate_uniform(rng);
            cr_assert_eq(got, u->valuedouble, "seed %s draw %d: %.17g, want %.17g", seed, k, got, u->valuedouble);
            k++;
        }
    }
    cr_assert_eq(bad, 0, "Adam differs from the reference (max %.3g)", worst);
}
