/*
 * edges.c -- edges between a sender and a receiver through the residual
 * stream (struct hp_edge): their order, which can exist, their text, and
 * the mask items that name them ("SENDER>RECEIVER", with "*" and "L.*").
 *
 * A side of an item is read as a pattern (which kinds, which layer, which
 * head, which channels) and the item as every valid edge between a sender
 * and a receiver that match: "0.1>1.2:q" is one edge, "0.1>1.2" three (q,
 * k, v), "0.1>*" every edge out of head 0.1. An item that names one edge by
 * name and it cannot exist is refused; a pattern that matches none is too.
 *
 * Must not: print, exit, or know anything of the model beyond struct
 * hp_model_info. mask.c owns the mask; this file appends to its edges.
 */
#include "edges.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define ECHO_MAX 64

static const char chan_name[] = "qkv";

/* A node's place in the order: (layer, part, head, channel); emb first, logits last. */
static void node_key(const struct hp_node *n, long long k[4])
{
    switch (n->kind) {
    case HP_NODE_EMB: k[0] = -1, k[1] = k[2] = k[3] = 0; return;
    case HP_NODE_HEAD: k[0] = n->layer, k[1] = 0, k[2] = n->head, k[3] = n->chan; return;
    case HP_NODE_MLP: k[0] = n->layer, k[1] = 1, k[2] = k[3] = 0; return;
    case HP_NODE_LOGITS: k[0] = LLONG_MAX, k[1] = k[2] = k[3] = 0; return;
    }
}

static int node_cmp(const struct hp_node *a, const struct hp_node *b)
{
    long long ka[4], kb[4];
    node_key(a, ka);
    node_key(b, kb);
    for (int i = 0; i < 4; i++)
        if (ka[i] != kb[i])
            return ka[i] < kb[i] ? -1 : 1;
    return 0;
}

int hp_edge_cmp(const void *pa, const void *pb)
{
    const struct hp_edge *a = pa, *b = pb;
    const int c = node_cmp(&a->to, &b->to);
    return c ? c : node_cmp(&a->from, &b->from);
}

bool hp_edge_valid(const struct hp_model_info *info, const struct hp_node *u, const struct hp_node *v)
{
    if (u->kind == HP_NODE_LOGITS || v->kind == HP_NODE_EMB)
        return false;
    if (u->kind == HP_NODE_EMB || v->kind == HP_NODE_LOGITS)
        return true;
    if (u->layer < v->layer)
        return true;
    /* the same layer: a head writes before its layer's MLP reads, unless both read the layer's input */
    return u->layer == v->layer && u->kind == HP_NODE_HEAD && v->kind == HP_NODE_MLP && !info->parallel;
}

int hp_node_label(char *buf, size_t size, const struct hp_node *n)
{
    switch (n->kind) {
    case HP_NODE_EMB: return snprintf(buf, size, "emb");
    case HP_NODE_LOGITS: return snprintf(buf, size, "logits");
    case HP_NODE_MLP: return snprintf(buf, size, "mlp:%d", n->layer);
    case HP_NODE_HEAD: break;
    }
    return snprintf(buf, size, "%d.%d", n->layer, n->head);
}

int hp_edge_label(char *buf, size_t size, const struct hp_edge *e)
{
    char u[32], v[32];
    hp_node_label(u, sizeof u, &e->from);
    hp_node_label(v, sizeof v, &e->to);
    if (e->to.kind == HP_NODE_HEAD)
        return snprintf(buf, size, "%s>%s:%c", u, v, chan_name[e->to.chan]);
    return snprintf(buf, size, "%s>%s", u, v);
}

// --- items -----------------------------------------------------------------

/* One side of an item: the nodes it matches. layer, head: -1 any. */
struct pattern {
    bool emb, heads, mlp, logits;
    int layer, head;
    unsigned chans; /* bits 1 << enum hp_chan: a receiving head's inputs */
    bool named;     /* one node (or one head's inputs), by name: an invalid edge is an error, not left out */
};

/* A decimal number s[*i..] below limit into *v; false if none (or out of range: *v = -2). */
static bool number(const char *s, size_t n, size_t *i, int limit, int *v)
{
    size_t st = *i;
    long long x = 0;
    while (*i < n && s[*i] >= '0' && s[*i] <= '9' && x <= INT_MAX)
        x = x * 10 + (s[(*i)++] - '0');
    if (*i == st)
        return false;
    *v = x < limit ? (int)x : -2;
    return true;
}

/*
 * Read one side s[0..n) into p; receiver: the side after '>'. A range error names what is missing (into why);
 * else a syntax error (why empty).
 */
static bool read_side(const char *s, size_t n, bool receiver, const struct hp_model_info *info, struct pattern *p,
                      char *why, size_t wn)
{
    *p = (struct pattern){.layer = -1, .head = -1, .chans = 7, .named = true};
    why[0] = 0;
    if (n == 1 && s[0] == '*') {
        *p = (struct pattern){.emb = !receiver, .heads = true, .mlp = true, .logits = receiver, .layer = -1,
                              .head = -1, .chans = 7};
        return true;
    }
    if (n == 3 && !memcmp(s, "emb", 3) && !receiver)
        return p->emb = true;
    if (n == 6 && !memcmp(s, "logits", 6) && receiver)
        return p->logits = true;
    size_t i = 0;
    if (n > 4 && !memcmp(s, "mlp:", 4)) {
        i = 4;
        if (!number(s, n, &i, info->n_layers, &p->layer) || i != n)
            return false;
        if (p->layer < 0)
            return snprintf(why, wn, "layer %.*s does not exist (the model has %d)", (int)(n - 4), s + 4,
                            info->n_layers), false;
        return p->mlp = true;
    }
    if (!number(s, n, &i, info->n_layers, &p->layer) || i >= n || s[i++] != '.')
        return false;
    if (p->layer < 0)
        return snprintf(why, wn, "layer %.*s does not exist (the model has %d)", (int)(i - 1), s, info->n_layers),
               false;
    p->heads = true;
    if (i < n && s[i] == '*') {
        i++;
        p->named = false;
    } else {
        const size_t h0 = i;
        if (!number(s, n, &i, info->n_heads, &p->head))
            return false;
        if (p->head < 0)
            return snprintf(why, wn, "head %.*s does not exist (layer %d has %d)", (int)(i - h0), s + h0, p->layer,
                            info->n_heads), false;
    }
    if (i + 2 == n && s[i] == ':' && receiver) {
        const char *c = strchr(chan_name, s[i + 1]);
        if (!c || !s[i + 1])
            return false;
        p->chans = 1u << (c - chan_name);
        i += 2;
    }
    return i == n;
}

/* Every node of the model that p matches, in order, to f; as a receiver each head input on its own. */
static bool each_node(const struct hp_model_info *info, const struct pattern *p, bool receiver,
                      bool (*f)(void *, const struct hp_node *), void *user)
{
    if (p->emb && !f(user, &(struct hp_node){.kind = HP_NODE_EMB}))
        return false;
    for (int l = 0; l < info->n_layers; l++) {
        if (p->layer >= 0 && l != p->layer)
            continue;
        for (int h = 0; p->heads && h < info->n_heads; h++) {
            if ((p->head >= 0 && h != p->head) || (info->pruned && info->pruned[(size_t)l * info->n_heads + h]))
                continue;
            for (int c = 0; c < (receiver ? 3 : 1); c++)
                if ((!receiver || (p->chans >> c & 1)) &&
                    !f(user, &(struct hp_node){.kind = HP_NODE_HEAD, .layer = l, .head = h, .chan = c}))
                    return false;
        }
        if (p->mlp && !f(user, &(struct hp_node){.kind = HP_NODE_MLP, .layer = l}))
            return false;
    }
    return !p->logits || f(user, &(struct hp_node){.kind = HP_NODE_LOGITS});
}

/* The state of one item's expansion. */
struct expand {
    const struct hp_model_info *info;
    struct hp_mask *m;
    const struct pattern *to;
    const struct hp_node *u; /* the sender being paired */
    int added, invalid;
    bool oom;
};

static bool add_edge(struct expand *x, const struct hp_node *u, const struct hp_node *v)
{
    if (!hp_edge_valid(x->info, u, v)) {
        x->invalid++;
        return true;
    }
    if (!hp_edges_reserve(x->m, x->m->n_edges + 1))
        return !(x->oom = true);
    struct hp_mask *m = x->m;
    m->edges[m->n_edges++] = (struct hp_edge){*u, *v};
    x->added++;
    return true;
}

static bool with_receiver(void *user, const struct hp_node *v)
{
    struct expand *x = user;
    return add_edge(x, x->u, v);
}

static bool with_sender(void *user, const struct hp_node *u)
{
    struct expand *x = user;
    x->u = u;
    return each_node(x->info, x->to, true, with_receiver, x);
}

enum hp_status hp_edges_apply_item(const char *s, size_t n, const struct hp_model_info *info, struct hp_mask *m,
                                   struct hp_error *err)
{
    const int shown = n > ECHO_MAX ? ECHO_MAX : (int)n;
    const char *more = n > ECHO_MAX ? "..." : "", *gt = memchr(s, '>', n);
    struct pattern from, to;
    char why[96];
    if (!gt || memchr(gt + 1, '>', (size_t)(s + n - gt - 1)))
        goto syntax;
    if (!read_side(s, (size_t)(gt - s), false, info, &from, why, sizeof why) ||
        !read_side(gt + 1, (size_t)(s + n - gt - 1), true, info, &to, why, sizeof why)) {
        if (why[0])
            return hp_fail(err, HP_ERR_ARG, "mask '%.*s%s': %s", shown, s, more, why);
        goto syntax;
    }
    struct expand x = {.info = info, .m = m, .to = &to};
    each_node(info, &from, false, with_sender, &x);
    if (x.oom)
        return hp_fail(err, HP_ERR_NOMEM, "mask '%.*s%s': out of memory for its edges", shown, s, more);
    if (from.named && to.named && x.invalid > 0)
        return hp_fail(err, HP_ERR_ARG, "mask '%.*s%s': the sender does not write to the residual stream before "
                       "the receiver reads it (%s)", shown, s, more,
                       info->parallel ? "a sender of an earlier layer; under this model's parallel residual a "
                                        "layer's MLP reads the layer's input, not its heads' output"
                                      : "a sender of an earlier layer, or a head into its own layer's MLP");
    if (x.added == 0)
        return hp_fail(err, HP_ERR_ARG, "mask '%.*s%s': names no edge (no sender there writes before a receiver "
                       "there reads)", shown, s, more);
    return HP_OK;
syntax:
    return hp_fail(err, HP_ERR_ARG, "mask '%.*s%s': expected SENDER>RECEIVER, a sender emb, L.H, L.* or mlp:L, a "
                   "receiver L.H[:q|:k|:v], L.*, mlp:L or logits, either side *", shown, s, more);
}

/* Room for n edges: 0, else 8 or the power of two at or above n. m->edges always has at least room(m->n_edges). */
static size_t room(int n)
{
    size_t c = n > 0 ? 8 : 0;
    while (c < (size_t)n)
        c *= 2;
    return c;
}

bool hp_edges_reserve(struct hp_mask *m, int n)
{
    if (n < 0 || room(n) > INT_MAX)
        return false;
    if (room(n) <= room(m->n_edges)) /* what m holds has at least room(m->n_edges) */
        return true;
    struct hp_edge *e = realloc(m->edges, room(n) * sizeof *e);
    if (!e)
        return false;
    m->edges = e;
    return true;
}

void hp_edges_finish(struct hp_mask *m)
{
    if (m->n_edges < 2)
        return;
    qsort(m->edges, (size_t)m->n_edges, sizeof *m->edges, hp_edge_cmp);
    int k = 1;
    for (int i = 1; i < m->n_edges; i++)
        if (hp_edge_cmp(&m->edges[i], &m->edges[k - 1]) != 0)
            m->edges[k++] = m->edges[i];
    m->n_edges = k;
}

// --- edges named apart from units --------------------------------------------------

/* s[0..n) with the whitespace around it trimmed, into *a, *b. */
static void trim(const char *s, size_t n, const char **a, const char **b)
{
    *a = s, *b = s + n;
    while (*a < *b && isspace((unsigned char)**a))
        (*a)++;
    while (*b > *a && isspace((unsigned char)(*b)[-1]))
        (*b)--;
}

enum hp_status hp_mask_add_edges(struct hp_mask *m, const char *spec, const struct hp_model_info *info,
                                 struct hp_error *err)
{
    for (const char *p = spec, *comma;; p = comma + 1) {
        comma = strchr(p, ',');
        const char *a, *b;
        trim(p, comma ? (size_t)(comma - p) : strlen(p), &a, &b);
        if (a == b || !memchr(a, '>', (size_t)(b - a)))
            return hp_fail(err, HP_ERR_ARG, "edges '%.*s%s': '%.*s' is not an edge (SENDER>RECEIVER, separated by "
                           "single commas)", (int)(strlen(spec) > ECHO_MAX ? ECHO_MAX : strlen(spec)), spec,
                           strlen(spec) > ECHO_MAX ? "..." : "", (int)(b - a > ECHO_MAX ? ECHO_MAX : b - a), a);
        enum hp_status st = hp_edges_apply_item(a, (size_t)(b - a), info, m, err);
        if (st != HP_OK)
            return st;
        if (!comma)
            break;
    }
    hp_edges_finish(m);
    return HP_OK;
}

/* Whether e is among kept's edges (sorted). */
static bool has_edge(const struct hp_mask *kept, const struct hp_edge *e)
{
    return kept->n_edges && bsearch(e, kept->edges, (size_t)kept->n_edges, sizeof *e, hp_edge_cmp);
}

enum hp_status hp_mask_circuit_text(struct hp_mask *m, const char *text, size_t len, const char *name,
                                    const struct hp_model_info *info, struct hp_error *err)
{
    /* edge lists only: hp_edges_apply_item and hp_edges_finish touch a mask's edges, nothing else */
    struct hp_mask kept_m = {.n_layers = info->n_layers, .n_heads = info->n_heads}, all_m = kept_m;
    struct hp_mask *kept = &kept_m, *all = &all_m;
    enum hp_status st = HP_OK;
    const char *p = text, *end = text + len;
    for (long no = 1; st == HP_OK && p < end; no++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p)), *stop = nl ? nl : end, *hash = memchr(p, '#', (size_t)(stop - p));
        const char *a, *b;
        trim(p, (size_t)((hash ? hash : stop) - p), &a, &b);
        p = nl ? nl + 1 : end;
        if (a == b)
            continue;
        if (memchr(a, 0, (size_t)(b - a)) || !memchr(a, '>', (size_t)(b - a)) || memchr(a, ',', (size_t)(b - a))) {
            st = hp_fail(err, HP_ERR_ARG, "%s:%ld: expected one edge SENDER>RECEIVER a line ('#' comments), not "
                         "'%.*s%s'", name, no, (int)(b - a > ECHO_MAX ? ECHO_MAX : b - a), a,
                         b - a > ECHO_MAX ? "..." : "");
            break;
        }
        struct hp_error e2 = {0};
        if ((st = hp_edges_apply_item(a, (size_t)(b - a), info, kept, &e2)) != HP_OK)
            hp_fail(err, st, "%s:%ld: %s", name, no, e2.msg);
    }
    if (st == HP_OK) {
        hp_edges_finish(kept);
        st = hp_edges_apply_item("*>*", 3, info, all, err);
    }
    if (st == HP_OK) {
        hp_edges_finish(all);
        for (int i = 0; i < all->n_edges && st == HP_OK; i++)
            if (!has_edge(kept, &all->edges[i]) && !has_edge(m, &all->edges[i])) {
                if (!hp_edges_reserve(m, m->n_edges + 1))
                    st = hp_fail(err, HP_ERR_NOMEM, "%s: out of memory for the edges outside the circuit", name);
                else
                    m->edges[m->n_edges++] = all->edges[i];
            }
        hp_edges_finish(m);
    }
    free(kept->edges);
    free(all->edges);
    return st;
}

/* A circuit file is at most this large: every edge of a 8B-class model's 32 x 32 heads is ~3 M lines, 60 MB. */
#define CIRCUIT_MAX ((size_t)1 << 30)

enum hp_status hp_mask_circuit(struct hp_mask *m, const char *path, const struct hp_model_info *info,
                               struct hp_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return hp_fail(err, HP_ERR_IO, "%s: cannot open the circuit file: %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0, cap = 0, n;
    enum hp_status st = HP_OK;
    do {
        if (len + 65536 > cap) {
            const size_t want = cap + 65536 + cap / 2;
            if (want > CIRCUIT_MAX) {
                st = hp_fail(err, HP_ERR_ARG, "%s: a circuit file of over %zu MB (one edge a line)", path,
                             CIRCUIT_MAX >> 20);
                break;
            }
            char *t = realloc(text, want);
            if (!t) {
                st = hp_fail(err, HP_ERR_NOMEM, "%s: out of memory reading the circuit file", path);
                break;
            }
            text = t, cap = want;
        }
        n = fread(text + len, 1, cap - len, f);
        len += n;
    } while (n > 0);
    if (st == HP_OK && ferror(f))
        st = hp_fail(err, HP_ERR_IO, "%s: cannot read the circuit file: %s", path, strerror(errno));
    fclose(f);
    if (st == HP_OK)
        st = hp_mask_circuit_text(m, text ? text : "", len, path, info, err);
    free(text);
    return st;
}
