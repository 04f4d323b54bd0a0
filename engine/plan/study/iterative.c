/*
 * iterative.c -- the iterative study: a pruning curve (Michel et al.). From
 * the whole model (or its mask:, whose units are then out of play), each
 * step prunes prune: of the study's units, those whose
 * loss hurts least (rank: exact, one evaluation a candidate), the least
 * important by the gradient under the current mask (rank: gradient, one
 * backward a step), or the smallest by an estimate of every unit's effect
 * made once where the curve starts (rank: estimate, by estimator:, the
 * attribution study's), until at most floor: of them is left. Its jobs depend on
 * results, so it expands into none here: the sweep runs it
 * (HP_STUDY_RUN_ITERATIVE), by the schedule below, in the first shard.
 */
#include "study_int.h"

#include <math.h>

static const char *const rank_names[] = {[HP_RANK_EXACT] = "exact", [HP_RANK_GRADIENT] = "gradient",
                                         [HP_RANK_ESTIMATE] = "estimate"};
enum { N_RANKS = sizeof rank_names / sizeof *rank_names };

const char *hp_rank_name(enum hp_rank r)
{
    return (int)r >= 0 && (int)r < N_RANKS ? rank_names[r] : "unknown";
}

// --- options ---------------------------------------------------------------------------

static enum hp_status parse_prune(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    return hp_ld_fraction(ld, "prune", v, true, &s->iterative.prune_frac);
}

static enum hp_status parse_floor(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    return hp_ld_fraction(ld, "floor", v, false, &s->iterative.floor_frac);
}

static enum hp_status parse_keep1(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    return hp_ld_bool(ld, "keep_one_per_layer", v, &s->iterative.keep_one_per_layer);
}

static enum hp_status parse_rank(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    int i = 0;
    enum hp_status st = hp_ld_word(ld, "rank", v, rank_names, N_RANKS, &i);
    s->iterative.rank = (enum hp_rank)i;
    return st;
}

enum { O_PRUNE, O_FLOOR, O_KEEP1, O_RANK, O_NORMALIZE, O_MASK, O_ESTIMATOR, O_STEPS, N_OPTS };

static const struct hp_study_opt opts[N_OPTS] = {
    [O_PRUNE] = {"prune", parse_prune},
    [O_FLOOR] = {"floor", parse_floor},
    [O_KEEP1] = {"keep_one_per_layer", parse_keep1},
    [O_RANK] = {"rank", parse_rank},
    [O_NORMALIZE] = {"normalize", hp_study_parse_normalize},
    [O_MASK] = {"mask", hp_study_parse_mask},
    [O_ESTIMATOR] = {"estimator", hp_study_parse_estimator},
    [O_STEPS] = {"steps", hp_study_parse_steps},
};

/* A gradient-ranked curve ranks raw importance by default: measured, it stays within 0.1% of the exact-ranked
 * curve's loss on the default model up to half the heads, where normalize: layer is 5.4% off, and on stories260K
 * at most 7.7% off where layer is 48-78% (docs/plans.md, normalize). */
static void defaults(struct hp_study *s)
{
    s->normalize = HP_NORMALIZE_NONE;
}

/* rank: estimate ranks by the attribution study's estimators, with its default (hp_study_check_estimator_plan):
 * ranked once by ig-layer, the curve stays within 1.8% of the exact-ranked one's loss up to half the heads on
 * stories260K and 0.3% on the default model, where raw importance recomputed every step is 7.7% and 0.1% off
 * (docs/gradients.md, "Gradient studies") */
static enum hp_status check(const struct hp_loader *ld, const struct hp_study_seen *seen, struct hp_study *s)
{
    const enum hp_rank r = s->iterative.rank;
    if (seen->opts[O_NORMALIZE] && r != HP_RANK_GRADIENT)
        return hp_ld_fail(ld, seen->opts[O_NORMALIZE], "'normalize' scales gradient importance: it applies to an "
                          "iterative study with rank: gradient (this one ranks by %s)",
                          r == HP_RANK_EXACT ? "exact evaluations" : "an estimator's estimates");
    const yaml_node_t *est = seen->opts[O_ESTIMATOR] ? seen->opts[O_ESTIMATOR] : seen->opts[O_STEPS];
    if (est && r != HP_RANK_ESTIMATE)
        return hp_ld_fail(ld, est, "'%s' says what estimates each unit's effect: it applies to an iterative study "
                          "with rank: estimate (this one ranks by %s)", seen->opts[O_ESTIMATOR] ? "estimator" : "steps",
                          r == HP_RANK_EXACT ? "exact evaluations" : "gradient importance at each step");
    if (r != HP_RANK_ESTIMATE)
        return HP_OK;
    if (!seen->opts[O_ESTIMATOR] && !seen->opts[O_STEPS])
        s->estimator_default = true;
    return hp_study_check_steps(ld, seen->opts[O_ESTIMATOR], seen->opts[O_STEPS], s);
}

static enum hp_status check_plan(const struct hp_loader *ld, const struct hp_plan *p, struct hp_study *s,
                                 const yaml_node_t *metric, const yaml_node_t *ablation)
{
    (void)metric;
    if (s->iterative.rank != HP_RANK_ESTIMATE)
        return HP_OK;
    return hp_study_check_estimator_plan(ld, p, s, ablation);
}

// --- the schedule ------------------------------------------------------------------------

struct hp_iterative_schedule hp_study_schedule(const struct hp_study *s, const struct hp_model_info *info)
{
    /* the selected units the checkpoint has and the base mask leaves, and the layers that have any (a mask:
     * that does not parse was refused at expansion; here, or out of memory, it is taken as none, and the
     * sweep's own parse fails) */
    struct hp_error ignored;
    struct hp_mask *base = NULL;
    if (s->mask && hp_study_base_mask("", s, info, &base, &ignored) != HP_OK)
        base = NULL;
    const int per_layer = hp_unit_count(info, s->unit), n_lay = s->n_layers_sel ? s->n_layers_sel : info->n_layers,
              n_sel = s->n_units_sel ? s->n_units_sel : per_layer;
    int n = 0, layers = 0;
    for (int i = 0; i < n_lay; i++) {
        const int l = s->n_layers_sel ? s->layers[i] : i;
        int k = 0;
        for (int j = 0; j < n_sel; j++) {
            const int u = s->n_units_sel ? s->units[j] : j;
            k += l < info->n_layers && u < per_layer && !hp_unit_pruned(info, s->unit, l, u) &&
                 !(base && hp_mask_unit_ablated(base, info, s->unit, l, u));
        }
        n += k;
        layers += k > 0;
    }
    hp_mask_free(base);
    struct hp_iterative_schedule sc = {n, layers, (int)fmax(1.0, round(s->iterative.prune_frac * n)),
                                       (int)ceil(s->iterative.floor_frac * n - 1e-9)};
    /* one unit a layer stays: the curve ends there, whatever the floor */
    if (s->iterative.keep_one_per_layer && sc.floor_units < layers)
        sc.floor_units = layers;
    return sc;
}

int hp_iterative_step(const struct hp_iterative_schedule *sc, int left)
{
    if (left <= sc->floor_units)
        return 0;
    return sc->per_step < left - sc->floor_units ? sc->per_step : left - sc->floor_units;
}

// --- cost --------------------------------------------------------------------------------

/*
 * The sweep's loop without the scores: each step records its curve point,
 * scores every unit still prunable (none when the step prunes them all), and
 * prunes hp_iterative_step of them.
 * With keep_one_per_layer a layer down to its last unit is not scored; how
 * many layers are down to one depends on the scores, but with `left` units in
 * n_layers layers (each keeping at least one) at least 2 n_layers - left
 * are, and exactly that many when no layer has more than 2 units.
 */
static long evals(const struct hp_study *s, const struct hp_model_info *info)
{
    struct hp_iterative_schedule sc = hp_study_schedule(s, info);
    long n = 0;
    for (int left = sc.n_units;;) {
        n++; /* the curve point */
        int k = hp_iterative_step(&sc, left);
        if (k == 0)
            break;
        if (s->iterative.rank != HP_RANK_EXACT || k == left) { /* gradients rank them (backwards); or all go */
            left -= k;
            continue;
        }
        int at_last = s->iterative.keep_one_per_layer && 2 * sc.n_layers > left ? 2 * sc.n_layers - left : 0;
        n += left - at_last; /* the candidates */
        left -= k;
    }
    return n;
}

/* A gradient-ranked curve runs one backward for every point but the last, and but a step that prunes
 * every unit left: exactly, since each step prunes hp_iterative_step units whatever the ranking
 * (keep_one_per_layer only narrows the choice). */
static long backwards(const struct hp_study *s, const struct hp_model_info *info)
{
    if (s->iterative.rank == HP_RANK_EXACT)
        return 0;
    if (s->iterative.rank == HP_RANK_ESTIMATE) { /* the estimate, once, unless the first step prunes every unit */
        struct hp_iterative_schedule sc = hp_study_schedule(s, info);
        const int k = hp_iterative_step(&sc, sc.n_units);
        return k > 0 && k < sc.n_units ? hp_study_estimator_backwards(s, info) : 0;
    }
    struct hp_iterative_schedule sc = hp_study_schedule(s, info);
    long n = 0;
    for (int left = sc.n_units, k; (k = hp_iterative_step(&sc, left)) > 0; left -= k)
        n += k < left;
    return n;
}

static bool needs_grad(const struct hp_study *s)
{
    return s->iterative.rank != HP_RANK_EXACT;
}

/* ranked by integrated gradients, its gradients are taken off the gates of 1 */
static bool grad_off_base(const struct hp_study *s)
{
    return s->iterative.rank == HP_RANK_ESTIMATE && hp_study_integrated(s);
}

static void describe(const struct hp_study *s, const struct hp_model_info *info, const struct hp_study_cost *c,
                     const char *metric, char *buf, size_t cap)
{
    (void)info, (void)metric;
    if (s->iterative.rank == HP_RANK_ESTIMATE) {
        char what[96];
        hp_study_estimator_text(s, what, sizeof what);
        snprintf(buf, cap, "%ld evaluations + %ld forward+backward passes (ranked once by %s%s%s)", c->evals,
                 c->backwards, what, s->mask ? ", from mask " : "", s->mask ? s->mask : "");
    } else if (s->iterative.rank == HP_RANK_GRADIENT)
        snprintf(buf, cap, "%ld evaluations + %ld forward+backward passes (ranked by gradient importance, "
                 "normalize %s%s%s)", c->evals, c->backwards, hp_normalize_name(s->normalize),
                 s->mask ? ", from mask " : "", s->mask ? s->mask : "");
    else
        snprintf(buf, cap, "about %ld evaluations (masks depend on results%s%s)", c->evals,
                 s->mask ? ", from mask " : "", s->mask ? s->mask : "");
}

const struct hp_study_kind_row hp_study_iterative = {
    .name = "iterative",
    .units = true,
    .opts = opts,
    .n_opts = N_OPTS,
    .required = "prune",
    .example = "iterative: {prune: 10%}",
    .defaults = defaults,
    .check = check,
    .check_plan = check_plan,
    .run = HP_STUDY_RUN_ITERATIVE,
    .first_shard_only = true,
    .evals = evals,
    .backwards = backwards,
    .needs_grad = needs_grad,
    .grad_off_base = grad_off_base,
    .describe = describe,
};
