/*
 * report_estimates.c -- estimates against exact effects: one small scatter a
 * attribution study (an estimator) of `query attribution`, each unit's rank
 * by its exact single-unit effect (x) against its rank by the estimate (y),
 * the diagonal where they agree, points coloured by layer, the most wrongly
 * ranked units and the largest effects labelled, and the study's Spearman
 * rho, Kendall tau and top-k overlap from the query's summary row.
 *
 * Ranks, not values: effects are heavy-tailed (a head at 1.85 nats beside
 * dozens under 0.01) and estimates of another scale (importance is a size),
 * so values would crowd every unit but a few into one corner; ranks are
 * what rho is of, and what a screen or a ranking uses.
 *
 * Must not: compute ranks or correlations itself (the query does), print.
 */
#include "report.h"

#include "util.h" /* hp_fail */

#include <stdio.h>
#include <stdlib.h>

/* Labelled points a panel: the most wrongly ranked, and the largest exact effects. */
#define EST_WORST 3
#define EST_TOP 2

struct panel {
    const struct hp_table *t; /* its study's `query attribution` */
    const char *study;
    int first, n;  /* its unit rows in the table (the query lists a study's rows together) */
    int summary;   /* its "all" row, -1 none */
};

static void points(struct hp_text *sv, const struct report *r, const struct hp_table *t, const struct panel *p,
                   const struct hp_scale *sx, const struct hp_scale *sy)
{
    const int c_l = tcol(t, "layer"), c_lab = tcol(t, "label"), c_rx = tcol(t, "rank_exact"),
              c_re = tcol(t, "rank_est"), c_est = tcol(t, "estimate"), c_ex = tcol(t, "exact");
    for (int i = p->first; i < p->first + p->n; i++) {
        const double x = tval(t, i, c_rx), y = tval(t, i, c_re);
        if (!isfinite(x) || !isfinite(y))
            continue;
        hr_point_open(sv, r, tint(t, i, c_l), hp_scale_map(sx, x), hp_scale_map(sy, y));
        hr_attr_cell(sv, "data-label", t, i, c_lab);
        hr_attr_cell(sv, "data-estimate", t, i, c_est);
        hr_attr_cell(sv, "data-exact", t, i, c_ex);
        hp_text_add(sv, "><title>");
        hp_text_escape(sv, tcell(t, i, c_lab));
        hp_text_add(sv, ": exact ");
        hp_text_escape(sv, tcell(t, i, c_ex));
        hp_text_printf(sv, " %s (rank ", r->unit);
        hp_text_escape(sv, tcell(t, i, c_rx));
        hp_text_add(sv, "), estimate ");
        hp_text_escape(sv, tcell(t, i, c_est));
        hp_text_add(sv, " (rank ");
        hp_text_escape(sv, tcell(t, i, c_re));
        hp_text_add(sv, ")</title></path>\n");
    }
}

static void labels(struct hp_text *sv, const struct hp_table *t, const struct panel *p, const struct hp_scale *sx,
                   const struct hp_scale *sy)
{
    const int c_lab = tcol(t, "label"), c_rx = tcol(t, "rank_exact"), c_re = tcol(t, "rank_est"),
              c_d = tcol(t, "rank_diff");
    hp_text_add(sv, "<g class=\"point-labels\" font-size=\"10\" fill=\"#222\">\n");
    for (int i = p->first; i < p->first + p->n; i++) {
        const double x = tval(t, i, c_rx), y = tval(t, i, c_re);
        if (!isfinite(x) || !isfinite(y) ||
            !(hr_among_largest(t, p->first, p->n, i, EST_WORST, c_d, true) ||
              hr_among_largest(t, p->first, p->n, i, EST_TOP, c_rx, false)))
            continue;
        const double px = hp_scale_map(sx, x), py = hp_scale_map(sy, y);
        const bool left = px > fmax(sx->r0, sx->r1) - 28;
        hp_text_printf(sv, "<text class=\"point-label\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"",
                       left ? px - 6 : px + 6, py - 4, left ? "end" : "start");
        hr_attr_cell(sv, "data-label", t, i, c_lab);
        hp_text_add(sv, ">");
        hp_text_escape(sv, tcell(t, i, c_lab));
        hp_text_add(sv, "</text>\n");
    }
    hp_text_add(sv, "</g>\n");
}

static void caption(struct hp_text *cp, const struct report *r, int n_p, const struct panel *pn)
{
    hp_text_printf(cp, "<p>Each panel: one attribution study (an estimator) of every unit, its rank by the exact "
                       "effect of ablating it alone (x; 1 = the largest, %s) against its rank by the estimate (y), "
                       "a point a unit coloured by its layer; on the dashed diagonal the two agree. Its caption "
                       "gives Spearman's rho, Kendall's tau-b and the top-k overlap (k = a tenth of the units) as "
                       "the query's summary row has them. Labelled: the %d units ranked most wrongly and the %d "
                       "largest effects; hover any point for its numbers. Ranks, not values: the effects are "
                       "heavy-tailed and the estimators of other scales (importance is a size).</p>\n",
                   hp_metric_effect_text(r->m), EST_WORST, EST_TOP);
    for (int k = 0; k < n_p; k++)
        if (k == 0 || pn[k].t != pn[k - 1].t)
            hr_caption_source(cp, r, "attribution", pn[k].study, pn[k].t);
}

/* The panels of table t (one study's `query attribution`: its unit rows, then its summary row) into pn. */
static int add_panels(const struct hp_table *t, struct panel *pn, int n_p, int cap)
{
    const int c_s = tcol(t, "study"), c_lab = tcol(t, "label");
    for (int i = 0; i < t->n_rows; i++) {
        const char *s = tcell(t, i, c_s);
        const bool all = i >= t->n_rows - t->n_summary && strcmp(tcell(t, i, c_lab), "all") == 0;
        int k = 0;
        while (k < n_p && !(pn[k].t == t && strcmp(pn[k].study, s) == 0))
            k++;
        if (k == n_p) {
            if (n_p == cap)
                continue;
            pn[n_p++] = (struct panel){.t = t, .study = s, .first = i, .summary = -1};
        }
        if (all)
            pn[k].summary = i;
        else
            pn[k].n = i - pn[k].first + 1;
    }
    return n_p;
}

static enum hp_status draw(struct report *r, struct section *sec, struct panel *pn, int n_p)
{
    int units = 0;
    for (int k = 0; k < n_p; k++)
        units = pn[k].n > units ? pn[k].n : units;
    if (units == 0 || units > MAX_CELLS) {
        hp_text_printf(&sec->note, "Left out: %d units are %s to draw (<code>headprune query attribution --format "
                                   "csv</code> lists them).", units, units ? "too many" : "none");
        return HP_OK;
    }
    struct fig *f = hr_fig_new(r, "estimates");
    if (!f)
        return hp_fail(r->err, HP_ERR_NOMEM, "report: out of memory");
    const int n_cols = n_p < 4 ? n_p : 4, n_rows = (n_p + n_cols - 1) / n_cols;
    const int cw = 250, ch = 250, pw = 170, ph = 170, top = 80;
    int W = 12 + n_cols * cw + 8, H = top + n_rows * ch + 6;
    W = W < 560 ? 560 : W;
    struct hp_text *sv = &f->svg;
    char sub[200];
    snprintf(sub, sizeof sub, "sweep %lld: each unit's rank by its exact effect (x) and by the estimate (y)",
             r->sweep);
    hp_svg_open(sv, "fig-estimates", W, H, "Estimates against exact effects");
    hr_svg_heading(sv, W, "Estimates against exact effects", sub);
    hr_layer_legend(sv, r->n_layers);
    for (int k = 0; k < n_p; k++) {
        const struct panel *p = &pn[k];
        const struct hp_table *t = p->t;
        const int c_rho = tcol(t, "rho"), c_tau = tcol(t, "tau"), c_ov = tcol(t, "top_k_overlap"),
                  c_e = tcol(t, "estimator");
        const int x0 = 12 + (k % n_cols) * cw + 62, y0 = top + (k / n_cols) * ch + 40;
        double lo = 1, hi = p->n > 1 ? p->n : 2, tk[32];
        const int nt = hp_ticks(&lo, &hi, 4, tk, 32);
        const struct hp_scale sx = {lo, hi, x0, x0 + pw}, sy = {lo, hi, y0, y0 + ph}; /* rank 1 top left */
        hp_text_add(sv, "<g class=\"estimate-panel\" data-study=\"");
        hp_text_escape(sv, p->study);
        hp_text_printf(sv, "\" data-points=\"%d\"", p->n);
        hr_attr_cell(sv, "data-rho", t, p->summary, c_rho);
        hp_text_add(sv, ">\n");
        hp_text_printf(sv, "<text class=\"panel-title\" x=\"%d\" y=\"%d\" font-weight=\"600\">", x0 - 50, y0 - 24);
        hp_text_escape_cut(sv, p->study, 28);
        if (*tcell(t, p->summary, c_e)) {
            hp_text_add(sv, " (");
            hp_text_escape(sv, tcell(t, p->summary, c_e));
            hp_text_add(sv, ")");
        }
        hp_text_printf(sv, "</text>\n<text class=\"rho\" x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#444\">", x0 - 50,
                       y0 - 9);
        if (p->summary >= 0 && *tcell(t, p->summary, c_rho)) {
            hp_text_add(sv, "rho ");
            hp_text_escape(sv, tcell(t, p->summary, c_rho));
            hp_text_add(sv, ", tau ");
            hp_text_escape(sv, tcell(t, p->summary, c_tau));
            hp_text_add(sv, ", top-k ");
            hp_text_escape(sv, tcell(t, p->summary, c_ov));
        } else {
            hp_text_printf(sv, "%d units; rank correlation undefined", p->n);
        }
        hp_text_add(sv, "</text>\n");
        hp_svg_grid(sv, &sx, false, y0, y0 + ph, tk, nt);
        hp_svg_grid(sv, &sy, true, x0, x0 + pw, tk, nt);
        hp_text_printf(sv, "<line class=\"diagonal\" x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#888\" "
                           "stroke-dasharray=\"3 3\"/>\n", hp_scale_map(&sx, 1), hp_scale_map(&sy, 1),
                       hp_scale_map(&sx, p->n), hp_scale_map(&sy, p->n));
        points(sv, r, t, p, &sx, &sy);
        labels(sv, t, p, &sx, &sy);
        hp_svg_axis(sv, &sy, true, x0, tk, nt, 3, "rank by estimate", 40);
        hp_svg_axis(sv, &sx, false, y0 + ph, tk, nt, 3, "rank by exact effect", 36);
        hp_text_add(sv, "</g>\n");
    }
    hp_svg_close(sv);
    caption(&sec->caption, r, n_p, pn);
    return HP_OK;
}

enum hp_status hr_make_estimates(struct report *r, struct section *sec)
{
    if (!hr_study_of(r, "attribution", -1)) {
        hr_left_out(r, sec, "attribution study",
                    "<code>- attribution: {estimator: importance}</code> beside a <code>single</code> study in the "
                    "plan estimates every unit's effect from a gradient, drawn here against the exact effects");
        return HP_OK;
    }
    if (!hr_study_of(r, "single", -1)) {
        hr_left_out(r, sec, "single study to set its attribution studies against",
                    "<code>- single</code> in the plan measures every unit's exact effect");
        return HP_OK;
    }
    /* each attribution study against the single study over its units (`query attribution --study NAME`) */
    enum { MAX_PANELS = 64 };
    struct hp_table *tabs[MAX_PANELS] = {0};
    struct panel pn[MAX_PANELS];
    int n_t = 0, n_p = 0;
    enum hp_status s = HP_OK;
    const int ck = tcol(r->studies, "kind"), cs = tcol(r->studies, "study");
    for (int i = 0; i < r->studies->n_rows && n_t < MAX_PANELS && s == HP_OK; i++) {
        if (strcmp(tcell(r->studies, i, ck), "attribution") != 0)
            continue;
        const struct hp_query_opts q = {.kind = HP_QUERY_ATTRIBUTION, .sweep_id = r->sweep,
                                        .study = tcell(r->studies, i, cs)};
        s = hp_query_read(r->rd, &q, &tabs[n_t], r->err);
        if (s == HP_ERR_ARG) { /* the query's own reason (a study from a mask, no single study of its units) */
            if (sec->note.n == 0)
                hp_text_add(&sec->note, "Not drawn: ");
            else
                hp_text_add(&sec->note, "; ");
            hp_text_escape(&sec->note, r->err->msg);
            r->err->msg[0] = 0;
            s = HP_OK;
            continue;
        }
        if (s == HP_OK)
            n_p = add_panels(tabs[n_t++], pn, n_p, MAX_PANELS);
    }
    if (s == HP_OK && n_p > 0) {
        struct hp_text why = sec->note; /* the studies left out go under the figure, not instead of it */
        sec->note = (struct hp_text){0};
        s = draw(r, sec, pn, n_p);
        if (why.n) {
            hp_text_add(&sec->caption, "<p class=\"note\">");
            hp_text_add(&sec->caption, why.s);
            hp_text_add(&sec->caption, ".</p>\n");
        }
        hp_text_free(&why);
    } else if (s == HP_OK) {
        hp_text_add(&sec->note, ".");
    }
    for (int i = 0; i < n_t; i++)
        hp_table_free(tabs[i]);
    return s;
}
