/*
 * cli.c -- the headprune command line: argv in, results out.
 *
 * The only module that prints or exits. Errors are one line on stderr,
 * "headprune: <file>: <problem> (<hint>)", with exit status 1; usage mistakes
 * exit with status 2.
 */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "headprune.h"

static const char *prog = "headprune";

static int die(const struct hp_error *err)
{
    fprintf(stderr, "%s: %s\n", prog, err->msg);
    return 1;
}

static int usage_error(const char *cmd, const char *msg)
{
    fprintf(stderr, "%s %s: %s\nTry '%s %s --help'.\n", prog, cmd, msg, prog, cmd);
    return 2;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static bool parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

static const char *arch_name(enum hp_arch a)
{
    return a == HP_ARCH_GPT2 ? "GPT-2" : a == HP_ARCH_BERT ? "BERT" : "Llama";
}

// --- inspect ------------------------------------------------------------------

static const char inspect_help[] =
    "Usage: headprune inspect --model DIR [--json]\n"
    "\n"
    "Print what headprune sees in a Hugging Face model directory (config.json plus\n"
    "model.safetensors or sharded safetensors): architecture, layers, query heads,\n"
    "key/value heads, head size, parameter count and stored dtype.\n"
    "\n"
    "  --model DIR   the model directory\n"
    "  --json        one JSON object instead of the table\n";

static int cmd_inspect(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"json", no_argument, 0, 'j'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *dir = NULL;
    bool json = false;
    int c;
    while ((c = getopt_long(argc, argv, "m:jh", opts, NULL)) != -1) {
        switch (c) {
        case 'm': dir = optarg; break;
        case 'j': json = true; break;
        case 'h': fputs(inspect_help, stdout); return 0;
        default: return usage_error("inspect", "unknown option");
        }
    }
    if (!dir)
        return usage_error("inspect", "--model DIR is required");
    struct hp_error err = {0};
    struct hp_model *m;
    if (hp_model_open(dir, &m, &err) != HP_OK)
        return die(&err);
    const struct hp_model_info *in = hp_model_get_info(m);
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", dir);
        cJSON_AddStringToObject(o, "model_type", in->model_type);
        cJSON_AddStringToObject(o, "architecture", arch_name(in->arch));
        cJSON_AddNumberToObject(o, "n_layers", in->n_layers);
        cJSON_AddNumberToObject(o, "n_heads", in->n_heads);
        cJSON_AddNumberToObject(o, "n_kv_heads", in->n_kv_heads);
        cJSON_AddNumberToObject(o, "d_head", in->d_head);
        cJSON_AddNumberToObject(o, "d_model", in->d_model);
        cJSON_AddNumberToObject(o, "d_ff", in->d_ff);
        cJSON_AddNumberToObject(o, "n_vocab", in->n_vocab);
        cJSON_AddNumberToObject(o, "n_ctx", in->n_ctx);
        cJSON_AddNumberToObject(o, "n_params", (double)in->n_params);
        cJSON_AddStringToObject(o, "dtype", in->dtype);
        cJSON_AddBoolToObject(o, "causal", in->causal);
        cJSON_AddBoolToObject(o, "lm_head", in->has_lm_head);
        char *s = cJSON_Print(o);
        puts(s);
        free(s);
        cJSON_Delete(o);
    } else {
        printf("model          %s\n", dir);
        printf("architecture   %s (model_type %s), %s\n", arch_name(in->arch), in->model_type,
               in->causal ? "causal decoder" : "bidirectional encoder");
        printf("layers         %d\n", in->n_layers);
        printf("query heads    %d per layer, %d in all\n", in->n_heads, in->n_heads * in->n_layers);
        printf("KV heads       %d per layer%s\n", in->n_kv_heads,
               in->n_kv_heads < in->n_heads ? " (grouped-query attention)" : "");
        printf("head size      %d\n", in->d_head);
        printf("hidden size    %d (MLP %d)\n", in->d_model, in->d_ff);
        printf("vocabulary     %d\n", in->n_vocab);
        printf("positions      %d\n", in->n_ctx);
        printf("parameters     %lld\n", (long long)in->n_params);
        printf("dtype          %s\n", in->dtype);
        printf("LM head        %s\n", in->has_lm_head ? (in->causal ? "yes" : "yes (MLM)") : "no");
    }
    hp_model_close(m);
    return 0;
}

// --- eval ---------------------------------------------------------------------

static const char eval_help[] =
    "Usage: headprune eval --model DIR --data FILE [options]\n"
    "\n"
    "Evaluate a model on held-out tokens with attention heads ablated, and report\n"
    "the loss (nats per token), perplexity, top-1 accuracy and KL(unmasked || masked)\n"
    "for causal LMs, the MLM loss for BERT with labels, or the cosine similarity of\n"
    "mean-pooled final hidden states to the unmasked model's for encoders.\n"
    "\n"
    "  --model DIR        Hugging Face model directory (config.json + safetensors)\n"
    "  --data FILE        token ids: .npy (int32/int64/uint16, [n_seqs, seq_len] or 1-D),\n"
    "                     .jsonl ({\"ids\": [...], optional \"labels\", \"attention_mask\",\n"
    "                     \"token_type_ids\"}) or an llm.c / nanoGPT .bin token file\n"
    "  --seq-len N        cut 1-D data into sequences of N tokens\n"
    "  --mask SPEC        heads to ablate: comma-separated LAYER.HEAD (0.3,2.1),\n"
    "                     LAYER.* (a whole layer), kv:LAYER.GROUP (every query head\n"
    "                     sharing one key/value head); layers and heads count from 0\n"
    "  --keep SPEC        ablate every head except these\n"
    "  --ablation KIND    zero (default): the head's output is zero;\n"
    "                     mean: replaced by its mean over all held-out tokens;\n"
    "                     mean-pos: replaced by its mean at each position\n"
    "                     (means come from the unmasked model on the same data)\n"
    "  --threads N        BLIS threads (default: all cores)\n"
    "  --json             print one JSON object, with per-sequence values\n"
    "  --quiet            no progress on stderr\n"
    "\n"
    "Kernel set: skx is chosen on CPUs with AVX-512F unless BLIS_ARCH_TYPE is set.\n";

struct progress {
    bool on;
    double t0;
};

static void show_progress(void *user, int done, int total)
{
    struct progress *p = user;
    if (!p->on)
        return;
    double el = now() - p->t0;
    fprintf(stderr, "\r  %d/%d sequences  %.1f s  ETA %.1f s ", done, total, el,
            done ? el / done * (total - done) : 0.0);
    if (done == total)
        fputs("\r\033[K", stderr);
    fflush(stderr);
}

static cJSON *num_array(const double *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

static int cmd_eval(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"data", required_argument, 0, 'd'},
        {"seq-len", required_argument, 0, 's'}, {"mask", required_argument, 0, 'k'},
        {"keep", required_argument, 0, 'K'}, {"ablation", required_argument, 0, 'a'},
        {"threads", required_argument, 0, 't'}, {"json", no_argument, 0, 'j'},
        {"quiet", no_argument, 0, 'q'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *dir = NULL, *data_path = NULL, *spec = NULL, *abl_name = "zero";
    bool keep = false, json = false, quiet = false;
    int seq_len = 0, threads = 0, c;
    while ((c = getopt_long(argc, argv, "m:d:s:k:K:a:t:jqh", opts, NULL)) != -1) {
        switch (c) {
        case 'm': dir = optarg; break;
        case 'd': data_path = optarg; break;
        case 's':
            if (!parse_int(optarg, 1, 1 << 20, &seq_len))
                return usage_error("eval", "--seq-len must be a positive integer");
            break;
        case 'k':
        case 'K':
            if (spec)
                return usage_error("eval", "give either --mask or --keep, once");
            spec = optarg;
            keep = c == 'K';
            break;
        case 'a': abl_name = optarg; break;
        case 't':
            if (!parse_int(optarg, 1, 1024, &threads))
                return usage_error("eval", "--threads must be a positive integer");
            break;
        case 'j': json = true; break;
        case 'q': quiet = true; break;
        case 'h': fputs(eval_help, stdout); return 0;
        default: return usage_error("eval", "unknown option");
        }
    }
    if (optind < argc)
        return usage_error("eval", "unexpected argument");
    if (!dir || !data_path)
        return usage_error("eval", "--model DIR and --data FILE are required");
    enum hp_ablation abl;
    if (strcmp(abl_name, "zero") == 0)
        abl = HP_ABLATE_ZERO;
    else if (strcmp(abl_name, "mean") == 0)
        abl = HP_ABLATE_MEAN;
    else if (strcmp(abl_name, "mean-pos") == 0)
        abl = HP_ABLATE_MEAN_POS;
    else
        return usage_error("eval", "--ablation must be zero, mean or mean-pos");

    hp_runtime_init(threads);
    struct hp_error err = {0};
    struct hp_model *m = NULL;
    struct hp_data *d = NULL;
    struct hp_mask *mask = NULL;
    struct hp_evaluator *ev = NULL;
    struct hp_metrics *mt = NULL;
    int rc = 1;
    if (hp_model_open(dir, &m, &err) != HP_OK)
        goto out;
    const struct hp_model_info *in = hp_model_get_info(m);
    if (hp_data_load(data_path, seq_len, &d, &err) != HP_OK)
        goto out;
    if (spec && hp_mask_parse(spec, keep, in, &mask, &err) != HP_OK)
        goto out;
    if (hp_evaluator_new(m, d, &ev, &err) != HP_OK)
        goto out;
    struct progress pr = {!quiet && isatty(STDERR_FILENO), now()};
    hp_evaluator_set_progress(ev, show_progress, &pr);
    double t0 = now();
    if (hp_evaluator_run(ev, mask, abl, &mt, &err) != HP_OK)
        goto out;
    double secs = now() - t0;
    int n_abl = mask ? hp_mask_count_ablated(mask) : 0;
    int n_all = in->n_layers * in->n_heads;

    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", dir);
        cJSON_AddStringToObject(o, "data", data_path);
        cJSON_AddStringToObject(o, "mask", spec ? spec : "");
        cJSON_AddBoolToObject(o, "keep", keep);
        cJSON_AddStringToObject(o, "ablation", abl_name);
        cJSON_AddNumberToObject(o, "n_ablated", n_abl);
        cJSON_AddNumberToObject(o, "n_heads_total", n_all);
        if (mt->has_loss) {
            cJSON_AddNumberToObject(o, "loss", mt->loss);
            cJSON_AddNumberToObject(o, "ppl", mt->ppl);
            cJSON_AddNumberToObject(o, "acc", mt->acc);
            cJSON_AddNumberToObject(o, "kl", mt->kl);
        }
        if (mt->has_cos)
            cJSON_AddNumberToObject(o, "cos", mt->cos);
        cJSON_AddNumberToObject(o, "n_tokens", (double)mt->n_tokens);
        cJSON_AddNumberToObject(o, "n_seqs", mt->n_seqs);
        cJSON *ps = cJSON_AddObjectToObject(o, "per_seq");
        if (mt->has_loss) {
            cJSON_AddItemToObject(ps, "loss", num_array(mt->seq_loss, mt->n_seqs));
            cJSON_AddItemToObject(ps, "acc", num_array(mt->seq_acc, mt->n_seqs));
            cJSON_AddItemToObject(ps, "kl", num_array(mt->seq_kl, mt->n_seqs));
        }
        if (mt->has_cos)
            cJSON_AddItemToObject(ps, "cos", num_array(mt->seq_cos, mt->n_seqs));
        cJSON *tk = cJSON_CreateArray();
        for (int i = 0; i < mt->n_seqs; i++)
            cJSON_AddItemToArray(tk, cJSON_CreateNumber((double)mt->seq_tokens[i]));
        cJSON_AddItemToObject(ps, "tokens", tk);
        cJSON_AddStringToObject(o, "kernel", hp_runtime_kernel());
        cJSON_AddNumberToObject(o, "seconds", secs);
        char *s = cJSON_PrintUnformatted(o);
        puts(s);
        free(s);
        cJSON_Delete(o);
    } else {
        printf("model     %s (%s, %d layers x %d heads, %d KV heads)\n", dir, in->model_type, in->n_layers,
               in->n_heads, in->n_kv_heads);
        printf("data      %s: %d sequences x %d tokens\n", data_path, d->n_seqs, d->seq_len);
        printf("ablated   %d of %d heads (%s)%s%s\n", n_abl, n_all, abl_name, spec ? (keep ? ", keep " : ": ") : "",
               spec ? spec : "");
        if (mt->has_loss)
            printf("loss      %.6f nats/token   ppl %.4f   acc %.4f   KL %.6f nats\n", mt->loss, mt->ppl, mt->acc,
                   mt->kl);
        if (mt->has_cos)
            printf("cosine    %.6f (mean-pooled final hidden states vs the unmasked model)\n", mt->cos);
        printf("tokens    %lld scored in %d sequences, %.2f s (BLIS kernel %s%s)\n", (long long)mt->n_tokens,
               mt->n_seqs, secs, hp_runtime_kernel(), hp_runtime_kernel_from_env() ? ", from BLIS_ARCH_TYPE" : "");
    }
    rc = 0;
out:
    if (rc)
        die(&err);
    hp_metrics_free(mt);
    hp_evaluator_free(ev);
    hp_mask_free(mask);
    hp_data_free(d);
    hp_model_close(m);
    return rc;
}

// --- main ---------------------------------------------------------------------

static const char main_help[] =
    "Usage: headprune COMMAND [options]\n"
    "\n"
    "What is each attention head worth? headprune ablates heads of Hugging Face\n"
    "checkpoints (GPT-2, BERT, Llama/Mistral/Qwen2 with grouped-query attention)\n"
    "and measures the effect on held-out data.\n"
    "\n"
    "Commands:\n"
    "  inspect   describe a model directory\n"
    "  eval      evaluate one masked variant on held-out tokens\n"
    "\n"
    "'headprune COMMAND --help' explains each command.\n";

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(main_help, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        fputs(main_help, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("headprune %s\n", HP_VERSION);
        return 0;
    }
    if (strcmp(cmd, "inspect") == 0)
        return cmd_inspect(argc - 1, argv + 1);
    if (strcmp(cmd, "eval") == 0)
        return cmd_eval(argc - 1, argv + 1);
    fprintf(stderr, "%s: unknown command '%s'\n%s", prog, cmd, main_help);
    return 2;
}
