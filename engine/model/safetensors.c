/*
 * safetensors.c -- map safetensors files and index their tensors.
 *
 * Format: u64 little-endian header length N, N bytes of JSON
 * {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__"},
 * then the data area; offsets are relative to its start.
 * Everything read from the file is checked before it is trusted.
 * Must not: know about models or configs.
 */
#define _POSIX_C_SOURCE 200809L
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"
#include "util.h"

struct shard {
    char *path;
    void *map;
    size_t len;
    bool borrowed; /* map is the caller's buffer (hp_st_open_buffer), not ours to unmap */
};

struct hp_st_set {
    struct shard *shards;
    int n_shards;
    struct hp_st_tensor *t;
    int n, cap;
    /* every tensor, sorted by name: duplicates sit side by side and lookups
     * are a binary search, so a header of n names costs O(n log n), not n^2.
     * Rebuilt after each shard (t may have moved). */
    struct hp_st_tensor **by_name;
};

static int dtype_size(const char *s, enum hp_dtype *dt)
{
    static const struct { const char *name; int size; enum hp_dtype dt; } tab[] = {
        {"F32", 4, HP_DT_F32}, {"F16", 2, HP_DT_F16}, {"BF16", 2, HP_DT_BF16},
        {"F64", 8, HP_DT_OTHER}, {"I64", 8, HP_DT_OTHER}, {"I32", 4, HP_DT_OTHER},
        {"I16", 2, HP_DT_OTHER}, {"I8", 1, HP_DT_OTHER}, {"U8", 1, HP_DT_OTHER},
        {"BOOL", 1, HP_DT_OTHER}, {"U16", 2, HP_DT_OTHER}, {"U32", 4, HP_DT_OTHER},
        {"U64", 8, HP_DT_OTHER}, {"F8_E4M3", 1, HP_DT_OTHER}, {"F8_E5M2", 1, HP_DT_OTHER},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (strcmp(s, tab[i].name) == 0) {
            *dt = tab[i].dt;
            return tab[i].size;
        }
    return 0;
}

static int cmp_by_offset(const void *a, const void *b)
{
    const struct hp_st_tensor *x = *(struct hp_st_tensor *const *)a;
    const struct hp_st_tensor *y = *(struct hp_st_tensor *const *)b;
    if ((const char *)x->data != (const char *)y->data)
        return (const char *)x->data < (const char *)y->data ? -1 : 1;
    return 0;
}

static int cmp_by_name(const void *a, const void *b)
{
    const struct hp_st_tensor *x = *(struct hp_st_tensor *const *)a;
    const struct hp_st_tensor *y = *(struct hp_st_tensor *const *)b;
    return strcmp(x->name, y->name);
}

/* Sort every tensor of the set by name and refuse a name that repeats
 * (within this shard or across shards). */
static enum hp_status index_names(struct hp_st_set *set, const char *path, struct hp_error *err)
{
    free(set->by_name);
    set->by_name = malloc((size_t)(set->n > 0 ? set->n : 1) * sizeof *set->by_name);
    if (!set->by_name)
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; i < set->n; i++)
        set->by_name[i] = &set->t[i];
    hp_qsort(set->by_name, (size_t)set->n, sizeof *set->by_name, cmp_by_name);
    for (int i = 1; i < set->n; i++)
        if (strcmp(set->by_name[i - 1]->name, set->by_name[i]->name) == 0)
            return hp_fail(err, HP_ERR_FORMAT, "%s: tensor '%s' appears twice", path, set->by_name[i]->name);
    return HP_OK;
}

/* t as the set's next tensor (its name owned by the set from here, freed on failure). */
static enum hp_status push(struct hp_st_set *set, struct hp_st_tensor *t, const char *path, struct hp_error *err)
{
    if (set->n == set->cap) {
        int cap = set->cap ? set->cap * 2 : 64;
        void *p = realloc(set->t, (size_t)cap * sizeof *set->t);
        if (!p) {
            free(t->name);
            return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
        }
        set->t = p;
        set->cap = cap;
    }
    set->t[set->n++] = *t;
    return HP_OK;
}

/* A JSON number that is a whole number in [0, max] (max below 2^53, so the
 * double holds it exactly and the cast is defined). */
static bool json_uint(const cJSON *v, double max, uint64_t *out)
{
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= max) ||
        v->valuedouble != floor(v->valuedouble))
        return false;
    *out = (uint64_t)v->valuedouble;
    return true;
}

static enum hp_status index_header(struct hp_st_set *set, struct shard *sh,
                                   const char *json, size_t json_len,
                                   const char *data, size_t data_len,
                                   struct hp_error *err)
{
    const char *path = sh->path;
    cJSON *root;
    enum hp_status st = hp_json_parse(path, 0, json, json_len, NULL, &root, err);
    if (st != HP_OK)
        return st; /* a tensor name cut at a NUL would be bound as another tensor */
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return hp_fail(err, HP_ERR_FORMAT, "%s: header is not a JSON object (corrupt or not a safetensors file)", path);
    }
    int first = set->n;
    cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (strcmp(e->string, "__metadata__") == 0)
            continue;
        cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
        cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        if (!cJSON_IsString(dt) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs) ||
            cJSON_GetArraySize(offs) != 2) {
            st = hp_fail(err, HP_ERR_FORMAT, "%s: tensor '%s' lacks dtype, shape or data_offsets", path, e->string);
            break;
        }
        struct hp_st_tensor t = {0};
        int esize = dtype_size(dt->valuestring, &t.dtype);
        if (esize == 0) {
            st = hp_fail(err, HP_ERR_FORMAT, "%s: tensor '%s' has unknown dtype '%s'", path, e->string, dt->valuestring);
            break;
        }
        snprintf(t.dtype_name, sizeof t.dtype_name, "%s", dt->valuestring);
        t.esize = esize;
        t.n_dims = cJSON_GetArraySize(shape);
        if (t.n_dims > 8) {
            st = hp_fail(err, HP_ERR_FORMAT, "%s: tensor '%s' has %d dimensions (at most 8 supported)", path, e->string, t.n_dims);
            break;
        }
        /* count elements with an overflow guard: no real tensor has 2^50 */
        double nel = 1;
        uint64_t nelem = 1;
        bool bad = false;
        for (int i = 0; i < t.n_dims; i++) {
            uint64_t dim;
            if (!json_uint(cJSON_GetArrayItem(shape, i), 0x1p52, &dim)) {
                bad = true;
                break;
            }
            t.shape[i] = (int64_t)dim;
            nel *= (double)dim;
            nelem *= dim;
        }
        if (bad || nel > 1e15) {
            st = hp_fail(err, HP_ERR_FORMAT, "%s: tensor '%s' has an invalid shape", path, e->string);
            break;
        }
        cJSON *b = cJSON_GetArrayItem(offs, 0), *en = cJSON_GetArrayItem(offs, 1);
        uint64_t ub, ue;
        if (!json_uint(b, 0x1p52, &ub) || !json_uint(en, 0x1p52, &ue)) {
            /* %.15g keeps 1e300 to a few characters, where %.0f prints 301 digits */
            st = hp_fail(err, HP_ERR_FORMAT,
                         "%s: tensor '%s' has data_offsets [%.15g, %.15g], not whole byte offsets (corrupt file)",
                         path, e->string, cJSON_IsNumber(b) ? b->valuedouble : -1.0,
                         cJSON_IsNumber(en) ? en->valuedouble : -1.0);
            break;
        }
        if (ue < ub || ue > (uint64_t)data_len) {
            st = hp_fail(err, HP_ERR_FORMAT,
                         "%s: tensor '%s' has data_offsets [%llu, %llu] outside the data area of %zu bytes (truncated or corrupt file)",
                         path, e->string, (unsigned long long)ub, (unsigned long long)ue, data_len);
            break;
        }
        size_t begin = (size_t)ub, end = (size_t)ue;
        if ((uint64_t)(end - begin) != nelem * (uint64_t)esize) {
            st = hp_fail(err, HP_ERR_FORMAT, "%s: tensor '%s' spans %zu bytes but %s x shape needs %llu", path,
                         e->string, end - begin, t.dtype_name, (unsigned long long)(nelem * (uint64_t)esize));
            break;
        }
        t.data = data + begin;
        t.nbytes = end - begin;
        t.file = sh->path;
        t.name = strdup(e->string);
        if (!t.name) {
            st = hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
            break;
        }
        if ((st = push(set, &t, path, err)) != HP_OK)
            break;
    }
    cJSON_Delete(root);
    if (st == HP_OK)
        st = index_names(set, path, err);
    if (st != HP_OK)
        return st;

    /* no two tensors of this shard may share bytes */
    int cnt = set->n - first;
    struct hp_st_tensor **by = malloc((size_t)(cnt > 0 ? cnt : 1) * sizeof *by);
    if (!by)
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; i < cnt; i++)
        by[i] = &set->t[first + i];
    hp_qsort(by, (size_t)cnt, sizeof *by, cmp_by_offset);
    /* each against the furthest end of those before it: an empty tensor between two that overlap hides nothing */
    const struct hp_st_tensor *reach = cnt > 0 ? by[0] : NULL;
    for (int i = 1; i < cnt; i++) {
        const char *end = (const char *)reach->data + reach->nbytes;
        if ((const char *)by[i]->data < end && by[i]->nbytes > 0) {
            st = hp_fail(err, HP_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap in the data area (corrupt file)",
                         path, reach->name, by[i]->name);
            break;
        }
        if ((const char *)by[i]->data + by[i]->nbytes > end)
            reach = by[i];
    }
    free(by);
    return st;
}

/* Take bytes (len >= 8) as the set's next shard, then index its header.
 * The shard is recorded before anything is checked, so hp_st_close
 * releases it whatever happens (unmapping it unless borrowed). */
static enum hp_status add_bytes(struct hp_st_set *set, const char *path, void *map, size_t len, bool borrowed,
                                struct hp_error *err)
{
    void *p = realloc(set->shards, (size_t)(set->n_shards + 1) * sizeof *set->shards);
    if (!p) {
        if (!borrowed)
            munmap(map, len);
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
    }
    set->shards = p;
    struct shard *sh = &set->shards[set->n_shards++];
    sh->map = map;
    sh->len = len;
    sh->borrowed = borrowed;
    sh->path = strdup(path);
    if (!sh->path)
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);

    const unsigned char *u = map;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | u[i];
    if (n > len - 8)
        return hp_fail(err, HP_ERR_FORMAT,
                       "%s: header length %llu runs past the end of the %zu-byte file (truncated or not a safetensors file)",
                       path, (unsigned long long)n, len);
    return index_header(set, sh, (const char *)map + 8, (size_t)n,
                        (const char *)map + 8 + n, len - 8 - (size_t)n, err);
}

enum hp_status hp_st_add(struct hp_st_set *set, const char *path, struct hp_error *err)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return hp_fail(err, HP_ERR_IO, "%s: cannot open (%s)", path, hp_strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return hp_fail(err, HP_ERR_IO, "%s: cannot stat (%s)", path, hp_strerror(errno));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return hp_fail(err, HP_ERR_IO, "%s: %s, not a safetensors file", path,
                       S_ISDIR(sb.st_mode) ? "is a directory" : "not a regular file");
    }
    size_t len = (size_t)sb.st_size;
    if (len < 8) {
        close(fd);
        return hp_fail(err, HP_ERR_FORMAT, "%s: file is %zu bytes, too short for a safetensors header", path, len);
    }
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return hp_fail(err, HP_ERR_IO, "%s: cannot map (%s)", path, hp_strerror(errno));

    return add_bytes(set, path, map, len, false, err);
}

enum hp_status hp_st_open(const char *path, struct hp_st_set **out, struct hp_error *err)
{
    *out = NULL;
    struct hp_st_set *set = calloc(1, sizeof *set);
    if (!set)
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
    enum hp_status st = hp_st_add(set, path, err);
    if (st != HP_OK) {
        hp_st_close(set);
        return st;
    }
    *out = set;
    return HP_OK;
}

enum hp_status hp_st_open_buffer(const char *name, const void *buf, size_t len, struct hp_st_set **out,
                                 struct hp_error *err)
{
    *out = NULL;
    if (len < 8)
        return hp_fail(err, HP_ERR_FORMAT, "%s: %zu bytes, too short for a safetensors header", name, len);
    struct hp_st_set *set = calloc(1, sizeof *set);
    if (!set)
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", name);
    /* the cast drops const only to share the shard struct: a borrowed map is never written or unmapped */
    enum hp_status st = add_bytes(set, name, (void *)buf, len, true, err);
    if (st != HP_OK) {
        hp_st_close(set);
        return st;
    }
    *out = set;
    return HP_OK;
}

bool hp_st_shape_ok(int n_dims, const int64_t *shape)
{
    double nel = 1;
    for (int i = 0; i < n_dims && i < 8; i++) {
        if (shape[i] < 0 || shape[i] > (int64_t)1 << 52)
            nel = INFINITY;
        nel *= (double)shape[i];
    }
    return n_dims >= 0 && n_dims <= 8 && nel <= 1e15;
}

enum hp_status hp_st_add_views(struct hp_st_set *set, const struct hp_st_tensor *t, int n, struct hp_error *err)
{
    const char *path = set->n_shards ? set->shards[0].path : "(no file)";
    for (int k = 0; k < n; k++) {
        if (!hp_st_shape_ok(t[k].n_dims, t[k].shape))
            return hp_fail(err, HP_ERR_FORMAT, "%s: tensor '%s' has an invalid shape", path, t[k].name);
        struct hp_st_tensor v = t[k];
        v.file = set->n_shards ? set->shards[0].path : NULL;
        v.used = false;
        if (!(v.name = strdup(t[k].name)))
            return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
        enum hp_status st = push(set, &v, path, err);
        if (st != HP_OK)
            return st;
    }
    return index_names(set, path, err);
}

void hp_st_close(struct hp_st_set *set)
{
    if (!set)
        return;
    for (int i = 0; i < set->n; i++)
        free(set->t[i].name);
    free(set->t);
    free(set->by_name);
    for (int i = 0; i < set->n_shards; i++) {
        if (set->shards[i].map && !set->shards[i].borrowed)
            munmap(set->shards[i].map, set->shards[i].len);
        free(set->shards[i].path);
    }
    free(set->shards);
    free(set);
}

struct hp_st_tensor *hp_st_find(struct hp_st_set *set, const char *name)
{
    if (!set->by_name)
        return NULL;
    struct hp_st_tensor key = {.name = (char *)name}, *kp = &key;
    struct hp_st_tensor **hit = bsearch(&kp, set->by_name, (size_t)set->n, sizeof *set->by_name, cmp_by_name);
    return hit ? *hit : NULL;
}

int hp_st_count(const struct hp_st_set *set) { return set->n; }

struct hp_st_tensor *hp_st_at(struct hp_st_set *set, int i) { return &set->t[i]; }

int hp_st_n_shards(const struct hp_st_set *set) { return set->n_shards; }

const void *hp_st_shard_bytes(const struct hp_st_set *set, int i, size_t *len)
{
    *len = set->shards[i].len;
    return set->shards[i].map;
}

// --- writing ----------------------------------------------------------------

enum hp_status hp_st_write_header(FILE *f, const char *path, const struct hp_st_out *t, int n, struct hp_error *err)
{
    cJSON *h = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(h, "__metadata__");
    bool ok = h && meta && cJSON_AddStringToObject(meta, "format", "pt");
    uint64_t at = 0;
    for (int i = 0; ok && i < n; i++) {
        cJSON *e = cJSON_AddObjectToObject(h, t[i].name), *shape = cJSON_CreateArray(), *offs = cJSON_CreateArray();
        ok = e && shape && offs && cJSON_AddStringToObject(e, "dtype", t[i].dtype_name);
        for (int k = 0; ok && k < t[i].n_dims; k++)
            ok = cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t[i].shape[k]));
        /* offsets below 2^53 are exact as JSON numbers (cJSON holds doubles) */
        ok = ok && cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)at)) &&
             cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(at + t[i].nbytes)));
        ok = ok && cJSON_AddItemToObject(e, "shape", shape) && cJSON_AddItemToObject(e, "data_offsets", offs);
        if (!ok) {
            cJSON_Delete(shape);
            cJSON_Delete(offs);
        }
        at += t[i].nbytes;
    }
    char *js = ok ? cJSON_PrintUnformatted(h) : NULL;
    cJSON_Delete(h);
    if (!js)
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory writing the header", path);
    size_t len = strlen(js), padded = (len + 7) / 8 * 8;
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    bool wrote = fwrite(le, 1, 8, f) == 8 && fwrite(js, 1, len, f) == len;
    for (size_t i = len; wrote && i < padded; i++)
        wrote = fputc(' ', f) != EOF;
    free(js);
    if (!wrote)
        return hp_fail(err, HP_ERR_IO, "%s: cannot write: %s", path, hp_strerror(errno));
    return HP_OK;
}
