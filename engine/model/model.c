/*
 * model.c -- open a Hugging Face model directory and bind its weights.
 *
 * Reads config.json (cJSON), maps model.safetensors or the shards named by
 * model.safetensors.index.json, and points every layer weight at its tensor:
 * matrices in place in their stored dtype (f32, f16 or bf16: mat.h says
 * how products read them), so the model takes about its stored size in
 * memory; vectors (norms, biases) as f32, converted once when stored 16-bit.
 * A GGUF file (gguf_model.c) is such a set too, its matrices in their
 * quantized blocks (HP_DT_Q), kept mapped as long as the model.
 * HP_MODEL_CONVERT converts 16-bit and quantized matrices at load too, the
 * path before they were streamed, kept for the tests to compare with.
 * Invariant: after hp_model_open succeeds every pointer the forward pass
 * uses is valid and has the shape the config implies; every tensor of the
 * files was read or is a known buffer (harmless()), and every config.json
 * key that changes transformers' maths was honoured or refused
 * (config_keys.c): a checkpoint is never run as a model without some of it.
 * Must not: compute anything but conversions; print; exit.
 */
#define _POSIX_C_SOURCE 200809L
#include "model.h"

#include <assert.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"
#include "json.h"
#include "model_priv.h"
#include "util.h"

// --- reading files ----------------------------------------------------------

/* Parse a JSON file; the text is handed back through keep_text when non-NULL. */
static enum hp_status read_json(const char *path, cJSON **out, char **keep_text, struct hp_error *err)
{
    char *txt;
    size_t len;
    enum hp_status st = hp_read_text(path, (size_t)64 << 20, HP_ERR_FORMAT, "a JSON file", &txt, &len, err);
    if (st != HP_OK)
        return st;
    const char *at = NULL;
    cJSON *j;
    if ((st = hp_json_parse(path, 1, txt, len, &at, &j, err)) != HP_OK) {
        free(txt);
        return st;
    }
    /* after the value only whitespace may follow, up to the real end of the
     * file (a NUL byte among it too is not whitespace) */
    bool trailing = false;
    if (j) {
        while (at < txt + len && (*at == ' ' || *at == '\t' || *at == '\n' || *at == '\r'))
            at++;
        trailing = at != txt + len;
    }
    if (!j || trailing) {
        int line = 1;
        for (const char *c = txt; at && c < at && c < txt + len; c++)
            line += *c == '\n';
        cJSON_Delete(j);
        free(txt);
        return hp_fail(err, HP_ERR_FORMAT, "%s:%d: %s", path, line,
                       trailing ? "text after the JSON value (one JSON object per file)" : "malformed JSON");
    }
    if (keep_text)
        *keep_text = txt;
    else
        free(txt);
    *out = j;
    return HP_OK;
}


struct cfg;
struct binder;

/*
 * One row per architecture (archs, below the binders): everything model.c does
 * differently for it. A new architecture is its value in enum hp_arch
 * (headprune.h), its config function (model_config.c) and bind function here, its row, its keys in
 * config_keys.c and the flags its passes test (m->rotary, m->post_norm, ...:
 * model.h); docs/extending.md walks through it.
 */
struct arch_row { /* the model_type values that name it: model.h's HP_MODEL_TYPES */
    const char *k_heads, *k_hidden;   /* its keys for the head count and the hidden size, for messages */
    /* config.json (model_type mt) into m's info and flags and o, naming its activation in *act */
    enum hp_status (*config)(struct cfg *c, struct hp_model *m, const char *mt, struct bind_opts *o, const char **act);
    const char *const *prefixes;      /* what its tensor names may start with, tried in order; NULL-terminated */
    void (*bind)(struct binder *b, const struct bind_opts *o); /* every weight, by name and shape */
    const char *const *harmless;      /* buffers beside the weights it computes nothing from (harmless()) */
    const char *name;                 /* for people: "GPT-2" (hp_arch_name) */
    enum hp_hf_prune hf_prune;        /* how transformers reads it with heads removed (export.c) */
};

static const struct arch_row *arch_named(const char *model_type);
static const struct arch_row *arch_row(enum hp_arch a);
static void arch_types(char *buf, size_t n);

static enum hp_status parse_config(struct hp_model *m, cJSON *j, const char *path, struct bind_opts *o,
                                   struct hp_error *err)
{
    struct cfg c = {path, j, err, HP_OK};
    struct hp_model_info *in = &m->info;
    const char *mt = hp_cfg_str(&c, "model_type", NULL);
    if (!mt)
        return c.st != HP_OK ? c.st : hp_fail(err, HP_ERR_FORMAT, "%s: missing \"model_type\"", path);
    snprintf(in->model_type, sizeof in->model_type, "%s", mt);
    const char *act = NULL;
    *o = (struct bind_opts){0};
    const struct arch_row *row = arch_named(mt);
    if (!row) {
        char types[256];
        arch_types(types, sizeof types);
        return hp_fail(err, HP_ERR_UNSUPPORTED, "%s: model_type \"%s\" is not supported (%s)", path, mt, types);
    }
    /* the keys naming the head count and the hidden size, for messages */
    const char *k_heads = row->k_heads, *k_hidden = row->k_hidden;
    enum hp_status st = row->config(&c, m, mt, o, &act);
    if (st != HP_OK)
        return st;
    if (c.st != HP_OK)
        return c.st;
    /* the keys that change transformers' maths and headprune implements only at their defaults (every model_type
     * has its table: config_keys.c's is made from HP_MODEL_TYPES) */
    enum hp_status ast = hp_config_audit(mt, j, path, err);
    if (ast != HP_OK)
        return ast;
    /* A checkpoint headprune pruned names its original grid: for Llama, whose
     * config then counts only the heads left when Hugging Face can load it. */
    const cJSON *rec = hp_cfg_get(j, "headprune");
    if (rec && !cJSON_IsNull(rec)) {
        if (!cJSON_IsObject(rec))
            return hp_fail(err, HP_ERR_FORMAT, "%s: \"headprune\" must be an object", path);
        struct cfg rc = {path, (cJSON *)rec, err, HP_OK};
        int h = hp_cfg_int(&rc, "n_heads", -1, CFG_MAX_COUNT), kv = hp_cfg_int(&rc, "n_kv_heads", h, CFG_MAX_COUNT);
        if (rc.st != HP_OK)
            return rc.st;
        if (in->arch != HP_ARCH_LLAMA && h != in->n_heads)
            return hp_fail(err, HP_ERR_FORMAT, "%s: \"headprune\".\"n_heads\" %d differs from \"%s\" %d", path, h,
                           k_heads, in->n_heads);
        if (in->arch != HP_ARCH_LLAMA && kv != in->n_heads)
            return hp_fail(err, HP_ERR_FORMAT,
                           "%s: \"headprune\".\"n_kv_heads\" %d differs from \"%s\" %d (a %s model has one key/value "
                           "head per query head)", path, kv, k_heads, in->n_heads, mt);
        in->n_heads = h;
        in->n_kv_heads = kv;
    }
    /* Llama may give head_dim; otherwise it is its configuration class's (Qwen3's 128, Gemma's 256), or
     * hidden / heads, which must not round to 0 */
    int dh_def = o->head_dim_def > 0 ? o->head_dim_def : in->d_model / in->n_heads;
    bool has_head_dim = in->arch == HP_ARCH_LLAMA && hp_cfg_get(j, "head_dim") && !cJSON_IsNull(hp_cfg_get(j, "head_dim"));
    in->d_head = has_head_dim ? hp_cfg_int(&c, "head_dim", -1, CFG_MAX_DIM) : dh_def;
    if (c.st != HP_OK)
        return c.st;
    if (in->d_head < 1)
        return hp_fail(err, HP_ERR_SHAPE, "%s: \"%s\" %d is smaller than \"%s\" %d (each head would have no width)",
                       path, k_hidden, in->d_model, k_heads, in->n_heads);
    if (in->arch != HP_ARCH_LLAMA && in->d_model % in->n_heads != 0)
        return hp_fail(err, HP_ERR_SHAPE, "%s: hidden size %d is not divisible by %d heads", path, in->d_model, in->n_heads);
    if (in->n_heads % in->n_kv_heads != 0)
        return hp_fail(err, HP_ERR_SHAPE, "%s: %d query heads are not a multiple of %d key/value heads", path,
                       in->n_heads, in->n_kv_heads);
    /* the dimensions rotary turns: all of a head's, or GPT-NeoX's int(head size * rotary_pct) */
    m->rope.dim = o->rotary_pct > 0 ? (int)(in->d_head * o->rotary_pct) : in->d_head;
    m->rope_local.dim = m->rope.dim;
    if (m->rotary && o->rotary_pct > 0 && (m->rope.dim < 2 || m->rope.dim % 2 != 0))
        return hp_fail(err, HP_ERR_SHAPE,
                       "%s: rotary_pct %g of head size %d turns %d dimensions; rotary embeddings need an even number, "
                       "at least 2", path, o->rotary_pct, in->d_head, m->rope.dim);
    if (m->rotary && in->d_head % 2 != 0)
        return hp_fail(err, HP_ERR_SHAPE, "%s: head size %d is odd; rotary embeddings need it even", path, in->d_head);
    /* the attention widths the weights and the forward buffers are sized by */
    hp_cfg_width(&c, k_heads, in->n_heads, has_head_dim || o->head_dim_def ? "head_dim" : "head size", in->d_head);
    if (c.st != HP_OK)
        return c.st;
    return hp_cfg_act(&c, act, &m->act);
}

// --- pruned heads -----------------------------------------------------------

/* One "pruned_heads" object {"layer": [head, ...]} into m->pruned (set semantics, as Hugging Face reads it). */
static enum hp_status read_pruned(struct hp_model *m, const cJSON *obj, const char *path, const char *key,
                                  uint8_t *into, struct hp_error *err)
{
    const struct hp_model_info *in = &m->info;
    if (!cJSON_IsObject(obj))
        return hp_fail(err, HP_ERR_FORMAT, "%s: \"%s\" must be an object of layer: [heads]", path, key);
    const cJSON *e;
    cJSON_ArrayForEach(e, obj)
    {
        char *end;
        errno = 0;
        long l = strtol(e->string, &end, 10);
        if (!*e->string || *end || errno || l < 0 || l >= in->n_layers)
            return hp_fail(err, HP_ERR_FORMAT, "%s: \"%s\": layer \"%s\" is not one of 0..%d", path, key, e->string,
                           in->n_layers - 1);
        if (!cJSON_IsArray(e))
            return hp_fail(err, HP_ERR_FORMAT, "%s: \"%s\": layer %ld must list heads", path, key, l);
        const cJSON *h;
        cJSON_ArrayForEach(h, e)
        {
            if (!cJSON_IsNumber(h) || !(h->valuedouble >= 0 && h->valuedouble < in->n_heads) ||
                h->valuedouble != floor(h->valuedouble))
                return hp_fail(err, HP_ERR_FORMAT, "%s: \"%s\": layer %ld lists a head that is not one of 0..%d", path,
                               key, l, in->n_heads - 1);
            into[l * in->n_heads + (int)h->valuedouble] = 1;
        }
    }
    return HP_OK;
}

/*
 * The heads the checkpoint lacks, from Hugging Face's "pruned_heads" (GPT-2,
 * BERT) and headprune's record (every architecture); when both are given
 * they must agree.
 */
static enum hp_status parse_pruned(struct hp_model *m, const cJSON *j, const char *path, struct hp_error *err)
{
    struct hp_model_info *in = &m->info;
    const size_t n = (size_t)in->n_layers * in->n_heads;
    const cJSON *hf = hp_cfg_get(j, "pruned_heads"), *rec = hp_cfg_get(j, "headprune");
    const cJSON *own = cJSON_IsObject(rec) ? hp_cfg_get(rec, "pruned_heads") : NULL;
    bool has_hf = hf && !cJSON_IsNull(hf) && !(cJSON_IsObject(hf) && !hf->child);
    bool has_own = own && !cJSON_IsNull(own);
    if (!has_hf && !has_own)
        return HP_OK;
    if (has_hf && in->arch == HP_ARCH_LLAMA)
        return hp_fail(err, HP_ERR_UNSUPPORTED,
                       "%s: \"pruned_heads\" is Hugging Face's for GPT-2 and BERT only (a pruned %s names its heads in "
                       "the \"headprune\" record)", path, in->model_type);
    uint8_t *a = calloc(n, 1), *b = calloc(n, 1);
    enum hp_status st = a && b ? HP_OK : hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
    if (st == HP_OK && has_hf)
        st = read_pruned(m, hf, path, "pruned_heads", a, err);
    if (st == HP_OK && has_own)
        st = read_pruned(m, own, path, "headprune.pruned_heads", has_hf ? b : a, err);
    if (st == HP_OK && has_hf && has_own && memcmp(a, b, n) != 0)
        st = hp_fail(err, HP_ERR_FORMAT, "%s: \"pruned_heads\" and the headprune record name different heads", path);
    free(b);
    if (st != HP_OK) {
        free(a);
        return st;
    }
    m->pruned = a;
    in->pruned = a;
    for (size_t i = 0; i < n; i++)
        in->n_pruned += a[i];
    return HP_OK;
}

/* Each layer's slot tables and head counts, from m->pruned (NULL: every head in place). */
static enum hp_status make_slots(struct hp_model *m, struct hp_error *err)
{
    const struct hp_model_info *in = &m->info;
    const int H = in->n_heads, KV = in->n_kv_heads, per_kv = H / KV;
    m->slots = malloc((size_t)in->n_layers * (H + KV) * sizeof *m->slots);
    if (!m->slots)
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", m->dir);
    for (int l = 0; l < in->n_layers; l++) {
        struct hp_layer *L = &m->layers[l];
        int *q = m->slots + (size_t)l * (H + KV), *kv = q + H;
        L->q_slot = q;
        L->kv_slot = kv;
        L->n_q = L->n_kv = 0;
        for (int h = 0; h < H; h++)
            q[h] = m->pruned && m->pruned[l * H + h] ? -1 : L->n_q++;
        for (int g = 0; g < KV; g++) {
            bool any = false;
            for (int h = g * per_kv; h < (g + 1) * per_kv; h++)
                any |= q[h] >= 0;
            kv[g] = any ? L->n_kv++ : -1;
        }
    }
    return HP_OK;
}

// --- binding weights --------------------------------------------------------

static const char *dtype_label(enum hp_dtype dt)
{
    /* a GGUF matrix reads as the f32 it dequantizes to (hp_model_info.dtype) */
    return dt == HP_DT_F32 || dt == HP_DT_Q ? "f32" : dt == HP_DT_F16 ? "f16" : dt == HP_DT_BF16 ? "bf16" : "?";
}

static enum hp_status keep_owned(struct hp_model *m, void *p, struct hp_error *err)
{
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? m->cap_owned * 2 : 32;
        void **q = realloc(m->owned, (size_t)cap * sizeof *q);
        if (!q) {
            free(p);
            return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", m->dir);
        }
        m->owned = q;
        m->cap_owned = cap;
    }
    m->owned[m->n_owned++] = p;
    return HP_OK;
}

struct binder {
    struct hp_model *m;
    const char *const *prefixes; /* tried in order; NULL-terminated */
    struct hp_error *err;
    enum hp_status st;
    struct hp_st_tensor *last; /* the tensor the last bind bound; NULL if none */
};

/* Find a tensor under any of the prefixes. */
static struct hp_st_tensor *lookup(struct binder *b, const char *name)
{
    char full[256];
    for (const char *const *p = b->prefixes; *p; p++) {
        snprintf(full, sizeof full, "%s%s", *p, name);
        struct hp_st_tensor *t = hp_st_find(b->m->st, full);
        if (t)
            return t;
    }
    return NULL;
}

#define VEC (-1) /* d1 of a vector: one dimension (a pruned layer's matrices may have a 0 dimension) */

/*
 * A GGUF model's messages speak of the file, not of the transformers names and config.json it was opened as
 * (gguf_model.c's tables, read back): tensor hf as the file names it into name and, into why, what of the metadata
 * asks for it: its dimensions' keys (shape), else its block's count ("" for a tensor of no block).
 */
static void gguf_terms(const struct hp_model *m, const char *hf, bool shape, char name[256], char why[256])
{
    int layer;
    hp_gguf_tensor_name(hf, name, 256, &layer);
    why[0] = '\0';
    if (shape) {
        hp_gguf_sizes(m->gguf, hf, why, 256);
    } else if (layer >= 0) {
        char count[128], range[64];
        hp_gguf_meta_says(m->gguf, "num_hidden_layers", count, sizeof count);
        hp_range_text(range, sizeof range, "blocks", "block", m->info.n_layers);
        snprintf(why, 256, "%s: %s", count, range);
    }
}

/*
 * Find and check a tensor of the given shape (d0, d1; d1 = VEC for vectors):
 * NULL when absent (an optional one) or wrong (b->st set). Counts its
 * parameters once.
 */
static struct hp_st_tensor *find(struct binder *b, const char *name, int64_t d0, int64_t d1, bool optional)
{
    b->last = NULL;
    if (b->st != HP_OK)
        return NULL;
    struct hp_st_tensor *t = lookup(b, name);
    char file[256], why[256];
    if (!t && !optional && b->m->gguf) {
        char full[256];
        snprintf(full, sizeof full, "%s%s", b->prefixes[0], name);
        gguf_terms(b->m, full, false, file, why);
        b->st = hp_fail(b->err, HP_ERR_SHAPE, "%s: tensor '%s' is missing (%s)", hp_gguf_name(b->m->gguf), file,
                        why[0] ? why : "every llama GGUF holds it");
    } else if (!t && !optional) {
        b->st = hp_fail(b->err, HP_ERR_SHAPE, "%s: tensor '%s%s' is missing (checkpoint incomplete or not a %s model)",
                        b->m->dir, b->prefixes[0], name, b->m->info.model_type);
    }
    if (!t)
        return NULL;
    int nd = d1 != VEC ? 2 : 1;
    if (t->n_dims != nd || t->shape[0] != d0 || (nd == 2 && t->shape[1] != d1)) {
        const bool gg = b->m->gguf != NULL; /* in ggml's order (ne[0] first), as the file and its tools give it */
        char got[128] = "", want[64];
        size_t off = 0;
        for (int i = 0; i < t->n_dims && off < sizeof got - 24; i++)
            off += (size_t)snprintf(got + off, sizeof got - off, "%s%lld", i ? ", " : "",
                                    (long long)t->shape[gg ? t->n_dims - 1 - i : i]);
        if (nd == 2)
            snprintf(want, sizeof want, "%lld, %lld", (long long)(gg ? d1 : d0), (long long)(gg ? d0 : d1));
        else
            snprintf(want, sizeof want, "%lld", (long long)d0);
        if (gg) {
            gguf_terms(b->m, t->name, true, file, why);
            b->st = hp_fail(b->err, HP_ERR_SHAPE, "%s: tensor '%s' has shape [%s] but the metadata implies [%s] (%s)",
                            t->file, file, got, want, why);
        } else {
            b->st = hp_fail(b->err, HP_ERR_SHAPE, "%s: tensor '%s' has shape [%s] but config.json implies [%s]",
                            t->file, t->name, got, want);
        }
        return NULL;
    }
    if (t->dtype == HP_DT_OTHER) {
        b->st = hp_fail(b->err, HP_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s (F32, F16 or BF16 expected)", t->file,
                        t->name, t->dtype_name);
        return NULL;
    }
    /* the checkpoint's spans were checked against dtype x shape when it was mapped (safetensors.c; a GGUF
     * matrix's by the reader, in blocks) */
    assert(t->dtype == HP_DT_Q || t->nbytes == (size_t)(d0 * (d1 != VEC ? d1 : 1)) * (size_t)t->esize);
    if (!t->used)
        b->m->info.n_params += d0 * (d1 != VEC ? d1 : 1);
    if (b->m->info.dtype[0] == '\0')
        snprintf(b->m->info.dtype, sizeof b->m->info.dtype, "%s", dtype_label(t->dtype));
    t->used = true;
    b->last = t;
    return t;
}

/* t's n elements as an owned f32 copy (NULL and b->st set when out of memory). */
static float *owned_f32(struct binder *b, const struct hp_st_tensor *t, size_t n)
{
    float *f = malloc(n * sizeof *f);
    if (!f) {
        b->st = hp_fail(b->err, HP_ERR_NOMEM, "%s: out of memory converting '%s'", t->file, t->name);
        return NULL;
    }
    hp_mat_tensor_f32(t, f);
    b->st = keep_owned(b->m, f, b->err);
    return b->st == HP_OK ? f : NULL;
}

/*
 * Bind a vector (d0), or a tensor of shape (d0, d1) read as plain f32: in
 * place when stored f32 and aligned, else converted once into an owned
 * buffer. Optional tensors return NULL when absent; required ones set b->st.
 */
static const float *bind(struct binder *b, const char *name, int64_t d0, int64_t d1, bool optional)
{
    struct hp_st_tensor *t = find(b, name, d0, d1, optional);
    if (!t)
        return NULL;
    size_t n = (size_t)(d0 * (d1 != VEC ? d1 : 1));
    static const float empty[1];
    if (n == 0)
        return empty; /* a pruned layer's bias with no heads: never read */
    if (t->dtype == HP_DT_F32 && ((uintptr_t)t->data % sizeof(float)) == 0)
        return t->data; /* in place, in the mapping */
    return owned_f32(b, t, n);
}

/*
 * Bind a matrix stored (d0, d1) row-major, as that view: f16, bf16 and
 * quantized ones stay in the mapping (mat.c converts or dequantizes the
 * panels each product reads) unless the model was opened with
 * HP_MODEL_CONVERT; f32 is in place when aligned. p is NULL when an optional
 * matrix is absent.
 */
static struct hp_mat bind_mat(struct binder *b, const char *name, int64_t d0, int64_t d1, bool optional)
{
    struct hp_mat w = {NULL, d1, 1, HP_DT_F32, NULL, 0};
    struct hp_st_tensor *t = find(b, name, d0, d1, optional);
    if (!t)
        return w;
    size_t n = (size_t)(d0 * d1);
    static const float empty[1];
    if (n == 0)
        w.p = empty; /* a pruned layer's matrix with no heads: never read */
    else if (t->dtype == HP_DT_F32 && ((uintptr_t)t->data % sizeof(float)) == 0)
        w.p = t->data; /* in place, in the mapping */
    else if (t->dtype == HP_DT_Q && !(b->m->flags & HP_MODEL_CONVERT))
        w = hp_mat_of_q(t->q); /* quantized rows, in the file's mapping */
    else if (t->dtype != HP_DT_F32 && !(b->m->flags & HP_MODEL_CONVERT))
        w.p = t->data, w.dt = t->dtype; /* 16-bit, in the mapping: any alignment (mat.c loads bytes) */
    else
        w.p = owned_f32(b, t, n);
    return w;
}

/* The tensor just bound holds layer l's heads along axis in n_seg segments, those of bits seg_kv KV heads,
 * in blocks blk d_head wide (struct hp_head_tensor). */
static void note_blocks(struct binder *b, int l, int axis, int n_seg, unsigned seg_kv, int blk)
{
    struct hp_model *m = b->m;
    assert(n_seg >= 1 && n_seg <= 3); /* export.c's put_heads holds three */
    if (b->st != HP_OK || !b->last)
        return;
    if (!m->head_tensors) {
        /* at most 7 a layer: q, k, v and their biases, o */
        m->head_tensors = malloc((size_t)m->info.n_layers * 7 * sizeof *m->head_tensors);
        if (!m->head_tensors) {
            b->st = hp_fail(b->err, HP_ERR_NOMEM, "%s: out of memory", m->dir);
            return;
        }
    }
    m->head_tensors[m->n_head_tensors++] = (struct hp_head_tensor){b->last, l, axis, n_seg, seg_kv, blk};
}

/* note_blocks of blocks one head wide. */
static void note_heads(struct binder *b, int l, int axis, int n_seg, unsigned seg_kv)
{
    note_blocks(b, l, axis, n_seg, seg_kv, 1);
}

/*
 * A tensor transformers ties to one already bound (lm_head.weight to the
 * embedding when tie_word_embeddings, BERT's decoder bias to the MLM bias):
 * when stored it is read only to check that it is the same, byte for byte,
 * and refused when it differs, since it is unclear which of the two the
 * checkpoint means.
 */
static void check_tied_copy(struct binder *b, const char *name, const struct hp_st_tensor *to, const char *what,
                            const char *hint)
{
    if (b->st != HP_OK || !to)
        return;
    struct hp_st_tensor *t = lookup(b, name);
    if (!t)
        return;
    /* the dtype's name too: two quantized types (HP_DT_Q both) may take the same bytes */
    bool same = t->dtype == to->dtype && strcmp(t->dtype_name, to->dtype_name) == 0 && t->n_dims == to->n_dims &&
                t->nbytes == to->nbytes &&
                memcmp(t->shape, to->shape, (size_t)t->n_dims * sizeof t->shape[0]) == 0 &&
                (t->nbytes == 0 || memcmp(t->data, to->data, t->nbytes) == 0);
    if (!same)
        b->st = hp_fail(b->err, HP_ERR_UNSUPPORTED, "%s: tensor '%s' differs from %s '%s', which config.json ties it to (%s)",
                        t->file, t->name, what, to->name, hint);
    else
        t->used = true;
}

/*
 * The LM head (n_vocab, d_model) at `name`: the embedding wte when the config ties them (a stored
 * copy must then equal it: check_tied_copy), else the checkpoint's own tensor. GPT-2's and Llama's
 * lm_head.weight and BERT's decoder all follow transformers' tie_word_embeddings this way.
 */
static void bind_head(struct binder *b, const char *name, const struct hp_st_tensor *wte, bool tied)
{
    struct hp_model *m = b->m;
    if (tied) {
        check_tied_copy(b, name, wte, "the embedding",
                        "\"tie_word_embeddings\" is true; set it false to use the stored one");
        m->lm_head = m->wte;
    } else {
        m->lm_head = bind_mat(b, name, m->info.n_vocab, m->info.d_model, false);
    }
}

/* bind_head for a head stored outside the binder's prefixes (GPT2LMHeadModel's lm_head, LlamaForCausalLM's,
 * GPTNeoXForCausalLM's embed_out). */
static void bind_head_outside(struct binder *b, const char *name, const struct hp_st_tensor *wte, bool tied)
{
    static const char *const none[] = {"", NULL};
    struct binder hb = {b->m, none, b->err, b->st, NULL};
    bind_head(&hb, name, wte, tied);
    b->st = hb.st;
}

/* A Hugging Face nn.Linear weight (out, in) as the B operand (in, out). */
static struct hp_mat bind_linear(struct binder *b, const char *name, int in, int out)
{
    return hp_mat_t(bind_mat(b, name, out, in, false));
}

static void bind_gpt2(struct binder *b, const struct bind_opts *o)
{
    struct hp_model *m = b->m;
    const struct hp_model_info *in = &m->info;
    int d = in->d_model, f = in->d_ff;
    char n[128];
    m->wte = bind_mat(b, "wte.weight", in->n_vocab, d, false);
    const struct hp_st_tensor *wte = b->last;
    m->wpe = bind_mat(b, "wpe.weight", in->n_ctx, d, false);
    for (int l = 0; l < in->n_layers && b->st == HP_OK; l++) {
        struct hp_layer *L = &m->layers[l];
#define G(s) (snprintf(n, sizeof n, "h.%d.%s", l, s), n)
        L->ln1_w = bind(b, G("ln_1.weight"), d, VEC, false);
        L->ln1_b = bind(b, G("ln_1.bias"), d, VEC, false);
        /* Conv1D: weight (in, out) row-major, so B = W directly; q, k, v side by side, qd wide each */
        const int qd = L->n_q * in->d_head;
        const struct hp_mat qkv = bind_mat(b, G("attn.c_attn.weight"), d, 3 * qd, false);
        note_heads(b, l, 1, 3, false);
        const float *qkv_b = bind(b, G("attn.c_attn.bias"), 3 * qd, VEC, false);
        note_heads(b, l, 0, 3, false);
        if (qkv.p) {
            L->wq = qkv;
            L->wk = hp_mat_at(qkv, 0, qd);
            L->wv = hp_mat_at(qkv, 0, 2 * qd);
        }
        if (qkv_b) {
            L->bq = qkv_b;
            L->bk = qkv_b + qd;
            L->bv = qkv_b + 2 * qd;
        }
        L->wo = bind_mat(b, G("attn.c_proj.weight"), qd, d, false);
        note_heads(b, l, 0, 1, false);
        L->bo = bind(b, G("attn.c_proj.bias"), d, VEC, false);
        L->ln2_w = bind(b, G("ln_2.weight"), d, VEC, false);
        L->ln2_b = bind(b, G("ln_2.bias"), d, VEC, false);
        L->w_up = bind_mat(b, G("mlp.c_fc.weight"), d, f, false);
        L->b_up = bind(b, G("mlp.c_fc.bias"), f, VEC, false);
        L->w_down = bind_mat(b, G("mlp.c_proj.weight"), f, d, false);
        L->b_down = bind(b, G("mlp.c_proj.bias"), d, VEC, false);
#undef G
    }
    m->lnf_w = bind(b, "ln_f.weight", d, VEC, false);
    m->lnf_b = bind(b, "ln_f.bias", d, VEC, false);
    /* GPT2LMHeadModel's head, outside the "transformer." prefix: the embedding when tied, else its own */
    bind_head_outside(b, "lm_head.weight", wte, o->tied);
}

static void bind_bert(struct binder *b, const struct bind_opts *o)
{
    struct hp_model *m = b->m;
    const struct hp_model_info *in = &m->info;
    int d = in->d_model, f = in->d_ff;
    char n[160];
    m->wte = bind_mat(b, "embeddings.word_embeddings.weight", in->n_vocab, d, false);
    const struct hp_st_tensor *wte = b->last;
    m->wpe = bind_mat(b, "embeddings.position_embeddings.weight", in->n_ctx, d, false);
    m->wtt = bind_mat(b, "embeddings.token_type_embeddings.weight", m->n_types, d, false);
    m->emb_ln_w = bind(b, "embeddings.LayerNorm.weight", d, VEC, false);
    m->emb_ln_b = bind(b, "embeddings.LayerNorm.bias", d, VEC, false);
    for (int l = 0; l < in->n_layers && b->st == HP_OK; l++) {
        struct hp_layer *L = &m->layers[l];
#define G(s) (snprintf(n, sizeof n, "encoder.layer.%d.%s", l, s), n)
        const int qd = L->n_q * in->d_head;
        L->wq = bind_linear(b, G("attention.self.query.weight"), d, qd);
        note_heads(b, l, 0, 1, false);
        L->bq = bind(b, G("attention.self.query.bias"), qd, VEC, false);
        note_heads(b, l, 0, 1, false);
        L->wk = bind_linear(b, G("attention.self.key.weight"), d, qd);
        note_heads(b, l, 0, 1, false);
        L->bk = bind(b, G("attention.self.key.bias"), qd, VEC, false);
        note_heads(b, l, 0, 1, false);
        L->wv = bind_linear(b, G("attention.self.value.weight"), d, qd);
        note_heads(b, l, 0, 1, false);
        L->bv = bind(b, G("attention.self.value.bias"), qd, VEC, false);
        note_heads(b, l, 0, 1, false);
        L->wo = bind_linear(b, G("attention.output.dense.weight"), qd, d);
        note_heads(b, l, 1, 1, false);
        L->bo = bind(b, G("attention.output.dense.bias"), d, VEC, false);
        L->ln1_w = bind(b, G("attention.output.LayerNorm.weight"), d, VEC, false);
        L->ln1_b = bind(b, G("attention.output.LayerNorm.bias"), d, VEC, false);
        L->w_up = bind_linear(b, G("intermediate.dense.weight"), d, f);
        L->b_up = bind(b, G("intermediate.dense.bias"), f, VEC, false);
        L->w_down = bind_linear(b, G("output.dense.weight"), f, d);
        L->b_down = bind(b, G("output.dense.bias"), d, VEC, false);
        L->ln2_w = bind(b, G("output.LayerNorm.weight"), d, VEC, false);
        L->ln2_b = bind(b, G("output.LayerNorm.bias"), d, VEC, false);
#undef G
    }
    /* The MLM head and the classifier sit outside the "bert." prefix. */
    static const char *const none[] = {"", NULL};
    struct binder hb = {m, none, b->err, b->st, NULL};
    if (b->st == HP_OK && hp_st_find(m->st, "classifier.weight")) {
        if (in->n_labels < 1) {
            b->st = hp_fail(b->err, HP_ERR_FORMAT, "%s: a classifier without id2label in config.json", m->dir);
            return;
        }
        if (in->n_labels == 1 && o->no_problem) {
            b->st = hp_fail(b->err, HP_ERR_UNSUPPORTED,
                            "%s: a classifier of one class is a regression (mean squared error) in transformers, which "
                            "headprune does not implement", m->dir);
            return;
        }
        m->pooler = bind_linear(b, "pooler.dense.weight", d, d);
        m->pooler_b = bind(b, "pooler.dense.bias", d, VEC, false);
        hb.st = b->st;
        m->classifier = bind_linear(&hb, "classifier.weight", d, in->n_labels);
        m->classifier_b = bind(&hb, "classifier.bias", in->n_labels, VEC, false);
        b->st = hb.st;
        m->info.label_names = (const char *const *)m->label_names;
    } else {
        m->info.n_labels = 0;
    }
    if (b->st == HP_OK && hp_st_find(m->st, "cls.predictions.transform.dense.weight")) {
        m->mlm_dense = bind_linear(&hb, "cls.predictions.transform.dense.weight", d, d);
        m->mlm_dense_b = bind(&hb, "cls.predictions.transform.dense.bias", d, VEC, false);
        m->mlm_ln_w = bind(&hb, "cls.predictions.transform.LayerNorm.weight", d, VEC, false);
        m->mlm_ln_b = bind(&hb, "cls.predictions.transform.LayerNorm.bias", d, VEC, false);
        m->mlm_bias = bind(&hb, "cls.predictions.bias", in->n_vocab, VEC, true);
        if (m->mlm_bias)
            check_tied_copy(&hb, "cls.predictions.decoder.bias", hb.last, "the bias",
                            "BertLMPredictionHead's decoder adds cls.predictions.bias");
        else
            m->mlm_bias = bind(&hb, "cls.predictions.decoder.bias", in->n_vocab, VEC, false);
        /* the decoder: the word embeddings when tied (BERT's default), else its own */
        bind_head(&hb, "cls.predictions.decoder.weight", wte, o->tied);
        b->st = hb.st;
    }
}

/*
 * An RMSNorm's gain (n): as stored, or with one_plus (Gemma's RMSNorm, output * (1 + weight) in float32) 1 + w
 * in an owned copy, so that the passes' norms multiply by it as by any gain.
 */
static const float *bind_gain(struct binder *b, const char *name, int64_t n, bool one_plus)
{
    const float *w = bind(b, name, n, VEC, false);
    if (!w || !one_plus)
        return w;
    float *g = malloc((size_t)n * sizeof *g);
    if (!g) {
        b->st = hp_fail(b->err, HP_ERR_NOMEM, "%s: out of memory", b->m->dir);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++)
        g[i] = 1.0f + w[i];
    b->st = keep_owned(b->m, g, b->err);
    return b->st == HP_OK ? g : NULL;
}

static void bind_llama(struct binder *b, const struct bind_opts *o)
{
    struct hp_model *m = b->m;
    const struct hp_model_info *in = &m->info;
    int d = in->d_model, f = in->d_ff;
    char n[128];
    if (m->qk_norm_whole && m->pruned) { /* the norm over every head would run over fewer */
        b->st = hp_fail(b->err, HP_ERR_UNSUPPORTED,
                        "%s: a %s checkpoint without some heads is not supported: its q_norm and k_norm run over all "
                        "heads together, so the heads left would not be the original's", m->dir, in->model_type);
        return;
    }
    m->wte = bind_mat(b, "embed_tokens.weight", in->n_vocab, d, false);
    const struct hp_st_tensor *wte = b->last;
    for (int l = 0; l < in->n_layers && b->st == HP_OK; l++) {
        struct hp_layer *L = &m->layers[l];
        const int qd = L->n_q * in->d_head, kvd = L->n_kv * in->d_head;
#define G(s) (snprintf(n, sizeof n, "layers.%d.%s", l, s), n)
        const bool g1 = o->gemma_norms;
        L->window = !m->sliding || m->sliding[l] ? in->window : 0;
        L->local_rope = m->rope_local.theta > 0 && m->sliding && m->sliding[l];
        if (!o->post_norms)
            L->ln1_w = bind_gain(b, G("input_layernorm.weight"), d, g1);
        if (o->fused) { /* rows: q's heads, then k's and v's KV heads */
            const struct hp_mat qkv = bind_linear(b, G("self_attn.qkv_proj.weight"), d, qd + 2 * kvd);
            note_heads(b, l, 0, 3, 6);
            if (qkv.p)
                L->wq = qkv, L->wk = hp_mat_at(qkv, 0, qd), L->wv = hp_mat_at(qkv, 0, qd + kvd);
        } else {
            L->wq = bind_linear(b, G("self_attn.q_proj.weight"), d, qd);
            note_heads(b, l, 0, 1, false);
            L->wk = bind_linear(b, G("self_attn.k_proj.weight"), d, kvd);
            note_heads(b, l, 0, 1, true);
            L->wv = bind_linear(b, G("self_attn.v_proj.weight"), d, kvd);
            note_heads(b, l, 0, 1, true);
        }
        if (m->qk_norm) { /* one gain per head dimension, shared by the heads: nothing an export cuts */
            L->q_norm = bind_gain(b, G("self_attn.q_norm.weight"), in->d_head, g1);
            L->k_norm = bind_gain(b, G("self_attn.k_norm.weight"), in->d_head, g1);
        }
        if (m->qk_norm_whole) { /* a gain per dimension of the whole projection (no export cuts heads here) */
            L->q_norm = bind(b, G("self_attn.q_norm.weight"), qd, VEC, false);
            L->k_norm = bind(b, G("self_attn.k_norm.weight"), kvd, VEC, false);
        }
        if (o->qkv_bias) {
            L->bq = bind(b, G("self_attn.q_proj.bias"), qd, VEC, false);
            note_heads(b, l, 0, 1, false);
            L->bk = bind(b, G("self_attn.k_proj.bias"), kvd, VEC, false);
            note_heads(b, l, 0, 1, true);
            L->bv = bind(b, G("self_attn.v_proj.bias"), kvd, VEC, false);
            note_heads(b, l, 0, 1, true);
        }
        L->wo = bind_linear(b, G("self_attn.o_proj.weight"), qd, d);
        note_heads(b, l, 1, 1, false);
        if (o->o_bias)
            L->bo = bind(b, G("self_attn.o_proj.bias"), d, VEC, false);
        if (o->post_norms) { /* after attention and after the MLP, none before either */
            L->pn1_w = bind(b, G("post_attention_layernorm.weight"), d, VEC, false);
            L->pn2_w = bind(b, G("post_feedforward_layernorm.weight"), d, VEC, false);
        } else if (g1) { /* Gemma: after attention, and before and after the MLP */
            L->pn1_w = bind_gain(b, G("post_attention_layernorm.weight"), d, true);
            L->ln2_w = bind_gain(b, G("pre_feedforward_layernorm.weight"), d, true);
            L->pn2_w = bind_gain(b, G("post_feedforward_layernorm.weight"), d, true);
        } else {
            L->ln2_w = bind(b, G("post_attention_layernorm.weight"), d, VEC, false);
        }
        if (o->fused) { /* rows: the gate's f, then up's */
            L->w_gate = bind_linear(b, G("mlp.gate_up_proj.weight"), d, 2 * f);
            if (L->w_gate.p)
                L->w_up = hp_mat_at(L->w_gate, 0, f);
        } else {
            L->w_gate = bind_linear(b, G("mlp.gate_proj.weight"), d, f);
            L->w_up = bind_linear(b, G("mlp.up_proj.weight"), d, f);
        }
        L->w_down = bind_linear(b, G("mlp.down_proj.weight"), f, d);
        if (o->mlp_bias) {
            L->b_gate = bind(b, G("mlp.gate_proj.bias"), f, VEC, false);
            L->b_up = bind(b, G("mlp.up_proj.bias"), f, VEC, false);
            L->b_down = bind(b, G("mlp.down_proj.bias"), d, VEC, false);
        }
#undef G
    }
    m->lnf_w = bind_gain(b, "norm.weight", d, o->gemma_norms);
    bind_head_outside(b, "lm_head.weight", wte, o->tied);
}

/*
 * GPT-NeoX's query_key_value (3 n_q d_head, d) holds each head's q, k and v rows together, head after head;
 * the passes read q of every head, then k, then v (as Phi-3's qkv_proj), so its rows are copied once in that
 * order, in the stored dtype (f32 with HP_MODEL_CONVERT): the B operand (d, 3 qd). The tensor itself stays what
 * an export cuts, in blocks of a head's three.
 */
/* src's blocks of unit bytes, n_q heads of three (q, k, v) dh blocks each, as q's of every head, then k's, then v's,
 * in an owned copy (NULL and b->st set on failure). */
static void *neox_qkv_order(struct binder *b, const void *src, int n_q, size_t unit, const char *name)
{
    const size_t dh = (size_t)b->m->info.d_head, qd = (size_t)n_q * dh;
    char *own = malloc(3 * qd * unit);
    if (!own) {
        b->st = hp_fail(b->err, HP_ERR_NOMEM, "%s: out of memory reordering '%s'", b->m->dir, name);
        return NULL;
    }
    for (size_t h = 0; h < (size_t)n_q; h++)
        for (size_t s = 0; s < 3; s++) /* q, k, v */
            memcpy(own + (s * qd + h * dh) * unit, (const char *)src + (3 * h + s) * dh * unit, dh * unit);
    b->st = keep_owned(b->m, own, b->err);
    return b->st == HP_OK ? own : NULL;
}

static struct hp_mat bind_neox_qkv(struct binder *b, const char *name, int d, int n_q)
{
    struct hp_mat w = bind_mat(b, name, 3 * n_q * b->m->info.d_head, d, false);
    if (!b->last || n_q == 0)
        return hp_mat_t(w);
    w.p = neox_qkv_order(b, w.p, n_q, (size_t)d * hp_dtype_size(w.dt), name); /* a unit: one row */
    return hp_mat_t(w);
}

/* The bias of bind_neox_qkv's tensor in the same order, owned f32 (3 qd). */
static const float *bind_neox_qkv_bias(struct binder *b, const char *name, int n_q)
{
    const float *v = bind(b, name, 3 * n_q * b->m->info.d_head, VEC, false);
    return v && n_q > 0 ? neox_qkv_order(b, v, n_q, sizeof *v, name) : v;
}

static void bind_neox(struct binder *b, const struct bind_opts *o)
{
    struct hp_model *m = b->m;
    const struct hp_model_info *in = &m->info;
    int d = in->d_model, f = in->d_ff;
    char n[128];
    m->wte = bind_mat(b, "embed_in.weight", in->n_vocab, d, false);
    const struct hp_st_tensor *wte = b->last;
    for (int l = 0; l < in->n_layers && b->st == HP_OK; l++) {
        struct hp_layer *L = &m->layers[l];
        const int qd = L->n_q * in->d_head;
#define G(s) (snprintf(n, sizeof n, "layers.%d.%s", l, s), n)
        L->ln1_w = bind(b, G("input_layernorm.weight"), d, VEC, false);
        L->ln1_b = bind(b, G("input_layernorm.bias"), d, VEC, false);
        const struct hp_mat qkv = bind_neox_qkv(b, G("attention.query_key_value.weight"), d, L->n_q);
        note_blocks(b, l, 0, 1, 0, 3);
        if (qkv.p)
            L->wq = qkv, L->wk = hp_mat_at(qkv, 0, qd), L->wv = hp_mat_at(qkv, 0, 2 * qd);
        if (o->qkv_bias) {
            const float *qkv_b = bind_neox_qkv_bias(b, G("attention.query_key_value.bias"), L->n_q);
            note_blocks(b, l, 0, 1, 0, 3);
            if (qkv_b)
                L->bq = qkv_b, L->bk = qkv_b + qd, L->bv = qkv_b + 2 * qd;
        }
        L->wo = bind_linear(b, G("attention.dense.weight"), qd, d);
        note_heads(b, l, 1, 1, false);
        if (o->o_bias)
            L->bo = bind(b, G("attention.dense.bias"), d, VEC, false);
        L->ln2_w = bind(b, G("post_attention_layernorm.weight"), d, VEC, false);
        L->ln2_b = bind(b, G("post_attention_layernorm.bias"), d, VEC, false);
        L->w_up = bind_linear(b, G("mlp.dense_h_to_4h.weight"), d, f);
        L->b_up = bind(b, G("mlp.dense_h_to_4h.bias"), f, VEC, false);
        L->w_down = bind_linear(b, G("mlp.dense_4h_to_h.weight"), f, d);
        L->b_down = bind(b, G("mlp.dense_4h_to_h.bias"), d, VEC, false);
#undef G
    }
    m->lnf_w = bind(b, "final_layer_norm.weight", d, VEC, false);
    m->lnf_b = bind(b, "final_layer_norm.bias", d, VEC, false);
    /* GPTNeoXForCausalLM's head, outside the "gpt_neox." prefix */
    bind_head_outside(b, "embed_out.weight", wte, o->tied);
}

// --- the architectures ------------------------------------------------------------

static const char *const gpt2_prefixes[] = {"transformer.", "", NULL},
                         *const gpt2_harmless[] = {"attn.bias", "attn.masked_bias", NULL}; /* causal-mask buffers */
static const char *const bert_prefixes[] = {"bert.", "", NULL},
                         *const bert_harmless[] = {"embeddings.position_ids", "embeddings.token_type_ids", /* indices */
                                                   "cls.seq_relationship.weight", "cls.seq_relationship.bias", NULL};
static const char *const llama_prefixes[] = {"model.", "", NULL},
                         *const llama_harmless[] = {"rotary_emb.inv_freq", NULL}; /* recomputed from rope_theta */
/* older GPT-NeoX checkpoints keep the causal mask and the rotary frequencies as buffers */
static const char *const neox_prefixes[] = {"gpt_neox.", "", NULL},
                         *const neox_harmless[] = {"attention.bias", "attention.masked_bias", "rotary_emb.inv_freq",
                                                   NULL};

static const struct arch_row archs[] = {
    [HP_ARCH_GPT2] = {"n_head", "n_embd", hp_config_gpt2, gpt2_prefixes, bind_gpt2, gpt2_harmless, "GPT-2",
                     HP_HF_PRUNE_KEY},
    [HP_ARCH_BERT] = {"num_attention_heads", "hidden_size", hp_config_bert, bert_prefixes, bind_bert,
                      bert_harmless, "BERT", HP_HF_PRUNE_KEY},
    [HP_ARCH_LLAMA] = {"num_attention_heads", "hidden_size", hp_config_llama, llama_prefixes, bind_llama,
                       llama_harmless, "Llama", HP_HF_PRUNE_COMPACT},
    [HP_ARCH_GPT_NEOX] = {"num_attention_heads", "hidden_size", hp_config_neox, neox_prefixes, bind_neox,
                          neox_harmless, "GPT-NeoX", HP_HF_PRUNE_NONE},
};
static_assert(sizeof archs / sizeof archs[0] == HP_ARCH_COUNT, "archs: one row per enum hp_arch");

static const struct arch_row *arch_named(const char *model_type)
{
    enum hp_arch a;
    return hp_model_type_find(model_type, NULL, &a) ? &archs[a] : NULL;
}

static const struct arch_row *arch_row(enum hp_arch a)
{
    assert(a >= 0 && a < HP_ARCH_COUNT);
    return &archs[a];
}

const char *hp_arch_name(enum hp_arch a)
{
    return arch_row(a)->name;
}

/* Every model_type the rows know, "gpt2, bert, llama, ...", for the message that refuses another. */
static void arch_types(char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < HP_MT_COUNT && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? ", " : "", hp_model_type_at(i));
}

// --- every tensor accounted for -------------------------------------------------

/*
 * Buffers transformers keeps in some checkpoints beside the weights, and
 * heads headprune never runs, that take no part in what it computes
 * (docs/checkpoints.md): matched at the end of a tensor's name, after a dot.
 */
static bool harmless(const struct hp_model *m, const char *name)
{
    /* BERT's pooler, when no classifier reads it */
    static const char *const bert_pooler[] = {"pooler.dense.weight", "pooler.dense.bias", NULL};
    const enum hp_arch a = m->info.arch;
    const char *const *lists[] = {arch_row(a)->harmless, a == HP_ARCH_BERT && !m->pooler.p ? bert_pooler : NULL};
    const size_t n = strlen(name);
    for (int i = 0; i < 2; i++)
        for (const char *const *p = lists[i]; p && *p; p++) {
            size_t k = strlen(*p);
            if (n >= k && strcmp(name + n - k, *p) == 0 && (n == k || name[n - k - 1] == '.'))
                return true;
        }
    return false;
}

/* Refuse a tensor the binder did not read: the model would run without it, which is another model. */
static enum hp_status check_all_read(struct hp_model *m, struct hp_error *err)
{
    for (int i = 0; i < hp_st_count(m->st); i++) {
        const struct hp_st_tensor *t = hp_st_at(m->st, i);
        char file[256], why[256] = "";
        if (!t->used && m->gguf)
            gguf_terms(m, t->name, false, file, why);
        if (!t->used && why[0]) /* a block past the metadata's count */
            return hp_fail(err, HP_ERR_UNSUPPORTED, "%s: tensor '%s' is not read (%s)", t->file, file, why);
        if (!t->used && !harmless(m, t->name))
            return hp_fail(err, HP_ERR_UNSUPPORTED,
                           "%s: tensor '%s' is not read: headprune's %s model has no place for it and would run "
                           "without it (docs/checkpoints.md lists what it reads)",
                           t->file, t->name, m->info.model_type);
    }
    return HP_OK;
}

// --- opening ----------------------------------------------------------------

static enum hp_status open_weights(struct hp_model *m, const char *dir, struct hp_error *err)
{
    char *path;
    enum hp_status st = hp_path_make(&path, err, "%s/model.safetensors", dir);
    if (st != HP_OK)
        return st;
    FILE *probe = fopen(path, "rb");
    if (probe) {
        fclose(probe);
        st = hp_st_open(path, &m->st, err);
        free(path);
        return st;
    }
    free(path);
    if ((st = hp_path_make(&path, err, "%s/model.safetensors.index.json", dir)) != HP_OK)
        return st;
    cJSON *idx;
    probe = fopen(path, "rb");
    if (!probe) {
        /* a path over the system's limit is no missing file */
        st = errno == ENAMETOOLONG ? hp_fail(err, HP_ERR_IO, "%s: cannot open (%s)", path, hp_strerror(errno))
                                   : hp_fail(err, HP_ERR_IO, "%s: no model.safetensors or model.safetensors.index.json (is this a Hugging Face model directory?)", dir);
        free(path);
        return st;
    }
    fclose(probe);
    st = read_json(path, &idx, NULL, err);
    if (st != HP_OK) {
        free(path);
        return st;
    }
    cJSON *map = hp_cfg_get(idx, "weight_map");
    if (!cJSON_IsObject(map)) {
        cJSON_Delete(idx);
        st = hp_fail(err, HP_ERR_FORMAT, "%s: no \"weight_map\" object", path);
        free(path);
        return st;
    }
    /* open each distinct shard once, in order of first mention */
    cJSON *e;
    cJSON_ArrayForEach(e, map) {
        if (!cJSON_IsString(e)) {
            st = hp_fail(err, HP_ERR_FORMAT, "%s: weight_map entry '%s' is not a file name", path, e->string);
            break;
        }
        bool seen = false;
        for (cJSON *p = map->child; p != e; p = p->next)
            if (strcmp(p->valuestring, e->valuestring) == 0) {
                seen = true;
                break;
            }
        if (seen)
            continue;
        if (strchr(e->valuestring, '/')) {
            st = hp_fail(err, HP_ERR_FORMAT, "%s: shard name '%s' must be a plain file name", path, e->valuestring);
            break;
        }
        char *shard;
        if ((st = hp_path_make(&shard, err, "%s/%s", dir, e->valuestring)) != HP_OK)
            break;
        st = m->st ? hp_st_add(m->st, shard, err) : hp_st_open(shard, &m->st, err);
        free(shard);
        if (st != HP_OK)
            break;
    }
    cJSON_Delete(idx);
    if (st == HP_OK && !m->st)
        st = hp_fail(err, HP_ERR_FORMAT, "%s: weight_map is empty", path);
    free(path);
    return st;
}

/* The pooling sentence-transformers' 1_Pooling/config.json declares, if the directory has one. */
static enum hp_status read_pooling(struct hp_model *m, const char *dir, struct hp_error *err)
{
    m->info.pooling = HP_POOL_MEAN;
    char *path;
    enum hp_status st = hp_path_make(&path, err, "%s/1_Pooling/config.json", dir);
    if (st != HP_OK)
        return st;
    if (access(path, F_OK) != 0) {
        st = errno == ENAMETOOLONG ? hp_fail(err, HP_ERR_IO, "%s: cannot open (%s)", path, hp_strerror(errno)) : HP_OK;
        free(path);
        return st;
    }
    cJSON *c;
    st = read_json(path, &c, NULL, err);
    if (st != HP_OK) {
        free(path);
        return st;
    }
    bool mean = cJSON_IsTrue(hp_cfg_get(c, "pooling_mode_mean_tokens")),
         cls = cJSON_IsTrue(hp_cfg_get(c, "pooling_mode_cls_token")),
         max = cJSON_IsTrue(hp_cfg_get(c, "pooling_mode_max_tokens")),
         other = cJSON_IsTrue(hp_cfg_get(c, "pooling_mode_mean_sqrt_len_tokens")) ||
                 cJSON_IsTrue(hp_cfg_get(c, "pooling_mode_weightedmean_tokens")) ||
                 cJSON_IsTrue(hp_cfg_get(c, "pooling_mode_lasttoken"));
    cJSON_Delete(c);
    if (other || mean + cls + max != 1)
        st = hp_fail(err, HP_ERR_UNSUPPORTED,
                     "%s: pooling other than exactly one of mean, CLS or max tokens is not supported", path);
    free(path);
    if (st != HP_OK)
        return st;
    m->info.pooling = cls ? HP_POOL_CLS : max ? HP_POOL_MAX : HP_POOL_MEAN;
    return HP_OK;
}

enum hp_status hp_model_open(const char *dir, struct hp_model **out, struct hp_error *err)
{
    return hp_model_open_ex(dir, 0, out, err);
}

/* The config and the weights of GGUF file path (hp_gguf_checkpoint): *cfg parsed, m->config_text, m->st and
 * m->gguf set. */
static enum hp_status open_gguf(struct hp_model *m, const char *path, cJSON **cfg, struct hp_error *err)
{
    struct hp_gguf_ckpt c;
    enum hp_status st = hp_gguf_checkpoint(path, &c, err);
    if (st != HP_OK)
        return st;
    m->config_text = c.config;
    m->st = c.st;     /* closed before the buffer it borrows is freed (hp_model_close) */
    m->gguf = c.g;
    if ((st = keep_owned(m, c.buf, err)) != HP_OK) {
        free(c.q);
        return st;
    }
    if ((st = keep_owned(m, c.q, err)) != HP_OK)
        return st;
    st = hp_json_parse(path, 1, m->config_text, strlen(m->config_text), NULL, cfg, err);
    if (st == HP_OK && !*cfg)
        st = hp_fail(err, HP_ERR_FORMAT, "%s: the config made of its metadata is not JSON", path);
    if (st != HP_OK) { /* the caller deletes the config only on success */
        cJSON_Delete(*cfg);
        *cfg = NULL;
    }
    return st;
}

enum hp_status hp_model_open_ex(const char *dir, unsigned flags, struct hp_model **out, struct hp_error *err)
{
    *out = NULL;
    struct hp_model *m = calloc(1, sizeof *m);
    if (!m)
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", dir);
    m->flags = flags;

    char *path = NULL;
    cJSON *cfg = NULL;
    enum hp_status st = (m->dir = strdup(dir)) ? hp_gguf_find(dir, &path, err) : hp_fail(err, HP_ERR_NOMEM, "out of memory");
    if (st == HP_OK && path && (m->info.gguf = true))
        st = open_gguf(m, path, &cfg, err);
    else if (st == HP_OK && (st = hp_path_make(&path, err, "%s/config.json", dir)) == HP_OK)
        st = read_json(path, &cfg, &m->config_text, err);
    if (st == HP_OK) {
        struct bind_opts o;
        st = parse_config(m, cfg, path, &o, err);
        if (st == HP_OK)
            st = parse_pruned(m, cfg, path, err);
        cJSON_Delete(cfg);
        free(path);
        path = NULL;
        if (st == HP_OK && !m->st)
            st = open_weights(m, dir, err);
        if (st == HP_OK) {
            m->layers = calloc((size_t)m->info.n_layers, sizeof *m->layers);
            st = m->layers ? make_slots(m, err) : hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", dir);
        }
        if (st == HP_OK) {
            const struct arch_row *row = arch_row(m->info.arch);
            struct binder b = {m, row->prefixes, err, HP_OK, NULL};
            row->bind(&b, &o);
            st = b.st;
            if (st == HP_OK)
                st = check_all_read(m, err);
        }
    }
    free(path);
    if (st != HP_OK) {
        hp_model_close(m);
        return st;
    }
    m->info.has_lm_head = m->lm_head.p != NULL;
    /* features the stages past the loader read, rather than the architecture */
    m->info.n_token_types = m->n_types;
    m->info.gated_mlp = m->info.n_layers > 0 && m->layers[0].w_gate.p != NULL;
    m->info.parallel = m->parallel;
    m->info.hf_prune = arch_row(m->info.arch)->hf_prune;
    st = read_pooling(m, dir, err);
    if (st != HP_OK) {
        hp_model_close(m);
        return st;
    }
    *out = m;
    return HP_OK;
}

void hp_model_close(struct hp_model *m)
{
    if (!m)
        return;
    hp_st_close(m->st); /* before what it borrows: a GGUF model's buffer (owned) and mapping */
    for (int i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->owned);
    hp_gguf_close(m->gguf);
    free(m->layers);
    free(m->slots);
    free(m->head_tensors);
    free(m->pruned);
    free(m->sliding);
    free(m->config_text);
    free(m->dir);
    for (int i = 0; i < m->n_label_names; i++)
        free(m->label_names[i]);
    free(m->label_names);
    free(m);
}

const struct hp_model_info *hp_model_get_info(const struct hp_model *m)
{
    return &m->info;
}

// --- the panel its products need ---------------------------------------------

/* Read through panels: 16-bit or quantized. */
static bool is16(struct hp_mat w)
{
    return w.p && w.dt != HP_DT_F32;
}

struct hp_mat_buf *hp_mat_buf_new(const struct hp_model *m)
{
    const struct hp_model_info *in = &m->info;
    bool any = is16(m->lm_head) || is16(m->mlm_dense) || is16(m->pooler) || is16(m->classifier);
    for (int l = 0; l < in->n_layers && !any; l++) {
        const struct hp_layer *L = &m->layers[l];
        any = is16(L->wq) || is16(L->wk) || is16(L->wv) || is16(L->wo) || is16(L->w_up) || is16(L->w_gate) ||
              is16(L->w_down);
    }
    if (!any)
        return hp_mat_buf_alloc(0, 0);
    /* the deepest product and the largest matrix: attention widths, the MLP's, and the LM head's
     * vocabulary (its reverse runs k = a block of the vocabulary, up to all of it) */
    const size_t d = (size_t)in->d_model, qd = (size_t)in->n_heads * in->d_head, f = (size_t)in->d_ff,
                 V = m->lm_head.p ? (size_t)in->n_vocab : 0, C = (size_t)in->n_labels;
    size_t kmax = d, largest = d * d;
    const size_t dims[] = {qd, f, V, C};
    for (int i = 0; i < 4; i++) {
        kmax = dims[i] > kmax ? dims[i] : kmax;
        largest = d * dims[i] > largest ? d * dims[i] : largest;
    }
    return hp_mat_buf_alloc(kmax, largest);
}
