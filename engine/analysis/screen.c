/*
 * screen.c -- the screen's stopping rule: the walk in estimate order, the
 * random audits, and the hypergeometric bound on what the audits could have
 * missed (screen.h says the rule and its promise).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "screen.h"
#include "util.h" /* hp_splitmix64_below */

bool hp_screen_init(struct hp_screen *s, const struct hp_screen_opts *o, const int *order)
{
    memset(s, 0, sizeof *s);
    s->o = *o;
    s->order = order;
    s->exact = malloc((size_t)o->n * sizeof *s->exact);
    s->done = calloc((size_t)o->n, sizeof *s->done);
    s->pending = malloc((size_t)o->n * sizeof *s->pending);
    s->rng = o->seed;
    s->tau = -INFINITY;
    return s->exact && s->done && s->pending;
}

void hp_screen_free(struct hp_screen *s)
{
    free(s->exact), free(s->done), free(s->pending);
    memset(s, 0, sizeof *s);
}

/* Position of unit u in the estimate order (the tie-break). */
static int position(const struct hp_screen *s, int u)
{
    for (int i = 0; i < s->o.n; i++)
        if (s->order[i] == u)
            return i;
    return s->o.n;
}

/* Whether evaluated unit a ranks above evaluated unit b: a larger effect, or the same and earlier in order. */
static bool ranks_above(const struct hp_screen *s, int a, int pa, int b, int pb)
{
    return s->exact[a] > s->exact[b] || (s->exact[a] == s->exact[b] && pa < pb);
}

bool hp_screen_in_top(const struct hp_screen *s, int u)
{
    if (u < 0 || u >= s->o.n || !s->done[u] || s->audit_pending || s->n_pending)
        return false;
    const int pu = position(s, u);
    int above = 0;
    for (int i = 0; i < s->o.n && above < s->o.k; i++) {
        const int v = s->order[i];
        above += v != u && s->done[v] && ranks_above(s, v, i, u, pu);
    }
    return above < s->o.k;
}

static int by_desc(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

double hp_screen_threshold(const struct hp_screen *s)
{
    if (s->n_done < s->o.k)
        return -INFINITY;
    double *v = malloc((size_t)s->n_done * sizeof *v);
    if (!v)
        return NAN;
    int n = 0;
    for (int u = 0; u < s->o.n; u++)
        if (s->done[u])
            v[n++] = s->exact[u];
    hp_qsort(v, (size_t)n, sizeof *v, by_desc);
    const double t = v[s->o.k - 1];
    free(v);
    return t;
}

/* The next walk batch: up to want units along the order not yet evaluated. */
static int walk(struct hp_screen *s, int want, int *units)
{
    int n = 0;
    while (n < want && s->walked < s->o.n) {
        const int u = s->order[s->walked++];
        if (!s->done[u])
            units[n++] = u;
    }
    return n;
}

/* Whether the last `batch` units walked (along the order, audited ones included) are all outside the top k. */
static bool walk_settled(const struct hp_screen *s)
{
    int seen = 0;
    for (int i = s->walked - 1; i >= 0 && seen < s->o.batch; i--, seen++)
        if (hp_screen_in_top(s, s->order[i]))
            return false;
    return true;
}

/* An audit: up to audit units drawn uniformly without replacement from the unevaluated ones (a partial
 * Fisher-Yates shuffle over them, in unit order, so the draw depends on the seed and the set alone). */
static int audit(struct hp_screen *s, int *units)
{
    int n = 0;
    for (int u = 0; u < s->o.n; u++)
        if (!s->done[u])
            units[n++] = u;
    s->last_pop = n;
    const int m = n < s->o.audit ? n : s->o.audit;
    for (int i = 0; i < m; i++) {
        const int j = i + (int)hp_splitmix64_below(&s->rng, (uint64_t)(n - i));
        const int t = units[i];
        units[i] = units[j], units[j] = t;
    }
    s->last_audited = m;
    return m;
}

int hp_screen_next(struct hp_screen *s, int *units, int *round)
{
    if (s->finished || s->n_pending)
        return 0;
    int n = 0;
    if (s->n_done == 0) {
        n = walk(s, s->o.k + s->o.batch, units);
        *round = 0;
    } else if (s->n_done == s->o.n) {
        s->finished = true;
    } else if (s->walk_batches > 0 && walk_settled(s)) {
        s->tau = hp_screen_threshold(s);
        s->round++;
        s->audit_pending = true;
        n = audit(s, units);
        *round = s->round;
    } else {
        n = walk(s, s->o.batch, units);
        *round = 0;
    }
    if (n == 0)
        s->finished = true; /* the walk ran out: every unit was handed out (and fed) */
    for (int i = 0; i < n; i++) {
        s->pending[i] = units[i];
        s->done[units[i]] = true;
    }
    s->n_pending = n;
    return n;
}

void hp_screen_feed(struct hp_screen *s, const double *exact)
{
    bool above = false;
    for (int i = 0; i < s->n_pending; i++) {
        s->exact[s->pending[i]] = exact[i];
        above |= exact[i] > s->tau;
    }
    s->n_done += s->n_pending;
    s->n_pending = 0;
    if (s->audit_pending) {
        s->audit_pending = false;
        s->walk_batches = 0;
        if (!above)
            s->finished = true; /* none above tau: the top k stands */
        s->tau = -INFINITY;
    } else {
        s->walk_batches++;
    }
    if (s->n_done == s->o.n)
        s->finished = true;
}

int hp_screen_missed_bound(int population, int audited, double alpha)
{
    const int n = population, m = audited;
    int k = 0;
    /* P(none of K marked among m draws) = prod_{i<m} (n - K - i) / (n - i), falling in K */
    for (int cand = 1; cand <= n - m; cand++) {
        double p = 1;
        for (int i = 0; i < m && p > alpha; i++)
            p *= (double)(n - cand - i) / (double)(n - i);
        if (p <= alpha)
            break;
        k = cand;
    }
    return k;
}

void hp_screen_verdict(const struct hp_screen *s, double alpha, struct hp_screen_verdict *v)
{
    memset(v, 0, sizeof *v);
    v->evaluated = s->n_done;
    v->rounds = s->round;
    v->threshold = hp_screen_threshold(s);
    v->unevaluated = s->o.n - s->n_done;
    if (v->unevaluated > 0) {
        v->population = s->last_pop;
        v->audited = s->last_audited;
        v->missed_max = hp_screen_missed_bound(v->population, v->audited, ldexp(alpha, -v->rounds));
    }
}
