/*
 * test_patching.c -- activation patching one position at a time (issue 25's
 * head x position grid), against Hugging Face's float64 numbers.
 *
 * The reference is the "grid" of tests/fixtures/<model>/task-reference.json
 * (tools/gen_task_fixtures.py): the rows of one template (grid.rows, one
 * length), and for every query head and position t the mean logit_diff when
 * the head's output is replaced at t only, every other position and head as
 * in the run: by its value on the row's corrupt prompt (grid.noise), or on
 * the corrupt run by its clean value (grid.denoise). Checked here: the
 * evaluator (hp_evaluator_run_many_at, on the reuse and the plain path), a
 * plan's `patching` study through a sweep, the query and its bad input.
 */
#define _DEFAULT_SOURCE
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "headprune.h"
#include "testutil.h"

static char tmp[64];

static void setup(void)
{
    tu_mkdtemp(tmp, sizeof tmp, "patching");
}

static void teardown(void)
{
    tu_rmrf(tmp);
}

TestSuite(patching, .init = setup, .fini = teardown, .timeout = 900);

#define TOL 1e-4 /* the issue's: headprune computes in float, the reference in float64 */
#define MAX_ROWS 64

/* The template group's rows (grid.rows: task.jsonl's lines, from 0) written to a file of their own in tmp. */
static void group_file(const char *fixture, const cJSON *grid, char *out, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/task.jsonl", getenv("HP_FIXTURES"), fixture);
    char *text = tu_slurp(path, NULL), *lines[MAX_ROWS];
    int nl = 0;
    for (char *save = NULL, *s = strtok_r(text, "\n", &save); s; s = strtok_r(NULL, "\n", &save)) {
        cr_assert_lt(nl, MAX_ROWS);
        lines[nl++] = s;
    }
    snprintf(out, n, "%s/%s-group.jsonl", tmp, fixture);
    FILE *f = fopen(out, "w");
    cr_assert_not_null(f);
    const cJSON *rows = tu_get(grid, "rows");
    for (int i = 0; i < cJSON_GetArraySize(rows); i++) {
        const int r = cJSON_GetArrayItem(rows, i)->valueint;
        cr_assert(r >= 0 && r < nl);
        fprintf(f, "%s\n", lines[r]);
    }
    fclose(f);
    free(text);
}

/* grid.<dir>[l][h][t], or NAN where the reference has null (a pruned head). */
static double grid_at(const cJSON *grid, const char *dir, int l, int h, int t)
{
    const cJSON *v = cJSON_GetArrayItem(cJSON_GetArrayItem(cJSON_GetArrayItem(tu_get(grid, dir), l), h), t);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/*
 * Every head of the fixture at every position of its template group, under resample (noise) and denoise, on the
 * reuse path and (at the first and last position) the plain path: logit_diff's mean within TOL of the grid.
 */
static void check_grid(const char *fixture)
{
    char dir[1024], path[1100], data[1200];
    snprintf(dir, sizeof dir, "%s/%s", getenv("HP_FIXTURES"), fixture);
    snprintf(path, sizeof path, "%s/task-reference.json", dir);
    cJSON *ref = tu_read_json(path);
    const cJSON *grid = tu_get(ref, "grid");
    const int T = tu_get(grid, "length")->valueint;
    group_file(fixture, grid, data, sizeof data);
    struct hp_model *m;
    struct hp_error err = {0};
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    const struct hp_model_info *in = hp_model_get_info(m);
    const int L = in->n_layers, H = in->n_heads;
    struct hp_mask *mk[256];
    int head[256], n_mk = 0;
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++) {
            const bool pruned = in->pruned && in->pruned[l * H + h];
            cr_assert_eq(isnan(grid_at(grid, "noise", l, h, 0)), pruned, "%s head %d.%d", fixture, l, h);
            if (pruned)
                continue;
            cr_assert_lt(n_mk, 256);
            mk[n_mk] = hp_mask_new(L, H);
            mk[n_mk]->gate[l * H + h] = 0.0f;
            head[n_mk++] = l * H + h;
        }
    static const enum hp_ablation abl[] = {HP_ABLATE_RESAMPLE, HP_ABLATE_DENOISE};
    static const char *const key[] = {"noise", "denoise"};
    double spread = 0; /* how far a head's grid moves across positions: the test tells positions apart */
    for (int a = 0; a < 2; a++) {
        struct hp_data *d;
        struct hp_evaluator *ev;
        cr_assert_eq(hp_data_load(data, 0, &d, &err), HP_OK, "%s", err.msg);
        cr_assert_eq(d->seq_len, T, "%s: the group's rows have %d tokens, the reference %d", fixture, d->seq_len, T);
        cr_assert_eq(hp_ablation_bind_data(abl[a], d, &err), HP_OK, "%s", err.msg);
        cr_assert_eq(hp_evaluator_new(m, d, &ev, &err), HP_OK, "%s", err.msg);
        for (int plain = 0; plain < 2; plain++) {
            hp_evaluator_set_plain(ev, plain);
            for (int t = 0; t < T; t++) {
                if (plain && t != 0 && t != T - 1)
                    continue;
                struct hp_metrics *out[256];
                cr_assert_eq(hp_evaluator_run_many_at(ev, (const struct hp_mask *const *)mk, n_mk, abl[a], t, out,
                                                      &err),
                             HP_OK, "%s", err.msg);
                for (int i = 0; i < n_mk; i++) {
                    const int l = head[i] / H, h = head[i] % H;
                    const double want = grid_at(grid, key[a], l, h, t), got = out[i]->value[HP_METRIC_LOGIT_DIFF];
                    cr_assert(out[i]->has[HP_METRIC_LOGIT_DIFF] && fabs(got - want) <= TOL,
                              "%s %s, %s path, head %d.%d at position %d: logit_diff %.10g, Hugging Face %.10g "
                              "(diff %.3g)", fixture, key[a], plain ? "plain" : "reuse", l, h, t, got, want,
                              fabs(got - want));
                    spread = fmax(spread, fabs(want - grid_at(grid, key[a], l, h, 0)));
                    hp_metrics_free(out[i]);
                }
            }
        }
        hp_evaluator_free(ev);
        hp_data_free(d);
    }
    /* the trained stories260K's moves least, 0.0071 */
    cr_assert_gt(spread, 50 * TOL, "%s: every head's grid is flat over positions (%g)", fixture, spread);
    for (int i = 0; i < n_mk; i++)
        hp_mask_free(mk[i]);
    hp_model_close(m);
    cJSON_Delete(ref);
}

/* every causal fixture with a task reference (tools/gen_task_fixtures.py's FIXTURES) */
static const char *const fixtures[] = {"gpt2-tiny", "gpt2-noprefix", "gpt2-untied", "gpt2-vocab", "gpt2-pruned",
                                       "llama-gqa", "llama-mlp-bias", "llama-tied-bf16", "llama-rope-dynamic",
                                       "llama-rope-linear", "llama-rope-llama3", "qwen2-bias", "mistral-window",
                                       "stories260K"};

Test(patching, grid_agrees_with_hugging_face_on_every_causal_fixture)
{
    for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++)
        check_grid(fixtures[i]);
}
