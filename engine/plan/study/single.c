/*
 * single.c -- the single study: each selected unit (head, or KV group) of
 * each selected layer ablated alone, layer by layer (leave-one-out).
 */
#include "study_int.h"

static enum hp_status expand(struct hp_expander *e)
{
    enum hp_status st = HP_OK;
    char a[32];
    for (int i = 0; st == HP_OK && i < e->n_lay; i++)
        for (int j = 0; st == HP_OK && j < e->n_sel; j++) {
            if (!hp_ex_live(e, i, j))
                continue;
            struct hp_mask *m = hp_ex_new_mask(e);
            if (m)
                hp_ex_ablate(e, m, e->lay[i], e->sel[j]);
            hp_unit_label(a, sizeof a, e->s->unit, e->lay[i], e->sel[j]);
            st = hp_ex_emit(e, m, e->lay[i], e->sel[j], -1, 0, 1, "%s", a);
        }
    return st;
}

const struct hp_study_kind_row hp_study_single = {
    .name = "single",
    .units = true,
    .mlp_units = true,
    .count_jobs = hp_ex_count_live,
    .expand = expand,
};
