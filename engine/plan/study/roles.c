/*
 * roles.c -- the roles study: what each head attends to (hp_roles_compute)
 * on the plan's data, unmasked, and on an induction probe of probe_seqs x 2 x
 * probe_len random tokens. No jobs: the sweep runs its one pass
 * (HP_STUDY_RUN_ROLES); expansion refuses a probe the model cannot take.
 */
#include "study_int.h"
#include "roles.h" /* hp_roles_probe_size: whether the model takes the probe */

static enum hp_status parse_probe_seqs(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    return hp_ld_int(ld, "'probe_seqs'", v, 1, "a positive integer", &s->roles.probe_seqs);
}

static enum hp_status parse_probe_len(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    return hp_ld_int(ld, "'probe_len'", v, HP_ROLES_PROBE_MIN_LEN, "an integer of at least 8 (tokens a half)",
                     &s->roles.probe_len);
}

static enum hp_status expand(struct hp_expander *e)
{
    const struct hp_study *s = e->s;
    int seqs, len;
    struct hp_error why;
    struct hp_roles_opts ro = {.probe_seqs = s->roles.probe_seqs, .probe_len = s->roles.probe_len};
    if (hp_roles_probe_size(e->info, &ro, &seqs, &len, &why) != HP_OK)
        return hp_ex_fail(e, s->roles.probe_seqs > HP_ROLES_PROBE_MAX_SEQS ? "probe_seqs" : s->roles.probe_len ? "probe_len" : NULL,
                          0, NULL, "%s", why.msg);
    return HP_OK;
}

static void describe(const struct hp_study *s, const struct hp_model_info *info, const struct hp_study_cost *c,
                     const char *metric, char *buf, size_t cap)
{
    (void)c, (void)metric;
    /* the probe's size as the sweep will take it (expansion has checked the model takes it) */
    struct hp_roles_opts ro = {.probe_seqs = s->roles.probe_seqs, .probe_len = s->roles.probe_len};
    struct hp_error why;
    int ps = 0, pl = 0;
    hp_roles_probe_size(info, &ro, &ps, &pl, &why);
    snprintf(buf, cap, "1 unmasked pass over the data and one over a probe of %d x 2 x %d random tokens", ps, pl);
}

static const struct hp_study_opt opts[] = {{"probe_seqs", parse_probe_seqs}, {"probe_len", parse_probe_len}};

const struct hp_study_kind_row hp_study_roles = {
    .name = "roles",
    .opts = opts,
    .n_opts = 2,
    .expand = expand,
    .run = HP_STUDY_RUN_ROLES,
    .first_shard_only = true,
    .passes = 1,
    .describe = describe,
};
