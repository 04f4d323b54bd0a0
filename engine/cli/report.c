/*
 * report.c -- `headprune report`: a sweep of a results database as one
 * self-contained HTML file of figures (hp_report_write), and each figure as
 * its own SVG file on request.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char report_help[] =
    "Usage: headprune report --db FILE --out REPORT.html [options]\n"
    "\n"
    "Write a sweep of a results database (opened read-only) as one HTML file that\n"
    "needs nothing else: open it in any browser, offline, or mail it. It loads\n"
    "nothing (no scripts, fonts or images from anywhere); the figures are inline\n"
    "SVG, labelled with units, in colour-blind-safe palettes, and every mark's\n"
    "numbers are in its tooltip. Each figure is read through the query that prints\n"
    "the same numbers as a table (its caption names it), in one snapshot of the\n"
    "database, so a sweep may be writing meanwhile.\n"
    "\n"
    "Figures, when the sweep has the study that produces them (else one line in\n"
    "the report says which study would):\n"
    "  single-head effects  layers x heads heatmap of each head's effect when\n"
    "                       ablated alone (single), a diverging colour scale\n"
    "                       centred on 0, a dot where the paired 95% CI excludes 0;\n"
    "                       the same for KV groups (single: {kv: true}) on a model\n"
    "                       with grouped-query attention\n"
    "  pruning curves       the metric against % of heads pruned: iterative\n"
    "                       studies (exact-, gradient- or estimate-ranked), random\n"
    "                       studies with their 95% band, gates studies, the baseline\n"
    "  redundancy           per layer, side by side: units costing less than --eps\n"
    "                       alone (default 0.01), the effect of removing the layer's\n"
    "                       attention (layer), of keeping only its best unit (only)\n"
    "  pair interactions    for each layer with a pairs study, the matrix of\n"
    "                       I = D(a and b) - D(a) - D(b)\n"
    "  roles against effect for a roles study, a scatter per role score (query\n"
    "                       roles) against each head's single-head effect, with\n"
    "                       the Spearman rho; the heatmap's tooltips give the scores\n"
    "and what was run: model, data, plan and its text, ablation, metric, engine and\n"
    "numeric versions, BLIS kernels, threads, hosts and dates.\n"
    "\n"
    "Heatmap and pair-matrix cells print their values where they fit, so a\n"
    "printed page reads without hovering; --scale chooses how values map to colour.\n";

static const char report_tail[] =
    "Prints the report's path. A database that is missing, damaged or not\n"
    "headprune's, an unknown sweep, or an output that cannot be written is one\n"
    "line on stderr and exit status 1, with nothing written.\n";

static const char *const scale_choices[] = {"log", "linear", NULL}; /* in the order of HP_REPORT_SCALE_* */

int cmd_report(int argc, char **argv)
{
    struct hp_report_opts o = {.eps = 0.01};
    int sweep = 0;
    const struct opt opts[] = {
        OPT_DB(&o.db_path, "the results database (`headprune run` writes it)"),
        OPT_SWEEP(&sweep),
        OPT_OUT(&o.out, 'o', "FILE", "the HTML file to write; replaced whole or not at all"),
        OPT_PATH("svg", 'g', &o.svg_dir, "DIR",
                 "also write each figure as DIR/<figure>.svg (heatmap.svg, heatmap-kv.svg, curves.svg, "
                 "redundancy.svg, pairs-layer<L>.svg, roles.svg), for papers; DIR is made if missing"),
        OPT_EPS(&o.eps, "redundancy threshold, as `query redundancy --eps`"),
        OPT_CHOICE("scale", 0, &o.scale, NULL, scale_choices,
                   "the colour scale of effects, interactions and patching: log (default), symmetric-log, so "
                   "that effects 1000 times smaller than the largest still show; linear, so that a colour's "
                   "depth is the value's share of the largest and small values stay pale"),
        OPT_TIMEOUT(&o.timeout_s, 't', TIMEOUT_HELP),
        OPT_END(),
    };
    const struct cmd_help h = {.name = "report", .usage = report_help, .opts = opts, .tail = report_tail};
    int n_args, rc = parse_options(&h, argc, argv, &n_args);
    if (rc >= 0)
        return rc;
    o.sweep_id = sweep;
    if (n_args)
        return usage_error("report", "unexpected argument (every input is an option: --db, --out, ...)");
    if (!o.db_path)
        return usage_error("report", "--db FILE is required");
    if (!o.out)
        return usage_error("report", "--out FILE is required (the HTML file to write)");

    struct hp_error err = {0};
    struct hp_report_summary sum;
    if (hp_report_write(&o, &sum, &err) != HP_OK)
        return die(&err);
    printf("%s\n", o.out);
    fprintf(stderr, "%s: report of sweep %lld: %d figure%s, %d left out (the report says which study would draw "
                    "each)%s%s%s\n",
            prog, (long long)sum.sweep_id, sum.n_figures, sum.n_figures == 1 ? "" : "s", sum.n_left_out,
            o.svg_dir ? "; SVG files in " : "", o.svg_dir ? o.svg_dir : "", o.svg_dir ? "/" : "");
    return 0;
}
