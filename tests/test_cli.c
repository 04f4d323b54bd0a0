/*
 * test_cli.c -- the headprune command line as a user meets it: output on
 * success, and on bad input exit status 1 with exactly one line on stderr
 * naming the file and the problem (usage mistakes: status 2).
 */
#define _DEFAULT_SOURCE
#include <cjson/cJSON.h>
#include <criterion/criterion.h>

#include "testutil.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static char tmp[64];
static char out[1 << 16], errs[1 << 14];

static void setup(void)
{
    tu_mkdtemp(tmp, sizeof tmp, "cli");
}

static void teardown(void)
{
    tu_rmrf(tmp);
}

TestSuite(cli, .init = setup, .fini = teardown);

static void read_all(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f);
    size_t r = fread(buf, 1, n - 1, f);
    buf[r] = 0;
    fclose(f);
}

/* Run headprune with args (a shell fragment); returns its exit status. */
static int hp(const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s/.. && %s %s >%s/out 2>%s/err </dev/null", getenv("HP_TESTS"),
             getenv("HP_HEADPRUNE"), args, tmp, tmp);
    int st = system(cmd);
    char p[128];
    snprintf(p, sizeof p, "%s/out", tmp);
    read_all(p, out, sizeof out);
    snprintf(p, sizeof p, "%s/err", tmp);
    read_all(p, errs, sizeof errs);
    cr_assert(WIFEXITED(st), "headprune did not exit normally (signal?) for: %s", args);
    return WEXITSTATUS(st);
}

static void write_file(const char *name, const char *text)
{
    char p[128];
    snprintf(p, sizeof p, "%s/%s", tmp, name);
    FILE *f = fopen(p, "w");
    cr_assert(f);
    fputs(text, f);
    fclose(f);
}

static void expect_error(const char *args, const char *words)
{
    int rc = hp(args);
    cr_assert_eq(rc, 1, "exit %d for '%s' (stderr: %s)", rc, args, errs);
    cr_assert(strncmp(errs, "headprune: ", 11) == 0, "stderr: %s", errs);
    char *nl = strchr(errs, '\n');
    cr_assert(nl && nl[1] == '\0', "expected one line on stderr, got: %s", errs);
    cr_assert(strstr(errs, words), "stderr does not say '%s': %s", words, errs);
    cr_assert_str_empty(out, "nothing on stdout on failure, got: %s", out);
}

#define STORIES "tests/fixtures/stories260K"

Test(cli, eval_json_has_the_promised_fields)
{
    cr_assert_eq(hp("eval --model " STORIES " --data " STORIES "/data.npy --mask 0.3,kv:3.1 --json --threads 1"), 0,
                 "%s", errs);
    cJSON *o = cJSON_Parse(out);
    cr_assert(o, "not JSON: %s", out);
    const char *keys[] = {"loss", "ppl", "acc", "kl", "n_tokens", "n_seqs", "n_ablated"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(o, keys[i])), "no %s in %s", keys[i], out);
    cr_assert_eq(cJSON_GetObjectItem(o, "n_ablated")->valueint, 3);
    cr_assert_eq(cJSON_GetObjectItem(o, "n_seqs")->valueint, 8);
    cr_assert_eq(cJSON_GetObjectItem(o, "n_tokens")->valueint, 8 * 127);
    cr_assert_gt(cJSON_GetObjectItem(o, "kl")->valuedouble, 0.0);
    cJSON *ps = cJSON_GetObjectItem(o, "per_seq");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(ps, "loss")), 8);
    cJSON_Delete(o);
}

Test(cli, keep_masks_everything_else)
{
    cr_assert_eq(hp("eval --model " STORIES " --data " STORIES "/data.npy --keep 0.*,1.0 --json"), 0, "%s", errs);
    cJSON *o = cJSON_Parse(out);
    cr_assert_eq(cJSON_GetObjectItem(o, "n_ablated")->valueint, 40 - 9);
    cJSON_Delete(o);
}

Test(cli, inspect_reports_gqa)
{
    cr_assert_eq(hp("inspect --model " STORIES), 0, "%s", errs);
    cr_assert(strstr(out, "KV heads       4 per layer (grouped-query attention)"), "%s", out);
    cr_assert(strstr(out, "query heads    8 per layer, 40 in all"), "%s", out);
    cr_assert(strstr(out, "parameters     260032"), "%s", out);
}

Test(cli, help_explains)
{
    cr_assert_eq(hp("eval --help"), 0);
    cr_assert(strstr(out, "--ablation"));
    cr_assert(strstr(out, "kv:LAYER.GROUP"));
    cr_assert_eq(hp("--help"), 0);
    cr_assert(strstr(out, "inspect"));
}

Test(cli, usage_mistakes_exit_2)
{
    cr_assert_eq(hp("eval --model " STORIES), 2);
    cr_assert_eq(hp("eval --model " STORIES " --data x.npy --ablation half"), 2);
    cr_assert_eq(hp("frobnicate"), 2);
}

Test(cli, token_id_outside_vocabulary)
{
    write_file("big.jsonl", "{\"ids\": [1, 2, 3]}\n{\"ids\": [1, 600, 3]}\n");
    char a[512];
    snprintf(a, sizeof a, "eval --model " STORIES " --data %s/big.jsonl", tmp);
    expect_error(a, "big.jsonl");
    cr_assert(strstr(errs, "600") && strstr(errs, "vocabulary"), "%s", errs);
}

Test(cli, empty_data)
{
    write_file("empty.jsonl", "");
    char a[512];
    snprintf(a, sizeof a, "eval --model " STORIES " --data %s/empty.jsonl", tmp);
    expect_error(a, "empty.jsonl");
}

Test(cli, ragged_data)
{
    write_file("ragged.jsonl", "{\"ids\": [1, 2, 3]}\n{\"ids\": [1, 2]}\n");
    char a[512];
    snprintf(a, sizeof a, "eval --model " STORIES " --data %s/ragged.jsonl", tmp);
    expect_error(a, "ragged.jsonl:2");
}

Test(cli, missing_data_file)
{
    expect_error("eval --model " STORIES " --data no/such/file.npy", "no/such/file.npy");
}

Test(cli, mask_layer_that_does_not_exist)
{
    expect_error("eval --model " STORIES " --data " STORIES "/data.npy --mask 9.0", "layer 9 does not exist");
}

Test(cli, mask_head_that_does_not_exist)
{
    expect_error("eval --model " STORIES " --data " STORIES "/data.npy --mask 0.8", "head 8 does not exist");
}

Test(cli, mask_kv_group_that_does_not_exist)
{
    expect_error("eval --model " STORIES " --data " STORIES "/data.npy --mask kv:0.4", "KV group 4 does not exist");
}

Test(cli, unknown_model_type)
{
    write_file("config.json", "{\"model_type\": \"t5\"}");
    char a[512];
    snprintf(a, sizeof a, "inspect --model %s", tmp);
    expect_error(a, "model_type \"t5\" is not supported");
}

Test(cli, sequences_longer_than_the_model)
{
    char a[512];
    snprintf(a, sizeof a, "eval --model tests/fixtures/gpt2-tiny --data " STORIES "/data.npy");
    expect_error(a, "exceed the model's 64 positions");
}

// --- plans, runs, queries ---------------------------------------------------------

Test(cli, plan_prints_jobs_and_cost)
{
    cr_assert_eq(hp("plan tests/plans/sweep.yaml"), 0, "%s", errs);
    cr_assert(strstr(out, "study     pairs            pairs      18 jobs"), "%s", out);
    cr_assert(strstr(out, "jobs      71 expanded"), "%s", out);
    cr_assert(strstr(out, "GFLOP per evaluation"), "%s", out);
}

Test(cli, plan_with_unknown_key)
{
    write_file("bad.yaml", "name: x\nmodle: ../m\ndata: d.npy\nstudies: [single]\n");
    char a[512];
    snprintf(a, sizeof a, "plan %s/bad.yaml", tmp);
    expect_error(a, "bad.yaml:2:1: unknown key 'modle' (did you mean 'model'?)");
}

Test(cli, plan_malformed_yaml)
{
    write_file("bad.yaml", "name: x\nstudies: [single\n");
    char a[512];
    snprintf(a, sizeof a, "run %s/bad.yaml --db %s/r.db", tmp, tmp);
    expect_error(a, "bad.yaml:");
}

Test(cli, plan_head_out_of_range)
{
    char p[256];
    snprintf(p, sizeof p, "name: x\nmodel: %s/../tests/fixtures/llama-gqa\ndata: %s/../tests/fixtures/llama-gqa/data.npy\n"
             "studies:\n  - single: {layers: [0], heads: [7]}\n", getenv("HP_TESTS"), getenv("HP_TESTS"));
    write_file("range.yaml", p);
    char a[512];
    snprintf(a, sizeof a, "run %s/range.yaml --db %s/r.db", tmp, tmp);
    expect_error(a, "head 7 does not exist");
}

Test(cli, run_with_missing_model)
{
    write_file("nomodel.yaml", "name: x\nmodel: no-such-model\ndata: d.npy\nstudies: [single]\n");
    char a[512];
    snprintf(a, sizeof a, "run %s/nomodel.yaml --db %s/r.db", tmp, tmp);
    expect_error(a, "no-such-model");
}

Test(cli, run_with_missing_data)
{
    char p[256];
    snprintf(p, sizeof p, "name: x\nmodel: %s/../tests/fixtures/llama-gqa\ndata: nothing-here.npy\nstudies: [single]\n",
             getenv("HP_TESTS"));
    write_file("nodata.yaml", p);
    char a[512];
    snprintf(a, sizeof a, "run %s/nodata.yaml --db %s/r.db", tmp, tmp);
    expect_error(a, "nothing-here.npy");
}

Test(cli, run_into_missing_folder)
{
    char a[512];
    snprintf(a, sizeof a, "run tests/plans/sweep-small.yaml --db %s/no/dir/r.db", tmp);
    expect_error(a, "does not exist");
}

Test(cli, query_missing_database)
{
    char a[512];
    snprintf(a, sizeof a, "query heads --db %s/none.db", tmp);
    expect_error(a, "none.db");
}

Test(cli, run_then_query_every_kind_and_format)
{
    char a[512];
    snprintf(a, sizeof a, "run tests/plans/sweep.yaml --db %s/q.db --quiet", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert(strstr(out, "sweep 1: "), "%s", out);
    const char *kinds[] = {"sweeps", "curve", "heads --top 3", "redundancy --eps 0.05", "pairs --top 2"};
    const char *fmts[] = {"table", "csv", "json"};
    for (int k = 0; k < 5; k++)
        for (int f = 0; f < 3; f++) {
            snprintf(a, sizeof a, "query %s --db %s/q.db --format %s", kinds[k], tmp, fmts[f]);
            cr_assert_eq(hp(a), 0, "%s: %s", a, errs);
            cr_assert_gt(strlen(out), 20, "%s printed nothing", a);
            if (f == 2) {
                cJSON *j = cJSON_Parse(out);
                cr_assert(cJSON_IsArray(j) && cJSON_GetArraySize(j) > 0, "%s: not a JSON array: %s", a, out);
                cJSON_Delete(j);
            }
        }
    snprintf(a, sizeof a, "query heads --db %s/q.db --top 3 --format csv", tmp);
    cr_assert_eq(hp(a), 0);
    int lines = 0;
    for (char *c = out; *c; c++)
        lines += *c == '\n';
    cr_assert_eq(lines, 4, "header + 3 rows expected: %s", out);
    snprintf(a, sizeof a, "query sql --db %s/q.db \"SELECT count(*) AS n FROM jobs WHERE kind = 'single'\"", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert(strstr(out, "18"), "%s", out);
    snprintf(a, sizeof a, "query sql --db %s/q.db \"DELETE FROM results\"", tmp);
    cr_assert_eq(hp(a), 1, "a write was not refused");
}

Test(cli, eval_threads_do_not_change_numbers)
{
    /* the default model is large enough for the threaded row-wise loops to engage */
    const char *base = "eval --model models/default --data models/default/heldout.npy --mask 0.1,3.1 --json --threads ";
    char a[512], first[1 << 16];
    snprintf(a, sizeof a, "%s1", base);
    cr_assert_eq(hp(a), 0, "%s", errs);
    snprintf(first, sizeof first, "%s", out);
    snprintf(a, sizeof a, "%s2", base);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cJSON *x = cJSON_Parse(first), *y = cJSON_Parse(out);
    const char *keys[] = {"loss", "acc", "kl", "n_tokens"};
    for (int i = 0; i < 4; i++)
        cr_assert(cJSON_GetObjectItem(x, keys[i])->valuedouble == cJSON_GetObjectItem(y, keys[i])->valuedouble,
                  "%s differs between 1 and 2 threads", keys[i]);
    char *px = cJSON_PrintUnformatted(cJSON_GetObjectItem(x, "per_seq"));
    char *py = cJSON_PrintUnformatted(cJSON_GetObjectItem(y, "per_seq"));
    cr_assert_str_eq(px, py, "per-sequence values differ between 1 and 2 threads");
    free(px);
    free(py);
    cJSON_Delete(x);
    cJSON_Delete(y);
}

#define MINILM_TOK "tests/fixtures/tokenizers/minilm"

Test(cli, tokenize_prints_ids_per_line)
{
    char args[512];
    write_file("t.txt", "Hello, world!\nI don't know.\n");
    snprintf(args, sizeof args, "tokenize --model " MINILM_TOK " --special %s/t.txt", tmp);
    cr_assert_eq(hp(args), 0, "%s", errs);
    /* the ids Hugging Face's tokenizers gives all-MiniLM-L6-v2 for these lines */
    cr_assert_str_eq(out, "101 7592 1010 2088 999 102\n101 1045 2123 1005 1056 2113 1012 102\n");
}

Test(cli, tokenize_refuses_invalid_utf8_naming_the_line)
{
    char args[512];
    write_file("bad.txt", "fine\nnot \xff fine\n");
    snprintf(args, sizeof args, "tokenize --model " MINILM_TOK " %s/bad.txt", tmp);
    int rc = hp(args);
    cr_assert_eq(rc, 1, "exit %d (stderr: %s)", rc, errs);
    cr_assert(strstr(errs, "bad.txt:2: text is not valid UTF-8 at byte 4"), "%s", errs);
}

Test(cli, tokenize_without_tokenizer_files)
{
    char args[512];
    snprintf(args, sizeof args, "tokenize --model %s", tmp);
    expect_error(args, "no tokenizer.json, vocab.txt or vocab.json + merges.txt");
}

#define BERT_CLS "tests/fixtures/bert-cls"

Test(cli, classifier_reports_accuracy_on_labelled_rows)
{
    cr_assert_eq(hp("eval --model " BERT_CLS " --data " BERT_CLS "/data.jsonl --mask 0.1 --json"), 0, "%s", errs);
    cr_assert(strstr(out, "\"acc\""), "%s", out);
}

Test(cli, classifier_without_labels)
{
    char args[512];
    write_file("nolabel.jsonl", "{\"ids\": [2, 5, 6]}\n{\"ids\": [2, 7, 8]}\n");
    snprintf(args, sizeof args, "eval --model " BERT_CLS " --data %s/nolabel.jsonl", tmp);
    expect_error(args, "is a sequence classifier (3 classes) but the data has no \"label\" per row");
}

Test(cli, classifier_label_out_of_range)
{
    char args[512];
    write_file("badlabel.jsonl", "{\"ids\": [2, 5, 6], \"label\": 1}\n{\"ids\": [2, 7, 8], \"label\": 7}\n");
    snprintf(args, sizeof args, "eval --model " BERT_CLS " --data %s/badlabel.jsonl", tmp);
    expect_error(args, "label 7 of row 1 is not one of the model's 3 classes (0..2)");
}
