/*
 * tokenizer.c -- Hugging Face tokenizers in C: text to token ids, and ids back
 * to their token strings and text.
 *
 * Reads a model directory's tokenizer.json (or, failing that, vocab.txt for
 * BERT WordPiece, or vocab.json + merges.txt for GPT-2 byte-level BPE) and
 * runs what it declares, in the order the tokenizers library does: split the
 * text on added tokens, then per piece normalise, pre-tokenise, and apply the
 * model (BPE, optionally byte-level or with byte fallback, or WordPiece),
 * then add special tokens with the post-processor's template. Back the other
 * way, an id's token string is the added token's, else the vocabulary's (as
 * the library's id_to_token), and text is those strings through the file's
 * decoder (engine/detokenize.c).
 * Unicode normalisation and categories come from utf8proc, the
 * pre-tokenisers' regexes from PCRE2 (UTF + UCP).
 * Owns: the vocabulary (both ways), merges and pipeline; nothing about models or data.
 * Must not: print or exit. Invariants: ids agree with the tokenizers library
 * on tests/fixtures/tokenizers (test_tokenizer.c); time is linear in the text
 * (n log n in one word's BPE merges), and no text grows past HP_TEXT_MAX.
 */
#define _POSIX_C_SOURCE 200809L
#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <cjson/cJSON.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utf8proc.h>
#include <xxhash.h>

#include "json_int.h"
#include "tokenizer_int.h"
#include "util_int.h"

// --- growable buffers -------------------------------------------------------------

struct buf {
    char *p;
    size_t n, cap;
    size_t max; /* 0: unbounded; else a put past max bytes fails and sets over */
    bool over;
};

/* Room for n more bytes and a terminator in b; false when out of memory or past b's bound. */
static bool buf_reserve(struct buf *b, size_t n)
{
    if (b->max && n > b->max - b->n) {
        b->over = true;
        return false;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1)
            cap *= 2;
        if (b->max && cap > b->max + 1) /* a bounded buffer never holds more than its bound */
            cap = b->max + 1;
        char *p = realloc(b->p, cap);
        if (!p)
            return false;
        b->p = p;
        b->cap = cap;
    }
    return true;
}

static bool buf_put(struct buf *b, const char *s, size_t n)
{
    if (!buf_reserve(b, n))
        return false;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

static bool buf_cp(struct buf *b, int32_t cp)
{
    uint8_t u[4];
    ssize_t n = utf8proc_encode_char(cp, u);
    return buf_put(b, (const char *)u, (size_t)n);
}

struct ids {
    int32_t *v;
    int32_t *type;
    int n, cap;
};

static bool ids_push(struct ids *x, int32_t id, int32_t type)
{
    if (x->n == x->cap) {
        int cap = x->cap ? 2 * x->cap : 64;
        int32_t *v = realloc(x->v, (size_t)cap * sizeof *v), *t;
        if (!v)
            return false;
        x->v = v;
        t = realloc(x->type, (size_t)cap * sizeof *t);
        if (!t)
            return false;
        x->type = t;
        x->cap = cap;
    }
    x->v[x->n] = id;
    x->type[x->n++] = type;
    return true;
}

// --- string -> value hash map ------------------------------------------------------

struct map {
    char **key;     /* NULL = empty slot */
    size_t *klen;
    int64_t *val;
    size_t cap, n;
};

static size_t map_slot(const struct map *m, const char *k, size_t n)
{
    size_t i = (size_t)XXH3_64bits(k, n) & (m->cap - 1);
    while (m->key[i] && !(m->klen[i] == n && memcmp(m->key[i], k, n) == 0))
        i = (i + 1) & (m->cap - 1);
    return i;
}

static bool map_init(struct map *m, size_t expect)
{
    m->cap = 16;
    while (m->cap < 2 * expect + 16)
        m->cap *= 2;
    m->n = 0;
    m->key = calloc(m->cap, sizeof *m->key);
    m->klen = calloc(m->cap, sizeof *m->klen);
    m->val = calloc(m->cap, sizeof *m->val);
    return m->key && m->klen && m->val;
}

static void map_free(struct map *m)
{
    for (size_t i = 0; m->key && i < m->cap; i++)
        free(m->key[i]);
    free(m->key);
    free(m->klen);
    free(m->val);
}

/* Insert or overwrite; false when out of memory or full. */
static bool map_put(struct map *m, const char *k, size_t n, int64_t v)
{
    if (2 * (m->n + 1) > m->cap)
        return false;
    size_t i = map_slot(m, k, n);
    if (!m->key[i]) {
        if (!(m->key[i] = malloc(n + 1)))
            return false;
        memcpy(m->key[i], k, n);
        m->key[i][n] = 0;
        m->klen[i] = n;
        m->n++;
    }
    m->val[i] = v;
    return true;
}

static bool map_get(const struct map *m, const char *k, size_t n, int64_t *v)
{
    size_t i = map_slot(m, k, n);
    if (!m->key[i])
        return false;
    *v = m->val[i];
    return true;
}

// --- the pipeline's parts ------------------------------------------------------------

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
    struct piece *pieces;      /* id -> token string, sorted by id */
    int n_pieces;
    struct piece *tmpl_tokens; /* the template's special tokens with their strings (owned) */
    int n_tmpl_tokens;
    struct hp_decoder *dec;
    bool clean_up;             /* tokenizer_config.json's clean_up_tokenization_spaces */
};

/* The GPT-2 byte -> printable code point map of byte-level BPE. */
int32_t hp_byte_level_cp(uint8_t b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)
        return b;
    int n = 0;
    for (int c = 0; c < b; c++)
        n += !((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174);
    return 256 + n;
}

static const char gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// --- Unicode classes as the tokenizers library (Rust) defines them -------------------

static bool is_ws(int32_t c) /* char::is_whitespace */
{
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static bool is_other(int32_t c)
{
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CN ||
           k == UTF8PROC_CATEGORY_CO || k == UTF8PROC_CATEGORY_CS;
}

static bool is_punct(int32_t c) /* ASCII punctuation or a Unicode P* category */
{
    if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126))
        return true;
    utf8proc_category_t k = utf8proc_category(c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

static bool is_chinese(int32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* Next code point of s[*i..n) (valid UTF-8 already checked). */
static int32_t next_cp(const char *s, size_t n, size_t *i)
{
    int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + *i, (utf8proc_ssize_t)(n - *i), &cp);
    *i += k > 0 ? (size_t)k : 1;
    return k > 0 ? cp : 0xFFFD;
}

// --- normalisation -----------------------------------------------------------------------

/*
 * s in a Unicode normal form (opt), into out (s may be out's own bytes). The
 * code points are counted before utf8proc allocates for them, so a text that
 * would outgrow out->max (a code point takes a byte at least) is refused first.
 */
static bool unicode_form(struct buf *out, const char *s, size_t n, utf8proc_option_t opt)
{
    opt |= UTF8PROC_STABLE;
    const utf8proc_uint8_t *u = (const utf8proc_uint8_t *)s;
    utf8proc_ssize_t k = utf8proc_decompose(u, (utf8proc_ssize_t)n, NULL, 0, opt);
    if (k < 0)
        return false;
    if (out->max && (size_t)k > out->max) {
        out->over = true;
        return false;
    }
    utf8proc_int32_t *cp = malloc(((size_t)k + 1) * sizeof *cp);
    if (!cp)
        return false;
    k = utf8proc_decompose(u, (utf8proc_ssize_t)n, cp, k, opt);
    if (k >= 0)
        k = utf8proc_reencode(cp, k, opt); /* composes when asked; cp now holds UTF-8 */
    out->n = 0;
    bool ok = k >= 0 && buf_put(out, (const char *)cp, (size_t)k);
    free(cp);
    return ok;
}

static bool lowercase(struct buf *out, const char *s, size_t n)
{
    out->n = 0;
    for (size_t i = 0; i < n;) {
        int32_t c = next_cp(s, n, &i);
        if (c == 0x130) { /* the one unconditional multi-character lowercase: I with dot above */
            if (!buf_cp(out, 'i') || !buf_cp(out, 0x307))
                return false;
        } else if (!buf_cp(out, utf8proc_tolower(c))) {
            return false;
        }
    }
    return true;
}

static bool strip_accents(struct buf *out, const char *s, size_t n)
{
    struct buf d = {.max = out->max};
    if (!unicode_form(&d, s, n, UTF8PROC_DECOMPOSE)) {
        out->over |= d.over;
        return free(d.p), false;
    }
    out->n = 0;
    bool ok = buf_put(out, "", 0);
    for (size_t i = 0; ok && i < d.n;) {
        int32_t c = next_cp(d.p, d.n, &i);
        if (utf8proc_category(c) != UTF8PROC_CATEGORY_MN)
            ok = buf_cp(out, c);
    }
    free(d.p);
    return ok;
}

/* The first occurrence of a (la > 0 bytes) in [p, end), or NULL. */
static const char *find_str(const char *p, const char *end, const char *a, size_t la)
{
    while ((size_t)(end - p) >= la && (p = memchr(p, a[0], (size_t)(end - p) - la + 1))) {
        if (la == 1 || memcmp(p + 1, a + 1, la - 1) == 0)
            return p;
        p++;
    }
    return NULL;
}

/* Apply one normaliser to cur (replaced by the result; tmp is scratch). */
static bool normalize_one(const struct norm *nm, struct buf *cur, struct buf *tmp)
{
    tmp->n = 0;
    bool ok = buf_put(tmp, "", 0);
    switch (nm->kind) {
    case N_BERT:
        for (size_t i = 0; ok && i < cur->n;) {
            int32_t c = next_cp(cur->p, cur->n, &i);
            if (nm->clean_text && (c == 0 || c == 0xFFFD || (c != '\t' && c != '\n' && c != '\r' && is_other(c))))
                continue;
            if (nm->clean_text && (c == '\t' || c == '\n' || c == '\r' || is_ws(c)))
                c = ' ';
            if (nm->chinese && is_chinese(c))
                ok = buf_cp(tmp, ' ') && buf_cp(tmp, c) && buf_cp(tmp, ' ');
            else
                ok = buf_cp(tmp, c);
        }
        if (ok && nm->strip_accents)
            ok = strip_accents(cur, tmp->p, tmp->n) && (tmp->n = 0, buf_put(tmp, cur->p, cur->n));
        if (ok && nm->lowercase)
            ok = lowercase(cur, tmp->p, tmp->n);
        else if (ok)
            cur->n = 0, ok = buf_put(cur, tmp->p, tmp->n);
        return ok;
    case N_PREPEND:
        if (cur->n == 0)
            return ok;
        ok = ok && buf_put(tmp, nm->a, strlen(nm->a)) && buf_put(tmp, cur->p, cur->n);
        break;
    case N_REPLACE: {
        /* every occurrence, left to right, without overlaps (Rust's str::replace) */
        size_t la = strlen(nm->a), lb = strlen(nm->b), hits = 0;
        const char *p = cur->p, *end = cur->p + cur->n, *hit;
        if (!la)
            return true;
        if (la == 1) /* the common case (one character), counted without a call per hit */
            for (const char *q = p; q < end; q++)
                hits += *q == nm->a[0];
        else
            for (const char *q = p; (hit = find_str(q, end, nm->a, la)); q = hit + la)
                hits++;
        /* the result's size is known before it is written: one that would pass the bound fails here */
        if (tmp->max && lb > la && hits > (tmp->max - cur->n) / (lb - la)) {
            tmp->over = true;
            return false;
        }
        size_t size = lb >= la ? cur->n + hits * (lb - la) : cur->n - hits * (la - lb);
        if (!buf_reserve(tmp, size))
            return false;
        char *o = tmp->p;
        for (; la == 1 && p < end; p++) {
            if (*p == nm->a[0])
                memcpy(o, nm->b, lb), o += lb;
            else
                *o++ = *p;
        }
        for (; (hit = find_str(p, end, nm->a, la)); p = hit + la) {
            memcpy(o, p, (size_t)(hit - p));
            memcpy(o + (hit - p), nm->b, lb);
            o += (hit - p) + lb;
        }
        memcpy(o, p, (size_t)(end - p));
        tmp->n = size;
        tmp->p[size] = 0;
        break;
    }
    case N_NFC: return unicode_form(cur, cur->p, cur->n, UTF8PROC_COMPOSE);
    case N_NFD: return unicode_form(cur, cur->p, cur->n, UTF8PROC_DECOMPOSE);
    case N_NFKC: return unicode_form(cur, cur->p, cur->n, UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    case N_NFKD: return unicode_form(cur, cur->p, cur->n, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
    case N_LOWERCASE: ok = ok && lowercase(tmp, cur->p, cur->n); break;
    case N_STRIP_ACCENTS: /* the library's StripAccents: every combining mark dropped, no decomposition */
        for (size_t i = 0; ok && i < cur->n;) {
            int32_t c = next_cp(cur->p, cur->n, &i);
            utf8proc_category_t k = utf8proc_category(c);
            if (k != UTF8PROC_CATEGORY_MN && k != UTF8PROC_CATEGORY_MC && k != UTF8PROC_CATEGORY_ME)
                ok = buf_cp(tmp, c);
        }
        break;
    }
    if (ok) {
        cur->n = 0;
        ok = buf_put(cur, tmp->p, tmp->n);
    }
    return ok;
}

// --- pre-tokenisation: a list of words, each a [start, end) span of a string ---------

struct spans {
    size_t *s, *e;
    int n, cap;
};

static bool spans_push(struct spans *x, size_t s, size_t e)
{
    if (s >= e)
        return true;
    if (x->n == x->cap) {
        int cap = x->cap ? 2 * x->cap : 64;
        size_t *a = realloc(x->s, (size_t)cap * sizeof *a), *b;
        if (!a)
            return false;
        x->s = a;
        if (!(b = realloc(x->e, (size_t)cap * sizeof *b)))
            return false;
        x->e = b;
        x->cap = cap;
    }
    x->s[x->n] = s;
    x->e[x->n++] = e;
    return true;
}

/*
 * Split the word [s, e) of str by p's regex, which sees only the word (as
 * the library's per-word splitting does): with isolated (behaviour Isolated)
 * the matches and the gaps between them are words; otherwise (Removed) only
 * the gaps. ByteLevel's own regex keeps the matches alone (keep_gaps false,
 * isolated true). md is match data made for p->re.
 * The text is known to be UTF-8 (hp_tokenizer_encode checks it once and the
 * normalisers keep it so), hence PCRE2_NO_UTF_CHECK: without it PCRE2 checks
 * the whole subject again on every call, which made splitting quadratic.
 * Any result but a match or "no match" (a match or depth limit, say) is an
 * error: taken for "no more matches" it would merge the rest into wrong ids.
 */
static enum hp_status split_regex(const struct hp_tokenizer *t, const struct pre *p, pcre2_match_data *md,
                                  bool isolated, bool keep_gaps, const char *str, size_t s, size_t e,
                                  struct spans *out, struct hp_error *err)
{
    const char *w = str + s;
    const size_t n = e - s;
    bool ok = true;
    size_t pos = 0, last = 0;
    while (ok && pos <= n) {
        int rc = pcre2_match(p->re, (PCRE2_SPTR)w, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return hp_fail(err, HP_ERR_FORMAT,
                           "%s: pre-tokenizer regex '%.100s' failed on a word of %zu bytes at byte %zu: %s (a pattern "
                           "that backtracks too much? simplify it)",
                           t->path, p->pattern, n, pos, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[1] == ov[0]) { /* empty match: move on one character */
            pos = ov[0] + 1;
            while (pos < n && ((unsigned char)w[pos] & 0xC0) == 0x80)
                pos++;
            continue;
        }
        if (keep_gaps)
            ok = spans_push(out, s + last, s + ov[0]);
        if (isolated)
            ok = ok && spans_push(out, s + ov[0], s + ov[1]);
        last = pos = ov[1];
    }
    if (ok && keep_gaps)
        ok = spans_push(out, s + last, e);
    return ok ? HP_OK : hp_fail(err, HP_ERR_NOMEM, "out of memory while tokenizing");
}

/* Apply one pre-tokeniser to every word of in (over string *str), into out. ByteLevel
 * with add_prefix_space may rewrite the string (a leading space). */
static enum hp_status pretok_one(const struct hp_tokenizer *t, const struct pre *p, struct buf *str,
                                 struct spans *in, struct spans *out, struct hp_error *err)
{
    out->n = 0;
    if (p->kind == P_BYTELEVEL && p->add_prefix_space) {
        /* a space before every word that does not start with one: the words move to a new string */
        struct buf b = {0};
        bool ok = buf_put(&b, "", 0);
        for (int w = 0; ok && w < in->n; w++) {
            size_t s = in->s[w], e = in->e[w], at = b.n;
            ok = (str->p[s] == ' ' || buf_put(&b, " ", 1)) && buf_put(&b, str->p + s, e - s);
            in->s[w] = at;
            in->e[w] = b.n;
        }
        if (!ok) {
            free(b.p);
            return hp_fail(err, HP_ERR_NOMEM, "out of memory while tokenizing");
        }
        free(str->p);
        *str = b;
    }
    pcre2_match_data *md = NULL;
    if (p->re && !(md = pcre2_match_data_create_from_pattern(p->re, NULL)))
        return hp_fail(err, HP_ERR_NOMEM, "out of memory while tokenizing");
    enum hp_status st = HP_OK;
    bool ok = true;
    for (int w = 0; ok && st == HP_OK && w < in->n; w++) {
        size_t s = in->s[w], e = in->e[w];
        switch (p->kind) {
        case P_BYTELEVEL:
            if (p->use_regex)
                st = split_regex(t, p, md, true, false, str->p, s, e, out, err);
            else
                ok = spans_push(out, s, e);
            break;
        case P_SPLIT: st = split_regex(t, p, md, p->isolated, true, str->p, s, e, out, err); break;
        case P_WHITESPACE_SPLIT:
        case P_BERT: {
            size_t start = s;
            for (size_t i = s; ok && i < e;) {
                size_t at = i;
                int32_t c = next_cp(str->p, e, &i);
                if (is_ws(c)) {
                    ok = spans_push(out, start, at);
                    start = i;
                } else if (p->kind == P_BERT && is_punct(c)) {
                    ok = spans_push(out, start, at) && spans_push(out, at, i);
                    start = i;
                }
            }
            ok = ok && spans_push(out, start, e);
            break;
        }
        }
    }
    pcre2_match_data_free(md);
    if (st == HP_OK && !ok)
        st = hp_fail(err, HP_ERR_NOMEM, "out of memory while tokenizing");
    return st;
}

// --- models --------------------------------------------------------------------------------

static int32_t vocab_id(const struct hp_tokenizer *t, const char *s, size_t n)
{
    int64_t v;
    return map_get(&t->vocab, s, n, &v) ? (int32_t)v : -1;
}

// --- BPE merges: a heap of candidate pairs over a linked list of symbols ---------------
/*
 * The library merges, again and again, the adjacent pair of lowest rank
 * (leftmost on ties). Rescanning the word for it each time is quadratic in
 * the word (a line of 100k letters took tens of seconds); instead every
 * adjacent pair that has a merge waits in a min-heap keyed (rank, left
 * symbol), symbols form a linked list, and a merge pushes the two pairs it
 * creates. Entries whose pair has since changed are skipped when popped, so
 * the heap yields exactly the pair a full rescan would pick: O(n log n).
 */
struct cand {
    int32_t rank, l; /* the key: lowest rank first, then leftmost */
    int32_t r, r_next; /* l's right neighbour and the symbol after it, when pushed */
};

struct heap {
    struct cand *v;
    size_t n, cap;
};

static bool cand_less(const struct cand *a, const struct cand *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->l < b->l);
}

static bool heap_push(struct heap *h, struct cand c)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        struct cand *v = realloc(h->v, cap * sizeof *v);
        if (!v)
            return false;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    for (; i > 0 && cand_less(&c, &h->v[(i - 1) / 2]); i = (i - 1) / 2)
        h->v[i] = h->v[(i - 1) / 2];
    h->v[i] = c;
    return true;
}

static struct cand heap_pop(struct heap *h)
{
    struct cand top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t k = 2 * i + 1;
        if (k >= h->n)
            break;
        if (k + 1 < h->n && cand_less(&h->v[k + 1], &h->v[k]))
            k++;
        if (!cand_less(&h->v[k], &last))
            break;
        h->v[i] = h->v[k];
        i = k;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

enum { SYM_END = -1, SYM_GONE = -2 }; /* next[] past the last symbol; of a symbol merged away */

/* The merge of symbols l and next[l] as (rank, new id), false if there is none. */
static bool merge_of(const struct hp_tokenizer *t, const int32_t *sym, const int32_t *next, int32_t l, int64_t *v)
{
    int32_t key[2] = {sym[l], sym[next[l]]};
    return map_get(&t->merges, (const char *)key, sizeof key, v);
}

static bool push_pair(const struct hp_tokenizer *t, struct heap *h, const int32_t *sym, const int32_t *next, int32_t l)
{
    int64_t v;
    if (l < 0 || next[l] < 0 || !merge_of(t, sym, next, l, &v))
        return true;
    return heap_push(h, (struct cand){(int32_t)(v >> 32), l, next[l], next[next[l]]});
}

/* BPE on one word (already byte-mapped for byte-level models). */
static bool bpe_word(const struct hp_tokenizer *t, const char *w, size_t n, struct ids *out)
{
    if (t->ignore_merges) {
        int32_t id = vocab_id(t, w, n);
        if (id >= 0)
            return ids_push(out, id, 0);
    }
    /* symbols: one per character (or per byte through fallback) */
    int ns = 0; /* a character gives at most one symbol per byte: ns <= n */
    int32_t *sym = malloc((n + 1) * sizeof *sym), *next = malloc((n + 1) * sizeof *next);
    if (!sym || !next)
        return free(sym), free(next), false;
    bool last_unk = false;
    for (size_t i = 0; i < n;) {
        size_t at = i;
        next_cp(w, n, &i);
        int32_t id = vocab_id(t, w + at, i - at);
        if (id >= 0) {
            sym[ns++] = id;
            last_unk = false;
        } else if (t->byte_fallback) {
            bool all = true;
            for (size_t b = at; b < i; b++)
                all &= t->byte_tok[(unsigned char)w[b]] >= 0;
            if (all) {
                for (size_t b = at; b < i; b++)
                    sym[ns++] = t->byte_tok[(unsigned char)w[b]];
                last_unk = false;
            } else if (t->unk_id >= 0 && !(t->fuse_unk && last_unk)) {
                sym[ns++] = t->unk_id;
                last_unk = true;
            }
        } else if (t->unk_id >= 0 && !(t->fuse_unk && last_unk)) {
            sym[ns++] = t->unk_id;
            last_unk = true;
        }
    }
    /* merge the adjacent pair of lowest rank (leftmost on ties) until none is left (above) */
    int32_t *prev = malloc((size_t)(ns + 1) * sizeof *prev);
    struct heap h = {0};
    bool ok = prev != NULL;
    for (int k = 0; k < ns; k++) {
        next[k] = k + 1 < ns ? k + 1 : SYM_END;
        prev[k] = k - 1;
    }
    for (int k = 0; ok && k + 1 < ns; k++)
        ok = push_pair(t, &h, sym, next, k);
    while (ok && h.n) {
        struct cand c = heap_pop(&h);
        int64_t v;
        /* stale: l was merged away (next[l] is SYM_GONE), or l or r has merged since */
        if (next[c.l] != c.r || next[c.r] != c.r_next || !merge_of(t, sym, next, c.l, &v))
            continue;
        sym[c.l] = (int32_t)(v & 0xffffffff);
        next[c.l] = c.r_next;
        if (c.r_next >= 0)
            prev[c.r_next] = c.l;
        next[c.r] = SYM_GONE;
        ok = push_pair(t, &h, sym, next, prev[c.l]) && push_pair(t, &h, sym, next, c.l);
    }
    for (int k = ns ? 0 : SYM_END; ok && k >= 0; k = next[k]) /* symbol 0 is never merged away */
        ok = ids_push(out, sym[k], 0);
    free(sym), free(next), free(prev), free(h.v);
    return ok;
}

static bool wordpiece_word(const struct hp_tokenizer *t, const char *w, size_t n, struct ids *out)
{
    size_t nchars = 0;
    for (size_t i = 0; i < n; nchars++)
        next_cp(w, n, &i);
    if ((int)nchars > t->max_chars)
        return ids_push(out, t->unk_id, 0);
    int first = out->n;
    char *cand = malloc(n + sizeof t->prefix);
    if (!cand)
        return false;
    size_t pl = strlen(t->prefix);
    for (size_t start = 0; start < n;) {
        int32_t found = -1;
        size_t off = start > 0 ? pl : 0, found_end = 0;
        /* no candidate longer than the longest token can match: start there, not at the word's end,
         * or a long word (max_input_chars_per_word is the file's to set) costs its length cubed */
        size_t room = t->longest > off ? t->longest - off : 0;
        size_t end = room < n - start ? start + room : n;
        while (end > start && end < n && ((unsigned char)w[end] & 0xC0) == 0x80)
            end--;
        while (end > start) {
            size_t len = end - start;
            memcpy(cand, t->prefix, off);
            memcpy(cand + off, w + start, len);
            int32_t id = vocab_id(t, cand, off + len);
            if (id >= 0) {
                found = id;
                found_end = end;
                break;
            }
            /* back off one character */
            do
                end--;
            while (end > start && ((unsigned char)w[end] & 0xC0) == 0x80);
        }
        if (found < 0) {
            out->n = first;
            free(cand);
            return ids_push(out, t->unk_id, 0);
        }
        if (!ids_push(out, found, 0)) {
            free(cand);
            return false;
        }
        start = found_end;
    }
    free(cand);
    return true;
}

static const char *const norm_name[] = {"BertNormalizer", "Prepend",  "Replace",   "NFC",         "NFD",
                                        "NFKC",           "NFKD",     "Lowercase", "StripAccents"};

/* One piece of text between added tokens: normalise, pre-tokenise, model. */
static enum hp_status encode_piece(const struct hp_tokenizer *t, const char *s, size_t n, struct ids *out,
                                   struct hp_error *err)
{
    /* Every normaliser's output is bounded as it is written: steps that each lengthen the
     * text (40 chained Replace a -> aa) stop at HP_TEXT_MAX with an error, not at the GBs
     * they would reach. */
    struct buf cur = {.max = HP_TEXT_MAX}, tmp = {.max = HP_TEXT_MAX};
    struct spans a = {0}, b = {0};
    enum hp_status st = HP_OK;
    bool ok = buf_put(&cur, s, n) && buf_put(&tmp, "", 0);
    for (int i = 0; ok && i < t->n_norm; i++) {
        ok = normalize_one(&t->norm[i], &cur, &tmp);
        if (!ok && (cur.over || tmp.over))
            st = hp_fail(err, HP_ERR_FORMAT,
                         "%s: normalizer %d (%s) makes a text of %zu byte(s) longer than %d MB (do its steps keep "
                         "lengthening the text, e.g. chained Replace?)",
                         t->path, i + 1, norm_name[t->norm[i].kind], n, HP_TEXT_MAX >> 20);
    }
    cur.max = tmp.max = 0; /* from here sizes grow by bounded factors (ByteLevel's mapping: 2) */
    ok = ok && spans_push(&a, 0, cur.n);
    for (int i = 0; ok && st == HP_OK && i < t->n_pre; i++) {
        st = pretok_one(t, &t->pre[i], &cur, &a, &b, err);
        struct spans x = a;
        a = b;
        b = x;
    }
    for (int w = 0; ok && st == HP_OK && w < a.n; w++) {
        const char *word = cur.p + a.s[w];
        size_t len = a.e[w] - a.s[w];
        if (t->model == M_WORDPIECE) {
            ok = wordpiece_word(t, word, len, out);
        } else if (t->byte_level) {
            tmp.n = 0;
            for (size_t k = 0; ok && k < len; k++)
                ok = buf_cp(&tmp, hp_byte_level_cp((uint8_t)word[k]));
            ok = ok && bpe_word(t, tmp.p ? tmp.p : "", tmp.n, out);
        } else {
            ok = bpe_word(t, word, len, out);
        }
    }
    free(cur.p), free(tmp.p), free(a.s), free(a.e), free(b.s), free(b.e);
    if (st == HP_OK && !ok)
        st = hp_fail(err, HP_ERR_NOMEM, "out of memory while tokenizing");
    return st;
}

/* The sequence's ids: text split on added tokens (leftmost, then longest), pieces encoded. */
static enum hp_status encode_seq(const struct hp_tokenizer *t, const char *s, size_t n, struct ids *out,
                                 struct hp_error *err)
{
    size_t start = 0;
    enum hp_status st = HP_OK;
    for (size_t i = 0; st == HP_OK && i < n;) {
        int best = -1;
        if (t->added_first[(unsigned char)s[i]]) /* most bytes start no added token */
            for (int k = 0; k < t->n_added; k++)
                if (t->added[k].n <= n - i && memcmp(s + i, t->added[k].s, t->added[k].n) == 0 &&
                    (best < 0 || t->added[k].n > t->added[best].n))
                    best = k;
        if (best < 0) {
            i++;
            continue;
        }
        size_t end = i;
        if (t->added[best].lstrip)
            while (end > start && (s[end - 1] == ' ' || s[end - 1] == '\t' || s[end - 1] == '\n'))
                end--;
        st = encode_piece(t, s + start, end - start, out, err);
        if (st == HP_OK && !ids_push(out, t->added[best].id, 0))
            st = hp_fail(err, HP_ERR_NOMEM, "out of memory while tokenizing");
        i += t->added[best].n;
        if (t->added[best].rstrip)
            while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n'))
                i++;
        start = i;
    }
    return st == HP_OK ? encode_piece(t, s + start, n - start, out, err) : st;
}

// --- the public face ---------------------------------------------------------------------

void hp_tokenizer_free(struct hp_tokenizer *t)
{
    if (!t)
        return;
    free(t->path);
    map_free(&t->vocab);
    map_free(&t->merges);
    for (int i = 0; i < t->n_norm; i++)
        free(t->norm[i].a), free(t->norm[i].b);
    free(t->norm);
    for (int i = 0; i < t->n_pre; i++)
        pcre2_code_free(t->pre[i].re), free(t->pre[i].pattern);
    free(t->pre);
    for (int i = 0; i < t->n_added; i++)
        free(t->added[i].s);
    free(t->added);
    for (int i = 0; i < t->n_single; i++)
        free(t->single[i].ids);
    for (int i = 0; i < t->n_pair; i++)
        free(t->pair[i].ids);
    free(t->single);
    free(t->pair);
    free(t->pieces);
    for (int i = 0; i < t->n_tmpl_tokens; i++)
        free((char *)t->tmpl_tokens[i].s);
    free(t->tmpl_tokens);
    hp_decoder_free(t->dec);
    free(t);
}

int hp_tokenizer_n_ids(const struct hp_tokenizer *t)
{
    return t->n_ids;
}

static int32_t added_id(const struct hp_tokenizer *t, const char *s)
{
    for (int i = 0; i < t->n_added; i++)
        if (strcmp(t->added[i].s, s) == 0)
            return t->added[i].id;
    return -1;
}

int32_t hp_tokenizer_separator(const struct hp_tokenizer *t)
{
    for (int i = 0; i < t->n_single; i++)
        if (t->single[i].seq < 0)
            return -1;
    return added_id(t, "<|endoftext|>");
}

int32_t hp_tokenizer_pad(const struct hp_tokenizer *t)
{
    int32_t id = added_id(t, "[PAD]");
    if (id < 0)
        id = added_id(t, "<pad>");
    return id < 0 ? 0 : id;
}

static enum hp_status check_utf8(const char *what, const char *s, size_t n, struct hp_error *err)
{
    for (size_t i = 0; i < n;) {
        int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k < 0)
            return hp_fail(err, HP_ERR_FORMAT, "%s is not valid UTF-8 at byte %zu", what, i);
        i += (size_t)k;
    }
    return HP_OK;
}

enum hp_status hp_tokenizer_encode(const struct hp_tokenizer *t, const char *a, size_t na, const char *b, size_t nb,
                                   bool special, struct hp_encoding *out, struct hp_error *err)
{
    memset(out, 0, sizeof *out);
    if (na > HP_TEXT_MAX || nb > HP_TEXT_MAX)
        return hp_fail(err, HP_ERR_SHAPE, "a text of %zu bytes is too long to tokenize at once (at most %d MB)",
                       na > nb ? na : nb, HP_TEXT_MAX >> 20);
    enum hp_status st = check_utf8("text", a, na, err);
    if (st == HP_OK && b)
        st = check_utf8("text", b, nb, err);
    if (st != HP_OK)
        return st;
    struct ids ia = {0}, ib = {0}, res = {0};
    st = encode_seq(t, a, na, &ia, err);
    if (st == HP_OK && b)
        st = encode_seq(t, b, nb, &ib, err);
    if (st != HP_OK) {
        free(ia.v), free(ia.type), free(ib.v), free(ib.type);
        return st;
    }
    bool ok = true;
    const struct tmpl_item *tm = b ? t->pair : t->single;
    int n_tm = b ? t->n_pair : t->n_single;
    if (ok && special && n_tm > 0) {
        for (int i = 0; ok && i < n_tm; i++) {
            const struct ids *src = tm[i].seq == 0 ? &ia : tm[i].seq == 1 ? &ib : NULL;
            if (src)
                for (int k = 0; ok && k < src->n; k++)
                    ok = ids_push(&res, src->v[k], tm[i].type_id);
            else
                for (int k = 0; ok && k < tm[i].n_ids; k++)
                    ok = ids_push(&res, tm[i].ids[k], tm[i].type_id);
        }
    } else {
        for (int k = 0; ok && k < ia.n; k++)
            ok = ids_push(&res, ia.v[k], 0);
        for (int k = 0; ok && k < ib.n; k++)
            ok = ids_push(&res, ib.v[k], 1);
    }
    free(ia.v), free(ia.type), free(ib.v), free(ib.type);
    if (!ok) {
        free(res.v), free(res.type);
        return hp_fail(err, HP_ERR_NOMEM, "out of memory while tokenizing");
    }
    out->ids = res.v;
    out->type_ids = res.type;
    out->n = res.n;
    return HP_OK;
}

void hp_encoding_free(struct hp_encoding *e)
{
    free(e->ids);
    free(e->type_ids);
    memset(e, 0, sizeof *e);
}

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
        if (ins[i] && check_utf8("a normalizer's string", ins[i], strlen(ins[i]), err) != HP_OK)
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
        return FAIL("%s: pre_tokenizer '%s' is not supported (supported: BertPreTokenizer, ByteLevel, Split, "
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
    int32_t ia = vocab_id(t, a, la), ib = vocab_id(t, b, lb), iab = -1;
    if (ab) {
        memcpy(ab, a, la);
        memcpy(ab + la, b, lb);
        iab = vocab_id(t, ab, la + lb);
    }
    free(ab);
    free(tmp);
    if (ia < 0 || ib < 0 || iab < 0)
        return FAIL("%s: merge %lld names a token that is not in the vocabulary", t->path, (long long)rank);
    int32_t key[2] = {ia, ib};
    int64_t old;
    if (!map_get(&t->merges, (const char *)key, sizeof key, &old) &&
        !map_put(&t->merges, (const char *)key, sizeof key, rank << 32 | (int64_t)(uint32_t)iab))
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    return st;
}

static enum hp_status add_vocab_entry(struct hp_tokenizer *t, const char *tok, int64_t id, struct hp_error *err)
{
    if (!note_id(t, id))
        return hp_fail(err, HP_ERR_FORMAT, "%s: token id %lld out of range", t->path, (long long)id);
    size_t n = strlen(tok);
    if (!map_put(&t->vocab, tok, n, id))
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
    if (!map_init(&t->vocab, (size_t)cJSON_GetArraySize(vocab) + 1024))
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
    t->unk_id = unk ? vocab_id(t, unk, strlen(unk)) : -1;
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
        t->byte_tok[b] = vocab_id(t, tok, strlen(tok));
    }
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(m, "merges");
    if (!map_init(&t->merges, (size_t)cJSON_GetArraySize(merges) + 16))
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
        if (check_utf8("an added token", s, strlen(s), err) != HP_OK)
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
    if (!map_init(&t->vocab, lines))
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
    t->unk_id = vocab_id(t, "[UNK]", 5);
    int32_t cls = vocab_id(t, "[CLS]", 5), sep = vocab_id(t, "[SEP]", 5);
    if (t->unk_id < 0 || cls < 0 || sep < 0)
        return FAIL("%s: vocab.txt lacks [UNK], [CLS] or [SEP]", t->path);
    static const char *const specials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    t->added = calloc(5, sizeof *t->added);
    if (!t->added)
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    for (int i = 0; i < 5; i++) {
        int32_t v = vocab_id(t, specials[i], strlen(specials[i]));
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
    int32_t eot = vocab_id(t, "<|endoftext|>", 13);
    t->added = calloc(1, sizeof *t->added);
    if (st == HP_OK && !t->added)
        st = hp_fail(err, HP_ERR_NOMEM, "out of memory");
    if (st == HP_OK && eot >= 0) {
        t->added[0] = (struct added){strdup("<|endoftext|>"), 13, eot, false, false, true};
        t->n_added = t->added[0].s ? 1 : 0;
    }
    return st;
}

// --- ids back to token strings ---------------------------------------------------------------

static int piece_cmp(const void *a, const void *b)
{
    const struct piece *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    if (x->rank != y->rank)
        return x->rank - y->rank;
    int c = memcmp(x->s, y->s, x->n < y->n ? x->n : y->n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

static struct piece *piece_find(const struct hp_tokenizer *t, int32_t id)
{
    int lo = 0, hi = t->n_pieces;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (t->pieces[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < t->n_pieces && t->pieces[lo].id == id ? &t->pieces[lo] : NULL;
}

/*
 * The id -> token string table: an added token's content over the
 * vocabulary's string (the library's id_to_token asks the added tokens
 * first), and a template's special token for an id neither has. Of two
 * vocabulary strings with one id the first in byte order wins (the library's
 * pick is a hash map's). Specials, as the library decides them by string: an
 * added token marked special, and a vocabulary id with the same string.
 */
static bool build_pieces(struct hp_tokenizer *t)
{
    size_t cap = t->vocab.n + (size_t)t->n_added + (size_t)t->n_tmpl_tokens;
    struct piece *p = malloc((cap + 1) * sizeof *p);
    if (!p)
        return false;
    size_t n = 0;
    for (int i = 0; i < t->n_added; i++)
        p[n++] = (struct piece){t->added[i].id, 0, false, t->added[i].s, t->added[i].n};
    for (size_t i = 0; i < t->vocab.cap; i++)
        if (t->vocab.key[i])
            p[n++] = (struct piece){(int32_t)t->vocab.val[i], 1, false, t->vocab.key[i], t->vocab.klen[i]};
    for (int i = 0; i < t->n_tmpl_tokens; i++)
        p[n++] = t->tmpl_tokens[i];
    hp_qsort(p, n, sizeof *p, piece_cmp);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (k == 0 || p[k - 1].id != p[i].id)
            p[k++] = p[i];
    t->pieces = p;
    t->n_pieces = (int)k;
    for (int i = 0; i < t->n_added; i++) {
        const struct added *a = &t->added[i];
        struct piece *x = a->special ? piece_find(t, a->id) : NULL, *y = a->special ? piece_find(t, vocab_id(t, a->s, a->n)) : NULL;
        if (x && x->n == a->n && memcmp(x->s, a->s, a->n) == 0)
            x->special = true;
        if (y && y->n == a->n && memcmp(y->s, a->s, a->n) == 0)
            y->special = true;
    }
    return true;
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

const char *hp_tokenizer_piece(const struct hp_tokenizer *t, int32_t id, size_t *n)
{
    const struct piece *p = piece_find(t, id);
    if (n)
        *n = p ? p->n : 0;
    return p ? p->s : NULL;
}

enum hp_status hp_tokenizer_decode(const struct hp_tokenizer *t, const int32_t *ids, int n, bool skip_special,
                                   char **out, size_t *n_out, struct hp_error *err)
{
    *out = NULL;
    *n_out = 0;
    const char **tok = malloc(((size_t)(n > 0 ? n : 0) + 1) * sizeof *tok);
    size_t *len = malloc(((size_t)(n > 0 ? n : 0) + 1) * sizeof *len);
    int k = 0;
    enum hp_status st = tok && len ? HP_OK : hp_fail(err, HP_ERR_NOMEM, "out of memory");
    for (int i = 0; st == HP_OK && i < n; i++) {
        const struct piece *p = piece_find(t, ids[i]);
        if (!p && (ids[i] < 0 || ids[i] >= t->n_ids))
            st = hp_fail(err, HP_ERR_ARG, "token %d: id %d is not in the vocabulary of %s (ids 0..%d)", i + 1,
                         ids[i], t->path, t->n_ids - 1);
        else if (!p)
            st = hp_fail(err, HP_ERR_ARG, "token %d: no token has id %d in %s (a gap among its ids 0..%d)", i + 1,
                         ids[i], t->path, t->n_ids - 1);
        else if (p->rank < 2 && !(skip_special && p->special)) { /* the library cannot decode a template's own */
            tok[k] = p->s;
            len[k++] = p->n;
        }
    }
    if (st == HP_OK)
        st = hp_decoder_run(t->dec, tok, len, k, t->clean_up, out, n_out, err);
    free(tok);
    free(len);
    return st;
}

enum hp_status hp_tokenizer_open(const char *dir, struct hp_tokenizer **out, struct hp_error *err)
{
    *out = NULL;
    struct hp_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    t->unk_id = -1;
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
            st = hp_fail(err, HP_ERR_IO, "%s: no tokenizer.json, vocab.txt or vocab.json + merges.txt", dir);
        }
    }
    free(text);
    free(path);
    free(path2);
    if (st == HP_OK && !build_pieces(t))
        st = hp_fail(err, HP_ERR_NOMEM, "out of memory");
    if (st != HP_OK) {
        hp_tokenizer_free(t);
        return st;
    }
    for (int i = 0; i < t->n_added; i++)
        t->added_first[(unsigned char)t->added[i].s[0]] = true;
    if ((st = read_clean_up(dir, &t->clean_up, err)) != HP_OK) {
        hp_tokenizer_free(t);
        return st;
    }
    *out = t;
    return HP_OK;
}
