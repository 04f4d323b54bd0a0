/*
 * roles.c -- what each attention head does: previous-token, duplicate-token,
 * induction, first-token (attention sink), positional and rare-token heads,
 * and how spread its attention is (entropy).
 *
 * Two unmasked passes: one over the held-out set, one over a probe of random
 * tokens repeated twice (Olsson et al. 2022's prefix matching), both through
 * the forward's attention tap (forward.h): each head's probabilities are
 * reduced to a few sums per (layer, head, sequence) while they sit in the
 * pass's per-thread buffer, so no (T, T) matrix outlives its head. After each
 * chunk the sums are added to the totals in (layer, head, sequence) order,
 * so the result does not depend on the thread count. Sums in double.
 *
 * docs/roles.md defines every score (which queries and keys count, padding,
 * the first position, how per-query values are averaged); keep it in step
 * with hp_roles_seq_reduce / hp_roles_seq_count and finish_head below.
 *
 * Must not: print, exit, touch the store, or run anything but unmasked passes.
 */
#include "roles.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval.h" /* hp_eval_check_data */
#include "forward.h"
#include "json.h"
#include "util.h"

/* Rows a forward call takes, as the evaluator's chunks. */
#define CHUNK_ROWS 512
/* Induction offsets: -WIN..WIN around the earlier occurrence. */
#define WIN HP_ROLES_WINDOW
#define NW (2 * WIN + 1)

// --- the probe ------------------------------------------------------------------

enum hp_status hp_roles_probe_size(const struct hp_model_info *in, const struct hp_roles_opts *o, int *seqs,
                                   int *len, struct hp_error *err)
{
    *seqs = o && o->probe_seqs ? o->probe_seqs : HP_ROLES_PROBE_SEQS;
    if (*seqs < 1 || *seqs > HP_ROLES_PROBE_MAX_SEQS)
        return hp_fail(err, HP_ERR_ARG, "a probe of %d sequences (give 1 to %d)", *seqs, HP_ROLES_PROBE_MAX_SEQS);
    const int room = in->n_ctx / 2 < in->n_vocab ? in->n_ctx / 2 : in->n_vocab;
    if (o && o->probe_len) {
        *len = o->probe_len;
        if (*len < HP_ROLES_PROBE_MIN_LEN)
            return hp_fail(err, HP_ERR_ARG, "a probe half of %d tokens is too short (at least %d)", *len,
                           HP_ROLES_PROBE_MIN_LEN);
        if (*len > in->n_ctx / 2)
            return hp_fail(err, HP_ERR_ARG, "a probe of 2 x %d tokens exceeds the model's %d positions (at most %d a half)",
                           *len, in->n_ctx, in->n_ctx / 2);
        if (*len > in->n_vocab)
            return hp_fail(err, HP_ERR_ARG, "a probe half of %d distinct tokens needs at least %d ids (the model has %d)",
                           *len, *len, in->n_vocab);
        return HP_OK;
    }
    *len = room < HP_ROLES_PROBE_LEN ? room : HP_ROLES_PROBE_LEN;
    if (*len < HP_ROLES_PROBE_MIN_LEN)
        return hp_fail(err, HP_ERR_ARG,
                       "the model's %d positions and %d ids leave no room for the induction probe (2 x %d tokens at "
                       "the least)", in->n_ctx, in->n_vocab, HP_ROLES_PROBE_MIN_LEN);
    return HP_OK;
}

void hp_roles_probe(int n_vocab, int n_seqs, int len, uint64_t seed, int32_t *perm, int32_t *ids)
{
    uint64_t x = seed;
    for (int s = 0; s < n_seqs; s++) {
        for (int v = 0; v < n_vocab; v++)
            perm[v] = v;
        for (int k = 0; k < len; k++) {
            int j = k + (int)hp_splitmix64_below(&x, (uint64_t)(n_vocab - k));
            int32_t t = perm[k];
            perm[k] = perm[j];
            perm[j] = t;
        }
        int32_t *row = ids + (size_t)s * 2 * len;
        memcpy(row, perm, (size_t)len * sizeof *row);
        memcpy(row + len, perm, (size_t)len * sizeof *row);
    }
}

/*
 * One head's probe sums from its attention p (2 len, 2 len): for each query i
 * of the second half, whose token's earlier occurrence is e = i - len, the
 * attention at e + d for d in -WIN..WIN (keys before 0 skipped), into acc[d + WIN].
 */
static void probe_reduce(const float *p, int len, double *acc)
{
    const int T = 2 * len;
    for (int i = len; i < T; i++) {
        const float *r = p + (size_t)i * T;
        const int e = i - len;
        for (int d = -WIN; d <= WIN; d++)
            if (e + d >= 0)
                acc[d + WIN] += r[e + d];
    }
}

/* Queries behind the probe's sum at offset d: every second-half query whose key e + d exists. */
static int64_t probe_count(int seqs, int len, int d)
{
    return (int64_t)seqs * (d < 0 ? len + d : len);
}

// --- one sequence ------------------------------------------------------------------

static inline bool real(const struct hp_roles_seq *q, int t)
{
    return !q->mask || q->mask[t];
}

/* The queries every score averages over: real positions, but in a causal model not the first (it sees only itself). */
static inline bool query_ok(const struct hp_roles_seq *q, int i)
{
    return real(q, i) && !(q->causal && i == q->first);
}

/* Whether query i is one of sep_token's: not a [SEP] itself, with a [SEP] key it can see (causal: an earlier one). */
static inline bool sep_query(const struct hp_roles_seq *q, int i)
{
    return q->n_seps > 0 && q->ids[i] != q->sep && (!q->causal || q->seps[0] < i);
}

void hp_roles_seq_prepare(struct hp_roles_seq *q, const int32_t *ids, const uint8_t *mask, int T, bool causal,
                          const int64_t *freq, int32_t sep, int32_t *last)
{
    q->T = T;
    q->sep = sep;
    q->n_seps = 0;
    for (int t = 0; sep >= 0 && t < T; t++)
        if (real(q, t) && ids[t] == sep)
            q->seps[q->n_seps++] = t;
    q->causal = causal;
    q->ids = ids;
    q->mask = mask;
    q->first = 0;
    while (q->first < T - 1 && !real(q, q->first))
        q->first++;
    for (int t = 0; t < T; t++)
        q->prev_occ[t] = q->next_occ[t] = -1;
    for (int t = 0; t < T; t++) {
        if (!real(q, t))
            continue;
        const int32_t id = ids[t];
        if (last[id] >= 0) {
            q->prev_occ[t] = last[id];
            q->next_occ[last[id]] = t;
        }
        last[id] = t;
    }
    for (int t = 0; t < T; t++)
        if (real(q, t))
            last[ids[t]] = -1;
    q->n_rare = 0;
    if (!freq)
        return;
    int64_t least = INT64_MAX;
    for (int t = 0; t < T; t++)
        if (real(q, t) && freq[ids[t]] < least)
            least = freq[ids[t]];
    for (int t = 0; t < T; t++)
        if (real(q, t) && freq[ids[t]] == least)
            q->rare[q->n_rare++] = t;
}

void hp_roles_seq_reduce(const struct hp_roles_seq *q, const float *p, double *acc)
{
    const int T = q->T;
    double *off = acc + HP_RS_OFF + (T - 1); /* off[key - query] */
    for (int i = 0; i < T; i++) {
        if (!query_ok(q, i))
            continue;
        const float *r = p + (size_t)i * T;
        if (i >= 1 && real(q, i - 1))
            acc[HP_RS_PREV] += r[i - 1];
        for (int j = q->prev_occ[i]; j >= 0; j = q->prev_occ[j])
            acc[HP_RS_DUP] += r[j];
        if (!q->causal) {
            for (int j = q->next_occ[i]; j >= 0; j = q->next_occ[j])
                acc[HP_RS_DUP] += r[j];
            for (int k = 0; k < q->n_rare; k++)
                acc[HP_RS_RARE] += r[q->rare[k]];
        }
        if (i != q->first)
            acc[HP_RS_FIRST] += r[q->first];
        if (sep_query(q, i)) /* a causal query's later [SEP] keys hold 0 */
            for (int k = 0; k < q->n_seps; k++)
                acc[HP_RS_SEP] += r[q->seps[k]];
        /* every visible key (padding keys hold 0): offsets and entropy, 0 log 0 = 0 */
        const int n = q->causal ? i + 1 : T;
        double e = 0;
        for (int j = 0; j < n; j++) {
            const double x = r[j];
            off[j - i] += x;
            if (x > 0)
                e -= x * log2(x);
        }
        acc[HP_RS_ENT] += e;
    }
}

void hp_roles_seq_count(const struct hp_roles_seq *q, int64_t *n_queries, int64_t *n_prev, int64_t *n_dup,
                        int64_t *n_first, int64_t *n_sep)
{
    for (int i = 0; i < q->T; i++) {
        if (!query_ok(q, i))
            continue;
        ++*n_queries;
        *n_prev += i >= 1 && real(q, i - 1);
        *n_dup += q->prev_occ[i] >= 0 || (!q->causal && q->next_occ[i] >= 0);
        *n_first += i != q->first;
        *n_sep += sep_query(q, i);
    }
}

// --- the passes --------------------------------------------------------------------

/* What the attention tap reduces into during one chunk. */
struct pass {
    int H, nb;       /* heads a layer, sequences a chunk (the stride of the sums) */
    int width;       /* sums per (layer, head, sequence) */
    double *acc;     /* (n_layers, H, nb, width) */
    const struct hp_roles_seq *seqs; /* (nb): the held-out set's chunk; NULL for the probe */
    int probe_len;
};

/* The tap: concurrent calls, each for its own (layer, head, block), so each writes its own sums. */
static void on_attn(void *user, int layer, int head, int block, const float *p, int T)
{
    const struct pass *ps = user;
    double *acc = ps->acc + (((size_t)layer * ps->H + head) * ps->nb + block) * ps->width;
    (void)T;
    if (ps->seqs)
        hp_roles_seq_reduce(&ps->seqs[block], p, acc);
    else
        probe_reduce(p, ps->probe_len, acc);
}

/* The chunk's sums of its nbc sequences added to tot (n_layers, H, width), in order. */
static void add_chunk(const struct pass *ps, int n_layers, int nbc, double *tot)
{
    for (size_t lh = 0; lh < (size_t)n_layers * ps->H; lh++) {
        double *t = tot + lh * ps->width;
        for (int b = 0; b < nbc; b++) {
            const double *a = ps->acc + (lh * ps->nb + b) * ps->width;
            for (int k = 0; k < ps->width; k++)
                t[k] += a[k];
        }
    }
}

static int chunk_seqs(int T, int n)
{
    int nb = CHUNK_ROWS / T;
    return nb < 1 ? 1 : nb > n ? n : nb;
}

struct work {
    int64_t *freq;     /* (n_vocab) */
    int32_t *last;     /* (n_vocab) */
    int32_t *links;    /* (nb, 4, T): prev_occ, next_occ, rare, seps */
    struct hp_roles_seq *seqs; /* (nb) */
    double *acc, *tot; /* the pass's sums and their totals */
    int32_t *probe, *perm;
    struct hp_fwd *fwd;
};

static void work_free(struct work *w)
{
    free(w->freq), free(w->last), free(w->links), free(w->seqs), free(w->acc), free(w->tot);
    free(w->probe), free(w->perm);
    hp_fwd_free(w->fwd);
}

/* The held-out set's pass: every head's sums into tot (n_layers, n_heads, hp_roles_seq_width(T)), counts into r. */
static enum hp_status data_pass(const struct hp_model *m, const struct hp_data *d, const struct hp_roles_opts *o,
                                int total, struct work *w, struct hp_roles *r, struct hp_error *err)
{
    const struct hp_model_info *in = hp_model_get_info(m);
    const int T = d->seq_len, L = in->n_layers, H = in->n_heads, V = in->n_vocab, width = hp_roles_seq_width(T);
    const int nb = chunk_seqs(T, d->n_seqs);
    const size_t sums = (size_t)L * H * width;
    w->freq = calloc((size_t)V, sizeof *w->freq);
    w->last = malloc((size_t)V * sizeof *w->last);
    w->links = malloc((size_t)nb * 4 * T * sizeof *w->links);
    w->seqs = calloc((size_t)nb, sizeof *w->seqs);
    w->acc = malloc(sums * nb * sizeof *w->acc);
    w->tot = calloc(sums, sizeof *w->tot);
    w->fwd = hp_fwd_new(m, T, nb);
    if (!w->freq || !w->last || !w->links || !w->seqs || !w->acc || !w->tot || !w->fwd)
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory for head roles over %d-token rows", d->path, T);
    for (int v = 0; v < V; v++)
        w->last[v] = -1;
    /* rare tokens: each id's frequency over the real positions of the whole set (encoders only) */
    for (size_t i = 0; !in->causal && i < (size_t)d->n_seqs * T; i++)
        if (!d->attn_mask || d->attn_mask[i])
            w->freq[d->ids[i]]++;
    for (int b = 0; b < nb; b++) {
        int32_t *lk = w->links + (size_t)b * 4 * T;
        w->seqs[b].prev_occ = lk;
        w->seqs[b].next_occ = lk + T;
        w->seqs[b].rare = lk + 2 * T;
        w->seqs[b].seps = lk + 3 * T;
    }
    struct pass ps = {.H = H, .nb = nb, .width = width, .acc = w->acc, .seqs = w->seqs};
    for (int s0 = 0; s0 < d->n_seqs; s0 += nb) {
        const int nbc = d->n_seqs - s0 < nb ? d->n_seqs - s0 : nb;
        for (int b = 0; b < nbc; b++) {
            const size_t off = (size_t)(s0 + b) * T;
            hp_roles_seq_prepare(&w->seqs[b], d->ids + off, d->attn_mask ? d->attn_mask + off : NULL, T, in->causal,
                                 in->causal ? NULL : w->freq, r->sep_id, w->last);
            hp_roles_seq_count(&w->seqs[b], &r->n_queries, &r->n_prev, &r->n_duplicate, &r->n_first, &r->n_sep);
        }
        memset(w->acc, 0, sums * nb * sizeof *w->acc);
        const size_t off = (size_t)s0 * T;
        struct hp_fwd_in fin = {.ids = d->ids + off,
                                .attn_mask = d->attn_mask ? d->attn_mask + off : NULL,
                                .type_ids = d->type_ids ? d->type_ids + off : NULL,
                                .T = T,
                                .n_seqs = nbc};
        struct hp_fwd_taps taps = {.attn = on_attn, .attn_user = &ps};
        hp_fwd_run(m, w->fwd, &fin, NULL, &taps);
        add_chunk(&ps, L, nbc, w->tot);
        if (o && o->progress)
            o->progress(o->user, s0 + nbc, total);
    }
    hp_fwd_free(w->fwd);
    w->fwd = NULL;
    free(w->acc);
    w->acc = NULL;
    return HP_OK;
}

/* The probe's pass: every head's attention at offsets -WIN..WIN of the earlier occurrence, summed into probe_tot. */
static enum hp_status probe_pass(const struct hp_model *m, const struct hp_roles_opts *o, int done, int total,
                                 struct work *w, double *probe_tot, const struct hp_roles *r, struct hp_error *err)
{
    const struct hp_model_info *in = hp_model_get_info(m);
    const int len = r->probe_len, T = 2 * len, L = in->n_layers, H = in->n_heads;
    const int nb = chunk_seqs(T, r->probe_seqs);
    w->probe = malloc((size_t)r->probe_seqs * T * sizeof *w->probe);
    w->perm = malloc((size_t)in->n_vocab * sizeof *w->perm);
    w->acc = malloc((size_t)L * H * nb * NW * sizeof *w->acc);
    w->fwd = hp_fwd_new(m, T, nb);
    if (!w->probe || !w->perm || !w->acc || !w->fwd)
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory for the induction probe", m->dir);
    hp_roles_probe(in->n_vocab, r->probe_seqs, len, r->probe_seed, w->perm, w->probe);
    struct pass ps = {.H = H, .nb = nb, .width = NW, .acc = w->acc, .probe_len = len};
    for (int s0 = 0; s0 < r->probe_seqs; s0 += nb) {
        const int nbc = r->probe_seqs - s0 < nb ? r->probe_seqs - s0 : nb;
        memset(w->acc, 0, (size_t)L * H * nb * NW * sizeof *w->acc);
        struct hp_fwd_in fin = {.ids = w->probe + (size_t)s0 * T, .T = T, .n_seqs = nbc};
        struct hp_fwd_taps taps = {.attn = on_attn, .attn_user = &ps};
        hp_fwd_run(m, w->fwd, &fin, NULL, &taps);
        add_chunk(&ps, L, nbc, probe_tot);
        if (o && o->progress)
            o->progress(o->user, done + s0 + nbc, total);
    }
    return HP_OK;
}

// --- scores ------------------------------------------------------------------------

static double mean_of(double sum, int64_t n)
{
    return n > 0 ? sum / (double)n : NAN;
}

/* Offsets in the order ties are settled: 0, -1, 1, -2, 2, ... (the nearest first, then the earlier). */
static int tie_order(int k)
{
    return k % 2 ? -(k + 1) / 2 : k / 2;
}

/*
 * Head (l, h)'s scores from its totals t (hp_roles_seq_width(T)) and probe
 * totals pt (NW). Returns NULL, or where a sum is not finite (the attention
 * was not): "the data" or "the induction probe".
 */
static const char *finish_head(const struct hp_roles *r, const double *t, const double *pt, struct hp_head_roles *hr)
{
    const int T = r->seq_len;
    for (int k = 0; k < hp_roles_seq_width(T); k++)
        if (!isfinite(t[k]))
            return "the data";
    for (int k = 0; k < NW; k++)
        if (!isfinite(pt[k]))
            return "the induction probe";
    hr->prev_token = mean_of(t[HP_RS_PREV], r->n_prev);
    hr->duplicate_token = mean_of(t[HP_RS_DUP], r->n_duplicate);
    hr->first_token = mean_of(t[HP_RS_FIRST], r->n_first);
    hr->rare_token = r->causal ? NAN : mean_of(t[HP_RS_RARE], r->n_queries);
    hr->entropy = mean_of(t[HP_RS_ENT], r->n_queries);
    hr->sep_token = r->sep_id < 0 ? NAN : mean_of(t[HP_RS_SEP], r->n_sep);
    /* the dominant offset: the largest share of all attention, among key - query in -(T-1)..0 (causal) or
     * -(T-1)..T-1 */
    const double *off = t + HP_RS_OFF + (T - 1);
    hr->dominant_offset = 0;
    hr->dominant_mass = NAN;
    for (int k = 0; k < 2 * T - 1 && r->n_queries > 0; k++) {
        const int d = tie_order(k);
        if (r->causal && d > 0)
            continue;
        double v = off[d] / (double)r->n_queries;
        if (isnan(hr->dominant_mass) || v > hr->dominant_mass) {
            hr->dominant_offset = d;
            hr->dominant_mass = v;
        }
    }
    hr->induction = mean_of(pt[1 + WIN], probe_count(r->probe_seqs, r->probe_len, 1));
    hr->induction_offset = 0;
    hr->induction_mass = NAN;
    for (int k = 0; k < NW; k++) {
        const int d = tie_order(k);
        double v = mean_of(pt[d + WIN], probe_count(r->probe_seqs, r->probe_len, d));
        if (isnan(hr->induction_mass) || v > hr->induction_mass) {
            hr->induction_offset = d;
            hr->induction_mass = v;
        }
    }
    return NULL;
}

bool hp_roles_offset_shown(double induction_mass)
{
    return induction_mass >= HP_ROLES_OFFSET_MIN_MASS; /* false for NaN */
}

static void absent_head(struct hp_head_roles *hr)
{
    *hr = (struct hp_head_roles){.present = false};
    hr->prev_token = hr->duplicate_token = hr->induction = hr->induction_mass = hr->first_token = NAN;
    hr->dominant_mass = hr->entropy = hr->rare_token = hr->sep_token = NAN;
}

enum hp_status hp_roles_sep_id(const struct hp_model *m, int32_t *id, struct hp_error *err)
{
    const int V = hp_model_get_info(m)->n_vocab;
    cJSON *c = NULL; /* config.json was read when the model loaded: it parses */
    char path[4352]; /* for a message only: a longer folder name is cut */
    snprintf(path, sizeof path, "%s/config.json", m->dir);
    enum hp_status st = hp_json_parse(path, 1, m->config_text, strlen(m->config_text), NULL, &c, err);
    if (st != HP_OK)
        return st;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, "sep_token_id");
    *id = -1;
    if (v && !cJSON_IsNull(v)) {
        const bool ok = cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < V &&
                        v->valuedouble == floor(v->valuedouble);
        const double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
        cJSON_Delete(c);
        if (!ok)
            return hp_fail(err, HP_ERR_FORMAT, "%s/config.json: sep_token_id %.17g is no token id of the model "
                           "(0 to %d)", m->dir, x, V - 1);
        *id = (int32_t)x;
        return HP_OK;
    }
    cJSON_Delete(c);
    struct hp_tokenizer *t;
    struct hp_error why;
    if (hp_tokenizer_open(m->dir, &t, &why) != HP_OK)
        return HP_OK; /* no tokenizer it reads: no [SEP] known */
    const int32_t s = hp_tokenizer_token_id(t, "[SEP]");
    hp_tokenizer_free(t);
    *id = s < V ? s : -1;
    return HP_OK;
}

// --- the entry ---------------------------------------------------------------------

void hp_roles_free(struct hp_roles *r)
{
    if (!r)
        return;
    free(r->heads);
    free(r);
}

enum hp_status hp_roles_compute(const struct hp_model *m, const struct hp_data *d, const struct hp_roles_opts *o,
                                struct hp_roles **out, struct hp_error *err)
{
    *out = NULL;
    const struct hp_model_info *in = hp_model_get_info(m);
    enum hp_status st = hp_eval_check_data(m, d, err);
    if (st != HP_OK)
        return st;
    int seqs, len;
    int32_t sep;
    struct hp_error why;
    if ((st = hp_roles_probe_size(in, o, &seqs, &len, &why)) != HP_OK)
        return hp_fail(err, st, "%s: %s", m->dir, why.msg);
    if ((st = hp_roles_sep_id(m, &sep, err)) != HP_OK)
        return st;
    const int L = in->n_layers, H = in->n_heads, T = d->seq_len, width = hp_roles_seq_width(T);
    struct hp_roles *r = calloc(1, sizeof *r);
    double *probe_tot = calloc((size_t)L * H * NW, sizeof *probe_tot);
    struct work w = {0};
    if (!r || !probe_tot || !(r->heads = calloc((size_t)L * H, sizeof *r->heads))) {
        hp_roles_free(r);
        free(probe_tot);
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    }
    *r = (struct hp_roles){.n_layers = L, .n_heads = H, .causal = in->causal, .n_seqs = d->n_seqs, .seq_len = T,
                           .probe_seqs = seqs, .probe_len = len, .probe_seed = HP_ROLES_PROBE_SEED,
                           .n_induction = probe_count(seqs, len, 1), .sep_id = sep, .heads = r->heads};
    const int total = d->n_seqs + seqs;
    st = data_pass(m, d, o, total, &w, r, err);
    if (st == HP_OK)
        st = probe_pass(m, o, d->n_seqs, total, &w, probe_tot, r, err);
    for (int lh = 0; st == HP_OK && lh < L * H; lh++) {
        struct hp_head_roles *hr = &r->heads[lh];
        if (in->pruned && in->pruned[lh]) {
            absent_head(hr);
            continue;
        }
        hr->present = true;
        const char *bad = finish_head(r, w.tot + (size_t)lh * width, probe_tot + (size_t)lh * NW, hr);
        if (bad)
            st = hp_fail(err, HP_ERR_FORMAT,
                         "%s: head %d.%d's attention on %s (%s) is not finite (check the weights and config.json, "
                         "e.g. its layer norm epsilon); no roles are reported",
                         m->dir, lh / H, lh % H, bad, d->path);
    }
    work_free(&w);
    free(probe_tot);
    if (st != HP_OK) {
        hp_roles_free(r);
        return st;
    }
    *out = r;
    return HP_OK;
}
