/*
 * fuzz_gguf_tokenizer -- a GGUF file's tokenizer (engine/text/tokenizer_gguf.c, hp_tokenizer_from_gguf).
 *
 * Input: a whole GGUF file, indexed from memory with hp_gguf_open_buffer; when it opens, its tokenizer.ggml.*
 * metadata is read into a tokenizer. A refusal hands back nothing and says why in one line (a format error,
 * an unsupported kind or pre-tokenizer, or no tokenizer at all). An accepted tokenizer encodes a few texts
 * (special tokens, digits, Unicode, whitespace runs), with and without its template, to ids inside its
 * vocabulary, and decodes them again (or says why not in one line). Seeded with tests/fixtures/gguf-tokenizer.
 */
#include "fuzz_common.h"
#include "gguf.h"
#include "tokenizer.h"

#define MAX_INPUT (256 << 10)

static const char *const texts[] = {"Hello world 12345, caf\xc3\xa9 \xf0\x9f\x98\x80", "<s>a</s>  \t\n<|im_start|>x",
                                    "", "   ", "<mask><tool>ab ba 1,000"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > MAX_INPUT)
        return 0;
    struct hp_gguf *g = NULL;
    struct hp_error err = {0};
    if (hp_gguf_open_buffer("fuzz.gguf", data, size, &g, &err) != HP_OK)
        return 0; /* the reader's own harness, fuzz_gguf, checks its refusals */
    struct hp_tokenizer *t = NULL;
    enum hp_status st = hp_tokenizer_from_gguf(g, &t, &err);
    hp_gguf_close(g); /* the tokenizer owns copies: it outlives the file */
    if (st != HP_OK) {
        FZ_CHECK(t == NULL, "a refused tokenizer was handed back");
        FZ_CHECK(st == HP_ERR_FORMAT || st == HP_ERR_UNSUPPORTED || st == HP_ERR_IO || st == HP_ERR_NOMEM,
                 "status %d: %s", st, err.msg);
        FZ_CHECK_ERR(err);
        FZ_CHECK(strncmp(err.msg, "fuzz.gguf", 9) == 0 || st == HP_ERR_NOMEM, "the file is not named: %s", err.msg);
        return 0;
    }
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
        for (int special = 0; special < 2; special++) {
            struct hp_encoding e;
            st = hp_tokenizer_encode(t, texts[i], strlen(texts[i]), NULL, 0, special, &e, &err);
            if (st != HP_OK) {
                FZ_CHECK_ERR(err);
                continue;
            }
            for (int k = 0; k < e.n; k++)
                FZ_CHECK(e.ids[k] >= 0 && e.ids[k] < hp_tokenizer_n_ids(t), "id %d of %d", e.ids[k],
                         hp_tokenizer_n_ids(t));
            char *back = NULL;
            size_t n = 0;
            if (hp_tokenizer_decode(t, e.ids, e.n, false, &back, &n, &err) != HP_OK)
                FZ_CHECK_ERR(err);
            free(back);
            hp_encoding_free(&e);
        }
    FZ_CHECK(hp_tokenizer_source(t) && strstr(hp_tokenizer_source(t), "its metadata"), "source '%s'",
             hp_tokenizer_source(t));
    hp_tokenizer_free(t);
    return 0;
}
