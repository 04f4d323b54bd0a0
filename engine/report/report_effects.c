/*
 * report_effects.c -- the report's effect matrices: the layers x units
 * heatmap of single-unit effects (query heads, and KV groups), a layer's
 * pair interactions as a units x units matrix, and patching by position,
 * each on a diverging colour scale (symmetric-log, or linear with --scale)
 * with its legend, cells printing their values where they fit and a dot
 * where a paired interval excludes 0.
 *
 * Part of the report family (report.h): a cell is a row of `query heads`
 * or `query pairs`, drawn from its number and labelled with its text.
 * Must not: compute an effect or an interaction (the queries do), print, or
 * exit.
 */
#define _POSIX_C_SOURCE 200809L

#include "report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

// --- the diverging colour scale and its legend ------------------------------------------

// Where x falls on the report's signed colour scale ending at +-m, in [-1, 1] (0 when m <= 0).
static double scale_t(const struct report *r, double x, double m)
{
    if (r->o->scale != HP_REPORT_SCALE_LINEAR)
        return hp_symlog(x, m);
    if (!(m > 0) || !isfinite(x))
        return 0;
    return x >= m ? 1 : x <= -m ? -1 : x / m;
}

// The scale in a caption's words, "symmetric and logarithmic (ends at +-m), so ..." or "linear (...)".
static void scale_caption(struct hp_text *c, const struct report *r, double m, const char *what)
{
    char b[32];
    if (r->o->scale == HP_REPORT_SCALE_LINEAR)
        hp_text_printf(c, "The colour scale is linear (ends at &#177;%s): a colour's depth is the value's share of "
                          "the largest, so small %s stay pale (<code>--scale log</code> shows them).",
                       hp_num(b, m, 3), what);
    else
        hp_text_printf(c, "The colour scale is symmetric and logarithmic (ends at &#177;%s), so that small %s stay "
                          "visible beside large ones: even a thousandth of the largest is tinted "
                          "(<code>--scale linear</code> keeps them pale).",
                       hp_num(b, m, 3), what);
}

/* The legend's labels for the scale ending at m: 0, and round values on each side (linear: a round step, about
 * four of them; log: the powers of ten within three decades below m). Their count (at most max). */
static int legend_ticks(const struct report *r, double m, double *at, int max)
{
    int n = 0;
    at[n++] = 0;
    if (!(m > 0) || !isfinite(m))
        return n;
    if (r->o->scale == HP_REPORT_SCALE_LINEAR) {
        double lo = 0, hi = m, t[16];
        int k = hp_ticks(&lo, &hi, 5, t, 16);
        for (int i = 0; i < k && n + 2 <= max; i++)
            if (t[i] > 0 && isfinite(t[i]) && (t[i] <= m || t[i] - m <= 1e-9 * m))
                at[n++] = t[i], at[n++] = -t[i];
    } else {
        for (int e = (int)floor(log10(m)); pow(10, e) >= m / 1000 * (1 - 1e-9) && n + 2 <= max; e--)
            at[n++] = pow(10, e), at[n++] = -pow(10, e);
    }
    return n;
}

// The width a legend needs beside the grid: its bar and labels, and its title (11 px text, ~6.2 px a character).
static int legend_width(const char *title)
{
    int w = (int)(6.2 * (double)strlen(title)) + 12;
    return w < 150 ? 150 : w;
}

/*
 * A vertical colour bar of the report's scale at (x, y), h px high: +m at the
 * top, -m at the bottom, labels at round values (legend_ticks) and at the
 * ends where they do not crowd one; its title (the quantity and unit) above.
 */
static void legend_diverging(struct hp_text *s, const struct report *r, double x, double y, double h, double m,
                             const char *title)
{
    char col[8], b[32];
    hp_text_printf(s, "<g class=\"legend\" data-scale=\"%s\">\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">",
                   r->o->scale == HP_REPORT_SCALE_LINEAR ? "linear" : "log", x, y - 8);
    hp_text_escape(s, title);
    hp_text_add(s, "</text>\n");
    const int steps = 40;
    for (int i = 0; i < steps; i++) {
        double t = 1 - 2 * (i + 0.5) / steps;
        hp_color_diverging(t, col);
        hp_text_printf(s, "<rect x=\"%.1f\" y=\"%.2f\" width=\"14\" height=\"%.2f\" fill=\"%s\"/>\n", x,
                       y + h * i / steps, h / steps + 0.3, col);
    }
    hp_text_printf(s, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"%.1f\" fill=\"none\" stroke=\"#888\"/>\n", x,
                   y, h);
    // the labels: 0 and the round values (largest first), then the ends +-m, each only where it is at least
    // 12 px (11 px text) from every label already placed, so none collide however small the bar
    double cand[16], py[16];
    int nc = legend_ticks(r, m, cand, 14), n = 0;
    if (m > 0 && isfinite(m))
        cand[nc++] = m, cand[nc++] = -m;
    for (int i = 0; i < nc; i++) {
        const double t = scale_t(r, cand[i], m), p = y + (1 - t) / 2 * h;
        bool room = isfinite(cand[i]) && isfinite(t);
        for (int k = 0; k < n && room; k++)
            room = fabs(p - py[k]) >= 12;
        if (!room)
            continue;
        py[n++] = p;
        hp_text_printf(s, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>"
                          "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" font-size=\"11\" dominant-baseline=\"middle\">"
                          "%s%s</text>\n",
                       x + 14, p, x + 18, p, x + 21, p, cand[i] > 0 ? "+" : "", hp_num(b, cand[i], 2));
    }
    hp_text_add(s, "</g>\n");
}

/* A cell's value printed in it (w x h px at (x, y)) where it fits: 2 significant digits, white on a dark colour
 * (|t| > 0.6 on the scale). Nothing in a cell too small for it; whether it printed. */
static bool cell_value(struct hp_text *s, double x, double y, double w, double h, double v, double t)
{
    char b[32];
    hp_num(b, v, 2);
    const double fs = h >= 24 && w >= 44 ? 10 : 9;
    if (!*b || h < fs + 4 || (double)strlen(b) * fs * 0.6 > w - 4)
        return false;
    hp_text_printf(s, "<text class=\"value\" x=\"%.1f\" y=\"%.1f\" font-size=\"%g\" text-anchor=\"middle\" "
                      "dominant-baseline=\"middle\" fill=\"%s\" pointer-events=\"none\">%s</text>\n",
                   x + w / 2, y + h / 2, fs, fabs(t) > 0.6 ? "#ffffff" : "#222222", b);
    return true;
}

// --- intervals -----------------------------------------------------------------------

// Whether row i's paired 95% interval (columns c_lo, c_hi) excludes 0; false without one.
static bool ci_excludes_zero(const struct hp_table *t, int i, int c_lo, int c_hi)
{
    const double lo = tval(t, i, c_lo), hi = tval(t, i, c_hi);
    return (isfinite(lo) && lo > 0) || (isfinite(hi) && hi < 0);
}

// "; paired 95% CI lo to hi over n sequences, p = x (excludes 0)" of row i, in a tooltip; nothing without one.
static void ci_tooltip(struct hp_text *sv, const struct hp_table *t, int i, int c_lo, int c_hi, int c_seqs, int c_p)
{
    if (!*tcell(t, i, c_lo))
        return;
    hp_text_add(sv, "; paired 95% CI ");
    hp_text_escape(sv, tcell(t, i, c_lo));
    hp_text_add(sv, " to ");
    hp_text_escape(sv, tcell(t, i, c_hi));
    hp_text_add(sv, " over ");
    hp_text_escape(sv, tcell(t, i, c_seqs));
    hp_text_add(sv, " sequences");
    if (*tcell(t, i, c_p)) {
        hp_text_add(sv, ", p = ");
        hp_text_escape(sv, tcell(t, i, c_p));
    }
    hp_text_add(sv, ci_excludes_zero(t, i, c_lo, c_hi) ? " (excludes 0)" : " (includes 0)");
}

// The mark of an interval that excludes 0 in a w x h cell at (x, y): small, at the centre or, where the cell
// prints its value (value_shown), in its top right corner.
static void sig_mark(struct hp_text *sv, double x, double y, double w, double h, bool value_shown)
{
    double rr = (w < h ? w : h) * 0.08; // a mark, not a second colour: small
    rr = rr < 2 ? 2 : rr > 4 ? 4 : rr;
    hp_text_printf(sv, "<circle class=\"sig\" cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"#000000\" "
                       "stroke=\"#ffffff\" stroke-width=\"1\" pointer-events=\"none\"/>\n",
                   value_shown ? x + w - rr - 3 : x + w / 2.0, value_shown ? y + rr + 3 : y + h / 2.0, rr);
}

// --- heatmap of single-unit effects --------------------------------------------------

// The columns of `query heads` a heatmap cell shows.
struct heat_cols {
    int label, value, eff, lo, hi, seqs, p, atp;
};

/*
 * Row i of `query heads` as a cell's data-* attributes, then its tooltip: the
 * effect and the value it is of, the paired interval (sig: it excludes 0),
 * the attribution estimate and, when role_row >= 0, that row of the head
 * roles.
 */
static void heatmap_cell_text(struct hp_text *sv, const struct report *r, const struct hp_table *t,
                              const struct heat_cols *hc, int i, bool sig, int role_row)
{
    char b[32];
    hr_attr_cell(sv, "data-label", t, i, hc->label);
    hr_attr_cell(sv, "data-effect", t, i, hc->eff);
    hr_attr_cell(sv, "data-ci-lo", t, i, hc->lo);
    hr_attr_cell(sv, "data-ci-hi", t, i, hc->hi);
    hr_attr_cell(sv, "data-p", t, i, hc->p);
    hr_attr_cell(sv, "data-seqs", t, i, hc->seqs);
    hr_attr_cell(sv, "data-value", t, i, hc->value);
    hr_attr_cell(sv, "data-atp", t, i, hc->atp);
    hp_text_printf(sv, " data-ci-excludes-zero=\"%d\"><title>", sig);
    hp_text_escape(sv, tcell(t, i, hc->label));
    hp_text_add(sv, ": effect ");
    hp_text_escape(sv, tcell(t, i, hc->eff));
    hp_text_printf(sv, " %s (%s ", r->unit, r->mname);
    hp_text_escape(sv, tcell(t, i, hc->value));
    hp_text_printf(sv, ", baseline %s)", hp_num(b, r->base, 7));
    ci_tooltip(sv, t, i, hc->lo, hc->hi, hc->seqs, hc->p);
    if (*tcell(t, i, hc->atp)) {
        hp_text_add(sv, "; attribution estimate ");
        hp_text_escape(sv, tcell(t, i, hc->atp));
    }
    if (role_row >= 0) // joined by (layer, head), as the atp column is by the query
        hr_roles_tooltip(sv, r->roles, role_row);
}

// The heatmap's legend at x = lx: the colour bar (lh px high, ends at +-m), the mark, a missing cell.
static void heatmap_legend(struct hp_text *sv, const struct report *r, int lx, int top, double lh, double m,
                           const char *ltitle)
{
    legend_diverging(sv, r, lx, top + 14, lh, m, ltitle);
    double ly = top + 14 + lh + 24;
    hp_text_printf(sv, "<g class=\"legend\" font-size=\"11\">\n"
                       "<circle cx=\"%d\" cy=\"%.1f\" r=\"4\" fill=\"#000000\" stroke=\"#ffffff\"/>"
                       "<text x=\"%d\" y=\"%.1f\" dominant-baseline=\"middle\">paired 95%% CI excludes 0</text>\n"
                       "<rect x=\"%d\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"#ffffff\" stroke=\"#bbbbbb\"/>"
                       "<text x=\"%d\" y=\"%.1f\" dominant-baseline=\"middle\">no result</text>\n"
                       "<text x=\"%d\" y=\"%.1f\" fill=\"#555\">colour: %s scale</text>\n</g>\n",
                   lx + 7, ly, lx + 18, ly, lx + 2, ly + 14, lx + 18, ly + 19, lx, ly + 40,
                   r->o->scale == HP_REPORT_SCALE_LINEAR ? "linear" : "symmetric log");
}

/*
 * The verified top k of the sweep's first finished screen study over the same units, outlined on the heatmap
 * (`query screen`'s rows: their layer and unit); its table into *out (NULL when nothing was outlined: a screen
 * not finished, or none).
 */
static enum hp_status screen_outline(struct report *r, struct hp_text *sv, bool kv, int L, int U, int left, int top,
                                     int cs, int ch, struct hp_table **out)
{
    *out = NULL;
    const char *study = hr_study_of(r, "screen", kv);
    if (!study)
        return HP_OK;
    struct hp_query_opts q = {.kind = HP_QUERY_SCREEN, .sweep_id = r->sweep, .study = study};
    struct hp_table *t = NULL;
    enum hp_status s = hp_query_read(r->rd, &q, &t, r->err);
    if (s == HP_ERR_ARG) { /* not finished: nothing verified to mark */
        r->err->msg[0] = 0;
        return HP_OK;
    }
    if (s != HP_OK)
        return s;
    const int c_l = tcol(t, "layer"), c_u = tcol(t, "unit"), c_lab = tcol(t, "label");
    hp_text_add(sv, "<g class=\"screen-top\" data-study=\"");
    hp_text_escape(sv, study);
    hp_text_add(sv, "\" fill=\"none\" stroke=\"#111111\" stroke-width=\"2\" pointer-events=\"none\">\n");
    for (int i = 0; i < t->n_rows - t->n_summary; i++) {
        const int l = tint(t, i, c_l), u = tint(t, i, c_u);
        if (l < 0 || l >= L || u < 0 || u >= U)
            continue;
        hp_text_printf(sv, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%d\"", left + u * cs + 1.5,
                       top + l * ch + 1.5, cs - 3, ch - 3);
        hr_attr_cell(sv, "data-label", t, i, c_lab);
        hp_text_add(sv, "/>\n");
    }
    hp_text_add(sv, "</g>\n");
    *out = t;
    return HP_OK;
}

// The heatmap's caption: what a cell shows, the marks, the screen's outline (scr, freed here) and the source.
static void heatmap_caption(struct report *r, struct section *sec, const char *study, bool kv,
                            const struct hp_table *t, struct hp_table *scr, double m, int n_sig, bool roles)
{
    const char *what = kv ? "KV group" : "head", *whats = kv ? "KV groups" : "heads";
    struct hp_text *c = &sec->caption;
    hp_text_printf(c, "<p>Each cell: the effect of ablating one %s alone (layers down, %s across), %s. Red: "
                      "ablating it hurts; blue: it helps. ",
                   what, whats, hp_metric_effect_text(r->m));
    scale_caption(c, r, m, "effects");
    hp_text_printf(c, " A dot marks the %d %s whose paired 95%% interval over sequences excludes 0. A cell prints "
                      "its effect (2 significant digits) where it fits; hover it for its numbers.</p>\n",
                   n_sig, n_sig == 1 ? what : whats);
    if (scr) {
        hp_text_printf(c, "<p>A black outline marks the %d %s screen study ", scr->n_rows - scr->n_summary, whats);
        hp_text_escape(c, hr_study_of(r, "screen", kv));
        hp_text_add(c, " verified as the exact top k of this study's effects: ");
        /* the note's first sentence: the evaluations and the bound */
        const char *note = scr->note ? scr->note : "", *end = strstr(note, ". ");
        char first[1024];
        snprintf(first, sizeof first, "%.*s.", end ? (int)(end - note) : (int)strlen(note), note);
        hp_text_escape(c, first);
        hp_text_add(c, "</p>\n");
        hp_table_free(scr);
    }
    if (roles)
        hp_text_add(c, "<p>A cell's tooltip also gives the head's roles (the scores of the roles figure "
                       "below).</p>\n");
    hr_caption_source(c, r, "heads", study, t);
}

static enum hp_status draw_heatmap(struct report *r, struct section *sec, const char *study, bool kv)
{
    struct hp_query_opts q = {.kind = HP_QUERY_HEADS, .sweep_id = r->sweep, .study = study};
    struct hp_table *t = NULL;
    enum hp_status s = hp_query_read(r->rd, &q, &t, r->err);
    if (s != HP_OK)
        return s;
    const int c_layer = tcol(t, "layer"), c_unit = tcol(t, "unit"), c_eff = tcol(t, "effect"),
              c_lo = tcol(t, "ci_lo"), c_hi = tcol(t, "ci_hi");
    const struct heat_cols hc = {tcol(t, "label"), tcol(t, r->mname), c_eff, c_lo, c_hi,
                                 tcol(t, "seqs"), tcol(t, "p"), tcol(t, "atp")};
    const int L = r->n_layers;
    int U = kv && r->n_kv_heads > 0 ? r->n_kv_heads : r->n_heads;
    for (int i = 0; i < t->n_rows; i++) // a study of a database that names its units oddly: still no overflow
        if (tint(t, i, c_unit) >= U)
            U = tint(t, i, c_unit) + 1;
    const char *what = kv ? "KV group" : "head", *whats = kv ? "KV groups" : "heads";
    if ((long long)L * U > MAX_CELLS || L > MAX_ROWS) {
        hp_text_printf(&sec->note, "Left out: %d layers x %d %s are too many cells to draw (at most %d, in at "
                                   "most %d layers); <code>headprune query heads --format csv</code> lists them.",
                       L, U, whats, MAX_CELLS, MAX_ROWS);
        hp_table_free(t);
        return HP_OK;
    }
    int *at = malloc((size_t)L * (size_t)U * sizeof *at);
    // head roles are per query head: they join the heads' heatmap, not the KV groups'
    int *rat = !kv && r->roles ? hr_roles_index(r->roles, L, U) : NULL;
    struct fig *f = at && (kv || !r->roles || rat) ? hr_fig_new(r, kv ? "heatmap-kv" : "heatmap") : NULL;
    if (!f) {
        free(at), free(rat);
        hp_table_free(t);
        return hp_fail(r->err, HP_ERR_NOMEM, "report: out of memory");
    }
    double m = 0; // the largest |effect|: the colour scale's end
    for (int i = 0; i < L * U; i++)
        at[i] = -1;
    for (int i = 0; i < t->n_rows; i++) {
        int l = tint(t, i, c_layer), u = tint(t, i, c_unit);
        if (l < 0 || l >= L || u < 0 || u >= U || at[l * U + u] >= 0)
            continue;
        at[l * U + u] = i;
        double e = tval(t, i, c_eff);
        if (isfinite(e) && fabs(e) > m)
            m = fabs(e);
    }

    // layout: square cells between 12 and 56 px, the grid at most ~600 px wide and ~700 px high
    int cs = 600 / U;
    cs = cs < 12 ? 12 : cs > 56 ? 56 : cs;
    int ch = 700 / L;
    ch = ch < 10 ? 10 : ch > cs ? cs : ch;
    const int left = 64, top = 64, gw = U * cs, gh = L * ch;
    const int lx = left + gw + 36; // the legend
    const double lh = gh < 160 ? 160 : gh > 260 ? 260 : gh;
    char ltitle[96];
    snprintf(ltitle, sizeof ltitle, "effect (%s)", r->unit);
    const int lw = legend_width(ltitle); // and the lines below the bar: "paired 95% CI excludes 0" is ~170 px
    int W = lx + (lw < 185 ? 185 : lw), H = top + gh + 60;
    if (W < 560)
        W = 560;
    if (H < top + lh + 104) // the legend's bar and three lines below it
        H = top + (int)lh + 104;
    struct hp_text *sv = &f->svg;
    char title[300], sub[400], col[8], b[32];
    snprintf(title, sizeof title, "Effect of ablating each %s alone", what);
    snprintf(sub, sizeof sub, "sweep %lld, study %s; %s", r->sweep, study, hp_metric_effect_text(r->m));
    hp_svg_open(sv, kv ? "fig-heatmap-kv" : "fig-heatmap", W, H, title);
    hr_svg_heading(sv, W, title, sub);

    // axes: units along the top, layers down the left
    int every = cs >= 16 ? 1 : (16 + cs - 1) / cs;
    hp_text_add(sv, "<g class=\"ticks\" font-size=\"11\" fill=\"#444\">\n");
    for (int u = 0; u < U; u += every)
        hp_text_printf(sv, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%d</text>\n", left + (u + 0.5) * cs,
                       top - 6, u);
    int every_l = ch >= 14 ? 1 : (14 + ch - 1) / ch;
    for (int l = 0; l < L; l += every_l)
        hp_text_printf(sv, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" dominant-baseline=\"middle\">%d</text>\n",
                       left - 6, top + (l + 0.5) * ch, l);
    hp_text_add(sv, "</g>\n");
    hp_text_printf(sv, "<text class=\"axis-label\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s (index within its "
                       "layer)</text>\n", left + gw / 2.0, top + gh + 22, what);
    hp_text_printf(sv, "<text class=\"axis-label\" text-anchor=\"middle\" transform=\"translate(%d %.1f) "
                       "rotate(-90)\">layer</text>\n", left - 40, top + gh / 2.0);

    // the cells: each a rect carrying its row of `query heads` as data-* and in its tooltip
    hp_text_printf(sv, "<g class=\"cells\" data-study=\"");
    hp_text_escape(sv, study);
    hp_text_printf(sv, "\" data-kv=\"%d\" data-layers=\"%d\" data-units=\"%d\" data-scale-max=\"%s\">\n", kv, L, U,
                   hp_num(b, m, 6));
    int n_sig = 0;
    for (int l = 0; l < L; l++)
        for (int u = 0; u < U; u++) {
            int i = at[l * U + u];
            double x = left + u * cs, y = top + l * ch;
            char label[48];
            hp_unit_label(label, sizeof label, kv, l, u);
            if (i < 0) {
                hp_text_printf(sv, "<rect class=\"cell missing\" x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%d\" "
                                   "fill=\"#ffffff\" stroke=\"#bbbbbb\" data-layer=\"%d\" data-unit=\"%d\" "
                                   "data-label=\"%s\"><title>%s: no result in this study</title></rect>\n"
                                   "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#bbbbbb\" "
                                   "pointer-events=\"none\"/>\n",
                               x + 0.5, y + 0.5, cs - 1, ch - 1, l, u, label, label, x + 2, y + ch - 2, x + cs - 2,
                               y + 2);
                continue;
            }
            double e = tval(t, i, c_eff);
            double tt = scale_t(r, e, m);
            bool sig = ci_excludes_zero(t, i, c_lo, c_hi);
            hp_color_diverging(tt, col);
            hp_text_printf(sv, "<rect class=\"cell\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\" "
                               "stroke=\"#ffffff\" data-layer=\"%d\" data-unit=\"%d\"",
                           (int)x, (int)y, cs, ch, col, l, u);
            heatmap_cell_text(sv, r, t, &hc, i, sig, rat ? rat[l * U + u] : -1);
            hp_text_add(sv, "</title></rect>\n");
            const bool shown = cell_value(sv, x, y, cs, ch, e, tt);
            if (sig) {
                n_sig++;
                sig_mark(sv, x, y, cs, ch, shown);
            }
        }
    hp_text_add(sv, "</g>\n");
    struct hp_table *scr = NULL;
    if ((s = screen_outline(r, sv, kv, L, U, left, top, cs, ch, &scr)) != HP_OK) {
        free(at), free(rat);
        hp_table_free(t);
        return s;
    }

    heatmap_legend(sv, r, lx, top, lh, m, ltitle);
    hp_svg_close(sv);

    heatmap_caption(r, sec, study, kv, t, scr, m, n_sig, rat != NULL);
    free(at), free(rat);
    hp_table_free(t);
    return HP_OK;
}

enum hp_status hr_make_heatmap(struct report *r, struct section *sec)
{
    const char *study = hr_study_of(r, "single", 0);
    if (!study) {
        hr_left_out(r, sec, "single study over query heads", "<code>- single</code> in the plan produces it");
        return HP_OK;
    }
    enum hp_status s = hr_roles_read(r);
    return s == HP_OK ? draw_heatmap(r, sec, study, false) : s;
}

enum hp_status hr_make_heatmap_kv(struct report *r, struct section *sec)
{
    const char *study = hr_study_of(r, "single", 1);
    bool gqa = r->n_kv_heads > 0 && r->n_kv_heads < r->n_heads;
    if (!study) {
        if (!gqa)
            sec->not_applicable = true; // without grouped-query attention a KV group is a head
        else
            hr_left_out(r, sec, "single study over KV groups",
                     "<code>- single: {kv: true}</code> in the plan produces it");
        return HP_OK;
    }
    return draw_heatmap(r, sec, study, true);
}

// --- pair interactions ------------------------------------------------------------

// A group of the pairs table: one study's pairs within one layer.
struct pair_group {
    const char *study;
    int layer;
    bool kv;
    int *rows, n; // its rows
};

/*
 * One group's matrix into sv (figure id, U units a side): each pair's
 * interaction as the colour of (a, b) and (b, a) on the scale that ends at
 * +-m, its row of `query pairs` as data-* and in the tooltip.
 */
static void pairs_matrix(struct hp_text *sv, const struct report *r, const struct hp_table *t,
                         const struct pair_group *g, const char *id, int U, double m, int *n_sig)
{
    const int c_pair = tcol(t, "pair"), c_a = tcol(t, "unit_a"), c_b = tcol(t, "unit_b"),
              c_ab = tcol(t, "effect_ab"), c_ea = tcol(t, "effect_a"), c_eb = tcol(t, "effect_b"),
              c_i = tcol(t, "interaction"), c_lo = tcol(t, "ci_lo"), c_hi = tcol(t, "ci_hi"),
              c_seqs = tcol(t, "seqs"), c_p = tcol(t, "p");
    char b[32], col[8], lt[96];
    snprintf(lt, sizeof lt, "interaction (%s)", r->unit);
    int cs = 400 / U; // cells wide enough to print "-0.0012" from 8 units down
    cs = cs < 10 ? 10 : cs > 48 ? 48 : cs;
    const int left = 56, top = 74, gw = U * cs, lx = left + gw + 34;
    int W = lx + legend_width(lt), H = top + gw + 50;
    W = W < 420 ? 420 : W;
    H = H < top + 240 ? top + 240 : H;
    char eid[80], title[120], sub[300];
    snprintf(eid, sizeof eid, "fig-%s", id);
    snprintf(title, sizeof title, "Pair interactions, layer %d", g->layer);
    snprintf(sub, sizeof sub, "sweep %lld, study %s; I = D(a and b) - D(a) - D(b)", r->sweep, g->study);
    hp_svg_open(sv, eid, W, H, title);
    hr_svg_heading(sv, W, title, sub);
    const char *unit_name = g->kv ? "KV group" : "head";
    int every = cs >= 16 ? 1 : (16 + cs - 1) / cs;
    hp_text_add(sv, "<g class=\"ticks\" font-size=\"11\" fill=\"#444\">\n");
    for (int u = 0; u < U; u += every)
        hp_text_printf(sv, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%d</text>"
                           "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" dominant-baseline=\"middle\">%d</text>\n",
                       left + (u + 0.5) * cs, top - 6, u, left - 6, top + (u + 0.5) * cs, u);
    hp_text_add(sv, "</g>\n");
    hp_text_printf(sv, "<text class=\"axis-label\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s b</text>\n"
                       "<text class=\"axis-label\" text-anchor=\"middle\" transform=\"translate(%d %.1f) "
                       "rotate(-90)\">%s a</text>\n",
                   left + gw / 2.0, top + gw + 22, unit_name, left - 34, top + gw / 2.0, unit_name);
    // the diagonal: no pair of a unit with itself
    for (int u = 0; u < U; u++)
        hp_text_printf(sv, "<rect class=\"diagonal\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
                           "fill=\"#d9d9d9\" stroke=\"#ffffff\"/>\n",
                       left + u * cs, top + u * cs, cs, cs);
    hp_text_add(sv, "<g class=\"pairs\" data-study=\"");
    hp_text_escape(sv, g->study);
    hp_text_printf(sv, "\" data-layer=\"%d\" data-units=\"%d\" data-scale-max=\"%s\">\n", g->layer, U,
                   hp_num(b, m, 6));
    for (int j = 0; j < g->n; j++) {
        int i = g->rows[j], a = tint(t, i, c_a), bu = tint(t, i, c_b);
        if (a < 0 || bu < 0)
            continue;
        const double v = tval(t, i, c_i), tt = scale_t(r, v, m);
        const bool sig = ci_excludes_zero(t, i, c_lo, c_hi);
        *n_sig += sig;
        if (isfinite(v))
            hp_color_diverging(tt, col);
        else
            snprintf(col, sizeof col, "#ffffff");
        for (int half = 0; half < 2; half++) { // (a, b) and (b, a): the matrix is symmetric
            int row = half ? bu : a, cl = half ? a : bu;
            hp_text_printf(sv, "<rect class=\"pair%s\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\" "
                               "stroke=\"%s\" data-a=\"%d\" data-b=\"%d\"",
                           isfinite(v) ? "" : " missing", left + cl * cs, top + row * cs, cs, cs, col,
                           isfinite(v) ? "#ffffff" : "#bbbbbb", a, bu);
            hr_attr_cell(sv, "data-pair", t, i, c_pair);
            hr_attr_cell(sv, "data-interaction", t, i, c_i);
            hr_attr_cell(sv, "data-effect-ab", t, i, c_ab);
            hr_attr_cell(sv, "data-effect-a", t, i, c_ea);
            hr_attr_cell(sv, "data-effect-b", t, i, c_eb);
            hr_attr_cell(sv, "data-ci-lo", t, i, c_lo);
            hr_attr_cell(sv, "data-ci-hi", t, i, c_hi);
            hr_attr_cell(sv, "data-p", t, i, c_p);
            hp_text_printf(sv, " data-ci-excludes-zero=\"%d\"><title>", sig);
            hp_text_escape(sv, tcell(t, i, c_pair));
            if (isfinite(v)) {
                hp_text_add(sv, ": interaction ");
                hp_text_escape(sv, tcell(t, i, c_i));
                hp_text_printf(sv, " %s (%s)", r->unit,
                               v > 0 ? "redundant: each backs the other up" : "overlapping damage");
            } else {
                hp_text_add(sv, ": no interaction (a unit lacks its single effect)");
            }
            hp_text_add(sv, "; both ablated ");
            hp_text_escape(sv, tcell(t, i, c_ab));
            hp_text_add(sv, ", a alone ");
            hp_text_escape(sv, tcell(t, i, c_ea));
            hp_text_add(sv, ", b alone ");
            hp_text_escape(sv, tcell(t, i, c_eb));
            ci_tooltip(sv, t, i, c_lo, c_hi, c_seqs, c_p);
            hp_text_add(sv, "</title></rect>\n");
            const double x = left + cl * cs, y = top + row * cs;
            const bool shown = isfinite(v) && cell_value(sv, x, y, cs, cs, v, tt);
            if (sig)
                sig_mark(sv, x, y, cs, cs, shown);
        }
    }
    hp_text_add(sv, "</g>\n");
    legend_diverging(sv, r, lx, top + 14, gw < 150 ? 150 : gw > 240 ? 240 : gw, m, lt);
    hp_svg_close(sv);
}

enum hp_status hr_make_pairs(struct report *r, struct section *sec)
{
    if (!hr_study_of(r, "pairs", -1)) {
        hr_left_out(r, sec, "pairs study", "<code>- pairs: {layers: [1]}</code> in the plan produces one for a layer");
        return HP_OK;
    }
    // the query measures each pair against single-unit effects of the same kind of unit
    bool can = (hr_study_of(r, "pairs", 0) && hr_study_of(r, "single", 0)) ||
               (hr_study_of(r, "pairs", 1) && hr_study_of(r, "single", 1));
    if (!can) {
        hr_left_out(r, sec, "single study over the units of its pairs study",
                 "a <code>single</code> study beside the <code>pairs</code> study (with the same <code>kv</code>) "
                 "gives the effects each pair is measured against");
        return HP_OK;
    }
    struct hp_query_opts q = {.kind = HP_QUERY_PAIRS, .sweep_id = r->sweep};
    struct hp_table *t = NULL;
    enum hp_status s = hp_query_read(r->rd, &q, &t, r->err);
    if (s != HP_OK)
        return s;
    const int c_study = tcol(t, "study"), c_pair = tcol(t, "pair"), c_layer = tcol(t, "layer"),
              c_a = tcol(t, "unit_a"), c_b = tcol(t, "unit_b"), c_i = tcol(t, "interaction"),
              c_ea = tcol(t, "effect_a"), c_eb = tcol(t, "effect_b");
    struct pair_group *g = calloc((size_t)t->n_rows + 1, sizeof *g);
    int *rows = malloc(((size_t)t->n_rows + 1) * sizeof *rows);
    if (!g || !rows) {
        free(g), free(rows);
        hp_table_free(t);
        return hp_fail(r->err, HP_ERR_NOMEM, "report: out of memory");
    }
    // groups in order of first appearance; their rows in table order, packed group by group
    int n_g = 0;
    double m = 0;
    for (int i = 0; i < t->n_rows; i++) {
        const char *st = tcell(t, i, c_study);
        int l = tint(t, i, c_layer), k;
        for (k = 0; k < n_g; k++)
            if (g[k].layer == l && strcmp(g[k].study, st) == 0)
                break;
        if (k == n_g)
            g[n_g++] = (struct pair_group){st, l, strncmp(tcell(t, i, c_pair), "kv:", 3) == 0, NULL, 0};
        g[k].n++;
        // the scale ends at the largest interaction or single effect of its units: an interaction reads against
        // the effects it is measured against (a +-0.001 interaction beside effects of 0.03 is faint, not deep)
        const double v[3] = {tval(t, i, c_i), tval(t, i, c_ea), tval(t, i, c_eb)};
        for (int j = 0; j < 3; j++)
            if (isfinite(v[j]) && fabs(v[j]) > m)
                m = fabs(v[j]);
    }
    int o = 0;
    for (int k = 0; k < n_g; k++) {
        g[k].rows = rows + o;
        int n = 0;
        for (int i = 0; i < t->n_rows; i++)
            if (tint(t, i, c_layer) == g[k].layer && strcmp(tcell(t, i, c_study), g[k].study) == 0)
                g[k].rows[n++] = i;
        o += n;
    }
    int n_drawn = 0, n_big = 0, n_sig = 0;
    for (int k = 0; k < n_g && s == HP_OK; k++) {
        int U = g[k].kv && r->n_kv_heads > 0 ? r->n_kv_heads : r->n_heads;
        for (int j = 0; j < g[k].n; j++) {
            int a = tint(t, g[k].rows[j], c_a), bb = tint(t, g[k].rows[j], c_b);
            U = a >= U ? a + 1 : U;
            U = bb >= U ? bb + 1 : U;
        }
        if (g[k].layer < 0) // a pair the query could not place in a layer: nothing to draw it in
            continue;
        if ((long long)U * U > MAX_CELLS) {
            n_big++;
            continue;
        }
        // the figure's id: the layer, "-kv" for KV groups, and a count when a layer has several pairs studies
        char id[64];
        int dup = 0;
        for (int j = 0; j < k; j++)
            dup += g[j].layer == g[k].layer && g[j].kv == g[k].kv;
        snprintf(id, sizeof id, "pairs-layer%d%s", g[k].layer, g[k].kv ? "-kv" : "");
        if (dup)
            snprintf(id + strlen(id), sizeof id - strlen(id), "-%d", dup + 1);
        struct fig *f = hr_fig_new(r, id);
        if (!f) {
            s = hp_fail(r->err, HP_ERR_NOMEM, "report: out of memory");
            break;
        }
        n_drawn++;
        pairs_matrix(&f->svg, r, t, &g[k], id, U, m, &n_sig);
    }
    if (s == HP_OK) {
        struct hp_text *c = &sec->caption;
        hp_text_printf(c, "<p>For each pair of units of a layer, the interaction I = D(a and b) &#8722; D(a) &#8722; "
                          "D(b) of their effects D (%s). Red (I &gt; 0): removing both hurts more than the two "
                          "removals add up to, the units back each other up; blue (I &lt; 0): their damage overlaps. "
                          "One colour scale for every layer, ending at the largest |I| or single effect |D| of the "
                          "sweep's pairs and their units, so that an interaction reads beside the effects it is "
                          "measured against. ",
                       hp_metric_effect_text(r->m));
        scale_caption(c, r, m, "interactions");
        if (tcol(t, "ci_lo") >= 0)
            hp_text_printf(c, " A dot marks the %d pair%s whose paired 95%% interval over sequences (of the "
                              "per-sequence I) excludes 0.", n_sig, n_sig == 1 ? "" : "s");
        hp_text_add(c, " A cell prints its I where it fits.</p>\n");
        if (n_big)
            hp_text_printf(c, "<p class=\"note\">%d layer%s with too many units to draw as a matrix (more than %d "
                              "cells) left out.</p>\n",
                           n_big, n_big == 1 ? "" : "s", MAX_CELLS);
        hr_caption_source(c, r, "pairs", NULL, t);
        if (n_drawn == 0)
            hp_text_printf(&sec->note, "Left out: every pairs study is of a layer with too many units to draw.");
    }
    free(g), free(rows);
    hp_table_free(t);
    return s;
}


// --- activation patching by position ------------------------------------------------

// At most this many units are drawn in the patching grid (those whose largest |effect| is largest).
#define PATCH_ROWS 24

/* Row i's largest |effect| over the grid's columns [1, n_cols). */
static double row_peak(const struct hp_table *t, int i)
{
    double m = 0;
    for (int c = 1; c < t->n_cols; c++)
        if (isfinite(tval(t, i, c)) && fabs(tval(t, i, c)) > m)
            m = fabs(tval(t, i, c));
    return m;
}

static const struct hp_table *peak_table; /* qsort's context: the rows are sorted by their peak */

static int by_peak(const void *a, const void *b)
{
    const double x = row_peak(peak_table, *(const int *)a), y = row_peak(peak_table, *(const int *)b);
    return (y > x) - (y < x);
}

static int by_index(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* The units x positions grid of a patching study (`query patching`), its columns labelled with their tokens. */
static enum hp_status draw_patching(struct report *r, struct section *sec, const char *study)
{
    struct hp_query_opts q = {.kind = HP_QUERY_PATCHING, .sweep_id = r->sweep, .study = study};
    struct hp_table *t = NULL;
    enum hp_status s = hp_query_read(r->rd, &q, &t, r->err);
    if (s != HP_OK)
        return s;
    const int P = t->n_cols - 1, n_units = t->n_rows;
    if (P < 1 || n_units < 1 || (long long)P * PATCH_ROWS > MAX_CELLS) {
        hp_text_printf(&sec->note, "Left out: study %s has %d positions and %d units to draw; <code>headprune query "
                                   "patching --format csv</code> lists them.", study, P, n_units);
        hp_table_free(t);
        return HP_OK;
    }
    const int n = n_units < PATCH_ROWS ? n_units : PATCH_ROWS;
    int *rows = malloc((size_t)n_units * sizeof *rows);
    struct fig *f = rows ? hr_fig_new(r, "patching") : NULL;
    if (!f) {
        free(rows);
        hp_table_free(t);
        return hp_fail(r->err, HP_ERR_NOMEM, "report: out of memory");
    }
    for (int i = 0; i < n_units; i++)
        rows[i] = i;
    peak_table = t;
    qsort(rows, (size_t)n_units, sizeof *rows, by_peak); /* the n largest, then back in layer order */
    qsort(rows, (size_t)n, sizeof *rows, by_index);
    double m = 0;
    for (int k = 0; k < n; k++)
        m = fmax(m, row_peak(t, rows[k]));

    // layout: cells between 14 and 64 px wide, room above for the tokens (rotated), units down the left
    int cw = 640 / P;
    cw = cw < 14 ? 14 : cw > 64 ? 64 : cw;
    const int ch = n > 16 ? 18 : 24, left = 72, top = 150, gw = P * cw, gh = n * ch;
    const int lx = left + gw + 36;
    const double lh = gh < 160 ? 160 : gh > 260 ? 260 : gh;
    char ltitle[96];
    snprintf(ltitle, sizeof ltitle, "effect (%s)", r->unit);
    int W = lx + legend_width(ltitle), H = top + gh + 60;
    W = W < 560 ? 560 : W;
    H = H < top + (int)lh + 60 ? top + (int)lh + 60 : H;
    struct hp_text *sv = &f->svg;
    char title[300], sub[400], col[8], b[32];
    snprintf(title, sizeof title, "Activation patching, one position at a time");
    snprintf(sub, sizeof sub, "sweep %lld, study %s; %s", r->sweep, study, hp_metric_effect_text(r->m));
    hp_svg_open(sv, "fig-patching", W, H, title);
    hr_svg_heading(sv, W, title, sub);
    hp_text_add(sv, "<g class=\"ticks\" font-size=\"11\" fill=\"#444\">\n");
    for (int c = 0; c < P; c++) { /* "5 ' Mary'/' John'", read upwards */
        hp_text_printf(sv, "<text x=\"%.1f\" y=\"%d\" transform=\"rotate(-60 %.1f %d)\">", left + (c + 0.5) * cw,
                       top - 6, left + (c + 0.5) * cw, top - 6);
        hp_text_escape(sv, t->cols[c + 1]);
        hp_text_add(sv, "</text>\n");
    }
    for (int k = 0; k < n; k++) {
        hp_text_printf(sv, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" dominant-baseline=\"middle\">", left - 6,
                       top + (k + 0.5) * ch);
        hp_text_escape(sv, tcell(t, rows[k], 0));
        hp_text_add(sv, "</text>\n");
    }
    hp_text_add(sv, "</g>\n");
    hp_text_printf(sv, "<text class=\"axis-label\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">position (the first "
                       "row's token; /corrupt where it differs)</text>\n", left + gw / 2.0, top + gh + 22);
    hp_text_printf(sv, "<g class=\"cells\" data-study=\"");
    hp_text_escape(sv, study);
    hp_text_printf(sv, "\" data-units=\"%d\" data-positions=\"%d\" data-scale-max=\"%s\">\n", n, P, hp_num(b, m, 6));
    for (int k = 0; k < n; k++)
        for (int c = 0; c < P; c++) {
            const int i = rows[k];
            const double e = tval(t, i, c + 1), x = left + c * cw, y = top + k * ch;
            if (!isfinite(e)) {
                hp_text_printf(sv, "<rect class=\"cell missing\" x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%d\" "
                                   "fill=\"#ffffff\" stroke=\"#bbbbbb\"/>\n", x + 0.5, y + 0.5, cw - 1, ch - 1);
                continue;
            }
            const double tt = scale_t(r, e, m);
            hp_color_diverging(tt, col);
            hp_text_printf(sv, "<rect class=\"cell\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\" "
                               "stroke=\"#ffffff\" data-position=\"%d\"",
                           (int)x, (int)y, cw, ch, col, c);
            hr_attr_cell(sv, "data-label", t, i, 0);
            hr_attr_cell(sv, "data-effect", t, i, c + 1);
            hp_text_add(sv, "><title>");
            hp_text_escape(sv, tcell(t, i, 0));
            hp_text_add(sv, " at ");
            hp_text_escape(sv, t->cols[c + 1]);
            hp_text_add(sv, ": effect ");
            hp_text_escape(sv, tcell(t, i, c + 1));
            hp_text_printf(sv, " %s</title></rect>\n", r->unit);
            if (fabs(e) >= 0.005 * m) /* the value where it fits and is not nothing */
                cell_value(sv, x, y, cw, ch, e, tt);
        }
    hp_text_add(sv, "</g>\n");
    legend_diverging(sv, r, lx, top + 14, lh, m, ltitle);
    hp_svg_close(sv);

    struct hp_text *c = &sec->caption;
    hp_text_printf(c, "<p>Each cell: the effect of patching one unit's output at one position only (its output "
                      "there replaced under the sweep's %s ablation, its own kept at every other position), %s. "
                      "Red: the patch hurts; blue: it helps (under denoise, recovery shows blue). ",
                   hr_info_text(r, "ablation"), hp_metric_effect_text(r->m));
    if (n < n_units)
        hp_text_printf(c, "Shown: the %d of %d units with the largest effect at some position, in layer order. ", n,
                       n_units);
    scale_caption(c, r, m, "effects");
    hp_text_add(c, " A cell prints its effect where it fits and is at least 0.5% of the largest; hover it for its "
                   "numbers.</p>\n");
    hr_caption_source(c, r, "patching", study, t);
    free(rows);
    hp_table_free(t);
    return HP_OK;
}

enum hp_status hr_make_patching(struct report *r, struct section *sec)
{
    const char *study = hr_study_of(r, "patching", -1);
    const char *abl = hr_info_text(r, "ablation");
    if (!study && strcmp(abl, "resample") != 0 && strcmp(abl, "denoise") != 0) {
        sec->not_applicable = true; /* patching is a question of prompt pairs: asked of a sweep patching them */
        return HP_OK;
    }
    if (!study) {
        hr_left_out(r, sec, "patching study",
                    "<code>- patching</code> in a plan with <code>ablation: resample</code> or <code>denoise</code> "
                    "over task rows of one template produces it (docs/tasks.md)");
        return HP_OK;
    }
    return draw_patching(r, sec, study);
}
