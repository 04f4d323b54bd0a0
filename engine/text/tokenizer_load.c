/*
 * tokenizer_load.c -- a model directory's tokenizer read into a struct
 * hp_tokenizer (hp_tokenizer_open): tokenizer.json's normalisers,
 * pre-tokenisers, model (BPE or WordPiece, its vocabulary and merges), added
 * tokens, post-processor template and decoder (handed to detokenize.c); or,
 * without tokenizer.json, vocab.txt (BERT WordPiece) or vocab.json +
 * merges.txt (GPT-2 byte-level BPE); and tokenizer_config.json's
 * clean_up_tokenization_spaces. Or, for a GGUF model (a .gguf file, or a
 * folder holding one and no tokenizer files, which win), the file's own
 * tokenizer.ggml.* metadata (tokenizer_gguf.c builds the struct and hands
 * back its pipeline as a tokenizer.json would hold it, read here alike).
 *
 * Part of the tokenizer family (tokenizer_priv.h): tokenizer.c runs what
 * this builds. Must not: print or exit; accept a file the tokenizers library
 * would read differently (what it cannot run is refused at load, naming the
 * file and the key).
 */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tokenizer_priv.h"

#include "gguf.h"
#include "json.h"
#include "model.h" // hp_gguf_find: which file of a model path is its GGUF
#include "util.h"

static const char gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// --- loading tokenizer.json ----------------------------------------------------------------

#define FAIL(...) (st = hp_fail(err, HP_ERR_FORMAT, __VA_ARGS__))

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool jbool(const cJSON *o, const char *k, bool dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static bool note_id(struct hp_tokenizer *t, int64_t id)
{
    if (id < 0 || id > INT32_MAX - 1)
        return false;
    if (id + 1 > t->n_ids)
        t->n_ids = (int32_t)id + 1;
    return true;
}

/* pr's regex from pat, which pr keeps for messages. */
static enum hp_status compile_re(struct hp_tokenizer *t, const char *pat, struct pre *pr, struct hp_error *err)
{
    int code;
    PCRE2_SIZE off;
    pr->re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &off, NULL);
    if (!pr->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return hp_fail(err, HP_ERR_FORMAT, "%s: pre-tokenizer regex at offset %zu: %s", t->path, (size_t)off,
                       (const char *)msg);
    }
    if (!(pr->pattern = strdup(pat))) {
        pcre2_code_free(pr->re);
        pr->re = NULL;
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    }
    return HP_OK;
}

/* n's steps: the items of a {"type": "Sequence", key: [...]} (nested ones too), else n itself; none for null. */
static enum hp_status each_step(struct hp_tokenizer *t, const cJSON *n, const char *key,
                                enum hp_status (*add_one)(struct hp_tokenizer *, const cJSON *, struct hp_error *),
                                struct hp_error *err)
{
    if (!n || cJSON_IsNull(n))
        return HP_OK;
    const char *type = jstr(n, "type");
    if (type && strcmp(type, "Sequence") == 0) {
        const cJSON *x;
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(n, key))
        {
            enum hp_status st = each_step(t, x, key, add_one, err);
            if (st != HP_OK)
                return st;
        }
        return HP_OK;
    }
    return add_one(t, n, err);
}

/* *arr grown by one zeroed element of size sz, returned; NULL (and *arr unchanged) when out of memory. */
static void *grow_one(void **arr, int n, size_t sz)
{
    char *p = realloc(*arr, (size_t)(n + 1) * sz);
    if (!p)
        return NULL;
    *arr = p;
    memset(p + (size_t)n * sz, 0, sz);
    return p + (size_t)n * sz;
}

static enum hp_status add_norm(struct hp_tokenizer *t, const cJSON *n, struct hp_error *err)
{
    enum hp_status st = HP_OK;
    const char *type = jstr(n, "type");
    struct norm *nm = grow_one((void **)&t->norm, t->n_norm, sizeof *nm);
    if (!nm)
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    if (!type)
        return FAIL("%s: a normalizer without a type", t->path);
    if (strcmp(type, "BertNormalizer") == 0) {
        nm->kind = N_BERT;
        nm->clean_text = jbool(n, "clean_text", true);
        nm->chinese = jbool(n, "handle_chinese_chars", true);
        nm->lowercase = jbool(n, "lowercase", true);
        const cJSON *sa = cJSON_GetObjectItemCaseSensitive(n, "strip_accents");
        nm->strip_accents = cJSON_IsBool(sa) ? cJSON_IsTrue(sa) : nm->lowercase;
    } else if (strcmp(type, "Prepend") == 0 && jstr(n, "prepend")) {
        nm->kind = N_PREPEND;
        nm->a = strdup(jstr(n, "prepend"));
    } else if (strcmp(type, "Replace") == 0) {
        const char *pat = jstr(cJSON_GetObjectItemCaseSensitive(n, "pattern"), "String");
        if (!pat || !jstr(n, "content"))
            return FAIL("%s: normalizer Replace with a regex pattern is not supported (only String patterns)", t->path);
        nm->kind = N_REPLACE;
        nm->a = strdup(pat);
        nm->b = strdup(jstr(n, "content"));
    } else if (strcmp(type, "NFC") == 0) {
        nm->kind = N_NFC;
    } else if (strcmp(type, "NFD") == 0) {
        nm->kind = N_NFD;
    } else if (strcmp(type, "NFKC") == 0) {
        nm->kind = N_NFKC;
    } else if (strcmp(type, "NFKD") == 0) {
        nm->kind = N_NFKD;
    } else if (strcmp(type, "Lowercase") == 0) {
        nm->kind = N_LOWERCASE;
    } else if (strcmp(type, "StripAccents") == 0) {
        nm->kind = N_STRIP_ACCENTS;
    } else {
        return FAIL("%s: normalizer '%s' is not supported (supported: BertNormalizer, Prepend, Replace, NFC, NFD, "
                    "NFKC, NFKD, Lowercase, StripAccents, Sequence)",
                    t->path, type);
    }
    t->n_norm++; /* counted from here: hp_tokenizer_free frees its strings */
    if ((nm->kind == N_PREPEND || nm->kind == N_REPLACE) && (!nm->a || (nm->kind == N_REPLACE && !nm->b)))
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    /* the normalised text must stay UTF-8 (the regexes rely on it): so must what a step inserts */
    const char *ins[2] = {nm->a, nm->b};
    for (int i = 0; i < 2; i++)
        if (ins[i] && ht_check_utf8("a normalizer's string", ins[i], strlen(ins[i]), err) != HP_OK)
            return FAIL("%s: normalizer %s has a string that is not valid UTF-8", t->path, type);
    return st;
}

static enum hp_status add_pre(struct hp_tokenizer *t, const cJSON *n, struct hp_error *err)
{
    enum hp_status st = HP_OK;
    const char *type = jstr(n, "type");
    struct pre *pr = grow_one((void **)&t->pre, t->n_pre, sizeof *pr);
    if (!pr)
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    if (!type)
        return FAIL("%s: a pre_tokenizer without a type", t->path);
    if (strcmp(type, "BertPreTokenizer") == 0) {
        pr->kind = P_BERT;
    } else if (strcmp(type, "WhitespaceSplit") == 0) {
        pr->kind = P_WHITESPACE_SPLIT;
    } else if (strcmp(type, "ByteLevel") == 0) {
        pr->kind = P_BYTELEVEL;
        pr->add_prefix_space = jbool(n, "add_prefix_space", true);
        pr->use_regex = jbool(n, "use_regex", true);
        t->byte_level = true;
        if (pr->use_regex && (st = compile_re(t, gpt2_regex, pr, err)) != HP_OK)
            return st;
    } else if (strcmp(type, "Digits") == 0) {
        /* the library's Digits: runs of numeric characters (Rust's is_numeric: \p{N}) isolated, or each one */
        pr->kind = P_SPLIT;
        pr->isolated = true;
        if ((st = compile_re(t, jbool(n, "individual_digits", false) ? "\\p{N}" : "\\p{N}+", pr, err)) != HP_OK)
            return st;
    } else if (strcmp(type, "Split") == 0) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(n, "pattern");
        const char *re = jstr(pat, "Regex"), *behavior = jstr(n, "behavior");
        if (!re || !behavior || jbool(n, "invert", false) ||
            (strcmp(behavior, "Isolated") != 0 && strcmp(behavior, "Removed") != 0))
            return FAIL("%s: pre_tokenizer Split is supported with a Regex pattern, behavior Isolated or Removed "
                        "and invert false only", t->path);
        pr->kind = P_SPLIT;
        pr->isolated = strcmp(behavior, "Isolated") == 0;
        if ((st = compile_re(t, re, pr, err)) != HP_OK)
            return st;
    } else {
        return FAIL("%s: pre_tokenizer '%s' is not supported (supported: BertPreTokenizer, ByteLevel, Digits, Split, "
                    "WhitespaceSplit, Sequence)",
                    t->path, type);
    }
    t->n_pre++;
    return st;
}

/* A template's special token and its string: the token string of an id that neither the
 * vocabulary nor the added tokens have (Encoding.tokens shows it; decoding drops it). */
static bool note_tmpl_token(struct hp_tokenizer *t, int32_t id, const cJSON *s)
{
    if (!cJSON_IsString(s))
        return true;
    struct piece *p = grow_one((void **)&t->tmpl_tokens, t->n_tmpl_tokens, sizeof *p);
    if (!p || !(p->s = strdup(s->valuestring)))
        return false;
    p->id = id;
    p->rank = 2;
    p->n = strlen(p->s);
    t->n_tmpl_tokens++;
    return true;
}

/* A post-processor's special-token id v into *out: a whole number the tokenizer then counts among its
 * ids, so a model too small for it is refused; false for anything else. */
static bool special_id(struct hp_tokenizer *t, const cJSON *v, int32_t *out)
{
    double x = cJSON_IsNumber(v) ? v->valuedouble : -1;
    if (!(x >= 0 && x < INT32_MAX && x == (double)(int64_t)x) || !note_id(t, (int64_t)x))
        return false;
    *out = (int32_t)x;
    return true;
}

/* The template of TemplateProcessing ("single"/"pair") or the equivalent of BertProcessing. */
static enum hp_status add_template(struct hp_tokenizer *t, const cJSON *list, const cJSON *specials,
                                   struct tmpl_item **out, int *n_out, struct hp_error *err)
{
    enum hp_status st = HP_OK;
    int n = cJSON_GetArraySize(list);
    *out = calloc((size_t)n + 1, sizeof **out);
    if (!*out)
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    *n_out = n;
    for (int i = 0; i < n; i++) {
        const cJSON *it = cJSON_GetArrayItem(list, i);
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken"),
                    *sq = cJSON_GetObjectItemCaseSensitive(it, "Sequence");
        const cJSON *o = sp ? sp : sq;
        const char *id = jstr(o, "id");
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(o, "type_id");
        if (!o || !id)
            return FAIL("%s: post_processor template item %d is neither a SpecialToken nor a Sequence", t->path, i);
        if (ty && !(cJSON_IsNumber(ty) && ty->valuedouble >= 0 && ty->valuedouble <= 255 &&
                    ty->valuedouble == (double)(int)ty->valuedouble))
            return FAIL("%s: post_processor template item %d: type_id is not a whole number from 0 to 255", t->path, i);
        (*out)[i].type_id = ty ? ty->valueint : 0;
        if (sq) {
            (*out)[i].seq = strcmp(id, "B") == 0;
            continue;
        }
        (*out)[i].seq = -1;
        const cJSON *sp_tok = cJSON_GetObjectItemCaseSensitive(specials, id);
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(sp_tok, "ids"),
                    *strs = cJSON_GetObjectItemCaseSensitive(sp_tok, "tokens");
        int k = cJSON_GetArraySize(ids);
        if (k < 1)
            return FAIL("%s: post_processor special token '%s' has no ids", t->path, id);
        /* the library requires a string for each id (its SpecialToken has ids and tokens alike); without one an
         * id the vocabulary lacks would be emitted with no string to decode it to */
        bool strings = cJSON_IsArray(strs) && cJSON_GetArraySize(strs) == k;
        for (int j = 0; strings && j < k; j++)
            strings = cJSON_IsString(cJSON_GetArrayItem(strs, j));
        if (!strings)
            return FAIL("%s: post_processor special token '%s' needs \"tokens\", one string for each of its %d id%s",
                        t->path, id, k, k == 1 ? "" : "s");
        (*out)[i].ids = malloc((size_t)k * sizeof(int32_t));
        if (!(*out)[i].ids)
            return hp_fail(err, HP_ERR_NOMEM, "out of memory");
        (*out)[i].n_ids = k;
        for (int j = 0; j < k; j++) {
            if (!special_id(t, cJSON_GetArrayItem(ids, j), &(*out)[i].ids[j]))
                return FAIL("%s: post_processor special token '%s': id %d is not a whole number from 0 to %d", t->path,
                            id, j, INT32_MAX - 1);
            if (!note_tmpl_token(t, (*out)[i].ids[j], cJSON_GetArrayItem(strs, j)))
                return hp_fail(err, HP_ERR_NOMEM, "out of memory");
        }
    }
    return HP_OK;
}

static enum hp_status add_post(struct hp_tokenizer *t, const cJSON *n, struct hp_error *err)
{
    enum hp_status st = HP_OK;
    const char *type = jstr(n, "type");
    if (!type)
        return FAIL("%s: a post_processor without a type", t->path);
    if (strcmp(type, "ByteLevel") == 0)
        return HP_OK; /* offsets only */
    if ((strcmp(type, "TemplateProcessing") == 0 || strcmp(type, "BertProcessing") == 0) && t->single)
        return FAIL("%s: more than one post_processor adds special tokens", t->path);
    if (strcmp(type, "TemplateProcessing") == 0) {
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(n, "special_tokens");
        if ((st = add_template(t, cJSON_GetObjectItemCaseSensitive(n, "single"), sp, &t->single, &t->n_single,
                               err)) != HP_OK)
            return st;
        return add_template(t, cJSON_GetObjectItemCaseSensitive(n, "pair"), sp, &t->pair, &t->n_pair, err);
    }
    if (strcmp(type, "BertProcessing") == 0) {
        const cJSON *cls = cJSON_GetObjectItemCaseSensitive(n, "cls"), *sep = cJSON_GetObjectItemCaseSensitive(n, "sep");
        if (cJSON_GetArraySize(cls) != 2 || cJSON_GetArraySize(sep) != 2)
            return FAIL("%s: BertProcessing needs cls and sep as [token, id]", t->path);
        /* checked and counted as a template's ids are (found by fuzzing: 9 past a vocabulary of 2 went out) */
        int32_t c, s;
        if (!special_id(t, cJSON_GetArrayItem(cls, 1), &c) || !special_id(t, cJSON_GetArrayItem(sep, 1), &s))
            return FAIL("%s: BertProcessing: the id of cls or sep is not a whole number from 0 to %d", t->path,
                        INT32_MAX - 1);
        if (!note_tmpl_token(t, c, cJSON_GetArrayItem(cls, 0)) || !note_tmpl_token(t, s, cJSON_GetArrayItem(sep, 0)))
            return hp_fail(err, HP_ERR_NOMEM, "out of memory");
        static const int seqs[5] = {-1, 0, -1, 1, -1}, types[5] = {0, 0, 0, 1, 1};
        t->single = calloc(3, sizeof *t->single);
        t->pair = calloc(5, sizeof *t->pair);
        if (!t->single || !t->pair)
            return hp_fail(err, HP_ERR_NOMEM, "out of memory");
        for (int i = 0; i < 5; i++) {
            struct tmpl_item *it = &t->pair[i];
            it->seq = seqs[i];
            it->type_id = types[i];
            if (it->seq < 0) {
                if (!(it->ids = malloc(sizeof(int32_t))))
                    return hp_fail(err, HP_ERR_NOMEM, "out of memory");
                it->ids[0] = i == 0 ? c : s;
                it->n_ids = 1;
            }
            if (i < 3) {
                t->single[i] = *it;
                if (it->ids && !(t->single[i].ids = malloc(sizeof(int32_t))))
                    return hp_fail(err, HP_ERR_NOMEM, "out of memory");
                if (it->ids)
                    t->single[i].ids[0] = it->ids[0];
            }
        }
        t->n_single = 3;
        t->n_pair = 5;
        return HP_OK;
    }
    return FAIL("%s: post_processor '%s' is not supported (supported: TemplateProcessing, BertProcessing, ByteLevel, "
                "Sequence)",
                t->path, type);
}

/* A merge "a b" or ["a", "b"], ranked by its place in the list. */
static enum hp_status add_merge(struct hp_tokenizer *t, const cJSON *m, int64_t rank, struct hp_error *err)
{
    enum hp_status st = HP_OK;
    const char *a = NULL, *b = NULL;
    char *tmp = NULL;
    if (cJSON_IsString(m)) {
        tmp = strdup(m->valuestring);
        char *sp = tmp ? strchr(tmp, ' ') : NULL;
        if (sp) {
            *sp = 0;
            a = tmp;
            b = sp + 1;
        }
    } else if (cJSON_GetArraySize(m) == 2) {
        a = cJSON_GetArrayItem(m, 0)->valuestring;
        b = cJSON_GetArrayItem(m, 1)->valuestring;
    }
    if (!a || !b) {
        free(tmp);
        return FAIL("%s: merge %lld is neither \"a b\" nor [\"a\", \"b\"]", t->path, (long long)rank);
    }
    size_t la = strlen(a), lb = strlen(b);
    char *ab = malloc(la + lb + 1);
    int32_t ia = ht_vocab_id(t, a, la), ib = ht_vocab_id(t, b, lb), iab = -1;
    if (ab) {
        memcpy(ab, a, la);
        memcpy(ab + la, b, lb);
        iab = ht_vocab_id(t, ab, la + lb);
    }
    free(ab);
    free(tmp);
    if (ia < 0 || ib < 0 || iab < 0)
        return FAIL("%s: merge %lld names a token that is not in the vocabulary", t->path, (long long)rank);
    int32_t key[2] = {ia, ib};
    int64_t old;
    if (!ht_map_get(&t->merges, (const char *)key, sizeof key, &old) &&
        !ht_map_put(&t->merges, (const char *)key, sizeof key, rank << 32 | (int64_t)(uint32_t)iab))
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    return st;
}

static enum hp_status add_vocab_entry(struct hp_tokenizer *t, const char *tok, int64_t id, struct hp_error *err)
{
    if (!note_id(t, id))
        return hp_fail(err, HP_ERR_FORMAT, "%s: token id %lld out of range", t->path, (long long)id);
    size_t n = strlen(tok);
    if (!ht_map_put(&t->vocab, tok, n, id))
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    if (n > t->longest)
        t->longest = n;
    return HP_OK;
}

static enum hp_status load_model(struct hp_tokenizer *t, const cJSON *m, struct hp_error *err)
{
    enum hp_status st = HP_OK;
    const char *type = jstr(m, "type");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab");
    if (!type)
        return FAIL("%s: model without a type", t->path);
    if (strcmp(type, "BPE") == 0)
        t->model = M_BPE;
    else if (strcmp(type, "WordPiece") == 0)
        t->model = M_WORDPIECE;
    else
        return FAIL("%s: tokenizer model '%s' is not supported (supported: BPE, WordPiece)", t->path, type);
    if (!cJSON_IsObject(vocab))
        return FAIL("%s: model.vocab is not an object of token: id", t->path);
    if (!ht_map_init(&t->vocab, (size_t)cJSON_GetArraySize(vocab) + 1024))
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab)
    {
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0 && e->valuedouble < 2147483647.0))
            return FAIL("%s: vocabulary entry '%s' has no id in 0..2^31-2", t->path, e->string);
        if ((st = add_vocab_entry(t, e->string, (int64_t)e->valuedouble, err)) != HP_OK)
            return st;
    }
    const char *unk = jstr(m, "unk_token");
    t->unk_id = unk ? ht_vocab_id(t, unk, strlen(unk)) : -1;
    if (t->model == M_WORDPIECE) {
        const char *pre = jstr(m, "continuing_subword_prefix");
        snprintf(t->prefix, sizeof t->prefix, "%s", pre ? pre : "##");
        const cJSON *mx = cJSON_GetObjectItemCaseSensitive(m, "max_input_chars_per_word");
        t->max_chars = cJSON_IsNumber(mx) ? mx->valueint : 100;
        if (t->unk_id < 0)
            return FAIL("%s: WordPiece needs its unk_token in the vocabulary", t->path);
        return HP_OK;
    }
    if (jstr(m, "continuing_subword_prefix") || jstr(m, "end_of_word_suffix"))
        return FAIL("%s: BPE with continuing_subword_prefix or end_of_word_suffix is not supported", t->path);
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(m, "dropout");
    if (cJSON_IsNumber(dropout) && dropout->valuedouble > 0)
        return FAIL("%s: BPE dropout is not supported (evaluation needs deterministic tokens)", t->path);
    t->byte_fallback = jbool(m, "byte_fallback", false);
    t->fuse_unk = jbool(m, "fuse_unk", false);
    t->ignore_merges = jbool(m, "ignore_merges", false);
    for (int b = 0; b < 256; b++) {
        char tok[8];
        snprintf(tok, sizeof tok, "<0x%02X>", b);
        t->byte_tok[b] = ht_vocab_id(t, tok, strlen(tok));
    }
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(m, "merges");
    if (!ht_map_init(&t->merges, (size_t)cJSON_GetArraySize(merges) + 16))
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    int64_t rank = 0;
    cJSON_ArrayForEach(e, merges)
    if ((st = add_merge(t, e, rank++, err)) != HP_OK)
        return st;
    return HP_OK;
}

static enum hp_status load_added(struct hp_tokenizer *t, const cJSON *list, struct hp_error *err)
{
    int n = cJSON_GetArraySize(list);
    t->added = calloc((size_t)n + 1, sizeof *t->added);
    if (!t->added)
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    const cJSON *a;
    cJSON_ArrayForEach(a, list)
    {
        const char *s = jstr(a, "content");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
        /* range first: converting a double outside int64_t's range is undefined */
        if (!s || !cJSON_IsNumber(id) || !(id->valuedouble >= 0 && id->valuedouble < 2147483647.0) ||
            !note_id(t, (int64_t)id->valuedouble))
            return hp_fail(err, HP_ERR_FORMAT, "%s: an added token without content or a valid id", t->path);
        if (!*s)
            continue;
        /* text is cut at added tokens by bytes: UTF-8 tokens cut it between characters only */
        if (ht_check_utf8("an added token", s, strlen(s), err) != HP_OK)
            return hp_fail(err, HP_ERR_FORMAT, "%s: added token %lld is not valid UTF-8", t->path,
                           (long long)id->valuedouble);
        struct added *x = &t->added[t->n_added++];
        x->s = strdup(s);
        x->n = strlen(s);
        x->id = id->valueint;
        x->lstrip = jbool(a, "lstrip", false);
        x->rstrip = jbool(a, "rstrip", false);
        x->special = jbool(a, "special", false);
        if (!x->s)
            return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    }
    return HP_OK;
}

/* The normalizer, pre_tokenizer and post_processor of a tokenizer.json-shaped object, in order. */
static enum hp_status add_pipeline(struct hp_tokenizer *t, const cJSON *j, struct hp_error *err)
{
    enum hp_status st = each_step(t, cJSON_GetObjectItemCaseSensitive(j, "normalizer"), "normalizers", add_norm, err);
    if (st == HP_OK)
        st = each_step(t, cJSON_GetObjectItemCaseSensitive(j, "pre_tokenizer"), "pretokenizers", add_pre, err);
    if (st == HP_OK)
        st = each_step(t, cJSON_GetObjectItemCaseSensitive(j, "post_processor"), "processors", add_post, err);
    return st;
}

static enum hp_status load_json(struct hp_tokenizer *t, const char *text, size_t len, struct hp_error *err)
{
    cJSON *j;
    enum hp_status st = hp_json_parse(t->path, 1, text, len, NULL, &j, err);
    if (st != HP_OK)
        return st;
    if (!j)
        return FAIL("%s: not valid JSON", t->path);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (!cJSON_IsObject(m))
        FAIL("%s: no \"model\" object", t->path);
    if (st == HP_OK)
        st = load_model(t, m, err);
    if (st == HP_OK)
        st = load_added(t, cJSON_GetObjectItemCaseSensitive(j, "added_tokens"), err);
    if (st == HP_OK)
        st = add_pipeline(t, j, err);
    if (st == HP_OK)
        st = hp_decoder_load(cJSON_GetObjectItemCaseSensitive(j, "decoder"), t->path, &t->dec, err);
    if (st == HP_OK && t->byte_level && t->model != M_BPE)
        FAIL("%s: a ByteLevel pre-tokenizer with a %s model is not supported", t->path, "WordPiece");
    cJSON_Delete(j);
    return st;
}

/* A tokenizer file's text and its length (len may be NULL); NULL with *st HP_OK when there is no such file. */
static char *read_opt(const char *path, size_t *len, enum hp_status *st, struct hp_error *err)
{
    char *out = NULL;
    *st = HP_OK;
    if (access(path, F_OK) != 0) {
        if (errno == ENAMETOOLONG) /* not a missing file */
            *st = hp_fail(err, HP_ERR_IO, "%s: cannot open (%s)", path, hp_strerror(errno));
        return NULL;
    }
    *st = hp_read_text(path, (size_t)1 << 30, HP_ERR_FORMAT, "a tokenizer file", &out, len, err);
    return *st == HP_OK ? out : NULL;
}

// --- fallback files: vocab.txt (BERT WordPiece), vocab.json + merges.txt (GPT-2 BPE) --------

/* vocab.txt and merges.txt are cut into lines as C strings: a NUL byte would end the file there
 * (every token after it lost, so known words became [UNK]). */
static enum hp_status no_nul(const char *path, const char *text, size_t len, struct hp_error *err)
{
    const char *z = memchr(text, 0, len);
    if (!z)
        return HP_OK;
    size_t line = 1;
    for (const char *c = text; c < z; c++)
        line += *c == '\n';
    return hp_fail(err, HP_ERR_FORMAT, "%s:%zu: holds a NUL byte (is this a text file?)", path, line);
}

static enum hp_status load_vocab_txt(struct hp_tokenizer *t, const char *dir, char *text, struct hp_error *err)
{
    enum hp_status st = HP_OK;
    size_t lines = 1;
    for (char *p = text; *p; p++)
        lines += *p == '\n';
    if (!ht_map_init(&t->vocab, lines))
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    int64_t id = 0;
    for (char *line = text, *nl; line && *line; line = nl ? nl + 1 : NULL, id++) {
        nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        size_t n = strlen(line);
        if (n && line[n - 1] == '\r')
            line[n - 1] = 0;
        if ((st = add_vocab_entry(t, line, id, err)) != HP_OK)
            return st;
    }
    /* do_lower_case from tokenizer_config.json when present; uncased otherwise, as BertTokenizer */
    bool lower = true;
    char *path;
    if ((st = hp_path_make(&path, err, "%s/tokenizer_config.json", dir)) != HP_OK)
        return st;
    enum hp_status cst;
    struct hp_error cerr;
    size_t n_cfg;
    char *cfg = read_opt(path, &n_cfg, &cst, &cerr);
    if (cfg) {
        /* a file that is not JSON is ignored, as before; a key cut at a NUL would be read as another */
        cJSON *c;
        st = hp_json_parse(path, 1, cfg, n_cfg, NULL, &c, err);
        lower = jbool(c, "do_lower_case", true);
        cJSON_Delete(c);
        free(cfg);
        if (st != HP_OK) {
            free(path);
            return st;
        }
    }
    free(path);
    t->model = M_WORDPIECE;
    snprintf(t->prefix, sizeof t->prefix, "##");
    t->max_chars = 100;
    t->unk_id = ht_vocab_id(t, "[UNK]", 5);
    int32_t cls = ht_vocab_id(t, "[CLS]", 5), sep = ht_vocab_id(t, "[SEP]", 5);
    if (t->unk_id < 0 || cls < 0 || sep < 0)
        return FAIL("%s: vocab.txt lacks [UNK], [CLS] or [SEP]", t->path);
    static const char *const specials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    t->added = calloc(5, sizeof *t->added);
    if (!t->added)
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    for (int i = 0; i < 5; i++) {
        int32_t v = ht_vocab_id(t, specials[i], strlen(specials[i]));
        if (v >= 0) {
            t->added[t->n_added] = (struct added){strdup(specials[i]), strlen(specials[i]), v, false, false, true};
            if (!t->added[t->n_added++].s)
                return hp_fail(err, HP_ERR_NOMEM, "out of memory");
        }
    }
    char json[512];
    snprintf(json, sizeof json,
             "{\"normalizer\": {\"type\": \"BertNormalizer\", \"lowercase\": %s}, \"pre_tokenizer\": {\"type\": "
             "\"BertPreTokenizer\"}, \"post_processor\": {\"type\": \"BertProcessing\", \"sep\": [\"[SEP]\", %d], "
             "\"cls\": [\"[CLS]\", %d]}}",
             lower ? "true" : "false", sep, cls);
    cJSON *j;
    hp_json_parse(t->path, 0, json, strlen(json), NULL, &j, NULL);
    st = add_pipeline(t, j, err);
    cJSON_Delete(j);
    /* what transformers' converter gives BertTokenizer */
    static const char wordpiece[] = "{\"type\": \"WordPiece\", \"prefix\": \"##\", \"cleanup\": true}";
    cJSON *dec;
    hp_json_parse(t->path, 0, wordpiece, sizeof wordpiece - 1, NULL, &dec, NULL);
    if (st == HP_OK)
        st = hp_decoder_load(dec, t->path, &t->dec, err);
    cJSON_Delete(dec);
    return st;
}

static enum hp_status load_gpt2_files(struct hp_tokenizer *t, const char *vocab_json, size_t n_vocab_json,
                                      char *merges, struct hp_error *err)
{
    /* the same as a tokenizer.json with that vocabulary and those merges */
    cJSON *model = cJSON_CreateObject(), *m = cJSON_CreateArray();
    cJSON *v;
    enum hp_status st = hp_json_parse(t->path, 1, vocab_json, n_vocab_json, NULL, &v, err);
    if (st == HP_OK && (!model || !m))
        st = hp_fail(err, HP_ERR_NOMEM, "out of memory");
    else if (st == HP_OK && !cJSON_IsObject(v))
        FAIL("%s: vocab.json is not an object of token: id", t->path);
    int line = 0;
    for (char *p = merges, *nl; st == HP_OK && p && *p; p = nl ? nl + 1 : NULL, line++) {
        nl = strchr(p, '\n');
        if (nl)
            *nl = 0;
        size_t n = strlen(p);
        if (n && p[n - 1] == '\r')
            p[--n] = 0;
        if ((line == 0 && strncmp(p, "#version", 8) == 0) || n == 0)
            continue;
        cJSON_AddItemToArray(m, cJSON_CreateString(p));
    }
    if (st == HP_OK) {
        cJSON_AddStringToObject(model, "type", "BPE");
        cJSON_AddItemToObject(model, "vocab", v);
        v = NULL;
        cJSON_AddItemToObject(model, "merges", m);
        m = NULL;
        st = load_model(t, model, err);
    }
    cJSON_Delete(model);
    cJSON_Delete(m);
    cJSON_Delete(v);
    if (st != HP_OK)
        return st;
    static const char byte_level[] = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}";
    cJSON *pre;
    hp_json_parse(t->path, 0, byte_level, sizeof byte_level - 1, NULL, &pre, NULL);
    st = each_step(t, pre, "pretokenizers", add_pre, err);
    if (st == HP_OK)
        st = hp_decoder_load(pre, t->path, &t->dec, err);
    cJSON_Delete(pre);
    int32_t eot = ht_vocab_id(t, "<|endoftext|>", 13);
    t->added = calloc(1, sizeof *t->added);
    if (st == HP_OK && !t->added)
        st = hp_fail(err, HP_ERR_NOMEM, "out of memory");
    if (st == HP_OK && eot >= 0) {
        t->added[0] = (struct added){strdup("<|endoftext|>"), 13, eot, false, false, true};
        t->n_added = t->added[0].s ? 1 : 0;
    }
    return st;
}

/* transformers' clean_up_tokenization_spaces from dir's tokenizer_config.json: false when the file or the
 * key is absent (the default of its fast tokenizers, which BertTokenizer's own default of true does not
 * reach) or the file is not JSON; an error only for a string holding a NUL (json.c). */
static enum hp_status read_clean_up(const char *dir, bool *on, struct hp_error *err)
{
    char *path;
    enum hp_status st;
    struct hp_error rerr;
    size_t n = 0;
    if ((st = hp_path_make(&path, err, "%s/tokenizer_config.json", dir)) != HP_OK)
        return st;
    char *text = read_opt(path, &n, &st, &rerr);
    cJSON *c = NULL;
    /* a key cut at a NUL would be read as another: refused, as everywhere */
    st = text ? hp_json_parse(path, 1, text, n, NULL, &c, err) : HP_OK;
    *on = jbool(c, "clean_up_tokenization_spaces", false);
    free(path);
    cJSON_Delete(c);
    free(text);
    return st;
}

/* The files hp_tokenizer_open tries, in its order (vocab.json goes with merges.txt). */
static const char *const tokenizer_files[] = {"tokenizer.json", "vocab.txt", "merges.txt"};

/* Whether the folder dir holds one of them (true when out of memory: let the open say so). */
static bool files_present(const char *dir)
{
    for (size_t i = 0; i < sizeof tokenizer_files / sizeof *tokenizer_files; i++) {
        char *path = NULL;
        if (hp_path_make(&path, NULL, "%s/%s", dir, tokenizer_files[i]) != HP_OK)
            return true;
        bool there = access(path, F_OK) == 0;
        free(path);
        if (there)
            return true;
    }
    return false;
}

/* The GGUF file whose metadata is dir's tokenizer (*path, the caller's): dir itself when it is a .gguf file,
 * or the one .gguf file of a folder without config.json and without tokenizer files (those win); NULL when
 * neither. */
static enum hp_status gguf_source(const char *dir, char **path, struct hp_error *err)
{
    struct stat sb;
    *path = NULL;
    if (stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode) && files_present(dir))
        return HP_OK;
    return hp_gguf_find(dir, path, err);
}

bool hp_tokenizer_present(const char *dir)
{
    char *path = NULL;
    struct stat sb;
    if (stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode) && files_present(dir))
        return true;
    if (gguf_source(dir, &path, NULL) != HP_OK)
        return true; /* two .gguf files, say: let the open say so */
    if (!path)
        return false;
    struct hp_gguf *g = NULL;
    bool has = hp_gguf_open(path, &g, NULL) != HP_OK || hp_gguf_find_kv(g, "tokenizer.ggml.model");
    hp_gguf_close(g);
    free(path);
    return has;
}

/* What every source ends with: the id -> string table and the added tokens' first bytes; t freed on failure. */
static enum hp_status finish(struct hp_tokenizer *t, enum hp_status st, struct hp_tokenizer **out,
                             struct hp_error *err)
{
    if (st == HP_OK && !ht_build_pieces(t))
        st = hp_fail(err, HP_ERR_NOMEM, "out of memory");
    if (st != HP_OK) {
        hp_tokenizer_free(t);
        return st;
    }
    for (int i = 0; i < t->n_added; i++)
        t->added_first[(unsigned char)t->added[i].s[0]] = true;
    *out = t;
    return HP_OK;
}

static struct hp_tokenizer *tokenizer_new(void)
{
    struct hp_tokenizer *t = calloc(1, sizeof *t);
    if (t)
        t->unk_id = t->pad = t->bos = t->eos = -1;
    return t;
}

enum hp_status hp_tokenizer_from_gguf(const struct hp_gguf *g, struct hp_tokenizer **out, struct hp_error *err)
{
    *out = NULL;
    struct hp_tokenizer *t = tokenizer_new();
    if (!t)
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    cJSON *pipe = NULL;
    enum hp_status st = hp_path_make(&t->path, err, "%s", hp_gguf_name(g));
    if (st == HP_OK)
        st = ht_gguf_read(t, g, &pipe, err);
    if (st == HP_OK)
        st = add_pipeline(t, pipe, err);
    if (st == HP_OK)
        st = hp_decoder_load(cJSON_GetObjectItemCaseSensitive(pipe, "decoder"), t->path, &t->dec, err);
    cJSON_Delete(pipe);
    return finish(t, st, out, err);
}

/* dir's tokenizer files (tokenizer.json, else vocab.txt, else vocab.json + merges.txt) into t. */
static enum hp_status open_files(struct hp_tokenizer *t, const char *dir, struct hp_error *err)
{
    enum hp_status st;
    char *path = NULL, *path2 = NULL, *text = NULL;
    size_t n_text = 0;
    if ((st = hp_path_make(&t->path, err, "%s/tokenizer.json", dir)) == HP_OK)
        text = read_opt(t->path, &n_text, &st, err);
    if (text) {
        st = load_json(t, text, n_text, err);
    } else if (st == HP_OK) {
        free(t->path);
        t->path = NULL;
        if ((st = hp_path_make(&path, err, "%s/vocab.txt", dir)) == HP_OK)
            st = hp_path_make(&path2, err, "%s/merges.txt", dir);
        if (st == HP_OK && (text = read_opt(path, &n_text, &st, err))) {
            t->path = path;
            path = NULL;
            if ((st = no_nul(t->path, text, n_text, err)) == HP_OK)
                st = load_vocab_txt(t, dir, text, err);
        } else if (st == HP_OK && (text = read_opt(path2, &n_text, &st, err)) &&
                   (st = no_nul(path2, text, n_text, err)) == HP_OK) {
            size_t n_vj = 0;
            char *vj = (st = hp_path_make(&t->path, err, "%s/vocab.json", dir)) == HP_OK
                           ? read_opt(t->path, &n_vj, &st, err)
                           : NULL;
            if (vj)
                st = load_gpt2_files(t, vj, n_vj, text, err);
            else if (st == HP_OK)
                st = hp_fail(err, HP_ERR_IO, "%s: merges.txt without vocab.json", dir);
            free(vj);
        } else if (st == HP_OK) {
            st = hp_fail(err, HP_ERR_IO,
                         "%s: no tokenizer.json, vocab.txt or vocab.json + merges.txt, so it takes token ids, not "
                         "text (.npy, .jsonl with \"ids\", .bin); text models' checkpoints ship a tokenizer "
                         "(GPT-2, BERT, MiniLM, Llama, Qwen2: e.g. scripts/get-minilm.sh)",
                         dir);
        }
    }
    free(text);
    free(path);
    free(path2);
    if (st == HP_OK)
        st = read_clean_up(dir, &t->clean_up, err);
    return st;
}

enum hp_status hp_tokenizer_open(const char *dir, struct hp_tokenizer **out, struct hp_error *err)
{
    *out = NULL;
    char *gguf = NULL;
    enum hp_status st = gguf_source(dir, &gguf, err);
    if (st != HP_OK)
        return st;
    if (gguf) {
        struct hp_gguf *g = NULL;
        if ((st = hp_gguf_open(gguf, &g, err)) == HP_OK)
            st = hp_tokenizer_from_gguf(g, out, err);
        hp_gguf_close(g);
        free(gguf);
        return st;
    }
    struct hp_tokenizer *t = tokenizer_new();
    if (!t)
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    return finish(t, open_files(t, dir, err), out, err);
}

enum hp_status hp_tokenizer_describe(const char *dir, char **source, struct hp_error *err)
{
    *source = NULL;
    if (!hp_tokenizer_present(dir))
        return HP_OK;
    struct hp_tokenizer *t;
    enum hp_status st = hp_tokenizer_open(dir, &t, err);
    if (st != HP_OK)
        return st;
    if (!(*source = strdup(hp_tokenizer_source(t))))
        st = hp_fail(err, HP_ERR_NOMEM, "out of memory");
    hp_tokenizer_free(t);
    return st;
}
