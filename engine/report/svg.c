/*
 * svg.c -- the report's drawing toolkit: a growing text, escaping, numbers,
 * scales, ticks, axes, markers and colour-blind-safe palettes
 * (svg.h says what each is for).
 *
 * Invariants: whatever hp_text_escape writes is well-formed UTF-8 with no
 * character that HTML or XML would read as markup, and no character XML 1.0
 * refuses, so a standalone SVG stays parseable whatever a database held.
 * Must not: read files or databases, print, or know what a figure shows.
 */
#define _POSIX_C_SOURCE 200809L
#include "svg.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// --- text ----------------------------------------------------------------------------

void hp_text_free(struct hp_text *t)
{
    if (!t)
        return;
    free(t->s);
    memset(t, 0, sizeof *t);
}

// Room for n more bytes and the NUL; false (and nomem) when it cannot be had.
static bool reserve(struct hp_text *t, size_t n)
{
    if (t->nomem)
        return false;
    if (t->n + n + 1 <= t->cap)
        return true;
    size_t cap = t->cap ? t->cap : 4096;
    while (cap < t->n + n + 1) {
        if (cap > SIZE_MAX / 2) {
            t->nomem = true;
            return false;
        }
        cap *= 2;
    }
    char *s = realloc(t->s, cap);
    if (!s) {
        t->nomem = true;
        return false;
    }
    t->s = s;
    t->cap = cap;
    return true;
}

static void add_n(struct hp_text *t, const char *s, size_t n)
{
    if (!reserve(t, n))
        return;
    memcpy(t->s + t->n, s, n);
    t->n += n;
    t->s[t->n] = '\0';
}

void hp_text_add(struct hp_text *t, const char *s)
{
    add_n(t, s, strlen(s));
}

void hp_text_printf(struct hp_text *t, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) {
        t->nomem = true;
        return;
    }
    if ((size_t)n < sizeof buf) {
        add_n(t, buf, (size_t)n);
        return;
    }
    // longer than the buffer: format again into the text itself
    if (!reserve(t, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(t->s + t->n, (size_t)n + 1, fmt, ap);
    va_end(ap);
    t->n += (size_t)n;
}

/*
 * The code point of the UTF-8 sequence at s (strict: no overlong forms, no
 * surrogates, nothing past U+10FFFF) and its length in *len; -1 with *len = 1
 * for a byte that does not start a valid sequence.
 */
static long utf8_next(const unsigned char *s, int *len)
{
    unsigned c = s[0];
    *len = 1;
    if (c < 0x80)
        return c;
    int n;
    long cp, min;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2, cp = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF)
        n = 3, cp = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4)
        n = 4, cp = c & 0x07, min = 0x10000;
    else
        return -1;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) // also stops at the NUL
            return -1;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return -1;
    *len = n;
    return cp;
}

// Characters a reader of the text must never get: replaced by U+FFFD.
static bool unwanted(long cp)
{
    if (cp < 0)
        return true;
    if (cp < 0x20)
        return cp != '\t' && cp != '\n' && cp != '\r';
    return (cp >= 0x7F && cp <= 0x9F) || cp == 0xFFFE || cp == 0xFFFF;
}

bool hp_text_escape_cut(struct hp_text *t, const char *s, int max_chars)
{
    if (!s)
        return false;
    const unsigned char *p = (const unsigned char *)s;
    int chars = 0;
    while (*p) {
        if (max_chars >= 0 && chars == max_chars) {
            hp_text_add(t, "\xE2\x80\xA6"); // …
            return true;
        }
        int len;
        long cp = utf8_next(p, &len);
        chars++;
        if (unwanted(cp)) {
            hp_text_add(t, "\xEF\xBF\xBD"); // U+FFFD
        } else if (cp == '&') {
            hp_text_add(t, "&amp;");
        } else if (cp == '<') {
            hp_text_add(t, "&lt;");
        } else if (cp == '>') {
            hp_text_add(t, "&gt;");
        } else if (cp == '"') {
            hp_text_add(t, "&quot;");
        } else if (cp == '\'') {
            hp_text_add(t, "&#39;");
        } else {
            add_n(t, (const char *)p, (size_t)len);
        }
        p += len;
    }
    return false;
}

void hp_text_escape(struct hp_text *t, const char *s)
{
    hp_text_escape_cut(t, s, -1);
}

// --- numbers ------------------------------------------------------------------------

const char *hp_num(char *buf, double x, int sig)
{
    if (isnan(x)) {
        buf[0] = '\0';
        return buf;
    }
    if (x == 0.0)
        x = 0.0; // no "-0"
    snprintf(buf, 32, "%.*g", sig, x);
    if (strcmp(buf, "-0") == 0)
        strcpy(buf, "0");
    return buf;
}

double hp_scale_map(const struct hp_scale *s, double v)
{
    if (s->d1 == s->d0)
        return (s->r0 + s->r1) / 2;
    return s->r0 + (v - s->d0) / (s->d1 - s->d0) * (s->r1 - s->r0);
}

int hp_ticks(double *lo, double *hi, int want, double *ticks, int max)
{
    if (!isfinite(*lo) || !isfinite(*hi) || !isfinite(*hi - *lo)) { // a forged value: any axis will do
        *lo = 0, *hi = 1;
    }
    if (*hi < *lo) {
        double x = *lo;
        *lo = *hi, *hi = x;
    }
    if (*hi == *lo) {
        double pad = *lo == 0 ? 1 : fabs(*lo) * 0.1;
        *lo -= pad, *hi += pad;
    }
    if (want < 2)
        want = 2;
    double raw = (*hi - *lo) / want;
    double mag = pow(10, floor(log10(raw)));
    double f = raw / mag;
    double step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
    double a = floor(*lo / step + 1e-9) * step, b = ceil(*hi / step - 1e-9) * step;
    int n = 0;
    for (double v = a; v <= b + step * 1e-6 && n < max; v = a + step * n) {
        ticks[n++] = fabs(v) < step * 1e-9 ? 0.0 : v;
    }
    *lo = a;
    *hi = n ? ticks[n - 1] : b;
    return n;
}

// --- colours ------------------------------------------------------------------------------

// ColorBrewer RdBu, 11 classes, from t = -1 (blue) to +1 (red).
static const unsigned char RDBU[11][3] = {
    {0x05, 0x30, 0x61}, {0x21, 0x66, 0xac}, {0x43, 0x93, 0xc3}, {0x92, 0xc5, 0xde}, {0xd1, 0xe5, 0xf0}, {0xf7, 0xf7, 0xf7},
    {0xfd, 0xdb, 0xc7}, {0xf4, 0xa5, 0x82}, {0xd6, 0x60, 0x4d}, {0xb2, 0x18, 0x2b}, {0x67, 0x00, 0x1f},
};

void hp_color_diverging(double t, char out[8])
{
    if (isnan(t))
        t = 0;
    t = t < -1 ? -1 : t > 1 ? 1 : t;
    double x = (t + 1) * 5; // 0 .. 10 over the 11 anchors
    int i = (int)floor(x);
    if (i >= 10)
        i = 9;
    double f = x - i;
    int rgb[3];
    for (int c = 0; c < 3; c++)
        rgb[c] = (int)lround(RDBU[i][c] * (1 - f) + RDBU[i + 1][c] * f);
    snprintf(out, 8, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
}

// Viridis at t = 0, 1/8, ..., 1 (matplotlib's table, every 32nd of its 256 entries).
static const unsigned char VIRIDIS[9][3] = {
    {0x44, 0x01, 0x54}, {0x47, 0x2d, 0x7b}, {0x3b, 0x52, 0x8b}, {0x2c, 0x72, 0x8e}, {0x21, 0x91, 0x8c},
    {0x28, 0xae, 0x80}, {0x5e, 0xc9, 0x62}, {0xad, 0xdc, 0x30}, {0xfd, 0xe7, 0x25},
};

void hp_color_sequential(double t, char out[8])
{
    if (isnan(t))
        t = 0;
    t = t < 0 ? 0 : t > 1 ? 1 : t;
    double x = t * 8; // 0 .. 8 over the 9 anchors
    int i = (int)floor(x);
    if (i >= 8)
        i = 7;
    double f = x - i;
    int rgb[3];
    for (int c = 0; c < 3; c++)
        rgb[c] = (int)lround(VIRIDIS[i][c] * (1 - f) + VIRIDIS[i + 1][c] * f);
    snprintf(out, 8, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
}

double hp_symlog(double x, double m)
{
    if (!(m > 0) || isnan(x))
        return 0;
    double c = m / 1000, v = log1p(fabs(x) / c) / log1p(m / c);
    v = v > 1 ? 1 : v;
    return x < 0 ? -v : v;
}

const char *hp_color_category(int i)
{
    static const char *const okabe_ito[] = {"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9",
                                            "#000000"};
    int n = (int)(sizeof okabe_ito / sizeof *okabe_ito);
    return okabe_ito[((i % n) + n) % n];
}

// --- SVG ----------------------------------------------------------------------------------

void hp_svg_open(struct hp_text *t, const char *id, int w, int h, const char *title)
{
    hp_text_printf(t,
                   "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"%s\" class=\"figure\" viewBox=\"0 0 %d %d\" "
                   "width=\"%d\" height=\"%d\" role=\"img\" font-family=\"system-ui, 'Segoe UI', Roboto, "
                   "'DejaVu Sans', Arial, sans-serif\" font-size=\"12\" fill=\"#222\">\n<title>",
                   id, w, h, w, h);
    hp_text_escape(t, title);
    hp_text_printf(t, "</title>\n<rect class=\"background\" x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" "
                      "fill=\"#ffffff\"/>\n", w, h);
}

void hp_svg_close(struct hp_text *t)
{
    hp_text_add(t, "</svg>\n");
}

void hp_svg_axis(struct hp_text *t, const struct hp_scale *sc, bool vertical, double at, const double *ticks, int n,
                 int sig, const char *label, double label_off)
{
    char b[32];
    double a = sc->r0, z = sc->r1;
    hp_text_add(t, "<g class=\"axis\" stroke=\"#444\">\n");
    if (vertical)
        hp_text_printf(t, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", at, a, at, z);
    else
        hp_text_printf(t, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", a, at, z, at);
    for (int i = 0; i < n; i++) {
        double p = hp_scale_map(sc, ticks[i]);
        if (vertical)
            hp_text_printf(t, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
                              "<text x=\"%.1f\" y=\"%.1f\" stroke=\"none\" text-anchor=\"end\" "
                              "dominant-baseline=\"middle\">%s</text>\n",
                           at - 5, p, at, p, at - 8, p, hp_num(b, ticks[i], sig));
        else
            hp_text_printf(t, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
                              "<text x=\"%.1f\" y=\"%.1f\" stroke=\"none\" text-anchor=\"middle\">%s</text>\n",
                           p, at, p, at + 5, p, at + 18, hp_num(b, ticks[i], sig));
    }
    double mid = (a + z) / 2;
    if (vertical)
        hp_text_printf(t, "<text class=\"axis-label\" stroke=\"none\" text-anchor=\"middle\" "
                          "transform=\"translate(%.1f %.1f) rotate(-90)\">", at - label_off, mid);
    else
        hp_text_printf(t, "<text class=\"axis-label\" stroke=\"none\" text-anchor=\"middle\" x=\"%.1f\" y=\"%.1f\">",
                       mid, at + label_off);
    hp_text_escape(t, label);
    hp_text_add(t, "</text>\n</g>\n");
}

void hp_svg_grid(struct hp_text *t, const struct hp_scale *sc, bool vertical, double from, double to,
                 const double *ticks, int n)
{
    hp_text_add(t, "<g class=\"grid\" stroke=\"#e4e4e4\">\n");
    for (int i = 0; i < n; i++) {
        double p = hp_scale_map(sc, ticks[i]);
        if (vertical) // a y axis: horizontal lines
            hp_text_printf(t, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", from, p, to, p);
        else
            hp_text_printf(t, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", p, from, p, to);
    }
    hp_text_add(t, "</g>\n");
}

void hp_svg_marker_open(struct hp_text *t, int shape, double x, double y, double r)
{
    switch (((shape % 4) + 4) % 4) {
    case 0: // a circle as two arcs
        hp_text_printf(t, "<path d=\"M%.2f %.2fa%.2f %.2f 0 1 0 %.2f 0a%.2f %.2f 0 1 0 %.2f 0z\"", x - r, y, r, r,
                       2 * r, r, r, -2 * r);
        break;
    case 1: {
        double s = r * 0.9;
        hp_text_printf(t, "<path d=\"M%.2f %.2fh%.2fv%.2fh%.2fz\"", x - s, y - s, 2 * s, 2 * s, -2 * s);
        break;
    }
    case 2:
        hp_text_printf(t, "<path d=\"M%.2f %.2fL%.2f %.2fL%.2f %.2fz\"", x, y - 1.2 * r, x + 1.1 * r, y + 0.8 * r,
                       x - 1.1 * r, y + 0.8 * r);
        break;
    default:
        hp_text_printf(t, "<path d=\"M%.2f %.2fL%.2f %.2fL%.2f %.2fL%.2f %.2fz\"", x, y - 1.3 * r, x + 1.3 * r, y, x,
                       y + 1.3 * r, x - 1.3 * r, y);
        break;
    }
}
