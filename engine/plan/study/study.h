/*
 * study.h -- what the study kinds (engine/plan/study/) offer beyond the public
 * header, to the sweep, gates.c and `headprune plan`: the procedure a kind
 * runs, and what a study costs. The rows themselves are study_int.h's,
 * for the planner only.
 */
#ifndef HP_STUDY_H
#define HP_STUDY_H

#include <stddef.h>

#include "headprune.h"

/* The sweep's procedure a study kind runs besides its expanded jobs (a row each in sweep.c's table, the
 * procedure in engine/sweep/sweep_<procedure>.c). */
enum hp_study_run {
    HP_STUDY_RUN_JOBS,      /* none: the expanded jobs are the study */
    HP_STUDY_RUN_SCORES,    /* one gradient at the unmasked model, into scores (before the jobs) */
    HP_STUDY_RUN_ITERATIVE, /* the pruning curve, step by step (after the jobs, as the rest) */
    HP_STUDY_RUN_ROLES,     /* every head's roles, one unmasked pass */
    HP_STUDY_RUN_GATES,     /* gate training per lambda, then its two evaluations */
    HP_STUDY_RUN_PATCHING,  /* each unit patched alone, at every position or at each (the data's) */
    HP_STUDY_RUN_SCREEN,    /* the units in estimate order with audits, until the exact top k stands (after the jobs) */
    HP_STUDY_RUN_CIRCUIT,   /* edges ranked by their effects patched alone, then circuits of each size (after) */
    HP_STUDY_RUN_COUNT      /* not a procedure: how many there are */
};
enum hp_study_run hp_study_run_of(enum hp_study_kind k);

/* An edges or circuit study's graph: every edge FROM>TO (its from:, to:) the model has, added to m (sorted); an
 * error (a pattern the model has no node for) in one line. engine/plan/study/edges.c. */
enum hp_status hp_study_graph(const struct hp_study *s, const struct hp_model_info *info, struct hp_mask *m,
                              struct hp_error *err);

/* A circuit study's sizes for a graph of n edges: the edges each circuit keeps, ascending and each once, from 0
 * (the empty circuit) to n (the whole graph: the unmasked model), into k (room for HP_CIRCUIT_SIZES_MAX + 2);
 * returns how many. engine/plan/study/circuit.c. */
#define HP_CIRCUIT_SIZES_MAX 64
int hp_study_circuit_sizes(const struct hp_study *s, int n, int *k);

/* What a scores study (HP_STUDY_RUN_SCORES) scores each unit by, from the gradient at the unmasked model. */
enum hp_study_score {
    HP_STUDY_SCORE_NONE,        /* not a scores study */
    HP_STUDY_SCORE_IMPORTANCE,  /* hp_importance: E|dL/dxi| over the sequences, scaled as s->normalize says */
    HP_STUDY_SCORE_ATTRIBUTION, /* an estimate of each ablation's effect, unscaled, by s->estimator */
};
enum hp_study_score hp_study_score_of(enum hp_study_kind k);

/* What a study costs on a model, beyond the jobs it expands into. */
struct hp_study_cost {
    int n_jobs;           /* jobs it expanded into (given) */
    long evals;           /* hp_study_evals */
    long backwards;       /* forward + backward passes over the held-out set */
    long train_backwards; /* ... over the plan's training set (gates: one a step) */
    long passes;          /* unmasked passes of its own (roles) */
};

/*
 * The study's cost on the model (n_jobs: what it expanded into), and the
 * sentence `headprune plan` prints after its name and kind, e.g. "12 jobs",
 * "about 40 evaluations (masks depend on results)". metric: the plan's, as
 * resolved against the model.
 */
/* positions: the rows' length, for a kind whose evaluations are per position (patching: positions each) */
void hp_study_cost(const struct hp_study *s, const struct hp_model_info *info, int n_jobs, int positions,
                   struct hp_study_cost *out);
void hp_study_describe(const struct hp_study *s, const struct hp_model_info *info, const struct hp_study_cost *c,
                       const char *metric, char *buf, size_t cap);

/* Whether the study's gradients are all taken away from its base mask's gates (integrated gradients), so a
 * metric whose gradient is 0 at the unmasked model still gives it one. */
bool hp_study_grad_off_base(const struct hp_study *s);

/* A screen study's sizes on a model: the selected units the checkpoint has, k (given, or its share of them,
 * rounded up), and the walk's step and the audit's draw, given or defaulted. */
struct hp_screen_sizes {
    int units, k, batch, audit;
};
struct hp_screen_sizes hp_study_screen_sizes(const struct hp_study *s, const struct hp_model_info *info);

/* Whether the study's kind takes option name (e.g. "mask", "estimator"), for hints that suggest one. */
bool hp_study_takes(const struct hp_study *s, const char *name);

/* Whether the study trains on the plan's training set (gates: hp_gates_data_load makes it). */
bool hp_study_trains(const struct hp_study *s);

#endif
