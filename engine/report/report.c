/*
 * report.c -- one self-contained HTML file (and, on request, one SVG file a
 * figure) showing a sweep of a results database: the layers x heads heatmap
 * of single-head effects (and of KV groups), the pruning curves, per-layer
 * redundancy, pair interaction matrices, head roles against effects, and
 * what was run.
 *
 * Where the numbers come from: the queries, through one reader (one
 * snapshot; query.h). A heatmap cell is a row of `query heads`, a curve
 * point a row of `query curve`, a bar a cell of `query redundancy`, a matrix
 * cell a row of `query pairs`, a roles point a row of `query roles` (and a
 * panel's rank correlation its last row), each drawn from the number its
 * table cell holds and labelled with that cell's text (data-* attributes and
 * the tooltip), so the figures and the tables never disagree and nothing
 * here computes an effect or a correlation.
 *
 * The figures are a list (figure_kinds below): each entry draws its figures
 * when the sweep has the study that produces them and otherwise leaves one
 * line saying which study would; entries that do not apply to the model (KV
 * groups without grouped-query attention) leave nothing. A new figure is one
 * function (in a report_*.c file of the family, declared in report.h)
 * and one row.
 *
 * This file is the family's entry (report.h says how the files fit):
 * the list of figures, the table of what was run, the page, and the files
 * written whole or not at all. The figures are drawn in report_effects.c,
 * report_curves.c and report_roles.c, from what report_parts.c reads.
 *
 * Invariants: every string read from the database goes through
 * hp_text_escape before it reaches the output; the page loads nothing (no
 * script at all; a Content-Security-Policy of default-src 'none' with inline
 * styles only); every file is written to a temporary file in its folder and
 * renamed over its name once everything is written, so an error leaves
 * nothing half-written. The output depends on the database alone (no clock,
 * no host), so a report can be compared with another.
 *
 * Must not: write to the database, compute effects, intervals or
 * interactions itself (the queries do), print, or exit.
 */
#define _POSIX_C_SOURCE 200809L

#include "report.h"

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// --- the figures, in the order the page shows them -------------------------------------

static const struct figure_kind {
    const char *id;    // the section's anchor
    const char *title; // its heading
    enum hp_status (*make)(struct report *r, struct section *sec);
} figure_kinds[] = {
    {"heatmap", "Single-head effects", hr_make_heatmap},
    {"heatmap-kv", "Single KV-group effects", hr_make_heatmap_kv},
    {"curves", "Pruning curves", hr_make_curves},
    {"redundancy", "Redundancy per layer", hr_make_redundancy},
    {"pairs", "Pair interactions", hr_make_pairs},
    {"roles", "Roles against effect", hr_make_roles},
    {"estimates", "Estimates against exact effects", hr_make_estimates},
    {"patching", "Activation patching by position", hr_make_patching},
    {"self-repair", "Direct against total effects", hr_make_self_repair},
    {"circuit", "Circuits", hr_make_circuit},
};
#define N_KINDS ((int)(sizeof figure_kinds / sizeof *figure_kinds))

// --- what was run ----------------------------------------------------------------

// A row of the table: its heading and the escaped text of the fields given, joined by sep.
static void run_row(struct hp_text *h, const char *head, const char *text)
{
    hp_text_printf(h, "<tr><th>%s</th><td>", head);
    hp_text_escape(h, text);
    hp_text_add(h, "</td></tr>\n");
}

/* A row whose text holds paths, as long as they are: built in a text of its own, then escaped. */
static void run_row_paths(struct hp_text *h, const char *head, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void run_row_paths(struct hp_text *h, const char *head, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *text = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!text) {
        h->nomem = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(text, (size_t)n + 1, fmt, ap);
    va_end(ap);
    run_row(h, head, text);
    free(text);
}

static void run_section(const struct report *r, struct hp_text *h)
{
    char buf[1024];
    hp_text_add(h, "<section id=\"run\">\n<h2>What was run</h2>\n<table class=\"run\">\n");
    snprintf(buf, sizeof buf, "%s (sweep %s), started %s, last written %s", hr_info_text(r, "sweep_name"),
             hr_info_text(r, "sweep_id"), hr_info_text(r, "sweep_created"), hr_info_text(r, "sweep_updated"));
    run_row(h, "Sweep", buf);
    run_row(h, "Database", r->o->db_path);
    run_row_paths(h, "Model", "%s (%s): %d layers x %d heads, %s KV heads, d_head %s, %s parameters",
                  hr_info_text(r, "model_path"), hr_info_text(r, "model_type"), r->n_layers, r->n_heads,
                  hr_info_text(r, "n_kv_heads"), hr_info_text(r, "d_head"), hr_info_text(r, "n_params"));
    run_row(h, "Model digest", hr_info_text(r, "model_digest"));
    run_row_paths(h, "Data", "%s: %s sequences of %s tokens", hr_info_text(r, "data_path"), hr_info_text(r, "n_seqs"),
                  hr_info_text(r, "seq_len"));
    run_row(h, "Data digest", hr_info_text(r, "data_digest"));
    run_row_paths(h, "Plan", "%s (%s; digest %s)", hr_info_text(r, "plan_name"), hr_info_text(r, "plan_path"),
                  hr_info_text(r, "plan_digest"));
    run_row(h, "Ablation", hr_info_text(r, "ablation"));
    snprintf(buf, sizeof buf, "%s (%s); baseline %s", hr_info_text(r, "metric"), hp_metric_effect_text(r->m),
             hr_info_text(r, "baseline"));
    run_row(h, "Metric", buf);
    snprintf(buf, sizeof buf, "%s finished variants, evaluated %s to %s, %.1f s of evaluation in all",
             hr_info_text(r, "results"), hr_info_text(r, "first_result"), hr_info_text(r, "last_result"),
             isfinite(hr_info_num(r, "wall_s")) ? hr_info_num(r, "wall_s") : 0.0);
    run_row(h, "Results", buf);
    run_row(h, "Engine version", hr_info_text(r, "engine_versions"));
    run_row(h, "Numeric version", hr_info_text(r, "numeric_versions"));
    run_row(h, "BLIS kernel", hr_info_text(r, "kernels"));
    if (strcmp(hr_info_text(r, "threads_min"), hr_info_text(r, "threads_max")) == 0) // one count: "2", not "2 to 2"
        snprintf(buf, sizeof buf, "%s", hr_info_text(r, "threads_min"));
    else
        snprintf(buf, sizeof buf, "%s to %s", hr_info_text(r, "threads_min"), hr_info_text(r, "threads_max"));
    run_row(h, "Threads", buf);
    run_row(h, "Hosts", hr_info_text(r, "hosts"));
    hp_text_add(h, "</table>\n<h3>Studies</h3>\n<table class=\"run\">\n<tr><th>study</th><th>kind</th><th>units</th>"
                   "<th>jobs</th></tr>\n");
    const struct hp_table *t = r->studies;
    for (int i = 0; i < t->n_rows; i++) {
        hp_text_add(h, "<tr><td>");
        hp_text_escape(h, tcell(t, i, tcol(t, "study")));
        hp_text_add(h, "</td><td>");
        hp_text_escape(h, tcell(t, i, tcol(t, "kind")));
        if (*tcell(t, i, tcol(t, "rank"))) {
            hp_text_add(h, ", ");
            hp_text_escape(h, tcell(t, i, tcol(t, "rank")));
            hp_text_add(h, "-ranked");
        }
        hp_text_printf(h, "</td><td>%s</td><td>", hp_unit_name((enum hp_unit_kind)tint(t, i, tcol(t, "kv")), true));
        hp_text_escape(h, tcell(t, i, tcol(t, "jobs")));
        hp_text_add(h, "</td></tr>\n");
    }
    // roles studies run no job: one unmasked pass each (studies lists those that run jobs or score units)
    for (int i = 0; r->role_studies && i < r->role_studies->n_rows; i++) {
        hp_text_add(h, "<tr><td>");
        hp_text_escape(h, tcell(r->role_studies, i, 0));
        hp_text_add(h, "</td><td>roles</td><td>heads</td><td>none (one unmasked pass)</td></tr>\n");
    }
    hp_text_add(h, "</table>\n<h3>Plan</h3>\n<pre class=\"plan\">");
    hp_text_escape(h, hr_info_text(r, "plan_text"));
    hp_text_add(h, "</pre>\n</section>\n");
}

// --- the page ----------------------------------------------------------------------

static const char STYLE[] =
    "body{font:15px/1.45 system-ui,'Segoe UI',Roboto,'DejaVu Sans',Arial,sans-serif;color:#222;"
    "max-width:1000px;margin:0 auto;padding:0 16px 48px;background:#fff}\n"
    "h1{font-size:1.5em;margin:1em 0 .2em}h2{font-size:1.2em;margin:2em 0 .4em;padding-bottom:.2em;"
    "border-bottom:1px solid #ddd}h3{font-size:1em;margin:1.4em 0 .4em}\n"
    "p{margin:.4em 0}.lead{color:#444}.source{color:#555;font-size:.9em}.note{color:#555;font-style:italic}\n"
    "code{font-family:ui-monospace,'DejaVu Sans Mono',monospace;font-size:.9em;background:#f3f3f3;"
    "padding:0 3px;border-radius:3px;overflow-wrap:anywhere}\n"
    "svg.figure{display:block;max-width:100%;height:auto;margin:.6em 0}\n"
    ".figs{display:flex;flex-wrap:wrap;gap:8px 24px;align-items:flex-start}\n"
    "nav ul{padding-left:1.2em;margin:.3em 0}nav li.left-out{color:#777}\n"
    "table.run{border-collapse:collapse;font-size:.92em;width:100%}table.run th,table.run td{text-align:left;"
    "vertical-align:top;padding:3px 10px 3px 0;border-bottom:1px solid #eee;overflow-wrap:anywhere}"
    "table.run th{white-space:nowrap;font-weight:600;width:11em}\n"
    "pre.plan{background:#f6f6f6;padding:10px;font-size:.85em;white-space:pre-wrap;overflow-wrap:anywhere}\n";

static void page(struct report *r, const struct section *secs, struct hp_text *h)
{
    const char *name = hr_info_text(r, "sweep_name");
    hp_text_add(h, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                   "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
                   "style-src 'unsafe-inline'\">\n"
                   "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
                   "<meta name=\"generator\" content=\"headprune " HP_VERSION "\">\n<title>headprune report: ");
    hp_text_escape(h, name);
    hp_text_printf(h, " (sweep %lld)</title>\n<style>\n%s</style>\n</head>\n<body>\n<header>\n<h1>headprune report: ",
                   r->sweep, STYLE);
    hp_text_escape(h, name);
    hp_text_printf(h, "</h1>\n<p class=\"lead\">Sweep %lld of <code>", r->sweep);
    hp_text_escape(h, r->o->db_path);
    hp_text_add(h, "</code>: <code>");
    hp_text_escape(h, hr_info_text(r, "model_path"));
    hp_text_printf(h, "</code> (%d layers x %d heads) on <code>", r->n_layers, r->n_heads);
    hp_text_escape(h, hr_info_text(r, "data_path"));
    hp_text_add(h, "</code>, ");
    hp_text_escape(h, hr_info_text(r, "ablation"));
    hp_text_printf(h, " ablation, measured by %s (baseline ", r->mname);
    hp_text_escape(h, hr_info_text(r, "baseline"));
    hp_text_printf(h, " %s). Hover a figure's marks for their numbers.</p>\n</header>\n<nav>\n<ul>\n", r->unit);
    for (int k = 0; k < N_KINDS; k++) {
        if (secs[k].not_applicable)
            continue;
        bool drawn = secs[k].n_figs > 0;
        hp_text_printf(h, "<li%s><a href=\"#%s\">%s</a>%s</li>\n", drawn ? "" : " class=\"left-out\"",
                       figure_kinds[k].id, figure_kinds[k].title, drawn ? "" : " (left out)");
    }
    hp_text_add(h, "<li><a href=\"#run\">What was run</a></li>\n</ul>\n</nav>\n<main>\n");
    for (int k = 0; k < N_KINDS; k++) {
        const struct section *sec = &secs[k];
        if (sec->not_applicable)
            continue;
        hp_text_printf(h, "<section id=\"%s\">\n<h2>%s</h2>\n", figure_kinds[k].id, figure_kinds[k].title);
        if (sec->n_figs == 0) {
            hp_text_printf(h, "<p class=\"note left-out\">%s</p>\n</section>\n", sec->note.s ? sec->note.s : "");
            continue;
        }
        if (sec->caption.s)
            hp_text_add(h, sec->caption.s);
        hp_text_add(h, "<div class=\"figs\">\n");
        for (int i = sec->fig0; i < sec->fig0 + sec->n_figs; i++)
            if (r->figs[i].svg.s)
                hp_text_add(h, r->figs[i].svg.s);
        hp_text_add(h, "</div>\n</section>\n");
    }
    run_section(r, h);
    hp_text_add(h, "</main>\n<footer>\n<p class=\"source\">Written by headprune " HP_VERSION
                   " from the database alone; this page loads nothing: no scripts, fonts or images.</p>\n"
                   "</footer>\n</body>\n</html>\n");
}

// --- files: written whole or not at all ---------------------------------------------------

// A file staged beside its destination: written and synced to tmp, not yet renamed.
struct staged {
    char *dst, *tmp;
};

static void unstage(struct staged *f, int n)
{
    for (int i = 0; i < n; i++) {
        if (f[i].tmp)
            unlink(f[i].tmp);
        free(f[i].dst), free(f[i].tmp);
        f[i].dst = f[i].tmp = NULL;
    }
}

// The folder of path, a fresh string (free() it), NULL when out of memory.
static char *folder_of(const char *path)
{
    char *tmp = strdup(path), *dir = tmp ? strdup(dirname(tmp)) : NULL;
    free(tmp);
    return dir;
}

static enum hp_status write_fail(const char *path, int e, struct hp_error *err)
{
    char *d = folder_of(path);
    enum hp_status st;
    if (!d)
        st = hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
    else if (e == ENOENT || e == ENOTDIR)
        st = hp_fail(err, HP_ERR_IO, "%s: folder '%s' does not exist (create it first)", path, d);
    else if (e == EACCES || e == EPERM || e == EROFS)
        st = hp_fail(err, HP_ERR_IO, "%s: cannot write in folder '%s' (%s; choose another place)", path, d,
                     hp_strerror(e));
    else if (e == ENOSPC || e == EFBIG || e == EDQUOT)
        st = hp_fail(err, HP_ERR_IO, "%s: cannot write (%s; nothing was written)", path, hp_strerror(e));
    else
        st = hp_fail(err, HP_ERR_IO, "%s: cannot write (%s)", path, hp_strerror(e));
    free(d);
    return st;
}

/* Write n bytes of data to a new temporary file beside dst (made with the
 * mode a new file gets, 0666 less the umask) and sync it; *f then names both. */
static enum hp_status stage(const char *dst, const char *data, size_t n, struct staged *f, struct hp_error *err)
{
    static unsigned counter;
    f->dst = strdup(dst);
    size_t len = strlen(dst) + 64;
    f->tmp = malloc(len);
    if (!f->dst || !f->tmp) {
        free(f->dst), free(f->tmp);
        f->dst = f->tmp = NULL;
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", dst);
    }
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 100; tries++) {
        snprintf(f->tmp, len, "%s.tmp-%ld-%u", dst, (long)getpid(), counter++);
        fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        int e = errno;
        free(f->tmp), free(f->dst);
        f->dst = f->tmp = NULL;
        return write_fail(dst, e, err);
    }
    size_t o = 0;
    int e = 0;
    while (o < n) {
        ssize_t w = write(fd, data + o, n - o);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            e = w < 0 ? errno : EIO;
            break;
        }
        o += (size_t)w;
    }
    if (!e && fsync(fd) != 0 && errno != EINVAL && errno != EROFS)
        e = errno;
    if (close(fd) != 0 && !e)
        e = errno;
    if (e) {
        unlink(f->tmp);
        free(f->tmp), free(f->dst);
        f->dst = f->tmp = NULL;
        return write_fail(dst, e, err);
    }
    return HP_OK;
}

/* Rename every staged file onto its destination. A failure part-way leaves
 * whole files only: those renamed are complete, the rest are removed. */
static enum hp_status commit(struct staged *f, int n, struct hp_error *err)
{
    for (int i = 0; i < n; i++) {
        if (rename(f[i].tmp, f[i].dst) != 0) {
            enum hp_status s = write_fail(f[i].dst, errno, err);
            unstage(f + i, n - i);
            return s;
        }
        free(f[i].tmp);
        f[i].tmp = NULL;
    }
    unstage(f, n);
    return HP_OK;
}

// True when a and b name one existing file.
static bool same_file(const char *a, const char *b)
{
    struct stat x, y;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

// --out and --svg checked before the database is read: a mistake there costs no wait.
static enum hp_status check_outputs(const struct hp_report_opts *o, bool *made_dir, struct hp_error *err)
{
    *made_dir = false;
    struct stat sb;
    if (!*o->out)
        return hp_fail(err, HP_ERR_ARG, "report: the output path is empty (name a file)");
    if (stat(o->out, &sb) == 0 && S_ISDIR(sb.st_mode))
        return hp_fail(err, HP_ERR_IO, "%s: is a folder (name the HTML file to write)", o->out);
    if (same_file(o->out, o->db_path))
        return hp_fail(err, HP_ERR_ARG, "%s: is the database itself (write the report to another file)", o->out);
    char *d = folder_of(o->out);
    enum hp_status st = HP_OK;
    if (!d)
        st = hp_fail(err, HP_ERR_NOMEM, "report: out of memory");
    else if (stat(d, &sb) != 0 || !S_ISDIR(sb.st_mode))
        st = errno == ENAMETOOLONG ? write_fail(o->out, errno, err)
                                   : hp_fail(err, HP_ERR_IO, "%s: folder '%s' does not exist (create it first)", o->out, d);
    else if (access(d, W_OK) != 0)
        st = write_fail(o->out, errno, err);
    free(d);
    if (st != HP_OK)
        return st;
    if (!o->svg_dir)
        return HP_OK;
    if (!*o->svg_dir)
        return hp_fail(err, HP_ERR_ARG, "report: the SVG folder is empty (name a folder)");
    if (stat(o->svg_dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            return hp_fail(err, HP_ERR_IO, "%s: is not a folder (name a folder for the SVG files)", o->svg_dir);
        if (access(o->svg_dir, W_OK) != 0)
            return hp_fail(err, HP_ERR_IO, "%s: cannot write in this folder (%s; choose another)", o->svg_dir,
                           hp_strerror(errno));
        return HP_OK;
    }
    if (mkdir(o->svg_dir, 0777) != 0) {
        int e = errno;
        if ((e == ENOENT || e == ENOTDIR) && (d = folder_of(o->svg_dir))) {
            st = hp_fail(err, HP_ERR_IO, "%s: cannot make the SVG folder: folder '%s' does not exist (create it "
                         "first)", o->svg_dir, d);
            free(d);
            return st;
        }
        return hp_fail(err, HP_ERR_IO, "%s: cannot make the SVG folder (%s)", o->svg_dir, hp_strerror(e));
    }
    *made_dir = true;
    return HP_OK;
}

// --- entry -----------------------------------------------------------------------

// The sweep's shape, metric and baseline from what was run (the query checked their ranges).
static enum hp_status report_resolve(struct report *r)
{
    r->sweep = (long long)hr_info_num(r, "sweep_id");
    double L = hr_info_num(r, "n_layers"), H = hr_info_num(r, "n_heads"), K = hr_info_num(r, "n_kv_heads");
    r->n_layers = isfinite(L) ? (int)L : 0;
    r->n_heads = isfinite(H) ? (int)H : 0;
    r->n_kv_heads = isfinite(K) && K >= 1 && K <= H && fmod(H, K) == 0 ? (int)K : 0;
    r->base = hr_info_num(r, "baseline");
    if (r->n_layers < 1 || r->n_heads < 1 || !hp_metric_parse(hr_info_text(r, "metric"), &r->m))
        return hp_fail(r->err, HP_ERR_FORMAT, "%s: sweep %lld's model shape or metric is unreadable (a damaged "
                       "database?)", r->o->db_path, r->sweep);
    r->mname = hp_metric_name(r->m);
    r->unit = hp_metric_unit(r->m);
    return HP_OK;
}

enum hp_status hp_report_write(const struct hp_report_opts *o, struct hp_report_summary *sum, struct hp_error *err)
{
    if (sum)
        memset(sum, 0, sizeof *sum);
    if (!o || !o->db_path || !o->out)
        return hp_fail(err, HP_ERR_ARG, "report: a database and an output file are needed");
    if (!isfinite(o->eps) || o->eps < 0)
        return hp_fail(err, HP_ERR_ARG, "report: eps must be a finite number >= 0");
    if (o->sweep_id < 0)
        return hp_fail(err, HP_ERR_ARG, "report: a sweep id must be positive (0 = the newest)");
    bool made_dir = false;
    enum hp_status s = check_outputs(o, &made_dir, err);
    if (s != HP_OK)
        return s;

    struct report r = {.o = o, .err = err};
    struct section secs[N_KINDS];
    memset(secs, 0, sizeof secs);
    struct hp_text html = {0};
    struct staged *files = NULL;
    int n_files = 0;
    s = hp_query_reader_open(o->db_path, o->timeout_s, &r.rd, err);
    if (s == HP_OK)
        s = hp_query_run_info(r.rd, o->sweep_id, &r.info, err);
    if (s == HP_OK)
        s = report_resolve(&r);
    if (s == HP_OK)
        s = hp_query_studies(r.rd, r.sweep, &r.studies, err);
    for (int k = 0; k < N_KINDS && s == HP_OK; k++) {
        secs[k].fig0 = r.n_figs;
        s = figure_kinds[k].make(&r, &secs[k]);
        secs[k].n_figs = r.n_figs - secs[k].fig0;
    }
    // everything is read: the snapshot can go before the files are written
    hp_query_reader_close(r.rd);
    r.rd = NULL;
    if (s == HP_OK) {
        page(&r, secs, &html);
        bool nomem = r.nomem || html.nomem;
        for (int k = 0; k < N_KINDS; k++)
            nomem |= secs[k].caption.nomem || secs[k].note.nomem;
        for (int i = 0; i < r.n_figs; i++)
            nomem |= r.figs[i].svg.nomem || !r.figs[i].svg.s;
        if (nomem)
            s = hp_fail(err, HP_ERR_NOMEM, "report: out of memory");
    }
    if (s == HP_OK && !(files = calloc((size_t)r.n_figs + 1, sizeof *files)))
        s = hp_fail(err, HP_ERR_NOMEM, "report: out of memory");
    // each SVG as its own file (an XML declaration before the very element the page shows), then the page
    for (int i = 0; s == HP_OK && o->svg_dir && i < r.n_figs; i++) {
        struct hp_text one = {0};
        hp_text_add(&one, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        hp_text_add(&one, r.figs[i].svg.s);
        char *path = malloc(strlen(o->svg_dir) + strlen(r.figs[i].id) + 8);
        if (one.nomem || !path)
            s = hp_fail(err, HP_ERR_NOMEM, "report: out of memory");
        else {
            snprintf(path, strlen(o->svg_dir) + strlen(r.figs[i].id) + 8, "%s/%s.svg", o->svg_dir, r.figs[i].id);
            s = stage(path, one.s, one.n, &files[n_files], err);
            n_files += s == HP_OK;
        }
        free(path);
        hp_text_free(&one);
    }
    struct staged page_file = {0};
    if (s == HP_OK)
        s = stage(o->out, html.s, html.n, &page_file, err);
    if (s == HP_OK) {
        int n_svg = n_files;
        s = commit(files, n_files, err);
        n_files = 0;
        if (s == HP_OK)
            s = commit(&page_file, 1, err);
        else
            unstage(&page_file, 1);
        if (s == HP_OK && sum) {
            sum->sweep_id = r.sweep;
            sum->n_figures = r.n_figs;
            sum->n_svg = n_svg;
            for (int k = 0; k < N_KINDS; k++)
                sum->n_left_out += !secs[k].not_applicable && secs[k].n_figs == 0;
        }
    }
    if (files)
        unstage(files, n_files);
    free(files);
    if (s != HP_OK && made_dir)
        rmdir(o->svg_dir); // only when empty: it was made by this call
    hp_text_free(&html);
    for (int k = 0; k < N_KINDS; k++) {
        hp_text_free(&secs[k].caption);
        hp_text_free(&secs[k].note);
    }
    for (int i = 0; i < r.n_figs; i++)
        hp_text_free(&r.figs[i].svg);
    free(r.figs);
    hp_table_free(r.info);
    hp_table_free(r.studies);
    hp_table_free(r.role_studies);
    hp_table_free(r.roles);
    return s;
}

