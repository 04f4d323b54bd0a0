/* testmodel.h -- edited copies of the single-file f32 fixtures, for tests that
 * compare a model with a variant of its own weights (test_invariants, test_reuse). */
#ifndef HP_TESTMODEL_H
#define HP_TESTMODEL_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "testutil.h"

/*
 * Copy a single-file f32 fixture's config.json and model.safetensors from
 * folder src to folder dst, multiplying in tensor `name` the inputs of head h
 * by factor: columns [h*dh, (h+1)*dh) of a Linear (out, in) weight, or rows of
 * a Conv1D (in, out) weight. Factor 0 zeroes them (the head's output projection
 * removed); a large factor makes the head's output dominate its layer's.
 */
static inline void tu_scaled_head_copy(const char *src, const char *dst, const char *name, bool conv1d, int h,
                                       int dh, float factor)
{
    char path[4200];
    size_t n;
    snprintf(path, sizeof path, "%s/config.json", src);
    char *cfg = tu_slurp(path, &n);
    snprintf(path, sizeof path, "%s/config.json", dst);
    tu_spit(path, cfg, n);
    free(cfg);
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    char *st = tu_slurp(path, &n);
    uint64_t hl = 0;
    memcpy(&hl, st, 8); /* little-endian host */
    cJSON *hdr = cJSON_ParseWithLength(st + 8, hl);
    cJSON *t = cJSON_GetObjectItem(hdr, name);
    cr_assert(t, "no tensor %s", name);
    cJSON *shape = cJSON_GetObjectItem(t, "shape");
    int rows = cJSON_GetArrayItem(shape, 0)->valueint, cols = cJSON_GetArrayItem(shape, 1)->valueint;
    size_t off = 8 + hl + (size_t)cJSON_GetArrayItem(cJSON_GetObjectItem(t, "data_offsets"), 0)->valuedouble;
    cr_assert_str_eq(cJSON_GetObjectItem(t, "dtype")->valuestring, "F32");
    char *w = st + off; /* not necessarily aligned for float */
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            int in_idx = conv1d ? r : c;
            if (in_idx >= h * dh && in_idx < (h + 1) * dh) {
                float x;
                memcpy(&x, w + ((size_t)r * cols + c) * sizeof x, sizeof x);
                x *= factor;
                memcpy(w + ((size_t)r * cols + c) * sizeof x, &x, sizeof x);
            }
        }
    snprintf(path, sizeof path, "%s/model.safetensors", dst);
    tu_spit(path, st, n);
    cJSON_Delete(hdr);
    free(st);
}

#endif
