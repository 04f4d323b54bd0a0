/*
 * test_mlp.c -- MLP blocks as units ("mlp:L") against Hugging Face transformers 4.x in float64.
 *
 * tests/fixtures/mlp-cases.json (tools/gen_mlp_cases.py) holds, for a fixture of every family headprune
 * loads, transformers' metrics with layer L's MLP block output into the residual stream replaced (forward
 * hooks): zero, its mean over the held-out set, its mean at each position, and on task rows its value on the
 * corrupt prompt (resample), alone and beside a head. Every case is evaluated here on both paths: each
 * fixture's variants of one ablation together on the reuse path (several variant blocks in one pass, the
 * MLP's gate per block) and one by one on the plain path. The masks' text must read back as it was written.
 *
 * Tolerance: |diff| <= 1e-5 * max(1, |ref|) (float32 here, float64 there), as test_reference.c's.
 */
#define _DEFAULT_SOURCE /* mkdtemp, in testutil.h */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "headprune.h"
#include "refcases.h"
#include "testutil.h"
#include <unistd.h>

Test(mlp, every_family_matches_transformers_float64, .timeout = 600)
{
    int n_mlp_kinds[HP_ABLATE_COUNT] = {0};
    const int bad = rc_check_file("mlp-cases.json", "mlp:", n_mlp_kinds);
    for (int a = 0; a < HP_ABLATE_COUNT; a++)
        if (a != HP_ABLATE_DENOISE) /* denoise is resample on swapped data: the same replacement */
            cr_expect(n_mlp_kinds[a] > 0, "no MLP case under %s", hp_ablation_name((enum hp_ablation)a));
    cr_assert_eq(bad, 0, "%d metrics differ from transformers' (above)", bad);
}

/* A mask of MLPs reads, formats and counts as the docs say; a head mask's text is what it was. */
Test(mlp, mask_text_and_counts)
{
    struct hp_model_info in = {.n_layers = 3, .n_heads = 4, .n_kv_heads = 2, .d_head = 2, .d_model = 8};
    struct hp_error err = {0};
    struct hp_mask *m;
    cr_assert_eq(hp_mask_parse(" mlp:2 ,0.1, 1.*,mlp:0", false, &in, &m, &err), HP_OK, "%s", err.msg);
    char *s = hp_mask_format(m);
    cr_assert_str_eq(s, "0.1,mlp:0,1.*,mlp:2");
    cr_assert_eq(hp_mask_count_ablated(m), 5);
    cr_assert_eq(hp_mask_count_mlps(m), 2);
    cr_assert_eq(hp_mask_first_changed(m, 3), 0);
    free(s);
    hp_mask_free(m);
    cr_assert_eq(hp_mask_parse("mlp:1", false, &in, &m, &err), HP_OK);
    cr_assert_eq(hp_mask_first_changed(m, 3), 1, "an MLP's layer is where the variant starts to differ");
    cr_assert(hp_mask_unit_ablated(m, &in, HP_UNIT_MLP, 1, 0));
    hp_mask_free(m);
    /* keep: heads named alone leave every MLP; an MLP named takes the others away */
    cr_assert_eq(hp_mask_parse("0.1", true, &in, &m, &err), HP_OK);
    cr_assert_eq(hp_mask_count_mlps(m), 0);
    hp_mask_free(m);
    cr_assert_eq(hp_mask_parse("mlp:1,0.*", true, &in, &m, &err), HP_OK);
    s = hp_mask_format(m);
    cr_assert_str_eq(s, "mlp:0,1.*,2.*,mlp:2");
    free(s);
    hp_mask_free(m);
    static const char *bad[] = {"mlp:3", "mlp:", "mlp:1.0", "mlp:x", "mlp:-1", "kv:mlp:1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_neq(hp_mask_parse(bad[i], false, &in, &m, &err), HP_OK, "'%s' was accepted", bad[i]);
        cr_assert(strstr(err.msg, bad[i]) && !strchr(err.msg, '\n'), "'%s': %s", bad[i], err.msg);
    }
    char label[32];
    hp_unit_label(label, sizeof label, HP_UNIT_MLP, 2, 0);
    cr_assert_str_eq(label, "mlp:2");
    cr_assert_str_eq(hp_unit_name(HP_UNIT_MLP, true), "MLPs");
    cr_assert_eq(hp_unit_count(&in, HP_UNIT_MLP), 1);
}

/* What MLPs are not for is refused in one line: a pruned checkpoint without one (naming it), an MLP patched at one
 * position (and a gradient at one position). */
Test(mlp, what_an_mlp_is_not_for_is_refused_in_one_line)
{
    char dir[1024], data[1200];
    snprintf(dir, sizeof dir, "%s/llama-gqa", getenv("HP_FIXTURES"));
    snprintf(data, sizeof data, "%s/llama-gqa/data.npy", getenv("HP_FIXTURES"));
    struct hp_error err = {0};
    struct hp_model *m;
    struct hp_data *d;
    struct hp_evaluator *ev;
    struct hp_mask *mask;
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_data_load(data, 0, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_new(m, d, &ev, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_mask_parse("0.1,mlp:1", false, hp_model_get_info(m), &mask, &err), HP_OK, "%s", err.msg);

    struct hp_export_info xi;
    char out[64];
    tu_mkdtemp(out, sizeof out, "mlp-export");
    char target[128];
    snprintf(target, sizeof target, "%s/pruned", out);
    cr_assert_eq(hp_model_export(m, mask, target, &xi, &err), HP_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "mlp:1") && !strchr(err.msg, '\n'), "%s", err.msg);
    cr_assert_neq(access(target, F_OK), 0, "a checkpoint was written");
    tu_rmrf(out);

    const int HH = hp_model_get_info(m)->n_layers * hp_model_get_info(m)->n_heads;
    double *g = calloc((size_t)HH, sizeof *g);
    mask->pos = 2;
    cr_assert_eq(hp_evaluator_grad(ev, HP_METRIC_LOSS, mask, HP_ABLATE_ZERO, g, NULL, NULL, &err), HP_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "position 2") && !strchr(err.msg, '\n'), "%s", err.msg);
    mask->pos = -1;
    free(g);

    struct hp_metrics *mt;
    mask->pos = 2;
    cr_assert_neq(hp_evaluator_run(ev, mask, HP_ABLATE_ZERO, &mt, &err), HP_OK);
    cr_assert(strstr(err.msg, "MLP") && !strchr(err.msg, '\n'), "%s", err.msg);
    mask->pos = -1;

    /* the same mask evaluates */
    struct hp_metrics *ok;
    cr_assert_eq(hp_evaluator_run(ev, mask, HP_ABLATE_ZERO, &ok, &err), HP_OK, "%s", err.msg);
    cr_assert(isfinite(ok->loss));
    hp_metrics_free(ok);
    hp_mask_free(mask);
    hp_evaluator_free(ev);
    hp_data_free(d);
    hp_model_close(m);
}

// --- gradients at the MLP blocks' gates ------------------------------------------------

/* A JSON array of numbers into out. */
static void flat_one(const cJSON *a, double *out)
{
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, a)
    out[i++] = v->valuedouble;
}

/* A nested JSON array (rows of cols numbers) into out, row-major. */
static void flat(const cJSON *rows, int cols, double *out)
{
    int r = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, rows)
    {
        for (int c = 0; c < cols; c++)
            out[r * cols + c] = cJSON_GetArrayItem(row, c)->valuedouble;
        r++;
    }
}

/* |got - want| of each of n entries within tol of the largest |want|; logs and counts the misses. */
static int near_flat(const char *what, const char *cs, const double *got, const double *want, int n, double tol)
{
    double wmax = 0;
    for (int i = 0; i < n; i++)
        wmax = fmax(wmax, fabs(want[i]));
    int bad = 0;
    for (int i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= tol * fmax(wmax, 1e-12)) && bad++ < 4)
            cr_log_error("%s: %s[%d] = %.9g, torch %.9g (largest %.3g)", cs, what, i, got[i], want[i], wmax);
    return bad;
}

Test(mlp, gate_gradients_match_torch_autograd, .timeout = 900)
{
    char p[1200];
    snprintf(p, sizeof p, "%s/mlp-grad-cases.json", getenv("HP_FIXTURES"));
    char *txt = tu_slurp(p, NULL);
    cJSON *j = cJSON_Parse(txt), *cases = cJSON_GetObjectItem(j, "cases"), *c;
    cr_assert(cJSON_IsArray(cases) && cJSON_GetArraySize(cases) > 0, "%s: not the tool's output", p);
    int bad = 0, n = 0, with_mlp_mask = 0;
    char open_fix[256] = "", open_data[256] = "";
    struct hp_model *m = NULL;
    struct hp_data *d = NULL;
    struct hp_evaluator *ev = NULL;
    enum hp_ablation bound = HP_ABLATE_ZERO;
    cJSON_ArrayForEach(c, cases)
    {
        const char *fix = cJSON_GetObjectItem(c, "fixture")->valuestring,
                   *data = cJSON_GetObjectItem(c, "data")->valuestring,
                   *spec = cJSON_GetObjectItem(c, "mask")->valuestring;
        enum hp_ablation abl;
        enum hp_metric metric;
        cr_assert(hp_ablation_parse(cJSON_GetObjectItem(c, "ablation")->valuestring, &abl));
        cr_assert(hp_metric_parse(cJSON_GetObjectItem(c, "metric")->valuestring, &metric));
        struct hp_error err = {0};
        if (strcmp(fix, open_fix) || strcmp(data, open_data) || abl != bound) {
            hp_evaluator_free(ev);
            hp_data_free(d);
            hp_model_close(m);
            char dir[1024], path[1300];
            snprintf(dir, sizeof dir, "%s/%s", getenv("HP_FIXTURES"), fix);
            snprintf(path, sizeof path, "%s/%s", dir, data);
            cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
            cr_assert_eq(hp_data_load(path, 0, &d, &err), HP_OK, "%s", err.msg);
            cr_assert_eq(hp_ablation_bind_data(abl, d, &err), HP_OK, "%s", err.msg);
            cr_assert_eq(hp_evaluator_new(m, d, &ev, &err), HP_OK, "%s", err.msg);
            snprintf(open_fix, sizeof open_fix, "%s", fix);
            snprintf(open_data, sizeof open_data, "%s", data);
            bound = abl;
        }
        const struct hp_model_info *in = hp_model_get_info(m);
        const int L = in->n_layers, H = in->n_heads, S = d->n_seqs;
        struct hp_mask *mask;
        cr_assert_eq(hp_mask_parse(spec, false, in, &mask, &err), HP_OK, "%s", err.msg);
        with_mlp_mask += hp_mask_has_mlp(mask);
        double *grad = malloc(sizeof(double) * L * H), *atp = malloc(sizeof(double) * L * H),
               *mg = malloc(sizeof(double) * L), *ma = malloc(sizeof(double) * L),
               *ms = malloc(sizeof(double) * S * L), *want = malloc(sizeof(double) * (size_t)S * L * H), value;
        const struct hp_grad_out out = {
            .grad = grad, .atp = atp, .mlp_grad = mg, .mlp_atp = ma, .mlp_seq_grad = ms};
        cr_assert_eq(hp_evaluator_grad_units(ev, metric, mask, abl, 0, &out, &value, &err), HP_OK, "%s %s: %s", fix,
                     spec, err.msg);
        char cs[256];
        snprintf(cs, sizeof cs, "%s %s '%s' %s", fix, hp_metric_name(metric), spec, hp_ablation_name(abl));
        const double wv = cJSON_GetObjectItem(c, "value")->valuedouble;
        if (!(fabs(value - wv) <= 1e-5 * fmax(1, fabs(wv))) && ++bad)
            cr_log_error("%s: value %.9g, torch %.9g", cs, value, wv);
        flat_one(cJSON_GetObjectItem(c, "mlp_grad"), want);
        bad += near_flat("mlp_grad", cs, mg, want, L, 1e-4);
        flat_one(cJSON_GetObjectItem(c, "mlp_atp"), want);
        bad += near_flat("mlp_atp", cs, ma, want, L, 1e-4);
        flat(cJSON_GetObjectItem(c, "mlp_seq_grad"), L, want);
        bad += near_flat("mlp_seq_grad", cs, ms, want, S * L, 1e-4);
        flat(cJSON_GetObjectItem(c, "grad"), H, want);
        bad += near_flat("grad", cs, grad, want, L * H, 1e-4);
        flat(cJSON_GetObjectItem(c, "atp"), H, want);
        bad += near_flat("atp", cs, atp, want, L * H, 1e-4);
        free(grad), free(atp), free(mg), free(ma), free(ms), free(want);
        hp_mask_free(mask);
        n++;
    }
    hp_evaluator_free(ev);
    hp_data_free(d);
    hp_model_close(m);
    cr_assert_gt(with_mlp_mask, 0, "no case at a mask that ablates an MLP");
    cr_assert_eq(bad, 0, "%d of %d cases' numbers differ from torch (above)", bad, n);
    cJSON_Delete(j);
    free(txt);
}

/* A second code path: each MLP gate's gradient against finite differences of the evaluator's own losses at
 * fractional gates 1 +- eps (a fractional gate scales the MLP's output, as a head's), and 0 +- eps for an MLP at 0
 * under zero ablation (g o on both sides). */
Test(mlp, gate_gradients_match_finite_differences)
{
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/llama-gqa", getenv("HP_FIXTURES"));
    snprintf(path, sizeof path, "%s/llama-gqa/data.npy", getenv("HP_FIXTURES"));
    struct hp_error err = {0};
    struct hp_model *m;
    struct hp_data *d;
    struct hp_evaluator *ev;
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_data_load(path, 0, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_new(m, d, &ev, &err), HP_OK, "%s", err.msg);
    const struct hp_model_info *in = hp_model_get_info(m);
    const int L = in->n_layers, H = in->n_heads;
    static const enum hp_ablation abls[] = {HP_ABLATE_ZERO, HP_ABLATE_MEAN};
    static const char *const specs[] = {"", "mlp:1,0.2"};
    /* central differences' truncation error is O(eps^2): at 1e-2 one case (mean, mlp:0 beside an ablated MLP)
     * was 1.1e-4 off, at 4e-3 it is within the tolerance, as eps^2 predicts; float32 losses' rounding stays
     * below it down to about 1e-3 */
    const double eps = 4e-3;
    for (int a = 0; a < 2; a++)
        for (int k = 0; k < 2; k++) {
            struct hp_mask *mask;
            cr_assert_eq(hp_mask_parse(specs[k], false, in, &mask, &err), HP_OK, "%s", err.msg);
            double grad[L * H], mg[L], value;
            const struct hp_grad_out out = {.grad = grad, .mlp_grad = mg};
            cr_assert_eq(hp_evaluator_grad_units(ev, HP_METRIC_LOSS, mask, abls[a], 0, &out, &value, &err), HP_OK,
                         "%s", err.msg);
            double gmax = 0;
            for (int l = 0; l < L; l++)
                gmax = fmax(gmax, fabs(mg[l]));
            for (int l = 0; l < L; l++) {
                const float g0 = mask->mlp[l];
                if (g0 == 0.0f && abls[a] != HP_ABLATE_ZERO)
                    continue; /* at 0 the forward jumps to the replacement, near it it scales: no derivative there */
                double lo, hi;
                struct hp_metrics *mt;
                mask->mlp[l] = g0 + (float)eps;
                cr_assert_eq(hp_evaluator_run(ev, mask, abls[a], &mt, &err), HP_OK, "%s", err.msg);
                hi = mt->loss;
                hp_metrics_free(mt);
                mask->mlp[l] = g0 - (float)eps;
                cr_assert_eq(hp_evaluator_run(ev, mask, abls[a], &mt, &err), HP_OK, "%s", err.msg);
                lo = mt->loss;
                hp_metrics_free(mt);
                mask->mlp[l] = g0;
                const double fd = (hi - lo) / (2 * eps);
                cr_expect(fabs(fd - mg[l]) <= 1e-3 * fmax(gmax, 1e-6), "%s '%s' mlp:%d at gate %g: gradient %.7g, finite "
                          "differences %.7g", hp_ablation_name(abls[a]), specs[k], l, (double)g0, mg[l], fd);
            }
            hp_mask_free(mask);
        }
    hp_evaluator_free(ev);
    hp_data_free(d);
    hp_model_close(m);
}
