/*
 * query.c -- read a results database and answer questions about its sweeps
 * as tables of strings (struct hp_table) for the CLI to print: the entry of
 * the query family (hp_query and the readers of query.h). Each question
 * lives in its own file, sharing query_priv.h: the table builder and
 * statistics (query_table.c), the connection and sweep resolution
 * (query_sweep.c), and query_curve.c, query_heads.c, query_pairs.c,
 * query_compare.c, query_scores.c, query_roles.c, query_gates.c, query_sql.c.
 *
 * Effects: every query but `sweeps` and `sql` measures a variant against its
 * sweep's baseline on one metric M (the sweep's unless the caller names
 * one), signed so that larger = worse:
 *   loss  variant - baseline         kl   the variant's KL (the baseline's is 0)
 *   acc   baseline - variant         cos  baseline - variant
 * Each table's note states the convention in use.
 *
 * Confidence intervals are 95% Student t intervals with n - 1 degrees of
 * freedom (mean +- t * sd / sqrt(n)); with n = 1 there is none (empty cells).
 * `heads` and `sets` pair the variant with the baseline sequence by sequence.
 *
 * Studies: `heads` and `compare` read one single study at a time (named, else
 * the sweep's first over query heads), never heads and KV groups together.
 * `compare` reads two sweeps, in one database or two (each side its own
 * connection and snapshot, shared when both name one file), each against its
 * own baseline, and ranks their units with Spearman's rho and Kendall's tau-b.
 * A sweep that lacks what a query needs is an error that names another sweep
 * of the database that has it (hq_lacking).
 *
 * Readers (query.h): the report asks several of these questions of one
 * sweep through one connection and one read transaction, and two more that
 * only it needs: what was run (hp_query_run_info) and which studies a sweep
 * has (hp_query_studies). hp_query is a reader of one question.
 *
 * Invariants: the database is opened read-only and version-checked by the
 * store (hp_store_open_read: SQLITE_OPEN_READONLY and PRAGMA query_only), with
 * a busy timeout because a sweep may be writing to it in WAL mode; SQLite's
 * errors are translated by the store (hp_store_read_fail); all reads of one
 * query run in one read transaction, so they see one snapshot. Numbers are
 * formatted by the table builder (query_table.c says how).
 *
 * Must not: write to the database, know about models or tensors beyond the
 * rows of the store, print, or exit.
 */
#define _POSIX_C_SOURCE 200809L

#include "headprune.h"
#include "job.h" // the job kinds the sweep writes
#include "query.h"
#include "query_priv.h"
#include "store.h" // hp_store_open_read: opened and version-checked by the store
#include "util.h"

#include <sqlite3.h>

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// --- the kinds ---------------------------------------------------------------

enum {
    STUDY = HP_QUERY_TAKES_STUDY,
    TOP = HP_QUERY_TAKES_TOP,
    MATRIX = HP_QUERY_TAKES_MATRIX,
    GATES = HP_QUERY_TAKES_GATES,
    B = HP_QUERY_TAKES_B,
    SQL = HP_QUERY_TAKES_SQL,
};

const struct hp_query_kind_row hp_query_kinds[] = {
    {HP_QUERY_SWEEPS, "sweeps", TOP, false, "the sweeps in the database", hq_sweeps},
    {HP_QUERY_CURVE, "curve", STUDY | TOP, true,
     "pruning curve: metric against heads pruned (number and %),\n"
     "iterative, random and gates studies (--study NAME: only that\n"
     "one), 95% CIs over random samples; each iterative step's units\n"
     "in \"pruned\" (--full-mask: also everything pruned so far, in\n"
     "\"mask\"); with a gates study also heads kept, each gates row's\n"
     "lambda and the model at its test-time gates (\"gated\")",
     hq_curve},
    {HP_QUERY_HEADS, "heads", STUDY | TOP | MATRIX | GATES, true,
     "each head's effect when ablated alone, with a paired 95% CI\n"
     "across sequences; sorted, --top K. One single study: --study\n"
     "NAME, else the sweep's first over query heads (a KV-group\n"
     "study such as single-kv only when named or the only one).\n"
     "--format matrix: layers as rows, heads as columns.\n"
     "--gates: a gates study's (--study NAME) test-time gate of each\n"
     "head at each lambda, and the lambda from which it stays closed\n"
     "(closes_at; the matrix shows that), the last to close first",
     hq_heads},
    {HP_QUERY_SETS, "sets", STUDY | TOP, true,
     "each named set of the explicit studies (--study NAME: one\n"
     "of them) ablated together: its effect with a paired 95% CI;\n"
     "sorted, --top K",
     hq_sets},
    {HP_QUERY_COMPARE, "compare", STUDY | TOP | B, false,
     "two sweeps side by side, A (--db, --sweep) and B (--db2,\n"
     "default --db; --sweep2, default the newest): each unit's\n"
     "effect in both single studies (--study, --study2), B - A,\n"
     "ranks, and over the units both have Spearman's rho and\n"
     "Kendall's tau-b (the summary row \"all\"). E.g. zero against\n"
     "mean ablation, or a fine-tuned model against its base. The\n"
     "models must have one shape; the sweeps one metric (else name\n"
     "it with --metric). --by layer: per layer, means and rank\n"
     "correlations within it (then \"all\" over every unit);\n"
     "--top K: the K units that differ most",
     hq_compare},
    {HP_QUERY_REDUNDANCY, "redundancy", TOP, true,
     "per layer: heads costing less than --eps (default 0.01) alone,\n"
     "mean and max effect, keeping only the best head, removing the\n"
     "whole layer",
     hq_redundancy},
    {HP_QUERY_PAIRS, "pairs", TOP, true,
     "interaction I = D(a and b) - D(a) - D(b) of head pairs, D the\n"
     "effects, with a paired 95% CI of I across sequences. I > 0:\n"
     "removing both hurts more than the two alone (the heads back\n"
     "each other up: redundant); I < 0: less than the two alone\n"
     "(overlapping damage). --top K of each end.",
     hq_pairs},
    {HP_QUERY_IMPORTANCE, "importance", STUDY | TOP, true,
     "an importance study (--study NAME, else the first by name):\n"
     "each unit's E|dL/dgate| (Michel et al.), under the study's\n"
     "normalize, and raw; most important first, --top K",
     hq_importance},
    {HP_QUERY_ATTRIBUTION, "attribution", STUDY | TOP, true,
     "an attribution study (--study NAME) against the sweep's\n"
     "first single study over the same units: each unit's\n"
     "first-order estimate of its loss effect beside the exact\n"
     "one, their ranks, the most wrongly ranked first (--top K),\n"
     "and in the summary row (\"all\") Spearman's rho, Kendall's\n"
     "tau-b and the top-k overlap (k = a tenth of the units)",
     hq_attribution},
    {HP_QUERY_ROLES, "roles", STUDY, true,
     "a roles study (--study NAME, else the first by name): each\n"
     "head's scores (docs/roles.md) in layer, head order, its effect\n"
     "in the sweep's first single study over query heads when it\n"
     "has one, and a summary row (label \"rho\") with each score's\n"
     "Spearman rank correlation with the effect",
     hq_roles},
    {HP_QUERY_GATES, "gates", STUDY | TOP, true,
     "each lambda of the gates studies (--study NAME: one): heads\n"
     "kept, the pruned set's metric, the model at its test-time\n"
     "gates, and the sweep's iterative and random curves read at the\n"
     "same heads kept; \"lower\" names the curve that is lowest there",
     hq_gates},
    {HP_QUERY_PATCHING, "patching", STUDY | TOP, true,
     "a patching study (--study NAME, else the first): each unit's\n"
     "effect patched alone at each position, a row a unit and a\n"
     "column a position, labelled with the first row's token there\n"
     "(/the corrupt prompt's where it differs); with positions: all\n"
     "one column. --top K: the K largest (unit, position) cells",
     hq_patching},
    {HP_QUERY_SCREEN, "screen", STUDY, true,
     "a screen study (--study NAME, else the first): its verified\n"
     "top k, each unit's exact effect with a paired 95% CI beside\n"
     "its estimate and rank, how many exact evaluations it took and\n"
     "the bound its last random audit gives on the units it missed",
     hq_screen},
    {HP_QUERY_SELF_REPAIR, "self-repair", STUDY | TOP, true,
     "a direct study (--study NAME, else the first): each unit's\n"
     "total effect (ablated), direct effect (only its edges into\n"
     "the logits patched) and compensation = direct - total, what\n"
     "later layers make up for, with paired 95% CIs; largest\n"
     "compensation first, --top K",
     hq_self_repair},
    {HP_QUERY_EDGES, "edges", STUDY | TOP, true,
     "an edges study (--study NAME, else the first; or a circuit\n"
     "study's ranking): each edge patched alone, its sender and\n"
     "receiver, its effect with a paired 95% CI across sequences;\n"
     "the largest |effect| first, --top K",
     hq_edges},
    {HP_QUERY_CIRCUIT, "circuit", STUDY, true,
     "a circuit study (--study NAME, else the first): each size's\n"
     "edges kept, the metric with the graph's other edges patched,\n"
     "its faithfulness; the summary row \"area\": CPR and CMD",
     hq_circuit},
    {HP_QUERY_SQL, "sql", TOP | SQL, false,
     "read-only SQL, e.g. \"SELECT * FROM effects LIMIT 5\"\n"
     "(tables, columns and views: docs/database.md)",
     hq_sql},
};
static_assert(sizeof hp_query_kinds / sizeof hp_query_kinds[0] == HP_QUERY_KIND_COUNT,
              "hp_query_kinds: one row per enum hp_query_kind");

const struct hp_query_kind_row *hp_query_kind_named(const char *name)
{
    for (int i = 0; i < HP_QUERY_KIND_COUNT; i++)
        if (strcmp(name, hp_query_kinds[i].name) == 0)
            return &hp_query_kinds[i];
    return NULL;
}

const struct hp_query_kind_row *hp_query_kind_row(enum hp_query_kind k)
{
    for (int i = 0; i < HP_QUERY_KIND_COUNT; i++)
        if (hp_query_kinds[i].kind == k)
            return &hp_query_kinds[i];
    return NULL;
}

/*
 * The options' mistakes, in the order they are reported: one given (every bit of when) to a kind
 * that does not take need, or two never right together (need 0: said as they are). The kinds an
 * option is for come from the table (hp_query_kinds' takes), so a new kind changes no message.
 * BY_LAYER is --by layer alone (also under B: the clash with --top is its own).
 */
enum { BY_LAYER = 1u << 8 };
static const struct {
    unsigned when, need;
    const char *cli, *api; /* the option as each names it (need 0: the whole message) */
    bool plural;           /* "are for" */
    bool name_kind;        /* "does not apply to KIND" (the kind given) rather than "is for KINDS" */
} opt_rules[] = {
    {B, B, "--db2, --sweep2, --study2 and --by", "--db2, --sweep2, --study2 and --by", true, false},
    {MATRIX, MATRIX, "--format matrix", "the matrix format", false, false},
    {GATES, GATES, "--gates", "--gates", false, false},
    {MATRIX | TOP, 0, "--top does not apply to --format matrix (it shows every unit)",
     "query: --top does not apply to the matrix format (it shows every unit)", false, false},
    {BY_LAYER | TOP, 0, "--top does not apply to compare --by layer (it shows every layer)",
     "query: --top does not apply to compare --by layer (every layer is shown)", false, false},
    {STUDY, STUDY, "--study", "--study", false, false},
    {TOP, TOP, "--top", "--top", false, true},
};

/* "heads, sets and curve": the kinds taking need, in the table's order, into buf. */
static void kinds_taking(unsigned need, char *buf, size_t cap)
{
    int i_last = -1;
    for (int i = 0; i < HP_QUERY_KIND_COUNT; i++)
        if (hp_query_kinds[i].takes & need)
            i_last = i;
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0, k = 0; i < HP_QUERY_KIND_COUNT && len < cap; i++)
        if (hp_query_kinds[i].takes & need) {
            const char *sep = k == 0 ? "" : i == i_last ? " and " : ", ";
            int w = snprintf(buf + len, cap - len, "%s%s", sep, hp_query_kinds[i].name);
            len += w > 0 ? (size_t)w : 0;
            k++;
        }
}

enum hp_status hp_query_opts_check(const struct hp_query_opts *o, bool cli, struct hp_error *err)
{
    if (!cli && o->top < 0)
        return hp_fail(err, HP_ERR_ARG, "query: top must be >= 0 (got %d; 0 = every row)", o->top);
    if (!cli && !isfinite(o->eps))
        return hp_fail(err, HP_ERR_ARG, "query: eps must be a finite number");
    if (!cli && (o->sweep_id < 0 || o->sweep_id2 < 0))
        return hp_fail(err, HP_ERR_ARG, "query: a sweep id must be positive (0 = the newest)");
    const struct hp_query_kind_row *k = hp_query_kind_row(o->kind);
    if (!k)
        return hp_fail(err, HP_ERR_ARG, "query: unknown query kind %d", (int)o->kind);
    const unsigned given = (o->study ? STUDY : 0) | (o->top ? TOP : 0) | (o->matrix ? MATRIX : 0) |
                           (o->gates ? GATES : 0) | (o->db2 || o->sweep_id2 || o->study2 || o->by_layer ? B : 0) |
                           (o->by_layer ? BY_LAYER : 0);
    for (size_t i = 0; i < sizeof opt_rules / sizeof *opt_rules; i++) {
        if ((given & opt_rules[i].when) != opt_rules[i].when || (opt_rules[i].need && (k->takes & opt_rules[i].need)))
            continue;
        const char *opt = cli ? opt_rules[i].cli : opt_rules[i].api, *pre = cli ? "" : "query: ";
        if (!opt_rules[i].need)
            return hp_fail(err, HP_ERR_ARG, "%s", opt);
        if (opt_rules[i].name_kind)
            return hp_fail(err, HP_ERR_ARG, "%s%s does not apply to %s (it shows every row)", pre, opt, k->name);
        char kinds[256];
        kinds_taking(opt_rules[i].need, kinds, sizeof kinds);
        const bool pl = opt_rules[i].plural;
        return cli ? hp_fail(err, HP_ERR_ARG, "%s %s for %s", opt, pl ? "are" : "is", kinds)
                   : hp_fail(err, HP_ERR_ARG, "query: %s %s for %s only", opt, pl ? "are" : "is", kinds);
    }
    return HP_OK;
}

// --- entry ------------------------------------------------------------------

// The answer to o on q's open connection, inside the caller's read transaction (but sql's).
static enum hp_status run_kind(struct hq_query *q, const struct hp_query_opts *o, struct hp_table **out)
{
    const struct hp_query_kind_row *k = hp_query_kind_row(o->kind);
    if (!k)
        return hp_fail(q->err, HP_ERR_ARG, "query: unknown query kind %d", (int)o->kind);
    enum hp_status s;
    if (k->sweep && (s = hq_resolve_sweep(q, o->sweep_id, o->metric)) != HP_OK)
        return s;
    return k->run(q, o, out);
}

enum hp_status hp_query(const char *db_path, const struct hp_query_opts *o, struct hp_table **out,
                        struct hp_error *err)
{
    assert(db_path && o && out);
    *out = NULL;
    enum hp_status s = hp_query_opts_check(o, false, err);
    if (s != HP_OK)
        return s;
    struct hq_query q = {.path = db_path, .err = err, .full_mask = o->full_mask, .cv_kept = -1, .sweep_opt = "--sweep"};
    s = hp_store_open_read(db_path, BUSY_TIMEOUT_MS, o->timeout_s, &q.db, err);
    /* the caller's own statement runs as SQLite runs one, outside our transaction */
    if (s == HP_OK && (hp_query_kind_row(o->kind)->takes & HP_QUERY_TAKES_SQL)) {
        s = run_kind(&q, o, out);
    } else if (s == HP_OK) {
        // one read transaction: every statement sees the same snapshot while a sweep writes
        int rc = sqlite3_exec(q.db, "BEGIN", NULL, NULL, NULL);
        if (rc != SQLITE_OK)
            s = hq_sql_fail(&q, rc);
        if (s == HP_OK)
            s = run_kind(&q, o, out);
        sqlite3_exec(q.db, "COMMIT", NULL, NULL, NULL);
    }
    sqlite3_close(q.db);
    return s;
}

// --- readers: several queries over one snapshot --------------------------------

struct hp_query_reader {
    sqlite3 *db;
    char *path;
};

void hp_query_reader_close(struct hp_query_reader *r)
{
    if (!r)
        return;
    if (r->db) {
        sqlite3_exec(r->db, "COMMIT", NULL, NULL, NULL);
        sqlite3_close(r->db);
    }
    free(r->path);
    free(r);
}

enum hp_status hp_query_reader_open(const char *db_path, double seconds, struct hp_query_reader **out,
                                    struct hp_error *err)
{
    assert(db_path && out);
    *out = NULL;
    struct hp_query_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = hq_dup_str(db_path))) {
        free(r);
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", db_path);
    }
    enum hp_status s = hp_store_open_read(db_path, BUSY_TIMEOUT_MS, seconds, &r->db, err);
    if (s == HP_OK) {
        int rc = sqlite3_exec(r->db, "BEGIN", NULL, NULL, NULL);
        if (rc != SQLITE_OK)
            s = hp_store_read_fail(r->db, db_path, rc, err);
    }
    if (s != HP_OK) {
        hp_query_reader_close(r);
        return s;
    }
    *out = r;
    return HP_OK;
}

// A query context on the reader's connection.
static struct hq_query reader_q(struct hp_query_reader *r, struct hp_error *err)
{
    return (struct hq_query){.db = r->db, .path = r->path, .err = err, .cv_kept = -1, .sweep_opt = "--sweep"};
}

enum hp_status hp_query_read(struct hp_query_reader *r, const struct hp_query_opts *o, struct hp_table **out,
                             struct hp_error *err)
{
    assert(r && o && out);
    *out = NULL;
    enum hp_status s = hp_query_opts_check(o, false, err);
    if (s != HP_OK)
        return s;
    struct hq_query q = reader_q(r, err);
    q.full_mask = o->full_mask;
    return run_kind(&q, o, out);
}

enum hp_status hp_query_has_table(struct hp_query_reader *r, const char *name, bool *yes, struct hp_error *err)
{
    struct hq_query q = reader_q(r, err);
    return hq_has_table(&q, name, yes);
}

// "a, b, c": the distinct values of one results column over the sweep's variants, ascending.
static enum hp_status distinct_results(struct hq_query *q, const char *column, struct tb *b, int row)
{
    char sql[400];
    /* column: a name from run_info's list, never the user's text */
    snprintf(sql, sizeof sql,
             "SELECT DISTINCT r.%s FROM results r WHERE r.variant_id IN "
             "(SELECT variant_id FROM sweep_jobs WHERE sweep_id = ?) ORDER BY 1",
             column);
    sqlite3_stmt *st;
    enum hp_status s = hq_prep(q, &st, sql);
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    char buf[1024] = "";
    size_t o = 0;
    int r;
    while ((r = hq_step(q, st, &s)) == 1) {
        const char *v = hq_col_text(st, 0);
        if (o + strlen(v) + 8 < sizeof buf)
            o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%s", o ? ", " : "", v);
        else if (o + 6 < sizeof buf && !strstr(buf, ", ..."))
            o += (size_t)snprintf(buf + o, sizeof buf - o, ", ...");
    }
    sqlite3_finalize(st);
    hq_tb_str(b, row, 1, buf);
    return r < 0 ? s : HP_OK;
}

enum hp_status hp_query_run_info(struct hp_query_reader *rd, int64_t sweep_id, struct hp_table **out,
                                 struct hp_error *err)
{
    static const char *const cols[] = {"field", "value"};
    static const bool num[] = {false, false};
    *out = NULL;
    struct hq_query q = reader_q(rd, err);
    /* as every sweep query: the sweep exists, has a finished baseline and a model of a sane shape */
    enum hp_status s = hq_resolve_sweep(&q, sweep_id, NULL);
    if (s != HP_OK)
        return s;
    sqlite3_stmt *st;
    if ((s = hq_prep(&q, &st,
                  "SELECT s.id, s.name, s.ablation, s.metric, s.created, s.updated, "
                  "  p.name, p.path, p.digest, p.text, "
                  "  m.path, m.model_type, m.n_layers, m.n_heads, m.n_kv_heads, m.d_head, m.n_params, m.digest, "
                  "  d.path, d.n_seqs, d.seq_len, d.digest "
                  "FROM sweeps s LEFT JOIN plans p ON p.id = s.plan_id LEFT JOIN models m ON m.id = s.model_id "
                  "LEFT JOIN datasets d ON d.id = s.dataset_id WHERE s.id = ?")) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q.sweep);
    static const char *const fields[] = {
        "sweep_id",   "sweep_name", "ablation",   "metric",     "sweep_created", "sweep_updated",
        "plan_name",  "plan_path",  "plan_digest", "plan_text", "model_path",    "model_type",
        "n_layers",   "n_heads",    "n_kv_heads", "d_head",     "n_params",      "model_digest",
        "data_path",  "n_seqs",     "seq_len",    "data_digest"};
    struct tb b;
    hq_tb_init(&b, 2, cols, num);
    int r = hq_step(&q, st, &s);
    for (int c = 0; r == 1 && c < (int)(sizeof fields / sizeof *fields); c++) {
        int row = hq_tb_row(&b);
        hq_tb_str(&b, row, 0, fields[c]);
        hq_tb_sql_at(&b, row, 1, st, c);
    }
    sqlite3_finalize(st);
    if (r == 1) { // the value every effect of the sweep is measured against, as the curve shows it
        int row = hq_tb_row(&b);
        hq_tb_str(&b, row, 0, "baseline");
        hq_tb_num(&b, row, 1, F_METRIC, q.base);
        row = hq_tb_row(&b); // the heads the model has, which curves count kept and pruned heads of
        hq_tb_str(&b, row, 0, "n_present");
        hq_tb_int(&b, row, 1, q.n_present);
    }
    if (r == 1 && (s = hq_prep(&q, &st,
                            "SELECT count(*), min(r.threads), max(r.threads), min(r.created), max(r.created), "
                            "  sum(r.wall_s) FROM results r WHERE r.variant_id IN "
                            "(SELECT variant_id FROM sweep_jobs WHERE sweep_id = ?)")) != HP_OK)
        r = -1;
    if (r == 1) {
        sqlite3_bind_int64(st, 1, q.sweep);
        r = hq_step(&q, st, &s);
        static const char *const agg[] = {"results", "threads_min", "threads_max", "first_result", "last_result",
                                          "wall_s"};
        for (int c = 0; r == 1 && c < 6; c++) {
            int row = hq_tb_row(&b);
            hq_tb_str(&b, row, 0, agg[c]);
            hq_tb_sql_at(&b, row, 1, st, c);
            if (c == 0) { // the distinct lists follow the count
                static const char *const lists[][2] = {{"engine_versions", "engine_version"},
                                                       {"numeric_versions", "numeric_version"},
                                                       {"kernels", "kernel"},
                                                       {"hosts", "host"}};
                for (int k = 0; k < 4 && s == HP_OK; k++) {
                    int lr = hq_tb_row(&b);
                    hq_tb_str(&b, lr, 0, lists[k][0]);
                    s = distinct_results(&q, lists[k][1], &b, lr);
                }
                if (s != HP_OK)
                    r = -1;
            }
        }
        sqlite3_finalize(st);
    }
    if (r != 1) {
        hp_table_free(b.t);
        return r == 0 ? hp_fail(err, HP_ERR_FORMAT, "%s: sweep %lld vanished while being read", q.path, q.sweep) : s;
    }
    hq_tb_note(&b, "sweep %lld: what was run", q.sweep);
    return hq_tb_finish(&b, out, err);
}

enum hp_status hp_query_studies(struct hp_query_reader *rd, int64_t sweep_id, struct hp_table **out,
                                struct hp_error *err)
{
    enum { C_STUDY, C_KIND, C_KV, C_JOBS, C_RANK, C_N };
    static const char *const cols[C_N] = {"study", "kind", "kv", "jobs", "rank"};
    static const bool num[C_N] = {false, false, true, true, false};
    *out = NULL;
    struct hq_query q = reader_q(rd, err);
    bool scores = false;
    enum hp_status s = hq_resolve_sweep(&q, sweep_id, NULL);
    if (s == HP_OK)
        s = hq_has_table(&q, "unit_scores", &scores);
    if (s != HP_OK)
        return s;
    /* jobs in plan order, then the gradient studies (which have no jobs) by name; an iterative study
     * ranked by gradient stored the scores it pruned by under its own name, each step's importance with its
     * normalize, one ranked by estimate its estimate once, without; a gates study is its
     * pruned sets (kind 'gates', one a lambda), its 'gates-frac' points beside them not counted */
    char sql[1500];
    snprintf(sql, sizeof sql,
             "SELECT study, kind, max(kv), count(*), "
             "  CASE WHEN kind <> 'iterative' THEN NULL %s ELSE 'exact' END, 0, min(ord) "
             "FROM sweep_jobs j WHERE sweep_id = ?1 AND kind NOT IN ('" HP_JOB_ITERATIVE_SCORE "', '" HP_JOB_GATES_FRAC "') "
             "GROUP BY study, kind "
             "%s ORDER BY 6, 7, 1",
             scores ? "WHEN EXISTS (SELECT 1 FROM unit_scores u WHERE u.sweep_id = ?1 AND u.study = j.study "
                      "AND u.kind = 'iterative' AND u.normalize IS NULL) THEN 'estimate' "
                      "WHEN EXISTS (SELECT 1 FROM unit_scores u WHERE u.sweep_id = ?1 AND u.study = j.study "
                      "AND u.kind = 'iterative') THEN 'gradient'"
                    : "",
             scores ? "UNION ALL SELECT study, kind, max(kv), count(*), NULL, 1, 0 FROM unit_scores "
                      "WHERE sweep_id = ?1 AND kind <> 'iterative' AND step = 0 GROUP BY study, kind"
                    : "");
    sqlite3_stmt *st;
    if ((s = hq_prep(&q, &st, sql)) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q.sweep);
    struct tb b;
    hq_tb_init(&b, C_N, cols, num);
    int r;
    while ((r = hq_step(&q, st, &s)) == 1) {
        int row = hq_tb_row(&b);
        for (int c = 0; c < C_N; c++)
            hq_tb_sql(&b, row, c, st);
    }
    sqlite3_finalize(st);
    if (r < 0) {
        hp_table_free(b.t);
        return s;
    }
    hq_tb_note(&b, "sweep %lld: its studies, in plan order (gradient studies last)", q.sweep);
    return hq_tb_finish(&b, out, err);
}
