/*
 * grad.c -- the gradient of the evaluator's mean loss at every head's gate.
 *
 * The evaluator's loss (eval.c: the token-weighted mean cross-entropy of a
 * causal LM over its scored positions, of an MLM over its labelled ones, or
 * a classifier's mean over sequences) differentiated with respect to the
 * gates of a mask, over the whole held-out set: chunk by chunk as the
 * evaluator walks it, a forward that keeps the residual stream (its resid
 * tap), the head fused with the loss's gradient (logits a vocabulary block
 * at a time, never a chunk's rows x n_vocab), then the reverse pass
 * (backward.c). Sums are in double and in chunk order.
 * Must not: print, exit, or change the evaluator's state beyond its means.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backward_int.h"
#include "eval_int.h"
#include "util_int.h"
#include "vmath_int.h"

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
 * The loss's workspace beside the pass's: the LM head is fused with the
 * loss's gradient, as reuse.c fuses it with the metrics, so that no chunk's
 * logits (rows x n_vocab) are ever held.
 */
struct head_grad {
    float *dh;     /* (rows, d_model) the gradient at the rows the head reads */
    float *z;      /* a classifier: (batch, n_labels) its logits, then their gradient */
    int *sc_row;   /* (rows) an LM's scored rows in the chunk ... */
    int32_t *sc_y; /* (rows) ... and their targets */
    float *hc;     /* (rows, d_model) the scored rows, gathered */
    float *acc;    /* (rows, d_model) sum over the vocabulary of exp(z_v - mx) E_v */
    float *lg;     /* (rows, hp_eval_vocab_block(n_vocab)) one block of logits, then of exp(z - mx) */
    float *mx;     /* (rows) running maximum logit */
    float *zt;     /* (rows) the target's logit */
    double *s;     /* (rows) sum of exp(z_v - mx) */
    double *tl;    /* (rows) the row's loss */
    void *buf;
};

static void head_grad_free(struct head_grad *hg)
{
    free(hg->buf);
}

/* Workspace for chunks of `rows` rows. Destructor: head_grad_free. False on OOM. */
static bool head_grad_new(const struct hp_evaluator *ev, size_t rows, struct head_grad *hg)
{
    const struct hp_model_info *in = &ev->m->info;
    const size_t d = (size_t)in->d_model, vb = ev->has_cls ? 0 : (size_t)hp_eval_vocab_block(in->n_vocab),
                 nz = ev->has_cls ? (size_t)ev->batch * in->n_labels : 0, nr = ev->has_cls ? 0 : rows;
    /* doubles first, then 4-byte items: each part stays aligned */
    const size_t bytes = 2 * nr * sizeof(double) + (rows * d + nz + 2 * nr * d + nr * vb + 2 * nr) * sizeof(float) +
                         nr * (sizeof(int) + sizeof(int32_t));
    memset(hg, 0, sizeof *hg);
    if (!(hg->buf = malloc(bytes)))
        return false;
    double *pd = hg->buf;
    hg->s = pd, pd += nr;
    hg->tl = pd, pd += nr;
    float *pf = (float *)pd;
    hg->dh = pf, pf += rows * d;
    hg->z = pf, pf += nz;
    hg->hc = pf, pf += nr * d;
    hg->acc = pf, pf += nr * d;
    hg->lg = pf, pf += nr * vb;
    hg->mx = pf, pf += nr;
    hg->zt = pf, pf += nr;
    hg->sc_row = (int *)pf;
    hg->sc_y = (int32_t *)(hg->sc_row + nr);
    return true;
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
 * The LM head and the gradient of the mean loss at its input rows h (nb
 * sequences), into hg->dh; returns the chunk's summed loss. Only scored rows
 * are sent through the head (the others' gradient is 0). The vocabulary goes
 * by in blocks, each row keeping a running maximum mx, the sum s of
 * exp(z - mx) and acc = sum of exp(z_v - mx) E_v, both rescaled when mx
 * grows (the online softmax); at the end the row's gradient is
 * (acc / s - E_y) / n: softmax - onehot, through the head.
 */
static double lm_backward(const struct hp_evaluator *ev, struct head_grad *hg, const float *h, int s0, int nb,
                          double n_items)
{
    const struct hp_model *m = ev->m;
    const int T = ev->d->seq_len, R = nb * T, d = m->info.d_model, V = m->info.n_vocab,
              VB = hp_eval_vocab_block(V);
    int n = 0;
    for (int r = 0; r < R; r++) {
        int32_t y;
        if (hp_eval_target_at(ev->d, m->info.causal, s0 + r / T, r % T, &y)) {
            hg->sc_row[n] = r;
            hg->sc_y[n] = y;
            memcpy(hg->hc + (size_t)n * d, h + (size_t)r * d, (size_t)d * sizeof(float));
            n++;
        }
    }
    memset(hg->acc, 0, (size_t)n * d * sizeof(float));
    for (int v0 = 0; v0 < V; v0 += VB) {
        const int nv = V - v0 < VB ? V - v0 : VB;
        hp_fwd_logits(m, hg->hc, n, v0, nv, hg->lg, VB);
#pragma omp parallel for schedule(static) if ((size_t)n * nv >= 65536)
        for (int i = 0; i < n; i++) {
            float *z = hg->lg + (size_t)i * VB, bm = z[0];
            for (int k = 1; k < nv; k++)
                if (z[k] > bm)
                    bm = z[k];
            const int y = hg->sc_y[i];
            if (y >= v0 && y < v0 + nv)
                hg->zt[i] = z[y - v0];
            if (v0 == 0) {
                hg->mx[i] = bm;
                hg->s[i] = 0;
            } else if (bm > hg->mx[i]) {
                const float c = expf(hg->mx[i] - bm);
                float *ai = hg->acc + (size_t)i * d;
                hg->s[i] *= c;
                for (int k = 0; k < d; k++)
                    ai[k] *= c;
                hg->mx[i] = bm;
            }
            hp_vexpf(z, z, hg->mx[i], (size_t)nv);
            hg->s[i] += hp_vsum_d(z, (size_t)nv);
        }
        hp_bwd_logits(m, hg->lg, n, v0, nv, VB, hg->acc);
    }
    memset(hg->dh, 0, (size_t)R * d * sizeof(float));
#pragma omp parallel for schedule(static) if ((size_t)n * d >= 65536)
    for (int i = 0; i < n; i++) {
        const float *ai = hg->acc + (size_t)i * d, *ey = m->lm_head + (size_t)hg->sc_y[i] * d;
        float *g = hg->dh + (size_t)hg->sc_row[i] * d;
        for (int k = 0; k < d; k++)
            g[k] = (float)(((double)ai[k] / hg->s[i] - ey[k]) / n_items);
        hg->tl[i] = hg->mx[i] + log(hg->s[i]) - hg->zt[i];
    }
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += hg->tl[i];
    return sum;
}

/*
 * The gradient of the mean loss at the rows h (nb sequences) the head reads,
 * into hg->dh; returns the chunk's summed loss.
 */
static double loss_backward(const struct hp_evaluator *ev, struct head_grad *hg, const float *h, int s0, int nb,
                            double n_items)
{
    const struct hp_data *d = ev->d;
    if (!ev->has_cls)
        return lm_backward(ev, hg, h, s0, nb, n_items);
    const int C = ev->width;
    hp_fwd_classify(ev->m, h, nb, d->seq_len, hg->z);
    double sum = 0;
    for (int j = 0; j < nb; j++)
        sum += row_xent_backward(hg->z + (size_t)j * C, C, d->seq_labels[s0 + j], n_items);
    hp_bwd_classify(ev->m, h, hg->z, nb, d->seq_len, hg->dh);
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
    struct hp_fwd *fw = hp_fwd_new(ev->m, T, B);
    struct hp_bwd *bw = hp_bwd_new(ev->m, T, B, ev->grad_keep_bytes);
    float *resid = malloc((size_t)(L + 1) * rows * in->d_model * sizeof(float));
    struct head_grad hg;
    const bool hg_ok = head_grad_new(ev, rows, &hg);
    enum hp_status st = HP_OK;
    if (!fw || !bw || !resid || !hg_ok) {
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
        struct hp_fwd_taps tp = {.resid = resid, .keep = hp_bwd_keep(bw)};
        const float *h = hp_fwd_run(ev->m, fw, &fi, &va, &tp);
        sum += loss_backward(ev, &hg, h, s0, nb, (double)n_items);
        /* the chunk's sequences' shares go straight to their rows of seq_grad */
        const struct hp_bwd_grads g = {grad, atp, seq_grad ? seq_grad + (size_t)s0 * HH : NULL};
        hp_bwd_run(ev->m, bw, &fi, &va, resid, hg.dh, &g);
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
    head_grad_free(&hg);
    return st;
}
