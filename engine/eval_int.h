/*
 * eval_int.h -- the evaluator's private shape and its chunk interface
 * (engine/eval.c, engine/reuse.c).
 *
 * An evaluator pairs a model with held-out data and walks the data in chunks
 * of up to `batch` sequences, each one forward call. eval.c owns validation,
 * the metrics, the mean-ablation statistics, the plain path and the public
 * entry points; reuse.c owns the reuse path and its fused LM head. Work that
 * runs over the same chunks (the reuse path today; gate training and head
 * roles later) builds its passes from hp_eval_chunk_in / _variants and
 * scores sequences through the functions below, so every path chunks,
 * scores and sums in the same order.
 */
#ifndef HP_EVAL_INT_H
#define HP_EVAL_INT_H

#include "forward_int.h"

struct hp_reuse;

struct hp_evaluator {
    struct hp_model *m;
    const struct hp_data *d;
    int batch;        /* sequences per forward call */
    int width;        /* forward output row width */
    bool has_loss;    /* causal LM, or MLM with labels, or a classifier */
    bool has_cls;     /* sequence classifier: one (n_labels) row of logits per sequence */
    float *base_cls;  /* NULL or (n_seqs, n_labels): the unmasked model's class logits */
    struct hp_fwd *fwd; /* NULL or a workspace for one chunk (plain path, mean statistics) */
    float *out_m;     /* NULL or (batch, seq_len, width): a variant's outputs (plain path) */
    float *out_b;     /* NULL or (batch, seq_len, width): the unmasked reference when base_all is too big */
    float *base_all;  /* NULL or (n_seqs, seq_len, width): every sequence's unmasked output, once */
    double *base_lse; /* NULL or (n_seqs, seq_len): log-sum-exp of each row of base_all (LMs) */
    double *tok;      /* (3, seq_len) per-token loss, correct, KL of one sequence */
    uint8_t *tok_ok;  /* (seq_len) whether the token is scored */
    float *mean_all;  /* NULL or (n_layers, n_heads * d_head) */
    float *mean_pos;  /* NULL or (n_layers, seq_len, n_heads * d_head) */
    bool plain;       /* every variant by a whole pass of its own (the reference path) */
    struct hp_reuse *ru; /* NULL or the reuse path's state (reuse.c), made on first use */
    size_t grad_keep_bytes; /* room for the gradient's forward to keep activations in (grad.c; backward_int.h) */
    void (*progress)(void *, int, int);
    void *progress_user;
};


/*
 * Whether the model can run the data at all, what every pass over it needs
 * (the evaluator's, head roles'): rows no longer than its positions, ids in
 * its vocabulary, token types it has, no row all padding. Else one line
 * naming the data file.
 */
enum hp_status hp_eval_check_data(const struct hp_model *m, const struct hp_data *d, struct hp_error *err);

/* Logits are made this many vocabulary entries at a time by the fused LM
 * heads (reuse.c's metrics, grad.c's loss gradient), never a whole row. */
#define HP_VOCAB_BLOCK 2048

static inline int hp_eval_vocab_block(int V)
{
    return V < HP_VOCAB_BLOCK ? V : HP_VOCAB_BLOCK;
}

/* Sums over scored tokens (and, for encoders, over sequences). */
struct hp_eval_totals {
    double loss, acc, kl, cos;
    int64_t tokens;
};

/* Sequences in the chunk that starts at sequence s. */
int hp_eval_chunk_len(const struct hp_evaluator *ev, int s);

/* The pass's inputs: sequences [s, s + nb). */
struct hp_fwd_in hp_eval_chunk_in(const struct hp_evaluator *ev, int s, int nb);

/* The pass's variants under ablation abl with the evaluator's means: one
 * block, nothing ablated until the caller sets gates (and n_blocks). */
struct hp_fwd_variants hp_eval_chunk_variants(const struct hp_evaluator *ev, enum hp_ablation abl);

/* Whether token position t of sequence s is scored, and against which target (*target). */
bool hp_eval_target_at(const struct hp_data *d, bool causal, int s, int t, int32_t *target);

/* Cosine between sequence s's sentence embeddings from outputs a and b
 * (seq_len, D), pooled over its real tokens by mode; NaN when not finite. */
double hp_eval_pooled_cos(const struct hp_data *d, enum hp_pooling mode, int s, const float *a, const float *b, int D);

/* 1 when sequence s's real rows of x (seq_len, D) are finite, else NaN. */
double hp_eval_self_cos(const struct hp_data *d, int s, const float *x, int D);

/* Sequence s's sums over its nt scored items into its per-sequence means and the totals. */
void hp_eval_record_seq(struct hp_metrics *mt, struct hp_eval_totals *tot, int s, double sl, double sa, double sk,
                        int64_t nt);

/* Sequence s of a classifier from its logits zm (n_labels) and the unmasked
 * ones zb (NULL: the same model): loss, accuracy, KL; one scored item. */
void hp_eval_score_cls(const struct hp_evaluator *ev, struct hp_metrics *mt, struct hp_eval_totals *tot, int s,
                       const float *zm, const float *zb);

/*
 * The reuse path (reuse.c): the n variants masks (NULL = unmasked) under
 * abl, chunk by chunk, adding each variant's per-sequence metrics to mts[i]
 * and its sums to tots[i]; progress is reported per chunk. The evaluator's
 * means must be ready when abl needs them.
 */
enum hp_status hp_eval_reuse_run(struct hp_evaluator *ev, const struct hp_mask *const *masks, int n,
                                 enum hp_ablation abl, struct hp_metrics **mts, struct hp_eval_totals *tots,
                                 struct hp_error *err);

/* Free the reuse path's state; NULL is fine. */
void hp_eval_reuse_free(struct hp_reuse *ru);

#endif
