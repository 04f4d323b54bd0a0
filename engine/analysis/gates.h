/*
 * gates.h -- Hard Concrete head gates trained under an L0 penalty with
 * the weights frozen (engine/analysis/gates.c): the gate's distribution, the penalty,
 * one training step, and the training data of a plan's gates studies.
 *
 * The formulas (Louizos et al. 2018, as Voita et al. 2019 use them) are in
 * docs/plans.md, "Gate training"; tools/gen_gate_fixtures.py computes them
 * in float64 from that text, and tests/test_gates.c compares.
 */
#ifndef HP_GATES_H
#define HP_GATES_H

#include "headprune.h"

/* The Hard Concrete's stretch: s in (0, 1) is stretched to (gamma, zeta) and clipped to [0, 1]. */
#define HP_GATE_GAMMA (-0.1)
#define HP_GATE_ZETA 1.1

/* Adam's constants (Kingma and Ba's defaults); the step size is the plan's lr. */
#define HP_GATE_ADAM_B1 0.9
#define HP_GATE_ADAM_B2 0.999
#define HP_GATE_ADAM_EPS 1e-8

/*
 * A gate drawn with noise u in (0, 1): s = sigmoid((ln u - ln(1 - u) +
 * log_alpha) / beta), z = min(1, max(0, s (zeta - gamma) + gamma)); *dz (may
 * be NULL) gets dz/dlog_alpha, (zeta - gamma) s (1 - s) / beta inside (0, 1)
 * and 0 where z is clipped.
 */
double hp_gate_sample(double log_alpha, double u, double beta, double *dz);

/* The test-time gate: min(1, max(0, sigmoid(log_alpha) (zeta - gamma) + gamma)). */
double hp_gate_test(double log_alpha);

/* P(z != 0) = sigmoid(log_alpha - beta ln(-gamma / zeta)), the gate's share of
 * the L0 penalty; *dp (may be NULL) gets its derivative in log_alpha. */
double hp_gate_l0(double log_alpha, double beta, double *dp);

/* One Adam step (bias-corrected) of the parameter *x with moments *m, *v along gradient g, t = 1, 2, ... */
void hp_gate_adam(double *x, double *m, double *v, double g, int t, double lr);

/*
 * The noise of one training run: xoshiro256** seeded through splitmix64
 * from seed, the study's name and lambda's bits (a function of those only,
 * as random studies' draws are), and uniform draws in (0, 1) from it,
 * never 0 or 1: ((r >> 11) + 0.5) / 2^53.
 */
void hp_gate_rng_seed(uint64_t rng[4], uint64_t seed, const char *study, double lambda);
double hp_gate_uniform(uint64_t rng[4]);

/* What one training run has reached: everything a resumed run needs to go on exactly. */
struct hp_gates_state {
    int n;             /* gates: n_layers * n_heads */
    int step;          /* Adam steps done */
    double *log_alpha; /* (n_layers, n_heads), row-major */
    double *m, *v;     /* (n_layers, n_heads): Adam's first and second moments */
    uint64_t rng[4];   /* the noise generator, after the draws of `step` steps */
    double objective;  /* the last step's: value + lambda * penalty (NaN before the first step) */
    double value;      /* its metric on the training set at the drawn gates (loss, KL, or 1 - cos) */
    double penalty;    /* sum over the trained heads of P(z != 0), before the step's update */
};

/* A run at step 0: every log alpha at init, the moments 0, the generator seeded.
 * Destructor: hp_gates_state_free. False when out of memory. */
bool hp_gates_state_init(struct hp_gates_state *st, int n, double init, uint64_t seed, const char *study,
                         double lambda);
void hp_gates_state_free(struct hp_gates_state *st);

/* What a run trains on and how. */
struct hp_gates_cfg {
    enum hp_metric metric; /* loss, kl or cos (trained as 1 - cos) */
    double lambda, lr, beta;
    const uint8_t *fixed;  /* NULL or (n): heads held closed and out of the penalty (a pruned checkpoint's) */
};

/*
 * One draw's objective on ev's data and its gradient, the state unchanged:
 * a noise value a head from rng (advanced past them), each head gated by its
 * drawn z, *value the metric at those gates (hp_evaluator_grad, zero
 * ablation), *penalty sum over the heads not fixed of P(z != 0), and grad
 * (n_layers * n_heads) d(value + lambda * penalty)/dlog_alpha =
 * dvalue/dz dz/dlog_alpha + lambda dP/dlog_alpha (0 for fixed heads).
 */
enum hp_status hp_gates_objective(struct hp_evaluator *ev, const struct hp_gates_cfg *cfg, const double *log_alpha,
                                  uint64_t rng[4], double *grad, double *value, double *penalty, struct hp_error *err);

/*
 * One training step on ev's data: draw one noise value a head (shared by
 * every sequence), gate each head by its drawn z, take the metric and its
 * gradient at those gates (hp_evaluator_grad, zero ablation), and move every
 * log alpha by Adam along d(value + lambda * penalty)/dlog_alpha =
 * dvalue/dz dz/dlog_alpha + lambda dP/dlog_alpha. A value or gradient that
 * is not finite is an error and leaves st as it was.
 */
enum hp_status hp_gates_step(struct hp_evaluator *ev, const struct hp_gates_cfg *cfg, struct hp_gates_state *st,
                             struct hp_error *err);

/*
 * The test-time gates of st into gate (n floats, may be NULL) and the pruned
 * set into pruned (n floats, may be NULL): 0 where the test-time gate is 0
 * (and for fixed heads), else 1. Returns the heads kept (test-time gate > 0).
 */
int hp_gates_state_mask(const struct hp_gates_state *st, const uint8_t *fixed, float *gate, float *pruned);

/*
 * The text a variant's content address is made from: hp_mask_format's for
 * gates of 0 and 1 (so a gate run's pruned set has the key of every other
 * variant of that mask), and for a mask with fractional gates
 * "gates:" + "L.H=g" for every head whose gate is not 1, g as %.9g (which a
 * float reads back exactly), comma-separated. NULL when out of memory; freed
 * by the caller.
 */
char *hp_gates_mask_text(const struct hp_mask *m);

#endif
