/* testutil.h -- small file helpers shared by the Criterion tests. */
#ifndef HP_TESTUTIL_H
#define HP_TESTUTIL_H

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "headprune.h"

/* A macro's value as a string literal: HP_XSTR(HP_NUMERIC_VERSION) is "5". */
#define HP_STR(x) #x
#define HP_XSTR(x) HP_STR(x)

/* Whole file, NUL-terminated; *n (may be NULL) gets its length. Fails the test if unreadable. */
static inline char *tu_slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    size_t len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc(len + 1);
    cr_assert(fread(s, 1, len, f) == len, "short read of %s", path);
    s[len] = 0;
    fclose(f);
    if (n)
        *n = len;
    return s;
}

static inline void tu_spit(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s", path);
    cr_assert(fwrite(p, 1, n, f) == n);
    fclose(f);
}

/* The first n - 1 bytes of file path into buf, NUL-terminated ("" when it cannot be read). */
static inline void tu_read_into(const char *path, char *buf, size_t n)
{
    buf[0] = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return;
    size_t r = fread(buf, 1, n - 1, f);
    buf[r] = 0;
    fclose(f);
}

/*
 * Run `headprune ARGS` (HP_HEADPRUNE; args a shell fragment) in folder cwd
 * (NULL: the repository's root), stdin from /dev/null, its stdout and stderr
 * through files in folder scratch into out and err (NULL: not kept), n_out
 * and n_err bytes at most, NUL-terminated. Its exit status, or 128 + the
 * signal that ended it.
 */
static inline int tu_headprune(const char *cwd, const char *args, const char *scratch, char *out, size_t n_out,
                               char *err, size_t n_err)
{
    char cmd[16384], root[1024], p[1200];
    int w0 = snprintf(root, sizeof root, "%s/..", getenv("HP_TESTS"));
    cr_assert(w0 > 0 && (size_t)w0 < sizeof root, "HP_TESTS is over %zu bytes", sizeof root - 4);
    cr_assert(strlen(scratch) + 5 < sizeof p, "the scratch folder's name is over %zu bytes", sizeof p - 5);
    int w = snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s >'%s/out' 2>'%s/err' </dev/null", cwd ? cwd : root,
                     getenv("HP_HEADPRUNE"), args, scratch, scratch);
    cr_assert(w > 0 && (size_t)w < sizeof cmd, "the command for '%.80s...' is over %zu bytes", args, sizeof cmd);
    int st = system(cmd);
    if (out) {
        snprintf(p, sizeof p, "%s/out", scratch);
        tu_read_into(p, out, n_out);
    }
    if (err) {
        snprintf(p, sizeof p, "%s/err", scratch);
        tu_read_into(p, err, n_err);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The rows of the n queries on database db (opened read-only), in order, one line each, columns joined by '|'
 * (NULL as "NULL"): a text two databases can be compared by. free() it. */
static inline char *tu_rows(const char *db, const char *const *queries, size_t n)
{
    sqlite3 *h;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK, "cannot open %s", db);
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    out[0] = 0;
    for (size_t q = 0; q < n; q++) {
        sqlite3_stmt *st;
        cr_assert_eq(sqlite3_prepare_v2(h, queries[q], -1, &st, NULL), SQLITE_OK, "%s: %s", queries[q],
                     sqlite3_errmsg(h));
        while (sqlite3_step(st) == SQLITE_ROW)
            for (int c = 0; c < sqlite3_column_count(st); c++) {
                const char *v = (const char *)sqlite3_column_text(st, c);
                size_t k = strlen(v ? v : "NULL") + 2;
                while (len + k + 1 > cap)
                    out = realloc(out, cap *= 2);
                len += (size_t)sprintf(out + len, "%s%c", v ? v : "NULL", c + 1 < sqlite3_column_count(st) ? '|' : '\n');
            }
        sqlite3_finalize(st);
    }
    sqlite3_close(h);
    return out;
}

/* Texts x (of database a) and y (of b), as tu_rows makes them, are the same, else the test fails showing where
 * they part. Frees both. */
static inline void tu_assert_same_text(const char *a, char *x, const char *b, char *y)
{
    if (strcmp(x, y) != 0) {
        size_t i = 0;
        while (x[i] && x[i] == y[i])
            i++;
        size_t s = i > 200 ? i - 200 : 0;
        cr_log_error("first difference at byte %zu:\n--- %s\n%.400s\n--- %s\n%.400s", i, a, x + s, b, y + s);
        cr_assert_fail("%s and %s hold different results", a, b);
    }
    free(x);
    free(y);
}

/* A fresh folder /tmp/hp_<tag>_XXXXXX into dir (at least 64 bytes). */
static inline void tu_mkdtemp(char *dir, size_t n, const char *tag)
{
    snprintf(dir, n, "/tmp/hp_%s_XXXXXX", tag);
    cr_assert(mkdtemp(dir), "cannot make a temp folder %s", dir);
}

/*
 * Folders under base, nested until the path is at least `at_least` bytes
 * (one name is limited to 255, a path to PATH_MAX: tests of long paths need
 * many), made on disk; the path, malloc'd (free() it).
 */
static inline char *tu_long_dir(const char *base, size_t at_least)
{
    char name[201];
    memset(name, 'd', 200);
    name[200] = 0;
    size_t n = strlen(base);
    char *p = malloc(at_least + 2 * sizeof name + n);
    strcpy(p, base);
    for (int i = 0; n < at_least; i++) {
        name[0] = (char)('a' + i % 26); /* each level its own name, so a cut path names another folder */
        n += (size_t)sprintf(p + n, "/%s", name);
        cr_assert(mkdir(p, 0755) == 0 || errno == EEXIST, "cannot make a folder %zu bytes deep", n);
    }
    return p;
}

/* Remove a folder made by tu_mkdtemp, with everything in it. */
static inline void tu_rmrf(const char *dir)
{
    char cmd[2200];
    cr_assert(strlen(dir) < 1024, "tu_rmrf: a folder name over 1 KB");
    snprintf(cmd, sizeof cmd, "chattr -i %s 2>/dev/null; rm -rf %s", dir, dir);
    cr_assert_eq(system(cmd), 0, "cannot remove %s", dir);
}

/* The info of a Llama-like model of the given shape, for tests that need no weights. */
static inline struct hp_model_info tu_info(int n_layers, int n_heads, int n_kv_heads)
{
    struct hp_model_info info;
    memset(&info, 0, sizeof info);
    info.arch = HP_ARCH_LLAMA;
    strcpy(info.model_type, "llama");
    info.n_layers = n_layers;
    info.n_heads = n_heads;
    info.n_kv_heads = n_kv_heads;
    info.d_head = 8;
    info.d_model = n_heads * 8;
    info.n_vocab = 97;
    info.n_ctx = 64;
    info.causal = true;
    info.has_lm_head = true;
    return info;
}

/* A JSON file, parsed; fails the test if it is not JSON. Destructor: cJSON_Delete. */
static inline cJSON *tu_read_json(const char *path)
{
    char *text = tu_slurp(path, NULL);
    cJSON *j = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(j, "%s is not JSON", path);
    return j;
}

/* Member k of object o; fails the test where o has none. */
static inline const cJSON *tu_get(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert_not_null(v, "no \"%s\" in the JSON", k);
    return v;
}

#endif
