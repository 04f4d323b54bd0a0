/*
 * test_patch.c -- the ablations that come from another input, resample and
 * denoise (activation patching), against Hugging Face's float64 numbers.
 *
 * The reference is tests/fixtures/<model>/task-reference.json
 * (tools/gen_task_fixtures.py; tools/README.md, "Task references"), for every
 * fixture that has one and a model (smollm2-ioi has only the reference): per
 * head and per row, the task metrics (logit_diff, answer_logprob,
 * answer_prob, answer_acc) under zero ablation, resample (the head's output
 * replaced at every position by its value on the row's corrupt prompt) and
 * denoise (the corrupt prompt run, the head's clean output restored), and of
 * the unmasked clean and corrupt runs: per row and as means within 1e-4, and
 * headprune's per-sequence loss of a task row as -answer_logprob, on the
 * plain path, the reuse path (hp_evaluator_run_many) and the gradient path's
 * kept metrics (hp_evaluator_grad_pass_metrics). patch_recovery: 1 for the
 * clean run, 0 for the corrupt one (denoise's unmasked model), and per head
 * under denoise the reference's own, under resample the one its logit_diff
 * means give (test_task_metrics.c's bound for a ratio). A pruned head's
 * entries are null in the reference and absent in the model. llama-rope-dynamic's rows are evaluated
 * in groups of one length each, never padded: its rotary frequencies depend
 * on the pass's length once that is past its 8 trained positions, and the
 * reference runs each row at its own length (padding them to the longest row
 * would change every row's numbers, by design). Also: bad input (one line
 * naming the file, exit 1, nothing written), the digests (swapped data has
 * its own; unswapped task data digests as main's build gave it), and a plan
 * with `ablation: resample` / `denoise` storing what the plain path gives,
 * killed and resumed to the same results.
 */
#define _DEFAULT_SOURCE
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "data.h" // hp_task_swap
#include "hash.h"
#include "headprune.h"
#include "testutil.h"

static char tmp[64];

static void setup(void)
{
    tu_mkdtemp(tmp, sizeof tmp, "patch");
}

static void teardown(void)
{
    tu_rmrf(tmp);
}

TestSuite(patch, .init = setup, .fini = teardown, .timeout = 900);

#define TOL 1e-4 /* the issue's: headprune computes in float, the reference in float64 */
#define MAX_ROWS 64

static cJSON *read_json(const char *path)
{
    char *text = tu_slurp(path, NULL);
    cJSON *j = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(j, "%s is not JSON", path);
    return j;
}

static const cJSON *get(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert_not_null(v, "no \"%s\" in the reference", k);
    return v;
}

/* Whether the fixture's config.json asks for dynamic rope (its frequencies depend on the pass's length). */
static bool dynamic_rope(const char *fixture)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/config.json", getenv("HP_FIXTURES"), fixture);
    cJSON *c = read_json(path);
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(c, "rope_scaling");
    const cJSON *t = rs ? cJSON_GetObjectItemCaseSensitive(rs, "rope_type") : NULL;
    if (!t && rs)
        t = cJSON_GetObjectItemCaseSensitive(rs, "type");
    bool dyn = cJSON_IsString(t) && strcmp(t->valuestring, "dynamic") == 0;
    cJSON_Delete(c);
    return dyn;
}

/* Rows evaluated together: a task file and which reference rows (task.jsonl's lines, from 0) it holds. */
struct group {
    char path[1024];
    int n, row[MAX_ROWS];
};

/* The fixture's task.jsonl as one group (padded to its longest row), or with by_length as one file per row
 * length (no padding), written into tmp. Returns the number of groups. */
static int groups_of(const char *fixture, bool by_length, struct group *g, int max, int *n_rows)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/task.jsonl", getenv("HP_FIXTURES"), fixture);
    char *text = tu_slurp(path, NULL);
    char *lines[MAX_ROWS];
    int n = 0;
    for (char *save = NULL, *s = strtok_r(text, "\n", &save); s; s = strtok_r(NULL, "\n", &save)) {
        cr_assert_lt(n, MAX_ROWS);
        lines[n++] = s;
    }
    *n_rows = n;
    int ng = 0;
    if (!by_length) {
        snprintf(g[0].path, sizeof g[0].path, "%s", path);
        g[0].n = n;
        for (int r = 0; r < n; r++)
            g[0].row[r] = r;
        free(text);
        return 1;
    }
    int len[MAX_ROWS];
    for (int r = 0; r < n; r++) {
        cJSON *o = cJSON_Parse(lines[r]);
        cr_assert(o && cJSON_IsArray(cJSON_GetObjectItem(o, "prompt_ids")), "%s line %d", path, r + 1);
        len[r] = cJSON_GetArraySize(cJSON_GetObjectItem(o, "prompt_ids"));
        cJSON_Delete(o);
    }
    for (int r = 0; r < n; r++) {
        int k = 0;
        while (k < ng && len[g[k].row[0]] != len[r])
            k++;
        if (k == ng) {
            cr_assert_lt(ng, max);
            snprintf(g[k].path, sizeof g[k].path, "%s/%s-len%d.jsonl", tmp, fixture, len[r]);
            g[k].n = 0;
            ng++;
        }
        g[k].row[g[k].n++] = r;
    }
    for (int k = 0; k < ng; k++) {
        FILE *f = fopen(g[k].path, "w");
        cr_assert_not_null(f);
        for (int i = 0; i < g[k].n; i++)
            fprintf(f, "%s\n", lines[g[k].row[i]]);
        fclose(f);
    }
    free(text);
    return ng;
}

/* The task metrics checked per row and as means (the reference's ablations.<abl>.<metric>.rows[l][h][r],
 * clean.<metric>[r], corrupt.<metric>[r]). */
static const enum hp_metric row_metrics[] = {HP_METRIC_LOGIT_DIFF, HP_METRIC_ANSWER_LOGPROB, HP_METRIC_ANSWER_PROB,
                                             HP_METRIC_ANSWER_ACC};
enum { N_ROW_METRICS = sizeof row_metrics / sizeof *row_metrics };

/* mt against the reference's rows byname[metric] (lists over task.jsonl's rows), every row of group g: each task
 * metric per row and as the group's mean, and the per-sequence loss as -answer_logprob. */
static void check_rows(const struct hp_metrics *mt, const cJSON *byname, const struct group *g, const char *fixture,
                       const char *what)
{
    cr_assert_eq(mt->n_seqs, g->n);
    cr_assert_eq(mt->n_tokens, g->n, "%s %s: %lld scored items, want one per row", fixture, what,
                 (long long)mt->n_tokens);
    for (int k = 0; k < N_ROW_METRICS; k++) {
        const enum hp_metric m = row_metrics[k];
        const cJSON *ref = get(byname, hp_metric_name(m));
        cr_assert(mt->has[m], "%s %s: no %s", fixture, what, hp_metric_name(m));
        double sum = 0;
        for (int i = 0; i < g->n; i++) {
            const cJSON *v = cJSON_GetArrayItem(ref, g->row[i]);
            cr_assert(cJSON_IsNumber(v), "%s %s: no reference %s for row %d", fixture, what, hp_metric_name(m),
                      g->row[i]);
            const double want = v->valuedouble, got = mt->seq[m][i];
            cr_assert(isfinite(got) && fabs(got - want) <= TOL, "%s %s, row %d (%s): %s %.10g, Hugging Face %.10g "
                      "(diff %.3g)", fixture, what, g->row[i], g->path, hp_metric_name(m), got, want,
                      fabs(got - want));
            if (m == HP_METRIC_ANSWER_LOGPROB)
                cr_assert(fabs(mt->seq_loss[i] + want) <= TOL, "%s %s, row %d (%s): -log p(answer) %.10g, Hugging "
                          "Face %.10g", fixture, what, g->row[i], g->path, mt->seq_loss[i], -want);
            sum += want;
        }
        cr_assert(fabs(mt->value[m] - sum / g->n) <= TOL, "%s %s (%s): mean %s %.10g, Hugging Face %.10g", fixture,
                  what, g->path, hp_metric_name(m), mt->value[m], sum / g->n);
    }
}

/* The reference's rows of head l.h under ablation abl, by metric name (references into abl's object). */
static cJSON *head_rows(const cJSON *abl, int l, int h)
{
    cJSON *o = cJSON_CreateObject();
    for (int k = 0; k < N_ROW_METRICS; k++) {
        const char *name = hp_metric_name(row_metrics[k]);
        const cJSON *r = cJSON_GetArrayItem(cJSON_GetArrayItem(get(get(abl, name), "rows"), l), h);
        cr_assert(cJSON_IsArray(r), "no reference %s rows for head %d.%d", name, l, h);
        cJSON_AddItemReferenceToObject(o, name, (cJSON *)r);
    }
    return o;
}

static double mean_of(const cJSON *a)
{
    double s = 0;
    for (int i = 0; i < cJSON_GetArraySize(a); i++)
        s += cJSON_GetArrayItem(a, i)->valuedouble;
    return s / cJSON_GetArraySize(a);
}

/* patch_recovery of a variant over every row against want, from Hugging Face's logit differences: a ratio of
 * differences of logit_diffs each within TOL, so within 2 TOL (1 + |want|) / |span| (test_task_metrics.c's bound) */
static void check_recovery(const struct hp_metrics *mt, double want, double span, const char *fixture,
                           const char *what)
{
    const double got = mt->value[HP_METRIC_PATCH_RECOVERY], bound = 2 * TOL * (1 + fabs(want)) / fabs(span);
    cr_assert(mt->has[HP_METRIC_PATCH_RECOVERY] && isfinite(got) && fabs(got - want) <= bound,
              "%s %s: patch_recovery %.9g, from Hugging Face %.9g (diff %.3g, bound %.3g)", fixture, what, got, want,
              fabs(got - want), bound);
}

/* An evaluator on group g's file, bound for ablation abl (denoise: the data swapped). */
struct side {
    struct hp_data *d;
    struct hp_evaluator *ev;
};

static void side_open(struct side *s, struct hp_model *m, const struct group *g, enum hp_ablation abl)
{
    struct hp_error err = {0};
    cr_assert_eq(hp_data_load(g->path, 0, &s->d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_ablation_bind_data(abl, s->d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(s->d->task->swapped, abl == HP_ABLATE_DENOISE);
    cr_assert_eq(hp_evaluator_new(m, s->d, &s->ev, &err), HP_OK, "%s", err.msg);
    hp_evaluator_keep_grad_metrics(s->ev, true);
}

static void side_close(struct side *s)
{
    hp_evaluator_free(s->ev);
    hp_data_free(s->d);
}

enum path { PLAIN, REUSE, GRAD, N_PATHS };
static const char *const path_name[N_PATHS] = {"plain", "reuse", "gradient"};

/* The n masks under abl on path p into out[0..n). */
static void run_path(struct hp_evaluator *ev, enum path p, struct hp_mask **mk, int n, enum hp_ablation abl,
                     struct hp_metrics **out)
{
    struct hp_error err = {0};
    hp_evaluator_set_plain(ev, p == PLAIN);
    if (p == REUSE) {
        cr_assert_eq(hp_evaluator_run_many(ev, (const struct hp_mask *const *)mk, n, abl, out, &err), HP_OK, "%s",
                     err.msg);
        return;
    }
    for (int i = 0; i < n; i++)
        cr_assert_eq(p == PLAIN ? hp_evaluator_run(ev, mk[i], abl, &out[i], &err)
                                : hp_evaluator_grad_pass_metrics(ev, mk[i], abl, &out[i], &err),
                     HP_OK, "%s", err.msg);
}

static const enum hp_ablation ablations[] = {HP_ABLATE_ZERO, HP_ABLATE_RESAMPLE, HP_ABLATE_DENOISE};
enum { N_ABL = sizeof ablations / sizeof *ablations };

/* Every head (and the unmasked clean and corrupt runs) of one fixture, on every path, against the reference. */
static void check_fixture(const char *fixture)
{
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/%s", getenv("HP_FIXTURES"), fixture);
    snprintf(path, sizeof path, "%s/task-reference.json", dir);
    cJSON *ref = read_json(path);
    struct hp_model *m;
    struct hp_error err = {0};
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    const struct hp_model_info *in = hp_model_get_info(m);
    const int L = in->n_layers, H = in->n_heads;
    cr_assert_eq(get(ref, "n_layers")->valueint, L);
    cr_assert_eq(get(ref, "n_heads")->valueint, H);
    struct group g[MAX_ROWS];
    int n_rows;
    const bool by_length = dynamic_rope(fixture);
    const int ng = groups_of(fixture, by_length, g, MAX_ROWS, &n_rows);
    cr_assert_eq(get(ref, "n_rows")->valueint, n_rows);
    const cJSON *abl_ref = get(ref, "ablations");
    /* the heads and their masks: a pruned head has null in the reference and is not evaluated */
    struct hp_mask *mk[256];
    int head[256], n_mk = 0;
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++) {
            const cJSON *rows = cJSON_GetArrayItem(
                cJSON_GetArrayItem(get(get(get(abl_ref, "zero"), "answer_logprob"), "rows"), l), h);
            const bool pruned = in->pruned && in->pruned[l * H + h];
            cr_assert_eq(cJSON_IsNull(rows), pruned, "%s head %d.%d: pruned %d, reference %s", fixture, l, h, pruned,
                         cJSON_IsNull(rows) ? "null" : "given");
            if (pruned)
                continue;
            cr_assert_lt(n_mk, 256);
            mk[n_mk] = hp_mask_new(L, H);
            mk[n_mk]->gate[l * H + h] = 0.0f;
            head[n_mk++] = l * H + h;
        }
    /* resample differs from zero ablation somewhere by far more than the tolerance, so the test tells them apart */
    double most = 0;
    for (int i = 0; i < n_mk; i++)
        for (int r = 0; r < n_rows; r++) {
            const int l = head[i] / H, h = head[i] % H;
            double z = cJSON_GetArrayItem(cJSON_GetArrayItem(cJSON_GetArrayItem(
                           get(get(get(abl_ref, "zero"), "answer_logprob"), "rows"), l), h), r)->valuedouble;
            double s = cJSON_GetArrayItem(cJSON_GetArrayItem(cJSON_GetArrayItem(
                           get(get(get(abl_ref, "resample"), "answer_logprob"), "rows"), l), h), r)->valuedouble;
            most = fmax(most, fabs(z - s));
        }
    cr_assert_gt(most, 100 * TOL, "%s: resample and zero ablation agree everywhere (%g)", fixture, most);
    const double ld_clean = mean_of(get(get(ref, "clean"), "logit_diff")),
                 ld_corrupt = mean_of(get(get(ref, "corrupt"), "logit_diff")), span = ld_clean - ld_corrupt;
    for (int k = 0; k < ng; k++) {
        struct side clean, swapped;
        side_open(&clean, m, &g[k], HP_ABLATE_ZERO);
        side_open(&swapped, m, &g[k], HP_ABLATE_DENOISE);
        for (int p = 0; p < N_PATHS; p++) {
            struct hp_mask *none = NULL;
            struct hp_metrics *mt;
            char what[128];
            run_path(clean.ev, (enum path)p, &none, 1, HP_ABLATE_ZERO, &mt);
            snprintf(what, sizeof what, "%s path, unmasked on the prompts", path_name[p]);
            check_rows(mt, get(ref, "clean"), &g[k], fixture, what);
            /* the ends of patch_recovery: the clean run recovers all, the corrupt run (denoise's unmasked) none */
            cr_assert_eq(mt->value[HP_METRIC_PATCH_RECOVERY], 1.0, "%s %s: recovery %.17g", fixture, what,
                         mt->value[HP_METRIC_PATCH_RECOVERY]);
            hp_metrics_free(mt);
            run_path(swapped.ev, (enum path)p, &none, 1, HP_ABLATE_ZERO, &mt);
            snprintf(what, sizeof what, "%s path, unmasked on the corrupt prompts", path_name[p]);
            check_rows(mt, get(ref, "corrupt"), &g[k], fixture, what);
            cr_assert_eq(mt->value[HP_METRIC_PATCH_RECOVERY], 0.0, "%s %s: recovery %.17g", fixture, what,
                         mt->value[HP_METRIC_PATCH_RECOVERY]);
            hp_metrics_free(mt);
            for (int a = 0; a < N_ABL; a++) {
                const enum hp_ablation abl = ablations[a];
                struct hp_metrics *out[256];
                run_path(abl == HP_ABLATE_DENOISE ? swapped.ev : clean.ev, (enum path)p, mk, n_mk, abl, out);
                const cJSON *by = get(abl_ref, hp_ablation_name(abl));
                for (int i = 0; i < n_mk; i++) {
                    const int l = head[i] / H, h = head[i] % H;
                    snprintf(what, sizeof what, "%s path, %s of head %d.%d", path_name[p], hp_ablation_name(abl), l,
                             h);
                    cJSON *rows = head_rows(by, l, h);
                    check_rows(out[i], rows, &g[k], fixture, what);
                    /* recovery is of means over every row: where the group is the whole file */
                    if (g[k].n == n_rows && abl == HP_ABLATE_DENOISE)
                        check_recovery(out[i], cJSON_GetArrayItem(cJSON_GetArrayItem(get(get(by, "patch_recovery"),
                                                                                         "mean"), l), h)->valuedouble,
                                       span, fixture, what);
                    else if (g[k].n == n_rows)
                        check_recovery(out[i], (mean_of(get(rows, "logit_diff")) - ld_corrupt) / span, span,
                                       fixture, what);
                    cJSON_Delete(rows);
                    hp_metrics_free(out[i]);
                }
            }
        }
        side_close(&clean);
        side_close(&swapped);
    }
    for (int i = 0; i < n_mk; i++)
        hp_mask_free(mk[i]);
    hp_model_close(m);
    cJSON_Delete(ref);
}

/* Every fixture with a task reference and a model: each is checked, and they are all there (19 causal ones). */
Test(patch, every_head_under_zero_resample_and_denoise_matches_hugging_face)
{
    DIR *dir = opendir(getenv("HP_FIXTURES"));
    cr_assert_not_null(dir);
    char names[64][256];
    int n = 0;
    for (struct dirent *e; (e = readdir(dir));) {
        char ref[1024], cfg[1024];
        struct stat sb;
        snprintf(ref, sizeof ref, "%s/%s/task-reference.json", getenv("HP_FIXTURES"), e->d_name);
        snprintf(cfg, sizeof cfg, "%s/%s/config.json", getenv("HP_FIXTURES"), e->d_name);
        if (stat(ref, &sb) == 0 && stat(cfg, &sb) == 0) {
            cr_assert_lt(n, 64);
            snprintf(names[n++], sizeof names[0], "%s", e->d_name);
        }
    }
    closedir(dir);
    cr_assert_geq(n, 19, "only %d fixtures with a task reference", n);
    for (int i = 0; i < n; i++) {
        cr_log_info("task reference: %s%s", names[i], dynamic_rope(names[i]) ? " (rows by length)" : "");
        check_fixture(names[i]);
    }
}

/* err is one line (one newline, at its end) that starts with prefix and holds every one of the words. */
static void one_line(const char *err, const char *prefix, const char *const *words, int n)
{
    cr_assert(strncmp(err, "headprune: ", 11) == 0 ? strncmp(err + 11, prefix, strlen(prefix)) == 0
                                                     : strncmp(err, prefix, strlen(prefix)) == 0,
              "not about %s: %s", prefix, err);
    cr_assert(strchr(err, '\n') == err + strlen(err) - 1, "not one line: %s", err);
    for (int i = 0; i < n; i++)
        cr_assert_not_null(strstr(err, words[i]), "no '%s' in: %s", words[i], err);
}

/* Task rows without corrupt prompts (ids form, gpt2-tiny's vocabulary) into tmp/name. */
static void write_no_corrupt(char *path, size_t n, const char *name)
{
    snprintf(path, n, "%s/%s", tmp, name);
    const char *rows = "{\"prompt_ids\": [5, 6, 7], \"answer_id\": 8, \"wrong_id\": 9}\n"
                       "{\"prompt_ids\": [5, 7], \"answer_id\": 3, \"wrong_id\": 9}\n";
    tu_spit(path, rows, strlen(rows));
}

/* eval --ablation resample|denoise on data that is not task rows, or has no corrupt prompts: exit 1, one line
 * naming the file, nothing on stdout. */
Test(patch, eval_refuses_resample_and_denoise_without_corrupt_prompts)
{
    char npy[1024], nocorr[1024], args[4096], out[4096], err[4096];
    snprintf(npy, sizeof npy, "%s/gpt2-tiny/data.npy", getenv("HP_FIXTURES"));
    write_no_corrupt(nocorr, sizeof nocorr, "nocorrupt.jsonl");
    static const char *const abl[] = {"resample", "denoise"};
    for (int a = 0; a < 2; a++) {
        snprintf(args, sizeof args, "eval --model '%s/gpt2-tiny' --data '%s' --ablation %s --mask 0.1",
                 getenv("HP_FIXTURES"), npy, abl[a]);
        cr_assert_eq(tu_headprune(NULL, args, tmp, out, sizeof out, err, sizeof err), 1, "%s", err);
        cr_assert_str_empty(out);
        one_line(err, npy, (const char *const[]){abl[a], "not task rows", "docs/tasks.md"}, 3);
        snprintf(args, sizeof args, "eval --model '%s/gpt2-tiny' --data '%s' --ablation %s --json",
                 getenv("HP_FIXTURES"), nocorr, abl[a]);
        cr_assert_eq(tu_headprune(NULL, args, tmp, out, sizeof out, err, sizeof err), 1, "%s", err);
        cr_assert_str_empty(out);
        one_line(err, nocorr, (const char *const[]){abl[a], "no \"corrupt\""}, 2);
    }
}

/* A plan with `ablation: resample` (or denoise) over such data: `plan` and `run` exit 1 with one line naming
 * the data file, and run writes nothing (no database). */
Test(patch, a_plan_over_data_without_corrupt_prompts_is_refused)
{
    char nocorr[1024], plan[1100], db[1100], args[4096], err[4096], yaml[4096], npy[1024];
    write_no_corrupt(nocorr, sizeof nocorr, "nocorrupt.jsonl");
    snprintf(npy, sizeof npy, "%s/gpt2-tiny/data.npy", getenv("HP_FIXTURES"));
    static const char *const abl[] = {"resample", "denoise"};
    for (int a = 0; a < 2; a++)
        for (int f = 0; f < 2; f++) {
            const char *data = f ? npy : nocorr;
            snprintf(plan, sizeof plan, "%s/plan.yaml", tmp);
            snprintf(db, sizeof db, "%s/refused.db", tmp);
            snprintf(yaml, sizeof yaml, "name: p\nmodel: %s/gpt2-tiny\ndata: %s\nmetric: loss\nablation: %s\n"
                     "studies:\n  - single\n", getenv("HP_FIXTURES"), data, abl[a]);
            tu_spit(plan, yaml, strlen(yaml));
            snprintf(args, sizeof args, "run '%s' --db '%s' --quiet --threads 1", plan, db);
            cr_assert_eq(tu_headprune(NULL, args, tmp, NULL, 0, err, sizeof err), 1, "%s", err);
            one_line(err, data, (const char *const[]){abl[a], f ? "not task rows" : "no \"corrupt\""}, 2);
            struct stat sb;
            cr_assert_neq(stat(db, &sb), 0, "run wrote %s for a refused plan", db);
            snprintf(args, sizeof args, "plan '%s'", plan);
            cr_assert_eq(tu_headprune(NULL, args, tmp, NULL, 0, err, sizeof err), 1, "%s", err);
            one_line(err, data, (const char *const[]){abl[a]}, 1);
        }
}

/* The library's guard: an evaluator refuses denoise on data not swapped and resample on swapped data, one line
 * naming the file; binding twice swaps once; bind refuses resample on swapped data and changes nothing. */
Test(patch, the_evaluator_refuses_data_not_bound_for_the_ablation)
{
    char dir[1024], task[1100];
    snprintf(dir, sizeof dir, "%s/gpt2-tiny", getenv("HP_FIXTURES"));
    snprintf(task, sizeof task, "%s/task.jsonl", dir);
    struct hp_model *m;
    struct hp_data *d;
    struct hp_evaluator *ev;
    struct hp_metrics *mt = NULL;
    struct hp_error err = {0};
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_data_load(task, 0, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_new(m, d, &ev, &err), HP_OK, "%s", err.msg);
    struct hp_mask *mk = hp_mask_new(hp_model_get_info(m)->n_layers, hp_model_get_info(m)->n_heads);
    mk->gate[1] = 0;
    cr_assert_eq(hp_evaluator_run(ev, mk, HP_ABLATE_DENOISE, &mt, &err), HP_ERR_ARG);
    cr_assert_null(mt);
    cr_assert(strncmp(err.msg, task, strlen(task)) == 0 && strstr(err.msg, "not swapped") && !strchr(err.msg, '\n'),
              "%s", err.msg);
    hp_evaluator_free(ev);
    int32_t first = d->ids[0], corrupt0 = d->task->corrupt[0];
    cr_assert_eq(hp_ablation_bind_data(HP_ABLATE_DENOISE, d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_ablation_bind_data(HP_ABLATE_DENOISE, d, &err), HP_OK, "%s", err.msg);
    cr_assert(d->task->swapped && d->ids[0] == corrupt0 && d->task->corrupt[0] == first, "bound twice: swapped twice");
    cr_assert_eq(hp_evaluator_new(m, d, &ev, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_run(ev, mk, HP_ABLATE_RESAMPLE, &mt, &err), HP_ERR_ARG);
    cr_assert(strncmp(err.msg, task, strlen(task)) == 0 && strstr(err.msg, "swapped") && !strchr(err.msg, '\n'),
              "%s", err.msg);
    hp_evaluator_free(ev);
    cr_assert_eq(hp_ablation_bind_data(HP_ABLATE_RESAMPLE, d, &err), HP_ERR_ARG);
    cr_assert(d->task->swapped && d->ids[0] == corrupt0, "a refused bind changed the data");
    /* zero and mean take any data as it is */
    cr_assert_eq(hp_ablation_bind_data(HP_ABLATE_ZERO, d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_ablation_bind_data(HP_ABLATE_MEAN, d, &err), HP_OK, "%s", err.msg);
    cr_assert(d->task->swapped && d->ids[0] == corrupt0);
    hp_mask_free(mk);
    hp_data_free(d);
    hp_model_close(m);
}

/* Task data digests as main's build gave it (these values: main at f811410, `headprune run` of a plan over
 * each file, its datasets.digest); swapped data digests differently, from the unswapped and from a file whose
 * prompts are the corrupt prompts (and the reverse); swapping back gives the first digest again. */
Test(patch, digests_tell_swapped_data_apart_and_leave_unswapped_ones_alone)
{
    static const char *const want[][2] = {
        {"gpt2-tiny", "1aa77ceb2ff447875d693ef123932475"},
        {"stories260K", "aa308acd712cfc129b06d2248a476dc6"},
        {"llama-gqa", "07da9494a5a4d6c6846ea1bad0787e07"},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        char path[1024], hex[HP_DIGEST_HEX], sw[HP_DIGEST_HEX], hand[HP_DIGEST_HEX], back[HP_DIGEST_HEX];
        snprintf(path, sizeof path, "%s/%s/task.jsonl", getenv("HP_FIXTURES"), want[i][0]);
        struct hp_data *d;
        struct hp_error err = {0};
        cr_assert_eq(hp_data_load(path, 0, &d, &err), HP_OK, "%s", err.msg);
        hp_digest_data(d, hex);
        cr_assert_str_eq(hex, want[i][1], "%s digests to %s, was %s", path, hex, want[i][1]);
        cr_assert_eq(hp_ablation_bind_data(HP_ABLATE_DENOISE, d, &err), HP_OK, "%s", err.msg);
        hp_digest_data(d, sw);
        cr_assert_str_neq(sw, hex);
        d->task->swapped = false; /* the same arrays as a file with prompts and corrupt prompts exchanged */
        hp_digest_data(d, hand);
        cr_assert_str_neq(sw, hand);
        cr_assert_str_neq(hand, hex);
        d->task->swapped = true;
        hp_task_swap(d);
        cr_assert_not(d->task->swapped);
        hp_digest_data(d, back);
        cr_assert_str_eq(back, hex);
        hp_data_free(d);
    }
}

/* eval --help lists both methods, with their rows' help. */
Test(patch, eval_help_names_resample_and_denoise)
{
    char out[16384], err[4096];
    cr_assert_eq(tu_headprune(NULL, "eval --help", tmp, out, sizeof out, err, sizeof err), 0, "%s", err);
    /* the help is wrapped: compare with whitespace runs as one space */
    char flat[16384];
    size_t k = 0;
    for (size_t i = 0; out[i] && k + 1 < sizeof flat; i++)
        if (!(out[i] == ' ' || out[i] == '\n') || (k && flat[k - 1] != ' '))
            flat[k++] = out[i] == '\n' ? ' ' : out[i];
    flat[k] = 0;
    static const enum hp_ablation a[] = {HP_ABLATE_RESAMPLE, HP_ABLATE_DENOISE};
    for (int i = 0; i < 2; i++) {
        char line[512];
        snprintf(line, sizeof line, "%s: %s", hp_ablation_name(a[i]), hp_ablation_help(a[i]));
        cr_assert_not_null(strstr(flat, line), "no '%s' in eval --help:\n%s", line, out);
    }
}

/* `headprune run PLAN --db DB --batch 1 --threads 1 --quiet`, started; output to /dev/null. */
static pid_t start_run(const char *plan, const char *db)
{
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        freopen("/dev/null", "w", stdout);
        freopen("/dev/null", "w", stderr);
        const char *hp = getenv("HP_HEADPRUNE");
        const char *argv[] = {hp, "run", plan, "--db", db, "--batch", "1", "--threads", "1", "--quiet", NULL};
        execv(hp, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static int wait_run(pid_t pid)
{
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Everything a sweep's results are, as text. */
static char *dump(const char *db)
{
    const char *queries[] = {
        "SELECT key, mask_text, n_ablated, ablation, quote(mask) FROM variants ORDER BY key",
        "SELECT v.key, printf('%!.17g %!.17g %!.17g %!.17g', r.loss, r.ppl, r.acc, r.kl), r.n_tokens, r.n_seqs "
        "FROM results r JOIN variants v ON v.id = r.variant_id ORDER BY v.key",
        "SELECT v.key, q.seq, printf('%!.17g %!.17g %!.17g', q.loss, q.acc, q.kl), q.n_tokens "
        "FROM seq_results q JOIN variants v ON v.id = q.variant_id ORDER BY v.key, q.seq",
        "SELECT s.key, s.ablation, d.digest, j.ord, j.layer, j.unit, v.key FROM sweep_jobs j JOIN sweeps s "
        "ON s.id = j.sweep_id JOIN datasets d ON d.id = s.dataset_id JOIN variants v ON v.id = j.variant_id "
        "ORDER BY s.key, j.ord",
    };
    return tu_rows(db, queries, sizeof queries / sizeof *queries);
}

/* A plan of one single-head study under abl over fixture's task rows into tmp/<name>.db; its path in db. */
static void plan_for(const char *fixture, enum hp_ablation abl, char *plan, size_t np, char *db, size_t nd)
{
    snprintf(plan, np, "%s/%s.yaml", tmp, hp_ablation_name(abl));
    snprintf(db, nd, "%s/%s.db", tmp, hp_ablation_name(abl));
    char yaml[4096];
    snprintf(yaml, sizeof yaml, "name: patch\nmodel: %s/%s\ndata: %s/%s/task.jsonl\nmetric: loss\nablation: %s\n"
             "studies:\n  - single\n", getenv("HP_FIXTURES"), fixture, getenv("HP_FIXTURES"), fixture,
             hp_ablation_name(abl));
    tu_spit(plan, yaml, strlen(yaml));
}

/* The stored per-variant and per-row values of db equal the plain path's on the same data (bound for abl), and
 * its dataset is that data's digest: one result per head and the unmasked model. */
static void stored_equals_plain(const char *fixture, enum hp_ablation abl, const char *db)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", getenv("HP_FIXTURES"), fixture);
    struct hp_model *m;
    struct hp_error e = {0};
    cr_assert_eq(hp_model_open(dir, &m, &e), HP_OK, "%s", e.msg);
    struct group g = {.n = 0};
    struct side s;
    snprintf(g.path, sizeof g.path, "%s/%s/task.jsonl", getenv("HP_FIXTURES"), fixture);
    side_open(&s, m, &g, abl);
    hp_evaluator_set_plain(s.ev, true);
    const struct hp_model_info *in = hp_model_get_info(m);
    char hex[HP_DIGEST_HEX];
    hp_digest_data(s.d, hex);
    sqlite3 *h;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st, *q;
    cr_assert_eq(sqlite3_prepare_v2(h, "SELECT v.mask_text, r.loss, r.acc, r.n_tokens, v.id, v.ablation FROM results r "
                                       "JOIN variants v ON v.id = r.variant_id", -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(h));
    cr_assert_eq(sqlite3_prepare_v2(h, "SELECT seq, loss FROM seq_results WHERE variant_id = ? ORDER BY seq", -1, &q,
                                    NULL), SQLITE_OK, "%s", sqlite3_errmsg(h));
    int n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *mask = (const char *)sqlite3_column_text(st, 0);
        cr_assert_str_eq((const char *)sqlite3_column_text(st, 5), hp_ablation_name(abl));
        struct hp_mask *mk;
        struct hp_metrics *mt;
        cr_assert_eq(hp_mask_parse(mask ? mask : "", false, in, &mk, &e), HP_OK, "%s", e.msg);
        cr_assert_eq(hp_evaluator_run(s.ev, mk, abl, &mt, &e), HP_OK, "%s", e.msg);
        /* 1e-6: the sweep's reuse path against the plain path, float rounding (as test_reuse.c holds them) */
        cr_assert(fabs(sqlite3_column_double(st, 1) - mt->loss) <= 1e-6, "%s mask '%s': stored loss %.10g, plain %.10g",
                  fixture, mask, sqlite3_column_double(st, 1), mt->loss);
        cr_assert(fabs(sqlite3_column_double(st, 2) - mt->acc) <= 1e-12);
        cr_assert_eq(sqlite3_column_int64(st, 3), mt->n_seqs, "one scored item per row");
        sqlite3_bind_int64(q, 1, sqlite3_column_int64(st, 4));
        int rows = 0;
        while (sqlite3_step(q) == SQLITE_ROW) {
            const int r = sqlite3_column_int(q, 0);
            cr_assert(r >= 0 && r < mt->n_seqs && fabs(sqlite3_column_double(q, 1) - mt->seq_loss[r]) <= 1e-6,
                      "%s mask '%s', row %d: stored %.10g, plain %.10g", fixture, mask, r,
                      sqlite3_column_double(q, 1), r >= 0 && r < mt->n_seqs ? mt->seq_loss[r] : NAN);
            rows++;
        }
        sqlite3_reset(q);
        cr_assert_eq(rows, mt->n_seqs, "mask '%s': %d rows stored", mask, rows);
        hp_metrics_free(mt);
        hp_mask_free(mk);
        n++;
    }
    sqlite3_finalize(q);
    sqlite3_finalize(st);
    cr_assert_eq(sqlite3_prepare_v2(h, "SELECT digest FROM datasets", -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 0), hex, "the sweep's data is not the data bound for %s",
                     hp_ablation_name(abl));
    sqlite3_finalize(st);
    sqlite3_close(h);
    cr_assert_eq(n, in->n_layers * in->n_heads - in->n_pruned + 1, "%d results stored", n);
    side_close(&s);
    hp_model_close(m);
}

/* `ablation: resample` and `ablation: denoise` in a plan (one single study over stories260K's task rows): the
 * sweep stores per variant and per row what the plain path gives; the two sweeps' data digests differ. */
Test(patch, a_plan_under_resample_or_denoise_stores_what_the_plain_path_gives)
{
    static const enum hp_ablation abl[] = {HP_ABLATE_RESAMPLE, HP_ABLATE_DENOISE};
    for (int a = 0; a < 2; a++) {
        char plan[1100], db[1100], args[4096], err[4096];
        plan_for("stories260K", abl[a], plan, sizeof plan, db, sizeof db);
        snprintf(args, sizeof args, "run '%s' --db '%s' --quiet --threads 1", plan, db);
        cr_assert_eq(tu_headprune(NULL, args, tmp, NULL, 0, err, sizeof err), 0, "%s", err);
        stored_equals_plain("stories260K", abl[a], db);
    }
}

/* A resample sweep killed with SIGKILL at random moments and resumed stores what an uninterrupted one does. */
Test(patch, a_resample_sweep_killed_and_resumed_equals_one_run)
{
    char plan[1100], ref[1100], db[1100];
    plan_for("stories260K", HP_ABLATE_RESAMPLE, plan, sizeof plan, ref, sizeof ref);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert_eq(wait_run(start_run(plan, ref)), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    snprintf(db, sizeof db, "%s/killed.db", tmp);
    srand(2025);
    long span_us = (long)(secs * 0.8e6) + 1;
    int killed = 0, runs = 0, rc = -1;
    while (rc != 0 && runs < 400) {
        pid_t pid = start_run(plan, db);
        long us = rand() % span_us;
        struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        rc = wait_run(pid);
        runs++;
        killed += rc == 128 + SIGKILL;
        cr_assert(rc == 0 || rc == 128 + SIGKILL, "run %d exited %d", runs, rc);
        if (rc == 0 && killed < 5) { /* finished before enough kills landed: start over, killing sooner */
            char cmd[4096];
            snprintf(cmd, sizeof cmd, "rm -f '%s' '%s-wal' '%s-shm'", db, db, db);
            cr_assert_eq(system(cmd), 0);
            span_us = span_us / 2 + 1;
            killed = 0;
            rc = -1;
        }
    }
    cr_assert_geq(killed, 5, "too few kills landed during a run to test anything (%d runs)", runs);
    const char *count = "SELECT count(*) FROM results";
    char *left = tu_rows(db, &count, 1);
    cr_assert_gt(atoi(left), 0, "no kill left any finished result");
    free(left);
    cr_assert_eq(wait_run(start_run(plan, db)), 0);
    tu_assert_same_text(ref, dump(ref), db, dump(db));
}

/* The corrupt run's head outputs are kept whole: more than 4 GB of them (6600 rows padded to 512 positions x 5
 * layers x 64 floats on stories260K, 4.3 GB) is refused before anything is allocated, in one line naming the
 * file and the sizes. */
Test(patch, head_outputs_over_the_budget_are_refused_naming_the_sizes)
{
    char path[1024], dir[1024];
    snprintf(path, sizeof path, "%s/big.jsonl", tmp);
    snprintf(dir, sizeof dir, "%s/stories260K", getenv("HP_FIXTURES"));
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    for (int r = 0; r < 6600; r++)
        fprintf(f, "{\"prompt_ids\": [5, 6, %d], \"answer_id\": 8, \"corrupt_ids\": [5, 6, 1]}\n", 7 + r % 100);
    fclose(f);
    struct hp_model *m;
    struct hp_data *d;
    struct hp_evaluator *ev;
    struct hp_metrics *mt = NULL;
    struct hp_error err = {0};
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_data_load(path, 512, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_new(m, d, &ev, &err), HP_OK, "%s", err.msg);
    struct hp_mask *mk = hp_mask_new(5, 8);
    mk->gate[3] = 0;
    cr_assert_eq(hp_evaluator_run(ev, mk, HP_ABLATE_RESAMPLE, &mt, &err), HP_ERR_NOMEM);
    cr_assert_null(mt);
    cr_assert(strncmp(err.msg, path, strlen(path)) == 0 && !strchr(err.msg, '\n') &&
                  strstr(err.msg, "6600 rows x 512 positions x 5 layers x 64 floats") && strstr(err.msg, "4096 MB"),
              "%s", err.msg);
    hp_mask_free(mk);
    hp_evaluator_free(ev);
    hp_data_free(d);
    hp_model_close(m);
}

/* headprune eval --ablation resample|denoise --mask L.H --json on a fixture's task rows: its loss is the mean over
 * rows of -answer_logprob in the reference (1e-4), so the CLI binds the data (denoise: swapped) as the library
 * tests above do; its unmasked loss is the clean run's, or under denoise the corrupt run's. */
Test(patch, eval_cli_resample_and_denoise_match_the_reference)
{
    char dir[1024], refp[1100], args[4096], out[16384], err[4096];
    snprintf(dir, sizeof dir, "%s/llama-gqa", getenv("HP_FIXTURES"));
    snprintf(refp, sizeof refp, "%s/task-reference.json", dir);
    cJSON *ref = read_json(refp);
    static const char *const abl[] = {"zero", "resample", "denoise"};
    for (int a = 0; a < 3; a++) {
        snprintf(args, sizeof args, "eval --model '%s' --data '%s/task.jsonl' --ablation %s --mask 1.3 --json --quiet",
                 dir, dir, abl[a]);
        cr_assert_eq(tu_headprune(NULL, args, tmp, out, sizeof out, err, sizeof err), 0, "%s", err);
        cJSON *o = cJSON_Parse(out);
        cr_assert_not_null(o, "%s", out);
        const cJSON *rows = cJSON_GetArrayItem(
            cJSON_GetArrayItem(get(get(get(get(ref, "ablations"), abl[a]), "answer_logprob"), "rows"), 1), 3);
        const cJSON *base = get(get(ref, a == 2 ? "corrupt" : "clean"), "answer_logprob");
        double want = 0, want0 = 0;
        for (int r = 0; r < cJSON_GetArraySize(rows); r++) {
            want -= cJSON_GetArrayItem(rows, r)->valuedouble / cJSON_GetArraySize(rows);
            want0 -= cJSON_GetArrayItem(base, r)->valuedouble / cJSON_GetArraySize(base);
        }
        const double got = get(o, "loss")->valuedouble, got0 = get(get(o, "unmasked"), "loss")->valuedouble;
        cr_assert_str_eq(get(o, "ablation")->valuestring, abl[a]);
        cr_assert(fabs(got - want) <= TOL, "eval --ablation %s: loss %.10g, Hugging Face %.10g", abl[a], got, want);
        cr_assert(fabs(got0 - want0) <= TOL, "eval --ablation %s: unmasked loss %.10g, Hugging Face %.10g", abl[a],
                  got0, want0);
        cJSON_Delete(o);
        /* the text output says when the run (and its unmasked model) is on the corrupt prompts */
        snprintf(args, sizeof args, "eval --model '%s' --data '%s/task.jsonl' --ablation %s --mask 1.3 --quiet", dir,
                 dir, abl[a]);
        cr_assert_eq(tu_headprune(NULL, args, tmp, out, sizeof out, err, sizeof err), 0, "%s", err);
        cr_assert_eq(strstr(out, "run on the corrupt prompts, the unmasked model's too") != NULL, a == 2, "%s", out);
    }
    cJSON_Delete(ref);
}

/* Plans under resample (metric logit_diff) and denoise (metric patch_recovery) over llama-gqa's task rows store
 * each head's effect as Hugging Face's: resample, clean mean logit_diff less the resampled mean; denoise, the
 * corrupt run's recovery (0) less the head's (the reference's own), within the ratio's bound. */
Test(patch, resample_and_denoise_plans_store_hugging_faces_effects)
{
    const char *fx = getenv("HP_FIXTURES");
    char refp[1024];
    snprintf(refp, sizeof refp, "%s/llama-gqa/task-reference.json", fx);
    cJSON *ref = read_json(refp);
    const double ld_clean = mean_of(get(get(ref, "clean"), "logit_diff")),
                 span = ld_clean - mean_of(get(get(ref, "corrupt"), "logit_diff"));
    static const char *const abl[] = {"resample", "denoise"}, *const metric[] = {"logit_diff", "patch_recovery"};
    for (int a = 0; a < 2; a++) {
        char plan[1100], db[1100], yaml[4096], args[4096], errs[4096], q[256];
        snprintf(plan, sizeof plan, "%s/effects-%s.yaml", tmp, abl[a]);
        snprintf(db, sizeof db, "%s/effects-%s.db", tmp, abl[a]);
        snprintf(yaml, sizeof yaml, "name: e\nmodel: %s/llama-gqa\ndata: %s/llama-gqa/task.jsonl\nmetric: %s\n"
                 "ablation: %s\nstudies:\n  - single\n", fx, fx, metric[a], abl[a]);
        tu_spit(plan, yaml, strlen(yaml));
        snprintf(args, sizeof args, "run '%s' --db '%s' --quiet --threads 1", plan, db);
        cr_assert_eq(tu_headprune(NULL, args, tmp, NULL, 0, errs, sizeof errs), 0, "%s", errs);
        snprintf(q, sizeof q, "SELECT layer, unit, d_%s FROM effects WHERE study = 'single' ORDER BY layer, unit",
                 metric[a]);
        const char *qs = q;
        char *rows = tu_rows(db, &qs, 1);
        const cJSON *mean = get(get(get(get(ref, "ablations"), abl[a]), metric[a]), "mean");
        int n = 0, l, h;
        double eff;
        for (char *p = strtok(rows, "\n"); p; p = strtok(NULL, "\n"), n++) {
            cr_assert_eq(sscanf(p, "%d|%d|%lf", &l, &h, &eff), 3, "%s", p);
            const double r = cJSON_GetArrayItem(cJSON_GetArrayItem(mean, l), h)->valuedouble;
            const double want = a == 0 ? ld_clean - r : 0 - r;
            const double bound = a == 0 ? TOL : 2 * TOL * (1 + fabs(r)) / fabs(span);
            cr_assert(fabs(eff - want) <= bound, "%s, head %d.%d: stored effect %.9g, Hugging Face %.9g (bound %.3g)",
                      abl[a], l, h, eff, want, bound);
        }
        cr_assert_eq(n, 12, "%s: %d heads stored", abl[a], n);
        free(rows);
    }
    cJSON_Delete(ref);
}

/* A model whose head outputs on the corrupt prompts are not finite (llama-gqa with the embedding row of a token
 * only the corrupt prompts use set to NaN): resample is refused in one line naming the model, the data and the
 * first layer, and nothing is handed out. */
Test(patch, head_outputs_on_the_corrupt_prompts_that_are_not_finite_are_refused)
{
    char src[1024], dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/nan", tmp);
    cr_assert_eq(mkdir(dir, 0777), 0);
    static const char *const files[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        size_t n;
        snprintf(src, sizeof src, "%s/llama-gqa/%s", getenv("HP_FIXTURES"), files[i]);
        char *bytes = tu_slurp(src, &n);
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        tu_spit(path, bytes, n);
        free(bytes);
    }
    /* token 1's embedding row to NaN, found through the safetensors header */
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f);
    uint64_t hl = 0;
    cr_assert_eq(fread(&hl, 8, 1, f), 1);
    char *header = calloc(1, hl + 1);
    cr_assert_eq(fread(header, 1, hl, f), hl);
    cJSON *h = cJSON_Parse(header);
    const cJSON *emb = cJSON_GetObjectItemCaseSensitive(h, "model.embed_tokens.weight");
    cr_assert_not_null(emb);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(emb, "dtype")->valuestring, "F32");
    const long off = (long)cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(emb, "data_offsets"), 0)->valuedouble;
    const int d_model = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(emb, "shape"), 1)->valueint;
    fseek(f, (long)(8 + hl) + off + 1L * d_model * 4, SEEK_SET);
    const float nan = NAN;
    for (int i = 0; i < d_model; i++)
        fwrite(&nan, 4, 1, f);
    fclose(f);
    cJSON_Delete(h);
    free(header);
    char data[1100];
    snprintf(data, sizeof data, "%s/pairs.jsonl", tmp);
    /* no wrong answers: patch_recovery (whose ends run the corrupt prompts too) is then not asked for */
    const char *rows = "{\"prompt_ids\": [5, 6, 7], \"answer_id\": 8, \"corrupt_ids\": [5, 6, 1]}\n"
                       "{\"prompt_ids\": [5, 7], \"answer_id\": 3, \"corrupt_ids\": [5, 1]}\n";
    tu_spit(data, rows, strlen(rows));
    struct hp_model *m;
    struct hp_data *d;
    struct hp_evaluator *ev;
    struct hp_metrics *mt = NULL;
    struct hp_error err = {0};
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_data_load(data, 0, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_new(m, d, &ev, &err), HP_OK, "%s", err.msg);
    /* the prompts alone are fine: the unmasked model and zero ablation evaluate */
    cr_assert_eq(hp_evaluator_run(ev, NULL, HP_ABLATE_ZERO, &mt, &err), HP_OK, "%s", err.msg);
    hp_metrics_free(mt);
    mt = NULL;
    struct hp_mask *mk = hp_mask_new(hp_model_get_info(m)->n_layers, hp_model_get_info(m)->n_heads);
    mk->gate[5] = 0;
    cr_assert_eq(hp_evaluator_run(ev, mk, HP_ABLATE_RESAMPLE, &mt, &err), HP_ERR_FORMAT, "%s", err.msg);
    cr_assert_null(mt);
    cr_assert(strncmp(err.msg, dir, strlen(dir)) == 0 && strstr(err.msg, data) && !strchr(err.msg, '\n') &&
                  strstr(err.msg, "on the corrupt prompts") && strstr(err.msg, "not finite, first in layer 0"),
              "%s", err.msg);
    hp_mask_free(mk);
    hp_evaluator_free(ev);
    hp_data_free(d);
    hp_model_close(m);
}
