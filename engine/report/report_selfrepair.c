/*
 * report_selfrepair.c -- direct against total effects: one scatter a direct
 * study (`query self-repair`), each unit's total effect (x: the unit
 * ablated) against its direct effect (y: only its edges into the logits
 * patched), on one scale with the diagonal where they agree. A unit above the
 * diagonal writes more straight to the output than it costs when removed:
 * later layers make up the difference (self-repair). Points coloured by
 * layer; the units with the largest compensation either way labelled.
 *
 * Must not: compute effects itself (the query does), print.
 */
#include "report.h"

#include "util.h" /* hp_fail */

#include <stdio.h>
#include <stdlib.h>

/* Labelled points a panel: the largest |compensation|. */
#define SR_LABELS 4

struct sr_panel {
    const struct hp_table *t; /* its study's `query self-repair` */
    const char *study;
};

static void points(struct hp_text *sv, const struct report *r, const struct hp_table *t, const struct hp_scale *sx,
                   const struct hp_scale *sy)
{
    const int c_u = tcol(t, "unit"), c_l = tcol(t, "layer"), c_t = tcol(t, "total"), c_d = tcol(t, "direct"),
              c_c = tcol(t, "compensation");
    for (int i = 0; i < t->n_rows; i++) {
        const double x = tval(t, i, c_t), y = tval(t, i, c_d);
        if (!isfinite(x) || !isfinite(y))
            continue;
        hr_point_open(sv, r, tint(t, i, c_l), hp_scale_map(sx, x), hp_scale_map(sy, y));
        hr_attr_cell(sv, "data-label", t, i, c_u);
        hr_attr_cell(sv, "data-total", t, i, c_t);
        hr_attr_cell(sv, "data-direct", t, i, c_d);
        hp_text_add(sv, "><title>");
        hp_text_escape(sv, tcell(t, i, c_u));
        hp_text_add(sv, ": total ");
        hp_text_escape(sv, tcell(t, i, c_t));
        hp_text_add(sv, ", direct ");
        hp_text_escape(sv, tcell(t, i, c_d));
        hp_text_add(sv, ", compensation ");
        hp_text_escape(sv, tcell(t, i, c_c));
        hp_text_printf(sv, " %s</title></path>\n", r->unit);
    }
    hp_text_add(sv, "<g class=\"point-labels\" font-size=\"10\" fill=\"#222\">\n");
    for (int i = 0; i < t->n_rows; i++) {
        const double x = tval(t, i, c_t), y = tval(t, i, c_d);
        if (!isfinite(x) || !isfinite(y) || !hr_among_largest(t, 0, t->n_rows, i, SR_LABELS, c_c, true))
            continue;
        const double px = hp_scale_map(sx, x), py = hp_scale_map(sy, y);
        const bool left = px > fmax(sx->r0, sx->r1) - 28;
        hp_text_printf(sv, "<text class=\"point-label\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\">", left ? px - 6 : px + 6,
                       py - 4, left ? "end" : "start");
        hp_text_escape(sv, tcell(t, i, c_u));
        hp_text_add(sv, "</text>\n");
    }
    hp_text_add(sv, "</g>\n");
}

static enum hp_status draw(struct report *r, struct section *sec, const struct sr_panel *pn, int n_p)
{
    struct fig *f = hr_fig_new(r, "self-repair");
    if (!f)
        return hp_fail(r->err, HP_ERR_NOMEM, "report: out of memory");
    const int n_cols = n_p < 3 ? n_p : 3, n_rows = (n_p + n_cols - 1) / n_cols;
    const int cw = 280, ch = 270, pw = 190, ph = 190, top = 80;
    int W = 12 + n_cols * cw + 8, H = top + n_rows * ch + 6;
    W = W < 560 ? 560 : W;
    struct hp_text *sv = &f->svg;
    char sub[200];
    snprintf(sub, sizeof sub, "sweep %lld: each unit's total effect (x) and direct effect (y), %s", r->sweep,
             hp_metric_effect_text(r->m));
    hp_svg_open(sv, "fig-self-repair", W, H, "Direct against total effects");
    hr_svg_heading(sv, W, "Direct against total effects", sub);
    hr_layer_legend(sv, r->n_layers);
    for (int k = 0; k < n_p; k++) {
        const struct hp_table *t = pn[k].t;
        const int c_t = tcol(t, "total"), c_d = tcol(t, "direct");
        double lo = 0, hi = 0, tk[32];
        for (int i = 0; i < t->n_rows; i++) /* one scale for both axes, 0 included: the diagonal at 45 degrees */
            for (int c = 0; c < 2; c++) {
                const double v = tval(t, i, c ? c_d : c_t);
                if (isfinite(v))
                    lo = fmin(lo, v), hi = fmax(hi, v);
            }
        if (hi <= lo)
            hi = lo + 1;
        const int nt = hp_ticks(&lo, &hi, 4, tk, 32);
        const int x0 = 12 + (k % n_cols) * cw + 66, y0 = top + (k / n_cols) * ch + 36;
        const struct hp_scale sx = {lo, hi, x0, x0 + pw}, sy = {lo, hi, y0 + ph, y0};
        hp_text_add(sv, "<g class=\"self-repair-panel\" data-study=\"");
        hp_text_escape(sv, pn[k].study);
        hp_text_printf(sv, "\" data-points=\"%d\">\n", t->n_rows);
        hp_text_printf(sv, "<text class=\"panel-title\" x=\"%d\" y=\"%d\" font-weight=\"600\">", x0 - 54, y0 - 14);
        hp_text_escape_cut(sv, pn[k].study, 32);
        hp_text_add(sv, "</text>\n");
        hp_svg_grid(sv, &sx, false, y0, y0 + ph, tk, nt);
        hp_svg_grid(sv, &sy, true, x0, x0 + pw, tk, nt);
        hp_text_printf(sv, "<line class=\"diagonal\" x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#888\" "
                           "stroke-dasharray=\"3 3\"/>\n", hp_scale_map(&sx, lo), hp_scale_map(&sy, lo),
                       hp_scale_map(&sx, hi), hp_scale_map(&sy, hi));
        points(sv, r, t, &sx, &sy);
        hp_svg_axis(sv, &sy, true, x0, tk, nt, 3, "direct effect", 44);
        hp_svg_axis(sv, &sx, false, y0 + ph, tk, nt, 3, "total effect", 36);
        hp_text_add(sv, "</g>\n");
    }
    hp_svg_close(sv);
    hp_text_printf(&sec->caption,
                   "<p>Each panel: one direct study, a point a unit coloured by its layer: its total effect (x: the "
                   "unit ablated, every reader after it loses it) against its direct effect (y: only its edges into "
                   "the logits patched, its output still reaching every later head and MLP), %s. On the dashed "
                   "diagonal the two agree; above it the unit writes more straight to the output than its removal "
                   "costs, because later layers make up the difference (self-repair); below it its loss grows "
                   "through later layers. Labelled: the %d units with the largest compensation either way; hover any "
                   "point for its numbers.</p>\n",
                   hp_metric_effect_text(r->m), SR_LABELS);
    for (int k = 0; k < n_p; k++)
        hr_caption_source(&sec->caption, r, "self-repair", pn[k].study, pn[k].t);
    return HP_OK;
}

enum hp_status hr_make_self_repair(struct report *r, struct section *sec)
{
    if (!hr_study_of(r, "direct", -1)) {
        hr_left_out(r, sec, "direct study",
                    "<code>- direct</code> in the plan measures each unit's total and direct effect (docs/edges.md)");
        return HP_OK;
    }
    enum { MAX_PANELS = 12 };
    struct hp_table *tabs[MAX_PANELS] = {0};
    struct sr_panel pn[MAX_PANELS];
    int n_p = 0;
    enum hp_status s = HP_OK;
    const int ck = tcol(r->studies, "kind"), cs = tcol(r->studies, "study");
    for (int i = 0; i < r->studies->n_rows && n_p < MAX_PANELS && s == HP_OK; i++) {
        if (strcmp(tcell(r->studies, i, ck), "direct") != 0)
            continue;
        const struct hp_query_opts q = {.kind = HP_QUERY_SELF_REPAIR, .sweep_id = r->sweep,
                                        .study = tcell(r->studies, i, cs)};
        if ((s = hp_query_read(r->rd, &q, &tabs[n_p], r->err)) != HP_OK)
            break;
        if (tabs[n_p]->n_rows == 0 || tabs[n_p]->n_rows > MAX_CELLS) {
            hp_table_free(tabs[n_p]);
            tabs[n_p] = NULL;
            continue;
        }
        pn[n_p] = (struct sr_panel){tabs[n_p], tcell(r->studies, i, cs)};
        n_p++;
    }
    if (s == HP_OK && n_p > 0)
        s = draw(r, sec, pn, n_p);
    else if (s == HP_OK)
        hp_text_add(&sec->note, "Left out: the direct studies have no units with results yet.");
    for (int i = 0; i < n_p; i++)
        hp_table_free(tabs[i]);
    return s;
}
