/*
 * test_gates.c -- Hard Concrete gates trained under an L0 penalty (gates.c,
 * the sweep's gates studies).
 *
 *  - the gate's sampling and its derivative in log alpha, the test-time gate,
 *    the L0 penalty and its derivative, Adam and the noise generator against
 *    tools/gen_gate_fixtures.py's float64 reference (tests/fixtures/gates.json),
 *    written from the formulas, not from this code;
 *  - a draw's gradient in log alpha against central differences of its
 *    objective, for loss, KL and 1 - cos (the reverse pass itself is
 *    test_grad.c's, against torch);
 *  - gates studies in sweeps: stopped or killed anywhere and resumed, the same
 *    results bit for bit as an uninterrupted run (and with one thread or two,
 *    and through shards and merge); the curve points against the evaluator
 *    run here on masks made from the stored gates; the queries against the
 *    same numbers worked from the jobs; the penalty's two ends on the default
 *    model; every bad input refused in one line naming the plan.
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

#include "gates.h"
#include "sweep_priv.h" /* sw_eta, struct sw_tally */
#include "util.h"   /* hp_now */
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

/*
 * A draw's gradient in log alpha (hp_gates_objective: the reverse pass's
 * dL/dz through dz/dlog alpha, plus the penalty's) against central
 * differences of the same draw's objective, each side one more evaluation of
 * the loss at the gates the perturbed log alpha draws. float32 losses
 * differenced over 2e-3 leave about 1e-4 of rounding (measured: at most 1e-3 of the largest); FD_TOL relative to the
 * largest component.
 */
#define FD_H 1e-3
#define FD_TOL 1e-2

static void fd_case(const char *fixture, const char *data, enum hp_metric metric, double lambda)
{
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/%s", getenv("HP_FIXTURES"), fixture);
    snprintf(path, sizeof path, "%s/%s", dir, data);
    struct hp_model *m = NULL;
    struct hp_data *d = NULL;
    struct hp_evaluator *ev = NULL;
    struct hp_error err = {{0}};
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_data_load(path, 0, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_new(m, d, &ev, &err), HP_OK, "%s", err.msg);
    const struct hp_model_info *in = hp_model_get_info(m);
    const int n = in->n_layers * in->n_heads;
    double *la = malloc(n * sizeof *la), *grad = malloc(n * sizeof *grad), *g2 = malloc(n * sizeof *g2);
    for (int h = 0; h < n; h++) /* spread over the range where the gate moves */
        la[h] = -1.5 + 3.0 * h / (n - 1);
    const struct hp_gates_cfg cfg = {.metric = metric, .lambda = lambda, .beta = 2.0 / 3.0};
    uint64_t rng0[4], rng[4];
    hp_gate_rng_seed(rng0, 11, "fd", lambda);
    memcpy(rng, rng0, sizeof rng);
    double value, penalty;
    cr_assert_eq(hp_gates_objective(ev, &cfg, la, rng, grad, &value, &penalty, &err), HP_OK, "%s", err.msg);
    double top = 0, worst = 0;
    for (int h = 0; h < n; h++)
        top = fmax(top, fabs(grad[h]));
    int checked = 0;
    for (int h = 0; h < n; h++) {
        double f[2];
        for (int k = 0; k < 2; k++) {
            const double keep = la[h];
            la[h] = keep + (k ? FD_H : -FD_H);
            memcpy(rng, rng0, sizeof rng); /* the same draw */
            double v, p;
            cr_assert_eq(hp_gates_objective(ev, &cfg, la, rng, g2, &v, &p, &err), HP_OK, "%s", err.msg);
            f[k] = v + lambda * p;
            la[h] = keep;
        }
        const double fd = (f[1] - f[0]) / (2 * FD_H), diff = fabs(fd - grad[h]) / top;
        worst = fmax(worst, diff);
        cr_assert_leq(diff, FD_TOL, "%s head %d: gradient %.6g, central difference %.6g (top %.3g)", fixture, h, grad[h],
                      fd, top);
        checked += grad[h] != lambda * hp_gate_l0(la[h], cfg.beta, NULL) * (1 - hp_gate_l0(la[h], cfg.beta, NULL));
    }
    cr_log_info("%s, %s, lambda %g: %d heads, max |fd - grad| / max |grad| = %.3g", fixture, hp_metric_name(metric),
                lambda, n, worst);
    cr_assert_gt(checked, n / 4, "too few heads with a gradient through the loss to test");
    free(la), free(grad), free(g2);
    hp_evaluator_free(ev);
    hp_data_free(d);
    hp_model_close(m);
}

Test(gates, a_draws_gradient_matches_central_differences_of_its_objective)
{
    fd_case("llama-gqa", "data.npy", HP_METRIC_LOSS, 0.0);
    fd_case("llama-gqa", "data.npy", HP_METRIC_LOSS, 0.05);
    fd_case("gpt2-tiny", "data.npy", HP_METRIC_KL, 0.01);
    fd_case("bert-encoder", "data.jsonl", HP_METRIC_COS, 0.01);
}

// --- gates studies in sweeps -------------------------------------------------------------

static char tmp[64];

static void setup(void)
{
    tu_mkdtemp(tmp, sizeof tmp, "gates");
}

static void teardown(void)
{
    tu_rmrf(tmp);
}

TestSuite(gates_sweep, .init = setup, .fini = teardown, .timeout = 900);

/* A .npy of int32 ids [n, T] in tmp/name: a fixed LCG's ids below vocab (distinct from any fixture's data). */
static void write_ids(const char *name, int n, int T, int vocab, uint32_t seed)
{
    char path[256], header[128];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    int hl = snprintf(header, sizeof header, "{'descr': '<i4', 'fortran_order': False, 'shape': (%d, %d), }", n, T);
    int pad = 64 - (10 + hl + 1) % 64;
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    uint16_t len = (uint16_t)(hl + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fwrite(&len, 2, 1, f);
    fwrite(header, 1, (size_t)hl, f);
    for (int i = 0; i < pad; i++)
        fputc(' ', f);
    fputc('\n', f);
    uint32_t x = seed;
    for (int i = 0; i < n * T; i++) {
        x = x * 1664525u + 1013904223u;
        int32_t v = (int32_t)((x >> 8) % (uint32_t)vocab);
        fwrite(&v, 4, 1, f);
    }
    fclose(f);
}

static const char *write_plan(const char *name, const char *text)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    tu_spit(path, text, strlen(text));
    return path;
}

static const char *fixtures(void)
{
    const char *f = getenv("HP_FIXTURES");
    cr_assert_not_null(f, "HP_FIXTURES not set (run through meson test)");
    return f;
}

/* The llama-gqa fixture (3 layers x 4 heads), its 3 sequences held out, gates trained on 8 others. */
static const char *tiny_plan(const char *extra)
{
    write_ids("train.npy", 8, 16, 97, 12345);
    static char text[2048];
    snprintf(text, sizeof text,
             "name: gates-tiny\n"
             "model: %s/llama-gqa\n"
             "data: %s/llama-gqa/data.npy\n"
             "seed: 3\n"
             "studies:\n"
             "  - gates: {lambda: [0, 0.05, 5], steps: 60, lr: 0.2, train: train.npy}\n"
             "%s",
             fixtures(), fixtures(), extra ? extra : "");
    return write_plan("tiny.yaml", text);
}

struct stopper {
    int calls, stop_at; /* set *stop at the stop_at-th progress call (0: never) */
    volatile int stop;
};

static void on_progress(void *user, const struct hp_sweep_progress *p)
{
    (void)p;
    struct stopper *s = user;
    if (++s->calls == s->stop_at)
        s->stop = 1;
}

static enum hp_status sweep(const char *plan, const char *db, int threads, struct stopper *stop,
                            struct hp_sweep_summary *sum, struct hp_error *err)
{
    struct hp_plan *p = NULL;
    enum hp_status st = hp_plan_load(plan, &p, err);
    if (st != HP_OK)
        return st;
    struct hp_sweep_opts o = {.db_path = db, .shard_count = 1, .threads = threads, .batch = 8};
    if (stop) {
        o.progress = on_progress;
        o.user = stop;
        o.stop = &stop->stop;
    }
    st = hp_sweep_run(p, &o, sum, err);
    hp_plan_free(p);
    return st;
}

/* What a gates sweep's results are, bit for bit: the runs' states and gates, the sweep's lambdas, every variant. */
static char *dump(const char *db)
{
    const char *queries[] = {
        "SELECT key, metric, lambda, steps, step, printf('%!.17g %!.17g %!.17g', objective, value, penalty), hex(log_alpha), "
        "hex(adam_m), hex(adam_v), hex(rng), n_kept, train_digest, train_seqs FROM gate_runs ORDER BY key",
        "SELECT g.key, h.layer, h.head, h.label, printf('%!.17g %!.17g', h.log_alpha, h.gate) FROM gate_heads h "
        "JOIN gate_runs g ON g.id = h.run_id ORDER BY g.key, h.layer, h.head",
        "SELECT s.key, x.study, x.idx, x.lambda, g.key FROM sweep_gates x JOIN sweeps s ON s.id = x.sweep_id "
        "JOIN gate_runs g ON g.id = x.run_id ORDER BY s.key, x.study, x.idx",
        "SELECT key, mask_text, n_ablated, quote(mask) FROM variants ORDER BY key",
        "SELECT v.key, printf('%!.17g %!.17g %!.17g', r.loss, r.acc, r.kl) FROM results r "
        "JOIN variants v ON v.id = r.variant_id ORDER BY v.key",
        "SELECT s.key, j.ord, j.study, j.kind, j.label, j.step, j.k, v.key FROM sweep_jobs j JOIN sweeps s ON "
        "s.id = j.sweep_id JOIN variants v ON v.id = j.variant_id ORDER BY s.key, j.ord",
    };
    return tu_rows(db, queries, sizeof queries / sizeof *queries);
}

static void assert_same(const char *a, const char *b)
{
    tu_assert_same_text(a, dump(a), b, dump(b));
}

static long long one_int(const char *db, const char *q)
{
    sqlite3 *h;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(h, q, -1, &st, NULL), SQLITE_OK, "%s: %s", q, sqlite3_errmsg(h));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s", q);
    long long v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    return v;
}

static void path_in(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", tmp, name);
}

Test(gates_sweep, stopped_anywhere_and_resumed_equals_uninterrupted)
{
    const char *plan = tiny_plan(NULL);
    char ref[256], db[256];
    path_in(ref, sizeof ref, "ref.db");
    struct hp_sweep_summary sum;
    struct hp_error err = {{0}};
    struct stopper none = {0};
    cr_assert_eq(sweep(plan, ref, 1, &none, &sum, &err), HP_OK, "%s", err.msg);
    cr_assert(!sum.interrupted);
    const int calls = none.calls; /* one a training step, one a variant */
    cr_assert_geq(calls, 3 * 60, "%d progress calls", calls);
    cr_assert_eq(one_int(ref, "SELECT count(*) FROM gate_runs WHERE n_kept IS NOT NULL AND step = 60"), 3);
    cr_assert_eq(one_int(ref, "SELECT count(*) FROM gate_heads"), 3 * 12);
    cr_assert_eq(one_int(ref, "SELECT count(*) FROM sweep_gates"), 3);
    cr_assert_eq(one_int(ref, "SELECT count(*) FROM sweep_jobs WHERE kind IN ('gates', 'gates-frac')"), 6);

    /* stop at progress calls spread over the whole run (mid-step of a lambda, between lambdas, between its two
     * evaluations), each run resuming the last, until one finishes */
    path_in(db, sizeof db, "stopped.db");
    int runs = 0, stops = 0;
    for (int at = 7;; at += 13) {
        struct stopper s = {.stop_at = at};
        cr_assert_eq(sweep(plan, db, 1, &s, &sum, &err), HP_OK, "%s", err.msg);
        runs++;
        stops += sum.interrupted;
        if (!sum.interrupted)
            break;
        cr_assert_lt(runs, 100);
    }
    cr_log_info("%d runs, %d stopped", runs, stops);
    cr_assert_geq(stops, 5, "too few stops landed in the run");
    assert_same(ref, db);
    /* and a rerun finds everything */
    cr_assert_eq(sweep(plan, db, 1, NULL, &sum, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(sum.n_run, 0, "a finished gates study ran %lld things again", (long long)sum.n_run);
    assert_same(ref, db);
}

// --- the command line: kills, bad input -----------------------------------------------------

#include <signal.h>
#include <sys/wait.h>
#include <time.h>

static char g_err[8192];

/* headprune ARGS (cwd: tmp), stderr into g_err; the exit status (128 + signal when killed). */
static int hp(const char *args)
{
    return tu_headprune(tmp, args, tmp, NULL, 0, g_err, sizeof g_err);
}

/* `run` of plan text fails with exit 1 and one line on stderr naming the plan file and saying words. */
static void run_fails(const char *text, const char *words)
{
    const char *plan = write_plan("bad.yaml", text);
    char args[512];
    snprintf(args, sizeof args, "run bad.yaml --db bad.db --threads 1 --quiet");
    int rc = hp(args);
    cr_assert_eq(rc, 1, "exit %d (stderr: %s) for:\n%s", rc, g_err, text);
    cr_assert(strncmp(g_err, "headprune: ", 11) == 0, "stderr: %s", g_err);
    char *nl = strchr(g_err, '\n');
    cr_assert(nl && nl[1] == '\0', "more than one line: %s", g_err);
    (void)plan;
    cr_assert(strstr(g_err, "bad.yaml:"), "the message does not name the plan: %s", g_err);
    cr_assert(strstr(g_err, words), "the message does not say '%s': %s", words, g_err);
    /* `plan` refuses it the same way */
    rc = hp("plan bad.yaml");
    cr_assert_eq(rc, 1, "plan: exit %d (stderr: %s)", rc, g_err);
    cr_assert(strstr(g_err, words), "plan: the message does not say '%s': %s", words, g_err);
}

#define TINY_HEAD "name: bad\nmodel: %s/llama-gqa\ndata: %s/llama-gqa/data.npy\n%sstudies:\n  - gates: {%s%s}\n"

/* A gates plan on the llama-gqa fixture with top-level keys top and the study's options opts (lambda: [0.1] unless
 * they give one). */
static const char *tiny(const char *top, const char *opts)
{
    static char text[2048];
    snprintf(text, sizeof text, TINY_HEAD, fixtures(), fixtures(), top, strstr(opts, "lambda") ? "" : "lambda: [0.1], ",
             opts);
    return text;
}

/* The ETA a sweep reports (hp_sweep_progress.eta, what `run` prints) at each progress call, with the seconds
 * elapsed then and the kind of work at work */
struct eta_seen {
    int n;
    double elapsed[512], eta[512];
    bool training[512];
};

static void on_eta(void *user, const struct hp_sweep_progress *p)
{
    struct eta_seen *s = user;
    if (s->n < 512) {
        s->elapsed[s->n] = p->elapsed;
        s->eta[s->n] = p->eta;
        s->training[s->n] = strcmp(p->unit, "training steps") == 0;
        s->n++;
    }
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

Test(gates, eta_costs_each_kind_of_work_at_its_own_rate)
{
    struct sw_tally w[SW_N_WORK] = {{0}};
    cr_assert(isnan(sw_eta(w)), "an ETA before anything was measured");
    w[SW_EVAL] = (struct sw_tally){.total = 10, .done = 4, .measured = 4, .seconds = 0.4};
    w[SW_TRAIN_STEP] = (struct sw_tally){.total = 100};
    /* steps not yet met: at the mean cost of what was measured */
    cr_assert_float_eq(sw_eta(w), 6 * 0.1 + 100 * 0.1, 1e-12);
    w[SW_TRAIN_STEP] = (struct sw_tally){.total = 100, .done = 3, .measured = 2, .seconds = 2.0}; /* 1 found */
    cr_assert_float_eq(sw_eta(w), 6 * 0.1 + 97 * 1.0, 1e-12);
    w[SW_EVAL].done = 12; /* over an iterative study's estimate: nothing left, not negative */
    cr_assert_float_eq(sw_eta(w), 97 * 1.0, 1e-12);
}

Test(gates_sweep, the_eta_during_training_counts_the_steps_left_at_their_rate)
{
    /* a user saw "ETA 5s ... 1s" through 40 s of gate training: the ETA counted the steps at the evaluations'
     * rate. Compared here with the time the run then really took (its steps cost alike, so it is near) */
    const char *plan = tiny_plan(NULL);
    char db[256];
    path_in(db, sizeof db, "eta.db");
    struct hp_plan *p = NULL;
    struct hp_error err = {{0}};
    cr_assert_eq(hp_plan_load(plan, &p, &err), HP_OK, "%s", err.msg);
    static struct eta_seen s;
    s.n = 0;
    struct hp_sweep_opts o = {.db_path = db, .shard_count = 1, .threads = 1, .batch = 8, .progress = on_eta,
                              .user = &s};
    struct hp_sweep_summary sum;
    const double t0 = hp_now();
    cr_assert_eq(hp_sweep_run(p, &o, &sum, &err), HP_OK, "%s", err.msg);
    const double end = hp_now() - t0; /* the progress's elapsed counts from the sweep's own start, a little later */
    hp_plan_free(p);
    double ratio[512];
    int m = 0, steps = 0;
    for (int i = 0; i < s.n; i++) {
        if (!s.training[i])
            continue;
        if (++steps < 5) /* the first steps' rate is one step's */
            continue;
        cr_assert(isfinite(s.eta[i]), "no ETA at training step %d", steps);
        const double left = end - s.elapsed[i];
        if (left > 0.05 * end) /* the last moments' remainder is too small to time */
            ratio[m++] = s.eta[i] / left;
    }
    cr_assert_geq(steps, 3 * 60, "%d training steps reported", steps);
    cr_assert_gt(m, 50);
    qsort(ratio, (size_t)m, sizeof *ratio, cmp_double);
    const double median = ratio[m / 2];
    cr_assert(median > 0.4 && median < 2.5, "the ETA is %.3g times the time the run then took (median of %d)", median,
              m);
}

Test(gates_sweep, bad_settings_are_refused_in_one_line)
{
    write_ids("train.npy", 4, 16, 97, 1);
    run_fails(tiny("", "lambda: [-0.1], train: train.npy"), "'lambda' must be a non-negative number, not '-0.1'");
    run_fails(tiny("", "steps: 0, train: train.npy"), "'steps' must be a positive integer, not '0'");
    run_fails(tiny("", "lr: 0, train: train.npy"), "'lr' must be a positive number like 0.05, not '0'");
    run_fails(tiny("", "lr: -0.5, train: train.npy"), "'lr' must be a positive number");
    run_fails(tiny("", "beta: 0, train: train.npy"), "'beta' must be a positive number like 0.667, not '0'");
    run_fails(tiny("", "beta: -1, train: train.npy"), "'beta' must be a positive number");
    run_fails(tiny("", "steps: 5"), "needs training data apart from the held-out set");
    run_fails(tiny("", "split: 2, train: train.npy"), "'train' and 'split' both name the training data");
    run_fails(tiny("ablation: mean\n", "train: train.npy"), "needs 'ablation: zero'");
    run_fails(tiny("metric: acc\n", "train: train.npy"), "acc has none");
}

Test(gates_sweep, training_data_that_cannot_serve_is_refused_before_anything_runs)
{
    /* ids the model's vocabulary (97) lacks */
    write_ids("wide.npy", 4, 16, 200, 7);
    run_fails(tiny("", "train: wide.npy"), "study 'gates': training data:");
    cr_assert(strstr(g_err, "wide.npy"), "%s", g_err);
    /* longer than the model's 64 positions */
    write_ids("long.npy", 2, 80, 97, 7);
    run_fails(tiny("", "train: long.npy"), "exceed the model's 64 positions");
    /* a file that is not there */
    run_fails(tiny("", "train: missing.npy"), "missing.npy");
    /* the held-out set itself, or any of its rows */
    char held[1024];
    snprintf(held, sizeof held, "train: %s/llama-gqa/data.npy", fixtures());
    run_fails(tiny("", held), "is held-out sequence 0");
    /* a split that leaves nothing to evaluate on (the fixture has 3 sequences) */
    run_fails(tiny("", "split: 3"), "split: 3 of the 3 sequences");
    run_fails(tiny("", "split: 99%"), "leaves none to evaluate on");
    /* a metric the model does not have: cos on a causal LM */
    write_ids("train.npy", 4, 16, 97, 1);
    run_fails(tiny("metric: cos\n", "train: train.npy"), "cos");
    /* nothing was written for a plan refused */
    char db[256];
    path_in(db, sizeof db, "bad.db");
    cr_assert_neq(access(db, F_OK), 0, "a refused plan left %s", db);
}

/*
 * A copy of the llama-gqa fixture whose embedding of one token is NaN, a
 * token the held-out set lacks (so the sweep's baseline is finite) and every
 * training sequence starts with: the training objective is NaN at the first step.
 */
Test(gates_sweep, a_non_finite_objective_is_an_error)
{
    char cmd[1024], path[256];
    snprintf(cmd, sizeof cmd, "cp -r %s/llama-gqa %s/nan", fixtures(), tmp);
    cr_assert_eq(system(cmd), 0);
    /* a token absent from the held-out set */
    snprintf(path, sizeof path, "%s/llama-gqa/data.npy", fixtures());
    struct hp_data *d = NULL;
    struct hp_error err = {{0}};
    cr_assert_eq(hp_data_load(path, 0, &d, &err), HP_OK, "%s", err.msg);
    bool seen[97] = {false};
    for (int i = 0; i < d->n_seqs * d->seq_len; i++)
        seen[d->ids[i]] = true;
    hp_data_free(d);
    int tok = 96;
    while (tok > 0 && seen[tok])
        tok--;
    cr_assert(!seen[tok], "the held-out set uses every token");
    /* its embedding row poisoned, found through the safetensors header */
    snprintf(path, sizeof path, "%s/nan/model.safetensors", tmp);
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f);
    uint64_t hl = 0;
    cr_assert_eq(fread(&hl, 8, 1, f), 1);
    char *header = calloc(1, hl + 1);
    cr_assert_eq(fread(header, 1, hl, f), hl);
    cJSON *h = cJSON_Parse(header);
    const cJSON *emb = cJSON_GetObjectItemCaseSensitive(h, "model.embed_tokens.weight");
    cr_assert_not_null(emb, "no embedding in %s", path);
    const long off = (long)cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(emb, "data_offsets"), 0)->valuedouble;
    const int d_model = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(emb, "shape"), 1)->valueint;
    fseek(f, (long)(8 + hl) + off + (long)tok * d_model * 4, SEEK_SET);
    const float nan = NAN;
    for (int i = 0; i < d_model; i++)
        fwrite(&nan, 4, 1, f);
    fclose(f);
    cJSON_Delete(h);
    free(header);
    /* training rows that all start with it */
    snprintf(path, sizeof path, "%s/train.npy", tmp);
    write_ids("train.npy", 4, 16, 97, 1);
    f = fopen(path, "r+b");
    for (int r = 0; r < 4; r++) {
        fseek(f, 128 + (long)r * 16 * 4, SEEK_SET);
        int32_t v = tok;
        fwrite(&v, 4, 1, f);
    }
    fclose(f);
    char text[1024];
    snprintf(text, sizeof text,
             "name: nan\nmodel: nan\ndata: %s/llama-gqa/data.npy\nstudies:\n"
             "  - gates: {lambda: [0.1], steps: 3, train: train.npy}\n",
             fixtures());
    write_plan("nan.yaml", text);
    int rc = hp("run nan.yaml --db nan.db --threads 1 --quiet");
    cr_assert_eq(rc, 1, "exit %d: %s", rc, g_err);
    cr_assert(strstr(g_err, "nan.yaml:5: study 'gates', lambda 0.1") && strstr(g_err, "not finite"), "%s", g_err);
    char *nl = strchr(g_err, '\n');
    cr_assert(nl && nl[1] == '\0', "more than one line: %s", g_err);
    /* the baseline was recorded; no gate run finished */
    char db[256];
    path_in(db, sizeof db, "nan.db");
    cr_assert_eq(one_int(db, "SELECT count(*) FROM gate_runs WHERE n_kept IS NOT NULL"), 0);
}

Test(gates_sweep, sigkill_at_random_moments_then_resume_equals_uninterrupted)
{
    const char *plan = tiny_plan(NULL);
    (void)plan;
    char ref[256], db[256];
    path_in(ref, sizeof ref, "ref.db");
    path_in(db, sizeof db, "killed.db");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert_eq(hp("run tiny.yaml --db ref.db --threads 1 --quiet"), 0, "%s", g_err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    srand(4242);
    long span_us = (long)(secs * 0.6e6) + 1;
    int runs = 0, killed = 0, rc = -1;
    char cmd[1024];
    int mid = 0; /* kills after which a run was saved part-way */
    while (rc != 0 && runs < 400) {
        pid_t pid = fork();
        cr_assert_neq(pid, -1);
        if (pid == 0) {
            if (chdir(tmp) != 0)
                _exit(127);
            freopen("/dev/null", "w", stdout);
            freopen("/dev/null", "w", stderr);
            execl(getenv("HP_HEADPRUNE"), "headprune", "run", "tiny.yaml", "--db", "killed.db", "--threads", "1",
                  "--quiet", (char *)NULL);
            _exit(127);
        }
        long us = rand() % span_us;
        struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int ws;
        cr_assert_eq(waitpid(pid, &ws, 0), pid);
        rc = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
        cr_assert(rc == 0 || rc == 128 + SIGKILL, "run %d exited %d", runs, rc);
        killed += rc != 0;
        runs++;
        if (rc != 0 && access(db, F_OK) == 0) {
            sqlite3 *h;
            sqlite3_stmt *q;
            if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
                sqlite3_prepare_v2(h, "SELECT count(*) FROM gate_runs WHERE n_kept IS NULL AND step > 0", -1, &q,
                                   NULL) == SQLITE_OK) {
                mid += sqlite3_step(q) == SQLITE_ROW && sqlite3_column_int(q, 0) > 0;
                sqlite3_finalize(q);
            }
            sqlite3_close(h);
        }
        if (rc == 0 && killed < 10) { /* finished before enough kills landed: start over, killing sooner */
            snprintf(cmd, sizeof cmd, "rm -f '%s' '%s-wal' '%s-shm'", db, db, db);
            cr_assert_eq(system(cmd), 0);
            span_us = span_us / 2 + 1;
            killed = mid = 0;
            rc = -1;
        }
    }
    cr_log_info("%d runs, %d killed, %d after a part-way save (kills within %ld us of a %.2f s run)", runs, killed, mid,
                span_us, secs);
    cr_assert_geq(killed, 10, "too few kills landed");
    /* on a loaded machine every run may be killed before it ends: the last one then resumes uninterrupted */
    if (rc != 0) {
        snprintf(cmd, sizeof cmd, "run '%s' --db '%s' --threads 1 --quiet", "tiny.yaml", "killed.db");
        cr_assert_eq(hp(cmd), 0, "%s", g_err);
    }
    /* some kill left a run saved mid-way (every 25 steps), which a later run resumed */
    assert_same(ref, db);
}

// --- what a gates study records, against independent computations ----------------------------

static double one_real(const char *db, const char *q)
{
    sqlite3 *h;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(h, q, -1, &st, NULL), SQLITE_OK, "%s: %s", q, sqlite3_errmsg(h));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s", q);
    double v = sqlite3_column_type(st, 0) == SQLITE_NULL ? NAN : sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    return v;
}

static struct hp_table *query(const char *db, struct hp_query_opts o)
{
    struct hp_table *t = NULL;
    struct hp_error err = {{0}};
    enum hp_status st = hp_query(db, &o, &t, &err);
    cr_assert_eq(st, HP_OK, "%s", err.msg);
    return t;
}

static int col(const struct hp_table *t, const char *name)
{
    for (int c = 0; c < t->n_cols; c++)
        if (!strcmp(t->cols[c], name))
            return c;
    cr_assert_fail("no column '%s'", name);
    return -1;
}

static double val(const struct hp_table *t, int r, const char *name)
{
    return t->values[(size_t)r * t->n_cols + col(t, name)];
}

static const char *txt(const struct hp_table *t, int r, const char *name)
{
    const char *s = t->cells[(size_t)r * t->n_cols + col(t, name)];
    return s ? s : "";
}

/* The tiny plan with the other two curves, run once: its database in db. */
static void tiny_with_curves(char *db, size_t n)
{
    const char *plan = tiny_plan("  - iterative: {prune: 25%}\n  - random: {k: [3, 6, 9, 12], samples: 2}\n");
    snprintf(db, n, "%s/curves.db", tmp);
    struct hp_sweep_summary sum;
    struct hp_error err = {{0}};
    cr_assert_eq(sweep(plan, db, 1, NULL, &sum, &err), HP_OK, "%s", err.msg);
}

/* The value of curve (kept[i], v[i]) (ascending kept) at k, linearly between neighbours; NaN outside. */
static double interp(const double *kept, const double *v, int n, double k)
{
    for (int i = 0; i < n; i++) {
        if (kept[i] == k)
            return v[i];
        if (i + 1 < n && kept[i] < k && k < kept[i + 1])
            return v[i] + (v[i + 1] - v[i]) * (k - kept[i]) / (kept[i + 1] - kept[i]);
    }
    return NAN;
}

Test(gates_sweep, the_curve_points_are_exact_evaluations_of_the_test_time_gates)
{
    char db[256];
    tiny_with_curves(db, sizeof db);
    /* the penalty's extremes: lambda 0 keeps more heads open than lambda 5, which closes every one */
    const long long kept0 = one_int(db, "SELECT n_kept FROM gate_runs WHERE lambda = 0");
    const long long kept5 = one_int(db, "SELECT n_kept FROM gate_runs WHERE lambda = 5");
    cr_log_info("heads kept: %lld at lambda 0, %lld at lambda 5", kept0, kept5);
    cr_assert_eq(kept5, 0, "lambda 5 keeps %lld of 12 heads", kept5);
    cr_assert_gt(kept0, kept5);

    /* each lambda's two points against the evaluator run here on masks made from gate_heads: the pruned set
     * (heads at gate 0) on the plain path, and the fractional test-time gates */
    struct hp_model *m = NULL;
    struct hp_data *d = NULL;
    struct hp_evaluator *ev = NULL;
    struct hp_error err = {{0}};
    char dir[1024], data[1100];
    snprintf(dir, sizeof dir, "%s/llama-gqa", fixtures());
    snprintf(data, sizeof data, "%s/data.npy", dir);
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_data_load(data, 0, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_new(m, d, &ev, &err), HP_OK, "%s", err.msg);
    hp_evaluator_set_plain(ev, true);
    sqlite3 *h;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    for (int idx = 0; idx < 3; idx++) {
        struct hp_mask *pruned = hp_mask_new(3, 4), *frac = hp_mask_new(3, 4);
        sqlite3_stmt *st;
        cr_assert_eq(sqlite3_prepare_v2(h, "SELECT h.layer, h.head, h.gate, h.log_alpha FROM gate_heads h JOIN "
                                           "sweep_gates x ON x.run_id = h.run_id WHERE x.idx = ?",
                                        -1, &st, NULL),
                     SQLITE_OK);
        sqlite3_bind_int(st, 1, idx);
        int n = 0;
        bool fractional = false;
        while (sqlite3_step(st) == SQLITE_ROW) {
            const int i = sqlite3_column_int(st, 0) * 4 + sqlite3_column_int(st, 1);
            const double g = sqlite3_column_double(st, 2);
            cr_assert_eq(g, hp_gate_test(sqlite3_column_double(st, 3)), "the stored gate is its log alpha's");
            frac->gate[i] = (float)g;
            pruned->gate[i] = g > 0 ? 1.0f : 0.0f;
            fractional |= g > 0 && g < 1;
            n++;
        }
        sqlite3_finalize(st);
        cr_assert_eq(n, 12);
        struct hp_metrics *mp = NULL, *mf = NULL;
        cr_assert_eq(hp_evaluator_run(ev, pruned, HP_ABLATE_ZERO, &mp, &err), HP_OK, "%s", err.msg);
        cr_assert_eq(hp_evaluator_run(ev, frac, HP_ABLATE_ZERO, &mf, &err), HP_OK, "%s", err.msg);
        char q[512];
        snprintf(q, sizeof q, "SELECT loss FROM jobs WHERE kind = 'gates' AND step = %d", idx);
        const double lp = one_real(db, q);
        snprintf(q, sizeof q, "SELECT loss FROM jobs WHERE kind = 'gates-frac' AND step = %d", idx);
        const double lf = one_real(db, q);
        cr_assert(fabs(lp - mp->loss) <= 1e-6 * fabs(mp->loss), "lambda #%d pruned set: %.9g, here %.9g", idx, lp,
                  mp->loss);
        cr_assert(fabs(lf - mf->loss) <= 1e-6 * fabs(mf->loss), "lambda #%d test-time gates: %.9g, here %.9g", idx, lf,
                  mf->loss);
        /* the pruned set has the key of every variant of its mask; fractional gates are marked in theirs */
        snprintf(q, sizeof q, "SELECT v.mask_text LIKE 'gates:%%' FROM jobs j JOIN variants v ON v.id = j.variant_id "
                 "WHERE j.kind = 'gates-frac' AND j.step = %d", idx);
        cr_assert_eq(one_int(db, q), fractional, "lambda #%d: fractional %d", idx, fractional);
        hp_metrics_free(mp), hp_metrics_free(mf);
        hp_mask_free(pruned), hp_mask_free(frac);
    }
    sqlite3_close(h);
    hp_evaluator_free(ev);
    hp_data_free(d);
    hp_model_close(m);

    /* an explicit study naming lambda 0's pruned set (or, when none, any 0/1 mask) finds its variant done */
    char *set = NULL;
    {
        sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL);
        sqlite3_stmt *st;
        sqlite3_prepare_v2(h, "SELECT mask_text FROM jobs WHERE kind = 'gates' AND step = 2", -1, &st, NULL);
        cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
        set = strdup((const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
        sqlite3_close(h);
    }
    char text[2048];
    snprintf(text, sizeof text, "name: again\nmodel: %s/llama-gqa\ndata: %s/llama-gqa/data.npy\nstudies:\n"
             "  - explicit: {sets: {closed: \"%s\"}}\n", fixtures(), fixtures(), set);
    struct hp_sweep_summary sum;
    cr_assert_eq(sweep(write_plan("again.yaml", text), db, 1, NULL, &sum, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(sum.n_run, 0, "the explicit set '%s' was evaluated again", set);
    cr_assert_eq(one_int(db, "SELECT count(DISTINCT j.variant_id) FROM sweep_jobs j WHERE j.kind IN ('gates', 'explicit') "
                             "AND j.label IN ('closed', 'lambda 5')"), 1);
    free(set);
}

Test(gates_sweep, queries_read_the_curves_at_the_gates_heads_kept)
{
    char db[256];
    tiny_with_curves(db, sizeof db);
    /* curve: one row a lambda beside the iterative and random rows, with heads kept */
    struct hp_table *t = query(db, (struct hp_query_opts){.kind = HP_QUERY_CURVE});
    int n_gates = 0;
    for (int r = 0; r < t->n_rows; r++) {
        cr_assert_eq(val(t, r, "kept"), 12 - val(t, r, "heads"), "row %d", r);
        if (strcmp(txt(t, r, "study"), "gates") != 0)
            continue;
        char q[256];
        snprintf(q, sizeof q, "SELECT loss FROM jobs WHERE kind = 'gates-frac' AND step = %d", n_gates);
        cr_assert(fabs(val(t, r, "gated") - one_real(db, q)) < 1e-6);
        snprintf(q, sizeof q, "SELECT lambda FROM sweep_gates WHERE idx = %d", n_gates);
        cr_assert_eq(val(t, r, "lambda"), one_real(db, q));
        n_gates++;
    }
    cr_assert_eq(n_gates, 3);
    hp_table_free(t);

    /* gates: the other curves at each lambda's heads kept, worked here from the jobs */
    double ik[64], iv[64], rk[64], rv[64];
    int ni = 0, nr = 0;
    sqlite3 *h;
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_prepare_v2(h, "SELECT 12 - n_ablated, loss FROM jobs WHERE kind = 'iterative' ORDER BY n_ablated DESC", -1,
                       &st, NULL);
    while (sqlite3_step(st) == SQLITE_ROW)
        ik[ni] = sqlite3_column_double(st, 0), iv[ni++] = sqlite3_column_double(st, 1);
    sqlite3_finalize(st);
    sqlite3_prepare_v2(h, "SELECT 12 - avg(n_ablated), avg(loss) FROM jobs WHERE kind = 'random' GROUP BY k "
                          "ORDER BY k DESC", -1, &st, NULL);
    while (sqlite3_step(st) == SQLITE_ROW)
        rk[nr] = sqlite3_column_double(st, 0), rv[nr++] = sqlite3_column_double(st, 1);
    sqlite3_finalize(st);
    sqlite3_close(h);
    rk[nr] = 12, rv[nr++] = one_real(db, "SELECT loss FROM jobs WHERE kind = 'baseline'");
    cr_assert_geq(ni, 4);
    t = query(db, (struct hp_query_opts){.kind = HP_QUERY_GATES});
    cr_assert_eq(t->n_rows, 3);
    for (int r = 0; r < 3; r++) {
        const double k = val(t, r, "kept"), g = val(t, r, "loss");
        const double wi = interp(ik, iv, ni, k), wr = interp(rk, rv, nr, k);
        cr_assert(isnan(wi) ? isnan(val(t, r, "iterative")) : fabs(val(t, r, "iterative") - wi) < 1e-6,
                  "row %d: iterative %g, want %g", r, val(t, r, "iterative"), wi);
        cr_assert(isnan(wr) ? isnan(val(t, r, "random")) : fabs(val(t, r, "random") - wr) < 1e-6,
                  "row %d: random %g, want %g", r, val(t, r, "random"), wr);
        const char *lower = g <= wi && g <= wr ? "gates" : wi <= wr ? "iterative" : "random";
        if (!isnan(wi) && !isnan(wr) && g != wi && g != wr && wi != wr)
            cr_assert_str_eq(txt(t, r, "lower"), lower, "row %d (kept %g: %g %g %g)", r, k, g, wi, wr);
    }
    hp_table_free(t);

    /* heads --gates: closes_at from gate_heads, worked here; the last to close first */
    t = query(db, (struct hp_query_opts){.kind = HP_QUERY_HEADS, .gates = true});
    cr_assert_eq(t->n_rows, 12);
    double prev = INFINITY;
    for (int r = 0; r < 12; r++) {
        char q[512];
        snprintf(q, sizeof q,
                 "SELECT min(x.lambda) FROM sweep_gates x WHERE NOT EXISTS (SELECT 1 FROM sweep_gates y JOIN "
                 "gate_heads g ON g.run_id = y.run_id WHERE y.lambda >= x.lambda AND g.layer = %d AND g.head = %d AND "
                 "g.gate > 0)",
                 (int)val(t, r, "layer"), (int)val(t, r, "head"));
        const double want = one_real(db, q), got = val(t, r, "closes_at");
        cr_assert(isnan(want) ? isnan(got) : got == want, "head %s closes at %g, want %g", txt(t, r, "label"), got,
                  want);
        const double c = isnan(got) ? INFINITY : got;
        cr_assert_leq(c, prev, "not sorted by closes_at, last to close first");
        prev = c;
    }
    cr_assert_eq(val(t, 0, "gate@5"), val(t, 0, "gate@5"), "a column for each lambda");
    hp_table_free(t);
}

Test(gates_sweep, deterministic_for_a_seed_and_the_same_with_two_threads)
{
    const char *plan = tiny_plan(NULL);
    char a[256], b[256], c[256];
    path_in(a, sizeof a, "a.db");
    path_in(b, sizeof b, "b.db");
    path_in(c, sizeof c, "c.db");
    struct hp_sweep_summary sum;
    struct hp_error err = {{0}};
    cr_assert_eq(sweep(plan, a, 1, NULL, &sum, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(sweep(plan, b, 1, NULL, &sum, &err), HP_OK, "%s", err.msg);
    assert_same(a, b);
    cr_assert_eq(sweep(plan, c, 2, NULL, &sum, &err), HP_OK, "%s", err.msg);
    assert_same(a, c);
    /* another seed draws other noise: other log alphas */
    char text[4096];
    char *orig = tu_slurp(plan, NULL);
    snprintf(text, sizeof text, "%s", orig);
    free(orig);
    char *at = strstr(text, "seed: 3");
    cr_assert_not_null(at);
    at[6] = '4';
    path_in(c, sizeof c, "d.db");
    cr_assert_eq(sweep(write_plan("seed4.yaml", text), c, 1, NULL, &sum, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(one_int(c, "SELECT count(*) FROM gate_runs"), 3);
    char q[512];
    sqlite3 *h;
    cr_assert_eq(sqlite3_open_v2(c, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    snprintf(q, sizeof q, "ATTACH '%s' AS o", a);
    cr_assert_eq(sqlite3_exec(h, q, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(h, "SELECT count(*) FROM gate_runs g JOIN o.gate_runs x ON x.lambda = g.lambda "
                                       "WHERE x.log_alpha = g.log_alpha OR x.key = g.key", -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_eq(sqlite3_column_int(st, 0), 0, "seed 4 trained the same gates as seed 3");
    sqlite3_finalize(st);
    sqlite3_close(h);
}

Test(gates_sweep, shards_merged_carry_the_gates)
{
    const char *plan = tiny_plan("  - single\n");
    (void)plan;
    char ref[256], s1[256], s2[256], m[256];
    path_in(ref, sizeof ref, "ref.db");
    path_in(s1, sizeof s1, "s1.db");
    path_in(s2, sizeof s2, "s2.db");
    path_in(m, sizeof m, "m.db");
    cr_assert_eq(hp("run tiny.yaml --db ref.db --threads 1 --quiet"), 0, "%s", g_err);
    cr_assert_eq(hp("run tiny.yaml --db s1.db --shard 1/2 --threads 1 --quiet"), 0, "%s", g_err);
    cr_assert_eq(hp("run tiny.yaml --db s2.db --shard 2/2 --threads 1 --quiet"), 0, "%s", g_err);
    cr_assert_eq(one_int(s2, "SELECT count(*) FROM gate_runs"), 0, "gates studies run in shard 1 only");
    cr_assert_eq(hp("merge m.db s1.db s2.db"), 0, "%s", g_err);
    cr_assert_eq(hp("merge m.db s1.db s2.db"), 0, "%s", g_err); /* re-runnable, no duplicates */
    assert_same(ref, m);
}

/*
 * The penalty's two ends on the default model (models/default, trained on
 * plans/data/default-train.npy, evaluated on its held-out set): without a
 * penalty the gates stay open and the model at its test-time gates is no
 * worse than the baseline beyond noise; under a large one every gate closes.
 */
Test(gates_sweep, lambda_0_keeps_the_default_model_whole_and_a_large_lambda_closes_every_gate)
{
    const char *tests = getenv("HP_TESTS");
    char text[2048];
    snprintf(text, sizeof text,
             "name: ends\nmodel: %s/../models/default\ndata: %s/../models/default/heldout.npy\nstudies:\n"
             "  - gates: {lambda: [0, 100], steps: 40, lr: 0.2, train: %s/../plans/data/default-train.npy}\n",
             tests, tests, tests);
    char db[256];
    path_in(db, sizeof db, "ends.db");
    struct hp_sweep_summary sum;
    struct hp_error err = {{0}};
    cr_assert_eq(sweep(write_plan("ends.yaml", text), db, 1, NULL, &sum, &err), HP_OK, "%s", err.msg);
    const double base = one_real(db, "SELECT loss FROM jobs WHERE kind = 'baseline'");
    const long long kept0 = one_int(db, "SELECT n_kept FROM gate_runs WHERE lambda = 0");
    const double pruned0 = one_real(db, "SELECT loss FROM jobs WHERE kind = 'gates' AND step = 0");
    const double gated0 = one_real(db, "SELECT loss FROM jobs WHERE kind = 'gates-frac' AND step = 0");
    const long long kept100 = one_int(db, "SELECT n_kept FROM gate_runs WHERE lambda = 100");
    const double pruned100 = one_real(db, "SELECT loss FROM jobs WHERE kind = 'gates' AND step = 1");
    cr_log_info("baseline %.6f; lambda 0: %lld heads kept, pruned set %.6f, test-time gates %.6f; lambda 100: %lld "
                "kept, %.6f", base, kept0, pruned0, gated0, kept100, pruned100);
    cr_assert_eq(kept0, 32, "lambda 0 closed %lld of the 32 gates", 32 - kept0);
    cr_assert_eq(pruned0, base, "nothing pruned is the baseline itself");
    cr_assert_leq(gated0, base + 0.01, "the model at lambda 0's gates: %.6f against the baseline's %.6f", gated0, base);
    cr_assert_eq(kept100, 0, "lambda 100 kept %lld heads", kept100);
    cr_assert_eq(one_int(db, "SELECT count(*) FROM jobs WHERE kind = 'gates' AND step = 1 AND mask_text = "
                             "'0.*,1.*,2.*,3.*'"), 1, "every head pruned");
    cr_assert_gt(pruned100, base + 1, "no attention at all costs more than a nat");
}

/* The plan's metric is what the gates train on: KL from the unmasked model, and 1 - cos for an encoder without a head. */
Test(gates_sweep, gates_train_on_kl_and_on_one_minus_cos)
{
    const char *cases[][3] = {{"llama-gqa", "data.npy", "kl"}, {"bert-encoder", "data.jsonl", "cos"}};
    for (int i = 0; i < 2; i++) {
        char text[2048], db[256];
        snprintf(text, sizeof text,
                 "name: m%d\nmodel: %s/%s\ndata: %s/%s/%s\nmetric: %s\nstudies:\n"
                 "  - gates: {lambda: [0.01, 10], steps: 30, lr: 0.3, split: 1}\n",
                 i, fixtures(), cases[i][0], fixtures(), cases[i][0], cases[i][1], cases[i][2]);
        snprintf(db, sizeof db, "%s/m%d.db", tmp, i);
        struct hp_sweep_summary sum;
        struct hp_error err = {{0}};
        cr_assert_eq(sweep(write_plan("m.yaml", text), db, 1, NULL, &sum, &err), HP_OK, "%s: %s", cases[i][2], err.msg);
        char q[256];
        snprintf(q, sizeof q, "SELECT count(*) FROM gate_runs WHERE metric = '%s' AND n_kept IS NOT NULL", cases[i][2]);
        cr_assert_eq(one_int(db, q), 2, "%s", cases[i][2]);
        /* the objective is the metric's value (KL >= 0; 1 - cos in [0, 2]) plus lambda times the penalty */
        snprintf(q, sizeof q, "SELECT count(*) FROM gate_runs WHERE abs(objective - (value + lambda * penalty)) > "
                 "1e-12 * abs(objective) OR value < -1e-6 OR (metric = 'cos' AND value > 2)");
        cr_assert_eq(one_int(db, q), 0, "%s", cases[i][2]);
        cr_assert_eq(one_int(db, "SELECT n_kept FROM gate_runs WHERE lambda = 10"), 0, "%s", cases[i][2]);
        /* held out: the data's first sequences (the last one trained) */
        cr_assert_eq(one_int(db, "SELECT n_seqs FROM datasets"), cases[i][2][0] == 'k' ? 2 : 3);
        cr_assert_eq(one_int(db, "SELECT train_seqs FROM gate_runs LIMIT 1"), 1);
    }
}

/*
 * prune --db --step N of a gates study: the checkpoint without the heads its
 * N-th lambda pruned (the same set the sweep evaluated), which evaluates as
 * the original with that mask; a lambda past the last is refused.
 */
Test(gates_sweep, prune_exports_a_lambdas_pruned_set)
{
    tiny_plan(NULL);
    cr_assert_eq(hp("run tiny.yaml --db g.db --threads 1 --quiet"), 0, "%s", g_err);
    char mask[256] = "", db[256], exp3[256];
    path_in(db, sizeof db, "g.db");
    path_in(exp3, sizeof exp3, "exp3");
    {
        sqlite3 *h;
        cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        sqlite3_stmt *st;
        cr_assert_eq(sqlite3_prepare_v2(h, "SELECT v.mask_text FROM sweep_jobs j JOIN variants v ON v.id = j.variant_id "
                                           "WHERE j.kind = 'gates' AND j.step = 1", -1, &st, NULL), SQLITE_OK);
        cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
        snprintf(mask, sizeof mask, "%s", (const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
        sqlite3_close(h);
    }
    cr_assert(mask[0], "lambda 0.05 pruned nothing: no test");
    cr_assert_eq(hp("prune --db g.db --step 1 --out exp --quiet"), 0, "%s", g_err);
    char a[1024], b[1024];
    snprintf(a, sizeof a, "eval --model exp --data %s/llama-gqa/data.npy --json", fixtures());
    snprintf(b, sizeof b, "eval --model %s/llama-gqa --data %s/llama-gqa/data.npy --mask %s --json", fixtures(),
             fixtures(), mask);
    char out_a[1 << 14], out_b[1 << 14];
    cr_assert_eq(tu_headprune(tmp, a, tmp, out_a, sizeof out_a, g_err, sizeof g_err), 0, "%s", g_err);
    cr_assert_eq(tu_headprune(tmp, b, tmp, out_b, sizeof out_b, g_err, sizeof g_err), 0, "%s", g_err);
    cJSON *ja = cJSON_Parse(out_a), *jb = cJSON_Parse(out_b);
    cr_assert(ja && jb);
    const double la = cJSON_GetObjectItem(ja, "loss")->valuedouble, lb = cJSON_GetObjectItem(jb, "loss")->valuedouble;
    cr_expect(fabs(la - lb) <= 1e-6 * fabs(lb), "the export's loss %.9g, the original with %s masked %.9g", la, mask, lb);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    cr_assert_eq(hp("prune --db g.db --step 3 --out exp3 --quiet"), 1);
    cr_assert(strstr(g_err, "has no step 3 (the study has lambdas 0-2)"), "%s", g_err);
    cr_assert(access(exp3, F_OK) != 0, "a refused export left a folder");
}

// --- a pruned checkpoint: one count of heads kept for every curve, query and figure -----------------

/* Heads of the model that m ablates, counted here from the model's own list of the heads it lacks. */
static int present_ablated(const struct hp_model_info *in, const struct hp_mask *m)
{
    int n = 0;
    for (int i = 0; i < in->n_layers * in->n_heads; i++)
        n += m->gate[i] == 0.0f && !(in->pruned && in->pruned[i]);
    return n;
}

/* A curve point worked here: heads kept (of those the checkpoint has) and the evaluator's loss. */
struct point {
    double kept, loss;
};

/* The evaluator's loss at mask spec text (from the database), and the heads the checkpoint has that it keeps. */
static struct point point_of(struct hp_evaluator *ev, const struct hp_model_info *in, int n_present, const char *text)
{
    struct hp_mask *m = NULL;
    struct hp_metrics *mt = NULL;
    struct hp_error err = {{0}};
    cr_assert_eq(hp_mask_parse(text, false, in, &m, &err), HP_OK, "'%s': %s", text, err.msg);
    cr_assert_eq(hp_evaluator_run(ev, m, HP_ABLATE_ZERO, &mt, &err), HP_OK, "%s", err.msg);
    struct point p = {n_present - present_ablated(in, m), mt->loss};
    hp_metrics_free(mt);
    hp_mask_free(m);
    return p;
}

static int by_kept_asc(const void *a, const void *b)
{
    const struct point *x = a, *y = b;
    return (x->kept > y->kept) - (x->kept < y->kept);
}

/* The x coordinates and data-pct of the points of series study in the curves figure (svg), up to max. */
static int series_points(const char *svg, const char *study, double *x, double *pct, int max)
{
    char start[160];
    snprintf(start, sizeof start, "<g class=\"series\" data-study=\"%s\"", study);
    const char *g = strstr(svg, start);
    cr_assert(g, "no series %s in the curves figure", study);
    const char *end = strstr(g, "</g>");
    /* x from the series' polyline ("x,y " a point, in the order the markers follow), not from a marker's
     * path, whose first coordinate depends on its shape */
    const char *line = strstr(g, "points=\"");
    cr_assert(line && line < end, "series %s has no polyline", study);
    line += 8;
    int n = 0;
    for (const char *p = strstr(g, "<path d=\"M"); p && p < end && n < max; p = strstr(p + 1, "<path d=\"M")) {
        const char *tag_end = strchr(p, '>'), *c = strstr(p, "class=\"point\""), *a = strstr(p, "data-pct=\"");
        if (!c || c > tag_end || !a || a > tag_end)
            continue;
        char *after;
        x[n] = strtod(line, &after);
        cr_assert(after != line && *after == ',', "series %s: the polyline has fewer points than markers", study);
        line = strchr(after, ' ') + 1;
        pct[n++] = strtod(a + 10, NULL);
    }
    return n;
}

Test(gates_sweep, on_a_pruned_checkpoint_every_curve_counts_the_heads_the_model_has)
{
    /* gpt2-pruned: 3 layers x 4 heads, 0.1, 2.0 and 2.3 pruned by transformers: 9 heads */
    write_ids("train.npy", 8, 16, 97, 4242);
    char text[2048], db[256];
    snprintf(text, sizeof text,
             "name: pruned-curves\nmodel: %s/gpt2-pruned\ndata: %s/gpt2-pruned/data.npy\nseed: 3\nstudies:\n"
             "  - iterative: {prune: 25%%}\n"
             "  - random: {k: [2, 4, 6], samples: 2}\n"
             "  - iterative: {name: grad, prune: 25%%, rank: gradient}\n"
             "  - gates: {lambda: [0, 0.02, 5], steps: 60, lr: 0.2, train: train.npy}\n"
             "  - gates: {name: untrained, lambda: 0, steps: 1, train: train.npy}\n",
             fixtures(), fixtures());
    snprintf(db, sizeof db, "%s/pruned.db", tmp);
    struct hp_sweep_summary sum;
    struct hp_error err = {{0}};
    cr_assert_eq(sweep(write_plan("pruned.yaml", text), db, 1, NULL, &sum, &err), HP_OK, "%s", err.msg);

    struct hp_model *m = NULL;
    struct hp_data *d = NULL;
    struct hp_evaluator *ev = NULL;
    char dir[1024], data[1100];
    snprintf(dir, sizeof dir, "%s/gpt2-pruned", fixtures());
    snprintf(data, sizeof data, "%s/data.npy", dir);
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_data_load(data, 0, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_new(m, d, &ev, &err), HP_OK, "%s", err.msg);
    hp_evaluator_set_plain(ev, true);
    const struct hp_model_info *in = hp_model_get_info(m);
    int n_present = 0;
    for (int i = 0; i < in->n_layers * in->n_heads; i++)
        n_present += !in->pruned[i];
    cr_assert_eq(n_present, 9, "the fixture has %d heads", n_present);
    const struct point whole = point_of(ev, in, n_present, "");

    /* every curve point, worked here: its mask's heads kept and the evaluator's loss at it */
    sqlite3 *h;
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    struct point it[32], rs[32], rd[32];
    int n_it = 0, n_rs = 0, n_rd = 0;
    cr_assert_eq(sqlite3_prepare_v2(h, "SELECT step, mask_text FROM jobs WHERE study = 'iterative' AND kind = "
                                       "'iterative' ORDER BY step", -1, &st, NULL), SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW && n_it < 32)
        it[n_it++] = point_of(ev, in, n_present, (const char *)sqlite3_column_text(st, 1));
    sqlite3_finalize(st);
    cr_assert_eq(sqlite3_prepare_v2(h, "SELECT k, mask_text FROM jobs WHERE study = 'random' ORDER BY k, sample", -1,
                                    &st, NULL), SQLITE_OK);
    rd[n_rd++] = whole; /* the random curve starts at the whole model */
    while (sqlite3_step(st) == SQLITE_ROW && n_rs < 32)
        rs[n_rs++] = point_of(ev, in, n_present, (const char *)sqlite3_column_text(st, 1));
    sqlite3_finalize(st);
    for (int i = 0; i + 1 < n_rs; i += 2) { /* two samples a k: their means */
        cr_assert_eq(rs[i].kept, rs[i + 1].kept, "random draws of one k keep the same heads");
        rd[n_rd++] = (struct point){rs[i].kept, (rs[i].loss + rs[i + 1].loss) / 2};
    }
    /* each lambda's pruned set from its gates: gate 0 on a head the checkpoint has */
    struct point gp[8];
    int n_gp = 0;
    for (int idx = 0; idx < 3; idx++) {
        char q[400];
        snprintf(q, sizeof q, "SELECT h.layer, h.head, h.gate FROM gate_heads h JOIN sweep_gates x ON x.run_id = "
                 "h.run_id WHERE x.study = 'gates' AND x.idx = %d", idx);
        cr_assert_eq(sqlite3_prepare_v2(h, q, -1, &st, NULL), SQLITE_OK);
        char spec[256] = "";
        while (sqlite3_step(st) == SQLITE_ROW) {
            const int l = sqlite3_column_int(st, 0), u = sqlite3_column_int(st, 1);
            if (sqlite3_column_double(st, 2) == 0 && !in->pruned[l * in->n_heads + u])
                snprintf(spec + strlen(spec), sizeof spec - strlen(spec), "%s%d.%d", *spec ? "," : "", l, u);
        }
        sqlite3_finalize(st);
        gp[n_gp++] = point_of(ev, in, n_present, spec);
    }
    sqlite3_close(h);
    cr_assert_eq(it[0].kept, 9);
    cr_assert_eq(it[n_it - 1].kept, 0, "the curve ends with no heads (floor 0)");

    /* curve: heads and kept of the heads the model has, and every curve's start is the whole model */
    struct hp_table *t = query(db, (struct hp_query_opts){.kind = HP_QUERY_CURVE});
    int seen_it = 0, seen_gp = 0;
    for (int r = 0; r < t->n_rows; r++) {
        const char *study = txt(t, r, "study");
        const double kept = val(t, r, "kept"), heads = val(t, r, "heads");
        cr_assert_eq(kept + heads, 9, "row %d (%s): kept %g + pruned %g is not the model's 9 heads", r, study, kept,
                     heads);
        cr_assert(fabs(val(t, r, "pct_heads") - 100.0 * heads / 9) < 0.006, "row %d: pct %g", r, val(t, r, "pct_heads"));
        const bool start = !strcmp(study, "untrained") || (!strcmp(study, "random") && val(t, r, "k") == 0) ||
                           ((!strcmp(study, "iterative") || !strcmp(study, "grad")) && val(t, r, "step") == 0);
        if (start) {
            cr_assert_eq(kept, 9, "%s starts at %g heads kept, not the checkpoint's 9", study, kept);
            cr_assert(fabs(val(t, r, "loss") - whole.loss) <= 1e-5 * whole.loss, "%s starts at loss %g, not %g", study,
                      val(t, r, "loss"), whole.loss);
        }
        if (!strcmp(study, "iterative")) {
            cr_assert_eq(kept, it[seen_it].kept, "step %d keeps %g, its mask %g", seen_it, kept, it[seen_it].kept);
            seen_it++;
        }
        if (!strcmp(study, "gates")) {
            cr_assert_eq(kept, gp[seen_gp].kept, "lambda #%d keeps %g, its gates %g", seen_gp, kept, gp[seen_gp].kept);
            cr_assert(fabs(val(t, r, "loss") - gp[seen_gp].loss) <= 1e-5 * gp[seen_gp].loss);
            seen_gp++;
        }
    }
    cr_assert_eq(seen_it, n_it);
    cr_assert_eq(seen_gp, 3);
    hp_table_free(t);

    /* gates: the other curves read at each lambda's heads kept, and the lowest named */
    qsort(it, (size_t)n_it, sizeof *it, by_kept_asc);
    qsort(rd, (size_t)n_rd, sizeof *rd, by_kept_asc);
    double ik[32], iv[32], rk[32], rv[32];
    for (int i = 0; i < n_it; i++)
        ik[i] = it[i].kept, iv[i] = it[i].loss;
    for (int i = 0; i < n_rd; i++)
        rk[i] = rd[i].kept, rv[i] = rd[i].loss;
    t = query(db, (struct hp_query_opts){.kind = HP_QUERY_GATES, .study = "gates"});
    cr_assert_eq(t->n_rows, 3);
    for (int r = 0; r < 3; r++) {
        const double k = gp[r].kept, wi = interp(ik, iv, n_it, k), wr = interp(rk, rv, n_rd, k);
        cr_log_info("lambda #%d: kept %g, gates %.6f, iterative %.6f, random %.6f", r, k, gp[r].loss, wi, wr);
        cr_assert_eq(val(t, r, "kept"), k, "lambda #%d: kept %g, its gates keep %g", r, val(t, r, "kept"), k);
        cr_assert(fabs(val(t, r, "pct_kept") - 100.0 * k / 9) < 0.006);
        cr_assert(fabs(val(t, r, "iterative") - wi) <= 1e-5 * fabs(wi), "lambda #%d: iterative %.6f, at %g kept %.6f",
                  r, val(t, r, "iterative"), k, wi);
        cr_assert(isnan(wr) ? isnan(val(t, r, "random")) : fabs(val(t, r, "random") - wr) <= 1e-5 * fabs(wr),
                  "lambda #%d: random %.6f, at %g kept %.6f", r, val(t, r, "random"), k, wr);
        /* the lowest, where it is clear (a tie within float rounding is the same variant reached twice) */
        const double vals[3] = {gp[r].loss, wi, wr};
        const char *names[3] = {"gates", "iterative", "random"};
        int best = 0, n_near = 0;
        for (int i = 1; i < 3; i++)
            if (!isnan(vals[i]) && vals[i] < vals[best])
                best = i;
        for (int i = 0; i < 3; i++)
            n_near += !isnan(vals[i]) && vals[i] - vals[best] <= 1e-5 * fabs(vals[best]);
        if (n_near == 1)
            cr_assert_str_eq(txt(t, r, "lower"), names[best], "lambda #%d (kept %g)", r, k);
        else
            cr_assert(!strcmp(txt(t, r, "lower"), "tie") || !strcmp(txt(t, r, "lower"), names[best]), "lambda #%d: %s",
                      r, txt(t, r, "lower"));
    }
    hp_table_free(t);

    /* the report's curves: x is the share of the model's 9 heads, the same x for the same heads kept */
    char html[300], svg_dir[300];
    snprintf(html, sizeof html, "%s/r.html", tmp);
    snprintf(svg_dir, sizeof svg_dir, "%s/svg", tmp);
    struct hp_report_opts o = {.db_path = db, .out = html, .svg_dir = svg_dir, .eps = 0.01};
    struct hp_report_summary rs_sum;
    cr_assert_eq(hp_report_write(&o, &rs_sum, &err), HP_OK, "%s", err.msg);
    char path[400];
    snprintf(path, sizeof path, "%s/curves.svg", svg_dir);
    char *svg = tu_slurp(path, NULL);
    cr_assert(svg);
    cr_assert(strstr(svg, "heads pruned (% of the 9 query heads the checkpoint has, of 12)"), "the x axis' label");
    double xi[32], pi[32], xg[8], pg[8];
    int ni = series_points(svg, "iterative", xi, pi, 32), ng = series_points(svg, "gates", xg, pg, 8);
    cr_assert_eq(ng, 3);
    cr_assert_geq(ni, 2);
    for (int g = 0; g < ng; g++)
        cr_assert(fabs(pg[g] - 100.0 * (9 - gp[g].kept) / 9) < 0.006, "gates #%d drawn at %g%%", g, pg[g]);
    for (int i = 0; i < ni; i++)
        cr_assert(fabs(pi[i] - 100.0 * (9 - it[n_it - 1 - i].kept) / 9) < 0.006, "step %d drawn at %g%%", i, pi[i]);
    cr_assert_eq(pi[0], 0, "the iterative curve starts at 0%% pruned");
    /* the untrained gates study (every gate open) is the whole model: at the iterative curve's start */
    double xu[4], pu[4];
    cr_assert_eq(series_points(svg, "untrained", xu, pu, 4), 1);
    cr_assert_eq(pu[0], 0, "the whole model drawn at %g%% pruned", pu[0]);
    /* and drawn there: one linear map from the share to x for every series, so the same heads kept are the
     * same x (the old mismatch drew the gates points 3 heads to the right of the iterative ones) */
    cr_assert(pi[ni - 1] > pi[0], "the iterative curve spans more than one share");
    const double slope = (xi[ni - 1] - xi[0]) / (pi[ni - 1] - pi[0]);
    cr_assert(slope > 0, "x grows with the share pruned");
    for (int g = 0; g < ng; g++)
        cr_assert(fabs(xg[g] - (xi[0] + slope * (pg[g] - pi[0]))) < 0.05, "gates #%d at x %g, not where %g%% is", g,
                  xg[g], pg[g]);
    for (int i = 0; i < ni; i++)
        cr_assert(fabs(xi[i] - (xi[0] + slope * (pi[i] - pi[0]))) < 0.05, "step %d at x %g", i, xi[i]);
    cr_assert(fabs(xu[0] - xi[0]) < 0.05, "the whole model at x %g, the iterative start at %g", xu[0], xi[0]);
    free(svg);

    hp_evaluator_free(ev);
    hp_data_free(d);
    hp_model_close(m);
}

/* A gate run's state damaged in the database (a NaN log alpha) is named as that, with the database: not reported
 * as weights or data that give a non-finite objective. */
Test(gates_sweep, a_damaged_saved_state_is_named_as_such)
{
    const char *plan = tiny_plan(NULL);
    char db[256], hex[12 * 16 + 1] = "", q[512];
    path_in(db, sizeof db, "damaged.db");
    struct hp_sweep_summary sum;
    struct hp_error err = {{0}};
    struct stopper stop = {.stop_at = 20}; /* stopped while training its first lambda: a state saved mid-run */
    cr_assert_eq(sweep(plan, db, 1, &stop, &sum, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(one_int(db, "SELECT count(*) FROM gate_runs WHERE n_kept IS NULL"), 1, "no run stopped mid-way");
    for (int i = 0; i < 12; i++)
        strcat(hex, i == 5 ? "000000000000F87F" : "0000000000000840"); /* head 1.1 NaN, the others 3.0 */
    snprintf(q, sizeof q, "UPDATE gate_runs SET log_alpha = X'%s' WHERE n_kept IS NULL", hex);
    sqlite3 *h;
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(h, q, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(h));
    sqlite3_close(h);
    cr_assert_neq(sweep(plan, db, 1, NULL, &sum, &err), HP_OK);
    cr_log_info("%s", err.msg);
    cr_assert(strstr(err.msg, db) && strstr(err.msg, "the saved state of gate run") && strstr(err.msg, "is damaged") &&
                  strstr(err.msg, "log_alpha of head 1.1 is nan"),
              "%s", err.msg);
    cr_assert(!strstr(err.msg, "weights") && !strstr(err.msg, "not finite"), "%s", err.msg);
}
