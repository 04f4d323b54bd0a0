/*
 * query.c -- `headprune query`: questions answered from a results database
 * (hp_query), printed as a table, CSV or JSON (heads also as a matrix).
 *
 * The kinds, the options each takes and their help lines are the engine's
 * table (hp_query_kinds, query_int.h), and so is the check of options against
 * the kind (hp_query_opts_check): this file parses argv and words nothing twice.
 */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli_int.h"
#include "query_int.h" /* hp_query_kinds: names, options and help of each kind */

/* before the kinds (hp_query_kinds: each its name and lines) */
static const char query_help[] =
    "Usage: headprune query KIND --db FILE [--sweep ID] [--format table|csv|json|matrix]\n"
    "                       [--metric loss|kl|acc|cos] [--study NAME] [--top K] [--eps E]\n"
    "                       [--full-mask] [--gates] [--timeout S] [SQL]\n"
    "       headprune query compare --db FILE [--sweep ID] [--db2 FILE] [--sweep2 ID]\n"
    "                       [--study NAME] [--study2 NAME] [--by head|layer] [--top K] ...\n"
    "\n"
    "Answer questions from a results database (opened read-only). Each kind reads\n"
    "the newest sweep unless --sweep ID names one (`query sweeps` lists them); when\n"
    "it lacks what a kind needs, the error names a sweep that has it.\n"
    "\n"
    "Effects are differences from the sweep's baseline, signed so that larger is\n"
    "worse: loss and KL rise, accuracy and cosine fall.\n"
    "\n"
    "Kinds:\n";

/* after the kinds */
static const char query_help_tail[] =
    "\n"
    "Formats: table (aligned, after a # line that states the sweep, the study and\n"
    "the sign convention), csv, json (an array of objects), matrix (heads only).\n"
    "\n"
    "--timeout S: reading stops with an error after S seconds (default 600): a\n"
    "database whose views, or SQL, would never end cannot hang the command.\n";

static void print_help(void)
{
    fputs(query_help, stdout);
    for (int i = 0; i < HP_QUERY_KIND_COUNT; i++) {
        printf("  %-13s", hp_query_kinds[i].name);
        for (const char *h = hp_query_kinds[i].help; *h; h++)
            if (*h == '\n')
                fputs("\n               ", stdout);
            else
                putchar(*h);
        putchar('\n');
    }
    fputs(query_help_tail, stdout);
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

int cmd_query(int argc, char **argv)
{
    enum { O_DB2 = 256, O_SWEEP2, O_STUDY, O_STUDY2, O_BY, O_GATES, O_TIMEOUT };
    static const struct option opts[] = {
        {"db", required_argument, 0, 'd'},        {"sweep", required_argument, 0, 's'},
        {"format", required_argument, 0, 'f'},    {"metric", required_argument, 0, 'm'},
        {"top", required_argument, 0, 'k'},       {"eps", required_argument, 0, 'e'},
        {"full-mask", no_argument, 0, 'M'},       {"study", required_argument, 0, O_STUDY},
        {"db2", required_argument, 0, O_DB2},     {"sweep2", required_argument, 0, O_SWEEP2},
        {"study2", required_argument, 0, O_STUDY2}, {"by", required_argument, 0, O_BY},
        {"gates", no_argument, 0, O_GATES},       {"timeout", required_argument, 0, O_TIMEOUT},
        {"help", no_argument, 0, 'h'},            {0, 0, 0, 0}};
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        print_help();
        return 0;
    }
    /* options may come before or after the kind (getopt moves the operands to the end) */
    struct hp_query_opts q = {.eps = 0.01};
    const char *db = NULL;
    enum fmt f = FMT_TABLE;
    int c;
    optind = 1;
    opterr = 0; /* our one line says what is wrong; getopt's own would be a second */
    while ((c = getopt_long(argc, argv, ":d:s:f:m:k:e:h", opts, NULL)) != -1) {
        switch (c) {
        case 'd': db = optarg; break;
        case 's':
        case O_SWEEP2: {
            int v, e;
            if ((e = int_option("query", c == 's' ? "--sweep" : "--sweep2", "a sweep id, an integer", optarg, 1, 1 << 30,
                                &v)) != 0)
                return e;
            *(c == 's' ? &q.sweep_id : &q.sweep_id2) = v;
            break;
        }
        case 'f':
            if (strcmp(optarg, "matrix") == 0) {
                q.matrix = true;
                f = FMT_TABLE;
            } else if (!parse_format(optarg, &f)) {
                return usage_error("query", "--format must be table, csv, json or matrix");
            } else {
                q.matrix = false;
            }
            break;
        case 'm': {
            enum hp_metric mt;
            if (!hp_metric_parse(optarg, &mt))
                return usage_error("query", "--metric must be loss, kl, acc or cos");
            q.metric = optarg;
            break;
        }
        case 'k':
            if ((c = int_option("query", "--top", NULL, optarg, 1, 1 << 30, &q.top)) != 0)
                return c;
            break;
        case 'M': q.full_mask = true; break;
        case O_GATES: q.gates = true; break;
        case 'e':
            if (!parse_double(optarg, 0.0, &q.eps))
                return usage_error("query", "--eps must be a non-negative number");
            break;
        case O_TIMEOUT:
            if (!parse_double(optarg, 0.0, &q.timeout_s) || q.timeout_s <= 0)
                return usage_error("query", "--timeout must be a positive number of seconds");
            break;
        case O_STUDY:
        case O_STUDY2:
            if (!*optarg)
                return usage_error("query", c == O_STUDY ? "--study must name a study" : "--study2 must name a study");
            *(c == O_STUDY ? &q.study : &q.study2) = optarg;
            break;
        case O_DB2: q.db2 = optarg; break;
        case O_BY:
            if (strcmp(optarg, "layer") == 0)
                q.by_layer = true;
            else if (strcmp(optarg, "head") == 0 || strcmp(optarg, "unit") == 0)
                q.by_layer = false;
            else
                return usage_error("query", "--by must be head or layer");
            break;
        case 'h': print_help(); return 0;
        default: return option_error("query", c, argv);
        }
    }
    if (optind >= argc)
        return usage_kinds("give a KIND: ");
    const struct hp_query_kind_row *kind = hp_query_kind_named(argv[optind]);
    if (!kind)
        return usage_kinds("KIND must be ");
    q.kind = kind->kind;
    optind++;
    if (kind->takes & HP_QUERY_TAKES_SQL) {
        if (optind != argc - 1)
            return usage_error("query", "sql needs one SQL statement");
        q.sql = argv[optind];
    } else if (optind != argc) {
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
