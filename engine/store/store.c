/*
 * store.c -- the results database (SQLite; schema in engine/store/schema.sql).
 *
 * Owns: opening (WAL, busy timeout, schema creation and version check),
 * the readers' opening and version check (hp_store_open_read, for queries),
 * the sweeps' rows, merging databases, and the family's shared helpers
 * (store_priv.h); store_results.c writes what the sweep runner finishes.
 * Every write is one BEGIN IMMEDIATE transaction: a killed process leaves a
 * whole result or none of it.
 * SQLite's errors are translated here into one line naming the database.
 * Must not: know about tensors, models, plans or jobs: it is given rows of
 * plain fields (store.h), and the kernel and thread count by its caller.
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include "store_priv.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hash.h"
#include "metric.h"
#include "schema_sql.h"
#include "util.h"


// --- errors -------------------------------------------------------------------

enum hp_status hs_sql_fail(struct hp_store *s, int rc, const char *what, struct hp_error *err)
{
    int base = rc & 0xff;
    const char *msg = s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc);
    if (base == SQLITE_FULL)
        return hp_fail(err, HP_ERR_SQL, "%s: disk full while %s (free some space and run again; finished results are kept)",
                       s->path, what);
    if (base == SQLITE_IOERR)
        return hp_fail(err, HP_ERR_SQL, "%s: disk full or I/O error while %s (%s; finished results are kept, run again once fixed)",
                       s->path, what, msg);
    if (base == SQLITE_READONLY)
        return hp_fail(err, HP_ERR_SQL, "%s: read-only while %s (check the permissions of the file and its folder)",
                       s->path, what);
    if (base == SQLITE_NOTADB)
        return hp_fail(err, HP_ERR_SQL, "%s: not a headprune database (not an SQLite file)", s->path);
    if (base == SQLITE_BUSY || base == SQLITE_LOCKED)
        return hp_fail(err, HP_ERR_SQL, "%s: database stayed locked by another process while %s", s->path, what);
    return hp_fail(err, HP_ERR_SQL, "%s: %s: %s", s->path, what, msg);
}

void hs_now_iso(char buf[32])
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int hs_exec(struct hp_store *s, const char *sql)
{
    return sqlite3_exec(s->db, sql, NULL, NULL, NULL);
}

/* Run a statement with no result rows; binds happen in the callback-free form below. */
int hs_step_done(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

int hs_prep(struct hp_store *s, const char *sql, sqlite3_stmt **st)
{
    return sqlite3_prepare_v2(s->db, sql, -1, st, NULL);
}

/* How a result was made, in the seven columns from i on: wall_s, engine_version, numeric_version, host,
 * threads, kernel, created (every result table ends with them). */
void hs_bind_provenance(const struct hp_store *s, sqlite3_stmt *st, int i, double wall_s, int threads,
                            const char *kernel, const char *now)
{
    sqlite3_bind_double(st, i, wall_s);
    sqlite3_bind_text(st, i + 1, HP_VERSION, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, i + 2, HP_NUMERIC_VERSION);
    sqlite3_bind_text(st, i + 3, s->host, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, i + 4, threads);
    sqlite3_bind_text(st, i + 5, kernel, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, i + 6, now, -1, SQLITE_TRANSIENT);
}

/* Mark sweep_id as written now (within the caller's transaction): `query sweeps` shows when. */
int hs_touch_sweep(struct hp_store *s, int64_t sweep_id)
{
    char now[32];
    hs_now_iso(now);
    sqlite3_stmt *st;
    int rc = hs_prep(s, "UPDATE sweeps SET updated = ? WHERE id = ?", &st);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_bind_text(st, 1, now, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, sweep_id);
    return hs_step_done(st);
}

/* End a write's transaction: COMMIT when rc is SQLITE_OK, else roll it back and say what failed. */
enum hp_status hs_commit_or_fail(struct hp_store *s, int rc, const char *what, struct hp_error *err)
{
    if (rc == SQLITE_OK)
        rc = hs_exec(s, "COMMIT");
    if (rc == SQLITE_OK)
        return HP_OK;
    enum hp_status e = hs_sql_fail(s, rc, what, err);
    hs_exec(s, "ROLLBACK");
    return e;
}

/* SELECT returning one integer; *found false when no row. */
int hs_select_int(struct hp_store *s, const char *sql, const char *arg, int64_t *out, bool *found)
{
    sqlite3_stmt *st;
    int rc = hs_prep(s, sql, &st);
    if (rc != SQLITE_OK)
        return rc;
    if (arg)
        sqlite3_bind_text(st, 1, arg, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(st);
    *found = rc == SQLITE_ROW;
    if (*found)
        *out = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

// --- opening a file as a database ------------------------------------------------

static bool uri_plain(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '/' || c == '.' ||
           c == '_' || c == '~' || c == '-';
}

/*
 * "file:" + path + "?" + query, every byte of the path but [A-Za-z0-9/._~-]
 * percent-escaped, so nothing in it reads as a URI parameter, a fragment or
 * a special name. An absolute path gets an empty authority ("file:///a/b",
 * so "//x" is not a host); a relative one "./" (":memory:" stays a file).
 */
static char *build_uri(const char *path, const char *query)
{
    char *buf = malloc(strlen("file:") + 2 + 3 * strlen(path) + 1 + strlen(query) + 1);
    if (!buf)
        return NULL;
    size_t o = (size_t)sprintf(buf, "file:%s", path[0] == '/' ? "//" : "./");
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if (uri_plain(*p))
            buf[o++] = (char)*p;
        else
            o += (size_t)sprintf(buf + o, "%%%02X", *p);
    }
    sprintf(buf + o, "?%s", query);
    return buf;
}

/* path's folder, a fresh string (free() it; NULL when out of memory): dirname() works on a copy */
static char *folder_of(const char *path)
{
    char *tmp = strdup(path), *dir = tmp ? strdup(dirname(tmp)) : NULL;
    free(tmp);
    return dir;
}

static bool folder_writable(const char *path)
{
    char *dir = folder_of(path);
    bool w = dir && access(dir, W_OK) == 0;
    free(dir);
    return w;
}

char *hp_store_ro_uri(const char *path)
{
    /* A reader of a WAL database needs its -shm file, and creates it (and
     * -wal) when absent: impossible in a folder it cannot write. With no -wal
     * file no writer is at work (a writer holds one open), so the file can be
     * read as immutable: no locks, no side files. */
    char *wal;
    if (hp_path_make(&wal, NULL, "%s-wal", path) != HP_OK)
        return NULL;
    bool immutable = !folder_writable(path) && access(wal, F_OK) != 0;
    free(wal);
    return build_uri(path, immutable ? "mode=ro&immutable=1" : "mode=ro");
}

/*
 * SQLite's unix files take names of at most mxPathname bytes (512 in SQLite
 * 3.40), measured on the name made absolute with its symbolic links resolved:
 * a database in a deep folder fails to open with a bare "unable to open
 * database file". Whether that is why: the name's length as SQLite sees it
 * into *n, and the limit into *max.
 */
bool hp_store_too_long(const char *path, size_t *n, int *max)
{
    sqlite3_vfs *vfs = sqlite3_vfs_find(NULL);
    char *dir = folder_of(path), *real = dir ? realpath(dir, NULL) : NULL;
    const char *base = strrchr(path, '/');
    *n = real ? strlen(real) + 1 + strlen(base ? base + 1 : path) : strlen(path);
    *max = vfs ? vfs->mxPathname : 512;
    free(real);
    free(dir);
    return *n >= (size_t)*max;
}

static enum hp_status check_folder(const char *path, struct hp_error *err)
{
    char *dir = folder_of(path);
    if (!dir)
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
    struct stat sb;
    enum hp_status st = HP_OK;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        st = errno == ENAMETOOLONG
                 ? hp_fail(err, HP_ERR_IO, "%s: cannot open (%s)", path, hp_strerror(errno))
                 : hp_fail(err, HP_ERR_IO, "%s: folder '%s' does not exist (create it first)", path, dir);
    else if (access(dir, W_OK) != 0)
        st = hp_fail(err, HP_ERR_IO, "%s: folder '%s' is not writable (SQLite needs to write its journal there)", path, dir);
    else if (access(path, F_OK) == 0 && access(path, W_OK) != 0)
        st = hp_fail(err, HP_ERR_IO, "%s: file is read-only", path);
    free(dir);
    return st;
}

enum hp_status hp_store_db_open(const char *path, bool write, sqlite3 **db, struct hp_error *err)
{
    *db = NULL;
    if (!path || !*path)
        return hp_fail(err, HP_ERR_ARG, "database path is empty (name a file)");
    struct stat sb;
    bool exists = stat(path, &sb) == 0;
    if (!exists && errno != ENOENT)
        return hp_fail(err, HP_ERR_IO, "%s: cannot open (%s)", path, hp_strerror(errno));
    if (exists && S_ISDIR(sb.st_mode))
        return hp_fail(err, HP_ERR_IO, "%s: is a folder, not a database", path);
    /* a device or a pipe is no database; SQLite would also make its journal beside it (/dev/null-journal) */
    if (exists && !S_ISREG(sb.st_mode))
        return hp_fail(err, HP_ERR_IO, "%s: not a regular file (a database is a file)", path);
    if (!exists && !write)
        return hp_fail(err, HP_ERR_IO, "%s: no such database (check the path; `headprune run` creates it)", path);
    if (!write && access(path, R_OK) != 0)
        return hp_fail(err, HP_ERR_IO, "%s: cannot read (%s)", path, hp_strerror(errno));
    if (write) {
        enum hp_status st = check_folder(path, err);
        if (st != HP_OK)
            return st;
    }
    char *uri = write ? build_uri(path, "mode=rwc") : hp_store_ro_uri(path);
    if (!uri)
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
    /* SQLITE_OPEN_URI: the name is the URI built above, never the user's text */
    int flags = (write ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE : SQLITE_OPEN_READONLY) | SQLITE_OPEN_URI;
    int rc = sqlite3_open_v2(uri, db, flags, NULL);
    free(uri);
    size_t n;
    int max;
    if (rc != SQLITE_OK) {
        enum hp_status st =
            (rc & 0xff) == SQLITE_CANTOPEN && hp_store_too_long(path, &n, &max)
                ? hp_fail(err, HP_ERR_IO,
                          "%s: cannot open: path too long for SQLite (%zu bytes with its folder resolved, SQLite "
                          "takes %d; put the database in a folder with a shorter path)",
                          path, n, max - 1)
                : hp_fail(err, HP_ERR_IO, "%s: cannot open (%s)", path, *db ? sqlite3_errmsg(*db) : sqlite3_errstr(rc));
        sqlite3_close(*db);
        *db = NULL;
        return st;
    }
    /* A database is data, not code: its SQL (and the user's, in `query sql`)
     * must not reach fts3_tokenizer's pointers, load extensions or write the
     * schema by hand. */
    sqlite3_db_config(*db, SQLITE_DBCONFIG_ENABLE_FTS3_TOKENIZER, 0, (int *)NULL);
    sqlite3_db_config(*db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, (int *)NULL);
    sqlite3_db_config(*db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)NULL);
#ifdef SQLITE_DBCONFIG_TRUSTED_SCHEMA
    sqlite3_db_config(*db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, (int *)NULL);
#endif
    sqlite3_enable_load_extension(*db, 0);
    return HP_OK;
}

// --- opening for reading (query) -----------------------------------------------

enum hp_status hp_store_read_fail(sqlite3 *db, const char *path, int rc, struct hp_error *err)
{
    int code = rc & 0xff;
    const char *msg = sqlite3_errmsg(db);
    if (code == SQLITE_BUSY || code == SQLITE_LOCKED)
        return hp_fail(err, HP_ERR_SQL, "%s: database is busy (another process holds a lock; try again)", path);
    if (code == SQLITE_INTERRUPT)
        return hp_fail(err, HP_ERR_SQL,
                       "%s: reading stopped at its time limit (views or SQL that do not end? a hostile file? "
                       "--timeout S allows longer; default %.0f s)", path, HP_READ_SECONDS);
    if (code == SQLITE_NOTADB)
        return hp_fail(err, HP_ERR_FORMAT, "%s: not a headprune database (not an SQLite file)", path);
    if (code == SQLITE_CORRUPT)
        return hp_fail(err, HP_ERR_FORMAT, "%s: database is corrupt (%s)", path, msg);
    // a WAL database with a writer at work needs its -shm file, which this user cannot create or write
    if (code == SQLITE_READONLY || code == SQLITE_CANTOPEN)
        return hp_fail(err, HP_ERR_IO,
                       "%s: cannot be read without writing beside it (%s; a writer may be at work in a folder this "
                       "user cannot write: try again when it has finished, or query a copy)", path, msg);
    if (code == SQLITE_ERROR && strncmp(msg, "no such ", 8) == 0)
        return hp_fail(err, HP_ERR_FORMAT, "%s: not a headprune database (%s)", path, msg);
    return hp_fail(err, HP_ERR_SQL, "%s: cannot read (%s)", path, msg);
}

enum hp_status hs_read_prep(sqlite3 *db, const char *path, struct hp_error *err, sqlite3_stmt **st,
                           const char *sql)
{
    int rc = sqlite3_prepare_v2(db, sql, -1, st, NULL);
    if (rc != SQLITE_OK) {
        *st = NULL;
        return hp_store_read_fail(db, path, rc, err);
    }
    return HP_OK;
}

int hp_store_read_step(sqlite3 *db, const char *path, struct hp_error *err, sqlite3_stmt *st, enum hp_status *s)
{
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        return 1;
    if (rc == SQLITE_DONE)
        return 0;
    *s = hp_store_read_fail(db, path, rc, err);
    return -1;
}

/*
 * What in db headprune's schema would not have put there, as why (at least
 * 200 bytes; "" when nothing): a table the schema creates (schema.sql's
 * CREATE TABLE IF NOT EXISTS) that is something else by that name (a view
 * whose rows might never end), which CREATE TABLE IF NOT EXISTS keeps; or a
 * trigger, which would run on every write (the schema makes none). An SQLite
 * error code, else SQLITE_OK.
 */
static int foreign_schema(sqlite3 *db, char why[200])
{
    static const char mark[] = "CREATE TABLE IF NOT EXISTS ";
    why[0] = 0;
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, "SELECT type FROM sqlite_master WHERE name = ?1 COLLATE NOCASE AND type != 'table'",
                                -1, &st, NULL);
    for (const char *p = schema_sql; rc == SQLITE_OK && (p = strstr(p, mark)) != NULL && !why[0];) {
        p += sizeof mark - 1;
        const int n = (int)strcspn(p, "( \n");
        sqlite3_reset(st);
        sqlite3_bind_text(st, 1, p, n, SQLITE_TRANSIENT);
        int r = sqlite3_step(st);
        if (r == SQLITE_ROW) {
            const char *type = (const char *)sqlite3_column_text(st, 0);
            snprintf(why, 200, "%.*s is %s %.16s, not a table", n < 64 ? n : 64, p,
                     type && strchr("aeiou", type[0]) ? "an" : "a", type ? type : "?");
        } else if (r != SQLITE_DONE) {
            rc = r;
        }
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_OK && !why[0] &&
        (rc = sqlite3_prepare_v2(db, "SELECT name FROM sqlite_master WHERE type = 'trigger' LIMIT 1", -1, &st, NULL)) ==
            SQLITE_OK) {
        int r = sqlite3_step(st);
        if (r == SQLITE_ROW)
            snprintf(why, 200, "it holds a trigger, '%.64s', which would run on every write; headprune makes none",
                     (const char *)sqlite3_column_text(st, 0));
        else if (r != SQLITE_DONE)
            rc = r;
        sqlite3_finalize(st);
    }
    return rc;
}

/* The reader's settings, then: a headprune database of a schema this version reads. */
static enum hp_status check_read(sqlite3 *db, const char *path, int busy_ms, struct hp_error *err)
{
    enum hp_status s;
    sqlite3_busy_timeout(db, busy_ms);
    sqlite3_limit(db, SQLITE_LIMIT_ATTACHED, 0); // user SQL reads this file only
    int rc = sqlite3_exec(db, "PRAGMA query_only = 1", NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        return hp_store_read_fail(db, path, rc, err);

    sqlite3_stmt *st;
    s = hs_read_prep(db, path, err, &st, "SELECT count(*), count(CASE WHEN type = 'table' AND name = 'meta' THEN 1 END) FROM sqlite_master");
    if (s != HP_OK)
        return s;
    int r = hp_store_read_step(db, path, err, st, &s);
    bool empty = r == 1 && sqlite3_column_int64(st, 0) == 0;
    bool has_meta = r == 1 && sqlite3_column_int64(st, 1) > 0;
    sqlite3_finalize(st);
    if (r < 0)
        return s;
    // a database `headprune run` is creating this moment has no schema yet: not a foreign file
    if (empty)
        return hp_fail(err, HP_ERR_ARG,
                       "%s: has no results yet (an empty database, perhaps still being created; try again once "
                       "`headprune run` has written to it)", path);
    if (!has_meta)
        return hp_fail(err, HP_ERR_FORMAT, "%s: not a headprune database (no meta table)", path);
    char why[200];
    int rc2 = foreign_schema(db, why);
    if (rc2 != SQLITE_OK)
        return hp_store_read_fail(db, path, rc2, err);
    if (why[0])
        return hp_fail(err, HP_ERR_FORMAT, "%s: not a headprune database (%s)", path, why);

    if ((s = hs_read_prep(db, path, err, &st, "SELECT value FROM meta WHERE key = 'schema_version'")) != HP_OK)
        return s;
    r = hp_store_read_step(db, path, err, st, &s);
    char text[32] = "";
    if (r == 1) {
        const unsigned char *v = sqlite3_column_text(st, 0);
        snprintf(text, sizeof text, "%s", v ? (const char *)v : "");
    }
    sqlite3_finalize(st);
    if (r < 0)
        return s;
    if (r == 0)
        return hp_fail(err, HP_ERR_FORMAT, "%s: not a headprune database (no schema_version in meta)", path);
    char *end;
    errno = 0;
    long long version = strtoll(text, &end, 10);
    if (end == text || *end || errno || version < 1)
        return hp_fail(err, HP_ERR_FORMAT, "%s: not a headprune database (schema_version '%s' in meta)", path,
                       text);
    if (version > HP_SCHEMA_VERSION)
        return hp_fail(err, HP_ERR_UNSUPPORTED,
                       "%s: written by a newer headprune (schema %lld; this one reads %d; upgrade headprune)", path,
                       version, HP_SCHEMA_VERSION);
    return HP_OK;
}

/* A reader's deadline (hp_now() seconds): the progress handler's, freed with the connection. */
static void deadline_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc, (void)argv;
    sqlite3_result_double(ctx, *(const double *)sqlite3_user_data(ctx) - hp_now());
}

static int past_deadline(void *deadline)
{
    return hp_now() > *(const double *)deadline;
}

/* Interrupt db's statements once seconds have passed: a progress handler whose deadline lives as long
 * as db (the user data of a function, hp_read_seconds_left(), which SQLite frees when db closes). */
static int limit_time(sqlite3 *db, double seconds)
{
    double *deadline = malloc(sizeof *deadline);
    if (!deadline)
        return SQLITE_NOMEM;
    *deadline = hp_now() + (seconds > 0 ? seconds : HP_READ_SECONDS);
    int rc = sqlite3_create_function_v2(db, "hp_read_seconds_left", 0, SQLITE_UTF8, deadline, deadline_fn, NULL,
                                        NULL, free);
    if (rc == SQLITE_OK)
        sqlite3_progress_handler(db, 10000, past_deadline, deadline);
    return rc; /* on failure SQLite has already called free */
}

enum hp_status hp_store_open_read(const char *path, int busy_ms, double seconds, sqlite3 **db_out,
                                  struct hp_error *err)
{
    enum hp_status s = hp_store_db_open(path, false, db_out, err);
    if (s != HP_OK)
        return s;
    int rc = limit_time(*db_out, seconds);
    s = rc == SQLITE_OK ? check_read(*db_out, path, busy_ms, err) : hp_store_read_fail(*db_out, path, rc, err);
    if (s != HP_OK) {
        sqlite3_close(*db_out);
        *db_out = NULL;
    }
    return s;
}

// --- the metrics' part of the schema -------------------------------------------

void hs_metric_cols(char out[HS_METRIC_COLS], const char *prefix)
{
    size_t n = 0;
    for (int k = 0; k < HP_N_METRICS; k++)
        n += (size_t)snprintf(out + n, HS_METRIC_COLS - n, "%s%.7s%s", k ? ", " : "", prefix,
                              hp_metric_name((enum hp_metric)k));
}

void hs_metric_params(char out[HS_METRIC_COLS])
{
    size_t n = 0;
    for (int k = 0; k < HP_N_METRICS; k++)
        n += (size_t)snprintf(out + n, HS_METRIC_COLS - n, "%s?", k ? ", " : "");
}

/*
 * The views over every metric, as the metric table makes them (docs/database.md): jobs, baselines and
 * effects, the last signed as each metric's row says (hp_metric_effect). jobs and baselines give the metrics
 * (and ppl) in the order of db's results columns, so that an older database's views keep their columns' order
 * (loss, ppl, acc, kl, cos, then metrics added later). Written into out (size n). An SQLite error code.
 */
static int metric_views(sqlite3 *db, char *out, size_t n)
{
    char jc[2 * HS_METRIC_COLS] = "", bc[2 * HS_METRIC_COLS] = "", ec[HS_METRIC_COLS], dc[4 * HS_METRIC_COLS];
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, "SELECT name FROM pragma_table_info('results') ORDER BY cid", -1, &st, NULL);
    size_t nj = 0, nb = 0;
    while (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
        const char *c = (const char *)sqlite3_column_text(st, 0);
        enum hp_metric m;
        if (!c || (strcmp(c, "ppl") != 0 && !hp_metric_parse(c, &m)))
            continue;
        nj += (size_t)snprintf(jc + nj, sizeof jc - nj, "r.%.40s, ", c);
        nb += (size_t)snprintf(bc + nb, sizeof bc - nb, "%.40s, ", c);
    }
    if (rc == SQLITE_OK)
        rc = sqlite3_finalize(st);
    if (rc != SQLITE_OK)
        return rc;
    if (nb >= 2)
        bc[nb - 2] = '\0'; /* baselines' list ends the select: no ", " after it */
    hs_metric_cols(ec, "j.");
    size_t d = 0;
    for (int k = 0; k < HP_N_METRICS; k++) {
        const struct hp_metric_row *r = hp_metric_row((enum hp_metric)k);
        const char *m = r->name, *sep = k ? ", " : "";
        if (r->baseline == HP_BASELINE_UNMASKED) /* the value is the effect: the baseline's is 0 */
            d += (size_t)snprintf(dc + d, sizeof dc - d, r->sign > 0 ? "%sj.%s AS d_%s" : "%s0.0 - j.%s AS d_%s", sep,
                                  m, m);
        else if (r->sign > 0)
            d += (size_t)snprintf(dc + d, sizeof dc - d, "%sj.%s - b.%s AS d_%s", sep, m, m, m);
        else
            d += (size_t)snprintf(dc + d, sizeof dc - d, "%sb.%s - j.%s AS d_%s", sep, m, m, m);
    }
    snprintf(out, n,
             "CREATE VIEW jobs AS\n"
             "SELECT j.sweep_id, j.ord, j.study, j.kind, j.kv, j.label, j.layer, j.unit, j.unit2,\n"
             "       j.step, j.sample, j.k, v.mask_text, v.n_ablated, %sr.n_tokens, r.wall_s, j.variant_id\n"
             "FROM sweep_jobs j JOIN variants v ON v.id = j.variant_id JOIN results r ON r.variant_id = j.variant_id;\n"
             "CREATE VIEW baselines AS\n"
             "SELECT sweep_id, variant_id, %s FROM jobs WHERE kind = 'baseline';\n"
             "CREATE VIEW effects AS\n"
             "SELECT j.sweep_id, j.study, j.kind, j.kv, j.label, j.layer, j.unit, j.unit2, j.step, j.sample, j.k,\n"
             "       j.mask_text, %s,\n"
             "       %s\n"
             "FROM jobs j JOIN baselines b ON b.sweep_id = j.sweep_id;\n",
             jc, bc, dc, ec);
    return SQLITE_OK;
}

/* Column col (of type, e.g. "REAL") added to table where db's lacks it; st: "SELECT count(*) FROM
 * pragma_table_info(?1) WHERE name = ?2", prepared on db. An SQLite error code. */
static int add_column(sqlite3 *db, sqlite3_stmt *st, const char *table, const char *col, const char *type)
{
    sqlite3_reset(st);
    sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, col, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW)
        return rc;
    if (sqlite3_column_int(st, 0) > 0)
        return SQLITE_OK;
    char sql[160];
    snprintf(sql, sizeof sql, "ALTER TABLE %s ADD COLUMN %s %s", table, col, type);
    return sqlite3_exec(db, sql, NULL, NULL, NULL);
}

/* The columns later schemas added to a table an earlier one made (schema.sql has them last, in this order). */
static const struct {
    const char *table, *col, *type;
} added_columns[] = {
    {"role_runs", "sep_id", "INTEGER"},  /* 8: attention to [SEP] */
    {"role_runs", "n_sep", "INTEGER"},   /* 8 */
    {"head_roles", "sep_token", "REAL"}, /* 8 */
    {"unit_scores", "estimator", "TEXT"}, /* 9: the attribution study's estimators */
    {"unit_scores", "base", "TEXT"},      /* 9 */
    {"gradients", "from_layer", "INTEGER"}, /* 11: gradients of a layer's gates on */
};

/* A column per metric in results and seq_results (what a database older than a metric lacks is added), and
 * added_columns. */
static int missing_columns(sqlite3 *db)
{
    static const char *const tables[] = {"results", "seq_results"};
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, "SELECT count(*) FROM pragma_table_info(?1) WHERE name = ?2", -1, &st, NULL);
    for (int t = 0; t < 2 && rc == SQLITE_OK; t++)
        for (int k = 0; k < HP_N_METRICS && rc == SQLITE_OK; k++)
            rc = add_column(db, st, tables[t], hp_metric_name((enum hp_metric)k), "REAL");
    for (size_t k = 0; k < sizeof added_columns / sizeof *added_columns && rc == SQLITE_OK; k++)
        rc = add_column(db, st, added_columns[k].table, added_columns[k].col, added_columns[k].type);
    sqlite3_finalize(st);
    return rc;
}

/* The views made again where a database holds others (older, or without a metric): all three, in order. */
static int metric_views_fit(sqlite3 *db)
{
    char views[16384];
    sqlite3_stmt *st = NULL;
    int rc = metric_views(db, views, sizeof views);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db, "SELECT group_concat(sql || ';' || char(10), '') FROM (SELECT sql FROM sqlite_master "
                                    "WHERE type = 'view' AND name IN ('jobs', 'baselines', 'effects') "
                                    "ORDER BY CASE name WHEN 'jobs' THEN 0 WHEN 'baselines' THEN 1 ELSE 2 END)",
                                -1, &st, NULL);
    bool same = false;
    if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const unsigned char *have = sqlite3_column_text(st, 0);
        same = have && strcmp((const char *)have, views) == 0;
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_OK && !same)
        rc = sqlite3_exec(db, "DROP VIEW IF EXISTS effects; DROP VIEW IF EXISTS baselines; DROP VIEW IF EXISTS jobs",
                          NULL, NULL, NULL);
    if (rc == SQLITE_OK && !same)
        rc = sqlite3_exec(db, views, NULL, NULL, NULL);
    return rc;
}

int hp_store_schema(sqlite3 *db)
{
    int rc = sqlite3_exec(db, schema_sql, NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = missing_columns(db);
    if (rc == SQLITE_OK)
        rc = metric_views_fit(db);
    return rc;
}

// --- opening ------------------------------------------------------------------

/* WAL mode and the schema (whole, or what an older database lacks), in one locked transaction. */
static int open_schema(struct hp_store *s)
{
    int rc;
    if ((rc = hs_exec(s, "PRAGMA journal_mode = WAL")) != SQLITE_OK ||
        (rc = hs_exec(s, "PRAGMA synchronous = NORMAL")) != SQLITE_OK ||
        (rc = hs_exec(s, "PRAGMA foreign_keys = ON")) != SQLITE_OK || (rc = hs_exec(s, "BEGIN IMMEDIATE")) != SQLITE_OK)
        return rc;
    /* another worker may have created the schema meanwhile: check inside the lock */
    int64_t n = 0;
    bool found;
    rc = hs_select_int(s, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'", NULL, &n, &found);
    /* the schema is idempotent: a new database gets it whole, an older one what it lacks */
    if (rc == SQLITE_OK)
        rc = hp_store_schema(s->db);
    if (rc == SQLITE_OK) {
        char sql[256];
        /* up, never down: a newer headprune may have upgraded it since we checked */
        snprintf(sql, sizeof sql,
                 "INSERT OR IGNORE INTO meta VALUES ('schema_version', '%d');"
                 "UPDATE meta SET value = '%d' WHERE key = 'schema_version' AND CAST(value AS INTEGER) < %d",
                 HP_SCHEMA_VERSION, HP_SCHEMA_VERSION, HP_SCHEMA_VERSION);
        rc = hs_exec(s, sql);
    }
    if (rc == SQLITE_OK && n == 0) {
        char sql[256];
        snprintf(sql, sizeof sql, "INSERT INTO meta VALUES ('created_by', 'headprune %s')", HP_VERSION);
        rc = hs_exec(s, sql);
    }
    if (rc == SQLITE_OK)
        rc = hs_exec(s, "COMMIT");
    return rc;
}

enum hp_status hp_store_open(const char *path, struct hp_store **out, struct hp_error *err)
{
    *out = NULL;
    sqlite3 *db;
    enum hp_status st = hp_store_db_open(path, true, &db, err);
    if (st != HP_OK)
        return st;
    struct hp_store *s = calloc(1, sizeof *s);
    if (!s) {
        sqlite3_close(db);
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    }
    s->db = db;
    if (!(s->path = strdup(path))) {
        hp_store_close(s);
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    }
    if (gethostname(s->host, sizeof s->host) != 0)
        snprintf(s->host, sizeof s->host, "unknown");
    int rc;
    sqlite3_busy_timeout(s->db, 60000);

    /* read before writing anything: a newer or foreign database stays as it was */
    int64_t n_tables = 0, version = 0;
    bool found;
    rc = hs_select_int(s, "SELECT count(*) FROM sqlite_master", NULL, &n_tables, &found);
    if (rc == SQLITE_OK && n_tables > 0) {
        rc = hs_select_int(s, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'", NULL, &version,
                        &found);
        if (rc == SQLITE_OK && version == 0) {
            st = hp_fail(err, HP_ERR_SQL, "%s: not a headprune database (an SQLite file without its tables)", path);
            hp_store_close(s);
            return st;
        }
        if (rc == SQLITE_OK)
            rc = hs_select_int(s, "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'schema_version'", NULL, &version,
                            &found);
        if (rc == SQLITE_OK && version > HP_SCHEMA_VERSION) {
            st = hp_fail(err, HP_ERR_SQL, "%s: written by a newer headprune (schema %lld; this one reads %d): upgrade headprune",
                         path, (long long)version, HP_SCHEMA_VERSION);
            hp_store_close(s);
            return st;
        }
        char why[200];
        if (rc == SQLITE_OK && (rc = foreign_schema(db, why)) == SQLITE_OK && why[0]) {
            st = hp_fail(err, HP_ERR_SQL, "%s: not a headprune database (%s)", path, why);
            hp_store_close(s);
            return st;
        }
    }
    if (rc != SQLITE_OK) {
        st = hs_sql_fail(s, rc, "reading the schema", err);
        hp_store_close(s);
        return st;
    }
    /* Two workers opening a new database at once: switching it to WAL and
     * creating the schema can meet SQLITE_BUSY without SQLite's busy handler
     * being consulted (lock upgrades that could deadlock), so retry here. */
    for (int attempt = 0;; attempt++) {
        rc = open_schema(s);
        if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED)
            break;
        hs_exec(s, "ROLLBACK");
        if (attempt == 600)
            break;
        struct timespec ts = {0, 100000000L};
        nanosleep(&ts, NULL);
    }
    if (rc != SQLITE_OK) {
        st = hs_sql_fail(s, rc, "opening", err);
        hs_exec(s, "ROLLBACK");
        hp_store_close(s);
        return st;
    }
    *out = s;
    return HP_OK;
}

void hp_store_close(struct hp_store *s)
{
    if (!s)
        return;
    if (s->db) {
        /* Back to a rollback journal when no one else has it open (the switch
         * needs sole access; otherwise it fails at once and the last worker
         * does it): a database at rest then needs no -wal/-shm files, so
         * readers without write access to the folder create none, and none
         * are left behind owned by another user. */
        sqlite3_busy_timeout(s->db, 0);
        hs_exec(s, "PRAGMA journal_mode = DELETE");
    }
    sqlite3_close(s->db);
    free(s->path);
    free(s);
}

// --- sweeps -------------------------------------------------------------------

enum hp_status hp_store_sweep(struct hp_store *s, const struct hp_store_sweep_row *d, int64_t *sweep_id,
                              struct hp_error *err)
{
    char now[32], key[HP_DIGEST_HEX], cat[3 * HP_DIGEST_HEX + 32];
    hs_now_iso(now);
    /* and the numeric version: a sweep's jobs are linked by their place in it, so a sweep of another version's
     * results is another sweep (else a rerun after an upgrade kept the old links to the old numbers) */
    snprintf(cat, sizeof cat, "%s/%s/%s/%d", d->plan_digest, d->model_digest, d->data_digest, HP_NUMERIC_VERSION);
    hp_digest_text(cat, key);
    int rc = hs_exec(s, "BEGIN IMMEDIATE");
    sqlite3_stmt *st = NULL;
    if (rc == SQLITE_OK && (rc = hs_prep(s, "INSERT OR IGNORE INTO models(digest, path, model_type, n_layers, n_heads, "
                                         "n_kv_heads, d_head, n_params) VALUES (?,?,?,?,?,?,?,?)",
                                      &st)) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, d->model_digest, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, d->model_path, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, d->model_type, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 4, d->n_layers);
        sqlite3_bind_int(st, 5, d->n_heads);
        sqlite3_bind_int(st, 6, d->n_kv_heads);
        sqlite3_bind_int(st, 7, d->d_head);
        sqlite3_bind_int64(st, 8, d->n_params);
        rc = hs_step_done(st);
    }
    /* every time, so a database from before schema 5 learns its pruned models' missing heads at their next run */
    for (int i = 0; d->pruned && rc == SQLITE_OK && i < d->n_layers * d->n_heads; i++)
        if (d->pruned[i] && (rc = hs_prep(s, "INSERT OR IGNORE INTO pruned_heads(model_id, layer, head) VALUES "
                                          "((SELECT id FROM models WHERE digest = ?1), ?2, ?3)",
                                       &st)) == SQLITE_OK) {
            sqlite3_bind_text(st, 1, d->model_digest, -1, SQLITE_STATIC);
            sqlite3_bind_int(st, 2, i / d->n_heads);
            sqlite3_bind_int(st, 3, i % d->n_heads);
            rc = hs_step_done(st);
        }
    if (rc == SQLITE_OK &&
        (rc = hs_prep(s, "INSERT OR IGNORE INTO datasets(digest, path, n_seqs, seq_len) VALUES (?,?,?,?)", &st)) ==
            SQLITE_OK) {
        sqlite3_bind_text(st, 1, d->data_digest, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, d->data_path, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 3, d->n_seqs);
        sqlite3_bind_int(st, 4, d->seq_len);
        rc = hs_step_done(st);
    }
    if (rc == SQLITE_OK &&
        (rc = hs_prep(s, "INSERT OR IGNORE INTO plans(digest, name, path, text) VALUES (?,?,?,?)", &st)) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, d->plan_digest, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, d->name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, d->plan_path, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, d->plan_text ? d->plan_text : "", -1, SQLITE_STATIC);
        rc = hs_step_done(st);
    }
    if (rc == SQLITE_OK &&
        (rc = hs_prep(s, "INSERT OR IGNORE INTO sweeps(key, plan_id, model_id, dataset_id, name, ablation, metric, "
                      "created, updated) VALUES (?1, (SELECT id FROM plans WHERE digest = ?2), "
                      "(SELECT id FROM models WHERE digest = ?3), (SELECT id FROM datasets WHERE digest = ?4), "
                      "?5, ?6, ?7, ?8, ?8)",
                   &st)) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, d->plan_digest, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, d->model_digest, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, d->data_digest, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 5, d->name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 6, d->ablation, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 7, d->metric, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 8, now, -1, SQLITE_STATIC);
        rc = hs_step_done(st);
    }
    bool found = false;
    if (rc == SQLITE_OK)
        rc = hs_select_int(s, "SELECT id FROM sweeps WHERE key = ?", key, sweep_id, &found);
    return hs_commit_or_fail(s, rc, "recording the sweep", err);
}

// --- merging ------------------------------------------------------------------

/* A shard database must be a headprune database this version can read. */
static enum hp_status check_source(const char *path, struct hp_error *err)
{
    sqlite3 *db;
    enum hp_status st = hp_store_db_open(path, false, &db, err);
    if (st != HP_OK)
        return st;
    sqlite3_busy_timeout(db, 60000);
    sqlite3_stmt *q = NULL;
    int64_t n_tables = -1, version = -1;
    int rc = sqlite3_prepare_v2(db, "SELECT count(*) FROM sqlite_master", -1, &q, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(q)) == SQLITE_ROW)
        n_tables = sqlite3_column_int64(q, 0), rc = SQLITE_OK;
    sqlite3_finalize(q);
    q = NULL;
    if (rc == SQLITE_OK && n_tables > 0 &&
        (rc = sqlite3_prepare_v2(db, "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'schema_version'", -1, &q,
                                 NULL)) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW)
        version = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    char why[200] = "";
    if (rc == SQLITE_OK && version >= 1)
        rc = foreign_schema(db, why); /* views and triggers would run in the merge's own connection */
    int base = rc & 0xff;
    char msg[256];
    snprintf(msg, sizeof msg, "%s", sqlite3_errmsg(db));
    sqlite3_close(db);
    if (why[0])
        return hp_fail(err, HP_ERR_FORMAT, "%s: not a headprune database (%s)", path, why);
    if (base == SQLITE_READONLY || base == SQLITE_CANTOPEN)
        return hp_fail(err, HP_ERR_IO,
                       "%s: cannot be read without writing beside it (%s; a writer may be at work in a folder this "
                       "user cannot write: copy the database and merge the copy)", path, msg);
    if (base == SQLITE_BUSY || base == SQLITE_LOCKED)
        return hp_fail(err, HP_ERR_SQL, "%s: database stayed locked by another process", path);
    if (base == SQLITE_NOTADB)
        return hp_fail(err, HP_ERR_SQL, "%s: not a headprune database (not an SQLite file)", path);
    if (rc == SQLITE_OK && n_tables == 0)
        return hp_fail(err, HP_ERR_SQL, "%s: has no results yet (an empty database, perhaps still being created; "
                                        "try again once `headprune run` has written to it)", path);
    if (rc != SQLITE_OK || version < 0)
        return hp_fail(err, HP_ERR_SQL, "%s: not a headprune database", path);
    if (version > HP_SCHEMA_VERSION)
        return hp_fail(err, HP_ERR_SQL, "%s: written by a newer headprune (schema %lld; this one reads %d)", path,
                       (long long)version, HP_SCHEMA_VERSION);
    return HP_OK;
}

/* Merging a file into itself would wait on its own lock: refuse it by identity, not by name. */
static enum hp_status check_distinct(const char *out, const char *in, struct hp_error *err)
{
    struct stat a, b;
    if (stat(out, &a) == 0 && stat(in, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return hp_fail(err, HP_ERR_ARG, "%s: is the output database %s itself (merge other databases into it)", in, out);
    return HP_OK;
}

static const char merge_sql[] =
    "INSERT OR IGNORE INTO main.models(digest, path, model_type, n_layers, n_heads, n_kv_heads, d_head, n_params) "
    "  SELECT digest, path, model_type, n_layers, n_heads, n_kv_heads, d_head, n_params FROM src.models;"
    "INSERT OR IGNORE INTO main.datasets(digest, path, n_seqs, seq_len) "
    "  SELECT digest, path, n_seqs, seq_len FROM src.datasets;"
    "INSERT OR IGNORE INTO main.plans(digest, name, path, text) SELECT digest, name, path, text FROM src.plans;"
    "INSERT OR IGNORE INTO main.sweeps(key, plan_id, model_id, dataset_id, name, ablation, metric, created, updated) "
    "  SELECT s.key, (SELECT id FROM main.plans WHERE digest = p.digest), "
    "         (SELECT id FROM main.models WHERE digest = m.digest), "
    "         (SELECT id FROM main.datasets WHERE digest = d.digest), s.name, s.ablation, s.metric, s.created, s.updated "
    "  FROM src.sweeps s JOIN src.plans p ON p.id = s.plan_id JOIN src.models m ON m.id = s.model_id "
    "       JOIN src.datasets d ON d.id = s.dataset_id;";

static const char merge_variants_sql[] =
    "INSERT OR IGNORE INTO main.variants(key, model_id, dataset_id, ablation, mask, mask_text, n_ablated) "
    "  SELECT v.key, (SELECT id FROM main.models WHERE digest = m.digest), "
    "         (SELECT id FROM main.datasets WHERE digest = d.digest), v.ablation, v.mask, v.mask_text, v.n_ablated "
    "  FROM src.variants v JOIN src.models m ON m.id = v.model_id JOIN src.datasets d ON d.id = v.dataset_id "
    "  WHERE v.id IN (SELECT variant_id FROM src.results) ORDER BY v.id;";

/* Whether schema.sql's CREATE TABLE of table names col: every database has it (else the store added it). */
static bool schema_column(const char *table, const char *col)
{
    char head[64], line[64];
    snprintf(head, sizeof head, "CREATE TABLE IF NOT EXISTS %s(", table);
    snprintf(line, sizeof line, "\n  %s ", col);
    const char *a = strstr(schema_sql, head), *b = a ? strstr(a, ");") : NULL, *c = a ? strstr(a, line) : NULL;
    return c && c < b;
}

/*
 * The results and seq_results rows of src's variants, a column per metric: src's own, or NULL where src is
 * older than the metric (the store added its column later; one schema.sql names is never missing, so a shard
 * without it fails as damaged). An SQLite error code, else SQLITE_OK.
 */
static int merge_results(struct hp_store *s)
{
    char cols[HS_METRIC_COLS], rsel[2 * HS_METRIC_COLS], qsel[2 * HS_METRIC_COLS], sql[6 * HS_METRIC_COLS + 1024];
    hs_metric_cols(cols, "");
    sqlite3_stmt *st;
    int rc = hs_prep(s, "SELECT count(*) FROM pragma_table_info(?1, 'src') WHERE name = ?2", &st);
    size_t nr = 0, nq = 0;
    for (int k = 0; k < HP_N_METRICS && rc == SQLITE_OK; k++) {
        const char *m = hp_metric_name((enum hp_metric)k), *sep = k ? ", " : "";
        bool in[2];
        for (int t = 0; t < 2 && rc == SQLITE_OK; t++) {
            sqlite3_reset(st);
            sqlite3_bind_text(st, 1, t ? "seq_results" : "results", -1, SQLITE_STATIC);
            sqlite3_bind_text(st, 2, m, -1, SQLITE_STATIC);
            rc = sqlite3_step(st) == SQLITE_ROW ? SQLITE_OK : sqlite3_errcode(s->db);
            in[t] = rc == SQLITE_OK && (sqlite3_column_int(st, 0) > 0 || schema_column(t ? "seq_results" : "results", m));
        }
        nr += (size_t)snprintf(rsel + nr, sizeof rsel - nr, in[0] ? "%sr.%s" : "%sNULL", sep, m);
        nq += (size_t)snprintf(qsel + nq, sizeof qsel - nq, in[1] ? "%sq.%s" : "%sNULL", sep, m);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_OK)
        return rc;
    snprintf(sql, sizeof sql,
             "INSERT OR IGNORE INTO main.results(variant_id, %s, ppl, n_tokens, n_seqs, wall_s, engine_version, "
             "    numeric_version, host, threads, kernel, created) "
             "  SELECT mv.id, %s, r.ppl, r.n_tokens, r.n_seqs, r.wall_s, r.engine_version, "
             "         r.numeric_version, r.host, r.threads, r.kernel, r.created "
             "  FROM src.results r JOIN src.variants v ON v.id = r.variant_id JOIN main.variants mv ON mv.key = v.key;"
             "INSERT OR IGNORE INTO main.seq_results(variant_id, seq, %s, n_tokens) "
             "  SELECT mv.id, q.seq, %s, q.n_tokens "
             "  FROM src.seq_results q JOIN src.variants v ON v.id = q.variant_id JOIN main.variants mv ON mv.key = v.key;",
             cols, rsel, cols, qsel);
    return hs_exec(s, sql);
}

static const char merge_rest_sql[] =
    "INSERT OR IGNORE INTO main.sweep_jobs(sweep_id, ord, variant_id, study, kind, kv, label, layer, unit, unit2, "
    "    step, sample, k) "
    "  SELECT ms.id, j.ord, mv.id, j.study, j.kind, j.kv, j.label, j.layer, j.unit, j.unit2, j.step, j.sample, j.k "
    "  FROM src.sweep_jobs j JOIN src.sweeps s ON s.id = j.sweep_id JOIN main.sweeps ms ON ms.key = s.key "
    "       JOIN src.variants v ON v.id = j.variant_id JOIN main.variants mv ON mv.key = v.key;"
    "UPDATE main.sweeps SET updated = (SELECT max(s.updated, main.sweeps.updated) FROM src.sweeps s "
    "                                  WHERE s.key = main.sweeps.key) "
    "  WHERE key IN (SELECT key FROM src.sweeps);";

/* %s: the source's gradients.from_layer, then unit_scores.estimator and base, or NULL where it predates them
 * (schemas 11 and 9: merge_grads). */
static const char merge_grads_fmt[] =
    "INSERT OR IGNORE INTO main.gradients(key, model_id, dataset_id, ablation, mask_text, n_layers, n_heads, n_seqs, "
    "    loss, grad, atp, seq_grad, wall_s, engine_version, numeric_version, host, threads, kernel, created, "
    "    from_layer) "
    "  SELECT g.key, (SELECT id FROM main.models WHERE digest = m.digest), "
    "         (SELECT id FROM main.datasets WHERE digest = d.digest), g.ablation, g.mask_text, g.n_layers, g.n_heads, "
    "         g.n_seqs, g.loss, g.grad, g.atp, g.seq_grad, g.wall_s, g.engine_version, g.numeric_version, g.host, "
    "         g.threads, g.kernel, g.created, %s "
    "  FROM src.gradients g JOIN src.models m ON m.id = g.model_id JOIN src.datasets d ON d.id = g.dataset_id "
    "  ORDER BY g.id;"
    "INSERT OR IGNORE INTO main.unit_scores(sweep_id, study, kind, kv, step, layer, unit, label, score, raw, "
    "    normalize, gradient_id, estimator, base) "
    "  SELECT ms.id, u.study, u.kind, u.kv, u.step, u.layer, u.unit, u.label, u.score, u.raw, u.normalize, mg.id, "
    "         %s, %s "
    "  FROM src.unit_scores u JOIN src.sweeps s ON s.id = u.sweep_id JOIN main.sweeps ms ON ms.key = s.key "
    "       JOIN src.gradients g ON g.id = u.gradient_id JOIN main.gradients mg ON mg.key = g.key;";

/* Whether src's table has col (added by a later schema: added_columns). An SQLite error code. */
static int source_has(struct hp_store *s, const char *table, const char *col, bool *has)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM pragma_table_info('%s', 'src') WHERE name = ?", table);
    int64_t n = 0;
    bool found;
    int rc = hs_select_int(s, sql, col, &n, &found);
    *has = rc == SQLITE_OK && n > 0;
    return rc;
}

/* The gradient studies, from a source of schema 3 on: merge_grads_fmt with the columns 9 and 11 added where the
 * source has them (a merge that dropped unit_scores.estimator labelled every estimator's scores atp). */
static int merge_grads(struct hp_store *s)
{
    bool from, est, base;
    int rc = source_has(s, "gradients", "from_layer", &from);
    if (rc == SQLITE_OK)
        rc = source_has(s, "unit_scores", "estimator", &est);
    if (rc == SQLITE_OK)
        rc = source_has(s, "unit_scores", "base", &base);
    if (rc != SQLITE_OK)
        return rc;
    char sql[sizeof merge_grads_fmt + 64];
    snprintf(sql, sizeof sql, merge_grads_fmt, from ? "g.from_layer" : "NULL", est ? "u.estimator" : "NULL",
             base ? "u.base" : "NULL");
    return hs_exec(s, sql);
}

/* A screen study's verdict (schema 10): its evaluations are sweep_jobs, its estimates unit_scores, merged above. */
static const char merge_screens_sql[] =
    "INSERT OR IGNORE INTO main.screens(sweep_id, study, kv, units, k, estimator, evaluated, audits, population, "
    "    audited, missed_max, confidence) "
    "  SELECT ms.id, x.study, x.kv, x.units, x.k, x.estimator, x.evaluated, x.audits, x.population, x.audited, "
    "         x.missed_max, x.confidence "
    "  FROM src.screens x JOIN src.sweeps s ON s.id = x.sweep_id JOIN main.sweeps ms ON ms.key = s.key;";

/* %s: the source's sep_id, n_sep and sep_token, or NULL where it predates them (schema 8: merge_roles). */
static const char merge_roles_fmt[] =
    "INSERT OR IGNORE INTO main.role_runs(key, model_id, dataset_id, causal, probe_seqs, probe_len, probe_seed, "
    "    n_queries, n_prev, n_duplicate, n_first, n_induction, wall_s, engine_version, numeric_version, host, threads, "
    "    kernel, created, sep_id, n_sep) "
    "  SELECT r.key, (SELECT id FROM main.models WHERE digest = m.digest), "
    "         (SELECT id FROM main.datasets WHERE digest = d.digest), r.causal, r.probe_seqs, r.probe_len, "
    "         r.probe_seed, r.n_queries, r.n_prev, r.n_duplicate, r.n_first, r.n_induction, r.wall_s, "
    "         r.engine_version, r.numeric_version, r.host, r.threads, r.kernel, r.created, %s, %s "
    "  FROM src.role_runs r JOIN src.models m ON m.id = r.model_id JOIN src.datasets d ON d.id = r.dataset_id "
    "  ORDER BY r.id;"
    "INSERT OR IGNORE INTO main.head_roles(run_id, layer, head, prev_token, duplicate_token, induction, "
    "    induction_offset, induction_mass, first_token, dominant_offset, dominant_mass, entropy, rare_token, "
    "    sep_token) "
    "  SELECT mr.id, h.layer, h.head, h.prev_token, h.duplicate_token, h.induction, h.induction_offset, "
    "         h.induction_mass, h.first_token, h.dominant_offset, h.dominant_mass, h.entropy, h.rare_token, %s "
    "  FROM src.head_roles h JOIN src.role_runs r ON r.id = h.run_id JOIN main.role_runs mr ON mr.key = r.key;"
    "INSERT OR IGNORE INTO main.sweep_roles(sweep_id, study, run_id) "
    "  SELECT ms.id, x.study, mr.id "
    "  FROM src.sweep_roles x JOIN src.sweeps sw ON sw.id = x.sweep_id JOIN main.sweeps ms ON ms.key = sw.key "
    "       JOIN src.role_runs r ON r.id = x.run_id JOIN main.role_runs mr ON mr.key = r.key;";
/* A finished run replaces one still training (a shard may have got further); never the other way. */
static const char merge_gates_sql[] =
    "INSERT INTO main.gate_runs(key, model_id, train_digest, train_path, train_seqs, metric, lambda, steps, lr, beta, "
    "    init, seed, n_layers, n_heads, step, objective, value, penalty, log_alpha, adam_m, adam_v, rng, n_kept, wall_s, "
    "    engine_version, numeric_version, host, threads, kernel, created, updated) "
    "  SELECT g.key, (SELECT id FROM main.models WHERE digest = m.digest), g.train_digest, g.train_path, g.train_seqs, "
    "         g.metric, g.lambda, g.steps, g.lr, g.beta, g.init, g.seed, g.n_layers, g.n_heads, g.step, g.objective, "
    "         g.value, g.penalty, g.log_alpha, g.adam_m, g.adam_v, g.rng, g.n_kept, g.wall_s, g.engine_version, "
    "         g.numeric_version, g.host, g.threads, g.kernel, g.created, g.updated "
    "  FROM src.gate_runs g JOIN src.models m ON m.id = g.model_id WHERE true ORDER BY g.id "
    "  ON CONFLICT(key) DO UPDATE SET step = excluded.step, objective = excluded.objective, value = excluded.value, "
    "    penalty = excluded.penalty, log_alpha = excluded.log_alpha, adam_m = excluded.adam_m, "
    "    adam_v = excluded.adam_v, rng = excluded.rng, n_kept = excluded.n_kept, wall_s = excluded.wall_s, "
    "    updated = excluded.updated "
    "  WHERE main.gate_runs.n_kept IS NULL AND (excluded.n_kept IS NOT NULL OR excluded.step > main.gate_runs.step);"
    "INSERT OR IGNORE INTO main.gate_heads(run_id, layer, head, label, log_alpha, gate) "
    "  SELECT mg.id, h.layer, h.head, h.label, h.log_alpha, h.gate "
    "  FROM src.gate_heads h JOIN src.gate_runs g ON g.id = h.run_id JOIN main.gate_runs mg ON mg.key = g.key;"
    "INSERT OR IGNORE INTO main.sweep_gates(sweep_id, study, idx, lambda, run_id) "
    "  SELECT ms.id, x.study, x.idx, x.lambda, mg.id "
    "  FROM src.sweep_gates x JOIN src.sweeps s ON s.id = x.sweep_id JOIN main.sweeps ms ON ms.key = s.key "
    "       JOIN src.gate_runs g ON g.id = x.run_id JOIN main.gate_runs mg ON mg.key = g.key;";

static const char merge_positions_sql[] =
    "INSERT OR IGNORE INTO main.variant_positions(variant_id, position) "
    "  SELECT mv.id, p.position FROM src.variant_positions p JOIN src.variants v ON v.id = p.variant_id "
    "       JOIN main.variants mv ON mv.key = v.key;"
    "INSERT OR IGNORE INTO main.patch_tokens(sweep_id, study, position, token, corrupt, text, corrupt_text) "
    "  SELECT ms.id, t.study, t.position, t.token, t.corrupt, t.text, t.corrupt_text "
    "  FROM src.patch_tokens t JOIN src.sweeps sw ON sw.id = t.sweep_id JOIN main.sweeps ms ON ms.key = sw.key;";

/* Head roles, from a source of schema 4 on: merge_roles_fmt with the columns 8 added where the source has them. */
static int merge_roles(struct hp_store *s)
{
    int64_t n = 0;
    bool found;
    int rc = hs_select_int(s, "SELECT count(*) FROM pragma_table_info('head_roles', 'src') WHERE name = ?",
                           "sep_token", &n, &found);
    if (rc != SQLITE_OK)
        return rc;
    char sql[sizeof merge_roles_fmt + 64];
    if (n)
        snprintf(sql, sizeof sql, merge_roles_fmt, "r.sep_id", "r.n_sep", "h.sep_token");
    else
        snprintf(sql, sizeof sql, merge_roles_fmt, "NULL", "NULL", "NULL");
    return hs_exec(s, sql);
}

/* The tables later schemas added, each merged where the source has it (a table that schema made names it):
 * by its SQL, or by its function. */
static const struct {
    const char *table, *sql;
    int (*merge)(struct hp_store *s);
} merge_optional[] = {
    {.table = "ablation_means",
     .sql = "INSERT OR IGNORE INTO main.ablation_means SELECT * FROM src.ablation_means"}, /* 2 */
    {.table = "unit_scores", .merge = merge_grads},  /* 3: the gradient studies (9, 11: their columns) */
    {.table = "sweep_roles", .merge = merge_roles}, /* 4: head roles (8: attention to [SEP]) */
    {.table = "sweep_gates", .sql = merge_gates_sql},  /* 4: gates studies */
    {.table = "pruned_heads", .sql = "INSERT OR IGNORE INTO main.pruned_heads(model_id, layer, head) "
                     "  SELECT mm.id, p.layer, p.head FROM src.pruned_heads p JOIN src.models m ON m.id = p.model_id "
                     "       JOIN main.models mm ON mm.digest = m.digest"}, /* 5: the heads pruned checkpoints lack */
    {.table = "patch_tokens", .sql = merge_positions_sql}, /* 7: patching one position at a time */
    {.table = "screens", .sql = merge_screens_sql},        /* 10: screens' verdicts */
};

/* A database file this process made, with the journal, WAL and shared-memory files beside it. */
static void remove_db_files(const char *path)
{
    static const char *const tails[] = {"", "-journal", "-wal", "-shm"};
    const size_t n = strlen(path) + 16;
    char *name = malloc(n);
    for (size_t i = 0; name && i < sizeof tails / sizeof *tails; i++) {
        snprintf(name, n, "%s%s", path, tails[i]);
        unlink(name);
    }
    if (!name)
        unlink(path);
    free(name);
}

enum hp_status hp_store_merge(const char *out, const char *const *in, int n_in, int64_t *n_added, struct hp_error *err)
{
    *n_added = 0;
    for (int i = 0; i < n_in; i++) {
        enum hp_status st = check_distinct(out, in[i], err);
        if (st == HP_OK)
            st = check_source(in[i], err);
        if (st != HP_OK)
            return st;
    }
    /* a merge into a new file that fails leaves no file: an empty database would pass for a merge that ran */
    struct stat before;
    const bool made = stat(out, &before) != 0 && errno == ENOENT;
    struct hp_store *s;
    enum hp_status st = hp_store_open(out, &s, err);
    if (st != HP_OK) {
        if (made)
            remove_db_files(out);
        return st;
    }
    for (int i = 0; i < n_in && st == HP_OK; i++) {
        /* the output may have been created just now as one of the inputs' name */
        if ((st = check_distinct(out, in[i], err)) != HP_OK)
            break;
        char *uri = hp_store_ro_uri(in[i]);
        if (!uri) {
            st = hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", in[i]);
            break;
        }
        sqlite3_stmt *a;
        int rc = hs_prep(s, "ATTACH DATABASE ? AS src", &a);
        if (rc == SQLITE_OK) {
            sqlite3_bind_text(a, 1, uri, -1, SQLITE_STATIC);
            rc = hs_step_done(a);
        }
        free(uri);
        size_t n;
        int max;
        if (rc != SQLITE_OK) {
            st = (rc & 0xff) == SQLITE_CANTOPEN && hp_store_too_long(in[i], &n, &max)
                     ? hp_fail(err, HP_ERR_IO,
                               "%s: cannot attach: path too long for SQLite (%zu bytes with its folder resolved, "
                               "SQLite takes %d; move the database to a folder with a shorter path)",
                               in[i], n, max - 1)
                     : hp_fail(err, HP_ERR_SQL, "%s: cannot attach: %s", in[i], sqlite3_errmsg(s->db));
            break;
        }
        rc = hs_exec(s, "BEGIN IMMEDIATE");
        if (rc == SQLITE_OK)
            rc = hs_exec(s, merge_sql);
        if (rc == SQLITE_OK) {
            rc = hs_exec(s, merge_variants_sql);
            *n_added += sqlite3_changes(s->db);
        }
        if (rc == SQLITE_OK)
            rc = merge_results(s);
        if (rc == SQLITE_OK)
            rc = hs_exec(s, merge_rest_sql);
        /* what later schemas added: merged where src has it */
        for (size_t k = 0; k < sizeof merge_optional / sizeof *merge_optional && rc == SQLITE_OK; k++) {
            int64_t has = 0;
            bool found;
            rc = hs_select_int(s, "SELECT count(*) FROM src.sqlite_master WHERE type = 'table' AND name = ?",
                               merge_optional[k].table, &has, &found);
            if (rc == SQLITE_OK && has)
                rc = merge_optional[k].sql ? hs_exec(s, merge_optional[k].sql) : merge_optional[k].merge(s);
        }
        if (rc == SQLITE_OK)
            rc = hs_exec(s, "COMMIT");
        if (rc != SQLITE_OK) {
            char *what;
            st = hp_path_make(&what, err, "merging %s", in[i]);
            if (st == HP_OK)
                st = hs_sql_fail(s, rc, what, err);
            free(what);
            hs_exec(s, "ROLLBACK");
        }
        hs_exec(s, "DETACH DATABASE src");
    }
    hp_store_close(s);
    if (st != HP_OK && made)
        remove_db_files(out);
    return st;
}

