/*
 * report.h -- the report family's private insides, shared by
 * engine/report*.c and by nothing else (others use hp_report_write in
 * headprune.h).
 *
 * The family (SQLite's where*.c + whereInt.h): report.c is the entry
 * (hp_report_write), the list of figures in page order, the page itself and
 * the files; report_parts.c holds what every figure uses (what was run, the
 * studies, a new figure, captions, tooltips, the head roles read once); one
 * file draws each group of figures: report_effects.c the effect matrices
 * (single-unit heatmaps, pair interactions), report_curves.c the curves and
 * per-layer redundancy, report_roles.c head roles against effect,
 * report_estimates.c estimates against exact effects. Calls go
 * one way: report.c calls the figures, the figures call report_parts.c.
 * Names shared across the family carry the prefix hr_ (the four table
 * accessors below are static inline); everything else in a file is static.
 *
 * A new figure: its hr_make_* function in a report_*.c file, declared
 * below, and its row in report.c's figure_kinds.
 *
 * Must not: be included outside engine/report*.c.
 */
#ifndef HP_REPORT_H
#define HP_REPORT_H

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "headprune.h"
#include "query.h"
#include "svg.h"

// A heatmap or pair matrix of more cells than this, or a figure of more layers, is left out with a
// note: no browser draws it well (and the model's shape is input: it must not size a page unchecked).
#define MAX_CELLS 65536
#define MAX_ROWS 1024

// --- tables as the queries return them -------------------------------------------

// Column named name of t, -1 when it has none (tables are read by name: a new column moves nothing).
static inline int tcol(const struct hp_table *t, const char *name)
{
    for (int c = 0; t && c < t->n_cols; c++)
        if (strcmp(t->cols[c], name) == 0)
            return c;
    return -1;
}

// A cell's text, "" when empty or the column is missing.
static inline const char *tcell(const struct hp_table *t, int r, int c)
{
    if (c < 0 || r < 0 || r >= t->n_rows)
        return "";
    const char *s = t->cells[(size_t)r * (size_t)t->n_cols + (size_t)c];
    return s ? s : "";
}

// A cell's number (exactly what its text shows), NaN when it has none.
static inline double tval(const struct hp_table *t, int r, int c)
{
    if (c < 0 || r < 0 || r >= t->n_rows)
        return NAN;
    return t->values[(size_t)r * (size_t)t->n_cols + (size_t)c];
}

// A non-negative integer cell as an int, -1 when it is none.
static inline int tint(const struct hp_table *t, int r, int c)
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

// --- what every figure uses (report_parts.c) ----------------------------------------

const char *hr_info_text(const struct report *r, const char *name); // a field of what was run, "" when absent
double hr_info_num(const struct report *r, const char *name);       // its number, NaN when absent
const char *hr_study_of(const struct report *r, const char *kind, int kv);
const char *hr_study_rank(const struct report *r, const char *study);
struct fig *hr_fig_new(struct report *r, const char *id);
void hr_left_out(const struct report *r, struct section *sec, const char *what, const char *fix);
void hr_caption_source(struct hp_text *c, const struct report *r, const char *kind, const char *study,
                       const struct hp_table *t);
void hr_attr_cell(struct hp_text *s, const char *name, const struct hp_table *t, int row, int col);
void hr_svg_heading(struct hp_text *s, int w, const char *title, const char *sub);
enum hp_status hr_roles_read(struct report *r);
int *hr_roles_index(const struct hp_table *t, int L, int U);
void hr_roles_tooltip(struct hp_text *s, const struct hp_table *t, int i);
/* Layer l of L's colour in the scatters (sequential), and the legend of it at y 55-65 of a figure. */
void hr_layer_colour(int l, int L, char col[8]);
/* A scatter's point of layer l (< 0: 0) at (x, y), opened: its marker and class, colour and stroke; the caller adds
 * its data- attributes and closes it with "><title>...</title></path>". */
void hr_point_open(struct hp_text *sv, const struct report *r, int l, double x, double y);
/* Whether row i is among the k rows [first, first + n) of t with the largest key in column col: |value| with
 * absolute, else -value (rank 1 largest); ties go to the earlier row, a NaN never is. */
bool hr_among_largest(const struct hp_table *t, int first, int n, int i, int k, int col, bool absolute);
void hr_layer_legend(struct hp_text *sv, int L);

// --- the figures: each draws its figures into r and sec, or says in sec why not -------------

enum hp_status hr_make_heatmap(struct report *r, struct section *sec);    // report_effects.c
enum hp_status hr_make_heatmap_kv(struct report *r, struct section *sec); // report_effects.c
enum hp_status hr_make_pairs(struct report *r, struct section *sec);      // report_effects.c
enum hp_status hr_make_patching(struct report *r, struct section *sec);   // report_effects.c
enum hp_status hr_make_curves(struct report *r, struct section *sec);     // report_curves.c
enum hp_status hr_make_redundancy(struct report *r, struct section *sec); // report_curves.c
enum hp_status hr_make_roles(struct report *r, struct section *sec);      // report_roles.c
enum hp_status hr_make_estimates(struct report *r, struct section *sec);  // report_estimates.c
enum hp_status hr_make_self_repair(struct report *r, struct section *sec); // report_selfrepair.c
enum hp_status hr_make_circuit(struct report *r, struct section *sec);     // report_circuit.c

#endif
