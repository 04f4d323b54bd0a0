/*
 * eval.h -- what the rest of the engine uses of the evaluator beyond
 * headprune.h (engine/eval/eval.c): the check every pass over held-out data runs
 * first (the evaluator's, head roles') and the model and data an evaluator
 * pairs (gate training reads them).
 *
 * The evaluator's layout and the helpers its family shares (eval.c,
 * eval_run.c, reuse.c, grad.c) are eval_priv.h's.
 * Must not: show the evaluator's layout.
 */
#ifndef HP_EVAL_H
#define HP_EVAL_H

#include "headprune.h"

/*
 * Whether the model can run the data at all, what every pass over it needs
 * (the evaluator's, head roles'): rows no longer than its positions, ids in
 * its vocabulary, token types it has, no row all padding. Else one line
 * naming the data file.
 */
enum hp_status hp_eval_check_data(const struct hp_model *m, const struct hp_data *d, struct hp_error *err);

/* The model and the data ev pairs (hp_evaluator_new's; ev owns neither). */
const struct hp_model *hp_eval_model(const struct hp_evaluator *ev);
const struct hp_data *hp_eval_data(const struct hp_evaluator *ev);

#endif
