/*
 * circuit.c -- `headprune circuit`: a circuit study's circuit of K edges as the edge file `eval --circuit` reads:
 * its ranking's K highest edges (`query edges --study NAME`: each edge's |effect| patched alone), one a line,
 * after '#' lines saying where they come from.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char circuit_usage[] =
    "Usage: headprune circuit --db FILE [--sweep ID] [--study NAME] --size K\n"
    "\n"
    "Print the circuit of K edges a circuit study ranked (each edge patched alone,\n"
    "the K with the largest |effect|; `headprune query edges --study NAME` lists\n"
    "them) as the file `headprune eval --circuit` reads: one edge a line, after\n"
    "comment lines naming the database, sweep and study. `query circuit` gives\n"
    "the faithfulness of the sizes the study evaluated (docs/edges.md).\n";

int cmd_circuit(int argc, char **argv)
{
    const char *db = NULL, *study = NULL;
    int sweep = 0, size = -1;
    const struct opt opts[] = {
        OPT_DB(&db, "the results database"),
        OPT_SWEEP(&sweep),
        OPT_STRING("study", 'S', &study, "NAME", "the circuit (or edges) study (default: the sweep's first edges study, else its first circuit study)"),
        OPT_INT_WHAT("size", 'k', &size, "K", 0, 1 << 30, "a number of edges, an integer",
                     "the edges the circuit keeps, from 0 to the study's graph's"),
        OPT_END(),
    };
    const struct cmd_help h = {.name = "circuit", .usage = circuit_usage, .opts = opts, .tail = ""};
    int n_args, c = parse_options(&h, argc, argv, &n_args);
    if (c >= 0)
        return c;
    if (n_args)
        return usage_error("circuit", "unexpected argument");
    if (!db || size < 0)
        return usage_error("circuit", "--db FILE and --size K are required");
    struct hp_error err = {0};
    struct hp_table *t = NULL;
    const struct hp_query_opts q = {.kind = HP_QUERY_EDGES, .sweep_id = sweep, .study = study};
    if (hp_query(db, &q, &t, &err) != HP_OK)
        return die(&err);
    if (size > t->n_rows) {
        hp_fail(&err, HP_ERR_ARG, "%s: --size %d: the study ranked %d edges", db, size, t->n_rows);
        hp_table_free(t);
        return die(&err);
    }
    int ce = 0;
    while (ce < t->n_cols && strcmp(t->cols[ce], "edge") != 0)
        ce++;
    printf("# circuit: the %d of %d edges with the largest |effect| patched alone, from %s\n# %s\n", size,
           t->n_rows, db, t->note ? t->note : "");
    for (int i = 0; i < size && ce < t->n_cols; i++)
        printf("%s\n", t->cells[(size_t)i * t->n_cols + ce]);
    hp_table_free(t);
    return fflush(stdout) == 0 ? 0 : 1;
}
