/*
 * query_sweep.c -- the query family's connection and the sweep a question
 * reads: statements on the read-only connection, the sweep resolved (its
 * shape, metric, baseline and the heads its model has), its studies picked by
 * kind and name, and the error of a sweep that lacks what a question needs
 * (hq_lacking: it names another sweep of the database that has it).
 *
 * Invariants: SQLite's errors are translated by the store (hp_store_read_fail);
 * a number read from the database is checked before it sizes or indexes
 * anything (MAX_LAYERS, MAX_HEADS, MAX_UNITS; hq_col_index); SQL text is
 * built only from this family's literals and the metric table's names.
 *
 * Must not: write to the database, open or close it (query.c and
 * query_compare.c do), print, or exit.
 */
#define _POSIX_C_SOURCE 200809L

#include "headprune.h"
#include "query_priv.h"
#include "util.h"

#include "store.h" // hp_store_read_fail, hp_store_read_step: SQLite translated by the store

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// --- the connection ---------------------------------------------------------

// One line for an SQLite failure on our own statements, naming the database (the store translates it).
enum hp_status hq_sql_fail(struct hq_query *q, int rc)
{
    return hp_store_read_fail(q->db, q->path, rc, q->err);
}

enum hp_status hq_prep(struct hq_query *q, sqlite3_stmt **st, const char *sql)
{
    int rc = sqlite3_prepare_v2(q->db, sql, -1, st, NULL);
    if (rc != SQLITE_OK) {
        *st = NULL;
        return hq_sql_fail(q, rc);
    }
    return HP_OK;
}

/* Prepare sql after substituting the metric's column name for every "%s"
 * (the name comes from the metric table, never from the user). */
enum hp_status hq_prep_m(struct hq_query *q, sqlite3_stmt **st, const char *sql)
{
    char buf[2048];
    size_t o = 0, n = strlen(q->mname);
    for (const char *s = sql; *s; s++) {
        bool subst = s[0] == '%' && s[1] == 's';
        if (o + (subst ? n : 1) >= sizeof buf) {
            assert(!"SQL text longer than hq_prep_m's buffer");
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
    return hq_prep(q, st, buf);
}

// sqlite3_step: 1 = a row, 0 = done, -1 = failed (err set via *st_out).
/* arr (n elements of size bytes used, *cap held) with room for one more, doubling; NULL when out of memory
 * (*st and q's error set; arr is left as it was, for its owner to free). */
void *hq_room_for(struct hq_query *q, void *arr, size_t n, size_t *cap, size_t size, enum hp_status *st)
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

int hq_step(struct hq_query *q, sqlite3_stmt *st, enum hp_status *st_out)
{
    return hp_store_read_step(q->db, q->path, q->err, st, st_out);
}

double hq_col_num(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

const char *hq_col_text(sqlite3_stmt *st, int i)
{
    const unsigned char *s = sqlite3_column_text(st, i);
    return s ? (const char *)s : "";
}

/* A layer or unit index from a row: -1 for NULL, else it must lie in
 * [0, lim); false (with *s set, naming the database and the value) if not. */
bool hq_col_index(struct hq_query *q, sqlite3_stmt *st, int i, int lim, const char *what, int *out, enum hp_status *s)
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

/*
 * q->n_present: the heads the sweep's model has, the one count every curve,
 * query and figure measures "kept" and "pruned" against (a head a pruned
 * checkpoint lacks is neither; docs/database.md). A database from before
 * schema 5 names no missing heads: every head counts.
 */
static enum hp_status count_present(struct hq_query *q)
{
    q->n_present = q->n_layers * q->n_heads;
    bool has = false;
    enum hp_status s = hq_has_table(q, "pruned_heads", &has);
    if (s != HP_OK || !has)
        return s;
    sqlite3_stmt *st;
    if ((s = hq_prep(q, &st, "SELECT count(*) FROM pruned_heads p JOIN sweeps s ON s.model_id = p.model_id "
                          "WHERE s.id = ? AND p.layer >= 0 AND p.layer < ? AND p.head >= 0 AND p.head < ?")) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_int(st, 2, q->n_layers);
    sqlite3_bind_int(st, 3, q->n_heads);
    int r = hq_step(q, st, &s);
    if (r == 1)
        q->n_present -= (int)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

enum hp_status hq_resolve_sweep(struct hq_query *q, long long id, const char *metric)
{
    sqlite3_stmt *st;
    enum hp_status s = HP_OK;
    q->newest = id == 0;
    if (id == 0) {
        if ((s = hq_prep(q, &st, "SELECT max(id) FROM sweeps")) != HP_OK)
            return s;
        int r = hq_step(q, st, &s);
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

    if ((s = hq_prep(q, &st,
                  "SELECT s.metric, m.n_layers, m.n_heads, m.n_kv_heads, s.ablation, s.name FROM sweeps s "
                  "LEFT JOIN models m ON m.id = s.model_id "
                  "WHERE s.id = ?")) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, id);
    int r = hq_step(q, st, &s);
    char sweep_metric[32] = "";
    long long n_layers = 0, n_heads = 0, n_kv = 0;
    bool null_shape = false;
    if (r == 1) {
        snprintf(sweep_metric, sizeof sweep_metric, "%s", hq_col_text(st, 0));
        null_shape = sqlite3_column_type(st, 1) == SQLITE_NULL || sqlite3_column_type(st, 2) == SQLITE_NULL;
        n_layers = sqlite3_column_int64(st, 1);
        n_heads = sqlite3_column_int64(st, 2);
        n_kv = sqlite3_column_int64(st, 3);
        snprintf(q->ablation, sizeof q->ablation, "%s", hq_col_text(st, 4));
        snprintf(q->name, sizeof q->name, "%s", hq_col_text(st, 5));
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

    char names[128];
    if (metric ? !hp_metric_parse(metric, &q->m) : !hp_metric_parse(sweep_metric, &q->m)) {
        hp_metric_names(names, sizeof names, false, ", ");
        return metric ? hp_fail(q->err, HP_ERR_ARG, "%s: unknown metric '%s' (one of %s)", q->path, metric, names)
                      : hp_fail(q->err, HP_ERR_FORMAT, "%s: sweep %lld has an unknown metric '%s' (name one: %s)",
                                q->path, id, sweep_metric, names);
    }
    q->mname = hp_metric_name(q->m);
    /* a database written before the metric existed has no column of it (a writer adds it, as NULLs) */
    if ((s = hq_prep(q, &st, "SELECT count(*) FROM pragma_table_info('results') WHERE name = ?")) != HP_OK)
        return s;
    sqlite3_bind_text(st, 1, q->mname, -1, SQLITE_STATIC);
    r = hq_step(q, st, &s);
    const bool has_column = r == 1 && sqlite3_column_int64(st, 0) > 0;
    sqlite3_finalize(st);
    if (r < 0)
        return s;
    if (!has_column)
        return hp_fail(q->err, HP_ERR_ARG, "%s: no %s values: the database was written before headprune measured %s "
                       "(rerun the sweep to measure it)", q->path, q->mname, q->mname);
    q->ranked = q->m;
    hp_metric_parse(sweep_metric, &q->ranked);

    if ((s = hq_prep_m(q, &st,
                    "SELECT j.variant_id, r.%s FROM sweep_jobs j JOIN results r ON r.variant_id = j.variant_id "
                    "WHERE j.sweep_id = ? AND j.kind = 'baseline' ORDER BY j.ord LIMIT 1")) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, id);
    r = hq_step(q, st, &s);
    if (r == 1) {
        q->base_variant = sqlite3_column_int64(st, 0);
        q->base = hq_col_num(st, 1);
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
    if ((s = hq_prep(q, &st, sql)) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->base_variant);
    r = hq_step(q, st, &s);
    q->ranked_missing = r == 1 && sqlite3_column_int(st, 0) != 0;
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

// Name of the sweep's first study (plan order) of this kind (heads_only: over query heads, not KV groups)
// into name; false if none.
enum hp_status hq_first_study(struct hq_query *q, const char *kind, bool heads_only, char *name, size_t size,
                              bool *found)
{
    sqlite3_stmt *st;
    enum hp_status s = hq_prep(q, &st, "SELECT study FROM sweep_jobs WHERE sweep_id = ? AND kind = ? "
                                    "AND (? = 0 OR kv = 0) ORDER BY ord LIMIT 1");
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, kind, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, heads_only);
    int r = hq_step(q, st, &s);
    *found = r == 1;
    if (r == 1)
        snprintf(name, size, "%s", hq_col_text(st, 0));
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
static enum hp_status other_sweep(struct hq_query *q, const char *kinds, bool all, const char *study, long long *id)
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
    enum hp_status s = hq_prep(q, &st, sql);
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    if (study)
        sqlite3_bind_text(st, 2, study, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, all ? n_kinds : 1);
    int r = hq_step(q, st, &s);
    *id = r == 1 ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

enum hp_status hq_lacking(struct hq_query *q, const char *kinds, bool all, const char *study, const char *what,
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

/*
 * The sweep's study of kind (single, explicit) named want; with want NULL its
 * first over query heads (plan order), else its first, so that heads and KV
 * groups are never ranked together. None, or none of that name, is an error
 * naming the studies the sweep has, or another sweep that has one.
 */
enum hp_status hq_pick_study(struct hq_query *q, const char *kind, const char *want, struct pick *p)
{
    memset(p, 0, sizeof *p);
    sqlite3_stmt *st;
    enum hp_status s = hq_prep(q, &st,
                            "SELECT study, max(kv) FROM sweep_jobs WHERE sweep_id = ? AND kind = ? "
                            "GROUP BY study ORDER BY min(ord)");
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, kind, -1, SQLITE_STATIC);
    bool found = false, found_heads = false;
    size_t o = 0;
    int r;
    while ((r = hq_step(q, st, &s)) == 1) {
        const char *name = hq_col_text(st, 0);
        const int kv = sqlite3_column_int(st, 1); /* enum hp_unit_kind: 0 heads, 1 KV groups, 2 MLPs */
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
        return hq_lacking(q, kinds, false, NULL, what, fix);
    }
    if (p->n_all == 0) {
        snprintf(what, sizeof what, "%s study '%s'", kind, want);
        return hq_lacking(q, kinds, false, want, what, fix);
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


// Whether the database has table name (unit_scores came with schema 3).
enum hp_status hq_has_table(struct hq_query *q, const char *name, bool *yes)
{
    sqlite3_stmt *st;
    enum hp_status s = hq_prep(q, &st, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?");
    if (s != HP_OK)
        return s;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    int r = hq_step(q, st, &s);
    *yes = r == 1;
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

/* For a note: "; the pruned checkpoint lacks N of its L x H" when it is pruned, else "" (into buf). */
const char *hq_absent_note(const struct hq_query *q, char *buf, size_t size)
{
    const int all = q->n_layers * q->n_heads;
    buf[0] = '\0';
    if (q->n_present != all)
        snprintf(buf, size, "; the pruned checkpoint lacks %d of its %d x %d", all - q->n_present, q->n_layers,
                 q->n_heads);
    return buf;
}
