/*
 * plan.c -- `headprune plan`: a plan expanded into its jobs, with an estimate
 * of their cost; nothing is run. What each study costs, and the sentence
 * saying so, are its kind's (engine/plan/study/); this file adds them up into
 * FLOPs and time.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cpuload.h"
#include "study/study.h" /* hp_study_cost, hp_study_describe: each study's cost, as its kind counts it */

static const char plan_help[] =
    "Usage: headprune plan PLAN.yaml [options]\n"
    "\n"
    "Expand a plan into its jobs and print them, with their count and an estimate\n"
    "of the cost, without running anything. Iterative studies are listed by their\n"
    "expected number of evaluations: their masks depend on results. Gradient\n"
    "studies (importance, attribution, screen, iterative with rank: gradient or\n"
    "estimate) are listed by their forward + backward passes, costed as three\n"
    "forwards each; gates studies by their training steps (a forward + backward\n"
    "over the training set each, four forwards under kl or cos, whose reference\n"
    "pass runs too) and the two evaluations of each lambda.\n"
    "The plan format (keys, study kinds, options): docs/plans.md.\n";

/* Rough forward FLOPs of a variant run from layer `from` on: every matrix product plus attention. */
static double forward_flops(const struct hp_model_info *in, int n_seqs, int seq_len, int from)
{
    double T = seq_len, d = in->d_model, qd = (double)in->n_heads * in->d_head,
           kvd = (double)in->n_kv_heads * in->d_head;
    double mlp = (in->gated_mlp ? 3 : 2) * d * in->d_ff;
    double per_layer = 2 * T * (d * qd + 2 * d * kvd + qd * d + mlp) + 4 * T * T * qd;
    double head = in->has_lm_head ? 2 * T * d * in->n_vocab : 0;
    return n_seqs * ((in->n_layers - from) * per_layer + head);
}

/* What `plan` opens: the plan, its model and data (and training set), the evaluator that resolves the metric,
 * and the jobs. Destructor: plan_close. */
struct planned {
    struct hp_plan *p;
    struct hp_model *m;
    struct hp_data *d, *train;
    struct hp_joblist *jl;
    struct hp_evaluator *ev;
    const char *metric;
};

static bool plan_open(const char *path, struct planned *r, struct hp_error *err)
{
    return hp_plan_load(path, &r->p, err) == HP_OK && hp_model_open(r->p->model, &r->m, err) == HP_OK &&
           hp_data_load_for(r->p->data, r->p->model, hp_model_get_info(r->m), r->p->seq_len, &r->d, err) == HP_OK &&
           hp_ablation_bind_data(r->p->ablation, r->d, err) == HP_OK &&
           hp_evaluator_new(r->m, r->d, &r->ev, err) == HP_OK &&
           hp_evaluator_pick_metric(r->ev, r->p->path, r->p->metric, &r->metric, err) == HP_OK &&
           hp_plan_check_grad(r->p, r->ev, hp_model_get_info(r->m), r->metric, err) == HP_OK &&
           hp_gates_data_load(r->p, r->metric, r->m, &r->d, &r->train, err) == HP_OK &&
           hp_plan_expand(r->p, hp_model_get_info(r->m), &r->jl, err) == HP_OK;
}

static void plan_close(struct planned *r)
{
    hp_joblist_free(r->jl);
    hp_evaluator_free(r->ev);
    hp_data_free(r->d);
    hp_data_free(r->train);
    hp_model_close(r->m);
    hp_plan_free(r->p);
}

/* The plan's totals, over its studies' costs. */
struct totals {
    long iter, backs, gate_steps, passes; /* evaluations beyond the jobs; backwards: held-out, training; passes */
    bool split;                           /* the held-out set is what a training split leaves */
};

/* Each study's line: "study  NAME  KIND  what it costs". */
static void print_studies(const struct planned *r)
{
    const struct hp_plan *p = r->p;
    const struct hp_model_info *in = hp_model_get_info(r->m);
    for (int i = 0; i < p->n_studies; i++) {
        const struct hp_study *st = &p->studies[i];
        int n = 0;
        for (int j = 0; j < r->jl->n; j++)
            n += r->jl->jobs[j].study == i;
        struct hp_study_cost c;
        char what[256];
        hp_study_cost(st, in, n, r->d->seq_len, &c);
        hp_study_describe(st, in, &c, r->metric, what, sizeof what);
        printf("study     %-16s %-10s %s\n", st->name, hp_study_kind_name(st->kind), what);
    }
}

static void add_up(const struct planned *r, struct totals *t)
{
    const struct hp_model_info *in = hp_model_get_info(r->m);
    *t = (struct totals){0};
    for (int i = 0; i < r->p->n_studies; i++) {
        const struct hp_study *st = &r->p->studies[i];
        struct hp_study_cost c;
        hp_study_cost(st, in, 0, r->d->seq_len, &c);
        t->iter += c.evals;
        t->backs += c.backwards;
        t->gate_steps += c.train_backwards;
        t->passes += c.passes;
        t->split |= hp_study_trains(st) && !st->gates.train;
    }
}

/* The time the FLOPs take here: one thread's sgemm, scaled by the threads the sweep would take now. */
static void print_time(double flops)
{
    /* The sweep runs within a few percent of sgemm's speed (README). Time one thread's sgemm (a
     * busy machine stalls several threads' barriers, not one) and scale by the threads the sweep
     * would take now: the CPUs other processes leave idle during the measurement. */
    const int n = 512;
    float *buf = malloc(3 * sizeof(float) * n * n);
    if (!buf)
        return;
    hp_runtime_init(1);
    struct hp_cpu_meter m0, m1;
    hp_cpu_meter_read(&m0);
    double gf = hp_runtime_sgemm_gflops(buf, buf + n * n, buf + 2 * n * n, n, 0.25), secs;
    hp_cpu_meter_read(&m1);
    int threads = hp_cpu_threads_for(hp_cpu_count(), hp_cpu_others(&m0, &m1, &secs));
    char eta[32];
    fmt_seconds(gf > 0 ? flops / (gf * threads * 1e9) : NAN, eta, sizeof eta);
    printf("time      about %s on this machine as it is now (one thread's sgemm measured at %.0f GFLOP/s,\n"
           "          %d thread%s for the CPUs idle beside other work)\n",
           eta, gf, threads, threads == 1 ? "" : "s");
    free(buf);
}

/* The table format's summary: what is planned, each study's cost, and the whole cost in FLOPs and time. */
static void print_summary(const struct planned *r)
{
    const struct hp_plan *p = r->p;
    const struct hp_model_info *in = hp_model_get_info(r->m);
    const struct hp_data *d = r->d, *train = r->train;
    const struct hp_joblist *jl = r->jl;
    struct totals t;
    add_up(r, &t);
    /* a gate step differentiates the plan's metric over the training set: kl and cos run the unmasked pass too */
    const int per_step = strcmp(r->metric, "loss") == 0 ? 3 : 4;
    double fl = forward_flops(in, d->n_seqs, d->seq_len, 0), reuse = 0;
    for (int j = 0; j < jl->n; j++) {
        int from = hp_mask_first_changed(jl->jobs[j].mask, in->n_layers);
        reuse += from < in->n_layers ? forward_flops(in, d->n_seqs, d->seq_len, from) : 0;
    }
    /* one unmasked pass per window of jobs; iterative candidates counted as whole passes */
    reuse += fl * ((jl->n + HP_SWEEP_BATCH - 1) / HP_SWEEP_BATCH) + fl * t.iter;
    /* a forward + backward costs about three forwards (the backward's two products per weight) */
    reuse += 3 * fl * t.backs;
    /* passes of a study's own (head roles: one unmasked pass; the probe's is small beside it) */
    reuse += fl * t.passes;
    const double fl_train = train ? forward_flops(in, train->n_seqs, train->seq_len, 0) : 0;
    reuse += per_step * fl_train * t.gate_steps;
    printf("plan      %s (%s)\n", p->name, p->path);
    printf("model     %s (%s, %d layers x %d heads, %d KV heads%s)\n", p->model, in->model_type, in->n_layers,
           in->n_heads, in->n_kv_heads, pruned_note(in));
    printf("data      %s: %d sequences x %d tokens%s%s\n", p->data, d->n_seqs, d->seq_len, dropped_note(d),
           t.split ? " (what the gates studies' split leaves)" : "");
    if (train)
        printf("train     %s: %d sequences x %d tokens (the gates studies' training set)\n", train->path,
               train->n_seqs, train->seq_len);
    printf("ablation  %s, metric %s%s, seed %llu\n", hp_ablation_name(p->ablation), r->metric,
           p->metric[0] ? "" : " (the model's own)", (unsigned long long)p->seed);
    print_studies(r);
    printf("jobs      %d expanded + about %ld %s = %ld evaluations", jl->n, t.iter,
           "from the studies run step by step (iterative, gates, patching, screen, circuit)", jl->n + t.iter);
    if (t.backs + t.gate_steps)
        printf(", and %ld forward+backward passes", t.backs + t.gate_steps);
    printf("\n");
    printf("cost      at most %.3g GFLOP per evaluation (a whole pass); about %.3g GFLOP in all, as each\n"
           "          variant runs from its first masked layer (%.3g GFLOP as whole passes); jobs\n"
           "          already in the database are skipped\n",
           fl / 1e9, reuse / 1e9, (fl * (jl->n + t.iter + 3 * t.backs) + per_step * fl_train * t.gate_steps) / 1e9);
    print_time(reuse);
    printf("\n");
}

/* The jobs, one row each, in format f; false when out of memory. */
static bool print_jobs(const struct planned *r, enum fmt f)
{
    const struct hp_joblist *jl = r->jl;
    struct hp_table t = {0};
    const char *cols[] = {"ord", "study", "kind", "label", "units", "heads", "mask"};
    bool num[] = {true, false, false, false, true, true, false};
    t.n_cols = 7;
    t.cols = (char **)cols;
    t.numeric = num;
    t.n_rows = jl->n;
    t.cells = calloc((size_t)jl->n * 7, sizeof(char *));
    t.values = calloc((size_t)jl->n * 7, sizeof(double));
    if (jl->n && (!t.cells || !t.values)) {
        free(t.cells), free(t.values);
        fprintf(stderr, "%s: out of memory\n", prog);
        return false;
    }
    for (int j = 0; j < jl->n; j++) {
        const struct hp_job *jb = &jl->jobs[j];
        char **row = t.cells + (size_t)j * 7;
        double *val = t.values + (size_t)j * 7;
        char buf[32];
        int n_ablated = hp_mask_count_ablated(jb->mask);
        snprintf(buf, sizeof buf, "%d", j);
        row[0] = strdup(buf);
        row[1] = strdup(r->p->studies[jb->study].name);
        row[2] = strdup(hp_study_kind_name(r->p->studies[jb->study].kind));
        row[3] = strdup(jb->label);
        snprintf(buf, sizeof buf, "%d", jb->k);
        row[4] = strdup(buf);
        snprintf(buf, sizeof buf, "%d", n_ablated);
        row[5] = strdup(buf);
        row[6] = hp_mask_format(jb->mask);
        val[0] = j, val[4] = jb->k, val[5] = n_ablated;
        val[1] = val[2] = val[3] = val[6] = NAN;
    }
    print_table(&t, f);
    for (size_t i = 0; i < (size_t)jl->n * 7; i++)
        free(t.cells[i]);
    free(t.cells);
    free(t.values);
    return true;
}

int cmd_plan(int argc, char **argv)
{
    int f = FMT_TABLE;
    const struct opt opts[] = {
        OPT_FORMAT(&f, format_choices, "the jobs as an aligned table after the estimate (default), or CSV or JSON "
                                       "alone"),
        OPT_END(),
    };
    const struct cmd_help h = {.name = "plan", .usage = plan_help, .opts = opts};
    int n_args, c = parse_options(&h, argc, argv, &n_args);
    if (c >= 0)
        return c;
    if (n_args != 1)
        return usage_error("plan", "give one PLAN.yaml");
    struct hp_error err = {0};
    struct planned r = {0};
    int rc = 1;
    if (!plan_open(argv[1], &r, &err))
        die(&err);
    else {
        if (f == FMT_TABLE)
            print_summary(&r);
        rc = print_jobs(&r, f) ? 0 : 1;
    }
    plan_close(&r);
    return rc;
}
