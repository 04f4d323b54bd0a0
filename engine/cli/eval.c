/*
 * eval.c -- `headprune eval`: one masked variant evaluated on held-out data.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const char eval_usage[] =
    "Usage: headprune eval --model DIR --data FILE [options]\n"
    "\n"
    "Evaluate a model on held-out tokens with attention heads ablated, and report\n"
    "the loss (nats per token), perplexity, top-1 accuracy and KL(unmasked || masked)\n"
    "for causal LMs, the MLM loss for BERT with labels, or the cosine similarity of\n"
    "mean-pooled final hidden states to the unmasked model's for encoders. On task\n"
    "rows (prompts with one-token answers, docs/tasks.md) a causal LM is scored at\n"
    "each prompt's last token, and also reports logit_diff, answer_logprob,\n"
    "answer_prob, answer_acc and patch_recovery where the rows have what they need.\n";

static const char eval_tail[] = "Kernel set: skx is chosen on CPUs with AVX-512F unless BLIS_ARCH_TYPE is set.\n";

/* What the command line asked for. */
struct eval_args {
    const char *dir, *data_path, *grad_name;
    struct mask_arg mask;
    const char *edges, *circuit;
    int ablation, seq_len, threads;
    bool json, quiet, want_grad;
};

/* a's options from argv (--grad-metric implies --grad): -1 to go on, else the exit status. */
static int eval_options(int argc, char **argv, struct eval_args *a)
{
    const struct opt opts[] = {
        OPT_MODEL(&a->dir, "Hugging Face model directory (config.json + safetensors), or a GGUF file"),
        OPT_DATA(&a->data_path),
        OPT_SEQ_LEN(&a->seq_len),
        OPT_MASK(&a->mask, 'k', "units to ablate: " MASK_SYNTAX),
        OPT_KEEP(&a->mask, 'K', "ablate every head except these (and, when it names an MLP, every other MLP)"),
        OPT_STRING("edges", 'e', &a->edges, "SPEC",
                   "edges to patch: SENDER>RECEIVER, comma-separated; a sender is emb, L.H or mlp:L, a receiver a "
                   "head's query, key or value input L.H:q, L.H:k, L.H:v (L.H: all three), mlp:L or logits; * on "
                   "either side is every node there (0.3>* every edge out of head 0.3). The receiver reads the "
                   "sender's replacement under --ablation (zero: 0) in place of its output, every other reader "
                   "its output (docs/edges.md). With --mask, both"),
        OPT_PATH("circuit", 'c', &a->circuit, "FILE",
                 "a circuit: a file of edges to keep, one a line as --edges writes them ('#' comments); every "
                 "other edge is patched (a file of every edge is the unmasked model)"),
        OPT_CHOICE("ablation", 'a', &a->ablation, "KIND", ablation_choices(), ablation_help()),
        OPT_FLAG("grad", 'g', &a->want_grad,
                 "also the gradient of the mean loss at every head's gate (dL/dg at the evaluated gates, one forward "
                 "and one backward pass) and its first-order estimate of each head's effect if ablated alone (atp; "
                 "larger = worse): the table shows the heads with the largest |atp|, --json gives \"grad\" and "
                 "\"atp\" (n_layers arrays of n_heads)"),
        OPT_STRING("grad-metric", 'G', &a->grad_name, "M",
                   "what --grad differentiates: loss (default where the model has one), kl (KL from the unmasked "
                   "model), logit_diff on task rows with wrong answers (as -logit_diff, so that larger = worse), "
                   "or for an encoder without a head cos (as 1 - cos, its default). KL and 1 - cos are 0 and "
                   "minimal at the unmasked model, so their gradient there is 0: use them under a mask or fractional "
                   "gates. Implies --grad"),
        OPT_THREADS(&a->threads, THREADS_HELP),
        OPT_JSON(&a->json, "print one JSON object, with per-sequence values"),
        OPT_QUIET(&a->quiet, "no progress on stderr"),
        OPT_END(),
    };
    const struct cmd_help h = {.name = "eval", .usage = eval_usage, .opts = opts, .tail = eval_tail};
    int n_args, rc = parse_options(&h, argc, argv, &n_args);
    if (rc >= 0)
        return rc;
    if (n_args)
        return usage_error("eval", "unexpected argument");
    if (!a->dir || !a->data_path)
        return usage_error("eval", "--model DIR and --data FILE are required");
    a->want_grad |= a->grad_name != NULL;
    return -1;
}

/* Heads shown by the table, largest |atp| first. */
#define TOP_ATP 10

/* The heads with the largest |atp|, with their gradients. */
static void print_atp(const struct hp_model_info *in, const double *grad, const double *atp, const char *abl_name,
                      const char *what)
{
    const int HH = in->n_layers * in->n_heads, n = HH < TOP_ATP ? HH : TOP_ATP;
    int top[TOP_ATP];
    for (int k = 0; k < n; k++) {
        int best = -1;
        for (int i = 0; i < HH; i++) {
            bool taken = false;
            for (int j = 0; j < k && !taken; j++)
                taken = top[j] == i;
            if (!taken && (best < 0 || fabs(atp[i]) > fabs(atp[best])))
                best = i;
        }
        top[k] = best;
    }
    printf("gradient  first-order estimate of each head's effect ablated alone (%s): atp = change of %s, "
           "larger = worse; grad = d(%s)/dgate\n",
           abl_name, what, what);
    for (int k = 0; k < n; k++) {
        char label[32];
        hp_unit_label(label, sizeof label, false, top[k] / in->n_heads, top[k] % in->n_heads);
        printf("  %-8s atp %+.6f   grad %+.6f\n", label, atp[top[k]], grad[top[k]]);
    }
}

/* What the evaluation gave, for the printer: the model, the data and hp_eval's result. */
struct eval_out {
    const struct hp_model_info *in;
    const struct hp_data *d;
    const struct hp_eval_result *r;
};

static void print_eval_text(const struct eval_args *a, const struct eval_out *e)
{
    const struct hp_eval_result *r = e->r;
    const char *dir = a->dir, *data_path = a->data_path, *spec = a->mask.spec;
    const char *abl_name = hp_ablation_name((enum hp_ablation)a->ablation), *grad_what = r->grad_what;
    const bool keep = a->mask.keep, want_grad = r->grad != NULL, grad_vanishes = r->grad_vanishes;
    const int threads = a->threads, n_abl = r->n_ablated, n_present = hp_heads_present(e->in);
    const struct hp_model_info *in = e->in;
    const struct hp_data *d = e->d;
    const struct hp_metrics *mt = r->mt, *base = r->base;
    const double *grad = r->grad, *atp = r->atp;
    const enum hp_metric grad_metric = r->grad_metric;
    const double secs = r->seconds;
    printf("model     %s (%s, %d layers x %d heads, %d KV heads%s)\n", dir, in->model_type, in->n_layers,
           in->n_heads, in->n_kv_heads, pruned_note(in));
    printf("data      %s: %d sequences x %d tokens%s%s\n", data_path, d->n_seqs, d->seq_len, dropped_note(d),
           d->task && d->task->swapped ? " (run on the corrupt prompts, the unmasked model's too: denoise)" : "");
    /* a spec can list every head of a large model: show its start (--json has it whole) */
    int shown = spec && strlen(spec) > 72 ? 60 : spec ? (int)strlen(spec) : 0;
    char mlps[48] = "";
    if (r->n_mlps)
        snprintf(mlps, sizeof mlps, " and %d of %d MLPs", r->n_mlps, in->n_layers);
    printf("ablated   %d of %d heads%s%s (%s)%s%.*s%s\n", n_abl, n_present, in->n_pruned ? " the checkpoint has" : "",
           mlps, abl_name, spec ? (keep ? ", keep " : ": ") : "", shown, spec ? spec : "",
           spec && shown < (int)strlen(spec) ? " ..." : "");
    if (r->n_edges)
        printf("edges     %d patched (%s)%s%s%s%s\n", r->n_edges, abl_name, a->edges ? ": " : "",
               a->edges ? a->edges : "", a->circuit ? ", outside the circuit in " : "", a->circuit ? a->circuit : "");
    if (mt->has_loss)
        printf("loss      %.6f nats/token   ppl %.4f   acc %.4f   KL %.6f nats\n", mt->loss, mt->ppl, mt->acc,
               mt->kl);
    if (mt->has_cos)
        printf("cosine    %.6f (%s-pooled final hidden states vs the unmasked model)\n", mt->cos,
               in->pooling == HP_POOL_CLS ? "CLS" : in->pooling == HP_POOL_MAX ? "max" : "mean");
    for (int k = HP_METRIC_COS + 1; k < HP_N_METRICS; k++) { /* a metric the two lines above do not print */
        if (!mt->has[k])
            continue;
        printf("%-15s %.6f %s", hp_metric_name((enum hp_metric)k), mt->value[k], hp_metric_unit((enum hp_metric)k));
        if (base)
            printf("   (unmasked %.6f, change %+.6f)", base->value[k], mt->value[k] - base->value[k]);
        putchar('\n');
    }
    if (base && mt->has_loss)
        printf("unmasked  loss %.6f   ppl %.4f   acc %.4f; change: loss %+.6f   ppl %+.4f   acc %+.4f\n",
               base->loss, base->ppl, base->acc, mt->loss - base->loss, mt->ppl - base->ppl, mt->acc - base->acc);
    if (base && mt->has_cos)
        printf("unmasked  cosine %.6f; change %+.6f\n", base->cos, mt->cos - base->cos);
    if (want_grad) {
        print_atp(in, grad, atp, abl_name, grad_what);
        printf("  MLPs:  ");
        for (int l = 0; l < in->n_layers && l < TOP_ATP; l++)
            printf(" mlp:%d atp %+.6f grad %+.6f%s", l, r->mlp_atp[l], r->mlp_grad[l],
                   l + 1 < in->n_layers && l + 1 < TOP_ATP ? ";" : in->n_layers > TOP_ATP ? "; ... (--json)" : "");
        printf("\n");
    }
    if (want_grad && grad_vanishes)
        printf("note      %s is 0 and minimal at the unmasked model, so its gradient there is 0 for every "
               "head: take it under a mask or fractional gates, or use --grad-metric loss%s\n",
               grad_what, grad_metric == HP_METRIC_COS ? " on a model with a loss" : "");
    char thr[48];
    if (r->threads_min == r->threads_max)
        snprintf(thr, sizeof thr, "%d thread%s", r->threads_max, r->threads_max == 1 ? "" : "s");
    else
        snprintf(thr, sizeof thr, "%d-%d threads", r->threads_min, r->threads_max);
    printf("tokens    %lld scored in %d sequences, %.2f s; %s%s, BLIS kernel %s%s\n", (long long)mt->n_tokens,
           mt->n_seqs, secs, thr, threads > 0 ? "" : " (auto)", hp_runtime_kernel(),
           hp_runtime_kernel_from_env() ? " (from BLIS_ARCH_TYPE)" : "");
}

int cmd_eval(int argc, char **argv)
{
    struct eval_args a = {0};
    int rc = eval_options(argc, argv, &a);
    if (rc >= 0)
        return rc;
    enum hp_metric grad_metric;
    if (a.grad_name && (!hp_metric_parse(a.grad_name, &grad_metric) || !hp_metric_has_grad(grad_metric))) {
        char names[128], msg[192];
        hp_metric_names(names, sizeof names, true, " or ");
        snprintf(msg, sizeof msg, "--grad-metric must be %s (the metrics with a gradient)", names);
        return usage_error("eval", msg);
    }
    struct hp_error err = {0};
    struct hp_model *m = NULL;
    struct hp_data *d = NULL;
    struct hp_eval_result *r = NULL;
    char *json = NULL;
    rc = 1;
    if (hp_model_open(a.dir, &m, &err) != HP_OK)
        goto out;
    const struct hp_model_info *in = hp_model_get_info(m);
    if (hp_data_load_for(a.data_path, a.dir, in, a.seq_len, &d, &err) != HP_OK)
        goto out;
    struct progress pr = {!a.quiet && isatty(STDERR_FILENO), hp_now(), NULL}; /* hp_eval chooses the threads */
    const struct hp_eval_opts o = {
        .mask = a.mask.spec,
        .keep = a.mask.keep,
        .edges = a.edges,
        .circuit = a.circuit,
        .ablation = (enum hp_ablation)a.ablation,
        .grad = a.want_grad,
        .grad_metric = a.grad_name,
        .threads = a.threads,
        .progress = show_progress,
        .user = &pr,
    };
    if (hp_eval(m, d, &o, &r, &err) != HP_OK)
        goto out;
    if (r->foreign) {
        const struct hp_metrics *un = r->base ? r->base : r->mt;
        warn_foreign(a.data_path, a.dir, un->loss, un->acc);
    }
    if (a.json) {
        if (!(json = hp_eval_json(in, &o, r, a.dir, a.data_path))) {
            snprintf(err.msg, sizeof err.msg, "eval: out of memory");
            goto out;
        }
        puts(json);
    } else {
        print_eval_text(&a, &(struct eval_out){in, d, r});
    }
    rc = 0;
out:
    if (rc)
        die(&err);
    free(json);
    hp_eval_result_free(r);
    hp_data_free(d);
    hp_model_close(m);
    return rc;
}
