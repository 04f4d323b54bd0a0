/*
 * task_gen.c -- task rows made for a model (docs/tasks.md, "Generators"), so
 * a user can start without writing data: `headprune task NAME`.
 *
 * A table of generators (hp_task_gens, one row per enum hp_task_gen):
 *   ioi        indirect-object identification (Wang et al. 2022): templates
 *              filled with names, places and objects that are one token
 *              (with their leading space) in the model's tokenizer; corrupt =
 *              the second mention of the subject replaced by the indirect
 *              object, so the answer flips and the lengths match. Text rows.
 *   induction  K random ids, then the first K - 1 again: the answer is the
 *              K-th (the token after the last token's earlier occurrence);
 *              corrupt = the first half resampled from other ids. Id rows.
 *   docstring  the next parameter of a Python docstring (Heimersheim and
 *              Janiak): def F(self, A1, A2, A3, A4) documenting A1 and A2,
 *              ending at the third ":param"; corrupt = the def's parameters
 *              replaced by other words. Text rows, one-token words.
 * Every row is checked as it is made (text rows: prompt and corrupt tokenize
 * to the same length and differ in exactly the swapped words' tokens;
 * induction: by construction), then handed to the caller as one line of JSON.
 *
 * Invariants: the rows depend only on the generator, the options (seed
 * included) and the model directory's files: one splitmix64 stream from the
 * seed, drawn in a fixed order, uniform by rejection (no modulo bias).
 * Must not: print, exit, write files, or know about evaluation (the rows are
 * read back by task.c like any other task file).
 */
#include <assert.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "task_gen.h"
#include "tokenizer.h"
#include "util.h"

// --- the words and templates of ioi ----------------------------------------------------

const char *const hp_ioi_names[] = {
    "Mary",  "John",   "Tom",    "James",  "Anna",   "Paul",   "Mark",   "David",  "Sarah", "Peter", "Lisa",
    "Kate",  "Michael", "Robert", "Laura", "Emma",   "Jack",   "Daniel", "Alice",  "George", "Susan", "Steve",
    "Linda", "Richard", "Thomas", "Helen", "Frank",  "Mike",   "Chris",  "Ben",    "Adam",   "Sam",   "Max",
    "Joe",   "Tim",    "Bob",    "Jane",   "Amy",    "Anne",   "Bill",   "Dan",    "Eric",   "Fred",  "Greg",
    "Henry", "Ian",    "Jim",    "Karen",  "Kevin",  "Luke",   "Matt",   "Nick",   "Rose",   "Ryan",  "Tony",
    "Will",  "Alex",   "Kelly",  "Jason",  "Nancy",  NULL,
};
const char *const hp_ioi_places[] = {
    "store",  "park",   "school", "office",  "garden", "house",   "station", "restaurant",
    "hospital", "library", "market", "beach", "church", "kitchen", "river",   "museum", NULL,
};
/* Each begins with a consonant's sound: the templates say "a {O}". */
const char *const hp_ioi_objects[] = {
    "drink", "book",  "ball", "pencil", "flower", "ring", "bone",  "snack",
    "gift",  "cake",  "letter", "key",  "hat",    "bag",  "cup",   "phone", NULL,
};

const char *const hp_ioi_templates[] = {
    "When {A} and {B} went to the {P}, {S} gave a {O} to",
    "After {A} and {B} went to the {P}, {S} gave a {O} to",
    "Then, {A} and {B} went to the {P}. {S} gave a {O} to",
    "While {A} and {B} were working at the {P}, {S} gave a {O} to",
    "Then, {A} and {B} had a long argument, and afterwards {S} said to",
    "Friends {A} and {B} found a {O} at the {P}. {S} gave it to",
    "When {A} and {B} got a {O} at the {P}, {S} decided to give it to",
    "The {P} was quiet when {A} and {B} came back, and {S} handed the {O} to",
};
static_assert(sizeof hp_ioi_templates / sizeof hp_ioi_templates[0] == HP_TASK_IOI_TEMPLATES,
              "HP_TASK_IOI_TEMPLATES templates");

/* Tries at one text row before a generator gives up on the tokenizer: a row fails only where a word does not stay
 * one token in context, which a tokenizer that splits words at spaces never does. */
#define TEXT_TRIES 100

// --- rows out -----------------------------------------------------------------------------

/* obj as one line to the caller (obj freed); HP_ERR_IO "stopped" when the caller says stop. */
static enum hp_status emit(cJSON *obj, bool (*row)(void *user, const char *line, size_t n), void *user,
                           const char *dir, struct hp_error *err)
{
    char *s = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    if (!s)
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory making a task row", dir);
    bool go_on = row(user, s, strlen(s));
    free(s);
    return go_on ? HP_OK : hp_fail(err, HP_ERR_IO, "%s: stopped (the rows' reader said so)", dir);
}

// --- text rows: one-token words, templates filled, each row checked (ioi, docstring) -----------

/* The words of a list that are one token with a leading space, and those tokens. */
struct words {
    const char **w; /* (n) */
    int32_t *id;    /* (n) */
    int n;
};

static void words_free(struct words *w)
{
    free(w->w);
    free(w->id);
}

/* "A, B, C" of the first few words of list, into buf: for the message that says too few are one token. */
static void some_words(const char *const *list, char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; list[i] && i < 6 && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s\"%s\"", i ? ", " : "", list[i]);
}

/*
 * The words of list (NULL-terminated) that encode, after a space and without special tokens, to one token (as
 * task.c reads an answer), into *out: each word's token distinct from the words kept before it. Fewer than min
 * is an error naming the generator gen and the list (what: "names").
 */
static enum hp_status one_token_words(const struct hp_tokenizer *t, const char *const *list, const char *dir,
                                      const char *gen, const char *what, int min, struct words *out,
                                      struct hp_error *err)
{
    int n = 0;
    while (list[n])
        n++;
    *out = (struct words){malloc((size_t)n * sizeof *out->w), malloc((size_t)n * sizeof *out->id), 0};
    if (!out->w || !out->id)
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", dir);
    for (int i = 0; i < n; i++) {
        char text[64];
        snprintf(text, sizeof text, " %s", list[i]);
        struct hp_encoding e;
        enum hp_status st = hp_tokenizer_encode(t, text, strlen(text), NULL, 0, false, &e, err);
        if (st != HP_OK)
            return st;
        bool keep = e.n == 1;
        for (int k = 0; keep && k < out->n; k++)
            keep = out->id[k] != e.ids[0];
        if (keep) {
            out->w[out->n] = list[i];
            out->id[out->n++] = e.ids[0];
        }
        hp_encoding_free(&e);
    }
    if (out->n >= min)
        return HP_OK;
    char some[160];
    some_words(list, some, sizeof some);
    return hp_fail(err, HP_ERR_ARG, "%s: only %d of %s's %d %s are one token (with a leading space) in this "
                   "tokenizer, and %s needs %d (its %s: %s, ...; a tokenizer with a larger vocabulary has them)", dir,
                   out->n, gen, n, what, gen, min, what, some);
}

/* The tokenizer of dir for a text generator gen: a directory without one is an error saying why it is needed. */
static enum hp_status text_tokenizer(const char *dir, const char *gen, struct hp_tokenizer **t, struct hp_error *err)
{
    *t = NULL;
    if (!hp_tokenizer_present(dir))
        return hp_fail(err, HP_ERR_ARG, "%s: no tokenizer (tokenizer.json, vocab.txt or vocab.json + merges.txt): "
                       "%s makes text rows, which need the model's tokenizer", dir, gen);
    return hp_tokenizer_open(dir, t, err);
}

/* tmpl with each slot "{NAME}" replaced by word[k] where slot[k] is NAME (slot, word: n each), into buf; false
 * when it does not fit. */
static bool fill(const char *tmpl, const char *const *slot, const char *const *word, int n, char *buf, size_t cap)
{
    size_t at = 0;
    for (const char *c = tmpl; *c; c++) {
        const char *w = NULL;
        size_t len = c[0] == '{' ? strcspn(c + 1, "}") : 0;
        for (int k = 0; len && k < n && !w; k++)
            if (strlen(slot[k]) == len && memcmp(slot[k], c + 1, len) == 0)
                w = word[k];
        assert(!len || w); /* the templates are ours */
        size_t k = w ? strlen(w) : 1;
        if (at + k >= cap)
            return false;
        memcpy(buf + at, w ? w : c, k);
        at += k;
        c += w ? len + 1 : 0;
    }
    buf[at] = '\0';
    return true;
}

/* The ids of text, or the error naming the generator. */
static enum hp_status encode(const struct hp_tokenizer *t, const char *dir, const char *what, const char *text,
                             struct hp_encoding *e, struct hp_error *err)
{
    enum hp_status st = hp_tokenizer_encode(t, text, strlen(text), NULL, 0, false, e, err);
    if (st != HP_OK) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return hp_fail(err, st, "%s: %s: %s", dir, what, msg);
    }
    return HP_OK;
}

/*
 * Whether prompt and corrupt tokenize to the same length and differ in exactly n positions, in order holding
 * from[0..n) in the prompt and to[0..n) in the corrupt: the check every text row passes (words that stay one
 * token each in context).
 */
static enum hp_status same_but(const struct hp_tokenizer *t, const char *dir, const char *what, const char *prompt,
                               const char *corrupt, const int32_t *from, const int32_t *to, int n, bool *ok,
                               struct hp_error *err)
{
    struct hp_encoding a, c;
    enum hp_status st = encode(t, dir, what, prompt, &a, err);
    if (st != HP_OK)
        return st;
    if ((st = encode(t, dir, what, corrupt, &c, err)) != HP_OK) {
        hp_encoding_free(&a);
        return st;
    }
    int k = 0;
    *ok = a.n == c.n;
    for (int i = 0; *ok && i < a.n; i++)
        if (a.ids[i] != c.ids[i]) {
            *ok = k < n && a.ids[i] == from[k] && c.ids[i] == to[k];
            k++;
        }
    *ok = *ok && k == n;
    hp_encoding_free(&a);
    hp_encoding_free(&c);
    return HP_OK;
}

/* A text row {"prompt", "answer", "wrong", "corrupt"}: NULL when out of memory. */
static cJSON *text_row(const char *prompt, const char *answer, const char *wrong, const char *corrupt)
{
    cJSON *obj = cJSON_CreateObject();
    if (obj && cJSON_AddStringToObject(obj, "prompt", prompt) && cJSON_AddStringToObject(obj, "answer", answer) &&
        cJSON_AddStringToObject(obj, "wrong", wrong) && cJSON_AddStringToObject(obj, "corrupt", corrupt))
        return obj;
    cJSON_Delete(obj);
    return NULL;
}

// --- ioi ------------------------------------------------------------------------------------

struct ioi {
    const struct hp_tokenizer *t;
    const char *dir;
    struct words names, places, objects;
    uint64_t x; /* the stream */
};

/* A word's index drawn from w, other than skip (-1: none). */
static int draw(struct ioi *g, const struct words *w, int skip)
{
    int k = (int)hp_splitmix64_below(&g->x, (uint64_t)(skip >= 0 ? w->n - 1 : w->n));
    return skip >= 0 && k >= skip ? k + 1 : k;
}

/*
 * One row of template ti, ABBA (the indirect object first) or BABA: *made false when this draw does not keep
 * the names one token each in context (prompt and corrupt must differ in exactly the swapped token).
 */
static enum hp_status ioi_row(struct ioi *g, int ti, bool abba, cJSON **out, bool *made, struct hp_error *err)
{
    int io = draw(g, &g->names, -1), s = draw(g, &g->names, io);
    const char *p = g->places.n ? g->places.w[draw(g, &g->places, -1)] : NULL;
    const char *o = g->objects.n ? g->objects.w[draw(g, &g->objects, -1)] : NULL;
    const char *IO = g->names.w[io], *S = g->names.w[s], *tmpl = hp_ioi_templates[ti];
    static const char *const slot[] = {"A", "B", "S", "P", "O"};
    const char *clean[] = {abba ? IO : S, abba ? S : IO, S, p, o}, *swapped[] = {clean[0], clean[1], IO, p, o};
    char prompt[512], corrupt[512], answer[64], wrong[64], what[64];
    bool fits = fill(tmpl, slot, clean, 5, prompt, sizeof prompt) && fill(tmpl, slot, swapped, 5, corrupt, sizeof corrupt);
    assert(fits); /* short words in short templates */
    (void)fits;
    snprintf(answer, sizeof answer, " %s", IO);
    snprintf(wrong, sizeof wrong, " %s", S);
    snprintf(what, sizeof what, "ioi template %d", ti + 1);
    *out = NULL;
    enum hp_status st = same_but(g->t, g->dir, what, prompt, corrupt, &g->names.id[s], &g->names.id[io], 1, made, err);
    if (st != HP_OK || !*made)
        return st;
    if (!(*out = text_row(prompt, answer, wrong, corrupt)))
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory making a task row", g->dir);
    return HP_OK;
}

/* The one-token words ioi needs, or the error saying which list has too few. */
static enum hp_status ioi_words(struct ioi *g, const struct hp_task_gen_opts *o, struct hp_error *err)
{
    bool need_p = false, need_o = false;
    for (int ti = 0; ti < HP_TASK_IOI_TEMPLATES; ti++)
        if (!o->templ || o->templ == ti + 1) {
            need_p |= strstr(hp_ioi_templates[ti], "{P}") != NULL;
            need_o |= strstr(hp_ioi_templates[ti], "{O}") != NULL;
        }
    const struct {
        const char *const *list;
        struct words *w;
        int min;
        const char *what;
    } lists[] = {
        {hp_ioi_names, &g->names, HP_TASK_IOI_MIN_NAMES, "names"},
        {hp_ioi_places, &g->places, need_p, "places"},
        {hp_ioi_objects, &g->objects, need_o, "objects"},
    };
    enum hp_status st = HP_OK;
    for (size_t i = 0; st == HP_OK && i < sizeof lists / sizeof *lists; i++)
        st = one_token_words(g->t, lists[i].list, g->dir, "ioi", lists[i].what, lists[i].min, lists[i].w, err);
    return st;
}

static enum hp_status run_ioi(const char *dir, const struct hp_task_gen_opts *o,
                              bool (*row)(void *user, const char *line, size_t n), void *user, struct hp_error *err)
{
    if (o->templ < 0 || o->templ > HP_TASK_IOI_TEMPLATES)
        return hp_fail(err, HP_ERR_ARG, "ioi has templates 1 to %d, not %d (0: every template in turn)",
                       HP_TASK_IOI_TEMPLATES, o->templ);
    if (o->len)
        return hp_fail(err, HP_ERR_ARG, "ioi takes no length (its templates fix the prompts' lengths)");
    struct hp_tokenizer *t;
    enum hp_status st = text_tokenizer(dir, "ioi", &t, err);
    if (st != HP_OK)
        return st;
    struct ioi g = {.t = t, .dir = dir, .x = o->seed};
    st = ioi_words(&g, o, err);
    for (int i = 0; st == HP_OK && i < o->n; i++) {
        /* templates in turn, each ABBA then BABA (only one template: ABBA and BABA in turn) */
        int ti = o->templ ? o->templ - 1 : i % HP_TASK_IOI_TEMPLATES;
        bool abba = (o->templ ? i : i / HP_TASK_IOI_TEMPLATES) % 2 == 0, made = false;
        cJSON *obj = NULL;
        for (int k = 0; st == HP_OK && !made && k < TEXT_TRIES; k++)
            st = ioi_row(&g, ti, abba, &obj, &made, err);
        if (st == HP_OK && !made)
            st = hp_fail(err, HP_ERR_ARG, "%s: ioi template %d (\"%s\"): in %d draws for row %d the names never "
                         "stayed one token each in context (this tokenizer joins a name with its neighbours)", dir,
                         ti + 1, hp_ioi_templates[ti], TEXT_TRIES, i + 1);
        if (st == HP_OK)
            st = emit(obj, row, user, dir, err);
    }
    words_free(&g.names);
    words_free(&g.places);
    words_free(&g.objects);
    hp_tokenizer_free(t);
    return st;
}

// --- induction -------------------------------------------------------------------------------

/*
 * The ids induction draws from, into *cand (*n of them): [0, n_vocab), and with a tokenizer only those it has a
 * token for (below its n_ids) that are not special.
 */
static enum hp_status induction_ids(const char *dir, int n_vocab, int32_t **cand, int *n, struct hp_error *err)
{
    struct hp_tokenizer *t = NULL;
    if (hp_tokenizer_present(dir)) {
        enum hp_status st = hp_tokenizer_open(dir, &t, err);
        if (st != HP_OK)
            return st;
    }
    *n = 0;
    if (!(*cand = malloc((size_t)n_vocab * sizeof **cand))) {
        hp_tokenizer_free(t);
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", dir);
    }
    for (int32_t v = 0; v < n_vocab; v++)
        if (!t || (v < hp_tokenizer_n_ids(t) && hp_tokenizer_piece(t, v, NULL) && !hp_tokenizer_special(t, v)))
            (*cand)[(*n)++] = v;
    hp_tokenizer_free(t);
    return HP_OK;
}

/* K: as given, or the default cut to what the model holds (2K - 1 positions, 2K distinct ids). */
static enum hp_status induction_len(const char *dir, const struct hp_model_info *in, int n_cand, int given, int *K,
                                    struct hp_error *err)
{
    int room = (in->n_ctx + 1) / 2 < n_cand / 2 ? (in->n_ctx + 1) / 2 : n_cand / 2;
    if (given == 0)
        *K = HP_TASK_INDUCTION_LEN < room ? HP_TASK_INDUCTION_LEN : room;
    else
        *K = given;
    if (given && given < 2)
        return hp_fail(err, HP_ERR_ARG, "induction needs --len 2 or more, not %d", given);
    if (*K < 2)
        return hp_fail(err, HP_ERR_ARG, "%s: the model leaves no room for induction rows (%d positions and %d "
                       "usable ids; 2 x 2 tokens at the least)", dir, in->n_ctx, n_cand);
    if (2 * *K - 1 > in->n_ctx)
        return hp_fail(err, HP_ERR_ARG, "%s: --len %d makes prompts of %d tokens, more than the model's %d positions "
                       "(--len %d at the most)", dir, *K, 2 * *K - 1, in->n_ctx, (in->n_ctx + 1) / 2);
    if (2 * *K > n_cand)
        return hp_fail(err, HP_ERR_ARG, "%s: --len %d needs %d distinct ids (a half and its resampled corrupt), "
                       "more than the %d usable ones (--len %d at the most)", dir, *K, 2 * *K, n_cand, n_cand / 2);
    return HP_OK;
}

/* One row: 2K distinct ids drawn by a partial Fisher-Yates shuffle of cand (left shuffled), as JSON. */
static cJSON *induction_row(int32_t *cand, int n_cand, int K, uint64_t *x, int *scratch)
{
    for (int k = 0; k < 2 * K; k++) {
        int j = k + (int)hp_splitmix64_below(x, (uint64_t)(n_cand - k));
        int32_t v = cand[k];
        cand[k] = cand[j];
        cand[j] = v;
    }
    const int32_t *clean = cand, *other = cand + K;
    for (int i = 0; i < 2 * K - 1; i++)
        scratch[i] = clean[i % K];
    cJSON *obj = cJSON_CreateObject(), *p = cJSON_CreateIntArray(scratch, 2 * K - 1);
    for (int i = 0; i < K; i++)
        scratch[i] = other[i];
    cJSON *c = cJSON_CreateIntArray(scratch, 2 * K - 1);
    if (!obj || !p || !c || !cJSON_AddItemToObject(obj, "prompt_ids", p)) {
        cJSON_Delete(obj);
        cJSON_Delete(p);
        cJSON_Delete(c);
        return NULL;
    }
    if (!cJSON_AddNumberToObject(obj, "answer_id", clean[K - 1]) ||
        !cJSON_AddNumberToObject(obj, "wrong_id", other[K - 1]) || !cJSON_AddItemToObject(obj, "corrupt_ids", c)) {
        cJSON_Delete(obj);
        return NULL;
    }
    return obj;
}

static enum hp_status run_induction(const char *dir, const struct hp_task_gen_opts *o,
                                    bool (*row)(void *user, const char *line, size_t n), void *user,
                                    struct hp_error *err)
{
    if (o->templ)
        return hp_fail(err, HP_ERR_ARG, "induction has no templates (--template is ioi's)");
    if (o->len < 0)
        return hp_fail(err, HP_ERR_ARG, "induction needs --len 2 or more, not %d", o->len);
    struct hp_model *m;
    enum hp_status st = hp_model_open(dir, &m, err);
    if (st != HP_OK)
        return st;
    const struct hp_model_info in = *hp_model_get_info(m);
    hp_model_close(m);
    if (!in.causal)
        return hp_fail(err, HP_ERR_ARG, "%s: is an encoder (%s): task rows are scored on causal LMs only", dir,
                       in.model_type);
    int32_t *cand = NULL;
    int n_cand = 0, K = 0;
    if ((st = induction_ids(dir, in.n_vocab, &cand, &n_cand, err)) == HP_OK)
        st = induction_len(dir, &in, n_cand, o->len, &K, err);
    int *scratch = st == HP_OK ? malloc((size_t)(2 * K) * sizeof *scratch) : NULL;
    if (st == HP_OK && !scratch)
        st = hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", dir);
    uint64_t x = o->seed;
    for (int i = 0; st == HP_OK && i < o->n; i++) {
        cJSON *obj = induction_row(cand, n_cand, K, &x, scratch);
        st = obj ? emit(obj, row, user, dir, err) : hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", dir);
    }
    free(scratch);
    free(cand);
    return st;
}

// --- docstring -------------------------------------------------------------------------------

const char hp_docstring_template[] = "def {F}(self, {A1}, {A2}, {A3}, {A4}):\n"
                                     "    \"\"\"{D1} {D2} {D3}\n"
                                     "\n"
                                     "    :param {P1}: {D4} {D5}\n"
                                     "    :param {P2}: {D6} {D7}\n"
                                     "    :param";
const char *const hp_docstring_words[] = {
    "load",  "size",  "files", "last",  "name",  "data",  "path",  "mode",  "user",  "key",   "value",
    "count", "line",  "text",  "item",  "node",  "page",  "state", "type",  "index", "table", "field",
    "event", "order", "group", "level", "model", "image", "color", "error", "range", "score", "shape",
    "sound", "speed", "start", "stop",  "time",  "token", "total", "unit",  "view",  "word",  "width",
    "height", "depth", "label", "limit", "file",  "list",  "port",  "host",  "code",  "rate",  "step",
    NULL,
};

/*
 * One docstring row: the function's name and its parameters A1..A4 and the corrupt's C1..C4 (9 distinct words
 * by a partial Fisher-Yates shuffle of perm), the descriptions' 7 words from the other words (repeats allowed).
 */
static enum hp_status docstring_row(const struct hp_tokenizer *t, const char *dir, const struct words *w, int *perm,
                                    uint64_t *x, cJSON **out, bool *made, struct hp_error *err)
{
    for (int k = 0; k < 9; k++) {
        int j = k + (int)hp_splitmix64_below(x, (uint64_t)(w->n - k)), v = perm[k];
        perm[k] = perm[j];
        perm[j] = v;
    }
    static const char *const slot[] = {"F", "A1", "A2", "A3", "A4", "P1", "P2",
                                       "D1", "D2", "D3", "D4", "D5", "D6", "D7"};
    const char *clean[14], *other[14];
    int32_t from[4], to[4];
    for (int k = 0; k < 5; k++)
        clean[k] = other[k] = w->w[perm[k]];
    for (int k = 0; k < 4; k++) {
        other[1 + k] = w->w[perm[5 + k]];
        from[k] = w->id[perm[1 + k]];
        to[k] = w->id[perm[5 + k]];
    }
    clean[5] = other[5] = clean[1]; /* the docstring documents the clean def's first two, in both */
    clean[6] = other[6] = clean[2];
    for (int k = 7; k < 14; k++)
        clean[k] = other[k] = w->w[perm[9 + (int)hp_splitmix64_below(x, (uint64_t)(w->n - 9))]];
    char prompt[1024], corrupt[1024], answer[64], wrong[64];
    bool fits = fill(hp_docstring_template, slot, clean, 14, prompt, sizeof prompt) &&
                fill(hp_docstring_template, slot, other, 14, corrupt, sizeof corrupt);
    assert(fits); /* short words in a short template */
    (void)fits;
    snprintf(answer, sizeof answer, " %s", clean[3]);
    snprintf(wrong, sizeof wrong, " %s", clean[4]);
    *out = NULL;
    enum hp_status st = same_but(t, dir, "docstring", prompt, corrupt, from, to, 4, made, err);
    if (st != HP_OK || !*made)
        return st;
    if (!(*out = text_row(prompt, answer, wrong, corrupt)))
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory making a task row", dir);
    return HP_OK;
}

static enum hp_status run_docstring(const char *dir, const struct hp_task_gen_opts *o,
                                    bool (*row)(void *user, const char *line, size_t n), void *user,
                                    struct hp_error *err)
{
    if (o->templ || o->len)
        return hp_fail(err, HP_ERR_ARG, "docstring has one template and no length (--template is ioi's, --len "
                       "induction's)");
    struct hp_tokenizer *t;
    enum hp_status st = text_tokenizer(dir, "docstring", &t, err);
    if (st != HP_OK)
        return st;
    struct words w = {0};
    int *perm = NULL;
    st = one_token_words(t, hp_docstring_words, dir, "docstring", "words", HP_TASK_DOCSTRING_MIN_WORDS, &w, err);
    if (st == HP_OK && !(perm = malloc((size_t)w.n * sizeof *perm)))
        st = hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", dir);
    for (int k = 0; st == HP_OK && k < w.n; k++)
        perm[k] = k;
    uint64_t x = o->seed;
    for (int i = 0; st == HP_OK && i < o->n; i++) {
        bool made = false;
        cJSON *obj = NULL;
        for (int k = 0; st == HP_OK && !made && k < TEXT_TRIES; k++)
            st = docstring_row(t, dir, &w, perm, &x, &obj, &made, err);
        if (st == HP_OK && !made)
            st = hp_fail(err, HP_ERR_ARG, "%s: docstring: in %d draws for row %d the parameters never stayed one "
                         "token each in context (this tokenizer joins a word with its neighbours)", dir, TEXT_TRIES,
                         i + 1);
        if (st == HP_OK)
            st = emit(obj, row, user, dir, err);
    }
    free(perm);
    words_free(&w);
    hp_tokenizer_free(t);
    return st;
}

// --- the table and the entry -------------------------------------------------------------------

const struct hp_task_gen_row hp_task_gens[] = {
    [HP_TASK_GEN_IOI] = {
        "ioi", "IOI prompt pairs (indirect-object identification, Wang et al. 2022)",
        "Indirect-object identification (Wang et al. 2022): prompts such as\n"
        "  \"When Mary and John went to the store, John gave a drink to\"\n"
        "with the answer \" Mary\" and the wrong answer \" John\", from 8 templates,\n"
        "with names, places and objects drawn from built-in lists and kept only where\n"
        "they are one token (with their leading space) in the model's tokenizer. The\n"
        "corrupt prompt has the second mention of the subject replaced by the indirect\n"
        "object (\"..., Mary gave a drink to\"), so the answer flips and the lengths\n"
        "match. Rows go through the templates in turn, each with the indirect object\n"
        "first (ABBA), then second (BABA). Every row is checked: prompt and corrupt\n"
        "tokenize to the same length and differ in the one swapped name. Text rows\n"
        "({\"prompt\", \"answer\", \"wrong\", \"corrupt\"}): they need the model's\n"
        "tokenizer. docs/tasks.md lists the templates.",
        false, true, run_ioi,
    },
    [HP_TASK_GEN_INDUCTION] = {
        "induction", "random tokens repeated: induction, rows of ids",
        "Induction: K random distinct ids, then the first K - 1 of them again; the\n"
        "answer is the K-th (the token after the last token's earlier occurrence).\n"
        "The corrupt prompt has the first half resampled from K other ids, so nothing\n"
        "in it predicts the answer; the wrong answer is the corrupt prompt's K-th id\n"
        "(what it puts where the clean prompt had the answer). Rows of ids\n"
        "({\"prompt_ids\", \"answer_id\", \"wrong_id\", \"corrupt_ids\"}): it reads only\n"
        "config.json's vocabulary and positions, so it works on models without a\n"
        "tokenizer; with one, the ids it has no token for and its special tokens are\n"
        "left out.",
        true, false, run_induction,
    },
    [HP_TASK_GEN_DOCSTRING] = {
        "docstring", "the next parameter in a Python docstring (Heimersheim & Janiak)",
        "Docstring (Heimersheim and Janiak 2023): a Python function with four parameters\n"
        "after self, and a docstring that documents the first two; the prompt ends at\n"
        "the third \":param\", so the answer is the third parameter's name and the wrong\n"
        "answer the fourth's (named by the def too, but not next). The corrupt prompt\n"
        "has the def's four parameters replaced by four other words (the docstring\n"
        "kept), so nothing in it says which name comes next. Words come from a\n"
        "built-in list, kept only where they are one token (with their leading space)\n"
        "in the model's tokenizer; every row is checked: prompt and corrupt tokenize\n"
        "to the same length and differ in the four parameters only. Text rows; they\n"
        "need the model's tokenizer. docs/tasks.md shows the template.",
        false, false, run_docstring,
    },
};
static_assert(sizeof hp_task_gens / sizeof hp_task_gens[0] == HP_TASK_GEN_COUNT, "a generator without its row");

const struct hp_task_gen_row *hp_task_gen_named(const char *name)
{
    for (int i = 0; i < HP_TASK_GEN_COUNT; i++)
        if (strcmp(name, hp_task_gens[i].name) == 0)
            return &hp_task_gens[i];
    return NULL;
}

enum hp_status hp_task_generate(enum hp_task_gen g, const char *model_dir, const struct hp_task_gen_opts *o,
                                bool (*row)(void *user, const char *line, size_t n), void *user,
                                struct hp_error *err)
{
    if ((int)g < 0 || g >= HP_TASK_GEN_COUNT)
        return hp_fail(err, HP_ERR_ARG, "no task generator %d", (int)g);
    if (o->n < 1 || o->n > HP_TASK_GEN_MAX_ROWS)
        return hp_fail(err, HP_ERR_ARG, "%s: %d rows asked for; a generator makes 1 to %d", hp_task_gens[g].name,
                       o->n, HP_TASK_GEN_MAX_ROWS);
    return hp_task_gens[g].run(model_dir, o, row, user, err);
}
