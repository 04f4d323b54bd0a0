/*
 * export.c -- write a pruned checkpoint: the model without some heads.
 *
 * Every tensor of the source is written in its stored dtype, byte for byte
 * (a GGUF model's in f32, dequantized, as transformers' GGUF loader makes
 * them: the result is a Hugging Face checkpoint), except those that hold
 * heads (model.h's hp_head_tensor), from which the removed heads'
 * blocks are left out: their Q/K/V rows and biases and
 * their rows of the output projection (a KV group goes with its last query
 * head). config.json is the source's with the pruned heads named: Hugging
 * Face's "pruned_heads" for GPT-2 and BERT, which transformers 4.x reads,
 * and headprune's "headprune" record for every architecture (model.c reads
 * both). For Llama-family models transformers knows no pruned heads; the
 * config counts the heads left when every layer keeps the same numbers of
 * whole KV groups, so transformers loads it, and the original counts
 * otherwise, which only headprune loads; a GPT-NeoX without some heads only
 * headprune loads (transformers sizes its attention by hidden_size); an OLMo 2
 * is refused (its q/k norms span every head, so without one the others change).
 * The tokenizer and the other small
 * files of the directory are copied.
 * Invariant: the output directory appears whole or not at all: everything
 * is written into a temporary directory beside it and renamed into place
 * last; on failure the temporary directory is removed.
 * Must not: compute on weights (but dequantize a GGUF model's); print.
 */
#define _POSIX_C_SOURCE 200809L
#include "model.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"
#include "util.h"

// --- which heads stay -----------------------------------------------------------

/* The source blocks each layer keeps, in order: kq[l] query-head slots, kkv[l] KV-head slots. */
struct keep {
    int *q, *kv;     /* (n_layers, n_heads), (n_layers, n_kv_heads): source slots kept, first n_q[l] / n_kv[l] used */
    int *n_q, *n_kv; /* (n_layers) */
    uint8_t *pruned; /* (n_layers, n_heads): what the written checkpoint lacks */
};

static void keep_free(struct keep *k)
{
    free(k->q);
    free(k->kv);
    free(k->n_q);
    free(k->n_kv);
    free(k->pruned);
}

static enum hp_status keep_make(const struct hp_model *m, const struct hp_mask *remove, struct keep *k,
                                struct hp_export_info *info, struct hp_error *err)
{
    const struct hp_model_info *in = &m->info;
    const int L = in->n_layers, H = in->n_heads, KV = in->n_kv_heads, per_kv = H / KV;
    k->q = malloc((size_t)L * H * sizeof *k->q);
    k->kv = malloc((size_t)L * KV * sizeof *k->kv);
    k->n_q = calloc((size_t)L, sizeof *k->n_q);
    k->n_kv = calloc((size_t)L, sizeof *k->n_kv);
    k->pruned = calloc((size_t)L * H, 1);
    if (!k->q || !k->kv || !k->n_q || !k->n_kv || !k->pruned)
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    for (int l = 0; l < L; l++) {
        const struct hp_layer *Ly = &m->layers[l];
        for (int h = 0; h < H; h++) {
            bool had = Ly->q_slot[h] >= 0, drop = remove->gate[l * H + h] == 0.0f;
            k->pruned[l * H + h] = !had || drop;
            info->n_removed += had && drop;
            info->n_pruned += k->pruned[l * H + h];
            if (had && !drop)
                k->q[l * H + k->n_q[l]++] = Ly->q_slot[h];
        }
        for (int g = 0; g < KV; g++) {
            bool any = false;
            for (int h = g * per_kv; h < (g + 1) * per_kv; h++)
                any |= !k->pruned[l * H + h];
            if (any)
                k->kv[l * KV + k->n_kv[l]++] = Ly->kv_slot[g];
        }
    }
    /* transformers builds every Llama layer alike and repeats each KV head for
     * n_heads / n_kv_heads consecutive query heads */
    info->hf_loadable = true;
    info->why_not[0] = '\0';
    for (int l = 0; l < L && info->hf_loadable; l++)
        if (k->n_q[l] == 0) {
            info->hf_loadable = false;
            snprintf(info->why_not, sizeof info->why_not,
                     "layer %d keeps no heads; transformers cannot build or run a layer without any (headprune "
                     "adds the output projection's bias alone)", l);
        }
    for (int l = 0; l < L && info->hf_loadable && in->hf_prune == HP_HF_PRUNE_NONE; l++)
        if (k->n_q[l] != in->n_heads) {
            info->hf_loadable = false;
            snprintf(info->why_not, sizeof info->why_not,
                     "transformers builds every GPT-NeoX attention hidden_size wide (head size = hidden_size / "
                     "num_attention_heads) and cannot prune its heads");
        }
    if (info->hf_loadable && in->hf_prune == HP_HF_PRUNE_COMPACT) {
        for (int l = 0; l < L && info->hf_loadable; l++) {
            if (k->n_q[l] != k->n_q[0] || k->n_kv[l] != k->n_kv[0]) {
                info->hf_loadable = false;
                snprintf(info->why_not, sizeof info->why_not,
                         "layers keep different numbers of heads (layer 0: %d, layer %d: %d); Hugging Face builds "
                         "every layer alike", k->n_q[0], l, k->n_q[l]);
            } else if (k->n_q[l] != k->n_kv[l] * per_kv) {
                info->hf_loadable = false;
                snprintf(info->why_not, sizeof info->why_not,
                         "layer %d keeps part of a KV group (%d query heads over %d KV heads); Hugging Face removes "
                         "only whole groups", l, k->n_q[l], k->n_kv[l]);
            }
        }
    }
    return HP_OK;
}

// --- the weights ----------------------------------------------------------------

static const struct hp_head_tensor *head_tensor_of(const struct hp_model *m, const struct hp_st_tensor *t)
{
    for (int i = 0; i < m->n_head_tensors; i++)
        if (m->head_tensors[i].t == t)
            return &m->head_tensors[i];
    return NULL;
}

/* The blocks (source slots) segment s of a head tensor keeps: n of them at the result; *width, the
 * segment's width in the source. */
static const int *kept_blocks(const struct hp_model *m, const struct keep *k, const struct hp_head_tensor *ht, int s,
                              int *n, int64_t *width)
{
    const int l = ht->layer;
    const bool kv = ht->seg_kv >> s & 1;
    const struct hp_layer *L = &m->layers[l];
    *width = (int64_t)(kv ? L->n_kv : L->n_q) * m->info.d_head * ht->blk;
    *n = kv ? k->n_kv[l] : k->n_q[l];
    return kv ? k->kv + (size_t)l * m->info.n_kv_heads : k->q + (size_t)l * m->info.n_heads;
}

/* Write n bytes from p to f; false on a write error. */
static bool put(FILE *f, const void *p, size_t n)
{
    return n == 0 || fwrite(p, 1, n, f) == n;
}

/* A head tensor's kept blocks of t (ht->t's bytes or their f32 copy), in order, segment by segment. */
static bool put_heads(FILE *f, const struct hp_model *m, const struct keep *k, const struct hp_head_tensor *ht,
                      const struct hp_st_tensor *t)
{
    const unsigned char *src = t->data;
    const size_t dh = (size_t)m->info.d_head * (size_t)ht->blk, es = (size_t)t->esize; /* a block's width */
    const size_t row = (t->n_dims == 2 ? (size_t)t->shape[1] : 1) * es;
    const int64_t n_rows = ht->axis == 0 ? 1 : t->shape[0];
    const int *blocks[3]; /* n_seg is at most 3 (a fused q, k, v) */
    int nb[3];
    int64_t at[4] = {0}; /* where each segment starts in the source */
    for (int s = 0; s < ht->n_seg; s++) {
        int64_t w;
        blocks[s] = kept_blocks(m, k, ht, s, &nb[s], &w);
        at[s + 1] = at[s] + w;
    }
    for (int64_t r = 0; r < n_rows; r++) /* axis 0: blocks of dh rows (or elements); 1: of dh columns a row */
        for (int s = 0; s < ht->n_seg; s++)
            for (int b = 0; b < nb[s]; b++) {
                const size_t first = (size_t)at[s] + (size_t)blocks[s][b] * dh;
                if (ht->axis == 0 ? !put(f, src + first * row, dh * row)
                                  : !put(f, src + ((size_t)r * t->shape[1] + first) * es, dh * es))
                    return false;
            }
    return true;
}

/* Written as f32 though stored otherwise: a GGUF model's tensors (its matrices' blocks, its 16-bit matrices). */
static bool as_f32(const struct hp_model *m, const struct hp_st_tensor *t)
{
    return m->gguf && t->dtype != HP_DT_F32;
}

static size_t n_elements(const struct hp_st_tensor *t)
{
    size_t n = 1;
    for (int d = 0; d < t->n_dims; d++)
        n *= (size_t)t->shape[d];
    return n;
}

/* Tensor t (the set's) with what the export keeps of it: f32 when as_f32 (a copy while written); false on a write
 * error or (*nomem) out of memory. */
static bool put_tensor(FILE *f, const struct hp_model *m, const struct keep *k, const struct hp_st_tensor *t,
                       bool *nomem)
{
    const struct hp_head_tensor *ht = head_tensor_of(m, t);
    struct hp_st_tensor c = *t;
    float *tmp = NULL;
    if (as_f32(m, t)) {
        if (!(tmp = malloc(n_elements(t) * sizeof *tmp + 1))) {
            *nomem = true;
            return false;
        }
        hp_mat_tensor_f32(t, tmp);
        c.data = tmp, c.dtype = HP_DT_F32, c.esize = 4, c.nbytes = n_elements(t) * sizeof *tmp;
    }
    const bool ok = ht ? put_heads(f, m, k, ht, &c) : put(f, c.data, c.nbytes);
    free(tmp);
    return ok;
}

/* Finish a file we wrote: flushed, synced, closed; false (errno set) on any failure. */
static bool close_synced(FILE *f)
{
    bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    int e = errno;
    if (fclose(f) != 0 && ok) {
        return false;
    }
    errno = e;
    return ok;
}

static enum hp_status write_weights(const struct hp_model *m, const struct keep *k, const char *path,
                                    struct hp_export_info *info, struct hp_error *err)
{
    struct hp_st_set *set = m->st;
    const int n = hp_st_count(set);
    struct hp_st_out *o = calloc((size_t)(n ? n : 1), sizeof *o);
    if (!o)
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
    int64_t dropped = 0;
    for (int i = 0; i < n; i++) {
        const struct hp_st_tensor *t = hp_st_at(set, i);
        const struct hp_head_tensor *ht = head_tensor_of(m, t);
        const bool f32 = as_f32(m, t);
        const size_t es = f32 ? 4 : (size_t)t->esize;
        o[i] = (struct hp_st_out){t->name, f32 ? "F32" : t->dtype_name, t->n_dims, {0},
                                  f32 ? n_elements(t) * es : t->nbytes};
        memcpy(o[i].shape, t->shape, sizeof o[i].shape);
        if (ht) {
            int nb;
            int64_t other = t->n_dims == 2 ? t->shape[1 - ht->axis] : 1, w;
            o[i].shape[ht->axis] = 0;
            for (int s = 0; s < ht->n_seg; s++) {
                kept_blocks(m, k, ht, s, &nb, &w);
                o[i].shape[ht->axis] += (int64_t)nb * m->info.d_head * ht->blk;
            }
            o[i].nbytes = (size_t)(o[i].shape[ht->axis] * other) * es;
            dropped += (t->shape[ht->axis] - o[i].shape[ht->axis]) * other;
        }
    }
    FILE *f = fopen(path, "wb");
    enum hp_status st = f ? hp_st_write_header(f, path, o, n, err)
                          : hp_fail(err, HP_ERR_IO, "%s: cannot create: %s", path, hp_strerror(errno));
    bool ok = st == HP_OK, nomem = false;
    for (int i = 0; ok && i < n; i++)
        ok = put_tensor(f, m, k, hp_st_at(set, i), &nomem);
    if (f) {
        bool closed = close_synced(f);
        if (st == HP_OK && nomem)
            st = hp_fail(err, HP_ERR_NOMEM, "%s: out of memory dequantizing a tensor", path);
        else if (st == HP_OK && !(ok && closed))
            st = hp_fail(err, HP_ERR_IO, "%s: cannot write: %s", path, hp_strerror(errno));
    }
    if (st == HP_OK) {
        struct stat sb;
        info->bytes = stat(path, &sb) == 0 ? (int64_t)sb.st_size : 0;
        info->n_params = m->info.n_params - dropped;
        for (int i = 0; i < hp_st_n_shards(set); i++) {
            size_t len;
            hp_st_shard_bytes(set, i, &len);
            info->source_bytes += (int64_t)len;
        }
        /* a GGUF model's matrices, views beside its shard (header and vectors in f32), counted in f32 as the
         * model is measured against what its export writes (hp_export_info) */
        for (int i = 0; m->gguf && i < n; i++)
            if (hp_st_at(set, i)->n_dims == 2)
                info->source_bytes += (int64_t)(n_elements(hp_st_at(set, i)) * sizeof(float));
    }
    free(o);
    return st;
}

// --- config.json ------------------------------------------------------------------

/* {"layer": [heads]} of a pruned map, layers without pruned heads left out. */
static cJSON *pruned_object(const struct hp_model_info *in, const uint8_t *pruned)
{
    cJSON *o = cJSON_CreateObject();
    for (int l = 0; o && l < in->n_layers; l++) {
        cJSON *a = NULL;
        for (int h = 0; h < in->n_heads; h++)
            if (pruned[l * in->n_heads + h]) {
                if (!a) {
                    char key[16];
                    snprintf(key, sizeof key, "%d", l);
                    a = cJSON_AddArrayToObject(o, key);
                    if (!a)
                        break;
                }
                cJSON_AddItemToArray(a, cJSON_CreateNumber(h));
            }
    }
    return o;
}

/* Set obj[key] = v, replacing every earlier value (model.c reads a repeated key's last). */
static void set_key(cJSON *obj, const char *key, cJSON *v)
{
    while (cJSON_GetObjectItemCaseSensitive(obj, key))
        cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    cJSON_AddItemToObject(obj, key, v);
}

static enum hp_status write_config(const struct hp_model *m, const struct keep *k, const char *path,
                                   const struct hp_export_info *info, struct hp_error *err)
{
    const struct hp_model_info *in = &m->info;
    /* the text read_json accepted: one JSON value, no NUL anywhere */
    cJSON *c = NULL;
    hp_json_parse(path, 1, m->config_text, strlen(m->config_text), NULL, &c, NULL);
    if (!c)
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
    cJSON *rec = cJSON_CreateObject();
    if (rec) {
        cJSON_AddNumberToObject(rec, "n_heads", in->n_heads);
        cJSON_AddNumberToObject(rec, "n_kv_heads", in->n_kv_heads);
        cJSON_AddItemToObject(rec, "pruned_heads", pruned_object(in, k->pruned));
        cJSON_AddStringToObject(rec, "written_by", "headprune prune");
    }
    set_key(c, "headprune", rec);
    if (in->hf_prune == HP_HF_PRUNE_COMPACT) {
        bool compact = info->hf_loadable;
        set_key(c, "num_attention_heads", cJSON_CreateNumber(compact ? k->n_q[0] : in->n_heads));
        set_key(c, "num_key_value_heads", cJSON_CreateNumber(compact ? k->n_kv[0] : in->n_kv_heads));
        set_key(c, "head_dim", cJSON_CreateNumber(in->d_head));
    } else if (in->hf_prune == HP_HF_PRUNE_KEY) { /* (GPT-NeoX has no _prune_heads to read it with) */
        set_key(c, "pruned_heads", pruned_object(in, k->pruned));
    }
    char *txt = cJSON_Print(c);
    cJSON_Delete(c);
    if (!txt)
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
    FILE *f = fopen(path, "w");
    bool ok = f && put(f, txt, strlen(txt)) && put(f, "\n", 1);
    bool closed = f && close_synced(f);
    free(txt);
    if (!f || !ok || !closed)
        return hp_fail(err, HP_ERR_IO, "%s: cannot write: %s", path, hp_strerror(errno));
    return HP_OK;
}

// --- the other files ----------------------------------------------------------------

/*
 * The files of a model directory an export copies, by name: the tokenizer's,
 * generation settings, the model card and licence, and sentence-transformers'
 * module descriptions (its numbered module folders are copied too). Nothing
 * else: a directory may hold data or results that are no part of the model.
 */
static bool copied(const char *name)
{
    static const char *const prefix[] = {"tokenizer", "vocab", "merges", "special_tokens_map", "added_tokens",
                                         "generation_config", "spiece", "sentencepiece", "chat_template",
                                         "README", "LICENSE", "LICENCE", "NOTICE", "USE_POLICY", "modules.json",
                                         "sentence_bert_config", "config_sentence_transformers", "preprocessor_config"};
    for (size_t i = 0; i < sizeof prefix / sizeof *prefix; i++)
        if (strncmp(name, prefix[i], strlen(prefix[i])) == 0)
            return true;
    return false;
}

/* A sentence-transformers module folder: "1_Pooling", "2_Normalize", ... */
static bool module_dir(const char *name)
{
    size_t i = 0;
    while (name[i] >= '0' && name[i] <= '9')
        i++;
    return i > 0 && name[i] == '_';
}

static enum hp_status copy_file(const char *from, const char *to, struct hp_error *err)
{
    FILE *in = fopen(from, "rb");
    if (!in)
        return hp_fail(err, HP_ERR_IO, "%s: cannot read: %s", from, hp_strerror(errno));
    FILE *out = fopen(to, "wb");
    if (!out) {
        fclose(in);
        return hp_fail(err, HP_ERR_IO, "%s: cannot create: %s", to, hp_strerror(errno));
    }
    char buf[1 << 16];
    size_t n;
    bool ok = true;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0)
        ok = put(out, buf, n);
    bool rd = !ferror(in);
    fclose(in);
    bool closed = close_synced(out);
    if (!rd)
        return hp_fail(err, HP_ERR_IO, "%s: cannot read", from);
    if (!ok || !closed)
        return hp_fail(err, HP_ERR_IO, "%s: cannot write: %s", to, hp_strerror(errno));
    return HP_OK;
}

/* The files of from an export copies (copied, above) into to; in a module folder (depth 1) every file. */
static enum hp_status copy_rest(const char *from, const char *to, int depth, struct hp_error *err)
{
    DIR *d = opendir(from);
    if (!d)
        return hp_fail(err, HP_ERR_IO, "%s: cannot list: %s", from, hp_strerror(errno));
    enum hp_status st = HP_OK;
    struct dirent *e;
    while (st == HP_OK && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char *src = NULL, *dst = NULL;
        if ((st = hp_path_make(&src, err, "%s/%s", from, e->d_name)) == HP_OK)
            st = hp_path_make(&dst, err, "%s/%s", to, e->d_name);
        struct stat sb;
        if (st != HP_OK || stat(src, &sb) != 0) {
            /* a dangling link is left out; a name over the system's limit is not */
            if (st == HP_OK && errno == ENAMETOOLONG)
                st = hp_fail(err, HP_ERR_IO, "%s: cannot read: %s", src, hp_strerror(errno));
        } else if (S_ISREG(sb.st_mode) && (depth > 0 || copied(e->d_name))) {
            st = copy_file(src, dst, err);
        } else if (S_ISDIR(sb.st_mode) && depth == 0 && module_dir(e->d_name)) {
            if (mkdir(dst, 0755) != 0)
                st = hp_fail(err, HP_ERR_IO, "%s: cannot create: %s", dst, hp_strerror(errno));
            else
                st = copy_rest(src, dst, 1, err);
        }
        free(src);
        free(dst);
    }
    closedir(d);
    return st;
}

/* Remove what the export wrote under dir (two levels at most), then dir. */
static void remove_tree(const char *dir, int depth)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            /* a name that cannot be made is left: a cut one could be another file */
            char *p;
            if (hp_path_make(&p, NULL, "%s/%s", dir, e->d_name) != HP_OK)
                continue;
            struct stat sb;
            if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode) && depth < 2)
                remove_tree(p, depth + 1);
            else
                unlink(p);
            free(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

// --- the export ---------------------------------------------------------------------

enum hp_status hp_model_export(const struct hp_model *m, const struct hp_mask *remove, const char *out_dir,
                               struct hp_export_info *info, struct hp_error *err)
{
    const struct hp_model_info *in = &m->info;
    memset(info, 0, sizeof *info);
    if (remove->n_layers != in->n_layers || remove->n_heads != in->n_heads)
        return hp_fail(err, HP_ERR_ARG, "the mask is %d x %d heads but %s has %d x %d", remove->n_layers,
                       remove->n_heads, m->dir, in->n_layers, in->n_heads);
    for (int l = 0; l < in->n_layers; l++)
        if (remove->mlp[l] != 1.0f)
            return hp_fail(err, HP_ERR_UNSUPPORTED, "mlp:%d: a pruned checkpoint removes attention heads; an MLP block "
                           "is not removed from a checkpoint (transformers has no model without one: evaluate the "
                           "mask instead)", l);
    for (int i = 0; i < in->n_layers * in->n_heads; i++)
        if (remove->gate[i] != 0.0f && remove->gate[i] != 1.0f)
            return hp_fail(err, HP_ERR_ARG, "head %d.%d has gate %g: a pruned checkpoint removes heads whole (0) or keeps "
                           "them (1)", i / in->n_heads, i % in->n_heads, (double)remove->gate[i]);
    for (int i = 0; m->qk_norm_whole && i < in->n_layers * in->n_heads; i++)
        if (remove->gate[i] == 0.0f)
            return hp_fail(err, HP_ERR_UNSUPPORTED,
                           "%s: a %s without head %d.%d would not be the masked model: its q_norm and k_norm run over "
                           "every head's queries and keys together, so removing one changes the others' (evaluate "
                           "the mask instead; headprune writes no such checkpoint)", m->dir, in->model_type,
                           i / in->n_heads, i % in->n_heads);
    size_t n = strlen(out_dir);
    while (n > 1 && out_dir[n - 1] == '/')
        n--;
    if (n == 0)
        return hp_fail(err, HP_ERR_ARG, "'%s': not a usable output directory name", out_dir);
    char *out, *tmp = NULL, *path = NULL;
    enum hp_status st = hp_path_make(&out, err, "%.*s", (int)n, out_dir);
    if (st != HP_OK)
        return st;
    struct stat sb;
    if (stat(out, &sb) == 0) {
        st = hp_fail(err, HP_ERR_ARG, "%s: already exists (name a new directory, or remove it first)", out);
        free(out);
        return st;
    }
    if (errno == ENAMETOOLONG) {
        st = hp_fail(err, HP_ERR_ARG, "%s: cannot create: %s", out, hp_strerror(errno));
        free(out);
        return st;
    }

    struct keep k = {0};
    st = keep_make(m, remove, &k, info, err);
    if (st == HP_OK)
        st = hp_path_make(&tmp, err, "%s.partial-%ld", out, (long)getpid());
    if (st == HP_OK && mkdir(tmp, 0755) != 0) {
        /* tmp is the export's own: the user named out, and its folder */
        int e = errno;
        const char *slash = strrchr(out, '/');
        if (e == ENOENT || e == ENOTDIR)
            st = hp_fail(err, HP_ERR_IO, "%s: folder '%.*s' does not exist (create it first)", out,
                         slash ? (slash == out ? 1 : (int)(slash - out)) : 1, slash ? out : ".");
        else
            st = hp_fail(err, HP_ERR_IO, "%s: cannot create: %s", out, hp_strerror(e));
        free(tmp);
        tmp = NULL;
    }
    if (st == HP_OK && (st = hp_path_make(&path, err, "%s/model.safetensors", tmp)) == HP_OK)
        st = write_weights(m, &k, path, info, err);
    free(path);
    path = NULL;
    if (st == HP_OK && (st = hp_path_make(&path, err, "%s/config.json", tmp)) == HP_OK)
        st = write_config(m, &k, path, info, err);
    free(path);
    /* the tokenizer and the rest beside the weights; a GGUF file named alone has nothing beside it */
    if (st == HP_OK && !(stat(m->dir, &sb) == 0 && S_ISREG(sb.st_mode)))
        st = copy_rest(m->dir, tmp, 0, err);
    if (st == HP_OK && rename(tmp, out) != 0)
        st = hp_fail(err, HP_ERR_IO, "%s: cannot rename to %s: %s", tmp, out, hp_strerror(errno));
    if (st != HP_OK && tmp)
        remove_tree(tmp, 0);
    keep_free(&k);
    free(tmp);
    free(out);
    return st;
}
