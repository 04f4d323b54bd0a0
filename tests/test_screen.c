/*
 * test_screen.c -- the screen's stopping rule (engine/screen.c) alone, on
 * effects drawn at random: the hypergeometric bound against binomial
 * coefficients computed another way (lgamma), the rule's promise (the bound
 * it states holds, over thousands of random screens with estimators from
 * perfect to useless to reversed, at least 1 - alpha of the time), its exact
 * answer when an estimate is perfect or every unit is walked, and its
 * determinism (a function of order, effects and seed).
 */
#define _DEFAULT_SOURCE /* M_PI */
#include "screen_int.h"
#include "util_int.h" /* hp_splitmix64, for the random effects */

#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ln C(n, m), by lgamma: the second code path for the bound */
static double ln_choose(int n, int m)
{
    return lgamma(n + 1.0) - lgamma(m + 1.0) - lgamma(n - m + 1.0);
}

/* P(m draws without replacement from n, K of them marked, miss every marked one) = C(n-K, m) / C(n, m) */
static double p_miss(int n, int K, int m)
{
    return n - K < m ? 0 : exp(ln_choose(n - K, m) - ln_choose(n, m));
}

Test(screen, bound_is_the_largest_K_an_empty_draw_leaves_more_than_alpha_likely)
{
    const double alphas[] = {0.05, 0.01, 0.2, 0.025};
    for (int a = 0; a < 4; a++)
        for (int n = 1; n <= 160; n += n < 20 ? 1 : 7)
            for (int m = 1; m <= n; m += m < 10 ? 1 : 5) {
                const int K = hp_screen_missed_bound(n, m, alphas[a]);
                cr_assert(K >= 0 && K <= n - m, "N %d m %d: K %d", n, m, K);
                if (K > 0)
                    cr_assert_gt(p_miss(n, K, m), alphas[a] * (1 - 1e-9), "N %d m %d alpha %g: K %d", n, m,
                                 alphas[a], K);
                if (K < n - m)
                    cr_assert_leq(p_miss(n, K + 1, m), alphas[a] * (1 + 1e-9), "N %d m %d alpha %g: K %d not largest",
                                  n, m, alphas[a], K);
            }
    /* by hand: 4 of 26 drawn: P(miss all of K) = C(26-K,4)/C(26,4); K = 12: 14*13*12*11/(26*25*24*23) = 0.0672,
     * K = 13: 13*12*11*10/(26*25*24*23) = 0.0478 */
    cr_assert_eq(hp_screen_missed_bound(26, 4, 0.05), 12);
    /* the rule of three: m of a large N, none marked: K/N about 1 - 0.05^(1/m), under 3/m */
    cr_assert_leq(hp_screen_missed_bound(100000, 100, 0.05), 3000);
    cr_assert_geq(hp_screen_missed_bound(100000, 100, 0.05), 2900);
    /* every unit drawn: nothing can be missed */
    cr_assert_eq(hp_screen_missed_bound(30, 30, 0.05), 0);
}

// --- random screens ------------------------------------------------------------------------

static double uniform(uint64_t *r)
{
    return (double)(hp_splitmix64(r) >> 11) * 0x1p-53;
}

static double normal(uint64_t *r)
{
    const double u = uniform(r) + 0x1p-54, v = uniform(r);
    return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

struct est_rank {
    int u;
    double e;
};

static int by_est(const void *a, const void *b)
{
    const struct est_rank *x = a, *y = b;
    return x->e != y->e ? (x->e > y->e ? -1 : 1) : x->u - y->u;
}

enum estimator { PERFECT, NOISY, POOR, USELESS, REVERSED, N_EST };

/* Effects heavy-tailed like heads' (a few large, many near zero), and an order by an estimate of them. */
static void draw(uint64_t *r, int n, enum estimator e, double *eff, int *order)
{
    struct est_rank *rk = malloc((size_t)n * sizeof *rk);
    for (int u = 0; u < n; u++) {
        eff[u] = exp(2 * normal(r)) * (uniform(r) < 0.2 ? 1 : 0.01);
        const double z = normal(r);
        const double est = e == PERFECT    ? eff[u]
                           : e == NOISY    ? eff[u] * exp(0.5 * z)
                           : e == POOR     ? eff[u] * exp(2.5 * z)
                           : e == USELESS  ? z
                                           : -eff[u];
        rk[u] = (struct est_rank){u, est};
    }
    qsort(rk, (size_t)n, sizeof *rk, by_est);
    for (int i = 0; i < n; i++)
        order[i] = rk[i].u;
    free(rk);
}

/* Runs the screen to its end on the effects; the units evaluated in the order handed out. */
static int run(struct hp_screen *s, const double *eff, int *seq)
{
    const int n = s->o.n;
    int *units = malloc((size_t)n * sizeof *units), total = 0, round, nb;
    double *ex = malloc((size_t)n * sizeof *ex);
    while ((nb = hp_screen_next(s, units, &round)) > 0) {
        cr_assert(total + nb <= n, "handed out more units than there are");
        for (int i = 0; i < nb; i++) {
            ex[i] = eff[units[i]];
            seq[total + i] = units[i];
        }
        total += nb;
        hp_screen_feed(s, ex);
    }
    free(units), free(ex);
    return total;
}

/* How many unevaluated units lie above the k-th largest evaluated effect. */
static int missed(const struct hp_screen *s, const double *eff)
{
    const double t = hp_screen_threshold(s);
    int K = 0;
    for (int u = 0; u < s->o.n; u++)
        K += !s->done[u] && eff[u] > t;
    return K;
}

Test(screen, the_stated_bound_holds_at_least_95_percent_of_the_time)
{
    const double alpha = 0.05;
    uint64_t r = 2026;
    int trials[N_EST] = {0}, wrong[N_EST] = {0}, inexact[N_EST] = {0}, audits = 0;
    long evaluated[N_EST] = {0}, units[N_EST] = {0};
    for (int t = 0; t < 6000; t++) {
        const enum estimator e = (enum estimator)(t % N_EST);
        const int n = 8 + (int)hp_splitmix64_below(&r, 150);
        const int k = 1 + (int)hp_splitmix64_below(&r, (uint64_t)(n / 4));
        const int batch = 1 + (int)hp_splitmix64_below(&r, (uint64_t)(k + 2));
        const int audit = 1 + (int)hp_splitmix64_below(&r, (uint64_t)(n / 5 + 1));
        double *eff = malloc((size_t)n * sizeof *eff);
        int *order = malloc((size_t)n * sizeof *order), *seq = malloc((size_t)n * sizeof *seq);
        draw(&r, n, e, eff, order);
        struct hp_screen s;
        const struct hp_screen_opts o = {.n = n, .k = k, .batch = batch, .audit = audit, .seed = hp_splitmix64(&r)};
        cr_assert(hp_screen_init(&s, &o, order));
        const int total = run(&s, eff, seq);
        struct hp_screen_verdict v;
        hp_screen_verdict(&s, alpha, &v);
        cr_assert_eq(v.evaluated, total);
        cr_assert_eq(v.unevaluated, n - total);
        cr_assert(v.unevaluated == 0 || (v.population - v.audited == v.unevaluated && v.rounds >= 1),
                  "N %d m %d left %d", v.population, v.audited, v.unevaluated);
        const int K = missed(&s, eff);
        trials[e]++;
        wrong[e] += K > v.missed_max;
        inexact[e] += K > 0;
        evaluated[e] += total;
        units[e] += n;
        audits += v.rounds;
        hp_screen_free(&s);
        free(eff), free(order), free(seq);
    }
    for (int e = 0; e < N_EST; e++) {
        /* at most alpha, with three standard errors of room for the draw of trials */
        const double se = sqrt(alpha * (1 - alpha) / trials[e]);
        cr_assert_leq((double)wrong[e] / trials[e], alpha + 3 * se, "estimator %d: the bound failed %d of %d times",
                      e, wrong[e], trials[e]);
    }
    /* a perfect estimate never misses; a reversed one must be caught by the audits nearly always */
    cr_assert_eq(inexact[PERFECT], 0);
    cr_assert_lt(evaluated[PERFECT], units[PERFECT], "a perfect estimate should save evaluations");
    cr_assert_gt(audits, trials[0], "the screens should audit");
}

Test(screen, a_perfect_estimate_stops_after_the_first_walk_and_one_audit)
{
    enum { N = 40 };
    double eff[N];
    int order[N], seq[N];
    for (int u = 0; u < N; u++)
        eff[u] = 1.0 / (1 + ((u * 7) % N)), order[(u * 7) % N] = u; /* order: largest effect first */
    struct hp_screen s;
    const struct hp_screen_opts o = {.n = N, .k = 4, .batch = 2, .audit = 5, .seed = 1};
    cr_assert(hp_screen_init(&s, &o, order));
    cr_assert_eq(run(&s, eff, seq), 4 + 2 + 5);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(seq[i], order[i], "the walk goes in estimate order");
    for (int i = 0; i < 4; i++)
        cr_assert(hp_screen_in_top(&s, order[i]));
    cr_assert_not(hp_screen_in_top(&s, order[4]));
    cr_assert_float_eq(hp_screen_threshold(&s), eff[order[3]], 0);
    struct hp_screen_verdict v;
    hp_screen_verdict(&s, 0.05, &v);
    cr_assert_eq(v.rounds, 1);
    cr_assert_eq(v.population, N - 6);
    cr_assert_eq(v.audited, 5);
    cr_assert_eq(v.missed_max, hp_screen_missed_bound(N - 6, 5, 0.025)); /* the first audit spends alpha / 2 */
    hp_screen_free(&s);
}

Test(screen, an_audit_that_finds_a_unit_above_resumes_the_walk)
{
    enum { N = 30 };
    double eff[N];
    int order[N], seq[N];
    /* the estimate is right except for the largest unit, ranked last: an audit drawing every unevaluated unit
     * finds it, and the walk then goes on to the end */
    for (int u = 0; u < N; u++)
        eff[u] = N - u, order[u] = u;
    eff[N - 1] = 100;
    struct hp_screen s;
    const struct hp_screen_opts o = {.n = N, .k = 3, .batch = 2, .audit = N, .seed = 9};
    cr_assert(hp_screen_init(&s, &o, order));
    cr_assert_eq(run(&s, eff, seq), N);
    cr_assert(hp_screen_in_top(&s, N - 1));
    cr_assert(hp_screen_in_top(&s, 0) && hp_screen_in_top(&s, 1) && !hp_screen_in_top(&s, 2));
    struct hp_screen_verdict v;
    hp_screen_verdict(&s, 0.05, &v);
    cr_assert_eq(v.unevaluated, 0);
    cr_assert_eq(v.missed_max, 0);
    hp_screen_free(&s);
}

Test(screen, k_equal_to_the_units_evaluates_every_unit_once)
{
    enum { N = 9 };
    double eff[N];
    int order[N], seq[N], seen[N] = {0};
    for (int u = 0; u < N; u++)
        eff[u] = u % 3, order[u] = N - 1 - u;
    struct hp_screen s;
    const struct hp_screen_opts o = {.n = N, .k = N, .batch = 1, .audit = 1, .seed = 3};
    cr_assert(hp_screen_init(&s, &o, order));
    cr_assert_eq(run(&s, eff, seq), N);
    for (int i = 0; i < N; i++)
        cr_assert_eq(seen[seq[i]]++, 0, "unit %d handed out twice", seq[i]);
    for (int u = 0; u < N; u++)
        cr_assert(hp_screen_in_top(&s, u));
    hp_screen_free(&s);
}

Test(screen, the_rule_is_a_function_of_order_effects_and_seed)
{
    enum { N = 120 };
    double eff[N];
    int order[N], a[N], b[N], c[N];
    uint64_t r = 77;
    draw(&r, N, USELESS, eff, order);
    struct hp_screen s;
    const struct hp_screen_opts o = {.n = N, .k = 6, .batch = 3, .audit = 10, .seed = 5};
    struct hp_screen_opts o2 = o;
    o2.seed = 6;
    cr_assert(hp_screen_init(&s, &o, order));
    const int na = run(&s, eff, a);
    hp_screen_free(&s);
    cr_assert(hp_screen_init(&s, &o, order));
    cr_assert_eq(run(&s, eff, b), na);
    hp_screen_free(&s);
    cr_assert_arr_eq(a, b, (size_t)na * sizeof *a);
    cr_assert(hp_screen_init(&s, &o2, order));
    const int nc = run(&s, eff, c);
    hp_screen_free(&s);
    cr_assert(nc != na || memcmp(a, c, (size_t)na * sizeof *a) != 0, "another seed should draw other audits");
}
