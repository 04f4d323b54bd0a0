/*
 * query.c -- `headprune query`: questions answered from a results database
 * (hp_query), printed as a table, CSV or JSON (heads also as a matrix).
 */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli_int.h"

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
    "Kinds:\n"
    "  sweeps       the sweeps in the database\n"
    "  curve        pruning curve: metric against heads pruned (number and %),\n"
    "               iterative, random and gates studies (--study NAME: only that\n"
    "               one), 95% CIs over random samples; each iterative step's units\n"
    "               in \"pruned\" (--full-mask: also everything pruned so far, in\n"
    "               \"mask\"); with a gates study also heads kept, each gates row's\n"
    "               lambda and the model at its test-time gates (\"gated\")\n"
    "  heads        each head's effect when ablated alone, with a paired 95% CI\n"
    "               across sequences; sorted, --top K. One single study: --study\n"
    "               NAME, else the sweep's first over query heads (a KV-group\n"
    "               study such as single-kv only when named or the only one).\n"
    "               --format matrix: layers as rows, heads as columns.\n"
    "               --gates: a gates study's (--study NAME) test-time gate of each\n"
    "               head at each lambda, and the lambda from which it stays closed\n"
    "               (closes_at; the matrix shows that), the last to close first\n"
    "  sets         each named set of the explicit studies (--study NAME: one\n"
    "               of them) ablated together: its effect with a paired 95% CI;\n"
    "               sorted, --top K\n"
    "  compare      two sweeps side by side, A (--db, --sweep) and B (--db2,\n"
    "               default --db; --sweep2, default the newest): each unit's\n"
    "               effect in both single studies (--study, --study2), B - A,\n"
    "               ranks, and over the units both have Spearman's rho and\n"
    "               Kendall's tau-b (the last row, \"all\"). E.g. zero against\n"
    "               mean ablation, or a fine-tuned model against its base. The\n"
    "               models must have one shape; the sweeps one metric (else name\n"
    "               it with --metric). --by layer: per layer, means and rank\n"
    "               correlations within it; --top K: the K units that differ most\n"
    "  redundancy   per layer: heads costing less than --eps (default 0.01) alone,\n"
    "               mean and max effect, keeping only the best head, removing the\n"
    "               whole layer\n"
    "  pairs        interaction I = D(a and b) - D(a) - D(b) of head pairs, D the\n"
    "               effects. I > 0: removing both hurts more than the two alone\n"
    "               (the heads back each other up: redundant); I < 0: less than\n"
    "               the two alone (overlapping damage). --top K of each end.\n"
    "  importance   an importance study (--study NAME, else the first by name):\n"
    "               each unit's E|dL/dgate| (Michel et al.), under the study's\n"
    "               normalize, and raw; most important first, --top K\n"
    "  attribution  an attribution study (--study NAME) against the sweep's\n"
    "               first single study over the same units: each unit's\n"
    "               first-order estimate of its loss effect beside the exact\n"
    "               one, their ranks, the most wrongly ranked first (--top K),\n"
    "               and in the last row (\"all\") Spearman's rho, Kendall's\n"
    "               tau-b and the top-k overlap (k = a tenth of the units)\n"
    "  roles        a roles study (--study NAME, else the first by name): each\n"
    "               head's scores (docs/roles.md) in layer, head order, its effect\n"
    "               in the sweep's first single study over query heads when it\n"
    "               has one, and a last row (label \"rho\") with each score's\n"
    "               Spearman rank correlation with the effect\n"
    "  gates        each lambda of the gates studies (--study NAME: one): heads\n"
    "               kept, the pruned set's metric, the model at its test-time\n"
    "               gates, and the sweep's iterative and random curves read at the\n"
    "               same heads kept; \"lower\" names the curve that is lowest there\n"
    "  sql          read-only SQL, e.g. \"SELECT * FROM effects LIMIT 5\"\n"
    "               (tables, columns and views: docs/database.md)\n"
    "\n"
    "Formats: table (aligned, after a # line that states the sweep, the study and\n"
    "the sign convention), csv, json (an array of objects), matrix (heads only).\n"
    "\n"
    "--timeout S: reading stops with an error after S seconds (default 600): a\n"
    "database whose views, or SQL, would never end cannot hang the command.\n";

static const char kinds_list[] =
    "sweeps, curve, heads, sets, compare, redundancy, pairs, importance, attribution, roles, gates or sql";

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
        fputs(query_help, stdout);
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
        case 'h': fputs(query_help, stdout); return 0;
        default: return option_error("query", c, argv);
        }
    }
    if (optind >= argc) {
        char msg[128];
        snprintf(msg, sizeof msg, "give a KIND: %s", kinds_list);
        return usage_error("query", msg);
    }
    static const char *const kinds[] = {"sweeps",     "curve", "heads",      "sets",        "compare", "redundancy",
                                        "pairs",      "importance", "attribution", "roles", "gates", "sql"};
    static const enum hp_query_kind kv[] = {HP_QUERY_SWEEPS,     HP_QUERY_CURVE,      HP_QUERY_HEADS,
                                            HP_QUERY_SETS,       HP_QUERY_COMPARE,    HP_QUERY_REDUNDANCY,
                                            HP_QUERY_PAIRS,      HP_QUERY_IMPORTANCE, HP_QUERY_ATTRIBUTION,
                                            HP_QUERY_ROLES,      HP_QUERY_GATES,      HP_QUERY_SQL};
    int ki = -1;
    for (int i = 0; i < (int)(sizeof kinds / sizeof *kinds); i++)
        if (strcmp(argv[optind], kinds[i]) == 0)
            ki = i;
    if (ki < 0) {
        char msg[128];
        snprintf(msg, sizeof msg, "KIND must be %s", kinds_list);
        return usage_error("query", msg);
    }
    q.kind = kv[ki];
    optind++;
    if (q.kind == HP_QUERY_SQL) {
        if (optind != argc - 1)
            return usage_error("query", "sql needs one SQL statement");
        q.sql = argv[optind];
    } else if (optind != argc) {
        return usage_error("query", "unexpected argument");
    }
    if (!db)
        return usage_error("query", "--db FILE is required");

    /* options another kind takes: a mistake to say so now, not to ignore */
    bool compare = q.kind == HP_QUERY_COMPARE;
    if (!compare && (q.db2 || q.sweep_id2 || q.study2 || q.by_layer))
        return usage_error("query", "--db2, --sweep2, --study2 and --by are for compare");
    if (q.matrix && q.kind != HP_QUERY_HEADS)
        return usage_error("query", "--format matrix is for heads");
    if (q.gates && q.kind != HP_QUERY_HEADS)
        return usage_error("query", "--gates is for heads");
    if (q.matrix && q.top)
        return usage_error("query", "--top does not apply to --format matrix (it shows every unit)");
    if (compare && q.by_layer && q.top)
        return usage_error("query", "--top does not apply to compare --by layer (it shows every layer)");
    if (q.study && q.kind != HP_QUERY_HEADS && q.kind != HP_QUERY_SETS && q.kind != HP_QUERY_CURVE && !compare &&
        q.kind != HP_QUERY_IMPORTANCE && q.kind != HP_QUERY_ATTRIBUTION && q.kind != HP_QUERY_ROLES &&
        q.kind != HP_QUERY_GATES)
        return usage_error("query",
                           "--study is for heads, sets, curve, compare, importance, attribution, roles and gates");
    if (q.top && q.kind == HP_QUERY_ROLES)
        return usage_error("query", "--top does not apply to roles (it shows every head)");

    struct hp_error err = {0};
    struct hp_table *t;
    if (hp_query(db, &q, &t, &err) != HP_OK)
        return die(&err);
    print_table(t, f);
    hp_table_free(t);
    return 0;
}
