/*
 * query_priv.h -- the query family's private insides, shared by engine/query*.c
 * and by nothing else (others use query.h and headprune.h).
 *
 * The family (SQLite's where*.c + whereInt.h): query_table.c builds result
 * tables and holds the statistics; query_sweep.c is the connection and the
 * sweep a question reads (its metric, baseline, shape and studies); one file
 * answers each question or small group of them (query_curve.c, query_heads.c,
 * query_pairs.c, query_compare.c, query_scores.c, query_roles.c,
 * query_gates.c, query_patching.c, query_screen.c, query_sql.c); query.c is
 * the entry (hp_query, the readers).
 * Names shared across the family carry the prefix hq_; everything else in a
 * file is static.
 *
 * Must not: be included outside engine/query*.c.
 */
#ifndef HP_QUERY_PRIV_H
#define HP_QUERY_PRIV_H

#include "headprune.h"

#include <sqlite3.h>

#include <stdbool.h>
#include <stddef.h>

#if defined(__GNUC__)
#define HQ_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define HQ_PRINTF(f, a)
#endif

// A sweep may be writing: wait this long for its lock before giving up.
#define BUSY_TIMEOUT_MS 10000

// --- tables (query_table.c) ---------------------------------------------------

/*
 * A table under construction. Allocation failures are sticky: every setter
 * becomes a no-op after the first one and hq_tb_finish reports it, so the
 * queries can fill tables without checking each call.
 */
struct tb {
    struct hp_table *t;
    int cap; // rows allocated
    bool nomem;
};

// Formats: metric values, effects and intervals, percentages.
#define F_METRIC "%.6f"
#define F_EFFECT "%.6g"
#define F_PCT "%.2f"

char *hq_dup_str(const char *s); // NULL when out of memory; the caller frees
// cols: (n_cols) names; numeric: (n_cols) flags.
void hq_tb_init(struct tb *b, int n_cols, const char *const *cols, const bool *numeric);
// A new row of empty cells: its index, or -1 after an allocation failure.
int hq_tb_row(struct tb *b);
// A new summary row (struct hp_table's n_summary), as hq_tb_row: after every unit's row.
int hq_tb_summary_row(struct tb *b);
void hq_tb_str(struct tb *b, int r, int c, const char *s);
HQ_PRINTF(4, 5) void hq_tb_fmt(struct tb *b, int r, int c, const char *fmt, ...);
/* x with one of the house formats; NaN stays empty; the cell's number is x as the text rounds it. */
void hq_tb_num(struct tb *b, int r, int c, const char *fmt, double x);
void hq_tb_int(struct tb *b, int r, int c, long long v);
HQ_PRINTF(2, 3) void hq_tb_note(struct tb *b, const char *fmt, ...);
/* Column sc of st's row, as SQLite renders it, into cell (row, c); blobs as x'hex', NULL empty. */
void hq_tb_sql_at(struct tb *b, int row, int c, sqlite3_stmt *st, int sc);
void hq_tb_sql(struct tb *b, int row, int c, sqlite3_stmt *st); // column c into cell (row, c)
// The table into *out (destructor: hp_table_free), or HP_ERR_NOMEM after an allocation failure.
enum hp_status hq_tb_finish(struct tb *b, struct hp_table **out, struct hp_error *err);

// --- statistics (query_table.c) -----------------------------------------------

// Running mean and sum of squared deviations (Welford), in double.
struct acc {
    long long n;
    double mean, m2;
};

void hq_acc_add(struct acc *a, double x);
/* 95% t interval of the mean (n - 1 df) and the two-sided p-value of
 * mean = 0; NaN where undefined (n < 2; p also when sd = 0). */
void hq_acc_ci(const struct acc *a, double *lo, double *hi, double *p);
/* a's interval, count and test into cells c (ci_lo), c + 1 (ci_hi), c + 2 (seqs), c + 3 (p) of row:
 * the columns heads, sets and pairs share. */
void hq_tb_ci(struct tb *b, int row, int c, const struct acc *a);
/* The note's sentence on those columns, what the per-sequence quantity ("effect", "interaction"). */
#define HQ_CI_NOTE(what) "ci_lo..ci_hi the paired 95%% t interval (n-1 df) of the per-sequence " what " and p its " \
                         "two-sided t test, so the " what " (over all tokens) can fall slightly off the interval's " \
                         "centre when sequences differ in length"

// Kendall's tau is left out (NaN) past this many units (n^2 / 2 comparisons).
#define MAX_TAU_UNITS (1 << 15)

// Ranks of x (1 = smallest; ties share their average) into rank: (n); false when out of memory.
bool hq_ranks_avg(const double *x, size_t n, double *rank);
// Spearman's rho and Kendall's tau-b of n pairs, as scipy.stats; false when out of memory.
bool hq_rank_corr(const double *x, const double *y, size_t n, double *rho, double *tau);

// A variant's value v against baseline value b, signed so that larger = worse.
double hq_effect_of(enum hp_metric m, double v, double b);
const char *hq_effect_convention(enum hp_metric m);

// --- the connection and the sweep (query_sweep.c) -----------------------------

struct hq_query {
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

/*
 * Numbers in the database are input like any other: a damaged or forged file
 * must not size an allocation or index an array. Bounds far above any real
 * model's, far below what could exhaust memory or overflow an int.
 */
#define MAX_LAYERS 65536
#define MAX_HEADS 65536
#define MAX_UNITS (1 << 24) // n_layers * n_heads

// One line for an SQLite failure on our own statements, naming the database (the store translates it).
enum hp_status hq_sql_fail(struct hq_query *q, int rc);
enum hp_status hq_prep(struct hq_query *q, sqlite3_stmt **st, const char *sql);
/* Prepare sql after substituting the metric's column name for every "%s". */
enum hp_status hq_prep_m(struct hq_query *q, sqlite3_stmt **st, const char *sql);
/* arr (n elements of size bytes used, *cap held) with room for one more, doubling; NULL when out of memory. */
void *hq_room_for(struct hq_query *q, void *arr, size_t n, size_t *cap, size_t size, enum hp_status *st);
// sqlite3_step: 1 = a row, 0 = done, -1 = failed (err set via *st_out).
int hq_step(struct hq_query *q, sqlite3_stmt *st, enum hp_status *st_out);
double hq_col_num(sqlite3_stmt *st, int i);       // NaN for NULL
const char *hq_col_text(sqlite3_stmt *st, int i); // "" for NULL
/* A layer or unit index from a row: -1 for NULL, else it must lie in [0, lim); false (*s set) if not. */
bool hq_col_index(struct hq_query *q, sqlite3_stmt *st, int i, int lim, const char *what, int *out,
                  enum hp_status *s);
// Whether the database has table name (tables come with schema versions).
enum hp_status hq_has_table(struct hq_query *q, const char *name, bool *yes);

/* Resolve sweep id (0 = the newest) into q: its shape, metric (metric, else the sweep's), baseline. */
enum hp_status hq_resolve_sweep(struct hq_query *q, long long id, const char *metric);
// Name of the sweep's first study (plan order) of this kind into name; false if none.
enum hp_status hq_first_study(struct hq_query *q, const char *kind, bool heads_only, char *name, size_t size,
                              bool *found);
/* The error of a sweep that lacks what a query needs, naming another sweep that has it (kinds: SQL
 * string literals, never the user's text), else fix. */
enum hp_status hq_lacking(struct hq_query *q, const char *kinds, bool all, const char *study, const char *what,
                          const char *fix);
/* For a note: "; the pruned checkpoint lacks N of its L x H" when it is pruned, else "" (into buf). */
const char *hq_absent_note(const struct hq_query *q, char *buf, size_t size);

// A study of the sweep, as hq_pick_study chose it.
struct pick {
    char name[128];
    enum hp_unit_kind kv; // its units: heads, KV groups or MLP blocks (sweep_jobs.kv)
    char all[512];  // the sweep's studies of the kind, comma-separated, in plan order
    int n_all;
};

/* The sweep's study of kind named want; with want NULL its first over query heads, else its first. */
enum hp_status hq_pick_study(struct hq_query *q, const char *kind, const char *want, struct pick *p);

// --- rows the questions share ---------------------------------------------------

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

/* Every job of kind (of study, when named) in plan order, paired with the baseline sequence by
 * sequence (query_heads.c). *rows is the caller's (hq_rows_free) even on failure. */
enum hp_status hq_rows_load(struct hq_query *q, const char *kind, const char *study, bool masks,
                            struct head_row **rows, size_t *n);
void hq_rows_free(struct head_row *rows, size_t n);

// Wider than this, a matrix is no use on a terminal (and the model's shape is input: it must not size a table).
#define MATRIX_MAX_UNITS 1024

// A single job's effect by unit (query_pairs.c, query_compare.c).
struct single_eff {
    int kv, layer, unit;
    long long ord;
    double effect;
};

int hq_by_unit(const void *a, const void *b); // (kv, layer, unit, ord) ascending

// A unit's score in a gradient study, and what queries set beside it.
struct score_row {
    int layer, unit;
    double score, raw;
    double exact;             // attribution: the single study's loss effect (NaN: none)
    double rank_est, rank_ex; // 1 = the largest
    char normalize[16];
    char estimator[16]; // attribution: hp_estimator_name's (atp before schema 9); else ""
};

/* The sweep's attribution study over units of kind kv taken at the unmasked model whose estimates are signed
 * effects, an atp one first (else ig-layer, then ig; name "" when none), and its rows (query_scores.c); *rows is
 * the caller's (free), the estimator's name in (*rows)[0].estimator. */
enum hp_status hq_heads_estimate(struct hq_query *q, enum hp_unit_kind kv, char *name, size_t size, struct score_row **rows,
                                 size_t *n);
double hq_score_at(const struct score_row *rows, size_t n, int layer, int unit); // NaN: none

// --- the questions, one file each or a few -------------------------------------------

/*
 * Each kind's row function (hp_query_kinds, query.c): the answer to opts on q's
 * connection, inside the caller's read transaction; q's sweep already resolved
 * for a row with .sweep set. Destructor of *out: hp_table_free.
 */
enum hp_status hq_sweeps(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out);  // query_sql.c
enum hp_status hq_sql(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out);     // query_sql.c
enum hp_status hq_curve(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out);   // query_curve.c
enum hp_status hq_heads(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out);   // query_heads.c
enum hp_status hq_sets(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out);    // query_heads.c
enum hp_status hq_redundancy(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out); // _pairs.c
enum hp_status hq_pairs(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out);   // query_pairs.c
enum hp_status hq_self_repair(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out); // query_selfrepair.c
enum hp_status hq_edges(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out);       // query_edges.c
enum hp_status hq_circuit(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out);     // query_circuit.c
enum hp_status hq_importance(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out); // _scores.c
enum hp_status hq_attribution(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out);
enum hp_status hq_roles(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out);   // query_roles.c
enum hp_status hq_gates(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out);   // query_gates.c
enum hp_status hq_patching(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out); // _patching.c
enum hp_status hq_screen(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out); // _screen.c
/* compare (query_compare.c): q is A's connection; B's is opened here (or A's shared: one file) and
 * both sweeps resolved */
enum hp_status hq_compare(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out);

/* heads --gates (query_gates.c; hq_heads answers with it when opts->gates is set) */
enum hp_status hq_heads_gates(struct hq_query *q, const char *study, int top, bool matrix, struct hp_table **out);

#endif
