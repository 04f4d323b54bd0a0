/*
 * test_query.c -- hp_query / hp_table_free against a synthetic results
 * database with known answers.
 *
 * Each test builds a database in its own temporary folder by running
 * engine/store/schema.sql ($HP_TESTS/../engine/store/schema.sql) and inserting rows:
 * a tiny model (2 layers x 4 heads, 2 KV heads), 4 held-out sequences of
 * 10, 20, 30 and 40 tokens, and two sweeps:
 *   1 "old" (metric acc): a baseline, a pairs study and an explicit study
 *     "sets" (two sets, the variants of layer 0 and of iterative step 1);
 *   2 "full" (metric loss, the newest): baseline, single, kvsingle (KV
 *     groups of layer 1), only, layer, random (k = 2 x 3 draws, k = 4 x 1),
 *     pairs, iterative (3 steps) and one 'iterative-score' job the curve
 *     must ignore.
 * Every variant is given by per-sequence loss deltas d against the baseline
 * (loss 2.0 2.2 1.8 2.4, acc 0.5 0.4 0.6 0.45): loss_s = base_s + d_s,
 * acc_s = base_s - d_s / 4, kl_s = |d_s| / 2, cos NULL; its overall values
 * are token-weighted means.
 *
 * The expected cells were computed once, independently of the engine, by
 * the Python script at the end of this file (stdlib statistics plus mpmath
 * for the t quantiles t(0.975, 3) = 3.18244630528371 and t(0.975, 2) =
 * 4.30265272974946, and the closed-form t(3) CDF for p-values) and pasted.
 * Regenerate: copy the script out of the comment and run it with python3.
 *
 * Numeric cells are compared with |got - want| <= 6e-7 + 1e-5 |want|
 * (what %.6f and %.6g can round away); text cells exactly. A mismatching
 * table logs its first mismatches and the largest difference, then fails.
 *
 * Last, the kinds' table (hp_query_kinds, query.h) against its one
 * options check: the kinds each rule refuses, and the kinds its message names.
 */
#define _POSIX_C_SOURCE 200809L

#include "headprune.h"
#include "query.h" // readers: several queries over one snapshot (the report's)
#include "store.h" // hp_store_schema: the schema as the store makes it
#include "testutil.h"   // tu_headprune: the CLI's csv and json

#include <criterion/criterion.h>
#include <sqlite3.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

// --- the temporary folder -----------------------------------------------------

static char g_dir[64];
static char g_db[128];

static void setup(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/hp_test_query_XXXXXX");
    cr_assert_not_null(mkdtemp(g_dir), "mkdtemp failed");
    snprintf(g_db, sizeof g_db, "%s/results.db", g_dir);
}

static void teardown(void)
{
    // the database, its -wal and -shm files and whatever a test wrote
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char p[512];
            snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
            remove(p);
        }
        closedir(d);
    }
    rmdir(g_dir);
}

TestSuite(query, .init = setup, .fini = teardown);

// --- building the database -------------------------------------------------------

static const int TOKENS[4] = {10, 20, 30, 40};
static const double BASE_LOSS[4] = {2.0, 2.2, 1.8, 2.4};
static const double BASE_ACC[4] = {0.5, 0.4, 0.6, 0.45};

static void exec(sqlite3 *db, const char *sql)
{
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    cr_assert_eq(rc, SQLITE_OK, "%s: %s", sql, msg ? msg : "?");
}

// An empty headprune database (schema and meta) at g_db, in WAL mode like the store's.
static sqlite3 *db_create(const char *schema_version)
{
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(g_db, &db), SQLITE_OK);
    exec(db, "PRAGMA journal_mode = WAL");
    cr_assert_eq(hp_store_schema(db), SQLITE_OK, "the schema: %s", sqlite3_errmsg(db));
    char sql[256];
    snprintf(sql, sizeof sql,
             "INSERT INTO meta VALUES ('schema_version', '%s'), ('created_by', 'test_query')", schema_version);
    exec(db, sql);
    return db;
}

static long long g_next_variant;

// A finished variant with per-sequence loss deltas d: its id.
/* The mask's bit set as an SQL blob literal (bit layer * 4 + head, LSB first), as the store packs it
 * (x'00' for the few variants whose text is a label rather than a spec). */
static void mask_blob(const char *mask_text, char *out, size_t n)
{
    struct hp_model_info info;
    memset(&info, 0, sizeof info);
    info.n_layers = 2, info.n_heads = 4, info.n_kv_heads = 2, info.d_head = 8, info.d_model = 32;
    struct hp_mask *m = NULL;
    struct hp_error err = {{0}};
    unsigned bits = 0;
    if (hp_mask_parse(mask_text, false, &info, &m, &err) != HP_OK) { /* a label, not a spec: no bits */
        snprintf(out, n, "x'00'");
        return;
    }
    for (int i = 0; i < 8; i++)
        bits |= (m->gate[i] == 0.0f) << i;
    hp_mask_free(m);
    snprintf(out, n, "x'%02X'", bits);
}

static long long variant(sqlite3 *db, const char *mask_text, int n_ablated, const double d[4])
{
    long long id = ++g_next_variant;
    double loss = 0, acc = 0, kl = 0;
    int n = 0;
    char sql[1024];
    for (int s = 0; s < 4; s++) {
        double l = BASE_LOSS[s] + d[s], a = BASE_ACC[s] - d[s] / 4, k = fabs(d[s]) / 2;
        loss += TOKENS[s] * l;
        acc += TOKENS[s] * a;
        kl += TOKENS[s] * k;
        n += TOKENS[s];
        snprintf(sql, sizeof sql, "INSERT INTO seq_results(variant_id, seq, loss, acc, kl, cos, n_tokens) VALUES (%lld, %d, %.17g, %.17g, %.17g, NULL, %d)", id, s, l,
                 a, k, TOKENS[s]);
        exec(db, sql);
    }
    loss /= n, acc /= n, kl /= n;
    char blob[16];
    mask_blob(mask_text, blob, sizeof blob);
    snprintf(sql, sizeof sql,
             "INSERT INTO variants VALUES (%lld, 'v%lld', 1, 1, 'zero', %s, '%s', %d);"
             "INSERT INTO results(variant_id, loss, ppl, acc, kl, cos, n_tokens, n_seqs, wall_s, engine_version, "
             "numeric_version, host, threads, kernel, created) VALUES (%lld, %.17g, %.17g, %.17g, %.17g, NULL, %d, 4, 0.5, '0.1.0', 1, 'test', 1, "
             "'haswell', '2024-01-01T00:00:00Z')",
             id, id, blob, mask_text, n_ablated, id, loss, exp(loss), acc, kl, n);
    exec(db, sql);
    return id;
}

// A sweep_jobs row; -1 = NULL for layer, unit, unit2.
static void job(sqlite3 *db, int sweep, int ord, long long variant_id, const char *study, const char *kind, int kv,
                const char *label, int layer, int unit, int unit2, int step, int sample, int k)
{
    char sql[1024], l[16] = "NULL", u[16] = "NULL", u2[16] = "NULL";
    if (layer >= 0)
        snprintf(l, sizeof l, "%d", layer);
    if (unit >= 0)
        snprintf(u, sizeof u, "%d", unit);
    if (unit2 >= 0)
        snprintf(u2, sizeof u2, "%d", unit2);
    snprintf(sql, sizeof sql,
             "INSERT INTO sweep_jobs VALUES (%d, %d, %lld, '%s', '%s', %d, '%s', %s, %s, %s, %d, %d, %d)", sweep, ord,
             variant_id, study, kind, kv, label, l, u, u2, step, sample, k);
    exec(db, sql);
}

#define D(a, b, c, e) ((const double[4]){a, b, c, e})

// The two sweeps described at the top; returns the open connection (close it).
static sqlite3 *db_build(void)
{
    g_next_variant = 0;
    sqlite3 *db = db_create("1");
    exec(db, "BEGIN");
    exec(db, "INSERT INTO models VALUES (1, 'md', 'models/tiny', 'llama', 2, 4, 2, 8, 1000);"
             "INSERT INTO datasets VALUES (1, 'dd', 'data/val.npy', 4, 16);"
             "INSERT INTO plans VALUES (1, 'p1', 'old', 'plans/old.yaml', ''), (2, 'p2', 'full', 'plans/full.yaml', '');"
             "INSERT INTO sweeps VALUES "
             "(1, 'k1', 1, 1, 1, 'old', 'zero', 'acc', '2024-01-01T00:00:00Z', '2024-01-01T00:10:00Z'),"
             "(2, 'k2', 2, 1, 1, 'full', 'mean', 'loss', '2024-02-01T00:00:00Z', '2024-02-01T01:00:00Z')");

    long long base = variant(db, "", 0, D(0, 0, 0, 0));
    static const double single[8][4] = {
        {0.10, 0.20, 0.15, 0.05},  {0.001, -0.002, 0.003, 0.000}, {0.50, 0.40, 0.60, 0.45}, {0.004, 0.002, 0.001, 0.003},
        {0.02, 0.03, 0.01, 0.04},  {1.0, 0.8, 1.2, 0.9},          {-0.01, 0.00, -0.02, 0.01}, {0.30, 0.25, 0.35, 0.20}};
    static const double only[8][4] = {
        {0.9, 0.8, 1.0, 0.7}, {0.6, 0.5, 0.7, 0.4}, {0.3, 0.2, 0.4, 0.25}, {1.5, 1.4, 1.6, 1.3},
        {2.0, 1.8, 2.2, 1.9}, {0.8, 0.9, 0.7, 0.6}, {1.1, 1.0, 1.2, 0.9},  {0.95, 0.85, 1.05, 0.75}};
    char mask[32], label[32];
    int ord = 0;

    // sweep 2 "full"
    job(db, 2, ord++, base, "baseline", "baseline", 0, "baseline", -1, -1, -1, 0, 0, 0);
    for (int i = 0; i < 8; i++) {
        int l = i / 4, u = i % 4;
        snprintf(mask, sizeof mask, "%d.%d", l, u);
        job(db, 2, ord++, variant(db, mask, 1, single[i]), "single", "single", 0, mask, l, u, -1, 0, 0, 1);
    }
    job(db, 2, ord++, variant(db, "1.0,1.1", 2, D(1.2, 1.0, 1.3, 1.1)), "kvsingle", "single", 1, "kv:1.0", 1, 0, -1, 0,
        0, 1);
    job(db, 2, ord++, variant(db, "1.2,1.3", 2, D(0.4, 0.3, 0.5, 0.35)), "kvsingle", "single", 1, "kv:1.1", 1, 1, -1,
        0, 0, 1);
    for (int i = 0; i < 8; i++) {
        int l = i / 4, u = i % 4;
        snprintf(mask, sizeof mask, "only %d.%d", l, u); // a stand-in: queries never parse mask_text
        snprintf(label, sizeof label, "only %d.%d", l, u);
        job(db, 2, ord++, variant(db, mask, 3, only[i]), "only", "only", 0, label, l, u, -1, 0, 0, 3);
    }
    long long layer0 = variant(db, "0.*", 4, D(1.6, 1.5, 1.7, 1.4));
    job(db, 2, ord++, layer0, "layer", "layer", 0, "layer 0", 0, -1, -1, 0, 0, 4);
    job(db, 2, ord++, variant(db, "1.*", 4, D(2.5, 2.4, 2.6, 2.3)), "layer", "layer", 0, "layer 1", 1, -1, -1, 0, 0, 4);
    job(db, 2, ord++, variant(db, "0.0,0.3", 2, D(0.3, 0.2, 0.4, 0.3)), "random", "random", 0, "k=2 #0", -1, -1, -1, 0,
        0, 2);
    job(db, 2, ord++, variant(db, "0.2,1.3", 2, D(0.6, 0.5, 0.7, 0.6)), "random", "random", 0, "k=2 #1", -1, -1, -1, 0,
        1, 2);
    job(db, 2, ord++, variant(db, "0.1,1.0", 2, D(0.1, 0.1, 0.2, 0.0)), "random", "random", 0, "k=2 #2", -1, -1, -1, 0,
        2, 2);
    job(db, 2, ord++, variant(db, "0.0,0.1,1.0,1.1", 4, D(1.0, 0.9, 1.1, 1.2)), "random", "random", 0, "k=4 #0", -1, -1,
        -1, 0, 0, 4);
    long long pair01 = variant(db, "0.0,0.1", 2, D(0.30, 0.40, 0.35, 0.25));
    job(db, 2, ord++, pair01, "pairs", "pairs", 0, "0.0+0.1", 0, 0, 1, 0, 0, 2);
    job(db, 2, ord++, variant(db, "0.0,0.2", 2, D(0.55, 0.60, 0.70, 0.40)), "pairs", "pairs", 0, "0.0+0.2", 0, 0, 2, 0,
        0, 2);
    job(db, 2, ord++, variant(db, "0.1,0.3", 2, D(0.004, 0.002, 0.003, 0.001)), "pairs", "pairs", 0, "0.1+0.3", 0, 1, 3,
        0, 0, 2);
    job(db, 2, ord++, variant(db, "0.2,0.3", 2, D(0.60, 0.50, 0.70, 0.50)), "pairs", "pairs", 0, "0.2+0.3", 0, 2, 3, 0,
        0, 2);
    job(db, 2, ord++, variant(db, "1.1,1.3", 2, D(1.1, 1.0, 1.3, 1.0)), "pairs", "pairs", 0, "1.1+1.3", 1, 1, 3, 0, 0,
        2);
    job(db, 2, ord++, base, "iterative", "iterative", 0, "step 0", -1, -1, -1, 0, 0, 0);
    job(db, 2, ord++, variant(db, "0.1", 1, D(9, 9, 9, 9)), "iterative", "iterative-score", 0, "step 1: 0.1", 0, 1, -1,
        1, 0, 1);
    long long step1 = variant(db, "0.1,1.2", 2, D(0.01, 0.0, 0.02, 0.005));
    job(db, 2, ord++, step1, "iterative", "iterative", 0, "step 1", -1, -1, -1, 1, 0, 2);
    job(db, 2, ord++, variant(db, "0.1,0.3,1.0,1.2", 4, D(0.05, 0.04, 0.06, 0.03)), "iterative", "iterative", 0,
        "step 2", -1, -1, -1, 2, 0, 4);
    cr_assert_eq(ord, 34);

    // sweep 1 "old": the same baseline and pair variants, no single study; sets of variants sweep 2 also has
    job(db, 1, 0, base, "baseline", "baseline", 0, "baseline", -1, -1, -1, 0, 0, 0);
    job(db, 1, 1, pair01, "pairs", "pairs", 0, "0.0+0.1", 0, 0, 1, 0, 0, 2);
    job(db, 1, 2, layer0, "sets", "explicit", 0, "early", -1, -1, -1, 0, 0, 4);
    job(db, 1, 3, step1, "sets", "explicit", 0, "mix", -1, -1, -1, 0, 0, 2);
    exec(db, "COMMIT");
    return db;
}

static void build(void)
{
    sqlite3_close(db_build());
}

// --- running queries and checking tables ---------------------------------------------

static struct hp_query_opts opts(enum hp_query_kind kind)
{
    struct hp_query_opts o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    return o;
}

static struct hp_table *run(const struct hp_query_opts *o)
{
    struct hp_table *t = NULL;
    struct hp_error err = {{0}};
    enum hp_status st = hp_query(g_db, o, &t, &err);
    cr_assert_eq(st, HP_OK, "hp_query: %s: %s", hp_status_name(st), err.msg);
    cr_assert_not_null(t);
    return t;
}

static void expect_fail(const struct hp_query_opts *o, const char *db, enum hp_status want, const char *msg_part)
{
    struct hp_table *t = (struct hp_table *)1;
    struct hp_error err = {{0}};
    enum hp_status st = hp_query(db, o, &t, &err);
    cr_assert_eq(st, want, "status %s (want %s): %s", hp_status_name(st), hp_status_name(want), err.msg);
    cr_assert_null(t, "*out must be NULL on failure");
    cr_assert_not_null(strstr(err.msg, msg_part), "message '%s' does not say '%s'", err.msg, msg_part);
    cr_assert_null(strchr(err.msg, '\n'), "one line: %s", err.msg);
}

static const char *cell(const struct hp_table *t, int r, int c)
{
    const char *s = t->cells[(size_t)r * (size_t)t->n_cols + (size_t)c];
    return s ? s : "";
}

/*
 * Compare t with the expected column names and n_rows rows of n_cols cells
 * ("" = an empty cell). numeric: the columns that must be marked numeric,
 * as a string of '1' and '0'.
 */
static void expect_table(const struct hp_table *t, int n_cols, const char *const *cols, const char *numeric,
                         int n_rows, const char *const *want)
{
    cr_assert_eq(t->n_cols, n_cols, "%d columns, want %d", t->n_cols, n_cols);
    for (int c = 0; c < n_cols; c++) {
        cr_assert_str_eq(t->cols[c], cols[c], "column %d", c);
        cr_assert_eq(t->numeric[c], numeric[c] == '1', "column %s numeric = %d", cols[c], t->numeric[c]);
    }
    cr_assert_eq(t->n_rows, n_rows, "%d rows, want %d", t->n_rows, n_rows);
    int bad = 0;
    double max_diff = 0;
    for (int r = 0; r < n_rows; r++)
        for (int c = 0; c < n_cols; c++) {
            const char *got = cell(t, r, c), *w = want[r * n_cols + c];
            bool ok;
            if (t->numeric[c] && *got && *w) {
                char *end;
                double g = strtod(got, &end), x = strtod(w, NULL);
                double diff = fabs(g - x);
                ok = *end == '\0' && diff <= 6e-7 + 1e-5 * fabs(x);
                if (diff > max_diff)
                    max_diff = diff;
            } else {
                ok = strcmp(got, w) == 0;
            }
            if (!ok && bad++ < 5)
                cr_log_error("row %d column %s: got '%s', want '%s'", r, cols[c], got, w);
        }
    cr_assert_eq(bad, 0, "%d cells differ (largest numeric difference %g)", bad, max_diff);
}

// --- sweeps ------------------------------------------------------------------------

Test(query, sweeps_lists_every_sweep_with_its_finished_jobs)
{
    build();
    struct hp_query_opts o = opts(HP_QUERY_SWEEPS);
    struct hp_table *t = run(&o);
    static const char *const cols[] = {"id", "name", "plan", "model", "data", "ablation", "metric", "jobs",
                                       "created", "updated"};
    static const char *const want[] = {
        "1", "old",  "plans/old.yaml",  "models/tiny", "data/val.npy", "zero", "acc",  "4",
        "2024-01-01T00:00:00Z", "2024-01-01T00:10:00Z",
        "2", "full", "plans/full.yaml", "models/tiny", "data/val.npy", "mean", "loss", "34",
        "2024-02-01T00:00:00Z", "2024-02-01T01:00:00Z"};
    expect_table(t, 10, cols, "1000000100", 2, want);
    hp_table_free(t);

    o.sweep_id = 1;
    t = run(&o);
    expect_table(t, 10, cols, "1000000100", 1, want);
    hp_table_free(t);
}

// --- heads ---------------------------------------------------------------------------

static const char *const HEADS_COLS_LOSS[] = {"study", "label", "layer", "unit", "loss", "effect",
                                              "ci_lo", "ci_hi", "seqs", "p"};

static const char *const HEADS_LOSS[] = {
    "single", "1.1", "1", "1", "3.120000000", "0.98", "0.703246912", "1.24675309", "4", "0.00144",
    "single", "0.2", "0", "2", "2.630000000", "0.49", "0.351623456", "0.623376544", "4", "0.00144",
    "single", "1.3", "1", "3", "2.405000000", "0.265", "0.172286987", "0.377713013", "4", "0.0034",
    "single", "0.0", "0", "0", "2.255000000", "0.115", "0.0222869872", "0.227713013", "4", "0.0305",
    "single", "1.0", "1", "0", "2.167000000", "0.027", "0.00445739743", "0.0455426026", "4", "0.0305",
    "single", "0.3", "0", "3", "2.142300000", "0.0023", "0.000445739743", "0.00455426026", "4", "0.0305",
    "single", "0.1", "0", "1", "2.140600000", "0.0006", "-0.00281239513", "0.00381239513", "4", "0.664",
    "single", "1.2", "1", "2", "2.137000000", "-0.003", "-0.0255426026", "0.0155426026", "4", "0.495",
};

// the same rows of study kvsingle, chosen by name (KV groups are never ranked with heads)
static const char *const HEADS_LOSS_KV[] = {
    "kvsingle", "kv:1.0", "1", "0", "3.290000000", "1.15", "0.944573974", "1.35542603", "4", "0.000386",
    "kvsingle", "kv:1.1", "1", "1", "2.530000000", "0.39", "0.251623456", "0.523376544", "4", "0.00283",
};

Test(query, heads_loss_paired_ci_newest_sweep)
{
    build();
    struct hp_query_opts o = opts(HP_QUERY_HEADS); // sweep 0 = the newest (2), metric = its own (loss)
    struct hp_table *t = run(&o);
    expect_table(t, 10, HEADS_COLS_LOSS, "0011111111", 8, HEADS_LOSS);
    cr_assert_not_null(t->note);
    cr_assert_not_null(strstr(t->note, "study single (query heads)"), "note: %s", t->note);
    cr_assert_not_null(strstr(t->note, "single studies: single, kvsingle (choose one with --study)"), "note: %s",
                       t->note);
    cr_assert_not_null(strstr(t->note, "effect = loss - baseline loss"), "note: %s", t->note);
    cr_assert_not_null(strstr(t->note, "paired"), "note: %s", t->note);
    hp_table_free(t);

    o.top = 3;
    o.sweep_id = 2;
    t = run(&o);
    expect_table(t, 10, HEADS_COLS_LOSS, "0011111111", 3, HEADS_LOSS);
    hp_table_free(t);

    o = opts(HP_QUERY_HEADS);
    o.study = "kvsingle";
    t = run(&o);
    expect_table(t, 10, HEADS_COLS_LOSS, "0011111111", 2, HEADS_LOSS_KV);
    cr_assert_not_null(strstr(t->note, "study kvsingle (KV groups)"), "note: %s", t->note);
    hp_table_free(t);
    o.study = "single";
    t = run(&o);
    expect_table(t, 10, HEADS_COLS_LOSS, "0011111111", 8, HEADS_LOSS);
    hp_table_free(t);
}

Test(query, heads_acc_is_baseline_minus_variant)
{
    build();
    struct hp_query_opts o = opts(HP_QUERY_HEADS);
    o.metric = "acc";
    struct hp_table *t = run(&o);
    static const char *const cols[] = {"study", "label", "layer", "unit", "acc", "effect",
                                       "ci_lo", "ci_hi", "seqs", "p"};
    static const char *const want[] = {
        "single", "1.1", "1", "1", "0.245000000", "0.245", "0.175811728", "0.311688272", "4", "0.00144",
        "single", "0.2", "0", "2", "0.367500000", "0.1225", "0.087905864", "0.155844136", "4", "0.00144",
        "single", "1.3", "1", "3", "0.423750000", "0.06625", "0.0430717468", "0.0944282532", "4", "0.0034",
        "single", "0.0", "0", "0", "0.461250000", "0.02875", "0.00557174679", "0.0569282532", "4", "0.0305",
        "single", "1.0", "1", "0", "0.483250000", "0.00675", "0.00111434936", "0.0113856506", "4", "0.0305",
        "single", "0.3", "0", "3", "0.489425000", "0.000575", "0.000111434936", "0.00113856506", "4", "0.0305",
        "single", "0.1", "0", "1", "0.489850000", "0.00015", "-0.000703098784", "0.000953098784", "4", "0.664",
        "single", "1.2", "1", "2", "0.490750000", "-0.00075", "-0.00638565064", "0.00388565064", "4", "0.495",
    };
    expect_table(t, 10, cols, "0011111111", 8, want);
    cr_assert_not_null(strstr(t->note, "effect = baseline acc - acc"), "note: %s", t->note);
    hp_table_free(t);
}

Test(query, heads_kl_uses_the_variants_kl)
{
    build();
    struct hp_query_opts o = opts(HP_QUERY_HEADS);
    o.metric = "kl";
    struct hp_table *t = run(&o);
    static const char *const cols[] = {"study", "label", "layer", "unit", "kl", "effect",
                                       "ci_lo", "ci_hi", "seqs", "p"};
    static const char *const want[] = {
        "single", "1.1", "1", "1", "0.490000000", "0.49", "0.351623456", "0.623376544", "4", "0.00144",
        "single", "0.2", "0", "2", "0.245000000", "0.245", "0.175811728", "0.311688272", "4", "0.00144",
        "single", "1.3", "1", "3", "0.132500000", "0.1325", "0.0861434936", "0.188856506", "4", "0.0034",
        "single", "0.0", "0", "0", "0.057500000", "0.0575", "0.0111434936", "0.113856506", "4", "0.0305",
        "single", "1.0", "1", "0", "0.013500000", "0.0135", "0.00222869872", "0.0227713013", "4", "0.0305",
        "single", "1.2", "1", "2", "0.005500000", "0.0055", "-0.00149614132", "0.0114961413", "4", "0.0917",
        "single", "0.3", "0", "3", "0.001150000", "0.00115", "0.000222869872", "0.00227713013", "4", "0.0305",
        "single", "0.1", "0", "1", "0.000700000", "0.0007", "-0.000277130128", "0.00177713013", "4", "0.103",
    };
    expect_table(t, 10, cols, "0011111111", 8, want);
    cr_assert_not_null(strstr(t->note, "KL"), "note: %s", t->note);
    hp_table_free(t);
}

/* A database written before a metric existed has no column of it: a query for it says so, not "no such column". */
Test(query, a_metric_the_database_predates_is_refused_by_name)
{
    build();
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(g_db, &db), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT name FROM sqlite_master WHERE type = 'view'", -1, &st, NULL),
                 SQLITE_OK);
    char views[16][64];
    int n = 0;
    while (sqlite3_step(st) == SQLITE_ROW && n < 16)
        snprintf(views[n++], sizeof views[0], "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    for (int i = 0; i < n; i++) {
        char *sql = sqlite3_mprintf("DROP VIEW \"%w\"", views[i]);
        exec(db, sql);
        sqlite3_free(sql);
    }
    exec(db, "ALTER TABLE results DROP COLUMN cos");
    sqlite3_close(db);
    struct hp_query_opts o = opts(HP_QUERY_HEADS);
    o.metric = "cos";
    expect_fail(&o, g_db, HP_ERR_ARG, "no cos values: the database was written before headprune measured cos");
}

Test(query, heads_default_to_query_heads_even_after_a_kv_study)
{
    sqlite3 *db = db_build();
    // sweep 3: a KV-group study before one over heads, in plan order; sweep 4: only a KV-group study
    exec(db, "INSERT INTO sweeps VALUES (3, 'k3', 2, 1, 1, 'kvfirst', 'zero', 'loss', 'c', 'u'), "
             "(4, 'k4', 2, 1, 1, 'kvonly', 'zero', 'loss', 'c', 'u')");
    long long kv00 = variant(db, "0.0,0.1", 2, D(0.5, 0.5, 0.5, 0.5));
    job(db, 3, 0, 1, "baseline", "baseline", 0, "baseline", -1, -1, -1, 0, 0, 0);
    job(db, 3, 1, kv00, "groups", "single", 1, "kv:0.0", 0, 0, -1, 0, 0, 1);
    job(db, 3, 2, variant(db, "0.0", 1, D(0.1, 0.1, 0.1, 0.1)), "heads", "single", 0, "0.0", 0, 0, -1, 0, 0, 1);
    job(db, 4, 0, 1, "baseline", "baseline", 0, "baseline", -1, -1, -1, 0, 0, 0);
    job(db, 4, 1, kv00, "groups", "single", 1, "kv:0.0", 0, 0, -1, 0, 0, 1);
    sqlite3_close(db);
    struct hp_query_opts o = opts(HP_QUERY_HEADS);
    o.sweep_id = 3;
    struct hp_table *t = run(&o);
    cr_assert_eq(t->n_rows, 1);
    cr_assert_str_eq(cell(t, 0, 0), "heads");
    cr_assert_not_null(strstr(t->note, "study heads (query heads)"), "note: %s", t->note);
    cr_assert_not_null(strstr(t->note, "single studies: groups, heads (choose one with --study)"), "note: %s", t->note);
    hp_table_free(t);
    o.kind = HP_QUERY_REDUNDANCY; // its units too
    t = run(&o);
    cr_assert_not_null(strstr(t->note, "each unit removed alone (study heads)"), "note: %s", t->note);
    cr_assert_str_eq(cell(t, 0, 1), "1");
    hp_table_free(t);
    o.kind = HP_QUERY_HEADS;
    o.sweep_id = 4;
    t = run(&o);
    cr_assert_eq(t->n_rows, 1);
    cr_assert_str_eq(cell(t, 0, 1), "kv:0.0");
    cr_assert_not_null(strstr(t->note, "study groups (KV groups)"), "note: %s", t->note);
    cr_assert_null(strstr(t->note, "choose one"), "one study, nothing to choose: %s", t->note);
    hp_table_free(t);
}

Test(query, heads_as_a_matrix_of_layers_by_units)
{
    build();
    struct hp_query_opts o = opts(HP_QUERY_HEADS);
    o.matrix = true;
    struct hp_table *t = run(&o);
    // the effects of HEADS_LOSS to 3 significant digits, layer by layer
    static const char *const cols[] = {"layer", "0", "1", "2", "3"};
    static const char *const want[] = {
        "0", "0.115", "0.0006", "0.49", "0.0023",
        "1", "0.027", "0.98", "-0.003", "0.265",
    };
    expect_table(t, 5, cols, "11111", 2, want);
    for (int i = 0; i < 10; i++)
        cr_assert_str_eq(cell(t, i / 5, i % 5), want[i], "matrix cells are written to 3 significant digits");
    cr_assert_not_null(strstr(t->note, "rows: layers, columns: query heads"), "note: %s", t->note);
    hp_table_free(t);

    // a KV study: its groups as columns, only the layers it covers
    o.study = "kvsingle";
    t = run(&o);
    static const char *const kv_cols[] = {"layer", "0", "1"};
    static const char *const kv_want[] = {"1", "1.15", "0.39"};
    expect_table(t, 3, kv_cols, "111", 1, kv_want);
    cr_assert_not_null(strstr(t->note, "columns: KV groups"), "note: %s", t->note);
    hp_table_free(t);
}

Test(query, sets_of_an_explicit_study_with_paired_ci)
{
    build();
    struct hp_query_opts o = opts(HP_QUERY_SETS);
    o.sweep_id = 1; // its metric: acc
    struct hp_table *t = run(&o);
    static const char *const cols[] = {"study", "set", "heads", "acc", "effect", "ci_lo", "ci_hi", "seqs", "p", "mask"};
    static const char *const want[] = {
        "sets", "early", "4", "0.107500000", "0.3825", "0.336143494", "0.438856506", "4", "0.000158", "0.*",
        "sets", "mix", "2", "0.487750000", "0.00225", "-0.0012094136", "0.0055844136", "4", "0.133", "0.1,1.2",
    };
    expect_table(t, 10, cols, "0011111110", 2, want);
    cr_assert_not_null(strstr(t->note, "effect = baseline acc - acc"), "note: %s", t->note);
    hp_table_free(t);
    o.top = 1;
    o.study = "sets";
    t = run(&o);
    expect_table(t, 10, cols, "0011111110", 1, want);
    hp_table_free(t);
}

// --- compare -------------------------------------------------------------------------

/*
 * Sweep id on model model_id (1: the 2 x 4 model; 2: a 3 x 4 one, added here
 * on first use) with the shared baseline (variant 1) and a single study whose
 * unit i (layer i / 4, unit i % 4) has the loss delta eff[i] on every
 * sequence, so that its loss effect is eff[i] exactly as a double computes it
 * (equal deltas give bit-equal effects: exact ties); NaN = no job for the unit.
 */
static void add_single_sweep(sqlite3 *db, int id, const char *metric, const char *ablation, int model_id,
                             const char *study, const double eff[8])
{
    char sql[512];
    if (model_id == 2)
        exec(db, "INSERT OR IGNORE INTO models VALUES (2, 'md2', 'models/deeper', 'llama', 3, 4, 2, 8, 1500)");
    snprintf(sql, sizeof sql, "INSERT INTO sweeps VALUES (%d, 'k%d', 2, %d, 1, 'cmp%d', '%s', '%s', 'c', 'u')", id, id,
             model_id, id, ablation, metric);
    exec(db, sql);
    job(db, id, 0, 1, "baseline", "baseline", 0, "baseline", -1, -1, -1, 0, 0, 0);
    int ord = 1;
    for (int i = 0; i < 8; i++) {
        if (isnan(eff[i]))
            continue;
        char mask[16];
        snprintf(mask, sizeof mask, "%d.%d", i / 4, i % 4);
        job(db, id, ord++, variant(db, mask, 1, D(eff[i], eff[i], eff[i], eff[i])), study, "single", 0, mask, i / 4,
            i % 4, -1, 0, 0, 1);
    }
}

/*
 * A = sweep 2's single study (loss effects, HEADS_LOSS), B = these, with
 * three pairs of ties:
 *   unit   0.0    0.1     0.2   0.3     1.0    1.1   1.2     1.3
 *   A      0.115  0.0006  0.49  0.0023  0.027  0.98  -0.003  0.265
 *   B      0.2    0       0.5   0       0.1    0.9   0.1     0.2
 * Ranks, 1 = smallest, ties averaged:
 *   rA     5      2       7     3       4      8     1       6
 *   rB     5.5    1.5     7     1.5     3.5    8     3.5     5.5
 * Spearman: both rank means are 4.5; sum (rA-4.5)(rB-4.5) = 0.5 + 7.5 + 6.25 + 4.5 + 0.5 + 12.25 + 3.5 + 1.5
 * = 36.5; sum (rA-4.5)^2 = 42 (8 (64-1) / 12); sum (rB-4.5)^2 = 42 - 3 (2^3-2) / 12 = 40.5;
 * rho = 36.5 / sqrt(42 * 40.5) = 36.5 / sqrt(1701) = 0.884994777.
 * Kendall tau-b: B in the order of A (ascending): 3.5 1.5 1.5 3.5 5.5 5.5 7 8; of the 28 pairs 23 are
 * concordant, 2 discordant (3.5 before each 1.5), 3 tied in B, none in A:
 * tau-b = (23 - 2) / sqrt((28 - 0) (28 - 3)) = 21 / sqrt(700) = 0.793725393.
 * The table's ranks are 9 - these (1 = the largest effect). Per layer: in each, A's order puts B as
 * (t, t, x, y) with t < x < y: rA - 2.5 = -1.5 -0.5 0.5 1.5, rB - 2.5 = -1 -1 0.5 1.5: rho = 4.5 / sqrt(5 * 4.5)
 * = sqrt(0.9) = 0.948683298; tau-b = 5 / sqrt(6 * 5) = 0.912870929. Means: layer 0 A 0.6079 / 4 = 0.151975,
 * B 0.7 / 4 = 0.175; layer 1 A 1.269 / 4 = 0.31725, B 1.3 / 4 = 0.325; all A 1.8769 / 8 = 0.2346125, B 0.25.
 * (scipy.stats.spearmanr and kendalltau give 0.8849947770681915 and 0.7937253933193771, and per layer
 * 0.9486832980505139 and 0.9128709291752769.)
 */
static const double B_EFF[8] = {0.2, 0.0, 0.5, 0.0, 0.1, 0.9, 0.1, 0.2};

static const char *const CMP_COLS[] = {"label", "layer", "unit", "effect_a", "effect_b", "diff",
                                       "rank_a", "rank_b", "rho", "tau"};
static const char *const CMP_WANT[] = {
    "0.0", "0", "0", "0.115", "0.2", "0.085", "4", "3.5", "", "",
    "0.1", "0", "1", "0.0006", "0", "-0.0006", "7", "7.5", "", "",
    "0.2", "0", "2", "0.49", "0.5", "0.01", "2", "2", "", "",
    "0.3", "0", "3", "0.0023", "0", "-0.0023", "6", "7.5", "", "",
    "1.0", "1", "0", "0.027", "0.1", "0.073", "5", "5.5", "", "",
    "1.1", "1", "1", "0.98", "0.9", "-0.08", "1", "1", "", "",
    "1.2", "1", "2", "-0.003", "0.1", "0.103", "8", "5.5", "", "",
    "1.3", "1", "3", "0.265", "0.2", "-0.065", "3", "3.5", "", "",
    "all", "", "", "0.2346125", "0.25", "0.0153875", "", "", "0.884994777", "0.793725393",
};

Test(query, compare_two_sweeps_side_by_side_with_rank_correlations_and_ties)
{
    sqlite3 *db = db_build();
    add_single_sweep(db, 3, "loss", "zero", 1, "single", B_EFF);
    sqlite3_close(db);
    struct hp_query_opts o = opts(HP_QUERY_COMPARE);
    o.sweep_id = 2;
    o.sweep_id2 = 3;
    struct hp_table *t = run(&o);
    expect_table(t, 10, CMP_COLS, "0111111111", 9, CMP_WANT);
    cr_assert_eq(t->n_summary, 1, "the row all is a summary, no unit");
    char want[400];
    snprintf(want, sizeof want, "A = sweep 2 of %s (full, mean ablation, study single), B = sweep 3 of %s (cmp3, zero "
             "ablation, study single); effect = loss - baseline loss", g_db, g_db);
    cr_assert_not_null(strstr(t->note, want), "note: %s", t->note);
    cr_assert_not_null(strstr(t->note, "diff = B - A"), "note: %s", t->note);
    cr_assert_not_null(strstr(t->note, "over the 8 query heads both have: Spearman rho 0.885, Kendall tau-b 0.794"),
                       "note: %s", t->note);
    hp_table_free(t);

    // B defaults to the newest sweep
    o.sweep_id2 = 0;
    t = run(&o);
    expect_table(t, 10, CMP_COLS, "0111111111", 9, CMP_WANT);
    hp_table_free(t);

    // the units that differ most: 1.2 (0.103), 0.0 (0.085); the correlations still over every unit
    o.top = 2;
    t = run(&o);
    const char *const top_want[] = {
        CMP_WANT[60], CMP_WANT[61], CMP_WANT[62], CMP_WANT[63], CMP_WANT[64], CMP_WANT[65], CMP_WANT[66],
        CMP_WANT[67], CMP_WANT[68], CMP_WANT[69], CMP_WANT[0], CMP_WANT[1], CMP_WANT[2], CMP_WANT[3],
        CMP_WANT[4], CMP_WANT[5], CMP_WANT[6], CMP_WANT[7], CMP_WANT[8], CMP_WANT[9], CMP_WANT[80],
        CMP_WANT[81], CMP_WANT[82], CMP_WANT[83], CMP_WANT[84], CMP_WANT[85], CMP_WANT[86], CMP_WANT[87],
        CMP_WANT[88], CMP_WANT[89]};
    expect_table(t, 10, CMP_COLS, "0111111111", 3, top_want);
    cr_assert_eq(t->n_summary, 1);
    hp_table_free(t);

    o.top = 0;
    o.by_layer = true;
    t = run(&o);
    static const char *const layer_cols[] = {"label", "layer", "units", "mean_a", "mean_b", "diff", "rho", "tau"};
    static const char *const layer_want[] = {
        "layer 0", "0", "4", "0.151975", "0.175", "0.023025", "0.948683298", "0.912870929",
        "layer 1", "1", "4", "0.31725", "0.325", "0.00775", "0.948683298", "0.912870929",
        "all", "", "8", "0.2346125", "0.25", "0.0153875", "0.884994777", "0.793725393",
    };
    expect_table(t, 8, layer_cols, "01111111", 3, layer_want);
    cr_assert_eq(t->n_summary, 1, "all is a summary, the layers are rows");
    hp_table_free(t);
}

Test(query, compare_reversed_and_constant_effects)
{
    sqlite3 *db = db_build();
    // B = -A reverses every rank: rho = tau = -1; a constant B ranks nothing: both undefined (empty)
    const double reversed[8] = {-0.115, -0.0006, -0.49, -0.0023, -0.027, -0.98, 0.003, -0.265};
    const double constant[8] = {0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1};
    add_single_sweep(db, 3, "loss", "zero", 1, "single", reversed);
    add_single_sweep(db, 4, "loss", "zero", 1, "single", constant);
    sqlite3_close(db);
    struct hp_query_opts o = opts(HP_QUERY_COMPARE);
    o.sweep_id = 2;
    o.sweep_id2 = 3;
    struct hp_table *t = run(&o);
    cr_assert_eq(t->n_rows, 9);
    cr_assert_str_eq(cell(t, 8, 8), "-1");
    cr_assert_str_eq(cell(t, 8, 9), "-1");
    hp_table_free(t);
    o.sweep_id2 = 4;
    t = run(&o);
    cr_assert_str_eq(cell(t, 8, 0), "all");
    cr_assert_str_empty(cell(t, 8, 8));
    cr_assert_str_empty(cell(t, 8, 9));
    cr_assert_str_eq(cell(t, 0, 7), "4.5", "eight ties share the average of ranks 1..8");
    cr_assert_not_null(strstr(t->note, "Spearman rho undefined, Kendall tau-b undefined"), "note: %s", t->note);
    hp_table_free(t);
}

Test(query, compare_units_only_one_sweep_has)
{
    sqlite3 *db = db_build();
    // B covers layer 0 only: layer 1's rows have no effect_b, and the correlations are layer 0's
    const double layer0[8] = {0.2, 0.0, 0.5, 0.0, NAN, NAN, NAN, NAN};
    const double layer1[8] = {NAN, NAN, NAN, NAN, 0.1, 0.9, 0.1, 0.2};
    add_single_sweep(db, 3, "loss", "zero", 1, "single", layer0);
    add_single_sweep(db, 4, "loss", "zero", 1, "single", layer1);
    sqlite3_close(db);
    struct hp_query_opts o = opts(HP_QUERY_COMPARE);
    o.sweep_id = 2;
    o.sweep_id2 = 3;
    struct hp_table *t = run(&o);
    static const char *const want[] = {
        "0.0", "0", "0", "0.115", "0.2", "0.085", "2", "2", "", "",
        "0.1", "0", "1", "0.0006", "0", "-0.0006", "4", "3.5", "", "",
        "0.2", "0", "2", "0.49", "0.5", "0.01", "1", "1", "", "",
        "0.3", "0", "3", "0.0023", "0", "-0.0023", "3", "3.5", "", "",
        "1.0", "1", "0", "0.027", "", "", "", "", "", "",
        "1.1", "1", "1", "0.98", "", "", "", "", "", "",
        "1.2", "1", "2", "-0.003", "", "", "", "", "", "",
        "1.3", "1", "3", "0.265", "", "", "", "", "", "",
        "all", "", "", "0.151975", "0.175", "0.023025", "", "", "0.948683298", "0.912870929",
    };
    expect_table(t, 10, CMP_COLS, "0111111111", 9, want);
    cr_assert_not_null(strstr(t->note, "over the 4 query heads both have"), "note: %s", t->note);
    cr_assert_not_null(strstr(t->note, "4 query heads in one sweep only"), "note: %s", t->note);
    hp_table_free(t);
    o.by_layer = true;
    t = run(&o);
    cr_assert_eq(t->n_rows, 2, "layer 0 and all: no layer without a unit in both");
    cr_assert_str_eq(cell(t, 0, 0), "layer 0");
    hp_table_free(t);

    o = opts(HP_QUERY_COMPARE);
    o.sweep_id = 3;
    o.sweep_id2 = 4;
    char msg[400];
    snprintf(msg, sizeof msg, "compare: study single of sweep 3 of %s and study single of sweep 4 of %s have no unit in "
             "common", g_db, g_db);
    expect_fail(&o, g_db, HP_ERR_ARG, msg);
}

Test(query, compare_across_two_databases)
{
    build();
    // a second file: the same sweeps, and B's single study as sweep 3
    char first[128], second[128];
    snprintf(first, sizeof first, "%s", g_db);
    snprintf(second, sizeof second, "%s/other.db", g_dir);
    snprintf(g_db, sizeof g_db, "%s", second);
    sqlite3 *db = db_build();
    add_single_sweep(db, 3, "loss", "zero", 1, "single", B_EFF);
    sqlite3_close(db);
    snprintf(g_db, sizeof g_db, "%s", first);

    struct hp_query_opts o = opts(HP_QUERY_COMPARE);
    o.sweep_id = 2;
    o.db2 = second;
    struct hp_table *t = run(&o); // B: the newest of other.db
    expect_table(t, 10, CMP_COLS, "0111111111", 9, CMP_WANT);
    char want[400];
    snprintf(want, sizeof want, "B = sweep 3 of %s (cmp3", second);
    cr_assert_not_null(strstr(t->note, want), "note: %s", t->note);
    hp_table_free(t);

    // sweep 2 of each file: the same numbers, so no difference and perfect agreement
    o.sweep_id2 = 2;
    t = run(&o);
    cr_assert_str_eq(cell(t, 8, 5), "0");
    cr_assert_str_eq(cell(t, 8, 8), "1");
    cr_assert_str_eq(cell(t, 8, 9), "1");
    hp_table_free(t);

    // the hint for B names B's option
    o.sweep_id2 = 1;
    expect_fail(&o, g_db, HP_ERR_ARG, "sweep 1 has no single study (sweep 3 does: use --sweep2 3)");
    char missing[200];
    snprintf(missing, sizeof missing, "%s/none.db", g_dir);
    o.db2 = missing;
    o.sweep_id2 = 0;
    snprintf(want, sizeof want, "%s: no such database", missing);
    expect_fail(&o, g_db, HP_ERR_IO, want);
}

Test(query, compare_refuses_what_cannot_be_compared)
{
    sqlite3 *db = db_build();
    add_single_sweep(db, 3, "acc", "zero", 1, "single", B_EFF); // another metric
    add_single_sweep(db, 4, "loss", "zero", 2, "single", B_EFF); // another shape
    sqlite3_close(db);
    struct hp_query_opts o = opts(HP_QUERY_COMPARE);
    char want[600];

    // one sweep with itself: both default to the newest (4)
    snprintf(want, sizeof want, "%s: compare: A and B are both sweep 4 (name another with --sweep ID for A or "
             "--sweep2 ID for B", g_db);
    expect_fail(&o, g_db, HP_ERR_ARG, want);

    o.sweep_id = 2;
    o.sweep_id2 = 3;
    snprintf(want, sizeof want, "compare: sweep 2 of %s measures loss but sweep 3 of %s measures acc (name the metric "
             "to compare with --metric)", g_db, g_db);
    expect_fail(&o, g_db, HP_ERR_ARG, want);
    o.metric = "loss"; // then both are read as loss
    struct hp_table *t = run(&o);
    expect_table(t, 10, CMP_COLS, "0111111111", 9, CMP_WANT);
    hp_table_free(t);
    o.metric = NULL;

    o.sweep_id2 = 4;
    snprintf(want, sizeof want, "compare: sweep 2 of %s is of a model with 2 layers x 4 heads but sweep 4 of %s of one "
             "with 3 x 4 (compare sweeps of models of one shape)", g_db, g_db);
    expect_fail(&o, g_db, HP_ERR_SHAPE, want);

    o.sweep_id2 = 1;
    expect_fail(&o, g_db, HP_ERR_ARG, "sweep 1 has no single study (sweep 4 does: use --sweep2 4)");
    o.sweep_id = 1;
    o.sweep_id2 = 2;
    expect_fail(&o, g_db, HP_ERR_ARG, "sweep 1 has no single study (sweep 4 does: use --sweep 4)");

    o.sweep_id = 2;
    o.sweep_id2 = 3;
    o.metric = "loss";
    o.study = "kvsingle";
    o.study2 = "single";
    snprintf(want, sizeof want, "compare: study kvsingle of sweep 2 of %s ablates KV groups but study single of sweep 3 "
             "of %s query heads", g_db, g_db);
    expect_fail(&o, g_db, HP_ERR_ARG, want);
    o.study2 = "nope";
    expect_fail(&o, g_db, HP_ERR_ARG, "sweep 3 has no single study 'nope' (its single studies: single)");
    o.study = "single";
    o.study2 = NULL; // --study names both sides' study
    t = run(&o);
    expect_table(t, 10, CMP_COLS, "0111111111", 9, CMP_WANT);
    hp_table_free(t);
    o.metric = "cos"; // NULL for these models
    expect_fail(&o, g_db, HP_ERR_ARG, "sweep 2 has no cos values");
}

Test(query, a_model_of_many_units_sizes_nothing_by_its_shape)
{
    sqlite3 *db = db_build();
    add_single_sweep(db, 3, "loss", "zero", 1, "single", B_EFF);
    // 60000 layers x 250 heads (15 million units, under the bound a real shape may reach): the same 8 jobs
    exec(db, "UPDATE models SET n_layers = 60000, n_heads = 250");
    sqlite3_close(db);
    struct hp_query_opts o = opts(HP_QUERY_COMPARE);
    o.sweep_id = 2;
    time_t t0 = time(NULL);
    struct hp_table *t = run(&o);
    expect_table(t, 10, CMP_COLS, "0111111111", 9, CMP_WANT);
    hp_table_free(t);
    o.by_layer = true;
    t = run(&o);
    cr_assert_eq(t->n_rows, 3, "layers 0, 1 and all, not 60000 layers");
    hp_table_free(t);
    cr_assert_lt(time(NULL) - t0, 5, "took %lld s", (long long)(time(NULL) - t0));

    o = opts(HP_QUERY_HEADS);
    o.sweep_id = 2;
    o.matrix = true;
    t = run(&o); // 250 columns: wide, but a matrix still
    cr_assert_eq(t->n_cols, 251);
    cr_assert_eq(t->n_rows, 2);
    hp_table_free(t);
    db = NULL;
    cr_assert_eq(sqlite3_open(g_db, &db), SQLITE_OK);
    exec(db, "UPDATE models SET n_layers = 2, n_heads = 5000");
    sqlite3_close(db);
    char want[300];
    snprintf(want, sizeof want, "%s: sweep 2's model has 5000 heads a layer, too many for a matrix (at most 1024; use "
             "--format csv)", g_db);
    expect_fail(&o, g_db, HP_ERR_ARG, want);
}

Test(query, options_of_other_kinds_are_refused)
{
    build();
    struct hp_query_opts o = opts(HP_QUERY_HEADS);
    o.db2 = g_db;
    expect_fail(&o, g_db, HP_ERR_ARG, "query: --db2, --sweep2, --study2 and --by are for compare only");
    o = opts(HP_QUERY_SETS);
    o.by_layer = true;
    expect_fail(&o, g_db, HP_ERR_ARG, "--by are for compare only");
    o = opts(HP_QUERY_CURVE);
    o.matrix = true;
    expect_fail(&o, g_db, HP_ERR_ARG, "query: the matrix format is for heads only");
    o = opts(HP_QUERY_HEADS);
    o.matrix = true;
    o.top = 3;
    expect_fail(&o, g_db, HP_ERR_ARG, "--top does not apply to the matrix format");
    o = opts(HP_QUERY_REDUNDANCY);
    o.study = "single";
    expect_fail(&o, g_db, HP_ERR_ARG, "query: --study is for curve, heads, sets, compare, importance, attribution, roles, gates, patching, screen, self-repair, edges and circuit only");
    o = opts(HP_QUERY_COMPARE);
    o.by_layer = true;
    o.top = 2;
    expect_fail(&o, g_db, HP_ERR_ARG, "--top does not apply to compare --by layer");
    o = opts(HP_QUERY_COMPARE);
    o.sweep_id2 = -1;
    expect_fail(&o, g_db, HP_ERR_ARG, "a sweep id must be positive");
}

Test(query, curve_of_one_study)
{
    build();
    struct hp_query_opts o = opts(HP_QUERY_CURVE);
    o.study = "iterative";
    struct hp_table *t = run(&o);
    cr_assert_eq(t->n_rows, 3, "the iterative study's 3 steps, not the random study's rows");
    for (int r = 0; r < 3; r++)
        cr_assert_str_eq(cell(t, r, 0), "iterative");
    hp_table_free(t);
}

// --- curve ---------------------------------------------------------------------------

Test(query, curve_random_ci_and_iterative_steps)
{
    build();
    struct hp_query_opts o = opts(HP_QUERY_CURVE);
    struct hp_table *t = run(&o);
    static const char *const cols[] = {"study", "step", "k", "heads", "pct_heads", "samples", "loss",
                                       "ci_lo", "ci_hi", "effect", "pruned"};
    // random first: plan order; its k = 0 row is the baseline
    static const char *const want[] = {
        "random", "", "0", "0", "0.00", "1", "2.140000000", "", "", "0", "",
        "random", "", "2", "2", "25.00", "3", "2.476666667", "1.828248034", "3.125085300", "0.336666667", "",
        "random", "", "4", "4", "50.00", "1", "3.230000000", "", "", "1.09", "",
        "iterative", "0", "0", "0", "0.00", "", "2.140000000", "", "", "0", "",
        "iterative", "1", "2", "2", "25.00", "", "2.149000000", "", "", "0.009", "0.1,1.2",
        "iterative", "2", "4", "4", "50.00", "", "2.183000000", "", "", "0.043", "0.3,1.0", // what step 2 added
    };
    expect_table(t, 11, cols, "01111111110", 6, want);
    cr_assert_not_null(strstr(t->note, "effect = loss - baseline loss"), "note: %s", t->note);
    hp_table_free(t);
}

Test(query, a_curve_ranked_by_a_metric_the_model_lacks_is_refused)
{
    // as an older headprune recorded a sweep whose plan named a metric its model did not have:
    // every candidate scored NaN, so the "curve" pruned heads in index order
    sqlite3 *db = db_build();
    exec(db, "UPDATE sweeps SET metric = 'cos' WHERE id = 2");
    sqlite3_close(db);
    struct hp_query_opts o = opts(HP_QUERY_CURVE);
    o.metric = "loss";
    expect_fail(&o, g_db, HP_ERR_ARG, "ranked study 'iterative' by cos, which its model does not produce");
    // the other queries still answer in a metric the model has
    o.kind = HP_QUERY_HEADS;
    hp_table_free(run(&o));
}

// --- redundancy ------------------------------------------------------------------------

Test(query, redundancy_one_row_per_layer)
{
    build();
    struct hp_query_opts o = opts(HP_QUERY_REDUNDANCY);
    o.eps = 0.01;
    struct hp_table *t = run(&o);
    static const char *const cols[] = {"layer", "units", "below_eps", "mean_effect", "max_effect",
                                       "only_effect", "only_unit", "layer_effect"};
    static const char *const want[] = {
        "0", "4", "2", "0.151975", "0.49", "0.29", "0.2", "1.53",
        "1", "4", "1", "0.31725", "0.98", "0.71", "1.1", "2.43",
    };
    expect_table(t, 8, cols, "11111101", 2, want);
    cr_assert_not_null(strstr(t->note, "effect < 0.01"), "note: %s", t->note);
    hp_table_free(t);

    o.eps = 0.03;
    t = run(&o);
    static const char *const want3[] = {
        "0", "4", "2", "0.151975", "0.49", "0.29", "0.2", "1.53",
        "1", "4", "2", "0.31725", "0.98", "0.71", "1.1", "2.43",
    };
    expect_table(t, 8, cols, "11111101", 2, want3);
    hp_table_free(t);

    o.eps = 0; // taken as given: only units whose removal helps
    t = run(&o);
    cr_assert_str_eq(cell(t, 0, 2), "0");
    cr_assert_str_eq(cell(t, 1, 2), "1");
    cr_assert_not_null(strstr(t->note, "effect < 0)"), "note: %s", t->note);
    cr_assert_not_null(strstr(t->note, "(study single)") && strstr(t->note, "(study layer)"), "note: %s", t->note);
    hp_table_free(t);

    // a sweep without an only study: its columns empty, and the note says so (not "(study none)")
    sqlite3 *h;
    cr_assert_eq(sqlite3_open(g_db, &h), SQLITE_OK);
    exec(h, "DELETE FROM sweep_jobs WHERE kind = 'only'");
    sqlite3_close(h);
    t = run(&o);
    cr_assert_str_eq(cell(t, 0, 5), "");
    cr_assert_not_null(strstr(t->note, "only_effect, only_unit empty: the sweep has no only study"), "note: %s",
                       t->note);
    cr_assert_null(strstr(t->note, "none"), "note: %s", t->note);
    hp_table_free(t);
}

// --- pairs ---------------------------------------------------------------------------

static const char *const PAIRS_COLS[] = {"study",    "pair",     "layer",       "unit_a", "unit_b",
                                         "effect_ab", "effect_a", "effect_b", "interaction", "ci_lo",
                                         "ci_hi",     "seqs",     "p"};
#define PAIRS_NUM "0011111111111"
/* ci_lo, ci_hi, p: of the per-sequence interactions I_s = d_s(ab) - d_s(a) - d_s(b) (the loss's
 * per-sequence effect is the variant's d_s), by the script at the end of this file: 0.0+0.1 has
 * I_s = 0.199 0.202 0.197 0.200, 0.2+0.3 0.096 0.098 0.099 0.047, 0.1+0.3 -0.001 0.002 -0.001 -0.002,
 * 0.0+0.2 -0.05 0 -0.05 -0.1, 1.1+1.3 -0.2 -0.05 -0.25 -0.1. */
static const char *const PAIRS[] = {
    "pairs", "0.0+0.1", "0", "0", "1", "0.315", "0.115", "0.0006", "0.1994",
    "0.196187605", "0.202812395", "4", "3.13e-07",
    "pairs", "0.2+0.3", "0", "2", "3", "0.57", "0.49", "0.0023", "0.0777",
    "0.0446401897", "0.12535981", "4", "0.00678",
    "pairs", "0.1+0.3", "0", "1", "3", "0.0021", "0.0006", "0.0023", "-0.0008",
    "-0.00325607935", "0.00225607935", "4", "0.604",
    "pairs", "0.0+0.2", "0", "0", "2", "0.545", "0.115", "0.49", "-0.06",
    "-0.114961413", "0.0149614132", "4", "0.0917",
    "pairs", "1.1+1.3", "1", "1", "3", "1.1", "0.98", "0.265", "-0.145",
    "-0.295258136", "-0.00474186421", "4", "0.0462",
};

Test(query, pairs_interactions_most_redundant_first)
{
    build();
    struct hp_query_opts o = opts(HP_QUERY_PAIRS);
    struct hp_table *t = run(&o);
    expect_table(t, 13, PAIRS_COLS, PAIRS_NUM, 5, PAIRS);
    cr_assert_not_null(strstr(t->note, "> 0 = redundant"), "note: %s", t->note);
    cr_assert_not_null(strstr(t->note, "ci_lo..ci_hi the paired 95% t interval (n-1 df) of the per-sequence "
                                       "interaction and p its two-sided t test"), "note: %s", t->note);
    cr_assert_str_eq(cell(t, 0, 12), "3.13e-07", "p below the tolerance's absolute part: its text"); // 3.1314e-07
    hp_table_free(t);

    // top 1: the largest and the smallest interaction
    o.top = 1;
    t = run(&o);
    const char *want[26];
    for (int c = 0; c < 13; c++) {
        want[c] = PAIRS[c];
        want[13 + c] = PAIRS[4 * 13 + c];
    }
    expect_table(t, 13, PAIRS_COLS, PAIRS_NUM, 2, want);
    hp_table_free(t);

    o.top = 3; // 2 * 3 >= 5: everything
    t = run(&o);
    expect_table(t, 13, PAIRS_COLS, PAIRS_NUM, 5, PAIRS);
    hp_table_free(t);
}

/*
 * A sequence counts only where the pair, both singles and the baseline have a finite value: single
 * 0.1 lacks sequence 3 (0.0+0.1 and 0.1+0.3 on 3 sequences, 2 df), pair 0.2+0.3 has no loss on
 * sequences 0 to 2 (1 left: no interval), pair 1.1+1.3 has no per-sequence rows (as a database from
 * before them, or a metric without). The interactions themselves (over all tokens) are unchanged.
 * A later single job of 0.0 (another study) changes nothing: a unit's first single job is its single.
 * Without the baseline's per-sequence rows, no pair has an interval, and that is no error.
 */
Test(query, pairs_intervals_over_the_sequences_all_four_have)
{
    sqlite3 *db = db_build();
    job(db, 2, 34, variant(db, "0.0", 1, D(9, -9, 9, -9)), "single-again", "single", 0, "0.0", 0, 0, -1, 0, 0, 1);
    exec(db, "DELETE FROM seq_results WHERE seq = 3 AND variant_id = "
             "(SELECT variant_id FROM sweep_jobs WHERE sweep_id = 2 AND study = 'single' AND label = '0.1');"
             "UPDATE seq_results SET loss = NULL WHERE seq < 3 AND variant_id = "
             "(SELECT variant_id FROM sweep_jobs WHERE sweep_id = 2 AND label = '0.2+0.3');"
             "DELETE FROM seq_results WHERE variant_id = "
             "(SELECT variant_id FROM sweep_jobs WHERE sweep_id = 2 AND label = '1.1+1.3')");
    sqlite3_close(db);
    // by the script at the end of this file (its "pairs, missing" table)
    static const char *const want[] = {
        "pairs", "0.0+0.1", "0", "0", "1", "0.315", "0.115", "0.0006", "0.1994",
        "0.193081724", "0.205584943", "3", "5.31e-05",
        "pairs", "0.2+0.3", "0", "2", "3", "0.57", "0.49", "0.0023", "0.0777",
        "", "", "1", "",
        "pairs", "0.1+0.3", "0", "1", "3", "0.0021", "0.0006", "0.0023", "-0.0008",
        "-0.00430265273", "0.00430265273", "3", "1",
        "pairs", "0.0+0.2", "0", "0", "2", "0.545", "0.115", "0.49", "-0.06",
        "-0.114961413", "0.0149614132", "4", "0.0917",
        "pairs", "1.1+1.3", "1", "1", "3", "1.1", "0.98", "0.265", "-0.145",
        "", "", "0", "",
    };
    struct hp_query_opts o = opts(HP_QUERY_PAIRS);
    struct hp_table *t = run(&o);
    expect_table(t, 13, PAIRS_COLS, PAIRS_NUM, 5, want);
    cr_assert_str_eq(cell(t, 0, 12), "5.31e-05", "p: its text"); // 5.3127e-05
    hp_table_free(t);

    cr_assert_eq(sqlite3_open(g_db, &db), SQLITE_OK);
    exec(db, "DELETE FROM seq_results WHERE variant_id = "
             "(SELECT variant_id FROM sweep_jobs WHERE sweep_id = 2 AND kind = 'baseline')");
    sqlite3_close(db);
    t = run(&o);
    cr_assert_eq(t->n_rows, 5);
    for (int r = 0; r < 5; r++) {
        for (int c = 0; c < 9; c++)
            cr_assert_str_eq(cell(t, r, c), PAIRS[r * 13 + c], "row %d column %s", r, PAIRS_COLS[c]);
        cr_assert_str_eq(cell(t, r, 9), "", "row %d ci_lo", r);
        cr_assert_str_eq(cell(t, r, 10), "", "row %d ci_hi", r);
        cr_assert_str_eq(cell(t, r, 11), "0", "row %d seqs", r);
        cr_assert_str_eq(cell(t, r, 12), "", "row %d p", r);
    }
    hp_table_free(t);
}

// --- read-only SQL ---------------------------------------------------------------------

Test(query, sql_columns_cells_and_numeric_columns)
{
    build();
    struct hp_query_opts o = opts(HP_QUERY_SQL);
    o.sql = "SELECT id, name, 1.5 * id AS x, NULL AS empty, x'0aff' AS b, CASE id WHEN 1 THEN 7 ELSE 'two' END AS mix "
            "FROM sweeps ORDER BY id;  -- trailing comment";
    struct hp_table *t = run(&o);
    static const char *const cols[] = {"id", "name", "x", "empty", "b", "mix"};
    static const char *const want[] = {
        "1", "old", "1.5", "", "x'0aff'", "7",
        "2", "full", "3.0", "", "x'0aff'", "two",
    };
    expect_table(t, 6, cols, "101000", 2, want);
    cr_assert_str_eq(cell(t, 1, 2), "3.0"); // SQLite's own rendering
    hp_table_free(t);

    // the views of the schema are there to be used
    o.sql = "SELECT label, round(d_loss, 6) FROM effects WHERE sweep_id = 2 AND kind = 'single' AND kv = 0 AND layer = 1 "
            "ORDER BY d_loss DESC LIMIT 1";
    t = run(&o);
    static const char *const cols2[] = {"label", "round(d_loss, 6)"};
    static const char *const want2[] = {"1.1", "0.98"};
    expect_table(t, 2, cols2, "01", 1, want2);
    hp_table_free(t);
}

/* Half a unit of the last digit text shows ("2.476667": 5e-7, "1.5e-05": 5e-8, "18": 0.5), or -1 where text
 * is not a plain decimal number. */
static double half_last_digit(const char *text)
{
    const char *p = text + (*text == '-' || *text == '+');
    int frac = 0, digits = 0;
    for (; *p >= '0' && *p <= '9'; p++)
        digits++;
    if (*p == '.')
        for (p++; *p >= '0' && *p <= '9'; p++)
            digits++, frac++;
    long e = 0;
    if (digits && (*p == 'e' || *p == 'E')) {
        char *end;
        e = strtol(p + 1, &end, 10);
        p = end;
    }
    return digits && !*p ? 0.5 * pow(10.0, (double)(e - frac)) : -1;
}

/*
 * Every cell's text is its number (hp_table.values, what the CSV, JSON and report writers use) rounded to read:
 * where the column is numeric the text parses whole and is within half a unit of its last digit of the number
 * (the number itself is in full: *rounded counts the cells whose text is not it exactly); NaN where the cell is
 * empty; a text column's cell is NaN unless its text is a whole number (SQL's mixed columns), then exactly it.
 */
static int expect_texts_round_values(const struct hp_table *t, const char *what, int *rounded)
{
    int checked = 0;
    for (int r = 0; r < t->n_rows; r++)
        for (int c = 0; c < t->n_cols; c++) {
            size_t i = (size_t)r * (size_t)t->n_cols + (size_t)c;
            const char *text = t->cells[i];
            double v = t->values[i];
            if (!text || !*text) {
                cr_assert(isnan(v), "%s: empty cell (%d, %s) has the number %.17g", what, r, t->cols[c], v);
                continue;
            }
            char *end;
            double parsed = strtod(text, &end);
            if (!t->numeric[c]) {
                cr_assert(isnan(v) || (*end == '\0' && v == parsed), "%s: text cell (%d, %s) '%s' has the number %.17g",
                          what, r, t->cols[c], text, v);
                continue;
            }
            const double half = half_last_digit(text);
            cr_assert(*end == '\0' && half > 0, "%s: numeric cell (%d, %s) '%s' is not a number", what, r, t->cols[c],
                      text);
            /* the decimal text is within half of v; parsed is the double nearest the text (half an ulp away) */
            cr_assert(fabs(v - parsed) <= half + 0.5 * nextafter(fabs(parsed), INFINITY) - 0.5 * fabs(parsed),
                      "%s: cell (%d, %s) shows '%s' but carries %.17g, not what it rounds to", what, r, t->cols[c],
                      text, v);
            *rounded += v != parsed;
            checked++;
        }
    return checked;
}

Test(query, cell_texts_round_their_full_numbers)
{
    build();
    static const struct {
        enum hp_query_kind kind;
        const char *metric, *sql;
    } cases[] = {
        {HP_QUERY_SWEEPS, NULL, NULL},
        {HP_QUERY_CURVE, NULL, NULL},
        {HP_QUERY_HEADS, NULL, NULL},
        {HP_QUERY_HEADS, "acc", NULL},
        {HP_QUERY_HEADS, "kl", NULL},
        {HP_QUERY_REDUNDANCY, NULL, NULL},
        {HP_QUERY_PAIRS, NULL, NULL},
        {HP_QUERY_SQL, NULL,
         "SELECT id, 0.1 + 0.2 AS r, 1.0 / 3 AS third, -0.0 AS negzero, 9007199254740993 AS big, NULL AS empty, "
         "x'00' AS b, CASE id WHEN 1 THEN 7 ELSE 'two' END AS mix FROM sweeps"},
        {HP_QUERY_SQL, NULL, "SELECT * FROM effects"},
    };
    int checked = 0, rounded = 0;
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        struct hp_query_opts o = opts(cases[k].kind);
        o.metric = cases[k].metric;
        o.sql = cases[k].sql;
        o.eps = 0.01;
        struct hp_table *t = run(&o);
        char what[64];
        snprintf(what, sizeof what, "case %zu", k);
        cr_assert(t->n_rows == 0 || t->values, "%s: rows but no numbers", what);
        checked += expect_texts_round_values(t, what, &rounded);
        if (cases[k].sql && strstr(cases[k].sql, "third")) {
            /* SQL reals: SQLite's 15-digit text, the double itself; an integer past 2^53: its text exact */
            cr_assert_str_eq(cell(t, 0, 1), "0.3");
            cr_assert(t->values[1] == 0.1 + 0.2, "0.1 + 0.2 carries %.17g", t->values[1]);
            cr_assert(t->values[2] == 1.0 / 3, "1.0 / 3 carries %.17g", t->values[2]);
            cr_assert_str_eq(cell(t, 0, 4), "9007199254740993");
        }
        hp_table_free(t);
    }
    cr_assert_gt(checked, 200, "only %d numeric cells checked", checked);
    cr_assert_gt(rounded, 50, "only %d of %d numbers are more than their text shows", rounded, checked);
}

/* Field number field (from 0) of the CSV line that holds tag, into out. */
static const char *csv_field(const char *csv, const char *tag, int field, char *out, size_t n)
{
    const char *line = strstr(csv, tag);
    cr_assert_not_null(line, "no row '%s' in %s", tag, csv);
    while (line > csv && line[-1] != '\n')
        line--;
    for (int f = 0; f < field; f++) {
        line = strchr(line, ',');
        cr_assert(line && line[1] != '\n', "row '%s' has no field %d: %s", tag, field, csv);
        line++;
    }
    size_t i = 0;
    while (line[i] && line[i] != ',' && line[i] != '\n' && i + 1 < n)
        i++;
    memcpy(out, line, i);
    out[i] = 0;
    return out;
}

/* A number no 6 digits show, stored as a result's loss: csv and json print it so that strtod reads back the very
 * double, the aligned table its rounding; the effect (loss minus the baseline's) likewise. */
Test(query, csv_and_json_round_trip_full_precision)
{
    const double loss = 1.8543300000123457;
    sqlite3 *db = db_build();
    char sql[512];
    snprintf(sql, sizeof sql, "UPDATE results SET loss = %.17g WHERE variant_id = (SELECT variant_id FROM sweep_jobs "
             "WHERE sweep_id = 2 AND study = 'iterative' AND label = 'step 2')", loss);
    exec(db, sql);
    cr_assert_eq(sqlite3_changes(db), 1);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT r.loss FROM results r JOIN sweep_jobs j USING (variant_id) "
                                        "WHERE j.sweep_id = 2 AND j.label = 'baseline'", -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    const double base = sqlite3_column_double(st, 0), effect = loss - base;
    sqlite3_finalize(st);
    sqlite3_close(db);
    char f6[32], args[512], out[1 << 16], errs[4096], field[64];
    snprintf(f6, sizeof f6, "%.6g", effect);
    cr_assert(strtod(f6, NULL) != effect, "the effect %.17g must not fit 6 digits", effect);

    snprintf(args, sizeof args, "query curve --db '%s' --sweep 2 --study iterative --format csv", g_db);
    cr_assert_eq(tu_headprune(NULL, args, g_dir, out, sizeof out, errs, sizeof errs), 0, "%s", errs);
    cr_assert(strncmp(out, "study,step,k,heads,pct_heads,samples,loss,ci_lo,ci_hi,effect,pruned\n", 68) == 0, "%s", out);
    cr_assert(csv_field(out, "iterative,2,", 6, field, sizeof field) && strtod(field, NULL) == loss,
              "csv loss %s, stored %.17g", field, loss);
    cr_assert_str_eq(field, "1.8543300000123457"); // the shortest text of it: 17 digits here
    cr_assert(csv_field(out, "iterative,2,", 9, field, sizeof field) && strtod(field, NULL) == effect,
              "csv effect %s, the stored loss minus the baseline's %.17g", field, effect);
    cr_assert(csv_field(out, "iterative,0,", 6, field, sizeof field) && strtod(field, NULL) == base,
              "csv baseline loss %s, stored %.17g", field, base);
    cr_assert(csv_field(out, "iterative,2,", 2, field, sizeof field) && strcmp(field, "4") == 0, "k %s", field);

    snprintf(args, sizeof args, "query curve --db '%s' --sweep 2 --study iterative --format json", g_db);
    cr_assert_eq(tu_headprune(NULL, args, g_dir, out, sizeof out, errs, sizeof errs), 0, "%s", errs);
    cJSON *j = cJSON_Parse(out), *row, *step2 = NULL;
    cJSON_ArrayForEach(row, cJSON_GetObjectItem(j, "rows"))
        if (cJSON_GetObjectItem(row, "step")->valuedouble == 2)
            step2 = row;
    cr_assert_not_null(step2, "no step 2: %s", out);
    cr_assert(cJSON_GetObjectItem(step2, "loss")->valuedouble == loss, "json loss %.17g, stored %.17g",
              cJSON_GetObjectItem(step2, "loss")->valuedouble, loss);
    cr_assert(cJSON_GetObjectItem(step2, "effect")->valuedouble == effect, "json effect %.17g, want %.17g",
              cJSON_GetObjectItem(step2, "effect")->valuedouble, effect);
    cr_assert(strstr(out, "\"loss\":\t1.8543300000123457,") && strstr(out, "\"k\":\t4,"), "%s", out);
    cJSON_Delete(j);

    /* the aligned table: as it rounds (%.6f losses, %.6g effects) */
    snprintf(args, sizeof args, "query curve --db '%s' --sweep 2 --study iterative", g_db);
    cr_assert_eq(tu_headprune(NULL, args, g_dir, out, sizeof out, errs, sizeof errs), 0, "%s", errs);
    cr_assert(strstr(out, " 1.854330 ") && strstr(out, f6) && !strstr(out, "1.85433000"), "%s", out);
}

Test(query, sql_rejects_writes_and_second_statements)
{
    build();
    struct hp_query_opts o = opts(HP_QUERY_SQL);
    const char *writes[] = {"DELETE FROM sweeps", "UPDATE meta SET value = '9'", "CREATE TABLE x(a)",
                            "INSERT INTO meta VALUES ('a', 'b')", "DROP VIEW effects"};
    for (size_t i = 0; i < sizeof writes / sizeof *writes; i++) {
        o.sql = writes[i];
        expect_fail(&o, g_db, HP_ERR_ARG, "query: not a read-only statement");
    }
    o.sql = "SELECT 1; DELETE FROM sweeps";
    expect_fail(&o, g_db, HP_ERR_ARG, "query: one statement only");
    o.sql = "SELECT 1; SELECT 2";
    expect_fail(&o, g_db, HP_ERR_ARG, "query: one statement only");
    o.sql = "ATTACH 'other.db' AS o";
    struct hp_table *t = NULL;
    struct hp_error err = {{0}};
    cr_assert_neq(hp_query(g_db, &o, &t, &err), HP_OK, "ATTACH must not run");
    cr_assert_null(t);

    // nothing was changed
    o.sql = "SELECT count(*) FROM sweeps";
    t = run(&o);
    cr_assert_str_eq(cell(t, 0, 0), "2");
    hp_table_free(t);
}

Test(query, sql_errors_are_translated)
{
    build();
    struct hp_query_opts o = opts(HP_QUERY_SQL);
    o.sql = "SELECT * FROM foo";
    struct hp_table *t = NULL;
    struct hp_error err = {{0}};
    cr_assert_eq(hp_query(g_db, &o, &t, &err), HP_ERR_SQL);
    cr_assert_str_eq(err.msg, "query: no such table: foo");
    o.sql = "SELEKT 1";
    expect_fail(&o, g_db, HP_ERR_SQL, "query: near \"SELEKT\": syntax error");
    o.sql = "  -- nothing";
    expect_fail(&o, g_db, HP_ERR_ARG, "query: empty SQL");
}

// --- reading while a sweep writes ------------------------------------------------------

Test(query, reads_a_snapshot_while_another_connection_writes)
{
    sqlite3 *w = db_build();
    exec(w, "BEGIN IMMEDIATE");
    exec(w, "INSERT INTO sweeps VALUES (3, 'k3', 2, 1, 1, 'new', 'zero', 'loss', 'c', 'u')");
    // the write lock is held: the reader neither waits nor sees the uncommitted sweep
    struct hp_query_opts o = opts(HP_QUERY_SWEEPS);
    struct hp_table *t = run(&o);
    cr_assert_eq(t->n_rows, 2);
    hp_table_free(t);
    o = opts(HP_QUERY_HEADS);
    o.top = 1;
    t = run(&o);
    cr_assert_str_eq(cell(t, 0, 1), "1.1");
    hp_table_free(t);
    exec(w, "COMMIT");
    o = opts(HP_QUERY_SWEEPS);
    t = run(&o);
    cr_assert_eq(t->n_rows, 3);
    hp_table_free(t);
    sqlite3_close(w);
}

// --- errors --------------------------------------------------------------------------

Test(query, missing_database)
{
    char path[256];
    snprintf(path, sizeof path, "%s/x.db", g_dir);
    struct hp_query_opts o = opts(HP_QUERY_SWEEPS);
    char want[300];
    snprintf(want, sizeof want, "%s: no such database", path);
    expect_fail(&o, path, HP_ERR_IO, want);
    cr_assert_neq(access(path, F_OK), 0, "the query must not create the file");
}

Test(query, not_a_headprune_database)
{
    FILE *f = fopen(g_db, "w");
    cr_assert_not_null(f);
    fputs("this is a text file, not SQLite, and it is long enough to have a header.....................\n", f);
    fclose(f);
    struct hp_query_opts o = opts(HP_QUERY_SWEEPS);
    char want[300];
    snprintf(want, sizeof want, "%s: not a headprune database", g_db);
    expect_fail(&o, g_db, HP_ERR_FORMAT, want);

    // an SQLite file, but not ours
    remove(g_db);
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(g_db, &db), SQLITE_OK);
    exec(db, "CREATE TABLE t(a)");
    sqlite3_close(db);
    snprintf(want, sizeof want, "%s: not a headprune database (no meta table)", g_db);
    expect_fail(&o, g_db, HP_ERR_FORMAT, want);
    o = opts(HP_QUERY_SQL);
    o.sql = "SELECT 1";
    expect_fail(&o, g_db, HP_ERR_FORMAT, want);
}

Test(query, newer_schema_is_refused)
{
    char newer[16];
    snprintf(newer, sizeof newer, "%d", HP_SCHEMA_VERSION + 1);
    sqlite3_close(db_create(newer));
    struct hp_query_opts o = opts(HP_QUERY_SWEEPS);
    char want[300];
    snprintf(want, sizeof want, "%s: written by a newer headprune (schema %d; this one reads %d", g_db,
             HP_SCHEMA_VERSION + 1, HP_SCHEMA_VERSION);
    expect_fail(&o, g_db, HP_ERR_UNSUPPORTED, want);
}

Test(query, empty_database_lists_no_sweeps_but_has_none_to_query)
{
    sqlite3_close(db_create("1"));
    struct hp_query_opts o = opts(HP_QUERY_SWEEPS);
    struct hp_table *t = run(&o);
    cr_assert_eq(t->n_rows, 0);
    cr_assert_eq(t->n_cols, 10);
    hp_table_free(t);
    o = opts(HP_QUERY_HEADS);
    expect_fail(&o, g_db, HP_ERR_ARG, "no sweeps yet (run `headprune run` first)");
}

Test(query, unknown_sweep_id)
{
    build();
    enum hp_query_kind kinds[] = {HP_QUERY_SWEEPS, HP_QUERY_HEADS,  HP_QUERY_CURVE,  HP_QUERY_REDUNDANCY,
                                  HP_QUERY_PAIRS,  HP_QUERY_SETS,   HP_QUERY_COMPARE};
    char want[300];
    snprintf(want, sizeof want, "%s: no sweep 9 (", g_db);
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        struct hp_query_opts o = opts(kinds[i]);
        o.sweep_id = 9;
        expect_fail(&o, g_db, HP_ERR_ARG, want);
    }
    struct hp_query_opts o = opts(HP_QUERY_COMPARE); // B's sweep
    o.sweep_id = 2;
    o.sweep_id2 = 9;
    expect_fail(&o, g_db, HP_ERR_ARG, want);
}

Test(query, studies_the_sweep_lacks_are_named_with_a_sweep_that_has_them)
{
    build();
    struct hp_query_opts o = opts(HP_QUERY_PAIRS);
    o.sweep_id = 1;
    struct hp_table *t = NULL;
    struct hp_error err = {{0}};
    cr_assert_eq(hp_query(g_db, &o, &t, &err), HP_ERR_ARG);
    char want[300];
    snprintf(want, sizeof want,
             "%s: sweep 1 has no single-unit results for the units of its pairs study (sweep 2 does: use --sweep 2)",
             g_db);
    cr_assert_str_eq(err.msg, want);

    o.kind = HP_QUERY_HEADS;
    expect_fail(&o, g_db, HP_ERR_ARG, "sweep 1 has no single study (sweep 2 does: use --sweep 2)");
    o.kind = HP_QUERY_CURVE;
    expect_fail(&o, g_db, HP_ERR_ARG, "sweep 1 has no iterative, random or gates study (sweep 2 does: use --sweep 2)");
    o.kind = HP_QUERY_REDUNDANCY;
    expect_fail(&o, g_db, HP_ERR_ARG, "sweep 1 has no single, only or layer study (sweep 2 does: use --sweep 2)");

    // the newest (2) lacks what the earlier sweep 1 has
    o = opts(HP_QUERY_SETS);
    snprintf(want, sizeof want, "%s: sweep 2 (the newest) has no explicit study (sweep 1 does: use --sweep 1)", g_db);
    cr_assert_eq(hp_query(g_db, &o, &t, &err), HP_ERR_ARG);
    cr_assert_str_eq(err.msg, want);
}

Test(query, a_newest_sweep_lacking_a_study_names_the_earlier_one)
{
    sqlite3 *db = db_build();
    // sweep 3, the newest: a baseline and nothing else
    exec(db, "INSERT INTO sweeps VALUES (3, 'k3', 2, 1, 1, 'bare', 'zero', 'loss', 'c', 'u')");
    job(db, 3, 0, 1, "baseline", "baseline", 0, "baseline", -1, -1, -1, 0, 0, 0);
    sqlite3_close(db);
    const enum hp_query_kind kinds[] = {HP_QUERY_HEADS, HP_QUERY_CURVE, HP_QUERY_REDUNDANCY, HP_QUERY_PAIRS,
                                        HP_QUERY_SETS, HP_QUERY_HEADS};
    const char *said[] = {"sweep 3 (the newest) has no single study (sweep 2 does: use --sweep 2)",
                          "sweep 3 (the newest) has no iterative, random or gates study (sweep 2 does: use --sweep 2)",
                          "sweep 3 (the newest) has no single, only or layer study (sweep 2 does: use --sweep 2)",
                          "sweep 3 (the newest) has no pairs study (sweep 2 does: use --sweep 2)",
                          "sweep 3 (the newest) has no explicit study (sweep 1 does: use --sweep 1)",
                          "sweep 3 (the newest) has no single study 'kvsingle' (sweep 2 does: use --sweep 2)"};
    for (int i = 0; i < 6; i++) {
        struct hp_query_opts o = opts(kinds[i]);
        if (i == 5)
            o.study = "kvsingle";
        char want[400];
        snprintf(want, sizeof want, "%s: %s", g_db, said[i]);
        struct hp_table *t = NULL;
        struct hp_error err = {{0}};
        cr_assert_eq(hp_query(g_db, &o, &t, &err), HP_ERR_ARG, "%s", err.msg);
        cr_assert_str_eq(err.msg, want);
    }
    // a study of that name in another sweep, while this one has others
    struct hp_query_opts o = opts(HP_QUERY_SETS);
    o.sweep_id = 2;
    o.study = "sets";
    expect_fail(&o, g_db, HP_ERR_ARG, "sweep 2 has no explicit study 'sets' (sweep 1 does: use --sweep 1)");
    o = opts(HP_QUERY_HEADS);
    o.sweep_id = 2;
    o.study = "nope";
    expect_fail(&o, g_db, HP_ERR_ARG, "sweep 2 has no single study 'nope' (its single studies: single, kvsingle)");
    o = opts(HP_QUERY_CURVE);
    o.study = "nope";
    o.sweep_id = 2;
    expect_fail(&o, g_db, HP_ERR_ARG,
                "sweep 2 has no iterative, random or gates study 'nope' (its curve studies: random, iterative)");
}

Test(query, with_no_sweep_to_point_to_the_hint_says_what_to_add)
{
    sqlite3 *db = db_build();
    exec(db, "DELETE FROM sweep_jobs WHERE kind = 'single'");
    sqlite3_close(db);
    struct hp_query_opts o = opts(HP_QUERY_HEADS);
    char want[300];
    snprintf(want, sizeof want, "%s: sweep 2 (the newest) has no single study (add a 'single' study to the plan)",
             g_db);
    expect_fail(&o, g_db, HP_ERR_ARG, want);
    o = opts(HP_QUERY_SETS);
    o.sweep_id = 1;
    o.study = "nope";
    expect_fail(&o, g_db, HP_ERR_ARG, "sweep 1 has no explicit study 'nope' (its explicit studies: sets)");
    o.sweep_id = 2;
    expect_fail(&o, g_db, HP_ERR_ARG, "sweep 2 has no explicit study 'nope' (add an 'explicit' study to the plan)");
}

Test(query, bad_options)
{
    build();
    struct hp_query_opts o = opts(HP_QUERY_HEADS);
    o.metric = "ppl";
    expect_fail(&o, g_db, HP_ERR_ARG, "unknown metric 'ppl' (one of loss, kl, acc, cos, logit_diff, answer_logprob, answer_prob, answer_acc, patch_recovery)");
    o.metric = "cos"; // NULL for a causal LM
    expect_fail(&o, g_db, HP_ERR_ARG, "sweep 2 has no cos values");
    o = opts(HP_QUERY_PAIRS);
    o.top = -1;
    expect_fail(&o, g_db, HP_ERR_ARG, "top must be >= 0");
    o = opts(HP_QUERY_REDUNDANCY);
    o.eps = NAN;
    expect_fail(&o, g_db, HP_ERR_ARG, "eps");
}

Test(query, table_free_accepts_null)
{
    hp_table_free(NULL);
}

// --- readers (query.h) ----------------------------------------------------------------

static struct hp_query_reader *reader(void)
{
    struct hp_query_reader *rd = NULL;
    struct hp_error err = {{0}};
    cr_assert_eq(hp_query_reader_open(g_db, 0, &rd, &err), HP_OK, "%s", err.msg);
    return rd;
}

Test(query, a_reader_tells_what_was_run)
{
    build();
    struct hp_query_reader *rd = reader();
    struct hp_table *t = NULL;
    struct hp_error err = {{0}};
    cr_assert_eq(hp_query_run_info(rd, 0, &t, &err), HP_OK, "%s", err.msg);
    static const char *const cols[] = {"field", "value"};
    /* sweep 2 as db_build wrote it; 33 distinct variants (the baseline twice, the scored candidate once), each
     * with wall_s 0.5; the baseline's loss the token-weighted mean of 2.0 2.2 1.8 2.4 over 10 20 30 40 */
    static const char *const want[] = {
        "sweep_id", "2", "sweep_name", "full", "ablation", "mean", "metric", "loss",
        "sweep_created", "2024-02-01T00:00:00Z", "sweep_updated", "2024-02-01T01:00:00Z",
        "plan_name", "full", "plan_path", "plans/full.yaml", "plan_digest", "p2", "plan_text", "",
        "model_path", "models/tiny", "model_type", "llama", "n_layers", "2", "n_heads", "4", "n_kv_heads", "2",
        "d_head", "8", "n_params", "1000", "model_digest", "md",
        "data_path", "data/val.npy", "n_seqs", "4", "seq_len", "16", "data_digest", "dd",
        "baseline", "2.140000", "n_present", "8",
        "results", "33", "engine_versions", "0.1.0", "numeric_versions", "1", "kernels", "haswell", "hosts", "test",
        "threads_min", "1", "threads_max", "1", "first_result", "2024-01-01T00:00:00Z",
        "last_result", "2024-01-01T00:00:00Z", "wall_s", "16.5"};
    expect_table(t, 2, cols, "00", 34, want);
    // numbers where the field is one
    cr_assert_eq(t->values[2 * 12 + 1], 2.0, "n_layers as a number");
    cr_assert_eq(t->values[2 * 22 + 1], 2.14, "baseline as a number");
    hp_table_free(t);

    // sweep 1, named; an unknown sweep
    cr_assert_eq(hp_query_run_info(rd, 1, &t, &err), HP_OK, "%s", err.msg);
    cr_assert_str_eq(cell(t, 1, 1), "old");
    cr_assert_str_eq(cell(t, 3, 1), "acc");
    // the baseline's acc: (10 x 0.5 + 20 x 0.4 + 30 x 0.6 + 40 x 0.45) / 100
    cr_assert_str_eq(cell(t, 22, 1), "0.490000");
    hp_table_free(t);
    t = (struct hp_table *)1;
    cr_assert_eq(hp_query_run_info(rd, 9, &t, &err), HP_ERR_ARG);
    cr_assert_null(t);
    cr_assert(strstr(err.msg, "no sweep 9"), "%s", err.msg);
    hp_query_reader_close(rd);
}

Test(query, a_reader_lists_a_sweeps_studies_in_plan_order)
{
    build();
    struct hp_query_reader *rd = reader();
    struct hp_table *t = NULL;
    struct hp_error err = {{0}};
    cr_assert_eq(hp_query_studies(rd, 2, &t, &err), HP_OK, "%s", err.msg);
    static const char *const cols[] = {"study", "kind", "kv", "jobs", "rank"};
    static const char *const want[] = {
        "baseline", "baseline", "0", "1", "",      "single",    "single",    "0", "8", "",
        "kvsingle", "single",   "1", "2", "",      "only",      "only",      "0", "8", "",
        "layer",    "layer",    "0", "2", "",      "random",    "random",    "0", "4", "",
        "pairs",    "pairs",    "0", "5", "",      "iterative", "iterative", "0", "3", "exact"};
    expect_table(t, 5, cols, "00110", 8, want);
    hp_table_free(t);
    cr_assert_eq(hp_query_studies(rd, 1, &t, &err), HP_OK, "%s", err.msg);
    static const char *const want1[] = {"baseline", "baseline", "0", "1", "", "pairs", "pairs", "0", "1", "",
                                        "sets",     "explicit", "0", "2", ""};
    expect_table(t, 5, cols, "00110", 3, want1);
    hp_table_free(t);

    // an iterative study that stored gradient scores is gradient-ranked; gradient studies come last
    hp_query_reader_close(rd);
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(g_db, &db), SQLITE_OK);
    exec(db, "INSERT INTO gradients VALUES (1, 'g', 1, 1, 'zero', '', 2, 4, 4, 2.0, x'', x'', x'', 0.1, '0.1.0', 1, "
             "'test', 1, 'haswell', '2024-01-01T00:00:00Z', 0);"
             "INSERT INTO unit_scores VALUES (2, 'iterative', 'iterative', 0, 1, 0, 0, '0.0', 1, 1, 'layer', 1, NULL, NULL),"
             "(2, 'imp', 'importance', 0, 0, 0, 0, '0.0', 1, 1, 'layer', 1, NULL, ''),"
             "(2, 'imp', 'importance', 0, 0, 0, 1, '0.1', 1, 1, 'layer', 1, NULL, '')");
    sqlite3_close(db);
    rd = reader();
    cr_assert_eq(hp_query_studies(rd, 2, &t, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(t->n_rows, 9);
    cr_assert_str_eq(cell(t, 7, 4), "gradient");
    cr_assert_str_eq(cell(t, 8, 0), "imp");
    cr_assert_str_eq(cell(t, 8, 1), "importance");
    cr_assert_str_eq(cell(t, 8, 3), "2");
    hp_table_free(t);
    hp_query_reader_close(rd);
    // one that stored a single estimate (rank: estimate), without a normalize, is estimate-ranked
    cr_assert_eq(sqlite3_open(g_db, &db), SQLITE_OK);
    exec(db, "UPDATE unit_scores SET normalize = NULL WHERE kind = 'iterative'");
    sqlite3_close(db);
    rd = reader();
    cr_assert_eq(hp_query_studies(rd, 2, &t, &err), HP_OK, "%s", err.msg);
    cr_assert_str_eq(cell(t, 7, 0), "iterative");
    cr_assert_str_eq(cell(t, 7, 4), "estimate");
    hp_table_free(t);
    hp_query_reader_close(rd);
}

Test(query, a_reader_sees_one_snapshot)
{
    build();
    struct hp_query_reader *rd = reader();
    struct hp_table *t = NULL;
    struct hp_error err = {{0}};
    cr_assert_eq(hp_query_run_info(rd, 0, &t, &err), HP_OK, "%s", err.msg);
    cr_assert_str_eq(cell(t, 0, 1), "2");
    hp_table_free(t);
    // another connection adds a newer sweep (sweep 1's jobs again) while the reader is open
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(g_db, &db), SQLITE_OK);
    exec(db, "INSERT INTO sweeps VALUES (3, 'k3', 1, 1, 1, 'new', 'zero', 'loss', '2024-03-01T00:00:00Z', "
             "'2024-03-01T00:00:00Z');"
             "INSERT INTO sweep_jobs SELECT 3, ord, variant_id, study, kind, kv, label, layer, unit, unit2, step, "
             "sample, k FROM sweep_jobs WHERE sweep_id = 1");
    sqlite3_close(db);
    struct hp_query_opts o = opts(HP_QUERY_HEADS);
    cr_assert_eq(hp_query_read(rd, &o, &t, &err), HP_OK, "%s", err.msg);
    cr_assert(strstr(t->note, "sweep 2,"), "the newest sweep of the reader's snapshot is 2: %s", t->note);
    hp_table_free(t);
    cr_assert_eq(hp_query_run_info(rd, 0, &t, &err), HP_OK, "%s", err.msg);
    cr_assert_str_eq(cell(t, 0, 1), "2");
    hp_table_free(t);
    hp_query_reader_close(rd);
    // a new reader sees it
    rd = reader();
    cr_assert_eq(hp_query_run_info(rd, 0, &t, &err), HP_OK, "%s", err.msg);
    cr_assert_str_eq(cell(t, 0, 1), "3");
    hp_table_free(t);
    hp_query_reader_close(rd);
    hp_query_reader_close(NULL);
}

/*
 * The script that computed the expected cells (python3; stdlib + mpmath):

from statistics import mean, stdev
from math import sqrt, atan, pi
import mpmath as mp

N = [10, 20, 30, 40]                 # tokens per sequence
BL = [2.0, 2.2, 1.8, 2.4]            # baseline loss per sequence
BA = [0.5, 0.4, 0.6, 0.45]           # baseline acc per sequence
def tw(x): return sum(n * v for n, v in zip(N, x)) / sum(N)

def tcdf(t, nu):                     # Student t CDF via the regularised incomplete beta
    x = nu / (nu + t * t)
    half = mp.betainc(nu / 2, 0.5, 0, x, regularized=True) / 2
    return 1 - half if t > 0 else half
def tq(p, nu): return float(mp.findroot(lambda t: tcdf(t, nu) - p, 2.0))
T3, T2 = tq(0.975, 3), tq(0.975, 2)

single = {(0,0): [0.10, 0.20, 0.15, 0.05], (0,1): [0.001, -0.002, 0.003, 0.000],
          (0,2): [0.50, 0.40, 0.60, 0.45], (0,3): [0.004, 0.002, 0.001, 0.003],
          (1,0): [0.02, 0.03, 0.01, 0.04], (1,1): [1.0, 0.8, 1.2, 0.9],
          (1,2): [-0.01, 0.00, -0.02, 0.01], (1,3): [0.30, 0.25, 0.35, 0.20]}
kvsingle = {(1,0): [1.2, 1.0, 1.3, 1.1], (1,1): [0.4, 0.3, 0.5, 0.35]}
def p3(t):                           # two-sided p, 3 df, closed form
    t = abs(t); u = t / sqrt(3)
    return 1 - 2 / pi * (atan(u) + u / (1 + u * u))
def head(metric, d):
    if metric == 'loss': ds = d; eff = tw(d); val = tw([b + x for b, x in zip(BL, d)])
    if metric == 'acc':  ds = [x / 4 for x in d]; eff = tw(ds); val = tw([b - x / 4 for b, x in zip(BA, d)])
    if metric == 'kl':   ds = [abs(x) / 2 for x in d]; eff = tw(ds); val = eff
    m, s = mean(ds), stdev(ds)
    h = T3 * s / 2
    return val, eff, m - h, m + h, p3(m / (s / 2))
for metric in ['loss', 'acc', 'kl']:
    for study, units, lab in (("single", single, "%d.%d"), ("kvsingle", kvsingle, "kv:%d.%d")):
        rows = [(study, lab % (l, u), l, u) + head(metric, d) for (l, u), d in units.items()]
        rows.sort(key=lambda r: -r[5])
        print("heads", metric, study)
        for r in rows:
            print('    "%s", "%s", "%d", "%d", "%.9f", "%.9g", "%.9g", "%.9g", "4", "%.3g",' % r)

print("sets (sweep 1, its metric acc)")
sets = {"early": ([1.6,1.5,1.7,1.4], 4, "0.*"), "mix": ([0.01,0.0,0.02,0.005], 2, "0.1,1.2")}
rows = [("sets", n, k) + head('acc', d) + (mask,) for n, (d, k, mask) in sets.items()]
rows.sort(key=lambda r: -r[4])
for r in rows: print('    "%s", "%s", "%d", "%.9f", "%.9g", "%.9g", "%.9g", "4", "%.3g", "%s",' % r)

only = {(0,0): [0.9,0.8,1.0,0.7], (0,1): [0.6,0.5,0.7,0.4], (0,2): [0.3,0.2,0.4,0.25], (0,3): [1.5,1.4,1.6,1.3],
        (1,0): [2.0,1.8,2.2,1.9], (1,1): [0.8,0.9,0.7,0.6], (1,2): [1.1,1.0,1.2,0.9], (1,3): [0.95,0.85,1.05,0.75]}
layer = {0: [1.6,1.5,1.7,1.4], 1: [2.5,2.4,2.6,2.3]}
for eps in (0.01, 0.03):
    print("redundancy", eps)
    for l in (0, 1):
        e = [tw(d) for (ll, u), d in single.items() if ll == l]
        oe = {u: tw(d) for (ll, u), d in only.items() if ll == l}
        ub = min(oe, key=oe.get)
        print('    "%d", "4", "%d", "%.9g", "%.9g", "%.9g", "%d.%d", "%.9g",'
              % (l, sum(x < eps for x in e), mean(e), max(e), oe[ub], l, ub, tw(layer[l])))

pairs = {(0,0,1): [0.30,0.40,0.35,0.25], (0,0,2): [0.55,0.60,0.70,0.40], (0,1,3): [0.004,0.002,0.003,0.001],
         (0,2,3): [0.60,0.50,0.70,0.50], (1,1,3): [1.1,1.0,1.3,1.0]}
rows = []
for (l, a, b), d in pairs.items():
    ab, ea, eb = tw(d), tw(single[(l,a)]), tw(single[(l,b)])
    rows.append(("pairs", f"{l}.{a}+{l}.{b}", l, a, b, ab, ea, eb, ab - ea - eb))
rows.sort(key=lambda r: -r[8])
print("pairs")
for r in rows: print('    "%s", "%s", "%d", "%d", "%d", "%.9g", "%.9g", "%.9g", "%.9g",' % r)
T = {3: T3, 2: T2}
def p2(t):                           # two-sided p, 2 df, closed form
    t = abs(t); return 1 - t / sqrt(2 + t * t)
P = {3: p3, 2: p2}
def ci(I):                           # I: per-sequence interactions (loss: a sequence's effect is its d)
    n = len(I)
    if n < 2: return ('""', '""', '"%d"' % n, '""')
    m, s = mean(I), stdev(I); se = s / sqrt(n)
    return tuple('"%.9g"' % x for x in (m - T[n-1] * se, m + T[n-1] * se)) + ('"%d"' % n, '"%.3g"' % P[n-1](m / se))
def pair_cis(missing):               # missing: (l, u, seq) of singles, (l, a, b, seq) of pairs
    for (l, a, b), d in pairs.items():
        seqs = [s for s in range(4) if not {(l,a,b,s), (l,a,s), (l,b,s)} & missing]
        print(f"    {l}.{a}+{l}.{b}:", ", ".join(ci([d[s] - single[(l,a)][s] - single[(l,b)][s] for s in seqs])))
print("pairs, every sequence"); pair_cis(set())
print("pairs, missing"); pair_cis({(0,1,3)} | {(0,2,3,s) for s in range(3)} | {(1,1,3,s) for s in range(4)})

print("curve")
it = {0: ([0,0,0,0], 0, 0, ""), 1: ([0.01,0.0,0.02,0.005], 2, 2, "0.1,1.2"),
      2: ([0.05,0.04,0.06,0.03], 4, 4, "0.1,0.3,1.0,1.2")}
rnd = {2: [[0.3,0.2,0.4,0.3],[0.6,0.5,0.7,0.6],[0.1,0.1,0.2,0.0]], 4: [[1.0,0.9,1.1,1.2]]}
B = tw(BL)
print('    "random", "", "0", "0", "0.00", "1", "%.9f", "", "", "0", "",' % B)
for k, ss in rnd.items():
    v = [tw([b + x for b, x in zip(BL, d)]) for d in ss]
    m = mean(v)
    if len(v) > 1:
        h = T2 * stdev(v) / sqrt(len(v)); lo, hi = "%.9f" % (m - h), "%.9f" % (m + h)
    else:
        lo = hi = ""
    print('    "random", "", "%d", "%d", "%.2f", "%d", "%.9f", "%s", "%s", "%.9g", "",'
          % (k, k, 100*k/8, len(v), m, lo, hi, m - B))
for s, (d, k, na, mask) in it.items():
    v = tw([b + x for b, x in zip(BL, d)])
    print('    "iterative", "%d", "%d", "%d", "%.2f", "", "%.9f", "", "", "%.9g", "%s",'
          % (s, k, na, 100*na/8, v, v - B, mask))
 */

// --- the database is input: its numbers, its SQL, its name ----------------------------

static void expect_fail_fast(enum hp_query_kind kind, enum hp_status want, const char *msg_part)
{
    struct hp_query_opts o = opts(kind);
    o.sweep_id = 2;
    time_t t0 = time(NULL);
    expect_fail(&o, g_db, want, msg_part);
    cr_assert_lt(time(NULL) - t0, 5, "took %lld s", (long long)(time(NULL) - t0));
}

Test(query, forged_model_shape_is_refused_before_allocating)
{
    build();
    // 1e8 layers made `redundancy` grow to 21 GB; 2e9 * n_heads overflowed an int
    const char *bad[] = {"n_layers = 100000000", "n_layers = 2000000000", "n_layers = 10000000000", "n_layers = -3",
                         "n_heads = 4294967300", "n_layers = 60000, n_heads = 60000"};
    const char *said[] = {"models.n_layers = 100000000 ", "models.n_layers = 2000000000 ",
                          "models.n_layers = 10000000000 ", "models.n_layers = -3 ", "models.n_heads = 4294967300 ",
                          "models.n_heads = 60000 "};
    enum hp_query_kind kinds[] = {HP_QUERY_REDUNDANCY, HP_QUERY_CURVE, HP_QUERY_HEADS, HP_QUERY_PAIRS,
                                  HP_QUERY_SETS,       HP_QUERY_COMPARE};
    for (int i = 0; i < 6; i++) {
        sqlite3 *db;
        cr_assert_eq(sqlite3_open(g_db, &db), SQLITE_OK);
        char sql[128];
        snprintf(sql, sizeof sql, "UPDATE models SET n_layers = 2, n_heads = 4; UPDATE models SET %s", bad[i]);
        exec(db, sql);
        sqlite3_close(db);
        char want[300];
        snprintf(want, sizeof want, "%s: %s", g_db, said[i]);
        for (int k = 0; k < 6; k++)
            expect_fail_fast(kinds[k], HP_ERR_FORMAT, want);
    }
}

Test(query, forged_layer_or_unit_of_a_job_is_refused)
{
    const char *bad[] = {"layer = 2", "layer = -1", "unit = 4", "layer = 3000000000"};
    const char *said[] = {"sweep_jobs.layer = 2 ", "sweep_jobs.layer = -1 ", "sweep_jobs.unit = 4 ",
                          "sweep_jobs.layer = 3000000000 "};
    for (int i = 0; i < 4; i++) {
        remove(g_db); // afresh each round
        build();
        sqlite3 *db;
        cr_assert_eq(sqlite3_open(g_db, &db), SQLITE_OK);
        char sql[160];
        snprintf(sql, sizeof sql,
                 "UPDATE sweep_jobs SET %s WHERE sweep_id = 2 AND ord = (SELECT min(ord) FROM sweep_jobs "
                 "WHERE sweep_id = 2 AND kind = 'single')", bad[i]);
        exec(db, sql);
        sqlite3_close(db);
        char want[300];
        snprintf(want, sizeof want, "%s: %s", g_db, said[i]);
        expect_fail_fast(HP_QUERY_HEADS, HP_ERR_FORMAT, want);
        expect_fail_fast(HP_QUERY_REDUNDANCY, HP_ERR_FORMAT, want);
        expect_fail_fast(HP_QUERY_PAIRS, HP_ERR_FORMAT, want);
    }
}

Test(query, sql_reaches_no_pointers_and_loads_no_code)
{
    build();
    struct hp_query_opts o = opts(HP_QUERY_SQL);
    // with the FTS3 tokenizer interface on, this returns the address of a C struct
    o.sql = "SELECT fts3_tokenizer('simple')";
    struct hp_table *t = NULL;
    struct hp_error err = {{0}};
    if (hp_query(g_db, &o, &t, &err) == HP_OK) {
        cr_assert_eq(t->n_rows, 1);
        cr_assert_str_empty(cell(t, 0, 0), "fts3_tokenizer leaked a pointer: %s", cell(t, 0, 0));
        hp_table_free(t);
    }
    o.sql = "SELECT load_extension('/nonexistent/libx')";
    expect_fail(&o, g_db, HP_ERR_SQL, "not authorized");
}

Test(query, a_runaway_sql_result_stops_with_a_message)
{
    build();
    struct hp_query_opts o = opts(HP_QUERY_SQL);
    o.sql = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c";
    expect_fail(&o, g_db, HP_ERR_ARG, "result rows (add a LIMIT");
    o.sql = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x, zeroblob(100000) FROM c";
    expect_fail(&o, g_db, HP_ERR_ARG, "MB (add a LIMIT");
}

/* SQL that would run for ever (one row at the end of an endless count) stops at the time limit, in bounded time */
Test(query, sql_that_never_ends_stops_at_the_time_limit)
{
    build();
    struct hp_query_opts o = opts(HP_QUERY_SQL);
    o.sql = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c";
    o.timeout_s = 1;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    expect_fail(&o, g_db, HP_ERR_SQL, "reading stopped at its time limit");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    cr_expect(secs >= 0.9 && secs < 5, "stopped after %.2f s with a limit of 1 s", secs);
}

/*
 * A hostile file: a table of the schema replaced by a view whose rows never
 * end (the built-in queries read the tables). Refused at opening, naming the
 * table, before any query runs; and were it not, the time limit would stop it.
 */
Test(query, a_table_that_is_a_view_is_refused)
{
    build();
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(g_db, &db), SQLITE_OK);
    exec(db, "PRAGMA foreign_keys = OFF; ALTER TABLE sweep_jobs RENAME TO sweep_jobs_real;"
             "CREATE VIEW sweep_jobs AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
             "SELECT s.* FROM sweep_jobs_real s, c WHERE c.x < 0");
    sqlite3_close(db);
    const enum hp_query_kind kinds[] = {HP_QUERY_SWEEPS, HP_QUERY_CURVE, HP_QUERY_HEADS, HP_QUERY_SQL};
    for (int i = 0; i < 4; i++) {
        struct hp_query_opts o = opts(kinds[i]);
        o.sql = "SELECT count(*) FROM sweep_jobs";
        time_t t0 = time(NULL);
        expect_fail(&o, g_db, HP_ERR_FORMAT, "not a headprune database (sweep_jobs is a view, not a table)");
        cr_assert_lt(time(NULL) - t0, 5);
    }
}

Test(query, a_database_being_created_has_no_results_yet)
{
    // what a reader sees in the instant `headprune run` has created the file but not its schema
    FILE *f = fopen(g_db, "w");
    cr_assert_not_null(f);
    fclose(f);
    struct hp_query_opts o = opts(HP_QUERY_SWEEPS);
    char want[300];
    snprintf(want, sizeof want, "%s: has no results yet", g_db);
    expect_fail(&o, g_db, HP_ERR_ARG, want);
}

Test(query, names_are_files_not_uris)
{
    build();
    cr_assert_eq(chdir(g_dir), 0);
    struct hp_query_opts o = opts(HP_QUERY_SWEEPS);
    // each would open an empty in-memory or temporary database, or results.db by URI
    const char *names[] = {":memory:", "file:results.db", "file::memory:", "file:results.db?mode=memory"};
    for (int i = 0; i < 4; i++)
        expect_fail(&o, names[i], HP_ERR_IO, "no such database (check the path; `headprune run` creates it)");
    expect_fail(&o, "", HP_ERR_ARG, "database path is empty");
    expect_fail(&o, "/dev/null", HP_ERR_IO, "not a regular file");
    struct hp_table *t = NULL;
    struct hp_error err = {{0}};
    cr_assert_eq(hp_query("results.db", &o, &t, &err), HP_OK, "%s", err.msg); // a plain relative name still works
    hp_table_free(t);
}

// --- head roles ----------------------------------------------------------------------------

/*
 * A roles run linked to sweep 2 (which has a single study) as study "roles"
 * and to sweep 1 (which has none) as "roles-old": seven heads (1.2 has no
 * row, as a pruned head), 0.1's duplicate_token undefined (NULL), rare_token
 * NULL throughout (a decoder). The expected cells, the rho row included, come
 * from the script below (pandas: Spearman's rho as Pearson's r of average ranks).
 */
static void roles_build(void)
{
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(g_db, &db), SQLITE_OK);
    exec(db, "INSERT INTO role_runs VALUES (1, 'rk', 1, 1, 1, 16, 32, 491495646579, 60, 60, 20, 60, 512, 1.5, "
             "'0.1.0', 3, 'test', 1, 'haswell', '2024-02-01T00:00:00Z', NULL, NULL);"
             "INSERT INTO head_roles VALUES "
             "(1, 0, 0, 0.10, 0.20, 0.05, 1, 0.05, 0.30, -1, 0.10, 3.0, NULL, NULL),"
             "(1, 0, 1, 0.90, NULL, 0.01, 0, 0.02, 0.05, -1, 0.90, 0.5, NULL, NULL),"
             "(1, 0, 2, 0.10, 0.40, 0.60, 1, 0.60, 0.20, 0, 0.25, 2.0, NULL, NULL),"
             "(1, 0, 3, 0.20, 0.10, 0.02, -2, 0.03, 0.70, -3, 0.05, 1.0, NULL, NULL),"
             "(1, 1, 0, 0.05, 0.30, 0.03, 2, 0.04, 0.10, 0, 0.30, 2.5, NULL, NULL),"
             "(1, 1, 1, 0.30, 0.50, 0.80, 1, 0.80, 0.15, -1, 0.35, 1.5, NULL, NULL),"
             "(1, 1, 3, 0.40, 0.60, 0.70, 1, 0.70, 0.25, -2, 0.40, 2.2, NULL, NULL);"
             "INSERT INTO sweep_roles VALUES (2, 'roles', 1), (1, 'roles-old', 1)");
    sqlite3_close(db);
}

static const char *const ROLES_COLS[] = {"layer", "head", "label", "prev_token", "duplicate_token", "induction",
                                         "induction_offset", "induction_mass", "first_token", "dominant_offset",
                                         "dominant_mass", "entropy", "rare_token", "sep_token", "effect"};
/* induction offsets whose mass is below HP_ROLES_OFFSET_MIN_MASS (0.05: heads 0.1, 0.3, 1.0) are empty */
static const char *const ROLES[] = {
    "0", "0", "0.0", "0.100000", "0.200000", "0.050000", "1", "0.050000", "0.300000", "-1", "0.100000", "3.000000", "", "", "0.115",
    "0", "1", "0.1", "0.900000", "", "0.010000", "", "0.020000", "0.050000", "-1", "0.900000", "0.500000", "", "", "0.0006",
    "0", "2", "0.2", "0.100000", "0.400000", "0.600000", "1", "0.600000", "0.200000", "0", "0.250000", "2.000000", "", "", "0.49",
    "0", "3", "0.3", "0.200000", "0.100000", "0.020000", "", "0.030000", "0.700000", "-3", "0.050000", "1.000000", "", "", "0.0023",
    "1", "0", "1.0", "0.050000", "0.300000", "0.030000", "", "0.040000", "0.100000", "0", "0.300000", "2.500000", "", "", "0.027",
    "1", "1", "1.1", "0.300000", "0.500000", "0.800000", "1", "0.800000", "0.150000", "-1", "0.350000", "1.500000", "", "", "0.98",
    "1", "3", "1.3", "0.400000", "0.600000", "0.700000", "1", "0.700000", "0.250000", "-2", "0.400000", "2.200000", "", "", "0.265",
    "", "", "rho", "-0.144149994", "0.771428571", "0.964285714", "", "0.964285714", "0.107142857", "", "1.38777878e-17", "0.321428571", "", "", "",
};

Test(query, roles_beside_single_effects_with_rank_correlations)
{
    build();
    roles_build();
    struct hp_query_opts o = opts(HP_QUERY_ROLES); // the newest sweep (2), its metric (loss)
    struct hp_table *t = run(&o);
    expect_table(t, 15, ROLES_COLS, "110111111111111", 8, ROLES);
    cr_assert_eq(t->n_summary, 1, "the rho row is a summary, no head");
    cr_assert(strstr(t->note, "roles study roles (probe 16 x 2 x 32"), "note: %s", t->note);
    cr_assert(strstr(t->note, "(induction_offset: where induction_mass < 0.05, noise)"), "note: %s", t->note);
    cr_assert(strstr(t->note, "single study single, effect = loss - baseline loss"), "note: %s", t->note);
    cr_assert(strstr(t->note, "over the 7 heads with both"), "note: %s", t->note);
    hp_table_free(t);
    /* named, the same */
    o.study = "roles";
    t = run(&o);
    expect_table(t, 15, ROLES_COLS, "110111111111111", 8, ROLES);
    hp_table_free(t);
    /* a sweep without a single study: the scores alone, no effects, no rho row */
    o = opts(HP_QUERY_ROLES);
    o.sweep_id = 1;
    t = run(&o);
    cr_assert_eq(t->n_rows, 7);
    cr_assert_eq(t->n_summary, 0);
    for (int r = 0; r < 7; r++) {
        cr_assert_str_eq(cell(t, r, 14), "", "row %d has an effect", r);
        for (int c = 0; c < 14; c++)
            cr_assert_str_eq(cell(t, r, c), ROLES[r * 15 + c], "row %d column %s", r, ROLES_COLS[c]);
    }
    cr_assert(strstr(t->note, "roles study roles-old") && strstr(t->note, "no single study"), "note: %s", t->note);
    hp_table_free(t);
    /* a database from before schema 8, read as it is (never upgraded by a query): no sep_token, the rest the same */
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(g_db, &db), SQLITE_OK);
    exec(db, "ALTER TABLE head_roles DROP COLUMN sep_token; ALTER TABLE role_runs DROP COLUMN n_sep; "
             "ALTER TABLE role_runs DROP COLUMN sep_id; UPDATE meta SET value = '7' WHERE key = 'schema_version'");
    sqlite3_close(db);
    o = opts(HP_QUERY_ROLES);
    t = run(&o);
    expect_table(t, 15, ROLES_COLS, "110111111111111", 8, ROLES);
    hp_table_free(t);
}

Test(query, roles_that_are_not_there)
{
    build();
    struct hp_query_opts o = opts(HP_QUERY_ROLES);
    expect_fail(&o, g_db, HP_ERR_ARG, "sweep 2 (the newest) has no roles study (add a 'roles' study to the plan");
    roles_build();
    o.study = "nope";
    expect_fail(&o, g_db, HP_ERR_ARG, "sweep 2 (the newest) has no roles study 'nope' (its roles studies: roles)");
    o = opts(HP_QUERY_ROLES);
    o.top = 3;
    expect_fail(&o, g_db, HP_ERR_ARG, "--top does not apply to roles");
    /* a sweep without one names the sweep that has one */
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(g_db, &db), SQLITE_OK);
    exec(db, "DELETE FROM sweep_roles WHERE sweep_id = 2");
    sqlite3_close(db);
    o = opts(HP_QUERY_ROLES);
    expect_fail(&o, g_db, HP_ERR_ARG, "sweep 2 (the newest) has no roles study (sweep 1 does: use --sweep 1)");
    /* a database from before head roles (schema 3) */
    cr_assert_eq(sqlite3_open(g_db, &db), SQLITE_OK);
    exec(db, "DROP TABLE sweep_roles; DROP TABLE head_roles; DROP TABLE role_runs; "
             "UPDATE meta SET value = '3' WHERE key = 'schema_version'");
    sqlite3_close(db);
    expect_fail(&o, g_db, HP_ERR_ARG, "the database predates head roles");
}

/*
 * The script that computed ROLES (python3 with pandas):

import pandas as pd, math
N = [10, 20, 30, 40]
def tw(x): return sum(n * v for n, v in zip(N, x)) / sum(N)
single = {(0,0): [0.10, 0.20, 0.15, 0.05], (0,1): [0.001, -0.002, 0.003, 0.000],
          (0,2): [0.50, 0.40, 0.60, 0.45], (0,3): [0.004, 0.002, 0.001, 0.003],
          (1,0): [0.02, 0.03, 0.01, 0.04], (1,1): [1.0, 0.8, 1.2, 0.9],
          (1,2): [-0.01, 0.00, -0.02, 0.01], (1,3): [0.30, 0.25, 0.35, 0.20]}
cols = ["prev_token", "duplicate_token", "induction", "induction_offset", "induction_mass", "first_token",
        "dominant_offset", "dominant_mass", "entropy", "rare_token", "sep_token"]
N_ = None
roles = {(0,0): [0.10, 0.20, 0.05, 1, 0.05, 0.30, -1, 0.10, 3.0, N_, N_],
         (0,1): [0.90, N_, 0.01, 0, 0.02, 0.05, -1, 0.90, 0.5, N_, N_],
         (0,2): [0.10, 0.40, 0.60, 1, 0.60, 0.20, 0, 0.25, 2.0, N_, N_],
         (0,3): [0.20, 0.10, 0.02, -2, 0.03, 0.70, -3, 0.05, 1.0, N_, N_],
         (1,0): [0.05, 0.30, 0.03, 2, 0.04, 0.10, 0, 0.30, 2.5, N_, N_],
         (1,1): [0.30, 0.50, 0.80, 1, 0.80, 0.15, -1, 0.35, 1.5, N_, N_],
         (1,3): [0.40, 0.60, 0.70, 1, 0.70, 0.25, -2, 0.40, 2.2, N_, N_]}
for (l, h), v in roles.items():
    cells = [str(l), str(h), f"{l}.{h}"]
    for c, x in zip(cols, v):
        cells.append("" if x is None else (str(x) if "offset" in c else "%.6f" % x))
    cells.append("%.9g" % tw(single[(l, h)]))
    print("    " + ", ".join('"%s"' % c for c in cells) + ",")
rho = ["", "", "rho"]
for i, c in enumerate(cols):
    if "offset" in c:
        rho.append(""); continue
    pairs = [(v[i], tw(single[k])) for k, v in roles.items() if v[i] is not None]
    if len(pairs) < 2:
        rho.append(""); continue
    s = pd.Series([p[0] for p in pairs]).rank().corr(pd.Series([p[1] for p in pairs]).rank())  # Spearman
    rho.append("" if math.isnan(s) else "%.9g" % s)
rho.append("")
print("    " + ", ".join('"%s"' % c for c in rho) + ",")
 */

/* head_roles rows are input like any other: a layer the model lacks is refused, a forged offset is no UB */
Test(query, forged_roles_rows)
{
    build();
    roles_build();
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(g_db, &db), SQLITE_OK);
    exec(db, "UPDATE head_roles SET induction_offset = 1e300, dominant_offset = -1e300 WHERE layer = 0 AND head = 0");
    sqlite3_close(db);
    struct hp_query_opts o = opts(HP_QUERY_ROLES);
    struct hp_table *t = run(&o);
    cr_assert_str_eq(cell(t, 0, 6), "9223372036854775807");
    cr_assert_str_eq(cell(t, 0, 9), "-9223372036854775808");
    hp_table_free(t);
    cr_assert_eq(sqlite3_open(g_db, &db), SQLITE_OK);
    exec(db, "UPDATE head_roles SET layer = 7 WHERE layer = 1 AND head = 3");
    sqlite3_close(db);
    expect_fail(&o, g_db, HP_ERR_FORMAT, "layer = 7 in sweep 2 is out of range");
}

// --- the kinds' table ----------------------------------------------------------------------

/* The kind names among the words of s (after its last " to " or " for "): a bit per row of hp_query_kinds. */
static unsigned kinds_named(const char *s)
{
    const char *to = NULL;
    for (const char *p = s; (p = strstr(p, " to ")) != NULL; p++)
        to = p;
    for (const char *p = s; (p = strstr(p, " for ")) != NULL; p++)
        to = !to || p > to ? p : to;
    cr_assert_not_null(to, "no list of kinds in '%s'", s);
    unsigned named = 0;
    char word[32];
    for (const char *p = to; *p;) {
        size_t n = 0;
        while (*p && !(*p >= 'a' && *p <= 'z'))
            p++;
        while (((*p >= 'a' && *p <= 'z') || (*p == '-' && n > 0)) && n + 1 < sizeof word) /* self-repair */
            word[n++] = *p++;
        word[n] = '\0';
        for (int i = 0; n && i < HP_QUERY_KIND_COUNT; i++)
            named |= strcmp(word, hp_query_kinds[i].name) == 0 ? 1u << i : 0;
    }
    return named;
}

/*
 * hp_query_kinds against itself and against its check: every kind once, found by its name and by
 * its enum; each option refused, in both wordings, exactly by the kinds whose row does not take
 * it; and the message names exactly the kinds that take it (those that refuse it, for --top):
 * the wording lives beside the rule, the kinds in the rows, and they must not drift apart.
 */
Test(query, the_kind_table_and_its_one_check_agree)
{
    for (int i = 0; i < HP_QUERY_KIND_COUNT; i++) {
        const struct hp_query_kind_row *k = &hp_query_kinds[i];
        cr_assert_eq(hp_query_kind_named(k->name), k, "%s: found by name", k->name);
        cr_assert_eq(hp_query_kind_row(k->kind), k, "%s: found by kind", k->name);
        cr_assert(k->run && k->help && *k->help, "%s: a function and help", k->name);
    }
    cr_assert_null(hp_query_kind_named("frobnicate"));
    static const struct {
        unsigned bit;
        bool refusers_named; // the message names the kind that refuses the option, not those that take it
    } opts[] = {{HP_QUERY_TAKES_STUDY, false}, {HP_QUERY_TAKES_MATRIX, false}, {HP_QUERY_TAKES_GATES, false},
                {HP_QUERY_TAKES_B, false},     {HP_QUERY_TAKES_TOP, true}};
    for (size_t j = 0; j < sizeof opts / sizeof *opts; j++) {
        unsigned takers = 0;
        for (int i = 0; i < HP_QUERY_KIND_COUNT; i++)
            takers |= hp_query_kinds[i].takes & opts[j].bit ? 1u << i : 0;
        for (int i = 0; i < HP_QUERY_KIND_COUNT; i++)
            for (int cli = 0; cli < 2; cli++) {
                struct hp_query_opts o = {.kind = hp_query_kinds[i].kind};
                if (opts[j].bit == HP_QUERY_TAKES_STUDY)
                    o.study = "x";
                else if (opts[j].bit == HP_QUERY_TAKES_MATRIX)
                    o.matrix = true;
                else if (opts[j].bit == HP_QUERY_TAKES_GATES)
                    o.gates = true;
                else if (opts[j].bit == HP_QUERY_TAKES_B)
                    o.db2 = "b.db";
                else
                    o.top = 3;
                struct hp_error err = {0};
                enum hp_status s = hp_query_opts_check(&o, cli, &err);
                bool takes = takers >> i & 1;
                cr_assert_eq(s, takes ? HP_OK : HP_ERR_ARG, "%s, option %#x: %s", hp_query_kinds[i].name,
                             opts[j].bit, err.msg);
                if (!takes) {
                    unsigned want = opts[j].refusers_named ? 1u << i : takers;
                    cr_assert_eq(kinds_named(err.msg), want, "'%s' names kinds %#x, the table %#x", err.msg,
                                 kinds_named(err.msg), want);
                }
            }
    }
}
