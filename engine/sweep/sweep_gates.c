/*
 * sweep_gates.c -- the sweep's gates procedure (HP_STUDY_RUN_GATES): for
 * each lambda of a gates study, its training run (gates.c's steps on the
 * plan's training set), saved in the store as it goes and resumed from
 * there after a kill, then its two curve points, evaluated like any
 * variant (sweep_jobs.c's sw_run_jobs).
 *
 * Invariant: a training run's content address (gate_run_key) is everything
 * that determines its steps, so a resumed run continues the same one.
 * Must not: print; know SQL; train (gates.c does).
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gates.h" // the training steps and their state
#include "job.h"   // HP_JOB_GATES_FRAC: the test-time gates' point
#include "sweep_priv.h"
#include "util.h"

/* A training run's state is saved every HP_GATES_SAVE_STEPS steps or HP_GATES_SAVE_S seconds, whichever comes
 * first, when sw_stopping and when finished: a kill loses at most that much training (each save is one transaction
 * of a few arrays the size of the heads, cheap beside a step) */
#define HP_GATES_SAVE_S 10.0
#define HP_GATES_SAVE_STEPS 25

/* The content address of study s's training run at lambda: what determines every step of it. */
static void gate_run_key(const struct sw_ctx *c, const struct hp_study *s, const char *train_digest, double lambda,
                         char key[HP_DIGEST_HEX])
{
    char text[1024];
    snprintf(text, sizeof text, "headprune-gates-1|%d|%s|%s|%s|%a|%d|%a|%a|%a|%llu|%s", HP_NUMERIC_VERSION,
             c->model_digest, train_digest, hp_metric_name(c->metric), lambda, s->gates.steps, s->gates.lr, s->gates.beta, s->gates.init,
             (unsigned long long)s->gates.seed, s->name);
    hp_digest_text(text, key);
}

/* Progress (and the summary's counts) for one training step: run now, or found done. */
static void gate_step_done(struct sw_ctx *c, int si, double lambda, int step, bool found)
{
    struct hp_job j = {.study = si, .step = step, .layer = -1, .unit = -1, .unit2 = -1};
    snprintf(j.label, sizeof j.label, "lambda %g, step %d", lambda, step);
    if (found)
        c->sum->n_cached++;
    else
        c->sum->n_run++;
    sw_job_done(c, &j, SW_TRAIN_STEP);
}

/*
 * A gates study: for each lambda, its training run (gates.c), found
 * finished in the store, resumed from the state saved there, or started;
 * saved every HP_GATES_SAVE_S seconds, when sw_stopping and once finished.
 * Then its two curve points, evaluated exactly on the held-out set like any
 * variant: the pruned set (the heads whose test-time gate is 0 ablated, kind
 * 'gates', the key of every variant of that mask) and the model at its
 * test-time gates (kind 'gates-frac'), each at step = the lambda's index.
 */
static enum hp_status run(struct sw_ctx *c, int si, int64_t *ord, struct hp_error *err)
{
    const struct hp_study *s = &c->plan->studies[si];
    const struct hp_model_info *in = c->info;
    const int n = in->n_layers * in->n_heads;
    char train_digest[HP_DIGEST_HEX], train_abs[PATH_MAX];
    hp_digest_data(c->train, train_digest);
    const char *train_path = s->gates.train ? (realpath(s->gates.train, train_abs) ? train_abs : s->gates.train) : c->train->path;
    struct hp_mask *pruned = hp_mask_new(in->n_layers, in->n_heads), *frac = hp_mask_new(in->n_layers, in->n_heads);
    double *test_gate = malloc((size_t)n * sizeof *test_gate);
    enum hp_status st = pruned && frac && test_gate ? HP_OK : hp_fail(err, HP_ERR_NOMEM, "out of memory");
    for (int li = 0; st == HP_OK && li < s->gates.n_lambda && !sw_stopping(c); li++) {
        const double lambda = s->gates.lambda[li];
        char key[HP_DIGEST_HEX];
        gate_run_key(c, s, train_digest, lambda, key);
        struct hp_gates_state gs;
        if (!hp_gates_state_init(&gs, n, s->gates.init, s->gates.seed, s->name, lambda)) {
            st = hp_fail(err, HP_ERR_NOMEM, "out of memory");
            break;
        }
        struct hp_store_gate_run r = {
            .key = key, .model_digest = c->model_digest, .train_digest = train_digest, .train_path = train_path,
            .train_seqs = c->train->n_seqs, .metric = hp_metric_name(c->metric), .lambda = lambda, .lr = s->gates.lr,
            .beta = s->gates.beta, .init = s->gates.init, .seed = s->gates.seed, .steps = s->gates.steps, .n_layers = in->n_layers,
            .n_heads = in->n_heads, .log_alpha = gs.log_alpha, .adam_m = gs.m, .adam_v = gs.v, .n_kept = -1,
        };
        bool found = false;
        st = hp_store_get_gate_run(c->store, &r, &found, err);
        if (st == HP_OK && found) { /* resume where it was saved */
            gs.step = r.step;
            memcpy(gs.rng, r.rng, sizeof gs.rng);
            gs.objective = r.objective, gs.value = r.value, gs.penalty = r.penalty;
            for (int k = 1; k <= gs.step; k++)
                gate_step_done(c, si, lambda, k, true);
        }
        const struct hp_gates_cfg cfg = {.metric = c->metric, .lambda = lambda, .lr = s->gates.lr, .beta = s->gates.beta,
                                         .fixed = in->pruned};
        const double wall0 = found ? r.wall_s : 0;
        double t0 = hp_now(), t_saved = t0;
        while (st == HP_OK && r.n_kept < 0 && gs.step < s->gates.steps) {
            sw_adapt_threads(c);
            const double t_step = hp_now();
            if ((st = hp_gates_step(c->train_ev, &cfg, &gs, err)) != HP_OK) {
                char inner[HP_ERR_MSG_MAX];
                snprintf(inner, sizeof inner, "%s", err ? err->msg : "");
                st = hp_fail(err, st, "%s:%d: study '%s', lambda %g: %s", c->plan->path, s->line, s->name, lambda,
                             inner);
                break;
            }
            sw_work_timed(c, SW_TRAIN_STEP, 1, hp_now() - t_step);
            gate_step_done(c, si, lambda, gs.step, false);
            const bool done = gs.step == s->gates.steps;
            if (done || sw_stopping(c) || gs.step % HP_GATES_SAVE_STEPS == 0 || hp_now() - t_saved >= HP_GATES_SAVE_S) {
                r.step = gs.step;
                memcpy(r.rng, gs.rng, sizeof r.rng);
                r.objective = gs.objective, r.value = gs.value, r.penalty = gs.penalty;
                r.wall_s = wall0 + (hp_now() - t0);
                if (done) { /* the test-time gates in double, as the formula gives them (the mask's are floats) */
                    r.n_kept = hp_gates_state_mask(&gs, in->pruned, NULL, NULL);
                    for (int h = 0; h < n; h++)
                        test_gate[h] = in->pruned && in->pruned[h] ? 0.0 : hp_gate_test(gs.log_alpha[h]);
                    r.gate = test_gate;
                }
                st = hp_store_put_gate_run(c->store, &r, c->threads, hp_runtime_kernel(), err);
                t_saved = hp_now();
            }
            if (sw_stopping(c))
                break;
        }
        if (st != HP_OK || gs.step < s->gates.steps) { /* stopped (saved above) or failed */
            hp_gates_state_free(&gs);
            break;
        }
        /* the lambda's points: the pruned set, and the model at the test-time gates */
        hp_gates_state_mask(&gs, in->pruned, frac->gate, pruned->gate);
        hp_gates_state_free(&gs);
        /* the heads the checkpoint lacks are held closed in training but are not the lambda's to prune */
        hp_mask_drop_absent(pruned, in);
        hp_mask_drop_absent(frac, in);
        const int k_pruned = hp_mask_count_ablated(pruned);
        struct hp_job jobs[2];
        for (int k = 0; k < 2; k++) {
            jobs[k] = (struct hp_job){.study = si, .step = li, .k = k_pruned, .layer = -1, .unit = -1, .unit2 = -1,
                                      .mask = k == 0 ? pruned : frac};
            snprintf(jobs[k].label, sizeof jobs[k].label, "lambda %g%s", lambda, k == 0 ? "" : ", test-time gates");
        }
        int64_t o0 = (*ord)++, o1 = (*ord)++;
        st = sw_run_jobs(c, &o0, &jobs[0], 1, NULL, NULL, err); /* kind: the study's */
        if (st == HP_OK && !sw_stopping(c))
            st = sw_run_jobs(c, &o1, &jobs[1], 1, HP_JOB_GATES_FRAC, NULL, err);
        if (st == HP_OK && !sw_stopping(c))
            st = hp_store_put_sweep_gate(c->store, c->sweep_id, s->name, li, lambda, key, err);
    }
    hp_mask_free(pruned);
    hp_mask_free(frac);
    free(test_gate);
    return st;
}

const struct sw_proc sw_proc_gates = {.run = run, .before_jobs = false};
