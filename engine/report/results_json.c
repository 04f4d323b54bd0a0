/*
 * results_json.c -- the engine's results as JSON text: a query's table
 * (hp_table_json), a model's description (hp_model_info_json) and one
 * evaluation (hp_eval_json). The command line prints these and the Python
 * package parses them: one writer, so both give the same fields and the
 * same digits.
 *
 * Invariant: every finite number is written as the shortest text that reads
 * back to the same double; a number that is not finite is null.
 * Must not: print, or compute anything it writes.
 */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "headprune.h"
#include "metric.h" /* hp_metric_row: each metric's baseline rule */

// --- numbers --------------------------------------------------------------------------

/* x as the shortest of %.15g, %.16g and %.17g that reads back to x; "0" for either zero (no "-0"). */
static const char *shortest(double x, char *buf, size_t n)
{
    if (x == 0)
        x = 0.0;
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, n, "%.*g", digits, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    return buf;
}

/* key: x in full precision (null when not finite), added to o. */
static void add_num(cJSON *o, const char *key, double x)
{
    char buf[32];
    if (isfinite(x))
        cJSON_AddRawToObject(o, key, shortest(x, buf, sizeof buf));
    else
        cJSON_AddNullToObject(o, key);
}

static void push_num(cJSON *a, double x)
{
    char buf[32];
    cJSON_AddItemToArray(a, isfinite(x) ? cJSON_CreateRaw(shortest(x, buf, sizeof buf)) : cJSON_CreateNull());
}

static cJSON *num_array(const double *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++)
        push_num(a, v[i]);
    return a;
}

/* cJSON's text of o (indented or not), o deleted; NULL when anything ran out of memory. */
static char *finish(cJSON *o, bool indent)
{
    char *s = o ? (indent ? cJSON_Print(o) : cJSON_PrintUnformatted(o)) : NULL;
    cJSON_Delete(o);
    return s;
}

// --- tables ---------------------------------------------------------------------------

/* s is an integer as %lld or SQLite writes one: an optional '-', then digits. */
static bool integer_text(const char *s)
{
    s += *s == '-';
    if (!*s)
        return false;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return false;
    return true;
}

const char *hp_table_cell_full(const struct hp_table *t, size_t i, char *buf, size_t n)
{
    const char *v = t->cells[i];
    const double x = t->values[i];
    if (!v || !*v || !t->numeric[i % (size_t)t->n_cols] || !isfinite(x) || (integer_text(v) && strtod(v, NULL) == x))
        return v;
    return shortest(x, buf, n);
}

/* Rows r0..r1-1 of t as JSON objects, one key a column (empty cells null, and numbers that are not finite),
 * into the array a. */
static void json_rows(cJSON *a, const struct hp_table *t, int r0, int r1)
{
    for (int r = r0; a && r < r1; r++) {
        cJSON *o = cJSON_CreateObject();
        for (int c = 0; o && c < t->n_cols; c++) {
            const size_t i = (size_t)r * t->n_cols + c;
            const char *v = t->cells[i];
            char buf[32];
            if (!v || !*v || (t->numeric[c] && !isfinite(t->values[i])))
                cJSON_AddNullToObject(o, t->cols[c]);
            else if (t->numeric[c])
                cJSON_AddRawToObject(o, t->cols[c], hp_table_cell_full(t, i, buf, sizeof buf));
            else
                cJSON_AddStringToObject(o, t->cols[c], v);
        }
        cJSON_AddItemToArray(a, o);
    }
}

/*
 * The summary rows (hp_table's n_summary: a rank correlation, a mean over every unit) are no unit: JSON holds
 * them apart, {"rows": [...], "summary": [...]}, so a reader of "rows" gets units only.
 */
char *hp_table_json(const struct hp_table *t)
{
    const int n_units = t->n_rows - t->n_summary;
    cJSON *o = cJSON_CreateObject();
    if (o) {
        json_rows(cJSON_AddArrayToObject(o, "rows"), t, 0, n_units);
        json_rows(cJSON_AddArrayToObject(o, "summary"), t, n_units, t->n_rows);
    }
    return finish(o, true);
}

// --- a model ----------------------------------------------------------------------------

char *hp_model_info_json(const struct hp_model_info *in, const char *model, const char *tokenizer,
                         const char *tokenizer_error)
{
    char *pruned = hp_pruned_spec(in); /* a pruned checkpoint's missing heads */
    if (in->pruned && !pruned)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    if (o) {
        cJSON_AddStringToObject(o, "model", model);
        cJSON_AddStringToObject(o, "model_type", in->model_type);
        cJSON_AddStringToObject(o, "architecture", hp_arch_name(in->arch));
        cJSON_AddNumberToObject(o, "n_layers", in->n_layers);
        cJSON_AddNumberToObject(o, "n_heads", in->n_heads);
        cJSON_AddNumberToObject(o, "n_kv_heads", in->n_kv_heads);
        cJSON_AddNumberToObject(o, "d_head", in->d_head);
        cJSON_AddNumberToObject(o, "d_model", in->d_model);
        cJSON_AddNumberToObject(o, "d_ff", in->d_ff);
        cJSON_AddNumberToObject(o, "n_vocab", in->n_vocab);
        cJSON_AddNumberToObject(o, "n_ctx", in->n_ctx);
        if (in->window > 0)
            cJSON_AddNumberToObject(o, "window", in->window);
        if (in->window > 0 && in->sliding) {
            cJSON *ls = cJSON_AddArrayToObject(o, "window_layers");
            for (int l = 0; ls && l < in->n_layers; l++)
                if (in->sliding[l])
                    cJSON_AddItemToArray(ls, cJSON_CreateNumber(l));
        }
        if (in->attn_softcap > 0)
            cJSON_AddNumberToObject(o, "attn_softcap", in->attn_softcap);
        if (in->logit_softcap > 0)
            cJSON_AddNumberToObject(o, "logit_softcap", in->logit_softcap);
        cJSON_AddNumberToObject(o, "n_params", (double)in->n_params);
        cJSON_AddStringToObject(o, "dtype", in->dtype);
        cJSON_AddBoolToObject(o, "gguf", in->gguf);
        cJSON_AddBoolToObject(o, "causal", in->causal);
        cJSON_AddBoolToObject(o, "lm_head", in->has_lm_head);
        cJSON_AddNumberToObject(o, "n_pruned", in->n_pruned);
        cJSON_AddStringToObject(o, "pruned", pruned ? pruned : "");
        if (tokenizer)
            cJSON_AddStringToObject(o, "tokenizer", tokenizer);
        else
            cJSON_AddNullToObject(o, "tokenizer");
        if (tokenizer_error)
            cJSON_AddStringToObject(o, "tokenizer_error", tokenizer_error);
    }
    free(pruned);
    return finish(o, true);
}

// --- one evaluation ---------------------------------------------------------------------

/* o's fields, one a metric mt has, named by its row (ppl after loss): its value, or with base its change from
 * base's; variant_only: only the metrics measured against a baseline variant, not those against the unmasked
 * model already (kl, 0 there). */
static void add_metrics(cJSON *o, const struct hp_metrics *mt, const struct hp_metrics *base, bool variant_only)
{
    for (int k = 0; o && k < HP_N_METRICS; k++) {
        if (!mt->has[k] || (variant_only && hp_metric_row((enum hp_metric)k)->baseline != HP_BASELINE_VARIANT))
            continue;
        add_num(o, hp_metric_name((enum hp_metric)k), mt->value[k] - (base ? base->value[k] : 0));
        if (k == HP_METRIC_LOSS)
            add_num(o, "ppl", mt->ppl - (base ? base->ppl : 0));
    }
}

char *hp_eval_json(const struct hp_model_info *in, const struct hp_eval_opts *op, const struct hp_eval_result *r,
                   const char *model, const char *data)
{
    const struct hp_metrics *mt = r->mt, *base = r->base;
    const bool want_grad = r->grad != NULL;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "model", model);
    cJSON_AddStringToObject(o, "data", data);
    cJSON_AddStringToObject(o, "mask", op->mask ? op->mask : "");
    cJSON_AddBoolToObject(o, "keep", op->keep);
    cJSON_AddStringToObject(o, "edges", op->edges ? op->edges : "");
    cJSON_AddStringToObject(o, "circuit", op->circuit ? op->circuit : op->circuit_text ? "(given)" : "");
    cJSON_AddStringToObject(o, "ablation", hp_ablation_name(op->ablation));
    cJSON_AddNumberToObject(o, "n_ablated", r->n_ablated);
    cJSON_AddNumberToObject(o, "n_mlps", r->n_mlps); /* MLP blocks ablated, of n_layers */
    cJSON_AddNumberToObject(o, "n_edges", r->n_edges); /* edges patched */
    cJSON_AddNumberToObject(o, "n_heads_total", in->n_layers * in->n_heads);
    cJSON_AddNumberToObject(o, "n_heads_present", hp_heads_present(in));
    /* every metric the model has, by its row's name (ppl beside loss); the unmasked values and the change for
     * those measured against a baseline variant (kl is against the unmasked model already: 0 there) */
    add_metrics(o, mt, NULL, false);
    if (base) {
        add_metrics(cJSON_AddObjectToObject(o, "unmasked"), base, NULL, true);
        add_metrics(cJSON_AddObjectToObject(o, "change"), mt, base, true);
    }
    if (want_grad) {
        cJSON_AddStringToObject(o, "grad_metric", hp_metric_name(r->grad_metric));
        if (r->grad_vanishes)
            cJSON_AddStringToObject(o, "grad_note", "the gradient of KL or 1 - cos is 0 at the unmasked model");
        cJSON *ga = cJSON_AddArrayToObject(o, "grad"), *aa = cJSON_AddArrayToObject(o, "atp");
        for (int l = 0; ga && aa && l < in->n_layers; l++) {
            cJSON_AddItemToArray(ga, num_array(r->grad + (size_t)l * in->n_heads, in->n_heads));
            cJSON_AddItemToArray(aa, num_array(r->atp + (size_t)l * in->n_heads, in->n_heads));
        }
        cJSON_AddItemToObject(o, "mlp_grad", num_array(r->mlp_grad, in->n_layers)); /* each MLP block's gate's */
        cJSON_AddItemToObject(o, "mlp_atp", num_array(r->mlp_atp, in->n_layers));
    }
    cJSON_AddNumberToObject(o, "n_tokens", (double)mt->n_tokens);
    cJSON_AddNumberToObject(o, "n_seqs", mt->n_seqs);
    cJSON *ps = cJSON_AddObjectToObject(o, "per_seq");
    for (int k = 0; ps && k < HP_N_METRICS; k++)
        if (mt->has[k])
            cJSON_AddItemToObject(ps, hp_metric_name((enum hp_metric)k), num_array(mt->seq[k], mt->n_seqs));
    cJSON *tk = cJSON_CreateArray();
    for (int i = 0; tk && i < mt->n_seqs; i++)
        cJSON_AddItemToArray(tk, cJSON_CreateNumber((double)mt->seq_tokens[i]));
    cJSON_AddItemToObject(ps, "tokens", tk);
    cJSON_AddStringToObject(o, "kernel", hp_runtime_kernel());
    cJSON_AddNumberToObject(o, "threads_min", r->threads_min);
    cJSON_AddNumberToObject(o, "threads_max", r->threads_max);
    add_num(o, "seconds", r->seconds);
    if (want_grad) {
        cJSON *so = cJSON_AddObjectToObject(o, "grad_seconds");
        add_num(so, "reference", r->ph.reference);
        add_num(so, "forward", r->ph.forward);
        add_num(so, "head", r->ph.head);
        add_num(so, "reverse", r->ph.reverse);
    }
    return finish(o, false);
}
