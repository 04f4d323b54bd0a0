/*
 * task.c -- `headprune task GENERATOR`: task rows made for a model
 * (hp_task_generate), one JSON line each on standard output.
 *
 * The generators, their summaries and their help are the engine's table
 * (hp_task_gens, task_gen.h); this file parses argv, says which options a
 * generator takes, and writes the lines.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "task_gen.h" /* hp_task_gens: each generator's name, summary and help */

static const char task_help[] =
    "Usage: headprune task GENERATOR --model DIR [--n N] [--seed S] [options]\n"
    "                      > FILE.jsonl\n"
    "\n"
    "Make task rows (docs/tasks.md) for a model, so that a task can be studied\n"
    "without writing data: one JSON row a line on standard output, the same bytes\n"
    "for the same generator, model, options and seed. 'headprune task GENERATOR\n"
    "--help' says what each makes.\n"
    "\n"
    "Generators:\n"; /* then each generator's name and summary, from hp_task_gens */

static void print_generators(FILE *f)
{
    for (int i = 0; i < HP_TASK_GEN_COUNT; i++)
        fprintf(f, "  %-10s %s\n", hp_task_gens[i].name, hp_task_gens[i].summary);
}

/* "ioi or induction": the generators' names, from the table, into buf. */
static void generator_names(char *buf, size_t n)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < HP_TASK_GEN_COUNT && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s", i == 0 ? "" : i == HP_TASK_GEN_COUNT - 1 ? " or " : ", ",
                              hp_task_gens[i].name);
}

/* One row to standard output; false (errno kept) when it cannot be written. */
static bool put_row(void *user, const char *line, size_t n)
{
    (void)user;
    return fwrite(line, 1, n, stdout) == n && putchar('\n') != EOF;
}

int cmd_task(int argc, char **argv)
{
    const char *dir = NULL;
    int n = 64, seed = 0, len = 0, templ = 0;
    const struct hp_task_gen_row *gen = argc > 1 ? hp_task_gen_named(argv[1]) : NULL;
    char name[64], usage[2048];
    const struct opt all[] = {
        OPT_MODEL(&dir, "the model directory: ioi and docstring read its tokenizer, induction its config.json "
                        "(and its tokenizer, when it has one, for the special tokens to leave out)"),
        OPT_INT("n", 'n', &n, "N", 1, HP_TASK_GEN_MAX_ROWS, "rows to make (default 64)"),
        OPT_INT_WHAT("seed", 0, &seed, "S", 0, INT_MAX, "a seed, an integer",
                     "the random draws' seed (default 0): the same seed gives the same rows, byte for byte"),
        OPT_INT("len", 'k', &len, "K", 2, 1 << 20,
                "induction: K random tokens in a half, so prompts are 2K - 1 tokens (default 32, cut to what the "
                "model's positions and vocabulary hold)"),
        OPT_INT("template", 0, &templ, "K", 1, HP_TASK_IOI_TEMPLATES,
                "ioi: only template K (1 to 8; default: every template in turn), so that every row has the same "
                "shape (a per-position patching study wants rows of one template)"),
        OPT_END(),
    };
    /* a generator's --help: its usage and help, then only the options it takes */
    struct opt mine[sizeof all / sizeof *all];
    int k = 0;
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (!gen || ((all[i].value != &len || gen->takes_len) && (all[i].value != &templ || gen->takes_templ)))
            mine[k++] = all[i];
    if (gen) {
        snprintf(name, sizeof name, "task %s", gen->name);
        snprintf(usage, sizeof usage, "Usage: headprune task %s --model DIR [--n N] [--seed S]%s%s\n"
                 "                      > FILE.jsonl\n\n%s\n", gen->name, gen->takes_len ? " [--len K]" : "",
                 gen->takes_templ ? " [--template K]" : "", gen->help);
    }
    const struct cmd_help h = gen ? (struct cmd_help){.name = name, .usage = usage, .opts = mine}
                                  : (struct cmd_help){.name = "task", .usage = task_help, .opts = all,
                                                      .after_usage = print_generators};
    int n_args, c = parse_options(&h, gen ? argc - 1 : argc, gen ? argv + 1 : argv, &n_args);
    if (c >= 0)
        return c;
    char names[128], msg[256];
    generator_names(names, sizeof names);
    if (!gen && n_args == 0) {
        snprintf(msg, sizeof msg, "name a generator: %s", names);
        return usage_error("task", msg);
    }
    if (!gen) {
        if (!(gen = hp_task_gen_named(argv[1]))) {
            snprintf(msg, sizeof msg, "unknown generator '%s' (the generators: %s)", argv[1], names);
            return usage_error("task", msg);
        }
        snprintf(name, sizeof name, "task %s", gen->name);
        if ((len && !gen->takes_len) || (templ && !gen->takes_templ)) {
            snprintf(msg, sizeof msg, "%s takes no %s", gen->name, len && !gen->takes_len ? "--len" : "--template");
            return usage_error(name, msg);
        }
        n_args--;
    }
    if (n_args > 0)
        return usage_error(name, "takes no operands after the generator");
    if (!dir)
        return usage_error(name, "--model DIR is required");
    struct hp_task_gen_opts o = {.n = n, .seed = (uint64_t)seed, .len = len, .templ = templ};
    struct hp_error err = {0};
    enum hp_status st = hp_task_generate((enum hp_task_gen)(gen - hp_task_gens), dir, &o, put_row, NULL, &err);
    if (st == HP_OK && fflush(stdout) != 0)
        st = HP_ERR_IO;
    if (st == HP_ERR_IO && ferror(stdout)) {
        fprintf(stderr, "%s: standard output: cannot write the rows (%s)\n", prog, hp_strerror(errno));
        return 1;
    }
    return st == HP_OK ? 0 : die(&err);
}
