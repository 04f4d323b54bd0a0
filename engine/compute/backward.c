/*
 * backward.c -- the reverse pass of forward.c: the gradient of a loss at
 * every head's gate, for GPT-2, BERT and Llama.
 *
 * Sections mirror forward.c's: products, attention, MLP, the pass. The
 * forward keeps the residual stream entering each layer (its resid tap)
 * and, for the last layers that fit in HP_BWD_KEEP_BYTES, what the reverse
 * reads of them (its keep tap: queries, keys, values, head outputs, MLP
 * projections); walking the layers from the last, the pass reads a kept
 * layer's activations, or makes a layer's again from its input with the
 * forward's own operations (ops.c), then sends the gradient back through
 * it. So memory is bounded by the chunk, one layer and that budget, and a
 * layer's attention probabilities are made again per (head, sequence)
 * where they are needed rather than stored.
 * The weights are frozen: every product is a data gradient (dY W^T or
 * P^T dY), none forms a gradient at a weight.
 * A head whose gate is 0 under zero ablation is skipped by the forward but
 * not here: the gradient at its gate needs its output a_h (the gradient at
 * g = 0 is <dL/dctx_h, a_h>). Nothing flows back through such a head (its
 * output is multiplied by 0), so its own reverse is skipped.
 * Must not: allocate during a pass, print, or change the model.
 */
#include "backward.h"

#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdlib.h>
#include <string.h>

#include "blas.h"
#include "ops.h"
#include "util.h"
#include "vmath.h"

struct hp_bwd {
    int cap_t, cap_b, cap_threads;
    /* the layer being reversed's activations (forward.h's shapes): what the forward kept of it, or own */
    struct hp_fwd_keep act;
    struct hp_fwd_keep own; /* one layer's, made again from its input */
    const struct hp_fwd_keep **keep; /* (n_layers): NULL, or where the forward keeps layer l's (kept[..]) */
    struct hp_fwd_keep *kept;        /* (n_layers) views into kbuf, for the last layers that fit */
    float *h1;   /* (N, d_model) attention's input (pre-norm: normalised); BERT: the pre-LN2 sum */
    float *h2;   /* (N, d_model) the MLP's input */
    float *tmp;  /* (N, d_model) a block's output */
    float *dx;   /* (N, d_model) gradient at the residual stream */
    float *dh;   /* (N, d_model) gradient at a block's input */
    float *mo;   /* (N, d_model) the MLP block's output into the residual stream, then its scaled gradient */
    float *ctx;  /* (N, n_heads * d_head) what the output projection reads, then its gradient */
    float *dq;   /* (N, n_heads * d_head) */
    float *dk, *dv; /* (N, n_kv_heads * d_head) */
    float *f;    /* (N, d_ff) the activation, then its gradient */
    float *att;  /* (cap_threads, 2, T, T) probabilities and their gradient, per thread */
    float *rope; /* (T, rope.dim / 2, 2) */
    float *rope_local; /* the same of rope_local, when the model has it */
    float *buf;
    float *kbuf;
    struct hp_mat_buf *mb; /* the panel products with 16-bit weights convert into (mat.h) */
};


/*
 * One layer's activations for N rows: with base, a's fields pointed at their
 * places from base on; returns the floats they take (so NULL just measures).
 */
static size_t acts_at(struct hp_fwd_keep *a, float *base, size_t N, const struct hp_model *m)
{
    const struct hp_model_info *in = &m->info;
    const bool gated = m->layers[0].w_gate.p != NULL, qk = m->qk_norm || m->qk_norm_whole,
               post = m->layers[0].pn1_w != NULL;
    const size_t qd = (size_t)in->n_heads * in->d_head, kvd = (size_t)in->n_kv_heads * in->d_head,
                 f = (size_t)in->d_ff, d = (size_t)in->d_model;
    const size_t n[11] = {N * qd, N * qd, N * kvd, N * kvd, N * d, N * f, gated ? N * f : 0,
                          qk ? N * qd : 0, qk ? N * kvd : 0, post ? N * d : 0, post ? N * d : 0};
    float **field[11] = {&a->q, &a->a, &a->k, &a->v, &a->xmid, &a->u, &a->z, &a->qr, &a->kr, &a->ao, &a->mo};
    size_t off = 0;
    for (int i = 0; i < 11; i++) {
        if (base)
            *field[i] = n[i] ? base + off : NULL;
        off += n[i];
    }
    return off;
}

size_t hp_bwd_layer_bytes(const struct hp_model *m, int T, int B)
{
    struct hp_fwd_keep k;
    return acts_at(&k, NULL, (size_t)T * B, m) * sizeof(float);
}

struct hp_bwd *hp_bwd_new(const struct hp_model *m, int T, int B, size_t keep_bytes)
{
    const struct hp_model_info *in = &m->info;
    size_t t = (size_t)T * B, d = (size_t)in->d_model, qd = (size_t)in->n_heads * in->d_head,
           kvd = (size_t)in->n_kv_heads * in->d_head, f = (size_t)in->d_ff;
    int nth = hp_max_threads();
    size_t n_x = t * d, n_q = t * qd, n_kv = t * kvd, n_att = (size_t)nth * 2 * T * T, n_ff = t * f,
           n_rope = (size_t)T * in->d_head * (m->rope_local.theta > 0 ? 2 : 1);
    const size_t n_act = hp_bwd_layer_bytes(m, T, B) / sizeof(float); /* one layer's */
    size_t total = n_act + 6 * n_x + 2 * n_q + 2 * n_kv + n_ff + n_att + n_rope;
    struct hp_bwd *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->keep = calloc((size_t)in->n_layers, sizeof *w->keep);
    w->kept = calloc((size_t)in->n_layers, sizeof *w->kept);
    w->buf = malloc(total * sizeof(float));
    w->mb = hp_mat_buf_new(m);
    if (!w->keep || !w->kept || !w->buf || !w->mb) {
        hp_bwd_free(w);
        return NULL;
    }
    float *p = w->buf + acts_at(&w->own, w->buf, t, m);
    w->h1 = p, p += n_x;
    w->h2 = p, p += n_x;
    w->tmp = p, p += n_x;
    w->dx = p, p += n_x;
    w->dh = p, p += n_x;
    w->mo = p, p += n_x;
    w->ctx = p, p += n_q;
    w->dq = p, p += n_q;
    w->dk = p, p += n_kv;
    w->dv = p, p += n_kv;
    w->f = p, p += n_ff;
    w->att = p, p += n_att;
    w->rope = p;
    w->rope_local = p + (size_t)T * in->d_head;
    w->cap_t = T;
    w->cap_b = B;
    w->cap_threads = nth;
    if (m->rotary)
        hp_op_rope_table(w->rope, T, &m->rope);
    if (m->rotary && m->rope_local.theta > 0)
        hp_op_rope_table(w->rope_local, T, &m->rope_local);
    /* the last layers' activations, as many as keep_bytes holds: the reverse pass visits them first, and
     * the forward writes them instead of a scratch it would overwrite. Without the room, or the memory,
     * the other layers are made again from their input (the same numbers, one more forward's work) */
    size_t n_keep = keep_bytes / (n_act * sizeof(float));
    if (n_keep > (size_t)in->n_layers)
        n_keep = (size_t)in->n_layers;
    while (n_keep > 0 && !(w->kbuf = malloc(n_keep * n_act * sizeof(float))))
        n_keep /= 2;
    if (w->kbuf)
        hp_prefault(w->kbuf, n_keep * n_act * sizeof(float));
    p = w->kbuf;
    for (int l = in->n_layers - (int)n_keep; l < in->n_layers; l++) {
        p += acts_at(&w->kept[l], p, t, m);
        w->keep[l] = &w->kept[l];
    }
    return w;
}

void hp_bwd_free(struct hp_bwd *w)
{
    if (!w)
        return;
    free(w->buf);
    free(w->kbuf);
    hp_mat_buf_free(w->mb);
    free(w->keep);
    free(w->kept);
    free(w);
}

const struct hp_fwd_keep *const *hp_bwd_keep(const struct hp_bwd *w)
{
    return w->keep;
}

// --- products -----------------------------------------------------------------

/* dx (T, k) = dy (T, n) W^T (n, k) (+ dx with accumulate): W read transposed through its strides */
static void linear_backward(struct hp_mat_buf *mb, float *dx, const float *dy, int T, int k, int n, struct hp_mat w,
                            bool accumulate)
{
    hp_mat_gemm(mb, T, k, n, 1.0f, dy, n, 1, hp_mat_t(w), accumulate ? 1.0f : 0.0f, dx, k, 1);
}

// --- attention ----------------------------------------------------------------

/* What the attention sections share about layer l under the pass's gates. */
struct heads {
    bool *has;             /* (n_heads): in the checkpoint */
    bool *live;            /* (n_heads): gate not 0 (gradient flows back through the head) */
    bool *kv_has, *kv_live; /* (n_kv_heads): some query head of the group has / is live */
};

struct pass {
    const struct hp_fwd_in *in;
    const struct hp_fwd_variants *var;
    const float *gate; /* NULL or (n_layers, n_heads) */
    bool replaced;     /* a head at 0 outputs its replacement (var->rep), not zero */
    const float *mlp;  /* NULL or (n_layers): the MLP blocks' gates */
};

static float mlp_gate_at(const struct pass *a, int l)
{
    return a->mlp ? a->mlp[l] : 1.0f;
}

static float gate_at(const struct pass *a, int l, int h, int H)
{
    return a->gate ? a->gate[l * H + h] : 1.0f;
}

/* Head h's replacement at row r, the forward's rule (hp_replacement_at): a view, or zero (NULL). */
static const float *replacement_at(const struct pass *a, int l, int h, int dh, int r)
{
    return a->replaced ? hp_replacement_at(&a->var->rep, l, h, dh, r) : NULL;
}

/* Scores (T, T) of query head h over KV head kv for the sequence at rows r0.., soft-capped when the model caps. */
static void scores(const struct hp_model *m, const struct hp_bwd *w, const struct pass *a, float *att, size_t r0,
                   int h, int kv, float scale)
{
    const int T = a->in->T, qd = m->info.n_heads * m->info.d_head, kvd = m->info.n_kv_heads * m->info.d_head,
              dh = m->info.d_head;
    hp_gemm1(T, T, dh, scale, w->act.q + r0 * qd + h * dh, qd, 1, w->act.k + r0 * kvd + kv * dh, 1, kvd, 0.0f, att, T, 1);
    if (m->info.attn_softcap > 0)
        hp_op_softcap(att, (size_t)T * T, m->info.attn_softcap);
}

/* The probabilities (T, T) of query head h of layer l over KV head kv for the sequence at rows r0... */
static void probs(const struct hp_model *m, const struct hp_bwd *w, const struct pass *a, float *att, size_t r0,
                  int l, int h, int kv, float scale, const uint8_t *km)
{
    scores(m, w, a, att, r0, h, kv, scale);
    hp_op_softmax_rows(att, a->in->T, m->info.causal, m->layers[l].window, km);
}

/*
 * The heads want (n_heads) again, as the forward ran them, from the attention block's input x
 * (N, d): their queries and, for the KV heads kv_want (n_kv_heads), keys and values, into
 * w->act; their outputs before their gates into w->act.a.
 */
static void heads_again(const struct hp_model *m, struct hp_bwd *w, const struct pass *a, int l, const bool *want,
                        const bool *kv_want, const float *x)
{
    const struct hp_model_info *in = &m->info;
    const struct hp_layer *L = &m->layers[l];
    const int T = a->in->T, S = a->in->n_seqs, N = S * T, H = in->n_heads, KV = in->n_kv_heads,
              dh = in->d_head, qd = H * dh, kvd = KV * dh, per_kv = H / KV;
    /* the heads projected: those wanted, or every head under a norm over all of them (none is pruned there) */
    bool q_in[H], kv_in[KV];
    for (int h = 0; h < H; h++)
        q_in[h] = want[h] || m->qk_norm_whole;
    for (int kv = 0; kv < KV; kv++)
        kv_in[kv] = kv_want[kv] || m->qk_norm_whole;
    /* every head projected again, kept ones too (they were overwritten), rotary on each */
    hp_fwd_qkv(m, w->mb, l, x, N, T, q_in, kv_in, q_in, kv_in, L->local_rope ? w->rope_local : w->rope, w->act.q,
               w->act.k, w->act.v, w->act.qr, w->act.kr);
    const float scale = hp_fwd_attn_scale(m, l);
    const int n_pairs = H * S;
    const int nth = hp_max_threads() < w->cap_threads ? hp_max_threads() : w->cap_threads;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth) if (n_pairs > 1 && nth > 1)
    for (int p = 0; p < n_pairs; p++) {
        const int h = p / S, b = p % S;
        if (!want[h])
            continue;
        const size_t r0 = (size_t)b * T;
        float *att = w->att + (size_t)hp_thread_num() * 2 * T * T;
        probs(m, w, a, att, r0, l, h, h / per_kv, scale, a->in->attn_mask ? a->in->attn_mask + r0 : NULL);
        hp_gemm1(T, dh, T, 1.0f, att, T, 1, w->act.v + r0 * kvd + (h / per_kv) * dh, kvd, 1, 0.0f,
                 w->act.a + r0 * qd + h * dh, qd, 1);
    }
}

/*
 * The attention block again, as the forward ran it, from its input x (N, d): every head the
 * checkpoint has, whatever its gate (heads_again); what the projection reads into w->ctx; the
 * block's output (projection and bias) into w->tmp.
 */
static void attention_again(const struct hp_model *m, struct hp_bwd *w, const struct pass *a, int l,
                            const struct heads *hs, const float *x)
{
    const struct hp_model_info *in = &m->info;
    const struct hp_layer *L = &m->layers[l];
    const int N = a->in->n_seqs * a->in->T, d = in->d_model, H = in->n_heads, dh = in->d_head, qd = H * dh;
    heads_again(m, w, a, l, hs->has, hs->kv_has, x);
    /* what the projection reads: g a, or the replacement of a head at 0 */
    for (int h = 0; h < H; h++) {
        if (!hs->has[h])
            continue;
        const float g = gate_at(a, l, h, H);
        for (int r = 0; r < N; r++) {
            float *c = w->ctx + (size_t)r * qd + h * dh;
            const float *ar = w->act.a + (size_t)r * qd + h * dh, *mu = replacement_at(a, l, h, dh, r);
            for (int i = 0; i < dh; i++)
                c[i] = g == 1.0f ? ar[i] : g != 0.0f ? g * ar[i] : mu ? mu[i] : 0.0f;
        }
    }
    float beta = 0.0f;
    for (int s = 0, e; s < H; s = e) {
        e = hp_fwd_run_end(hs->has, H, s);
        if (!hs->has[s])
            continue;
        hp_mat_gemm(w->mb, N, d, (e - s) * dh, 1.0f, w->ctx + s * dh, qd, 1,
                    hp_mat_at(L->wo, (ptrdiff_t)L->q_slot[s] * dh, 0), beta, w->tmp, d, 1);
        beta = 1.0f;
    }
    if (beta == 0.0f)
        memset(w->tmp, 0, (size_t)N * d * sizeof(float));
    hp_op_add_bias(w->tmp, N, d, d, L->bo);
}

/*
 * The attention block's reverse: from dy = w->dx, the gradient at its output, the gates' and the
 * estimates' sums into g, and with to_input the gradient at its input into w->dh (N, d).
 */
static void attention_backward(const struct hp_model *m, struct hp_bwd *w, const struct pass *a, int l,
                               const struct heads *hs, const float *dy, const struct hp_bwd_grads *gr,
                               bool to_input)
{
    const struct hp_model_info *in = &m->info;
    const struct hp_layer *L = &m->layers[l];
    const int T = a->in->T, S = a->in->n_seqs, N = S * T, d = in->d_model, H = in->n_heads, KV = in->n_kv_heads,
              dh = in->d_head, qd = H * dh, kvd = KV * dh, per_kv = H / KV;
    /* dctx (N, qd) = dy (N, d) Wo^T, over the heads the checkpoint has, into w->ctx */
    for (int s = 0, e; s < H; s = e) {
        e = hp_fwd_run_end(hs->has, H, s);
        if (!hs->has[s])
            continue;
        const struct hp_mat wo_t = hp_mat_t(hp_mat_at(L->wo, (ptrdiff_t)L->q_slot[s] * dh, 0));
        hp_mat_gemm(w->mb, N, (e - s) * dh, d, 1.0f, dy, d, 1, wo_t, 0.0f, w->ctx + s * dh, qd, 1);
    }
    /* the gates' gradients and the estimates, then dL/da = g dctx for the heads gradient flows through */
    for (int h = 0; h < H; h++) {
        if (!hs->has[h])
            continue;
        const float g = gate_at(a, l, h, H);
        double sg = 0, sa = 0, ss = 0; /* ss: sg's share of the row's sequence, flushed at its last row */
        for (int r = 0; r < N; r++) {
            const float *dc = w->ctx + (size_t)r * qd + h * dh, *ar = w->act.a + (size_t)r * qd + h * dh,
                        *mu = replacement_at(a, l, h, dh, r);
            /* the gate multiplies a, or at 0 chooses between a and its replacement: <dc, a - rep> there */
            double rg = hp_vdot_d(dc, ar, (size_t)dh);
            if (g == 0.0f && mu)
                rg -= hp_vdot_d(dc, mu, (size_t)dh);
            else if (g != 0.0f) /* the estimate: <dc, rep - g a> */
                sa += (mu ? hp_vdot_d(dc, mu, (size_t)dh) : 0.0) - (double)g * rg;
            sg += rg;
            ss += rg;
            if (gr->gate_seq && r % T == T - 1) {
                gr->gate_seq[(size_t)(r / T) * in->n_layers * H + l * H + h] += ss;
                ss = 0;
            }
        }
        gr->gate[l * H + h] += sg;
        if (gr->atp)
            gr->atp[l * H + h] += sa;
        if (hs->live[h] && g != 1.0f)
            for (int r = 0; r < N; r++)
                for (int i = 0; i < dh; i++)
                    w->ctx[(size_t)r * qd + h * dh + i] *= g;
    }
    if (!to_input)
        return;
    /* per (KV head, sequence): the query heads sharing it, one after another, since they add into its dk, dv */
    const float scale = hp_fwd_attn_scale(m, l);
    const int n_pairs = KV * S;
    const int nth = hp_max_threads() < w->cap_threads ? hp_max_threads() : w->cap_threads;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth) if (n_pairs > 1 && nth > 1)
    for (int p = 0; p < n_pairs; p++) {
        const int kv = p / S, b = p % S;
        if (!hs->kv_live[kv])
            continue;
        const size_t r0 = (size_t)b * T;
        float *att = w->att + (size_t)hp_thread_num() * 2 * T * T, *datt = att + (size_t)T * T;
        const uint8_t *km = a->in->attn_mask ? a->in->attn_mask + r0 : NULL;
        float *dk = w->dk + r0 * kvd + kv * dh, *dv = w->dv + r0 * kvd + kv * dh;
        const float *k = w->act.k + r0 * kvd + kv * dh, *v = w->act.v + r0 * kvd + kv * dh;
        float beta = 0.0f;
        for (int h = kv * per_kv; h < (kv + 1) * per_kv; h++) {
            if (!hs->live[h])
                continue;
            const float *da = w->ctx + r0 * qd + h * dh, *q = w->act.q + r0 * qd + h * dh;
            probs(m, w, a, att, r0, l, h, kv, scale, km);
            /* dP (T, T) = dA (T, dh) v^T; dv += P^T dA */
            hp_gemm1(T, T, dh, 1.0f, da, qd, 1, v, 1, kvd, 0.0f, datt, T, 1);
            hp_gemm1(T, dh, T, 1.0f, att, 1, T, da, qd, 1, beta, dv, kvd, 1);
            hp_op_softmax_rows_backward(datt, att, T, in->causal, L->window, km);
            if (m->info.attn_softcap > 0) { /* through the cap: the capped scores again, where P was */
                scores(m, w, a, att, r0, h, kv, scale);
                hp_op_softcap_backward(datt, att, (size_t)T * T, m->info.attn_softcap);
            }
            /* the scores were scale q k^T: dq = scale dS k, dk += scale dS^T q */
            hp_gemm1(T, dh, T, scale, datt, T, 1, k, kvd, 1, 0.0f, w->dq + r0 * qd + h * dh, qd, 1);
            hp_gemm1(T, dh, T, scale, datt, 1, T, q, qd, 1, beta, dk, kvd, 1);
            beta = 1.0f;
        }
    }
    if (m->rotary) {
        const float *rope = L->local_rope ? w->rope_local : w->rope;
        for (int kv = 0; kv < KV; kv++)
            if (hs->kv_live[kv])
                hp_op_rope_backward(w->dk + kv * dh, N, T, kvd, m->rope.dim, rope);
        for (int h = 0; h < H; h++)
            if (hs->live[h])
                hp_op_rope_backward(w->dq + h * dh, N, T, qd, m->rope.dim, rope);
    }
    /* under a norm over every head the gradient reaches the dead heads' projections too (through the norm,
     * with nothing of their own): theirs are 0 before it */
    bool q_to[H], kv_to[KV];
    for (int h = 0; h < H; h++)
        q_to[h] = m->qk_norm_whole ? hs->has[h] : hs->live[h];
    for (int kv = 0; kv < KV; kv++)
        kv_to[kv] = m->qk_norm_whole ? hs->kv_has[kv] : hs->kv_live[kv];
    if (m->qk_norm_whole) {
        for (int r = 0; r < N; r++) {
            for (int h = 0; h < H; h++)
                if (!hs->live[h])
                    memset(w->dq + (size_t)r * qd + h * dh, 0, (size_t)dh * sizeof(float));
            for (int kv = 0; kv < KV; kv++)
                if (!hs->kv_live[kv]) {
                    memset(w->dk + (size_t)r * kvd + kv * dh, 0, (size_t)dh * sizeof(float));
                    memset(w->dv + (size_t)r * kvd + kv * dh, 0, (size_t)dh * sizeof(float));
                }
        }
        hp_op_head_rms_norm_backward(w->dq, w->act.qr, N, qd, 0, 1, qd, L->q_norm, m->norm_eps);
        hp_op_head_rms_norm_backward(w->dk, w->act.kr, N, kvd, 0, 1, kvd, L->k_norm, m->norm_eps);
    }
    if (m->qk_norm) { /* through the heads' norms, to the projections' outputs */
        for (int s = 0, e; s < H; s = e) {
            e = hp_fwd_run_end(hs->live, H, s);
            if (hs->live[s])
                hp_op_head_rms_norm_backward(w->dq, w->act.qr, N, qd, s, e, dh, L->q_norm, m->norm_eps);
        }
        for (int s = 0, e; s < KV; s = e) {
            e = hp_fwd_run_end(hs->kv_live, KV, s);
            if (hs->kv_live[s])
                hp_op_head_rms_norm_backward(w->dk, w->act.kr, N, kvd, s, e, dh, L->k_norm, m->norm_eps);
        }
    }
    /* dh (N, d) = dq Wq^T + dk Wk^T + dv Wv^T over the runs the gradient reaches */
    float beta = 0.0f;
    for (int s = 0, e; s < H; s = e) {
        e = hp_fwd_run_end(q_to, H, s);
        if (!q_to[s])
            continue;
        const size_t ws = (size_t)L->q_slot[s] * dh;
        hp_mat_gemm(w->mb, N, d, (e - s) * dh, 1.0f, w->dq + s * dh, qd, 1, hp_mat_t(hp_mat_at(L->wq, 0, ws)), beta,
                    w->dh, d, 1);
        beta = 1.0f;
    }
    for (int s = 0, e; s < KV; s = e) {
        e = hp_fwd_run_end(kv_to, KV, s);
        if (!kv_to[s])
            continue;
        const size_t ws = (size_t)L->kv_slot[s] * dh;
        hp_mat_gemm(w->mb, N, d, (e - s) * dh, 1.0f, w->dk + s * dh, kvd, 1, hp_mat_t(hp_mat_at(L->wk, 0, ws)), 1.0f,
                    w->dh, d, 1);
        hp_mat_gemm(w->mb, N, d, (e - s) * dh, 1.0f, w->dv + s * dh, kvd, 1, hp_mat_t(hp_mat_at(L->wv, 0, ws)), 1.0f,
                    w->dh, d, 1);
    }
    if (beta == 0.0f)
        memset(w->dh, 0, (size_t)N * d * sizeof(float));
}

// --- MLP ----------------------------------------------------------------------

/* The MLP block again up to its activation, from its input x (N, d): w->act.u, w->act.z (Llama's gate projection). */
static void mlp_again(const struct hp_model *m, struct hp_bwd *w, const float *x, int N, int l)
{
    const struct hp_layer *L = &m->layers[l];
    const int d = m->info.d_model, f = m->info.d_ff;
    hp_fwd_linear(w->mb, w->act.u, x, N, d, f, L->w_up, L->b_up);
    if (L->w_gate.p)
        hp_fwd_linear(w->mb, w->act.z, x, N, d, f, L->w_gate, L->b_gate);
}

/* The MLP block's reverse: dy (N, d), the gradient at its output, to w->dh (N, d), the gradient at its input. */
static void mlp_backward(const struct hp_model *m, struct hp_bwd *w, const float *dy, int N, int l)
{
    const struct hp_layer *L = &m->layers[l];
    const int d = m->info.d_model, f = m->info.d_ff;
    const bool gated = L->w_gate.p != NULL;
    linear_backward(w->mb, w->f, dy, N, f, d, L->w_down, false);
    /* act(z) u (gated): du = df act(z), dz = df u act'(z); else du = df act'(u); in place */
#pragma omp parallel for schedule(static) if (hp_op_par((size_t)N * f))
    for (int t = 0; t < N; t++) {
        const size_t o = (size_t)t * f;
        if (gated)
            hp_op_act_span_backward(m->act, w->act.z + o, w->act.u + o, w->f + o, w->act.z + o, w->act.u + o,
                                    (size_t)f);
        else
            hp_op_act_span_backward(m->act, w->act.u + o, NULL, w->f + o, w->act.u + o, NULL, (size_t)f);
    }
    linear_backward(w->mb, w->dh, w->act.u, N, d, f, L->w_up, false);
    if (gated)
        linear_backward(w->mb, w->dh, w->act.z, N, d, f, L->w_gate, true);
}

// --- the pass -----------------------------------------------------------------

/* dx += the gradient at x of norm(x) given dy */
static void norm_backward(const struct hp_model *m, float *dx, const float *dy, const float *x, int N,
                          const float *wt, const float *b)
{
    if (b)
        hp_op_layer_norm_backward(dx, dy, x, N, m->info.d_model, wt, m->norm_eps);
    else
        hp_op_rms_norm_backward(dx, dy, x, N, m->info.d_model, wt, m->norm_eps);
}

static void heads_of(const struct hp_model *m, const struct pass *a, int l, struct heads *hs)
{
    const struct hp_layer *L = &m->layers[l];
    const int H = m->info.n_heads, KV = m->info.n_kv_heads, per_kv = H / KV;
    for (int kv = 0; kv < KV; kv++)
        hs->kv_has[kv] = hs->kv_live[kv] = false;
    for (int h = 0; h < H; h++) {
        hs->has[h] = L->q_slot[h] >= 0;
        hs->live[h] = hs->has[h] && gate_at(a, l, h, H) != 0.0f;
        hs->kv_has[h / per_kv] |= hs->has[h];
        hs->kv_live[h / per_kv] |= hs->live[h];
    }
}

/*
 * The part of layer l's attention the forward skipped, when it kept the
 * rest: the heads at gate 0 (their outputs give their gates' gradients)
 * and the KV heads only they read, from the block's input x (N, d).
 */
static void dead_heads_again(const struct hp_model *m, struct hp_bwd *w, const struct pass *a, int l,
                             const struct heads *hs, const float *x)
{
    const int H = m->info.n_heads, KV = m->info.n_kv_heads, per_kv = H / KV;
    bool want[H], kv_want[KV], any = false;
    for (int kv = 0; kv < KV; kv++)
        kv_want[kv] = false;
    for (int h = 0; h < H; h++) {
        want[h] = hs->has[h] && !hs->live[h];
        kv_want[h / per_kv] |= want[h] && !hs->kv_live[h / per_kv];
        any |= want[h];
    }
    if (any)
        heads_again(m, w, a, l, want, kv_want, x);
}

/* The MLP's output, from its projections (mlp_again's) in w->act, into out (N, d); w->f holds the activation. */
static void mlp_out(const struct hp_model *m, struct hp_bwd *w, int N, int l, float *out)
{
    const struct hp_layer *L = &m->layers[l];
    const size_t nf = (size_t)N * m->info.d_ff;
    if (L->w_gate.p)
        hp_op_act_span(m->act, w->f, w->act.z, w->act.u, nf);
    else
        hp_op_act_span(m->act, w->f, w->act.u, NULL, nf);
    hp_fwd_linear(w->mb, out, w->f, N, m->info.d_ff, m->info.d_model, L->w_down, L->b_down);
}

// --- the MLP block's gate ----------------------------------------------------------

/* Whether the pass wants the MLP gates' gradients. */
static bool wants_mlp(const struct hp_bwd_grads *gr)
{
    return gr->mlp_gate || gr->mlp_atp || gr->mlp_gate_seq;
}

/* Layer l's MLP replacement at row r (NULL: zero), the forward's rule. */
static const float *mlp_rep_at(const struct pass *a, int l, int r)
{
    return a->var && a->var->mlp_rep.buf ? hp_replacement_at(&a->var->mlp_rep, l, 0, 0, r) : NULL;
}

/* What joins the residual stream from layer l's MLP output o (N, d) under its gate, into dst: the forward's rule. */
static void mlp_mixed(const struct pass *a, int l, const float *o, float *dst, int N, int d)
{
    static const struct hp_replacement none;
    hp_fwd_mlp_gated(a->var ? &a->var->mlp_rep : &none, l, mlp_gate_at(a, l), o, dst, 0, N, d);
}

/* Layer l's MLP gate's share of gr from dy (N, d), the gradient where its gated output joins the stream, and o
 * (N, d), its output before the gate (backward.h's struct hp_bwd_grads). */
static void mlp_gate_grads(const struct hp_model *m, const struct pass *a, int l, const float *dy, const float *o,
                           const struct hp_bwd_grads *gr)
{
    const int T = a->in->T, N = T * a->in->n_seqs, d = m->info.d_model, L = m->info.n_layers;
    const float g = mlp_gate_at(a, l);
    double sum = 0, atp = 0;
    for (int r = 0; r < N; r++) {
        const float *y = dy + (size_t)r * d, *x = o + (size_t)r * d, *rr = mlp_rep_at(a, l, r);
        double dg = 0, da = 0;
        for (int i = 0; i < d; i++) { /* at 0 the path r + g (o - r) back to it, else g o's */
            const float ri = rr ? rr[i] : 0.0f, ctx = g == 1.0f ? x[i] : g == 0.0f ? ri : x[i] * g;
            dg += (double)y[i] * ((double)x[i] - (g == 0.0f ? (double)ri : 0.0));
            da += (double)y[i] * ((double)ri - (double)ctx);
        }
        sum += dg;
        atp += da;
        if (gr->mlp_gate_seq)
            gr->mlp_gate_seq[(size_t)(r / T) * L + l] += dg;
    }
    if (gr->mlp_gate)
        gr->mlp_gate[l] += sum;
    if (gr->mlp_atp)
        gr->mlp_atp[l] += atp;
}

/* dy (N, d), the gradient at what joins the stream, as the MLP's own share: g dy (into w->mo), dy at g = 1. */
static const float *mlp_share(struct hp_bwd *w, const float *dy, size_t n, float g)
{
    if (g == 1.0f)
        return dy;
    for (size_t i = 0; i < n; i++)
        w->mo[i] = g * dy[i];
    return w->mo;
}

/* The gradient at a block's output given w->dx, the gradient after the norm that follows it (wt; its input y):
 * w->dx itself without one, else that norm's reverse, in w->tmp. */
static const float *post_backward(const struct hp_model *m, struct hp_bwd *w, int N, const float *wt, const float *y)
{
    if (!wt)
        return w->dx;
    memset(w->tmp, 0, (size_t)N * m->info.d_model * sizeof(float));
    hp_op_rms_norm_backward(w->tmp, w->dx, y, N, m->info.d_model, wt, m->norm_eps);
    return w->tmp;
}

/*
 * A parallel layer's reverse (GPT-NeoX): out = x + attn(norm1(x)) + mlp(norm2(x)), so both blocks take
 * the gradient at the output, and the gradient at x gathers the residual's, the MLP's through norm2 and
 * attention's through norm1.
 */
static void parallel_backward(const struct hp_model *m, struct hp_bwd *w, const struct pass *a, int l, const float *x,
                              const struct heads *hs, const struct hp_bwd_grads *gr)
{
    const struct hp_layer *L = &m->layers[l];
    const int N = a->in->T * a->in->n_seqs;
    const size_t n = (size_t)N * m->info.d_model;
    hp_fwd_norm(m, w->h1, x, N, L->ln1_w, L->ln1_b);
    const float g = mlp_gate_at(a, l);
    if (w->keep[l]) {
        dead_heads_again(m, w, a, l, hs, w->h1);
    } else {
        attention_again(m, w, a, l, hs, w->h1);
        hp_fwd_norm(m, w->h2, x, N, L->ln2_w, L->ln2_b);
        mlp_again(m, w, w->h2, N, l);
    }
    if (w->keep[l] && g == 0.0f) { /* the forward may have skipped an MLP at 0: its output, for its gate */
        hp_fwd_norm(m, w->h2, x, N, L->ln2_w, L->ln2_b);
        mlp_again(m, w, w->h2, N, l);
    }
    if (wants_mlp(gr)) {
        mlp_out(m, w, N, l, w->mo);
        mlp_gate_grads(m, a, l, w->dx, w->mo, gr);
    }
    if (g != 0.0f) { /* an MLP at 0 passes nothing back */
        mlp_backward(m, w, mlp_share(w, w->dx, n, g), N, l);
        /* the MLP's share of the gradient at x, in h2 (its input is no longer read) */
        memset(w->h2, 0, n * sizeof(float));
        norm_backward(m, w->h2, w->dh, x, N, L->ln2_w, L->ln2_b);
    }
    attention_backward(m, w, a, l, hs, w->dx, gr, l > 0);
    if (l > 0) {
        if (g != 0.0f)
            hp_op_add_into(w->dx, w->h2, n);
        norm_backward(m, w->dx, w->dh, x, N, L->ln1_w, L->ln1_b);
    }
}

/*
 * Layer l's reverse: w->dx holds the gradient at the layer's output and
 * becomes the gradient at its input x (N, d), the forward's resid tap
 * (except below layer 0's gates, where no gradient is asked for). The
 * layer's activations are the forward's where it kept them (w->keep[l]),
 * else made again here from x.
 */
static void layer_backward(const struct hp_model *m, struct hp_bwd *w, const struct pass *a, int l, const float *x,
                           const struct hp_bwd_grads *gr)
{
    const struct hp_layer *L = &m->layers[l];
    const int N = a->in->T * a->in->n_seqs, d = m->info.d_model;
    const size_t n = (size_t)N * d;
    bool has[m->info.n_heads], live[m->info.n_heads], kv_has[m->info.n_kv_heads], kv_live[m->info.n_kv_heads];
    struct heads hs = {has, live, kv_has, kv_live};
    heads_of(m, a, l, &hs);
    const struct hp_fwd_keep *kept = w->keep[l];
    w->act = kept ? *kept : w->own;
    if (m->post_norm) {
        /* post-norm: xmid = x + attn(x), h2 = LN1(xmid), h1 = h2 + mlp(h2), out = LN2(h1) */
        if (kept) {
            dead_heads_again(m, w, a, l, &hs, x);
        } else {
            attention_again(m, w, a, l, &hs, x);
            memcpy(w->act.xmid, x, n * sizeof(float));
            hp_op_add_into(w->act.xmid, w->tmp, n);
        }
        hp_op_layer_norm(w->h2, w->act.xmid, N, d, L->ln1_w, L->ln1_b, m->norm_eps);
        const float g = mlp_gate_at(a, l);
        if (!kept || g == 0.0f) /* an MLP at 0 the forward may have skipped: its output, for its gate */
            mlp_again(m, w, w->h2, N, l);
        mlp_out(m, w, N, l, w->mo);
        mlp_mixed(a, l, w->mo, w->h1, N, d); /* h1 = h2 + what joined, as the forward summed it */
        hp_op_add_into(w->h1, w->h2, n);
        /* back: through LN2, the MLP and its residual, LN1, attention and its residual */
        memset(w->tmp, 0, n * sizeof(float));
        hp_op_layer_norm_backward(w->tmp, w->dx, w->h1, N, d, L->ln2_w, m->norm_eps);
        if (wants_mlp(gr))
            mlp_gate_grads(m, a, l, w->tmp, w->mo, gr);
        if (g != 0.0f) {
            mlp_backward(m, w, mlp_share(w, w->tmp, n, g), N, l);
            hp_op_add_into(w->tmp, w->dh, n);
        }
        memset(w->dx, 0, n * sizeof(float));
        hp_op_layer_norm_backward(w->dx, w->tmp, w->act.xmid, N, d, L->ln1_w, m->norm_eps);
        attention_backward(m, w, a, l, &hs, w->dx, gr, l > 0);
        if (l > 0)
            hp_op_add_into(w->dx, w->dh, n);
        return;
    }
    if (m->parallel) {
        parallel_backward(m, w, a, l, x, &hs, gr);
        return;
    }
    /* pre-norm: xmid = x + post1(attn(norm1(x))), out = xmid + post2(mlp(norm2(xmid))), where a layer
     * without norm1 and norm2 reads x and xmid themselves and one without post1 and post2 adds the blocks'
     * outputs as they are (OLMo 2 has the posts and not the pres) */
    const float *h1 = x;
    if (L->ln1_w) {
        hp_fwd_norm(m, w->h1, x, N, L->ln1_w, L->ln1_b);
        h1 = w->h1;
    }
    if (kept) {
        dead_heads_again(m, w, a, l, &hs, h1);
    } else {
        attention_again(m, w, a, l, &hs, h1);
        if (L->pn1_w) {
            memcpy(w->act.ao, w->tmp, n * sizeof(float));
            hp_fwd_norm(m, w->tmp, w->tmp, N, L->pn1_w, NULL);
        }
        memcpy(w->act.xmid, x, n * sizeof(float));
        hp_op_add_into(w->act.xmid, w->tmp, n);
        const float *h2 = w->act.xmid;
        if (L->ln2_w) {
            hp_fwd_norm(m, w->h2, w->act.xmid, N, L->ln2_w, L->ln2_b);
            h2 = w->h2;
        }
        mlp_again(m, w, h2, N, l);
        if (L->pn2_w) /* the MLP's output, which its norm's reverse reads */
            mlp_out(m, w, N, l, w->act.mo);
    }
    const float g = mlp_gate_at(a, l);
    if (kept && g == 0.0f) { /* the forward may have skipped an MLP at 0: its output, for its gate */
        const float *h2 = w->act.xmid;
        if (L->ln2_w) {
            hp_fwd_norm(m, w->h2, w->act.xmid, N, L->ln2_w, L->ln2_b);
            h2 = w->h2;
        }
        mlp_again(m, w, h2, N, l);
    }
    if (wants_mlp(gr)) { /* its output into the stream: through its post-block norm, when it has one */
        if (L->pn2_w) { /* its output before the norm: the forward's, or made above, unless it was skipped */
            if (kept && g == 0.0f)
                mlp_out(m, w, N, l, w->act.mo);
            hp_fwd_norm(m, w->mo, w->act.mo, N, L->pn2_w, NULL);
        } else {
            mlp_out(m, w, N, l, w->mo);
        }
        mlp_gate_grads(m, a, l, w->dx, w->mo, gr);
    }
    if (g != 0.0f) { /* an MLP at 0 passes nothing back */
        mlp_backward(m, w, mlp_share(w, post_backward(m, w, N, L->pn2_w, w->act.mo), n, g), N, l);
        if (L->ln2_w)
            norm_backward(m, w->dx, w->dh, w->act.xmid, N, L->ln2_w, L->ln2_b);
        else
            hp_op_add_into(w->dx, w->dh, n);
    }
    attention_backward(m, w, a, l, &hs, post_backward(m, w, N, L->pn1_w, w->act.ao), gr, l > 0);
    if (l > 0 && L->ln1_w)
        norm_backward(m, w->dx, w->dh, x, N, L->ln1_w, L->ln1_b);
    else if (l > 0)
        hp_op_add_into(w->dx, w->dh, n);
}

void hp_bwd_classify(const struct hp_model *m, struct hp_bwd *w, const float *h, const float *dz, int n_seqs, int T,
                     float *dh)
{
    const int d = m->info.d_model, C = m->info.n_labels;
    float pooled[d], dp[d];
    memset(dh, 0, (size_t)n_seqs * T * d * sizeof(float));
    for (int b = 0; b < n_seqs; b++) {
        const float *hb = h + (size_t)b * T * d;
        hp_mat_gemm(w->mb, 1, d, d, 1.0f, hb, d, 1, m->pooler, 0.0f, pooled, d, 1);
        for (int i = 0; i < d; i++)
            pooled[i] = tanhf(pooled[i] + m->pooler_b[i]);
        /* dpooled = dz C^T, then through tanh, then P^T */
        hp_mat_gemm(w->mb, 1, d, C, 1.0f, dz + (size_t)b * C, C, 1, hp_mat_t(m->classifier), 0.0f, dp, d, 1);
        for (int i = 0; i < d; i++)
            dp[i] *= 1.0f - pooled[i] * pooled[i];
        hp_mat_gemm(w->mb, 1, d, d, 1.0f, dp, d, 1, hp_mat_t(m->pooler), 0.0f, dh + (size_t)b * T * d, d, 1);
    }
}

void hp_bwd_logits(const struct hp_model *m, struct hp_bwd *w, const float *dz, int N, int v0, int nv, int ldz,
                   float *dh)
{
    const int d = m->info.d_model;
    /* dh (N, d) += dz (N, nv) E[v0 : v0 + nv] (nv, d), E row-major as it is stored */
    hp_mat_gemm(w->mb, N, d, nv, 1.0f, dz, ldz, 1, hp_mat_at(m->lm_head, v0, 0), 1.0f, dh, d, 1);
}

/*
 * The reverse of the forward's finish: from dhead, the gradient at the rows
 * the head read, to w->dx, the gradient at the residual stream after the
 * last layer (xf, the resid tap's last block).
 */
static void finish_backward(const struct hp_model *m, struct hp_bwd *w, const struct pass *a, const float *xf,
                            const float *dhead)
{
    const struct hp_model_info *in = &m->info;
    const int N = a->in->T * a->in->n_seqs, d = in->d_model;
    const size_t n = (size_t)N * d;
    memcpy(w->dh, dhead, n * sizeof(float));
    if (m->lm_head.p && m->mlm_dense.p) {
        /* the head read LN(act(hfin Wd + b)), hfin the final norm's rows (or xf): t1 in own.xmid (no layer's yet), act(t1) in h2 */
        const float *hfin = xf;
        if (m->lnf_w) {
            hp_fwd_norm(m, w->h1, xf, N, m->lnf_w, m->lnf_b);
            hfin = w->h1;
        }
        hp_fwd_linear(w->mb, w->own.xmid, hfin, N, d, d, m->mlm_dense, m->mlm_dense_b);
        for (size_t i = 0; i < n; i++)
            w->h2[i] = hp_op_act(m->act, w->own.xmid[i]);
        memset(w->tmp, 0, n * sizeof(float));
        hp_op_layer_norm_backward(w->tmp, w->dh, w->h2, N, d, m->mlm_ln_w, m->norm_eps);
        for (size_t i = 0; i < n; i++)
            w->tmp[i] = (float)(w->tmp[i] * hp_op_act_grad(m->act, w->own.xmid[i]));
        linear_backward(w->mb, w->dh, w->tmp, N, d, d, m->mlm_dense, false);
    }
    if (m->lnf_w) {
        memset(w->dx, 0, n * sizeof(float));
        norm_backward(m, w->dx, w->dh, xf, N, m->lnf_w, m->lnf_b);
    } else {
        memcpy(w->dx, w->dh, n * sizeof(float));
    }
}

void hp_bwd_run(const struct hp_model *m, struct hp_bwd *w, const struct hp_fwd_in *in,
                const struct hp_fwd_variants *var, const float *resid, const float *dhead,
                const struct hp_bwd_grads *g)
{
    const struct hp_model_info *mi = &m->info;
    const int N = in->T * in->n_seqs, d = mi->d_model;
    const struct pass pa = {
        .in = in,
        .var = var,
        .gate = var && var->gates ? var->gates[0] : NULL,
        .replaced = var && hp_replacement_reads(&var->rep),
        .mlp = var && var->mlps ? var->mlps[0] : NULL,
    };
    finish_backward(m, w, &pa, resid + (size_t)mi->n_layers * N * d, dhead);
    for (int l = mi->n_layers - 1; l >= g->from; l--)
        layer_backward(m, w, &pa, l, resid + (size_t)l * N * d, g);
}
