/*
 * report_curves.c -- the report's pruning curves (iterative studies, and
 * random ones with their 95% bands) and per-layer redundancy (three panels
 * of bars a layer).
 *
 * Part of the report family (report.h): a point is a row of
 * `query curve`, a bar a cell of `query redundancy`, drawn from its number
 * and labelled with its text. Must not: compute an effect or an interval
 * (the queries do), print, or exit.
 */
#define _POSIX_C_SOURCE 200809L

#include "report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

// --- pruning curves ---------------------------------------------------------------

struct series {
    int row0, n;   // its rows of the curve table
    bool random;
    const char *study, *rank;
};

// Each random study's 95% band (the upper edge left to right, the lower back) as a shaded path.
static void curves_bands(struct hp_text *sv, struct report *r, const struct hp_table *t, const struct series *sr,
                         int n_sr, const struct hp_scale *sx, const struct hp_scale *sy)
{
    const int c_pct = tcol(t, "pct_heads"), c_value = tcol(t, r->mname), c_lo = tcol(t, "ci_lo"),
              c_hi = tcol(t, "ci_hi");
    for (int k = 0; k < n_sr; k++) {
        if (!sr[k].random)
            continue;
        struct hp_text band = {0};
        int pts = 0;
        for (int pass = 0; pass < 2; pass++) // the upper edge left to right, the lower back
            for (int j = 0; j < sr[k].n; j++) {
                int i = pass == 0 ? sr[k].row0 + j : sr[k].row0 + sr[k].n - 1 - j;
                double x = tval(t, i, c_pct), v = tval(t, i, pass == 0 ? c_hi : c_lo);
                if (!isfinite(v))
                    v = tval(t, i, c_value); // k = 0 (the baseline) has no interval
                if (!isfinite(x) || !isfinite(v))
                    continue;
                hp_text_printf(&band, "%s%.2f %.2f", pts++ ? "L" : "M", hp_scale_map(sx, x), hp_scale_map(sy, v));
            }
        if (pts > 2 && band.s) {
            hp_text_add(sv, "<path class=\"band\" data-study=\"");
            hp_text_escape(sv, sr[k].study);
            hp_text_printf(sv, "\" d=\"%sz\" fill=\"%s\" fill-opacity=\"0.18\" stroke=\"none\"/>\n", band.s,
                           hp_color_category(k));
        }
        if (band.nomem)
            r->nomem = true;
        hp_text_free(&band);
    }
}

// Row i of `query curve` as a point's tooltip: the study, its step or k, the heads pruned and the value.
static void curve_point_title(struct hp_text *sv, const struct report *r, const struct hp_table *t,
                              const struct series *se, int i)
{
    const int c_step = tcol(t, "step"), c_k = tcol(t, "k"), c_heads = tcol(t, "heads"), c_pct = tcol(t, "pct_heads"),
              c_samples = tcol(t, "samples"), c_value = tcol(t, r->mname), c_lo = tcol(t, "ci_lo"),
              c_hi = tcol(t, "ci_hi"), c_eff = tcol(t, "effect"), c_pruned = tcol(t, "pruned");
    hp_text_add(sv, "><title>");
    hp_text_escape_cut(sv, se->study, 60);
    if (se->random) {
        hp_text_add(sv, ", k = ");
        hp_text_escape(sv, tcell(t, i, c_k));
    } else {
        hp_text_add(sv, ", step ");
        hp_text_escape(sv, tcell(t, i, c_step));
    }
    hp_text_add(sv, ": ");
    hp_text_escape(sv, tcell(t, i, c_heads));
    hp_text_add(sv, " heads pruned (");
    hp_text_escape(sv, tcell(t, i, c_pct));
    hp_text_printf(sv, "%%), %s ", r->mname);
    hp_text_escape(sv, tcell(t, i, c_value));
    if (*tcell(t, i, c_lo)) {
        hp_text_add(sv, " (mean of ");
        hp_text_escape(sv, tcell(t, i, c_samples));
        hp_text_add(sv, " draws; 95% CI ");
        hp_text_escape(sv, tcell(t, i, c_lo));
        hp_text_add(sv, " to ");
        hp_text_escape(sv, tcell(t, i, c_hi));
        hp_text_add(sv, ")");
    }
    if (*tcell(t, i, c_eff)) {
        hp_text_add(sv, ", effect ");
        hp_text_escape(sv, tcell(t, i, c_eff));
    }
    if (*tcell(t, i, c_pruned)) {
        hp_text_add(sv, "; pruned at this step: ");
        hp_text_escape_cut(sv, tcell(t, i, c_pruned), 200);
    }
    hp_text_add(sv, "</title></path>\n");
}

// The legend at (lx, ly0): a line and marker a series while they fit above H - 30, then the baseline.
static void curves_legend(struct hp_text *sv, const struct series *sr, int n_sr, int lx, double ly0, int H)
{
    double ly = ly0;
    hp_text_add(sv, "<g class=\"legend\" font-size=\"12\">\n");
    for (int k = 0; k < n_sr && ly < H - 30; k++, ly += 36) {
        const char *colour = hp_color_category(k);
        hp_text_printf(sv, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>",
                       lx, ly, lx + 26, ly, colour, sr[k].random ? " stroke-dasharray=\"6 3\"" : "");
        hp_svg_marker_open(sv, k, lx + 13, ly, 4);
        hp_text_printf(sv, " fill=\"%s\" stroke=\"#ffffff\"/><text x=\"%d\" y=\"%.1f\" dominant-baseline=\"middle\">",
                       colour, lx + 34, ly);
        hp_text_escape_cut(sv, sr[k].study, 30);
        hp_text_printf(sv, "</text>\n<text x=\"%d\" y=\"%.1f\" font-size=\"11\" fill=\"#555\" "
                           "dominant-baseline=\"middle\">%s</text>\n",
                       lx + 34, ly + 15,
                       sr[k].random                             ? "random heads, 95% band"
                       : strcmp(sr[k].rank, "gradient") == 0 ? "iterative, gradient-ranked"
                       : strcmp(sr[k].rank, "estimate") == 0 ? "iterative, estimate-ranked"
                                                               : "iterative, exact-ranked");
    }
    hp_text_printf(sv, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#555\" stroke-dasharray=\"2 3\"/>"
                       "<text x=\"%d\" y=\"%.1f\" dominant-baseline=\"middle\">baseline (nothing pruned)</text>\n</g>\n",
                   lx, ly, lx + 26, ly, lx + 34, ly);
}

enum hp_status hr_make_curves(struct report *r, struct section *sec)
{
    if (!hr_study_of(r, "iterative", -1) && !hr_study_of(r, "random", -1)) {
        hr_left_out(r, sec, "iterative or random study",
                 "<code>- iterative: {prune: 10%}</code> or <code>- random: {k: [4, 8], samples: 10}</code> in the "
                 "plan produces one");
        return HP_OK;
    }
    struct hp_query_opts q = {.kind = HP_QUERY_CURVE, .sweep_id = r->sweep};
    struct hp_table *t = NULL;
    enum hp_status s = hp_query_read(r->rd, &q, &t, r->err);
    if (s != HP_OK)
        return s;
    const int c_study = tcol(t, "study"), c_step = tcol(t, "step"), c_k = tcol(t, "k"), c_heads = tcol(t, "heads"),
              c_pct = tcol(t, "pct_heads"), c_samples = tcol(t, "samples"), c_value = tcol(t, r->mname),
              c_lo = tcol(t, "ci_lo"), c_hi = tcol(t, "ci_hi"), c_eff = tcol(t, "effect");
    struct series *sr = calloc((size_t)t->n_rows + 1, sizeof *sr);
    struct fig *f = sr ? hr_fig_new(r, "curves") : NULL;
    if (!f) {
        free(sr);
        hp_table_free(t);
        return hp_fail(r->err, HP_ERR_NOMEM, "report: out of memory");
    }
    int n_sr = 0;
    double xmax = 0, ylo = r->base, yhi = r->base;
    for (int i = 0; i < t->n_rows; i++) {
        const char *st = tcell(t, i, c_study);
        if (n_sr == 0 || strcmp(sr[n_sr - 1].study, st) != 0) {
            sr[n_sr] = (struct series){i, 0, *tcell(t, i, c_samples) != '\0', st, hr_study_rank(r, st)};
            n_sr++;
        }
        sr[n_sr - 1].n++;
        double x = tval(t, i, c_pct), vals[3] = {tval(t, i, c_value), tval(t, i, c_lo), tval(t, i, c_hi)};
        if (isfinite(x) && x > xmax)
            xmax = x;
        for (int k = 0; k < 3; k++)
            if (isfinite(vals[k])) {
                ylo = vals[k] < ylo ? vals[k] : ylo;
                yhi = vals[k] > yhi ? vals[k] : yhi;
            }
    }
    if (xmax > 100)
        xmax = 100;
    double xt[32], yt[32], xlo = 0;
    int nxt = hp_ticks(&xlo, &xmax, 8, xt, 32);
    int nyt = hp_ticks(&ylo, &yhi, 6, yt, 32);
    const int W = 900, H = 470, px0 = 80, px1 = 620, py0 = 56, py1 = 400;
    struct hp_scale sx = {xlo, xmax, px0, px1}, sy = {ylo, yhi, py1, py0};
    struct hp_text *sv = &f->svg;
    char b[32], b2[32], ylabel[96], xlabel[160], sub[300];
    snprintf(ylabel, sizeof ylabel, "%s (%s)", r->mname, r->unit);
    const double present = hr_info_num(r, "n_present");
    const int n_present = isfinite(present) ? (int)present : r->n_layers * r->n_heads;
    if (n_present == r->n_layers * r->n_heads)
        snprintf(xlabel, sizeof xlabel, "heads pruned (%% of the model's %d query heads)", n_present);
    else /* the rule every curve counts by: a head the checkpoint lacks is neither kept nor pruned */
        snprintf(xlabel, sizeof xlabel, "heads pruned (%% of the %d query heads the checkpoint has, of %d)", n_present,
                 r->n_layers * r->n_heads);
    snprintf(sub, sizeof sub, "sweep %lld; %s against the share of heads pruned (%s is better)", r->sweep, r->mname,
             hp_metric_sign(r->m) > 0 ? "lower" : "higher");
    hp_svg_open(sv, "fig-curves", W, H, "Pruning curves");
    hr_svg_heading(sv, W, "Pruning curves", sub);
    hp_svg_grid(sv, &sy, true, px0, px1, yt, nyt);
    hp_svg_grid(sv, &sx, false, py0, py1, xt, nxt);

    curves_bands(sv, r, t, sr, n_sr, &sx, &sy); // random studies' 95% bands first, under every line
    // the baseline
    double by = hp_scale_map(&sy, r->base);
    hp_text_printf(sv, "<line class=\"baseline\" x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"#555\" "
                       "stroke-dasharray=\"2 3\" data-value=\"%s\"><title>baseline (nothing pruned): %s %s</title>"
                       "</line>\n",
                   px0, by, px1, by, hp_num(b, r->base, 7), r->mname, hp_num(b2, r->base, 7));
    // lines and points
    for (int k = 0; k < n_sr; k++) {
        const char *colour = hp_color_category(k);
        hp_text_add(sv, "<g class=\"series\" data-study=\"");
        hp_text_escape(sv, sr[k].study);
        hp_text_printf(sv, "\" data-kind=\"%s\" data-rank=\"", sr[k].random ? "random" : "iterative");
        hp_text_escape(sv, sr[k].random ? "" : *sr[k].rank ? sr[k].rank : "exact");
        hp_text_printf(sv, "\">\n<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", colour,
                       sr[k].random ? " stroke-dasharray=\"6 3\"" : "");
        for (int j = 0; j < sr[k].n; j++) {
            int i = sr[k].row0 + j;
            double x = tval(t, i, c_pct), v = tval(t, i, c_value);
            if (isfinite(x) && isfinite(v))
                hp_text_printf(sv, "%.2f,%.2f ", hp_scale_map(&sx, x), hp_scale_map(&sy, v));
        }
        hp_text_add(sv, "\"/>\n");
        for (int j = 0; j < sr[k].n; j++) {
            int i = sr[k].row0 + j;
            double x = tval(t, i, c_pct), v = tval(t, i, c_value);
            if (!isfinite(x) || !isfinite(v))
                continue;
            hp_svg_marker_open(sv, k, hp_scale_map(&sx, x), hp_scale_map(&sy, v), 4);
            hp_text_printf(sv, " class=\"point\" fill=\"%s\" stroke=\"#ffffff\" stroke-width=\"0.8\"", colour);
            hr_attr_cell(sv, "data-step", t, i, c_step);
            hr_attr_cell(sv, "data-k", t, i, c_k);
            hr_attr_cell(sv, "data-heads", t, i, c_heads);
            hr_attr_cell(sv, "data-pct", t, i, c_pct);
            hr_attr_cell(sv, "data-samples", t, i, c_samples);
            hr_attr_cell(sv, "data-value", t, i, c_value);
            hr_attr_cell(sv, "data-ci-lo", t, i, c_lo);
            hr_attr_cell(sv, "data-ci-hi", t, i, c_hi);
            hr_attr_cell(sv, "data-effect", t, i, c_eff);
            curve_point_title(sv, r, t, &sr[k], i);
        }
        hp_text_add(sv, "</g>\n");
    }
    hp_svg_axis(sv, &sy, true, px0, yt, nyt, 4, ylabel, 58);
    hp_svg_axis(sv, &sx, false, py1, xt, nxt, 3, xlabel, 40);

    curves_legend(sv, sr, n_sr, px1 + 24, py0 + 6, H);
    hp_svg_close(sv);

    struct hp_text *c = &sec->caption;
    hp_text_printf(c, "<p>The sweep's %s as heads are pruned: iterative studies (solid) prune, step by step, the "
                      "heads whose removal hurts least (exact-ranked: by measuring each; gradient-ranked: by "
                      "Michel et al.'s importance; estimate-ranked: by one estimate of each head's effect, made "
                      "where the curve starts); random studies (dashed) prune k heads drawn at random, their "
                      "mean with its 95%% interval as a band. The dotted line is the baseline, %s %s.</p>\n",
                   r->mname, r->mname, hp_num(b, r->base, 7));
    hr_caption_source(c, r, "curve", NULL, t);
    free(sr);
    hp_table_free(t);
    return HP_OK;
}

// --- per-layer redundancy ----------------------------------------------------------

/*
 * Bar i of panel k (column c of `query redundancy`; title: the panel's) ends
 * at vx, its top at y, rh - 6 px high: its tooltip, closing the bar, then
 * its value beyond its end, for reading without hovering.
 */
static void redundancy_bar_text(struct hp_text *sv, const struct report *r, const struct hp_table *t, int k, int i,
                                int c, const char *title, const char *eps, double vx, double y, int rh)
{
    const int c_layer = tcol(t, "layer"), c_units = tcol(t, "units"), c_only_unit = tcol(t, "only_unit");
    const double v = tval(t, i, c);
    char b[32];
    hp_text_printf(sv, "><title>layer %d: ", tint(t, i, c_layer));
    if (k == 0) {
        hp_text_escape(sv, tcell(t, i, c));
        hp_text_add(sv, " of ");
        hp_text_escape(sv, tcell(t, i, c_units));
        hp_text_printf(sv, " units cost less than %s alone", eps);
    } else {
        hp_text_escape(sv, title);
        hp_text_add(sv, ": effect ");
        hp_text_escape(sv, tcell(t, i, c));
        hp_text_printf(sv, " %s", r->unit);
        if (k == 2 && *tcell(t, i, c_only_unit)) {
            hp_text_add(sv, " (kept: ");
            hp_text_escape(sv, tcell(t, i, c_only_unit));
            hp_text_add(sv, ")");
        }
    }
    hp_text_add(sv, "</title></rect>\n");
    // its value beyond the bar's end, for reading without hovering
    hp_text_printf(sv, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"#333\" dominant-baseline=\"middle\" "
                       "text-anchor=\"%s\" pointer-events=\"none\">",
                   v < 0 ? vx - 3 : vx + 3, y + (rh - 6) / 2.0, v < 0 ? "end" : "start");
    if (k == 0) {
        hp_text_escape(sv, tcell(t, i, c));
        hp_text_add(sv, "/");
        hp_text_escape(sv, tcell(t, i, c_units));
    } else {
        hp_text_add(sv, hp_num(b, v, 3));
        if (k == 2 && *tcell(t, i, c_only_unit)) {
            hp_text_add(sv, " (");
            hp_text_escape_cut(sv, tcell(t, i, c_only_unit), 12);
            hp_text_add(sv, ")");
        }
    }
    hp_text_add(sv, "</text>\n");
}

enum hp_status hr_make_redundancy(struct report *r, struct section *sec)
{
    const char *single = hr_study_of(r, "single", -1), *only = hr_study_of(r, "only", -1), *layer = hr_study_of(r, "layer", -1);
    if (!single && !only && !layer) {
        hr_left_out(r, sec, "single, only or layer study",
                 "<code>- single</code>, <code>- only</code> and <code>- layer</code> in the plan produce it");
        return HP_OK;
    }
    struct hp_query_opts q = {.kind = HP_QUERY_REDUNDANCY, .sweep_id = r->sweep, .eps = r->o->eps};
    struct hp_table *t = NULL;
    enum hp_status s = hp_query_read(r->rd, &q, &t, r->err);
    if (s != HP_OK)
        return s;
    if (t->n_rows > MAX_ROWS) {
        hp_text_printf(&sec->note, "Left out: %d layers are too many to draw (at most %d); <code>headprune query "
                                   "redundancy</code> lists them.", t->n_rows, MAX_ROWS);
        hp_table_free(t);
        return HP_OK;
    }
    struct fig *f = hr_fig_new(r, "redundancy");
    if (!f) {
        hp_table_free(t);
        return hp_fail(r->err, HP_ERR_NOMEM, "report: out of memory");
    }
    const int c_layer = tcol(t, "layer"), c_units = tcol(t, "units"), c_only_unit = tcol(t, "only_unit");
    char eps[32];
    hp_num(eps, r->o->eps, 3);
    struct panel {
        const char *col, *title, *unit, *absent;
        bool count;
    } panels[3] = {
        {"below_eps", "units that cost less than eps alone", "count of units", "no single study", true},
        {"layer_effect", "removing the layer's attention", "effect", "no layer study", false},
        {"only_effect", "keeping only the layer's best unit", "effect", "no only study", false},
    };
    char titles[3][96], units[3][96];
    snprintf(titles[0], sizeof titles[0], "units with effect < %s alone", eps);
    for (int k = 0; k < 3; k++) {
        if (k > 0)
            snprintf(titles[k], sizeof titles[k], "%s", panels[k].title);
        if (panels[k].count)
            snprintf(units[k], sizeof units[k], "%s", panels[k].unit);
        else
            snprintf(units[k], sizeof units[k], "effect (%s)", r->unit);
    }
    const int n_rows = t->n_rows;
    int rh = n_rows ? 320 / n_rows : 26;
    rh = rh < 14 ? 14 : rh > 28 ? 28 : rh;
    const int left = 70, top = 72, pw = 250, gap = 34, W = left + 3 * pw + 2 * gap + 20, H = top + n_rows * rh + 64;
    struct hp_text *sv = &f->svg;
    char sub[300];
    snprintf(sub, sizeof sub, "sweep %lld; per layer, side by side; %s", r->sweep, hp_metric_effect_text(r->m));
    hp_svg_open(sv, "fig-redundancy", W, H, "Redundancy per layer");
    hr_svg_heading(sv, W, "Redundancy per layer", sub);
    hp_text_add(sv, "<g class=\"ticks\" font-size=\"11\" fill=\"#444\">\n");
    for (int i = 0; i < n_rows; i++)
        hp_text_printf(sv, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" dominant-baseline=\"middle\">layer %d</text>\n",
                       left - 8, top + (i + 0.5) * rh, tint(t, i, c_layer));
    hp_text_add(sv, "</g>\n");
    for (int k = 0; k < 3; k++) {
        const int c = tcol(t, panels[k].col), x0 = left + k * (pw + gap);
        double lo = 0, hi = 0;
        bool any = false;
        for (int i = 0; i < n_rows; i++) {
            double v = tval(t, i, c);
            if (panels[k].count) {
                double u = tval(t, i, c_units);
                hi = isfinite(u) && u > hi ? u : hi;
            }
            if (isfinite(v)) {
                any = true;
                lo = v < lo ? v : lo;
                hi = v > hi ? v : hi;
            }
        }
        hp_text_printf(sv, "<text class=\"panel-title\" x=\"%d\" y=\"%d\" font-weight=\"600\">", x0, top - 14);
        hp_text_escape(sv, titles[k]);
        hp_text_add(sv, "</text>\n");
        if (!any) {
            hp_text_printf(sv, "<text class=\"absent\" x=\"%d\" y=\"%.1f\" fill=\"#777\" font-style=\"italic\">%s "
                               "in this sweep</text>\n",
                           x0, top + 16.0, panels[k].absent);
            continue;
        }
        // room beyond the longest bars for their labels
        double span = hi - lo > 0 ? hi - lo : 1;
        hi += hi > 0 && !panels[k].count ? 0.3 * span : 0; // a count's label fits in the gap after the panel
        lo -= lo < 0 ? 0.3 * span : 0;
        double ticks[32];
        int nt = hp_ticks(&lo, &hi, 4, ticks, 32);
        struct hp_scale sx = {lo, hi, x0, x0 + pw};
        hp_svg_grid(sv, &sx, false, top, top + n_rows * rh, ticks, nt);
        double zx = hp_scale_map(&sx, 0);
        hp_text_printf(sv, "<g class=\"bars\" data-panel=\"%s\">\n", panels[k].col);
        for (int i = 0; i < n_rows; i++) {
            double v = tval(t, i, c);
            if (!isfinite(v))
                continue;
            double vx = hp_scale_map(&sx, v), y = top + i * rh + 3;
            hp_text_printf(sv, "<rect class=\"bar\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" fill=\"%s\" "
                               "data-layer=\"%d\" data-panel=\"%s\"",
                           vx < zx ? vx : zx, y, fabs(vx - zx) < 0.5 ? 0.5 : fabs(vx - zx), rh - 6,
                           hp_color_category(k), tint(t, i, c_layer), panels[k].col);
            hr_attr_cell(sv, "data-value", t, i, c);
            if (k == 0)
                hr_attr_cell(sv, "data-units", t, i, c_units);
            if (k == 2)
                hr_attr_cell(sv, "data-only-unit", t, i, c_only_unit);
            redundancy_bar_text(sv, r, t, k, i, c, titles[k], eps, vx, y, rh);
        }
        hp_text_add(sv, "</g>\n");
        hp_text_printf(sv, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#444\"/>\n", zx, top, zx,
                       top + n_rows * rh);
        hp_svg_axis(sv, &sx, false, top + n_rows * rh, ticks, nt, 3, units[k], 38);
    }
    hp_svg_close(sv);

    struct hp_text *c = &sec->caption;
    hp_text_printf(c, "<p>Per layer, side by side: how many of its units (heads, or KV groups for a KV study) cost "
                      "less than %s alone (of a single study; large: the layer has spare heads); the effect of "
                      "removing the layer's attention whole (a layer study); and the effect of keeping only its "
                      "best unit (an only study; small: one head does the layer's job). %s.</p>\n",
                   eps, hp_metric_effect_text(r->m));
    hr_caption_source(c, r, "redundancy", NULL, t);
    hp_table_free(t);
    return HP_OK;
}

