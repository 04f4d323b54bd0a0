/*
 * task.c -- prompt-pair task rows (docs/tasks.md) into a struct hp_data.
 *
 * A task row is a .jsonl object with "prompt" or "prompt_ids": a prompt (and
 * optionally a corrupted prompt of the same length), the one-token answer
 * scored at the prompt's last token, and optionally a wrong answer. Rows are
 * gathered one by one (hp_task_rows_add), then laid out (hp_task_rows_finish)
 * as ids padded right to the longest row (or to seq_len when given) under an
 * attention mask, with d->task holding per row the answer, wrong answer,
 * answer position and corrupted ids. data.c gives rows of ids (no tokenizer);
 * text.c gives the tokenizer as well, for text fields. Denoise runs on the
 * rows with prompts and corrupt prompts exchanged (hp_task_swap, here).
 *
 * Invariants: every error is one line "path:line: what is wrong (hint)";
 * on failure nothing is handed out (the caller frees the gathered rows with
 * hp_task_rows_free). "wrong" and "corrupt" are on every row or on none.
 * Must not: print, exit, read files, or know about models (the vocabulary
 * check is hp_data_check_vocab's, a causal model eval.c's).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "util.h"

bool hp_task_row_is(const struct cJSON *obj)
{
    return cJSON_IsObject(obj) && (cJSON_GetObjectItemCaseSensitive(obj, "prompt") ||
                                   cJSON_GetObjectItemCaseSensitive(obj, "prompt_ids"));
}

bool hp_task_row_has_text(const struct cJSON *obj)
{
    static const char *const text[] = {"prompt", "corrupt", "answer", "wrong"};
    if (!hp_task_row_is(obj))
        return false;
    for (size_t i = 0; i < sizeof text / sizeof *text; i++)
        if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(obj, text[i])))
            return true;
    return false;
}

/* A JSON integer in [0, INT32_MAX]. */
static bool json_id(const cJSON *v, int32_t *out)
{
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 2147483647.0))
        return false;
    int32_t k = (int32_t)v->valuedouble;
    if ((double)k != v->valuedouble)
        return false;
    *out = k;
    return true;
}

/*
 * The token ids of field name (text) or name_ids (a list of ints) into *ids
 * (malloc'd) and *n; *given false when neither is there. Text needs t.
 */
static enum hp_status tokens_of(const char *path, int line, const cJSON *obj, const char *name,
                                const struct hp_tokenizer *t, bool special, int32_t **ids, int *n, bool *given,
                                struct hp_error *err)
{
    char key[32];
    snprintf(key, sizeof key, "%s_ids", name);
    const cJSON *txt = cJSON_GetObjectItemCaseSensitive(obj, name), *arr = cJSON_GetObjectItemCaseSensitive(obj, key);
    *ids = NULL;
    *n = 0;
    *given = txt || arr;
    if (!*given)
        return HP_OK;
    if (txt && arr)
        return hp_fail(err, HP_ERR_FORMAT, "%s:%d: row has both \"%s\" and \"%s\" (give the text or its ids, not both)",
                       path, line, name, key);
    if (txt) {
        if (!cJSON_IsString(txt))
            return hp_fail(err, HP_ERR_FORMAT, "%s:%d: \"%s\" is not a string (give text, or \"%s\" as a list of ids)",
                           path, line, name, key);
        if (!t)
            return hp_fail(err, HP_ERR_ARG, "%s:%d: \"%s\" is text, which needs the model's tokenizer (give \"%s\", "
                           "or load the file with the model)", path, line, name, key);
        struct hp_encoding e;
        enum hp_status st = hp_tokenizer_encode(t, txt->valuestring, strlen(txt->valuestring), NULL, 0, special, &e, err);
        if (st != HP_OK) {
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            return hp_fail(err, st, "%s:%d: \"%s\": %s", path, line, name, msg);
        }
        free(e.type_ids);
        *ids = e.ids;
        *n = e.n;
    } else {
        if (!cJSON_IsArray(arr))
            return hp_fail(err, HP_ERR_FORMAT, "%s:%d: \"%s\" is not a list of token ids (give non-negative integers)",
                           path, line, key);
        int k = cJSON_GetArraySize(arr), i = 0;
        if (k > 0 && !(*ids = malloc((size_t)k * sizeof **ids)))
            return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
        const cJSON *v;
        cJSON_ArrayForEach(v, arr) {
            if (!json_id(v, &(*ids)[i])) {
                free(*ids);
                *ids = NULL;
                return hp_fail(err, HP_ERR_FORMAT, "%s:%d: \"%s\"[%d] is not a token id (a non-negative integer)", path,
                               line, key, i);
            }
            i++;
        }
        *n = k;
    }
    if (*n == 0) {
        free(*ids);
        *ids = NULL;
        return hp_fail(err, HP_ERR_SHAPE, "%s:%d: \"%s\" is empty (a prompt needs at least one token)", path, line,
                       txt ? name : key);
    }
    return HP_OK;
}

/* One token: field name (text that must be one token, no special tokens) or name_id; *given false when absent. */
static enum hp_status token_of(const char *path, int line, const cJSON *obj, const char *name,
                               const struct hp_tokenizer *t, int32_t *id, bool *given, struct hp_error *err)
{
    char key[32];
    snprintf(key, sizeof key, "%s_id", name);
    const cJSON *txt = cJSON_GetObjectItemCaseSensitive(obj, name), *num = cJSON_GetObjectItemCaseSensitive(obj, key);
    *given = txt || num;
    if (!*given)
        return HP_OK;
    if (txt && num)
        return hp_fail(err, HP_ERR_FORMAT, "%s:%d: row has both \"%s\" and \"%s\" (give the text or its id, not both)",
                       path, line, name, key);
    if (num) {
        if (!json_id(num, id))
            return hp_fail(err, HP_ERR_FORMAT, "%s:%d: \"%s\" is not a token id (a non-negative integer)", path, line,
                           key);
        return HP_OK;
    }
    if (!cJSON_IsString(txt))
        return hp_fail(err, HP_ERR_FORMAT, "%s:%d: \"%s\" is not a string (give one token's text, or \"%s\")", path,
                       line, name, key);
    if (!t)
        return hp_fail(err, HP_ERR_ARG, "%s:%d: \"%s\" is text, which needs the model's tokenizer (give \"%s\", or "
                       "load the file with the model)", path, line, name, key);
    struct hp_encoding e;
    enum hp_status st = hp_tokenizer_encode(t, txt->valuestring, strlen(txt->valuestring), NULL, 0, false, &e, err);
    if (st != HP_OK) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return hp_fail(err, st, "%s:%d: \"%s\": %s", path, line, name, msg);
    }
    if (e.n != 1) {
        char list[160] = "";
        for (int i = 0; i < e.n && i < 8; i++) {
            size_t k = strlen(list);
            snprintf(list + k, sizeof list - k, "%s%d", i ? ", " : "", (int)e.ids[i]);
        }
        st = hp_fail(err, HP_ERR_FORMAT, "%s:%d: \"%s\" \"%s\" is %d tokens%s%s%s, not one (give text that is one "
                     "token, or \"%s\")", path, line, name, txt->valuestring, e.n, e.n ? " (ids " : "", list,
                     e.n > 8 ? ", ...)" : e.n ? ")" : "", key);
    } else {
        *id = e.ids[0];
    }
    hp_encoding_free(&e);
    return st;
}

static void row_free(struct hp_task_row *r)
{
    free(r->prompt);
    free(r->corrupt);
    r->prompt = r->corrupt = NULL;
}

/* Whether the optional field (what) is on this row as on the first one; else the error. */
static enum hp_status same_as_first(const struct hp_task_rows *r, int line, bool here, bool first, const char *what,
                                    struct hp_error *err)
{
    if (r->n == 0 || here == first)
        return HP_OK;
    return hp_fail(err, HP_ERR_FORMAT, "%s:%d: row %s %s but line %d %s (give it on every row or on none)", r->path,
                   line, here ? "has" : "has no", what, r->first_line, here ? "does not" : "does");
}

static enum hp_status parse_row(const struct hp_task_rows *r, const cJSON *obj, int line,
                                const struct hp_tokenizer *t, struct hp_task_row *row, bool *has_wrong,
                                bool *has_corrupt, struct hp_error *err)
{
    const char *path = r->path;
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(obj, "special");
    if (sp && !cJSON_IsBool(sp))
        return hp_fail(err, HP_ERR_FORMAT, "%s:%d: \"special\" is not true or false (true encodes the prompts "
                       "with the tokenizer's special tokens)", path, line);
    bool special = cJSON_IsTrue(sp), given;
    enum hp_status st = tokens_of(path, line, obj, "prompt", t, special, &row->prompt, &row->n, &given, err);
    if (st != HP_OK)
        return st;
    int nc = 0;
    if ((st = tokens_of(path, line, obj, "corrupt", t, special, &row->corrupt, &nc, has_corrupt, err)) != HP_OK)
        return st;
    if (*has_corrupt && nc != row->n)
        return hp_fail(err, HP_ERR_SHAPE, "%s:%d: the prompt is %d tokens but the corrupt prompt is %d (a prompt "
                       "pair must have the same number of tokens)", path, line, row->n, nc);
    if ((st = token_of(path, line, obj, "answer", t, &row->answer, &given, err)) != HP_OK)
        return st;
    if (!given)
        return hp_fail(err, HP_ERR_FORMAT, "%s:%d: task row has no \"answer\" (give \"answer\" as one token's text, "
                       "or \"answer_id\")", path, line);
    return token_of(path, line, obj, "wrong", t, &row->wrong, has_wrong, err);
}

enum hp_status hp_task_rows_add(struct hp_task_rows *r, const struct cJSON *obj, int line,
                                const struct hp_tokenizer *t, struct hp_error *err)
{
    if (!cJSON_IsObject(obj))
        return hp_fail(err, HP_ERR_FORMAT, "%s:%d: line is not a JSON object (a task row is {\"prompt\": ..., "
                       "\"answer\": ...})", r->path, line);
    if (!hp_task_row_is(obj))
        return hp_fail(err, HP_ERR_FORMAT, "%s:%d: row has no \"prompt\" or \"prompt_ids\" but line %d is a task row "
                       "(a file holds task rows or other rows, not both)", r->path, line, r->first_line);
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 64;
        struct hp_task_row *p = realloc(r->row, (size_t)cap * sizeof *p);
        if (!p)
            return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", r->path);
        r->row = p;
        r->cap = cap;
    }
    struct hp_task_row row = {.line = line};
    bool has_wrong = false, has_corrupt = false;
    enum hp_status st = parse_row(r, obj, line, t, &row, &has_wrong, &has_corrupt, err);
    if (st == HP_OK)
        st = same_as_first(r, line, has_wrong, r->has_wrong, "a wrong answer (\"wrong\" or \"wrong_id\")", err);
    if (st == HP_OK)
        st = same_as_first(r, line, has_corrupt, r->has_corrupt, "a corrupt prompt (\"corrupt\" or \"corrupt_ids\")",
                           err);
    if (st == HP_OK && r->seq_len > 0 && row.n > r->seq_len)
        st = hp_fail(err, HP_ERR_SHAPE, "%s:%d: the prompt is %d tokens, more than seq_len %d (shorten it, or give a "
                     "longer --seq-len)", r->path, line, row.n, r->seq_len);
    if (st != HP_OK) {
        row_free(&row);
        return st;
    }
    if (r->n == 0) {
        r->first_line = line;
        r->has_wrong = has_wrong;
        r->has_corrupt = has_corrupt;
    }
    r->row[r->n++] = row;
    return HP_OK;
}

void hp_task_rows_free(struct hp_task_rows *r)
{
    for (int i = 0; i < r->n; i++)
        row_free(&r->row[i]);
    free(r->row);
    r->row = NULL;
    r->n = r->cap = 0;
}

enum hp_status hp_task_alloc(struct hp_data *d, bool wrong, bool corrupt)
{
    size_t n = (size_t)d->n_seqs, nt = n * (size_t)d->seq_len;
    struct hp_task *k = d->task = calloc(1, sizeof *k);
    if (!k)
        return HP_ERR_NOMEM;
    k->answer = malloc(n * sizeof *k->answer);
    k->pos = malloc(n * sizeof *k->pos);
    k->line = malloc(n * sizeof *k->line);
    if (wrong)
        k->wrong = malloc(n * sizeof *k->wrong);
    if (corrupt)
        k->corrupt = malloc(nt * sizeof *k->corrupt);
    return k->answer && k->pos && k->line && (!wrong || k->wrong) && (!corrupt || k->corrupt) ? HP_OK : HP_ERR_NOMEM;
}

void hp_task_free(struct hp_task *k)
{
    if (!k)
        return;
    free(k->answer);
    free(k->wrong);
    free(k->pos);
    free(k->corrupt);
    free(k->line);
    free(k);
}

void hp_task_swap(struct hp_data *d)
{
    int32_t *ids = d->ids;
    d->ids = d->task->corrupt;
    d->task->corrupt = ids;
    d->task->swapped = !d->task->swapped;
}

int hp_task_rows_len(const struct hp_task_rows *r)
{
    int T = r->seq_len; /* when given; else the longest prompt */
    if (T <= 0)
        for (int i = 0; i < r->n; i++)
            T = r->row[i].n > T ? r->row[i].n : T;
    return T;
}

enum hp_status hp_task_rows_fill(const struct hp_task_rows *r, int32_t pad, struct hp_data *d, struct hp_error *err)
{
    const int T = d->seq_len;
    if (hp_task_alloc(d, r->has_wrong, r->has_corrupt) != HP_OK)
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory for %d task rows", r->path, r->n);
    struct hp_task *k = d->task;
    for (int s = 0; s < r->n; s++) {
        const struct hp_task_row *w = &r->row[s];
        for (int t = 0; t < T; t++) {
            size_t at = (size_t)s * T + t;
            bool real = t < w->n;
            d->ids[at] = real ? w->prompt[t] : pad;
            d->attn_mask[at] = real;
            if (k->corrupt)
                k->corrupt[at] = real ? w->corrupt[t] : pad;
        }
        k->answer[s] = w->answer;
        if (k->wrong)
            k->wrong[s] = w->wrong;
        k->pos[s] = w->n - 1;
        k->line[s] = w->line;
    }
    return HP_OK;
}
