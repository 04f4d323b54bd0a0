/*
 * job.h -- names the sweep writes into the store and the queries read
 * back: the kinds of sweep_jobs rows that are a procedure's inner steps
 * rather than points of a study's own (docs/database.md lists every kind),
 * and the prefixes that give a computation other than a variant's evaluation
 * its own content address.
 *
 * Invariants: a key prefix is something no mask spec starts with, so its
 * address never meets a variant's. SQL may paste these names in: they are
 * literals, never the user's text.
 *
 * Must not: grow into a registry of study kinds (engine/plan/study/ holds those); only the
 * strings that more than one module spells.
 */
#ifndef HP_JOB_H
#define HP_JOB_H

// --- sweep_jobs.kind ----------------------------------------------------------

#define HP_JOB_ITERATIVE_SCORE "iterative-score" /* an iterative step's candidates, scored (not curve points) */
#define HP_JOB_GATES_FRAC "gates-frac"           /* a gates lambda's model at its fractional test-time gates */
#define HP_JOB_CIRCUIT_EDGE "circuit-edge"       /* a circuit study's edge patched alone, to rank the edges */

// --- key prefixes (before a mask's text, for hp_digest_job) ---------------------

#define HP_KEY_GRAD "grad:"          /* the gradient at a mask's gates (sweep_jobs.c sw_gradient_at): "grad:" MASK for the loss, "grad:" METRIC "|" MASK for another (hp_metric_grad_of) */
#define HP_KEY_GRAD_PASS "gradpass:" /* a gradient-ranked step's evaluation pass */
#define HP_KEY_GRAD_FROM "from"      /* after HP_KEY_GRAD: "from" L "|", the gradient of layers L on only (L > 0) */
#define HP_KEY_GATES "gates:"        /* a gate training run (gates.c) */
#define HP_KEY_POS "pos:"            /* a variant patched at one position: "pos:" T "|" MASK (sweep_jobs.c) */

#endif
