/*
 * tokenizer_priv.h -- the tokenizer family's private insides, shared by
 * engine/text/tokenizer.c and engine/text/tokenizer_load.c and by nothing else (others
 * use tokenizer.h and headprune.h).
 *
 * The family: tokenizer_load.c reads a model directory's tokenizer.json (or
 * its fallback files, or a GGUF file's metadata through tokenizer_gguf.c)
 * into a struct hp_tokenizer (hp_tokenizer_open);
 * tokenizer.c runs it, text to ids and ids back to token strings and text,
 * and frees it. Calls go one way: the loader calls tokenizer.c (the maps, the
 * normalisers it applies to a vocabulary, the piece table), never the
 * reverse; both hand detokenize.c the decoder. Names shared across the family
 * carry the prefix ht_; everything else in a file is static. tokenizer_gguf.c
 * calls tokenizer.c only, and tokenizer_load.c calls it.
 *
 * Must not: be included outside engine/text/tokenizer*.c.
 */
#ifndef HP_TOKENIZER_PRIV_H
#define HP_TOKENIZER_PRIV_H

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

// --- growable buffers, id lists, and the string -> value hash map (tokenizer.c) ---------------

struct buf {
    char *p;
    size_t n, cap;
    size_t max; /* 0: unbounded; else a put past max bytes fails and sets over */
    bool over;
};

struct ids {
    int32_t *v;
    int32_t *type;
    int n, cap;
};

struct map {
    char **key;     /* NULL = empty slot */
    size_t *klen;
    int64_t *val;
    size_t cap, n;
};

enum norm_kind { N_BERT, N_PREPEND, N_REPLACE, N_NFC, N_NFD, N_NFKC, N_NFKD, N_LOWERCASE, N_STRIP_ACCENTS };

struct norm {
    enum norm_kind kind;
    bool clean_text, chinese, strip_accents, lowercase; /* BertNormalizer */
    char *a, *b;                                        /* Prepend: a; Replace: a -> b */
};

enum pre_kind { P_BERT, P_BYTELEVEL, P_SPLIT, P_WHITESPACE_SPLIT };

struct pre {
    enum pre_kind kind;
    bool add_prefix_space, use_regex; /* ByteLevel */
    pcre2_code *re;                   /* ByteLevel's GPT-2 regex, or Split's */
    char *pattern;                    /* re's source, for messages */
    bool isolated;                    /* Split: behaviour Isolated (else Removed) */
};

struct tmpl_item {
    int seq;       /* -1: special token; 0: A; 1: B */
    int type_id;
    int32_t *ids;  /* special token ids */
    int n_ids;
};

struct added {
    char *s;
    size_t n;
    int32_t id;
    bool lstrip, rstrip;
    bool special; /* left out by decoding with skip_special */
};

/* An id's token string; pieces are kept sorted by id, one each. */
struct piece {
    int32_t id;
    int rank;      /* where it came from, first wins: 0 added token, 1 vocabulary, 2 template only */
    bool special;  /* its string is a special added token's */
    const char *s; /* owned by the vocabulary map, the added tokens or tmpl_tokens */
    size_t n;
};

enum model_kind { M_BPE, M_WORDPIECE };

struct hp_tokenizer {
    char *path; /* the file the tokenizer was read from (owned) */
    enum model_kind model;
    struct map vocab; /* token -> id */
    size_t longest;   /* bytes of the vocabulary's longest token */
    struct map merges; /* "idA idB" as 8 bytes -> rank << 32 | merged id */
    bool byte_level, byte_fallback, fuse_unk, ignore_merges;
    int32_t unk_id;   /* -1: none */
    char prefix[16];  /* WordPiece continuing-subword prefix */
    int max_chars;
    int32_t n_ids;    /* one past the largest id */
    struct norm *norm;
    int n_norm;
    struct pre *pre;
    int n_pre;
    struct added *added;
    int n_added;
    bool added_first[256]; /* whether an added token starts with this byte */
    struct tmpl_item *single, *pair;
    int n_single, n_pair;
    int32_t byte_tok[256]; /* byte fallback: id of <0xXX>, -1 if absent */
    int32_t bos, eos;
    int32_t pad;               /* a GGUF file's padding_token_id; -1: none (hp_tokenizer_pad looks by string) */
    char *source;              /* where it came from, for people (owned); NULL: path says */
    bool gguf;                 /* read from a GGUF file's metadata */
    uint8_t digest[16];        /* then: a digest of its tokenizer.* metadata (the text cache's key) */
    struct piece *pieces;      /* id -> token string, sorted by id */
    int n_pieces;
    struct piece *tmpl_tokens; /* the template's special tokens with their strings (owned) */
    int n_tmpl_tokens;
    struct hp_decoder *dec;
    bool clean_up;             /* tokenizer_config.json's clean_up_tokenization_spaces */
};

// --- shared by the family (tokenizer.c) ---------------------------------------------------------

bool ht_map_init(struct map *m, size_t expect); // room for expect keys; false when out of memory
bool ht_map_put(struct map *m, const char *k, size_t n, int64_t v);
bool ht_map_get(const struct map *m, const char *k, size_t n, int64_t *v);
bool ht_lowercase(struct buf *out, const char *s, size_t n);     // the normaliser's Lowercase
bool ht_strip_accents(struct buf *out, const char *s, size_t n); // its StripAccents
int32_t ht_vocab_id(const struct hp_tokenizer *t, const char *s, size_t n); // -1 when not in the vocabulary
enum hp_status ht_check_utf8(const char *what, const char *s, size_t n, struct hp_error *err);
bool ht_build_pieces(struct hp_tokenizer *t); // the id -> token string table; false when out of memory

// --- a GGUF file's tokenizer (tokenizer_gguf.c) ---------------------------------------------------

struct hp_gguf;

/*
 * t (path set, unk_id -1, the rest zero) from g's tokenizer.ggml.* metadata: vocabulary, merges, added
 * tokens, special ids and flags, source and digest; *pipe (the caller's to cJSON_Delete) the normaliser,
 * pre-tokeniser, post-processor and decoder as a tokenizer.json object would hold them, for the loader to
 * read. A kind, pre-tokenizer or value it does not know is refused in one line naming the file and the key.
 */
enum hp_status ht_gguf_read(struct hp_tokenizer *t, const struct hp_gguf *g, struct cJSON **pipe,
                            struct hp_error *err);

#endif
