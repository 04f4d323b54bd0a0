/*
 * query_table.c -- the query family's result tables and statistics: struct tb,
 * a table under construction (hp_table_free is the public destructor), the
 * 95% t intervals, rank correlations and the signed effect every question
 * reports.
 *
 * Invariants: numbers are formatted here (metrics %.6f, effects and intervals
 * %.6g, percentages %.2f, integers plain) and each such cell also carries its
 * number as its text shows it (struct hp_table's values); NULL cells are
 * empty; summary rows (hq_tb_summary_row) come after every unit's row.
 * Reductions are in double.
 *
 * Must not: run SQL (a row already read is rendered by hq_tb_sql_at), print,
 * or exit.
 */
#define _POSIX_C_SOURCE 200809L

#include "headprune.h"
#include "query_priv.h"
#include "util.h"

#include <gsl/gsl_cdf.h>
#include <sqlite3.h>

#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

char *hq_dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

// cols: (n_cols) names; numeric: (n_cols) flags.
void hq_tb_init(struct tb *b, int n_cols, const char *const *cols, const bool *numeric)
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
        b->t->cols[c] = hq_dup_str(cols[c]);
        b->t->numeric[c] = numeric[c];
        if (!b->t->cols[c])
            b->nomem = true;
    }
}

// A new row of empty cells: its index, or -1 after an allocation failure.
static int tb_add_row(struct tb *b)
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

int hq_tb_row(struct tb *b)
{
    assert(b->nomem || b->t->n_summary == 0); // the summary rows come last
    return tb_add_row(b);
}

int hq_tb_summary_row(struct tb *b)
{
    int r = tb_add_row(b);
    if (r >= 0)
        b->t->n_summary++;
    return r;
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
    if (!(b->t->cells[i] = hq_dup_str(s)))
        b->nomem = true;
}

void hq_tb_str(struct tb *b, int r, int c, const char *s)
{
    tb_cell(b, r, c, s, NAN);
}

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
void hq_tb_fmt(struct tb *b, int r, int c, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    hq_tb_str(b, r, c, buf);
}

/*
 * x with one of the house formats; NaN (a NULL or an undefined value) stays
 * empty. The text is x rounded to read (the aligned table shows it); the
 * cell's number is x in full, which CSV and JSON print (round-trip exact).
 */
void hq_tb_num(struct tb *b, int r, int c, const char *fmt, double x)
{
    if (isnan(x))
        return;
    if (x == 0.0)
        x = 0.0; // no "-0"
    char buf[64];
    snprintf(buf, sizeof buf, fmt, x);
    tb_cell(b, r, c, buf, x);
}

void hq_tb_int(struct tb *b, int r, int c, long long v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", v);
    tb_cell(b, r, c, buf, (double)v);
}

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void hq_tb_note(struct tb *b, const char *fmt, ...)
{
    if (b->nomem)
        return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    free(b->t->note);
    if (!(b->t->note = hq_dup_str(buf)))
        b->nomem = true;
}

/*
 * Column sc of st's row, as SQLite renders it, into cell (row, c); blobs as x'hex', NULL empty.
 * An integer's text is exact (its number too, up to 2^53); a real's text is
 * SQLite's (15 significant digits), its number the double in full.
 */
void hq_tb_sql_at(struct tb *b, int row, int c, sqlite3_stmt *st, int sc)
{
    int type = sqlite3_column_type(st, sc);
    if (type == SQLITE_NULL)
        return;
    if (type == SQLITE_INTEGER) {
        double v = (double)sqlite3_column_int64(st, sc);
        tb_cell(b, row, c, hq_col_text(st, sc), v);
        return;
    }
    if (type == SQLITE_FLOAT) {
        tb_cell(b, row, c, hq_col_text(st, sc), sqlite3_column_double(st, sc));
        return;
    }
    if (type != SQLITE_BLOB) {
        hq_tb_str(b, row, c, hq_col_text(st, sc));
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
    hq_tb_str(b, row, c, hex);
    free(hex);
}

// Column c of st's row into cell (row, c), as hq_tb_sql_at.
void hq_tb_sql(struct tb *b, int row, int c, sqlite3_stmt *st)
{
    hq_tb_sql_at(b, row, c, st, c);
}

enum hp_status hq_tb_finish(struct tb *b, struct hp_table **out, struct hp_error *err)
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

// --- statistics -------------------------------------------------------------

void hq_acc_add(struct acc *a, double x)
{
    a->n++;
    double d = x - a->mean;
    a->mean += d / (double)a->n;
    a->m2 += d * (x - a->mean);
}

/* 95% t interval of the mean (n - 1 df) and the two-sided p-value of
 * mean = 0; NaN where undefined (n < 2; p also when sd = 0). */
void hq_acc_ci(const struct acc *a, double *lo, double *hi, double *p)
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

void hq_tb_ci(struct tb *b, int row, int c, const struct acc *a)
{
    double lo, hi, p;
    hq_acc_ci(a, &lo, &hi, &p);
    hq_tb_num(b, row, c, F_EFFECT, lo);
    hq_tb_num(b, row, c + 1, F_EFFECT, hi);
    hq_tb_int(b, row, c + 2, a->n);
    hq_tb_num(b, row, c + 3, "%.3g", p);
}

// --- rank correlations ------------------------------------------------------

/*
 * Rank correlations of n pairs (x, y), none NaN, as scipy.stats computes them
 * by default: Spearman's rho is Pearson's r of the ranks, ties given the
 * average of the ranks they span; Kendall's tau-b is (concordant - discordant)
 * / sqrt((n0 - tx) (n0 - ty)) over the n0 = n (n - 1) / 2 pairs of units, tx
 * and ty the pairs tied in x and in y. Both NaN where undefined: fewer than two
 * pairs, or every x (or every y) tied. tau counts pairs, n^2 / 2 comparisons:
 * left out (NaN) past MAX_TAU_UNITS, far more heads than any model has.
 */

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
bool hq_ranks_avg(const double *x, size_t n, double *rank)
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
bool hq_rank_corr(const double *x, const double *y, size_t n, double *rho, double *tau)
{
    *rho = *tau = NAN;
    double *rx = malloc((n ? n : 1) * sizeof *rx), *ry = malloc((n ? n : 1) * sizeof *ry);
    bool ok = rx && ry && hq_ranks_avg(x, n, rx) && hq_ranks_avg(y, n, ry);
    if (ok) {
        *rho = pearson(rx, ry, n);
        *tau = kendall_tau_b(x, y, n);
    }
    free(rx), free(ry);
    return ok;
}

// --- metrics and effects ----------------------------------------------------

// Damage of a variant with value v against baseline value b, signed by the
// metric table so that larger = worse. KL already measures the distance from
// the unmasked model: the variant's own value.
double hq_effect_of(enum hp_metric m, double v, double b)
{
    return hp_metric_effect(m, v, b); /* the metric's row says which way is worse and what b counts */
}

const char *hq_effect_convention(enum hp_metric m)
{
    return hp_metric_effect_text(m);
}
