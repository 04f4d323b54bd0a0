/*
 * test_eval.c -- what the evaluator refuses rather than measure wrongly.
 *
 *  - A metric that is not a finite number (NaN weights) is an error naming
 *    the variant and the first layer that made it, on both paths, and a
 *    sweep over such a model stores nothing.
 *  - A row that is all padding is refused, naming the row.
 *  - Text .jsonl on a causal LM (no token types) evaluates, equal to the
 *    same ids given as an ids .jsonl.
 */
#define _DEFAULT_SOURCE
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "headprune.h"
#include "testutil.h"

static char tmp[64];

static void setup(void)
{
    tu_mkdtemp(tmp, sizeof tmp, "eval");
}

static void teardown(void)
{
    tu_rmrf(tmp);
}

TestSuite(eval, .init = setup, .fini = teardown);

static void fixture_file(const char *model, const char *name, char *out, size_t n)
{
    snprintf(out, n, "%s/%s/%s", getenv("HP_FIXTURES"), model, name);
}

/* A copy of fixture model's config.json and model.safetensors in tmp/dir, with tensor (if any) set to NaN. */
static void copy_with_nan(const char *model, const char *dir, const char *tensor)
{
    char src[1024], dst[1024];
    snprintf(dst, sizeof dst, "%s/%s", tmp, dir);
    cr_assert_eq(mkdir(dst, 0777), 0);
    size_t n;
    fixture_file(model, "config.json", src, sizeof src);
    char *cfg = tu_slurp(src, &n);
    snprintf(dst, sizeof dst, "%s/%s/config.json", tmp, dir);
    tu_spit(dst, cfg, n);
    free(cfg);
    fixture_file(model, "model.safetensors", src, sizeof src);
    char *st = tu_slurp(src, &n);
    if (tensor) {
        uint64_t hlen;
        memcpy(&hlen, st, 8);
        cJSON *h = cJSON_ParseWithLength(st + 8, hlen);
        cJSON *t = cJSON_GetObjectItemCaseSensitive(h, tensor);
        cr_assert(t, "%s has no %s", src, tensor);
        cJSON *off = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
        size_t b = (size_t)cJSON_GetArrayItem(off, 0)->valuedouble, e = (size_t)cJSON_GetArrayItem(off, 1)->valuedouble;
        float nan = NAN;
        for (size_t i = 8 + hlen + b; i < 8 + hlen + e; i += 4)
            memcpy(st + i, &nan, 4);
        cJSON_Delete(h);
    }
    snprintf(dst, sizeof dst, "%s/%s/model.safetensors", tmp, dir);
    tu_spit(dst, st, n);
    free(st);
}

/* Evaluate dir (in tmp) on data under mask (NULL: none) and abl on either path; the status, err filled. */
static enum hp_status eval_dir(const char *dir, const char *data, const char *mask, enum hp_ablation abl, bool plain,
                               struct hp_error *err)
{
    char d[1024];
    snprintf(d, sizeof d, "%s/%s", tmp, dir);
    struct hp_model *m;
    struct hp_data *hd;
    struct hp_evaluator *ev;
    cr_assert_eq(hp_model_open(d, &m, err), HP_OK, "%s", err->msg);
    const struct hp_model_info *in = hp_model_get_info(m);
    cr_assert_eq(hp_data_load(data, 0, &hd, err), HP_OK, "%s", err->msg);
    cr_assert_eq(hp_evaluator_new(m, hd, &ev, err), HP_OK, "%s", err->msg);
    hp_evaluator_set_plain(ev, plain);
    struct hp_mask *mk = NULL;
    if (mask)
        cr_assert_eq(hp_mask_parse(mask, false, in, &mk, err), HP_OK, "%s",
                     err->msg);
    struct hp_metrics *mt = NULL;
    enum hp_status st = hp_evaluator_run(ev, mk, abl, &mt, err);
    if (st == HP_OK)
        cr_assert(isfinite(mt->has_loss ? mt->loss : mt->cos), "a non-finite metric came back as a result");
    hp_metrics_free(mt);
    hp_mask_free(mk);
    hp_evaluator_free(ev);
    hp_data_free(hd);
    hp_model_close(m);
    return st;
}

static void expect_nonfinite(const char *dir, const char *data, const char *mask, enum hp_ablation abl,
                             const char *variant, const char *where)
{
    for (int plain = 0; plain < 2; plain++) {
        struct hp_error err = {0};
        enum hp_status st = eval_dir(dir, data, mask, abl, plain, &err);
        cr_assert_neq(st, HP_OK, "%s (%s path): a NaN model evaluated", dir, plain ? "plain" : "reuse");
        cr_assert(strstr(err.msg, "not finite") && strstr(err.msg, variant) && strstr(err.msg, where),
                  "%s: the message does not say '%s' ... '%s': %s", dir, variant, where, err.msg);
    }
}

Test(eval, nan_weights_are_an_error_naming_the_variant_and_the_layer)
{
    char data[1024];
    fixture_file("gpt2-tiny", "data.npy", data, sizeof data);
    copy_with_nan("gpt2-tiny", "attn1", "transformer.h.1.attn.c_proj.weight");
    expect_nonfinite("attn1", data, NULL, HP_ABLATE_ZERO, "the unmasked model", "layer 1's attention");
    expect_nonfinite("attn1", data, "0.1", HP_ABLATE_ZERO, "the variant ablating 0.1", "layer 1's attention");
    /* mean ablation: the statistics themselves are refused */
    expect_nonfinite("attn1", data, "0.1", HP_ABLATE_MEAN, "head outputs", "layer 1's attention");
    copy_with_nan("gpt2-tiny", "mlp2", "transformer.h.2.mlp.c_fc.weight");
    expect_nonfinite("mlp2", data, "2.0", HP_ABLATE_ZERO, "the variant ablating 2.0", "layer 2's MLP");
    copy_with_nan("gpt2-tiny", "emb", "transformer.wpe.weight");
    expect_nonfinite("emb", data, NULL, HP_ABLATE_ZERO, "the unmasked model", "the embeddings");
    /* an encoder's cosine: NaN embeddings are not a cosine of 0, nor 1 unmasked */
    fixture_file("bert-encoder", "data.jsonl", data, sizeof data);
    copy_with_nan("bert-encoder", "enc", "encoder.layer.1.attention.output.dense.weight");
    expect_nonfinite("enc", data, NULL, HP_ABLATE_ZERO, "the unmasked model", "layer 1's attention");
    expect_nonfinite("enc", data, "0.2", HP_ABLATE_ZERO, "the variant ablating 0.2", "layer 1's attention");
    /* the same copy without NaN evaluates: the copying is not what fails */
    copy_with_nan("gpt2-tiny", "clean", NULL);
    struct hp_error err = {0};
    fixture_file("gpt2-tiny", "data.npy", data, sizeof data);
    cr_assert_eq(eval_dir("clean", data, "0.1", HP_ABLATE_MEAN, false, &err), HP_OK, "%s", err.msg);
}

/* NaN in the queries alone: the layer's attention scores are NaN while its values are not. The softmax
 * makes such a row NaN, as Hugging Face's does, not uniform (finite and wrong), so the loss is not finite. */
Test(eval, nan_queries_alone_are_an_error)
{
    char data[1024];
    fixture_file("llama-gqa", "data.npy", data, sizeof data);
    copy_with_nan("llama-gqa", "q2", "model.layers.2.self_attn.q_proj.weight");
    expect_nonfinite("q2", data, NULL, HP_ABLATE_ZERO, "the unmasked model", "layer 2's attention");
}

Test(eval, a_sweep_over_a_nan_model_fails_and_stores_no_result)
{
    char data[1024], plan[1024], db[1024], cmd[4096];
    fixture_file("gpt2-tiny", "data.npy", data, sizeof data);
    copy_with_nan("gpt2-tiny", "attn1", "transformer.h.2.attn.c_proj.weight");
    snprintf(plan, sizeof plan, "%s/p.yaml", tmp);
    FILE *f = fopen(plan, "w");
    fprintf(f, "name: p\nmodel: attn1\ndata: %s\nstudies: [single, {iterative: {prune: 25%%}}]\n", data);
    fclose(f);
    snprintf(db, sizeof db, "%s/r.db", tmp);
    snprintf(cmd, sizeof cmd, "%s run %s --db %s --quiet 2>%s/err", getenv("HP_HEADPRUNE"), plan, db, tmp);
    int rc = system(cmd);
    cr_assert(WIFEXITED(rc) && WEXITSTATUS(rc) == 1, "run over a NaN model: status %d", rc);
    char ep[1024];
    snprintf(ep, sizeof ep, "%s/err", tmp);
    char *e = tu_slurp(ep, NULL);
    cr_assert(strstr(e, "not finite in layer 2's attention"), "stderr: %s", e);
    free(e);
    if (access(db, F_OK) == 0) {
        sqlite3 *h;
        sqlite3_stmt *st;
        cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        cr_assert_eq(sqlite3_prepare_v2(h, "SELECT count(*) FROM results", -1, &st, NULL), SQLITE_OK);
        cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
        cr_assert_eq(sqlite3_column_int(st, 0), 0, "a NaN model's results were stored");
        sqlite3_finalize(st);
        sqlite3_close(h);
    }
}

Test(eval, a_row_of_only_padding_is_refused)
{
    char dir[1024], data[1100];
    snprintf(dir, sizeof dir, "%s/bert-encoder", getenv("HP_FIXTURES"));
    snprintf(data, sizeof data, "%s/pad.jsonl", tmp);
    FILE *f = fopen(data, "w");
    fprintf(f, "{\"ids\": [2, 40, 44, 3], \"attention_mask\": [1, 1, 1, 1]}\n"
               "{\"ids\": [1, 2, 3, 0], \"attention_mask\": [0, 0, 0, 0]}\n");
    fclose(f);
    struct hp_error err = {0};
    struct hp_model *m;
    struct hp_data *d;
    struct hp_evaluator *ev = NULL;
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_data_load(data, 0, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_new(m, d, &ev, &err), HP_ERR_ARG);
    cr_assert(strstr(err.msg, "pad.jsonl") && strstr(err.msg, "row 1") && strstr(err.msg, "all padding"), "%s", err.msg);
    cr_assert_null(ev);
    hp_data_free(d);
    hp_model_close(m);
}

Test(eval, text_jsonl_on_a_causal_lm_equals_its_ids)
{
    /* stories260K (a causal Llama, no token types) with a small WordPiece vocabulary beside it */
    char dir[1024], src[1024], dst[1200];
    snprintf(dir, sizeof dir, "%s/lm", tmp);
    cr_assert_eq(mkdir(dir, 0777), 0);
    const char *files[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        fixture_file("stories260K", files[i], src, sizeof src);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        cr_assert_eq(symlink(src, dst), 0);
    }
    snprintf(dst, sizeof dst, "%s/vocab.txt", dir);
    const char *vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nworld\nthe\ncat\n##s\n";
    tu_spit(dst, vocab, strlen(vocab));
    const char *texts[] = {"hello world", "the cats hello the world cat", "cat"};
    char text_path[1100], ids_path[1100];
    snprintf(text_path, sizeof text_path, "%s/t.jsonl", tmp);
    snprintf(ids_path, sizeof ids_path, "%s/i.jsonl", tmp);
    FILE *ft = fopen(text_path, "w"), *fi = fopen(ids_path, "w");
    struct hp_error err = {0};
    struct hp_tokenizer *t;
    cr_assert_eq(hp_tokenizer_open(dir, &t, &err), HP_OK, "%s", err.msg);
    int longest = 0;
    struct hp_encoding enc[3];
    for (int r = 0; r < 3; r++) {
        fprintf(ft, "{\"text\": \"%s\"}\n", texts[r]);
        cr_assert_eq(hp_tokenizer_encode(t, texts[r], strlen(texts[r]), NULL, 0, true, &enc[r], &err), HP_OK);
        longest = enc[r].n > longest ? enc[r].n : longest;
    }
    for (int r = 0; r < 3; r++) {
        fprintf(fi, "{\"ids\": [");
        for (int k = 0; k < longest; k++)
            fprintf(fi, "%s%d", k ? ", " : "", k < enc[r].n ? enc[r].ids[k] : 0);
        fprintf(fi, "], \"attention_mask\": [");
        for (int k = 0; k < longest; k++)
            fprintf(fi, "%s%d", k ? ", " : "", k < enc[r].n);
        fprintf(fi, "]}\n");
        hp_encoding_free(&enc[r]);
    }
    hp_tokenizer_free(t);
    fclose(ft);
    fclose(fi);
    struct hp_model *m;
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    double loss[2];
    const char *paths[] = {text_path, ids_path};
    for (int i = 0; i < 2; i++) {
        struct hp_data *d;
        struct hp_evaluator *ev;
        struct hp_metrics *mt;
        cr_assert_eq(hp_data_load_for(paths[i], dir, hp_model_get_info(m), 0, &d, &err), HP_OK, "%s", err.msg);
        cr_assert_null(d->type_ids, "%s: token types given to a model that has none", paths[i]);
        cr_assert_eq(hp_evaluator_new(m, d, &ev, &err), HP_OK, "%s: %s", paths[i], err.msg);
        cr_assert_eq(hp_evaluator_run(ev, NULL, HP_ABLATE_ZERO, &mt, &err), HP_OK, "%s", err.msg);
        cr_assert_gt(mt->n_tokens, 5);
        loss[i] = mt->loss;
        hp_metrics_free(mt);
        hp_evaluator_free(ev);
        hp_data_free(d);
    }
    cr_assert_eq(loss[0], loss[1], "text %.9g, ids %.9g", loss[0], loss[1]);
    hp_model_close(m);
}
