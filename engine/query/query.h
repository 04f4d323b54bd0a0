/*
 * query.h -- the queries, as other readers of the store use them.
 *
 * hp_query (headprune.h) opens the database, answers one question and closes
 * it. A reader that asks several questions of one sweep (the report: heads,
 * curve, redundancy, pairs and what was run) must see them all in one
 * snapshot, even while a sweep writes: a reader holds one read-only
 * connection and one read transaction for all of them. Every table it
 * returns is the one `headprune query` prints for the same options, so a
 * figure shows the numbers the tables show.
 *
 * The kinds' table (below) is here too: the CLI reads each kind's name,
 * options and help from it, and checks options with the engine's one check.
 * The family's private insides are query_priv.h, included by no one else.
 */
#ifndef HP_QUERY_H
#define HP_QUERY_H

#include "headprune.h"

struct hp_query_reader;

/* Open db_path read-only (as hp_query does, reading for at most seconds: hp_store_open_read) and begin
 * one read transaction. Destructor: hp_query_reader_close. */
enum hp_status hp_query_reader_open(const char *db_path, double seconds, struct hp_query_reader **out,
                                    struct hp_error *err);
void hp_query_reader_close(struct hp_query_reader *r);

/* hp_query's answer to o, read in r's snapshot. Destructor of *out: hp_table_free. */
enum hp_status hp_query_read(struct hp_query_reader *r, const struct hp_query_opts *o, struct hp_table **out,
                             struct hp_error *err);

/*
 * What was run for sweep sweep_id (0 = the newest): a table of two columns,
 * "field" and "value", one row per field, in this order:
 *   sweep_id, sweep_name, ablation, metric, sweep_created, sweep_updated,
 *   plan_name, plan_path, plan_digest, plan_text,
 *   model_path, model_type, n_layers, n_heads, n_kv_heads, d_head, n_params, model_digest,
 *   data_path, n_seqs, seq_len, data_digest,
 *   baseline (the baseline's value of the sweep's metric, as the curve's k = 0 row shows it),
 *   results (finished variants of the sweep), engine_versions, numeric_versions, kernels, hosts
 *   (each the distinct values of the results, ascending, comma-separated), threads_min,
 *   threads_max, first_result, last_result (results.created), wall_s (their sum).
 * Numeric fields carry their number (struct hp_table's values). The sweep is checked as every
 * sweep query checks it: an unknown sweep (or none), one without a finished baseline or with a
 * model shape out of range is an error.
 */
enum hp_status hp_query_run_info(struct hp_query_reader *r, int64_t sweep_id, struct hp_table **out,
                                 struct hp_error *err);

/*
 * The studies of sweep sweep_id (which must exist), in plan order: columns study, kind (as
 * sweep_jobs and unit_scores name it: single, pairs, iterative, importance, ...), kv (0 or 1),
 * jobs (its finished jobs, an iterative study's candidates not counted; a gradient study: its
 * units scored; a gates study: its finished lambdas, their test-time-gate points not counted) and rank (an iterative study's ranking: "exact", or "gradient" when the sweep
 * stored the gradient scores it pruned by; empty for other kinds).
 */
enum hp_status hp_query_studies(struct hp_query_reader *r, int64_t sweep_id, struct hp_table **out,
                                struct hp_error *err);

/* Whether the database has a table of this name (tables come with schema versions: unit_scores
 * with 3; a later study's table with its version). */
enum hp_status hp_query_has_table(struct hp_query_reader *r, const char *name, bool *yes, struct hp_error *err);

// --- the kinds ---------------------------------------------------------------

/*
 * One row per query kind (hp_query_kinds, query.c): its name, the options it
 * takes, its help and its function. `headprune query` reads names, options
 * and help from it; hp_query and the readers dispatch through it. A new kind
 * is its value in enum hp_query_kind, a file with its function (declared in
 * query_priv.h, listed in meson.build) and its row in query.c.
 */

/* Options only some kinds take (a row's .takes), and a few that clash: hp_query_opts_check. Every kind
 * accepts the others (--sweep, --metric, --eps, --full-mask, --timeout; --top where .takes says so). */
enum {
    HP_QUERY_TAKES_STUDY = 1u << 0,  /* --study NAME */
    HP_QUERY_TAKES_TOP = 1u << 1,    /* --top K (a kind without it refuses it: it shows every row) */
    HP_QUERY_TAKES_MATRIX = 1u << 2, /* --format matrix */
    HP_QUERY_TAKES_GATES = 1u << 3,  /* --gates */
    HP_QUERY_TAKES_B = 1u << 4,      /* a second sweep: --db2, --sweep2, --study2, --by */
    HP_QUERY_TAKES_SQL = 1u << 5,    /* one SQL statement (the operand after the kind) */
};

/* The table has a row per kind of enum hp_query_kind (headprune.h), which ends in HP_QUERY_KIND_COUNT:
 * a kind added there without its row here is a build error (the table's static_assert). */

struct hq_query; /* a question being answered: its connection and sweep (query_priv.h) */

struct hp_query_kind_row {
    enum hp_query_kind kind;
    const char *name;  /* as `headprune query NAME` spells it */
    unsigned takes;    /* HP_QUERY_TAKES_* */
    bool sweep;        /* reads one sweep: it is resolved (--sweep, --metric) before .run */
    const char *help;  /* `query --help`'s lines beside the name, '\n' between them */
    enum hp_status (*run)(struct hq_query *q, const struct hp_query_opts *o, struct hp_table **out);
};

/* Every kind once, in the order `query --help` lists them. */
extern const struct hp_query_kind_row hp_query_kinds[]; /* HP_QUERY_KIND_COUNT rows: unsized here, so query.c's static_assert counts them */

/* The row of the kind named name, or of kind k; NULL when there is none. */
const struct hp_query_kind_row *hp_query_kind_named(const char *name);
const struct hp_query_kind_row *hp_query_kind_row(enum hp_query_kind k);

/*
 * Whether o's options suit its kind: an option the kind does not take, or two that clash, is an
 * HP_ERR_ARG naming it, worded for the command line ("--gates is for heads") with cli, else for
 * the API ("query: --gates is for heads only"), which also checks the values the command line's
 * parsers already bound (top >= 0, a finite eps, sweep ids >= 0). hp_query and hp_query_read call it.
 */
enum hp_status hp_query_opts_check(const struct hp_query_opts *o, bool cli, struct hp_error *err);

#endif
