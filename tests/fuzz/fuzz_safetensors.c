/*
 * fuzz_safetensors -- the safetensors header (engine/model/safetensors.c).
 *
 * Input: a whole safetensors file (u64 header length, JSON header, data).
 * Indexed from memory with hp_st_open_buffer; every tensor it accepts must
 * lie inside the input, have the byte count its dtype and shape need, and be
 * found again by name.
 */
#include "fuzz_common.h"
#include "safetensors.h"

#define MAX_INPUT (1 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > MAX_INPUT)
        return 0;
    struct hp_st_set *set = NULL;
    struct hp_error err = {{0}};
    enum hp_status st = hp_st_open_buffer("fuzz.safetensors", data, size, &set, &err);
    if (st != HP_OK) {
        FZ_CHECK(set == NULL, "a failed open handed back a set");
        FZ_CHECK_ERR(err);
        return 0;
    }
    int n = hp_st_count(set);
    FZ_CHECK(hp_st_n_shards(set) == 1, "one buffer, %d shards", hp_st_n_shards(set));
    for (int i = 0; i < n; i++) {
        struct hp_st_tensor *t = hp_st_at(set, i);
        const uint8_t *p = t->data;
        FZ_CHECK(p >= data + 8 && p + t->nbytes <= data + size, "tensor '%s' outside the input", t->name);
        FZ_CHECK(t->n_dims >= 0 && t->n_dims <= 8, "tensor '%s' has %d dims", t->name, t->n_dims);
        uint64_t nel = 1;
        for (int d = 0; d < t->n_dims; d++)
            nel *= (uint64_t)t->shape[d];
        if (t->dtype == HP_DT_F32)
            FZ_CHECK(t->nbytes == nel * 4, "f32 tensor '%s' of %zu bytes", t->name, t->nbytes);
        else if (t->dtype == HP_DT_F16 || t->dtype == HP_DT_BF16)
            FZ_CHECK(t->nbytes == nel * 2, "16-bit tensor '%s' of %zu bytes", t->name, t->nbytes);
        FZ_CHECK(hp_st_find(set, t->name) == t, "tensor '%s' not found by its name", t->name);
        /* touch the first and last byte: ASan sees a read past the input */
        volatile uint8_t sink = 0;
        if (t->nbytes)
            sink ^= p[0] ^ p[t->nbytes - 1];
        (void)sink;
    }
    /* a name the input most likely lacks (the fuzzer can write any name, this one too): the lookup
     * must agree with a scan of the names */
    static const char absent[] = "\x01no such tensor";
    bool there = false;
    for (int i = 0; i < n; i++)
        there |= strcmp(hp_st_at(set, i)->name, absent) == 0;
    FZ_CHECK((hp_st_find(set, absent) != NULL) == there, "the lookup of an absent name disagrees with the names");
    hp_st_close(set);
    return 0;
}
