/*
 * query_curve.c -- `curve`: the pruning curve, the sweep's metric against heads
 * pruned, from its iterative studies (one row a step, the units it pruned),
 * random studies (the mean of the samples at each k, with its 95% interval)
 * and gates studies (one row a lambda, with the model at its test-time gates).
 *
 * Invariants: heads are counted against the heads the model has (n_present);
 * a curve without a gates study has no kept, lambda or gated columns.
 *
 * Must not: print, or exit.
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

// --- curve ------------------------------------------------------------------

enum { CV_STUDY, CV_STEP, CV_K, CV_HEADS, CV_PCT, CV_SAMPLES, CV_VALUE, CV_LO, CV_HI, CV_EFFECT, CV_PRUNED, CV_MASK, CV_N };

static void curve_pct(struct hq_query *q, struct tb *b, int row, double n_ablated)
{
    const double all = q->n_present;
    if (n_ablated == floor(n_ablated))
        hq_tb_int(b, row, CV_HEADS, (long long)n_ablated);
    else
        hq_tb_num(b, row, CV_HEADS, "%.4g", n_ablated);
    hq_tb_num(b, row, CV_PCT, F_PCT, all > 0 ? 100.0 * n_ablated / all : 0.0);
    if (q->cv_kept >= 0 && n_ablated == floor(n_ablated))
        hq_tb_int(b, row, q->cv_kept, (long long)(all - n_ablated));
    else if (q->cv_kept >= 0)
        hq_tb_num(b, row, q->cv_kept, "%.4g", all - n_ablated);
}

/*
 * The units a curve step pruned, from its mask bits (bit layer * n_heads +
 * head, LSB first) and the step before's (prev, updated): "kv:L.G" for a KV
 * study's whole groups, else "L.H", comma-separated, into out.
 */
static void step_pruned(const struct hq_query *q, const void *blob, size_t len, bool kv, unsigned char *prev, char *out)
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

static enum hp_status curve_iterative(struct hq_query *q, const char *study, struct tb *b)
{
    sqlite3_stmt *st;
    if (q->ranked_missing)
        return hp_fail(q->err, HP_ERR_ARG,
                       "%s: sweep %lld ranked study '%s' by %s, which its model does not produce, so its steps are not "
                       "a pruning curve (run the plan again: headprune now refuses that metric, or takes the model's "
                       "own when the plan names none)",
                       q->path, q->sweep, study, hp_metric_name(q->ranked));
    // one curve point per step (kind 'iterative'; candidate scores are 'iterative-score')
    enum hp_status s = hq_prep_m(q, &st,
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
    while ((r = hq_step(q, st, &s)) == 1) {
        int row = hq_tb_row(b);
        double v = hq_col_num(st, 3);
        hq_tb_str(b, row, CV_STUDY, study);
        hq_tb_int(b, row, CV_STEP, sqlite3_column_int64(st, 0));
        hq_tb_int(b, row, CV_K, sqlite3_column_int64(st, 1));
        curve_pct(q, b, row, sqlite3_column_double(st, 2));
        hq_tb_num(b, row, CV_VALUE, F_METRIC, v);
        hq_tb_num(b, row, CV_EFFECT, F_EFFECT, hq_effect_of(q->m, v, q->base));
        step_pruned(q, sqlite3_column_blob(st, 6), (size_t)sqlite3_column_bytes(st, 6), sqlite3_column_int(st, 7) != 0,
                    prev, pruned);
        hq_tb_str(b, row, CV_PRUNED, pruned);
        if (q->full_mask)
            hq_tb_str(b, row, CV_MASK, hq_col_text(st, 4));
    }
    sqlite3_finalize(st);
    free(prev), free(pruned);
    return r < 0 ? s : HP_OK;
}

// Emit the row of one k of a random study from its samples.
static void curve_random_row(struct hq_query *q, struct tb *b, const char *study, long long k, const struct acc *val,
                             double n_ablated_sum, long long n_rows)
{
    int row = hq_tb_row(b);
    hq_tb_str(b, row, CV_STUDY, study);
    hq_tb_int(b, row, CV_K, k);
    curve_pct(q, b, row, n_ablated_sum / (double)n_rows);
    hq_tb_int(b, row, CV_SAMPLES, val->n);
    if (val->n > 0) {
        double lo, hi;
        hq_acc_ci(val, &lo, &hi, NULL);
        hq_tb_num(b, row, CV_VALUE, F_METRIC, val->mean);
        hq_tb_num(b, row, CV_LO, F_METRIC, lo);
        hq_tb_num(b, row, CV_HI, F_METRIC, hi);
        hq_tb_num(b, row, CV_EFFECT, F_EFFECT, hq_effect_of(q->m, val->mean, q->base));
    }
}

static enum hp_status curve_random(struct hq_query *q, const char *study, struct tb *b)
{
    sqlite3_stmt *st;
    enum hp_status s = hq_prep_m(q, &st,
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
    while ((r = hq_step(q, st, &s)) == 1) {
        long long kk = sqlite3_column_int64(st, 0);
        if (first && kk > 0) {
            // the unablated start of the curve: the baseline, one "sample"
            struct acc base = {0};
            hq_acc_add(&base, q->base);
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
        double v = hq_col_num(st, 2);
        if (!isnan(v))
            hq_acc_add(&val, v);
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
static enum hp_status curve_gates(struct hq_query *q, const char *study, struct tb *b, int c_lambda, int c_gated)
{
    sqlite3_stmt *st;
    enum hp_status s = hq_prep_m(q, &st,
                              "SELECT x.idx, x.lambda, j.k, v.n_ablated, r.%s, v.mask_text, f.%s "
                              "FROM sweep_gates x JOIN sweep_jobs j ON j.sweep_id = x.sweep_id AND j.study = x.study "
                              "  AND j.kind = 'gates' AND j.step = x.idx "
                              "JOIN variants v ON v.id = j.variant_id JOIN results r ON r.variant_id = j.variant_id "
                              "LEFT JOIN sweep_jobs jf ON jf.sweep_id = x.sweep_id AND jf.study = x.study "
                              "  AND jf.kind = '" HP_JOB_GATES_FRAC "' AND jf.step = x.idx "
                              "LEFT JOIN results f ON f.variant_id = jf.variant_id "
                              "WHERE x.sweep_id = ? AND x.study = ? GROUP BY x.idx ORDER BY x.idx");
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, study, -1, SQLITE_STATIC);
    int r;
    while ((r = hq_step(q, st, &s)) == 1) {
        int row = hq_tb_row(b);
        double v = hq_col_num(st, 4);
        hq_tb_str(b, row, CV_STUDY, study);
        hq_tb_int(b, row, CV_STEP, sqlite3_column_int64(st, 0));
        hq_tb_int(b, row, CV_K, sqlite3_column_int64(st, 2));
        curve_pct(q, b, row, sqlite3_column_double(st, 3));
        hq_tb_num(b, row, CV_VALUE, F_METRIC, v);
        hq_tb_num(b, row, CV_EFFECT, F_EFFECT, hq_effect_of(q->m, v, q->base));
        hq_tb_str(b, row, CV_PRUNED, hq_col_text(st, 5));
        hq_tb_num(b, row, c_lambda, "%.6g", hq_col_num(st, 1));
        hq_tb_num(b, row, c_gated, F_METRIC, hq_col_num(st, 6));
    }
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

#define CURVE_MAX_STUDIES 256

enum hp_status hq_curve(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out)
{
    const char *want = opts->study;
    sqlite3_stmt *st;
    enum hp_status s = hq_prep(q, &st,
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
    while ((r = hq_step(q, st, &s)) == 1 && n < CURVE_MAX_STUDIES) {
        const char *study = hq_col_text(st, 0), *kind = hq_col_text(st, 1);
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
        return hq_lacking(q, "'iterative', 'random', 'gates'", false, want, what,
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
    hq_tb_init(&b, n_cols, cols, num);
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
    hq_tb_note(&b,
            "sweep %lld, %s; k = units pruned, heads = query heads pruned (pct of the model's %lld%s); iterative: one "
            "row per step; random: %s = mean over the samples with its 95%% t interval (n-1 df) in ci_lo..ci_hi, "
            "k = 0 = the baseline%s",
            q->sweep, hq_effect_convention(q->m), (long long)q->n_present, hq_absent_note(q, absent, sizeof absent),
            q->mname,
            gates ? "; gates: one row per lambda, the heads whose test-time gate is 0 pruned (pruned: all of them), "
                    "kept = query heads kept, gated = the model at the fractional test-time gates (query gates: which "
                    "curve is lower at each lambda's heads kept)"
                  : "");
    return hq_tb_finish(&b, out, q->err);
}
