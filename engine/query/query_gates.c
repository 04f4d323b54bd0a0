/*
 * query_gates.c -- the gates studies' questions: `gates` (each lambda's pruned
 * set and test-time gates against the sweep's iterative and random curves at
 * the same heads kept) and `heads --gates` (each head's test-time gate at each
 * lambda, and the lambda from which it stays closed).
 *
 * Invariants: a lambda shows once its run and its points are finished; curves
 * are read between their two nearest points, never beyond their ends.
 *
 * Must not: train gates (the sweep did), print, or exit.
 */
#define _POSIX_C_SOURCE 200809L

#include "headprune.h"
#include "job.h" // the job kinds the sweep writes
#include "query_priv.h"
#include "util.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// --- gates -------------------------------------------------------------------

/* A curve as points (heads kept, value), ascending in kept, for reading it at another number of heads kept. */
struct curve_pts {
    int n;
    double kept[1024], value[1024];
};

/* The value of the curve at kept heads, linear between its two neighbouring points; NaN outside it. */
static double curve_at(const struct curve_pts *c, double kept)
{
    for (int i = 0; i < c->n; i++) {
        if (c->kept[i] == kept)
            return c->value[i];
        if (i + 1 < c->n && c->kept[i] < kept && kept < c->kept[i + 1])
            return c->value[i] + (c->value[i + 1] - c->value[i]) * (kept - c->kept[i]) / (c->kept[i + 1] - c->kept[i]);
    }
    return NAN;
}

static int by_kept(const void *a, const void *b)
{
    const double *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

/*
 * The sweep's first study of kind (iterative or random, over query heads)
 * as points (kept, value): an iterative study's steps, a random study's
 * mean at each k and the baseline at k = 0. name gets the study ("" if none).
 */
static enum hp_status curve_load(struct hq_query *q, const char *kind, struct curve_pts *c, char *name, size_t size)
{
    c->n = 0;
    name[0] = '\0';
    bool found;
    enum hp_status s = hq_first_study(q, kind, true, name, size, &found);
    if (s != HP_OK || !found)
        return s;
    sqlite3_stmt *st;
    const bool iterative = kind[0] == 'i';
    s = hq_prep_m(q, &st, iterative ? "SELECT min(v.n_ablated), min(r.%s) FROM sweep_jobs j JOIN variants v ON v.id = "
                                   "j.variant_id JOIN results r ON r.variant_id = j.variant_id WHERE j.sweep_id = ? AND "
                                   "j.study = ? AND j.kind = 'iterative' GROUP BY j.step ORDER BY j.step"
                                 : "SELECT avg(v.n_ablated), avg(r.%s) FROM sweep_jobs j JOIN variants v ON v.id = "
                                   "j.variant_id JOIN results r ON r.variant_id = j.variant_id WHERE j.sweep_id = ? AND "
                                   "j.study = ? AND j.kind = 'random' GROUP BY j.k ORDER BY j.k");
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
    const double all = q->n_present;
    if (!iterative) { /* the random curve starts at the baseline */
        c->kept[0] = all;
        c->value[0] = q->base;
        c->n = 1;
    }
    int r;
    while ((r = hq_step(q, st, &s)) == 1 && c->n < 1024) {
        double v = hq_col_num(st, 1);
        if (isnan(v))
            continue;
        c->kept[c->n] = all - sqlite3_column_double(st, 0);
        c->value[c->n++] = v;
    }
    sqlite3_finalize(st);
    /* ascending in kept: pairs (kept, value) sorted together */
    double pairs[1024][2];
    for (int i = 0; i < c->n; i++)
        pairs[i][0] = c->kept[i], pairs[i][1] = c->value[i];
    hp_qsort(pairs, (size_t)c->n, sizeof pairs[0], by_kept);
    for (int i = 0; i < c->n; i++)
        c->kept[i] = pairs[i][0], c->value[i] = pairs[i][1];
    return r < 0 ? s : HP_OK;
}

/*
 * Each lambda of the sweep's gates studies (or of the one named): its run,
 * heads kept, the pruned set's value and effect, the model at its test-time
 * gates, and beside them the sweep's first iterative and first random curves
 * over query heads read at the same number of heads kept (linear between
 * their two nearest points), with the curve that is lowest there (least
 * damage) named in `lower`.
 */
enum hp_status hq_gates(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out)
{
    const char *want = opts->study;
    enum { C_STUDY, C_LAMBDA, C_STEPS, C_OBJ, C_KEPT, C_PCT, C_VALUE, C_EFFECT, C_GATED, C_ITER, C_RAND, C_LOWER, C_N };
    const char *cols[C_N] = {"study", "lambda", "steps", "objective", "kept", "pct_kept", q->mname, "effect", "gated",
                             "iterative", "random", "lower"};
    static const bool num[C_N] = {false, true, true, true, true, true, true, true, true, true, true, false};
    sqlite3_stmt *st;
    bool has = false;
    enum hp_status s = hq_has_table(q, "sweep_gates", &has);
    if (s != HP_OK)
        return s;
    long long n_gates = 0;
    if (has) {
        if ((s = hq_prep(q, &st, "SELECT count(*) FROM sweep_gates WHERE sweep_id = ?1 AND (?2 IS NULL OR study = ?2)")) !=
            HP_OK)
            return s;
        sqlite3_bind_int64(st, 1, q->sweep);
        if (want)
            sqlite3_bind_text(st, 2, want, -1, SQLITE_STATIC);
        int r = hq_step(q, st, &s);
        n_gates = r == 1 ? sqlite3_column_int64(st, 0) : 0;
        sqlite3_finalize(st);
        if (r < 0)
            return s;
    }
    if (n_gates == 0) {
        char what[200];
        snprintf(what, sizeof what, "finished gates study%s%s%s", want ? " '" : "", want ? want : "", want ? "'" : "");
        return hq_lacking(q, "'gates'", false, want, what, "add a gates study to the plan, and let its first lambda finish");
    }
    struct curve_pts *it = malloc(sizeof *it), *rd = malloc(sizeof *rd);
    char it_name[128], rd_name[128];
    if (!it || !rd) {
        free(it), free(rd);
        return hp_fail(q->err, HP_ERR_NOMEM, "%s: out of memory", q->path);
    }
    if ((s = curve_load(q, "iterative", it, it_name, sizeof it_name)) == HP_OK)
        s = curve_load(q, "random", rd, rd_name, sizeof rd_name);
    if (s == HP_OK)
        s = hq_prep_m(q, &st,
                   "SELECT x.study, x.lambda, g.steps, g.objective, v.n_ablated, r.%s, f.%s "
                   "FROM sweep_gates x JOIN gate_runs g ON g.id = x.run_id "
                   "JOIN sweep_jobs j ON j.sweep_id = x.sweep_id AND j.study = x.study AND j.kind = 'gates' "
                   "  AND j.step = x.idx "
                   "JOIN variants v ON v.id = j.variant_id JOIN results r ON r.variant_id = j.variant_id "
                   "LEFT JOIN sweep_jobs jf ON jf.sweep_id = x.sweep_id AND jf.study = x.study "
                   "  AND jf.kind = '" HP_JOB_GATES_FRAC "' AND jf.step = x.idx "
                   "LEFT JOIN results f ON f.variant_id = jf.variant_id "
                   "WHERE x.sweep_id = ?1 AND (?2 IS NULL OR x.study = ?2) "
                   "GROUP BY x.study, x.idx ORDER BY min(j.ord)");
    if (s != HP_OK) {
        free(it), free(rd);
        return s;
    }
    sqlite3_bind_int64(st, 1, q->sweep);
    if (want)
        sqlite3_bind_text(st, 2, want, -1, SQLITE_STATIC);
    struct tb b;
    hq_tb_init(&b, C_N, cols, num);
    const double all = q->n_present;
    const int sign = hp_metric_sign(q->m);
    int r;
    while ((r = hq_step(q, st, &s)) == 1) {
        int row = hq_tb_row(&b);
        const double kept = all - sqlite3_column_double(st, 4), v = hq_col_num(st, 5);
        const double vi = curve_at(it, kept), vr = curve_at(rd, kept);
        hq_tb_str(&b, row, C_STUDY, hq_col_text(st, 0));
        hq_tb_num(&b, row, C_LAMBDA, "%.6g", hq_col_num(st, 1));
        hq_tb_int(&b, row, C_STEPS, sqlite3_column_int64(st, 2));
        hq_tb_num(&b, row, C_OBJ, F_METRIC, hq_col_num(st, 3));
        hq_tb_num(&b, row, C_KEPT, "%.6g", kept);
        hq_tb_num(&b, row, C_PCT, F_PCT, all > 0 ? 100.0 * kept / all : 0.0);
        hq_tb_num(&b, row, C_VALUE, F_METRIC, v);
        hq_tb_num(&b, row, C_EFFECT, F_EFFECT, hq_effect_of(q->m, v, q->base));
        hq_tb_num(&b, row, C_GATED, F_METRIC, hq_col_num(st, 6));
        hq_tb_num(&b, row, C_ITER, F_METRIC, vi);
        hq_tb_num(&b, row, C_RAND, F_METRIC, vr);
        /* the least damage at these heads kept, of the curves that reach them */
        const char *lower = NULL;
        double best = INFINITY;
        const double vals[3] = {v, vi, vr};
        const char *names[3] = {"gates", "iterative", "random"};
        int n_vals = 0;
        for (int k = 0; k < 3; k++)
            if (!isnan(vals[k])) {
                n_vals++;
                if (sign * vals[k] < best)
                    best = sign * vals[k], lower = names[k];
                else if (sign * vals[k] == best)
                    lower = "tie";
            }
        if (n_vals > 1 && lower)
            hq_tb_str(&b, row, C_LOWER, lower);
    }
    sqlite3_finalize(st);
    free(it), free(rd);
    if (r < 0) {
        hp_table_free(b.t);
        return s;
    }
    char absent[96];
    hq_tb_note(&b,
            "sweep %lld, %s; one row per lambda: the heads whose test-time gate is 0 pruned and evaluated exactly (%s, "
            "effect), kept = query heads kept (pct of the model's %lld%s), objective = the last training step's, gated = "
            "the model at the fractional test-time gates; iterative = %s%s%s, random = %s%s%s, each read at the same "
            "heads kept (linear between its two nearest points; empty where it does not reach); lower = the curve with "
            "the least damage there",
            q->sweep, hq_effect_convention(q->m), q->mname, (long long)all, hq_absent_note(q, absent, sizeof absent),
            it_name[0] ? "study " : "(none)", it_name,
            it_name[0] ? "'s curve" : "", rd_name[0] ? "study " : "(none)", rd_name, rd_name[0] ? "'s means" : "");
    return hq_tb_finish(&b, out, q->err);
}

/* One head of a gates study: its test-time gate at each lambda, and the lambda from which it stays closed. */
struct gate_head {
    int layer, head;
    double closes_at; /* the smallest lambda at which it is closed and stays so at every larger one; INF: never */
    double *gate;     /* (n_lambda) */
};

static int by_closing_desc(const void *a, const void *b)
{
    const struct gate_head *x = a, *y = b;
    if (x->closes_at != y->closes_at)
        return x->closes_at < y->closes_at ? 1 : -1;
    if (x->layer != y->layer)
        return x->layer - y->layer;
    return x->head - y->head;
}

/*
 * heads --gates: every query head of a gates study (named, else the sweep's
 * first) with its test-time gate at each lambda and closes_at, the lambda
 * from which its gate stays 0; the last to close first. Matrix: layers as
 * rows, heads as columns, each cell closes_at.
 */
enum hp_status hq_heads_gates(struct hq_query *q, const char *study, int top, bool matrix, struct hp_table **out)
{
    struct pick pk;
    enum hp_status s = hq_pick_study(q, "gates", study, &pk);
    if (s != HP_OK)
        return s;
    sqlite3_stmt *st;
    /* the study's lambdas, ascending */
    double lambdas[256];
    int n_lambda = 0, r;
    if ((s = hq_prep(q, &st, "SELECT lambda FROM sweep_gates WHERE sweep_id = ? AND study = ? ORDER BY idx")) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, pk.name, -1, SQLITE_STATIC);
    while ((r = hq_step(q, st, &s)) == 1 && n_lambda < 256)
        lambdas[n_lambda++] = sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    if (r < 0)
        return s;
    if (n_lambda == 0)
        return hp_fail(q->err, HP_ERR_ARG, "%s: sweep %lld's gates study '%s' has no finished lambda yet (let it run)",
                       q->path, q->sweep, pk.name);
    const int H = q->n_heads, n = q->n_layers * H;
    struct gate_head *rows = calloc((size_t)n, sizeof *rows);
    double *gates = malloc((size_t)n * n_lambda * sizeof *gates);
    if (!rows || !gates) {
        free(rows), free(gates);
        return hp_fail(q->err, HP_ERR_NOMEM, "%s: out of memory", q->path);
    }
    for (int i = 0; i < n; i++) {
        rows[i] = (struct gate_head){i / H, i % H, INFINITY, gates + (size_t)i * n_lambda};
        for (int k = 0; k < n_lambda; k++)
            rows[i].gate[k] = NAN;
    }
    s = hq_prep(q, &st, "SELECT x.idx, h.layer, h.head, h.gate FROM sweep_gates x JOIN gate_heads h ON h.run_id = x.run_id "
                     "WHERE x.sweep_id = ? AND x.study = ? ORDER BY x.idx");
    if (s == HP_OK) {
        sqlite3_bind_int64(st, 1, q->sweep);
        sqlite3_bind_text(st, 2, pk.name, -1, SQLITE_STATIC);
        while ((r = hq_step(q, st, &s)) == 1) {
            int k = sqlite3_column_int(st, 0), l, h;
            if (!hq_col_index(q, st, 1, q->n_layers, "layer", &l, &s) || !hq_col_index(q, st, 2, H, "head", &h, &s)) {
                r = -1;
                break;
            }
            if (k >= 0 && k < n_lambda)
                rows[l * H + h].gate[k] = sqlite3_column_double(st, 3);
        }
        sqlite3_finalize(st);
        if (r < 0 && s == HP_OK)
            s = HP_ERR_FORMAT;
    }
    if (s != HP_OK) {
        free(rows), free(gates);
        return s;
    }
    for (int i = 0; i < n; i++)
        for (int k = n_lambda - 1; k >= 0 && rows[i].gate[k] == 0.0; k--)
            rows[i].closes_at = lambdas[k];
    struct tb b;
    if (matrix) {
        if (H > MATRIX_MAX_UNITS) {
            free(rows), free(gates);
            return hp_fail(q->err, HP_ERR_ARG, "%s: sweep %lld's model has %d heads a layer, too many for a matrix (at "
                           "most %d; use --format csv)", q->path, q->sweep, H, MATRIX_MAX_UNITS);
        }
        const char **cols = calloc((size_t)H + 1, sizeof *cols);
        bool *num = calloc((size_t)H + 1, sizeof *num);
        char(*names)[16] = calloc((size_t)H + 1, sizeof *names);
        if (!cols || !num || !names) {
            free(cols), free(num), free(names), free(rows), free(gates);
            return hp_fail(q->err, HP_ERR_NOMEM, "%s: out of memory", q->path);
        }
        cols[0] = "layer";
        num[0] = true;
        for (int h = 0; h < H; h++) {
            snprintf(names[h], sizeof names[h], "%d", h);
            cols[h + 1] = names[h];
            num[h + 1] = true;
        }
        hq_tb_init(&b, H + 1, cols, num);
        free(cols), free(num), free(names);
        for (int l = 0; l < q->n_layers; l++) {
            int row = hq_tb_row(&b);
            hq_tb_int(&b, row, 0, l);
            for (int h = 0; h < H; h++)
                hq_tb_num(&b, row, h + 1, "%.3g", isinf(rows[l * H + h].closes_at) ? NAN : rows[l * H + h].closes_at);
        }
        hq_tb_note(&b, "sweep %lld, gates study %s; rows: layers, columns: query heads, each cell the lambda from which "
                "the head's test-time gate stays 0 (empty: open at every lambda, %d of them from %g to %g)",
                q->sweep, pk.name, n_lambda, lambdas[0], lambdas[n_lambda - 1]);
    } else {
        enum { C_STUDY, C_LABEL, C_LAYER, C_HEAD, C_CLOSES, C_FIRST };
        const int n_cols = C_FIRST + n_lambda;
        const char **cols = calloc((size_t)n_cols, sizeof *cols);
        bool *num = calloc((size_t)n_cols, sizeof *num);
        char(*names)[40] = calloc((size_t)n_lambda, sizeof *names);
        if (!cols || !num || !names) {
            free(cols), free(num), free(names), free(rows), free(gates);
            return hp_fail(q->err, HP_ERR_NOMEM, "%s: out of memory", q->path);
        }
        const char *fixed[] = {"study", "label", "layer", "head", "closes_at"};
        for (int c = 0; c < C_FIRST; c++)
            cols[c] = fixed[c], num[c] = c >= C_LAYER;
        for (int k = 0; k < n_lambda; k++) {
            snprintf(names[k], sizeof names[k], "gate@%g", lambdas[k]);
            cols[C_FIRST + k] = names[k];
            num[C_FIRST + k] = true;
        }
        hq_tb_init(&b, n_cols, cols, num);
        free(cols), free(num), free(names);
        hp_qsort(rows, (size_t)n, sizeof *rows, by_closing_desc);
        const int shown = top > 0 && top < n ? top : n;
        for (int i = 0; i < shown; i++) {
            int row = hq_tb_row(&b);
            char label[32];
            hp_unit_label(label, sizeof label, false, rows[i].layer, rows[i].head);
            hq_tb_str(&b, row, C_STUDY, pk.name);
            hq_tb_str(&b, row, C_LABEL, label);
            hq_tb_int(&b, row, C_LAYER, rows[i].layer);
            hq_tb_int(&b, row, C_HEAD, rows[i].head);
            hq_tb_num(&b, row, C_CLOSES, "%.6g", isinf(rows[i].closes_at) ? NAN : rows[i].closes_at);
            for (int k = 0; k < n_lambda; k++)
                hq_tb_num(&b, row, C_FIRST + k, "%.6g", rows[i].gate[k]);
        }
        char others[600];
        others[0] = '\0';
        if (pk.n_all > 1)
            snprintf(others, sizeof others, "; the sweep's gates studies: %s (choose one with --study)", pk.all);
        hq_tb_note(&b, "sweep %lld, gates study %s; each head's test-time gate at each lambda (0 = pruned), closes_at = "
                "the lambda from which it stays 0 (empty: open at every lambda); the last to close first%s",
                q->sweep, pk.name, others);
    }
    free(rows), free(gates);
    return hq_tb_finish(&b, out, q->err);
}
