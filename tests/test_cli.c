/*
 * test_cli.c -- the headprune command line as a user meets it: output on
 * success, and on bad input exit status 1 with exactly one line on stderr
 * naming the file and the problem (usage mistakes: status 2).
 */
#define _DEFAULT_SOURCE
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static char tmp[64];
static char out[1 << 16], errs[1 << 14];

static void setup(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/hp_cli_XXXXXX");
    cr_assert(mkdtemp(tmp));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    cr_assert_eq(system(cmd), 0);
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
