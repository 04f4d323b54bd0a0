/*
 * forward_int.h -- the masked-attention forward pass (engine/forward.c).
 *
 * One call runs one sequence of T tokens through the model with a gate per
 * (layer, query head). A head whose gate is 0 costs nothing under zero
 * ablation: its Q slice, scores, softmax and weighted sum are skipped, and so
 * are its rows of the output projection; a KV head is computed only if one of
 * its query heads is live. Under mean ablation the head's output is replaced
 * by a cached mean and still skips everything but the output projection.
 */
#ifndef HP_FORWARD_INT_H
#define HP_FORWARD_INT_H

#include "model_int.h"

struct hp_fwd; /* workspace for sequences of up to T tokens */

/* Workspace for B sequences of T tokens. Destructor: hp_fwd_free. NULL on OOM. */
struct hp_fwd *hp_fwd_new(const struct hp_model *m, int T, int B);
void hp_fwd_free(struct hp_fwd *w);
int hp_fwd_capacity(const struct hp_fwd *w); /* T */
int hp_fwd_batch(const struct hp_fwd *w);    /* B */

/* Width of the forward output: n_vocab with an LM head, else d_model. */
int hp_fwd_out_width(const struct hp_model *m);

struct hp_fwd_args {
    const int32_t *ids;       /* (n_seqs, T) */
    const uint8_t *attn_mask; /* NULL or (n_seqs, T); 0 = padding (never attended to) */
    const int32_t *type_ids;  /* NULL or (n_seqs, T); BERT token types */
    int T;
    int n_seqs;               /* sequences in this call, at most the workspace's B */
    const float *gate;        /* NULL or (n_layers, n_heads); 0 = ablated */
    enum hp_ablation ablation;
    /* mean ablation: head outputs (.., n_heads * d_head) at
     * mean[l * mean_layer_stride + t * mean_pos_stride]; pos stride 0 = one mean for all positions */
    const float *mean;
    ptrdiff_t mean_layer_stride, mean_pos_stride;
    /* NULL or (n_layers, T, n_heads * d_head): every real token's head outputs are added at its position */
    double *capture;
    float *out;               /* (n_seqs, T, hp_fwd_out_width) */
};

void hp_fwd_run(const struct hp_model *m, struct hp_fwd *w, const struct hp_fwd_args *a);

#endif
