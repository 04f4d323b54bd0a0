/*
 * attribution.c -- the attribution study: an estimate of each unit's
 * single-ablation effect from gradients at the gates, by one of the
 * estimators of enum hp_estimator (docs/gradients.md, "Estimators"): AtP,
 * -dL/dxi at the gates of 1 (one forward + backward); raw importance
 * E_x|dL_x/dxi| there, a ranker of the effect's size (one pass); integrated
 * gradients along the gate path from 1 to 0, every unit's gate together (ig,
 * `steps` passes) or one layer's at a time (ig-layer, steps passes a layer),
 * the midpoint rule. At the study's mask: (the heads already removed) each
 * estimate is of removing the unit on top of those. The sweep computes it
 * (HP_STUDY_RUN_SCORES, sweep_scores.c) into the scores table.
 */
#include "study_int.h"

static const char *const estimator_names[HP_EST_COUNT] = {
    [HP_EST_ATP] = "atp", [HP_EST_IMPORTANCE] = "importance", [HP_EST_IG] = "ig", [HP_EST_IG_LAYER] = "ig-layer"};

const char *hp_estimator_name(enum hp_estimator e)
{
    return (int)e >= 0 && (int)e < HP_EST_COUNT ? estimator_names[e] : "unknown";
}

static bool integrated(const struct hp_study *s)
{
    return s->attribution.estimator == HP_EST_IG || s->attribution.estimator == HP_EST_IG_LAYER;
}

static enum hp_status parse_estimator(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    int i = 0;
    enum hp_status st = hp_ld_word(ld, "estimator", v, estimator_names, HP_EST_COUNT, &i);
    s->attribution.estimator = (enum hp_estimator)i;
    return st;
}

static enum hp_status parse_steps(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    enum hp_status st = hp_ld_int(ld, "'steps'", v, 1, "a whole number of gradients along the path, 1 to 64",
                                  &s->attribution.steps);
    if (st == HP_OK && s->attribution.steps > HP_IG_STEPS_MAX)
        return hp_ld_fail(ld, v, "'steps' must be a whole number of gradients along the path, 1 to %d, not %d (the "
                          "midpoint rule's error falls as 1/steps^2: 2 to 8 is the useful range)", HP_IG_STEPS_MAX,
                          s->attribution.steps);
    return st;
}

static const struct hp_study_opt opts[] = {
    {"estimator", parse_estimator}, {"steps", parse_steps}, {"mask", hp_study_parse_mask}};
enum { O_ESTIMATOR, O_STEPS, O_MASK };

static void defaults(struct hp_study *s)
{
    s->attribution.estimator = HP_EST_ATP;
}

/* steps: only where there is a path to step along; given none there, integrated gradients take 2 */
static enum hp_status check(const struct hp_loader *ld, const struct hp_study_seen *seen, struct hp_study *s)
{
    if (seen->opts[O_STEPS] && !integrated(s))
        return hp_ld_fail(ld, seen->opts[O_STEPS], "'steps' is for the integrated-gradients estimators (estimator: "
                          "ig or ig-layer); estimator %s takes one gradient", hp_estimator_name(s->attribution.estimator));
    if (integrated(s) && !seen->opts[O_STEPS])
        s->attribution.steps = 2;
    return HP_OK;
}

/* Integrated gradients walk the gates from 1 to 0: the path of zero ablation. Another ablation jumps to its
 * replacement at 0, which no gate between 0 and 1 passes through. */
static enum hp_status check_plan(const struct hp_loader *ld, const struct hp_plan *p, struct hp_study *s,
                                 const yaml_node_t *metric, const yaml_node_t *ablation)
{
    (void)metric;
    if (!integrated(s) || p->ablation == HP_ABLATE_ZERO)
        return HP_OK;
    return hp_ld_fail(ld, ablation, "attribution study '%s' (line %d) has estimator: %s, which integrates the "
                      "gradient along gates from 1 to 0, the path of zero ablation; under 'ablation: %s' use "
                      "estimator: atp or importance", s->name, s->line, hp_estimator_name(s->attribution.estimator),
                      hp_ablation_name(p->ablation));
}

/* The layers the study covers: its layers:, else every layer. */
static long n_layers_of(const struct hp_study *s, const struct hp_model_info *info)
{
    return s->n_layers_sel ? s->n_layers_sel : info->n_layers;
}

static long backwards(const struct hp_study *s, const struct hp_model_info *info)
{
    switch (s->attribution.estimator) {
    case HP_EST_IG: return s->attribution.steps;
    case HP_EST_IG_LAYER: return (long)s->attribution.steps * n_layers_of(s, info);
    default: return 1;
    }
}

/* Integrated gradients are taken between the gates of 1 and 0, where a metric whose gradient is 0 at the
 * unmasked model (1 - cos, KL) has one. */
static bool grad_off_base(const struct hp_study *s)
{
    return integrated(s);
}

static void describe(const struct hp_study *s, const struct hp_model_info *info, const struct hp_study_cost *c,
                     const char *metric, char *buf, size_t cap)
{
    (void)metric;
    const char *what = s->attribution.estimator == HP_EST_ATP          ? "AtP"
                       : s->attribution.estimator == HP_EST_IMPORTANCE ? "raw importance"
                       : s->attribution.estimator == HP_EST_IG         ? "integrated gradients, all gates together"
                                                                       : "integrated gradients, a layer's gates together";
    char steps[48] = "";
    if (integrated(s))
        snprintf(steps, sizeof steps, ", %d step%s%s", s->attribution.steps, s->attribution.steps == 1 ? "" : "s",
                 s->attribution.estimator == HP_EST_IG_LAYER ? " a layer" : "");
    (void)info;
    snprintf(buf, cap, "%ld forward+backward pass%s (%s, %s%s%s%s)", c->backwards, c->backwards == 1 ? "" : "es",
             hp_unit_name(s->kv, true), what, steps, s->mask ? ", at mask " : "", s->mask ? s->mask : "");
}

const struct hp_study_kind_row hp_study_attribution = {
    .name = "attribution",
    .units = true,
    .opts = opts,
    .n_opts = 3,
    .defaults = defaults,
    .check = check,
    .check_plan = check_plan,
    .run = HP_STUDY_RUN_SCORES,
    .score = HP_STUDY_SCORE_ATTRIBUTION,
    .first_shard_only = true,
    .backwards = backwards,
    .needs_grad = hp_study_always_grad,
    .grad_off_base = grad_off_base,
    .describe = describe,
};
