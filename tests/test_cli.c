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
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

/* Run headprune with args (a shell fragment) from the repository's root; its exit status. */
static int hp(const char *args)
{
    int rc = tu_headprune(NULL, args, tmp, out, sizeof out, errs, sizeof errs);
    cr_assert_lt(rc, 128, "headprune did not exit normally (signal?) for: %s", args);
    return rc;
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
    /* the unmasked model beside the variant, and the change: checked against a run without a mask */
    cJSON *u = cJSON_GetObjectItem(o, "unmasked"), *ch = cJSON_GetObjectItem(o, "change");
    cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(u, "loss")) && cJSON_IsNumber(cJSON_GetObjectItem(ch, "loss")),
              "no unmasked loss or change in %s", out);
    double masked = cJSON_GetObjectItem(o, "loss")->valuedouble, unmasked = cJSON_GetObjectItem(u, "loss")->valuedouble;
    cr_assert_eq(cJSON_GetObjectItem(ch, "loss")->valuedouble, masked - unmasked);
    cJSON_Delete(o);
    cr_assert_eq(hp("eval --model " STORIES " --data " STORIES "/data.npy --json --threads 1"), 0, "%s", errs);
    o = cJSON_Parse(out);
    cr_assert_eq(cJSON_GetObjectItem(o, "loss")->valuedouble, unmasked, "unmasked %.17g alone, %.17g beside a variant",
                 cJSON_GetObjectItem(o, "loss")->valuedouble, unmasked);
    cr_assert_null(cJSON_GetObjectItem(o, "change"), "nothing ablated, yet a change is reported: %s", out);
    cJSON_Delete(o);
    /* and on the terminal */
    cr_assert_eq(hp("eval --model " STORIES " --data " STORIES "/data.npy --mask 0.3 --threads 1"), 0, "%s", errs);
    cr_assert(strstr(out, "\nunmasked  loss ") && strstr(out, "; change: loss +"), "%s", out);
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

/* Gemma 2: the window named with the layers it is on, and the soft caps */
Test(cli, inspect_reports_gemma_windows_and_caps)
{
    char a[1200];
    snprintf(a, sizeof a, "inspect --model %s/gemma2-softcap", getenv("HP_FIXTURES"));
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert(strstr(out, "window         6 (each token attends to itself and the 5 before it) on layers 0, 2; the "
                          "others see every key"), "%s", out);
    cr_assert(strstr(out, "soft caps      scores 2, logits 3"), "%s", out);
    snprintf(a, sizeof a, "inspect --model %s/gemma2-softcap --json", getenv("HP_FIXTURES"));
    cr_assert_eq(hp(a), 0, "%s", errs);
    cJSON *o = cJSON_Parse(out), *ls = cJSON_GetObjectItem(o, "window_layers");
    cr_assert(cJSON_GetArraySize(ls) == 2 && cJSON_GetArrayItem(ls, 1)->valueint == 2, "%s", out);
    cr_assert_eq(cJSON_GetObjectItem(o, "logit_softcap")->valuedouble, 3.0);
    cJSON_Delete(o);
}

/* Where the tokenizer comes from, in the table and the JSON alike: none, and one that cannot be read (inspect
 * goes on: token ids need no tokenizer) */
Test(cli, inspect_reports_the_tokenizer)
{
    char a[1200], src[1100], dst[1100];
    cr_assert_eq(hp("inspect --model tests/fixtures/gpt2-tiny"), 0, "%s", errs);
    cr_assert(strstr(out, "\ntokenizer      none (text needs one"), "%s", out);
    cr_assert_eq(hp("inspect --model tests/fixtures/gpt2-tiny --json"), 0, "%s", errs);
    cJSON *o = cJSON_Parse(out);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(o, "tokenizer")), "%s", out);
    cr_assert_null(cJSON_GetObjectItem(o, "tokenizer_error"), "%s", out);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(o, "gguf")), "%s", out);
    cJSON_Delete(o);
    /* the same model beside a tokenizer.json cut short */
    snprintf(dst, sizeof dst, "%s/m", tmp);
    cr_assert_eq(mkdir(dst, 0755), 0);
    for (int i = 0; i < 2; i++) {
        const char *f = i ? "model.safetensors" : "config.json";
        snprintf(src, sizeof src, "%s/fixtures/gpt2-tiny/%s", getenv("HP_TESTS"), f);
        snprintf(dst, sizeof dst, "%s/m/%s", tmp, f);
        cr_assert_eq(symlink(src, dst), 0, "%s", dst);
    }
    write_file("m/tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\"");
    snprintf(a, sizeof a, "inspect --model %s/m", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert(strstr(out, "\ntokenizer      not usable: ") && strstr(out, "m/tokenizer.json"), "%s", out);
    snprintf(a, sizeof a, "inspect --model %s/m --json", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    o = cJSON_Parse(out);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(o, "tokenizer")), "%s", out);
    cJSON *why = cJSON_GetObjectItem(o, "tokenizer_error");
    cr_assert(cJSON_IsString(why) && strstr(why->valuestring, "m/tokenizer.json"), "%s", out);
    cJSON_Delete(o);
}

Test(cli, help_explains)
{
    cr_assert_eq(hp("eval --help"), 0);
    cr_assert(strstr(out, "--ablation"));
    cr_assert(strstr(out, "kv:LAYER.GROUP"));
    /* every .npy dtype data.c reads (test_data.c reads each, uint32 in npy_uint32_and_python2_shape) */
    cr_assert(strstr(out, ".npy (int32/int64/uint16/uint32,"), "%s", out);
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
    /* gradient studies, by their forward+backward passes: 1 each, one a step for a gradient-ranked curve but
     * the last point and a step that prunes all that is left (12 heads, 3 a step: 5 points, 3 backwards) */
    cr_assert(strstr(out, "study     importance       importance 1 forward+backward pass (heads, normalize layer)"),
              "%s", out);
    cr_assert(strstr(out, "study     importance-kv    importance 1 forward+backward pass (KV groups, normalize none)"),
              "%s", out);
    cr_assert(strstr(out, "study     attribution      attribution 1 forward+backward pass (heads, AtP)"), "%s", out);
    cr_assert(strstr(out, "study     iterative-grad   iterative  5 evaluations + 3 forward+backward passes (ranked by "
                          "gradient importance, normalize layer)"), "%s", out);
    cr_assert(strstr(out, "study     screen           screen     1 forward+backward pass + at most 12 evaluations (the "
                          "exact top 3 of 12 heads, ranked by raw importance; walk 2 at a time, audits of 4)"), "%s",
              out);
    cr_assert(strstr(out, ", and 8 forward+backward passes\n"), "%s", out);
    cr_assert(strstr(out, "GFLOP per evaluation"), "%s", out);
    /* and in seconds, from the machine's measured speed */
    const char *t = strstr(out, "\ntime      about ");
    cr_assert(t && strstr(t, "GFLOP/s"), "no time estimate: %s", out);
    cr_assert(t[17] >= '0' && t[17] <= '9', "the estimate is not a duration: %.60s", t + 1);
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
                cJSON *j = cJSON_Parse(out), *rows = cJSON_GetObjectItem(j, "rows");
                cr_assert(cJSON_IsArray(rows) && cJSON_GetArraySize(rows) > 0 &&
                              cJSON_IsArray(cJSON_GetObjectItem(j, "summary")),
                          "%s: not {\"rows\": [...], \"summary\": [...]}: %s", a, out);
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
    /* SQL that never ends stops at --timeout, in one line */
    snprintf(a, sizeof a, "query sql --db %s/q.db --timeout 1 \"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL "
             "SELECT x + 1 FROM c) SELECT count(*) FROM c\"", tmp);
    time_t t0 = time(NULL);
    cr_assert_eq(hp(a), 1, "%s", errs);
    cr_assert_lt(time(NULL) - t0, 5);
    cr_assert(strstr(errs, "q.db: reading stopped at its time limit") && strchr(errs, '\n') == errs + strlen(errs) - 1,
              "%s", errs);
    /* the run started with a relative plan path: the database names the files absolutely */
    snprintf(a, sizeof a, "query --db %s/q.db --format csv sql \"SELECT (SELECT path FROM models) || ' ' || "
             "(SELECT path FROM datasets) || ' ' || (SELECT path FROM plans)\"", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert(strstr(out, "\n/") && strstr(out, "/tests/fixtures/llama-gqa /") && strstr(out, "/tests/plans/sweep.yaml"),
              "paths are not absolute: %s", out);
    /* each curve step names the units it pruned (KV groups as kv:L.G), as many as its k grew */
    snprintf(a, sizeof a, "query curve --db %s/q.db --format json", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cJSON *answer = cJSON_Parse(out), *rows = cJSON_GetObjectItem(answer, "rows");
    cr_assert(cJSON_IsArray(rows), "%s", out);
    int prev_k = 0, kv_rows = 0, head_rows = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, rows)
    {
        const char *study = cJSON_GetObjectItem(row, "study")->valuestring;
        if (strncmp(study, "iterative", 9) != 0)
            continue;
        cr_assert_null(cJSON_GetObjectItem(row, "mask"), "the whole mask without --full-mask");
        int k = (int)cJSON_GetObjectItem(row, "k")->valuedouble;
        const cJSON *pr = cJSON_GetObjectItem(row, "pruned");
        const char *pruned = cJSON_IsString(pr) ? pr->valuestring : "";
        if (k == 0) {
            cr_assert_str_empty(pruned, "step 0 pruned %s", pruned);
            prev_k = 0;
            continue;
        }
        int labels = 1, kv_labels = 0;
        for (const char *c = pruned; *c; c++)
            labels += *c == ',';
        for (const char *c = pruned; (c = strstr(c, "kv:")); c += 3)
            kv_labels++;
        cr_assert_eq(labels, k - prev_k, "%s: k went %d -> %d but it pruned %s", study, prev_k, k, pruned);
        if (strcmp(study, "iterative-kv") == 0) {
            cr_assert_eq(kv_labels, labels, "KV steps name query heads: %s", pruned);
            kv_rows++;
        } else {
            cr_assert_eq(kv_labels, 0, "%s", pruned);
            head_rows++;
        }
        prev_k = k;
    }
    cr_assert(kv_rows > 0 && head_rows > 0, "no steps: %s", out);
    cJSON_Delete(answer);
    snprintf(a, sizeof a, "query curve --db %s/q.db --format json --full-mask", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert(strstr(out, "\"mask\":"), "--full-mask shows no mask: %s", out);
    /* options may come before the kind, as a first-time user typed them */
    snprintf(a, sizeof a, "query heads --db %s/q.db --top 3 --format csv", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    char after[sizeof out];
    snprintf(after, sizeof after, "%s", out);
    snprintf(a, sizeof a, "query --db %s/q.db --top 3 --format csv heads", tmp);
    cr_assert_eq(hp(a), 0, "%s: %s", a, errs);
    cr_assert_str_eq(out, after, "options before the kind answer differently");
    snprintf(a, sizeof a, "query --db %s/q.db sql \"SELECT count(*) AS n FROM jobs WHERE kind = 'single'\"", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert(strstr(out, "18"), "%s", out);
}

/* A plan of one single study over FIXTURE (a folder of tests/fixtures with its data.npy), ablated so. */
static void single_plan(const char *file, const char *name, const char *fixture, const char *ablation)
{
    char p[1024];
    snprintf(p, sizeof p, "name: %s\nmodel: %s/%s\ndata: %s/%s/data.npy\nablation: %s\nstudies: [single]\n", name,
             getenv("HP_FIXTURES"), fixture, getenv("HP_FIXTURES"), fixture, ablation);
    write_file(file, p);
}

/* The cell of the CSV row whose first cell is key (strtok-free: the cells hold no commas). */
static void csv_cell_of(const char *csv, const char *key, int col, char *buf, size_t n)
{
    char start[64];
    snprintf(start, sizeof start, "\n%s,", key);
    const char *row = strstr(csv, start);
    cr_assert(row, "no row %s in %s", key, csv);
    row++;
    for (int c = 0; c < col; c++) {
        row = strchr(row, ',');
        cr_assert(row, "row %s has no column %d", key, col);
        row++;
    }
    size_t len = strcspn(row, ",\n");
    cr_assert_lt(len, n);
    memcpy(buf, row, len);
    buf[len] = 0;
}

Test(cli, query_compare_sets_study_and_matrix)
{
    char a[1024];
    // sweep 1 of q.db: every study kind; 2: mean ablation of the same model; 3: a model of another shape
    snprintf(a, sizeof a, "run tests/plans/sweep.yaml --db %s/q.db --quiet --threads 1", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    single_plan("mean.yaml", "mean", "llama-gqa", "mean");
    single_plan("small.yaml", "small", "gpt2-noprefix", "zero");
    single_plan("sharded.yaml", "sharded", "llama-gqa-sharded", "zero");
    snprintf(a, sizeof a, "run %s/mean.yaml --db %s/q.db --quiet --threads 1", tmp, tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    snprintf(a, sizeof a, "run %s/small.yaml --db %s/q.db --quiet --threads 1", tmp, tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    snprintf(a, sizeof a, "run %s/sharded.yaml --db %s/s.db --quiet --threads 1", tmp, tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);

    // compare in every format, per unit and per layer
    const char *views[] = {"", " --by layer", " --top 3"};
    const char *fmts[] = {"table", "csv", "json"};
    for (int v = 0; v < 3; v++)
        for (int f = 0; f < 3; f++) {
            snprintf(a, sizeof a, "query compare --db %s/q.db --sweep 1 --sweep2 2%s --format %s", tmp, views[v],
                     fmts[f]);
            cr_assert_eq(hp(a), 0, "%s: %s", a, errs);
            if (f == 0)
                cr_assert(strstr(out, "# A = sweep 1 of") && strstr(out, "zero ablation, study single), B = sweep 2") &&
                              strstr(out, "mean ablation") && strstr(out, "Spearman rho"),
                          "%s: %s", a, out);
            if (f == 2) {
                cJSON *j = cJSON_Parse(out), *rows = cJSON_GetObjectItem(j, "rows"), *row;
                cJSON *sum = cJSON_GetObjectItem(j, "summary");
                cr_assert(cJSON_IsArray(rows) && cJSON_GetArraySize(sum) == 1, "%s: not one summary: %s", a, out);
                cJSON *all = cJSON_GetArrayItem(sum, 0);
                cr_assert_str_eq(cJSON_GetObjectItem(all, "label")->valuestring, "all");
                cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(all, "rho")), "%s", out);
                cJSON_ArrayForEach(row, rows) /* units (or layers) only */
                    cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(row, "layer")), "%s: a row without a layer: %s", a,
                              out);
                cJSON_Delete(j);
            }
        }
    snprintf(a, sizeof a, "query compare --db %s/q.db --sweep 1 --sweep2 2 --format csv", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    int lines = 0;
    for (char *c = out; *c; c++)
        lines += *c == '\n';
    cr_assert_eq(lines, 13, "header and 12 heads (3 x 4); the summary all is no row of the CSV: %s", out);
    cr_assert_null(strstr(out, "\nall,"), "%s", out);

    // the same weights read from shards, in another database: no difference, the same ranking
    snprintf(a, sizeof a, "query compare --db %s/q.db --sweep 1 --db2 %s/s.db --format csv", tmp, tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    char c[64];
    csv_cell_of(out, "1.2", 5, c, sizeof c);
    cr_assert_str_eq(c, "0", "%s", out);
    snprintf(a, sizeof a, "query compare --db %s/q.db --sweep 1 --db2 %s/s.db --format json", tmp, tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cJSON *j = cJSON_Parse(out), *all = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "summary"), 0);
    cr_assert(all && !strcmp(cJSON_GetObjectItem(all, "label")->valuestring, "all"), "%s", out);
    cr_assert(cJSON_GetObjectItem(all, "diff")->valuedouble == 0 && cJSON_GetObjectItem(all, "rho")->valuedouble == 1 &&
                  cJSON_GetObjectItem(all, "tau")->valuedouble == 1, "diff, rho, tau: %s", out);
    cJSON_Delete(j);

    // refusals: another shape; one sweep with itself; KV groups against heads
    snprintf(a, sizeof a, "query compare --db %s/q.db --sweep 1 --sweep2 3", tmp);
    expect_error(a, "of a model with 3 layers x 4 heads but sweep 3 of");
    snprintf(a, sizeof a, "query compare --db %s/q.db", tmp);
    expect_error(a, "A and B are both sweep 3");
    snprintf(a, sizeof a, "query compare --db %s/q.db --sweep 1 --sweep2 2 --study single-kv", tmp);
    expect_error(a, "sweep 2 has no single study 'single-kv' (its single studies: single; sweep 1 has it");
    snprintf(a, sizeof a, "query compare --db %s/q.db --sweep 1 --sweep2 2 --study single-kv --study2 single", tmp);
    expect_error(a, "ablates KV groups but study single of sweep 2");

    // heads: one study, by default the one over query heads
    snprintf(a, sizeof a, "query heads --db %s/q.db --sweep 1 --format csv", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert(!strstr(out, "single-kv") && !strstr(out, "kv:"), "KV groups ranked with heads: %s", out);
    snprintf(a, sizeof a, "query heads --db %s/q.db --sweep 1 --study single-kv --format csv", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    lines = 0;
    for (char *p = out; *p; p++)
        lines += *p == '\n';
    cr_assert_eq(lines, 7, "header and 3 x 2 KV groups: %s", out);
    cr_assert(strstr(out, "single-kv,kv:"), "%s", out);
    snprintf(a, sizeof a, "query heads --db %s/q.db --sweep 1", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert(strstr(out, "study single (query heads)") && strstr(out, "(choose one with --study)"), "%s", out);

    // the matrix: a note, a header of the units, a rule, a row a layer, columns aligned
    snprintf(a, sizeof a, "query heads --db %s/q.db --sweep 1 --format matrix", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    char *line[8] = {0};
    int n = 0;
    for (char *p = strtok(out, "\n"); p && n < 8; p = strtok(NULL, "\n"))
        line[n++] = p;
    cr_assert_eq(n, 6, "note, header, rule, 3 layers");
    cr_assert(line[0][0] == '#', "%s", line[0]);
    cr_assert(strncmp(line[1], "layer", 5) == 0 && strstr(line[1], "0") && strstr(line[1], "3"), "%s", line[1]);
    for (int i = 3; i < 6; i++) {
        cr_assert_eq(strlen(line[i]), strlen(line[1]), "row %d not aligned with the header: '%s' / '%s'", i, line[i],
                     line[1]);
        char want[8];
        snprintf(want, sizeof want, "%d", i - 3);
        cr_assert_eq(atoi(line[i]), i - 3, "row %d is not layer %s: %s", i, want, line[i]);
    }

    // sets of the explicit study; the newest sweep lacks one and the error says which has it
    snprintf(a, sizeof a, "query sets --db %s/q.db --sweep 1 --format csv", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert(strstr(out, "study,set,heads,loss,effect,ci_lo,ci_hi,seqs,p,mask\n"), "%s", out);
    cr_assert(strstr(out, ",early,4,") && strstr(out, ",late-kv,2,") && strstr(out, ",mix,3,"), "%s", out);
    snprintf(a, sizeof a, "query sets --db %s/q.db", tmp);
    expect_error(a, "sweep 3 (the newest) has no explicit study (sweep 1 does: use --sweep 1)");
    snprintf(a, sizeof a, "query curve --db %s/q.db --sweep 1 --study iterative-kv --format csv", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert(strstr(out, "\niterative-kv,") && !strstr(out, "\niterative,") && !strstr(out, "\nrandom,"), "%s", out);
}

Test(cli, query_option_mistakes_say_so_once)
{
    // getopt's own complaint came first, then ours: two messages for one mistake
    const char *bad[] = {"query heads --db x.db --bogus",   "query heads --db",
                         "query heads --db x.db -x",        "query heads --db x.db --db2 y.db",
                         "query curve --db x.db --format matrix", "query heads --db x.db --format matrix --top 3",
                         "query compare --db x.db --by column",   "query redundancy --db x.db --study single",
                         "query compare --db x.db --sweep2 0",    "query compare --db x.db --by layer --top 2",
                         "query heads --db x.db --study ''",      "query frobnicate --db x.db"};
    const char *said[] = {"unknown option '--bogus'", "option '--db' needs a value", "unknown option '-x'",
                          "--db2, --sweep2, --study2 and --by are for compare", "--format matrix is for heads",
                          "--top does not apply to --format matrix", "--by must be head or layer",
                          "--study is for curve, heads, sets, compare, importance, attribution, roles, gates, patching, screen, "
                          "self-repair, edges and circuit",
                          "--sweep2 must be a sweep id, an integer from 1 to 1073741824",
                          "--top does not apply to compare --by layer",
                          "--study must name a study",
                          "KIND must be sweeps, curve, heads, sets, compare, redundancy, pairs, importance, attribution, "
                          "roles, gates, patching, screen, self-repair, edges, circuit or sql"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = hp(bad[i]);
        cr_assert_eq(rc, 2, "exit %d for '%s' (stderr: %s)", rc, bad[i], errs);
        cr_assert(strncmp(errs, "headprune query: ", 17) == 0 && strstr(errs, said[i]), "for '%s': %s", bad[i], errs);
        char *nl = strchr(errs, '\n');
        cr_assert(nl && strcmp(nl + 1, "Try 'headprune query --help'.\n") == 0, "one message, then the hint: %s",
                  errs);
    }
    cr_assert_eq(hp("query --help"), 0);
    const char *words[] = {"compare", "--db2", "--sweep2", "--study2", "--by layer", "sets", "--study NAME", "matrix",
                           "Spearman", "Kendall"};
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        cr_assert(strstr(out, words[i]), "--help does not mention %s", words[i]);
}

Test(cli, run_tells_repeats_within_the_plan_from_earlier_results)
{
    /* a fresh database: a study that repeats another's variants finds them already done, but
     * by this run, not an earlier one (the first-time user read "33 already in the database") */
    char a[512];
    snprintf(a, sizeof a, "name: twice\nmodel: %s/llama-gqa\ndata: %s/llama-gqa/data.npy\n"
             "studies: [single, {single: {name: again}}]\n", getenv("HP_FIXTURES"), getenv("HP_FIXTURES"));
    write_file("twice.yaml", a);
    snprintf(a, sizeof a, "run %s/twice.yaml --db %s/t.db --quiet --threads 1", tmp, tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert(strstr(out, "(13 run, 12 repeated within the plan, 0 already in the database)"), "%s", out);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert(strstr(out, "(0 run, 0 repeated within the plan, 25 already in the database)"), "%s", out);
}

Test(cli, data_made_for_another_model_is_named)
{
    /* stories260K on the default model's held-out ids scored accuracy 0.0000, silently */
    cr_assert_eq(hp("eval --model " STORIES " --data models/default/heldout.npy --threads 1"), 0, "%s", errs);
    cr_assert(strstr(errs, "warning: models/default/heldout.npy looks made for another model"), "%s", errs);
    cr_assert_eq(hp("eval --model " STORIES " --data " STORIES "/data.npy --threads 1"), 0, "%s", errs);
    cr_assert_str_empty(errs, "a warning on the model's own data: %s", errs);
    char a[1024];
    snprintf(a, sizeof a, "name: foreign\nmodel: %s/stories260K\ndata: %s/../../models/default/heldout.npy\n"
             "studies: [{single: {layers: [0]}}]\n", getenv("HP_FIXTURES"), getenv("HP_FIXTURES"));
    write_file("foreign.yaml", a);
    snprintf(a, sizeof a, "run %s/foreign.yaml --db %s/f.db --quiet --threads 1", tmp, tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert(strstr(errs, "looks made for another model"), "run gave no warning: %s", errs);
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

/* Text given to the featured model, which has no tokenizer: the one line says what it takes instead and which
 * models take text (issue 29: it only said the files were missing). */
Test(cli, text_for_a_model_without_tokenizer_says_what_it_takes)
{
    char args[512];
    write_file("doc.txt", "Once upon a time there was a head.\n");
    snprintf(args, sizeof args, "eval --model models/default --data %s/doc.txt --seq-len 8", tmp);
    expect_error(args, "models/default: no tokenizer.json, vocab.txt or vocab.json + merges.txt, so it takes token "
                       "ids, not text (.npy, .jsonl with \"ids\", .bin); text models' checkpoints ship a tokenizer");
}

#define SP_TOK "tests/fixtures/tokenizers/sp-bpe"
#define GPT2_TOK "tests/fixtures/tokenizers/gpt2-bpe"

Test(cli, tokenize_pieces_are_hugging_faces_tokens)
{
    char args[512];
    write_file("t.txt", "Hello, world!\nI don't know.\n");
    snprintf(args, sizeof args, "tokenize --model " MINILM_TOK " --special --pieces %s/t.txt", tmp);
    cr_assert_eq(hp(args), 0, "%s", errs);
    /* Encoding.tokens from Hugging Face's tokenizers for these lines */
    cr_assert_str_eq(out, "[CLS] hello , world ! [SEP]\n[CLS] i don ' t know . [SEP]\n");
    /* a tab and a backslash in SentencePiece pieces are escaped; byte fallback shows <0xXX> */
    write_file("sp.txt", "Tab\there \\ \xe4\xb8\xad x\n");
    snprintf(args, sizeof args, "tokenize --model " SP_TOK " --special --pieces --ids %s/sp.txt", tmp);
    cr_assert_eq(hp(args), 0, "%s", errs);
    cr_assert_str_eq(out, "1:<s> 558:\xe2\x96\x81T 499:ab 259:\\t 331:h 648:ere 399:\xe2\x96\x81 319:\\\\ "
                          "399:\xe2\x96\x81 231:<0xE4> 187:<0xB8> 176:<0xAD> 2054:\xe2\x96\x81x\n");
}

Test(cli, tokenize_pieces_escape_spaces_and_controls)
{
    char args[512], dir[128];
    snprintf(dir, sizeof dir, "%s/tok", tmp);
    cr_assert(mkdir(dir, 0755) == 0);
    write_file("tok/tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a b\": 0, \"\\u00a0\": 1, "
                                     "\"x\\\\y\": 2, \"\\n\": 3, \"\\u0001\\u2028\": 4, \"\\u00e9\\u2581\": 5}, "
                                     "\"merges\": []}}");
    write_file("ids.txt", "0 1 2 3 4 5\n\n5\t0\n");
    snprintf(args, sizeof args, "tokenize --model %s --decode --pieces %s/ids.txt", dir, tmp);
    cr_assert_eq(hp(args), 0, "%s", errs);
    cr_assert_str_eq(out, "a\\u0020b \\u00A0 x\\\\y \\n \\u0001\\u2028 \xc3\xa9\xe2\x96\x81\n\n"
                          "\xc3\xa9\xe2\x96\x81 a\\u0020b\n");
    /* no decoder: Hugging Face joins the tokens with spaces */
    snprintf(args, sizeof args, "tokenize --model %s --decode %s/ids.txt", dir, tmp);
    cr_assert_eq(hp(args), 0, "%s", errs);
    cr_assert_str_eq(out, "a b \xc2\xa0 x\\y \n \x01\xe2\x80\xa8 \xc3\xa9\xe2\x96\x81\n\n\xc3\xa9\xe2\x96\x81 a b\n");
}

Test(cli, tokenize_decode_is_hugging_faces_decode)
{
    char args[512];
    write_file("ids.txt", "101 7592 1010 2088 999 102\n101 1045 2123 1005 1056 2113 1012 102\n\n");
    snprintf(args, sizeof args, "tokenize --model " MINILM_TOK " --decode %s/ids.txt", tmp);
    cr_assert_eq(hp(args), 0, "%s", errs);
    /* transformers' tokenizer.decode(ids) for all-MiniLM-L6-v2 */
    cr_assert_str_eq(out, "[CLS] hello, world! [SEP]\n[CLS] i don ' t know. [SEP]\n\n");
    snprintf(args, sizeof args, "tokenize --model " MINILM_TOK " --decode --skip-special %s/ids.txt", tmp);
    cr_assert_eq(hp(args), 0, "%s", errs);
    cr_assert_str_eq(out, "hello, world!\ni don ' t know.\n\n");
    /* byte fallback bytes that are not UTF-8: U+FFFD each, as Hugging Face */
    write_file("sp.txt", "1 259 231 187\n");
    snprintf(args, sizeof args, "tokenize --model " SP_TOK " --decode %s/sp.txt", tmp);
    cr_assert_eq(hp(args), 0, "%s", errs);
    cr_assert_str_eq(out, "<s>\t\xef\xbf\xbd\xef\xbf\xbd\n");
}

/* tokenize, then --decode, gives the corpus back byte for byte (byte-level BPE). */
Test(cli, tokenize_then_decode_is_the_text)
{
    char args[512], a[256], b[256];
    snprintf(args, sizeof args, "tokenize --model " GPT2_TOK " tests/fixtures/tokenizers/corpus.txt");
    cr_assert_eq(hp(args), 0, "%s", errs);
    snprintf(a, sizeof a, "%s/out", tmp);
    snprintf(b, sizeof b, "%s/ids.txt", tmp);
    cr_assert_eq(rename(a, b), 0);
    snprintf(args, sizeof args, "tokenize --model " GPT2_TOK " --decode %s/ids.txt", tmp);
    cr_assert_eq(hp(args), 0, "%s", errs);
    size_t n;
    snprintf(a, sizeof a, "%s/../tests/fixtures/tokenizers/corpus.txt", getenv("HP_TESTS"));
    char *corpus = tu_slurp(a, &n);
    cr_assert(strlen(out) == n && memcmp(out, corpus, n) == 0, "the corpus did not come back");
    free(corpus);
}

Test(cli, tokenize_decode_names_bad_ids)
{
    char args[512];
    write_file("bad.txt", "101 102\n101 7592 abc 102\n");
    snprintf(args, sizeof args, "tokenize --model " MINILM_TOK " --decode %s/bad.txt", tmp);
    cr_assert_eq(hp(args), 1, "%s", errs);
    cr_assert_str_eq(out, "[CLS] [SEP]\n", "the lines before the bad one are printed");
    char want[512];
    snprintf(want, sizeof want, "headprune: %s/bad.txt:2: token 3, 'abc', is not a token id (ids are whole numbers "
                                "from 0 to 30521, separated by spaces)\n", tmp);
    cr_assert_str_eq(errs, want);
    write_file("bad.txt", "101 30522\n");
    snprintf(args, sizeof args, "tokenize --model " MINILM_TOK " --decode --pieces %s/bad.txt", tmp);
    cr_assert_eq(hp(args), 1, "%s", errs);
    snprintf(want, sizeof want, "headprune: %s/bad.txt:1: token 2: id 30522 is not in the vocabulary of "
                                MINILM_TOK " (ids 0..30521)\n", tmp);
    cr_assert_str_eq(errs, want);
    write_file("bad.txt", "1,2 -3\n");
    snprintf(args, sizeof args, "tokenize --model " MINILM_TOK " --decode %s/bad.txt", tmp);
    expect_error(args, "bad.txt:1: token 1, '1,2', is not a token id");
    write_file("bad.txt", "99999999999999999999999\n");
    expect_error(args, "bad.txt:1: token 1: id 99999999999999999999999 is not in the vocabulary");
    write_file("bad.txt", "-1\n");
    expect_error(args, "bad.txt:1: token 1, '-1', is not a token id");
    write_file("bad.txt", "\x01\xff\n");
    expect_error(args, "bad.txt:1: token 1, '\\u0001\\xFF', is not a token id");
}

Test(cli, tokenize_decode_names_a_gap_in_the_ids)
{
    char args[512], dir[128];
    snprintf(dir, sizeof dir, "%s/tok", tmp);
    cr_assert(mkdir(dir, 0755) == 0);
    write_file("tok/tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"c\": 2}, \"merges\": []}}");
    write_file("ids.txt", "0 2 1\n");
    snprintf(args, sizeof args, "tokenize --model %s --decode %s/ids.txt", dir, tmp);
    expect_error(args, "ids.txt:1: token 3: no token has id 1 in ");
    snprintf(args, sizeof args, "tokenize --model %s --decode --pieces %s/ids.txt", dir, tmp);
    expect_error(args, "ids.txt:1: token 3: no token has id 1 in ");
}

Test(cli, tokenize_option_mistakes_are_usage_errors)
{
    static const char *const bad[][2] = {
        {"--skip-special", "--skip-special goes with --decode"},
        {"--ids", "--ids goes with --pieces"},
        {"--decode --special", "--special adds special tokens to text"},
        {"--decode --pieces --skip-special", "--skip-special applies to decoded text"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char args[512];
        snprintf(args, sizeof args, "tokenize --model " MINILM_TOK " %s", bad[i][0]);
        cr_assert_eq(hp(args), 2, "%s: %s", args, errs);
        cr_assert(strstr(errs, bad[i][1]), "%s: %s", args, errs);
    }
    cr_assert_eq(hp("tokenize --help"), 0);
    cr_assert(strstr(out, "--pieces") && strstr(out, "--decode") && strstr(out, "\\u0020"), "%s", out);
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

// --- numbers, database names, file size limits --------------------------------------

Test(cli, numbers_on_the_command_line_are_parsed_strictly)
{
    char a[512];
    // each wrapped, truncated or half-read before (1/4294967297 ran as 1/1: every job)
    const char *bad[] = {"run tests/plans/sweep-small.yaml --shard 1/4294967297",
                         "run tests/plans/sweep-small.yaml --shard 4294967297/4294967298",
                         "run tests/plans/sweep-small.yaml --shard ' 1/2'",
                         "run tests/plans/sweep-small.yaml --shard 1/+2",
                         "run tests/plans/sweep-small.yaml --shard 1/2x",
                         "run tests/plans/sweep-small.yaml --shard 1/2/3",
                         "run tests/plans/sweep-small.yaml --shard 3/2",
                         "run tests/plans/sweep-small.yaml --threads 4294967297",
                         "run tests/plans/sweep-small.yaml --threads ' 2'",
                         "run tests/plans/sweep-small.yaml --batch 0x10",
                         "run tests/plans/sweep-small.yaml --batch 99999999999999999999",
                         "query heads --db x.db --top 4294967297",
                         "query heads --db x.db --sweep 1e3",
                         "query redundancy --db x.db --eps ''",
                         "query redundancy --db x.db --eps nan",
                         "query redundancy --db x.db --eps 1e999",
                         "query heads --db x.db --timeout 0",
                         "query heads --db x.db --timeout -5",
                         "query heads --db x.db --timeout soon",
                         "report --db x.db --out x.html --timeout 0",
                         "report --db x.db --out x.html --timeout nan",
                         "eval --model " STORIES " --data " STORIES "/data.npy --seq-len 4294967424",
                         "eval --model " STORIES " --data " STORIES "/data.npy --threads -1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(a, sizeof a, "%s --db %s/n.db", bad[i], tmp);
        if (strncmp(bad[i], "run", 3) != 0)
            snprintf(a, sizeof a, "%s", bad[i]);
        int rc = hp(a);
        cr_assert_eq(rc, 2, "exit %d for '%s' (stderr: %s)", rc, a, errs);
        cr_assert(strstr(errs, "must be"), "%s: %s", a, errs);
    }
    snprintf(a, sizeof a, "%s/n.db", tmp);
    cr_assert(access(a, F_OK) != 0, "a refused run created its database");
}

Test(cli, db_names_are_files_not_uris)
{
    char cmd[2048];
    // a relative ":memory:" was SQLite's in-memory database: 13 jobs "run", nothing kept
    snprintf(cmd, sizeof cmd, "cd %s && %s run %s/plans/sweep-small.yaml --db :memory: --quiet >out 2>err && "
             "%s run %s/plans/sweep-small.yaml --db 'file:x.db?mode=memory' --quiet >>out 2>>err",
             tmp, getenv("HP_HEADPRUNE"), getenv("HP_TESTS"), getenv("HP_HEADPRUNE"), getenv("HP_TESTS"));
    int st = system(cmd);
    char p[160];
    snprintf(p, sizeof p, "%s/err", tmp);
    tu_read_into(p, errs, sizeof errs);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", errs);
    snprintf(p, sizeof p, "%s/:memory:", tmp);
    cr_assert_eq(access(p, F_OK), 0, "no file ':memory:'");
    snprintf(p, sizeof p, "%s/file:x.db?mode=memory", tmp);
    cr_assert_eq(access(p, F_OK), 0, "no file 'file:x.db?mode=memory'");
    snprintf(cmd, sizeof cmd, "query sql --db '%s/:memory:' 'SELECT count(*) AS n FROM results'", tmp);
    cr_assert_eq(hp(cmd), 0, "%s", errs);
    cr_assert(strstr(out, "13"), "the results were not kept: %s", out);
    snprintf(cmd, sizeof cmd, "run tests/plans/sweep-small.yaml --db /dev/null --quiet");
    expect_error(cmd, "/dev/null: not a regular file");
}

Test(cli, merging_a_database_into_itself_is_refused_at_once)
{
    char a[512];
    snprintf(a, sizeof a, "run tests/plans/sweep-small.yaml --db %s/a.db --quiet", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    const char *forms[] = {"%s/a.db %s/a.db", "%s/a.db %s/./a.db", "%s/a.db %s/../$(basename %s)/a.db"};
    for (int i = 0; i < 3; i++) {
        char pair[300];
        snprintf(pair, sizeof pair, forms[i], tmp, tmp, tmp);
        snprintf(a, sizeof a, "merge %s", pair);
        time_t t0 = time(NULL);
        expect_error(a, "itself");
        cr_assert_lt(time(NULL) - t0, 5, "'%s' took %lld s (waited on its own lock?)", a, (long long)(time(NULL) - t0));
    }
}

Test(cli, a_file_size_limit_fails_like_a_full_disk)
{
    // exit 153 (SIGXFSZ) and no message before: now EFBIG takes the disk-full path
    char db[128], err_path[128];
    snprintf(db, sizeof db, "%s/fs.db", tmp);
    snprintf(err_path, sizeof err_path, "%s/err", tmp);
    char plan[512];
    snprintf(plan, sizeof plan, "%s/plans/sweep.yaml", getenv("HP_TESTS"));
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        struct rlimit rl = {40 * 1024, 40 * 1024};
        signal(SIGXFSZ, SIG_DFL); // as a shell gives it: the default kills
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0 || !freopen(err_path, "w", stderr) || !freopen("/dev/null", "w", stdout))
            _exit(99);
        execl(getenv("HP_HEADPRUNE"), "headprune", "run", plan, "--db", db, "--quiet", "--threads", "1", (char *)NULL);
        _exit(98);
    }
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    tu_read_into(err_path, errs, sizeof errs);
    cr_assert(WIFEXITED(st), "killed by signal %d (SIGXFSZ is %d)", WIFSIGNALED(st) ? WTERMSIG(st) : 0, SIGXFSZ);
    cr_assert_eq(WEXITSTATUS(st), 1, "exit %d: %s", WEXITSTATUS(st), errs);
    cr_assert(strstr(errs, "fs.db") && strstr(errs, "disk full"), "%s", errs);
}

Test(cli, eval_shortens_a_long_mask_on_its_ablated_line)
{
    char spec[512] = "";
    for (int l = 0; l < 5; l++)
        for (int h = 0; h < 8; h++)
            if (l || h)
                snprintf(spec + strlen(spec), sizeof spec - strlen(spec), "%s%d.%d", *spec ? "," : "", l, h);
    char a[1024];
    snprintf(a, sizeof a, "eval --model " STORIES " --data " STORIES "/data.npy --mask %s --threads 1", spec);
    cr_assert_eq(hp(a), 0, "%s", errs);
    char *line = strstr(out, "ablated   39 of 40 heads (zero): 0.1,0.2,");
    cr_assert(line, "%s", out);
    char *nl = strchr(line, '\n');
    cr_assert(nl && nl - line < 120 && strstr(line, " ...\n") == nl - 4, "ablated line not shortened: %s", out);
}

/* gpt2-pruned lacks 0.1, 2.0 and 2.3: eval counts the heads it has, as every sweep row does (it said
 * "ablated 2 of 12 heads" for 0.1,0.2, counting a head the checkpoint does not have as ablated) */
Test(cli, eval_on_a_pruned_checkpoint_counts_the_heads_it_has)
{
    cr_assert_eq(hp("eval --model tests/fixtures/gpt2-pruned --data tests/fixtures/gpt2-pruned/data.npy"
                    " --mask 0.1,0.2 --threads 1"),
                 0, "%s", errs);
    cr_assert(strstr(out, "ablated   1 of 9 heads the checkpoint has (zero): 0.1,0.2\n"), "%s", out);
    cr_assert_eq(hp("eval --model tests/fixtures/gpt2-pruned --data tests/fixtures/gpt2-pruned/data.npy"
                    " --keep 0.2 --threads 1 --json"),
                 0, "%s", errs);
    cr_assert(strstr(out, "\"n_ablated\":8") && strstr(out, "\"n_heads_present\":9") &&
                  strstr(out, "\"n_heads_total\":12"),
              "%s", out);
    cr_assert_eq(hp("eval --model tests/fixtures/gpt2-tiny --data tests/fixtures/gpt2-tiny/data.npy --mask 0.1 --threads 1"),
                 0, "%s", errs);
    cr_assert(strstr(out, "ablated   1 of 12 heads (zero): 0.1\n"), "an unpruned model's line is as before: %s", out);
}

// --- prune ------------------------------------------------------------------------

Test(cli, prune_help_and_usage)
{
    cr_assert_eq(hp("prune --help"), 0);
    cr_assert(strstr(out, "pruned_heads") && strstr(out, "--step N"), "%s", out);
    const char *bad[] = {"prune --model tests/fixtures/gpt2-tiny --mask 0.1",
                         "prune --model tests/fixtures/gpt2-tiny --out /tmp/x",
                         "prune --model tests/fixtures/gpt2-tiny --mask 0.1 --db x.db --step 1 --out /tmp/x",
                         "prune --db x.db --out /tmp/x",
                         "prune --model tests/fixtures/gpt2-tiny --mask 0.1 --step 2 --out /tmp/x",
                         "prune --db x.db --step -1 --out /tmp/x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_assert_eq(hp(bad[i]), 2, "'%s' was not a usage error: %s", bad[i], errs);
        cr_assert(strstr(errs, "headprune prune: "), "%s", errs);
    }
}

/* The value after label in out ("loss      5.998423 ..." -> "5.998423"). */
static void field(const char *label, char *buf, size_t n)
{
    const char *p = strstr(out, label);
    cr_assert(p, "no '%s' in: %s", label, out);
    p += strlen(label);
    while (*p == ' ')
        p++;
    size_t i = 0;
    while (p[i] && p[i] != ' ' && p[i] != '\n' && i + 1 < n) {
        buf[i] = p[i];
        i++;
    }
    buf[i] = 0;
}

Test(cli, prune_a_mask_then_eval)
{
    char a[1024], want[64], got[64];
    snprintf(a, sizeof a, "prune --model tests/fixtures/gpt2-tiny --mask 0.1,2.0,2.3 --out %s/p", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert(strstr(out, "heads     3 of 12 removed; 9 left"), "%s", out);
    cr_assert(strstr(out, "loads in  headprune and Hugging Face transformers 4.x"), "%s", out);
    cr_assert(strstr(out, "40184 parameters (was 43328)"), "%s", out);
    cr_assert_eq(hp("eval --model tests/fixtures/gpt2-tiny --data tests/fixtures/gpt2-tiny/data.npy --mask 0.1,2.0,2.3 --quiet"), 0, "%s", errs);
    field("loss", want, sizeof want);
    snprintf(a, sizeof a, "eval --model %s/p --data tests/fixtures/gpt2-tiny/data.npy --quiet", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    field("loss", got, sizeof got);
    cr_assert_str_eq(got, want, "the pruned checkpoint's loss and the masked original's");
    cr_assert(strstr(out, "4 KV heads; 3 heads pruned)"), "%s", out);
    /* an uneven Llama: written, and said to be headprune's only */
    snprintf(a, sizeof a, "prune --model tests/fixtures/llama-gqa --mask 0.1 --out %s/l", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert(strstr(out, "loads in  headprune only: layer 0 keeps part of a KV group"), "%s", out);
    /* the directory exists now */
    expect_error(a, "/l: already exists");
    /* a GGUF model: written as an f32 Hugging Face checkpoint, and said so */
    snprintf(a, sizeof a, "prune --model tests/fixtures/llama-gguf --mask kv:0.1,kv:1.0 --out %s/g", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert(strstr(out, "weights   f32, dequantized from the GGUF file: a Hugging Face checkpoint"), "%s", out);
    cr_assert(strstr(out, "loads in  headprune and Hugging Face transformers 4.x"), "%s", out);
    snprintf(a, sizeof a, "prune --model tests/fixtures/gpt2-tiny --mask 5.0 --out %s/q", tmp);
    expect_error(a, "5.0");
}

/* Issue 23, item 6: names were built in 1024-byte buffers, so a model under a folder of ~1,010 bytes read
 * config.js, and the message was cut before its reason. The system takes 4095 bytes of path. */
Test(cli, a_model_data_and_plan_under_a_long_path_work_as_under_a_short_one)
{
    char *deep = tu_long_dir(tmp, 2600), *a = malloc(16384), want[64], got[64];
    snprintf(a, 16384, "ln -s \"$HP_TESTS/fixtures/gpt2-tiny\" %s/m && ln -s \"$HP_TESTS/fixtures/llama-gqa-sharded\" %s/s "
             "&& cp \"$HP_TESTS/fixtures/gpt2-tiny/data.npy\" %s/data.npy && ln -s \"$HP_TESTS/fixtures/tokenizers/minilm\" %s/t",
             deep, deep, deep, deep);
    cr_assert_eq(system(a), 0);
    cr_assert_eq(hp("eval --model tests/fixtures/gpt2-tiny --data tests/fixtures/gpt2-tiny/data.npy --mask 0.1 --quiet"), 0,
                 "%s", errs);
    field("loss", want, sizeof want);
    snprintf(a, 16384, "eval --model %s/m --data %s/data.npy --mask 0.1 --quiet", deep, deep);
    cr_assert_eq(hp(a), 0, "%s", errs);
    field("loss", got, sizeof got);
    cr_assert_str_eq(got, want, "the same model and data under a %zu-byte folder", strlen(deep));
    /* sharded weights: the index and each shard are named from the folder */
    cr_assert_eq(hp("eval --model tests/fixtures/llama-gqa-sharded --data tests/fixtures/llama-gqa-sharded/data.npy --quiet"),
                 0, "%s", errs);
    field("loss", want, sizeof want);
    snprintf(a, 16384, "eval --model %s/s --data %s/s/data.npy --quiet", deep, deep);
    cr_assert_eq(hp(a), 0, "%s", errs);
    field("loss", got, sizeof got);
    cr_assert_str_eq(got, want, "the sharded model under a long folder");
    /* the tokenizer's files */
    write_file("t.txt", "Hello, world!\n");
    snprintf(a, 16384, "tokenize --model " MINILM_TOK " %s/t.txt", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    char *short_ids = strdup(out);
    snprintf(a, 16384, "tokenize --model %s/t %s/t.txt", deep, tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert_str_eq(out, short_ids, "the tokenizer under a long folder");
    free(short_ids);
    /* a plan there, naming its model and data beside it; the database where SQLite can open it */
    snprintf(a, 16384, "printf 'name: deep\\nmodel: m\\ndata: data.npy\\nstudies: [single]\\n' >%s/plan.yaml", deep);
    cr_assert_eq(system(a), 0);
    snprintf(a, 16384, "run %s/plan.yaml --db %s/r.db --quiet", deep, tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert(strstr(out, "13 jobs"), "%s", out);
    snprintf(a, 16384, "query heads --db %s/r.db --top 1", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    free(a);
    free(deep);
}

/* A message about a long path keeps its reason (the path loses its middle), and a path over the system's
 * limit, or over SQLite's for a database, is said to be too long, in one line. */
Test(cli, a_long_path_keeps_the_reason_and_a_path_too_long_is_said_to_be)
{
    char *deep = tu_long_dir(tmp, 3000), *a = malloc(16384);
    snprintf(a, 16384, "eval --model %s --data tests/fixtures/gpt2-tiny/data.npy", deep);
    expect_error(a, "config.json: cannot open (No such file or directory)");
    cr_assert(strstr(errs, " ... "), "the cut is marked: %s", errs);
    /* over PATH_MAX: "./" repeated needs no folders */
    char *over = malloc(8192);
    size_t n = (size_t)sprintf(over, "%s", tmp);
    while (n < 4200)
        n += (size_t)sprintf(over + n, "/.");
    sprintf(over + n, "/m");
    snprintf(a, 16384, "eval --model %s --data tests/fixtures/gpt2-tiny/data.npy", over);
    expect_error(a, "path too long");
    snprintf(a, 16384, "eval --model tests/fixtures/gpt2-tiny --data %s.npy", over);
    expect_error(a, "path too long");
    snprintf(a, 16384, "run tests/plans/sweep-small.yaml --db %s/r.db", deep);
    expect_error(a, "path too long for SQLite");
    free(over);
    free(a);
    free(deep);
}

/* Issue 23: a missing folder named the export's own OUT.partial-PID, not OUT. */
Test(cli, prune_into_a_missing_folder_names_out_and_its_folder)
{
    char a[512], want[256];
    snprintf(a, sizeof a, "prune --model tests/fixtures/gpt2-tiny --mask 0.1 --out %s/none/p", tmp);
    snprintf(want, sizeof want, "%s/none/p: folder '%s/none' does not exist", tmp, tmp);
    expect_error(a, want);
    cr_assert(!strstr(errs, "partial"), "%s", errs);
}

/* A pruned checkpoint written under a long folder (its name, its temporary name and its files). */
Test(cli, prune_into_a_long_path)
{
    char *deep = tu_long_dir(tmp, 2000), *a = malloc(8192), want[64], got[64];
    snprintf(a, 8192, "prune --model tests/fixtures/gpt2-tiny --mask 0.1 --out %s/p --quiet", deep);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert_eq(hp("eval --model tests/fixtures/gpt2-tiny --data tests/fixtures/gpt2-tiny/data.npy --mask 0.1 --quiet"), 0,
                 "%s", errs);
    field("loss", want, sizeof want);
    snprintf(a, 8192, "eval --model %s/p --data tests/fixtures/gpt2-tiny/data.npy --quiet", deep);
    cr_assert_eq(hp(a), 0, "%s", errs);
    field("loss", got, sizeof got);
    cr_assert_str_eq(got, want);
    free(a);
    free(deep);
}

Test(cli, prune_a_step_of_an_iterative_study)
{
    char a[2048], plan[1024];
    snprintf(plan, sizeof plan,
             "name: prune-test\nmodel: %s/fixtures/gpt2-tiny\ndata: %s/fixtures/gpt2-tiny/data.npy\n"
             "studies:\n  - iterative: {prune: 25%%}\n",
             getenv("HP_TESTS"), getenv("HP_TESTS"));
    write_file("plan.yaml", plan);
    snprintf(a, sizeof a, "run %s/plan.yaml --db %s/p.db --quiet", tmp, tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    /* step 2's whole mask, as the curve shows it */
    snprintf(a, sizeof a, "query curve --db %s/p.db --full-mask --format json", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cJSON *answer = cJSON_Parse(out), *row;
    char mask[256] = "";
    cJSON_ArrayForEach(row, cJSON_GetObjectItem(answer, "rows"))
        if ((int)cJSON_GetObjectItem(row, "step")->valuedouble == 2)
            snprintf(mask, sizeof mask, "%s", cJSON_GetObjectItem(row, "mask")->valuestring);
    cJSON_Delete(answer);
    cr_assert(mask[0], "no step 2 in the curve");
    snprintf(a, sizeof a, "prune --db %s/p.db --step 2 --out %s/s2", tmp, tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert(strstr(out, "heads     6 of 12 removed"), "%s", out);
    snprintf(a, sizeof a, "inspect --model %s/s2 --json", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cJSON *info = cJSON_Parse(out);
    cr_assert_str_eq(cJSON_GetObjectItem(info, "pruned")->valuestring, mask);
    cJSON_Delete(info);

    snprintf(a, sizeof a, "prune --db %s/p.db --step 9 --out %s/s9", tmp, tmp);
    expect_error(a, "has no step 9 (the study ran steps 0-");
    snprintf(a, sizeof a, "prune --db %s/p.db --study other --step 1 --out %s/s9", tmp, tmp);
    expect_error(a, "has no iterative or gates study 'other' (it has 'iterative");
    snprintf(a, sizeof a, "prune --db %s/p.db --step 1 --model tests/fixtures/gpt2-noprefix --out %s/s9", tmp, tmp);
    expect_error(a, "gpt2-noprefix: not the model the sweep measured");
    snprintf(a, sizeof a, "prune --db %s/p.db --sweep 7 --step 1 --out %s/s9", tmp, tmp);
    expect_error(a, "sweep 7 has no iterative or gates study");
    snprintf(a, sizeof a, "prune --db %s/nothing.db --step 1 --out %s/s9", tmp, tmp);
    expect_error(a, "nothing.db");
}

/* query heads sets the default attribution study's estimates (ig-layer, under zero ablation) beside the exact
 * effects, in a column named by the estimator, the same numbers query attribution gives */
Test(cli, query_heads_shows_the_default_estimate_by_its_name)
{
    char a[1200], plan[1024];
    snprintf(plan, sizeof plan, "name: d\nmodel: %s/fixtures/gpt2-tiny\ndata: %s/fixtures/gpt2-tiny/data.npy\n"
             "studies: [single, attribution]\n", getenv("HP_TESTS"), getenv("HP_TESTS"));
    write_file("d.yaml", plan);
    snprintf(a, sizeof a, "run %s/d.yaml --db %s/d.db --quiet --threads 1", tmp, tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    snprintf(a, sizeof a, "query heads --db %s/d.db", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert(strstr(out, "ig-layer: attribution study attribution's integrated-gradients estimate"), "%s", out);
    snprintf(a, sizeof a, "query heads --db %s/d.db --format json", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cJSON *heads = cJSON_Parse(out);
    snprintf(a, sizeof a, "query attribution --db %s/d.db --format json", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cJSON *attr = cJSON_Parse(out), *h, *r;
    int n = 0;
    cJSON_ArrayForEach(h, cJSON_GetObjectItem(heads, "rows")) {
        const cJSON *est = cJSON_GetObjectItem(h, "ig-layer");
        cr_assert(cJSON_IsNumber(est), "no ig-layer estimate: %s", cJSON_PrintUnformatted(h));
        cJSON_ArrayForEach(r, cJSON_GetObjectItem(attr, "rows"))
            if (!strcmp(cJSON_GetObjectItem(r, "label")->valuestring, cJSON_GetObjectItem(h, "label")->valuestring)) {
                cr_assert_eq(cJSON_GetObjectItem(r, "estimate")->valuedouble, est->valuedouble);
                cr_assert_str_eq(cJSON_GetObjectItem(r, "estimator")->valuestring, "ig-layer");
                n++;
            }
    }
    cr_assert_eq(n, 12, "every head of gpt2-tiny in both");
    cJSON_Delete(heads);
    cJSON_Delete(attr);
}

Test(cli, query_importance_and_attribution)
{
    char a[1024];
    snprintf(a, sizeof a, "run tests/plans/sweep.yaml --db %s/g.db --quiet --threads 1", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    snprintf(a, sizeof a, "query attribution --db %s/g.db --top 3 --format csv", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    const char *head = "study,label,layer,unit,estimate,exact,rank_est,rank_exact,rank_diff,rho,tau,top_k_overlap,"
                       "reach,estimator\n";
    cr_assert(strncmp(out, head, strlen(head)) == 0, "%s", out);
    cr_assert_null(strstr(out, "\nattribution,all,"), "the summary is a row of the CSV: %s", out);
    int lines = 0;
    for (const char *c = out; *c; c++)
        lines += *c == '\n';
    cr_assert_eq(lines, 4, "header and the 3 most wrongly ranked: %s", out);
    /* JSON: the units in rows, the summary (rho, tau, top-k overlap over every unit) apart */
    snprintf(a, sizeof a, "query attribution --db %s/g.db --top 3 --format json", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cJSON *j = cJSON_Parse(out), *rows = cJSON_GetObjectItem(j, "rows"), *sum = cJSON_GetObjectItem(j, "summary"), *e;
    cr_assert(cJSON_GetArraySize(rows) == 3 && cJSON_GetArraySize(sum) == 1, "%s", out);
    cJSON_ArrayForEach(e, rows)
        cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(e, "layer")) && cJSON_IsNumber(cJSON_GetObjectItem(e, "unit")),
                  "a row that is no unit: %s", out);
    e = cJSON_GetArrayItem(sum, 0);
    cr_assert(!strcmp(cJSON_GetObjectItem(e, "label")->valuestring, "all") &&
                  cJSON_IsNull(cJSON_GetObjectItem(e, "layer")) && cJSON_IsNumber(cJSON_GetObjectItem(e, "rho")) &&
                  cJSON_IsNumber(cJSON_GetObjectItem(e, "top_k_overlap")), "%s", out);
    cJSON_Delete(j);
    snprintf(a, sizeof a, "query attribution --db %s/g.db --study attribution-kv", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert(strstr(out, "against single study single-kv (KV groups"), "%s", out);
    snprintf(a, sizeof a, "query importance --db %s/g.db --top 2", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert(strstr(out, "study importance (query heads), normalize layer"), "%s", out);
    snprintf(a, sizeof a, "query importance --db %s/g.db --study nope", tmp);
    expect_error(a, "has no importance study 'nope' (its importance studies: importance, importance-kv)");
    /* a sweep without one: the error says how to get one */
    single_plan("s.yaml", "s", "gpt2-tiny", "zero");
    snprintf(a, sizeof a, "run %s/s.yaml --db %s/s.db --quiet", tmp, tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    snprintf(a, sizeof a, "query attribution --db %s/s.db", tmp);
    expect_error(a, "has no attribution study (add an 'attribution' study to the plan and run it)");
}

/* A sweep over a pruned checkpoint lists its pruned heads; ablating one changes nothing (README). */
Test(cli, sweep_over_a_pruned_checkpoint)
{
    char a[2048], plan[1024];
    snprintf(plan, sizeof plan,
             "name: pruned-sweep\nmodel: %s/fixtures/gpt2-pruned\ndata: %s/fixtures/gpt2-pruned/data.npy\n"
             "studies:\n  - single\n",
             getenv("HP_TESTS"), getenv("HP_TESTS"));
    write_file("plan.yaml", plan);
    snprintf(a, sizeof a, "run %s/plan.yaml --db %s/p.db --quiet", tmp, tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    snprintf(a, sizeof a, "query heads --db %s/p.db --format json", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cJSON *answer = cJSON_Parse(out), *row;
    int n = 0, zero = 0;
    cJSON_ArrayForEach(row, cJSON_GetObjectItem(answer, "rows"))
    {
        const char *label = cJSON_GetObjectItem(row, "label")->valuestring;
        double effect = cJSON_GetObjectItem(row, "effect")->valuedouble;
        /* the heads the checkpoint lacks are no units of the sweep: they are not listed */
        bool pruned = !strcmp(label, "0.1") || !strcmp(label, "2.0") || !strcmp(label, "2.3");
        cr_assert_neq(effect, 0.0, "head %s has no effect", label);
        zero += pruned;
        n++;
    }
    cJSON_Delete(answer);
    cr_assert_eq(n, 9);
    cr_assert_eq(zero, 0, "a head the checkpoint lacks is listed");
}

/* A checkpoint with every head pruned: its single study expands to nothing, and query heads says the model has no
 * heads, not that the plan lacks the single study it has. */
Test(cli, a_checkpoint_without_heads_is_said_to_have_none)
{
    char a[2048], plan[1024];
    snprintf(a, sizeof a, "prune --model tests/fixtures/gpt2-tiny --mask 0.*,1.*,2.* --out %s/none --quiet", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    snprintf(plan, sizeof plan, "name: none\nmodel: none\ndata: %s/fixtures/gpt2-tiny/data.npy\nstudies:\n  - single\n",
             getenv("HP_TESTS"));
    write_file("plan.yaml", plan);
    snprintf(a, sizeof a, "run %s/plan.yaml --db %s/n.db --quiet", tmp, tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    snprintf(a, sizeof a, "query heads --db %s/n.db", tmp);
    expect_error(a, "its model is a pruned checkpoint without any heads (all 3 x 4 pruned)");
    cr_assert(!strstr(errs, "add a 'single'"), "%s", errs);
}

// --- head roles --------------------------------------------------------------------------

#define GQA "tests/fixtures/llama-gqa"

Test(cli, roles_prints_one_row_per_head_as_a_table_or_json)
{
    cr_assert_eq(hp("roles --model " GQA " --data " GQA "/data.npy --threads 1"), 0, "%s", errs);
    cr_assert(strstr(out, "probe     16 sequences of 2 x 32 random tokens (seed 0x726f6c6573)"), "%s", out);
    cr_assert(strstr(out, "prev_token") && strstr(out, "induction_offset") && strstr(out, "dominant_offset"), "%s", out);
    cr_assert_null(strstr(out, "rare_token"), "a decoder has no rare-token column: %s", out);
    for (int l = 0; l < 3; l++)
        for (int h = 0; h < 4; h++) {
            char row[16];
            snprintf(row, sizeof row, "\n%d.%d ", l, h);
            cr_assert(strstr(out, row), "no row for query head %d.%d: %s", l, h, out);
        }
    cr_assert_eq(hp("roles --model " GQA " --data " GQA "/data.npy --threads 1 --json --probe-seqs 3 --probe-len 9"), 0,
                 "%s", errs);
    cJSON *o = cJSON_Parse(out);
    cr_assert(o, "not JSON: %s", out);
    cJSON *p = cJSON_GetObjectItem(o, "probe"), *hs = cJSON_GetObjectItem(o, "heads");
    cr_assert_eq(cJSON_GetObjectItem(p, "seqs")->valueint, 3);
    cr_assert_eq(cJSON_GetObjectItem(p, "len")->valueint, 9);
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "queries"), "induction")->valueint, 27);
    cr_assert_eq(cJSON_GetArraySize(hs), 12);
    const char *keys[] = {"prev_token", "duplicate_token", "induction", "induction_offset", "induction_mass",
                          "first_token", "dominant_offset", "dominant_mass", "entropy"};
    cJSON *h;
    cJSON_ArrayForEach(h, hs)
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
            cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(h, keys[k])), "%s is not a number", keys[k]);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(hs, 0), "rare_token")));
    cJSON_Delete(o);
    /* an encoder has the rare-token score; a pruned checkpoint's missing heads are named */
    cr_assert_eq(hp("roles --model tests/fixtures/bert-encoder --data tests/fixtures/bert-encoder/data.jsonl"), 0, "%s",
                 errs);
    cr_assert(strstr(out, "rare_token"), "%s", out);
    cr_assert_eq(hp("roles --model tests/fixtures/gpt2-pruned --data tests/fixtures/gpt2-pruned/data.npy"), 0, "%s",
                 errs);
    cr_assert(strstr(out, "\n0.1    (pruned: the checkpoint lacks it)"), "%s", out);
    cr_assert_eq(hp("roles --help"), 0);
    cr_assert(strstr(out, "docs/roles.md"), "%s", out);
}

Test(cli, roles_bad_input)
{
    /* usage mistakes: status 2, as every command's */
    cr_assert_eq(hp("roles --model " GQA " --data " GQA "/data.npy --frobnicate"), 2);
    cr_assert(strstr(errs, "headprune roles: unknown option '--frobnicate'"), "%s", errs);
    cr_assert_eq(hp("roles --model " GQA), 2);
    cr_assert(strstr(errs, "--model DIR and --data FILE are required"), "%s", errs);
    cr_assert_eq(hp("roles --model " GQA " --data " GQA "/data.npy --probe-len x"), 2);
    /* what the model cannot run: status 1, one line naming the file */
    write_file("far.jsonl", "{\"ids\": [1, 2, 300]}\n");
    char a[512];
    snprintf(a, sizeof a, "roles --model " GQA " --data %s/far.jsonl", tmp);
    expect_error(a, "far.jsonl");
    cr_assert(strstr(errs, "300"), "%s", errs);
    expect_error("roles --model " GQA " --data " GQA "/data.npy --probe-len 33",
                 "a probe of 2 x 33 tokens exceeds the model's 64 positions (at most 32 a half)");
    expect_error("roles --model tests/fixtures/no-such-model --data " GQA "/data.npy", "no-such-model");
    /* a plan with a bad roles key: one line naming the plan, line and column */
    char plan[1024];
    snprintf(plan, sizeof plan, "name: r\nmodel: %s/../" GQA "\ndata: %s/../" GQA "/data.npy\nstudies:\n"
             "  - roles: {probe_len: 40}\n", getenv("HP_TESTS"), getenv("HP_TESTS"));
    write_file("r.yaml", plan);
    snprintf(a, sizeof a, "run %s/r.yaml --db %s/r.db", tmp, tmp);
    expect_error(a, "r.yaml:5:24: study 'roles': a probe of 2 x 40 tokens exceeds the model's 64 positions");
    snprintf(plan, sizeof plan, "name: r\nmodel: m\ndata: d.npy\nstudies:\n  - roles: {heads: [1]}\n");
    write_file("r2.yaml", plan);
    snprintf(a, sizeof a, "plan %s/r2.yaml", tmp);
    expect_error(a, "r2.yaml:5:13: 'heads' does not apply to a 'roles' study");
}

Test(cli, query_roles_after_a_run)
{
    char plan[1024], a[512];
    snprintf(plan, sizeof plan, "name: r\nmodel: %s/../" GQA "\ndata: %s/../" GQA "/data.npy\nstudies:\n"
             "  - single\n  - roles\n", getenv("HP_TESTS"), getenv("HP_TESTS"));
    write_file("r.yaml", plan);
    snprintf(a, sizeof a, "run %s/r.yaml --db %s/r.db --threads 1 --quiet", tmp, tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    snprintf(a, sizeof a, "query roles --db %s/r.db --format csv", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert(strncmp(out, "layer,head,label,prev_token,duplicate_token,induction,induction_offset,induction_mass,"
                           "first_token,dominant_offset,dominant_mass,entropy,rare_token,sep_token,effect\n", 150) == 0,
              "%s", out);
    int lines = 0;
    for (const char *c = out; *c; c++)
        lines += *c == '\n';
    cr_assert_eq(lines, 1 + 12, "header and 12 heads (the rho row is no head): %s", out);
    cr_assert_null(strstr(out, "rho"), "%s", out);
    /* the table, as a reader sees it: its last line is the rho row */
    snprintf(a, sizeof a, "query roles --db %s/r.db", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cr_assert(strncmp(out, "# sweep 1, roles study roles (probe 16 x 2 x 32 random tokens)", 60) == 0, "%s", out);
    char text_rho[1024];
    const char *last = out + strlen(out) - 1; /* the table's last line */
    while (last > out && last[-1] != '\n')
        last--;
    last += strspn(last, " ");
    cr_assert(!strncmp(last, "rho ", 4), "the rho row is not the table's last: %s", out);
    snprintf(text_rho, sizeof text_rho, "%s", last);
    /* JSON: the heads in "rows", each with its layer and head; the rank correlations apart, in "summary",
     * the numbers the table's rho row shows */
    snprintf(a, sizeof a, "query roles --db %s/r.db --format json", tmp);
    cr_assert_eq(hp(a), 0, "%s", errs);
    cJSON *o = cJSON_Parse(out), *rows = cJSON_GetObjectItem(o, "rows"), *sum = cJSON_GetObjectItem(o, "summary"), *e;
    cr_assert(cJSON_GetArraySize(rows) == 12 && cJSON_GetArraySize(sum) == 1, "%s", out);
    int i = 0;
    cJSON_ArrayForEach(e, rows) {
        char label[16];
        snprintf(label, sizeof label, "%d.%d", i / 4, i % 4);
        cr_assert(cJSON_GetObjectItem(e, "layer")->valueint == i / 4 && cJSON_GetObjectItem(e, "head")->valueint == i % 4 &&
                      !strcmp(cJSON_GetObjectItem(e, "label")->valuestring, label), "row %d is not head %s: %s", i,
                  label, out);
        cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(e, "effect")), "%s", out);
        i++;
    }
    cJSON *rho = cJSON_GetArrayItem(sum, 0);
    cr_assert_str_eq(cJSON_GetObjectItem(rho, "label")->valuestring, "rho");
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(rho, "layer")) && cJSON_IsNull(cJSON_GetObjectItem(rho, "head")) &&
                  cJSON_IsNull(cJSON_GetObjectItem(rho, "induction_offset")) &&
                  cJSON_IsNull(cJSON_GetObjectItem(rho, "effect")), "%s", out);
    char json_rho[1024] = "rho";
    size_t at = 3;
    const char *scores[] = {"prev_token", "duplicate_token", "induction", "induction_mass", "first_token",
                            "dominant_mass", "entropy"};
    for (size_t k = 0; k < sizeof scores / sizeof *scores; k++) {
        cJSON *v = cJSON_GetObjectItem(rho, scores[k]);
        cr_assert(cJSON_IsNumber(v), "summary %s: %s", scores[k], out);
        at += (size_t)snprintf(json_rho + at, sizeof json_rho - at, " %.6g", v->valuedouble);
    }
    char squeezed[1024]; /* the table's rho row with its columns' padding taken out */
    size_t n = 0;
    for (const char *c = text_rho; *c && n + 1 < sizeof squeezed; c++)
        if (*c != ' ' || (n && squeezed[n - 1] != ' '))
            squeezed[n++] = *c;
    while (n && (squeezed[n - 1] == ' ' || squeezed[n - 1] == '\n'))
        n--;
    squeezed[n] = 0;
    cr_assert_str_eq(json_rho, squeezed, "JSON's summary is not the table's rho row");
    cJSON_Delete(o);
    snprintf(a, sizeof a, "query roles --db %s/r.db --top 3", tmp);
    cr_assert_eq(hp(a), 2, "%s", errs);
    snprintf(a, sizeof a, "query roles --db %s/r.db --format matrix", tmp);
    cr_assert_eq(hp(a), 2, "%s", errs);
    snprintf(a, sizeof a, "query roles --db %s/r.db --study other", tmp);
    expect_error(a, "has no roles study 'other' (its roles studies: roles)");
}

/* A number past an option's limit is not "not a positive integer": every integer option names its range, and
 * what it was given, in one line (cli_util.c's int_option, which every command's integer options go through). */
Test(cli, an_integer_option_out_of_range_names_its_range)
{
    const struct {
        const char *args, *said;
    } cases[] = {
        {"eval --model m --data d --threads 100000", "eval: --threads must be an integer from 1 to 1024 (not '100000')"},
        {"eval --model m --data d --seq-len 2147483648",
         "eval: --seq-len must be an integer from 1 to 1048576 (not '2147483648')"},
        {"roles --model m --data d --probe-seqs 1000000000",
         "roles: --probe-seqs must be an integer from 1 to 1048576 (not '1000000000')"},
        {"roles --model m --data d --threads 0", "roles: --threads must be an integer from 1 to 1024 (not '0')"},
        {"run p.yaml --batch 1e12", "run: --batch must be an integer from 1 to 1048576 (not '1e12')"},
        {"run p.yaml --threads two", "run: --threads must be an integer from 1 to 1024 (not 'two')"},
        {"query heads --db x.db --top 1e20", "query: --top must be an integer from 1 to 1073741824 (not '1e20')"},
        {"report --db x.db --out r.html --sweep 99999999999",
         "report: --sweep must be a sweep id, an integer from 1 to 1073741824 (not '99999999999')"},
        {"prune --db x.db --step -1 --out o", "prune: --step must be a step number, an integer from 0 to 1073741824"},
        {"slurm p.yaml --shards 2000000", "slurm: --shards must be an integer from 1 to 1000000 (not '2000000')"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = hp(cases[i].args);
        cr_assert_eq(rc, 2, "exit %d for '%s' (stderr: %s)", rc, cases[i].args, errs);
        cr_assert(strstr(errs, cases[i].said), "for '%s': %s", cases[i].args, errs);
        cr_assert(!strstr(errs, "positive integer"), "for '%s': %s", cases[i].args, errs);
    }
}

/* Every command's options come from its table (engine/cli/options.c): each --help lists them under "Options:",
 * within 80 columns, and every usage mistake is one line worded alike for every command. */
Test(cli, options_come_from_one_table)
{
    const char *cmds[] = {"inspect", "tokenize", "eval", "plan", "run", "roles", "query", "report", "slurm", "prune"};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        char a[64];
        snprintf(a, sizeof a, "%s --help", cmds[i]);
        cr_assert_eq(hp(a), 0, "%s: %s", a, errs);
        cr_assert(strncmp(out, "Usage: headprune ", 17) == 0 && strstr(out, "\nOptions:\n  "), "%s: %s", a, out);
        for (const char *l = out; *l;) {
            const char *nl = strchr(l, '\n');
            size_t cols = 0; /* columns, not bytes: a UTF-8 sequence is one */
            for (const char *c = l; c < (nl ? nl : l + strlen(l)); c++)
                cols += ((unsigned char)*c & 0xC0) != 0x80;
            cr_assert_leq(cols, 80, "%s: a line of %zu columns: %.*s", a, cols, (int)(nl ? nl - l : 80), l);
            l = nl ? nl + 1 : l + strlen(l);
        }
    }
    const struct {
        const char *args, *said;
    } cases[] = {
        {"eval --model m --data d --json=1", "eval: option '--json' takes no value\n"},
        {"run p.yaml --threads", "run: option '--threads' needs a value\n"},
        {"eval --model m --data d --frobnicate", "eval: unknown option '--frobnicate'\n"},
        {"inspect -z", "inspect: unknown option '-z'\n"},
        {"query heads --db x.db --s 1", "query: option '--s' is ambiguous (--sweep, --study, --sweep2, --study2)\n"},
        {"plan p.yaml --format xml", "plan: --format must be table, csv or json\n"},
        {"eval --model m --data d --mask 0.1 --keep 0.2", "eval: give either --mask or --keep, once\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = hp(cases[i].args);
        cr_assert_eq(rc, 2, "exit %d for '%s' (stderr: %s)", rc, cases[i].args, errs);
        cr_assert(strncmp(errs, "headprune ", 10) == 0 && strncmp(errs + 10, cases[i].said, strlen(cases[i].said)) == 0,
                  "for '%s': %s", cases[i].args, errs);
    }
    /* a unique prefix is the option, --name=VALUE its value, and "--" ends the options */
    cr_assert_eq(hp("inspect --mod=" STORIES " --js"), 0, "%s", errs);
    cr_assert(strstr(out, "\"n_heads\""), "%s", out);
    cr_assert_eq(hp("tokenize --model " STORIES " -- --no-such-file"), 1, "%s", errs);
    cr_assert(strstr(errs, "--no-such-file"), "%s", errs);
}
