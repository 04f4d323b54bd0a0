/*
 * tokenizer.c -- Hugging Face tokenizers in C: text to token ids, and ids back
 * to their token strings and text.
 *
 * Reads a model directory's tokenizer.json (or, failing that, vocab.txt for
 * BERT WordPiece, or vocab.json + merges.txt for GPT-2 byte-level BPE, or a
 * GGUF file's tokenizer.ggml.* metadata) and
 * runs what it declares, in the order the tokenizers library does: split the
 * text on added tokens, then per piece normalise, pre-tokenise, and apply the
 * model (BPE, optionally byte-level or with byte fallback, or WordPiece),
 * then add special tokens with the post-processor's template. Back the other
 * way, an id's token string is the added token's, else the vocabulary's (as
 * the library's id_to_token), and text is those strings through the file's
 * decoder (engine/text/detokenize.c).
 * Unicode normalisation and categories come from utf8proc, the
 * pre-tokenisers' regexes from PCRE2 (UTF + UCP).
 * Owns: the vocabulary (both ways), merges and pipeline; nothing about models or data.
 * The family (tokenizer_priv.h): this file runs a loaded tokenizer and
 * frees it; tokenizer_load.c reads the files (hp_tokenizer_open).
 * Must not: print or exit. Invariants: ids agree with the tokenizers library
 * on tests/fixtures/tokenizers (test_tokenizer.c); time is linear in the text
 * (n log n in one word's BPE merges), and no text grows past HP_TEXT_MAX.
 */
#define _POSIX_C_SOURCE 200809L
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include <xxhash.h>

#include "tokenizer_priv.h"

#include "util.h"

// --- growable buffers -------------------------------------------------------------


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


static size_t map_slot(const struct map *m, const char *k, size_t n)
{
    size_t i = (size_t)XXH3_64bits(k, n) & (m->cap - 1);
    while (m->key[i] && !(m->klen[i] == n && memcmp(m->key[i], k, n) == 0))
        i = (i + 1) & (m->cap - 1);
    return i;
}

bool ht_map_init(struct map *m, size_t expect)
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
bool ht_map_put(struct map *m, const char *k, size_t n, int64_t v)
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

bool ht_map_get(const struct map *m, const char *k, size_t n, int64_t *v)
{
    size_t i = map_slot(m, k, n);
    if (!m->key[i])
        return false;
    *v = m->val[i];
    return true;
}




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

bool ht_lowercase(struct buf *out, const char *s, size_t n)
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

bool ht_strip_accents(struct buf *out, const char *s, size_t n)
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
            ok = ht_strip_accents(cur, tmp->p, tmp->n) && (tmp->n = 0, buf_put(tmp, cur->p, cur->n));
        if (ok && nm->lowercase)
            ok = ht_lowercase(cur, tmp->p, tmp->n);
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
    case N_LOWERCASE: ok = ok && ht_lowercase(tmp, cur->p, cur->n); break;
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

int32_t ht_vocab_id(const struct hp_tokenizer *t, const char *s, size_t n)
{
    int64_t v;
    return ht_map_get(&t->vocab, s, n, &v) ? (int32_t)v : -1;
}

int32_t hp_tokenizer_token_id(const struct hp_tokenizer *t, const char *token)
{
    return ht_vocab_id(t, token, strlen(token));
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
    return ht_map_get(&t->merges, (const char *)key, sizeof key, v);
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
        int32_t id = ht_vocab_id(t, w, n);
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
        int32_t id = ht_vocab_id(t, w + at, i - at);
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
            int32_t id = ht_vocab_id(t, cand, off + len);
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
    free(t->source);
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

const char *hp_tokenizer_source(const struct hp_tokenizer *t)
{
    return t->source ? t->source : t->path;
}

bool hp_tokenizer_digest(const struct hp_tokenizer *t, uint8_t out[16])
{
    memcpy(out, t->digest, 16);
    return t->gguf;
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
    if (t->pad >= 0)
        return t->pad;
    int32_t id = added_id(t, "[PAD]");
    if (id < 0)
        id = added_id(t, "<pad>");
    return id < 0 ? 0 : id;
}

enum hp_status ht_check_utf8(const char *what, const char *s, size_t n, struct hp_error *err)
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
    enum hp_status st = ht_check_utf8("text", a, na, err);
    if (st == HP_OK && b)
        st = ht_check_utf8("text", b, nb, err);
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
bool ht_build_pieces(struct hp_tokenizer *t)
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
        struct piece *x = a->special ? piece_find(t, a->id) : NULL, *y = a->special ? piece_find(t, ht_vocab_id(t, a->s, a->n)) : NULL;
        if (x && x->n == a->n && memcmp(x->s, a->s, a->n) == 0)
            x->special = true;
        if (y && y->n == a->n && memcmp(y->s, a->s, a->n) == 0)
            y->special = true;
    }
    return true;
}

bool hp_tokenizer_special(const struct hp_tokenizer *t, int32_t id)
{
    const struct piece *p = piece_find(t, id);
    return p && (p->special || p->rank == 2);
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

