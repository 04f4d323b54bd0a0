/*
 * fuzz_tokenizer -- tokenizer.json (engine/text/tokenizer.c: hp_tokenizer_open,
 * hp_tokenizer_encode, hp_tokenizer_piece, hp_tokenizer_decode; engine/text/detokenize.c).
 *
 * Input: tokenizer.json text, then a 0xFF byte (never in UTF-8 JSON), then
 * text to encode (at most 4 KiB; a second 0xFF splits it into a pair). The
 * JSON is written to a scratch folder's tokenizer.json and opened; the text
 * is encoded with and without special tokens. Every id must be below
 * hp_tokenizer_n_ids and have a token string; the ids must decode (with and
 * without special tokens) or fail with a one-line error (an unsupported
 * decoder, the size bound). The text's bytes read as ids, some out of range,
 * must decode or fail the same way.
 */
#include "fuzz_common.h"
#include "headprune.h"

#define MAX_JSON (512 << 10)
#define MAX_TEXT 4096

/* Decode ids both ways: a text whose every byte is read (ASan sees a short one), or a one-line error. */
static void decode(const struct hp_tokenizer *t, const int32_t *ids, int n)
{
    for (int skip = 0; skip <= 1; skip++) {
        char *text = NULL;
        size_t len = 0;
        struct hp_error err = {{0}};
        if (hp_tokenizer_decode(t, ids, n, skip, &text, &len, &err) != HP_OK) {
            FZ_CHECK(text == NULL, "a failed decode handed back text");
            FZ_CHECK_ERR(err);
            continue;
        }
        unsigned sum = 0;
        for (size_t i = 0; i <= len; i++)
            sum += (unsigned char)text[i];
        FZ_CHECK(text[len] == 0, "decoded text not NUL-terminated (%u)", sum);
        free(text);
    }
}

static void encode(const struct hp_tokenizer *t, const char *a, size_t na, const char *b, size_t nb, bool special)
{
    struct hp_encoding e = {0};
    struct hp_error err = {{0}};
    if (hp_tokenizer_encode(t, a, na, b, nb, special, &e, &err) != HP_OK) {
        FZ_CHECK_ERR(err);
        hp_encoding_free(&e);
        return;
    }
    int n_ids = hp_tokenizer_n_ids(t);
    FZ_CHECK(e.n >= 0, "%d tokens", e.n);
    for (int i = 0; i < e.n; i++) {
        FZ_CHECK(e.ids[i] >= 0 && e.ids[i] < n_ids, "id %d at %d, the tokenizer has %d", e.ids[i], i, n_ids);
        /* type ids are the template's own numbers (HF allows any, e.g. 2): the
         * evaluator checks them against the model's token types, so no check here */
        if (e.type_ids)
            (void)e.type_ids[i]; /* read: ASan sees a short array */
        size_t len;
        const char *piece = hp_tokenizer_piece(t, e.ids[i], &len);
        FZ_CHECK(piece && strlen(piece) <= len, "id %d at %d has no token string", e.ids[i], i);
    }
    decode(t, e.ids, e.n);
    hp_encoding_free(&e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *sep = memchr(data, 0xFF, size);
    size_t n_json = sep ? (size_t)(sep - data) : size;
    const char *text = sep ? (const char *)sep + 1 : "";
    size_t n_text = sep ? size - n_json - 1 : 0;
    if (n_json > MAX_JSON || n_text > MAX_TEXT)
        return 0;
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s", fz_scratch());
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    fz_write(path, data, n_json);

    struct hp_tokenizer *t = NULL;
    struct hp_error err = {{0}};
    if (hp_tokenizer_open(dir, &t, &err) != HP_OK) {
        FZ_CHECK(t == NULL, "a failed open handed back a tokenizer");
        FZ_CHECK_ERR(err);
        return 0;
    }
    FZ_CHECK(hp_tokenizer_n_ids(t) >= 0, "%d ids", hp_tokenizer_n_ids(t));
    const char *sep2 = memchr(text, 0xFF, n_text);
    encode(t, text, n_text, NULL, 0, false);
    /* the text's bytes as ids around the tokenizer's range: -1, gaps and n_ids too */
    int32_t ids[64];
    int n_ids = hp_tokenizer_n_ids(t), n = 0;
    for (size_t i = 0; i < n_text && n < 64; i++)
        ids[n++] = (int32_t)((unsigned char)text[i] % (unsigned)(n_ids < 250 ? n_ids + 2 : 252)) - 1;
    decode(t, ids, n);
    encode(t, text, n_text, NULL, 0, true);
    if (sep2)
        encode(t, text, (size_t)(sep2 - text), sep2 + 1, n_text - (size_t)(sep2 - text) - 1, true);
    hp_tokenizer_free(t);
    return 0;
}
