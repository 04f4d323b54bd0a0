/*
 * screen.c -- the screen study: the exact top k of the single study's
 * effects at a fraction of its evaluations. Every selected unit is ranked by
 * an estimate (estimator:, default raw importance, one forward + backward),
 * then evaluated exactly in that order, a batch at a time, with random audits
 * of the units not reached, until an audit finds none above the k-th exact
 * effect (engine/analysis/screen.h states the rule and the bound it gives). Each
 * evaluation is the single study's variant (the same content address), so
 * either reuses the other's. Its jobs depend on results: the sweep runs it
 * (HP_STUDY_RUN_SCREEN, sweep_screen.c) after the expanded jobs, in the first
 * shard.
 */
#include "study_int.h"

#include <math.h>

// --- options ---------------------------------------------------------------------------

/* k: a count of units (k: 5), or a share of them (k: 10%, k: 0.1) */
static enum hp_status parse_k(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    if (v->type == YAML_SCALAR_NODE && (strchr(hp_yaml_text(v), '%') || strchr(hp_yaml_text(v), '.'))) {
        s->screen.k = 0;
        return hp_ld_fraction(ld, "k", v, true, &s->screen.k_frac);
    }
    return hp_ld_int(ld, "'k'", v, 1, "a number of units (k: 5) or a share of them (k: 10%)", &s->screen.k);
}

static enum hp_status parse_batch(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    return hp_ld_int(ld, "'batch'", v, 1, "a number of units each step of the walk evaluates", &s->screen.batch);
}

static enum hp_status parse_audit(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    return hp_ld_int(ld, "'audit'", v, 1, "a number of units each audit draws at random", &s->screen.audit);
}

enum { O_K, O_ESTIMATOR, O_STEPS, O_BATCH, O_AUDIT, N_OPTS };

static const struct hp_study_opt opts[N_OPTS] = {
    [O_K] = {"k", parse_k},
    [O_ESTIMATOR] = {"estimator", hp_study_parse_estimator},
    [O_STEPS] = {"steps", hp_study_parse_steps},
    [O_BATCH] = {"batch", parse_batch},
    [O_AUDIT] = {"audit", parse_audit},
};

static void defaults(struct hp_study *s)
{
    s->estimator = HP_EST_IMPORTANCE;
    s->screen.k_frac = 0.1;
}

static enum hp_status check(const struct hp_loader *ld, const struct hp_study_seen *seen, struct hp_study *s)
{
    return hp_study_check_steps(ld, seen->opts[O_ESTIMATOR], seen->opts[O_STEPS], s);
}

static enum hp_status check_plan(const struct hp_loader *ld, const struct hp_plan *p, struct hp_study *s,
                                 const yaml_node_t *metric, const yaml_node_t *ablation)
{
    (void)metric;
    return hp_study_check_estimator_plan(ld, p, s, ablation);
}

// --- sizes -------------------------------------------------------------------------------

/* The selected units the checkpoint has. */
static int count_units(const struct hp_study *s, const struct hp_model_info *info)
{
    const int per_layer = hp_unit_count(info, s->unit), n_lay = s->n_layers_sel ? s->n_layers_sel : info->n_layers,
              n_sel = s->n_units_sel ? s->n_units_sel : per_layer;
    int n = 0;
    for (int i = 0; i < n_lay; i++)
        for (int j = 0; j < n_sel; j++) {
            const int l = s->n_layers_sel ? s->layers[i] : i, u = s->n_units_sel ? s->units[j] : j;
            n += l < info->n_layers && u < per_layer && !hp_unit_pruned(info, s->unit, l, u);
        }
    return n;
}

struct hp_screen_sizes hp_study_screen_sizes(const struct hp_study *s, const struct hp_model_info *info)
{
    struct hp_screen_sizes z = {.units = count_units(s, info)};
    z.k = s->screen.k ? s->screen.k : (int)ceil(s->screen.k_frac * z.units - 1e-9);
    if (z.k < 1)
        z.k = 1;
    /* the defaults: a walk step of half k (at least 2), an audit of a tenth of the units (at least 4) */
    z.batch = s->screen.batch ? s->screen.batch : (z.k + 1) / 2 > 2 ? (z.k + 1) / 2 : 2;
    z.audit = s->screen.audit ? s->screen.audit : (int)ceil(z.units / 10.0) > 4 ? (int)ceil(z.units / 10.0) : 4;
    return z;
}

// --- expansion: no jobs, only the check of k against the units -------------------------------

static enum hp_status expand(struct hp_expander *e)
{
    const struct hp_study *s = e->s;
    const struct hp_screen_sizes z = hp_study_screen_sizes(s, e->info);
    if (z.k > z.units)
        return hp_ex_fail(e, "k", z.k, NULL, "k = %d is more than the %d %s it screens", z.k, z.units,
                          hp_unit_name(s->unit, true));
    return HP_OK;
}

// --- cost --------------------------------------------------------------------------------

/* At most every unit: how many it takes depends on the results. */
static long evals(const struct hp_study *s, const struct hp_model_info *info)
{
    return hp_study_screen_sizes(s, info).units;
}

static void describe(const struct hp_study *s, const struct hp_model_info *info, const struct hp_study_cost *c,
                     const char *metric, char *buf, size_t cap)
{
    (void)metric;
    const struct hp_screen_sizes z = hp_study_screen_sizes(s, info);
    char what[96];
    hp_study_estimator_text(s, what, sizeof what);
    snprintf(buf, cap, "%ld forward+backward pass%s + at most %ld evaluations (the exact top %d of %d %s, ranked by "
             "%s; walk %d at a time, audits of %d)", c->backwards, c->backwards == 1 ? "" : "es", c->evals, z.k,
             z.units, hp_unit_name(s->unit, true), what, z.batch, z.audit);
}

const struct hp_study_kind_row hp_study_screen = {
    .name = "screen",
    .units = true,
    .opts = opts,
    .n_opts = N_OPTS,
    .defaults = defaults,
    .check = check,
    .check_plan = check_plan,
    .expand = expand,
    .run = HP_STUDY_RUN_SCREEN,
    .score = HP_STUDY_SCORE_ATTRIBUTION, /* its ranking: the estimate, stored as an attribution study's */
    .first_shard_only = true,
    .evals = evals,
    .backwards = hp_study_estimator_backwards,
    .needs_grad = hp_study_always_grad,
    .grad_off_base = hp_study_integrated,
    .describe = describe,
};
