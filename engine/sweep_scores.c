/*
 * sweep_scores.c -- the sweep's scores procedure (HP_STUDY_RUN_SCORES): the
 * gradient at the study's base mask, the unmasked model without a mask:
 * (sweep_jobs.c's sw_gradient_at: found in the store or computed once and
 * stored), every selected unit's score from
 * it by the rule its kind's row names (hp_study_score_of: importance or the
 * first-order attribution estimate), into the scores table. It runs before
 * the shard's expanded jobs: its forward at the unmasked model is also the
 * baseline's pass, whose metrics (the same bits) the evaluator then hands to
 * the baseline's job.
 *
 * Must not: print; know SQL; know a study kind by name (the rule is the
 * row's).
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "study/study.h" // hp_study_score_of: what the study scores by
#include "sweep_priv.h"
#include "util_int.h"

/*
 * The units a scores study covers (selected, in the checkpoint, not removed
 * by its base mask), with their scores, as store rows (labels in labels,
 * (n_units) of 32 bytes); returns how many.
 */
static int score_rows(const struct sw_ctx *c, const struct hp_study *s, const struct hp_mask *base,
                      const double *score, const double *raw, struct hp_store_score *rows, char (*labels)[32])
{
    const int U = hp_unit_count(c->info, s->kv);
    int n = 0;
    for (int l = 0; l < c->info->n_layers; l++)
        for (int u = 0; u < U; u++)
            if (sw_selected(s->n_layers_sel, s->layers, l) && sw_selected(s->n_units_sel, s->units, u) &&
                !hp_unit_pruned(c->info, s->kv, l, u) && !hp_mask_unit_ablated(base, c->info, s->kv, l, u)) {
                hp_unit_label(labels[n], sizeof labels[n], s->kv, l, u);
                rows[n] = (struct hp_store_score){l, u, labels[n], score[l * U + u], raw[l * U + u]};
                n++;
            }
    return n;
}

/* A scores study: one gradient at its base mask (the unmasked model without a mask:), every unit's score from it
 * by its kind's rule. */
static enum hp_status run(struct sw_ctx *c, int si, int64_t *ord, struct hp_error *err)
{
    (void)ord; /* a gradient is no job of the sweep's */
    const struct hp_study *s = &c->plan->studies[si];
    const enum hp_study_score rule = hp_study_score_of(s->kind);
    assert(rule == HP_STUDY_SCORE_IMPORTANCE || rule == HP_STUDY_SCORE_ATTRIBUTION);
    const struct hp_model_info *in = c->info;
    const size_t nu = (size_t)in->n_layers * hp_unit_count(in, s->kv);
    struct sw_grad_buf b;
    struct hp_mask *base = NULL;
    enum hp_status st = hp_study_base_mask(c->plan->path, s, in, &base, err);
    if (st)
        return st;
    double *raw = malloc(nu * sizeof *raw), *score = malloc(nu * sizeof *score);
    struct hp_store_score *rows = malloc(nu * sizeof *rows);
    char(*labels)[32] = malloc(nu * sizeof *labels);
    st = sw_grad_buf_init(&b, c) && raw && score && rows && labels ? HP_OK : hp_fail(err, HP_ERR_NOMEM, "out of memory");
    struct hp_job job = {.study = si, .layer = -1, .unit = -1, .unit2 = -1, .mask = base};
    if (st == HP_OK)
        st = sw_gradient_at(c, base, &b, &job, err);
    if (st == HP_OK) {
        if (rule == HP_STUDY_SCORE_IMPORTANCE) {
            hp_importance(b.g.seq_grad, b.g.n_seqs, in, s->kv, s->normalize, raw, score);
        } else {
            hp_attribution(b.g.atp, in, s->kv, raw);
            memcpy(score, raw, nu * sizeof *raw);
        }
        int n = score_rows(c, s, base, score, raw, rows, labels);
        st = hp_store_put_scores(c->store, c->sweep_id, s->name, hp_study_kind_name(s->kind), s->kv, 0,
                                 rule == HP_STUDY_SCORE_IMPORTANCE ? hp_normalize_name(s->normalize) : NULL, b.key, rows,
                                 n, err);
    }
    sw_grad_buf_free(&b);
    hp_mask_free(base);
    free(raw), free(score), free(rows), free(labels);
    return st;
}

const struct sw_proc sw_proc_scores = {.run = run, .before_jobs = true};
