/*
 * sweep_circuit.c -- the sweep's circuit procedure (HP_STUDY_RUN_CIRCUIT): a circuit study's graph (its from:,
 * to:), every edge of it patched alone (kind "circuit-edge": the edges study's variants, so either finds the
 * other's results), the edges ranked by the size of their effect, then for each size k the circuit of the k
 * highest evaluated with every other edge of the graph patched (kind "circuit", k = the edges kept, step = the
 * size's place). The whole graph kept is the unmasked model, evaluated first: the effects are against it.
 *
 * Must not: print; know SQL.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edges.h"   /* hp_edge_label, hp_edges_reserve */
#include "job.h"     /* HP_JOB_CIRCUIT_EDGE */
#include "study/study.h" /* hp_study_graph, hp_study_circuit_sizes */
#include "sweep_priv.h"
#include "util.h"

struct ranked {
    int i;        /* the edge's place in the graph */
    double score; /* |its effect patched alone| */
};

static int by_score_desc(const void *a, const void *b)
{
    const struct ranked *x = a, *y = b;
    if (x->score != y->score)
        return x->score < y->score ? 1 : -1;
    return x->i - y->i;
}

/* A job of study si over mask m (taken), labelled. */
static struct hp_job job_of(int si, int step, int k, struct hp_mask *m, const char *label)
{
    struct hp_job j = {.study = si, .step = step, .k = k, .layer = -1, .unit = -1, .unit2 = -1, .mask = m};
    snprintf(j.label, sizeof j.label, "%s", label);
    return j;
}

/* The circuit keeping the edges ranked [0, k) of the graph g: a mask patching the others (sorted). */
static struct hp_mask *circuit_mask(const struct hp_mask *g, const struct ranked *rk, int k)
{
    struct hp_mask *m = hp_mask_new(g->n_layers, g->n_heads);
    if (!m || !hp_edges_reserve(m, g->n_edges - k)) {
        hp_mask_free(m);
        return NULL;
    }
    for (int r = k; r < g->n_edges; r++)
        m->edges[m->n_edges++] = g->edges[rk[r].i];
    hp_edges_finish(m);
    return m;
}

static enum hp_status run(struct sw_ctx *c, int si, int64_t *ord, struct hp_error *err)
{
    const struct hp_study *s = &c->plan->studies[si];
    struct hp_mask *g = hp_mask_new(c->info->n_layers, c->info->n_heads);
    if (!g)
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    struct hp_error why = {0};
    if (hp_study_graph(s, c->info, g, &why) != HP_OK) { /* the expansion checked it */
        hp_mask_free(g);
        return hp_fail(err, HP_ERR_PLAN, "%s:%d: study '%s': %s", c->plan->path, s->line, s->name, why.msg);
    }
    const int n = g->n_edges;
    int k[HP_CIRCUIT_SIZES_MAX + 2];
    const int n_k = hp_study_circuit_sizes(s, n, k);
    struct hp_job *jobs = calloc((size_t)n + 1, sizeof *jobs);
    int64_t *ords = calloc((size_t)n + 1, sizeof *ords);
    struct hp_store_metrics *res = calloc((size_t)n + 1, sizeof *res);
    struct ranked *rk = calloc((size_t)n + 1, sizeof *rk);
    enum hp_status st = jobs && ords && res && rk ? HP_OK : hp_fail(err, HP_ERR_NOMEM, "out of memory");
    const int64_t o_edges = *ord, o_circuits = o_edges + n;
    *ord += n + n_k;
    /* the whole graph kept: the unmasked model, the size the others are measured against */
    struct hp_job full = job_of(si, n_k - 1, n, hp_mask_new(c->info->n_layers, c->info->n_heads), "");
    snprintf(full.label, sizeof full.label, "%d of %d edges", n, n);
    int64_t o_full = o_circuits + n_k - 1;
    struct hp_store_metrics m_full;
    if (st == HP_OK)
        st = full.mask ? sw_run_jobs(c, &o_full, &full, 1, NULL, &m_full, err)
                       : hp_fail(err, HP_ERR_NOMEM, "out of memory");
    hp_mask_free(full.mask);
    /* each edge alone */
    int made = 0;
    for (int i = 0; st == HP_OK && i < n; i++, made++) {
        struct hp_mask *m = hp_mask_new(c->info->n_layers, c->info->n_heads);
        if (!m || !hp_edges_reserve(m, 1)) {
            hp_mask_free(m);
            st = hp_fail(err, HP_ERR_NOMEM, "out of memory");
            break;
        }
        m->edges[m->n_edges++] = g->edges[i];
        char label[64];
        hp_edge_label(label, sizeof label, &g->edges[i]);
        jobs[i] = job_of(si, 0, 1, m, label);
        ords[i] = o_edges + i;
    }
    if (st == HP_OK && !sw_stopping(c))
        st = sw_run_jobs(c, ords, jobs, n, HP_JOB_CIRCUIT_EDGE, res, err);
    const double d_full = sw_damage(c, &m_full);
    for (int i = 0; i < made; i++) {
        rk[i] = (struct ranked){i, fabs(sw_damage(c, &res[i]) - d_full)};
        if (st == HP_OK && !sw_stopping(c) && !isfinite(rk[i].score))
            st = hp_fail(err, HP_ERR_FORMAT, "%s: study '%s': edge %s has no finite %s: it cannot rank the edges",
                         c->plan->path, s->name, jobs[i].label, c->plan->metric);
        hp_mask_free(jobs[i].mask);
    }
    if (st == HP_OK && !sw_stopping(c)) {
        qsort(rk, (size_t)n, sizeof *rk, by_score_desc);
        /* each size's circuit but the whole graph's (run above) */
        int nc = 0;
        for (int j = 0; j < n_k - 1 && st == HP_OK; j++, nc++) {
            char label[64];
            snprintf(label, sizeof label, "%d of %d edges", k[j], n);
            struct hp_mask *m = circuit_mask(g, rk, k[j]);
            jobs[j] = job_of(si, j, k[j], m, label);
            ords[j] = o_circuits + j;
            if (!m)
                st = hp_fail(err, HP_ERR_NOMEM, "out of memory for a circuit's %d edges", n - k[j]);
        }
        if (st == HP_OK)
            st = sw_run_jobs(c, ords, jobs, nc, NULL, NULL, err);
        for (int j = 0; j < nc; j++)
            hp_mask_free(jobs[j].mask);
    }
    free(jobs), free(ords), free(res), free(rk);
    hp_mask_free(g);
    return st;
}

const struct sw_proc sw_proc_circuit = {.run = run};
