/*
 * query_sql.c -- the questions asked of the database as it is: `sweeps` (the
 * sweeps it holds) and `sql` (one read-only statement, its result as a table).
 *
 * Invariants: sql runs one statement that sqlite3_stmt_readonly accepts, and
 * holds at most SQL_MAX_ROWS rows and SQL_MAX_BYTES bytes before printing.
 *
 * Must not: run a statement that writes, print, or exit.
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

// --- sweeps -----------------------------------------------------------------

enum hp_status hq_sweeps(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out)
{
    const long long id = opts->sweep_id;
    static const char *const cols[] = {"id", "name", "plan", "model", "data", "ablation", "metric", "jobs",
                                       "created", "updated"};
    static const bool num[] = {true, false, false, false, false, false, false, true, false, false};
    sqlite3_stmt *st;
    enum hp_status s = hq_prep(q, &st,
                            "SELECT s.id, s.name, p.path, m.path, d.path, s.ablation, s.metric, "
                            "  (SELECT count(*) FROM sweep_jobs j JOIN results r ON r.variant_id = j.variant_id "
                            "   WHERE j.sweep_id = s.id), s.created, s.updated "
                            "FROM sweeps s LEFT JOIN plans p ON p.id = s.plan_id LEFT JOIN models m ON m.id = s.model_id "
                            "LEFT JOIN datasets d ON d.id = s.dataset_id WHERE ?1 = 0 OR s.id = ?1 ORDER BY s.id");
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, id);
    struct tb b;
    hq_tb_init(&b, 10, cols, num);
    int r;
    while ((r = hq_step(q, st, &s)) == 1) {
        int row = hq_tb_row(&b);
        for (int c = 0; c < 10; c++)
            hq_tb_sql(&b, row, c, st);
    }
    sqlite3_finalize(st);
    if (r < 0) {
        hp_table_free(b.t);
        return s;
    }
    if (!b.nomem && id != 0 && b.t->n_rows == 0) {
        hp_table_free(b.t);
        return hp_fail(q->err, HP_ERR_ARG, "%s: no sweep %lld (list them with `headprune query sweeps`)", q->path, id);
    }
    return hq_tb_finish(&b, out, q->err);
}

// --- read-only SQL ----------------------------------------------------------

// Limits on what `query sql` holds before printing.
#define SQL_MAX_ROWS 1000000
#define SQL_MAX_BYTES (256 << 20)

enum hp_status hq_sql(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out)
{
    const char *sql = opts->sql;
    if (!sql)
        return hp_fail(q->err, HP_ERR_ARG, "query: no SQL given");
    sqlite3_stmt *st = NULL;
    const char *tail = NULL;
    int rc = sqlite3_prepare_v2(q->db, sql, -1, &st, &tail);
    if (rc != SQLITE_OK) {
        int code = rc & 0xff;
        if (code == SQLITE_NOTADB || code == SQLITE_BUSY || code == SQLITE_CORRUPT || code == SQLITE_INTERRUPT)
            return hq_sql_fail(q, rc);
        return hp_fail(q->err, HP_ERR_SQL, "query: %s", sqlite3_errmsg(q->db));
    }
    if (!st)
        return hp_fail(q->err, HP_ERR_ARG, "query: empty SQL (nothing to run)");
    if (tail && *tail) {
        sqlite3_stmt *more = NULL;
        rc = sqlite3_prepare_v2(q->db, tail, -1, &more, NULL);
        sqlite3_finalize(more);
        if (rc != SQLITE_OK || more) {
            sqlite3_finalize(st);
            return hp_fail(q->err, HP_ERR_ARG, "query: one statement only (remove what follows the first ';')");
        }
    }
    if (!sqlite3_stmt_readonly(st)) {
        sqlite3_finalize(st);
        return hp_fail(q->err, HP_ERR_ARG, "query: not a read-only statement (only statements that change nothing, "
                                           "such as SELECT, may run here)");
    }

    int n_cols = sqlite3_column_count(st);
    const char **cols = calloc((size_t)n_cols + 1, sizeof *cols);
    bool *num = calloc((size_t)n_cols + 1, sizeof *num);
    bool *other = calloc((size_t)n_cols + 1, sizeof *other);
    if (!cols || !num || !other) {
        free(cols), free(num), free(other);
        sqlite3_finalize(st);
        return hp_fail(q->err, HP_ERR_NOMEM, "query: out of memory");
    }
    for (int c = 0; c < n_cols; c++) {
        const char *name = sqlite3_column_name(st, c);
        cols[c] = name ? name : "?";
    }
    struct tb b;
    hq_tb_init(&b, n_cols, cols, num);
    free(cols);
    enum hp_status s = HP_OK;
    size_t bytes = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        // the table is held whole before printing: a runaway query (a recursive CTE) must stop, not eat memory
        if (b.t && b.t->n_rows >= SQL_MAX_ROWS) {
            s = hp_fail(q->err, HP_ERR_ARG, "query: more than %d result rows (add a LIMIT or aggregate)", SQL_MAX_ROWS);
            break;
        }
        for (int c = 0; c < n_cols; c++)
            bytes += (size_t)sqlite3_column_bytes(st, c) * (sqlite3_column_type(st, c) == SQLITE_BLOB ? 2 : 1) + 8;
        if (bytes > SQL_MAX_BYTES) {
            s = hp_fail(q->err, HP_ERR_ARG, "query: result larger than %d MB (add a LIMIT or select fewer columns)",
                        SQL_MAX_BYTES >> 20);
            break;
        }
        int row = hq_tb_row(&b);
        for (int c = 0; c < n_cols; c++) {
            int type = sqlite3_column_type(st, c);
            if (type == SQLITE_INTEGER || type == SQLITE_FLOAT)
                num[c] = true;
            else if (type != SQLITE_NULL)
                other[c] = true;
            hq_tb_sql(&b, row, c, st);
        }
    }
    if (s == HP_OK && rc != SQLITE_DONE) {
        int code = rc & 0xff;
        s = code == SQLITE_BUSY || code == SQLITE_CORRUPT || code == SQLITE_INTERRUPT
                ? hq_sql_fail(q, rc)
                : hp_fail(q->err, HP_ERR_SQL, "query: %s", sqlite3_errmsg(q->db));
    }
    sqlite3_finalize(st);
    // numeric: at least one number and nothing but numbers and NULLs
    if (!b.nomem)
        for (int c = 0; c < n_cols; c++)
            b.t->numeric[c] = num[c] && !other[c];
    free(num);
    free(other);
    if (s != HP_OK) {
        hp_table_free(b.t);
        return s;
    }
    return hq_tb_finish(&b, out, q->err);
}
