/*
 * plan.c -- sweep plans: a YAML file naming a model, held-out data and a list
 * of studies, read into struct hp_plan and expanded into jobs (masked
 * variants to evaluate).
 *
 * The format users write -- top-level keys, study kinds and their options,
 * expansion order -- is documented in docs/plans.md; keep it in step with
 * the loader below (top_names, kind_names, opt_names, kind_opts). Lists are
 * sorted on load; a number listed twice is an error. Booleans are YAML 1.1's.
 * Layers, heads and KV groups are checked against the model only at
 * expansion, which is the first time the model is known.
 *
 * A plan without a baseline study gets one, named "baseline", at index 0
 * (hp_study.line = 0 marks it as not written in the file).
 *
 * Expansion (hp_plan_expand) turns every study but iterative ones into jobs,
 * in plan order; within a study by layer, then unit; random by k, then
 * sample. Random draws are a function of (plan seed, study name, k, sample)
 * only -- splitmix64 seeding xoshiro256** -- so they are the same on every
 * machine and survive adding, removing or reordering other studies (the
 * results database then recognises the variants as already done). The
 * study's index is deliberately not part of the seed.
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
#include "plan_int.h"
#include "roles_int.h" /* hp_roles_probe_size: whether the model takes a roles study's probe */
#include "util_int.h"

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
// Longest piece of user text echoed back in an error message.
#define ECHO_MAX 64
#define NAME_MAX_PLAN ((int)sizeof(((struct hp_plan *)0)->name) - 1)
#define NAME_MAX_STUDY ((int)sizeof(((struct hp_study *)0)->name) - 1)

#if defined(__GNUC__)
#define PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#else
#define PRINTF_LIKE(f, a)
#endif

// --- names -------------------------------------------------------------------

static const char *const kind_names[] = {
    [HP_STUDY_BASELINE] = "baseline", [HP_STUDY_SINGLE] = "single",
    [HP_STUDY_ONLY] = "only",         [HP_STUDY_LAYER] = "layer",
    [HP_STUDY_RANDOM] = "random",     [HP_STUDY_EXPLICIT] = "explicit",
    [HP_STUDY_PAIRS] = "pairs",       [HP_STUDY_ITERATIVE] = "iterative",
    [HP_STUDY_IMPORTANCE] = "importance", [HP_STUDY_ATTRIBUTION] = "attribution",
    [HP_STUDY_ROLES] = "roles",
    [HP_STUDY_GATES] = "gates",
};
#define N_KINDS ((int)(sizeof kind_names / sizeof kind_names[0]))

static const char *const normalize_names[] = {[HP_NORMALIZE_LAYER] = "layer", [HP_NORMALIZE_NONE] = "none"};
static const char *const rank_names[] = {[HP_RANK_EXACT] = "exact", [HP_RANK_GRADIENT] = "gradient"};

const char *hp_normalize_name(enum hp_normalize n)
{
    return (int)n >= 0 && (int)n < 2 ? normalize_names[n] : "unknown";
}

const char *hp_rank_name(enum hp_rank r)
{
    return (int)r >= 0 && (int)r < 2 ? rank_names[r] : "unknown";
}

const char *hp_study_kind_name(enum hp_study_kind k)
{
    if ((int)k < 0 || (int)k >= N_KINDS)
        return "unknown"; // a value cast from outside the enum
    return kind_names[k];
}

bool hp_study_first_shard_only(enum hp_study_kind k)
{
    return k == HP_STUDY_ITERATIVE || k == HP_STUDY_IMPORTANCE || k == HP_STUDY_ATTRIBUTION || k == HP_STUDY_ROLES ||
           k == HP_STUDY_GATES;
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
    free(s->k);
    for (int i = 0; i < s->n_sets; i++) {
        free(s->set_names[i]);
        free(s->set_specs[i]);
    }
    free(s->set_names);
    free(s->set_specs);
    free(s->lambda);
    free(s->train);
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

struct loader {
    const char *path;
    const char *dir; // the plan file's folder, "" for the working directory
    yaml_document_t *doc;
    struct hp_error *err;
};

PRINTF_LIKE(3, 4)
static enum hp_status fail_at(const struct loader *ld, const yaml_node_t *n, const char *fmt, ...)
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

static yaml_node_t *node(const struct loader *ld, int i)
{
    return yaml_document_get_node(ld->doc, i);
}

static const char *text_of(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

// How much of a scalar to echo in a message: "%.*s%s", shown(n), text_of(n), more(n).
static int shown(const yaml_node_t *n)
{
    return n->data.scalar.length > ECHO_MAX ? ECHO_MAX : (int)n->data.scalar.length;
}

static const char *more(const yaml_node_t *n)
{
    return n->data.scalar.length > ECHO_MAX ? "..." : "";
}

// An empty value: `key:` with nothing after it, `~` or `null`.
static bool is_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *s = text_of(n);
    return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
           !strcmp(s, "NULL");
}

static const char *type_word(const yaml_node_t *n)
{
    switch (n->type) {
    case YAML_SEQUENCE_NODE: return "a list";
    case YAML_MAPPING_NODE: return "a mapping";
    default: return is_null(n) ? "empty" : "a single value";
    }
}

static int n_pairs(const yaml_node_t *n)
{
    return (int)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
}

static int n_items(const yaml_node_t *n)
{
    return (int)(n->data.sequence.items.top - n->data.sequence.items.start);
}

// Keys must be plain text, without NUL bytes: compared as C strings, "model\0x" would be model.
static enum hp_status key_text(const struct loader *ld, const yaml_node_t *k, const char **out)
{
    if (k->type != YAML_SCALAR_NODE || is_null(k))
        return fail_at(ld, k, "a key must be a word like 'model', not %s", type_word(k));
    if (strlen(text_of(k)) != k->data.scalar.length)
        return fail_at(ld, k, "a key contains a NUL character");
    *out = text_of(k);
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
static enum hp_status get_text(const struct loader *ld, const char *what, const yaml_node_t *v,
                               const char **out)
{
    if (v->type != YAML_SCALAR_NODE)
        return fail_at(ld, v, "%s must be a single value, not %s", what, type_word(v));
    if (is_null(v) || v->data.scalar.length == 0)
        return fail_at(ld, v, "%s needs a value", what);
    if (strlen(text_of(v)) != v->data.scalar.length)
        return fail_at(ld, v, "%s contains a NUL character", what);
    *out = text_of(v);
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

// An integer in [lo, INT_MAX]; what names the value in messages ("'seq_len'").
static enum hp_status get_int(const struct loader *ld, const char *what, const yaml_node_t *v,
                              int lo, const char *expect, int *out)
{
    if (v->type != YAML_SCALAR_NODE || is_null(v))
        return fail_at(ld, v, "%s must be %s, not %s", what, expect, type_word(v));
    uint64_t x = 0;
    enum int_scan sc = scan_uint(text_of(v), &x);
    if (sc == INT_OK && x > INT_MAX)
        sc = INT_HUGE;
    if (sc == INT_HUGE)
        return fail_at(ld, v, "%s: %.*s%s is too large: it must be %s, at most %d", what, shown(v), text_of(v),
                       more(v), expect, INT_MAX);
    if (sc != INT_OK || (int)x < lo)
        return fail_at(ld, v, "%s must be %s, not '%.*s%s'", what, expect, shown(v), text_of(v),
                       more(v));
    *out = (int)x;
    return HP_OK;
}

static enum hp_status get_bool(const struct loader *ld, const char *key, const yaml_node_t *v,
                               bool *out)
{
    // YAML 1.1's spellings, as libyaml's users expect.
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
    if (v->type == YAML_SCALAR_NODE && v->data.scalar.length < 8) {
        char lower[8] = {0};
        for (size_t j = 0; j < v->data.scalar.length; j++)
            lower[j] = (char)tolower((unsigned char)text_of(v)[j]);
        for (int i = 0; i < 3; i++)
            if (!strcmp(lower, yes[i]) || !strcmp(lower, no[i])) {
                *out = !strcmp(lower, yes[i]);
                return HP_OK;
            }
    }
    if (v->type != YAML_SCALAR_NODE || is_null(v))
        return fail_at(ld, v, "'%s' must be true or false, not %s", key, type_word(v));
    return fail_at(ld, v, "'%s' must be true or false, not '%.*s%s'", key, shown(v), text_of(v),
                   more(v));
}

// A fraction written 10% or 0.1, in [lo, 1) -- and > 0 when open_lo.
static enum hp_status get_fraction(const struct loader *ld, const char *key, const yaml_node_t *v,
                                   bool open_lo, double *out)
{
    const char *want = open_lo ? "a fraction in (0, 1) like 10% or 0.1"
                               : "a fraction in [0, 1) like 20% or 0.2";
    if (v->type != YAML_SCALAR_NODE || is_null(v))
        return fail_at(ld, v, "'%s' must be %s, not %s", key, want, type_word(v));
    char buf[64];
    size_t len = v->data.scalar.length;
    bool ok = len > 0 && len < sizeof buf;
    double x = 0;
    if (ok) {
        memcpy(buf, text_of(v), len + 1);
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
        return fail_at(ld, v, "'%s' must be %s, not '%.*s%s'", key, want, shown(v), text_of(v),
                       more(v));
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

static enum hp_status get_name(const struct loader *ld, const char *what, const yaml_node_t *v,
                               int max, char *out)
{
    const char *s;
    enum hp_status st = get_text(ld, what, v, &s);
    if (st)
        return st;
    if (!name_chars_ok(s))
        return fail_at(ld, v, "%s may hold only letters, digits, '_', '.' and '-', not '%.*s%s'",
                       what, shown(v), s, more(v));
    if ((int)strlen(s) > max)
        return fail_at(ld, v, "%s is longer than %d characters", what, max);
    strcpy(out, s);
    return HP_OK;
}

// A path relative to the plan file's folder, as written for the working
// directory. ".." is kept, not folded: "plans/../models/x" is right even
// when plans/ is a symbolic link, and a lexical "models/x" would not be.
// *out: a fresh string (free() it; a value it held is freed first).
static enum hp_status get_path(const struct loader *ld, const char *key, const yaml_node_t *v, char **out)
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
static enum hp_status get_int_list(const struct loader *ld, const char *key, const yaml_node_t *v,
                                   int lo, int **out, int *n_out)
{
    char what[48];
    snprintf(what, sizeof what, "'%s'", key);
    const char *expect = lo > 0 ? "a positive integer or a list of them"
                                : "a non-negative integer or a list of them";
    int n = v->type == YAML_SEQUENCE_NODE ? n_items(v) : 1;
    if (v->type == YAML_MAPPING_NODE || is_null(v))
        return fail_at(ld, v, "%s must be %s, not %s", what, expect, type_word(v));
    if (n == 0)
        return fail_at(ld, v, "%s is an empty list (leave it out to use all)", what);
    int *xs = malloc(sizeof *xs * (size_t)n);
    if (!xs)
        return hp_fail(ld->err, HP_ERR_NOMEM, "%s: out of memory", ld->path);
    for (int i = 0; i < n; i++) {
        const yaml_node_t *it = v->type == YAML_SEQUENCE_NODE
                                    ? node(ld, v->data.sequence.items.start[i]) : v;
        enum hp_status st = it->type == YAML_SCALAR_NODE && !is_null(it)
                                ? get_int(ld, what, it, lo, lo > 0 ? "a positive integer"
                                                                   : "a non-negative integer",
                                          &xs[i])
                                : fail_at(ld, it, "%s must be %s, not a list of %s", what,
                                          expect, it->type == YAML_SCALAR_NODE ? "empty items"
                                                                               : "lists");
        for (int j = 0; st == HP_OK && j < i; j++)
            if (xs[j] == xs[i])
                st = fail_at(ld, it, "%s lists %d twice", what, xs[i]);
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
static bool scan_number(const char *s, size_t len, double *out)
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
static enum hp_status get_number(const struct loader *ld, const char *key, const yaml_node_t *v, double lo,
                                 bool open, const char *want, double *out)
{
    if (v->type != YAML_SCALAR_NODE || is_null(v))
        return fail_at(ld, v, "'%s' must be %s, not %s", key, want, type_word(v));
    double x = 0;
    if (!scan_number(text_of(v), v->data.scalar.length, &x) || x < lo || (open && x == lo))
        return fail_at(ld, v, "'%s' must be %s, not '%.*s%s'", key, want, shown(v), text_of(v), more(v));
    *out = x;
    return HP_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// A list of numbers >= 0, or one number; sorted, no repeats.
static enum hp_status get_lambda_list(const struct loader *ld, const yaml_node_t *v, double **out, int *n_out)
{
    const char *want = "a non-negative number or a list of them, like [0.001, 0.01, 0.1]";
    int n = v->type == YAML_SEQUENCE_NODE ? n_items(v) : 1;
    if (v->type == YAML_MAPPING_NODE || is_null(v))
        return fail_at(ld, v, "'lambda' must be %s, not %s", want, type_word(v));
    if (n == 0)
        return fail_at(ld, v, "'lambda' is an empty list (give at least one penalty weight)");
    double *xs = malloc(sizeof *xs * (size_t)n);
    if (!xs)
        return hp_fail(ld->err, HP_ERR_NOMEM, "%s: out of memory", ld->path);
    for (int i = 0; i < n; i++) {
        const yaml_node_t *it = v->type == YAML_SEQUENCE_NODE ? node(ld, v->data.sequence.items.start[i]) : v;
        enum hp_status st = it->type == YAML_SCALAR_NODE && !is_null(it)
                                ? get_number(ld, "lambda", it, 0, false, "a non-negative number", &xs[i])
                                : fail_at(ld, it, "'lambda' must be %s, not a list of %s", want,
                                          it->type == YAML_SCALAR_NODE ? "empty items" : "lists");
        for (int j = 0; st == HP_OK && j < i; j++)
            if (xs[j] == xs[i])
                st = fail_at(ld, it, "'lambda' lists %.*s twice", shown(it), text_of(it));
        if (st) {
            free(xs);
            return st;
        }
    }
    hp_qsort(xs, (size_t)n, sizeof *xs, cmp_double);
    *out = xs;
    *n_out = n;
    return HP_OK;
}

// An unsigned 64-bit seed (the plan's and a gates study's).
static enum hp_status get_seed(const struct loader *ld, const char *key, const yaml_node_t *v, uint64_t *out)
{
    uint64_t x = 0;
    enum int_scan sc = v->type == YAML_SCALAR_NODE && !is_null(v) ? scan_uint(text_of(v), &x) : INT_NOT;
    if (sc == INT_OK) {
        *out = x;
        return HP_OK;
    }
    if (sc == INT_HUGE)
        return fail_at(ld, v, "'%s' must be below 2^64", key);
    if (v->type != YAML_SCALAR_NODE || is_null(v))
        return fail_at(ld, v, "'%s' must be a non-negative integer, not %s", key, type_word(v));
    return fail_at(ld, v, "'%s' must be a non-negative integer, not '%.*s%s'", key, shown(v), text_of(v), more(v));
}

// split: a fraction of the sequences (25% or 0.25) or a count of them (8).
static enum hp_status get_split(const struct loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    const char *want = "a fraction of the data's sequences in (0, 1) like 25% or 0.25, or a number of them like 8";
    if (v->type != YAML_SCALAR_NODE || is_null(v))
        return fail_at(ld, v, "'split' must be %s, not %s", want, type_word(v));
    uint64_t n = 0;
    enum int_scan sc = scan_uint(text_of(v), &n);
    if (sc == INT_OK && n >= 1 && n <= INT_MAX) {
        s->split_count = (int)n;
        return HP_OK;
    }
    const char *t = text_of(v);
    size_t len = v->data.scalar.length;
    bool percent = len > 1 && t[len - 1] == '%';
    double x = 0;
    if (sc == INT_NOT && scan_number(t, percent ? len - 1 : len, &x)) {
        if (percent)
            x /= 100.0;
        if (x > 0 && x < 1) {
            s->split_frac = x;
            return HP_OK;
        }
    }
    return fail_at(ld, v, "'split' must be %s, not '%.*s%s'", want, shown(v), t, more(v));
}

// --- loading: studies --------------------------------------------------------

enum opt {
    O_NAME, O_LAYERS, O_HEADS, O_GROUPS, O_KV, O_K, O_SAMPLES, O_SETS, O_PRUNE, O_FLOOR, O_KEEP1,
    O_RANK, O_NORMALIZE, O_PROBE_SEQS, O_PROBE_LEN, O_LAMBDA, O_STEPS, O_LR, O_BETA, O_INIT, O_SEED, O_TRAIN,
    O_SPLIT, N_OPTS
};

static const char *const opt_names[N_OPTS] = {
    "name", "layers", "heads", "groups", "kv", "k", "samples", "sets", "prune", "floor",
    "keep_one_per_layer", "rank", "normalize", "probe_seqs", "probe_len", "lambda", "steps", "lr", "beta", "init",
    "seed", "train", "split",
};

#define BIT(o) (1u << (o))
#define UNIT_OPTS (BIT(O_LAYERS) | BIT(O_HEADS) | BIT(O_GROUPS) | BIT(O_KV))

// Which options each kind takes.
static const unsigned kind_opts[N_KINDS] = {
    [HP_STUDY_BASELINE] = BIT(O_NAME),
    [HP_STUDY_SINGLE] = BIT(O_NAME) | UNIT_OPTS,
    [HP_STUDY_ONLY] = BIT(O_NAME) | UNIT_OPTS,
    [HP_STUDY_LAYER] = BIT(O_NAME) | BIT(O_LAYERS),
    [HP_STUDY_RANDOM] = BIT(O_NAME) | UNIT_OPTS | BIT(O_K) | BIT(O_SAMPLES),
    [HP_STUDY_EXPLICIT] = BIT(O_NAME) | BIT(O_SETS),
    [HP_STUDY_PAIRS] = BIT(O_NAME) | UNIT_OPTS,
    [HP_STUDY_ITERATIVE] = BIT(O_NAME) | UNIT_OPTS | BIT(O_PRUNE) | BIT(O_FLOOR) | BIT(O_KEEP1) | BIT(O_RANK) |
                           BIT(O_NORMALIZE),
    [HP_STUDY_IMPORTANCE] = BIT(O_NAME) | UNIT_OPTS | BIT(O_NORMALIZE),
    [HP_STUDY_ATTRIBUTION] = BIT(O_NAME) | UNIT_OPTS,
    [HP_STUDY_ROLES] = BIT(O_NAME) | BIT(O_PROBE_SEQS) | BIT(O_PROBE_LEN),
    [HP_STUDY_GATES] = BIT(O_NAME) | BIT(O_LAMBDA) | BIT(O_STEPS) | BIT(O_LR) | BIT(O_BETA) | BIT(O_INIT) |
                       BIT(O_SEED) | BIT(O_TRAIN) | BIT(O_SPLIT),
};

static enum hp_status get_word(const struct loader *ld, const char *key, const yaml_node_t *v,
                               const char *const *words, int n, int *out);

// "an option that does not apply": which kinds take it, as "random" or
// "single, only and pairs".
static void kinds_taking(enum opt o, char *buf, size_t cap)
{
    int total = 0, shown_n = 0;
    for (int k = 0; k < N_KINDS; k++)
        total += (kind_opts[k] & BIT(o)) != 0;
    size_t len = 0;
    buf[0] = 0;
    for (int k = 0; k < N_KINDS && len < cap; k++) {
        if (!(kind_opts[k] & BIT(o)))
            continue;
        const char *sep = shown_n == 0 ? "" : shown_n == total - 1 ? " and " : ", ";
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", sep, kind_names[k]);
        shown_n++;
    }
}

static enum hp_status get_sets(const struct loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    if (v->type != YAML_MAPPING_NODE)
        return fail_at(ld, v, "'sets' must be a mapping of set name to mask spec, like "
                       "{early: \"0.*\", mix: \"1.3,kv:2.0\"}, not %s", type_word(v));
    int n = n_pairs(v);
    if (n == 0)
        return fail_at(ld, v, "'sets' is empty (name at least one set, like {early: \"0.*\"})");
    s->set_names = calloc((size_t)n, sizeof *s->set_names);
    s->set_specs = calloc((size_t)n, sizeof *s->set_specs);
    if (!s->set_names || !s->set_specs)
        return hp_fail(ld->err, HP_ERR_NOMEM, "%s: out of memory", ld->path);
    for (int i = 0; i < n; i++) {
        const yaml_node_pair_t *pr = &v->data.mapping.pairs.start[i];
        const yaml_node_t *k = node(ld, pr->key), *sv = node(ld, pr->value);
        char name[sizeof s->name];
        enum hp_status st = get_name(ld, "a set name", k, NAME_MAX_STUDY, name);
        if (st)
            return st;
        for (int j = 0; j < i; j++)
            if (!strcmp(s->set_names[j], name))
                return fail_at(ld, k, "set '%s' is named twice", name);
        if (sv->type != YAML_SCALAR_NODE || is_null(sv))
            return fail_at(ld, sv, "set '%s' needs a mask spec like \"0.1,2.*\" (quote it), "
                           "not %s", name, type_word(sv));
        if (strlen(text_of(sv)) != sv->data.scalar.length)
            return fail_at(ld, sv, "set '%s' contains a NUL character", name);
        s->set_names[i] = malloc(strlen(name) + 1);
        s->set_specs[i] = malloc(sv->data.scalar.length + 1);
        s->n_sets = i + 1; // from here on study_clear frees this entry
        if (!s->set_names[i] || !s->set_specs[i])
            return hp_fail(ld->err, HP_ERR_NOMEM, "%s: out of memory", ld->path);
        strcpy(s->set_names[i], name);
        memcpy(s->set_specs[i], text_of(sv), sv->data.scalar.length + 1);
    }
    return HP_OK;
}

static enum hp_status get_option(const struct loader *ld, enum opt o, const yaml_node_t *v,
                                 struct hp_study *s)
{
    switch (o) {
    case O_NAME: {
        enum hp_status st = get_name(ld, "'name'", v, NAME_MAX_STUDY, s->name);
        if (!st && s->kind != HP_STUDY_BASELINE && !strcmp(s->name, "baseline"))
            return fail_at(ld, v, "the name 'baseline' is kept for baseline studies (pick "
                           "another name)");
        return st;
    }
    case O_LAYERS: return get_int_list(ld, "layers", v, 0, &s->layers, &s->n_layers_sel);
    case O_HEADS:
    case O_GROUPS: return get_int_list(ld, opt_names[o], v, 0, &s->units, &s->n_units_sel);
    case O_KV: return get_bool(ld, "kv", v, &s->kv);
    case O_K: return get_int_list(ld, "k", v, 1, &s->k, &s->n_k);
    case O_SAMPLES: return get_int(ld, "'samples'", v, 1, "a positive integer", &s->samples);
    case O_SETS: return get_sets(ld, v, s);
    case O_PRUNE: return get_fraction(ld, "prune", v, true, &s->prune_frac);
    case O_FLOOR: return get_fraction(ld, "floor", v, false, &s->floor_frac);
    case O_KEEP1: return get_bool(ld, "keep_one_per_layer", v, &s->keep_one_per_layer);
    case O_RANK: {
        int i = 0;
        enum hp_status st = get_word(ld, "rank", v, rank_names, 2, &i);
        s->rank = (enum hp_rank)i;
        return st;
    }
    case O_NORMALIZE: {
        int i = 0;
        enum hp_status st = get_word(ld, "normalize", v, normalize_names, 2, &i);
        s->normalize = (enum hp_normalize)i;
        return st;
    }
    case O_PROBE_SEQS: return get_int(ld, "'probe_seqs'", v, 1, "a positive integer", &s->probe_seqs);
    case O_PROBE_LEN:
        return get_int(ld, "'probe_len'", v, HP_ROLES_PROBE_MIN_LEN, "an integer of at least 8 (tokens a half)",
                       &s->probe_len);
    case O_LAMBDA: return get_lambda_list(ld, v, &s->lambda, &s->n_lambda);
    case O_STEPS: return get_int(ld, "'steps'", v, 1, "a positive integer", &s->steps);
    case O_LR: return get_number(ld, "lr", v, 0, true, "a positive number like 0.05", &s->lr);
    case O_BETA: return get_number(ld, "beta", v, 0, true, "a positive number like 0.667", &s->beta);
    case O_INIT: return get_number(ld, "init", v, -HUGE_VAL, false, "a number like 3", &s->init);
    case O_SEED: {
        enum hp_status st = get_seed(ld, "seed", v, &s->gate_seed);
        s->gate_seed_set = st == HP_OK;
        return st;
    }
    case O_TRAIN: return get_path(ld, "train", v, &s->train);
    case O_SPLIT: return get_split(ld, v, s);
    case N_OPTS: break;
    }
    assert(0);
    return HP_ERR_PLAN;
}

// "an 'only' study", "a 'single' study"
static const char *article(const char *word)
{
    return word[0] && strchr("aeiou", word[0]) ? "an" : "a";
}

// One entry of `studies`: "kind", or "kind: {options}" (options may be empty).
static enum hp_status load_study(const struct loader *ld, const yaml_node_t *item,
                                 struct hp_study *s)
{
    const yaml_node_t *kn = item, *ov = NULL;
    char hint[256];
    if (item->type == YAML_SEQUENCE_NODE || is_null(item))
        return fail_at(ld, item, "a study is a kind like 'single' or 'single: {kv: true}', not "
                       "%s", type_word(item));
    if (item->type == YAML_MAPPING_NODE) {
        if (n_pairs(item) == 0)
            return fail_at(ld, item, "a study is a kind like 'single' or 'single: {kv: true}', "
                           "not an empty mapping");
        kn = node(ld, item->data.mapping.pairs.start[0].key);
        ov = node(ld, item->data.mapping.pairs.start[0].value);
        if (n_pairs(item) > 1) {
            // The usual slip: options written beside the kind, not under it.
            const yaml_node_t *k2 = node(ld, item->data.mapping.pairs.start[1].key);
            const char *a = kn->type == YAML_SCALAR_NODE ? text_of(kn) : "?";
            const char *b = k2->type == YAML_SCALAR_NODE ? text_of(k2) : "?";
            return fail_at(ld, k2, "'%.*s' is beside the study kind '%.*s', not under it "
                           "(indent the options below '%.*s:', or write '%.*s: {%.*s: ...}')",
                           ECHO_MAX, b, ECHO_MAX, a, ECHO_MAX, a, ECHO_MAX, a, ECHO_MAX, b);
        }
    }
    const char *kind = "";
    enum hp_status st = key_text(ld, kn, &kind);
    if (st)
        return st;
    int ki = lookup(kind, kind_names, N_KINDS);
    if (ki < 0) {
        if (!suggest(kind, kind_names, N_KINDS) && lookup(kind, opt_names, N_OPTS) >= 0)
            snprintf(hint, sizeof hint, " ('%s' is an option: write it under a kind, like "
                     "'single: {%s: ...}')", kind, kind);
        else
            hint_for(hint, sizeof hint, kind, kind_names, N_KINDS);
        return fail_at(ld, kn, "unknown study '%.*s%s'%s", shown(kn), kind, more(kn), hint);
    }
    s->kind = (enum hp_study_kind)ki;
    s->line = (int)item->start_mark.line + 1;
    snprintf(s->name, sizeof s->name, "%s", kind);
    s->samples = 1;
    if (s->kind == HP_STUDY_GATES) { /* docs/plans.md, "Gate training": why these */
        s->steps = 300;
        s->lr = 0.05;
        s->beta = 2.0 / 3.0;
        s->init = 3.0;
    }

    const yaml_node_t *seen[N_OPTS] = {0};
    if (ov && !is_null(ov)) {
        if (ov->type != YAML_MAPPING_NODE)
            return fail_at(ld, ov, "the options of %s '%s' study must be a mapping like "
                           "{name: my-%s}, not %s", article(kind), kind, kind, type_word(ov));
        for (int i = 0; i < n_pairs(ov); i++) {
            const yaml_node_pair_t *pr = &ov->data.mapping.pairs.start[i];
            const yaml_node_t *k = node(ld, pr->key), *v = node(ld, pr->value);
            const char *key = "";
            if ((st = key_text(ld, k, &key)))
                return st;
            int o = lookup(key, opt_names, N_OPTS);
            if (o < 0) {
                const char *allowed[N_OPTS];
                for (int j = 0; j < N_OPTS; j++)
                    allowed[j] = kind_opts[ki] & BIT(j) ? opt_names[j] : NULL;
                hint_for(hint, sizeof hint, key, allowed, N_OPTS);
                return fail_at(ld, k, "unknown key '%.*s%s' in %s '%s' study%s", shown(k), key,
                               more(k), article(kind), kind, hint);
            }
            if (!(kind_opts[ki] & BIT(o))) {
                char who[128];
                kinds_taking((enum opt)o, who, sizeof who);
                return fail_at(ld, k, "'%s' does not apply to %s '%s' study (%s studies take it)",
                               key, article(kind), kind, who);
            }
            if (seen[o])
                return fail_at(ld, k, "duplicate key '%s' (first at line %zu)", key,
                               seen[o]->start_mark.line + 1);
            if ((o == O_HEADS && seen[O_GROUPS]) || (o == O_GROUPS && seen[O_HEADS]))
                return fail_at(ld, k, "'heads' and 'groups' name the same thing here; give one");
            seen[o] = k;
            if ((st = get_option(ld, (enum opt)o, v, s)))
                return st;
        }
    }
    if (seen[O_NORMALIZE] && s->kind == HP_STUDY_ITERATIVE && s->rank != HP_RANK_GRADIENT)
        return fail_at(ld, seen[O_NORMALIZE], "'normalize' scales gradient importance: it applies to an iterative "
                       "study with rank: gradient (this one ranks by exact evaluations)");
    if (seen[O_GROUPS] && !s->kv)
        return fail_at(ld, seen[O_GROUPS], "'groups' lists KV groups: add kv: true (or use "
                       "'heads' for query heads)");
    static const struct { enum hp_study_kind kind; enum opt o; const char *example; } need[] = {
        {HP_STUDY_RANDOM, O_K, "random: {k: [2, 4], samples: 5}"},
        {HP_STUDY_EXPLICIT, O_SETS, "explicit: {sets: {early: \"0.*\"}}"},
        {HP_STUDY_ITERATIVE, O_PRUNE, "iterative: {prune: 10%}"},
        {HP_STUDY_GATES, O_LAMBDA, "gates: {lambda: [0.001, 0.01, 0.1], split: 25%}"},
    };
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (s->kind == need[i].kind && !seen[need[i].o])
            return fail_at(ld, kn, "%s '%s' study needs '%s' (e.g. %s)", article(kind), kind,
                           opt_names[need[i].o], need[i].example);
    if (s->kind == HP_STUDY_GATES && seen[O_TRAIN] && seen[O_SPLIT])
        return fail_at(ld, seen[O_SPLIT], "'train' and 'split' both name the training data: give one");
    if (s->kind == HP_STUDY_GATES && !seen[O_TRAIN] && !seen[O_SPLIT])
        return fail_at(ld, kn, "a 'gates' study needs training data apart from the held-out set: 'train: FILE', or "
                       "'split: 25%%' to train on that share of the data's sequences (never the ones evaluated)");
    return HP_OK;
}

static enum hp_status load_studies(const struct loader *ld, const yaml_node_t *v,
                                   struct hp_plan *p)
{
    if (v->type != YAML_SEQUENCE_NODE)
        return fail_at(ld, v, "'studies' must be a list like [baseline, single], not %s",
                       type_word(v));
    int n = n_items(v);
    if (n == 0)
        return fail_at(ld, v, "'studies' is empty (list at least one study, e.g. single)");
    // One spare entry for the baseline inserted in front.
    p->studies = calloc((size_t)n + 1, sizeof *p->studies);
    if (!p->studies)
        return hp_fail(ld->err, HP_ERR_NOMEM, "%s: out of memory", ld->path);
    bool has_baseline = false;
    for (int i = 0; i < n; i++) {
        const yaml_node_t *item = node(ld, v->data.sequence.items.start[i]);
        struct hp_study *s = &p->studies[i + 1];
        p->n_studies = i + 2; // the spare and this study: hp_plan_free frees it on error
        enum hp_status st = load_study(ld, item, s);
        if (st)
            return st;
        for (int j = 1; j <= i; j++)
            if (!strcmp(p->studies[j].name, s->name))
                return fail_at(ld, item, "duplicate study name '%s' (the study at line %d has "
                               "it too; give one a 'name:')", s->name, p->studies[j].line);
        has_baseline |= s->kind == HP_STUDY_BASELINE;
        /* one training set a plan: with split, the held-out set of every study is what the split leaves */
        for (int j = 1; s->kind == HP_STUDY_GATES && j <= i; j++) {
            const struct hp_study *g = &p->studies[j];
            if (g->kind != HP_STUDY_GATES)
                continue;
            bool same = g->train && s->train ? strcmp(g->train, s->train) == 0
                                             : !g->train && !s->train && g->split_frac == s->split_frac &&
                                                   g->split_count == s->split_count;
            if (!same)
                return fail_at(ld, item, "gates studies '%s' (line %d) and '%s' train on different data (a plan "
                               "has one training set: give them the same 'train' or 'split')", g->name, g->line,
                               s->name);
            break;
        }
    }
    // The spare, first: a baseline (line 0: not in the file), or nothing.
    if (has_baseline) {
        memmove(p->studies, p->studies + 1, sizeof *p->studies * (size_t)n);
        memset(&p->studies[n], 0, sizeof p->studies[n]);
        p->n_studies = n;
    } else {
        p->studies[0].kind = HP_STUDY_BASELINE;
        strcpy(p->studies[0].name, "baseline");
        p->studies[0].samples = 1;
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
static enum hp_status get_word(const struct loader *ld, const char *key, const yaml_node_t *v,
                               const char *const *words, int n, int *out)
{
    char list[128] = "", hint[160] = "";
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s",
                                i == 0 ? "" : i == n - 1 ? " or " : ", ", words[i]);
    if (v->type != YAML_SCALAR_NODE || is_null(v))
        return fail_at(ld, v, "'%s' must be %s, not %s", key, list, type_word(v));
    int i = lookup(text_of(v), words, n);
    if (i >= 0) {
        *out = i;
        return HP_OK;
    }
    const char *s = suggest(text_of(v), words, n);
    if (s)
        snprintf(hint, sizeof hint, " (did you mean '%s'?)", s);
    return fail_at(ld, v, "'%s' must be %s, not '%.*s%s'%s", key, list, shown(v), text_of(v),
                   more(v), hint);
}

static enum hp_status load_top(const struct loader *ld, enum top t, const yaml_node_t *v,
                               struct hp_plan *p)
{
    int i = 0;
    enum hp_status st;
    switch (t) {
    case T_NAME: return get_name(ld, "'name'", v, NAME_MAX_PLAN, p->name);
    case T_MODEL: return get_path(ld, "model", v, &p->model);
    case T_DATA: return get_path(ld, "data", v, &p->data);
    case T_SEQ_LEN:
        return get_int(ld, "'seq_len'", v, 0, "a positive integer (or 0 for the data file's)",
                       &p->seq_len);
    case T_METRIC: {
        // the words and their order (the error's list) come from the one metric table
        const char *words[HP_N_METRICS];
        for (int k = 0; k < HP_N_METRICS; k++)
            words[k] = hp_metric_name((enum hp_metric)k);
        if ((st = get_word(ld, "metric", v, words, HP_N_METRICS, &i)))
            return st;
        snprintf(p->metric, sizeof p->metric, "%s", words[i]);
        return HP_OK;
    }
    case T_ABLATION: {
        const char *words[HP_N_ABLATIONS];
        for (int k = 0; k < HP_N_ABLATIONS; k++)
            words[k] = hp_ablation_name((enum hp_ablation)k);
        if ((st = get_word(ld, "ablation", v, words, HP_N_ABLATIONS, &i)))
            return st;
        p->ablation = (enum hp_ablation)i;
        return HP_OK;
    }
    case T_SEED: return get_seed(ld, "seed", v, &p->seed);
    case T_STUDIES: return load_studies(ld, v, p);
    case N_TOP: break;
    }
    assert(0);
    return HP_ERR_PLAN;
}

static enum hp_status load_root(const struct loader *ld, const yaml_node_t *root,
                                struct hp_plan *p)
{
    if (!root)
        return fail_at(ld, NULL, "the plan is empty (it needs name, model, data and studies)");
    if (root->type != YAML_MAPPING_NODE)
        return fail_at(ld, root, "a plan is a mapping of keys (name, model, data, studies, ...), "
                       "not %s", type_word(root));
    const yaml_node_t *seen[N_TOP] = {0};
    for (int i = 0; i < n_pairs(root); i++) {
        const yaml_node_pair_t *pr = &root->data.mapping.pairs.start[i];
        const yaml_node_t *k = node(ld, pr->key), *v = node(ld, pr->value);
        const char *key = "";
        enum hp_status st = key_text(ld, k, &key);
        if (st)
            return st;
        int t = lookup(key, top_names, N_TOP);
        if (t < 0) {
            char hint[256];
            if (lookup(key, kind_names, N_KINDS) >= 0)
                snprintf(hint, sizeof hint, " (studies go in the list: studies: [%s])", key);
            else
                hint_for(hint, sizeof hint, key, top_names, N_TOP);
            return fail_at(ld, k, "unknown key '%.*s%s'%s", shown(k), key, more(k), hint);
        }
        if (seen[t])
            return fail_at(ld, k, "duplicate key '%s' (first at line %zu)", key,
                           seen[t]->start_mark.line + 1);
        seen[t] = k;
        if ((st = load_top(ld, (enum top)t, v, p)))
            return st;
    }
    static const enum top required[] = {T_NAME, T_MODEL, T_DATA, T_STUDIES};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (!seen[required[i]])
            return fail_at(ld, NULL, "missing '%s' (a plan needs name, model, data and studies)",
                           top_names[required[i]]);
    for (int i = 0; i < p->n_studies; i++) {
        struct hp_study *s = &p->studies[i];
        if (s->kind != HP_STUDY_GATES)
            continue;
        if (!s->gate_seed_set)
            s->gate_seed = p->seed;
        if (p->ablation != HP_ABLATE_ZERO)
            return fail_at(ld, seen[T_ABLATION], "gates study '%s' (line %d) multiplies each head's output by its "
                           "gate, so a closed gate is zero ablation: it needs 'ablation: zero' (the default), not %s",
                           s->name, s->line, hp_ablation_name(p->ablation));
        if (!strcmp(p->metric, "acc"))
            return fail_at(ld, seen[T_METRIC], "gates study '%s' (line %d) trains on the metric's gradient, and acc "
                           "has none (a step function of the gates): use loss, kl or cos", s->name, s->line);
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
        struct loader ld = {.path = path, .dir = dir, .doc = &doc, .err = err};
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
    struct loader ld = {.doc = &doc};
    const yaml_node_t *root = yaml_document_get_root_node(&doc), *found = NULL;
    const yaml_node_t *studies = NULL;
    for (int i = 0; root && root->type == YAML_MAPPING_NODE && i < n_pairs(root); i++) {
        const yaml_node_t *k = node(&ld, root->data.mapping.pairs.start[i].key);
        if (k->type == YAML_SCALAR_NODE && !strcmp(text_of(k), "studies"))
            studies = node(&ld, root->data.mapping.pairs.start[i].value);
    }
    const yaml_node_t *item = NULL, *opts = NULL;
    if (studies && studies->type == YAML_SEQUENCE_NODE && idx >= 0 && idx < n_items(studies))
        item = node(&ld, studies->data.sequence.items.start[idx]);
    if (item && item->type == YAML_MAPPING_NODE && n_pairs(item) == 1)
        opts = node(&ld, item->data.mapping.pairs.start[0].value);
    for (int i = 0; opts && opts->type == YAML_MAPPING_NODE && i < n_pairs(opts); i++) {
        const yaml_node_t *k = node(&ld, opts->data.mapping.pairs.start[i].key);
        const yaml_node_t *v = node(&ld, opts->data.mapping.pairs.start[i].value);
        if (k->type != YAML_SCALAR_NODE)
            continue;
        bool match = !strcmp(text_of(k), key) ||
                     (!strcmp(key, "heads") && !strcmp(text_of(k), "groups"));
        if (!match)
            continue;
        found = v;
        if (set && v->type == YAML_MAPPING_NODE) {
            for (int j = 0; j < n_pairs(v); j++) {
                const yaml_node_t *sk = node(&ld, v->data.mapping.pairs.start[j].key);
                if (sk->type == YAML_SCALAR_NODE && !strcmp(text_of(sk), set))
                    found = node(&ld, v->data.mapping.pairs.start[j].value);
            }
        } else if (v->type == YAML_SEQUENCE_NODE) {
            for (int j = 0; j < n_items(v); j++) {
                const yaml_node_t *it = node(&ld, v->data.sequence.items.start[j]);
                uint64_t x;
                if (it->type == YAML_SCALAR_NODE && scan_uint(text_of(it), &x) == INT_OK &&
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

// One study being expanded.
struct expander {
    const struct hp_plan *p;
    const struct hp_model_info *info;
    struct hp_joblist *jl;
    struct hp_error *err;
    int si;
    const struct hp_study *s;
    int n_units; // units per layer: heads, or KV groups
    int n_lay;
    int *lay;    // (n_lay) selected layers, ascending
    int n_sel;
    int *sel;    // (n_sel) selected units of each layer, ascending
};

// "plan:line:col: study 'x': ..." pointing at key's value (see locate).
PRINTF_LIKE(5, 6)
static enum hp_status fail_study(const struct expander *e, const char *key, long value,
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

/* Whether selected unit j of selected layer i is in the checkpoint (not pruned away). */
static bool live(const struct expander *e, int i, int j)
{
    return !hp_unit_pruned(e->info, e->s->kv, e->lay[i], e->sel[j]);
}

/* Units of a layer the checkpoint has (all of them but for a pruned checkpoint). */
static int live_in_layer(const struct expander *e, int layer)
{
    int n = 0;
    for (int u = 0; u < e->n_units; u++)
        n += !hp_unit_pruned(e->info, e->s->kv, layer, u);
    return n;
}

static void ablate(const struct expander *e, struct hp_mask *m, int layer, int unit)
{
    hp_mask_set_unit(m, e->info, e->s->kv, layer, unit, 0.0f);
}

static struct hp_mask *new_mask(const struct expander *e)
{
    return hp_mask_new(e->info->n_layers, e->info->n_heads);
}

// "2.3" or "kv:2.1"
static void unit_text(const struct expander *e, char *buf, size_t cap, int layer, int unit)
{
    hp_unit_label(buf, cap, e->s->kv, layer, unit);
}

// Append a job; takes m (NULL = allocation failed).
PRINTF_LIKE(8, 9)
static enum hp_status emit(struct expander *e, struct hp_mask *m, int layer, int unit, int unit2,
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
static enum hp_status select_units(struct expander *e)
{
    const struct hp_study *s = e->s;
    const struct hp_model_info *in = e->info;
    char range[64];
    if (s->kv && hp_unit_width(in, true) == 0)
        return fail_study(e, "kv", 0, NULL, "kv: true needs query heads that group evenly "
                          "over KV heads (model has %d heads and %d KV heads)",
                          in->n_heads, hp_unit_count(in, true));
    e->n_units = hp_unit_count(in, s->kv);
    for (int i = 0; i < s->n_layers_sel; i++)
        if (s->layers[i] >= in->n_layers) {
            hp_range_text(range, sizeof range, "layers", "layer", in->n_layers);
            return fail_study(e, "layers", s->layers[i], NULL, "layer %d does not exist (model "
                              "has %s)", s->layers[i], range);
        }
    for (int i = 0; i < s->n_units_sel; i++)
        if (s->units[i] >= e->n_units) {
            hp_range_text(range, sizeof range, hp_unit_name(s->kv, true), hp_unit_name(s->kv, false),
                          e->n_units);
            return fail_study(e, "heads", s->units[i], NULL, "%s %d does not exist (model has "
                              "%s)", hp_unit_name(s->kv, false), s->units[i], range);
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

// --- expansion: random draws -------------------------------------------------

// Uniform in [0, n), without modulo bias.
static uint64_t below(uint64_t s[4], uint64_t n)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % n, r;
    do
        r = hp_xoshiro256ss(s);
    while (r >= limit);
    return r % n;
}

// The generator for one draw: a function of seed, study name, k and sample.
static void seed_draw(uint64_t s[4], uint64_t seed, const char *name, int k, int sample)
{
    uint64_t x = seed;
    x = hp_splitmix64(&x) ^ hp_fnv1a(name);
    x = hp_splitmix64(&x) ^ (uint64_t)(unsigned)k;
    x = hp_splitmix64(&x) ^ (uint64_t)(unsigned)sample;
    for (int i = 0; i < 4; i++)
        s[i] = hp_splitmix64(&x);
}

// --- expansion: the kinds ----------------------------------------------------

static enum hp_status expand_study(struct expander *e)
{
    const struct hp_study *s = e->s;
    const struct hp_model_info *in = e->info;
    enum hp_status st = HP_OK;
    char a[32], b[32];

    switch (s->kind) {
    case HP_STUDY_BASELINE:
        return emit(e, new_mask(e), -1, -1, -1, 0, 0, "baseline");

    case HP_STUDY_SINGLE:
        for (int i = 0; st == HP_OK && i < e->n_lay; i++)
            for (int j = 0; st == HP_OK && j < e->n_sel; j++) {
                if (!live(e, i, j))
                    continue;
                struct hp_mask *m = new_mask(e);
                if (m)
                    ablate(e, m, e->lay[i], e->sel[j]);
                unit_text(e, a, sizeof a, e->lay[i], e->sel[j]);
                st = emit(e, m, e->lay[i], e->sel[j], -1, 0, 1, "%s", a);
            }
        return st;

    case HP_STUDY_ONLY:
        for (int i = 0; st == HP_OK && i < e->n_lay; i++)
            for (int j = 0; st == HP_OK && j < e->n_sel; j++) {
                if (!live(e, i, j))
                    continue;
                struct hp_mask *m = new_mask(e);
                for (int u = 0; m && u < e->n_units; u++)
                    if (u != e->sel[j])
                        ablate(e, m, e->lay[i], u);
                unit_text(e, a, sizeof a, e->lay[i], e->sel[j]);
                st = emit(e, m, e->lay[i], e->sel[j], -1, 0, live_in_layer(e, e->lay[i]) - 1, "only %s", a);
            }
        return st;

    case HP_STUDY_LAYER:
        for (int i = 0; st == HP_OK && i < e->n_lay; i++) {
            const int n_live = live_in_layer(e, e->lay[i]);
            if (n_live == 0)
                continue;
            struct hp_mask *m = new_mask(e);
            for (int u = 0; m && u < e->n_units; u++)
                ablate(e, m, e->lay[i], u);
            st = emit(e, m, e->lay[i], -1, -1, 0, n_live, "layer %d", e->lay[i]);
        }
        return st;

    case HP_STUDY_PAIRS: {
        int before = e->jl->n;
        for (int i = 0; st == HP_OK && i < e->n_lay; i++)
            for (int j = 0; st == HP_OK && j < e->n_sel; j++)
                for (int j2 = j + 1; st == HP_OK && j2 < e->n_sel; j2++) {
                    if (!live(e, i, j) || !live(e, i, j2))
                        continue;
                    struct hp_mask *m = new_mask(e);
                    if (m) {
                        ablate(e, m, e->lay[i], e->sel[j]);
                        ablate(e, m, e->lay[i], e->sel[j2]);
                    }
                    unit_text(e, a, sizeof a, e->lay[i], e->sel[j]);
                    unit_text(e, b, sizeof b, e->lay[i], e->sel[j2]);
                    st = emit(e, m, e->lay[i], e->sel[j], e->sel[j2], 0, 2, "%s+%s", a, b);
                }
        if (st == HP_OK && e->jl->n == before)
            return fail_study(e, s->n_units_sel ? "heads" : NULL, s->n_units_sel ? s->units[0] : 0,
                              NULL, "no pairs: each layer has only one %s to pair",
                              s->kv ? "KV group" : "head");
        return st;
    }

    case HP_STUDY_RANDOM: {
        // The pool: every selected unit of every selected layer the checkpoint has, layer-major.
        int n_all = e->n_lay * e->n_sel, n = 0;
        int *pool = malloc(sizeof *pool * (size_t)n_all), *units = malloc(sizeof *units * (size_t)n_all);
        if (!pool || !units) {
            free(pool), free(units);
            return hp_fail(e->err, HP_ERR_NOMEM, "%s: out of memory", e->p->path);
        }
        for (int i = 0; i < n_all; i++)
            if (live(e, i / e->n_sel, i % e->n_sel))
                units[n++] = i;
        for (int ki = 0; st == HP_OK && ki < s->n_k; ki++) {
            int k = s->k[ki];
            if (k > n) {
                st = fail_study(e, "k", k, NULL, "k = %d is more than the %d %s it draws from "
                                "(%d layer%s x %d%s)", k, n, s->kv ? "KV groups" : "heads",
                                e->n_lay, e->n_lay == 1 ? "" : "s", e->n_sel,
                                n < n_all ? ", less those the pruned checkpoint lacks" : "");
                break;
            }
            for (int smp = 0; st == HP_OK && smp < s->samples; smp++) {
                uint64_t rng[4];
                seed_draw(rng, e->p->seed, s->name, k, smp);
                for (int i = 0; i < n; i++)
                    pool[i] = units[i];
                // A partial Fisher-Yates shuffle: pool[0..k) is the draw.
                for (int i = 0; i < k; i++) {
                    int j = i + (int)below(rng, (uint64_t)(n - i));
                    int t = pool[i];
                    pool[i] = pool[j];
                    pool[j] = t;
                }
                struct hp_mask *m = new_mask(e);
                for (int i = 0; m && i < k; i++)
                    ablate(e, m, e->lay[pool[i] / e->n_sel], e->sel[pool[i] % e->n_sel]);
                st = emit(e, m, -1, -1, -1, smp, k, "k=%d #%d", k, smp);
            }
        }
        free(pool), free(units);
        return st;
    }

    case HP_STUDY_EXPLICIT:
        for (int i = 0; st == HP_OK && i < s->n_sets; i++) {
            struct hp_mask *m = NULL;
            struct hp_error merr;
            enum hp_status ms = hp_mask_parse(s->set_specs[i], false, in, &m, &merr);
            if (ms == HP_ERR_NOMEM)
                return hp_fail(e->err, ms, "%s", merr.msg);
            if (ms)
                return fail_study(e, "sets", 0, s->set_names[i], "set '%s': %s",
                                  s->set_names[i], merr.msg);
            st = emit(e, m, -1, -1, -1, 0, hp_mask_count_ablated(m), "%s", s->set_names[i]);
        }
        return st;

    case HP_STUDY_ITERATIVE:
    case HP_STUDY_IMPORTANCE:
    case HP_STUDY_ATTRIBUTION:
        return HP_OK; // the sweep runner makes these from results and gradients

    case HP_STUDY_ROLES: {
        // no jobs (the sweep runs one unmasked pass); a probe the model cannot take is refused here
        int seqs, len;
        struct hp_error why;
        struct hp_roles_opts ro = {.probe_seqs = s->probe_seqs, .probe_len = s->probe_len};
        if (hp_roles_probe_size(in, &ro, &seqs, &len, &why) != HP_OK)
            return fail_study(e, s->probe_seqs > HP_ROLES_PROBE_MAX_SEQS ? "probe_seqs" : s->probe_len ? "probe_len" : NULL,
                              0, NULL, "%s", why.msg);
        return HP_OK;
    }

    case HP_STUDY_GATES:
        return HP_OK; // the sweep runner makes these from results, gradients and trained gates
    }
    assert(0);
    return HP_ERR_PLAN;
}

// Jobs a study expands into, counted before any is made (iterative: none here).
static int64_t study_jobs(const struct expander *e)
{
    const struct hp_study *s = e->s;
    /* per selected layer, its selected units the checkpoint has */
    int64_t units = 0, pairs = 0, layers = 0;
    for (int i = 0; i < e->n_lay; i++) {
        int64_t n = 0;
        for (int j = 0; j < e->n_sel; j++)
            n += live(e, i, j);
        units += n;
        pairs += n * (n - 1) / 2;
        layers += live_in_layer(e, e->lay[i]) > 0;
    }
    switch (s->kind) {
    case HP_STUDY_BASELINE: return 1;
    case HP_STUDY_SINGLE:
    case HP_STUDY_ONLY: return units;
    case HP_STUDY_LAYER: return layers;
    case HP_STUDY_PAIRS: return pairs;
    case HP_STUDY_RANDOM: return (int64_t)s->n_k * s->samples;
    case HP_STUDY_EXPLICIT: return s->n_sets;
    case HP_STUDY_ITERATIVE:
    case HP_STUDY_IMPORTANCE:
    case HP_STUDY_ATTRIBUTION:
    case HP_STUDY_ROLES:
    case HP_STUDY_GATES: return 0;
    }
    return 0;
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
        struct expander e = {.p = p, .info = info, .jl = jl, .err = err, .si = si,
                             .s = &p->studies[si]};
        st = select_units(&e);
        int64_t n = st == HP_OK ? study_jobs(&e) : 0, limit = max_jobs(info);
        if (st == HP_OK && n > limit - jl->n)
            st = fail_study(&e, e.s->kind == HP_STUDY_RANDOM ? "samples" : NULL, 0, NULL,
                            "expands to %lld jobs, which with the %d before it is more than the %lld a plan "
                            "may hold for this model (sample fewer, or narrow it with layers: / heads:)",
                            (long long)n, jl->n, (long long)limit);
        if (st == HP_OK)
            st = expand_study(&e);
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

// --- iterative schedule ---------------------------------------------------------

struct hp_iterative_schedule hp_study_schedule(const struct hp_study *s, const struct hp_model_info *info)
{
    /* the selected units the checkpoint has, and the layers that have any */
    const int per_layer = hp_unit_count(info, s->kv), n_lay = s->n_layers_sel ? s->n_layers_sel : info->n_layers,
              n_sel = s->n_units_sel ? s->n_units_sel : per_layer;
    int n = 0, layers = 0;
    for (int i = 0; i < n_lay; i++) {
        const int l = s->n_layers_sel ? s->layers[i] : i;
        int k = 0;
        for (int j = 0; j < n_sel; j++) {
            const int u = s->n_units_sel ? s->units[j] : j;
            k += l < info->n_layers && u < per_layer && !hp_unit_pruned(info, s->kv, l, u);
        }
        n += k;
        layers += k > 0;
    }
    struct hp_iterative_schedule sc = {n, layers, (int)fmax(1.0, round(s->prune_frac * n)),
                                       (int)ceil(s->floor_frac * n - 1e-9)};
    /* one unit a layer stays: the curve ends there, whatever the floor */
    if (s->keep_one_per_layer && sc.floor_units < layers)
        sc.floor_units = layers;
    return sc;
}

int hp_iterative_step(const struct hp_iterative_schedule *sc, int left)
{
    if (left <= sc->floor_units)
        return 0;
    return sc->per_step < left - sc->floor_units ? sc->per_step : left - sc->floor_units;
}

/*
 * The sweep's loop without the scores: each step records its curve point,
 * scores every unit still prunable (none when the step prunes them all), and
 * prunes hp_iterative_step of them.
 * With keep_one_per_layer a layer down to its last unit is not scored; how
 * many layers are down to one depends on the scores, but with `left` units in
 * n_layers layers (each keeping at least one) at least 2 n_layers - left
 * are, and exactly that many when no layer has more than 2 units.
 */
long hp_study_evals(const struct hp_study *s, const struct hp_model_info *info)
{
    if (s->kind == HP_STUDY_GATES) /* each lambda's pruned set, and the model at its fractional gates */
        return 2L * s->n_lambda;
    if (s->kind != HP_STUDY_ITERATIVE)
        return 0;
    struct hp_iterative_schedule sc = hp_study_schedule(s, info);
    long evals = 0;
    for (int left = sc.n_units;; ) {
        evals++; /* the curve point */
        int k = hp_iterative_step(&sc, left);
        if (k == 0)
            break;
        if (s->rank == HP_RANK_GRADIENT || k == left) { /* a backward ranks them (hp_study_backwards); or all go */
            left -= k;
            continue;
        }
        int at_last = s->keep_one_per_layer && 2 * sc.n_layers > left ? 2 * sc.n_layers - left : 0;
        evals += left - at_last; /* the candidates */
        left -= k;
    }
    return evals;
}

/* A gradient-ranked curve runs one backward for every point but the last, and but a step that prunes
 * every unit left: exactly, since each step prunes hp_iterative_step units whatever the ranking
 * (keep_one_per_layer only narrows the choice). */
long hp_study_backwards(const struct hp_study *s, const struct hp_model_info *info)
{
    if (s->kind == HP_STUDY_IMPORTANCE || s->kind == HP_STUDY_ATTRIBUTION)
        return 1;
    if (s->kind == HP_STUDY_GATES) /* one a training step, over the training set */
        return (long)s->steps * s->n_lambda;
    if (s->kind != HP_STUDY_ITERATIVE || s->rank != HP_RANK_GRADIENT)
        return 0;
    struct hp_iterative_schedule sc = hp_study_schedule(s, info);
    long n = 0;
    for (int left = sc.n_units, k; (k = hp_iterative_step(&sc, left)) > 0; left -= k)
        n += k < left;
    return n;
}

bool hp_study_needs_grad(const struct hp_study *s)
{
    return s->kind == HP_STUDY_IMPORTANCE || s->kind == HP_STUDY_ATTRIBUTION ||
           (s->kind == HP_STUDY_ITERATIVE && s->rank == HP_RANK_GRADIENT);
}

enum hp_status hp_plan_check_grad(const struct hp_plan *p, const struct hp_evaluator *ev, struct hp_error *err)
{
    if (hp_evaluator_has_metric(ev, "loss"))
        return HP_OK;
    for (int i = 0; i < p->n_studies; i++)
        if (hp_study_needs_grad(&p->studies[i]))
            return hp_fail(err, HP_ERR_PLAN,
                           "%s:%d: study '%s' needs the gradient of a loss, but the model has none on this data "
                           "(an encoder without a head is measured by cos, whose gradient vanishes at the "
                           "unmasked model; use a causal LM, an MLM head with labelled data or a classifier, "
                           "or drop the study)",
                           p->path, p->studies[i].line, p->studies[i].name);
    return HP_OK;
}
