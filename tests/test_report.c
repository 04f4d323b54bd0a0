/*
 * test_report.c -- `headprune report` / hp_report_write, and the drawing
 * toolkit (svg.c) under it.
 *
 *  - The values drawn equal the database's: a real sweep of
 *    tests/plans/sweep.yaml (every study kind on the llama-gqa fixture: 3
 *    layers x 4 heads, 2 KV heads) is reported with --svg; every heatmap
 *    cell, curve point, redundancy bar and pair cell is read back from its
 *    SVG's data-* attributes and compared with numbers this file computes
 *    from the database's rows by its own SQL and arithmetic (effects against
 *    the baseline, paired t intervals, means of random draws, interactions),
 *    within what the printed digits can round away; the drawn geometry is
 *    checked against the values too (cells in layer/unit order, curve
 *    vertices on one linear y scale with the baseline).
 *  - Head roles: a copy of that plan with a roles study added: each panel
 *    of the roles figure has n_layers x n_heads points whose scores are
 *    head_roles' (read by this file's SQL) and whose effects are computed
 *    here, on linear scales (one effect scale for every panel); each panel's
 *    rho is the rho row `headprune query roles` prints; every heatmap
 *    tooltip holds its head's scores. Without a single study the scores are
 *    drawn by layer; a database from before head roles says so.
 *  - Every string from the database is escaped: a database rewritten with
 *    markup, quotes, invalid UTF-8 and control characters in its plan text,
 *    names, paths, study names and kernels yields output whose every '<'
 *    opens a tag from the report's own small vocabulary, with the hostile
 *    text present only escaped.
 *  - Figures whose studies are absent are left out with a line naming the
 *    study; bad input (missing, corrupt, foreign, forged database; unknown
 *    sweep; --out unwritable, a folder, the database itself; a full disk)
 *    is one line on stderr, exit 1, and nothing written or half-written.
 *  - svg.c: escaping against hand-worked strings, ticks, the symmetric log
 *    scale, the colour maps.
 * The headless-browser checks (rendering, no request, non-blank screenshot,
 * the heatmap's cells) are tests/browser_report.py.
 */
#define _DEFAULT_SOURCE
#include <criterion/criterion.h>

#include "svg.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <gsl/gsl_cdf.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmp[64], db[128], out_html[128], svg_dir[128];
static char out[1 << 16], errs[1 << 16];

static void setup(void)
{
    tu_mkdtemp(tmp, sizeof tmp, "report");
    snprintf(db, sizeof db, "%s/s.db", tmp);
    snprintf(out_html, sizeof out_html, "%s/r.html", tmp);
    snprintf(svg_dir, sizeof svg_dir, "%s/svg", tmp);
}

static void teardown(void)
{
    tu_rmrf(tmp);
}

TestSuite(report, .init = setup, .fini = teardown, .timeout = 300);

// --- running headprune --------------------------------------------------------------

// Run `headprune ARGS` from the repository's root (a shell line: ARGS are this file's own); its exit status.
static int hp(const char *args)
{
    int rc = tu_headprune(NULL, args, tmp, out, sizeof out, errs, sizeof errs);
    cr_assert_lt(rc, 128, "headprune did not exit normally for: %s", args);
    return rc;
}

// A sweep of tests/plans/<plan> into db.
static void sweep(const char *plan)
{
    char args[512];
    snprintf(args, sizeof args, "run tests/plans/%s --db %s --threads 1 --quiet", plan, db);
    cr_assert_eq(hp(args), 0, "run failed: %s", errs);
}

/*
 * A sweep of tests/plans/sweep.yaml with a roles study added (its copy in
 * tmp, the fixtures named by absolute path), so the plan every other test
 * runs stays the one source of the studies. single = false: the copy keeps
 * only its baseline and the roles study (roles without effects).
 */
static void sweep_with_roles(bool single)
{
    char src[512], plan[160], args[512];
    snprintf(src, sizeof src, "%s/plans/sweep.yaml", getenv("HP_TESTS"));
    snprintf(plan, sizeof plan, "%s/roles.yaml", tmp);
    char *text = tu_slurp(src, NULL);
    FILE *f = fopen(plan, "w");
    cr_assert(f);
    bool studies = false;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *rel = strstr(line, "../fixtures/");
        if (rel) // model: ../fixtures/llama-gqa -> model: <HP_FIXTURES>/llama-gqa
            fprintf(f, "%.*s%s/%s\n", (int)(rel - line), line, getenv("HP_FIXTURES"), rel + strlen("../fixtures/"));
        else if (!studies || single || strcmp(line, "  - baseline") == 0)
            fprintf(f, "%s\n", line);
        studies |= strcmp(line, "studies:") == 0;
    }
    fprintf(f, "  - roles\n%s", single ? "  - direct\n  - circuit: {sizes: [0.05, 0.5]}\n" : ""); /* every figure's */
    fclose(f);
    free(text);
    snprintf(args, sizeof args, "run %s --db %s --threads 1 --quiet", plan, db);
    cr_assert_eq(hp(args), 0, "run failed: %s", errs);
}

static void exec_sql(const char *path, const char *sql)
{
    sqlite3 *h;
    cr_assert_eq(sqlite3_open(path, &h), SQLITE_OK);
    char *msg = NULL;
    cr_assert_eq(sqlite3_exec(h, sql, NULL, NULL, &msg), SQLITE_OK, "%s: %s", sql, msg ? msg : "?");
    sqlite3_close(h);
}

static char *slurp_path(const char *dir, const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return tu_slurp(p, NULL);
}

static bool exists(const char *p)
{
    return access(p, F_OK) == 0;
}

// --- reading the SVG back ----------------------------------------------------------------

// One element's attributes, entity references decoded.
#define MAX_ATTR 24
struct elem {
    int n;
    char name[MAX_ATTR][32];
    char value[MAX_ATTR][512];
};

static void unescape(const char *s, size_t n, char *out, size_t size)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < size;) {
        static const char *const ent[][2] = {{"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""},
                                             {"&#39;", "'"}};
        bool done = false;
        for (int k = 0; k < 5 && !done; k++) {
            size_t el = strlen(ent[k][0]);
            if (i + el <= n && strncmp(s + i, ent[k][0], el) == 0) {
                out[o++] = ent[k][1][0];
                i += el;
                done = true;
            }
        }
        if (!done)
            out[o++] = s[i++];
    }
    out[o] = '\0';
}

/* The elements of text whose start tag begins with `start` (e.g. "<rect class=\"cell\""), up to max. */
static int find_elems(const char *text, const char *start, struct elem *es, int max)
{
    int n = 0;
    for (const char *p = strstr(text, start); p && n < max; p = strstr(p + 1, start)) {
        struct elem *e = &es[n++];
        memset(e, 0, sizeof *e);
        const char *q = p + 1;
        while (*q && *q != ' ' && *q != '>')
            q++;
        while (*q && *q != '>') {
            while (*q == ' ' || *q == '\n')
                q++;
            const char *eq = strchr(q, '=');
            if (!eq || *q == '>' || *q == '/')
                break;
            cr_assert_eq(eq[1], '"', "unquoted attribute near: %.60s", q);
            const char *end = strchr(eq + 2, '"');
            cr_assert(end, "unterminated attribute");
            if (e->n < MAX_ATTR) {
                snprintf(e->name[e->n], sizeof e->name[e->n], "%.*s", (int)(eq - q), q);
                unescape(eq + 2, (size_t)(end - eq - 2), e->value[e->n], sizeof e->value[e->n]);
                e->n++;
            }
            q = end + 1;
        }
    }
    return n;
}

static const char *attr(const struct elem *e, const char *name)
{
    for (int i = 0; i < e->n; i++)
        if (strcmp(e->name[i], name) == 0)
            return e->value[i];
    return NULL;
}

static double attr_num(const struct elem *e, const char *name)
{
    const char *v = attr(e, name);
    cr_assert(v, "element lacks %s", name);
    char *end;
    double x = strtod(v, &end);
    cr_assert(end != v && *end == '\0', "%s=\"%s\" is not a number", name, v);
    return x;
}

/* got (printed with `digits` significant digits, or with `decimals` places when digits is 0) against want. */
static void expect_close(double got, double want, int digits, int decimals, const char *what)
{
    double tol = digits ? fabs(want) * 0.5 * pow(10, 1 - digits) * 1.0001 + 1e-12 : 0.5 * pow(10, -decimals) * 1.0001;
    cr_assert(fabs(got - want) <= tol, "%s: drawn %.10g, database %.10g (difference %.3g > %.3g)", what, got, want,
              fabs(got - want), tol);
}

// --- the database's numbers, computed here ---------------------------------------------------

static sqlite3 *open_ro(void)
{
    sqlite3 *h;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    return h;
}

static double sql_num(sqlite3 *h, const char *sql)
{
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql, sqlite3_errmsg(h));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s: no row", sql);
    double v = sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    return v;
}

// Mean and 95% t interval (n - 1 df) of x (n), two-pass.
static void t_interval(const double *x, int n, double *mean, double *lo, double *hi)
{
    double m = 0, ss = 0;
    for (int i = 0; i < n; i++)
        m += x[i];
    m /= n;
    for (int i = 0; i < n; i++)
        ss += (x[i] - m) * (x[i] - m);
    double half = n > 1 ? gsl_cdf_tdist_Pinv(0.975, n - 1) * sqrt(ss / (n - 1)) / sqrt(n) : NAN;
    *mean = m, *lo = m - half, *hi = m + half;
}

/* A single job's loss effect and its paired interval over sequences, by (study, layer, unit). */
static void single_effect(sqlite3 *h, const char *study, int layer, int unit, double *eff, double *lo, double *hi,
                          double *loss)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT r.loss FROM sweep_jobs j JOIN results r ON r.variant_id = j.variant_id WHERE j.sweep_id = 1 "
             "AND j.study = '%s' AND j.layer = %d AND j.unit = %d ORDER BY j.ord LIMIT 1",
             study, layer, unit);
    *loss = sql_num(h, sql);
    double base = sql_num(h, "SELECT r.loss FROM sweep_jobs j JOIN results r ON r.variant_id = j.variant_id "
                             "WHERE j.sweep_id = 1 AND j.kind = 'baseline'");
    *eff = *loss - base;
    snprintf(sql, sizeof sql,
             "SELECT sv.loss - sb.loss FROM sweep_jobs j JOIN seq_results sv ON sv.variant_id = j.variant_id "
             "JOIN sweep_jobs jb ON jb.sweep_id = 1 AND jb.kind = 'baseline' "
             "JOIN seq_results sb ON sb.variant_id = jb.variant_id AND sb.seq = sv.seq "
             "WHERE j.sweep_id = 1 AND j.study = '%s' AND j.layer = %d AND j.unit = %d "
             "AND j.ord = (SELECT min(ord) FROM sweep_jobs WHERE sweep_id = 1 AND study = '%s' AND layer = %d "
             "AND unit = %d) ORDER BY sv.seq",
             study, layer, unit, study, layer, unit);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(h));
    double d[256];
    int n = 0;
    while (sqlite3_step(st) == SQLITE_ROW && n < 256)
        d[n++] = sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    double mean;
    t_interval(d, n, &mean, lo, hi);
}

static void write_report(const char *dir)
{
    struct hp_report_opts o = {.db_path = db, .out = out_html, .svg_dir = dir, .eps = 0.01};
    struct hp_report_summary sum;
    struct hp_error err = {{0}};
    cr_assert_eq(hp_report_write(&o, &sum, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(sum.sweep_id, 1);
}

// --- the values drawn equal the database's ---------------------------------------------------

static void check_heatmap(sqlite3 *h, const char *file, const char *study, int units)
{
    char *svg = slurp_path(svg_dir, file);
    static struct elem es[64];
    int n = find_elems(svg, "<rect class=\"cell", es, 64);
    cr_assert_eq(n, 3 * units, "%s: %d cells for 3 layers x %d units", file, n, units);
    double m = 0;
    for (int i = 0; i < n; i++)
        m = fmax(m, fabs(attr_num(&es[i], "data-effect")));
    for (int i = 0; i < n; i++) {
        const struct elem *e = &es[i];
        int l = (int)attr_num(e, "data-layer"), u = (int)attr_num(e, "data-unit");
        cr_assert_eq(l, i / units, "%s: cell %d is layer %d (cells go layer by layer)", file, i, l);
        cr_assert_eq(u, i % units, "%s: cell %d is unit %d", file, i, u);
        double eff, lo, hi, loss;
        single_effect(h, study, l, u, &eff, &lo, &hi, &loss);
        char what[96];
        snprintf(what, sizeof what, "%s cell %d.%d effect", file, l, u);
        expect_close(attr_num(e, "data-effect"), eff, 6, 0, what);
        expect_close(attr_num(e, "data-value"), loss, 0, 6, what);
        expect_close(attr_num(e, "data-ci-lo"), lo, 6, 0, what);
        expect_close(attr_num(e, "data-ci-hi"), hi, 6, 0, what);
        cr_assert_str_eq(attr(e, "data-ci-excludes-zero"), lo > 0 || hi < 0 ? "1" : "0", "%s", what);
        // geometry: column by unit, row by layer
        if (i % units)
            cr_assert_gt(attr_num(e, "x"), attr_num(&es[i - 1], "x"), "%s: columns out of order", what);
        if (i >= units)
            cr_assert_gt(attr_num(e, "y"), attr_num(&es[i - units], "y"), "%s: rows out of order", what);
        // colour: red for damage, blue for help (RdBu), near-white near 0
        unsigned rr, gg, bb;
        cr_assert_eq(sscanf(attr(e, "fill"), "#%2x%2x%2x", &rr, &gg, &bb), 3);
        if (eff > m / 100)
            cr_assert_gt(rr, bb, "%s: effect %g drawn %s, not red", what, eff, attr(e, "fill"));
        if (eff < -m / 100)
            cr_assert_lt(rr, bb, "%s: effect %g drawn %s, not blue", what, eff, attr(e, "fill"));
        // the tooltip says the same number
        char want[64];
        snprintf(want, sizeof want, ": effect %s ", attr(e, "data-effect"));
        cr_assert(strstr(svg, want), "%s: no tooltip with '%s'", what, want);
    }
    free(svg);
}

// The vertices of the polyline of the series of study (in order) into xs, ys; their count.
static int series_vertices(const char *svg, const char *study, double *xs, double *ys, int max)
{
    char key[160];
    snprintf(key, sizeof key, "<g class=\"series\" data-study=\"%s\"", study);
    const char *g = strstr(svg, key);
    cr_assert(g, "no series %s", study);
    const char *p = strstr(g, "points=\"");
    cr_assert(p);
    p += 8;
    int n = 0;
    while (*p != '"' && n < max) {
        char *end;
        xs[n] = strtod(p, &end);
        cr_assert_eq(*end, ',');
        ys[n] = strtod(end + 1, &end);
        n++;
        p = end;
        while (*p == ' ')
            p++;
    }
    return n;
}

static void check_curves(sqlite3 *h)
{
    char *svg = slurp_path(svg_dir, "curves.svg");
    static struct elem es[256];
    double base = sql_num(h, "SELECT r.loss FROM sweep_jobs j JOIN results r ON r.variant_id = j.variant_id "
                             "WHERE j.sweep_id = 1 AND j.kind = 'baseline'");
    struct elem bl;
    cr_assert_eq(find_elems(svg, "<line class=\"baseline\"", &bl, 1), 1);
    expect_close(attr_num(&bl, "data-value"), base, 7, 0, "baseline");
    const double base_y = attr_num(&bl, "y1");
    /* pixels per nat: from the vertex farthest from the baseline (its rounding weighs least), then every
     * vertex must lie on that scale */
    double scale = NAN, far = 0;
    for (int pass = 0; pass < 2; pass++) {
        // iterative studies: one point a step
        const char *iter[] = {"iterative", "iterative-kv", "iterative-grad"};
        for (int s = 0; s < 3; s++) {
            char sql[512];
            snprintf(sql, sizeof sql,
                     "SELECT count(DISTINCT step) FROM sweep_jobs WHERE sweep_id = 1 AND study = '%s' AND "
                     "kind = 'iterative'",
                     iter[s]);
            int steps = (int)sql_num(h, sql);
            cr_assert_gt(steps, 1, "%s ran %d steps", iter[s], steps);
            char start[160];
            snprintf(start, sizeof start, "<g class=\"series\" data-study=\"%s\"", iter[s]);
            const char *g = strstr(svg, start);
            cr_assert(g);
            int n = find_elems(g, " class=\"point\"", es, 256);
            cr_assert_geq(n, steps);
            double xs[256], ys[256];
            int nv = series_vertices(svg, iter[s], xs, ys, 256);
            cr_assert_eq(nv, steps, "%s: %d vertices for %d steps", iter[s], nv, steps);
            for (int i = 0; i < steps; i++) {
                const struct elem *e = &es[i];
                int step = (int)attr_num(e, "data-step");
                cr_assert_eq(step, i);
                snprintf(sql, sizeof sql,
                         "SELECT r.loss FROM sweep_jobs j JOIN results r ON r.variant_id = j.variant_id WHERE "
                         "j.sweep_id = 1 AND j.study = '%s' AND j.kind = 'iterative' AND j.step = %d "
                         "ORDER BY j.ord LIMIT 1",
                         iter[s], step);
                double loss = sql_num(h, sql);
                snprintf(sql, sizeof sql,
                         "SELECT 100.0 * v.n_ablated / 12 FROM sweep_jobs j JOIN variants v ON v.id = j.variant_id "
                         "WHERE j.sweep_id = 1 AND j.study = '%s' AND j.kind = 'iterative' AND j.step = %d "
                         "ORDER BY j.ord LIMIT 1",
                         iter[s], step);
                double pct = sql_num(h, sql);
                char what[96];
                snprintf(what, sizeof what, "%s step %d", iter[s], step);
                expect_close(attr_num(e, "data-value"), loss, 0, 6, what);
                expect_close(attr_num(e, "data-pct"), pct, 0, 2, what);
                // the vertex drawn: y linear in the loss, through the baseline's y
                if (pass == 0 && fabs(loss - base) > far) {
                    far = fabs(loss - base);
                    scale = (ys[i] - base_y) / (loss - base);
                }
                if (pass == 1)
                    cr_assert(fabs(ys[i] - (base_y + scale * (loss - base))) < 0.05,
                              "%s drawn at y %.2f, the scale puts it at %.2f", what, ys[i],
                              base_y + scale * (loss - base));
                if (i)
                    cr_assert(xs[i] > xs[i - 1], "%s: x does not grow with the heads pruned", what);
            }
        }
    }
    cr_assert(!isnan(scale) && scale < 0, "a larger loss must be drawn higher (scale %g px/nat)", scale);
    // random: each k the mean of its draws with a 95% t interval; k = 0 the baseline
    const char *g = strstr(svg, "<g class=\"series\" data-study=\"random\"");
    cr_assert(g);
    int n = find_elems(g, " class=\"point\"", es, 256);
    cr_assert_geq(n, 5);
    static const int ks[] = {0, 2, 4, 6, 8};
    for (int i = 0; i < 5; i++) {
        cr_assert_eq((int)attr_num(&es[i], "data-k"), ks[i]);
        if (ks[i] == 0) {
            expect_close(attr_num(&es[i], "data-value"), base, 0, 6, "random k = 0");
            continue;
        }
        char sql[512];
        snprintf(sql, sizeof sql,
                 "SELECT r.loss, v.n_ablated FROM sweep_jobs j JOIN results r ON r.variant_id = j.variant_id "
                 "JOIN variants v ON v.id = j.variant_id WHERE j.sweep_id = 1 AND j.study = 'random' AND j.k = %d",
                 ks[i]);
        sqlite3_stmt *st;
        cr_assert_eq(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK);
        double x[64], n_abl = 0;
        int m = 0;
        while (sqlite3_step(st) == SQLITE_ROW && m < 64) {
            x[m++] = sqlite3_column_double(st, 0);
            n_abl += sqlite3_column_double(st, 1);
        }
        sqlite3_finalize(st);
        cr_assert_eq(m, 4, "k = %d has %d draws (the plan asks 4)", ks[i], m);
        double mean, lo, hi;
        t_interval(x, m, &mean, &lo, &hi);
        char what[64];
        snprintf(what, sizeof what, "random k = %d", ks[i]);
        expect_close(attr_num(&es[i], "data-value"), mean, 0, 6, what);
        expect_close(attr_num(&es[i], "data-ci-lo"), lo, 0, 6, what);
        expect_close(attr_num(&es[i], "data-ci-hi"), hi, 0, 6, what);
        expect_close(attr_num(&es[i], "data-pct"), 100.0 * n_abl / m / 12, 0, 2, what);
        cr_assert_eq((int)attr_num(&es[i], "data-samples"), 4);
    }
    cr_assert(strstr(svg, "<path class=\"band\" data-study=\"random\""), "the random study has no band");
    cr_assert(strstr(svg, "iterative, gradient-ranked"), "the gradient-ranked curve is not named so");
    cr_assert(strstr(svg, "heads pruned (% of the model&#39;s 12 query heads)"), "x axis label");
    cr_assert(strstr(svg, "loss (nats)"), "y axis label with its unit");
    free(svg);
}

static void check_redundancy(sqlite3 *h)
{
    char *svg = slurp_path(svg_dir, "redundancy.svg");
    static struct elem es[32];
    int n = find_elems(svg, "<rect class=\"bar\"", es, 32);
    cr_assert_eq(n, 9, "3 layers x 3 panels, got %d bars", n);
    double base = sql_num(h, "SELECT r.loss FROM sweep_jobs j JOIN results r ON r.variant_id = j.variant_id "
                             "WHERE j.sweep_id = 1 AND j.kind = 'baseline'");
    for (int i = 0; i < n; i++) {
        const struct elem *e = &es[i];
        int l = (int)attr_num(e, "data-layer");
        const char *panel = attr(e, "data-panel");
        char sql[512], what[64];
        snprintf(what, sizeof what, "layer %d %s", l, panel);
        if (strcmp(panel, "below_eps") == 0) {
            snprintf(sql, sizeof sql,
                     "SELECT count(*) FROM sweep_jobs j JOIN results r ON r.variant_id = j.variant_id WHERE "
                     "j.sweep_id = 1 AND j.study = 'single' AND j.layer = %d AND r.loss - %.17g < 0.01",
                     l, base);
            cr_assert_eq((int)attr_num(e, "data-value"), (int)sql_num(h, sql), "%s", what);
            cr_assert_eq((int)attr_num(e, "data-units"), 4, "%s", what);
        } else if (strcmp(panel, "layer_effect") == 0) {
            snprintf(sql, sizeof sql,
                     "SELECT r.loss FROM sweep_jobs j JOIN results r ON r.variant_id = j.variant_id WHERE "
                     "j.sweep_id = 1 AND j.kind = 'layer' AND j.layer = %d",
                     l);
            expect_close(attr_num(e, "data-value"), sql_num(h, sql) - base, 6, 0, what);
        } else {
            cr_assert_str_eq(panel, "only_effect");
            snprintf(sql, sizeof sql,
                     "SELECT min(r.loss) FROM sweep_jobs j JOIN results r ON r.variant_id = j.variant_id WHERE "
                     "j.sweep_id = 1 AND j.kind = 'only' AND j.layer = %d",
                     l);
            expect_close(attr_num(e, "data-value"), sql_num(h, sql) - base, 6, 0, what);
        }
    }
    free(svg);
}

static void check_pairs(sqlite3 *h)
{
    double base = sql_num(h, "SELECT r.loss FROM sweep_jobs j JOIN results r ON r.variant_id = j.variant_id "
                             "WHERE j.sweep_id = 1 AND j.kind = 'baseline'");
    for (int l = 0; l < 3; l++) {
        char name[32];
        snprintf(name, sizeof name, "pairs-layer%d.svg", l);
        char *svg = slurp_path(svg_dir, name);
        static struct elem es[64];
        int n = find_elems(svg, "<rect class=\"pair", es, 64), n_sig = 0;
        cr_assert_eq(n, 12, "%s: 6 pairs of 4 heads, each drawn twice; got %d cells", name, n);
        for (int i = 0; i < n; i++) {
            int a = (int)attr_num(&es[i], "data-a"), b = (int)attr_num(&es[i], "data-b");
            char sql[1400];
            snprintf(sql, sizeof sql,
                     "SELECT r.loss FROM sweep_jobs j JOIN results r ON r.variant_id = j.variant_id WHERE "
                     "j.sweep_id = 1 AND j.kind = 'pairs' AND j.layer = %d AND j.unit = %d AND j.unit2 = %d",
                     l, a, b);
            double ab = sql_num(h, sql) - base;
            double ea, eb, lo, hi, loss;
            single_effect(h, "single", l, a, &ea, &lo, &hi, &loss);
            single_effect(h, "single", l, b, &eb, &lo, &hi, &loss);
            char what[64];
            snprintf(what, sizeof what, "layer %d pair %d+%d", l, a, b);
            expect_close(attr_num(&es[i], "data-effect-ab"), ab, 6, 0, what);
            // I is computed from the stored metrics, then printed: allow the rounding of ab, a and b's sum too
            double got = attr_num(&es[i], "data-interaction"), want = ab - ea - eb;
            cr_assert(fabs(got - want) <= 5e-6 * (fabs(want) + fabs(ab) + fabs(ea) + fabs(eb)) + 1e-12,
                      "%s: interaction drawn %.10g, database %.10g", what, got, want);
            // its interval: the t interval of the per-sequence I_s = ab_s - a_s - b_s + base_s (loss effects),
            // the singles each unit's first single job; and the dot exactly where it excludes 0
            snprintf(sql, sizeof sql,
                     "SELECT sp.loss - sa.loss - sb.loss + s0.loss FROM sweep_jobs jp "
                     "JOIN seq_results sp ON sp.variant_id = jp.variant_id "
                     "JOIN seq_results sa ON sa.seq = sp.seq AND sa.variant_id = (SELECT variant_id FROM sweep_jobs "
                     " WHERE sweep_id = 1 AND study = 'single' AND layer = %d AND unit = %d ORDER BY ord LIMIT 1) "
                     "JOIN seq_results sb ON sb.seq = sp.seq AND sb.variant_id = (SELECT variant_id FROM sweep_jobs "
                     " WHERE sweep_id = 1 AND study = 'single' AND layer = %d AND unit = %d ORDER BY ord LIMIT 1) "
                     "JOIN seq_results s0 ON s0.seq = sp.seq AND s0.variant_id = (SELECT variant_id FROM sweep_jobs "
                     " WHERE sweep_id = 1 AND kind = 'baseline') "
                     "WHERE jp.sweep_id = 1 AND jp.kind = 'pairs' AND jp.layer = %d AND jp.unit = %d AND "
                     "jp.unit2 = %d ORDER BY sp.seq",
                     l, a, l, b, l, a, b);
            sqlite3_stmt *st;
            cr_assert_eq(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(h));
            double is[256], mean, ilo, ihi;
            int k = 0;
            while (sqlite3_step(st) == SQLITE_ROW && k < 256)
                is[k++] = sqlite3_column_double(st, 0);
            sqlite3_finalize(st);
            cr_assert_geq(k, 2, "%s: %d sequences", what, k);
            t_interval(is, k, &mean, &ilo, &ihi);
            expect_close(attr_num(&es[i], "data-ci-lo"), ilo, 6, 0, what);
            expect_close(attr_num(&es[i], "data-ci-hi"), ihi, 6, 0, what);
            cr_assert_str_eq(attr(&es[i], "data-ci-excludes-zero"), ilo > 0 || ihi < 0 ? "1" : "0", "%s", what);
            n_sig += ilo > 0 || ihi < 0;
        }
        struct elem dots[64];
        cr_assert_eq(find_elems(svg, "<circle class=\"sig\"", dots, 64), n_sig, "%s: %d pair cells (each pair twice) "
                     "whose interval excludes 0", name, n_sig);
        free(svg);
    }
}

/* One real from the database (the first column of the first row), NaN when none. */
static double db_num(sqlite3 *h, const char *q)
{
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(h, q, -1, &st, NULL), SQLITE_OK, "%s: %s", q, sqlite3_errmsg(h));
    const double v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_double(st, 0) : NAN;
    sqlite3_finalize(st);
    return v;
}

/*
 * The estimates figure: a panel an attribution study, a point a unit; each point's estimate the unit's stored score,
 * its exact effect the single study's, and its place their ranks (rank 1, the largest, at the left and the top).
 */
static void check_estimates(sqlite3 *h)
{
    char *svg = slurp_path(svg_dir, "estimates.svg");
    static struct elem ps[64];
    const int np = find_elems(svg, "<g class=\"estimate-panel\"", ps, 64);
    cr_assert_eq(np, 2, "estimates.svg: %d panels, want one each for attribution and attribution-kv", np);
    cr_assert_str_eq(attr(&ps[0], "data-study"), "attribution");
    cr_assert_str_eq(attr(&ps[1], "data-study"), "attribution-kv");
    const char *kv_at = strstr(svg, "data-study=\"attribution-kv\"");
    static struct elem es[64];
    const int n = find_elems(svg, "<path d=", es, 64); /* the markers: a path each (svg.c) */
    cr_assert_eq(n, 12 + 6, "estimates.svg: %d points for 12 heads and 6 KV groups", n);
    for (int i = 0; i < n; i++) {
        cr_assert_str_eq(attr(&es[i], "class"), "point");
        const char *label = attr(&es[i], "data-label");
        const bool kv = strncmp(label, "kv:", 3) == 0;
        char q[512], what[96];
        snprintf(what, sizeof what, "estimates.svg point %s", label);
        snprintf(q, sizeof q, "SELECT score FROM unit_scores WHERE study = '%s' AND label = '%s' AND step = 0",
                 kv ? "attribution-kv" : "attribution", label);
        expect_close(attr_num(&es[i], "data-estimate"), db_num(h, q), 6, 0, what);
        snprintf(q, sizeof q, "SELECT r.loss - (SELECT r0.loss FROM sweep_jobs j0 JOIN results r0 ON r0.variant_id = "
                 "j0.variant_id WHERE j0.kind = 'baseline') FROM sweep_jobs j JOIN results r ON r.variant_id = "
                 "j.variant_id WHERE j.study = '%s' AND j.label = '%s'", kv ? "single-kv" : "single", label);
        expect_close(attr_num(&es[i], "data-exact"), db_num(h, q), 6, 0, what);
        cr_assert_eq(kv, kv_at && strstr(svg, attr(&es[i], "d")) > kv_at, "%s: in the wrong panel", what);
    }
    /* the unit of the largest effect is the leftmost point of its panel */
    for (int k = 0; k < 2; k++) {
        double best = -INFINITY, x_best = 0, x_min = INFINITY;
        for (int i = 0; i < n; i++) {
            const bool kv = strncmp(attr(&es[i], "data-label"), "kv:", 3) == 0;
            if (kv != (k == 1))
                continue;
            double x;
            cr_assert_eq(sscanf(attr(&es[i], "d"), "M%lf", &x), 1, "a point's path: %s", attr(&es[i], "d"));
            x_min = fmin(x_min, x);
            if (attr_num(&es[i], "data-exact") > best)
                best = attr_num(&es[i], "data-exact"), x_best = x;
        }
        cr_assert_float_eq(x_best, x_min, 1e-9, "panel %d: the largest effect is not drawn at rank 1", k);
    }
    free(svg);
}

/* The heatmap outlines the screen study's verified top k: the k units of its evaluations with the largest loss. */
static void check_screen_outline(sqlite3 *h)
{
    char *svg = slurp_path(svg_dir, "heatmap.svg");
    static struct elem es[16];
    const char *g = strstr(svg, "<g class=\"screen-top\"");
    cr_assert(g, "heatmap.svg: no screen outline");
    const int n = find_elems(g, "<rect x=", es, 16);
    cr_assert_geq(n, 3);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(h, "SELECT j.label FROM sweep_jobs j JOIN results r ON r.variant_id = j.variant_id "
                                       "WHERE j.study = 'screen' ORDER BY r.loss DESC LIMIT 3", -1, &st, NULL),
                 SQLITE_OK);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
        cr_assert_str_eq(attr(&es[i], "data-label"), (const char *)sqlite3_column_text(st, 0), "outline %d", i);
    }
    sqlite3_finalize(st);
    free(svg);
}

Test(report, values_drawn_equal_the_database)
{
    sweep("sweep.yaml");
    write_report(svg_dir);
    sqlite3 *h = open_ro();
    check_heatmap(h, "heatmap.svg", "single", 4);
    check_heatmap(h, "heatmap-kv.svg", "single-kv", 2);
    check_curves(h);
    check_redundancy(h);
    check_pairs(h);
    check_estimates(h);
    check_screen_outline(h);
    sqlite3_close(h);

    // the page holds each figure exactly as its file (less the XML declaration)
    char *html = tu_slurp(out_html, NULL);
    const char *files[] = {"heatmap.svg", "heatmap-kv.svg", "curves.svg", "redundancy.svg", "pairs-layer0.svg",
                           "pairs-layer1.svg", "pairs-layer2.svg", "estimates.svg"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char *svg = slurp_path(svg_dir, files[i]);
        const char *decl = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
        cr_assert(strncmp(svg, decl, strlen(decl)) == 0, "%s: no XML declaration", files[i]);
        cr_assert(strstr(html, svg + strlen(decl)), "%s is not in the page as written", files[i]);
        free(svg);
    }
    // nothing else in the folder (no temporary file left)
    DIR *d = opendir(svg_dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    cr_assert_eq(n, 8, "%d files in the SVG folder", n);
    // what was run: the plan's text (escaped by hand here), its model, versions and kernel
    char plan[1024];
    snprintf(plan, sizeof plan, "%s/plans/sweep.yaml", getenv("HP_TESTS"));
    char *text = tu_slurp(plan, NULL), esc[16384];
    size_t o = 0;
    for (const char *p = text; *p && o + 8 < sizeof esc; p++) {
        const char *r = *p == '&' ? "&amp;" : *p == '<' ? "&lt;" : *p == '>' ? "&gt;" : *p == '"' ? "&quot;"
                      : *p == '\'' ? "&#39;" : NULL;
        if (r)
            o += (size_t)snprintf(esc + o, sizeof esc - o, "%s", r);
        else
            esc[o++] = *p;
    }
    esc[o] = '\0';
    cr_assert(strstr(html, esc), "the plan's text is not in the report");
    cr_assert(strstr(html, "fixtures/llama-gqa (llama): 3 layers x 4 heads, 2 KV heads"), "model line");
    cr_assert(strstr(html, "<th>Numeric version</th><td>" HP_XSTR(HP_NUMERIC_VERSION) "</td>"), "numeric version");
    cr_assert(strstr(html, "<th>BLIS kernel</th><td>"), "kernel");
    cr_assert(strstr(html, "<th>Engine version</th><td>" HP_VERSION "</td>"), "engine version");
    cr_assert(strstr(html, "Content-Security-Policy\" content=\"default-src 'none'"), "no CSP");
    cr_assert_null(strstr(html, "<script"), "a script in the page");
    cr_assert(strstr(html, "Left out: sweep 1 has no roles study; <code>- roles</code> in the plan computes"),
              "the roles line");
    free(text);
    free(html);
}

// The number printed by the <text class="value"> at (x, y) (to 0.05 px) into *v; whether there is one.
static bool value_at(const char *svg, double x, double y, double *v)
{
    const char *start = "<text class=\"value\"";
    for (const char *p = strstr(svg, start); p; p = strstr(p + 1, start)) {
        struct elem e;
        find_elems(p, start, &e, 1);
        if (fabs(attr_num(&e, "x") - x) < 0.05 && fabs(attr_num(&e, "y") - y) < 0.05) {
            char *end;
            *v = strtod(strchr(p, '>') + 1, &end);
            cr_assert_eq(*end, '<', "a value text that is not a number: %.80s", p);
            return true;
        }
    }
    return false;
}

// The legend's labels (<text class="tick">) of the figure svg: each a round number, or the scale's end +-m.
static void check_legend(const char *svg, double m, bool linear, const char *what)
{
    const char *g = strstr(svg, linear ? "<g class=\"legend\" data-scale=\"linear\"" :
                                         "<g class=\"legend\" data-scale=\"log\"");
    cr_assert(g, "%s: no legend of the %s scale", what, linear ? "linear" : "log");
    const char *end = strstr(g, "</g>");
    int n = 0;
    double ys[32];
    for (const char *p = strstr(g, "<text class=\"tick\""); p && p < end; p = strstr(p + 1, "<text class=\"tick\"")) {
        double v = strtod(strchr(p, '>') + 1, NULL);
        struct elem e;
        find_elems(p, "<text class=\"tick\"", &e, 1);
        cr_assert_lt(n, 32);
        ys[n] = attr_num(&e, "y");
        for (int k = 0; k < n; k++) // 11 px labels: none overlaps another
            cr_assert(fabs(ys[k] - ys[n]) >= 12, "%s: legend labels %d px apart", what, (int)fabs(ys[k] - ys[n]));
        n++;
        if (v == 0 || fabs(fabs(v) - m) <= 0.05 * m) // 0, or an end (2 significant digits)
            continue;
        double mant = fabs(v) / pow(10, floor(log10(fabs(v)) + 1e-9));
        bool round = fabs(mant - 1) < 1e-9 || (linear && (fabs(mant - 2) < 1e-9 || fabs(mant - 5) < 1e-9 ||
                                                          fabs(mant - 1.5) < 1e-9 || fabs(mant - 2.5) < 1e-9));
        cr_assert(round, "%s: legend label %.10g is not round (m = %g)", what, v, m);
        cr_assert(fabs(v) <= m * 1.0001, "%s: legend label %g beyond the scale's end %g", what, v, m);
        if (!linear)
            cr_assert(fabs(v) >= m / 1000 * 0.9999, "%s: label %g below the three decades shown", what, v);
    }
    cr_assert_geq(n, 5, "%s: %d legend labels", what, n);
}

/*
 * --scale: cell colours are the diverging map at hp_symlog(e, m) (log, the default) or at e / m (linear), with m the
 * largest |effect| this file finds; each cell prints its effect to 2 significant digits at its centre; the legend
 * labels round numbers; a pair matrix's scale ends at the largest |interaction| or |single effect| of its units (its
 * interactions then read against the effects); one thread count is said once.
 */
Test(report, scales_printed_values_and_round_legend_labels)
{
    sweep("sweep.yaml");
    sqlite3 *h = open_ro();
    for (int linear = 0; linear < 2; linear++) {
        struct hp_report_opts o = {.db_path = db, .out = out_html, .svg_dir = svg_dir, .eps = 0.01,
                                   .scale = linear ? HP_REPORT_SCALE_LINEAR : HP_REPORT_SCALE_LOG};
        struct hp_report_summary sum;
        struct hp_error err = {{0}};
        cr_assert_eq(hp_report_write(&o, &sum, &err), HP_OK, "%s", err.msg);
        char *svg = slurp_path(svg_dir, "heatmap.svg");
        static struct elem es[64];
        int n = find_elems(svg, "<rect class=\"cell", es, 64);
        cr_assert_eq(n, 12);
        double m = 0, eff[12];
        for (int i = 0; i < n; i++) {
            double lo, hi, loss;
            single_effect(h, "single", i / 4, i % 4, &eff[i], &lo, &hi, &loss);
            m = fmax(m, fabs(eff[i]));
        }
        int printed = 0;
        for (int i = 0; i < n; i++) {
            char want[8], what[64];
            snprintf(what, sizeof what, "%s scale, cell %d.%d", linear ? "linear" : "log", i / 4, i % 4);
            hp_color_diverging(linear ? eff[i] / m : hp_symlog(eff[i], m), want);
            cr_assert_str_eq(attr(&es[i], "fill"), want, "%s: effect %g of %g drawn %s, want %s", what, eff[i], m,
                             attr(&es[i], "fill"), want);
            double v;
            if (value_at(svg, attr_num(&es[i], "x") + attr_num(&es[i], "width") / 2,
                         attr_num(&es[i], "y") + attr_num(&es[i], "height") / 2, &v)) {
                expect_close(v, eff[i], 2, 0, what);
                printed++;
            }
        }
        cr_assert_eq(printed, n, "%d of %d cells (56 px: room for every value) print their effect", printed, n);
        check_legend(svg, m, linear, "heatmap");
        free(svg);

        // layer 0's pairs: the scale's end is the largest |I| or |D| over every pair drawn and its units
        svg = slurp_path(svg_dir, "pairs-layer0.svg");
        double pm = 0;
        for (int l = 0; l < 3; l++)
            for (int a = 0; a < 4; a++) {
                double e, lo, hi, loss;
                single_effect(h, "single", l, a, &e, &lo, &hi, &loss);
                pm = fmax(pm, fabs(e));
            }
        static struct elem ps[32];
        int np = find_elems(svg, "<rect class=\"pair", ps, 32);
        for (int i = 0; i < np; i++)
            pm = fmax(pm, fabs(attr_num(&ps[i], "data-interaction")));
        struct elem g;
        cr_assert_eq(find_elems(svg, "<g class=\"pairs\"", &g, 1), 1);
        expect_close(attr_num(&g, "data-scale-max"), pm, 6, 0, "the pairs scale's end");
        for (int i = 0; i < np; i++) {
            double v, iv = attr_num(&ps[i], "data-interaction");
            char want[8];
            hp_color_diverging(linear ? iv / pm : hp_symlog(iv, pm), want);
            cr_assert_str_eq(attr(&ps[i], "fill"), want, "pair cell %d", i);
            if (value_at(svg, attr_num(&ps[i], "x") + attr_num(&ps[i], "width") / 2,
                         attr_num(&ps[i], "y") + attr_num(&ps[i], "height") / 2, &v))
                expect_close(v, iv, 2, 0, "a pair's printed interaction");
            else
                cr_assert_fail("pair cell %d (%s px) prints no value", i, attr(&ps[i], "width"));
        }
        check_legend(svg, pm, linear, "pairs");
        free(svg);
    }
    sqlite3_close(h);
    char *html = tu_slurp(out_html, NULL);
    const char *th = strstr(html, "<th>Threads</th><td>");
    cr_assert(th, "no threads row");
    th += strlen("<th>Threads</th><td>");
    char *end;
    long k = strtol(th, &end, 10); // the sweep ran on one thread count: "2", not "2 to 2"
    cr_assert(k >= 1 && strncmp(end, "</td>", 5) == 0, "threads row: %.40s", th);
    free(html);
}

Test(report, the_output_is_a_function_of_the_database)
{
    sweep_with_roles(true);
    write_report(NULL);
    char *a = tu_slurp(out_html, NULL);
    write_report(NULL);
    char *b = tu_slurp(out_html, NULL);
    cr_assert_str_eq(a, b, "two reports of one database differ");
    free(a), free(b);
}

// --- head roles against effect ------------------------------------------------------------

// The columns the roles figure draws a panel of (each when some head has it), in its order.
static const char *const ROLE_PANEL_COLS[] = {"prev_token",  "duplicate_token", "induction", "induction_mass",
                                              "first_token", "dominant_mass",   "entropy",   "rare_token",
                                              "sep_token"};

// head_roles.<col> of (layer, head) in sweep 1's roles study; *null when NULL.
static double role_score(sqlite3 *h, const char *col, int layer, int head, bool *null)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT h.%s FROM head_roles h JOIN sweep_roles x ON x.run_id = h.run_id WHERE x.sweep_id = 1 AND "
             "h.layer = %d AND h.head = %d",
             col, layer, head);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql, sqlite3_errmsg(h));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "no head_roles row for %d.%d", layer, head);
    *null = sqlite3_column_type(st, 0) == SQLITE_NULL;
    double v = sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    return v;
}

// The drawn point's centre: its path starts "M<x - r> <y>" (a circle of radius 3.5, svg.c's marker 0).
static void point_centre(const struct elem *e, double *x, double *y)
{
    const char *d = attr(e, "d");
    cr_assert(d && sscanf(d, "M%lf %lf", x, y) == 2, "a point without its path: %s", d ? d : "(none)");
    *x += 3.5;
}

// Every px[i] on one line through v (a linear scale): its slope.
static double expect_linear(const double *v, const double *px, int n, const char *what)
{
    int lo = 0, hi = 0;
    for (int i = 0; i < n; i++) {
        lo = v[i] < v[lo] ? i : lo;
        hi = v[i] > v[hi] ? i : hi;
    }
    cr_assert_gt(v[hi], v[lo], "%s: every value is the same", what);
    double slope = (px[hi] - px[lo]) / (v[hi] - v[lo]);
    for (int i = 0; i < n; i++)
        cr_assert(fabs(px[i] - (px[lo] + slope * (v[i] - v[lo]))) < 0.05,
                  "%s: value %g drawn at %.2f, the scale puts it at %.2f", what, v[i], px[i],
                  px[lo] + slope * (v[i] - v[lo]));
    return slope;
}

/*
 * The roles figure of sweep 1 (3 layers x 4 heads) against the database: a
 * panel for each score some head has, n_layers x n_heads points in each whose
 * scores (and offsets) are head_roles' and whose effects are the test's own
 * (single_effect), on linear scales; with_effect: the panel's rho is the rho
 * summary of `query roles` (CLI, json). Returns how many panels were drawn.
 */
static int check_roles(sqlite3 *h, bool with_effect)
{
    char *svg = slurp_path(svg_dir, "roles.svg");
    char args[512];
    snprintf(args, sizeof args, "query roles --db %s --format json", db);
    cr_assert_eq(hp(args), 0, "%s", errs);
    cJSON *answer = cJSON_Parse(out), *rho_row = cJSON_GetArrayItem(cJSON_GetObjectItem(answer, "summary"), 0);
    cr_assert_eq(rho_row != NULL, with_effect, "query roles %s a rho summary", with_effect ? "lacks" : "has");
    cr_assert(!rho_row || !strcmp(cJSON_GetObjectItem(rho_row, "label")->valuestring, "rho"), "%s", out);
    int n_panels = 0;
    double y_slope = NAN;
    for (size_t k = 0; k < sizeof ROLE_PANEL_COLS / sizeof *ROLE_PANEL_COLS; k++) {
        const char *col = ROLE_PANEL_COLS[k];
        char sql[256], key[96];
        snprintf(sql, sizeof sql, "SELECT count(h.%s) FROM head_roles h JOIN sweep_roles x ON x.run_id = h.run_id "
                                  "WHERE x.sweep_id = 1", col);
        int have = (int)sql_num(h, sql);
        snprintf(key, sizeof key, "<g class=\"role-panel\" data-role=\"%s\"", col);
        const char *g = strstr(svg, key);
        cr_assert_eq(g != NULL, have > 0, "panel %s: drawn %d, %d heads have the score", col, g != NULL, have);
        if (!g)
            continue;
        n_panels++;
        // the panel's own text: up to the next panel
        const char *next = strstr(g + 1, "<g class=\"role-panel\"");
        size_t len = next ? (size_t)(next - g) : strlen(g);
        char *panel = strndup(g, len);
        struct elem pe;
        cr_assert_eq(find_elems(panel, "<g class=\"role-panel\"", &pe, 1), 1);
        if (with_effect) {
            char want[64];
            const cJSON *rho = cJSON_GetObjectItem(rho_row, col);
            cr_assert(cJSON_IsNumber(rho), "query roles has no rho for %s", col);
            snprintf(want, sizeof want, "%.6g", rho->valuedouble); /* as the table's cell shows it */
            cr_assert_str_eq(attr(&pe, "data-rho") ? attr(&pe, "data-rho") : "(none)", want, "panel %s's rho", col);
            char caption[128];
            snprintf(caption, sizeof caption, ">Spearman rho = %s (12 heads)</text>", want);
            cr_assert(strstr(panel, caption), "panel %s: no caption '%s'", col, caption);
        } else {
            cr_assert_null(attr(&pe, "data-rho"), "panel %s has a rho without effects", col);
            cr_assert(strstr(panel, ">12 heads; no effects to rank against</text>"), "panel %s's caption", col);
        }
        static struct elem es[64];
        int n = find_elems(panel, "<path d=", es, 64);
        cr_assert_eq(n, 3 * 4, "panel %s: %d points for 3 layers x 4 heads", col, n);
        double v[64], e[64], px[64], py[64];
        for (int i = 0; i < n; i++) {
            cr_assert_str_eq(attr(&es[i], "class"), "point");
            int l = (int)attr_num(&es[i], "data-layer"), u = (int)attr_num(&es[i], "data-head");
            cr_assert(l == i / 4 && u == i % 4, "panel %s: point %d is %d.%d (points go head by head)", col, i, l, u);
            char what[96], label[16];
            snprintf(what, sizeof what, "panel %s head %d.%d", col, l, u);
            snprintf(label, sizeof label, "%d.%d", l, u);
            cr_assert_str_eq(attr(&es[i], "data-label"), label, "%s", what);
            bool null;
            double want = role_score(h, col, l, u, &null);
            cr_assert_not(null, "%s: drawn, but NULL in head_roles", what);
            v[i] = attr_num(&es[i], "data-score");
            expect_close(v[i], want, 0, 6, what);
            // the mass's offset, where the score is one
            const char *off = strcmp(col, "induction_mass") == 0 ? "induction_offset"
                              : strcmp(col, "dominant_mass") == 0 ? "dominant_offset"
                                                                 : NULL;
            bool off_null = false;
            const double off_v = off ? role_score(h, off, l, u, &off_null) : 0;
            if (off && !off_null)
                cr_assert_eq((int)attr_num(&es[i], "data-offset"), (int)off_v, "%s", what);
            else /* no offset, or one left empty (an induction mass below HP_ROLES_OFFSET_MIN_MASS) */
                cr_assert_null(attr(&es[i], "data-offset"), "%s", what);
            point_centre(&es[i], &px[i], &py[i]);
            // the tooltip: the head, its score (and effect)
            char tip[160];
            snprintf(tip, sizeof tip, "<title>%s: %s %s", label, col, attr(&es[i], "data-score"));
            cr_assert(strstr(panel, tip), "%s: no tooltip '%s'", what, tip);
            if (with_effect) {
                double eff, lo, hi, loss;
                single_effect(h, "single", l, u, &eff, &lo, &hi, &loss);
                e[i] = attr_num(&es[i], "data-effect");
                expect_close(e[i], eff, 6, 0, what);
            } else {
                cr_assert_null(attr(&es[i], "data-effect"), "%s", what);
                e[i] = l + (u + 0.5) / 4; // its place: layer l, heads top to bottom
            }
        }
        // the heads named beside their points: the three largest effects and the largest score (without
        // effects, the three largest scores), each label within a few px of its point
        static struct elem ls[16];
        int nl = find_elems(panel, "<text class=\"point-label\"", ls, 16);
        int want_n = 0;
        for (int i = 0; i < n; i++) {
            int above_e = 0, above_v = 0;
            for (int j = 0; j < n; j++) {
                above_e += e[j] > e[i] || (e[j] == e[i] && j < i);
                above_v += v[j] > v[i] || (v[j] == v[i] && j < i);
            }
            const bool named = with_effect ? above_e < 3 || above_v < 1 : above_v < 3;
            want_n += named;
            const char *lab = attr(&es[i], "data-label");
            int found = -1;
            for (int k = 0; k < nl; k++)
                if (strcmp(attr(&ls[k], "data-label"), lab) == 0)
                    found = k;
            cr_assert_eq(found >= 0, named, "panel %s: head %s %s", col, lab, named ? "not named" : "named");
            if (found >= 0) {
                const double lx = attr_num(&ls[found], "x"), ly = attr_num(&ls[found], "y");
                cr_assert(fabs(lx - px[i]) < 12 && fabs(ly - py[i]) < 12, "panel %s: %s's label at (%g, %g), its point "
                          "at (%g, %g)", col, lab, lx, ly, px[i], py[i]);
            }
        }
        cr_assert_eq(nl, want_n, "panel %s: %d labels, %d heads to name", col, nl, want_n);
        // geometry: x linear in the score (rightwards), y linear in the effect (upwards) on one scale for
        // every panel, or in the head's place (downwards)
        char what[96];
        snprintf(what, sizeof what, "panel %s x", col);
        cr_assert_gt(expect_linear(v, px, n, what), 0, "%s: a larger score drawn further left", what);
        snprintf(what, sizeof what, "panel %s y", col);
        double ys = expect_linear(e, py, n, what);
        cr_assert(with_effect ? ys < 0 : ys > 0, "%s: drawn the wrong way up", what);
        if (!isnan(y_slope))
            cr_assert(fabs(ys - y_slope) < 1e-3 * fabs(y_slope), "%s: not the other panels' scale", what);
        y_slope = ys;
        free(panel);
    }
    free(svg);
    cJSON_Delete(answer);
    return n_panels;
}

// The <title> text of the heatmap cell of (layer, unit), into out.
static void cell_title(const char *svg, int layer, int unit, char *out, size_t size)
{
    for (const char *p = strstr(svg, "<rect class=\"cell"); p; p = strstr(p + 1, "<rect class=\"cell")) {
        struct elem e;
        cr_assert_eq(find_elems(p, "<rect class=\"cell", &e, 1), 1);
        if ((int)attr_num(&e, "data-layer") != layer || (int)attr_num(&e, "data-unit") != unit)
            continue;
        const char *a = strstr(p, "<title>"), *b = a ? strstr(a, "</title>") : NULL;
        cr_assert(a && b);
        snprintf(out, size, "%.*s", (int)(b - a - 7), a + 7);
        return;
    }
    cr_assert_fail("no cell %d.%d", layer, unit);
}

/*
 * The circuits figure: a panel a circuit study, its CPR and CMD the query's, its curve a point a size, and its
 * graph the study's strongest edges (at most 50), each with the effect `query edges` gives it.
 */
static void check_circuit(sqlite3 *h)
{
    (void)h;
    char *svg = slurp_path(svg_dir, "circuit.svg");
    static struct elem ps[8], es[64];
    cr_assert_eq(find_elems(svg, "<g class=\"circuit-panel\"", ps, 8), 1, "circuit.svg: one panel");
    struct hp_error err = {0};
    struct hp_table *c = NULL, *e = NULL;
    const struct hp_query_opts qc = {.kind = HP_QUERY_CIRCUIT, .study = "circuit"},
                               qe = {.kind = HP_QUERY_EDGES, .study = "circuit", .top = 50};
    cr_assert_eq(hp_query(db, &qc, &c, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_query(db, &qe, &e, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(c->n_summary, 1);
    expect_close(attr_num(&ps[0], "data-cpr"), c->values[(size_t)(c->n_rows - 1) * c->n_cols + 4], 6, 0, "CPR");
    cr_assert_eq((int)attr_num(&ps[0], "data-sizes"), c->n_rows - 1, "a point a size");
    const int n = find_elems(svg, "<path class=\"circuit-edge\"", es, 64);
    cr_assert_eq(n, 50, "circuit.svg: %d edges drawn, want the 50 strongest", n);
    for (int i = 0; i < n; i++)
        expect_close(attr_num(&es[i], "data-effect"), e->values[(size_t)i * e->n_cols + 4], 6, 0,
                     attr(&es[i], "data-edge"));
    hp_table_free(c), hp_table_free(e);
    free(svg);
}

/*
 * The self-repair figure: a point a unit of the direct study, at its total effect (x) and direct effect (y) as the
 * database has them (the sample 0 and 1 jobs against the baseline); a point above the diagonal has direct > total.
 */
static void check_self_repair(sqlite3 *h)
{
    char *svg = slurp_path(svg_dir, "self-repair.svg");
    static struct elem es[64];
    const int n = find_elems(svg, "<path d=", es, 64); /* the markers: a path each (svg.c) */
    cr_assert_eq(n, 12, "self-repair.svg: %d points for 12 heads", n);
    double x_at[2] = {0}, y_at[2] = {0}, v_at[2] = {0};
    for (int i = 0; i < n; i++) {
        const char *label = attr(&es[i], "data-label");
        char q[512], what[96];
        snprintf(what, sizeof what, "self-repair.svg point %s", label);
        for (int sample = 0; sample < 2; sample++) {
            snprintf(q, sizeof q, "SELECT r.loss - (SELECT r0.loss FROM sweep_jobs j0 JOIN results r0 ON r0.variant_id "
                     "= j0.variant_id WHERE j0.kind = 'baseline') FROM sweep_jobs j JOIN results r ON r.variant_id = "
                     "j.variant_id WHERE j.kind = 'direct' AND j.sample = %d AND j.layer || '.' || j.unit = '%s'",
                     sample, label);
            expect_close(attr_num(&es[i], sample ? "data-direct" : "data-total"), db_num(h, q), 6, 0, what);
        }
        double x, y;
        cr_assert_eq(sscanf(attr(&es[i], "d"), "M%lf %lf", &x, &y), 2, "a point's path: %s", attr(&es[i], "d"));
        if (i < 2)
            x_at[i] = x, y_at[i] = y, v_at[i] = attr_num(&es[i], "data-total");
    }
    /* one scale, larger to the right: the order of two points' x is the order of their totals */
    if (v_at[0] != v_at[1])
        cr_assert_eq(x_at[0] < x_at[1], v_at[0] < v_at[1], "self-repair.svg: x does not grow with the total effect");
    (void)y_at;
    free(svg);
}

Test(report, roles_drawn_equal_the_database)
{
    sweep_with_roles(true);
    write_report(svg_dir);
    sqlite3 *h = open_ro();
    cr_assert_eq(check_roles(h, true), 7, "a decoder's panels: every score but rare_token");
    // the heatmap's tooltips give each head's roles, as head_roles has them
    char *svg = slurp_path(svg_dir, "heatmap.svg");
    static const char *const all[] = {"prev_token",    "duplicate_token", "induction",     "induction_offset",
                                      "induction_mass", "first_token",    "dominant_offset", "dominant_mass",
                                      "entropy",       "rare_token",     "sep_token"};
    for (int l = 0; l < 3; l++)
        for (int u = 0; u < 4; u++) {
            char title[2048];
            cell_title(svg, l, u, title, sizeof title);
            for (size_t k = 0; k < sizeof all / sizeof *all; k++) {
                bool null, offset = strstr(all[k], "_offset") != NULL;
                double v = role_score(h, all[k], l, u, &null);
                char want[96];
                if (offset)
                    snprintf(want, sizeof want, " %s %d%s", all[k], (int)v, k + 1 < 10 ? "," : "");
                else
                    snprintf(want, sizeof want, " %s %.6f", all[k], v);
                if (null)
                    cr_assert_null(strstr(title, all[k]), "cell %d.%d: %s is NULL, yet in: %s", l, u, all[k], title);
                else
                    cr_assert(strstr(title, want), "cell %d.%d: no '%s' in: %s", l, u, want, title);
            }
            cr_assert(strstr(title, " bits"), "cell %d.%d: entropy without its unit: %s", l, u, title);
        }
    free(svg);
    sqlite3_close(h);
    // the KV groups' heatmap has none (roles are per query head); the page names the query and lists the study
    svg = slurp_path(svg_dir, "heatmap-kv.svg");
    cr_assert_null(strstr(svg, "head roles"), "roles in a KV group's tooltip");
    free(svg);
    char *html = tu_slurp(out_html, NULL);
    char want[512];
    snprintf(want, sizeof want, "<code>headprune query roles --db %s --sweep 1 --study roles</code>", db);
    cr_assert(strstr(html, want), "the roles figure does not name its query");
    cr_assert(strstr(html, "<tr><td>roles</td><td>roles</td><td>heads</td>"), "what was run lacks the roles study");
    cr_assert_null(strstr(html, "Left out"), "a figure left out of a sweep with every study");
    h = open_ro();
    check_self_repair(h);
    check_circuit(h);
    sqlite3_close(h);
    free(html);
}

Test(report, roles_without_a_single_study_are_drawn_by_layer)
{
    sweep_with_roles(false);
    write_report(svg_dir);
    sqlite3 *h = open_ro();
    cr_assert_eq(check_roles(h, false), 7);
    sqlite3_close(h);
    char *html = tu_slurp(out_html, NULL);
    cr_assert(strstr(html, "The sweep has no single study over query heads, so there are no effects"), "caption");
    cr_assert(strstr(html, "Left out: sweep 1 has no single study over query heads"), "the heatmap's line");
    free(html);
}

Test(report, a_database_from_before_head_roles_says_so)
{
    sweep("sweep-small.yaml");
    exec_sql(db, "DROP TABLE sweep_roles; DROP TABLE head_roles; DROP TABLE role_runs");
    write_report(NULL);
    char *html = tu_slurp(out_html, NULL);
    cr_assert(strstr(html, "Left out: the database predates head roles"), "the roles line");
    free(html);
}

// --- escaping ---------------------------------------------------------------------

// Every '<' of text opens a tag of the report's own vocabulary (or closes one, or is a declaration).
static void expect_only_our_tags(const char *text, const char *what)
{
    static const char *const ok[] = {"svg", "g", "rect", "text", "path", "line", "circle", "polyline", "title",
                                     "html", "head", "meta", "style", "body", "header", "h1", "h2", "h3", "p",
                                     "code", "nav", "ul", "li", "a", "main", "section", "div", "table", "tr", "th",
                                     "td", "pre", "footer"};
    for (const char *p = strchr(text, '<'); p; p = strchr(p + 1, '<')) {
        const char *q = p + 1;
        if (*q == '/')
            q++;
        if (*q == '!' || *q == '?') {
            cr_assert(strncmp(p, "<!DOCTYPE html>", 15) == 0 || strncmp(p, "<?xml version=\"1.0\"", 19) == 0,
                      "%s: a declaration not ours: %.40s", what, p);
            continue;
        }
        size_t n = 0;
        while (q[n] && q[n] != ' ' && q[n] != '>' && q[n] != '/' && q[n] != '\n')
            n++;
        bool known = false;
        for (size_t k = 0; k < sizeof ok / sizeof *ok && !known; k++)
            known = strlen(ok[k]) == n && strncmp(q, ok[k], n) == 0;
        cr_assert(known, "%s: a tag not ours: %.60s", what, p);
        // and within it no event handler, no link but to the page itself
        const char *end = strchr(q, '>');
        cr_assert(end, "%s: an unclosed tag: %.60s", what, p);
        for (const char *a = q; a < end; a++) {
            if (a[0] == ' ' && a[1] == 'o' && a[2] == 'n') {
                const char *b = a + 3;
                while (b < end && *b >= 'a' && *b <= 'z')
                    b++;
                cr_assert(*b != '=', "%s: an event handler in: %.*s", what, (int)(end - p + 1), p);
            }
            if (strncmp(a, " href=\"", 7) == 0)
                cr_assert_eq(a[7], '#', "%s: a link away: %.*s", what, (int)(end - p + 1), p);
            cr_assert(strncmp(a, " src=", 5) != 0, "%s: a source attribute: %.*s", what, (int)(end - p + 1), p);
        }
    }
}

// Well-formed UTF-8 with no control character but tab, newline and carriage return.
static void expect_clean_utf8(const char *s, const char *what)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        cr_assert(*p >= 0x20 || *p == '\n' || *p == '\t' || *p == '\r', "%s: control byte 0x%02x", what, *p);
        int n = *p < 0x80 ? 1 : (*p & 0xE0) == 0xC0 ? 2 : (*p & 0xF0) == 0xE0 ? 3 : (*p & 0xF8) == 0xF0 ? 4 : 0;
        cr_assert(n && *p != 0xC0 && *p != 0xC1 && *p <= 0xF4, "%s: a byte 0x%02x that starts no UTF-8", what, *p);
        for (int i = 1; i < n; i++)
            cr_assert((p[i] & 0xC0) == 0x80, "%s: a broken UTF-8 sequence", what);
        p += n;
    }
}

Test(report, a_hostile_database_injects_no_markup)
{
    sweep_with_roles(true);
    exec_sql(db, "UPDATE plans SET text = '</pre><script>alert(1)</script>' || char(1) || char(27) || "
                 "CAST(X'FF2080C0AFEDA080' AS TEXT), name = '<i>plan</i>', path = 'a\" onmouseover=\"alert(1)';"
                 "UPDATE sweeps SET name = '<img src=x onerror=alert(1)>';"
                 "UPDATE models SET path = '\"><svg onload=alert(1)>', model_type = '</title><script>x</script>';"
                 "UPDATE datasets SET path = '<style>*{background:url(http://x.invalid/)}</style>' || char(7);"
                 "UPDATE results SET kernel = '<script src=http://x.invalid/k.js></script>', host = '&amp;<b>';"
                 "UPDATE sweep_jobs SET study = '<b class=\"x\">s''&</b>' WHERE study = 'single';"
                 "UPDATE sweep_jobs SET study = '</text><script>p</script>' WHERE study = 'pairs';"
                 "UPDATE sweep_jobs SET study = '<a href=\"http://x.invalid/\">it</a>' WHERE study = 'iterative';"
                 "UPDATE sweep_roles SET study = '</text><g onload=\"x\">r''&';");
    write_report(svg_dir);
    char *html = tu_slurp(out_html, NULL);
    expect_only_our_tags(html, "report.html");
    expect_clean_utf8(html, "report.html");
    cr_assert(strstr(html, "&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;"), "the plan text, escaped");
    cr_assert(strstr(html, "&lt;img src=x onerror=alert(1)&gt;"), "the sweep's name, escaped");
    cr_assert(strstr(html, "&lt;b class=&quot;x&quot;&gt;s&#39;&amp;&lt;/b&gt;"), "the study's name, escaped");
    cr_assert(strstr(html, "&lt;/text&gt;&lt;g onload=&quot;x&quot;&gt;r&#39;&amp;"), "the roles study, escaped");
    cr_assert(strstr(html, "<g class=\"role-panel\""), "the roles figure of the renamed study is drawn");
    cr_assert(strstr(html, "\xEF\xBF\xBD"), "invalid UTF-8 and control characters become U+FFFD");
    cr_assert_null(strstr(html, "x.invalid/\""), "a URL reached an attribute");
    DIR *d = opendir(svg_dir);
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char *svg = slurp_path(svg_dir, e->d_name);
        expect_only_our_tags(svg, e->d_name);
        expect_clean_utf8(svg, e->d_name);
        free(svg);
    }
    closedir(d);
    free(html);
}

// --- figures left out -------------------------------------------------------------------

Test(report, figures_without_their_study_are_left_out_with_a_line_naming_it)
{
    sweep("sweep-small.yaml"); // baseline and single only, on a model with grouped-query attention
    char args[512];
    snprintf(args, sizeof args, "report --db %s --out %s --svg %s", db, out_html, svg_dir);
    cr_assert_eq(hp(args), 0, "%s", errs);
    char want_out[160];
    snprintf(want_out, sizeof want_out, "%s\n", out_html);
    cr_assert_str_eq(out, want_out, "stdout: the report's path");
    char *html = tu_slurp(out_html, NULL);
    cr_assert(strstr(html, "Left out: sweep 1 has no single study over KV groups; <code>- single: {kv: true}</code>"),
              "KV heatmap line");
    cr_assert(strstr(html, "Left out: sweep 1 has no iterative or random study"), "curves line");
    cr_assert(strstr(html, "Left out: sweep 1 has no pairs study; <code>- pairs"), "pairs line");
    cr_assert(strstr(html, "no layer study in this sweep"), "redundancy's layer panel");
    cr_assert(strstr(html, "no only study in this sweep"), "redundancy's only panel");
    cr_assert(exists(strcat(strcpy((char[160]){0}, svg_dir), "/heatmap.svg")));
    cr_assert(exists(strcat(strcpy((char[160]){0}, svg_dir), "/redundancy.svg")));
    cr_assert_not(exists(strcat(strcpy((char[160]){0}, svg_dir), "/curves.svg")));
    cr_assert_not(exists(strcat(strcpy((char[160]){0}, svg_dir), "/heatmap-kv.svg")));
    cr_assert(strstr(errs, "2 figures, 7 left out"), "stderr: %s", errs);
    cr_assert(strstr(html, "Left out: sweep 1 has no attribution study; "), "estimates line");
    free(html);
}

// --- bad input: one line, exit 1, nothing written -------------------------------------------

static void expect_error(const char *args, const char *words)
{
    int rc = hp(args);
    cr_assert_eq(rc, 1, "exit %d for '%s' (stderr: %s)", rc, args, errs);
    cr_assert(strncmp(errs, "headprune: ", 11) == 0, "stderr: %s", errs);
    char *nl = strchr(errs, '\n');
    cr_assert(nl && nl[1] == '\0', "expected one line on stderr, got: %s", errs);
    cr_assert(strstr(errs, words), "stderr does not say '%s': %s", words, errs);
    cr_assert_str_empty(out, "nothing on stdout on failure, got: %s", out);
}

// No file of the folder but those named (NULL-terminated): no report, no temporary file.
static void expect_only_files(const char *dir, const char *const *names)
{
    DIR *d = opendir(dir);
    cr_assert(d);
    for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        bool ok = false;
        for (int i = 0; names[i] && !ok; i++)
            ok = strcmp(e->d_name, names[i]) == 0;
        cr_assert(ok, "%s/%s was written", dir, e->d_name);
    }
    closedir(d);
}

static const char *const AFTER_RUN[] = {"s.db", "s.db-wal", "s.db-shm", "out", "err", NULL};

Test(report, a_missing_database)
{
    char args[512];
    snprintf(args, sizeof args, "report --db %s/none.db --out %s", tmp, out_html);
    expect_error(args, "none.db: no such database");
    expect_only_files(tmp, AFTER_RUN);
}

Test(report, a_corrupt_or_foreign_database)
{
    char args[512];
    const char *junk = "this is not SQLite at all, just bytes\n";
    tu_spit(db, junk, strlen(junk));
    snprintf(args, sizeof args, "report --db %s --out %s", db, out_html);
    expect_error(args, "not a headprune database");
    expect_only_files(tmp, AFTER_RUN);
    remove(db);
    exec_sql(db, "CREATE TABLE t(x)");
    expect_error(args, "not a headprune database");
    expect_only_files(tmp, AFTER_RUN);
}

Test(report, a_damaged_sweep_is_refused_before_anything_is_drawn)
{
    sweep("sweep-small.yaml");
    exec_sql(db, "UPDATE models SET n_layers = 2000000000");
    char args[512];
    snprintf(args, sizeof args, "report --db %s --out %s --svg %s", db, out_html, svg_dir);
    expect_error(args, "out of range");
    expect_only_files(tmp, AFTER_RUN); // the SVG folder it made is gone again
}

Test(report, an_unknown_sweep)
{
    sweep("sweep-small.yaml");
    char args[512];
    snprintf(args, sizeof args, "report --db %s --sweep 7 --out %s", db, out_html);
    expect_error(args, "no sweep 7");
    expect_only_files(tmp, AFTER_RUN);
}

Test(report, an_output_that_cannot_be_written)
{
    sweep("sweep-small.yaml");
    char args[512];
    snprintf(args, sizeof args, "report --db %s --out %s/no/such/r.html", db, tmp);
    expect_error(args, "does not exist (create it first)");
    snprintf(args, sizeof args, "report --db %s --out %s", db, tmp);
    expect_error(args, "is a folder");
    snprintf(args, sizeof args, "report --db %s --out %s", db, db);
    expect_error(args, "is the database itself");
    snprintf(args, sizeof args, "report --db %s --out %s --svg %s/no/such", db, out_html, tmp);
    expect_error(args, "does not exist");
    expect_only_files(tmp, AFTER_RUN);
    // the database is intact
    snprintf(args, sizeof args, "query sweeps --db %s --format csv", db);
    cr_assert_eq(hp(args), 0, "the database was damaged: %s", errs);

    // a folder nobody may write in (root included: immutable)
    char ro[160], cmd[256];
    snprintf(ro, sizeof ro, "%s/ro", tmp);
    cr_assert_eq(mkdir(ro, 0755), 0);
    snprintf(cmd, sizeof cmd, "chattr +i %s 2>/dev/null", ro);
    if (system(cmd) != 0) {
        cr_log_warn("chattr +i is not available: the read-only folder case is not checked");
        return;
    }
    snprintf(args, sizeof args, "report --db %s --out %s/r.html", db, ro);
    int rc = hp(args);
    snprintf(cmd, sizeof cmd, "chattr -i %s", ro);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(rc, 1, "stderr: %s", errs);
    cr_assert(strstr(errs, "cannot write in folder"), "stderr: %s", errs);
    cr_assert_not(exists(strcat(strcpy((char[200]){0}, ro), "/r.html")));
}

Test(report, a_full_disk_leaves_the_old_report_whole)
{
    sweep("sweep.yaml");
    tu_spit(out_html, "old report\n", 11);
    // a file size limit far below the report's: the write fails part-way (EFBIG), as on a full disk
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "cd %s/.. && (ulimit -f 16; %s report --db %s --out %s --svg %s) >%s/out 2>%s/err </dev/null",
             getenv("HP_TESTS"), getenv("HP_HEADPRUNE"), db, out_html, svg_dir, tmp, tmp);
    int st = system(cmd);
    char p[160];
    snprintf(p, sizeof p, "%s/err", tmp);
    tu_read_into(p, errs, sizeof errs);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d, stderr: %s", st, errs);
    cr_assert(strstr(errs, "nothing was written"), "stderr: %s", errs);
    char *nl = strchr(errs, '\n');
    cr_assert(nl && nl[1] == '\0', "one line: %s", errs);
    char *now = tu_slurp(out_html, NULL);
    cr_assert_str_eq(now, "old report\n", "the old report was changed");
    free(now);
    static const char *const left[] = {"s.db", "s.db-wal", "s.db-shm", "out", "err", "r.html", NULL};
    expect_only_files(tmp, left);
}

Test(report, usage_mistakes_exit_2)
{
    cr_assert_eq(hp("report --db x.db"), 2);
    cr_assert(strstr(errs, "--out"), "%s", errs);
    cr_assert_eq(hp("report --out x.html"), 2);
    cr_assert_eq(hp("report --db x.db --out x.html --sweep 0"), 2);
    cr_assert_eq(hp("report --db x.db --out x.html extra"), 2);
    cr_assert_eq(hp("report --help"), 0);
    cr_assert(strstr(out, "Usage: headprune report"), "%s", out);
}

// --- svg.c ----------------------------------------------------------------------------------

static void expect_escape(const char *in, int max, const char *want)
{
    struct hp_text t = {0};
    hp_text_escape_cut(&t, in, max);
    cr_assert_not(t.nomem);
    cr_assert_str_eq(t.s ? t.s : "", want, "escape of %s", in);
    hp_text_free(&t);
}

Test(report, escaping_by_hand)
{
    expect_escape("a<b>&\"c'", -1, "a&lt;b&gt;&amp;&quot;c&#39;");
    expect_escape("tab\tnl\ncr\r", -1, "tab\tnl\ncr\r");
    expect_escape("\x01\x1f\x7f", -1, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");       // controls, DEL
    expect_escape("\xC2\x85", -1, "\xEF\xBF\xBD");                                   // C1 control NEL
    expect_escape("\xC0\xAF", -1, "\xEF\xBF\xBD\xEF\xBF\xBD");                       // overlong '/'
    expect_escape("\xED\xA0\x80", -1, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");       // a surrogate
    expect_escape("\xF4\x90\x80\x80", -1, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"); // past U+10FFFF
    expect_escape("\xEF\xBF\xBE", -1, "\xEF\xBF\xBD");                               // U+FFFE
    expect_escape("\xE2\x82", -1, "\xEF\xBF\xBD\xEF\xBF\xBD");                       // cut short
    expect_escape("caf\xC3\xA9 \xF0\x9F\x98\x80", -1, "caf\xC3\xA9 \xF0\x9F\x98\x80"); // é and an emoji pass
    expect_escape("\xC3\xA9\xC3\xA9\xC3\xA9", 2, "\xC3\xA9\xC3\xA9\xE2\x80\xA6");     // cut by characters
    expect_escape("<<", 1, "&lt;\xE2\x80\xA6");
    expect_escape("ab", 2, "ab");
    expect_escape("", -1, "");
}

Test(report, ticks_scales_and_colours_by_hand)
{
    double t[32], lo = 0.013, hi = 0.97;
    int n = hp_ticks(&lo, &hi, 5, t, 32);
    cr_assert_eq(n, 6);
    cr_assert(lo == 0 && fabs(hi - 1) < 1e-12 && fabs(t[1] - 0.2) < 1e-12, "0..1 by 0.2, got %g..%g", lo, hi);
    lo = -3.2, hi = 7; // 10.2 / 5 = 2.04 a step: rounded up to 5
    n = hp_ticks(&lo, &hi, 5, t, 32);
    cr_assert(n == 4 && lo == -5 && hi == 10 && t[1] == 0, "-5..10 by 5: %d ticks, %g..%g", n, lo, hi);
    lo = hi = 5;
    n = hp_ticks(&lo, &hi, 4, t, 32);
    cr_assert(n >= 2 && lo < 5 && hi > 5, "a single value is widened");

    struct hp_scale s = {0, 10, 100, 0};
    cr_assert_float_eq(hp_scale_map(&s, 2.5), 75.0, 1e-12);

    cr_assert_float_eq(hp_symlog(0, 2), 0.0, 1e-15);
    cr_assert_float_eq(hp_symlog(2, 2), 1.0, 1e-15);
    cr_assert_float_eq(hp_symlog(-2, 2), -1.0, 1e-15);
    cr_assert_float_eq(hp_symlog(0.2, 2), log(101) / log(1001), 1e-15); // m/10
    cr_assert_float_eq(hp_symlog(-0.02, 2), -log(11) / log(1001), 1e-15); // -m/100
    cr_assert_float_eq(hp_symlog(5, 2), 1.0, 1e-15);                    // clamped
    cr_assert_float_eq(hp_symlog(1, 0), 0.0, 1e-15);

    char c[8];
    hp_color_diverging(0, c);
    cr_assert_str_eq(c, "#f7f7f7");
    hp_color_diverging(1, c);
    cr_assert_str_eq(c, "#67001f");
    hp_color_diverging(-1, c);
    cr_assert_str_eq(c, "#053061");
    hp_color_diverging(0.1, c); // halfway between #f7f7f7 and #fddbc7
    cr_assert_str_eq(c, "#fae9df");
    hp_color_sequential(0, c); // viridis: matplotlib's first, middle and last entries
    cr_assert_str_eq(c, "#440154");
    hp_color_sequential(0.5, c);
    cr_assert_str_eq(c, "#21918c");
    hp_color_sequential(1, c);
    cr_assert_str_eq(c, "#fde725");
    hp_color_sequential(2, c); // clamped
    cr_assert_str_eq(c, "#fde725");
    hp_color_sequential(1.0 / 16, c); // halfway between #440154 and #472d7b
    cr_assert_str_eq(c, "#461768");
    cr_assert_str_eq(hp_color_category(0), "#0072b2");
    cr_assert_str_eq(hp_color_category(7), "#0072b2");

    char b[32];
    cr_assert_str_eq(hp_num(b, -0.0, 3), "0");
    cr_assert_str_eq(hp_num(b, NAN, 3), "");
    cr_assert_str_eq(hp_num(b, 0.0012345, 3), "0.00123");
}
