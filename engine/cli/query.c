/*
 * query.c -- `headprune query`: questions answered from a results database
 * (hp_query), printed as a table, CSV or JSON (heads also as a matrix).
 *
 * The kinds, the options each takes and their help lines are the engine's
 * table (hp_query_kinds, query_int.h), and so is the check of options against
 * the kind (hp_query_opts_check): this file parses argv and words nothing twice.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "cli_int.h"
#include "query_int.h" /* hp_query_kinds: names, options and help of each kind */

static const char query_help[] =
    "Usage: headprune query KIND --db FILE [options]\n"
    "       headprune query sql --db FILE [options] SQL\n"
    "       headprune query compare --db FILE [--db2 FILE] [--sweep2 ID] [--study2 NAME]\n"
    "                       [--by head|layer] [options]\n"
    "\n"
    "Answer questions from a results database (opened read-only). Each kind reads\n"
    "the newest sweep unless --sweep ID names one (`query sweeps` lists them); when\n"
    "it lacks what a kind needs, the error names a sweep that has it.\n"
    "\n"
    "Effects are differences from the sweep's baseline, signed so that larger is\n"
    "worse: loss and KL rise, accuracy and cosine fall.\n"
    "\n"
    "Kinds:\n";  /* then each kind's name and lines, from hp_query_kinds */

/* The kinds, each with its lines, from the engine's table: printed after the usage. */
static void print_kinds(FILE *f)
{
    for (int i = 0; i < HP_QUERY_KIND_COUNT; i++) {
        fprintf(f, "  %-13s", hp_query_kinds[i].name);
        for (const char *h = hp_query_kinds[i].help; *h; h++)
            if (*h == '\n')
                fputs("\n               ", f);
            else
                putc(*h, f);
        putc('\n', f);
    }
}

/* "prefix sweeps, curve, ... or sql": the kinds' names, from the table */
static int usage_kinds(const char *prefix)
{
    char msg[256];
    size_t o = (size_t)snprintf(msg, sizeof msg, "%s", prefix);
    for (int i = 0; i < HP_QUERY_KIND_COUNT && o < sizeof msg; i++)
        o += (size_t)snprintf(msg + o, sizeof msg - o, "%s%s",
                              i == 0 ? "" : i == HP_QUERY_KIND_COUNT - 1 ? " or " : ", ", hp_query_kinds[i].name);
    return usage_error("query", msg);
}

/* --by: head (or unit, its old name) or layer. */
static const char *take_by(const struct opt *o, const char *text)
{
    bool *by_layer = o->value;
    if (strcmp(text, "layer") == 0)
        *by_layer = true;
    else if (strcmp(text, "head") == 0 || strcmp(text, "unit") == 0)
        *by_layer = false;
    else
        return "--by must be head or layer";
    return NULL;
}

static const char *const query_formats[] = {"table", "csv", "json", "matrix", NULL};

int cmd_query(int argc, char **argv)
{
    /* options may come before or after the kind */
    struct hp_query_opts q = {.eps = 0.01};
    const char *db = NULL;
    int format = FMT_TABLE, metric = -1, sweep = 0, sweep2 = 0;
    const struct opt opts[] = {
        OPT_DB(&db, "the results database (`headprune run` writes it)"),
        OPT_SWEEP(&sweep),
        OPT_FORMAT(&format, query_formats,
                   "table (aligned, after a # line that states the sweep, the study and the sign convention), csv, "
                   "json (an array of objects), matrix (heads only: a row per layer, a column per head)"),
        OPT_CHOICE("metric", 'm', &metric, NULL, metric_choices(), "the metric effects are read on (default: the sweep's)"),
        OPT_STUDY(&q.study, "heads, compare: the study to read; sets, curve, importance, attribution, roles, gates: "
                            "only this study"),
        OPT_INT("top", 'k', &q.top, "K", 1, 1 << 30, "at most K rows, the largest effects first (compare: the K units "
                                                     "whose effects differ most)"),
        OPT_EPS(&q.eps, "redundancy: a unit whose effect is below E counts as redundant (default 0.01)"),
        OPT_FLAG("full-mask", 'M', &q.full_mask, "curve: each step's whole mask too, not only the heads it pruned"),
        OPT_FLAG("gates", 0, &q.gates, "heads: a gates study's test-time gates at each lambda instead of the single "
                                       "effects"),
        OPT_PATH("db2", 0, &q.db2, "FILE", "compare: the second sweep's database (default: --db)"),
        OPT_INT_WHAT("sweep2", 0, &sweep2, "ID", 1, 1 << 30, "a sweep id, an integer",
                     "compare: the second sweep (default: the newest of its database)"),
        OPT_NAME("study2", 0, &q.study2, "NAME", "a study", "compare: the second sweep's study (default: --study)"),
        OPT_CALLBACK("by", 0, &q.by_layer, "head|layer", take_by, "compare: a row per head (default) or per layer"),
        OPT_TIMEOUT(&q.timeout_s, 0, TIMEOUT_HELP),
        OPT_END(),
    };
    const struct cmd_help h = {.name = "query", .usage = query_help, .opts = opts, .after_usage = print_kinds};
    int n_args, rc = parse_options(&h, argc, argv, &n_args);
    if (rc >= 0)
        return rc;
    q.sweep_id = sweep;
    q.sweep_id2 = sweep2;
    q.matrix = format == 3;
    q.metric = metric >= 0 ? hp_metric_name((enum hp_metric)metric) : NULL;
    const enum fmt f = format == 3 ? FMT_TABLE : (enum fmt)format;
    if (n_args == 0)
        return usage_kinds("give a KIND: ");
    const struct hp_query_kind_row *kind = hp_query_kind_named(argv[1]);
    if (!kind)
        return usage_kinds("KIND must be ");
    q.kind = kind->kind;
    if (kind->takes & HP_QUERY_TAKES_SQL) {
        if (n_args != 2)
            return usage_error("query", "sql needs one SQL statement");
        q.sql = argv[2];
    } else if (n_args != 1) {
        return usage_error("query", "unexpected argument");
    }
    if (!db)
        return usage_error("query", "--db FILE is required");

    /* options another kind takes: a mistake to say so now, not to ignore (the engine's one check) */
    struct hp_error err = {0};
    if (hp_query_opts_check(&q, true, &err) != HP_OK)
        return usage_error("query", err.msg);

    struct hp_table *t;
    if (hp_query(db, &q, &t, &err) != HP_OK)
        return die(&err);
    print_table(t, f);
    hp_table_free(t);
    return 0;
}
