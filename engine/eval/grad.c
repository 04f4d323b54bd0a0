/*
 * grad.c -- the gradient of the evaluator's mean metric at every head's gate.
 *
 * The metric (eval.c's): the loss (the token-weighted mean cross-entropy of
 * a causal LM over its scored positions, of an MLM over its labelled ones, or
 * a classifier's mean over sequences), the mean KL from the unmasked model
 * over the same items, or for an encoder without a head 1 - the mean cosine
 * of its sentence embeddings to the unmasked model's; differentiated with
 * respect to the gates of a mask, over the whole held-out set: chunk by
 * chunk as the evaluator walks it, (kl, cos) the unmasked model's pass, a
 * forward that keeps the residual stream (its resid tap), the head fused
 * with the metric's gradient (logits a vocabulary block at a time, never a
 * chunk's rows x n_vocab), then the reverse pass (backward.c). Sums are in
 * double and in chunk order.
 *
 * Its own state (grad_priv.h: the chunk size, the unmasked model's reference
 * of the whole set, the last pass's time) hangs from the evaluator by one
 * pointer, made on the first pass and freed through the function set beside
 * it, so eval.c never calls in here. A pass's metrics are kept in the
 * evaluator itself (kept: eval_run.c hands them out).
 * Must not: print, exit, or change the evaluator beyond readying its
 * ablation, its own state and the metrics it keeps.
 */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backward.h"
#include "eval_priv.h"
#include "grad_priv.h"
#include "metric.h"
#include "util.h"
#include "vmath.h"

// --- the gradient state ------------------------------------------------------------

int hp_grad_batch(const struct hp_model *m, int seq_len, int batch, size_t keep_bytes, size_t chunk_bytes)
{
    /* larger while what the pass keeps fits, and every layer's kept activations their budget (else more
     * rows would cost layers made again: a whole forward's worth on an 8B model) */
    const struct hp_model_info *in = &m->info;
    const size_t resid_seq = (size_t)(in->n_layers + 1) * seq_len * in->d_model * sizeof(float);
    int gb = HP_GRAD_CHUNK_ROWS / seq_len;
    for (; gb > batch; gb--) {
        const size_t kept = (size_t)in->n_layers * hp_bwd_layer_bytes(m, seq_len, gb);
        if (kept <= keep_bytes && (size_t)gb * resid_seq + kept <= chunk_bytes)
            break;
    }
    return gb < batch ? batch : gb;
}

/* The evaluator frees its gradient state through this (ev->gs_free). */
static void grad_state_free(struct hp_grad_state *gs)
{
    if (!gs)
        return;
    free(gs->ref);
    free(gs->ref_emb);
    free(gs->pre);
    free(gs->pre_gate);
    free(gs);
}

struct hp_grad_state *hp_grad_state_get(struct hp_evaluator *ev)
{
    if (ev->gs)
        return ev->gs;
    struct hp_grad_state *gs = calloc(1, sizeof *gs);
    if (!gs)
        return NULL;
    const struct hp_data *d = ev->d;
    gs->keep_bytes = HP_BWD_KEEP_BYTES;
    const int gb = hp_grad_batch(ev->m, d->seq_len, ev->batch, gs->keep_bytes, HP_GRAD_CHUNK_BYTES);
    gs->batch = gb > d->n_seqs ? d->n_seqs : gb;
    ev->gs = gs;
    ev->gs_free = grad_state_free;
    return gs;
}

// --- the pass -----------------------------------------------------------------------

/* Sequences in the gradient pass's chunk that starts at sequence s. */
static int chunk_len(const struct hp_grad_state *gs, const struct hp_evaluator *ev, int s)
{
    const int left = ev->d->n_seqs - s;
    return left < gs->batch ? left : gs->batch;
}

/* Items the metric averages over: scored tokens, or sequences for a classifier or a cosine. */
static int64_t scored_items(const struct hp_evaluator *ev)
{
    const struct hp_data *d = ev->d;
    if (ev->has_cls || !ev->has_loss)
        return d->n_seqs;
    int64_t n = 0;
    int32_t y;
    for (int s = 0; s < d->n_seqs; s++)
        for (int t = 0; t < d->seq_len; t++)
            n += hp_eval_target_at(d, ev->m->info.causal, s, t, &y);
    return n;
}

/*
 * The objective's workspace beside the pass's. The LM head is fused with the
 * gradient, as reuse.c fuses it with the metrics, so that no chunk's logits
 * (rows x n_vocab) are ever held. Under kl the unmasked model's scored rows
 * go through the head beside the masked ones (rows n_sc.. of hc, acc, lg,
 * mx, s), block by block, so its probabilities are never held either.
 */
struct head_grad {
    enum hp_metric_deriv deriv; /* what the backward differentiates: the metric row's */
    int n_sc;              /* an LM's scored rows in the chunk */
    size_t rows;           /* the chunk's rows at most: the gradient pass's batch x seq_len */
    float *dh;             /* (rows, d_model) the gradient at the rows the head reads */
    float *z;              /* a classifier: (batch, n_labels) its logits, then their gradient */
    float *zb;             /* a classifier under kl: (batch, n_labels) the unmasked model's logits */
    int *sc_row;           /* (rows) an LM's scored rows in the chunk ... */
    int32_t *sc_y;         /* (rows) ... and their targets */
    int32_t *sc_w;         /* (rows) ... and their wrong answers, -1 where none (task rows) */
    float *hc;             /* (2 rows, d_model) the scored rows gathered: the masked pass's, then (kl) the unmasked's */
    float *acc;            /* (2 rows, d_model) per row of hc, the sum over the vocabulary of exp(z_v - mx) E_v */
    float *lg;             /* (2 rows, VB) one block of logits per row of hc, then of exp(z - mx) */
    float *qb;             /* kl: (rows, VB) one block of the unmasked rows' exp(z - mx) */
    float *mx;             /* (2 rows) running maximum logit */
    float *zt;             /* (rows) the target's logit */
    float *zw;             /* (rows) the wrong answer's logit (0 where none) */
    float *sl;             /* soft-capped logits: (rows, VB) one block of the slopes 1 - (z / cap)^2 of a masked row */
    float *sy, *sw;        /* soft-capped logits: (rows) the slope at the target and at the wrong answer */
    double *s;             /* (2 rows) sum of exp(z_v - mx) */
    double *c;             /* kl: (rows) sum of exp(zb_v - mx_b) (zb_v - z_v) */
    double *tl;            /* (rows) the row's loss */
    double *tk;            /* (rows) the row's KL, when the unmasked rows went through the head */
    double *eb;            /* cos: (batch, d_model) the unmasked model's sentence embeddings */
    int *arg;              /* (rows) the first index of the largest logit */
    bool ref;              /* the unmasked model's outputs are beside the pass's (kl, cos, or metrics of a variant) */
    bool masked;           /* the gates change the model (else it is the unmasked pass itself) */
    struct hp_metrics *mt; /* NULL, or the pass's metrics (hp_evaluator_run's), recorded as it goes */
    struct hp_eval_totals tot;
    double *em;            /* cos: (d_model) one sequence's masked embedding ... */
    int *em_row;           /* cos: (d_model) ... and the row each dimension came from */
    struct hp_fwd *fw;     /* the pass's workspaces, whose panels the head's products with 16-bit weights use */
    struct hp_bwd *bw;
};

static void head_grad_free(struct head_grad *hg)
{
    free(hg->dh), free(hg->z), free(hg->zb), free(hg->sc_row), free(hg->sc_y), free(hg->sc_w), free(hg->hc), free(hg->acc);
    free(hg->lg), free(hg->qb), free(hg->mx), free(hg->zt), free(hg->zw), free(hg->s), free(hg->c), free(hg->tl), free(hg->tk);
    free(hg->eb), free(hg->sl), free(hg->sy), free(hg->sw);
    free(hg->em), free(hg->em_row), free(hg->arg);
    hp_metrics_free(hg->mt);
}

enum hp_status hp_grad_deriv(const struct hp_metric_row *row, enum hp_metric_deriv *out, struct hp_error *err)
{
    *out = row->deriv;
    switch (row->deriv) { /* every member a case, no default: a new derivative is a warning here until handled */
    case HP_DERIV_XENT:
    case HP_DERIV_KL:
    case HP_DERIV_NEG_LOGIT_DIFF:
    case HP_DERIV_ONE_MINUS_COS: return HP_OK;
    case HP_DERIV_NONE:
        return hp_fail(err, HP_ERR_UNSUPPORTED, "%s has no gradient (its row names no derivative: %s is not "
                       "differentiable in the gates, or not built): use loss or kl", row->name, row->label);
    case HP_DERIV_COUNT: break;
    }
    *out = HP_DERIV_NONE;
    return hp_fail(err, HP_ERR_UNSUPPORTED, "metric %s: its row names a derivative engine/eval/grad.c does not take (%d)",
                   row->name, (int)row->deriv);
}

/* malloc of n items of size bytes, at least one (malloc(0) may be NULL). */
static void *alloc_items(size_t n, size_t size)
{
    return malloc((n ? n : 1) * size);
}

/* Workspace for chunks of gs->batch sequences and metric. Destructor: head_grad_free. False on OOM. */
static bool head_grad_new(const struct hp_evaluator *ev, const struct hp_grad_state *gs, enum hp_metric metric,
                          struct head_grad *hg)
{
    const size_t rows = (size_t)gs->batch * ev->d->seq_len;
    const struct hp_model_info *in = &ev->m->info;
    const bool lm = ev->has_loss && !ev->has_cls, cos = hp_metric_row(metric)->deriv == HP_DERIV_ONE_MINUS_COS;
    /* an LM's rows twice: the unmasked model's go through the head beside the pass's (kl, or a variant's KL) */
    const size_t d = (size_t)in->d_model, vb = lm ? (size_t)hp_eval_vocab_block(in->n_vocab) : 0,
                 nz = ev->has_cls ? (size_t)gs->batch * in->n_labels : 0, nr = lm ? rows : 0, n2 = 2 * nr,
                 ncap = ev->m->info.logit_softcap > 0 ? nr : 0;
    memset(hg, 0, sizeof *hg);
    hg->deriv = hp_metric_row(metric)->deriv;
    hg->rows = rows;
#define HG_ALLOC(p, n) ((p) = alloc_items((n), sizeof *(p)))
    return HG_ALLOC(hg->dh, rows * d) && HG_ALLOC(hg->z, nz) && HG_ALLOC(hg->zb, nz) && HG_ALLOC(hg->sc_row, nr) &&
           HG_ALLOC(hg->sc_y, nr) && HG_ALLOC(hg->sc_w, nr) && HG_ALLOC(hg->hc, n2 * d) && HG_ALLOC(hg->acc, n2 * d) &&
           HG_ALLOC(hg->lg, n2 * vb) && HG_ALLOC(hg->qb, nr * vb) && HG_ALLOC(hg->mx, n2) && HG_ALLOC(hg->zt, nr) && HG_ALLOC(hg->zw, nr) &&
           HG_ALLOC(hg->s, n2) && HG_ALLOC(hg->c, nr) && HG_ALLOC(hg->tl, nr) && HG_ALLOC(hg->tk, nr) &&
           HG_ALLOC(hg->eb, (size_t)gs->batch * d) && HG_ALLOC(hg->em, cos ? d : 0) &&
           HG_ALLOC(hg->em_row, cos ? d : 0) && HG_ALLOC(hg->arg, nr) && HG_ALLOC(hg->sl, ncap * vb) &&
           HG_ALLOC(hg->sy, ncap) && HG_ALLOC(hg->sw, ncap);
#undef HG_ALLOC
}

/*
 * One row of logits z (W) against target y: its cross-entropy, and z
 * replaced by the gradient of (cross-entropy / n) at it, softmax - onehot.
 */
static double row_xent_backward(float *z, int W, int y, double n)
{
    const double lse = hp_eval_row_lse(z, W), loss = lse - z[y];
    for (int i = 0; i < W; i++)
        z[i] = (float)((exp((double)z[i] - lse) - (i == y)) / n);
    return loss;
}

/*
 * One row of logits z (W) against the unmasked model's zb: KL(softmax zb ||
 * softmax z), and z replaced by the gradient of (KL / n) at it,
 * softmax z - softmax zb.
 */
static double row_kl_backward(float *z, const float *zb, int W, double n)
{
    const double lse = hp_eval_row_lse(z, W), lse_b = hp_eval_row_lse(zb, W);
    double kl = 0;
    for (int i = 0; i < W; i++) {
        const double lb = zb[i] - lse_b;
        kl += exp(lb) * (lb - (z[i] - lse));
        z[i] = (float)((exp(z[i] - lse) - exp(lb)) / n);
    }
    return kl;
}

/*
 * A row's running maximum over the vocabulary blocks so far, from the block z
 * (nv entries from v0): at the first block it starts the sums; on a strictly
 * larger maximum the sums kept relative to it (s, acc (d), and *c when not
 * NULL, with d 0) are rescaled (the online softmax). *arg (may be NULL): the first
 * index of the maximum, as reuse.c's metrics take it.
 */
static void online_max(const float *z, int nv, int v0, float *mx, double *s, float *acc, int d, double *c, int *arg)
{
    const float bm = hp_vmax(z, (size_t)nv);
    /* the first index of the block's maximum, looked for only where it is taken */
    const int ba = arg && (v0 == 0 || bm > *mx) ? (int)hp_vfind(z, (size_t)nv, bm) : 0;
    if (v0 == 0) {
        *mx = bm;
        *s = 0;
        if (c)
            *c = 0;
        if (arg)
            *arg = ba;
    } else if (bm > *mx) {
        const float f = expf(*mx - bm);
        *s *= exp((double)*mx - (double)bm); /* as reuse.c's lm_rows: the same loss bits (record_lm) */
        for (int k = 0; k < d; k++)
            acc[k] *= f;
        if (c)
            *c *= f;
        *mx = bm;
        if (arg)
            *arg = v0 + ba;
    }
}

/* Gather the chunk's scored rows of h into hc (n_sc, d_model). */
static void gather_scored(const struct hp_evaluator *ev, const struct head_grad *hg, const float *h, float *hc)
{
    const size_t d = (size_t)ev->m->info.d_model;
    for (int i = 0; i < hg->n_sc; i++)
        memcpy(hc + (size_t)i * d, h + (size_t)hg->sc_row[i] * d, d * sizeof(float));
}

/*
 * The LM head and the gradient of the mean loss (or KL) at its input rows h
 * (nb sequences), into hg->dh; returns the chunk's summed loss (or KL). Only
 * scored rows are sent through the head (the others' gradient is 0). The
 * vocabulary goes by in blocks, each row keeping a running maximum mx, the
 * sum s of exp(z - mx) and acc = sum of exp(z_v - mx) E_v (online_max). At
 * the end the row's gradient is, through the head, softmax - onehot:
 * (acc / s - E_y) / n; under kl softmax - the unmasked model's softmax:
 * (acc / s - acc_b / s_b) / n. With the unmasked model's rows beside
 * (hg->ref: rows n_sc.. of hc), each row's KL = c / s_b - lse_b + lse.
 * Soft-capped logits z = cap tanh(u / cap) (Gemma 2) pass the gradient at z
 * on to u times the slope 1 - (z / cap)^2 of the masked row: its exps (and
 * under kl the unmasked row's) are weighted by it before they enter acc, and
 * E_y (E_w) by the slope at y (w).
 */
static double lm_backward(const struct hp_evaluator *ev, struct head_grad *hg, const float *h, double n_items)
{
    const struct hp_model *m = ev->m;
    const int d = m->info.d_model, V = m->info.n_vocab, VB = hp_eval_vocab_block(V), n = hg->n_sc;
    const bool kl = hg->deriv == HP_DERIV_KL, ld = hg->deriv == HP_DERIV_NEG_LOGIT_DIFF, ref = hg->ref;
    assert(kl || ld || hg->deriv == HP_DERIV_XENT); /* check_pass refused any other (hp_grad_deriv) */
    const float cap = m->info.logit_softcap;
    /* the unmasked rows' logits are made when there is a KL to take; their gradient only under kl */
    const int n_fwd = ref ? 2 * n : n, n_bwd = kl ? 2 * n : n;
    gather_scored(ev, hg, h, hg->hc);
    memset(hg->acc, 0, (size_t)n_bwd * d * sizeof(float));
    for (int v0 = 0; v0 < V; v0 += VB) {
        const int nv = V - v0 < VB ? V - v0 : VB;
        hp_fwd_logits(m, hg->fw, hg->hc, n_fwd, v0, nv, hg->lg, VB);
#pragma omp parallel for schedule(static) if ((size_t)n * nv >= 65536)
        for (int i = 0; i < n; i++) {
            float *z = hg->lg + (size_t)i * VB, *sl = cap > 0 ? hg->sl + (size_t)i * VB : NULL;
            for (int v = 0; sl && v < nv; v++) {
                const float t = z[v] / cap;
                sl[v] = 1.0f - t * t;
            }
            if (ref) {
                /* the unmasked row first: its sums need the masked logits before they become exp */
                const int j = n + i;
                float *zb = hg->lg + (size_t)j * VB, *q = hg->qb + (size_t)i * VB;
                online_max(zb, nv, v0, &hg->mx[j], &hg->s[j], kl ? hg->acc + (size_t)j * d : NULL, kl ? d : 0,
                           &hg->c[i], NULL);
                hp_vexpf(q, zb, hg->mx[j], (size_t)nv);
                hg->s[j] += hp_vsum_d(q, (size_t)nv);
                hg->c[i] += hp_vdot_d(q, zb, (size_t)nv) - hp_vdot_d(q, z, (size_t)nv);
                if (kl)
                    memcpy(zb, q, (size_t)nv * sizeof(float));
                for (int v = 0; kl && sl && v < nv; v++)
                    zb[v] *= sl[v];
            }
            const int y = hg->sc_y[i], w = hg->sc_w[i];
            if (y >= v0 && y < v0 + nv) {
                hg->zt[i] = z[y - v0];
                if (sl)
                    hg->sy[i] = sl[y - v0];
            }
            if (v0 == 0)
                hg->zw[i] = 0;
            if (w >= v0 && w < v0 + nv) {
                hg->zw[i] = z[w - v0];
                if (sl)
                    hg->sw[i] = sl[w - v0];
            }
            online_max(z, nv, v0, &hg->mx[i], &hg->s[i], hg->acc + (size_t)i * d, d, NULL, &hg->arg[i]);
            hp_vexpf(z, z, hg->mx[i], (size_t)nv);
            hg->s[i] += hp_vsum_d(z, (size_t)nv);
            for (int v = 0; sl && v < nv; v++)
                z[v] *= sl[v];
        }
        hp_bwd_logits(m, hg->bw, hg->lg, n_bwd, v0, nv, VB, hg->acc);
    }
    memset(hg->dh, 0, hg->rows * d * sizeof(float));
#pragma omp parallel for schedule(static) if ((size_t)n * d >= 65536)
    for (int i = 0; i < n; i++) {
        const float *ai = hg->acc + (size_t)i * d;
        float *g = hg->dh + (size_t)hg->sc_row[i] * d;
        const double lse = hg->mx[i] + log(hg->s[i]);
        const int j = n + i;
        hg->tl[i] = lse - hg->zt[i];
        hg->tk[i] = ref ? hg->c[i] / hg->s[j] - (hg->mx[j] + log(hg->s[j])) + lse : 0;
        if (kl) {
            const float *bi = hg->acc + (size_t)j * d;
            for (int k = 0; k < d; k++)
                g[k] = (float)(((double)ai[k] / hg->s[i] - (double)bi[k] / hg->s[j]) / n_items);
        } else if (ld) { /* -(z_y - z_w): through the head, E_w - E_y (each times its slope under a cap) */
            const double sw = cap > 0 ? hg->sw[i] : 1, sy = cap > 0 ? hg->sy[i] : 1;
            for (int k = 0; k < d; k++)
                g[k] = (float)((sw * hp_mat_get(m->lm_head, hg->sc_w[i], k) - sy * hp_mat_get(m->lm_head, hg->sc_y[i], k)) /
                               n_items);
        } else { /* HP_DERIV_XENT: the cross-entropy's softmax - onehot, through the head */
            const double sy = cap > 0 ? hg->sy[i] : 1;
            for (int k = 0; k < d; k++)
                g[k] = (float)(((double)ai[k] / hg->s[i] - sy * hp_mat_get(m->lm_head, hg->sc_y[i], k)) / n_items);
        }
    }
    const double *obj = kl ? hg->tk : hg->tl;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += ld ? (double)hg->zw[i] - hg->zt[i] : obj[i];
    return sum;
}

/*
 * The pass's metrics of the chunk at s0 (nb sequences): each scored row's
 * facts from the LM head's (lm_backward's per-row loss, KL and argmax),
 * scored by the metrics' rows, per sequence in token order as reuse.c's are.
 */
static void record_lm(const struct hp_evaluator *ev, struct head_grad *hg, int s0, int nb)
{
    const int T = ev->d->seq_len;
    int i = 0;
    for (int b = 0; b < nb; b++) {
        double sum[HP_N_METRICS] = {0};
        int64_t nt = 0;
        for (; i < hg->n_sc && hg->sc_row[i] / T == b; i++, nt++) {
            /* the unmasked model's KL to itself is 0, as reuse.c's */
            const struct hp_token_facts f = {.loss = hg->tl[i], .top1 = hg->arg[i] == hg->sc_y[i],
                                             .kl = hg->masked ? hg->tk[i] : 0,
                                             .ld = hg->sc_w[i] >= 0 ? (double)hg->zt[i] - hg->zw[i] : 0};
            hp_metric_add_token(sum, &f);
        }
        hp_eval_record_seq(hg->mt, &hg->tot, s0 + b, sum, nt);
    }
}

/*
 * 1 - the cosine of each sequence's sentence embedding (the final rows h,
 * pooled as the model declares: hp_eval_pool_dim) to the unmasked model's
 * (hg->eb), and its gradient over n_items sequences at h, into hg->dh:
 * d(1 - cos)/de = -(e_b / (|e| |e_b|) - cos e / |e|^2), sent back through the
 * pooling (a mean spreads it over the real rows; CLS and max hand each
 * dimension to the row it came from). Returns the chunk's summed 1 - cos.
 */
static double cos_backward(const struct hp_evaluator *ev, struct head_grad *hg, const float *h, int s0, int nb,
                           double n_items)
{
    const struct hp_data *dt = ev->d;
    const enum hp_pooling mode = ev->m->info.pooling;
    const int T = dt->seq_len, D = ev->m->info.d_model;
    memset(hg->dh, 0, hg->rows * D * sizeof(float));
    double sum = 0;
    for (int j = 0; j < nb; j++) {
        const float *hj = h + (size_t)j * T * D;
        const double *eb = hg->eb + (size_t)j * D;
        double dot = 0, na = 0, nbb = 0;
        for (int i = 0; i < D; i++) {
            hg->em[i] = hp_eval_pool_dim(dt, mode, s0 + j, hj, D, i, &hg->em_row[i]);
            dot += hg->em[i] * eb[i];
            na += hg->em[i] * hg->em[i];
            nbb += eb[i] * eb[i];
        }
        if (!isfinite(dot) || !isfinite(na) || !isfinite(nbb))
            return NAN; /* reported by the caller, never a cosine of 0 */
        const double cs = na > 0 && nbb > 0 ? dot / sqrt(na * nbb) : 0.0;
        sum += 1 - cs;
        int n_real = 0;
        for (int t = 0; t < T; t++)
            n_real += !dt->attn_mask || dt->attn_mask[(size_t)(s0 + j) * T + t];
        if (hg->mt) { /* as eval.c's: the unmasked model's own cosine is 1 */
            hg->mt->seq_tokens[s0 + j] = n_real;
            hg->mt->seq[HP_METRIC_COS][s0 + j] = hg->masked ? cs : hp_eval_self_cos(dt, s0 + j, hj, D);
            hg->tot.sum[HP_METRIC_COS] += hg->mt->seq[HP_METRIC_COS][s0 + j];
            hg->tot.tokens += n_real;
        }
        if (!(na > 0 && nbb > 0))
            continue;
        float *gj = hg->dh + (size_t)j * T * D;
        for (int i = 0; i < D; i++) {
            const double g = -(eb[i] / sqrt(na * nbb) - cs * hg->em[i] / na) / n_items;
            if (mode != HP_POOL_MEAN) {
                if (hg->em_row[i] >= 0)
                    gj[(size_t)hg->em_row[i] * D + i] = (float)g;
                continue;
            }
            for (int t = 0; t < T; t++)
                if (!dt->attn_mask || dt->attn_mask[(size_t)(s0 + j) * T + t])
                    gj[(size_t)t * D + i] = (float)(g / n_real);
        }
    }
    return sum;
}

/*
 * The unmasked model's outputs of the chunk at s0 (nb sequences) that the
 * pass is compared with, kept before the pass overwrites the workspace: an
 * LM's scored rows (rows n_sc.. of hc; sc0 of them come before the chunk),
 * a classifier's logits (zb), or an encoder's sentence embeddings (eb).
 * From the evaluator's reference when it holds the whole set, else made by
 * an unmasked pass of their own.
 */
static void reference_chunk(const struct hp_evaluator *ev, const struct hp_grad_state *gs, struct hp_fwd *fw,
                            const struct hp_fwd_in *fi, struct head_grad *hg, int s0, int nb, int64_t sc0)
{
    const int T = ev->d->seq_len, D = ev->m->info.d_model, C = ev->m->info.n_labels;
    float *rows = hg->hc + (size_t)hg->n_sc * D;
    if (!ev->has_loss && gs->ref_emb) {
        memcpy(hg->eb, gs->ref_emb + (size_t)s0 * D, (size_t)nb * D * sizeof(double));
        return;
    }
    if (ev->has_loss && gs->ref) {
        if (ev->has_cls)
            memcpy(hg->zb, gs->ref + (size_t)s0 * C, (size_t)nb * C * sizeof(float));
        else
            memcpy(rows, gs->ref + (size_t)sc0 * D, (size_t)hg->n_sc * D * sizeof(float));
        return;
    }
    const struct hp_fwd_taps none = {0};
    const float *h = hp_fwd_run(ev->m, fw, fi, NULL, &none);
    if (!ev->has_loss) {
        for (int j = 0; j < nb; j++)
            for (int i = 0; i < D; i++)
                hg->eb[(size_t)j * D + i] =
                    hp_eval_pool_dim(ev->d, ev->m->info.pooling, s0 + j, h + (size_t)j * T * D, D, i, NULL);
    } else if (ev->has_cls) {
        hp_fwd_classify(ev->m, fw, h, nb, T, hg->zb);
    } else {
        gather_scored(ev, hg, h, rows);
    }
}

/*
 * The unmasked model's reference over the whole set (gs->ref, gs->ref_emb:
 * grad_priv.h), made once by an unmasked pass when it fits
 * HP_GRAD_REF_BYTES; left NULL (each chunk then makes its own) when it does
 * not or memory is short. hg's chunk buffers are used on the way.
 */
static void reference_fill(const struct hp_evaluator *ev, struct hp_grad_state *gs, struct hp_fwd *fw,
                           struct head_grad *hg, int64_t n_items)
{
    if (gs->ref_tried)
        return;
    gs->ref_tried = true;
    const struct hp_data *d = ev->d;
    const int D = ev->m->info.d_model, C = ev->m->info.n_labels;
    const bool emb = !ev->has_loss, cls = ev->has_cls;
    const size_t per = emb ? (size_t)D * sizeof(double) : cls ? (size_t)C * sizeof(float) : (size_t)D * sizeof(float);
    const size_t n = emb || cls ? (size_t)d->n_seqs : (size_t)n_items;
    if (n > HP_GRAD_REF_BYTES / per)
        return;
    void *ref = alloc_items(n, per);
    if (!ref)
        return;
    int64_t sc0 = 0;
    for (int s0 = 0; s0 < d->n_seqs; s0 += gs->batch) {
        const int nb = chunk_len(gs, ev, s0);
        struct hp_fwd_in fi = hp_eval_chunk_in(ev, s0, nb);
        if (!emb && !cls)
            hg->n_sc = hp_eval_find_scored(ev, s0, nb, hg->sc_row, hg->sc_y, hg->sc_w);
        reference_chunk(ev, gs, fw, &fi, hg, s0, nb, sc0);
        if (emb)
            memcpy((double *)ref + (size_t)s0 * D, hg->eb, (size_t)nb * D * sizeof(double));
        else if (cls)
            memcpy((float *)ref + (size_t)s0 * C, hg->zb, (size_t)nb * C * sizeof(float));
        else
            memcpy((float *)ref + (size_t)sc0 * D, hg->hc + (size_t)hg->n_sc * D, (size_t)hg->n_sc * D * sizeof(float));
        sc0 += hg->n_sc;
    }
    if (emb)
        gs->ref_emb = ref;
    else
        gs->ref = ref;
}

/* The metrics a pass measured (mt, at mask under abl) kept in the evaluator for hp_evaluator_run_many. */
static void keep_metrics(struct hp_evaluator *ev, struct hp_metrics *mt, const struct hp_mask *mask,
                         enum hp_ablation abl)
{
    const int L = ev->m->info.n_layers, HH = L * ev->m->info.n_heads;
    float *gate = NULL;
    if (hp_mask_first_changed(mask, L) < L && !(gate = malloc((size_t)HH * sizeof *gate))) {
        hp_metrics_free(mt); /* out of memory: simply not kept */
        return;
    }
    if (gate)
        memcpy(gate, mask->gate, (size_t)HH * sizeof *gate);
    hp_metrics_free(ev->kept);
    free(ev->kept_gate);
    ev->kept = mt;
    ev->kept_gate = gate;
    ev->kept_abl = abl;
}

/* Whether metric is measured against the unmasked model's outputs (kl; cos), which a pass then runs beside its own. */
static bool against_unmasked(enum hp_metric metric)
{
    const struct hp_metric_row *r = hp_metric_row(metric);
    return r->baseline == HP_BASELINE_UNMASKED || r->score == HP_SCORE_SEQS;
}

/*
 * The gradient of the chunk's objective at the rows h (nb sequences) the
 * head reads, into hg->dh; returns the chunk's summed loss, KL or 1 - cos.
 */
static double objective_backward(const struct hp_evaluator *ev, struct head_grad *hg, const float *h, int s0, int nb,
                                 double n_items)
{
    if (hg->deriv == HP_DERIV_ONE_MINUS_COS)
        return cos_backward(ev, hg, h, s0, nb, n_items);
    if (!ev->has_cls) {
        const double sum = lm_backward(ev, hg, h, n_items);
        if (hg->mt)
            record_lm(ev, hg, s0, nb);
        return sum;
    }
    const int C = ev->width;
    hp_fwd_classify(ev->m, hg->fw, h, nb, ev->d->seq_len, hg->z);
    double sum = 0;
    for (int j = 0; j < nb; j++) {
        float *zj = hg->z + (size_t)j * C;
        if (hg->mt)
            hp_eval_score_cls(ev, hg->mt, &hg->tot, s0 + j, zj, hg->masked ? hg->zb + (size_t)j * C : NULL);
        assert(hg->deriv == HP_DERIV_KL || hg->deriv == HP_DERIV_XENT); /* a classifier's: check_pass */
        sum += hg->deriv == HP_DERIV_KL ? row_kl_backward(zj, hg->zb + (size_t)j * C, C, n_items)
                                      : row_xent_backward(zj, C, ev->d->seq_labels[s0 + j], n_items);
    }
    hp_bwd_classify(ev->m, hg->bw, h, hg->z, nb, ev->d->seq_len, hg->dh);
    return sum;
}

enum hp_status hp_evaluator_grad(struct hp_evaluator *ev, enum hp_metric metric, const struct hp_mask *mask,
                                 enum hp_ablation abl, double *grad, double *atp, double *value, struct hp_error *err)
{
    return hp_evaluator_grad_seq(ev, metric, mask, abl, grad, atp, NULL, value, err);
}

enum hp_status hp_evaluator_grad_seq(struct hp_evaluator *ev, enum hp_metric metric, const struct hp_mask *mask,
                                     enum hp_ablation abl, double *grad, double *atp, double *seq_grad, double *value,
                                     struct hp_error *err)
{
    return hp_evaluator_grad_from(ev, metric, mask, abl, 0, grad, atp, seq_grad, value, err);
}

/* The gate of (layer l, head h) a pass's gates give: 1 where there are none. */
static float gate_at(const float *gate, int H, int l, int h)
{
    return gate ? gate[l * H + h] : 1.0f;
}

/*
 * Where a pass under abl at gate that wants the gates from layer from on starts its forward: the deepest layer j
 * <= from whose rows the prefix holds for gates that agree with gate below j (0: the embeddings, no prefix). The
 * prefix is made on the first pass that wants one (NULL where the set's does not fit HP_GRAD_PREFIX_BYTES).
 */
static int prefix_start(const struct hp_evaluator *ev, struct hp_grad_state *gs, const float *gate,
                        enum hp_ablation abl, int from)
{
    const struct hp_model_info *in = &ev->m->info;
    const int L = in->n_layers, H = in->n_heads;
    if (from == 0 || ev->plain) /* the plain path reuses nothing: a second path for the tests */
        return 0;
    if (!gs->pre_tried) {
        gs->pre_tried = true;
        const size_t n = (size_t)(L - 1) * ev->d->n_seqs * ev->d->seq_len * in->d_model;
        if (n * sizeof(float) <= HP_GRAD_PREFIX_BYTES) {
            gs->pre = malloc(n * sizeof(float));
            gs->pre_gate = malloc((size_t)L * H * sizeof(float));
            if (!gs->pre || !gs->pre_gate) { /* out of memory: whole passes, as when too big */
                free(gs->pre), free(gs->pre_gate);
                gs->pre = NULL, gs->pre_gate = NULL;
            }
        }
        gs->pre_n = 0;
    }
    if (!gs->pre)
        return 0;
    if (gs->pre_abl != abl)
        gs->pre_n = 0;
    int j = 0;
    for (bool same = true; same && j < gs->pre_n && j < from; j += same)
        for (int h = 0; h < H && same; h++)
            same = gs->pre_gate[j * H + h] == gate_at(gate, H, j, h);
    return j;
}

/* The prefix's rows of layer j (1 <= j < n_layers) for the chunk of nb sequences from s0. */
static float *prefix_rows(const struct hp_evaluator *ev, const struct hp_grad_state *gs, int j, int s0)
{
    const size_t row = (size_t)ev->m->info.d_model, set = (size_t)ev->d->n_seqs * ev->d->seq_len * row;
    return gs->pre + (size_t)(j - 1) * set + (size_t)s0 * ev->d->seq_len * row;
}

/* After a pass that started at start below its from made every chunk's rows up to from: the prefix's rows of
 * layers start + 1 .. from are those of gate below them. */
static void prefix_made(struct hp_grad_state *gs, const float *gate, enum hp_ablation abl, int start, int from, int H)
{
    for (int l = start; l < from; l++)
        for (int h = 0; h < H; h++)
            gs->pre_gate[l * H + h] = gate_at(gate, H, l, h);
    gs->pre_n = from;
    gs->pre_abl = abl;
}

/* Whether ev can take metric's gradient at mask from layer from on: HP_OK, else why not (err). */
static enum hp_status check_pass(const struct hp_evaluator *ev, enum hp_metric metric, const struct hp_mask *mask,
                                 int from, struct hp_error *err)
{
    const struct hp_model_info *in = &ev->m->info;
    const struct hp_data *d = ev->d;
    enum hp_metric_deriv deriv;
    enum hp_status st = hp_grad_deriv(hp_metric_row(metric), &deriv, err);
    if (st != HP_OK)
        return st;
    if (!hp_evaluator_has_metric(ev, hp_metric_name(metric)))
        return hp_fail(err, HP_ERR_UNSUPPORTED,
                       ev->has_loss ? "%s: %s is a model with a loss on this data; the gradient of %s is for an "
                                      "encoder without a head (use loss or kl)"
                                    : "%s: %s has no loss on this data (no labels, or an encoder without a head): "
                                      "the gradient of %s needs a causal LM, an MLM head with labels or a "
                                      "classifier; this model's metric is cos",
                       d->path, ev->m->dir, hp_metric_name(metric));
    if (mask && (mask->n_layers != in->n_layers || mask->n_heads != in->n_heads))
        return hp_fail(err, HP_ERR_ARG, "mask is for %d layers x %d heads but the model has %d x %d", mask->n_layers,
                       mask->n_heads, in->n_layers, in->n_heads);
    if (mask && mask->pos >= 0)
        return hp_fail(err, HP_ERR_UNSUPPORTED, "gradients are taken with heads replaced at every position, not at "
                       "position %d alone", mask->pos);
    if (hp_mask_has_edges(mask))
        return hp_fail(err, HP_ERR_UNSUPPORTED, "gradients are taken at the units' gates: the variant patches edges "
                       "(the reverse pass has no per-receiver inputs yet)");
    if (from < 0 || from >= in->n_layers)
        return hp_fail(err, HP_ERR_ARG, "gradients from layer %d: the model's layers are 0 to %d", from,
                       in->n_layers - 1);
    if (in->n_kv_heads < 1 || in->n_heads % in->n_kv_heads)
        return hp_fail(err, HP_ERR_UNSUPPORTED, "%s: %d query heads do not group over %d KV heads", ev->m->dir,
                       in->n_heads, in->n_kv_heads);
    return HP_OK;
}

enum hp_status hp_evaluator_grad_from(struct hp_evaluator *ev, enum hp_metric metric, const struct hp_mask *mask,
                                      enum hp_ablation abl, int from, double *grad, double *atp, double *seq_grad,
                                      double *value, struct hp_error *err)
{
    const struct hp_grad_out out = {.grad = grad, .atp = atp, .seq_grad = seq_grad};
    return hp_evaluator_grad_units(ev, metric, mask, abl, from, &out, value, err);
}

/* Every array of o that is there (NULL: not wanted) zeroed: L layers, HH heads, S sequences. grad is always there. */
static void outputs_zero(const struct hp_grad_out *o, int L, int HH, int S)
{
    double *const one[] = {o->grad, o->atp, o->mlp_grad, o->mlp_atp}, *const seq[] = {o->seq_grad, o->mlp_seq_grad};
    const size_t n_one[] = {(size_t)HH, (size_t)HH, (size_t)L, (size_t)L}, n_seq[] = {(size_t)HH, (size_t)L};
    for (int k = 0; k < 4; k++)
        if (one[k])
            memset(one[k], 0, n_one[k] * sizeof(double));
    for (int k = 0; k < 2; k++)
        if (seq[k])
            memset(seq[k], 0, (size_t)S * n_seq[k] * sizeof(double));
}

/* Whether every number of o's arrays is finite. */
static bool outputs_finite(const struct hp_grad_out *o, int L, int HH, int S)
{
    const double *const arr[] = {o->grad, o->atp, o->mlp_grad, o->mlp_atp, o->seq_grad, o->mlp_seq_grad};
    const size_t n[] = {(size_t)HH, (size_t)HH, (size_t)L, (size_t)L, (size_t)S * HH, (size_t)S * L};
    for (int k = 0; k < 6; k++)
        for (size_t i = 0; arr[k] && i < n[k]; i++)
            if (!isfinite(arr[k][i]))
                return false;
    return true;
}

enum hp_status hp_evaluator_grad_units(struct hp_evaluator *ev, enum hp_metric metric, const struct hp_mask *mask,
                                       enum hp_ablation abl, int from, const struct hp_grad_out *out, double *value,
                                       struct hp_error *err)
{
    double *const grad = out->grad, *const atp = out->atp, *const seq_grad = out->seq_grad;
    const struct hp_model_info *in = &ev->m->info;
    const struct hp_data *d = ev->d;
    struct hp_grad_state *gs = hp_grad_state_get(ev);
    if (!gs)
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    gs->phases = (struct hp_grad_phases){0}; /* a pass that fails leaves none */
    struct hp_grad_phases ph = {0};
    {
        enum hp_status st = check_pass(ev, metric, mask, from, err);
        if (st != HP_OK)
            return st;
    }
    const int64_t n_items = scored_items(ev);
    if (n_items == 0)
        return hp_fail(err, HP_ERR_ARG, "%s: no token is scored (all labels are -100 or padding)", d->path);
    {
        const double t = hp_now();
        enum hp_status st = hp_eval_ablation_ready(ev, abl, hp_mask_has_mlp(mask), err);
        ph.reference += hp_now() - t;
        if (st != HP_OK)
            return st;
    }
    const int T = d->seq_len, B = gs->batch, L = in->n_layers, HH = L * in->n_heads;
    const size_t rows = (size_t)B * T;
    struct hp_fwd *fw = hp_fwd_new(ev->m, T, B);
    struct hp_bwd *bw = hp_bwd_new(ev->m, T, B, gs->keep_bytes);
    float *resid = malloc((size_t)(L + 1) * rows * in->d_model * sizeof(float));
    struct head_grad hg;
    const bool hg_ok = head_grad_new(ev, gs, metric, &hg);
    enum hp_status st = HP_OK;
    if (!fw || !bw || !resid || !hg_ok) {
        st = hp_fail(err, HP_ERR_NOMEM, "out of memory for a gradient workspace of %d x %d tokens", B, T);
        goto done;
    }
    hp_prefault(resid, (size_t)(L + 1) * rows * in->d_model * sizeof(float));
    /* the pass's forward is also an evaluation of mask: its metrics are kept for hp_evaluator_run_many.
     * A variant's KL needs the unmasked model's outputs: from the evaluator's reference of the whole set,
     * else (too big) a variant's metrics are not worth their extra pass and are left to the reuse path */
    hg.fw = fw;
    hg.bw = bw;
    hg.masked = hp_mask_first_changed(mask, L) < L;
    const bool vs_unmasked = against_unmasked(metric);
    if (vs_unmasked || (hg.masked && ev->keep_grad_metrics && !ev->plain)) {
        const double t = hp_now();
        reference_fill(ev, gs, fw, &hg, n_items);
        ph.reference += hp_now() - t;
    }
    const bool have_ref = gs->ref || gs->ref_emb;
    /* the unmasked model's are always kept: they are the bits the reuse path measures (test_grad), so a sweep's
     * baseline is the same whether this pass or its own measured it; a variant's equal its own pass only
     * within float rounding, and are kept only when asked (hp_evaluator_keep_grad_metrics), for
     * hp_evaluator_grad_pass_metrics alone */
    /* (a variant that changes an MLP is not kept: the kept gates are the heads') */
    const bool mlps = hp_mask_has_mlp(mask);
    if (!ev->plain && !mlps && (!hg.masked || (ev->keep_grad_metrics && (vs_unmasked || have_ref))))
        hg.mt = hp_eval_metrics_new(ev); /* NULL (out of memory): the metrics are simply not kept */
    hg.ref = vs_unmasked || (hg.mt && hg.masked);
    outputs_zero(out, L, HH, d->n_seqs);
    const float *gate = mask ? mask->gate : NULL;
    /* the forward starts at the prefix's deepest layer that agrees (at most from); below start, the rows this
     * pass makes up to from replace the prefix's, which holds only what agrees meanwhile. The prefix is of
     * head gates: a pass that changes an MLP neither reads nor writes it */
    const int start = mlps ? 0 : prefix_start(ev, gs, gate, abl, from);
    const bool refill = gs->pre && start < from && !mlps;
    if (refill)
        gs->pre_n = start;
    double sum = 0;
    int64_t sc0 = 0; /* an LM's scored rows before the chunk */
    for (int s0 = 0; s0 < d->n_seqs; s0 += B) {
        const int nb = chunk_len(gs, ev, s0);
        struct hp_fwd_in fi = hp_eval_chunk_in(ev, s0, nb);
        const float *gates_of[1], *mlps_of[1];
        int pos_of[1];
        const struct hp_eval_blocks blocks = {gates_of, mlps_of, pos_of, NULL, NULL}; /* no edges: refused above */
        struct hp_fwd_variants va = hp_eval_chunk_variants(ev, abl, s0, nb, &mask, 1, &blocks);
        struct hp_fwd_taps tp = {.resid = resid, .keep = hp_bwd_keep(bw), .from = start};
        const size_t chunk_rows = (size_t)nb * T * in->d_model; /* a layer's rows of resid for this chunk */
        if (start > 0)
            memcpy(resid + start * chunk_rows, prefix_rows(ev, gs, start, s0), chunk_rows * sizeof(float));
        if (!ev->has_cls && ev->has_loss)
            hg.n_sc = hp_eval_find_scored(ev, s0, nb, hg.sc_row, hg.sc_y, hg.sc_w);
        if (hg.ref) {
            const double t = hp_now();
            reference_chunk(ev, gs, fw, &fi, &hg, s0, nb, sc0);
            ph.reference += hp_now() - t;
        }
        sc0 += hg.n_sc;
        const double t0 = hp_now();
        const float *h = hp_fwd_run(ev->m, fw, &fi, &va, &tp);
        const double t1 = hp_now();
        for (int j = start + 1; refill && j <= from; j++)
            memcpy(prefix_rows(ev, gs, j, s0), resid + j * chunk_rows, chunk_rows * sizeof(float));
        sum += objective_backward(ev, &hg, h, s0, nb, (double)n_items);
        const double t2 = hp_now();
        /* the chunk's sequences' shares go straight to their rows of seq_grad */
        const struct hp_bwd_grads g = {.gate = grad,
                                       .atp = atp,
                                       .gate_seq = seq_grad ? seq_grad + (size_t)s0 * HH : NULL,
                                       .from = from,
                                       .mlp_gate = out->mlp_grad,
                                       .mlp_atp = out->mlp_atp,
                                       .mlp_gate_seq = out->mlp_seq_grad ? out->mlp_seq_grad + (size_t)s0 * L : NULL};
        hp_bwd_run(ev->m, bw, &fi, &va, resid, hg.dh, &g);
        ph.forward += t1 - t0;
        ph.head += t2 - t1;
        ph.reverse += hp_now() - t2;
        if (ev->progress)
            ev->progress(ev->progress_user, s0 + nb, d->n_seqs);
    }
    const double mean = sum / (double)n_items;
    if (!isfinite(mean) || !outputs_finite(out, L, HH, d->n_seqs))
        st = hp_fail(err, HP_ERR_FORMAT,
                     "%s: the %s (%g) or its gradient is not finite on %s (check the weights and config.json); "
                     "nothing is reported",
                     ev->m->dir, hp_metric_row(metric)->grad_what, mean, d->path);
    else if (value)
        *value = mean;
    if (st == HP_OK)
        gs->phases = ph;
    if (refill && st == HP_OK)
        prefix_made(gs, gate, abl, start, from, in->n_heads);
    struct hp_error ignored;
    if (st == HP_OK && hg.mt && hp_eval_metrics_finish(ev, hg.mt, &hg.tot, mask, abl, &ignored) == HP_OK) {
        keep_metrics(ev, hg.mt, mask, abl);
        hg.mt = NULL;
    }
done:
    hp_fwd_free(fw);
    hp_bwd_free(bw);
    free(resid);
    head_grad_free(&hg);
    return st;
}

void hp_evaluator_grad_phases(const struct hp_evaluator *ev, struct hp_grad_phases *out)
{
    *out = ev->gs ? ev->gs->phases : (struct hp_grad_phases){0}; /* no pass yet: none */
}

enum hp_status hp_evaluator_grad_pass_metrics(struct hp_evaluator *ev, const struct hp_mask *mask, enum hp_ablation abl,
                                              struct hp_metrics **out, struct hp_error *err)
{
    *out = NULL;
    const int L = ev->m->info.n_layers, HH = L * ev->m->info.n_heads;
    /* a pass keeps a variant's metrics only beside the unmasked model's reference of the whole set: without it
     * (too big), not a pass more for nothing */
    const struct hp_grad_state *gs = ev->gs; /* NULL: no pass yet, nothing tried */
    const bool can_keep = (!gs || !gs->ref_tried || gs->ref || gs->ref_emb) && !hp_mask_has_mlp(mask);
    if (!hp_eval_kept_matches(ev, mask, abl) && !ev->plain && ev->has_loss && can_keep) {
        double *g = malloc((size_t)HH * sizeof *g);
        if (!g)
            return hp_fail(err, HP_ERR_NOMEM, "out of memory");
        const bool keep = ev->keep_grad_metrics;
        ev->keep_grad_metrics = true;
        enum hp_status st = hp_evaluator_grad(ev, HP_METRIC_LOSS, mask, abl, g, NULL, NULL, err);
        ev->keep_grad_metrics = keep;
        free(g);
        if (st != HP_OK)
            return st;
    }
    if (!hp_eval_kept_matches(ev, mask, abl) || !ev->kept_gate)
        return hp_evaluator_run(ev, mask, abl, out, err); /* not kept, or the unmasked model's: the same bits */
    *out = ev->kept; /* a variant's: handed over, once */
    ev->kept = NULL;
    free(ev->kept_gate);
    ev->kept_gate = NULL;
    return HP_OK;
}
