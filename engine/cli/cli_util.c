/*
 * cli_util.c -- the helpers every command of the command line shares:
 * errors and exit statuses, strict parsing of numbers given on the command
 * line, progress on stderr, and the table writer (aligned text, CSV, JSON).
 *
 * Must not: know any one command's options (those live in its own file;
 * parsing them, and the options several commands share, live in options.c).
 */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

// --- errors -----------------------------------------------------------------------

const char prog[] = "headprune";

int die(const struct hp_error *err)
{
    fprintf(stderr, "%s: %s\n", prog, err->msg);
    return 1;
}

int usage_error(const char *cmd, const char *msg)
{
    fprintf(stderr, "%s %s: %s\nTry '%s %s --help'.\n", prog, cmd, msg, prog, cmd);
    return 2;
}

// --- strict number parsing ----------------------------------------------------------

/*
 * Every number on the command line goes through here: decimal digits only
 * (an optional '-'), no blanks, no trailing text, and within [lo, hi] before
 * it is narrowed to an int -- strtoll's overflow (ERANGE) counts as out of
 * range, so 4294967297 is refused rather than wrapped to 1.
 */
bool parse_int(const char *s, int lo, int hi, int *out)
{
    if (!((*s >= '0' && *s <= '9') || (*s == '-' && s[1] >= '0' && s[1] <= '9')))
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno == ERANGE || *end != '\0' || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

/*
 * An integer option: parse_int's, or one line that names the option and the
 * range it takes (and what was given), whichever way the text is wrong: not
 * a number, or a number past a limit, which "not a positive integer" would
 * misdescribe. what: "an integer", or e.g. "a sweep id, an integer".
 */
int int_option(const char *cmd, const char *name, const char *what, const char *s, int lo, int hi, int *out)
{
    if (parse_int(s, lo, hi, out))
        return 0;
    char msg[200];
    snprintf(msg, sizeof msg, "%s must be %s from %d to %d (not '%.40s%s')", name, what ? what : "an integer", lo, hi,
             s, strlen(s) > 40 ? "..." : "");
    return usage_error(cmd, msg);
}

/* "I/N" with 1 <= I <= N, each part a number as parse_int takes it. */
bool parse_shard(const char *s, int *si, int *sn)
{
    const char *slash = strchr(s, '/');
    char first[32];
    if (!slash || (size_t)(slash - s) >= sizeof first)
        return false;
    memcpy(first, s, (size_t)(slash - s));
    first[slash - s] = '\0';
    return parse_int(first, 1, INT_MAX, si) && parse_int(slash + 1, 1, INT_MAX, sn) && *si <= *sn;
}

/* A finite number >= lo, the whole text. */
bool parse_double(const char *s, double lo, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno == ERANGE || !isfinite(v) || v < lo || isspace((unsigned char)*s))
        return false;
    *out = v;
    return true;
}

// --- time and progress (stderr) -----------------------------------------------------

struct progress progress_start(bool quiet, struct hp_threads_run *threads)
{
    hp_threads_run_start(threads);
    return (struct progress){!quiet && isatty(STDERR_FILENO), hp_now(), threads};
}

void show_progress(void *user, int done, int total)
{
    struct progress *p = user;
    if (p->threads)
        hp_threads_run_step(p->threads);
    if (!p->on)
        return;
    double el = hp_now() - p->t0;
    fprintf(stderr, "\r  %d/%d sequences  %.1f s  ETA %.1f s ", done, total, el,
            done ? el / done * (total - done) : 0.0);
    if (done == total)
        fputs("\r\033[K", stderr);
    fflush(stderr);
}

void fmt_seconds(double s, char *buf, size_t n)
{
    if (!isfinite(s) || s < 0)
        snprintf(buf, n, "?");
    else if (s < 60)
        snprintf(buf, n, "%.0fs", s);
    else if (s < 3600)
        snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else
        snprintf(buf, n, "%dh%02dm", (int)s / 3600, (int)s % 3600 / 60);
}

void run_progress_cb(void *user, const struct hp_sweep_progress *p)
{
    struct run_progress *r = user;
    if (r->quiet)
        return;
    if (!r->started) {
        /* said once the plan, model, data and database have all opened */
        fprintf(stderr, "headprune: running %s into %s (BLIS kernel %s)\n", r->plan, r->db, hp_runtime_kernel());
        r->started = true;
    }
    /* the rate of the kind of work at work (evaluations, gradient passes, training steps), and an ETA that costs
     * each kind left at its own rate, once something has been measured; it assumes every job left needs doing */
    char eta[32];
    fmt_seconds(p->eta, eta, sizeof eta);
    double frac = p->total ? (double)p->done / (double)p->total : 0;
    if (r->tty) {
        char bar[31];
        int fill = (int)(frac * 30);
        for (int i = 0; i < 30; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[30] = 0;
        fprintf(stderr, "\r\033[K[%s] %lld/%lld %3.0f%%  %.1f %s/s  ETA %s  %s", bar, (long long)p->done,
                (long long)p->total, 100 * frac, p->rate, p->unit, eta, p->label);
        fflush(stderr);
    } else if (p->elapsed - r->last >= 5.0 || p->done == p->total) {
        fprintf(stderr, "headprune: %lld/%lld jobs (%.0f%%, %lld already done), %.1f %s/s, ETA %s: %s\n",
                (long long)p->done, (long long)p->total, 100 * frac, (long long)p->cached, p->rate, p->unit, eta,
                p->label);
        r->last = p->elapsed;
    }
}

void warn_foreign(const char *data, const char *model, double loss, double acc)
{
    char line[HP_ERR_MSG_MAX];
    hp_foreign_warning(line, sizeof line, data, model, loss, acc);
    fprintf(stderr, "headprune: warning: %s\n", line);
}

const char *dropped_note(const struct hp_data *d)
{
    static char buf[160];
    if (d->n_dropped <= 0)
        return "";
    snprintf(buf, sizeof buf, "; %lld tokens of text left out to fit the rows (a longer --seq-len keeps more)",
             (long long)d->n_dropped);
    return buf;
}

// --- table output -------------------------------------------------------------------

static void csv_cell(const char *c)
{
    if (!c)
        return;
    if (strpbrk(c, ",\"\n")) {
        putchar('"');
        for (; *c; c++) {
            if (*c == '"')
                putchar('"');
            putchar(*c);
        }
        putchar('"');
    } else {
        fputs(c, stdout);
    }
}

/*
 * The summary rows (hp_table's n_summary: a rank correlation, a mean over every unit) are no unit: JSON holds
 * them apart, {"rows": [...], "summary": [...]}, so a reader of "rows" gets units only; CSV, one table a reader
 * takes whole, leaves them out; the aligned table shows them last, as they read.
 */
void print_table(const struct hp_table *t, enum fmt f)
{
    const int n_units = t->n_rows - t->n_summary;
    if (f == FMT_JSON) {
        char *s = hp_table_json(t);
        puts(s ? s : "null");
        free(s);
        return;
    }
    if (f == FMT_CSV) {
        for (int c = 0; c < t->n_cols; c++) {
            if (c)
                putchar(',');
            csv_cell(t->cols[c]);
        }
        putchar('\n');
        for (int r = 0; r < n_units; r++) {
            for (int c = 0; c < t->n_cols; c++) {
                char buf[32];
                if (c)
                    putchar(',');
                csv_cell(hp_table_cell_full(t, (size_t)r * t->n_cols + c, buf, sizeof buf));
            }
            putchar('\n');
        }
        return;
    }
    int *w = calloc((size_t)t->n_cols, sizeof *w);
    for (int c = 0; c < t->n_cols; c++) {
        w[c] = (int)strlen(t->cols[c]);
        for (int r = 0; r < t->n_rows; r++) {
            const char *v = t->cells[(size_t)r * t->n_cols + c];
            if (v && (int)strlen(v) > w[c])
                w[c] = (int)strlen(v);
        }
    }
    if (t->note)
        printf("# %s\n", t->note);
    for (int c = 0; c < t->n_cols; c++) {
        if (c == t->n_cols - 1 && !t->numeric[c])
            printf("%s%s", c ? "  " : "", t->cols[c]);
        else
            printf(t->numeric[c] ? "%s%*s" : "%s%-*s", c ? "  " : "", w[c], t->cols[c]);
    }
    putchar('\n');
    for (int c = 0; c < t->n_cols; c++) {
        printf("%s", c ? "  " : "");
        for (int i = 0; i < w[c]; i++)
            putchar('-');
    }
    putchar('\n');
    for (int r = 0; r < t->n_rows; r++) {
        for (int c = 0; c < t->n_cols; c++) {
            const char *v = t->cells[(size_t)r * t->n_cols + c];
            if (c == t->n_cols - 1 && !t->numeric[c])
                printf("%s%s", c ? "  " : "", v ? v : "");
            else
                printf(t->numeric[c] ? "%s%*s" : "%s%-*s", c ? "  " : "", w[c], v ? v : "");
        }
        putchar('\n');
    }
    free(w);
}

bool parse_format(const char *s, enum fmt *f)
{
    if (strcmp(s, "table") == 0)
        *f = FMT_TABLE;
    else if (strcmp(s, "csv") == 0)
        *f = FMT_CSV;
    else if (strcmp(s, "json") == 0)
        *f = FMT_JSON;
    else
        return false;
    return true;
}

const char *pruned_note(const struct hp_model_info *in)
{
    static char buf[64];
    if (!in->n_pruned)
        return "";
    snprintf(buf, sizeof buf, "; %d head%s pruned", in->n_pruned, in->n_pruned == 1 ? "" : "s");
    return buf;
}
