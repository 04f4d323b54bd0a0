/*
 * query_roles.c -- `roles`: a roles study's scores per head (docs/roles.md),
 * each head's effect in the sweep's first single study over query heads, and
 * each score's Spearman rank correlation with the effect.
 *
 * Invariants: roles are per query head; offsets are positions, not amounts,
 * and have no correlation.
 *
 * Must not: run the model (the sweep stored the roles), print, or exit.
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

// --- head roles ---------------------------------------------------------------------

/* The scores of head_roles, in its column order: names, and whether each is an offset (no correlation). */
#define N_ROLE_COLS 11
static const char *const role_cols[N_ROLE_COLS] = {"prev_token", "duplicate_token", "induction", "induction_offset",
                                                  "induction_mass", "first_token", "dominant_offset", "dominant_mass",
                                                  "entropy", "rare_token", "sep_token"};
static const bool role_is_offset[N_ROLE_COLS] = {false, false, false, true, false, false, true, false, false, false,
                                                 false};

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
static enum hp_status pick_roles(struct hq_query *q, const char *want, char *name, size_t size, long long *run, int *seqs,
                                 int *len)
{
    bool yes = false;
    enum hp_status s = hq_has_table(q, "sweep_roles", &yes);
    if (s != HP_OK)
        return s;
    if (!yes)
        return hp_fail(q->err, HP_ERR_ARG, "%s: sweep %lld%s has no roles study (the database predates head roles: "
                       "add a 'roles' study to the plan and run it)", q->path, q->sweep, q->newest ? " (the newest)" : "");
    sqlite3_stmt *st;
    if ((s = hq_prep(q, &st, "SELECT x.study, r.id, r.probe_seqs, r.probe_len FROM sweep_roles x "
                          "JOIN role_runs r ON r.id = x.run_id WHERE x.sweep_id = ? ORDER BY x.study")) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    char all[512] = "";
    size_t o = 0;
    int r, n_all = 0;
    bool found = false;
    while ((r = hq_step(q, st, &s)) == 1) {
        const char *nm = hq_col_text(st, 0);
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
    if ((s = hq_prep(q, &st, "SELECT max(sweep_id) FROM sweep_roles WHERE sweep_id <> ?")) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    r = hq_step(q, st, &s);
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
static enum hp_status roles_load(struct hq_query *q, long long run, struct role_row **rows, size_t *n)
{
    sqlite3_stmt *st;
    /* a database from before schema 8 (read, never upgraded, here) has no sep_token: NULL throughout */
    enum hp_status s = hq_prep(q, &st, "SELECT count(*) FROM pragma_table_info('head_roles') WHERE name = 'sep_token'");
    if (s != HP_OK)
        return s;
    int r = hq_step(q, st, &s);
    const bool has_sep = r == 1 && sqlite3_column_int(st, 0) > 0;
    sqlite3_finalize(st);
    if (r < 0)
        return s;
    char sql[400];
    /* an offset below HP_ROLES_OFFSET_MIN_MASS is noise: empty, also where an older version stored it */
    snprintf(sql, sizeof sql, "SELECT layer, head, prev_token, duplicate_token, induction, "
             "CASE WHEN induction_mass >= ?2 THEN induction_offset END, "
             "induction_mass, first_token, dominant_offset, dominant_mass, entropy, rare_token, %s "
             "FROM head_roles WHERE run_id = ?1 ORDER BY layer, head", has_sep ? "sep_token" : "NULL");
    if ((s = hq_prep(q, &st, sql)) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_double(st, 2, HP_ROLES_OFFSET_MIN_MASS);
    size_t cap = 0;
    while ((r = hq_step(q, st, &s)) == 1) {
        struct role_row *g = hq_room_for(q, *rows, (size_t)*n, &cap, sizeof *g, &s);
        if (!g) {
            r = -1;
            break;
        }
        *rows = g;
        struct role_row *h = &(*rows)[(*n)++];
        if (!hq_col_index(q, st, 0, q->n_layers, "layer", &h->layer, &s) ||
            !hq_col_index(q, st, 1, q->n_heads, "unit", &h->head, &s) || h->layer < 0 || h->head < 0) {
            if (s == HP_OK)
                s = hp_fail(q->err, HP_ERR_FORMAT, "%s: head_roles of sweep %lld lacks a layer or head (a damaged "
                            "database?)", q->path, q->sweep);
            r = -1;
            break;
        }
        for (int c = 0; c < N_ROLE_COLS; c++) {
            h->v[c] = hq_col_num(st, 2 + c);
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
 * heads (its first), each head's effect there; then a summary row, label "rho":
 * under each score, Spearman's rho (hq_rank_corr, as compare) between that score
 * and the effect over the heads with both (offsets have none: they are
 * positions, not amounts).
 */
enum hp_status hq_roles(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out)
{
    const char *study = opts->study;
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
    bool has_single = false;
    if (s == HP_OK)
        s = hq_first_study(q, "single", true, single, sizeof single, &has_single);
    struct head_row *eff = NULL;
    size_t n_eff = 0;
    if (s == HP_OK && has_single)
        s = hq_rows_load(q, "single", single, false, &eff, &n_eff);
    for (size_t i = 0; s == HP_OK && i < n; i++)
        for (size_t j = 0; j < n_eff; j++)
            if (eff[j].layer == rows[i].layer && eff[j].unit == rows[i].head) {
                rows[i].effect = eff[j].effect;
                break;
            }
    hq_rows_free(eff, n_eff);
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
        if (!role_is_offset[c] && !hq_rank_corr(x, y, m, &rho[c], &tau))
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
    hq_tb_init(&b, C_N, cols, num);
    for (size_t i = 0; i < n; i++) {
        const struct role_row *h = &rows[i];
        int row = hq_tb_row(&b);
        char label[48];
        hp_unit_label(label, sizeof label, false, h->layer, h->head);
        hq_tb_int(&b, row, C_LAYER, h->layer);
        hq_tb_int(&b, row, C_HEAD, h->head);
        hq_tb_str(&b, row, C_LABEL, label);
        for (int c = 0; c < N_ROLE_COLS; c++)
            if (role_is_offset[c]) {
                if (!isnan(h->v[c]))
                    hq_tb_int(&b, row, C_ROLE0 + c, h->off[c]);
            } else {
                hq_tb_num(&b, row, C_ROLE0 + c, F_METRIC, h->v[c]);
            }
        hq_tb_num(&b, row, C_EFFECT, F_EFFECT, h->effect);
    }
    if (single[0]) {
        int row = hq_tb_summary_row(&b);
        hq_tb_str(&b, row, C_LABEL, "rho");
        for (int c = 0; c < N_ROLE_COLS; c++)
            hq_tb_num(&b, row, C_ROLE0 + c, F_EFFECT, rho[c]);
    }
    free(rows);
    char eff_note[400];
    if (single[0])
        snprintf(eff_note, sizeof eff_note,
                 "effect: masking the head alone in single study %s, %s; summary row rho: Spearman's rank "
                 "correlation of each score with the effect over the %zu heads with both (ties share their average "
                 "rank; none for offsets)", single, hq_effect_convention(q->m), n_both);
    else
        snprintf(eff_note, sizeof eff_note, "no effects: the sweep has no single study over query heads (add one "
                 "to set each head's roles beside its effect)");
    hq_tb_note(&b, "sweep %lld, roles study %s (probe %d x 2 x %d random tokens); scores as docs/roles.md defines "
            "them, empty where no query qualifies (induction_offset: where induction_mass < %g, noise); %s", q->sweep,
            name, seqs, len, HP_ROLES_OFFSET_MIN_MASS, eff_note);
    return hq_tb_finish(&b, out, q->err);
}
