/*
 * test_gguf.c -- the GGUF reader (engine/model/gguf.c): fixtures written by the gguf Python package, and
 * hostile files built here byte by byte.
 *
 * Numbers are checked against gguf-py, not against this code: each fixture
 * tests/fixtures/gguf/<type>.gguf (tools/gen_gguf_fixtures.py, GGUFWriter) comes with <type>.f32,
 * gguf.quants.dequantize of its tensors in file order, and every element must be the same bits
 * (the reference multiplies and adds in ggml's order, so there is no rounding to allow for).
 * Every bad file must fail with its own status and a one-line message saying what is wrong;
 * the sanitizer build (scripts/test.sh) checks that none reads past its buffer. Last, a tiny llama
 * file built here opened as a model (engine/model/gguf_model.c): metadata that disagrees with its tensors
 * is refused in the file's terms, its own tensor names and metadata keys.
 */
#define _DEFAULT_SOURCE /* mkdtemp, in testutil.h */
#include "gguf.h"
#include "testutil.h"

#include <criterion/criterion.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// --- fixtures ------------------------------------------------------------------

static char *fixture_path(const char *file)
{
    const char *dir = getenv("HP_FIXTURES");
    cr_assert_not_null(dir, "HP_FIXTURES must name tests/fixtures");
    size_t n = strlen(dir) + strlen(file) + 8;
    char *p = malloc(n);
    snprintf(p, n, "%s/gguf/%s", dir, file);
    return p;
}

static struct hp_gguf *open_fixture(const char *file)
{
    char *p = fixture_path(file);
    struct hp_gguf *g = NULL;
    struct hp_error err = {{0}};
    enum hp_status st = hp_gguf_open(p, &g, &err);
    cr_assert_eq(st, HP_OK, "%s: %s: %s", file, hp_status_name(st), err.msg);
    cr_assert_not_null(g);
    free(p);
    return g;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* got against want (n), bit for bit: print the first few mismatches and the largest difference, then fail. */
static void expect_same_bits(const char *what, const float *got, const float *want, int64_t n)
{
    int64_t bad = 0;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        if (bits_of(got[i]) == bits_of(want[i]))
            continue;
        if (bad < 5)
            cr_log_error("%s[%" PRId64 "]: %.9g (0x%08x), gguf-py %.9g (0x%08x)", what, i, (double)got[i],
                         bits_of(got[i]), (double)want[i], bits_of(want[i]));
        double d = fabs((double)got[i] - (double)want[i]);
        if (d > worst || isnan(d))
            worst = d;
        bad++;
    }
    cr_assert_eq(bad, 0, "%s: %" PRId64 " of %" PRId64 " elements differ from gguf-py (largest difference %g)", what,
                 bad, n, worst);
}

struct want_tensor {
    const char *name;
    int n_dims;
    int64_t ne[4];
};

/* The tensors tools/gen_gguf_fixtures.py writes for each type (ne in ggml order). */
static const struct want_tensor float_tensors[] = {{"blk.0.attn_q.weight", 4, {8, 4, 3, 2}},
                                                   {"blk.0.ffn_down.weight", 1, {5, 1, 1, 1}}};
static const struct want_tensor q32_tensors[] = {{"blk.0.attn_q.weight", 2, {64, 4, 1, 1}},
                                                 {"blk.0.ffn_down.weight", 3, {32, 3, 2, 1}}};
static const struct want_tensor k_tensors[] = {{"blk.0.attn_q.weight", 2, {256, 2, 1, 1}},
                                               {"blk.0.ffn_down.weight", 1, {256, 1, 1, 1}}};

/* Open file, check its tensors' names, shapes and type, dequantize each both ways and compare with ref. */
static void check_fixture(const char *file, const char *ref, enum hp_gguf_type type, uint32_t version,
                          uint32_t alignment, const struct want_tensor *want)
{
    struct hp_gguf *g = open_fixture(file);
    cr_assert_eq(hp_gguf_version(g), version);
    cr_assert_eq(hp_gguf_alignment(g), alignment, "%s: alignment %u", file, hp_gguf_alignment(g));
    cr_assert_eq(hp_gguf_tensor_count(g), 2);
    size_t n_ref;
    char *rp = fixture_path(ref);
    float *r = (float *)tu_slurp(rp, &n_ref);
    free(rp);
    size_t used = 0, data_len;
    const uint8_t *data = hp_gguf_data(g, &data_len);
    for (int i = 0; i < 2; i++) {
        const struct hp_gguf_tensor *t = hp_gguf_tensor_at(g, i);
        const struct hp_gguf_type_info *ti = hp_gguf_type_info(type);
        cr_assert_str_eq(t->name, want[i].name);
        cr_assert_eq(t->type, type, "%s: '%s' has type %d", file, t->name, (int)t->type);
        cr_assert_eq(t->n_dims, want[i].n_dims, "%s: '%s' has %d dims", file, t->name, t->n_dims);
        int64_t nel = 1;
        for (int d = 0; d < 4; d++) {
            cr_assert_eq(t->ne[d], want[i].ne[d], "%s: '%s' ne[%d] = %" PRId64, file, t->name, d, t->ne[d]);
            nel *= want[i].ne[d];
        }
        cr_assert_eq(t->nel, nel);
        cr_assert_eq(t->nbytes, (size_t)(nel / ti->block_size * ti->block_bytes));
        cr_assert_eq((const uint8_t *)t->data, data + t->offset);
        cr_assert(t->offset % alignment == 0 && t->offset + t->nbytes <= data_len);
        cr_assert_eq(hp_gguf_find_tensor(g, t->name), t);
        cr_assert_leq(used + (size_t)nel * 4, n_ref, "%s: the reference is too short", ref);
        float *y = malloc((size_t)nel * sizeof *y), *z = malloc((size_t)nel * sizeof *z);
        struct hp_error err = {{0}};
        cr_assert_eq(hp_gguf_tensor_dequant(g, t, y, &err), HP_OK, "%s", err.msg);
        char what[128];
        snprintf(what, sizeof what, "%s: %s", file, t->name);
        expect_same_bits(what, y, r + used / 4, nel);
        cr_assert_eq(hp_gguf_dequant(type, t->data, z, nel), HP_OK);
        cr_assert(memcmp(y, z, (size_t)nel * sizeof *y) == 0, "%s: hp_gguf_dequant differs", what);
        used += (size_t)nel * 4;
        free(y);
        free(z);
    }
    cr_assert_eq(used, n_ref, "%s: %zu bytes of reference, %zu used", ref, n_ref, used);
    cr_assert_null(hp_gguf_find_tensor(g, "blk.0.attn_k.weight"));
    cr_assert_null(hp_gguf_tensor_at(g, 2));
    cr_assert_null(hp_gguf_tensor_at(g, -1));
    free(r);
    hp_gguf_close(g);
}

Test(gguf, dequant_f32) { check_fixture("f32.gguf", "f32.f32", HP_GGUF_F32, 3, 32, float_tensors); }
Test(gguf, dequant_f16) { check_fixture("f16.gguf", "f16.f32", HP_GGUF_F16, 3, 32, float_tensors); }
Test(gguf, dequant_bf16) { check_fixture("bf16.gguf", "bf16.f32", HP_GGUF_BF16, 3, 32, float_tensors); }
Test(gguf, dequant_q8_0) { check_fixture("q8_0.gguf", "q8_0.f32", HP_GGUF_Q8_0, 3, 32, q32_tensors); }
Test(gguf, dequant_q4_0) { check_fixture("q4_0.gguf", "q4_0.f32", HP_GGUF_Q4_0, 3, 64, q32_tensors); }
Test(gguf, dequant_q4_1) { check_fixture("q4_1.gguf", "q4_1.f32", HP_GGUF_Q4_1, 3, 32, q32_tensors); }
Test(gguf, dequant_q4_k) { check_fixture("q4_k.gguf", "q4_k.f32", HP_GGUF_Q4_K, 3, 16, k_tensors); }
Test(gguf, dequant_q5_k) { check_fixture("q5_k.gguf", "q5_k.f32", HP_GGUF_Q5_K, 3, 32, k_tensors); }
Test(gguf, dequant_q6_k) { check_fixture("q6_k.gguf", "q6_k.f32", HP_GGUF_Q6_K, 3, 32, k_tensors); }
/* the same file with its version field 2: versions 2 and 3 share the little-endian layout */
Test(gguf, version_2) { check_fixture("q8_0-v2.gguf", "q8_0.f32", HP_GGUF_Q8_0, 2, 32, q32_tensors); }

/* The reader's type table against gguf-py's GGML_QUANT_SIZES (types.tsv), row by row. */
Test(gguf, type_table)
{
    char *p = fixture_path("types.tsv");
    char *tsv = tu_slurp(p, NULL);
    free(p);
    int rows = 0, supported = 0;
    for (char *line = strtok(tsv, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#')
            continue;
        char name[32];
        unsigned id;
        int block, bytes;
        cr_assert_eq(sscanf(line, "%31s %u %d %d", name, &id, &block, &bytes), 4, "types.tsv: '%s'", line);
        enum hp_gguf_type t;
        cr_assert(hp_gguf_type_from_ggml(id, &t), "gguf-py's %s (%u) is unknown here", name, id);
        const struct hp_gguf_type_info *ti = hp_gguf_type_info(t);
        cr_assert_str_eq(ti->name, name);
        cr_assert_eq(ti->block_size, block, "%s", name);
        /* gguf-py still sizes Q8_1 with f32 d and s (40 bytes); ggml's block_q8_1 has two f16 (36) */
        cr_assert_eq(ti->block_bytes, strcmp(name, "Q8_1") == 0 ? 36 : bytes, "%s", name);
        rows++;
    }
    free(tsv);
    cr_assert_eq(rows, HP_GGUF_TYPE_COUNT, "gguf-py has %d types, the reader %d", rows, HP_GGUF_TYPE_COUNT);
    uint32_t last = 0;
    for (int i = 0; i < HP_GGUF_TYPE_COUNT; i++) {
        const struct hp_gguf_type_info *ti = hp_gguf_type_info((enum hp_gguf_type)i);
        cr_assert(ti && ti->name && ti->block_size > 0 && ti->block_bytes > 0, "row %d", i);
        cr_assert(i == 0 || ti->ggml_id > last, "row %d (%s) out of order", i, ti->name);
        last = ti->ggml_id;
        supported += ti->to_f32 != NULL;
    }
    cr_assert_eq(supported, 9);
    cr_assert_null(hp_gguf_type_info(HP_GGUF_TYPE_COUNT));
    static const uint32_t removed[] = {4, 5, 31, 32, 33, 36, 37, 38, 42, 1000, UINT32_MAX};
    enum hp_gguf_type t;
    for (size_t i = 0; i < sizeof removed / sizeof removed[0]; i++)
        cr_assert(!hp_gguf_type_from_ggml(removed[i], &t), "ggml type %u known", removed[i]);
    cr_assert_str_eq(hp_gguf_vtype_name(HP_GGUF_V_F64), "f64");
    cr_assert_str_eq(hp_gguf_vtype_name(HP_GGUF_V_COUNT), "?");
}

/* Direct calls: a count that is not a whole number of blocks, an unsupported type, n = 0. */
Test(gguf, dequant_arguments)
{
    uint8_t blk[210] = {0};
    float y[256];
    cr_assert_eq(hp_gguf_dequant(HP_GGUF_Q4_K, blk, y, 100), HP_ERR_ARG);
    cr_assert_eq(hp_gguf_dequant(HP_GGUF_Q8_0, blk, y, -32), HP_ERR_ARG);
    cr_assert_eq(hp_gguf_dequant(HP_GGUF_TYPE_COUNT, blk, y, 1), HP_ERR_ARG);
    cr_assert_eq(hp_gguf_dequant(HP_GGUF_Q2_K, blk, y, 256), HP_ERR_UNSUPPORTED);
    cr_assert_eq(hp_gguf_dequant(HP_GGUF_Q6_K, blk, y, 0), HP_OK);
    cr_assert_eq(hp_gguf_dequant(HP_GGUF_Q6_K, blk, y, 256), HP_OK);
    for (int i = 0; i < 256; i++)
        cr_assert(y[i] == 0.0f);
}

/* A file with tensors of types headprune does not dequantize opens; dequantizing them says which. */
Test(gguf, unsupported_type)
{
    struct hp_gguf *g = open_fixture("unsupported.gguf");
    const struct hp_gguf_tensor *k = hp_gguf_find_tensor(g, "blk.0.attn_k.weight");
    const struct hp_gguf_tensor *v = hp_gguf_find_tensor(g, "blk.0.attn_v.weight");
    cr_assert(k && v);
    cr_assert_eq(k->type, HP_GGUF_Q2_K);
    cr_assert_eq(v->type, HP_GGUF_Q5_0);
    cr_assert_eq(k->nbytes, 84);
    cr_assert_eq(v->nel, 64);
    float y[256];
    struct hp_error err = {{0}};
    cr_assert_eq(hp_gguf_tensor_dequant(g, k, y, &err), HP_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "unsupported.gguf: tensor 'blk.0.attn_k.weight' has type Q2_K (ggml type 10): "
                              "unsupported tensor type (headprune dequantizes F32, F16, Q4_0, Q4_1, Q8_0, Q4_K, "
                              "Q5_K, Q6_K, BF16)"), "%s", err.msg);
    cr_assert_eq(hp_gguf_tensor_dequant(g, v, y, &err), HP_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "'blk.0.attn_v.weight' has type Q5_0 (ggml type 6)"), "%s", err.msg);
    hp_gguf_close(g);
}

// --- metadata --------------------------------------------------------------------------

static const char *const tokens[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81the", "\xe2\x96\x81" "a",
                                     "\xc3\xa9t\xc3\xa9", "\n", "", "<0x0A>", "\xe2\x96\x81GGUF"};

static void expect_str(struct hp_gguf_str s, const char *want)
{
    cr_assert(s.len == strlen(want) && memcmp(s.p, want, s.len) == 0, "'%.*s', want '%s'", (int)s.len, s.p, want);
}

/* A getter's failure: its status and a message holding part. */
#define EXPECT_GET_FAILS(call, part)                                                                  \
    do {                                                                                              \
        struct hp_error e_ = {{0}};                                                                   \
        enum hp_status st_ = (call);                                                                  \
        (void)e_;                                                                                     \
        cr_assert_eq(st_, HP_ERR_FORMAT, "%s succeeded", #call);                                     \
        cr_assert(strstr(err.msg, (part)), "%s: '%s' lacks '%s'", #call, err.msg, (part));           \
    } while (0)

Test(gguf, metadata_scalars)
{
    struct hp_gguf *g = open_fixture("q4_k.gguf");
    struct hp_error err = {{0}};
    struct hp_gguf_str s;
    cr_assert_eq(hp_gguf_get_str(g, "general.architecture", &s, NULL, &err), HP_OK, "%s", err.msg);
    expect_str(s, "llama");
    cr_assert_str_eq(hp_gguf_kv_at(g, 0)->key, "general.architecture"); /* file order */
    cr_assert_null(hp_gguf_kv_at(g, hp_gguf_kv_count(g)));
    cr_assert_eq(hp_gguf_get_str(g, "general.name", &s, NULL, &err), HP_OK);
    expect_str(s, "headprune gguf fixture (Q4_K)");
    cr_assert_eq(hp_gguf_get_str(g, "test.str", &s, NULL, &err), HP_OK);
    expect_str(s, "h\xc3\xa9llo, GGUF");
    uint32_t u32 = 0;
    cr_assert_eq(hp_gguf_get_u32(g, "llama.block_count", &u32, NULL, &err), HP_OK);
    cr_assert_eq(u32, 2);
    cr_assert_eq(hp_gguf_get_u32(g, "general.alignment", &u32, NULL, &err), HP_OK);
    cr_assert_eq(u32, 16);
    cr_assert_eq(hp_gguf_get_u32(g, "test.u32", &u32, NULL, &err), HP_OK);
    cr_assert_eq(u32, 4000000000u);
    cr_assert_eq(hp_gguf_get_u32(g, "test.u16", &u32, NULL, &err), HP_OK);
    cr_assert_eq(u32, 60000);
    int64_t i64 = 0;
    int32_t i32 = 0;
    uint64_t u64 = 0;
    cr_assert_eq(hp_gguf_get_i64(g, "test.u8", &i64, NULL, &err), HP_OK);
    cr_assert_eq(i64, 200);
    cr_assert_eq(hp_gguf_get_i64(g, "test.i8", &i64, NULL, &err), HP_OK);
    cr_assert_eq(i64, -100);
    cr_assert_eq(hp_gguf_get_i32(g, "test.i16", &i32, NULL, &err), HP_OK);
    cr_assert_eq(i32, -30000);
    cr_assert_eq(hp_gguf_get_i32(g, "test.i32", &i32, NULL, &err), HP_OK);
    cr_assert_eq(i32, -2000000000);
    cr_assert_eq(hp_gguf_get_u64(g, "test.u64", &u64, NULL, &err), HP_OK);
    cr_assert_eq(u64, (UINT64_C(1) << 63) + 5);
    cr_assert_eq(hp_gguf_get_i64(g, "test.i64", &i64, NULL, &err), HP_OK);
    cr_assert_eq(i64, -(INT64_C(1) << 62) - 7);
    cr_assert_eq(hp_gguf_get_u64(g, "test.u32", &u64, NULL, &err), HP_OK);
    cr_assert_eq(u64, 4000000000u);
    float f = 0;
    double d = 0;
    cr_assert_eq(hp_gguf_get_f32(g, "test.f32", &f, NULL, &err), HP_OK);
    cr_assert(f == 0.1f);
    cr_assert_eq(hp_gguf_get_f64(g, "test.f32", &d, NULL, &err), HP_OK);
    cr_assert(d == (double)0.1f);
    cr_assert_eq(hp_gguf_get_f64(g, "test.f64", &d, NULL, &err), HP_OK);
    cr_assert(d == 0.1);
    cr_assert_eq(hp_gguf_get_f32(g, "test.f64", &f, NULL, &err), HP_OK);
    cr_assert(f == 0.1f);
    cr_assert_eq(hp_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f, NULL, &err), HP_OK);
    cr_assert(f == 1e-5f);
    bool b = false;
    cr_assert_eq(hp_gguf_get_bool(g, "test.bool", &b, NULL, &err), HP_OK);
    cr_assert(b);

    /* out of range, wrong type, missing */
    EXPECT_GET_FAILS(hp_gguf_get_u32(g, "test.i8", &u32, NULL, &err),
                     "q4_k.gguf: metadata key 'test.i8' is -100, outside the range of a u32");
    EXPECT_GET_FAILS(hp_gguf_get_i64(g, "test.u64", &i64, NULL, &err), "'test.u64' is 9223372036854775813, too "
                                                                       "large for a i64");
    EXPECT_GET_FAILS(hp_gguf_get_i32(g, "test.u32", &i32, NULL, &err), "too large for a i32");
    EXPECT_GET_FAILS(hp_gguf_get_i32(g, "test.i64", &i32, NULL, &err), "outside the range of a i32");
    EXPECT_GET_FAILS(hp_gguf_get_u32(g, "test.u64", &u32, NULL, &err), "too large for a u32");
    EXPECT_GET_FAILS(hp_gguf_get_u32(g, "test.str", &u32, NULL, &err), "'test.str' is a string, not an integer");
    EXPECT_GET_FAILS(hp_gguf_get_u32(g, "test.f32", &u32, NULL, &err), "is a f32, not an integer");
    EXPECT_GET_FAILS(hp_gguf_get_u32(g, "test.bool", &u32, NULL, &err), "is a bool, not an integer");
    EXPECT_GET_FAILS(hp_gguf_get_str(g, "test.u8", &s, NULL, &err), "'test.u8' is a u8, not a string");
    EXPECT_GET_FAILS(hp_gguf_get_f32(g, "test.i32", &f, NULL, &err), "is a i32, not a float");
    EXPECT_GET_FAILS(hp_gguf_get_bool(g, "test.u8", &b, NULL, &err), "is a u8, not a bool");
    EXPECT_GET_FAILS(hp_gguf_get_u32(g, "tokenizer.ggml.tokens", &u32, NULL, &err),
                     "'tokenizer.ggml.tokens' is an array of string, not an integer");
    EXPECT_GET_FAILS(hp_gguf_get_u32(g, "llama.no_such_key", &u32, NULL, &err),
                     "q4_k.gguf: metadata key 'llama.no_such_key' is missing");
    EXPECT_GET_FAILS(hp_gguf_get_f32(g, "test.arr.f64", &f, NULL, &err), "is an array of f64, not a float");

    /* an optional key: absent is fine and leaves the default; present but wrong still fails */
    bool found = true;
    u32 = 77;
    cr_assert_eq(hp_gguf_get_u32(g, "llama.no_such_key", &u32, &found, &err), HP_OK);
    cr_assert(!found);
    cr_assert_eq(u32, 77);
    cr_assert_eq(hp_gguf_get_u32(g, "llama.block_count", &u32, &found, &err), HP_OK);
    cr_assert(found && u32 == 2);
    EXPECT_GET_FAILS(hp_gguf_get_u32(g, "test.str", &u32, &found, &err), "is a string, not an integer");
    cr_assert_null(hp_gguf_find_kv(g, "llama"));
    hp_gguf_close(g);
}

Test(gguf, metadata_arrays)
{
    struct hp_gguf *g = open_fixture("q6_k.gguf");
    struct hp_error err = {{0}};
    const struct hp_gguf_kv *kv = NULL;
    const size_t n_tok = sizeof tokens / sizeof tokens[0];
    cr_assert_eq(hp_gguf_get_strs(g, "tokenizer.ggml.tokens", &kv, NULL, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(kv->n, n_tok);
    for (size_t i = 0; i < n_tok; i++)
        expect_str(kv->str[i], tokens[i]);
    cr_assert_eq(hp_gguf_get_nums(g, "tokenizer.ggml.scores", &kv, NULL, &err), HP_OK);
    cr_assert_eq(kv->elem, HP_GGUF_V_F32);
    cr_assert_eq(kv->n, n_tok);
    double d;
    int64_t v;
    for (size_t i = 0; i < n_tok; i++) {
        cr_assert(hp_gguf_arr_f64(kv, i, &d) && d == -(double)i / 4);
        cr_assert(!hp_gguf_arr_i64(kv, i, &v), "a float read as an integer");
    }
    cr_assert(!hp_gguf_arr_f64(kv, n_tok, &d));
    cr_assert_eq(hp_gguf_get_nums(g, "tokenizer.ggml.token_type", &kv, NULL, &err), HP_OK);
    cr_assert_eq(kv->elem, HP_GGUF_V_I32);
    for (size_t i = 0; i < n_tok; i++)
        cr_assert(hp_gguf_arr_i64(kv, i, &v) && v == (i == 0 ? 2 : i < 3 ? 3 : 1));

    /* one array of each element type, at the edges of their ranges */
    static const struct {
        const char *key;
        enum hp_gguf_vtype elem;
        int n;
        int64_t v[3];
    } ints[] = {
        {"test.arr.u8", HP_GGUF_V_U8, 3, {0, 1, 255}},
        {"test.arr.i8", HP_GGUF_V_I8, 3, {-128, 0, 127}},
        {"test.arr.u16", HP_GGUF_V_U16, 2, {0, 65535}},
        {"test.arr.i16", HP_GGUF_V_I16, 2, {-32768, 32767}},
        {"test.arr.u32", HP_GGUF_V_U32, 2, {7, 4294967295}},
        {"test.arr.i32", HP_GGUF_V_I32, 2, {INT32_MIN, INT32_MAX}},
        {"test.arr.i64", HP_GGUF_V_I64, 2, {INT64_MIN, INT64_MAX}},
        {"test.arr.bool", HP_GGUF_V_BOOL, 3, {1, 0, 1}},
    };
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
        cr_assert_eq(hp_gguf_get_nums(g, ints[k].key, &kv, NULL, &err), HP_OK, "%s", err.msg);
        cr_assert_eq(kv->elem, ints[k].elem, "%s", ints[k].key);
        cr_assert_eq(kv->n, (uint64_t)ints[k].n, "%s", ints[k].key);
        for (int i = 0; i < ints[k].n; i++)
            cr_assert(hp_gguf_arr_i64(kv, (uint64_t)i, &v) && v == ints[k].v[i], "%s[%d]", ints[k].key, i);
    }
    cr_assert_eq(hp_gguf_get_nums(g, "test.arr.u64", &kv, NULL, &err), HP_OK);
    cr_assert(!hp_gguf_arr_i64(kv, 0, &v), "2^64 - 1 read as an i64");
    cr_assert(hp_gguf_arr_f64(kv, 0, &d) && d == 0x1p64);
    cr_assert(hp_gguf_arr_i64(kv, 1, &v) && v == 3);
    cr_assert_eq(hp_gguf_get_nums(g, "test.arr.f32", &kv, NULL, &err), HP_OK);
    cr_assert(hp_gguf_arr_f64(kv, 2, &d) && d == (double)3e38f);
    cr_assert_eq(hp_gguf_get_nums(g, "test.arr.f64", &kv, NULL, &err), HP_OK);
    cr_assert(hp_gguf_arr_f64(kv, 0, &d) && d == 0.1);
    cr_assert(hp_gguf_arr_f64(kv, 1, &d) && d == -2.5e300);
    cr_assert_eq(hp_gguf_get_strs(g, "test.arr.str", &kv, NULL, &err), HP_OK);
    cr_assert_eq(kv->n, 3);
    expect_str(kv->str[0], "one");
    expect_str(kv->str[1], "");
    expect_str(kv->str[2], "three");
    cr_assert(!hp_gguf_arr_f64(kv, 0, &d), "a string read as a number");
    /* scalars read through the element accessors too */
    cr_assert(hp_gguf_arr_i64(hp_gguf_find_kv(g, "test.i8"), 0, &v) && v == -100);

    EXPECT_GET_FAILS(hp_gguf_get_strs(g, "tokenizer.ggml.scores", &kv, NULL, &err),
                     "'tokenizer.ggml.scores' is an array of f32, not an array of strings");
    EXPECT_GET_FAILS(hp_gguf_get_nums(g, "tokenizer.ggml.tokens", &kv, NULL, &err),
                     "is an array of string, not an array of numbers");
    EXPECT_GET_FAILS(hp_gguf_get_nums(g, "test.u8", &kv, NULL, &err), "is a u8, not an array of numbers");
    EXPECT_GET_FAILS(hp_gguf_get_f32(g, "test.arr.f32", &(float){0}, NULL, &err), "not a float");
    cr_assert_eq(hp_gguf_alignment(g), 32); /* no general.alignment: the default */
    cr_assert_null(hp_gguf_find_kv(g, "general.alignment"));
    hp_gguf_close(g);
}

Test(gguf, open_errors)
{
    struct hp_gguf *g = (struct hp_gguf *)&g;
    struct hp_error err = {{0}};
    cr_assert_eq(hp_gguf_open("/nonexistent/model.gguf", &g, &err), HP_ERR_IO);
    cr_assert_null(g);
    cr_assert(strstr(err.msg, "/nonexistent/model.gguf: cannot open"), "%s", err.msg);
    cr_assert_eq(hp_gguf_open(getenv("HP_FIXTURES"), &g, &err), HP_ERR_IO);
    cr_assert(strstr(err.msg, "is a directory"), "%s", err.msg);
    hp_gguf_close(NULL);
}

// --- hostile files, byte by byte --------------------------------------------------------

struct buf {
    uint8_t *p;
    size_t n, cap;
};

static void put(struct buf *b, const void *x, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        cr_assert_not_null(b->p);
    }
    if (n)
        memcpy(b->p + b->n, x, n);
    b->n += n;
}

static void put_u32(struct buf *b, uint32_t v)
{
    uint8_t le[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, le, 4);
}

static void put_u64(struct buf *b, uint64_t v)
{
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}

static void put_str(struct buf *b, const char *s)
{
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}

static void put_header(struct buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    put(b, "GGUF", 4);
    put_u32(b, version);
    put_u64(b, n_tensors);
    put_u64(b, n_kv);
}

static void put_kv_u32(struct buf *b, const char *key, uint32_t v)
{
    put_str(b, key);
    put_u32(b, HP_GGUF_V_U32);
    put_u32(b, v);
}

static void put_tensor(struct buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                       uint64_t offset)
{
    put_str(b, name);
    put_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        put_u64(b, ne[d]);
    put_u32(b, type);
    put_u64(b, offset);
}

static void pad_to(struct buf *b, size_t align)
{
    static const uint8_t zeros[64];
    while (b->n % align)
        put(b, zeros, 1);
    (void)zeros;
}

static void put_zeros(struct buf *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        put(b, "", 1);
}

/* b must fail to open with st and a one-line message holding part (then freed). */
static void expect_bad(struct buf *b, enum hp_status st, const char *part)
{
    struct hp_gguf *g = (struct hp_gguf *)&g;
    struct hp_error err = {{0}};
    enum hp_status got = hp_gguf_open_buffer("bad.gguf", b->p, b->n, &g, &err);
    cr_assert_eq(got, st, "want %s, got %s: %s", hp_status_name(st), hp_status_name(got), err.msg);
    cr_assert_null(g);
    cr_assert(strncmp(err.msg, "bad.gguf: ", 10) == 0 && !strchr(err.msg, '\n'), "'%s'", err.msg);
    cr_assert(strstr(err.msg, part), "'%s' lacks '%s'", err.msg, part);
    free(b->p);
    *b = (struct buf){0};
}

static struct hp_gguf *open_ok(const struct buf *b)
{
    struct hp_gguf *g = NULL;
    struct hp_error err = {{0}};
    enum hp_status st = hp_gguf_open_buffer("ok.gguf", b->p, b->n, &g, &err);
    cr_assert_eq(st, HP_OK, "%s: %s", hp_status_name(st), err.msg);
    return g;
}

static const uint64_t ne8[] = {8};

/*
 * A small valid file: two keys (a 150-byte string and a u32), tensors 'a' and 'b' (F32, 8 elements each,
 * at 0 and 32). Where each part starts is noted, for the truncation test.
 */
struct layout {
    size_t kv0_str, kv1, kv1_type, kv1_value, infos, b_type, b_offset, end_infos, data_start, end;
};

static struct buf valid_file(struct layout *at)
{
    struct layout dummy;
    at = at ? at : &dummy;
    struct buf b = {0};
    char long_str[151];
    memset(long_str, 'd', 150);
    long_str[150] = 0;
    put_header(&b, 3, 2, 2);
    put_str(&b, "general.description");
    put_u32(&b, HP_GGUF_V_STRING);
    at->kv0_str = b.n;
    put_str(&b, long_str);
    at->kv1 = b.n;
    put_str(&b, "llama.block_count");
    at->kv1_type = b.n;
    put_u32(&b, HP_GGUF_V_U32);
    at->kv1_value = b.n;
    put_u32(&b, 1);
    at->infos = b.n;
    put_tensor(&b, "a", 1, ne8, 0, 0);
    put_str(&b, "b");
    put_u32(&b, 1);
    put_u64(&b, 8);
    at->b_type = b.n;
    put_u32(&b, 0);
    at->b_offset = b.n;
    put_u64(&b, 32);
    at->end_infos = b.n;
    pad_to(&b, 32);
    at->data_start = b.n;
    for (int i = 0; i < 16; i++) {
        const float f = (float)i;
        put(&b, &f, 4);
    }
    at->end = b.n;
    return b;
}

Test(gguf, valid_built_file)
{
    struct layout at;
    struct buf b = valid_file(&at);
    struct hp_gguf *g = open_ok(&b);
    cr_assert_eq(hp_gguf_tensor_count(g), 2);
    cr_assert_eq(hp_gguf_kv_count(g), 2);
    struct hp_gguf_str s;
    cr_assert_eq(hp_gguf_get_str(g, "general.description", &s, NULL, NULL), HP_OK);
    cr_assert_eq(s.len, 150);
    cr_assert_eq((const uint8_t *)s.p, b.p + at.kv0_str + 8);
    const struct hp_gguf_tensor *t = hp_gguf_find_tensor(g, "b");
    cr_assert_eq((const uint8_t *)t->data, b.p + at.data_start + 32);
    float y[8];
    cr_assert_eq(hp_gguf_tensor_dequant(g, t, y, NULL), HP_OK);
    cr_assert(y[0] == 8.0f && y[7] == 15.0f);
    size_t n;
    cr_assert_eq(hp_gguf_bytes(g, &n), b.p);
    cr_assert_eq(n, b.n);
    cr_assert_eq(hp_gguf_data(g, &n), b.p + at.data_start);
    cr_assert_eq(n, 64);
    cr_assert_str_eq(hp_gguf_name(g), "ok.gguf");
    hp_gguf_close(g);
    free(b.p);
}

/* No tensors, no keys; a 0-element tensor; n_dims 0 (a scalar). */
Test(gguf, empty_and_scalar)
{
    struct buf b = {0};
    put_header(&b, 3, 0, 0);
    struct hp_gguf *g = open_ok(&b);
    cr_assert_eq(hp_gguf_tensor_count(g), 0);
    cr_assert_null(hp_gguf_find_tensor(g, "a"));
    cr_assert_null(hp_gguf_find_kv(g, "a"));
    hp_gguf_close(g);
    free(b.p);

    b = (struct buf){0};
    put_header(&b, 3, 2, 0);
    const uint64_t ne0[] = {0, 5};
    put_tensor(&b, "empty", 2, ne0, 0, 0);
    put_tensor(&b, "scalar", 0, NULL, 0, 0);
    pad_to(&b, 32);
    put_zeros(&b, 4);
    g = open_ok(&b);
    const struct hp_gguf_tensor *e = hp_gguf_find_tensor(g, "empty"), *s = hp_gguf_find_tensor(g, "scalar");
    cr_assert(e->nel == 0 && e->nbytes == 0 && e->ne[1] == 5);
    cr_assert(s->nel == 1 && s->nbytes == 4 && s->n_dims == 0 && s->ne[0] == 1);
    hp_gguf_close(g);
    free(b.p);
}

/* Cut the file at points in the header, the keys, the tensor infos and the data: each a format error. */
Test(gguf, truncated)
{
    struct layout at;
    struct buf whole = valid_file(&at);
    /* the header's counts ask for 98 bytes at least (2 x 13 for keys, 2 x 24 for tensor infos), and the
     * tensor infos for 48 after the keys: shorter cuts fail on those counts before reading on */
    const struct {
        size_t len;
        const char *part;
    } cuts[] = {
        {0, "truncated in the header: 0 bytes, a GGUF header is 24"},
        {2, "truncated in the header: 2 bytes"},
        {10, "truncated in the header: 10 bytes"},
        {23, "truncated in the header: 23 bytes"},
        {24, "the header claims 2 tensors and 2 metadata keys, more than the 0 bytes after it can hold"},
        {97, "more than the 73 bytes after it can hold"},
        {100, "truncated in metadata key 'general.description': the string value of 150 bytes at byte 63 runs past "
              "the end of the file (100 bytes)"},
        {at.kv1 + 2, "truncated in metadata key 1 of 2: its name needs 8 bytes at byte 213, 2 are left"},
        {at.kv1_type + 3, "truncated in metadata key 'llama.block_count': the value type needs 4 bytes"},
        {at.kv1_value + 1, "truncated in metadata key 'llama.block_count': the value needs 4 bytes"},
        {at.infos + 1, "the header claims 2 tensors, more than the 1 bytes after the metadata can describe"},
        {at.b_type + 2, "truncated in tensor 'b': its type needs 4 bytes at byte 300, 2 are left"},
        {at.b_offset + 7, "truncated in tensor 'b': its offset needs 8 bytes"},
        {at.end_infos + 1, "truncated: the data section would start at byte 320, past the end of the file (313 "
                           "bytes)"},
        {at.data_start, "tensor 'a': offset 0 + 32 bytes runs past the end of the file (the data section is 0 bytes"},
        {at.end - 1, "tensor 'b': offset 32 + 32 bytes runs past the end of the file"},
    };
    cr_assert(at.kv0_str == 55 && at.kv1 == 213 && at.b_type == 300 && at.data_start == 320,
              "the layout moved: %zu %zu %zu %zu", at.kv0_str, at.kv1, at.b_type, at.data_start);
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        struct buf b = {0};
        put(&b, whole.p, cuts[i].len);
        if (!b.p)
            b.p = malloc(1); /* a zero-length buffer still needs an address */
        expect_bad(&b, HP_ERR_FORMAT, cuts[i].part);
    }
    free(whole.p);
}

/* Every prefix of a real fixture that ends before its last tensor's bytes fails cleanly; the rest open. */
Test(gguf, truncated_everywhere)
{
    char *p = fixture_path("q5_k.gguf");
    size_t n;
    char *whole = tu_slurp(p, &n);
    free(p);
    struct hp_gguf *g = NULL;
    cr_assert_eq(hp_gguf_open_buffer("q5_k.gguf", whole, n, &g, NULL), HP_OK);
    size_t need = 0, data_len;
    const uint8_t *data = hp_gguf_data(g, &data_len);
    for (int64_t i = 0; i < hp_gguf_tensor_count(g); i++) {
        const struct hp_gguf_tensor *t = hp_gguf_tensor_at(g, i);
        size_t end = (size_t)((const uint8_t *)t->data - (const uint8_t *)whole) + t->nbytes;
        need = end > need ? end : need;
    }
    cr_assert_leq((size_t)(data - (const uint8_t *)whole) + data_len, n);
    hp_gguf_close(g);
    for (size_t len = 0; len < n; len++) {
        char *cut = malloc(len ? len : 1);
        memcpy(cut, whole, len);
        struct hp_error err = {{0}};
        g = NULL;
        enum hp_status st = hp_gguf_open_buffer("cut.gguf", cut, len, &g, &err);
        if (len < need) {
            cr_assert_eq(st, HP_ERR_FORMAT, "cut at %zu of %zu: %s (%s)", len, n, hp_status_name(st), err.msg);
            cr_assert(strncmp(err.msg, "cut.gguf: ", 10) == 0, "%s", err.msg);
        } else {
            cr_assert_eq(st, HP_OK, "cut at %zu (the data ends at %zu): %s", len, need, err.msg);
        }
        hp_gguf_close(g);
        free(cut);
    }
    free(whole);
}

Test(gguf, bad_magic_and_version)
{
    struct buf b = valid_file(NULL);
    memcpy(b.p, "GGML", 4);
    expect_bad(&b, HP_ERR_FORMAT, "bad.gguf: not a GGUF file (it starts with 'GGML', not 'GGUF')");
    b = valid_file(NULL);
    b.p[0] = 0x89;
    b.p[1] = '\n';
    expect_bad(&b, HP_ERR_FORMAT, "it starts with '\\x89\\x0AUF'");
    put(&b, "{\n", 2); /* shorter than the magic, and not its start either */
    expect_bad(&b, HP_ERR_FORMAT, "bad.gguf: not a GGUF file (it starts with '{\\x0A', not 'GGUF')");
    static const struct {
        uint32_t v;
        const char *part;
    } versions[] = {
        {1, "GGUF version 1 is not supported (versions 2 and 3 are; convert the file with a newer llama.cpp)"},
        {0, "GGUF version 0 is not supported"},
        {4, "GGUF version 4 is not supported (versions 2 and 3 are)"},
        {0x03000000, "a big-endian GGUF file (version 3 read backwards)"},
    };
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        b = valid_file(NULL);
        memcpy(b.p + 4, &versions[i].v, 4); /* this machine is little-endian, as the format */
        expect_bad(&b, HP_ERR_UNSUPPORTED, versions[i].part);
    }
}

/* Counts and lengths no file of this size can hold fail before anything is sized by them. */
Test(gguf, huge_counts_and_lengths)
{
    struct buf b = {0};
    put_header(&b, 3, UINT64_C(1) << 60, 0);
    put_zeros(&b, 100);
    expect_bad(&b, HP_ERR_FORMAT, "the header claims 1152921504606846976 tensors and 0 metadata keys, more than "
                                  "the 100 bytes after it can hold");
    put_header(&b, 3, 0, UINT64_MAX);
    put_zeros(&b, 100);
    expect_bad(&b, HP_ERR_FORMAT, "claims 0 tensors and 18446744073709551615 metadata keys");
    put_header(&b, 3, 4, 4); /* 4 x 13 + 4 x 24 = 148 bytes at least */
    put_zeros(&b, 147);
    expect_bad(&b, HP_ERR_FORMAT, "more than the 147 bytes after it can hold");

    put_header(&b, 3, 0, 1);
    put_u64(&b, UINT64_C(1) << 62);
    put_zeros(&b, 16);
    expect_bad(&b, HP_ERR_FORMAT, "metadata key 0 of 1: its name of 4611686018427387904 bytes at byte 32 runs "
                                  "past the end of the file (48 bytes)");
    put_header(&b, 3, 0, 1);
    put_str(&b, "general.name");
    put_u32(&b, HP_GGUF_V_STRING);
    put_u64(&b, UINT64_MAX);
    put_zeros(&b, 16);
    expect_bad(&b, HP_ERR_FORMAT, "metadata key 'general.name': the string value of 18446744073709551615 bytes");
    put_header(&b, 3, 0, 1);
    put_str(&b, "tokenizer.ggml.tokens");
    put_u32(&b, HP_GGUF_V_ARRAY);
    put_u32(&b, HP_GGUF_V_STRING);
    put_u64(&b, UINT64_C(1) << 61);
    put_zeros(&b, 64);
    expect_bad(&b, HP_ERR_FORMAT, "metadata key 'tokenizer.ggml.tokens': an array of 2305843009213693952 string "
                                  "elements cannot fit in the 64 bytes left");
    put_header(&b, 3, 0, 1);
    put_str(&b, "x");
    put_u32(&b, HP_GGUF_V_ARRAY);
    put_u32(&b, HP_GGUF_V_U64);
    put_u64(&b, UINT64_MAX / 4);
    put_zeros(&b, 64);
    expect_bad(&b, HP_ERR_FORMAT, "an array of 4611686018427387903 u64 elements cannot fit");
    put_header(&b, 3, 0, 1); /* a string of the array too long */
    put_str(&b, "x");
    put_u32(&b, HP_GGUF_V_ARRAY);
    put_u32(&b, HP_GGUF_V_STRING);
    put_u64(&b, 2);
    put_str(&b, "fine");
    put_u64(&b, 1000);
    put_zeros(&b, 8);
    expect_bad(&b, HP_ERR_FORMAT, "metadata key 'x': a string of the array of 1000 bytes");
}

Test(gguf, bad_values)
{
    struct buf b = {0};
    put_header(&b, 3, 0, 1);
    put_str(&b, "x");
    put_u32(&b, 13);
    put_zeros(&b, 8);
    expect_bad(&b, HP_ERR_FORMAT, "metadata key 'x' has unknown value type 13");
    put_header(&b, 3, 0, 1);
    put_str(&b, "nested");
    put_u32(&b, HP_GGUF_V_ARRAY);
    put_u32(&b, HP_GGUF_V_ARRAY);
    put_u64(&b, 1);
    put_zeros(&b, 16);
    expect_bad(&b, HP_ERR_UNSUPPORTED, "metadata key 'nested' is an array of arrays (not supported)");
    put_header(&b, 3, 0, 1);
    put_str(&b, "x");
    put_u32(&b, HP_GGUF_V_ARRAY);
    put_u32(&b, 99);
    put_u64(&b, 1);
    put_zeros(&b, 16);
    expect_bad(&b, HP_ERR_FORMAT, "metadata key 'x' is an array of unknown value type 99");
    put_header(&b, 3, 0, 1);
    put_u64(&b, 5);
    put(&b, "ab\0c\n", 5);
    put_u32(&b, HP_GGUF_V_U8);
    put_zeros(&b, 1);
    expect_bad(&b, HP_ERR_FORMAT, "metadata key 0 of 1: its name 'ab\\x00c\\x0A' holds a NUL byte");
    put_header(&b, 3, 0, 2);
    put_kv_u32(&b, "llama.block_count", 1);
    put_kv_u32(&b, "llama.block_count", 2);
    expect_bad(&b, HP_ERR_FORMAT, "metadata key 'llama.block_count' appears twice");

    /* empty arrays are fine, of numbers and of strings */
    put_header(&b, 3, 0, 2);
    put_str(&b, "e1");
    put_u32(&b, HP_GGUF_V_ARRAY);
    put_u32(&b, HP_GGUF_V_STRING);
    put_u64(&b, 0);
    put_str(&b, "e2");
    put_u32(&b, HP_GGUF_V_ARRAY);
    put_u32(&b, HP_GGUF_V_F64);
    put_u64(&b, 0);
    struct hp_gguf *g = open_ok(&b);
    const struct hp_gguf_kv *kv;
    cr_assert_eq(hp_gguf_get_strs(g, "e1", &kv, NULL, NULL), HP_OK);
    cr_assert_eq(kv->n, 0);
    cr_assert_eq(hp_gguf_get_nums(g, "e2", &kv, NULL, NULL), HP_OK);
    cr_assert_eq(kv->n, 0);
    double d;
    cr_assert(!hp_gguf_arr_f64(kv, 0, &d));
    hp_gguf_close(g);
    free(b.p);
}

Test(gguf, bad_alignment)
{
    static const uint32_t bad[] = {0, 3, 48, 0x80000001u};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct buf b = {0};
        put_header(&b, 3, 0, 1);
        put_kv_u32(&b, "general.alignment", bad[i]);
        char want[96];
        snprintf(want, sizeof want, "bad.gguf: general.alignment is %u, not a power of two", bad[i]);
        expect_bad(&b, HP_ERR_FORMAT, want);
    }
    struct buf b = {0};
    put_header(&b, 3, 0, 1);
    put_str(&b, "general.alignment");
    put_u32(&b, HP_GGUF_V_U64);
    put_u64(&b, 32);
    expect_bad(&b, HP_ERR_FORMAT, "general.alignment is a u64, not a u32");
    /* a huge alignment puts the data section past the end */
    put_header(&b, 3, 1, 1);
    put_kv_u32(&b, "general.alignment", 0x80000000u);
    put_tensor(&b, "a", 1, ne8, 0, 0);
    put_zeros(&b, 32);
    expect_bad(&b, HP_ERR_FORMAT, "the data section would start at byte 2147483648, past the end");
    /* alignment 1: any offset, and data at odd addresses dequantizes all the same */
    put_header(&b, 3, 1, 1);
    put_kv_u32(&b, "general.alignment", 1);
    put_tensor(&b, "a", 1, (const uint64_t[]){32}, 8 /* Q8_0 */, 3);
    put_zeros(&b, 3);
    const uint8_t q80[34] = {0x00, 0x3C /* f16 1.0 */, 1, 2, 0xFF /* -1 */, 127};
    put(&b, q80, sizeof q80);
    struct hp_gguf *g = open_ok(&b);
    const struct hp_gguf_tensor *t = hp_gguf_find_tensor(g, "a");
    float y[32];
    cr_assert_eq(hp_gguf_tensor_dequant(g, t, y, NULL), HP_OK);
    cr_assert(y[0] == 1 && y[1] == 2 && y[2] == -1 && y[3] == 127 && y[4] == 0);
    hp_gguf_close(g);
    free(b.p);
}

/* One tensor at the end of a file that is otherwise valid (F32 unless type says otherwise). */
static void one_tensor(struct buf *b, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset,
                       size_t data_bytes)
{
    put_header(b, 3, 1, 0);
    put_tensor(b, "blk.0.attn_q.weight", n_dims, ne, type, offset);
    pad_to(b, 32);
    put_zeros(b, data_bytes);
}

Test(gguf, bad_tensors)
{
    struct buf b = {0};
    one_tensor(&b, 1, ne8, 0, 64, 64);
    expect_bad(&b, HP_ERR_FORMAT, "bad.gguf: tensor 'blk.0.attn_q.weight': offset 64 + 32 bytes runs past the end "
                                  "of the file (the data section is 64 bytes from byte 96 of 160; truncated or "
                                  "corrupt file)");
    one_tensor(&b, 1, ne8, 0, UINT64_MAX - 31, 64);
    expect_bad(&b, HP_ERR_FORMAT, "offset 18446744073709551584 + 32 bytes runs past the end");
    one_tensor(&b, 1, ne8, 0, 4, 64);
    expect_bad(&b, HP_ERR_FORMAT, "tensor 'blk.0.attn_q.weight': offset 4 is not a multiple of the alignment 32");
    one_tensor(&b, 2, (const uint64_t[]){UINT64_C(1) << 32, UINT64_C(1) << 32}, 0, 0, 64);
    expect_bad(&b, HP_ERR_FORMAT, "shape [4294967296, 4294967296, 1, 1] has more than 2^63 - 1 elements");
    one_tensor(&b, 4, (const uint64_t[]){1 << 16, 1 << 16, 1 << 16, 1 << 16}, 0, 0, 64);
    expect_bad(&b, HP_ERR_FORMAT, "has more than 2^63 - 1 elements");
    one_tensor(&b, 1, (const uint64_t[]){UINT64_C(1) << 62}, 0, 0, 64);
    expect_bad(&b, HP_ERR_FORMAT, "4611686018427387904 elements of F32 are more bytes than 2^64");
    one_tensor(&b, 1, (const uint64_t[]){UINT64_MAX}, 0, 0, 64);
    expect_bad(&b, HP_ERR_FORMAT, "has ne[0] = 18446744073709551615, over 2^63 - 1");
    one_tensor(&b, 1, (const uint64_t[]){33}, 8, 0, 64);
    expect_bad(&b, HP_ERR_FORMAT, "tensor 'blk.0.attn_q.weight': ne[0] = 33 is not a multiple of Q8_0's block size 32");
    one_tensor(&b, 2, (const uint64_t[]){128, 2}, 12, 0, 256);
    expect_bad(&b, HP_ERR_FORMAT, "ne[0] = 128 is not a multiple of Q4_K's block size 256");
    one_tensor(&b, 1, ne8, 4, 0, 64);
    expect_bad(&b, HP_ERR_FORMAT, "tensor 'blk.0.attn_q.weight' has unknown ggml type 4 (corrupt file, or a type "
                                  "newer than headprune knows)");
    one_tensor(&b, 1, ne8, 4096, 0, 64);
    expect_bad(&b, HP_ERR_FORMAT, "has unknown ggml type 4096");
    one_tensor(&b, 5, (const uint64_t[]){1, 1, 1, 1, 8}, 0, 0, 64);
    expect_bad(&b, HP_ERR_FORMAT, "tensor 'blk.0.attn_q.weight' has 5 dimensions (at most 4)");
    put_header(&b, 3, 1, 0);
    put_str(&b, "x");
    put_u32(&b, UINT32_MAX);
    put_zeros(&b, 64);
    expect_bad(&b, HP_ERR_FORMAT, "tensor 'x' has 4294967295 dimensions");

    put_header(&b, 3, 2, 0);
    put_tensor(&b, "a", 1, ne8, 0, 0);
    put_tensor(&b, "a", 1, ne8, 0, 32);
    pad_to(&b, 32);
    put_zeros(&b, 64);
    expect_bad(&b, HP_ERR_FORMAT, "tensor 'a' appears twice");
    put_header(&b, 3, 1, 0);
    put_u64(&b, 3);
    put(&b, "a\0b", 3);
    put_zeros(&b, 24);
    expect_bad(&b, HP_ERR_FORMAT, "tensor info 0 of 1: its name 'a\\x00b' holds a NUL byte");
}

Test(gguf, overlapping_tensors)
{
    struct buf b = {0};
    put_header(&b, 3, 2, 0);
    put_tensor(&b, "a", 1, (const uint64_t[]){16}, 0, 0);
    put_tensor(&b, "b", 1, ne8, 0, 32);
    pad_to(&b, 32);
    put_zeros(&b, 128);
    expect_bad(&b, HP_ERR_FORMAT, "tensors 'a' (bytes 0 to 64) and 'b' (from byte 32) overlap in the data section");
    /* the same offset twice */
    put_header(&b, 3, 2, 0);
    put_tensor(&b, "b", 1, ne8, 0, 32);
    put_tensor(&b, "a", 1, ne8, 0, 32);
    pad_to(&b, 32);
    put_zeros(&b, 128);
    expect_bad(&b, HP_ERR_FORMAT, "overlap in the data section");
    /* a long tensor, an empty one inside it, then one the long tensor still covers */
    put_header(&b, 3, 3, 0);
    put_tensor(&b, "long", 1, (const uint64_t[]){24}, 0, 0);
    put_tensor(&b, "empty", 1, (const uint64_t[]){0}, 0, 32);
    put_tensor(&b, "late", 1, ne8, 0, 64);
    pad_to(&b, 32);
    put_zeros(&b, 128);
    expect_bad(&b, HP_ERR_FORMAT, "tensors 'long' (bytes 0 to 96) and 'late' (from byte 64) overlap");
    /* touching is not overlapping; empty tensors share offsets freely */
    put_header(&b, 3, 4, 0);
    put_tensor(&b, "a", 1, ne8, 0, 0);
    put_tensor(&b, "b", 1, ne8, 0, 32);
    put_tensor(&b, "e1", 1, (const uint64_t[]){0}, 0, 32);
    put_tensor(&b, "e2", 1, (const uint64_t[]){0}, 0, 32);
    pad_to(&b, 32);
    put_zeros(&b, 64);
    hp_gguf_close(open_ok(&b));
    free(b.p);
}

/* A bad file opened by path names the path. */
Test(gguf, bad_file_by_path)
{
    char dir[] = "/tmp/hp-gguf-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    struct buf b = {0};
    one_tensor(&b, 1, ne8, 0, 64, 64);
    tu_spit(path, b.p, b.n);
    free(b.p);
    struct hp_gguf *g = NULL;
    struct hp_error err = {{0}};
    cr_assert_eq(hp_gguf_open(path, &g, &err), HP_ERR_FORMAT);
    char want[160];
    snprintf(want, sizeof want, "%s: tensor 'blk.0.attn_q.weight': offset 64 + 32 bytes runs past the end", path);
    cr_assert(strncmp(err.msg, want, strlen(want)) == 0, "'%s'", err.msg);
    tu_spit(path, "", 0);
    cr_assert_eq(hp_gguf_open(path, &g, &err), HP_ERR_FORMAT);
    cr_assert(strstr(err.msg, "empty file"), "%s", err.msg);
    remove(path);
    rmdir(dir);
}

// --- a llama model whose metadata disagrees with its tensors (gguf_model.c, model.c) ------------------------

/* The sizes of llama_gguf's file (ne in ggml order, F32 zeros): 2 blocks, embedding 32, 4 heads of 8 in 2 KV
 * groups, feed-forward 48, 20 tokens. */
static const struct {
    const char *key;
    uint32_t value;
} llama_meta[] = {
    {"llama.context_length", 64},        {"llama.block_count", 2},          {"llama.embedding_length", 32},
    {"llama.feed_forward_length", 48},   {"llama.attention.head_count", 4}, {"llama.attention.head_count_kv", 2},
    {"llama.rope.dimension_count", 8},   {"llama.vocab_size", 20},
};

/* A metadata key of llama_gguf's file and the value it says instead (UINT32_MAX: the key left out). */
struct meta_edit {
    const char *key;
    uint32_t value;
};

/* A llama GGUF of llama_meta's sizes whose metadata says what edits say instead (n of them), with an
 * output.weight of out_rows rows when out_rows > 0 (else tied). */
static struct buf llama_gguf(const struct meta_edit *edits, int n_edits, uint64_t out_rows)
{
    struct {
        char name[40];
        uint32_t n_dims;
        uint64_t ne[2];
    } t[32];
    int nt = 0;
#define T(nm, a, b) (snprintf(t[nt].name, sizeof t[nt].name, "%s", nm), t[nt].n_dims = (b) ? 2 : 1, \
                     t[nt].ne[0] = (a), t[nt++].ne[1] = (b))
    T("token_embd.weight", 32, 20);
    T("output_norm.weight", 32, 0);
    if (out_rows)
        T("output.weight", 32, out_rows);
    for (int l = 0; l < 2; l++) {
        static const struct {
            const char *part;
            uint64_t a, b;
        } blk[] = {{"attn_norm", 32, 0}, {"attn_q", 32, 32}, {"attn_k", 32, 16}, {"attn_v", 32, 16},
                   {"attn_output", 32, 32}, {"ffn_norm", 32, 0}, {"ffn_gate", 32, 48}, {"ffn_up", 32, 48},
                   {"ffn_down", 48, 32}};
        for (size_t i = 0; i < sizeof blk / sizeof blk[0]; i++) {
            char nm[40];
            snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, blk[i].part);
            T(nm, blk[i].a, blk[i].b);
        }
    }
#undef T
    uint32_t value[sizeof llama_meta / sizeof llama_meta[0]];
    int n_kv = 1;
    for (size_t i = 0; i < sizeof llama_meta / sizeof llama_meta[0]; i++) {
        value[i] = llama_meta[i].value;
        for (int e = 0; e < n_edits; e++)
            if (strcmp(edits[e].key, llama_meta[i].key) == 0)
                value[i] = edits[e].value;
        n_kv += value[i] != UINT32_MAX;
    }
    struct buf b = {0};
    put_header(&b, 3, (uint64_t)nt, (uint64_t)n_kv);
    put_str(&b, "general.architecture");
    put_u32(&b, HP_GGUF_V_STRING);
    put_str(&b, "llama");
    for (size_t i = 0; i < sizeof llama_meta / sizeof llama_meta[0]; i++)
        if (value[i] != UINT32_MAX)
            put_kv_u32(&b, llama_meta[i].key, value[i]);
    uint64_t off = 0;
    for (int i = 0; i < nt; i++) {
        put_tensor(&b, t[i].name, t[i].n_dims, t[i].ne, 0, off);
        off += (t[i].ne[0] * (t[i].n_dims == 2 ? t[i].ne[1] : 1) * 4 + 31) / 32 * 32;
    }
    pad_to(&b, 32);
    put_zeros(&b, off);
    return b;
}

/* llama_gguf(edits, out_rows) opened as a model from its path: HP_OK, or a one-line message naming the path and
 * saying each of words (NULL-terminated), and nothing of config.json or transformers' tensor names. */
static void expect_llama(const struct meta_edit *edits, int n_edits, uint64_t out_rows, enum hp_status want,
                         const char *const *words)
{
    char dir[64], path[96];
    tu_mkdtemp(dir, sizeof dir, "gguf_meta");
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    struct buf b = llama_gguf(edits, n_edits, out_rows);
    tu_spit(path, b.p, b.n);
    free(b.p);
    struct hp_model *m = NULL;
    struct hp_error err = {{0}};
    enum hp_status st = hp_model_open(path, &m, &err);
    hp_model_close(m);
    tu_rmrf(dir);
    const char *what = n_edits ? edits[0].key : "as made";
    cr_assert_eq(st, want, "%s: status %s, expected %s: %s", what, hp_status_name(st), hp_status_name(want), err.msg);
    if (want == HP_OK)
        return;
    cr_assert(strncmp(err.msg, path, strlen(path)) == 0 && !strchr(err.msg, '\n'), "%s: '%s'", what, err.msg);
    for (const char *const *w = words; *w; w++)
        cr_assert(strstr(err.msg, *w), "%s: '%s' lacks '%s'", what, err.msg, *w);
    cr_assert(!strstr(err.msg, "config.json") && !strstr(err.msg, "model.layers.") && !strstr(err.msg, "_proj") &&
                  !strstr(err.msg, "embed_tokens") && !strstr(err.msg, "lm_head"),
              "%s: '%s' names what the file does not hold", what, err.msg);
}

#define EDITS(...) (const struct meta_edit[]){__VA_ARGS__}, \
                   (int)(sizeof (const struct meta_edit[]){__VA_ARGS__} / sizeof(struct meta_edit))
#define NO_EDITS NULL, 0
#define WORDS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* The file agreeing with itself opens; each size key that disagrees with the tensors is refused naming the
 * file's own tensor and the keys that size it (the binder's checks, said in the file's terms). */
Test(gguf, model_metadata_disagrees)
{
    expect_llama(NO_EDITS, 0, HP_OK, NULL);
    expect_llama(NO_EDITS, 20, HP_OK, NULL);
    /* without rope.dimension_count the head size is the embedding over the heads: the same 8 */
    expect_llama(EDITS({"llama.rope.dimension_count", UINT32_MAX}), 0, HP_OK, NULL);
    expect_llama(EDITS({"llama.rope.dimension_count", 4}), 0, HP_ERR_SHAPE,
                 WORDS("tensor 'blk.0.attn_q.weight' has shape [32, 32] but the metadata implies [32, 16] "
                       "(llama.embedding_length 32; llama.attention.head_count 4 x llama.rope.dimension_count 4)"));
    expect_llama(EDITS({"llama.feed_forward_length", 40}), 0, HP_ERR_SHAPE,
                 WORDS("tensor 'blk.0.ffn_gate.weight' has shape [32, 48] but the metadata implies [32, 40]",
                       "llama.feed_forward_length 40"));
    expect_llama(EDITS({"llama.embedding_length", 24}), 0, HP_ERR_SHAPE,
                 WORDS("tensor 'token_embd.weight' has shape [32, 20] but the metadata implies [24, 20]",
                       "(llama.embedding_length 24; llama.vocab_size 20)"));
    expect_llama(EDITS({"llama.attention.head_count", 8}), 0, HP_ERR_SHAPE,
                 WORDS("tensor 'blk.0.attn_q.weight' has shape [32, 32] but the metadata implies [32, 64]",
                       "llama.attention.head_count 8 x llama.rope.dimension_count 8"));
    /* a head count the q rows do not split into (two half rows a head, as llama.cpp stores them) */
    expect_llama(EDITS({"llama.attention.head_count", 3}), 0, HP_ERR_SHAPE,
                 WORDS("tensor 'blk.0.attn_q.weight' has 32 rows, not two per head of 3 (llama.attention.head_count "
                       "3)"));
    expect_llama(EDITS({"llama.attention.head_count_kv", 1}), 0, HP_ERR_SHAPE,
                 WORDS("tensor 'blk.0.attn_k.weight' has shape [32, 16] but the metadata implies [32, 8]",
                       "llama.attention.head_count_kv 1 x llama.rope.dimension_count 8"));
    /* without head_count_kv the KV heads are the query heads */
    expect_llama(EDITS({"llama.attention.head_count_kv", UINT32_MAX}), 0, HP_ERR_SHAPE,
                 WORDS("tensor 'blk.0.attn_k.weight' has shape [32, 16] but the metadata implies [32, 32]",
                       "(no llama.attention.head_count_kv: llama.attention.head_count 4) x "
                       "llama.rope.dimension_count 8"));
    /* 2 heads of 32 / 2 = 16 (no rope.dimension_count): q's rows agree, k's do not */
    expect_llama(EDITS({"llama.rope.dimension_count", UINT32_MAX}, {"llama.attention.head_count", 2}), 0,
                 HP_ERR_SHAPE,
                 WORDS("tensor 'blk.0.attn_k.weight' has shape [32, 16] but the metadata implies [32, 32]",
                       "llama.attention.head_count_kv 2 x (no llama.rope.dimension_count: llama.embedding_length 32 / "
                       "llama.attention.head_count 2)"));
    expect_llama(EDITS({"llama.vocab_size", 21}), 0, HP_ERR_SHAPE,
                 WORDS("\"llama.vocab_size\" 21 differs from the 20 rows of tensor 'token_embd.weight'"));
    /* an output head of another vocabulary than the embedding's */
    expect_llama(NO_EDITS, 19, HP_ERR_SHAPE,
                 WORDS("tensor 'output.weight' has shape [32, 19] but the metadata implies [32, 20]",
                       "(llama.embedding_length 32; llama.vocab_size 20)"));
    expect_llama(EDITS({"llama.vocab_size", UINT32_MAX}), 19, HP_ERR_SHAPE,
                 WORDS("tensor 'output.weight' has shape [32, 19] but the metadata implies [32, 20]",
                       "(no llama.vocab_size: the 20 rows of token_embd.weight)"));
    /* more blocks than the file holds, and fewer */
    expect_llama(EDITS({"llama.block_count", 3}), 0, HP_ERR_SHAPE,
                 WORDS("tensor 'blk.2.attn_norm.weight' is missing (llama.block_count 3: blocks 0-2)"));
    expect_llama(EDITS({"llama.block_count", 1}), 0, HP_ERR_UNSUPPORTED,
                 WORDS("tensor 'blk.1.attn_norm.weight' is not read (llama.block_count 1: only block 0)"));
}
