/*
 * store_priv.h -- the store family's private insides, shared by engine/store*.c
 * and by nothing else (others use store.h and headprune.h).
 *
 * The family: store.c opens databases (writers and readers, the schema and
 * its upgrade), writes sweeps and merges databases; store_results.c writes
 * and reads what the sweep runner finishes (variants and their metrics,
 * mean-ablation statistics, gradients and scores, head roles, gate runs) and
 * a study's step for an export. Names shared across the family carry the
 * prefix hs_; everything else in a file is static.
 *
 * Must not: be included outside engine/store*.c.
 */
#ifndef HP_STORE_PRIV_H
#define HP_STORE_PRIV_H

#include "store.h"

#include <sqlite3.h>

struct hp_store {
    sqlite3 *db;
    char *path; /* the file as given (owned) */
    char host[256];
};

/* SQLite's failure rc while doing `what`, as one line naming the database. */
enum hp_status hs_sql_fail(struct hp_store *s, int rc, const char *what, struct hp_error *err);

/* Now, ISO 8601 UTC. */
void hs_now_iso(char buf[32]);

/* sqlite3_exec with no callback. */
int hs_exec(struct hp_store *s, const char *sql);

/* Step a statement with no result rows and finalize it: SQLITE_OK or the failure. */
int hs_step_done(sqlite3_stmt *st);

/* sqlite3_prepare_v2 on the store's connection. */
int hs_prep(struct hp_store *s, const char *sql, sqlite3_stmt **st);

/* How a result was made, in the seven columns from i on: wall_s, engine_version, numeric_version, host,
 * threads, kernel, created (every result table ends with them). */
void hs_bind_provenance(const struct hp_store *s, sqlite3_stmt *st, int i, double wall_s, int threads,
                        const char *kernel, const char *now);

/* Mark sweep_id as written now (within the caller's transaction): `query sweeps` shows when. */
int hs_touch_sweep(struct hp_store *s, int64_t sweep_id);

/* End a write's transaction: COMMIT when rc is SQLITE_OK, else roll it back and say what failed. */
enum hp_status hs_commit_or_fail(struct hp_store *s, int rc, const char *what, struct hp_error *err);

/* SELECT returning one integer (arg: NULL or the text bound to ?1); *found false when no row. */
int hs_select_int(struct hp_store *s, const char *sql, const char *arg, int64_t *out, bool *found);

/* sqlite3_prepare_v2 on a reader's connection; a failure as hp_store_read_fail says it (*st NULL). */
enum hp_status hs_read_prep(sqlite3 *db, const char *path, struct hp_error *err, sqlite3_stmt **st,
                            const char *sql);

// --- the metrics' columns -------------------------------------------------------

/* Room for a list of every metric's column (names from the metric table, with a prefix of up to 7 chars). */
#define HS_METRIC_COLS (HP_N_METRICS * 48)

/* "<prefix>loss, <prefix>kl, ...": every metric's column in results and seq_results, named and ordered as
 * the metric table. */
void hs_metric_cols(char out[HS_METRIC_COLS], const char *prefix);

/* "?, ?, ...": one parameter a metric. */
void hs_metric_params(char out[HS_METRIC_COLS]);

#endif
