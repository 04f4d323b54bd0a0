/*
 * attribution.c -- the attribution study: an estimate of each unit's
 * single-ablation effect from gradients at the gates, by one of the
 * estimators of enum hp_estimator (docs/gradients.md, "Estimators"): AtP,
 * -dL/dxi at the gates of 1 (one forward + backward); raw importance
 * E_x|dL_x/dxi| there, a ranker of the effect's size (one pass); integrated
 * gradients along the gate path from 1 to 0, every unit's gate together (ig,
 * `steps` passes) or one layer's at a time (ig-layer, steps passes a layer),
 * the midpoint rule; by default ig-layer under zero ablation, atp under any
 * other (check_plan). At the study's mask: (the heads already removed) each
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

bool hp_study_integrated(const struct hp_study *s)
{
    return s->estimator == HP_EST_IG || s->estimator == HP_EST_IG_LAYER;
}

enum hp_status hp_study_parse_estimator(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    int i = 0;
    enum hp_status st = hp_ld_word(ld, "estimator", v, estimator_names, HP_EST_COUNT, &i);
    s->estimator = (enum hp_estimator)i;
    return st;
}

enum hp_status hp_study_parse_steps(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    enum hp_status st = hp_ld_int(ld, "'steps'", v, 1, "a whole number of gradients along the path, 1 to 64",
                                  &s->steps);
    if (st == HP_OK && s->steps > HP_IG_STEPS_MAX)
        return hp_ld_fail(ld, v, "'steps' must be a whole number of gradients along the path, 1 to %d, not %d (the "
                          "midpoint rule's error falls as 1/steps^2: 2 to 8 is the useful range)", HP_IG_STEPS_MAX,
                          s->steps);
    return st;
}

static const struct hp_study_opt opts[] = {
    {"estimator", hp_study_parse_estimator}, {"steps", hp_study_parse_steps}, {"mask", hp_study_parse_mask}};
enum { O_ESTIMATOR, O_STEPS, O_MASK };

static void defaults(struct hp_study *s)
{
    s->estimator = HP_EST_ATP;
}

enum hp_status hp_study_check_steps(const struct hp_loader *ld, const yaml_node_t *estimator,
                                    const yaml_node_t *steps, struct hp_study *s)
{
    if (steps && !estimator) /* steps: alone names the integrated estimator that ranks best, ig-layer */
        s->estimator = HP_EST_IG_LAYER;
    if (steps && !hp_study_integrated(s))
        return hp_ld_fail(ld, steps, "'steps' is for the integrated-gradients estimators (estimator: ig or "
                          "ig-layer); estimator %s takes one gradient", hp_estimator_name(s->estimator));
    if (hp_study_integrated(s) && !steps)
        s->steps = 2;
    return HP_OK;
}

/* Without estimator:, steps: names ig-layer (hp_study_check_steps); with neither, the plan's ablation chooses
 * (hp_study_check_estimator_plan), as the plan's metric and ablation come after the studies or before. */
static enum hp_status check(const struct hp_loader *ld, const struct hp_study_seen *seen, struct hp_study *s)
{
    if (!seen->opts[O_ESTIMATOR] && !seen->opts[O_STEPS])
        s->estimator_default = true;
    return hp_study_check_steps(ld, seen->opts[O_ESTIMATOR], seen->opts[O_STEPS], s);
}

enum hp_status hp_study_check_estimator_plan(const struct hp_loader *ld, const struct hp_plan *p, struct hp_study *s,
                                             const yaml_node_t *ablation)
{
    /* The default, by the rankings measured on four trained models (docs/gradients.md, "Estimators"): ig-layer
     * is the one estimator within 0.82-0.95 Spearman of the exact effects on all of them (atp -0.30 to 0.84,
     * importance 0.17 to 0.92), and it walks the path of zero ablation only; under another ablation, AtP. */
    if (s->estimator_default) {
        s->estimator = p->ablation == HP_ABLATE_ZERO ? HP_EST_IG_LAYER : HP_EST_ATP;
        s->steps = hp_study_integrated(s) ? 2 : 0;
    }
    if (!hp_study_integrated(s) || p->ablation == HP_ABLATE_ZERO)
        return HP_OK;
    return hp_ld_fail(ld, ablation, "%s study '%s' (line %d) has estimator: %s, which integrates the gradient along "
                      "gates from 1 to 0, the path of zero ablation; under 'ablation: %s' use estimator: atp or "
                      "importance", hp_study_kind_name(s->kind), s->name, s->line, hp_estimator_name(s->estimator),
                      hp_ablation_name(p->ablation));
}

static enum hp_status check_plan(const struct hp_loader *ld, const struct hp_plan *p, struct hp_study *s,
                                 const yaml_node_t *metric, const yaml_node_t *ablation)
{
    (void)metric;
    return hp_study_check_estimator_plan(ld, p, s, ablation);
}

long hp_study_estimator_backwards(const struct hp_study *s, const struct hp_model_info *info)
{
    switch (s->estimator) {
    case HP_EST_IG: return s->steps;
    case HP_EST_IG_LAYER: return (long)s->steps * (s->n_layers_sel ? s->n_layers_sel : info->n_layers);
    default: return 1;
    }
}

void hp_study_estimator_text(const struct hp_study *s, char *buf, size_t cap)
{
    const char *what = s->estimator == HP_EST_ATP          ? "AtP"
                       : s->estimator == HP_EST_IMPORTANCE ? "raw importance"
                       : s->estimator == HP_EST_IG         ? "integrated gradients, all gates together"
                                                           : "integrated gradients, a layer's gates together";
    if (hp_study_integrated(s))
        snprintf(buf, cap, "%s, %d step%s%s", what, s->steps, s->steps == 1 ? "" : "s",
                 s->estimator == HP_EST_IG_LAYER ? " a layer" : "");
    else
        snprintf(buf, cap, "%s", what);
}

static void describe(const struct hp_study *s, const struct hp_model_info *info, const struct hp_study_cost *c,
                     const char *metric, char *buf, size_t cap)
{
    (void)metric, (void)info;
    char what[96];
    hp_study_estimator_text(s, what, sizeof what);
    snprintf(buf, cap, "%ld forward+backward pass%s (%s, %s%s%s)", c->backwards, c->backwards == 1 ? "" : "es",
             hp_unit_name(s->unit, true), what, s->mask ? ", at mask " : "", s->mask ? s->mask : "");
}

const struct hp_study_kind_row hp_study_attribution = {
    .name = "attribution",
    .units = true,
    .mlp_units = true,
    .opts = opts,
    .n_opts = 3,
    .defaults = defaults,
    .check = check,
    .check_plan = check_plan,
    .run = HP_STUDY_RUN_SCORES,
    .score = HP_STUDY_SCORE_ATTRIBUTION,
    .first_shard_only = true,
    .backwards = hp_study_estimator_backwards,
    .needs_grad = hp_study_always_grad,
    .grad_off_base = hp_study_integrated,
    .describe = describe,
};
