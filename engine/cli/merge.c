/*
 * merge.c -- `headprune merge`: shard databases merged into one.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>

#include "cli.h"

static const char merge_help[] =
    "Usage: headprune merge OUT.db IN.db...\n"
    "\n"
    "Merge shard databases into OUT.db (created if missing). Results are keyed by\n"
    "their content address, so merging twice adds nothing and no result appears\n"
    "twice.\n";

int cmd_merge(int argc, char **argv)
{
    const struct opt opts[] = {OPT_END()};
    const struct cmd_help h = {.name = "merge", .usage = merge_help, .opts = opts};
    int n_args, rc = parse_options(&h, argc, argv, &n_args);
    if (rc >= 0)
        return rc;
    if (n_args < 2)
        return usage_error("merge", "give OUT.db and at least one IN.db");
    struct hp_error err = {0};
    int64_t added;
    if (hp_store_merge(argv[1], (const char *const *)argv + 2, n_args - 1, &added, &err) != HP_OK)
        return die(&err);
    printf("merged %d database%s into %s: %lld new results\n", n_args - 1, n_args > 2 ? "s" : "", argv[1],
           (long long)added);
    return 0;
}
