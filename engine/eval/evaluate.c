/*
 * evaluate.c -- one variant evaluated as `headprune eval` does (hp_eval): the
 * mask parsed against the model, the gradient when asked (its forward is the
 * variant's evaluation), the variant and the unmasked model beside it, the
 * threads chosen as the sequences go. The command line and the Python
 * package both call it, so an evaluation is the same computation, bit for
 * bit, whichever asks.
 *
 * Must not: print, or open the model or the data (the caller owns both).
 */
#include <stdlib.h>
#include <string.h>

#include "headprune.h"
#include "cpuload.h" /* hp_threads_run */
#include "model.h"   /* the model's folder, for errors */
#include "util.h"    /* hp_fail, hp_now */

void hp_eval_result_free(struct hp_eval_result *r)
{
    if (!r)
        return;
    hp_metrics_free(r->mt);
    hp_metrics_free(r->base);
    free(r->grad);
    free(r->atp);
    free(r->mlp_grad);
    free(r->mlp_atp);
    free(r);
}

/* The progress callback hp_eval hands the evaluator: the threads chosen again, then the caller's. */
struct eval_progress {
    struct hp_threads_run *threads;
    void (*fn)(void *user, int done, int total);
    void *user;
};

static void eval_progress(void *user, int done, int total)
{
    struct eval_progress *p = user;
    hp_threads_run_step(p->threads);
    if (p->fn)
        p->fn(p->user, done, total);
}

/* The metric o's gradient differentiates, checked against what ev has: HP_OK and *metric, else the line. */
static enum hp_status grad_metric_of(const struct hp_eval_opts *o, struct hp_evaluator *ev, const char *model,
                                     const char *data, enum hp_metric *metric, struct hp_error *err)
{
    *metric = HP_METRIC_LOSS;
    const char *name = o->grad_metric;
    if (name && (!hp_metric_parse(name, metric) || !hp_metric_has_grad(*metric))) {
        char names[128];
        hp_metric_names(names, sizeof names, true, " or ");
        return hp_fail(err, HP_ERR_ARG, "grad_metric \"%s\" must be %s (the metrics with a gradient)", name, names);
    }
    if (!name && !hp_evaluator_has_metric(ev, "loss"))
        *metric = HP_METRIC_COS; /* an encoder without a head: its own metric */
    const char *picked;
    enum hp_status st; /* a task metric on data without what it needs: the evaluator's line says what */
    if (*metric != HP_METRIC_COS && hp_evaluator_has_metric(ev, "loss") &&
        (st = hp_evaluator_pick_metric(ev, "--grad-metric", hp_metric_name(*metric), &picked, err)) != HP_OK)
        return st;
    if (!hp_evaluator_has_metric(ev, hp_metric_name(*metric)))
        return hp_fail(err, HP_ERR_ARG,
                       *metric == HP_METRIC_COS
                           ? "%s: --grad-metric cos is for an encoder without a head, and %s has a loss on this "
                             "data: use loss or kl"
                           : "%s: --grad-metric %s needs a loss, and %s has none on this data (an encoder without "
                             "a head, or no labels): use cos, or a causal LM, an MLM head with labels or a "
                             "classifier",
                       data, *metric == HP_METRIC_COS ? model : hp_metric_name(*metric), model);
    return HP_OK;
}

enum hp_status hp_eval(struct hp_model *m, struct hp_data *d, const struct hp_eval_opts *o,
                       struct hp_eval_result **out, struct hp_error *err)
{
    *out = NULL;
    const struct hp_model_info *in = hp_model_get_info(m);
    const char *model = m->dir, *data = d->path ? d->path : "data";
    const bool want_grad = o->grad || o->grad_metric;
    struct hp_threads_run thr;
    hp_threads_run_begin(&thr, o->threads);
    struct hp_eval_result *r = calloc(1, sizeof *r);
    struct hp_mask *mask = NULL;
    struct hp_evaluator *ev = NULL;
    enum hp_status st;
    if (!r)
        return hp_fail(err, HP_ERR_NOMEM, "eval: out of memory");
    if ((st = hp_ablation_bind_data(o->ablation, d, err)) != HP_OK) /* denoise: the corrupt prompts */
        goto out;
    if (o->mask && (st = hp_mask_parse(o->mask, o->keep, in, &mask, err)) != HP_OK)
        goto out;
    if ((o->edges || o->circuit || o->circuit_text) && !mask && !(mask = hp_mask_new(in->n_layers, in->n_heads))) {
        st = hp_fail(err, HP_ERR_NOMEM, "eval: out of memory");
        goto out;
    }
    if (o->edges && (st = hp_mask_add_edges(mask, o->edges, in, err)) != HP_OK)
        goto out;
    if (o->circuit && (st = hp_mask_circuit(mask, o->circuit, in, err)) != HP_OK)
        goto out;
    if (o->circuit_text &&
        (st = hp_mask_circuit_text(mask, o->circuit_text, strlen(o->circuit_text), "circuit", in, err)) != HP_OK)
        goto out;
    if (mask) /* a head a pruned checkpoint lacks is neither kept nor ablated: counted as the sweeps count */
        hp_mask_drop_absent(mask, in);
    if ((st = hp_evaluator_new(m, d, &ev, err)) != HP_OK)
        goto out;
    hp_evaluator_keep_grad_metrics(ev, true); /* the gradient's forward is also the evaluation */
    if (want_grad && (st = grad_metric_of(o, ev, model, data, &r->grad_metric, err)) != HP_OK)
        goto out;
    hp_threads_run_start(&thr);
    struct eval_progress pr = {&thr, o->progress, o->user};
    hp_evaluator_set_progress(ev, eval_progress, &pr);
    const double t0 = hp_now();
    const bool changed = hp_mask_first_changed(mask, in->n_layers) < in->n_layers;
    const size_t HH = (size_t)in->n_layers * (size_t)in->n_heads;
    r->grad_what = r->grad_metric == HP_METRIC_KL ? "KL" : hp_metric_grad_what(r->grad_metric);
    /* KL and 1 - cos are 0 and minimal at the unmasked model: their gradient there says nothing */
    r->grad_vanishes = want_grad && (r->grad_metric == HP_METRIC_KL || r->grad_metric == HP_METRIC_COS) && !changed;
    if (want_grad) {
        double grad_value = 0;
        r->grad = malloc(HH * sizeof *r->grad);
        r->atp = malloc(HH * sizeof *r->atp);
        r->mlp_grad = malloc((size_t)in->n_layers * sizeof *r->mlp_grad);
        r->mlp_atp = malloc((size_t)in->n_layers * sizeof *r->mlp_atp);
        if (!r->grad || !r->atp || !r->mlp_grad || !r->mlp_atp) {
            st = hp_fail(err, HP_ERR_NOMEM, "eval: out of memory");
            goto out;
        }
        const struct hp_grad_out go = {.grad = r->grad, .atp = r->atp, .mlp_grad = r->mlp_grad, .mlp_atp = r->mlp_atp};
        if ((st = hp_evaluator_grad_units(ev, r->grad_metric, mask, o->ablation, 0, &go, &grad_value, err)) != HP_OK)
            goto out;
        hp_evaluator_grad_phases(ev, &r->ph);
    }
    /* after the gradient: its forward was this variant's pass (or the unmasked one), not run again */
    if (want_grad && changed) {
        if ((st = hp_evaluator_grad_pass_metrics(ev, mask, o->ablation, &r->mt, err)) != HP_OK ||
            (st = hp_evaluator_run(ev, NULL, o->ablation, &r->base, err)) != HP_OK)
            goto out;
    } else {
        const struct hp_mask *both[2] = {mask, NULL};
        struct hp_metrics *got[2] = {NULL, NULL};
        if ((st = hp_evaluator_run_many(ev, both, changed ? 2 : 1, o->ablation, got, err)) != HP_OK)
            goto out;
        r->mt = got[0];
        r->base = got[1];
    }
    r->seconds = hp_now() - t0;
    r->n_ablated = mask ? hp_mask_count_ablated(mask) : 0;
    r->n_mlps = hp_mask_count_mlps(mask);
    r->n_edges = mask ? mask->n_edges : 0;
    r->threads_min = thr.threads_min;
    r->threads_max = thr.threads_max;
    const struct hp_metrics *un = r->base ? r->base : r->mt;
    r->foreign = un->has_loss && hp_evaluator_looks_foreign(ev, un->loss, un->acc);
out:
    hp_evaluator_free(ev);
    hp_mask_free(mask);
    if (st != HP_OK) {
        hp_eval_result_free(r);
        return st;
    }
    *out = r;
    return HP_OK;
}
