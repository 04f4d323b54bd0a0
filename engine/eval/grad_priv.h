/*
 * grad_priv.h -- the gradient pass's own state (engine/eval/grad.c) and the size of
 * its chunks.
 *
 * An evaluator that has run a gradient holds one struct hp_grad_state
 * (ev->gs), made by grad.c on the first pass and freed through the function
 * grad.c sets beside it (ev->gs_free), so eval.c never calls into grad.c.
 * Only what grad.c alone reads lives here; what other paths read of a
 * gradient pass stays in the evaluator (eval_priv.h): the metrics it kept
 * (kept, kept_gate, kept_abl: eval_run.c hands them out) and the caller's
 * keep_grad_metrics setting (set through hp_evaluator_keep_grad_metrics
 * before any pass has made this state, so it cannot live here).
 *
 * Must not: be included but by grad.c and the tests.
 */
#ifndef HP_GRAD_PRIV_H
#define HP_GRAD_PRIV_H

#include "headprune.h"
#include "metric.h"

#include <stdbool.h>
#include <stddef.h>

/*
 * A gradient pass holds no chunk's logits (its LM head is fused with the
 * loss's gradient), so its chunks are not bound by a logits buffer as the
 * forward's are: up to HP_GRAD_CHUNK_ROWS rows, while what it keeps of a
 * chunk (the residual stream entering every layer, and every layer's kept
 * activations: backward.h) fits HP_GRAD_CHUNK_BYTES, and those
 * activations their own budget. Its other workspaces (the forward's, the
 * reverse's, the head's) grow with the rows too, by about half as much
 * again. Products with more rows run nearer BLIS's peak: on GPT-2-small at
 * 8 x 256 tokens, 1024 rows took 7% off the pass against 512 and 2048 rows
 * nothing more (alternating runs, 2026-12-01; bench/README.md, "Gradients
 * at the gates").
 */
#define HP_GRAD_CHUNK_ROWS 1024
#define HP_GRAD_CHUNK_BYTES ((size_t)512 << 20)

/* The most the unmasked model's reference for gradients (ref, ref_emb) may hold. */
#define HP_GRAD_REF_BYTES ((size_t)256 << 20)

/* The most the prefix (the residual stream entering every layer but the first, over the whole set) may hold. */
#define HP_GRAD_PREFIX_BYTES ((size_t)512 << 20)

struct hp_metric_row;
/* What the gradient of the metric whose row is row differentiates (the row's derivative), in *out: HP_OK; else (the
 * row has none, or names one grad.c does not take) the refusal naming the metric. A test may pass a row the table
 * does not hold, as a new metric's would be. */
enum hp_status hp_grad_deriv(const struct hp_metric_row *row, enum hp_metric_deriv *out, struct hp_error *err);

struct hp_grad_state {
    int batch;         /* sequences per gradient pass's chunk: at least the forward's batch (hp_grad_batch) */
    size_t keep_bytes; /* room for the pass's forward to keep activations in (backward.h) */
    /* the unmasked model's outputs that a pass compares with (kl, cos) or takes a variant's KL from, over
     * the whole set, made once when they fit HP_GRAD_REF_BYTES: an LM's scored final rows (n_scored,
     * d_model) in chunk order, a classifier's logits (n_seqs, n_labels) in ref; an encoder's sentence
     * embeddings (n_seqs, d_model) in ref_emb */
    float *ref;
    double *ref_emb;
    bool ref_tried;                /* made, or found too big: per chunk instead */
    /*
     * The prefix, for passes that want the gates from a layer on only (hp_evaluator_grad_from): pre holds
     * (n_layers - 1, n_seqs * seq_len, d_model), the residual stream entering layers 1 .. n_layers - 1 of every
     * sequence in chunk order, as a pass under pre_abl made it; layer j's rows (j <= pre_n) are valid for the
     * gates pre_gate (n_layers, n_heads) has below j. A pass starts at the deepest such layer (at most its
     * from) whose gates below agree with its own, and leaves its rows up to its from behind (pre_n = from).
     * NULL (pre_tried) when the set's do not fit HP_GRAD_PREFIX_BYTES: every pass then runs its whole forward.
     */
    float *pre;
    float *pre_gate;
    int pre_n;
    enum hp_ablation pre_abl;
    bool pre_tried;
    struct hp_grad_phases phases;  /* the last pass's time (hp_evaluator_grad_phases) */
};

/* ev's gradient state, made on the first call (and freed with ev); NULL when out of memory. */
struct hp_grad_state *hp_grad_state_get(struct hp_evaluator *ev);

/* The sequences of seq_len tokens a gradient pass of m takes at once: at least batch (the forward's),
 * more while HP_GRAD_CHUNK_ROWS rows hold them, what it keeps of them fits chunk_bytes and every layer's
 * kept activations fit keep_bytes. */
int hp_grad_batch(const struct hp_model *m, int seq_len, int batch, size_t keep_bytes, size_t chunk_bytes);

#endif
