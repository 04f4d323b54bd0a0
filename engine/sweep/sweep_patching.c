/*
 * sweep_patching.c -- the sweep's patching procedure (HP_STUDY_RUN_PATCHING):
 * each selected unit's output replaced alone by the plan's ablation, at
 * every position together (positions: all: the single study's variants, the
 * same content addresses) or at each position of the rows by itself
 * (positions: each: one window of jobs a position, each mask's pos, each
 * variant's address marked with its position). The rows of a grid must
 * share one template, so one length (checked before the database is touched);
 * their first row's tokens are recorded (patch_tokens) to label the
 * positions.
 *
 * Must not: print; know SQL.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sweep_priv.h"
#include "tokenizer.h" // hp_tokenizer_present: labels only where the model has a tokenizer
#include "util.h"

/* Row s's tokens: a task row's up to its answer position, else its real ones (the attention mask's). */
static int row_length(const struct hp_data *d, int s)
{
    if (d->task)
        return d->task->pos[s] + 1;
    if (!d->attn_mask)
        return d->seq_len;
    int n = 0;
    for (int t = 0; t < d->seq_len; t++)
        n += d->attn_mask[(size_t)s * d->seq_len + t] != 0;
    return n;
}

/* Row s's line in its file (from 1): a task row's own, else its index + 1. */
static int row_line(const struct hp_data *d, int s)
{
    return d->task ? d->task->line[s] : s + 1;
}

/* positions: each needs rows of one template: every row as long as the first (one line naming the file and row). */
static enum hp_status check(const struct sw_ctx *c, int si, struct hp_error *err)
{
    const struct hp_study *s = &c->plan->studies[si];
    if (s->patching.positions != HP_PATCH_EACH)
        return HP_OK;
    const struct hp_data *d = c->data;
    const int n0 = row_length(d, 0);
    for (int r = 1; r < d->n_seqs; r++)
        if (row_length(d, r) != n0)
            return hp_fail(err, HP_ERR_ARG,
                           "%s: row %d (line %d) has %d tokens but row 1 (line %d) has %d: patching study '%s' "
                           "(%s:%d) patches one position at a time, over rows of one template, so of one length "
                           "(make them with `headprune task ioi --template K`, or give positions: all)",
                           d->path, r + 1, row_line(d, r), row_length(d, r), row_line(d, 0), n0, s->name,
                           c->plan->path, s->line);
    return HP_OK;
}

/* The text of one token, or NULL (no tokenizer, or an id it cannot decode). */
static char *token_text(const struct hp_tokenizer *tk, int32_t id)
{
    char *out = NULL;
    size_t n;
    struct hp_error why;
    if (!tk || hp_tokenizer_decode(tk, &id, 1, false, &out, &n, &why) != HP_OK)
        return NULL;
    return out;
}

/* The first row's tokens at positions [0, T), on the prompt and the corrupt prompt, into patch_tokens. */
static enum hp_status record_tokens(struct sw_ctx *c, const struct hp_study *s, int T, struct hp_error *err)
{
    const struct hp_data *d = c->data;
    const struct hp_task *tk = d->task;
    /* denoise's data is swapped: its ids are the corrupt prompts */
    const int32_t *clean = tk && tk->swapped ? tk->corrupt : d->ids,
                  *corrupt = tk && tk->corrupt ? (tk->swapped ? d->ids : tk->corrupt) : NULL;
    struct hp_tokenizer *tok = NULL;
    struct hp_error why;
    if (hp_tokenizer_present(c->plan->model) && hp_tokenizer_open(c->plan->model, &tok, &why) != HP_OK)
        tok = NULL; /* labels are ids then; the data was read in ids or by this same tokenizer */
    struct hp_store_patch_token *rows = calloc((size_t)T, sizeof *rows);
    char **texts = calloc(2 * (size_t)T, sizeof *texts);
    enum hp_status st = rows && texts ? HP_OK : hp_fail(err, HP_ERR_NOMEM, "out of memory");
    for (int t = 0; st == HP_OK && t < T; t++) {
        rows[t] = (struct hp_store_patch_token){.position = t, .token = clean[t], .corrupt = corrupt ? corrupt[t] : -1};
        rows[t].text = texts[2 * t] = token_text(tok, clean[t]);
        if (corrupt)
            rows[t].corrupt_text = texts[2 * t + 1] = token_text(tok, corrupt[t]);
    }
    if (st == HP_OK)
        st = hp_store_put_patch_tokens(c->store, c->sweep_id, s->name, rows, T, err);
    for (int i = 0; texts && i < 2 * T; i++)
        free(texts[i]);
    free(texts);
    free(rows);
    hp_tokenizer_free(tok);
    return st;
}

/* Study si: each selected unit alone, at every position together or at each of the rows' positions. */
static enum hp_status run(struct sw_ctx *c, int si, int64_t *ord, struct hp_error *err)
{
    const struct hp_study *s = &c->plan->studies[si];
    const struct hp_model_info *in = c->info;
    const int U = hp_unit_count(in, s->unit), nu = in->n_layers * U;
    const bool each = s->patching.positions == HP_PATCH_EACH;
    const int T = each ? row_length(c->data, 0) : 1;
    struct hp_job *jobs = calloc((size_t)nu, sizeof *jobs);
    int64_t *ords = calloc((size_t)nu, sizeof *ords);
    enum hp_status st = jobs && ords ? HP_OK : hp_fail(err, HP_ERR_NOMEM, "out of memory");
    int n = 0;
    char unit[32];
    for (int l = 0; st == HP_OK && l < in->n_layers; l++)
        for (int u = 0; st == HP_OK && u < U; u++) {
            if (!sw_selected(s->n_layers_sel, s->layers, l) || !sw_selected(s->n_units_sel, s->units, u) ||
                hp_unit_pruned(in, s->unit, l, u))
                continue;
            struct hp_mask *m = hp_mask_new(in->n_layers, in->n_heads);
            if (!m) {
                st = hp_fail(err, HP_ERR_NOMEM, "out of memory");
                break;
            }
            hp_mask_set_unit(m, in, s->unit, l, u, 0.0f);
            jobs[n] = (struct hp_job){.study = si, .k = 1, .layer = l, .unit = u, .unit2 = -1, .mask = m};
            n++;
        }
    if (st == HP_OK && each)
        st = record_tokens(c, s, T, err);
    for (int t = 0; st == HP_OK && t < T && !sw_stopping(c); t++) {
        for (int i = 0; i < n; i++) {
            struct hp_job *j = &jobs[i];
            hp_unit_label(unit, sizeof unit, s->unit, j->layer, j->unit);
            j->mask->pos = each ? t : -1;
            if (each)
                snprintf(j->label, sizeof j->label, "%s@%d", unit, t);
            else
                snprintf(j->label, sizeof j->label, "%s", unit);
            ords[i] = *ord + (int64_t)t * n + i;
        }
        st = sw_run_jobs(c, ords, jobs, n, NULL, NULL, err);
    }
    *ord += (int64_t)n * T;
    for (int i = 0; i < n; i++)
        hp_mask_free(jobs[i].mask);
    free(jobs);
    free(ords);
    return st;
}

const struct sw_proc sw_proc_patching = {.run = run, .check = check, .before_jobs = false};
