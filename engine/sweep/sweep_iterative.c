/*
 * sweep_iterative.c -- the sweep's iterative procedure
 * (HP_STUDY_RUN_ITERATIVE): Michel et al.'s pruning curve, whose jobs depend
 * on earlier results, run step by step after the expanded jobs. Each step's
 * point and candidates are jobs (sweep_jobs.c's sw_run_jobs), a
 * gradient-ranked step's gradient is sw_gradient_at's, an estimate-ranked
 * curve's estimate sweep_scores.c's sw_estimate (its gradients likewise), so
 * a resumed sweep finds every finished step in the store and repeats the
 * same choices.
 *
 * Invariant: the choices depend only on stored or recomputed (identical)
 * numbers; ties go to plan order. The schedule (how many a step prunes,
 * where it stops) is hp_study_schedule's, which hp_study_evals counts by.
 * Must not: print; know SQL.
 */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job.h" // HP_JOB_ITERATIVE_SCORE: the candidates' kind
#include "sweep_priv.h"
#include "util.h"

struct unit {
    int layer, unit;
};

static void ablate_unit(const struct sw_ctx *c, const struct hp_study *s, struct hp_mask *m, struct unit u)
{
    hp_mask_set_unit(m, c->info, s->unit, u.layer, u.unit, 0.0f);
}

struct scored {
    int idx;
    double score;
};

static int by_score(const void *a, const void *b)
{
    const struct scored *x = a, *y = b;
    if (x->score != y->score)
        return x->score < y->score ? -1 : 1;
    return x->idx - y->idx; /* ties: plan order, so the choice is deterministic */
}

/*
 * One step's pruning: the want lowest-scored candidates cand (nc), in score order, skipping a
 * layer's last unit under keep_one_per_layer, ablated in base and marked in pruned. Returns how many.
 */
static int prune_best(const struct sw_ctx *c, const struct hp_study *s, struct hp_mask *base, const struct unit *units,
                      struct scored *cand, int nc, bool *pruned, int *left_in_layer, int want)
{
    hp_qsort(cand, (size_t)nc, sizeof *cand, by_score);
    int n = 0;
    for (int i = 0; i < nc && n < want; i++) {
        struct unit u = units[cand[i].idx];
        if (s->iterative.keep_one_per_layer && left_in_layer[u.layer] <= 1)
            continue;
        pruned[cand[i].idx] = true;
        left_in_layer[u.layer]--;
        ablate_unit(c, s, base, u);
        n++;
    }
    return n;
}

/*
 * Michel et al.'s pruning curve: score every remaining unit by the sw_damage of
 * ablating it on top of those already pruned (rank: exact), by its
 * importance recomputed at the current mask from one gradient (rank:
 * gradient, as Hugging Face's bertology script), or by the study's estimate
 * of its effect, made once at the study's base mask (rank: estimate), prune the least damaging
 * (least important) prune_frac of all units, record the curve point, repeat
 * down to the floor. Each point is evaluated exactly either way. A step that
 * prunes every unit left (no floor) ranks nothing: no scores, no gradient.
 */
static enum hp_status run(struct sw_ctx *c, int si, int64_t *ord, struct hp_error *err)
{
    const struct hp_study *s = &c->plan->studies[si];
    const struct hp_model_info *in = c->info;
    int per_layer = hp_unit_count(in, s->unit);
    struct unit *units = malloc(sizeof *units * (size_t)in->n_layers * per_layer);
    bool *pruned = calloc((size_t)in->n_layers * per_layer, sizeof *pruned);
    struct scored *cand = malloc(sizeof *cand * (size_t)in->n_layers * per_layer);
    int *left_in_layer = calloc((size_t)in->n_layers, sizeof *left_in_layer);
    struct hp_mask *base = NULL; /* from the study's mask: (its units out of play), then every unit pruned so far */
    enum hp_status st = hp_study_base_mask(c->plan->path, s, in, &base, err);
    if (st) {
        free(units), free(pruned), free(cand), free(left_in_layer);
        return st;
    }
    size_t nu = (size_t)in->n_layers * per_layer;
    struct hp_job *cjobs = malloc(sizeof *cjobs * nu);
    int64_t *cords = malloc(sizeof *cords * nu);
    struct hp_store_metrics *cres = malloc(sizeof *cres * nu);
    const bool by_grad = s->iterative.rank == HP_RANK_GRADIENT, by_est = s->iterative.rank == HP_RANK_ESTIMATE;
    double *est = by_est ? malloc(sizeof *est * nu) : NULL;
    struct sw_grad_buf gb = {0};
    double *raw = by_grad ? malloc(sizeof *raw * nu) : NULL, *imp = by_grad ? malloc(sizeof *imp * nu) : NULL;
    struct hp_store_score *rows = by_grad ? malloc(sizeof *rows * nu) : NULL;
    char(*labels)[32] = by_grad ? malloc(sizeof *labels * nu) : NULL;
    if (!units || !pruned || !cand || !left_in_layer || !base || !cjobs || !cords || !cres || (by_est && !est) ||
        (by_grad && (!sw_grad_buf_init(&gb, c, false) || !raw || !imp || !rows || !labels))) {
        free(units), free(pruned), free(cand), free(left_in_layer), hp_mask_free(base);
        free(cjobs), free(cords), free(cres), free(est);
        sw_grad_buf_free(&gb), free(raw), free(imp), free(rows), free(labels);
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    }
    int n = 0;
    for (int l = 0; l < in->n_layers; l++)
        for (int u = 0; u < per_layer; u++)
            if (sw_selected(s->n_layers_sel, s->layers, l) && sw_selected(s->n_units_sel, s->units, u) &&
                !hp_unit_pruned(in, s->unit, l, u) && !hp_mask_unit_ablated(base, in, s->unit, l, u)) {
                units[n++] = (struct unit){l, u};
                left_in_layer[l]++;
            }
    struct hp_iterative_schedule sc = hp_study_schedule(s, in); /* hp_study_evals counts by it too */
    assert(sc.n_units == n);
    int n_pruned = 0;
    const bool from_base = hp_mask_first_changed(base, in->n_layers) < in->n_layers;
    /* ranked by an estimate: every unit's, once, where the curve starts (none when its first step takes all) */
    const int want0 = hp_iterative_step(&sc, n);
    if (by_est && want0 > 0 && want0 < n)
        st = sw_estimate(c, si, 1, est, err);

    for (int step = 0; st == HP_OK && !sw_stopping(c); step++) {
        /* the curve point: everything pruned so far */
        struct hp_job point = {.study = si, .step = step, .k = n_pruned, .layer = -1, .unit = -1, .unit2 = -1,
                               .mask = base};
        snprintf(point.label, sizeof point.label, "step %d", step);
        int64_t o_point = (*ord)++;
        int want = hp_iterative_step(&sc, n - n_pruned);
        const bool all = want == n - n_pruned; /* hp_study_evals and hp_study_backwards count the same */
        /* ranked by gradient: the gradient at the current mask, then the point: that pass's metrics (at the
         * unmasked model the baseline's bits; at any other mask a result of its own, job.grad_pass) */
        struct hp_job gj = {.study = si, .step = step, .k = -1, .layer = -1, .unit = -1, .unit2 = -1, .mask = base};
        if (by_grad && want > 0 && !all && ((st = sw_gradient_at(c, base, &gb, &gj, err)) != HP_OK || sw_stopping(c)))
            break;
        point.grad_pass = by_grad && want > 0 && !all && (n_pruned > 0 || from_base); /* --plain: its own whole pass */
        st = sw_run_jobs(c, &o_point, &point, 1, NULL, NULL, err);
        if (st != HP_OK || want == 0)
            break;
        if (all) {
            int nc = 0;
            for (int i = 0; i < n; i++)
                if (!pruned[i])
                    cand[nc++] = (struct scored){i, 0};
            n_pruned += prune_best(c, s, base, units, cand, nc, pruned, left_in_layer, want);
            continue;
        }
        if (by_est) {
            /* the smallest estimated effects go first (a negative one: the loss falls without the unit) */
            int nc = 0;
            for (int i = 0; i < n; i++)
                if (!pruned[i] && !(s->iterative.keep_one_per_layer && left_in_layer[units[i].layer] <= 1))
                    cand[nc++] = (struct scored){i, est[units[i].layer * per_layer + units[i].unit]};
            if (nc == 0)
                break;
            n_pruned += prune_best(c, s, base, units, cand, nc, pruned, left_in_layer, want);
            continue;
        }
        if (by_grad) {
            /* rank the candidates by importance at the current mask: its scores stored */
            hp_importance(gb.g.seq_grad, gb.g.n_seqs, in, s->unit, s->normalize, raw, imp);
            int nc = 0;
            for (int i = 0; i < n; i++) {
                if (pruned[i] || (s->iterative.keep_one_per_layer && left_in_layer[units[i].layer] <= 1))
                    continue;
                int at = units[i].layer * per_layer + units[i].unit;
                hp_unit_label(labels[nc], sizeof labels[nc], s->unit, units[i].layer, units[i].unit);
                rows[nc] = (struct hp_store_score){units[i].layer, units[i].unit, labels[nc], imp[at], raw[at]};
                cand[nc++] = (struct scored){i, imp[at]};
            }
            const struct hp_store_scores of = {.sweep_id = c->sweep_id, .study = s->name,
                                               .kind = hp_study_kind_name(s->kind), .kv = s->unit, .step = step + 1,
                                               .normalize = hp_normalize_name(s->normalize), .grad_key = gb.key};
            st = hp_store_put_scores(c->store, &of, rows, nc, err);
            if (st != HP_OK || nc == 0)
                break;
            n_pruned += prune_best(c, s, base, units, cand, nc, pruned, left_in_layer, want);
            continue;
        }
        /* score the candidates, together */
        int nc = 0;
        for (int i = 0; i < n && st == HP_OK; i++) {
            if (pruned[i] || (s->iterative.keep_one_per_layer && left_in_layer[units[i].layer] <= 1))
                continue;
            struct hp_mask *m = hp_mask_new(in->n_layers, in->n_heads);
            if (!m || !hp_mask_copy(m, base)) {
                hp_mask_free(m);
                st = hp_fail(err, HP_ERR_NOMEM, "out of memory");
                break;
            }
            ablate_unit(c, s, m, units[i]);
            cjobs[nc] = (struct hp_job){.study = si, .step = step + 1, .k = n_pruned + 1, .layer = units[i].layer,
                                        .unit = units[i].unit, .unit2 = -1, .mask = m};
            char unit[64];
            hp_unit_label(unit, sizeof unit, s->unit, units[i].layer, units[i].unit);
            snprintf(cjobs[nc].label, sizeof cjobs[nc].label, "step %d: %s", step + 1, unit);
            cords[nc] = (*ord)++;
            cand[nc++] = (struct scored){i, 0};
        }
        if (st == HP_OK)
            st = sw_run_jobs(c, cords, cjobs, nc, HP_JOB_ITERATIVE_SCORE, cres, err);
        for (int i = 0; i < nc; i++) {
            hp_mask_free(cjobs[i].mask);
            cand[i].score = sw_damage(c, &cres[i]);
            /* a NaN or missing score never ranks a unit */
            if (st == HP_OK && !isfinite(cand[i].score))
                st = hp_fail(err, HP_ERR_FORMAT, "%s: '%s' has no finite %s score in %s: it cannot rank a unit",
                             c->plan->path, cjobs[i].label, c->plan->metric, c->o->db_path);
        }
        if (st != HP_OK || sw_stopping(c) || nc == 0)
            break;
        n_pruned += prune_best(c, s, base, units, cand, nc, pruned, left_in_layer, want);
    }
    free(units), free(pruned), free(cand), free(left_in_layer), hp_mask_free(base);
    free(cjobs), free(cords), free(cres), free(est);
    sw_grad_buf_free(&gb), free(raw), free(imp), free(rows), free(labels);
    return st;
}

const struct sw_proc sw_proc_iterative = {.run = run, .before_jobs = false};
