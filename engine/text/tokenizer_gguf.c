/*
 * tokenizer_gguf.c -- a GGUF file's own tokenizer, its tokenizer.ggml.* metadata, read into a struct
 * hp_tokenizer (ht_gguf_read): the vocabulary, the merges (the file's; for the llama kind without them,
 * made from the scores as transformers' GGUF loader makes them), the added tokens (token types 3,
 * control, special; and 4, user-defined), the bos/eos/unk/pad ids and flags, and, as a tokenizer.json
 * pipeline, the normaliser, pre-tokeniser, template and decoder the file's kind and pre-tokenizer name
 * stand for, which tokenizer_load.c then reads as it reads a tokenizer.json's.
 *
 * Why: a GGUF model needs nothing beside it to read text; and building the very struct the tokenizer.json
 * loader builds, not a second tokenizer, keeps one engine, the one tested against the tokenizers library.
 * The pre-tokenizer names are llama.cpp's (llama-vocab.cpp); each row says, as the pipeline the model's own
 * tokenizer.json declares, what it splits (docs/gguf.md, "Its tokenizer").
 * Part of the tokenizer family (tokenizer_priv.h): calls tokenizer.c's maps and the GGUF reader only.
 * Must not: print or exit; read a kind, pre-tokenizer or value it does not know as something else (each is
 * refused in one line naming the file and the key); allocate more than a few times the metadata's size
 * (the reader has bounded every count by the file's bytes).
 */
#define _POSIX_C_SOURCE 200809L
#include <assert.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "tokenizer_priv.h"

#include "gguf.h"
#include "util.h"

#define KEY "tokenizer.ggml."

// --- the pre-tokenizers llama.cpp names ------------------------------------------------------

/* GPT-2's regex as llama.cpp splits with it (no final \s+: what it leaves are words of their own) */
static const char re_gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
/* Llama 3's and Qwen2's, as their tokenizer.json write them (llama.cpp spells (?i:'s) as '[sS]) */
static const char re_llama3[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}"
                                "\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char re_qwen2[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
                               "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

enum pre_id { PRE_DEFAULT, PRE_GPT2, PRE_DIGITS, PRE_SMOLLM, PRE_LLAMA3, PRE_DBRX, PRE_QWEN2, PRE_COUNT };

/* One tokenizer.ggml.pre family: its names, then what the text goes through before the byte-level BPE. */
struct pre_row {
    const char *names[6]; /* tokenizer.ggml.pre values (NULL-ended) */
    bool nfc;             /* an NFC normaliser first (Qwen2's tokenizer.json has one; llama.cpp does none) */
    const char *split[4]; /* regexes, each a Split with behaviour Isolated, in order */
    bool byte_regex;      /* then ByteLevel with GPT-2's regex (use_regex), else ByteLevel without */
    bool ignore_merges;   /* a word that is a token is that token (Llama 3's BPE) */
    bool add_bos;         /* tokenizer.ggml.add_bos_token's default (llama.cpp's) */
    bool clean_up;        /* clean_up_tokenization_spaces for decoding (llama.cpp's clean_spaces) */
};

static const struct pre_row pre_rows[PRE_COUNT] = {
    [PRE_DEFAULT] = {{"default"}, false, {"[\\p{P}\\$\\+<=>\\^~\\|]+", re_gpt2, "\\p{N}+", "[0-9][0-9][0-9]"},
                     false, false, false, true},
    [PRE_GPT2] = {{"gpt-2", "phi-2", "mpt", "olmo", "jais"}, false, {NULL}, true, false, false, true},
    [PRE_DIGITS] = {{"starcoder", "refact", "codeshell", "exaone", "minerva-7b"}, false, {"\\p{N}"}, true, false,
                    false, true},
    [PRE_SMOLLM] = {{"smollm", "command-r"}, false, {"\\p{N}"}, true, false, false, false},
    [PRE_LLAMA3] = {{"llama3", "llama-v3", "llama-bpe", "falcon3"}, false, {re_llama3}, false, true, true, true},
    [PRE_DBRX] = {{"dbrx", "smaug-bpe"}, false, {re_llama3}, false, false, false, true},
    [PRE_QWEN2] = {{"qwen2", "deepseek-r1-qwen"}, true, {re_qwen2}, false, false, false, false},
};
static_assert(sizeof pre_rows / sizeof pre_rows[0] == PRE_COUNT, "a row per pre-tokenizer family");

/* The row named s (n bytes), or NULL. */
static const struct pre_row *pre_find(const char *s, size_t n)
{
    for (int r = 0; r < PRE_COUNT; r++)
        for (int k = 0; k < 6 && pre_rows[r].names[k]; k++)
            if (strlen(pre_rows[r].names[k]) == n && memcmp(pre_rows[r].names[k], s, n) == 0)
                return &pre_rows[r];
    return NULL;
}

/* Every name of the table, for the refusal's hint. */
static void pre_names(char *out, size_t cap)
{
    size_t k = 0;
    out[0] = 0;
    for (int r = 0; r < PRE_COUNT; r++)
        for (int i = 0; i < 6 && pre_rows[r].names[i] && k < cap; i++)
            k += (size_t)snprintf(out + k, cap - k, "%s%s", k ? ", " : "", pre_rows[r].names[i]);
}

/* s shown in a message: printable ASCII as it is, other bytes as \xNN, cut after 60 bytes. */
static void show(char *out, size_t cap, const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n && i < 60 && k + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        k += (size_t)(c >= 32 && c < 127 && c != '"' ? snprintf(out + k, cap - k, "%c", c)
                                                      : snprintf(out + k, cap - k, "\\x%02X", c));
    }
    if (n > 60 && k + 4 < cap)
        k += (size_t)snprintf(out + k, cap - k, "...");
    out[k < cap ? k : cap - 1] = 0;
}

// --- what the metadata says ---------------------------------------------------------------------

enum kind { K_GPT2, K_LLAMA };

struct meta {
    const char *file;
    enum kind kind;
    const struct pre_row *pre;  /* the gpt2 kind's */
    char pre_name[80];          /* as the file has it, shown */
    const struct hp_gguf_kv *tokens, *types, *scores, *merges;
    int32_t n;                  /* tokens */
    int32_t bos, eos, unk, pad; /* -1: not given */
    bool add_bos, add_eos, prefix_space;
};

static enum hp_status read_kind(const struct hp_gguf *g, struct meta *m, struct hp_error *err)
{
    struct hp_gguf_str s = {0}, p = {0};
    bool found = false, has_pre = false;
    enum hp_status st = hp_gguf_get_str(g, KEY "model", &s, &found, err);
    if (st != HP_OK)
        return st;
    char v[256];
    if (!found)
        return hp_fail(err, HP_ERR_IO,
                       "%s: no tokenizer in its metadata (" KEY "model is missing) and no tokenizer.json beside "
                       "it, so it takes token ids, not text (.npy, .jsonl with \"ids\"); or put the model's "
                       "tokenizer.json in a folder with the file and name the folder",
                       m->file);
    show(v, sizeof v, s.p, s.len);
    if (s.len == 4 && memcmp(s.p, "gpt2", 4) == 0)
        m->kind = K_GPT2;
    else if (s.len == 5 && memcmp(s.p, "llama", 5) == 0)
        m->kind = K_LLAMA;
    else
        return hp_fail(err, HP_ERR_UNSUPPORTED,
                       "%s: " KEY "model is \"%s\", a tokenizer kind headprune does not read (it reads \"gpt2\", "
                       "byte-level BPE, and \"llama\", SentencePiece BPE; or put the model's tokenizer.json "
                       "beside the file)",
                       m->file, v);
    if ((st = hp_gguf_get_str(g, KEY "pre", &p, &has_pre, err)) != HP_OK || m->kind == K_LLAMA)
        return st; /* llama.cpp has no pre-tokenizer for the llama kind, whatever the key says */
    /* llama.cpp takes a missing or empty name for "default" */
    m->pre = has_pre && p.len ? pre_find(p.p, p.len) : &pre_rows[PRE_DEFAULT];
    show(m->pre_name, sizeof m->pre_name, has_pre && p.len ? p.p : "default", has_pre && p.len ? p.len : 7);
    if (!m->pre) {
        char names[512];
        pre_names(names, sizeof names);
        return hp_fail(err, HP_ERR_UNSUPPORTED,
                       "%s: " KEY "pre is \"%s\", a pre-tokenizer headprune does not know (it knows %s; or put "
                       "the model's tokenizer.json beside the file)",
                       m->file, m->pre_name, names);
    }
    return HP_OK;
}

/* An optional token id key into *id (left -1 when absent), refused unless below the vocabulary's size. */
static enum hp_status read_id(const struct hp_gguf *g, const struct meta *m, const char *key, int32_t *id,
                              struct hp_error *err)
{
    uint32_t v = 0;
    bool found = false;
    enum hp_status st = hp_gguf_get_u32(g, key, &v, &found, err);
    if (st == HP_OK && found && v >= (uint32_t)m->n)
        return hp_fail(err, HP_ERR_FORMAT, "%s: %s is %u, not an id of its %d tokens", m->file, key, v, m->n);
    if (st == HP_OK && found)
        *id = (int32_t)v;
    return st;
}

/* A per-token array (scores, token_type): numbers, one per token, or absent (*out NULL). */
static enum hp_status read_per_token(const struct hp_gguf *g, const struct meta *m, const char *key,
                                     const struct hp_gguf_kv **out, struct hp_error *err)
{
    bool found = false;
    *out = NULL;
    enum hp_status st = hp_gguf_get_nums(g, key, out, &found, err);
    if (st == HP_OK && found && (*out)->n != (uint64_t)m->n)
        return hp_fail(err, HP_ERR_FORMAT, "%s: %s has %llu elements for %d tokens (one each)", m->file, key,
                       (unsigned long long)(*out)->n, m->n);
    return st;
}

static enum hp_status read_meta(const struct hp_gguf *g, struct meta *m, struct hp_error *err)
{
    enum hp_status st = read_kind(g, m, err);
    if (st == HP_OK)
        st = hp_gguf_get_strs(g, KEY "tokens", &m->tokens, NULL, err);
    if (st == HP_OK && (m->tokens->n == 0 || m->tokens->n > (uint64_t)INT32_MAX - 1))
        return hp_fail(err, HP_ERR_FORMAT, "%s: " KEY "tokens has %llu tokens (1 to 2^31 - 2)", m->file,
                       (unsigned long long)m->tokens->n);
    if (st != HP_OK)
        return st;
    m->n = (int32_t)m->tokens->n;
    if ((st = read_per_token(g, m, KEY "token_type", &m->types, err)) != HP_OK ||
        (st = read_per_token(g, m, KEY "scores", &m->scores, err)) != HP_OK)
        return st;
    bool found = false, said = false;
    if ((st = hp_gguf_get_strs(g, KEY "merges", &m->merges, &found, err)) != HP_OK)
        return st;
    if (!found)
        m->merges = NULL;
    if (!m->merges && m->kind == K_GPT2)
        return hp_fail(err, HP_ERR_FORMAT, "%s: metadata key '" KEY "merges' is missing (the gpt2 kind needs it)",
                       m->file);
    if (!m->merges && !m->scores)
        return hp_fail(err, HP_ERR_FORMAT,
                       "%s: metadata keys '" KEY "merges' and '" KEY "scores' are both missing (the llama kind "
                       "needs one to merge by)",
                       m->file);
    m->bos = m->eos = m->unk = m->pad = -1;
    if ((st = read_id(g, m, KEY "bos_token_id", &m->bos, err)) != HP_OK ||
        (st = read_id(g, m, KEY "eos_token_id", &m->eos, err)) != HP_OK ||
        (st = read_id(g, m, KEY "unknown_token_id", &m->unk, err)) != HP_OK ||
        (st = read_id(g, m, KEY "padding_token_id", &m->pad, err)) != HP_OK)
        return st;
    /* llama.cpp's defaults: the llama kind adds bos, the gpt2 kind as its pre-tokenizer says */
    m->add_bos = m->kind == K_LLAMA || m->pre->add_bos;
    m->add_eos = false;
    m->prefix_space = m->kind == K_LLAMA;
    if ((st = hp_gguf_get_bool(g, KEY "add_bos_token", &m->add_bos, &said, err)) != HP_OK ||
        (st = hp_gguf_get_bool(g, KEY "add_eos_token", &m->add_eos, &found, err)) != HP_OK ||
        (st = hp_gguf_get_bool(g, KEY "add_space_prefix", &m->prefix_space, &found, err)) != HP_OK)
        return st;
    if (m->add_bos && m->bos < 0)
        return hp_fail(err, HP_ERR_FORMAT, "%s: " KEY "add_bos_token is %s but " KEY "bos_token_id is missing",
                       m->file, said ? "true" : "true (the default)");
    if (m->add_eos && m->eos < 0)
        return hp_fail(err, HP_ERR_FORMAT, "%s: " KEY "add_eos_token is true but " KEY "eos_token_id is missing",
                       m->file);
    return HP_OK;
}

// --- the vocabulary, the added tokens, the merges ----------------------------------------------------

/* Token i's type (1 normal when the file has none), refused outside llama.cpp's 0..6. */
static enum hp_status token_type(const struct meta *m, int32_t i, int *type, struct hp_error *err)
{
    int64_t v = 1;
    if (m->types && (!hp_gguf_arr_i64(m->types, (uint64_t)i, &v) || v < 0 || v > 6))
        return hp_fail(err, HP_ERR_FORMAT,
                       "%s: " KEY "token_type[%d] is not a token type (0 to 6: undefined, normal, unknown, control, "
                       "user-defined, unused, byte)",
                       m->file, i);
    *type = (int)v;
    return HP_OK;
}

static bool is_byte_token(const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    return n == 6 && memcmp(s, "<0x", 3) == 0 && strchr(hex, s[3]) && strchr(hex, s[4]) && s[3] && s[4] &&
           s[5] == '>';
}

static enum hp_status add_added(struct hp_tokenizer *t, const char *s, size_t n, int32_t id, bool special)
{
    struct added *x = &t->added[t->n_added];
    if (!(x->s = malloc(n + 1)))
        return HP_ERR_NOMEM;
    memcpy(x->s, s, n);
    x->s[n] = 0;
    x->n = n;
    x->id = id;
    x->special = special;
    t->n_added++;
    return HP_OK;
}

/* The vocabulary (token i has id i), each token checked, and the added tokens: control (3) ones special,
 * user-defined (4) ones not; a llama-kind file without token types adds its unk, bos and eos tokens as
 * special, as transformers does. */
static enum hp_status read_vocab(struct hp_tokenizer *t, const struct meta *m, struct hp_error *err)
{
    enum hp_status st = HP_OK;
    if (!ht_map_init(&t->vocab, (size_t)m->n) || !(t->added = calloc((size_t)m->n + 3, sizeof *t->added)))
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    t->n_ids = m->n;
    for (int32_t i = 0; i < m->n && st == HP_OK; i++) {
        const struct hp_gguf_str s = m->tokens->str[i];
        int type = 1;
        int64_t old;
        if ((st = token_type(m, i, &type, err)) != HP_OK)
            break;
        if (memchr(s.p, 0, s.len))
            return hp_fail(err, HP_ERR_FORMAT, "%s: " KEY "tokens[%d] holds a NUL byte", m->file, i);
        if (ht_check_utf8("a token", s.p, s.len, NULL) != HP_OK)
            return hp_fail(err, HP_ERR_FORMAT, "%s: " KEY "tokens[%d] is not valid UTF-8", m->file, i);
        if (type == 6 && !is_byte_token(s.p, s.len))
            return hp_fail(err, HP_ERR_FORMAT, "%s: " KEY "tokens[%d] has type 6 (byte) but is not <0xXX>", m->file,
                           i);
        if (!s.len) /* no text makes an empty token; llama.cpp renames it, transformers keeps it unreachable */
            continue;
        if (ht_map_get(&t->vocab, s.p, s.len, &old)) {
            char v[256];
            show(v, sizeof v, s.p, s.len);
            return hp_fail(err, HP_ERR_FORMAT, "%s: " KEY "tokens[%d] \"%s\" is tokens[%lld] again", m->file, i, v,
                           (long long)old);
        }
        if (!ht_map_put(&t->vocab, s.p, s.len, i))
            return hp_fail(err, HP_ERR_NOMEM, "out of memory");
        if (s.len > t->longest)
            t->longest = s.len;
        if ((type == 3 || type == 4) && add_added(t, s.p, s.len, i, type == 3) != HP_OK)
            return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    }
    const int32_t own[3] = {m->unk, m->bos, m->eos};
    for (int k = 0; st == HP_OK && !m->types && m->kind == K_LLAMA && k < 3; k++)
        if (own[k] >= 0 && m->tokens->str[own[k]].len &&
            add_added(t, m->tokens->str[own[k]].p, m->tokens->str[own[k]].len, own[k], true) != HP_OK)
            return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    return st;
}

/* The merge of a and b (ranked rank) into t->merges: 0, or 1 when a, b or a + b is not a token, -1 when
 * out of memory. The first of two equal pairs keeps its rank, as tokenizer_load.c's add_merge does. */
static int put_merge(struct hp_tokenizer *t, const char *a, size_t la, const char *b, size_t lb, int64_t rank)
{
    char *ab = malloc(la + lb + 1);
    if (!ab)
        return -1;
    memcpy(ab, a, la);
    memcpy(ab + la, b, lb);
    int32_t key[2] = {ht_vocab_id(t, a, la), ht_vocab_id(t, b, lb)}, iab = ht_vocab_id(t, ab, la + lb);
    free(ab);
    if (key[0] < 0 || key[1] < 0 || iab < 0)
        return 1;
    int64_t old;
    if (!ht_map_get(&t->merges, (const char *)key, sizeof key, &old) &&
        !ht_map_put(&t->merges, (const char *)key, sizeof key, rank << 32 | (int64_t)(uint32_t)iab))
        return -1;
    return 0;
}

/* The file's merges, "a b" each (one space, both sides tokens), ranked by their place. */
static enum hp_status read_merges(struct hp_tokenizer *t, const struct meta *m, struct hp_error *err)
{
    const struct hp_gguf_kv *kv = m->merges;
    if (kv->n > (uint64_t)INT32_MAX || !ht_map_init(&t->merges, (size_t)kv->n + 16))
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < kv->n; i++) {
        const struct hp_gguf_str s = kv->str[i];
        const char *sp = s.len ? memchr(s.p, ' ', s.len) : NULL;
        size_t la = sp ? (size_t)(sp - s.p) : 0, lb = sp ? s.len - la - 1 : 0;
        if (!sp || !la || !lb || memchr(sp + 1, ' ', lb))
            return hp_fail(err, HP_ERR_FORMAT, "%s: " KEY "merges[%llu] is not \"a b\" (two tokens, one space)",
                           m->file, (unsigned long long)i);
        int r = put_merge(t, s.p, la, sp + 1, lb, (int64_t)i);
        if (r < 0)
            return hp_fail(err, HP_ERR_NOMEM, "out of memory");
        if (r > 0)
            return hp_fail(err, HP_ERR_FORMAT, "%s: " KEY "merges[%llu] names a token that is not in " KEY "tokens",
                           m->file, (unsigned long long)i);
    }
    return HP_OK;
}

/* A merge made from the scores: left and right token ids, the merged token's id and the three scores. */
struct made {
    int32_t l, r, m, at; /* at: where the merged token was split, in code points */
    double s, sl, sr;
};

/* transformers' order (GGUFTokenizerSkeleton): by the merged token's score, highest first; a tie in the
 * vocabulary's order; one token's splits by their left then right scores, highest first, then by place */
static int made_cmp(const void *a, const void *b)
{
    const struct made *x = a, *y = b;
    if (x->s != y->s)
        return x->s > y->s ? -1 : 1;
    if (x->m != y->m)
        return x->m < y->m ? -1 : 1;
    if (x->sl != y->sl)
        return x->sl > y->sl ? -1 : 1;
    if (x->sr != y->sr)
        return x->sr > y->sr ? -1 : 1;
    return (x->at > y->at) - (x->at < y->at);
}

/* The llama kind's merges without tokenizer.ggml.merges: every split of every token into two tokens, ranked
 * as transformers ranks them. At most one per byte of the tokens, so bounded by the file's size. */
static enum hp_status make_merges(struct hp_tokenizer *t, const struct meta *m, struct hp_error *err)
{
    size_t cap = 0, n = 0;
    struct made *v = NULL;
    double *score = malloc((size_t)m->n * sizeof *score);
    if (!score)
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < m->n; i++)
        if (!hp_gguf_arr_f64(m->scores, (uint64_t)i, &score[i]) || !isfinite(score[i])) {
            free(score);
            return hp_fail(err, HP_ERR_FORMAT, "%s: " KEY "scores[%d] is not a finite number", m->file, i);
        }
    enum hp_status st = HP_OK;
    for (int32_t i = 0; i < m->n && st == HP_OK; i++) {
        const struct hp_gguf_str s = m->tokens->str[i];
        int at = 0;
        for (size_t k = 1; k < s.len && st == HP_OK; k++) {
            if (((unsigned char)s.p[k] & 0xC0) == 0x80) /* not a character's first byte */
                continue;
            at++;
            int32_t l = ht_vocab_id(t, s.p, k), r = ht_vocab_id(t, s.p + k, s.len - k);
            if (l < 0 || r < 0)
                continue;
            if (n == cap) {
                struct made *w = realloc(v, (cap = cap ? 2 * cap : 1024) * sizeof *v);
                if (!w) {
                    st = hp_fail(err, HP_ERR_NOMEM, "out of memory");
                    break;
                }
                v = w;
            }
            v[n++] = (struct made){l, r, i, at, score[i], score[l], score[r]};
        }
    }
    free(score);
    if (st == HP_OK && !ht_map_init(&t->merges, n + 16))
        st = hp_fail(err, HP_ERR_NOMEM, "out of memory");
    if (st == HP_OK)
        hp_qsort(v, n, sizeof *v, made_cmp);
    for (size_t k = 0; st == HP_OK && k < n; k++) {
        int32_t key[2] = {v[k].l, v[k].r};
        if (!ht_map_put(&t->merges, (const char *)key, sizeof key, (int64_t)k << 32 | (int64_t)(uint32_t)v[k].m))
            st = hp_fail(err, HP_ERR_NOMEM, "out of memory");
    }
    free(v);
    return st;
}

// --- the pipeline, as a tokenizer.json would declare it ----------------------------------------------

static cJSON *obj(const char *type)
{
    cJSON *o = cJSON_CreateObject();
    if (o)
        cJSON_AddStringToObject(o, "type", type);
    return o;
}

/* {"type": "Replace", "pattern": {"String": a}, "content": b}, a normaliser and a decoder alike */
static cJSON *replace(const char *a, const char *b)
{
    cJSON *o = obj("Replace"), *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "String", a);
    cJSON_AddItemToObject(o, "pattern", p);
    cJSON_AddStringToObject(o, "content", b);
    return o;
}

static cJSON *seq(const char *type, const char *key, cJSON **items, int n)
{
    cJSON *o = obj(type), *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(a, items[i]);
    cJSON_AddItemToObject(o, key, a);
    return o;
}

/* The template: bos (when added) $A eos (when added), and for pairs the same again with type 1. name[k] is
 * the NUL-terminated string of bos (k 0) and eos (k 1). */
static cJSON *template(const struct meta *m, char *const name[2])
{
    cJSON *o = obj("TemplateProcessing"), *sp = cJSON_CreateObject();
    const char *part[2] = {"single", "pair"};
    const int32_t both[2] = {m->add_bos ? m->bos : -1, m->add_eos ? m->eos : -1};
    for (int p = 0; p < 2; p++) {
        cJSON *list = cJSON_CreateArray();
        for (int s = 0; s <= p; s++)
            for (int k = 0; k < 3; k++) {
                if (k != 1 && both[k / 2] < 0)
                    continue;
                cJSON *it = cJSON_CreateObject(), *x = cJSON_CreateObject();
                cJSON_AddStringToObject(x, "id", k == 1 ? (s ? "B" : "A") : name[k / 2]);
                cJSON_AddNumberToObject(x, "type_id", s);
                cJSON_AddItemToObject(it, k == 1 ? "Sequence" : "SpecialToken", x);
                cJSON_AddItemToArray(list, it);
            }
        cJSON_AddItemToObject(o, part[p], list);
    }
    for (int k = 0; k < 2; k++) {
        if (both[k] < 0)
            continue;
        cJSON *x = cJSON_CreateObject(), *ids = cJSON_CreateArray(), *strs = cJSON_CreateArray();
        cJSON_AddStringToObject(x, "id", name[k]);
        cJSON_AddItemToArray(ids, cJSON_CreateNumber(both[k]));
        cJSON_AddItemToArray(strs, cJSON_CreateString(name[k]));
        cJSON_AddItemToObject(x, "ids", ids);
        cJSON_AddItemToObject(x, "tokens", strs);
        cJSON_DeleteItemFromObjectCaseSensitive(sp, name[k]); /* bos and eos may be one token */
        cJSON_AddItemToObject(sp, name[k], x);
    }
    cJSON_AddItemToObject(o, "special_tokens", sp);
    return o;
}

/*
 * The llama kind as transformers' GGUF loader (GGUFLlamaConverter, legacy): "▁" prepended when
 * add_space_prefix, spaces as "▁", no pre-tokeniser, BPE with byte fallback; decoded by byte fallback, fuse,
 * "▁" as spaces and the prefix's space stripped. The gpt2 kind: the row's splits, then byte-level.
 */
static cJSON *pipeline(const struct meta *m)
{
    cJSON *j = cJSON_CreateObject(), *steps[6];
    int n = 0;
    if (m->kind == K_LLAMA) {
        if (m->prefix_space) {
            cJSON *p = obj("Prepend");
            cJSON_AddStringToObject(p, "prepend", "\xe2\x96\x81");
            steps[n++] = p;
        }
        steps[n++] = replace(" ", "\xe2\x96\x81");
        cJSON_AddItemToObject(j, "normalizer", seq("Sequence", "normalizers", steps, n));
        n = 0;
        steps[n++] = obj("ByteFallback");
        steps[n++] = obj("Fuse");
        steps[n++] = replace("\xe2\x96\x81", " ");
        if (m->prefix_space) {
            cJSON *s = obj("Strip");
            cJSON_AddStringToObject(s, "content", " ");
            cJSON_AddNumberToObject(s, "start", 1);
            cJSON_AddNumberToObject(s, "stop", 0);
            steps[n++] = s;
        }
        cJSON_AddItemToObject(j, "decoder", seq("Sequence", "decoders", steps, n));
    } else {
        if (m->pre->nfc)
            cJSON_AddItemToObject(j, "normalizer", obj("NFC"));
        for (int k = 0; k < 4 && m->pre->split[k]; k++) {
            cJSON *s = obj("Split"), *p = cJSON_CreateObject();
            cJSON_AddStringToObject(p, "Regex", m->pre->split[k]);
            cJSON_AddItemToObject(s, "pattern", p);
            cJSON_AddStringToObject(s, "behavior", "Isolated");
            cJSON_AddBoolToObject(s, "invert", false);
            steps[n++] = s;
        }
        cJSON *b = obj("ByteLevel");
        cJSON_AddBoolToObject(b, "add_prefix_space", false);
        cJSON_AddBoolToObject(b, "use_regex", m->pre->byte_regex);
        steps[n++] = b;
        cJSON_AddItemToObject(j, "pre_tokenizer", seq("Sequence", "pretokenizers", steps, n));
        cJSON_AddItemToObject(j, "decoder", obj("ByteLevel"));
    }
    char *name[2] = {NULL, NULL};
    const int32_t id[2] = {m->bos, m->eos};
    for (int k = 0; k < 2; k++)
        if (id[k] >= 0 && (name[k] = malloc(m->tokens->str[id[k]].len + 1))) {
            memcpy(name[k], m->tokens->str[id[k]].p, m->tokens->str[id[k]].len);
            name[k][m->tokens->str[id[k]].len] = 0;
        }
    if ((m->add_bos && !name[0]) || (m->add_eos && !name[1])) {
        cJSON_Delete(j);
        j = NULL;
    } else if (m->add_bos || m->add_eos) {
        cJSON_AddItemToObject(j, "post_processor", template(m, name));
    }
    free(name[0]);
    free(name[1]);
    return j;
}

// --- the whole ----------------------------------------------------------------------------------

/* XXH3-128 of every tokenizer.* key and value and of headprune's reading of them (the text cache's key). */
static void digest(const struct hp_gguf *g, uint8_t out[16])
{
    XXH3_state_t *h = XXH3_createState();
    memset(out, 0, 16);
    if (!h)
        return;
    XXH3_128bits_reset(h);
    XXH3_128bits_update(h, "headprune-gguf-tokenizer-1", 26);
    for (int64_t i = 0; i < hp_gguf_kv_count(g); i++) {
        const struct hp_gguf_kv *kv = hp_gguf_kv_at(g, i);
        if (strncmp(kv->key, "tokenizer.", 10) != 0)
            continue;
        XXH3_128bits_update(h, kv->key, strlen(kv->key) + 1);
        XXH3_128bits_update(h, &kv->n, sizeof kv->n);
        for (uint64_t k = 0; kv->str && k < kv->n; k++) {
            XXH3_128bits_update(h, &kv->str[k].len, sizeof kv->str[k].len);
            XXH3_128bits_update(h, kv->str[k].p, kv->str[k].len);
        }
        for (uint64_t k = 0; !kv->str && k < kv->n; k++) {
            double v = 0;
            hp_gguf_arr_f64(kv, k, &v);
            XXH3_128bits_update(h, &v, sizeof v);
        }
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(h));
    memcpy(out, c.digest, 16);
    XXH3_freeState(h);
}

enum hp_status ht_gguf_read(struct hp_tokenizer *t, const struct hp_gguf *g, struct cJSON **pipe,
                            struct hp_error *err)
{
    struct meta m = {.file = hp_gguf_name(g)};
    *pipe = NULL;
    enum hp_status st = read_meta(g, &m, err);
    if (st == HP_OK)
        st = read_vocab(t, &m, err);
    if (st == HP_OK)
        st = m.merges ? read_merges(t, &m, err) : make_merges(t, &m, err);
    if (st != HP_OK)
        return st;
    t->byte_fallback = t->fuse_unk = m.kind == K_LLAMA;
    t->ignore_merges = m.kind == K_GPT2 && m.pre->ignore_merges;
    t->unk_id = m.kind == K_LLAMA ? m.unk : -1; /* byte-level: every byte is a token, as in GPT-2's file */
    t->bos = m.bos;
    t->eos = m.eos;
    t->pad = m.pad;
    t->clean_up = m.kind == K_GPT2 && m.pre->clean_up;
    for (int b = 0; b < 256; b++) {
        char tok[8];
        snprintf(tok, sizeof tok, "<0x%02X>", b);
        t->byte_tok[b] = m.kind == K_LLAMA ? ht_vocab_id(t, tok, strlen(tok)) : -1;
    }
    char src[160];
    if (m.kind == K_LLAMA)
        snprintf(src, sizeof src, "SentencePiece BPE \"llama\"");
    else
        snprintf(src, sizeof src, "byte-level BPE \"gpt2\", pre-tokenizer \"%s\"", m.pre_name);
    if (hp_path_make(&t->source, err, "%s (its metadata: %s, %d tokens)", m.file, src, m.n) != HP_OK)
        return HP_ERR_NOMEM;
    t->gguf = true;
    digest(g, t->digest);
    if (!(*pipe = pipeline(&m)))
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    return HP_OK;
}
