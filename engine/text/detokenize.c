/*
 * detokenize.c -- token strings back to text: the "decoder" of a tokenizer.json (named apart from
 * the models: in a transformer engine "decoder" reads as a decoder-only model).
 *
 * The reverse of tokenizer.c's pipeline. hp_tokenizer_decode turns ids into
 * their token strings (the vocabulary's, added tokens first) and hands them
 * here; the decoder's steps then run in the order the file lists them, each on
 * the whole list of strings, as the tokenizers library's decode_chain does:
 *   ByteLevel     GPT-2's byte map undone, then the bytes read as UTF-8 with
 *                 U+FFFD for each maximal invalid part (Rust's
 *                 String::from_utf8_lossy); a token with a character outside
 *                 the map gives its own bytes;
 *   WordPiece     a space before every token but the first, except those with
 *                 the continuing-subword prefix, which is removed; then, with
 *                 cleanup, spaces before punctuation and in contractions
 *                 removed within each token;
 *   Metaspace     the replacement character to a space (dropped in the first
 *                 token unless prepend_scheme is "never");
 *   Replace       a string pattern, every occurrence, left to right;
 *   ByteFallback  runs of <0xXX> tokens to bytes, and a run that is not UTF-8
 *                 to one U+FFFD per byte;
 *   Fuse, Strip, BPEDecoder (end-of-word suffix to a space).
 * No decoder joins the tokens with spaces. Then, when the model directory's
 * tokenizer_config.json sets clean_up_tokenization_spaces, transformers'
 * clean-up of spaces before punctuation runs on the whole text.
 * Owns: the steps. Knows nothing of ids, vocabularies or files but the
 * decoder's JSON. Must not: print or exit.
 * Invariants: a decoder it cannot run (CTC, a regex Replace) is not an error
 * at load, since text to ids does not need it, but every decode with it is;
 * the strings together never grow past HP_TEXT_MAX (chained Replace steps
 * can multiply a text's length: each is sized before it is written).
 */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer.h"
#include "util.h"

// --- strings and lists of strings ---------------------------------------------------

struct str {
    char *p;
    size_t n, cap;
};

struct strs {
    struct str *v;
    int n;
};

/* One decode's state: how much the strings may still grow, all together, before they pass
 * HP_TEXT_MAX (set before each step), and whether they did (else a failure is out of memory). */
struct run {
    size_t room;
    bool over;
};

/* Room for n more bytes (and a terminator); false when out of memory or past HP_TEXT_MAX (r->over). */
static bool str_room(struct run *r, struct str *s, size_t n)
{
    if (n > (size_t)HP_TEXT_MAX - s->n) {
        r->over = true;
        return false;
    }
    if (s->n + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 32;
        while (cap < s->n + n + 1)
            cap *= 2;
        char *p = realloc(s->p, cap);
        if (!p)
            return false;
        s->p = p;
        s->cap = cap;
    }
    return true;
}

static bool str_put(struct run *r, struct str *s, const char *p, size_t n)
{
    if (!str_room(r, s, n))
        return false;
    if (n)
        memcpy(s->p + s->n, p, n);
    s->n += n;
    s->p[s->n] = 0;
    return true;
}

static bool str_cp(struct run *r, struct str *s, int32_t cp)
{
    uint8_t u[4];
    return str_put(r, s, (const char *)u, (size_t)utf8proc_encode_char(cp, u));
}

static void strs_free(struct strs *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->v[i].p);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

/* l made one string, text (which l then owns). */
static bool strs_set_one(struct strs *l, struct str text)
{
    strs_free(l);
    if (!(l->v = malloc(sizeof *l->v))) {
        free(text.p);
        return false;
    }
    l->v[0] = text;
    l->n = 1;
    return true;
}

/* l made one string: its strings joined with sep between them. */
static bool strs_join(struct run *r, struct strs *l, const char *sep)
{
    struct str all = {0};
    bool ok = str_put(r, &all, "", 0);
    for (int i = 0; ok && i < l->n; i++)
        ok = (i == 0 || str_put(r, &all, sep, strlen(sep))) && str_put(r, &all, l->v[i].p, l->v[i].n);
    if (!ok) {
        free(all.p);
        return false;
    }
    return strs_set_one(l, all);
}

/* The code point at s[*i..n) and its end; an invalid byte stands for itself as -1 - byte. */
static int32_t next_char(const char *s, size_t n, size_t *i)
{
    int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + *i, (utf8proc_ssize_t)(n - *i), &cp);
    if (k <= 0)
        return -1 - (unsigned char)s[(*i)++];
    *i += (size_t)k;
    return cp;
}

/* The first occurrence of a (la > 0 bytes) in [p, end), or NULL. */
static const char *find_str(const char *p, const char *end, const char *a, size_t la)
{
    while ((size_t)(end - p) >= la && (p = memchr(p, a[0], (size_t)(end - p) - la + 1))) {
        if (memcmp(p + 1, a + 1, la - 1) == 0)
            return p;
        p++;
    }
    return NULL;
}

/* s with every occurrence of a (la > 0 bytes) replaced by b, left to right, without overlaps (Rust's
 * str::replace). The result's size is counted first, so one past the bound fails before it is written. */
static bool str_replace(struct run *r, struct str *s, const char *a, size_t la, const char *b, size_t lb)
{
    if (!la)
        return true;
    const char *end = s->p + s->n, *hit;
    size_t hits = 0;
    for (const char *q = s->p; (hit = find_str(q, end, a, la)); q = hit + la)
        hits++;
    if (!hits)
        return true;
    if (lb > la && hits > r->room / (lb - la)) {
        r->over = true;
        return false;
    }
    if (lb > la)
        r->room -= hits * (lb - la);
    struct str o = {0};
    if (!str_room(r, &o, lb >= la ? s->n + hits * (lb - la) : s->n - hits * (la - lb)))
        return false;
    const char *q = s->p;
    for (; (hit = find_str(q, end, a, la)); q = hit + la) {
        memcpy(o.p + o.n, q, (size_t)(hit - q));
        memcpy(o.p + o.n + (hit - q), b, lb);
        o.n += (size_t)(hit - q) + lb;
    }
    memcpy(o.p + o.n, q, (size_t)(end - q));
    o.n += (size_t)(end - q);
    o.p[o.n] = 0;
    free(s->p);
    *s = o;
    return true;
}

/* Replace each pair of a list ({from, to}, ... NULL) in turn over s. */
static bool replace_list(struct run *r, struct str *s, const char *const *pairs)
{
    for (int k = 0; pairs[k]; k += 2)
        if (!str_replace(r, s, pairs[k], strlen(pairs[k]), pairs[k + 1], strlen(pairs[k + 1])))
            return false;
    return true;
}

/* The tokenizers library's WordPiece clean-up, applied within each token. */
static const char *const wordpiece_cleanup[] = {
    " .", ".", " ?", "?", " !", "!", " ,", ",", " ' ", "'", " n't", "n't", " 'm", "'m",
    " do not", " don't", " 's", "'s", " 've", "'ve", " 're", "'re", NULL};

/* transformers' clean_up_tokenization, applied to the whole text (no " do not" rule). */
static const char *const transformers_cleanup[] = {
    " .", ".", " ?", "?", " !", "!", " ,", ",", " ' ", "'", " n't", "n't", " 'm", "'m",
    " 's", "'s", " 've", "'ve", " 're", "'re", NULL};

/*
 * The sequence that starts at s[i] (i < n): its length k (a maximal invalid
 * part, when not valid: the longest start of a valid sequence, or one byte)
 * and whether it is a whole valid UTF-8 sequence. The second byte's range
 * depends on the first: no overlong forms, surrogates or code points past
 * U+10FFFF (Unicode's table 3-7, which Rust's decoder follows).
 */
static size_t utf8_seq(const uint8_t *s, size_t n, size_t i, bool *valid)
{
    uint8_t c = s[i];
    int need = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    size_t k = 1;
    if (need > 1) {
        uint8_t lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
        uint8_t hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
        if (i + 1 < n && s[i + 1] >= lo && s[i + 1] <= hi) {
            k = 2;
            while ((int)k < need && i + k < n && (s[i + k] & 0xC0) == 0x80)
                k++;
        }
    }
    *valid = need && (int)k == need;
    return k;
}

static bool utf8_valid(const uint8_t *s, size_t n)
{
    bool valid = true;
    for (size_t i = 0; valid && i < n;)
        i += utf8_seq(s, n, i, &valid);
    return valid;
}

/* Bytes s[0..n) as UTF-8 into out, each maximal invalid part replaced by U+FFFD (Rust's from_utf8_lossy). */
static bool put_lossy(struct run *r, struct str *out, const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        bool valid;
        size_t k = utf8_seq(s, n, i, &valid);
        if (!(valid ? str_put(r, out, (const char *)s + i, k) : str_cp(r, out, 0xFFFD)))
            return false;
        i += k;
    }
    return true;
}

// --- the steps ----------------------------------------------------------------------------

enum step_kind { S_BYTE_LEVEL, S_WORDPIECE, S_METASPACE, S_REPLACE, S_BYTE_FALLBACK, S_FUSE, S_STRIP, S_BPE };

struct step {
    enum step_kind kind;
    char *a, *b;        /* WordPiece: a prefix; Replace: a -> b; BPEDecoder: a suffix */
    bool flag;          /* WordPiece: cleanup; Metaspace: prepend_scheme is not "never" */
    int32_t cp;         /* Metaspace: replacement; Strip: content */
    size_t start, stop; /* Strip: at most this many from each end */
};

struct hp_decoder {
    struct step *step;
    int n_step;
    bool none;            /* no decoder: tokens joined with spaces */
    char *unsupported;    /* why decoding cannot be done, or NULL */
    int16_t byte_of[324]; /* ByteLevel: the byte of a code point of GPT-2's map, -1 if none */
};

/* One token through ByteLevel's map, appended as bytes to raw; a character outside the map: the token as is. */
static bool byte_level_token(struct run *r, const struct hp_decoder *d, const struct str *t, struct str *raw)
{
    size_t at = raw->n;
    for (size_t i = 0; i < t->n;) {
        int32_t c = next_char(t->p, t->n, &i);
        if (c < 0 || c >= 324 || d->byte_of[c] < 0) {
            raw->n = at;
            return str_put(r, raw, t->p, t->n);
        }
        char b = (char)d->byte_of[c];
        if (!str_put(r, raw, &b, 1))
            return false;
    }
    return true;
}

/* The byte a token spells as "<0x" two hex digits ">" (read as Rust's from_str_radix does: "+A" too), or -1. */
static int fallback_byte(const struct str *t)
{
    if (t->n != 6 || memcmp(t->p, "<0x", 3) != 0 || t->p[5] != '>')
        return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = t->p[i];
        int x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (x < 0 && !(i == 3 && c == '+'))
            return -1;
        if (x >= 0)
            v = v * 16 + x;
    }
    return v;
}

/* A run of fallback bytes onto the list: one string if it is UTF-8, else U+FFFD per byte; the run emptied. */
static bool flush_bytes(struct run *r, struct str *bytes, struct strs *o)
{
    struct str *out = &o->v[o->n];
    bool ok = str_put(r, out, "", 0);
    if (ok && utf8_valid((const uint8_t *)bytes->p, bytes->n))
        ok = str_put(r, out, bytes->p, bytes->n);
    else
        for (size_t i = 0; ok && i < bytes->n; i++)
            ok = str_cp(r, out, 0xFFFD);
    o->n++; /* counted even when short, so it is freed */
    bytes->n = 0;
    return ok;
}

static bool run_step(struct run *r, const struct hp_decoder *d, const struct step *s, struct strs *l)
{
    bool ok = true;
    switch (s->kind) {
    case S_BYTE_LEVEL: {
        struct str raw = {0}, text = {0};
        ok = str_put(r, &raw, "", 0) && str_put(r, &text, "", 0);
        for (int i = 0; ok && i < l->n; i++)
            ok = byte_level_token(r, d, &l->v[i], &raw);
        ok = ok && put_lossy(r, &text, (const uint8_t *)raw.p, raw.n);
        free(raw.p);
        if (!ok) {
            free(text.p);
            return false;
        }
        return strs_set_one(l, text);
    }
    case S_WORDPIECE: {
        size_t pl = strlen(s->a);
        for (int i = 0; ok && i < l->n; i++) {
            struct str *t = &l->v[i];
            if (i > 0 && t->n >= pl && memcmp(t->p, s->a, pl) == 0) { /* an empty prefix: joined as they are */
                memmove(t->p, t->p + pl, t->n - pl + 1);
                t->n -= pl;
            } else if (i > 0) {
                struct str o = {0};
                ok = str_put(r, &o, " ", 1) && str_put(r, &o, t->p, t->n);
                free(t->p);
                *t = o;
            }
            if (ok && s->flag)
                ok = replace_list(r, t, wordpiece_cleanup);
        }
        return ok;
    }
    case S_METASPACE:
        for (int i = 0; ok && i < l->n; i++) {
            struct str *t = &l->v[i], o = {0};
            ok = str_put(r, &o, "", 0);
            for (size_t k = 0; ok && k < t->n;) {
                size_t at = k;
                int32_t c = next_char(t->p, t->n, &k);
                if (c != s->cp)
                    ok = str_put(r, &o, t->p + at, k - at);
                else if (!(i == 0 && s->flag))
                    ok = str_put(r, &o, " ", 1);
            }
            free(t->p);
            *t = o;
        }
        return ok;
    case S_REPLACE:
        for (int i = 0; ok && i < l->n; i++)
            ok = str_replace(r, &l->v[i], s->a, strlen(s->a), s->b, strlen(s->b));
        return ok;
    case S_BYTE_FALLBACK: {
        /* the strings move to a new list, where each run of byte tokens becomes one */
        struct strs o = {calloc((size_t)l->n + 1, sizeof *o.v), 0};
        struct str bytes = {0};
        ok = o.v != NULL && str_put(r, &bytes, "", 0);
        for (int i = 0; ok && i < l->n; i++) {
            int b = fallback_byte(&l->v[i]);
            if (b >= 0) {
                char c = (char)b;
                ok = str_put(r, &bytes, &c, 1);
                continue;
            }
            if (bytes.n)
                ok = flush_bytes(r, &bytes, &o);
            if (ok) {
                o.v[o.n++] = l->v[i];
                l->v[i] = (struct str){0};
            }
        }
        if (ok && bytes.n)
            ok = flush_bytes(r, &bytes, &o);
        free(bytes.p);
        strs_free(l);
        *l = o;
        return ok && o.v;
    }
    case S_FUSE: return strs_join(r, l, "");
    case S_STRIP:
        for (int i = 0; i < l->n; i++) {
            struct str *t = &l->v[i];
            size_t n_chars = 0, a = 0, b;
            for (size_t k = 0; k < t->n; n_chars++)
                next_char(t->p, t->n, &k);
            size_t *off = malloc((n_chars + 1) * sizeof *off); /* each character's byte offset */
            int32_t *cp = malloc((n_chars + 1) * sizeof *cp);
            if (!off || !cp) {
                free(off), free(cp);
                return false;
            }
            for (size_t k = 0, j = 0; k < t->n; j++) {
                off[j] = k;
                cp[j] = next_char(t->p, t->n, &k);
            }
            off[n_chars] = t->n;
            while (a < s->start && a < n_chars && cp[a] == s->cp)
                a++;
            b = n_chars;
            for (size_t k = 0; k < s->stop && b > 0 && cp[b - 1] == s->cp; k++)
                b--;
            /* the library panics when the two ends cross (a token of content characters only): empty here */
            size_t from = a < b ? off[a] : 0, to = a < b ? off[b] : 0;
            memmove(t->p, t->p + from, to - from);
            t->n = to - from;
            t->p[t->n] = 0;
            free(off), free(cp);
        }
        return true;
    case S_BPE: /* the suffix ends a word: a space, but nothing after the last token */
        for (int i = 0; ok && i < l->n; i++)
            ok = str_replace(r, &l->v[i], s->a, strlen(s->a), " ", i + 1 < l->n ? 1 : 0);
        return ok;
    }
    return false;
}

// --- loading ------------------------------------------------------------------------------

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The one code point of s, or -1 when s is not exactly one character. */
static int32_t one_char(const char *s)
{
    if (!s || !*s)
        return -1;
    size_t n = strlen(s), i = 0;
    int32_t c = next_char(s, n, &i);
    return i == n && c >= 0 ? c : -1;
}

/* Note why the decoder cannot run (the first reason only); false only when out of memory. */
static bool refuse(struct hp_decoder *d, const char *path, const char *why)
{
    if (d->unsupported)
        return true;
    size_t n = strlen(path) + strlen(why) + 200;
    if (!(d->unsupported = malloc(n)))
        return false;
    snprintf(d->unsupported, n,
             "%s: decoder %s is not supported (supported: ByteLevel, WordPiece, Metaspace, Replace of a string, "
             "ByteFallback, Fuse, Strip, BPEDecoder, Sequence)",
             path, why);
    return true;
}

/* Add the step(s) of j (a Sequence's, flattened: each step runs on the whole list anyway). */
static bool add_steps(struct hp_decoder *d, const cJSON *j, const char *path, int depth)
{
    const char *type = jstr(j, "type");
    char why[160];
    if (!type)
        return refuse(d, path, "without a \"type\"");
    snprintf(why, sizeof why, "'%.100s'", type);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *x, *list = cJSON_GetObjectItemCaseSensitive(j, "decoders");
        if (!cJSON_IsArray(list) || depth > 32)
            return refuse(d, path, "Sequence without a list of decoders");
        cJSON_ArrayForEach(x, list) if (!add_steps(d, x, path, depth + 1)) return false;
        return true;
    }
    struct step s = {0};
    if (strcmp(type, "ByteLevel") == 0) {
        s.kind = S_BYTE_LEVEL;
    } else if (strcmp(type, "WordPiece") == 0) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "cleanup");
        s.kind = S_WORDPIECE;
        s.a = strdup(jstr(j, "prefix") ? jstr(j, "prefix") : "##");
        s.flag = cJSON_IsBool(c) ? cJSON_IsTrue(c) : true;
        if (!s.a)
            return false;
    } else if (strcmp(type, "Metaspace") == 0) {
        const char *scheme = jstr(j, "prepend_scheme");
        const cJSON *aps = cJSON_GetObjectItemCaseSensitive(j, "add_prefix_space");
        s.kind = S_METASPACE;
        s.cp = one_char(jstr(j, "replacement"));
        if (s.cp < 0)
            return refuse(d, path, "Metaspace whose replacement is not one character");
        /* prepend_scheme "always" (the default) or "first" drop the first token's replacement; an old
         * file's add_prefix_space false means "never" */
        s.flag = !(scheme && strcmp(scheme, "never") == 0) && !cJSON_IsFalse(aps);
    } else if (strcmp(type, "Replace") == 0) {
        const char *pat = jstr(cJSON_GetObjectItemCaseSensitive(j, "pattern"), "String");
        if (!pat || !jstr(j, "content"))
            return refuse(d, path, "Replace with a regex pattern");
        s.kind = S_REPLACE;
        s.a = strdup(pat);
        s.b = strdup(jstr(j, "content"));
        if (!s.a || !s.b)
            return free(s.a), free(s.b), false;
    } else if (strcmp(type, "ByteFallback") == 0) {
        s.kind = S_BYTE_FALLBACK;
    } else if (strcmp(type, "Fuse") == 0) {
        s.kind = S_FUSE;
    } else if (strcmp(type, "Strip") == 0) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "start"), *b = cJSON_GetObjectItemCaseSensitive(j, "stop");
        s.kind = S_STRIP;
        s.cp = one_char(jstr(j, "content"));
        if (s.cp < 0 || !cJSON_IsNumber(a) || !cJSON_IsNumber(b) || !(a->valuedouble >= 0) || !(b->valuedouble >= 0))
            return refuse(d, path, "Strip without one content character and whole numbers start and stop");
        s.start = a->valuedouble < 1e9 ? (size_t)a->valuedouble : (size_t)1e9;
        s.stop = b->valuedouble < 1e9 ? (size_t)b->valuedouble : (size_t)1e9;
    } else if (strcmp(type, "BPEDecoder") == 0) {
        const char *suffix = jstr(j, "suffix");
        s.kind = S_BPE;
        if (suffix && !*suffix)
            return refuse(d, path, "BPEDecoder with an empty suffix");
        if (!(s.a = strdup(suffix ? suffix : "</w>")))
            return false;
    } else {
        return refuse(d, path, why);
    }
    struct step *v = realloc(d->step, (size_t)(d->n_step + 1) * sizeof *v);
    if (!v)
        return free(s.a), free(s.b), false;
    d->step = v;
    d->step[d->n_step++] = s;
    return true;
}

// --- the face the tokenizer sees ---------------------------------------------------------

enum hp_status hp_decoder_load(const struct cJSON *j, const char *path, struct hp_decoder **out,
                               struct hp_error *err)
{
    struct hp_decoder *d = calloc(1, sizeof *d);
    *out = NULL;
    if (!d)
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    for (int c = 0; c < 324; c++)
        d->byte_of[c] = -1;
    for (int b = 0; b < 256; b++)
        d->byte_of[hp_byte_level_cp((uint8_t)b)] = (int16_t)b;
    d->none = !j || cJSON_IsNull(j);
    if (!d->none && !add_steps(d, j, path, 0)) {
        hp_decoder_free(d);
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    }
    *out = d;
    return HP_OK;
}

void hp_decoder_free(struct hp_decoder *d)
{
    if (!d)
        return;
    for (int i = 0; i < d->n_step; i++)
        free(d->step[i].a), free(d->step[i].b);
    free(d->step);
    free(d->unsupported);
    free(d);
}

/* What the strings of l may grow by before they pass HP_TEXT_MAX together. */
static size_t room_left(const struct strs *l)
{
    size_t total = 0;
    for (int i = 0; i < l->n; i++)
        total += l->v[i].n;
    return total < (size_t)HP_TEXT_MAX ? (size_t)HP_TEXT_MAX - total : 0;
}

enum hp_status hp_decoder_run(const struct hp_decoder *d, const char *const *tok, const size_t *len, int n,
                              bool clean_up, char **out, size_t *n_out, struct hp_error *err)
{
    *out = NULL;
    *n_out = 0;
    if (d->unsupported)
        return hp_fail(err, HP_ERR_UNSUPPORTED, "%s", d->unsupported);
    struct run r = {false};
    struct strs l = {calloc((size_t)n + 1, sizeof *l.v), 0};
    bool ok = l.v != NULL;
    for (; ok && l.n < n; l.n++)
        ok = str_put(&r, &l.v[l.n], tok[l.n], len[l.n]);
    for (int i = 0; ok && i < d->n_step; i++) {
        r.room = room_left(&l);
        ok = run_step(&r, d, &d->step[i], &l);
    }
    r.room = room_left(&l);
    ok = ok && strs_join(&r, &l, d->none ? " " : "");
    if (ok && clean_up)
        ok = replace_list(&r, &l.v[0], transformers_cleanup);
    if (!ok) {
        strs_free(&l);
        if (r.over)
            return hp_fail(err, HP_ERR_UNSUPPORTED,
                           "decoding %d token(s) makes a text longer than %d MB (does a step of the decoder keep "
                           "lengthening it, e.g. chained Replace?)",
                           n, HP_TEXT_MAX >> 20);
        return hp_fail(err, HP_ERR_NOMEM, "out of memory while decoding %d token(s)", n);
    }
    *out = l.v[0].p;
    *n_out = l.v[0].n;
    free(l.v);
    return HP_OK;
}
