/*
 * scores.c -- per-unit scores from the gradient at the gates: Michel et al.'s
 * importance, and per-unit sums of a per-head quantity (the attribution
 * estimates, gradients at a unit's shared gate).
 *
 * Pure arithmetic on what hp_evaluator_grad_seq hands back; the sweep stores
 * the results and queries read them (docs/plans.md: importance,
 * attribution). A KV group's query heads are consecutive: head h belongs to
 * group h / (n_heads / n_kv_heads), as mask.c's units.
 * Must not: run the model, print, or know the store.
 */
#include <math.h>

#include "headprune.h"

void hp_importance(const double *seq_grad, int n_seqs, const struct hp_model_info *info, enum hp_unit_kind kv,
                   enum hp_normalize normalize, double *raw, double *score)
{
    /* an MLP's gradient is its own gate's: (n_seqs, n_layers) */
    const bool mlp = kv == HP_UNIT_MLP;
    const int L = info->n_layers, H = mlp ? 1 : info->n_heads, U = hp_unit_count(info, kv),
              w = mlp ? 1 : hp_unit_width(info, kv);
    for (int l = 0; l < L; l++) {
        for (int u = 0; u < U; u++) {
            /* |.| of the unit's gradient per sequence: a group's heads share one gate, so their shares add first */
            double sum = 0;
            for (int s = 0; s < n_seqs; s++) {
                const double *g = seq_grad + ((size_t)s * L + l) * H + (size_t)u * w;
                double gu = 0;
                for (int i = 0; i < w; i++)
                    gu += g[i];
                sum += fabs(gu);
            }
            raw[l * U + u] = sum;
        }
        double norm = 0;
        for (int u = 0; u < U; u++)
            norm += raw[l * U + u] * raw[l * U + u];
        norm = sqrt(norm);
        for (int u = 0; u < U; u++)
            score[l * U + u] = normalize == HP_NORMALIZE_LAYER && norm > 0 ? raw[l * U + u] / norm : raw[l * U + u];
    }
}

void hp_unit_sums(const double *per_head, const struct hp_model_info *info, enum hp_unit_kind kv, double *out)
{
    const bool mlp = kv == HP_UNIT_MLP; /* per_head is then per MLP: (n_layers) */
    const int L = info->n_layers, H = mlp ? 1 : info->n_heads, U = hp_unit_count(info, kv),
              w = mlp ? 1 : hp_unit_width(info, kv);
    for (int l = 0; l < L; l++)
        for (int u = 0; u < U; u++) {
            double e = 0;
            for (int i = 0; i < w; i++)
                e += per_head[(size_t)l * H + (size_t)u * w + i];
            out[l * U + u] = e;
        }
}
