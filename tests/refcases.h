/*
 * refcases.h -- reference cases files (tests/fixtures/NAME-cases.json, written by tools/gen_NAME_cases.py) checked
 * on both of the evaluator's paths: each fixture's variants of one ablation together on the reuse path
 * (several variant blocks in one pass) and one by one on the plain path. A case's mask must read back as it
 * was written (its canonical text). Shared by test_mlp.c and test_edges.c.
 *
 * Tolerance: |diff| <= 1e-5 * max(1, |ref|) (float32 here, float64 there), as test_reference.c's.
 */
#ifndef HP_REFCASES_H
#define HP_REFCASES_H

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "headprune.h"
#include "testutil.h"

#define TOL 1e-5

/* The metrics of a case the engine must give: the JSON field and the metric. */
static const struct {
    const char *field;
    enum hp_metric m;
} checked[] = {
    {"loss", HP_METRIC_LOSS},           {"kl", HP_METRIC_KL},
    {"logit_diff", HP_METRIC_LOGIT_DIFF}, {"patch_recovery", HP_METRIC_PATCH_RECOVERY},
};

static inline int rc_compare(const cJSON *c, const struct hp_metrics *mt, const char *path)
{
    int bad = 0, n = 0;
    for (size_t k = 0; k < sizeof checked / sizeof checked[0]; k++) {
        const cJSON *v = cJSON_GetObjectItem(c, checked[k].field);
        if (!cJSON_IsNumber(v) || !mt->has[checked[k].m])
            continue;
        n++;
        const double want = v->valuedouble, got = mt->value[checked[k].m];
        if (!(fabs(got - want) <= TOL * fmax(1.0, fabs(want))) && ++bad)
            cr_log_error("%s %s '%s' %s (%s): %s %.9g, reference (float64) %.9g",
                         cJSON_GetObjectItem(c, "fixture")->valuestring, cJSON_GetObjectItem(c, "data")->valuestring,
                         cJSON_GetObjectItem(c, "mask")->valuestring, cJSON_GetObjectItem(c, "ablation")->valuestring,
                         path, checked[k].field, got, want);
    }
    cr_expect(n > 0, "a case with no metric compared: %s", cJSON_GetObjectItem(c, "fixture")->valuestring);
    return bad;
}

/* Every case of fixture fix on data file data, by ablation, on both paths; returns the cases checked. */
static inline int rc_check_group(cJSON *cases, const char *fix, const char *data, int *bad)
{
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/%s", getenv("HP_FIXTURES"), fix);
    snprintf(path, sizeof path, "%s/%s", dir, data);
    struct hp_error err = {0};
    struct hp_model *m;
    struct hp_data *d;
    struct hp_evaluator *ev;
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_data_load(path, 0, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_new(m, d, &ev, &err), HP_OK, "%s", err.msg);
    const struct hp_model_info *in = hp_model_get_info(m);
    int done = 0;
    for (int a = 0; a < HP_ABLATE_COUNT; a++) {
        const cJSON *c;
        struct hp_mask *masks[64];
        const cJSON *of[64];
        int n = 0;
        cJSON_ArrayForEach(c, cases)
        {
            if (strcmp(cJSON_GetObjectItem(c, "fixture")->valuestring, fix) ||
                strcmp(cJSON_GetObjectItem(c, "data")->valuestring, data) ||
                strcmp(cJSON_GetObjectItem(c, "ablation")->valuestring, hp_ablation_name((enum hp_ablation)a)))
                continue;
            cr_assert_lt(n, 64);
            const char *spec = cJSON_GetObjectItem(c, "mask")->valuestring;
            cr_assert_eq(hp_mask_parse(spec, false, in, &masks[n], &err), HP_OK, "%s", err.msg);
            char *back = hp_mask_format(masks[n]);
            cr_expect_str_eq(back, spec, "mask '%s' formats as '%s'", spec, back);
            free(back);
            of[n++] = c;
        }
        if (n == 0)
            continue;
        cr_assert_eq(hp_ablation_bind_data((enum hp_ablation)a, d, &err), HP_OK, "%s", err.msg);
        struct hp_metrics *out[64];
        hp_evaluator_set_plain(ev, false);
        cr_assert_eq(hp_evaluator_run_many(ev, (const struct hp_mask *const *)masks, n, (enum hp_ablation)a, out,
                                           &err),
                     HP_OK, "%s %s: %s", fix, hp_ablation_name((enum hp_ablation)a), err.msg);
        for (int i = 0; i < n; i++) {
            *bad += rc_compare(of[i], out[i], "reuse path, all together");
            hp_metrics_free(out[i]);
        }
        hp_evaluator_set_plain(ev, true);
        for (int i = 0; i < n; i++) {
            struct hp_metrics *mt;
            cr_assert_eq(hp_evaluator_run(ev, masks[i], (enum hp_ablation)a, &mt, &err), HP_OK, "%s", err.msg);
            *bad += rc_compare(of[i], mt, "plain path");
            hp_metrics_free(mt);
            hp_mask_free(masks[i]);
        }
        done += n;
    }
    hp_evaluator_free(ev);
    hp_data_free(d);
    hp_model_close(m);
    return done;
}


/* Every case of the cases file name (in $HP_FIXTURES), each (fixture, data) once in the order the file names it;
 * n_kind[a] counts the cases under ablation a whose mask has kind_text in it (NULL: none counted). Returns the
 * metrics that differ (logged). */
static inline int rc_check_file(const char *name, const char *kind_text, int n_kind[HP_ABLATE_COUNT])
{
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", getenv("HP_FIXTURES"), name);
    char *txt = tu_slurp(p, NULL);
    cJSON *j = cJSON_Parse(txt), *cases = cJSON_GetObjectItem(j, "cases"), *c;
    cr_assert(cJSON_IsArray(cases), "%s: not the tool's output", p);
    int bad = 0, n = 0, n_cases = cJSON_GetArraySize(cases);
    cJSON_ArrayForEach(c, cases)
    {
        const char *fix = cJSON_GetObjectItem(c, "fixture")->valuestring,
                   *data = cJSON_GetObjectItem(c, "data")->valuestring;
        enum hp_ablation a;
        cr_assert(hp_ablation_parse(cJSON_GetObjectItem(c, "ablation")->valuestring, &a));
        if (kind_text)
            n_kind[a] += strstr(cJSON_GetObjectItem(c, "mask")->valuestring, kind_text) != NULL;
        bool seen = false;
        for (const cJSON *e = cases->child; e != c && !seen; e = e->next)
            seen = !strcmp(cJSON_GetObjectItem(e, "fixture")->valuestring, fix) &&
                   !strcmp(cJSON_GetObjectItem(e, "data")->valuestring, data);
        if (!seen)
            n += rc_check_group(cases, fix, data, &bad);
    }
    cr_assert_eq(n, n_cases, "%s: %d of %d cases checked", name, n, n_cases);
    cJSON_Delete(j);
    free(txt);
    return bad;
}

#endif
