/*
 * study.c -- the registry of study kinds: one row a kind, each defined in
 * the kind's own file (engine/plan/study/<kind>.c), and the questions the rest of
 * the house asks of a study, answered from its row.
 *
 * Invariant: hp_study_kinds has a row for every value of enum
 * hp_study_kind, at its value (designated initialisers, and the
 * static_assert below: a missing row is a build error).
 * Must not: know any kind by name; that is each row's.
 */
#include "study_int.h"

#include <assert.h>

extern const struct hp_study_kind_row hp_study_baseline, hp_study_single, hp_study_only, hp_study_layer,
    hp_study_random, hp_study_explicit, hp_study_pairs, hp_study_iterative, hp_study_importance,
    hp_study_attribution, hp_study_roles, hp_study_gates, hp_study_patching, hp_study_screen, hp_study_direct, hp_study_edges, hp_study_circuit;

const struct hp_study_kind_row *const hp_study_kinds[] = {
    [HP_STUDY_BASELINE] = &hp_study_baseline,
    [HP_STUDY_SINGLE] = &hp_study_single,
    [HP_STUDY_ONLY] = &hp_study_only,
    [HP_STUDY_LAYER] = &hp_study_layer,
    [HP_STUDY_RANDOM] = &hp_study_random,
    [HP_STUDY_EXPLICIT] = &hp_study_explicit,
    [HP_STUDY_PAIRS] = &hp_study_pairs,
    [HP_STUDY_ITERATIVE] = &hp_study_iterative,
    [HP_STUDY_IMPORTANCE] = &hp_study_importance,
    [HP_STUDY_ATTRIBUTION] = &hp_study_attribution,
    [HP_STUDY_ROLES] = &hp_study_roles,
    [HP_STUDY_GATES] = &hp_study_gates,
    [HP_STUDY_PATCHING] = &hp_study_patching,
    [HP_STUDY_SCREEN] = &hp_study_screen,
    [HP_STUDY_DIRECT] = &hp_study_direct,
    [HP_STUDY_EDGES] = &hp_study_edges,
    [HP_STUDY_CIRCUIT] = &hp_study_circuit,
};
static_assert(sizeof hp_study_kinds / sizeof hp_study_kinds[0] == HP_STUDY_COUNT,
              "a study kind without its row in hp_study_kinds");

const char *hp_study_kind_name(enum hp_study_kind k)
{
    if ((int)k < 0 || (int)k >= HP_STUDY_COUNT)
        return "unknown"; // a value cast from outside the enum
    return hp_study_kinds[k]->name;
}

bool hp_study_first_shard_only(enum hp_study_kind k)
{
    return hp_study_kinds[k]->first_shard_only;
}

enum hp_study_run hp_study_run_of(enum hp_study_kind k)
{
    return hp_study_kinds[k]->run;
}

enum hp_study_score hp_study_score_of(enum hp_study_kind k)
{
    return hp_study_kinds[k]->score;
}

long hp_study_evals(const struct hp_study *s, const struct hp_model_info *info)
{
    const struct hp_study_kind_row *r = hp_study_kinds[s->kind];
    return r->evals ? r->evals(s, info) : 0;
}

long hp_study_backwards(const struct hp_study *s, const struct hp_model_info *info)
{
    const struct hp_study_kind_row *r = hp_study_kinds[s->kind];
    return r->backwards ? r->backwards(s, info) : 0;
}

bool hp_study_needs_grad(const struct hp_study *s)
{
    const struct hp_study_kind_row *r = hp_study_kinds[s->kind];
    return r->needs_grad && r->needs_grad(s);
}

bool hp_study_grad_off_base(const struct hp_study *s)
{
    const struct hp_study_kind_row *r = hp_study_kinds[s->kind];
    return r->grad_off_base && r->grad_off_base(s);
}

bool hp_study_takes(const struct hp_study *s, const char *name)
{
    const struct hp_study_kind_row *r = hp_study_kinds[s->kind];
    for (int i = 0; i < r->n_opts; i++)
        if (r->opts[i].name && strcmp(r->opts[i].name, name) == 0)
            return true;
    return false;
}

bool hp_study_trains(const struct hp_study *s)
{
    return hp_study_kinds[s->kind]->trains;
}

void hp_study_cost(const struct hp_study *s, const struct hp_model_info *info, int n_jobs, int positions,
                   struct hp_study_cost *out)
{
    const struct hp_study_kind_row *r = hp_study_kinds[s->kind];
    long backs = hp_study_backwards(s, info);
    const long per = r->per_position && r->per_position(s) ? positions : 1;
    *out = (struct hp_study_cost){.n_jobs = n_jobs,
                                  .evals = hp_study_evals(s, info) * per,
                                  .backwards = r->trains ? 0 : backs,
                                  .train_backwards = r->trains ? backs : 0,
                                  .passes = r->passes};
}

void hp_study_describe(const struct hp_study *s, const struct hp_model_info *info, const struct hp_study_cost *c,
                       const char *metric, char *buf, size_t cap)
{
    const struct hp_study_kind_row *r = hp_study_kinds[s->kind];
    if (r->describe)
        r->describe(s, info, c, metric, buf, cap);
    else
        snprintf(buf, cap, "%d jobs", c->n_jobs);
}

long hp_study_one_backward(const struct hp_study *s, const struct hp_model_info *info)
{
    (void)s, (void)info;
    return 1;
}

bool hp_study_always_grad(const struct hp_study *s)
{
    (void)s;
    return true;
}

// --- mask: the units a study starts without (its parse is importance.c's) ----------

enum hp_status hp_study_base_mask(const char *plan_path, const struct hp_study *s, const struct hp_model_info *info,
                                  struct hp_mask **out, struct hp_error *err)
{
    struct hp_error merr;
    enum hp_status st = hp_mask_parse(s->mask ? s->mask : "", false, info, out, &merr);
    if (st == HP_ERR_NOMEM)
        return hp_fail(err, st, "%s", merr.msg);
    if (st)
        return hp_fail(err, HP_ERR_PLAN, "%s:%d: study '%s': mask: %s", plan_path, s->line, s->name, merr.msg);
    hp_mask_drop_absent(*out, info);
    return HP_OK;
}
