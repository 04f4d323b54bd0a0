/*
 * gates.c -- Voita et al.'s head gates: a Hard Concrete gate on every query
 * head, its log alpha trained by Adam under an L0 penalty with the model's
 * weights frozen, then read at test time; and the training data of a plan's
 * gates studies.
 *
 * One step is one forward and one reverse pass over the training set
 * (hp_evaluator_grad, at the drawn gates): the objective is the plan's metric
 * there (loss, KL from the unmasked model, or 1 - cos for an encoder without
 * a head) plus lambda times the expected number of open gates. The noise is
 * one draw a head a step, shared by every training sequence (as Voita), so
 * the step's gradient is the exact gradient of that draw's objective.
 *
 * Invariants: a step is a function of the state (log alpha, Adam's moments,
 * the generator) and the training data alone, so a run resumed from a saved
 * state goes on exactly as an uninterrupted one; gates, penalty and Adam are
 * computed in double. The formulas are docs/plans.md's ("Gate training");
 * tools/gen_gate_fixtures.py is their float64 reference.
 * Must not: print, know SQL (the sweep stores the state), or change the
 * evaluator's state beyond what hp_evaluator_grad does.
 */
#include "gates.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "data.h" /* hp_task_alloc: a task's rows taken with their answers */
#include "eval.h" /* the evaluator's model and data */
#include "job.h"
#include "study/study.h" /* hp_study_trains: the studies that train on the plan's training set */
#include "util.h"

// --- the Hard Concrete gate and its L0 penalty --------------------------------------

/* sigmoid(x), without overflow at either end */
static double sigmoid(double x)
{
    if (x >= 0)
        return 1.0 / (1.0 + exp(-x));
    const double e = exp(x);
    return e / (1.0 + e);
}

double hp_gate_sample(double log_alpha, double u, double beta, double *dz)
{
    const double s = sigmoid((log(u) - log1p(-u) + log_alpha) / beta);
    const double r = s * (HP_GATE_ZETA - HP_GATE_GAMMA) + HP_GATE_GAMMA;
    if (dz) /* clipped: flat there */
        *dz = r > 0 && r < 1 ? (HP_GATE_ZETA - HP_GATE_GAMMA) * s * (1 - s) / beta : 0.0;
    return r <= 0 ? 0.0 : r >= 1 ? 1.0 : r;
}

double hp_gate_test(double log_alpha)
{
    const double r = sigmoid(log_alpha) * (HP_GATE_ZETA - HP_GATE_GAMMA) + HP_GATE_GAMMA;
    return r <= 0 ? 0.0 : r >= 1 ? 1.0 : r;
}

double hp_gate_l0(double log_alpha, double beta, double *dp)
{
    const double p = sigmoid(log_alpha - beta * log(-HP_GATE_GAMMA / HP_GATE_ZETA));
    if (dp)
        *dp = p * (1 - p);
    return p;
}

void hp_gate_adam(double *x, double *m, double *v, double g, int t, double lr)
{
    *m = HP_GATE_ADAM_B1 * *m + (1 - HP_GATE_ADAM_B1) * g;
    *v = HP_GATE_ADAM_B2 * *v + (1 - HP_GATE_ADAM_B2) * g * g;
    const double mh = *m / (1 - pow(HP_GATE_ADAM_B1, t)), vh = *v / (1 - pow(HP_GATE_ADAM_B2, t));
    *x -= lr * mh / (sqrt(vh) + HP_GATE_ADAM_EPS);
}

// --- the noise ---------------------------------------------------------------------

void hp_gate_rng_seed(uint64_t rng[4], uint64_t seed, const char *study, double lambda)
{
    /* as a random study seeds a draw (study/random.c; util.h's generators): the same everywhere */
    uint64_t bits;
    memcpy(&bits, &lambda, sizeof bits);
    uint64_t x = seed;
    x = hp_splitmix64(&x) ^ hp_fnv1a(study);
    x = hp_splitmix64(&x) ^ bits;
    for (int i = 0; i < 4; i++)
        rng[i] = hp_splitmix64(&x);
}

double hp_gate_uniform(uint64_t rng[4])
{
    return ((double)(hp_xoshiro256ss(rng) >> 11) + 0.5) * 0x1p-53;
}

// --- training ----------------------------------------------------------------------

bool hp_gates_state_init(struct hp_gates_state *st, int n, double init, uint64_t seed, const char *study,
                         double lambda)
{
    memset(st, 0, sizeof *st);
    st->n = n;
    st->log_alpha = malloc((size_t)n * sizeof(double));
    st->m = calloc((size_t)n, sizeof(double));
    st->v = calloc((size_t)n, sizeof(double));
    if (!st->log_alpha || !st->m || !st->v) {
        hp_gates_state_free(st);
        return false;
    }
    for (int i = 0; i < n; i++)
        st->log_alpha[i] = init;
    hp_gate_rng_seed(st->rng, seed, study, lambda);
    st->objective = st->value = st->penalty = NAN;
    return true;
}

void hp_gates_state_free(struct hp_gates_state *st)
{
    if (!st)
        return;
    free(st->log_alpha), free(st->m), free(st->v);
    st->log_alpha = st->m = st->v = NULL;
}

enum hp_status hp_gates_objective(struct hp_evaluator *ev, const struct hp_gates_cfg *cfg, const double *log_alpha,
                                  uint64_t rng[4], double *grad, double *value, double *penalty, struct hp_error *err)
{
    const struct hp_model_info *in = hp_model_get_info(hp_eval_model(ev));
    const int n = in->n_layers * in->n_heads;
    struct hp_mask *mask = hp_mask_new(in->n_layers, in->n_heads);
    double *dz = malloc((size_t)n * sizeof *dz);
    enum hp_status s = mask && dz ? HP_OK : hp_fail(err, HP_ERR_NOMEM, "out of memory for %d gates", n);
    double pen = 0;
    for (int h = 0; s == HP_OK && h < n; h++) {
        const double u = hp_gate_uniform(rng); /* drawn for every head, so the stream does not depend on `fixed` */
        if (cfg->fixed && cfg->fixed[h]) {
            mask->gate[h] = 0.0f;
            dz[h] = 0;
            continue;
        }
        mask->gate[h] = (float)hp_gate_sample(log_alpha[h], u, cfg->beta, &dz[h]);
        pen += hp_gate_l0(log_alpha[h], cfg->beta, NULL);
    }
    if (s == HP_OK)
        s = hp_evaluator_grad(ev, cfg->metric, mask, HP_ABLATE_ZERO, grad, NULL, value, err);
    for (int h = 0; s == HP_OK && h < n; h++) {
        double dp = 0;
        if (!(cfg->fixed && cfg->fixed[h]))
            hp_gate_l0(log_alpha[h], cfg->beta, &dp);
        grad[h] = grad[h] * dz[h] + cfg->lambda * dp; /* dvalue/dz dz/dlog_alpha + lambda dP/dlog_alpha */
    }
    *penalty = pen;
    hp_mask_free(mask);
    free(dz);
    return s;
}

enum hp_status hp_gates_step(struct hp_evaluator *ev, const struct hp_gates_cfg *cfg, struct hp_gates_state *st,
                             struct hp_error *err)
{
    const int n = st->n;
    assert(n == hp_model_get_info(hp_eval_model(ev))->n_layers * hp_model_get_info(hp_eval_model(ev))->n_heads);
    double *grad = malloc((size_t)n * sizeof *grad), value = NAN, penalty = 0;
    uint64_t rng[4];
    memcpy(rng, st->rng, sizeof rng);
    enum hp_status s = grad ? HP_OK : hp_fail(err, HP_ERR_NOMEM, "out of memory for %d gates", n);
    if (s == HP_OK)
        s = hp_gates_objective(ev, cfg, st->log_alpha, rng, grad, &value, &penalty, err);
    const double objective = value + cfg->lambda * penalty;
    if (s == HP_OK && !isfinite(objective))
        s = hp_fail(err, HP_ERR_FORMAT, "%s: the gates' objective at step %d is not finite (%s %g + %g x %g)",
                    hp_eval_data(ev)->path, st->step + 1, cfg->metric == HP_METRIC_COS ? "1 - cos" : hp_metric_name(cfg->metric),
                    value, cfg->lambda, penalty);
    if (s == HP_OK) {
        /* Adam on d objective / d log alpha */
        const int t = st->step + 1;
        for (int h = 0; h < n; h++)
            if (!(cfg->fixed && cfg->fixed[h]))
                hp_gate_adam(&st->log_alpha[h], &st->m[h], &st->v[h], grad[h], t, cfg->lr);
        memcpy(st->rng, rng, sizeof rng);
        st->step = t;
        st->value = value;
        st->penalty = penalty;
        st->objective = objective;
    }
    free(grad);
    return s;
}

int hp_gates_state_mask(const struct hp_gates_state *st, const uint8_t *fixed, float *gate, float *pruned)
{
    int kept = 0;
    for (int h = 0; h < st->n; h++) {
        const double g = fixed && fixed[h] ? 0.0 : hp_gate_test(st->log_alpha[h]);
        kept += g > 0;
        if (gate)
            gate[h] = (float)g;
        if (pruned)
            pruned[h] = g > 0 ? 1.0f : 0.0f;
    }
    return kept;
}

char *hp_gates_mask_text(const struct hp_mask *m)
{
    const size_t n = (size_t)m->n_layers * m->n_heads;
    bool frac = false;
    for (size_t i = 0; i < n && !frac; i++)
        frac = m->gate[i] != 0.0f && m->gate[i] != 1.0f;
    for (int l = 0; l < m->n_layers && !frac; l++)
        frac = m->mlp[l] != 0.0f && m->mlp[l] != 1.0f;
    if (!frac)
        return hp_mask_format(m);
    /* "L.H=g" (then "mlp:L=g"): at most 2 x 11 digits, '.', '=', 15 characters of %.9g and ',' */
    char *buf = malloc(6 + (n + (size_t)m->n_layers) * 40 + 1);
    if (!buf)
        return NULL;
    size_t o = (size_t)sprintf(buf, "%s", HP_KEY_GATES);
    for (int l = 0; l < m->n_layers; l++) {
        for (int h = 0; h < m->n_heads; h++) {
            const float g = m->gate[(size_t)l * m->n_heads + h];
            if (g != 1.0f)
                o += (size_t)sprintf(buf + o, "%s%d.%d=%.9g", o > 6 ? "," : "", l, h, (double)g);
        }
        if (m->mlp[l] != 1.0f)
            o += (size_t)sprintf(buf + o, "%smlp:%d=%.9g", o > 6 ? "," : "", l, (double)m->mlp[l]);
    }
    return buf;
}

// --- training data --------------------------------------------------------------------

/* Rows [r0, r0 + n) of d as a set of their own (path: d's with the rows named). NULL when out of memory. */
static struct hp_data *take_rows(const struct hp_data *d, int r0, int n, bool name_rows)
{
    struct hp_data *o = calloc(1, sizeof *o);
    if (!o)
        return NULL;
    const size_t T = (size_t)d->seq_len, at = (size_t)r0 * T, cnt = (size_t)n * T;
    o->n_seqs = n;
    o->seq_len = d->seq_len;
    bool ok = (name_rows ? hp_path_make(&o->path, NULL, "%s (rows %d-%d)", d->path, r0, r0 + n - 1)
                         : hp_path_make(&o->path, NULL, "%s", d->path)) == HP_OK;
    ok = ok && (o->ids = malloc(cnt * sizeof *o->ids)) != NULL;
#define TAKE(f, per)                                                                                     \
    if (ok && d->f) {                                                                                    \
        ok = (o->f = malloc((size_t)n * (per) * sizeof *o->f)) != NULL;                                  \
        if (ok)                                                                                          \
            memcpy(o->f, d->f + (size_t)r0 * (per), (size_t)n * (per) * sizeof *o->f);                   \
    }
    if (ok)
        memcpy(o->ids, d->ids + at, cnt * sizeof *o->ids);
    TAKE(labels, T)
    TAKE(attn_mask, T)
    TAKE(type_ids, T)
    TAKE(seq_labels, 1)
#undef TAKE
    const struct hp_task *k = d->task;
    if (ok && k && (ok = hp_task_alloc(o, k->wrong != NULL, k->corrupt != NULL) == HP_OK)) {
        const size_t rows = (size_t)n * sizeof(int32_t);
        memcpy(o->task->answer, k->answer + r0, rows);
        memcpy(o->task->pos, k->pos + r0, rows);
        memcpy(o->task->line, k->line + r0, rows);
        o->task->swapped = k->swapped;
        if (k->wrong)
            memcpy(o->task->wrong, k->wrong + r0, rows);
        if (k->corrupt)
            memcpy(o->task->corrupt, k->corrupt + at, cnt * sizeof *k->corrupt);
    }
    if (!ok) {
        hp_data_free(o);
        return NULL;
    }
    return o;
}

/* Whether task row i of a and row j of b have the same answer, position, wrong answer and corrupt prompt. */
static bool same_task_row(const struct hp_data *a, int i, const struct hp_data *b, int j)
{
    const struct hp_task *x = a->task, *y = b->task;
    if (!x || !y)
        return !x == !y;
    const size_t T = (size_t)a->seq_len;
    return x->swapped == y->swapped && x->answer[i] == y->answer[j] && x->pos[i] == y->pos[j] &&
           !x->wrong == !y->wrong &&
           (!x->wrong || x->wrong[i] == y->wrong[j]) && !x->corrupt == !y->corrupt &&
           (!x->corrupt || !memcmp(x->corrupt + i * T, y->corrupt + j * T, T * sizeof *x->corrupt));
}

/* Whether row i of a and row j of b are the same sequence: ids, labels, masks, types and class (and a task
 * row's answers). */
static bool same_row(const struct hp_data *a, int i, const struct hp_data *b, int j)
{
    const size_t T = (size_t)a->seq_len, ia = (size_t)i * T, jb = (size_t)j * T;
    if (a->seq_len != b->seq_len || memcmp(a->ids + ia, b->ids + jb, T * sizeof *a->ids) != 0)
        return false;
#define SAME(f, per) (!a->f == !b->f && (!a->f || !memcmp(a->f + (size_t)i * (per), b->f + (size_t)j * (per), \
                                                         (per) * sizeof *a->f)))
    return SAME(labels, T) && SAME(attn_mask, T) && SAME(type_ids, T) && SAME(seq_labels, 1) &&
           same_task_row(a, i, b, j);
#undef SAME
}

struct row_hash {
    uint64_t h;
    int row;
};

static int by_hash(const void *x, const void *y)
{
    const struct row_hash *a = x, *b = y;
    if (a->h != b->h)
        return a->h < b->h ? -1 : 1;
    return a->row - b->row;
}

/* The first row of train that is also a row of held (its index into *tr, held's into *hr); false if none. */
static bool find_shared_row(const struct hp_data *held, const struct hp_data *train, int *tr, int *hr, bool *nomem)
{
    *nomem = false;
    if (held->seq_len != train->seq_len)
        return false;
    const size_t T = (size_t)held->seq_len;
    struct row_hash *hs = malloc((size_t)held->n_seqs * sizeof *hs);
    if (!hs) {
        *nomem = true;
        return false;
    }
    for (int i = 0; i < held->n_seqs; i++)
        hs[i] = (struct row_hash){XXH3_64bits(held->ids + (size_t)i * T, T * sizeof *held->ids), i};
    hp_qsort(hs, (size_t)held->n_seqs, sizeof *hs, by_hash);
    bool found = false;
    for (int j = 0; j < train->n_seqs && !found; j++) {
        const uint64_t h = XXH3_64bits(train->ids + (size_t)j * T, T * sizeof *train->ids);
        /* the first held-out row with this hash, then every one after it that shares it */
        int lo = 0, hi = held->n_seqs;
        while (lo < hi) {
            const int mid = lo + (hi - lo) / 2;
            if (hs[mid].h < h)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (int k = lo; k < held->n_seqs && hs[k].h == h && !found; k++)
            if (same_row(train, j, held, hs[k].row)) {
                *tr = j;
                *hr = hs[k].row;
                found = true;
            }
    }
    free(hs);
    return found;
}

enum hp_status hp_gates_data_load(const struct hp_plan *p, const char *metric, struct hp_model *m,
                                  struct hp_data **data, struct hp_data **train, struct hp_error *err)
{
    *train = NULL;
    const struct hp_study *s = NULL;
    for (int i = 0; i < p->n_studies && !s; i++)
        if (hp_study_trains(&p->studies[i]))
            s = &p->studies[i];
    if (!s)
        return HP_OK;
    const struct hp_model_info *in = hp_model_get_info(m);
    enum hp_metric mt;
    if (!hp_metric_parse(metric, &mt) || !hp_metric_has_grad(mt)) {
        char names[128];
        hp_metric_names(names, sizeof names, true, " or ");
        return hp_fail(err, HP_ERR_PLAN, "%s:%d: study '%s' trains on the metric's gradient, and %s has none: use %s",
                       p->path, s->line, s->name, metric, names);
    }
    struct hp_error e2 = {{0}};
    struct hp_data *t = NULL;
    enum hp_status st = HP_OK;
    if (s->gates.train) {
        if ((st = hp_data_load_for(s->gates.train, p->model, in, p->seq_len, &t, &e2)) != HP_OK)
            return hp_fail(err, st == HP_ERR_NOMEM ? st : HP_ERR_PLAN, "%s:%d: study '%s': training data: %s", p->path,
                           s->line, s->name, e2.msg);
        int tr = 0, hr = 0;
        bool nomem = false;
        if (find_shared_row(*data, t, &tr, &hr, &nomem)) {
            hp_data_free(t);
            return hp_fail(err, HP_ERR_PLAN, "%s:%d: study '%s': training sequence %d of %s is held-out sequence %d "
                           "of %s: the curve would be measured on what the gates were trained on (train on other "
                           "sequences, or use split)", p->path, s->line, s->name, tr, s->gates.train, hr, p->data);
        }
        if (nomem) {
            hp_data_free(t);
            return hp_fail(err, HP_ERR_NOMEM, "out of memory comparing training and held-out rows");
        }
    } else {
        const int n = (*data)->n_seqs;
        const int n_train = s->gates.split_count ? s->gates.split_count : (int)fmax(1.0, round(s->gates.split_frac * n));
        if (n_train >= n) {
            char how[64];
            if (s->gates.split_count)
                snprintf(how, sizeof how, "%d", s->gates.split_count);
            else
                snprintf(how, sizeof how, "%g%% (%d)", 100 * s->gates.split_frac, n_train);
            return hp_fail(err, HP_ERR_PLAN, "%s:%d: study '%s': split: %s of the %d sequences of %s leaves none to "
                           "evaluate on (train on fewer, or give 'train: FILE')", p->path, s->line, s->name, how, n,
                           p->data);
        }
        struct hp_data *held = take_rows(*data, 0, n - n_train, false);
        if (held)
            t = take_rows(*data, n - n_train, n_train, true);
        if (!held || !t) {
            hp_data_free(held);
            return hp_fail(err, HP_ERR_NOMEM, "out of memory splitting %s", p->data);
        }
        hp_data_free(*data);
        *data = held;
    }
    /* the training set must fit the model and give the metric, as the held-out set does */
    struct hp_evaluator *ev = NULL;
    if ((st = hp_evaluator_new(m, t, &ev, &e2)) != HP_OK)
        st = hp_fail(err, st == HP_ERR_NOMEM ? st : HP_ERR_PLAN, "%s:%d: study '%s': training data: %s", p->path,
                     s->line, s->name, e2.msg);
    else if (!hp_evaluator_has_metric(ev, metric))
        st = hp_fail(err, HP_ERR_PLAN, "%s:%d: study '%s': training data %s gives no %s, the plan's metric (an MLM "
                     "needs labels, a classifier classes; an encoder without a head gives cos only)", p->path, s->line,
                     s->name, t->path, metric);
    hp_evaluator_free(ev);
    if (st != HP_OK) {
        hp_data_free(t);
        return st;
    }
    *train = t;
    return HP_OK;
}
