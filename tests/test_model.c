/*
 * test_model.c -- opening model directories: the info reported, and every
 * kind of broken checkpoint failing with one clear line naming the file.
 *
 * Broken checkpoints are made in a temp dir from the gpt2-tiny fixture by
 * editing its safetensors header or config.json.
 */
#define _DEFAULT_SOURCE
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "headprune.h"
#include "testutil.h"

static char src[1024], tmp[64];

static void spit(const char *name, const void *p, size_t n)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    cr_assert(fwrite(p, 1, n, f) == n);
    fclose(f);
}

static void setup(void)
{
    snprintf(src, sizeof src, "%s/gpt2-tiny", getenv("HP_FIXTURES"));
    tu_mkdtemp(tmp, sizeof tmp, "model");
    char p[1200];
    size_t n;
    snprintf(p, sizeof p, "%s/config.json", src);
    char *c = tu_slurp(p, &n);
    spit("config.json", c, n);
    free(c);
}

static void teardown(void)
{
    tu_rmrf(tmp);
}

/* Rewrite model.safetensors with an edited header (and optionally cut data). */
static void write_weights(void (*edit)(cJSON *hdr), long cut)
{
    char p[1200];
    size_t n;
    snprintf(p, sizeof p, "%s/model.safetensors", src);
    char *st = tu_slurp(p, &n);
    uint64_t hl;
    memcpy(&hl, st, 8);
    cJSON *hdr = cJSON_ParseWithLength(st + 8, hl);
    if (edit)
        edit(hdr);
    char *h = cJSON_PrintUnformatted(hdr);
    uint64_t nh = strlen(h);
    size_t data = n - 8 - hl;
    size_t keep = cut > 0 && (size_t)cut < data ? data - (size_t)cut : data;
    char *out = malloc(8 + nh + data);
    memcpy(out, &nh, 8);
    memcpy(out + 8, h, nh);
    memcpy(out + 8 + nh, st + 8 + hl, data);
    spit("model.safetensors", out, 8 + nh + keep);
    free(out);
    free(h);
    cJSON_Delete(hdr);
    free(st);
}

static void expect_fail(enum hp_status want, const char *file, const char *words)
{
    struct hp_error err = {0};
    struct hp_model *m = NULL;
    enum hp_status st = hp_model_open(tmp, &m, &err);
    cr_assert_null(m);
    cr_assert_eq(st, want, "status %s, expected %s: %s", hp_status_name(st), hp_status_name(want), err.msg);
    cr_assert(strstr(err.msg, file), "message does not name %s: %s", file, err.msg);
    cr_assert(strstr(err.msg, words), "message does not say '%s': %s", words, err.msg);
    cr_assert(!strchr(err.msg, '\n'), "message spans lines: %s", err.msg);
}

TestSuite(model, .init = setup, .fini = teardown);

Test(model, intact_copy_opens)
{
    write_weights(NULL, 0);
    struct hp_error err;
    struct hp_model *m;
    cr_assert_eq(hp_model_open(tmp, &m, &err), HP_OK, "%s", err.msg);
    const struct hp_model_info *in = hp_model_get_info(m);
    cr_assert_eq(in->n_layers, 3);
    cr_assert_eq(in->n_heads, 4);
    cr_assert_eq(in->d_head, 8);
    cr_assert_str_eq(in->dtype, "f32");
    /* wte 97x32 + wpe 64x32 + 3 layers x (4 ln + 32x96+96 + 32x32+32 + 32x128+128 + 128x32+32) + ln_f 64 */
    cr_assert_eq(in->n_params, 97 * 32 + 64 * 32 + 3 * (4 * 32 + 32 * 96 + 96 + 32 * 32 + 32 + 32 * 128 + 128 + 128 * 32 + 32) + 64);
    hp_model_close(m);
}

Test(model, header_length_past_end_of_file)
{
    unsigned char bad[16] = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}'};
    spit("model.safetensors", bad, sizeof bad);
    expect_fail(HP_ERR_FORMAT, "model.safetensors", "past the end");
}

Test(model, file_shorter_than_header) {
    spit("model.safetensors", "abc", 3);
    expect_fail(HP_ERR_FORMAT, "model.safetensors", "too short");
}

Test(model, truncated_data)
{
    write_weights(NULL, 1000);
    expect_fail(HP_ERR_FORMAT, "model.safetensors", "outside the data area");
}

Test(model, header_not_json)
{
    const char bad[] = "\x05\0\0\0\0\0\0\0{abc}xxxx";
    spit("model.safetensors", bad, sizeof bad - 1);
    expect_fail(HP_ERR_FORMAT, "model.safetensors", "not a JSON object");
}

static void overlap(cJSON *h)
{
    cJSON *a = cJSON_GetObjectItem(h, "transformer.h.0.ln_1.weight");
    cJSON *b = cJSON_GetObjectItem(h, "transformer.h.0.ln_1.bias");
    cJSON_ReplaceItemInObject(a, "data_offsets", cJSON_Duplicate(cJSON_GetObjectItem(b, "data_offsets"), 1));
}
Test(model, overlapping_tensors)
{
    write_weights(overlap, 0);
    expect_fail(HP_ERR_FORMAT, "model.safetensors", "overlap");
}

static void offsets_past_end(cJSON *h)
{
    cJSON *a = cJSON_GetObjectItem(h, "transformer.ln_f.bias");
    cJSON *o = cJSON_GetObjectItem(a, "data_offsets");
    cJSON_ReplaceItemInArray(o, 0, cJSON_CreateNumber(1e9));
    cJSON_ReplaceItemInArray(o, 1, cJSON_CreateNumber(1e9 + 128));
}
Test(model, offsets_outside_data)
{
    write_weights(offsets_past_end, 0);
    expect_fail(HP_ERR_FORMAT, "model.safetensors", "outside the data area");
}

static void size_mismatch(cJSON *h)
{
    cJSON *a = cJSON_GetObjectItem(h, "transformer.ln_f.bias");
    cJSON_ReplaceItemInObject(a, "shape", cJSON_Parse("[33]"));
}
Test(model, shape_disagrees_with_byte_span)
{
    write_weights(size_mismatch, 0);
    expect_fail(HP_ERR_FORMAT, "model.safetensors", "spans");
}

static void int_dtype(cJSON *h)
{
    cJSON *a = cJSON_GetObjectItem(h, "transformer.ln_f.bias");
    cJSON_ReplaceItemInObject(a, "dtype", cJSON_CreateString("I32"));
}
Test(model, dtype_not_float)
{
    write_weights(int_dtype, 0);
    expect_fail(HP_ERR_UNSUPPORTED, "model.safetensors", "dtype I32");
}

static void missing(cJSON *h) { cJSON_DeleteItemFromObject(h, "transformer.h.1.ln_2.weight"); }
Test(model, tensor_missing)
{
    write_weights(missing, 0);
    expect_fail(HP_ERR_SHAPE, tmp, "h.1.ln_2.weight' is missing");
}

static void edit_config(const char *from, const char *to)
{
    char p[256];
    size_t n;
    snprintf(p, sizeof p, "%s/config.json", tmp);
    char *c = tu_slurp(p, &n);
    char *at = strstr(c, from);
    cr_assert(at, "config has no %s", from);
    size_t nn = n - strlen(from) + strlen(to);
    char *o = malloc(nn + 1);
    size_t pre = (size_t)(at - c);
    memcpy(o, c, pre);
    memcpy(o + pre, to, strlen(to));
    memcpy(o + pre + strlen(to), at + strlen(from), n - pre - strlen(from));
    spit("config.json", o, nn);
    free(o);
    free(c);
}

Test(model, shape_disagrees_with_config)
{
    write_weights(NULL, 0);
    edit_config("\"vocab_size\": 97", "\"vocab_size\": 98");
    expect_fail(HP_ERR_SHAPE, "model.safetensors", "config.json implies [98, 32]");
}

Test(model, unknown_model_type)
{
    write_weights(NULL, 0);
    edit_config("\"model_type\": \"gpt2\"", "\"model_type\": \"t5\"");
    expect_fail(HP_ERR_UNSUPPORTED, "config.json", "model_type \"t5\" is not supported");
}

Test(model, malformed_config)
{
    write_weights(NULL, 0);
    edit_config("\"model_type\"", "\"model_type\" ,");
    expect_fail(HP_ERR_FORMAT, "config.json", "malformed JSON");
}

Test(model, missing_weights)
{
    expect_fail(HP_ERR_IO, tmp, "no model.safetensors");
}

Test(model, missing_config)
{
    char p[256];
    snprintf(p, sizeof p, "%s/config.json", tmp);
    remove(p);
    expect_fail(HP_ERR_IO, "config.json", "cannot open");
}

Test(model, index_names_missing_shard)
{
    const char idx[] = "{\"weight_map\": {\"transformer.wte.weight\": \"model-00001-of-00002.safetensors\"}}";
    spit("model.safetensors.index.json", idx, sizeof idx - 1);
    expect_fail(HP_ERR_IO, "model-00001-of-00002.safetensors", "cannot open");
}

Test(model, heads_do_not_divide_hidden)
{
    write_weights(NULL, 0);
    edit_config("\"n_head\": 4", "\"n_head\": 5");
    expect_fail(HP_ERR_SHAPE, "config.json", "not divisible");
}
