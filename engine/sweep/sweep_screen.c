/*
 * sweep_screen.c -- the sweep's screen procedure (HP_STUDY_RUN_SCREEN): the
 * study's estimate of every unit (sweep_scores.c's sw_scores, stored as its
 * scores), then the units evaluated exactly in the order and batches the
 * stopping rule (screen.c) hands out, each the single study's variant of the
 * unit (the same mask, so the same content address: a single study's result
 * is found, and a later single finds these), and the verdict into the store.
 *
 * Invariant: the rule sees only the estimate (recomputed from stored
 * gradients, identical), the exact effects (stored, or evaluated alike) and
 * the plan's seed, so a resumed sweep walks the same units in the same order
 * and records them at the same places. A sweep stopped before the rule
 * finished writes no verdict.
 * Must not: print; know SQL.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "screen.h"
#include "study/study.h" // hp_study_screen_sizes
#include "sweep_priv.h"
#include "util.h"

/* The confidence the verdict's bound is stated at. */
#define SCREEN_ALPHA 0.05

struct ranked {
    int idx;
    double est;
};

static int by_estimate(const void *a, const void *b)
{
    const struct ranked *x = a, *y = b;
    if (x->est != y->est)
        return x->est > y->est ? -1 : 1;
    return x->idx - y->idx; /* ties: plan order */
}

static enum hp_status run(struct sw_ctx *c, int si, int64_t *ord, struct hp_error *err)
{
    const struct hp_study *s = &c->plan->studies[si];
    const struct hp_model_info *in = c->info;
    const int U = hp_unit_count(in, s->unit);
    const size_t nu = (size_t)in->n_layers * U;
    const struct hp_screen_sizes z = hp_study_screen_sizes(s, in);
    double *est = malloc(nu * sizeof *est), *exact = malloc(nu * sizeof *exact);
    int *layer = malloc(nu * sizeof *layer), *unit = malloc(nu * sizeof *unit), *order = malloc(nu * sizeof *order),
        *batch = malloc(nu * sizeof *batch);
    struct ranked *rk = malloc(nu * sizeof *rk);
    struct hp_job *jobs = calloc(nu, sizeof *jobs);
    int64_t *ords = malloc(nu * sizeof *ords);
    struct hp_store_metrics *res = malloc(nu * sizeof *res);
    struct hp_screen sc = {0};
    enum hp_status st = est && exact && layer && unit && order && batch && rk && jobs && ords && res
                            ? HP_OK
                            : hp_fail(err, HP_ERR_NOMEM, "out of memory");
    if (st == HP_OK)
        st = sw_scores(c, si, est, err);
    /* the units, in plan order, ranked by the estimate's size, larger first: a large estimate of either sign marks
     * a unit that matters (on SmolLM2 ig-layer puts heads of the top 10% at -2.07; importance is a size already) */
    int n = 0;
    for (int l = 0; st == HP_OK && l < in->n_layers; l++)
        for (int u = 0; u < U; u++)
            if (sw_selected(s->n_layers_sel, s->layers, l) && sw_selected(s->n_units_sel, s->units, u) &&
                !hp_unit_pruned(in, s->unit, l, u)) {
                if (!isfinite(est[l * U + u])) {
                    char label[32];
                    hp_unit_label(label, sizeof label, s->unit, l, u);
                    st = hp_fail(err, HP_ERR_FORMAT, "%s: study '%s': the estimate of %s is not finite: it cannot "
                                 "rank the units", c->plan->path, s->name, label);
                }
                layer[n] = l, unit[n] = u;
                rk[n] = (struct ranked){n, fabs(est[l * U + u])};
                n++;
            }
    if (st == HP_OK && n != z.units)
        st = hp_fail(err, HP_ERR_PLAN, "%s: study '%s' screens %d units, the plan counted %d", c->plan->path,
                     s->name, n, z.units);
    if (st == HP_OK) {
        hp_qsort(rk, (size_t)n, sizeof *rk, by_estimate);
        for (int i = 0; i < n; i++)
            order[i] = rk[i].idx;
        uint64_t seed = c->plan->seed;
        seed = hp_splitmix64(&seed) ^ hp_fnv1a(s->name);
        const struct hp_screen_opts so = {.n = n, .k = z.k, .batch = z.batch, .audit = z.audit, .seed = seed};
        if (!hp_screen_init(&sc, &so, order))
            st = hp_fail(err, HP_ERR_NOMEM, "out of memory");
    }
    int evaluated = 0, round = 0, nb;
    while (st == HP_OK && !sw_stopping(c) && (nb = hp_screen_next(&sc, batch, &round)) > 0) {
        for (int i = 0; i < nb && st == HP_OK; i++) {
            const int j = batch[i];
            struct hp_mask *m = hp_mask_new(in->n_layers, in->n_heads);
            if (!m) {
                st = hp_fail(err, HP_ERR_NOMEM, "out of memory");
                break;
            }
            hp_mask_set_unit(m, in, s->unit, layer[j], unit[j], 0.0f);
            jobs[i] = (struct hp_job){.study = si, .step = evaluated + i, .sample = round, .k = 1, .layer = layer[j],
                                      .unit = unit[j], .unit2 = -1, .mask = m};
            hp_unit_label(jobs[i].label, sizeof jobs[i].label, s->unit, layer[j], unit[j]);
            ords[i] = (*ord)++;
        }
        if (st == HP_OK)
            st = sw_run_jobs(c, ords, jobs, nb, NULL, res, err);
        for (int i = 0; i < nb; i++) {
            if (st == HP_OK && !sw_stopping(c)) {
                exact[i] = sw_damage(c, &res[i]);
                if (!isfinite(exact[i]))
                    st = hp_fail(err, HP_ERR_FORMAT, "%s: '%s' has no finite %s effect in %s: it cannot rank a unit",
                                 c->plan->path, jobs[i].label, c->plan->metric, c->o->db_path);
            }
            hp_mask_free(jobs[i].mask);
            jobs[i].mask = NULL;
        }
        if (st != HP_OK || sw_stopping(c))
            break;
        hp_screen_feed(&sc, exact);
        evaluated += nb;
    }
    if (st == HP_OK && sc.finished) {
        struct hp_screen_verdict v;
        hp_screen_verdict(&sc, SCREEN_ALPHA, &v);
        const struct hp_store_screen row = {.sweep_id = c->sweep_id,
                                            .study = s->name,
                                            .kv = s->unit,
                                            .units = n,
                                            .k = z.k,
                                            .estimator = hp_estimator_name(s->estimator),
                                            .evaluated = v.evaluated,
                                            .audits = v.rounds,
                                            .population = v.population,
                                            .audited = v.audited,
                                            .missed_max = v.missed_max,
                                            .confidence = 1 - SCREEN_ALPHA};
        st = hp_store_put_screen(c->store, &row, err);
    }
    hp_screen_free(&sc);
    free(est), free(exact), free(layer), free(unit), free(order), free(batch), free(rk), free(jobs), free(ords),
        free(res);
    return st;
}

const struct sw_proc sw_proc_screen = {.run = run, .before_jobs = false};
