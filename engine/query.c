/*
 * query.c -- read a results database and answer questions about its sweeps
 * as tables of strings (struct hp_table) for the CLI to print.
 *
 * Effects: every query but `sweeps` and `sql` measures a variant against its
 * sweep's baseline on one metric M (the sweep's unless the caller names
 * one), signed so that larger = worse:
 *   loss  variant - baseline         kl   the variant's KL (the baseline's is 0)
 *   acc   baseline - variant         cos  baseline - variant
 * Each table's note states the convention in use.
 *
 * Confidence intervals are 95% Student t intervals with n - 1 degrees of
 * freedom (mean +- t * sd / sqrt(n)); with n = 1 there is none (empty cells).
 * `heads` and `sets` pair the variant with the baseline sequence by sequence.
 *
 * Studies: `heads` and `compare` read one single study at a time (named, else
 * the sweep's first over query heads), never heads and KV groups together.
 * `compare` reads two sweeps, in one database or two (each side its own
 * connection and snapshot, shared when both name one file), each against its
 * own baseline, and ranks their units with Spearman's rho and Kendall's tau-b.
 * A sweep that lacks what a query needs is an error that names another sweep
 * of the database that has it (lacking).
 *
 * Readers (query_int.h): the report asks several of these questions of one
 * sweep through one connection and one read transaction, and two more that
 * only it needs: what was run (hp_query_run_info) and which studies a sweep
 * has (hp_query_studies). hp_query is a reader of one question.
 *
 * Invariants: the database is opened read-only and version-checked by the
 * store (hp_store_open_read: SQLITE_OPEN_READONLY and PRAGMA query_only), with
 * a busy timeout because a sweep may be writing to it in WAL mode; SQLite's
 * errors are translated by the store (hp_store_read_fail); all reads of one query run in one read transaction, so
 * they see one snapshot. Numbers are formatted here (metrics %.6f, effects
 * and intervals %.6g, percentages %.2f, integers plain) and their columns
 * marked numeric; each such cell also carries its number as its text shows
 * it (struct hp_table's values). NULL cells are empty.
 *
 * Must not: write to the database, know about models or tensors beyond the
 * rows of the store, print, or exit.
 */
#define _POSIX_C_SOURCE 200809L

#include "headprune.h"
#include "query_int.h"
#include "store_int.h" // hp_store_open_read: opened and version-checked by the store
#include "util_int.h"

#include <gsl/gsl_cdf.h>
#include <sqlite3.h>

#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// A sweep may be writing: wait this long for its lock before giving up.
#define BUSY_TIMEOUT_MS 10000

// --- tables -----------------------------------------------------------------

void hp_table_free(struct hp_table *t)
{
    if (!t)
        return;
    for (int c = 0; c < t->n_cols; c++)
        free(t->cols ? t->cols[c] : NULL);
    if (t->cells)
        for (size_t i = 0; i < (size_t)t->n_rows * (size_t)t->n_cols; i++)
            free(t->cells[i]);
    free(t->cols);
    free(t->numeric);
    free(t->cells);
    free(t->values);
    free(t->note);
    free(t);
}

/*
 * A table under construction. Allocation failures are sticky: every setter
 * becomes a no-op after the first one and tb_finish reports it, so the
 * queries can fill tables without checking each call.
 */
struct tb {
    struct hp_table *t;
    int cap; // rows allocated
    bool nomem;
};

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

// cols: (n_cols) names; numeric: (n_cols) flags.
static void tb_init(struct tb *b, int n_cols, const char *const *cols, const bool *numeric)
{
    memset(b, 0, sizeof *b);
    b->t = calloc(1, sizeof *b->t);
    if (!b->t) {
        b->nomem = true;
        return;
    }
    // at least one slot: an SQL statement may have no result columns
    b->t->cols = calloc((size_t)n_cols + 1, sizeof *b->t->cols);
    b->t->numeric = calloc((size_t)n_cols + 1, sizeof *b->t->numeric);
    if (!b->t->cols || !b->t->numeric) {
        b->nomem = true;
        return;
    }
    b->t->n_cols = n_cols;
    for (int c = 0; c < n_cols; c++) {
        b->t->cols[c] = dup_str(cols[c]);
        b->t->numeric[c] = numeric[c];
        if (!b->t->cols[c])
            b->nomem = true;
    }
}

// A new row of empty cells: its index, or -1 after an allocation failure.
static int tb_row(struct tb *b)
{
    if (b->nomem)
        return -1;
    struct hp_table *t = b->t;
    if (t->n_rows == b->cap) {
        int cap = b->cap ? 2 * b->cap : 16;
        char **cells = realloc(t->cells, (size_t)cap * ((size_t)t->n_cols + 1) * sizeof *cells);
        if (cells)
            t->cells = cells;
        double *values = cells ? realloc(t->values, (size_t)cap * ((size_t)t->n_cols + 1) * sizeof *values) : NULL;
        if (!values) {
            b->nomem = true;
            return -1;
        }
        t->values = values;
        b->cap = cap;
    }
    for (int c = 0; c < t->n_cols; c++) {
        t->cells[(size_t)t->n_rows * (size_t)t->n_cols + (size_t)c] = NULL;
        t->values[(size_t)t->n_rows * (size_t)t->n_cols + (size_t)c] = NAN;
    }
    return t->n_rows++;
}

// A cell's text and its number (NaN: the text is not a number).
static void tb_cell(struct tb *b, int r, int c, const char *s, double value)
{
    if (b->nomem || r < 0 || !s)
        return;
    assert(c >= 0 && c < b->t->n_cols);
    size_t i = (size_t)r * (size_t)b->t->n_cols + (size_t)c;
    free(b->t->cells[i]);
    b->t->values[i] = value;
    if (!(b->t->cells[i] = dup_str(s)))
        b->nomem = true;
}

static void tb_str(struct tb *b, int r, int c, const char *s)
{
    tb_cell(b, r, c, s, NAN);
}

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static void tb_fmt(struct tb *b, int r, int c, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    tb_str(b, r, c, buf);
}

/*
 * x with one of the house formats; NaN (a NULL or an undefined value) stays
 * empty. The cell's number is x as the text rounds it (strtod of the text),
 * so a JSON or report writer shows the value a reader of the table sees.
 */
static void tb_num(struct tb *b, int r, int c, const char *fmt, double x)
{
    if (isnan(x))
        return;
    if (x == 0.0)
        x = 0.0; // no "-0"
    char buf[64];
    snprintf(buf, sizeof buf, fmt, x);
    tb_cell(b, r, c, buf, strtod(buf, NULL));
}

static void tb_int(struct tb *b, int r, int c, long long v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", v);
    tb_cell(b, r, c, buf, (double)v);
}

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void tb_note(struct tb *b, const char *fmt, ...)
{
    if (b->nomem)
        return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    free(b->t->note);
    if (!(b->t->note = dup_str(buf)))
        b->nomem = true;
}

static const char *col_text(sqlite3_stmt *st, int i);

/*
 * Column sc of st's row, as SQLite renders it, into cell (row, c); blobs as x'hex', NULL empty.
 * An integer's number is exact; a real's is the one SQLite's text shows (it
 * renders 15 significant digits), so text and number agree.
 */
static void tb_sql_at(struct tb *b, int row, int c, sqlite3_stmt *st, int sc)
{
    int type = sqlite3_column_type(st, sc);
    if (type == SQLITE_NULL)
        return;
    if (type == SQLITE_INTEGER) {
        double v = (double)sqlite3_column_int64(st, sc);
        tb_cell(b, row, c, col_text(st, sc), v);
        return;
    }
    if (type == SQLITE_FLOAT) {
        const char *text = col_text(st, sc);
        tb_cell(b, row, c, text, strtod(text, NULL));
        return;
    }
    if (type != SQLITE_BLOB) {
        tb_str(b, row, c, col_text(st, sc));
        return;
    }
    const unsigned char *p = sqlite3_column_blob(st, sc);
    size_t n = (size_t)sqlite3_column_bytes(st, sc);
    char *hex = malloc(2 * n + 4);
    if (!hex) {
        b->nomem = true;
        return;
    }
    char *o = hex;
    *o++ = 'x';
    *o++ = '\'';
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        *o++ = digits[p[i] >> 4];
        *o++ = digits[p[i] & 15];
    }
    *o++ = '\'';
    *o = '\0';
    tb_str(b, row, c, hex);
    free(hex);
}

// Column c of st's row into cell (row, c), as tb_sql_at.
static void tb_sql(struct tb *b, int row, int c, sqlite3_stmt *st)
{
    tb_sql_at(b, row, c, st, c);
}

static enum hp_status tb_finish(struct tb *b, struct hp_table **out, struct hp_error *err)
{
    if (b->nomem) {
        hp_table_free(b->t);
        b->t = NULL;
        return hp_fail(err, HP_ERR_NOMEM, "query: out of memory");
    }
    *out = b->t;
    b->t = NULL;
    return HP_OK;
}

// Formats: metric values, effects and intervals, percentages.
#define F_METRIC "%.6f"
#define F_EFFECT "%.6g"
#define F_PCT "%.2f"

// --- statistics -------------------------------------------------------------

// Running mean and sum of squared deviations (Welford), in double.
struct acc {
    long long n;
    double mean, m2;
};

static void acc_add(struct acc *a, double x)
{
    a->n++;
    double d = x - a->mean;
    a->mean += d / (double)a->n;
    a->m2 += d * (x - a->mean);
}

/* 95% t interval of the mean (n - 1 df) and the two-sided p-value of
 * mean = 0; NaN where undefined (n < 2; p also when sd = 0). */
static void acc_ci(const struct acc *a, double *lo, double *hi, double *p)
{
    *lo = *hi = NAN;
    if (p)
        *p = NAN;
    if (a->n < 2)
        return;
    double df = (double)(a->n - 1);
    double se = sqrt(a->m2 / df) / sqrt((double)a->n);
    double t = gsl_cdf_tdist_Pinv(0.975, df);
    *lo = a->mean - t * se;
    *hi = a->mean + t * se;
    if (p && se > 0)
        *p = 2.0 * gsl_cdf_tdist_Q(fabs(a->mean) / se, df);
}

// --- metrics and effects ----------------------------------------------------

// Damage of a variant with value v against baseline value b, signed by the
// metric table so that larger = worse. KL already measures the distance from
// the unmasked model: the variant's own value.
static double effect_of(enum hp_metric m, double v, double b)
{
    if (m == HP_METRIC_KL)
        return v;
    return hp_metric_sign(m) > 0 ? v - b : b - v;
}

static const char *effect_convention(enum hp_metric m)
{
    return hp_metric_effect_text(m);
}

// --- the connection ---------------------------------------------------------

struct q {
    sqlite3 *db;
    const char *path;
    struct hp_error *err;
    /* set for the sweep queries: */
    long long sweep;
    enum hp_metric m;
    const char *mname; // hp_metric_name(m): safe to paste into SQL
    int n_layers, n_heads;
    int n_kv_heads; // 0 when unknown or uneven
    int n_present;  // the query heads the model has: n_layers * n_heads less those a pruned checkpoint lacks
    bool full_mask; // curve: also each step's cumulative mask
    int cv_kept;    // curve: the column of query heads kept (-1: none, for a curve without gates studies)
    long long base_variant;
    double base; // the baseline's value of the metric
    enum hp_metric ranked; // the sweep's own metric, which its iterative studies ranked units by
    bool ranked_missing; // ... and it has no value (sweeps from before plans were checked against the model)
    char ablation[16];   // the sweep's: zero, mean, mean-pos
    char name[128];      // the sweep's (its plan's) name
    bool newest;         // the caller named no sweep: this is the newest
    const char *sweep_opt; // the option that names this sweep, for hints: "--sweep" ("--sweep2" for compare's B)
};

// One line for an SQLite failure on our own statements, naming the database (the store translates it).
static enum hp_status sql_fail(struct q *q, int rc)
{
    return hp_store_read_fail(q->db, q->path, rc, q->err);
}

static enum hp_status prep(struct q *q, sqlite3_stmt **st, const char *sql)
{
    int rc = sqlite3_prepare_v2(q->db, sql, -1, st, NULL);
    if (rc != SQLITE_OK) {
        *st = NULL;
        return sql_fail(q, rc);
    }
    return HP_OK;
}

/* Prepare sql after substituting the metric's column name for every "%s"
 * (the name comes from the metric table, never from the user). */
static enum hp_status prep_m(struct q *q, sqlite3_stmt **st, const char *sql)
{
    char buf[2048];
    size_t o = 0, n = strlen(q->mname);
    for (const char *s = sql; *s; s++) {
        bool subst = s[0] == '%' && s[1] == 's';
        if (o + (subst ? n : 1) >= sizeof buf) {
            assert(!"SQL text longer than prep_m's buffer");
            return hp_fail(q->err, HP_ERR_SQL, "query: internal statement too long");
        }
        if (subst) {
            memcpy(buf + o, q->mname, n);
            o += n;
            s++;
        } else {
            buf[o++] = *s;
        }
    }
    buf[o] = '\0';
    return prep(q, st, buf);
}

// sqlite3_step: 1 = a row, 0 = done, -1 = failed (err set via *st_out).
/* arr (n elements of size bytes used, *cap held) with room for one more, doubling; NULL when out of memory
 * (*st and q's error set; arr is left as it was, for its owner to free). */
static void *room_for(struct q *q, void *arr, size_t n, size_t *cap, size_t size, enum hp_status *st)
{
    if (n < *cap)
        return arr;
    const size_t want = *cap ? 2 * *cap : 64;
    void *g = realloc(arr, want * size);
    if (!g) {
        *st = hp_fail(q->err, HP_ERR_NOMEM, "query: out of memory");
        return NULL;
    }
    *cap = want;
    return g;
}

static int step(struct q *q, sqlite3_stmt *st, enum hp_status *st_out)
{
    return hp_store_read_step(q->db, q->path, q->err, st, st_out);
}

static double col_num(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

static const char *col_text(sqlite3_stmt *st, int i)
{
    const unsigned char *s = sqlite3_column_text(st, i);
    return s ? (const char *)s : "";
}

/*
 * Numbers in the database are input like any other: a damaged or forged file
 * must not size an allocation or index an array. Bounds far above any real
 * model's, far below what could exhaust memory or overflow an int.
 */
#define MAX_LAYERS 65536
#define MAX_HEADS 65536
#define MAX_UNITS (1 << 24) // n_layers * n_heads

/* A layer or unit index from a row: -1 for NULL, else it must lie in
 * [0, lim); false (with *s set, naming the database and the value) if not. */
static bool col_index(struct q *q, sqlite3_stmt *st, int i, int lim, const char *what, int *out, enum hp_status *s)
{
    if (sqlite3_column_type(st, i) == SQLITE_NULL) {
        *out = -1;
        return true;
    }
    long long v = sqlite3_column_int64(st, i);
    if (v < 0 || v >= lim) {
        *s = hp_fail(q->err, HP_ERR_FORMAT,
                     "%s: sweep_jobs.%s = %lld in sweep %lld is out of range (0..%d for its model; a damaged database?)",
                     q->path, what, v, q->sweep, lim - 1);
        return false;
    }
    *out = (int)v;
    return true;
}

// --- the sweep, its metric and baseline --------------------------------------

static enum hp_status has_table(struct q *q, const char *name, bool *yes);

/*
 * q->n_present: the heads the sweep's model has, the one count every curve,
 * query and figure measures "kept" and "pruned" against (a head a pruned
 * checkpoint lacks is neither; docs/database.md). A database from before
 * schema 5 names no missing heads: every head counts.
 */
static enum hp_status count_present(struct q *q)
{
    q->n_present = q->n_layers * q->n_heads;
    bool has = false;
    enum hp_status s = has_table(q, "pruned_heads", &has);
    if (s != HP_OK || !has)
        return s;
    sqlite3_stmt *st;
    if ((s = prep(q, &st, "SELECT count(*) FROM pruned_heads p JOIN sweeps s ON s.model_id = p.model_id "
                          "WHERE s.id = ? AND p.layer >= 0 AND p.layer < ? AND p.head >= 0 AND p.head < ?")) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_int(st, 2, q->n_layers);
    sqlite3_bind_int(st, 3, q->n_heads);
    int r = step(q, st, &s);
    if (r == 1)
        q->n_present -= (int)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

static enum hp_status resolve_sweep(struct q *q, long long id, const char *metric)
{
    sqlite3_stmt *st;
    enum hp_status s = HP_OK;
    q->newest = id == 0;
    if (id == 0) {
        if ((s = prep(q, &st, "SELECT max(id) FROM sweeps")) != HP_OK)
            return s;
        int r = step(q, st, &s);
        bool any = r == 1 && sqlite3_column_type(st, 0) != SQLITE_NULL;
        if (any)
            id = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        if (r < 0)
            return s;
        if (!any)
            return hp_fail(q->err, HP_ERR_ARG, "%s: no sweeps yet (run `headprune run` first)", q->path);
    }
    q->sweep = id;

    if ((s = prep(q, &st,
                  "SELECT s.metric, m.n_layers, m.n_heads, m.n_kv_heads, s.ablation, s.name FROM sweeps s "
                  "LEFT JOIN models m ON m.id = s.model_id "
                  "WHERE s.id = ?")) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, id);
    int r = step(q, st, &s);
    char sweep_metric[32] = "";
    long long n_layers = 0, n_heads = 0, n_kv = 0;
    bool null_shape = false;
    if (r == 1) {
        snprintf(sweep_metric, sizeof sweep_metric, "%s", col_text(st, 0));
        null_shape = sqlite3_column_type(st, 1) == SQLITE_NULL || sqlite3_column_type(st, 2) == SQLITE_NULL;
        n_layers = sqlite3_column_int64(st, 1);
        n_heads = sqlite3_column_int64(st, 2);
        n_kv = sqlite3_column_int64(st, 3);
        snprintf(q->ablation, sizeof q->ablation, "%s", col_text(st, 4));
        snprintf(q->name, sizeof q->name, "%s", col_text(st, 5));
    }
    sqlite3_finalize(st);
    if (r < 0)
        return s;
    if (r == 0)
        return hp_fail(q->err, HP_ERR_ARG, "%s: no sweep %lld (list them with `headprune query sweeps`)", q->path, id);
    if (null_shape)
        return hp_fail(q->err, HP_ERR_FORMAT, "%s: sweep %lld names no model with layers and heads", q->path, id);
    if (n_layers < 1 || n_layers > MAX_LAYERS)
        return hp_fail(q->err, HP_ERR_FORMAT, "%s: models.n_layers = %lld for sweep %lld is out of range (1..%d; a "
                                              "damaged database?)", q->path, n_layers, id, MAX_LAYERS);
    if (n_heads < 1 || n_heads > MAX_HEADS || n_layers * n_heads > MAX_UNITS)
        return hp_fail(q->err, HP_ERR_FORMAT, "%s: models.n_heads = %lld for sweep %lld is out of range (1..%d, and "
                                              "at most %d heads in all; a damaged database?)", q->path, n_heads, id,
                       MAX_HEADS, MAX_UNITS);
    q->n_layers = (int)n_layers;
    q->n_heads = (int)n_heads;
    /* only for naming KV groups: a count that does not divide the heads names heads instead */
    q->n_kv_heads = n_kv >= 1 && n_kv <= n_heads && n_heads % n_kv == 0 ? (int)n_kv : 0;
    if ((s = count_present(q)) != HP_OK)
        return s;

    if (metric) {
        if (!hp_metric_parse(metric, &q->m))
            return hp_fail(q->err, HP_ERR_ARG, "%s: unknown metric '%s' (one of loss, kl, acc, cos)", q->path, metric);
    } else if (!hp_metric_parse(sweep_metric, &q->m)) {
        return hp_fail(q->err, HP_ERR_FORMAT, "%s: sweep %lld has an unknown metric '%s' (name one: loss, kl, acc, cos)",
                       q->path, id, sweep_metric);
    }
    q->mname = hp_metric_name(q->m);
    q->ranked = q->m;
    hp_metric_parse(sweep_metric, &q->ranked);

    if ((s = prep_m(q, &st,
                    "SELECT j.variant_id, r.%s FROM sweep_jobs j JOIN results r ON r.variant_id = j.variant_id "
                    "WHERE j.sweep_id = ? AND j.kind = 'baseline' ORDER BY j.ord LIMIT 1")) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, id);
    r = step(q, st, &s);
    if (r == 1) {
        q->base_variant = sqlite3_column_int64(st, 0);
        q->base = col_num(st, 1);
    }
    sqlite3_finalize(st);
    if (r < 0)
        return s;
    if (r == 0)
        return hp_fail(q->err, HP_ERR_ARG,
                       "%s: sweep %lld has no finished baseline (effects are measured against it; let the sweep run)",
                       q->path, id);
    if (isnan(q->base))
        return hp_fail(q->err, HP_ERR_ARG, "%s: sweep %lld has no %s values (the metric does not apply to its model; "
                                           "choose another metric)",
                       q->path, id, q->mname);
    /* the metric the sweep ranked by: a column name from the metric table, never the user's text */
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT r.%s IS NULL FROM results r WHERE r.variant_id = ?", hp_metric_name(q->ranked));
    if ((s = prep(q, &st, sql)) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->base_variant);
    r = step(q, st, &s);
    q->ranked_missing = r == 1 && sqlite3_column_int(st, 0) != 0;
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

// Name of the sweep's first study (plan order) of this kind into name; false if none.
static enum hp_status first_study(struct q *q, const char *kind, char *name, size_t size, bool *found)
{
    sqlite3_stmt *st;
    enum hp_status s = prep(q, &st, "SELECT study FROM sweep_jobs WHERE sweep_id = ? AND kind = ? ORDER BY ord LIMIT 1");
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, kind, -1, SQLITE_STATIC);
    int r = step(q, st, &s);
    *found = r == 1;
    if (r == 1)
        snprintf(name, size, "%s", col_text(st, 0));
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

/*
 * The error of a sweep that lacks what a query needs, "db: sweep 3 (the
 * newest) has no single study (sweep 1 does: use --sweep 1)": the hint names
 * the newest other sweep of the database with a job of the kinds (of every
 * one of them when all is set; of the study, when one is named), found by
 * other_sweep (0: none), else it is fix. kinds: SQL string literals from this
 * file, never the user's text.
 */
static enum hp_status other_sweep(struct q *q, const char *kinds, bool all, const char *study, long long *id)
{
    int n_kinds = 1;
    for (const char *c = kinds; *c; c++)
        n_kinds += *c == ',';
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT sweep_id FROM sweep_jobs WHERE sweep_id <> ?1 AND kind IN (%s) AND (?2 IS NULL OR study = ?2) "
             "GROUP BY sweep_id HAVING count(DISTINCT kind) >= ?3 ORDER BY sweep_id DESC LIMIT 1",
             kinds);
    sqlite3_stmt *st;
    enum hp_status s = prep(q, &st, sql);
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    if (study)
        sqlite3_bind_text(st, 2, study, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, all ? n_kinds : 1);
    int r = step(q, st, &s);
    *id = r == 1 ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

static enum hp_status lacking(struct q *q, const char *kinds, bool all, const char *study, const char *what,
                              const char *fix)
{
    long long other;
    enum hp_status s = other_sweep(q, kinds, all, study, &other);
    if (s != HP_OK)
        return s;
    char hint[256];
    if (other)
        snprintf(hint, sizeof hint, "sweep %lld does: use %s %lld", other, q->sweep_opt, other);
    else
        snprintf(hint, sizeof hint, "%s", fix);
    return hp_fail(q->err, HP_ERR_ARG, "%s: sweep %lld%s has no %s (%s)", q->path, q->sweep,
                   q->newest ? " (the newest)" : "", what, hint);
}

// A study of the sweep, as pick_study chose it.
struct pick {
    char name[128];
    bool kv;        // its units are KV groups
    char all[512];  // the sweep's studies of the kind, comma-separated, in plan order
    int n_all;
};

/*
 * The sweep's study of kind (single, explicit) named want; with want NULL its
 * first over query heads (plan order), else its first, so that heads and KV
 * groups are never ranked together. None, or none of that name, is an error
 * naming the studies the sweep has, or another sweep that has one.
 */
static enum hp_status pick_study(struct q *q, const char *kind, const char *want, struct pick *p)
{
    memset(p, 0, sizeof *p);
    sqlite3_stmt *st;
    enum hp_status s = prep(q, &st,
                            "SELECT study, max(kv) FROM sweep_jobs WHERE sweep_id = ? AND kind = ? "
                            "GROUP BY study ORDER BY min(ord)");
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, kind, -1, SQLITE_STATIC);
    bool found = false, found_heads = false;
    size_t o = 0;
    int r;
    while ((r = step(q, st, &s)) == 1) {
        const char *name = col_text(st, 0);
        bool kv = sqlite3_column_int(st, 1) != 0;
        if (o + strlen(name) + 8 < sizeof p->all)
            o += (size_t)snprintf(p->all + o, sizeof p->all - o, "%s%s", o ? ", " : "", name);
        else if (o + 6 < sizeof p->all && !strstr(p->all, ", ..."))
            o += (size_t)snprintf(p->all + o, sizeof p->all - o, ", ...");
        p->n_all++;
        bool take = want ? !found && strcmp(name, want) == 0 : !found || (!found_heads && !kv);
        if (take) {
            snprintf(p->name, sizeof p->name, "%s", name);
            p->kv = kv;
            found = true;
            found_heads |= !kv;
        }
    }
    sqlite3_finalize(st);
    if (r < 0)
        return s;
    if (found)
        return HP_OK;
    if (q->n_present == 0) /* the plan may well have the study: it expanded to nothing */
        return hp_fail(q->err, HP_ERR_ARG, "%s: sweep %lld%s has no %s jobs: its model is a pruned checkpoint without "
                       "any heads (all %d x %d pruned), so a %s study has none to ablate", q->path, q->sweep,
                       q->newest ? " (the newest)" : "", kind, q->n_layers, q->n_heads, kind);
    char kinds[32], what[200], fix[64];
    snprintf(kinds, sizeof kinds, "'%s'", kind);
    snprintf(fix, sizeof fix, "add %s '%s' study to the plan", strchr("aeiou", kind[0]) ? "an" : "a", kind);
    if (!want) {
        snprintf(what, sizeof what, "%s study", kind);
        return lacking(q, kinds, false, NULL, what, fix);
    }
    if (p->n_all == 0) {
        snprintf(what, sizeof what, "%s study '%s'", kind, want);
        return lacking(q, kinds, false, want, what, fix);
    }
    long long other;
    enum hp_status so = other_sweep(q, kinds, false, want, &other);
    if (so != HP_OK)
        return so;
    char elsewhere[160] = "";
    if (other)
        snprintf(elsewhere, sizeof elsewhere, "; sweep %lld has it: use %s %lld", other, q->sweep_opt, other);
    return hp_fail(q->err, HP_ERR_ARG, "%s: sweep %lld%s has no %s study '%s' (its %s studies: %s%s)", q->path,
                   q->sweep, q->newest ? " (the newest)" : "", kind, want, kind, p->all, elsewhere);
}

// --- sweeps -----------------------------------------------------------------

static enum hp_status q_sweeps(struct q *q, long long id, struct hp_table **out)
{
    static const char *const cols[] = {"id", "name", "plan", "model", "data", "ablation", "metric", "jobs",
                                       "created", "updated"};
    static const bool num[] = {true, false, false, false, false, false, false, true, false, false};
    sqlite3_stmt *st;
    enum hp_status s = prep(q, &st,
                            "SELECT s.id, s.name, p.path, m.path, d.path, s.ablation, s.metric, "
                            "  (SELECT count(*) FROM sweep_jobs j JOIN results r ON r.variant_id = j.variant_id "
                            "   WHERE j.sweep_id = s.id), s.created, s.updated "
                            "FROM sweeps s LEFT JOIN plans p ON p.id = s.plan_id LEFT JOIN models m ON m.id = s.model_id "
                            "LEFT JOIN datasets d ON d.id = s.dataset_id WHERE ?1 = 0 OR s.id = ?1 ORDER BY s.id");
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, id);
    struct tb b;
    tb_init(&b, 10, cols, num);
    int r;
    while ((r = step(q, st, &s)) == 1) {
        int row = tb_row(&b);
        for (int c = 0; c < 10; c++)
            tb_sql(&b, row, c, st);
    }
    sqlite3_finalize(st);
    if (r < 0) {
        hp_table_free(b.t);
        return s;
    }
    if (!b.nomem && id != 0 && b.t->n_rows == 0) {
        hp_table_free(b.t);
        return hp_fail(q->err, HP_ERR_ARG, "%s: no sweep %lld (list them with `headprune query sweeps`)", q->path, id);
    }
    return tb_finish(&b, out, q->err);
}

// --- curve ------------------------------------------------------------------

/* For a note: "; the pruned checkpoint lacks N of its L x H" when it is pruned, else "" (into buf). */
static const char *absent_note(const struct q *q, char *buf, size_t size)
{
    const int all = q->n_layers * q->n_heads;
    buf[0] = '\0';
    if (q->n_present != all)
        snprintf(buf, size, "; the pruned checkpoint lacks %d of its %d x %d", all - q->n_present, q->n_layers,
                 q->n_heads);
    return buf;
}

enum { CV_STUDY, CV_STEP, CV_K, CV_HEADS, CV_PCT, CV_SAMPLES, CV_VALUE, CV_LO, CV_HI, CV_EFFECT, CV_PRUNED, CV_MASK, CV_N };

static void curve_pct(struct q *q, struct tb *b, int row, double n_ablated)
{
    const double all = q->n_present;
    if (n_ablated == floor(n_ablated))
        tb_int(b, row, CV_HEADS, (long long)n_ablated);
    else
        tb_num(b, row, CV_HEADS, "%.4g", n_ablated);
    tb_num(b, row, CV_PCT, F_PCT, all > 0 ? 100.0 * n_ablated / all : 0.0);
    if (q->cv_kept >= 0 && n_ablated == floor(n_ablated))
        tb_int(b, row, q->cv_kept, (long long)(all - n_ablated));
    else if (q->cv_kept >= 0)
        tb_num(b, row, q->cv_kept, "%.4g", all - n_ablated);
}

/*
 * The units a curve step pruned, from its mask bits (bit layer * n_heads +
 * head, LSB first) and the step before's (prev, updated): "kv:L.G" for a KV
 * study's whole groups, else "L.H", comma-separated, into out.
 */
static void step_pruned(const struct q *q, const void *blob, size_t len, bool kv, unsigned char *prev, char *out)
{
    const unsigned char *cur = blob;
    const int L = q->n_layers, H = q->n_heads, w = kv && q->n_kv_heads ? H / q->n_kv_heads : 1;
    size_t o = 0;
    out[0] = '\0';
    for (int l = 0; l < L; l++)
        for (int u = 0; u < H / w; u++) {
            bool all = true, any = false;
            for (int h = u * w; h < (u + 1) * w; h++) {
                size_t i = (size_t)l * H + h;
                bool now = i / 8 < len && (cur[i / 8] >> (i % 8) & 1), before = prev[i / 8] >> (i % 8) & 1;
                all &= now && !before;
                any |= now && !before;
            }
            for (int h = u * w; any && h < (u + 1) * w; h++) {
                size_t i = (size_t)l * H + h;
                bool now = i / 8 < len && (cur[i / 8] >> (i % 8) & 1), before = prev[i / 8] >> (i % 8) & 1;
                if (!all && now && !before) { /* part of a group: name the heads */
                    if (o)
                        out[o++] = ',';
                    o += (size_t)hp_unit_label(out + o, 24, false, l, h);
                }
            }
            if (all) {
                if (o)
                    out[o++] = ',';
                o += (size_t)hp_unit_label(out + o, 24, w > 1, l, w > 1 ? u : u * w);
            }
        }
    out[o] = '\0';
    for (size_t i = 0; i < (size_t)L * H; i++)
        if (i / 8 < len && (cur[i / 8] >> (i % 8) & 1))
            prev[i / 8] |= (unsigned char)(1u << (i % 8));
}

static enum hp_status curve_iterative(struct q *q, const char *study, struct tb *b)
{
    sqlite3_stmt *st;
    if (q->ranked_missing)
        return hp_fail(q->err, HP_ERR_ARG,
                       "%s: sweep %lld ranked study '%s' by %s, which its model does not produce, so its steps are not "
                       "a pruning curve (run the plan again: headprune now refuses that metric, or takes the model's "
                       "own when the plan names none)",
                       q->path, q->sweep, study, hp_metric_name(q->ranked));
    // one curve point per step (kind 'iterative'; candidate scores are 'iterative-score')
    enum hp_status s = prep_m(q, &st,
                              "SELECT j.step, j.k, v.n_ablated, r.%s, v.mask_text, min(j.ord), v.mask, j.kv "
                              "FROM sweep_jobs j JOIN variants v ON v.id = j.variant_id "
                              "JOIN results r ON r.variant_id = j.variant_id "
                              "WHERE j.sweep_id = ? AND j.study = ? AND j.kind = 'iterative' "
                              "GROUP BY j.step ORDER BY j.step");
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, study, -1, SQLITE_STATIC);
    const size_t n_bits = (size_t)q->n_layers * q->n_heads, n_bytes = (n_bits + 7) / 8;
    unsigned char *prev = calloc(n_bytes + 1, 1);
    char *pruned = malloc(n_bits * 24 + 1);
    if (!prev || !pruned) {
        free(prev), free(pruned), sqlite3_finalize(st);
        return hp_fail(q->err, HP_ERR_NOMEM, "%s: out of memory", q->path);
    }
    int r;
    while ((r = step(q, st, &s)) == 1) {
        int row = tb_row(b);
        double v = col_num(st, 3);
        tb_str(b, row, CV_STUDY, study);
        tb_int(b, row, CV_STEP, sqlite3_column_int64(st, 0));
        tb_int(b, row, CV_K, sqlite3_column_int64(st, 1));
        curve_pct(q, b, row, sqlite3_column_double(st, 2));
        tb_num(b, row, CV_VALUE, F_METRIC, v);
        tb_num(b, row, CV_EFFECT, F_EFFECT, effect_of(q->m, v, q->base));
        step_pruned(q, sqlite3_column_blob(st, 6), (size_t)sqlite3_column_bytes(st, 6), sqlite3_column_int(st, 7) != 0,
                    prev, pruned);
        tb_str(b, row, CV_PRUNED, pruned);
        if (q->full_mask)
            tb_str(b, row, CV_MASK, col_text(st, 4));
    }
    sqlite3_finalize(st);
    free(prev), free(pruned);
    return r < 0 ? s : HP_OK;
}

// Emit the row of one k of a random study from its samples.
static void curve_random_row(struct q *q, struct tb *b, const char *study, long long k, const struct acc *val,
                             double n_ablated_sum, long long n_rows)
{
    int row = tb_row(b);
    tb_str(b, row, CV_STUDY, study);
    tb_int(b, row, CV_K, k);
    curve_pct(q, b, row, n_ablated_sum / (double)n_rows);
    tb_int(b, row, CV_SAMPLES, val->n);
    if (val->n > 0) {
        double lo, hi;
        acc_ci(val, &lo, &hi, NULL);
        tb_num(b, row, CV_VALUE, F_METRIC, val->mean);
        tb_num(b, row, CV_LO, F_METRIC, lo);
        tb_num(b, row, CV_HI, F_METRIC, hi);
        tb_num(b, row, CV_EFFECT, F_EFFECT, effect_of(q->m, val->mean, q->base));
    }
}

static enum hp_status curve_random(struct q *q, const char *study, struct tb *b)
{
    sqlite3_stmt *st;
    enum hp_status s = prep_m(q, &st,
                              "SELECT j.k, v.n_ablated, r.%s FROM sweep_jobs j JOIN variants v ON v.id = j.variant_id "
                              "JOIN results r ON r.variant_id = j.variant_id "
                              "WHERE j.sweep_id = ? AND j.study = ? AND j.kind = 'random' ORDER BY j.k, j.sample, j.ord");
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, study, -1, SQLITE_STATIC);
    long long k = -1, n_rows = 0;
    double n_ablated = 0;
    struct acc val = {0};
    int r;
    bool first = true;
    while ((r = step(q, st, &s)) == 1) {
        long long kk = sqlite3_column_int64(st, 0);
        if (first && kk > 0) {
            // the unablated start of the curve: the baseline, one "sample"
            struct acc base = {0};
            acc_add(&base, q->base);
            curve_random_row(q, b, study, 0, &base, 0, 1);
        }
        if (!first && kk != k) {
            curve_random_row(q, b, study, k, &val, n_ablated, n_rows);
            memset(&val, 0, sizeof val);
            n_ablated = 0;
            n_rows = 0;
        }
        first = false;
        k = kk;
        n_rows++;
        n_ablated += sqlite3_column_double(st, 1);
        double v = col_num(st, 2);
        if (!isnan(v))
            acc_add(&val, v);
    }
    if (r == 0 && !first)
        curve_random_row(q, b, study, k, &val, n_ablated, n_rows);
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

/*
 * A gates study's curve: one row a lambda, in the order of the study's
 * (ascending) list: the pruned set (the heads whose test-time gate is 0)
 * evaluated exactly, and in `gated` the model at the fractional test-time
 * gates. A lambda shows once its run and both points are finished.
 */
static enum hp_status curve_gates(struct q *q, const char *study, struct tb *b, int c_lambda, int c_gated)
{
    sqlite3_stmt *st;
    enum hp_status s = prep_m(q, &st,
                              "SELECT x.idx, x.lambda, j.k, v.n_ablated, r.%s, v.mask_text, f.%s "
                              "FROM sweep_gates x JOIN sweep_jobs j ON j.sweep_id = x.sweep_id AND j.study = x.study "
                              "  AND j.kind = 'gates' AND j.step = x.idx "
                              "JOIN variants v ON v.id = j.variant_id JOIN results r ON r.variant_id = j.variant_id "
                              "LEFT JOIN sweep_jobs jf ON jf.sweep_id = x.sweep_id AND jf.study = x.study "
                              "  AND jf.kind = 'gates-frac' AND jf.step = x.idx "
                              "LEFT JOIN results f ON f.variant_id = jf.variant_id "
                              "WHERE x.sweep_id = ? AND x.study = ? GROUP BY x.idx ORDER BY x.idx");
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, study, -1, SQLITE_STATIC);
    int r;
    while ((r = step(q, st, &s)) == 1) {
        int row = tb_row(b);
        double v = col_num(st, 4);
        tb_str(b, row, CV_STUDY, study);
        tb_int(b, row, CV_STEP, sqlite3_column_int64(st, 0));
        tb_int(b, row, CV_K, sqlite3_column_int64(st, 2));
        curve_pct(q, b, row, sqlite3_column_double(st, 3));
        tb_num(b, row, CV_VALUE, F_METRIC, v);
        tb_num(b, row, CV_EFFECT, F_EFFECT, effect_of(q->m, v, q->base));
        tb_str(b, row, CV_PRUNED, col_text(st, 5));
        tb_num(b, row, c_lambda, "%.6g", col_num(st, 1));
        tb_num(b, row, c_gated, F_METRIC, col_num(st, 6));
    }
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

#define CURVE_MAX_STUDIES 256

static enum hp_status q_curve(struct q *q, const char *want, struct hp_table **out)
{
    sqlite3_stmt *st;
    enum hp_status s = prep(q, &st,
                            "SELECT study, kind FROM sweep_jobs WHERE sweep_id = ? AND kind IN ('iterative', 'random', "
                            "'gates') GROUP BY study ORDER BY min(ord)");
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    /* the studies first: a curve with a gates study has three columns more */
    char(*names)[128] = malloc(CURVE_MAX_STUDIES * sizeof *names), kinds[CURVE_MAX_STUDIES];
    if (!names) {
        sqlite3_finalize(st);
        return hp_fail(q->err, HP_ERR_NOMEM, "%s: out of memory", q->path);
    }
    int r, n = 0;
    char all[512] = "";
    size_t o = 0;
    bool gates = false;
    while ((r = step(q, st, &s)) == 1 && n < CURVE_MAX_STUDIES) {
        const char *study = col_text(st, 0), *kind = col_text(st, 1);
        if (o + strlen(study) + 8 < sizeof all)
            o += (size_t)snprintf(all + o, sizeof all - o, "%s%s", o ? ", " : "", study);
        if (want && strcmp(study, want) != 0)
            continue;
        snprintf(names[n], sizeof names[n], "%s", study);
        kinds[n] = kind[0];
        gates |= kind[0] == 'g';
        n++;
    }
    sqlite3_finalize(st);
    if (r < 0 || n == 0)
        free(names);
    if (r < 0)
        return s;
    if (n == 0) {
        if (want && *all)
            return hp_fail(q->err, HP_ERR_ARG, "%s: sweep %lld has no iterative, random or gates study '%s' (its "
                           "curve studies: %s)", q->path, q->sweep, want, all);
        char what[200];
        snprintf(what, sizeof what, "iterative, random or gates study%s%s%s", want ? " '" : "", want ? want : "",
                 want ? "'" : "");
        return lacking(q, "'iterative', 'random', 'gates'", false, want, what,
                       "add one to the plan for a pruning curve");
    }
    const char *cols[CV_N + 3] = {"study", "step", "k", "heads", "pct_heads", "samples", q->mname,
                                  "ci_lo", "ci_hi", "effect", "pruned", "mask"};
    bool num[CV_N + 3] = {false, true, true, true, true, true, true, true, true, true, false, false};
    int n_cols = q->full_mask ? CV_N : CV_MASK; /* the cumulative mask on request */
    int c_lambda = -1, c_gated = -1;
    q->cv_kept = -1;
    if (gates) {
        q->cv_kept = n_cols, c_lambda = n_cols + 1, c_gated = n_cols + 2;
        cols[q->cv_kept] = "kept", cols[c_lambda] = "lambda", cols[c_gated] = "gated";
        num[q->cv_kept] = num[c_lambda] = num[c_gated] = true;
        n_cols += 3;
    }
    struct tb b;
    tb_init(&b, n_cols, cols, num);
    for (int i = 0; i < n && s == HP_OK; i++)
        s = kinds[i] == 'i'   ? curve_iterative(q, names[i], &b)
            : kinds[i] == 'r' ? curve_random(q, names[i], &b)
                              : curve_gates(q, names[i], &b, c_lambda, c_gated);
    q->cv_kept = -1;
    free(names);
    if (s != HP_OK) {
        hp_table_free(b.t);
        return s;
    }
    char absent[96];
    tb_note(&b,
            "sweep %lld, %s; k = units pruned, heads = query heads pruned (pct of the model's %lld%s); iterative: one "
            "row per step; random: %s = mean over the samples with its 95%% t interval (n-1 df) in ci_lo..ci_hi, "
            "k = 0 = the baseline%s",
            q->sweep, effect_convention(q->m), (long long)q->n_present, absent_note(q, absent, sizeof absent),
            q->mname,
            gates ? "; gates: one row per lambda, the heads whose test-time gate is 0 pruned (pruned: all of them), "
                    "kept = query heads kept, gated = the model at the fractional test-time gates (query gates: which "
                    "curve is lower at each lambda's heads kept)"
                  : "");
    return tb_finish(&b, out, q->err);
}

// --- heads and sets -----------------------------------------------------------

// A job measured alone against the baseline: a unit of a single study, or a set of an explicit one.
struct head_row {
    long long ord;
    char study[128];
    char label[128];
    int layer, unit;
    long long n_ablated;
    char *mask; // sets: the variant's mask spec (owned); NULL for heads
    double value, effect;
    struct acc d; // per-sequence paired differences
};

static void rows_free(struct head_row *rows, size_t n)
{
    for (size_t i = 0; rows && i < n; i++)
        free(rows[i].mask);
    free(rows);
}

static int by_effect_desc(const void *a, const void *b)
{
    const struct head_row *x = a, *y = b;
    bool nx = isnan(x->effect), ny = isnan(y->effect);
    if (nx != ny)
        return nx ? 1 : -1; // undefined effects last
    if (!nx && x->effect != y->effect)
        return x->effect < y->effect ? 1 : -1;
    return (x->ord > y->ord) - (x->ord < y->ord);
}

/*
 * Every job of kind (of study, when one is named) in plan order, each with
 * its sequences paired with the baseline's same sequence; with masks, each
 * set's mask spec too. *rows is the caller's (rows_free) even on failure.
 */
static enum hp_status rows_load(struct q *q, const char *kind, const char *study, bool masks, struct head_row **rows,
                                size_t *n)
{
    sqlite3_stmt *st;
    enum hp_status s = prep_m(q, &st,
                              "SELECT j.ord, j.study, j.kv, j.layer, j.unit, j.label, v.n_ablated, v.mask_text, r.%s, "
                              "sv.%s, sb.%s FROM sweep_jobs j JOIN results r ON r.variant_id = j.variant_id "
                              "JOIN variants v ON v.id = j.variant_id "
                              "LEFT JOIN seq_results sv ON sv.variant_id = j.variant_id "
                              "LEFT JOIN seq_results sb ON sb.variant_id = ?1 AND sb.seq = sv.seq "
                              "WHERE j.sweep_id = ?2 AND j.kind = ?3 AND (?4 IS NULL OR j.study = ?4) "
                              "ORDER BY j.ord, sv.seq");
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->base_variant);
    sqlite3_bind_int64(st, 2, q->sweep);
    sqlite3_bind_text(st, 3, kind, -1, SQLITE_STATIC);
    if (study)
        sqlite3_bind_text(st, 4, study, -1, SQLITE_STATIC);
    size_t cap = 0;
    int r;
    while ((r = step(q, st, &s)) == 1) {
        long long ord = sqlite3_column_int64(st, 0);
        if (*n == 0 || (*rows)[*n - 1].ord != ord) {
            struct head_row *g = room_for(q, *rows, (size_t)*n, &cap, sizeof *g, &s);
            if (!g) {
                r = -1;
                break;
            }
            *rows = g;
            struct head_row *h = &(*rows)[(*n)++];
            memset(h, 0, sizeof *h);
            h->ord = ord;
            snprintf(h->study, sizeof h->study, "%s", col_text(st, 1));
            if (!col_index(q, st, 3, q->n_layers, "layer", &h->layer, &s) ||
                !col_index(q, st, 4, q->n_heads, "unit", &h->unit, &s)) {
                r = -1;
                break;
            }
            if (h->layer >= 0 && h->unit >= 0)
                hp_unit_label(h->label, sizeof h->label, sqlite3_column_int(st, 2) != 0, h->layer, h->unit);
            else
                snprintf(h->label, sizeof h->label, "%s", col_text(st, 5));
            h->n_ablated = sqlite3_column_int64(st, 6);
            if (masks && !(h->mask = dup_str(col_text(st, 7)))) {
                s = hp_fail(q->err, HP_ERR_NOMEM, "query: out of memory");
                r = -1;
                break;
            }
            h->value = col_num(st, 8);
            h->effect = effect_of(q->m, h->value, q->base);
        }
        double v = col_num(st, 9), bs = col_num(st, 10);
        double d = q->m == HP_METRIC_KL ? v : effect_of(q->m, v, bs);
        if (!isnan(d))
            acc_add(&(*rows)[*n - 1].d, d);
    }
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

// The effect with its paired interval, test and sequence count into cols c_effect.. c_effect + 4.
static void row_effect_cells(struct tb *b, int row, int c_effect, const struct head_row *h)
{
    double lo, hi, p;
    acc_ci(&h->d, &lo, &hi, &p);
    tb_num(b, row, c_effect, F_EFFECT, h->effect);
    tb_num(b, row, c_effect + 1, F_EFFECT, lo);
    tb_num(b, row, c_effect + 2, F_EFFECT, hi);
    tb_int(b, row, c_effect + 3, h->d.n);
    tb_num(b, row, c_effect + 4, "%.3g", p);
}

#define CI_NOTE "ci_lo..ci_hi the paired 95%% t interval (n-1 df) of the per-sequence effect and p its two-sided " \
                "t test, so the effect (over all tokens) can fall slightly off the interval's centre when " \
                "sequences differ in length"

// "; the sweep's other single studies: ... (choose one with --study)" or "".
static void others_note(const struct pick *p, char *buf, size_t size)
{
    buf[0] = '\0';
    if (p->n_all < 2)
        return;
    snprintf(buf, size, "; the sweep's single studies: %s (choose one with --study)", p->all);
}

static int by_layer_unit(const void *a, const void *b)
{
    const struct head_row *x = a, *y = b;
    if (x->layer != y->layer)
        return x->layer - y->layer;
    if (x->unit != y->unit)
        return x->unit - y->unit;
    return (x->ord > y->ord) - (x->ord < y->ord);
}

// Wider than this, a matrix is no use on a terminal (and the model's shape is input: it must not size a table).
#define MATRIX_MAX_UNITS 1024

/*
 * Matrix layout: one row per layer with a result, one column per unit (query
 * heads, or KV groups for a KV study), each cell the unit's effect to three
 * significant digits, for reading the whole model at a glance on a terminal.
 * rows (n) are sorted here.
 */
static enum hp_status heads_matrix(struct q *q, const struct pick *pk, struct head_row *rows, size_t n,
                                   struct hp_table **out)
{
    int units = pk->kv && q->n_kv_heads ? q->n_kv_heads : q->n_heads;
    for (size_t i = 0; i < n; i++)
        if (rows[i].unit >= units)
            units = rows[i].unit + 1; // a KV study of a database that names its KV heads oddly: still no overflow
    if (units > MATRIX_MAX_UNITS)
        return hp_fail(q->err, HP_ERR_ARG, "%s: sweep %lld's model has %d %s a layer, too many for a matrix (at most "
                       "%d; use --format csv)", q->path, q->sweep, units, pk->kv ? "KV groups" : "heads",
                       MATRIX_MAX_UNITS);
    char(*names)[16] = calloc((size_t)units + 1, sizeof *names);
    const char **cols = calloc((size_t)units + 1, sizeof *cols);
    bool *num = calloc((size_t)units + 1, sizeof *num);
    if (!names || !cols || !num) {
        free(names), free(cols), free(num);
        return hp_fail(q->err, HP_ERR_NOMEM, "query: out of memory");
    }
    cols[0] = "layer";
    num[0] = true;
    for (int u = 0; u < units; u++) {
        snprintf(names[u], sizeof names[u], "%d", u);
        cols[u + 1] = names[u];
        num[u + 1] = true;
    }
    struct tb b;
    tb_init(&b, units + 1, cols, num);
    free(names), free(cols), free(num);
    if (n)
        hp_qsort(rows, n, sizeof *rows, by_layer_unit);
    int row = -1;
    for (size_t i = 0; i < n; i++) {
        const struct head_row *h = &rows[i];
        if (h->layer < 0 || h->unit < 0)
            continue;
        bool new_layer = i == 0 || rows[i - 1].layer != h->layer || rows[i - 1].unit < 0;
        if (new_layer) {
            row = tb_row(&b);
            tb_int(&b, row, 0, h->layer);
        }
        if (new_layer || rows[i - 1].unit != h->unit) // the first job of a unit, as everywhere
            tb_num(&b, row, h->unit + 1, "%.3g", h->effect);
    }
    char others[600];
    others_note(pk, others, sizeof others);
    tb_note(&b,
            "sweep %lld, study %s, %s; rows: layers, columns: %s, each cell the effect of masking that unit alone "
            "(3 significant digits; the other formats give full precision and intervals)%s",
            q->sweep, pk->name, effect_convention(q->m), pk->kv ? "KV groups" : "query heads", others);
    return tb_finish(&b, out, q->err);
}

struct score_row;
static enum hp_status heads_atp(struct q *q, bool kv, char *name, size_t size, struct score_row **rows, size_t *n);
static double score_at(const struct score_row *rows, size_t n, int layer, int unit);

static enum hp_status q_heads(struct q *q, const char *study, int top, bool matrix, struct hp_table **out)
{
    enum { C_STUDY, C_LABEL, C_LAYER, C_UNIT, C_VALUE, C_EFFECT, C_LO, C_HI, C_SEQS, C_P, C_ATP, C_N };
    const char *cols[C_N] = {"study", "label", "layer", "unit", q->mname, "effect", "ci_lo", "ci_hi", "seqs", "p",
                             "atp"};
    static const bool num[C_N] = {false, false, true, true, true, true, true, true, true, true, true};
    struct pick pk;
    enum hp_status s = pick_study(q, "single", study, &pk);
    if (s != HP_OK)
        return s;
    struct head_row *rows = NULL;
    size_t n = 0;
    if ((s = rows_load(q, "single", pk.name, false, &rows, &n)) != HP_OK) {
        rows_free(rows, n);
        return s;
    }
    if (matrix) {
        s = heads_matrix(q, &pk, rows, n, out);
        rows_free(rows, n);
        return s;
    }
    hp_qsort(rows, n, sizeof *rows, by_effect_desc);
    size_t shown = top > 0 && (size_t)top < n ? (size_t)top : n;
    /* the sweep's attribution study over the same units, if any: its estimates beside the exact effects */
    struct score_row *atp = NULL;
    size_t n_atp = 0;
    char atp_name[128] = "";
    if ((s = heads_atp(q, pk.kv, atp_name, sizeof atp_name, &atp, &n_atp)) != HP_OK) {
        rows_free(rows, n);
        free(atp);
        return s;
    }

    struct tb b;
    tb_init(&b, atp_name[0] ? C_N : C_N - 1, cols, num);
    for (size_t i = 0; i < shown; i++) {
        const struct head_row *h = &rows[i];
        int row = tb_row(&b);
        tb_str(&b, row, C_STUDY, h->study);
        tb_str(&b, row, C_LABEL, h->label);
        if (h->layer >= 0)
            tb_int(&b, row, C_LAYER, h->layer);
        if (h->unit >= 0)
            tb_int(&b, row, C_UNIT, h->unit);
        tb_num(&b, row, C_VALUE, F_METRIC, h->value);
        row_effect_cells(&b, row, C_EFFECT, h);
        if (atp_name[0] && h->layer >= 0 && h->unit >= 0)
            tb_num(&b, row, C_ATP, F_EFFECT, score_at(atp, n_atp, h->layer, h->unit));
    }
    rows_free(rows, n);
    free(atp);
    char others[600], atp_note[300] = "";
    others_note(&pk, others, sizeof others);
    if (atp_name[0])
        snprintf(atp_note, sizeof atp_note, "; atp: attribution study %s's first-order estimate of the loss effect "
                 "(query attribution: how well it ranks them)", atp_name);
    tb_note(&b, "sweep %lld, study %s (%s), %s; each unit masked alone, largest effect first; " CI_NOTE "%s%s",
            q->sweep, pk.name, pk.kv ? "KV groups" : "query heads", effect_convention(q->m), atp_note, others);
    return tb_finish(&b, out, q->err);
}

// Each named set of the sweep's explicit studies (or of the one named), masked together.
static enum hp_status q_sets(struct q *q, const char *study, int top, struct hp_table **out)
{
    enum { C_STUDY, C_SET, C_HEADS, C_VALUE, C_EFFECT, C_LO, C_HI, C_SEQS, C_P, C_MASK, C_N };
    const char *cols[C_N] = {"study", "set", "heads", q->mname, "effect", "ci_lo", "ci_hi", "seqs", "p", "mask"};
    static const bool num[C_N] = {false, false, true, true, true, true, true, true, true, false};
    enum hp_status s;
    if (study) {
        struct pick pk;
        if ((s = pick_study(q, "explicit", study, &pk)) != HP_OK)
            return s;
    }
    struct head_row *rows = NULL;
    size_t n = 0;
    if ((s = rows_load(q, "explicit", study, true, &rows, &n)) != HP_OK) {
        rows_free(rows, n);
        return s;
    }
    if (n == 0) {
        rows_free(rows, n);
        return lacking(q, "'explicit'", false, NULL, "explicit study",
                       "add one to the plan: explicit: {sets: {NAME: MASK}}");
    }
    hp_qsort(rows, n, sizeof *rows, by_effect_desc);
    size_t shown = top > 0 && (size_t)top < n ? (size_t)top : n;
    struct tb b;
    tb_init(&b, C_N, cols, num);
    for (size_t i = 0; i < shown; i++) {
        const struct head_row *h = &rows[i];
        int row = tb_row(&b);
        tb_str(&b, row, C_STUDY, h->study);
        tb_str(&b, row, C_SET, h->label);
        tb_int(&b, row, C_HEADS, h->n_ablated);
        tb_num(&b, row, C_VALUE, F_METRIC, h->value);
        row_effect_cells(&b, row, C_EFFECT, h);
        tb_str(&b, row, C_MASK, h->mask);
    }
    rows_free(rows, n);
    tb_note(&b, "sweep %lld, %s; each set's heads masked together (heads: query heads masked), largest effect first; "
            CI_NOTE, q->sweep, effect_convention(q->m));
    return tb_finish(&b, out, q->err);
}

// --- redundancy -------------------------------------------------------------

struct layer_sum {
    long long units, below;
    double sum, max;
    double only_min;
    char only_label[48];
    double layer_effect;
};

static enum hp_status q_redundancy(struct q *q, double eps, struct hp_table **out)
{
    enum { C_LAYER, C_UNITS, C_BELOW, C_MEAN, C_MAX, C_ONLY, C_ONLY_UNIT, C_WHOLE, C_N };
    static const char *const cols[C_N] = {"layer", "units", "below_eps", "mean_effect", "max_effect",
                                          "only_effect", "only_unit", "layer_effect"};
    static const bool num[C_N] = {true, true, true, true, true, true, false, true};
    char single[128], only[128], layer[128];
    bool has_single, has_only, has_layer;
    enum hp_status s;
    if ((s = first_study(q, "single", single, sizeof single, &has_single)) != HP_OK ||
        (s = first_study(q, "only", only, sizeof only, &has_only)) != HP_OK ||
        (s = first_study(q, "layer", layer, sizeof layer, &has_layer)) != HP_OK)
        return s;
    if (has_single) { // as heads reads it: the first single study over query heads, else the first
        struct pick pk;
        if ((s = pick_study(q, "single", NULL, &pk)) != HP_OK)
            return s;
        snprintf(single, sizeof single, "%s", pk.name);
    }
    if (!has_single && !has_only && !has_layer)
        return lacking(q, "'single', 'only', 'layer'", false, NULL, "single, only or layer study",
                       "add a 'single' study to the plan");

    struct layer_sum *ls = calloc((size_t)q->n_layers, sizeof *ls);
    if (!ls)
        return hp_fail(q->err, HP_ERR_NOMEM, "query: out of memory");
    for (int l = 0; l < q->n_layers; l++) {
        ls[l].max = ls[l].only_min = ls[l].layer_effect = NAN;
    }
    const char *studies[3] = {has_single ? single : NULL, has_only ? only : NULL, has_layer ? layer : NULL};
    for (int which = 0; which < 3 && s == HP_OK; which++) {
        if (!studies[which])
            continue;
        sqlite3_stmt *st;
        if ((s = prep_m(q, &st,
                        "SELECT j.kv, j.layer, j.unit, r.%s FROM sweep_jobs j "
                        "JOIN results r ON r.variant_id = j.variant_id "
                        "WHERE j.sweep_id = ? AND j.study = ? ORDER BY j.ord")) != HP_OK)
            break;
        sqlite3_bind_int64(st, 1, q->sweep);
        sqlite3_bind_text(st, 2, studies[which], -1, SQLITE_STATIC);
        int r;
        while ((r = step(q, st, &s)) == 1) {
            int l, u;
            if (!col_index(q, st, 1, q->n_layers, "layer", &l, &s) || !col_index(q, st, 2, q->n_heads, "unit", &u, &s)) {
                r = -1;
                break;
            }
            double e = effect_of(q->m, col_num(st, 3), q->base);
            if (l < 0 || isnan(e))
                continue;
            struct layer_sum *x = &ls[l];
            if (which == 0) {
                x->units++;
                x->below += e < eps;
                x->sum += e;
                if (isnan(x->max) || e > x->max)
                    x->max = e;
            } else if (which == 1) {
                if (u >= 0 && (isnan(x->only_min) || e < x->only_min)) {
                    x->only_min = e;
                    hp_unit_label(x->only_label, sizeof x->only_label, sqlite3_column_int(st, 0) != 0, l, u);
                }
            } else if (isnan(x->layer_effect)) {
                x->layer_effect = e;
            }
        }
        sqlite3_finalize(st);
    }
    if (s != HP_OK) {
        free(ls);
        return s;
    }

    struct tb b;
    tb_init(&b, C_N, cols, num);
    for (int l = 0; l < q->n_layers; l++) {
        const struct layer_sum *x = &ls[l];
        int row = tb_row(&b);
        tb_int(&b, row, C_LAYER, l);
        if (has_single) {
            tb_int(&b, row, C_UNITS, x->units);
            tb_int(&b, row, C_BELOW, x->below);
            if (x->units > 0)
                tb_num(&b, row, C_MEAN, F_EFFECT, x->sum / (double)x->units);
            tb_num(&b, row, C_MAX, F_EFFECT, x->max);
        }
        tb_num(&b, row, C_ONLY, F_EFFECT, x->only_min);
        if (!isnan(x->only_min))
            tb_str(&b, row, C_ONLY_UNIT, x->only_label);
        tb_num(&b, row, C_WHOLE, F_EFFECT, x->layer_effect);
    }
    free(ls);
    tb_note(&b,
            "sweep %lld, %s; units, below_eps (effect < %g), mean/max_effect: each unit removed alone (study %s); "
            "only_effect: keeping only the layer's best unit only_unit (study %s); layer_effect: removing the layer's "
            "attention (study %s)",
            q->sweep, effect_convention(q->m), eps, has_single ? single : "none", has_only ? only : "none",
            has_layer ? layer : "none");
    return tb_finish(&b, out, q->err);
}

// --- pairs ------------------------------------------------------------------

struct single_eff {
    int kv, layer, unit;
    long long ord;
    double effect;
};

static int by_unit(const void *a, const void *b)
{
    const struct single_eff *x = a, *y = b;
    if (x->kv != y->kv)
        return x->kv - y->kv;
    if (x->layer != y->layer)
        return x->layer - y->layer;
    if (x->unit != y->unit)
        return x->unit - y->unit;
    return (x->ord > y->ord) - (x->ord < y->ord);
}

// Effect of the first single job of (kv, layer, unit); NaN if there is none.
static double single_lookup(const struct single_eff *s, size_t n, int kv, int layer, int unit)
{
    size_t lo = 0, hi = n; // first element >= key
    struct single_eff key = {kv, layer, unit, -1, 0};
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (by_unit(&s[mid], &key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < n && s[lo].kv == kv && s[lo].layer == layer && s[lo].unit == unit)
        return s[lo].effect;
    return NAN;
}

struct pair_row {
    long long ord;
    char study[128];
    int kv, layer, a, b;
    double ab, ea, eb, inter;
};

static int by_interaction_desc(const void *a, const void *b)
{
    const struct pair_row *x = a, *y = b;
    bool nx = isnan(x->inter), ny = isnan(y->inter);
    if (nx != ny)
        return nx ? 1 : -1;
    if (!nx && x->inter != y->inter)
        return x->inter < y->inter ? 1 : -1;
    return (x->ord > y->ord) - (x->ord < y->ord);
}

// Read the single-unit effects (sorted by unit) and the pairs (in plan order).
static enum hp_status pairs_load(struct q *q, struct single_eff **singles, size_t *n_singles, struct pair_row **pairs,
                                 size_t *n_pairs)
{
    sqlite3_stmt *st;
    enum hp_status s = HP_OK;
    size_t cap = 0;
    if ((s = prep_m(q, &st,
                    "SELECT j.kv, j.layer, j.unit, r.%s, j.ord FROM sweep_jobs j "
                    "JOIN results r ON r.variant_id = j.variant_id "
                    "WHERE j.sweep_id = ? AND j.kind = 'single' AND j.layer IS NOT NULL AND j.unit IS NOT NULL")) !=
        HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    int r;
    while ((r = step(q, st, &s)) == 1) {
        struct single_eff *g = room_for(q, *singles, (size_t)*n_singles, &cap, sizeof *g, &s);
        if (!g) {
            r = -1;
            break;
        }
        *singles = g;
        int l, u;
        if (!col_index(q, st, 1, q->n_layers, "layer", &l, &s) || !col_index(q, st, 2, q->n_heads, "unit", &u, &s)) {
            r = -1;
            break;
        }
        (*singles)[(*n_singles)++] = (struct single_eff){sqlite3_column_int(st, 0) != 0, l, u,
                                                          sqlite3_column_int64(st, 4),
                                                          effect_of(q->m, col_num(st, 3), q->base)};
    }
    sqlite3_finalize(st);
    if (r < 0)
        return s;
    if (*n_singles)
        hp_qsort(*singles, *n_singles, sizeof **singles, by_unit);

    if ((s = prep_m(q, &st,
                    "SELECT j.ord, j.study, j.kv, j.layer, j.unit, j.unit2, r.%s FROM sweep_jobs j "
                    "JOIN results r ON r.variant_id = j.variant_id "
                    "WHERE j.sweep_id = ? AND j.kind = 'pairs' ORDER BY j.ord")) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    cap = 0;
    while ((r = step(q, st, &s)) == 1) {
        struct pair_row *g = room_for(q, *pairs, (size_t)*n_pairs, &cap, sizeof *g, &s);
        if (!g) {
            r = -1;
            break;
        }
        *pairs = g;
        struct pair_row *p = &(*pairs)[(*n_pairs)++];
        memset(p, 0, sizeof *p);
        p->ord = sqlite3_column_int64(st, 0);
        snprintf(p->study, sizeof p->study, "%s", col_text(st, 1));
        p->kv = sqlite3_column_int(st, 2) != 0;
        if (!col_index(q, st, 3, q->n_layers, "layer", &p->layer, &s) ||
            !col_index(q, st, 4, q->n_heads, "unit", &p->a, &s) || !col_index(q, st, 5, q->n_heads, "unit2", &p->b, &s)) {
            r = -1;
            break;
        }
        p->ab = effect_of(q->m, col_num(st, 6), q->base);
        p->ea = single_lookup(*singles, *n_singles, p->kv, p->layer, p->a);
        p->eb = single_lookup(*singles, *n_singles, p->kv, p->layer, p->b);
        p->inter = p->ab - p->ea - p->eb;
    }
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

static enum hp_status q_pairs(struct q *q, int top, struct hp_table **out)
{
    enum { C_STUDY, C_PAIR, C_LAYER, C_A, C_B, C_AB, C_EA, C_EB, C_I, C_N };
    static const char *const cols[C_N] = {"study", "pair", "layer", "unit_a", "unit_b",
                                          "effect_ab", "effect_a", "effect_b", "interaction"};
    static const bool num[C_N] = {false, false, true, true, true, true, true, true, true};
    struct single_eff *singles = NULL;
    struct pair_row *pairs = NULL;
    size_t n_singles = 0, n_pairs = 0;
    enum hp_status s = pairs_load(q, &singles, &n_singles, &pairs, &n_pairs);
    free(singles);
    if (s != HP_OK) {
        free(pairs);
        return s;
    }
    size_t n_known = 0;
    for (size_t i = 0; i < n_pairs; i++)
        n_known += !isnan(pairs[i].ea) && !isnan(pairs[i].eb);
    if (n_pairs == 0) {
        free(pairs);
        return lacking(q, "'pairs'", false, NULL, "pairs study", "add a 'pairs' study to the plan");
    }
    if (n_known == 0) {
        free(pairs);
        return lacking(q, "'pairs', 'single'", true, NULL,
                       "single-unit results for the units of its pairs study", "add a 'single' study to the plan");
    }
    hp_qsort(pairs, n_pairs, sizeof *pairs, by_interaction_desc);

    // top K: the K most redundant and the K most sub-additive (undefined interactions dropped)
    size_t n_valid = 0;
    while (n_valid < n_pairs && !isnan(pairs[n_valid].inter))
        n_valid++;
    bool cut = top > 0 && 2 * (size_t)top < n_valid;
    struct tb b;
    tb_init(&b, C_N, cols, num);
    for (size_t i = 0; i < (top > 0 ? n_valid : n_pairs); i++) {
        if (cut && i >= (size_t)top && i < n_valid - (size_t)top)
            continue;
        const struct pair_row *p = &pairs[i];
        int row = tb_row(&b);
        char la[48], lb[48];
        hp_unit_label(la, sizeof la, p->kv, p->layer, p->a);
        hp_unit_label(lb, sizeof lb, p->kv, p->layer, p->b);
        tb_str(&b, row, C_STUDY, p->study);
        tb_fmt(&b, row, C_PAIR, "%s+%s", la, lb);
        if (p->layer >= 0)
            tb_int(&b, row, C_LAYER, p->layer);
        if (p->a >= 0)
            tb_int(&b, row, C_A, p->a);
        if (p->b >= 0)
            tb_int(&b, row, C_B, p->b);
        tb_num(&b, row, C_AB, F_EFFECT, p->ab);
        tb_num(&b, row, C_EA, F_EFFECT, p->ea);
        tb_num(&b, row, C_EB, F_EFFECT, p->eb);
        tb_num(&b, row, C_I, F_EFFECT, p->inter);
    }
    free(pairs);
    tb_note(&b,
            "sweep %lld, %s; interaction = effect_ab - effect_a - effect_b (singles from the sweep's single study): "
            "> 0 = redundant pair, each backs the other up (removing both hurts more than the two removals add up to); "
            "< 0 = sub-additive (removing one already does most of the damage); largest first%s",
            q->sweep, effect_convention(q->m), cut ? " (only the top and bottom rows)" : "");
    return tb_finish(&b, out, q->err);
}

// --- compare ----------------------------------------------------------------

/*
 * Rank correlations of n pairs (x, y), none NaN, as scipy.stats computes them
 * by default: Spearman's rho is Pearson's r of the ranks, ties given the
 * average of the ranks they span; Kendall's tau-b is (concordant - discordant)
 * / sqrt((n0 - tx) (n0 - ty)) over the n0 = n (n - 1) / 2 pairs of units, tx
 * and ty the pairs tied in x and in y. Both NaN where undefined: fewer than two
 * pairs, or every x (or every y) tied. tau counts pairs, n^2 / 2 comparisons:
 * left out (NaN) past MAX_TAU_UNITS, far more heads than any model has.
 */
#define MAX_TAU_UNITS (1 << 15)

struct vi {
    double v;
    size_t i;
};

static int by_value(const void *a, const void *b)
{
    const struct vi *x = a, *y = b;
    if (x->v != y->v)
        return x->v < y->v ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

// Ranks of x (1 = smallest; ties share their average) into rank: (n); false when out of memory.
static bool ranks_avg(const double *x, size_t n, double *rank)
{
    struct vi *t = malloc((n ? n : 1) * sizeof *t);
    if (!t)
        return false;
    for (size_t i = 0; i < n; i++)
        t[i] = (struct vi){x[i], i};
    hp_qsort(t, n, sizeof *t, by_value);
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && t[j].v == t[i].v)
            j++;
        double avg = (double)(i + 1 + j) / 2.0; // the mean of ranks i + 1 .. j
        for (size_t k = i; k < j; k++)
            rank[t[k].i] = avg;
        i = j;
    }
    free(t);
    return true;
}

static double pearson(const double *x, const double *y, size_t n)
{
    if (n < 2)
        return NAN;
    double mx = 0, my = 0;
    for (size_t i = 0; i < n; i++)
        mx += x[i], my += y[i];
    mx /= (double)n, my /= (double)n;
    double sxy = 0, sxx = 0, syy = 0;
    for (size_t i = 0; i < n; i++) {
        sxy += (x[i] - mx) * (y[i] - my);
        sxx += (x[i] - mx) * (x[i] - mx);
        syy += (y[i] - my) * (y[i] - my);
    }
    if (sxx == 0 || syy == 0)
        return NAN;
    double r = sxy / sqrt(sxx * syy);
    return r > 1 ? 1 : r < -1 ? -1 : r;
}

static double kendall_tau_b(const double *x, const double *y, size_t n)
{
    if (n < 2 || n > MAX_TAU_UNITS)
        return NAN;
    long long conc = 0, disc = 0, tx = 0, ty = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) {
            int sx = (x[i] > x[j]) - (x[i] < x[j]), sy = (y[i] > y[j]) - (y[i] < y[j]);
            tx += sx == 0;
            ty += sy == 0;
            conc += sx * sy > 0;
            disc += sx * sy < 0;
        }
    long long n0 = (long long)n * (long long)(n - 1) / 2;
    if (tx == n0 || ty == n0)
        return NAN;
    return (double)(conc - disc) / sqrt((double)(n0 - tx) * (double)(n0 - ty));
}

// Both correlations of n pairs; false when out of memory.
static bool rank_corr(const double *x, const double *y, size_t n, double *rho, double *tau)
{
    *rho = *tau = NAN;
    double *rx = malloc((n ? n : 1) * sizeof *rx), *ry = malloc((n ? n : 1) * sizeof *ry);
    bool ok = rx && ry && ranks_avg(x, n, rx) && ranks_avg(y, n, ry);
    if (ok) {
        *rho = pearson(rx, ry, n);
        *tau = kendall_tau_b(x, y, n);
    }
    free(rx), free(ry);
    return ok;
}

// One sweep of a comparison: its single study's effects by unit.
struct side {
    struct q q;
    struct pick pk;
    struct single_eff *eff; // (n) the first job of each unit, sorted by (layer, unit); effects may be NaN
    size_t n;
};

// "sweep 2 of a.db"
static void side_name(const struct side *sd, char *buf, size_t size)
{
    snprintf(buf, size, "sweep %lld of %s", sd->q.sweep, sd->q.path);
}

/* The study's units, as many as it has jobs (never a grid of the model's shape: the shape is input
 * too, and a study may cover a few layers of a large model). */
static enum hp_status side_load(struct side *sd)
{
    struct q *q = &sd->q;
    sqlite3_stmt *st;
    enum hp_status s = prep_m(q, &st,
                              "SELECT j.layer, j.unit, r.%s, j.ord FROM sweep_jobs j "
                              "JOIN results r ON r.variant_id = j.variant_id "
                              "WHERE j.sweep_id = ? AND j.kind = 'single' AND j.study = ? "
                              "AND j.layer IS NOT NULL AND j.unit IS NOT NULL");
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, sd->pk.name, -1, SQLITE_STATIC);
    size_t cap = 0;
    int r;
    while ((r = step(q, st, &s)) == 1) {
        struct single_eff *g = room_for(q, sd->eff, (size_t)sd->n, &cap, sizeof *g, &s);
        if (!g) {
            r = -1;
            break;
        }
        sd->eff = g;
        int l, u;
        if (!col_index(q, st, 0, q->n_layers, "layer", &l, &s) || !col_index(q, st, 1, q->n_heads, "unit", &u, &s)) {
            r = -1;
            break;
        }
        sd->eff[sd->n++] = (struct single_eff){0, l, u, sqlite3_column_int64(st, 3),
                                                effect_of(q->m, col_num(st, 2), q->base)};
    }
    sqlite3_finalize(st);
    if (r < 0)
        return s;
    if (sd->n)
        hp_qsort(sd->eff, sd->n, sizeof *sd->eff, by_unit);
    size_t m = 0; // the first job (lowest ord) of each unit, as everywhere
    for (size_t i = 0; i < sd->n; i++)
        if (m == 0 || sd->eff[m - 1].layer != sd->eff[i].layer || sd->eff[m - 1].unit != sd->eff[i].unit)
            sd->eff[m++] = sd->eff[i];
    sd->n = m;
    return HP_OK;
}

/* Resolve, check and load both sides: the sweeps, one metric, one shape, studies of one kind of unit. */
static enum hp_status compare_prepare(struct side *a, struct side *b, const struct hp_query_opts *o, bool same_db)
{
    enum hp_status s;
    if ((s = resolve_sweep(&a->q, o->sweep_id, o->metric)) != HP_OK ||
        (s = resolve_sweep(&b->q, o->sweep_id2, o->metric)) != HP_OK)
        return s;
    char na[700], nb[700];
    side_name(a, na, sizeof na);
    side_name(b, nb, sizeof nb);
    if (same_db && a->q.sweep == b->q.sweep)
        return hp_fail(a->q.err, HP_ERR_ARG,
                       "%s: compare: A and B are both sweep %lld (name another with --sweep ID for A or --sweep2 ID "
                       "for B; each is the newest sweep unless named)",
                       a->q.path, a->q.sweep);
    if ((s = pick_study(&a->q, "single", o->study, &a->pk)) != HP_OK ||
        (s = pick_study(&b->q, "single", o->study2 ? o->study2 : o->study, &b->pk)) != HP_OK)
        return s;
    if (a->q.n_layers != b->q.n_layers || a->q.n_heads != b->q.n_heads)
        return hp_fail(a->q.err, HP_ERR_SHAPE,
                       "compare: %s is of a model with %d layers x %d heads but %s of one with %d x %d (compare "
                       "sweeps of models of one shape)",
                       na, a->q.n_layers, a->q.n_heads, nb, b->q.n_layers, b->q.n_heads);
    if (!o->metric && a->q.m != b->q.m)
        return hp_fail(a->q.err, HP_ERR_ARG,
                       "compare: %s measures %s but %s measures %s (name the metric to compare with --metric)", na,
                       a->q.mname, nb, b->q.mname);
    if (a->pk.kv != b->pk.kv)
        return hp_fail(a->q.err, HP_ERR_ARG,
                       "compare: study %s of %s ablates %s but study %s of %s %s (choose studies of one kind of unit "
                       "with --study and --study2)",
                       a->pk.name, na, a->pk.kv ? "KV groups" : "query heads", b->pk.name, nb,
                       b->pk.kv ? "KV groups" : "query heads");
    if (a->pk.kv && a->q.n_kv_heads != b->q.n_kv_heads)
        return hp_fail(a->q.err, HP_ERR_SHAPE,
                       "compare: the KV groups of %s (%d per layer) are not those of %s (%d per layer) (compare query "
                       "heads instead: --study with a single study over heads)",
                       na, a->q.n_kv_heads, nb, b->q.n_kv_heads);
    if ((s = side_load(a)) != HP_OK || (s = side_load(b)) != HP_OK)
        return s;
    return HP_OK;
}

// A unit's row of the comparison.
struct cmp_unit {
    int layer, unit;
    double a, b, diff; // effects (NaN where a sweep lacks the unit), b - a
    double rank_a, rank_b; // among the units both have, 1 = the largest effect; NaN otherwise
};

static int by_abs_diff_desc(const void *x, const void *y)
{
    const struct cmp_unit *p = x, *q = y;
    bool np = isnan(p->diff), nq = isnan(q->diff);
    if (np != nq)
        return np ? 1 : -1;
    if (!np && fabs(p->diff) != fabs(q->diff))
        return fabs(p->diff) < fabs(q->diff) ? 1 : -1;
    if (p->layer != q->layer)
        return p->layer - q->layer;
    return p->unit - q->unit;
}

/* The correlations and the means over the units of u (n) that both sweeps have; false when out of memory. */
struct cmp_sum {
    size_t n;
    double mean_a, mean_b, rho, tau;
};

static bool cmp_summary(const struct cmp_unit *u, size_t n, struct cmp_sum *out)
{
    memset(out, 0, sizeof *out);
    double *x = malloc((n ? n : 1) * sizeof *x), *y = malloc((n ? n : 1) * sizeof *y);
    if (!x || !y) {
        free(x), free(y);
        return false;
    }
    size_t m = 0;
    double sa = 0, sb = 0;
    for (size_t i = 0; i < n; i++)
        if (!isnan(u[i].diff)) {
            x[m] = u[i].a, y[m] = u[i].b;
            sa += u[i].a, sb += u[i].b;
            m++;
        }
    out->n = m;
    out->mean_a = m ? sa / (double)m : NAN;
    out->mean_b = m ? sb / (double)m : NAN;
    bool ok = rank_corr(x, y, m, &out->rho, &out->tau);
    free(x), free(y);
    return ok;
}

static enum hp_status q_compare(struct side *a, struct side *b, const struct hp_query_opts *o, struct hp_table **out)
{
    struct q *q = &a->q;
    // the units of either sweep, in (layer, unit) order: a merge of the two sorted lists
    struct cmp_unit *u = malloc((a->n + b->n + 1) * sizeof *u);
    if (!u)
        return hp_fail(q->err, HP_ERR_NOMEM, "query: out of memory");
    size_t n = 0, n_both = 0, n_one = 0;
    for (size_t i = 0, j = 0; i < a->n || j < b->n;) {
        const struct single_eff *x = i < a->n ? &a->eff[i] : NULL, *y = j < b->n ? &b->eff[j] : NULL;
        int c = !x ? 1 : !y ? -1 : x->layer != y->layer ? x->layer - y->layer : x->unit - y->unit;
        const struct single_eff *k = c <= 0 ? x : y;
        double ea = c <= 0 ? x->effect : NAN, eb = c >= 0 ? y->effect : NAN;
        i += c <= 0;
        j += c >= 0;
        if (isnan(ea) && isnan(eb))
            continue;
        u[n++] = (struct cmp_unit){k->layer, k->unit, ea, eb, eb - ea, NAN, NAN};
        if (isnan(ea) || isnan(eb))
            n_one++;
        else
            n_both++;
    }
    if (n_both == 0) {
        free(u);
        char na[700], nb[700];
        side_name(a, na, sizeof na);
        side_name(b, nb, sizeof nb);
        return hp_fail(q->err, HP_ERR_ARG,
                       "compare: study %s of %s and study %s of %s have no unit in common with a %s value (nothing to "
                       "compare; choose other studies with --study and --study2)",
                       a->pk.name, na, b->pk.name, nb, q->mname);
    }
    // ranks among the units both have, 1 = the largest effect
    double *x = malloc(n_both * sizeof *x), *y = malloc(n_both * sizeof *y);
    double *rx = malloc(n_both * sizeof *rx), *ry = malloc(n_both * sizeof *ry);
    bool ok = x && y && rx && ry;
    size_t m = 0;
    for (size_t i = 0; ok && i < n; i++)
        if (!isnan(u[i].diff))
            x[m] = u[i].a, y[m] = u[i].b, m++;
    ok = ok && ranks_avg(x, n_both, rx) && ranks_avg(y, n_both, ry);
    m = 0;
    for (size_t i = 0; ok && i < n; i++)
        if (!isnan(u[i].diff)) {
            u[i].rank_a = (double)n_both + 1 - rx[m];
            u[i].rank_b = (double)n_both + 1 - ry[m];
            m++;
        }
    free(x), free(y), free(rx), free(ry);
    struct cmp_sum all;
    if (!ok || !cmp_summary(u, n, &all)) {
        free(u);
        return hp_fail(q->err, HP_ERR_NOMEM, "query: out of memory");
    }

    const char *what = a->pk.kv ? "KV groups" : "query heads";
    struct tb t;
    if (!o->by_layer) {
        enum { C_LABEL, C_LAYER, C_UNIT, C_A, C_B, C_DIFF, C_RA, C_RB, C_RHO, C_TAU, C_N };
        static const char *const cols[C_N] = {"label", "layer", "unit", "effect_a", "effect_b",
                                              "diff", "rank_a", "rank_b", "rho", "tau"};
        static const bool num[C_N] = {false, true, true, true, true, true, true, true, true, true};
        size_t shown = n;
        if (o->top > 0) {
            hp_qsort(u, n, sizeof *u, by_abs_diff_desc);
            shown = (size_t)o->top < n_both ? (size_t)o->top : n_both;
        }
        tb_init(&t, C_N, cols, num);
        for (size_t i = 0; i < shown; i++) {
            int row = tb_row(&t);
            char label[48];
            hp_unit_label(label, sizeof label, a->pk.kv, u[i].layer, u[i].unit);
            tb_str(&t, row, C_LABEL, label);
            tb_int(&t, row, C_LAYER, u[i].layer);
            tb_int(&t, row, C_UNIT, u[i].unit);
            tb_num(&t, row, C_A, F_EFFECT, u[i].a);
            tb_num(&t, row, C_B, F_EFFECT, u[i].b);
            tb_num(&t, row, C_DIFF, F_EFFECT, u[i].diff);
            tb_num(&t, row, C_RA, F_EFFECT, u[i].rank_a);
            tb_num(&t, row, C_RB, F_EFFECT, u[i].rank_b);
        }
        int row = tb_row(&t);
        tb_str(&t, row, C_LABEL, "all");
        tb_num(&t, row, C_A, F_EFFECT, all.mean_a);
        tb_num(&t, row, C_B, F_EFFECT, all.mean_b);
        tb_num(&t, row, C_DIFF, F_EFFECT, all.mean_b - all.mean_a);
        tb_num(&t, row, C_RHO, F_EFFECT, all.rho);
        tb_num(&t, row, C_TAU, F_EFFECT, all.tau);
    } else {
        enum { C_LABEL, C_LAYER, C_UNITS, C_A, C_B, C_DIFF, C_RHO, C_TAU, C_N };
        static const char *const cols[C_N] = {"label", "layer", "units", "mean_a", "mean_b", "diff", "rho", "tau"};
        static const bool num[C_N] = {false, true, true, true, true, true, true, true};
        tb_init(&t, C_N, cols, num);
        for (size_t i = 0; i <= n;) { // u is in (layer, unit) order: each layer a run, then i == n: all
            size_t j = i;
            while (j < n && u[j].layer == u[i].layer)
                j++;
            struct cmp_sum sm = all;
            if (i < n && !cmp_summary(u + i, j - i, &sm)) {
                t.nomem = true;
                break;
            }
            int row = sm.n > 0 || i == n ? tb_row(&t) : -1;
            if (i < n) {
                char label[32];
                snprintf(label, sizeof label, "layer %d", u[i].layer);
                tb_str(&t, row, C_LABEL, label);
                tb_int(&t, row, C_LAYER, u[i].layer);
            } else {
                tb_str(&t, row, C_LABEL, "all");
            }
            tb_int(&t, row, C_UNITS, (long long)sm.n);
            tb_num(&t, row, C_A, F_EFFECT, sm.mean_a);
            tb_num(&t, row, C_B, F_EFFECT, sm.mean_b);
            tb_num(&t, row, C_DIFF, F_EFFECT, sm.mean_b - sm.mean_a);
            tb_num(&t, row, C_RHO, F_EFFECT, sm.rho);
            tb_num(&t, row, C_TAU, F_EFFECT, sm.tau);
            i = j == i ? n + 1 : j;
        }
    }
    free(u);

    char rho[32] = "undefined", tau[32] = "undefined", one[96] = "";
    if (!isnan(all.rho))
        snprintf(rho, sizeof rho, "%.3f", all.rho);
    if (!isnan(all.tau))
        snprintf(tau, sizeof tau, "%.3f", all.tau);
    else if (all.n > MAX_TAU_UNITS)
        snprintf(tau, sizeof tau, "not computed past %d units", MAX_TAU_UNITS);
    if (n_one)
        snprintf(one, sizeof one, "; %zu %s in one sweep only (empty cells) are left out", n_one, what);
    tb_note(&t,
            "A = sweep %lld of %s (%s, %s ablation, study %s), B = sweep %lld of %s (%s, %s ablation, study %s); %s, "
            "each against its own sweep's baseline; diff = B - A%s; over the %zu %s both have: Spearman rho %s, "
            "Kendall tau-b %s (row all%s; ties share their average rank)%s",
            a->q.sweep, a->q.path, a->q.name, a->q.ablation, a->pk.name, b->q.sweep, b->q.path, b->q.name,
            b->q.ablation, b->pk.name, effect_convention(q->m),
            o->by_layer ? "; mean_a, mean_b: the mean effect of the layer's units"
            : o->top > 0 ? "; rank 1 = the largest effect; the units whose effects differ most first"
                         : "; rank 1 = the largest effect",
            all.n, what, rho, tau, o->by_layer ? "; per layer: over the layer's units" : ", its effects the means",
            one);
    return tb_finish(&t, out, q->err);
}

// --- gradient studies: importance and attribution --------------------------------

// Whether the database has table name (unit_scores came with schema 3).
static enum hp_status has_table(struct q *q, const char *name, bool *yes)
{
    sqlite3_stmt *st;
    enum hp_status s = prep(q, &st, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?");
    if (s != HP_OK)
        return s;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    int r = step(q, st, &s);
    *yes = r == 1;
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

/*
 * The sweep's gradient study of kind (importance, attribution) named want,
 * else its first by name over query heads, else its first by name (heads and
 * KV groups are never ranked together). None is an error naming the studies
 * it has, or another sweep with one.
 */
static enum hp_status pick_scores(struct q *q, const char *kind, const char *want, struct pick *p)
{
    memset(p, 0, sizeof *p);
    bool yes = false;
    enum hp_status s = has_table(q, "unit_scores", &yes);
    if (s != HP_OK)
        return s;
    char fix[96];
    snprintf(fix, sizeof fix, "add %s '%s' study to the plan and run it", strchr("aeiou", kind[0]) ? "an" : "a", kind);
    if (!yes)
        return hp_fail(q->err, HP_ERR_ARG, "%s: sweep %lld%s has no %s study (the database predates gradient studies: "
                       "%s)", q->path, q->sweep, q->newest ? " (the newest)" : "", kind, fix);
    sqlite3_stmt *st;
    if ((s = prep(q, &st, "SELECT study, max(kv) FROM unit_scores WHERE sweep_id = ? AND kind = ? AND step = 0 "
                          "GROUP BY study ORDER BY max(kv), study")) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, kind, -1, SQLITE_STATIC);
    size_t o = 0;
    int r;
    bool found = false;
    while ((r = step(q, st, &s)) == 1) {
        const char *name = col_text(st, 0);
        if (o + strlen(name) + 8 < sizeof p->all)
            o += (size_t)snprintf(p->all + o, sizeof p->all - o, "%s%s", o ? ", " : "", name);
        p->n_all++;
        if (!found && (!want || strcmp(name, want) == 0)) {
            snprintf(p->name, sizeof p->name, "%s", name);
            p->kv = sqlite3_column_int(st, 1) != 0;
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
    if ((s = prep(q, &st, "SELECT max(sweep_id) FROM unit_scores WHERE sweep_id <> ? AND kind = ? AND step = 0")) !=
        HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, kind, -1, SQLITE_STATIC);
    r = step(q, st, &s);
    long long other = r == 1 && sqlite3_column_type(st, 0) != SQLITE_NULL ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    if (r < 0)
        return s;
    char hint[160];
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

// A unit's score in a gradient study, and what queries set beside it.
struct score_row {
    int layer, unit;
    double score, raw;
    double exact;             // attribution: the single study's loss effect (NaN: none)
    double rank_est, rank_ex; // 1 = the largest
    char normalize[16];
};

/* The study's rows (step 0), in (layer, unit) order. *rows is the caller's (free) even on failure. */
static enum hp_status scores_load(struct q *q, const char *study, struct score_row **rows, size_t *n)
{
    sqlite3_stmt *st;
    enum hp_status s = prep(q, &st, "SELECT layer, unit, score, raw, normalize FROM unit_scores "
                                    "WHERE sweep_id = ? AND study = ? AND step = 0 ORDER BY layer, unit");
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, study, -1, SQLITE_STATIC);
    size_t cap = 0;
    int r;
    while ((r = step(q, st, &s)) == 1) {
        struct score_row *g = room_for(q, *rows, (size_t)*n, &cap, sizeof *g, &s);
        if (!g) {
            r = -1;
            break;
        }
        *rows = g;
        struct score_row *h = &(*rows)[(*n)++];
        memset(h, 0, sizeof *h);
        if (!col_index(q, st, 0, q->n_layers, "layer", &h->layer, &s) ||
            !col_index(q, st, 1, q->n_heads, "unit", &h->unit, &s)) {
            r = -1;
            break;
        }
        h->score = col_num(st, 2);
        h->raw = col_num(st, 3);
        h->exact = h->rank_est = h->rank_ex = NAN;
        snprintf(h->normalize, sizeof h->normalize, "%s", col_text(st, 4));
    }
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

/* The sweep's first attribution study over units of kind kv (name "" when none, or no unit_scores table). */
static enum hp_status heads_atp(struct q *q, bool kv, char *name, size_t size, struct score_row **rows, size_t *n)
{
    bool yes = false;
    enum hp_status s = has_table(q, "unit_scores", &yes);
    if (s != HP_OK || !yes)
        return s;
    sqlite3_stmt *st;
    if ((s = prep(q, &st, "SELECT study FROM unit_scores WHERE sweep_id = ? AND kind = 'attribution' AND kv = ? "
                          "ORDER BY study LIMIT 1")) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_int(st, 2, kv);
    int r = step(q, st, &s);
    if (r == 1)
        snprintf(name, size, "%s", col_text(st, 0));
    sqlite3_finalize(st);
    if (r < 0)
        return s;
    return name[0] ? scores_load(q, name, rows, n) : HP_OK;
}

static double score_at(const struct score_row *rows, size_t n, int layer, int unit)
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
static void unit_cells(struct tb *b, int row, const char *study, bool kv, int layer, int unit)
{
    char label[48];
    hp_unit_label(label, sizeof label, kv, layer, unit);
    tb_str(b, row, 0, study);
    tb_str(b, row, 1, label);
    tb_int(b, row, 2, layer);
    tb_int(b, row, 3, unit);
}

static enum hp_status q_importance(struct q *q, const char *study, int top, struct hp_table **out)
{
    enum { C_STUDY, C_LABEL, C_LAYER, C_UNIT, C_IMP, C_RAW, C_RANK, C_N };
    static const char *const cols[C_N] = {"study", "label", "layer", "unit", "importance", "raw", "rank"};
    static const bool num[C_N] = {false, false, true, true, true, true, true};
    struct pick pk;
    enum hp_status s = pick_scores(q, "importance", study, &pk);
    struct score_row *rows = NULL;
    size_t n = 0;
    if (s == HP_OK)
        s = scores_load(q, pk.name, &rows, &n);
    if (s != HP_OK) {
        free(rows);
        return s;
    }
    if (n)
        hp_qsort(rows, n, sizeof *rows, by_score_desc);
    size_t shown = top > 0 && (size_t)top < n ? (size_t)top : n;
    struct tb b;
    tb_init(&b, C_N, cols, num);
    for (size_t i = 0; i < shown; i++) {
        int row = tb_row(&b);
        unit_cells(&b, row, pk.name, pk.kv, rows[i].layer, rows[i].unit);
        tb_num(&b, row, C_IMP, F_EFFECT, rows[i].score);
        tb_num(&b, row, C_RAW, F_EFFECT, rows[i].raw);
        tb_int(&b, row, C_RANK, (long long)i + 1);
    }
    tb_note(&b,
            "sweep %lld, study %s (%s), normalize %s; importance = E|dL/dgate| (Michel et al.): the absolute "
            "gradient of the loss at the unit's gate%s, per sequence, averaged as the loss weights sequences%s; raw "
            "before normalising%s; most important first",
            q->sweep, pk.name, pk.kv ? "KV groups" : "query heads", n ? rows[0].normalize : "?",
            pk.kv ? " (a KV group's: its heads' gradients summed)" : "",
            n && strcmp(rows[0].normalize, "layer") == 0 ? ", divided by its layer's L2 norm" : "",
            pk.n_all > 1 ? "; other importance studies: choose with --study" : "");
    free(rows);
    return tb_finish(&b, out, q->err);
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

/* The exact loss effect of each row's unit in the sweep's first single study over the same kind of unit. */
static enum hp_status attribution_exact(struct q *q, const struct pick *pk, struct score_row *rows, size_t n,
                                        char *single, size_t size)
{
    sqlite3_stmt *st;
    enum hp_status s = prep(q, &st, "SELECT study FROM sweep_jobs WHERE sweep_id = ? AND kind = 'single' AND kv = ? "
                                    "ORDER BY ord LIMIT 1");
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_int(st, 2, pk->kv);
    int r = step(q, st, &s);
    if (r == 1)
        snprintf(single, size, "%s", col_text(st, 0));
    sqlite3_finalize(st);
    if (r < 0)
        return s;
    if (r == 0)
        return hp_fail(q->err, HP_ERR_ARG,
                       "%s: sweep %lld%s has no single study over %s to measure attribution study '%s' against "
                       "(add 'single%s' to the plan and run it again: the estimates are kept)",
                       q->path, q->sweep, q->newest ? " (the newest)" : "", pk->kv ? "KV groups" : "query heads",
                       pk->name, pk->kv ? ": {kv: true}" : "");
    if ((s = prep(q, &st, "SELECT j.layer, j.unit, r.loss - (SELECT loss FROM results WHERE variant_id = ?3) "
                          "FROM sweep_jobs j JOIN results r ON r.variant_id = j.variant_id "
                          "WHERE j.sweep_id = ?1 AND j.kind = 'single' AND j.study = ?2 ORDER BY j.ord")) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, single, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, q->base_variant);
    while ((r = step(q, st, &s)) == 1) {
        int l, u;
        if (!col_index(q, st, 0, q->n_layers, "layer", &l, &s) || !col_index(q, st, 1, q->n_heads, "unit", &u, &s)) {
            r = -1;
            break;
        }
        for (size_t i = 0; i < n; i++) // rows are few (one a unit); the first job of a unit, as everywhere
            if (rows[i].layer == l && rows[i].unit == u && isnan(rows[i].exact))
                rows[i].exact = col_num(st, 2);
    }
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

/*
 * How well the attribution estimates rank the units against the exact single
 * effects: every unit with both (the most wrongly ranked first), then a row
 * "all" with Spearman's rho, Kendall's tau-b (rank_corr, as compare) and the
 * top-k overlap, k a tenth of the units (at least 1).
 */
static enum hp_status q_attribution(struct q *q, const char *study, int top, struct hp_table **out)
{
    enum { C_STUDY, C_LABEL, C_LAYER, C_UNIT, C_EST, C_EXACT, C_RE, C_RX, C_RD, C_RHO, C_TAU, C_OVL, C_N };
    static const char *const cols[C_N] = {"study", "label", "layer", "unit", "estimate", "exact", "rank_est",
                                          "rank_exact", "rank_diff", "rho", "tau", "top_k_overlap"};
    static const bool num[C_N] = {false, false, true, true, true, true, true, true, true, true, true, true};
    struct pick pk;
    char single[128] = "";
    enum hp_status s = pick_scores(q, "attribution", study, &pk);
    struct score_row *rows = NULL;
    size_t n = 0;
    if (s == HP_OK)
        s = scores_load(q, pk.name, &rows, &n);
    if (s == HP_OK)
        s = attribution_exact(q, &pk, rows, n, single, sizeof single);
    if (s != HP_OK) {
        free(rows);
        return s;
    }
    size_t m = 0; // the units with both, first
    for (size_t i = 0; i < n; i++)
        if (!isnan(rows[i].exact) && !isnan(rows[i].score)) {
            struct score_row t = rows[m];
            rows[m++] = rows[i];
            rows[i] = t;
        }
    double *x = malloc((m + 1) * sizeof *x), *y = malloc((m + 1) * sizeof *y);
    double *rx = malloc((m + 1) * sizeof *rx), *ry = malloc((m + 1) * sizeof *ry);
    double rho = NAN, tau = NAN;
    bool ok = x && y && rx && ry;
    for (size_t i = 0; ok && i < m; i++)
        x[i] = rows[i].score, y[i] = rows[i].exact;
    ok = ok && ranks_avg(x, m, rx) && ranks_avg(y, m, ry) && rank_corr(x, y, m, &rho, &tau);
    size_t k = m / 10 > 0 ? (m + 9) / 10 : (m ? 1 : 0), hits = 0;
    for (size_t i = 0; ok && i < m; i++) {
        rows[i].rank_est = (double)m + 1 - rx[i];
        rows[i].rank_ex = (double)m + 1 - ry[i];
    }
    /* top k by each, ties broken by (layer, unit): sort copies of the order */
    for (size_t i = 0; ok && i < m; i++) {
        size_t above_e = 0, above_x = 0; // units strictly ahead of i in each ordering
        for (size_t j = 0; j < m; j++) {
            bool first = rows[j].layer != rows[i].layer ? rows[j].layer < rows[i].layer : rows[j].unit < rows[i].unit;
            above_e += rows[j].score > rows[i].score || (rows[j].score == rows[i].score && first);
            above_x += rows[j].exact > rows[i].exact || (rows[j].exact == rows[i].exact && first);
        }
        hits += above_e < k && above_x < k;
    }
    free(x), free(y), free(rx), free(ry);
    if (!ok) {
        free(rows);
        return hp_fail(q->err, HP_ERR_NOMEM, "query: out of memory");
    }
    hp_qsort(rows, m, sizeof *rows, by_rank_error_desc);
    size_t shown = top > 0 && (size_t)top < m ? (size_t)top : m;
    struct tb b;
    tb_init(&b, C_N, cols, num);
    for (size_t i = 0; i < shown; i++) {
        int row = tb_row(&b);
        unit_cells(&b, row, pk.name, pk.kv, rows[i].layer, rows[i].unit);
        tb_num(&b, row, C_EST, F_EFFECT, rows[i].score);
        tb_num(&b, row, C_EXACT, F_EFFECT, rows[i].exact);
        tb_num(&b, row, C_RE, F_EFFECT, rows[i].rank_est);
        tb_num(&b, row, C_RX, F_EFFECT, rows[i].rank_ex);
        tb_num(&b, row, C_RD, F_EFFECT, rows[i].rank_est - rows[i].rank_ex);
    }
    int row = tb_row(&b);
    tb_str(&b, row, C_STUDY, pk.name);
    tb_str(&b, row, C_LABEL, "all");
    tb_num(&b, row, C_RHO, F_EFFECT, rho);
    tb_num(&b, row, C_TAU, F_EFFECT, tau);
    if (k)
        tb_num(&b, row, C_OVL, F_EFFECT, (double)hits / (double)k);
    char rs[32] = "undefined";
    if (!isnan(rho))
        snprintf(rs, sizeof rs, "%.3f", rho);
    tb_note(&b,
            "sweep %lld, attribution study %s against single study %s (%s, %s ablation): estimate = the first-order "
            "(AtP) estimate of the loss effect of masking each unit alone, exact = its measured loss effect; rank 1 "
            "= the largest, rank_diff = rank_est - rank_exact, the most wrongly ranked first; over the %zu units: "
            "Spearman rho %s, top-%zu overlap %zu/%zu (row all; ties share their average rank)%s",
            q->sweep, pk.name, single, pk.kv ? "KV groups" : "query heads", q->ablation, m, rs, k, hits, k,
            n > m ? "; units without an exact effect are left out" : "");
    free(rows);
    return tb_finish(&b, out, q->err);
}

// --- head roles ---------------------------------------------------------------------

/* The scores of head_roles, in its column order: names, and whether each is an offset (no correlation). */
#define N_ROLE_COLS 10
static const char *const role_cols[N_ROLE_COLS] = {"prev_token", "duplicate_token", "induction", "induction_offset",
                                                  "induction_mass", "first_token", "dominant_offset", "dominant_mass",
                                                  "entropy", "rare_token"};
static const bool role_is_offset[N_ROLE_COLS] = {false, false, false, true, false, false, true, false, false, false};

/* One head's row of a roles study, with its single effect (NaN: none). */
struct role_row {
    int layer, head;
    double v[N_ROLE_COLS];        // scores; NaN = NULL
    long long off[N_ROLE_COLS];   // the offsets, as integers (where role_is_offset; v is NaN when NULL)
    double effect;
};

/*
 * The sweep's roles study named want, else its first by name: its run's id and
 * probe into *run, *seqs, *len. None is an error naming the sweep's roles
 * studies, or another sweep with one, or saying what to add.
 */
static enum hp_status pick_roles(struct q *q, const char *want, char *name, size_t size, long long *run, int *seqs,
                                 int *len)
{
    bool yes = false;
    enum hp_status s = has_table(q, "sweep_roles", &yes);
    if (s != HP_OK)
        return s;
    if (!yes)
        return hp_fail(q->err, HP_ERR_ARG, "%s: sweep %lld%s has no roles study (the database predates head roles: "
                       "add a 'roles' study to the plan and run it)", q->path, q->sweep, q->newest ? " (the newest)" : "");
    sqlite3_stmt *st;
    if ((s = prep(q, &st, "SELECT x.study, r.id, r.probe_seqs, r.probe_len FROM sweep_roles x "
                          "JOIN role_runs r ON r.id = x.run_id WHERE x.sweep_id = ? ORDER BY x.study")) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    char all[512] = "";
    size_t o = 0;
    int r, n_all = 0;
    bool found = false;
    while ((r = step(q, st, &s)) == 1) {
        const char *nm = col_text(st, 0);
        if (o + strlen(nm) + 8 < sizeof all)
            o += (size_t)snprintf(all + o, sizeof all - o, "%s%s", o ? ", " : "", nm);
        n_all++;
        if (!found && (!want || strcmp(nm, want) == 0)) {
            snprintf(name, size, "%s", nm);
            *run = sqlite3_column_int64(st, 1);
            *seqs = sqlite3_column_int(st, 2);
            *len = sqlite3_column_int(st, 3);
            found = true;
        }
    }
    sqlite3_finalize(st);
    if (r < 0)
        return s;
    if (found)
        return HP_OK;
    if (n_all)
        return hp_fail(q->err, HP_ERR_ARG, "%s: sweep %lld%s has no roles study '%s' (its roles studies: %s)", q->path,
                       q->sweep, q->newest ? " (the newest)" : "", want, all);
    if ((s = prep(q, &st, "SELECT max(sweep_id) FROM sweep_roles WHERE sweep_id <> ?")) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    r = step(q, st, &s);
    long long other = r == 1 && sqlite3_column_type(st, 0) != SQLITE_NULL ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    if (r < 0)
        return s;
    char hint[160];
    if (other)
        snprintf(hint, sizeof hint, "sweep %lld does: use %s %lld", other, q->sweep_opt, other);
    else
        snprintf(hint, sizeof hint, "add a 'roles' study to the plan and run it");
    return hp_fail(q->err, HP_ERR_ARG, "%s: sweep %lld%s has no roles study (%s)", q->path, q->sweep,
                   q->newest ? " (the newest)" : "", hint);
}

/* The run's heads in (layer, head) order. *rows is the caller's (free) even on failure. */
static enum hp_status roles_load(struct q *q, long long run, struct role_row **rows, size_t *n)
{
    sqlite3_stmt *st;
    enum hp_status s = prep(q, &st, "SELECT layer, head, prev_token, duplicate_token, induction, induction_offset, "
                                    "induction_mass, first_token, dominant_offset, dominant_mass, entropy, rare_token "
                                    "FROM head_roles WHERE run_id = ? ORDER BY layer, head");
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, run);
    size_t cap = 0;
    int r;
    while ((r = step(q, st, &s)) == 1) {
        struct role_row *g = room_for(q, *rows, (size_t)*n, &cap, sizeof *g, &s);
        if (!g) {
            r = -1;
            break;
        }
        *rows = g;
        struct role_row *h = &(*rows)[(*n)++];
        if (!col_index(q, st, 0, q->n_layers, "layer", &h->layer, &s) ||
            !col_index(q, st, 1, q->n_heads, "unit", &h->head, &s) || h->layer < 0 || h->head < 0) {
            if (s == HP_OK)
                s = hp_fail(q->err, HP_ERR_FORMAT, "%s: head_roles of sweep %lld lacks a layer or head (a damaged "
                            "database?)", q->path, q->sweep);
            r = -1;
            break;
        }
        for (int c = 0; c < N_ROLE_COLS; c++) {
            h->v[c] = col_num(st, 2 + c);
            /* an offset read as an integer: a forged REAL there must not meet an out-of-range conversion */
            h->off[c] = role_is_offset[c] ? (long long)sqlite3_column_int64(st, 2 + c) : 0;
        }
        h->effect = NAN;
    }
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

/*
 * A roles study (named, else the sweep's first by name): every head's scores
 * in (layer, head) order and, when the sweep has a single study over query
 * heads (its first), each head's effect there; then a last row, label "rho":
 * under each score, Spearman's rho (rank_corr, as compare) between that score
 * and the effect over the heads with both (offsets have none: they are
 * positions, not amounts).
 */
static enum hp_status q_roles(struct q *q, const char *study, struct hp_table **out)
{
    enum { C_LAYER, C_HEAD, C_LABEL, C_ROLE0, C_EFFECT = C_ROLE0 + N_ROLE_COLS, C_N };
    const char *cols[C_N] = {"layer", "head", "label"};
    bool num[C_N] = {true, true, false};
    for (int c = 0; c < N_ROLE_COLS; c++)
        cols[C_ROLE0 + c] = role_cols[c], num[C_ROLE0 + c] = true;
    cols[C_EFFECT] = "effect";
    num[C_EFFECT] = true;
    char name[128], single[128] = "";
    long long run = 0;
    int seqs = 0, len = 0;
    enum hp_status s = pick_roles(q, study, name, sizeof name, &run, &seqs, &len);
    struct role_row *rows = NULL;
    size_t n = 0;
    if (s == HP_OK)
        s = roles_load(q, run, &rows, &n);
    /* the effects: the sweep's first single study over query heads (roles are per query head) */
    sqlite3_stmt *st = NULL;
    if (s == HP_OK)
        s = prep(q, &st, "SELECT study FROM sweep_jobs WHERE sweep_id = ? AND kind = 'single' AND kv = 0 "
                         "ORDER BY ord LIMIT 1");
    if (s == HP_OK) {
        sqlite3_bind_int64(st, 1, q->sweep);
        int r = step(q, st, &s);
        if (r == 1)
            snprintf(single, sizeof single, "%s", col_text(st, 0));
        sqlite3_finalize(st);
    }
    struct head_row *eff = NULL;
    size_t n_eff = 0;
    if (s == HP_OK && single[0])
        s = rows_load(q, "single", single, false, &eff, &n_eff);
    for (size_t i = 0; s == HP_OK && i < n; i++)
        for (size_t j = 0; j < n_eff; j++)
            if (eff[j].layer == rows[i].layer && eff[j].unit == rows[i].head) {
                rows[i].effect = eff[j].effect;
                break;
            }
    rows_free(eff, n_eff);
    /* each score's rank correlation with the effect, over the heads with both */
    double rho[N_ROLE_COLS];
    double *x = malloc((n + 1) * sizeof *x), *y = malloc((n + 1) * sizeof *y);
    if (s == HP_OK && (!x || !y))
        s = hp_fail(q->err, HP_ERR_NOMEM, "query: out of memory");
    size_t n_both = 0;
    for (int c = 0; s == HP_OK && c < N_ROLE_COLS; c++) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (!isnan(rows[i].v[c]) && !isnan(rows[i].effect)) {
                x[m] = rows[i].v[c];
                y[m++] = rows[i].effect;
            }
        double tau;
        rho[c] = NAN;
        if (!role_is_offset[c] && !rank_corr(x, y, m, &rho[c], &tau))
            s = hp_fail(q->err, HP_ERR_NOMEM, "query: out of memory");
        if (c == 0)
            n_both = m;
    }
    free(x), free(y);
    if (s != HP_OK) {
        free(rows);
        return s;
    }
    struct tb b;
    tb_init(&b, C_N, cols, num);
    for (size_t i = 0; i < n; i++) {
        const struct role_row *h = &rows[i];
        int row = tb_row(&b);
        char label[48];
        hp_unit_label(label, sizeof label, false, h->layer, h->head);
        tb_int(&b, row, C_LAYER, h->layer);
        tb_int(&b, row, C_HEAD, h->head);
        tb_str(&b, row, C_LABEL, label);
        for (int c = 0; c < N_ROLE_COLS; c++)
            if (role_is_offset[c]) {
                if (!isnan(h->v[c]))
                    tb_int(&b, row, C_ROLE0 + c, h->off[c]);
            } else {
                tb_num(&b, row, C_ROLE0 + c, F_METRIC, h->v[c]);
            }
        tb_num(&b, row, C_EFFECT, F_EFFECT, h->effect);
    }
    if (single[0]) {
        int row = tb_row(&b);
        tb_str(&b, row, C_LABEL, "rho");
        for (int c = 0; c < N_ROLE_COLS; c++)
            tb_num(&b, row, C_ROLE0 + c, F_EFFECT, rho[c]);
    }
    free(rows);
    char eff_note[400];
    if (single[0])
        snprintf(eff_note, sizeof eff_note,
                 "effect: masking the head alone in single study %s, %s; last row (label rho): Spearman's rank "
                 "correlation of each score with the effect over the %zu heads with both (ties share their average "
                 "rank; none for offsets)", single, effect_convention(q->m), n_both);
    else
        snprintf(eff_note, sizeof eff_note, "no effects: the sweep has no single study over query heads (add one "
                 "to set each head's roles beside its effect)");
    tb_note(&b, "sweep %lld, roles study %s (probe %d x 2 x %d random tokens); scores as docs/roles.md defines "
            "them, empty where no query qualifies; %s", q->sweep, name, seqs, len, eff_note);
    return tb_finish(&b, out, q->err);
}

// --- read-only SQL ----------------------------------------------------------

// Limits on what `query sql` holds before printing.
#define SQL_MAX_ROWS 1000000
#define SQL_MAX_BYTES (256 << 20)

static enum hp_status q_sql(struct q *q, const char *sql, struct hp_table **out)
{
    if (!sql)
        return hp_fail(q->err, HP_ERR_ARG, "query: no SQL given");
    sqlite3_stmt *st = NULL;
    const char *tail = NULL;
    int rc = sqlite3_prepare_v2(q->db, sql, -1, &st, &tail);
    if (rc != SQLITE_OK) {
        int code = rc & 0xff;
        if (code == SQLITE_NOTADB || code == SQLITE_BUSY || code == SQLITE_CORRUPT || code == SQLITE_INTERRUPT)
            return sql_fail(q, rc);
        return hp_fail(q->err, HP_ERR_SQL, "query: %s", sqlite3_errmsg(q->db));
    }
    if (!st)
        return hp_fail(q->err, HP_ERR_ARG, "query: empty SQL (nothing to run)");
    if (tail && *tail) {
        sqlite3_stmt *more = NULL;
        rc = sqlite3_prepare_v2(q->db, tail, -1, &more, NULL);
        sqlite3_finalize(more);
        if (rc != SQLITE_OK || more) {
            sqlite3_finalize(st);
            return hp_fail(q->err, HP_ERR_ARG, "query: one statement only (remove what follows the first ';')");
        }
    }
    if (!sqlite3_stmt_readonly(st)) {
        sqlite3_finalize(st);
        return hp_fail(q->err, HP_ERR_ARG, "query: not a read-only statement (only statements that change nothing, "
                                           "such as SELECT, may run here)");
    }

    int n_cols = sqlite3_column_count(st);
    const char **cols = calloc((size_t)n_cols + 1, sizeof *cols);
    bool *num = calloc((size_t)n_cols + 1, sizeof *num);
    bool *other = calloc((size_t)n_cols + 1, sizeof *other);
    if (!cols || !num || !other) {
        free(cols), free(num), free(other);
        sqlite3_finalize(st);
        return hp_fail(q->err, HP_ERR_NOMEM, "query: out of memory");
    }
    for (int c = 0; c < n_cols; c++) {
        const char *name = sqlite3_column_name(st, c);
        cols[c] = name ? name : "?";
    }
    struct tb b;
    tb_init(&b, n_cols, cols, num);
    free(cols);
    enum hp_status s = HP_OK;
    size_t bytes = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        // the table is held whole before printing: a runaway query (a recursive CTE) must stop, not eat memory
        if (b.t && b.t->n_rows >= SQL_MAX_ROWS) {
            s = hp_fail(q->err, HP_ERR_ARG, "query: more than %d result rows (add a LIMIT or aggregate)", SQL_MAX_ROWS);
            break;
        }
        for (int c = 0; c < n_cols; c++)
            bytes += (size_t)sqlite3_column_bytes(st, c) * (sqlite3_column_type(st, c) == SQLITE_BLOB ? 2 : 1) + 8;
        if (bytes > SQL_MAX_BYTES) {
            s = hp_fail(q->err, HP_ERR_ARG, "query: result larger than %d MB (add a LIMIT or select fewer columns)",
                        SQL_MAX_BYTES >> 20);
            break;
        }
        int row = tb_row(&b);
        for (int c = 0; c < n_cols; c++) {
            int type = sqlite3_column_type(st, c);
            if (type == SQLITE_INTEGER || type == SQLITE_FLOAT)
                num[c] = true;
            else if (type != SQLITE_NULL)
                other[c] = true;
            tb_sql(&b, row, c, st);
        }
    }
    if (s == HP_OK && rc != SQLITE_DONE) {
        int code = rc & 0xff;
        s = code == SQLITE_BUSY || code == SQLITE_CORRUPT || code == SQLITE_INTERRUPT
                ? sql_fail(q, rc)
                : hp_fail(q->err, HP_ERR_SQL, "query: %s", sqlite3_errmsg(q->db));
    }
    sqlite3_finalize(st);
    // numeric: at least one number and nothing but numbers and NULLs
    if (!b.nomem)
        for (int c = 0; c < n_cols; c++)
            b.t->numeric[c] = num[c] && !other[c];
    free(num);
    free(other);
    if (s != HP_OK) {
        hp_table_free(b.t);
        return s;
    }
    return tb_finish(&b, out, q->err);
}

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
static enum hp_status curve_load(struct q *q, const char *kind, struct curve_pts *c, char *name, size_t size)
{
    c->n = 0;
    name[0] = '\0';
    sqlite3_stmt *st;
    enum hp_status s = prep(q, &st, "SELECT study FROM sweep_jobs WHERE sweep_id = ? AND kind = ? AND kv = 0 "
                                    "ORDER BY ord LIMIT 1");
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, kind, -1, SQLITE_STATIC);
    int r = step(q, st, &s);
    if (r == 1)
        snprintf(name, size, "%s", col_text(st, 0));
    sqlite3_finalize(st);
    if (r <= 0)
        return r < 0 ? s : HP_OK;
    const bool iterative = kind[0] == 'i';
    s = prep_m(q, &st, iterative ? "SELECT min(v.n_ablated), min(r.%s) FROM sweep_jobs j JOIN variants v ON v.id = "
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
    while ((r = step(q, st, &s)) == 1 && c->n < 1024) {
        double v = col_num(st, 1);
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
static enum hp_status q_gates(struct q *q, const char *want, struct hp_table **out)
{
    enum { C_STUDY, C_LAMBDA, C_STEPS, C_OBJ, C_KEPT, C_PCT, C_VALUE, C_EFFECT, C_GATED, C_ITER, C_RAND, C_LOWER, C_N };
    const char *cols[C_N] = {"study", "lambda", "steps", "objective", "kept", "pct_kept", q->mname, "effect", "gated",
                             "iterative", "random", "lower"};
    static const bool num[C_N] = {false, true, true, true, true, true, true, true, true, true, true, false};
    sqlite3_stmt *st;
    bool has = false;
    enum hp_status s = has_table(q, "sweep_gates", &has);
    if (s != HP_OK)
        return s;
    long long n_gates = 0;
    if (has) {
        if ((s = prep(q, &st, "SELECT count(*) FROM sweep_gates WHERE sweep_id = ?1 AND (?2 IS NULL OR study = ?2)")) !=
            HP_OK)
            return s;
        sqlite3_bind_int64(st, 1, q->sweep);
        if (want)
            sqlite3_bind_text(st, 2, want, -1, SQLITE_STATIC);
        int r = step(q, st, &s);
        n_gates = r == 1 ? sqlite3_column_int64(st, 0) : 0;
        sqlite3_finalize(st);
        if (r < 0)
            return s;
    }
    if (n_gates == 0) {
        char what[200];
        snprintf(what, sizeof what, "finished gates study%s%s%s", want ? " '" : "", want ? want : "", want ? "'" : "");
        return lacking(q, "'gates'", false, want, what, "add a gates study to the plan, and let its first lambda finish");
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
        s = prep_m(q, &st,
                   "SELECT x.study, x.lambda, g.steps, g.objective, v.n_ablated, r.%s, f.%s "
                   "FROM sweep_gates x JOIN gate_runs g ON g.id = x.run_id "
                   "JOIN sweep_jobs j ON j.sweep_id = x.sweep_id AND j.study = x.study AND j.kind = 'gates' "
                   "  AND j.step = x.idx "
                   "JOIN variants v ON v.id = j.variant_id JOIN results r ON r.variant_id = j.variant_id "
                   "LEFT JOIN sweep_jobs jf ON jf.sweep_id = x.sweep_id AND jf.study = x.study "
                   "  AND jf.kind = 'gates-frac' AND jf.step = x.idx "
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
    tb_init(&b, C_N, cols, num);
    const double all = q->n_present;
    const int sign = hp_metric_sign(q->m);
    int r;
    while ((r = step(q, st, &s)) == 1) {
        int row = tb_row(&b);
        const double kept = all - sqlite3_column_double(st, 4), v = col_num(st, 5);
        const double vi = curve_at(it, kept), vr = curve_at(rd, kept);
        tb_str(&b, row, C_STUDY, col_text(st, 0));
        tb_num(&b, row, C_LAMBDA, "%.6g", col_num(st, 1));
        tb_int(&b, row, C_STEPS, sqlite3_column_int64(st, 2));
        tb_num(&b, row, C_OBJ, F_METRIC, col_num(st, 3));
        tb_num(&b, row, C_KEPT, "%.6g", kept);
        tb_num(&b, row, C_PCT, F_PCT, all > 0 ? 100.0 * kept / all : 0.0);
        tb_num(&b, row, C_VALUE, F_METRIC, v);
        tb_num(&b, row, C_EFFECT, F_EFFECT, effect_of(q->m, v, q->base));
        tb_num(&b, row, C_GATED, F_METRIC, col_num(st, 6));
        tb_num(&b, row, C_ITER, F_METRIC, vi);
        tb_num(&b, row, C_RAND, F_METRIC, vr);
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
            tb_str(&b, row, C_LOWER, lower);
    }
    sqlite3_finalize(st);
    free(it), free(rd);
    if (r < 0) {
        hp_table_free(b.t);
        return s;
    }
    char absent[96];
    tb_note(&b,
            "sweep %lld, %s; one row per lambda: the heads whose test-time gate is 0 pruned and evaluated exactly (%s, "
            "effect), kept = query heads kept (pct of the model's %lld%s), objective = the last training step's, gated = "
            "the model at the fractional test-time gates; iterative = %s%s%s, random = %s%s%s, each read at the same "
            "heads kept (linear between its two nearest points; empty where it does not reach); lower = the curve with "
            "the least damage there",
            q->sweep, effect_convention(q->m), q->mname, (long long)all, absent_note(q, absent, sizeof absent),
            it_name[0] ? "study " : "(none)", it_name,
            it_name[0] ? "'s curve" : "", rd_name[0] ? "study " : "(none)", rd_name, rd_name[0] ? "'s means" : "");
    return tb_finish(&b, out, q->err);
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
static enum hp_status q_heads_gates(struct q *q, const char *study, int top, bool matrix, struct hp_table **out)
{
    struct pick pk;
    enum hp_status s = pick_study(q, "gates", study, &pk);
    if (s != HP_OK)
        return s;
    sqlite3_stmt *st;
    /* the study's lambdas, ascending */
    double lambdas[256];
    int n_lambda = 0, r;
    if ((s = prep(q, &st, "SELECT lambda FROM sweep_gates WHERE sweep_id = ? AND study = ? ORDER BY idx")) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, pk.name, -1, SQLITE_STATIC);
    while ((r = step(q, st, &s)) == 1 && n_lambda < 256)
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
    s = prep(q, &st, "SELECT x.idx, h.layer, h.head, h.gate FROM sweep_gates x JOIN gate_heads h ON h.run_id = x.run_id "
                     "WHERE x.sweep_id = ? AND x.study = ? ORDER BY x.idx");
    if (s == HP_OK) {
        sqlite3_bind_int64(st, 1, q->sweep);
        sqlite3_bind_text(st, 2, pk.name, -1, SQLITE_STATIC);
        while ((r = step(q, st, &s)) == 1) {
            int k = sqlite3_column_int(st, 0), l, h;
            if (!col_index(q, st, 1, q->n_layers, "layer", &l, &s) || !col_index(q, st, 2, H, "head", &h, &s)) {
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
        tb_init(&b, H + 1, cols, num);
        free(cols), free(num), free(names);
        for (int l = 0; l < q->n_layers; l++) {
            int row = tb_row(&b);
            tb_int(&b, row, 0, l);
            for (int h = 0; h < H; h++)
                tb_num(&b, row, h + 1, "%.3g", isinf(rows[l * H + h].closes_at) ? NAN : rows[l * H + h].closes_at);
        }
        tb_note(&b, "sweep %lld, gates study %s; rows: layers, columns: query heads, each cell the lambda from which "
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
        tb_init(&b, n_cols, cols, num);
        free(cols), free(num), free(names);
        hp_qsort(rows, (size_t)n, sizeof *rows, by_closing_desc);
        const int shown = top > 0 && top < n ? top : n;
        for (int i = 0; i < shown; i++) {
            int row = tb_row(&b);
            char label[32];
            hp_unit_label(label, sizeof label, false, rows[i].layer, rows[i].head);
            tb_str(&b, row, C_STUDY, pk.name);
            tb_str(&b, row, C_LABEL, label);
            tb_int(&b, row, C_LAYER, rows[i].layer);
            tb_int(&b, row, C_HEAD, rows[i].head);
            tb_num(&b, row, C_CLOSES, "%.6g", isinf(rows[i].closes_at) ? NAN : rows[i].closes_at);
            for (int k = 0; k < n_lambda; k++)
                tb_num(&b, row, C_FIRST + k, "%.6g", rows[i].gate[k]);
        }
        char others[600];
        others[0] = '\0';
        if (pk.n_all > 1)
            snprintf(others, sizeof others, "; the sweep's gates studies: %s (choose one with --study)", pk.all);
        tb_note(&b, "sweep %lld, gates study %s; each head's test-time gate at each lambda (0 = pruned), closes_at = "
                "the lambda from which it stays 0 (empty: open at every lambda); the last to close first%s",
                q->sweep, pk.name, others);
    }
    free(rows), free(gates);
    return tb_finish(&b, out, q->err);
}

// --- entry ------------------------------------------------------------------

// Options that only some kinds take: an error naming the option when o gives one to another kind.
static enum hp_status check_opts(const struct hp_query_opts *o, struct hp_error *err)
{
    if (o->top < 0)
        return hp_fail(err, HP_ERR_ARG, "query: top must be >= 0 (got %d; 0 = every row)", o->top);
    if (!isfinite(o->eps))
        return hp_fail(err, HP_ERR_ARG, "query: eps must be a finite number");
    if (o->sweep_id < 0 || o->sweep_id2 < 0)
        return hp_fail(err, HP_ERR_ARG, "query: a sweep id must be positive (0 = the newest)");
    bool compare = o->kind == HP_QUERY_COMPARE;
    if (!compare && (o->db2 || o->sweep_id2 || o->study2 || o->by_layer))
        return hp_fail(err, HP_ERR_ARG, "query: --db2, --sweep2, --study2 and --by apply to compare only");
    if (o->matrix && o->kind != HP_QUERY_HEADS)
        return hp_fail(err, HP_ERR_ARG, "query: the matrix format is for heads only");
    if (o->gates && o->kind != HP_QUERY_HEADS)
        return hp_fail(err, HP_ERR_ARG, "query: --gates applies to heads only");
    if (o->matrix && o->top)
        return hp_fail(err, HP_ERR_ARG, "query: --top does not apply to the matrix format (it shows every unit)");
    if (compare && o->by_layer && o->top)
        return hp_fail(err, HP_ERR_ARG, "query: --top does not apply to compare --by layer (every layer is shown)");
    if (o->study && o->kind != HP_QUERY_HEADS && o->kind != HP_QUERY_SETS && o->kind != HP_QUERY_CURVE && !compare &&
        o->kind != HP_QUERY_IMPORTANCE && o->kind != HP_QUERY_ATTRIBUTION && o->kind != HP_QUERY_ROLES &&
        o->kind != HP_QUERY_GATES)
        return hp_fail(err, HP_ERR_ARG, "query: --study applies to heads, sets, curve, compare, importance, "
                       "attribution, roles and gates");
    if (o->top && o->kind == HP_QUERY_ROLES)
        return hp_fail(err, HP_ERR_ARG, "query: --top does not apply to roles (it shows every head)");
    return HP_OK;
}

// True when a and b name one existing file (compare's two databases).
static bool same_file(const char *a, const char *b)
{
    struct stat x, y;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

// Compare: B's database opened (or A's shared when it is the same file), both read in one transaction each.
static enum hp_status run_compare(struct q *qa, const struct hp_query_opts *o, struct hp_table **out)
{
    struct side a = {.q = *qa}, b = {0};
    const char *db2 = o->db2 ? o->db2 : qa->path;
    bool same_db = same_file(qa->path, db2);
    b.q = (struct q){.path = db2, .err = qa->err, .db = same_db ? qa->db : NULL};
    a.q.sweep_opt = "--sweep";
    b.q.sweep_opt = "--sweep2";
    enum hp_status s = HP_OK;
    if (!same_db) {
        s = hp_store_open_read(db2, BUSY_TIMEOUT_MS, o->timeout_s, &b.q.db, qa->err);
        if (s == HP_OK) {
            int rc = sqlite3_exec(b.q.db, "BEGIN", NULL, NULL, NULL);
            if (rc != SQLITE_OK)
                s = sql_fail(&b.q, rc);
        }
    }
    if (s == HP_OK)
        s = compare_prepare(&a, &b, o, same_db);
    if (s == HP_OK)
        s = q_compare(&a, &b, o, out);
    free(a.eff), free(b.eff);
    if (!same_db && b.q.db) {
        sqlite3_exec(b.q.db, "COMMIT", NULL, NULL, NULL);
        sqlite3_close(b.q.db);
    }
    return s;
}

// The answer to o on q's open connection, inside the caller's read transaction (but sql's).
static enum hp_status run_kind(struct q *q, const struct hp_query_opts *o, struct hp_table **out)
{
    enum hp_status s;
    switch (o->kind) {
    case HP_QUERY_SQL: return q_sql(q, o->sql, out);
    case HP_QUERY_SWEEPS: return q_sweeps(q, o->sweep_id, out);
    case HP_QUERY_COMPARE: return run_compare(q, o, out);
    case HP_QUERY_CURVE:
    case HP_QUERY_HEADS:
    case HP_QUERY_REDUNDANCY:
    case HP_QUERY_PAIRS:
    case HP_QUERY_SETS:
    case HP_QUERY_IMPORTANCE:
    case HP_QUERY_ATTRIBUTION:
    case HP_QUERY_ROLES:
    case HP_QUERY_GATES:
        if ((s = resolve_sweep(q, o->sweep_id, o->metric)) != HP_OK)
            return s;
        if (o->kind == HP_QUERY_CURVE)
            return q_curve(q, o->study, out);
        if (o->kind == HP_QUERY_HEADS && o->gates)
            return q_heads_gates(q, o->study, o->top, o->matrix, out);
        if (o->kind == HP_QUERY_HEADS)
            return q_heads(q, o->study, o->top, o->matrix, out);
        if (o->kind == HP_QUERY_GATES)
            return q_gates(q, o->study, out);
        if (o->kind == HP_QUERY_REDUNDANCY)
            return q_redundancy(q, o->eps, out);
        if (o->kind == HP_QUERY_SETS)
            return q_sets(q, o->study, o->top, out);
        if (o->kind == HP_QUERY_IMPORTANCE)
            return q_importance(q, o->study, o->top, out);
        if (o->kind == HP_QUERY_ATTRIBUTION)
            return q_attribution(q, o->study, o->top, out);
        if (o->kind == HP_QUERY_ROLES)
            return q_roles(q, o->study, out);
        return q_pairs(q, o->top, out);
    }
    return hp_fail(q->err, HP_ERR_ARG, "query: unknown query kind %d", (int)o->kind);
}

enum hp_status hp_query(const char *db_path, const struct hp_query_opts *o, struct hp_table **out,
                        struct hp_error *err)
{
    assert(db_path && o && out);
    *out = NULL;
    enum hp_status s = check_opts(o, err);
    if (s != HP_OK)
        return s;
    struct q q = {.path = db_path, .err = err, .full_mask = o->full_mask, .cv_kept = -1, .sweep_opt = "--sweep"};
    s = hp_store_open_read(db_path, BUSY_TIMEOUT_MS, o->timeout_s, &q.db, err);
    if (s == HP_OK && o->kind == HP_QUERY_SQL) {
        s = run_kind(&q, o, out);
    } else if (s == HP_OK) {
        // one read transaction: every statement sees the same snapshot while a sweep writes
        int rc = sqlite3_exec(q.db, "BEGIN", NULL, NULL, NULL);
        if (rc != SQLITE_OK)
            s = sql_fail(&q, rc);
        if (s == HP_OK)
            s = run_kind(&q, o, out);
        sqlite3_exec(q.db, "COMMIT", NULL, NULL, NULL);
    }
    sqlite3_close(q.db);
    return s;
}

// --- readers: several queries over one snapshot --------------------------------

struct hp_query_reader {
    sqlite3 *db;
    char *path;
};

void hp_query_reader_close(struct hp_query_reader *r)
{
    if (!r)
        return;
    if (r->db) {
        sqlite3_exec(r->db, "COMMIT", NULL, NULL, NULL);
        sqlite3_close(r->db);
    }
    free(r->path);
    free(r);
}

enum hp_status hp_query_reader_open(const char *db_path, double seconds, struct hp_query_reader **out,
                                    struct hp_error *err)
{
    assert(db_path && out);
    *out = NULL;
    struct hp_query_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = dup_str(db_path))) {
        free(r);
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", db_path);
    }
    enum hp_status s = hp_store_open_read(db_path, BUSY_TIMEOUT_MS, seconds, &r->db, err);
    if (s == HP_OK) {
        int rc = sqlite3_exec(r->db, "BEGIN", NULL, NULL, NULL);
        if (rc != SQLITE_OK)
            s = hp_store_read_fail(r->db, db_path, rc, err);
    }
    if (s != HP_OK) {
        hp_query_reader_close(r);
        return s;
    }
    *out = r;
    return HP_OK;
}

// A query context on the reader's connection.
static struct q reader_q(struct hp_query_reader *r, struct hp_error *err)
{
    return (struct q){.db = r->db, .path = r->path, .err = err, .cv_kept = -1, .sweep_opt = "--sweep"};
}

enum hp_status hp_query_read(struct hp_query_reader *r, const struct hp_query_opts *o, struct hp_table **out,
                             struct hp_error *err)
{
    assert(r && o && out);
    *out = NULL;
    enum hp_status s = check_opts(o, err);
    if (s != HP_OK)
        return s;
    struct q q = reader_q(r, err);
    q.full_mask = o->full_mask;
    return run_kind(&q, o, out);
}

enum hp_status hp_query_has_table(struct hp_query_reader *r, const char *name, bool *yes, struct hp_error *err)
{
    struct q q = reader_q(r, err);
    return has_table(&q, name, yes);
}

// "a, b, c": the distinct values of one results column over the sweep's variants, ascending.
static enum hp_status distinct_results(struct q *q, const char *column, struct tb *b, int row)
{
    char sql[400];
    /* column: a name from run_info's list, never the user's text */
    snprintf(sql, sizeof sql,
             "SELECT DISTINCT r.%s FROM results r WHERE r.variant_id IN "
             "(SELECT variant_id FROM sweep_jobs WHERE sweep_id = ?) ORDER BY 1",
             column);
    sqlite3_stmt *st;
    enum hp_status s = prep(q, &st, sql);
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    char buf[1024] = "";
    size_t o = 0;
    int r;
    while ((r = step(q, st, &s)) == 1) {
        const char *v = col_text(st, 0);
        if (o + strlen(v) + 8 < sizeof buf)
            o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%s", o ? ", " : "", v);
        else if (o + 6 < sizeof buf && !strstr(buf, ", ..."))
            o += (size_t)snprintf(buf + o, sizeof buf - o, ", ...");
    }
    sqlite3_finalize(st);
    tb_str(b, row, 1, buf);
    return r < 0 ? s : HP_OK;
}

enum hp_status hp_query_run_info(struct hp_query_reader *rd, int64_t sweep_id, struct hp_table **out,
                                 struct hp_error *err)
{
    static const char *const cols[] = {"field", "value"};
    static const bool num[] = {false, false};
    *out = NULL;
    struct q q = reader_q(rd, err);
    /* as every sweep query: the sweep exists, has a finished baseline and a model of a sane shape */
    enum hp_status s = resolve_sweep(&q, sweep_id, NULL);
    if (s != HP_OK)
        return s;
    sqlite3_stmt *st;
    if ((s = prep(&q, &st,
                  "SELECT s.id, s.name, s.ablation, s.metric, s.created, s.updated, "
                  "  p.name, p.path, p.digest, p.text, "
                  "  m.path, m.model_type, m.n_layers, m.n_heads, m.n_kv_heads, m.d_head, m.n_params, m.digest, "
                  "  d.path, d.n_seqs, d.seq_len, d.digest "
                  "FROM sweeps s LEFT JOIN plans p ON p.id = s.plan_id LEFT JOIN models m ON m.id = s.model_id "
                  "LEFT JOIN datasets d ON d.id = s.dataset_id WHERE s.id = ?")) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q.sweep);
    static const char *const fields[] = {
        "sweep_id",   "sweep_name", "ablation",   "metric",     "sweep_created", "sweep_updated",
        "plan_name",  "plan_path",  "plan_digest", "plan_text", "model_path",    "model_type",
        "n_layers",   "n_heads",    "n_kv_heads", "d_head",     "n_params",      "model_digest",
        "data_path",  "n_seqs",     "seq_len",    "data_digest"};
    struct tb b;
    tb_init(&b, 2, cols, num);
    int r = step(&q, st, &s);
    for (int c = 0; r == 1 && c < (int)(sizeof fields / sizeof *fields); c++) {
        int row = tb_row(&b);
        tb_str(&b, row, 0, fields[c]);
        tb_sql_at(&b, row, 1, st, c);
    }
    sqlite3_finalize(st);
    if (r == 1) { // the value every effect of the sweep is measured against, as the curve shows it
        int row = tb_row(&b);
        tb_str(&b, row, 0, "baseline");
        tb_num(&b, row, 1, F_METRIC, q.base);
        row = tb_row(&b); // the heads the model has, which curves count kept and pruned heads of
        tb_str(&b, row, 0, "n_present");
        tb_int(&b, row, 1, q.n_present);
    }
    if (r == 1 && (s = prep(&q, &st,
                            "SELECT count(*), min(r.threads), max(r.threads), min(r.created), max(r.created), "
                            "  sum(r.wall_s) FROM results r WHERE r.variant_id IN "
                            "(SELECT variant_id FROM sweep_jobs WHERE sweep_id = ?)")) != HP_OK)
        r = -1;
    if (r == 1) {
        sqlite3_bind_int64(st, 1, q.sweep);
        r = step(&q, st, &s);
        static const char *const agg[] = {"results", "threads_min", "threads_max", "first_result", "last_result",
                                          "wall_s"};
        for (int c = 0; r == 1 && c < 6; c++) {
            int row = tb_row(&b);
            tb_str(&b, row, 0, agg[c]);
            tb_sql_at(&b, row, 1, st, c);
            if (c == 0) { // the distinct lists follow the count
                static const char *const lists[][2] = {{"engine_versions", "engine_version"},
                                                       {"numeric_versions", "numeric_version"},
                                                       {"kernels", "kernel"},
                                                       {"hosts", "host"}};
                for (int k = 0; k < 4 && s == HP_OK; k++) {
                    int lr = tb_row(&b);
                    tb_str(&b, lr, 0, lists[k][0]);
                    s = distinct_results(&q, lists[k][1], &b, lr);
                }
                if (s != HP_OK)
                    r = -1;
            }
        }
        sqlite3_finalize(st);
    }
    if (r != 1) {
        hp_table_free(b.t);
        return r == 0 ? hp_fail(err, HP_ERR_FORMAT, "%s: sweep %lld vanished while being read", q.path, q.sweep) : s;
    }
    tb_note(&b, "sweep %lld: what was run", q.sweep);
    return tb_finish(&b, out, err);
}

enum hp_status hp_query_studies(struct hp_query_reader *rd, int64_t sweep_id, struct hp_table **out,
                                struct hp_error *err)
{
    enum { C_STUDY, C_KIND, C_KV, C_JOBS, C_RANK, C_N };
    static const char *const cols[C_N] = {"study", "kind", "kv", "jobs", "rank"};
    static const bool num[C_N] = {false, false, true, true, false};
    *out = NULL;
    struct q q = reader_q(rd, err);
    bool scores = false;
    enum hp_status s = resolve_sweep(&q, sweep_id, NULL);
    if (s == HP_OK)
        s = has_table(&q, "unit_scores", &scores);
    if (s != HP_OK)
        return s;
    /* jobs in plan order, then the gradient studies (which have no jobs) by name; an iterative study
     * ranked by gradient stored the scores it pruned by under its own name; a gates study is its
     * pruned sets (kind 'gates', one a lambda), its 'gates-frac' points beside them not counted */
    char sql[1200];
    snprintf(sql, sizeof sql,
             "SELECT study, kind, max(kv), count(*), "
             "  CASE WHEN kind <> 'iterative' THEN NULL %s ELSE 'exact' END, 0, min(ord) "
             "FROM sweep_jobs j WHERE sweep_id = ?1 AND kind NOT IN ('iterative-score', 'gates-frac') "
             "GROUP BY study, kind "
             "%s ORDER BY 6, 7, 1",
             scores ? "WHEN EXISTS (SELECT 1 FROM unit_scores u WHERE u.sweep_id = ?1 AND u.study = j.study "
                      "AND u.kind = 'iterative') THEN 'gradient'"
                    : "",
             scores ? "UNION ALL SELECT study, kind, max(kv), count(*), NULL, 1, 0 FROM unit_scores "
                      "WHERE sweep_id = ?1 AND kind <> 'iterative' AND step = 0 GROUP BY study, kind"
                    : "");
    sqlite3_stmt *st;
    if ((s = prep(&q, &st, sql)) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q.sweep);
    struct tb b;
    tb_init(&b, C_N, cols, num);
    int r;
    while ((r = step(&q, st, &s)) == 1) {
        int row = tb_row(&b);
        for (int c = 0; c < C_N; c++)
            tb_sql(&b, row, c, st);
    }
    sqlite3_finalize(st);
    if (r < 0) {
        hp_table_free(b.t);
        return s;
    }
    tb_note(&b, "sweep %lld: its studies, in plan order (gradient studies last)", q.sweep);
    return tb_finish(&b, out, err);
}
