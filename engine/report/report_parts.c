/*
 * report_parts.c -- what every figure of the report uses: the fields of what
 * was run, the sweep's studies by kind, a new figure, the line of a figure
 * left out, a caption's source line, a cell as an attribute, an SVG's own
 * heading, and the head roles (read once: the heatmap's tooltips and the
 * roles figure both use them).
 *
 * Part of the report family (report.h). Calls nothing else of the
 * family. Must not: write to the database, compute effects, print, or exit.
 */
#define _POSIX_C_SOURCE 200809L

#include "report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

// The value of field name of what was run, "" when absent.
const char *hr_info_text(const struct report *r, const char *name)
{
    for (int i = 0; i < r->info->n_rows; i++)
        if (strcmp(tcell(r->info, i, 0), name) == 0)
            return tcell(r->info, i, 1);
    return "";
}

double hr_info_num(const struct report *r, const char *name)
{
    for (int i = 0; i < r->info->n_rows; i++)
        if (strcmp(tcell(r->info, i, 0), name) == 0)
            return tval(r->info, i, 1);
    return NAN;
}

// The sweep's first study of kind (plan order) whose kv is kv (-1: either), or NULL.
const char *hr_study_of(const struct report *r, const char *kind, int kv)
{
    const struct hp_table *t = r->studies;
    int ck = tcol(t, "kind"), ckv = tcol(t, "kv"), cs = tcol(t, "study");
    for (int i = 0; i < t->n_rows; i++)
        if (strcmp(tcell(t, i, ck), kind) == 0 && (kv < 0 || tint(t, i, ckv) == kv))
            return tcell(t, i, cs);
    return NULL;
}

// The studies table's rank of study ("exact", "gradient"; "" when none).
const char *hr_study_rank(const struct report *r, const char *study)
{
    const struct hp_table *t = r->studies;
    int cs = tcol(t, "study"), cr = tcol(t, "rank");
    for (int i = 0; i < t->n_rows; i++)
        if (strcmp(tcell(t, i, cs), study) == 0)
            return tcell(t, i, cr);
    return "";
}

// A new figure (its svg to be drawn by the caller), or NULL when out of memory.
struct fig *hr_fig_new(struct report *r, const char *id)
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
void hr_left_out(const struct report *r, struct section *sec, const char *what, const char *fix)
{
    hp_text_printf(&sec->note, "Left out: sweep %lld has no %s; %s.", r->sweep, what, fix);
}

// "Read from <code>headprune query KIND --sweep N[ --study S]</code>: " and the query's note, escaped.
void hr_caption_source(struct hp_text *c, const struct report *r, const char *kind, const char *study,
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
void hr_attr_cell(struct hp_text *s, const char *name, const struct hp_table *t, int row, int col)
{
    const char *v = tcell(t, row, col);
    if (!*v)
        return;
    hp_text_printf(s, " %s=\"", name);
    hp_text_escape(s, v);
    hp_text_add(s, "\"");
}

// The SVG's own heading (a standalone file must say what it shows): title and a smaller second line.
void hr_svg_heading(struct hp_text *s, int w, const char *title, const char *sub)
{
    // as many characters as the figure's width holds (15 px bold: ~9 px a character; 12 px: ~7), the whole
    // text in the tooltip of one that is cut
    const int title_max = (w - 24) / 9 < 20 ? 20 : (w - 24) / 9, sub_max = (w - 24) / 7 < 20 ? 20 : (w - 24) / 7;
    hp_text_add(s, "<text class=\"heading\" x=\"12\" y=\"20\" font-size=\"15\" font-weight=\"600\">");
    hp_text_escape_cut(s, title, title_max);
    hp_text_add(s, "</text>\n");
    if (sub && *sub) {
        hp_text_add(s, "<text class=\"subheading\" x=\"12\" y=\"37\" fill=\"#555\">");
        if (hp_text_escape_cut(s, sub, sub_max)) {
            hp_text_add(s, "<title>");
            hp_text_escape(s, sub);
            hp_text_add(s, "</title>");
        }
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
enum hp_status hr_roles_read(struct report *r)
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
                                        "entropy",       "rare_token",     "sep_token"};
#define N_ROLE_COLS ((int)(sizeof ROLE_COLS / sizeof *ROLE_COLS))

/*
 * Index of the roles table's head rows: at[l * U + u] = the row of layer l,
 * head u, -1 where none (a pruned head, or a database that has none). U is
 * the heads a layer; rows outside (L, U) are passed over. Destructor: free.
 */
int *hr_roles_index(const struct hp_table *t, int L, int U)
{
    int *at = malloc((size_t)L * (size_t)U * sizeof *at + 1);
    if (!at)
        return NULL;
    for (int i = 0; i < L * U; i++)
        at[i] = -1;
    const int c_layer = tcol(t, "layer"), c_head = tcol(t, "head");
    for (int i = 0; i < t->n_rows - t->n_summary; i++) { // the summary row (rho) is no head
        int l = tint(t, i, c_layer), u = tint(t, i, c_head);
        if (l >= 0 && l < L && u >= 0 && u < U && at[l * U + u] < 0)
            at[l * U + u] = i;
    }
    return at;
}

// "; head roles: prev_token 0.98, ..., entropy 0.07 bits": row i's scores as the table prints them.
void hr_roles_tooltip(struct hp_text *s, const struct hp_table *t, int i)
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

// A layer's colour: viridis by depth, short of its palest yellow (points sit on white).
void hr_point_open(struct hp_text *sv, const struct report *r, int l, double x, double y)
{
    char col[8];
    hr_layer_colour(l >= 0 ? l : 0, r->n_layers, col);
    hp_svg_marker_open(sv, 0, x, y, 3.2);
    hp_text_printf(sv, " class=\"point\" fill=\"%s\" fill-opacity=\"0.85\" stroke=\"#222\" stroke-width=\"0.5\"", col);
}

bool hr_among_largest(const struct hp_table *t, int first, int n, int i, int k, int col, bool absolute)
{
    const double v = absolute ? fabs(tval(t, i, col)) : -tval(t, i, col);
    if (!isfinite(v))
        return false;
    int above = 0;
    for (int j = first; j < first + n && above < k; j++) {
        const double w = absolute ? fabs(tval(t, j, col)) : -tval(t, j, col);
        above += j != i && isfinite(w) && (w > v || (w == v && j < i));
    }
    return above < k;
}

void hr_layer_colour(int l, int L, char col[8])
{
    hp_color_sequential(L > 1 ? 0.85 * l / (L - 1) : 0.4, col);
}

// The legend: a swatch a layer (or a bar from the first to the last when there are many).
void hr_layer_legend(struct hp_text *sv, int L)
{
    char col[8];
    hp_text_add(sv, "<g class=\"legend\" font-size=\"11\">\n");
    hp_text_printf(sv, "<text x=\"12\" y=\"60\" dominant-baseline=\"middle\">colour: layer</text>\n");
    if (L <= 16) {
        for (int l = 0; l < L; l++) {
            hr_layer_colour(l, L, col);
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
}
