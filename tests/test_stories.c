/*
 * test_stories.c -- the committed Hugging Face conversion of stories260K is
 * exactly the real checkpoint in ../shared/models/stories260K.bin (llama2.c
 * format), read here by a second, independent reader. Together with
 * test_reference.c (headprune vs Hugging Face on that directory) this ties
 * headprune's numbers to the real trained model.
 *
 * llama2.c rotates interleaved pairs (2i, 2i+1); Hugging Face rotates halves
 * (i, i + d_head/2): HF row h*dh + j*dh/2 + i is llama2.c row h*dh + 2i + j.
 * Skipped, saying so, when ../shared is not there.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "headprune.h"
#include "safetensors.h"

Test(stories, converted_directory_equals_llama2c_checkpoint)
{
    char bin[1024], dir[1024];
    snprintf(bin, sizeof bin, "%s/stories260K.bin", getenv("HP_SHARED_MODELS"));
    snprintf(dir, sizeof dir, "%s/stories260K/model.safetensors", getenv("HP_FIXTURES"));
    FILE *f = fopen(bin, "rb");
    if (!f) {
        cr_skip_test("%s not found: the team's shared/ folder is not beside this checkout", bin);
        return;
    }
    int32_t h[7];
    cr_assert_eq(fread(h, sizeof h[0], 7, f), 7u);
    int dim = h[0], hid = h[1], L = h[2], H = h[3], KV = h[4], V = h[5], ctx = h[6], dh = dim / H;
    cr_assert(dim == 64 && hid == 172 && L == 5 && H == 8 && KV == 4 && V == 512 && ctx == 512);
    size_t n = 264128;
    float *w = malloc(n * sizeof *w);
    cr_assert_eq(fread(w, sizeof *w, n, f), n, "%s is shorter than 1056540 bytes", bin);
    fclose(f);

    struct hp_error err;
    struct hp_st_set *st;
    cr_assert_eq(hp_st_open(dir, &st, &err), HP_OK, "%s", err.msg);
    int checked = 0;
    const float *p = w;
#define TENSOR(name) ((const float *)hp_st_find(st, name)->data)
    /* plain copies: compare count floats of llama2.c at p with the named tensor */
#define SAME(name, count)                                                                  \
    do {                                                                                   \
        cr_assert(hp_st_find(st, name), "no tensor %s", name);                            \
        cr_assert(memcmp(TENSOR(name), p, (size_t)(count) * sizeof(float)) == 0, "%s differs", name); \
        p += (count);                                                                      \
        checked++;                                                                         \
    } while (0)
    char name[128];
    SAME("model.embed_tokens.weight", V * dim);
    for (int l = 0; l < L; l++) {
        snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", l);
        SAME(name, dim);
    }
    /* wq then wk: permuted rows */
    const char *qk[2] = {"q_proj", "k_proj"};
    int nh[2] = {H, KV};
    for (int which = 0; which < 2; which++)
        for (int l = 0; l < L; l++) {
            snprintf(name, sizeof name, "model.layers.%d.self_attn.%s.weight", l, qk[which]);
            cr_assert(hp_st_find(st, name), "no tensor %s", name);
            const float *hf = TENSOR(name);
            for (int hh = 0; hh < nh[which]; hh++)
                for (int j = 0; j < 2; j++)
                    for (int i = 0; i < dh / 2; i++) {
                        const float *a = hf + (size_t)(hh * dh + j * dh / 2 + i) * dim;
                        const float *b = p + (size_t)(hh * dh + 2 * i + j) * dim;
                        cr_assert(memcmp(a, b, (size_t)dim * sizeof(float)) == 0, "%s head %d row %d", name, hh, i);
                    }
            p += (size_t)nh[which] * dh * dim;
            checked++;
        }
    for (int l = 0; l < L; l++) {
        snprintf(name, sizeof name, "model.layers.%d.self_attn.v_proj.weight", l);
        SAME(name, KV * dh * dim);
    }
    for (int l = 0; l < L; l++) {
        snprintf(name, sizeof name, "model.layers.%d.self_attn.o_proj.weight", l);
        SAME(name, dim * H * dh);
    }
    for (int l = 0; l < L; l++) {
        snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", l);
        SAME(name, dim);
    }
    const char *mlp[3] = {"gate_proj", "down_proj", "up_proj"}; /* llama2.c order w1, w2, w3 */
    for (int k = 0; k < 3; k++)
        for (int l = 0; l < L; l++) {
            snprintf(name, sizeof name, "model.layers.%d.mlp.%s.weight", l, mlp[k]);
            SAME(name, hid * dim);
        }
    SAME("model.norm.weight", dim);
    cr_log_info("%d tensors of %s equal the converted directory", checked, bin);
    cr_assert_eq(checked, 1 + 5 * 9 + 1);
    hp_st_close(st);
    free(w);
}
