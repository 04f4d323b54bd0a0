/*
 * options.c -- every command's options parsed from its table, and its --help
 * printed from the same table (git's parse-options idea, written here).
 *
 * A command declares an array of struct opt rows (cli.h: OPT_FLAG,
 * OPT_INT, OPT_STRING, OPT_PATH, OPT_CHOICE, OPT_NUMBER, OPT_CALLBACK, and the
 * options several commands share: OPT_MODEL, OPT_THREADS, ...), and calls
 * parse_options once. The parser walks argv in order, as getopt_long did:
 * --name VALUE, --name=VALUE, a unique prefix of a name, -x VALUE, -xVALUE,
 * bundled flags, "--" ending the options, and operands anywhere (gathered
 * after argv[0], in order). The first mistake is one usage line, worded here
 * for every command alike: an unknown or ambiguous option, a missing value, a
 * value a flag does not take, an integer out of its range (the range said), a
 * choice outside its names (the names said).
 *
 * Must not: know any one command (its rows, its checks across options and its
 * prose are in its own file), or print anything but usage errors and --help.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* --help's option lines: the name column at most this wide, the help wrapped before this column. */
#define NAME_COLUMN_MAX 26
#define WRAP_COLUMN 80

// --- parsing ----------------------------------------------------------------------

/* "a, b or c": the choices of o, into buf. */
static void choice_list(const struct opt *o, const char *sep, const char *last, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; o->choices[i] && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%s", i == 0 ? "" : o->choices[i + 1] ? sep : last, o->choices[i]);
}

/* o given the text s (NULL for a flag): 0, or the usage error's status after its one line. */
static int take_value(const char *cmd, const struct opt *o, const char *s)
{
    char msg[256], name[64];
    snprintf(name, sizeof name, "--%s", o->name);
    switch (o->kind) {
    case OPT_KIND_FLAG: *(bool *)o->value = true; return 0;
    case OPT_KIND_INT: return int_option(cmd, name, o->what, s, o->lo, o->hi, o->value);
    case OPT_KIND_STRING:
    case OPT_KIND_PATH:
        if (o->what && !*s) {
            snprintf(msg, sizeof msg, "%s must name %s", name, o->what);
            return usage_error(cmd, msg);
        }
        *(const char **)o->value = s;
        return 0;
    case OPT_KIND_CHOICE:
        for (int i = 0; o->choices[i]; i++)
            if (strcmp(s, o->choices[i]) == 0) {
                *(int *)o->value = i;
                return 0;
            }
        char list[160];
        choice_list(o, ", ", " or ", list, sizeof list);
        snprintf(msg, sizeof msg, "%s must be %s", name, list);
        return usage_error(cmd, msg);
    case OPT_KIND_NUMBER: {
        double *v = o->value;
        if (parse_double(s, o->min, v) && !(o->above && *v <= o->min))
            return 0;
        snprintf(msg, sizeof msg, "%s must be %s", name, o->what);
        return usage_error(cmd, msg);
    }
    case OPT_KIND_CALLBACK: {
        const char *bad = o->fn(o, s);
        return bad ? usage_error(cmd, bad) : 0;
    }
    }
    return 0;
}

/* The row of "--word" (word without the dashes, up to '=' or its end): exact, else a unique prefix. */
static const struct opt *find_long(const char *cmd, const struct opt *opts, const char *word, size_t len, int *rc)
{
    const struct opt *hit = NULL;
    int n_hits = 0;
    for (const struct opt *o = opts; o->name; o++) {
        if (strncmp(o->name, word, len) != 0)
            continue;
        if (strlen(o->name) == len)
            return o;
        hit = o;
        n_hits++;
    }
    if (n_hits == 1)
        return hit;
    char msg[400];
    size_t at = (size_t)snprintf(msg, sizeof msg, n_hits ? "option '--%.*s' is ambiguous (" : "unknown option '--%.*s'",
                                 (int)(len > 100 ? 100 : len), word);
    for (const struct opt *o = opts; n_hits && o->name && at < sizeof msg; o++) /* the names it could mean */
        if (strncmp(o->name, word, len) == 0)
            at += (size_t)snprintf(msg + at, sizeof msg - at, "%s--%s", msg[at - 1] == '(' ? "" : ", ", o->name);
    if (n_hits && at < sizeof msg)
        snprintf(msg + at, sizeof msg - at, ")");
    *rc = usage_error(cmd, msg);
    return NULL;
}

static int needs_value(const char *cmd, const char *spelt)
{
    char msg[160];
    snprintf(msg, sizeof msg, "option '%.100s' needs a value", spelt);
    return usage_error(cmd, msg);
}

/* take_value's 0 (taken) as -1, the parser's "go on"; an error's status as it is. */
static int taken(int rc)
{
    return rc == 0 ? -1 : rc;
}

/* Whether "--word" (len bytes) asks for help: "--help", or a prefix of it no row's name shares. */
static bool asks_help(const struct opt *opts, const char *word, size_t len)
{
    if (len == 0 || len > 4 || strncmp(word, "help", len) != 0)
        return false;
    for (const struct opt *o = opts; o->name && len < 4; o++)
        if (strncmp(o->name, word, len) == 0)
            return false;
    return true;
}

/* argv[*i], a word "--...": its option, its value from "=VALUE" or the next word.
 * -1: taken; 0: --help printed; else the usage error's status. */
static int long_option(const struct cmd_help *h, int argc, char **argv, int *i)
{
    const char *word = argv[*i] + 2, *eq = strchr(word, '=');
    size_t len = eq ? (size_t)(eq - word) : strlen(word);
    if (!eq && asks_help(h->opts, word, len)) {
        print_help(h);
        return 0;
    }
    int rc = 2;
    const struct opt *o = find_long(h->name, h->opts, word, len, &rc);
    if (!o)
        return rc;
    if (o->kind == OPT_KIND_FLAG) {
        char msg[160];
        snprintf(msg, sizeof msg, "option '--%s' takes no value", o->name);
        return eq ? usage_error(h->name, msg) : taken(take_value(h->name, o, NULL));
    }
    if (eq)
        return taken(take_value(h->name, o, eq + 1));
    if (*i + 1 >= argc) {
        char spelt[128];
        snprintf(spelt, sizeof spelt, "--%s", o->name);
        return needs_value(h->name, spelt);
    }
    return taken(take_value(h->name, o, argv[++*i]));
}

/* argv[*i], a word "-xyz": flags x and y, then z with the rest of the word or the next word as its value;
 * -h is --help. Returns as long_option does. */
static int short_options(const struct cmd_help *h, int argc, char **argv, int *i)
{
    for (const char *c = argv[*i] + 1; *c; c++) {
        if (*c == 'h') {
            print_help(h);
            return 0;
        }
        const struct opt *o = h->opts;
        while (o->name && o->short_name != *c)
            o++;
        if (!o->name) {
            char msg[32];
            snprintf(msg, sizeof msg, "unknown option '-%c'", *c);
            return usage_error(h->name, msg);
        }
        if (o->kind == OPT_KIND_FLAG) {
            take_value(h->name, o, NULL);
            continue;
        }
        if (c[1])
            return taken(take_value(h->name, o, c + 1));
        if (*i + 1 >= argc) {
            char spelt[4] = {'-', *c, 0};
            return needs_value(h->name, spelt);
        }
        return taken(take_value(h->name, o, argv[++*i]));
    }
    return -1;
}

int parse_options(const struct cmd_help *h, int argc, char **argv, int *n_args)
{
    int n = 0;
    bool only_operands = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (only_operands || a[0] != '-' || a[1] == '\0') {
            argv[1 + n++] = argv[i];
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_operands = true;
            continue;
        }
        int rc = a[1] == '-' ? long_option(h, argc, argv, &i) : short_options(h, argc, argv, &i);
        if (rc >= 0)
            return rc;
    }
    *n_args = n;
    return -1;
}

// --- help -------------------------------------------------------------------------

/* A choice option's choices are its argument in the name column ("loss|kl|acc") up to this long; longer lists are
 * shown as NAME and listed after its help. */
#define CHOICES_IN_NAME_MAX 40

/* "  -m, --model DIR" as the name column shows o, into buf; its length. */
static int name_cell(const struct opt *o, char *buf, size_t n)
{
    char arg[160] = "";
    if (o->kind == OPT_KIND_CHOICE && !o->arg)
        choice_list(o, "|", "|", arg, sizeof arg);
    if (strlen(arg) > CHOICES_IN_NAME_MAX) /* too many to show here: the help lists them (print_help) */
        snprintf(arg, sizeof arg, "NAME");
    else if (o->kind != OPT_KIND_FLAG && !*arg)
        snprintf(arg, sizeof arg, "%s", o->arg ? o->arg : "VALUE");
    char s[4] = "   ";
    if (o->short_name)
        snprintf(s, sizeof s, "-%c,", o->short_name);
    return snprintf(buf, n, "  %s --%s%s%s", s, o->name, *arg ? " " : "", arg);
}

/* text, its first line already at column col, wrapped at its spaces before WRAP_COLUMN; a '\n' in it breaks
 * the line, and every line after the first starts at col (with the text's own spaces after a '\n'). */
static void put_wrapped(FILE *f, const char *text, int col)
{
    const char *p = text;
    do {
        size_t len = strcspn(p, "\n"), room = (size_t)(WRAP_COLUMN - 1 - col), cut = len;
        if (len > room) { /* the last space that fits, or the first after it when no word does */
            cut = room;
            while (cut > 0 && p[cut] != ' ')
                cut--;
            if (cut == 0)
                for (cut = room; cut < len && p[cut] != ' ';)
                    cut++;
        }
        fprintf(f, "%.*s\n", (int)cut, p);
        p += cut;
        if (cut < len)
            while (*p == ' ')
                p++;
        else if (*p == '\n')
            p++;
        if (*p)
            fprintf(f, "%*s", col, "");
    } while (*p);
}

void print_help(const struct cmd_help *h)
{
    FILE *f = stdout;
    char cell[256];
    fputs(h->usage, f);
    if (h->after_usage)
        h->after_usage(f);
    int col = 0;
    for (const struct opt *o = h->opts; o->name; o++) {
        int w = name_cell(o, cell, sizeof cell) + 2;
        col = w > col && w <= NAME_COLUMN_MAX ? w : col;
    }
    col = col ? col : NAME_COLUMN_MAX; /* every row too wide: their help lines below them, at the widest column */
    bool any = h->opts[0].name != NULL;
    if (any)
        fputs("\nOptions:\n", f);
    for (const struct opt *o = h->opts; o->name; o++) {
        int w = name_cell(o, cell, sizeof cell);
        fputs(cell, f);
        if (w + 2 > col) /* too wide for the column: the help starts on the next line */
            fprintf(f, "\n%*s", col, "");
        else
            fprintf(f, "%*s", col - w, "");
        if (o->kind == OPT_KIND_CHOICE && !o->arg && strstr(cell, " NAME")) {
            char all[1536], list[1024];
            choice_list(o, ", ", " or ", list, sizeof list);
            snprintf(all, sizeof all, "%s; NAME is %s", o->help, list);
            put_wrapped(f, all, col);
        } else {
            put_wrapped(f, o->help, col);
        }
    }
    if (h->tail)
        fprintf(f, "\n%s", h->tail);
}

// --- choices read from the engine's tables ----------------------------------------------

const char *const *ablation_choices(void)
{
    static const char *names[HP_N_ABLATIONS + 1];
    for (int i = 0; i < HP_N_ABLATIONS; i++)
        names[i] = hp_ablation_name((enum hp_ablation)i);
    return names;
}

const char *ablation_help(void)
{
    static char help[2048];
    size_t at = 0;
    for (int i = 0; i < HP_N_ABLATIONS && at < sizeof help; i++)
        at += (size_t)snprintf(help + at, sizeof help - at, "%s%s%s: %s", i ? ";\n" : "",
                               hp_ablation_name((enum hp_ablation)i), i == HP_ABLATE_ZERO ? " (default)" : "",
                               hp_ablation_help((enum hp_ablation)i));
    return help;
}

const char *const *metric_choices(void)
{
    static const char *names[HP_N_METRICS + 1];
    for (int i = 0; i < HP_N_METRICS; i++)
        names[i] = hp_metric_name((enum hp_metric)i);
    return names;
}

const char *const format_choices[] = {"table", "csv", "json", NULL};

// --- --mask and --keep ------------------------------------------------------------------

static const char *take_spec(const struct opt *o, const char *text, bool keep)
{
    struct mask_arg *m = o->value;
    if (m->spec)
        return "give either --mask or --keep, once";
    m->spec = text;
    m->keep = keep;
    return NULL;
}

const char *take_mask(const struct opt *o, const char *text)
{
    return take_spec(o, text, false);
}

const char *take_keep(const struct opt *o, const char *text)
{
    return take_spec(o, text, true);
}
