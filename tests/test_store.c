/*
 * test_store.c -- the results database refuses what it cannot safely use and
 * leaves it as it was: a newer schema, a file that is not SQLite, an SQLite
 * file that is not ours, a missing or read-only folder, a disk that fills; and
 * writes the plain rows it is handed, with the kernel and threads its caller names.
 */
#define _DEFAULT_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "headprune.h"
#include "testutil.h"
#include "store.h"

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

/* A table of the schema that is a view in the file (whose rows might never end): the writer refuses it too */
Test(store, a_table_that_is_a_view_is_refused)
{
    struct hp_error err;
    struct hp_store *s;
    cr_assert_eq(hp_store_open(db, &s, &err), HP_OK, "%s", err.msg);
    hp_store_close(s);
    sql(db, "PRAGMA foreign_keys = OFF; ALTER TABLE variants RENAME TO v0;"
            "CREATE VIEW variants AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
            "SELECT v0.* FROM v0, c WHERE c.x < 0");
    expect_refused("not a headprune database (variants is a view, not a table)");
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
    char newer[128];
    snprintf(newer, sizeof newer, "UPDATE meta SET value = '%d' WHERE key = 'schema_version'", HP_SCHEMA_VERSION + 1);
    sql(shard, newer);
    const char *in[] = {shard};
    int64_t added;
    cr_assert_neq(hp_store_merge(db, in, 1, &added, &err), HP_OK);
    cr_assert(strstr(err.msg, "shard.db") && strstr(err.msg, "newer"), "%s", err.msg);
    cr_assert(access(db, F_OK) != 0, "merge created its output before refusing");
}

/* A merge that fails once it has begun (a shard whose tables lack a column) leaves no file where there was none,
 * and an existing output as it was. */
Test(store, a_failed_merge_into_a_new_file_leaves_nothing)
{
    char shard[160], wal[200];
    snprintf(shard, sizeof shard, "%s/shard.db", tmp);
    struct hp_error err = {0};
    struct hp_store *s;
    cr_assert_eq(hp_store_open(shard, &s, &err), HP_OK, "%s", err.msg);
    hp_store_close(s);
    sql(shard, "DROP VIEW effects; DROP VIEW baselines; DROP VIEW jobs; ALTER TABLE seq_results RENAME COLUMN kl TO kk");
    const char *in[] = {shard};
    int64_t added;
    cr_assert_neq(hp_store_merge(db, in, 1, &added, &err), HP_OK);
    cr_assert(strstr(err.msg, "merging") && strstr(err.msg, "shard.db"), "%s", err.msg);
    cr_assert(access(db, F_OK) != 0, "a failed merge left %s behind", db);
    snprintf(wal, sizeof wal, "%s-wal", db);
    cr_assert(access(wal, F_OK) != 0, "a failed merge left %s behind", wal);
    /* an output that was there stays */
    cr_assert_eq(hp_store_open(db, &s, &err), HP_OK, "%s", err.msg);
    hp_store_close(s);
    cr_assert_neq(hp_store_merge(db, in, 1, &added, &err), HP_OK);
    cr_assert(access(db, F_OK) == 0, "the existing output was removed");
}

/* A file with a trigger (which would run on every write: one whose work never ends hung run) or a schema table
 * that is a view: refused by the writer, by a reader and as a merge's shard, naming it, the files unchanged. */
Test(store, a_trigger_or_a_view_in_place_of_a_table_is_refused_everywhere)
{
    struct hp_error err;
    struct hp_store *s;
    cr_assert_eq(hp_store_open(db, &s, &err), HP_OK, "%s", err.msg);
    hp_store_close(s);
    sql(db, "CREATE TRIGGER tr AFTER UPDATE ON sweeps BEGIN SELECT (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL "
            "SELECT x + 1 FROM c) SELECT max(x) FROM c); END");
    expect_refused("not a headprune database (it holds a trigger, 'tr', which would run on every write");
    sqlite3 *h = (sqlite3 *)1;
    cr_assert_eq(hp_store_open_read(db, 1000, 0, &h, &err), HP_ERR_FORMAT);
    cr_assert_null(h);
    cr_assert(strstr(err.msg, "it holds a trigger, 'tr'"), "%s", err.msg);
    char out[160];
    snprintf(out, sizeof out, "%s/merged.db", tmp);
    const char *in[] = {db};
    int64_t added;
    cr_assert_neq(hp_store_merge(out, in, 1, &added, &err), HP_OK);
    cr_assert(strstr(err.msg, db) && strstr(err.msg, "it holds a trigger, 'tr'"), "%s", err.msg);
    cr_assert(access(out, F_OK) != 0, "merge created its output before refusing");
    sql(db, "DROP TRIGGER tr; PRAGMA foreign_keys = OFF; ALTER TABLE results RENAME TO r0;"
            "CREATE VIEW results AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
            "SELECT r0.* FROM r0, c WHERE c.x < 0");
    cr_assert_neq(hp_store_merge(out, in, 1, &added, &err), HP_OK);
    cr_assert(strstr(err.msg, "not a headprune database (results is a view, not a table)"), "%s", err.msg);
    cr_assert(access(out, F_OK) != 0, "merge created its output before refusing");
}

// --- database paths are files ----------------------------------------------------

/* A store made through the store, with one finished variant (SQL rows as the runner writes them). */
static void make_shard(const char *path)
{
    struct hp_error err;
    struct hp_store *s;
    cr_assert_eq(hp_store_open(path, &s, &err), HP_OK, "%s", err.msg);
    hp_store_close(s);
    sql(path, "INSERT INTO models VALUES (1, 'md', 'm', 'gpt2', 2, 2, 2, 8, 100);"
              "INSERT INTO datasets VALUES (1, 'dd', 'd.npy', 4, 8);"
              "INSERT INTO variants VALUES (1, 'vk', 1, 1, 'zero', x'01', '0.0', 1);"
              "INSERT INTO results(variant_id, loss, n_tokens, n_seqs, wall_s, engine_version, numeric_version, host,"
              " threads, kernel, created) VALUES (1, 2.5, 32, 4, 0.1, 'v', 1, 'h', 1, 'k', 'now')");
}

Test(store, uri_like_names_are_files)
{
    /* Debian's SQLite reads "file:" names as URIs even without SQLITE_OPEN_URI,
     * and ":memory:" is special everywhere: each must become a file of that name */
    cr_assert_eq(chdir(tmp), 0);
    const char *names[] = {":memory:", "file:x.db", "file:m.db?mode=memory", "file:%3Amemory%3A"};
    for (int i = 0; i < 4; i++) {
        struct hp_error err;
        struct hp_store *s;
        cr_assert_eq(hp_store_open(names[i], &s, &err), HP_OK, "%s: %s", names[i], err.msg);
        hp_store_close(s);
        cr_assert_eq(access(names[i], F_OK), 0, "no file named '%s' was written", names[i]);
    }
    cr_assert(access("x.db", F_OK) != 0 && access("m.db", F_OK) != 0, "a URI was interpreted");

    make_shard("r.db");
    const char *in[] = {"r.db"};
    int64_t added = 0;
    struct hp_error err;
    cr_assert_eq(hp_store_merge("file:m.db?mode=memory", in, 1, &added, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(added, 1);
    sqlite3 *h;
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_open_v2("./file:m.db?mode=memory", &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(h, "SELECT count(*) FROM results", -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_eq(sqlite3_column_int(st, 0), 1, "the merged result is not in the file");
    sqlite3_finalize(st);
    sqlite3_close(h);

    struct hp_store *s;
    cr_assert_neq(hp_store_open("", &s, &err), HP_OK, "an empty path opened (SQLite's temporary database)");
    cr_assert(strstr(err.msg, "empty"), "%s", err.msg);
}

Test(store, a_path_that_is_not_a_regular_file_is_refused)
{
    char fifo[160];
    snprintf(fifo, sizeof fifo, "%s/pipe", tmp);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    /* an older headprune may have left one: then it must stay as it is */
    struct stat j0, j1;
    bool had_journal = stat("/dev/null-journal", &j0) == 0;
    const char *paths[] = {"/dev/null", fifo, tmp};
    for (int i = 0; i < 3; i++) {
        struct hp_error err = {0};
        struct hp_store *s = NULL;
        cr_assert_neq(hp_store_open(paths[i], &s, &err), HP_OK, "%s opened", paths[i]);
        cr_assert_null(s);
        cr_assert(strstr(err.msg, paths[i]) && (strstr(err.msg, "not a regular file") || strstr(err.msg, "folder")),
                  "%s", err.msg);
    }
    bool has_journal = stat("/dev/null-journal", &j1) == 0;
    cr_assert_eq(has_journal, had_journal, "/dev/null-journal was created");
    cr_assert(!had_journal || (j0.st_mtime == j1.st_mtime && j0.st_size == j1.st_size), "/dev/null-journal was written");
}

Test(store, merging_a_file_into_itself_is_refused_at_once)
{
    make_shard(db);
    char dot[200], hard[160];
    snprintf(dot, sizeof dot, "%s/./r.db", tmp);
    snprintf(hard, sizeof hard, "%s/hard.db", tmp);
    cr_assert_eq(link(db, hard), 0);
    const char *same[] = {db, dot, hard};
    for (int i = 0; i < 3; i++) {
        struct hp_error err;
        int64_t added;
        time_t t0 = time(NULL);
        cr_assert_neq(hp_store_merge(db, &same[i], 1, &added, &err), HP_OK, "%s merged into itself", same[i]);
        cr_assert_lt(time(NULL) - t0, 5, "refusing took %lld s (the busy timeout?)", (long long)(time(NULL) - t0));
        cr_assert(strstr(err.msg, same[i]) && strstr(err.msg, "itself"), "%s", err.msg);
    }
    cr_assert_eq(one_int("SELECT count(*) FROM results"), 1);
}

// --- readers that cannot write beside the database ----------------------------------------

/*
 * Run check(arg) in a child that cannot write tmp: as root (which ignores
 * permissions) it drops to nobody; otherwise tmp is made read-only for the
 * time. Returns the child's exit status: 0 when check returned 0.
 */
static int as_reader(int (*check)(const char *), const char *arg)
{
    bool root = geteuid() == 0;
    cr_assert_eq(chmod(tmp, root ? 0755 : 0555), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        if (root && (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0))
            _exit(99);
        _exit(check(arg));
    }
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert_eq(chmod(tmp, 0700), 0);
    cr_assert(WIFEXITED(st), "the reader died of a signal");
    cr_assert_neq(WEXITSTATUS(st), 99, "could not drop privileges");
    return WEXITSTATUS(st);
}

static bool side_files(void)
{
    char p[200];
    snprintf(p, sizeof p, "%s-wal", db);
    bool wal = access(p, F_OK) == 0;
    snprintf(p, sizeof p, "%s-shm", db);
    return wal || access(p, F_OK) == 0;
}

/* NULL: the reader must succeed; else it must fail saying this */
static const char *g_expect;

static int reader_result(enum hp_status st, const struct hp_error *err)
{
    if (st != HP_OK)
        fprintf(stderr, "reader: %s\n", err->msg);
    if (!g_expect)
        return st == HP_OK ? 0 : 1;
    return st != HP_OK && strstr(err->msg, g_expect) ? 0 : 1;
}

static int query_sweeps(const char *path)
{
    struct hp_query_opts o = {.kind = HP_QUERY_SWEEPS, .eps = 0.01};
    struct hp_table *t = NULL;
    struct hp_error err = {0};
    enum hp_status st = hp_query(path, &o, &t, &err);
    hp_table_free(t);
    return reader_result(st, &err);
}

static int merge_from(const char *path)
{
    char out[64];
    snprintf(out, sizeof out, "/tmp/hp_store_out_%d.db", (int)getpid());
    const char *in[] = {path};
    int64_t added = 0;
    struct hp_error err = {0};
    enum hp_status st = hp_store_merge(out, in, 1, &added, &err);
    char p[80];
    remove(out);
    snprintf(p, sizeof p, "%s-journal", out);
    remove(p);
    if (st == HP_OK && added != 1)
        return 2;
    return reader_result(st, &err);
}

Test(store, a_wal_database_is_read_without_write_access_to_its_folder)
{
    make_shard(db);
    sql(db, "PRAGMA journal_mode = WAL"); /* at rest in WAL mode, as an older headprune or a crash leaves it */
    cr_assert(!side_files());
    cr_assert_eq(as_reader(query_sweeps, db), 0, "query failed for a reader that cannot write the folder");
    cr_assert_eq(as_reader(merge_from, db), 0, "merge failed for a reader that cannot write the folder");
    cr_assert(!side_files(), "a reader left -wal/-shm files");
}

Test(store, a_reader_that_cannot_read_beside_a_writer_says_so)
{
    make_shard(db);
    sql(db, "PRAGMA journal_mode = WAL");
    /* a -wal file means a writer may be at work: no immutable shortcut, and SQLite cannot make the -shm */
    char p[200];
    snprintf(p, sizeof p, "%s-wal", db);
    tu_spit(p, "", 0);
    g_expect = "r.db: cannot be read without writing beside it";
    cr_assert_eq(as_reader(query_sweeps, db), 0, "query did not say why it cannot read");
    cr_assert_eq(as_reader(merge_from, db), 0, "merge did not say why it cannot read");
}

Test(store, the_last_writer_leaves_a_rollback_journal_database)
{
    struct hp_error err;
    struct hp_store *a, *b;
    cr_assert_eq(hp_store_open(db, &a, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_store_open(db, &b, &err), HP_OK, "%s", err.msg);
    hp_store_close(a); /* b still has it open: stays WAL */
    cr_assert(side_files(), "WAL mode was left while another worker had the database open");
    hp_store_close(b);
    /* a reader (read-only: it cannot checkpoint or delete them) of a WAL
     * database at rest would create -wal/-shm and leave them, owned by it */
    cr_assert_eq(query_sweeps(db), 0);
    cr_assert(!side_files(), "a reader left -wal/-shm files beside a database at rest");
}

/*
 * The store writes the rows it is handed, field for field, and records the
 * kernel and threads its caller says ran the variant (not a global of its
 * own); a reader opened through the store sees them.
 */
Test(store, rows_are_written_as_given)
{
    struct hp_error err = {0};
    struct hp_store *s = NULL;
    cr_assert_eq(hp_store_open(db, &s, &err), HP_OK, "%s", err.msg);
    struct hp_store_sweep_row row = {
        .plan_digest = "p0", .model_digest = "m0", .data_digest = "d0", .name = "rows", .plan_path = "/x/p.yaml",
        .plan_text = "name: rows\n", .ablation = "mean-pos", .metric = "kl", .model_path = "/x/m",
        .model_type = "llama", .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .d_head = 8, .n_params = 1234,
        .data_path = "/x/d.npy", .n_seqs = 2, .seq_len = 5,
    };
    int64_t sweep = 0;
    cr_assert_eq(hp_store_sweep(s, &row, &sweep, &err), HP_OK, "%s", err.msg);
    float gate[8] = {1, 1, 0, 0, 1, 1, 1, 0}; // kv:0.1 and 1.3 ablated
    struct hp_store_job j = {
        .sweep_id = sweep, .ord = 7, .study = "single-kv", .kind = "single", .kv = true, .label = "kv:0.1",
        .layer = 0, .unit = 1, .unit2 = -1, .step = 0, .sample = 0, .k = 1, .key = "k0", .ablation = "mean-pos",
        .mask_text = "0.2,0.3,1.3", .n_layers = 2, .n_heads = 4, .gate = gate, .model_digest = "m0",
        .data_digest = "d0",
    };
    double seq_loss[2] = {1, 2}, seq_acc[2] = {0.5, 0.5}, seq_kl[2] = {0.1, 0.2}, seq_cos[2] = {0, 0};
    int64_t seq_tokens[2] = {4, 4};
    struct hp_metrics mt = {.n_seqs = 2, .n_tokens = 8, .has_loss = true, .has_kl = true, .has_acc = true, .loss = 1.5, .ppl = 4.48, .acc = 0.5,
                            .kl = 0.15, .seq_loss = seq_loss, .seq_acc = seq_acc, .seq_kl = seq_kl,
                            .seq_cos = seq_cos, .seq_tokens = seq_tokens};
    cr_assert_eq(hp_store_put(s, &j, &mt, 0.25, 3, "testkernel", &err), HP_OK, "%s", err.msg);
    hp_store_close(s);

    cr_assert_eq(one_int("SELECT count(*) FROM results WHERE threads = 3 AND kernel = 'testkernel' AND cos IS NULL"), 1);
    cr_assert_eq(one_int("SELECT count(*) FROM variants WHERE n_ablated = 3 AND hex(mask) = '8C' AND ablation = 'mean-pos'"), 1,
                 "mask bits: gates 2, 3 and 7 are 0 -> bits 2, 3, 7 -> 0x8C");
    cr_assert_eq(one_int("SELECT count(*) FROM sweep_jobs WHERE ord = 7 AND study = 'single-kv' AND kind = 'single' "
                         "AND kv = 1 AND label = 'kv:0.1' AND layer = 0 AND unit = 1 AND unit2 IS NULL AND k = 1"), 1);
    cr_assert_eq(one_int("SELECT count(*) FROM sweeps s JOIN models m ON m.id = s.model_id JOIN datasets d ON "
                         "d.id = s.dataset_id JOIN plans p ON p.id = s.plan_id WHERE s.metric = 'kl' AND "
                         "s.ablation = 'mean-pos' AND m.n_kv_heads = 2 AND m.n_params = 1234 AND m.model_type = "
                         "'llama' AND d.seq_len = 5 AND p.path = '/x/p.yaml' AND p.text = 'name: rows\n'"), 1);
    cr_assert_eq(one_int("SELECT count(*) FROM seq_results WHERE variant_id = 1 AND cos IS NULL"), 2);

    sqlite3 *h = NULL;
    cr_assert_eq(hp_store_open_read(db, 1000, 0, &h, &err), HP_OK, "%s", err.msg);
    cr_assert_neq(sqlite3_exec(h, "DELETE FROM results", NULL, NULL, NULL), SQLITE_OK, "a reader must not write");
    sqlite3_close(h);
}

// A reader opened through the store refuses what it cannot read, closing its handle.
Test(store, open_read_refuses_foreign_and_newer)
{
    sql(db, "CREATE TABLE t(x)");
    struct hp_error err = {0};
    sqlite3 *h = (sqlite3 *)1;
    cr_assert_eq(hp_store_open_read(db, 1000, 0, &h, &err), HP_ERR_FORMAT);
    cr_assert_null(h);
    cr_assert(strstr(err.msg, "not a headprune database"), "%s", err.msg);
    sql(db, "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT); INSERT INTO meta VALUES ('schema_version', '99')");
    h = (sqlite3 *)1;
    cr_assert_eq(hp_store_open_read(db, 1000, 0, &h, &err), HP_ERR_UNSUPPORTED);
    cr_assert_null(h);
    cr_assert(strstr(err.msg, "newer headprune"), "%s", err.msg);
}

Test(store, schema_2_database_gains_the_gradient_tables)
{
    struct hp_error err;
    struct hp_store *s;
    cr_assert_eq(hp_store_open(db, &s, &err), HP_OK, "%s", err.msg);
    hp_store_close(s);
    /* what a schema 2 database looked like: no gradients, no unit_scores */
    sql(db, "DROP TABLE unit_scores; DROP TABLE gradients; UPDATE meta SET value = '2' WHERE key = 'schema_version';"
            "INSERT INTO models(digest, path, model_type, n_layers, n_heads, n_kv_heads, d_head, n_params)"
            " VALUES ('d', 'p', 'gpt2', 1, 1, 1, 1, 1)");
    cr_assert_eq(hp_store_open(db, &s, &err), HP_OK, "%s", err.msg);
    hp_store_close(s);
    cr_assert_eq(one_int("SELECT count(*) FROM sqlite_master WHERE name IN ('gradients', 'unit_scores')"), 2);
    cr_assert_eq(one_int("SELECT value FROM meta WHERE key = 'schema_version'"), HP_SCHEMA_VERSION);
    cr_assert_eq(one_int("SELECT count(*) FROM models"), 1, "existing rows kept");
    /* and again: idempotent */
    cr_assert_eq(hp_store_open(db, &s, &err), HP_OK, "%s", err.msg);
    hp_store_close(s);
    cr_assert_eq(one_int("SELECT value FROM meta WHERE key = 'schema_version'"), HP_SCHEMA_VERSION);
}

Test(store, schema_3_database_gains_the_roles_and_gate_tables)
{
    struct hp_error err;
    struct hp_store *s;
    cr_assert_eq(hp_store_open(db, &s, &err), HP_OK, "%s", err.msg);
    hp_store_close(s);
    /* what a schema 3 database looked like: no head roles, no gates studies */
    sql(db, "DROP TABLE sweep_roles; DROP TABLE head_roles; DROP TABLE role_runs;"
            "DROP TABLE sweep_gates; DROP TABLE gate_heads; DROP TABLE gate_runs;"
            "UPDATE meta SET value = '3' WHERE key = 'schema_version';"
            "INSERT INTO models(digest, path, model_type, n_layers, n_heads, n_kv_heads, d_head, n_params)"
            " VALUES ('d', 'p', 'gpt2', 1, 1, 1, 1, 1)");
    cr_assert_eq(hp_store_open(db, &s, &err), HP_OK, "%s", err.msg);
    hp_store_close(s);
    cr_assert_eq(one_int("SELECT count(*) FROM sqlite_master WHERE name IN ('role_runs', 'head_roles', 'sweep_roles')"),
                 3);
    cr_assert_eq(one_int("SELECT count(*) FROM sqlite_master WHERE name IN ('gate_runs', 'gate_heads', 'sweep_gates')"),
                 3);
    cr_assert_eq(one_int("SELECT value FROM meta WHERE key = 'schema_version'"), HP_SCHEMA_VERSION);
    cr_assert_eq(one_int("SELECT count(*) FROM models"), 1, "existing rows kept");
    cr_assert_eq(hp_store_open(db, &s, &err), HP_OK, "%s", err.msg);
    hp_store_close(s);
    cr_assert_eq(one_int("SELECT value FROM meta WHERE key = 'schema_version'"), HP_SCHEMA_VERSION);
}

/* A roles computation of a 2 x 2 model whose head 1.1 the checkpoint lacks, stored once, linked, merged. */
Test(store, roles_are_written_as_given_once_and_merged)
{
    struct hp_error err = {0};
    struct hp_store *s = NULL;
    cr_assert_eq(hp_store_open(db, &s, &err), HP_OK, "%s", err.msg);
    struct hp_store_sweep_row row = {
        .plan_digest = "p0", .model_digest = "m0", .data_digest = "d0", .name = "r", .plan_path = "/x/p.yaml",
        .plan_text = "", .ablation = "zero", .metric = "loss", .model_path = "/x/m", .model_type = "gpt2",
        .n_layers = 2, .n_heads = 2, .n_kv_heads = 2, .d_head = 8, .n_params = 1, .data_path = "/x/d.npy",
        .n_seqs = 2, .seq_len = 5,
    };
    int64_t sweep = 0;
    cr_assert_eq(hp_store_sweep(s, &row, &sweep, &err), HP_OK, "%s", err.msg);
    struct hp_head_roles heads[4] = {
        {true, 0.5, NAN, 0.25, 1, 0.25, 0.125, -1, 0.5, 1.5, NAN, 0.375},
        {true, 0.75, 0.0625, 0.5, -2, 0.625, 0.25, 0, 0.375, 2.5, NAN, NAN},
        {true, 0.1, 0.2, 0.03, 3, 0.04, 0.5, -3, 0.6, 0.7, NAN, 0.125}, /* an induction mass below HP_ROLES_OFFSET_MIN_MASS */
        {false, NAN, NAN, NAN, 0, NAN, NAN, 0, NAN, NAN, NAN, NAN},
    };
    struct hp_roles r = {.n_layers = 2, .n_heads = 2, .causal = true, .n_seqs = 2, .seq_len = 5, .probe_seqs = 16,
                         .probe_len = 32, .probe_seed = HP_ROLES_PROBE_SEED, .n_queries = 8, .n_prev = 8,
                         .n_duplicate = 0, .n_first = 8, .n_induction = 512, .sep_id = 3, .n_sep = 7,
                         .heads = heads};
    struct hp_store_roles sr = {"rk", "m0", "d0", &r};
    bool found = true;
    cr_assert_eq(hp_store_has_roles(s, "rk", &found, &err), HP_OK, "%s", err.msg);
    cr_assert(!found);
    cr_assert_eq(hp_store_put_roles(s, &sr, 0.5, 2, "testkernel", &err), HP_OK, "%s", err.msg);
    heads[0].prev_token = 9; /* a second put keeps the first */
    cr_assert_eq(hp_store_put_roles(s, &sr, 0.5, 2, "testkernel", &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_store_has_roles(s, "rk", &found, &err), HP_OK, "%s", err.msg);
    cr_assert(found);
    cr_assert_eq(hp_store_link_roles(s, sweep, "roles", "rk", &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_store_link_roles(s, sweep, "roles", "rk", &err), HP_OK, "%s", err.msg);
    hp_store_close(s);

    cr_assert_eq(one_int("SELECT count(*) FROM role_runs WHERE key = 'rk' AND causal = 1 AND probe_seqs = 16 AND "
                         "probe_len = 32 AND probe_seed = 491495646579 AND n_queries = 8 AND n_duplicate = 0 AND "
                         "n_induction = 512 AND threads = 2 AND kernel = 'testkernel' AND numeric_version = "
                         HP_XSTR(HP_NUMERIC_VERSION)),
                 1);
    cr_assert_eq(one_int("SELECT count(*) FROM head_roles"), 3, "no row for the head the checkpoint lacks");
    cr_assert_eq(one_int("SELECT count(*) FROM head_roles WHERE layer = 0 AND head = 0 AND prev_token = 0.5 AND "
                         "duplicate_token IS NULL AND induction = 0.25 AND induction_offset = 1 AND "
                         "induction_mass = 0.25 AND first_token = 0.125 AND dominant_offset = -1 AND "
                         "dominant_mass = 0.5 AND entropy = 1.5 AND rare_token IS NULL"),
                 1);
    cr_assert_eq(one_int("SELECT count(*) FROM head_roles WHERE layer = 0 AND head = 1 AND duplicate_token = 0.0625 "
                         "AND induction_offset = -2 AND dominant_offset = 0"),
                 1);
    cr_assert_eq(one_int("SELECT count(*) FROM sweep_roles x JOIN role_runs r ON r.id = x.run_id WHERE "
                         "x.study = 'roles' AND r.key = 'rk'"),
                 1);

    /* merged into another database: the run, its heads and the link, once however often */
    char out[160];
    snprintf(out, sizeof out, "%s/merged.db", tmp);
    const char *in[1] = {db};
    int64_t added = 0;
    cr_assert_eq(hp_store_merge(out, in, 1, &added, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_store_merge(out, in, 1, &added, &err), HP_OK, "%s", err.msg);
    sqlite3 *h;
    cr_assert_eq(sqlite3_open(out, &h), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(h,
                                    "SELECT (SELECT count(*) FROM role_runs), (SELECT count(*) FROM head_roles), "
                                    "(SELECT count(*) FROM sweep_roles x JOIN role_runs r ON r.id = x.run_id "
                                    " JOIN sweeps w ON w.id = x.sweep_id JOIN models m ON m.id = r.model_id "
                                    " WHERE m.digest = 'm0' AND x.study = 'roles'), "
                                    "(SELECT sum(prev_token) FROM head_roles), (SELECT sum(sep_token) FROM head_roles), "
                                    "(SELECT count(*) FROM role_runs WHERE sep_id = 3 AND n_sep = 7)",
                                    -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(h));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_eq(sqlite3_column_int(st, 0), 1);
    cr_assert_eq(sqlite3_column_int(st, 1), 3);
    cr_assert_eq(sqlite3_column_int(st, 2), 1);
    cr_assert_float_eq(sqlite3_column_double(st, 3), 0.5 + 0.75 + 0.1, 1e-12);
    cr_assert_float_eq(sqlite3_column_double(st, 4), 0.375 + 0.125, 1e-12, "sep_token merged");
    cr_assert_eq(sqlite3_column_int(st, 5), 1, "sep_id and n_sep merged");
    sqlite3_finalize(st);
    sqlite3_close(h);

    /* a source from before schema 8 (no [SEP] columns) merges, its heads' sep_token NULL */
    sql(db, "ALTER TABLE head_roles DROP COLUMN sep_token; ALTER TABLE role_runs DROP COLUMN n_sep; "
            "ALTER TABLE role_runs DROP COLUMN sep_id; UPDATE meta SET value = '7' WHERE key = 'schema_version'");
    snprintf(out, sizeof out, "%s/merged7.db", tmp);
    cr_assert_eq(hp_store_merge(out, in, 1, &added, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(sqlite3_open(out, &h), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(h, "SELECT count(*), count(sep_token), sum(prev_token) FROM head_roles", -1, &st,
                                    NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(h));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert(sqlite3_column_int(st, 0) == 3 && sqlite3_column_int(st, 1) == 0, "a schema 7 source's heads");
    cr_assert_float_eq(sqlite3_column_double(st, 2), 0.5 + 0.75 + 0.1, 1e-12);
    sqlite3_finalize(st);
    sqlite3_close(h);
}

/* The heads a pruned checkpoint lacks: a row each, written at every sweep (a schema 4 database learns them at its
 * next run), never twice, and merged with their model. */
Test(store, the_heads_a_pruned_checkpoint_lacks_are_recorded_and_merged)
{
    struct hp_error err = {0};
    struct hp_store *s = NULL;
    cr_assert_eq(hp_store_open(db, &s, &err), HP_OK, "%s", err.msg);
    hp_store_close(s);
    /* what a schema 4 database looked like */
    sql(db, "DROP TABLE pruned_heads; UPDATE meta SET value = '4' WHERE key = 'schema_version'");
    cr_assert_eq(hp_store_open(db, &s, &err), HP_OK, "%s", err.msg);
    const uint8_t pruned[6] = {0, 1, 0, 0, 1, 1}; /* 2 layers x 3 heads: 0.1, 1.1, 1.2 */
    struct hp_store_sweep_row row = {
        .plan_digest = "p0", .model_digest = "m0", .data_digest = "d0", .name = "r", .plan_path = "/x/p.yaml",
        .plan_text = "", .ablation = "zero", .metric = "loss", .model_path = "/x/m", .model_type = "gpt2",
        .n_layers = 2, .n_heads = 3, .n_kv_heads = 3, .d_head = 8, .n_params = 1, .pruned = pruned,
        .data_path = "/x/d.npy", .n_seqs = 2, .seq_len = 5,
    };
    int64_t sweep = 0;
    cr_assert_eq(hp_store_sweep(s, &row, &sweep, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_store_sweep(s, &row, &sweep, &err), HP_OK, "%s", err.msg);
    row.model_digest = "m1", row.pruned = NULL; /* a complete checkpoint: none */
    cr_assert_eq(hp_store_sweep(s, &row, &sweep, &err), HP_OK, "%s", err.msg);
    hp_store_close(s);
    cr_assert_eq(one_int("SELECT value FROM meta WHERE key = 'schema_version'"), HP_SCHEMA_VERSION);
    cr_assert_eq(one_int("SELECT count(*) FROM pruned_heads"), 3);
    cr_assert_eq(one_int("SELECT count(*) FROM pruned_heads p JOIN models m ON m.id = p.model_id WHERE m.digest = "
                         "'m0' AND ((p.layer = 0 AND p.head = 1) OR (p.layer = 1 AND p.head IN (1, 2)))"),
                 3);

    char out[sizeof db];
    snprintf(out, sizeof out, "%s/merged.db", tmp);
    const char *in[1] = {db};
    int64_t added = 0;
    cr_assert_eq(hp_store_merge(out, in, 1, &added, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_store_merge(out, in, 1, &added, &err), HP_OK, "%s", err.msg);
    snprintf(db, sizeof db, "%s", out);
    cr_assert_eq(one_int("SELECT count(*) FROM pruned_heads p JOIN models m ON m.id = p.model_id WHERE m.digest = "
                         "'m0' AND ((p.layer = 0 AND p.head = 1) OR (p.layer = 1 AND p.head IN (1, 2)))"),
                 3);
    cr_assert_eq(one_int("SELECT count(*) FROM pruned_heads"), 3);
}

// --- a database written by schema 5 -------------------------------------------------------------------------

/* The fixture's queries (tests/fixtures/schema5/README.md), asked of tmp/name by this build, as the old build's
 * answers are written: "== QUERY" and its output. free() it. */
static char *schema5_answers(const char *name)
{
    static const char *const qs[] = {
        "heads --sweep 1", "heads --sweep 2", "curve --sweep 1", "pairs --sweep 1", "heads --sweep 1 --metric loss",
        "heads --sweep 1 --metric acc",
        /* schema 5's columns of effects, in its order (SELECT * there): metrics added since are further columns */
        "sql 'SELECT sweep_id, study, kind, kv, label, layer, unit, unit2, step, sample, k, mask_text, d_loss, d_kl, "
        "d_acc, d_cos, loss, kl, acc, cos FROM effects ORDER BY sweep_id, study, label'",
    };
    size_t cap = 1 << 16, len = 0;
    char *all = calloc(cap, 1), *out = malloc(cap), args[256], scratch[128];
    cr_assert(all && out);
    snprintf(scratch, sizeof scratch, "%s/scratch", tmp);
    mkdir(scratch, 0700);
    for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
        snprintf(args, sizeof args, "query --db %s %s", name, qs[i]);
        cr_assert_eq(tu_headprune(tmp, args, scratch, out, cap, NULL, 0), 0, "headprune %s failed", args);
        len += (size_t)snprintf(all + len, cap - len, "== %s\n%s", qs[i], out);
        cr_assert(len < cap, "the answers are over %zu bytes", cap);
    }
    free(out);
    return all;
}

/* A database written by the build before the metrics' columns and views were made from the metric table
 * (schema 5: tests/fixtures/schema5) reads, merges and upgrades in place with every answer the same as that
 * build's, and its views keep their columns' order. */
Test(store, a_schema_5_database_reads_merges_and_upgrades)
{
    char path[512], old[160], merged[160];
    snprintf(old, sizeof old, "%s/old.db", tmp);
    snprintf(merged, sizeof merged, "%s/merged.db", tmp);
    snprintf(path, sizeof path, "%s/schema5/old.sql", getenv("HP_FIXTURES"));
    char *dump = tu_slurp(path, NULL);
    sql(old, dump);
    free(dump);
    snprintf(path, sizeof path, "%s/schema5/expected.txt", getenv("HP_FIXTURES"));
    char *want = tu_slurp(path, NULL);

    /* read as it is */
    char *got = schema5_answers("old.db");
    tu_assert_same_text("the old build's answers", strdup(want), "this build's, schema 5 as written", got);

    /* merged into a new database */
    struct hp_error err = {0};
    const char *in[] = {old};
    int64_t added;
    cr_assert_eq(hp_store_merge(merged, in, 1, &added, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(added, 41);
    got = schema5_answers("merged.db");
    tu_assert_same_text("the old build's answers", strdup(want), "this build's, merged", got);

    /* upgraded in place (opened for writing): schema 6, the same rows under schema 5's columns in their order
     * (the metrics added since are columns of their own, NULL in every old row) */
    static const char *const tables[] = {"jobs", "baselines", "effects", "results", "seq_results"};
    static const char *const order[] = {"sweep_id, ord", "sweep_id", "sweep_id, label, step, sample", "variant_id",
                                        "variant_id, seq"};
    char rows_sql[5][1024];
    const char *rows[5];
    for (int t = 0; t < 5; t++) {
        char q[160];
        snprintf(q, sizeof q, "SELECT group_concat(name, ', ') FROM pragma_table_info('%s')", tables[t]);
        const char *qs1[] = {q};
        char *cols = tu_rows(old, qs1, 1);
        cols[strcspn(cols, "\n")] = '\0';
        snprintf(rows_sql[t], sizeof rows_sql[t], "SELECT %s FROM %s ORDER BY %s", cols, tables[t], order[t]);
        rows[t] = rows_sql[t];
        free(cols);
    }
    char *before = tu_rows(old, rows, sizeof rows / sizeof rows[0]);
    struct hp_store *s;
    cr_assert_eq(hp_store_open(old, &s, &err), HP_OK, "%s", err.msg);
    hp_store_close(s);
    static const char *const version[] = {"SELECT value FROM meta WHERE key = 'schema_version'"};
    char *v = tu_rows(old, version, 1);
    char now[16];
    snprintf(now, sizeof now, "%d\n", HP_SCHEMA_VERSION);
    cr_assert_str_eq(v, now);
    free(v);
    tu_assert_same_text("schema 5", before, "upgraded", tu_rows(old, rows, sizeof rows / sizeof rows[0]));
    static const char *const newer[] = {"SELECT count(*) FROM results WHERE logit_diff IS NOT NULL OR "
                                         "patch_recovery IS NOT NULL",
                                         "SELECT count(*) FROM pragma_table_info('effects') WHERE name = 'd_logit_diff'"};
    v = tu_rows(old, newer, 2);
    cr_assert_str_eq(v, "0\n1\n", "the task metrics' columns: NULL in the old rows, and in the effects view");
    free(v);
    got = schema5_answers("old.db");
    tu_assert_same_text("the old build's answers", strdup(want), "this build's, upgraded", got);
    free(want);
    char scratch[128];
    snprintf(scratch, sizeof scratch, "%s/scratch", tmp);
    for (int sw = 1; sw <= 2; sw++) {
        char args[128];
        snprintf(args, sizeof args, "report --db merged.db --sweep %d --out r%d.html", sw, sw);
        cr_assert_eq(tu_headprune(tmp, args, scratch, NULL, 0, NULL, 0), 0, "headprune %s failed", args);
    }
}
