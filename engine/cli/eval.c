/*
 * eval.c -- `headprune eval`: one masked variant evaluated on held-out data.
 */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_int.h"
#include "metric_int.h" /* hp_metric_row: each metric's baseline rule */

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
    int ablation, seq_len, threads;
    bool json, quiet, want_grad;
};

/* a's options from argv (--grad-metric implies --grad): -1 to go on, else the exit status. */
static int eval_options(int argc, char **argv, struct eval_args *a)
{
    const struct opt opts[] = {
        OPT_MODEL(&a->dir, "Hugging Face model directory (config.json + safetensors)"),
        OPT_DATA(&a->data_path),
        OPT_SEQ_LEN(&a->seq_len),
        OPT_MASK(&a->mask, 'k', "heads to ablate: " MASK_SYNTAX),
        OPT_KEEP(&a->mask, 'K', "ablate every head except these"),
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

static cJSON *num_array(const double *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

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

/* What the evaluation gave, for the printers: the variant (mt), the unmasked model beside it (base, NULL when
 * the mask changes nothing) and with --grad the gradient and atp (n_layers x n_heads, row-major). */
struct eval_out {
    const struct hp_model_info *in;
    const struct hp_data *d;
    const struct hp_metrics *mt, *base;
    const double *grad, *atp;
    enum hp_metric grad_metric;
    const char *grad_what;
    bool grad_vanishes;
    struct hp_grad_phases ph;
    struct progress pr;
    double secs;
    int n_abl;
};

/* o's fields, one a metric mt has, named by its row (ppl after loss): its value, or with base its change from
 * base's; variant_only: only the metrics measured against a baseline variant, not those against the unmasked
 * model already (kl, 0 there). */
static void add_metrics(cJSON *o, const struct hp_metrics *mt, const struct hp_metrics *base, bool variant_only)
{
    for (int k = 0; k < HP_N_METRICS; k++) {
        if (!mt->has[k] || (variant_only && hp_metric_row((enum hp_metric)k)->baseline != HP_BASELINE_VARIANT))
            continue;
        cJSON_AddNumberToObject(o, hp_metric_name((enum hp_metric)k), mt->value[k] - (base ? base->value[k] : 0));
        if (k == HP_METRIC_LOSS)
            cJSON_AddNumberToObject(o, "ppl", mt->ppl - (base ? base->ppl : 0));
    }
}

static void print_eval_json(const struct eval_args *a, const struct eval_out *r)
{
    const char *dir = a->dir, *data_path = a->data_path, *spec = a->mask.spec;
    const char *abl_name = hp_ablation_name((enum hp_ablation)a->ablation);
    const bool keep = a->mask.keep, want_grad = a->want_grad, grad_vanishes = r->grad_vanishes;
    const struct hp_model_info *in = r->in;
    const struct hp_metrics *mt = r->mt, *base = r->base;
    const double *grad = r->grad, *atp = r->atp;
    const enum hp_metric grad_metric = r->grad_metric;
    const struct progress pr = r->pr;
    const struct hp_grad_phases ph = r->ph;
    const double secs = r->secs;
    const int n_abl = r->n_abl, n_all = in->n_layers * in->n_heads, n_present = hp_heads_present(in);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", dir);
    cJSON_AddStringToObject(o, "data", data_path);
    cJSON_AddStringToObject(o, "mask", spec ? spec : "");
    cJSON_AddBoolToObject(o, "keep", keep);
    cJSON_AddStringToObject(o, "ablation", abl_name);
    cJSON_AddNumberToObject(o, "n_ablated", n_abl);
    cJSON_AddNumberToObject(o, "n_heads_total", n_all);
    cJSON_AddNumberToObject(o, "n_heads_present", n_present);
    /* every metric the model has, by its row's name (ppl beside loss); the unmasked values and the change for
     * those measured against a baseline variant (kl is against the unmasked model already: 0 there) */
    add_metrics(o, mt, NULL, false);
    if (base) {
        add_metrics(cJSON_AddObjectToObject(o, "unmasked"), base, NULL, true);
        add_metrics(cJSON_AddObjectToObject(o, "change"), mt, base, true);
    }
    if (want_grad) {
        cJSON_AddStringToObject(o, "grad_metric", hp_metric_name(grad_metric));
        if (grad_vanishes)
            cJSON_AddStringToObject(o, "grad_note", "the gradient of KL or 1 - cos is 0 at the unmasked model");
        cJSON *ga = cJSON_AddArrayToObject(o, "grad"), *aa = cJSON_AddArrayToObject(o, "atp");
        for (int l = 0; l < in->n_layers; l++) {
            cJSON_AddItemToArray(ga, num_array(grad + (size_t)l * in->n_heads, in->n_heads));
            cJSON_AddItemToArray(aa, num_array(atp + (size_t)l * in->n_heads, in->n_heads));
        }
    }
    cJSON_AddNumberToObject(o, "n_tokens", (double)mt->n_tokens);
    cJSON_AddNumberToObject(o, "n_seqs", mt->n_seqs);
    cJSON *ps = cJSON_AddObjectToObject(o, "per_seq");
    for (int k = 0; k < HP_N_METRICS; k++)
        if (mt->has[k])
            cJSON_AddItemToObject(ps, hp_metric_name((enum hp_metric)k), num_array(mt->seq[k], mt->n_seqs));
    cJSON *tk = cJSON_CreateArray();
    for (int i = 0; i < mt->n_seqs; i++)
        cJSON_AddItemToArray(tk, cJSON_CreateNumber((double)mt->seq_tokens[i]));
    cJSON_AddItemToObject(ps, "tokens", tk);
    cJSON_AddStringToObject(o, "kernel", hp_runtime_kernel());
    cJSON_AddNumberToObject(o, "threads_min", pr.threads_min);
    cJSON_AddNumberToObject(o, "threads_max", pr.threads_max);
    cJSON_AddNumberToObject(o, "seconds", secs);
    if (want_grad) {
        cJSON *so = cJSON_AddObjectToObject(o, "grad_seconds");
        cJSON_AddNumberToObject(so, "reference", ph.reference);
        cJSON_AddNumberToObject(so, "forward", ph.forward);
        cJSON_AddNumberToObject(so, "head", ph.head);
        cJSON_AddNumberToObject(so, "reverse", ph.reverse);
    }
    char *s = cJSON_PrintUnformatted(o);
    puts(s);
    free(s);
    cJSON_Delete(o);
}

static void print_eval_text(const struct eval_args *a, const struct eval_out *r)
{
    const char *dir = a->dir, *data_path = a->data_path, *spec = a->mask.spec;
    const char *abl_name = hp_ablation_name((enum hp_ablation)a->ablation), *grad_what = r->grad_what;
    const bool keep = a->mask.keep, want_grad = a->want_grad, grad_vanishes = r->grad_vanishes;
    const int threads = a->threads, n_abl = r->n_abl, n_present = hp_heads_present(r->in);
    const struct hp_model_info *in = r->in;
    const struct hp_data *d = r->d;
    const struct hp_metrics *mt = r->mt, *base = r->base;
    const double *grad = r->grad, *atp = r->atp;
    const enum hp_metric grad_metric = r->grad_metric;
    const struct progress pr = r->pr;
    const double secs = r->secs;
    printf("model     %s (%s, %d layers x %d heads, %d KV heads%s)\n", dir, in->model_type, in->n_layers,
           in->n_heads, in->n_kv_heads, pruned_note(in));
    printf("data      %s: %d sequences x %d tokens%s%s\n", data_path, d->n_seqs, d->seq_len, dropped_note(d),
           d->task && d->task->swapped ? " (run on the corrupt prompts, the unmasked model's too: denoise)" : "");
    /* a spec can list every head of a large model: show its start (--json has it whole) */
    int shown = spec && strlen(spec) > 72 ? 60 : spec ? (int)strlen(spec) : 0;
    printf("ablated   %d of %d heads%s (%s)%s%.*s%s\n", n_abl, n_present, in->n_pruned ? " the checkpoint has" : "",
           abl_name, spec ? (keep ? ", keep " : ": ") : "", shown, spec ? spec : "",
           spec && shown < (int)strlen(spec) ? " ..." : "");
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
    if (want_grad)
        print_atp(in, grad, atp, abl_name, grad_what);
    if (want_grad && grad_vanishes)
        printf("note      %s is 0 and minimal at the unmasked model, so its gradient there is 0 for every "
               "head: take it under a mask or fractional gates, or use --grad-metric loss%s\n",
               grad_what, grad_metric == HP_METRIC_COS ? " on a model with a loss" : "");
    char thr[48];
    if (pr.threads_min == pr.threads_max)
        snprintf(thr, sizeof thr, "%d thread%s", pr.threads_max, pr.threads_max == 1 ? "" : "s");
    else
        snprintf(thr, sizeof thr, "%d-%d threads", pr.threads_min, pr.threads_max);
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
    const char *dir = a.dir, *data_path = a.data_path, *spec = a.mask.spec, *grad_name = a.grad_name;
    const bool keep = a.mask.keep, quiet = a.quiet, want_grad = a.want_grad;
    const int seq_len = a.seq_len, threads = a.threads;
    const enum hp_ablation abl = (enum hp_ablation)a.ablation;
    enum hp_metric grad_metric = HP_METRIC_LOSS;
    if (grad_name && (!hp_metric_parse(grad_name, &grad_metric) || !hp_metric_has_grad(grad_metric))) {
        char names[128], msg[192];
        hp_metric_names(names, sizeof names, true, " or ");
        snprintf(msg, sizeof msg, "--grad-metric must be %s (the metrics with a gradient)", names);
        return usage_error("eval", msg);
    }

    struct hp_auto_threads load;
    threads_begin(threads, &load);
    struct hp_error err = {0};
    struct hp_model *m = NULL;
    struct hp_data *d = NULL;
    struct hp_mask *mask = NULL;
    struct hp_evaluator *ev = NULL;
    struct hp_metrics *mt = NULL, *base = NULL;
    double *grad = NULL, *atp = NULL;
    rc = 1;
    if (hp_model_open(dir, &m, &err) != HP_OK)
        goto out;
    const struct hp_model_info *in = hp_model_get_info(m);
    if (hp_data_load_for(data_path, dir, in, seq_len, &d, &err) != HP_OK ||
        hp_ablation_bind_data(abl, d, &err) != HP_OK) /* denoise: the corrupt prompts, whose heads get clean outputs */
        goto out;
    if (spec && hp_mask_parse(spec, keep, in, &mask, &err) != HP_OK)
        goto out;
    if (mask) /* a head a pruned checkpoint lacks is neither kept nor ablated: counted as the sweeps count */
        hp_mask_drop_absent(mask, in);
    if (hp_evaluator_new(m, d, &ev, &err) != HP_OK)
        goto out;
    hp_evaluator_keep_grad_metrics(ev, true); /* --grad's forward is also the evaluation */
    if (want_grad && !grad_name && !hp_evaluator_has_metric(ev, "loss"))
        grad_metric = HP_METRIC_COS; /* an encoder without a head: its own metric */
    const char *picked;
    if (want_grad && grad_metric != HP_METRIC_COS && hp_evaluator_has_metric(ev, "loss") &&
        hp_evaluator_pick_metric(ev, "--grad-metric", hp_metric_name(grad_metric), &picked, &err) != HP_OK)
        goto out; /* a task metric on data without what it needs: the engine's line says what */
    if (want_grad && !hp_evaluator_has_metric(ev, hp_metric_name(grad_metric))) {
        snprintf(err.msg, sizeof err.msg,
                 grad_metric == HP_METRIC_COS
                     ? "%s: --grad-metric cos is for an encoder without a head, and %s has a loss on this data: "
                       "use loss or kl"
                     : "%s: --grad-metric %s needs a loss, and %s has none on this data (an encoder without a "
                       "head, or no labels): use cos, or a causal LM, an MLM head with labels or a classifier",
                 data_path, grad_metric == HP_METRIC_COS ? dir : hp_metric_name(grad_metric), dir);
        goto out;
    }
    struct progress pr = progress_start(quiet, threads, &load);
    hp_evaluator_set_progress(ev, show_progress, &pr);
    double t0 = hp_now();
    /* the unmasked model beside the variant (its pass is the one the variant resumes from) */
    const bool changed = hp_mask_first_changed(mask, in->n_layers) < in->n_layers;
    const int HH = in->n_layers * in->n_heads;
    double grad_loss = 0;
    struct hp_grad_phases ph = {0}; /* where --grad's pass spent its time */
    const char *grad_what = grad_metric == HP_METRIC_KL ? "KL" : hp_metric_grad_what(grad_metric);
    /* KL and 1 - cos are 0 and minimal at the unmasked model: their gradient there says nothing */
    const bool grad_vanishes = (grad_metric == HP_METRIC_KL || grad_metric == HP_METRIC_COS) && !changed;
    if (want_grad) {
        grad = malloc((size_t)HH * sizeof(double));
        atp = malloc((size_t)HH * sizeof(double));
        if (!grad || !atp) {
            snprintf(err.msg, sizeof err.msg, "out of memory");
            goto out;
        }
        if (hp_evaluator_grad(ev, grad_metric, mask, abl, grad, atp, &grad_loss, &err) != HP_OK)
            goto out;
        hp_evaluator_grad_phases(ev, &ph);
    }
    /* after the gradient: its forward was this variant's pass (or the unmasked one), not run again */
    const struct hp_mask *both[2] = {mask, NULL};
    struct hp_metrics *out2[2] = {NULL, NULL};
    if (want_grad && changed) {
        if (hp_evaluator_grad_pass_metrics(ev, mask, abl, &out2[0], &err) != HP_OK ||
            hp_evaluator_run(ev, NULL, abl, &out2[1], &err) != HP_OK) {
            hp_metrics_free(out2[0]);
            goto out;
        }
    } else if (hp_evaluator_run_many(ev, both, changed ? 2 : 1, abl, out2, &err) != HP_OK) {
        goto out;
    }
    mt = out2[0];
    base = out2[1];
    double secs = hp_now() - t0;
    int n_abl = mask ? hp_mask_count_ablated(mask) : 0;
    const struct hp_metrics *un = base ? base : mt;
    if (un->has_loss && hp_evaluator_looks_foreign(ev, un->loss, un->acc))
        warn_foreign(data_path, dir, un->loss, un->acc);

    const struct eval_out r = {in, d, mt, base, grad, atp, grad_metric, grad_what, grad_vanishes, ph, pr, secs, n_abl};
    if (a.json)
        print_eval_json(&a, &r);
    else
        print_eval_text(&a, &r);
    rc = 0;
out:
    if (rc)
        die(&err);
    free(grad);
    free(atp);
    hp_metrics_free(mt);
    hp_metrics_free(base);
    hp_evaluator_free(ev);
    hp_mask_free(mask);
    hp_data_free(d);
    hp_model_close(m);
    return rc;
}
