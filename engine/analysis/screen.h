/*
 * screen.h -- the screen's stopping rule (engine/analysis/screen.c): which units to
 * evaluate exactly, in what order, and when the exact top k can be stated
 * with a bound on what was missed (docs/plans.md, "Screen").
 *
 * The rule, over n units ranked by an estimate (order: best first; the sweep
 * ranks by the estimate's size):
 *   walk: evaluate the next `batch` units in estimate order (the first walk
 *         batch is k + batch units, so the top k has its candidates); after a
 *         walk batch none of whose units entered the exact top k of all the
 *         units evaluated so far, audit;
 *   audit: evaluate `audit` units drawn uniformly at random, without
 *         replacement, from those not yet evaluated. If one of them lies above
 *         tau (the k-th largest exact effect before the audit), the walk
 *         resumes and a new audit follows it; if none does, stop.
 *   Units run out: every unit was evaluated and the top k is exact.
 * On stopping after the r-th audit, with N units unevaluated before it, m
 * audited and none above tau, the number K of the N - m left unevaluated that
 * lie above tau is at most hp_screen_missed_bound(N, m, alpha / 2^r): the
 * largest K for which drawing m of N with none of the K is still more than
 * alpha / 2^r likely (hypergeometric, exact; about N (1 - a^(1/m)), 3N/m at
 * a = 5%). The r-th audit spends alpha / 2^r, so the chance that the stop,
 * after however many audits, states a bound K exceeds is below alpha.
 *
 * Invariants: the rule is a function of the order, the exact effects fed and
 * the seed alone, so a resumed sweep (its results found in the store) walks
 * the same units. Effects are damages: larger is worse; ties keep the order's
 * (an earlier unit in estimate order wins a tie).
 * Must not: evaluate, print, or know the sweep or the store: it is the rule
 * only, tested alone against many random effects.
 */
#ifndef HP_SCREEN_H
#define HP_SCREEN_H

#include <stdbool.h>
#include <stdint.h>

struct hp_screen_opts {
    int n;         /* units */
    int k;         /* the top k wanted, 1 <= k <= n */
    int batch;     /* walk batch after the first (k + batch), >= 1 */
    int audit;     /* units an audit draws, >= 1 */
    uint64_t seed; /* the audits' draws */
};

struct hp_screen {
    struct hp_screen_opts o;
    const int *order; /* (n) unit indices, best estimate first (the caller's, kept while the screen lives) */
    double *exact;    /* (n) by unit: its exact effect, once evaluated */
    bool *done;       /* (n) by unit: evaluated (or handed out by hp_screen_next) */
    int *pending;     /* (n) the batch handed out, awaiting hp_screen_feed */
    int n_pending;
    int walked;       /* how far the walk is along order */
    int n_done;
    int round;        /* audits so far; the batch handed out is an audit when audit_pending */
    bool audit_pending, finished;
    int walk_batches;  /* walk batches since the last audit */
    double tau;        /* the threshold the pending audit is judged by */
    int last_pop;      /* unevaluated units before the last audit (N), and how many it drew (m) */
    int last_audited;
    uint64_t rng;
};

/* A screen over o->n units in order (n indices, a permutation of [0, n)); false when out of memory.
 * Destructor: hp_screen_free (also after a failed init). */
bool hp_screen_init(struct hp_screen *s, const struct hp_screen_opts *o, const int *order);
void hp_screen_free(struct hp_screen *s);

/*
 * The next units to evaluate into units (at least n of room, by unit index) and their round (0: the walk, r >= 1:
 * the r-th audit); returns how many, 0 when the screen has finished. Each batch must be fed (hp_screen_feed)
 * before the next is asked for.
 */
int hp_screen_next(struct hp_screen *s, int *units, int *round);
/* The exact effects (damage, finite) of the batch hp_screen_next handed out, in its order. */
void hp_screen_feed(struct hp_screen *s, const double *exact);

/* Whether unit u is evaluated and among the k largest exact effects so far (ties: earlier in order). */
bool hp_screen_in_top(const struct hp_screen *s, int u);
/* The k-th largest exact effect among the evaluated units (-inf while fewer than k are). */
double hp_screen_threshold(const struct hp_screen *s);

/* What a finished screen states. */
struct hp_screen_verdict {
    int evaluated;  /* exact evaluations */
    int rounds;     /* audits */
    int population; /* N: units unevaluated before the last audit (0: every unit was evaluated) */
    int audited;    /* m: units the last audit drew */
    int unevaluated;/* units left unevaluated: N - m */
    int missed_max; /* at most this many of them lie above the threshold (confidence 1 - alpha, the audits'
                       alpha / 2^r summed) */
    double threshold;
};
void hp_screen_verdict(const struct hp_screen *s, double alpha, struct hp_screen_verdict *v);

/* The largest K in [0, N - m] such that m draws without replacement from N units, K of them marked, all miss the
 * marked ones with probability > alpha: the 1 - alpha upper bound on K after such a draw found none. */
int hp_screen_missed_bound(int population, int audited, double alpha);

#endif
