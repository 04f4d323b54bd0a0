/*
 * sweep.c -- run a plan's jobs into the results database: the entry of the
 * sweep family (sweep_priv.h says who owns what).
 *
 * Owns the run: opening the model, the data (bound for the plan's ablation:
 * denoise's swapped, before its digest is taken), the evaluators (and the gates
 * studies' training set) and the store, the mean-ablation statistics, the
 * sweep's row, deterministic job order and sharding (ord % N == I), and the
 * table of procedures (one row per enum hp_study_run) from which each study
 * runs the procedure its kind names (hp_study_run_of, from the kind's row in
 * engine/plan/study/): the scores before the shard's expanded jobs, the rest
 * after them, in plan order, in the first shard only. The jobs themselves
 * run through sweep_jobs.c, which skips those whose content address is
 * already finished in the store.
 * Invariant: the same plan, data and threads give the same results whether
 * the sweep ran at once or was resumed after kills, because every job is
 * evaluated alone from the same inputs and iterative choices depend only on
 * stored or recomputed (identical) numbers.
 * Must not: print; know SQL (the store does that); know a study kind or
 * what a procedure does (the procedures' files do).
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include <assert.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gates.h"   // hp_gates_data_load: the gates studies' training set
#include "study/study.h" // hp_study_run_of: the procedure each study kind runs
#include "sweep_priv.h"
#include "util.h"

/* Mean-ablation statistics from the store, or computed once and stored. */
static enum hp_status load_means(struct sw_ctx *c, struct hp_error *err)
{
    const struct hp_model_info *in = c->info;
    struct hp_means m = {.n_layers = in->n_layers, .seq_len = c->data->seq_len, .width = in->n_heads * in->d_head,
                         .d_model = in->d_model};
    size_t n_all = (size_t)m.n_layers * m.width, n_mall = (size_t)m.n_layers * m.d_model;
    m.all = malloc(n_all * sizeof(float));
    m.pos = malloc(n_all * m.seq_len * sizeof(float));
    m.mlp_all = malloc(n_mall * sizeof(float));
    m.mlp_pos = malloc(n_mall * m.seq_len * sizeof(float));
    bool found = false;
    enum hp_status st = m.all && m.pos && m.mlp_all && m.mlp_pos
                            ? hp_store_get_means(c->store, c->model_digest, c->data_digest, &m, &found, err)
                            : hp_fail(err, HP_ERR_NOMEM, "out of memory for mean-ablation statistics");
    if (st == HP_OK && found)
        st = hp_evaluator_set_means(c->ev, &m, err);
    free(m.all);
    free(m.pos);
    free(m.mlp_all);
    free(m.mlp_pos);
    if (st != HP_OK || found)
        return st;
    struct hp_means mine;
    st = hp_evaluator_means(c->ev, &mine, err);
    return st == HP_OK ? hp_store_put_means(c->store, c->model_digest, c->data_digest, &mine, err) : st;
}

// --- the procedures ------------------------------------------------------------

extern const struct sw_proc sw_proc_scores, sw_proc_iterative, sw_proc_roles, sw_proc_gates, sw_proc_patching,
    sw_proc_screen, sw_proc_circuit;
static const struct sw_proc no_proc = {.run = NULL}; /* the expanded jobs are the study */

/* One row per enum hp_study_run, at its value: the procedure a study kind names in its row (hp_study_run_of),
 * each defined in its own file (engine/sweep/sweep_<procedure>.c). */
static const struct sw_proc *const procs[] = {
    [HP_STUDY_RUN_JOBS] = &no_proc,
    [HP_STUDY_RUN_SCORES] = &sw_proc_scores,
    [HP_STUDY_RUN_ITERATIVE] = &sw_proc_iterative,
    [HP_STUDY_RUN_ROLES] = &sw_proc_roles,
    [HP_STUDY_RUN_GATES] = &sw_proc_gates,
    [HP_STUDY_RUN_PATCHING] = &sw_proc_patching,
    [HP_STUDY_RUN_SCREEN] = &sw_proc_screen,
    [HP_STUDY_RUN_CIRCUIT] = &sw_proc_circuit,
};
static_assert(sizeof procs / sizeof procs[0] == HP_STUDY_RUN_COUNT, "a procedure without its row in procs");

/* Study si's procedure, if it has one that runs before the shard's jobs (before) or after them (!before). */
static enum hp_status run_procedure(struct sw_ctx *c, int si, bool before, int64_t *ord, struct hp_error *err)
{
    const struct sw_proc *p = procs[hp_study_run_of(c->plan->studies[si].kind)];
    return p->run && p->before_jobs == before ? p->run(c, si, ord, err) : HP_OK;
}

enum hp_status hp_sweep_run(const struct hp_plan *plan, const struct hp_sweep_opts *o, struct hp_sweep_summary *sum,
                            struct hp_error *err)
{
    memset(sum, 0, sizeof *sum);
    struct sw_ctx c = {.plan = plan, .o = o, .sum = sum, .t0 = hp_now(), .auto_threads = o->threads <= 0};
    hp_auto_threads_begin(&c.load);
    struct hp_joblist *jobs = NULL;
    enum hp_status st = hp_model_open(plan->model, &c.model, err);
    if (st == HP_OK) {
        c.info = hp_model_get_info(c.model);
        st = hp_data_load_for(plan->data, plan->model, c.info, plan->seq_len, &c.data, err);
    }
    if (st == HP_OK) /* denoise runs on the data swapped (its digest says so): before the evaluator and the store */
        st = hp_ablation_bind_data(plan->ablation, c.data, err);
    if (st == HP_OK)
        st = hp_evaluator_new(c.model, c.data, &c.ev, err);
    /* the plan as run: its metric resolved against the model (a copy; the studies are shared) */
    struct hp_plan eff = *plan;
    const char *metric = NULL;
    if (st == HP_OK)
        st = hp_evaluator_pick_metric(c.ev, plan->path, plan->metric, &metric, err);
    if (st == HP_OK) {
        snprintf(eff.metric, sizeof eff.metric, "%s", metric);
        hp_metric_parse(metric, &c.metric); /* a name from the metric table: always found */
        c.plan = plan = &eff;
        hp_evaluator_set_plain(c.ev, o->plain);
        hp_evaluator_keep_grad_metrics(c.ev, true); /* a gradient-ranked curve's points (hp_job.grad_pass) */
    }
    if (st == HP_OK) /* before the database is touched: nothing is written for a plan refused */
        st = hp_plan_check_grad(plan, c.ev, c.info, metric, err);
    for (int si = 0; st == HP_OK && si < plan->n_studies; si++) { /* ... nor for data a procedure refuses */
        const struct sw_proc *p = procs[hp_study_run_of(plan->studies[si].kind)];
        st = p->check ? p->check(&c, si, err) : HP_OK;
    }
    if (st == HP_OK) /* gates studies: their training set, and with split the held-out set is what it leaves */
        st = hp_gates_data_load(plan, metric, c.model, &c.data, &c.train, err);
    if (st == HP_OK && c.train) {
        hp_evaluator_free(c.ev);
        c.ev = NULL;
        st = hp_evaluator_new(c.model, c.data, &c.ev, err);
        if (st == HP_OK) {
            hp_evaluator_set_plain(c.ev, o->plain);
            hp_evaluator_keep_grad_metrics(c.ev, true);
            st = hp_evaluator_new(c.model, c.train, &c.train_ev, err);
        }
    }
    if (st == HP_OK)
        st = hp_plan_expand(plan, c.info, &jobs, err);
    if (st == HP_OK) {
        hp_digest_model(c.model, c.model_digest);
        hp_digest_data(c.data, c.data_digest);
        hp_digest_text(plan->text ? plan->text : "", c.plan_digest);
        st = hp_store_open(o->db_path, &c.store, err);
    }
    if (st == HP_OK) {
        sw_start_threads(&c);
        /* between the evaluator's chunks and blocks too, so a run that starts beside another
         * (both measuring an idle start) drops its threads within a quarter second */
        hp_evaluator_set_progress(c.ev, sw_on_evaluator_progress, &c);
        if (c.train_ev)
            hp_evaluator_set_progress(c.train_ev, sw_on_evaluator_progress, &c);
    }
    if (st == HP_OK && hp_ablation_reads_means(plan->ablation))
        st = load_means(&c, err);
    if (st == HP_OK) {
        const struct hp_model_info *in = c.info;
        /* absolute, so a later reader finds the files wherever it runs (relative ones name the working folder) */
        char plan_abs[PATH_MAX], model_abs[PATH_MAX], data_abs[PATH_MAX];
        struct hp_store_sweep_row d = {
            .plan_digest = c.plan_digest, .model_digest = c.model_digest, .data_digest = c.data_digest,
            .name = plan->name, .plan_path = realpath(plan->path, plan_abs) ? plan_abs : plan->path,
            .plan_text = plan->text, .ablation = hp_ablation_name(plan->ablation), .metric = plan->metric,
            .model_path = realpath(plan->model, model_abs) ? model_abs : plan->model, .model_type = in->model_type,
            .n_layers = in->n_layers, .n_heads = in->n_heads, .n_kv_heads = in->n_kv_heads, .d_head = in->d_head,
            .n_params = in->n_params, .pruned = in->pruned, .data_path = realpath(plan->data, data_abs) ? data_abs : plan->data,
            .n_seqs = c.data->n_seqs, .seq_len = c.data->seq_len,
        };
        st = hp_store_sweep(c.store, &d, &c.sweep_id, err);
        sum->sweep_id = c.sweep_id;
    }
    int count = o->shard_count > 0 ? o->shard_count : 1;
    int64_t ord = jobs ? jobs->n : 0; /* the procedures' jobs come after the expanded ones */
    if (st == HP_OK) {
        /* this shard's jobs */
        struct hp_job *mine = malloc(sizeof *mine * (size_t)(jobs->n + 1));
        int64_t *ords = malloc(sizeof *ords * (size_t)(jobs->n + 1));
        int n = 0;
        for (int i = 0; mine && ords && i < jobs->n; i++)
            if (i % count == o->shard_index) {
                mine[n] = jobs->jobs[i];
                ords[n++] = i;
            }
        c.work[SW_EVAL].total = n;
        for (int si = 0; o->shard_index == 0 && si < plan->n_studies; si++) {
            struct hp_study_cost cost;
            hp_study_cost(&plan->studies[si], c.info, 0, c.data->seq_len, &cost);
            c.work[SW_EVAL].total += cost.evals;
            c.work[SW_BACKWARD].total += cost.backwards;
            c.work[SW_TRAIN_STEP].total += cost.train_backwards;
            c.work[SW_PASS].total += cost.passes;
        }
        c.total = 0;
        for (int w = 0; w < SW_N_WORK; w++)
            c.total += c.work[w].total;
        /* the procedures that go first (shard 0: the scores): a gradient's forward at the unmasked model is
         * also the baseline's pass, whose metrics (the same bits) the evaluator then hands to the baseline's job */
        for (int si = 0; st == HP_OK && o->shard_index == 0 && si < plan->n_studies && !sw_stopping(&c); si++)
            st = run_procedure(&c, si, true, &ord, err);
        if (st == HP_OK)
            st = mine && ords ? sw_run_jobs(&c, ords, mine, n, NULL, NULL, err)
                              : hp_fail(err, HP_ERR_NOMEM, "out of memory");
        free(mine);
        free(ords);
    }
    /* the rest of the procedure studies in plan order, in shard 0 only: their work depends on earlier results */
    for (int si = 0; st == HP_OK && o->shard_index == 0 && si < plan->n_studies && !sw_stopping(&c); si++)
        st = run_procedure(&c, si, false, &ord, err);
    sum->n_jobs = c.done;
    sum->interrupted = sw_stopping(&c);
    if (st == HP_OK && !sum->interrupted)
        sw_sweep_done(&c);
    sum->seconds = hp_now() - c.t0;
    hp_store_close(c.store);
    free(c.put);
    hp_joblist_free(jobs);
    hp_evaluator_free(c.ev);
    hp_data_free(c.data);
    hp_evaluator_free(c.train_ev);
    hp_data_free(c.train);
    hp_model_close(c.model);
    return st;
}
