/*
 * ablation.c -- how a head is taken out: the ablation methods as a table,
 * one row each (ablation_int.h), and their prepare steps.
 *
 * Owns the methods' names (what plans, digests and the database write), what
 * each method makes before a pass (the mean statistics: every head's output
 * averaged over the held-out set's real tokens under the unmasked model, in
 * double, once) and the replacement each hands every pass (forward, reverse,
 * reuse), read through hp_replacement_at (forward_int.h).
 * Invariants: names are what the database stores and digests hash (job keys
 * include the ablation name): changing one changes every content address.
 * The statistics are summed over the evaluator's chunks in sequence order, so
 * they are the same floats whoever asks for them.
 * Must not: print, or know of metrics, SQL or the evaluator's insides.
 */
#include "ablation_int.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util_int.h"

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
    st->mean_all = st->mean_pos = NULL;
}

// --- zero -------------------------------------------------------------------------

static struct hp_replacement zero_replacement(const struct hp_ablation_state *st, const struct hp_model_info *in,
                                              int T, int s0, int nb)
{
    (void)st, (void)in, (void)T, (void)s0, (void)nb;
    return (struct hp_replacement){0}; /* buf NULL: a dead head is zero and costs nothing */
}

// --- mean and mean-pos ---------------------------------------------------------------

/* Head-output means of the unmasked model over the held-out set, both kinds at once. */
static enum hp_status prepare_means(struct hp_ablation_state *st, const struct hp_ablation_src *src,
                                    struct hp_error *err)
{
    if (st->mean_all)
        return HP_OK;
    const struct hp_data *d = src->d;
    const struct hp_model_info *in = &src->m->info;
    size_t T = (size_t)d->seq_len, L = (size_t)in->n_layers, qd = (size_t)in->n_heads * in->d_head;
    double *cap = calloc(L * T * qd, sizeof *cap);
    int64_t *cnt = calloc(T, sizeof *cnt);
    st->mean_all = malloc(L * qd * sizeof(float));
    st->mean_pos = malloc(L * T * qd * sizeof(float));
    if (!cap || !cnt || !st->mean_all || !st->mean_pos) {
        free(cap);
        free(cnt);
        hp_ablation_state_clear(st);
        return hp_fail(err, HP_ERR_NOMEM, "out of memory for mean-ablation statistics");
    }
    /* the pass stops before the LM head: only the heads' outputs are wanted */
    const float *gate = NULL;
    for (int s = 0; s < d->n_seqs; s += src->batch) {
        const int nb = d->n_seqs - s < src->batch ? d->n_seqs - s : src->batch;
        struct hp_fwd_in fi = hp_fwd_in_rows(d, s, nb);
        struct hp_fwd_variants va = {.gates = &gate};
        struct hp_fwd_taps tp = {.capture = cap};
        hp_fwd_run(src->m, src->fwd, &fi, &va, &tp);
    }
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
                st->mean_pos[(l * T + t) * qd + i] = cnt[t] ? (float)(v / (double)cnt[t]) : 0.0f;
            }
            st->mean_all[l * qd + i] = total ? (float)(sum / (double)total) : 0.0f;
        }
    free(cap);
    free(cnt);
    if (!all_finite(st->mean_all, L * qd) || !all_finite(st->mean_pos, L * T * qd)) {
        char where[64];
        src->locate_nonfinite(src->user, where, sizeof where);
        hp_ablation_state_clear(st);
        return hp_fail(err, HP_ERR_FORMAT,
                       "%s: the unmasked model's head outputs on %s are not finite, first in %s (check the weights "
                       "and config.json, e.g. its layer norm epsilon); no mean-ablation statistics are kept",
                       src->m->dir, d->path, where);
    }
    return HP_OK;
}

/* One mean for every row: (n_layers, n_heads * d_head). */
static struct hp_replacement mean_replacement(const struct hp_ablation_state *st, const struct hp_model_info *in,
                                              int T, int s0, int nb)
{
    (void)s0, (void)nb;
    const ptrdiff_t qd = (ptrdiff_t)in->n_heads * in->d_head;
    return (struct hp_replacement){.buf = st->mean_all, .layer_stride = qd, .row_stride = 0, .row_period = T};
}

/* A mean per position: (n_layers, T, n_heads * d_head). */
static struct hp_replacement mean_pos_replacement(const struct hp_ablation_state *st,
                                                  const struct hp_model_info *in, int T, int s0, int nb)
{
    (void)s0, (void)nb;
    const ptrdiff_t qd = (ptrdiff_t)in->n_heads * in->d_head;
    return (struct hp_replacement){.buf = st->mean_pos, .layer_stride = qd * T, .row_stride = qd, .row_period = T};
}

enum hp_status hp_ablation_set_means(struct hp_ablation_state *st, const struct hp_model_info *in, int seq_len,
                                     const struct hp_means *m, struct hp_error *err)
{
    if (m->n_layers != in->n_layers || m->seq_len != seq_len || m->width != in->n_heads * in->d_head)
        return hp_fail(err, HP_ERR_SHAPE, "mean-ablation statistics for %d layers x %d positions x %d are not for this "
                       "model and data (%d x %d x %d)", m->n_layers, m->seq_len, m->width, in->n_layers,
                       seq_len, in->n_heads * in->d_head);
    size_t n_all = (size_t)m->n_layers * m->width, n_pos = n_all * m->seq_len;
    if (!all_finite(m->all, n_all) || !all_finite(m->pos, n_pos))
        return hp_fail(err, HP_ERR_FORMAT, "mean-ablation statistics with numbers that are not finite are refused");
    float *all = malloc(n_all * sizeof(float)), *pos = malloc(n_pos * sizeof(float));
    if (!all || !pos) {
        free(all);
        free(pos);
        return hp_fail(err, HP_ERR_NOMEM, "out of memory for mean-ablation statistics");
    }
    memcpy(all, m->all, n_all * sizeof(float));
    memcpy(pos, m->pos, n_pos * sizeof(float));
    hp_ablation_state_clear(st);
    st->mean_all = all;
    st->mean_pos = pos;
    return HP_OK;
}

// --- the table -----------------------------------------------------------------------

/* unsized, so that a row missing at the end is a build error against the header's size */
const struct hp_ablation_kind hp_ablation_kinds[] = {
    [HP_ABLATE_ZERO] = {"zero", "the head's output is zero", NULL, zero_replacement, false},
    [HP_ABLATE_MEAN] = {"mean", "replaced by its mean over all held-out tokens (under the unmasked model)",
                        prepare_means, mean_replacement, true},
    [HP_ABLATE_MEAN_POS] = {"mean-pos", "replaced by its mean at each position (under the unmasked model)",
                            prepare_means, mean_pos_replacement, true},
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
