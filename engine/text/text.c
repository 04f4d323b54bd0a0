/*
 * text.c -- held-out text to token ids, with the model's own tokenizer.
 *
 * Formats:
 *   .txt    documents separated by blank lines (empty or only whitespace,
 *           as data.c's hp_blank), each encoded with the
 *           tokenizer's special tokens (its template: <s> for Llama-2 and
 *           Llama-3, [CLS] ... [SEP] for BERT; GPT-2-style tokenizers, which
 *           declare none, get <|endoftext|> after each document). For a
 *           causal model they are packed end to end and cut into rows of
 *           seq_len (the remainder dropped); for an encoder, whose tokens all
 *           see each other, each document is a row of its own, padded under
 *           an attention mask, its text cut to fit seq_len (when given) as
 *           Hugging Face truncates: the special tokens stay.
 *           hp_data.n_dropped counts the tokens left out.
 *   .jsonl  with "text" (or "text_a" and "text_b"): one row per object,
 *           encoded with special tokens, padded to the longest row (or cut
 *           to seq_len when one is given) under an attention mask. Or task
 *           rows (docs/tasks.md) whose first row has a text field: task.c
 *           reads them with the tokenizer.
 * Any other file goes to hp_data_load unchanged. Tokenized text is cached by
 * digest (below).
 * Must not: print or exit. Owns nothing in memory past the call, but leaves
 * files behind: the cache of tokenized text (under $HP_CACHE_DIR, else
 * $XDG_CACHE_HOME/headprune, else ~/.cache/headprune; see "the cache" below),
 * which the contract in headprune.h names.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "data.h"
#include "json.h"
#include "tokenizer.h" // hp_tokenizer_digest: the cache key of a GGUF file's tokenizer
#include "util.h"

/* What a .jsonl file holds, by its first object: ids (for hp_data_load), text ("text" or "text_a"), or task
 * rows with a text field (docs/tasks.md). */
enum jsonl_kind { JSONL_IDS, JSONL_TEXT, JSONL_TASK };

/*
 * The kind of a .jsonl file; reads only up to its first non-blank line. A
 * file that cannot be read says ids: the ids loader then reports it.
 */
static enum jsonl_kind jsonl_kind(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return JSONL_IDS;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    enum jsonl_kind kind = JSONL_IDS;
    while ((n = getline(&line, &cap, f)) >= 0) {
        if (hp_blank(line, (size_t)n - (n > 0 && line[n - 1] == '\n')))
            continue;
        /* a string with a NUL says no here: the ids loader then names it */
        cJSON *o;
        hp_json_parse(path, 1, line, (size_t)n, NULL, &o, NULL);
        if (o && (cJSON_GetObjectItemCaseSensitive(o, "text") || cJSON_GetObjectItemCaseSensitive(o, "text_a")))
            kind = JSONL_TEXT;
        else if (hp_task_row_has_text(o))
            kind = JSONL_TASK;
        cJSON_Delete(o);
        break;
    }
    free(line);
    fclose(f);
    return kind;
}

/* The offset of the '\n' ending the line that starts at i (len if none). */
static size_t line_end(const char *buf, size_t len, size_t i)
{
    const char *nl = memchr(buf + i, '\n', len - i);
    return nl ? (size_t)(nl - buf) : len;
}

static bool blank_line(const char *buf, size_t len, size_t i)
{
    return hp_blank(buf + i, line_end(buf, len, i) - i);
}

struct rows {
    int32_t *ids; /* growing stream (.txt) */
    size_t n, cap;
};

static bool rows_put(struct rows *r, const int32_t *v, size_t n)
{
    if (n == 0)
        return true;
    if (r->n + n > r->cap) {
        size_t cap = r->cap ? r->cap : 4096;
        while (cap < r->n + n)
            cap *= 2;
        int32_t *p = realloc(r->ids, cap * sizeof *p);
        if (!p)
            return false;
        r->ids = p;
        r->cap = cap;
    }
    memcpy(r->ids + r->n, v, n * sizeof *v);
    r->n += n;
    return true;
}

/*
 * Document a (na bytes) encoded with its special tokens and, when longer than
 * seq_len (> 0), its text cut to fit as Hugging Face's truncation does: the
 * special tokens the template adds around it stay. *dropped gets the tokens
 * cut off.
 */
static enum hp_status encode_fit(const struct hp_tokenizer *t, const char *a, size_t na, int seq_len,
                                 struct hp_encoding *out, int64_t *dropped, struct hp_error *err)
{
    *dropped = 0;
    enum hp_status st = hp_tokenizer_encode(t, a, na, NULL, 0, true, out, err);
    if (st != HP_OK || seq_len <= 0 || out->n <= seq_len)
        return st;
    struct hp_encoding plain;
    if ((st = hp_tokenizer_encode(t, a, na, NULL, 0, false, &plain, err)) != HP_OK) {
        hp_encoding_free(out);
        return st;
    }
    /* the template is [prefix] text [suffix]: find the text inside it */
    int n_spec = out->n - plain.n, pre = plain.n > 0 ? 0 : n_spec + 1; /* no text: nothing to find */
    while (pre <= n_spec && memcmp(out->ids + pre, plain.ids, (size_t)plain.n * sizeof(int32_t)) != 0)
        pre++;
    int keep = seq_len - n_spec;
    if (pre > n_spec || keep < 1) { /* no text in the template, or no room for any: cut the end */
        *dropped = out->n - seq_len;
        out->n = seq_len;
    } else {
        int suf = n_spec - pre;
        memmove(out->ids + pre + keep, out->ids + pre + plain.n, (size_t)suf * sizeof(int32_t));
        memmove(out->type_ids + pre + keep, out->type_ids + pre + plain.n, (size_t)suf * sizeof(int32_t));
        *dropped = plain.n - keep;
        out->n = seq_len;
    }
    hp_encoding_free(&plain);
    return HP_OK;
}

/* Rows of d (n, seq_len) from encodings enc (n): ids, token types (when d has them) and the attention
 * mask, padded with pad; dropped: the tokens left out to fit. */
static void fill_rows(struct hp_data *d, const struct hp_encoding *enc, int n, int32_t pad, int64_t dropped)
{
    const int T = d->seq_len;
    for (int r = 0; r < n; r++)
        for (int k = 0; k < T; k++) {
            size_t at = (size_t)r * T + k;
            bool real = k < enc[r].n;
            d->ids[at] = real ? enc[r].ids[k] : pad;
            if (d->type_ids)
                d->type_ids[at] = real ? enc[r].type_ids[k] : 0;
            d->attn_mask[at] = real;
        }
    d->n_dropped = dropped;
}

/* Each document of a .txt, in order: its text (s, e) and first line. */
struct doc {
    size_t s, e, line;
};

/* The next document from *i on into d, *i moved past it; false when none is left. */
static bool next_doc(const char *buf, size_t len, size_t *at, size_t *line, struct doc *d)
{
    size_t i = *at;
    /* skip blank lines (empty, or only spaces, tabs and \r), then take lines up to the next one */
    while (i < len && blank_line(buf, len, i)) {
        i = line_end(buf, len, i) + 1;
        (*line)++;
    }
    if (i >= len) {
        *at = len;
        return false;
    }
    d->s = i;
    d->line = *line;
    while (i < len && !blank_line(buf, len, i)) {
        i = line_end(buf, len, i) + 1;
        (*line)++;
    }
    size_t e = i > len ? len : i;
    while (e > d->s && (buf[e - 1] == '\n' || buf[e - 1] == '\r'))
        e--;
    d->e = e;
    *at = i;
    return true;
}

/* An encoder's .txt: one row per document, padded (seq_len 0: to the longest). */
static enum hp_status load_txt_rows(const char *path, char *buf, size_t len, const struct hp_tokenizer *t,
                                    int seq_len, bool types, struct hp_data **out, struct hp_error *err)
{
    struct hp_encoding *enc = NULL;
    int n = 0, cap = 0, longest = 0;
    int64_t dropped = 0;
    enum hp_status st = HP_OK;
    size_t line = 1;
    struct doc d;
    for (size_t i = 0; st == HP_OK && next_doc(buf, len, &i, &line, &d);) {
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            struct hp_encoding *p = realloc(enc, (size_t)cap * sizeof *p);
            if (!p) {
                st = hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
            enc = p;
        }
        int64_t cut;
        st = encode_fit(t, buf + d.s, d.e - d.s, seq_len, &enc[n], &cut, err);
        if (st != HP_OK) {
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            st = hp_fail(err, st, "%s: the document starting on line %zu: %s", path, d.line, msg);
            break;
        }
        dropped += cut;
        longest = enc[n].n > longest ? enc[n].n : longest;
        n++;
    }
    if (st == HP_OK && n == 0)
        st = hp_fail(err, HP_ERR_SHAPE, "%s: no documents (text separated by blank lines)", path);
    int T = seq_len > 0 ? seq_len : longest;
    if (st == HP_OK && T < 1)
        st = hp_fail(err, HP_ERR_SHAPE, "%s: every document encodes to no tokens", path);
    if (st == HP_OK && (st = hp_data_alloc(path, n, T, false, true, types, out, err)) == HP_OK) {
        fill_rows(*out, enc, n, hp_tokenizer_pad(t), dropped);
    }
    for (int r = 0; r < n; r++)
        hp_encoding_free(&enc[r]);
    free(enc);
    return st;
}

/* A causal model's .txt: documents packed end to end, cut into rows of seq_len. */
static enum hp_status load_txt_packed(const char *path, char *buf, size_t len, const struct hp_tokenizer *t,
                                      int seq_len, struct hp_data **out, struct hp_error *err)
{
    if (seq_len < 2)
        return hp_fail(err, HP_ERR_ARG, "%s: text is packed into rows of --seq-len tokens: give --seq-len (at least 2)",
                       path);
    int32_t eot = hp_tokenizer_separator(t);
    struct rows r = {0};
    enum hp_status st = HP_OK;
    int n_docs = 0;
    size_t line = 1;
    struct doc d;
    for (size_t i = 0; st == HP_OK && next_doc(buf, len, &i, &line, &d);) {
        struct hp_encoding enc;
        st = hp_tokenizer_encode(t, buf + d.s, d.e - d.s, NULL, 0, true, &enc, err);
        if (st != HP_OK) {
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            st = hp_fail(err, st, "%s: the document starting on line %zu: %s", path, d.line, msg);
            break;
        }
        if (!rows_put(&r, enc.ids, (size_t)enc.n) || (eot >= 0 && !rows_put(&r, &eot, 1)))
            st = hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
        hp_encoding_free(&enc);
        n_docs++;
    }
    if (st == HP_OK && r.n < (size_t)seq_len)
        st = hp_fail(err, HP_ERR_SHAPE, "%s: %d documents make %zu tokens, fewer than one row of --seq-len %d", path,
                     n_docs, r.n, seq_len);
    int n_rows = st == HP_OK ? (int)(r.n / (size_t)seq_len) : 0;
    if (st == HP_OK && (st = hp_data_alloc(path, n_rows, seq_len, false, false, false, out, err)) == HP_OK) {
        memcpy((*out)->ids, r.ids, (size_t)n_rows * seq_len * sizeof(int32_t));
        (*out)->n_dropped = (int64_t)(r.n - (size_t)n_rows * seq_len);
    }
    free(r.ids);
    return st;
}

/* A row's "label": a class id, or one of the model's id2label names. */
static enum hp_status parse_label(const char *path, size_t line, const cJSON *v, const struct hp_model_info *info,
                                  int32_t *out, struct hp_error *err)
{
    if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= INT32_MAX &&
        v->valuedouble == (double)(int32_t)v->valuedouble) {
        *out = (int32_t)v->valuedouble;
        return HP_OK;
    }
    if (!cJSON_IsString(v))
        return hp_fail(err, HP_ERR_FORMAT, "%s:%zu: \"label\" is neither a class id nor a class name", path, line);
    char names[256] = "";
    for (int i = 0; info && i < info->n_labels; i++) {
        if (strcmp(info->label_names[i], v->valuestring) == 0) {
            *out = i;
            return HP_OK;
        }
        size_t k = strlen(names);
        snprintf(names + k, sizeof names - k, "%s%s", i ? ", " : "", info->label_names[i]);
    }
    if (!info || info->n_labels == 0)
        return hp_fail(err, HP_ERR_FORMAT, "%s:%zu: label \"%s\" names a class but the model has no id2label", path,
                       line, v->valuestring);
    return hp_fail(err, HP_ERR_ARG, "%s:%zu: label \"%s\" is not one of the model's id2label (%s)", path, line,
                   v->valuestring, names);
}

static enum hp_status load_text_jsonl(const char *path, char *buf, size_t len, const struct hp_tokenizer *t,
                                      const struct hp_model_info *info, int seq_len, struct hp_data **out,
                                      struct hp_error *err)
{
    struct hp_encoding *enc = NULL;
    int32_t *labels = NULL;
    int n = 0, cap = 0, longest = 0, first_line = 0;
    int64_t dropped = 0;
    bool has_label = false;
    enum hp_status st = HP_OK;
    size_t line = 0;
    for (size_t i = 0; st == HP_OK && i < len;) {
        size_t s = i;
        while (i < len && buf[i] != '\n')
            i++;
        line++;
        size_t e = i++;
        if (hp_blank(buf + s, e - s))
            continue;
        cJSON *o;
        if ((st = hp_json_parse(path, line, buf + s, e - s, NULL, &o, err)) != HP_OK)
            break;
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "text");
        const cJSON *b = NULL;
        if (!a) {
            a = cJSON_GetObjectItemCaseSensitive(o, "text_a");
            b = cJSON_GetObjectItemCaseSensitive(o, "text_b");
        }
        if (hp_task_row_is(o)) {
            st = hp_fail(err, HP_ERR_FORMAT, "%s:%zu: a task row (with \"prompt\" or \"prompt_ids\") but line %d is "
                         "not (a file holds task rows or other rows, not both)", path, line, n ? first_line : 1);
        } else if (!o || !cJSON_IsString(a) || (b && !cJSON_IsString(b))) {
            st = hp_fail(err, HP_ERR_FORMAT, "%s:%zu: %s", path, line,
                         !o ? "not a JSON object" : "needs \"text\" (or \"text_a\" and \"text_b\") as strings");
        } else {
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                struct hp_encoding *p = realloc(enc, (size_t)cap * sizeof *p);
                int32_t *q = p ? realloc(labels, (size_t)cap * sizeof *q) : NULL;
                if (p)
                    enc = p;
                if (q)
                    labels = q;
                if (!p || !q)
                    st = hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
            }
            const cJSON *lab = cJSON_GetObjectItemCaseSensitive(o, "label");
            if (n == 0) {
                has_label = lab != NULL;
                first_line = (int)line;
            }
            if (st == HP_OK && (lab != NULL) != has_label)
                st = hp_fail(err, HP_ERR_FORMAT, "%s:%zu: row %s \"label\" but line %d %s (give it on every row or on none)",
                             path, line, lab ? "has" : "has no", first_line, lab ? "does not" : "does");
            if (st == HP_OK && lab)
                st = parse_label(path, line, lab, info, &labels[n], err);
            if (st == HP_OK) {
                const char *sb = b ? b->valuestring : NULL;
                int64_t cut = 0;
                /* one text is cut to fit as Hugging Face truncates it; a pair is cut at its end */
                st = sb ? hp_tokenizer_encode(t, a->valuestring, strlen(a->valuestring), sb, strlen(sb), true, &enc[n],
                                              err)
                        : encode_fit(t, a->valuestring, strlen(a->valuestring), seq_len, &enc[n], &cut, err);
                if (st == HP_OK && sb && seq_len > 0 && enc[n].n > seq_len)
                    cut = enc[n].n - seq_len;
                dropped += st == HP_OK ? cut : 0;
                if (st != HP_OK) {
                    char msg[sizeof err->msg];
                    snprintf(msg, sizeof msg, "%s", err->msg);
                    st = hp_fail(err, st, "%s:%zu: %s", path, line, msg);
                } else if (enc[n].n > longest) {
                    longest = enc[n].n;
                }
                n += st == HP_OK;
            }
        }
        cJSON_Delete(o);
    }
    if (st == HP_OK && n == 0)
        st = hp_fail(err, HP_ERR_SHAPE, "%s: no text rows", path);
    int T = seq_len > 0 ? seq_len : longest;
    if (st == HP_OK && T < 1)
        st = hp_fail(err, HP_ERR_SHAPE, "%s: every text encodes to no tokens", path);
    if (st == HP_OK && (st = hp_data_alloc(path, n, T, false, true, true, out, err)) == HP_OK && has_label) {
        (*out)->seq_labels = labels;
        labels = NULL;
    }
    if (st == HP_OK) {
        fill_rows(*out, enc, n, hp_tokenizer_pad(t), dropped);
    }
    for (int r = 0; r < n; r++)
        hp_encoding_free(&enc[r]);
    free(enc);
    free(labels);
    return st;
}

/* Task rows (docs/tasks.md; task.c), their text fields tokenized with t, padded with its pad id. */
static enum hp_status load_task_jsonl(const char *path, char *buf, size_t len, const struct hp_tokenizer *t,
                                      int seq_len, struct hp_data **out, struct hp_error *err)
{
    struct hp_task_rows tr = {.path = path, .seq_len = seq_len};
    enum hp_status st = HP_OK;
    int line = 0;
    for (size_t i = 0; st == HP_OK && i < len;) {
        size_t s = i;
        while (i < len && buf[i] != '\n')
            i++;
        line++;
        size_t e = i++;
        if (hp_blank(buf + s, e - s))
            continue;
        cJSON *o;
        if ((st = hp_json_parse(path, (size_t)line, buf + s, e - s, NULL, &o, err)) != HP_OK)
            break;
        st = o ? hp_task_rows_add(&tr, o, line, t, err)
               : hp_fail(err, HP_ERR_FORMAT, "%s:%d: not a JSON object (one task row per line)", path, line);
        cJSON_Delete(o);
    }
    if (st == HP_OK)
        st = hp_data_from_task_rows(&tr, hp_tokenizer_pad(t), out, err);
    hp_task_rows_free(&tr);
    return st;
}

// --- the cache of tokenized text --------------------------------------------------------
/*
 * Tokenized text is kept under $HP_CACHE_DIR, else $XDG_CACHE_HOME/headprune,
 * else ~/.cache/headprune, in tokens/<digest>.bin, where the digest covers
 * the text's bytes, the tokenizer's files (a GGUF file's: a digest of its
 * tokenizer metadata), seq_len and the model's class names. The cache is
 * only an optimisation: a file that cannot be read or written, or does not
 * check out (magic, sizes, a checksum of its arrays), is ignored.
 */
static const char cache_magic[8] = {'H', 'P', 'T', 'O', 'K', '3', 0, 0};

/* Bumped whenever tokenization or this file's format changes, so old entries are not used. */
#define HP_TEXT_CACHE_VERSION "headprune-text-5" /* 5: task rows (their answers after the arrays) */

/* An entry's flags: 1 attention mask, 2 token types, 4 sequence labels, 8 task rows (then 16 wrong answers,
 * 32 corrupt prompts). */
enum { C_MASK = 1, C_TYPES = 2, C_LABELS = 4, C_TASK = 8, C_WRONG = 16, C_CORRUPT = 32, C_ALL = 63 };

/* The task's per-row arrays in their order in an entry (answer, wrong when there, pos, line): how many. */
static int task_rows(const struct hp_data *d, int32_t *rows[4])
{
    const struct hp_task *k = d->task;
    int n = 0;
    if (!k)
        return 0;
    rows[n++] = k->answer;
    if (k->wrong)
        rows[n++] = k->wrong;
    rows[n++] = k->pos;
    rows[n++] = k->line;
    return n;
}

/* XXH3-64 of an entry's arrays, stored after its header. */
static uint64_t payload_sum(const struct hp_data *d)
{
    size_t n = (size_t)d->n_seqs * d->seq_len;
    XXH3_state_t *h = XXH3_createState();
    if (!h)
        return 0;
    XXH3_64bits_reset(h);
    XXH3_64bits_update(h, d->ids, n * sizeof *d->ids);
    if (d->attn_mask)
        XXH3_64bits_update(h, d->attn_mask, n);
    if (d->type_ids)
        XXH3_64bits_update(h, d->type_ids, n * sizeof *d->type_ids);
    if (d->seq_labels)
        XXH3_64bits_update(h, d->seq_labels, (size_t)d->n_seqs * sizeof *d->seq_labels);
    int32_t *rows[4];
    for (int i = 0, k = task_rows(d, rows); i < k; i++)
        XXH3_64bits_update(h, rows[i], (size_t)d->n_seqs * sizeof(int32_t));
    if (d->task && d->task->corrupt)
        XXH3_64bits_update(h, d->task->corrupt, n * sizeof(int32_t));
    uint64_t v = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    return v;
}

/* name, then the file's bytes (nothing more when it does not exist); false when the file cannot be named
 * (out of memory, or a path over the system's limit): its bytes would be missing from the key */
static bool hash_file(XXH3_state_t *h, const char *dir, const char *name)
{
    char *path, chunk[65536];
    if (hp_path_make(&path, NULL, "%s/%s", dir, name) != HP_OK)
        return false;
    XXH3_128bits_update(h, name, strlen(name) + 1);
    FILE *f = fopen(path, "rb");
    bool named = f || errno != ENAMETOOLONG;
    free(path);
    size_t n;
    while (f && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
        XXH3_128bits_update(h, chunk, n);
    if (f)
        fclose(f);
    return named;
}

/* The cache entry's file name, a fresh string (free() it), or NULL when there is no cache to use. */
static char *cache_path(const char *text, size_t len, bool txt, const char *model_dir,
                        const struct hp_tokenizer *t, const struct hp_model_info *info, int seq_len)
{
    const char *base = getenv("HP_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char *dir = NULL, *mk = NULL, *out = NULL;
    if (base && *base)
        dir = strdup(base);
    else if (xdg && *xdg)
        hp_path_make(&dir, NULL, "%s/headprune", xdg);
    else if (home && *home)
        hp_path_make(&dir, NULL, "%s/.cache/headprune", home);
    XXH3_state_t *h = dir ? XXH3_createState() : NULL;
    if (!h) {
        free(dir);
        return NULL;
    }
    XXH3_128bits_reset(h);
    XXH3_128bits_update(h, HP_TEXT_CACHE_VERSION, sizeof HP_TEXT_CACHE_VERSION - 1);
    XXH3_128bits_update(h, text, len);
    /* the layout depends on the model's kind too: a row per document for encoders */
    int32_t shape[4] = {txt, seq_len, info && !info->causal, !info || info->n_token_types > 0};
    XXH3_128bits_update(h, shape, sizeof shape);
    static const char *const files[] = {"tokenizer.json", "vocab.txt", "vocab.json", "merges.txt",
                                        "tokenizer_config.json"};
    bool named = true;
    for (size_t i = 0; i < sizeof files / sizeof *files; i++)
        named = hash_file(h, model_dir, files[i]) && named;
    uint8_t tok[16]; /* a GGUF file's tokenizer is its metadata, not files in the folder */
    if (hp_tokenizer_digest(t, tok))
        XXH3_128bits_update(h, tok, sizeof tok);
    for (int i = 0; info && i < info->n_labels; i++)
        XXH3_128bits_update(h, info->label_names[i], strlen(info->label_names[i]) + 1);
    XXH128_hash_t d = XXH3_128bits_digest(h);
    XXH3_freeState(h);
    if (named && hp_path_make(&mk, NULL, "%s/tokens", dir) == HP_OK) {
        mkdir(dir, 0777); /* failures show up when the file is written */
        mkdir(mk, 0777);
        hp_path_make(&out, NULL, "%s/%016llx%016llx.bin", mk, (unsigned long long)d.high64,
                     (unsigned long long)d.low64);
    }
    free(mk);
    free(dir);
    return out;
}

/* The bytes an entry with header head (rows, seq_len, flags) holds; at most 2^48 ids, so exact in 64 bits. */
static uint64_t entry_size(const int32_t head[3])
{
    uint64_t rows = (uint64_t)head[0], n = rows * (uint64_t)head[1];
    int f = head[2];
    return 8 + 12 + 8 + 8 + 4 * n + ((f & C_MASK) ? n : 0) + ((f & C_TYPES) ? 4 * n : 0) +
           ((f & C_LABELS) ? 4 * rows : 0) + ((f & C_TASK) ? 4 * rows * (3 + !!(f & C_WRONG)) : 0) +
           ((f & C_CORRUPT) ? 4 * n : 0);
}

static bool cache_read(const char *cpath, const char *path, struct hp_data **out)
{
    FILE *f = fopen(cpath, "rb");
    if (!f)
        return false;
    struct stat sb;
    char magic[8];
    int32_t head[3];
    uint64_t sum = 0;
    int64_t dropped = 0;
    struct hp_data *d = NULL;
    bool ok = fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) && fread(magic, 1, 8, f) == 8 &&
              memcmp(magic, cache_magic, 8) == 0 && fread(head, 4, 3, f) == 3 && fread(&sum, 8, 1, f) == 1 &&
              fread(&dropped, 8, 1, f) == 1 && dropped >= 0 &&
              head[0] >= 1 && head[1] >= 1 && head[0] <= (1 << 24) && head[1] <= (1 << 24) && (head[2] & ~C_ALL) == 0 &&
              ((head[2] & C_TASK) || !(head[2] & (C_WRONG | C_CORRUPT)));
    /* The header's sizes must add up to the entry's real size before they size
     * an allocation: a damaged header claiming 2^24 x 2^24 ids is not a
     * petabyte request. */
    ok = ok && entry_size(head) == (uint64_t)sb.st_size &&
         hp_data_alloc(path, head[0], head[1], false, head[2] & C_MASK, head[2] & C_TYPES, &d, NULL) == HP_OK;
    size_t n = ok ? (size_t)head[0] * head[1] : 0, rows = ok ? (size_t)head[0] : 0;
    ok = ok && fread(d->ids, 4, n, f) == n;
    ok = ok && (!d->attn_mask || fread(d->attn_mask, 1, n, f) == n);
    ok = ok && (!d->type_ids || fread(d->type_ids, 4, n, f) == n);
    if (ok && (head[2] & C_LABELS))
        ok = (d->seq_labels = malloc(rows * sizeof(int32_t))) != NULL && fread(d->seq_labels, 4, rows, f) == rows;
    if (ok && (head[2] & C_TASK)) {
        int32_t *r[4];
        ok = hp_task_alloc(d, head[2] & C_WRONG, head[2] & C_CORRUPT) == HP_OK;
        for (int i = 0, k = ok ? task_rows(d, r) : 0; i < k; i++)
            ok = ok && fread(r[i], 4, rows, f) == rows;
        ok = ok && (!d->task->corrupt || fread(d->task->corrupt, 4, n, f) == n);
        for (size_t r = 0; ok && r < rows; r++) /* an answer position the rows have, at a real token */
            ok = d->task->pos[r] >= 0 && d->task->pos[r] < head[1] && d->attn_mask &&
                 d->attn_mask[r * (size_t)head[1] + (size_t)d->task->pos[r]];
    }
    ok = ok && fgetc(f) == EOF && payload_sum(d) == sum;
    fclose(f);
    if (!ok) {
        hp_data_free(d);
        return false;
    }
    d->n_dropped = dropped;
    *out = d;
    return true;
}

static void cache_write(const char *cpath, const struct hp_data *d)
{
    char *tmp;
    if (hp_path_make(&tmp, NULL, "%s.%ld.tmp", cpath, (long)getpid()) != HP_OK)
        return;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        free(tmp);
        return;
    }
    size_t n = (size_t)d->n_seqs * d->seq_len, rows = (size_t)d->n_seqs;
    const struct hp_task *k = d->task;
    int32_t head[3] = {d->n_seqs, d->seq_len,
                       (d->attn_mask ? C_MASK : 0) | (d->type_ids ? C_TYPES : 0) | (d->seq_labels ? C_LABELS : 0) |
                           (k ? C_TASK : 0) | (k && k->wrong ? C_WRONG : 0) | (k && k->corrupt ? C_CORRUPT : 0)};
    uint64_t sum = payload_sum(d);
    bool ok = fwrite(cache_magic, 1, 8, f) == 8 && fwrite(head, 4, 3, f) == 3 && fwrite(&sum, 8, 1, f) == 1 &&
              fwrite(&d->n_dropped, 8, 1, f) == 1 &&
              fwrite(d->ids, 4, n, f) == n &&
              (!d->attn_mask || fwrite(d->attn_mask, 1, n, f) == n) &&
              (!d->type_ids || fwrite(d->type_ids, 4, n, f) == n) &&
              (!d->seq_labels || fwrite(d->seq_labels, 4, rows, f) == rows);
    int32_t *r[4];
    for (int i = 0, nr = task_rows(d, r); i < nr; i++)
        ok = ok && fwrite(r[i], 4, rows, f) == rows;
    ok = ok && (!k || !k->corrupt || fwrite(k->corrupt, 4, n, f) == n);
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, cpath) != 0)
        remove(tmp);
    free(tmp);
}

enum hp_status hp_data_load_for(const char *path, const char *model_dir, const struct hp_model_info *info,
                                int seq_len, struct hp_data **out, struct hp_error *err)
{
    *out = NULL;
    bool txt = hp_path_has_ext(path, "txt"), jl = hp_path_has_ext(path, "jsonl");
    enum jsonl_kind kind = jl ? jsonl_kind(path) : JSONL_TEXT;
    if ((!txt && !jl) || kind == JSONL_IDS)
        return hp_data_load(path, seq_len, out, err);
    char *buf = NULL;
    size_t len = 0;
    enum hp_status st = hp_read_text(path, (size_t)1 << 32, HP_ERR_SHAPE, "held-out text", &buf, &len, err);
    if (st != HP_OK)
        return st;
    struct hp_tokenizer *t = NULL;
    st = hp_tokenizer_open(model_dir, &t, err);
    char *cpath = st == HP_OK ? cache_path(buf, len, txt, model_dir, t, info, seq_len) : NULL;
    bool cached = cpath != NULL;
    if (st == HP_OK && info && hp_tokenizer_n_ids(t) > info->n_vocab)
        st = hp_fail(err, HP_ERR_SHAPE,
                     "%s: the tokenizer has %d token ids but the model's embedding has %d rows (a tokenizer from "
                     "another model?)",
                     model_dir, hp_tokenizer_n_ids(t), info->n_vocab);
    if (st == HP_OK && !(cached && cache_read(cpath, path, out))) {
        const bool per_doc = info && !info->causal, types = !info || info->n_token_types > 0;
        st = txt ? (per_doc ? load_txt_rows(path, buf, len, t, seq_len, types, out, err)
                            : load_txt_packed(path, buf, len, t, seq_len, out, err))
                 : kind == JSONL_TASK ? load_task_jsonl(path, buf, len, t, seq_len, out, err)
                                      : load_text_jsonl(path, buf, len, t, info, seq_len, out, err);
        if (st == HP_OK && cached)
            cache_write(cpath, *out);
    }
    /* token types are the tokenizer's, but only a model whose embeddings read them (BERT's) takes them: for any
     * other they are not part of the data (a causal LM given them refuses the data) */
    if (st == HP_OK && info && info->n_token_types == 0) {
        free((*out)->type_ids);
        (*out)->type_ids = NULL;
    }
    hp_tokenizer_free(t);
    free(cpath);
    free(buf);
    return st;
}
