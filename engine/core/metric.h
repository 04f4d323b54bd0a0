/*
 * metric.h -- a metric's row (engine/core/metric.c), as the engine's modules
 * read it: the evaluator (which metrics a model has, how they reduce, and
 * the facts of each scored token its paths hand the rows' scorers), the
 * gradient (whether one exists), the store (a column per row, the effects
 * view). The public names and rules are in headprune.h.
 */
#ifndef HP_METRIC_H
#define HP_METRIC_H

#include "headprune.h"

/* What a metric's effect is measured against. */
enum hp_metric_baseline {
    HP_BASELINE_VARIANT,  /* the sweep's baseline variant's value (loss, acc, cos) */
    HP_BASELINE_UNMASKED, /* the unmasked model already: the value is the effect, the baseline's 0 (kl) */
};

/* What a metric is scored from, which says which models have it. */
enum hp_metric_score {
    HP_SCORE_TOKENS, /* each scored item (predicted token, labelled position, classified sequence) from the output
                      * logits and its target: a model with a loss on its data (eval.c score_seq, hp_eval_score_cls;
                      * reuse.c; grad.c) */
    HP_SCORE_SEQS,   /* each sequence from its pooled final hidden states against the unmasked model's: an encoder
                      * without a head (hp_eval_pooled_cos) */
};

/* What the data must hold for a token-scored metric (docs/tasks.md): which data has it. */
enum hp_metric_needs {
    HP_NEEDS_NOTHING, /* any data with a loss */
    HP_NEEDS_ANSWERS, /* task rows (an answer at each row's answer position) */
    HP_NEEDS_WRONG,   /* task rows with a wrong answer */
    HP_NEEDS_PAIR,    /* task rows with a wrong answer and a corrupt prompt */
};

/* How the per-item scores become the variant's value. */
enum hp_metric_reduce {
    HP_REDUCE_TOKENS, /* the sum over every scored item of the set / the items (a sequence's: over its own) */
    HP_REDUCE_SEQS,   /* the mean over sequences of each sequence's score */
};

/*
 * What an evaluation path knows of one scored item (a predicted or labelled
 * token; a classified sequence is one item), all a token-scored metric is
 * scored from. Every path that scores items (eval.c score_seq and
 * hp_eval_score_cls, reuse.c score_lm, grad.c record_lm) fills every field,
 * once per item, and hands it to hp_metric_add_token. A metric needing a fact
 * not here adds it here and its computation to those paths.
 */
struct hp_token_facts {
    double loss; /* the item's cross-entropy, lse(z) - z[target], nats */
    bool top1;   /* the first index of the largest logit is the target */
    double kl;   /* KL(unmasked || masked) of the item's distributions, nats; 0 when the variant is the unmasked
                  * model (or compared with none) */
    double ld;   /* z[target] - z[wrong]: a task row's logit difference; 0 where the row has no wrong answer */
};

/* What a gradient pass differentiates for a metric, a row's own (grad.c switches on it, every member a case: a row
 * names the derivative it has, so a new metric cannot fall back to another's). */
enum hp_metric_deriv {
    HP_DERIV_NONE,           /* a step function of the gates (accuracy) or not built: no gradient */
    HP_DERIV_XENT,           /* the mean cross-entropy (loss; a classifier's too) */
    HP_DERIV_KL,             /* KL(unmasked || masked) */
    HP_DERIV_NEG_LOGIT_DIFF, /* -(z_answer - z_wrong), whose decrease is logit_diff's increase */
    HP_DERIV_ONE_MINUS_COS,  /* 1 - cos to the unmasked model's embedding */
    HP_DERIV_COUNT
};

struct hp_metric_row {
    const char *name;   /* what plans, digests, the database's columns and the CLI write */
    const char *label;  /* in messages: "loss", "KL", "accuracy", "cosine" */
    int sign;           /* +1: larger is worse; -1: larger is better */
    const char *unit;   /* what its values (and differences of them) are counted in, for axes */
    const char *effect; /* how a variant's effect is taken from it (queries' notes, the report's captions) */
    enum hp_metric_baseline baseline;
    enum hp_metric_score score;
    double (*token)(const struct hp_token_facts *f); /* HP_SCORE_TOKENS: an item's score (summed, then reduced);
                                                      * NULL for the others */
    enum hp_metric_reduce reduce;
    enum hp_metric_deriv deriv; /* what hp_evaluator_grad differentiates for it (HP_DERIV_NONE: it has no gradient) */
    const char *grad_what; /* what the gradient is of, in messages ("1 - cos"); NULL without one */
    enum hp_metric_needs needs; /* what the data must hold (HP_SCORE_TOKENS rows) */
    /* the reduced value (and each sequence's) is then taken as recovery: (x - c) / (k - c), where k and c are the
     * unmasked model's logit_diff on the clean and on the corrupt prompts (eval.c, hp_eval_task_ready) */
    bool recovery;
    /* the gradient studies (importance, attribution, gradient-ranked curves) differentiate it when it is the
     * sweep's metric: loss, logit_diff, and cos (an encoder's only metric); for any other sweep metric they
     * differentiate the loss (hp_metric_grad_of: kl's gradient says nothing the loss's does not, acc has none) */
    bool grad_studies;
    /* its gradient is identically 0 at the unmasked model, where it is minimal (kl, 1 - cos): a gradient
     * study that differentiates it is taken at a base mask that removes heads (hp_plan_check_grad) */
    bool grad_zero_unmasked;
};

/* The row of m, a value of the enum (asserted). Static. */
const struct hp_metric_row *hp_metric_row(enum hp_metric m);

/* Add the item f's score under every token-scored metric to sum (by enum hp_metric), each through its row's
 * scorer; the other metrics' sums are left alone. A path calls it once per scored item, in item order. */
void hp_metric_add_token(double sum[HP_N_METRICS], const struct hp_token_facts *f);

#endif
