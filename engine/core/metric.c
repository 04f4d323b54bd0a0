/*
 * metric.c -- what a variant is measured by (metrics): one table. (How a head
 * is taken out, the ablation methods, is ablation.c's table.)
 *
 * A metric's row (metric.h) is the one statement of its name, unit,
 * direction (which way is worse: hp_metric_sign, hp_metric_effect; sweep_jobs.c's
 * sw_damage, the queries' effects and the store's effects view derive from it),
 * baseline rule, how it is scored (per token from the logits, or per sequence
 * from pooled hidden states: what models have it) and reduced, and whether it
 * has a gradient. A token-scored row holds its scorer: the evaluator's paths
 * (eval.c, reuse.c, grad.c) each fill one struct hp_token_facts per scored
 * item in their fused loops and hand it to hp_metric_add_token, which adds
 * every such row's score, so a metric scored from those facts is its row
 * here. The evaluator carries the metrics as arrays indexed by the metric;
 * the store makes a column of each row (store.c); plans, digests, queries and
 * the CLI name and rank them through this file.
 *
 * Invariants: names are what the database stores and digests hash: changing
 * one changes every content address.
 * Must not: print, allocate, or know anything of models or SQL.
 */
#include "metric.h"

#include <assert.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

// --- metrics -------------------------------------------------------------------

/* The token-scored metrics' scorers: an item's score from what its path knows of it. */
static double score_loss(const struct hp_token_facts *f)
{
    return f->loss;
}

static double score_kl(const struct hp_token_facts *f)
{
    return f->kl;
}

static double score_acc(const struct hp_token_facts *f)
{
    return f->top1;
}

static double score_ld(const struct hp_token_facts *f)
{
    return f->ld;
}

static double score_logprob(const struct hp_token_facts *f)
{
    return -f->loss;
}

static double score_prob(const struct hp_token_facts *f)
{
    return exp(-f->loss);
}

/* One row a metric: the only statement anywhere of its name, unit, which way is
 * worse, its baseline rule, how it is scored and reduced, and its gradient. */
static const struct hp_metric_row metrics[] = {
    [HP_METRIC_LOSS] = {"loss", "loss", +1, "nats", "effect = loss - baseline loss (nats; larger = worse)",
                        HP_BASELINE_VARIANT, HP_SCORE_TOKENS, score_loss, HP_REDUCE_TOKENS, HP_DERIV_XENT, "loss",
                        HP_NEEDS_NOTHING, false, true},
    [HP_METRIC_KL] = {"kl", "KL", +1, "nats",
                      "effect = the variant's KL(unmasked || masked) (nats; the baseline's is 0; larger = worse)",
                      HP_BASELINE_UNMASKED, HP_SCORE_TOKENS, score_kl, HP_REDUCE_TOKENS, HP_DERIV_KL, "kl", HP_NEEDS_NOTHING, false,
                      false, true},
    [HP_METRIC_ACC] = {"acc", "accuracy", -1, "fraction correct", "effect = baseline acc - acc (larger = worse)",
                       HP_BASELINE_VARIANT, HP_SCORE_TOKENS, score_acc, HP_REDUCE_TOKENS, HP_DERIV_NONE, NULL},
    [HP_METRIC_COS] = {"cos", "cosine", -1, "cosine similarity", "effect = baseline cos - cos (larger = worse)",
                       HP_BASELINE_VARIANT, HP_SCORE_SEQS, NULL, HP_REDUCE_SEQS, HP_DERIV_ONE_MINUS_COS, "1 - cos", HP_NEEDS_NOTHING, false,
                       true, true},
    /* task rows (docs/tasks.md): one scored item a row, its answer position, so token means are row means */
    [HP_METRIC_LOGIT_DIFF] = {"logit_diff", "logit difference", -1, "logits",
                              "effect = baseline logit_diff - logit_diff (logits; larger = worse)", HP_BASELINE_VARIANT,
                              HP_SCORE_TOKENS, score_ld, HP_REDUCE_TOKENS, HP_DERIV_NEG_LOGIT_DIFF, "-logit_diff", HP_NEEDS_WRONG, false,
                              true},
    [HP_METRIC_ANSWER_LOGPROB] = {"answer_logprob", "answer log-probability", -1, "nats",
                                  "effect = baseline answer_logprob - answer_logprob (nats; larger = worse)",
                                  HP_BASELINE_VARIANT, HP_SCORE_TOKENS, score_logprob, HP_REDUCE_TOKENS, HP_DERIV_NONE, NULL,
                                  HP_NEEDS_ANSWERS, false},
    [HP_METRIC_ANSWER_PROB] = {"answer_prob", "answer probability", -1, "probability",
                               "effect = baseline answer_prob - answer_prob (larger = worse)", HP_BASELINE_VARIANT,
                               HP_SCORE_TOKENS, score_prob, HP_REDUCE_TOKENS, HP_DERIV_NONE, NULL, HP_NEEDS_ANSWERS, false},
    [HP_METRIC_ANSWER_ACC] = {"answer_acc", "answer accuracy", -1, "fraction correct",
                              "effect = baseline answer_acc - answer_acc (larger = worse)", HP_BASELINE_VARIANT,
                              HP_SCORE_TOKENS, score_acc, HP_REDUCE_TOKENS, HP_DERIV_NONE, NULL, HP_NEEDS_ANSWERS, false},
    [HP_METRIC_PATCH_RECOVERY] = {"patch_recovery", "patch recovery", -1, "fraction of the clean - corrupt logit_diff",
                                  "effect = baseline patch_recovery - patch_recovery, where patch_recovery = "
                                  "(logit_diff - corrupt logit_diff) / (clean logit_diff - corrupt logit_diff) "
                                  "(larger = worse; under denoise the baseline is the corrupt run, 0, so restoring "
                                  "heads that matter gives a negative effect)",
                                  HP_BASELINE_VARIANT, HP_SCORE_TOKENS, score_ld, HP_REDUCE_TOKENS, HP_DERIV_NONE, NULL,
                                  HP_NEEDS_PAIR, true},
};
static_assert(sizeof metrics / sizeof metrics[0] == HP_N_METRICS, "a metric without its row");

/* hp_metrics' named members alias its arrays at their metrics' places */
#define HP_ALIAS(arr, name, m)                                                                        \
    static_assert(offsetof(struct hp_metrics, name) ==                                                    \
                      offsetof(struct hp_metrics, arr) + (m) * sizeof(((struct hp_metrics *)0)->arr[0]), \
                  #name " is not " #arr "[" #m "]")
HP_ALIAS(value, loss, HP_METRIC_LOSS);
HP_ALIAS(value, kl, HP_METRIC_KL);
HP_ALIAS(value, acc, HP_METRIC_ACC);
HP_ALIAS(value, cos, HP_METRIC_COS);
HP_ALIAS(seq, seq_loss, HP_METRIC_LOSS);
HP_ALIAS(seq, seq_kl, HP_METRIC_KL);
HP_ALIAS(seq, seq_acc, HP_METRIC_ACC);
HP_ALIAS(seq, seq_cos, HP_METRIC_COS);
HP_ALIAS(has, has_loss, HP_METRIC_LOSS);
HP_ALIAS(has, has_kl, HP_METRIC_KL);
HP_ALIAS(has, has_acc, HP_METRIC_ACC);
HP_ALIAS(has, has_cos, HP_METRIC_COS);
#undef HP_ALIAS

const struct hp_metric_row *hp_metric_row(enum hp_metric m)
{
    assert((int)m >= 0 && (int)m < HP_N_METRICS);
    assert((metrics[m].score == HP_SCORE_TOKENS) == (metrics[m].token != NULL)); /* a token scorer for each such row */
    return &metrics[m];
}

void hp_metric_add_token(double sum[HP_N_METRICS], const struct hp_token_facts *f)
{
    for (int k = 0; k < HP_N_METRICS; k++)
        if (metrics[k].token)
            sum[k] += metrics[k].token(f);
}

const char *hp_metric_name(enum hp_metric m)
{
    if ((int)m < 0 || (int)m >= HP_N_METRICS)
        return "unknown";
    return metrics[m].name;
}

bool hp_metric_parse(const char *name, enum hp_metric *out)
{
    for (int i = 0; name && i < HP_N_METRICS; i++)
        if (strcmp(name, metrics[i].name) == 0) {
            *out = (enum hp_metric)i;
            return true;
        }
    return false;
}

int hp_metric_sign(enum hp_metric m)
{
    return (int)m >= 0 && (int)m < HP_N_METRICS ? metrics[m].sign : +1;
}

double hp_metric_effect(enum hp_metric m, double v, double b)
{
    const struct hp_metric_row *r = hp_metric_row(m);
    /* measured against the unmasked model already: v itself (v - 0 is v, bit for bit) */
    const double base = r->baseline == HP_BASELINE_UNMASKED ? 0.0 : b;
    return r->sign > 0 ? v - base : base - v;
}

const char *hp_metric_unit(enum hp_metric m)
{
    return (int)m >= 0 && (int)m < HP_N_METRICS ? metrics[m].unit : "";
}

const char *hp_metric_effect_text(enum hp_metric m)
{
    return (int)m >= 0 && (int)m < HP_N_METRICS ? metrics[m].effect : "";
}

bool hp_metric_has_grad(enum hp_metric m)
{
    return (int)m >= 0 && (int)m < HP_N_METRICS && metrics[m].deriv != HP_DERIV_NONE;
}

enum hp_metric hp_metric_grad_of(enum hp_metric sweep_metric)
{
    return (int)sweep_metric >= 0 && (int)sweep_metric < HP_N_METRICS && metrics[sweep_metric].grad_studies
               ? sweep_metric
               : HP_METRIC_LOSS;
}

bool hp_metric_grad_zero_unmasked(enum hp_metric m)
{
    return (int)m >= 0 && (int)m < HP_N_METRICS && metrics[m].grad_zero_unmasked;
}

const char *hp_metric_grad_what(enum hp_metric m)
{
    return hp_metric_has_grad(m) ? metrics[m].grad_what : "";
}

void hp_metric_names(char *buf, size_t n, bool grad_only, const char *last_sep)
{
    int total = 0, k = 0;
    for (int i = 0; i < HP_N_METRICS; i++)
        total += !grad_only || metrics[i].deriv != HP_DERIV_NONE;
    size_t at = 0;
    if (n)
        buf[0] = '\0';
    for (int i = 0; i < HP_N_METRICS && at < n; i++) {
        if (grad_only && metrics[i].deriv == HP_DERIV_NONE)
            continue;
        const char *sep = k == 0 ? "" : k == total - 1 ? last_sep : ", ";
        at += (size_t)snprintf(buf + at, n - at, "%s%s", sep, metrics[i].name);
        k++;
    }
}
