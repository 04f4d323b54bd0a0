/*
 * query.c -- `headprune query`: questions answered from a results database
 * (hp_query), printed as a table, CSV or JSON (heads also as a matrix).
 *
 * The kinds, the options each takes and their help lines are the engine's
 * table (hp_query_kinds, query.h), and so is the check of options against
 * the kind (hp_query_opts_check): this file parses argv and words nothing twice.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "query.h" /* hp_query_kinds: names, options and help of each kind */

static const char query_help[] =
    "Usage: headprune query KIND --db FILE [options]\n"
    "       headprune query sql --db FILE [options] SQL\n"
    "       headprune query compare --db FILE [--db2 FILE] [--sweep2 ID]\n"
    "                       [--study2 NAME] [--by head|layer] [options]\n"
    "\n"
    "Answer questions from a results database (opened read-only). Each kind reads\n"
    "the newest sweep unless --sweep ID names one (`query sweeps` lists them); when\n"
    "it lacks what a kind needs, the error names a sweep that has it.\n"
    "\n"
    "Effects are differences from the sweep's baseline, signed so that larger is\n"
    "worse: loss and KL rise, accuracy and cosine fall, and so do the task metrics\n"
    "(logit_diff, answer_logprob, answer_prob, answer_acc, patch_recovery).\n"
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

/* "heads, sets and curve: text" (or "every kind but roles: text", when most take it): the kinds whose row takes the
 * option (HP_QUERY_TAKES_*), from the table, before text, into buf. The option's help line: no line here restates
 * which kinds take what. */
static const char *for_kinds(unsigned takes, const char *text, char *buf, size_t n)
{
    int count = 0, seen = 0;
    for (int i = 0; i < HP_QUERY_KIND_COUNT; i++)
        count += (hp_query_kinds[i].takes & takes) != 0;
    const bool most = 2 * count > HP_QUERY_KIND_COUNT, listed = most ? HP_QUERY_KIND_COUNT - count : count;
    size_t at = (size_t)snprintf(buf, n, "%s", most ? "every kind but " : "");
    for (int i = 0; i < HP_QUERY_KIND_COUNT && at < n; i++)
        if (((hp_query_kinds[i].takes & takes) != 0) != most)
            at += (size_t)snprintf(buf + at, n - at, "%s%s", seen++ == 0 ? "" : seen == listed ? " and " : ", ",
                                   hp_query_kinds[i].name);
    if (at < n)
        snprintf(buf + at, n - at, ": %s", text);
    return buf;
}

int cmd_query(int argc, char **argv)
{
    /* options may come before or after the kind */
    struct hp_query_opts q = {.eps = 0.01};
    const char *db = NULL;
    int format = FMT_TABLE, metric = -1, sweep = 0, sweep2 = 0;
    char study[256], top[256], matrix[640], gates[256], db2[256], sweep2_h[256], study2[256], by[256];
    const struct opt opts[] = {
        OPT_DB(&db, "the results database (`headprune run` writes it)"),
        OPT_SWEEP(&sweep),
        OPT_FORMAT(&format, query_formats,
                   for_kinds(HP_QUERY_TAKES_MATRIX, "matrix, a row per layer and a column per head; every kind: "
                             "table (aligned, numbers rounded to read, after a # line that states the sweep, the "
                             "study and the sign convention), csv (the rows, without the summary rows), json (an "
                             "object: \"rows\", an array of objects, and \"summary\", the summary rows such as rho "
                             "or all, an array of objects with the same keys); csv and json give every number in "
                             "full precision (the shortest text that reads back to the same double)", matrix,
                             sizeof matrix)),
        OPT_CHOICE("metric", 'm', &metric, NULL, metric_choices(), "the metric effects are read on (default: the sweep's)"),
        OPT_STUDY(&q.study, for_kinds(HP_QUERY_TAKES_STUDY, "the study to read (as each kind above says)", study,
                                      sizeof study)),
        OPT_INT("top", 'k', &q.top, "K", 1, 1 << 30,
                for_kinds(HP_QUERY_TAKES_TOP, "at most K rows, as each kind above says", top, sizeof top)),
        OPT_EPS(&q.eps, "redundancy: a unit whose effect is below E counts as redundant (default 0.01)"),
        OPT_FLAG("full-mask", 0, &q.full_mask, "curve: each step's whole mask too, not only the heads it pruned"),
        OPT_FLAG("gates", 0, &q.gates,
                 for_kinds(HP_QUERY_TAKES_GATES, "a gates study's test-time gates at each lambda instead of the "
                           "single effects", gates, sizeof gates)),
        OPT_PATH("db2", 0, &q.db2, "FILE",
                 for_kinds(HP_QUERY_TAKES_B, "the second sweep's database (default: --db)", db2, sizeof db2)),
        OPT_INT_WHAT("sweep2", 0, &sweep2, "ID", 1, 1 << 30, "a sweep id, an integer",
                     for_kinds(HP_QUERY_TAKES_B, "the second sweep (default: the newest of its database)", sweep2_h,
                               sizeof sweep2_h)),
        OPT_NAME("study2", 0, &q.study2, "NAME", "a study",
                 for_kinds(HP_QUERY_TAKES_B, "the second sweep's study (default: --study)", study2, sizeof study2)),
        OPT_CALLBACK("by", 0, &q.by_layer, "head|layer", take_by,
                     for_kinds(HP_QUERY_TAKES_B, "a row per head (default) or per layer", by, sizeof by)),
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
