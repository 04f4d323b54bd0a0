/*
 * study_int.h -- the study kinds' family: one file a kind
 * (engine/plan/study/<kind>.c), each exporting one row (struct
 * hp_study_kind_row), and the registry hp_study_kinds (study.c) that plan.c
 * reads, and through study.h the sweep, gates.c and `headprune plan`.
 *
 * A row says everything that is particular to its kind: its name, the
 * options it takes (besides name: and, for kinds over units, layers: /
 * heads: / groups: / kv:, which plan.c parses for every kind), how they are
 * parsed and checked, the jobs it expands into (mask kinds) or the sweep
 * procedure it names (procedure kinds; the procedures are the sweep's,
 * engine/sweep/sweep_<procedure>.c), and
 * what it costs, with the sentence that says so.
 *
 * plan.c owns the YAML loader and the expansion's bookkeeping and lends the
 * kinds its value parsers (hp_ld_*) and expansion helpers (hp_ex_*): those
 * are declared here, beside the row.
 *
 * A new mask kind is four files: its value in enum hp_study_kind
 * (headprune.h, before HP_STUDY_COUNT), its file here (single.c is the
 * model), its row in study.c's table, and that file in meson.build. Its own
 * options, if any, are a struct of their own (struct hp_study_<kind>_opts,
 * headprune.h again) nested in struct hp_study under the kind's name
 * (s-><kind>.<option>): the kind's parse, defaults, check and clear hooks
 * fill and free that member and no other.
 *
 * Must not: be included from outside the planner (plan.c and engine/plan/study/)
 * but by tests; the sweep and the CLI see the kinds through study.h.
 */
#ifndef HP_STUDY_INT_H
#define HP_STUDY_INT_H

#include "headprune.h"
#include "study.h"
#include "util.h" /* hp_fail */

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>

#if defined(__GNUC__)
#define HP_PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#else
#define HP_PRINTF_LIKE(f, a)
#endif

// --- the YAML document being loaded (plan.c) ----------------------------------

struct hp_loader {
    const char *path;
    const char *dir; // the plan file's folder, "" for the working directory
    yaml_document_t *doc;
    struct hp_error *err;
};

// Longest piece of user text echoed back in an error message.
#define HP_ECHO_MAX 64

static inline yaml_node_t *hp_ld_node(const struct hp_loader *ld, int i)
{
    return yaml_document_get_node(ld->doc, i);
}

static inline const char *hp_yaml_text(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

// How much of a scalar to echo in a message: "%.*s%s", hp_yaml_shown(n), hp_yaml_text(n), hp_yaml_more(n).
static inline int hp_yaml_shown(const yaml_node_t *n)
{
    return n->data.scalar.length > HP_ECHO_MAX ? HP_ECHO_MAX : (int)n->data.scalar.length;
}

static inline const char *hp_yaml_more(const yaml_node_t *n)
{
    return n->data.scalar.length > HP_ECHO_MAX ? "..." : "";
}

// An empty value: `key:` with nothing after it, `~` or `null`.
static inline bool hp_yaml_is_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *s = hp_yaml_text(n);
    return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

static inline const char *hp_yaml_type_word(const yaml_node_t *n)
{
    switch (n->type) {
    case YAML_SEQUENCE_NODE: return "a list";
    case YAML_MAPPING_NODE: return "a mapping";
    default: return hp_yaml_is_null(n) ? "empty" : "a single value";
    }
}

static inline int hp_yaml_n_pairs(const yaml_node_t *n)
{
    return (int)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
}

static inline int hp_yaml_n_items(const yaml_node_t *n)
{
    return (int)(n->data.sequence.items.top - n->data.sequence.items.start);
}

/* "file:line:column: msg" at node n (NULL: the file), as HP_ERR_PLAN. */
HP_PRINTF_LIKE(3, 4)
enum hp_status hp_ld_fail(const struct hp_loader *ld, const yaml_node_t *n, const char *fmt, ...);

/* The value parsers options are made of; `what`/`key` names the option in messages as each documents. */
enum hp_status hp_ld_int(const struct hp_loader *ld, const char *what, const yaml_node_t *v, int lo,
                         const char *expect, int *out); /* an integer in [lo, INT_MAX]; what: "'seq_len'" */
enum hp_status hp_ld_int_list(const struct hp_loader *ld, const char *key, const yaml_node_t *v, int lo, int **out,
                              int *n_out); /* integers >= lo, or one; sorted, no repeats */
enum hp_status hp_ld_bool(const struct hp_loader *ld, const char *key, const yaml_node_t *v, bool *out);
enum hp_status hp_ld_fraction(const struct hp_loader *ld, const char *key, const yaml_node_t *v, bool open_lo,
                              double *out); /* 10% or 0.1, in [0, 1) (open_lo: (0, 1)) */
enum hp_status hp_ld_number(const struct hp_loader *ld, const char *key, const yaml_node_t *v, double lo, bool open,
                            const char *want, double *out); /* a number >= lo (open: > lo) */
bool hp_ld_scan_number(const char *s, size_t len, double *out); /* decimal only: no inf, nan or hex */
bool hp_ld_scan_count(const char *s, int *out); /* a decimal integer in [1, INT_MAX] */
enum hp_status hp_ld_seed(const struct hp_loader *ld, const char *key, const yaml_node_t *v, uint64_t *out);
enum hp_status hp_ld_word(const struct hp_loader *ld, const char *key, const yaml_node_t *v, const char *const *words,
                          int n, int *out); /* one of n words, with a did-you-mean */
enum hp_status hp_ld_name(const struct hp_loader *ld, const char *what, const yaml_node_t *v, int max,
                          char *out); /* letters, digits, '_', '.', '-', at most max of them */
enum hp_status hp_ld_path(const struct hp_loader *ld, const char *key, const yaml_node_t *v,
                          char **out); /* resolved against the plan's folder; *out freed first, then fresh */

#define HP_STUDY_NAME_MAX ((int)sizeof(((struct hp_study *)0)->name) - 1)

// --- expansion (plan.c) ---------------------------------------------------------

// One study being expanded.
struct hp_expander {
    const struct hp_plan *p;
    const struct hp_model_info *info;
    struct hp_joblist *jl;
    struct hp_error *err;
    int si;
    const struct hp_study *s;
    int n_units; // units per layer: heads, or KV groups
    int n_lay;
    int *lay;    // (n_lay) selected layers, ascending
    int n_sel;
    int *sel;    // (n_sel) selected units of each layer, ascending
};

/* "plan:line:col: study 'x': ..." pointing at the value of the study's option key (the list item equal to value,
 * or the entry `set` of a mapping); key NULL: the study's line. */
HP_PRINTF_LIKE(5, 6)
enum hp_status hp_ex_fail(const struct hp_expander *e, const char *key, long value, const char *set, const char *fmt,
                          ...);
/* Append a job; takes m (NULL = allocation failed: an error). */
HP_PRINTF_LIKE(8, 9)
enum hp_status hp_ex_emit(struct hp_expander *e, struct hp_mask *m, int layer, int unit, int unit2, int sample, int k,
                          const char *fmt, ...);
enum hp_status hp_ex_nomem(const struct hp_expander *e); /* "plan: out of memory" */

/* Whether selected unit j of selected layer i is in the checkpoint (not pruned away). */
static inline bool hp_ex_live(const struct hp_expander *e, int i, int j)
{
    return !hp_unit_pruned(e->info, e->s->unit, e->lay[i], e->sel[j]);
}

/* Selected units of every selected layer the checkpoint has: the jobs of a kind with one a unit (single, only). */
static inline int64_t hp_ex_count_live(const struct hp_expander *e)
{
    int64_t n = 0;
    for (int i = 0; i < e->n_lay; i++)
        for (int j = 0; j < e->n_sel; j++)
            n += hp_ex_live(e, i, j);
    return n;
}

/* Units of a layer the checkpoint has (all of them but for a pruned checkpoint). */
static inline int hp_ex_live_in_layer(const struct hp_expander *e, int layer)
{
    int n = 0;
    for (int u = 0; u < e->n_units; u++)
        n += !hp_unit_pruned(e->info, e->s->unit, layer, u);
    return n;
}

static inline void hp_ex_ablate(const struct hp_expander *e, struct hp_mask *m, int layer, int unit)
{
    hp_mask_set_unit(m, e->info, e->s->unit, layer, unit, 0.0f);
}

static inline struct hp_mask *hp_ex_new_mask(const struct hp_expander *e)
{
    return hp_mask_new(e->info->n_layers, e->info->n_heads);
}

// --- a kind's row ------------------------------------------------------------------

/* One option of a kind: its key and how its value is read into the study. */
struct hp_study_opt {
    const char *name;
    enum hp_status (*parse)(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s);
};

/* What the kind's check hooks see of the study being loaded. */
struct hp_study_seen {
    const yaml_node_t *kind;        /* the kind's key */
    const yaml_node_t *const *opts; /* (row->n_opts) where each of the kind's options was given, or NULL */
};

struct hp_study_kind_row {
    const char *name;                /* as written in plans */
    bool units;                      /* takes layers:, heads: / groups: and units: (or kv:) */
    bool mlp_units;                  /* takes units: mlp (its jobs are masks: no gradient or position of an MLP) */
    const struct hp_study_opt *opts; /* (n_opts) its own options, in the order hints list them */
    int n_opts;
    const char *required, *example;  /* an option it cannot go without (checked after the unit options), e.g. */
    void (*defaults)(struct hp_study *s);
    /* after its options, before the unit options' and `required`'s checks: a mistake between them */
    enum hp_status (*check)(const struct hp_loader *ld, const struct hp_study_seen *seen, struct hp_study *s);
    /* against the plan's studies before it (item: this study's node) */
    enum hp_status (*check_earlier)(const struct hp_loader *ld, const yaml_node_t *item, const struct hp_plan *p, int i);
    /* once the whole plan is read: against its top-level keys (their nodes: NULL when not given) */
    enum hp_status (*check_plan)(const struct hp_loader *ld, const struct hp_plan *p, struct hp_study *s,
                                 const yaml_node_t *metric, const yaml_node_t *ablation);
    void (*clear)(struct hp_study *s); /* frees what its options hold (the struct is zeroed after) */

    /* mask kinds: the jobs, counted before any is made, then made (NULL: none) */
    int64_t (*count_jobs)(const struct hp_expander *e);
    enum hp_status (*expand)(struct hp_expander *e);
    const char *many_key; /* the option an error about too many jobs points at (NULL: the study's line) */
    /* procedure kinds: what the sweep runs (HP_STUDY_RUN_JOBS: only the expanded jobs) */
    enum hp_study_run run;
    enum hp_study_score score; /* HP_STUDY_RUN_SCORES: what it scores by */
    bool first_shard_only; /* its work depends on results before it, or is one computation */

    /* cost (NULL: none): hp_study_evals, hp_study_backwards and hp_study_needs_grad's answers */
    long (*evals)(const struct hp_study *s, const struct hp_model_info *info);
    bool (*per_position)(const struct hp_study *s); /* NULL, or whether evals counts one position of the rows' */
    long (*backwards)(const struct hp_study *s, const struct hp_model_info *info);
    bool trains;           /* its backwards are over the plan's training set, not the held-out set */
    long passes;           /* unmasked passes of its own (roles: one) */
    bool (*needs_grad)(const struct hp_study *s);
    /* NULL, or whether its gradients are taken away from its base mask's gates (integrated gradients: at gates
     * between 0 and 1), where a metric whose gradient is 0 at the unmasked model still has one */
    bool (*grad_off_base)(const struct hp_study *s);
    /* the cost sentence of `headprune plan` after the name and kind (NULL: "N jobs") */
    void (*describe)(const struct hp_study *s, const struct hp_model_info *info, const struct hp_study_cost *c,
                     const char *metric, char *buf, size_t cap);
};

extern const struct hp_study_kind_row *const hp_study_kinds[]; /* HP_STUDY_COUNT rows: unsized here, so study.c's static_assert counts them */

static inline const struct hp_study_kind_row *hp_study_row(enum hp_study_kind k)
{
    return hp_study_kinds[k];
}

// --- shared between kinds -------------------------------------------------------------

/* from: and to: (edges, circuit: engine/plan/study/edges.c): a sender and a receiver pattern, into s->edges. */
enum hp_status hp_study_parse_from(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s);
enum hp_status hp_study_parse_to(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s);
void hp_study_edges_clear(struct hp_study *s); /* frees what they hold */

/* The cost of a kind scored from one gradient at the unmasked model (importance, attribution, study.c):
 * one forward+backward pass, always. */
long hp_study_one_backward(const struct hp_study *s, const struct hp_model_info *info);
bool hp_study_always_grad(const struct hp_study *s);

/* mask: (importance.c) the units already removed where a study starts, read by importance, attribution and iterative:
 * the spec is kept as text, parsed against the model by hp_study_base_mask */
enum hp_status hp_study_parse_mask(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s);

/* normalize: (importance.c) read by importance and by iterative with rank: gradient */
enum hp_status hp_study_parse_normalize(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s);

/* estimator: and steps: (attribution.c), s->estimator and s->steps, for any kind that estimates effects */
enum hp_status hp_study_parse_estimator(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s);
enum hp_status hp_study_parse_steps(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s);
/* whether the estimator integrates gradients along the gate path (ig, ig-layer): its gradients are all taken at
 * gates between 0 and 1, where a metric whose gradient is 0 at the unmasked model (1 - cos, KL) has one */
bool hp_study_integrated(const struct hp_study *s);
/* steps: (its node, NULL when not given) only for integrated gradients, which default to 2; without estimator:
 * (its node likewise), steps: alone names ig-layer */
enum hp_status hp_study_check_steps(const struct hp_loader *ld, const yaml_node_t *estimator,
                                    const yaml_node_t *steps, struct hp_study *s);
/* At the plan's ablation: a study whose check set s->estimator_default takes the measured default (ig-layer,
 * 2 steps, under zero ablation, else atp); integrated gradients walk the gates from 1 to 0, the path of zero
 * ablation: another ablation jumps to its replacement at 0, which no gate between passes through; refused */
enum hp_status hp_study_check_estimator_plan(const struct hp_loader *ld, const struct hp_plan *p, struct hp_study *s,
                                             const yaml_node_t *ablation);
/* forward + backward passes the estimator takes: 1, steps (ig), steps a layer (ig-layer) */
long hp_study_estimator_backwards(const struct hp_study *s, const struct hp_model_info *info);
/* "AtP", "integrated gradients, a layer's gates together, 2 steps a layer": for cost sentences */
void hp_study_estimator_text(const struct hp_study *s, char *buf, size_t cap);

#endif
