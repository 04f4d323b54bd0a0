/*
 * report_circuit.c -- circuits: for each circuit study, its faithfulness curve (`query circuit`: f against the
 * fraction of the graph's edges kept, the dashed lines f = 0 and f = 1, CPR and CMD in the panel's title) beside
 * its strongest edges drawn as a graph (`query edges --study NAME --top CIRCUIT_EDGES`): the embeddings at the
 * bottom, each layer's heads on a row above the last and its MLP at the row's right end, the logits at the top;
 * an edge a line from its sender to its receiver, its width the size of its effect patched alone, red where
 * patching it raises the metric's damage, blue where it lowers it.
 *
 * Must not: compute effects or faithfulness itself (the queries do), print.
 */
#include "report.h"

#include "util.h" /* hp_fail */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Edges drawn a graph: the strongest. */
#define CIRCUIT_EDGES 50

/* Where node text t ("emb", "logits", "mlp:L", "L.H" or "L.H:c") sits in the graph: x, y. */
static bool node_at(const struct report *r, const char *t, double x0, double y0, double w, double h, double *x,
                    double *y)
{
    const int L = r->n_layers, H = r->n_heads > 0 ? r->n_heads : 1;
    const double row = h / (L + 1), col = w / (H + 1);
    int l, u;
    if (!strcmp(t, "emb"))
        return *x = x0 + w / 2, *y = y0 + h, true;
    if (!strcmp(t, "logits"))
        return *x = x0 + w / 2, *y = y0, true;
    if (sscanf(t, "mlp:%d", &l) == 1 && l >= 0 && l < L)
        return *x = x0 + H * col + col / 2, *y = y0 + h - (l + 1) * row + row / 4, true;
    if (sscanf(t, "%d.%d", &l, &u) == 2 && l >= 0 && l < L && u >= 0 && u < H)
        return *x = x0 + u * col + col / 2, *y = y0 + h - (l + 1) * row, true;
    return false;
}

static void draw_graph(struct hp_text *sv, const struct report *r, const struct hp_table *t, double x0, double y0,
                       double w, double h)
{
    const int c_e = tcol(t, "edge"), c_s = tcol(t, "sender"), c_r = tcol(t, "receiver"), c_f = tcol(t, "effect");
    double big = 0;
    for (int i = 0; i < t->n_rows; i++)
        big = fmax(big, fabs(tval(t, i, c_f)));
    /* the nodes: every head, MLP, the embeddings and the logits, light */
    hp_text_add(sv, "<g class=\"circuit-nodes\" fill=\"#ddd\" stroke=\"#999\" stroke-width=\"0.5\">\n");
    char name[32];
    for (int l = -1; l <= r->n_layers; l++)
        for (int u = 0; u <= (l < 0 || l == r->n_layers ? 0 : r->n_heads); u++) {
            if (l < 0)
                snprintf(name, sizeof name, "emb");
            else if (l == r->n_layers)
                snprintf(name, sizeof name, "logits");
            else if (u == r->n_heads)
                snprintf(name, sizeof name, "mlp:%d", l);
            else
                snprintf(name, sizeof name, "%d.%d", l, u);
            double x, y;
            if (node_at(r, name, x0, y0, w, h, &x, &y))
                hp_text_printf(sv, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\"><title>%s</title></circle>\n", x, y,
                               u == r->n_heads || l < 0 || l == r->n_layers ? 4.0 : 2.5, name);
        }
    hp_text_add(sv, "</g>\n<g class=\"circuit-rows\" font-size=\"9\" fill=\"#555\" text-anchor=\"end\">\n");
    for (int l = -1; l <= r->n_layers; l++) { /* each row named at its left */
        double x, y;
        snprintf(name, sizeof name, l < 0 ? "emb" : l == r->n_layers ? "logits" : "%d.0", l);
        if (!node_at(r, name, x0, y0, w, h, &x, &y))
            continue;
        if (l >= 0 && l < r->n_layers)
            hp_text_printf(sv, "<text x=\"%.1f\" y=\"%.1f\">layer %d</text>\n", x0 - 4, y + 3, l);
        else
            hp_text_printf(sv, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", x - 8, y + 3, name);
    }
    hp_text_add(sv, "</g>\n<g class=\"circuit-edges\" fill=\"none\" stroke-linecap=\"round\">\n");
    for (int i = 0; i < t->n_rows; i++) {
        char recv[32];
        snprintf(recv, sizeof recv, "%s", tcell(t, i, c_r));
        char *colon = strchr(recv, ':');
        if (colon && strncmp(recv, "mlp:", 4) != 0)
            *colon = 0; /* a head's input: its node */
        double xs, ys, xr, yr;
        const double f = tval(t, i, c_f);
        if (!isfinite(f) || !node_at(r, tcell(t, i, c_s), x0, y0, w, h, &xs, &ys) ||
            !node_at(r, recv, x0, y0, w, h, &xr, &yr))
            continue;
        hp_text_printf(sv, "<path class=\"circuit-edge\" d=\"M%.1f %.1fQ%.1f %.1f %.1f %.1f\" stroke=\"%s\" "
                           "stroke-opacity=\"0.7\" stroke-width=\"%.2f\"",
                       xs, ys, (xs + xr) / 2 + (yr - ys) * 0.15, (ys + yr) / 2, xr, yr, f > 0 ? "#c0392b" : "#2c6fbb",
                       big > 0 ? 0.6 + 4.4 * fabs(f) / big : 1.0);
        hr_attr_cell(sv, "data-edge", t, i, c_e);
        hr_attr_cell(sv, "data-effect", t, i, c_f);
        hp_text_add(sv, "><title>");
        hp_text_escape(sv, tcell(t, i, c_e));
        hp_text_add(sv, ": effect ");
        hp_text_escape(sv, tcell(t, i, c_f));
        hp_text_printf(sv, " %s</title></path>\n", r->unit);
    }
    hp_text_add(sv, "</g>\n");
}

static void draw_curve(struct hp_text *sv, const struct hp_table *t, double x0, double y0, double w, double h)
{
    const int c_x = tcol(t, "fraction"), c_f = tcol(t, "faithfulness");
    double lo = 0, hi = 1, tk[32];
    for (int i = 0; i < t->n_rows - t->n_summary; i++)
        if (isfinite(tval(t, i, c_f)))
            lo = fmin(lo, tval(t, i, c_f)), hi = fmax(hi, tval(t, i, c_f));
    const int nt = hp_ticks(&lo, &hi, 4, tk, 32);
    double xl = 0, xh = 1, xt[32];
    const int nx = hp_ticks(&xl, &xh, 4, xt, 32);
    const struct hp_scale sx = {xl, xh, x0, x0 + w}, sy = {lo, hi, y0 + h, y0};
    hp_svg_grid(sv, &sx, false, y0, y0 + h, xt, nx);
    hp_svg_grid(sv, &sy, true, x0, x0 + w, tk, nt);
    for (int k = 0; k < 2; k++)
        hp_text_printf(sv, "<line class=\"f-%d\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\" "
                           "stroke-dasharray=\"3 3\"/>\n", k, x0, hp_scale_map(&sy, k), x0 + w, hp_scale_map(&sy, k));
    hp_text_add(sv, "<polyline class=\"faithfulness\" fill=\"none\" stroke=\"#333\" stroke-width=\"1.5\" points=\"");
    for (int i = 0; i < t->n_rows - t->n_summary; i++)
        if (isfinite(tval(t, i, c_f)))
            hp_text_printf(sv, "%.1f,%.1f ", hp_scale_map(&sx, tval(t, i, c_x)), hp_scale_map(&sy, tval(t, i, c_f)));
    hp_text_add(sv, "\"/>\n");
    hp_svg_axis(sv, &sy, true, x0, tk, nt, 3, "faithfulness", 40);
    hp_svg_axis(sv, &sx, false, y0 + h, xt, nx, 3, "fraction of the graph's edges kept", 36);
}

enum hp_status hr_make_circuit(struct report *r, struct section *sec)
{
    if (!hr_study_of(r, "circuit", -1)) {
        hr_left_out(r, sec, "circuit study",
                    "<code>- circuit</code> in the plan ranks every edge and scores circuits of increasing size by "
                    "their faithfulness (docs/edges.md)");
        return HP_OK;
    }
    enum { MAX_PANELS = 6 };
    struct hp_table *curves[MAX_PANELS] = {0}, *edges[MAX_PANELS] = {0};
    const char *names[MAX_PANELS];
    int n_p = 0;
    enum hp_status s = HP_OK;
    const int ck = tcol(r->studies, "kind"), cs = tcol(r->studies, "study");
    for (int i = 0; i < r->studies->n_rows && n_p < MAX_PANELS && s == HP_OK; i++) {
        if (strcmp(tcell(r->studies, i, ck), "circuit") != 0)
            continue;
        names[n_p] = tcell(r->studies, i, cs);
        const struct hp_query_opts qc = {.kind = HP_QUERY_CIRCUIT, .sweep_id = r->sweep, .study = names[n_p]};
        const struct hp_query_opts qe = {.kind = HP_QUERY_EDGES, .sweep_id = r->sweep, .study = names[n_p],
                                         .top = CIRCUIT_EDGES};
        if ((s = hp_query_read(r->rd, &qc, &curves[n_p], r->err)) == HP_OK &&
            (s = hp_query_read(r->rd, &qe, &edges[n_p], r->err)) == HP_OK)
            n_p++;
    }
    if (s == HP_OK && n_p > 0) {
        struct fig *f = hr_fig_new(r, "circuit");
        if (!f)
            s = hp_fail(r->err, HP_ERR_NOMEM, "report: out of memory");
        const int W = 760, ph = 300, top = 60, H = top + n_p * (ph + 70);
        struct hp_text *sv = f ? &f->svg : NULL;
        if (sv) {
            char sub[160];
            snprintf(sub, sizeof sub, "sweep %lld: faithfulness by circuit size, and the %d strongest edges", r->sweep,
                     CIRCUIT_EDGES);
            hp_svg_open(sv, "fig-circuit", W, H, "Circuits");
            hr_svg_heading(sv, W, "Circuits", sub);
        }
        for (int k = 0; sv && k < n_p; k++) {
            const struct hp_table *c = curves[k];
            const int y0 = top + k * (ph + 70) + 30, c_f = tcol(c, "faithfulness"), c_o = tcol(c, "abs_1_minus_f");
            const int sum = c->n_rows - 1;
            hp_text_add(sv, "<g class=\"circuit-panel\" data-study=\"");
            hp_text_escape(sv, names[k]);
            hp_text_printf(sv, "\" data-sizes=\"%d\" data-edges=\"%d\"", c->n_rows - c->n_summary, edges[k]->n_rows);
            hr_attr_cell(sv, "data-cpr", c, sum, c_f);
            hr_attr_cell(sv, "data-cmd", c, sum, c_o);
            hp_text_printf(sv, ">\n<text class=\"panel-title\" x=\"20\" y=\"%d\" font-weight=\"600\">", y0 - 12);
            hp_text_escape_cut(sv, names[k], 32);
            hp_text_add(sv, ": CPR ");
            hp_text_escape(sv, c->n_summary ? tcell(c, sum, c_f) : "");
            hp_text_add(sv, ", CMD ");
            hp_text_escape(sv, c->n_summary ? tcell(c, sum, c_o) : "");
            hp_text_add(sv, "</text>\n");
            draw_curve(sv, c, 70, y0, 250, ph - 50);
            draw_graph(sv, r, edges[k], 380, y0, 360, ph - 20);
            hp_text_add(sv, "</g>\n");
        }
        if (sv) {
            hp_svg_close(sv);
            hp_text_printf(&sec->caption,
                           "<p>Each circuit study: left, the faithfulness f = (M - M(empty)) / (M(whole graph) - "
                           "M(empty)) of the circuits it evaluated (the top edges by |effect| patched alone kept, the "
                           "graph's other edges patched) against the fraction of the graph's edges kept, dashed at "
                           "f = 0 (every edge patched) and f = 1 (the unmasked model), with MIB's CPR (area under f, "
                           "higher is better) and CMD (area under |1 - f|, lower is better) in the title; right, its "
                           "%d strongest edges: the embeddings at the bottom, a row of heads a layer (its MLP at the "
                           "right end), the logits at the top; an edge's width is its |effect| patched alone, red "
                           "where patching it is worse for the %s, blue where better. Hover an edge for its "
                           "numbers.</p>\n",
                           CIRCUIT_EDGES, hp_metric_effect_text(r->m));
            for (int k = 0; k < n_p; k++)
                hr_caption_source(&sec->caption, r, "circuit", names[k], curves[k]);
        }
    }
    for (int k = 0; k < MAX_PANELS; k++)
        hp_table_free(curves[k]), hp_table_free(edges[k]);
    return s;
}
