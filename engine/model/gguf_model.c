/*
 * gguf_model.c -- a GGUF file as a Hugging Face checkpoint, which model.c
 * then opens as any other.
 *
 * What transformers 4.57's GGUF loader makes of a file
 * (modeling_gguf_pytorch_utils.py, integrations/ggml.py) is made here too:
 * - config.json's text from the metadata: the architecture's sizes, norm
 *   epsilon, rotary base, head size (rope.dimension_count), vocabulary (the
 *   embedding's rows) and tying (no output.weight: tied);
 * - the tensors under their transformers names, 2-D ones as [ne1, ne0]
 *   row-major; the q and k projections' rows, which llama.cpp's converter
 *   interleaves per head for its rotary, in transformers' order (its
 *   reverse_permute_weights).
 * All of it as a safetensors set (struct hp_gguf_ckpt), so the binder, its
 * checks and the export read it as they read a checkpoint: the vectors
 * (norms) dequantized to f32 at open in a safetensors file in memory, the
 * matrices views of the file's own blocks (hp_st_add_views), which products
 * dequantize a panel at a time (mat.h): an F32, F16 or BF16 matrix in
 * its order as that dtype, any other matrix, and q and k whatever their
 * type, as quantized rows (struct hp_qrows, HP_DT_Q) whose dequantizer is
 * the reader's (bit for bit gguf-py's) and whose row order is put back by
 * an index map (hp_qrows_src), not by moving rows. An export of a GGUF model
 * writes an f32 Hugging Face checkpoint.
 * Memory: the file's mapping (its size, paged in as read) and its vectors in
 * f32; the mapping stays open as long as the model.
 * Refused in one line naming the file and the field or tensor (the binder's
 * messages too, by these tables read back: hp_gguf_tensor_name, hp_gguf_sizes): an
 * architecture other than llama, metadata of the architecture this does not
 * read (rope scaling, experts, ...), a size that disagrees with a tensor's
 * shape, a tensor of more than two dimensions or of a type the reader cannot
 * dequantize, q or k rows that are not two per head.
 * hp_gguf_find says which file a model path names (the folder form lists the folder).
 * Must not: print, or read any file but the one named (and, to find it, its folder's listing).
 */
#define _POSIX_C_SOURCE 200809L
#include "model.h"

#include <assert.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"
#include "util.h"

/* The llama.* keys read here (with their config.json names) and those known to change nothing computed. absent:
 * what transformers takes for the key when the file leaves it out, in config keys (for messages; a missing
 * vocab_size is the embedding's rows, hp_gguf_checkpoint's rule). */
static const struct {
    const char *key, *config; /* config NULL: checked below, not copied */
    const char *absent;
} llama_keys[] = {
    {"context_length", "max_position_embeddings", NULL},
    {"block_count", "num_hidden_layers", NULL},
    {"feed_forward_length", "intermediate_size", NULL},
    {"embedding_length", "hidden_size", NULL},
    {"rope.dimension_count", "head_dim", "hidden_size/num_attention_heads"},
    {"attention.head_count", "num_attention_heads", NULL},
    {"attention.head_count_kv", "num_key_value_heads", "num_attention_heads"},
    {"vocab_size", "vocab_size", NULL}, /* checked against the embedding's rows */
    {"rope.freq_base", "rope_theta", NULL},
    {"attention.layer_norm_rms_epsilon", "rms_norm_eps", NULL},
    {"attention.key_length", NULL, NULL},
    {"attention.value_length", NULL, NULL},
};
#define N_KEYS (sizeof llama_keys / sizeof llama_keys[0])

/* GGUF tensor names in transformers' (gguf-py's tensor map for llama); %d a layer. ne: the config keys that size
 * it, in ggml's order (ne[0] first), factors joined by * or / (for messages: the binder checks the shapes). One
 * table both ways: a file's names to transformers' (hf_name), and back for messages (hp_gguf_tensor_name). */
static const struct {
    const char *gguf, *hf;
    const char *ne[2];
} llama_names[] = {
    {"token_embd.weight", "model.embed_tokens.weight", {"hidden_size", "vocab_size"}},
    {"output_norm.weight", "model.norm.weight", {"hidden_size"}},
    {"output.weight", "lm_head.weight", {"hidden_size", "vocab_size"}},
    {"blk.%d.attn_norm.weight", "model.layers.%d.input_layernorm.weight", {"hidden_size"}},
    {"blk.%d.attn_q.weight", "model.layers.%d.self_attn.q_proj.weight",
     {"hidden_size", "num_attention_heads*head_dim"}},
    {"blk.%d.attn_k.weight", "model.layers.%d.self_attn.k_proj.weight",
     {"hidden_size", "num_key_value_heads*head_dim"}},
    {"blk.%d.attn_v.weight", "model.layers.%d.self_attn.v_proj.weight",
     {"hidden_size", "num_key_value_heads*head_dim"}},
    {"blk.%d.attn_output.weight", "model.layers.%d.self_attn.o_proj.weight",
     {"num_attention_heads*head_dim", "hidden_size"}},
    {"blk.%d.ffn_norm.weight", "model.layers.%d.post_attention_layernorm.weight", {"hidden_size"}},
    {"blk.%d.ffn_gate.weight", "model.layers.%d.mlp.gate_proj.weight", {"hidden_size", "intermediate_size"}},
    {"blk.%d.ffn_up.weight", "model.layers.%d.mlp.up_proj.weight", {"hidden_size", "intermediate_size"}},
    {"blk.%d.ffn_down.weight", "model.layers.%d.mlp.down_proj.weight", {"intermediate_size", "hidden_size"}},
};

/* Whether name is pattern pat, whose %d (if any) stands for a layer number as llama.cpp writes it (digits, no sign
 * or leading zero, below a million): that number into *layer (-1: none). */
static bool name_is(const char *name, const char *pat, int *layer)
{
    const char *pct = strstr(pat, "%d");
    *layer = -1;
    if (!pct)
        return strcmp(name, pat) == 0;
    const size_t pre = (size_t)(pct - pat);
    if (strncmp(name, pat, pre) != 0)
        return false;
    const char *dig = name + pre;
    int used = 0, l = 0;
    while (dig[used] >= '0' && dig[used] <= '9' && used < 7)
        l = l * 10 + (dig[used++] - '0');
    if (used == 0 || used > 6 || (used > 1 && dig[0] == '0') || strcmp(dig + used, pct + 2) != 0)
        return false;
    *layer = l;
    return true;
}

/* The row of llama_names naming name in the file's names (gguf) or transformers'; -1 when none does. */
static int name_row(const char *name, bool gguf, int *layer)
{
    for (size_t i = 0; i < sizeof llama_names / sizeof llama_names[0]; i++)
        if (name_is(name, gguf ? llama_names[i].gguf : llama_names[i].hf, layer))
            return (int)i;
    return -1;
}

/* The transformers name of GGUF tensor name into out; false when the map has none. *permute: 1 for q, 2 for k
 * (their rows to put back). */
static bool hf_name(const char *name, char *out, size_t n, int *permute)
{
    int layer;
    const int i = name_row(name, true, &layer);
    *permute = 0;
    if (i < 0) {
        snprintf(out, n, "%s", name);
        return false;
    }
    snprintf(out, n, llama_names[i].hf, layer);
    *permute = strstr(llama_names[i].gguf, "attn_q.") ? 1 : strstr(llama_names[i].gguf, "attn_k.") ? 2 : 0;
    return true;
}

bool hp_gguf_tensor_name(const char *hf, char *out, size_t n, int *layer)
{
    const int i = name_row(hf, false, layer);
    if (i < 0)
        snprintf(out, n, "%s", hf);
    else
        snprintf(out, n, llama_names[i].gguf, *layer);
    return i >= 0;
}

/* fmt's text appended to out (n bytes, NUL-terminated), cut at its end. */
static void add(char *out, size_t n, const char *fmt, ...)
{
    const size_t at = strlen(out);
    if (at + 1 >= n)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out + at, n - at, fmt, ap);
    va_end(ap);
}

/* Config keys expr ("num_attention_heads*head_dim") as g's metadata says them, appended to out: "llama.attention.
 * head_count 4 x llama.rope.dimension_count 8"; a key the file leaves out as what stands in for it ("(no
 * llama.attention.head_count_kv: llama.attention.head_count 4)"). */
static void say_keys(const struct hp_gguf *g, const char *expr, char *out, size_t n)
{
    for (const char *p = expr; *p;) {
        const size_t len = strcspn(p, "*/");
        size_t j = 0;
        while (j < N_KEYS && !(llama_keys[j].config && strlen(llama_keys[j].config) == len &&
                               strncmp(llama_keys[j].config, p, len) == 0))
            j++;
        assert(j < N_KEYS); /* llama_names and llama_keys name the same config keys */
        char key[64];
        snprintf(key, sizeof key, "llama.%s", llama_keys[j].key);
        const struct hp_gguf_kv *kv = hp_gguf_find_kv(g, key);
        const struct hp_gguf_tensor *emb = hp_gguf_find_tensor(g, "token_embd.weight");
        double v;
        if (kv && hp_gguf_arr_f64(kv, 0, &v)) {
            add(out, n, "%s %.17g", key, v);
        } else if (llama_keys[j].absent) {
            add(out, n, "(no %s: ", key);
            say_keys(g, llama_keys[j].absent, out, n);
            add(out, n, ")");
        } else if (strcmp(llama_keys[j].config, "vocab_size") == 0 && emb && emb->n_dims == 2) {
            add(out, n, "(no %s: the %" PRId64 " rows of token_embd.weight)", key, emb->ne[1]);
        } else {
            add(out, n, "no %s", key);
        }
        p += len;
        if (*p)
            add(out, n, *p++ == '*' ? " x " : " / ");
    }
}

void hp_gguf_meta_says(const struct hp_gguf *g, const char *expr, char *out, size_t n)
{
    out[0] = '\0';
    say_keys(g, expr, out, n);
}

void hp_gguf_sizes(const struct hp_gguf *g, const char *hf, char *out, size_t n)
{
    int layer;
    const int i = name_row(hf, false, &layer);
    out[0] = '\0';
    for (int d = 0; i >= 0 && d < 2 && llama_names[i].ne[d]; d++) {
        if (d)
            add(out, n, "; ");
        say_keys(g, llama_names[i].ne[d], out, n);
    }
}

/* A scalar of the file's as a JSON number (f32 values as the double they are, as gguf-py reads them). */
static enum hp_status kv_number(const struct hp_gguf *g, const char *path, const struct hp_gguf_kv *kv, double *out,
                                struct hp_error *err)
{
    if (kv->type == HP_GGUF_V_F32 || kv->type == HP_GGUF_V_F64) {
        enum hp_status st = hp_gguf_get_f64(g, kv->key, out, NULL, err);
        if (st == HP_OK && !isfinite(*out)) /* JSON has no such number: it would read as absent, the default */
            return hp_fail(err, HP_ERR_FORMAT, "%s: metadata \"%s\" is %g, not a finite number", path, kv->key, *out);
        return st;
    }
    int64_t v;
    enum hp_status st = hp_gguf_get_i64(g, kv->key, &v, NULL, err);
    *out = (double)v;
    return st;
}

/* The llama.* metadata into cfg, refusing keys this does not read. */
static enum hp_status llama_config(const struct hp_gguf *g, const char *path, cJSON *cfg, struct hp_error *err)
{
    for (int64_t i = 0; i < hp_gguf_kv_count(g); i++) {
        const struct hp_gguf_kv *kv = hp_gguf_kv_at(g, i);
        if (strncmp(kv->key, "llama.", 6) != 0)
            continue; /* general.*, tokenizer.*: nothing the model computes */
        const char *k = kv->key + 6;
        size_t j = 0;
        while (j < N_KEYS && strcmp(llama_keys[j].key, k) != 0)
            j++;
        if (j == N_KEYS)
            return hp_fail(err, HP_ERR_UNSUPPORTED,
                           "%s: metadata \"%s\" is not supported (headprune reads a llama GGUF's sizes, norm epsilon, "
                           "rotary base and head size; rope scaling, experts and the rest are refused)",
                           path, kv->key);
        double v;
        enum hp_status st = kv_number(g, path, kv, &v, err);
        if (st != HP_OK)
            return st;
        if (llama_keys[j].config)
            cJSON_AddNumberToObject(cfg, llama_keys[j].config, v);
    }
    /* a head's keys and values as wide as its queries (the head size), as transformers assumes */
    const cJSON *hd = cJSON_GetObjectItem(cfg, "head_dim"), *hs = cJSON_GetObjectItem(cfg, "hidden_size"),
                *nh = cJSON_GetObjectItem(cfg, "num_attention_heads");
    const double head = hd ? hd->valuedouble : hs && nh && nh->valuedouble > 0 ? hs->valuedouble / nh->valuedouble : 0;
    static const char *const widths[] = {"llama.attention.key_length", "llama.attention.value_length"};
    for (int w = 0; w < 2; w++) {
        uint32_t v;
        bool found;
        enum hp_status st = hp_gguf_get_u32(g, widths[w], &v, &found, err);
        if (st != HP_OK)
            return st;
        if (found && v != head)
            return hp_fail(err, HP_ERR_UNSUPPORTED, "%s: \"%s\" %" PRIu32 " differs from the head size %g", path,
                           widths[w], v, head);
    }
    cJSON_AddStringToObject(cfg, "model_type", "llama");
    cJSON_AddStringToObject(cfg, "hidden_act", "silu");
    return HP_OK;
}

/* A q or k projection's rows x cols in llama.cpp's order over heads: two half rows a head to put back (rows 0 or
 * cols 0: nothing to put back; heads may say anything then, and the binder checks the shape). key: the config key
 * of the head count, for the message. */
static enum hp_status check_permute(const struct hp_gguf *g, int64_t rows, int64_t cols, int64_t heads,
                                    const char *key, const char *path, const char *name, struct hp_error *err)
{
    if (rows == 0 || cols == 0 || (heads >= 1 && rows % (2 * heads) == 0))
        return HP_OK;
    char says[256];
    hp_gguf_meta_says(g, key, says, sizeof says);
    return hp_fail(err, HP_ERR_SHAPE, "%s: tensor '%s' has %" PRId64 " rows, not two per head of %" PRId64 " (%s)",
                   path, name, rows, heads, says);
}

/* The tensors' names, shapes and sizes as a safetensors file writes them (names into names, 256 bytes each), and
 * which are q or k (permute: hf_name's). */
static enum hp_status tensor_outs(const struct hp_gguf *g, const char *path, struct hp_st_out *o, char *names,
                                  int *permute, struct hp_error *err)
{
    for (int64_t i = 0; i < hp_gguf_tensor_count(g); i++) {
        const struct hp_gguf_tensor *t = hp_gguf_tensor_at(g, i);
        if (t->n_dims < 1 || t->n_dims > 2)
            return hp_fail(err, HP_ERR_SHAPE, "%s: tensor '%s' has %d dimensions (1 or 2 expected)", path, t->name,
                           t->n_dims);
        if (!hp_gguf_type_info(t->type)->to_f32)
            return hp_fail(err, HP_ERR_UNSUPPORTED, "%s: tensor '%s' is of type %s, which headprune cannot dequantize",
                           path, t->name, hp_gguf_type_info(t->type)->name);
        char *name = names + (size_t)i * 256;
        if (!hf_name(t->name, name, 256, &permute[i])) /* rope_freqs, experts, a transformers name ...: not llama's */
            return hp_fail(err, HP_ERR_UNSUPPORTED,
                           "%s: tensor '%.100s' is not one a llama GGUF holds (token_embd, output_norm, output, "
                           "blk.N.attn_norm / attn_q / attn_k / attn_v / attn_output / ffn_norm / ffn_gate / ffn_up / "
                           "ffn_down)", path, t->name);
        o[i] = (struct hp_st_out){name, "F32", t->n_dims, {0}, (size_t)t->nel * sizeof(float)};
        o[i].shape[0] = t->n_dims == 2 ? t->ne[1] : t->ne[0];
        o[i].shape[1] = t->n_dims == 2 ? t->ne[0] : 0;
    }
    return HP_OK;
}

/* The file's vectors in f32 one after another at data, as the header lists them. */
static enum hp_status vector_data(const struct hp_gguf *g, const struct hp_st_out *o, char *data,
                                  struct hp_error *err)
{
    for (int64_t i = 0; i < hp_gguf_tensor_count(g); i++) {
        const struct hp_gguf_tensor *t = hp_gguf_tensor_at(g, i);
        if (t->n_dims != 1)
            continue;
        enum hp_status st = hp_gguf_tensor_dequant(g, t, (float *)data, err);
        if (st != HP_OK)
            return st;
        data += o[i].nbytes;
    }
    return HP_OK;
}

/*
 * Matrix t of file g, named name, as a view of the file's bytes (*v, for hp_st_add_views): as stored when F32,
 * F16 or BF16 in its order, else as quantized rows that *q describes (permute: hf_name's, 1 for q, 2 for k; heads:
 * query and KV heads).
 */
static enum hp_status matrix_view(const struct hp_gguf *g, const struct hp_gguf_tensor *t, const char *name,
                                  int permute, const int64_t heads[2], struct hp_qrows *q, struct hp_st_tensor *v,
                                  const char *path, struct hp_error *err)
{
    const struct hp_gguf_type_info *ti = hp_gguf_type_info(t->type);
    const int64_t rows = t->ne[1], cols = t->ne[0];
    /* hp_st_add_views's rule, checked here to name the file's own tensor */
    if (!hp_st_shape_ok(2, (const int64_t[]){rows, cols}))
        return hp_fail(err, HP_ERR_FORMAT, "%s: tensor '%s' has an invalid shape [%lld, %lld]", path, t->name,
                       (long long)cols, (long long)rows);
    *v = (struct hp_st_tensor){.name = (char *)name, .n_dims = 2, .shape = {rows, cols}, .data = t->data,
                               .nbytes = t->nbytes};
    snprintf(v->dtype_name, sizeof v->dtype_name, "%s", ti->name);
    const bool moved = permute && rows > 0 && cols > 0;
    if (moved) {
        static const char *const key[] = {"num_attention_heads", "num_key_value_heads"};
        enum hp_status st = check_permute(g, rows, cols, heads[permute - 1], key[permute - 1], path, t->name, err);
        if (st != HP_OK)
            return st;
    }
    static const enum hp_gguf_type plain[] = {HP_GGUF_F32, HP_GGUF_F16, HP_GGUF_BF16};
    static const enum hp_dtype as[] = {HP_DT_F32, HP_DT_F16, HP_DT_BF16};
    for (int k = 0; k < 3 && !moved; k++)
        if (t->type == plain[k]) { /* as a safetensors tensor of that dtype, in the mapping */
            v->dtype = as[k];
            v->esize = ti->block_bytes;
            return HP_OK;
        }
    assert(ti->block_size <= HP_QBLOCK_MAX && cols % ti->block_size == 0); /* the reader checked ne[0] */
    *q = (struct hp_qrows){t->data, rows, cols, (size_t)(cols / ti->block_size) * (size_t)ti->block_bytes,
                           ti->block_size, ti->block_bytes, ti->to_f32, moved ? heads[permute - 1] : 0};
    v->dtype = HP_DT_Q;
    v->q = q;
    return HP_OK;
}

/* The file's vectors (o: tensor_outs') as a safetensors file in memory, header and f32 data: *buf (malloc'd),
 * *len bytes. */
static enum hp_status vector_file(const struct hp_gguf *g, const char *path, const struct hp_st_out *o, void **buf,
                                  size_t *len, struct hp_error *err)
{
    const int64_t n = hp_gguf_tensor_count(g);
    struct hp_st_out *vo = calloc((size_t)(n ? n : 1), sizeof *vo);
    int nv = 0;
    size_t data = 0;
    for (int64_t i = 0; vo && i < n; i++)
        if (hp_gguf_tensor_at(g, i)->n_dims == 1) {
            vo[nv++] = o[i];
            data += o[i].nbytes;
        }
    char *hdr = NULL, *b = NULL;
    size_t hlen = 0;
    FILE *mem = vo ? open_memstream(&hdr, &hlen) : NULL;
    enum hp_status st = mem ? hp_st_write_header(mem, path, vo, nv, err)
                            : hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
    if (mem && fclose(mem) != 0 && st == HP_OK)
        st = hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
    if (st == HP_OK && !(b = malloc(hlen + data)))
        st = hp_fail(err, HP_ERR_NOMEM, "%s: out of memory for the vectors (%zu bytes)", path, hlen + data);
    if (st == HP_OK) {
        memcpy(b, hdr, hlen);
        st = vector_data(g, o, b + hlen, err);
    }
    free(hdr);
    free(vo);
    if (st != HP_OK) {
        free(b);
        return st;
    }
    *buf = b;
    *len = hlen + data;
    return HP_OK;
}

/* The config's query and KV heads (heads[0], heads[1]: the KV heads are the query heads when not given, as
 * llama.cpp takes them). */
static void head_counts(const cJSON *cfg, int64_t heads[2])
{
    const cJSON *qh = cJSON_GetObjectItem(cfg, "num_attention_heads"),
                *kvh = cJSON_GetObjectItem(cfg, "num_key_value_heads");
    heads[0] = qh ? (int64_t)qh->valuedouble : 0;
    heads[1] = kvh ? (int64_t)kvh->valuedouble : heads[0];
}

enum hp_status hp_gguf_checkpoint(const char *path, struct hp_gguf_ckpt *out, struct hp_error *err)
{
    memset(out, 0, sizeof *out);
    struct hp_gguf *g = NULL;
    enum hp_status st = hp_gguf_open(path, &g, err);
    if (st != HP_OK)
        return st;
    struct hp_gguf_str arch;
    cJSON *cfg = cJSON_CreateObject();
    const int64_t n = hp_gguf_tensor_count(g);
    struct hp_st_out *o = calloc((size_t)(n ? n : 1), sizeof *o);
    char *names = calloc((size_t)(n ? n : 1), 256);
    int *permute = calloc((size_t)(n ? n : 1), sizeof *permute);
    struct hp_qrows *q = calloc((size_t)(n ? n : 1), sizeof *q);
    struct hp_st_tensor *views = calloc((size_t)(n ? n : 1), sizeof *views);
    if (!cfg || !o || !names || !permute || !q || !views)
        st = hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
    if (st == HP_OK)
        st = hp_gguf_get_str(g, "general.architecture", &arch, NULL, err);
    if (st == HP_OK && !(arch.len == 5 && memcmp(arch.p, "llama", 5) == 0))
        st = hp_fail(err, HP_ERR_UNSUPPORTED, "%s: GGUF architecture \"%.*s\" is not supported (llama)", path,
                     (int)(arch.len < 40 ? arch.len : 40), arch.p);
    if (st == HP_OK)
        st = llama_config(g, path, cfg, err);
    if (st == HP_OK)
        st = tensor_outs(g, path, o, names, permute, err);
    /* the embedding's rows are the vocabulary; no output.weight: the head is the embedding */
    const struct hp_gguf_tensor *emb = st == HP_OK ? hp_gguf_find_tensor(g, "token_embd.weight") : NULL;
    if (st == HP_OK && (!emb || emb->n_dims != 2))
        st = hp_fail(err, HP_ERR_SHAPE, "%s: no 2-D tensor 'token_embd.weight' (the token embedding)", path);
    const cJSON *vs = st == HP_OK ? cJSON_GetObjectItem(cfg, "vocab_size") : NULL;
    if (st == HP_OK && vs && vs->valuedouble != (double)emb->ne[1])
        st = hp_fail(err, HP_ERR_SHAPE, "%s: \"llama.vocab_size\" %g differs from the %" PRId64 " rows of tensor "
                     "'token_embd.weight'", path, vs->valuedouble, emb->ne[1]);
    if (st == HP_OK) {
        if (!vs)
            cJSON_AddNumberToObject(cfg, "vocab_size", (double)emb->ne[1]);
        cJSON_AddBoolToObject(cfg, "tie_word_embeddings", !hp_gguf_find_tensor(g, "output.weight"));
    }
    void *buf = NULL;
    size_t len = 0;
    struct hp_st_set *set = NULL;
    if (st == HP_OK)
        st = vector_file(g, path, o, &buf, &len, err);
    if (st == HP_OK)
        st = hp_st_open_buffer(path, buf, len, &set, err);
    int64_t heads[2];
    int nv = 0;
    head_counts(cfg, heads);
    for (int64_t i = 0; st == HP_OK && i < n; i++) {
        const struct hp_gguf_tensor *t = hp_gguf_tensor_at(g, i);
        if (t->n_dims == 2)
            st = matrix_view(g, t, names + (size_t)i * 256, permute[i], heads, &q[i], &views[nv++], path, err);
    }
    if (st == HP_OK)
        st = hp_st_add_views(set, views, nv, err);
    char *config = st == HP_OK ? cJSON_PrintUnformatted(cfg) : NULL;
    if (st == HP_OK && !config)
        st = hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
    free(views);
    free(permute);
    free(names);
    free(o);
    cJSON_Delete(cfg);
    if (st != HP_OK) {
        hp_st_close(set);
        free(buf);
        free(q);
        hp_gguf_close(g);
        return st;
    }
    *out = (struct hp_gguf_ckpt){config, set, buf, q, g};
    return HP_OK;
}

enum hp_status hp_gguf_find(const char *dir, char **out, struct hp_error *err)
{
    *out = NULL;
    struct stat sb;
    const size_t n = strlen(dir);
    const bool named_gguf = n > 5 && strcmp(dir + n - 5, ".gguf") == 0;
    if (stat(dir, &sb) != 0)
        /* a missing folder is said by its config.json below; a missing .gguf file by its own name */
        return named_gguf ? hp_fail(err, HP_ERR_IO, "%s: cannot open (%s)", dir, strerror(errno)) : HP_OK;
    if (S_ISREG(sb.st_mode))
        return named_gguf ? hp_path_make(out, err, "%s", dir)
                          : hp_fail(err, HP_ERR_ARG, "%s: a file, not a model folder or a .gguf file", dir);
    char *cfg;
    enum hp_status st = hp_path_make(&cfg, err, "%s/config.json", dir);
    if (st != HP_OK)
        return st;
    const bool has_cfg = access(cfg, F_OK) == 0;
    free(cfg);
    DIR *d = has_cfg ? NULL : opendir(dir);
    if (!d)
        return HP_OK;
    int found = 0;
    for (struct dirent *e; (e = readdir(d)) && st == HP_OK;) {
        const size_t k = strlen(e->d_name);
        if (k <= 5 || strcmp(e->d_name + k - 5, ".gguf") != 0)
            continue;
        if (found++) {
            st = hp_fail(err, HP_ERR_ARG, "%s: more than one .gguf file (%s, %s, ...): name the one to open", dir,
                         strrchr(*out, '/') + 1, e->d_name);
            free(*out);
            *out = NULL;
        } else {
            st = hp_path_make(out, err, "%s/%s", dir, e->d_name);
        }
    }
    closedir(d);
    return st;
}
