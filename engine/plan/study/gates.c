/*
 * gates.c -- the gates study: Voita et al.'s L0-regularised Hard Concrete
 * gates, one a query head, trained per lambda with the model's weights
 * frozen (engine/analysis/gates.c trains them; docs/plans.md, "Gate training", says
 * why the defaults). It trains on data apart from the held-out set (train:
 * FILE, or split: a share of the data's sequences), one training set a plan.
 * No jobs here: the sweep runs it (HP_STUDY_RUN_GATES).
 */
#include "study_int.h"
#include "util.h" /* hp_qsort */

#include <math.h>
#include <stdlib.h>

// --- options ---------------------------------------------------------------------------

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// A list of numbers >= 0, or one number; sorted, no repeats.
static enum hp_status parse_lambda(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    const char *want = "a non-negative number or a list of them, like [0.001, 0.01, 0.1]";
    int n = v->type == YAML_SEQUENCE_NODE ? hp_yaml_n_items(v) : 1;
    if (v->type == YAML_MAPPING_NODE || hp_yaml_is_null(v))
        return hp_ld_fail(ld, v, "'lambda' must be %s, not %s", want, hp_yaml_type_word(v));
    if (n == 0)
        return hp_ld_fail(ld, v, "'lambda' is an empty list (give at least one penalty weight)");
    double *xs = malloc(sizeof *xs * (size_t)n);
    if (!xs)
        return hp_fail(ld->err, HP_ERR_NOMEM, "%s: out of memory", ld->path);
    for (int i = 0; i < n; i++) {
        const yaml_node_t *it = v->type == YAML_SEQUENCE_NODE ? hp_ld_node(ld, v->data.sequence.items.start[i]) : v;
        enum hp_status st = it->type == YAML_SCALAR_NODE && !hp_yaml_is_null(it)
                                ? hp_ld_number(ld, "lambda", it, 0, false, "a non-negative number", &xs[i])
                                : hp_ld_fail(ld, it, "'lambda' must be %s, not a list of %s", want,
                                             it->type == YAML_SCALAR_NODE ? "empty items" : "lists");
        for (int j = 0; st == HP_OK && j < i; j++)
            if (xs[j] == xs[i])
                st = hp_ld_fail(ld, it, "'lambda' lists %.*s twice", hp_yaml_shown(it), hp_yaml_text(it));
        if (st) {
            free(xs);
            return st;
        }
    }
    hp_qsort(xs, (size_t)n, sizeof *xs, cmp_double);
    s->gates.lambda = xs;
    s->gates.n_lambda = n;
    return HP_OK;
}

static enum hp_status parse_steps(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    return hp_ld_int(ld, "'steps'", v, 1, "a positive integer", &s->gates.steps);
}

static enum hp_status parse_lr(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    return hp_ld_number(ld, "lr", v, 0, true, "a positive number like 0.05", &s->gates.lr);
}

static enum hp_status parse_beta(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    return hp_ld_number(ld, "beta", v, 0, true, "a positive number like 0.667", &s->gates.beta);
}

static enum hp_status parse_init(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    return hp_ld_number(ld, "init", v, -HUGE_VAL, false, "a number like 3", &s->gates.init);
}

static enum hp_status parse_seed(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    enum hp_status st = hp_ld_seed(ld, "seed", v, &s->gates.seed);
    s->gates.seed_set = st == HP_OK;
    return st;
}

static enum hp_status parse_train(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    return hp_ld_path(ld, "train", v, &s->gates.train);
}

// split: a fraction of the sequences (25% or 0.25) or a count of them (8).
static enum hp_status parse_split(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    const char *want = "a fraction of the data's sequences in (0, 1) like 25% or 0.25, or a number of them like 8";
    if (v->type != YAML_SCALAR_NODE || hp_yaml_is_null(v))
        return hp_ld_fail(ld, v, "'split' must be %s, not %s", want, hp_yaml_type_word(v));
    int n = 0;
    if (hp_ld_scan_count(hp_yaml_text(v), &n)) {
        s->gates.split_count = n;
        return HP_OK;
    }
    const char *t = hp_yaml_text(v);
    size_t len = v->data.scalar.length;
    bool percent = len > 1 && t[len - 1] == '%';
    double x = 0;
    if (hp_ld_scan_number(t, percent ? len - 1 : len, &x)) {
        if (percent)
            x /= 100.0;
        if (x > 0 && x < 1) {
            s->gates.split_frac = x;
            return HP_OK;
        }
    }
    return hp_ld_fail(ld, v, "'split' must be %s, not '%.*s%s'", want, hp_yaml_shown(v), t, hp_yaml_more(v));
}

enum { O_LAMBDA, O_STEPS, O_LR, O_BETA, O_INIT, O_SEED, O_TRAIN, O_SPLIT, N_OPTS };

static const struct hp_study_opt opts[N_OPTS] = {
    [O_LAMBDA] = {"lambda", parse_lambda}, [O_STEPS] = {"steps", parse_steps}, [O_LR] = {"lr", parse_lr},
    [O_BETA] = {"beta", parse_beta},       [O_INIT] = {"init", parse_init},    [O_SEED] = {"seed", parse_seed},
    [O_TRAIN] = {"train", parse_train},    [O_SPLIT] = {"split", parse_split},
};

static void defaults(struct hp_study *s) /* docs/plans.md, "Gate training": why these */
{
    s->gates.steps = 300;
    s->gates.lr = 0.05;
    s->gates.beta = 2.0 / 3.0;
    s->gates.init = 3.0;
}

static void clear(struct hp_study *s)
{
    free(s->gates.lambda);
    free(s->gates.train);
}

// --- checks ----------------------------------------------------------------------------

static enum hp_status check(const struct hp_loader *ld, const struct hp_study_seen *seen, struct hp_study *s)
{
    (void)s;
    const yaml_node_t *const *o = seen->opts;
    if (!o[O_LAMBDA])
        return hp_ld_fail(ld, seen->kind, "a 'gates' study needs 'lambda' (e.g. gates: {lambda: [0.001, 0.01, 0.1], "
                          "split: 25%%})");
    if (o[O_TRAIN] && o[O_SPLIT])
        return hp_ld_fail(ld, o[O_SPLIT], "'train' and 'split' both name the training data: give one");
    if (!o[O_TRAIN] && !o[O_SPLIT])
        return hp_ld_fail(ld, seen->kind, "a 'gates' study needs training data apart from the held-out set: 'train: "
                          "FILE', or 'split: 25%%' to train on that share of the data's sequences (never the ones "
                          "evaluated)");
    return HP_OK;
}

/* one training set a plan: with split, the held-out set of every study is what the split leaves */
static enum hp_status check_earlier(const struct hp_loader *ld, const yaml_node_t *item, const struct hp_plan *p, int i)
{
    const struct hp_study *s = &p->studies[i];
    for (int j = 1; j < i; j++) {
        const struct hp_study *g = &p->studies[j];
        if (g->kind != HP_STUDY_GATES)
            continue;
        bool same = g->gates.train && s->gates.train ? strcmp(g->gates.train, s->gates.train) == 0
                                         : !g->gates.train && !s->gates.train && g->gates.split_frac == s->gates.split_frac &&
                                               g->gates.split_count == s->gates.split_count;
        if (!same)
            return hp_ld_fail(ld, item, "gates studies '%s' (line %d) and '%s' train on different data (a plan has "
                              "one training set: give them the same 'train' or 'split')", g->name, g->line, s->name);
        break;
    }
    return HP_OK;
}

static enum hp_status check_plan(const struct hp_loader *ld, const struct hp_plan *p, struct hp_study *s,
                                 const yaml_node_t *metric, const yaml_node_t *ablation)
{
    if (!s->gates.seed_set)
        s->gates.seed = p->seed;
    if (p->ablation != HP_ABLATE_ZERO)
        return hp_ld_fail(ld, ablation, "gates study '%s' (line %d) multiplies each head's output by its gate, so a "
                          "closed gate is zero ablation: it needs 'ablation: zero' (the default), not %s", s->name,
                          s->line, hp_ablation_name(p->ablation));
    if (!strcmp(p->metric, "acc"))
        return hp_ld_fail(ld, metric, "gates study '%s' (line %d) trains on the metric's gradient, and acc has none (a "
                          "step function of the gates): use loss, kl or cos", s->name, s->line);
    return HP_OK;
}

// --- cost --------------------------------------------------------------------------------

/* each lambda's pruned set, and the model at its fractional gates */
static long evals(const struct hp_study *s, const struct hp_model_info *info)
{
    (void)info;
    return 2L * s->gates.n_lambda;
}

/* one a training step, over the training set */
static long backwards(const struct hp_study *s, const struct hp_model_info *info)
{
    (void)info;
    return (long)s->gates.steps * s->gates.n_lambda;
}

static void describe(const struct hp_study *s, const struct hp_model_info *info, const struct hp_study_cost *c,
                     const char *metric, char *buf, size_t cap)
{
    (void)info;
    /* a step differentiates the metric over the training set: kl and cos run the unmasked pass too */
    snprintf(buf, cap, "%d lambda%s x %d steps = %ld forward+backward passes over the training set (%s), then %ld "
             "evaluations", s->gates.n_lambda, s->gates.n_lambda == 1 ? "" : "s", s->gates.steps, c->train_backwards,
             strcmp(metric, "loss") == 0 ? "loss" : "with the unmasked pass", c->evals);
}

const struct hp_study_kind_row hp_study_gates = {
    .name = "gates",
    .opts = opts,
    .n_opts = N_OPTS,
    .defaults = defaults,
    .check = check,
    .check_earlier = check_earlier,
    .check_plan = check_plan,
    .clear = clear,
    .run = HP_STUDY_RUN_GATES,
    .first_shard_only = true,
    .evals = evals,
    .backwards = backwards,
    .trains = true,
    .describe = describe,
};
