/*
 * direct.c -- the `direct` study: each unit's total effect beside its direct
 * effect. Total: the unit ablated, so that every reader after it loses it (as
 * `single`). Direct: only its edges into the logits patched (docs/edges.md),
 * so that its output still reaches every later head and MLP and only the path
 * straight through the residual stream to the output is removed. Where later
 * layers make up for a removed unit (self-repair), the total effect is the
 * smaller: `query self-repair` prints both and their difference.
 *
 * Jobs: two per unit, in that order, told apart by sample (0 the total, 1
 * the direct) and labelled "L.H" and "L.H>logits" (a KV group: its heads'
 * edges; an MLP: mlp:L>logits).
 */
#include <stdio.h>

#include "study_int.h"

static int64_t count_jobs(const struct hp_expander *e)
{
    return 2 * hp_ex_count_live(e);
}

/* The unit's senders' edges into the logits, added to m: the MLP's, or each head's of the unit. */
static enum hp_status direct_edges(struct hp_expander *e, struct hp_mask *m, int layer, int unit)
{
    const enum hp_unit_kind k = e->s->unit;
    char one[48];
    if (k == HP_UNIT_MLP) {
        snprintf(one, sizeof one, "mlp:%d>logits", layer);
        return hp_mask_add_edges(m, one, e->info, e->err);
    }
    const int per = hp_unit_width(e->info, k);
    enum hp_status st = HP_OK;
    for (int h = unit * per; h < (unit + 1) * per && st == HP_OK; h++) {
        snprintf(one, sizeof one, "%d.%d>logits", layer, h);
        st = hp_mask_add_edges(m, one, e->info, e->err);
    }
    return st;
}

static enum hp_status expand(struct hp_expander *e)
{
    enum hp_status st = HP_OK;
    char a[32];
    for (int i = 0; st == HP_OK && i < e->n_lay; i++)
        for (int j = 0; st == HP_OK && j < e->n_sel; j++) {
            if (!hp_ex_live(e, i, j))
                continue;
            const int l = e->lay[i], u = e->sel[j];
            hp_unit_label(a, sizeof a, e->s->unit, l, u);
            struct hp_mask *total = hp_ex_new_mask(e);
            if (total)
                hp_ex_ablate(e, total, l, u);
            if ((st = hp_ex_emit(e, total, l, u, -1, 0, 1, "%s", a)) != HP_OK)
                break;
            struct hp_mask *direct = hp_ex_new_mask(e);
            if (direct && (st = direct_edges(e, direct, l, u)) != HP_OK) {
                hp_mask_free(direct);
                break;
            }
            st = hp_ex_emit(e, direct, l, u, -1, 1, 1, "%s>logits", a);
        }
    return st;
}

const struct hp_study_kind_row hp_study_direct = {
    .name = "direct",
    .units = true,
    .mlp_units = true,
    .count_jobs = count_jobs,
    .expand = expand,
};
