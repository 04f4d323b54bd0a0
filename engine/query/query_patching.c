/*
 * query_patching.c -- `patching`: a patching study's effects, each unit
 * patched alone at each position (the head x position grid: a row a unit, a
 * column a position labelled with the first row's tokens) or at every
 * position together (one column, "all"); with --top K the K largest cells as
 * a list.
 *
 * Invariants: positions come from variant_positions (schema 7; a variant
 * without a row, or a database before it, patched every position); a
 * position read from the file is bounded before it sizes anything.
 *
 * Must not: run the model (the sweep stored the effects), print, or exit.
 */
#define _POSIX_C_SOURCE 200809L

#include "headprune.h"
#include "query_priv.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* More positions than any row of a real prompt pair (a forged file must not size the grid past this). */
#define MAX_POSITIONS (1 << 16)
#define LABEL_MAX 48

struct cell {
    int layer, unit, pos; /* pos -1: every position */
    double effect;
};

/* The study's cells in (layer, unit, position) order into *cells (the caller's to free, even on failure). */
static enum hp_status load_cells(struct hq_query *q, const char *study, int U, struct cell **cells, size_t *n)
{
    bool has_pos = false;
    enum hp_status s = hq_has_table(q, "variant_positions", &has_pos);
    if (s != HP_OK)
        return s;
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT j.layer, j.unit, %s, r.%%s FROM sweep_jobs j JOIN results r ON r.variant_id = j.variant_id %s "
             "WHERE j.sweep_id = ? AND j.study = ? ORDER BY j.layer, j.unit, 3",
             has_pos ? "p.position" : "NULL", has_pos ? "LEFT JOIN variant_positions p ON p.variant_id = j.variant_id"
                                                      : "");
    sqlite3_stmt *st;
    if ((s = hq_prep_m(q, &st, sql)) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, study, -1, SQLITE_STATIC);
    size_t cap = 0;
    int r;
    while ((r = hq_step(q, st, &s)) == 1) {
        struct cell c = {.pos = -1};
        if (!hq_col_index(q, st, 0, q->n_layers, "layer", &c.layer, &s) ||
            !hq_col_index(q, st, 1, U, "unit", &c.unit, &s) ||
            !hq_col_index(q, st, 2, MAX_POSITIONS, "position", &c.pos, &s)) {
            r = -1;
            break;
        }
        c.effect = hq_effect_of(q->m, hq_col_num(st, 3), q->base);
        struct cell *g = hq_room_for(q, *cells, *n, &cap, sizeof *g, &s);
        if (!g) {
            r = -1;
            break;
        }
        *cells = g;
        g[(*n)++] = c;
    }
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

/* Text a label may show: control characters as '?', at most LABEL_MAX / 2 - 1 bytes, ending on a whole UTF-8
 * character. */
static void shown(char *dst, size_t cap, const char *src)
{
    const size_t lim = LABEL_MAX / 2 - 1 < cap ? LABEL_MAX / 2 - 1 : cap - 1;
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)src; *p && o < lim; p++)
        dst[o++] = *p < 0x20 || *p == 0x7F ? '?' : (char)*p;
    /* a character cut short: drop its lead byte and what follows it */
    size_t k = o;
    while (k > 0 && ((unsigned char)dst[k - 1] & 0xC0) == 0x80)
        k--;
    if (k > 0 && ((unsigned char)dst[k - 1] & 0x80)) {
        const unsigned char lead = (unsigned char)dst[k - 1];
        const size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
        if (o - (k - 1) < want)
            o = k - 1;
    }
    dst[o] = 0;
}

/* src cut to a label's LABEL_MAX - 1 bytes, on a whole UTF-8 character. */
static void shown_cut(char *dst, const char *src)
{
    size_t o = strlen(src) < LABEL_MAX - 1 ? strlen(src) : LABEL_MAX - 1;
    memcpy(dst, src, o);
    while (o > 0 && o < strlen(src) && ((unsigned char)src[o] & 0xC0) == 0x80) /* inside a character: back off */
        o--;
    dst[o] = 0;
}

/* Each position's label from patch_tokens ("5 ' Mary'", "5 ' Mary'/' John'" where the corrupt token differs, ids
 * "#318/#1757" without a tokenizer); positions without a row keep their number alone. */
static enum hp_status load_labels(struct hq_query *q, const char *study, int P, char (*label)[LABEL_MAX])
{
    for (int t = 0; t < P; t++)
        snprintf(label[t], LABEL_MAX, "%d", t);
    bool has = false;
    enum hp_status s = hq_has_table(q, "patch_tokens", &has);
    if (s != HP_OK || !has)
        return s;
    sqlite3_stmt *st;
    if ((s = hq_prep(q, &st, "SELECT position, token, corrupt, text, corrupt_text FROM patch_tokens "
                          "WHERE sweep_id = ? AND study = ? ORDER BY position")) != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, study, -1, SQLITE_STATIC);
    int r;
    while ((r = hq_step(q, st, &s)) == 1) {
        const int t = sqlite3_column_int(st, 0);
        if (t < 0 || t >= P)
            continue;
        const bool differs = sqlite3_column_type(st, 2) != SQLITE_NULL &&
                             sqlite3_column_int64(st, 2) != sqlite3_column_int64(st, 1);
        char a[2 * LABEL_MAX], b[2 * LABEL_MAX] = "";
        if (sqlite3_column_type(st, 3) != SQLITE_NULL) {
            char x[LABEL_MAX];
            shown(x, sizeof x, hq_col_text(st, 3));
            snprintf(a, sizeof a, "'%s'", x);
            if (differs) {
                shown(x, sizeof x, hq_col_text(st, 4));
                snprintf(b, sizeof b, "/'%s'", x);
            }
        } else {
            snprintf(a, sizeof a, "#%lld", (long long)sqlite3_column_int64(st, 1));
            if (differs)
                snprintf(b, sizeof b, "/#%lld", (long long)sqlite3_column_int64(st, 2));
        }
        /* at most 6 + 24 + 25 bytes: the label keeps what fits */
        char whole[4 * LABEL_MAX + 16];
        snprintf(whole, sizeof whole, "%d %s%s", t, a, b);
        shown_cut(label[t], whole);
    }
    sqlite3_finalize(st);
    return r < 0 ? s : HP_OK;
}

static int by_effect(const void *a, const void *b)
{
    const double x = ((const struct cell *)a)->effect, y = ((const struct cell *)b)->effect;
    return (y > x) - (y < x) - (isnan(y) - isnan(x)) * 2;
}

enum hp_status hq_patching(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out)
{
    struct pick p;
    enum hp_status s = hq_pick_study(q, "patching", opts->study, &p);
    if (s != HP_OK)
        return s;
    const int U = p.kv ? q->n_kv_heads : q->n_heads;
    if (U <= 0)
        return hp_fail(q->err, HP_ERR_FORMAT, "%s: sweep %lld's model has no KV groups of even size", q->path,
                       q->sweep);
    struct cell *cells = NULL;
    size_t n = 0;
    if ((s = load_cells(q, p.name, U, &cells, &n)) != HP_OK) {
        free(cells);
        return s;
    }
    int P = 0; /* positions: 0 when the study patched every position together */
    for (size_t i = 0; i < n; i++)
        if (cells[i].pos + 1 > P)
            P = cells[i].pos + 1;
    char(*label)[LABEL_MAX] = calloc(P > 0 ? (size_t)P : 1, LABEL_MAX);
    if (!label) {
        free(cells);
        return hp_fail(q->err, HP_ERR_NOMEM, "out of memory");
    }
    if ((s = load_labels(q, p.name, P, label)) != HP_OK) {
        free(cells), free(label);
        return s;
    }
    struct tb b;
    char unit[32];
    if (opts->top > 0) { /* the K largest cells */
        static const char *const cols[] = {"unit", "position", "token", "effect"};
        static const bool num[] = {false, true, false, true};
        hq_tb_init(&b, 4, cols, num);
        qsort(cells, n, sizeof *cells, by_effect);
        for (size_t i = 0; i < n && i < (size_t)opts->top; i++) {
            const int r = hq_tb_row(&b);
            hp_unit_label(unit, sizeof unit, p.kv, cells[i].layer, cells[i].unit);
            hq_tb_str(&b, r, 0, unit);
            if (cells[i].pos >= 0) {
                hq_tb_int(&b, r, 1, cells[i].pos);
                const char *sp = strchr(label[cells[i].pos], ' ');
                hq_tb_str(&b, r, 2, sp ? sp + 1 : "");
            } else {
                hq_tb_str(&b, r, 2, "all");
            }
            hq_tb_num(&b, r, 3, F_EFFECT, cells[i].effect);
        }
    } else { /* the grid: a row a unit, a column a position */
        const int nc = 1 + (P > 0 ? P : 1);
        const char **cols = calloc((size_t)nc, sizeof *cols);
        bool *num = calloc((size_t)nc, sizeof *num);
        if (!cols || !num) {
            free(cols), free(num), free(cells), free(label);
            return hp_fail(q->err, HP_ERR_NOMEM, "out of memory");
        }
        cols[0] = "unit";
        for (int c = 1; c < nc; c++) {
            cols[c] = P > 0 ? label[c - 1] : "all";
            num[c] = true;
        }
        hq_tb_init(&b, nc, cols, num);
        free(cols), free(num);
        int r = -1, last_l = -1, last_u = -1;
        for (size_t i = 0; i < n; i++) {
            if (cells[i].layer != last_l || cells[i].unit != last_u) {
                r = hq_tb_row(&b);
                last_l = cells[i].layer, last_u = cells[i].unit;
                hp_unit_label(unit, sizeof unit, p.kv, last_l, last_u);
                hq_tb_str(&b, r, 0, unit);
            }
            hq_tb_num(&b, r, 1 + (cells[i].pos >= 0 ? cells[i].pos : 0), F_EFFECT, cells[i].effect);
        }
    }
    hq_tb_note(&b, "patching study '%s' (ablation %s), each %s patched alone %s; %s%s", p.name, q->ablation,
               hp_unit_name(p.kv, false),
               P > 0 ? "at one position (its output there replaced, its own kept at the others; columns: position "
                       "and the first row's token, /corrupt where it differs)"
                     : "at every position",
               hq_effect_convention(q->m), opts->top > 0 ? "; the largest first" : "");
    free(cells);
    free(label);
    return hq_tb_finish(&b, out, q->err);
}
