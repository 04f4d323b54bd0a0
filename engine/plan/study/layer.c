/*
 * layer.c -- the layer study: each selected layer's attention ablated whole
 * (a layer the pruned checkpoint has no unit of is skipped). It takes
 * layers: but not heads: or kv: (a layer goes whole), so it is not a kind
 * over units and reads its layers: itself.
 */
#include "study_int.h"

static int64_t count_jobs(const struct hp_expander *e)
{
    int64_t n = 0;
    for (int i = 0; i < e->n_lay; i++)
        n += hp_ex_live_in_layer(e, e->lay[i]) > 0;
    return n;
}

static enum hp_status expand(struct hp_expander *e)
{
    enum hp_status st = HP_OK;
    for (int i = 0; st == HP_OK && i < e->n_lay; i++) {
        const int n_live = hp_ex_live_in_layer(e, e->lay[i]);
        if (n_live == 0)
            continue;
        struct hp_mask *m = hp_ex_new_mask(e);
        for (int u = 0; m && u < e->n_units; u++)
            hp_ex_ablate(e, m, e->lay[i], u);
        st = hp_ex_emit(e, m, e->lay[i], -1, -1, 0, n_live, "layer %d", e->lay[i]);
    }
    return st;
}

static enum hp_status parse_layers(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    return hp_ld_int_list(ld, "layers", v, 0, &s->layers, &s->n_layers_sel);
}

static const struct hp_study_opt opts[] = {{"layers", parse_layers}};

const struct hp_study_kind_row hp_study_layer = {
    .name = "layer",
    .opts = opts,
    .n_opts = 1,
    .count_jobs = count_jobs,
    .expand = expand,
};
