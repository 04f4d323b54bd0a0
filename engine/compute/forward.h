/*
 * forward.h -- the masked-attention forward pass (engine/compute/forward.c).
 *
 * One call runs sequences of T tokens through the model with a gate per
 * (layer, query head), or several variant blocks of the same sequences,
 * each with its own gates. A head whose gate is 0 costs nothing under zero
 * ablation: its Q slice, scores, softmax and weighted sum are skipped, and so
 * are its rows of the output projection; a KV head is computed only if one of
 * its query heads is live. Under another ablation the head's output is its
 * replacement (struct hp_replacement: a mean, say) and still skips
 * everything but the output projection.
 */
#ifndef HP_FORWARD_H
#define HP_FORWARD_H

#include "model.h"

struct hp_fwd; /* workspace for sequences of up to T tokens */

/* Workspace for B sequences of T tokens. Destructor: hp_fwd_free. NULL on OOM. */
struct hp_fwd *hp_fwd_new(const struct hp_model *m, int T, int B);
void hp_fwd_free(struct hp_fwd *w);

/* Room in w for a pass with edges (struct hp_fwd_variants): every layer's senders' outputs and the receivers'
 * own keys and values, (n_layers + 2) (N, d_model + n_heads * d_head) floats for N = T * B rows, made once;
 * false when out of memory. */
bool hp_fwd_edges_ready(const struct hp_model *m, struct hp_fwd *w);

/* Whether the forward patches edges in model m: NULL, or why not (a static sentence naming the feature). */
const char *hp_fwd_edges_refused(const struct hp_model *m);

/* Width of the forward output: n_labels for a classifier (one row per
 * sequence), n_vocab with an LM head, else d_model. */
int hp_fwd_out_width(const struct hp_model *m);

/*
 * What a pass keeps for later resumption, per layer l, over its N rows:
 * x (n_layers, N, d_model), the residual stream entering layer l; ctx
 * (n_layers, N, n_heads * d_head), its heads' outputs; attn NULL or
 * (n_layers, N, d_model), layer l's attention output (projection and bias,
 * before the residual add), which hp_fwd_resume does not read (it makes the
 * output again from ctx) and only diagnostics keep; mlp NULL or (n_layers,
 * N, d_model), layer l's MLP block's output into the residual stream (after
 * its post-block norm, before its gate), what an ablated MLP's replacements
 * are made of.
 */
struct hp_fwd_save {
    float *x, *attn, *ctx, *mlp;
};

/*
 * What the reverse pass (backward.c) reads of a layer, kept by the forward so
 * that it need not make them again; each row-major over the pass's N rows.
 * Only what the forward computes is written: a head whose gate is 0 has no
 * query or output here, nor a KV head none of whose query heads is live.
 */
struct hp_fwd_keep {
    float *q;     /* (N, n_heads * d_head) queries (rotated for Llama) */
    float *k, *v; /* (N, n_kv_heads * d_head) keys (rotated) and values */
    float *a;     /* (N, n_heads * d_head) the heads' outputs before their gates */
    float *xmid;  /* (N, d_model) the residual stream after attention (BERT: before its norm) */
    float *u, *z; /* (N, d_ff) the MLP's up and (gated MLPs) gate projections, before the activation */
    float *qr, *kr; /* qk_norm, qk_norm_whole: q and k before their norms (NULL otherwise), q's and k's shapes */
    float *ao, *mo; /* post-block norms: (N, d_model) the attention and MLP outputs before their norms (else NULL) */
};

/*
 * A pass's arguments come in three parts, so that what a new kind of pass
 * needs (a reverse pass, trained gates, attention-probability taps) is added
 * to the part it belongs to, not beside them:
 *   in:       the tokens and their masks (the same for every variant block);
 *   variants: what runs differently (gates, and what an ablated head outputs);
 *   taps:     what the pass hands back or keeps besides its result.
 */

/* The sequences: n_seqs of T tokens. */
struct hp_fwd_in {
    const int32_t *ids;       /* (n_seqs, T) */
    const uint8_t *attn_mask; /* NULL or (n_seqs, T); 0 = padding (never attended to) */
    const int32_t *type_ids;  /* NULL or (n_seqs, T); BERT token types */
    int T;
    int n_seqs;
};

/* Sequences [s, s + nb) of a data set, as a pass's input. */
static inline struct hp_fwd_in hp_fwd_in_rows(const struct hp_data *d, int s, int nb)
{
    const size_t off = (size_t)s * d->seq_len;
    return (struct hp_fwd_in){
        .ids = d->ids + off,
        .attn_mask = d->attn_mask ? d->attn_mask + off : NULL,
        .type_ids = d->type_ids ? d->type_ids + off : NULL,
        .T = d->seq_len,
        .n_seqs = nb,
    };
}

/*
 * What an ablated head's output is, made by the ablation's row (ablation.h) and read by every
 * pass through hp_replacement_at: at layer l, row r of the pass, head h's d_head values at
 * buf + l * layer_stride + (r % row_period) * row_stride + h * d_head, out of rows (.., n_heads * d_head).
 * buf NULL: zero, and a dead head then costs nothing (not even its rows of the output projection).
 * row_stride 0: the same at every row (a mean over all tokens); row_period T: by position in the
 * sequence; a pass's n_seqs * T: by row of one variant block (another input's pass of the same chunk).
 */
struct hp_replacement {
    const float *buf;
    ptrdiff_t layer_stride, row_stride;
    int row_period;
    /*
     * Where (a variant's one position: a patching study's positions: each): own NULL (every position), or
     * pos (a variant block's: pos[r / block_rows]) says where: -1 every position; else only rows at position
     * pos (r % T) read buf, and every other row keeps the head's own output in the unmasked pass over the
     * same input, at own + l * own_layer_stride + (r % own_row_period) * own_row_stride + h * d_head. Exact
     * for heads of one layer, whose inputs the patch leaves as they were (struct hp_ablation_state's own).
     */
    const float *own;
    ptrdiff_t own_layer_stride, own_row_stride;
    int own_row_period, T, block_rows;
    const int *pos;
};

/*
 * Variant blocks: the rows are n_blocks (0 = 1) copies of the n_seqs
 * sequences, block v under gates[v] and mlps[v]; n_blocks * n_seqs is at most
 * the workspace's B. A NULL variants argument is one block, nothing ablated.
 *
 * An MLP block's gate g scales its output a into the residual stream (g a,
 * as a head's gate scales the head's output); at 0 the block's output is its
 * replacement r instead: mlp_rep read through hp_replacement_at
 * with head 0 of width 0 (d_model values at buf + l * layer_stride + row's
 * offset), zero when mlp_rep.buf is NULL (then an MLP at gate 0 in every
 * block is not computed at all). One position patched (own) is for heads only.
 */
struct hp_fwd_variants {
    int n_blocks;
    const float *const *gates; /* NULL (nothing ablated) or (n_blocks), each NULL or (n_layers, n_heads); 0 = ablated */
    struct hp_replacement rep; /* what a head whose gate is 0 outputs: zero (rep.buf NULL) unless the ablation says */
    const float *const *mlps;  /* NULL (every MLP kept) or (n_blocks), each NULL or (n_layers); 0 = ablated */
    struct hp_replacement mlp_rep; /* what an MLP whose gate is 0 outputs: zero (buf NULL) unless the ablation says */
    /*
     * NULL (none), or (n_blocks) the edges patched in block v: n_edges[v] of them at edges[v], sorted
     * (hp_edge_cmp). A receiver in block v reads its stream plus, for each edge into it, the sender's
     * replacement (rep, mlp_rep; emb: zero) less its output in this block's pass, before its norm. Needs the
     * workspace's room for them (hp_fwd_edges_ready); pre-norm models without a norm over every head's queries
     * (hp_fwd_edges_refused), every position (rep without own), hp_fwd_run from layer 0. Where a norm follows
     * the attention output (Gemma 2 and 3), a head's output is the layer's contribution with it changed alone.
     */
    const struct hp_edge *const *edges;
    const int *n_edges;
};

/* What the pass writes besides the rows it returns; a NULL taps argument is none. */
struct hp_fwd_taps {
    /* NULL or (n_layers, T, n_heads * d_head): every real token's head outputs are added at its position */
    double *capture;
    /* NULL or (n_layers, T, d_model): every real token's MLP block output (hp_fwd_save's mlp) added likewise */
    double *capture_mlp;
    const struct hp_fwd_save *save; /* NULL, or filled for later hp_fwd_resume (one block only) */
    float *out; /* NULL or (rows, hp_fwd_out_width): logits, or final hidden states; a classifier: (sequences, n_labels) */
    /* NULL or (n_layers + 1, rows, d_model): the residual stream entering each layer, then
     * after the last (before the final norm): what the reverse pass (backward.c) starts from.
     * hp_fwd_run only (one block); hp_fwd_resume leaves it alone */
    float *resid;
    /*
     * 0, or the layer hp_fwd_run (one block, resid given) starts at: from resid's rows for it, which the
     * caller filled with the residual stream entering it under these gates (an earlier pass's, the same bits
     * as this pass would make); resid's rows and keep below it are left alone. A gradient pass that wants
     * only the gates from this layer on (grad.c's prefix) skips the layers below.
     */
    int from;
    /* NULL or (n_layers), each NULL or where layer l's activations are kept (hp_fwd_run only, one block) */
    const struct hp_fwd_keep *const *keep;
    /*
     * NULL, or handed every live head's attention probabilities as the pass makes them, one
     * (layer, head, row block) at a time: p (T, T), row-major, query i by key j, as the softmax
     * left them (0 at padding keys and, causal, at keys after i); block b = v * n_seqs + s is
     * sequence s of variant block v. p is valid during the call only: the callee reduces it on
     * the fly, so the tap costs no memory beyond the (T, T) buffer per thread the pass has anyway.
     * Called from inside the attention's parallel loop, concurrently from several threads, each
     * call for a different (head, block) of one layer: the callee writes state per (layer, head,
     * block) only. hp_fwd_resume calls it for the layers it runs (after l0).
     */
    void (*attn)(void *user, int layer, int head, int block, const float *p, int T);
    void *attn_user;
};

/*
 * Run the pass. Returns the rows (rows, d_model) the LM head reads (after
 * the final norm and any MLM transform), inside the workspace and valid
 * until its next use; logits for them come from hp_fwd_logits.
 */
const float *hp_fwd_run(const struct hp_model *m, struct hp_fwd *w, const struct hp_fwd_in *in,
                        const struct hp_fwd_variants *var, const struct hp_fwd_taps *tap);

/*
 * The same pass for variants whose layers before l0 are unmasked, from a
 * one-block pass's save of the same sequences: each block starts from the
 * saved residual stream, and layer l0's attention output is its output
 * projection over the saved heads' outputs, those whose gate is not 1
 * replaced (never the saved layer output minus the changed heads' part, whose
 * float cancellation made an ablated model depend on the removed head's
 * weights); layers after l0 run in full. Equal to hp_fwd_run up to float
 * rounding. The taps' save is not filled; capture, if given, sees only the
 * layers after l0.
 */
const float *hp_fwd_resume(const struct hp_model *m, struct hp_fwd *w, const struct hp_fwd_in *in,
                           const struct hp_fwd_variants *var, const struct hp_fwd_taps *tap,
                           const struct hp_fwd_save *base, int l0);

/* Classifier logits (n_seqs, n_labels) of a sequence-classification model from
 * its final rows h (n_seqs * T, d_model): pooler on each first token, then the
 * classifier. w lends its panel for 16-bit weights (nothing else of it is touched). */
void hp_fwd_classify(const struct hp_model *m, struct hp_fwd *w, const float *h, int n_seqs, int T, float *out);

/* Logits of the vocabulary block [v0, v0 + nv) for N rows h (N, d_model), into
 * out (N, ldo), soft-capped when the model caps them (logit_softcap); w lends
 * its panel as hp_fwd_classify's. */
void hp_fwd_logits(const struct hp_model *m, struct hp_fwd *w, const float *h, int N, int v0, int nv, float *out,
                   int ldo);

// --- rules the forward and its reverse pass (backward.c) share: written once ---------

/* The attention scores' scale at layer l: 1 / sqrt(d_head), and also 1 / (l + 1) where the model
 * scales by the layer (GPT-2's scale_attn_by_inverse_layer_idx). */
float hp_fwd_attn_scale(const struct hp_model *m, int l);

/* What an ablated head h's output (d_head wide) is at layer l, row r of a pass: a view into rp's
 * buffer, or NULL (zero). The one statement of the rule (struct hp_replacement). */
static inline const float *hp_replacement_at(const struct hp_replacement *rp, int l, int h, int dh, int r)
{
    if (rp->own) {
        const int pos = rp->pos[r / rp->block_rows];
        if (pos >= 0 && r % rp->T != pos)
            return rp->own + l * rp->own_layer_stride + h * dh + (r % rp->own_row_period) * rp->own_row_stride;
    }
    if (!rp->buf)
        return NULL;
    return rp->buf + l * rp->layer_stride + h * dh + (r % rp->row_period) * rp->row_stride;
}

/* What joins the residual stream from an MLP's output o (rows [r0, r0 + n) of a pass, d wide) at layer l under
 * gate g, into out (which may be o): o itself at 1, g o, or at 0 its replacement (rp: hp_replacement_at; zero
 * without a buffer). The one statement of the rule (struct hp_fwd_variants). */
void hp_fwd_mlp_gated(const struct hp_replacement *rp, int l, float g, const float *o, float *out, int r0, int n,
                      int d);

/* Whether a dead head's output is anything but zero somewhere (it then enters the output projection). */
static inline bool hp_replacement_reads(const struct hp_replacement *rp)
{
    return rp->buf || rp->own;
}

/* y (N, n) = x (N, k) W (k, n) [+ b], W's panels converted in mb when it is stored 16-bit. */
void hp_fwd_linear(struct hp_mat_buf *mb, float *y, const float *x, int N, int k, int n, struct hp_mat w,
                   const float *b);

/* The model's norm of rows x (N, d_model) into y: LayerNorm where it has a bias, else RMSNorm. */
void hp_fwd_norm(const struct hp_model *m, float *y, const float *x, int N, const float *wt, const float *b);

/*
 * The attention block's projections at layer l from its input x (N rows of T-token sequences, d_model), one
 * section the forward and the reverse pass both run: the queries of the heads q_in (n_heads) and the keys and
 * values of the KV heads kv_in (n_kv_heads) into q (N, n_heads * d_head), k and v (N, n_kv_heads * d_head), one
 * product per run of consecutive heads, with their biases and q/k norms (each norm's 1 / rms into qr, kr when
 * not NULL: the reverse pass's); then rotary (rope: the layer's table) on the queries of q_rope and the keys of
 * kv_rope. mb converts 16-bit weights' panels.
 */
void hp_fwd_qkv(const struct hp_model *m, struct hp_mat_buf *mb, int l, const float *x, int N, int T, const bool *q_in,
                const bool *kv_in, const bool *q_rope, const bool *kv_rope, const float *rope, float *q, float *k,
                float *v, float *qr, float *kr);

/* Runs of consecutive equal flags: for (s = 0; s < n; s = e) with [s, e) a run, e = hp_fwd_run_end(..). */
int hp_fwd_run_end(const bool *flag, int n, int s);

#endif
