/*
 * plan.c -- `headprune plan`: a plan expanded into its jobs, with an estimate
 * of their cost; nothing is run.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_int.h"
#include "roles_int.h" /* hp_roles_probe_size: the probe a roles study runs */
#include "cpuload_int.h"

static const char plan_help[] =
    "Usage: headprune plan PLAN.yaml [options]\n"
    "\n"
    "Expand a plan into its jobs and print them, with their count and an estimate\n"
    "of the cost, without running anything. Iterative studies are listed by their\n"
    "expected number of evaluations: their masks depend on results. Gradient\n"
    "studies (importance, attribution, iterative with rank: gradient) are listed\n"
    "by their forward + backward passes, costed as three forwards each; gates\n"
    "studies by their training steps (a forward + backward over the training set\n"
    "each, four forwards under kl or cos, whose reference pass runs too) and the\n"
    "two evaluations of each lambda.\n"
    "The plan format (keys, study kinds, options): docs/plans.md.\n";

/* Rough forward FLOPs of a variant run from layer `from` on: every matrix product plus attention. */
static double forward_flops(const struct hp_model_info *in, int n_seqs, int seq_len, int from)
{
    double T = seq_len, d = in->d_model, qd = (double)in->n_heads * in->d_head,
           kvd = (double)in->n_kv_heads * in->d_head;
    double mlp = in->arch == HP_ARCH_LLAMA ? 3 * d * in->d_ff : 2 * d * in->d_ff;
    double per_layer = 2 * T * (d * qd + 2 * d * kvd + qd * d + mlp) + 4 * T * T * qd;
    double head = in->has_lm_head ? 2 * T * d * in->n_vocab : 0;
    return n_seqs * ((in->n_layers - from) * per_layer + head);
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
    struct hp_plan *p = NULL;
    struct hp_model *m = NULL;
    struct hp_data *d = NULL, *train = NULL;
    struct hp_joblist *jl = NULL;
    struct hp_evaluator *ev = NULL;
    const char *metric = NULL;
    int rc = 1;
    if (hp_plan_load(argv[1], &p, &err) != HP_OK || hp_model_open(p->model, &m, &err) != HP_OK ||
        hp_data_load_for(p->data, p->model, hp_model_get_info(m), p->seq_len, &d, &err) != HP_OK ||
        hp_evaluator_new(m, d, &ev, &err) != HP_OK ||
        hp_evaluator_pick_metric(ev, p->path, p->metric, &metric, &err) != HP_OK ||
        hp_plan_check_grad(p, ev, &err) != HP_OK ||
        hp_gates_data_load(p, metric, m, &d, &train, &err) != HP_OK ||
        hp_plan_expand(p, hp_model_get_info(m), &jl, &err) != HP_OK) {
        die(&err);
        goto out;
    }
    const struct hp_model_info *in = hp_model_get_info(m);
    long iter = 0, backs = 0, gate_steps = 0;
    for (int i = 0; i < p->n_studies; i++) {
        iter += hp_study_evals(&p->studies[i], in);
        if (p->studies[i].kind == HP_STUDY_GATES)
            gate_steps += hp_study_backwards(&p->studies[i], in);
        else
            backs += hp_study_backwards(&p->studies[i], in);
    }
    bool split = false;
    for (int i = 0; i < p->n_studies; i++)
        split |= p->studies[i].kind == HP_STUDY_GATES && !p->studies[i].train;
    /* a gate step differentiates the plan's metric over the training set: kl and cos run the unmasked pass too */
    const int per_step = strcmp(metric, "loss") == 0 ? 3 : 4;
    if (f == FMT_TABLE) {
        double fl = forward_flops(in, d->n_seqs, d->seq_len, 0), reuse = 0;
        for (int j = 0; j < jl->n; j++) {
            int from = hp_mask_first_changed(jl->jobs[j].mask, in->n_layers);
            reuse += from < in->n_layers ? forward_flops(in, d->n_seqs, d->seq_len, from) : 0;
        }
        /* one unmasked pass per window of jobs; iterative candidates counted as whole passes */
        reuse += fl * ((jl->n + HP_SWEEP_BATCH - 1) / HP_SWEEP_BATCH) + fl * iter;
        /* a forward + backward costs about three forwards (the backward's two products per weight) */
        reuse += 3 * fl * backs;
        /* head roles: one unmasked pass (the probe's is small beside it) */
        for (int i = 0; i < p->n_studies; i++)
            reuse += p->studies[i].kind == HP_STUDY_ROLES ? fl : 0;
        const double fl_train = train ? forward_flops(in, train->n_seqs, train->seq_len, 0) : 0;
        reuse += per_step * fl_train * gate_steps;
        printf("plan      %s (%s)\n", p->name, p->path);
        printf("model     %s (%s, %d layers x %d heads, %d KV heads%s)\n", p->model, in->model_type, in->n_layers,
               in->n_heads, in->n_kv_heads, pruned_note(in));
        printf("data      %s: %d sequences x %d tokens%s%s\n", p->data, d->n_seqs, d->seq_len, dropped_note(d),
               split ? " (what the gates studies' split leaves)" : "");
        if (train)
            printf("train     %s: %d sequences x %d tokens (the gates studies' training set)\n", train->path,
                   train->n_seqs, train->seq_len);
        printf("ablation  %s, metric %s%s, seed %llu\n",
               hp_ablation_name(p->ablation), metric,
               p->metric[0] ? "" : " (the model's own)",
               (unsigned long long)p->seed);
        for (int i = 0; i < p->n_studies; i++) {
            int n = 0;
            for (int j = 0; j < jl->n; j++)
                n += jl->jobs[j].study == i;
            const struct hp_study *st = &p->studies[i];
            if (st->kind == HP_STUDY_ITERATIVE && st->rank == HP_RANK_GRADIENT)
                printf("study     %-16s %-10s %ld evaluations + %ld forward+backward passes (ranked by gradient "
                       "importance, normalize %s)\n", st->name, hp_study_kind_name(st->kind), hp_study_evals(st, in),
                       hp_study_backwards(st, in), hp_normalize_name(st->normalize));
            else if (st->kind == HP_STUDY_ITERATIVE)
                printf("study     %-16s %-10s about %ld evaluations (masks depend on results)\n", st->name,
                       hp_study_kind_name(st->kind), hp_study_evals(st, in));
            else if (st->kind == HP_STUDY_GATES)
                printf("study     %-16s %-10s %d lambda%s x %d steps = %ld forward+backward passes over the training "
                       "set (%s), then %ld evaluations\n", st->name, hp_study_kind_name(st->kind), st->n_lambda,
                       st->n_lambda == 1 ? "" : "s", st->steps, hp_study_backwards(st, in),
                       per_step == 3 ? "loss" : "with the unmasked pass", hp_study_evals(st, in));
            else if (st->kind == HP_STUDY_IMPORTANCE || st->kind == HP_STUDY_ATTRIBUTION)
                printf("study     %-16s %-10s 1 forward+backward pass (%s%s%s)\n", st->name,
                       hp_study_kind_name(st->kind), hp_unit_name(st->kv, true),
                       st->kind == HP_STUDY_IMPORTANCE ? ", normalize " : "",
                       st->kind == HP_STUDY_IMPORTANCE ? hp_normalize_name(st->normalize) : "");
            else if (st->kind == HP_STUDY_ROLES) {
                /* the probe's size as the sweep will take it (expansion has checked the model takes it) */
                struct hp_roles_opts ro = {.probe_seqs = st->probe_seqs, .probe_len = st->probe_len};
                int ps = 0, pl = 0;
                hp_roles_probe_size(in, &ro, &ps, &pl, &err);
                printf("study     %-16s %-10s 1 unmasked pass over the data and one over a probe of %d x 2 x %d "
                       "random tokens\n", st->name, hp_study_kind_name(st->kind), ps, pl);
            } else
                printf("study     %-16s %-10s %d jobs\n", p->studies[i].name, hp_study_kind_name(p->studies[i].kind), n);
        }
        printf("jobs      %d expanded + about %ld %s = %ld evaluations", jl->n, iter,
               gate_steps ? "iterative and gates" : "iterative", jl->n + iter);
        if (backs + gate_steps)
            printf(", and %ld forward+backward passes", backs + gate_steps);
        printf("\n");
        printf("cost      at most %.3g GFLOP per evaluation (a whole pass); about %.3g GFLOP in all, as each\n"
               "          variant runs from its first masked layer (%.3g GFLOP as whole passes); jobs\n"
               "          already in the database are skipped\n",
               fl / 1e9, reuse / 1e9, (fl * (jl->n + iter + 3 * backs) + per_step * fl_train * gate_steps) / 1e9);
        /* The sweep runs within a few percent of sgemm's speed (README). Time one thread's sgemm (a
         * busy machine stalls several threads' barriers, not one) and scale by the threads the sweep
         * would take now: the CPUs other processes leave idle during the measurement. */
        const int n = 512;
        float *buf = malloc(3 * sizeof(float) * n * n);
        if (buf) {
            hp_runtime_init(1);
            struct hp_cpu_meter m0, m1;
            hp_cpu_meter_read(&m0);
            double gf = hp_runtime_sgemm_gflops(buf, buf + n * n, buf + 2 * n * n, n, 0.25), secs;
            hp_cpu_meter_read(&m1);
            int threads = hp_cpu_threads_for(hp_cpu_count(), hp_cpu_others(&m0, &m1, &secs));
            char eta[32];
            fmt_seconds(gf > 0 ? reuse / (gf * threads * 1e9) : NAN, eta, sizeof eta);
            printf("time      about %s on this machine as it is now (one thread's sgemm measured at %.0f GFLOP/s,\n"
                   "          %d thread%s for the CPUs idle beside other work)\n",
                   eta, gf, threads, threads == 1 ? "" : "s");
            free(buf);
        }
        printf("\n");
    }
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
        goto out;
    }
    for (int j = 0; j < jl->n; j++) {
        const struct hp_job *jb = &jl->jobs[j];
        char **row = t.cells + (size_t)j * 7;
        double *val = t.values + (size_t)j * 7;
        char buf[32];
        int n_ablated = hp_mask_count_ablated(jb->mask);
        snprintf(buf, sizeof buf, "%d", j);
        row[0] = strdup(buf);
        row[1] = strdup(p->studies[jb->study].name);
        row[2] = strdup(hp_study_kind_name(p->studies[jb->study].kind));
        row[3] = strdup(jb->label);
        snprintf(buf, sizeof buf, "%d", jb->k);
        row[4] = strdup(buf);
        snprintf(buf, sizeof buf, "%d", n_ablated);
        row[5] = strdup(buf);
        row[6] = hp_mask_format(jb->mask);
        val[0] = j, val[4] = jb->k, val[5] = n_ablated;
        val[1] = val[2] = val[3] = val[6] = NAN;
    }
    print_table(&t, (enum fmt)f);
    for (size_t i = 0; i < (size_t)jl->n * 7; i++)
        free(t.cells[i]);
    free(t.cells);
    free(t.values);
    rc = 0;
out:
    hp_joblist_free(jl);
    hp_evaluator_free(ev);
    hp_data_free(d);
    hp_data_free(train);
    hp_model_close(m);
    hp_plan_free(p);
    return rc;
}
