/*
 * cli.h -- what the command files of the headprune command line share.
 *
 * The CLI is laid out as git's builtin/: one file a subcommand
 * (engine/cli/<command>.c defines cmd_<command>), one table of commands in
 * main.c that both dispatches and prints the top-level help, and the helpers
 * every command uses here: errors, numbers and tables (cli_util.c), and the
 * option tables each command declares and options.c parses and prints as
 * its --help (the options several commands take are rows written once here).
 *
 * Conventions every command keeps: results on stdout; errors one line on
 * stderr, "headprune: <file>: <problem> (<hint>)", exit status 1 (die);
 * usage mistakes "headprune CMD: <problem>" plus a pointer to --help, exit
 * status 2 (usage_error). Only these files print or exit.
 */
#ifndef HP_CLI_H
#define HP_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "headprune.h"
#include "cpuload.h" /* hp_auto_threads */
#include "util.h"    /* hp_now */

// --- errors -----------------------------------------------------------------------

extern const char prog[]; /* "headprune": the first word of every message */

/* Print err's message as "headprune: <msg>"; returns 1, the exit status. */
int die(const struct hp_error *err);
/* Print "headprune CMD: msg" and the --help hint; returns 2, the exit status. */
int usage_error(const char *cmd, const char *msg);

// --- options: a table per command (options.c) -----------------------------------------

/*
 * A command's options are an array of rows ending in OPT_END, one row an
 * option: its long name (without "--"), a short letter or 0, its kind, where
 * its value goes, the value's name in --help (DIR, N) and its help text (one
 * paragraph, wrapped by --help; '\n' breaks a line). parse_options reads argv
 * by the rows and says every mistake the same way; print_help prints the
 * command's usage, then the rows, then its tail. The options several commands
 * take are the OPT_MODEL ... rows below, written once.
 */
enum opt_kind {
    OPT_KIND_FLAG,     /* bool *: set when given; takes no value */
    OPT_KIND_INT,      /* int *: an integer in [lo, hi] (int_option's message; what as there) */
    OPT_KIND_STRING,   /* const char **: the text; what != NULL: not empty ("--study must name a study") */
    OPT_KIND_PATH,     /* const char **: a file or directory, as a string */
    OPT_KIND_CHOICE,   /* int *: the index of one of choices (NULL-terminated), which the message lists */
    OPT_KIND_NUMBER,   /* double *: finite, >= min (> min with above); what: "--eps must be <what>" */
    OPT_KIND_CALLBACK, /* fn(row, text): NULL, or the usage error's message; value is fn's */
};

struct opt {
    const char *name;
    char short_name;
    enum opt_kind kind;
    void *value;
    const char *arg;  /* the value's name in --help; a choice without one shows its names a|b|c */
    const char *help;
    int lo, hi;       /* OPT_KIND_INT */
    const char *what; /* as each kind says */
    const char *const *choices;
    double min;
    bool above;
    const char *(*fn)(const struct opt *o, const char *text);
};

/* A command's --help: usage lines (and what it does), the rows' lines under "Options:", then tail (or NULL). */
struct cmd_help {
    const char *name; /* the command, as usage errors name it */
    const char *usage;
    const struct opt *opts;
    const char *tail;
    void (*after_usage)(FILE *f); /* NULL, or more lines after usage (query: its kinds, from their table) */
};

#define OPT_FLAG(l, s, v, h) {.name = (l), .short_name = (s), .kind = OPT_KIND_FLAG, .value = (v), .help = (h)}
#define OPT_INT(l, s, v, a, lo_, hi_, h)                                                                           \
    {.name = (l), .short_name = (s), .kind = OPT_KIND_INT, .value = (v), .arg = (a), .help = (h), .lo = (lo_),     \
     .hi = (hi_)}
/* An integer whose message says what it is: "a sweep id, an integer from 1 to ..." */
#define OPT_INT_WHAT(l, s, v, a, lo_, hi_, w, h)                                                                   \
    {.name = (l), .short_name = (s), .kind = OPT_KIND_INT, .value = (v), .arg = (a), .help = (h), .lo = (lo_),     \
     .hi = (hi_), .what = (w)}
#define OPT_STRING(l, s, v, a, h) {.name = (l), .short_name = (s), .kind = OPT_KIND_STRING, .value = (v), .arg = (a), .help = (h)}
#define OPT_NAME(l, s, v, a, w, h)                                                                                 \
    {.name = (l), .short_name = (s), .kind = OPT_KIND_STRING, .value = (v), .arg = (a), .help = (h), .what = (w)}
#define OPT_PATH(l, s, v, a, h) {.name = (l), .short_name = (s), .kind = OPT_KIND_PATH, .value = (v), .arg = (a), .help = (h)}
#define OPT_CHOICE(l, s, v, a, c, h)                                                                               \
    {.name = (l), .short_name = (s), .kind = OPT_KIND_CHOICE, .value = (v), .arg = (a), .help = (h), .choices = (c)}
#define OPT_NUMBER(l, s, v, a, min_, above_, w, h)                                                                 \
    {.name = (l), .short_name = (s), .kind = OPT_KIND_NUMBER, .value = (v), .arg = (a), .help = (h),              \
     .min = (min_), .above = (above_), .what = (w)}
#define OPT_CALLBACK(l, s, v, a, f, h)                                                                             \
    {.name = (l), .short_name = (s), .kind = OPT_KIND_CALLBACK, .value = (v), .arg = (a), .help = (h), .fn = (f)}
#define OPT_END() {0}

/* The options several commands take, each its letter, limits and words written once. */
#define OPT_MODEL(v, h) OPT_PATH("model", 'm', v, "DIR", h)
#define OPT_DATA(v) OPT_PATH("data", 'd', v, "FILE", DATA_HELP)
#define OPT_SEQ_LEN(v) OPT_INT("seq-len", 's', v, "N", 1, HP_SEQ_LEN_MAX, "rows of N tokens: 1-D ids are cut into them, text packed into them")
#define OPT_THREADS(v, h) OPT_INT("threads", 't', v, "N", 1, HP_THREADS_MAX, h)
#define OPT_JSON(v, h) OPT_FLAG("json", 'j', v, h)
#define OPT_QUIET(v, h) OPT_FLAG("quiet", 'q', v, h)
#define OPT_DB(v, h) OPT_PATH("db", 'd', v, "FILE", h)
#define OPT_SWEEP(v) OPT_INT_WHAT("sweep", 's', v, "ID", 1, 1 << 30, "a sweep id, an integer", SWEEP_HELP)
#define OPT_STUDY(v, h) OPT_NAME("study", 0, v, "NAME", "a study", h)
#define OPT_FORMAT(v, c, h) OPT_CHOICE("format", 'f', v, NULL, c, h)
#define OPT_EPS(v, h) OPT_NUMBER("eps", 'e', v, "E", 0.0, false, "a non-negative number", h)
#define OPT_TIMEOUT(v, s, h) OPT_NUMBER("timeout", s, v, "S", 0.0, true, "a positive number of seconds", h)
#define OPT_MASK(v, s, h) OPT_CALLBACK("mask", s, v, "SPEC", take_mask, h)
#define OPT_KEEP(v, s, h) OPT_CALLBACK("keep", s, v, "SPEC", take_keep, h)
#define OPT_OUT(v, s, a, h) OPT_PATH("out", s, v, a, h)
#define DATA_HELP                                                                                                  \
    "held-out token ids: .npy (int32/int64/uint16/uint32, [n_seqs, seq_len] or 1-D), .jsonl ({\"ids\": [...], optional " \
    "\"labels\", \"attention_mask\", \"token_type_ids\"}) or an llm.c / nanoGPT .bin token file; or text, "          \
    "tokenized with the model's tokenizer: .txt (documents separated by blank lines, packed into rows of "         \
    "--seq-len) or .jsonl ({\"text\": ...} or {\"text_a\": ..., \"text_b\": ...})"
#define THREADS_HELP "threads (default: as many as other processes leave CPUs idle, measured as it runs)"
#define SWEEP_HELP "the sweep to read (default: the newest; `headprune query sweeps` lists them)"
#define MASK_SYNTAX                                                                                                \
    "comma-separated LAYER.HEAD (0.3,2.1), LAYER.* (a whole layer's heads), kv:LAYER.GROUP (every query head "    \
    "sharing one key/value head), mlp:LAYER (the layer's MLP block); layers and heads count from 0"
#define TIMEOUT_HELP                                                                                               \
    "reading the database stops with an error after S seconds (default 600): a database whose views, or SQL, "    \
    "would never end cannot hang the command"

/* Where --mask and --keep put their spec: one of them, once. */
struct mask_arg {
    const char *spec;
    bool keep;
};
const char *take_mask(const struct opt *o, const char *text);
const char *take_keep(const struct opt *o, const char *text);

/* Read argv[1..argc) by h's rows, the operands gathered into argv[1..1 + *n_args) in their order.
 * -1: go on; else the exit status to return (0 after --help, 2 after a usage error, said). */
int parse_options(const struct cmd_help *h, int argc, char **argv, int *n_args);
/* h's --help on stdout. */
void print_help(const struct cmd_help *h);

/* Choices read from the engine's tables (index = the enum's value), and the table formats. */
const char *const *ablation_choices(void);
const char *ablation_help(void); /* every method and what it makes of a dead head, from the table */
const char *const *metric_choices(void);
extern const char *const format_choices[]; /* table, csv, json: enum fmt's order */

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
    struct hp_threads_run *threads; /* NULL, or the pass's threads: chosen again as it goes, when they follow
                                     * the load */
};
void show_progress(void *user, int done, int total);
/* A pass's progress (shown on a terminal unless quiet), its threads begun by hp_threads_run_begin and chosen
 * here first (hp_threads_run_start). */
struct progress progress_start(bool quiet, struct hp_threads_run *threads);

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
/* Print t on stdout: aligned columns (after its note), CSV (no summary rows), or a JSON object {"rows": [...],
 * "summary": [...]} (each an array of objects; the summary rows apart, hp_table's n_summary). */
void print_table(const struct hp_table *t, enum fmt f);

#endif
