/* tokenizer.h -- what the tokenizer (engine/text/tokenizer.c, tokenizer_load.c) tells the text loader,
 * and what it and its decoder (engine/text/detokenize.c) share. */
#ifndef HP_TOKENIZER_H
#define HP_TOKENIZER_H

#include "headprune.h"

/* One text (document or row, or decoded text) is at most this many bytes: sizes stay far from int overflow. */
#define HP_TEXT_MAX (256 << 20)

/* The id to put after each packed document when the tokenizer's template adds
 * no special tokens of its own (GPT-2's <|endoftext|>), else -1. */
int32_t hp_tokenizer_separator(const struct hp_tokenizer *t);

/* The padding id: a GGUF file's padding_token_id, else [PAD], <pad>, or 0. Padded positions are masked anyway. */
int32_t hp_tokenizer_pad(const struct hp_tokenizer *t);

/* Whether id is a special token (an added token marked special, or a post-processor template's own), as
 * decode's skip_special leaves out. */
bool hp_tokenizer_special(const struct hp_tokenizer *t, int32_t id);

/* Whether dir holds one of the files hp_tokenizer_open reads (tokenizer.json, vocab.txt, merges.txt): a
 * directory without any has no tokenizer, one with a file it cannot read has a broken one. */
bool hp_tokenizer_present(const char *dir);

struct hp_gguf;

/* The tokenizer of an open GGUF file's metadata (tokenizer.ggml.*), as hp_tokenizer_open reads a .gguf
 * model's; g may be closed after. The fuzz harness uses it. Destructor: hp_tokenizer_free. */
enum hp_status hp_tokenizer_from_gguf(const struct hp_gguf *g, struct hp_tokenizer **out, struct hp_error *err);

/* Whether t was read from a GGUF file's metadata, and then a digest of that metadata in out (the text cache
 * hashes the tokenizer files of a folder, and this for a GGUF file). */
bool hp_tokenizer_digest(const struct hp_tokenizer *t, uint8_t out[16]);

/* The code point GPT-2's byte-level map gives byte b (printable bytes keep theirs; the rest get 256 and up):
 * the one statement of the map, which the byte-level pre-tokeniser (tokenizer.c) and decoder
 * (detokenize.c) both read. */
static inline int32_t hp_byte_level_cp(uint8_t b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)
        return b;
    int n = 0;
    for (int c = 0; c < b; c++)
        n += !((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174);
    return 256 + n;
}

// --- the decoder: token strings back to text (engine/text/detokenize.c) ---------------------------

struct hp_decoder;
struct cJSON;

/*
 * The decoder a tokenizer.json declares (j: its "decoder", NULL or null for
 * none); path names the file in messages. A decoder it cannot run is kept, to
 * fail each hp_decoder_run with the reason: text to ids does not need it.
 * Fails only when out of memory. Destructor: hp_decoder_free.
 */
enum hp_status hp_decoder_load(const struct cJSON *j, const char *path, struct hp_decoder **out,
                               struct hp_error *err);
void hp_decoder_free(struct hp_decoder *d);

/*
 * The text of the token strings tok[0..n) (len[i] bytes each) as the
 * tokenizers library's decoder makes it, then, with clean_up, transformers'
 * clean_up_tokenization (" ." -> ".", " ' " -> "'", " 's" -> "'s", ...).
 * *out (NUL-terminated, *n_out bytes, which may include NULs) is the
 * caller's to free.
 */
enum hp_status hp_decoder_run(const struct hp_decoder *d, const char *const *tok, const size_t *len, int n,
                              bool clean_up, char **out, size_t *n_out, struct hp_error *err);

#endif
