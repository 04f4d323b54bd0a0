/*
 * test_task_gen.c -- the task generators (engine/text/task_gen.c, `headprune task`).
 *
 * ioi on a real tokenizer (tests/fixtures/tokenizers/minilm, the 30,522-token
 * WordPiece vocabulary of all-MiniLM-L6-v2, where every built-in name is one
 * token): the rows load with hp_data_load_for as task data; each prompt is its
 * template filled with words of the lists (the indirect object and the
 * subject, in the order the row's place in the turn says), its corrupt the
 * same with the second mention swapped; the token ids differ at that one
 * position, answer and wrong are the two names' tokens; the decoded ids are
 * the text. Same seed, same bytes; another seed, other rows. A tokenizer with
 * too few one-token names (gpt2-bpe's 1,500-token fixture) is refused.
 *
 * induction on models/default (a trained GPT-2 with an induction head, 3.1;
 * its README): the rows' structure, and the behaviour itself: the answer's
 * log-probability is far higher on the clean prompts than on the corrupt ones
 * (measured: 3.55 against 9.50 nats of loss at K = 16; logit_diff 6.15 against
 * 0.10). With a tokenizer
 * the special ids are never drawn. The command line: help, and every bad input
 * one line with its exit status.
 */
#define _DEFAULT_SOURCE
#include <ctype.h>
#include <math.h>

#include "task_gen.h"
#include "testutil.h"

#define MINILM "tokenizers/minilm"

struct text {
    char *s;
    size_t n, cap;
    int lines;
};

static bool add_line(void *user, const char *line, size_t n)
{
    struct text *t = user;
    while (t->n + n + 2 > t->cap)
        t->s = realloc(t->s, t->cap = t->cap ? 2 * t->cap : 4096);
    memcpy(t->s + t->n, line, n);
    t->n += n;
    t->s[t->n++] = '\n';
    t->s[t->n] = 0;
    t->lines++;
    return true;
}

static char *fixture(const char *name)
{
    static char buf[4][1024];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 1024, "%s/%s", getenv("HP_FIXTURES"), name);
    return p;
}

static struct text generate(enum hp_task_gen g, const char *dir, struct hp_task_gen_opts o)
{
    struct text t = {0};
    struct hp_error err = {0};
    cr_assert_eq(hp_task_generate(g, dir, &o, add_line, &t, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(t.lines, o.n);
    return t;
}

/* A scratch folder of the build's, made fresh. */
static const char *scratch(const char *name)
{
    static char p[512];
    snprintf(p, sizeof p, "%s/../task_gen_%s", getenv("HP_CACHE_DIR"), name);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", p, p);
    cr_assert_eq(system(cmd), 0);
    return p;
}

// --- ioi --------------------------------------------------------------------------------------

/* Whether w is a word of list. */
static bool in_list(const char *const *list, const char *w, size_t n)
{
    for (int i = 0; list[i]; i++)
        if (strlen(list[i]) == n && memcmp(list[i], w, n) == 0)
            return true;
    return false;
}

/* Match text to tmpl, the slots' words from their lists, into slot[A,B,S,P,O] (each a word, NUL-terminated). */
static bool match(const char *tmpl, const char *text, char slot[5][32])
{
    const char *c = text;
    for (const char *t = tmpl; *t; t++) {
        if (t[0] == '{') {
            const char *kinds = "ABSPO";
            int k = (int)(strchr(kinds, t[1]) - kinds);
            size_t n = 0;
            while (isalpha((unsigned char)c[n]))
                n++;
            const char *const *list = k < 3 ? hp_ioi_names : k == 3 ? hp_ioi_places : hp_ioi_objects;
            if (n == 0 || n >= 32 || !in_list(list, c, n))
                return false;
            memcpy(slot[k], c, n);
            slot[k][n] = 0;
            c += n;
            t += 2;
        } else if (*c++ != *t) {
            return false;
        }
    }
    return *c == 0;
}

/* The value of "key" in a JSON line of ours (a string without escapes), into buf. */
static void field(const char *line, const char *key, char *buf, size_t n)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *p = strstr(line, pat);
    cr_assert(p, "no %s in %s", key, line);
    p += strlen(pat);
    size_t k = strcspn(p, "\"");
    cr_assert(k < n);
    memcpy(buf, p, k);
    buf[k] = 0;
}

/* Every line of t is row i of template (templ ? templ : i % 8 + 1), ABBA on even turns, corrupt = S2 -> IO. */
static void check_ioi_text(const struct text *t, int templ)
{
    const char *line = t->s;
    for (int i = 0; i < t->lines; i++) {
        char prompt[512], corrupt[512], answer[64], wrong[64], sp[5][32] = {""}, sc[5][32] = {""};
        field(line, "prompt", prompt, sizeof prompt);
        field(line, "corrupt", corrupt, sizeof corrupt);
        field(line, "answer", answer, sizeof answer);
        field(line, "wrong", wrong, sizeof wrong);
        int ti = templ ? templ - 1 : i % HP_TASK_IOI_TEMPLATES;
        bool abba = (templ ? i : i / HP_TASK_IOI_TEMPLATES) % 2 == 0;
        const char *tm = hp_ioi_templates[ti];
        cr_assert(match(tm, prompt, sp), "row %d: \"%s\" is not template %d \"%s\"", i + 1, prompt, ti + 1, tm);
        cr_assert(match(tm, corrupt, sc), "row %d: corrupt \"%s\" is not template %d", i + 1, corrupt, ti + 1);
        const char *io = abba ? sp[0] : sp[1], *s = abba ? sp[1] : sp[0];
        cr_assert_str_neq(io, s, "row %d: one name twice", i + 1);
        cr_assert_str_eq(sp[2], s, "row %d: the second mention is the subject", i + 1);
        cr_assert_str_eq(sc[2], io, "row %d: the corrupt's second mention is the indirect object", i + 1);
        for (int k = 0; k < 5; k++)
            if (k != 2)
                cr_assert_str_eq(sp[k], sc[k], "row %d: the corrupt changes only the second mention", i + 1);
        cr_assert(answer[0] == ' ' && strcmp(answer + 1, io) == 0, "row %d: answer \"%s\", io %s", i + 1, answer, io);
        cr_assert(wrong[0] == ' ' && strcmp(wrong + 1, s) == 0, "row %d: wrong \"%s\", s %s", i + 1, wrong, s);
        line = strchr(line, '\n') + 1;
    }
}

static struct hp_data *load_text(const struct text *t, const char *dir, const char *name)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.jsonl", scratch(name), name);
    tu_spit(path, t->s, t->n);
    struct hp_data *d = NULL;
    struct hp_error err = {0};
    cr_assert_eq(hp_data_load_for(path, dir, NULL, 0, &d, &err), HP_OK, "%s", err.msg);
    return d;
}

Test(task_gen, ioi_rows_are_task_rows_of_the_templates)
{
    const char *dir = fixture(MINILM);
    struct text t = generate(HP_TASK_GEN_IOI, dir, (struct hp_task_gen_opts){.n = 48, .seed = 7});
    check_ioi_text(&t, 0);
    struct hp_data *d = load_text(&t, dir, "ioi");
    struct hp_task *k = d->task;
    cr_assert(k && k->wrong && k->corrupt, "task rows with wrong answers and corrupt prompts");
    cr_assert_eq(d->n_seqs, 48);
    struct hp_tokenizer *tok;
    struct hp_error err = {0};
    cr_assert_eq(hp_tokenizer_open(dir, &tok, &err), HP_OK, "%s", err.msg);
    int len_of[HP_TASK_IOI_TEMPLATES] = {0};
    const char *line = t.s;
    for (int s = 0; s < d->n_seqs; s++) {
        const int T = d->seq_len, n = k->pos[s] + 1;
        const int32_t *p = d->ids + (size_t)s * T, *c = k->corrupt + (size_t)s * T;
        cr_assert_neq(k->answer[s], k->wrong[s], "row %d: answer and wrong are one token", s + 1);
        int n_diff = 0, at = -1;
        for (int i = 0; i < n; i++)
            if (p[i] != c[i])
                n_diff++, at = i;
        cr_assert_eq(n_diff, 1, "row %d: prompt and corrupt differ at %d positions", s + 1, n_diff);
        cr_assert(at < n - 1, "row %d: the swapped name comes before the answer position", s + 1);
        cr_assert(p[at] == k->wrong[s] && c[at] == k->answer[s], "row %d: the subject's token becomes the indirect "
                  "object's", s + 1);
        /* the same template gives the same length (WordPiece splits words at spaces) */
        int ti = s % HP_TASK_IOI_TEMPLATES;
        cr_assert(len_of[ti] == 0 || len_of[ti] == n, "row %d: template %d rows are %d and %d tokens", s + 1, ti + 1,
                  len_of[ti], n);
        len_of[ti] = n;
        /* the ids are the text: decoded, the prompt comes back (this tokenizer lowercases) */
        char prompt[512], *text;
        size_t tn;
        field(line, "prompt", prompt, sizeof prompt);
        cr_assert_eq(hp_tokenizer_decode(tok, p, n, false, &text, &tn, &err), HP_OK, "%s", err.msg);
        for (char *q = prompt; *q; q++)
            *q = (char)tolower((unsigned char)*q);
        cr_assert_str_eq(text, prompt, "row %d: the ids decode to the prompt", s + 1);
        free(text);
        line = strchr(line, '\n') + 1;
    }
    hp_tokenizer_free(tok);
    hp_data_free(d);
    free(t.s);
}

Test(task_gen, ioi_one_template)
{
    struct text t = generate(HP_TASK_GEN_IOI, fixture(MINILM), (struct hp_task_gen_opts){.n = 10, .seed = 1, .templ = 5});
    check_ioi_text(&t, 5);
    free(t.s);
}

Test(task_gen, same_seed_same_bytes_other_seed_other_rows)
{
    for (int g = 0; g < HP_TASK_GEN_COUNT; g++) {
        const char *dir = g == HP_TASK_GEN_INDUCTION ? fixture("../../models/default") : fixture(MINILM);
        struct text a = generate(g, dir, (struct hp_task_gen_opts){.n = 32, .seed = 11});
        struct text b = generate(g, dir, (struct hp_task_gen_opts){.n = 32, .seed = 11});
        struct text c = generate(g, dir, (struct hp_task_gen_opts){.n = 32, .seed = 12});
        cr_assert(a.n == b.n && memcmp(a.s, b.s, a.n) == 0, "%s: the same seed gives the same bytes",
                  hp_task_gens[g].name);
        /* another seed: nearly every row differs */
        int same = 0;
        for (const char *x = a.s, *y = c.s; *x && *y; x = strchr(x, '\n') + 1, y = strchr(y, '\n') + 1)
            same += strcspn(x, "\n") == strcspn(y, "\n") && memcmp(x, y, strcspn(x, "\n")) == 0;
        cr_assert(same <= 2, "%s: %d of 32 rows the same under another seed", hp_task_gens[g].name, same);
        free(a.s);
        free(b.s);
        free(c.s);
    }
}

Test(task_gen, ioi_refuses_tokenizers_without_names)
{
    struct text t = {0};
    struct hp_error err = {0};
    struct hp_task_gen_opts o = {.n = 4};
    cr_assert_eq(hp_task_generate(HP_TASK_GEN_IOI, fixture("tokenizers/gpt2-bpe"), &o, add_line, &t, &err),
                 HP_ERR_ARG);
    cr_assert(strstr(err.msg, "gpt2-bpe: only 3 of ioi's") && strstr(err.msg, "names are one token"), "%s", err.msg);
    cr_assert_eq(t.lines, 0, "nothing made");
    cr_assert_eq(hp_task_generate(HP_TASK_GEN_IOI, fixture("gpt2-tiny"), &o, add_line, &t, &err), HP_ERR_ARG);
    cr_assert(strstr(err.msg, "gpt2-tiny: no tokenizer") && strstr(err.msg, "need the model's tokenizer"), "%s",
              err.msg);
    o.n = 0;
    cr_assert_eq(hp_task_generate(HP_TASK_GEN_IOI, fixture(MINILM), &o, add_line, &t, &err), HP_ERR_ARG);
    cr_assert(strstr(err.msg, "0 rows asked for; a generator makes 1 to 100000"), "%s", err.msg);
    free(t.s);
}

// --- docstring --------------------------------------------------------------------------------

/* Whether every word of the space-separated list is one of hp_docstring_words. */
static bool all_words(const char *const *w, int n)
{
    for (int i = 0; i < n; i++)
        if (!in_list(hp_docstring_words, w[i], strlen(w[i])))
            return false;
    return true;
}

Test(task_gen, docstring_rows)
{
    const char *dir = fixture(MINILM);
    struct text t = generate(HP_TASK_GEN_DOCSTRING, dir, (struct hp_task_gen_opts){.n = 24, .seed = 2});
    struct hp_data *d = load_text(&t, dir, "docstring");
    struct hp_task *k = d->task;
    cr_assert(k && k->wrong && k->corrupt && d->n_seqs == 24);
    struct hp_tokenizer *tok;
    struct hp_error err = {0};
    cr_assert_eq(hp_tokenizer_open(dir, &tok, &err), HP_OK, "%s", err.msg);
    const char *line = t.s;
    for (int s = 0; s < d->n_seqs; s++) {
        /* the text: def F(self, A1..A4), the docstring documents A1 and A2 and stops at the third :param */
        char row[2048];
        snprintf(row, sizeof row, "%.*s", (int)strcspn(line, "\n"), line);
        char f[2][32], a[2][4][32], p[2][2][32], dsc[2][7][32], ans[32], wr[32];
        for (int c = 0; c < 2; c++) {
            const char *key = c ? "\"corrupt\":\"" : "\"prompt\":\"", *at = strstr(row, key);
            cr_assert(at);
            int got = sscanf(at + strlen(key),
                             "def %31[a-z](self, %31[a-z], %31[a-z], %31[a-z], %31[a-z]):\\n    \\\"\\\"\\\"%31[a-z] "
                             "%31[a-z] %31[a-z]\\n\\n    :param %31[a-z]: %31[a-z] %31[a-z]\\n    :param %31[a-z]: "
                             "%31[a-z] %31[a-z]\\n    :param\"",
                             f[c], a[c][0], a[c][1], a[c][2], a[c][3], dsc[c][0], dsc[c][1], dsc[c][2], p[c][0],
                             dsc[c][3], dsc[c][4], p[c][1], dsc[c][5], dsc[c][6]);
            cr_assert_eq(got, 14, "row %d: not the template (%d fields): %s", s + 1, got, row);
            const char *w[] = {f[c], a[c][0], a[c][1], a[c][2], a[c][3]};
            cr_assert(all_words(w, 5), "row %d: words from the list", s + 1);
        }
        field(line, "answer", ans, sizeof ans);
        field(line, "wrong", wr, sizeof wr);
        cr_assert(ans[0] == ' ' && strcmp(ans + 1, a[0][2]) == 0, "row %d: the answer is the third parameter", s + 1);
        cr_assert(wr[0] == ' ' && strcmp(wr + 1, a[0][3]) == 0, "row %d: wrong is the fourth", s + 1);
        cr_assert_str_eq(f[0], f[1], "row %d: the same function", s + 1);
        for (int i = 0; i < 2; i++) {
            cr_assert_str_eq(p[0][i], a[0][i], "row %d: the docstring documents the def's first two", s + 1);
            cr_assert_str_eq(p[1][i], a[0][i], "row %d: the corrupt keeps the docstring", s + 1);
        }
        for (int i = 0; i < 7; i++)
            cr_assert_str_eq(dsc[0][i], dsc[1][i], "row %d: the corrupt keeps the descriptions", s + 1);
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) {
                cr_assert(i == j || strcmp(a[0][i], a[0][j]) != 0, "row %d: distinct parameters", s + 1);
                cr_assert_str_neq(a[0][i], a[1][j], "row %d: the corrupt's parameters are other words", s + 1);
            }
        /* the ids: the corrupt differs in exactly the four parameters, the third is the answer, the fourth wrong */
        const int32_t *pi = d->ids + (size_t)s * d->seq_len, *ci = k->corrupt + (size_t)s * d->seq_len;
        int diff[8], n_diff = 0;
        for (int i = 0; i <= k->pos[s]; i++)
            if (pi[i] != ci[i] && n_diff < 8)
                diff[n_diff++] = i;
        cr_assert_eq(n_diff, 4, "row %d: %d positions differ", s + 1, n_diff);
        cr_assert(pi[diff[2]] == k->answer[s] && pi[diff[3]] == k->wrong[s], "row %d: answer and wrong are the def's "
                  "third and fourth parameters' tokens", s + 1);
        line = strchr(line, '\n') + 1;
    }
    hp_tokenizer_free(tok);
    hp_data_free(d);
    free(t.s);
}

// --- induction --------------------------------------------------------------------------------

/* Every row of d has induction's shape for halves of K: first half distinct, repeated but for its last id; the
 * answer that last id; corrupt = another K distinct ids (none of the clean ones) and the same second half; wrong
 * the corrupt's K-th id. Every id below n_vocab, none in skip[0..n_skip). */
static void check_induction(const struct hp_data *d, int K, int n_vocab, const int32_t *skip, int n_skip)
{
    const struct hp_task *k = d->task;
    cr_assert(k && k->wrong && k->corrupt);
    for (int s = 0; s < d->n_seqs; s++) {
        const int32_t *p = d->ids + (size_t)s * d->seq_len, *c = k->corrupt + (size_t)s * d->seq_len;
        cr_assert_eq(k->pos[s], 2 * K - 2, "row %d: prompts are 2K - 1 tokens", s + 1);
        for (int i = 0; i < K; i++) {
            for (int j = 0; j < K; j++) {
                cr_assert(i == j || (p[i] != p[j] && c[i] != c[j]), "row %d: a half's ids are distinct", s + 1);
                cr_assert_neq(p[i], c[j], "row %d: the corrupt half shares no id with the clean one", s + 1);
            }
            for (int q = 0; q < n_skip; q++)
                cr_assert(p[i] != skip[q] && c[i] != skip[q], "row %d: special id %d drawn", s + 1, skip[q]);
            cr_assert(p[i] >= 0 && p[i] < n_vocab && c[i] >= 0 && c[i] < n_vocab);
        }
        for (int i = K; i < 2 * K - 1; i++)
            cr_assert(p[i] == p[i - K] && c[i] == p[i], "row %d: the second half repeats the clean first", s + 1);
        cr_assert_eq(k->answer[s], p[K - 1], "row %d: the answer follows the earlier occurrence", s + 1);
        cr_assert_eq(k->wrong[s], c[K - 1], "row %d: wrong is the corrupt's K-th id", s + 1);
    }
}

static struct hp_data *load_ids(const struct text *t, const char *name)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.jsonl", scratch(name), name);
    tu_spit(path, t->s, t->n);
    struct hp_data *d = NULL;
    struct hp_error err = {0};
    cr_assert_eq(hp_data_load(path, 0, &d, &err), HP_OK, "%s", err.msg);
    return d;
}

/* Each row's loss (-log p(answer)) on d's prompts under model m, (n_seqs) doubles to free(); *ld the mean
 * logit_diff (answer against wrong). */
static double *row_loss(struct hp_model *m, const struct hp_data *d, double *ld)
{
    struct hp_evaluator *ev;
    struct hp_metrics *r;
    struct hp_error err = {0};
    cr_assert_eq(hp_evaluator_new(m, d, &ev, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_run(ev, NULL, HP_ABLATE_ZERO, &r, &err), HP_OK, "%s", err.msg);
    double *out = malloc((size_t)d->n_seqs * sizeof *out);
    memcpy(out, r->seq_loss, (size_t)d->n_seqs * sizeof *out);
    cr_assert(r->has[HP_METRIC_LOGIT_DIFF], "rows with wrong answers have a logit difference");
    *ld = r->value[HP_METRIC_LOGIT_DIFF];
    hp_metrics_free(r);
    hp_evaluator_free(ev);
    return out;
}

Test(task_gen, induction_on_the_default_model)
{
    const char *dir = fixture("../../models/default");
    const int K = 16, N = 64;
    struct text t = generate(HP_TASK_GEN_INDUCTION, dir, (struct hp_task_gen_opts){.n = N, .seed = 3, .len = K});
    struct hp_data *d = load_ids(&t, "induction");
    check_induction(d, K, 256, NULL, 0);
    struct hp_model *m;
    struct hp_error err = {0};
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    double ld_clean, ld_corrupt;
    double *clean = row_loss(m, d, &ld_clean);
    /* the corrupt prompts, as prompts: the same answers (and the clean ones as their corruption) */
    int32_t *swap = d->ids;
    d->ids = d->task->corrupt;
    d->task->corrupt = swap;
    double *corrupt = row_loss(m, d, &ld_corrupt);
    double mc = 0, mx = 0;
    int better = 0;
    for (int s = 0; s < N; s++) {
        mc += clean[s] / N;
        mx += corrupt[s] / N;
        better += clean[s] < corrupt[s];
    }
    cr_log_info("induction on models/default, K %d, %d rows: answer loss %.3f clean, %.3f corrupt (uniform %.3f); "
                "clean better on %d rows; logit_diff %.3f clean, %.3f corrupt", K, N, mc, mx, log(256.0), better,
                ld_clean, ld_corrupt);
    cr_assert(ld_clean > ld_corrupt + 3.0, "logit_diff %.3f clean, %.3f corrupt", ld_clean, ld_corrupt);
    cr_assert(mc < log(256.0) - 1.0, "clean prompts predict the answer (loss %.3f, uniform %.3f)", mc, log(256.0));
    cr_assert(mx > mc + 3.0, "the corrupt prompts lose it: loss %.3f against %.3f clean", mx, mc);
    cr_assert(better >= N * 9 / 10, "clean better on %d of %d rows", better, N);
    free(clean);
    free(corrupt);
    hp_model_close(m);
    hp_data_free(d);
    free(t.s);
}

Test(task_gen, induction_leaves_out_special_ids)
{
    /* stories260K's model (512 ids) with sp-bpe's tokenizer, whose <unk> <s> </s> are ids 0, 1, 2 */
    const char *dir = scratch("special");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "ln -s '%s/config.json' '%s/config.json' && ln -s '%s/model.safetensors' "
             "'%s/model.safetensors' && ln -s '%s/tokenizer.json' '%s/tokenizer.json'", fixture("stories260K"), dir,
             fixture("stories260K"), dir, fixture("tokenizers/sp-bpe"), dir);
    cr_assert_eq(system(cmd), 0);
    const int32_t special[] = {0, 1, 2};
    struct text t = generate(HP_TASK_GEN_INDUCTION, dir, (struct hp_task_gen_opts){.n = 40, .seed = 5, .len = 100});
    struct hp_data *d = load_ids(&t, "special_rows");
    check_induction(d, 100, 512, special, 3);
    hp_data_free(d);
    free(t.s);
    /* without the tokenizer every id may be drawn: the same draws take some of 0, 1, 2 (the check can fail) */
    struct text u = generate(HP_TASK_GEN_INDUCTION, fixture("stories260K"),
                             (struct hp_task_gen_opts){.n = 40, .seed = 5, .len = 100});
    d = load_ids(&u, "all_rows");
    int hits = 0;
    for (size_t i = 0; i < (size_t)d->n_seqs * d->seq_len; i++)
        hits += d->attn_mask[i] && (d->ids[i] <= 2 || d->task->corrupt[i] <= 2);
    cr_assert_gt(hits, 0, "ids 0..2 drawn when no tokenizer says they are special");
    hp_data_free(d);
    free(u.s);
}

Test(task_gen, induction_lengths)
{
    struct text t = {0};
    struct hp_error err = {0};
    const char *dir = fixture("../../models/default");
    /* the default, 32, fits the default model's 128 positions */
    struct text a = generate(HP_TASK_GEN_INDUCTION, dir, (struct hp_task_gen_opts){.n = 2});
    struct hp_data *d = load_ids(&a, "default_len");
    check_induction(d, HP_TASK_INDUCTION_LEN, 256, NULL, 0);
    hp_data_free(d);
    free(a.s);
    struct hp_task_gen_opts o = {.n = 2, .len = 65};
    cr_assert_eq(hp_task_generate(HP_TASK_GEN_INDUCTION, dir, &o, add_line, &t, &err), HP_ERR_ARG);
    cr_assert(strstr(err.msg, "--len 65 makes prompts of 129 tokens, more than the model's 128 positions (--len 64 "
                     "at the most)"), "%s", err.msg);
    o.len = 1;
    cr_assert_eq(hp_task_generate(HP_TASK_GEN_INDUCTION, dir, &o, add_line, &t, &err), HP_ERR_ARG);
    cr_assert(strstr(err.msg, "--len 2 or more"), "%s", err.msg);
    /* 64 fits the positions (127 tokens) and the 256 ids (128 drawn a row) */
    o.len = 64;
    cr_assert_eq(hp_task_generate(HP_TASK_GEN_INDUCTION, dir, &o, add_line, &t, &err), HP_OK, "%s", err.msg);
    /* an encoder has no next token to score */
    o.len = 0;
    cr_assert_eq(hp_task_generate(HP_TASK_GEN_INDUCTION, fixture("bert-mlm"), &o, add_line, &t, &err), HP_ERR_ARG);
    cr_assert(strstr(err.msg, "is an encoder"), "%s", err.msg);
    free(t.s);
}

// --- the command line ---------------------------------------------------------------------------

Test(task_gen, cli)
{
    const char *tmp = scratch("cli");
    static char out[1 << 16], err[4096];
    cr_assert_eq(tu_headprune(NULL, "--help", tmp, out, sizeof out, NULL, 0), 0);
    cr_assert(strstr(out, "  task "), "headprune --help lists task");
    cr_assert_eq(tu_headprune(NULL, "task --help", tmp, out, sizeof out, NULL, 0), 0);
    cr_assert(strstr(out, "  ioi ") && strstr(out, "  induction ") && strstr(out, "--template"), "%s", out);
    cr_assert_eq(tu_headprune(NULL, "task ioi --help", tmp, out, sizeof out, NULL, 0), 0);
    cr_assert(strstr(out, "Wang et al. 2022") && strstr(out, "--template") && !strstr(out, "--len"), "%s", out);
    cr_assert_eq(tu_headprune(NULL, "task induction --help", tmp, out, sizeof out, NULL, 0), 0);
    cr_assert(strstr(out, "resampled") && strstr(out, "--len") && !strstr(out, "--template"), "%s", out);
    const char *helps[] = {"task --help", "task ioi --help", "task induction --help"};
    for (size_t i = 0; i < sizeof helps / sizeof *helps; i++) {
        cr_assert_eq(tu_headprune(NULL, helps[i], tmp, out, sizeof out, NULL, 0), 0);
        for (const char *l = out; *l; l += strcspn(l, "\n") + (l[strcspn(l, "\n")] != 0))
            cr_assert_leq(strcspn(l, "\n"), 80, "%s: a line over 80 columns: %.*s", helps[i], (int)strcspn(l, "\n"), l);
    }

    char args[2048];
    snprintf(args, sizeof args, "task ioi -m '%s' -n 3 --seed 9", fixture(MINILM));
    cr_assert_eq(tu_headprune(NULL, args, tmp, out, sizeof out, err, sizeof err), 0, "%s", err);
    struct text t = generate(HP_TASK_GEN_IOI, fixture(MINILM), (struct hp_task_gen_opts){.n = 3, .seed = 9});
    cr_assert_str_eq(out, t.s, "the command writes the library's rows");
    free(t.s);
    /* options before the generator too */
    snprintf(args, sizeof args, "task -m '%s' -n 3 --seed 9 ioi", fixture(MINILM));
    cr_assert_eq(tu_headprune(NULL, args, tmp, out, sizeof out, err, sizeof err), 0, "%s", err);

    const struct {
        const char *args; /* %s: a model directory */
        const char *dir;
        int status;
        const char *says;
    } bad[] = {
        {"task", MINILM, 2, "name a generator: ioi, induction or docstring"},
        {"task greater-than -m '%s'", MINILM, 2, "unknown generator 'greater-than' (the generators: ioi, induction or docstring)"},
        {"task ioi -m '%s' -n 0", MINILM, 2, "--n must be an integer from 1 to 100000"},
        {"task ioi -m '%s' -n 100001", MINILM, 2, "--n must be an integer from 1 to 100000"},
        {"task ioi -m '%s' --seed -1", MINILM, 2, "--seed must be a seed, an integer from 0 to 2147483647"},
        {"task ioi -m '%s' --seed x", MINILM, 2, "--seed must be a seed, an integer"},
        {"task ioi -m '%s' --len 4", MINILM, 2, "unknown option"},
        {"task -m '%s' --len 4 ioi", MINILM, 2, "ioi takes no --len"},
        {"task induction -m '%s' --template 2", "../../models/default", 2, "unknown option"},
        {"task ioi -m '%s' --template 9", MINILM, 2, "--template must be an integer from 1 to 8"},
        {"task ioi", MINILM, 2, "--model DIR is required"},
        {"task ioi -m '%s' extra", MINILM, 2, "takes no operands"},
        {"task ioi -m '%s'", "../../models/default", 1, "default: no tokenizer"},
        {"task ioi -m '%s'", "tokenizers/gpt2-bpe", 1, "only 3 of ioi's"},
        {"task induction -m '%s' --len 65", "../../models/default", 1, "more than the model's 128 positions"},
        {"task induction -m '%s'", MINILM, 1, "config.json"},
        {"task docstring -m '%s'", "tokenizers/gpt2-bpe", 1, "only 6 of docstring's 55 words are one token"},
        {"task docstring -m '%s'", "gpt2-tiny", 1, "gpt2-tiny: no tokenizer"},
        {"task docstring -m '%s' --template 1", MINILM, 2, "unknown option"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(args, sizeof args, bad[i].args, fixture(bad[i].dir));
        int st = tu_headprune(NULL, args, tmp, out, sizeof out, err, sizeof err);
        cr_assert_eq(st, bad[i].status, "%s: exit %d, not %d (%s)", args, st, bad[i].status, err);
        cr_assert(strstr(err, bad[i].says), "%s: says \"%s\", not \"%s\"", args, err, bad[i].says);
        cr_assert_str_eq(out, "", "%s: nothing written", args);
        cr_assert(strncmp(err, "headprune", 9) == 0 && (st == 2 || !strchr(err, '\n') || !strchr(err, '\n')[1]),
                  "%s: one line (%s)", args, err);
    }
}
