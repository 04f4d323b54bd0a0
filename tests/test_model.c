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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <unistd.h>

#include "headprune.h"
#include "model.h"
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

/* Rewrite model.safetensors with an edited header (and optionally cut data);
 * extra (may be NULL) is JSON text spliced in before the header's closing brace. */
static void write_weights_ex(void (*edit)(cJSON *hdr), long cut, const char *extra)
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
    if (extra) {
        size_t nh0 = strlen(h), ne = strlen(extra);
        h = realloc(h, nh0 + ne + 1);
        cr_assert(h && h[nh0 - 1] == '}');
        memcpy(h + nh0 - 1, extra, ne);
        strcpy(h + nh0 - 1 + ne, "}");
    }
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

static void write_weights(void (*edit)(cJSON *hdr), long cut)
{
    write_weights_ex(edit, cut, NULL);
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

/* Overlap hidden behind an empty tensor: sorted by offset, [0, 100) then the empty [50, 50) then [60, 160); the
 * last was once checked against the empty one only and passed */
Test(model, overlap_behind_an_empty_tensor)
{
    const char hdr[] = "{\"a\":{\"dtype\":\"F32\",\"shape\":[25],\"data_offsets\":[0,100]},"
                       "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[50,50]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[25],\"data_offsets\":[60,160]}}";
    const size_t hl = sizeof hdr - 1, len = 8 + hl + 160;
    unsigned char *buf = calloc(1, len);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(hl >> (8 * i));
    memcpy(buf + 8, hdr, hl);
    struct hp_st_set *set = NULL;
    struct hp_error err = {0};
    cr_assert_eq(hp_st_open_buffer("x.safetensors", buf, len, &set, &err), HP_ERR_FORMAT);
    cr_assert(strstr(err.msg, "x.safetensors: tensors 'a' and 'b' overlap"), "%s", err.msg);
    hp_st_close(set);
    free(buf);
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

/* ---- 16-bit weights, read in place from the mapping --------------------------------- */

/* Take the checkpoint from fixture name instead of gpt2-tiny (its config.json too). */
static void use_fixture(const char *name)
{
    snprintf(src, sizeof src, "%s/%s", getenv("HP_FIXTURES"), name);
    char p[1200];
    size_t n;
    snprintf(p, sizeof p, "%s/config.json", src);
    char *c = tu_slurp(p, &n);
    spit("config.json", c, n);
    free(c);
}

Test(model, bf16_copy_opens)
{
    use_fixture("llama-tied-bf16");
    write_weights(NULL, 0);
    struct hp_error err;
    struct hp_model *m;
    cr_assert_eq(hp_model_open(tmp, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_str_eq(hp_model_get_info(m)->dtype, "bf16");
    hp_model_close(m);
}

#define Q0 "model.layers.0.self_attn.q_proj.weight"

static void q0_shape(cJSON *h, const char *shape)
{
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(h, Q0), "shape", cJSON_Parse(shape));
}
static void q0_wider(cJSON *h) { q0_shape(h, "[64, 65]"); }
static void q0_reshaped(cJSON *h) { q0_shape(h, "[32, 128]"); }
static void ln_f_as_bf16(cJSON *h)
{
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(h, "transformer.ln_f.bias"), "dtype", cJSON_CreateString("BF16"));
}

Test(model, bf16_matrix_span_disagrees_with_shape)
{
    use_fixture("llama-tied-bf16");
    write_weights(q0_wider, 0);
    expect_fail(HP_ERR_FORMAT, "model.safetensors", "'" Q0 "' spans 8192 bytes but BF16 x shape needs 8320");
}

/* an f32 tensor relabelled BF16: its span is twice what BF16 needs */
Test(model, bf16_label_on_f32_bytes)
{
    write_weights(ln_f_as_bf16, 0);
    expect_fail(HP_ERR_FORMAT, "model.safetensors",
                "'transformer.ln_f.bias' spans 128 bytes but BF16 x shape needs 64");
}

/* the same bytes, another shape: the span agrees, the config does not */
Test(model, bf16_matrix_shape_disagrees_with_config)
{
    use_fixture("llama-tied-bf16");
    write_weights(q0_reshaped, 0);
    expect_fail(HP_ERR_SHAPE, "model.safetensors", "'" Q0 "' has shape [32, 128] but config.json implies [64, 64]");
}

Test(model, bf16_truncated)
{
    use_fixture("llama-tied-bf16");
    write_weights(NULL, 1000);
    expect_fail(HP_ERR_FORMAT, "model.safetensors", "outside the data area");
}

/* ---- many names: the duplicate check is a sort, not a pairwise scan ------------ */

/* ",\"z0\":{...},..." for n zero-size tensors, then the given tail */
static char *zero_size_tensors(int n, const char *tail)
{
    size_t cap = (size_t)n * 64 + strlen(tail) + 1, k = 0;
    char *s = malloc(cap);
    cr_assert(s);
    for (int i = 0; i < n; i++)
        k += (size_t)snprintf(s + k, cap - k, ",\"z%d\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}", i);
    snprintf(s + k, cap - k, "%s", tail);
    return s;
}

/* 200k names took minutes with the quadratic check (100k: 16 s); a sort takes well under a second.
 * None of them is read, so the first is refused once they are all indexed. */
Test(model, many_tensor_names_open_quickly, .timeout = 60)
{
    char *extra = zero_size_tensors(200000, "");
    write_weights_ex(NULL, 0, extra);
    free(extra);
    expect_fail(HP_ERR_UNSUPPORTED, "model.safetensors", "tensor 'z0' is not read");
}

Test(model, duplicate_among_many_names, .timeout = 60)
{
    char *extra = zero_size_tensors(200000, ",\"z123456\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}");
    write_weights_ex(NULL, 0, extra);
    free(extra);
    expect_fail(HP_ERR_FORMAT, "model.safetensors", "tensor 'z123456' appears twice");
}

Test(model, duplicate_of_a_weight_name)
{
    write_weights_ex(NULL, 0, ",\"transformer.ln_f.bias\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}");
    expect_fail(HP_ERR_FORMAT, "model.safetensors", "tensor 'transformer.ln_f.bias' appears twice");
}

/* ---- data_offsets and shapes are whole numbers ----------------------------------- */

static void half_offset(cJSON *h)
{
    cJSON *o = cJSON_GetObjectItem(cJSON_GetObjectItem(h, "transformer.ln_f.bias"), "data_offsets");
    cJSON_ReplaceItemInArray(o, 0, cJSON_CreateNumber(0.5));
}
Test(model, fractional_data_offset)
{
    write_weights(half_offset, 0);
    expect_fail(HP_ERR_FORMAT, "model.safetensors", "[0.5, ");
    expect_fail(HP_ERR_FORMAT, "model.safetensors", "not whole byte offsets");
}

static void huge_offset(cJSON *h)
{
    cJSON *o = cJSON_GetObjectItem(cJSON_GetObjectItem(h, "transformer.ln_f.bias"), "data_offsets");
    cJSON_ReplaceItemInArray(o, 1, cJSON_CreateNumber(1e300));
}
Test(model, huge_data_offset_printed_short)
{
    write_weights(huge_offset, 0);
    expect_fail(HP_ERR_FORMAT, "model.safetensors", "1e+300]");
    struct hp_error err = {0};
    struct hp_model *m = NULL;
    hp_model_open(tmp, &m, &err);
    cr_assert_lt(strlen(err.msg), 200, "message not bounded: %s", err.msg);
}

static void huge_dim(cJSON *h)
{
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(h, "transformer.ln_f.bias"), "shape", cJSON_Parse("[1e300]"));
}
Test(model, huge_shape_dimension)
{
    write_weights(huge_dim, 0);
    expect_fail(HP_ERR_FORMAT, "model.safetensors", "invalid shape");
}

Test(model, weights_file_is_a_directory)
{
    char p[256];
    snprintf(p, sizeof p, "%s/model.safetensors", tmp);
    cr_assert_eq(mkdir(p, 0700), 0);
    expect_fail(HP_ERR_IO, "model.safetensors", "is a directory");
}

/* ---- config.json read as Python reads it, every number range-checked ---------- */

Test(model, duplicate_config_key_takes_the_last)
{
    write_weights(NULL, 0);
    edit_config("\"n_head\": 4", "\"n_head\": 5, \"n_head\": 4");
    struct hp_error err;
    struct hp_model *m;
    cr_assert_eq(hp_model_open(tmp, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_model_get_info(m)->n_heads, 4);
    hp_model_close(m);
    edit_config("\"n_head\": 5, \"n_head\": 4", "\"n_head\": 4, \"n_head\": 5");
    expect_fail(HP_ERR_SHAPE, "config.json", "not divisible");
}

Test(model, text_after_config_object)
{
    write_weights(NULL, 0);
    char p[256];
    snprintf(p, sizeof p, "%s/config.json", tmp);
    FILE *f = fopen(p, "ab");
    fputs("\n{\"n_head\": 5}\n", f);
    fclose(f);
    expect_fail(HP_ERR_FORMAT, "config.json", "text after the JSON value");
}

Test(model, text_after_a_nul_in_config)
{
    write_weights(NULL, 0);
    char p[256];
    snprintf(p, sizeof p, "%s/config.json", tmp);
    FILE *f = fopen(p, "ab");
    fwrite("\0junk", 1, 5, f);
    fclose(f);
    expect_fail(HP_ERR_FORMAT, "config.json", "text after the JSON value");
}

Test(model, activation_not_a_string)
{
    write_weights(NULL, 0);
    edit_config("\"activation_function\": \"gelu_new\"", "\"activation_function\": 7");
    expect_fail(HP_ERR_FORMAT, "config.json", "\"activation_function\" must be a string");
}

Test(model, boolean_not_a_boolean)
{
    write_weights(NULL, 0);
    edit_config("\"scale_attn_weights\": true", "\"scale_attn_weights\": \"false\"");
    expect_fail(HP_ERR_FORMAT, "config.json", "\"scale_attn_weights\" must be true or false");
}

Test(model, hidden_smaller_than_heads)
{
    write_weights(NULL, 0);
    edit_config("\"n_head\": 4", "\"n_head\": 64");
    expect_fail(HP_ERR_SHAPE, "config.json", "\"n_embd\" 32 is smaller than \"n_head\" 64");
}

Test(model, config_number_out_of_range)
{
    write_weights(NULL, 0);
    edit_config("\"n_layer\": 3", "\"n_layer\": 1e9");
    expect_fail(HP_ERR_FORMAT, "config.json", "\"n_layer\" must be a whole number from 1 to");
    edit_config("\"n_layer\": 1e9", "\"n_layer\": 3");
    edit_config("\"layer_norm_epsilon\": 1e-05", "\"layer_norm_epsilon\": -1");
    expect_fail(HP_ERR_FORMAT, "config.json", "\"layer_norm_epsilon\" must be a number above 0");
}

/* fixture name's config and weights (one model.safetensors) into tmp */
static void copy_fixture(const char *name)
{
    static const char *const files[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        char p[1200];
        size_t n;
        snprintf(p, sizeof p, "%s/%s/%s", getenv("HP_FIXTURES"), name, files[i]);
        char *c = tu_slurp(p, &n);
        spit(files[i], c, n);
        free(c);
    }
}

/* the llama-gqa fixture, config and weights, into tmp */
static void copy_llama(void) { copy_fixture("llama-gqa"); }

/* 65536 x 65536 wrapped to 0 in int, and the model opened */
Test(model, llama_attention_width_overflows)
{
    copy_llama();
    edit_config("\"num_attention_heads\": 4", "\"num_attention_heads\": 65536");
    edit_config("\"num_key_value_heads\": 2", "\"num_key_value_heads\": 65536");
    edit_config("\"head_dim\": 8", "\"head_dim\": 65536");
    expect_fail(HP_ERR_SHAPE, "config.json", "\"num_attention_heads\" 65536 x \"head_dim\" 65536 = 4294967296 is too wide");
}

/* hidden 32 over 64 heads gave head size 0, and the model evaluated */
Test(model, llama_head_size_zero)
{
    copy_llama();
    edit_config("\"head_dim\": 8,", "");
    edit_config("\"num_attention_heads\": 4", "\"num_attention_heads\": 64");
    expect_fail(HP_ERR_SHAPE, "config.json", "\"hidden_size\" 32 is smaller than \"num_attention_heads\" 64");
}

Test(model, llama_config_opens)
{
    copy_llama();
    struct hp_error err;
    struct hp_model *m;
    cr_assert_eq(hp_model_open(tmp, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_model_get_info(m)->d_head, 8);
    hp_model_close(m);
}

/* config.json of fixture name in the temporary model folder, then an edit as edit_config. */
static void llama_config(const char *name, const char *from, const char *to)
{
    char p[1200];
    size_t n;
    snprintf(p, sizeof p, "%s/%s/config.json", getenv("HP_FIXTURES"), name);
    char *c = tu_slurp(p, &n);
    spit("config.json", c, n);
    free(c);
    edit_config(from, to);
}

Test(model, rope_scaling_of_an_unknown_type)
{
    llama_config("llama-rope-linear", "\"rope_type\": \"linear\"", "\"rope_type\": \"yarn\"");
    expect_fail(HP_ERR_UNSUPPORTED, "config.json", "rope_scaling type \"yarn\" is not supported");
}

Test(model, rope_scaling_factor_below_1)
{
    llama_config("llama-rope-linear", "\"factor\": 4.0", "\"factor\": 0.5");
    expect_fail(HP_ERR_FORMAT, "config.json", "\"factor\" of at least 1");
}

Test(model, rope_scaling_llama3_without_its_frequencies)
{
    llama_config("llama-rope-llama3", "\"high_freq_factor\": 4.0,", "");
    expect_fail(HP_ERR_FORMAT, "config.json", "low_freq_factor and high_freq_factor");
}

Test(model, rope_scaling_not_an_object)
{
    llama_config("llama-rope-linear", "\"rope_scaling\": {", "\"rope_scaling\": 3, \"x\": {");
    expect_fail(HP_ERR_FORMAT, "config.json", "\"rope_scaling\" must be an object or null");
}

Test(model, qwen2_sliding_window_layers)
{
    llama_config("qwen2-bias", "\"use_sliding_window\": false", "\"use_sliding_window\": true");
    expect_fail(HP_ERR_UNSUPPORTED, "config.json", "use_sliding_window");
}

/* Phi-3's long-context checkpoints (longrope) and Phi-4-mini's partial rotary are refused, named */
Test(model, phi3_longrope_and_partial_rotary)
{
    llama_config("phi3-fused", "\"rope_scaling\": null",
                 "\"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": [1, 1, 1, 1], "
                 "\"long_factor\": [1, 1, 1, 1]}");
    expect_fail(HP_ERR_UNSUPPORTED, "config.json", "\"rope_scaling\" is not supported for phi3 (transformers' configuration takes only longrope");
    llama_config("phi3-fused", "\"partial_rotary_factor\": 1.0", "\"partial_rotary_factor\": 0.75");
    expect_fail(HP_ERR_UNSUPPORTED, "config.json", "partial_rotary_factor");
}

/* Phi3Config's and Olmo2Config's rms_norm_eps default is 1e-5, the other Llama family's 1e-6 */
Test(model, rms_norm_eps_defaults)
{
    static const struct {
        const char *fixture, *line;
        float eps;
    } cases[] = {{"olmo2-post-norms", "\"rms_norm_eps\": 1e-06,", 1e-5f},
                 {"phi3-fused", "\"rms_norm_eps\": 1e-05,", 1e-5f},
                 {"llama-gqa", "\"rms_norm_eps\": 1e-05,", 1e-6f}};
    for (int i = 0; i < 3; i++) {
        use_fixture(cases[i].fixture);
        write_weights(NULL, 0);
        edit_config(cases[i].line, "");
        struct hp_error err;
        struct hp_model *m;
        cr_assert_eq(hp_model_open(tmp, &m, &err), HP_OK, "%s", err.msg);
        cr_assert_eq(m->norm_eps, cases[i].eps, "%s: eps %g", cases[i].fixture, (double)m->norm_eps);
        hp_model_close(m);
    }
}

/* max_position_embeddings absent: each configuration class's default, the positions a model takes (and dynamic
 * rotary scaling's threshold) */
Test(model, max_position_defaults)
{
    static const struct {
        const char *fixture;
        int n_ctx;
    } cases[] = {{"mistral-window", 131072}, {"qwen3-qknorm", 32768}, {"qwen2-bias", 32768}, {"phi3-fused", 4096},
                 {"llama-gqa", 2048}, {"olmo2-post-norms", 2048}, {"gemma2-softcap", 8192},
                 {"gemma3-local", 131072}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        use_fixture(cases[i].fixture);
        write_weights(NULL, 0);
        char p[1200];
        size_t n;
        snprintf(p, sizeof p, "%s/config.json", tmp);
        char *c = tu_slurp(p, &n), *at = strstr(c, "\"max_position_embeddings\"");
        cr_assert(at, "%s: no max_position_embeddings", cases[i].fixture);
        char *end = strchr(at, ',');
        memmove(at, end + 1, strlen(end + 1) + 1);
        spit("config.json", c, strlen(c));
        free(c);
        struct hp_error err;
        struct hp_model *m;
        cr_assert_eq(hp_model_open(tmp, &m, &err), HP_OK, "%s: %s", cases[i].fixture, err.msg);
        cr_assert_eq(hp_model_get_info(m)->n_ctx, cases[i].n_ctx, "%s: %d positions", cases[i].fixture,
                     hp_model_get_info(m)->n_ctx);
        hp_model_close(m);
    }
}

/* MistralConfig's default window (4096) holds when config.json leaves the key out; null means none */
Test(model, mistral_default_window)
{
    static const struct {
        const char *to;
        int window;
    } cases[] = {{"", 4096}, {"\"sliding_window\": null,", 0}, {"\"sliding_window\": 20,", 20}};
    for (int i = 0; i < 3; i++) {
        use_fixture("mistral-window");
        write_weights(NULL, 0);
        edit_config("\"sliding_window\": 20,", cases[i].to);
        struct hp_error err;
        struct hp_model *m;
        cr_assert_eq(hp_model_open(tmp, &m, &err), HP_OK, "%s", err.msg);
        cr_assert_eq(hp_model_get_info(m)->window, cases[i].window, "%s: window %d", cases[i].to,
                     hp_model_get_info(m)->window);
        hp_model_close(m);
    }
}

Test(model, qwen3_sliding_window_layers)
{
    llama_config("qwen3-qknorm", "\"use_sliding_window\": false", "\"use_sliding_window\": true");
    expect_fail(HP_ERR_UNSUPPORTED, "config.json", "use_sliding_window (Qwen3's window");
    llama_config("qwen3-qknorm", "\"full_attention\"", "\"sliding_attention\"");
    expect_fail(HP_ERR_UNSUPPORTED, "config.json", "\"layer_types\" other than \"full_attention\"");
}

/* Gemma's keys that change the maths, read as transformers reads them: the window on the layers layer_types names
 * (else the class's pattern), Gemma 3's own rotary base on those layers only, query_pre_attn_scalar's scale, the
 * scaled embeddings, the soft caps and their defaults (Gemma 2's 50 and 30, Gemma 3's none) */
Test(model, gemma_layers_scales_and_caps)
{
    struct hp_error err;
    struct hp_model *m;
    use_fixture("gemma3-local");
    write_weights(NULL, 0);
    cr_assert_eq(hp_model_open(tmp, &m, &err), HP_OK, "%s", err.msg);
    for (int l = 0; l < 3; l++) {
        cr_assert_eq(m->layers[l].window, l == 1 ? 0 : 6, "layer %d: window %d", l, m->layers[l].window);
        cr_assert_eq(m->layers[l].local_rope, l != 1, "layer %d: local rotary", l);
    }
    cr_assert_eq(m->rope_local.theta, 100.0f);
    cr_assert_eq(m->rope_local.type, HP_ROPE_DEFAULT, "the local layers' rotary is unscaled");
    cr_assert_eq(m->rope.type, HP_ROPE_LINEAR);
    cr_assert_eq(m->attn_scale, (float)(1 / sqrt(10.0)));
    cr_assert_eq(m->embed_scale, (float)sqrt(32.0));
    cr_assert(m->info.attn_softcap == 0 && m->info.logit_softcap == 0, "Gemma 3 has no soft caps");
    hp_model_close(m);
    /* without layer_types: Gemma3TextConfig's sliding_window_pattern (6: all three layers slide), or one given */
    static const struct {
        const char *pattern;
        int full; /* the layer without the window, -1 none */
    } pats[] = {{"", -1}, {"\"sliding_window_pattern\": 2, ", 1}};
    for (int i = 0; i < 2; i++) {
        use_fixture("gemma3-local");
        write_weights(NULL, 0);
        char p[1200];
        snprintf(p, sizeof p, "%s/config.json", tmp);
        char *c = tu_slurp(p, NULL), *at = strstr(c, "\"layer_types\""), *end = strchr(at, ']');
        cr_assert(at && end);
        memmove(at, end + 3, strlen(end + 3) + 1); /* the list, its "]," and the newline */
        char text[4096];
        snprintf(text, sizeof text, "{%s%s", pats[i].pattern, c + 1);
        spit("config.json", text, strlen(text));
        free(c);
        cr_assert_eq(hp_model_open(tmp, &m, &err), HP_OK, "%s", err.msg);
        for (int l = 0; l < 3; l++)
            cr_assert_eq(m->layers[l].window, l == pats[i].full ? 0 : 6, "pattern %s layer %d", pats[i].pattern, l);
        hp_model_close(m);
    }
    use_fixture("gemma2-softcap");
    write_weights(NULL, 0);
    edit_config("\"attn_logit_softcapping\": 2.0,", "");
    edit_config("\"final_logit_softcapping\": 3.0,", "");
    cr_assert_eq(hp_model_open(tmp, &m, &err), HP_OK, "%s", err.msg);
    cr_assert(m->info.attn_softcap == 50.0f && m->info.logit_softcap == 30.0f, "Gemma2Config's caps %g %g",
              (double)m->info.attn_softcap, (double)m->info.logit_softcap);
    cr_assert(m->rope_local.theta == 0 && !m->layers[0].local_rope, "Gemma 2 turns every layer by rope_theta");
    hp_model_close(m);
}

/* Gemma's keys headprune does not implement, or whose values are no model: refused, named */
Test(model, gemma_refusals)
{
    static const struct {
        const char *fixture, *from, *to, *says;
        enum hp_status st;
    } cases[] = {
        {"gemma2-softcap", "\"sliding_window\": 6", "\"sliding_window\": null", "\"sliding_window\" null is not supported",
         HP_ERR_UNSUPPORTED},
        {"gemma2-softcap", "\"attn_logit_softcapping\": 2.0", "\"attn_logit_softcapping\": 0",
         "\"attn_logit_softcapping\" must be a number above 0", HP_ERR_FORMAT},
        {"gemma2-softcap", "\"query_pre_attn_scalar\": 10", "\"query_pre_attn_scalar\": -1",
         "\"query_pre_attn_scalar\" must be a number above 0", HP_ERR_FORMAT},
        {"gemma2-softcap", "\"layer_types\": [", "\"layer_types\": [\"full_attention\", ",
         "\"layer_types\" must be a list of 3 layer types", HP_ERR_FORMAT},
        {"gemma2-softcap", "\"sliding_attention\",", "\"chunked_attention\",",
         "\"layer_types\" entry 0 must be \"full_attention\" or \"sliding_attention\"", HP_ERR_FORMAT},
        {"gemma3-local", "\"use_bidirectional_attention\": false", "\"use_bidirectional_attention\": true",
         "use_bidirectional_attention", HP_ERR_UNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        llama_config(cases[i].fixture, cases[i].from, cases[i].to);
        expect_fail(cases[i].st, "config.json", cases[i].says);
    }
}

/* head_dim absent: the configuration class's (Qwen3's 128, Gemma's 256), not hidden / heads, as transformers
 * builds the model: the fixtures' 12-wide heads then disagree with their tensors, named */
Test(model, head_dim_defaults)
{
    static const char *const fixtures[] = {"qwen3-qknorm", "gemma2-softcap"};
    static const char *const implies[] = {"[512, 32]", "[1024, 32]"};
    for (int i = 0; i < 2; i++) {
        use_fixture(fixtures[i]);
        write_weights(NULL, 0);
        edit_config("\"head_dim\": 12,", "");
        expect_fail(HP_ERR_SHAPE, "q_proj.weight", implies[i]);
    }
}

/* GPT-NeoX: rotary over an odd number of dimensions, and a head_dim the rotary frequencies would be sized by
 * while attention is not, are refused, named */
Test(model, gpt_neox_odd_rotary_and_head_dim)
{
    llama_config("neox-parallel", "\"rotary_pct\": 0.5", "\"rotary_pct\": 0.375");
    expect_fail(HP_ERR_SHAPE, "config.json", "rotary_pct 0.375 of head size 8 turns 3 dimensions");
    llama_config("neox-parallel", "\"vocab_size\": 97", "\"vocab_size\": 97, \"head_dim\": 16");
    expect_fail(HP_ERR_UNSUPPORTED, "config.json", "\"head_dim\" = 16 is not supported");
}

/* OLMo 2 without some heads (a headprune record, written by hand): its q/k norms over every head would run over
 * fewer, another model; refused, named */
Test(model, olmo2_without_heads)
{
    use_fixture("olmo2-post-norms");
    write_weights(NULL, 0);
    edit_config("\"vocab_size\": 97",
                "\"vocab_size\": 97, \"headprune\": {\"n_heads\": 4, \"n_kv_heads\": 2, \"pruned_heads\": {\"1\": [2]}}");
    expect_fail(HP_ERR_UNSUPPORTED, tmp, "its q_norm and k_norm run over all heads together");
}

/* ---- GGUF files ---------------------------------------------------------------------------- */

/* tests/fixtures/llama-gguf's file into tmp/model.gguf, n bytes of it (0: all) with bytes at `at` replaced by
 * `with` (NULL: none; its wlen bytes, 0: up to its NUL); opened by its path, expecting status want and a message
 * naming it and saying words. */
static void gguf_patch(size_t n, size_t at, const char *with, size_t wlen, enum hp_status want, const char *words)
{
    char p[1200];
    size_t len;
    snprintf(p, sizeof p, "%s/llama-gguf/model.Q8_0-mixed.gguf", getenv("HP_FIXTURES"));
    char *b = tu_slurp(p, &len);
    if (with)
        memcpy(b + at, with, wlen ? wlen : strlen(with));
    spit("model.gguf", b, n ? n : len);
    free(b);
    snprintf(p, sizeof p, "%s/model.gguf", tmp);
    struct hp_error err = {0};
    struct hp_model *m = NULL;
    enum hp_status st = hp_model_open(p, &m, &err);
    cr_assert_null(m);
    cr_assert_eq(st, want, "status %s, expected %s: %s", hp_status_name(st), hp_status_name(want), err.msg);
    cr_assert(strstr(err.msg, "model.gguf") && strstr(err.msg, words), "message does not say '%s': %s", words,
              err.msg);
    cr_assert(!strchr(err.msg, '\n'), "message spans lines: %s", err.msg);
}

static void gguf_case(size_t n, size_t at, const char *with, enum hp_status want, const char *words)
{
    gguf_patch(n, at, with, 0, want, words);
}

/* A GGUF model refuses what it does not read, in one line naming the file and the field or tensor. The offsets are
 * the fixture's (tools/gen_fixtures.py llama-gguf): general.architecture's value at 64, the key llama.vocab_size
 * at 504 and its value at 524, token_embd.weight's name at 536. */
Test(model, gguf_refusals)
{
    gguf_case(0, 64, "mamba", HP_ERR_UNSUPPORTED, "GGUF architecture \"mamba\" is not supported");
    gguf_case(0, 504, "llama.expert_cnt", HP_ERR_UNSUPPORTED, "metadata \"llama.expert_cnt\" is not supported");
    gguf_case(0, 524, "b", HP_ERR_SHAPE, "\"llama.vocab_size\" 98 differs from the 97 rows");
    gguf_case(0, 536, "tokxn_embd", HP_ERR_UNSUPPORTED, "tensor 'tokxn_embd.weight' is not one a llama GGUF holds");
    gguf_case(20000, 0, NULL, HP_ERR_FORMAT, "runs past the end of the file");
    /* the epsilon (an f32 at 456) a NaN: no default stands in for it */
    gguf_case(0, 456, "\xff\xff\xff\x7f", HP_ERR_FORMAT, "layer_norm_rms_epsilon\" is nan, not a finite number");
    /* a tensor a llama GGUF does not hold (output_norm.weight's name at 593) */
    gguf_case(0, 593, "outpux", HP_ERR_UNSUPPORTED, "tensor 'outpux_norm.weight' is not one a llama GGUF holds");
    /* blk.0.attn_q.weight's ne (at 773) 0 x 2^62: no bytes, and nothing to put back row by row for 2^61 rows */
    gguf_patch(0, 773, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x40", 16, HP_ERR_FORMAT,
               "tensor 'blk.0.attn_q.weight' has an invalid shape [0, 4611686018427387904]");
}

/* A folder holding one .gguf (and no config.json) opens it; two are refused, named */
Test(model, gguf_folder)
{
    char p[1200];
    size_t len;
    snprintf(p, sizeof p, "%s/llama-gguf/model.Q8_0-mixed.gguf", getenv("HP_FIXTURES"));
    char *b = tu_slurp(p, &len);
    snprintf(p, sizeof p, "%s/config.json", tmp);
    cr_assert_eq(unlink(p), 0);
    spit("a.gguf", b, len);
    struct hp_error err = {0};
    struct hp_model *m = NULL;
    cr_assert_eq(hp_model_open(tmp, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_model_get_info(m)->n_vocab, 97);
    hp_model_close(m);
    spit("b.gguf", b, len);
    free(b);
    cr_assert_eq(hp_model_open(tmp, &m, &err), HP_ERR_ARG);
    cr_assert(strstr(err.msg, "more than one .gguf file"), "%s", err.msg);
    snprintf(p, sizeof p, "%s/x.bin", tmp);
    spit("x.bin", "x", 1);
    cr_assert_eq(hp_model_open(p, &m, &err), HP_ERR_ARG);
    cr_assert(strstr(err.msg, "x.bin: a file, not a model folder or a .gguf file"), "%s", err.msg);
    /* a .gguf file that is not there is named, not a config.json beside it */
    snprintf(p, sizeof p, "%s/gone.gguf", tmp);
    cr_assert_eq(hp_model_open(p, &m, &err), HP_ERR_IO);
    cr_assert(strstr(err.msg, "gone.gguf: cannot open (No such file or directory)"), "%s", err.msg);
    cr_assert(!strstr(err.msg, "config.json"), "%s", err.msg);
}

/* ---- a JSON string holding a NUL is refused, not cut ------------------------------------ */

/* cJSON reads a string only up to a NUL: "gpt2\u0000" was read as "gpt2", a key
 * "layer_norm_epsilon\u0000" as layer_norm_epsilon (overriding it), a tensor named
 * "transformer.ln_f.bias\u0000x" as transformer.ln_f.bias. Each is refused naming the file and
 * the string as written. */
Test(model, config_string_with_a_nul_is_refused)
{
    write_weights(NULL, 0);
    edit_config("\"model_type\": \"gpt2\"", "\"model_type\": \"gpt2\\u0000\"");
    expect_fail(HP_ERR_FORMAT, "config.json", "the string \"gpt2\\u0000\" holds a NUL");
    edit_config("\"model_type\": \"gpt2\\u0000\"", "\"model_type\": \"gpt2\"");
    edit_config("\"vocab_size\": 97", "\"vocab_size\": 97,\n  \"layer_norm_epsilon\\u0000\": 0.5");
    expect_fail(HP_ERR_FORMAT, "config.json:31:", "the string \"layer_norm_epsilon\\u0000\" holds a NUL");
}

Test(model, index_shard_name_with_a_nul_is_refused)
{
    char from[1200], to[256];
    snprintf(from, sizeof from, "%s/model.safetensors", src);
    snprintf(to, sizeof to, "%s/model-00001-of-00001.safetensors", tmp);
    cr_assert_eq(symlink(from, to), 0);
    const char idx[] = "{\"weight_map\": {\"transformer.wte.weight\": \"model-00001-of-00001.safetensors\\u0000.bak\"}}";
    spit("model.safetensors.index.json", idx, sizeof idx - 1);
    expect_fail(HP_ERR_FORMAT, "model.safetensors.index.json:1:",
                "the string \"model-00001-of-00001.safetensors\\u0000.bak\" holds a NUL");
}

/* model.safetensors with the header's text from -> to (the data unchanged) */
static void write_weights_renamed(const char *from, const char *to, size_t n_to)
{
    char p[1200];
    size_t n;
    snprintf(p, sizeof p, "%s/model.safetensors", src);
    char *st = tu_slurp(p, &n);
    uint64_t hl;
    memcpy(&hl, st, 8);
    char *at = strstr(st + 8, from); /* the header comes first and holds no NUL */
    cr_assert(at && at < st + 8 + hl, "header has no %s", from);
    uint64_t nh = hl - strlen(from) + n_to;
    char *out = malloc(8 + nh + (n - 8 - hl));
    size_t pre = (size_t)(at - st - 8);
    memcpy(out, &nh, 8);
    memcpy(out + 8, st + 8, pre);
    memcpy(out + 8 + pre, to, n_to);
    memcpy(out + 8 + pre + n_to, at + strlen(from), n - 8 - pre - strlen(from));
    spit("model.safetensors", out, 8 + nh + (n - 8 - hl));
    free(out);
    free(st);
}

Test(model, tensor_name_with_a_nul_is_refused)
{
    const char esc[] = "\"transformer.ln_f.bias\\u0000x\"";
    write_weights_renamed("\"transformer.ln_f.bias\"", esc, sizeof esc - 1);
    expect_fail(HP_ERR_FORMAT, "model.safetensors", "the string \"transformer.ln_f.bias\\u0000x\" holds a NUL");
    /* a raw 0 byte: cJSON copies it into the name, which ends there too */
    const char raw[] = "\"transformer.ln_f.bias\0x\"";
    write_weights_renamed("\"transformer.ln_f.bias\"", raw, sizeof raw - 1);
    expect_fail(HP_ERR_FORMAT, "model.safetensors", "the string \"transformer.ln_f.bias\\u0000x\" holds a NUL");
}

/* Issue 23, item 6: under a folder of ~1,010 bytes or more config.json was read as config.js (1024-byte names).
 * Whole, single-file and sharded checkpoints open under 1,500 and 3,000 bytes of folder as they do under a short one. */
Test(model, opens_under_a_long_folder_as_under_a_short_one)
{
    static const char *const fixtures[] = {"gpt2-tiny", "llama-gqa-sharded", "gpt2-pruned", "bert-cls"};
    for (size_t depth = 1500; depth <= 3000; depth += 1500) {
        char *deep = tu_long_dir(tmp, depth);
        for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++) {
            char *near = malloc(1200), *far = malloc(depth + 600);
            snprintf(near, 1200, "%s/%s", getenv("HP_FIXTURES"), fixtures[i]);
            sprintf(far, "%s/%s", deep, fixtures[i]);
            cr_assert_eq(symlink(near, far), 0);
            struct hp_model *a = NULL, *b = NULL;
            struct hp_error err;
            cr_assert_eq(hp_model_open(near, &a, &err), HP_OK, "%s", err.msg);
            cr_assert_eq(hp_model_open(far, &b, &err), HP_OK, "%s under %zu bytes: %s", fixtures[i], strlen(far), err.msg);
            const struct hp_model_info *x = hp_model_get_info(a), *y = hp_model_get_info(b);
            cr_assert_str_eq(x->model_type, y->model_type);
            cr_assert_eq(x->n_layers, y->n_layers);
            cr_assert_eq(x->n_heads, y->n_heads);
            cr_assert_eq(x->n_params, y->n_params, "%s", fixtures[i]);
            cr_assert_eq(x->n_pruned, y->n_pruned, "%s", fixtures[i]);
            cr_assert_eq(x->n_labels, y->n_labels, "%s", fixtures[i]);
            hp_model_close(a);
            hp_model_close(b);
            free(near);
            free(far);
        }
        free(deep);
    }
}

/* ---- every tensor read, every config key decided ------------------------------------ */

static void expect_open(void)
{
    struct hp_error err = {0};
    struct hp_model *m = NULL;
    cr_assert_eq(hp_model_open(tmp, &m, &err), HP_OK, "%s", err.msg);
    hp_model_close(m);
}

#define ZERO_F32 "{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}"

/* a tensor the loader never reads was ignored, and the model evaluated without it */
Test(model, tensor_not_read_is_refused)
{
    write_weights_ex(NULL, 0, ",\"transformer.h.0.mlp.c_gate.weight\":" ZERO_F32);
    expect_fail(HP_ERR_UNSUPPORTED, "model.safetensors", "tensor 'transformer.h.0.mlp.c_gate.weight' is not read");
}

/* the buffers transformers keeps beside the weights are no part of the maths */
Test(model, known_buffers_are_accepted)
{
    write_weights_ex(NULL, 0, ",\"transformer.h.0.attn.masked_bias\":" ZERO_F32 ",\"transformer.h.2.attn.bias\":" ZERO_F32);
    expect_open();
}

/* The audit on every fixture architecture: a stray tensor beside the weights (under the checkpoint's own
 * prefix, where a real extra weight would sit) is refused naming it, each architecture's known buffers are not. */
Test(model, every_architecture_refuses_an_unread_tensor)
{
    static const struct {
        const char *fixture, *stray, *buffer;
    } cases[] = {
        {"gpt2-tiny", "transformer.h.1.attn.q_norm.weight", "transformer.h.1.attn.bias"},
        {"gpt2-noprefix", "h.1.attn.q_norm.weight", "h.1.attn.masked_bias"},
        {"bert-encoder", "encoder.layer.0.attention.self.q_norm.weight", "embeddings.position_ids"},
        {"bert-mlm", "bert.encoder.layer.0.attention.self.q_norm.weight", "bert.embeddings.position_ids"},
        {"bert-cls", "bert.encoder.layer.0.attention.self.q_norm.weight", "bert.embeddings.position_ids"},
        {"llama-gqa", "model.layers.1.self_attn.q_norm.weight", "model.layers.1.self_attn.rotary_emb.inv_freq"},
        {"qwen2-bias", "model.layers.0.self_attn.q_norm.weight", "model.layers.0.self_attn.rotary_emb.inv_freq"},
        /* Qwen3 with attention_bias false: a bias is not silently added */
        {"qwen3-qknorm", "model.layers.2.self_attn.q_proj.bias", "model.layers.0.self_attn.rotary_emb.inv_freq"},
        /* Phi-3's q is in qkv_proj: a q_proj beside it is not taken for it */
        {"phi3-fused", "model.layers.1.self_attn.q_proj.weight", "model.layers.0.self_attn.rotary_emb.inv_freq"},
        {"mistral-window", "model.layers.0.self_attn.k_norm.weight", "model.layers.0.self_attn.rotary_emb.inv_freq"},
        {"llama-tied-bf16", "model.layers.0.post_feedforward_layernorm.weight", "model.rotary_emb.inv_freq"},
        /* GPT-NeoX's q, k and v are in query_key_value; attention_bias false: no bias is added */
        {"neox-parallel", "gpt_neox.layers.1.attention.q_proj.weight", "gpt_neox.layers.0.attention.rotary_emb.inv_freq"},
        {"neox-sequential", "gpt_neox.layers.0.attention.query_key_value.bias", "gpt_neox.layers.2.attention.masked_bias"},
        /* OLMo 2 has no norm before attention: an input_layernorm is not taken for one */
        {"olmo2-post-norms", "model.layers.1.input_layernorm.weight", "model.layers.0.self_attn.rotary_emb.inv_freq"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char extra[256], words[160];
        use_fixture(cases[i].fixture);
        snprintf(extra, sizeof extra, ",\"%s\":" ZERO_F32, cases[i].stray);
        write_weights_ex(NULL, 0, extra);
        snprintf(words, sizeof words, "tensor '%s' is not read", cases[i].stray);
        cr_log_info("%s: %s", cases[i].fixture, cases[i].stray);
        expect_fail(HP_ERR_UNSUPPORTED, "model.safetensors", words);
        snprintf(extra, sizeof extra, ",\"%s\":" ZERO_F32, cases[i].buffer);
        write_weights_ex(NULL, 0, extra);
        expect_open();
    }
}

Test(model, llama_rotary_cache_is_accepted)
{
    use_fixture("llama-gqa");
    write_weights_ex(NULL, 0, ",\"model.layers.1.self_attn.rotary_emb.inv_freq\":" ZERO_F32);
    expect_open();
}

/* mlp_bias false: transformers' LlamaMLP has no biases, so stored ones are not part of the model */
Test(model, llama_mlp_biases_without_mlp_bias)
{
    copy_fixture("llama-mlp-bias");
    edit_config("\"mlp_bias\": true", "\"mlp_bias\": false");
    expect_fail(HP_ERR_UNSUPPORTED, "model.safetensors", "mlp.down_proj.bias' is not read");
}

Test(model, llama_attention_biases_without_attention_bias)
{
    copy_fixture("llama-mlp-bias");
    edit_config("\"attention_bias\": true", "\"attention_bias\": false");
    expect_fail(HP_ERR_UNSUPPORTED, "model.safetensors", "self_attn.k_proj.bias' is not read");
}

Test(model, llama_mlp_bias_without_its_tensors)
{
    copy_llama();
    edit_config("\"mlp_bias\": false", "\"mlp_bias\": true");
    expect_fail(HP_ERR_SHAPE, tmp, "mlp.gate_proj.bias' is missing");
}

/* tied, the head is the embedding: a stored head that differs from it is one or the other */
Test(model, gpt2_tied_with_a_different_head)
{
    copy_fixture("gpt2-untied");
    edit_config("\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true");
    expect_fail(HP_ERR_UNSUPPORTED, "model.safetensors", "'lm_head.weight' differs from the embedding");
}

/* transformers 4.57 refuses it ("Missing required keys in `rope_scaling` for 'rope_type'='None'") */
Test(model, rope_scaling_factor_without_a_type)
{
    llama_config("llama-rope-linear", ",\n    \"rope_type\": \"linear\"", "");
    expect_fail(HP_ERR_FORMAT, "config.json", "rope_scaling has no \"rope_type\"");
}

/*
 * Both keys, different: LlamaConfig and Qwen2Config copy "type" over "rope_type" (this config is linear
 * scaling by 4 in transformers 4.57, loss 7.066591 on the fixture's data), MistralConfig keeps "rope_type".
 * headprune read "rope_type" alone and ran it unscaled (6.796194), exit 0.
 */
Test(model, rope_scaling_with_two_different_types)
{
    llama_config("llama-rope-linear", "\"rope_type\": \"linear\"", "\"rope_type\": \"default\", \"type\": \"linear\"");
    expect_fail(HP_ERR_FORMAT, "config.json", "rope_scaling names \"rope_type\" \"default\" and \"type\" \"linear\"");
}

/* the same name twice, as configs saved by transformers from an old one carry it: the scaling they name */
Test(model, rope_scaling_with_both_keys_alike_opens)
{
    copy_fixture("llama-rope-linear");
    edit_config("\"rope_type\": \"linear\"", "\"rope_type\": \"linear\", \"type\": \"linear\"");
    struct hp_model *m;
    struct hp_error err = {0};
    cr_assert_eq(hp_model_open(tmp, &m, &err), HP_OK, "%s", err.msg);
    hp_model_close(m);
}

Test(model, headprune_record_kv_heads_named)
{
    write_weights(NULL, 0);
    edit_config("\"model_type\": \"gpt2\"", "\"model_type\": \"gpt2\", \"headprune\": {\"n_heads\": 4, \"n_kv_heads\": 2}");
    expect_fail(HP_ERR_FORMAT, "config.json", "\"headprune\".\"n_kv_heads\" 2");
}

/* BertModel with is_decoder builds a causal mask (get_extended_attention_mask) */
Test(model, bert_as_a_decoder_is_refused)
{
    copy_fixture("bert-mlm");
    edit_config("\"model_type\": \"bert\"", "\"model_type\": \"bert\", \"is_decoder\": true");
    expect_fail(HP_ERR_UNSUPPORTED, "config.json", "\"is_decoder\"");
}

/* a key that changes transformers' maths, at a value the engine does not implement, is named */
Test(model, math_key_not_implemented_is_named)
{
    copy_llama();
    edit_config("\"mlp_bias\": false", "\"mlp_bias\": false, \"partial_rotary_factor\": 0.5");
    expect_fail(HP_ERR_UNSUPPORTED, "config.json", "\"partial_rotary_factor\"");
}

Test(model, math_key_at_its_default_opens)
{
    copy_llama();
    edit_config("\"mlp_bias\": false", "\"mlp_bias\": false, \"partial_rotary_factor\": 1.0");
    expect_open();
}

Test(model, gpt2_cross_attention_is_refused)
{
    write_weights(NULL, 0);
    edit_config("\"model_type\": \"gpt2\"", "\"model_type\": \"gpt2\", \"add_cross_attention\": true");
    expect_fail(HP_ERR_UNSUPPORTED, "config.json", "\"add_cross_attention\"");
}

/* The key's entry in the fixture's list for model_type, or NULL. */
static cJSON *fixture_key(cJSON *archs, const char *model_type, const char *key)
{
    cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(archs, model_type))
        if (strcmp(cJSON_GetObjectItem(e, "key")->valuestring, key) == 0)
            return e;
    return NULL;
}

/*
 * tests/fixtures/config-keys.json lists every key transformers' configuration
 * class and modeling code know for each architecture (tools/gen_config_keys.py):
 * the engine's tables must decide each one, and hold no row transformers does
 * not know. Regenerated for a new transformers release, a new key fails here
 * until engine/model/config_keys.c and docs/checkpoints.md decide it.
 */
Test(model, every_transformers_config_key_is_decided)
{
    char p[1200];
    size_t n;
    snprintf(p, sizeof p, "%s/config-keys.json", getenv("HP_FIXTURES"));
    char *txt = tu_slurp(p, &n);
    cJSON *j = cJSON_Parse(txt), *archs = cJSON_GetObjectItem(j, "architectures"), *a, *e;
    cr_assert(cJSON_IsObject(archs), "%s: no \"architectures\"", p);
    int bad = 0, n_arch = 0, n_keys = 0;
    cJSON_ArrayForEach(a, archs)
    {
        int nr;
        const struct hp_config_key *rows = hp_config_keys(a->string, &nr);
        cr_assert(rows, "no table of config keys for model_type %s", a->string);
        n_arch++;
        cJSON_ArrayForEach(e, a)
        {
            const char *key = cJSON_GetObjectItem(e, "key")->valuestring;
            char *from = cJSON_PrintUnformatted(cJSON_GetObjectItem(e, "from"));
            n_keys++;
            if (!hp_config_key_find(a->string, key) && ++bad <= 10)
                cr_log_error("%s: \"%s\" (transformers' %s) has no row in engine/model/config_keys.c", a->string, key, from);
            free(from);
        }
        /* no stale rows: each of the architecture's own is a key transformers knows for it */
        for (int i = 0; i < nr; i++)
            if (!fixture_key(archs, a->string, rows[i].key) && ++bad <= 10)
                cr_log_error("%s: engine/model/config_keys.c decides \"%s\", which transformers %s does not know", a->string,
                             rows[i].key, cJSON_GetObjectItem(j, "transformers")->valuestring);
    }
    /* the shared rows are PretrainedConfig's: every architecture knows them (headprune's record aside) */
    int ns;
    const struct hp_config_key *shared = hp_config_keys(NULL, &ns);
    for (int i = 0; i < ns; i++) {
        bool anywhere = strcmp(shared[i].key, "headprune") == 0;
        cJSON_ArrayForEach(a, archs) anywhere |= fixture_key(archs, a->string, shared[i].key) != NULL;
        if (!anywhere && ++bad <= 10)
            cr_log_error("engine/model/config_keys.c's shared row \"%s\" is a key no architecture knows", shared[i].key);
        /* an accepted default is JSON text */
        for (int k = 0; shared[i].rule == HP_KEY_DEFAULT && shared[i].ok[k]; k++) {
            cJSON *v = cJSON_Parse(shared[i].ok[k]);
            cr_assert(v, "\"%s\": accepted value %s is not JSON", shared[i].key, shared[i].ok[k]);
            cJSON_Delete(v);
        }
    }
    cr_assert_eq(n_arch, 11, "gpt2, bert, llama, mistral, qwen2, qwen3, phi3, gpt_neox, olmo2, gemma2 and gemma3_text "
                             "expected in %s", p);
    cr_assert_eq(bad, 0, "%d config keys undecided or stale (first 10 above; %d keys checked)", bad, n_keys);
    cJSON_Delete(j);
    free(txt);
}

/*
 * The model_types headprune reads (model.h's HP_MODEL_TYPES, from which the architecture lookup, the config-key
 * tables and the Llama family's rows are all indexed) are the ones transformers' config-keys fixture lists: each
 * has its table of keys and is one transformers knows, and each architecture of the fixture is read.
 */
Test(model, every_model_type_has_its_tables)
{
    char p[1200];
    size_t n;
    snprintf(p, sizeof p, "%s/config-keys.json", getenv("HP_FIXTURES"));
    char *txt = tu_slurp(p, &n);
    cJSON *j = cJSON_Parse(txt), *archs = cJSON_GetObjectItem(j, "architectures"), *a;
    int n_types = 0;
    for (const char *mt; (mt = hp_model_type_at(n_types)); n_types++) {
        int nr;
        cr_expect(hp_config_keys(mt, &nr) && nr > 0, "model_type %s has no table in engine/model/config_keys.c", mt);
        cr_expect(cJSON_GetObjectItem(archs, mt), "model_type %s is not in %s", mt, p);
    }
    int n_fixture = 0;
    cJSON_ArrayForEach(a, archs)
    {
        bool known = false;
        for (int i = 0; hp_model_type_at(i); i++)
            known |= strcmp(hp_model_type_at(i), a->string) == 0;
        cr_expect(known, "%s's model_type %s is not in model.c's architecture table", p, a->string);
        n_fixture++;
    }
    cr_assert_eq(n_types, n_fixture, "%d model_types accepted, %d in %s", n_types, n_fixture, p);
    cJSON_Delete(j);
    free(txt);
}

/* every accepted default of every table is JSON, and the audit accepts it */
Test(model, config_key_defaults_are_accepted)
{
    static const char *const archs[] = {"gpt2", "bert",     "llama", "mistral", "qwen2",      "qwen3",
                                        "phi3", "gpt_neox", "olmo2", "gemma2",  "gemma3_text"};
    for (int a = 0; a < 11; a++) {
        int nr;
        const struct hp_config_key *rows = hp_config_keys(archs[a], &nr);
        for (int i = 0; i < nr; i++)
            for (int k = 0; rows[i].rule == HP_KEY_DEFAULT && rows[i].ok[k]; k++) {
                char text[256];
                snprintf(text, sizeof text, "{\"%s\": %s}", rows[i].key, rows[i].ok[k]);
                cJSON *c = cJSON_Parse(text);
                cr_assert(c, "%s: \"%s\": accepted value %s is not JSON", archs[a], rows[i].key, rows[i].ok[k]);
                struct hp_error err = {0};
                cr_assert_eq(hp_config_audit(archs[a], c, "config.json", &err), HP_OK, "%s", err.msg);
                cJSON_Delete(c);
            }
    }
}

// --- every honoured config key against transformers --------------------------------------------------------

/* A folder holding fixture's weights (linked) and config text cfg as config.json, into dir (64 bytes). */
static void keys_checkpoint(char *dir, const char *fixture, const char *cfg)
{
    tu_mkdtemp(dir, 64, "keys");
    char src[1200], dst[1200];
    const char *const files[] = {"model.safetensors", "model.safetensors.index.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(src, sizeof src, "%s/%s/%s", getenv("HP_FIXTURES"), fixture, files[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        if (access(src, F_OK) == 0)
            cr_assert_eq(symlink(src, dst), 0, "cannot link %s", src);
    }
    snprintf(dst, sizeof dst, "%s/config.json", dir);
    FILE *f = fopen(dst, "w");
    cr_assert(f && fputs(cfg, f) >= 0 && fclose(f) == 0, "cannot write %s", dst);
}

/* The loss of case c's checkpoint dir on its fixture's data under mask (NULL: none); HP_OK or the refusal. */
static enum hp_status keys_loss(const char *dir, const cJSON *c, const char *mask, double *loss, struct hp_error *err)
{
    struct hp_model *m = NULL;
    struct hp_data *d = NULL;
    struct hp_eval_result *r = NULL;
    char data[1200];
    snprintf(data, sizeof data, "%s/%s/%s", getenv("HP_FIXTURES"), cJSON_GetObjectItem(c, "fixture")->valuestring,
             cJSON_GetObjectItem(c, "data")->valuestring);
    enum hp_status st = hp_model_open(dir, &m, err);
    if (st == HP_OK)
        st = hp_data_load_for(data, dir, hp_model_get_info(m), 0, &d, err);
    const struct hp_eval_opts o = {.mask = mask, .ablation = HP_ABLATE_ZERO, .threads = 1};
    if (st == HP_OK && (st = hp_eval(m, d, &o, &r, err)) == HP_OK)
        *loss = r->mt->loss;
    hp_eval_result_free(r);
    hp_data_free(d);
    hp_model_close(m);
    return st;
}

/*
 * tests/fixtures/config-key-cases.json (tools/gen_config_key_cases.py): each config.json key headprune honours,
 * changed alone on a fixture, scored by transformers in float64 unmasked and with layer 1 ablated. Where
 * transformers loads the changed checkpoint cleanly headprune must give its losses (1e-5 relative, as
 * test_reference.c); where it cannot (a tensor missing, unused or of another shape), or the value is one
 * headprune documents it does not implement, headprune must refuse in one line (naming the key for the
 * latter). A key transformers' modeling code never reads (Gemma 3's attn_logit_softcapping) is caught the same
 * way: changing it changes transformers' numbers not at all. Every key config_keys.c marks honoured must have a
 * case or an exemption naming the test that covers it, and the decision each case was made under (from
 * docs/checkpoints.md) must be config_keys.c's.
 */
Test(model, every_honoured_config_key_matches_transformers)
{
    char p[1200];
    snprintf(p, sizeof p, "%s/config-key-cases.json", getenv("HP_FIXTURES"));
    char *txt = tu_slurp(p, NULL);
    cJSON *j = cJSON_Parse(txt), *cases = cJSON_GetObjectItem(j, "cases"), *masks = cJSON_GetObjectItem(j, "masks"),
          *exempt = cJSON_GetObjectItem(j, "exempt"), *c;
    cr_assert(cJSON_IsArray(cases) && cJSON_IsArray(masks) && cJSON_IsObject(exempt), "%s: not the tool's output", p);
    int bad = 0, n_same = 0, n_refused = 0;
    cJSON_ArrayForEach(c, cases)
    {
        const char *mt = cJSON_GetObjectItem(c, "model_type")->valuestring,
                   *key = cJSON_GetObjectItem(c, "key")->valuestring,
                   *expect = cJSON_GetObjectItem(c, "expect")->valuestring,
                   *decision = cJSON_GetObjectItem(c, "decision")->valuestring;
        const struct hp_config_key *row = hp_config_key_find(mt, key);
        const bool honour = row && row->rule == HP_KEY_HONOUR, ignore = row && row->rule == HP_KEY_IGNORE;
        if (!(strcmp(decision, "honoured") == 0 ? honour : strcmp(decision, "irrelevant") == 0 && ignore) && ++bad)
            cr_log_error("%s \"%s\": docs/checkpoints.md says %s, engine/model/config_keys.c %s", mt, key, decision,
                         !row ? "has no row" : honour ? "honoured" : ignore ? "irrelevant" : "refused unless default");
        char *cfg = cJSON_Print(cJSON_GetObjectItem(c, "config")), *edits = cJSON_PrintUnformatted(
                                                                          cJSON_GetObjectItem(c, "edits"));
        char dir[64];
        keys_checkpoint(dir, cJSON_GetObjectItem(c, "fixture")->valuestring, cfg);
        const bool same = strcmp(expect, "same") == 0, none = strcmp(expect, "no_reference") == 0;
        n_same += same, n_refused += !same && !none;
        for (int k = 0; k < cJSON_GetArraySize(masks); k++) {
            const char *spec = cJSON_GetArrayItem(masks, k)->valuestring;
            double loss = NAN;
            struct hp_error err = {0};
            enum hp_status st = keys_loss(dir, c, *spec ? spec : NULL, &loss, &err);
            if (same) {
                const double want = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "loss"), k)->valuedouble;
                if (st != HP_OK && ++bad <= 60)
                    cr_log_error("%s %s, mask '%s': refused (%s) where transformers gives loss %.6f", mt, edits, spec,
                                 err.msg, want);
                else if (st == HP_OK && !(fabs(loss - want) <= 1e-5 * fabs(want)) && ++bad <= 60)
                    cr_log_error("%s %s, mask '%s': loss %.6f, transformers (float64) %.6f", mt, edits, spec, loss,
                                 want);
            } else if (none) { /* transformers failed by accident: headprune may run or refuse, in one line */
                if (st != HP_OK && strchr(err.msg, '\n') && ++bad <= 60)
                    cr_log_error("%s %s: the refusal is not one line: %s", mt, edits, err.msg);
            } else {
                /* a value headprune documents as unsupported: the refusal names the key (or the word the case
                 * gives); a checkpoint transformers cannot load: it names the checkpoint, not the data */
                const char *name = cJSON_GetObjectItem(c, "name")->valuestring, *want = *name ? name : dir;
                if (st == HP_OK && ++bad <= 60)
                    cr_log_error("%s %s, mask '%s': loss %.6f where headprune should refuse (%s)", mt, edits, spec,
                                 loss, cJSON_GetObjectItem(c, "why")->valuestring);
                else if (st != HP_OK && (strchr(err.msg, '\n') || !strstr(err.msg, want)) && ++bad <= 60)
                    cr_log_error("%s %s: the refusal is not one line naming \"%s\": %s", mt, edits, want, err.msg);
            }
        }
        tu_rmrf(dir);
        free(cfg);
        free(edits);
    }
    /* every honoured key of every table has its case, or an exemption naming the test that covers it */
    for (int t = 0; hp_model_type_at(t); t++) {
        const char *mt = hp_model_type_at(t);
        for (const char *tab = mt;; tab = NULL) {
            int nr;
            const struct hp_config_key *rows = hp_config_keys(tab, &nr);
            for (int i = 0; i < nr; i++) {
                if (rows[i].rule != HP_KEY_HONOUR || hp_config_key_find(mt, rows[i].key) != &rows[i] ||
                    cJSON_GetObjectItem(exempt, rows[i].key))
                    continue;
                /* a case that moves transformers' numbers, or that headprune must refuse: one where the loss
                 * stays put would pass with the key ignored */
                bool has = false;
                cJSON_ArrayForEach(c, cases)
                {
                    const char *expect = cJSON_GetObjectItem(c, "expect")->valuestring;
                    has |= strcmp(cJSON_GetObjectItem(c, "model_type")->valuestring, mt) == 0 &&
                           strcmp(cJSON_GetObjectItem(c, "key")->valuestring, rows[i].key) == 0 &&
                           (strcmp(expect, "refused") == 0 ||
                            (strcmp(expect, "same") == 0 && cJSON_IsTrue(cJSON_GetObjectItem(c, "changes"))));
                }
                if (!has && ++bad)
                    cr_log_error("%s \"%s\" is honoured but has no case in %s that changes transformers' loss or "
                                 "that headprune must refuse (tools/gen_config_key_cases.py)",
                                 mt, rows[i].key, p);
            }
            if (!tab)
                break;
        }
    }
    cr_assert_eq(bad, 0, "%d config-key cases disagree with transformers (first 20 above; %d compared, %d refused)",
                 bad, n_same, n_refused);
    cr_assert_gt(n_same, 100, "%s: %d cases compared", p, n_same);
    cJSON_Delete(j);
    free(txt);
}

/* The features the passes and front ends read instead of the architecture (scripts/check-structure.py keeps the
 * architecture inside the loader): token types, a gated MLP, how transformers reads a pruned checkpoint. */
Test(model, features_the_stages_read)
{
    static const struct {
        const char *fixture;
        int n_token_types;
        bool gated;
        enum hp_hf_prune prune;
    } want[] = {{"gpt2-tiny", 0, false, HP_HF_PRUNE_KEY},         {"bert-mlm", 2, false, HP_HF_PRUNE_KEY},
                {"llama-gqa", 0, true, HP_HF_PRUNE_COMPACT},      {"phi3-fused", 0, true, HP_HF_PRUNE_COMPACT},
                {"gemma3-local", 0, true, HP_HF_PRUNE_COMPACT},   {"neox-parallel", 0, false, HP_HF_PRUNE_NONE},
                {"llama-gguf/model.Q8_0-mixed.gguf", 0, true, HP_HF_PRUNE_COMPACT}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char p[1200];
        snprintf(p, sizeof p, "%s/%s", getenv("HP_FIXTURES"), want[i].fixture);
        struct hp_model *m = NULL;
        struct hp_error err = {0};
        cr_assert_eq(hp_model_open(p, &m, &err), HP_OK, "%s", err.msg);
        const struct hp_model_info *in = hp_model_get_info(m);
        cr_expect_eq(in->n_token_types, want[i].n_token_types, "%s: token types", want[i].fixture);
        cr_expect_eq(in->gated_mlp, want[i].gated, "%s: gated MLP", want[i].fixture);
        cr_expect_eq(in->hf_prune, want[i].prune, "%s: how transformers prunes it", want[i].fixture);
        hp_model_close(m);
    }
}
