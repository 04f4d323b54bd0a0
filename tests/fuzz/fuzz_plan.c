/*
 * fuzz_plan -- plan YAML (engine/plan/plan.c: hp_plan_parse, hp_plan_expand,
 * hp_study_schedule).
 *
 * Input: a plan's text, parsed as "fuzz/plan.yaml" and, when it parses,
 * expanded against two hand-made models (4 layers x 4 heads without GQA;
 * 3 layers x 8 heads in 2 KV groups). Every job must carry a mask of the
 * model's shape, and every iterative schedule and every study's cost (evaluations,
 * forward+backward passes) must be sane.
 */
#include "fuzz_common.h"
#include "headprune.h"
#include "plan.h"

#define MAX_INPUT (64 << 10)

static struct hp_model_info shape(int n_layers, int n_heads, int n_kv_heads)
{
    struct hp_model_info info;
    memset(&info, 0, sizeof info);
    info.arch = HP_ARCH_LLAMA;
    strcpy(info.model_type, "llama");
    info.n_layers = n_layers;
    info.n_heads = n_heads;
    info.n_kv_heads = n_kv_heads;
    info.d_head = 8;
    info.d_model = n_heads * 8;
    info.n_vocab = 97;
    info.n_ctx = 64;
    info.causal = true;
    info.has_lm_head = true;
    return info;
}

static void expand(const struct hp_plan *p, const struct hp_model_info *info)
{
    struct hp_joblist *jl = NULL;
    struct hp_error err = {{0}};
    if (hp_plan_expand(p, info, &jl, &err) != HP_OK) {
        FZ_CHECK_ERR(err);
        hp_joblist_free(jl);
        return;
    }
    FZ_CHECK(jl && jl->n >= 1, "a plan expanded to no jobs (the baseline is always one)");
    for (int i = 0; i < jl->n; i++) {
        const struct hp_job *j = &jl->jobs[i];
        FZ_CHECK(j->study >= 0 && j->study < p->n_studies, "job %d of study %d", i, j->study);
        FZ_CHECK(j->mask && j->mask->n_layers == info->n_layers && j->mask->n_heads == info->n_heads,
                 "job %d ('%s') has a mask of the wrong shape", i, j->label);
        FZ_CHECK(memchr(j->label, 0, sizeof j->label) != NULL, "job %d label not terminated", i);
        int n = hp_mask_count_ablated(j->mask);
        FZ_CHECK(n >= 0 && n <= info->n_layers * info->n_heads, "job %d ablates %d", i, n);
    }
    hp_joblist_free(jl);
    for (int i = 0; i < p->n_studies; i++) {
        /* the costs `plan` prints: gradient studies one forward+backward, a gradient-ranked curve one a point but
         * the last, and but a last step that prunes every unit left (floor 0: nothing to rank), a gates study one
         * a training step */
        long evals = hp_study_evals(&p->studies[i], info), backs = hp_study_backwards(&p->studies[i], info);
        FZ_CHECK(evals >= 0 && backs >= 0 &&
                     (backs == 0 || hp_study_needs_grad(&p->studies[i]) || p->studies[i].kind == HP_STUDY_GATES),
                 "study %d: %ld evaluations, %ld backwards", i, evals, backs);
        if (p->studies[i].kind == HP_STUDY_ITERATIVE && p->studies[i].iterative.rank == HP_RANK_GRADIENT) {
            const struct hp_iterative_schedule g = hp_study_schedule(&p->studies[i], info);
            const long all_go = g.n_units > 0 && g.floor_units == 0;
            FZ_CHECK(backs == evals - 1 - all_go, "study %d: a gradient-ranked curve of %ld points%s has %ld backwards",
                     i, evals, all_go ? " down to none" : "", backs);
        }
        if (p->studies[i].kind != HP_STUDY_ITERATIVE)
            continue;
        struct hp_iterative_schedule s = hp_study_schedule(&p->studies[i], info);
        FZ_CHECK(s.n_units >= 0 && s.per_step >= 1 && s.floor_units >= 0 && s.floor_units <= s.n_units,
                 "study %d: schedule %d units, %d a step, floor %d", i, s.n_units, s.per_step, s.floor_units);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > MAX_INPUT)
        return 0;
    struct hp_plan *p = NULL;
    struct hp_error err = {{0}};
    if (hp_plan_parse("fuzz/plan.yaml", (const char *)data, size, &p, &err) != HP_OK) {
        FZ_CHECK(p == NULL, "a failed parse handed back a plan");
        FZ_CHECK_ERR(err);
        return 0;
    }
    /* every plan has its baseline: the one it lists, where the user placed it, or one put first */
    int n_baselines = 0;
    for (int i = 0; i < p->n_studies; i++)
        n_baselines += p->studies[i].kind == HP_STUDY_BASELINE;
    FZ_CHECK(n_baselines >= 1 && (p->studies[0].kind == HP_STUDY_BASELINE || p->studies[0].line > 0),
             "no baseline (%d studies)", p->n_studies);
    struct hp_model_info a = shape(4, 4, 4), b = shape(3, 8, 2);
    expand(p, &a);
    expand(p, &b);
    hp_plan_free(p);
    return 0;
}
