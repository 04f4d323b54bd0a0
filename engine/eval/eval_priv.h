/*
 * eval_priv.h -- the evaluator's private insides, shared by its family and by
 * nothing else (others use eval.h and headprune.h).
 *
 * The family: an evaluator pairs a model with held-out data and walks the
 * data in chunks of up to `batch` sequences, each one forward call. eval.c
 * owns validation, the metrics, the plain path and the public entry points
 * but the runs (what the ablations replace a head with is ablation.c's, held
 * here and made on first use); eval_run.c picks each variant's path; reuse.c
 * owns the reuse path and its fused LM head; grad.c the gradient pass, whose
 * own state is grad_priv.h's. Work that runs over the same chunks (the reuse
 * path and the gradient pass) builds its passes from hp_eval_chunk_in /
 * _variants and scores sequences through the functions below, so every path
 * chunks, scores and sums in the same order. The states of the reuse path
 * and of the gradient pass hang from the evaluator by a pointer each, freed
 * through the function their owner sets beside it, so eval.c calls neither.
 *
 * Must not: be included outside engine/eval*.c, engine/eval/reuse.c,
 * engine/eval/grad.c and the tests.
 */
#ifndef HP_EVAL_PRIV_H
#define HP_EVAL_PRIV_H

#include "ablation.h"
#include "eval.h"
#include "forward.h"

struct hp_reuse;
struct hp_grad_state;

struct hp_evaluator {
    struct hp_model *m;
    const struct hp_data *d;
    int batch;        /* sequences per forward call */
    int width;        /* forward output row width */
    bool has_loss;    /* causal LM, or MLM with labels, or a classifier */
    bool has_cls;     /* sequence classifier: one (n_labels) row of logits per sequence */
    float *base_cls;  /* NULL or (n_seqs, n_labels): the unmasked model's class logits */
    struct hp_fwd *fwd; /* NULL or a workspace for one chunk (plain path, ablations' prepare steps) */
    float *out_m;     /* NULL or (batch, seq_len, width): a variant's outputs (plain path) */
    float *out_b;     /* NULL or (batch, seq_len, width): the unmasked reference when base_all is too big */
    float *base_all;  /* NULL or (n_seqs, seq_len, width): every sequence's unmasked output, once */
    double *base_lse; /* NULL or (n_seqs, seq_len): log-sum-exp of each row of base_all (LMs) */
    struct hp_token_facts *tok; /* (seq_len) what the plain path knows of each token of one sequence */
    uint8_t *tok_ok;  /* (seq_len) whether the token is scored */
    struct hp_ablation_state abl; /* what the ablations' prepare steps made (ablation.c), on first use */
    bool plain;       /* every variant by a whole pass of its own (the reference path) */
    struct hp_reuse *ru; /* NULL or the reuse path's state (reuse.c), made on first use */
    void (*ru_free)(struct hp_reuse *); /* frees ru: reuse.c sets it with ru, so eval.c never calls up into reuse.c */
    struct hp_grad_state *gs; /* NULL or the gradient pass's own state (grad.c: grad_priv.h), made on the first gradient */
    void (*gs_free)(struct hp_grad_state *); /* frees gs: grad.c sets it with gs, so eval.c never calls into grad.c */
    /* NULL or the metrics a gradient pass measured at the gates kept_gate ((n_layers, n_heads); NULL: the
     * unmasked model) under kept_abl: its forward was that variant's pass, so hp_evaluator_run_many hands
     * out a copy instead of running it again. grad.c fills them, eval_run.c and hp_eval_kept_matches read
     * them: the evaluator's, not the gradient state's */
    struct hp_metrics *kept;
    float *kept_gate;
    enum hp_ablation kept_abl;
    /* whether a gradient pass at masked gates keeps its metrics (hp_evaluator_keep_grad_metrics): read by
     * grad.c alone, but the caller's setting, made before any pass has made the gradient state */
    bool keep_grad_metrics;
    /* the ends a recovery metric (patch_recovery) is measured between: the unmasked model's mean logit_diff on
     * the clean and on the corrupt prompts (hp_eval_task_ready), made on first use */
    bool ends_ready;
    double ld_clean, ld_corrupt;
    void (*progress)(void *, int, int);
    void *progress_user;
};

/* Whether the metrics kept by a gradient pass are those of mask under abl. */
bool hp_eval_kept_matches(const struct hp_evaluator *ev, const struct hp_mask *mask, enum hp_ablation abl);

/* Logits are made this many vocabulary entries at a time by the fused LM
 * heads (reuse.c's metrics, grad.c's loss gradient), never a whole row. */
#define HP_VOCAB_BLOCK 2048

static inline int hp_eval_vocab_block(int V)
{
    return V < HP_VOCAB_BLOCK ? V : HP_VOCAB_BLOCK;
}

/* Sums over scored tokens (and, for encoders, over sequences). */
struct hp_eval_totals {
    double sum[HP_N_METRICS]; /* by enum hp_metric: the scores summed over the set's items (or sequences) */
    int64_t tokens;
};

/* Sequences in the chunk that starts at sequence s. */
int hp_eval_chunk_len(const struct hp_evaluator *ev, int s);

/* The pass's inputs: sequences [s, s + nb). */
struct hp_fwd_in hp_eval_chunk_in(const struct hp_evaluator *ev, int s, int nb);

/* Room for k variant blocks' gates, MLP gates, positions and edges (edges and n_edges may be NULL when no mask
 * has any): what hp_eval_chunk_variants fills and the pass reads. */
struct hp_eval_blocks {
    const float **gates, **mlps;
    int *pos;
    const struct hp_edge **edges;
    int *n_edges;
};

/*
 * The pass's variants for sequences [s, s + nb) under ablation abl: k blocks, block v the variant masks[v] (NULL:
 * nothing changed), its gates, MLP gates and position written into b's arrays (room for k each), with the
 * ablation row's replacements (from what hp_eval_ablation_ready made) and, when some mask is at one position,
 * the heads' own outputs at the others (hp_eval_own_ready's). The one place a mask becomes a pass's variant.
 */
struct hp_fwd_variants hp_eval_chunk_variants(const struct hp_evaluator *ev, enum hp_ablation abl, int s, int nb,
                                              const struct hp_mask *const *masks, int k, const struct hp_eval_blocks *b);

/* Room in workspace w for passes with edges when one of masks[0, n) has any (hp_fwd_edges_ready). */
enum hp_status hp_eval_edges_ready(const struct hp_evaluator *ev, struct hp_fwd *w, const struct hp_mask *const *masks,
                                   int n, struct hp_error *err);

/* What a head patched at one position keeps at the others, made once (hp_ablation_own_ready). */
enum hp_status hp_eval_own_ready(struct hp_evaluator *ev, struct hp_error *err);

/* What ablation abl's replacement reads, made once (its row's prepare step over the held-out set); mlps: some
 * variant changes an MLP block, whose replacements are made too (made again when the heads' were alone). */
enum hp_status hp_eval_ablation_ready(struct hp_evaluator *ev, enum hp_ablation abl, bool mlps, struct hp_error *err);

/* The log-sum-exp of a row z (V), in double. */
double hp_eval_row_lse(const float *z, int V);

/* Whether token position t of sequence s is scored, and against which target (*target). */
bool hp_eval_target_at(const struct hp_data *d, bool causal, int s, int t, int32_t *target);

/* Sequence s's wrong answer (a task row's, docs/tasks.md), or -1 where it has none. */
int32_t hp_eval_wrong_of(const struct hp_data *d, int s);

/* The scored rows of the chunk of nb sequences at s0 (row = b * seq_len + t),
 * in order, into row, their targets into y and (w not NULL) their wrong
 * answers into w, -1 where none (each room for nb * seq_len); returns how
 * many. */
int hp_eval_find_scored(const struct hp_evaluator *ev, int s0, int nb, int *row, int32_t *y, int32_t *w);

/* Dimension i of sequence s's sentence embedding from outputs a (seq_len, D),
 * pooled over its real tokens by mode; *row (may be NULL): the row it came
 * from (CLS, max), -1 for mean. */
double hp_eval_pool_dim(const struct hp_data *d, enum hp_pooling mode, int s, const float *a, int D, int i, int *row);

/* Cosine between sequence s's sentence embeddings from outputs a and b
 * (seq_len, D), pooled over its real tokens by mode; NaN when not finite. */
double hp_eval_pooled_cos(const struct hp_data *d, enum hp_pooling mode, int s, const float *a, const float *b, int D);

/* 1 when sequence s's real rows of x (seq_len, D) are finite, else NaN. */
double hp_eval_self_cos(const struct hp_data *d, int s, const float *x, int D);

/* Metrics with room for the evaluator's sequences, zeroed; NULL on OOM. hp_metrics_free frees them. */
struct hp_metrics *hp_eval_metrics_new(const struct hp_evaluator *ev);

/* The whole-set metrics from the sums tot: a metric that is not a finite
 * number is an error naming the variant (mask under abl). */
enum hp_status hp_eval_metrics_finish(struct hp_evaluator *ev, struct hp_metrics *mt, const struct hp_eval_totals *tot,
                                      const struct hp_mask *mask, enum hp_ablation abl, struct hp_error *err);

/* Sequence s's sums over its nt scored items (sum: by enum hp_metric, the metrics scored per item, as their
 * rows say) into its per-sequence means and the totals. */
void hp_eval_record_seq(struct hp_metrics *mt, struct hp_eval_totals *tot, int s, const double sum[HP_N_METRICS],
                        int64_t nt);

/* Sequence s of a classifier from its logits zm (n_labels) and the unmasked
 * ones zb (NULL: the same model): loss, accuracy, KL; one scored item. */
void hp_eval_score_cls(const struct hp_evaluator *ev, struct hp_metrics *mt, struct hp_eval_totals *tot, int s,
                       const float *zm, const float *zb);

/*
 * The reuse path (reuse.c): the n variants masks (NULL = unmasked) under
 * abl, chunk by chunk, adding each variant's per-sequence metrics to mts[i]
 * and its sums to tots[i]; progress is reported per chunk. abl must be
 * ready (hp_eval_ablation_ready).
 */
enum hp_status hp_eval_reuse_run(struct hp_evaluator *ev, const struct hp_mask *const *masks, int n,
                                 enum hp_ablation abl, struct hp_metrics **mts, struct hp_eval_totals *tots,
                                 struct hp_error *err);

/* Free the reuse path's state; NULL is fine. (The evaluator frees it through ev->ru_free.) */
void hp_eval_reuse_free(struct hp_reuse *ru);

/* The plain path (eval.c): one variant under abl, every chunk through the whole model, its per-sequence metrics
 * into mt and its sums into tot; abl must be ready. */
enum hp_status hp_eval_run_plain(struct hp_evaluator *ev, const struct hp_mask *mask, enum hp_ablation abl,
                                 struct hp_metrics *mt, struct hp_eval_totals *tot, struct hp_error *err);

#endif
