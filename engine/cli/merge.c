/*
 * merge.c -- `headprune merge`: shard databases merged into one.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "cli_int.h"

static const char merge_help[] =
    "Usage: headprune merge OUT.db IN.db...\n"
    "\n"
    "Merge shard databases into OUT.db (created if missing). Results are keyed by\n"
    "their content address, so merging twice adds nothing and no result appears twice.\n";

int cmd_merge(int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(merge_help, stdout);
        return 0;
    }
    if (argc < 3)
        return usage_error("merge", "give OUT.db and at least one IN.db");
    struct hp_error err = {0};
    int64_t added;
    if (hp_store_merge(argv[1], (const char *const *)argv + 2, argc - 2, &added, &err) != HP_OK)
        return die(&err);
    printf("merged %d database%s into %s: %lld new results\n", argc - 2, argc > 3 ? "s" : "", argv[1],
           (long long)added);
    return 0;
}
