/*
 * edges.c -- the `edges` study: each edge between two components (docs/edges.md) patched alone, exactly: the
 * effect of removing one sender from one receiver's input and from nothing else. from: and to: narrow the
 * senders and receivers as --edges patterns do ("0.*", "mlp:3", "logits"; default "*": every edge the model
 * has). One job an edge, labelled with it ("0.1>2.3:q"); `query edges` reads them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edges.h"
#include "study_int.h"

/* A pattern option (from:, to:): its text, owned. */
static enum hp_status pattern(const struct hp_loader *ld, const yaml_node_t *v, const char *key, char **out)
{
    if (v->type != YAML_SCALAR_NODE || hp_yaml_is_null(v) || v->data.scalar.length == 0)
        return hp_ld_fail(ld, v, "'%s' needs a %s pattern as --edges reads one, like \"0.*\", \"mlp:2\" or \"%s\" "
                          "(quote it), not %s", key, strcmp(key, "from") ? "receiver" : "sender",
                          strcmp(key, "from") ? "logits" : "emb", hp_yaml_type_word(v));
    const char *t = hp_yaml_text(v);
    if (strlen(t) != v->data.scalar.length || strpbrk(t, ",>"))
        return hp_ld_fail(ld, v, "'%s' is one pattern (no ',' or '>'): \"%s\"", key, t);
    free(*out);
    if (!(*out = malloc(v->data.scalar.length + 1)))
        return hp_fail(ld->err, HP_ERR_NOMEM, "%s: out of memory", ld->path);
    memcpy(*out, t, v->data.scalar.length + 1);
    return HP_OK;
}

enum hp_status hp_study_parse_from(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    return pattern(ld, v, "from", &s->edges.from);
}

enum hp_status hp_study_parse_to(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    return pattern(ld, v, "to", &s->edges.to);
}

void hp_study_edges_clear(struct hp_study *s)
{
    free(s->edges.from);
    free(s->edges.to);
}

enum hp_status hp_study_graph(const struct hp_study *s, const struct hp_model_info *info, struct hp_mask *m,
                              struct hp_error *err)
{
    char spec[512];
    snprintf(spec, sizeof spec, "%s>%s", s->edges.from ? s->edges.from : "*", s->edges.to ? s->edges.to : "*");
    return hp_mask_add_edges(m, spec, info, err);
}

/* The study's edges, into m (sorted); an error names the study and its option. */
static enum hp_status study_edges(const struct hp_expander *e, struct hp_mask *m)
{
    struct hp_error why = {0};
    if (hp_study_graph(e->s, e->info, m, &why) != HP_OK)
        return hp_ex_fail(e, e->s->edges.from ? "from" : "to", 0, NULL, "%s", why.msg);
    return HP_OK;
}

static int64_t count_jobs(const struct hp_expander *e)
{
    struct hp_mask *m = hp_ex_new_mask(e);
    const int64_t n = m && study_edges(e, m) == HP_OK ? m->n_edges : 0;
    hp_mask_free(m);
    return n;
}

static enum hp_status expand(struct hp_expander *e)
{
    struct hp_mask *all = hp_ex_new_mask(e);
    if (!all)
        return hp_fail(e->err, HP_ERR_NOMEM, "%s: out of memory expanding study '%s'", e->p->path, e->s->name);
    enum hp_status st = study_edges(e, all);
    for (int i = 0; st == HP_OK && i < all->n_edges; i++) {
        const struct hp_edge *ed = &all->edges[i];
        char label[64];
        hp_edge_label(label, sizeof label, ed);
        struct hp_mask *m = hp_ex_new_mask(e);
        if (m && !hp_edges_reserve(m, 1)) {
            hp_mask_free(m);
            m = NULL;
        }
        if (m)
            m->edges[m->n_edges++] = *ed;
        st = hp_ex_emit(e, m, ed->to.kind == HP_NODE_LOGITS ? -1 : ed->to.layer, -1, -1, 0, 1, "%s", label);
    }
    hp_mask_free(all);
    return st;
}

static void describe(const struct hp_study *s, const struct hp_model_info *info, const struct hp_study_cost *c,
                     const char *metric, char *buf, size_t cap)
{
    (void)info, (void)metric;
    snprintf(buf, cap, "%d jobs (each edge %s>%s patched alone)", c->n_jobs, s->edges.from ? s->edges.from : "*",
             s->edges.to ? s->edges.to : "*");
}

static const struct hp_study_opt opts[] = {{"from", hp_study_parse_from}, {"to", hp_study_parse_to}};

const struct hp_study_kind_row hp_study_edges = {
    .name = "edges",
    .opts = opts,
    .n_opts = 2,
    .clear = hp_study_edges_clear,
    .count_jobs = count_jobs,
    .expand = expand,
    .describe = describe,
};
