/*
 * query_compare.c -- `compare`: two sweeps' single-unit effects side by side,
 * in one database or two, each against its own baseline, B - A, ranks, and
 * Spearman's rho and Kendall's tau-b over the units both have (per unit, or
 * per layer with --by layer).
 *
 * Invariants: each side has its own connection and snapshot, shared when both
 * name one file; both sides measure one metric on models of one shape, and
 * their studies ablate one kind of unit.
 *
 * Must not: write to either database, print, or exit.
 */
#define _POSIX_C_SOURCE 200809L

#include "headprune.h"
#include "query_priv.h"
#include "util.h"

#include "store.h" // hp_store_open_read: B's database, opened and version-checked by the store

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// --- compare ----------------------------------------------------------------

// One sweep of a comparison: its single study's effects by unit.
struct side {
    struct hq_query q;
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
    struct hq_query *q = &sd->q;
    sqlite3_stmt *st;
    enum hp_status s = hq_prep_m(q, &st,
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
    while ((r = hq_step(q, st, &s)) == 1) {
        struct single_eff *g = hq_room_for(q, sd->eff, (size_t)sd->n, &cap, sizeof *g, &s);
        if (!g) {
            r = -1;
            break;
        }
        sd->eff = g;
        int l, u;
        if (!hq_col_index(q, st, 0, q->n_layers, "layer", &l, &s) || !hq_col_index(q, st, 1, q->n_heads, "unit", &u, &s)) {
            r = -1;
            break;
        }
        sd->eff[sd->n++] = (struct single_eff){0, l, u, sqlite3_column_int64(st, 3),
                                                hq_effect_of(q->m, hq_col_num(st, 2), q->base)};
    }
    sqlite3_finalize(st);
    if (r < 0)
        return s;
    if (sd->n)
        hp_qsort(sd->eff, sd->n, sizeof *sd->eff, hq_by_unit);
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
    if ((s = hq_resolve_sweep(&a->q, o->sweep_id, o->metric)) != HP_OK ||
        (s = hq_resolve_sweep(&b->q, o->sweep_id2, o->metric)) != HP_OK)
        return s;
    char na[700], nb[700];
    side_name(a, na, sizeof na);
    side_name(b, nb, sizeof nb);
    if (same_db && a->q.sweep == b->q.sweep)
        return hp_fail(a->q.err, HP_ERR_ARG,
                       "%s: compare: A and B are both sweep %lld (name another with --sweep ID for A or --sweep2 ID "
                       "for B; each is the newest sweep unless named)",
                       a->q.path, a->q.sweep);
    if ((s = hq_pick_study(&a->q, "single", o->study, &a->pk)) != HP_OK ||
        (s = hq_pick_study(&b->q, "single", o->study2 ? o->study2 : o->study, &b->pk)) != HP_OK)
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
                       a->pk.name, na, a->pk.kv ? hp_unit_name(a->pk.kv, true) : "query heads", b->pk.name, nb,
                       b->pk.kv ? hp_unit_name(b->pk.kv, true) : "query heads");
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
    bool ok = hq_rank_corr(x, y, m, &out->rho, &out->tau);
    free(x), free(y);
    return ok;
}

static enum hp_status q_compare(struct side *a, struct side *b, const struct hp_query_opts *o, struct hp_table **out)
{
    struct hq_query *q = &a->q;
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
    ok = ok && hq_ranks_avg(x, n_both, rx) && hq_ranks_avg(y, n_both, ry);
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

    const char *what = a->pk.kv ? hp_unit_name(a->pk.kv, true) : "query heads";
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
        hq_tb_init(&t, C_N, cols, num);
        for (size_t i = 0; i < shown; i++) {
            int row = hq_tb_row(&t);
            char label[48];
            hp_unit_label(label, sizeof label, a->pk.kv, u[i].layer, u[i].unit);
            hq_tb_str(&t, row, C_LABEL, label);
            hq_tb_int(&t, row, C_LAYER, u[i].layer);
            hq_tb_int(&t, row, C_UNIT, u[i].unit);
            hq_tb_num(&t, row, C_A, F_EFFECT, u[i].a);
            hq_tb_num(&t, row, C_B, F_EFFECT, u[i].b);
            hq_tb_num(&t, row, C_DIFF, F_EFFECT, u[i].diff);
            hq_tb_num(&t, row, C_RA, F_EFFECT, u[i].rank_a);
            hq_tb_num(&t, row, C_RB, F_EFFECT, u[i].rank_b);
        }
        int row = hq_tb_summary_row(&t);
        hq_tb_str(&t, row, C_LABEL, "all");
        hq_tb_num(&t, row, C_A, F_EFFECT, all.mean_a);
        hq_tb_num(&t, row, C_B, F_EFFECT, all.mean_b);
        hq_tb_num(&t, row, C_DIFF, F_EFFECT, all.mean_b - all.mean_a);
        hq_tb_num(&t, row, C_RHO, F_EFFECT, all.rho);
        hq_tb_num(&t, row, C_TAU, F_EFFECT, all.tau);
    } else {
        enum { C_LABEL, C_LAYER, C_UNITS, C_A, C_B, C_DIFF, C_RHO, C_TAU, C_N };
        static const char *const cols[C_N] = {"label", "layer", "units", "mean_a", "mean_b", "diff", "rho", "tau"};
        static const bool num[C_N] = {false, true, true, true, true, true, true, true};
        hq_tb_init(&t, C_N, cols, num);
        for (size_t i = 0; i <= n;) { // u is in (layer, unit) order: each layer a run, then i == n: all
            size_t j = i;
            while (j < n && u[j].layer == u[i].layer)
                j++;
            struct cmp_sum sm = all;
            if (i < n && !cmp_summary(u + i, j - i, &sm)) {
                t.nomem = true;
                break;
            }
            int row = i == n ? hq_tb_summary_row(&t) : sm.n > 0 ? hq_tb_row(&t) : -1;
            if (i < n) {
                char label[32];
                snprintf(label, sizeof label, "layer %d", u[i].layer);
                hq_tb_str(&t, row, C_LABEL, label);
                hq_tb_int(&t, row, C_LAYER, u[i].layer);
            } else {
                hq_tb_str(&t, row, C_LABEL, "all");
            }
            hq_tb_int(&t, row, C_UNITS, (long long)sm.n);
            hq_tb_num(&t, row, C_A, F_EFFECT, sm.mean_a);
            hq_tb_num(&t, row, C_B, F_EFFECT, sm.mean_b);
            hq_tb_num(&t, row, C_DIFF, F_EFFECT, sm.mean_b - sm.mean_a);
            hq_tb_num(&t, row, C_RHO, F_EFFECT, sm.rho);
            hq_tb_num(&t, row, C_TAU, F_EFFECT, sm.tau);
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
    hq_tb_note(&t,
            "A = sweep %lld of %s (%s, %s ablation, study %s), B = sweep %lld of %s (%s, %s ablation, study %s); %s, "
            "each against its own sweep's baseline; diff = B - A%s; over the %zu %s both have: Spearman rho %s, "
            "Kendall tau-b %s (row all%s; ties share their average rank)%s",
            a->q.sweep, a->q.path, a->q.name, a->q.ablation, a->pk.name, b->q.sweep, b->q.path, b->q.name,
            b->q.ablation, b->pk.name, hq_effect_convention(q->m),
            o->by_layer ? "; mean_a, mean_b: the mean effect of the layer's units"
            : o->top > 0 ? "; rank 1 = the largest effect; the units whose effects differ most first"
                         : "; rank 1 = the largest effect",
            all.n, what, rho, tau, o->by_layer ? "; per layer: over the layer's units" : ", its effects the means",
            one);
    return hq_tb_finish(&t, out, q->err);
}

// True when a and b name one existing file (compare's two databases).
static bool same_file(const char *a, const char *b)
{
    struct stat x, y;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

// Compare: B's database opened (or A's shared when it is the same file), both read in one transaction each.
enum hp_status hq_compare(struct hq_query *qa, const struct hp_query_opts *o, struct hp_table **out)
{
    struct side a = {.q = *qa}, b = {0};
    const char *db2 = o->db2 ? o->db2 : qa->path;
    bool same_db = same_file(qa->path, db2);
    b.q = (struct hq_query){.path = db2, .err = qa->err, .db = same_db ? qa->db : NULL};
    a.q.sweep_opt = "--sweep";
    b.q.sweep_opt = "--sweep2";
    enum hp_status s = HP_OK;
    if (!same_db) {
        s = hp_store_open_read(db2, BUSY_TIMEOUT_MS, o->timeout_s, &b.q.db, qa->err);
        if (s == HP_OK) {
            int rc = sqlite3_exec(b.q.db, "BEGIN", NULL, NULL, NULL);
            if (rc != SQLITE_OK)
                s = hq_sql_fail(&b.q, rc);
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
