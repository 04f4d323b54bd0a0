/*
 * gguf.h -- reading GGUF files (llama.cpp's format): metadata, tensor
 * index, dequantization to f32 (engine/model/gguf.c).
 *
 * A struct hp_gguf maps one file read-only (or borrows a buffer) and indexes
 * its metadata keys and tensors by name. Versions 2 and 3, little-endian
 * (the two differ only in that 3 may be big-endian, which is refused).
 * Validation happens at open, in time and memory bounded by the file's size
 * whatever its header claims: every count and length is checked against the
 * bytes left before anything is allocated; element counts and byte sizes
 * use checked arithmetic; every tensor has at most 4 dimensions, a known
 * ggml type, ne[0] a multiple of its block size, an offset aligned to
 * general.alignment (a u32 power of two, 32 by default) and its bytes inside
 * the file; no two tensors overlap; no name or key repeats; arrays of
 * arrays are refused. Errors are one line naming the file and the problem.
 * Tensors of any known type open; only dequantization refuses the types it
 * lacks (the caller decides what a file needs). docs/gguf.md says more.
 * Views (keys, names, strings, tensor data) point into the mapping or into
 * the struct hp_gguf and never own: they live until hp_gguf_close.
 * Must not: know about models, configs or tokenizers.
 */
#ifndef HP_GGUF_H
#define HP_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "headprune.h"

/* ggml's tensor types, each with its number in the file (ggml's enum ggml_type; the gaps, 4, 5, 31-33 and
 * 36-38, are types ggml removed, and are unknown here). A row of gguf.c's table per member: name, block
 * size, bytes per block and the dequantizer, if any. */
enum hp_gguf_type {
    HP_GGUF_F32,     /* 0 */
    HP_GGUF_F16,     /* 1 */
    HP_GGUF_Q4_0,    /* 2 */
    HP_GGUF_Q4_1,    /* 3 */
    HP_GGUF_Q5_0,    /* 6 */
    HP_GGUF_Q5_1,    /* 7 */
    HP_GGUF_Q8_0,    /* 8 */
    HP_GGUF_Q8_1,    /* 9 */
    HP_GGUF_Q2_K,    /* 10 */
    HP_GGUF_Q3_K,    /* 11 */
    HP_GGUF_Q4_K,    /* 12 */
    HP_GGUF_Q5_K,    /* 13 */
    HP_GGUF_Q6_K,    /* 14 */
    HP_GGUF_Q8_K,    /* 15 */
    HP_GGUF_IQ2_XXS, /* 16 */
    HP_GGUF_IQ2_XS,  /* 17 */
    HP_GGUF_IQ3_XXS, /* 18 */
    HP_GGUF_IQ1_S,   /* 19 */
    HP_GGUF_IQ4_NL,  /* 20 */
    HP_GGUF_IQ3_S,   /* 21 */
    HP_GGUF_IQ2_S,   /* 22 */
    HP_GGUF_IQ4_XS,  /* 23 */
    HP_GGUF_I8,      /* 24 */
    HP_GGUF_I16,     /* 25 */
    HP_GGUF_I32,     /* 26 */
    HP_GGUF_I64,     /* 27 */
    HP_GGUF_F64,     /* 28 */
    HP_GGUF_IQ1_M,   /* 29 */
    HP_GGUF_BF16,    /* 30 */
    HP_GGUF_TQ1_0,   /* 34 */
    HP_GGUF_TQ2_0,   /* 35 */
    HP_GGUF_MXFP4,   /* 39 */
    HP_GGUF_NVFP4,   /* 40 */
    HP_GGUF_Q1_0,    /* 41 */
    HP_GGUF_TYPE_COUNT
};

/* What a type is: its name as ggml spells it ("Q4_K"), its number in files, elements per block and bytes
 * per block (F32: 1 and 4; Q4_K: 256 and 144), and its dequantizer: n_blocks blocks at src (any alignment)
 * to n_blocks x block_size floats at dst; NULL for the types headprune does not dequantize. */
struct hp_gguf_type_info {
    const char *name;
    uint32_t ggml_id;
    int block_size;
    int block_bytes;
    void (*to_f32)(const uint8_t *src, float *dst, int64_t n_blocks);
};

/* NULL for a value outside the enum. */
const struct hp_gguf_type_info *hp_gguf_type_info(enum hp_gguf_type type);
/* The type whose number in files is ggml_id; false when no known type has it. */
bool hp_gguf_type_from_ggml(uint32_t ggml_id, enum hp_gguf_type *out);

/* GGUF's metadata value types, numbered as in the file. */
enum hp_gguf_vtype {
    HP_GGUF_V_U8,
    HP_GGUF_V_I8,
    HP_GGUF_V_U16,
    HP_GGUF_V_I16,
    HP_GGUF_V_U32,
    HP_GGUF_V_I32,
    HP_GGUF_V_F32,
    HP_GGUF_V_BOOL,
    HP_GGUF_V_STRING,
    HP_GGUF_V_ARRAY,
    HP_GGUF_V_U64,
    HP_GGUF_V_I64,
    HP_GGUF_V_F64,
    HP_GGUF_V_COUNT
};

/* "u32", "string", "array" ...; "?" outside the enum. */
const char *hp_gguf_vtype_name(enum hp_gguf_vtype t);

/* A string of the file: len bytes at p, not NUL-terminated, any bytes (GGUF says UTF-8; not checked). */
struct hp_gguf_str {
    const char *p;
    size_t len;
};

/* One metadata key and its value. */
struct hp_gguf_kv {
    const char *key;               /* NUL-terminated (a key holding a NUL byte is refused at open) */
    enum hp_gguf_vtype type;       /* HP_GGUF_V_ARRAY for an array */
    enum hp_gguf_vtype elem;       /* an array's element type (never ARRAY); a scalar's own type */
    uint64_t n;                    /* an array's element count (may be 0); 1 for a scalar */
    const void *data;              /* numbers and bools: the (first) value, little-endian, any alignment */
    const struct hp_gguf_str *str; /* strings: n of them (a string scalar: 1); else NULL */
};

/* One tensor. ne is in ggml's order: ne[0] is the innermost, contiguous dimension (a (rows, cols)
 * row-major matrix has ne = {cols, rows, 1, 1}); dimensions past n_dims are 1. */
struct hp_gguf_tensor {
    const char *name; /* NUL-terminated */
    enum hp_gguf_type type;
    int n_dims;       /* 0..4 */
    int64_t ne[4];
    int64_t nel;      /* ne[0] x ne[1] x ne[2] x ne[3] */
    uint64_t offset;  /* from the start of the data section, as in the file */
    const void *data; /* inside the mapping; aligned to the file's alignment relative to the data section */
    size_t nbytes;    /* nel / block size x bytes per block */
};

struct hp_gguf;

/* Map and index the file at path. Destructor: hp_gguf_close. On failure *out is NULL. */
enum hp_status hp_gguf_open(const char *path, struct hp_gguf **out, struct hp_error *err);
/* Index a GGUF file already in memory (buf, len bytes), borrowed: it must outlive the result and is never
 * unmapped or written. name stands for the file in errors. The fuzz harness uses it. Destructor:
 * hp_gguf_close. */
enum hp_status hp_gguf_open_buffer(const char *name, const void *buf, size_t len, struct hp_gguf **out,
                                   struct hp_error *err);
void hp_gguf_close(struct hp_gguf *g);

/* The name given at open, the version (2 or 3), the alignment, the whole file and its data section
 * (from the aligned end of the tensor infos to the end of the file; may be empty). */
const char *hp_gguf_name(const struct hp_gguf *g);
uint32_t hp_gguf_version(const struct hp_gguf *g);
uint32_t hp_gguf_alignment(const struct hp_gguf *g);
const void *hp_gguf_bytes(const struct hp_gguf *g, size_t *len);
const void *hp_gguf_data(const struct hp_gguf *g, size_t *len);

// --- metadata ---

/* Keys in file order; NULL when absent. */
int64_t hp_gguf_kv_count(const struct hp_gguf *g);
const struct hp_gguf_kv *hp_gguf_kv_at(const struct hp_gguf *g, int64_t i);
const struct hp_gguf_kv *hp_gguf_find_kv(const struct hp_gguf *g, const char *key);

/*
 * Typed getters. found NULL: the key is required, and its absence is HP_ERR_FORMAT ("file: metadata key
 * 'x' is missing"). found non-NULL: absence is HP_OK with *found false and *out untouched (so a default
 * set beforehand stays). A key of another type, or an integer outside the result's range, is HP_ERR_FORMAT
 * naming the key, its type and the value. Integers convert among every integer type when the value fits
 * (a u8 0 reads as an i64, an i32 -1 does not read as a u32); floats read f32 or f64 (an f64 beyond f32's
 * range is refused by get_f32); bools are the bool type only (any non-zero byte is true).
 */
enum hp_status hp_gguf_get_u32(const struct hp_gguf *g, const char *key, uint32_t *out, bool *found,
                               struct hp_error *err);
enum hp_status hp_gguf_get_u64(const struct hp_gguf *g, const char *key, uint64_t *out, bool *found,
                               struct hp_error *err);
enum hp_status hp_gguf_get_i32(const struct hp_gguf *g, const char *key, int32_t *out, bool *found,
                               struct hp_error *err);
enum hp_status hp_gguf_get_i64(const struct hp_gguf *g, const char *key, int64_t *out, bool *found,
                               struct hp_error *err);
enum hp_status hp_gguf_get_f32(const struct hp_gguf *g, const char *key, float *out, bool *found,
                               struct hp_error *err);
enum hp_status hp_gguf_get_f64(const struct hp_gguf *g, const char *key, double *out, bool *found,
                               struct hp_error *err);
enum hp_status hp_gguf_get_bool(const struct hp_gguf *g, const char *key, bool *out, bool *found,
                                struct hp_error *err);
enum hp_status hp_gguf_get_str(const struct hp_gguf *g, const char *key, struct hp_gguf_str *out, bool *found,
                               struct hp_error *err);
/* An array of strings (tokenizer.ggml.tokens): *out the kv, whose str[0 .. n) are the strings. */
enum hp_status hp_gguf_get_strs(const struct hp_gguf *g, const char *key, const struct hp_gguf_kv **out,
                                bool *found, struct hp_error *err);
/* An array of numbers or bools (tokenizer.ggml.scores, token_type): *out the kv; read its elements with
 * hp_gguf_arr_i64 / hp_gguf_arr_f64. */
enum hp_status hp_gguf_get_nums(const struct hp_gguf *g, const char *key, const struct hp_gguf_kv **out,
                                bool *found, struct hp_error *err);

/* Element i (< kv->n) of a scalar (i = 0) or array of numbers or bools. arr_i64: false when the element is
 * a float, or a u64 over INT64_MAX. arr_f64: any number (64-bit integers rounded to the nearest double);
 * false for strings. Both false when i >= kv->n. */
bool hp_gguf_arr_i64(const struct hp_gguf_kv *kv, uint64_t i, int64_t *out);
bool hp_gguf_arr_f64(const struct hp_gguf_kv *kv, uint64_t i, double *out);

// --- tensors ---

/* Tensors in file order; NULL when absent. */
int64_t hp_gguf_tensor_count(const struct hp_gguf *g);
const struct hp_gguf_tensor *hp_gguf_tensor_at(const struct hp_gguf *g, int64_t i);
const struct hp_gguf_tensor *hp_gguf_find_tensor(const struct hp_gguf *g, const char *name);

/*
 * n elements (n >= 0, a multiple of type's block size) of type at src (any alignment, n / block size x
 * bytes per block) to f32 at dst, as ggml's dequantize_row_* and the gguf Python package's
 * gguf.quants.dequantize compute them, bit for bit (docs/gguf.md). F32, F16, BF16, Q8_0, Q4_0, Q4_1,
 * Q4_K, Q5_K and Q6_K; HP_ERR_UNSUPPORTED for the other types, HP_ERR_ARG for a bad n or type.
 * dst must not overlap src.
 */
enum hp_status hp_gguf_dequant(enum hp_gguf_type type, const void *src, float *dst, int64_t n);
/* All of t (t->nel floats into dst), or HP_ERR_UNSUPPORTED naming the file, the tensor and its type. */
enum hp_status hp_gguf_tensor_dequant(const struct hp_gguf *g, const struct hp_gguf_tensor *t, float *dst,
                                      struct hp_error *err);

#endif
