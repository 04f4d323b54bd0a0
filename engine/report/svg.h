/*
 * svg.h -- what the report draws with: a growing text, escaping of
 * untrusted strings for HTML and SVG, numbers, scales, ticks, axes and
 * colour-blind-safe palettes.
 *
 * Knows nothing of databases, sweeps or figures (report.c does); does no
 * I/O. Every string that did not come from this program's own literals
 * (names, paths, plan text, labels read from a database) goes through
 * hp_text_escape, never hp_text_add or hp_text_printf's %s.
 */
#ifndef HP_SVG_H
#define HP_SVG_H

#include <stdbool.h>
#include <stddef.h>

// --- text ----------------------------------------------------------------------------

/* A growing NUL-terminated text. A zeroed struct is an empty text; an
 * allocation failure is sticky (every later call is a no-op and nomem stays
 * set), so a writer checks once at the end. Destructor: hp_text_free. */
struct hp_text {
    char *s;    /* NULL until something is added */
    size_t n;   /* bytes, without the NUL */
    size_t cap;
    bool nomem;
};
void hp_text_free(struct hp_text *t);

/* Markup of this program's own (trusted) */
void hp_text_add(struct hp_text *t, const char *s);
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void hp_text_printf(struct hp_text *t, const char *fmt, ...);

/*
 * Untrusted text, safe in HTML and XML text and in quoted attribute values:
 * & < > " ' as character references; bytes that are not UTF-8, and the
 * characters XML 1.0 forbids or discourages (C0 controls but tab, newline
 * and carriage return; DEL; C1 controls; U+FFFE, U+FFFF), as U+FFFD. The
 * result is always well-formed UTF-8 that no parser takes for markup.
 */
void hp_text_escape(struct hp_text *t, const char *s);

/* The same, of at most max_chars characters: a longer text ends in "…" (never inside a character); whether it
 * was cut. */
bool hp_text_escape_cut(struct hp_text *t, const char *s, int max_chars);

// --- numbers ------------------------------------------------------------------------

/* x with sig significant digits ("%.*g"), "0" for 0 and -0, "" for NaN. buf: at least 32 bytes. */
const char *hp_num(char *buf, double x, int sig);

/* A linear map of the domain [d0, d1] onto [r0, r1] (pixels; r1 < r0 for an upward axis). */
struct hp_scale {
    double d0, d1, r0, r1;
};
double hp_scale_map(const struct hp_scale *s, double v);

/*
 * Round numbers (1, 2 or 5 times a power of ten) covering [lo, hi], about
 * `want` of them, into ticks (at most max); their count. *lo and *hi are
 * widened to the outer ticks, so an axis starts and ends on a label.
 * lo == hi is widened around the value first.
 */
int hp_ticks(double *lo, double *hi, int want, double *ticks, int max);

// --- colours (colour-blind safe) ---------------------------------------------------------

/* ColorBrewer's RdBu (diverging, colour-blind safe) at t in [-1, 1]: -1 dark
 * blue, 0 near-white, +1 dark red; "#rrggbb" into out (8 bytes). */
void hp_color_diverging(double t, char out[8]);

/*
 * A symmetric log scale for signed values, so a few large effects do not
 * wash out the many small ones: t = sign(x) log(1 + |x|/c) / log(1 + m/c)
 * with c = m / 1000 (three decades below m get a third of the scale each),
 * in [-1, 1] for |x| <= m (clamped beyond); 0 when m <= 0.
 */
double hp_symlog(double x, double m);

/* Viridis (sequential, perceptually uniform, colour-blind safe; matplotlib's
 * default) at t in [0, 1]: 0 dark purple, 0.5 teal, 1 yellow; "#rrggbb" into
 * out (8 bytes). For an ordered quantity (a layer's depth), not a signed one. */
void hp_color_sequential(double t, char out[8]);

/* Okabe and Ito's palette for categories (distinct under every common colour
 * vision deficiency), cycling: blue, vermillion, green, purple, orange, sky
 * blue, black. Static "#rrggbb". */
const char *hp_color_category(int i);

// --- SVG ------------------------------------------------------------------------------

/*
 * Open a standalone-capable <svg> of w x h px with a white background, its
 * id (this program's, e.g. "fig-heatmap") and its accessible title (escaped),
 * in a font the reader's system has (no web font is ever fetched).
 */
void hp_svg_open(struct hp_text *t, const char *id, int w, int h, const char *title);
void hp_svg_close(struct hp_text *t);

/*
 * An axis for scale sc with ticks (n): vertical (the y axis, at x = at,
 * labels to the left) or horizontal (at y = at, labels below), tick labels
 * with sig significant digits, and its label (this program's text, escaped)
 * centred beside it, `label_off` px away from the axis line.
 */
void hp_svg_axis(struct hp_text *t, const struct hp_scale *sc, bool vertical, double at, const double *ticks, int n,
                 int sig, const char *label, double label_off);

/* Light grid lines across [from, to] at each tick (perpendicular to the axis of sc). */
void hp_svg_grid(struct hp_text *t, const struct hp_scale *sc, bool vertical, double from, double to,
                 const double *ticks, int n);

/* A marker of shape `shape` (0 circle, 1 square, 2 triangle, 3 diamond, cycling) centred on (x, y),
 * radius r: always a <path>, its geometry written and the tag left open for the caller's attributes
 * (end it with "/>", or ">" ... "</path>" around a <title>). */
void hp_svg_marker_open(struct hp_text *t, int shape, double x, double y, double r);

#endif
