/*
 * report.c -- one self-contained HTML file (and, on request, one SVG file a
 * figure) showing a sweep of a results database: the layers x heads heatmap
 * of single-head effects (and of KV groups), the pruning curves, per-layer
 * redundancy, pair interaction matrices, head roles against effects, and
 * what was run.
 *
 * Where the numbers come from: the queries, through one reader (one
 * snapshot; query_int.h). A heatmap cell is a row of `query heads`, a curve
 * point a row of `query curve`, a bar a cell of `query redundancy`, a matrix
 * cell a row of `query pairs`, a roles point a row of `query roles` (and a
 * panel's rank correlation its last row), each drawn from the number its
 * table cell holds and labelled with that cell's text (data-* attributes and
 * the tooltip), so the figures and the tables never disagree and nothing
 * here computes an effect or a correlation.
 *
 * The figures are a list (figure_kinds below): each entry draws its figures
 * when the sweep has the study that produces them and otherwise leaves one
 * line saying which study would; entries that do not apply to the model (KV
 * groups without grouped-query attention) leave nothing. A new figure is one
 * function and one row.
 *
 * Invariants: every string read from the database goes through
 * hp_text_escape before it reaches the output; the page loads nothing (no
 * script at all; a Content-Security-Policy of default-src 'none' with inline
 * styles only); every file is written to a temporary file in its folder and
 * renamed over its name once everything is written, so an error leaves
 * nothing half-written. The output depends on the database alone (no clock,
 * no host), so a report can be compared with another.
 *
 * Must not: write to the database, compute effects, intervals or
 * interactions itself (the queries do), print, or exit.
 */
#define _POSIX_C_SOURCE 200809L

#include "headprune.h"
#include "query_int.h"
#include "svg_int.h"
#include "util_int.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// A heatmap or pair matrix of more cells than this, or a figure of more layers, is left out with a
// note: no browser draws it well (and the model's shape is input: it must not size a page unchecked).
#define MAX_CELLS 65536
#define MAX_ROWS 1024

// --- tables as the queries return them -------------------------------------------

// Column named name of t, -1 when it has none (tables are read by name: a new column moves nothing).
static int tcol(const struct hp_table *t, const char *name)
{
    for (int c = 0; t && c < t->n_cols; c++)
        if (strcmp(t->cols[c], name) == 0)
            return c;
    return -1;
}

// A cell's text, "" when empty or the column is missing.
static const char *tcell(const struct hp_table *t, int r, int c)
{
    if (c < 0 || r < 0 || r >= t->n_rows)
        return "";
    const char *s = t->cells[(size_t)r * (size_t)t->n_cols + (size_t)c];
    return s ? s : "";
}

// A cell's number (exactly what its text shows), NaN when it has none.
static double tval(const struct hp_table *t, int r, int c)
{
    if (c < 0 || r < 0 || r >= t->n_rows)
        return NAN;
    return t->values[(size_t)r * (size_t)t->n_cols + (size_t)c];
}

// A non-negative integer cell as an int, -1 when it is none.
static int tint(const struct hp_table *t, int r, int c)
{
    double v = tval(t, r, c);
    return isfinite(v) && v >= 0 && v <= 1e9 && v == floor(v) ? (int)v : -1;
}

// --- the report under construction ------------------------------------------------

struct fig {
    char id[64];        // the element's id without "fig-", and the SVG file's name without ".svg"
    struct hp_text svg; // the <svg> element, as it appears in the page and in its own file
};

// One entry of the page: a figure kind with its figures, or the line that says why it is left out.
struct section {
    int fig0, n_figs;       // its figures in report.figs
    struct hp_text caption; // HTML: what the figure shows (escaped where it quotes the database)
    struct hp_text note;    // HTML: why it is left out; empty when drawn
    bool not_applicable;    // nothing to say: the model has no such thing (KV groups without GQA)
};

struct report {
    const struct hp_report_opts *o;
    struct hp_error *err;
    struct hp_query_reader *rd;
    struct hp_table *info;    // hp_query_run_info
    struct hp_table *studies; // hp_query_studies
    long long sweep;
    int n_layers, n_heads, n_kv_heads;
    enum hp_metric m;
    const char *mname, *unit;
    double base;
    struct fig *figs;
    int n_figs, cap_figs;
    bool nomem;
    // head roles (roles_read): the sweep's roles studies by name, and `query roles` of the first
    bool roles_tried;              // roles_read has run
    bool roles_schema;             // the database has the roles tables (schema 4 and later)
    struct hp_table *role_studies; // column study; NULL before schema 4
    struct hp_table *roles;        // NULL when the sweep has no roles study
    const char *roles_study;       // the study roles is of (a cell of role_studies)
};

// The value of field name of what was run, "" when absent.
static const char *info_text(const struct report *r, const char *name)
{
    for (int i = 0; i < r->info->n_rows; i++)
        if (strcmp(tcell(r->info, i, 0), name) == 0)
            return tcell(r->info, i, 1);
    return "";
}

static double info_num(const struct report *r, const char *name)
{
    for (int i = 0; i < r->info->n_rows; i++)
        if (strcmp(tcell(r->info, i, 0), name) == 0)
            return tval(r->info, i, 1);
    return NAN;
}

// The sweep's first study of kind (plan order) whose kv is kv (-1: either), or NULL.
static const char *study_of(const struct report *r, const char *kind, int kv)
{
    const struct hp_table *t = r->studies;
    int ck = tcol(t, "kind"), ckv = tcol(t, "kv"), cs = tcol(t, "study");
    for (int i = 0; i < t->n_rows; i++)
        if (strcmp(tcell(t, i, ck), kind) == 0 && (kv < 0 || tint(t, i, ckv) == kv))
            return tcell(t, i, cs);
    return NULL;
}

// The studies table's rank of study ("exact", "gradient"; "" when none).
static const char *study_rank(const struct report *r, const char *study)
{
    const struct hp_table *t = r->studies;
    int cs = tcol(t, "study"), cr = tcol(t, "rank");
    for (int i = 0; i < t->n_rows; i++)
        if (strcmp(tcell(t, i, cs), study) == 0)
            return tcell(t, i, cr);
    return "";
}

// A new figure (its svg to be drawn by the caller), or NULL when out of memory.
static struct fig *fig_new(struct report *r, const char *id)
{
    if (r->n_figs == r->cap_figs) {
        int cap = r->cap_figs ? 2 * r->cap_figs : 8;
        struct fig *g = realloc(r->figs, (size_t)cap * sizeof *g);
        if (!g) {
            r->nomem = true;
            return NULL;
        }
        r->figs = g;
        r->cap_figs = cap;
    }
    struct fig *f = &r->figs[r->n_figs++];
    memset(f, 0, sizeof *f);
    snprintf(f->id, sizeof f->id, "%s", id);
    return f;
}

// The line of a figure left out: "Left out: sweep 3 has no pairs study; ... produces it."
static void left_out(const struct report *r, struct section *sec, const char *what, const char *fix)
{
    hp_text_printf(&sec->note, "Left out: sweep %lld has no %s; %s.", r->sweep, what, fix);
}

// "Read from <code>headprune query KIND --sweep N[ --study S]</code>: " and the query's note, escaped.
static void caption_source(struct hp_text *c, const struct report *r, const char *kind, const char *study,
                           const struct hp_table *t)
{
    hp_text_printf(c, "<p class=\"source\">The numbers: <code>headprune query %s --db ", kind);
    hp_text_escape(c, r->o->db_path);
    hp_text_printf(c, " --sweep %lld", r->sweep);
    if (study) {
        hp_text_add(c, " --study ");
        hp_text_escape(c, study);
    }
    hp_text_add(c, "</code>");
    if (t && t->note) {
        hp_text_add(c, " (");
        hp_text_escape(c, t->note);
        hp_text_add(c, ")");
    }
    hp_text_add(c, ".</p>\n");
}

// Attribute name="text of the cell", escaped; nothing for an empty cell.
static void attr_cell(struct hp_text *s, const char *name, const struct hp_table *t, int row, int col)
{
    const char *v = tcell(t, row, col);
    if (!*v)
        return;
    hp_text_printf(s, " %s=\"", name);
    hp_text_escape(s, v);
    hp_text_add(s, "\"");
}

// The SVG's own heading (a standalone file must say what it shows): title and a smaller second line.
static void svg_heading(struct hp_text *s, const char *title, const char *sub)
{
    hp_text_add(s, "<text class=\"heading\" x=\"12\" y=\"20\" font-size=\"15\" font-weight=\"600\">");
    hp_text_escape_cut(s, title, 110);
    hp_text_add(s, "</text>\n");
    if (sub && *sub) {
        hp_text_add(s, "<text class=\"subheading\" x=\"12\" y=\"37\" fill=\"#555\">");
        hp_text_escape_cut(s, sub, 140);
        hp_text_add(s, "</text>\n");
    }
}

// --- head roles, as `query roles` gives them ------------------------------------------

/*
 * The sweep's head roles, read once (the heatmap's tooltips and the roles
 * figure both use them): the names of its roles studies, and `query roles`
 * of the first by name (the study `headprune query roles` reads by default).
 * The studies table (hp_query_studies) lists the studies that run jobs or
 * score units; a roles study does neither (its run is in sweep_roles), so its
 * names come from one read-only statement through the same reader.
 */
static enum hp_status roles_read(struct report *r)
{
    if (r->roles_tried)
        return HP_OK;
    r->roles_tried = true;
    enum hp_status s = hp_query_has_table(r->rd, "sweep_roles", &r->roles_schema, r->err);
    if (s != HP_OK || !r->roles_schema)
        return s;
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT study FROM sweep_roles WHERE sweep_id = %lld ORDER BY study", r->sweep);
    struct hp_query_opts q = {.kind = HP_QUERY_SQL, .sql = sql};
    s = hp_query_read(r->rd, &q, &r->role_studies, r->err);
    if (s != HP_OK || r->role_studies->n_rows == 0)
        return s;
    r->roles_study = tcell(r->role_studies, 0, 0);
    struct hp_query_opts qr = {.kind = HP_QUERY_ROLES, .sweep_id = r->sweep, .study = r->roles_study};
    return hp_query_read(r->rd, &qr, &r->roles, r->err);
}

// The columns of `query roles` that hold a head's scores, in its order (docs/roles.md defines them).
static const char *const ROLE_COLS[] = {"prev_token",    "duplicate_token", "induction",     "induction_offset",
                                        "induction_mass", "first_token",    "dominant_offset", "dominant_mass",
                                        "entropy",       "rare_token"};
#define N_ROLE_COLS ((int)(sizeof ROLE_COLS / sizeof *ROLE_COLS))

// The row of the roles table that is the rank correlations (label "rho"), -1 when none (no effects).
static int roles_rho_row(const struct hp_table *t)
{
    int c = tcol(t, "label");
    for (int i = t->n_rows - 1; i >= 0; i--)
        if (strcmp(tcell(t, i, c), "rho") == 0)
            return i;
    return -1;
}

/*
 * Index of the roles table's head rows: at[l * U + u] = the row of layer l,
 * head u, -1 where none (a pruned head, or a database that has none). U is
 * the heads a layer; rows outside (L, U) are passed over. Destructor: free.
 */
static int *roles_index(const struct hp_table *t, int L, int U)
{
    int *at = malloc((size_t)L * (size_t)U * sizeof *at + 1);
    if (!at)
        return NULL;
    for (int i = 0; i < L * U; i++)
        at[i] = -1;
    const int c_layer = tcol(t, "layer"), c_head = tcol(t, "head"), c_label = tcol(t, "label");
    for (int i = 0; i < t->n_rows; i++) {
        int l = tint(t, i, c_layer), u = tint(t, i, c_head);
        if (l >= 0 && l < L && u >= 0 && u < U && at[l * U + u] < 0 && strcmp(tcell(t, i, c_label), "rho") != 0)
            at[l * U + u] = i;
    }
    return at;
}

// "; head roles: prev_token 0.98, ..., entropy 0.07 bits": row i's scores as the table prints them.
static void roles_tooltip(struct hp_text *s, const struct hp_table *t, int i)
{
    hp_text_add(s, "; head roles:");
    bool first = true;
    for (int k = 0; k < N_ROLE_COLS; k++) {
        const char *v = tcell(t, i, tcol(t, ROLE_COLS[k]));
        if (!*v)
            continue; // undefined: no query qualified (docs/roles.md)
        hp_text_printf(s, "%s %s ", first ? "" : ",", ROLE_COLS[k]);
        hp_text_escape(s, v);
        if (strcmp(ROLE_COLS[k], "entropy") == 0)
            hp_text_add(s, " bits");
        first = false;
    }
    if (first)
        hp_text_add(s, " none defined");
}

// --- colour legend of a diverging scale --------------------------------------------

/*
 * A vertical colour bar for hp_symlog(., m) at (x, y), h px high: +m at the
 * top, -m at the bottom, labels at 0, +-m/100, +-m/10, +-m; its title (the
 * quantity and unit) above.
 */
static void legend_diverging(struct hp_text *s, double x, double y, double h, double m, const char *title)
{
    char col[8], b[32];
    hp_text_printf(s, "<g class=\"legend\">\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">", x, y - 8);
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
    static const double at[] = {1, 0.1, 0.01, 0, -0.01, -0.1, -1};
    for (int i = 0; i < 7; i++) {
        if (!(m > 0) && at[i] != 0)
            continue;
        double v = at[i] * m, py = y + (1 - hp_symlog(v, m)) / 2 * h;
        hp_text_printf(s, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>"
                          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" dominant-baseline=\"middle\">%s%s</text>\n",
                       x + 14, py, x + 18, py, x + 21, py, v > 0 ? "+" : "", hp_num(b, v, 2));
    }
    hp_text_add(s, "</g>\n");
}

// --- heatmap of single-unit effects --------------------------------------------------

static enum hp_status draw_heatmap(struct report *r, struct section *sec, const char *study, bool kv)
{
    struct hp_query_opts q = {.kind = HP_QUERY_HEADS, .sweep_id = r->sweep, .study = study};
    struct hp_table *t = NULL;
    enum hp_status s = hp_query_read(r->rd, &q, &t, r->err);
    if (s != HP_OK)
        return s;
    const int c_label = tcol(t, "label"), c_layer = tcol(t, "layer"), c_unit = tcol(t, "unit"),
              c_value = tcol(t, r->mname), c_eff = tcol(t, "effect"), c_lo = tcol(t, "ci_lo"),
              c_hi = tcol(t, "ci_hi"), c_seqs = tcol(t, "seqs"), c_p = tcol(t, "p"), c_atp = tcol(t, "atp");
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
    int *rat = !kv && r->roles ? roles_index(r->roles, L, U) : NULL;
    struct fig *f = at && (kv || !r->roles || rat) ? fig_new(r, kv ? "heatmap-kv" : "heatmap") : NULL;
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
    int W = lx + 170, H = top + gh + 60;
    if (W < 560)
        W = 560;
    if (H < top + lh + 104) // the legend's bar and three lines below it
        H = top + (int)lh + 104;
    struct hp_text *sv = &f->svg;
    char title[300], sub[400], col[8], b[32];
    snprintf(title, sizeof title, "Effect of ablating each %s alone", what);
    snprintf(sub, sizeof sub, "sweep %lld, study %s; %s", r->sweep, study, hp_metric_effect_text(r->m));
    hp_svg_open(sv, kv ? "fig-heatmap-kv" : "fig-heatmap", W, H, title);
    svg_heading(sv, title, sub);

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
            double e = tval(t, i, c_eff), lo = tval(t, i, c_lo), hi = tval(t, i, c_hi);
            double tt = hp_symlog(e, m);
            bool sig = (isfinite(lo) && lo > 0) || (isfinite(hi) && hi < 0);
            hp_color_diverging(tt, col);
            hp_text_printf(sv, "<rect class=\"cell\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\" "
                               "stroke=\"#ffffff\" data-layer=\"%d\" data-unit=\"%d\"",
                           (int)x, (int)y, cs, ch, col, l, u);
            attr_cell(sv, "data-label", t, i, c_label);
            attr_cell(sv, "data-effect", t, i, c_eff);
            attr_cell(sv, "data-ci-lo", t, i, c_lo);
            attr_cell(sv, "data-ci-hi", t, i, c_hi);
            attr_cell(sv, "data-p", t, i, c_p);
            attr_cell(sv, "data-seqs", t, i, c_seqs);
            attr_cell(sv, "data-value", t, i, c_value);
            attr_cell(sv, "data-atp", t, i, c_atp);
            hp_text_printf(sv, " data-ci-excludes-zero=\"%d\"><title>", sig);
            hp_text_escape(sv, tcell(t, i, c_label));
            hp_text_add(sv, ": effect ");
            hp_text_escape(sv, tcell(t, i, c_eff));
            hp_text_printf(sv, " %s (%s ", r->unit, r->mname);
            hp_text_escape(sv, tcell(t, i, c_value));
            hp_text_printf(sv, ", baseline %s)", hp_num(b, r->base, 7));
            if (*tcell(t, i, c_lo)) {
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
                hp_text_add(sv, sig ? " (excludes 0)" : " (includes 0)");
            }
            if (*tcell(t, i, c_atp)) {
                hp_text_add(sv, "; attribution estimate ");
                hp_text_escape(sv, tcell(t, i, c_atp));
            }
            if (rat && rat[l * U + u] >= 0) // joined by (layer, head), as the atp column is by the query
                roles_tooltip(sv, r->roles, rat[l * U + u]);
            hp_text_add(sv, "</title></rect>\n");
            if (sig) {
                n_sig++;
                double rr = (cs < ch ? cs : ch) * 0.08; // a mark, not a second colour: small
                hp_text_printf(sv, "<circle class=\"sig\" cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"#000000\" "
                                   "stroke=\"#ffffff\" stroke-width=\"1\" pointer-events=\"none\"/>\n",
                               x + cs / 2.0, y + ch / 2.0, rr < 2 ? 2 : rr > 4 ? 4 : rr);
            }
        }
    hp_text_add(sv, "</g>\n");

    // legend: the colour bar, the mark, a missing cell
    char ltitle[96];
    snprintf(ltitle, sizeof ltitle, "effect (%s)", r->unit);
    legend_diverging(sv, lx, top + 14, lh, m, ltitle);
    double ly = top + 14 + lh + 24;
    hp_text_printf(sv, "<g class=\"legend\" font-size=\"11\">\n"
                       "<circle cx=\"%d\" cy=\"%.1f\" r=\"4\" fill=\"#000000\" stroke=\"#ffffff\"/>"
                       "<text x=\"%d\" y=\"%.1f\" dominant-baseline=\"middle\">paired 95%% CI excludes 0</text>\n"
                       "<rect x=\"%d\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"#ffffff\" stroke=\"#bbbbbb\"/>"
                       "<text x=\"%d\" y=\"%.1f\" dominant-baseline=\"middle\">no result</text>\n"
                       "<text x=\"%d\" y=\"%.1f\" fill=\"#555\">colour: symmetric log scale</text>\n</g>\n",
                   lx + 7, ly, lx + 18, ly, lx + 2, ly + 14, lx + 18, ly + 19, lx, ly + 40);
    hp_svg_close(sv);

    struct hp_text *c = &sec->caption;
    hp_text_printf(c, "<p>Each cell: the effect of ablating one %s alone (layers down, %s across), %s. Red: "
                      "ablating it hurts; blue: it helps; the colour scale is symmetric and logarithmic (ends at "
                      "&#177;%s) so that small effects stay visible beside large ones. A dot marks the %d %s whose "
                      "paired 95%% interval over sequences excludes 0. Hover a cell for its numbers.</p>\n",
                   what, whats, hp_metric_effect_text(r->m), hp_num(b, m, 3), n_sig, n_sig == 1 ? what : whats);
    if (rat)
        hp_text_add(c, "<p>A cell's tooltip also gives the head's roles (the scores of the roles figure "
                       "below).</p>\n");
    caption_source(c, r, "heads", study, t);
    free(at), free(rat);
    hp_table_free(t);
    return HP_OK;
}

static enum hp_status make_heatmap(struct report *r, struct section *sec)
{
    const char *study = study_of(r, "single", 0);
    if (!study) {
        left_out(r, sec, "single study over query heads", "<code>- single</code> in the plan produces it");
        return HP_OK;
    }
    enum hp_status s = roles_read(r);
    return s == HP_OK ? draw_heatmap(r, sec, study, false) : s;
}

static enum hp_status make_heatmap_kv(struct report *r, struct section *sec)
{
    const char *study = study_of(r, "single", 1);
    bool gqa = r->n_kv_heads > 0 && r->n_kv_heads < r->n_heads;
    if (!study) {
        if (!gqa)
            sec->not_applicable = true; // without grouped-query attention a KV group is a head
        else
            left_out(r, sec, "single study over KV groups",
                     "<code>- single: {kv: true}</code> in the plan produces it");
        return HP_OK;
    }
    return draw_heatmap(r, sec, study, true);
}

// --- pruning curves ---------------------------------------------------------------

struct series {
    int row0, n;   // its rows of the curve table
    bool random;
    const char *study, *rank;
};

static enum hp_status make_curves(struct report *r, struct section *sec)
{
    if (!study_of(r, "iterative", -1) && !study_of(r, "random", -1)) {
        left_out(r, sec, "iterative or random study",
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
              c_lo = tcol(t, "ci_lo"), c_hi = tcol(t, "ci_hi"), c_eff = tcol(t, "effect"), c_pruned = tcol(t, "pruned");
    struct series *sr = calloc((size_t)t->n_rows + 1, sizeof *sr);
    struct fig *f = sr ? fig_new(r, "curves") : NULL;
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
            sr[n_sr] = (struct series){i, 0, *tcell(t, i, c_samples) != '\0', st, study_rank(r, st)};
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
    const double present = info_num(r, "n_present");
    const int n_present = isfinite(present) ? (int)present : r->n_layers * r->n_heads;
    if (n_present == r->n_layers * r->n_heads)
        snprintf(xlabel, sizeof xlabel, "heads pruned (%% of the model's %d query heads)", n_present);
    else /* the rule every curve counts by: a head the checkpoint lacks is neither kept nor pruned */
        snprintf(xlabel, sizeof xlabel, "heads pruned (%% of the %d query heads the checkpoint has, of %d)", n_present,
                 r->n_layers * r->n_heads);
    snprintf(sub, sizeof sub, "sweep %lld; %s against the share of heads pruned (%s is better)", r->sweep, r->mname,
             hp_metric_sign(r->m) > 0 ? "lower" : "higher");
    hp_svg_open(sv, "fig-curves", W, H, "Pruning curves");
    svg_heading(sv, "Pruning curves", sub);
    hp_svg_grid(sv, &sy, true, px0, px1, yt, nyt);
    hp_svg_grid(sv, &sx, false, py0, py1, xt, nxt);

    // random studies' 95% bands first, under every line
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
                hp_text_printf(&band, "%s%.2f %.2f", pts++ ? "L" : "M", hp_scale_map(&sx, x), hp_scale_map(&sy, v));
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
            attr_cell(sv, "data-step", t, i, c_step);
            attr_cell(sv, "data-k", t, i, c_k);
            attr_cell(sv, "data-heads", t, i, c_heads);
            attr_cell(sv, "data-pct", t, i, c_pct);
            attr_cell(sv, "data-samples", t, i, c_samples);
            attr_cell(sv, "data-value", t, i, c_value);
            attr_cell(sv, "data-ci-lo", t, i, c_lo);
            attr_cell(sv, "data-ci-hi", t, i, c_hi);
            attr_cell(sv, "data-effect", t, i, c_eff);
            hp_text_add(sv, "><title>");
            hp_text_escape_cut(sv, sr[k].study, 60);
            if (sr[k].random) {
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
        hp_text_add(sv, "</g>\n");
    }
    hp_svg_axis(sv, &sy, true, px0, yt, nyt, 4, ylabel, 58);
    hp_svg_axis(sv, &sx, false, py1, xt, nxt, 3, xlabel, 40);

    // legend
    const int lx = px1 + 24;
    double ly = py0 + 6;
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
                                                               : "iterative, exact-ranked");
    }
    hp_text_printf(sv, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#555\" stroke-dasharray=\"2 3\"/>"
                       "<text x=\"%d\" y=\"%.1f\" dominant-baseline=\"middle\">baseline (nothing pruned)</text>\n</g>\n",
                   lx, ly, lx + 26, ly, lx + 34, ly);
    hp_svg_close(sv);

    struct hp_text *c = &sec->caption;
    hp_text_printf(c, "<p>The sweep's %s as heads are pruned: iterative studies (solid) prune, step by step, the "
                      "heads whose removal hurts least (exact-ranked: by measuring each; gradient-ranked: by "
                      "Michel et al.'s importance); random studies (dashed) prune k heads drawn at random, their "
                      "mean with its 95%% interval as a band. The dotted line is the baseline, %s %s.</p>\n",
                   r->mname, r->mname, hp_num(b, r->base, 7));
    caption_source(c, r, "curve", NULL, t);
    free(sr);
    hp_table_free(t);
    return HP_OK;
}

// --- per-layer redundancy ----------------------------------------------------------

static enum hp_status make_redundancy(struct report *r, struct section *sec)
{
    const char *single = study_of(r, "single", -1), *only = study_of(r, "only", -1), *layer = study_of(r, "layer", -1);
    if (!single && !only && !layer) {
        left_out(r, sec, "single, only or layer study",
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
    struct fig *f = fig_new(r, "redundancy");
    if (!f) {
        hp_table_free(t);
        return hp_fail(r->err, HP_ERR_NOMEM, "report: out of memory");
    }
    const int c_layer = tcol(t, "layer"), c_units = tcol(t, "units"), c_only_unit = tcol(t, "only_unit");
    char eps[32], b[32];
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
    svg_heading(sv, "Redundancy per layer", sub);
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
            attr_cell(sv, "data-value", t, i, c);
            if (k == 0)
                attr_cell(sv, "data-units", t, i, c_units);
            if (k == 2)
                attr_cell(sv, "data-only-unit", t, i, c_only_unit);
            hp_text_printf(sv, "><title>layer %d: ", tint(t, i, c_layer));
            if (k == 0) {
                hp_text_escape(sv, tcell(t, i, c));
                hp_text_add(sv, " of ");
                hp_text_escape(sv, tcell(t, i, c_units));
                hp_text_printf(sv, " units cost less than %s alone", eps);
            } else {
                hp_text_escape(sv, titles[k]);
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
    caption_source(c, r, "redundancy", NULL, t);
    hp_table_free(t);
    return HP_OK;
}

// --- pair interactions ------------------------------------------------------------

// A group of the pairs table: one study's pairs within one layer.
struct pair_group {
    const char *study;
    int layer;
    bool kv;
    int *rows, n; // its rows
};

static enum hp_status make_pairs(struct report *r, struct section *sec)
{
    if (!study_of(r, "pairs", -1)) {
        left_out(r, sec, "pairs study", "<code>- pairs: {layers: [1]}</code> in the plan produces one for a layer");
        return HP_OK;
    }
    // the query measures each pair against single-unit effects of the same kind of unit
    bool can = (study_of(r, "pairs", 0) && study_of(r, "single", 0)) ||
               (study_of(r, "pairs", 1) && study_of(r, "single", 1));
    if (!can) {
        left_out(r, sec, "single study over the units of its pairs study",
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
              c_a = tcol(t, "unit_a"), c_b = tcol(t, "unit_b"), c_ab = tcol(t, "effect_ab"), c_ea = tcol(t, "effect_a"),
              c_eb = tcol(t, "effect_b"), c_i = tcol(t, "interaction");
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
        double v = tval(t, i, c_i);
        if (isfinite(v) && fabs(v) > m)
            m = fabs(v);
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
    char b[32], col[8];
    int n_drawn = 0, n_big = 0;
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
        struct fig *f = fig_new(r, id);
        if (!f) {
            s = hp_fail(r->err, HP_ERR_NOMEM, "report: out of memory");
            break;
        }
        n_drawn++;
        int cs = 300 / U;
        cs = cs < 10 ? 10 : cs > 40 ? 40 : cs;
        const int left = 56, top = 74, gw = U * cs, lx = left + gw + 34;
        int W = lx + 150, H = top + gw + 50;
        W = W < 420 ? 420 : W;
        H = H < top + 240 ? top + 240 : H;
        struct hp_text *sv = &f->svg;
        char eid[80], title[120], sub[300];
        snprintf(eid, sizeof eid, "fig-%s", id);
        snprintf(title, sizeof title, "Pair interactions, layer %d", g[k].layer);
        snprintf(sub, sizeof sub, "sweep %lld, study %s; I = D(a and b) - D(a) - D(b)", r->sweep, g[k].study);
        hp_svg_open(sv, eid, W, H, title);
        svg_heading(sv, title, sub);
        const char *unit_name = g[k].kv ? "KV group" : "head";
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
        hp_text_escape(sv, g[k].study);
        hp_text_printf(sv, "\" data-layer=\"%d\" data-units=\"%d\" data-scale-max=\"%s\">\n", g[k].layer, U,
                       hp_num(b, m, 6));
        for (int j = 0; j < g[k].n; j++) {
            int i = g[k].rows[j], a = tint(t, i, c_a), bu = tint(t, i, c_b);
            if (a < 0 || bu < 0)
                continue;
            double v = tval(t, i, c_i);
            if (isfinite(v))
                hp_color_diverging(hp_symlog(v, m), col);
            else
                snprintf(col, sizeof col, "#ffffff");
            for (int half = 0; half < 2; half++) { // (a, b) and (b, a): the matrix is symmetric
                int row = half ? bu : a, cl = half ? a : bu;
                hp_text_printf(sv, "<rect class=\"pair%s\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\" "
                                   "stroke=\"%s\" data-a=\"%d\" data-b=\"%d\"",
                               isfinite(v) ? "" : " missing", left + cl * cs, top + row * cs, cs, cs, col,
                               isfinite(v) ? "#ffffff" : "#bbbbbb", a, bu);
                attr_cell(sv, "data-pair", t, i, c_pair);
                attr_cell(sv, "data-interaction", t, i, c_i);
                attr_cell(sv, "data-effect-ab", t, i, c_ab);
                attr_cell(sv, "data-effect-a", t, i, c_ea);
                attr_cell(sv, "data-effect-b", t, i, c_eb);
                hp_text_add(sv, "><title>");
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
                hp_text_add(sv, "</title></rect>\n");
            }
        }
        hp_text_add(sv, "</g>\n");
        char lt[96];
        snprintf(lt, sizeof lt, "interaction (%s)", r->unit);
        legend_diverging(sv, lx, top + 14, gw < 150 ? 150 : gw > 240 ? 240 : gw, m, lt);
        hp_svg_close(sv);
    }
    if (s == HP_OK) {
        struct hp_text *c = &sec->caption;
        hp_text_printf(c, "<p>For each pair of units of a layer, the interaction I = D(a and b) &#8722; D(a) &#8722; "
                          "D(b) of their effects D (%s). Red (I &gt; 0): removing both hurts more than the two "
                          "removals add up to, the units back each other up; blue (I &lt; 0): their damage overlaps. "
                          "One colour scale for every layer, symmetric and logarithmic (ends at &#177;%s).</p>\n",
                       hp_metric_effect_text(r->m), hp_num(b, m, 3));
        if (n_big)
            hp_text_printf(c, "<p class=\"note\">%d layer%s with too many units to draw as a matrix (more than %d "
                              "cells) left out.</p>\n",
                           n_big, n_big == 1 ? "" : "s", MAX_CELLS);
        caption_source(c, r, "pairs", NULL, t);
        if (n_drawn == 0)
            hp_text_printf(&sec->note, "Left out: every pairs study is of a layer with too many units to draw.");
    }
    free(g), free(rows);
    hp_table_free(t);
    return s;
}

// --- head roles against effect ---------------------------------------------------------

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
};
#define N_ROLE_PANELS ((int)(sizeof ROLE_PANELS / sizeof *ROLE_PANELS))

// A layer's colour: viridis by depth, short of its palest yellow (points sit on white).
static void layer_colour(int l, int L, char col[8])
{
    hp_color_sequential(L > 1 ? 0.85 * l / (L - 1) : 0.4, col);
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
    int *at = roles_index(t, L, U);
    if (!at)
        return hp_fail(r->err, HP_ERR_NOMEM, "report: out of memory");
    const int c_eff = tcol(t, "effect"), c_label = tcol(t, "label"), rho_row = roles_rho_row(t);
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
    struct fig *f = fig_new(r, "roles");
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
    char title[160], sub[400], col[8], ylabel[96];
    snprintf(title, sizeof title, by_effect ? "Head roles against effect" : "Head roles by layer");
    if (by_effect)
        snprintf(sub, sizeof sub, "sweep %lld, roles study %s; y: %s", r->sweep, r->roles_study,
                 hp_metric_effect_text(r->m));
    else
        snprintf(sub, sizeof sub, "sweep %lld, roles study %s; no single study: each head at its layer, its heads "
                 "top to bottom", r->sweep, r->roles_study);
    hp_svg_open(sv, "fig-roles", W, H, title);
    svg_heading(sv, title, sub);

    // legend: a swatch a layer (or a bar from the first to the last when there are many)
    hp_text_add(sv, "<g class=\"legend\" font-size=\"11\">\n");
    hp_text_printf(sv, "<text x=\"12\" y=\"60\" dominant-baseline=\"middle\">colour: layer</text>\n");
    if (L <= 16) {
        for (int l = 0; l < L; l++) {
            layer_colour(l, L, col);
            hp_text_printf(sv, "<rect x=\"%d\" y=\"55\" width=\"10\" height=\"10\" fill=\"%s\" stroke=\"#222\" "
                               "stroke-width=\"0.5\"/><text x=\"%d\" y=\"60\" dominant-baseline=\"middle\">%d</text>\n",
                           100 + 34 * l, col, 114 + 34 * l, l);
        }
    } else {
        for (int i = 0; i < 40; i++) {
            hp_color_sequential(0.85 * i / 39, col);
            hp_text_printf(sv, "<rect x=\"%d\" y=\"55\" width=\"5.3\" height=\"10\" fill=\"%s\"/>\n", 100 + 5 * i,
                           col);
        }
        hp_text_printf(sv, "<text x=\"96\" y=\"60\" text-anchor=\"end\" dominant-baseline=\"middle\">0</text>"
                           "<text x=\"304\" y=\"60\" dominant-baseline=\"middle\">%d</text>\n", L - 1);
    }
    hp_text_add(sv, "</g>\n");

    double yt[32];
    int nyt = by_effect ? hp_ticks(&ylo, &yhi, 5, yt, 32) : 0;
    snprintf(ylabel, sizeof ylabel, "effect (%s)", r->unit);
    for (int p = 0; p < n_p; p++) {
        const struct role_panel *rp = &ROLE_PANELS[panels[p]];
        const int c = tcol(t, rp->col), c_off = rp->offset ? tcol(t, rp->offset) : -1;
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
            attr_cell(sv, "data-rho", t, rho_row, c);
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
        // the points: a head each, its row of `query roles` as data-* and in its tooltip
        for (int i = 0; i < L * U; i++) {
            int row = at[i], l = i / U, u = i % U;
            double v = row >= 0 ? tval(t, row, c) : NAN, e = row >= 0 ? tval(t, row, c_eff) : NAN;
            if (!isfinite(v) || (by_effect && !isfinite(e)))
                continue;
            double py = by_effect ? hp_scale_map(&sy, e) : hp_scale_map(&sy, l + (u + 0.5) / U);
            layer_colour(l, L, col);
            hp_svg_marker_open(sv, 0, hp_scale_map(&sx, v), py, 3.5);
            hp_text_printf(sv, " class=\"point\" fill=\"%s\" fill-opacity=\"0.85\" stroke=\"#222\" "
                               "stroke-width=\"0.5\" data-layer=\"%d\" data-head=\"%d\"", col, l, u);
            attr_cell(sv, "data-label", t, row, c_label);
            attr_cell(sv, "data-score", t, row, c);
            attr_cell(sv, "data-offset", t, row, c_off);
            attr_cell(sv, "data-effect", t, row, c_eff);
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
        if (by_effect)
            hp_svg_axis(sv, &sy, true, x0, yt, nyt, 3, ylabel, 46);
        else {
            int every = ph / L >= 12 ? 1 : (12 * L + ph - 1) / ph;
            hp_text_printf(sv, "<g class=\"axis\" stroke=\"#444\">\n<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>\n",
                           x0, y0, x0, y0 + ph);
            for (int l = 0; l < L; l += every)
                hp_text_printf(sv, "<text x=\"%d\" y=\"%.1f\" stroke=\"none\" text-anchor=\"end\" "
                                   "dominant-baseline=\"middle\">%d</text>\n",
                               x0 - 6, hp_scale_map(&sy, l + 0.5), l);
            hp_text_printf(sv, "<text class=\"axis-label\" stroke=\"none\" text-anchor=\"middle\" "
                               "transform=\"translate(%d %d) rotate(-90)\">layer</text>\n"
                               "</g>\n", x0 - 40, y0 + ph / 2);
        }
        hp_svg_axis(sv, &sx, false, y0 + ph, xt, nxt, 3, rp->unit, 36);
        hp_text_add(sv, "</g>\n");
    }
    hp_svg_close(sv);

    struct hp_text *cp = &sec->caption;
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
                    "head has is not drawn. Hover a point for its head and numbers.</p>\n");
    if (r->role_studies->n_rows > 1) {
        hp_text_add(cp, "<p class=\"note\">The sweep's other roles studies (");
        for (int i = 1; i < r->role_studies->n_rows; i++) {
            if (i > 1)
                hp_text_add(cp, ", ");
            hp_text_escape(cp, tcell(r->role_studies, i, 0));
        }
        hp_text_add(cp, ") are not drawn: <code>headprune query roles --study NAME</code> lists one.</p>\n");
    }
    caption_source(cp, r, "roles", r->roles_study, t);
    free(at);
    return HP_OK;
}

static enum hp_status make_roles(struct report *r, struct section *sec)
{
    enum hp_status s = roles_read(r);
    if (s != HP_OK)
        return s;
    if (!r->roles_schema) {
        hp_text_add(&sec->note, "Left out: the database predates head roles (its schema has no roles tables); a "
                                "<code>roles</code> study in a plan run with this version computes them "
                                "(previous-token, induction, first-token and other scores of each head).");
        return HP_OK;
    }
    if (!r->roles) {
        left_out(r, sec, "roles study",
                 "<code>- roles</code> in the plan computes each head's previous-token, induction, first-token and "
                 "other scores, drawn here against its effect in a <code>single</code> study");
        return HP_OK;
    }
    return draw_roles(r, sec);
}

// --- the figures, in the order the page shows them -------------------------------------

static const struct figure_kind {
    const char *id;    // the section's anchor
    const char *title; // its heading
    enum hp_status (*make)(struct report *r, struct section *sec);
} figure_kinds[] = {
    {"heatmap", "Single-head effects", make_heatmap},
    {"heatmap-kv", "Single KV-group effects", make_heatmap_kv},
    {"curves", "Pruning curves", make_curves},
    {"redundancy", "Redundancy per layer", make_redundancy},
    {"pairs", "Pair interactions", make_pairs},
    {"roles", "Roles against effect", make_roles},
};
#define N_KINDS ((int)(sizeof figure_kinds / sizeof *figure_kinds))

// --- what was run ----------------------------------------------------------------

// A row of the table: its heading and the escaped text of the fields given, joined by sep.
static void run_row(struct hp_text *h, const char *head, const char *text)
{
    hp_text_printf(h, "<tr><th>%s</th><td>", head);
    hp_text_escape(h, text);
    hp_text_add(h, "</td></tr>\n");
}

/* A row whose text holds paths, as long as they are: built in a text of its own, then escaped. */
static void run_row_paths(struct hp_text *h, const char *head, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void run_row_paths(struct hp_text *h, const char *head, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *text = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!text) {
        h->nomem = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(text, (size_t)n + 1, fmt, ap);
    va_end(ap);
    run_row(h, head, text);
    free(text);
}

static void run_section(const struct report *r, struct hp_text *h)
{
    char buf[1024];
    hp_text_add(h, "<section id=\"run\">\n<h2>What was run</h2>\n<table class=\"run\">\n");
    snprintf(buf, sizeof buf, "%s (sweep %s), started %s, last written %s", info_text(r, "sweep_name"),
             info_text(r, "sweep_id"), info_text(r, "sweep_created"), info_text(r, "sweep_updated"));
    run_row(h, "Sweep", buf);
    run_row(h, "Database", r->o->db_path);
    run_row_paths(h, "Model", "%s (%s): %d layers x %d heads, %s KV heads, d_head %s, %s parameters",
                  info_text(r, "model_path"), info_text(r, "model_type"), r->n_layers, r->n_heads,
                  info_text(r, "n_kv_heads"), info_text(r, "d_head"), info_text(r, "n_params"));
    run_row(h, "Model digest", info_text(r, "model_digest"));
    run_row_paths(h, "Data", "%s: %s sequences of %s tokens", info_text(r, "data_path"), info_text(r, "n_seqs"),
                  info_text(r, "seq_len"));
    run_row(h, "Data digest", info_text(r, "data_digest"));
    run_row_paths(h, "Plan", "%s (%s; digest %s)", info_text(r, "plan_name"), info_text(r, "plan_path"),
                  info_text(r, "plan_digest"));
    run_row(h, "Ablation", info_text(r, "ablation"));
    snprintf(buf, sizeof buf, "%s (%s); baseline %s", info_text(r, "metric"), hp_metric_effect_text(r->m),
             info_text(r, "baseline"));
    run_row(h, "Metric", buf);
    snprintf(buf, sizeof buf, "%s finished variants, evaluated %s to %s, %.1f s of evaluation in all",
             info_text(r, "results"), info_text(r, "first_result"), info_text(r, "last_result"),
             isfinite(info_num(r, "wall_s")) ? info_num(r, "wall_s") : 0.0);
    run_row(h, "Results", buf);
    run_row(h, "Engine version", info_text(r, "engine_versions"));
    run_row(h, "Numeric version", info_text(r, "numeric_versions"));
    run_row(h, "BLIS kernel", info_text(r, "kernels"));
    snprintf(buf, sizeof buf, "%s to %s", info_text(r, "threads_min"), info_text(r, "threads_max"));
    run_row(h, "Threads", buf);
    run_row(h, "Hosts", info_text(r, "hosts"));
    hp_text_add(h, "</table>\n<h3>Studies</h3>\n<table class=\"run\">\n<tr><th>study</th><th>kind</th><th>units</th>"
                   "<th>jobs</th></tr>\n");
    const struct hp_table *t = r->studies;
    for (int i = 0; i < t->n_rows; i++) {
        hp_text_add(h, "<tr><td>");
        hp_text_escape(h, tcell(t, i, tcol(t, "study")));
        hp_text_add(h, "</td><td>");
        hp_text_escape(h, tcell(t, i, tcol(t, "kind")));
        if (*tcell(t, i, tcol(t, "rank"))) {
            hp_text_add(h, ", ");
            hp_text_escape(h, tcell(t, i, tcol(t, "rank")));
            hp_text_add(h, "-ranked");
        }
        hp_text_printf(h, "</td><td>%s</td><td>", tint(t, i, tcol(t, "kv")) == 1 ? "KV groups" : "heads");
        hp_text_escape(h, tcell(t, i, tcol(t, "jobs")));
        hp_text_add(h, "</td></tr>\n");
    }
    // roles studies run no job: one unmasked pass each (studies lists those that run jobs or score units)
    for (int i = 0; r->role_studies && i < r->role_studies->n_rows; i++) {
        hp_text_add(h, "<tr><td>");
        hp_text_escape(h, tcell(r->role_studies, i, 0));
        hp_text_add(h, "</td><td>roles</td><td>heads</td><td>none (one unmasked pass)</td></tr>\n");
    }
    hp_text_add(h, "</table>\n<h3>Plan</h3>\n<pre class=\"plan\">");
    hp_text_escape(h, info_text(r, "plan_text"));
    hp_text_add(h, "</pre>\n</section>\n");
}

// --- the page ----------------------------------------------------------------------

static const char STYLE[] =
    "body{font:15px/1.45 system-ui,'Segoe UI',Roboto,'DejaVu Sans',Arial,sans-serif;color:#222;"
    "max-width:1000px;margin:0 auto;padding:0 16px 48px;background:#fff}\n"
    "h1{font-size:1.5em;margin:1em 0 .2em}h2{font-size:1.2em;margin:2em 0 .4em;padding-bottom:.2em;"
    "border-bottom:1px solid #ddd}h3{font-size:1em;margin:1.4em 0 .4em}\n"
    "p{margin:.4em 0}.lead{color:#444}.source{color:#555;font-size:.9em}.note{color:#555;font-style:italic}\n"
    "code{font-family:ui-monospace,'DejaVu Sans Mono',monospace;font-size:.9em;background:#f3f3f3;"
    "padding:0 3px;border-radius:3px;overflow-wrap:anywhere}\n"
    "svg.figure{display:block;max-width:100%;height:auto;margin:.6em 0}\n"
    ".figs{display:flex;flex-wrap:wrap;gap:8px 24px;align-items:flex-start}\n"
    "nav ul{padding-left:1.2em;margin:.3em 0}nav li.left-out{color:#777}\n"
    "table.run{border-collapse:collapse;font-size:.92em;width:100%}table.run th,table.run td{text-align:left;"
    "vertical-align:top;padding:3px 10px 3px 0;border-bottom:1px solid #eee;overflow-wrap:anywhere}"
    "table.run th{white-space:nowrap;font-weight:600;width:11em}\n"
    "pre.plan{background:#f6f6f6;padding:10px;font-size:.85em;white-space:pre-wrap;overflow-wrap:anywhere}\n";

static void page(struct report *r, const struct section *secs, struct hp_text *h)
{
    const char *name = info_text(r, "sweep_name");
    hp_text_add(h, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                   "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
                   "style-src 'unsafe-inline'\">\n"
                   "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
                   "<meta name=\"generator\" content=\"headprune " HP_VERSION "\">\n<title>headprune report: ");
    hp_text_escape(h, name);
    hp_text_printf(h, " (sweep %lld)</title>\n<style>\n%s</style>\n</head>\n<body>\n<header>\n<h1>headprune report: ",
                   r->sweep, STYLE);
    hp_text_escape(h, name);
    hp_text_printf(h, "</h1>\n<p class=\"lead\">Sweep %lld of <code>", r->sweep);
    hp_text_escape(h, r->o->db_path);
    hp_text_add(h, "</code>: <code>");
    hp_text_escape(h, info_text(r, "model_path"));
    hp_text_printf(h, "</code> (%d layers x %d heads) on <code>", r->n_layers, r->n_heads);
    hp_text_escape(h, info_text(r, "data_path"));
    hp_text_add(h, "</code>, ");
    hp_text_escape(h, info_text(r, "ablation"));
    hp_text_printf(h, " ablation, measured by %s (baseline ", r->mname);
    hp_text_escape(h, info_text(r, "baseline"));
    hp_text_printf(h, " %s). Hover a figure's marks for their numbers.</p>\n</header>\n<nav>\n<ul>\n", r->unit);
    for (int k = 0; k < N_KINDS; k++) {
        if (secs[k].not_applicable)
            continue;
        bool drawn = secs[k].n_figs > 0;
        hp_text_printf(h, "<li%s><a href=\"#%s\">%s</a>%s</li>\n", drawn ? "" : " class=\"left-out\"",
                       figure_kinds[k].id, figure_kinds[k].title, drawn ? "" : " (left out)");
    }
    hp_text_add(h, "<li><a href=\"#run\">What was run</a></li>\n</ul>\n</nav>\n<main>\n");
    for (int k = 0; k < N_KINDS; k++) {
        const struct section *sec = &secs[k];
        if (sec->not_applicable)
            continue;
        hp_text_printf(h, "<section id=\"%s\">\n<h2>%s</h2>\n", figure_kinds[k].id, figure_kinds[k].title);
        if (sec->n_figs == 0) {
            hp_text_printf(h, "<p class=\"note left-out\">%s</p>\n</section>\n", sec->note.s ? sec->note.s : "");
            continue;
        }
        if (sec->caption.s)
            hp_text_add(h, sec->caption.s);
        hp_text_add(h, "<div class=\"figs\">\n");
        for (int i = sec->fig0; i < sec->fig0 + sec->n_figs; i++)
            if (r->figs[i].svg.s)
                hp_text_add(h, r->figs[i].svg.s);
        hp_text_add(h, "</div>\n</section>\n");
    }
    run_section(r, h);
    hp_text_add(h, "</main>\n<footer>\n<p class=\"source\">Written by headprune " HP_VERSION
                   " from the database alone; this page loads nothing: no scripts, fonts or images.</p>\n"
                   "</footer>\n</body>\n</html>\n");
}

// --- files: written whole or not at all ---------------------------------------------------

// A file staged beside its destination: written and synced to tmp, not yet renamed.
struct staged {
    char *dst, *tmp;
};

static void unstage(struct staged *f, int n)
{
    for (int i = 0; i < n; i++) {
        if (f[i].tmp)
            unlink(f[i].tmp);
        free(f[i].dst), free(f[i].tmp);
        f[i].dst = f[i].tmp = NULL;
    }
}

// The folder of path, a fresh string (free() it), NULL when out of memory.
static char *folder_of(const char *path)
{
    char *tmp = strdup(path), *dir = tmp ? strdup(dirname(tmp)) : NULL;
    free(tmp);
    return dir;
}

static enum hp_status write_fail(const char *path, int e, struct hp_error *err)
{
    char *d = folder_of(path);
    enum hp_status st;
    if (!d)
        st = hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
    else if (e == ENOENT || e == ENOTDIR)
        st = hp_fail(err, HP_ERR_IO, "%s: folder '%s' does not exist (create it first)", path, d);
    else if (e == EACCES || e == EPERM || e == EROFS)
        st = hp_fail(err, HP_ERR_IO, "%s: cannot write in folder '%s' (%s; choose another place)", path, d,
                     hp_strerror(e));
    else if (e == ENOSPC || e == EFBIG || e == EDQUOT)
        st = hp_fail(err, HP_ERR_IO, "%s: cannot write (%s; nothing was written)", path, hp_strerror(e));
    else
        st = hp_fail(err, HP_ERR_IO, "%s: cannot write (%s)", path, hp_strerror(e));
    free(d);
    return st;
}

/* Write n bytes of data to a new temporary file beside dst (made with the
 * mode a new file gets, 0666 less the umask) and sync it; *f then names both. */
static enum hp_status stage(const char *dst, const char *data, size_t n, struct staged *f, struct hp_error *err)
{
    static unsigned counter;
    f->dst = strdup(dst);
    size_t len = strlen(dst) + 64;
    f->tmp = malloc(len);
    if (!f->dst || !f->tmp) {
        free(f->dst), free(f->tmp);
        f->dst = f->tmp = NULL;
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", dst);
    }
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 100; tries++) {
        snprintf(f->tmp, len, "%s.tmp-%ld-%u", dst, (long)getpid(), counter++);
        fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        int e = errno;
        free(f->tmp), free(f->dst);
        f->dst = f->tmp = NULL;
        return write_fail(dst, e, err);
    }
    size_t o = 0;
    int e = 0;
    while (o < n) {
        ssize_t w = write(fd, data + o, n - o);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            e = w < 0 ? errno : EIO;
            break;
        }
        o += (size_t)w;
    }
    if (!e && fsync(fd) != 0 && errno != EINVAL && errno != EROFS)
        e = errno;
    if (close(fd) != 0 && !e)
        e = errno;
    if (e) {
        unlink(f->tmp);
        free(f->tmp), free(f->dst);
        f->dst = f->tmp = NULL;
        return write_fail(dst, e, err);
    }
    return HP_OK;
}

/* Rename every staged file onto its destination. A failure part-way leaves
 * whole files only: those renamed are complete, the rest are removed. */
static enum hp_status commit(struct staged *f, int n, struct hp_error *err)
{
    for (int i = 0; i < n; i++) {
        if (rename(f[i].tmp, f[i].dst) != 0) {
            enum hp_status s = write_fail(f[i].dst, errno, err);
            unstage(f + i, n - i);
            return s;
        }
        free(f[i].tmp);
        f[i].tmp = NULL;
    }
    unstage(f, n);
    return HP_OK;
}

// True when a and b name one existing file.
static bool same_file(const char *a, const char *b)
{
    struct stat x, y;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

// --out and --svg checked before the database is read: a mistake there costs no wait.
static enum hp_status check_outputs(const struct hp_report_opts *o, bool *made_dir, struct hp_error *err)
{
    *made_dir = false;
    struct stat sb;
    if (!*o->out)
        return hp_fail(err, HP_ERR_ARG, "report: the output path is empty (name a file)");
    if (stat(o->out, &sb) == 0 && S_ISDIR(sb.st_mode))
        return hp_fail(err, HP_ERR_IO, "%s: is a folder (name the HTML file to write)", o->out);
    if (same_file(o->out, o->db_path))
        return hp_fail(err, HP_ERR_ARG, "%s: is the database itself (write the report to another file)", o->out);
    char *d = folder_of(o->out);
    enum hp_status st = HP_OK;
    if (!d)
        st = hp_fail(err, HP_ERR_NOMEM, "report: out of memory");
    else if (stat(d, &sb) != 0 || !S_ISDIR(sb.st_mode))
        st = errno == ENAMETOOLONG ? write_fail(o->out, errno, err)
                                   : hp_fail(err, HP_ERR_IO, "%s: folder '%s' does not exist (create it first)", o->out, d);
    else if (access(d, W_OK) != 0)
        st = write_fail(o->out, errno, err);
    free(d);
    if (st != HP_OK)
        return st;
    if (!o->svg_dir)
        return HP_OK;
    if (!*o->svg_dir)
        return hp_fail(err, HP_ERR_ARG, "report: the SVG folder is empty (name a folder)");
    if (stat(o->svg_dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            return hp_fail(err, HP_ERR_IO, "%s: is not a folder (name a folder for the SVG files)", o->svg_dir);
        if (access(o->svg_dir, W_OK) != 0)
            return hp_fail(err, HP_ERR_IO, "%s: cannot write in this folder (%s; choose another)", o->svg_dir,
                           hp_strerror(errno));
        return HP_OK;
    }
    if (mkdir(o->svg_dir, 0777) != 0) {
        int e = errno;
        if ((e == ENOENT || e == ENOTDIR) && (d = folder_of(o->svg_dir))) {
            st = hp_fail(err, HP_ERR_IO, "%s: cannot make the SVG folder: folder '%s' does not exist (create it "
                         "first)", o->svg_dir, d);
            free(d);
            return st;
        }
        return hp_fail(err, HP_ERR_IO, "%s: cannot make the SVG folder (%s)", o->svg_dir, hp_strerror(e));
    }
    *made_dir = true;
    return HP_OK;
}

// --- entry -----------------------------------------------------------------------

// The sweep's shape, metric and baseline from what was run (the query checked their ranges).
static enum hp_status report_resolve(struct report *r)
{
    r->sweep = (long long)info_num(r, "sweep_id");
    double L = info_num(r, "n_layers"), H = info_num(r, "n_heads"), K = info_num(r, "n_kv_heads");
    r->n_layers = isfinite(L) ? (int)L : 0;
    r->n_heads = isfinite(H) ? (int)H : 0;
    r->n_kv_heads = isfinite(K) && K >= 1 && K <= H && fmod(H, K) == 0 ? (int)K : 0;
    r->base = info_num(r, "baseline");
    if (r->n_layers < 1 || r->n_heads < 1 || !hp_metric_parse(info_text(r, "metric"), &r->m))
        return hp_fail(r->err, HP_ERR_FORMAT, "%s: sweep %lld's model shape or metric is unreadable (a damaged "
                       "database?)", r->o->db_path, r->sweep);
    r->mname = hp_metric_name(r->m);
    r->unit = hp_metric_unit(r->m);
    return HP_OK;
}

enum hp_status hp_report_write(const struct hp_report_opts *o, struct hp_report_summary *sum, struct hp_error *err)
{
    if (sum)
        memset(sum, 0, sizeof *sum);
    if (!o || !o->db_path || !o->out)
        return hp_fail(err, HP_ERR_ARG, "report: a database and an output file are needed");
    if (!isfinite(o->eps) || o->eps < 0)
        return hp_fail(err, HP_ERR_ARG, "report: eps must be a finite number >= 0");
    if (o->sweep_id < 0)
        return hp_fail(err, HP_ERR_ARG, "report: a sweep id must be positive (0 = the newest)");
    bool made_dir = false;
    enum hp_status s = check_outputs(o, &made_dir, err);
    if (s != HP_OK)
        return s;

    struct report r = {.o = o, .err = err};
    struct section secs[N_KINDS];
    memset(secs, 0, sizeof secs);
    struct hp_text html = {0};
    struct staged *files = NULL;
    int n_files = 0;
    s = hp_query_reader_open(o->db_path, o->timeout_s, &r.rd, err);
    if (s == HP_OK)
        s = hp_query_run_info(r.rd, o->sweep_id, &r.info, err);
    if (s == HP_OK)
        s = report_resolve(&r);
    if (s == HP_OK)
        s = hp_query_studies(r.rd, r.sweep, &r.studies, err);
    for (int k = 0; k < N_KINDS && s == HP_OK; k++) {
        secs[k].fig0 = r.n_figs;
        s = figure_kinds[k].make(&r, &secs[k]);
        secs[k].n_figs = r.n_figs - secs[k].fig0;
    }
    // everything is read: the snapshot can go before the files are written
    hp_query_reader_close(r.rd);
    r.rd = NULL;
    if (s == HP_OK) {
        page(&r, secs, &html);
        bool nomem = r.nomem || html.nomem;
        for (int k = 0; k < N_KINDS; k++)
            nomem |= secs[k].caption.nomem || secs[k].note.nomem;
        for (int i = 0; i < r.n_figs; i++)
            nomem |= r.figs[i].svg.nomem || !r.figs[i].svg.s;
        if (nomem)
            s = hp_fail(err, HP_ERR_NOMEM, "report: out of memory");
    }
    if (s == HP_OK && !(files = calloc((size_t)r.n_figs + 1, sizeof *files)))
        s = hp_fail(err, HP_ERR_NOMEM, "report: out of memory");
    // each SVG as its own file (an XML declaration before the very element the page shows), then the page
    for (int i = 0; s == HP_OK && o->svg_dir && i < r.n_figs; i++) {
        struct hp_text one = {0};
        hp_text_add(&one, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        hp_text_add(&one, r.figs[i].svg.s);
        char *path = malloc(strlen(o->svg_dir) + strlen(r.figs[i].id) + 8);
        if (one.nomem || !path)
            s = hp_fail(err, HP_ERR_NOMEM, "report: out of memory");
        else {
            snprintf(path, strlen(o->svg_dir) + strlen(r.figs[i].id) + 8, "%s/%s.svg", o->svg_dir, r.figs[i].id);
            s = stage(path, one.s, one.n, &files[n_files], err);
            n_files += s == HP_OK;
        }
        free(path);
        hp_text_free(&one);
    }
    struct staged page_file = {0};
    if (s == HP_OK)
        s = stage(o->out, html.s, html.n, &page_file, err);
    if (s == HP_OK) {
        int n_svg = n_files;
        s = commit(files, n_files, err);
        n_files = 0;
        if (s == HP_OK)
            s = commit(&page_file, 1, err);
        else
            unstage(&page_file, 1);
        if (s == HP_OK && sum) {
            sum->sweep_id = r.sweep;
            sum->n_figures = r.n_figs;
            sum->n_svg = n_svg;
            for (int k = 0; k < N_KINDS; k++)
                sum->n_left_out += !secs[k].not_applicable && secs[k].n_figs == 0;
        }
    }
    if (files)
        unstage(files, n_files);
    free(files);
    if (s != HP_OK && made_dir)
        rmdir(o->svg_dir); // only when empty: it was made by this call
    hp_text_free(&html);
    for (int k = 0; k < N_KINDS; k++) {
        hp_text_free(&secs[k].caption);
        hp_text_free(&secs[k].note);
    }
    for (int i = 0; i < r.n_figs; i++)
        hp_text_free(&r.figs[i].svg);
    free(r.figs);
    hp_table_free(r.info);
    hp_table_free(r.studies);
    hp_table_free(r.role_studies);
    hp_table_free(r.roles);
    return s;
}
