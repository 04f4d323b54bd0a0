/*
 * only.c -- the only study: per selected layer, every unit ablated but one,
 * for each selected unit the layer keeps.
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
            for (int u = 0; m && u < e->n_units; u++)
                if (u != e->sel[j])
                    hp_ex_ablate(e, m, e->lay[i], u);
            hp_unit_label(a, sizeof a, e->s->unit, e->lay[i], e->sel[j]);
            st = hp_ex_emit(e, m, e->lay[i], e->sel[j], -1, 0, hp_ex_live_in_layer(e, e->lay[i]) - 1, "only %s", a);
        }
    return st;
}

const struct hp_study_kind_row hp_study_only = {
    .name = "only",
    .units = true,
    .count_jobs = hp_ex_count_live,
    .expand = expand,
};
