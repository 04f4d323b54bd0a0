/*
 * metric.c -- the names of what a variant is measured by (metrics): one table.
 * (How a head is taken out, the ablation methods, is ablation.c's table.)
 *
 * The evaluator computes them; plans, digests, the sweep's iterative scoring,
 * the store, queries and the CLI name them and rank by them through this
 * file. Their names are one row here; what computes and stores a metric is
 * not yet (the evaluator's paths score it, the store has a column for it), and
 * nor is the rule of which way is worse, which query_table.c, sweep.c and the
 * schema's effects view restate beside the sign here.
 *
 * Invariants: names are what the database stores and digests hash: changing
 * one changes every content address.
 * Must not: print, allocate, or know anything of models or SQL.
 */
#include "headprune.h"

#include <string.h>

// --- metrics -------------------------------------------------------------------

static const struct {
    const char *name;
    int sign; // +1: larger is worse; -1: larger is better
    const char *unit; // what its values (and differences of them) are counted in, for axes
    const char *effect; // how a variant's effect is taken from it (queries' notes, the report's captions)
} metrics[HP_N_METRICS] = {
    [HP_METRIC_LOSS] = {"loss", +1, "nats", "effect = loss - baseline loss (nats; larger = worse)"},
    [HP_METRIC_KL] = {"kl", +1, "nats",
                      "effect = the variant's KL(unmasked || masked) (nats; the baseline's is 0; larger = worse)"},
    [HP_METRIC_ACC] = {"acc", -1, "fraction correct", "effect = baseline acc - acc (larger = worse)"},
    [HP_METRIC_COS] = {"cos", -1, "cosine similarity", "effect = baseline cos - cos (larger = worse)"},
};

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

const char *hp_metric_unit(enum hp_metric m)
{
    return (int)m >= 0 && (int)m < HP_N_METRICS ? metrics[m].unit : "";
}

const char *hp_metric_effect_text(enum hp_metric m)
{
    return (int)m >= 0 && (int)m < HP_N_METRICS ? metrics[m].effect : "";
}
