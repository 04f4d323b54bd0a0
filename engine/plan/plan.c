/*
 * plan.c -- sweep plans: a YAML file naming a model, held-out data and a list
 * of studies, read into struct hp_plan and expanded into jobs (masked
 * variants to evaluate).
 *
 * The format users write -- top-level keys, study kinds and their options,
 * expansion order -- is documented in docs/plans.md; keep it in step with
 * the loader below (top_names, gopt_names) and the kinds' rows
 * (engine/plan/study/, one file a kind: its options, their checks, its jobs).
 * Lists are sorted on load; a number listed twice is an error. Booleans are
 * YAML 1.1's. Layers, heads and KV groups are checked against the model only
 * at expansion, which is the first time the model is known.
 *
 * This file owns what is common to every kind: the document, the options
 * every kind takes (name) or every kind over units takes (layers, heads or
 * groups, kv), the order of the checks, and the expansion's bookkeeping
 * (units selected, jobs counted against the limit, errors located). It
 * lends the kinds its value parsers and expansion helpers (hp_ld_*, hp_ex_*,
 * declared in study/study_int.h) and asks their rows the rest; it names no
 * kind but the baseline, which it inserts.
 *
 * A plan without a baseline study gets one, named "baseline", at index 0
 * (hp_study.line = 0 marks it as not written in the file).
 *
 * Expansion (hp_plan_expand) turns every study into its row's jobs (none
 * for procedure kinds such as iterative, which the sweep runs), in plan
 * order; within a study as its row says (by layer, then unit; random by k,
 * then sample).
 *
 * Errors are one line, "file:line:column: what is wrong (hint)", with
 * line and column counted from 1 as in editors. libyaml's messages are
 * translated here and never reach the user raw. Expansion errors (a layer the
 * model lacks, k larger than the pool) point at the offending value in the
 * plan: the loader's positions are not kept in struct hp_plan, so they are
 * found again by re-reading plan->text, on the error path only.
 *
 * Must not: print, exit, open models or data (the sweep does), or know
 * anything of SQL.
 */
#include "headprune.h"
#include "plan.h"
#include "study/study_int.h" /* the kinds' rows, and what this file lends them */
#include "util.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

// A plan is a few dozen lines; anything this big is not one.
#define PLAN_MAX_BYTES (1 << 20)
#define HP_PLAN_MAX_JOBS 1000000 /* see max_jobs */
#define NAME_MAX_PLAN ((int)sizeof(((struct hp_plan *)0)->name) - 1)

// --- names -------------------------------------------------------------------

// The kinds' names, in kind order (the hints' candidates).
static void kind_names(const char *names[HP_STUDY_COUNT])
{
    for (int k = 0; k < HP_STUDY_COUNT; k++)
        names[k] = hp_study_row((enum hp_study_kind)k)->name;
}

// --- job lists ---------------------------------------------------------------

enum hp_status hp_joblist_push(struct hp_joblist *jl, const struct hp_job *job)
{
    assert(jl && job);
    if (jl->n == jl->cap) {
        int cap = jl->cap ? jl->cap * 2 : 16;
        struct hp_job *p = jl->cap < INT_MAX / 2 ? realloc(jl->jobs, sizeof *p * (size_t)cap) : NULL;
        if (!p) {
            hp_mask_free(job->mask);
            return HP_ERR_NOMEM;
        }
        jl->jobs = p;
        jl->cap = cap;
    }
    jl->jobs[jl->n++] = *job;
    return HP_OK;
}

void hp_joblist_free(struct hp_joblist *jl)
{
    if (!jl)
        return;
    for (int i = 0; i < jl->n; i++)
        hp_mask_free(jl->jobs[i].mask);
    free(jl->jobs);
    free(jl);
}

// --- plans: freeing ----------------------------------------------------------

static void study_clear(struct hp_study *s)
{
    free(s->layers);
    free(s->units);
    free(s->mask);
    const struct hp_study_kind_row *r = (int)s->kind >= 0 && s->kind < HP_STUDY_COUNT ? hp_study_row(s->kind) : NULL;
    if (r && r->clear)
        r->clear(s);
    memset(s, 0, sizeof *s);
}

void hp_plan_free(struct hp_plan *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n_studies; i++)
        study_clear(&p->studies[i]);
    free(p->studies);
    free(p->text);
    free(p->path);
    free(p->model);
    free(p->data);
    free(p);
}

// --- did you mean ------------------------------------------------------------

// Optimal string alignment distance, case-insensitive: one edit per
// insertion, deletion, substitution or swap of neighbours ("modle" -> 1).
static int edit_distance(const char *a, const char *b)
{
    enum { N = 40 };
    size_t n = strlen(a), m = strlen(b);
    if (n >= N || m >= N)
        return INT_MAX;
    int d[N][N];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            int v = d[i - 1][j - 1] + (ca != cb);
            if (d[i - 1][j] + 1 < v)
                v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v)
                v = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == cb && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[n][m];
}

// The closest candidate within 2 edits (1 for names of 3 letters or fewer,
// where 2 edits make anything out of anything), or NULL.
static const char *suggest(const char *word, const char *const *cands, int n)
{
    const char *best = NULL;
    int best_d = INT_MAX;
    for (int i = 0; i < n; i++) {
        if (!cands[i])
            continue;
        int d = edit_distance(word, cands[i]);
        int limit = strlen(cands[i]) <= 3 ? 1 : 2;
        if (d <= limit && d < best_d) {
            best = cands[i];
            best_d = d;
        }
    }
    /* an abbreviation, or a word spelt out: "cosine" for cos, "accuracy" for acc, "sing" for single */
    for (int i = 0; !best && i < n; i++) {
        if (!cands[i])
            continue;
        size_t lw = strlen(word), lc = strlen(cands[i]);
        if ((lc >= 3 && lw > lc && strncasecmp(word, cands[i], lc) == 0) ||
            (lw >= 3 && lc > lw && strncasecmp(word, cands[i], lw) == 0))
            best = cands[i];
    }
    return best;
}

// " (did you mean 'x'?)" or " (expected a, b or c)" into buf.
static void hint_for(char *buf, size_t cap, const char *word, const char *const *cands, int n)
{
    const char *s = suggest(word, cands, n);
    if (s) {
        snprintf(buf, cap, " (did you mean '%s'?)", s);
        return;
    }
    size_t len = (size_t)snprintf(buf, cap, " (expected ");
    int shown = 0, total = 0;
    for (int i = 0; i < n; i++)
        total += cands[i] != NULL;
    for (int i = 0; i < n && len < cap; i++) {
        if (!cands[i])
            continue;
        const char *sep = shown == 0 ? "" : shown == total - 1 ? " or " : ", ";
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", sep, cands[i]);
        shown++;
    }
    if (len < cap)
        snprintf(buf + len, cap - len, ")");
}

// --- loading: the YAML document ----------------------------------------------

enum hp_status hp_ld_fail(const struct hp_loader *ld, const yaml_node_t *n, const char *fmt, ...)
{
    char msg[HP_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!n)
        return hp_fail(ld->err, HP_ERR_PLAN, "%s: %s", ld->path, msg);
    return hp_fail(ld->err, HP_ERR_PLAN, "%s:%zu:%zu: %s", ld->path, n->start_mark.line + 1,
                   n->start_mark.column + 1, msg);
}

// Keys must be plain text, without NUL bytes: compared as C strings, "model\0x" would be model.
static enum hp_status key_text(const struct hp_loader *ld, const yaml_node_t *k, const char **out)
{
    if (k->type != YAML_SCALAR_NODE || hp_yaml_is_null(k))
        return hp_ld_fail(ld, k, "a key must be a word like 'model', not %s", hp_yaml_type_word(k));
    if (strlen(hp_yaml_text(k)) != k->data.scalar.length)
        return hp_ld_fail(ld, k, "a key contains a NUL character");
    *out = hp_yaml_text(k);
    return HP_OK;
}

static int lookup(const char *word, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (names[i] && !strcmp(word, names[i]))
            return i;
    return -1;
}

// --- loading: values ---------------------------------------------------------

// A non-empty text value without NUL bytes; what names it ("'model'").
static enum hp_status get_text(const struct hp_loader *ld, const char *what, const yaml_node_t *v,
                               const char **out)
{
    if (v->type != YAML_SCALAR_NODE)
        return hp_ld_fail(ld, v, "%s must be a single value, not %s", what, hp_yaml_type_word(v));
    if (hp_yaml_is_null(v) || v->data.scalar.length == 0)
        return hp_ld_fail(ld, v, "%s needs a value", what);
    if (strlen(hp_yaml_text(v)) != v->data.scalar.length)
        return hp_ld_fail(ld, v, "%s contains a NUL character", what);
    *out = hp_yaml_text(v);
    return HP_OK;
}

enum int_scan { INT_OK, INT_NOT, INT_NEGATIVE, INT_HUGE };

// A decimal integer, optionally signed; the value is capped at UINT64_MAX.
static enum int_scan scan_uint(const char *s, uint64_t *out)
{
    bool neg = false;
    if (*s == '+' || *s == '-')
        neg = *s++ == '-';
    if (!*s)
        return INT_NOT;
    uint64_t v = 0;
    bool huge = false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return INT_NOT;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            huge = true;
        else
            v = v * 10 + d;
    }
    if (neg && (v != 0 || huge))
        return INT_NEGATIVE;
    *out = v;
    return huge ? INT_HUGE : INT_OK;
}

bool hp_ld_scan_count(const char *s, int *out)
{
    uint64_t n = 0;
    if (scan_uint(s, &n) != INT_OK || n < 1 || n > INT_MAX)
        return false;
    *out = (int)n;
    return true;
}

// An integer in [lo, INT_MAX]; what names the value in messages ("'seq_len'").
enum hp_status hp_ld_int(const struct hp_loader *ld, const char *what, const yaml_node_t *v,
                              int lo, const char *expect, int *out)
{
    if (v->type != YAML_SCALAR_NODE || hp_yaml_is_null(v))
        return hp_ld_fail(ld, v, "%s must be %s, not %s", what, expect, hp_yaml_type_word(v));
    uint64_t x = 0;
    enum int_scan sc = scan_uint(hp_yaml_text(v), &x);
    if (sc == INT_OK && x > INT_MAX)
        sc = INT_HUGE;
    if (sc == INT_HUGE)
        return hp_ld_fail(ld, v, "%s: %.*s%s is too large: it must be %s, at most %d", what, hp_yaml_shown(v), hp_yaml_text(v),
                       hp_yaml_more(v), expect, INT_MAX);
    if (sc != INT_OK || (int)x < lo)
        return hp_ld_fail(ld, v, "%s must be %s, not '%.*s%s'", what, expect, hp_yaml_shown(v), hp_yaml_text(v),
                       hp_yaml_more(v));
    *out = (int)x;
    return HP_OK;
}

enum hp_status hp_ld_bool(const struct hp_loader *ld, const char *key, const yaml_node_t *v,
                               bool *out)
{
    // YAML 1.1's spellings, as libyaml's users expect.
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
    if (v->type == YAML_SCALAR_NODE && v->data.scalar.length < 8) {
        char lower[8] = {0};
        for (size_t j = 0; j < v->data.scalar.length; j++)
            lower[j] = (char)tolower((unsigned char)hp_yaml_text(v)[j]);
        for (int i = 0; i < 3; i++)
            if (!strcmp(lower, yes[i]) || !strcmp(lower, no[i])) {
                *out = !strcmp(lower, yes[i]);
                return HP_OK;
            }
    }
    if (v->type != YAML_SCALAR_NODE || hp_yaml_is_null(v))
        return hp_ld_fail(ld, v, "'%s' must be true or false, not %s", key, hp_yaml_type_word(v));
    return hp_ld_fail(ld, v, "'%s' must be true or false, not '%.*s%s'", key, hp_yaml_shown(v), hp_yaml_text(v),
                   hp_yaml_more(v));
}

// A fraction written 10% or 0.1, in [lo, 1) -- and > 0 when open_lo.
enum hp_status hp_ld_fraction(const struct hp_loader *ld, const char *key, const yaml_node_t *v,
                                   bool open_lo, double *out)
{
    const char *want = open_lo ? "a fraction in (0, 1) like 10% or 0.1"
                               : "a fraction in [0, 1) like 20% or 0.2";
    if (v->type != YAML_SCALAR_NODE || hp_yaml_is_null(v))
        return hp_ld_fail(ld, v, "'%s' must be %s, not %s", key, want, hp_yaml_type_word(v));
    char buf[64];
    size_t len = v->data.scalar.length;
    bool ok = len > 0 && len < sizeof buf;
    double x = 0;
    if (ok) {
        memcpy(buf, hp_yaml_text(v), len + 1);
        bool percent = buf[len - 1] == '%';
        if (percent)
            buf[--len] = 0;
        // strtod alone would also take "inf", "nan" and hex.
        ok = len > 0 && (isdigit((unsigned char)buf[0]) || buf[0] == '.');
        for (size_t i = 0; ok && i < len; i++)
            ok = isdigit((unsigned char)buf[i]) || buf[i] == '.' || buf[i] == 'e' ||
                 buf[i] == 'E' || buf[i] == '-' || buf[i] == '+';
        char *end = NULL;
        if (ok) {
            x = strtod(buf, &end);
            ok = end == buf + len && isfinite(x);
        }
        if (percent)
            x /= 100.0;
    }
    if (!ok || x < 0 || x >= 1 || (open_lo && x == 0))
        return hp_ld_fail(ld, v, "'%s' must be %s, not '%.*s%s'", key, want, hp_yaml_shown(v), hp_yaml_text(v),
                       hp_yaml_more(v));
    *out = x;
    return HP_OK;
}

static bool name_chars_ok(const char *s)
{
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_' && *s != '.' && *s != '-')
            return false;
    return true;
}

enum hp_status hp_ld_name(const struct hp_loader *ld, const char *what, const yaml_node_t *v,
                               int max, char *out)
{
    const char *s;
    enum hp_status st = get_text(ld, what, v, &s);
    if (st)
        return st;
    if (!name_chars_ok(s))
        return hp_ld_fail(ld, v, "%s may hold only letters, digits, '_', '.' and '-', not '%.*s%s'",
                       what, hp_yaml_shown(v), s, hp_yaml_more(v));
    if ((int)strlen(s) > max)
        return hp_ld_fail(ld, v, "%s is longer than %d characters", what, max);
    strcpy(out, s);
    return HP_OK;
}

// A path relative to the plan file's folder, as written for the working
// directory. ".." is kept, not folded: "plans/../models/x" is right even
// when plans/ is a symbolic link, and a lexical "models/x" would not be.
// *out: a fresh string (free() it; a value it held is freed first).
enum hp_status hp_ld_path(const struct hp_loader *ld, const char *key, const yaml_node_t *v, char **out)
{
    char what[32];
    snprintf(what, sizeof what, "'%s'", key);
    const char *s;
    enum hp_status st = get_text(ld, what, v, &s);
    if (st)
        return st;
    while (s[0] == '.' && s[1] == '/')
        for (s += 2; *s == '/'; s++)
            ;
    free(*out);
    if (s[0] == '/' || !ld->dir[0])
        return hp_path_make(out, ld->err, "%s", *s ? s : ".");
    if (!*s)
        return hp_path_make(out, ld->err, "%s", ld->dir);
    return hp_path_make(out, ld->err, "%s%s%s", ld->dir, !strcmp(ld->dir, "/") ? "" : "/", s);
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

// A list of integers >= lo, or one integer; sorted, no repeats.
enum hp_status hp_ld_int_list(const struct hp_loader *ld, const char *key, const yaml_node_t *v,
                                   int lo, int **out, int *n_out)
{
    char what[48];
    snprintf(what, sizeof what, "'%s'", key);
    const char *expect = lo > 0 ? "a positive integer or a list of them"
                                : "a non-negative integer or a list of them";
    int n = v->type == YAML_SEQUENCE_NODE ? hp_yaml_n_items(v) : 1;
    if (v->type == YAML_MAPPING_NODE || hp_yaml_is_null(v))
        return hp_ld_fail(ld, v, "%s must be %s, not %s", what, expect, hp_yaml_type_word(v));
    if (n == 0)
        return hp_ld_fail(ld, v, "%s is an empty list (leave it out to use all)", what);
    int *xs = malloc(sizeof *xs * (size_t)n);
    if (!xs)
        return hp_fail(ld->err, HP_ERR_NOMEM, "%s: out of memory", ld->path);
    for (int i = 0; i < n; i++) {
        const yaml_node_t *it = v->type == YAML_SEQUENCE_NODE
                                    ? hp_ld_node(ld, v->data.sequence.items.start[i]) : v;
        enum hp_status st = it->type == YAML_SCALAR_NODE && !hp_yaml_is_null(it)
                                ? hp_ld_int(ld, what, it, lo, lo > 0 ? "a positive integer"
                                                                   : "a non-negative integer",
                                          &xs[i])
                                : hp_ld_fail(ld, it, "%s must be %s, not a list of %s", what,
                                          expect, it->type == YAML_SCALAR_NODE ? "empty items"
                                                                               : "lists");
        for (int j = 0; st == HP_OK && j < i; j++)
            if (xs[j] == xs[i])
                st = hp_ld_fail(ld, it, "%s lists %d twice", what, xs[i]);
        if (st) {
            free(xs);
            return st;
        }
    }
    hp_qsort(xs, (size_t)n, sizeof *xs, cmp_int);
    *out = xs;
    *n_out = n;
    return HP_OK;
}

// A decimal number (no inf, nan or hex); false if the text is not one.
bool hp_ld_scan_number(const char *s, size_t len, double *out)
{
    char buf[64];
    if (len == 0 || len >= sizeof buf)
        return false;
    memcpy(buf, s, len);
    buf[len] = 0;
    // strtod alone would also take "inf", "nan" and hex.
    for (size_t i = 0; i < len; i++)
        if (!isdigit((unsigned char)buf[i]) && !strchr(".eE+-", buf[i]))
            return false;
    char *end = NULL;
    double x = strtod(buf, &end);
    if (end != buf + len || !isfinite(x))
        return false;
    *out = x;
    return true;
}

// A number above lo (open: lo itself excluded); want names what is expected in messages.
enum hp_status hp_ld_number(const struct hp_loader *ld, const char *key, const yaml_node_t *v, double lo,
                                 bool open, const char *want, double *out)
{
    if (v->type != YAML_SCALAR_NODE || hp_yaml_is_null(v))
        return hp_ld_fail(ld, v, "'%s' must be %s, not %s", key, want, hp_yaml_type_word(v));
    double x = 0;
    if (!hp_ld_scan_number(hp_yaml_text(v), v->data.scalar.length, &x) || x < lo || (open && x == lo))
        return hp_ld_fail(ld, v, "'%s' must be %s, not '%.*s%s'", key, want, hp_yaml_shown(v), hp_yaml_text(v), hp_yaml_more(v));
    *out = x;
    return HP_OK;
}

// An unsigned 64-bit seed (the plan's and a gates study's).
enum hp_status hp_ld_seed(const struct hp_loader *ld, const char *key, const yaml_node_t *v, uint64_t *out)
{
    uint64_t x = 0;
    enum int_scan sc = v->type == YAML_SCALAR_NODE && !hp_yaml_is_null(v) ? scan_uint(hp_yaml_text(v), &x) : INT_NOT;
    if (sc == INT_OK) {
        *out = x;
        return HP_OK;
    }
    if (sc == INT_HUGE)
        return hp_ld_fail(ld, v, "'%s' must be below 2^64", key);
    if (v->type != YAML_SCALAR_NODE || hp_yaml_is_null(v))
        return hp_ld_fail(ld, v, "'%s' must be a non-negative integer, not %s", key, hp_yaml_type_word(v));
    return hp_ld_fail(ld, v, "'%s' must be a non-negative integer, not '%.*s%s'", key, hp_yaml_shown(v), hp_yaml_text(v), hp_yaml_more(v));
}

// --- loading: studies --------------------------------------------------------

/*
 * The options every kind takes (name) and every kind over units takes
 * (layers, heads or groups, units or kv), read here; a kind's own options are
 * its row's (engine/plan/study/), named after these in hints.
 */
enum gopt { G_NAME, G_LAYERS, G_HEADS, G_GROUPS, G_KV, G_UNITS, N_GOPTS };

static const char *const gopt_names[N_GOPTS] = {"name", "layers", "heads", "groups", "kv", "units"};

#define MAX_KIND_OPTS 16 /* the most options a kind's row has of its own */

static bool takes_generic(const struct hp_study_kind_row *r, int g)
{
    return g == G_NAME || r->units;
}

static int own_opt(const struct hp_study_kind_row *r, const char *key)
{
    for (int i = 0; i < r->n_opts; i++)
        if (!strcmp(key, r->opts[i].name))
            return i;
    return -1;
}

static bool kind_takes(const struct hp_study_kind_row *r, const char *key)
{
    int g = lookup(key, gopt_names, N_GOPTS);
    return (g >= 0 && takes_generic(r, g)) || own_opt(r, key) >= 0;
}

// Whether key is an option of any kind.
static bool any_option(const char *key)
{
    for (int k = 0; k < HP_STUDY_COUNT; k++)
        if (kind_takes(hp_study_row((enum hp_study_kind)k), key))
            return true;
    return false;
}

// "an option that does not apply": which kinds take it, as "random" or
// "single, only and pairs".
static void kinds_taking(const char *key, char *buf, size_t cap)
{
    int total = 0, shown_n = 0;
    for (int k = 0; k < HP_STUDY_COUNT; k++)
        total += kind_takes(hp_study_row((enum hp_study_kind)k), key);
    size_t len = 0;
    buf[0] = 0;
    for (int k = 0; k < HP_STUDY_COUNT && len < cap; k++) {
        const struct hp_study_kind_row *r = hp_study_row((enum hp_study_kind)k);
        if (!kind_takes(r, key))
            continue;
        const char *sep = shown_n == 0 ? "" : shown_n == total - 1 ? " and " : ", ";
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", sep, r->name);
        shown_n++;
    }
}

static enum hp_status get_generic(const struct hp_loader *ld, int g, const yaml_node_t *v, struct hp_study *s)
{
    switch (g) {
    case G_NAME: {
        enum hp_status st = hp_ld_name(ld, "'name'", v, HP_STUDY_NAME_MAX, s->name);
        if (!st && s->kind != HP_STUDY_BASELINE && !strcmp(s->name, "baseline"))
            return hp_ld_fail(ld, v, "the name 'baseline' is kept for baseline studies (pick "
                           "another name)");
        return st;
    }
    case G_LAYERS: return hp_ld_int_list(ld, "layers", v, 0, &s->layers, &s->n_layers_sel);
    case G_HEADS:
    case G_GROUPS: return hp_ld_int_list(ld, gopt_names[g], v, 0, &s->units, &s->n_units_sel);
    case G_KV: {
        bool kv = false;
        enum hp_status st = hp_ld_bool(ld, "kv", v, &kv);
        s->unit = kv ? HP_UNIT_KV : HP_UNIT_HEAD;
        return st;
    }
    case G_UNITS: {
        const char *words[HP_UNIT_COUNT];
        for (int u = 0; u < HP_UNIT_COUNT; u++)
            words[u] = hp_unit_word((enum hp_unit_kind)u);
        int u = 0;
        enum hp_status st = hp_ld_word(ld, "units", v, words, HP_UNIT_COUNT, &u);
        s->unit = (enum hp_unit_kind)u;
        return st;
    }
    }
    assert(0);
    return HP_ERR_PLAN;
}

// "an 'only' study", "a 'single' study"
static const char *article(const char *word)
{
    return word[0] && strchr("aeiou", word[0]) ? "an" : "a";
}

// Where each option of a study was given (NULL: not given).
struct seen_opts {
    const yaml_node_t *g[N_GOPTS];
    const yaml_node_t *own[MAX_KIND_OPTS];
};

// One `key: value` of a study's options, checked against its kind and read.
static enum hp_status load_option(const struct hp_loader *ld, const yaml_node_pair_t *pr, const char *kind,
                                  struct hp_study *s, struct seen_opts *seen)
{
    const struct hp_study_kind_row *r = hp_study_row(s->kind);
    const yaml_node_t *k = hp_ld_node(ld, pr->key), *v = hp_ld_node(ld, pr->value);
    const char *key = "";
    char hint[256];
    enum hp_status st = key_text(ld, k, &key);
    if (st)
        return st;
    if (!any_option(key)) {
        const char *allowed[N_GOPTS + MAX_KIND_OPTS];
        int n = 0;
        for (int j = 0; j < N_GOPTS; j++)
            allowed[n++] = takes_generic(r, j) ? gopt_names[j] : NULL;
        for (int j = 0; j < r->n_opts; j++)
            allowed[n++] = r->opts[j].name;
        hint_for(hint, sizeof hint, key, allowed, n);
        return hp_ld_fail(ld, k, "unknown key '%.*s%s' in %s '%s' study%s", hp_yaml_shown(k), key,
                          hp_yaml_more(k), article(kind), kind, hint);
    }
    if (!kind_takes(r, key)) {
        char who[128];
        kinds_taking(key, who, sizeof who);
        return hp_ld_fail(ld, k, "'%s' does not apply to %s '%s' study (%s studies take it)",
                          key, article(kind), kind, who);
    }
    int g = lookup(key, gopt_names, N_GOPTS), o = -1;
    if (g < 0 || !takes_generic(r, g)) /* a kind's own (layer reads layers: itself) */
        g = -1, o = own_opt(r, key);
    const yaml_node_t **at = g >= 0 ? &seen->g[g] : &seen->own[o];
    if (*at)
        return hp_ld_fail(ld, k, "duplicate key '%s' (first at line %zu)", key, (*at)->start_mark.line + 1);
    if ((g == G_HEADS && seen->g[G_GROUPS]) || (g == G_GROUPS && seen->g[G_HEADS]))
        return hp_ld_fail(ld, k, "'heads' and 'groups' name the same thing here; give one");
    *at = k;
    return g >= 0 ? get_generic(ld, g, v, s) : r->opts[o].parse(ld, v, s);
}

// After the options: the checks between them, the kind's first.
static enum hp_status check_study(const struct hp_loader *ld, const yaml_node_t *kn, const char *kind,
                                  struct hp_study *s, const struct seen_opts *seen)
{
    const struct hp_study_kind_row *r = hp_study_row(s->kind);
    struct hp_study_seen ks = {.kind = kn, .opts = seen->own};
    enum hp_status st = r->check ? r->check(ld, &ks, s) : HP_OK;
    if (st)
        return st;
    if (seen->g[G_KV] && seen->g[G_UNITS])
        return hp_ld_fail(ld, seen->g[G_KV], "'kv: true' is 'units: kv'; give one of them");
    if (seen->g[G_GROUPS] && s->unit != HP_UNIT_KV)
        return hp_ld_fail(ld, seen->g[G_GROUPS], "'groups' lists KV groups: add units: kv (or use "
                       "'heads' for query heads)");
    if (s->unit == HP_UNIT_MLP && seen->g[G_HEADS])
        return hp_ld_fail(ld, seen->g[G_HEADS], "a layer has one MLP: with units: mlp, narrow by 'layers' "
                          "(not 'heads')");
    if (s->unit == HP_UNIT_MLP && !r->mlp_units) {
        char who[160] = "";
        size_t len = 0;
        for (int k = 0, n = 0; k < HP_STUDY_COUNT && len < sizeof who; k++)
            if (hp_study_row((enum hp_study_kind)k)->mlp_units)
                len += (size_t)snprintf(who + len, sizeof who - len, "%s%s", n++ ? ", " : "",
                                        hp_study_row((enum hp_study_kind)k)->name);
        return hp_ld_fail(ld, seen->g[G_UNITS], "units: mlp is for %s studies, not %s '%s' study (it works on "
                          "heads' positions, pairs or training)", who, article(kind), kind);
    }
    /* a layer has one MLP: normalising by its layer would score every MLP 1 */
    const int o_norm = own_opt(r, "normalize");
    if (s->unit == HP_UNIT_MLP && o_norm >= 0 && seen->own[o_norm] && s->normalize == HP_NORMALIZE_LAYER)
        return hp_ld_fail(ld, seen->own[o_norm], "normalize: layer divides by the layer's units, and a layer has "
                          "one MLP: every score would be 1 (give normalize: none, the default for units: mlp)");
    if (s->unit == HP_UNIT_MLP && o_norm >= 0)
        s->normalize = HP_NORMALIZE_NONE;
    if (r->required && !seen->own[own_opt(r, r->required)])
        return hp_ld_fail(ld, kn, "%s '%s' study needs '%s' (e.g. %s)", article(kind), kind, r->required,
                          r->example);
    return HP_OK;
}

// One entry of `studies`: "kind", or "kind: {options}" (options may be empty).
static enum hp_status load_study(const struct hp_loader *ld, const yaml_node_t *item,
                                 struct hp_study *s)
{
    const yaml_node_t *kn = item, *ov = NULL;
    char hint[256];
    if (item->type == YAML_SEQUENCE_NODE || hp_yaml_is_null(item))
        return hp_ld_fail(ld, item, "a study is a kind like 'single' or 'single: {kv: true}', not "
                       "%s", hp_yaml_type_word(item));
    if (item->type == YAML_MAPPING_NODE) {
        if (hp_yaml_n_pairs(item) == 0)
            return hp_ld_fail(ld, item, "a study is a kind like 'single' or 'single: {kv: true}', "
                           "not an empty mapping");
        kn = hp_ld_node(ld, item->data.mapping.pairs.start[0].key);
        ov = hp_ld_node(ld, item->data.mapping.pairs.start[0].value);
        if (hp_yaml_n_pairs(item) > 1) {
            // The usual slip: options written beside the kind, not under it.
            const yaml_node_t *k2 = hp_ld_node(ld, item->data.mapping.pairs.start[1].key);
            const char *a = kn->type == YAML_SCALAR_NODE ? hp_yaml_text(kn) : "?";
            const char *b = k2->type == YAML_SCALAR_NODE ? hp_yaml_text(k2) : "?";
            return hp_ld_fail(ld, k2, "'%.*s' is beside the study kind '%.*s', not under it "
                           "(indent the options below '%.*s:', or write '%.*s: {%.*s: ...}')",
                           HP_ECHO_MAX, b, HP_ECHO_MAX, a, HP_ECHO_MAX, a, HP_ECHO_MAX, a, HP_ECHO_MAX, b);
        }
    }
    const char *kind = "";
    enum hp_status st = key_text(ld, kn, &kind);
    if (st)
        return st;
    const char *names[HP_STUDY_COUNT];
    kind_names(names);
    int ki = lookup(kind, names, HP_STUDY_COUNT);
    if (ki < 0) {
        if (!suggest(kind, names, HP_STUDY_COUNT) && any_option(kind))
            snprintf(hint, sizeof hint, " ('%s' is an option: write it under a kind, like "
                     "'single: {%s: ...}')", kind, kind);
        else
            hint_for(hint, sizeof hint, kind, names, HP_STUDY_COUNT);
        return hp_ld_fail(ld, kn, "unknown study '%.*s%s'%s", hp_yaml_shown(kn), kind, hp_yaml_more(kn), hint);
    }
    s->kind = (enum hp_study_kind)ki;
    s->line = (int)item->start_mark.line + 1;
    snprintf(s->name, sizeof s->name, "%s", kind);
    const struct hp_study_kind_row *r = hp_study_row(s->kind);
    assert(r->n_opts <= MAX_KIND_OPTS);
    if (r->defaults)
        r->defaults(s);

    struct seen_opts seen = {{0}, {0}};
    if (ov && !hp_yaml_is_null(ov)) {
        if (ov->type != YAML_MAPPING_NODE)
            return hp_ld_fail(ld, ov, "the options of %s '%s' study must be a mapping like "
                           "{name: my-%s}, not %s", article(kind), kind, kind, hp_yaml_type_word(ov));
        for (int i = 0; i < hp_yaml_n_pairs(ov); i++)
            if ((st = load_option(ld, &ov->data.mapping.pairs.start[i], kind, s, &seen)))
                return st;
    }
    return check_study(ld, kn, kind, s, &seen);
}

static enum hp_status load_studies(const struct hp_loader *ld, const yaml_node_t *v,
                                   struct hp_plan *p)
{
    if (v->type != YAML_SEQUENCE_NODE)
        return hp_ld_fail(ld, v, "'studies' must be a list like [baseline, single], not %s",
                       hp_yaml_type_word(v));
    int n = hp_yaml_n_items(v);
    if (n == 0)
        return hp_ld_fail(ld, v, "'studies' is empty (list at least one study, e.g. single)");
    // One spare entry for the baseline inserted in front.
    p->studies = calloc((size_t)n + 1, sizeof *p->studies);
    if (!p->studies)
        return hp_fail(ld->err, HP_ERR_NOMEM, "%s: out of memory", ld->path);
    bool has_baseline = false;
    for (int i = 0; i < n; i++) {
        const yaml_node_t *item = hp_ld_node(ld, v->data.sequence.items.start[i]);
        struct hp_study *s = &p->studies[i + 1];
        p->n_studies = i + 2; // the spare and this study: hp_plan_free frees it on error
        enum hp_status st = load_study(ld, item, s);
        if (st)
            return st;
        for (int j = 1; j <= i; j++)
            if (!strcmp(p->studies[j].name, s->name))
                return hp_ld_fail(ld, item, "duplicate study name '%s' (the study at line %d has "
                               "it too; give one a 'name:')", s->name, p->studies[j].line);
        has_baseline |= s->kind == HP_STUDY_BASELINE;
        const struct hp_study_kind_row *r = hp_study_row(s->kind);
        if (r->check_earlier && (st = r->check_earlier(ld, item, p, i + 1)))
            return st;
    }
    // The spare, first: a baseline (line 0: not in the file), or nothing.
    if (has_baseline) {
        memmove(p->studies, p->studies + 1, sizeof *p->studies * (size_t)n);
        memset(&p->studies[n], 0, sizeof p->studies[n]);
        p->n_studies = n;
    } else {
        p->studies[0].kind = HP_STUDY_BASELINE;
        strcpy(p->studies[0].name, "baseline");
        p->n_studies = n + 1;
    }
    return HP_OK;
}

// --- loading: the plan -------------------------------------------------------

enum top { T_NAME, T_MODEL, T_DATA, T_SEQ_LEN, T_METRIC, T_ABLATION, T_SEED, T_STUDIES, N_TOP };

static const char *const top_names[N_TOP] = {
    "name", "model", "data", "seq_len", "metric", "ablation", "seed", "studies",
};


// One of a few words; "'metric' must be loss, kl, acc or cos, not 'x' (did you mean ...)".
enum hp_status hp_ld_word(const struct hp_loader *ld, const char *key, const yaml_node_t *v,
                               const char *const *words, int n, int *out)
{
    char list[128] = "", hint[160] = "";
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s",
                                i == 0 ? "" : i == n - 1 ? " or " : ", ", words[i]);
    if (v->type != YAML_SCALAR_NODE || hp_yaml_is_null(v))
        return hp_ld_fail(ld, v, "'%s' must be %s, not %s", key, list, hp_yaml_type_word(v));
    int i = lookup(hp_yaml_text(v), words, n);
    if (i >= 0) {
        *out = i;
        return HP_OK;
    }
    const char *s = suggest(hp_yaml_text(v), words, n);
    if (s)
        snprintf(hint, sizeof hint, " (did you mean '%s'?)", s);
    return hp_ld_fail(ld, v, "'%s' must be %s, not '%.*s%s'%s", key, list, hp_yaml_shown(v), hp_yaml_text(v),
                   hp_yaml_more(v), hint);
}

static enum hp_status load_top(const struct hp_loader *ld, enum top t, const yaml_node_t *v,
                               struct hp_plan *p)
{
    int i = 0;
    enum hp_status st;
    switch (t) {
    case T_NAME: return hp_ld_name(ld, "'name'", v, NAME_MAX_PLAN, p->name);
    case T_MODEL: return hp_ld_path(ld, "model", v, &p->model);
    case T_DATA: return hp_ld_path(ld, "data", v, &p->data);
    case T_SEQ_LEN:
        return hp_ld_int(ld, "'seq_len'", v, 0, "a positive integer (or 0 for the data file's)",
                       &p->seq_len);
    case T_METRIC: {
        // the words and their order (the error's list) come from the one metric table
        const char *words[HP_N_METRICS];
        for (int k = 0; k < HP_N_METRICS; k++)
            words[k] = hp_metric_name((enum hp_metric)k);
        if ((st = hp_ld_word(ld, "metric", v, words, HP_N_METRICS, &i)))
            return st;
        snprintf(p->metric, sizeof p->metric, "%s", words[i]);
        return HP_OK;
    }
    case T_ABLATION: {
        const char *words[HP_N_ABLATIONS];
        for (int k = 0; k < HP_N_ABLATIONS; k++)
            words[k] = hp_ablation_name((enum hp_ablation)k);
        if ((st = hp_ld_word(ld, "ablation", v, words, HP_N_ABLATIONS, &i)))
            return st;
        p->ablation = (enum hp_ablation)i;
        return HP_OK;
    }
    case T_SEED: return hp_ld_seed(ld, "seed", v, &p->seed);
    case T_STUDIES: return load_studies(ld, v, p);
    case N_TOP: break;
    }
    assert(0);
    return HP_ERR_PLAN;
}

static enum hp_status load_root(const struct hp_loader *ld, const yaml_node_t *root,
                                struct hp_plan *p)
{
    if (!root)
        return hp_ld_fail(ld, NULL, "the plan is empty (it needs name, model, data and studies)");
    if (root->type != YAML_MAPPING_NODE)
        return hp_ld_fail(ld, root, "a plan is a mapping of keys (name, model, data, studies, ...), "
                       "not %s", hp_yaml_type_word(root));
    const yaml_node_t *seen[N_TOP] = {0};
    for (int i = 0; i < hp_yaml_n_pairs(root); i++) {
        const yaml_node_pair_t *pr = &root->data.mapping.pairs.start[i];
        const yaml_node_t *k = hp_ld_node(ld, pr->key), *v = hp_ld_node(ld, pr->value);
        const char *key = "";
        enum hp_status st = key_text(ld, k, &key);
        if (st)
            return st;
        int t = lookup(key, top_names, N_TOP);
        if (t < 0) {
            char hint[256];
            const char *names[HP_STUDY_COUNT];
            kind_names(names);
            if (lookup(key, names, HP_STUDY_COUNT) >= 0)
                snprintf(hint, sizeof hint, " (studies go in the list: studies: [%s])", key);
            else
                hint_for(hint, sizeof hint, key, top_names, N_TOP);
            return hp_ld_fail(ld, k, "unknown key '%.*s%s'%s", hp_yaml_shown(k), key, hp_yaml_more(k), hint);
        }
        if (seen[t])
            return hp_ld_fail(ld, k, "duplicate key '%s' (first at line %zu)", key,
                           seen[t]->start_mark.line + 1);
        seen[t] = k;
        if ((st = load_top(ld, (enum top)t, v, p)))
            return st;
    }
    static const enum top required[] = {T_NAME, T_MODEL, T_DATA, T_STUDIES};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (!seen[required[i]])
            return hp_ld_fail(ld, NULL, "missing '%s' (a plan needs name, model, data and studies)",
                           top_names[required[i]]);
    for (int i = 0; i < p->n_studies; i++) {
        const struct hp_study_kind_row *r = hp_study_row(p->studies[i].kind);
        enum hp_status st = r->check_plan ? r->check_plan(ld, p, &p->studies[i], seen[T_METRIC], seen[T_ABLATION])
                                          : HP_OK;
        if (st)
            return st;
    }
    return HP_OK;
}

// --- loading: the file and libyaml's errors ----------------------------------

// A hint for libyaml's problem, or "": at is the character where it was found.
static void yaml_hint(const yaml_parser_t *pr, const char *problem, char at, char *buf,
                      size_t cap)
{
    static const struct { const char *problem, *hint; } hints[] = {
        {"did not find expected key", " (check indentation)"},
        {"did not find expected '-' indicator", " (check the indentation of the list)"},
        {"mapping values are not allowed in this context",
         " (check indentation, or quote a value that contains ': ')"},
        {"block sequence entries are not allowed in this context",
         " (check indentation: a list item cannot follow a key's value on its line)"},
        {"found a tab character that violates indentation", " (indent with spaces, not tabs)"},
        {"found undefined alias", " (define &anchor before using *anchor)"},
        {"could not find expected ':'", " (a key needs ': ' after it)"},
        {"did not find expected node content", " (a value is missing)"},
    };
    // Where the unclosed thing was opened, when libyaml says.
    size_t line = pr->context_mark.line + 1, col = pr->context_mark.column + 1;
    const char *ctx = pr->context ? pr->context : "";
    buf[0] = 0;
    if (!strcmp(problem, "found unexpected end of stream") && strstr(ctx, "quoted scalar"))
        snprintf(buf, cap, " (the quote at line %zu:%zu is not closed)", line, col);
    else if (!strcmp(problem, "found unexpected end of stream"))
        snprintf(buf, cap, " (is a quote left open?)");
    else if (!strcmp(problem, "did not find expected ',' or ']'"))
        snprintf(buf, cap, " (a ',' is missing, or the [list] at line %zu:%zu is not closed)",
                 line, col);
    else if (!strcmp(problem, "did not find expected ',' or '}'"))
        snprintf(buf, cap, " (a ',' is missing, or the {mapping} at line %zu:%zu is not "
                 "closed)", line, col);
    else if (!strcmp(problem, "found character that cannot start any token"))
        snprintf(buf, cap, "%s", at == '\t' ? " (indent with spaces, not tabs)"
                 : at == '@' || at == '`' ? " (quote values that start with @ or `)"
                 : at == '%' ? " (quote values that start with %)" : "");
    else
        for (size_t i = 0; i < sizeof hints / sizeof hints[0]; i++)
            if (!strcmp(problem, hints[i].problem))
                snprintf(buf, cap, "%s", hints[i].hint);
}

static enum hp_status yaml_fail(const char *path, const char *text, size_t len,
                                const yaml_parser_t *pr, struct hp_error *err)
{
    if (pr->error == YAML_MEMORY_ERROR)
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory reading YAML", path);
    const char *problem = pr->problem ? pr->problem : "malformed";
    if (pr->error == YAML_READER_ERROR) {
        // The reader knows a byte offset, not a line: count.
        size_t off = pr->problem_offset < len ? pr->problem_offset : len, line = 1, col = 1;
        for (size_t i = 0; i < off; i++) {
            if (text[i] == '\n')
                line++, col = 1;
            else if (((unsigned char)text[i] & 0xC0) != 0x80)
                col++;
        }
        if (!strcmp(problem, "control characters are not allowed"))
            return hp_fail(err, HP_ERR_PLAN, "%s:%zu:%zu: control character 0x%02x in the plan "
                           "(a plan is text)", path, line, col, (unsigned)pr->problem_value & 0xFF);
        return hp_fail(err, HP_ERR_PLAN, "%s:%zu:%zu: not UTF-8 text: %s (save the plan as "
                       "UTF-8)", path, line, col, problem);
    }
    yaml_mark_t m = pr->problem_mark;
    char at = m.index < len ? text[m.index] : 0;
    // Duplicate anchors come as context "found duplicate anchor; first occurence".
    if (pr->context && !strcmp(problem, "second occurence"))
        problem = "found an anchor defined twice";
    char hint[160];
    yaml_hint(pr, problem, at, hint, sizeof hint);
    return hp_fail(err, HP_ERR_PLAN, "%s:%zu:%zu: YAML syntax error: %s%s", path, m.line + 1,
                   m.column + 1, problem, hint);
}

enum hp_status hp_plan_load(const char *path, struct hp_plan **out, struct hp_error *err)
{
    assert(path && out);
    *out = NULL;
    char *text = NULL;
    size_t len = 0;
    enum hp_status st = hp_read_text(path, PLAN_MAX_BYTES, HP_ERR_PLAN, "a plan", &text, &len, err);
    if (st)
        return st;
    st = hp_plan_parse(path, text, len, out, err);
    free(text);
    return st;
}

enum hp_status hp_plan_parse(const char *path, const char *text, size_t len, struct hp_plan **out,
                             struct hp_error *err)
{
    assert(path && text && out);
    *out = NULL;
    if (len > PLAN_MAX_BYTES)
        return hp_fail(err, HP_ERR_PLAN, "%s: over %d bytes, too large for a plan", path, PLAN_MAX_BYTES);
    struct hp_plan *p = calloc(1, sizeof *p);
    if (!p)
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
    if (hp_path_make(&p->path, err, "%s", path) != HP_OK) {
        free(p);
        return HP_ERR_NOMEM;
    }
    p->metric[0] = '\0'; /* not given: the model's own, resolved against it (hp_evaluator_pick_metric) */
    p->ablation = HP_ABLATE_ZERO;

    /* the plan keeps its own NUL-terminated copy: errors and locate() read it again */
    p->text = malloc(len + 1);
    if (!p->text) {
        hp_plan_free(p);
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
    }
    memcpy(p->text, text, len);
    p->text[len] = 0;
    enum hp_status st;

    const char *slash = strrchr(path, '/');
    char *dir;
    if (hp_path_make(&dir, err, "%.*s", !slash ? 0 : slash == path ? 1 : (int)(slash - path), path) != HP_OK) {
        hp_plan_free(p);
        return HP_ERR_NOMEM;
    }

    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        free(dir);
        hp_plan_free(p);
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)p->text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        st = yaml_fail(path, p->text, len, &parser, err);
    } else {
        struct hp_loader ld = {.path = path, .dir = dir, .doc = &doc, .err = err};
        st = load_root(&ld, yaml_document_get_root_node(&doc), p);
        // A second document would be silently ignored: refuse it.
        yaml_document_t more_doc;
        if (st == HP_OK) {
            if (!yaml_parser_load(&parser, &more_doc)) {
                st = yaml_fail(path, p->text, len, &parser, err);
            } else {
                const yaml_node_t *r = yaml_document_get_root_node(&more_doc);
                if (r)
                    st = hp_fail(err, HP_ERR_PLAN, "%s:%zu:%zu: a plan file holds one YAML "
                                 "document (remove the second '---')", path,
                                 more_doc.start_mark.line + 1, more_doc.start_mark.column + 1);
                yaml_document_delete(&more_doc);
            }
        }
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&parser);
    free(dir);
    if (st) {
        hp_plan_free(p);
        return st;
    }
    *out = p;
    return HP_OK;
}

// --- expansion: where in the plan --------------------------------------------

/*
 * Find where study si's option `key` is written -- the list item equal to
 * value when the option is a list, or the value of sets' entry `set` -- by
 * reading plan->text again. Falls back to the study's line (column 0 =
 * unknown) for plans not read from a file.
 */
static void locate(const struct hp_plan *p, int si, const char *key, long value, const char *set,
                   size_t *line, size_t *col)
{
    *line = (size_t)p->studies[si].line;
    *col = 0;
    if (!p->text || !key || p->studies[si].line == 0)
        return;
    // The inserted baseline (line 0) is not in the file.
    int idx = si - (p->n_studies > 0 && p->studies[0].line == 0);
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser))
        return;
    yaml_parser_set_input_string(&parser, (const unsigned char *)p->text, strlen(p->text));
    if (!yaml_parser_load(&parser, &doc)) {
        yaml_parser_delete(&parser);
        return;
    }
    struct hp_loader ld = {.doc = &doc};
    const yaml_node_t *root = yaml_document_get_root_node(&doc), *found = NULL;
    const yaml_node_t *studies = NULL;
    for (int i = 0; root && root->type == YAML_MAPPING_NODE && i < hp_yaml_n_pairs(root); i++) {
        const yaml_node_t *k = hp_ld_node(&ld, root->data.mapping.pairs.start[i].key);
        if (k->type == YAML_SCALAR_NODE && !strcmp(hp_yaml_text(k), "studies"))
            studies = hp_ld_node(&ld, root->data.mapping.pairs.start[i].value);
    }
    const yaml_node_t *item = NULL, *opts = NULL;
    if (studies && studies->type == YAML_SEQUENCE_NODE && idx >= 0 && idx < hp_yaml_n_items(studies))
        item = hp_ld_node(&ld, studies->data.sequence.items.start[idx]);
    if (item && item->type == YAML_MAPPING_NODE && hp_yaml_n_pairs(item) == 1)
        opts = hp_ld_node(&ld, item->data.mapping.pairs.start[0].value);
    for (int i = 0; opts && opts->type == YAML_MAPPING_NODE && i < hp_yaml_n_pairs(opts); i++) {
        const yaml_node_t *k = hp_ld_node(&ld, opts->data.mapping.pairs.start[i].key);
        const yaml_node_t *v = hp_ld_node(&ld, opts->data.mapping.pairs.start[i].value);
        if (k->type != YAML_SCALAR_NODE)
            continue;
        bool match = !strcmp(hp_yaml_text(k), key) ||
                     (!strcmp(key, "heads") && !strcmp(hp_yaml_text(k), "groups"));
        if (!match)
            continue;
        found = v;
        if (set && v->type == YAML_MAPPING_NODE) {
            for (int j = 0; j < hp_yaml_n_pairs(v); j++) {
                const yaml_node_t *sk = hp_ld_node(&ld, v->data.mapping.pairs.start[j].key);
                if (sk->type == YAML_SCALAR_NODE && !strcmp(hp_yaml_text(sk), set))
                    found = hp_ld_node(&ld, v->data.mapping.pairs.start[j].value);
            }
        } else if (v->type == YAML_SEQUENCE_NODE) {
            for (int j = 0; j < hp_yaml_n_items(v); j++) {
                const yaml_node_t *it = hp_ld_node(&ld, v->data.sequence.items.start[j]);
                uint64_t x;
                if (it->type == YAML_SCALAR_NODE && scan_uint(hp_yaml_text(it), &x) == INT_OK &&
                    x == (uint64_t)value)
                    found = it;
            }
        }
    }
    if (found) {
        *line = found->start_mark.line + 1;
        *col = found->start_mark.column + 1;
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
}

// --- expansion ---------------------------------------------------------------

// "plan:line:col: study 'x': ..." pointing at key's value (see locate).
enum hp_status hp_ex_fail(const struct hp_expander *e, const char *key, long value,
                                 const char *set, const char *fmt, ...)
{
    char msg[HP_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t line, col;
    locate(e->p, e->si, key, value, set, &line, &col);
    const char *path = e->p->path && e->p->path[0] ? e->p->path : "plan";
    if (col)
        return hp_fail(e->err, HP_ERR_PLAN, "%s:%zu:%zu: study '%s': %s", path, line, col,
                       e->s->name, msg);
    return hp_fail(e->err, HP_ERR_PLAN, "%s:%zu: study '%s': %s", path, line, e->s->name, msg);
}

enum hp_status hp_ex_nomem(const struct hp_expander *e)
{
    return hp_fail(e->err, HP_ERR_NOMEM, "%s: out of memory", e->p->path);
}

// Append a job; takes m (NULL = allocation failed).
enum hp_status hp_ex_emit(struct hp_expander *e, struct hp_mask *m, int layer, int unit, int unit2,
                           int sample, int k, const char *fmt, ...)
{
    if (!m)
        return hp_fail(e->err, HP_ERR_NOMEM, "%s: out of memory expanding study '%s'",
                       e->p->path, e->s->name);
    struct hp_job job = {.study = e->si, .step = 0, .sample = sample, .k = k, .layer = layer,
                         .unit = unit, .unit2 = unit2, .mask = m};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(job.label, sizeof job.label, fmt, ap);
    va_end(ap);
    if (hp_joblist_push(e->jl, &job))
        return hp_fail(e->err, HP_ERR_NOMEM, "%s: out of memory expanding study '%s'",
                       e->p->path, e->s->name);
    return HP_OK;
}

// Resolve the study's units and filters against the model.
static enum hp_status select_units(struct hp_expander *e)
{
    const struct hp_study *s = e->s;
    const struct hp_model_info *in = e->info;
    char range[64];
    if (s->unit == HP_UNIT_KV && hp_unit_width(in, HP_UNIT_KV) == 0)
        return hp_ex_fail(e, "kv", 0, NULL, "units: kv needs query heads that group evenly "
                          "over KV heads (model has %d heads and %d KV heads)",
                          in->n_heads, hp_unit_count(in, HP_UNIT_KV));
    e->n_units = hp_unit_count(in, s->unit);
    for (int i = 0; i < s->n_layers_sel; i++)
        if (s->layers[i] >= in->n_layers) {
            hp_range_text(range, sizeof range, "layers", "layer", in->n_layers);
            return hp_ex_fail(e, "layers", s->layers[i], NULL, "layer %d does not exist (model "
                              "has %s)", s->layers[i], range);
        }
    for (int i = 0; i < s->n_units_sel; i++)
        if (s->units[i] >= e->n_units) {
            hp_range_text(range, sizeof range, hp_unit_name(s->unit, true), hp_unit_name(s->unit, false),
                          e->n_units);
            return hp_ex_fail(e, "heads", s->units[i], NULL, "%s %d does not exist (model has "
                              "%s)", hp_unit_name(s->unit, false), s->units[i], range);
        }
    e->n_lay = s->n_layers_sel ? s->n_layers_sel : in->n_layers;
    e->n_sel = s->n_units_sel ? s->n_units_sel : e->n_units;
    e->lay = malloc(sizeof *e->lay * (size_t)e->n_lay);
    e->sel = malloc(sizeof *e->sel * (size_t)e->n_sel);
    if (!e->lay || !e->sel)
        return hp_fail(e->err, HP_ERR_NOMEM, "%s: out of memory", e->p->path);
    for (int i = 0; i < e->n_lay; i++)
        e->lay[i] = s->n_layers_sel ? s->layers[i] : i;
    for (int i = 0; i < e->n_sel; i++)
        e->sel[i] = s->n_units_sel ? s->units[i] : i;
    return HP_OK;
}

/*
 * The most jobs a plan may expand into: a million evaluations is weeks of
 * work for the smallest model, and the jobs' masks (one float per head each)
 * must fit in memory: at most 1 GB of them.
 */
static int64_t max_jobs(const struct hp_model_info *in)
{
    int64_t by_memory = ((int64_t)1 << 30) / ((int64_t)in->n_layers * in->n_heads * (int64_t)sizeof(float));
    return by_memory < HP_PLAN_MAX_JOBS ? by_memory : HP_PLAN_MAX_JOBS;
}

enum hp_status hp_plan_expand(const struct hp_plan *p, const struct hp_model_info *info,
                              struct hp_joblist **out, struct hp_error *err)
{
    assert(p && info && out);
    *out = NULL;
    if (info->n_layers < 1 || info->n_heads < 1)
        return hp_fail(err, HP_ERR_ARG, "%s: model has %d layers of %d heads (nothing to ablate)",
                       p->path, info->n_layers, info->n_heads);
    struct hp_joblist *jl = calloc(1, sizeof *jl);
    if (!jl)
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", p->path);
    enum hp_status st = HP_OK;
    for (int si = 0; st == HP_OK && si < p->n_studies; si++) {
        struct hp_expander e = {.p = p, .info = info, .jl = jl, .err = err, .si = si,
                             .s = &p->studies[si]};
        const struct hp_study_kind_row *r = hp_study_row(e.s->kind);
        st = select_units(&e);
        struct hp_mask *base = NULL; /* a mask: is checked against the model here, before anything runs */
        if (st == HP_OK && e.s->mask)
            st = hp_study_base_mask(p->path, e.s, info, &base, err);
        hp_mask_free(base);
        int64_t n = st == HP_OK && r->count_jobs ? r->count_jobs(&e) : 0, limit = max_jobs(info);
        if (st == HP_OK && n > limit - jl->n)
            st = hp_ex_fail(&e, r->many_key, 0, NULL,
                            "expands to %lld jobs, which with the %d before it is more than the %lld a plan "
                            "may hold for this model (sample fewer, or narrow it with layers: / heads:)",
                            (long long)n, jl->n, (long long)limit);
        if (st == HP_OK && r->expand)
            st = r->expand(&e);
        free(e.lay);
        free(e.sel);
    }
    if (st) {
        hp_joblist_free(jl);
        return st;
    }
    *out = jl;
    return HP_OK;
}

// --- gradients -----------------------------------------------------------------

enum hp_status hp_plan_check_grad(const struct hp_plan *p, const struct hp_evaluator *ev,
                                  const struct hp_model_info *info, const char *metric, struct hp_error *err)
{
    enum hp_metric m = HP_METRIC_LOSS;
    hp_metric_parse(metric, &m); /* resolved by hp_evaluator_pick_metric: a name from the table */
    const enum hp_metric gm = hp_metric_grad_of(m);
    for (int i = 0; i < p->n_studies; i++) {
        const struct hp_study *s = &p->studies[i];
        if (!hp_study_needs_grad(s))
            continue;
        if (!hp_evaluator_has_metric(ev, hp_metric_name(gm))) /* e.g. acc where the data has no labels */
            return hp_fail(err, HP_ERR_PLAN, "%s:%d: study '%s' differentiates %s, which the model does not have on "
                           "this data (use a plan metric with a gradient the model has, or drop the study)",
                           p->path, s->line, s->name, hp_metric_grad_what(gm));
        if (!hp_metric_grad_zero_unmasked(gm) || hp_study_grad_off_base(s))
            continue;
        struct hp_mask *base;
        enum hp_status st = hp_study_base_mask(p->path, s, info, &base, err);
        if (st)
            return st;
        const bool removes = hp_mask_first_changed(base, info->n_layers) < info->n_layers;
        hp_mask_free(base);
        if (removes)
            continue;
        int h0 = 0; /* the hint's head: the first the checkpoint has (a pruned one lacks some) */
        while (info->pruned && h0 < info->n_layers * info->n_heads - 1 && info->pruned[h0])
            h0++;
        char mask[96] = "", ig[112] = "";
        if (hp_study_takes(s, "mask"))
            snprintf(mask, sizeof mask, "give it heads already removed to start from, e.g. mask: \"%d.%d\"",
                     h0 / info->n_heads, h0 % info->n_heads);
        if (hp_study_takes(s, "estimator"))
            snprintf(ig, sizeof ig, "%srank by integrated gradients, whose gates leave 1 along the path: "
                     "estimator: ig-layer", mask[0] ? ", or " : "");
        return hp_fail(err, HP_ERR_PLAN, "%s:%d: study '%s' differentiates %s, whose gradient is 0 at the unmasked "
                           "model: %s%s", p->path, s->line, s->name, hp_metric_grad_what(gm), mask, ig);
    }
    return HP_OK;
}
