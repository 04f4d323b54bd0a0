/*
 * sweep_scores.c -- the sweep's scores procedure (HP_STUDY_RUN_SCORES): the
 * gradients a study's rule needs (sweep_jobs.c's sw_gradient_at: each found
 * in the store or computed once and stored): one at the study's base mask,
 * the unmasked model without a mask:, for importance and the one-pass
 * estimators, or integrated gradients' along the gate path; then every
 * selected unit's score by the rule its kind's row names
 * (hp_study_score_of) and, for attribution, its estimator, into the scores
 * table. It runs before the shard's expanded jobs: its forward at the
 * unmasked model is also the baseline's pass, whose metrics (the same bits)
 * the evaluator then hands to the baseline's job.
 *
 * Must not: print; know SQL; know a study kind by name (the rule is the
 * row's).
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "study/study.h" // hp_study_score_of: what the study scores by
#include "sweep_priv.h"
#include "util.h"

/*
 * The units a scores study covers (selected, in the checkpoint, not removed
 * by its base mask), with their scores, as store rows (labels in labels,
 * (n_units) of 32 bytes); returns how many.
 */
static int score_rows(const struct sw_ctx *c, const struct hp_study *s, const struct hp_mask *base,
                      const double *score, const double *raw, struct hp_store_score *rows, char (*labels)[32])
{
    const int U = hp_unit_count(c->info, s->unit);
    int n = 0;
    for (int l = 0; l < c->info->n_layers; l++)
        for (int u = 0; u < U; u++)
            if (sw_selected(s->n_layers_sel, s->layers, l) && sw_selected(s->n_units_sel, s->units, u) &&
                !hp_unit_pruned(c->info, s->unit, l, u) && !hp_mask_unit_ablated(base, c->info, s->unit, l, u)) {
                hp_unit_label(labels[n], sizeof labels[n], s->unit, l, u);
                rows[n] = (struct hp_store_score){l, u, labels[n], score[l * U + u], raw[l * U + u]};
                n++;
            }
    return n;
}

/*
 * Integrated gradients along the gate path (estimator ig, ig-layer) into est: each unit's -(1/steps) sum over
 * t_k = (k + 1/2) / steps of dL/dxi at its gate t_k, the study's units moving together (ig) or a layer's at a
 * time, the rest at 1 (ig-layer: each a gradient of that layer's gates on); units its base mask removed stay at 0.
 * Each gradient is sw_gradient_from's (found or computed and stored, keyed by its fractional gates); b holds the
 * last of them.
 */
static enum hp_status integrate(struct sw_ctx *c, const struct hp_study *s, int si, const struct hp_mask *base,
                                struct sw_grad_buf *b, double *est, double *sums, struct hp_error *err)
{
    const struct hp_model_info *in = c->info;
    const int U = hp_unit_count(in, s->unit), steps = s->steps;
    const bool per_layer = s->estimator == HP_EST_IG_LAYER;
    for (size_t i = 0; i < (size_t)in->n_layers * U; i++)
        est[i] = 0;
    struct hp_mask *m = hp_mask_new(in->n_layers, in->n_heads);
    if (!m)
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    enum hp_status st = HP_OK;
    int step = 0;
    for (int l0 = 0; l0 < (per_layer ? in->n_layers : 1) && st == HP_OK; l0++) {
        if (per_layer && !sw_selected(s->n_layers_sel, s->layers, l0))
            continue;
        for (int k = 0; k < steps && st == HP_OK; k++) {
            const float t = (float)((k + 0.5) / steps);
            if (!hp_mask_copy(m, base)) {
                st = hp_fail(err, HP_ERR_NOMEM, "out of memory");
                break;
            }
            for (int l = per_layer ? l0 : 0; l < (per_layer ? l0 + 1 : in->n_layers); l++)
                for (int u = 0; u < U; u++)
                    if (sw_selected(s->n_layers_sel, s->layers, l) && sw_selected(s->n_units_sel, s->units, u) &&
                        !hp_unit_pruned(in, s->unit, l, u) && !hp_mask_unit_ablated(base, in, s->unit, l, u))
                        hp_mask_set_unit(m, in, s->unit, l, u, t);
            struct hp_job job = {.study = si, .step = step++, .layer = -1, .unit = -1, .unit2 = -1, .mask = m};
            /* a layer's gates need the reverse pass down to it only, and the forward from it (the gates below are
             * the same on every such pass: the evaluator keeps their residual stream) */
            st = sw_gradient_from(c, m, per_layer ? l0 : 0, b, &job, err);
            if (st != HP_OK)
                break;
            hp_unit_sums(s->unit == HP_UNIT_MLP ? b->g.mlp_grad : b->g.grad, in, s->unit, sums);
            for (int l = per_layer ? l0 : 0; l < (per_layer ? l0 + 1 : in->n_layers); l++)
                for (int u = 0; u < U; u++)
                    est[l * U + u] -= sums[l * U + u] / steps;
        }
    }
    hp_mask_free(m);
    return st;
}

/* Study si's scores by rule, stored at step (0 for a scores study's own). */
static enum hp_status scores_by(struct sw_ctx *c, int si, enum hp_study_score rule, int step, double *out,
                                struct hp_error *err)
{
    const struct hp_study *s = &c->plan->studies[si];
    assert(rule == HP_STUDY_SCORE_IMPORTANCE || rule == HP_STUDY_SCORE_ATTRIBUTION);
    const enum hp_estimator est = s->estimator;
    const bool path = rule == HP_STUDY_SCORE_ATTRIBUTION && (est == HP_EST_IG || est == HP_EST_IG_LAYER);
    const struct hp_model_info *in = c->info;
    const size_t nu = (size_t)in->n_layers * hp_unit_count(in, s->unit);
    struct sw_grad_buf b;
    struct hp_mask *base = NULL;
    enum hp_status st = hp_study_base_mask(c->plan->path, s, in, &base, err);
    if (st)
        return st;
    double *raw = malloc(nu * sizeof *raw), *score = malloc(nu * sizeof *score);
    struct hp_store_score *rows = malloc(nu * sizeof *rows);
    char(*labels)[32] = malloc(nu * sizeof *labels);
    char *base_text = hp_mask_format(base);
    const bool mlp = s->unit == HP_UNIT_MLP; /* the MLPs' gates' gradients: the pass's mlp_* arrays */
    st = sw_grad_buf_init(&b, c, mlp) && raw && score && rows && labels && base_text
             ? HP_OK
             : hp_fail(err, HP_ERR_NOMEM, "out of memory");
    struct hp_job job = {.study = si, .layer = -1, .unit = -1, .unit2 = -1, .mask = base};
    if (st == HP_OK && path)
        st = integrate(c, s, si, base, &b, raw, score, err);
    else if (st == HP_OK)
        st = sw_gradient_at(c, base, &b, &job, err);
    if (st == HP_OK) {
        const double *seq_grad = mlp ? b.g.mlp_seq_grad : b.g.seq_grad, *atp = mlp ? b.g.mlp_atp : b.g.atp;
        if (rule == HP_STUDY_SCORE_IMPORTANCE)
            hp_importance(seq_grad, b.g.n_seqs, in, s->unit, s->normalize, raw, score);
        else if (est == HP_EST_IMPORTANCE)
            hp_importance(seq_grad, b.g.n_seqs, in, s->unit, HP_NORMALIZE_NONE, raw, score);
        else if (est == HP_EST_ATP)
            hp_unit_sums(atp, in, s->unit, raw);
        if (rule == HP_STUDY_SCORE_ATTRIBUTION)
            memcpy(score, raw, nu * sizeof *raw);
        int n = score_rows(c, s, base, score, raw, rows, labels);
        const bool imp = rule == HP_STUDY_SCORE_IMPORTANCE;
        const struct hp_store_scores of = {.sweep_id = c->sweep_id,
                                           .study = s->name,
                                           .kind = hp_study_kind_name(s->kind),
                                           .kv = s->unit,
                                           .step = step,
                                           .normalize = imp ? hp_normalize_name(s->normalize) : NULL,
                                           .estimator = imp ? NULL : hp_estimator_name(est),
                                           .base = base_text,
                                           .grad_key = b.key};
        st = hp_store_put_scores(c->store, &of, rows, n, err);
        if (out)
            memcpy(out, score, nu * sizeof *score);
    }
    sw_grad_buf_free(&b);
    hp_mask_free(base);
    free(raw), free(score), free(rows), free(labels), free(base_text);
    return st;
}

enum hp_status sw_scores(struct sw_ctx *c, int si, double *out, struct hp_error *err)
{
    return scores_by(c, si, hp_study_score_of(c->plan->studies[si].kind), 0, out, err);
}

enum hp_status sw_estimate(struct sw_ctx *c, int si, int step, double *out, struct hp_error *err)
{
    return scores_by(c, si, HP_STUDY_SCORE_ATTRIBUTION, step, out, err);
}

/* A scores study: sw_scores, its scores kept in the store only. */
static enum hp_status run(struct sw_ctx *c, int si, int64_t *ord, struct hp_error *err)
{
    (void)ord; /* a gradient is no job of the sweep's */
    return sw_scores(c, si, NULL, err);
}

const struct sw_proc sw_proc_scores = {.run = run, .before_jobs = true};
