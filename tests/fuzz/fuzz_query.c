/*
 * fuzz_query -- a results database as `headprune query` reads it
 * (engine/query*.c through hp_query: every kind of hp_query_kinds but sql,
 * heads also as a matrix, of a named study and with --gates, and compare of
 * sweep 1 with the newest, per unit and per layer).
 *
 * Input, either:
 *  - a whole SQLite file (any first byte but 'S'), written to a scratch path;
 *  - 'S' then SQL run on an empty database of the current schema (made once
 *    by hp_store_open): INSERTs of odd values reach the query logic far
 *    sooner than bit flips in a B-tree. The SQL may only read and write that
 *    one file (an authorizer refuses ATTACH, PRAGMA and the like) and is
 *    stopped after a bounded number of steps.
 * Then every query kind runs against it, with the plan's metric and each
 * named one. A table handed back must be whole (every column named).
 */
#include "fuzz_common.h"
#include "headprune.h"
#include "query.h" // hp_query_kinds: every kind, gates among them
#include "store.h"

#include <sqlite3.h>

#define MAX_INPUT (256 << 10)

static char db_path[600], side[3][640];
static void *tmpl;
static size_t tmpl_len;

static void clear_files(void)
{
    unlink(db_path);
    for (int i = 0; i < 3; i++)
        unlink(side[i]);
}

static void *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        abort();
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(n > 0 ? (size_t)n : 1);
    if (!p || fread(p, 1, (size_t)n, f) != (size_t)n)
        abort();
    fclose(f);
    *len = (size_t)n;
    return p;
}

static void free_tmpl(void) { free(tmpl); }

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    snprintf(db_path, sizeof db_path, "%s/results.db", fz_scratch());
    snprintf(side[0], sizeof side[0], "%s-wal", db_path);
    snprintf(side[1], sizeof side[1], "%s-shm", db_path);
    snprintf(side[2], sizeof side[2], "%s-journal", db_path);
    clear_files();
    struct hp_store *s = NULL;
    struct hp_error err = {{0}};
    if (hp_store_open(db_path, &s, &err) != HP_OK) {
        fprintf(stderr, "fuzz_query: cannot make the template database: %s\n", err.msg);
        abort();
    }
    hp_store_close(s);
    /* a rollback journal, not WAL: the template is then one self-contained file */
    sqlite3 *db;
    if (sqlite3_open(db_path, &db) != SQLITE_OK ||
        sqlite3_exec(db, "PRAGMA journal_mode = DELETE", NULL, NULL, NULL) != SQLITE_OK)
        abort();
    sqlite3_close(db);
    tmpl = read_all(db_path, &tmpl_len);
    atexit(free_tmpl);
    return 0;
}

/* What fuzz SQL may do: read and change rows and tables of main, nothing else. */
static int authorize(void *u, int action, const char *a, const char *b, const char *c, const char *d)
{
    (void)u;
    (void)b;
    (void)d;
    switch (action) {
    case SQLITE_INSERT: case SQLITE_UPDATE: case SQLITE_DELETE: case SQLITE_READ: case SQLITE_SELECT:
    case SQLITE_RECURSIVE: case SQLITE_TRANSACTION: case SQLITE_SAVEPOINT:
    case SQLITE_CREATE_TABLE: case SQLITE_DROP_TABLE: case SQLITE_CREATE_INDEX: case SQLITE_DROP_INDEX:
    case SQLITE_CREATE_VIEW: case SQLITE_DROP_VIEW: case SQLITE_ALTER_TABLE:
        return c && strcmp(c, "main") != 0 && strcmp(c, "temp") != 0 ? SQLITE_DENY : SQLITE_OK;
    case SQLITE_FUNCTION:
        return b && !strcmp(b, "load_extension") ? SQLITE_DENY : SQLITE_OK;
    default:
        (void)a;
        return SQLITE_DENY;
    }
}

static int progress(void *u)
{
    return ++*(int *)u > 2000; /* x 1000 VM steps */
}

static void run_sql(const uint8_t *sql, size_t n)
{
    fz_write(db_path, tmpl, tmpl_len);
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK)
        abort();
    sqlite3_exec(db, "PRAGMA synchronous = OFF; PRAGMA journal_mode = MEMORY", NULL, NULL, NULL);
    sqlite3_limit(db, SQLITE_LIMIT_ATTACHED, 0);
    sqlite3_limit(db, SQLITE_LIMIT_LENGTH, 1 << 20);
    int steps = 0;
    sqlite3_progress_handler(db, 1000, progress, &steps);
    sqlite3_set_authorizer(db, authorize, NULL);
    char *text = fz_strndup(sql, n);
    sqlite3_exec(db, text, NULL, NULL, NULL);
    free(text);
    sqlite3_close(db);
}

static void check_table(const struct hp_table *t)
{
    FZ_CHECK(t->n_cols >= 1 && t->n_rows >= 0, "table of %d x %d", t->n_rows, t->n_cols);
    for (int c = 0; c < t->n_cols; c++)
        FZ_CHECK(t->cols[c] != NULL, "column %d unnamed", c);
    volatile size_t sink = 0;
    for (long i = 0; i < (long)t->n_rows * t->n_cols; i++)
        if (t->cells[i])
            sink += strlen(t->cells[i]);
    (void)sink;
}

static void query_opts(const struct hp_query_opts *o)
{
    struct hp_table *t = NULL;
    struct hp_error err = {{0}};
    if (hp_query(db_path, o, &t, &err) != HP_OK) {
        FZ_CHECK(t == NULL, "a failed query handed back a table");
        FZ_CHECK_ERR(err);
        return;
    }
    FZ_CHECK(t != NULL, "no table");
    check_table(t);
    hp_table_free(t);
}

static void query(enum hp_query_kind kind, const char *metric, int top)
{
    struct hp_query_opts o = {.kind = kind, .metric = metric, .top = top, .eps = 0.01};
    query_opts(&o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > MAX_INPUT)
        return 0;
    clear_files();
    if (data[0] == 'S')
        run_sql(data + 1, size - 1);
    else
        fz_write(db_path, data, size);
    for (int k = 0; k < HP_QUERY_KIND_COUNT; k++) /* every kind of the table but sql (no statement here) */
        if (!(hp_query_kinds[k].takes & HP_QUERY_TAKES_SQL))
            query(hp_query_kinds[k].kind, NULL, hp_query_kinds[k].kind == HP_QUERY_HEADS ? 3 : 0);
    static const char *const metrics[] = {"loss", "kl", "acc", "cos"};
    for (int i = 0; i < 4; i++) {
        query(HP_QUERY_HEADS, metrics[i], 0);
        query(HP_QUERY_CURVE, metrics[i], 0);
    }
    /* the shapes and studies a user names: a matrix, a KV study, sweep 1 against the newest
     * (the seeds' databases hold one sweep or two) per unit, per layer and the most different */
    const struct hp_query_opts more[] = {
        {.kind = HP_QUERY_HEADS, .matrix = true},
        {.kind = HP_QUERY_HEADS, .study = "single-kv", .matrix = true},
        {.kind = HP_QUERY_SETS, .study = "explicit", .top = 1},
        {.kind = HP_QUERY_COMPARE, .sweep_id = 1},
        {.kind = HP_QUERY_COMPARE, .sweep_id = 1, .by_layer = true, .metric = "kl"},
        {.kind = HP_QUERY_COMPARE, .sweep_id = 1, .top = 2, .study = "single-kv"},
        {.kind = HP_QUERY_CURVE, .study = "iterative"},
        {.kind = HP_QUERY_CURVE, .study = "iterative-grad"},
        {.kind = HP_QUERY_IMPORTANCE, .study = "importance-kv", .top = 2},
        {.kind = HP_QUERY_ATTRIBUTION, .study = "attribution-kv", .top = 1},
        {.kind = HP_QUERY_HEADS, .study = "single-kv"},
        {.kind = HP_QUERY_HEADS, .gates = true},
        {.kind = HP_QUERY_HEADS, .gates = true, .matrix = true},
    };
    for (size_t i = 0; i < sizeof more / sizeof *more; i++)
        query_opts(&more[i]);
    clear_files();
    return 0;
}
