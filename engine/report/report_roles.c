/*
 * report_roles.c -- the report's head roles against effect: a small scatter
 * a role score, each head's score against its single-head effect (or its
 * place, without one), with the panel's rank correlation from the query.
 *
 * Part of the report family (report.h): a point is a row of
 * `query roles`, the correlation its last row. Must not: compute a score or
 * a correlation (the query does), print, or exit.
 */
#define _POSIX_C_SOURCE 200809L

#include "report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

// --- head roles against effect ---------------------------------------------------------

// The summary row of the roles table that is the rank correlations (label "rho"), -1 when none (no effects).
static int roles_rho_row(const struct hp_table *t)
{
    int c = tcol(t, "label");
    for (int i = t->n_rows - 1; i >= t->n_rows - t->n_summary; i--)
        if (strcmp(tcell(t, i, c), "rho") == 0)
            return i;
    return -1;
}

// A panel of the roles figure: one score of `query roles` (the offsets are drawn as their masses' tooltips).
static const struct role_panel {
    const char *col;    // its column of `query roles`
    const char *unit;   // the x axis's label: what the score is measured in
    const char *offset; // the column of the offset this share is at, or NULL
} ROLE_PANELS[] = {
    {"prev_token", "mean attention (0 to 1)", NULL},
    {"duplicate_token", "mean attention (0 to 1)", NULL},
    {"induction", "mean attention (0 to 1)", NULL},
    {"induction_mass", "mean attention (0 to 1)", "induction_offset"},
    {"first_token", "mean attention (0 to 1)", NULL},
    {"dominant_mass", "share of attention (0 to 1)", "dominant_offset"},
    {"entropy", "entropy (bits)", NULL},
    {"rare_token", "mean attention (0 to 1)", NULL},
    {"sep_token", "mean attention (0 to 1)", NULL},
};
#define N_ROLE_PANELS ((int)(sizeof ROLE_PANELS / sizeof *ROLE_PANELS))

// The points of panel rp: a head each, its row of `query roles` as data-* and in its tooltip.
static void roles_points(struct hp_text *sv, const struct report *r, const int *at, const struct role_panel *rp,
                         bool by_effect, const struct hp_scale *sx, const struct hp_scale *sy)
{
    const struct hp_table *t = r->roles;
    const int L = r->n_layers, U = r->n_heads;
    const int c = tcol(t, rp->col), c_off = rp->offset ? tcol(t, rp->offset) : -1, c_eff = tcol(t, "effect"),
              c_label = tcol(t, "label");
    char col[8];
    for (int i = 0; i < L * U; i++) {
        int row = at[i], l = i / U, u = i % U;
        double v = row >= 0 ? tval(t, row, c) : NAN, e = row >= 0 ? tval(t, row, c_eff) : NAN;
        if (!isfinite(v) || (by_effect && !isfinite(e)))
            continue;
        double py = by_effect ? hp_scale_map(sy, e) : hp_scale_map(sy, l + (u + 0.5) / U);
        hr_layer_colour(l, L, col);
        hp_svg_marker_open(sv, 0, hp_scale_map(sx, v), py, 3.5);
        hp_text_printf(sv, " class=\"point\" fill=\"%s\" fill-opacity=\"0.85\" stroke=\"#222\" "
                           "stroke-width=\"0.5\" data-layer=\"%d\" data-head=\"%d\"", col, l, u);
        hr_attr_cell(sv, "data-label", t, row, c_label);
        hr_attr_cell(sv, "data-score", t, row, c);
        hr_attr_cell(sv, "data-offset", t, row, c_off);
        hr_attr_cell(sv, "data-effect", t, row, c_eff);
        hp_text_add(sv, "><title>");
        hp_text_escape(sv, tcell(t, row, c_label));
        hp_text_printf(sv, ": %s ", rp->col);
        hp_text_escape(sv, tcell(t, row, c));
        if (strcmp(rp->col, "entropy") == 0)
            hp_text_add(sv, " bits");
        if (*tcell(t, row, c_off)) {
            hp_text_printf(sv, " at %s ", rp->offset);
            hp_text_escape(sv, tcell(t, row, c_off));
        }
        if (*tcell(t, row, c_eff)) {
            hp_text_add(sv, ", effect ");
            hp_text_escape(sv, tcell(t, row, c_eff));
            hp_text_printf(sv, " %s", r->unit);
        }
        hp_text_add(sv, "</title></path>\n");
    }
}

/* Points labelled with their head in every panel, so a printed report names the outliers: the heads of the
 * largest effects (without effects, of the panel's largest scores), and the panel's largest score besides */
#define ROLE_LABELS 3

/* Mark in named the k largest finite values of key (n), ties to the lower index: one pass keeping the k best so
 * far, O(n k) (a panel may hold 65536 heads). */
static void mark_largest(const double *key, int n, int k, bool *named)
{
    int best[ROLE_LABELS], m = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(key[i]) || (m == k && key[i] <= key[best[m - 1]]))
            continue;
        int at = m < k ? m++ : k - 1; /* the slot it displaces, then moved up past smaller ones */
        while (at > 0 && key[best[at - 1]] < key[i]) {
            best[at] = best[at - 1];
            at--;
        }
        best[at] = i;
    }
    for (int j = 0; j < m; j++)
        named[best[j]] = true;
}

// Panel rp's labelled points (ROLE_LABELS): each head's label beside its point, away from the panel's right edge.
static void roles_labels(struct hp_text *sv, const struct report *r, const int *at, const struct role_panel *rp,
                         bool by_effect, const struct hp_scale *sx, const struct hp_scale *sy)
{
    const struct hp_table *t = r->roles;
    const int L = r->n_layers, U = r->n_heads, n = L * U;
    const int c = tcol(t, rp->col), c_eff = tcol(t, "effect"), c_label = tcol(t, "label");
    double *score = malloc((size_t)n * sizeof *score + 1), *effect = malloc((size_t)n * sizeof *effect + 1);
    bool *named = calloc((size_t)n + 1, sizeof *named);
    if (!score || !effect || !named) { /* the labels are a reading aid: without memory the points stand alone */
        free(score);
        free(effect);
        free(named);
        return;
    }
    for (int i = 0; i < n; i++) {
        score[i] = at[i] >= 0 ? tval(t, at[i], c) : NAN;
        effect[i] = at[i] >= 0 && by_effect ? tval(t, at[i], c_eff) : NAN;
        if (by_effect && !isfinite(effect[i]))
            score[i] = NAN; /* not drawn */
    }
    if (by_effect)
        mark_largest(effect, n, ROLE_LABELS, named);
    mark_largest(score, n, by_effect ? 1 : ROLE_LABELS, named);
    hp_text_add(sv, "<g class=\"point-labels\" font-size=\"10\" fill=\"#222\">\n");
    for (int i = 0; i < n; i++) {
        if (!named[i] || !isfinite(score[i]))
            continue;
        const double px = hp_scale_map(sx, score[i]),
                     py = by_effect ? hp_scale_map(sy, effect[i]) : hp_scale_map(sy, i / U + (i % U + 0.5) / U);
        const bool left = px > fmax(sx->r0, sx->r1) - 28;
        hp_text_printf(sv, "<text class=\"point-label\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"", left ? px - 6 : px + 6,
                       py - 4, left ? "end" : "start");
        hr_attr_cell(sv, "data-label", t, at[i], c_label);
        hp_text_add(sv, ">");
        hp_text_escape(sv, tcell(t, at[i], c_label));
        hp_text_add(sv, "</text>\n");
    }
    hp_text_add(sv, "</g>\n");
    free(score);
    free(effect);
    free(named);
}

// The y axis without effects: the layers, top to bottom, over ph px from y0.
static void roles_layer_axis(struct hp_text *sv, const struct hp_scale *sy, int L, int x0, int y0, int ph)
{
    int every = ph / L >= 12 ? 1 : (12 * L + ph - 1) / ph;
    hp_text_printf(sv, "<g class=\"axis\" stroke=\"#444\">\n<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>\n",
                   x0, y0, x0, y0 + ph);
    for (int l = 0; l < L; l += every)
        hp_text_printf(sv, "<text x=\"%d\" y=\"%.1f\" stroke=\"none\" text-anchor=\"end\" "
                           "dominant-baseline=\"middle\">%d</text>\n",
                       x0 - 6, hp_scale_map(sy, l + 0.5), l);
    hp_text_printf(sv, "<text class=\"axis-label\" stroke=\"none\" text-anchor=\"middle\" "
                       "transform=\"translate(%d %d) rotate(-90)\">layer</text>\n"
                       "</g>\n", x0 - 40, y0 + ph / 2);
}

// The caption: what a panel shows, the scores, the roles studies not drawn, where the numbers come from.
static void roles_caption(struct hp_text *cp, const struct report *r, bool by_effect)
{
    if (by_effect)
        hp_text_printf(cp, "<p>Each panel: one role score of every head (x) against the head's effect when ablated "
                           "alone (y; %s), a point a head coloured by its layer. Its caption gives Spearman's rank "
                           "correlation rho of the score with the effect over the heads with both, as the query's "
                           "last row gives it. ", hp_metric_effect_text(r->m));
    else
        hp_text_add(cp, "<p>Each panel: one role score of every head (x), each head at its place (y: its layer, its "
                        "heads top to bottom), coloured by its layer. The sweep has no single study over query heads, "
                        "so there are no effects to set the scores against (<code>- single</code> in the plan adds "
                        "them, and the rank correlations). ");
    hp_text_add(cp, "The scores (docs/roles.md): <code>prev_token</code>, mean attention to the previous token; "
                    "<code>duplicate_token</code>, to earlier occurrences of the same token (an encoder: every "
                    "other occurrence); <code>induction</code>, on random tokens repeated twice, to the token after "
                    "the earlier occurrence, and <code>induction_mass</code>, at the offset from it the head prefers "
                    "(<code>induction_offset</code>, in the tooltip); <code>first_token</code>, to the first "
                    "position; <code>dominant_mass</code>, the share of attention at the head's most attended "
                    "relative position (<code>dominant_offset</code>, in the tooltip); <code>entropy</code>, of the "
                    "attention, in bits; <code>rare_token</code> (encoders), to the row's rarest token. A score no "
                    "head has is not drawn. Each panel names the heads of the three largest effects (without "
                    "effects, of its three largest scores) and its largest score; hover any point for its head and "
                    "numbers.</p>\n");
    if (r->role_studies->n_rows > 1) {
        hp_text_add(cp, "<p class=\"note\">The sweep's other roles studies (");
        for (int i = 1; i < r->role_studies->n_rows; i++) {
            if (i > 1)
                hp_text_add(cp, ", ");
            hp_text_escape(cp, tcell(r->role_studies, i, 0));
        }
        hp_text_add(cp, ") are not drawn: <code>headprune query roles --study NAME</code> lists one.</p>\n");
    }
    hr_caption_source(cp, r, "roles", r->roles_study, r->roles);
}

/*
 * One small scatter a score of `query roles` that any head has: the score
 * (x) against the head's single-head effect (y, one scale for every panel),
 * a point a head coloured by its layer, the panel's Spearman rho from the
 * query's last row in its caption. Without effects (no single study over
 * query heads), y is the head's place instead: its layer, its heads top to
 * bottom within it, so the scores are still seen layer by layer.
 */
static enum hp_status draw_roles(struct report *r, struct section *sec)
{
    const struct hp_table *t = r->roles;
    const int L = r->n_layers, U = r->n_heads;
    if ((long long)L * U > MAX_CELLS || L > MAX_ROWS) {
        hp_text_printf(&sec->note, "Left out: %d layers x %d heads are too many points to draw (at most %d, in at "
                                   "most %d layers); <code>headprune query roles --format csv</code> lists them.",
                       L, U, MAX_CELLS, MAX_ROWS);
        return HP_OK;
    }
    int *at = hr_roles_index(t, L, U);
    if (!at)
        return hp_fail(r->err, HP_ERR_NOMEM, "report: out of memory");
    const int c_eff = tcol(t, "effect"), rho_row = roles_rho_row(t);
    int n_heads = 0, n_eff = 0;
    double ylo = 0, yhi = 0;
    for (int i = 0; i < L * U; i++) {
        if (at[i] < 0)
            continue;
        n_heads++;
        double e = tval(t, at[i], c_eff);
        if (isfinite(e)) {
            n_eff++;
            ylo = e < ylo ? e : ylo;
            yhi = e > yhi ? e : yhi;
        }
    }
    const bool by_effect = rho_row >= 0 && n_eff > 0;
    // the panels: the scores some head has (rare_token is an encoder's only)
    int panels[N_ROLE_PANELS], n_p = 0;
    for (int k = 0; k < N_ROLE_PANELS; k++) {
        int c = tcol(t, ROLE_PANELS[k].col);
        bool any = false;
        for (int i = 0; i < L * U && !any; i++)
            any = at[i] >= 0 && isfinite(tval(t, at[i], c));
        if (any)
            panels[n_p++] = k;
    }
    if (n_heads == 0 || n_p == 0) {
        hp_text_add(&sec->note, "Left out: roles study ");
        hp_text_escape(&sec->note, r->roles_study);
        hp_text_printf(&sec->note, " of sweep %lld has no head with a score (<code>headprune query roles</code> "
                                   "shows what it holds).", r->sweep);
        free(at);
        return HP_OK;
    }
    struct fig *f = hr_fig_new(r, "roles");
    if (!f) {
        free(at);
        return hp_fail(r->err, HP_ERR_NOMEM, "report: out of memory");
    }

    // layout: up to four panels a row, each a 170 x 150 px plot with room for its title, axes and labels
    const int n_cols = n_p < 4 ? n_p : 4, n_rows = (n_p + n_cols - 1) / n_cols;
    const int cw = 250, ch = 240, pw = 170, ph = 150, top = 80;
    int W = 12 + n_cols * cw + 8, H = top + n_rows * ch + 6;
    W = W < 560 ? 560 : W;
    struct hp_text *sv = &f->svg;
    char title[160], sub[400], ylabel[96];
    snprintf(title, sizeof title, by_effect ? "Head roles against effect" : "Head roles by layer");
    if (by_effect)
        snprintf(sub, sizeof sub, "sweep %lld, roles study %s; y: %s", r->sweep, r->roles_study,
                 hp_metric_effect_text(r->m));
    else
        snprintf(sub, sizeof sub, "sweep %lld, roles study %s; no single study: each head at its layer, its heads "
                 "top to bottom", r->sweep, r->roles_study);
    hp_svg_open(sv, "fig-roles", W, H, title);
    hr_svg_heading(sv, W, title, sub);

    hr_layer_legend(sv, L);

    double yt[32];
    int nyt = by_effect ? hp_ticks(&ylo, &yhi, 5, yt, 32) : 0;
    snprintf(ylabel, sizeof ylabel, "effect (%s)", r->unit);
    for (int p = 0; p < n_p; p++) {
        const struct role_panel *rp = &ROLE_PANELS[panels[p]];
        const int c = tcol(t, rp->col);
        const int x0 = 12 + (p % n_cols) * cw + 62, y0 = top + (p / n_cols) * ch + 40;
        double xlo = 0, xhi = 0;
        int n_pts = 0;
        for (int i = 0; i < L * U; i++) {
            double v = at[i] >= 0 ? tval(t, at[i], c) : NAN;
            if (!isfinite(v) || (by_effect && !isfinite(tval(t, at[i], c_eff))))
                continue;
            n_pts++;
            xlo = v < xlo ? v : xlo;
            xhi = v > xhi ? v : xhi;
        }
        double xt[32];
        int nxt = hp_ticks(&xlo, &xhi, 4, xt, 32);
        struct hp_scale sx = {xlo, xhi, x0, x0 + pw};
        struct hp_scale sy = by_effect ? (struct hp_scale){ylo, yhi, y0 + ph, y0}  // effect upwards
                                       : (struct hp_scale){0, L, y0, y0 + ph};    // layers downwards
        hp_text_printf(sv, "<g class=\"role-panel\" data-role=\"%s\" data-points=\"%d\"", rp->col, n_pts);
        if (by_effect)
            hr_attr_cell(sv, "data-rho", t, rho_row, c);
        hp_text_add(sv, ">\n");
        // its caption: the score, and the rank correlation the query gives for it
        hp_text_printf(sv, "<text class=\"panel-title\" x=\"%d\" y=\"%d\" font-weight=\"600\">%s</text>\n", x0 - 50,
                       y0 - 24, rp->col);
        hp_text_printf(sv, "<text class=\"rho\" x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#444\">", x0 - 50, y0 - 9);
        if (!by_effect)
            hp_text_printf(sv, "%d heads; no effects to rank against", n_pts);
        else if (*tcell(t, rho_row, c)) {
            hp_text_add(sv, "Spearman rho = ");
            hp_text_escape(sv, tcell(t, rho_row, c));
            hp_text_printf(sv, " (%d heads)", n_pts);
        } else
            hp_text_printf(sv, "Spearman rho undefined (%d heads)", n_pts);
        hp_text_add(sv, "</text>\n");
        hp_svg_grid(sv, &sx, false, y0, y0 + ph, xt, nxt);
        if (by_effect) {
            hp_svg_grid(sv, &sy, true, x0, x0 + pw, yt, nyt);
            double zy = hp_scale_map(&sy, 0);
            hp_text_printf(sv, "<line class=\"zero\" x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"#888\" "
                               "stroke-dasharray=\"3 3\"/>\n", x0, zy, x0 + pw, zy);
        } else {
            hp_text_add(sv, "<g class=\"grid\" stroke=\"#e4e4e4\">\n");
            for (int l = 0; l <= L; l++)
                hp_text_printf(sv, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\"/>\n", x0, hp_scale_map(&sy, l),
                               x0 + pw, hp_scale_map(&sy, l));
            hp_text_add(sv, "</g>\n");
        }
        roles_points(sv, r, at, rp, by_effect, &sx, &sy);
        roles_labels(sv, r, at, rp, by_effect, &sx, &sy);
        if (by_effect)
            hp_svg_axis(sv, &sy, true, x0, yt, nyt, 3, ylabel, 46);
        else
            roles_layer_axis(sv, &sy, L, x0, y0, ph);
        hp_svg_axis(sv, &sx, false, y0 + ph, xt, nxt, 3, rp->unit, 36);
        hp_text_add(sv, "</g>\n");
    }
    hp_svg_close(sv);

    roles_caption(&sec->caption, r, by_effect);
    free(at);
    return HP_OK;
}

enum hp_status hr_make_roles(struct report *r, struct section *sec)
{
    enum hp_status s = hr_roles_read(r);
    if (s != HP_OK)
        return s;
    if (!r->roles_schema) {
        hp_text_add(&sec->note, "Left out: the database predates head roles (its schema has no roles tables); a "
                                "<code>roles</code> study in a plan run with this version computes them "
                                "(previous-token, induction, first-token and other scores of each head).");
        return HP_OK;
    }
    if (!r->roles) {
        hr_left_out(r, sec, "roles study",
                 "<code>- roles</code> in the plan computes each head's previous-token, induction, first-token and "
                 "other scores, drawn here against its effect in a <code>single</code> study");
        return HP_OK;
    }
    return draw_roles(r, sec);
}

