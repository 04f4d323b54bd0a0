/*
 * test_grad.c -- the gradient of the loss at the head gates (hp_evaluator_grad).
 *
 * Two independent references:
 *  - Hugging Face transformers 4.x with torch autograd (tools/gen_grad_fixtures.py
 *    writes tests/fixtures/<name>/grad.json): HF's head_mask with requires_grad for
 *    GPT-2 and BERT, a gate on the input of o_proj for Llama/Qwen2, at the unmasked
 *    model, under a partial mask, at fractional gates and under mean ablation;
 *    every gradient agrees within GRAD_TOL relative to the case's largest one;
 *  - central finite differences of the engine's own loss in each gate
 *    (hp_evaluator_run at g +- FD_EPS): float32 losses differenced over 2 * 1e-2
 *    leave about 1e-5 of rounding, so these agree within FD_TOL of the largest.
 * Per-sequence shares (hp_evaluator_grad_seq) against torch's, one backward per
 * sequence (seq_grad in grad.json), and Michel's importance (hp_importance) of
 * query heads and KV groups, both normalisations, against the same sums worked
 * here directly from torch's shares.
 * The reverse pass reads the activations the forward kept, or makes them
 * again from each layer's input when its memory budget does not hold them:
 * the two (and a mix) give the same gradients, a second code path each.
 * And the refusals: an encoder without a loss.
 */
#define _DEFAULT_SOURCE /* mkdtemp, in testutil.h */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backward.h"
#include "eval_priv.h"
#include "grad_priv.h"
#include "headprune.h"
#include "metric.h"
#include "testutil.h"

#define GRAD_TOL 1e-4
#define FD_EPS 1e-2
#define FD_TOL 1e-3

struct fix {
    struct hp_model *m;
    struct hp_data *d;
    struct hp_evaluator *ev;
    const struct hp_model_info *in;
};

static void fix_open(struct fix *f, const char *name, const char *data)
{
    const char *root = getenv("HP_FIXTURES");
    cr_assert(root, "HP_FIXTURES not set (run through meson test)");
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s%s%s", name[0] == '/' ? "" : root, name[0] == '/' ? "" : "/", name);
    snprintf(path, sizeof path, "%s/%s", dir, data);
    struct hp_error err = {0};
    cr_assert_eq(hp_model_open(dir, &f->m, &err), HP_OK, "%s", err.msg);
    f->in = hp_model_get_info(f->m);
    cr_assert_eq(hp_data_load(path, 0, &f->d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_new(f->m, f->d, &f->ev, &err), HP_OK, "%s", err.msg);
    hp_evaluator_keep_grad_metrics(f->ev, true);
}

/* ev's gradient state (grad_priv.h), made now if no pass has made it yet. */
static struct hp_grad_state *grad_state(struct hp_evaluator *ev)
{
    struct hp_grad_state *gs = hp_grad_state_get(ev);
    cr_assert(gs, "out of memory for the gradient state");
    return gs;
}

static void fix_close(struct fix *f)
{
    hp_evaluator_free(f->ev);
    hp_data_free(f->d);
    hp_model_close(f->m);
}

/* The metric as damage, as hp_evaluator_run gives it: loss, KL, or 1 - cos. */
static double loss_at(struct fix *f, enum hp_metric metric, const struct hp_mask *mask, enum hp_ablation abl)
{
    struct hp_error err = {0};
    struct hp_metrics *mt;
    cr_assert_eq(hp_evaluator_run(f->ev, mask, abl, &mt, &err), HP_OK, "%s", err.msg);
    double l = metric == HP_METRIC_KL ? mt->kl : metric == HP_METRIC_COS ? 1 - mt->cos : mt->loss;
    hp_metrics_free(mt);
    return l;
}

/* The gate of every head set from gates (n_layers * n_heads) or all 1. */
static struct hp_mask *mask_of(const struct fix *f, const float *gates)
{
    struct hp_mask *mk = hp_mask_new(f->in->n_layers, f->in->n_heads);
    for (int i = 0; gates && i < f->in->n_layers * f->in->n_heads; i++)
        mk->gate[i] = gates[i];
    return mk;
}

/* The engine's gradients of metric against central differences of its own metric, every head. */
static void check_fd_step(const char *name, const char *data, enum hp_metric metric, const float *gates,
                          enum hp_ablation abl, double step)
{
    struct fix f;
    fix_open(&f, name, data);
    const int HH = f.in->n_layers * f.in->n_heads;
    struct hp_mask *mk = mask_of(&f, gates);
    double grad[HH], loss;
    struct hp_error err = {0};
    cr_assert_eq(hp_evaluator_grad(f.ev, metric, mk, abl, grad, NULL, &loss, &err), HP_OK, "%s", err.msg);
    double l0 = loss_at(&f, metric, mk, abl);
    cr_expect(fabs(loss - l0) <= 1e-6 * fmax(1, fabs(l0)), "%s: %s %.9g, evaluator %.9g", name, hp_metric_name(metric),
              loss, l0);
    double fd[HH], gmax = 0, emax = 0;
    /* a mean-ablated head at 0 has no difference quotient: the forward jumps to its mean there */
    bool skip[HH];
    for (int i = 0; i < HH; i++)
        skip[i] = abl != HP_ABLATE_ZERO && mk->gate[i] == 0.0f;
    for (int i = 0; i < HH; i++) {
        if (skip[i])
            continue;
        /* Richardson: (4 D(eps / 2) - D(eps)) / 3 cancels the eps^2 term of the central difference */
        double dd[2];
        for (int k = 0; k < 2; k++) {
            const float g0 = mk->gate[i], e = (float)(step / (1 + k));
            mk->gate[i] = g0 + e;
            double lp = loss_at(&f, metric, mk, abl);
            mk->gate[i] = g0 - e;
            double lm = loss_at(&f, metric, mk, abl);
            mk->gate[i] = g0;
            dd[k] = (lp - lm) / (double)((g0 + e) - (g0 - e));
        }
        fd[i] = (4 * dd[1] - dd[0]) / 3;
        gmax = fmax(gmax, fabs(fd[i]));
    }
    int bad = 0;
    for (int i = 0; i < HH; i++) {
        if (skip[i])
            continue;
        double e = fabs(grad[i] - fd[i]);
        emax = fmax(emax, e);
        if (e > FD_TOL * gmax && bad++ < 5)
            cr_log_error("%s: head %d.%d: grad %.8g, finite differences %.8g", name, i / f.in->n_heads,
                         i % f.in->n_heads, grad[i], fd[i]);
    }
    cr_log_info("%s (%s, %s): max |grad - fd| = %.3g of max |fd| %.3g (%.2g relative)", name, hp_metric_name(metric),
                hp_ablation_name(abl), emax, gmax, emax / gmax);
    cr_expect_eq(bad, 0, "%s: %d gradients differ from finite differences by more than %g of the largest", name, bad,
                 FD_TOL);
    hp_mask_free(mk);
    fix_close(&f);
}

static void check_fd_dir(const char *name, const char *data, enum hp_metric metric, const float *gates,
                         enum hp_ablation abl)
{
    check_fd_step(name, data, metric, gates, abl, FD_EPS);
}

static void check_fd(const char *name, const char *data, const float *gates, enum hp_ablation abl)
{
    check_fd_dir(name, data, HP_METRIC_LOSS, gates, abl);
}

/* Importance of every unit worked directly from torch's shares want (n_seqs, L, H), as Michel et al. define it. */
static void importance_ref(cJSON *want, int S, const struct hp_model_info *in, bool kv, bool by_layer, double *out)
{
    const int L = in->n_layers, H = in->n_heads, per = kv ? H / in->n_kv_heads : 1, U = H / per;
    for (int l = 0; l < L; l++) {
        double ss = 0;
        for (int u = 0; u < U; u++) {
            double v = 0;
            for (int s = 0; s < S; s++) {
                double g = 0;
                for (int h = u * per; h < (u + 1) * per; h++)
                    g += cJSON_GetArrayItem(cJSON_GetArrayItem(cJSON_GetArrayItem(want, s), l), h)->valuedouble;
                v += fabs(g);
            }
            out[l * U + u] = v;
            ss += v * v;
        }
        for (int u = 0; by_layer && ss > 0 && u < U; u++)
            out[l * U + u] /= sqrt(ss);
    }
}

/* A case's per-sequence shares and the importance made of them against torch; the number of mismatches. */
static int check_seq(struct fix *f, const char *name, const char *cs, cJSON *c, enum hp_metric metric,
                     const struct hp_mask *mk, enum hp_ablation abl, const double *grad)
{
    const int L = f->in->n_layers, H = f->in->n_heads, S = f->d->n_seqs;
    cJSON *want = cJSON_GetObjectItem(c, "seq_grad");
    cr_assert(want && cJSON_GetArraySize(want) == S, "%s/%s: seq_grad of %d sequences wanted", name, cs, S);
    double *sg = malloc(sizeof *sg * (size_t)S * L * H), g2[L * H], atp2[L * H], loss;
    struct hp_error err = {0};
    cr_assert_eq(hp_evaluator_grad_seq(f->ev, metric, mk, abl, g2, atp2, sg, &loss, &err), HP_OK, "%s", err.msg);
    int bad = 0;
    double gmax = 0, emax = 0;
    for (int i = 0; i < S * L * H; i++)
        gmax = fmax(gmax, fabs(cJSON_GetArrayItem(cJSON_GetArrayItem(cJSON_GetArrayItem(want, i / (L * H)),
                                                                      i / H % L), i % H)->valuedouble));
    for (int i = 0; i < S * L * H; i++) {
        double w = cJSON_GetArrayItem(cJSON_GetArrayItem(cJSON_GetArrayItem(want, i / (L * H)), i / H % L),
                                      i % H)->valuedouble,
               e = fabs(sg[i] - w);
        emax = fmax(emax, e);
        if (e > GRAD_TOL * gmax && bad++ < 8)
            cr_log_error("%s/%s: seq %d head %d.%d share %.9g, torch %.9g", name, cs, i / (L * H), i / H % L, i % H,
                         sg[i], w);
    }
    cr_log_info("%s/%s: max |seq_grad - torch| = %.3g of max %.3g", name, cs, emax, gmax);
    for (int i = 0; i < L * H; i++) { /* the shares add up to the gradient hp_evaluator_grad gives */
        double sum = 0;
        for (int s = 0; s < S; s++)
            sum += sg[(size_t)s * L * H + i];
        if (fabs(sum - grad[i]) > 1e-9 * fmax(1, fabs(grad[i])) || g2[i] != grad[i])
            bad++, cr_log_error("%s/%s: head %d: shares sum to %.12g, grad %.12g", name, cs, i, sum, grad[i]);
    }
    for (int kv = 0; kv < 2; kv++)
        for (int nz = 0; nz < 2; nz++) {
            const int U = hp_unit_count(f->in, kv);
            double raw[L * U], got[L * U], ref[L * U], rmax = 0;
            hp_importance(sg, S, f->in, kv, nz ? HP_NORMALIZE_NONE : HP_NORMALIZE_LAYER, raw, got);
            importance_ref(want, S, f->in, kv, !nz, ref);
            for (int i = 0; i < L * U; i++)
                rmax = fmax(rmax, fabs(ref[i]));
            for (int i = 0; i < L * U; i++)
                if (fabs(got[i] - ref[i]) > GRAD_TOL * rmax && bad++ < 8)
                    cr_log_error("%s/%s: importance (%s, normalize %s) of %d.%d = %.9g, from torch %.9g", name, cs,
                                 hp_unit_name(kv, false), nz ? "none" : "layer", i / U, i % U, got[i], ref[i]);
        }
    free(sg);
    return bad;
}

/* Every case of <name>/grad.json: its metric's value, grad, atp and per-sequence shares against torch autograd. */
static void check_torch(const char *name)
{
    const char *root = getenv("HP_FIXTURES");
    cr_assert(root, "HP_FIXTURES not set (run through meson test)");
    char path[1200];
    snprintf(path, sizeof path, "%s/%s/grad.json", root, name);
    char *txt = tu_slurp(path, NULL);
    cJSON *ref = cJSON_Parse(txt);
    cr_assert(ref, "%s: bad JSON", path);
    struct fix f;
    fix_open(&f, name, cJSON_GetObjectItem(ref, "data")->valuestring);
    const int L = f.in->n_layers, H = f.in->n_heads;
    cJSON *c;
    int bad = 0, n_cases = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(ref, "cases")) {
        const char *cs = cJSON_GetObjectItem(c, "name")->valuestring;
        enum hp_ablation abl;
        cr_assert(hp_ablation_parse(cJSON_GetObjectItem(c, "ablation")->valuestring, &abl));
        enum hp_metric metric;
        cr_assert(hp_metric_parse(cJSON_GetObjectItem(c, "metric")->valuestring, &metric));
        struct hp_mask *mk = hp_mask_new(L, H);
        cJSON *gates = cJSON_GetObjectItem(c, "gates"), *wg = cJSON_GetObjectItem(c, "grad"),
              *wa = cJSON_GetObjectItem(c, "atp");
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++)
                mk->gate[l * H + h] = (float)cJSON_GetArrayItem(cJSON_GetArrayItem(gates, l), h)->valuedouble;
        double grad[L * H], atp[L * H], loss;
        struct hp_error err = {0};
        cr_assert_eq(hp_evaluator_grad(f.ev, metric, mk, abl, grad, atp, &loss, &err), HP_OK, "%s", err.msg);
        bad += check_seq(&f, name, cs, c, metric, mk, abl, grad);
        double want_loss = cJSON_GetObjectItem(c, "value")->valuedouble;
        if (fabs(loss - want_loss) > 1e-5 * fmax(1, fabs(want_loss))) {
            cr_log_error("%s/%s: %s %.9g, torch %.9g", name, cs, hp_metric_name(metric), loss, want_loss);
            bad++;
        }
        for (int k = 0; k < 2; k++) {
            const double *got = k ? atp : grad;
            cJSON *want = k ? wa : wg;
            double gmax = 0, emax = 0;
            for (int i = 0; i < L * H; i++)
                gmax = fmax(gmax, fabs(cJSON_GetArrayItem(cJSON_GetArrayItem(want, i / H), i % H)->valuedouble));
            for (int i = 0; i < L * H; i++) {
                double w = cJSON_GetArrayItem(cJSON_GetArrayItem(want, i / H), i % H)->valuedouble,
                       e = fabs(got[i] - w);
                emax = fmax(emax, e);
                if (e > GRAD_TOL * gmax && bad++ < 8)
                    cr_log_error("%s/%s: %s of head %d.%d = %.9g, torch %.9g", name, cs, k ? "atp" : "grad", i / H,
                                 i % H, got[i], w);
            }
            cr_log_info("%s/%s (%s, %s): max |%s - torch| = %.3g of max |torch| %.3g (%.2g relative)", name, cs,
                        hp_metric_name(metric), hp_ablation_name(abl), k ? "atp" : "grad", emax, gmax,
                        gmax > 0 ? emax / gmax : 0);
        }
        hp_mask_free(mk);
        n_cases++;
    }
    cr_assert_gt(n_cases, 0, "%s: no cases", path);
    cr_expect_eq(bad, 0, "%s: %d values differ from torch by more than %g of the case's largest", name, bad, GRAD_TOL);
    cJSON_Delete(ref);
    free(txt);
    fix_close(&f);
}

Test(grad, gpt2_matches_torch) { check_torch("gpt2-tiny"); }
Test(grad, gpt2_vocabulary_of_three_blocks_matches_torch) { check_torch("gpt2-vocab"); }
Test(grad, llama_gqa_matches_torch) { check_torch("llama-gqa"); }
Test(grad, qwen2_bias_matches_torch) { check_torch("qwen2-bias"); }
Test(grad, qwen3_qk_norms_match_torch) { check_torch("qwen3-qknorm"); }
Test(grad, phi3_fused_projections_match_torch) { check_torch("phi3-fused"); }
Test(grad, gpt_neox_parallel_matches_torch) { check_torch("neox-parallel"); }
Test(grad, gpt_neox_sequential_matches_torch) { check_torch("neox-sequential"); }
Test(grad, olmo2_post_norms_match_torch) { check_torch("olmo2-post-norms"); }
Test(grad, gemma2_soft_caps_match_torch) { check_torch("gemma2-softcap"); }
Test(grad, gemma3_local_rotary_matches_torch) { check_torch("gemma3-local"); }
Test(grad, gpt2_untied_lm_head_matches_torch) { check_torch("gpt2-untied"); }
Test(grad, llama_mlp_bias_matches_torch) { check_torch("llama-mlp-bias"); }
Test(grad, stories260K_matches_torch) { check_torch("stories260K"); }
Test(grad, bert_mlm_matches_torch) { check_torch("bert-mlm"); }
Test(grad, bert_classifier_matches_torch) { check_torch("bert-cls"); }
Test(grad, bert_encoder_cos_matches_torch) { check_torch("bert-encoder"); }

Test(grad, gpt2_matches_finite_differences)
{
    check_fd("gpt2-tiny", "data.npy", NULL, HP_ABLATE_ZERO);
    float g[12] = {1, 0, 1, 1, 0.5f, 1, 1, 0.25f, 1, 1, 0, 1};
    check_fd("gpt2-tiny", "data.npy", g, HP_ABLATE_ZERO);
}

Test(grad, llama_matches_finite_differences)
{
    check_fd("llama-gqa", "data.npy", NULL, HP_ABLATE_ZERO);
    float g[12] = {1, 0, 1, 1, 0.5f, 1, 1, 0.25f, 1, 1, 0, 1};
    check_fd("llama-gqa", "data.npy", g, HP_ABLATE_ZERO);
}

Test(grad, qwen2_matches_finite_differences)
{
    check_fd("qwen2-bias", "data.npy", NULL, HP_ABLATE_ZERO);
}

Test(grad, qwen3_matches_finite_differences)
{
    check_fd("qwen3-qknorm", "data.npy", NULL, HP_ABLATE_ZERO);
    float g[12] = {1, 0, 1, 1, 0.5f, 1, 1, 0.25f, 1, 1, 0, 1};
    check_fd("qwen3-qknorm", "data.npy", g, HP_ABLATE_ZERO);
}

Test(grad, phi3_matches_finite_differences)
{
    float g[12] = {1, 0, 1, 1, 0.5f, 1, 1, 0.25f, 1, 1, 0, 1};
    check_fd("phi3-fused", "data.npy", g, HP_ABLATE_ZERO);
}

Test(grad, olmo2_matches_finite_differences)
{
    float g[12] = {1, 0, 1, 1, 0.5f, 1, 1, 0.25f, 1, 1, 0, 1};
    check_fd("olmo2-post-norms", "data.npy", NULL, HP_ABLATE_ZERO);
    check_fd("olmo2-post-norms", "data.npy", g, HP_ABLATE_ZERO);
}

/* through both soft caps (scores 2, logits 3: well into tanh's bend), the alternate window, the local rotary.
 * The caps bend the loss enough that Richardson's remainder at FD_EPS is 1 % of head 0.1's gradient under g;
 * at a fifth of the step it is below the losses' rounding (measured: 6e-4 of the largest, against 5e-3 at FD_EPS) */
Test(grad, gemma_matches_finite_differences)
{
    float g[12] = {1, 0, 1, 1, 0.5f, 1, 1, 0.25f, 1, 1, 0, 1};
    check_fd_step("gemma2-softcap", "data.npy", HP_METRIC_LOSS, NULL, HP_ABLATE_ZERO, FD_EPS / 5);
    check_fd_step("gemma2-softcap", "data.npy", HP_METRIC_LOSS, g, HP_ABLATE_ZERO, FD_EPS / 5);
    check_fd("gemma3-local", "data.npy", g, HP_ABLATE_ZERO);
}

Test(grad, gpt_neox_matches_finite_differences)
{
    float g[12] = {1, 0, 1, 1, 0.5f, 1, 1, 0.25f, 1, 1, 0, 1};
    check_fd("neox-parallel", "data.npy", NULL, HP_ABLATE_ZERO);
    check_fd("neox-parallel", "data.npy", g, HP_ABLATE_ZERO);
    check_fd("neox-sequential", "data.npy", g, HP_ABLATE_ZERO);
}

Test(grad, bert_mlm_matches_finite_differences)
{
    check_fd("bert-mlm", "data.jsonl", NULL, HP_ABLATE_ZERO);
    float g[8] = {1, 0, 1, 0.5f, 1, 1, 0.25f, 1};
    check_fd("bert-mlm", "data.jsonl", g, HP_ABLATE_ZERO);
}

Test(grad, bert_classifier_matches_finite_differences)
{
    check_fd("bert-cls", "data.jsonl", NULL, HP_ABLATE_ZERO);
}

/* The reverse pass through a sliding window and scaled rotary embeddings (their forward: test_reference.c). */
Test(grad, window_and_rope_scaling_match_finite_differences)
{
    float g[8] = {1, 0, 1, 0.5f, 1, 1, 0.25f, 1};
    check_fd("mistral-window", "data.npy", g, HP_ABLATE_ZERO);
    check_fd("llama-rope-llama3", "data.npy", g, HP_ABLATE_ZERO);
    check_fd("llama-rope-dynamic", "data.npy", NULL, HP_ABLATE_ZERO);
}

Test(grad, kl_matches_finite_differences)
{
    float g[12] = {1, 0, 1, 1, 0.5f, 1, 1, 0.25f, 1, 1, 0, 1}, gb[8] = {1, 0, 1, 0.5f, 1, 1, 0.25f, 1};
    check_fd_dir("gpt2-tiny", "data.npy", HP_METRIC_KL, g, HP_ABLATE_ZERO);
    check_fd_dir("llama-gqa", "data.npy", HP_METRIC_KL, g, HP_ABLATE_MEAN);
    check_fd_dir("bert-mlm", "data.jsonl", HP_METRIC_KL, gb, HP_ABLATE_ZERO);
    check_fd_dir("bert-cls", "data.jsonl", HP_METRIC_KL, gb, HP_ABLATE_ZERO);
}

/* 1 - cos under another pooling: a copy of bert-encoder whose 1_Pooling/config.json declares mode. */
static void check_fd_pooling(const char *mode, const float *g)
{
    const char *root = getenv("HP_FIXTURES");
    char tmpl[64], cmd[4096];
    tu_mkdtemp(tmpl, sizeof tmpl, "pool");
    snprintf(cmd, sizeof cmd,
             "cp %s/bert-encoder/config.json %s/bert-encoder/model.safetensors %s/ && mkdir %s/1_Pooling && "
             "printf '{\"pooling_mode_%s_token%s\": true}' > %s/1_Pooling/config.json && "
             "cp %s/bert-encoder/data.jsonl %s/",
             root, root, tmpl, tmpl, mode, strcmp(mode, "cls") ? "s" : "", tmpl, root, tmpl);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    check_fd_dir(tmpl, "data.jsonl", HP_METRIC_COS, g, HP_ABLATE_ZERO);
    tu_rmrf(tmpl);
}

Test(grad, cos_matches_finite_differences)
{
    float g[8] = {1, 0, 1, 0.5f, 1, 1, 0.25f, 1};
    check_fd_dir("bert-encoder", "data.jsonl", HP_METRIC_COS, g, HP_ABLATE_ZERO);
    check_fd_dir("bert-encoder", "data.jsonl", HP_METRIC_COS, g, HP_ABLATE_MEAN);
    check_fd_pooling("cls", g);
}

/* KL and 1 - cos are 0 and minimal at the unmasked model: their value and every gradient there are exactly 0. */
Test(grad, kl_and_cos_vanish_at_the_unmasked_model)
{
    const char *name[3] = {"gpt2-tiny", "bert-cls", "bert-encoder"}, *data[3] = {"data.npy", "data.jsonl", "data.jsonl"};
    const enum hp_metric metric[3] = {HP_METRIC_KL, HP_METRIC_KL, HP_METRIC_COS};
    for (int k = 0; k < 3; k++) {
        struct fix f;
        fix_open(&f, name[k], data[k]);
        const int HH = f.in->n_layers * f.in->n_heads;
        double g[HH], a[HH], v = -1;
        struct hp_error err = {0};
        cr_assert_eq(hp_evaluator_grad(f.ev, metric[k], NULL, HP_ABLATE_ZERO, g, a, &v, &err), HP_OK, "%s", err.msg);
        cr_expect(fabs(v) < 1e-12, "%s: %s at the unmasked model is %g", name[k], hp_metric_name(metric[k]), v);
        for (int i = 0; i < HH; i++)
            cr_expect(g[i] == 0 && a[i] == 0, "%s: %s: head %d has grad %g, atp %g at the unmasked model", name[k],
                      hp_metric_name(metric[k]), i, g[i], a[i]);
        fix_close(&f);
    }
}

Test(grad, mean_ablation_matches_finite_differences_at_live_heads)
{
    float g[12] = {1, 0, 1, 1, 0.5f, 1, 1, 1, 1, 1, 0, 1};
    check_fd("gpt2-tiny", "data.npy", g, HP_ABLATE_MEAN);
}

/*
 * A gradient at the unmasked model keeps that pass's metrics (without being
 * asked: hp_evaluator_keep_grad_metrics is left off, as in sweeps), and
 * hp_evaluator_run_many hands them out instead of running it again: the same
 * bits as a fresh evaluator's reuse path, so a sweep's baseline does not
 * depend on which of the two measured it (a resumed or shared sweep).
 */
static void check_unmasked_kept_in(const char *name, const char *data, enum hp_metric metric, int grad_batch)
{
    struct fix a, b;
    fix_open(&a, name, data);
    fix_open(&b, name, data);
    hp_evaluator_keep_grad_metrics(b.ev, false);
    if (grad_batch)
        grad_state(b.ev)->batch = grad_batch;
    const int HH = a.in->n_layers * a.in->n_heads;
    double g[HH];
    struct hp_error err = {0};
    struct hp_metrics *ma, *mb;
    cr_assert_eq(hp_evaluator_run(a.ev, NULL, HP_ABLATE_ZERO, &ma, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_grad(b.ev, metric, NULL, HP_ABLATE_ZERO, g, NULL, NULL, &err), HP_OK, "%s", err.msg);
    cr_assert(b.ev->kept && !b.ev->kept_gate, "%s: the gradient pass kept no metrics", name);
    struct hp_mask *ones = hp_mask_new(a.in->n_layers, a.in->n_heads); /* all gates 1: the unmasked model too */
    cr_assert_eq(hp_evaluator_run(b.ev, ones, HP_ABLATE_MEAN, &mb, &err), HP_OK, "%s", err.msg);
    const char *mn = hp_metric_name(metric);
    cr_expect(mb->loss == ma->loss && mb->acc == ma->acc && mb->cos == ma->cos && mb->n_tokens == ma->n_tokens &&
                  mb->kl == 0 && ma->kl == 0,
              "%s (%s): kept loss %.17g acc %.17g cos %.17g kl %g tokens %lld, run %.17g %.17g %.17g %g %lld", name,
              mn, mb->loss, mb->acc, mb->cos, mb->kl, (long long)mb->n_tokens, ma->loss, ma->acc, ma->cos, ma->kl,
              (long long)ma->n_tokens);
    for (int s = 0; s < ma->n_seqs; s++)
        cr_expect(mb->seq_loss[s] == ma->seq_loss[s] && mb->seq_acc[s] == ma->seq_acc[s] &&
                      mb->seq_cos[s] == ma->seq_cos[s] && mb->seq_tokens[s] == ma->seq_tokens[s] &&
                      mb->seq_kl[s] == 0,
                  "%s (%s): sequence %d: loss %.17g / %.17g, acc %g / %g, cos %.17g / %.17g", name, mn, s,
                  mb->seq_loss[s], ma->seq_loss[s], mb->seq_acc[s], ma->seq_acc[s], mb->seq_cos[s], ma->seq_cos[s]);
    hp_metrics_free(ma);
    hp_metrics_free(mb);
    /* a variant is still run, and the plain (reference) path never takes the kept metrics */
    ones->gate[1] = 0;
    cr_assert_eq(hp_evaluator_run(b.ev, ones, HP_ABLATE_ZERO, &mb, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_run(a.ev, ones, HP_ABLATE_ZERO, &ma, &err), HP_OK, "%s", err.msg);
    cr_expect(mb->loss == ma->loss && (mb->kl > 0 || mb->has_cos), "%s: variant loss %.9g / %.9g", name, mb->loss,
              ma->loss);
    hp_metrics_free(ma);
    hp_metrics_free(mb);
    hp_mask_free(ones);
    fix_close(&a);
    fix_close(&b);
}

static void check_unmasked_kept(const char *name, const char *data, enum hp_metric metric)
{
    check_unmasked_kept_in(name, data, metric, 0);
}

/*
 * A gradient of metric at a variant (gates g under abl) keeps that variant's metrics, KL and cosine included,
 * for hp_evaluator_grad_pass_metrics (handed over once, no pass of their own), within float rounding of the
 * variant's own pass; hp_evaluator_run_many never takes them (its own pass, the same bits as a fresh evaluator).
 */
static void check_variant_kept(const char *name, const char *data, enum hp_metric metric, const float *g,
                               enum hp_ablation abl)
{
    struct fix a, b;
    fix_open(&a, name, data);
    fix_open(&b, name, data);
    const int HH = a.in->n_layers * a.in->n_heads;
    double grad[HH];
    struct hp_error err = {0};
    struct hp_metrics *ma, *mb;
    struct hp_mask *mk = mask_of(&a, g);
    cr_assert_eq(hp_evaluator_run(a.ev, mk, abl, &ma, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_grad(b.ev, metric, mk, abl, grad, NULL, NULL, &err), HP_OK, "%s", err.msg);
    cr_assert(b.ev->kept && b.ev->kept_gate, "%s: the gradient pass kept no metrics", name);
    struct hp_metrics *mr;
    cr_assert_eq(hp_evaluator_run(b.ev, mk, abl, &mr, &err), HP_OK, "%s", err.msg);
    cr_expect(mr->loss == ma->loss && mr->kl == ma->kl && mr->cos == ma->cos,
              "%s: hp_evaluator_run took the gradient pass's metrics (loss %.17g, its own pass %.17g)", name,
              mr->loss, ma->loss);
    hp_metrics_free(mr);
    struct hp_metrics *kept = b.ev->kept;
    cr_assert_eq(hp_evaluator_grad_pass_metrics(b.ev, mk, abl, &mb, &err), HP_OK, "%s", err.msg);
    cr_assert(mb == kept && !b.ev->kept, "%s: the kept metrics were not handed over", name);
    const double tol = 1e-6;
    cr_expect(fabs(mb->loss - ma->loss) <= tol * fmax(1, ma->loss) && fabs(mb->kl - ma->kl) <= tol * fmax(1, ma->kl) &&
                  fabs(mb->cos - ma->cos) <= tol && mb->acc == ma->acc && mb->n_tokens == ma->n_tokens,
              "%s (%s): kept loss %.9g kl %.9g cos %.9g acc %.9g, run %.9g %.9g %.9g %.9g", name, hp_metric_name(metric),
              mb->loss, mb->kl, mb->cos, mb->acc, ma->loss, ma->kl, ma->cos, ma->acc);
    for (int s = 0; s < ma->n_seqs; s++)
        cr_expect(fabs(mb->seq_loss[s] - ma->seq_loss[s]) <= tol * fmax(1, ma->seq_loss[s]) &&
                      fabs(mb->seq_kl[s] - ma->seq_kl[s]) <= tol * fmax(1, ma->seq_kl[s]) &&
                      fabs(mb->seq_cos[s] - ma->seq_cos[s]) <= tol && mb->seq_acc[s] == ma->seq_acc[s],
                  "%s: sequence %d: loss %.9g / %.9g, kl %.9g / %.9g, cos %.9g / %.9g", name, s, mb->seq_loss[s],
                  ma->seq_loss[s], mb->seq_kl[s], ma->seq_kl[s], mb->seq_cos[s], ma->seq_cos[s]);
    cr_expect(ma->has_cos || ma->kl > 0, "%s: a variant with no KL", name);
    hp_metrics_free(ma);
    hp_metrics_free(mb);
    hp_mask_free(mk);
    fix_close(&a);
    fix_close(&b);
}

Test(grad, a_gradient_at_a_variant_keeps_its_metrics)
{
    float g[12] = {1, 0, 1, 1, 0.5f, 1, 1, 0.25f, 1, 1, 0, 1}, gb[8] = {1, 0, 1, 0.5f, 1, 1, 0.25f, 1};
    check_variant_kept("gpt2-tiny", "data.npy", HP_METRIC_LOSS, g, HP_ABLATE_ZERO);
    check_variant_kept("gpt2-tiny", "data.npy", HP_METRIC_KL, g, HP_ABLATE_MEAN);
    check_variant_kept("gpt2-tiny", "data.npy", HP_METRIC_LOSS, g, HP_ABLATE_MEAN_POS);
    check_variant_kept("gpt2-vocab", "data.npy", HP_METRIC_LOSS, gb, HP_ABLATE_ZERO);
    check_variant_kept("gpt2-vocab", "data.npy", HP_METRIC_KL, gb, HP_ABLATE_MEAN);
    check_variant_kept("qwen2-bias", "data.npy", HP_METRIC_LOSS, gb, HP_ABLATE_ZERO);
    check_variant_kept("mistral-window", "data.npy", HP_METRIC_LOSS, gb, HP_ABLATE_ZERO);
    float gs[40];
    for (int i = 0; i < 40; i++)
        gs[i] = i % 7 == 3 ? 0 : i % 11 == 5 ? 0.5f : 1;
    check_variant_kept("stories260K", "data.npy", HP_METRIC_LOSS, gs, HP_ABLATE_ZERO);
    check_variant_kept("llama-gqa", "data.npy", HP_METRIC_LOSS, g, HP_ABLATE_ZERO);
    check_variant_kept("bert-mlm", "data.jsonl", HP_METRIC_LOSS, gb, HP_ABLATE_ZERO);
    check_variant_kept("bert-cls", "data.jsonl", HP_METRIC_LOSS, gb, HP_ABLATE_ZERO);
    check_variant_kept("bert-cls", "data.jsonl", HP_METRIC_KL, gb, HP_ABLATE_ZERO);
    check_variant_kept("bert-encoder", "data.jsonl", HP_METRIC_COS, gb, HP_ABLATE_ZERO);
}

/* Without room for the unmasked model's reference of the whole set, each chunk makes its own: the same
 * gradients (KL), and a variant's metrics under the loss are left to the reuse path. */
Test(grad, a_reference_too_big_to_keep_is_made_per_chunk)
{
    struct fix a, b;
    fix_open(&a, "gpt2-tiny", "data.npy");
    fix_open(&b, "gpt2-tiny", "data.npy");
    grad_state(b.ev)->ref_tried = true; /* as when the whole set's reference does not fit */
    float g[12] = {1, 0, 1, 1, 0.5f, 1, 1, 0.25f, 1, 1, 0, 1};
    struct hp_mask *mk = mask_of(&a, g);
    double ga[12], gb[12], va, vb;
    struct hp_error err = {0};
    cr_assert_eq(hp_evaluator_grad(a.ev, HP_METRIC_KL, mk, HP_ABLATE_ZERO, ga, NULL, &va, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_grad(b.ev, HP_METRIC_KL, mk, HP_ABLATE_ZERO, gb, NULL, &vb, &err), HP_OK, "%s", err.msg);
    cr_assert(grad_state(a.ev)->ref && !grad_state(b.ev)->ref);
    cr_expect_eq(va, vb, "KL %.17g with the whole set's reference, %.17g per chunk", va, vb);
    for (int i = 0; i < 12; i++)
        cr_expect_eq(ga[i], gb[i], "head %d: %.17g / %.17g", i, ga[i], gb[i]);
    cr_assert(hp_eval_kept_matches(b.ev, mk, HP_ABLATE_ZERO), "the KL pass's metrics are not kept");
    mk->gate[0] = 0;
    cr_assert_eq(hp_evaluator_grad(b.ev, HP_METRIC_LOSS, mk, HP_ABLATE_ZERO, gb, NULL, NULL, &err), HP_OK, "%s",
                 err.msg);
    cr_expect(!hp_eval_kept_matches(b.ev, mk, HP_ABLATE_ZERO), "a variant's metrics kept without a reference");
    hp_mask_free(mk);
    fix_close(&a);
    fix_close(&b);
}

Test(grad, a_gradient_at_the_unmasked_model_keeps_its_metrics)
{
    check_unmasked_kept("gpt2-tiny", "data.npy", HP_METRIC_LOSS);
    check_unmasked_kept("gpt2-tiny", "data.npy", HP_METRIC_KL);
    /* a vocabulary of three blocks: the LM head's running sums are rescaled when a later block's logit is larger */
    check_unmasked_kept("gpt2-vocab", "data.npy", HP_METRIC_LOSS);
    check_unmasked_kept("gpt2-vocab", "data.npy", HP_METRIC_KL);
    check_unmasked_kept("llama-gqa", "data.npy", HP_METRIC_LOSS);
    check_unmasked_kept("qwen2-bias", "data.npy", HP_METRIC_LOSS);
    check_unmasked_kept("mistral-window", "data.npy", HP_METRIC_LOSS);
    check_unmasked_kept("stories260K", "data.npy", HP_METRIC_LOSS);
    check_unmasked_kept("bert-mlm", "data.jsonl", HP_METRIC_LOSS);
    check_unmasked_kept("bert-cls", "data.jsonl", HP_METRIC_LOSS);
    check_unmasked_kept("bert-cls", "data.jsonl", HP_METRIC_KL);
    check_unmasked_kept("bert-encoder", "data.jsonl", HP_METRIC_COS);
}

/*
 * A gradient pass takes chunks of its own size (its state's batch, more
 * rows than the forward's batch: grad_priv.h). However the set is cut, the gradients
 * are the same but for the order of their sums, and the metrics it keeps are
 * the same bits as the reuse path's, which walks the set in the forward's
 * chunks: one sequence a chunk and two here, against the whole set in one.
 */
/* A pass's setting, by the index of the pass (0, 1, 2): its gradient chunk, or its budget for kept activations. */
struct setting {
    const char *what;
    int grad_batch[3]; /* 0: as the evaluator chose */
    size_t keep[3];    /* 0: no layer's activations kept, each made again */
};

/* The sequences done at each progress report of a pass: the ends of its chunks. */
struct chunk_ends {
    int n, end[64];
};

static void chunk_end(void *user, int done, int total)
{
    (void)total;
    struct chunk_ends *c = user;
    if (c->n < 64)
        c->end[c->n] = done;
    c->n++;
}

/*
 * Three gradient passes of metric at gates under abl, one per setting: the
 * value, the gradients and the estimates of the second and third equal the
 * first's within tol (relative to the value, and to the largest gradient).
 * Each pass is checked to walk the set in the chunks it was given (its
 * progress reports), else two passes alike would compare a pass with itself.
 */
static void passes_agree(struct fix *f, const char *name, enum hp_metric metric, const float *gates,
                         enum hp_ablation abl, const struct setting *st, double tol)
{
    const int HH = f->in->n_layers * f->in->n_heads, n = f->d->n_seqs;
    struct hp_mask *mk = mask_of(f, gates);
    double g[3][HH], a[3][HH], v[3], gmax = 0;
    struct hp_error err = {0};
    const int gb0 = grad_state(f->ev)->batch;
    struct hp_means mm;
    if (abl != HP_ABLATE_ZERO) /* made now, so that the progress reports below are the passes' alone */
        cr_assert_eq(hp_evaluator_means(f->ev, &mm, &err), HP_OK, "%s", err.msg);
    for (int k = 0; k < 3; k++) {
        const int size = st->grad_batch[k] ? st->grad_batch[k] : gb0;
        struct chunk_ends ce = {0};
        grad_state(f->ev)->batch = size;
        grad_state(f->ev)->keep_bytes = st->keep[k];
        hp_evaluator_set_progress(f->ev, chunk_end, &ce);
        cr_assert_eq(hp_evaluator_grad(f->ev, metric, mk, abl, g[k], a[k], &v[k], &err), HP_OK, "%s", err.msg);
        hp_evaluator_set_progress(f->ev, NULL, NULL);
        cr_assert_eq(ce.n, (n + size - 1) / size, "%s: %d chunks of %d over %d sequences", name, ce.n, size, n);
        for (int c = 0; c < ce.n && c < 64; c++)
            cr_assert_eq(ce.end[c], c + 1 < ce.n ? (c + 1) * size : n, "%s: chunk %d of %d ends at %d", name, c, size,
                         ce.end[c]);
    }
    for (int i = 0; i < HH; i++)
        gmax = fmax(gmax, fmax(fabs(g[0][i]), fabs(a[0][i])));
    cr_assert(gmax > 0, "%s: every gradient is 0", name);
    int bad = 0;
    for (int k = 1; k < 3; k++) {
        cr_expect(fabs(v[k] - v[0]) <= tol * fabs(v[0]), "%s: %.17g, %.17g with %s %d", name, v[0], v[k], st->what, k);
        for (int i = 0; i < HH; i++)
            if ((fabs(g[k][i] - g[0][i]) > tol * gmax || fabs(a[k][i] - a[0][i]) > tol * gmax) && bad++ < 5)
                cr_log_error("%s: head %d.%d: grad %.17g, atp %.17g; %.17g, %.17g with %s %d", name,
                             i / f->in->n_heads, i % f->in->n_heads, g[0][i], a[0][i], g[k][i], a[k][i], st->what, k);
    }
    cr_expect_eq(bad, 0, "%s (%s, %s): %d gradients depend on the %s", name, hp_metric_name(metric),
                 hp_ablation_name(abl), bad, st->what);
    grad_state(f->ev)->batch = gb0;
    hp_mask_free(mk);
}

/*
 * A gradient pass takes chunks of its own size (its state's batch, more
 * rows than the forward's batch: grad_priv.h). However the set is cut, the gradients
 * are the same but for the order of their sums (1e-12), and the metrics it
 * keeps are the same bits as the reuse path's, which walks the set in the
 * forward's chunks: one sequence a chunk and two here, against the whole
 * set in one.
 */
static void check_chunks(const char *name, const char *data, enum hp_metric metric, const float *gates,
                         enum hp_ablation abl)
{
    struct fix f;
    fix_open(&f, name, data);
    const int n = f.d->n_seqs;
    const int gb = grad_state(f.ev)->batch;
    cr_assert(gb == n, "%s: %d sequences, a gradient chunk of %d", name, n, gb);
    cr_assert(n > 1, "%s: %d sequence cannot be cut in chunks", name, n);
    const struct setting st = {"chunk setting", {n, 1, 2}, {HP_BWD_KEEP_BYTES, HP_BWD_KEEP_BYTES, HP_BWD_KEEP_BYTES}};
    passes_agree(&f, name, metric, gates, abl, &st, 1e-12);
    fix_close(&f);
    check_unmasked_kept_in(name, data, metric, 1);
}

/*
 * The gradient pass's chunk: as many sequences as HP_GRAD_CHUNK_ROWS rows hold, fewer where what the pass
 * keeps of them (residual stream and kept activations) or the kept activations alone would not fit their
 * budgets, never fewer than the forward's.
 * Worked from the shapes: gpt2-tiny at 16 tokens, 64 sequences fill 1024 rows.
 */
Test(grad, a_gradient_chunk_is_as_large_as_its_budgets_allow)
{
    struct fix f;
    fix_open(&f, "gpt2-tiny", "data.npy");
    const int T = 16, L = f.in->n_layers;
    const size_t resid_seq = (size_t)(L + 1) * T * f.in->d_model * sizeof(float), big = (size_t)1 << 40,
                 layer5 = hp_bwd_layer_bytes(f.m, T, 5);
    cr_expect_eq(hp_grad_batch(f.m, T, 1, big, big), 1024 / T);
    const size_t kept7 = 7 * (resid_seq + (size_t)L * hp_bwd_layer_bytes(f.m, T, 1));
    cr_expect_eq(hp_grad_batch(f.m, T, 1, big, kept7), 7, "what the pass keeps bounds it");
    cr_expect_eq(hp_grad_batch(f.m, T, 1, big, kept7 - 1), 6);
    cr_expect_eq(hp_grad_batch(f.m, T, 1, (size_t)L * layer5, big), 5, "the kept activations' budget bounds it");
    cr_expect_eq(hp_grad_batch(f.m, T, 1, (size_t)L * layer5 - 1, big), 4);
    cr_expect_eq(hp_grad_batch(f.m, T, 9, 0, 0), 9, "never fewer than the forward's batch");
    cr_expect_eq(hp_grad_batch(f.m, 2048, 1, big, big), 1, "a sequence longer than the rows");
    cr_expect_eq(grad_state(f.ev)->batch, f.d->n_seqs, "the evaluator's: every one of its %d sequences", f.d->n_seqs);
    fix_close(&f);
}

Test(grad, a_gradient_pass_cut_into_any_chunks_agrees)
{
    const float g[12] = {1, 0, 1, 1, 0.5f, 1, 1, 0.25f, 1, 1, 0, 1}, gb[8] = {1, 0, 1, 0.5f, 1, 1, 0.25f, 1};
    check_chunks("gpt2-tiny", "data.npy", HP_METRIC_LOSS, g, HP_ABLATE_MEAN);
    check_chunks("gpt2-tiny", "data.npy", HP_METRIC_KL, g, HP_ABLATE_ZERO);
    check_chunks("gpt2-vocab", "data.npy", HP_METRIC_LOSS, NULL, HP_ABLATE_ZERO);
    check_chunks("llama-gqa", "data.npy", HP_METRIC_LOSS, g, HP_ABLATE_ZERO);
    check_chunks("bert-mlm", "data.jsonl", HP_METRIC_LOSS, gb, HP_ABLATE_ZERO);
    check_chunks("bert-cls", "data.jsonl", HP_METRIC_KL, gb, HP_ABLATE_ZERO);
    check_chunks("bert-encoder", "data.jsonl", HP_METRIC_COS, gb, HP_ABLATE_ZERO);
}

/*
 * The gradients (and estimates, and loss) of name at gates under abl with
 * every layer's activations kept by the forward (the default budget), with
 * none (every layer made again from its input) and with only the last
 * layer's: equal up to float rounding (the same operations in the same order
 * but for where some products' rows start).
 */
static void check_kept(const char *name, const char *data, const float *gates, enum hp_ablation abl)
{
    struct fix f;
    fix_open(&f, name, data);
    const size_t last = hp_bwd_layer_bytes(f.m, f.d->seq_len, grad_state(f.ev)->batch);
    const struct setting st = {"activation budget", {0, 0, 0}, {HP_BWD_KEEP_BYTES, 0, last}};
    passes_agree(&f, name, HP_METRIC_LOSS, gates, abl, &st, 1e-6);
    fix_close(&f);
}

Test(grad, kept_and_made_again_activations_agree)
{
    float g[12] = {1, 0, 1, 1, 0.5f, 1, 1, 0.25f, 1, 1, 0, 1}, gb[8] = {1, 0, 1, 0.5f, 1, 1, 0.25f, 1};
    check_kept("gpt2-tiny", "data.npy", NULL, HP_ABLATE_ZERO);
    check_kept("gpt2-tiny", "data.npy", g, HP_ABLATE_ZERO);
    check_kept("gpt2-tiny", "data.npy", g, HP_ABLATE_MEAN);
    check_kept("llama-gqa", "data.npy", g, HP_ABLATE_ZERO);
    /* a KV group all of whose query heads are at 0: the forward computes neither them nor it */
    float gk[12] = {0, 0, 1, 1, 1, 1, 0, 0, 1, 0.5f, 1, 1};
    check_kept("llama-gqa", "data.npy", gk, HP_ABLATE_ZERO);
    check_kept("llama-gqa", "data.npy", gk, HP_ABLATE_MEAN);
    check_kept("qwen2-bias", "data.npy", NULL, HP_ABLATE_ZERO);
    check_kept("qwen3-qknorm", "data.npy", gk, HP_ABLATE_ZERO);
    check_kept("phi3-fused", "data.npy", gk, HP_ABLATE_MEAN);
    check_kept("neox-parallel", "data.npy", g, HP_ABLATE_MEAN);
    check_kept("neox-sequential", "data.npy", gk, HP_ABLATE_ZERO);
    check_kept("olmo2-post-norms", "data.npy", gk, HP_ABLATE_ZERO);
    check_kept("olmo2-post-norms", "data.npy", g, HP_ABLATE_MEAN);
    check_kept("gemma2-softcap", "data.npy", gk, HP_ABLATE_ZERO);
    check_kept("gemma3-local", "data.npy", g, HP_ABLATE_MEAN);
    check_kept("bert-mlm", "data.jsonl", gb, HP_ABLATE_ZERO);
    check_kept("bert-cls", "data.jsonl", NULL, HP_ABLATE_MEAN);
}

/*
 * The gradient of the gates from layer l on (hp_evaluator_grad_from), taken as
 * integrated gradients a layer at a time take them (ig-layer: a base's gates
 * with layer l's at t = 1/4 and 3/4, layer 0 first), against whole passes
 * (hp_evaluator_grad_seq) at the same gates on an evaluator of its own: at
 * layers l on the same bits (the forward from the prefix's rows is the whole
 * forward's from there, its reverse the same down to l), 0 below, and the
 * same value. One evaluator walks several bases and ablations in turn, so its
 * prefix is made, extended, found and dropped; a plain evaluator (which keeps
 * no prefix) walks the first again, a second path. A layer outside the
 * model's is refused.
 */
struct walk {
    const float *base; /* NULL: every gate 1 */
    enum hp_ablation abl;
};

static void walk_layers(struct fix *f, struct fix *w, const char *name, enum hp_metric metric, const struct walk *wk)
{
    const int L = f->in->n_layers, H = f->in->n_heads, HH = L * H, S = f->d->n_seqs;
    double *g = malloc(sizeof *g * (size_t)(2 + 2 * S) * HH * 2), *a = g + HH, *sg = a + HH, *gw = sg + (size_t)S * HH,
           *aw = gw + HH, *sgw = aw + HH, v, vw;
    struct hp_error err = {0};
    for (int l = 0; l < L; l++)
        for (int k = 0; k < 2; k++) {
            struct hp_mask *mk = mask_of(f, wk->base);
            for (int h = 0; h < H; h++)
                mk->gate[l * H + h] = (float)((k + 0.5) / 2);
            cr_assert_eq(hp_evaluator_grad_from(f->ev, metric, mk, wk->abl, l, g, a, sg, &v, &err), HP_OK, "%s",
                         err.msg);
            cr_assert_eq(hp_evaluator_grad_seq(w->ev, metric, mk, wk->abl, gw, aw, sgw, &vw, &err), HP_OK, "%s",
                         err.msg);
            cr_assert_eq(v, vw, "%s (%s, %s) from layer %d: value %.17g, a whole pass's %.17g", name,
                         hp_metric_name(metric), hp_ablation_name(wk->abl), l, v, vw);
            for (int s = -1; s < S; s++)
                for (int i = 0; i < HH; i++) {
                    const double got = s < 0 ? g[i] : sg[(size_t)s * HH + i], want = s < 0 ? gw[i] : sgw[(size_t)s * HH + i];
                    cr_assert_eq(got, i < l * H ? 0 : want, "%s (%s, %s) from layer %d: head %d.%d (sequence %d) %.17g, "
                                 "a whole pass's %.17g", name, hp_metric_name(metric), hp_ablation_name(wk->abl), l,
                                 i / H, i % H, s, got, want);
                    if (s < 0)
                        cr_assert_eq(a[i], i < l * H ? 0 : aw[i], "%s from layer %d: atp of %d.%d", name, l, i / H, i % H);
                }
            hp_mask_free(mk);
        }
    free(g);
}

static void check_from(const char *name, const char *data, enum hp_metric metric, const struct walk *wk, int n)
{
    struct fix f, w, p;
    fix_open(&f, name, data);
    fix_open(&w, name, data);
    for (int i = 0; i < n; i++)
        walk_layers(&f, &w, name, metric, &wk[i]);
    const struct hp_grad_state *gs = grad_state(f.ev);
    cr_assert(gs->pre && gs->pre_n == f.in->n_layers - 1, "%s: no prefix kept (%d layers)", name, gs->pre_n);
    fix_open(&p, name, data);
    hp_evaluator_set_plain(p.ev, true);
    walk_layers(&p, &w, name, metric, &wk[0]);
    cr_assert_null(grad_state(p.ev)->pre, "%s: the plain path kept a prefix", name);
    double g[f.in->n_layers * f.in->n_heads];
    struct hp_error err = {0};
    cr_assert_eq(hp_evaluator_grad_from(f.ev, metric, NULL, wk[0].abl, f.in->n_layers, g, NULL, NULL, NULL, &err),
                 HP_ERR_ARG);
    cr_assert(strstr(err.msg, "gradients from layer"), "%s", err.msg);
    cr_assert_eq(hp_evaluator_grad_from(f.ev, metric, NULL, wk[0].abl, -1, g, NULL, NULL, NULL, &err), HP_ERR_ARG);
    fix_close(&p);
    fix_close(&w);
    fix_close(&f);
}

Test(grad, a_gradient_from_a_layer_on_is_a_whole_passes_there)
{
    const float g[12] = {1, 0, 1, 1, 0.5f, 1, 1, 0.25f, 1, 1, 0, 1}, g2[12] = {1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0},
                gb[8] = {1, 0, 1, 0.5f, 1, 1, 0.25f, 1};
    const struct walk zero_mean[] = {{NULL, HP_ABLATE_ZERO}, {g, HP_ABLATE_ZERO}, {g, HP_ABLATE_MEAN},
                                     {g2, HP_ABLATE_MEAN}, {NULL, HP_ABLATE_ZERO}};
    check_from("gpt2-tiny", "data.npy", HP_METRIC_LOSS, zero_mean, 5);
    check_from("llama-gqa", "data.npy", HP_METRIC_LOSS, zero_mean, 5);
    check_from("llama-gqa", "data.npy", HP_METRIC_KL, zero_mean + 1, 3);
    check_from("neox-parallel", "data.npy", HP_METRIC_LOSS, zero_mean + 1, 2);
    check_from("olmo2-post-norms", "data.npy", HP_METRIC_LOSS, zero_mean, 2);
    const struct walk bert[] = {{NULL, HP_ABLATE_ZERO}, {gb, HP_ABLATE_MEAN}};
    check_from("bert-mlm", "data.jsonl", HP_METRIC_LOSS, bert, 2);
    check_from("bert-encoder", "data.jsonl", HP_METRIC_COS, bert + 1, 1);
}

/*
 * A pruned checkpoint: its gradients are the masked original's at the heads it has (the same
 * function of the gates there, up to float rounding), and 0 at the heads it lacks.
 */
static void check_pruned(const char *exported, const char *source, const char *spec)
{
    struct fix p, o;
    char name[256];
    snprintf(name, sizeof name, "exported/%s", exported);
    char data[256];
    snprintf(data, sizeof data, "../../%s/data.npy", source);
    fix_open(&p, name, data);
    fix_open(&o, source, "data.npy");
    const int L = o.in->n_layers, H = o.in->n_heads;
    struct hp_mask *mk;
    struct hp_error err = {0};
    cr_assert_eq(hp_mask_parse(spec, false, o.in, &mk, &err), HP_OK, "%s", err.msg);
    double gp[L * H], go[L * H], ap[L * H], ao[L * H], gmax = 0, emax = 0;
    cr_assert_eq(hp_evaluator_grad(p.ev, HP_METRIC_LOSS, NULL, HP_ABLATE_ZERO, gp, ap, NULL, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_grad(o.ev, HP_METRIC_LOSS, mk, HP_ABLATE_ZERO, go, ao, NULL, &err), HP_OK, "%s", err.msg);
    for (int i = 0; i < L * H; i++)
        gmax = fmax(gmax, fabs(go[i]));
    for (int i = 0; i < L * H; i++) {
        if (p.in->pruned[i]) {
            cr_expect(gp[i] == 0 && ap[i] == 0, "%s: pruned head %d.%d has grad %g, atp %g", name, i / H, i % H, gp[i],
                      ap[i]);
            continue;
        }
        emax = fmax(emax, fabs(gp[i] - go[i]));
        cr_expect(fabs(gp[i] - go[i]) <= 1e-5 * gmax, "%s: head %d.%d: grad %.9g, masked original %.9g", name, i / H,
                  i % H, gp[i], go[i]);
    }
    cr_log_info("%s: max |grad - masked original's| = %.3g of %.3g", name, emax, gmax);
    hp_mask_free(mk);
    fix_close(&o);
    fix_close(&p);
}

Test(grad, a_pruned_checkpoint_has_the_masked_originals_gradients)
{
    check_pruned("gpt2-tiny", "gpt2-tiny", "0.1,2.0,2.3");
    check_pruned("llama-gqa-uneven", "llama-gqa", "kv:0.1,1.0");
}

Test(grad, an_encoder_without_a_loss_is_refused)
{
    struct fix f;
    fix_open(&f, "bert-encoder", "data.jsonl");
    double g[8];
    struct hp_error err = {0};
    cr_assert_eq(hp_evaluator_grad(f.ev, HP_METRIC_LOSS, NULL, HP_ABLATE_ZERO, g, NULL, NULL, &err), HP_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "no loss") && !strchr(err.msg, '\n'), "%s", err.msg);
    cr_assert_eq(hp_evaluator_grad(f.ev, HP_METRIC_KL, NULL, HP_ABLATE_ZERO, g, NULL, NULL, &err), HP_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "no loss"), "%s", err.msg);
    fix_close(&f);
}

Test(grad, metrics_without_a_gradient_here_are_refused)
{
    struct fix f;
    fix_open(&f, "gpt2-tiny", "data.npy");
    double g[12];
    struct hp_error err = {0};
    cr_assert_eq(hp_evaluator_grad(f.ev, HP_METRIC_COS, NULL, HP_ABLATE_ZERO, g, NULL, NULL, &err), HP_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "encoder without a head") && !strchr(err.msg, '\n'), "%s", err.msg);
    cr_assert_eq(hp_evaluator_grad(f.ev, HP_METRIC_ACC, NULL, HP_ABLATE_ZERO, g, NULL, NULL, &err), HP_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "acc has no gradient") && !strchr(err.msg, '\n'), "%s", err.msg);
    fix_close(&f);
}

/*
 * A metric's gradient is the derivative its row names, never the loss's by default: a row without one (a new
 * metric, a neg_loss here, that names none) is refused, naming it, as is a row naming a derivative grad.c does not
 * take; every row of the table has a gradient exactly when it names a derivative, and the four that do are
 * differentiated as their rows say.
 */
Test(grad, a_metric_row_without_its_derivative_is_refused)
{
    struct hp_metric_row neg_loss = *hp_metric_row(HP_METRIC_LOSS);
    neg_loss.name = "neg_loss";
    neg_loss.sign = -1;
    neg_loss.deriv = HP_DERIV_NONE;
    enum hp_metric_deriv deriv = HP_DERIV_XENT;
    struct hp_error err = {0};
    cr_assert_eq(hp_grad_deriv(&neg_loss, &deriv, &err), HP_ERR_UNSUPPORTED);
    cr_assert_eq(deriv, HP_DERIV_NONE);
    cr_assert(strstr(err.msg, "neg_loss has no gradient") && !strchr(err.msg, '\n'), "%s", err.msg);
    neg_loss.deriv = HP_DERIV_COUNT; /* past the derivatives grad.c takes */
    cr_assert_eq(hp_grad_deriv(&neg_loss, &deriv, &err), HP_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "metric neg_loss") && strstr(err.msg, "does not take"), "%s", err.msg);
    for (int m = 0; m < HP_N_METRICS; m++) {
        const struct hp_metric_row *r = hp_metric_row((enum hp_metric)m);
        cr_expect_eq(hp_grad_deriv(r, &deriv, &err) == HP_OK, hp_metric_has_grad((enum hp_metric)m), "metric %s",
                     r->name);
    }
    const struct {
        enum hp_metric m;
        enum hp_metric_deriv deriv;
    } want[] = {{HP_METRIC_LOSS, HP_DERIV_XENT}, {HP_METRIC_KL, HP_DERIV_KL},
                {HP_METRIC_LOGIT_DIFF, HP_DERIV_NEG_LOGIT_DIFF}, {HP_METRIC_COS, HP_DERIV_ONE_MINUS_COS}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        cr_assert_eq(hp_grad_deriv(hp_metric_row(want[i].m), &deriv, &err), HP_OK);
        cr_expect_eq(deriv, want[i].deriv, "metric %s", hp_metric_name(want[i].m));
    }
}

Test(grad, a_mask_of_another_shape_is_refused)
{
    struct fix f;
    fix_open(&f, "gpt2-tiny", "data.npy");
    struct hp_mask *mk = hp_mask_new(2, 4);
    double g[12];
    struct hp_error err = {0};
    cr_assert_eq(hp_evaluator_grad(f.ev, HP_METRIC_LOSS, mk, HP_ABLATE_ZERO, g, NULL, NULL, &err), HP_ERR_ARG);
    cr_assert(strstr(err.msg, "2 layers x 4 heads"), "%s", err.msg);
    hp_mask_free(mk);
    fix_close(&f);
}

// --- the command line ------------------------------------------------------------

static char cli_out[1 << 16], cli_err[1 << 14];

/* headprune with args from the repository root: exit status, stdout and stderr into the buffers above */
static int hp(const char *args)
{
    char dir[64];
    tu_mkdtemp(dir, sizeof dir, "grad");
    int rc = tu_headprune(NULL, args, dir, cli_out, sizeof cli_out, cli_err, sizeof cli_err);
    tu_rmrf(dir);
    cr_assert_lt(rc, 128, "headprune did not exit normally for: %s", args);
    return rc;
}

#define GPT2 "tests/fixtures/gpt2-tiny"

/* eval --grad --json at mask 0.1,1.2 (with extra options) against torch's case of that mask and metric. */
static void check_eval_json(const char *extra, const char *metric)
{
    char args[512];
    snprintf(args, sizeof args, "eval --model " GPT2 " --data " GPT2 "/data.npy --mask 0.1,1.2 --json --threads 1 %s",
             extra);
    cr_assert_eq(hp(args), 0, "%s", cli_err);
    cJSON *o = cJSON_Parse(cli_out), *ref = NULL;
    cr_assert(o, "not JSON: %s", cli_out);
    cr_assert_str_eq(cJSON_GetObjectItem(o, "grad_metric")->valuestring, metric);
    char path[1200];
    snprintf(path, sizeof path, "%s/gpt2-tiny/grad.json", getenv("HP_FIXTURES"));
    char *txt = tu_slurp(path, NULL);
    ref = cJSON_Parse(txt);
    cJSON *c, *want = NULL;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(ref, "cases")) if (
        strcmp(cJSON_GetObjectItem(c, "mask")->valuestring, "0.1,1.2") == 0 &&
        strcmp(cJSON_GetObjectItem(c, "ablation")->valuestring, "zero") == 0 &&
        strcmp(cJSON_GetObjectItem(c, "metric")->valuestring, metric) == 0) want = c;
    cr_assert(want, "no case 0.1,1.2 of %s in %s", metric, path);
    const char *keys[2] = {"grad", "atp"};
    for (int k = 0; k < 2; k++) {
        cJSON *got = cJSON_GetObjectItem(o, keys[k]), *w = cJSON_GetObjectItem(want, keys[k]);
        cr_assert_eq(cJSON_GetArraySize(got), 3, "%s: %d layers", keys[k], cJSON_GetArraySize(got));
        for (int l = 0; l < 3; l++) {
            cr_assert_eq(cJSON_GetArraySize(cJSON_GetArrayItem(got, l)), 4);
            for (int h = 0; h < 4; h++) {
                double g = cJSON_GetArrayItem(cJSON_GetArrayItem(got, l), h)->valuedouble,
                       t = cJSON_GetArrayItem(cJSON_GetArrayItem(w, l), h)->valuedouble;
                cr_expect(fabs(g - t) <= GRAD_TOL * 0.25, "%s %s of %d.%d: %.9g, torch %.9g", metric, keys[k], l, h, g,
                          t);
            }
        }
    }
    /* where the pass spent its time: four phases within the command's own seconds */
    cJSON *ph = cJSON_GetObjectItem(o, "grad_seconds");
    cr_assert(ph, "no grad_seconds in %s", cli_out);
    double sum = 0;
    const char *phases[4] = {"reference", "forward", "head", "reverse"};
    for (int i = 0; i < 4; i++) {
        cJSON *v = cJSON_GetObjectItem(ph, phases[i]);
        cr_assert(cJSON_IsNumber(v) && v->valuedouble >= 0, "grad_seconds.%s missing or negative", phases[i]);
        sum += v->valuedouble;
    }
    const double secs = cJSON_GetObjectItem(o, "seconds")->valuedouble;
    cr_expect(sum > 0 && sum <= secs, "the phases take %g s of the command's %g s", sum, secs);
    cJSON_Delete(ref);
    free(txt);
    cJSON_Delete(o);
}

Test(grad, eval_grad_json_gives_torchs_gradients)
{
    check_eval_json("--grad", "loss");
    check_eval_json("--grad-metric kl", "kl");
}

Test(grad, eval_grad_table_shows_the_top_heads_by_atp)
{
    cr_assert_eq(hp("eval --model " GPT2 " --data " GPT2 "/data.npy --grad --threads 1"), 0, "%s", cli_err);
    cr_assert(strstr(cli_out, "\ngradient  first-order estimate"), "%s", cli_out);
    /* the first head listed is the one with torch's largest |atp| at the unmasked model (case "none") */
    char path[1200];
    snprintf(path, sizeof path, "%s/gpt2-tiny/grad.json", getenv("HP_FIXTURES"));
    char *txt = tu_slurp(path, NULL);
    cJSON *ref = cJSON_Parse(txt), *atp = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "cases"), 0), "atp");
    int best = 0;
    double bv = -1;
    for (int i = 0; i < 12; i++) {
        double v = fabs(cJSON_GetArrayItem(cJSON_GetArrayItem(atp, i / 4), i % 4)->valuedouble);
        if (v > bv)
            bv = v, best = i;
    }
    char want[16];
    snprintf(want, sizeof want, "%d.%d ", best / 4, best % 4);
    char *first = strstr(cli_out, "\n  ");
    cr_assert(first && strncmp(first + 3, want, strlen(want)) == 0, "first head listed is not %s: %s", want, cli_out);
    cJSON_Delete(ref);
    free(txt);
}

/* An encoder without a head: --grad takes its metric, 1 - cos, and says that it vanishes unmasked. */
Test(grad, eval_grad_of_an_encoder_is_of_cos)
{
    int rc = hp("eval --model tests/fixtures/bert-encoder --data tests/fixtures/bert-encoder/data.jsonl --grad");
    cr_assert_eq(rc, 0, "exit %d (stderr %s)", rc, cli_err);
    cr_assert(strstr(cli_out, "atp = change of 1 - cos") && strstr(cli_out, "\nnote      1 - cos is 0 and minimal"),
              "%s", cli_out);
    rc = hp("eval --model tests/fixtures/bert-encoder --data tests/fixtures/bert-encoder/data.jsonl --mask 0.1 --grad");
    cr_assert_eq(rc, 0, "exit %d (stderr %s)", rc, cli_err);
    cr_assert(strstr(cli_out, "atp = change of 1 - cos") && !strstr(cli_out, "\nnote "), "%s", cli_out);
}

/* args fail with exit status want_rc (1: bad input, 2: usage) and a line naming what. */
static void check_one_line_error(const char *args, int want_rc, const char *what)
{
    int rc = hp(args);
    cr_assert_eq(rc, want_rc, "%s: exit %d (stderr %s)", args, rc, cli_err);
    cr_assert(strncmp(cli_err, want_rc == 1 ? "headprune: " : "headprune eval: ", want_rc == 1 ? 11 : 16) == 0 &&
                  strstr(cli_err, what),
              "%s: %s", args, cli_err);
    char *nl = strchr(cli_err, '\n');
    /* a usage error adds the line that points to --help */
    cr_assert(nl && (want_rc == 2 || nl[1] == '\0'), "more than one line: %s", cli_err);
    cr_assert_str_empty(cli_out, "stdout on failure: %s", cli_out);
}

Test(grad, eval_grad_of_a_metric_the_model_lacks_is_one_line_and_exit_1)
{
    check_one_line_error("eval --model tests/fixtures/bert-encoder --data tests/fixtures/bert-encoder/data.jsonl "
                         "--grad-metric loss",
                         1, "--grad-metric loss needs a loss");
    check_one_line_error("eval --model " GPT2 " --data " GPT2 "/data.npy --grad-metric cos", 1,
                         "--grad-metric cos is for an encoder without a head");
    check_one_line_error("eval --model " GPT2 " --data " GPT2 "/data.npy --grad-metric acc", 2,
                         "--grad-metric must be loss, kl, cos or logit_diff");
}
