/*
 * test_reference.c -- headprune against Hugging Face transformers 4.x.
 *
 * Each fixture under tests/fixtures/ was written by tools/gen_fixtures.py or
 * tools/convert_stories.py with transformers in eager attention: the model,
 * held-out ids, and for each mask the reference metrics (reference.json) and
 * outputs (reference.safetensors). We re-evaluate every case, on both
 * evaluation paths (the default reuse path and the plain one), and compare.
 *
 * Tolerances (float32 on both sides, different summation orders):
 *   metrics (loss, acc, KL, cosine, per sequence too): |diff| <= 1e-5 * max(1, |ref|)
 *   logits / hidden states at real tokens:             |diff| <= 1e-4 * max(1, max |ref|)
 */
#define _DEFAULT_SOURCE /* mkdtemp, in testutil.h */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "headprune.h"
#include "testutil.h"
#include "safetensors.h"

#define METRIC_TOL 1e-5
#define OUTPUT_TOL 1e-4

static int check_metric(const char *fix, const char *cs, const char *what, double got, double want)
{
    double tol = METRIC_TOL * fmax(1.0, fabs(want));
    if (fabs(got - want) > tol) {
        cr_log_error("%s/%s: %s = %.9g, reference %.9g (diff %.3g > tol %.3g)", fix, cs, what, got, want,
                     fabs(got - want), tol);
        return 1;
    }
    return 0;
}

static int check_array(const char *fix, const char *cs, const char *what, const double *got, cJSON *want, int n)
{
    if (!want)
        return 0;
    int bad = 0;
    cr_assert_eq(cJSON_GetArraySize(want), n, "%s/%s: %s length", fix, cs, what);
    for (int i = 0; i < n; i++) {
        char label[64];
        snprintf(label, sizeof label, "%s[%d]", what, i);
        bad += check_metric(fix, cs, label, got[i], cJSON_GetArrayItem(want, i)->valuedouble);
    }
    return bad;
}

static double num(cJSON *o, const char *k)
{
    cJSON *v = cJSON_GetObjectItem(o, k);
    cr_assert(cJSON_IsNumber(v), "reference field %s missing", k);
    return v->valuedouble;
}

static void check_fixture(const char *name)
{
    const char *root = getenv("HP_FIXTURES");
    cr_assert(root, "HP_FIXTURES not set (run through meson test)");
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    snprintf(path, sizeof path, "%s/reference.json", dir);
    char *txt = tu_slurp(path, NULL);
    cJSON *ref = cJSON_Parse(txt);
    cr_assert(ref, "%s: bad JSON", path);

    struct hp_error err = {0};
    struct hp_model *m;
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    const struct hp_model_info *in = hp_model_get_info(m);
    snprintf(path, sizeof path, "%s/%s", dir, cJSON_GetObjectItem(ref, "data")->valuestring);
    struct hp_data *d;
    cr_assert_eq(hp_data_load(path, 0, &d, &err), HP_OK, "%s", err.msg);
    struct hp_evaluator *ev;
    cr_assert_eq(hp_evaluator_new(m, d, &ev, &err), HP_OK, "%s", err.msg);
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    struct hp_st_set *outs;
    cr_assert_eq(hp_st_open(path, &outs, &err), HP_OK, "%s", err.msg);

    int W = in->has_lm_head ? in->n_vocab : in->d_model;
    float *got = malloc((size_t)d->seq_len * W * sizeof(float));
    int bad = 0, n_cases = 0;
    cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(ref, "cases")) {
        const char *cs = cJSON_GetObjectItem(c, "name")->valuestring;
        const char *spec = cJSON_GetObjectItem(c, "mask")->valuestring;
        const char *abl_s = cJSON_GetObjectItem(c, "ablation")->valuestring;
        enum hp_ablation abl = strcmp(abl_s, "mean") == 0 ? HP_ABLATE_MEAN
                               : strcmp(abl_s, "mean_pos") == 0 ? HP_ABLATE_MEAN_POS
                                                                : HP_ABLATE_ZERO;
        struct hp_mask *mask;
        cr_assert_eq(hp_mask_parse(spec, false, in, &mask, &err), HP_OK, "%s", err.msg);
        cJSON *na = cJSON_GetObjectItem(c, "n_ablated");
        if (na)
            cr_assert_eq(hp_mask_count_ablated(mask), na->valueint, "%s/%s: mask '%s' ablates %d heads", name, cs,
                         spec, hp_mask_count_ablated(mask));
        /* both evaluation paths: the default (reuse) and the plain reference path */
        for (int plain = 0; plain <= 1; plain++) {
            char cp[160];
            snprintf(cp, sizeof cp, "%s [%s path]", cs, plain ? "plain" : "reuse");
            hp_evaluator_set_plain(ev, plain);
            struct hp_metrics *mt;
            cr_assert_eq(hp_evaluator_run(ev, mask, abl, &mt, &err), HP_OK, "%s", err.msg);
            cr_assert_eq(mt->n_tokens, (int64_t)num(c, "n_tokens"), "%s/%s: n_tokens", name, cp);
            if (cJSON_GetObjectItem(c, "loss")) {
                bad += check_metric(name, cp, "loss", mt->loss, num(c, "loss"));
                bad += check_metric(name, cp, "acc", mt->acc, num(c, "acc"));
                bad += check_metric(name, cp, "kl", mt->kl, num(c, "kl"));
                bad += check_array(name, cp, "per_seq_loss", mt->seq_loss, cJSON_GetObjectItem(c, "per_seq_loss"),
                                   d->n_seqs);
                bad += check_array(name, cp, "per_seq_acc", mt->seq_acc, cJSON_GetObjectItem(c, "per_seq_acc"),
                                   d->n_seqs);
                bad += check_array(name, cp, "per_seq_kl", mt->seq_kl, cJSON_GetObjectItem(c, "per_seq_kl"), d->n_seqs);
            } else {
                cr_assert(mt->has_cos, "%s/%s: expected a cosine metric", name, cp);
                bad += check_metric(name, cp, "cos", mt->cos, num(c, "cos"));
                bad += check_array(name, cp, "per_seq_cos", mt->seq_cos, cJSON_GetObjectItem(c, "per_seq_cos"),
                                   d->n_seqs);
            }
            hp_metrics_free(mt);
        }

        /* raw outputs, for zero ablations (mean ablation needs the evaluator's cache) */
        cJSON *oname = cJSON_GetObjectItem(c, "output");
        struct hp_st_tensor *t = oname ? hp_st_find(outs, oname->valuestring) : NULL;
        if (t && abl == HP_ABLATE_ZERO) {
            cr_assert(t->n_dims == 3 && t->shape[1] == d->seq_len && t->shape[2] == W, "%s/%s: output shape", name, cs);
            const float *want = t->data;
            double maxref = 0, maxdiff = 0;
            int shown = 0;
            for (int64_t s = 0; s < t->shape[0]; s++) {
                size_t off = (size_t)s * d->seq_len;
                cr_assert_eq(hp_model_forward(m, d->ids + off, d->attn_mask ? d->attn_mask + off : NULL,
                                              d->type_ids ? d->type_ids + off : NULL, d->seq_len, mask, got, &err),
                             HP_OK, "%s", err.msg);
                for (int p = 0; p < d->seq_len; p++) {
                    if (d->attn_mask && !d->attn_mask[off + p])
                        continue;
                    for (int v = 0; v < W; v++) {
                        double r = want[((size_t)s * d->seq_len + p) * W + v], g = got[(size_t)p * W + v];
                        maxref = fmax(maxref, fabs(r));
                        if (fabs(g - r) > maxdiff)
                            maxdiff = fabs(g - r);
                    }
                }
            }
            double tol = OUTPUT_TOL * fmax(1.0, maxref);
            if (maxdiff > tol) {
                for (int p = 0; p < d->seq_len && shown < 3; p++)
                    for (int v = 0; v < W && shown < 3; v++) {
                        double r = want[(size_t)p * W + v], g = got[(size_t)p * W + v];
                        if (fabs(g - r) > tol && shown++ < 3)
                            cr_log_error("%s/%s: output[0,%d,%d] = %.7g, reference %.7g", name, cs, p, v, g, r);
                    }
                cr_log_error("%s/%s: max |diff| of outputs %.3g > tol %.3g", name, cs, maxdiff, tol);
                bad++;
            }
        }
        hp_mask_free(mask);
        n_cases++;
    }
    cr_log_info("%s: %d cases checked", name, n_cases);
    cr_assert_gt(n_cases, 0);
    cr_assert_eq(bad, 0, "%s: %d values disagree with Hugging Face (see above)", name, bad);
    free(got);
    hp_st_close(outs);
    hp_evaluator_free(ev);
    hp_data_free(d);
    hp_model_close(m);
    cJSON_Delete(ref);
    free(txt);
}

Test(reference, gpt2_tiny) { check_fixture("gpt2-tiny"); }
Test(reference, gpt2_noprefix_with_attn_bias_buffers) { check_fixture("gpt2-noprefix"); }
Test(reference, gpt2_vocabulary_of_three_blocks) { check_fixture("gpt2-vocab"); }
Test(reference, bert_mlm_padding_token_types) { check_fixture("bert-mlm"); }
Test(reference, bert_encoder_noprefix_cosine) { check_fixture("bert-encoder"); }
Test(reference, llama_gqa) { check_fixture("llama-gqa"); }
Test(reference, llama_gqa_sharded) { check_fixture("llama-gqa-sharded"); }
Test(reference, llama_tied_bf16) { check_fixture("llama-tied-bf16"); }
Test(reference, llama_rope_scaling_llama3) { check_fixture("llama-rope-llama3"); }
Test(reference, llama_rope_scaling_linear) { check_fixture("llama-rope-linear"); }
Test(reference, llama_rope_scaling_dynamic) { check_fixture("llama-rope-dynamic"); }
Test(reference, mistral_sliding_window) { check_fixture("mistral-window"); }
Test(reference, qwen2_bias_f16) { check_fixture("qwen2-bias"); }
Test(reference, gpt2_untied_lm_head) { check_fixture("gpt2-untied"); }
Test(reference, llama_mlp_and_attention_biases) { check_fixture("llama-mlp-bias"); }
Test(reference, qwen3_qk_norms_and_head_dim) { check_fixture("qwen3-qknorm"); }
Test(reference, phi3_fused_projections_and_window) { check_fixture("phi3-fused"); }
Test(reference, gpt_neox_parallel_partial_rotary) { check_fixture("neox-parallel"); }
Test(reference, gpt_neox_sequential_tied) { check_fixture("neox-sequential"); }
Test(reference, olmo2_post_norms_and_whole_qk_norms) { check_fixture("olmo2-post-norms"); }
Test(reference, gemma2_norms_soft_caps_alternate_window) { check_fixture("gemma2-softcap"); }
Test(reference, gemma3_local_rotary_qk_norms) { check_fixture("gemma3-local"); }
/* a folder holding one GGUF file (Q8_0, Q4_0, Q4_1, F16, F32), against transformers' own GGUF loader */
Test(reference, llama_gguf_quantized) { check_fixture("llama-gguf"); }
Test(reference, stories260K_real_checkpoint) { check_fixture("stories260K"); }
Test(reference, bert_sequence_classification) { check_fixture("bert-cls"); }
/* checkpoints pruned by transformers' own prune_heads + save_pretrained ("pruned_heads" in config.json) */
Test(reference, gpt2_pruned_by_transformers) { check_fixture("gpt2-pruned"); }
Test(reference, bert_mlm_pruned_by_transformers) { check_fixture("bert-mlm-pruned"); }
