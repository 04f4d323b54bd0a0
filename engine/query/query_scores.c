/*
 * query_scores.c -- the gradient studies' questions: `importance` (each unit's
 * E|dL/dgate|, most important first) and `attribution` (each unit's
 * first-order estimate of its loss effect against the exact one, the most
 * wrongly ranked first, with rank correlations and the top-k overlap); and the
 * attribution estimates `heads` sets beside its effects (hq_heads_estimate).
 *
 * Invariants: scores are read from unit_scores at step 0; a database from
 * before schema 3 has none, and the error says so.
 *
 * Must not: compute a gradient (the sweep stored them), print, or exit.
 */
#define _POSIX_C_SOURCE 200809L

#include "headprune.h"
#include "query_priv.h"
#include "util.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// --- gradient studies: importance and attribution --------------------------------
/*
 * The sweep's gradient study of kind (importance, attribution) named want,
 * else its first by name over query heads, else its first by name (heads and
 * KV groups are never ranked together). None is an error naming the studies
 * it has, or another sweep with one.
 */
static enum hp_status pick_scores(struct hq_query *q, const char *kind, const char *want, struct pick *p)
{
    memset(p, 0, sizeof *p);
    bool yes = false;
    enum hp_status s = hq_has_table(q, "unit_scores", &yes);
    if (s != HP_OK)
        return s;
    char fix[192];
    /* where the sweep's metric has no gradient at the unmasked model (an encoder's 1 - cos), a study without a
     * mask: would be refused: the hint says what the plan takes */
    const enum hp_metric gm = hp_metric_grad_of(q->ranked);
    snprintf(fix, sizeof fix, "add %s '%s' study%s%s%s to the plan and run it", strchr("aeiou", kind[0]) ? "an" : "a",
             kind, hp_metric_grad_zero_unmasked(gm) ? " with a mask: of heads already removed (the gradient of " : "",
             hp_metric_grad_zero_unmasked(gm) ? hp_metric_grad_what(gm) : "",
             hp_metric_grad_zero_unmasked(gm) ? " is 0 at the unmasked model)" : "");
    if (!yes)
        return hp_fail(q->err, HP_ERR_ARG, "%s: sweep %lld%s has no %s study (the database predates gradient studies: "
                       "%s)", q->path, q->sweep, q->newest ? " (the newest)" : "", kind, fix);
    sqlite3_stmt *st;
    if ((s = hq_prep(q, &st, "SELECT study, max(kv) FROM unit_scores WHERE sweep_id = ? AND kind = ? AND step = 0 "
                          "GROUP BY study ORDER BY max(kv), study")) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, kind, -1, SQLITE_STATIC);
    size_t o = 0;
    int r;
    bool found = false;
    while ((r = hq_step(q, st, &s)) == 1) {
        const char *name = hq_col_text(st, 0);
        if (o + strlen(name) + 8 < sizeof p->all)
            o += (size_t)snprintf(p->all + o, sizeof p->all - o, "%s%s", o ? ", " : "", name);
        p->n_all++;
        if (!found && (!want || strcmp(name, want) == 0)) {
            snprintf(p->name, sizeof p->name, "%s", name);
            p->kv = (enum hp_unit_kind)sqlite3_column_int(st, 1);
            found = true;
        }
    }
    sqlite3_finalize(st);
    if (r < 0)
        return s;
    if (found)
        return HP_OK;
    if (p->n_all)
        return hp_fail(q->err, HP_ERR_ARG, "%s: sweep %lld%s has no %s study '%s' (its %s studies: %s)", q->path,
                       q->sweep, q->newest ? " (the newest)" : "", kind, want, kind, p->all);
    /* another sweep that has one */
    if ((s = hq_prep(q, &st, "SELECT max(sweep_id) FROM unit_scores WHERE sweep_id <> ? AND kind = ? AND step = 0")) !=
        HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, kind, -1, SQLITE_STATIC);
    r = hq_step(q, st, &s);
    long long other = r == 1 && sqlite3_column_type(st, 0) != SQLITE_NULL ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    if (r < 0)
        return s;
    char hint[256];
    if (other)
        snprintf(hint, sizeof hint, "sweep %lld does: use %s %lld", other, q->sweep_opt, other);
    else
        snprintf(hint, sizeof hint, "%s", fix);
    if (want)
        return hp_fail(q->err, HP_ERR_ARG, "%s: sweep %lld%s has no %s study '%s' (%s)", q->path, q->sweep,
                       q->newest ? " (the newest)" : "", kind, want, hint);
    return hp_fail(q->err, HP_ERR_ARG, "%s: sweep %lld%s has no %s study (%s)", q->path, q->sweep,
                   q->newest ? " (the newest)" : "", kind, hint);
}

/* Whether unit_scores has schema 9's estimator and base (a database read, never upgraded, here may not). */
static enum hp_status has_estimators(struct hq_query *q, bool *yes)
{
    sqlite3_stmt *st;
    enum hp_status s = hq_prep(q, &st, "SELECT count(*) FROM pragma_table_info('unit_scores') WHERE name = 'base'");
    if (s != HP_OK)
        return s;
    int r = hq_step(q, st, &s);
    *yes = r == 1 && sqlite3_column_int64(st, 0) > 0;
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

/* The SQL of a study's base mask (canonical text, '' none) in a query over unit_scores u joined to gradients g:
 * its base where the database has it, else its gradient's mask (before schema 9, always the base). */
static const char *base_sql(bool estimators)
{
    return estimators ? "coalesce(u.base, g.mask_text)" : "g.mask_text";
}

/* The mask (canonical text, "" for none) the study's estimates start from: its mask:, the heads already removed. */
static enum hp_status scores_mask(struct hq_query *q, const char *study, char *mask, size_t size)
{
    bool est = false;
    enum hp_status s = has_estimators(q, &est);
    if (s != HP_OK)
        return s;
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT %s FROM unit_scores u JOIN gradients g ON g.id = u.gradient_id "
             "WHERE u.sweep_id = ? AND u.study = ? AND u.step = 0 LIMIT 1", base_sql(est));
    sqlite3_stmt *st;
    if ((s = hq_prep(q, &st, sql)) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, study, -1, SQLITE_STATIC);
    mask[0] = '\0';
    int r = hq_step(q, st, &s);
    if (r == 1)
        snprintf(mask, size, "%s", hq_col_text(st, 0));
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

/* The study's rows (step 0), in (layer, unit) order. *rows is the caller's (free) even on failure. */
static enum hp_status scores_load(struct hq_query *q, const char *study, struct score_row **rows, size_t *n)
{
    sqlite3_stmt *st;
    bool est = false;
    enum hp_status s = has_estimators(q, &est);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT layer, unit, score, raw, normalize, %s FROM unit_scores "
             "WHERE sweep_id = ? AND study = ? AND step = 0 ORDER BY layer, unit",
             est ? "coalesce(estimator, CASE kind WHEN 'attribution' THEN 'atp' END)"
                 : "CASE kind WHEN 'attribution' THEN 'atp' END");
    if (s != HP_OK || (s = hq_prep(q, &st, sql)) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, study, -1, SQLITE_STATIC);
    size_t cap = 0;
    int r;
    while ((r = hq_step(q, st, &s)) == 1) {
        struct score_row *g = hq_room_for(q, *rows, (size_t)*n, &cap, sizeof *g, &s);
        if (!g) {
            r = -1;
            break;
        }
        *rows = g;
        struct score_row *h = &(*rows)[(*n)++];
        memset(h, 0, sizeof *h);
        if (!hq_col_index(q, st, 0, q->n_layers, "layer", &h->layer, &s) ||
            !hq_col_index(q, st, 1, q->n_heads, "unit", &h->unit, &s)) {
            r = -1;
            break;
        }
        h->score = hq_col_num(st, 2);
        h->raw = hq_col_num(st, 3);
        h->exact = h->rank_est = h->rank_ex = NAN;
        snprintf(h->normalize, sizeof h->normalize, "%s", hq_col_text(st, 4));
        snprintf(h->estimator, sizeof h->estimator, "%s", hq_col_text(st, 5));
    }
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

/* The sweep's attribution study over units of kind kv taken at the unmasked model, whose estimates are signed
 * estimates of what single studies measure (raw importance's are sizes): AtP's first (what `eval --grad` gives),
 * else the default's, ig-layer, else ig (name "" when none, or no unit_scores table). */
enum hp_status hq_heads_estimate(struct hq_query *q, enum hp_unit_kind kv, char *name, size_t size, struct score_row **rows,
                                 size_t *n)
{
    bool yes = false;
    enum hp_status s = hq_has_table(q, "unit_scores", &yes);
    if (s != HP_OK || !yes)
        return s;
    bool est = false;
    if ((s = has_estimators(q, &est)) != HP_OK)
        return s;
    char sql[640];
    snprintf(sql, sizeof sql, "SELECT u.study FROM unit_scores u JOIN gradients g ON g.id = u.gradient_id "
             "WHERE u.sweep_id = ? AND u.kind = 'attribution' AND u.kv = ? AND %s = '' %s ORDER BY %s u.study "
             "LIMIT 1",
             base_sql(est), est ? "AND coalesce(u.estimator, 'atp') IN ('atp', 'ig-layer', 'ig')" : "",
             est ? "CASE coalesce(u.estimator, 'atp') WHEN 'atp' THEN 0 WHEN 'ig-layer' THEN 1 ELSE 2 END," : "");
    sqlite3_stmt *st;
    if ((s = hq_prep(q, &st, sql)) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_int(st, 2, kv);
    int r = hq_step(q, st, &s);
    if (r == 1)
        snprintf(name, size, "%s", hq_col_text(st, 0));
    sqlite3_finalize(st);
    if (r < 0)
        return s;
    return name[0] ? scores_load(q, name, rows, n) : HP_OK;
}

double hq_score_at(const struct score_row *rows, size_t n, int layer, int unit)
{
    for (size_t i = 0; i < n; i++)
        if (rows[i].layer == layer && rows[i].unit == unit)
            return rows[i].score;
    return NAN;
}

static int by_score_desc(const void *a, const void *b)
{
    const struct score_row *x = a, *y = b;
    if (x->score != y->score)
        return x->score < y->score ? 1 : -1;
    return x->layer != y->layer ? x->layer - y->layer : x->unit - y->unit;
}

/* A unit's first four cells (columns 0-3: study, label, layer, unit) of row, as the score tables lay them out. */
static void unit_cells(struct tb *b, int row, const char *study, enum hp_unit_kind kv, int layer, int unit)
{
    char label[48];
    hp_unit_label(label, sizeof label, kv, layer, unit);
    hq_tb_str(b, row, 0, study);
    hq_tb_str(b, row, 1, label);
    hq_tb_int(b, row, 2, layer);
    hq_tb_int(b, row, 3, unit);
}

enum hp_status hq_importance(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out)
{
    const char *study = opts->study;
    const int top = opts->top;
    enum { C_STUDY, C_LABEL, C_LAYER, C_UNIT, C_IMP, C_RAW, C_RANK, C_N };
    static const char *const cols[C_N] = {"study", "label", "layer", "unit", "importance", "raw", "rank"};
    static const bool num[C_N] = {false, false, true, true, true, true, true};
    struct pick pk;
    enum hp_status s = pick_scores(q, "importance", study, &pk);
    struct score_row *rows = NULL;
    size_t n = 0;
    char mask[256] = "";
    if (s == HP_OK)
        s = scores_load(q, pk.name, &rows, &n);
    if (s == HP_OK)
        s = scores_mask(q, pk.name, mask, sizeof mask);
    if (s != HP_OK) {
        free(rows);
        return s;
    }
    if (n)
        hp_qsort(rows, n, sizeof *rows, by_score_desc);
    size_t shown = top > 0 && (size_t)top < n ? (size_t)top : n;
    struct tb b;
    hq_tb_init(&b, C_N, cols, num);
    for (size_t i = 0; i < shown; i++) {
        int row = hq_tb_row(&b);
        unit_cells(&b, row, pk.name, pk.kv, rows[i].layer, rows[i].unit);
        hq_tb_num(&b, row, C_IMP, F_EFFECT, rows[i].score);
        hq_tb_num(&b, row, C_RAW, F_EFFECT, rows[i].raw);
        hq_tb_int(&b, row, C_RANK, (long long)i + 1);
    }
    hq_tb_note(&b,
            "sweep %lld, study %s (%s), normalize %s; importance = E|dL/dgate| (Michel et al.): the absolute "
            "gradient of the %s at the unit's gate%s%s%s%s, per sequence, averaged as the metric weights sequences%s; "
            "raw before normalising%s; most important first",
            q->sweep, pk.name, pk.kv ? hp_unit_name(pk.kv, true) : "query heads", n ? rows[0].normalize : "?",
            hp_metric_grad_what(hp_metric_grad_of(q->ranked)),
            pk.kv != HP_UNIT_HEAD && pk.kv != HP_UNIT_MLP ? " (a unit of several heads: their gradients summed)" : "",
            mask[0] ? " with the heads of the study's mask " : "", mask, mask[0] ? " already removed (left out)" : "",
            n && strcmp(rows[0].normalize, "layer") == 0 ? ", divided by its layer's L2 norm" : "",
            pk.n_all > 1 ? "; other importance studies: choose with --study" : "");
    free(rows);
    return hq_tb_finish(&b, out, q->err);
}

static int by_rank_error_desc(const void *a, const void *b)
{
    const struct score_row *x = a, *y = b;
    double ex = fabs(x->rank_est - x->rank_ex), ey = fabs(y->rank_est - y->rank_ex);
    bool nx = isnan(ex), ny = isnan(ey);
    if (nx != ny)
        return nx ? 1 : -1;
    if (!nx && ex != ey)
        return ex < ey ? 1 : -1;
    return x->layer != y->layer ? x->layer - y->layer : x->unit - y->unit;
}

/* The exact effect, on what the gradient studies differentiate (hp_metric_grad_of the sweep's metric: loss, or
 * logit_diff), of each row's unit in the sweep's first single study over the same kind of unit. */
static enum hp_status attribution_exact(struct hq_query *q, const struct pick *pk, struct score_row *rows, size_t n,
                                        char *single, size_t size)
{
    sqlite3_stmt *st;
    enum hp_status s = hq_prep(q, &st, "SELECT study FROM sweep_jobs WHERE sweep_id = ? AND kind = 'single' AND kv = ? "
                                    "ORDER BY ord LIMIT 1");
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_int(st, 2, pk->kv);
    int r = hq_step(q, st, &s);
    if (r == 1)
        snprintf(single, size, "%s", hq_col_text(st, 0));
    sqlite3_finalize(st);
    if (r < 0)
        return s;
    if (r == 0)
        return hp_fail(q->err, HP_ERR_ARG,
                       "%s: sweep %lld%s has no single study over %s to measure attribution study '%s' against "
                       "(add 'single%s%s%s' to the plan and run it again: the estimates are kept)",
                       q->path, q->sweep, q->newest ? " (the newest)" : "",
                       pk->kv ? hp_unit_name(pk->kv, true) : "query heads", pk->name, pk->kv ? ": {units: " : "",
                       pk->kv ? hp_unit_word(pk->kv) : "", pk->kv ? "}" : "");
    const enum hp_metric gm = hp_metric_grad_of(q->ranked);
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT j.layer, j.unit, r.%s, (SELECT %s FROM results WHERE variant_id = ?3) "
             "FROM sweep_jobs j JOIN results r ON r.variant_id = j.variant_id "
             "WHERE j.sweep_id = ?1 AND j.kind = 'single' AND j.study = ?2 ORDER BY j.ord",
             hp_metric_name(gm), hp_metric_name(gm));
    if ((s = hq_prep(q, &st, sql)) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, single, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, q->base_variant);
    while ((r = hq_step(q, st, &s)) == 1) {
        int l, u;
        if (!hq_col_index(q, st, 0, q->n_layers, "layer", &l, &s) || !hq_col_index(q, st, 1, q->n_heads, "unit", &u, &s)) {
            r = -1;
            break;
        }
        for (size_t i = 0; i < n; i++) // rows are few (one a unit); the first job of a unit, as everywhere
            if (rows[i].layer == l && rows[i].unit == u && isnan(rows[i].exact))
                rows[i].exact = hq_effect_of(gm, hq_col_num(st, 2), hq_col_num(st, 3));
    }
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

/* One attribution study measured against the exact single effects. */
struct est_eval {
    char name[128], estimator[16];
    struct score_row *rows; /* (n): the units with both first (m), most wrongly ranked first */
    size_t n, m, k, hits;   /* k: the top-k's size, hits: its overlap */
    size_t reach;           /* a screen's walk by this estimate's size: the units it takes to hold the exact top k */
    double rho, tau;
};

/* The studies query attribution measures: want alone, else every attribution study over the first's kind of
 * unit taken at the unmasked model (one at a mask is refused: no single study measures its estimates). */
static enum hp_status attribution_studies(struct hq_query *q, const char *want, struct pick *pk, struct est_eval **out,
                                          size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    enum hp_status s = pick_scores(q, "attribution", want, pk);
    char mask[256] = "";
    if (s == HP_OK && (s = scores_mask(q, pk->name, mask, sizeof mask)) == HP_OK && mask[0])
        return hp_fail(q->err, HP_ERR_ARG,
                       "%s: attribution study '%s' is taken at its mask %s: each estimate is of removing a unit on "
                       "top of those heads, which no single study measures (the estimates are in the database's "
                       "unit_scores, study '%s')", q->path, pk->name, mask, pk->name);
    bool est = false;
    if (s == HP_OK)
        s = has_estimators(q, &est);
    if (s != HP_OK)
        return s;
    char sql[384];
    snprintf(sql, sizeof sql, "SELECT DISTINCT u.study FROM unit_scores u JOIN gradients g ON g.id = u.gradient_id "
             "WHERE u.sweep_id = ?1 AND u.kind = 'attribution' AND u.step = 0 AND u.kv = ?2 AND %s = '' "
             "AND (?3 IS NULL OR u.study = ?3) ORDER BY u.study", base_sql(est));
    sqlite3_stmt *st;
    if ((s = hq_prep(q, &st, sql)) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_int(st, 2, pk->kv);
    if (want)
        sqlite3_bind_text(st, 3, want, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 3);
    size_t cap = 0;
    int r;
    while ((r = hq_step(q, st, &s)) == 1) {
        struct est_eval *e = hq_room_for(q, *out, *n_out, &cap, sizeof *e, &s);
        if (!e) {
            r = -1;
            break;
        }
        *out = e;
        e = &(*out)[(*n_out)++];
        memset(e, 0, sizeof *e);
        snprintf(e->name, sizeof e->name, "%s", hq_col_text(st, 0));
    }
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

/* e's rows against the exact effects (already in them): rank correlations, top-k overlap, worst first. */
static bool attribution_rank(struct est_eval *e)
{
    struct score_row *rows = e->rows;
    const size_t n = e->n;
    size_t m = 0; // the units with both, first
    for (size_t i = 0; i < n; i++)
        if (!isnan(rows[i].exact) && !isnan(rows[i].score)) {
            struct score_row t = rows[m];
            rows[m++] = rows[i];
            rows[i] = t;
        }
    double *x = malloc((m + 1) * sizeof *x), *y = malloc((m + 1) * sizeof *y);
    double *rx = malloc((m + 1) * sizeof *rx), *ry = malloc((m + 1) * sizeof *ry);
    e->rho = e->tau = NAN;
    bool ok = x && y && rx && ry;
    for (size_t i = 0; ok && i < m; i++)
        x[i] = rows[i].score, y[i] = rows[i].exact;
    ok = ok && hq_ranks_avg(x, m, rx) && hq_ranks_avg(y, m, ry) && hq_rank_corr(x, y, m, &e->rho, &e->tau);
    const size_t k = m / 10 > 0 ? (m + 9) / 10 : (m ? 1 : 0);
    size_t hits = 0;
    for (size_t i = 0; ok && i < m; i++) {
        rows[i].rank_est = (double)m + 1 - rx[i];
        rows[i].rank_ex = (double)m + 1 - ry[i];
    }
    /* top k by each, ties broken by (layer, unit); and the reach: the latest place of an exact top-k unit in the
     * order a screen walks, by the estimate's size (sweep_screen.c: |estimate| descending, ties in plan order) */
    size_t reach = 0;
    for (size_t i = 0; ok && i < m; i++) {
        size_t above_e = 0, above_x = 0, above_w = 0; // units strictly ahead of i in each ordering
        const double wi = fabs(rows[i].score);
        for (size_t j = 0; j < m; j++) {
            bool first = rows[j].layer != rows[i].layer ? rows[j].layer < rows[i].layer : rows[j].unit < rows[i].unit;
            const double wj = fabs(rows[j].score);
            above_e += rows[j].score > rows[i].score || (rows[j].score == rows[i].score && first);
            above_x += rows[j].exact > rows[i].exact || (rows[j].exact == rows[i].exact && first);
            above_w += wj > wi || (wj == wi && first);
        }
        hits += above_e < k && above_x < k;
        if (above_x < k && above_w + 1 > reach)
            reach = above_w + 1;
    }
    free(x), free(y), free(rx), free(ry);
    if (ok)
        hp_qsort(rows, m, sizeof *rows, by_rank_error_desc);
    e->m = m, e->k = k, e->hits = hits, e->reach = reach;
    return ok;
}

/* What an estimator's estimate is, for the table's note. */
static const char *estimator_what(const char *e)
{
    if (strcmp(e, "importance") == 0)
        return "importance = E|dL_x/dgate|, the size of the effect unsigned";
    if (strcmp(e, "ig") == 0)
        return "ig = integrated gradients, every gate from 1 to 0 together";
    if (strcmp(e, "ig-layer") == 0)
        return "ig-layer = integrated gradients, a layer's gates from 1 to 0 together";
    return "atp = the first-order (AtP) estimate";
}

/*
 * How well each attribution study's estimates rank the units against the
 * exact single effects: each study's units with both (the most wrongly
 * ranked first; --top of them per study), then a row "all" per study with
 * Spearman's rho, Kendall's tau-b (hq_rank_corr, as compare) and the top-k
 * overlap, k a tenth of the units rounded up (ceil(m / 10): 1 for 1 to 10
 * units), and the reach: how many units a screen ranked by the estimate (its
 * size, as a screen walks) evaluates before it holds that exact top k, the
 * least a screen by this estimator can cost. --study: that study alone; else
 * every attribution study over the first's kind of unit taken at the unmasked
 * model, one per estimator run.
 */
enum hp_status hq_attribution(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out)
{
    const int top = opts->top;
    enum { C_STUDY, C_LABEL, C_LAYER, C_UNIT, C_EST, C_EXACT, C_RE, C_RX, C_RD, C_RHO, C_TAU, C_OVL, C_REACH,
           C_ESTIMATOR, C_N };
    static const char *const cols[C_N] = {"study", "label", "layer", "unit", "estimate", "exact", "rank_est",
                                          "rank_exact", "rank_diff", "rho", "tau", "top_k_overlap", "reach",
                                          "estimator"};
    static const bool num[C_N] = {false, false, true, true, true, true, true,
                                  true,  true,  true, true, true, true, false};
    struct pick pk;
    char single[128] = "";
    const enum hp_metric gm = hp_metric_grad_of(q->ranked); /* what the estimates and the exact effects are of */
    const char *gname = hp_metric_name(gm);
    struct est_eval *ev = NULL;
    size_t ne = 0;
    enum hp_status s = attribution_studies(q, opts->study, &pk, &ev, &ne);
    for (size_t i = 0; s == HP_OK && i < ne; i++) {
        if ((s = scores_load(q, ev[i].name, &ev[i].rows, &ev[i].n)) != HP_OK)
            break;
        snprintf(ev[i].estimator, sizeof ev[i].estimator, "%s", ev[i].n ? ev[i].rows[0].estimator : "atp");
        struct pick one = pk;
        snprintf(one.name, sizeof one.name, "%s", ev[i].name);
        if ((s = attribution_exact(q, &one, ev[i].rows, ev[i].n, single, sizeof single)) != HP_OK)
            break;
        if (!attribution_rank(&ev[i]))
            s = hp_fail(q->err, HP_ERR_NOMEM, "query: out of memory");
    }
    struct tb b;
    hq_tb_init(&b, C_N, cols, num);
    for (size_t i = 0; s == HP_OK && i < ne; i++) {
        const size_t shown = top > 0 && (size_t)top < ev[i].m ? (size_t)top : ev[i].m;
        for (size_t j = 0; j < shown; j++) {
            const struct score_row *h = &ev[i].rows[j];
            int row = hq_tb_row(&b);
            unit_cells(&b, row, ev[i].name, pk.kv, h->layer, h->unit);
            hq_tb_num(&b, row, C_EST, F_EFFECT, h->score);
            hq_tb_num(&b, row, C_EXACT, F_EFFECT, h->exact);
            hq_tb_num(&b, row, C_RE, F_EFFECT, h->rank_est);
            hq_tb_num(&b, row, C_RX, F_EFFECT, h->rank_ex);
            hq_tb_num(&b, row, C_RD, F_EFFECT, h->rank_est - h->rank_ex);
            hq_tb_str(&b, row, C_ESTIMATOR, ev[i].estimator);
        }
    }
    char each[1024] = "", whats[512] = "";
    size_t eo = 0, wo = 0;
    bool missing = false;
    for (size_t i = 0; s == HP_OK && i < ne; i++) {
        int row = hq_tb_summary_row(&b);
        hq_tb_str(&b, row, C_STUDY, ev[i].name);
        hq_tb_str(&b, row, C_LABEL, "all");
        hq_tb_num(&b, row, C_RHO, F_EFFECT, ev[i].rho);
        hq_tb_num(&b, row, C_TAU, F_EFFECT, ev[i].tau);
        if (ev[i].k) {
            hq_tb_num(&b, row, C_OVL, F_EFFECT, (double)ev[i].hits / (double)ev[i].k);
            hq_tb_num(&b, row, C_REACH, F_EFFECT, (double)ev[i].reach);
        }
        hq_tb_str(&b, row, C_ESTIMATOR, ev[i].estimator);
        char rs[32] = "undefined";
        if (!isnan(ev[i].rho))
            snprintf(rs, sizeof rs, "%.3f", ev[i].rho);
        if (eo < sizeof each)
            eo += (size_t)snprintf(each + eo, sizeof each - eo, "%s%s (%s) over %zu units: Spearman rho %s, top-%zu "
                                   "overlap %zu/%zu, reach %zu", i ? "; " : "", ev[i].name, ev[i].estimator, ev[i].m,
                                   rs, ev[i].k, ev[i].hits, ev[i].k, ev[i].reach);
        bool dup = false;
        for (size_t j = 0; j < i; j++)
            dup |= strcmp(ev[j].estimator, ev[i].estimator) == 0;
        if (!dup && wo < sizeof whats)
            wo += (size_t)snprintf(whats + wo, sizeof whats - wo, "%s%s", wo ? ", " : "",
                                   estimator_what(ev[i].estimator));
        missing |= ev[i].n > ev[i].m;
    }
    if (s == HP_OK)
        hq_tb_note(&b,
                   "sweep %lld, attribution stud%s against single study %s (%s, %s ablation): estimate = each unit's "
                   "estimate of the %s effect of masking it alone (%s), exact = its measured %s effect (%s); rank 1 "
                   "= the largest, rank_diff = rank_est - rank_exact, the most wrongly ranked first; reach = the "
                   "units a screen ranked by the estimate's size evaluates before it holds the exact top k, the "
                   "least such a screen can cost; %s (rows all; ties share their average rank)%s",
                   q->sweep, ne == 1 ? "y" : "ies", single, pk.kv ? hp_unit_name(pk.kv, true) : "query heads", q->ablation, gname,
                   whats, gname, hp_metric_effect_text(gm), each,
                   missing ? "; units without an exact effect are left out" : "");
    for (size_t i = 0; i < ne; i++)
        free(ev[i].rows);
    free(ev);
    if (s != HP_OK) {
        hp_table_free(b.t);
        return s;
    }
    return hq_tb_finish(&b, out, q->err);
}
