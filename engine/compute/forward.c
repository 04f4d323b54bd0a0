/*
 * forward.c -- the masked-attention forward pass for GPT-2, BERT and Llama.
 *
 * A call runs B sequences of T tokens as N = B*T rows: every projection is
 * one product over all rows, attention runs per sequence and head.
 * Activations live in one workspace sized up front for N rows; nothing is
 * allocated or read from disk during a pass. Products with weights go
 * through hp_mat_gemm (mat.c: 16-bit weights a converted panel at a time),
 * those of activations through hp_gemm, all with strides: per-head slices of
 * Q/K/V, K transposed and slices of the output projection are views, never
 * copies.
 * Invariants: a gate of exactly 1 changes nothing (bit for bit, the same
 * operations run as with no gate); a gate of 0 under zero ablation skips the
 * head's work entirely rather than multiplying it by zero. What another
 * ablation puts in a dead head's place is read through hp_replacement_at.
 * The element-wise operations (norms, activations, rotary, softmax) are in
 * ops.c; a pass reads its arguments in three parts (forward.h) and keeps
 * nothing in the model, which stays read-only.
 */
#include "forward.h"

#include <assert.h>
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdlib.h>
#include <string.h>

#include "blas.h"
#include "ops.h"
#include "util.h"

/* Causal attention's scores and weighted sums are made for bands of this many
 * queries at a time, each against the keys it can see: about half the square's
 * work at long contexts, and products still wide enough for BLIS's kernels. */
#define HP_FWD_ROWS 64

struct hp_fwd {
    int cap_threads; /* threads attention may use: one att buffer each */
    float *x;    /* (N, d_model) residual stream, N = B * T rows */
    float *h;    /* (N, d_model) normalised input of a block */
    float *tmp;  /* (N, d_model) block output */
    float *q;    /* (N, n_heads * d_head) */
    float *k;    /* (N, n_kv_heads * d_head) */
    float *v;    /* (N, n_kv_heads * d_head) */
    float *ctx;  /* (N, n_heads * d_head) per-head attention outputs */
    float *att;  /* (cap_threads, T, T) scores / probabilities of one head of one sequence, per thread */
    float *ff;   /* (N, d_ff) */
    float *ff2;  /* (N, d_ff) Llama gate */
    float *rope; /* (T, rope.dim / 2, 2) cos, sin */
    float *rope_local; /* the same of rope_local, when the model has it (layers with local_rope) */
    float *buf;  /* the one allocation behind all of the above */
    struct hp_mat_buf *mb; /* the panel products with 16-bit weights convert into (mat.h) */
    int T, B;
    struct edge_room *er; /* NULL, or room for passes with edges (hp_fwd_edges_ready) */
};

/* What a pass with edges keeps besides the workspace, for N = T * B rows (the pass's own N within). */
struct edge_room {
    float *ctx;   /* (n_layers, N, n_heads * d_head) every layer's heads' outputs as they joined the stream */
    float *mlp;   /* (n_layers, N, d_model) every layer's MLP output as it joined the stream */
    float *emb;   /* (N, d_model) the stream before layer 0 */
    float *k, *v; /* (N, n_heads * d_head) a receiving head's own keys and values, at its query slot */
    float *delta, *hn; /* (N, d_model) a receiver's change to its input, and its normed input */
    float *diff;  /* (N, d_head) a sender head's replacement less its output */
    /* NULL, or where a norm follows the attention output (Gemma 2 and 3): (n_layers, N, d_model) each layer's
     * attention output before that norm and after it (what joined the stream) */
    float *attn_pre, *attn_post;
    bool *own_k, *own_v; /* (B, n_heads) whether head h of block v reads its own keys, values */
    float *buf;
};


int hp_fwd_out_width(const struct hp_model *m)
{
    return m->classifier.p ? m->info.n_labels : m->lm_head.p ? m->info.n_vocab : m->info.d_model;
}

struct hp_fwd *hp_fwd_new(const struct hp_model *m, int T, int B)
{
    const struct hp_model_info *in = &m->info;
    size_t t = (size_t)T * B, d = (size_t)in->d_model, qd = (size_t)in->n_heads * in->d_head,
           kvd = (size_t)in->n_kv_heads * in->d_head, f = (size_t)in->d_ff;
    int nth = hp_max_threads();
    size_t n_x = t * d, n_q = t * qd, n_kv = t * kvd, n_att = (size_t)nth * T * T, n_ff = t * f,
           n_rope = (size_t)T * in->d_head * (m->rope_local.theta > 0 ? 2 : 1);
    size_t total = 3 * n_x + 2 * n_q + 2 * n_kv + n_att + 2 * n_ff + n_rope;
    struct hp_fwd *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->buf = malloc(total * sizeof(float));
    w->mb = hp_mat_buf_new(m);
    if (!w->buf || !w->mb) {
        hp_fwd_free(w);
        return NULL;
    }
    float *p = w->buf;
    w->x = p, p += n_x;
    w->h = p, p += n_x;
    w->tmp = p, p += n_x;
    w->q = p, p += n_q;
    w->ctx = p, p += n_q;
    w->k = p, p += n_kv;
    w->v = p, p += n_kv;
    w->att = p, p += n_att;
    w->ff = p, p += n_ff;
    w->ff2 = p, p += n_ff;
    w->rope = p;
    w->rope_local = p + (size_t)T * in->d_head;
    w->cap_threads = nth;
    w->T = T, w->B = B;
    if (m->rotary)
        hp_op_rope_table(w->rope, T, &m->rope);
    if (m->rotary && m->rope_local.theta > 0)
        hp_op_rope_table(w->rope_local, T, &m->rope_local);
    return w;
}

void hp_fwd_free(struct hp_fwd *w)
{
    if (!w)
        return;
    free(w->buf);
    hp_mat_buf_free(w->mb);
    if (w->er) {
        free(w->er->buf);
        free(w->er->own_k);
        free(w->er);
    }
    free(w);
}

// --- products -----------------------------------------------------------------

void hp_fwd_linear(struct hp_mat_buf *mb, float *y, const float *x, int N, int k, int n, struct hp_mat w,
                   const float *b)
{
    hp_mat_gemm(mb, N, n, k, 1.0f, x, k, 1, w, 0.0f, y, n, 1);
    hp_op_add_bias(y, N, n, n, b);
}

// --- attention ----------------------------------------------------------------

float hp_fwd_attn_scale(const struct hp_model *m, int l)
{
    if (m->attn_scale > 0)
        return m->attn_scale;
    float scale = 1.0f / sqrtf((float)m->info.d_head);
    if (m->scale_by_layer)
        scale /= (float)(l + 1);
    return scale;
}

int hp_fwd_run_end(const bool *flag, int n, int s)
{
    int e = s + 1;
    while (e < n && flag[e] == flag[s])
        e++;
    return e;
}

/*
 * One call's three arguments as the pass's sections read them: var and tap
 * never NULL here (a caller's NULL becomes the defaults below), n_blocks at
 * least 1.
 */
struct pass {
    const struct hp_fwd_in *in;
    const struct hp_fwd_variants *var;
    const struct hp_fwd_taps *tap;
    int n_blocks;
};

static const struct hp_fwd_variants no_variants; /* one block, nothing ablated, zero ablation */
static const struct hp_fwd_taps no_taps;

static struct pass pass_of(const struct hp_fwd_in *in, const struct hp_fwd_variants *var,
                           const struct hp_fwd_taps *tap)
{
    if (!var)
        var = &no_variants;
    return (struct pass){in, var, tap ? tap : &no_taps, var->n_blocks > 0 ? var->n_blocks : 1};
}

/* Gates of variant block v (NULL = nothing ablated). */
static const float *gate_of(const struct pass *a, int v)
{
    return a->var->gates ? a->var->gates[v] : NULL;
}

// --- edges --------------------------------------------------------------------

bool hp_fwd_edges_ready(const struct hp_model *m, struct hp_fwd *w)
{
    if (w->er)
        return true;
    const struct hp_model_info *in = &m->info;
    const size_t N = (size_t)w->T * w->B, L = (size_t)in->n_layers, d = (size_t)in->d_model,
                 qd = (size_t)in->n_heads * in->d_head;
    struct edge_room *er = calloc(1, sizeof *er);
    if (!er)
        return false;
    bool post = false;
    for (int l = 0; l < in->n_layers; l++)
        post |= m->layers[l].pn1_w != NULL;
    er->buf = malloc((L * N * (qd + d) + 3 * N * d + 2 * N * qd + N * (size_t)in->d_head + (post ? 2 * L * N * d : 0)) *
                     sizeof(float));
    er->own_k = calloc(2 * (size_t)w->B * in->n_heads, sizeof(bool));
    if (!er->buf || !er->own_k) {
        free(er->buf), free(er->own_k), free(er);
        return false;
    }
    float *p = er->buf;
    er->ctx = p, p += L * N * qd;
    er->mlp = p, p += L * N * d;
    er->emb = p, p += N * d;
    er->delta = p, p += N * d;
    er->hn = p, p += N * d;
    er->k = p, p += N * qd;
    er->v = p, p += N * qd;
    er->diff = p, p += N * (size_t)in->d_head;
    if (post)
        er->attn_pre = p, er->attn_post = p + L * N * d;
    er->own_v = er->own_k + (size_t)w->B * in->n_heads;
    w->er = er;
    return true;
}

const char *hp_fwd_edges_refused(const struct hp_model *m)
{
    if (m->post_norm)
        return "its norms follow each residual add (a post-norm encoder, BERT), so no input is a sum of senders";
    if (m->qk_norm_whole)
        return "it normalises every head's queries together (OLMo 2), so one head's query input is not its own";
    return NULL;
}

/* Block v's edges (*n of them; NULL none). */
static const struct hp_edge *edges_of(const struct pass *a, int v, int *n)
{
    *n = a->var->edges && a->var->edges[v] ? a->var->n_edges[v] : 0;
    return *n ? a->var->edges[v] : NULL;
}

static bool same_node(const struct hp_node *x, const struct hp_node *y)
{
    return x->kind == y->kind && x->layer == y->layer && x->head == y->head && x->chan == y->chan;
}

/* The end of the run of edges from i into one receiver. */
static int receiver_end(const struct hp_edge *e, int n, int i)
{
    int j = i + 1;
    while (j < n && same_node(&e[j].to, &e[i].to))
        j++;
    return j;
}

/* MLP gate of variant block v at layer l (1: kept). */
static float mlp_gate_of(const struct pass *a, int v, int l)
{
    const float *g = a->var->mlps ? a->var->mlps[v] : NULL;
    return g ? g[l] : 1.0f;
}

/*
 * delta (Rb, d) = the sum over edges e[0, n) of block v (into one receiver) of the sender's replacement less its
 * output in this pass, as kept in w->er. A sender at gate 0 outputs its replacement already: nothing to add.
 */
static void edge_delta(const struct hp_model *m, struct hp_fwd *w, const struct pass *a, int v,
                       const struct hp_edge *e, int n, float *delta)
{
    const struct hp_model_info *in = &m->info;
    const struct edge_room *er = w->er;
    const int Rb = a->in->T * a->in->n_seqs, d = in->d_model, H = in->n_heads, dh = in->d_head, qd = H * dh;
    const size_t N = (size_t)Rb * a->n_blocks, r0 = (size_t)v * Rb;
    memset(delta, 0, (size_t)Rb * d * sizeof(float));
    for (int i = 0; i < n; i++) {
        const struct hp_node *u = &e[i].from;
        if (u->kind == HP_NODE_EMB) { /* its replacement is zero (the evaluator allows no other) */
            const float *x = er->emb + r0 * d;
            for (size_t j = 0; j < (size_t)Rb * d; j++)
                delta[j] -= x[j];
        } else if (u->kind == HP_NODE_MLP) {
            if (mlp_gate_of(a, v, u->layer) == 0.0f)
                continue;
            const float *o = er->mlp + ((size_t)u->layer * N + r0) * d;
            for (int r = 0; r < Rb; r++) {
                const float *rp = a->var->mlp_rep.buf ? hp_replacement_at(&a->var->mlp_rep, u->layer, 0, 0, (int)r0 + r)
                                                      : NULL;
                for (int i2 = 0; i2 < d; i2++)
                    delta[(size_t)r * d + i2] += (rp ? rp[i2] : 0.0f) - o[(size_t)r * d + i2];
            }
        } else if (u->kind == HP_NODE_HEAD) {
            const struct hp_layer *L = &m->layers[u->layer];
            const float *g = gate_of(a, v);
            if (L->q_slot[u->head] < 0 || (g && g[u->layer * H + u->head] == 0.0f))
                continue;
            const float *c = er->ctx + ((size_t)u->layer * N + r0) * qd + u->head * dh;
            for (int r = 0; r < Rb; r++) {
                const float *rp = hp_replacement_at(&a->var->rep, u->layer, u->head, dh, (int)r0 + r);
                for (int i2 = 0; i2 < dh; i2++)
                    er->diff[(size_t)r * dh + i2] = (rp ? rp[i2] : 0.0f) - c[(size_t)r * qd + i2];
            }
            const struct hp_mat wo = hp_mat_at(L->wo, (ptrdiff_t)L->q_slot[u->head] * dh, 0);
            if (!L->pn1_w) { /* its output joins the stream as it is */
                hp_mat_gemm(w->mb, Rb, d, dh, 1.0f, er->diff, dh, 1, wo, 1.0f, delta, d, 1);
                continue;
            }
            /* a norm after the attention output: the layer's contribution with this head's output changed alone,
             * less the contribution as it was (scratch: er->hn, which edge_input fills only after) */
            const size_t at = ((size_t)u->layer * N + r0) * d;
            float *y = er->hn;
            memcpy(y, er->attn_pre + at, (size_t)Rb * d * sizeof(float));
            hp_mat_gemm(w->mb, Rb, d, dh, 1.0f, er->diff, dh, 1, wo, 1.0f, y, d, 1);
            hp_fwd_norm(m, y, y, Rb, L->pn1_w, NULL);
            const float *was = er->attn_post + at;
            for (size_t j = 0; j < (size_t)Rb * d; j++)
                delta[j] += y[j] - was[j];
        }
    }
}

/* A receiver's input in block v: its norm (wt, b; wt NULL: none) of its stream x (the block's Rb rows) plus the
 * change its edges e[0, n) make, into out (Rb, d). */
static void edge_input(const struct hp_model *m, struct hp_fwd *w, const struct pass *a, int v,
                       const struct hp_edge *e, int n, const float *x, const float *wt, const float *b, float *out)
{
    const int Rb = a->in->T * a->in->n_seqs, d = m->info.d_model;
    float *delta = w->er->delta;
    edge_delta(m, w, a, v, e, n, delta);
    hp_op_add_into(delta, x, (size_t)Rb * d);
    if (wt)
        hp_fwd_norm(m, out, delta, Rb, wt, b);
    else
        memcpy(out, delta, (size_t)Rb * d * sizeof(float));
}

/* Whether some block has an edge into a head of layer l. */
static bool heads_receive(const struct pass *a, int l)
{
    for (int v = 0; v < a->n_blocks; v++) {
        int n;
        const struct hp_edge *e = edges_of(a, v, &n);
        for (int i = 0; i < n; i++)
            if (e[i].to.kind == HP_NODE_HEAD && e[i].to.layer == l)
                return true;
    }
    return false;
}

/*
 * Layer l's receiving heads (live in their block: live[v * H + h]) read their own inputs: a query into qs at the
 * head's place, keys and values into w->er's k and v (own_k, own_v say whose), each from the layer's input norm of
 * w->x plus the change their edges make, projected, normed and rotated as hp_fwd_qkv does the shared ones.
 */
static void edge_heads(const struct hp_model *m, struct hp_fwd *w, const struct pass *a, int l, const bool *live,
                       float *qs, const float *rope)
{
    const struct hp_model_info *in = &m->info;
    const struct hp_layer *L = &m->layers[l];
    struct edge_room *er = w->er;
    const int T = a->in->T, Rb = T * a->in->n_seqs, d = in->d_model, H = in->n_heads, dh = in->d_head,
              qd = H * dh, per_kv = H / in->n_kv_heads;
    memset(er->own_k, 0, 2 * (size_t)w->B * H * sizeof(bool));
    for (int v = 0; v < a->n_blocks; v++) {
        int n;
        const struct hp_edge *e = edges_of(a, v, &n);
        for (int i = 0, j; i < n; i = j) {
            j = receiver_end(e, n, i);
            const struct hp_node *to = &e[i].to;
            if (to->kind != HP_NODE_HEAD || to->layer != l || !live[v * H + to->head])
                continue;
            const int h = to->head, c = to->chan;
            edge_input(m, w, a, v, e + i, j - i, w->x + (size_t)v * Rb * d, L->ln1_w, L->ln1_b, er->hn);
            const size_t ws = (size_t)(c == HP_CHAN_Q ? L->q_slot[h] : L->kv_slot[h / per_kv]) * dh;
            float *base = c == HP_CHAN_Q ? qs : c == HP_CHAN_K ? er->k : er->v, *out = base + (size_t)v * Rb * qd + h * dh;
            const struct hp_mat wt = c == HP_CHAN_Q ? L->wq : c == HP_CHAN_K ? L->wk : L->wv;
            const float *bias = c == HP_CHAN_Q ? L->bq : c == HP_CHAN_K ? L->bk : L->bv;
            hp_mat_gemm(w->mb, Rb, dh, d, 1.0f, er->hn, d, 1, hp_mat_at(wt, 0, (ptrdiff_t)ws), 0.0f, out, qd, 1);
            if (bias)
                hp_op_add_bias(out, Rb, dh, qd, bias + ws);
            if (m->qk_norm && c != HP_CHAN_V)
                hp_op_head_rms_norm(base + (size_t)v * Rb * qd, NULL, Rb, qd, h, h + 1, dh,
                                    c == HP_CHAN_Q ? L->q_norm : L->k_norm, m->norm_eps);
            if (m->rotary && c != HP_CHAN_V)
                hp_op_rope(out, Rb, T, qd, m->rope.dim, rope);
            if (c != HP_CHAN_Q)
                (c == HP_CHAN_K ? er->own_k : er->own_v)[v * H + h] = true;
        }
    }
}

/* Layer l's MLP input in blocks with edges into it: w->h's rows from its norm (wt, b) of w->x plus their change. */
static void edge_mlp_input(const struct hp_model *m, struct hp_fwd *w, const struct pass *a, int l, const float *wt,
                           const float *b)
{
    const int Rb = a->in->T * a->in->n_seqs, d = m->info.d_model;
    for (int v = 0; v < a->n_blocks; v++) {
        int n;
        const struct hp_edge *e = edges_of(a, v, &n);
        for (int i = 0, j; i < n; i = j) {
            j = receiver_end(e, n, i);
            if (e[i].to.kind == HP_NODE_MLP && e[i].to.layer == l)
                edge_input(m, w, a, v, e + i, j - i, w->x + (size_t)v * Rb * d, wt, b,
                           w->h + (size_t)v * Rb * d);
        }
    }
}

/* The final stream w->x in blocks with edges into the logits: plus their change (the final norm follows). */
static void edge_logits(const struct hp_model *m, struct hp_fwd *w, const struct pass *a)
{
    const int Rb = a->in->T * a->in->n_seqs, d = m->info.d_model;
    for (int v = 0; v < a->n_blocks; v++) {
        int n;
        const struct hp_edge *e = edges_of(a, v, &n);
        int i = 0;
        while (i < n && e[i].to.kind != HP_NODE_LOGITS)
            i++;
        if (i == n)
            continue;
        float *x = w->x + (size_t)v * Rb * d;
        edge_input(m, w, a, v, e + i, n - i, x, NULL, NULL, x);
    }
}

/* Keep what a pass with edges reads of its senders: rows (N, width) of layer l (emb: l 0) into dst. */
static void edge_keep(const struct pass *a, float *dst, const float *src, int l, size_t N, size_t width)
{
    if (a->var->edges)
        memcpy(dst + (size_t)l * N * width, src, N * width * sizeof(float));
}

/*
 * Head h's outputs in rows [r0, r0 + n) of ctx (N, qd) when it is not live: its replacement
 * when replaced, else zero (needed only when the output projection reads them).
 */
static void fill_dead(float *out, int qd, int dh, int r0, int n, const struct pass *a, int l, int h, bool replaced)
{
    for (int r = r0; r < r0 + n; r++) {
        float *o = out + (size_t)r * qd + h * dh;
        const float *rep = replaced ? hp_replacement_at(&a->var->rep, l, h, dh, r) : NULL;
        if (rep)
            memcpy(o, rep, (size_t)dh * sizeof(float));
        else
            memset(o, 0, (size_t)dh * sizeof(float));
    }
}

/*
 * The capture tap: head h's outputs out (N rows strided by qd, dh wide) of
 * every real token added, in double, to the tap at the token's position.
 */
static void tap_capture(const struct pass *a, const float *out, int l, int h, int N, int qd, int dh)
{
    const int T = a->in->T, Rb = T * a->in->n_seqs;
    double *cap = a->tap->capture + (size_t)l * T * qd + h * dh;
    for (int r = 0; r < N; r++)
        if (!a->in->attn_mask || a->in->attn_mask[r % Rb])
            for (int i = 0; i < dh; i++)
                cap[(size_t)(r % T) * qd + i] += out[(size_t)r * qd + i];
}

/*
 * The attention block's output w->tmp (NB * Rb, d), projection and bias, from the heads' outputs
 * w->ctx (NB * Rb, n_heads * d_head): one product per run of consecutive heads that contribute to a
 * block (proj[v * n_heads + h]). Blocks that agree on their heads run as one product; where they
 * differ, each block runs its own, so a block's sums are the same bits whichever blocks share its
 * pass (a head left out is not the same as its zero output added: the products' rounding differs).
 * attention() and hp_fwd_resume share it.
 */
static void out_projection(const struct hp_model *m, struct hp_fwd *w, const struct hp_layer *L, const bool *proj,
                           int NB, int Rb)
{
    const int d = m->info.d_model, H = m->info.n_heads, dh = m->info.d_head, qd = H * dh;
    bool same = true;
    for (int v = 1; v < NB && same; v++)
        same = memcmp(proj, proj + (size_t)v * H, (size_t)H * sizeof *proj) == 0;
    const int n_runs = same ? 1 : NB, rows = same ? NB * Rb : Rb;
    for (int v = 0; v < n_runs; v++) {
        const bool *in = proj + (size_t)v * H;
        float *ctx = w->ctx + (size_t)v * rows * qd, *out = w->tmp + (size_t)v * rows * d;
        float beta = 0.0f;
        for (int s = 0, e; s < H; s = e) {
            e = hp_fwd_run_end(in, H, s);
            if (!in[s])
                continue;
            hp_mat_gemm(w->mb, rows, d, (e - s) * dh, 1.0f, ctx + s * dh, qd, 1,
                        hp_mat_at(L->wo, (ptrdiff_t)L->q_slot[s] * dh, 0), beta, out, d, 1);
            beta = 1.0f;
        }
        if (beta == 0.0f)
            memset(out, 0, (size_t)rows * d * sizeof(float));
    }
    hp_op_add_bias(w->tmp, NB * Rb, d, d, L->bo);
}

/* The attention projections of hp_fwd_qkv (forward.h): shared with the reverse pass. */
void hp_fwd_qkv(const struct hp_model *m, struct hp_mat_buf *mb, int l, const float *x, int N, int T, const bool *q_in,
                const bool *kv_in, const bool *q_rope, const bool *kv_rope, const float *rope, float *q, float *k,
                float *v, float *qr, float *kr)
{
    const struct hp_model_info *in = &m->info;
    const struct hp_layer *L = &m->layers[l];
    const int d = in->d_model, H = in->n_heads, KV = in->n_kv_heads, dh = in->d_head, qd = H * dh, kvd = KV * dh;
    for (int s = 0, e; s < H; s = e) {
        e = hp_fwd_run_end(q_in, H, s);
        if (!q_in[s])
            continue;
        const size_t ws = (size_t)L->q_slot[s] * dh;
        hp_mat_gemm(mb, N, (e - s) * dh, d, 1.0f, x, d, 1, hp_mat_at(L->wq, 0, ws), 0.0f, q + s * dh, qd, 1);
        if (L->bq)
            hp_op_add_bias(q + s * dh, N, (e - s) * dh, qd, L->bq + ws);
        if (m->qk_norm)
            hp_op_head_rms_norm(q, qr, N, qd, s, e, dh, L->q_norm, m->norm_eps);
    }
    for (int s = 0, e; s < KV; s = e) {
        e = hp_fwd_run_end(kv_in, KV, s);
        if (!kv_in[s])
            continue;
        const size_t ws = (size_t)L->kv_slot[s] * dh;
        hp_mat_gemm(mb, N, (e - s) * dh, d, 1.0f, x, d, 1, hp_mat_at(L->wk, 0, ws), 0.0f, k + s * dh, kvd, 1);
        hp_mat_gemm(mb, N, (e - s) * dh, d, 1.0f, x, d, 1, hp_mat_at(L->wv, 0, ws), 0.0f, v + s * dh, kvd, 1);
        if (L->bk)
            hp_op_add_bias(k + s * dh, N, (e - s) * dh, kvd, L->bk + ws);
        if (L->bv)
            hp_op_add_bias(v + s * dh, N, (e - s) * dh, kvd, L->bv + ws);
        if (m->qk_norm)
            hp_op_head_rms_norm(k, kr, N, kvd, s, e, dh, L->k_norm, m->norm_eps);
    }
    if (m->qk_norm_whole) { /* one norm over each row of every head's queries, one over the keys' */
        hp_op_head_rms_norm(q, qr, N, qd, 0, 1, qd, L->q_norm, m->norm_eps);
        hp_op_head_rms_norm(k, kr, N, kvd, 0, 1, kvd, L->k_norm, m->norm_eps);
    }
    if (!m->rotary)
        return;
    for (int kv = 0; kv < KV; kv++)
        if (kv_rope[kv])
            hp_op_rope(k + kv * dh, N, T, kvd, m->rope.dim, rope);
    for (int h = 0; h < H; h++)
        if (q_rope[h])
            hp_op_rope(q + h * dh, N, T, qd, m->rope.dim, rope);
}

/*
 * The attention block: reads w->h (N, d), writes the block's output
 * (projection and bias, before the residual add) to w->tmp (N, d) and the
 * heads' outputs to w->ctx. Rows are n_blocks variant blocks of n_seqs
 * sequences, each block with its own gates: a head's projections run when it
 * is live in some block, its scores and weighted sums only in the blocks
 * where it is live.
 */
static void attention(const struct hp_model *m, struct hp_fwd *w, const struct pass *a, int l,
                      const struct hp_fwd_keep *kp)
{
    const struct hp_model_info *in = &m->info;
    const struct hp_layer *L = &m->layers[l];
    const int T = a->in->T, NB = a->n_blocks, S = a->in->n_seqs, Rb = S * T, N = Rb * NB,
              H = in->n_heads, KV = in->n_kv_heads, dh = in->d_head;
    const int qd = H * dh, kvd = KV * dh, per_kv = H / KV;
    const bool replaced = hp_replacement_reads(&a->var->rep); /* a dead head still enters the output projection */
    /* queries, keys and values: where the reverse pass will read them, when it keeps them */
    float *const qs = kp ? kp->q : w->q, *const ks = kp ? kp->k : w->k, *const vs = kp ? kp->v : w->v;

    /* live[v * H + h]: head h computed in block v; any_*: in some block. A
     * head the checkpoint lacks (pruned) is never live and never projected. */
    bool live[NB * H], any_live[H], in_proj[H], kv_live[KV], proj[NB * H];
    for (int h = 0; h < H; h++)
        any_live[h] = in_proj[h] = false;
    for (int v = 0; v < NB; v++) {
        const float *g = gate_of(a, v);
        for (int h = 0; h < H; h++) {
            bool has = L->q_slot[h] >= 0, on = has && (!g || g[l * H + h] != 0.0f);
            live[v * H + h] = on;
            proj[v * H + h] = on || (replaced && has);
            any_live[h] |= on;
            in_proj[h] |= proj[v * H + h];
        }
    }
    for (int kv = 0; kv < KV; kv++) {
        kv_live[kv] = false;
        for (int h = kv * per_kv; h < (kv + 1) * per_kv; h++)
            kv_live[kv] |= any_live[h];
    }
    /* the heads projected: the live ones; every head under a norm over all of them (no head is pruned there) */
    bool q_in[H], kv_in[KV];
    for (int h = 0; h < H; h++)
        q_in[h] = any_live[h] || m->qk_norm_whole;
    for (int kv = 0; kv < KV; kv++)
        kv_in[kv] = kv_live[kv] || m->qk_norm_whole;

    /* projections of live heads only, one GEMM per run of consecutive live heads; rotary on the live ones */
    const float *const rope = L->local_rope ? w->rope_local : w->rope;
    hp_fwd_qkv(m, w->mb, l, w->h, N, T, q_in, kv_in, any_live, kv_live, rope, qs, ks, vs, kp ? kp->qr : NULL,
               kp ? kp->kr : NULL);
    const bool edges = a->var->edges && heads_receive(a, l);
    if (edges) /* receiving heads' own queries, keys and values, over the shared ones */
        edge_heads(m, w, a, l, live, qs, rope);
    const float scale = hp_fwd_attn_scale(m, l), cap = m->info.attn_softcap;
    const int window = L->window;
    for (int h = 0; h < H; h++) {
        if (!any_live[h] && in_proj[h])
            fill_dead(w->ctx, qd, dh, 0, N, a, l, h, true);
        else if (L->q_slot[h] < 0) /* pruned: zero, as kept for resuming */
            fill_dead(w->ctx, qd, dh, 0, N, a, l, h, false);
    }
    /* (head, sequence) pairs side by side, each product on one thread: one
     * pair's products are too small to split well */
    const int n_pairs = H * NB * S;
    /* as many threads as are set now, at most as many as have buffers */
    const int nth = hp_max_threads() < w->cap_threads ? hp_max_threads() : w->cap_threads;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth) if (n_pairs > 1 && nth > 1)
    for (int p = 0; p < n_pairs; p++) {
        const int h = p / (NB * S), b = p % (NB * S), v = b / S, kv = h / per_kv;
        if (!any_live[h])
            continue;
        if (!live[v * H + h]) {
            if (in_proj[h] && b % S == 0)
                fill_dead(w->ctx, qd, dh, v * Rb, Rb, a, l, h, replaced);
            continue;
        }
        const size_t r0 = (size_t)b * T;
        float *att = w->att + (size_t)hp_thread_num() * T * T;
        const uint8_t *km = a->in->attn_mask ? a->in->attn_mask + (size_t)(b % S) * T : NULL;
        /* scores (T, T) = q_h (T, dh) k_kv^T (dh, T), K read transposed through strides; causal: only
         * what queries [i0, i1) can see, keys [k0, i1), a band of HP_FWD_ROWS rows at a time */
        /* a receiving head's own keys and values (edges) sit at its query slot, strided as queries */
        const bool ok = edges && w->er->own_k[v * H + h], ov = edges && w->er->own_v[v * H + h];
        const int kst = ok ? qd : kvd, vst = ov ? qd : kvd;
        const float *qh = qs + r0 * qd + h * dh, *kh = ok ? w->er->k + r0 * qd + h * dh : ks + r0 * kvd + kv * dh,
                    *vh = ov ? w->er->v + r0 * qd + h * dh : vs + r0 * kvd + kv * dh;
        float *oh = w->ctx + r0 * qd + h * dh;
        const int band = in->causal ? HP_FWD_ROWS : T;
        for (int i0 = 0; i0 < T; i0 += band) {
            const int i1 = T - i0 < band ? T : i0 + band, k1 = in->causal ? i1 : T,
                      k0 = window > 0 && i0 - window + 1 > 0 ? i0 - window + 1 : 0;
            hp_gemm1(i1 - i0, k1 - k0, dh, scale, qh + (size_t)i0 * qd, qd, 1, kh + (size_t)k0 * kst, 1, kst, 0.0f,
                     att + (size_t)i0 * T + k0, T, 1);
            for (int i = i0; cap > 0 && i < i1; i++)
                hp_op_softcap(att + (size_t)i * T + k0, (size_t)(k1 - k0), cap);
        }
        hp_op_softmax_rows(att, T, in->causal, window, km); /* writes every entry: 0 where not visible */
        /* out (T, dh) = P (T, T) v_kv (T, dh), over the same bands */
        for (int i0 = 0; i0 < T; i0 += band) {
            const int i1 = T - i0 < band ? T : i0 + band, k1 = in->causal ? i1 : T,
                      k0 = window > 0 && i0 - window + 1 > 0 ? i0 - window + 1 : 0;
            hp_gemm1(i1 - i0, dh, k1 - k0, 1.0f, att + (size_t)i0 * T + k0, T, 1, vh + (size_t)k0 * vst, vst, 1, 0.0f,
                     oh + (size_t)i0 * qd, qd, 1);
        }
        if (a->tap->attn) /* the probabilities, still in this thread's buffer */
            a->tap->attn(a->tap->attn_user, l, h, b, att, T);
    }
    if (kp)
        memcpy(kp->a, w->ctx, (size_t)N * qd * sizeof(float));
    for (int h = 0; h < H; h++) {
        float *out = w->ctx + h * dh;
        if (!any_live[h])
            continue;
        if (a->tap->capture)
            tap_capture(a, out, l, h, N, qd, dh);
        for (int v = 0; v < NB; v++) {
            const float *g = gate_of(a, v);
            float gh = g ? g[l * H + h] : 1.0f;
            if (gh != 1.0f && gh != 0.0f)
                for (int r = v * Rb; r < (v + 1) * Rb; r++)
                    for (int i = 0; i < dh; i++)
                        out[(size_t)r * qd + i] *= gh;
        }
    }
    if (a->var->edges)
        edge_keep(a, w->er->ctx, w->ctx, l, (size_t)N, (size_t)qd);
    out_projection(m, w, L, proj, NB, Rb);
}

// --- MLP ----------------------------------------------------------------------

/* The MLP block: reads w->h (N, d), writes w->tmp (N, d); kp: NULL, or where the projections are kept. */
static void mlp(const struct hp_model *m, struct hp_fwd *w, int T, int l, const struct hp_fwd_keep *kp)
{
    const struct hp_layer *L = &m->layers[l];
    const int d = m->info.d_model, f = m->info.d_ff;
    size_t n = (size_t)T * f;
    /* kept, the projections go where the reverse pass reads them and the activation into w->ff */
    float *const u = kp ? kp->u : w->ff, *const z = kp ? kp->z : w->ff2;
    hp_fwd_linear(w->mb, u, w->h, T, d, f, L->w_up, L->b_up);
    if (L->w_gate.p)
        hp_fwd_linear(w->mb, z, w->h, T, d, f, L->w_gate, L->b_gate);
    const bool gated = L->w_gate.p != NULL;
#pragma omp parallel for schedule(static) if (hp_op_par(n))
    for (int t = 0; t < T; t++) {
        float *row = w->ff + (size_t)t * f;
        if (gated)
            hp_op_act_span(m->act, row, z + (size_t)t * f, u + (size_t)t * f, (size_t)f);
        else
            hp_op_act_span(m->act, row, u + (size_t)t * f, NULL, (size_t)f);
    }
    hp_fwd_linear(w->mb, w->tmp, w->ff, T, f, d, L->w_down, L->b_down);
}

// --- the pass -----------------------------------------------------------------

void hp_fwd_norm(const struct hp_model *m, float *y, const float *x, int N, const float *wt, const float *b)
{
    if (b)
        hp_op_layer_norm(y, x, N, m->info.d_model, wt, b, m->norm_eps);
    else
        hp_op_rms_norm(y, x, N, m->info.d_model, wt, m->norm_eps);
}

/* Layer l's attention: w->x (N, d) in, w->tmp the block's output; kp as attention's. */
static void attention_part(const struct hp_model *m, struct hp_fwd *w, const struct pass *a, int l, int N,
                           const struct hp_fwd_keep *kp)
{
    const struct hp_layer *L = &m->layers[l];
    if (m->post_norm || !L->ln1_w)
        memcpy(w->h, w->x, (size_t)N * m->info.d_model * sizeof(float));
    else
        hp_fwd_norm(m, w->h, w->x, N, L->ln1_w, L->ln1_b);
    attention(m, w, a, l, kp);
}

/* A block's output w->tmp through the norm after it (OLMo 2's), when the layer has one; kept in keep first. */
static void post_block_norm(const struct hp_model *m, struct hp_fwd *w, int N, const float *wt, float *keep)
{
    if (!wt)
        return;
    if (keep)
        memcpy(keep, w->tmp, (size_t)N * m->info.d_model * sizeof(float));
    hp_fwd_norm(m, w->tmp, w->tmp, N, wt, NULL);
}

/*
 * Layer l's MLP block into w->tmp (N, d) from w->h, through its post-block norm pn (NULL: none), under each
 * block's MLP gate: g a, or at 0 its replacement r (struct hp_fwd_variants). Not computed when every block has
 * it at gate 0 under zero ablation (w->tmp is then zero). The save and capture taps see a, before its gate.
 */
static void mlp_block(const struct hp_model *m, struct hp_fwd *w, const struct pass *a, int l, int N,
                      const struct hp_fwd_keep *kp, const float *pn)
{
    const int NB = a->n_blocks, Rb = N / NB, d = m->info.d_model, T = a->in->T;
    const struct hp_replacement *rp = &a->var->mlp_rep;
    assert(!rp->own);
    bool all_dead = !rp->buf, any_changed = false;
    for (int v = 0; v < NB; v++) {
        const float g = mlp_gate_of(a, v, l);
        all_dead &= g == 0.0f;
        any_changed |= g != 1.0f;
    }
    if (all_dead) {
        memset(w->tmp, 0, (size_t)N * d * sizeof(float));
        return;
    }
    mlp(m, w, N, l, kp);
    post_block_norm(m, w, N, pn, kp ? kp->mo : NULL);
    if (a->tap->save && a->tap->save->mlp)
        memcpy(a->tap->save->mlp + (size_t)l * N * d, w->tmp, (size_t)N * d * sizeof(float));
    if (a->tap->capture_mlp) {
        double *cap = a->tap->capture_mlp + (size_t)l * T * d;
        for (int r = 0; r < N; r++)
            if (!a->in->attn_mask || a->in->attn_mask[r % Rb])
                for (int i = 0; i < d; i++)
                    cap[(size_t)(r % T) * d + i] += w->tmp[(size_t)r * d + i];
    }
    for (int v = 0; any_changed && v < NB; v++) {
        float *o = w->tmp + (size_t)v * Rb * d;
        hp_fwd_mlp_gated(rp, l, mlp_gate_of(a, v, l), o, o, v * Rb, Rb, d);
    }
    if (a->var->edges)
        edge_keep(a, w->er->mlp, w->tmp, l, (size_t)N, (size_t)d);
}

void hp_fwd_mlp_gated(const struct hp_replacement *rp, int l, float g, const float *o, float *out, int r0, int n,
                      int d)
{
    for (int j = 0; j < n; j++) {
        const float *x = o + (size_t)j * d, *rr = g == 0.0f && rp->buf ? hp_replacement_at(rp, l, 0, 0, r0 + j) : NULL;
        float *y = out + (size_t)j * d;
        if (g == 0.0f && rr)
            memcpy(y, rr, (size_t)d * sizeof(float));
        else if (g == 0.0f)
            memset(y, 0, (size_t)d * sizeof(float));
        else if (g == 1.0f && y != x)
            memcpy(y, x, (size_t)d * sizeof(float));
        else if (g != 1.0f)
            for (int i = 0; i < d; i++) /* a fractional gate scales the output, as a head's does */
                y[i] = x[i] * g;
    }
}

/* The rest of layer l once w->tmp holds its attention output: residual, MLP, norms; kp as mlp's. */
static void finish_layer(const struct hp_model *m, struct hp_fwd *w, const struct pass *a, int l, int N,
                         const struct hp_fwd_keep *kp)
{
    const struct hp_layer *L = &m->layers[l];
    const size_t n = (size_t)N * m->info.d_model;
    if (m->parallel) { /* x + attn(norm1(x)) + mlp(norm2(x)): the MLP reads the layer's input too */
        hp_fwd_norm(m, w->h, w->x, N, L->ln2_w, L->ln2_b);
        if (a->var->edges)
            edge_mlp_input(m, w, a, l, L->ln2_w, L->ln2_b);
    }
    if (a->var->edges && w->er->attn_pre && L->pn1_w)
        edge_keep(a, w->er->attn_pre, w->tmp, l, (size_t)N, (size_t)m->info.d_model);
    post_block_norm(m, w, N, L->pn1_w, kp ? kp->ao : NULL);
    if (a->var->edges && w->er->attn_post && L->pn1_w)
        edge_keep(a, w->er->attn_post, w->tmp, l, (size_t)N, (size_t)m->info.d_model);
    hp_op_add_into(w->x, w->tmp, n);
    if (kp)
        memcpy(kp->xmid, w->x, n * sizeof(float));
    if (m->parallel) {
        mlp_block(m, w, a, l, N, kp, NULL);
        hp_op_add_into(w->x, w->tmp, n);
    } else if (m->post_norm) {
        hp_op_layer_norm(w->x, w->x, N, m->info.d_model, L->ln1_w, L->ln1_b, m->norm_eps);
        memcpy(w->h, w->x, n * sizeof(float));
        mlp_block(m, w, a, l, N, kp, NULL);
        hp_op_add_into(w->x, w->tmp, n);
        hp_op_layer_norm(w->x, w->x, N, m->info.d_model, L->ln2_w, L->ln2_b, m->norm_eps);
    } else {
        if (L->ln2_w)
            hp_fwd_norm(m, w->h, w->x, N, L->ln2_w, L->ln2_b);
        else
            memcpy(w->h, w->x, n * sizeof(float));
        if (a->var->edges)
            edge_mlp_input(m, w, a, l, L->ln2_w, L->ln2_b);
        mlp_block(m, w, a, l, N, kp, L->pn2_w);
        hp_op_add_into(w->x, w->tmp, n);
    }
}

/*
 * After the last layer: the final norm and, with an LM head, its dense
 * transform (BERT MLM). Returns the rows the LM head reads; writes a->tap->out
 * when given (logits or final hidden states).
 */
static const float *finish(const struct hp_model *m, struct hp_fwd *w, const struct pass *a, int N)
{
    const struct hp_model_info *in = &m->info;
    const int d = in->d_model;
    const size_t n = (size_t)N * d;
    if (a->var->edges)
        edge_logits(m, w, a);
    const float *hfin = w->x;
    if (m->lnf_w) {
        hp_fwd_norm(m, w->h, w->x, N, m->lnf_w, m->lnf_b);
        hfin = w->h;
    }
    if (m->lm_head.p && m->mlm_dense.p) {
        hp_fwd_linear(w->mb, w->tmp, hfin, N, d, d, m->mlm_dense, m->mlm_dense_b);
        for (size_t i = 0; i < n; i++)
            w->tmp[i] = hp_op_act(m->act, w->tmp[i]);
        hp_op_layer_norm(w->tmp, w->tmp, N, d, m->mlm_ln_w, m->mlm_ln_b, m->norm_eps);
        hfin = w->tmp;
    }
    if (!a->tap->out)
        return hfin;
    if (m->classifier.p) {
        hp_fwd_classify(m, w, hfin, N / a->in->T, a->in->T, a->tap->out);
        return hfin;
    }
    if (!m->lm_head.p)
        memcpy(a->tap->out, hfin, n * sizeof(float));
    else
        hp_fwd_logits(m, w, hfin, N, 0, in->n_vocab, a->tap->out, in->n_vocab);
    return hfin;
}

void hp_fwd_classify(const struct hp_model *m, struct hp_fwd *w, const float *h, int n_seqs, int T, float *out)
{
    const int d = m->info.d_model, C = m->info.n_labels;
    float pooled[d];
    for (int b = 0; b < n_seqs; b++) {
        /* the pooler reads the first token ([CLS]) of each sequence */
        hp_mat_gemm(w->mb, 1, d, d, 1.0f, h + (size_t)b * T * d, d, 1, m->pooler, 0.0f, pooled, d, 1);
        for (int i = 0; i < d; i++)
            pooled[i] = tanhf(pooled[i] + m->pooler_b[i]);
        hp_mat_gemm(w->mb, 1, C, d, 1.0f, pooled, d, 1, m->classifier, 0.0f, out + (size_t)b * C, C, 1);
        for (int i = 0; i < C; i++)
            out[(size_t)b * C + i] += m->classifier_b[i];
    }
}

void hp_fwd_logits(const struct hp_model *m, struct hp_fwd *w, const float *h, int N, int v0, int nv, float *out,
                   int ldo)
{
    const int d = m->info.d_model;
    /* logits (N, nv) = h (N, d) E[v0 : v0 + nv]^T: E (V, d) row-major read transposed */
    hp_mat_gemm(w->mb, N, nv, d, 1.0f, h, d, 1, hp_mat_t(hp_mat_at(m->lm_head, v0, 0)), 0.0f, out, ldo, 1);
    hp_op_add_bias(out, N, nv, ldo, m->mlm_bias ? m->mlm_bias + v0 : NULL);
    for (int r = 0; m->info.logit_softcap > 0 && r < N; r++)
        hp_op_softcap(out + (size_t)r * ldo, (size_t)nv, m->info.logit_softcap);
}

const float *hp_fwd_run(const struct hp_model *m, struct hp_fwd *w, const struct hp_fwd_in *fin,
                        const struct hp_fwd_variants *var, const struct hp_fwd_taps *tap)
{
    const struct pass pa = pass_of(fin, var, tap), *a = &pa;
    const struct hp_model_info *in = &m->info;
    const int T = a->in->T, Rb = T * a->in->n_seqs, N = Rb * a->n_blocks, d = in->d_model;
    const size_t qd = (size_t)in->n_heads * in->d_head;

    const int from = a->tap->from;
    float *rs = a->tap->resid;
    assert(from >= 0 && from < in->n_layers && (from == 0 || (rs && a->n_blocks == 1 && !a->tap->save)));
    if (from > 0)
        memcpy(w->x, rs + (size_t)from * N * d, (size_t)N * d * sizeof(float));
    for (int r = 0; from == 0 && r < N; r++) {
        float *x = w->x + (size_t)r * d;
        int rr = r % Rb;
        hp_mat_row(m->wte, a->in->ids[rr], d, x);
        for (int i = 0; m->embed_scale > 0 && i < d; i++)
            x[i] *= m->embed_scale;
        if (m->wpe.p)
            hp_mat_row_add(m->wpe, r % T, d, x);
        if (m->wtt.p)
            hp_mat_row_add(m->wtt, a->in->type_ids ? a->in->type_ids[rr] : 0, d, x);
    }
    if (m->post_norm && from == 0)
        hp_op_layer_norm(w->x, w->x, N, d, m->emb_ln_w, m->emb_ln_b, m->norm_eps);
    assert(!a->var->edges || (w->er && from == 0 && !rs && !a->tap->keep));
    if (a->var->edges)
        edge_keep(a, w->er->emb, w->x, 0, (size_t)N, (size_t)d);

    const struct hp_fwd_save *sv = a->tap->save;
    for (int l = from; l < in->n_layers; l++) {
        const struct hp_fwd_keep *kp = a->tap->keep ? a->tap->keep[l] : NULL;
        if (rs && (l > from || from == 0)) /* from > 0: the caller's rows */
            memcpy(rs + (size_t)l * N * d, w->x, (size_t)N * d * sizeof(float));
        if (sv)
            memcpy(sv->x + (size_t)l * N * d, w->x, (size_t)N * d * sizeof(float));
        attention_part(m, w, a, l, N, kp);
        if (sv) {
            if (sv->attn)
                memcpy(sv->attn + (size_t)l * N * d, w->tmp, (size_t)N * d * sizeof(float));
            memcpy(sv->ctx + (size_t)l * N * qd, w->ctx, (size_t)N * qd * sizeof(float));
        }
        finish_layer(m, w, a, l, N, kp);
    }
    if (rs)
        memcpy(rs + (size_t)in->n_layers * N * d, w->x, (size_t)N * d * sizeof(float));
    return finish(m, w, a, N);
}

/*
 * Layer l0's attention output in a resumed pass (hp_fwd_resume), made again from the heads' outputs saved in base,
 * the kept ones as saved and the changed ones replaced, rather than by subtracting the changed heads' saved
 * contribution from the saved layer output: where an ablated head's contribution dwarfs the rest (massive
 * activations), that float subtraction cancelled, and the ablated model's result depended on the weights of the
 * head it no longer has. A block's heads in the projection are attention()'s: live, or a replacement to add.
 */
static void resume_attention(const struct hp_model *m, struct hp_fwd *w, const struct pass *a,
                             const struct hp_fwd_save *base, int l0)
{
    const struct hp_model_info *in = &m->info;
    const struct hp_layer *L = &m->layers[l0];
    const int Rb = a->in->T * a->in->n_seqs, NB = a->n_blocks, H = in->n_heads, dh = in->d_head, qd = H * dh;
    const bool replaced = hp_replacement_reads(&a->var->rep);
    const size_t cs = (size_t)Rb * qd;
    const float *bc = base->ctx + (size_t)l0 * cs;
    bool proj[NB * H];
    for (int v = 0; v < NB; v++) {
        const float *g = gate_of(a, v);
        for (int h = 0; h < H; h++)
            proj[v * H + h] = L->q_slot[h] >= 0 && (replaced || !g || g[l0 * H + h] != 0.0f);
    }
    for (int v = 0; v < NB; v++) {
        float *ctx = w->ctx + v * cs;
        memcpy(ctx, bc, cs * sizeof(float));
        const float *g = gate_of(a, v);
        for (int h = 0; h < H; h++) {
            const float gh = g ? g[l0 * H + h] : 1.0f;
            if (gh == 1.0f || L->q_slot[h] < 0) /* unchanged, or pruned: saved as zero */
                continue;
            if (gh == 0.0f) { /* block v's rows of the pass: where its replacement is read (hp_replacement_at) */
                fill_dead(w->ctx, qd, dh, v * Rb, Rb, a, l0, h, replaced);
                continue;
            }
            for (int r = 0; r < Rb; r++) /* a fractional gate scales the output, as attention() does */
                for (int i = 0; i < dh; i++)
                    ctx[(size_t)r * qd + h * dh + i] *= gh;
        }
    }
    if (a->var->edges)
        edge_keep(a, w->er->ctx, w->ctx, l0, (size_t)NB * Rb, (size_t)qd);
    out_projection(m, w, L, proj, NB, Rb);
}

const float *hp_fwd_resume(const struct hp_model *m, struct hp_fwd *w, const struct hp_fwd_in *fin,
                           const struct hp_fwd_variants *var, const struct hp_fwd_taps *tap,
                           const struct hp_fwd_save *base, int l0)
{
    const struct pass pa = pass_of(fin, var, tap), *a = &pa;
    const struct hp_model_info *in = &m->info;
    const int Rb = a->in->T * a->in->n_seqs, NB = a->n_blocks, N = Rb * NB, d = in->d_model;
    const size_t xs = (size_t)Rb * d;
    for (int v = 0; v < NB; v++)
        memcpy(w->x + v * xs, base->x + (size_t)l0 * xs, xs * sizeof(float));
    /* edges: every sender they read runs in this pass (l0 is at or below the first: hp_mask_first_changed), the
     * embeddings' from the saved stream; a head receiving at l0 reads its own input, so l0's attention runs */
    assert(!a->var->edges || w->er);
    if (a->var->edges && l0 == 0)
        edge_keep(a, w->er->emb, w->x, 0, (size_t)N, (size_t)d);
    if (a->var->edges && heads_receive(a, l0))
        attention_part(m, w, a, l0, N, NULL);
    else
        resume_attention(m, w, a, base, l0);
    finish_layer(m, w, a, l0, N, NULL);
    for (int l = l0 + 1; l < in->n_layers; l++) {
        attention_part(m, w, a, l, N, NULL);
        finish_layer(m, w, a, l, N, NULL);
    }
    return finish(m, w, a, N);
}

// --- one sequence, for callers outside the engine --------------------------------

/*
 * A workspace per call, freed before returning: the model stays read-only,
 * so threads may share it. The allocation is small beside the pass itself
 * (see headprune.h).
 */
enum hp_status hp_model_forward(struct hp_model *m, const int32_t *ids, const uint8_t *attn_mask,
                                const int32_t *type_ids, int n_tokens, const struct hp_mask *mask, float *out,
                                struct hp_error *err)
{
    const struct hp_model_info *in = &m->info;
    if (n_tokens < 1 || n_tokens > in->n_ctx)
        return hp_fail(err, HP_ERR_ARG, "%d tokens: the model takes 1 to %d", n_tokens, in->n_ctx);
    for (int t = 0; t < n_tokens; t++)
        if (ids[t] < 0 || ids[t] >= in->n_vocab)
            return hp_fail(err, HP_ERR_ARG, "token id %d at position %d is outside the vocabulary (%d tokens)", ids[t], t,
                           in->n_vocab);
    struct hp_fwd *w = hp_fwd_new(m, n_tokens, 1);
    if (!w)
        return hp_fail(err, HP_ERR_NOMEM, "out of memory for a %d-token workspace", n_tokens);
    const float *gate = mask ? mask->gate : NULL, *mlps = mask ? mask->mlp : NULL;
    struct hp_fwd_in fi = {.ids = ids, .attn_mask = attn_mask, .type_ids = type_ids, .T = n_tokens, .n_seqs = 1};
    struct hp_fwd_variants va = {.gates = &gate, .mlps = &mlps}; /* zero ablation: rep.buf NULL */
    struct hp_fwd_taps tp = {.out = out};
    hp_fwd_run(m, w, &fi, &va, &tp);
    hp_fwd_free(w);
    return HP_OK;
}
