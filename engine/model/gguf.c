/*
 * gguf.c -- map GGUF files, index their metadata and tensors, dequantize.
 *
 * Format (little-endian): "GGUF", u32 version, u64 tensor count, u64 key
 * count; each key: string name, u32 value type, value; each tensor info:
 * string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset; then
 * padding to general.alignment and the data section, where the offsets
 * point. A string is a u64 length and that many bytes; an array a u32
 * element type, a u64 count and the elements.
 * Everything read from the file is checked before it is trusted, and no
 * allocation is sized by a count that the bytes left could not hold, so a
 * hostile header costs at most a few times the file's size.
 * Must not: know about models, configs or tokenizers; print.
 */
#define _POSIX_C_SOURCE 200809L
#include "gguf.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mat.h"
#include "util.h"

/* The products and sums below must round as numpy's separate array operations do (the reference): no
 * fused multiply-add. GCC contracts nothing in ISO C mode (meson's -std=c11); clang needs telling. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define QK_K 256
#define HEADER_BYTES 24 /* magic, version, tensor count, key count */
#define MIN_KV_BYTES 13 /* a key: name length, value type, a one-byte value */
#define MIN_TI_BYTES 24 /* a tensor info: name length, n_dims, type, offset */
#define DEFAULT_ALIGNMENT 32

// --- little-endian loads ----------------------------------------------------

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

/* An f16 scale (exact: every f16 is an f32); mat.c holds the one conversion rule. */
static float f16_at(const uint8_t *p)
{
    float f;
    hp_mat_cvt(&f, p, HP_DT_F16, 1);
    return f;
}

// --- dequantization -----------------------------------------------------------
// Block layouts as ggml's ggml-common.h declares them; each loop computes what ggml's dequantize_row_*
// and gguf-py's dequantize_blocks compute, in their order: scale products first, then the element.

static void deq_f32(const uint8_t *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof *dst); }

static void deq_f16(const uint8_t *src, float *dst, int64_t n) { hp_mat_cvt(dst, src, HP_DT_F16, (size_t)n); }

static void deq_bf16(const uint8_t *src, float *dst, int64_t n) { hp_mat_cvt(dst, src, HP_DT_BF16, (size_t)n); }

/* Q8_0, 34 bytes: f16 d, int8 q[32]; x = q d. */
static void deq_q8_0(const uint8_t *src, float *dst, int64_t n_blocks)
{
    for (int64_t b = 0; b < n_blocks; b++, src += 34, dst += 32) {
        const float d = f16_at(src);
        for (int j = 0; j < 32; j++)
            dst[j] = (float)(int8_t)src[2 + j] * d;
    }
}

/* Q4_0, 18 bytes: f16 d, 16 bytes of nibbles; low nibbles are elements 0-15, high 16-31; x = (q - 8) d. */
static void deq_q4_0(const uint8_t *src, float *dst, int64_t n_blocks)
{
    for (int64_t b = 0; b < n_blocks; b++, src += 18, dst += 32) {
        const float d = f16_at(src);
        const uint8_t *qs = src + 2;
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)((qs[j] & 0x0F) - 8) * d;
            dst[j + 16] = (float)((qs[j] >> 4) - 8) * d;
        }
    }
}

/* Q4_1, 20 bytes: f16 d, f16 m, 16 bytes of nibbles (as Q4_0); x = q d + m. */
static void deq_q4_1(const uint8_t *src, float *dst, int64_t n_blocks)
{
    for (int64_t b = 0; b < n_blocks; b++, src += 20, dst += 32) {
        const float d = f16_at(src), m = f16_at(src + 2);
        const uint8_t *qs = src + 4;
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)(qs[j] & 0x0F) * d + m;
            dst[j + 16] = (float)(qs[j] >> 4) * d + m;
        }
    }
}

/* The 6-bit scale and min of sub-block j (0-7) of a Q4_K / Q5_K block's 12 scale bytes: j < 4 in the low
 * six bits of bytes j and j + 4; j >= 4 in byte j + 4's nibbles, topped by bits 6-7 of bytes j - 4 and j. */
static void k_scale_min(const uint8_t *q, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Q4_K, 144 bytes: f16 d, f16 dmin, 12 scale bytes, 128 bytes of nibbles. Eight sub-blocks of 32; the
 * 64 elements of pair p are bytes 32p .. 32p + 31, low nibbles then high; x = (d sc) q - (dmin m). */
static void deq_q4_k(const uint8_t *src, float *dst, int64_t n_blocks)
{
    for (int64_t b = 0; b < n_blocks; b++, src += 144, dst += QK_K) {
        const float d = f16_at(src), dmin = f16_at(src + 2);
        const uint8_t *scales = src + 4, *qs = src + 16;
        for (int p = 0; p < 4; p++) {
            int sc0, m0, sc1, m1;
            k_scale_min(scales, 2 * p, &sc0, &m0);
            k_scale_min(scales, 2 * p + 1, &sc1, &m1);
            const float d0 = d * (float)sc0, min0 = dmin * (float)m0;
            const float d1 = d * (float)sc1, min1 = dmin * (float)m1;
            const uint8_t *q = qs + 32 * p;
            float *y = dst + 64 * p;
            for (int l = 0; l < 32; l++) {
                y[l] = d0 * (float)(q[l] & 0x0F) - min0;
                y[l + 32] = d1 * (float)(q[l] >> 4) - min1;
            }
        }
    }
}

/* Q5_K, 176 bytes: f16 d, f16 dmin, 12 scale bytes, 32 bytes of high bits, 128 bytes of nibbles (as
 * Q4_K); element l of sub-block s takes its fifth bit from bit s of high byte l. */
static void deq_q5_k(const uint8_t *src, float *dst, int64_t n_blocks)
{
    for (int64_t b = 0; b < n_blocks; b++, src += 176, dst += QK_K) {
        const float d = f16_at(src), dmin = f16_at(src + 2);
        const uint8_t *scales = src + 4, *qh = src + 16, *qs = src + 48;
        for (int p = 0; p < 4; p++) {
            int sc0, m0, sc1, m1;
            k_scale_min(scales, 2 * p, &sc0, &m0);
            k_scale_min(scales, 2 * p + 1, &sc1, &m1);
            const float d0 = d * (float)sc0, min0 = dmin * (float)m0;
            const float d1 = d * (float)sc1, min1 = dmin * (float)m1;
            const uint8_t *q = qs + 32 * p;
            float *y = dst + 64 * p;
            for (int l = 0; l < 32; l++) {
                const int h0 = (qh[l] >> (2 * p)) & 1, h1 = (qh[l] >> (2 * p + 1)) & 1;
                y[l] = d0 * (float)((q[l] & 0x0F) | h0 << 4) - min0;
                y[l + 32] = d1 * (float)((q[l] >> 4) | h1 << 4) - min1;
            }
        }
    }
}

/* Q6_K, 210 bytes: 128 bytes of low nibbles, 64 of 2-bit highs, 16 int8 scales, f16 d. Two halves of 128;
 * in half h, element l + 32k (l < 32) takes low byte 64h + l + 32(k & 1), nibble k >> 1, its high bits
 * from bits 2k of byte 32h + l, scale 8h + 2k + l / 16; x = (d sc) (q - 32). */
static void deq_q6_k(const uint8_t *src, float *dst, int64_t n_blocks)
{
    for (int64_t b = 0; b < n_blocks; b++, src += 210, dst += QK_K) {
        const float d = f16_at(src + 208);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = src + 64 * h, *qh = src + 128 + 32 * h;
            const int8_t *sc = (const int8_t *)(src + 192 + 8 * h);
            float *y = dst + 128 * h;
            for (int k = 0; k < 4; k++)
                for (int l = 0; l < 32; l++) {
                    const uint8_t lo = ql[l + 32 * (k & 1)];
                    const int q = ((k >> 1 ? lo >> 4 : lo & 0x0F) | ((qh[l] >> (2 * k)) & 3) << 4) - 32;
                    const float ds = d * (float)sc[2 * k + l / 16];
                    y[32 * k + l] = ds * (float)q;
                }
        }
    }
}

// --- the tables -----------------------------------------------------------------

/* One row per ggml type: its name, number in files, block size, bytes per block, dequantizer. Sizes as
 * ggml's type_traits (gguf-py's GGML_QUANT_SIZES agrees but for Q8_1, which it gives 40 bytes where
 * ggml's block_q8_1, two f16 and 32 int8, has 36). */
static const struct hp_gguf_type_info types[] = {
    [HP_GGUF_F32] = {"F32", 0, 1, 4, deq_f32},
    [HP_GGUF_F16] = {"F16", 1, 1, 2, deq_f16},
    [HP_GGUF_Q4_0] = {"Q4_0", 2, 32, 18, deq_q4_0},
    [HP_GGUF_Q4_1] = {"Q4_1", 3, 32, 20, deq_q4_1},
    [HP_GGUF_Q5_0] = {"Q5_0", 6, 32, 22, NULL},
    [HP_GGUF_Q5_1] = {"Q5_1", 7, 32, 24, NULL},
    [HP_GGUF_Q8_0] = {"Q8_0", 8, 32, 34, deq_q8_0},
    [HP_GGUF_Q8_1] = {"Q8_1", 9, 32, 36, NULL},
    [HP_GGUF_Q2_K] = {"Q2_K", 10, QK_K, 84, NULL},
    [HP_GGUF_Q3_K] = {"Q3_K", 11, QK_K, 110, NULL},
    [HP_GGUF_Q4_K] = {"Q4_K", 12, QK_K, 144, deq_q4_k},
    [HP_GGUF_Q5_K] = {"Q5_K", 13, QK_K, 176, deq_q5_k},
    [HP_GGUF_Q6_K] = {"Q6_K", 14, QK_K, 210, deq_q6_k},
    [HP_GGUF_Q8_K] = {"Q8_K", 15, QK_K, 292, NULL},
    [HP_GGUF_IQ2_XXS] = {"IQ2_XXS", 16, QK_K, 66, NULL},
    [HP_GGUF_IQ2_XS] = {"IQ2_XS", 17, QK_K, 74, NULL},
    [HP_GGUF_IQ3_XXS] = {"IQ3_XXS", 18, QK_K, 98, NULL},
    [HP_GGUF_IQ1_S] = {"IQ1_S", 19, QK_K, 50, NULL},
    [HP_GGUF_IQ4_NL] = {"IQ4_NL", 20, 32, 18, NULL},
    [HP_GGUF_IQ3_S] = {"IQ3_S", 21, QK_K, 110, NULL},
    [HP_GGUF_IQ2_S] = {"IQ2_S", 22, QK_K, 82, NULL},
    [HP_GGUF_IQ4_XS] = {"IQ4_XS", 23, QK_K, 136, NULL},
    [HP_GGUF_I8] = {"I8", 24, 1, 1, NULL},
    [HP_GGUF_I16] = {"I16", 25, 1, 2, NULL},
    [HP_GGUF_I32] = {"I32", 26, 1, 4, NULL},
    [HP_GGUF_I64] = {"I64", 27, 1, 8, NULL},
    [HP_GGUF_F64] = {"F64", 28, 1, 8, NULL},
    [HP_GGUF_IQ1_M] = {"IQ1_M", 29, QK_K, 56, NULL},
    [HP_GGUF_BF16] = {"BF16", 30, 1, 2, deq_bf16},
    [HP_GGUF_TQ1_0] = {"TQ1_0", 34, QK_K, 54, NULL},
    [HP_GGUF_TQ2_0] = {"TQ2_0", 35, QK_K, 66, NULL},
    [HP_GGUF_MXFP4] = {"MXFP4", 39, 32, 17, NULL},
    [HP_GGUF_NVFP4] = {"NVFP4", 40, 64, 36, NULL},
    [HP_GGUF_Q1_0] = {"Q1_0", 41, 128, 18, NULL},
};
static_assert(sizeof types / sizeof types[0] == HP_GGUF_TYPE_COUNT, "a row per enum hp_gguf_type");

/* One row per metadata value type: its name and its size in bytes (0: strings and arrays, sized by
 * their contents). */
static const struct {
    const char *name;
    int size;
} vtypes[] = {
    [HP_GGUF_V_U8] = {"u8", 1},       [HP_GGUF_V_I8] = {"i8", 1},         [HP_GGUF_V_U16] = {"u16", 2},
    [HP_GGUF_V_I16] = {"i16", 2},     [HP_GGUF_V_U32] = {"u32", 4},       [HP_GGUF_V_I32] = {"i32", 4},
    [HP_GGUF_V_F32] = {"f32", 4},     [HP_GGUF_V_BOOL] = {"bool", 1},     [HP_GGUF_V_STRING] = {"string", 0},
    [HP_GGUF_V_ARRAY] = {"array", 0}, [HP_GGUF_V_U64] = {"u64", 8},       [HP_GGUF_V_I64] = {"i64", 8},
    [HP_GGUF_V_F64] = {"f64", 8},
};
static_assert(sizeof vtypes / sizeof vtypes[0] == HP_GGUF_V_COUNT, "a row per enum hp_gguf_vtype");

const struct hp_gguf_type_info *hp_gguf_type_info(enum hp_gguf_type type)
{
    return (unsigned)type < HP_GGUF_TYPE_COUNT ? &types[type] : NULL;
}

bool hp_gguf_type_from_ggml(uint32_t ggml_id, enum hp_gguf_type *out)
{
    for (int i = 0; i < HP_GGUF_TYPE_COUNT; i++)
        if (types[i].ggml_id == ggml_id) {
            *out = (enum hp_gguf_type)i;
            return true;
        }
    return false;
}

const char *hp_gguf_vtype_name(enum hp_gguf_vtype t)
{
    return (unsigned)t < HP_GGUF_V_COUNT ? vtypes[t].name : "?";
}

// --- the index --------------------------------------------------------------------

/* A key and, for a string scalar, its one view (kv.str points at it). */
struct kv_slot {
    struct hp_gguf_kv kv;
    struct hp_gguf_str one;
};

struct hp_gguf {
    char *name;
    const uint8_t *map;
    size_t len;
    bool borrowed; /* map is the caller's buffer (hp_gguf_open_buffer), not ours to unmap */
    uint32_t version, alignment;
    size_t data_off; /* where the data section starts: the aligned end of the tensor infos */
    struct kv_slot *kv;
    int64_t n_kv;
    struct hp_gguf_tensor *t;
    int64_t n_t;
    /* sorted by key / name: duplicates sit side by side and lookups are a binary search */
    const struct hp_gguf_kv **kv_by_key;
    const struct hp_gguf_tensor **t_by_name;
};

/* A reader over the file's bytes; errors name the file and what was being read. */
struct cur {
    const uint8_t *p;
    size_t len, pos;
    const char *name;
    char what[160]; /* "metadata key 'general.name'", "tensor info 3" ... */
    struct hp_error *err;
};

/* s (len bytes) for a message: control and non-ASCII bytes as \xNN, cut at about 100 bytes. */
static const char *shown(const char *s, size_t len, char *buf, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 8 < cap; i++) {
        const unsigned char ch = (unsigned char)s[i];
        if (o > 100) {
            o += (size_t)snprintf(buf + o, cap - o, "...");
            break;
        }
        if (ch >= 0x20 && ch < 0x7F && ch != '\\')
            buf[o++] = (char)ch;
        else
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02X", ch);
    }
    buf[o < cap ? o : cap - 1] = 0;
    return buf;
}

#define SHOWN_CAP 128
#define SHOW(s, buf) shown((s), strlen(s), (buf), sizeof(buf))

static enum hp_status need(struct cur *c, uint64_t n, const char *part)
{
    if (n <= c->len - c->pos)
        return HP_OK;
    return hp_fail(c->err, HP_ERR_FORMAT,
                   "%s: truncated in %s: %s needs %llu bytes at byte %zu, %zu are left (file of %zu bytes)",
                   c->name, c->what, part, (unsigned long long)n, c->pos, c->len - c->pos, c->len);
}

static enum hp_status rd_u32(struct cur *c, uint32_t *v, const char *part)
{
    enum hp_status st = need(c, 4, part);
    if (st == HP_OK) {
        *v = le32(c->p + c->pos);
        c->pos += 4;
    }
    return st;
}

static enum hp_status rd_u64(struct cur *c, uint64_t *v, const char *part)
{
    enum hp_status st = need(c, 8, part);
    if (st == HP_OK) {
        *v = le64(c->p + c->pos);
        c->pos += 8;
    }
    return st;
}

static enum hp_status rd_str(struct cur *c, struct hp_gguf_str *s, const char *part)
{
    uint64_t n;
    enum hp_status st = rd_u64(c, &n, part);
    if (st == HP_OK && n > c->len - c->pos)
        return hp_fail(c->err, HP_ERR_FORMAT,
                       "%s: truncated in %s: %s of %llu bytes at byte %zu runs past the end of the file (%zu bytes)",
                       c->name, c->what, part, (unsigned long long)n, c->pos, c->len);
    if (st == HP_OK) {
        s->p = (const char *)c->p + c->pos;
        s->len = (size_t)n;
        c->pos += (size_t)n;
    }
    return st;
}

/* A key or tensor name: NUL-terminated copy into *out (the caller frees it); a NUL byte inside is refused,
 * for lookups by C string would never find it. */
static enum hp_status rd_name(struct cur *c, char **out, const char *part)
{
    struct hp_gguf_str s = {0};
    enum hp_status st = rd_str(c, &s, part);
    if (st != HP_OK)
        return st;
    if (memchr(s.p, 0, s.len)) {
        char b[SHOWN_CAP];
        return hp_fail(c->err, HP_ERR_FORMAT, "%s: %s: %s '%s' holds a NUL byte (corrupt file)", c->name, c->what,
                       part, shown(s.p, s.len, b, sizeof b));
    }
    *out = malloc(s.len + 1);
    if (!*out)
        return hp_fail(c->err, HP_ERR_NOMEM, "%s: out of memory", c->name);
    memcpy(*out, s.p, s.len);
    (*out)[s.len] = 0;
    return HP_OK;
}

// --- metadata -----------------------------------------------------------------------

/* An array's elements: fixed-size ones stay in the file, strings get a view each (n <= bytes left / 8,
 * so the views cost at most twice the bytes they describe). */
static enum hp_status rd_array(struct cur *c, struct hp_gguf_kv *kv)
{
    uint32_t et;
    uint64_t n;
    enum hp_status st = rd_u32(c, &et, "the array's element type");
    if (st == HP_OK)
        st = rd_u64(c, &n, "the array's length");
    if (st != HP_OK)
        return st;
    if (et == HP_GGUF_V_ARRAY)
        return hp_fail(c->err, HP_ERR_UNSUPPORTED, "%s: %s is an array of arrays (not supported)", c->name, c->what);
    if (et >= HP_GGUF_V_COUNT)
        return hp_fail(c->err, HP_ERR_FORMAT, "%s: %s is an array of unknown value type %u (corrupt file)", c->name,
                       c->what, et);
    kv->elem = (enum hp_gguf_vtype)et;
    kv->n = n;
    const size_t left = c->len - c->pos, esize = et == HP_GGUF_V_STRING ? 8 : (size_t)vtypes[et].size;
    if (n > left / esize)
        return hp_fail(c->err, HP_ERR_FORMAT,
                       "%s: truncated in %s: an array of %llu %s elements cannot fit in the %zu bytes left", c->name,
                       c->what, (unsigned long long)n, vtypes[et].name, left);
    if (et != HP_GGUF_V_STRING) {
        kv->data = c->p + c->pos;
        c->pos += (size_t)n * esize;
        return HP_OK;
    }
    struct hp_gguf_str *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v)
        return hp_fail(c->err, HP_ERR_NOMEM, "%s: out of memory", c->name);
    kv->str = v;
    for (uint64_t i = 0; i < n && st == HP_OK; i++)
        st = rd_str(c, &v[i], "a string of the array");
    return st;
}

static enum hp_status rd_value(struct cur *c, struct kv_slot *s)
{
    uint32_t t;
    enum hp_status st = rd_u32(c, &t, "the value type");
    if (st != HP_OK)
        return st;
    if (t >= HP_GGUF_V_COUNT)
        return hp_fail(c->err, HP_ERR_FORMAT, "%s: %s has unknown value type %u (corrupt file)", c->name, c->what, t);
    s->kv.type = s->kv.elem = (enum hp_gguf_vtype)t;
    s->kv.n = 1;
    if (t == HP_GGUF_V_ARRAY)
        return rd_array(c, &s->kv);
    if (t == HP_GGUF_V_STRING) {
        s->kv.str = &s->one;
        return rd_str(c, &s->one, "the string value");
    }
    st = need(c, (uint64_t)vtypes[t].size, "the value");
    if (st == HP_OK) {
        s->kv.data = c->p + c->pos;
        c->pos += (size_t)vtypes[t].size;
    }
    return st;
}

static int cmp_kv(const void *a, const void *b)
{
    return strcmp((*(const struct hp_gguf_kv *const *)a)->key, (*(const struct hp_gguf_kv *const *)b)->key);
}

static enum hp_status rd_kvs(struct hp_gguf *g, struct cur *c)
{
    g->kv = calloc((size_t)(g->n_kv ? g->n_kv : 1), sizeof *g->kv);
    g->kv_by_key = malloc((size_t)(g->n_kv ? g->n_kv : 1) * sizeof *g->kv_by_key);
    if (!g->kv || !g->kv_by_key)
        return hp_fail(c->err, HP_ERR_NOMEM, "%s: out of memory", g->name);
    for (int64_t i = 0; i < g->n_kv; i++) {
        struct kv_slot *s = &g->kv[i];
        char *key = NULL;
        snprintf(c->what, sizeof c->what, "metadata key %lld of %lld", (long long)i, (long long)g->n_kv);
        enum hp_status st = rd_name(c, &key, "its name");
        if (st != HP_OK)
            return st;
        s->kv.key = key;
        char b[SHOWN_CAP];
        snprintf(c->what, sizeof c->what, "metadata key '%s'", SHOW(key, b));
        st = rd_value(c, s);
        if (st != HP_OK)
            return st;
        g->kv_by_key[i] = &s->kv;
    }
    hp_qsort(g->kv_by_key, (size_t)g->n_kv, sizeof *g->kv_by_key, cmp_kv);
    for (int64_t i = 1; i < g->n_kv; i++)
        if (strcmp(g->kv_by_key[i - 1]->key, g->kv_by_key[i]->key) == 0) {
            char b[SHOWN_CAP];
            return hp_fail(c->err, HP_ERR_FORMAT, "%s: metadata key '%s' appears twice (corrupt file)", g->name,
                           SHOW(g->kv_by_key[i]->key, b));
        }
    return HP_OK;
}

/* general.alignment: a u32 power of two when present (ggml refuses any other type too). */
static enum hp_status rd_alignment(struct hp_gguf *g, struct hp_error *err)
{
    g->alignment = DEFAULT_ALIGNMENT;
    const struct hp_gguf_kv *kv = hp_gguf_find_kv(g, "general.alignment");
    if (!kv)
        return HP_OK;
    if (kv->type != HP_GGUF_V_U32)
        return hp_fail(err, HP_ERR_FORMAT, "%s: general.alignment is a %s, not a u32 (corrupt file)", g->name,
                       vtypes[kv->type].name);
    const uint32_t a = le32(kv->data);
    if (a == 0 || (a & (a - 1)) != 0)
        return hp_fail(err, HP_ERR_FORMAT, "%s: general.alignment is %u, not a power of two (corrupt file)", g->name,
                       a);
    g->alignment = a;
    return HP_OK;
}

// --- tensor infos ---------------------------------------------------------------------

static enum hp_status rd_tensor_info(struct hp_gguf *g, struct cur *c, struct hp_gguf_tensor *t)
{
    char *name = NULL;
    enum hp_status st = rd_name(c, &name, "its name");
    if (st != HP_OK)
        return st;
    t->name = name;
    char b[SHOWN_CAP];
    snprintf(c->what, sizeof c->what, "tensor '%s'", SHOW(name, b));
    uint32_t n_dims, type;
    if ((st = rd_u32(c, &n_dims, "its n_dims")) != HP_OK)
        return st;
    if (n_dims > 4)
        return hp_fail(c->err, HP_ERR_FORMAT, "%s: %s has %u dimensions (at most 4)", g->name, c->what, n_dims);
    t->n_dims = (int)n_dims;
    for (int d = 0; d < 4; d++) {
        uint64_t ne = 1;
        if (d < t->n_dims && (st = rd_u64(c, &ne, "its shape")) != HP_OK)
            return st;
        if (ne > (uint64_t)INT64_MAX)
            return hp_fail(c->err, HP_ERR_FORMAT, "%s: %s has ne[%d] = %llu, over 2^63 - 1 (corrupt file)", g->name,
                           c->what, d, (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
    }
    if ((st = rd_u32(c, &type, "its type")) != HP_OK)
        return st;
    if (!hp_gguf_type_from_ggml(type, &t->type))
        return hp_fail(c->err, HP_ERR_FORMAT, "%s: %s has unknown ggml type %u (corrupt file, or a type newer than "
                       "headprune knows)", g->name, c->what, type);
    return rd_u64(c, &t->offset, "its offset");
}

/* a x b into *out, false on overflow past max. */
static bool mul_ok(uint64_t a, uint64_t b, uint64_t max, uint64_t *out)
{
    if (a != 0 && b > max / a)
        return false;
    *out = a * b;
    return true;
}

/* A tensor's element count, byte size and place: inside the data section and aligned. */
static enum hp_status place_tensor(struct hp_gguf *g, struct hp_gguf_tensor *t, struct hp_error *err)
{
    const struct hp_gguf_type_info *ti = &types[t->type];
    char b[SHOWN_CAP];
    const char *nm = SHOW(t->name, b);
    uint64_t nel = 1, nbytes;
    for (int d = 0; d < 4; d++)
        if (!mul_ok(nel, (uint64_t)t->ne[d], INT64_MAX, &nel))
            return hp_fail(err, HP_ERR_FORMAT, "%s: tensor '%s': shape [%lld, %lld, %lld, %lld] has more than 2^63 - 1 "
                           "elements (corrupt file)", g->name, nm, (long long)t->ne[0], (long long)t->ne[1],
                           (long long)t->ne[2], (long long)t->ne[3]);
    t->nel = (int64_t)nel;
    if (t->ne[0] % ti->block_size != 0)
        return hp_fail(err, HP_ERR_FORMAT, "%s: tensor '%s': ne[0] = %lld is not a multiple of %s's block size %d "
                       "(corrupt file)", g->name, nm, (long long)t->ne[0], ti->name, ti->block_size);
    if (!mul_ok(nel / (uint64_t)ti->block_size, (uint64_t)ti->block_bytes, SIZE_MAX, &nbytes))
        return hp_fail(err, HP_ERR_FORMAT, "%s: tensor '%s': %llu elements of %s are more bytes than 2^64 (corrupt "
                       "file)", g->name, nm, (unsigned long long)nel, ti->name);
    t->nbytes = (size_t)nbytes;
    if (t->offset % g->alignment != 0)
        return hp_fail(err, HP_ERR_FORMAT, "%s: tensor '%s': offset %llu is not a multiple of the alignment %u "
                       "(corrupt file)", g->name, nm, (unsigned long long)t->offset, g->alignment);
    const size_t data_len = g->len - g->data_off;
    if (t->offset > data_len || nbytes > data_len - t->offset)
        return hp_fail(err, HP_ERR_FORMAT, "%s: tensor '%s': offset %llu + %llu bytes runs past the end of the file "
                       "(the data section is %zu bytes from byte %zu of %zu; truncated or corrupt file)", g->name, nm,
                       (unsigned long long)t->offset, (unsigned long long)nbytes, data_len, g->data_off, g->len);
    t->data = g->map + g->data_off + t->offset;
    return HP_OK;
}

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp((*(const struct hp_gguf_tensor *const *)a)->name, (*(const struct hp_gguf_tensor *const *)b)->name);
}

static int cmp_tensor_offset(const void *a, const void *b)
{
    const struct hp_gguf_tensor *x = *(const struct hp_gguf_tensor *const *)a;
    const struct hp_gguf_tensor *y = *(const struct hp_gguf_tensor *const *)b;
    return x->offset != y->offset ? (x->offset < y->offset ? -1 : 1) : 0;
}

/* No name twice; no two tensors sharing a byte. The sweep keeps the furthest end seen so far, so an empty
 * tensor between two others hides nothing. by (n_t) is scratch. */
static enum hp_status check_tensors(struct hp_gguf *g, const struct hp_gguf_tensor **by, struct hp_error *err)
{
    char b1[SHOWN_CAP], b2[SHOWN_CAP];
    for (int64_t i = 1; i < g->n_t; i++)
        if (strcmp(g->t_by_name[i - 1]->name, g->t_by_name[i]->name) == 0)
            return hp_fail(err, HP_ERR_FORMAT, "%s: tensor '%s' appears twice (corrupt file)", g->name,
                           SHOW(g->t_by_name[i]->name, b1));
    for (int64_t i = 0; i < g->n_t; i++)
        by[i] = &g->t[i];
    hp_qsort(by, (size_t)g->n_t, sizeof *by, cmp_tensor_offset);
    const struct hp_gguf_tensor *far = NULL; /* the tensor ending furthest so far */
    for (int64_t i = 0; i < g->n_t; i++) {
        const struct hp_gguf_tensor *t = by[i];
        if (t->nbytes == 0)
            continue;
        if (far && t->offset < far->offset + far->nbytes)
            return hp_fail(err, HP_ERR_FORMAT, "%s: tensors '%s' (bytes %llu to %llu) and '%s' (from byte %llu) "
                           "overlap in the data section (corrupt file)", g->name, SHOW(far->name, b1),
                           (unsigned long long)far->offset, (unsigned long long)(far->offset + far->nbytes),
                           SHOW(t->name, b2), (unsigned long long)t->offset);
        if (!far || t->offset + t->nbytes > far->offset + far->nbytes)
            far = t;
    }
    return HP_OK;
}

static enum hp_status rd_tensors(struct hp_gguf *g, struct cur *c)
{
    if ((uint64_t)g->n_t > (c->len - c->pos) / MIN_TI_BYTES)
        return hp_fail(c->err, HP_ERR_FORMAT, "%s: the header claims %lld tensors, more than the %zu bytes after the "
                       "metadata can describe (corrupt file)", g->name, (long long)g->n_t, c->len - c->pos);
    const size_t n = (size_t)(g->n_t ? g->n_t : 1);
    g->t = calloc(n, sizeof *g->t);
    g->t_by_name = malloc(n * sizeof *g->t_by_name);
    if (!g->t || !g->t_by_name)
        return hp_fail(c->err, HP_ERR_NOMEM, "%s: out of memory", g->name);
    for (int64_t i = 0; i < g->n_t; i++) {
        snprintf(c->what, sizeof c->what, "tensor info %lld of %lld", (long long)i, (long long)g->n_t);
        enum hp_status st = rd_tensor_info(g, c, &g->t[i]);
        if (st != HP_OK)
            return st;
        g->t_by_name[i] = &g->t[i];
    }
    /* the data section starts at the aligned end of the infos (pos <= len, so no overflow) */
    g->data_off = (c->pos + g->alignment - 1) / g->alignment * g->alignment;
    if (g->data_off > g->len) {
        if (g->n_t > 0)
            return hp_fail(c->err, HP_ERR_FORMAT, "%s: truncated: the data section would start at byte %zu, past the "
                           "end of the file (%zu bytes)", g->name, g->data_off, g->len);
        g->data_off = g->len;
    }
    for (int64_t i = 0; i < g->n_t; i++) {
        enum hp_status st = place_tensor(g, &g->t[i], c->err);
        if (st != HP_OK)
            return st;
    }
    hp_qsort(g->t_by_name, (size_t)g->n_t, sizeof *g->t_by_name, cmp_tensor_name);
    const struct hp_gguf_tensor **by = malloc(n * sizeof *by);
    if (!by)
        return hp_fail(c->err, HP_ERR_NOMEM, "%s: out of memory", g->name);
    enum hp_status st = check_tensors(g, by, c->err);
    free(by);
    return st;
}

// --- open and close -----------------------------------------------------------------------

static enum hp_status rd_header(struct hp_gguf *g, struct cur *c)
{
    char b[SHOWN_CAP];
    const size_t head = c->len < 4 ? c->len : 4; /* a file shorter than the magic is judged by what it has */
    if (head && memcmp(c->p, "GGUF", head) != 0)
        return hp_fail(c->err, HP_ERR_FORMAT, "%s: not a GGUF file (it starts with '%s', not 'GGUF')", g->name,
                       shown((const char *)c->p, head, b, sizeof b));
    if (c->len < HEADER_BYTES)
        return hp_fail(c->err, HP_ERR_FORMAT, "%s: truncated in the header: %zu bytes, a GGUF header is %d", g->name,
                       c->len, HEADER_BYTES);
    const uint32_t v = le32(c->p + 4);
    if (v > 0xFFFF && (v & 0xFFFF) == 0)
        return hp_fail(c->err, HP_ERR_UNSUPPORTED, "%s: a big-endian GGUF file (version %u read backwards): only "
                       "little-endian files are supported", g->name, v >> 24);
    if (v != 2 && v != 3)
        return hp_fail(c->err, HP_ERR_UNSUPPORTED, "%s: GGUF version %u is not supported (versions 2 and 3 are%s)",
                       g->name, v, v == 1 ? "; convert the file with a newer llama.cpp" : "");
    g->version = v;
    const uint64_t n_t = le64(c->p + 8), n_kv = le64(c->p + 16);
    c->pos = HEADER_BYTES;
    const size_t left = c->len - HEADER_BYTES;
    /* every key takes 13 bytes at least and every tensor info 24: refuse counts the file cannot hold
     * before sizing anything by them */
    if (n_kv > left / MIN_KV_BYTES || n_t > (left - n_kv * MIN_KV_BYTES) / MIN_TI_BYTES)
        return hp_fail(c->err, HP_ERR_FORMAT, "%s: the header claims %llu tensors and %llu metadata keys, more than "
                       "the %zu bytes after it can hold (truncated or corrupt file)", g->name,
                       (unsigned long long)n_t, (unsigned long long)n_kv, left);
    g->n_t = (int64_t)n_t;
    g->n_kv = (int64_t)n_kv;
    return HP_OK;
}

/* Take the bytes (recorded first, so that hp_gguf_close releases them whatever happens) and index them. */
static enum hp_status index_bytes(const char *name, const void *map, size_t len, bool borrowed, struct hp_gguf **out,
                                  struct hp_error *err)
{
    *out = NULL;
    struct hp_gguf *g = calloc(1, sizeof *g);
    char *nm = strdup(name);
    if (!g || !nm) {
        if (!borrowed && len)
            munmap((void *)map, len);
        free(g);
        free(nm);
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", name);
    }
    g->name = nm;
    g->map = map;
    g->len = len;
    g->borrowed = borrowed;
    struct cur c = {.p = map, .len = len, .name = g->name, .err = err};
    snprintf(c.what, sizeof c.what, "the header");
    enum hp_status st = rd_header(g, &c);
    if (st == HP_OK)
        st = rd_kvs(g, &c);
    if (st == HP_OK)
        st = rd_alignment(g, err);
    if (st == HP_OK)
        st = rd_tensors(g, &c);
    if (st != HP_OK) {
        hp_gguf_close(g);
        return st;
    }
    *out = g;
    return HP_OK;
}

enum hp_status hp_gguf_open(const char *path, struct hp_gguf **out, struct hp_error *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return hp_fail(err, HP_ERR_IO, "%s: cannot open (%s)", path, hp_strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        const int e = errno;
        close(fd);
        return hp_fail(err, HP_ERR_IO, "%s: cannot stat (%s)", path, hp_strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return hp_fail(err, HP_ERR_IO, "%s: %s, not a GGUF file", path,
                       S_ISDIR(sb.st_mode) ? "is a directory" : "not a regular file");
    }
    const size_t len = (size_t)sb.st_size;
    if (len == 0) {
        close(fd);
        return hp_fail(err, HP_ERR_FORMAT, "%s: empty file, not a GGUF file", path);
    }
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    const int e = errno;
    close(fd);
    if (map == MAP_FAILED)
        return hp_fail(err, HP_ERR_IO, "%s: cannot map (%s)", path, hp_strerror(e));
    return index_bytes(path, map, len, false, out, err);
}

enum hp_status hp_gguf_open_buffer(const char *name, const void *buf, size_t len, struct hp_gguf **out,
                                   struct hp_error *err)
{
    return index_bytes(name, buf, len, true, out, err);
}

void hp_gguf_close(struct hp_gguf *g)
{
    if (!g)
        return;
    if (g->kv)
        for (int64_t i = 0; i < g->n_kv; i++) {
            free((char *)g->kv[i].kv.key);
            if (g->kv[i].kv.str != &g->kv[i].one)
                free((struct hp_gguf_str *)g->kv[i].kv.str);
        }
    if (g->t)
        for (int64_t i = 0; i < g->n_t; i++)
            free((char *)g->t[i].name);
    free(g->kv);
    free(g->kv_by_key);
    free(g->t);
    free(g->t_by_name);
    if (!g->borrowed && g->map)
        munmap((void *)g->map, g->len);
    free(g->name);
    free(g);
}

const char *hp_gguf_name(const struct hp_gguf *g) { return g->name; }

uint32_t hp_gguf_version(const struct hp_gguf *g) { return g->version; }

uint32_t hp_gguf_alignment(const struct hp_gguf *g) { return g->alignment; }

const void *hp_gguf_bytes(const struct hp_gguf *g, size_t *len)
{
    *len = g->len;
    return g->map;
}

const void *hp_gguf_data(const struct hp_gguf *g, size_t *len)
{
    *len = g->len - g->data_off;
    return g->map + g->data_off;
}

// --- metadata accessors ----------------------------------------------------------------------

int64_t hp_gguf_kv_count(const struct hp_gguf *g) { return g->n_kv; }

const struct hp_gguf_kv *hp_gguf_kv_at(const struct hp_gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_kv ? &g->kv[i].kv : NULL;
}

const struct hp_gguf_kv *hp_gguf_find_kv(const struct hp_gguf *g, const char *key)
{
    if (g->n_kv == 0)
        return NULL;
    const struct hp_gguf_kv k = {.key = key}, *kp = &k;
    const struct hp_gguf_kv **hit = bsearch(&kp, g->kv_by_key, (size_t)g->n_kv, sizeof *g->kv_by_key, cmp_kv);
    return hit ? *hit : NULL;
}

/* A number read from a value: unsigned (u), signed (s) or floating (f). */
struct num {
    enum { NUM_U, NUM_S, NUM_F } kind;
    uint64_t u;
    int64_t s;
    double f;
};

static bool is_int(enum hp_gguf_vtype t)
{
    return t == HP_GGUF_V_U8 || t == HP_GGUF_V_I8 || t == HP_GGUF_V_U16 || t == HP_GGUF_V_I16 ||
           t == HP_GGUF_V_U32 || t == HP_GGUF_V_I32 || t == HP_GGUF_V_U64 || t == HP_GGUF_V_I64;
}

/* Element i of a number or bool value (the caller has checked the type and i < n). */
static struct num elem_num(const struct hp_gguf_kv *kv, uint64_t i)
{
    const uint8_t *p = (const uint8_t *)kv->data + i * (uint64_t)vtypes[kv->elem].size;
    struct num v = {.kind = NUM_U};
    float f;
    uint32_t w;
    uint64_t q;
    switch (kv->elem) {
    case HP_GGUF_V_U8: v.u = p[0]; break;
    case HP_GGUF_V_BOOL: v.u = p[0] != 0; break;
    case HP_GGUF_V_U16: v.u = le16(p); break;
    case HP_GGUF_V_U32: v.u = le32(p); break;
    case HP_GGUF_V_U64: v.u = le64(p); break;
    case HP_GGUF_V_I8: v.kind = NUM_S; v.s = (int8_t)p[0]; break;
    case HP_GGUF_V_I16: v.kind = NUM_S; v.s = (int16_t)le16(p); break;
    case HP_GGUF_V_I32: v.kind = NUM_S; v.s = (int32_t)le32(p); break;
    case HP_GGUF_V_I64: q = le64(p); v.kind = NUM_S; memcpy(&v.s, &q, sizeof q); break;
    case HP_GGUF_V_F32: w = le32(p); memcpy(&f, &w, sizeof f); v.kind = NUM_F; v.f = f; break;
    case HP_GGUF_V_F64: q = le64(p); memcpy(&v.f, &q, sizeof q); v.kind = NUM_F; break;
    default: assert(!"not a number"); break;
    }
    return v;
}

static enum hp_status lookup(const struct hp_gguf *g, const char *key, bool *found, const struct hp_gguf_kv **kv,
                             struct hp_error *err)
{
    *kv = hp_gguf_find_kv(g, key);
    if (found)
        *found = *kv != NULL;
    if (*kv || found)
        return HP_OK;
    char b[SHOWN_CAP];
    return hp_fail(err, HP_ERR_FORMAT, "%s: metadata key '%s' is missing", g->name, SHOW(key, b));
}

static enum hp_status wrong_type(const struct hp_gguf *g, const struct hp_gguf_kv *kv, const char *want,
                                 struct hp_error *err)
{
    char b[SHOWN_CAP];
    if (kv->type == HP_GGUF_V_ARRAY)
        return hp_fail(err, HP_ERR_FORMAT, "%s: metadata key '%s' is an array of %s, not %s", g->name,
                       SHOW(kv->key, b), vtypes[kv->elem].name, want);
    return hp_fail(err, HP_ERR_FORMAT, "%s: metadata key '%s' is a %s, not %s", g->name, SHOW(kv->key, b),
                   vtypes[kv->type].name, want);
}

/* An integer key's value in [lo, hi] (what names the result type in errors); *kv NULL when absent. */
static enum hp_status get_int(const struct hp_gguf *g, const char *key, int64_t lo, uint64_t hi, const char *what,
                              const struct hp_gguf_kv **kv, struct num *v, bool *found, struct hp_error *err)
{
    enum hp_status st = lookup(g, key, found, kv, err);
    if (st != HP_OK || !*kv)
        return st;
    if (!is_int((*kv)->type))
        return wrong_type(g, *kv, "an integer", err);
    *v = elem_num(*kv, 0);
    char b[SHOWN_CAP];
    if (v->kind == NUM_U && v->u > hi)
        return hp_fail(err, HP_ERR_FORMAT, "%s: metadata key '%s' is %llu, too large for a %s", g->name,
                       SHOW(key, b), (unsigned long long)v->u, what);
    if (v->kind == NUM_S && (v->s < lo || (v->s > 0 && (uint64_t)v->s > hi)))
        return hp_fail(err, HP_ERR_FORMAT, "%s: metadata key '%s' is %lld, outside the range of a %s", g->name,
                       SHOW(key, b), (long long)v->s, what);
    return HP_OK;
}

enum hp_status hp_gguf_get_u32(const struct hp_gguf *g, const char *key, uint32_t *out, bool *found,
                               struct hp_error *err)
{
    const struct hp_gguf_kv *kv;
    struct num v = {0};
    enum hp_status st = get_int(g, key, 0, UINT32_MAX, "u32", &kv, &v, found, err);
    if (st == HP_OK && kv)
        *out = v.kind == NUM_U ? (uint32_t)v.u : (uint32_t)v.s;
    return st;
}

enum hp_status hp_gguf_get_u64(const struct hp_gguf *g, const char *key, uint64_t *out, bool *found,
                               struct hp_error *err)
{
    const struct hp_gguf_kv *kv;
    struct num v = {0};
    enum hp_status st = get_int(g, key, 0, UINT64_MAX, "u64", &kv, &v, found, err);
    if (st == HP_OK && kv)
        *out = v.kind == NUM_U ? v.u : (uint64_t)v.s;
    return st;
}

enum hp_status hp_gguf_get_i32(const struct hp_gguf *g, const char *key, int32_t *out, bool *found,
                               struct hp_error *err)
{
    const struct hp_gguf_kv *kv;
    struct num v = {0};
    enum hp_status st = get_int(g, key, INT32_MIN, INT32_MAX, "i32", &kv, &v, found, err);
    if (st == HP_OK && kv)
        *out = v.kind == NUM_U ? (int32_t)v.u : (int32_t)v.s;
    return st;
}

enum hp_status hp_gguf_get_i64(const struct hp_gguf *g, const char *key, int64_t *out, bool *found,
                               struct hp_error *err)
{
    const struct hp_gguf_kv *kv;
    struct num v = {0};
    enum hp_status st = get_int(g, key, INT64_MIN, INT64_MAX, "i64", &kv, &v, found, err);
    if (st == HP_OK && kv)
        *out = v.kind == NUM_U ? (int64_t)v.u : v.s;
    return st;
}

enum hp_status hp_gguf_get_f64(const struct hp_gguf *g, const char *key, double *out, bool *found,
                               struct hp_error *err)
{
    const struct hp_gguf_kv *kv;
    enum hp_status st = lookup(g, key, found, &kv, err);
    if (st != HP_OK || !kv)
        return st;
    if (kv->type != HP_GGUF_V_F32 && kv->type != HP_GGUF_V_F64)
        return wrong_type(g, kv, "a float", err);
    *out = elem_num(kv, 0).f;
    return HP_OK;
}

enum hp_status hp_gguf_get_f32(const struct hp_gguf *g, const char *key, float *out, bool *found,
                               struct hp_error *err)
{
    const struct hp_gguf_kv *kv;
    enum hp_status st = lookup(g, key, found, &kv, err);
    if (st != HP_OK || !kv)
        return st;
    if (kv->type != HP_GGUF_V_F32 && kv->type != HP_GGUF_V_F64)
        return wrong_type(g, kv, "a float", err);
    const double d = elem_num(kv, 0).f;
    if (isfinite(d) && fabs(d) > FLT_MAX) {
        char b[SHOWN_CAP];
        return hp_fail(err, HP_ERR_FORMAT, "%s: metadata key '%s' is %g, outside the range of an f32", g->name,
                       SHOW(key, b), d);
    }
    *out = (float)d;
    return HP_OK;
}

enum hp_status hp_gguf_get_bool(const struct hp_gguf *g, const char *key, bool *out, bool *found,
                                struct hp_error *err)
{
    const struct hp_gguf_kv *kv;
    enum hp_status st = lookup(g, key, found, &kv, err);
    if (st != HP_OK || !kv)
        return st;
    if (kv->type != HP_GGUF_V_BOOL)
        return wrong_type(g, kv, "a bool", err);
    *out = elem_num(kv, 0).u != 0;
    return HP_OK;
}

enum hp_status hp_gguf_get_str(const struct hp_gguf *g, const char *key, struct hp_gguf_str *out, bool *found,
                               struct hp_error *err)
{
    const struct hp_gguf_kv *kv;
    enum hp_status st = lookup(g, key, found, &kv, err);
    if (st != HP_OK || !kv)
        return st;
    if (kv->type != HP_GGUF_V_STRING)
        return wrong_type(g, kv, "a string", err);
    *out = kv->str[0];
    return HP_OK;
}

enum hp_status hp_gguf_get_strs(const struct hp_gguf *g, const char *key, const struct hp_gguf_kv **out,
                                bool *found, struct hp_error *err)
{
    const struct hp_gguf_kv *kv;
    enum hp_status st = lookup(g, key, found, &kv, err);
    if (st != HP_OK || !kv)
        return st;
    if (kv->type != HP_GGUF_V_ARRAY || kv->elem != HP_GGUF_V_STRING)
        return wrong_type(g, kv, "an array of strings", err);
    *out = kv;
    return HP_OK;
}

enum hp_status hp_gguf_get_nums(const struct hp_gguf *g, const char *key, const struct hp_gguf_kv **out,
                                bool *found, struct hp_error *err)
{
    const struct hp_gguf_kv *kv;
    enum hp_status st = lookup(g, key, found, &kv, err);
    if (st != HP_OK || !kv)
        return st;
    if (kv->type != HP_GGUF_V_ARRAY || kv->elem == HP_GGUF_V_STRING)
        return wrong_type(g, kv, "an array of numbers", err);
    *out = kv;
    return HP_OK;
}

bool hp_gguf_arr_i64(const struct hp_gguf_kv *kv, uint64_t i, int64_t *out)
{
    if (i >= kv->n || kv->elem == HP_GGUF_V_STRING)
        return false;
    const struct num v = elem_num(kv, i);
    if (v.kind == NUM_F || (v.kind == NUM_U && v.u > (uint64_t)INT64_MAX))
        return false;
    *out = v.kind == NUM_U ? (int64_t)v.u : v.s;
    return true;
}

bool hp_gguf_arr_f64(const struct hp_gguf_kv *kv, uint64_t i, double *out)
{
    if (i >= kv->n || kv->elem == HP_GGUF_V_STRING)
        return false;
    const struct num v = elem_num(kv, i);
    *out = v.kind == NUM_F ? v.f : v.kind == NUM_U ? (double)v.u : (double)v.s;
    return true;
}

// --- tensor accessors and dequantization ----------------------------------------------------------

int64_t hp_gguf_tensor_count(const struct hp_gguf *g) { return g->n_t; }

const struct hp_gguf_tensor *hp_gguf_tensor_at(const struct hp_gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_t ? &g->t[i] : NULL;
}

const struct hp_gguf_tensor *hp_gguf_find_tensor(const struct hp_gguf *g, const char *name)
{
    if (g->n_t == 0)
        return NULL;
    const struct hp_gguf_tensor k = {.name = name}, *kp = &k;
    const struct hp_gguf_tensor **hit =
        bsearch(&kp, g->t_by_name, (size_t)g->n_t, sizeof *g->t_by_name, cmp_tensor_name);
    return hit ? *hit : NULL;
}

enum hp_status hp_gguf_dequant(enum hp_gguf_type type, const void *src, float *dst, int64_t n)
{
    const struct hp_gguf_type_info *ti = hp_gguf_type_info(type);
    if (!ti || n < 0 || n % ti->block_size != 0)
        return HP_ERR_ARG;
    if (!ti->to_f32)
        return HP_ERR_UNSUPPORTED;
    if (n > 0)
        ti->to_f32(src, dst, n / ti->block_size);
    return HP_OK;
}

enum hp_status hp_gguf_tensor_dequant(const struct hp_gguf *g, const struct hp_gguf_tensor *t, float *dst,
                                      struct hp_error *err)
{
    const struct hp_gguf_type_info *ti = &types[t->type];
    if (!ti->to_f32) {
        char list[128] = "", b[SHOWN_CAP];
        size_t o = 0;
        for (int i = 0; i < HP_GGUF_TYPE_COUNT; i++)
            if (types[i].to_f32 && o < sizeof list)
                o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", o ? ", " : "", types[i].name);
        return hp_fail(err, HP_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s (ggml type %u): unsupported tensor "
                       "type (headprune dequantizes %s)", g->name, SHOW(t->name, b), ti->name, ti->ggml_id, list);
    }
    enum hp_status st = hp_gguf_dequant(t->type, t->data, dst, t->nel);
    assert(st == HP_OK); /* open checked the shape against the block size */
    return st;
}
