/*
 * attribution.c -- the attribution study: the first-order (AtP) estimate of
 * each unit's single-ablation effect, from one forward + backward at the
 * unmasked model (or at its mask:, the heads already removed: each estimate
 * is then of removing the unit on top of those). The sweep computes it (HP_STUDY_RUN_SCORES) into the
 * scores table.
 */
#include "study_int.h"

static void describe(const struct hp_study *s, const struct hp_model_info *info, const struct hp_study_cost *c,
                     const char *metric, char *buf, size_t cap)
{
    (void)info, (void)c, (void)metric;
    snprintf(buf, cap, "1 forward+backward pass (%s%s%s)", hp_unit_name(s->kv, true), s->mask ? ", at mask " : "",
             s->mask ? s->mask : "");
}

static const struct hp_study_opt opts[] = {{"mask", hp_study_parse_mask}};

const struct hp_study_kind_row hp_study_attribution = {
    .name = "attribution",
    .units = true,
    .opts = opts,
    .n_opts = 1,
    .run = HP_STUDY_RUN_SCORES,
    .score = HP_STUDY_SCORE_ATTRIBUTION,
    .first_shard_only = true,
    .backwards = hp_study_one_backward,
    .needs_grad = hp_study_always_grad,
    .describe = describe,
};
