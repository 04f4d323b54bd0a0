/*
 * fuzz_data -- the held-out data readers (engine/text/data.c, engine/text/text.c).
 * Built once per reader, HP_FUZZ_EXT naming it:
 *   data_npy      .npy through hp_data_load
 *   data_jsonl    .jsonl of ids through hp_data_load
 *   data_bin      .bin (llm.c or raw nanoGPT tokens) through hp_data_load
 *   data_txt      .txt through hp_data_load_for, tokenized
 *   data_textjsonl .jsonl of "text" (or pairs, labels) through hp_data_load_for
 *
 * Input: byte 0 gives seq_len (bits 0-5; 0 = from the file), the tokenizer of
 * the text readers (bit 6: tests/fixtures/tokenizers/bert-wordpiece, else
 * gpt2-bpe) and whether they get a model (bit 7: a BERT classifier with
 * labels "neg" and "pos"); the rest is the file. A load that succeeds must
 * give rows that can all be read, in the shape asked for; the text cache is
 * off (no HOME, XDG_CACHE_HOME or HP_CACHE_DIR).
 */
#include "fuzz_common.h"
#include "headprune.h"

#ifndef HP_FUZZ_EXT
#error "HP_FUZZ_EXT must be one of npy, jsonl, bin, txt, textjsonl"
#endif

#define MAX_INPUT (64 << 10)

static char path[600];
static bool text_reader;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* the tokenized-text cache would write a file for every input */
    unsetenv("HP_CACHE_DIR");
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    const char *ext = HP_FUZZ_EXT;
    text_reader = !strcmp(ext, "txt") || !strcmp(ext, "textjsonl");
    snprintf(path, sizeof path, "%s/data.%s", fz_scratch(), !strcmp(ext, "textjsonl") ? "jsonl" : ext);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > MAX_INPUT)
        return 0;
    int seq_len = data[0] & 0x3f;
    fz_write(path, data + 1, size - 1);

    struct hp_data *d = NULL;
    struct hp_error err = {{0}};
    enum hp_status st;
    if (text_reader) {
        char tok[1024];
        snprintf(tok, sizeof tok, "%s/tests/fixtures/tokenizers/%s", HP_FUZZ_ROOT,
                 (data[0] & 0x40) ? "bert-wordpiece" : "gpt2-bpe");
        static const char *const labels[] = {"neg", "pos"};
        struct hp_model_info info;
        memset(&info, 0, sizeof info);
        info.arch = HP_ARCH_BERT;
        strcpy(info.model_type, "bert");
        info.n_layers = 2;
        info.n_heads = 2;
        info.n_kv_heads = 2;
        info.d_head = 8;
        info.d_model = 16;
        info.n_vocab = 1 << 20;
        info.n_ctx = 512;
        info.n_labels = 2;
        info.label_names = labels;
        st = hp_data_load_for(path, tok, (data[0] & 0x80) ? &info : NULL, seq_len, &d, &err);
    } else {
        st = hp_data_load(path, seq_len, &d, &err);
    }
    if (st != HP_OK) {
        FZ_CHECK(d == NULL, "a failed load handed back data");
        FZ_CHECK_ERR(err);
        return 0;
    }
    FZ_CHECK(d && d->n_seqs >= 1 && d->seq_len >= 1, "loaded %d rows of %d", d ? d->n_seqs : -1,
             d ? d->seq_len : -1);
    if (seq_len && !text_reader)
        FZ_CHECK(d->seq_len == seq_len, "asked rows of %d, got %d", seq_len, d->seq_len);
    if (seq_len && text_reader)
        FZ_CHECK(d->seq_len <= seq_len, "asked rows of %d, got %d", seq_len, d->seq_len);
    size_t n = (size_t)d->n_seqs * (size_t)d->seq_len;
    FZ_CHECK(n <= (size_t)MAX_INPUT * 64, "%zu ids from a %zu-byte file", n, size);
    /* read every cell: ASan sees an array shorter than its shape */
    volatile int64_t sink = 0;
    for (size_t i = 0; i < n; i++) {
        sink += d->ids[i];
        if (d->labels)
            sink += d->labels[i];
        if (d->attn_mask)
            FZ_CHECK(d->attn_mask[i] <= 1, "attention mask %d at %zu", d->attn_mask[i], i);
        if (d->type_ids)
            sink += d->type_ids[i];
    }
    for (int i = 0; d->seq_labels && i < d->n_seqs; i++)
        sink += d->seq_labels[i];
    (void)sink;
    FZ_CHECK(d->path && strcmp(d->path, path) == 0, "path not the file's");
    if (hp_data_check_vocab(d, 97, &err) != HP_OK)
        FZ_CHECK_ERR(err);
    hp_data_free(d);
    return 0;
}
