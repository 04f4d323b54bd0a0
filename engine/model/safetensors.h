/*
 * safetensors.h -- reading safetensors files (one or many shards).
 *
 * A hp_st_set maps every shard read-only and indexes its tensors by name.
 * Validation happens at open: header length inside the file, JSON well
 * formed, offsets inside the data area, size = dtype size * shape, no two
 * tensors overlapping. Views into the mapping never own memory.
 * A set may also hold tensors whose bytes live elsewhere (hp_st_add_views: a
 * GGUF file's matrices, in their quantized blocks, which mat.c reads).
 */
#ifndef HP_SAFETENSORS_H
#define HP_SAFETENSORS_H

#include <stdio.h>

#include "headprune.h"

enum hp_dtype {
    HP_DT_F32,
    HP_DT_F16,
    HP_DT_BF16,
    HP_DT_Q, /* rows of quantized blocks (a GGUF file's matrix), read through a struct hp_qrows (mat.h) */
    HP_DT_OTHER
};

struct hp_qrows;

struct hp_st_tensor {
    char *name;
    enum hp_dtype dtype;
    char dtype_name[8]; /* as written in the header: "F32", "BF16", "I64" ... */
    int esize;          /* bytes per element; 0 for HP_DT_Q */
    int n_dims;
    int64_t shape[8];
    const void *data; /* inside the shard's mapping (a view's: wherever its owner keeps it) */
    size_t nbytes;
    const struct hp_qrows *q; /* HP_DT_Q: how its rows dequantize; else NULL */
    const char *file; /* the shard it lives in (owned by the set) */
    bool used;        /* bound by the model loader */
};

struct hp_st_set;

/* Map and index one file. Destructor: hp_st_close. */
enum hp_status hp_st_open(const char *path, struct hp_st_set **out,
                          struct hp_error *err);
/* Index a safetensors file already in memory (buf, len bytes), borrowed:
 * it must outlive the set and is never unmapped. name stands for the file in
 * errors. The fuzz harnesses use it. Destructor: hp_st_close. */
enum hp_status hp_st_open_buffer(const char *name, const void *buf, size_t len, struct hp_st_set **out,
                                 struct hp_error *err);
/* Map and index another shard into the same set (names must not repeat). */
enum hp_status hp_st_add(struct hp_st_set *set, const char *path,
                         struct hp_error *err);
/* Add n tensors whose bytes the set does not hold (a GGUF file's matrices, read through t[i].q) as t describes
 * them: names copied, each file the set's first shard's; data (and q) must outlive the set. Names must not repeat
 * and shapes are held to the header's rule (HP_ERR_FORMAT). The names are indexed once, after all n; after a
 * failure the set is fit only for hp_st_close. */
/* The header's rule for a shape (index_header, hp_st_add_views): n_dims 0 to 8, each dimension 0 to 2^52, at most
 * 1e15 elements. */
bool hp_st_shape_ok(int n_dims, const int64_t *shape);
enum hp_status hp_st_add_views(struct hp_st_set *set, const struct hp_st_tensor *t, int n, struct hp_error *err);
void hp_st_close(struct hp_st_set *set);

/* NULL when absent. */
struct hp_st_tensor *hp_st_find(struct hp_st_set *set, const char *name);
int hp_st_count(const struct hp_st_set *set);
/* The shards' mapped bytes, in the order they were added (for digests). */
int hp_st_n_shards(const struct hp_st_set *set);
const void *hp_st_shard_bytes(const struct hp_st_set *set, int i, size_t *len);
struct hp_st_tensor *hp_st_at(struct hp_st_set *set, int i);

/* --- writing ---
 * A tensor to write: its data follows the header in the order given. */
struct hp_st_out {
    const char *name;
    const char *dtype_name; /* "F32", "BF16", ... */
    int n_dims;
    int64_t shape[8];
    size_t nbytes; /* element size x shape */
};

/*
 * Write the header of a safetensors file for tensors t (n) to f: the length,
 * the JSON (with "__metadata__": {"format": "pt"}, which transformers asks
 * for) padded with spaces to 8 bytes so the data area is aligned. The caller
 * then writes each tensor's nbytes, in order. path names f in errors.
 */
enum hp_status hp_st_write_header(FILE *f, const char *path, const struct hp_st_out *t, int n, struct hp_error *err);

#endif
