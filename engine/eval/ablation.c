/*
 * ablation.c -- how a head is taken out: the ablation methods as a table,
 * one row each (ablation.h), and their prepare steps.
 *
 * Owns the methods' names (what plans, digests and the database write), what
 * each method makes before a pass (the mean statistics: every head's output
 * averaged over the held-out set's real tokens under the unmasked model, in
 * double, once; resample's and denoise's other input: every head's output at
 * every token of every row's corrupt prompt under the unmasked model, once,
 * kept whole within HP_OTHER_MAX so that every pass reads its chunk's rows
 * whatever its chunking), what data each takes (hp_ablation_bind_data: denoise
 * is resample on the data with prompts and corrupt prompts exchanged, so the
 * unmasked model and every variant run on the corrupt prompts and an
 * ablated head gets its clean output back) and the replacement each hands
 * every pass (forward, reverse, reuse), read through hp_replacement_at
 * (forward.h).
 * Invariants: names are what the database stores and digests hash (job keys
 * include the ablation name): changing one changes every content address.
 * The statistics are summed over the evaluator's chunks in sequence order, so
 * they are the same floats whoever asks for them.
 * Must not: print, or know of metrics, SQL or the evaluator's insides.
 */
#include "ablation.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data.h" // hp_task_swap: denoise's data
#include "util.h"

static bool all_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

void hp_ablation_state_clear(struct hp_ablation_state *st)
{
    free(st->mean_all);
    free(st->mean_pos);
    free(st->other);
    free(st->own);
    free(st->mlp_mean_all);
    free(st->mlp_mean_pos);
    free(st->mlp_other);
    st->mean_all = st->mean_pos = st->other = st->own = NULL;
    st->mlp_mean_all = st->mlp_mean_pos = st->mlp_other = NULL;
    st->other_seqs = 0;
}

// --- zero -------------------------------------------------------------------------

static struct hp_replacement zero_replacement(const struct hp_ablation_state *st, const struct hp_model_info *in,
                                              int T, int s0, int nb, bool mlp)
{
    (void)st, (void)in, (void)T, (void)s0, (void)nb, (void)mlp;
    return (struct hp_replacement){0}; /* buf NULL: a dead head is zero and costs nothing */
}

// --- mean and mean-pos ---------------------------------------------------------------

/* From sums cap (L, T, w) over cnt[t] real tokens at each position: the means per position into pos (L, T, w)
 * and over every position into all (L, w). */
static void means_of(const double *cap, const int64_t *cnt, size_t L, size_t T, size_t w, float *all, float *pos)
{
    int64_t total = 0;
    for (size_t t = 0; t < T; t++)
        total += cnt[t];
    for (size_t l = 0; l < L; l++)
        for (size_t i = 0; i < w; i++) {
            double sum = 0;
            for (size_t t = 0; t < T; t++) {
                double v = cap[(l * T + t) * w + i];
                sum += v;
                pos[(l * T + t) * w + i] = cnt[t] ? (float)(v / (double)cnt[t]) : 0.0f;
            }
            all[l * w + i] = total ? (float)(sum / (double)total) : 0.0f;
        }
}

/* Head-output and MLP-output means of the unmasked model over the held-out set, both kinds at once. */
static enum hp_status prepare_means(struct hp_ablation_state *st, const struct hp_ablation_src *src,
                                    struct hp_error *err)
{
    if (st->mean_all)
        return HP_OK;
    const struct hp_data *d = src->d;
    const struct hp_model_info *in = &src->m->info;
    size_t T = (size_t)d->seq_len, L = (size_t)in->n_layers, qd = (size_t)in->n_heads * in->d_head,
           D = (size_t)in->d_model;
    double *cap = calloc(L * T * qd, sizeof *cap), *cap_mlp = calloc(L * T * D, sizeof *cap_mlp);
    int64_t *cnt = calloc(T, sizeof *cnt);
    st->mean_all = malloc(L * qd * sizeof(float));
    st->mean_pos = malloc(L * T * qd * sizeof(float));
    st->mlp_mean_all = malloc(L * D * sizeof(float));
    st->mlp_mean_pos = malloc(L * T * D * sizeof(float));
    if (!cap || !cap_mlp || !cnt || !st->mean_all || !st->mean_pos || !st->mlp_mean_all || !st->mlp_mean_pos) {
        free(cap);
        free(cap_mlp);
        free(cnt);
        hp_ablation_state_clear(st);
        return hp_fail(err, HP_ERR_NOMEM, "out of memory for mean-ablation statistics");
    }
    /* the pass stops before the LM head: only the heads' and MLPs' outputs are wanted */
    const float *gate = NULL;
    for (int s = 0; s < d->n_seqs; s += src->batch) {
        const int nb = d->n_seqs - s < src->batch ? d->n_seqs - s : src->batch;
        struct hp_fwd_in fi = hp_fwd_in_rows(d, s, nb);
        struct hp_fwd_variants va = {.gates = &gate};
        struct hp_fwd_taps tp = {.capture = cap, .capture_mlp = cap_mlp};
        hp_fwd_run(src->m, src->fwd, &fi, &va, &tp);
    }
    for (int s = 0; s < d->n_seqs; s++)
        for (size_t t = 0; t < T; t++)
            cnt[t] += !d->attn_mask || d->attn_mask[(size_t)s * T + t];
    means_of(cap, cnt, L, T, qd, st->mean_all, st->mean_pos);
    means_of(cap_mlp, cnt, L, T, D, st->mlp_mean_all, st->mlp_mean_pos);
    free(cap);
    free(cap_mlp);
    free(cnt);
    const bool heads_ok = all_finite(st->mean_all, L * qd) && all_finite(st->mean_pos, L * T * qd);
    if (!heads_ok || !all_finite(st->mlp_mean_all, L * D) || !all_finite(st->mlp_mean_pos, L * T * D)) {
        char where[64];
        src->locate_nonfinite(src->user, where, sizeof where);
        hp_ablation_state_clear(st);
        return hp_fail(err, HP_ERR_FORMAT,
                       "%s: the unmasked model's %s outputs on %s are not finite, first in %s (check the "
                       "weights and config.json, e.g. its layer norm epsilon); no mean-ablation statistics are kept",
                       src->m->dir, heads_ok ? "MLP" : "head", d->path, where);
    }
    return HP_OK;
}

/* A row's width of the statistics of the heads (n_heads * d_head) or the MLP blocks (d_model). */
static ptrdiff_t width_of(const struct hp_model_info *in, bool mlp)
{
    return mlp ? (ptrdiff_t)in->d_model : (ptrdiff_t)in->n_heads * in->d_head;
}

/* One mean for every row: (n_layers, width). */
static struct hp_replacement mean_replacement(const struct hp_ablation_state *st, const struct hp_model_info *in,
                                              int T, int s0, int nb, bool mlp)
{
    (void)s0, (void)nb;
    const ptrdiff_t w = width_of(in, mlp);
    return (struct hp_replacement){.buf = mlp ? st->mlp_mean_all : st->mean_all, .layer_stride = w, .row_stride = 0,
                                   .row_period = T};
}

/* A mean per position: (n_layers, T, width). */
static struct hp_replacement mean_pos_replacement(const struct hp_ablation_state *st,
                                                  const struct hp_model_info *in, int T, int s0, int nb, bool mlp)
{
    (void)s0, (void)nb;
    const ptrdiff_t w = width_of(in, mlp);
    return (struct hp_replacement){.buf = mlp ? st->mlp_mean_pos : st->mean_pos, .layer_stride = w * T,
                                   .row_stride = w, .row_period = T};
}

enum hp_status hp_ablation_set_means(struct hp_ablation_state *st, const struct hp_model_info *in, int seq_len,
                                     const struct hp_means *m, struct hp_error *err)
{
    if (m->n_layers != in->n_layers || m->seq_len != seq_len || m->width != in->n_heads * in->d_head ||
        m->d_model != in->d_model || !m->mlp_all || !m->mlp_pos)
        return hp_fail(err, HP_ERR_SHAPE, "mean-ablation statistics for %d layers x %d positions x %d (MLPs: %d%s) "
                       "are not for this model and data (%d x %d x %d, MLPs %d)", m->n_layers, m->seq_len, m->width,
                       m->d_model, m->mlp_all && m->mlp_pos ? "" : ", missing", in->n_layers, seq_len,
                       in->n_heads * in->d_head, in->d_model);
    size_t n_all = (size_t)m->n_layers * m->width, n_pos = n_all * m->seq_len,
           n_mall = (size_t)m->n_layers * m->d_model, n_mpos = n_mall * m->seq_len;
    if (!all_finite(m->all, n_all) || !all_finite(m->pos, n_pos) || !all_finite(m->mlp_all, n_mall) ||
        !all_finite(m->mlp_pos, n_mpos))
        return hp_fail(err, HP_ERR_FORMAT, "mean-ablation statistics with numbers that are not finite are refused");
    float *all = malloc(n_all * sizeof(float)), *pos = malloc(n_pos * sizeof(float)),
          *mall = malloc(n_mall * sizeof(float)), *mpos = malloc(n_mpos * sizeof(float));
    if (!all || !pos || !mall || !mpos) {
        free(all);
        free(pos);
        free(mall);
        free(mpos);
        return hp_fail(err, HP_ERR_NOMEM, "out of memory for mean-ablation statistics");
    }
    memcpy(all, m->all, n_all * sizeof(float));
    memcpy(pos, m->pos, n_pos * sizeof(float));
    memcpy(mall, m->mlp_all, n_mall * sizeof(float));
    memcpy(mpos, m->mlp_pos, n_mpos * sizeof(float));
    hp_ablation_state_clear(st);
    st->mean_all = all;
    st->mean_pos = pos;
    st->mlp_mean_all = mall;
    st->mlp_mean_pos = mpos;
    return HP_OK;
}

// --- resample and denoise: another input's head outputs ------------------------------

/* The most the other input's head outputs may take (rows x seq_len x layers x n_heads * d_head floats). */
#define HP_OTHER_MAX ((size_t)4 << 30)

/* The first layer in which a real token's head outputs in other (n_layers, n_seqs * T, qd) are not finite, or -1. */
static int first_nonfinite_layer(const float *other, const struct hp_data *d, size_t L, size_t qd)
{
    const size_t T = (size_t)d->seq_len, rows = (size_t)d->n_seqs * T;
    for (size_t l = 0; l < L; l++)
        for (size_t r = 0; r < rows; r++)
            if ((!d->attn_mask || d->attn_mask[r]) && !all_finite(other + (l * rows + r) * qd, qd))
                return (int)l;
    return -1;
}

/*
 * The unmasked model's head outputs at every token of every row of ids (the data's layout: (n_seqs, seq_len),
 * d's attention mask) into a fresh buffer *out (n_layers, n_seqs * seq_len, n_heads * d_head), and, when out_mlp
 * is not NULL, its MLP blocks' outputs into *out_mlp (n_layers, n_seqs * seq_len, d_model), in the evaluator's
 * chunks. what names the prompts in messages ("corrupt", "clean"); method, the study or ablation that keeps them.
 */
static enum hp_status head_outputs(const struct hp_ablation_src *src, const int32_t *ids, const char *what,
                                   const char *method, float **out, float **out_mlp, struct hp_error *err)
{
    const struct hp_data *d = src->d;
    const struct hp_model_info *in = &src->m->info;
    const size_t S = (size_t)d->n_seqs, T = (size_t)d->seq_len, L = (size_t)in->n_layers, D = (size_t)in->d_model,
                 qd = (size_t)in->n_heads * in->d_head, R = (size_t)src->batch * T, width = qd + (out_mlp ? D : 0);
    size_t n;
    if (__builtin_mul_overflow(S * T, L * width, &n) || n > HP_OTHER_MAX / sizeof(float))
        return hp_fail(err, HP_ERR_NOMEM, "%s: %s keeps every %s output on the %s prompts, %zu rows x %zu "
                       "positions x %zu layers x %zu floats, over its %zu MB (use fewer rows or a shorter --seq-len)",
                       d->path, method, out_mlp ? "head's and MLP's" : "head's", what, S, T, L, width,
                       HP_OTHER_MAX >> 20);
    const size_t n_heads = S * T * L * qd, n_mlp = S * T * L * D;
    float *other = malloc(n_heads * sizeof(float)), *x = malloc(L * R * D * sizeof(float)),
          *ctx = malloc(L * R * qd * sizeof(float)), *other_mlp = out_mlp ? malloc(n_mlp * sizeof(float)) : NULL,
          *mo = out_mlp ? malloc(L * R * D * sizeof(float)) : NULL;
    if (!other || !x || !ctx || (out_mlp && (!other_mlp || !mo))) {
        free(other);
        free(x);
        free(ctx);
        free(other_mlp);
        free(mo);
        return hp_fail(err, HP_ERR_NOMEM, "out of memory for the outputs on the %s prompts (%zu MB)", what,
                       n * sizeof(float) >> 20);
    }
    const float *gate = NULL;
    for (int s0 = 0; s0 < d->n_seqs; s0 += src->batch) {
        const int nb = d->n_seqs - s0 < src->batch ? d->n_seqs - s0 : src->batch;
        const size_t rows = (size_t)nb * T;
        struct hp_fwd_in fi = hp_fwd_in_rows(d, s0, nb);
        fi.ids = ids + (size_t)s0 * T; /* the same mask: prompt and corrupt have one length */
        struct hp_fwd_variants va = {.gates = &gate};
        struct hp_fwd_save save = {.x = x, .ctx = ctx, .mlp = mo};
        struct hp_fwd_taps tp = {.save = &save};
        hp_fwd_run(src->m, src->fwd, &fi, &va, &tp);
        for (size_t l = 0; l < L; l++) {
            memcpy(other + (l * S * T + (size_t)s0 * T) * qd, ctx + l * rows * qd, rows * qd * sizeof(float));
            if (mo)
                memcpy(other_mlp + (l * S * T + (size_t)s0 * T) * D, mo + l * rows * D, rows * D * sizeof(float));
        }
    }
    free(x);
    free(ctx);
    free(mo);
    int bad = first_nonfinite_layer(other, d, L, qd);
    const char *part = "attention";
    if (bad < 0 && other_mlp && (bad = first_nonfinite_layer(other_mlp, d, L, D)) >= 0)
        part = "MLP";
    if (bad >= 0) {
        free(other);
        free(other_mlp);
        return hp_fail(err, HP_ERR_FORMAT,
                       "%s: the unmasked model's outputs on the %s prompts of %s are not finite, first in "
                       "layer %d's %s (check the weights and config.json, e.g. its layer norm epsilon)",
                       src->m->dir, what, d->path, bad, part);
    }
    *out = other;
    if (out_mlp)
        *out_mlp = other_mlp;
    return HP_OK;
}

/* The unmasked model's head outputs on every row's other prompt (d->task->corrupt) into st->other, once. */
static enum hp_status prepare_other(struct hp_ablation_state *st, const struct hp_ablation_src *src,
                                    enum hp_ablation a, struct hp_error *err)
{
    enum hp_status s = hp_ablation_check_data(a, src->d, err);
    if (s != HP_OK || (st->other && (st->mlp_other || !src->mlps)))
        return s;
    free(st->other); /* made for heads alone: made again with the MLPs' */
    st->other = NULL;
    /* task->corrupt holds the other prompts: the corrupt ones, or denoise's swapped data the clean ones */
    s = head_outputs(src, src->d->task->corrupt, src->d->task->swapped ? "clean" : "corrupt", hp_ablation_name(a),
                     &st->other, src->mlps ? &st->mlp_other : NULL, err);
    if (s == HP_OK)
        st->other_seqs = src->d->n_seqs;
    return s;
}

static enum hp_status prepare_resample(struct hp_ablation_state *st, const struct hp_ablation_src *src,
                                       struct hp_error *err)
{
    return prepare_other(st, src, HP_ABLATE_RESAMPLE, err);
}

static enum hp_status prepare_denoise(struct hp_ablation_state *st, const struct hp_ablation_src *src,
                                      struct hp_error *err)
{
    return prepare_other(st, src, HP_ABLATE_DENOISE, err);
}

/* Row b * T + t of a pass over sequences [s0, s0 + nb) (of any of its variant blocks): sequence s0 + b's
 * head outputs at position t on the other input. */
static struct hp_replacement other_replacement(const struct hp_ablation_state *st, const struct hp_model_info *in,
                                               int T, int s0, int nb, bool mlp)
{
    const ptrdiff_t w = width_of(in, mlp);
    const float *buf = mlp ? st->mlp_other : st->other;
    if (!buf) /* the MLPs' when no variant changes one (prepared without them): never read */
        return (struct hp_replacement){0};
    return (struct hp_replacement){.buf = buf + (ptrdiff_t)s0 * T * w,
                                   .layer_stride = (ptrdiff_t)st->other_seqs * T * w, .row_stride = w,
                                   .row_period = nb * T};
}

// --- one position patched: the head keeps its own output elsewhere ----------------------------

enum hp_status hp_ablation_own_ready(struct hp_ablation_state *st, const struct hp_ablation_src *src,
                                     struct hp_error *err)
{
    if (st->own)
        return HP_OK;
    const char *what = src->d->task && src->d->task->swapped ? "corrupt" : "given";
    return head_outputs(src, src->d->ids, what, "patching one position at a time", &st->own, NULL, err);
}

struct hp_replacement hp_ablation_at_position(struct hp_replacement rep, const struct hp_ablation_state *st,
                                              const struct hp_model_info *in, int S, int T, int s0, int nb,
                                              const int *pos)
{
    const ptrdiff_t qd = (ptrdiff_t)in->n_heads * in->d_head;
    rep.own = st->own + (ptrdiff_t)s0 * T * qd;
    rep.own_layer_stride = (ptrdiff_t)S * T * qd;
    rep.own_row_stride = qd;
    rep.own_row_period = nb * T;
    rep.T = T;
    rep.block_rows = nb * T;
    rep.pos = pos;
    return rep;
}

enum hp_status hp_ablation_check_data(enum hp_ablation a, const struct hp_data *d, struct hp_error *err)
{
    const enum hp_ablation_data want = hp_ablation_kinds[a].data;
    const char *name = hp_ablation_name(a);
    if (want == HP_ABL_DATA_ANY)
        return HP_OK;
    if (!d->task)
        return hp_fail(err, HP_ERR_ARG, "%s: %s ablation replaces a head's output by its value on each row's "
                       "corrupt prompt, but these are not task rows (give rows with \"prompt\" and \"corrupt\": "
                       "docs/tasks.md)", d->path, name);
    if (!d->task->corrupt)
        return hp_fail(err, HP_ERR_ARG, "%s: %s ablation needs each row's corrupt prompt, and the rows have no "
                       "\"corrupt\" or \"corrupt_ids\" (docs/tasks.md)", d->path, name);
    if (d->task->swapped != (want == HP_ABL_DATA_SWAPPED))
        return hp_fail(err, HP_ERR_ARG, d->task->swapped
                       ? "%s: %s ablation runs on the prompts, but this data has its prompts and corrupt prompts "
                         "swapped (denoise's)"
                       : "%s: %s ablation runs on the corrupt prompts, but this data is not swapped (bind it with "
                         "hp_ablation_bind_data)", d->path, name);
    return HP_OK;
}

enum hp_status hp_ablation_bind_data(enum hp_ablation a, struct hp_data *d, struct hp_error *err)
{
    if ((int)a < 0 || (int)a >= HP_ABLATE_COUNT)
        return hp_fail(err, HP_ERR_ARG, "ablation %d is not one of the %d methods", (int)a, HP_ABLATE_COUNT);
    if (hp_ablation_kinds[a].data == HP_ABL_DATA_SWAPPED && d->task && d->task->corrupt && !d->task->swapped)
        hp_task_swap(d);
    return hp_ablation_check_data(a, d, err);
}

// --- the table -----------------------------------------------------------------------

/* unsized, so that a row missing at the end is a build error against the header's size */
const struct hp_ablation_kind hp_ablation_kinds[] = {
    [HP_ABLATE_ZERO] = {"zero", "the head's output is zero", NULL, zero_replacement, false},
    [HP_ABLATE_MEAN] = {"mean", "replaced by its mean over all held-out tokens (under the unmasked model)",
                        prepare_means, mean_replacement, true},
    [HP_ABLATE_MEAN_POS] = {"mean-pos", "replaced by its mean at each position (under the unmasked model)",
                            prepare_means, mean_pos_replacement, true},
    [HP_ABLATE_RESAMPLE] = {"resample",
                            "replaced, at every position, by its value on the row's corrupt prompt (under the "
                            "unmasked model; task rows with \"corrupt\")",
                            prepare_resample, other_replacement, false, HP_ABL_DATA_CORRUPT},
    [HP_ABLATE_DENOISE] = {"denoise",
                           "the model runs on each row's corrupt prompt and the head gets its output on the clean "
                           "prompt back (task rows with \"corrupt\")",
                           prepare_denoise, other_replacement, false, HP_ABL_DATA_SWAPPED},
};
static_assert(sizeof hp_ablation_kinds / sizeof hp_ablation_kinds[0] == HP_ABLATE_COUNT,
              "one row per enum hp_ablation");

const char *hp_ablation_name(enum hp_ablation a)
{
    if ((int)a < 0 || (int)a >= HP_ABLATE_COUNT)
        return "unknown"; // a value cast from outside the enum
    return hp_ablation_kinds[a].name;
}

const char *hp_ablation_help(enum hp_ablation a)
{
    if ((int)a < 0 || (int)a >= HP_ABLATE_COUNT)
        return "";
    return hp_ablation_kinds[a].help;
}

bool hp_ablation_parse(const char *name, enum hp_ablation *out)
{
    for (int i = 0; name && i < HP_ABLATE_COUNT; i++)
        if (strcmp(name, hp_ablation_kinds[i].name) == 0) {
            *out = (enum hp_ablation)i;
            return true;
        }
    return false;
}

bool hp_ablation_reads_means(enum hp_ablation a)
{
    return (int)a >= 0 && (int)a < HP_ABLATE_COUNT && hp_ablation_kinds[a].reads_means;
}
