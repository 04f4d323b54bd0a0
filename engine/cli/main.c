/*
 * main.c -- the headprune command line: argv in, results out.
 *
 * The only module that prints or exits. Errors are one line on stderr,
 * "headprune: <file>: <problem> (<hint>)", with exit status 1; usage mistakes
 * exit with status 2.
 *
 * Each command lives in its own file (engine/cli/<command>.c, as git's
 * builtin/), which declares its options as a table (options.c parses it and
 * prints the command's --help from it). The table below is the one list of
 * commands: main dispatches through it and the top-level help is printed
 * from it. A new command is its file, listed in meson.build, and its entry
 * point's declaration and row here.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* The commands' entry points, each defined in engine/cli/<command>.c: argv[0] is the command's name, the
 * return value the process's exit status. */
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
int cmd_task(int argc, char **argv);
int cmd_circuit(int argc, char **argv);

static const struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary; /* one line of the top-level help */
} commands[] = {
    {"inspect", cmd_inspect, "describe a model directory or GGUF file"},
    {"tokenize", cmd_tokenize, "text to token ids with a model directory's tokenizer"},
    {"task", cmd_task, "make task rows for a model: IOI prompt pairs, induction sequences"},
    {"eval", cmd_eval, "evaluate one masked variant on held-out tokens"},
    {"plan", cmd_plan, "expand a YAML plan into jobs and estimate its cost"},
    {"run", cmd_run, "run a plan into an SQLite results database (resumable, shardable)"},
    {"roles", cmd_roles, "what each head attends to: previous-token, induction, sink, positional heads"},
    {"query", cmd_query, "pruning curves, head effects, sets, comparisons, redundancy, pairs, gradient scores, SQL"},
    {"report", cmd_report, "a sweep's figures as one self-contained HTML file (and SVGs)"},
    {"merge", cmd_merge, "merge shard databases"},
    {"slurm", cmd_slurm, "run a plan on a Slurm cluster: a job array of shards, then their merge"},
    {"prune", cmd_prune, "write a checkpoint with heads removed (Hugging Face format)"},
    {"circuit", cmd_circuit, "a circuit study's circuit of K edges, as the file eval --circuit reads"},
};

static void print_commands(FILE *f)
{
    fputs("Usage: headprune COMMAND [options]\n"
          "\n"
          "What is each attention head worth? headprune ablates heads of Hugging Face\n"
          "checkpoints (GPT-2, BERT, Pythia, Llama, Mistral, Qwen2 and Qwen3, Phi-3,\n"
          "OLMo 2, Gemma 2 and 3, grouped-query attention included) and of GGUF files,\n"
          "and measures the effect on held-out data.\n"
          "\n"
          "Commands:\n",
          f);
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fputs("\n"
          "'headprune COMMAND --help' explains each command.\n",
          f);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_commands(stderr);
        return 2;
    }
    /* Past a file size limit (ulimit -f) a write must fail with EFBIG and take
     * the full-disk path (a message, finished results kept), not kill us
     * silently with SIGXFSZ. */
    signal(SIGXFSZ, SIG_IGN);
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        print_commands(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("headprune %s\n", HP_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (strcmp(cmd, commands[i].name) == 0)
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "%s: unknown command '%s'\n", prog, cmd);
    print_commands(stderr);
    return 2;
}
