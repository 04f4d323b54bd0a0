/*
 * query_heads.c -- `heads` and `sets`: each unit of a single study, or each
 * named set of an explicit study, ablated alone against the baseline, with a
 * paired 95% interval across sequences (hq_rows_load, which roles reuses for
 * its effects); heads also as a matrix, layers by units, and with an
 * attribution study's estimate beside each effect.
 *
 * Invariants: one single study at a time (named, else the sweep's first over
 * query heads), never heads and KV groups ranked together; a unit's first job
 * (plan order) is its row.
 *
 * Must not: print, or exit.
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

// --- heads and sets -----------------------------------------------------------

void hq_rows_free(struct head_row *rows, size_t n)
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
 * set's mask spec too. *rows is the caller's (hq_rows_free) even on failure.
 */
enum hp_status hq_rows_load(struct hq_query *q, const char *kind, const char *study, bool masks, struct head_row **rows,
                                size_t *n)
{
    sqlite3_stmt *st;
    enum hp_status s = hq_prep_m(q, &st,
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
    while ((r = hq_step(q, st, &s)) == 1) {
        long long ord = sqlite3_column_int64(st, 0);
        if (*n == 0 || (*rows)[*n - 1].ord != ord) {
            struct head_row *g = hq_room_for(q, *rows, (size_t)*n, &cap, sizeof *g, &s);
            if (!g) {
                r = -1;
                break;
            }
            *rows = g;
            struct head_row *h = &(*rows)[(*n)++];
            memset(h, 0, sizeof *h);
            h->ord = ord;
            snprintf(h->study, sizeof h->study, "%s", hq_col_text(st, 1));
            if (!hq_col_index(q, st, 3, q->n_layers, "layer", &h->layer, &s) ||
                !hq_col_index(q, st, 4, q->n_heads, "unit", &h->unit, &s)) {
                r = -1;
                break;
            }
            if (h->layer >= 0 && h->unit >= 0)
                hp_unit_label(h->label, sizeof h->label, (enum hp_unit_kind)sqlite3_column_int(st, 2), h->layer, h->unit);
            else
                snprintf(h->label, sizeof h->label, "%s", hq_col_text(st, 5));
            h->n_ablated = sqlite3_column_int64(st, 6);
            if (masks && !(h->mask = hq_dup_str(hq_col_text(st, 7)))) {
                s = hp_fail(q->err, HP_ERR_NOMEM, "query: out of memory");
                r = -1;
                break;
            }
            h->value = hq_col_num(st, 8);
            h->effect = hq_effect_of(q->m, h->value, q->base);
        }
        double v = hq_col_num(st, 9), bs = hq_col_num(st, 10);
        double d = hq_effect_of(q->m, v, bs);
        if (!isnan(d))
            hq_acc_add(&(*rows)[*n - 1].d, d);
    }
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

// The effect with its paired interval, sequence count and test into cols c_effect.. c_effect + 4.
static void row_effect_cells(struct tb *b, int row, int c_effect, const struct head_row *h)
{
    hq_tb_num(b, row, c_effect, F_EFFECT, h->effect);
    hq_tb_ci(b, row, c_effect + 1, &h->d);
}

#define CI_NOTE HQ_CI_NOTE("effect")

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

/*
 * Matrix layout: one row per layer with a result, one column per unit (query
 * heads, or KV groups for a KV study), each cell the unit's effect to three
 * significant digits, for reading the whole model at a glance on a terminal.
 * rows (n) are sorted here.
 */
static enum hp_status heads_matrix(struct hq_query *q, const struct pick *pk, struct head_row *rows, size_t n,
                                   struct hp_table **out)
{
    int units = pk->kv == HP_UNIT_MLP ? 1 : pk->kv == HP_UNIT_KV && q->n_kv_heads ? q->n_kv_heads : q->n_heads;
    for (size_t i = 0; i < n; i++)
        if (rows[i].unit >= units)
            units = rows[i].unit + 1; // a KV study of a database that names its KV heads oddly: still no overflow
    if (units > MATRIX_MAX_UNITS)
        return hp_fail(q->err, HP_ERR_ARG, "%s: sweep %lld's model has %d %s a layer, too many for a matrix (at most "
                       "%d; use --format csv)", q->path, q->sweep, units, hp_unit_name(pk->kv, true),
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
    hq_tb_init(&b, units + 1, cols, num);
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
            row = hq_tb_row(&b);
            hq_tb_int(&b, row, 0, h->layer);
        }
        if (new_layer || rows[i - 1].unit != h->unit) // the first job of a unit, as everywhere
            hq_tb_num(&b, row, h->unit + 1, "%.3g", h->effect);
    }
    char others[600];
    others_note(pk, others, sizeof others);
    hq_tb_note(&b,
            "sweep %lld, study %s, %s; rows: layers, columns: %s, each cell the effect of masking that unit alone "
            "(3 significant digits; --format csv or json gives each effect in full precision, with its intervals)%s",
            q->sweep, pk->name, hq_effect_convention(q->m), pk->kv ? hp_unit_name(pk->kv, true) : "query heads", others);
    return hq_tb_finish(&b, out, q->err);
}

enum hp_status hq_heads(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out)
{
    if (opts->gates) /* a gates study's test-time gates instead of the single effects (query_gates.c) */
        return hq_heads_gates(q, opts->study, opts->top, opts->matrix, out);
    const char *study = opts->study;
    const int top = opts->top;
    const bool matrix = opts->matrix;
    enum { C_STUDY, C_LABEL, C_LAYER, C_UNIT, C_VALUE, C_EFFECT, C_LO, C_HI, C_SEQS, C_P, C_ATP, C_N };
    const char *cols[C_N] = {"study", "label", "layer", "unit", q->mname, "effect", "ci_lo", "ci_hi", "seqs", "p",
                             "atp"};
    static const bool num[C_N] = {false, false, true, true, true, true, true, true, true, true, true};
    struct pick pk;
    enum hp_status s = hq_pick_study(q, "single", study, &pk);
    if (s != HP_OK)
        return s;
    struct head_row *rows = NULL;
    size_t n = 0;
    if ((s = hq_rows_load(q, "single", pk.name, false, &rows, &n)) != HP_OK) {
        hq_rows_free(rows, n);
        return s;
    }
    if (matrix) {
        s = heads_matrix(q, &pk, rows, n, out);
        hq_rows_free(rows, n);
        return s;
    }
    hp_qsort(rows, n, sizeof *rows, by_effect_desc);
    size_t shown = top > 0 && (size_t)top < n ? (size_t)top : n;
    /* the sweep's attribution study over the same units, if any: its estimates beside the exact effects */
    struct score_row *atp = NULL;
    size_t n_atp = 0;
    char atp_name[128] = "";
    if ((s = hq_heads_estimate(q, pk.kv, atp_name, sizeof atp_name, &atp, &n_atp)) != HP_OK) {
        hq_rows_free(rows, n);
        free(atp);
        return s;
    }

    /* the column is named by the estimator: atp (the first-order estimate), or ig-layer / ig */
    char est_col[16] = "atp";
    if (atp_name[0] && n_atp && atp[0].estimator[0])
        snprintf(est_col, sizeof est_col, "%s", atp[0].estimator);
    cols[C_ATP] = est_col;
    struct tb b;
    hq_tb_init(&b, atp_name[0] ? C_N : C_N - 1, cols, num);
    for (size_t i = 0; i < shown; i++) {
        const struct head_row *h = &rows[i];
        int row = hq_tb_row(&b);
        hq_tb_str(&b, row, C_STUDY, h->study);
        hq_tb_str(&b, row, C_LABEL, h->label);
        if (h->layer >= 0)
            hq_tb_int(&b, row, C_LAYER, h->layer);
        if (h->unit >= 0)
            hq_tb_int(&b, row, C_UNIT, h->unit);
        hq_tb_num(&b, row, C_VALUE, F_METRIC, h->value);
        row_effect_cells(&b, row, C_EFFECT, h);
        if (atp_name[0] && h->layer >= 0 && h->unit >= 0)
            hq_tb_num(&b, row, C_ATP, F_EFFECT, hq_score_at(atp, n_atp, h->layer, h->unit));
    }
    hq_rows_free(rows, n);
    free(atp);
    char others[600], atp_note[300] = "";
    others_note(&pk, others, sizeof others);
    if (atp_name[0])
        snprintf(atp_note, sizeof atp_note, "; %s: attribution study %s's %s of the loss effect (query attribution: "
                 "how well it ranks them)", est_col, atp_name,
                 strcmp(est_col, "atp") == 0 ? "first-order estimate" : "integrated-gradients estimate");
    hq_tb_note(&b, "sweep %lld, study %s (%s), %s; each unit masked alone, largest effect first; " CI_NOTE "%s%s",
            q->sweep, pk.name, pk.kv ? hp_unit_name(pk.kv, true) : "query heads", hq_effect_convention(q->m), atp_note, others);
    return hq_tb_finish(&b, out, q->err);
}

// Each named set of the sweep's explicit studies (or of the one named), masked together.
enum hp_status hq_sets(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out)
{
    const char *study = opts->study;
    const int top = opts->top;
    enum { C_STUDY, C_SET, C_HEADS, C_VALUE, C_EFFECT, C_LO, C_HI, C_SEQS, C_P, C_MASK, C_N };
    const char *cols[C_N] = {"study", "set", "heads", q->mname, "effect", "ci_lo", "ci_hi", "seqs", "p", "mask"};
    static const bool num[C_N] = {false, false, true, true, true, true, true, true, true, false};
    enum hp_status s;
    if (study) {
        struct pick pk;
        if ((s = hq_pick_study(q, "explicit", study, &pk)) != HP_OK)
            return s;
    }
    struct head_row *rows = NULL;
    size_t n = 0;
    if ((s = hq_rows_load(q, "explicit", study, true, &rows, &n)) != HP_OK) {
        hq_rows_free(rows, n);
        return s;
    }
    if (n == 0) {
        hq_rows_free(rows, n);
        return hq_lacking(q, "'explicit'", false, NULL, "explicit study",
                       "add one to the plan: explicit: {sets: {NAME: MASK}}");
    }
    hp_qsort(rows, n, sizeof *rows, by_effect_desc);
    size_t shown = top > 0 && (size_t)top < n ? (size_t)top : n;
    struct tb b;
    hq_tb_init(&b, C_N, cols, num);
    for (size_t i = 0; i < shown; i++) {
        const struct head_row *h = &rows[i];
        int row = hq_tb_row(&b);
        hq_tb_str(&b, row, C_STUDY, h->study);
        hq_tb_str(&b, row, C_SET, h->label);
        hq_tb_int(&b, row, C_HEADS, h->n_ablated);
        hq_tb_num(&b, row, C_VALUE, F_METRIC, h->value);
        row_effect_cells(&b, row, C_EFFECT, h);
        hq_tb_str(&b, row, C_MASK, h->mask);
    }
    hq_rows_free(rows, n);
    hq_tb_note(&b, "sweep %lld, %s; each set's heads masked together (heads: query heads masked), largest effect first; "
            CI_NOTE, q->sweep, hq_effect_convention(q->m));
    return hq_tb_finish(&b, out, q->err);
}
