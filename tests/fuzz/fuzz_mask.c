/*
 * fuzz_mask -- mask specs (engine/core/mask.c: hp_mask_parse, hp_mask_format).
 *
 * Input: byte 0 picks keep (bit 0) and the model shape (bits 1-2: 4 layers x
 * 4 heads, 3 x 8 with 2 KV groups, 1 x 1, 12 x 12 with 4 groups); the rest
 * is the spec. A spec that parses must format to text that parses back to
 * the same gates, and an ablated-count in range.
 */
#include "fuzz_common.h"
#include "headprune.h"

#define MAX_INPUT 4096

static struct hp_model_info shape(int n_layers, int n_heads, int n_kv_heads)
{
    struct hp_model_info info;
    memset(&info, 0, sizeof info);
    info.arch = HP_ARCH_LLAMA;
    strcpy(info.model_type, "llama");
    info.n_layers = n_layers;
    info.n_heads = n_heads;
    info.n_kv_heads = n_kv_heads;
    info.d_head = 8;
    info.d_model = n_heads * 8;
    info.n_vocab = 97;
    info.n_ctx = 64;
    info.causal = true;
    info.has_lm_head = true;
    return info;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > MAX_INPUT)
        return 0;
    static const int shapes[4][3] = {{4, 4, 4}, {3, 8, 2}, {1, 1, 1}, {12, 12, 4}};
    bool keep = data[0] & 1;
    const int *s = shapes[(data[0] >> 1) & 3];
    struct hp_model_info info = shape(s[0], s[1], s[2]);
    char *spec = fz_strndup(data + 1, size - 1);
    struct hp_mask *m = NULL;
    struct hp_error err = {{0}};
    if (hp_mask_parse(spec, keep, &info, &m, &err) != HP_OK) {
        FZ_CHECK(m == NULL, "a failed parse handed back a mask");
        FZ_CHECK_ERR(err);
        free(spec);
        return 0;
    }
    FZ_CHECK(m && m->n_layers == info.n_layers && m->n_heads == info.n_heads, "mask of the wrong shape");
    int total = info.n_layers * info.n_heads, n_abl = hp_mask_count_ablated(m);
    FZ_CHECK(n_abl >= 0 && n_abl <= total, "%d ablated of %d", n_abl, total);
    for (int i = 0; i < total; i++)
        FZ_CHECK(m->gate[i] == 0.0f || m->gate[i] == 1.0f, "gate %d is %g", i, (double)m->gate[i]);
    char *text = hp_mask_format(m);
    FZ_CHECK(text != NULL, "format failed");
    struct hp_mask *back = NULL;
    enum hp_status st = hp_mask_parse(text, false, &info, &back, &err);
    FZ_CHECK(st == HP_OK, "formatted mask '%s' does not parse back: %s", text, err.msg);
    FZ_CHECK(memcmp(back->gate, m->gate, (size_t)total * sizeof *m->gate) == 0,
             "'%s' parsed back to other gates (spec '%s')", text, spec);
    hp_mask_free(back);
    free(text);
    hp_mask_free(m);
    free(spec);
    return 0;
}
