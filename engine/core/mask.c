/*
 * mask.c -- masks: which attention heads and MLP blocks a variant keeps.
 *
 * A mask is a (n_layers, n_heads) row-major grid of gates, 1 = kept and
 * 0 = ablated. Specs name heads as comma-separated items:
 *   L.H      head H of layer L
 *   L.*      every head of layer L
 *   kv:L.G   every query head of layer L that reads KV head G, i.e. every h
 *            with h / (n_heads / n_kv_heads) == G
 *   mlp:L    layer L's MLP block (its output into the residual stream)
 * Whitespace around items is allowed; naming a head twice is harmless.
 *
 * Units (a query head, a KV group of them, a layer's MLP) are defined here
 * once, one row each in units[]: how many a layer has, which gates each
 * covers, their names and their "L.U" / "kv:L.U" / "mlp:L" labels. Plans, the sweep and queries use these functions rather
 * than their own arithmetic.
 *
 * Invariants: gates are exactly 0.0f or 1.0f; a parsed mask has the model's
 * n_layers and n_heads; a mask without an ablated MLP formats as it did
 * before MLPs were units. Must not: print, exit, or know anything of the
 * model beyond struct hp_model_info.
 */
#include "headprune.h"
#include "edges.h"
#include "util.h"

#include <assert.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Longest spec text echoed back in an error message.
#define ECHO_MAX 64

// --- construction ------------------------------------------------------------

struct hp_mask *hp_mask_new(int n_layers, int n_heads)
{
    // Non-positive sizes are refused like an allocation failure: there is
    // no empty mask to hand back.
    if (n_layers < 1 || n_heads < 1 ||
        (size_t)n_layers > SIZE_MAX / sizeof(float) / (size_t)n_heads)
        return NULL;
    struct hp_mask *m = malloc(sizeof *m);
    if (!m)
        return NULL;
    size_t n = (size_t)n_layers * (size_t)n_heads;
    m->n_layers = n_layers;
    m->n_heads = n_heads;
    m->gate = malloc(n * sizeof *m->gate);
    m->mlp = malloc((size_t)n_layers * sizeof *m->mlp);
    if (!m->gate || !m->mlp) {
        hp_mask_free(m);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        m->gate[i] = 1.0f;
    for (int l = 0; l < n_layers; l++)
        m->mlp[l] = 1.0f;
    m->pos = -1;
    m->n_edges = 0;
    m->edges = NULL;
    return m;
}

void hp_mask_free(struct hp_mask *m)
{
    if (!m)
        return;
    free(m->gate);
    free(m->mlp);
    free(m->edges);
    free(m);
}

bool hp_mask_copy(struct hp_mask *dst, const struct hp_mask *src)
{
    assert(dst->n_layers == src->n_layers && dst->n_heads == src->n_heads);
    if (!hp_edges_reserve(dst, src->n_edges))
        return false;
    if (src->n_edges)
        memcpy(dst->edges, src->edges, (size_t)src->n_edges * sizeof *dst->edges);
    dst->n_edges = src->n_edges;
    memcpy(dst->gate, src->gate, (size_t)src->n_layers * (size_t)src->n_heads * sizeof *dst->gate);
    memcpy(dst->mlp, src->mlp, (size_t)src->n_layers * sizeof *dst->mlp);
    dst->pos = src->pos;
    return true;
}

int hp_mask_count_mlps(const struct hp_mask *m)
{
    int k = 0;
    for (int l = 0; m && l < m->n_layers; l++)
        k += m->mlp[l] == 0.0f;
    return k;
}

bool hp_mask_has_edges(const struct hp_mask *m)
{
    return m && m->n_edges > 0;
}

bool hp_mask_has_mlp(const struct hp_mask *m)
{
    for (int l = 0; m && l < m->n_layers; l++)
        if (m->mlp[l] != 1.0f)
            return true;
    return false;
}

int hp_mask_count_ablated(const struct hp_mask *m)
{
    if (!m)
        return 0;
    size_t n = (size_t)m->n_layers * (size_t)m->n_heads;
    int k = 0;
    for (size_t i = 0; i < n; i++)
        k += m->gate[i] == 0.0f;
    return k;
}

int hp_heads_present(const struct hp_model_info *info)
{
    return info->n_layers * info->n_heads - (info->pruned ? info->n_pruned : 0);
}

int hp_mask_drop_absent(struct hp_mask *m, const struct hp_model_info *info)
{
    int n = 0;
    if (!m || !info->pruned)
        return 0;
    assert(m->n_layers == info->n_layers && m->n_heads == info->n_heads);
    for (size_t i = 0; i < (size_t)m->n_layers * (size_t)m->n_heads; i++)
        if (info->pruned[i] && m->gate[i] != 1.0f) {
            m->gate[i] = 1.0f;
            n++;
        }
    return n;
}

/* The mask's first layer with a gate that is not 1 or an edge's sender (n_layers: none). */
int hp_mask_first_changed(const struct hp_mask *m, int n_layers)
{
    if (!m)
        return n_layers;
    int first = m->n_layers;
    for (int i = 0; i < m->n_edges; i++) {
        const struct hp_node *u = &m->edges[i].from;
        const int l = u->kind == HP_NODE_EMB ? 0 : u->layer;
        first = l < first ? l : first;
    }
    for (int l = 0; l < first; l++) {
        if (m->mlp[l] != 1.0f)
            return l;
        for (int h = 0; h < m->n_heads; h++)
            if (m->gate[(size_t)l * m->n_heads + h] != 1.0f)
                return l;
    }
    return first;
}

// --- units -------------------------------------------------------------------

static const struct {
    const char *one, *many, *prefix, *word;
} units[HP_UNIT_COUNT] = {
    [HP_UNIT_HEAD] = {"head", "heads", "", "heads"},        // a query head, "L.H"
    [HP_UNIT_KV] = {"KV group", "KV groups", "kv:", "kv"},  // every query head reading one KV head, "kv:L.G"
    [HP_UNIT_MLP] = {"MLP", "MLPs", "mlp:", "mlp"},         // a layer's MLP block, "mlp:L"
};

static bool kind_ok(enum hp_unit_kind u)
{
    return (int)u >= 0 && (int)u < HP_UNIT_COUNT;
}

int hp_unit_count(const struct hp_model_info *info, enum hp_unit_kind u)
{
    switch (u) {
    case HP_UNIT_HEAD: return info->n_heads;
    case HP_UNIT_KV: return info->n_kv_heads > 0 ? info->n_kv_heads : info->n_heads; // none declared: no GQA
    case HP_UNIT_MLP: return 1;
    case HP_UNIT_COUNT: break;
    }
    return 0;
}

int hp_unit_width(const struct hp_model_info *info, enum hp_unit_kind u)
{
    switch (u) {
    case HP_UNIT_HEAD: return 1;
    case HP_UNIT_KV: {
        const int n_kv = hp_unit_count(info, HP_UNIT_KV);
        return info->n_heads % n_kv == 0 ? info->n_heads / n_kv : 0;
    }
    case HP_UNIT_MLP:
    case HP_UNIT_COUNT: break;
    }
    return 0;
}

bool hp_unit_pruned(const struct hp_model_info *info, enum hp_unit_kind u, int layer, int unit)
{
    const int per = hp_unit_width(info, u);
    if (!info->pruned || per == 0)
        return false; /* an MLP is never pruned */
    for (int h = unit * per; h < (unit + 1) * per; h++)
        if (!info->pruned[(size_t)layer * info->n_heads + h])
            return false;
    return true;
}

const char *hp_unit_name(enum hp_unit_kind u, bool plural)
{
    if (!kind_ok(u))
        return "unit";
    return plural ? units[u].many : units[u].one;
}

const char *hp_unit_word(enum hp_unit_kind u)
{
    return kind_ok(u) ? units[u].word : "unknown";
}

bool hp_unit_parse(const char *word, enum hp_unit_kind *out)
{
    for (int u = 0; word && u < HP_UNIT_COUNT; u++)
        if (strcmp(word, units[u].word) == 0) {
            *out = (enum hp_unit_kind)u;
            return true;
        }
    return false;
}

int hp_unit_label(char *buf, size_t size, enum hp_unit_kind u, int layer, int unit)
{
    if (u == HP_UNIT_MLP)
        return snprintf(buf, size, "%s%d", units[u].prefix, layer);
    return snprintf(buf, size, "%s%d.%d", kind_ok(u) ? units[u].prefix : "?", layer, unit);
}

void hp_mask_set_unit(struct hp_mask *m, const struct hp_model_info *info, enum hp_unit_kind u, int layer, int unit,
                      float g)
{
    assert(layer >= 0 && layer < m->n_layers);
    if (u == HP_UNIT_MLP) {
        m->mlp[layer] = g;
        return;
    }
    int per = hp_unit_width(info, u);
    assert(per > 0 && (unit + 1) * per <= m->n_heads);
    float *row = m->gate + (size_t)layer * (size_t)m->n_heads;
    for (int h = unit * per; h < (unit + 1) * per; h++)
        row[h] = g;
}

bool hp_mask_unit_ablated(const struct hp_mask *m, const struct hp_model_info *info, enum hp_unit_kind u, int layer,
                          int unit)
{
    assert(layer >= 0 && layer < m->n_layers);
    if (u == HP_UNIT_MLP)
        return m->mlp[layer] == 0.0f;
    const int per = hp_unit_width(info, u);
    assert(per > 0 && (unit + 1) * per <= m->n_heads);
    const float *row = m->gate + (size_t)layer * (size_t)m->n_heads;
    for (int h = unit * per; h < (unit + 1) * per; h++)
        if (row[h] != 0.0f)
            return false;
    return true;
}

// --- parsing ---------------------------------------------------------------

// A decimal number as written in the spec; v is capped at INT_MAX + 1 so an
// overlong number is simply out of range, while txt echoes what was typed.
struct num {
    long long v;
    const char *txt;
    int len;
};

static bool parse_num(const char *s, size_t n, size_t *i, struct num *out)
{
    size_t start = *i;
    long long v = 0;
    while (*i < n && s[*i] >= '0' && s[*i] <= '9') {
        if (v <= INT_MAX)
            v = v * 10 + (s[*i] - '0');
        (*i)++;
    }
    if (*i == start)
        return false;
    out->v = v > INT_MAX ? (long long)INT_MAX + 1 : v;
    out->txt = s + start;
    out->len = (int)(*i - start);
    return true;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/*
 * Apply one item, s[0..n) with surrounding whitespace already trimmed, to m:
 * every unit it names goes to gate 0.
 */
static enum hp_status apply_item(const char *s, size_t n, const struct hp_model_info *info,
                                 struct hp_mask *m, struct hp_error *err)
{
    int shown = n > ECHO_MAX ? ECHO_MAX : (int)n;
    const char *more = n > ECHO_MAX ? "..." : "";
    char range[64];
    size_t i = 0;
    bool kv = n >= 3 && memcmp(s, "kv:", 3) == 0, mlp = n >= 4 && memcmp(s, "mlp:", 4) == 0;
    if (kv)
        i = 3;
    if (mlp)
        i = 4;

    struct num layer, sub;
    bool whole = false;
    if (mlp) {
        if (!parse_num(s, n, &i, &layer) || i != n)
            goto syntax;
        if (layer.v >= info->n_layers) {
            hp_range_text(range, sizeof range, "layers", "layer", info->n_layers);
            return hp_fail(err, HP_ERR_ARG, "mask '%.*s%s': layer %.*s does not exist (model has %s)", shown, s,
                           more, layer.len, layer.txt, range);
        }
        m->mlp[layer.v] = 0.0f;
        return HP_OK;
    }
    if (!parse_num(s, n, &i, &layer) || i >= n || s[i] != '.')
        goto syntax;
    i++;
    if (!kv && i + 1 == n && s[i] == '*') {
        whole = true;
        i++;
    } else if (!parse_num(s, n, &i, &sub)) {
        goto syntax;
    }
    if (i != n)
        goto syntax;

    if (layer.v >= info->n_layers) {
        hp_range_text(range, sizeof range, "layers", "layer", info->n_layers);
        return hp_fail(err, HP_ERR_ARG, "mask '%.*s%s': layer %.*s does not exist (model has %s)",
                    shown, s, more, layer.len, layer.txt, range);
    }
    float *row = m->gate + (size_t)layer.v * (size_t)m->n_heads;
    if (whole) {
        for (int h = 0; h < info->n_heads; h++)
            row[h] = 0.0f;
        return HP_OK;
    }
    if (!kv) {
        if (sub.v >= info->n_heads) {
            hp_range_text(range, sizeof range, hp_unit_name(false, true), hp_unit_name(false, false), info->n_heads);
            return hp_fail(err, HP_ERR_ARG, "mask '%.*s%s': head %.*s does not exist (layer "
                        "%lld has %s)", shown, s, more, sub.len, sub.txt, layer.v, range);
        }
        row[sub.v] = 0.0f;
        return HP_OK;
    }

    int n_kv = hp_unit_count(info, true);
    if (hp_unit_width(info, true) == 0)
        return hp_fail(err, HP_ERR_ARG, "mask '%.*s%s': model has %d query heads and %d KV "
                    "heads, which do not group evenly (name heads as LAYER.HEAD instead)",
                    shown, s, more, info->n_heads, n_kv);
    if (sub.v >= n_kv) {
        hp_range_text(range, sizeof range, hp_unit_name(true, true), hp_unit_name(true, false), n_kv);
        return hp_fail(err, HP_ERR_ARG, "mask '%.*s%s': KV group %.*s does not exist (model "
                    "has %s)", shown, s, more, sub.len, sub.txt, range);
    }
    hp_mask_set_unit(m, info, true, (int)layer.v, (int)sub.v, 0.0f);
    return HP_OK;

syntax:
    return hp_fail(err, HP_ERR_ARG, "mask '%.*s%s': expected LAYER.HEAD, LAYER.*, "
                "kv:LAYER.GROUP or mlp:LAYER", shown, s, more);
}

enum hp_status hp_mask_parse(const char *spec, bool keep,
                             const struct hp_model_info *info,
                             struct hp_mask **out, struct hp_error *err)
{
    assert(info && out);
    *out = NULL;
    if (!spec)
        spec = "";
    if (info->n_layers < 1 || info->n_heads < 1)
        return hp_fail(err, HP_ERR_ARG, "mask: model has %d layers of %d heads (a model needs "
                    "at least one head to mask)", info->n_layers, info->n_heads);
    struct hp_mask *m = hp_mask_new(info->n_layers, info->n_heads);
    if (!m)
        return hp_fail(err, HP_ERR_NOMEM, "mask: out of memory for %d x %d gates (free some "
                    "memory)", info->n_layers, info->n_heads);
    size_t n_gates = (size_t)m->n_layers * (size_t)m->n_heads;
    /* the named units go to gate 0; with keep, turned over afterwards (below) */

    size_t len = strlen(spec);
    bool empty = true;
    for (size_t i = 0; i < len && empty; i++)
        empty = is_space(spec[i]);
    if (!empty) {
        const char *p = spec, *end = spec + len;
        for (;;) {
            const char *comma = memchr(p, ',', (size_t)(end - p));
            const char *a = p, *b = comma ? comma : end;
            while (a < b && is_space(*a))
                a++;
            while (b > a && is_space(b[-1]))
                b--;
            enum hp_status st;
            if (a == b) {
                int shown = len > ECHO_MAX ? ECHO_MAX : (int)len;
                st = hp_fail(err, HP_ERR_ARG, "mask '%.*s%s': empty item (separate items with "
                          "single commas, no trailing comma)", shown, spec,
                          len > ECHO_MAX ? "..." : "");
            } else if (memchr(a, '>', (size_t)(b - a))) {
                st = hp_edges_apply_item(a, (size_t)(b - a), info, m, err);
            } else {
                st = apply_item(a, (size_t)(b - a), info, m, err);
            }
            if (st) {
                hp_mask_free(m);
                return st;
            }
            if (!comma)
                break;
            p = comma + 1;
        }
    }
    /* keep: the named units are what stays. Every head not named goes; MLP blocks go only when the spec named
     * one (a kind it does not name is left whole, so a keep spec of heads means what it meant before MLPs were
     * units) */
    hp_edges_finish(m);
    if (keep) {
        for (size_t i = 0; i < n_gates; i++)
            m->gate[i] = m->gate[i] == 0.0f ? 1.0f : 0.0f;
        if (hp_mask_has_mlp(m))
            for (int l = 0; l < m->n_layers; l++)
                m->mlp[l] = m->mlp[l] == 0.0f ? 1.0f : 0.0f;
    }
    *out = m;
    return HP_OK;
}

// --- formatting --------------------------------------------------------------

/*
 * Two passes over the gates: the first measures the text, the second writes
 * it into a buffer of exactly that size. Items are "L.H" in ascending order,
 * "L.*" for a layer with every head ablated, then "mlp:L" when the layer's
 * MLP is, joined by commas; hp_mask_parse
 * reads the text back to the same gates.
 */
char *hp_pruned_spec(const struct hp_model_info *in)
{
    if (!in->pruned)
        return NULL;
    struct hp_mask *pm = hp_mask_new(in->n_layers, in->n_heads);
    for (int i = 0; pm && i < in->n_layers * in->n_heads; i++)
        pm->gate[i] = in->pruned[i] ? 0.0f : 1.0f;
    char *spec = pm ? hp_mask_format(pm) : NULL;
    hp_mask_free(pm);
    return spec;
}

char *hp_mask_format(const struct hp_mask *m)
{
    char *buf = NULL;
    size_t cap = 0, len = 0;
    for (int pass = 0; pass < 2; pass++) {
        len = 0;
        for (int l = 0; m && l < m->n_layers; l++) {
            const float *row = m->gate + (size_t)l * (size_t)m->n_heads;
            int zeros = 0;
            for (int h = 0; h < m->n_heads; h++)
                zeros += row[h] == 0.0f;
            for (int h = 0; h < m->n_heads; h++) {
                if (row[h] != 0.0f)
                    continue;
                const char *sep = len ? "," : "";
                int n = zeros == m->n_heads ? snprintf(buf ? buf + len : NULL, buf ? cap - len : 0,
                                                       "%s%d.*", sep, l)
                                            : snprintf(buf ? buf + len : NULL, buf ? cap - len : 0,
                                                       "%s%d.%d", sep, l, h);
                if (n < 0) {
                    free(buf);
                    return NULL;
                }
                len += (size_t)n;
                if (zeros == m->n_heads)
                    break;
            }
            if (m->mlp[l] == 0.0f) {
                int n = snprintf(buf ? buf + len : NULL, buf ? cap - len : 0, "%smlp:%d", len ? "," : "", l);
                if (n < 0) {
                    free(buf);
                    return NULL;
                }
                len += (size_t)n;
            }
        }
        for (int i = 0; m && i < m->n_edges; i++) {
            if (buf && len)
                buf[len] = ',';
            len += len > 0;
            int n = hp_edge_label(buf ? buf + len : NULL, buf ? cap - len : 0, &m->edges[i]);
            if (n < 0) {
                free(buf);
                return NULL;
            }
            len += (size_t)n;
        }
        if (pass == 0) {
            cap = len + 1;
            buf = malloc(cap);
            if (!buf)
                return NULL;
        }
    }
    buf[len] = 0;
    return buf;
}
