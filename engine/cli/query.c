/*
 * query.c -- `headprune query`: questions answered from a results database
 * (hp_query), printed as a table, CSV or JSON.
 */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli_int.h"

static const char query_help[] =
    "Usage: headprune query KIND --db FILE [--sweep ID] [--format table|csv|json]\n"
    "                       [--metric loss|kl|acc|cos] [--top K] [--eps E] [--full-mask] [SQL]\n"
    "\n"
    "Answer questions from a results database (opened read-only).\n"
    "\n"
    "Effects are differences from the sweep's baseline, signed so that larger is\n"
    "worse: loss and KL rise, accuracy and cosine fall.\n"
    "\n"
    "Kinds:\n"
    "  sweeps       the sweeps in the database\n"
    "  curve        pruning curve: metric against heads pruned (number and %),\n"
    "               iterative and random studies, 95% CIs over random samples;\n"
    "               each iterative step's units in \"pruned\" (--full-mask: also\n"
    "               everything pruned so far, in \"mask\")\n"
    "  heads        each head's effect when ablated alone, with a paired 95% CI\n"
    "               across sequences; sorted, --top K\n"
    "  redundancy   per layer: heads costing less than --eps (default 0.01) alone,\n"
    "               mean and max effect, keeping only the best head, removing the\n"
    "               whole layer\n"
    "  pairs        interaction I = D(a and b) - D(a) - D(b) of head pairs, D the\n"
    "               effects. I > 0: removing both hurts more than the two alone\n"
    "               (the heads back each other up: redundant); I < 0: less than\n"
    "               the two alone (overlapping damage). --top K of each end.\n"
    "  sql          read-only SQL, e.g. \"SELECT * FROM effects LIMIT 5\"\n"
    "               (tables, columns and views: docs/database.md)\n";

int cmd_query(int argc, char **argv)
{
    static const struct option opts[] = {{"db", required_argument, 0, 'd'},     {"sweep", required_argument, 0, 's'},
                                         {"format", required_argument, 0, 'f'}, {"metric", required_argument, 0, 'm'},
                                         {"top", required_argument, 0, 'k'},    {"eps", required_argument, 0, 'e'}, {"full-mask", no_argument, 0, 'M'},
                                         {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
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
    while ((c = getopt_long(argc, argv, "d:s:f:m:k:e:h", opts, NULL)) != -1) {
        switch (c) {
        case 'd': db = optarg; break;
        case 's': {
            int v;
            if (!parse_int(optarg, 1, 1 << 30, &v))
                return usage_error("query", "--sweep must be a positive sweep id");
            q.sweep_id = v;
            break;
        }
        case 'f':
            if (!parse_format(optarg, &f))
                return usage_error("query", "--format must be table, csv or json");
            break;
        case 'm':
            enum hp_metric mt;
            if (!hp_metric_parse(optarg, &mt))
                return usage_error("query", "--metric must be loss, kl, acc or cos");
            q.metric = optarg;
            break;
        case 'k':
            if (!parse_int(optarg, 1, 1 << 30, &q.top))
                return usage_error("query", "--top must be a positive integer");
            break;
        case 'M': q.full_mask = true; break;
        case 'e':
            if (!parse_double(optarg, 0.0, &q.eps))
                return usage_error("query", "--eps must be a non-negative number");
            break;
        case 'h': fputs(query_help, stdout); return 0;
        default: return usage_error("query", "unknown option");
        }
    }
    if (optind >= argc)
        return usage_error("query", "give a KIND: sweeps, curve, heads, redundancy, pairs or sql");
    static const char *const kinds[] = {"sweeps", "curve", "heads", "redundancy", "pairs", "sql"};
    static const enum hp_query_kind kv[] = {HP_QUERY_SWEEPS,     HP_QUERY_CURVE, HP_QUERY_HEADS,
                                            HP_QUERY_REDUNDANCY, HP_QUERY_PAIRS, HP_QUERY_SQL};
    int ki = -1;
    for (int i = 0; i < 6; i++)
        if (strcmp(argv[optind], kinds[i]) == 0)
            ki = i;
    if (ki < 0)
        return usage_error("query", "KIND must be sweeps, curve, heads, redundancy, pairs or sql");
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
    struct hp_error err = {0};
    struct hp_table *t;
    if (hp_query(db, &q, &t, &err) != HP_OK)
        return die(&err);
    print_table(t, f);
    hp_table_free(t);
    return 0;
}
