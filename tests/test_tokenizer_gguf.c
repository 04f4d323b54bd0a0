/*
 * test_tokenizer_gguf.c -- the tokenizer of a GGUF file's metadata (engine/text/tokenizer_gguf.c) against Hugging
 * Face's libraries, and its refusals.
 *
 * tests/fixtures/gguf-tokenizer/ (tools/gen_gguf_tokenizer_cases.py) holds a llama-kind (SentencePiece BPE)
 * file, whose ids come from transformers' GGUF loader, and a gpt2-kind (byte-level BPE) vocabulary under five
 * tokenizer.ggml.pre names, whose ids come from the tokenizers library with the pipeline each name's models
 * declare; cases.json has a text of our own and the ids without and with special tokens. Every id must
 * match. The real SmolLM2-135M-Instruct file (scripts/get-smollm2.sh) against SmolLM2's tokenizer, when it
 * is there (skipped, saying so, when not). Then where the tokenizer comes from (a folder's tokenizer.json
 * wins), and hostile metadata written byte by byte here: each refused in one line naming the file and key.
 */
#define _DEFAULT_SOURCE
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "headprune.h"
#include "testutil.h"
#include "tokenizer.h"

static char g_tmp[64];

static void setup(void)
{
    tu_mkdtemp(g_tmp, sizeof g_tmp, "tokgguf");
}

static void teardown(void)
{
    tu_rmrf(g_tmp);
}

TestSuite(tokenizer_gguf, .init = setup, .fini = teardown);

// --- ids against the references ---------------------------------------------------------------------

/* Every text of cases' case c, through the tokenizer of file, without and with special tokens. */
static int check_case(const char *file, const cJSON *texts, const cJSON *c)
{
    struct hp_tokenizer *t;
    struct hp_error err = {0};
    cr_assert_eq(hp_tokenizer_open(file, &t, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_tokenizer_n_ids(t), tu_get(c, "n_tokens")->valueint, "%s", file);
    int bad = 0;
    const char *part[2] = {"plain", "special"};
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < cJSON_GetArraySize(texts); i++) {
            const char *s = cJSON_GetArrayItem(texts, i)->valuestring;
            const cJSON *want = cJSON_GetArrayItem(tu_get(c, part[p]), i);
            struct hp_encoding e;
            cr_assert_eq(hp_tokenizer_encode(t, s, strlen(s), NULL, 0, p == 1, &e, &err), HP_OK, "%s", err.msg);
            int n = cJSON_GetArraySize(want), k = 0;
            while (k < n && k < e.n && cJSON_GetArrayItem(want, k)->valueint == e.ids[k])
                k++;
            if ((k < n || k < e.n) && bad++ < 5)
                cr_log_error("%s, %s, text %d (\"%.40s\"): %d ids, the reference %d; first difference at %d: %d, "
                             "the reference %d",
                             file, part[p], i, s, e.n, n, k, k < e.n ? e.ids[k] : -1,
                             k < n ? cJSON_GetArrayItem(want, k)->valueint : -1);
            hp_encoding_free(&e);
        }
    hp_tokenizer_free(t);
    return bad;
}

static void check_cases(const char *dir, const char *json)
{
    cJSON *j = tu_read_json(json);
    const cJSON *c, *texts = tu_get(j, "texts");
    int bad = 0, n = 0;
    cJSON_ArrayForEach(c, tu_get(j, "cases"))
    {
        char file[2048];
        snprintf(file, sizeof file, "%s/%s", dir, tu_get(c, "file")->valuestring);
        bad += check_case(file, texts, c);
        n++;
    }
    cJSON_Delete(j);
    cr_assert(n > 0);
    cr_assert_eq(bad, 0, "%d texts differ from the reference's ids", bad);
}

Test(tokenizer_gguf, fixtures_match_hugging_face)
{
    char dir[1024], json[1100];
    snprintf(dir, sizeof dir, "%s/gguf-tokenizer", getenv("HP_FIXTURES"));
    snprintf(json, sizeof json, "%s/cases.json", dir);
    check_cases(dir, json);
}

Test(tokenizer_gguf, smollm2_matches_its_tokenizer)
{
    char dir[1024], json[1100], file[1100];
    snprintf(dir, sizeof dir, "%s/../models", getenv("HP_TESTS"));
    snprintf(file, sizeof file, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir);
    if (access(file, R_OK) != 0)
        cr_skip_test("models/SmolLM2-135M-Instruct.Q4_1.gguf is not there (scripts/get-smollm2.sh fetches it)");
    snprintf(json, sizeof json, "%s/smollm2-gguf/tokenizer-cases.json", getenv("HP_FIXTURES"));
    check_cases(dir, json);
    /* byte-level BPE loses nothing, and SmolLM2 does not clean up spaces: decoding gives the text back */
    struct hp_tokenizer *t;
    struct hp_error err = {0};
    cr_assert_eq(hp_tokenizer_open(file, &t, &err), HP_OK, "%s", err.msg);
    cr_assert(strstr(hp_tokenizer_source(t), "pre-tokenizer \"smollm\", 49152 tokens"), "%s", hp_tokenizer_source(t));
    const char *s = "Numbers 12345, <|im_start|>user\n  spaces\tand caf\xc3\xa9";
    struct hp_encoding e;
    cr_assert_eq(hp_tokenizer_encode(t, s, strlen(s), NULL, 0, true, &e, &err), HP_OK, "%s", err.msg);
    char *back;
    size_t n;
    cr_assert_eq(hp_tokenizer_decode(t, e.ids, e.n, false, &back, &n, &err), HP_OK, "%s", err.msg);
    cr_assert_str_eq(back, s);
    cr_assert_eq(hp_tokenizer_separator(t), 0, "<|endoftext|> after each packed document");
    cr_assert_eq(hp_tokenizer_pad(t), 2, "padding_token_id");
    free(back);
    hp_encoding_free(&e);
    hp_tokenizer_free(t);
    /* inspect says where the tokenizer comes from */
    char args[1200], out[4096];
    snprintf(args, sizeof args, "inspect --model %s", file);
    cr_assert_eq(tu_headprune(NULL, args, g_tmp, out, sizeof out, NULL, 0), 0);
    cr_assert(strstr(out, "\ntokenizer      ") && strstr(out, "SmolLM2-135M-Instruct.Q4_1.gguf (its metadata: "
                                                            "byte-level BPE \"gpt2\", pre-tokenizer \"smollm\""),
              "%s", out);
    snprintf(args, sizeof args, "inspect --model %s --json", file);
    cr_assert_eq(tu_headprune(NULL, args, g_tmp, out, sizeof out, NULL, 0), 0);
    cJSON *o = cJSON_Parse(out), *src = cJSON_GetObjectItem(o, "tokenizer");
    cr_assert(cJSON_IsString(src) && strstr(src->valuestring, "(its metadata: byte-level BPE \"gpt2\", "
                                                              "pre-tokenizer \"smollm\", 49152 tokens)"), "%s", out);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(o, "gguf")), "%s", out);
    cJSON_Delete(o);
}

// --- GGUF files built key by key ---------------------------------------------------------------------------------

/* A GGUF file (version 3, no tensors) built key by key. */
struct gb {
    char *p;
    size_t n, cap;
    uint64_t n_kv;
};

static void put(struct gb *b, const void *x, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = 2 * (b->n + n) + 256;
        b->p = realloc(b->p, b->cap);
        cr_assert(b->p);
    }
    memcpy(b->p + b->n, x, n);
    b->n += n;
}

static void put_u32(struct gb *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(struct gb *b, uint64_t v) { put(b, &v, 8); }

static void put_s(struct gb *b, const char *s, size_t n)
{
    put_u64(b, n);
    put(b, s, n);
}

static void key(struct gb *b, const char *k, uint32_t type)
{
    put_s(b, k, strlen(k));
    put_u32(b, type);
    b->n_kv++;
}

static void kv_str(struct gb *b, const char *k, const char *v)
{
    key(b, k, 8);
    put_s(b, v, strlen(v));
}

static void kv_u32(struct gb *b, const char *k, uint32_t v)
{
    key(b, k, 4);
    put_u32(b, v);
}

/* An array of n strings, each NUL-terminated in v one after another (so a string may not hold a NUL) */
static void kv_strs(struct gb *b, const char *k, const char *v, int n)
{
    key(b, k, 9);
    put_u32(b, 8);
    put_u64(b, (uint64_t)n);
    for (int i = 0; i < n; i++, v += strlen(v) + 1)
        put_s(b, v, strlen(v));
}

static void kv_i32s(struct gb *b, const char *k, const int32_t *v, int n)
{
    key(b, k, 9);
    put_u32(b, 5);
    put_u64(b, (uint64_t)n);
    put(b, v, 4 * (size_t)n);
}

static void kv_f32s(struct gb *b, const char *k, const float *v, int n)
{
    key(b, k, 9);
    put_u32(b, 6);
    put_u64(b, (uint64_t)n);
    put(b, v, 4 * (size_t)n);
}

/* b written as g_tmp/name.gguf (header first), b freed; the path. */
static const char *write_gguf(struct gb *b, const char *name)
{
    static char path[256];
    struct gb f = {0};
    put(&f, "GGUF", 4);
    put_u32(&f, 3);
    put_u64(&f, 0);
    put_u64(&f, b->n_kv);
    put(&f, b->p, b->n);
    snprintf(path, sizeof path, "%s/%s.gguf", g_tmp, name);
    tu_spit(path, f.p, f.n);
    free(f.p);
    free(b->p);
    memset(b, 0, sizeof *b);
    return path;
}

// --- where it comes from ------------------------------------------------------------------------------

static void copy(const char *from, const char *to)
{
    size_t n;
    char *b = tu_slurp(from, &n);
    tu_spit(to, b, n);
    free(b);
}

Test(tokenizer_gguf, a_folders_tokenizer_json_wins)
{
    char src[1024], p[1100], q[1100];
    snprintf(src, sizeof src, "%s/gguf-tokenizer/bpe-smollm.gguf", getenv("HP_FIXTURES"));
    snprintf(p, sizeof p, "%s/m.gguf", g_tmp);
    copy(src, p);
    struct hp_tokenizer *t;
    struct hp_error err = {0};
    cr_assert(hp_tokenizer_present(g_tmp));
    cr_assert_eq(hp_tokenizer_open(g_tmp, &t, &err), HP_OK, "%s", err.msg); /* the folder: its one .gguf */
    cr_assert(strstr(hp_tokenizer_source(t), "m.gguf (its metadata: byte-level BPE \"gpt2\", pre-tokenizer "
                                             "\"smollm\", 521 tokens)"),
              "%s", hp_tokenizer_source(t));
    hp_tokenizer_free(t);
    /* the same tokenizer as a tokenizer.json (Digits, then ByteLevel): the same ids, from that file */
    snprintf(src, sizeof src, "%s/gguf-tokenizer/bpe-smollm.tokenizer.json", getenv("HP_FIXTURES"));
    snprintf(q, sizeof q, "%s/tokenizer.json", g_tmp);
    copy(src, q);
    cr_assert_eq(hp_tokenizer_open(g_tmp, &t, &err), HP_OK, "%s", err.msg);
    cr_assert_str_eq(hp_tokenizer_source(t), q, "a tokenizer.json beside the file wins");
    hp_tokenizer_free(t);
    char json[1100];
    snprintf(json, sizeof json, "%s/gguf-tokenizer/cases.json", getenv("HP_FIXTURES"));
    cJSON *j = tu_read_json(json);
    const cJSON *c;
    cJSON_ArrayForEach(c, tu_get(j, "cases")) if (strcmp(tu_get(c, "file")->valuestring, "bpe-smollm.gguf") == 0)
        cr_assert_eq(check_case(g_tmp, tu_get(j, "texts"), c), 0);
    cJSON_Delete(j);
    cr_assert_eq(hp_tokenizer_open(p, &t, &err), HP_OK, "%s", err.msg); /* the file named: its metadata */
    cr_assert(strstr(hp_tokenizer_source(t), "its metadata"), "%s", hp_tokenizer_source(t));
    hp_tokenizer_free(t);
}


/* A GGUF without a tokenizer has none, and says how to give one. */
Test(tokenizer_gguf, none_in_the_metadata)
{
    struct gb b = {0};
    kv_str(&b, "general.architecture", "llama");
    const char *p = write_gguf(&b, "bare");
    struct hp_tokenizer *t;
    struct hp_error err = {0};
    cr_assert(!hp_tokenizer_present(p));
    cr_assert_eq(hp_tokenizer_open(p, &t, &err), HP_ERR_IO);
    cr_assert(strstr(err.msg, "bare.gguf: no tokenizer in its metadata (tokenizer.ggml.model is missing)"), "%s",
              err.msg);
}

// --- hostile metadata ---------------------------------------------------------------------------------

/* A well-formed gpt2-kind tokenizer: "a", "b", "ab", "<|endoftext|>" and the merge "a b". */
static const char toks[] = "a\0b\0ab\0<|endoftext|>";
static const int32_t types4[] = {1, 1, 1, 3};

static void base(struct gb *b, const char *model)
{
    kv_str(b, "general.architecture", "llama");
    kv_str(b, "tokenizer.ggml.model", model);
}

/* The tokenizer of b is refused: status st, one line that starts with the file and holds words. */
static void refused(struct gb *b, const char *name, enum hp_status st, const char *words)
{
    const char *path = write_gguf(b, name);
    struct hp_tokenizer *t = NULL;
    struct hp_error err = {0};
    enum hp_status got = hp_tokenizer_open(path, &t, &err);
    cr_assert_eq(got, st, "%s: status %d, not %d: %s", name, got, st, err.msg);
    cr_assert_null(t);
    cr_assert(strncmp(err.msg, path, strlen(path)) == 0, "%s: the message does not name the file: %s", name, err.msg);
    cr_assert(strstr(err.msg, words), "%s: the message does not say '%s': %s", name, words, err.msg);
    cr_assert(!strchr(err.msg, '\n'), "%s: more than one line: %s", name, err.msg);
}

Test(tokenizer_gguf, refusals)
{
    struct gb b = {0};
    base(&b, "gpt2");
    kv_strs(&b, "tokenizer.ggml.tokens", toks, 4);
    kv_strs(&b, "tokenizer.ggml.merges", "a b", 1);
    kv_i32s(&b, "tokenizer.ggml.token_type", types4, 4);
    struct hp_tokenizer *t;
    struct hp_error err = {0};
    cr_assert_eq(hp_tokenizer_open(write_gguf(&b, "good"), &t, &err), HP_OK, "%s", err.msg);
    struct hp_encoding e;
    cr_assert_eq(hp_tokenizer_encode(t, "ab<|endoftext|>ba", 17, NULL, 0, true, &e, &err), HP_OK, "%s", err.msg);
    cr_assert(e.n == 4 && e.ids[0] == 2 && e.ids[1] == 3 && e.ids[2] == 1 && e.ids[3] == 0);
    hp_encoding_free(&e);
    hp_tokenizer_free(t);

    base(&b, "bert");
    refused(&b, "bert", HP_ERR_UNSUPPORTED, "tokenizer.ggml.model is \"bert\", a tokenizer kind headprune does not");
    base(&b, "t5");
    refused(&b, "t5", HP_ERR_UNSUPPORTED, "tokenizer.ggml.model is \"t5\"");
    base(&b, "gpt2");
    kv_str(&b, "tokenizer.ggml.pre", "no-such-pre");
    refused(&b, "pre", HP_ERR_UNSUPPORTED, "tokenizer.ggml.pre is \"no-such-pre\", a pre-tokenizer headprune");
    base(&b, "gpt2");
    refused(&b, "no_tokens", HP_ERR_FORMAT, "metadata key 'tokenizer.ggml.tokens' is missing");
    base(&b, "gpt2");
    kv_i32s(&b, "tokenizer.ggml.tokens", types4, 4);
    refused(&b, "tokens_type", HP_ERR_FORMAT, "tokenizer.ggml.tokens");
    base(&b, "gpt2");
    kv_strs(&b, "tokenizer.ggml.tokens", toks, 4);
    refused(&b, "no_merges", HP_ERR_FORMAT, "metadata key 'tokenizer.ggml.merges' is missing");
    base(&b, "gpt2");
    kv_strs(&b, "tokenizer.ggml.tokens", toks, 4);
    kv_strs(&b, "tokenizer.ggml.merges", "a b\0b c", 2);
    refused(&b, "merge_unknown", HP_ERR_FORMAT, "tokenizer.ggml.merges[1] names a token that is not in");
    base(&b, "gpt2");
    kv_strs(&b, "tokenizer.ggml.tokens", toks, 4);
    kv_strs(&b, "tokenizer.ggml.merges", "ab", 1);
    refused(&b, "merge_shape", HP_ERR_FORMAT, "tokenizer.ggml.merges[0] is not \"a b\"");
    base(&b, "gpt2");
    kv_strs(&b, "tokenizer.ggml.tokens", toks, 4);
    kv_strs(&b, "tokenizer.ggml.merges", "a b", 1);
    kv_u32(&b, "tokenizer.ggml.bos_token_id", 4);
    refused(&b, "bos_range", HP_ERR_FORMAT, "tokenizer.ggml.bos_token_id is 4, not an id of its 4 tokens");
    base(&b, "gpt2");
    kv_strs(&b, "tokenizer.ggml.tokens", toks, 4);
    kv_strs(&b, "tokenizer.ggml.merges", "a b", 1);
    kv_i32s(&b, "tokenizer.ggml.token_type", types4, 3);
    refused(&b, "types_count", HP_ERR_FORMAT, "tokenizer.ggml.token_type has 3 elements for 4 tokens");
    base(&b, "gpt2");
    kv_strs(&b, "tokenizer.ggml.tokens", toks, 4);
    kv_strs(&b, "tokenizer.ggml.merges", "a b", 1);
    kv_i32s(&b, "tokenizer.ggml.token_type", (const int32_t[]){1, 9, 1, 3}, 4);
    refused(&b, "types_value", HP_ERR_FORMAT, "tokenizer.ggml.token_type[1] is not a token type");
    base(&b, "gpt2");
    kv_strs(&b, "tokenizer.ggml.tokens", "a\0b\0a", 3);
    kv_strs(&b, "tokenizer.ggml.merges", "a b", 1);
    refused(&b, "duplicate", HP_ERR_FORMAT, "tokenizer.ggml.tokens[2] \"a\" is tokens[0] again");
    base(&b, "gpt2");
    kv_strs(&b, "tokenizer.ggml.tokens", "a\0\xff\xfe", 2);
    kv_strs(&b, "tokenizer.ggml.merges", "a b", 1);
    refused(&b, "utf8", HP_ERR_FORMAT, "tokenizer.ggml.tokens[1] is not valid UTF-8");
    base(&b, "llama");
    kv_strs(&b, "tokenizer.ggml.tokens", "<unk>\0<s>\0a", 3);
    refused(&b, "llama_nothing", HP_ERR_FORMAT, "'tokenizer.ggml.merges' and 'tokenizer.ggml.scores' are both");
    base(&b, "llama");
    kv_strs(&b, "tokenizer.ggml.tokens", "<unk>\0<s>\0a", 3);
    kv_f32s(&b, "tokenizer.ggml.scores", (const float[]){0, 0, 0}, 3);
    refused(&b, "llama_bos", HP_ERR_FORMAT, "add_bos_token is true (the default) but tokenizer.ggml.bos_token_id");
    base(&b, "llama");
    kv_strs(&b, "tokenizer.ggml.tokens", "<unk>\0<s>\0a", 3);
    kv_f32s(&b, "tokenizer.ggml.scores", (const float[]){0, NAN, 0}, 3);
    kv_u32(&b, "tokenizer.ggml.bos_token_id", 1);
    refused(&b, "llama_nan", HP_ERR_FORMAT, "tokenizer.ggml.scores[1] is not a finite number");
    base(&b, "llama");
    kv_strs(&b, "tokenizer.ggml.tokens", "<unk>\0<0x0G>", 2);
    kv_f32s(&b, "tokenizer.ggml.scores", (const float[]){0, 0}, 2);
    kv_i32s(&b, "tokenizer.ggml.token_type", (const int32_t[]){2, 6}, 2);
    kv_u32(&b, "tokenizer.ggml.bos_token_id", 0);
    refused(&b, "byte_token", HP_ERR_FORMAT, "tokenizer.ggml.tokens[1] has type 6 (byte) but is not <0xXX>");
}

/* Counts a file cannot hold are refused before anything is sized by them, in bounded memory: a child opens
 * a tokens array claiming 2^40 strings and a merges array claiming 2^60, and its peak resident set may grow
 * by at most 64 MB. Without a sanitizer the child also runs under a 256 MB address-space limit; under
 * AddressSanitizer that limit cannot be set (its shadow memory is reserved at start, terabytes of address
 * space), and its allocator aborts on an allocation of such a size, which fails the test just as well. */
#if defined(__SANITIZE_ADDRESS__)
#define HP_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HP_TEST_ASAN 1
#endif
#endif
Test(tokenizer_gguf, huge_counts_in_bounded_memory)
{
    const uint64_t claims[2] = {(uint64_t)1 << 40, (uint64_t)1 << 60};
    const char *keys[2] = {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"};
    for (int k = 0; k < 2; k++) {
        struct gb b = {0};
        base(&b, "gpt2");
        if (k == 1)
            kv_strs(&b, "tokenizer.ggml.tokens", toks, 4);
        key(&b, keys[k], 9);
        put_u32(&b, 8);
        put_u64(&b, claims[k]);
        put_s(&b, "a", 1);
        const char *path = write_gguf(&b, k ? "huge_merges" : "huge_tokens");
        pid_t pid = fork();
        if (pid == 0) {
#ifndef HP_TEST_ASAN
            struct rlimit r = {256u << 20, 256u << 20};
            if (setrlimit(RLIMIT_AS, &r) != 0)
                _exit(2);
#endif
            struct rusage before, after;
            getrusage(RUSAGE_SELF, &before);
            struct hp_tokenizer *t;
            struct hp_error err = {0};
            enum hp_status st = hp_tokenizer_open(path, &t, &err);
            getrusage(RUSAGE_SELF, &after);
            int small = after.ru_maxrss - before.ru_maxrss < 64 * 1024; /* kilobytes */
            _exit(st == HP_ERR_FORMAT && strstr(err.msg, path) && strstr(err.msg, keys[k]) && small ? 0 : 1);
        }
        int ws;
        cr_assert_eq(waitpid(pid, &ws, 0), pid);
        cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "%s: not refused naming the file and the key in bounded memory (status %#x)",
                  keys[k], ws);
    }
}

/* The command line: a refused tokenizer is one line on stderr and exit status 1. */
Test(tokenizer_gguf, cli_refusal_is_one_line)
{
    struct gb b = {0};
    base(&b, "rwkv");
    const char *path = write_gguf(&b, "rwkv");
    char args[512], out[256], errs[1024];
    snprintf(args, sizeof args, "tokenize --model %s /dev/null", path);
    cr_assert_eq(tu_headprune(NULL, args, g_tmp, out, sizeof out, errs, sizeof errs), 1);
    cr_assert(strstr(errs, "tokenizer.ggml.model is \"rwkv\""), "%s", errs);
    cr_assert(strchr(errs, '\n') == errs + strlen(errs) - 1, "not one line: %s", errs);
}

/* Text through a GGUF file's tokenizer, and the cache of tokenized text: two files in one folder, with no
 * tokenizer files to tell them apart, get their own ids (the cache's key holds each file's tokenizer metadata;
 * before, only a folder's files were hashed, and the second file would have been handed the first's ids). */
Test(tokenizer_gguf, text_data_and_its_cache)
{
    char a[1024], b[1024], txt[128];
    snprintf(a, sizeof a, "%s/gguf-tokenizer/bpe-smollm.gguf", getenv("HP_FIXTURES"));
    snprintf(b, sizeof b, "%s/gguf-tokenizer/llama-spm.gguf", getenv("HP_FIXTURES"));
    snprintf(txt, sizeof txt, "%s/held.txt", g_tmp);
    const char text[] = "Hello world, numbers 12345 and caf\xc3\xa9.\n\nA second document <|im_start|> here.\n";
    tu_spit(txt, text, sizeof text - 1);
    const char *models[3] = {a, b, a};
    struct hp_data *d[3];
    struct hp_error err = {0};
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(hp_data_load_for(txt, models[k], NULL, 8, &d[k], &err), HP_OK, "%s", err.msg);
        /* the ids are the tokenizer's own: the packed documents' first ids */
        struct hp_tokenizer *t;
        struct hp_encoding e;
        cr_assert_eq(hp_tokenizer_open(models[k], &t, &err), HP_OK, "%s", err.msg);
        cr_assert_eq(hp_tokenizer_encode(t, text, strcspn(text, "\n"), NULL, 0, true, &e, &err), HP_OK, "%s", err.msg);
        for (int i = 0; i < 8 && i < e.n; i++)
            cr_assert_eq(d[k]->ids[i], e.ids[i], "%s: id %d is %d, its tokenizer's %d", models[k], i, d[k]->ids[i],
                         e.ids[i]);
        hp_encoding_free(&e);
        hp_tokenizer_free(t);
    }
    cr_assert_eq(d[0]->n_seqs, d[2]->n_seqs);
    cr_assert(memcmp(d[0]->ids, d[2]->ids, (size_t)d[0]->n_seqs * 8 * sizeof(int32_t)) == 0, "from the cache");
    for (int k = 0; k < 3; k++)
        hp_data_free(d[k]);
}
