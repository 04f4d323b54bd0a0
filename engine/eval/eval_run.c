/*
 * eval_run.c -- the evaluator's runs (hp_evaluator_run_many, hp_evaluator_run):
 * each variant's path is picked here: a copy of what a gradient pass has just
 * measured (grad.c keeps it), the plain path (eval.c) or the reuse path
 * (reuse.c), and its metrics are finished as their rows say (eval.c).
 *
 * It sits above both paths, so neither calls up into the other: eval_run.c ->
 * reuse.c -> eval.c, and eval_run.c -> eval.c.
 * Must not: score or reduce anything itself (the paths and eval.c do).
 */
#include <stdlib.h>
#include <string.h>

#include "eval_priv.h"
#include "util.h" /* hp_fail */

/* dst (from hp_eval_metrics_new, for the same evaluator) made equal to src. */
static void metrics_copy(struct hp_metrics *dst, const struct hp_metrics *src)
{
    double *seq[HP_N_METRICS];
    memcpy(seq, dst->seq, sizeof seq);
    int64_t *st = dst->seq_tokens;
    const size_t ns = (size_t)src->n_seqs;
    *dst = *src;
    for (int k = 0; k < HP_N_METRICS; k++)
        dst->seq[k] = memcpy(seq[k], src->seq[k], ns * sizeof *seq[k]);
    dst->seq_tokens = memcpy(st, src->seq_tokens, ns * sizeof *st);
}

// --- evaluation -------------------------------------------------------------------

/*
 * Whether abl's replacement at position pos is, to the bit, every head's own output there in every row and layer
 * (resample where each row's corrupt prompt agrees with its prompt up to pos, in a causal model): a patch there is
 * then the unmasked model itself.
 */
static bool patch_is_identity(const struct hp_evaluator *ev, enum hp_ablation abl, int pos)
{
    const struct hp_model_info *in = &ev->m->info;
    const int T = ev->d->seq_len, S = ev->d->n_seqs, qd = in->n_heads * in->d_head;
    const struct hp_replacement rep = hp_ablation_kinds[abl].replacement(&ev->abl, in, T, 0, S, false);
    for (int l = 0; l < in->n_layers; l++)
        for (int s = 0; s < S; s++) {
            const int r = s * T + pos;
            const float *own = ev->abl.own + ((size_t)l * S * T + (size_t)r) * qd;
            for (int h = 0; h < in->n_heads; h++) {
                const float *x = hp_replacement_at(&rep, l, h, in->d_head, r), *o = own + h * in->d_head;
                for (int i = 0; i < in->d_head; i++)
                    if ((x ? x[i] : 0.0f) != o[i])
                        return false;
            }
        }
    return true;
}

/* Whether mask is one the evaluator takes for this model and data: else why not (err). */
static enum hp_status check_mask(const struct hp_evaluator *ev, const struct hp_mask *mask, enum hp_ablation abl,
                                 struct hp_error *err)
{
    const struct hp_model_info *in = &ev->m->info;
    if (mask->n_layers != in->n_layers || mask->n_heads != in->n_heads)
        return hp_fail(err, HP_ERR_ARG, "mask is for %d layers x %d heads but the model has %d x %d",
                       mask->n_layers, mask->n_heads, in->n_layers, in->n_heads);
    if (mask->pos >= ev->d->seq_len || mask->pos < -1)
        return hp_fail(err, HP_ERR_ARG, "%s: position %d is not one of the rows' %d tokens", ev->d->path, mask->pos,
                       ev->d->seq_len);
    if (mask->pos >= 0 && hp_mask_has_mlp(mask))
        return hp_fail(err, HP_ERR_ARG, "patching one position at a time is for heads: the variant changes an "
                       "MLP block (patch MLPs at every position)");
    if (!hp_mask_has_edges(mask))
        return HP_OK;
    const char *why = hp_fwd_edges_refused(ev->m);
    if (why)
        return hp_fail(err, HP_ERR_UNSUPPORTED, "%s: edges are not patched in this model: %s", ev->m->dir, why);
    if (mask->pos >= 0)
        return hp_fail(err, HP_ERR_ARG, "edges are patched at every position, not at position %d alone", mask->pos);
    for (int i = 0; i < mask->n_edges; i++)
        if (mask->edges[i].from.kind == HP_NODE_EMB && abl != HP_ABLATE_ZERO)
            return hp_fail(err, HP_ERR_UNSUPPORTED, "edges from emb are patched under zero ablation only (%s has no "
                           "replacement for the embeddings yet)", hp_ablation_name(abl));
    return HP_OK;
}

enum hp_status hp_evaluator_run_many(struct hp_evaluator *ev, const struct hp_mask *const *masks, int n,
                                     enum hp_ablation abl, struct hp_metrics **out, struct hp_error *err)
{
    if (n < 1)
        return n == 0 ? HP_OK : hp_fail(err, HP_ERR_ARG, "%d variants", n);
    bool ablates = false, one_position = false, mlps = false;
    enum hp_status st = HP_OK;
    for (int i = 0; i < n; i++)
        out[i] = NULL;
    for (int i = 0; i < n && st == HP_OK; i++) {
        const struct hp_mask *mask = masks[i];
        if (mask && (st = check_mask(ev, mask, abl, err)) != HP_OK)
            break;
        ablates |= mask && (hp_mask_count_ablated(mask) > 0 || hp_mask_has_mlp(mask) || hp_mask_has_edges(mask));
        one_position |= mask && mask->pos >= 0;
        mlps |= hp_mask_has_mlp(mask);
        for (int e = 0; mask && e < mask->n_edges; e++) /* an MLP sender's replacement */
            mlps |= mask->edges[e].from.kind == HP_NODE_MLP;
    }
    if (st == HP_OK && ablates)
        st = hp_eval_ablation_ready(ev, abl, mlps, err);
    if (st == HP_OK && one_position)
        st = hp_eval_own_ready(ev, err);
    if (st != HP_OK)
        return st;
    /* the variants to run: all but one a gradient pass just measured (a copy); a patch at a position where it
     * is the unmasked model runs as the unmasked model (the same bits) */
    const struct hp_mask **run = calloc((size_t)n, sizeof *run);
    struct hp_metrics **run_out = calloc((size_t)n, sizeof *run_out);
    struct hp_eval_totals *tots = calloc((size_t)n, sizeof *tots);
    st = run && run_out && tots ? HP_OK : hp_fail(err, HP_ERR_NOMEM, "out of memory");
    int n_run = 0, pos_seen = -1;
    bool identity = false;
    for (int i = 0; i < n && st == HP_OK; i++) {
        const struct hp_mask *mask = masks[i];
        if (mask && mask->pos >= 0 && mask->pos != pos_seen) {
            pos_seen = mask->pos;
            identity = patch_is_identity(ev, abl, pos_seen);
        }
        if (mask && mask->pos >= 0 && identity)
            mask = NULL;
        if (!(out[i] = hp_eval_metrics_new(ev))) {
            st = hp_fail(err, HP_ERR_NOMEM, "out of memory");
        } else if (!ev->plain && !ev->kept_gate && hp_eval_kept_matches(ev, mask, abl)) {
            metrics_copy(out[i], ev->kept); /* the unmasked model's: the same bits (grad.c) */
        } else {
            run[n_run] = mask;
            run_out[n_run++] = out[i];
        }
    }
    if (st == HP_OK && n_run > 0 && ev->plain)
        for (int k = 0; k < n_run && st == HP_OK; k++)
            st = hp_eval_run_plain(ev, run[k], abl, run_out[k], &tots[k], err);
    else if (st == HP_OK && n_run > 0)
        st = hp_eval_reuse_run(ev, run, n_run, abl, run_out, tots, err);
    for (int k = 0; k < n_run && st == HP_OK; k++)
        st = hp_eval_metrics_finish(ev, run_out[k], &tots[k], run[k], abl, err);
    free(run), free(run_out), free(tots);
    if (st != HP_OK)
        for (int i = 0; i < n; i++) {
            hp_metrics_free(out[i]);
            out[i] = NULL;
        }
    return st;
}

enum hp_status hp_evaluator_run(struct hp_evaluator *ev, const struct hp_mask *mask, enum hp_ablation abl,
                                struct hp_metrics **out, struct hp_error *err)
{
    return hp_evaluator_run_many(ev, &mask, 1, abl, out, err);
}
