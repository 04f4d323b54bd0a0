/*
 * backward.h -- the reverse pass of the masked-attention forward (engine/compute/backward.c).
 *
 * Given the gradient of a loss at the rows a pass hands its head (the LM
 * head's or classifier's input; the heads' own reverses are below, for the
 * loss to call blockwise) and the residual stream the pass
 * kept (the forward's resid tap), it walks the model back to the first
 * layer and hands back the gradient of the loss at every head's gate. The
 * weights are frozen: only gradients at activations are formed, never at
 * weights. Memory is bounded by the chunk, as the forward's, plus a fixed
 * budget: the last layers' activations are kept by the forward (its keep
 * tap, from hp_bwd_keep) as far as the budget holds them, and the other
 * layers' are made again from their saved input when the pass reaches them.
 */
#ifndef HP_BACKWARD_H
#define HP_BACKWARD_H

#include "forward.h"

struct hp_bwd; /* workspace for B sequences of up to T tokens */

/* The room a pass's callers give the forward to keep layers' activations in, by default. */
#define HP_BWD_KEEP_BYTES ((size_t)1 << 30)

/* What keeping one layer's activations for B sequences of T tokens takes. */
size_t hp_bwd_layer_bytes(const struct hp_model *m, int T, int B);

/*
 * Workspace for B sequences of T tokens, keeping the last layers'
 * activations as far as keep_bytes holds them (0: none; every layer made
 * again). Destructor: hp_bwd_free. NULL on OOM.
 */
struct hp_bwd *hp_bwd_new(const struct hp_model *m, int T, int B, size_t keep_bytes);
void hp_bwd_free(struct hp_bwd *w);

/* The forward's keep tap for a pass this workspace will reverse: (n_layers), NULL for the layers it makes again. */
const struct hp_fwd_keep *const *hp_bwd_keep(const struct hp_bwd *w);

/*
 * What the reverse pass adds to, per (layer, query head), each (n_layers,
 * n_heads) in double, summed over the pass's rows. With a_h head h's output
 * before its gate g_h, ctx_h what the output projection reads (g_h a_h, or
 * its replacement r_h when g_h is 0: zero, or what the ablation puts there,
 * hp_replacement_at) and dctx_h the loss's gradient at ctx_h:
 *   gate: dL/dg_h = <dctx_h, a_h>; for a head at 0 under an ablation that
 *         replaces it, where the forward jumps to r_h, <dctx_h, a_h - r_h>,
 *         the derivative along r_h + g (a_h - r_h), the path from its
 *         replacement back to the head;
 *   atp:  NULL, or <dctx_h, r_h - ctx_h>: the first-order change of the loss
 *         if the head alone were replaced by r_h (0 for a head already at 0).
 *   gate_seq: NULL, or (n_seqs of the pass, n_layers, n_heads): gate's sums
 *         split by the sequence the rows belong to (they add up to gate's).
 *   from: 0, or the layer the reverse stops at: only the gates from it on
 *         are wanted, and the layers below are neither walked nor read
 *         (their entries, and resid's rows for them, are left alone).
 * A pruned head has none (its entries are left alone).
 */
struct hp_bwd_grads {
    double *gate;
    double *atp;
    double *gate_seq;
    int from;
    /*
     * The MLP blocks' gates (hp_fwd_variants.mlps), each NULL or added to, as the heads' are: with o_l layer
     * l's MLP output into the residual stream before its gate g_l, ctx_l what joined (g_l o_l, or at 0 its
     * replacement r_l) and dy_l the loss's gradient there, mlp_gate (n_layers) <dy_l, o_l>, and for an MLP at
     * 0 under an ablation that replaces it <dy_l, o_l - r_l> (the path r + g (o - r) back to it); mlp_atp
     * (n_layers) <dy_l, r_l - ctx_l> (0 for an MLP at 0); mlp_gate_seq (n_seqs of the pass, n_layers)
     * mlp_gate's sums split by sequence. An MLP at gate 0 passes no gradient to its input.
     */
    double *mlp_gate;
    double *mlp_atp;
    double *mlp_gate_seq;
};

/*
 * The reverse of a one-block hp_fwd_run over in under var: resid is the
 * forward's resid tap (n_layers + 1, rows, d_model), dhead the gradient at
 * the rows the pass returned, the head's input (rows, d_model), read only.
 * Adds to g's arrays.
 */
void hp_bwd_run(const struct hp_model *m, struct hp_bwd *w, const struct hp_fwd_in *in,
                const struct hp_fwd_variants *var, const float *resid, const float *dhead,
                const struct hp_bwd_grads *g);

/*
 * The heads' reverses, beside forward.c's hp_fwd_logits and hp_fwd_classify,
 * so that the loss's gradient can be formed where the logits are made:
 *   hp_bwd_logits: dh (N, d_model) += dz (N, ldz; its first nv columns) times
 *     the LM head's rows [v0, v0 + nv): the gradient at the head's input from
 *     the gradient dz at the logits of that vocabulary block;
 *   hp_bwd_classify: dh (n_seqs * T, d_model) = the gradient at the rows h
 *     the classifier read (only each sequence's first row is not 0) from dz
 *     (n_seqs, n_labels), the gradient at its logits.
 * w lends them its panel for 16-bit weights (nothing else of it is touched).
 */
void hp_bwd_logits(const struct hp_model *m, struct hp_bwd *w, const float *dz, int N, int v0, int nv, int ldz,
                   float *dh);
void hp_bwd_classify(const struct hp_model *m, struct hp_bwd *w, const float *h, const float *dz, int n_seqs, int T,
                     float *dh);

#endif
