/*
 * cli.c -- the headprune command line: argv in, results out.
 *
 * The only module that prints or exits. Errors are one line on stderr,
 * "headprune: <file>: <problem> (<hint>)", with exit status 1; usage mistakes
 * exit with status 2.
 */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <errno.h>
#include <ctype.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/stat.h>
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

/*
 * Every number on the command line goes through here: decimal digits only
 * (an optional '-'), no blanks, no trailing text, and within [lo, hi] before
 * it is narrowed to an int -- strtoll's overflow (ERANGE) counts as out of
 * range, so 4294967297 is refused rather than wrapped to 1.
 */
static bool parse_int(const char *s, int lo, int hi, int *out)
{
    if (!((*s >= '0' && *s <= '9') || (*s == '-' && s[1] >= '0' && s[1] <= '9')))
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno == ERANGE || *end != '\0' || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

/* "I/N" with 1 <= I <= N, each part a number as parse_int takes it. */
static bool parse_shard(const char *s, int *si, int *sn)
{
    const char *slash = strchr(s, '/');
    char first[32];
    if (!slash || (size_t)(slash - s) >= sizeof first)
        return false;
    memcpy(first, s, (size_t)(slash - s));
    first[slash - s] = '\0';
    return parse_int(first, 1, INT_MAX, si) && parse_int(slash + 1, 1, INT_MAX, sn) && *si <= *sn;
}

/* A finite number >= lo, the whole text. */
static bool parse_double(const char *s, double lo, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno == ERANGE || !isfinite(v) || v < lo || isspace((unsigned char)*s))
        return false;
    *out = v;
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
    "                     \"token_type_ids\"}) or an llm.c / nanoGPT .bin token file;\n"
    "                     or text, tokenized with the model's tokenizer: .txt (documents\n"
    "                     separated by blank lines, packed into rows of --seq-len) or\n"
    "                     .jsonl ({\"text\": ...} or {\"text_a\": ..., \"text_b\": ...})\n"
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
    if (hp_data_load_for(data_path, dir, in, seq_len, &d, &err) != HP_OK)
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
        /* a spec can list every head of a large model: show its start (--json has it whole) */
        int shown = spec && strlen(spec) > 72 ? 60 : spec ? (int)strlen(spec) : 0;
        printf("ablated   %d of %d heads (%s)%s%.*s%s\n", n_abl, n_all, abl_name, spec ? (keep ? ", keep " : ": ") : "",
               shown, spec ? spec : "", spec && shown < (int)strlen(spec) ? " ..." : "");
        if (mt->has_loss)
            printf("loss      %.6f nats/token   ppl %.4f   acc %.4f   KL %.6f nats\n", mt->loss, mt->ppl, mt->acc,
                   mt->kl);
        if (mt->has_cos)
            printf("cosine    %.6f (%s-pooled final hidden states vs the unmasked model)\n", mt->cos,
                   in->pooling == HP_POOL_CLS ? "CLS" : in->pooling == HP_POOL_MAX ? "max" : "mean");
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

// --- tables -------------------------------------------------------------------

enum fmt { FMT_TABLE, FMT_CSV, FMT_JSON };

static void csv_cell(const char *c)
{
    if (!c)
        return;
    if (strpbrk(c, ",\"\n")) {
        putchar('"');
        for (; *c; c++) {
            if (*c == '"')
                putchar('"');
            putchar(*c);
        }
        putchar('"');
    } else {
        fputs(c, stdout);
    }
}

static void print_table(const struct hp_table *t, enum fmt f)
{
    if (f == FMT_JSON) {
        cJSON *a = cJSON_CreateArray();
        for (int r = 0; r < t->n_rows; r++) {
            cJSON *o = cJSON_CreateObject();
            for (int c = 0; c < t->n_cols; c++) {
                const char *v = t->cells[(size_t)r * t->n_cols + c];
                if (!v || !*v)
                    cJSON_AddNullToObject(o, t->cols[c]);
                else if (t->numeric[c])
                    cJSON_AddNumberToObject(o, t->cols[c], strtod(v, NULL));
                else
                    cJSON_AddStringToObject(o, t->cols[c], v);
            }
            cJSON_AddItemToArray(a, o);
        }
        char *s = cJSON_Print(a);
        puts(s);
        free(s);
        cJSON_Delete(a);
        return;
    }
    if (f == FMT_CSV) {
        for (int c = 0; c < t->n_cols; c++) {
            if (c)
                putchar(',');
            csv_cell(t->cols[c]);
        }
        putchar('\n');
        for (int r = 0; r < t->n_rows; r++) {
            for (int c = 0; c < t->n_cols; c++) {
                if (c)
                    putchar(',');
                csv_cell(t->cells[(size_t)r * t->n_cols + c]);
            }
            putchar('\n');
        }
        return;
    }
    int *w = calloc((size_t)t->n_cols, sizeof *w);
    for (int c = 0; c < t->n_cols; c++) {
        w[c] = (int)strlen(t->cols[c]);
        for (int r = 0; r < t->n_rows; r++) {
            const char *v = t->cells[(size_t)r * t->n_cols + c];
            if (v && (int)strlen(v) > w[c])
                w[c] = (int)strlen(v);
        }
    }
    if (t->note)
        printf("# %s\n", t->note);
    for (int c = 0; c < t->n_cols; c++) {
        if (c == t->n_cols - 1 && !t->numeric[c])
            printf("%s%s", c ? "  " : "", t->cols[c]);
        else
            printf(t->numeric[c] ? "%s%*s" : "%s%-*s", c ? "  " : "", w[c], t->cols[c]);
    }
    putchar('\n');
    for (int c = 0; c < t->n_cols; c++) {
        printf("%s", c ? "  " : "");
        for (int i = 0; i < w[c]; i++)
            putchar('-');
    }
    putchar('\n');
    for (int r = 0; r < t->n_rows; r++) {
        for (int c = 0; c < t->n_cols; c++) {
            const char *v = t->cells[(size_t)r * t->n_cols + c];
            if (c == t->n_cols - 1 && !t->numeric[c])
                printf("%s%s", c ? "  " : "", v ? v : "");
            else
                printf(t->numeric[c] ? "%s%*s" : "%s%-*s", c ? "  " : "", w[c], v ? v : "");
        }
        putchar('\n');
    }
    free(w);
}

static bool parse_format(const char *s, enum fmt *f)
{
    if (strcmp(s, "table") == 0)
        *f = FMT_TABLE;
    else if (strcmp(s, "csv") == 0)
        *f = FMT_CSV;
    else if (strcmp(s, "json") == 0)
        *f = FMT_JSON;
    else
        return false;
    return true;
}

// --- plan ---------------------------------------------------------------------

static const char plan_help[] =
    "Usage: headprune plan PLAN.yaml [--format table|csv|json]\n"
    "\n"
    "Expand a plan into its jobs and print them, with their count and an estimate\n"
    "of the cost, without running anything. Iterative studies are listed by their\n"
    "expected number of evaluations: their masks depend on results.\n";

/* Rough forward FLOPs of a variant run from layer `from` on: every matrix product plus attention. */
static double forward_flops(const struct hp_model_info *in, int n_seqs, int seq_len, int from)
{
    double T = seq_len, d = in->d_model, qd = (double)in->n_heads * in->d_head,
           kvd = (double)in->n_kv_heads * in->d_head;
    double mlp = in->arch == HP_ARCH_LLAMA ? 3 * d * in->d_ff : 2 * d * in->d_ff;
    double per_layer = 2 * T * (d * qd + 2 * d * kvd + qd * d + mlp) + 4 * T * T * qd;
    double head = in->has_lm_head ? 2 * T * d * in->n_vocab : 0;
    return n_seqs * ((in->n_layers - from) * per_layer + head);
}

/* The first layer a job's mask changes: where the reuse path starts it (n_layers: nothing to run). */
static int first_masked_layer(const struct hp_mask *m)
{
    for (int i = 0; i < m->n_layers * m->n_heads; i++)
        if (m->gate[i] != 1.0f)
            return i / m->n_heads;
    return m->n_layers;
}

/* Evaluations an iterative study will need: candidates scored plus curve points. */
static long iterative_evals(const struct hp_study *s, const struct hp_model_info *in)
{
    struct hp_iterative_schedule sc = hp_study_schedule(s, in);
    int layers = s->n_layers_sel ? s->n_layers_sel : in->n_layers;
    if (s->keep_one_per_layer && sc.floor_units < layers)
        sc.floor_units = layers;
    long evals = 1;
    for (int left = sc.n_units; left > sc.floor_units; left -= sc.per_step)
        evals += left + 1;
    return evals;
}

static int cmd_plan(int argc, char **argv)
{
    static const struct option opts[] = {{"format", required_argument, 0, 'f'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    enum fmt f = FMT_TABLE;
    int c;
    while ((c = getopt_long(argc, argv, "f:h", opts, NULL)) != -1) {
        switch (c) {
        case 'f':
            if (!parse_format(optarg, &f))
                return usage_error("plan", "--format must be table, csv or json");
            break;
        case 'h': fputs(plan_help, stdout); return 0;
        default: return usage_error("plan", "unknown option");
        }
    }
    if (optind != argc - 1)
        return usage_error("plan", "give one PLAN.yaml");
    struct hp_error err = {0};
    struct hp_plan *p = NULL;
    struct hp_model *m = NULL;
    struct hp_data *d = NULL;
    struct hp_joblist *jl = NULL;
    struct hp_evaluator *ev = NULL;
    const char *metric = NULL;
    int rc = 1;
    if (hp_plan_load(argv[optind], &p, &err) != HP_OK || hp_model_open(p->model, &m, &err) != HP_OK ||
        hp_data_load_for(p->data, p->model, hp_model_get_info(m), p->seq_len, &d, &err) != HP_OK ||
        hp_evaluator_new(m, d, &ev, &err) != HP_OK ||
        hp_evaluator_pick_metric(ev, p->path, p->metric, &metric, &err) != HP_OK ||
        hp_plan_expand(p, hp_model_get_info(m), &jl, &err) != HP_OK) {
        die(&err);
        goto out;
    }
    const struct hp_model_info *in = hp_model_get_info(m);
    long iter = 0;
    for (int i = 0; i < p->n_studies; i++)
        if (p->studies[i].kind == HP_STUDY_ITERATIVE)
            iter += iterative_evals(&p->studies[i], in);
    if (f == FMT_TABLE) {
        double fl = forward_flops(in, d->n_seqs, d->seq_len, 0), reuse = 0;
        for (int j = 0; j < jl->n; j++) {
            int from = first_masked_layer(jl->jobs[j].mask);
            reuse += from < in->n_layers ? forward_flops(in, d->n_seqs, d->seq_len, from) : 0;
        }
        /* one unmasked pass per window of jobs; iterative candidates counted as whole passes */
        reuse += fl * ((jl->n + HP_SWEEP_BATCH - 1) / HP_SWEEP_BATCH) + fl * iter;
        printf("plan      %s (%s)\n", p->name, p->path);
        printf("model     %s (%s, %d layers x %d heads, %d KV heads)\n", p->model, in->model_type, in->n_layers,
               in->n_heads, in->n_kv_heads);
        printf("data      %s: %d sequences x %d tokens\n", p->data, d->n_seqs, d->seq_len);
        printf("ablation  %s, metric %s%s, seed %llu\n",
               p->ablation == HP_ABLATE_ZERO ? "zero" : p->ablation == HP_ABLATE_MEAN ? "mean" : "mean-pos", metric,
               p->metric[0] ? "" : " (the model's own)",
               (unsigned long long)p->seed);
        for (int i = 0; i < p->n_studies; i++) {
            int n = 0;
            for (int j = 0; j < jl->n; j++)
                n += jl->jobs[j].study == i;
            if (p->studies[i].kind == HP_STUDY_ITERATIVE)
                printf("study     %-16s %-10s about %ld evaluations (masks depend on results)\n", p->studies[i].name,
                       hp_study_kind_name(p->studies[i].kind), iterative_evals(&p->studies[i], in));
            else
                printf("study     %-16s %-10s %d jobs\n", p->studies[i].name, hp_study_kind_name(p->studies[i].kind), n);
        }
        printf("jobs      %d expanded + about %ld iterative = %ld evaluations\n", jl->n, iter, jl->n + iter);
        printf("cost      at most %.3g GFLOP per evaluation (a whole pass); about %.3g GFLOP in all, as each\n"
               "          variant runs from its first masked layer (%.3g GFLOP as whole passes); jobs\n"
               "          already in the database are skipped\n\n",
               fl / 1e9, reuse / 1e9, fl * (jl->n + iter) / 1e9);
    }
    struct hp_table t = {0};
    const char *cols[] = {"ord", "study", "kind", "label", "units", "heads", "mask"};
    bool num[] = {true, false, false, false, true, true, false};
    t.n_cols = 7;
    t.cols = (char **)cols;
    t.numeric = num;
    t.n_rows = jl->n;
    t.cells = calloc((size_t)jl->n * 7, sizeof(char *));
    for (int j = 0; j < jl->n; j++) {
        const struct hp_job *jb = &jl->jobs[j];
        char **row = t.cells + (size_t)j * 7;
        char buf[32];
        snprintf(buf, sizeof buf, "%d", j);
        row[0] = strdup(buf);
        row[1] = strdup(p->studies[jb->study].name);
        row[2] = strdup(hp_study_kind_name(p->studies[jb->study].kind));
        row[3] = strdup(jb->label);
        snprintf(buf, sizeof buf, "%d", jb->k);
        row[4] = strdup(buf);
        snprintf(buf, sizeof buf, "%d", hp_mask_count_ablated(jb->mask));
        row[5] = strdup(buf);
        row[6] = hp_mask_format(jb->mask);
    }
    print_table(&t, f);
    for (size_t i = 0; i < (size_t)jl->n * 7; i++)
        free(t.cells[i]);
    free(t.cells);
    rc = 0;
out:
    hp_joblist_free(jl);
    hp_evaluator_free(ev);
    hp_data_free(d);
    hp_model_close(m);
    hp_plan_free(p);
    return rc;
}

// --- run ----------------------------------------------------------------------

static const char run_help[] =
    "Usage: headprune run PLAN.yaml [--db FILE] [--shard I/N] [--threads N]\n"
    "                     [--batch N] [--plain] [--quiet]\n"
    "\n"
    "Run a plan's jobs into an SQLite results database. Jobs are content-addressed\n"
    "(model and data digests, mask, ablation, engine numeric version): finished\n"
    "ones are skipped, so re-running resumes and changing a parameter adds jobs.\n"
    "Variants are evaluated together in batches, reusing the unmasked model's\n"
    "work: each starts at its first masked layer. Every result is written as its\n"
    "batch ends; Ctrl-C stops after the current batch, and even kill -9 loses at\n"
    "most that batch.\n"
    "\n"
    "  --db FILE      results database (default results/<plan name>.db, next to\n"
    "                 the current directory's results/ folder)\n"
    "  --shard I/N    run only the I-th of N slices of the jobs (1-based), e.g. in\n"
    "                 N processes or on N machines; merge with 'headprune merge'.\n"
    "                 Iterative studies run in shard 1 only.\n"
    "  --threads N    threads (default: as many as other processes leave CPUs\n"
    "                 idle, re-measured every quarter second from /proc/stat, so\n"
    "                 a busy machine or a second run does not stall the barriers\n"
    "                 of a 2-thread sweep; results do not depend on the count)\n"
    "  --batch N      variants evaluated together (default 64): larger batches\n"
    "                 share more work, smaller ones lose less to a kill\n"
    "  --plain        no reuse: every variant by whole forward passes of its own\n"
    "                 (the reference path the default is tested against; slower)\n"
    "  --quiet        no progress output\n";

static volatile int g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

struct run_progress {
    bool tty, quiet, started;
    double last;
    const char *plan, *db;
};

static void fmt_eta(double s, char *buf, size_t n)
{
    if (!isfinite(s) || s < 0)
        snprintf(buf, n, "?");
    else if (s < 60)
        snprintf(buf, n, "%.0fs", s);
    else if (s < 3600)
        snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else
        snprintf(buf, n, "%dh%02dm", (int)s / 3600, (int)s % 3600 / 60);
}

static void run_progress_cb(void *user, const struct hp_sweep_progress *p)
{
    struct run_progress *r = user;
    if (r->quiet)
        return;
    if (!r->started) {
        /* said once the plan, model, data and database have all opened */
        fprintf(stderr, "headprune: running %s into %s (BLIS kernel %s)\n", r->plan, r->db, hp_runtime_kernel());
        r->started = true;
    }
    double rate = p->elapsed > 0 ? (double)p->done / p->elapsed : 0;
    char eta[32];
    fmt_eta(rate > 0 ? (double)(p->total - p->done) / rate : NAN, eta, sizeof eta);
    double frac = p->total ? (double)p->done / (double)p->total : 0;
    if (r->tty) {
        char bar[31];
        int fill = (int)(frac * 30);
        for (int i = 0; i < 30; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[30] = 0;
        fprintf(stderr, "\r\033[K[%s] %lld/%lld %3.0f%%  %.1f jobs/s  ETA %s  %s", bar, (long long)p->done,
                (long long)p->total, 100 * frac, rate, eta, p->label);
        fflush(stderr);
    } else if (p->elapsed - r->last >= 5.0 || p->done == p->total) {
        fprintf(stderr, "headprune: %lld/%lld jobs (%.0f%%, %lld cached), %.1f jobs/s, ETA %s\n", (long long)p->done,
                (long long)p->total, 100 * frac, (long long)p->cached, rate, eta);
        r->last = p->elapsed;
    }
}

/*
 * This process's peak resident memory in MB: VmHWM, which starts afresh at
 * exec (getrusage's ru_maxrss carries over the peak of the process that
 * forked us, so a script's memory would show up as ours).
 */
static double peak_mb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lf kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    if (kb < 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        kb = (double)ru.ru_maxrss;
    }
    return kb / 1024.0;
}

static int cmd_run(int argc, char **argv)
{
    static const struct option opts[] = {{"db", required_argument, 0, 'd'},     {"shard", required_argument, 0, 's'},
                                         {"threads", required_argument, 0, 't'}, {"quiet", no_argument, 0, 'q'},
                                         {"batch", required_argument, 0, 'b'},   {"plain", no_argument, 0, 'p'},
                                         {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    const char *db = NULL;
    int si = 1, sn = 1, threads = 0, batch = 0, c;
    bool quiet = false, plain = false;
    while ((c = getopt_long(argc, argv, "d:s:t:qh", opts, NULL)) != -1) {
        switch (c) {
        case 'd': db = optarg; break;
        case 's':
            if (!parse_shard(optarg, &si, &sn))
                return usage_error("run", "--shard must be I/N with 1 <= I <= N, e.g. 2/4");
            break;
        case 't':
            if (!parse_int(optarg, 1, 1024, &threads))
                return usage_error("run", "--threads must be a positive integer");
            break;
        case 'b':
            if (!parse_int(optarg, 1, 1 << 20, &batch))
                return usage_error("run", "--batch must be a positive integer");
            break;
        case 'p': plain = true; break;
        case 'q': quiet = true; break;
        case 'h': fputs(run_help, stdout); return 0;
        default: return usage_error("run", "unknown option");
        }
    }
    if (optind != argc - 1)
        return usage_error("run", "give one PLAN.yaml");
    struct hp_error err = {0};
    struct hp_plan *p = NULL;
    if (hp_plan_load(argv[optind], &p, &err) != HP_OK)
        return die(&err);
    char dbpath[1200];
    if (!db) {
        snprintf(dbpath, sizeof dbpath, "results/%s.db", p->name);
        db = dbpath;
        mkdir("results", 0777); /* the default folder; an error surfaces when the database opens */
    }
    hp_runtime_init(threads);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    struct run_progress rp = {isatty(STDERR_FILENO), quiet, false, 0, p->path, db};
    struct hp_sweep_opts o = {
        .db_path = db,
        .shard_index = si - 1,
        .shard_count = sn,
        .threads = threads,
        .batch = batch,
        .plain = plain,
        .progress = run_progress_cb,
        .user = &rp,
        .stop = &g_stop,
    };
    struct hp_sweep_summary sum;
    enum hp_status st = hp_sweep_run(p, &o, &sum, &err);
    if (rp.tty && !quiet)
        fputs("\r\033[K", stderr);
    hp_plan_free(p);
    if (st != HP_OK)
        return die(&err);
    if (sum.interrupted) {
        fprintf(stderr, "headprune: interrupted after %lld jobs (%lld run, %lld already done); run the same command to resume\n",
                (long long)sum.n_jobs, (long long)sum.n_run, (long long)sum.n_cached);
        return 130;
    }
    char thr[32] = "";
    if (sum.threads_min > 0 && sum.threads_min == sum.threads_max)
        snprintf(thr, sizeof thr, ", %d thread%s", sum.threads_min, sum.threads_min == 1 ? "" : "s");
    else if (sum.threads_min > 0)
        snprintf(thr, sizeof thr, ", %d-%d threads", sum.threads_min, sum.threads_max);
    printf("sweep %lld: %lld jobs (%lld run, %lld already in the database) in %.1f s%s%s, peak memory %.0f MB -> %s\n",
           (long long)sum.sweep_id, (long long)sum.n_jobs, (long long)sum.n_run, (long long)sum.n_cached, sum.seconds,
           thr, threads ? "" : " (auto)", peak_mb(), db);
    return 0;
}

// --- query --------------------------------------------------------------------

static const char query_help[] =
    "Usage: headprune query KIND --db FILE [--sweep ID] [--format table|csv|json]\n"
    "                       [--metric loss|kl|acc|cos] [--top K] [--eps E] [SQL]\n"
    "\n"
    "Answer questions from a results database (opened read-only).\n"
    "\n"
    "Effects are differences from the sweep's baseline, signed so that larger is\n"
    "worse: loss and KL rise, accuracy and cosine fall.\n"
    "\n"
    "Kinds:\n"
    "  sweeps       the sweeps in the database\n"
    "  curve        pruning curve: metric against heads pruned (number and %),\n"
    "               iterative and random studies, 95% CIs over random samples\n"
    "  heads        each head's effect when ablated alone, with a paired 95% CI\n"
    "               across sequences; sorted, --top K\n"
    "  redundancy   per layer: heads costing less than --eps (default 0.01) alone,\n"
    "               mean and max effect, keeping only the best head, removing the\n"
    "               whole layer\n"
    "  pairs        interaction I = D(a and b) - D(a) - D(b) of head pairs, D the\n"
    "               effects. I > 0: removing both hurts more than the two alone\n"
    "               (the heads back each other up: redundant); I < 0: less than\n"
    "               the two alone (overlapping damage). --top K of each end.\n"
    "  sql          read-only SQL, e.g. \"SELECT * FROM effects LIMIT 5\"\n"
    "               (tables and views: see README.md)\n";

static int cmd_query(int argc, char **argv)
{
    static const struct option opts[] = {{"db", required_argument, 0, 'd'},     {"sweep", required_argument, 0, 's'},
                                         {"format", required_argument, 0, 'f'}, {"metric", required_argument, 0, 'm'},
                                         {"top", required_argument, 0, 'k'},    {"eps", required_argument, 0, 'e'},
                                         {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(query_help, stdout);
        return 0;
    }
    if (argc < 2)
        return usage_error("query", "give a KIND: sweeps, curve, heads, redundancy, pairs or sql");
    struct hp_query_opts q = {.eps = 0.01};
    const char *kinds[] = {"sweeps", "curve", "heads", "redundancy", "pairs", "sql"};
    enum hp_query_kind kv[] = {HP_QUERY_SWEEPS, HP_QUERY_CURVE, HP_QUERY_HEADS, HP_QUERY_REDUNDANCY, HP_QUERY_PAIRS,
                               HP_QUERY_SQL};
    int ki = -1;
    for (int i = 0; i < 6; i++)
        if (strcmp(argv[1], kinds[i]) == 0)
            ki = i;
    if (ki < 0)
        return usage_error("query", "KIND must be sweeps, curve, heads, redundancy, pairs or sql");
    q.kind = kv[ki];
    const char *db = NULL;
    enum fmt f = FMT_TABLE;
    int c;
    optind = 2;
    while ((c = getopt_long(argc, argv, "d:s:f:m:k:e:h", opts, NULL)) != -1) {
        switch (c) {
        case 'd': db = optarg; break;
        case 's': {
            int v;
            if (!parse_int(optarg, 1, 1 << 30, &v))
                return usage_error("query", "--sweep must be a positive sweep id");
            q.sweep_id = v;
            break;
        }
        case 'f':
            if (!parse_format(optarg, &f))
                return usage_error("query", "--format must be table, csv or json");
            break;
        case 'm':
            if (strcmp(optarg, "loss") && strcmp(optarg, "kl") && strcmp(optarg, "acc") && strcmp(optarg, "cos"))
                return usage_error("query", "--metric must be loss, kl, acc or cos");
            q.metric = optarg;
            break;
        case 'k':
            if (!parse_int(optarg, 1, 1 << 30, &q.top))
                return usage_error("query", "--top must be a positive integer");
            break;
        case 'e':
            if (!parse_double(optarg, 0.0, &q.eps))
                return usage_error("query", "--eps must be a non-negative number");
            break;
        case 'h': fputs(query_help, stdout); return 0;
        default: return usage_error("query", "unknown option");
        }
    }
    if (q.kind == HP_QUERY_SQL) {
        if (optind != argc - 1)
            return usage_error("query", "sql needs one SQL statement");
        q.sql = argv[optind];
    } else if (optind != argc) {
        return usage_error("query", "unexpected argument");
    }
    if (!db)
        return usage_error("query", "--db FILE is required");
    struct hp_error err = {0};
    struct hp_table *t;
    if (hp_query(db, &q, &t, &err) != HP_OK)
        return die(&err);
    print_table(t, f);
    hp_table_free(t);
    return 0;
}

// --- merge --------------------------------------------------------------------

static const char merge_help[] =
    "Usage: headprune merge OUT.db IN.db...\n"
    "\n"
    "Merge shard databases into OUT.db (created if missing). Results are keyed by\n"
    "their content address, so merging twice adds nothing and no result appears twice.\n";

static int cmd_merge(int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(merge_help, stdout);
        return 0;
    }
    if (argc < 3)
        return usage_error("merge", "give OUT.db and at least one IN.db");
    struct hp_error err = {0};
    int64_t added;
    if (hp_store_merge(argv[1], (const char *const *)argv + 2, argc - 2, &added, &err) != HP_OK)
        return die(&err);
    printf("merged %d database%s into %s: %lld new results\n", argc - 2, argc > 3 ? "s" : "", argv[1],
           (long long)added);
    return 0;
}

// --- main ---------------------------------------------------------------------

// --- tokenize -----------------------------------------------------------------------

static const char tokenize_help[] =
    "Usage: headprune tokenize --model DIR [--special] [FILE]\n"
    "\n"
    "Tokenize text with the model directory's tokenizer (tokenizer.json, or\n"
    "vocab.txt, or vocab.json + merges.txt) and print the token ids: one line of\n"
    "space-separated ids per line of input (FILE, or standard input). Agrees with\n"
    "Hugging Face's tokenizers library token for token on byte-level BPE (GPT-2,\n"
    "Llama-3, Qwen2), SentencePiece-style BPE with byte fallback (Llama-2,\n"
    "Mistral) and WordPiece (BERT).\n"
    "\n"
    "  --model DIR   the model directory\n"
    "  --special     add the special tokens the tokenizer declares ([CLS] ... [SEP], <s>)\n";

static int cmd_tokenize(int argc, char **argv)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"special", no_argument, 0, 's'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *dir = NULL;
    bool special = false;
    int c;
    while ((c = getopt_long(argc, argv, "m:sh", opts, NULL)) != -1) {
        switch (c) {
        case 'm': dir = optarg; break;
        case 's': special = true; break;
        case 'h': fputs(tokenize_help, stdout); return 0;
        default: return usage_error("tokenize", "unknown option");
        }
    }
    if (!dir)
        return usage_error("tokenize", "--model DIR is required");
    if (argc - optind > 1)
        return usage_error("tokenize", "give at most one FILE");
    const char *name = optind < argc ? argv[optind] : "<stdin>";
    FILE *f = optind < argc ? fopen(name, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "%s: %s: %s\n", prog, name, strerror(errno));
        return 1;
    }
    struct hp_error err = {0};
    struct hp_tokenizer *t;
    if (hp_tokenizer_open(dir, &t, &err) != HP_OK) {
        if (f != stdin)
            fclose(f);
        return die(&err);
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = 0;
    for (long no = 1; rc == 0 && (n = getline(&line, &cap, f)) >= 0; no++) {
        if (n > 0 && line[n - 1] == '\n')
            n--;
        struct hp_encoding e;
        if (hp_tokenizer_encode(t, line, (size_t)n, NULL, 0, special, &e, &err) != HP_OK) {
            fprintf(stderr, "%s: %s:%ld: %s\n", prog, name, no, err.msg);
            rc = 1;
            break;
        }
        for (int i = 0; i < e.n; i++)
            printf(i ? " %d" : "%d", e.ids[i]);
        putchar('\n');
        hp_encoding_free(&e);
    }
    if (rc == 0 && ferror(f)) { /* a directory, or a failing disk: not an empty file */
        fprintf(stderr, "%s: %s: cannot read (%s)\n", prog, name, strerror(errno));
        rc = 1;
    }
    free(line);
    if (f != stdin)
        fclose(f);
    hp_tokenizer_free(t);
    return rc;
}

static const char main_help[] =
    "Usage: headprune COMMAND [options]\n"
    "\n"
    "What is each attention head worth? headprune ablates heads of Hugging Face\n"
    "checkpoints (GPT-2, BERT, Llama/Mistral/Qwen2 with grouped-query attention)\n"
    "and measures the effect on held-out data.\n"
    "\n"
    "Commands:\n"
    "  inspect   describe a model directory\n"
    "  tokenize  text to token ids with a model directory's tokenizer\n"
    "  eval      evaluate one masked variant on held-out tokens\n"
    "  plan      expand a YAML plan into jobs and estimate its cost\n"
    "  run       run a plan into an SQLite results database (resumable, shardable)\n"
    "  query     pruning curves, head effects, layer redundancy, pairs, SQL\n"
    "  merge     merge shard databases\n"
    "\n"
    "'headprune COMMAND --help' explains each command.\n";

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(main_help, stderr);
        return 2;
    }
    /* Past a file size limit (ulimit -f) a write must fail with EFBIG and take
     * the full-disk path (a message, finished results kept), not kill us
     * silently with SIGXFSZ. */
    signal(SIGXFSZ, SIG_IGN);
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
    if (strcmp(cmd, "tokenize") == 0)
        return cmd_tokenize(argc - 1, argv + 1);
    if (strcmp(cmd, "eval") == 0)
        return cmd_eval(argc - 1, argv + 1);
    if (strcmp(cmd, "plan") == 0)
        return cmd_plan(argc - 1, argv + 1);
    if (strcmp(cmd, "run") == 0)
        return cmd_run(argc - 1, argv + 1);
    if (strcmp(cmd, "query") == 0)
        return cmd_query(argc - 1, argv + 1);
    if (strcmp(cmd, "merge") == 0)
        return cmd_merge(argc - 1, argv + 1);
    fprintf(stderr, "%s: unknown command '%s'\n%s", prog, cmd, main_help);
    return 2;
}
