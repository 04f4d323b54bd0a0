/*
 * grad.c -- the gradient of the evaluator's mean loss at every head's gate.
 *
 * The evaluator's loss (eval.c: the token-weighted mean cross-entropy of a
 * causal LM over its scored positions, of an MLM over its labelled ones, or
 * a classifier's mean over sequences) differentiated with respect to the
 * gates of a mask, over the whole held-out set: chunk by chunk as the
 * evaluator walks it, a forward that keeps the residual stream (its resid
 * tap) and the logits, the loss's gradient at the logits, then the reverse
 * pass (backward.c). Sums are in double and in chunk order.
 * Must not: print, exit, or change the evaluator's state beyond its means.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backward_int.h"
#include "eval_int.h"
#include "util_int.h"

/* Items the loss averages over: scored tokens, or sequences for a classifier. */
static int64_t scored_items(const struct hp_evaluator *ev)
{
    const struct hp_data *d = ev->d;
    if (ev->has_cls)
        return d->n_seqs;
    int64_t n = 0;
    int32_t y;
    for (int s = 0; s < d->n_seqs; s++)
        for (int t = 0; t < d->seq_len; t++)
            n += hp_eval_target_at(d, ev->m->info.causal, s, t, &y);
    return n;
}

/*
 * One row of logits z (W) against target y: its cross-entropy, and z
 * replaced by the gradient of (cross-entropy / n) at it, softmax - onehot.
 */
static double row_xent_backward(float *z, int W, int y, double n)
{
    float mx = z[0];
    for (int i = 1; i < W; i++)
        if (z[i] > mx)
            mx = z[i];
    double s = 0;
    for (int i = 0; i < W; i++)
        s += exp((double)z[i] - mx);
    double lse = mx + log(s), loss = lse - z[y];
    for (int i = 0; i < W; i++)
        z[i] = (float)((exp((double)z[i] - lse) - (i == y)) / n);
    return loss;
}

/*
 * The chunk's outputs out (nb sequences) become the gradient of the mean
 * loss at them; returns the chunk's summed loss. Rows not scored get 0.
 */
static double loss_backward(const struct hp_evaluator *ev, int s0, int nb, float *out, double n_items, double *tl)
{
    const struct hp_data *d = ev->d;
    const int W = ev->width, T = d->seq_len;
    if (ev->has_cls) {
        double sum = 0;
        for (int j = 0; j < nb; j++)
            sum += row_xent_backward(out + (size_t)j * W, W, d->seq_labels[s0 + j], n_items);
        return sum;
    }
    const int R = nb * T;
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)R * W >= 65536)
    for (int r = 0; r < R; r++) {
        int32_t y;
        float *z = out + (size_t)r * W;
        tl[r] = 0;
        if (hp_eval_target_at(d, ev->m->info.causal, s0 + r / T, r % T, &y))
            tl[r] = row_xent_backward(z, W, y, n_items);
        else
            memset(z, 0, (size_t)W * sizeof(float));
    }
    double sum = 0;
    for (int r = 0; r < R; r++)
        sum += tl[r];
    return sum;
}

enum hp_status hp_evaluator_grad(struct hp_evaluator *ev, const struct hp_mask *mask, enum hp_ablation abl,
                                 double *grad, double *atp, double *loss, struct hp_error *err)
{
    return hp_evaluator_grad_seq(ev, mask, abl, grad, atp, NULL, loss, err);
}

enum hp_status hp_evaluator_grad_seq(struct hp_evaluator *ev, const struct hp_mask *mask, enum hp_ablation abl,
                                     double *grad, double *atp, double *seq_grad, double *loss, struct hp_error *err)
{
    const struct hp_model_info *in = &ev->m->info;
    const struct hp_data *d = ev->d;
    if (!ev->has_loss)
        return hp_fail(err, HP_ERR_UNSUPPORTED,
                       "%s: %s has no loss on this data (an encoder without a head is measured by cos, whose "
                       "gradient vanishes at the unmasked model): gradients need a causal LM, an MLM head with "
                       "labels, or a classifier with labels",
                       d->path, ev->m->dir);
    if (mask && (mask->n_layers != in->n_layers || mask->n_heads != in->n_heads))
        return hp_fail(err, HP_ERR_ARG, "mask is for %d layers x %d heads but the model has %d x %d", mask->n_layers,
                       mask->n_heads, in->n_layers, in->n_heads);
    if (in->n_kv_heads < 1 || in->n_heads % in->n_kv_heads)
        return hp_fail(err, HP_ERR_UNSUPPORTED, "%s: %d query heads do not group over %d KV heads", ev->m->dir,
                       in->n_heads, in->n_kv_heads);
    const int64_t n_items = scored_items(ev);
    if (n_items == 0)
        return hp_fail(err, HP_ERR_ARG, "%s: no token is scored (all labels are -100 or padding)", d->path);
    if (abl != HP_ABLATE_ZERO) {
        struct hp_means mm;
        enum hp_status st = hp_evaluator_means(ev, &mm, err);
        if (st != HP_OK)
            return st;
    }
    const int T = d->seq_len, B = ev->batch, L = in->n_layers, HH = L * in->n_heads;
    const size_t rows = (size_t)B * T;
    const size_t n_out = ev->has_cls ? (size_t)B * ev->width : rows * ev->width;
    struct hp_fwd *fw = hp_fwd_new(ev->m, T, B);
    struct hp_bwd *bw = hp_bwd_new(ev->m, T, B);
    float *resid = malloc((size_t)(L + 1) * rows * in->d_model * sizeof(float));
    float *out = malloc(n_out * sizeof(float));
    double *tl = malloc(rows * sizeof(double));
    enum hp_status st = HP_OK;
    if (!fw || !bw || !resid || !out || !tl) {
        st = hp_fail(err, HP_ERR_NOMEM, "out of memory for a gradient workspace of %d x %d tokens", B, T);
        goto done;
    }
    for (int i = 0; i < HH; i++) {
        grad[i] = 0;
        if (atp)
            atp[i] = 0;
    }
    if (seq_grad)
        memset(seq_grad, 0, (size_t)d->n_seqs * HH * sizeof *seq_grad);
    const float *gate = mask ? mask->gate : NULL;
    double sum = 0;
    for (int s0 = 0; s0 < d->n_seqs; s0 += B) {
        const int nb = hp_eval_chunk_len(ev, s0);
        struct hp_fwd_in fi = hp_eval_chunk_in(ev, s0, nb);
        struct hp_fwd_variants va = hp_eval_chunk_variants(ev, abl);
        va.gates = &gate;
        struct hp_fwd_taps tp = {.out = out, .resid = resid};
        hp_fwd_run(ev->m, fw, &fi, &va, &tp);
        sum += loss_backward(ev, s0, nb, out, (double)n_items, tl);
        /* the chunk's sequences' shares go straight to their rows of seq_grad */
        const struct hp_bwd_grads g = {grad, atp, seq_grad ? seq_grad + (size_t)s0 * HH : NULL};
        hp_bwd_run(ev->m, bw, &fi, &va, resid, out, &g);
        if (ev->progress)
            ev->progress(ev->progress_user, s0 + nb, d->n_seqs);
    }
    const double mean = sum / (double)n_items;
    bool finite = isfinite(mean);
    for (int i = 0; i < HH && finite; i++)
        finite = isfinite(grad[i]) && (!atp || isfinite(atp[i]));
    for (size_t i = 0; seq_grad && finite && i < (size_t)d->n_seqs * HH; i++)
        finite = isfinite(seq_grad[i]);
    if (!finite)
        st = hp_fail(err, HP_ERR_FORMAT,
                     "%s: the loss (%g) or its gradient is not finite on %s (check the weights and config.json); "
                     "nothing is reported",
                     ev->m->dir, mean, d->path);
    else if (loss)
        *loss = mean;
done:
    hp_fwd_free(fw);
    hp_bwd_free(bw);
    free(resid);
    free(out);
    free(tl);
    return st;
}
