/*
 * sweep_priv.h -- the sweep family's private insides, shared by engine/sweep*.c
 * and by nothing else (others use hp_sweep_run, headprune.h).
 *
 * The family (SQLite's where*.c + whereInt.h): sweep.c is the entry
 * (hp_sweep_run: opening the model, data, evaluators and store, the shard's
 * expanded jobs, then each study's procedure from the table of procedures);
 * sweep_jobs.c runs jobs and gradients into the store for all of them (the
 * windows, the keys this run stored, progress, threads); one file a
 * procedure, each exporting one row (struct sw_proc) the table points at:
 * sweep_scores.c (HP_STUDY_RUN_SCORES), sweep_iterative.c
 * (HP_STUDY_RUN_ITERATIVE), sweep_roles.c (HP_STUDY_RUN_ROLES),
 * sweep_gates.c (HP_STUDY_RUN_GATES). Calls go one way: sweep.c -> the
 * procedures -> sweep_jobs.c (and sweep.c -> sweep_jobs.c for the shard's
 * jobs). Names shared across the family carry the
 * prefix sw_; everything else in a file is static.
 *
 * A new procedure is its value in enum hp_study_run (engine/plan/study/study.h,
 * before HP_STUDY_RUN_COUNT), its file here exporting its row
 * (sweep_roles.c is the smallest model), a pointer to that row in sweep.c's
 * table (and its extern beside the others), and that file in meson.build.
 *
 * Must not: be included outside engine/sweep*.c; know any study kind by
 * name (a procedure reads its study's options, s->kind's member of struct
 * hp_study, and asks the kind's row through study.h for anything else).
 */
#ifndef HP_SWEEP_PRIV_H
#define HP_SWEEP_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "headprune.h"
#include "cpuload.h" /* struct hp_auto_threads */
#include "hash.h"    /* HP_DIGEST_HEX */
#include "store.h"   /* struct hp_store_metrics, struct hp_store_grad */

/*
 * The kinds of work a sweep counts, each timed on its own: one rate for all (the evaluations') made a gate training
 * of 40 s read "ETA 5s" throughout, its steps costing each a hundred evaluations. total: the plan's estimate for
 * this shard (hp_study_cost's evals, backwards, train_backwards, passes); done: finished, found ones included;
 * measured, seconds: those this run did and the time they took, the kind's rate.
 */
enum sw_work { SW_EVAL, SW_BACKWARD, SW_TRAIN_STEP, SW_PASS, SW_N_WORK };
struct sw_tally {
    int64_t total, done, measured;
    double seconds;
};

/* The seconds the work left takes at the rates measured so far: a kind not yet measured costs what the measured
 * work costs on average until it is; NAN until something has been measured. */
double sw_eta(const struct sw_tally work[SW_N_WORK]);

/* One run of hp_sweep_run: what every procedure reads and counts into. */
struct sw_ctx {
    const struct hp_plan *plan;
    enum hp_metric metric; /* plan->metric, resolved against the model */
    const struct hp_sweep_opts *o;
    struct hp_sweep_summary *sum;
    struct hp_model *model;
    const struct hp_model_info *info;
    struct hp_data *data;
    struct hp_evaluator *ev;
    struct hp_data *train;         /* NULL, or the gates studies' training set */
    struct hp_evaluator *train_ev; /* ... and its evaluator */
    struct hp_store *store;
    char model_digest[HP_DIGEST_HEX], data_digest[HP_DIGEST_HEX], plan_digest[HP_DIGEST_HEX];
    int64_t sweep_id;
    int64_t total, done; /* total: the plan's estimate for this shard, iterative evaluations included */
    double t0;
    struct sw_tally work[SW_N_WORK]; /* the same by kind, each with its rate */
    enum sw_work at_work;            /* the kind of the last job done */
    /* threads: fixed (o->threads > 0), or matched to the idle CPUs between windows */
    bool auto_threads;
    int threads;
    struct hp_auto_threads load; /* with auto_threads: the load other processes make */
    /* keys this run stored: a job found among them repeats one of this plan, rather than an earlier run's */
    char (*put)[HP_DIGEST_HEX];
    size_t put_cap, put_n;
};

// --- a procedure's row (each defined in its file; sweep.c's table points at them) -----------

struct sw_proc {
    /* study si's procedure (NULL: none, the expanded jobs are the study); ord: the next job's place in the
     * sweep, advanced past the jobs it records */
    enum hp_status (*run)(struct sw_ctx *c, int si, int64_t *ord, struct hp_error *err);
    bool before_jobs; /* runs before the shard's expanded jobs (its unmasked pass is also the baseline's), else
                       * after them, as its work depends on their results */
    /* NULL, or whether study si can run on the sweep's model and data: called for every study before the
     * database is touched, so nothing is written for data it refuses */
    enum hp_status (*check)(const struct sw_ctx *c, int si, struct hp_error *err);
};

// --- running jobs (sweep_jobs.c) -----------------------------------------------------------

/*
 * Evaluate n jobs (or find them finished) and record them in the sweep, in
 * windows of o->batch (see sweep_jobs.c). ords[i] is job i's place in the
 * sweep; kind: the sweep_jobs kind (NULL: the study's kind name); res (NULL
 * or (n)) receives the metrics. Stops between windows when asked to. A job's
 * mask says where its heads are replaced (its pos).
 */
enum hp_status sw_run_jobs(struct sw_ctx *c, const int64_t *ords, const struct hp_job *jobs, int n,
                           const char *kind, struct hp_store_metrics *res, struct hp_error *err);
/* One job (or a procedure's step) of kind w done: the counts and the progress callback. */
void sw_job_done(struct sw_ctx *c, const struct hp_job *job, enum sw_work w);
/* The sweep finished (not stopped): a last progress report whose total is the jobs done, where the plan's
 * estimate (an iterative study's upper bound) was more. */
void sw_sweep_done(struct sw_ctx *c);
/* n jobs of kind w done by this run in seconds: the kind's rate (called before their sw_job_done). */
void sw_work_timed(struct sw_ctx *c, enum sw_work w, int64_t n, double seconds);
bool sw_stopping(const struct sw_ctx *c);
/* The plan's metric as damage: its value signed so that larger = worse. */
double sw_damage(const struct sw_ctx *c, const struct hp_store_metrics *m);
/* Whether v is in list (n); n == 0: every v is (a study's layers: / heads: not given). */
bool sw_selected(int n, const int *list, int v);

/* The keys this run stored: a result found among them repeats one of this plan's. sw_key_add: false when out
 * of memory (the count is then only less precise). c->put is freed by hp_sweep_run. */
bool sw_key_seen(const struct sw_ctx *c, const char *key);
bool sw_key_add(struct sw_ctx *c, const char *key);

/* Threads: the first choice (o->threads, or matched to idle CPUs), then as many as other processes leave idle,
 * between windows (sw_adapt_threads) and between the evaluator's chunks (sw_on_evaluator_progress, user: c). */
void sw_start_threads(struct sw_ctx *c);
void sw_adapt_threads(struct sw_ctx *c);
void sw_on_evaluator_progress(void *user, int done, int total);

/* A gradient's arrays for the model and data, (n_layers, n_heads) and (n_seqs, n_layers, n_heads).
 * sw_grad_buf_init: false when out of memory; sw_grad_buf_free frees them (also after a failed init, or a
 * zeroed buffer). */
struct sw_grad_buf {
    struct hp_store_grad g;
    char key[HP_DIGEST_HEX];
};
/* Room for a gradient's arrays; with mlps, the MLP blocks' gates' too (g.mlp_*: a study over MLP units), which
 * every gradient into b then takes. */
bool sw_grad_buf_init(struct sw_grad_buf *b, const struct sw_ctx *c, bool mlps);
void sw_grad_buf_free(struct sw_grad_buf *b);
/* The gradient of the loss at mask's gates into b: found in the store, or computed and stored (sweep_jobs.c).
 * job names the study (and step) for progress. */
enum hp_status sw_gradient_at(struct sw_ctx *c, const struct hp_mask *mask, struct sw_grad_buf *b,
                              const struct hp_job *job, struct hp_error *err);
/* The same for the gates of layers from on only (hp_evaluator_grad_from): b's entries below are 0, and its address
 * is its own (a later whole gradient at the same gates is not this one). */
enum hp_status sw_gradient_from(struct sw_ctx *c, const struct hp_mask *mask, int from, struct sw_grad_buf *b,
                                const struct hp_job *job, struct hp_error *err);

// --- scores (sweep_scores.c) ---------------------------------------------------------------

/*
 * Study si's scores by its kind's rule (hp_study_score_of) and estimator: the
 * gradients they need (sw_gradient_at's), every selected unit's score from
 * them, stored (unit_scores, under the study's name and kind). out: NULL, or
 * (n_layers, units of the study's kind) receiving the scores, row-major (a
 * unit the study does not cover: unspecified).
 */
enum hp_status sw_scores(struct sw_ctx *c, int si, double *out, struct hp_error *err);

/* The same by the attribution rule whatever the study's kind (its estimator's estimates), stored at step: a
 * curve ranked once by an estimate (iterative, rank: estimate) stores it as the ranking of its step 1. */
enum hp_status sw_estimate(struct sw_ctx *c, int si, int step, double *out, struct hp_error *err);

#endif
