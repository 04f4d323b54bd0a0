/*
 * eval.c -- evaluate masked variants on a held-out set and reduce to metrics.
 *
 * Owns the pairing of a model with data: validation of one against the
 * other, which position is scored with which target (hp_eval_target_at: a
 * causal LM's next token, a label, or a task row's answer at its answer
 * position), the unmasked reference each variant is compared with (KL, cosine),
 * readying an ablation (its row's prepare step, ablation.c, run once on
 * first use), and the per-sequence and whole-set metrics (carried by metric,
 * each scored item's facts scored, reduced and checked as each metric's row
 * says: metric.h), the plain path (every variant by whole passes of its
 * own) and the public entry points but the runs and the gradients. The
 * evaluator's layout and the chunk interface are eval_priv.h's, shared with
 * the reuse path (reuse.c), the runs (eval_run.c picks each variant's path)
 * and the gradient pass (grad.c); what the rest of the engine uses is
 * eval.h. Calls go one way: eval_run.c -> reuse.c -> eval.c, grad.c ->
 * eval.c; the reuse and gradient states are freed through the functions
 * their owners set beside them. Reductions are in double.
 * Must not: print, exit, know about files other than through hp_data, or
 * call into reuse.c or grad.c.
 */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval_priv.h"
#include "metric.h"
#include "util.h"

#define HP_CHUNK_ROWS 512
#define HP_CHUNK_BYTES ((size_t)128 << 20)

enum hp_status hp_eval_check_data(const struct hp_model *m, const struct hp_data *d, struct hp_error *err)
{
    const struct hp_model_info *in = &m->info;
    if (d->task && !in->causal)
        return hp_fail(err, HP_ERR_ARG, "%s: task rows (a prompt and its answer) need a causal LM, but %s is an "
                       "encoder (give a GPT-2 or Llama-style model)", d->path, in->model_type);
    if (d->seq_len > in->n_ctx)
        return hp_fail(err, HP_ERR_SHAPE, "%s: sequences of %d tokens exceed the model's %d positions (use a shorter --seq-len)",
                       d->path, d->seq_len, in->n_ctx);
    enum hp_status st = hp_data_check_vocab(d, in->n_vocab, err);
    if (st != HP_OK)
        return st;
    if (d->type_ids) {
        if (in->n_token_types == 0)
            return hp_fail(err, HP_ERR_ARG, "%s: token_type_ids given but %s models have no token types", d->path, in->model_type);
        for (size_t i = 0; i < (size_t)d->n_seqs * d->seq_len; i++)
            if (d->type_ids[i] < 0 || d->type_ids[i] >= m->n_types)
                return hp_fail(err, HP_ERR_ARG, "%s: token type %d at row %zu, position %zu is outside the model's %d types",
                               d->path, d->type_ids[i], i / d->seq_len, i % d->seq_len, m->n_types);
    }
    /* a row with no real token has nothing to embed or predict: an encoder would score it 0 (or 1
     * unmasked) and inflate every effect, a language model would count it as a sequence of no tokens */
    for (int s = 0; d->attn_mask && s < d->n_seqs; s++) {
        bool any = false;
        for (int t = 0; t < d->seq_len && !any; t++)
            any = d->attn_mask[(size_t)s * d->seq_len + t] != 0;
        if (!any)
            return hp_fail(err, HP_ERR_ARG,
                           "%s: row %d (counting from 0) is all padding (its attention_mask is all 0): remove it", d->path, s);
    }
    return HP_OK;
}

enum hp_status hp_evaluator_new(struct hp_model *m, const struct hp_data *d, struct hp_evaluator **out,
                                struct hp_error *err)
{
    *out = NULL;
    const struct hp_model_info *in = &m->info;
    if (in->causal && d->seq_len < 2)
        return hp_fail(err, HP_ERR_SHAPE, "%s: sequences of %d token predict nothing (need at least 2)", d->path, d->seq_len);
    enum hp_status st = hp_eval_check_data(m, d, err);
    if (st != HP_OK)
        return st;
    const bool has_cls = m->classifier.p != NULL;
    if (has_cls && !d->seq_labels)
        return hp_fail(err, HP_ERR_ARG,
                       "%s: %s is a sequence classifier (%d classes) but the data has no \"label\" per row", d->path,
                       m->dir, in->n_labels);
    for (int i = 0; has_cls && i < d->n_seqs; i++)
        if (d->seq_labels[i] < 0 || d->seq_labels[i] >= in->n_labels)
            return hp_fail(err, HP_ERR_ARG, "%s: label %d of row %d is not one of the model's %d classes (0..%d)",
                           d->path, d->seq_labels[i], i, in->n_labels, in->n_labels - 1);
    bool has_loss = in->causal || (m->lm_head.p && d->labels) || has_cls;
    if (!in->causal && m->lm_head.p && !d->labels)
        return hp_fail(err, HP_ERR_ARG,
                       "%s: %s has an MLM head but the data has no \"labels\" (give labels with -100 for unscored positions)",
                       d->path, m->dir);
    struct hp_evaluator *ev = calloc(1, sizeof *ev);
    if (!ev)
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    ev->m = m;
    ev->d = d;
    ev->has_loss = has_loss;
    ev->has_cls = has_cls;
    ev->width = hp_fwd_out_width(m);
    /* Sequences go through the forward together, so the products have about
     * HP_CHUNK_ROWS rows, within HP_CHUNK_BYTES of outputs per buffer. */
    size_t per = (size_t)d->seq_len * ev->width * sizeof(float);
    int b = HP_CHUNK_ROWS / d->seq_len;
    while (b > 1 && (size_t)b * per > HP_CHUNK_BYTES)
        b--;
    ev->batch = b < 1 ? 1 : b > d->n_seqs ? d->n_seqs : b;
    ev->tok = malloc((size_t)d->seq_len * sizeof *ev->tok);
    ev->tok_ok = malloc((size_t)d->seq_len);
    if (!ev->tok || !ev->tok_ok) {
        hp_evaluator_free(ev);
        return hp_fail(err, HP_ERR_NOMEM, "out of memory for a %d-token workspace", d->seq_len);
    }
    *out = ev;
    return HP_OK;
}

void hp_evaluator_free(struct hp_evaluator *ev)
{
    if (!ev)
        return;
    hp_fwd_free(ev->fwd);
    free(ev->out_m);
    free(ev->out_b);
    free(ev->base_all);
    free(ev->base_lse);
    free(ev->tok);
    free(ev->tok_ok);
    hp_ablation_state_clear(&ev->abl);
    free(ev->base_cls);
    hp_metrics_free(ev->kept);
    free(ev->kept_gate);
    if (ev->ru)
        ev->ru_free(ev->ru);
    if (ev->gs)
        ev->gs_free(ev->gs);
    free(ev);
}

const struct hp_model *hp_eval_model(const struct hp_evaluator *ev)
{
    return ev->m;
}

const struct hp_data *hp_eval_data(const struct hp_evaluator *ev)
{
    return ev->d;
}

void hp_evaluator_keep_grad_metrics(struct hp_evaluator *ev, bool on)
{
    ev->keep_grad_metrics = on;
}

void hp_evaluator_set_plain(struct hp_evaluator *ev, bool plain)
{
    ev->plain = plain;
}

void hp_evaluator_set_progress(struct hp_evaluator *ev, void (*fn)(void *, int, int), void *user)
{
    ev->progress = fn;
    ev->progress_user = user;
}

/* Scored per item from the logits: a model with a loss on its data; per sequence: an encoder without a head. */
/* Whether data d holds what a metric needs (docs/tasks.md). */
static bool data_meets(const struct hp_data *d, enum hp_metric_needs needs)
{
    const struct hp_task *k = d->task;
    switch (needs) {
    case HP_NEEDS_NOTHING:
        return true;
    case HP_NEEDS_ANSWERS:
        return k != NULL;
    case HP_NEEDS_WRONG:
        return k && k->wrong;
    case HP_NEEDS_PAIR:
        return k && k->wrong && k->corrupt;
    }
    return false;
}

static bool produces(const struct hp_evaluator *ev, enum hp_metric m)
{
    const struct hp_metric_row *r = hp_metric_row(m);
    return r->score == HP_SCORE_TOKENS ? ev->has_loss && data_meets(ev->d, r->needs) : !ev->has_loss;
}

bool hp_evaluator_has_metric(const struct hp_evaluator *ev, const char *metric)
{
    enum hp_metric m;
    return hp_metric_parse(metric, &m) && produces(ev, m);
}

void hp_foreign_warning(char *buf, size_t n, const char *data, const char *model, double unmasked_loss,
                        double unmasked_acc)
{
    snprintf(buf, n,
             "%s looks made for another model: unmasked, %s predicts %.0f%% of its tokens at a loss of %.3f nats, "
             "near or above guessing uniformly (ids from another tokenizer? an untrained model?)",
             data, model, 100 * unmasked_acc, unmasked_loss);
}

bool hp_evaluator_looks_foreign(const struct hp_evaluator *ev, double unmasked_loss, double unmasked_acc)
{
    /* a trained model on its own kind of data predicts a good share of it, at a loss far below
     * log(V) (GPT-2: 3.3 against 10.8); none right and a loss above half of log(V) is another's data */
    return ev->has_loss && ev->width > 1 && unmasked_acc == 0.0 && unmasked_loss > 0.5 * log((double)ev->width);
}

enum hp_status hp_evaluator_pick_metric(const struct hp_evaluator *ev, const char *plan_path, const char *asked,
                                        const char **out, struct hp_error *err)
{
    *out = NULL;
    for (int i = 0; i < HP_N_METRICS; i++) {
        const char *name = hp_metric_name((enum hp_metric)i);
        if (asked[0] ? strcmp(asked, name) == 0 : hp_evaluator_has_metric(ev, name)) {
            *out = name;
            break;
        }
    }
    if (*out && hp_evaluator_has_metric(ev, *out))
        return HP_OK;
    const struct hp_model_info *in = &ev->m->info;
    enum hp_metric m;
    if (ev->has_loss && hp_metric_parse(asked, &m) && hp_metric_row(m)->needs != HP_NEEDS_NOTHING) {
        static const char *const need[] = {
            [HP_NEEDS_ANSWERS] = "task rows (a prompt and its one-token answer)",
            [HP_NEEDS_WRONG] = "task rows with a wrong answer (\"wrong\" or \"wrong_id\")",
            [HP_NEEDS_PAIR] = "task rows with a wrong answer and a corrupt prompt (\"corrupt\" or \"corrupt_ids\")",
        };
        return hp_fail(err, HP_ERR_PLAN, "%s: metric '%s' needs %s, which %s does not have (docs/tasks.md)", plan_path,
                       asked, need[hp_metric_row(m)->needs], ev->d->path);
    }
    const char *why = ev->has_loss ? "its metrics are loss, kl and acc (cos is for encoders without a head)"
                      : in->has_lm_head ? "its data has no \"labels\", so its only metric is cos"
                                        : "it has no LM head or classifier, so its only metric is cos, the similarity "
                                          "of its embeddings to the unmasked model's";
    return hp_fail(err, HP_ERR_PLAN, "%s: metric '%s' is not one that %s (%s) produces on %s: %s", plan_path, asked,
                   ev->m->dir, in->model_type, ev->d->path, why);
}

/* Sequences in the chunk that starts at sequence s. */
int hp_eval_chunk_len(const struct hp_evaluator *ev, int s)
{
    int left = ev->d->n_seqs - s;
    return left < ev->batch ? left : ev->batch;
}

/* The pass's inputs: sequences [s, s + nb). */
struct hp_fwd_in hp_eval_chunk_in(const struct hp_evaluator *ev, int s, int nb)
{
    return hp_fwd_in_rows(ev->d, s, nb);
}

struct hp_fwd_variants hp_eval_chunk_variants(const struct hp_evaluator *ev, enum hp_ablation abl, int s, int nb,
                                              const struct hp_mask *const *masks, int k, const struct hp_eval_blocks *b)
{
    const int T = ev->d->seq_len;
    struct hp_fwd_variants va = {
        .n_blocks = k,
        .gates = b->gates,
        .rep = hp_ablation_kinds[abl].replacement(&ev->abl, &ev->m->info, T, s, nb, false),
        .mlps = b->mlps,
        .mlp_rep = hp_ablation_kinds[abl].replacement(&ev->abl, &ev->m->info, T, s, nb, true)};
    bool one = false, edges = false;
    for (int v = 0; v < k; v++) {
        b->gates[v] = masks[v] ? masks[v]->gate : NULL;
        b->mlps[v] = masks[v] ? masks[v]->mlp : NULL;
        b->pos[v] = masks[v] ? masks[v]->pos : -1;
        one |= b->pos[v] >= 0;
        edges |= hp_mask_has_edges(masks[v]);
    }
    assert(!edges || (b->edges && b->n_edges));
    for (int v = 0; edges && v < k; v++) {
        b->edges[v] = masks[v] ? masks[v]->edges : NULL;
        b->n_edges[v] = masks[v] ? masks[v]->n_edges : 0;
    }
    if (edges)
        va.edges = b->edges, va.n_edges = b->n_edges;
    if (one) /* hp_evaluator_run_many made own ready */
        va.rep = hp_ablation_at_position(va.rep, &ev->abl, &ev->m->info, ev->d->n_seqs, T, s, nb, b->pos);
    return va;
}

enum hp_status hp_eval_edges_ready(const struct hp_evaluator *ev, struct hp_fwd *w, const struct hp_mask *const *masks,
                                   int n, struct hp_error *err)
{
    for (int i = 0; i < n; i++)
        if (hp_mask_has_edges(masks[i]))
            return hp_fwd_edges_ready(ev->m, w) ? HP_OK
                                                : hp_fail(err, HP_ERR_NOMEM, "out of memory for the senders' outputs "
                                                          "a pass with edges keeps (every layer's, %d-row chunks)",
                                                          ev->batch * ev->d->seq_len);
    return HP_OK;
}

/* One variant block's room (struct hp_eval_blocks). */
struct one_block {
    const float *gate, *mlp;
    int pos, n_edges;
    const struct hp_edge *edges;
};

static struct hp_eval_blocks one_block(struct one_block *o)
{
    return (struct hp_eval_blocks){&o->gate, &o->mlp, &o->pos, &o->edges, &o->n_edges};
}

/* Forward sequences [s, s + nb) under mask (NULL: unmasked) into out (nb, seq_len, width); with out NULL the pass
 * stops before the LM head. */
static void run_chunk(struct hp_evaluator *ev, int s, int nb, const struct hp_mask *mask, enum hp_ablation abl,
                      float *out, double *capture)
{
    struct hp_fwd_in fi = hp_eval_chunk_in(ev, s, nb);
    struct one_block o;
    const struct hp_eval_blocks b = one_block(&o);
    struct hp_fwd_variants va = hp_eval_chunk_variants(ev, abl, s, nb, &mask, 1, &b);
    struct hp_fwd_taps tp = {.capture = capture, .out = out};
    hp_fwd_run(ev->m, ev->fwd, &fi, &va, &tp);
}

/* The plain path's workspace and output buffer (and with outputs false, only the workspace), once. */
static enum hp_status plain_ready(struct hp_evaluator *ev, bool outputs, struct hp_error *err)
{
    const size_t n = (size_t)ev->batch * ev->d->seq_len * ev->width;
    if (!ev->fwd && !(ev->fwd = hp_fwd_new(ev->m, ev->d->seq_len, ev->batch)))
        return hp_fail(err, HP_ERR_NOMEM, "out of memory for a %d-token workspace", ev->d->seq_len);
    if (outputs && !ev->out_m && !(ev->out_m = malloc(n * sizeof(float))))
        return hp_fail(err, HP_ERR_NOMEM, "out of memory for a chunk's outputs (%zu MB)", n * sizeof(float) >> 20);
    return HP_OK;
}

static bool all_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

/*
 * Where a pass under gate first makes a number that is not finite, into
 * where: "the embeddings", "layer l's attention", "layer l's MLP", "the
 * final layer norm" or "the output head". Runs the chunks again with a save
 * of every layer (only when a metric has already come out non-finite).
 */
static void locate_nonfinite(struct hp_evaluator *ev, const struct hp_mask *mask, enum hp_ablation abl, char *where,
                             size_t n)
{
    snprintf(where, n, "the output head");
    struct hp_error ignored;
    const struct hp_model_info *in = &ev->m->info;
    const size_t R = (size_t)ev->batch * ev->d->seq_len, D = (size_t)in->d_model, L = (size_t)in->n_layers,
                 qd = (size_t)in->n_heads * in->d_head;
    float *buf = malloc(L * R * (2 * D + qd) * sizeof(float));
    if (!buf || plain_ready(ev, false, &ignored) != HP_OK) {
        free(buf);
        return;
    }
    struct hp_fwd_save save = {.x = buf, .attn = buf + L * R * D, .ctx = buf + 2 * L * R * D};
    for (int s0 = 0; s0 < ev->d->n_seqs; s0 += ev->batch) {
        const int nb = hp_eval_chunk_len(ev, s0);
        const size_t rows = (size_t)nb * ev->d->seq_len;
        struct hp_fwd_in fi = hp_eval_chunk_in(ev, s0, nb);
        struct one_block o;
        const struct hp_eval_blocks b = one_block(&o);
        struct hp_fwd_variants va = hp_eval_chunk_variants(ev, abl, s0, nb, &mask, 1, &b);
        struct hp_fwd_taps tp = {.save = &save};
        const float *h = hp_fwd_run(ev->m, ev->fwd, &fi, &va, &tp);
        for (size_t l = 0; l < L; l++) {
            if (!all_finite(save.x + l * rows * D, rows * D)) {
                if (l == 0)
                    snprintf(where, n, "the embeddings");
                else
                    snprintf(where, n, "layer %zu's MLP", l - 1);
                free(buf);
                return;
            }
            if (!all_finite(save.attn + l * rows * D, rows * D)) {
                snprintf(where, n, "layer %zu's attention", l);
                free(buf);
                return;
            }
        }
        if (!all_finite(h, rows * D)) {
            snprintf(where, n, "layer %zu's MLP or the final layer norm", L - 1);
            break;
        }
    }
    free(buf);
}

/* The ablation's prepare step asks where a pass goes non-finite: the unmasked model's. */
static void locate_unmasked(void *user, char *where, size_t n)
{
    locate_nonfinite(user, NULL, HP_ABLATE_ZERO, where, n);
}

enum hp_status hp_eval_ablation_ready(struct hp_evaluator *ev, enum hp_ablation abl, bool mlps, struct hp_error *err)
{
    const struct hp_ablation_kind *k = &hp_ablation_kinds[abl];
    if (!k->prepare)
        return HP_OK;
    enum hp_status st = plain_ready(ev, false, err);
    if (st != HP_OK)
        return st;
    const struct hp_ablation_src src = {.m = ev->m, .d = ev->d, .fwd = ev->fwd, .batch = ev->batch,
                                        .locate_nonfinite = locate_unmasked, .user = ev, .mlps = mlps};
    return k->prepare(&ev->abl, &src, err);
}

enum hp_status hp_eval_own_ready(struct hp_evaluator *ev, struct hp_error *err)
{
    enum hp_status st = plain_ready(ev, false, err);
    if (st != HP_OK)
        return st;
    const struct hp_ablation_src src = {.m = ev->m, .d = ev->d, .fwd = ev->fwd, .batch = ev->batch,
                                        .locate_nonfinite = locate_unmasked, .user = ev};
    return hp_ablation_own_ready(&ev->abl, &src, err);
}

enum hp_status hp_evaluator_means(struct hp_evaluator *ev, struct hp_means *out, struct hp_error *err)
{
    enum hp_status st = hp_eval_ablation_ready(ev, HP_ABLATE_MEAN, true, err);
    if (st != HP_OK)
        return st;
    const struct hp_model_info *in = &ev->m->info;
    *out = (struct hp_means){in->n_layers,       ev->d->seq_len,        in->n_heads * in->d_head,
                             ev->abl.mean_all,   ev->abl.mean_pos,      in->d_model,
                             ev->abl.mlp_mean_all, ev->abl.mlp_mean_pos};
    return HP_OK;
}

enum hp_status hp_evaluator_set_means(struct hp_evaluator *ev, const struct hp_means *m, struct hp_error *err)
{
    return hp_ablation_set_means(&ev->abl, &ev->m->info, ev->d->seq_len, m, err);
}

double hp_eval_row_lse(const float *z, int V)
{
    float mx = z[0];
    for (int i = 1; i < V; i++)
        if (z[i] > mx)
            mx = z[i];
    double s = 0;
    for (int i = 0; i < V; i++)
        s += exp((double)z[i] - mx);
    return mx + log(s);
}

static int row_argmax(const float *z, int V)
{
    int best = 0;
    for (int i = 1; i < V; i++)
        if (z[i] > z[best])
            best = i;
    return best;
}

/* Unmasked outputs are the reference of every variant: keep them when they fit. */
#define HP_BASE_CACHE_MAX ((size_t)512 << 20)

/*
 * The unmasked outputs of sequences [s, s + nb), as run_chunk makes them, and
 * (into *lse, NULL when not kept) each row's log-sum-exp. NULL when out of memory.
 */
static const float *baseline_output(struct hp_evaluator *ev, int s, int nb, const double **lse)
{
    const struct hp_data *d = ev->d;
    size_t per = (size_t)d->seq_len * ev->width, rows = (size_t)d->n_seqs * d->seq_len;
    if (!ev->base_all && per * d->n_seqs * sizeof(float) <= HP_BASE_CACHE_MAX) {
        float *all = malloc(per * d->n_seqs * sizeof(float));
        double *l = ev->has_loss ? malloc(rows * sizeof(double)) : NULL;
        if (all && (l || !ev->has_loss)) {
            /* the same chunks as the variants', so the reference is computed exactly as they are */
            for (int i = 0; i < d->n_seqs; i += ev->batch)
                run_chunk(ev, i, hp_eval_chunk_len(ev, i), NULL, HP_ABLATE_ZERO, all + per * i, NULL);
            for (size_t r = 0; l && r < rows; r++)
                l[r] = hp_eval_row_lse(all + r * ev->width, ev->width);
            ev->base_all = all;
            ev->base_lse = l;
        } else {
            free(all);
            free(l);
        }
    }
    if (ev->base_all) {
        *lse = ev->base_lse ? ev->base_lse + (size_t)s * d->seq_len : NULL;
        return ev->base_all + per * s;
    }
    *lse = NULL;
    if (!ev->out_b && !(ev->out_b = malloc((size_t)ev->batch * per * sizeof(float))))
        return NULL;
    run_chunk(ev, s, nb, NULL, HP_ABLATE_ZERO, ev->out_b, NULL);
    return ev->out_b;
}

/* The token position t is scored against *target, or not at all. Task rows (docs/tasks.md, causal only: bound
 * by hp_eval_check_data) score one position, the answer's. */
bool hp_eval_target_at(const struct hp_data *d, bool causal, int s, int t, int32_t *target)
{
    size_t row = (size_t)s * d->seq_len;
    if (d->task) {
        if (!causal || t != d->task->pos[s])
            return false;
        *target = d->task->answer[s];
        return true;
    }
    if (causal) {
        if (t + 1 >= d->seq_len)
            return false;
        if (d->attn_mask && (!d->attn_mask[row + t + 1] || !d->attn_mask[row + t]))
            return false;
        *target = d->labels ? d->labels[row + t + 1] : d->ids[row + t + 1];
    } else {
        if (d->attn_mask && !d->attn_mask[row + t])
            return false;
        *target = d->labels[row + t];
    }
    return *target != -100;
}

int32_t hp_eval_wrong_of(const struct hp_data *d, int s)
{
    return d->task && d->task->wrong ? d->task->wrong[s] : -1;
}

int hp_eval_find_scored(const struct hp_evaluator *ev, int s0, int nb, int *row, int32_t *y, int32_t *w)
{
    const int T = ev->d->seq_len;
    int n = 0;
    for (int b = 0; b < nb; b++)
        for (int t = 0; t < T; t++)
            if (hp_eval_target_at(ev->d, ev->m->info.causal, s0 + b, t, &y[n])) {
                if (w)
                    w[n] = hp_eval_wrong_of(ev->d, s0 + b);
                row[n++] = b * T + t;
            }
    return n;
}

/*
 * Dimension i of sequence s's sentence embedding from outputs a (seq_len, D),
 * pooled over its real tokens as the model declares: mean
 * (sentence-transformers' default), the first token, or the maximum. *row
 * (may be NULL) gets the row the value came from (the first real row for
 * CLS, the first row holding the maximum; -1 for mean or no real token).
 */
double hp_eval_pool_dim(const struct hp_data *d, enum hp_pooling mode, int s, const float *a, int D, int i, int *row)
{
    const size_t base = (size_t)s * d->seq_len;
    double p = 0;
    int n = 0, at = -1;
    for (int t = 0; t < d->seq_len; t++)
        if (!d->attn_mask || d->attn_mask[base + t]) {
            double x = a[(size_t)t * D + i];
            if (mode == HP_POOL_MAX) {
                if (!n || x > p)
                    at = t;
                p = n ? fmax(p, x) : x;
            } else {
                p += x;
            }
            n++;
            if (mode == HP_POOL_CLS) {
                at = t;
                break;
            }
        }
    if (n && mode == HP_POOL_MEAN)
        p /= n;
    if (row)
        *row = mode == HP_POOL_MEAN ? -1 : at;
    return p;
}

/* Cosine between the sentence embeddings (hp_eval_pool_dim) of sequence s from outputs a and b (seq_len, D). */
double hp_eval_pooled_cos(const struct hp_data *d, enum hp_pooling mode, int s, const float *a, const float *b, int D)
{
    double dot = 0, na = 0, nb = 0;
    for (int i = 0; i < D; i++) {
        const double pa = hp_eval_pool_dim(d, mode, s, a, D, i, NULL), pb = hp_eval_pool_dim(d, mode, s, b, D, i, NULL);
        dot += pa * pb;
        na += pa * pa;
        nb += pb * pb;
    }
    if (!isfinite(dot) || !isfinite(na) || !isfinite(nb))
        return NAN; /* reported by metrics_finish, never a cosine of 0 */
    return (na > 0 && nb > 0) ? dot / sqrt(na * nb) : 0.0;
}

/* 1 when sequence s's real rows of x (seq_len, D) are finite (the unmasked model's own cosine), else NaN. */
double hp_eval_self_cos(const struct hp_data *d, int s, const float *x, int D)
{
    for (int t = 0; t < d->seq_len; t++)
        if (!d->attn_mask || d->attn_mask[(size_t)s * d->seq_len + t])
            for (int i = 0; i < D; i++)
                if (!isfinite(x[(size_t)t * D + i]))
                    return NAN;
    return 1.0;
}

void hp_metrics_free(struct hp_metrics *mt)
{
    if (!mt)
        return;
    for (int k = 0; k < HP_N_METRICS; k++)
        free(mt->seq[k]);
    free(mt->seq_tokens);
    free(mt);
}

/* Sequence s's sums over its nt scored items into its per-sequence means and the totals. */
void hp_eval_record_seq(struct hp_metrics *mt, struct hp_eval_totals *tot, int s, const double sum[HP_N_METRICS],
                        int64_t nt)
{
    mt->seq_tokens[s] = nt;
    for (int k = 0; k < HP_N_METRICS; k++)
        if (hp_metric_row((enum hp_metric)k)->score == HP_SCORE_TOKENS) {
            mt->seq[k][s] = nt ? sum[k] / nt : 0;
            tot->sum[k] += sum[k];
        }
    tot->tokens += nt;
}

/*
 * Metrics of sequence s from its masked outputs zm and unmasked outputs zb
 * (seq_len, width), into mt's per-sequence arrays and tot. lse_b: the rows'
 * log-sum-exp of zb when already known, else NULL. The per-token terms run in
 * parallel (the vocabulary-wide reductions are the expensive part) and are
 * summed in token order, so the result does not depend on the thread count.
 */
static void score_seq(struct hp_evaluator *ev, struct hp_metrics *mt, struct hp_eval_totals *tot, int s,
                      const float *zm_seq, const float *zb_seq, const double *lse_b, bool scaled)
{
    const struct hp_data *d = ev->d;
    const int W = ev->width, T = d->seq_len;
    if (!ev->has_loss) {
        int64_t nt = 0;
        for (int t = 0; t < T; t++)
            nt += !d->attn_mask || d->attn_mask[(size_t)s * T + t];
        mt->seq_tokens[s] = nt;
        mt->seq[HP_METRIC_COS][s] = scaled ? hp_eval_pooled_cos(d, ev->m->info.pooling, s, zb_seq, zm_seq, W)
                                           : hp_eval_self_cos(d, s, zm_seq, W);
        tot->sum[HP_METRIC_COS] += mt->seq[HP_METRIC_COS][s];
        tot->tokens += nt;
        return;
    }
    /* what is known of each token, in parallel; scored by the metrics' rows in token order after */
    struct hp_token_facts *tf = ev->tok;
    uint8_t *ok = ev->tok_ok;
    const bool causal = ev->m->info.causal;
    const int32_t wrong = hp_eval_wrong_of(d, s);
#pragma omp parallel for schedule(dynamic, 8) if (T * (size_t)W >= 65536)
    for (int t = 0; t < T; t++) {
        int32_t y;
        ok[t] = hp_eval_target_at(d, causal, s, t, &y);
        if (!ok[t])
            continue;
        const float *zm = zm_seq + (size_t)t * W, *zb = zb_seq + (size_t)t * W;
        double lse_m = hp_eval_row_lse(zm, W);
        tf[t].loss = lse_m - zm[y];
        tf[t].top1 = row_argmax(zm, W) == y;
        tf[t].kl = 0;
        tf[t].ld = wrong >= 0 ? (double)zm[y] - zm[wrong] : 0;
        if (scaled) {
            double lse = lse_b ? lse_b[t] : hp_eval_row_lse(zb, W), kl = 0;
            for (int v = 0; v < W; v++) {
                double lb = zb[v] - lse, lm = zm[v] - lse_m;
                kl += exp(lb) * (lb - lm);
            }
            tf[t].kl = kl;
        }
    }
    double sum[HP_N_METRICS] = {0};
    int64_t nt = 0;
    for (int t = 0; t < T; t++)
        if (ok[t]) {
            hp_metric_add_token(sum, &tf[t]);
            nt++;
        }
    hp_eval_record_seq(mt, tot, s, sum, nt);
}

/*
 * Sequence s of a classifier: loss (cross-entropy against its label),
 * accuracy and, against the unmasked logits zb (NULL: the same model), KL.
 * One scored item per sequence.
 */
void hp_eval_score_cls(const struct hp_evaluator *ev, struct hp_metrics *mt, struct hp_eval_totals *tot, int s,
                       const float *zm, const float *zb)
{
    const int C = ev->m->info.n_labels, y = ev->d->seq_labels[s];
    double lse_m = hp_eval_row_lse(zm, C), kl = 0;
    if (zb) {
        double lse_b = hp_eval_row_lse(zb, C);
        for (int c = 0; c < C; c++) {
            double lb = zb[c] - lse_b, lm = zm[c] - lse_m;
            kl += exp(lb) * (lb - lm);
        }
    }
    const struct hp_token_facts f = {.loss = lse_m - zm[y], .top1 = row_argmax(zm, C) == y, .kl = kl};
    double sum[HP_N_METRICS] = {0};
    hp_metric_add_token(sum, &f);
    hp_eval_record_seq(mt, tot, s, sum, 1);
}

/* The unmasked model's class logits for every sequence, once. */
static enum hp_status ensure_base_cls(struct hp_evaluator *ev, struct hp_error *err)
{
    if (ev->base_cls)
        return HP_OK;
    const int C = ev->m->info.n_labels;
    if (!(ev->base_cls = malloc((size_t)ev->d->n_seqs * C * sizeof(float))))
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    for (int s = 0; s < ev->d->n_seqs; s += ev->batch)
        run_chunk(ev, s, hp_eval_chunk_len(ev, s), NULL, HP_ABLATE_ZERO, ev->base_cls + (size_t)s * C, NULL);
    return HP_OK;
}

struct hp_metrics *hp_eval_metrics_new(const struct hp_evaluator *ev)
{
    struct hp_metrics *mt = calloc(1, sizeof *mt);
    if (!mt)
        return NULL;
    size_t ns = (size_t)ev->d->n_seqs;
    bool ok = (mt->seq_tokens = calloc(ns, sizeof(int64_t))) != NULL;
    for (int k = 0; k < HP_N_METRICS; k++) {
        ok = ok && (mt->seq[k] = calloc(ns, sizeof(double))) != NULL;
        mt->has[k] = produces(ev, (enum hp_metric)k);
    }
    if (!ok) {
        hp_metrics_free(mt);
        return NULL;
    }
    mt->n_seqs = ev->d->n_seqs;
    return mt;
}

/* The unmasked model's mean logit_diff over the rows of d, whose prompts are ids (d->ids or d->task->corrupt). */
static double unmasked_ld(struct hp_evaluator *ev, const int32_t *ids)
{
    const struct hp_data *d = ev->d;
    const int T = d->seq_len, W = ev->width;
    const float *gate = NULL;
    double sum = 0;
    for (int s0 = 0; s0 < d->n_seqs; s0 += ev->batch) {
        const int nb = hp_eval_chunk_len(ev, s0);
        struct hp_fwd_in fi = hp_fwd_in_rows(d, s0, nb);
        fi.ids = ids + (size_t)s0 * T;
        struct hp_fwd_variants va = {.gates = &gate};
        struct hp_fwd_taps tp = {.out = ev->out_m};
        hp_fwd_run(ev->m, ev->fwd, &fi, &va, &tp);
        for (int j = 0; j < nb; j++) {
            const int s = s0 + j;
            const float *z = ev->out_m + ((size_t)j * T + d->task->pos[s]) * W;
            sum += (double)z[d->task->answer[s]] - z[d->task->wrong[s]];
        }
    }
    return sum / d->n_seqs;
}

/* The ends of the recovery metrics (ev->ld_clean, ld_corrupt), once, where the data has them. */
static enum hp_status task_ends_ready(struct hp_evaluator *ev, struct hp_error *err)
{
    if (ev->ends_ready || !data_meets(ev->d, HP_NEEDS_PAIR))
        return HP_OK;
    enum hp_status st = plain_ready(ev, true, err);
    if (st != HP_OK)
        return st;
    /* denoise's data is swapped (hp_ablation_bind_data): its ids are the corrupt prompts, task->corrupt the clean */
    const struct hp_task *k = ev->d->task;
    ev->ld_clean = unmasked_ld(ev, k->swapped ? k->corrupt : ev->d->ids);
    ev->ld_corrupt = unmasked_ld(ev, k->swapped ? ev->d->ids : k->corrupt);
    ev->ends_ready = true;
    return HP_OK;
}

/* A recovery metric's values, from the logit differences its scorer summed: (x - corrupt) / (clean - corrupt). */
static enum hp_status finish_recovery(struct hp_evaluator *ev, struct hp_metrics *mt, int k, struct hp_error *err)
{
    enum hp_status st = task_ends_ready(ev, err);
    if (st != HP_OK)
        return st;
    const double span = ev->ld_clean - ev->ld_corrupt;
    if (!isfinite(span))
        return hp_fail(err, HP_ERR_FORMAT,
                       "%s: the unmasked model's mean logit_diff on %s is %g on the clean prompts and %g on the corrupt "
                       "ones, not a finite number, so %s is undefined (check the weights and config.json, e.g. its "
                       "layer norm epsilon); nothing is recorded", ev->m->dir, ev->d->path, ev->ld_clean,
                       ev->ld_corrupt, hp_metric_name((enum hp_metric)k));
    if (span == 0)
        return hp_fail(err, HP_ERR_ARG,
                       "%s: the unmasked model's mean logit_diff is %g on the clean prompts and %g on the corrupt "
                       "ones, so %s (a fraction of their difference) is undefined: give prompt pairs whose "
                       "corruption changes the answer", ev->d->path, ev->ld_clean, ev->ld_corrupt,
                       hp_metric_name((enum hp_metric)k));
    mt->value[k] = (mt->value[k] - ev->ld_corrupt) / span;
    for (int s = 0; s < mt->n_seqs; s++)
        mt->seq[k][s] = (mt->seq[k][s] - ev->ld_corrupt) / span;
    return HP_OK;
}

enum hp_status hp_eval_metrics_finish(struct hp_evaluator *ev, struct hp_metrics *mt, const struct hp_eval_totals *tot,
                                      const struct hp_mask *mask, enum hp_ablation abl, struct hp_error *err)
{
    mt->n_tokens = tot->tokens;
    if (ev->has_loss && tot->tokens == 0)
        return hp_fail(err, HP_ERR_ARG, "%s: no token is scored (all labels are -100 or padding)", ev->d->path);
    const char *bad = NULL;
    double v = 0;
    for (int k = 0; k < HP_N_METRICS; k++) {
        if (!mt->has[k])
            continue;
        const struct hp_metric_row *r = hp_metric_row((enum hp_metric)k);
        mt->value[k] = tot->sum[k] / (r->reduce == HP_REDUCE_TOKENS ? (double)tot->tokens : (double)ev->d->n_seqs);
        enum hp_status st = r->recovery ? finish_recovery(ev, mt, k, err) : HP_OK;
        if (st != HP_OK)
            return st;
        if (!bad && !isfinite(mt->value[k]))
            bad = r->label, v = mt->value[k];
    }
    if (mt->has[HP_METRIC_LOSS])
        mt->ppl = exp(mt->loss);
    if (!bad)
        return HP_OK;
    char variant[96] = "the unmasked model", where[64];
    if (mask && hp_mask_first_changed(mask, ev->m->info.n_layers) < ev->m->info.n_layers) {
        char *spec = hp_mask_format(mask);
        if (spec && strlen(spec) > 48)
            snprintf(variant, sizeof variant, "the variant ablating %.40s... (%d heads, %d MLPs)", spec,
                     hp_mask_count_ablated(mask), hp_mask_count_mlps(mask));
        else
            snprintf(variant, sizeof variant, "the variant ablating %s", spec ? spec : "?");
        free(spec);
    }
    locate_nonfinite(ev, mask, abl, where, sizeof where);
    return hp_fail(err, HP_ERR_FORMAT,
                   "%s: %s gives a %s of %g on %s, first not finite in %s (check the weights and config.json, "
                   "e.g. its layer norm epsilon); nothing is recorded",
                   ev->m->dir, variant, bad, v, ev->d->path, where);
}

/* The plain path: one variant, every chunk through the whole model. */
enum hp_status hp_eval_run_plain(struct hp_evaluator *ev, const struct hp_mask *mask, enum hp_ablation abl,
                                struct hp_metrics *mt, struct hp_eval_totals *tot, struct hp_error *err)
{
    const struct hp_data *d = ev->d;
    enum hp_status st = plain_ready(ev, true, err);
    if (st == HP_OK)
        st = hp_eval_edges_ready(ev, ev->fwd, &mask, 1, err);
    if (st != HP_OK)
        return st;
    bool scaled = hp_mask_first_changed(mask, ev->m->info.n_layers) < ev->m->info.n_layers;
    if (ev->has_cls) {
        const int C = ev->m->info.n_labels;
        if (scaled && (st = ensure_base_cls(ev, err)) != HP_OK)
            return st;
        for (int s0 = 0; s0 < d->n_seqs; s0 += ev->batch) {
            int nb = hp_eval_chunk_len(ev, s0);
            run_chunk(ev, s0, nb, mask, abl, ev->out_m, NULL);
            for (int j = 0; j < nb; j++)
                hp_eval_score_cls(ev, mt, tot, s0 + j, ev->out_m + (size_t)j * C,
                          scaled ? ev->base_cls + (size_t)(s0 + j) * C : NULL);
            if (ev->progress)
                ev->progress(ev->progress_user, s0 + nb, d->n_seqs);
        }
        return HP_OK;
    }
    const size_t per = (size_t)d->seq_len * ev->width;
    for (int s0 = 0; s0 < d->n_seqs; s0 += ev->batch) {
        int nb = hp_eval_chunk_len(ev, s0);
        run_chunk(ev, s0, nb, mask, abl, ev->out_m, NULL);
        /* the unmasked reference; with nothing changed it is the same pass */
        const float *base = ev->out_m;
        const double *lse_b = NULL;
        if (scaled && !(base = baseline_output(ev, s0, nb, &lse_b)))
            return hp_fail(err, HP_ERR_NOMEM, "out of memory for the unmasked reference");
        for (int j = 0; j < nb; j++) {
            score_seq(ev, mt, tot, s0 + j, ev->out_m + per * j, base + per * j,
                      lse_b ? lse_b + (size_t)j * d->seq_len : NULL, scaled);
            if (ev->progress)
                ev->progress(ev->progress_user, s0 + j + 1, d->n_seqs);
        }
    }
    return HP_OK;
}

bool hp_eval_kept_matches(const struct hp_evaluator *ev, const struct hp_mask *mask, enum hp_ablation abl)
{
    const int L = ev->m->info.n_layers, HH = L * ev->m->info.n_heads;
    if (!ev->kept)
        return false;
    const bool unmasked = hp_mask_first_changed(mask, L) == L;
    if (!ev->kept_gate || unmasked) /* nothing changed: the ablation does not matter */
        return !ev->kept_gate && unmasked;
    /* a gradient pass's gates are the heads' at every position (grad.c refuses a mask that changes an MLP or
     * patches one position or edges) */
    return abl == ev->kept_abl && !hp_mask_has_mlp(mask) && !hp_mask_has_edges(mask) && mask->pos < 0 &&
           memcmp(mask->gate, ev->kept_gate, (size_t)HH * sizeof(float)) == 0;
}

