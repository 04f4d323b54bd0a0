/*
 * query_screen.c -- `screen`: a screen study's verified top k (each unit's
 * exact effect with its paired interval, its estimate and the estimate's
 * rank, and whether the walk or an audit reached it), how many exact
 * evaluations it took, and the bound its last audit gives on what it missed.
 *
 * Invariants: the top k are the k evaluated units (sweep_jobs of kind
 * 'screen') with the largest effects, ties to the larger estimate in size, then plan
 * order: the screen's own rule (engine/analysis/screen.c); the verdict (the bound,
 * the counts) is the screens row the sweep wrote when the rule stopped, and a
 * screen without one has not finished, which is said rather than guessed at.
 *
 * Must not: run the model, print, or exit.
 */
#define _POSIX_C_SOURCE 200809L

#include "headprune.h"
#include "query_priv.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct verdict {
    int units, k, evaluated, audits, population, audited, missed_max;
    double confidence;
    char estimator[32];
};

/* The screens row of the study into *v; *found false when the sweep wrote none (the screen has not finished). */
static enum hp_status load_verdict(struct hq_query *q, const char *study, struct verdict *v, bool *found)
{
    *found = false;
    bool has = false;
    enum hp_status s = hq_has_table(q, "screens", &has);
    if (s != HP_OK || !has)
        return s;
    sqlite3_stmt *st;
    if ((s = hq_prep(q, &st, "SELECT units, k, evaluated, audits, population, audited, missed_max, confidence, "
                          "estimator FROM screens WHERE sweep_id = ? AND study = ?")) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, study, -1, SQLITE_STATIC);
    const int r = hq_step(q, st, &s);
    if (r == 1) {
        int *f[] = {&v->units, &v->k, &v->evaluated, &v->audits, &v->population, &v->audited, &v->missed_max};
        for (int i = 0; i < 7; i++)
            *f[i] = sqlite3_column_int(st, i);
        v->confidence = hq_col_num(st, 7);
        snprintf(v->estimator, sizeof v->estimator, "%s", hq_col_text(st, 8));
        *found = true;
    }
    sqlite3_finalize(st);
    if (r < 0)
        return s;
    /* a forged or damaged row must not size or index anything */
    if (*found && !(v->units >= 1 && v->units <= MAX_UNITS && v->k >= 1 && v->k <= v->units && v->evaluated >= v->k &&
                    v->evaluated <= v->units && v->audits >= 0 && v->population >= 0 && v->audited >= 0 &&
                    v->audited <= v->population && v->missed_max >= 0 && isfinite(v->confidence)))
        return hp_fail(q->err, HP_ERR_FORMAT, "%s: sweep %lld's screens row of '%s' is inconsistent (k %d of %d "
                       "units, %d evaluated): the file is damaged", q->path, q->sweep, study, v->k, v->units,
                       v->evaluated);
    return HP_OK;
}

struct ev {
    const struct head_row *row;
    double est;
    int est_rank; /* 1: the largest estimate */
    int step, round;
};

/* Each evaluated unit's estimate (unit_scores of kind 'screen'), its rank among every unit's, and the evaluation's
 * place and round (sweep_jobs' step and sample). */
static enum hp_status load_estimates(struct hq_query *q, const char *study, struct ev *ev, size_t n)
{
    sqlite3_stmt *st;
    enum hp_status s = hq_prep(q, &st,
                               "SELECT u.layer, u.unit, u.score, (SELECT count(*) FROM unit_scores w WHERE "
                               "w.sweep_id = u.sweep_id AND w.study = u.study AND w.kind = u.kind AND w.step = 0 AND "
                               "(abs(w.score) > abs(u.score) OR (abs(w.score) = abs(u.score) AND (w.layer < u.layer OR "
                               "(w.layer = u.layer AND w.unit < u.unit))))) FROM unit_scores u WHERE u.sweep_id = ?1 "
                               "AND u.study = ?2 AND u.kind = 'screen' AND u.step = 0");
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, study, -1, SQLITE_STATIC);
    int r;
    while ((r = hq_step(q, st, &s)) == 1) {
        const int l = sqlite3_column_int(st, 0), u = sqlite3_column_int(st, 1);
        for (size_t i = 0; i < n; i++)
            if (ev[i].row->layer == l && ev[i].row->unit == u) {
                ev[i].est = hq_col_num(st, 2);
                ev[i].est_rank = 1 + sqlite3_column_int(st, 3);
            }
    }
    sqlite3_finalize(st);
    if (r < 0)
        return s;
    if ((s = hq_prep(q, &st, "SELECT ord, step, sample FROM sweep_jobs WHERE sweep_id = ? AND study = ? AND "
                          "kind = 'screen'")) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, study, -1, SQLITE_STATIC);
    while ((r = hq_step(q, st, &s)) == 1) {
        const long long ord = sqlite3_column_int64(st, 0);
        for (size_t i = 0; i < n; i++)
            if (ev[i].row->ord == ord)
                ev[i].step = sqlite3_column_int(st, 1), ev[i].round = sqlite3_column_int(st, 2);
    }
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

/* The screen's ranking: larger effect, then the larger estimate in size, then plan order. */
static int by_effect(const void *a, const void *b)
{
    const struct ev *x = a, *y = b;
    if (x->row->effect != y->row->effect)
        return x->row->effect > y->row->effect ? -1 : 1;
    if (fabs(x->est) != fabs(y->est))
        return fabs(x->est) > fabs(y->est) ? -1 : 1;
    if (x->row->layer != y->row->layer)
        return x->row->layer - y->row->layer;
    return x->row->unit - y->row->unit;
}

enum hp_status hq_screen(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out)
{
    struct pick p;
    enum hp_status s = hq_pick_study(q, "screen", opts->study, &p);
    if (s != HP_OK)
        return s;
    struct verdict v = {0};
    bool found = false;
    struct head_row *rows = NULL;
    size_t n = 0;
    if ((s = load_verdict(q, p.name, &v, &found)) == HP_OK)
        s = hq_rows_load(q, "screen", p.name, false, &rows, &n);
    if (s == HP_OK && !found)
        s = hp_fail(q->err, HP_ERR_ARG, "%s: sweep %lld's screen '%s' has not finished (%zu exact evaluation%s so far, "
                    "no verdict): run its plan again to finish it", q->path, q->sweep, p.name, n, n == 1 ? "" : "s");
    if (s == HP_OK && (size_t)v.evaluated != n)
        s = hp_fail(q->err, HP_ERR_FORMAT, "%s: sweep %lld's screen '%s' states %d exact evaluations, its jobs "
                    "are %zu: "
                    "the file is damaged", q->path, q->sweep, p.name, v.evaluated, n);
    struct ev *ev = s == HP_OK ? calloc(n ? n : 1, sizeof *ev) : NULL;
    if (s == HP_OK && !ev)
        s = hp_fail(q->err, HP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; s == HP_OK && i < n; i++) {
        ev[i] = (struct ev){.row = &rows[i], .est = NAN};
        if (!isfinite(rows[i].effect))
            s = hp_fail(q->err, HP_ERR_FORMAT, "%s: sweep %lld's screen '%s': %s has no finite %s", q->path, q->sweep,
                        p.name, rows[i].label, q->mname);
    }
    if (s == HP_OK)
        s = load_estimates(q, p.name, ev, n);
    if (s != HP_OK) {
        free(ev), hq_rows_free(rows, n);
        return s;
    }
    qsort(ev, n, sizeof *ev, by_effect);
    static const char *const cols[] = {"rank", "label", "layer", "unit", "exact", "ci_lo", "ci_hi", "seqs", "p",
                                       "estimate", "est_rank", "evaluation", "found_by"};
    static const bool num[] = {true, false, true, true, true, true, true, true, true, true, true, true, false};
    struct tb b;
    hq_tb_init(&b, 13, cols, num);
    for (int i = 0; i < v.k; i++) {
        const int r = hq_tb_row(&b);
        const struct ev *e = &ev[i];
        hq_tb_int(&b, r, 0, i + 1);
        hq_tb_str(&b, r, 1, e->row->label);
        hq_tb_int(&b, r, 2, e->row->layer);
        hq_tb_int(&b, r, 3, e->row->unit);
        hq_tb_num(&b, r, 4, F_EFFECT, e->row->effect);
        hq_tb_ci(&b, r, 5, &e->row->d);
        hq_tb_num(&b, r, 9, F_EFFECT, e->est);
        if (e->est_rank > 0)
            hq_tb_int(&b, r, 10, e->est_rank);
        hq_tb_int(&b, r, 11, e->step + 1);
        if (e->round > 0)
            hq_tb_fmt(&b, r, 12, "audit %d", e->round);
        else
            hq_tb_str(&b, r, 12, "walk");
    }
    const char *unit = hp_unit_name(p.kv, true);
    char bound[512];
    const double kth = v.k <= (int)n ? ev[v.k - 1].row->effect : NAN;
    if (v.population == 0)
        snprintf(bound, sizeof bound, "every one of the %d %s was evaluated, so this top %d is exact", v.units, unit,
                 v.k);
    else
        snprintf(bound, sizeof bound, "its last audit drew %d of the %d %s then unevaluated at random and found none "
                 "above the %d%s effect (%.6g), so at most %d of the %d %s never evaluated have a larger effect "
                 "(%.0f%% confidence; it is exact if none does)", v.audited, v.population, unit, v.k,
                 v.k % 10 == 1 && v.k % 100 != 11 ? "st" : v.k % 10 == 2 && v.k % 100 != 12 ? "nd"
                 : v.k % 10 == 3 && v.k % 100 != 13 ? "rd" : "th", kth, v.missed_max, v.units - v.evaluated, unit,
                 100 * v.confidence);
    hq_tb_note(&b, "screen study '%s': the exact top %d of %d %s, ranked by %s, after %d exact evaluations (%.0f%% of "
               "a single study's %d) and %d audit%s; %s. %s; estimate: the %s estimate (est_rank 1 = the largest in "
               "size, as the screen ranks), evaluation: its place among the %d, found_by: the walk in estimate order "
               "or an audit; "
               HQ_CI_NOTE("effect"), p.name, v.k,
               v.units, unit, v.estimator, v.evaluated, 100.0 * v.evaluated / v.units, v.units, v.audits,
               v.audits == 1 ? "" : "s", bound, hq_effect_convention(q->m), v.estimator, v.evaluated);
    free(ev), hq_rows_free(rows, n);
    return hq_tb_finish(&b, out, q->err);
}
