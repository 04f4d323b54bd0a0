/*
 * reuse.c -- the evaluator's reuse path and its fused LM head.
 *
 * Variants inside chunks: per chunk of sequences, the unmasked model runs
 * once and keeps each layer's input and attention output; a variant starts
 * at its first changed layer, where the changed heads' outputs are replaced
 * and the layer's output projection made again from all its heads' outputs
 * (never the kept layer output minus the changed heads' part: that float
 * subtraction cancels when an ablated head's output is large); variants with the
 * same first changed layer run the rest of the model together as blocks of
 * one pass. The LM head is fused with the metrics: logits are made a
 * vocabulary block at a time and reduced on the fly to each scored row's
 * log-sum-exp, target logit, argmax and its dot product with the unmasked
 * model's probabilities (which gives KL), never held for a whole chunk;
 * from those, each row's facts (metric.h) that the metrics' rows score.
 * Memory is bounded by the chunk: the save, the unmasked probabilities of the
 * chunk's scored rows, and HP_REUSE_ROWS rows of workspace.
 *
 * It runs over the evaluator's chunks (eval_priv.h) and scores sequences in
 * the order the plain path (eval.c) does; the reuse test holds the two
 * equal. Must not: print or exit.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval_priv.h"
#include "metric.h"
#include "util.h"
#include "vmath.h"

#define HP_REUSE_ROWS 2048

/* Running reduction of one scored row over vocabulary blocks. */
struct lmrow {
    double s;  /* sum of exp(z - m) */
    double dp; /* sum of p_unmasked * z */
    float m;   /* running maximum */
    float zt;  /* the target's logit */
    float zw;  /* the wrong answer's logit (task rows with one, else 0) */
    int arg;   /* first index of the maximum */
};

struct hp_reuse {
    struct hp_fwd *fwd;      /* max_blocks blocks of one chunk */
    int max_blocks;
    struct hp_fwd_save save; /* the unmasked pass of chunk saved_s0 */
    float *save_buf;
    int saved_s0;
    int n_sc;                /* scored rows of the chunk (LMs) */
    int *sc_row;             /* (batch * T) their row in the chunk */
    int32_t *sc_y;           /* (batch * T) their target */
    int32_t *sc_w;           /* (batch * T) their wrong answer, -1 where none */
    float *pb;               /* (n_sc, V) the unmasked model's exp(logit - max) */
    double *b_c, *b_p, *b_lse; /* (batch * T) per scored row: sum q z, sum q, lse */
    struct hp_token_facts *b_f; /* (batch * T) per scored row: what is known of it on the unmasked pass */
    float *base_h;           /* (batch * T, d) unmasked final rows (encoders) */
    float *cls_base, *cls_z; /* (batch, n_labels), (max_blocks * batch, n_labels): classifier logits */
    float *hc;               /* (max_blocks * batch * T, d) gathered rows */
    float *lg;               /* (max_blocks * batch * T, hp_eval_vocab_block(V)) one logits block */
    struct lmrow *st;        /* (max_blocks * batch * T) */
};

void hp_eval_reuse_free(struct hp_reuse *ru)
{
    if (!ru)
        return;
    hp_fwd_free(ru->fwd);
    free(ru->save_buf);
    free(ru->sc_row);
    free(ru->sc_y);
    free(ru->sc_w);
    free(ru->pb);
    free(ru->b_c);
    free(ru->b_f);
    free(ru->base_h);
    free(ru->cls_base);
    free(ru->cls_z);
    free(ru->hc);
    free(ru->lg);
    free(ru->st);
    free(ru);
}

/* The state for up to want variant blocks per pass (at most HP_REUSE_ROWS rows' worth): workspaces sized
 * to what is asked, not to the most a pass could take. Destructor: hp_eval_reuse_free. */
static struct hp_reuse *reuse_new(const struct hp_evaluator *ev, int want)
{
    const struct hp_model_info *in = &ev->m->info;
    const size_t R = (size_t)ev->batch * ev->d->seq_len, d = (size_t)in->d_model,
                 qd = (size_t)in->n_heads * in->d_head, L = (size_t)in->n_layers;
    struct hp_reuse *ru = calloc(1, sizeof *ru);
    if (!ru)
        return NULL;
    ru->saved_s0 = -1;
    const int cap = (int)(HP_REUSE_ROWS / R) > 1 ? (int)(HP_REUSE_ROWS / R) : 1;
    ru->max_blocks = want < cap ? (want > 1 ? want : 1) : cap;
    size_t rows = (size_t)ru->max_blocks * R;
    ru->fwd = hp_fwd_new(ev->m, ev->d->seq_len, ru->max_blocks * ev->batch);
    ru->save_buf = malloc(L * R * (d + qd) * sizeof(float));
    ru->hc = malloc(rows * d * sizeof(float));
    if (ev->has_cls) {
        size_t C = (size_t)in->n_labels;
        ru->cls_base = malloc((size_t)ev->batch * C * sizeof(float));
        ru->cls_z = malloc((size_t)ru->max_blocks * ev->batch * C * sizeof(float));
    } else if (ev->has_loss) {
        ru->sc_row = malloc(R * sizeof(int));
        ru->sc_y = malloc(R * sizeof(int32_t));
        ru->sc_w = malloc(R * sizeof(int32_t));
        ru->pb = malloc(R * (size_t)in->n_vocab * sizeof(float));
        ru->b_c = malloc(3 * R * sizeof(double));
        ru->b_f = malloc(R * sizeof *ru->b_f);
        ru->lg = malloc(rows * (size_t)hp_eval_vocab_block(in->n_vocab) * sizeof(float));
        ru->st = malloc(rows * sizeof(struct lmrow));
    } else {
        ru->base_h = malloc(R * d * sizeof(float));
    }
    if (!ru->fwd || !ru->save_buf || !ru->hc ||
        (ev->has_cls    ? !ru->cls_base || !ru->cls_z
         : ev->has_loss ? !ru->sc_row || !ru->sc_y || !ru->sc_w || !ru->pb || !ru->b_c || !ru->b_f || !ru->lg || !ru->st
                        : !ru->base_h)) {
        hp_eval_reuse_free(ru);
        return NULL;
    }
    if (ru->b_c) {
        ru->b_p = ru->b_c + R;
        ru->b_lse = ru->b_c + 2 * R;
    }
    ru->save.x = ru->save_buf; /* save.attn NULL: the resumed layer makes its output again from ctx */
    ru->save.ctx = ru->save_buf + L * R * d;
    return ru;
}

/*
 * The fused LM head over rows hc (n, d): row i is scored row i % n_sc of the
 * chunk. Leaves each row's reduction in ru->st. With keep, the logits are
 * also stored in ru->pb (the unmasked pass); with kl, each row's dot product
 * with ru->pb (by then probabilities) is accumulated.
 */
static void lm_rows(const struct hp_evaluator *ev, struct hp_reuse *ru, int n, bool keep, bool kl)
{
    const struct hp_model *m = ev->m;
    const int V = m->info.n_vocab, n_sc = ru->n_sc;
    const int VB = hp_eval_vocab_block(V);
    for (int v0 = 0; v0 < V; v0 += VB) {
        const int nb = V - v0 < VB ? V - v0 : VB;
        hp_fwd_logits(m, ru->fwd, ru->hc, n, v0, nb, ru->lg, VB);
#pragma omp parallel for schedule(static) if ((size_t)n * nb >= 65536)
        for (int i = 0; i < n; i++) {
            float *z = ru->lg + (size_t)i * VB;
            struct lmrow *r = &ru->st[i];
            const int j = i % n_sc, y = ru->sc_y[j], w = ru->sc_w[j];
            float *pj = ru->pb + (size_t)j * V + v0;
            if (keep)
                memcpy(pj, z, (size_t)nb * sizeof(float));
            const float bm = hp_vmax(z, (size_t)nb);
            if (v0 == 0) {
                r->s = 0;
                r->dp = 0;
                r->m = bm;
                r->arg = (int)hp_vfind(z, (size_t)nb, bm);
            } else if (bm > r->m) {
                /* a strictly larger maximum: rescale the running sum */
                r->s *= exp((double)r->m - (double)bm);
                r->m = bm;
                r->arg = v0 + (int)hp_vfind(z, (size_t)nb, bm);
            }
            if (y >= v0 && y < v0 + nb)
                r->zt = z[y - v0];
            if (v0 == 0)
                r->zw = 0;
            if (w >= v0 && w < v0 + nb)
                r->zw = z[w - v0];
            if (kl)
                r->dp += hp_vdot_d(pj, z, (size_t)nb);
            hp_vexpf(z, z, r->m, (size_t)nb);
            r->s += hp_vsum_d(z, (size_t)nb);
        }
    }
}

/* Scored row j's logit difference from its reduction r (task rows with a wrong answer; else 0). */
static double row_ld(const struct hp_reuse *ru, const struct lmrow *r, int j)
{
    return ru->sc_w[j] >= 0 ? (double)r->zt - r->zw : 0;
}

/* Gather the scored rows of n_blocks blocks of R rows of h into ru->hc. */
static void gather(const struct hp_evaluator *ev, struct hp_reuse *ru, const float *h, int n_blocks, int R)
{
    const size_t d = (size_t)ev->m->info.d_model;
    for (int v = 0; v < n_blocks; v++)
        for (int j = 0; j < ru->n_sc; j++)
            memcpy(ru->hc + ((size_t)v * ru->n_sc + j) * d, h + ((size_t)v * R + ru->sc_row[j]) * d, d * sizeof(float));
}

/* The unmasked pass of the chunk at s0 with its save and reference statistics, unless already held. */
static void reuse_base(struct hp_evaluator *ev, struct hp_reuse *ru, int s0, int nb)
{
    if (ru->saved_s0 == s0)
        return;
    const int T = ev->d->seq_len, R = nb * T, V = ev->m->info.n_vocab, VB = hp_eval_vocab_block(V);
    struct hp_fwd_in fi = hp_eval_chunk_in(ev, s0, nb);
    struct hp_fwd_taps tp = {.save = &ru->save};
    const float *h = hp_fwd_run(ev->m, ru->fwd, &fi, NULL, &tp);
    ru->saved_s0 = s0;
    if (ev->has_cls) {
        hp_fwd_classify(ev->m, ru->fwd, h, nb, T, ru->cls_base);
        return;
    }
    if (!ev->has_loss) {
        memcpy(ru->base_h, h, (size_t)R * ev->m->info.d_model * sizeof(float));
        return;
    }
    ru->n_sc = hp_eval_find_scored(ev, s0, nb, ru->sc_row, ru->sc_y, ru->sc_w);
    if (ru->n_sc == 0)
        return;
    gather(ev, ru, h, 1, R);
    lm_rows(ev, ru, ru->n_sc, true, false);
    /* logits z -> q = exp(z - max), unnormalised probabilities, with sum q z
     * and sum q of the stored floats: KL = (sum q z - sum q z') / sum q + lse' - lse */
#pragma omp parallel for schedule(static) if ((size_t)ru->n_sc * V >= 65536)
    for (int j = 0; j < ru->n_sc; j++) {
        const struct lmrow *r = &ru->st[j];
        float *p = ru->pb + (size_t)j * V, *tmp = ru->lg + (size_t)j * VB;
        double c = 0, sp = 0;
        for (int v0 = 0; v0 < V; v0 += VB) {
            int nbk = V - v0 < VB ? V - v0 : VB;
            hp_vexpf(tmp, p + v0, r->m, (size_t)nbk);
            c += hp_vdot_d(tmp, p + v0, (size_t)nbk);
            sp += hp_vsum_d(tmp, (size_t)nbk);
            memcpy(p + v0, tmp, (size_t)nbk * sizeof(float));
        }
        /* KL's log-sum-exp from the same stored q, so a variant equal to the unmasked model has KL 0; the
         * loss's from the online sum, as a variant's (score_lm) and a gradient pass's (grad.c) are: the
         * unmasked model's loss is then the same bits whichever of them measured it */
        const double lse = r->m + log(sp);
        ru->b_lse[j] = lse;
        ru->b_c[j] = c;
        ru->b_p[j] = sp;
        ru->b_f[j] = (struct hp_token_facts){.loss = (r->m + log(r->s)) - r->zt, .top1 = r->arg == ru->sc_y[j], .kl = 0,
                                             .ld = row_ld(ru, r, j)};
    }
}

/*
 * Add the scored rows of the chunk at s0 (nb sequences) to mt and tot, per
 * sequence in token order as the plain path does: each row's facts (from
 * variant block v of the last lm_rows, or with v < 0 those kept from the
 * unmasked pass, whose KL to itself is 0) scored by the metrics' rows.
 */
static void score_lm(const struct hp_evaluator *ev, const struct hp_reuse *ru, int v, int s0, int nb,
                     struct hp_metrics *mt, struct hp_eval_totals *tot)
{
    const int T = ev->d->seq_len;
    int j = 0;
    for (int b = 0; b < nb; b++) {
        double sum[HP_N_METRICS] = {0};
        int64_t nt = 0;
        for (; j < ru->n_sc && ru->sc_row[j] / T == b; j++, nt++) {
            if (v < 0) {
                hp_metric_add_token(sum, &ru->b_f[j]);
                continue;
            }
            const struct lmrow *r = &ru->st[(size_t)v * ru->n_sc + j];
            const double lse = r->m + log(r->s);
            const struct hp_token_facts f = {.loss = lse - r->zt, .top1 = r->arg == ru->sc_y[j],
                                             .kl = (ru->b_c[j] - r->dp) / ru->b_p[j] + (lse - ru->b_lse[j]),
                                             .ld = row_ld(ru, r, j)};
            hp_metric_add_token(sum, &f);
        }
        hp_eval_record_seq(mt, tot, s0 + b, sum, nt);
    }
}

/* The same for encoders: block v of h (blocks of nb * T rows), or with h NULL the unmasked pass. */
static void score_enc(const struct hp_evaluator *ev, const struct hp_reuse *ru, const float *h, int v, int s0, int nb,
                      struct hp_metrics *mt, struct hp_eval_totals *tot)
{
    const struct hp_data *d = ev->d;
    const int T = d->seq_len, D = ev->m->info.d_model;
    for (int b = 0; b < nb; b++) {
        int s = s0 + b;
        int64_t nt = 0;
        for (int t = 0; t < T; t++)
            nt += !d->attn_mask || d->attn_mask[(size_t)s * T + t];
        mt->seq_tokens[s] = nt;
        mt->seq[HP_METRIC_COS][s] = h ? hp_eval_pooled_cos(d, ev->m->info.pooling, s, ru->base_h + (size_t)b * T * D,
                                                        h + ((size_t)v * nb * T + (size_t)b * T) * D, D)
                                      : hp_eval_self_cos(d, s, ru->base_h + (size_t)b * T * D, D);
        tot->sum[HP_METRIC_COS] += mt->seq[HP_METRIC_COS][s];
        tot->tokens += nt;
    }
}

enum hp_status hp_eval_reuse_run(struct hp_evaluator *ev, const struct hp_mask *const *masks, int n,
                                enum hp_ablation abl, struct hp_metrics **mts, struct hp_eval_totals *tots,
                                struct hp_error *err)
{
    const struct hp_data *d = ev->d;
    const struct hp_model_info *in = &ev->m->info;
    const int L = in->n_layers, T = d->seq_len;
    /* made on first use, and again larger when more variants come at once than it was made for */
    const int cap = (int)(HP_REUSE_ROWS / ((size_t)ev->batch * T)), want = n < cap ? n : cap;
    if (ev->ru && ev->ru->max_blocks < want) {
        hp_eval_reuse_free(ev->ru);
        ev->ru = NULL;
    }
    ev->ru_free = hp_eval_reuse_free;
    if (!ev->ru && !(ev->ru = reuse_new(ev, n)))
        return hp_fail(err, HP_ERR_NOMEM, "out of memory for the workspace of %d-row chunks", ev->batch * T);
    struct hp_reuse *ru = ev->ru;
    int *first = malloc((size_t)n * sizeof(int)), *order = malloc((size_t)n * sizeof(int));
    const float **gates = malloc((size_t)ru->max_blocks * sizeof *gates),
                **mlps = malloc((size_t)ru->max_blocks * sizeof *mlps);
    const struct hp_mask **blk = malloc((size_t)ru->max_blocks * sizeof *blk);
    int *pos = malloc((size_t)ru->max_blocks * sizeof *pos), *n_edges = malloc((size_t)ru->max_blocks * sizeof(int));
    const struct hp_edge **edges = malloc((size_t)ru->max_blocks * sizeof *edges);
    if (!first || !order || !gates || !mlps || !blk || !pos || !n_edges || !edges) {
        free(first), free(order), free(gates), free(mlps), free(blk), free(pos), free(n_edges), free(edges);
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    }
    enum hp_status st = hp_eval_edges_ready(ev, ru->fwd, masks, n, err);
    if (st != HP_OK) {
        free(first), free(order), free(gates), free(mlps), free(blk), free(pos), free(n_edges), free(edges);
        return st;
    }
    /* variants by first changed layer, stable: an insertion sort of indices */
    for (int i = 0; i < n; i++) {
        first[i] = hp_mask_first_changed(masks[i], L);
        int k = i;
        for (; k > 0 && first[order[k - 1]] > first[i]; k--)
            order[k] = order[k - 1];
        order[k] = i;
    }
    for (int s0 = 0; s0 < d->n_seqs; s0 += ev->batch) {
        const int nb = hp_eval_chunk_len(ev, s0);
        reuse_base(ev, ru, s0, nb);
        for (int g = 0, k; g < n; g += k) {
            /* between blocks too: a caller that adapts to the machine (threads) hears from us often */
            if (g > 0 && ev->progress)
                ev->progress(ev->progress_user, s0, d->n_seqs);
            const int l0 = first[order[g]];
            for (k = 0; g + k < n && k < ru->max_blocks && first[order[g + k]] == l0; k++)
                blk[k] = masks[order[g + k]];
            if (l0 == L) {
                /* nothing changed: the unmasked pass's own metrics */
                for (int j = 0; j < k; j++) {
                    int i = order[g + j];
                    if (ev->has_cls)
                        for (int b = 0; b < nb; b++)
                            hp_eval_score_cls(ev, mts[i], &tots[i], s0 + b, ru->cls_base + (size_t)b * in->n_labels,
                                              NULL);
                    else if (ev->has_loss)
                        score_lm(ev, ru, -1, s0, nb, mts[i], &tots[i]);
                    else
                        score_enc(ev, ru, NULL, 0, s0, nb, mts[i], &tots[i]);
                }
                continue;
            }
            struct hp_fwd_in fi = hp_eval_chunk_in(ev, s0, nb);
            const struct hp_eval_blocks b = {gates, mlps, pos, edges, n_edges};
            struct hp_fwd_variants va = hp_eval_chunk_variants(ev, abl, s0, nb, blk, k, &b);
            const float *h = hp_fwd_resume(ev->m, ru->fwd, &fi, &va, NULL, &ru->save, l0);
            if (ev->has_cls) {
                const int C = in->n_labels;
                hp_fwd_classify(ev->m, ru->fwd, h, k * nb, T, ru->cls_z);
                for (int j = 0; j < k; j++)
                    for (int b = 0; b < nb; b++)
                        hp_eval_score_cls(ev, mts[order[g + j]], &tots[order[g + j]], s0 + b,
                                  ru->cls_z + ((size_t)j * nb + b) * C, ru->cls_base + (size_t)b * C);
                continue;
            }
            if (ev->has_loss && ru->n_sc > 0) {
                gather(ev, ru, h, k, nb * T);
                lm_rows(ev, ru, k * ru->n_sc, false, true);
            }
            for (int j = 0; j < k; j++) {
                int i = order[g + j];
                if (ev->has_loss)
                    score_lm(ev, ru, j, s0, nb, mts[i], &tots[i]);
                else
                    score_enc(ev, ru, h, j, s0, nb, mts[i], &tots[i]);
            }
        }
        if (ev->progress)
            ev->progress(ev->progress_user, s0 + nb, d->n_seqs);
    }
    free(first), free(order), free(gates), free(mlps), free(blk), free(pos), free(n_edges), free(edges);
    return HP_OK;
}
