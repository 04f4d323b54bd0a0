/*
 * roles.c -- `headprune roles`: what each head of one model attends to on
 * held-out data (hp_roles_compute), one row per head.
 */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const char roles_help[] =
    "Usage: headprune roles --model DIR --data FILE [options]\n"
    "\n"
    "What each attention head does, from its attention probabilities in one\n"
    "unmasked pass over held-out data and one over a probe of random tokens\n"
    "repeated twice. One row per head (query heads, also under GQA):\n"
    "\n"
    "  prev_token        mean attention to the previous position\n"
    "  duplicate_token   mean attention to earlier occurrences of the query's\n"
    "                    token (encoders: to its other occurrences), over queries\n"
    "                    that have one\n"
    "  induction         probe: mean attention to the token after the earlier\n"
    "                    occurrence of the query's token (Olsson et al.'s prefix\n"
    "                    matching)\n"
    "  induction_offset  probe: the offset from that earlier occurrence, -4..4,\n"
    "  induction_mass    with the most attention (1 = the induction target), and\n"
    "                    its mean attention; the offset is left empty where that\n"
    "                    mass is below 0.05 (HP_ROLES_OFFSET_MIN_MASS): noise\n"
    "  first_token       mean attention to the sequence's first position\n"
    "                    (attention sinks)\n"
    "  dominant_offset   the relative position (key - query; encoders both\n"
    "  dominant_mass     directions) holding the largest share of the attention,\n"
    "                    and that share\n"
    "  entropy           mean attention entropy, bits\n"
    "  rare_token        encoders: mean attention to the sequence's least\n"
    "                    frequent token (frequencies counted over the data)\n"
    "  sep_token         mean attention to the sequence's [SEP] tokens (Clark et\n"
    "                    al. 2019), from queries that are no [SEP]; only for a\n"
    "                    model with one (config.json's sep_token_id, else its\n"
    "                    tokenizer's [SEP])\n"
    "\n"
    "Every score is a mean over queries (each query of the set weighted alike);\n"
    "padding is neither a query nor a key; in a causal model the first position is\n"
    "no query (it sees only itself). An empty cell (null in JSON): no query\n"
    "qualifies. docs/roles.md defines each exactly.\n";

/* A score as the table shows it: empty when undefined. */
static void cell(char *buf, size_t n, double v)
{
    if (isnan(v))
        buf[0] = 0, (void)n;
    else
        snprintf(buf, n, "%.6f", v == 0.0 ? 0.0 : v);
}

static void json_num(cJSON *o, const char *key, double v)
{
    if (isnan(v))
        cJSON_AddNullToObject(o, key);
    else
        cJSON_AddNumberToObject(o, key, v);
}

static void print_json(const char *dir, const char *data, const struct hp_roles *r, double secs)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", dir);
    cJSON_AddStringToObject(o, "data", data);
    cJSON_AddNumberToObject(o, "n_layers", r->n_layers);
    cJSON_AddNumberToObject(o, "n_heads", r->n_heads);
    cJSON_AddBoolToObject(o, "causal", r->causal);
    cJSON_AddNumberToObject(o, "n_seqs", r->n_seqs);
    cJSON_AddNumberToObject(o, "seq_len", r->seq_len);
    cJSON *p = cJSON_AddObjectToObject(o, "probe");
    cJSON_AddNumberToObject(p, "seqs", r->probe_seqs);
    cJSON_AddNumberToObject(p, "len", r->probe_len);
    char seed[32];
    snprintf(seed, sizeof seed, "0x%llx", (unsigned long long)r->probe_seed);
    cJSON_AddStringToObject(p, "seed", seed);
    cJSON *q = cJSON_AddObjectToObject(o, "queries");
    cJSON_AddNumberToObject(q, "all", (double)r->n_queries);
    cJSON_AddNumberToObject(q, "prev_token", (double)r->n_prev);
    cJSON_AddNumberToObject(q, "duplicate_token", (double)r->n_duplicate);
    cJSON_AddNumberToObject(q, "first_token", (double)r->n_first);
    cJSON_AddNumberToObject(q, "induction", (double)r->n_induction);
    json_num(q, "sep_token", r->sep_id >= 0 ? (double)r->n_sep : NAN);
    json_num(o, "sep_id", r->sep_id >= 0 ? r->sep_id : NAN);
    cJSON *hs = cJSON_AddArrayToObject(o, "heads");
    for (int l = 0; l < r->n_layers; l++)
        for (int h = 0; h < r->n_heads; h++) {
            const struct hp_head_roles *x = &r->heads[l * r->n_heads + h];
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "layer", l);
            cJSON_AddNumberToObject(e, "head", h);
            cJSON_AddBoolToObject(e, "present", x->present);
            json_num(e, "prev_token", x->prev_token);
            json_num(e, "duplicate_token", x->duplicate_token);
            json_num(e, "induction", x->induction);
            json_num(e, "induction_offset", x->present && hp_roles_offset_shown(x->induction_mass) ? x->induction_offset : NAN);
            json_num(e, "induction_mass", x->induction_mass);
            json_num(e, "first_token", x->first_token);
            json_num(e, "dominant_offset", x->present ? x->dominant_offset : NAN);
            json_num(e, "dominant_mass", x->dominant_mass);
            json_num(e, "entropy", x->entropy);
            json_num(e, "rare_token", x->rare_token);
            json_num(e, "sep_token", x->sep_token);
            cJSON_AddItemToArray(hs, e);
        }
    cJSON_AddNumberToObject(o, "seconds", secs);
    char *s = cJSON_PrintUnformatted(o);
    puts(s);
    free(s);
    cJSON_Delete(o);
}

static void print_rows(const struct hp_roles *r)
{
    const bool rare = !r->causal, sep = r->sep_id >= 0;
    printf("%-6s %10s %15s %9s %16s %14s %11s %15s %13s %7s%s%s\n", "head", "prev_token", "duplicate_token",
           "induction", "induction_offset", "induction_mass", "first_token", "dominant_offset", "dominant_mass",
           "entropy", rare ? "  rare_token" : "", sep ? "  sep_token" : "");
    for (int l = 0; l < r->n_layers; l++)
        for (int h = 0; h < r->n_heads; h++) {
            const struct hp_head_roles *x = &r->heads[l * r->n_heads + h];
            char label[32], c[9][32];
            cell(c[8], sizeof c[8], x->sep_token);
            snprintf(label, sizeof label, "%d.%d", l, h);
            if (!x->present) {
                printf("%-6s (pruned: the checkpoint lacks it)\n", label);
                continue;
            }
            cell(c[0], sizeof c[0], x->prev_token);
            cell(c[1], sizeof c[1], x->duplicate_token);
            cell(c[2], sizeof c[2], x->induction);
            cell(c[3], sizeof c[3], x->induction_mass);
            cell(c[4], sizeof c[4], x->first_token);
            cell(c[5], sizeof c[5], x->dominant_mass);
            cell(c[6], sizeof c[6], x->entropy);
            cell(c[7], sizeof c[7], x->rare_token);
            char ioff[16] = "";
            if (hp_roles_offset_shown(x->induction_mass))
                snprintf(ioff, sizeof ioff, "%d", x->induction_offset);
            printf("%-6s %10s %15s %9s %16s %14s %11s %15d %13s %7s", label, c[0], c[1], c[2], ioff, c[3], c[4],
                   x->dominant_offset, c[5], c[6]);
            if (rare)
                printf("  %10s", c[7]);
            if (sep)
                printf("  %9s", c[8]);
            putchar('\n');
        }
}

int cmd_roles(int argc, char **argv)
{
    const char *dir = NULL, *data_path = NULL;
    bool json = false, quiet = false;
    int seq_len = 0, threads = 0;
    struct hp_roles_opts ro = {0};
    const struct opt opts[] = {
        OPT_MODEL(&dir, "Hugging Face model directory"),
        OPT_DATA(&data_path),
        OPT_SEQ_LEN(&seq_len),
        OPT_INT("probe-seqs", 0, &ro.probe_seqs, "N", 1, 1 << 20, "probe sequences (default 16)"),
        OPT_INT("probe-len", 0, &ro.probe_len, "N", 1, 1 << 20,
                "random tokens a half (default 32, at most half the model's positions; at least 8); the probe's "
                "seed is fixed"),
        OPT_THREADS(&threads, THREADS_HELP),
        OPT_JSON(&json, "one JSON object: the model, data, probe, the queries each score averages over, and "
                        "\"heads\", one object a head"),
        OPT_QUIET(&quiet, "no progress on stderr"),
        OPT_END(),
    };
    const struct cmd_help h = {.name = "roles", .usage = roles_help, .opts = opts};
    int n_args, c = parse_options(&h, argc, argv, &n_args);
    if (c >= 0)
        return c;
    if (n_args)
        return usage_error("roles", "unexpected argument");
    if (!dir || !data_path)
        return usage_error("roles", "--model DIR and --data FILE are required");

    struct hp_threads_run thr;
    hp_threads_run_begin(&thr, threads);
    struct hp_error err = {0};
    struct hp_model *m = NULL;
    struct hp_data *d = NULL;
    struct hp_roles *r = NULL;
    int rc = 1;
    if (hp_model_open(dir, &m, &err) != HP_OK)
        goto out;
    const struct hp_model_info *in = hp_model_get_info(m);
    if (hp_data_load_for(data_path, dir, in, seq_len, &d, &err) != HP_OK)
        goto out;
    struct progress pr = progress_start(quiet, &thr);
    ro.progress = show_progress;
    ro.user = &pr;
    double t0 = hp_now();
    if (hp_roles_compute(m, d, &ro, &r, &err) != HP_OK)
        goto out;
    double secs = hp_now() - t0;
    if (json) {
        print_json(dir, data_path, r, secs);
    } else {
        printf("model     %s (%s, %d layers x %d heads, %d KV heads%s)\n", dir, in->model_type, in->n_layers,
               in->n_heads, in->n_kv_heads, pruned_note(in));
        printf("data      %s: %d sequences x %d tokens%s\n", data_path, d->n_seqs, d->seq_len, dropped_note(d));
        printf("probe     %d sequences of 2 x %d random tokens (seed 0x%llx)\n", r->probe_seqs, r->probe_len,
               (unsigned long long)r->probe_seed);
        char sep_note[64] = "";
        if (r->sep_id >= 0)
            snprintf(sep_note, sizeof sep_note, ", sep_token %lld ([SEP] = id %d)", (long long)r->n_sep, (int)r->sep_id);
        printf("queries   %lld (prev_token %lld, duplicate_token %lld, first_token %lld%s; induction %lld on the "
               "probe)\n", (long long)r->n_queries, (long long)r->n_prev, (long long)r->n_duplicate,
               (long long)r->n_first, sep_note, (long long)r->n_induction);
        printf("time      %.2f s, %d thread%s\n\n", secs, thr.threads_max, thr.threads_max == 1 ? "" : "s");
        print_rows(r);
    }
    rc = 0;
out:
    if (rc)
        die(&err);
    hp_roles_free(r);
    hp_data_free(d);
    hp_model_close(m);
    return rc;
}
