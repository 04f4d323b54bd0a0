/*
 * importance.c -- the importance study: Michel et al.'s head importance,
 * E|dL/dxi| per unit, from one forward + backward at the unmasked model (or
 * at its mask:, the heads already removed),
 * scaled per layer to unit L2 norm (normalize: layer) or not. The sweep
 * computes it (HP_STUDY_RUN_SCORES) into the scores table. normalize: is
 * also an option of iterative studies ranked by gradient, and mask: of
 * attribution and iterative studies: their parses are here.
 */
#include "study_int.h"

#include <stdlib.h>

static const char *const normalize_names[] = {[HP_NORMALIZE_LAYER] = "layer", [HP_NORMALIZE_NONE] = "none"};

const char *hp_normalize_name(enum hp_normalize n)
{
    return (int)n >= 0 && (int)n < 2 ? normalize_names[n] : "unknown";
}

enum hp_status hp_study_parse_normalize(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    int i = 0;
    enum hp_status st = hp_ld_word(ld, "normalize", v, normalize_names, 2, &i);
    s->normalize = (enum hp_normalize)i;
    return st;
}

/* mask: (the heads already removed where the study starts), an option of attribution and iterative too: kept as
 * text, parsed against the model by hp_study_base_mask (study.c) */
enum hp_status hp_study_parse_mask(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    if (v->type != YAML_SCALAR_NODE || hp_yaml_is_null(v))
        return hp_ld_fail(ld, v, "'mask' needs a mask spec of the heads already removed, like \"0.1,2.*\" (quote "
                          "it), not %s", hp_yaml_type_word(v));
    if (strlen(hp_yaml_text(v)) != v->data.scalar.length)
        return hp_ld_fail(ld, v, "'mask' contains a NUL character");
    free(s->mask);
    if (!(s->mask = malloc(v->data.scalar.length + 1)))
        return hp_fail(ld->err, HP_ERR_NOMEM, "%s: out of memory", ld->path);
    memcpy(s->mask, hp_yaml_text(v), v->data.scalar.length + 1);
    return HP_OK;
}

static void describe(const struct hp_study *s, const struct hp_model_info *info, const struct hp_study_cost *c,
                     const char *metric, char *buf, size_t cap)
{
    (void)info, (void)c, (void)metric;
    snprintf(buf, cap, "1 forward+backward pass (%s, normalize %s%s%s)", hp_unit_name(s->unit, true),
             hp_normalize_name(s->normalize), s->mask ? ", at mask " : "", s->mask ? s->mask : "");
}

static const struct hp_study_opt opts[] = {{"normalize", hp_study_parse_normalize}, {"mask", hp_study_parse_mask}};

const struct hp_study_kind_row hp_study_importance = {
    .name = "importance",
    .units = true,
    .mlp_units = true,
    .opts = opts,
    .n_opts = 2,
    .run = HP_STUDY_RUN_SCORES,
    .score = HP_STUDY_SCORE_IMPORTANCE,
    .first_shard_only = true,
    .backwards = hp_study_one_backward,
    .needs_grad = hp_study_always_grad,
    .describe = describe,
};
