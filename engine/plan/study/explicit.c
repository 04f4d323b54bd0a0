/*
 * explicit.c -- the explicit study: named unit sets, each a mask spec as
 * --mask takes it ("0.1,2.*", "kv:1.0"), each ablated as one job.
 * The specs are parsed against the model at expansion.
 */
#include "study_int.h"

#include <stdlib.h>

static enum hp_status parse_sets(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    if (v->type != YAML_MAPPING_NODE)
        return hp_ld_fail(ld, v, "'sets' must be a mapping of set name to mask spec, like "
                          "{early: \"0.*\", mix: \"1.3,kv:2.0\"}, not %s", hp_yaml_type_word(v));
    int n = hp_yaml_n_pairs(v);
    if (n == 0)
        return hp_ld_fail(ld, v, "'sets' is empty (name at least one set, like {early: \"0.*\"})");
    s->explicit_sets.names = calloc((size_t)n, sizeof *s->explicit_sets.names);
    s->explicit_sets.specs = calloc((size_t)n, sizeof *s->explicit_sets.specs);
    if (!s->explicit_sets.names || !s->explicit_sets.specs)
        return hp_fail(ld->err, HP_ERR_NOMEM, "%s: out of memory", ld->path);
    for (int i = 0; i < n; i++) {
        const yaml_node_pair_t *pr = &v->data.mapping.pairs.start[i];
        const yaml_node_t *k = hp_ld_node(ld, pr->key), *sv = hp_ld_node(ld, pr->value);
        char name[sizeof s->name];
        enum hp_status st = hp_ld_name(ld, "a set name", k, HP_STUDY_NAME_MAX, name);
        if (st)
            return st;
        for (int j = 0; j < i; j++)
            if (!strcmp(s->explicit_sets.names[j], name))
                return hp_ld_fail(ld, k, "set '%s' is named twice", name);
        if (sv->type != YAML_SCALAR_NODE || hp_yaml_is_null(sv))
            return hp_ld_fail(ld, sv, "set '%s' needs a mask spec like \"0.1,2.*\" (quote it), not %s", name,
                              hp_yaml_type_word(sv));
        if (strlen(hp_yaml_text(sv)) != sv->data.scalar.length)
            return hp_ld_fail(ld, sv, "set '%s' contains a NUL character", name);
        s->explicit_sets.names[i] = malloc(strlen(name) + 1);
        s->explicit_sets.specs[i] = malloc(sv->data.scalar.length + 1);
        s->explicit_sets.n = i + 1; // from here on clear() frees this entry
        if (!s->explicit_sets.names[i] || !s->explicit_sets.specs[i])
            return hp_fail(ld->err, HP_ERR_NOMEM, "%s: out of memory", ld->path);
        strcpy(s->explicit_sets.names[i], name);
        memcpy(s->explicit_sets.specs[i], hp_yaml_text(sv), sv->data.scalar.length + 1);
    }
    return HP_OK;
}

static void clear(struct hp_study *s)
{
    for (int i = 0; i < s->explicit_sets.n; i++) {
        free(s->explicit_sets.names[i]);
        free(s->explicit_sets.specs[i]);
    }
    free(s->explicit_sets.names);
    free(s->explicit_sets.specs);
}

static int64_t count_jobs(const struct hp_expander *e)
{
    return e->s->explicit_sets.n;
}

static enum hp_status expand(struct hp_expander *e)
{
    const struct hp_study *s = e->s;
    enum hp_status st = HP_OK;
    for (int i = 0; st == HP_OK && i < s->explicit_sets.n; i++) {
        struct hp_mask *m = NULL;
        struct hp_error merr;
        enum hp_status ms = hp_mask_parse(s->explicit_sets.specs[i], false, e->info, &m, &merr);
        if (ms == HP_ERR_NOMEM)
            return hp_fail(e->err, ms, "%s", merr.msg);
        if (ms)
            return hp_ex_fail(e, "sets", 0, s->explicit_sets.names[i], "set '%s': %s", s->explicit_sets.names[i], merr.msg);
        st = hp_ex_emit(e, m, -1, -1, -1, 0, hp_mask_count_ablated(m), "%s", s->explicit_sets.names[i]);
    }
    return st;
}

static const struct hp_study_opt opts[] = {{"sets", parse_sets}};

const struct hp_study_kind_row hp_study_explicit = {
    .name = "explicit",
    .opts = opts,
    .n_opts = 1,
    .required = "sets",
    .example = "explicit: {sets: {early: \"0.*\"}}",
    .clear = clear,
    .count_jobs = count_jobs,
    .expand = expand,
};
