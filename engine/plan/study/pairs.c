/*
 * pairs.c -- the pairs study: every pair of selected units within a selected
 * layer ablated together (their interaction, against the two singles).
 */
#include "study_int.h"

static int64_t count_jobs(const struct hp_expander *e)
{
    int64_t pairs = 0;
    for (int i = 0; i < e->n_lay; i++) {
        int64_t n = 0;
        for (int j = 0; j < e->n_sel; j++)
            n += hp_ex_live(e, i, j);
        pairs += n * (n - 1) / 2;
    }
    return pairs;
}

static enum hp_status expand(struct hp_expander *e)
{
    const struct hp_study *s = e->s;
    enum hp_status st = HP_OK;
    char a[32], b[32];
    int before = e->jl->n;
    for (int i = 0; st == HP_OK && i < e->n_lay; i++)
        for (int j = 0; st == HP_OK && j < e->n_sel; j++)
            for (int j2 = j + 1; st == HP_OK && j2 < e->n_sel; j2++) {
                if (!hp_ex_live(e, i, j) || !hp_ex_live(e, i, j2))
                    continue;
                struct hp_mask *m = hp_ex_new_mask(e);
                if (m) {
                    hp_ex_ablate(e, m, e->lay[i], e->sel[j]);
                    hp_ex_ablate(e, m, e->lay[i], e->sel[j2]);
                }
                hp_unit_label(a, sizeof a, s->unit, e->lay[i], e->sel[j]);
                hp_unit_label(b, sizeof b, s->unit, e->lay[i], e->sel[j2]);
                st = hp_ex_emit(e, m, e->lay[i], e->sel[j], e->sel[j2], 0, 2, "%s+%s", a, b);
            }
    if (st == HP_OK && e->jl->n == before)
        return hp_ex_fail(e, s->n_units_sel ? "heads" : NULL, s->n_units_sel ? s->units[0] : 0, NULL,
                          "no pairs: each layer has only one %s to pair", hp_unit_name(s->unit, false));
    return st;
}

const struct hp_study_kind_row hp_study_pairs = {
    .name = "pairs",
    .units = true,
    .count_jobs = count_jobs,
    .expand = expand,
};
