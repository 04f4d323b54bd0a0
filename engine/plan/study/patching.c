/*
 * patching.c -- the patching study: activation patching (Heimersheim &
 * Nanda; Wang et al. 2022), each selected unit's output replaced alone by
 * the plan's ablation (resample: its value on the row's corrupt prompt,
 * noising; denoise: on the corrupt run, its clean value), at every position
 * together (positions: all, the variants of the single study) or at each
 * position by itself (positions: each, the head x position grid; the unit
 * keeps its own output at the other positions). The sweep runs it
 * (HP_STUDY_RUN_PATCHING, sweep_patching.c): the grid's size is the data's,
 * known only once the data is read.
 */
#include "study_int.h"

static const char *const position_names[] = {[HP_PATCH_EACH] = "each", [HP_PATCH_ALL] = "all"};
static const char *const direction_names[] = {"noise", "denoise"}; /* HP_PATCH_NOISE - 1, HP_PATCH_DENOISE - 1 */

static enum hp_status parse_positions(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    int i = 0;
    enum hp_status st = hp_ld_word(ld, "positions", v, position_names, 2, &i);
    s->patching.positions = (enum hp_patch_positions)i;
    return st;
}

static enum hp_status parse_direction(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    int i = 0;
    enum hp_status st = hp_ld_word(ld, "direction", v, direction_names, 2, &i);
    s->patching.direction = (enum hp_patch_direction)(i + 1);
    return st;
}

/* direction names the ablation the plan must have: noise patches in the corrupt run's outputs, denoise the clean. */
static enum hp_status check_plan(const struct hp_loader *ld, const struct hp_plan *p, struct hp_study *s,
                                 const yaml_node_t *metric, const yaml_node_t *ablation)
{
    (void)metric;
    const enum hp_patch_direction d = s->patching.direction;
    const enum hp_ablation want = d == HP_PATCH_NOISE ? HP_ABLATE_RESAMPLE : HP_ABLATE_DENOISE;
    if (d == HP_PATCH_ANY || p->ablation == want)
        return HP_OK;
    return hp_ld_fail(ld, ablation, "patching study '%s' (line %d) has direction: %s, which patches in the %s "
                      "prompt's head outputs: it needs 'ablation: %s', not %s", s->name, s->line,
                      direction_names[d - 1], d == HP_PATCH_NOISE ? "corrupt" : "clean", hp_ablation_name(want),
                      hp_ablation_name(p->ablation));
}

/* the selected units the checkpoint has: one evaluation each per position patched */
static long evals(const struct hp_study *s, const struct hp_model_info *info)
{
    const int U = hp_unit_count(info, s->unit);
    long n = 0;
    for (int l = 0; l < info->n_layers; l++) {
        bool lay = s->n_layers_sel == 0;
        for (int i = 0; i < s->n_layers_sel; i++)
            lay |= s->layers[i] == l;
        for (int u = 0; lay && u < U; u++) {
            bool un = s->n_units_sel == 0;
            for (int i = 0; i < s->n_units_sel; i++)
                un |= s->units[i] == u;
            n += un && !hp_unit_pruned(info, s->unit, l, u);
        }
    }
    return n;
}

static bool per_position(const struct hp_study *s)
{
    return s->patching.positions == HP_PATCH_EACH;
}

static void describe(const struct hp_study *s, const struct hp_model_info *info, const struct hp_study_cost *c,
                     const char *metric, char *buf, size_t cap)
{
    (void)metric;
    if (s->patching.positions == HP_PATCH_ALL)
        snprintf(buf, cap, "%ld jobs (%s, every position together)", c->evals, hp_unit_name(s->unit, true));
    else
        snprintf(buf, cap, "%ld jobs (%ld %s x each position of the rows)", c->evals, evals(s, info),
                 hp_unit_name(s->unit, true));
}

static const struct hp_study_opt opts[] = {{"positions", parse_positions}, {"direction", parse_direction}};

const struct hp_study_kind_row hp_study_patching = {
    .name = "patching",
    .units = true,
    .opts = opts,
    .n_opts = 2,
    .check_plan = check_plan,
    .run = HP_STUDY_RUN_PATCHING,
    .first_shard_only = true,
    .evals = evals,
    .per_position = per_position,
    .describe = describe,
};
