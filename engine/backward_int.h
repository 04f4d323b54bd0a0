/*
 * backward_int.h -- the reverse pass of the masked-attention forward (engine/backward.c).
 *
 * Given the gradient of a loss at a pass's output rows (the forward's out
 * tap: logits, or a classifier's logits) and the residual stream the pass
 * kept (the forward's resid tap), it walks the model back to the first
 * layer and hands back the gradient of the loss at every head's gate. The
 * weights are frozen: only gradients at activations are formed, never at
 * weights. Memory is bounded by the chunk, as the forward's: a layer's
 * activations are recomputed from its saved input when the pass reaches it.
 */
#ifndef HP_BACKWARD_INT_H
#define HP_BACKWARD_INT_H

#include "forward_int.h"

struct hp_bwd; /* workspace for B sequences of up to T tokens */

/* Workspace for B sequences of T tokens. Destructor: hp_bwd_free. NULL on OOM. */
struct hp_bwd *hp_bwd_new(const struct hp_model *m, int T, int B);
void hp_bwd_free(struct hp_bwd *w);

/*
 * What the reverse pass adds to, per (layer, query head), each (n_layers,
 * n_heads) in double, summed over the pass's rows. With a_h head h's output
 * before its gate g_h, ctx_h what the output projection reads (g_h a_h, or
 * its replacement r_h when g_h is 0: zero, or the mean under mean ablation)
 * and dctx_h the loss's gradient at ctx_h:
 *   gate: dL/dg_h = <dctx_h, a_h>; for a head at 0 under mean ablation,
 *         where the forward jumps to the mean, <dctx_h, a_h - r_h>, the
 *         derivative along r_h + g (a_h - r_h), the path from its mean back
 *         to the head;
 *   atp:  NULL, or <dctx_h, r_h - ctx_h>: the first-order change of the loss
 *         if the head alone were replaced by r_h (0 for a head already at 0).
 *   gate_seq: NULL, or (n_seqs of the pass, n_layers, n_heads): gate's sums
 *         split by the sequence the rows belong to (they add up to gate's).
 * A pruned head has none (its entries are left alone).
 */
struct hp_bwd_grads {
    double *gate;
    double *atp;
    double *gate_seq;
};

/*
 * The reverse of a one-block hp_fwd_run over in under var: resid is the
 * forward's resid tap (n_layers + 1, rows, d_model), dout the gradient at its
 * out tap (rows, hp_fwd_out_width; a classifier: (n_seqs, n_labels)), read
 * only. Adds to g's arrays.
 */
void hp_bwd_run(const struct hp_model *m, struct hp_bwd *w, const struct hp_fwd_in *in,
                const struct hp_fwd_variants *var, const float *resid, const float *dout,
                const struct hp_bwd_grads *g);

#endif
