/*
 * test_tokenizer.c -- headprune's tokenizers against Hugging Face tokenizers.
 *
 * tests/fixtures/tokenizers/ holds a corpus written for the project (several
 * scripts, accents, emoji, whitespace runs, very long words, empty lines,
 * control characters) and, per tokenizer, the ids the tokenizers library
 * gave for every line, with and without special tokens, for pairs and for
 * multi-line texts (tools/gen_tokenizer_fixtures.py). Every one must match
 * exactly. Then bad input: invalid UTF-8, unsupported kinds, broken files.
 */
#define _DEFAULT_SOURCE
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <xxhash.h>

#include "headprune.h"
#include "testutil.h"

struct corpus {
    char *text;
    char **line;
    size_t *len;
    int n;
};

/* corpus.txt as bytes, split on '\n' only (lines hold \r, \v, \f as content) */
static struct corpus load_corpus(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizers/corpus.txt", getenv("HP_FIXTURES"));
    struct corpus c = {0};
    size_t n;
    c.text = tu_slurp(path, &n);
    int lines = 1;
    for (size_t i = 0; i < n; i++)
        lines += c.text[i] == '\n';
    c.line = calloc((size_t)lines, sizeof *c.line);
    c.len = calloc((size_t)lines, sizeof *c.len);
    size_t start = 0;
    for (size_t i = 0; i <= n; i++)
        if (i == n || c.text[i] == '\n') {
            c.line[c.n] = c.text + start;
            c.len[c.n++] = i - start;
            start = i + 1;
        }
    return c;
}

static int compare_ids(const char *name, const char *what, int line, const struct hp_encoding *e, const cJSON *want,
                       const cJSON *want_types)
{
    int n = cJSON_GetArraySize(want);
    bool same = n == e->n;
    for (int i = 0; same && i < n; i++)
        same = cJSON_GetArrayItem(want, i)->valueint == e->ids[i] &&
               (!want_types || cJSON_GetArrayItem(want_types, i)->valueint == e->type_ids[i]);
    if (same)
        return 0;
    char got[256] = "", exp[256] = "";
    for (int i = 0, k = 0; i < e->n && k < 200; i++)
        k += snprintf(got + k, sizeof got - (size_t)k, "%d ", e->ids[i]);
    for (int i = 0, k = 0; i < n && k < 200; i++)
        k += snprintf(exp + k, sizeof exp - (size_t)k, "%d ", cJSON_GetArrayItem(want, i)->valueint);
    cr_log_error("%s %s line %d: got %d ids [%s], Hugging Face %d [%s]", name, what, line, e->n, got, n, exp);
    return 1;
}

static void check(const char *name)
{
    struct corpus c = load_corpus();
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/tokenizers/%s", getenv("HP_FIXTURES"), name);
    snprintf(path, sizeof path, "%s/expected.json", dir);
    char *txt = tu_slurp(path, NULL);
    cJSON *exp = cJSON_Parse(txt);
    cr_assert(exp, "%s: bad JSON", path);
    struct hp_error err = {0};
    struct hp_tokenizer *t;
    cr_assert_eq(hp_tokenizer_open(dir, &t, &err), HP_OK, "%s", err.msg);
    int bad = 0, cases = 0;
    const cJSON *cs;
    cJSON_ArrayForEach(cs, cJSON_GetObjectItem(exp, "cases"))
    {
        int l = cJSON_GetObjectItem(cs, "line")->valueint;
        cr_assert_lt(l, c.n);
        for (int special = 0; special <= 1; special++) {
            struct hp_encoding e;
            cr_assert_eq(hp_tokenizer_encode(t, c.line[l], c.len[l], NULL, 0, special, &e, &err), HP_OK, "%s",
                         err.msg);
            bad += compare_ids(name, special ? "with specials" : "", l, &e,
                               cJSON_GetObjectItem(cs, special ? "ids_special" : "ids"), NULL);
            hp_encoding_free(&e);
            cases++;
        }
    }
    cJSON_ArrayForEach(cs, cJSON_GetObjectItem(exp, "pairs"))
    {
        int a = cJSON_GetObjectItem(cs, "a")->valueint, b = cJSON_GetObjectItem(cs, "b")->valueint;
        struct hp_encoding e;
        cr_assert_eq(hp_tokenizer_encode(t, c.line[a], c.len[a], c.line[b], c.len[b], true, &e, &err), HP_OK, "%s",
                     err.msg);
        bad += compare_ids(name, "pair", a, &e, cJSON_GetObjectItem(cs, "ids"), cJSON_GetObjectItem(cs, "type_ids"));
        hp_encoding_free(&e);
        cases++;
    }
    cJSON_ArrayForEach(cs, cJSON_GetObjectItem(exp, "multiline"))
    {
        int first = cJSON_GetObjectItem(cs, "first")->valueint, count = cJSON_GetObjectItem(cs, "count")->valueint;
        const char *s = c.line[first];
        size_t n = (size_t)(c.line[first + count - 1] + c.len[first + count - 1] - s);
        struct hp_encoding e;
        cr_assert_eq(hp_tokenizer_encode(t, s, n, NULL, 0, false, &e, &err), HP_OK, "%s", err.msg);
        bad += compare_ids(name, "multiline", first, &e, cJSON_GetObjectItem(cs, "ids"), NULL);
        hp_encoding_free(&e);
        cases++;
    }
    cr_log_info("%s: %d cases", name, cases);
    cr_assert_gt(cases, 150);
    cr_assert_eq(bad, 0, "%s: %d of %d encodings differ from Hugging Face's (see above)", name, bad, cases);
    hp_tokenizer_free(t);
    cJSON_Delete(exp);
    free(txt);
    free(c.text), free(c.line), free(c.len);
}

Test(tokenizer, gpt2_byte_level_bpe) { check("gpt2-bpe"); }
Test(tokenizer, llama3_split_regex_byte_level_bpe) { check("llama3-bpe"); }
Test(tokenizer, bert_wordpiece_uncased) { check("bert-wordpiece"); }
Test(tokenizer, bert_wordpiece_cased) { check("bert-wordpiece-cased"); }
Test(tokenizer, sentencepiece_bpe_byte_fallback) { check("sp-bpe"); }
Test(tokenizer, real_all_minilm_l6_v2) { check("minilm"); }

/* The fallback files give the same ids as tokenizer.json. */
static void check_fallback(const char *name, const char *const *files, int n_files)
{
    char tmp[64], src[1024], cmd[4096];
    tu_mkdtemp(tmp, sizeof tmp, "tokfb");
    snprintf(src, sizeof src, "%s/tokenizers/%s", getenv("HP_FIXTURES"), name);
    for (int i = 0; i < n_files; i++) {
        snprintf(cmd, sizeof cmd, "cp '%s/%s' '%s/'", src, files[i], tmp);
        cr_assert_eq(system(cmd), 0);
    }
    struct hp_error err = {0};
    struct hp_tokenizer *a, *b;
    cr_assert_eq(hp_tokenizer_open(src, &a, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_tokenizer_open(tmp, &b, &err), HP_OK, "%s", err.msg);
    struct corpus c = load_corpus();
    for (int l = 0; l < c.n; l++) {
        struct hp_encoding x, y;
        cr_assert_eq(hp_tokenizer_encode(a, c.line[l], c.len[l], NULL, 0, true, &x, &err), HP_OK);
        cr_assert_eq(hp_tokenizer_encode(b, c.line[l], c.len[l], NULL, 0, true, &y, &err), HP_OK);
        cr_assert_eq(x.n, y.n, "%s line %d: %d ids from %s, %d from tokenizer.json", name, l, y.n, files[0], x.n);
        if (x.n > 0)
            cr_assert_arr_eq(x.ids, y.ids, (size_t)x.n * sizeof(int32_t), "%s line %d", name, l);
        hp_encoding_free(&x);
        hp_encoding_free(&y);
    }
    hp_tokenizer_free(a);
    hp_tokenizer_free(b);
    free(c.text), free(c.line), free(c.len);
    tu_rmrf(tmp);
}

Test(tokenizer, vocab_txt_fallback_equals_tokenizer_json)
{
    static const char *const f[] = {"vocab.txt"};
    check_fallback("bert-wordpiece", f, 1);
}

Test(tokenizer, vocab_json_merges_txt_fallback_equals_tokenizer_json)
{
    static const char *const f[] = {"vocab.json", "merges.txt"};
    check_fallback("gpt2-bpe", f, 2);
}

// --- bad input --------------------------------------------------------------------------

static char g_tmp[64];
static void mk(void) { tu_mkdtemp(g_tmp, sizeof g_tmp, "tokbad"); }
static void rm(void) { tu_rmrf(g_tmp); }

static void expect_open_fails(const char *json, const char *words)
{
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer.json", g_tmp);
    tu_spit(path, json, strlen(json));
    struct hp_error err = {0};
    struct hp_tokenizer *t = (struct hp_tokenizer *)1;
    cr_assert_neq(hp_tokenizer_open(g_tmp, &t, &err), HP_OK);
    cr_assert_null(t);
    cr_assert(strstr(err.msg, path), "message does not name the file: %s", err.msg);
    cr_assert(strstr(err.msg, words), "message does not say '%s': %s", words, err.msg);
    cr_assert_null(strchr(err.msg, '\n'), "one line: %s", err.msg);
}

Test(tokenizer, unsupported_model_kind_is_named, .init = mk, .fini = rm)
{
    expect_open_fails("{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]]}}",
                      "tokenizer model 'Unigram' is not supported");
}

Test(tokenizer, unsupported_normalizer_is_named, .init = mk, .fini = rm)
{
    expect_open_fails("{\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"vocab\": {\"[UNK]\": 0}},"
                      " \"normalizer\": {\"type\": \"Precompiled\", \"precompiled_charsmap\": \"\"}}",
                      "normalizer 'Precompiled' is not supported");
}

Test(tokenizer, unsupported_pre_tokenizer_is_named, .init = mk, .fini = rm)
{
    expect_open_fails("{\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"vocab\": {\"[UNK]\": 0}},"
                      " \"pre_tokenizer\": {\"type\": \"UnicodeScripts\"}}",
                      "pre_tokenizer 'UnicodeScripts' is not supported");
}

Test(tokenizer, malformed_json, .init = mk, .fini = rm)
{
    expect_open_fails("{\"model\": {\"type\": \"BPE\", ", "not valid JSON");
}

Test(tokenizer, merge_of_unknown_tokens, .init = mk, .fini = rm)
{
    expect_open_fails("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}",
                      "merge 0 names a token that is not in the vocabulary");
}

/* A WordPiece of two ids whose template adds [SEP] with the given ids text. */
static void template_with_ids(char *out, size_t n, const char *ids)
{
    snprintf(out, n,
             "{\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"vocab\": {\"[UNK]\": 0, \"a\": 1}},"
             " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"Sequence\": {\"id\": \"A\","
             " \"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"[SEP]\", \"type_id\": 0}}], \"pair\": [],"
             " \"special_tokens\": {\"[SEP]\": {\"id\": \"[SEP]\", \"ids\": %s, \"tokens\": [\"[SEP]\"]}}}}",
             ids);
}

Test(tokenizer, template_special_ids_are_checked_and_counted, .init = mk, .fini = rm)
{
    /* found by fuzzing: a template's ids went out unchecked (-3) and uncounted (9 past a vocabulary
     * of 2), so a model too small for them was not refused where the tokenizer is checked */
    char json[1024];
    template_with_ids(json, sizeof json, "[-3]");
    expect_open_fails(json, "special token '[SEP]': id 0 is not a whole number");
    template_with_ids(json, sizeof json, "[1.5]");
    expect_open_fails(json, "is not a whole number");
    template_with_ids(json, sizeof json, "[\"9\"]");
    expect_open_fails(json, "is not a whole number");
    template_with_ids(json, sizeof json, "[9]");
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer.json", g_tmp);
    tu_spit(path, json, strlen(json));
    struct hp_error err = {0};
    struct hp_tokenizer *t;
    cr_assert_eq(hp_tokenizer_open(g_tmp, &t, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_tokenizer_n_ids(t), 10, "the template's id 9 is not counted: %d ids", hp_tokenizer_n_ids(t));
    hp_tokenizer_free(t);
}

Test(tokenizer, no_tokenizer_files, .init = mk, .fini = rm)
{
    struct hp_error err = {0};
    struct hp_tokenizer *t;
    cr_assert_eq(hp_tokenizer_open(g_tmp, &t, &err), HP_ERR_IO);
    cr_assert(strstr(err.msg, "no tokenizer.json, vocab.txt or vocab.json + merges.txt"), "%s", err.msg);
}

Test(tokenizer, invalid_utf8_is_refused_with_its_offset)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tokenizers/gpt2-bpe", getenv("HP_FIXTURES"));
    struct hp_error err = {0};
    struct hp_tokenizer *t;
    cr_assert_eq(hp_tokenizer_open(dir, &t, &err), HP_OK, "%s", err.msg);
    static const char bad[] = "caf\xc3 ok \xff";
    struct hp_encoding e;
    cr_assert_eq(hp_tokenizer_encode(t, bad, sizeof bad - 1, NULL, 0, false, &e, &err), HP_ERR_FORMAT);
    cr_assert(strstr(err.msg, "not valid UTF-8 at byte 3"), "%s", err.msg);
    cr_assert_null(e.ids);
    hp_tokenizer_free(t);
}

// --- held-out text through the tokenizer (engine/text.c) --------------------------------

/* Hugging Face's ids of corpus line l (with special tokens or not), from expected.json. */
static cJSON *hf_ids(cJSON *exp, int l, bool special)
{
    const cJSON *cs;
    cJSON_ArrayForEach(cs, cJSON_GetObjectItem(exp, "cases")) if (cJSON_GetObjectItem(cs, "line")->valueint == l) return cJSON_GetObjectItem(cs, special ? "ids_special" : "ids");
    cr_assert_fail("line %d not in expected.json", l);
    return NULL;
}

static cJSON *load_expected(const char *name, char **txt)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/tokenizers/%s/expected.json", getenv("HP_FIXTURES"), name);
    *txt = tu_slurp(path, NULL);
    cJSON *exp = cJSON_Parse(*txt);
    cr_assert(exp);
    return exp;
}

Test(tokenizer, txt_documents_packed_with_the_separator, .init = mk, .fini = rm)
{
    /* corpus lines 0, 1 and 2 as three documents; GPT-2 puts <|endoftext|> (1500) after each */
    struct corpus c = load_corpus();
    char path[256];
    snprintf(path, sizeof path, "%s/docs.txt", g_tmp);
    FILE *f = fopen(path, "wb");
    for (int l = 0; l < 3; l++)
        fprintf(f, "%s%.*s\n", l ? "\n\n" : "", (int)c.len[l], c.line[l]);
    fclose(f);
    char *txt;
    cJSON *exp = load_expected("gpt2-bpe", &txt);
    int32_t stream[4096];
    int n = 0;
    for (int l = 0; l < 3; l++) {
        const cJSON *v;
        cJSON_ArrayForEach(v, hf_ids(exp, l, true)) stream[n++] = v->valueint;
        stream[n++] = 1500;
    }
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tokenizers/gpt2-bpe", getenv("HP_FIXTURES"));
    struct hp_error err = {0};
    struct hp_data *d;
    cr_assert_eq(hp_data_load_for(path, dir, NULL, 16, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(d->seq_len, 16);
    cr_assert_eq(d->n_seqs, n / 16, "%d rows from %d tokens", d->n_seqs, n);
    cr_assert_arr_eq(d->ids, stream, (size_t)d->n_seqs * 16 * sizeof(int32_t));
    hp_data_free(d);
    cJSON_Delete(exp);
    free(txt);
    free(c.text), free(c.line), free(c.len);
}

Test(tokenizer, jsonl_text_pairs_padded_with_types, .init = mk, .fini = rm)
{
    char path[256];
    snprintf(path, sizeof path, "%s/pairs.jsonl", g_tmp);
    const char *rows = "{\"text_a\": \"The cat sat.\", \"text_b\": \"A dog ran!\"}\n\n{\"text_a\": \"Hi\", \"text_b\": \"there\"}\n";
    tu_spit(path, rows, strlen(rows));
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tokenizers/minilm", getenv("HP_FIXTURES"));
    struct hp_error err = {0};
    struct hp_tokenizer *t;
    cr_assert_eq(hp_tokenizer_open(dir, &t, &err), HP_OK, "%s", err.msg);
    struct hp_encoding a, b;
    cr_assert_eq(hp_tokenizer_encode(t, "The cat sat.", 12, "A dog ran!", 10, true, &a, &err), HP_OK);
    cr_assert_eq(hp_tokenizer_encode(t, "Hi", 2, "there", 5, true, &b, &err), HP_OK);
    struct hp_data *d;
    cr_assert_eq(hp_data_load_for(path, dir, NULL, 0, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(d->n_seqs, 2);
    cr_assert_eq(d->seq_len, a.n, "padded to the longest row");
    cr_assert_arr_eq(d->ids, a.ids, (size_t)a.n * sizeof(int32_t));
    cr_assert_arr_eq(d->type_ids, a.type_ids, (size_t)a.n * sizeof(int32_t));
    cr_assert_arr_eq(d->ids + d->seq_len, b.ids, (size_t)b.n * sizeof(int32_t));
    for (int k = 0; k < d->seq_len; k++) {
        cr_assert_eq(d->attn_mask[d->seq_len + k], k < b.n);
        if (k >= b.n)
            cr_assert_eq(d->ids[d->seq_len + k], 0, "padding is [PAD]");
    }
    hp_encoding_free(&a);
    hp_encoding_free(&b);
    hp_data_free(d);
    hp_tokenizer_free(t);
}

Test(tokenizer, text_that_is_not_utf8_names_file_and_line, .init = mk, .fini = rm)
{
    /* raw invalid bytes inside the second document of a .txt */
    char path[256];
    snprintf(path, sizeof path, "%s/bad.txt", g_tmp);
    static const char bad[] = "one good line\n\nthen a bad byte \xff here\n";
    tu_spit(path, bad, sizeof bad - 1);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tokenizers/gpt2-bpe", getenv("HP_FIXTURES"));
    struct hp_error err = {0};
    struct hp_data *d = (struct hp_data *)1;
    cr_assert_neq(hp_data_load_for(path, dir, NULL, 4, &d, &err), HP_OK);
    cr_assert_null(d);
    cr_assert(strstr(err.msg, path) && strstr(err.msg, "line 3") && strstr(err.msg, "not valid UTF-8"), "%s", err.msg);
}

Test(tokenizer, text_without_a_tokenizer_says_so, .init = mk, .fini = rm)
{
    char path[256];
    snprintf(path, sizeof path, "%s/t.jsonl", g_tmp);
    const char *rows = "{\"text\": \"hello\"}\n";
    tu_spit(path, rows, strlen(rows));
    struct hp_error err = {0};
    struct hp_data *d;
    cr_assert_eq(hp_data_load_for(path, g_tmp, NULL, 0, &d, &err), HP_ERR_IO);
    cr_assert(strstr(err.msg, "no tokenizer.json"), "%s", err.msg);
}

Test(tokenizer, tokenizer_larger_than_the_models_embedding_is_refused, .init = mk, .fini = rm)
{
    char path[256];
    snprintf(path, sizeof path, "%s/t.jsonl", g_tmp);
    const char *rows = "{\"text\": \"hello\"}\n";
    tu_spit(path, rows, strlen(rows));
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tokenizers/minilm", getenv("HP_FIXTURES"));
    struct hp_model_info info = tu_info(2, 4, 4);
    info.n_vocab = 1000; /* MiniLM's tokenizer has 30522 ids */
    struct hp_error err = {0};
    struct hp_data *d;
    cr_assert_eq(hp_data_load_for(path, dir, &info, 0, &d, &err), HP_ERR_SHAPE);
    cr_assert(strstr(err.msg, "the tokenizer has 30522 token ids but the model's embedding has 1000 rows"), "%s",
              err.msg);
    info.n_vocab = 30522;
    cr_assert_eq(hp_data_load_for(path, dir, &info, 0, &d, &err), HP_OK, "%s", err.msg);
    hp_data_free(d);
}

Test(tokenizer, text_label_names_map_to_id2label, .init = mk, .fini = rm)
{
    char path[256], dir[1024];
    snprintf(path, sizeof path, "%s/nli.jsonl", g_tmp);
    const char *rows = "{\"text_a\": \"A man sleeps.\", \"text_b\": \"Nobody sleeps.\", \"label\": \"contradiction\"}\n"
                       "{\"text_a\": \"A dog runs.\", \"text_b\": \"An animal moves.\", \"label\": 0}\n";
    tu_spit(path, rows, strlen(rows));
    snprintf(dir, sizeof dir, "%s/tokenizers/minilm", getenv("HP_FIXTURES"));
    static const char *const names[] = {"entailment", "neutral", "contradiction"};
    struct hp_model_info info = tu_info(2, 4, 4);
    info.n_vocab = 30522;
    info.n_labels = 3;
    info.label_names = names;
    struct hp_error err = {0};
    struct hp_data *d;
    cr_assert_eq(hp_data_load_for(path, dir, &info, 0, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_not_null(d->seq_labels);
    cr_assert_eq(d->seq_labels[0], 2);
    cr_assert_eq(d->seq_labels[1], 0);
    hp_data_free(d);
    /* a name the model does not have */
    rows = "{\"text\": \"fine\", \"label\": \"entailment\"}\n{\"text\": \"odd\", \"label\": \"maybe\"}\n";
    tu_spit(path, rows, strlen(rows));
    cr_assert_eq(hp_data_load_for(path, dir, &info, 0, &d, &err), HP_ERR_ARG);
    cr_assert(strstr(err.msg, "nli.jsonl:2: label \"maybe\" is not one of the model's id2label (entailment, neutral, "
                              "contradiction)"),
              "%s", err.msg);
}

static int count_files(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls '%s' 2>/dev/null | wc -l", dir);
    FILE *p = popen(cmd, "r");
    int n = 0;
    cr_assert_eq(fscanf(p, "%d", &n), 1);
    pclose(p);
    return n;
}

Test(tokenizer, tokenized_text_is_cached_by_digest, .init = mk, .fini = rm)
{
    char path[256], cache[256], tokens[300], dir[1024], cmd0[512];
    snprintf(path, sizeof path, "%s/docs.txt", g_tmp);
    snprintf(cache, sizeof cache, "%s/cache", g_tmp);
    snprintf(tokens, sizeof tokens, "%s/tokens", cache);
    setenv("HP_CACHE_DIR", cache, 1);
    const char *text = "First document, with a few words.\n\nSecond one; a little longer than the first.\n";
    tu_spit(path, text, strlen(text));
    snprintf(dir, sizeof dir, "%s/tokenizers/gpt2-bpe", getenv("HP_FIXTURES"));
    struct hp_error err = {0};
    struct hp_data *a, *b, *c;
    cr_assert_eq(hp_data_load_for(path, dir, NULL, 4, &a, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(count_files(tokens), 1, "the first load writes one cache entry");
    cr_assert_eq(hp_data_load_for(path, dir, NULL, 4, &b, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(count_files(tokens), 1, "the second load reads it");
    cr_assert_eq(a->n_seqs, b->n_seqs);
    cr_assert_arr_eq(a->ids, b->ids, (size_t)a->n_seqs * 4 * sizeof(int32_t));
    hp_data_free(b);
    /* proof that it reads the entry: an id edited in the entry comes back */
    char entry[512];
    snprintf(cmd0, sizeof cmd0, "ls '%s'/*.bin", tokens);
    FILE *ls = popen(cmd0, "r");
    cr_assert(fgets(entry, sizeof entry, ls));
    pclose(ls);
    entry[strcspn(entry, "\n")] = 0;
    size_t elen;
    char *bytes = tu_slurp(entry, &elen);
    int32_t edited = 1234;
    memcpy(bytes + 36, &edited, sizeof edited); /* the first id, after the magic, 3 int32, the checksum and
                                                 * the count of dropped tokens */
    tu_spit(entry, bytes, elen);
    cr_assert_eq(hp_data_load_for(path, dir, NULL, 4, &b, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(b->ids[0], a->ids[0], "an entry whose checksum fails was used");
    hp_data_free(b);
    /* ... and the same edit with a matching checksum is read: the entry is used */
    memcpy(bytes + 36, &edited, sizeof edited);
    struct hp_data tmpd = {.n_seqs = a->n_seqs, .seq_len = a->seq_len, .ids = (int32_t *)(bytes + 36)};
    uint64_t sum = XXH3_64bits(tmpd.ids, (size_t)a->n_seqs * 4 * sizeof(int32_t));
    memcpy(bytes + 20, &sum, sizeof sum);
    tu_spit(entry, bytes, elen);
    free(bytes);
    cr_assert_eq(hp_data_load_for(path, dir, NULL, 4, &b, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(b->ids[0], 1234, "the cached entry was not read");
    /* a damaged entry is ignored and rewritten, with the same result */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "for f in '%s'/*.bin; do printf 'junk' > \"$f\"; done", tokens);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(hp_data_load_for(path, dir, NULL, 4, &c, &err), HP_OK, "%s", err.msg);
    cr_assert_arr_eq(a->ids, c->ids, (size_t)a->n_seqs * 4 * sizeof(int32_t));
    hp_data_free(c);
    /* other rows, or other text: other entries */
    cr_assert_eq(hp_data_load_for(path, dir, NULL, 3, &c, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(count_files(tokens), 2);
    hp_data_free(c);
    text = "Changed text.\n";
    tu_spit(path, text, strlen(text));
    cr_assert_eq(hp_data_load_for(path, dir, NULL, 2, &c, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(count_files(tokens), 3);
    hp_data_free(a), hp_data_free(b), hp_data_free(c);
}

static void bad_ids(const char *name, const struct hp_encoding *e, const cJSON *want)
{
    int n = cJSON_GetArraySize(want);
    cr_assert_eq(e->n, n, "%s: %d ids, Hugging Face %d", name, e->n, n);
    for (int i = 0; i < n; i++)
        cr_assert_eq(e->ids[i], cJSON_GetArrayItem(want, i)->valueint, "%s: id %d is %d, Hugging Face %d", name, i,
                     e->ids[i], cJSON_GetArrayItem(want, i)->valueint);
}

/* Hand-made pipelines for corners the trained tokenizers do not reach; ids from Hugging Face. */
Test(tokenizer, pipeline_corner_cases_equal_hugging_face, .init = mk, .fini = rm)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizers/pipeline-cases.json", getenv("HP_FIXTURES"));
    char *txt = tu_slurp(path, NULL);
    cJSON *all = cJSON_Parse(txt);
    cr_assert(all);
    int n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(all, "cases"))
    {
        char tj[256];
        snprintf(tj, sizeof tj, "%s/tokenizer.json", g_tmp);
        const char *json = cJSON_GetObjectItem(c, "json")->valuestring, *text = cJSON_GetObjectItem(c, "text")->valuestring;
        tu_spit(tj, json, strlen(json));
        struct hp_error err = {0};
        struct hp_tokenizer *t;
        cr_assert_eq(hp_tokenizer_open(g_tmp, &t, &err), HP_OK, "%s: %s", c->string, err.msg);
        struct hp_encoding e;
        cr_assert_eq(hp_tokenizer_encode(t, text, strlen(text), NULL, 0, false, &e, &err), HP_OK, "%s", err.msg);
        bad_ids(c->string, &e, cJSON_GetObjectItem(c, "ids"));
        hp_encoding_free(&e);
        hp_tokenizer_free(t);
        n++;
    }
    cr_assert_eq(n, 5);
    cJSON_Delete(all);
    free(txt);
}

Test(tokenizer, two_templates_are_refused, .init = mk, .fini = rm)
{
    expect_open_fails("{\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"vocab\": {\"[UNK]\": 0}},"
                      " \"post_processor\": {\"type\": \"Sequence\", \"processors\": ["
                      "{\"type\": \"BertProcessing\", \"sep\": [\"[UNK]\", 0], \"cls\": [\"[UNK]\", 0]},"
                      "{\"type\": \"BertProcessing\", \"sep\": [\"[UNK]\", 0], \"cls\": [\"[UNK]\", 0]}]}}",
                      "more than one post_processor adds special tokens");
}

// --- long texts: linear time, the library's ids (issue 16) ---------------------------------

/* n letters a-z from the C library's classic LCG, as tools/gen_tokenizer_long_cases.py makes them */
static char *lcg_word(int n)
{
    char *w = malloc((size_t)n + 1);
    uint32_t x = 1;
    for (int i = 0; i < n; i++) {
        x = (x * 1103515245u + 12345u) & 0x7fffffffu;
        w[i] = (char)('a' + (x >> 16) % 26);
    }
    w[n] = 0;
    return w;
}

static char *repeat(const char *unit, int times, size_t *n)
{
    size_t k = strlen(unit);
    char *s = malloc(k * (size_t)times + 1);
    for (int i = 0; i < times; i++)
        memcpy(s + k * (size_t)i, unit, k);
    s[k * (size_t)times] = 0;
    *n = k * (size_t)times;
    return s;
}

/*
 * tests/fixtures/tokenizers/long-cases.json: a unit repeated (100k words on one line,
 * one word of 100k letters, a sentence 2000 times) or one long pseudo-random word, and
 * Hugging Face's ids as head + cycle * times + tail (tools/gen_tokenizer_long_cases.py).
 */
Test(tokenizer, long_texts_equal_hugging_face)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizers/long-cases.json", getenv("HP_FIXTURES"));
    char *txt = tu_slurp(path, NULL);
    cJSON *all = cJSON_Parse(txt);
    cr_assert(all);
    int cases = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(all, "cases"))
    {
        const char *name = cJSON_GetObjectItem(c, "tokenizer")->valuestring;
        const cJSON *unit = cJSON_GetObjectItem(c, "unit");
        int times = cJSON_GetObjectItem(c, "repeat")->valueint;
        size_t n = (size_t)times;
        char *text = cJSON_IsString(unit) ? repeat(unit->valuestring, times, &n) : lcg_word(times);
        /* Hugging Face's ids, unrolled (an array: cJSON's indexing is linear in the index) */
        const cJSON *parts[3] = {cJSON_GetObjectItem(c, "head"), cJSON_GetObjectItem(c, "cycle"),
                                 cJSON_GetObjectItem(c, "tail")};
        int reps[3] = {1, cJSON_GetObjectItem(c, "times")->valueint, 1};
        int n_want = cJSON_GetObjectItem(c, "n_ids")->valueint, k = 0;
        int32_t *want = malloc((size_t)n_want * sizeof *want);
        for (int p = 0; p < 3; p++)
            for (int r = 0; r < reps[p]; r++) {
                const cJSON *x;
                cJSON_ArrayForEach(x, parts[p])
                {
                    cr_assert_lt(k, n_want, "%s: the fixture unrolls to more than n_ids", name);
                    want[k++] = x->valueint;
                }
            }
        cr_assert_eq(k, n_want, "%s: the fixture unrolls to %d ids, not %d", name, k, n_want);

        char dir[1024];
        snprintf(dir, sizeof dir, "%s/tokenizers/%s", getenv("HP_FIXTURES"), name);
        struct hp_error err = {0};
        struct hp_tokenizer *t;
        cr_assert_eq(hp_tokenizer_open(dir, &t, &err), HP_OK, "%s", err.msg);
        struct hp_encoding e;
        cr_assert_eq(hp_tokenizer_encode(t, text, n, NULL, 0, false, &e, &err), HP_OK, "%s", err.msg);
        int first = 0;
        while (first < e.n && first < n_want && e.ids[first] == want[first])
            first++;
        cr_assert(e.n == n_want && first == n_want,
                  "%s case %d (%zu bytes): %d ids, Hugging Face %d; the first difference at id %d (%d, Hugging "
                  "Face %d)",
                  name, cases, n, e.n, n_want, first, first < e.n ? e.ids[first] : -1,
                  first < n_want ? want[first] : -1);
        hp_encoding_free(&e);
        hp_tokenizer_free(t);
        free(want);
        free(text);
        cases++;
    }
    cr_assert_eq(cases, 9);
    cJSON_Delete(all);
    free(txt);
}

/* CPU seconds to encode text with the fixture tokenizer name (no special tokens). */
static double encode_seconds(const char *name, const char *text, size_t n, int *n_ids)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tokenizers/%s", getenv("HP_FIXTURES"), name);
    struct hp_error err = {0};
    struct hp_tokenizer *t;
    cr_assert_eq(hp_tokenizer_open(dir, &t, &err), HP_OK, "%s", err.msg);
    struct hp_encoding e;
    clock_t c0 = clock();
    cr_assert_eq(hp_tokenizer_encode(t, text, n, NULL, 0, false, &e, &err), HP_OK, "%s", err.msg);
    double s = (double)(clock() - c0) / CLOCKS_PER_SEC;
    *n_ids = e.n;
    hp_encoding_free(&e);
    hp_tokenizer_free(t);
    return s;
}

/*
 * Tokenizing is linear in the text. 400k words on one line took 435 s and a word of
 * 100k letters 21 s when splitting and merging were quadratic; now each takes well
 * under a second. The bound, 10 CPU seconds (CPU time, not wall time, so a busy
 * machine does not trip it), is far from both.
 */
Test(tokenizer, long_texts_tokenize_in_linear_time, .timeout = 120)
{
    size_t n;
    int n_ids;
    char *words = repeat("word ", 400000, &n);
    double s = encode_seconds("gpt2-bpe", words, n, &n_ids);
    cr_assert_eq(n_ids, 400001);
    cr_assert_lt(s, 10.0, "400k words on one line took %.1f CPU s", s);
    free(words);
    char *x = repeat("x", 400000, &n);
    s = encode_seconds("llama3-bpe", x, n, &n_ids);
    cr_assert_eq(n_ids, 12500); /* 32 x's a token, as long-cases.json has it for 100k */
    cr_assert_lt(s, 10.0, "a word of 400k letters took %.1f CPU s", s);
    free(x);
}

// --- errors while tokenizing reach the user ----------------------------------------------

static struct hp_tokenizer *open_json(const char *json)
{
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer.json", g_tmp);
    tu_spit(path, json, strlen(json));
    struct hp_error err = {0};
    struct hp_tokenizer *t = NULL;
    cr_assert_eq(hp_tokenizer_open(g_tmp, &t, &err), HP_OK, "%s", err.msg);
    return t;
}

#define SPLIT_BACKTRACKS                                                                                               \
    "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"c\": 1, \"d\": 2, \"e\": 3, \" \": 4}, \"merges\": []},"  \
    " \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(a+)+b|.\"}, \"behavior\": \"Isolated\","    \
    " \"invert\": false}}"

/* A regex that hits PCRE2's match limit used to end the splitting silently (the rest
 * merged into wrong ids); now it is an error naming the file, the pattern and why. */
Test(tokenizer, regex_match_limit_is_an_error, .init = mk, .fini = rm)
{
    struct hp_tokenizer *t = open_json(SPLIT_BACKTRACKS);
    char text[64];
    memset(text, 'a', 30);
    strcpy(text + 30, "c d e");
    struct hp_error err = {0};
    struct hp_encoding e = {(int32_t *)1, NULL, 7};
    cr_assert_eq(hp_tokenizer_encode(t, text, strlen(text), NULL, 0, false, &e, &err), HP_ERR_FORMAT);
    cr_assert(e.ids == NULL && e.n == 0);
    cr_assert(strstr(err.msg, "tokenizer.json") && strstr(err.msg, "(a+)+b|.") && strstr(err.msg, "match limit"),
              "%s", err.msg);
    cr_assert_null(strchr(err.msg, '\n'), "one line: %s", err.msg);
    /* a short enough run still matches: the same tokenizer gives ids where PCRE2 succeeds */
    cr_assert_eq(hp_tokenizer_encode(t, "aac d", 5, NULL, 0, false, &e, &err), HP_OK, "%s", err.msg);
    int32_t want[] = {0, 0, 1, 4, 2};
    cr_assert_eq(e.n, 5);
    cr_assert_arr_eq(e.ids, want, sizeof want);
    hp_encoding_free(&e);
    hp_tokenizer_free(t);

    /* and through the text loader: the held-out file and its document are named too */
    char path[256];
    snprintf(path, sizeof path, "%s/held.txt", g_tmp);
    char doc[80];
    snprintf(doc, sizeof doc, "a c d\n\n%s\n", text);
    tu_spit(path, doc, strlen(doc));
    struct hp_data *d = (struct hp_data *)1;
    cr_assert_neq(hp_data_load_for(path, g_tmp, NULL, 2, &d, &err), HP_OK);
    cr_assert_null(d);
    cr_assert(strstr(err.msg, path) && strstr(err.msg, "line 3") && strstr(err.msg, "match limit"), "%s", err.msg);
}

/* Normalizers that lengthen the text are stopped at the text bound (256 MB) before
 * they allocate past it, not after exponential growth to GBs. */
Test(tokenizer, growing_normalizers_are_bounded, .init = mk, .fini = rm)
{
    /* 40 chained Replace a -> a*64: 64^5 bytes at the fifth step, over the bound */
    char json[8192] = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                      " \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [";
    char aa[65];
    memset(aa, 'a', 64);
    aa[64] = 0;
    for (int i = 0; i < 40; i++)
        snprintf(json + strlen(json), sizeof json - strlen(json),
                 "%s{\"type\": \"Replace\", \"pattern\": {\"String\": \"a\"}, \"content\": \"%s\"}", i ? ", " : "", aa);
    strcat(json, "]}}");
    struct hp_tokenizer *t = open_json(json);
    struct hp_error err = {0};
    struct hp_encoding e;
    cr_assert_eq(hp_tokenizer_encode(t, "a", 1, NULL, 0, false, &e, &err), HP_ERR_FORMAT);
    cr_assert(strstr(err.msg, "tokenizer.json") && strstr(err.msg, "normalizer 5 (Replace)") &&
                  strstr(err.msg, "256 MB"),
              "%s", err.msg);
    hp_tokenizer_free(t);
}

Test(tokenizer, normalizer_strings_must_be_utf8, .init = mk, .fini = rm)
{
    expect_open_fails("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                      " \"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": \"a\"}, \"content\": \"\xc3\"}}",
                      "not valid UTF-8");
    expect_open_fails("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                      " \"added_tokens\": [{\"id\": 0, \"content\": \"\xe2\x82\"}]}",
                      "not valid UTF-8");
}

// --- .txt on encoders and causal models -------------------------------------------------

#include <sys/stat.h>
#include <unistd.h>

#include "tokenizer_int.h"

/* g_tmp/name: a fixture's config and weights (symlinked) beside a small WordPiece vocabulary. */
static void model_with_vocab(const char *fixture, const char *name, char *dir, size_t n)
{
    snprintf(dir, n, "%s/%s", g_tmp, name);
    cr_assert_eq(mkdir(dir, 0777), 0);
    const char *files[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        char src[1024], dst[1200];
        snprintf(src, sizeof src, "%s/%s/%s", getenv("HP_FIXTURES"), fixture, files[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        cr_assert_eq(symlink(src, dst), 0);
    }
    char v[1200];
    snprintf(v, sizeof v, "%s/vocab.txt", dir);
    const char *vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nworld\nthe\ncat\n##s\n";
    tu_spit(v, vocab, strlen(vocab));
}

static const char *const DOCS[] = {"hello world", "the cats hello", "cat"};
static const char TXT[] = "hello world\n\n  \nthe cats\nhello\n\ncat\n";

Test(tokenizer, txt_on_an_encoder_is_a_row_per_document, .init = mk, .fini = rm)
{
    /* a first-time user's sentences attended to each other: an encoder's .txt was packed like an LM's */
    char dir[256], path[256];
    model_with_vocab("bert-encoder", "enc", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/docs.txt", g_tmp);
    tu_spit(path, TXT, strlen(TXT));
    struct hp_error err = {0};
    struct hp_model *m;
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    struct hp_tokenizer *t;
    cr_assert_eq(hp_tokenizer_open(dir, &t, &err), HP_OK, "%s", err.msg);
    struct hp_data *d;
    cr_assert_eq(hp_data_load_for(path, dir, hp_model_get_info(m), 0, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(d->n_seqs, 3, "%d rows for 3 documents", d->n_seqs);
    cr_assert_eq(d->n_dropped, 0);
    cr_assert_not_null(d->attn_mask);
    for (int r = 0; r < 3; r++) {
        struct hp_encoding e;
        cr_assert_eq(hp_tokenizer_encode(t, DOCS[r], strlen(DOCS[r]), NULL, 0, true, &e, &err), HP_OK);
        for (int k = 0; k < d->seq_len; k++) {
            bool real = k < e.n;
            cr_assert_eq(d->attn_mask[(size_t)r * d->seq_len + k], real, "row %d position %d", r, k);
            if (real)
                cr_assert_eq(d->ids[(size_t)r * d->seq_len + k], e.ids[k], "row %d position %d", r, k);
        }
        hp_encoding_free(&e);
    }
    hp_data_free(d);
    /* cut to 4 tokens as Hugging Face truncates: [CLS] the cat [SEP], "##s hello" left out */
    cr_assert_eq(hp_data_load_for(path, dir, hp_model_get_info(m), 4, &d, &err), HP_OK, "%s", err.msg);
    const int32_t want[4] = {2, 6, 7, 3};
    cr_assert_arr_eq(d->ids + 4, want, sizeof want, "row 1: %d %d %d %d", d->ids[4], d->ids[5], d->ids[6], d->ids[7]);
    cr_assert_eq(d->n_dropped, 2, "%lld tokens dropped", (long long)d->n_dropped);
    hp_data_free(d);
    /* the same file read again comes from the cache, with its count */
    cr_assert_eq(hp_data_load_for(path, dir, hp_model_get_info(m), 4, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(d->n_dropped, 2, "the cache lost the count: %lld", (long long)d->n_dropped);
    hp_data_free(d);
    /* a .jsonl row of one text is cut the same way */
    snprintf(path, sizeof path, "%s/docs.jsonl", g_tmp);
    const char *jl = "{\"text\": \"the cats hello\"}\n";
    tu_spit(path, jl, strlen(jl));
    cr_assert_eq(hp_data_load_for(path, dir, hp_model_get_info(m), 4, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_arr_eq(d->ids, want, sizeof want, "jsonl: %d %d %d %d", d->ids[0], d->ids[1], d->ids[2], d->ids[3]);
    cr_assert_eq(d->n_dropped, 2);
    hp_data_free(d);
    hp_tokenizer_free(t);
    hp_model_close(m);
}

Test(tokenizer, txt_on_a_causal_model_is_packed_and_counts_its_remainder, .init = mk, .fini = rm)
{
    char dir[256], path[256];
    model_with_vocab("stories260K", "lm", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/docs.txt", g_tmp);
    tu_spit(path, TXT, strlen(TXT));
    struct hp_error err = {0};
    struct hp_model *m;
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    struct hp_tokenizer *t;
    cr_assert_eq(hp_tokenizer_open(dir, &t, &err), HP_OK, "%s", err.msg);
    int64_t total = 0;
    for (int r = 0; r < 3; r++) {
        struct hp_encoding e;
        cr_assert_eq(hp_tokenizer_encode(t, DOCS[r], strlen(DOCS[r]), NULL, 0, true, &e, &err), HP_OK);
        total += e.n + (hp_tokenizer_separator(t) >= 0);
        hp_encoding_free(&e);
    }
    struct hp_data *d;
    cr_assert_eq(hp_data_load_for(path, dir, hp_model_get_info(m), 4, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_null(d->attn_mask, "packed rows need no padding");
    cr_assert_eq((int64_t)d->n_seqs * 4 + d->n_dropped, total, "%d rows + %lld dropped of %lld tokens", d->n_seqs,
                 (long long)d->n_dropped, (long long)total);
    cr_assert_eq(d->n_dropped, total % 4);
    hp_data_free(d);
    hp_tokenizer_free(t);
    hp_model_close(m);
}
