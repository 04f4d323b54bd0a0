/*
 * query_circuit.c -- `circuit`: a circuit study's curve. Each size: the edges the circuit keeps (of the graph's
 * n), their fraction, the metric with every other edge of the graph patched, and its faithfulness
 * f = (M(circuit) - M(empty)) / (M(full) - M(empty)), the empty circuit every edge patched and the full one the
 * unmasked model; the summary row "area" gives CPR, the area under f over the fractions, and CMD, the area under
 * |1 - f| (trapezoids between the sizes evaluated, from 0 to 1: docs/edges.md). Higher CPR and lower CMD are
 * better; MIB (Mueller et al. 2025) scores circuit methods by them.
 *
 * Must not: print, or exit.
 */
#define _POSIX_C_SOURCE 200809L

#include "headprune.h"
#include "query_priv.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct size_row {
    long long k;
    double value;
};

enum hp_status hq_circuit(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out)
{
    enum { C_LABEL, C_EDGES, C_FRAC, C_VALUE, C_F, C_OFF, C_N };
    const char *cols[C_N] = {"circuit", "edges", "fraction", q->mname, "faithfulness", "abs_1_minus_f"};
    static const bool num[C_N] = {false, true, true, true, true, true};
    struct pick pk;
    enum hp_status s = hq_pick_study(q, "circuit", opts->study, &pk);
    if (s != HP_OK)
        return s;
    sqlite3_stmt *st;
    if ((s = hq_prep_m(q, &st, "SELECT j.k, r.%s FROM sweep_jobs j JOIN results r ON r.variant_id = j.variant_id "
                              "WHERE j.sweep_id = ? AND j.study = ? AND j.kind = 'circuit' AND j.k >= 0 "
                              "ORDER BY j.k, j.ord")) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, pk.name, -1, SQLITE_STATIC);
    struct size_row *rows = NULL;
    size_t n = 0, cap = 0;
    int r;
    while ((r = hq_step(q, st, &s)) == 1) {
        const long long k = sqlite3_column_int64(st, 0);
        if (n && rows[n - 1].k == k) /* a size's first job */
            continue;
        struct size_row *g = hq_room_for(q, rows, n, &cap, sizeof *g, &s);
        if (!g) {
            r = -1;
            break;
        }
        rows = g;
        rows[n++] = (struct size_row){k, hq_col_num(st, 1)};
    }
    sqlite3_finalize(st);
    if (r < 0) {
        free(rows);
        return s;
    }
    /* the ends: the empty circuit (k 0) and the whole graph (the largest k) */
    const bool ends = n >= 2 && rows[0].k == 0;
    const double m0 = ends ? rows[0].value : NAN, m1 = ends ? rows[n - 1].value : NAN, kn = ends ? (double)rows[n - 1].k : NAN;
    struct tb b;
    hq_tb_init(&b, C_N, cols, num);
    double cpr = 0, cmd = 0, px = 0, pf = 0, po = 0;
    for (size_t i = 0; i < n; i++) {
        const double x = rows[i].k / kn, f = (rows[i].value - m0) / (m1 - m0), off = fabs(1 - f);
        if (i > 0) {
            cpr += (x - px) * (f + pf) / 2;
            cmd += (x - px) * (off + po) / 2;
        }
        px = x, pf = f, po = off;
        const int row = hq_tb_row(&b);
        hq_tb_fmt(&b, row, C_LABEL, "%lld of %.0f", rows[i].k, kn);
        hq_tb_int(&b, row, C_EDGES, rows[i].k);
        hq_tb_num(&b, row, C_FRAC, "%.6g", x);
        hq_tb_num(&b, row, C_VALUE, F_METRIC, rows[i].value);
        hq_tb_num(&b, row, C_F, "%.6g", f);
        hq_tb_num(&b, row, C_OFF, "%.6g", off);
    }
    const bool defined = ends && m1 != m0 && isfinite(m1 - m0);
    if (n) {
        const int row = hq_tb_summary_row(&b);
        hq_tb_str(&b, row, C_LABEL, "area");
        hq_tb_num(&b, row, C_F, "%.6g", defined ? cpr : NAN);
        hq_tb_num(&b, row, C_OFF, "%.6g", defined ? cmd : NAN);
    }
    free(rows);
    hq_tb_note(&b, "sweep %lld, study %s: each circuit keeps its edges (the highest |effect| patched alone) and "
               "patches the graph's others; faithfulness f = (M - M(empty)) / (M(full) - M(empty)), M the %s; the "
               "row \"area\": CPR (area under f, higher is better) under faithfulness and CMD (area under "
               "|1 - f|, lower is better) under abs_1_minus_f, trapezoids over the fractions evaluated%s",
               q->sweep, pk.name, q->mname,
               defined ? "" : "; undefined here: the empty circuit and the whole graph give the same metric");
    return hq_tb_finish(&b, out, q->err);
}
