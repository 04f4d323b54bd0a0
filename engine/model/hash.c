/*
 * hash.c -- content digests with XXH3-128 (libxxhash).
 *
 * Every field is length-prefixed before hashing so that no two different
 * inputs concatenate to the same byte stream.
 */
#include "hash.h"

#include <stdio.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "gguf.h"
#include "model.h"

static void put(XXH3_state_t *s, const void *p, size_t n)
{
    uint64_t len = n;
    XXH3_128bits_update(s, &len, sizeof len);
    if (n)
        XXH3_128bits_update(s, p, n);
}

static void finish(XXH3_state_t *s, char hex[HP_DIGEST_HEX])
{
    XXH128_hash_t h = XXH3_128bits_digest(s);
    snprintf(hex, HP_DIGEST_HEX, "%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
}

void hp_digest_model(const struct hp_model *m, char hex[HP_DIGEST_HEX])
{
    XXH3_state_t s;
    XXH3_128bits_reset(&s);
    put(&s, "headprune-model-1", 17);
    put(&s, m->config_text, m->config_text ? strlen(m->config_text) : 0);
    if (m->gguf) { /* the file: its blocks are the weights (the set's shard holds its vectors dequantized) */
        size_t len;
        const void *p = hp_gguf_bytes(m->gguf, &len);
        put(&s, p, len);
    }
    for (int i = 0; !m->gguf && i < hp_st_n_shards(m->st); i++) {
        size_t len;
        const void *p = hp_st_shard_bytes(m->st, i, &len);
        put(&s, p, len);
    }
    finish(&s, hex);
}

void hp_digest_data(const struct hp_data *d, char hex[HP_DIGEST_HEX])
{
    XXH3_state_t s;
    XXH3_128bits_reset(&s);
    size_t n = (size_t)d->n_seqs * d->seq_len;
    int32_t shape[2] = {d->n_seqs, d->seq_len};
    put(&s, "headprune-data-1", 16);
    put(&s, shape, sizeof shape);
    put(&s, d->ids, n * sizeof *d->ids);
    put(&s, d->labels, d->labels ? n * sizeof *d->labels : 0);
    put(&s, d->seq_labels, d->seq_labels ? (size_t)d->n_seqs * sizeof *d->seq_labels : 0);
    put(&s, d->attn_mask, d->attn_mask ? n * sizeof *d->attn_mask : 0);
    put(&s, d->type_ids, d->type_ids ? n * sizeof *d->type_ids : 0);
    /* task rows only: other data's digest stays what it was, as stored results are keyed by it */
    const struct hp_task *k = d->task;
    if (k) {
        size_t rows = (size_t)d->n_seqs * sizeof(int32_t);
        put(&s, "headprune-task-1", 16);
        put(&s, k->answer, rows);
        put(&s, k->wrong, k->wrong ? rows : 0);
        put(&s, k->pos, rows);
        put(&s, k->corrupt, k->corrupt ? n * sizeof *k->corrupt : 0);
        /* swapped data (denoise's) only, so the unswapped digest stays what it was; its ids and corrupt
         * prompts alone would digest like a file that gives the corrupt prompts as prompts */
        if (k->swapped)
            put(&s, "headprune-task-swapped-1", 24);
    }
    finish(&s, hex);
}

void hp_digest_text(const char *text, char hex[HP_DIGEST_HEX])
{
    XXH3_state_t s;
    XXH3_128bits_reset(&s);
    put(&s, text, strlen(text));
    finish(&s, hex);
}

void hp_digest_job(const char *model_digest, const char *data_digest, enum hp_ablation abl, const char *mask_text,
                   char hex[HP_DIGEST_HEX])
{
    XXH3_state_t s;
    XXH3_128bits_reset(&s);
    int version = HP_NUMERIC_VERSION;
    const char *an = hp_ablation_name(abl);
    put(&s, "headprune-job-1", 15);
    put(&s, &version, sizeof version);
    put(&s, model_digest, strlen(model_digest));
    put(&s, data_digest, strlen(data_digest));
    put(&s, an, strlen(an));
    put(&s, mask_text, strlen(mask_text));
    finish(&s, hex);
}
