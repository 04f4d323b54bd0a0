/*
 * query_selfrepair.c -- `self-repair`: a direct study's units, each with its
 * total effect (the unit ablated: every reader after it loses it), its direct
 * effect (only its edges into the logits patched: the path straight through
 * the residual stream to the output) and compensation = direct - total, what
 * later layers make up for when the unit is gone (> 0: self-repair; < 0: the
 * loss grows through later layers). Each with a paired 95% interval across
 * sequences; largest compensation first.
 *
 * Invariants: a unit's first total and first direct job (plan order) are its
 * row; a sequence counts toward an interval when both jobs and the baseline
 * have a finite value for it (compensation: direct_s - total_s, the baseline
 * cancelling).
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

struct repair_row {
    int layer, unit;
    char label[48];
    double total, direct, comp;
    struct acc t, d, c; /* per-sequence total, direct and compensation */
};

static int by_comp_desc(const void *a, const void *b)
{
    const struct repair_row *x = a, *y = b;
    const bool nx = isnan(x->comp), ny = isnan(y->comp);
    if (nx != ny)
        return nx ? 1 : -1;
    if (!nx && x->comp != y->comp)
        return x->comp < y->comp ? 1 : -1;
    return x->layer != y->layer ? x->layer - y->layer : x->unit - y->unit;
}

/* The baseline's value of each sequence into *base (indexed by seq, NaN where none), *n_base of them. */
static enum hp_status base_seqs(struct hq_query *q, double **base, size_t *n_base)
{
    sqlite3_stmt *st;
    enum hp_status s = hq_prep_m(q, &st, "SELECT seq, %s FROM seq_results WHERE variant_id = ? ORDER BY seq");
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->base_variant);
    size_t cap = 0;
    int r;
    while ((r = hq_step(q, st, &s)) == 1) {
        const long long seq = sqlite3_column_int64(st, 0);
        if (seq < 0 || seq > (1 << 26)) { /* a hostile file's index must not size an array */
            s = hp_fail(q->err, HP_ERR_FORMAT, "%s: seq_results has sequence %lld (not a sequence index)", q->path,
                        seq);
            r = -1;
            break;
        }
        if ((size_t)seq >= *n_base) {
            if ((size_t)seq >= cap) {
                const size_t want = (size_t)seq + 1 > 2 * cap ? (size_t)seq + 1 : 2 * cap;
                double *g = realloc(*base, want * sizeof *g);
                if (!g) {
                    s = hp_fail(q->err, HP_ERR_NOMEM, "query: out of memory");
                    r = -1;
                    break;
                }
                *base = g, cap = want;
            }
            for (size_t i = *n_base; i <= (size_t)seq; i++)
                (*base)[i] = NAN;
            *n_base = (size_t)seq + 1;
        }
        (*base)[seq] = hq_col_num(st, 1);
    }
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

/*
 * The study's units: each unit's first total and direct jobs, with their per-sequence effects paired with the
 * baseline (base, n_base) and with each other. *rows is the caller's (free) even on failure.
 */
static enum hp_status repair_load(struct hq_query *q, const char *study, const double *base, size_t n_base,
                                  struct repair_row **rows, size_t *n)
{
    sqlite3_stmt *st;
    enum hp_status s = hq_prep_m(q, &st,
                                 "SELECT j.ord, j.kv, j.layer, j.unit, j.sample, r.%s, sv.seq, sv.%s "
                                 "FROM sweep_jobs j JOIN results r ON r.variant_id = j.variant_id "
                                 "LEFT JOIN seq_results sv ON sv.variant_id = j.variant_id "
                                 "WHERE j.sweep_id = ? AND j.study = ? AND j.kind = 'direct' "
                                 "AND j.layer IS NOT NULL AND j.unit IS NOT NULL AND j.sample IN (0, 1) "
                                 "ORDER BY j.layer, j.unit, j.sample, j.ord, sv.seq");
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, study, -1, SQLITE_STATIC);
    double *tot = malloc((n_base ? n_base : 1) * sizeof *tot); /* the current unit's total effect by sequence */
    if (!tot) {
        sqlite3_finalize(st);
        return hp_fail(q->err, HP_ERR_NOMEM, "query: out of memory");
    }
    size_t cap = 0;
    long long ord_used = -1; /* the job whose sequences are being read: a unit's first of each sample */
    int r, sample_used = -1;
    while ((r = hq_step(q, st, &s)) == 1) {
        int l, u;
        if (!hq_col_index(q, st, 2, q->n_layers, "layer", &l, &s) || !hq_col_index(q, st, 3, q->n_heads, "unit", &u, &s)) {
            r = -1;
            break;
        }
        const long long ord = sqlite3_column_int64(st, 0);
        const int sample = sqlite3_column_int(st, 4);
        struct repair_row *h = *n ? &(*rows)[*n - 1] : NULL;
        if (!h || h->layer != l || h->unit != u) { /* a new unit */
            struct repair_row *g = hq_room_for(q, *rows, *n, &cap, sizeof *g, &s);
            if (!g) {
                r = -1;
                break;
            }
            *rows = g;
            h = &(*rows)[(*n)++];
            memset(h, 0, sizeof *h);
            h->layer = l, h->unit = u;
            h->total = h->direct = NAN;
            hp_unit_label(h->label, sizeof h->label, (enum hp_unit_kind)sqlite3_column_int(st, 1), l, u);
            for (size_t i = 0; i < n_base; i++)
                tot[i] = NAN;
            sample_used = -1;
        }
        if (sample != sample_used) { /* the unit's first job of this sample */
            sample_used = sample, ord_used = ord;
            const double e = hq_effect_of(q->m, hq_col_num(st, 5), q->base);
            *(sample == 0 ? &h->total : &h->direct) = e;
        }
        if (ord != ord_used || sqlite3_column_type(st, 6) == SQLITE_NULL)
            continue;
        const long long seq = sqlite3_column_int64(st, 6);
        if (seq < 0 || (size_t)seq >= n_base || isnan(base[seq]))
            continue;
        const double e = hq_effect_of(q->m, hq_col_num(st, 7), base[seq]);
        if (!isfinite(e))
            continue;
        if (sample == 0) {
            tot[seq] = e;
            hq_acc_add(&h->t, e);
        } else {
            hq_acc_add(&h->d, e);
            if (isfinite(tot[seq]))
                hq_acc_add(&h->c, e - tot[seq]);
        }
    }
    sqlite3_finalize(st);
    free(tot);
    for (size_t i = 0; i < *n; i++)
        (*rows)[i].comp = (*rows)[i].direct - (*rows)[i].total;
    return r < 0 ? s : HP_OK;
}

enum hp_status hq_self_repair(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out)
{
    enum { C_UNIT, C_LAYER, C_TOTAL, C_T_LO, C_T_HI, C_DIRECT, C_D_LO, C_D_HI, C_COMP, C_LO, C_HI, C_SEQS, C_P, C_N };
    static const char *const cols[C_N] = {"unit",   "layer",    "total",     "total_lo", "total_hi", "direct", "direct_lo",
                                          "direct_hi", "compensation", "ci_lo", "ci_hi",    "seqs",   "p"};
    static const bool num[C_N] = {false, true, true, true, true, true, true, true, true, true, true, true, true};
    struct pick pk;
    enum hp_status s = hq_pick_study(q, "direct", opts->study, &pk);
    if (s != HP_OK)
        return s;
    double *base = NULL;
    size_t n_base = 0, n = 0;
    struct repair_row *rows = NULL;
    if ((s = base_seqs(q, &base, &n_base)) == HP_OK)
        s = repair_load(q, pk.name, base, n_base, &rows, &n);
    free(base);
    if (s != HP_OK) {
        free(rows);
        return s;
    }
    if (n)
        hp_qsort(rows, n, sizeof *rows, by_comp_desc);
    const size_t shown = opts->top > 0 && (size_t)opts->top < n ? (size_t)opts->top : n;
    struct tb b;
    hq_tb_init(&b, C_N, cols, num);
    for (size_t i = 0; i < shown; i++) {
        const struct repair_row *h = &rows[i];
        const int row = hq_tb_row(&b);
        double lo, hi, p;
        hq_tb_str(&b, row, C_UNIT, h->label);
        hq_tb_int(&b, row, C_LAYER, h->layer);
        hq_tb_num(&b, row, C_TOTAL, F_EFFECT, h->total);
        hq_acc_ci(&h->t, &lo, &hi, &p);
        hq_tb_num(&b, row, C_T_LO, F_EFFECT, lo);
        hq_tb_num(&b, row, C_T_HI, F_EFFECT, hi);
        hq_tb_num(&b, row, C_DIRECT, F_EFFECT, h->direct);
        hq_acc_ci(&h->d, &lo, &hi, &p);
        hq_tb_num(&b, row, C_D_LO, F_EFFECT, lo);
        hq_tb_num(&b, row, C_D_HI, F_EFFECT, hi);
        hq_tb_num(&b, row, C_COMP, F_EFFECT, h->comp);
        hq_tb_ci(&b, row, C_LO, &h->c);
    }
    free(rows);
    hq_tb_note(&b,
               "sweep %lld, study %s (%s), %s; total: the unit ablated (every reader after it loses it); direct: only "
               "its edges into the logits patched (docs/edges.md); compensation = direct - total, what later layers "
               "make up for when it is gone (> 0), largest first; *_lo..*_hi the paired 95%% t intervals of the "
               "per-sequence effects, ci_lo..ci_hi and p those of the per-sequence compensation",
               q->sweep, pk.name, hp_unit_name(pk.kv, true), hq_effect_convention(q->m));
    return hq_tb_finish(&b, out, q->err);
}
