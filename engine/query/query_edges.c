/*
 * query_edges.c -- `edges`: an edges study's edges, each patched alone, with its effect against the baseline and
 * a paired 95% interval across sequences (hq_rows_load, as `heads`); the sender and the receiver apart; the
 * largest |effect| first (a circuit keeps those: ties in the graph's order), --top K. --study may name a circuit
 * study: its ranking, the edges it patched alone (kind circuit-edge).
 *
 * Must not: print, or exit.
 */
#define _POSIX_C_SOURCE 200809L

#include "headprune.h"
#include "query_priv.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int by_size_desc(const void *a, const void *b)
{
    const struct head_row *x = a, *y = b;
    const bool nx = isnan(x->effect), ny = isnan(y->effect);
    if (nx != ny)
        return nx ? 1 : -1;
    if (!nx && fabs(x->effect) != fabs(y->effect))
        return fabs(x->effect) < fabs(y->effect) ? 1 : -1;
    return (x->ord > y->ord) - (x->ord < y->ord);
}

/* Whether the sweep's study named has jobs of kind (into *yes). */
static enum hp_status has_kind(struct hq_query *q, const char *study, const char *kind, bool *yes)
{
    sqlite3_stmt *st;
    enum hp_status s = hq_prep(q, &st, "SELECT 1 FROM sweep_jobs WHERE sweep_id = ? AND study = ? AND kind = ? LIMIT 1");
    if (s != HP_OK)
        return s;
    sqlite3_bind_int64(st, 1, q->sweep);
    sqlite3_bind_text(st, 2, study, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, kind, -1, SQLITE_STATIC);
    const int r = hq_step(q, st, &s);
    sqlite3_finalize(st);
    *yes = r == 1;
    return r < 0 ? s : HP_OK;
}

enum hp_status hq_edges(struct hq_query *q, const struct hp_query_opts *opts, struct hp_table **out)
{
    enum { C_EDGE, C_SENDER, C_RECEIVER, C_VALUE, C_EFFECT, C_LO, C_HI, C_SEQS, C_P, C_N };
    const char *cols[C_N] = {"edge", "sender", "receiver", q->mname, "effect", "ci_lo", "ci_hi", "seqs", "p"};
    static const bool num[C_N] = {false, false, false, true, true, true, true, true, true};
    struct pick pk;
    bool circuit = false;
    bool any_edges = true;
    enum hp_status s = opts->study ? has_kind(q, opts->study, "circuit-edge", &circuit)
                                   : hq_first_study(q, "edges", false, pk.name, sizeof pk.name, &any_edges);
    if (s == HP_OK && !opts->study && !any_edges) /* no edges study: the first circuit study's ranking, if any */
        s = hq_first_study(q, "circuit-edge", false, pk.name, sizeof pk.name, &circuit);
    if (s == HP_OK && circuit && opts->study)
        snprintf(pk.name, sizeof pk.name, "%s", opts->study);
    else if (s == HP_OK && !circuit)
        s = hq_pick_study(q, "edges", opts->study, &pk);
    if (s != HP_OK)
        return s;
    struct head_row *rows = NULL;
    size_t n = 0;
    if ((s = hq_rows_load(q, circuit ? "circuit-edge" : "edges", pk.name, false, &rows, &n)) != HP_OK) {
        hq_rows_free(rows, n);
        return s;
    }
    if (n)
        hp_qsort(rows, n, sizeof *rows, by_size_desc);
    const size_t shown = opts->top > 0 && (size_t)opts->top < n ? (size_t)opts->top : n;
    struct tb b;
    hq_tb_init(&b, C_N, cols, num);
    for (size_t i = 0; i < shown; i++) {
        const struct head_row *h = &rows[i];
        const int row = hq_tb_row(&b);
        const char *gt = strchr(h->label, '>');
        hq_tb_str(&b, row, C_EDGE, h->label);
        hq_tb_fmt(&b, row, C_SENDER, "%.*s", gt ? (int)(gt - h->label) : 0, h->label);
        hq_tb_str(&b, row, C_RECEIVER, gt ? gt + 1 : "");
        hq_tb_num(&b, row, C_VALUE, F_METRIC, h->value);
        hq_tb_num(&b, row, C_EFFECT, F_EFFECT, h->effect);
        hq_tb_ci(&b, row, C_LO, &h->d);
    }
    hq_rows_free(rows, n);
    hq_tb_note(&b, "sweep %lld, %s study %s, %s; each edge patched alone (docs/edges.md: the receiver reads the "
               "sender's replacement in place of its output), the largest |effect| first; " HQ_CI_NOTE("effect"),
               q->sweep, circuit ? "circuit" : "edges", pk.name, hq_effect_convention(q->m));
    return hq_tb_finish(&b, out, q->err);
}
