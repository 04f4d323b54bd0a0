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
 * Every row is checked as it is made (ioi: prompt and corrupt tokenize to the
 * same length and differ in the one swapped name; induction: by
 * construction), then handed to the caller as one line of JSON.
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

#include "task_gen_int.h"
#include "tokenizer_int.h"
#include "util_int.h"

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

const char *const hp_ioi_templates[HP_TASK_IOI_TEMPLATES] = {
    "When {A} and {B} went to the {P}, {S} gave a {O} to",
    "After {A} and {B} went to the {P}, {S} gave a {O} to",
    "Then, {A} and {B} went to the {P}. {S} gave a {O} to",
    "While {A} and {B} were working at the {P}, {S} gave a {O} to",
    "Then, {A} and {B} had a long argument, and afterwards {S} said to",
    "Friends {A} and {B} found a {O} at the {P}. {S} gave it to",
    "When {A} and {B} got a {O} at the {P}, {S} decided to give it to",
    "The {P} was quiet when {A} and {B} came back, and {S} handed the {O} to",
};

/* Tries at one row before ioi gives up on the tokenizer: a row fails only where a name does not stay one token
 * in context, which a tokenizer that splits words at spaces never does. */
#define IOI_TRIES 100

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

// --- ioi ------------------------------------------------------------------------------------

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

/* The words of list (NULL-terminated) that encode, after a space and without special tokens, to one token (as
 * task.c reads an answer), into *out: each word's token distinct from the words kept before it. */
static enum hp_status one_token_words(const struct hp_tokenizer *t, const char *const *list, const char *dir,
                                      struct words *out, struct hp_error *err)
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
    return HP_OK;
}

/* "A, B, C" of the first few words of list, into buf: for the message that says too few are one token. */
static void some_words(const char *const *list, char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; list[i] && i < 6 && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s\"%s\"", i ? ", " : "", list[i]);
}

/* tmpl with its slots filled (a, b, s: names; p: place; o: object) into buf; false when it does not fit. */
static bool fill(const char *tmpl, const char *a, const char *b, const char *s, const char *p, const char *o,
                 char *buf, size_t cap)
{
    size_t at = 0;
    for (const char *c = tmpl; *c; c++) {
        const char *w = NULL;
        if (c[0] == '{' && c[1] && c[2] == '}') {
            w = c[1] == 'A' ? a : c[1] == 'B' ? b : c[1] == 'S' ? s : c[1] == 'P' ? p : c[1] == 'O' ? o : NULL;
            assert(w); /* the templates are ours */
            c += 2;
        }
        size_t k = w ? strlen(w) : 1;
        if (at + k >= cap)
            return false;
        memcpy(buf + at, w ? w : c, k);
        at += k;
    }
    buf[at] = '\0';
    return true;
}

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

/* The ids of text, or the error naming the template. */
static enum hp_status encode(const struct ioi *g, int ti, const char *text, struct hp_encoding *e,
                             struct hp_error *err)
{
    enum hp_status st = hp_tokenizer_encode(g->t, text, strlen(text), NULL, 0, false, e, err);
    if (st != HP_OK) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return hp_fail(err, st, "%s: ioi template %d: %s", g->dir, ti + 1, msg);
    }
    return HP_OK;
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
    char prompt[512], corrupt[512], answer[64], wrong[64];
    bool fits = fill(tmpl, abba ? IO : S, abba ? S : IO, S, p, o, prompt, sizeof prompt) &&
                fill(tmpl, abba ? IO : S, abba ? S : IO, IO, p, o, corrupt, sizeof corrupt);
    assert(fits); /* short words in short templates */
    (void)fits;
    snprintf(answer, sizeof answer, " %s", IO);
    snprintf(wrong, sizeof wrong, " %s", S);
    struct hp_encoding a, c;
    enum hp_status st = encode(g, ti, prompt, &a, err);
    if (st != HP_OK)
        return st;
    if ((st = encode(g, ti, corrupt, &c, err)) != HP_OK) {
        hp_encoding_free(&a);
        return st;
    }
    int n_diff = 0, at = -1;
    for (int i = 0; a.n == c.n && i < a.n; i++)
        if (a.ids[i] != c.ids[i]) {
            n_diff++;
            at = i;
        }
    *made = a.n == c.n && n_diff == 1 && a.ids[at] == g->names.id[s] && c.ids[at] == g->names.id[io];
    hp_encoding_free(&a);
    hp_encoding_free(&c);
    *out = NULL;
    if (!*made)
        return HP_OK;
    cJSON *obj = cJSON_CreateObject();
    if (obj && cJSON_AddStringToObject(obj, "prompt", prompt) && cJSON_AddStringToObject(obj, "answer", answer) &&
        cJSON_AddStringToObject(obj, "wrong", wrong) && cJSON_AddStringToObject(obj, "corrupt", corrupt)) {
        *out = obj;
        return HP_OK;
    }
    cJSON_Delete(obj);
    return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory making a task row", g->dir);
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
    for (size_t i = 0; i < sizeof lists / sizeof *lists; i++) {
        enum hp_status st = one_token_words(g->t, lists[i].list, g->dir, lists[i].w, err);
        if (st != HP_OK)
            return st;
        if (lists[i].w->n < lists[i].min) {
            int n = 0;
            while (lists[i].list[n])
                n++;
            char some[160];
            some_words(lists[i].list, some, sizeof some);
            return hp_fail(err, HP_ERR_ARG, "%s: only %d of ioi's %d %s are one token (with a leading space) in this "
                           "tokenizer, and ioi needs %d (its %s: %s, ...; a tokenizer with a larger vocabulary has "
                           "them)", g->dir, lists[i].w->n, n, lists[i].what, lists[i].min, lists[i].what, some);
        }
    }
    return HP_OK;
}

static enum hp_status run_ioi(const char *dir, const struct hp_task_gen_opts *o,
                              bool (*row)(void *user, const char *line, size_t n), void *user, struct hp_error *err)
{
    if (o->templ < 0 || o->templ > HP_TASK_IOI_TEMPLATES)
        return hp_fail(err, HP_ERR_ARG, "ioi has templates 1 to %d, not %d (0: every template in turn)",
                       HP_TASK_IOI_TEMPLATES, o->templ);
    if (o->len)
        return hp_fail(err, HP_ERR_ARG, "ioi takes no length (its templates fix the prompts' lengths)");
    if (!hp_tokenizer_present(dir))
        return hp_fail(err, HP_ERR_ARG, "%s: no tokenizer (tokenizer.json, vocab.txt or vocab.json + merges.txt): "
                       "ioi makes text rows, which need the model's tokenizer", dir);
    struct hp_tokenizer *t;
    enum hp_status st = hp_tokenizer_open(dir, &t, err);
    if (st != HP_OK)
        return st;
    struct ioi g = {.t = t, .dir = dir, .x = o->seed};
    st = ioi_words(&g, o, err);
    for (int i = 0; st == HP_OK && i < o->n; i++) {
        /* templates in turn, each ABBA then BABA (only one template: ABBA and BABA in turn) */
        int ti = o->templ ? o->templ - 1 : i % HP_TASK_IOI_TEMPLATES;
        bool abba = (o->templ ? i : i / HP_TASK_IOI_TEMPLATES) % 2 == 0, made = false;
        cJSON *obj = NULL;
        for (int k = 0; st == HP_OK && !made && k < IOI_TRIES; k++)
            st = ioi_row(&g, ti, abba, &obj, &made, err);
        if (st == HP_OK && !made)
            st = hp_fail(err, HP_ERR_ARG, "%s: ioi template %d (\"%s\"): in %d draws for row %d the names never "
                         "stayed one token each in context (this tokenizer joins a name with its neighbours)", dir,
                         ti + 1, hp_ioi_templates[ti], IOI_TRIES, i + 1);
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
