/*
 * circuit.c -- the `circuit` study: circuits of a graph's edges (from:, to:, as the edges study's; default every
 * edge the model has), each evaluated exactly with every edge of the graph outside it patched. The edges are
 * ranked by the size of their effect patched alone (|effect|, exact: the edges study's variants), and a circuit
 * of size k keeps the k highest. sizes: the fractions of the graph's edges kept (default MIB-like, 0.1% to
 * 100%). The sweep runs it (HP_STUDY_RUN_CIRCUIT, sweep_circuit.c): its circuits depend on the ranking's
 * results. `query circuit` gives each size's faithfulness and the curve's CPR and CMD (docs/edges.md).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "study.h"
#include "study_int.h"

/* MIB's sizes, as fractions of the graph's edges */
static const double default_sizes[] = {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0};
#define N_DEFAULT ((int)(sizeof default_sizes / sizeof *default_sizes))

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static enum hp_status parse_sizes(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    const int n = v->type == YAML_SEQUENCE_NODE ? hp_yaml_n_items(v) : 1;
    if (v->type == YAML_MAPPING_NODE || hp_yaml_is_null(v) || n == 0)
        return hp_ld_fail(ld, v, "'sizes' must be a fraction of the graph's edges in (0, 1] or a list of them "
                          "(like [0.01, 0.1, 0.5]), not %s", n == 0 ? "an empty list" : hp_yaml_type_word(v));
    if (n > HP_CIRCUIT_SIZES_MAX)
        return hp_ld_fail(ld, v, "'sizes' lists %d sizes: at most %d", n, HP_CIRCUIT_SIZES_MAX);
    double *xs = malloc(sizeof *xs * (size_t)n);
    if (!xs)
        return hp_fail(ld->err, HP_ERR_NOMEM, "%s: out of memory", ld->path);
    for (int i = 0; i < n; i++) {
        const yaml_node_t *it = v->type == YAML_SEQUENCE_NODE ? hp_ld_node(ld, v->data.sequence.items.start[i]) : v;
        enum hp_status st = hp_ld_number(ld, "sizes", it, 0, true, "a fraction of the graph's edges in (0, 1]", &xs[i]);
        if (st == HP_OK && xs[i] > 1)
            st = hp_ld_fail(ld, it, "'sizes' are fractions of the graph's edges, in (0, 1]: not %g", xs[i]);
        if (st != HP_OK) {
            free(xs);
            return st;
        }
    }
    qsort(xs, (size_t)n, sizeof *xs, by_value);
    free(s->circuit.sizes);
    s->circuit.sizes = xs;
    s->circuit.n_sizes = n;
    return HP_OK;
}

static void clear(struct hp_study *s)
{
    hp_study_edges_clear(s);
    free(s->circuit.sizes);
}

int hp_study_circuit_sizes(const struct hp_study *s, int n, int *k)
{
    const double *f = s->circuit.sizes ? s->circuit.sizes : default_sizes;
    const int nf = s->circuit.sizes ? s->circuit.n_sizes : N_DEFAULT;
    int m = 0;
    k[m++] = 0;
    for (int i = 0; i < nf; i++) {
        int want = (int)ceil(f[i] * n - 1e-9); /* at least one edge of a non-empty graph for any size above 0 */
        want = want < 1 ? 1 : want > n ? n : want;
        if (want > k[m - 1])
            k[m++] = want;
    }
    if (k[m - 1] < n)
        k[m++] = n;
    return m;
}

/* The graph's edges, counted against the model (0 where its patterns name no edge: the expansion says why). */
static int graph_size(const struct hp_study *s, const struct hp_model_info *info)
{
    struct hp_mask *m = hp_mask_new(info->n_layers, info->n_heads);
    struct hp_error ignored = {0};
    const int n = m && hp_study_graph(s, info, m, &ignored) == HP_OK ? m->n_edges : 0;
    hp_mask_free(m);
    return n;
}

/* each edge alone, then each size's circuit */
static long evals(const struct hp_study *s, const struct hp_model_info *info)
{
    const int n = graph_size(s, info);
    int k[HP_CIRCUIT_SIZES_MAX + 2];
    return n + (n ? hp_study_circuit_sizes(s, n, k) : 0);
}

/* No jobs at expansion: the sweep's procedure makes them from results (evals counts them for `plan`). */
static int64_t count_jobs(const struct hp_expander *e)
{
    (void)e;
    return 0;
}

/* The patterns checked against the model when the plan is expanded: an error names the option. */
static enum hp_status expand(struct hp_expander *e)
{
    struct hp_mask *m = hp_ex_new_mask(e);
    struct hp_error why = {0};
    enum hp_status st = m ? hp_study_graph(e->s, e->info, m, &why) : hp_ex_nomem(e);
    hp_mask_free(m);
    if (st != HP_OK && why.msg[0])
        return hp_ex_fail(e, e->s->edges.from ? "from" : "to", 0, NULL, "%s", why.msg);
    return st;
}

static void describe(const struct hp_study *s, const struct hp_model_info *info, const struct hp_study_cost *c,
                     const char *metric, char *buf, size_t cap)
{
    (void)metric;
    const int n = graph_size(s, info);
    int k[HP_CIRCUIT_SIZES_MAX + 2];
    snprintf(buf, cap, "%ld jobs (%d edges %s>%s each patched alone to rank them, then %d circuits from 0 to %d "
             "edges kept)", c->evals, n, s->edges.from ? s->edges.from : "*", s->edges.to ? s->edges.to : "*",
             n ? hp_study_circuit_sizes(s, n, k) : 0, n);
}

static const struct hp_study_opt opts[] = {
    {"from", hp_study_parse_from}, {"to", hp_study_parse_to}, {"sizes", parse_sizes}};

const struct hp_study_kind_row hp_study_circuit = {
    .name = "circuit",
    .opts = opts,
    .n_opts = 3,
    .clear = clear,
    .count_jobs = count_jobs,
    .expand = expand,
    .run = HP_STUDY_RUN_CIRCUIT,
    .first_shard_only = true,
    .evals = evals,
    .describe = describe,
};
