/*
 * test_screen.c -- the screen's stopping rule (engine/analysis/screen.c) alone, on
 * effects drawn at random: the hypergeometric bound against binomial
 * coefficients computed another way (lgamma), the rule's promise (the bound
 * it states holds, over thousands of random screens with estimators from
 * perfect to useless to reversed, at least 1 - alpha of the time), its exact
 * answer when an estimate is perfect or every unit is walked, and its
 * determinism (a function of order, effects and seed). Then the study in a
 * sweep, on tiny models with random heads, against the full single sweep of
 * the same model: the verified top k and the bound, the shared results (a
 * later single finds the screen's), KV groups, an unfinished screen, and the
 * plan's mistakes.
 */
#define _DEFAULT_SOURCE /* M_PI, mkdtemp */
#include "screen.h"
#include "testmodel.h"
#include "util.h" /* hp_splitmix64, for the random effects */

#include <criterion/criterion.h>
#include <sqlite3.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

// --- the study in a sweep ------------------------------------------------------------------

static char tmp[64];

static void sw_setup(void)
{
    tu_mkdtemp(tmp, sizeof tmp, "screen");
}

static void sw_teardown(void)
{
    tu_rmrf(tmp);
}

TestSuite(screen_sweep, .init = sw_setup, .fini = sw_teardown, .timeout = 600);

static sqlite3 *open_ro(const char *db)
{
    sqlite3 *h;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK, "%s", db);
    return h;
}

static long one_int(sqlite3 *h, const char *q)
{
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(h, q, -1, &st, NULL), SQLITE_OK, "%s: %s", q, sqlite3_errmsg(h));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s", q);
    const long n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return n;
}

/* Run `headprune ARGS` in tmp; its exit status (stderr into errs). */
static int hp(const char *args, char *errs, size_t n)
{
    return tu_headprune(tmp, args, tmp, NULL, 0, errs, n);
}

static void write_plan(const char *path, const char *model, const char *data, const char *studies)
{
    char text[4096];
    snprintf(text, sizeof text, "name: screen-test\nmodel: %s\ndata: %s\nmetric: loss\nablation: zero\nstudies:\n"
             "  - single\n  - single: {kv: true, name: single-kv}\n%s", model, data, studies);
    tu_spit(path, text, strlen(text));
}

struct outcome {
    int exact_sets, missed_over_bound, trials;
    long evaluated, units;
};

/*
 * Check study `name` of the newest sweep in db against the single study over the same units in it: every screen
 * evaluation is the single study's variant of its unit; the verdict's counts are its jobs; the units never evaluated
 * that lie above the k-th screened effect (what it missed) are counted against the bound.
 */
static void check_against_single(const char *db, const char *name, const char *single, struct outcome *o)
{
    sqlite3 *h = open_ro(db);
    char q[2048];
    snprintf(q, sizeof q, "SELECT count(*) FROM sweep_jobs s WHERE s.sweep_id = (SELECT max(id) FROM sweeps) AND "
             "s.study = '%s' AND NOT EXISTS (SELECT 1 FROM sweep_jobs g WHERE g.sweep_id = s.sweep_id AND g.study = "
             "'%s' AND g.layer = s.layer AND g.unit = s.unit AND g.variant_id = s.variant_id)", name, single);
    cr_assert_eq(one_int(h, q), 0, "%s: a screen evaluation is not the single study's variant of its unit", name);
    snprintf(q, sizeof q, "SELECT evaluated - (SELECT count(*) FROM sweep_jobs WHERE sweep_id = c.sweep_id AND "
             "study = c.study) FROM screens c WHERE c.sweep_id = (SELECT max(id) FROM sweeps) AND c.study = '%s'",
             name);
    cr_assert_eq(one_int(h, q), 0, "%s: the verdict's evaluations are not its jobs", name);
    /* how many units the screen never evaluated lie above its k-th largest loss (the single study has them all) */
    const char *sweep = "(SELECT max(id) FROM sweeps)";
    snprintf(q, sizeof q,
             "SELECT count(*) FROM jobs g WHERE g.sweep_id = %s AND g.study = '%s' AND g.loss > (SELECT loss FROM "
             "jobs WHERE sweep_id = %s AND study = '%s' ORDER BY loss DESC LIMIT 1 OFFSET (SELECT k - 1 FROM screens "
             "WHERE sweep_id = %s AND study = '%s')) AND NOT EXISTS (SELECT 1 FROM sweep_jobs e WHERE e.sweep_id = "
             "g.sweep_id AND e.study = '%s' AND e.layer = g.layer AND e.unit = g.unit)",
             sweep, single, sweep, name, sweep, name, name);
    const int missed = (int)one_int(h, q);
    snprintf(q, sizeof q, "SELECT missed_max FROM screens WHERE sweep_id = %s AND study = '%s'", sweep, name);
    const int bound = (int)one_int(h, q);
    snprintf(q, sizeof q, "SELECT evaluated FROM screens WHERE sweep_id = %s AND study = '%s'", sweep, name);
    const int evaluated = (int)one_int(h, q);
    snprintf(q, sizeof q, "SELECT units FROM screens WHERE sweep_id = (SELECT max(id) FROM sweeps) AND study = '%s'",
             name);
    o->units += one_int(h, q);
    o->evaluated += evaluated;
    o->trials++;
    o->exact_sets += missed == 0;
    o->missed_over_bound += missed > bound;
    sqlite3_close(h);
}

/* A copy of fixture fx (its config, weights, data) in dir with every head's output projection scaled by a random
 * factor exp(2 z): heads from negligible to dominant, a new ranking each time. */
static void random_heads(const char *fx, const char *dir, const char *o_proj, bool conv1d, int L, int H, int dh,
                         uint64_t *r)
{
    char src[1024], data[2048];
    snprintf(src, sizeof src, "%s/%s", getenv("HP_FIXTURES"), fx);
    cr_assert_eq(mkdir(dir, 0755), 0, "%s", dir);
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++) {
            char name[128];
            snprintf(name, sizeof name, o_proj, l);
            tu_scaled_head_copy(l == 0 && h == 0 ? src : dir, dir, name, conv1d, h, dh, (float)exp(2 * normal(r)));
        }
    snprintf(data, sizeof data, "%s/data.npy", src);
    size_t n;
    char *d = tu_slurp(data, &n);
    snprintf(data, sizeof data, "%s/data.npy", dir);
    tu_spit(data, d, n);
    free(d);
}

Test(screen_sweep, on_random_tiny_models_the_verified_top_k_is_the_full_sweeps_within_its_bound)
{
    static const struct {
        const char *fx, *o_proj;
        bool conv1d;
        int L, H, dh;
    } fx[] = {
        {"gpt2-tiny", "transformer.h.%d.attn.c_proj.weight", true, 3, 4, 8},
        {"llama-gqa", "model.layers.%d.self_attn.o_proj.weight", false, 3, 4, 8},
    };
    static const char *const est[] = {"importance", "atp", "ig-layer", "ig"};
    uint64_t r = 41;
    struct outcome heads = {0}, kv = {0};
    for (int t = 0; t < 24; t++) {
        const int f = t % 2;
        char dir[200], model[256], data[300], plan[300], db[300], studies[512], args[1024], errs[4096];
        snprintf(dir, sizeof dir, "%s/m%d", tmp, t);
        random_heads(fx[f].fx, dir, fx[f].o_proj, fx[f].conv1d, fx[f].L, fx[f].H, fx[f].dh, &r);
        snprintf(model, sizeof model, "%s", dir);
        snprintf(data, sizeof data, "%s/data.npy", dir);
        const int k = 1 + t % 3;
        snprintf(studies, sizeof studies,
                 "  - screen: {k: %d, estimator: %s, batch: 1, audit: 3}\n%s", k, est[t / 2 % 4],
                 f == 1 ? "  - screen: {kv: true, k: 1, name: screen-kv, batch: 1, audit: 2}\n" : "");
        snprintf(plan, sizeof plan, "%s/p%d.yaml", tmp, t);
        snprintf(db, sizeof db, "%s/p%d.db", tmp, t);
        write_plan(plan, model, data, studies);
        snprintf(args, sizeof args, "run %s --db %s --quiet --threads 1", plan, db);
        cr_assert_eq(hp(args, errs, sizeof errs), 0, "%s: %s", args, errs);
        check_against_single(db, "screen", "single", &heads);
        if (f == 1)
            check_against_single(db, "screen-kv", "single-kv", &kv);
        tu_rmrf(dir);
    }
    cr_log_info("heads: %d of %d exact, %d over the bound, %ld of %ld evaluated; "
                "KV: %d of %d exact, %d over, %ld of %ld", heads.exact_sets, heads.trials, heads.missed_over_bound,
                heads.evaluated, heads.units, kv.exact_sets,
                kv.trials, kv.missed_over_bound, kv.evaluated, kv.units);
    /* the bound is a 95% statement: it may fail now and then, not often; the set is mostly exact, and cheaper */
    cr_assert_leq(heads.missed_over_bound + kv.missed_over_bound, 3, "heads %d, KV groups %d of %d screens exceeded "
                  "their bound", heads.missed_over_bound, kv.missed_over_bound, heads.trials + kv.trials);
    cr_assert_geq(heads.exact_sets, heads.trials * 3 / 4, "only %d of %d screens found the exact top k",
                  heads.exact_sets, heads.trials);
    cr_assert_geq(kv.exact_sets, kv.trials * 3 / 4, "only %d of %d KV screens found the exact top k", kv.exact_sets,
                  kv.trials);
    cr_assert_lt(heads.evaluated, heads.units, "the screens evaluated every head: %ld of %ld", heads.evaluated,
                 heads.units);
}

/* The screen's evaluations in db's first sweep as text (unit, step, round, variant), and its verdict. */
static char *screen_text(const char *db, const char *study)
{
    char q1[512], q2[512];
    snprintf(q1, sizeof q1, "SELECT label, step, sample, variant_id FROM sweep_jobs WHERE sweep_id = 1 AND "
             "study = '%s' ORDER BY step", study);
    snprintf(q2, sizeof q2, "SELECT units, k, estimator, evaluated, audits, population, audited, missed_max, "
             "confidence FROM screens WHERE study = '%s'", study);
    const char *const qs[] = {q1, q2};
    return tu_rows(db, qs, 2);
}

Test(screen_sweep, a_later_single_finds_the_screens_evaluations_and_a_cut_screen_resumes_to_the_same_verdict)
{
    char p1[256], p2[256], db[256], args[1024], errs[4096], out[8192];
    const char *fx = getenv("HP_FIXTURES");
    snprintf(p1, sizeof p1, "%s/screen.yaml", tmp);
    snprintf(p2, sizeof p2, "%s/single.yaml", tmp);
    snprintf(db, sizeof db, "%s/s.db", tmp);
    char text[2048];
    snprintf(text, sizeof text, "name: s\nmodel: %s/stories260K\ndata: %s/stories260K/data.npy\nstudies:\n"
             "  - screen: {k: 4, estimator: ig-layer}\n", fx, fx);
    tu_spit(p1, text, strlen(text));
    snprintf(text, sizeof text, "name: t\nmodel: %s/stories260K\ndata: %s/stories260K/data.npy\nstudies:\n"
             "  - single\n", fx, fx);
    tu_spit(p2, text, strlen(text));
    snprintf(args, sizeof args, "run %s --db %s --quiet", p1, db);
    cr_assert_eq(hp(args, errs, sizeof errs), 0, "%s", errs);
    char *first = screen_text(db, "screen");
    sqlite3 *h = open_ro(db);
    const long evaluated = one_int(h, "SELECT evaluated FROM screens"), results = one_int(h, "SELECT count(*) FROM "
                                                                                             "results");
    sqlite3_close(h);
    cr_assert_lt(evaluated, 40, "the screen evaluated every head of stories260K");
    /* a single study evaluates only the heads the screen did not */
    snprintf(args, sizeof args, "run %s --db %s --quiet", p2, db);
    cr_assert_eq(hp(args, errs, sizeof errs), 0, "%s", errs);
    h = open_ro(db);
    cr_assert_eq(one_int(h, "SELECT count(*) FROM results"), results + 40 - evaluated,
                 "the single study did not reuse the screen's %ld evaluations", evaluated);
    sqlite3_close(h);
    /* cut the screen short: its verdict and its last evaluations gone, as a sweep killed mid-walk leaves it */
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(h, "DELETE FROM screens; DELETE FROM sweep_jobs WHERE sweep_id = 1 AND study = 'screen' "
                                 "AND step >= 5", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);
    snprintf(args, sizeof args, "query screen --db %s --sweep 1", db);
    cr_assert_eq(tu_headprune(tmp, args, tmp, out, sizeof out, errs, sizeof errs), 1);
    cr_assert(strstr(errs, "screen 'screen' has not finished (5 exact evaluations so far, no verdict): run its plan "
                           "again to finish it"), "%s", errs);
    snprintf(args, sizeof args, "run %s --db %s --quiet", p1, db);
    cr_assert_eq(hp(args, errs, sizeof errs), 0, "%s", errs);
    char *again = screen_text(db, "screen");
    cr_assert_str_eq(again, first, "the resumed screen walked other units");
    free(first), free(again);
    /* query screen: the top 4, one JSON row each with label and exact */
    snprintf(args, sizeof args, "query screen --db %s --sweep 1 --format json", db);
    cr_assert_eq(tu_headprune(tmp, args, tmp, out, sizeof out, errs, sizeof errs), 0, "%s", errs);
    cJSON *j = cJSON_Parse(out), *rows = cJSON_GetObjectItem(j, "rows");
    cr_assert_eq(cJSON_GetArraySize(rows), 4, "%s", out);
    double last = INFINITY;
    for (int i = 0; i < 4; i++) {
        const cJSON *r = cJSON_GetArrayItem(rows, i);
        cr_assert(cJSON_IsString(cJSON_GetObjectItem(r, "label")));
        const double e = cJSON_GetObjectItem(r, "exact")->valuedouble;
        cr_assert_leq(e, last, "rows not largest first");
        last = e;
    }
    cJSON_Delete(j);
}

/* `headprune plan` refuses studies with one line saying words. */
static void plan_refused(const char *model, const char *data, const char *metric, const char *study,
                         const char *words)
{
    char p[256], text[2048], args[512], errs[4096];
    const char *fx = getenv("HP_FIXTURES");
    snprintf(p, sizeof p, "%s/bad.yaml", tmp);
    snprintf(text, sizeof text, "name: bad\nmodel: %s/%s\ndata: %s/%s/%s\nmetric: %s\nstudies:\n  - %s\n", fx, model,
             fx, model, data, metric, study);
    tu_spit(p, text, strlen(text));
    snprintf(args, sizeof args, "plan %s", p);
    cr_assert_eq(hp(args, errs, sizeof errs), 1, "%s: %s", study, errs);
    char *nl = strchr(errs, '\n');
    cr_assert(nl && nl[1] == 0, "not one line: %s", errs);
    cr_assert(strstr(errs, p) && strstr(errs, words), "%s: lacks the plan or '%s': %s", study, words, errs);
}

Test(screen_sweep, the_plans_mistakes_are_one_line_naming_the_place)
{
    plan_refused("llama-gqa", "data.npy", "loss", "screen: {k: 13}", "bad.yaml:6:17: study 'screen': k = 13 is more "
                 "than the 12 heads it screens");
    plan_refused("llama-gqa", "data.npy", "loss", "screen: {kv: true, k: 7}", "k = 7 is more than the 6 KV groups");
    plan_refused("llama-gqa", "data.npy", "loss", "screen: {k: 0}", "bad.yaml:6:17: 'k' must be a number of units");
    plan_refused("llama-gqa", "data.npy", "loss", "screen: {k: 150%}", "'k' must be a fraction in (0, 1)");
    plan_refused("llama-gqa", "data.npy", "loss", "screen: {estimator: importance, steps: 3}", "bad.yaml:6:37: "
                 "'steps' is for the integrated-gradients estimators");
    plan_refused("llama-gqa", "data.npy", "loss", "screen: {estimator: ig, steps: 65}", "'steps' must be a whole "
                 "number of gradients along the path, 1 to 64");
    plan_refused("llama-gqa", "data.npy", "loss", "screen: {audit: -1}", "'audit' must be a number of units");
    plan_refused("bert-encoder", "data.jsonl", "cos", "screen", "bad.yaml:6: study 'screen' differentiates 1 - cos, "
                 "whose gradient is 0 at the unmasked model: rank by integrated gradients, whose gates leave 1 along "
                 "the path: estimator: ig-layer");
}
