/*
 * cli_int.h -- what the command files of the headprune command line share.
 *
 * The CLI is laid out as git's builtin/: one file a subcommand
 * (engine/cli/<command>.c defines cmd_<command>), one table of commands in
 * main.c that both dispatches and prints the top-level help, and the helpers
 * every command uses here, defined in cli_util.c.
 *
 * Conventions every command keeps: results on stdout; errors one line on
 * stderr, "headprune: <file>: <problem> (<hint>)", exit status 1 (die);
 * usage mistakes "headprune CMD: <problem>" plus a pointer to --help, exit
 * status 2 (usage_error). Only these files print or exit.
 */
#ifndef HP_CLI_INT_H
#define HP_CLI_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "headprune.h"
#include "cpuload_int.h" /* hp_auto_threads */
#include "util_int.h"    /* hp_now */

// --- commands (one file each) ---------------------------------------------------

/* argv[0] is the command's name; the return value is the process's exit status. */
int cmd_inspect(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_query(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_prune(int argc, char **argv);
int cmd_slurm(int argc, char **argv);
int cmd_roles(int argc, char **argv);

// --- errors -----------------------------------------------------------------------

extern const char prog[]; /* "headprune": the first word of every message */

/* Print err's message as "headprune: <msg>"; returns 1, the exit status. */
int die(const struct hp_error *err);
/* Print "headprune CMD: msg" and the --help hint; returns 2, the exit status. */
int usage_error(const char *cmd, const char *msg);

/* usage_error for what getopt_long returned c (':' or '?') for, with an
 * optstring starting ':': the option named, missing its value or unknown. */
int option_error(const char *cmd, int c, char **argv);

// --- strict number parsing ----------------------------------------------------------

/* The whole of s a decimal integer in [lo, hi] (no blanks, no overflow); false: refuse it. */
bool parse_int(const char *s, int lo, int hi, int *out);
/* An integer option's value (name: "--threads") in [lo, hi] into *out: 0, or the usage error's exit status after
 * one line naming the option and its range. what: NULL ("an integer") or e.g. "a sweep id, an integer". */
int int_option(const char *cmd, const char *name, const char *what, const char *s, int lo, int hi, int *out);
/* "I/N" with 1 <= I <= N. */
bool parse_shard(const char *s, int *si, int *sn);
/* The whole of s a finite number >= lo. */
bool parse_double(const char *s, double lo, double *out);

/* A duration as "12s", "3m05s", "2h10m", or "?" when not finite, into buf. */
void fmt_seconds(double s, char *buf, size_t n);

/* On stderr: the data looks made for another model (hp_evaluator_looks_foreign). */
void warn_foreign(const char *data, const char *model, double loss, double acc);

/* "" or "; N heads pruned" for a pruned checkpoint: static, for the model line. */
const char *pruned_note(const struct hp_model_info *in);

/* "" or "; N tokens of text left out to fit the rows (...)": static, for the data line. */
const char *dropped_note(const struct hp_data *d);

// --- time and progress (stderr) -----------------------------------------------------

/* eval: sequences done, on a terminal only; with load, the threads re-chosen between chunks as other
 * processes' load changes (threads_min..threads_max: the counts it ran with). */
struct progress {
    bool on;
    double t0;
    struct hp_auto_threads *load; /* NULL: the threads stay as set */
    int threads, threads_min, threads_max;
};
void show_progress(void *user, int done, int total);
/* Threads as --threads says (n > 0: fixed) or, without it, as many as other processes leave CPUs idle:
 * measured from now, over opening the model and data (into *load), then chosen by progress_start and
 * again between chunks (two threads on a CPU another process keeps busy stall each other at every barrier). */
void threads_begin(int n, struct hp_auto_threads *load);
/* A pass's progress (shown on a terminal unless quiet), its threads chosen as threads_begin(n, load) began. */
struct progress progress_start(bool quiet, int n, struct hp_auto_threads *load);

/* run: jobs done, a bar on a terminal, a line every 5 s otherwise. */
struct run_progress {
    bool tty, quiet, started;
    double last;
    const char *plan, *db;
};
void run_progress_cb(void *user, const struct hp_sweep_progress *p);

// --- table output -------------------------------------------------------------------

enum fmt { FMT_TABLE, FMT_CSV, FMT_JSON };

/* "table", "csv" or "json"; false for anything else. */
bool parse_format(const char *s, enum fmt *f);
/* Print t on stdout: aligned columns (after its note), CSV, or a JSON array of objects. */
void print_table(const struct hp_table *t, enum fmt f);

#endif
