/*
 * ablation.h -- how a head is taken out: the ablation methods, one row
 * each (engine/eval/ablation.c).
 *
 * A row is the method's name (what plans, digests and the database write), a
 * prepare step that makes what its replacement reads (zero: nothing; mean and
 * mean-pos: each head's output averaged over the held-out set under the
 * unmasked model; resample and denoise: every head's output at every position
 * of every row under the unmasked model on the rows' corrupt prompts, which
 * for denoise's swapped data are the clean ones), what data it takes (struct
 * hp_ablation_kind's data: any, or task rows with corrupt prompts, as given
 * or swapped), and the replacement itself: what a dead head's output
 * becomes at layer l, row r of a pass (struct hp_replacement, forward.h),
 * which the forward, its reverse pass and the reuse path all read through
 * hp_replacement_at. A new method is a row here and its enum value in
 * headprune.h; a replacement may come from another input's pass (a
 * "corrupt" prompt) as well as from statistics: the row's replacement is
 * asked for per chunk of sequences, and its rows may index that chunk.
 * Must not: print, or know of metrics, the store or the evaluator's insides
 * (the evaluator lends what a prepare step runs: struct hp_ablation_src).
 */
#ifndef HP_ABLATION_H
#define HP_ABLATION_H

#include "forward.h"

/*
 * What the methods' prepare steps made; the evaluator holds one. Freed by hp_ablation_state_clear. Each
 * statistic comes twice: of the heads' outputs (width n_heads * d_head) and, mlp_*, of the MLP blocks' outputs
 * into the residual stream (width d_model), made by the same passes.
 */
struct hp_ablation_state {
    float *mean_all; /* NULL or (n_layers, n_heads * d_head): each head's output over every real token */
    float *mean_pos; /* NULL or (n_layers, seq_len, n_heads * d_head): at each position */
    float *mlp_mean_all, *mlp_mean_pos; /* the same of the MLP blocks: (n_layers, d_model), (n_layers, seq_len, d_model) */
    /* NULL or (n_layers, n_seqs * seq_len, n_heads * d_head): every head's output at every token of every
     * row of d->task->corrupt under the unmasked model (resample, denoise), n_seqs rows of the data */
    float *other;
    float *mlp_other; /* the same of the MLP blocks: (n_layers, n_seqs * seq_len, d_model) */
    int other_seqs;
    /* NULL or (n_layers, n_seqs * seq_len, n_heads * d_head): every head's own output at every token of every
     * row of d->ids under the unmasked model, what a head patched at one position keeps at the others
     * (hp_ablation_own_ready) */
    float *own;
};

/* What data a method takes (checked by hp_ablation_bind_data before anything runs, and by its prepare step). */
enum hp_ablation_data {
    HP_ABL_DATA_ANY,     /* any data, as it is */
    HP_ABL_DATA_CORRUPT, /* task rows with corrupt prompts, not swapped */
    HP_ABL_DATA_SWAPPED, /* task rows with corrupt prompts, swapped (hp_task_swap): ids are the corrupt prompts */
};

/* What a prepare step may run: the unmasked model over the held-out set, in the evaluator's chunks. */
struct hp_ablation_src {
    const struct hp_model *m;
    const struct hp_data *d;
    struct hp_fwd *fwd; /* a workspace for batch sequences of d->seq_len tokens */
    int batch;          /* sequences a chunk, as the evaluator's passes take them */
    /* where the unmasked model's pass first makes a number that is not finite, into where (for messages) */
    void (*locate_nonfinite)(void *user, char *where, size_t n);
    void *user;
    bool mlps; /* the variants change MLP blocks: make their statistics too where they cost (another input's) */
};

struct hp_ablation_kind {
    const char *name; /* as plans, digests and the database write it: changing it changes every job key */
    const char *help; /* what a dead head's output becomes, for --help: "the head's output is zero" */
    /* make what replacement reads into st, once (a second call finds it made); NULL: nothing to make */
    enum hp_status (*prepare)(struct hp_ablation_state *st, const struct hp_ablation_src *src, struct hp_error *err);
    /* what a dead head's output (mlp: a dead MLP block's) becomes in a pass over sequences [s0, s0 + nb) of the
     * held-out set, of T tokens each (block copies of them included): read from st, which prepare has made */
    struct hp_replacement (*replacement)(const struct hp_ablation_state *st, const struct hp_model_info *in, int T,
                                         int s0, int nb, bool mlp);
    bool reads_means; /* its replacement reads the mean statistics (hp_evaluator_means), which sweeps store */
    enum hp_ablation_data data; /* what data it takes */
};

/* The table, one row per enum hp_ablation. */
extern const struct hp_ablation_kind hp_ablation_kinds[]; /* unsized: ablation.c's static_assert counts its rows */

/* Whether data d is what ablation a takes (its row's data): else one line naming d's file. */
enum hp_status hp_ablation_check_data(enum hp_ablation a, const struct hp_data *d, struct hp_error *err);

/* Make st->own over src's data, once (the unmasked model's head outputs on the data's own prompts). */
enum hp_status hp_ablation_own_ready(struct hp_ablation_state *st, const struct hp_ablation_src *src,
                                     struct hp_error *err);

/*
 * rep (a method's replacement for sequences [s0, s0 + nb) of S, T tokens each) where pos says, per variant block
 * (pos[v]: -1 every position, else that position only): every other row reads the head's own output from st->own,
 * which hp_ablation_own_ready has made. pos is the caller's, read during the passes.
 */
struct hp_replacement hp_ablation_at_position(struct hp_replacement rep, const struct hp_ablation_state *st,
                                              const struct hp_model_info *in, int S, int T, int s0, int nb,
                                              const int *pos);

/* Free what the prepare steps made and reset st; st may hold nothing. */
void hp_ablation_state_clear(struct hp_ablation_state *st);

/*
 * Use statistics computed before (hp_evaluator_set_means: stored with results) instead of making
 * them: checked against the model (in) and rows of seq_len, then copied into st.
 */
enum hp_status hp_ablation_set_means(struct hp_ablation_state *st, const struct hp_model_info *in, int seq_len,
                                     const struct hp_means *m, struct hp_error *err);

#endif
