/*
 * query_pairs.c -- how heads back each other up: `redundancy` (per layer, the
 * units cheap to remove alone, keeping only the best one, removing the whole
 * layer) and `pairs` (the interaction of two units removed together against
 * the two alone).
 *
 * Invariants: the singles a pair is measured against are each unit's first
 * single job; an interaction is undefined (NaN, left out of --top) when a
 * single is missing. A pair's interval is of its per-sequence interactions,
 * each against the baseline's same sequence, over the sequences where the
 * pair, both singles and the baseline all have a finite value; a pair's units
 * share a layer, so one layer's singles' sequences are held at a time.
 *
 * Must not: print, or exit.
 */
#define _POSIX_C_SOURCE 200809L

#include "headprune.h"
#include "query_priv.h"
#include "util.h"

#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// --- redundancy -------------------------------------------------------------

struct layer_sum {
    long long units, below;
    double sum, max;
    double only_min;
    char only_label[48];
    double layer_effect;
};

enum hp_status hq_redundancy(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out)
{
    const double eps = opts->eps;
    enum { C_LAYER, C_UNITS, C_BELOW, C_MEAN, C_MAX, C_ONLY, C_ONLY_UNIT, C_WHOLE, C_N };
    static const char *const cols[C_N] = {"layer", "units", "below_eps", "mean_effect", "max_effect",
                                          "only_effect", "only_unit", "layer_effect"};
    static const bool num[C_N] = {true, true, true, true, true, true, false, true};
    char single[128], only[128], layer[128];
    bool has_single, has_only, has_layer;
    enum hp_status s;
    if ((s = hq_first_study(q, "single", false, single, sizeof single, &has_single)) != HP_OK ||
        (s = hq_first_study(q, "only", false, only, sizeof only, &has_only)) != HP_OK ||
        (s = hq_first_study(q, "layer", false, layer, sizeof layer, &has_layer)) != HP_OK)
        return s;
    if (has_single) { // as heads reads it: the first single study over query heads, else the first
        struct pick pk;
        if ((s = hq_pick_study(q, "single", NULL, &pk)) != HP_OK)
            return s;
        snprintf(single, sizeof single, "%s", pk.name);
        has_single = pk.kv != HP_UNIT_MLP; /* a layer's redundancy is among its heads: not its MLP */
    }
    if (!has_single && !has_only && !has_layer)
        return hq_lacking(q, "'single', 'only', 'layer'", false, NULL, "single, only or layer study",
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
        if ((s = hq_prep_m(q, &st,
                        "SELECT j.kv, j.layer, j.unit, r.%s FROM sweep_jobs j "
                        "JOIN results r ON r.variant_id = j.variant_id "
                        "WHERE j.sweep_id = ? AND j.study = ? ORDER BY j.ord")) != HP_OK)
            break;
        sqlite3_bind_int64(st, 1, q->sweep);
        sqlite3_bind_text(st, 2, studies[which], -1, SQLITE_STATIC);
        int r;
        while ((r = hq_step(q, st, &s)) == 1) {
            int l, u;
            if (!hq_col_index(q, st, 1, q->n_layers, "layer", &l, &s) || !hq_col_index(q, st, 2, q->n_heads, "unit", &u, &s)) {
                r = -1;
                break;
            }
            double e = hq_effect_of(q->m, hq_col_num(st, 3), q->base);
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
    hq_tb_init(&b, C_N, cols, num);
    for (int l = 0; l < q->n_layers; l++) {
        const struct layer_sum *x = &ls[l];
        int row = hq_tb_row(&b);
        hq_tb_int(&b, row, C_LAYER, l);
        if (has_single) {
            hq_tb_int(&b, row, C_UNITS, x->units);
            hq_tb_int(&b, row, C_BELOW, x->below);
            if (x->units > 0)
                hq_tb_num(&b, row, C_MEAN, F_EFFECT, x->sum / (double)x->units);
            hq_tb_num(&b, row, C_MAX, F_EFFECT, x->max);
        }
        hq_tb_num(&b, row, C_ONLY, F_EFFECT, x->only_min);
        if (!isnan(x->only_min))
            hq_tb_str(&b, row, C_ONLY_UNIT, x->only_label);
        hq_tb_num(&b, row, C_WHOLE, F_EFFECT, x->layer_effect);
    }
    free(ls);
    // each part names its study, or says the sweep has none (its columns are empty), never "(study none)"
    char part[3][300];
    if (has_single)
        snprintf(part[0], sizeof part[0], "units, below_eps (effect < %g), mean/max_effect: each unit removed alone "
                 "(study %s)", eps, single);
    else
        snprintf(part[0], sizeof part[0], "units, below_eps, mean/max_effect empty: the sweep has no single study");
    if (has_only)
        snprintf(part[1], sizeof part[1], "only_effect: keeping only the layer's best unit only_unit (study %s)", only);
    else
        snprintf(part[1], sizeof part[1], "only_effect, only_unit empty: the sweep has no only study");
    if (has_layer)
        snprintf(part[2], sizeof part[2], "layer_effect: removing the layer's attention (study %s)", layer);
    else
        snprintf(part[2], sizeof part[2], "layer_effect empty: the sweep has no layer study");
    hq_tb_note(&b, "sweep %lld, %s; %s; %s; %s", q->sweep, hq_effect_convention(q->m), part[0], part[1], part[2]);
    return hq_tb_finish(&b, out, q->err);
}

// --- pairs ------------------------------------------------------------------

int hq_by_unit(const void *a, const void *b)
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

// Index of the single job (kv, layer, unit) of plan position ord (-1: the unit's first), or -1 if there is none.
static long single_find(const struct single_eff *s, size_t n, int kv, int layer, int unit, long long ord)
{
    size_t lo = 0, hi = n; // first element >= key
    struct single_eff key = {kv, layer, unit, ord, 0};
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (hq_by_unit(&s[mid], &key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < n && s[lo].kv == kv && s[lo].layer == layer && s[lo].unit == unit && (ord < 0 || s[lo].ord == ord))
        return (long)lo;
    return -1;
}

struct pair_row {
    long long ord;
    char study[128];
    int kv, layer, a, b;
    long ia, ib; // the singles of a and b: indices into the sorted singles, -1 for none
    double ab, ea, eb, inter;
    struct acc d; // per-sequence interactions
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
static enum hp_status pairs_load(struct hq_query *q, struct single_eff **singles, size_t *n_singles, struct pair_row **pairs,
                                 size_t *n_pairs)
{
    sqlite3_stmt *st;
    enum hp_status s = HP_OK;
    size_t cap = 0;
    if ((s = hq_prep_m(q, &st,
                    "SELECT j.kv, j.layer, j.unit, r.%s, j.ord FROM sweep_jobs j "
                    "JOIN results r ON r.variant_id = j.variant_id "
                    "WHERE j.sweep_id = ? AND j.kind = 'single' AND j.layer IS NOT NULL AND j.unit IS NOT NULL "
                    "AND j.kv IN (0, 1)")) != /* pairs are of heads or KV groups: never an MLP's single row */
        HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    int r;
    while ((r = hq_step(q, st, &s)) == 1) {
        struct single_eff *g = hq_room_for(q, *singles, (size_t)*n_singles, &cap, sizeof *g, &s);
        if (!g) {
            r = -1;
            break;
        }
        *singles = g;
        int l, u;
        if (!hq_col_index(q, st, 1, q->n_layers, "layer", &l, &s) || !hq_col_index(q, st, 2, q->n_heads, "unit", &u, &s)) {
            r = -1;
            break;
        }
        (*singles)[(*n_singles)++] = (struct single_eff){sqlite3_column_int(st, 0) != 0, l, u,
                                                          sqlite3_column_int64(st, 4),
                                                          hq_effect_of(q->m, hq_col_num(st, 3), q->base)};
    }
    sqlite3_finalize(st);
    if (r < 0)
        return s;
    if (*n_singles)
        hp_qsort(*singles, *n_singles, sizeof **singles, hq_by_unit);

    if ((s = hq_prep_m(q, &st,
                    "SELECT j.ord, j.study, j.kv, j.layer, j.unit, j.unit2, r.%s FROM sweep_jobs j "
                    "JOIN results r ON r.variant_id = j.variant_id "
                    "WHERE j.sweep_id = ? AND j.kind = 'pairs' ORDER BY j.ord")) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    cap = 0;
    while ((r = hq_step(q, st, &s)) == 1) {
        struct pair_row *g = hq_room_for(q, *pairs, (size_t)*n_pairs, &cap, sizeof *g, &s);
        if (!g) {
            r = -1;
            break;
        }
        *pairs = g;
        struct pair_row *p = &(*pairs)[(*n_pairs)++];
        memset(p, 0, sizeof *p);
        p->ord = sqlite3_column_int64(st, 0);
        snprintf(p->study, sizeof p->study, "%s", hq_col_text(st, 1));
        p->kv = sqlite3_column_int(st, 2) != 0;
        if (!hq_col_index(q, st, 3, q->n_layers, "layer", &p->layer, &s) ||
            !hq_col_index(q, st, 4, q->n_heads, "unit", &p->a, &s) || !hq_col_index(q, st, 5, q->n_heads, "unit2", &p->b, &s)) {
            r = -1;
            break;
        }
        p->ab = hq_effect_of(q->m, hq_col_num(st, 6), q->base);
        p->ia = single_find(*singles, *n_singles, p->kv, p->layer, p->a, -1);
        p->ib = single_find(*singles, *n_singles, p->kv, p->layer, p->b, -1);
        p->ea = p->ia < 0 ? NAN : (*singles)[p->ia].effect;
        p->eb = p->ib < 0 ? NAN : (*singles)[p->ib].effect;
        p->inter = p->ab - p->ea - p->eb;
    }
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

// A sequence's value of the metric.
struct seq_val {
    long long seq;
    double v;
};

// Position of seq in b (n, seq ascending), or -1.
static long seq_find(const struct seq_val *b, size_t n, long long seq)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (b[mid].seq < seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && b[lo].seq == seq ? (long)lo : -1;
}

/*
 * One layer's pairs' per-sequence interactions into their accumulators. slot:
 * (n_singles), all -1, left so; d: room for the layer's singles' effects by
 * sequence, (units, n_base) row-major, grown here (*cap doubles held).
 */
static enum hp_status layer_seqs(struct hq_query *q, int layer, const struct seq_val *base, size_t n_base,
                                 const struct single_eff *singles, size_t n_singles, long *slot, double **d,
                                 size_t *cap, struct pair_row *pairs, size_t n_pairs, sqlite3_stmt *st_single,
                                 sqlite3_stmt *st_pair)
{
    size_t units = 0;
    for (size_t i = 0; i < n_pairs; i++) {
        const struct pair_row *p = &pairs[i];
        if (p->layer != layer || p->ia < 0 || p->ib < 0)
            continue;
        if (slot[p->ia] < 0)
            slot[p->ia] = (long)units++;
        if (slot[p->ib] < 0)
            slot[p->ib] = (long)units++;
    }
    if (units == 0)
        return HP_OK;
    enum hp_status s = HP_OK;
    if (units > SIZE_MAX / sizeof(double) / n_base || units * n_base > *cap) {
        double *g = units > SIZE_MAX / sizeof(double) / n_base ? NULL : realloc(*d, units * n_base * sizeof(double));
        if (!g) {
            s = hp_fail(q->err, HP_ERR_NOMEM, "query: out of memory (%zu units by %zu sequences)", units, n_base);
            goto done;
        }
        *d = g;
        *cap = units * n_base;
    }
    for (size_t i = 0; i < units * n_base; i++)
        (*d)[i] = NAN;

    // the singles' effects, each sequence against the baseline's
    int r;
    sqlite3_reset(st_single);
    sqlite3_bind_int(st_single, 2, layer);
    while ((r = hq_step(q, st_single, &s)) == 1) {
        int u;
        if (!hq_col_index(q, st_single, 1, q->n_heads, "unit", &u, &s)) {
            r = -1;
            break;
        }
        long i = single_find(singles, n_singles, sqlite3_column_int(st_single, 0) != 0, layer, u,
                             sqlite3_column_int64(st_single, 2));
        long k = seq_find(base, n_base, sqlite3_column_int64(st_single, 3));
        if (i >= 0 && slot[i] >= 0 && k >= 0)
            (*d)[(size_t)slot[i] * n_base + (size_t)k] = hq_effect_of(q->m, hq_col_num(st_single, 4), base[k].v);
    }
    if (r < 0)
        goto done;

    // the pairs', in plan order as pairs is
    sqlite3_reset(st_pair);
    sqlite3_bind_int(st_pair, 2, layer);
    size_t c = 0;
    while ((r = hq_step(q, st_pair, &s)) == 1) {
        long long ord = sqlite3_column_int64(st_pair, 0);
        while (c < n_pairs && pairs[c].ord < ord)
            c++;
        if (c == n_pairs)
            break;
        struct pair_row *p = &pairs[c];
        long k = seq_find(base, n_base, sqlite3_column_int64(st_pair, 1));
        if (p->ord != ord || p->ia < 0 || p->ib < 0 || k < 0)
            continue;
        const double *da = *d + (size_t)slot[p->ia] * n_base, *db = *d + (size_t)slot[p->ib] * n_base;
        double in = hq_effect_of(q->m, hq_col_num(st_pair, 2), base[k].v) - da[k] - db[k];
        if (isfinite(in))
            hq_acc_add(&p->d, in);
    }
done:
    for (size_t i = 0; i < n_pairs; i++)
        if (pairs[i].layer == layer && pairs[i].ia >= 0 && pairs[i].ib >= 0)
            slot[pairs[i].ia] = slot[pairs[i].ib] = -1;
    return s;
}

/*
 * Each pair's per-sequence interactions I_s = D_s(ab) - D_s(a) - D_s(b), D_s
 * a variant's sequence s against the baseline's, into its accumulator; pairs
 * in plan order. None (empty accumulators) when the baseline has no
 * per-sequence results. Memory: the baseline's sequences, and the sequences
 * of one layer's singles at a time.
 */
static enum hp_status pairs_seqs(struct hq_query *q, const struct single_eff *singles, size_t n_singles,
                                 struct pair_row *pairs, size_t n_pairs)
{
    struct seq_val *base = NULL;
    size_t n_base = 0, cap = 0;
    sqlite3_stmt *st;
    enum hp_status s = hq_prep_m(q, &st, "SELECT seq, %s FROM seq_results WHERE variant_id = ? ORDER BY seq");
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->base_variant);
    int r;
    while ((r = hq_step(q, st, &s)) == 1) {
        struct seq_val *g = hq_room_for(q, base, n_base, &cap, sizeof *g, &s);
        if (!g) {
            r = -1;
            break;
        }
        base = g;
        base[n_base++] = (struct seq_val){sqlite3_column_int64(st, 0), hq_col_num(st, 1)};
    }
    sqlite3_finalize(st);
    if (r < 0 || n_base == 0 || n_singles == 0) {
        free(base);
        return r < 0 ? s : HP_OK;
    }

    long *slot = malloc(n_singles * sizeof *slot);
    double *d = NULL;
    size_t d_cap = 0;
    sqlite3_stmt *st_single = NULL, *st_pair = NULL;
    if (!slot) {
        s = hp_fail(q->err, HP_ERR_NOMEM, "query: out of memory");
        goto done;
    }
    for (size_t i = 0; i < n_singles; i++)
        slot[i] = -1;
    if ((s = hq_prep_m(q, &st_single,
                    "SELECT j.kv, j.unit, j.ord, sv.seq, sv.%s FROM sweep_jobs j "
                    "JOIN seq_results sv ON sv.variant_id = j.variant_id "
                    "WHERE j.sweep_id = ?1 AND j.kind = 'single' AND j.layer = ?2 AND j.unit IS NOT NULL "
                    "AND j.kv IN (0, 1)")) != HP_OK ||
        (s = hq_prep_m(q, &st_pair,
                    "SELECT j.ord, sv.seq, sv.%s FROM sweep_jobs j "
                    "JOIN seq_results sv ON sv.variant_id = j.variant_id "
                    "WHERE j.sweep_id = ?1 AND j.kind = 'pairs' AND j.layer = ?2 ORDER BY j.ord")) != HP_OK)
        goto done;
    sqlite3_bind_int64(st_single, 1, q->sweep);
    sqlite3_bind_int64(st_pair, 1, q->sweep);
    for (int l = 0; l < q->n_layers && s == HP_OK; l++)
        s = layer_seqs(q, l, base, n_base, singles, n_singles, slot, &d, &d_cap, pairs, n_pairs, st_single, st_pair);
done:
    sqlite3_finalize(st_single);
    sqlite3_finalize(st_pair);
    free(d);
    free(slot);
    free(base);
    return s;
}

enum hp_status hq_pairs(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out)
{
    const int top = opts->top;
    enum { C_STUDY, C_PAIR, C_LAYER, C_A, C_B, C_AB, C_EA, C_EB, C_I, C_LO, C_HI, C_SEQS, C_P, C_N };
    static const char *const cols[C_N] = {"study",    "pair",     "layer",       "unit_a", "unit_b",
                                          "effect_ab", "effect_a", "effect_b", "interaction", "ci_lo",
                                          "ci_hi",     "seqs",     "p"};
    static const bool num[C_N] = {false, false, true, true, true, true, true, true, true, true, true, true, true};
    struct single_eff *singles = NULL;
    struct pair_row *pairs = NULL;
    size_t n_singles = 0, n_pairs = 0;
    enum hp_status s = pairs_load(q, &singles, &n_singles, &pairs, &n_pairs);
    if (s != HP_OK) {
        free(singles);
        free(pairs);
        return s;
    }
    size_t n_known = 0;
    for (size_t i = 0; i < n_pairs; i++)
        n_known += !isnan(pairs[i].ea) && !isnan(pairs[i].eb);
    if (n_pairs == 0 || n_known == 0) {
        free(singles);
        free(pairs);
        if (n_pairs == 0)
            return hq_lacking(q, "'pairs'", false, NULL, "pairs study", "add a 'pairs' study to the plan");
        return hq_lacking(q, "'pairs', 'single'", true, NULL,
                       "single-unit results for the units of its pairs study", "add a 'single' study to the plan");
    }
    s = pairs_seqs(q, singles, n_singles, pairs, n_pairs); // while pairs is in plan order
    free(singles);
    if (s != HP_OK) {
        free(pairs);
        return s;
    }
    hp_qsort(pairs, n_pairs, sizeof *pairs, by_interaction_desc);

    // top K: the K most redundant and the K most sub-additive (undefined interactions dropped)
    size_t n_valid = 0;
    while (n_valid < n_pairs && !isnan(pairs[n_valid].inter))
        n_valid++;
    bool cut = top > 0 && 2 * (size_t)top < n_valid;
    struct tb b;
    hq_tb_init(&b, C_N, cols, num);
    for (size_t i = 0; i < (top > 0 ? n_valid : n_pairs); i++) {
        if (cut && i >= (size_t)top && i < n_valid - (size_t)top)
            continue;
        const struct pair_row *p = &pairs[i];
        int row = hq_tb_row(&b);
        char la[48], lb[48];
        hp_unit_label(la, sizeof la, p->kv, p->layer, p->a);
        hp_unit_label(lb, sizeof lb, p->kv, p->layer, p->b);
        hq_tb_str(&b, row, C_STUDY, p->study);
        hq_tb_fmt(&b, row, C_PAIR, "%s+%s", la, lb);
        if (p->layer >= 0)
            hq_tb_int(&b, row, C_LAYER, p->layer);
        if (p->a >= 0)
            hq_tb_int(&b, row, C_A, p->a);
        if (p->b >= 0)
            hq_tb_int(&b, row, C_B, p->b);
        hq_tb_num(&b, row, C_AB, F_EFFECT, p->ab);
        hq_tb_num(&b, row, C_EA, F_EFFECT, p->ea);
        hq_tb_num(&b, row, C_EB, F_EFFECT, p->eb);
        hq_tb_num(&b, row, C_I, F_EFFECT, p->inter);
        hq_tb_ci(&b, row, C_LO, &p->d);
    }
    free(pairs);
    hq_tb_note(&b,
            "sweep %lld, %s; interaction = effect_ab - effect_a - effect_b (singles from the sweep's single study): "
            "> 0 = redundant pair, each backs the other up (removing both hurts more than the two removals add up to); "
            "< 0 = sub-additive (removing one already does most of the damage); largest first%s; "
            HQ_CI_NOTE("interaction") " (each sequence's effect_ab - effect_a - effect_b, over the sequences "
            "all three and the baseline have)",
            q->sweep, hq_effect_convention(q->m), cut ? " (only the top and bottom rows)" : "");
    return hq_tb_finish(&b, out, q->err);
}
