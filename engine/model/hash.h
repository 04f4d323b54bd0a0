/*
 * hash.h -- content digests (XXH3-128, as 32 hex digits).
 *
 * A job's identity is a digest of everything that determines its result:
 * model bytes, data, mask, ablation method, engine numeric version.
 */
#ifndef HP_HASH_H
#define HP_HASH_H

#include "headprune.h"

#define HP_DIGEST_HEX 33 /* 32 hex digits + NUL */

/* config.json text and every weight shard's bytes (a GGUF model's: the file's bytes). */
void hp_digest_model(const struct hp_model *m, char hex[HP_DIGEST_HEX]);
/* shape, ids, labels, attention and type masks as loaded; for task data (d->task) also answers, wrong answers,
 * answer positions and corrupt prompts (not the line numbers), so that other data digests as before */
void hp_digest_data(const struct hp_data *d, char hex[HP_DIGEST_HEX]);
void hp_digest_text(const char *text, char hex[HP_DIGEST_HEX]);
/* the content address of one variant's result */
void hp_digest_job(const char *model_digest, const char *data_digest, enum hp_ablation abl,
                   const char *mask_text, char hex[HP_DIGEST_HEX]);

#endif
