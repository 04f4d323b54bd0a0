/*
 * test_store.c -- the results database refuses what it cannot safely use and
 * leaves it as it was: a newer schema, a file that is not SQLite, an SQLite
 * file that is not ours, a missing or read-only folder, a disk that fills.
 */
#define _DEFAULT_SOURCE
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "headprune.h"
#include "testutil.h"
#include "store_int.h"

static char tmp[64], db[128];

static void setup(void)
{
    tu_mkdtemp(tmp, sizeof tmp, "store");
    snprintf(db, sizeof db, "%s/r.db", tmp);
}

static void teardown(void)
{
    tu_rmrf(tmp);
}

TestSuite(store, .init = setup, .fini = teardown);

static void sql(const char *path, const char *q)
{
    sqlite3 *h;
    cr_assert_eq(sqlite3_open(path, &h), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(h, q, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(h));
    sqlite3_close(h);
}

static void expect_refused(const char *words)
{
    size_t n0, n1;
    char *before = tu_slurp(db, &n0);
    struct hp_error err = {0};
    struct hp_store *s = NULL;
    enum hp_status st = hp_store_open(db, &s, &err);
    cr_assert_neq(st, HP_OK);
    cr_assert_null(s);
    cr_assert(strstr(err.msg, db), "message does not name the database: %s", err.msg);
    cr_assert(strstr(err.msg, words), "message does not say '%s': %s", words, err.msg);
    char *after = tu_slurp(db, &n1);
    cr_assert(n0 == n1 && memcmp(before, after, n0) == 0, "the database file changed");
    free(before);
    free(after);
}

Test(store, creates_schema_and_reopens)
{
    struct hp_error err;
    struct hp_store *s;
    cr_assert_eq(hp_store_open(db, &s, &err), HP_OK, "%s", err.msg);
    hp_store_close(s);
    cr_assert_eq(hp_store_open(db, &s, &err), HP_OK, "%s", err.msg);
    hp_store_close(s);
    sqlite3 *h;
    sqlite3_open(db, &h);
    sqlite3_stmt *q;
    sqlite3_prepare_v2(h, "PRAGMA journal_mode", -1, &q, NULL);
    cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
    /* WAL while open; closed by its last writer, it is back to a rollback
     * journal, so readers need (and create) no -wal/-shm files */
    cr_assert_str_eq((const char *)sqlite3_column_text(q, 0), "delete");
    sqlite3_finalize(q);
    sqlite3_close(h);
}

Test(store, newer_schema_is_refused_untouched)
{
    struct hp_error err;
    struct hp_store *s;
    cr_assert_eq(hp_store_open(db, &s, &err), HP_OK, "%s", err.msg);
    hp_store_close(s);
    char q[256], words[64];
    snprintf(q, sizeof q, "PRAGMA journal_mode = DELETE; UPDATE meta SET value = '%d' WHERE key = 'schema_version'",
             HP_SCHEMA_VERSION + 1);
    sql(db, q);
    snprintf(words, sizeof words, "newer headprune (schema %d", HP_SCHEMA_VERSION + 1);
    expect_refused(words);
}

static long long one_int(const char *q)
{
    sqlite3 *h;
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(h, q, -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(h));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    long long v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    return v;
}

Test(store, schema_1_database_is_brought_up_to_date)
{
    struct hp_error err;
    struct hp_store *s;
    cr_assert_eq(hp_store_open(db, &s, &err), HP_OK, "%s", err.msg);
    hp_store_close(s);
    /* what a schema 1 database looked like: no ablation_means */
    sql(db, "DROP TABLE ablation_means; UPDATE meta SET value = '1' WHERE key = 'schema_version';"
            "INSERT INTO models(digest, path, model_type, n_layers, n_heads, n_kv_heads, d_head, n_params)"
            " VALUES ('d', 'p', 'gpt2', 1, 1, 1, 1, 1)");
    cr_assert_eq(hp_store_open(db, &s, &err), HP_OK, "%s", err.msg);
    hp_store_close(s);
    cr_assert_eq(one_int("SELECT count(*) FROM sqlite_master WHERE name = 'ablation_means'"), 1);
    cr_assert_eq(one_int("SELECT value FROM meta WHERE key = 'schema_version'"), HP_SCHEMA_VERSION);
    cr_assert_eq(one_int("SELECT count(*) FROM models"), 1, "existing rows kept");
}

Test(store, not_sqlite_is_refused_untouched)
{
    FILE *f = fopen(db, "w");
    fputs("these are not the results you are looking for\n", f);
    fclose(f);
    expect_refused("not a headprune database");
}

Test(store, foreign_sqlite_is_refused_untouched)
{
    sql(db, "CREATE TABLE t(x); INSERT INTO t VALUES (1)");
    expect_refused("not a headprune database");
}

Test(store, missing_folder)
{
    struct hp_error err = {0};
    struct hp_store *s;
    char p[160];
    snprintf(p, sizeof p, "%s/no/such/dir/r.db", tmp);
    cr_assert_neq(hp_store_open(p, &s, &err), HP_OK);
    cr_assert(strstr(err.msg, "does not exist"), "%s", err.msg);
}

Test(store, read_only_folder)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "chattr +i %s 2>/dev/null", tmp);
    if (system(cmd) != 0) {
        cr_skip_test("chattr +i is not available here, so a read-only folder cannot be made as root");
        return;
    }
    struct hp_error err = {0};
    struct hp_store *s;
    cr_assert_neq(hp_store_open(db, &s, &err), HP_OK);
    cr_assert(strstr(err.msg, db), "%s", err.msg);
    cr_assert(strstr(err.msg, "not writable") || strstr(err.msg, "read-only") || strstr(err.msg, "cannot"), "%s",
              err.msg);
    cr_assert(access(db, F_OK) != 0, "a database file appeared in a read-only folder");
}

Test(store, merge_refuses_a_newer_shard_and_leaves_out_unchanged)
{
    char shard[160];
    snprintf(shard, sizeof shard, "%s/shard.db", tmp);
    struct hp_error err;
    struct hp_store *s;
    cr_assert_eq(hp_store_open(shard, &s, &err), HP_OK, "%s", err.msg);
    hp_store_close(s);
    sql(shard, "UPDATE meta SET value = '7' WHERE key = 'schema_version'");
    const char *in[] = {shard};
    int64_t added;
    cr_assert_neq(hp_store_merge(db, in, 1, &added, &err), HP_OK);
    cr_assert(strstr(err.msg, "shard.db") && strstr(err.msg, "newer"), "%s", err.msg);
    cr_assert(access(db, F_OK) != 0, "merge created its output before refusing");
}
