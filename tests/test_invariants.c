/*
 * test_invariants.c -- properties the masked forward pass must keep, checked
 * through a second code path rather than against stored numbers.
 *
 *  1. A mask of all ones gives the same outputs as no mask, bit for bit.
 *  2. Ablating head h (zero) equals running an edited copy of the checkpoint
 *     whose output projection has h's input columns zeroed (tolerance 1e-5
 *     relative: the masked path skips those columns, so sums run in another order).
 *  3. Ablating a KV group equals ablating each of its query heads.
 */
#define _DEFAULT_SOURCE
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "headprune.h"
#include "testmodel.h"
#include "testutil.h"

static void fixture(const char *name, char *dir, size_t n)
{
    const char *root = getenv("HP_FIXTURES");
    cr_assert(root, "HP_FIXTURES not set (run through meson test)");
    snprintf(dir, n, "%s/%s", root, name);
}

static float *run(struct hp_model *m, const struct hp_data *d, int s, const struct hp_mask *mask)
{
    const struct hp_model_info *in = hp_model_get_info(m);
    int W = in->has_lm_head ? in->n_vocab : in->d_model;
    float *out = malloc((size_t)d->seq_len * W * sizeof(float));
    struct hp_error err;
    size_t off = (size_t)s * d->seq_len;
    cr_assert_eq(hp_model_forward(m, d->ids + off, d->attn_mask ? d->attn_mask + off : NULL,
                                  d->type_ids ? d->type_ids + off : NULL, d->seq_len, mask, out, &err),
                 HP_OK, "%s", err.msg);
    return out;
}

static void all_ones_is_identity(const char *name, const char *data)
{
    char dir[1024], path[1200];
    fixture(name, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/%s", dir, data);
    struct hp_error err;
    struct hp_model *m;
    struct hp_data *d;
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_data_load(path, 0, &d, &err), HP_OK, "%s", err.msg);
    const struct hp_model_info *in = hp_model_get_info(m);
    struct hp_mask *ones = hp_mask_new(in->n_layers, in->n_heads);
    int W = in->has_lm_head ? in->n_vocab : in->d_model;
    for (int s = 0; s < d->n_seqs; s++) {
        float *a = run(m, d, s, NULL), *b = run(m, d, s, ones);
        cr_assert(memcmp(a, b, (size_t)d->seq_len * W * sizeof(float)) == 0,
                  "%s seq %d: all-ones mask differs from no mask", name, s);
        free(a);
        free(b);
    }
    /* and through the evaluator */
    struct hp_evaluator *ev;
    struct hp_metrics *x, *y;
    cr_assert_eq(hp_evaluator_new(m, d, &ev, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_run(ev, NULL, HP_ABLATE_ZERO, &x, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_run(ev, ones, HP_ABLATE_MEAN, &y, &err), HP_OK, "%s", err.msg);
    cr_assert(x->loss == y->loss && x->cos == y->cos && y->kl == 0.0, "%s: metrics differ", name);
    hp_metrics_free(x);
    hp_metrics_free(y);
    hp_evaluator_free(ev);
    hp_mask_free(ones);
    hp_data_free(d);
    hp_model_close(m);
}

Test(invariants, all_ones_mask_is_bit_identical_gpt2) { all_ones_is_identity("gpt2-tiny", "data.npy"); }
Test(invariants, all_ones_mask_is_bit_identical_llama) { all_ones_is_identity("llama-gqa", "data.npy"); }
Test(invariants, all_ones_mask_is_bit_identical_bert) { all_ones_is_identity("bert-mlm", "data.jsonl"); }
Test(invariants, all_ones_mask_is_bit_identical_encoder) { all_ones_is_identity("bert-encoder", "data.jsonl"); }

// --- ablation == zeroed output-projection columns -------------------------------

static void ablation_equals_zeroed_projection(const char *name, const char *data, const char *fmt, bool conv1d,
                                              int layer, int head)
{
    char src[1024], path[1200], tensor[128], tmp[64];
    fixture(name, src, sizeof src);
    tu_mkdtemp(tmp, sizeof tmp, "inv");
    snprintf(tensor, sizeof tensor, fmt, layer);
    struct hp_error err;
    struct hp_model *m, *z;
    cr_assert_eq(hp_model_open(src, &m, &err), HP_OK, "%s", err.msg);
    const struct hp_model_info *in = hp_model_get_info(m);
    tu_scaled_head_copy(src, tmp, tensor, conv1d, head, in->d_head, 0.0f);
    cr_assert_eq(hp_model_open(tmp, &z, &err), HP_OK, "%s", err.msg);
    snprintf(path, sizeof path, "%s/%s", src, data);
    struct hp_data *d;
    cr_assert_eq(hp_data_load(path, 0, &d, &err), HP_OK, "%s", err.msg);
    struct hp_mask *mask = hp_mask_new(in->n_layers, in->n_heads);
    mask->gate[layer * in->n_heads + head] = 0.0f;
    int W = in->has_lm_head ? in->n_vocab : in->d_model;
    double maxdiff = 0, maxref = 0, change = 0;
    for (int s = 0; s < d->n_seqs; s++) {
        float *a = run(m, d, s, mask), *b = run(z, d, s, NULL), *u = run(m, d, s, NULL);
        for (size_t i = 0; i < (size_t)d->seq_len * W; i++) {
            maxdiff = fmax(maxdiff, fabs(a[i] - b[i]));
            maxref = fmax(maxref, fabs(b[i]));
            change = fmax(change, fabs(u[i] - b[i]));
        }
        free(a);
        free(b);
        free(u);
    }
    cr_log_info("%s head %d.%d: max |masked - zeroed| = %.3g, effect of the head %.3g", name, layer, head, maxdiff,
                change);
    cr_assert(change > 1e-3, "%s: the head has no effect, so the test proves nothing", name);
    cr_assert_leq(maxdiff, 1e-5 * fmax(1, maxref), "%s head %d.%d: masked and zeroed-projection outputs differ by %.3g",
                  name, layer, head, maxdiff);
    hp_mask_free(mask);
    hp_data_free(d);
    hp_model_close(z);
    hp_model_close(m);
    tu_rmrf(tmp);
}

Test(invariants, ablating_head_equals_zeroed_o_proj_llama)
{
    ablation_equals_zeroed_projection("llama-gqa", "data.npy", "model.layers.%d.self_attn.o_proj.weight", false, 1, 2);
}
Test(invariants, ablating_head_equals_zeroed_c_proj_gpt2)
{
    ablation_equals_zeroed_projection("gpt2-tiny", "data.npy", "transformer.h.%d.attn.c_proj.weight", true, 2, 1);
}
Test(invariants, ablating_head_equals_zeroed_dense_bert)
{
    ablation_equals_zeroed_projection("bert-encoder", "data.jsonl", "encoder.layer.%d.attention.output.dense.weight",
                                      false, 0, 3);
}

Test(invariants, kv_group_equals_its_query_heads)
{
    char dir[1024], path[1200];
    fixture("stories260K", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/data.npy", dir);
    struct hp_error err;
    struct hp_model *m;
    struct hp_data *d;
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_data_load(path, 0, &d, &err), HP_OK, "%s", err.msg);
    const struct hp_model_info *in = hp_model_get_info(m);
    struct hp_mask *a, *b;
    cr_assert_eq(hp_mask_parse("kv:3.1", false, in, &a, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_mask_parse("3.2,3.3", false, in, &b, &err), HP_OK, "%s", err.msg);
    float *x = run(m, d, 0, a), *y = run(m, d, 0, b);
    cr_assert(memcmp(x, y, (size_t)d->seq_len * in->n_vocab * sizeof(float)) == 0);
    free(x);
    free(y);
    hp_mask_free(a);
    hp_mask_free(b);
    hp_data_free(d);
    hp_model_close(m);
}

// --- pooling as the checkpoint declares (1_Pooling/config.json) ---------------------------

/* A copy of the bert-encoder fixture with a 1_Pooling/config.json of the given text. */
static void pooled_copy(char *tmp, size_t n, const char *pooling)
{
    char src[1024], cmd[4096], path[256];
    fixture("bert-encoder", src, sizeof src);
    tu_mkdtemp(tmp, n, "pool");
    snprintf(cmd, sizeof cmd, "cp '%s'/config.json '%s'/model.safetensors '%s'/data.jsonl '%s'/ && mkdir '%s'/1_Pooling",
             src, src, src, tmp, tmp);
    cr_assert_eq(system(cmd), 0);
    snprintf(path, sizeof path, "%s/1_Pooling/config.json", tmp);
    tu_spit(path, pooling, strlen(pooling));
}

/* The cosine the evaluator reports equals one computed here from the raw outputs, pooled by mode. */
static void check_pooling(const char *json, enum hp_pooling mode)
{
    char tmp[64], path[128];
    pooled_copy(tmp, sizeof tmp, json);
    snprintf(path, sizeof path, "%s/data.jsonl", tmp);
    struct hp_error err;
    struct hp_model *m;
    struct hp_data *d;
    cr_assert_eq(hp_model_open(tmp, &m, &err), HP_OK, "%s", err.msg);
    const struct hp_model_info *in = hp_model_get_info(m);
    cr_assert_eq(in->pooling, mode);
    cr_assert_eq(hp_data_load(path, 0, &d, &err), HP_OK, "%s", err.msg);
    struct hp_mask *mask;
    cr_assert_eq(hp_mask_parse("0.1,1.0", false, in, &mask, &err), HP_OK, "%s", err.msg);
    struct hp_evaluator *ev;
    struct hp_metrics *mt;
    cr_assert_eq(hp_evaluator_new(m, d, &ev, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_run(ev, mask, HP_ABLATE_ZERO, &mt, &err), HP_OK, "%s", err.msg);
    const int D = in->d_model;
    for (int s = 0; s < d->n_seqs; s++) {
        float *a = run(m, d, s, NULL), *b = run(m, d, s, mask);
        double dot = 0, na = 0, nb = 0;
        for (int i = 0; i < D; i++) {
            double pa = 0, pb = 0;
            int n = 0;
            for (int t = 0; t < d->seq_len; t++) {
                if (d->attn_mask && !d->attn_mask[(size_t)s * d->seq_len + t])
                    continue;
                double x = a[(size_t)t * D + i], y = b[(size_t)t * D + i];
                if (mode == HP_POOL_CLS && n == 0)
                    pa = x, pb = y;
                else if (mode == HP_POOL_MAX)
                    pa = n ? (x > pa ? x : pa) : x, pb = n ? (y > pb ? y : pb) : y;
                else if (mode == HP_POOL_MEAN)
                    pa += x, pb += y;
                n++;
            }
            dot += pa * pb, na += pa * pa, nb += pb * pb;
        }
        double want = dot / sqrt(na * nb); /* the mean's 1/n cancels in the cosine */
        cr_assert(fabs(mt->seq_cos[s] - want) <= 1e-6, "seq %d: cos %.9f, computed here %.9f", s, mt->seq_cos[s],
                  want);
        free(a), free(b);
    }
    hp_metrics_free(mt);
    hp_evaluator_free(ev);
    hp_mask_free(mask);
    hp_data_free(d);
    hp_model_close(m);
    tu_rmrf(tmp);
}

Test(invariants, pooling_cls_as_declared)
{
    check_pooling("{\"pooling_mode_cls_token\": true, \"pooling_mode_mean_tokens\": false}", HP_POOL_CLS);
}

Test(invariants, pooling_max_as_declared)
{
    check_pooling("{\"pooling_mode_max_tokens\": true, \"pooling_mode_mean_tokens\": false}", HP_POOL_MAX);
}

Test(invariants, pooling_mean_as_declared)
{
    check_pooling("{\"pooling_mode_mean_tokens\": true}", HP_POOL_MEAN);
}

Test(invariants, unsupported_pooling_is_refused)
{
    char tmp[64];
    pooled_copy(tmp, sizeof tmp, "{\"pooling_mode_mean_sqrt_len_tokens\": true}");
    struct hp_error err;
    struct hp_model *m;
    cr_assert_eq(hp_model_open(tmp, &m, &err), HP_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "1_Pooling/config.json: pooling other than exactly one of mean, CLS or max"), "%s",
              err.msg);
    tu_rmrf(tmp);
}
