/*
 * test_export.c -- pruned checkpoints (engine/model/export.c, and model.c reading them).
 *
 * The reference for a checkpoint written without heads P is the original
 * model evaluated with P zero-ablated (checked against Hugging Face's
 * head_mask in test_reference.c, and for checkpoints transformers itself
 * pruned in the gpt2-pruned / bert-mlm-pruned fixtures): every fixture
 * architecture is exported, loaded back and evaluated, and its metrics and
 * outputs must equal the masked original's within 1e-6 relative. Parameter
 * counts are checked against a count by hand. A 16-bit checkpoint, whose
 * matrices stay in the mapping, exports the same bytes as when converted at
 * load, and removing nothing writes every tensor as stored.
 */
#define _DEFAULT_SOURCE /* mkdtemp, in testutil.h */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <signal.h>
#include <unistd.h>

#include "headprune.h"
#include "model.h"
#include "safetensors.h"
#include "testutil.h"

#define REL_TOL 1e-6

static char tmp[64];

static void setup(void) { tu_mkdtemp(tmp, sizeof tmp, "export"); }
static void teardown(void) { tu_rmrf(tmp); }

TestSuite(export, .init = setup, .fini = teardown);

static void fixture_dir(char *buf, size_t n, const char *name)
{
    const char *root = getenv("HP_FIXTURES");
    cr_assert(root, "HP_FIXTURES not set (run through meson test)");
    snprintf(buf, n, "%s/%s", root, name);
}

/* The fixture's held-out data, named by its reference.json. */
static struct hp_data *fixture_data(const char *dir)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/reference.json", dir);
    char *txt = tu_slurp(path, NULL);
    cJSON *ref = cJSON_Parse(txt);
    snprintf(path, sizeof path, "%s/%s", dir, cJSON_GetObjectItem(ref, "data")->valuestring);
    cJSON_Delete(ref);
    free(txt);
    struct hp_data *d;
    struct hp_error err = {0};
    cr_assert_eq(hp_data_load(path, 0, &d, &err), HP_OK, "%s", err.msg);
    return d;
}

static void close_rel(const char *what, double got, double want)
{
    cr_expect(fabs(got - want) <= REL_TOL * fmax(1.0, fabs(want)), "%s: %.10g, the masked original %.10g", what, got,
              want);
}

/* The forward outputs of a and b (masks ma, mb) on every sequence of d agree within REL_TOL of their largest. */
static void same_outputs(const char *what, struct hp_model *a, const struct hp_mask *ma, struct hp_model *b,
                         const struct hp_mask *mb, const struct hp_data *d)
{
    const struct hp_model_info *in = hp_model_get_info(a);
    int W = in->n_labels ? in->n_labels : in->has_lm_head ? in->n_vocab : in->d_model;
    size_t n = (size_t)d->seq_len * W;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    struct hp_error err = {0};
    double maxref = 0, maxdiff = 0;
    for (int s = 0; s < d->n_seqs; s++) {
        size_t off = (size_t)s * d->seq_len;
        const uint8_t *am = d->attn_mask ? d->attn_mask + off : NULL;
        const int32_t *tt = d->type_ids ? d->type_ids + off : NULL;
        cr_assert_eq(hp_model_forward(a, d->ids + off, am, tt, d->seq_len, ma, x, &err), HP_OK, "%s", err.msg);
        cr_assert_eq(hp_model_forward(b, d->ids + off, am, tt, d->seq_len, mb, y, &err), HP_OK, "%s", err.msg);
        size_t rows = in->n_labels ? 1 : (size_t)d->seq_len;
        for (size_t i = 0; i < rows * W; i++) {
            if (!in->n_labels && am && !am[i / W])
                continue;
            maxref = fmax(maxref, fabs(x[i]));
            maxdiff = fmax(maxdiff, fabs(x[i] - y[i]));
        }
    }
    cr_expect(maxdiff <= REL_TOL * fmax(1.0, maxref), "%s: outputs differ by %.3g (largest %.3g)", what, maxdiff, maxref);
    free(x);
    free(y);
}

/* Metrics of model m under mask (NULL = none) on d, by the default (reuse) or the plain path. */
static struct hp_metrics *metrics_of(struct hp_model *m, const struct hp_data *d, const struct hp_mask *mask,
                                     enum hp_ablation abl, bool plain)
{
    struct hp_error err = {0};
    struct hp_evaluator *ev;
    cr_assert_eq(hp_evaluator_new(m, (struct hp_data *)d, &ev, &err), HP_OK, "%s", err.msg);
    hp_evaluator_set_plain(ev, plain);
    struct hp_metrics *mt;
    cr_assert_eq(hp_evaluator_run(ev, mask, abl, &mt, &err), HP_OK, "%s", err.msg);
    hp_evaluator_free(ev);
    return mt;
}

/* Export fixture without spec's heads to tmp/out_name; returns the export's info and the two models. */
static void export_fixture(const char *fixture, const char *spec, const char *out_name, struct hp_model **orig,
                           struct hp_mask **mask, struct hp_model **pruned, struct hp_export_info *info)
{
    char dir[1024], out[1100];
    fixture_dir(dir, sizeof dir, fixture);
    snprintf(out, sizeof out, "%s/%s", tmp, out_name);
    struct hp_error err = {0};
    cr_assert_eq(hp_model_open(dir, orig, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_mask_parse(spec, false, hp_model_get_info(*orig), mask, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_model_export(*orig, *mask, out, info, &err), HP_OK, "%s: %s", fixture, err.msg);
    cr_assert_eq(hp_model_open(out, pruned, &err), HP_OK, "%s: the export does not load: %s", fixture, err.msg);
}

/*
 * Export fixture without spec's heads, load it, and compare it with the
 * original under the mask: which heads it lacks, its parameter count, its
 * metrics on both evaluation paths and its outputs.
 */
static void roundtrip(const char *fixture, const char *spec)
{
    struct hp_model *m, *p;
    struct hp_mask *mask;
    struct hp_export_info info;
    export_fixture(fixture, spec, "out", &m, &mask, &p, &info);
    const struct hp_model_info *in = hp_model_get_info(m), *pi = hp_model_get_info(p);
    const int n = in->n_layers * in->n_heads, n_abl = hp_mask_count_ablated(mask);
    cr_assert_eq(info.n_removed, n_abl, "%s: removed %d of the %d heads asked", fixture, info.n_removed, n_abl);
    cr_assert_eq(pi->n_pruned, n_abl);
    cr_assert_eq(pi->n_layers, in->n_layers);
    cr_assert_eq(pi->n_heads, in->n_heads, "the pruned checkpoint keeps the original head numbering");
    cr_assert_eq(pi->n_kv_heads, in->n_kv_heads);
    cr_assert_eq(pi->d_head, in->d_head);
    for (int i = 0; i < n; i++)
        cr_assert_eq(pi->pruned ? pi->pruned[i] : 0, mask->gate[i] == 0.0f, "%s: head %d.%d", fixture,
                     i / in->n_heads, i % in->n_heads);
    cr_assert_eq(pi->n_params, info.n_params, "%s: the export's count and the loaded model's", fixture);
    cr_assert_str_eq(pi->dtype, in->dtype, "%s: the weights keep their dtype", fixture);
    if (n_abl)
        cr_assert_lt(info.bytes, info.source_bytes);

    char dir[1024];
    fixture_dir(dir, sizeof dir, fixture);
    struct hp_data *d = fixture_data(dir);
    for (int plain = 0; plain <= 1; plain++) {
        struct hp_metrics *want = metrics_of(m, d, mask, HP_ABLATE_ZERO, plain),
                          *got = metrics_of(p, d, NULL, HP_ABLATE_ZERO, plain);
        cr_assert_eq(got->n_tokens, want->n_tokens);
        if (want->has_loss) {
            close_rel("loss", got->loss, want->loss);
            close_rel("acc", got->acc, want->acc);
            for (int s = 0; s < d->n_seqs; s++)
                close_rel("per-sequence loss", got->seq_loss[s], want->seq_loss[s]);
        }
        hp_metrics_free(want);
        hp_metrics_free(got);
    }
    same_outputs(fixture, m, mask, p, NULL, d);
    cr_log_info("%s without %s: %d heads removed, %lld -> %lld parameters, %lld -> %lld bytes", fixture, spec,
                info.n_removed, (long long)in->n_params, (long long)info.n_params, (long long)info.source_bytes,
                (long long)info.bytes);
    hp_data_free(d);
    hp_mask_free(mask);
    hp_model_close(p);
    hp_model_close(m);
}

// --- every architecture, exported and evaluated ------------------------------------

Test(export, gpt2_heads_across_layers) { roundtrip("gpt2-tiny", "0.1,2.0,2.3"); }
Test(export, gpt2_whole_layer) { roundtrip("gpt2-tiny", "1.*"); }
Test(export, gpt2_nothing_removed) { roundtrip("gpt2-tiny", ""); }
Test(export, gpt2_every_head) { roundtrip("gpt2-tiny", "0.*,1.*,2.*"); }
Test(export, gpt2_noprefix) { roundtrip("gpt2-noprefix", "1.0"); }
Test(export, bert_mlm_with_padding) { roundtrip("bert-mlm", "0.0,1.3"); }
Test(export, bert_encoder) { roundtrip("bert-encoder", "0.1,1.*"); }
Test(export, bert_classifier) { roundtrip("bert-cls", "1.0,1.1"); }
Test(export, llama_whole_kv_groups) { roundtrip("llama-gqa", "kv:0.1,kv:1.0"); }
Test(export, llama_query_heads_inside_groups) { roundtrip("llama-gqa", "0.1,1.0,1.3,2.2"); }
Test(export, llama_sharded_source) { roundtrip("llama-gqa-sharded", "kv:2.0"); }
Test(export, llama_tied_bf16_keeps_bf16) { roundtrip("llama-tied-bf16", "0.0,1.3"); }
Test(export, qwen2_biases) { roundtrip("qwen2-bias", "0.1,kv:1.1"); }
Test(export, qwen3_qk_norms) { roundtrip("qwen3-qknorm", "0.1,kv:1.1,2.3"); }
Test(export, phi3_fused_projections) { roundtrip("phi3-fused", "0.1,kv:1.1,2.3"); }
Test(export, phi3_whole_kv_groups) { roundtrip("phi3-fused", "kv:0.0,kv:2.1"); }
Test(export, gemma2_norms_and_caps) { roundtrip("gemma2-softcap", "0.1,kv:1.1,2.3"); }
Test(export, gemma3_local_layers) { roundtrip("gemma3-local", "0.0,kv:1.0,2.2"); }
/* a GGUF model's export: an f32 Hugging Face checkpoint of the dequantized weights (transformers loads it: the
 * check is by hand, docs/gguf.md) */
Test(export, gguf_to_f32_checkpoint) { roundtrip("llama-gguf", "kv:0.1,kv:1.0,1.3"); }
/* a GGUF file named alone: nothing beside it to copy */
Test(export, gguf_file_alone)
{
    char path[1200], out[200];
    fixture_dir(path, sizeof path, "llama-gguf");
    strcat(path, "/model.Q8_0-mixed.gguf");
    snprintf(out, sizeof out, "%s/alone", tmp);
    struct hp_model *m, *p;
    struct hp_mask *mask = hp_mask_new(2, 4);
    struct hp_export_info info;
    struct hp_error err = {0};
    cr_assert_eq(hp_model_open(path, &m, &err), HP_OK, "%s", err.msg);
    mask->gate[1] = 0.0f;
    cr_assert_eq(hp_model_export(m, mask, out, &info, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_model_open(out, &p, &err), HP_OK, "%s", err.msg);
    cr_assert_str_eq(hp_model_get_info(p)->dtype, "f32");
    cr_assert_eq(hp_model_get_info(p)->n_pruned, 1);
    hp_model_close(p);
    hp_model_close(m);
    hp_mask_free(mask);
}
/* query_key_value cut in blocks of a head's q, k and v rows */
Test(export, gpt_neox_per_head_qkv) { roundtrip("neox-parallel", "0.1,2.0,2.3"); }
Test(export, gpt_neox_sequential_tied) { roundtrip("neox-sequential", "0.0,1.2,1.3,2.1"); }
Test(export, stories260K_real_checkpoint) { roundtrip("stories260K", "0.0,0.1,3.*,4.5"); }

Test(export, gpt2_untied_lm_head) { roundtrip("gpt2-untied", "0.1,1.*"); }
Test(export, llama_mlp_bias) { roundtrip("llama-mlp-bias", "0.1,kv:1.0"); }

/*
 * The export without a reference case's heads, evaluated on its own, against
 * the number Hugging Face computed for that case on the unpruned model: the
 * tensors only some checkpoints have (an untied LM head, MLP biases) must
 * survive the export and be read back.
 */
static void export_against_hf(const char *fixture, const char *case_name)
{
    char dir[1024], path[1100];
    fixture_dir(dir, sizeof dir, fixture);
    snprintf(path, sizeof path, "%s/reference.json", dir);
    size_t n;
    char *txt = tu_slurp(path, &n);
    cJSON *ref = cJSON_Parse(txt), *c, *hit = NULL;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(ref, "cases"))
        if (strcmp(cJSON_GetObjectItem(c, "name")->valuestring, case_name) == 0)
            hit = c;
    cr_assert(hit, "%s: no case %s", path, case_name);
    struct hp_model *m, *p;
    struct hp_mask *mask;
    struct hp_export_info info;
    export_fixture(fixture, cJSON_GetObjectItem(hit, "mask")->valuestring, "hf", &m, &mask, &p, &info);
    struct hp_data *d = fixture_data(dir);
    struct hp_metrics *got = metrics_of(p, d, NULL, HP_ABLATE_ZERO, false);
    /* float32 on both sides, different orders of summation: test_reference.c's tolerance */
    const double want = cJSON_GetObjectItem(hit, "loss")->valuedouble;
    cr_expect(fabs(got->loss - want) <= 1e-5 * fmax(1.0, fabs(want)), "%s without %s: loss %.9g, Hugging Face %.9g",
              fixture, case_name, got->loss, want);
    hp_metrics_free(got);
    hp_data_free(d);
    hp_mask_free(mask);
    hp_model_close(p);
    hp_model_close(m);
    cJSON_Delete(ref);
    free(txt);
}

Test(export, gpt2_untied_head_against_transformers) { export_against_hf("gpt2-untied", "mix"); }
Test(export, llama_mlp_bias_against_transformers) { export_against_hf("llama-mlp-bias", "mix"); }

/* Removing three heads of GPT-2 (d_model 32, d_head 8) drops, per head, its
 * q, k and v columns of c_attn (3 x 32 x 8), their biases (3 x 8) and its
 * rows of c_proj (8 x 32): 3 x 1048 = 3144 parameters. */
Test(export, gpt2_parameter_count_by_hand)
{
    struct hp_model *m, *p;
    struct hp_mask *mask;
    struct hp_export_info info;
    export_fixture("gpt2-tiny", "0.1,2.0,2.3", "out", &m, &mask, &p, &info);
    cr_assert_eq(hp_model_get_info(m)->n_params - info.n_params, 3144);
    hp_mask_free(mask);
    hp_model_close(p);
    hp_model_close(m);
}

/* Llama (d_model 32, d_head 8, 2 KV groups of 2): query head 0.1 alone takes
 * its q_proj rows and o_proj columns (2 x 8 x 32); a whole group also takes
 * its k_proj and v_proj rows: (2 + 2 + 2) x 8 x 32 a group. */
Test(export, llama_parameter_count_by_hand)
{
    struct hp_model *m, *p;
    struct hp_mask *mask;
    struct hp_export_info info;
    export_fixture("llama-gqa", "0.1", "one", &m, &mask, &p, &info);
    cr_assert_eq(hp_model_get_info(m)->n_params - info.n_params, 512);
    cr_assert_not(info.hf_loadable, "part of a KV group: transformers cannot build it");
    hp_mask_free(mask);
    hp_model_close(p);
    hp_model_close(m);
    export_fixture("llama-gqa", "kv:0.0,kv:1.0,kv:2.1", "group", &m, &mask, &p, &info);
    cr_assert_eq(hp_model_get_info(m)->n_params - info.n_params, 3 * 6 * 8 * 32);
    cr_assert(info.hf_loadable, "one whole group in every layer: %s", info.why_not);
    hp_mask_free(mask);
    hp_model_close(p);
    hp_model_close(m);
}

/* Pruning a pruned checkpoint again removes the union; a head pruned already is no change. */
Test(export, prune_a_pruned_checkpoint_again)
{
    char dir[1024], out[1100];
    fixture_dir(dir, sizeof dir, "gpt2-pruned"); /* 0.1, 2.0, 2.3, pruned by transformers */
    snprintf(out, sizeof out, "%s/again", tmp);
    struct hp_error err = {0};
    struct hp_model *hf, *again, *orig;
    cr_assert_eq(hp_model_open(dir, &hf, &err), HP_OK, "%s", err.msg);
    struct hp_mask *more;
    cr_assert_eq(hp_mask_parse("0.1,1.2,2.1", false, hp_model_get_info(hf), &more, &err), HP_OK, "%s", err.msg);
    struct hp_export_info info;
    cr_assert_eq(hp_model_export(hf, more, out, &info, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(info.n_removed, 2, "0.1 was pruned already");
    cr_assert_eq(info.n_pruned, 5);
    cr_assert_eq(hp_model_open(out, &again, &err), HP_OK, "%s", err.msg);
    fixture_dir(dir, sizeof dir, "gpt2-tiny"); /* the same weights, unpruned */
    cr_assert_eq(hp_model_open(dir, &orig, &err), HP_OK, "%s", err.msg);
    struct hp_mask *all;
    cr_assert_eq(hp_mask_parse("0.1,1.2,2.0,2.1,2.3", false, hp_model_get_info(orig), &all, &err), HP_OK, "%s",
                 err.msg);
    struct hp_data *d = fixture_data(dir);
    struct hp_metrics *want = metrics_of(orig, d, all, HP_ABLATE_ZERO, false),
                      *got = metrics_of(again, d, NULL, HP_ABLATE_ZERO, false);
    close_rel("loss", got->loss, want->loss);
    same_outputs("pruned twice", orig, all, again, NULL, d);
    hp_metrics_free(want);
    hp_metrics_free(got);
    hp_data_free(d);
    hp_mask_free(all);
    hp_mask_free(more);
    hp_model_close(orig);
    hp_model_close(again);
    hp_model_close(hf);
}

/* Under mean ablation a pruned head stays absent (zero): ablating it again changes nothing, on both paths. */
Test(export, pruned_heads_stay_zero_under_mean_ablation)
{
    char dir[1024];
    fixture_dir(dir, sizeof dir, "bert-mlm-pruned"); /* 0.0, 0.3, 1.2 pruned */
    struct hp_error err = {0};
    struct hp_model *m;
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    struct hp_mask *mask;
    cr_assert_eq(hp_mask_parse("0.0,0.3,1.2", false, hp_model_get_info(m), &mask, &err), HP_OK, "%s", err.msg);
    struct hp_data *d = fixture_data(dir);
    for (int plain = 0; plain <= 1; plain++)
        for (int abl = HP_ABLATE_MEAN; abl <= HP_ABLATE_MEAN_POS; abl++) {
            struct hp_metrics *a = metrics_of(m, d, NULL, HP_ABLATE_ZERO, plain),
                              *b = metrics_of(m, d, mask, (enum hp_ablation)abl, plain);
            cr_expect_eq(a->loss, b->loss, "%s path, %s: %.9g vs %.9g", plain ? "plain" : "reuse",
                         hp_ablation_name((enum hp_ablation)abl), a->loss, b->loss);
            cr_expect_eq(b->kl, 0.0);
            hp_metrics_free(a);
            hp_metrics_free(b);
        }
    hp_data_free(d);
    hp_mask_free(mask);
    hp_model_close(m);
}

// --- what must be refused -------------------------------------------------------------

static struct hp_model *open_fixture(const char *name)
{
    char dir[1024];
    fixture_dir(dir, sizeof dir, name);
    struct hp_model *m;
    struct hp_error err = {0};
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    return m;
}

static bool exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* tmp holds exactly n entries (no partial directory left behind). */
static void entries_in_tmp(int n)
{
    char cmd[200];
    snprintf(cmd, sizeof cmd, "test $(ls -A %s | wc -l) -eq %d", tmp, n);
    cr_assert_eq(system(cmd), 0, "%s holds other than %d entries (a partial export left behind?)", tmp, n);
}

Test(export, refuses_an_existing_directory)
{
    struct hp_model *m = open_fixture("gpt2-tiny");
    struct hp_mask *mask = hp_mask_new(3, 4);
    mask->gate[1] = 0;
    char out[200];
    snprintf(out, sizeof out, "%s/taken", tmp);
    cr_assert_eq(mkdir(out, 0755), 0);
    struct hp_export_info info;
    struct hp_error err = {0};
    cr_assert_eq(hp_model_export(m, mask, out, &info, &err), HP_ERR_ARG);
    cr_assert(strstr(err.msg, "taken: already exists"), "%s", err.msg);
    entries_in_tmp(1);
    hp_mask_free(mask);
    hp_model_close(m);
}

Test(export, refuses_fractional_gates_and_a_foreign_shape)
{
    struct hp_model *m = open_fixture("gpt2-tiny");
    struct hp_mask *half = hp_mask_new(3, 4), *other = hp_mask_new(2, 4);
    half->gate[5] = 0.5f;
    char out[200];
    snprintf(out, sizeof out, "%s/x", tmp);
    struct hp_export_info info;
    struct hp_error err = {0};
    cr_assert_eq(hp_model_export(m, half, out, &info, &err), HP_ERR_ARG);
    cr_assert(strstr(err.msg, "head 1.1 has gate 0.5"), "%s", err.msg);
    cr_assert_eq(hp_model_export(m, other, out, &info, &err), HP_ERR_ARG);
    cr_assert(strstr(err.msg, "2 x 4 heads"), "%s", err.msg);
    entries_in_tmp(0);
    hp_mask_free(half);
    hp_mask_free(other);
    hp_model_close(m);
}

/* OLMo 2's q/k norms run over every head: without one the others' queries change, so no checkpoint is the
 * masked model; the export says so and writes nothing. A full copy (nothing removed) is written. */
Test(export, refuses_to_cut_an_olmo2)
{
    struct hp_model *m = open_fixture("olmo2-post-norms");
    struct hp_mask *mask = hp_mask_new(3, 4);
    mask->gate[6] = 0.0f;
    char out[200];
    snprintf(out, sizeof out, "%s/olmo2", tmp);
    struct hp_export_info info;
    struct hp_error err = {0};
    cr_assert_eq(hp_model_export(m, mask, out, &info, &err), HP_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "without head 1.2 would not be the masked model"), "%s", err.msg);
    entries_in_tmp(0);
    mask->gate[6] = 1.0f;
    cr_assert_eq(hp_model_export(m, mask, out, &info, &err), HP_OK, "%s", err.msg);
    hp_mask_free(mask);
    hp_model_close(m);
}

Test(export, a_missing_parent_folder_leaves_nothing)
{
    struct hp_model *m = open_fixture("gpt2-tiny");
    struct hp_mask *mask = hp_mask_new(3, 4);
    char out[200];
    snprintf(out, sizeof out, "%s/no/such/place", tmp);
    struct hp_export_info info;
    struct hp_error err = {0};
    cr_assert_eq(hp_model_export(m, mask, out, &info, &err), HP_ERR_IO);
    /* issue 23: named as OUT's folder, not as the export's own OUT.partial-PID */
    char want[512];
    snprintf(want, sizeof want, "%s: folder '%s/no/such' does not exist (create it first)", out, tmp);
    cr_assert_str_eq(err.msg, want);
    entries_in_tmp(0);
    hp_mask_free(mask);
    hp_model_close(m);
}

/* A full disk (here a file size limit) fails the write with a message and leaves no directory. */
Test(export, a_failed_write_leaves_nothing)
{
    struct hp_model *m = open_fixture("stories260K");
    struct hp_mask *mask = hp_mask_new(5, 8);
    mask->gate[0] = 0;
    char out[200];
    snprintf(out, sizeof out, "%s/full", tmp);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim.rlim_cur = 64 << 10;
    lim.rlim_max = old.rlim_max;
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    struct hp_export_info info;
    struct hp_error err = {0};
    enum hp_status st = hp_model_export(m, mask, out, &info, &err);
    setrlimit(RLIMIT_FSIZE, &old);
    cr_assert_eq(st, HP_ERR_IO, "%s", err.msg);
    cr_assert(strstr(err.msg, "model.safetensors: cannot write: File too large"), "%s", err.msg);
    cr_assert_not(exists(out));
    entries_in_tmp(0);
    hp_mask_free(mask);
    hp_model_close(m);
}

/*
 * A model folder with the fixture's weights and its config.json with its
 * pruned-head records replaced by extra (JSON members); opening it must fail
 * with words in the message.
 */
static void bad_pruned_config(const char *fixture, const char *extra, const char *words)
{
    char dir[1024], from[1200], to[1200], model[200];
    fixture_dir(dir, sizeof dir, fixture);
    snprintf(model, sizeof model, "%s/m", tmp);
    cr_assert_eq(mkdir(model, 0755), 0);
    snprintf(from, sizeof from, "%s/model.safetensors", dir);
    snprintf(to, sizeof to, "%s/model.safetensors", model);
    cr_assert_eq(symlink(from, to), 0);
    snprintf(from, sizeof from, "%s/config.json", dir);
    char *txt = tu_slurp(from, NULL);
    cJSON *c = cJSON_Parse(txt);
    cJSON_DeleteItemFromObject(c, "pruned_heads");
    cJSON_DeleteItemFromObject(c, "headprune");
    char *body = cJSON_PrintUnformatted(c);
    size_t n = strlen(body), cap = n + strlen(extra) + 4;
    char *edited = malloc(cap);
    snprintf(edited, cap, "%.*s,%s}", (int)n - 1, body, extra);
    snprintf(to, sizeof to, "%s/config.json", model);
    tu_spit(to, edited, strlen(edited));
    struct hp_model *m = NULL;
    struct hp_error err = {0};
    cr_assert_neq(hp_model_open(model, &m, &err), HP_OK, "%s opened", extra);
    cr_assert_null(m);
    cr_assert(strstr(err.msg, words), "%s: got '%s', wanted '%s'", extra, err.msg, words);
    free(edited);
    free(body);
    cJSON_Delete(c);
    free(txt);
}

Test(export, bad_pruned_heads_layer)
{
    bad_pruned_config("gpt2-pruned", "\"pruned_heads\":{\"7\":[1]}",
                      "config.json: \"pruned_heads\": layer \"7\" is not one of 0..2");
}
Test(export, bad_pruned_heads_head)
{
    bad_pruned_config("gpt2-pruned", "\"pruned_heads\":{\"0\":[4]}", "layer 0 lists a head that is not one of 0..3");
}
Test(export, bad_pruned_heads_not_a_list)
{
    bad_pruned_config("gpt2-pruned", "\"pruned_heads\":{\"0\":1}", "layer 0 must list heads");
}
Test(export, bad_pruned_heads_not_an_object)
{
    bad_pruned_config("gpt2-pruned", "\"pruned_heads\":[1]", "\"pruned_heads\" must be an object");
}
/* the weights lack three heads; a config naming two must not be read as if it were right */
Test(export, pruned_heads_disagreeing_with_the_weights)
{
    bad_pruned_config("gpt2-pruned", "\"pruned_heads\":{\"0\":[1],\"2\":[0]}",
                      "has shape [32, 48] but config.json implies [32, 72]");
}
Test(export, pruned_heads_disagreeing_records)
{
    bad_pruned_config("gpt2-pruned",
                      "\"pruned_heads\":{\"0\":[1],\"2\":[0,3]},\"headprune\":{\"n_heads\":4,\"pruned_heads\":{\"0\":[1]}}",
                      "name different heads");
}
Test(export, hf_pruned_heads_on_llama)
{
    bad_pruned_config("llama-gqa", "\"pruned_heads\":{\"0\":[1]}", "is Hugging Face's for GPT-2 and BERT only");
}
Test(export, headprune_record_not_an_object)
{
    bad_pruned_config("gpt2-tiny", "\"headprune\":3", "\"headprune\" must be an object");
}

// --- 16-bit weights: written as stored -------------------------------------------------

static bool same_file(const char *a, const char *b)
{
    size_t na, nb;
    char *x = tu_slurp(a, &na), *y = tu_slurp(b, &nb);
    bool same = na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}


/* Every tensor of a (a safetensors file) is in b under its name, with its dtype, shape and bytes. */
static void tensors_as_stored(const char *a, const char *b)
{
    struct hp_st_set *x, *y;
    struct hp_error err = {0};
    cr_assert_eq(hp_st_open(a, &x, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_st_open(b, &y, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_st_count(x), hp_st_count(y));
    for (int i = 0; i < hp_st_count(x); i++) {
        const struct hp_st_tensor *t = hp_st_at(x, i), *u = hp_st_find(y, t->name);
        cr_assert(u, "%s: no tensor %s", b, t->name);
        cr_assert_str_eq(u->dtype_name, t->dtype_name, "%s", t->name);
        cr_assert_eq(u->n_dims, t->n_dims);
        cr_assert(memcmp(u->shape, t->shape, (size_t)t->n_dims * sizeof *t->shape) == 0, "%s: shape", t->name);
        cr_assert(u->nbytes == t->nbytes && memcmp(u->data, t->data, t->nbytes) == 0, "%s: another value", t->name);
    }
    hp_st_close(x);
    hp_st_close(y);
}

/*
 * A 16-bit checkpoint's matrices stay in the mapping (mat.h): exporting
 * it writes the same bytes as exporting it converted at load
 * (HP_MODEL_CONVERT), whose export tools/check_export.py showed transformers;
 * removing nothing writes every tensor as stored, dtype included.
 */
static void export_as_stored(const char *fixture, const char *spec)
{
    char dir[1024], out[2][1100], path[2][1200], src[1200];
    fixture_dir(dir, sizeof dir, fixture);
    struct hp_error err = {0};
    for (int conv = 0; conv <= 1; conv++) {
        struct hp_model *m;
        struct hp_mask *mask;
        struct hp_export_info info;
        cr_assert_eq(hp_model_open_ex(dir, conv ? HP_MODEL_CONVERT : 0, &m, &err), HP_OK, "%s", err.msg);
        cr_assert_eq(m->layers[0].wq.dt == HP_DT_F32, conv, "%s: the matrices %s", fixture,
                     conv ? "are converted at load" : "stay 16-bit");
        cr_assert_eq(hp_mask_parse(spec, false, hp_model_get_info(m), &mask, &err), HP_OK, "%s", err.msg);
        snprintf(out[conv], sizeof out[conv], "%s/%s", tmp, conv ? "converted" : "streamed");
        cr_assert_eq(hp_model_export(m, mask, out[conv], &info, &err), HP_OK, "%s", err.msg);
        snprintf(path[conv], sizeof path[conv], "%s/model.safetensors", out[conv]);
        hp_mask_free(mask);
        if (!conv) { /* nothing removed: the source's tensors, as stored */
            struct hp_mask *none;
            char all[1100];
            snprintf(all, sizeof all, "%s/all", tmp);
            cr_assert_eq(hp_mask_parse("", false, hp_model_get_info(m), &none, &err), HP_OK, "%s", err.msg);
            cr_assert_eq(hp_model_export(m, none, all, &info, &err), HP_OK, "%s", err.msg);
            hp_mask_free(none);
            snprintf(src, sizeof src, "%s/model.safetensors", dir);
            char written[1200];
            snprintf(written, sizeof written, "%s/model.safetensors", all);
            tensors_as_stored(src, written);
        }
        hp_model_close(m);
    }
    cr_assert(same_file(path[0], path[1]),
              "%s without %s: the streamed model's export differs from the converted one's", fixture, spec);
}

Test(export, bf16_streamed_writes_as_converted) { export_as_stored("llama-tied-bf16", "0.0,1.3"); }
Test(export, f16_streamed_writes_as_converted) { export_as_stored("qwen2-bias", "0.1,kv:1.1"); }

// --- what transformers loaded (tools/check_export.py) ------------------------------------

/*
 * tests/fixtures/exported/<name> holds what `headprune prune` wrote and
 * transformers loaded (or refused) in tools/check_export.py, with its
 * evidence in hf-check.json. The exporter as it is now must write the same
 * bytes, and headprune must evaluate the original under the mask to the
 * metrics transformers computed from the export.
 */
static void hf_checked(const char *name)
{
    char dir[1024], path[1200], out[200], src[1100];
    fixture_dir(dir, sizeof dir, "exported");
    snprintf(path, sizeof path, "%s/%s/hf-check.json", dir, name);
    char *txt = tu_slurp(path, NULL);
    cJSON *ev = cJSON_Parse(txt);
    cr_assert(ev, "%s: bad JSON", path);
    const char *source = cJSON_GetObjectItem(ev, "source")->valuestring, *spec = cJSON_GetObjectItem(ev, "mask")->valuestring;

    struct hp_model *m, *p;
    struct hp_mask *mask;
    struct hp_export_info info;
    export_fixture(source, spec, name, &m, &mask, &p, &info);
    const char *files[] = {"model.safetensors", "config.json"};
    for (int i = 0; i < 2; i++) {
        snprintf(out, sizeof out, "%s/%s/%s", tmp, name, files[i]);
        snprintf(path, sizeof path, "%s/%s/%s", dir, name, files[i]);
        cr_assert(same_file(out, path), "%s: the exporter now writes another %s than transformers was shown "
                  "(rerun tools/check_export.py)", name, files[i]);
    }
    bool loads = cJSON_IsTrue(cJSON_GetObjectItem(ev, "transformers_loads"));
    cr_assert_eq(info.hf_loadable, loads, "%s: the export says transformers %s load it; transformers %s", name,
                 info.hf_loadable ? "can" : "cannot", loads ? "did" : "refused");
    if (loads) {
        fixture_dir(src, sizeof src, source);
        struct hp_data *d = fixture_data(src);
        cJSON *hf = cJSON_GetObjectItem(ev, "metrics_vs_original");
        struct hp_metrics *mt = metrics_of(m, d, mask, HP_ABLATE_ZERO, false);
        const char *keys[] = {"loss", "acc", "kl", "cos"};
        const double got[] = {mt->loss, mt->acc, mt->kl, mt->cos};
        int checked = 0;
        for (int i = 0; i < 4; i++) {
            cJSON *v = cJSON_GetObjectItem(hf, keys[i]);
            if (!v)
                continue;
            checked++;
            cr_expect(fabs(got[i] - v->valuedouble) <= 1e-5 * fmax(1.0, fabs(v->valuedouble)),
                      "%s: %s %.9g here, %.9g from the export in transformers", name, keys[i], got[i], v->valuedouble);
        }
        cr_assert_gt(checked, 0);
        hp_metrics_free(mt);
        hp_data_free(d);
    }
    hp_mask_free(mask);
    hp_model_close(p);
    hp_model_close(m);
    cJSON_Delete(ev);
    free(txt);
}

Test(export, transformers_loads_gpt2) { hf_checked("gpt2-tiny"); }
Test(export, transformers_loads_bert_mlm) { hf_checked("bert-mlm"); }
Test(export, transformers_loads_bert_encoder) { hf_checked("bert-encoder"); }
Test(export, transformers_loads_llama_without_whole_groups) { hf_checked("llama-gqa-groups"); }
Test(export, transformers_loads_llama_bf16) { hf_checked("llama-tied-bf16"); }
Test(export, transformers_loads_qwen2) { hf_checked("qwen2-bias"); }
Test(export, transformers_loads_qwen3) { hf_checked("qwen3-qknorm"); }
Test(export, transformers_loads_phi3) { hf_checked("phi3-fused"); }
Test(export, transformers_loads_gemma2) { hf_checked("gemma2-softcap"); }
Test(export, transformers_loads_gemma3) { hf_checked("gemma3-local"); }
Test(export, transformers_refuses_a_pruned_gpt_neox) { hf_checked("neox-parallel"); }
Test(export, transformers_refuses_uneven_llama) { hf_checked("llama-gqa-uneven"); }
Test(export, transformers_refuses_a_layer_without_heads) { hf_checked("gpt2-empty-layer"); }

/* Issue 23, item 6: the output's name (1024 bytes), its temporary OUT.partial-PID and the copied files' names
 * (2048) were fixed-size. A checkpoint written under 2,500 bytes of folder loads back, its files copied. */
Test(export, writes_under_a_long_folder)
{
    struct hp_model *m = open_fixture("gpt2-tiny"), *back = NULL;
    struct hp_mask *mask = hp_mask_new(3, 4);
    mask->gate[1] = 0;
    char *deep = tu_long_dir(tmp, 2500), *out = malloc(3000), *gen = malloc(3100);
    sprintf(out, "%s/out", deep);
    sprintf(gen, "%s/generation_config.json", out);
    struct hp_export_info info;
    struct hp_error err = {0};
    cr_assert_eq(hp_model_export(m, mask, out, &info, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_model_open(out, &back, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_model_get_info(back)->n_pruned, 1);
    cr_assert_eq(access(gen, F_OK), 0, "generation_config.json is copied");
    hp_model_close(back);
    free(gen);
    free(out);
    free(deep);
    hp_mask_free(mask);
    hp_model_close(m);
}

