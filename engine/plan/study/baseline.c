/*
 * baseline.c -- the baseline study: the model with nothing ablated, the
 * measure every effect is taken against. A plan without one gets one, first
 * (plan.c inserts it).
 */
#include "study_int.h"

static int64_t count_jobs(const struct hp_expander *e)
{
    (void)e;
    return 1;
}

static enum hp_status expand(struct hp_expander *e)
{
    return hp_ex_emit(e, hp_ex_new_mask(e), -1, -1, -1, 0, 0, "baseline");
}

const struct hp_study_kind_row hp_study_baseline = {
    .name = "baseline",
    .count_jobs = count_jobs,
    .expand = expand,
};
