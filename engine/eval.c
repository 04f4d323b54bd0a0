/*
 * eval.c -- evaluate masked variants on a held-out set and reduce to metrics.
 *
 * Owns the pairing of a model with data: validation of one against the
 * other, the unmasked reference each variant is compared with (KL, cosine),
 * the mean-ablation statistics (computed once, on first use), and the
 * per-sequence and token-weighted metrics. Reductions are in double.
 * Must not: print, exit, or know about files other than through hp_data.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "forward_int.h"
#include "util_int.h"

#define HP_CHUNK_ROWS 512
#define HP_CHUNK_BYTES ((size_t)128 << 20)

struct hp_evaluator {
    struct hp_model *m;
    const struct hp_data *d;
    struct hp_fwd *fwd;
    int batch;        /* sequences per forward call */
    int width;        /* forward output row width */
    bool has_loss;    /* causal LM, or MLM with labels */
    float *out_m;     /* (batch, seq_len, width) masked variant */
    float *out_b;     /* NULL or (batch, seq_len, width): the unmasked reference when base_all is too big */
    float *base_all;  /* NULL or (n_seqs, seq_len, width): every sequence's unmasked output, once */
    double *base_lse; /* NULL or (n_seqs, seq_len): log-sum-exp of each row of base_all (LMs) */
    double *tok;      /* (3, seq_len) per-token loss, correct, KL of one sequence */
    uint8_t *tok_ok;  /* (seq_len) whether the token is scored */
    float *mean_all;  /* NULL or (n_layers, n_heads * d_head) */
    float *mean_pos;  /* NULL or (n_layers, seq_len, n_heads * d_head) */
    void (*progress)(void *, int, int);
    void *progress_user;
};

enum hp_status hp_evaluator_new(struct hp_model *m, const struct hp_data *d, struct hp_evaluator **out,
                                struct hp_error *err)
{
    *out = NULL;
    const struct hp_model_info *in = &m->info;
    if (d->seq_len > in->n_ctx)
        return hp_fail(err, HP_ERR_SHAPE, "%s: sequences of %d tokens exceed the model's %d positions (use a shorter --seq-len)",
                       d->path, d->seq_len, in->n_ctx);
    if (in->causal && d->seq_len < 2)
        return hp_fail(err, HP_ERR_SHAPE, "%s: sequences of %d token predict nothing (need at least 2)", d->path, d->seq_len);
    enum hp_status st = hp_data_check_vocab(d, in->n_vocab, err);
    if (st != HP_OK)
        return st;
    if (d->type_ids) {
        if (in->arch != HP_ARCH_BERT)
            return hp_fail(err, HP_ERR_ARG, "%s: token_type_ids given but %s models have no token types", d->path, in->model_type);
        for (size_t i = 0; i < (size_t)d->n_seqs * d->seq_len; i++)
            if (d->type_ids[i] < 0 || d->type_ids[i] >= m->n_types)
                return hp_fail(err, HP_ERR_ARG, "%s: token type %d at row %zu, position %zu is outside the model's %d types",
                               d->path, d->type_ids[i], i / d->seq_len, i % d->seq_len, m->n_types);
    }
    bool has_loss = in->causal || (m->lm_head && d->labels);
    if (!in->causal && m->lm_head && !d->labels)
        return hp_fail(err, HP_ERR_ARG,
                       "%s: %s has an MLM head but the data has no \"labels\" (give labels with -100 for unscored positions)",
                       d->path, m->dir);
    struct hp_evaluator *ev = calloc(1, sizeof *ev);
    if (!ev)
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    ev->m = m;
    ev->d = d;
    ev->has_loss = has_loss;
    ev->width = hp_fwd_out_width(m);
    /* Sequences go through the forward together, so the products have about
     * HP_CHUNK_ROWS rows, within HP_CHUNK_BYTES of outputs per buffer. */
    size_t per = (size_t)d->seq_len * ev->width * sizeof(float);
    int b = HP_CHUNK_ROWS / d->seq_len;
    while (b > 1 && (size_t)b * per > HP_CHUNK_BYTES)
        b--;
    ev->batch = b < 1 ? 1 : b > d->n_seqs ? d->n_seqs : b;
    ev->fwd = hp_fwd_new(m, d->seq_len, ev->batch);
    size_t n = (size_t)ev->batch * d->seq_len * ev->width;
    ev->out_m = malloc(n * sizeof(float));
    ev->tok = malloc(3 * (size_t)d->seq_len * sizeof(double));
    ev->tok_ok = malloc((size_t)d->seq_len);
    if (!ev->fwd || !ev->out_m || !ev->tok || !ev->tok_ok) {
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
    free(ev->mean_all);
    free(ev->mean_pos);
    free(ev);
}

void hp_evaluator_set_progress(struct hp_evaluator *ev, void (*fn)(void *, int, int), void *user)
{
    ev->progress = fn;
    ev->progress_user = user;
}

/* Sequences in the chunk that starts at sequence s. */
static int chunk_len(const struct hp_evaluator *ev, int s)
{
    int left = ev->d->n_seqs - s;
    return left < ev->batch ? left : ev->batch;
}

/* Forward sequences [s, s + nb) into out (nb, seq_len, width). */
static void run_chunk(struct hp_evaluator *ev, int s, int nb, const float *gate, enum hp_ablation abl, float *out,
                      double *capture)
{
    const struct hp_data *d = ev->d;
    size_t off = (size_t)s * d->seq_len;
    const struct hp_model_info *in = &ev->m->info;
    size_t qd = (size_t)in->n_heads * in->d_head;
    struct hp_fwd_args a = {
        .ids = d->ids + off,
        .attn_mask = d->attn_mask ? d->attn_mask + off : NULL,
        .type_ids = d->type_ids ? d->type_ids + off : NULL,
        .T = d->seq_len,
        .n_seqs = nb,
        .gate = gate,
        .ablation = abl,
        .capture = capture,
        .out = out,
    };
    if (abl == HP_ABLATE_MEAN) {
        a.mean = ev->mean_all;
        a.mean_layer_stride = (ptrdiff_t)qd;
        a.mean_pos_stride = 0;
    } else if (abl == HP_ABLATE_MEAN_POS) {
        a.mean = ev->mean_pos;
        a.mean_layer_stride = (ptrdiff_t)(qd * d->seq_len);
        a.mean_pos_stride = (ptrdiff_t)qd;
    }
    hp_fwd_run(ev->m, ev->fwd, &a);
}

/* Head-output means of the unmasked model over the held-out set, once. */
static enum hp_status ensure_means(struct hp_evaluator *ev, struct hp_error *err)
{
    if (ev->mean_all)
        return HP_OK;
    const struct hp_data *d = ev->d;
    const struct hp_model_info *in = &ev->m->info;
    size_t T = (size_t)d->seq_len, L = (size_t)in->n_layers, qd = (size_t)in->n_heads * in->d_head;
    double *cap = calloc(L * T * qd, sizeof *cap);
    int64_t *cnt = calloc(T, sizeof *cnt);
    ev->mean_all = malloc(L * qd * sizeof(float));
    ev->mean_pos = malloc(L * T * qd * sizeof(float));
    if (!cap || !cnt || !ev->mean_all || !ev->mean_pos) {
        free(cap);
        free(cnt);
        free(ev->mean_all);
        free(ev->mean_pos);
        ev->mean_all = ev->mean_pos = NULL;
        return hp_fail(err, HP_ERR_NOMEM, "out of memory for mean-ablation statistics");
    }
    /* out_m is free scratch here: no variant is being evaluated yet */
    for (int s = 0; s < d->n_seqs; s += ev->batch)
        run_chunk(ev, s, chunk_len(ev, s), NULL, HP_ABLATE_ZERO, ev->out_m, cap);
    for (int s = 0; s < d->n_seqs; s++)
        for (size_t t = 0; t < T; t++)
            cnt[t] += !d->attn_mask || d->attn_mask[(size_t)s * T + t];
    int64_t total = 0;
    for (size_t t = 0; t < T; t++)
        total += cnt[t];
    for (size_t l = 0; l < L; l++)
        for (size_t i = 0; i < qd; i++) {
            double sum = 0;
            for (size_t t = 0; t < T; t++) {
                double v = cap[(l * T + t) * qd + i];
                sum += v;
                ev->mean_pos[(l * T + t) * qd + i] = cnt[t] ? (float)(v / (double)cnt[t]) : 0.0f;
            }
            ev->mean_all[l * qd + i] = total ? (float)(sum / (double)total) : 0.0f;
        }
    free(cap);
    free(cnt);
    return HP_OK;
}

/* log-sum-exp of a row, in double */
static double row_lse(const float *z, int V)
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
                run_chunk(ev, i, chunk_len(ev, i), NULL, HP_ABLATE_ZERO, all + per * i, NULL);
            for (size_t r = 0; l && r < rows; r++)
                l[r] = row_lse(all + r * ev->width, ev->width);
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

/* The token position t is scored against *target, or not at all. */
static bool target_at(const struct hp_data *d, bool causal, int s, int t, int32_t *target)
{
    size_t row = (size_t)s * d->seq_len;
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

static double mean_pooled_cos(const struct hp_data *d, int s, const float *a, const float *b, int D)
{
    size_t row = (size_t)s * d->seq_len;
    double dot = 0, na = 0, nb = 0;
    for (int i = 0; i < D; i++) {
        double pa = 0, pb = 0;
        int n = 0;
        for (int t = 0; t < d->seq_len; t++)
            if (!d->attn_mask || d->attn_mask[row + t]) {
                pa += a[(size_t)t * D + i];
                pb += b[(size_t)t * D + i];
                n++;
            }
        if (n) {
            pa /= n;
            pb /= n;
        }
        dot += pa * pb;
        na += pa * pa;
        nb += pb * pb;
    }
    return (na > 0 && nb > 0) ? dot / sqrt(na * nb) : 0.0;
}

void hp_metrics_free(struct hp_metrics *mt)
{
    if (!mt)
        return;
    free(mt->seq_loss);
    free(mt->seq_acc);
    free(mt->seq_kl);
    free(mt->seq_cos);
    free(mt->seq_tokens);
    free(mt);
}

/* Sums over scored tokens (and, for encoders, over sequences). */
struct totals {
    double loss, acc, kl, cos;
    int64_t tokens;
};

/*
 * Metrics of sequence s from its masked outputs zm and unmasked outputs zb
 * (seq_len, width), into mt's per-sequence arrays and tot. lse_b: the rows'
 * log-sum-exp of zb when already known, else NULL. The per-token terms run in
 * parallel (the vocabulary-wide reductions are the expensive part) and are
 * summed in token order, so the result does not depend on the thread count.
 */
static void score_seq(struct hp_evaluator *ev, struct hp_metrics *mt, struct totals *tot, int s, const float *zm_seq,
                      const float *zb_seq, const double *lse_b, bool scaled)
{
    const struct hp_data *d = ev->d;
    const int W = ev->width, T = d->seq_len;
    if (!ev->has_loss) {
        int64_t nt = 0;
        for (int t = 0; t < T; t++)
            nt += !d->attn_mask || d->attn_mask[(size_t)s * T + t];
        mt->seq_tokens[s] = nt;
        mt->seq_cos[s] = scaled ? mean_pooled_cos(d, s, zb_seq, zm_seq, W) : 1.0;
        tot->cos += mt->seq_cos[s];
        tot->tokens += nt;
        return;
    }
    double *tl = ev->tok, *ta = ev->tok + T, *tk = ev->tok + 2 * T;
    uint8_t *ok = ev->tok_ok;
    const bool causal = ev->m->info.causal;
#pragma omp parallel for schedule(dynamic, 8) if (T * (size_t)W >= 65536)
    for (int t = 0; t < T; t++) {
        int32_t y;
        ok[t] = target_at(d, causal, s, t, &y);
        if (!ok[t])
            continue;
        const float *zm = zm_seq + (size_t)t * W, *zb = zb_seq + (size_t)t * W;
        double lse_m = row_lse(zm, W);
        tl[t] = lse_m - zm[y];
        ta[t] = row_argmax(zm, W) == y;
        tk[t] = 0;
        if (scaled) {
            double lse = lse_b ? lse_b[t] : row_lse(zb, W), kl = 0;
            for (int v = 0; v < W; v++) {
                double lb = zb[v] - lse, lm = zm[v] - lse_m;
                kl += exp(lb) * (lb - lm);
            }
            tk[t] = kl;
        }
    }
    double sl = 0, sa = 0, sk = 0;
    int64_t nt = 0;
    for (int t = 0; t < T; t++)
        if (ok[t]) {
            sl += tl[t];
            sa += ta[t];
            sk += tk[t];
            nt++;
        }
    mt->seq_tokens[s] = nt;
    mt->seq_loss[s] = nt ? sl / nt : 0;
    mt->seq_acc[s] = nt ? sa / nt : 0;
    mt->seq_kl[s] = nt ? sk / nt : 0;
    tot->loss += sl;
    tot->acc += sa;
    tot->kl += sk;
    tot->tokens += nt;
}

enum hp_status hp_evaluator_run(struct hp_evaluator *ev, const struct hp_mask *mask, enum hp_ablation abl,
                                struct hp_metrics **out, struct hp_error *err)
{
    *out = NULL;
    const struct hp_data *d = ev->d;
    const struct hp_model_info *in = &ev->m->info;
    if (mask && (mask->n_layers != in->n_layers || mask->n_heads != in->n_heads))
        return hp_fail(err, HP_ERR_ARG, "mask is for %d layers x %d heads but the model has %d x %d", mask->n_layers,
                       mask->n_heads, in->n_layers, in->n_heads);
    bool ablates = mask && hp_mask_count_ablated(mask) > 0;
    bool scaled = false;
    for (int i = 0; mask && i < mask->n_layers * mask->n_heads; i++)
        scaled |= mask->gate[i] != 1.0f;
    if (ablates && abl != HP_ABLATE_ZERO) {
        enum hp_status st = ensure_means(ev, err);
        if (st != HP_OK)
            return st;
    }
    struct hp_metrics *mt = calloc(1, sizeof *mt);
    if (!mt)
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    size_t ns = (size_t)d->n_seqs;
    mt->seq_loss = calloc(ns, sizeof(double));
    mt->seq_acc = calloc(ns, sizeof(double));
    mt->seq_kl = calloc(ns, sizeof(double));
    mt->seq_cos = calloc(ns, sizeof(double));
    mt->seq_tokens = calloc(ns, sizeof(int64_t));
    if (!mt->seq_loss || !mt->seq_acc || !mt->seq_kl || !mt->seq_cos || !mt->seq_tokens) {
        hp_metrics_free(mt);
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    }
    mt->n_seqs = d->n_seqs;
    mt->has_loss = ev->has_loss;
    mt->has_cos = !ev->has_loss;

    const float *gate = mask ? mask->gate : NULL;
    const size_t per = (size_t)d->seq_len * ev->width;
    struct totals tot = {0};
    for (int s0 = 0; s0 < d->n_seqs; s0 += ev->batch) {
        int nb = chunk_len(ev, s0);
        run_chunk(ev, s0, nb, gate, abl, ev->out_m, NULL);
        /* the unmasked reference; with nothing changed it is the same pass */
        const float *base = ev->out_m;
        const double *lse_b = NULL;
        if (scaled && !(base = baseline_output(ev, s0, nb, &lse_b))) {
            hp_metrics_free(mt);
            return hp_fail(err, HP_ERR_NOMEM, "out of memory for the unmasked reference");
        }
        for (int j = 0; j < nb; j++) {
            score_seq(ev, mt, &tot, s0 + j, ev->out_m + per * j, base + per * j,
                      lse_b ? lse_b + (size_t)j * d->seq_len : NULL, scaled);
            if (ev->progress)
                ev->progress(ev->progress_user, s0 + j + 1, d->n_seqs);
        }
    }
    mt->n_tokens = tot.tokens;
    if (ev->has_loss) {
        if (tot.tokens == 0) {
            hp_metrics_free(mt);
            return hp_fail(err, HP_ERR_ARG, "%s: no token is scored (all labels are -100 or padding)", d->path);
        }
        mt->loss = tot.loss / tot.tokens;
        mt->ppl = exp(mt->loss);
        mt->acc = tot.acc / tot.tokens;
        mt->kl = tot.kl / tot.tokens;
    } else {
        mt->cos = tot.cos / d->n_seqs;
    }
    *out = mt;
    return HP_OK;
}

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
    if (!m->fwd || hp_fwd_capacity(m->fwd) != n_tokens) {
        hp_fwd_free(m->fwd);
        m->fwd = hp_fwd_new(m, n_tokens, 1);
        if (!m->fwd)
            return hp_fail(err, HP_ERR_NOMEM, "out of memory for a %d-token workspace", n_tokens);
    }
    struct hp_fwd_args a = {
        .ids = ids,
        .attn_mask = attn_mask,
        .type_ids = type_ids,
        .T = n_tokens,
        .n_seqs = 1,
        .gate = mask ? mask->gate : NULL,
        .ablation = HP_ABLATE_ZERO,
        .out = out,
    };
    hp_fwd_run(m, m->fwd, &a);
    return HP_OK;
}
