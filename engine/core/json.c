/*
 * json.c -- the JSON edge: every JSON text the engine reads is parsed here.
 *
 * cJSON decodes a string into a NUL-terminated char * and keeps no length,
 * so a string holding a NUL character (written \u0000, or a raw 0 byte,
 * which cJSON copies) reads as its part before the NUL: a text row "hello\u0000
 * world" as "hello", a vocabulary entry "a\u0000" as "a" (taking a's id), a key
 * "ids\u0000x" as "ids". The tree cannot tell (strlen of the cut string is all
 * it holds), so the text is scanned instead, string by string with their
 * escapes, over exactly the bytes cJSON parsed, and such a string is refused
 * with the string as written. Supporting the NUL would need every reader to
 * carry lengths; no supported format needs it (README, "Held-out data").
 *
 * Invariants: a tree handed out holds no string that a NUL cut short; other
 * escapes (an escaped backslash before "u0000" among them) are cJSON's.
 * Must not: print, or know what the JSON means (the callers do).
 */
#define _POSIX_C_SOURCE 200809L
#include "json.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

/*
 * The first NUL in s[0, n): a raw 0 byte anywhere, or a \u0000 escape inside
 * a string. *at gets its offset, *open the offset of the opening quote of the
 * string that holds it (n when it is outside every string).
 */
static bool find_nul(const char *s, size_t n, size_t *at, size_t *open)
{
    size_t q = n; /* the open string's quote, n outside strings */
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\0') {
            *at = i;
            *open = q;
            return true;
        }
        if (q == n) {
            if (s[i] == '"')
                q = i;
        } else if (s[i] == '"') {
            q = n;
        } else if (s[i] == '\\') {
            if (n - i >= 6 && memcmp(s + i + 1, "u0000", 5) == 0) {
                *at = i;
                *open = q;
                return true;
            }
            i++; /* the escaped character: a quote or a backslash does not end or escape anything */
        }
    }
    return false;
}

/* The offset of the closing quote of the string opening at s[open], n if it has none. */
static size_t string_close(const char *s, size_t n, size_t open)
{
    for (size_t i = open + 1; i < n; i++) {
        if (s[i] == '\\')
            i++;
        else if (s[i] == '"')
            return i;
    }
    return n;
}

/* i moved back to the start of the UTF-8 character holding s[i], not before lo. */
static size_t char_start(const char *s, size_t i, size_t lo)
{
    while (i > lo && ((unsigned char)s[i] & 0xC0) == 0x80)
        i--;
    return i;
}

/*
 * The string opening at s[open] as written, for a message (a long one cut to
 * a window that shows the NUL at s[at], "..." marking the cuts), raw control
 * bytes written as \u00XX so the message stays one printable line.
 */
static void quote_string(char *buf, size_t cap, const char *s, size_t n, size_t open, size_t at)
{
    enum { BEFORE = 24, WIDTH = 64 };
    size_t from = open + 1, close = string_close(s, n, open), to = close;
    if (close - from > WIDTH) { /* a long one (a text row) shows WIDTH bytes around the NUL */
        if (at - from > BEFORE)
            from = char_start(s, at - BEFORE, from);
        to = from + WIDTH > at + 6 ? from + WIDTH : at + 6; /* an escape is shown whole */
        to = to < close ? char_start(s, to, at + 1) : close;
    }
    size_t k = (size_t)snprintf(buf, cap, "\"%s", from > open + 1 ? "..." : "");
    for (size_t i = from; i < to && k + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20)
            k += (size_t)snprintf(buf + k, cap - k, "\\u%04x", c);
        else
            buf[k++] = (char)c;
    }
    snprintf(buf + k, cap - k, "%s\"", to < close ? "..." : "");
}

enum hp_status hp_json_parse(const char *file, size_t line, const char *text, size_t len, const char **end,
                             cJSON **out, struct hp_error *err)
{
    const char *stop = text;
    *out = len ? cJSON_ParseWithLengthOpts(text, len, &stop, 0) : NULL;
    if (end)
        *end = stop;
    size_t at, open, n = *out ? (size_t)(stop - text) : 0;
    if (!*out || !find_nul(text, n, &at, &open))
        return HP_OK;
    cJSON_Delete(*out);
    *out = NULL;
    /* where: a line and column, or a byte offset where lines mean nothing */
    size_t col = at + 1, ln = line;
    for (size_t i = 0; i < at; i++)
        if (text[i] == '\n') {
            ln++;
            col = at - i;
        }
    char where[32] = "", pos[48];
    if (line > 0)
        snprintf(where, sizeof where, ":%zu", ln);
    snprintf(pos, sizeof pos, line > 0 ? "column %zu" : "byte %zu of the JSON", line > 0 ? col : at);
    if (open == n)
        return hp_fail(err, HP_ERR_FORMAT, "%s%s: a NUL byte at %s, outside any string (not JSON text)", file,
                       where, pos);
    char q[160];
    quote_string(q, sizeof q, text, n, open, at);
    return hp_fail(err, HP_ERR_FORMAT,
                   "%s%s: the string %s holds a NUL character at %s (headprune would read the string only up to "
                   "it; remove or replace it)",
                   file, where, q, pos);
}
