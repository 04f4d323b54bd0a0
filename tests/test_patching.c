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
 * evaluator (hp_evaluator_run_many with masks at positions, on the reuse and the plain path), a
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
        /* the plain path a position at a time (the first and the last); the reuse path every head at every
         * position in one call, variants of different positions side by side in its passes */
        for (int plain = 0; plain < 2; plain++) {
            hp_evaluator_set_plain(ev, plain);
            for (int t = plain ? 0 : -1; t < (plain ? T : 0); t++) {
                if (plain && t != 0 && t != T - 1)
                    continue;
                const int n = plain ? n_mk : n_mk * T;
                struct hp_mask **at = calloc((size_t)n, sizeof *at);
                struct hp_metrics **out = calloc((size_t)n, sizeof *out);
                cr_assert(at && out);
                for (int i = 0; i < n; i++) {
                    at[i] = hp_mask_new(L, H);
                    hp_mask_copy(at[i], mk[i % n_mk]);
                    at[i]->pos = plain ? t : i / n_mk;
                }
                cr_assert_eq(hp_evaluator_run_many(ev, (const struct hp_mask *const *)at, n, abl[a], out, &err), HP_OK,
                             "%s", err.msg);
                for (int i = 0; i < n; i++) {
                    const int l = head[i % n_mk] / H, h = head[i % n_mk] % H, p = at[i]->pos;
                    const double want = grid_at(grid, key[a], l, h, p), got = out[i]->value[HP_METRIC_LOGIT_DIFF];
                    cr_assert(out[i]->has[HP_METRIC_LOGIT_DIFF] && fabs(got - want) <= TOL,
                              "%s %s, %s path, head %d.%d at position %d: logit_diff %.10g, Hugging Face %.10g "
                              "(diff %.3g)", fixture, key[a], plain ? "plain" : "reuse", l, h, p, got, want,
                              fabs(got - want));
                    spread = fmax(spread, fabs(want - grid_at(grid, key[a], l, h, 0)));
                    hp_metrics_free(out[i]);
                    hp_mask_free(at[i]);
                }
                free(at);
                free(out);
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
                                       "stories260K", "qwen3-qknorm", "phi3-fused", "neox-parallel",
                                       "neox-sequential", "olmo2-post-norms", "gemma2-softcap", "gemma3-local"};

Test(patching, grid_agrees_with_hugging_face_on_every_causal_fixture)
{
    for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++)
        check_grid(fixtures[i]);
}

// --- the patching study: plans, the store, the query ----------------------------------------------

/* A plan over the fixture's template group: its ablation, and the studies' YAML list items. */
static void write_plan(const char *fixture, const char *data, const char *ablation, const char *studies,
                       char *path, size_t n)
{
    snprintf(path, n, "%s/%s-%s.yaml", tmp, fixture, ablation);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "name: grid\nmodel: %s/%s\ndata: %s\nablation: %s\nmetric: logit_diff\nstudies:\n%s", getenv("HP_FIXTURES"),
            fixture, data, ablation, studies);
    fclose(f);
}

static void run_plan(const char *plan, const char *db, volatile int *stop, struct hp_sweep_summary *sum)
{
    struct hp_plan *p;
    struct hp_error err = {0};
    cr_assert_eq(hp_plan_load(plan, &p, &err), HP_OK, "%s", err.msg);
    struct hp_sweep_opts o = {.db_path = db, .threads = 1, .batch = 5, .stop = stop};
    cr_assert_eq(hp_sweep_run(p, &o, sum, &err), HP_OK, "%s", err.msg);
    hp_plan_free(p);
}

/* One number of a query on db. */
static double sql_num(const char *db, const char *sql)
{
    char *rows = tu_rows(db, &sql, 1);
    double v = atof(rows);
    cr_assert(rows[0], "%s: no row for %s", db, sql);
    free(rows);
    return v;
}

/*
 * A plan's patching study stores the grid: every head at every position of the group, under resample and denoise
 * (direction given), each variant with its position, equal to Hugging Face's; the first row's tokens recorded as
 * the clean and the corrupt prompt's (denoise's data is swapped, the record is not).
 */
static void check_plan_grid(const char *fixture)
{
    char dir[1024], path[1100], data[1200], plan[1300], db[1300];
    snprintf(dir, sizeof dir, "%s/%s", getenv("HP_FIXTURES"), fixture);
    snprintf(path, sizeof path, "%s/task-reference.json", dir);
    cJSON *ref = tu_read_json(path);
    const cJSON *grid = tu_get(ref, "grid");
    const int T = tu_get(grid, "length")->valueint, L = tu_get(ref, "n_layers")->valueint,
              H = tu_get(ref, "n_heads")->valueint;
    group_file(fixture, grid, data, sizeof data);
    cJSON *first = NULL;
    {
        FILE *f = fopen(data, "r");
        char line[8192];
        cr_assert(f && fgets(line, sizeof line, f));
        fclose(f);
        first = cJSON_Parse(line);
    }
    static const char *const abl[] = {"resample", "denoise"}, *const key[] = {"noise", "denoise"};
    for (int a = 0; a < 2; a++) {
        char studies[128];
        snprintf(studies, sizeof studies, "  - patching: {name: grid, direction: %s}\n", key[a]);
        write_plan(fixture, data, abl[a], studies, plan, sizeof plan);
        snprintf(db, sizeof db, "%s/%s-%s.db", tmp, fixture, abl[a]);
        struct hp_sweep_summary sum;
        run_plan(plan, db, NULL, &sum);
        int n_heads = 0;
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++) {
                if (isnan(grid_at(grid, key[a], l, h, 0)))
                    continue;
                n_heads++;
                for (int t = 0; t < T; t++) {
                    char sql[512];
                    snprintf(sql, sizeof sql,
                             "SELECT r.logit_diff FROM sweep_jobs j JOIN results r ON r.variant_id = j.variant_id "
                             "JOIN variant_positions p ON p.variant_id = j.variant_id "
                             "WHERE j.study = 'grid' AND j.layer = %d AND j.unit = %d AND p.position = %d", l, h, t);
                    const double got = sql_num(db, sql), want = grid_at(grid, key[a], l, h, t);
                    cr_assert(fabs(got - want) <= TOL, "%s %s plan: head %d.%d at %d stores %.10g, Hugging Face "
                              "%.10g", fixture, abl[a], l, h, t, got, want);
                }
            }
        cr_assert_eq(sum.n_jobs, 1 + (int64_t)n_heads * T, "%s %s: %lld jobs", fixture, abl[a], (long long)sum.n_jobs);
        cr_assert_eq(sql_num(db, "SELECT count(*) FROM variant_positions"), (double)n_heads * T);
        const cJSON *clean = tu_get(first, "prompt_ids"), *corr = tu_get(first, "corrupt_ids");
        for (int t = 0; t < T; t++) {
            char sql[256];
            snprintf(sql, sizeof sql, "SELECT token FROM patch_tokens WHERE study = 'grid' AND position = %d", t);
            cr_assert_eq((int)sql_num(db, sql), cJSON_GetArrayItem(clean, t)->valueint, "%s %s: token %d", fixture,
                         abl[a], t);
            snprintf(sql, sizeof sql, "SELECT corrupt FROM patch_tokens WHERE study = 'grid' AND position = %d", t);
            cr_assert_eq((int)sql_num(db, sql), cJSON_GetArrayItem(corr, t)->valueint, "%s %s: corrupt token %d",
                         fixture, abl[a], t);
        }
    }
    cJSON_Delete(first);
    cJSON_Delete(ref);
}

Test(patching, a_plan_stores_the_grid_of_hugging_face)
{
    check_plan_grid("gpt2-tiny");
    check_plan_grid("llama-gqa"); /* grouped-query attention */
    check_plan_grid("gpt2-pruned"); /* heads the checkpoint lacks */
}

/* The same rows of a table of results, in one order (each line "layer|unit|position|logit_diff"). */
static char *grid_rows(const char *db)
{
    const char *q = "SELECT j.layer, j.unit, coalesce(p.position, -1), r.logit_diff, r.n_seqs FROM sweep_jobs j "
                    "JOIN results r ON r.variant_id = j.variant_id LEFT JOIN variant_positions p ON "
                    "p.variant_id = j.variant_id WHERE j.study = 'grid' ORDER BY j.ord";
    return tu_rows(db, &q, 1);
}

static volatile int stop_flag;
static int64_t stop_after;

static void stop_at(void *user, const struct hp_sweep_progress *p)
{
    (void)user;
    if (p->done >= stop_after)
        stop_flag = 1;
}

/*
 * A run stopped between windows (as Ctrl-C stops it) and resumed stores what an uninterrupted run stores, to the
 * bit; a merge of it into a new database keeps the positions and the tokens, and the query reads the same grid.
 */
Test(patching, stopped_resumed_and_merged_to_the_same_grid)
{
    char dir[1024], path[1100], data[1200], plan[1300], a[1300], b[1300], m[1300];
    snprintf(dir, sizeof dir, "%s/llama-gqa", getenv("HP_FIXTURES"));
    snprintf(path, sizeof path, "%s/task-reference.json", dir);
    cJSON *ref = tu_read_json(path);
    group_file("llama-gqa", tu_get(ref, "grid"), data, sizeof data);
    write_plan("llama-gqa", data, "resample", "  - patching: {name: grid}\n  - patching: {name: kv, kv: true}\n",
               plan, sizeof plan);
    snprintf(a, sizeof a, "%s/whole.db", tmp);
    snprintf(b, sizeof b, "%s/stopped.db", tmp);
    snprintf(m, sizeof m, "%s/merged.db", tmp);
    struct hp_sweep_summary sum;
    run_plan(plan, a, NULL, &sum);
    int stops = 0;
    for (stop_after = 7;; stop_after += 23) {
        stop_flag = 0;
        struct hp_plan *p;
        struct hp_error err = {0};
        cr_assert_eq(hp_plan_load(plan, &p, &err), HP_OK, "%s", err.msg);
        struct hp_sweep_opts o = {.db_path = b, .threads = 1, .batch = 5, .stop = &stop_flag, .progress = stop_at};
        cr_assert_eq(hp_sweep_run(p, &o, &sum, &err), HP_OK, "%s", err.msg);
        hp_plan_free(p);
        if (!sum.interrupted)
            break;
        stops++;
    }
    cr_assert_gt(stops, 2, "the run was never stopped midway");
    char *x = grid_rows(a), *y = grid_rows(b), *x2 = strdup(x);
    tu_assert_same_text(a, x, b, y); /* frees both */
    int64_t added;
    struct hp_error err = {0};
    const char *in[] = {b};
    cr_assert_eq(hp_store_merge(m, in, 1, &added, &err), HP_OK, "%s", err.msg);
    tu_assert_same_text(a, x2, m, grid_rows(m));
    const char *tq = "SELECT study, position, token, corrupt FROM patch_tokens ORDER BY study, position";
    char *ta = tu_rows(a, &tq, 1), *tm = tu_rows(m, &tq, 1);
    cr_assert_gt(strlen(ta), 10);
    tu_assert_same_text(a, ta, m, tm);
    /* the query on the merged database says what it says on the whole run */
    static char qa[1 << 16], qm[1 << 16];
    char args[2048], scratch[1100];
    snprintf(scratch, sizeof scratch, "%s", tmp);
    snprintf(args, sizeof args, "query patching --db '%s' --format csv", a);
    cr_assert_eq(tu_headprune(NULL, args, scratch, qa, sizeof qa, NULL, 0), 0);
    snprintf(args, sizeof args, "query patching --db '%s' --format csv", m);
    cr_assert_eq(tu_headprune(NULL, args, scratch, qm, sizeof qm, NULL, 0), 0);
    cr_assert_gt(strlen(qa), 100);
    /* columns labelled by position and token, the corrupt one where it differs (no tokenizer here: ids) */
    cr_assert(strstr(qa, "unit,0 #") && strstr(qa, "/#"), "labels: %.300s", qa);
    tu_assert_same_text(a, strdup(qa), m, strdup(qm));
    cJSON_Delete(ref);
}

/* headprune run of plan: exit status 1, one line on stderr holding each of the needles, and no database made. */
static void refused(const char *plan, const char *const *needles, int n)
{
    char db[1200], args[2600], scratch[100], err[4096];
    snprintf(db, sizeof db, "%s/refused.db", tmp);
    snprintf(scratch, sizeof scratch, "%s", tmp);
    snprintf(args, sizeof args, "run '%s' --db '%s'", plan, db);
    cr_assert_eq(tu_headprune(NULL, args, scratch, NULL, 0, err, sizeof err), 1, "%s: %s", plan, err);
    cr_assert(strchr(err, '\n') == err + strlen(err) - 1, "more than one line: %s", err);
    for (int i = 0; i < n; i++)
        cr_assert(strstr(err, needles[i]), "'%s' not in: %s", needles[i], err);
    struct stat sb;
    cr_assert_neq(stat(db, &sb), 0, "%s: a refused run wrote %s", plan, db);
}

Test(patching, bad_input_is_one_line_and_writes_nothing)
{
    char plan[1300], data[1200], all[1200];
    /* rows of several lengths (the fixture's whole task file: twelve rows, nine lengths) */
    snprintf(all, sizeof all, "%s/gpt2-tiny/task.jsonl", getenv("HP_FIXTURES"));
    write_plan("gpt2-tiny", all, "resample", "  - patching: {name: grid}\n", plan, sizeof plan);
    const char *lengths[] = {"task.jsonl: row 2 (line 2) has", "but row 1 (line 1) has", "patching study 'grid'",
                             "one template", "positions: all"};
    refused(plan, lengths, 5);
    /* positions: all takes them, and its variants are the single study's (the same addresses) */
    write_plan("gpt2-tiny", all, "resample", "  - patching: {name: grid, positions: all}\n  - single\n", plan,
               sizeof plan);
    char db[1300];
    snprintf(db, sizeof db, "%s/all.db", tmp);
    struct hp_sweep_summary sum;
    run_plan(plan, db, NULL, &sum);
    cr_assert_eq(sum.n_run, 13, "baseline + 12 heads, %lld run", (long long)sum.n_run);
    cr_assert_eq(sum.n_repeated, 12);
    cr_assert_eq(sql_num(db, "SELECT count(*) FROM variant_positions"), 0);
    /* direction against the plan's ablation */
    snprintf(data, sizeof data, "%s", all);
    write_plan("gpt2-tiny", data, "resample", "  - patching: {name: grid, direction: denoise}\n", plan, sizeof plan);
    const char *dir[] = {"direction: denoise", "needs 'ablation: denoise', not resample"};
    refused(plan, dir, 2);
    write_plan("gpt2-tiny", data, "resample", "  - patching: {name: grid, positions: some}\n", plan, sizeof plan);
    const char *word[] = {"positions", "each", "all"};
    refused(plan, word, 3);
    /* resample without corrupt prompts: the plain task rows of ids */
    snprintf(data, sizeof data, "%s/plain.jsonl", tmp);
    const char *plain = "{\"ids\": [1, 2, 3, 4]}\n{\"ids\": [5, 6, 7, 8]}\n";
    tu_spit(data, plain, strlen(plain));
    write_plan("gpt2-tiny", data, "resample", "  - patching: {name: grid}\n", plan, sizeof plan);
    const char *rows[] = {"plain.jsonl", "not task rows"};
    refused(plan, rows, 2);
}

// --- attribution patching (issue 25 item 5) --------------------------------------------------------

/*
 * Under resample and denoise, the gradient pass's estimate at the unmasked model is Nanda's attribution patching,
 * sum over rows and positions of <z_other - z_run, dM/dz_run> per head (M = -logit_diff or the answer's loss, a
 * mean over rows): against torch autograd in float64 (tools/gen_atp_reference.py) within 1e-5 absolute plus 1e-4
 * of the largest estimate (float32 against float64, through every layer's backward).
 */
static void check_atp(const char *fixture)
{
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/%s", getenv("HP_FIXTURES"), fixture);
    snprintf(path, sizeof path, "%s/atp-reference.json", dir);
    cJSON *ref = tu_read_json(path);
    snprintf(path, sizeof path, "%s/task.jsonl", dir);
    struct hp_model *m;
    struct hp_error err = {0};
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    const struct hp_model_info *in = hp_model_get_info(m);
    const int L = in->n_layers, H = in->n_heads;
    static const enum hp_ablation abl[] = {HP_ABLATE_RESAMPLE, HP_ABLATE_DENOISE};
    static const enum hp_metric met[] = {HP_METRIC_LOGIT_DIFF, HP_METRIC_LOSS};
    double *grad = malloc(sizeof(double) * L * H), *atp = malloc(sizeof(double) * L * H);
    for (int a = 0; a < 2; a++) {
        struct hp_data *d;
        struct hp_evaluator *ev;
        cr_assert_eq(hp_data_load(path, 0, &d, &err), HP_OK, "%s", err.msg);
        cr_assert_eq(hp_ablation_bind_data(abl[a], d, &err), HP_OK, "%s", err.msg);
        cr_assert_eq(hp_evaluator_new(m, d, &ev, &err), HP_OK, "%s", err.msg);
        for (int k = 0; k < 2; k++) {
            double loss;
            cr_assert_eq(hp_evaluator_grad_seq(ev, met[k], NULL, abl[a], grad, atp, NULL, &loss, &err), HP_OK, "%s",
                         err.msg);
            const cJSON *want = tu_get(tu_get(ref, hp_ablation_name(abl[a])), k ? "loss" : "logit_diff");
            double scale = 0;
            for (int l = 0; l < L; l++)
                for (int h = 0; h < H; h++)
                    scale = fmax(scale, fabs(cJSON_GetArrayItem(cJSON_GetArrayItem(want, l), h)->valuedouble));
            cr_assert_gt(scale, 1e-3, "%s: every estimate is about 0", fixture);
            for (int l = 0; l < L; l++)
                for (int h = 0; h < H; h++) {
                    const double w = cJSON_GetArrayItem(cJSON_GetArrayItem(want, l), h)->valuedouble,
                                 got = atp[l * H + h];
                    cr_assert(fabs(got - w) <= 1e-5 + 1e-4 * scale, "%s %s, M = %s: head %d.%d's estimate %.9g, "
                              "torch %.9g (diff %.3g)", fixture, hp_ablation_name(abl[a]), k ? "loss" : "-logit_diff",
                              l, h, got, w, fabs(got - w));
                }
        }
        hp_evaluator_free(ev);
        hp_data_free(d);
    }
    free(grad), free(atp);
    hp_model_close(m);
    cJSON_Delete(ref);
}

Test(patching, attribution_under_resample_is_nandas_estimate_by_torch_autograd)
{
    static const char *const with_ref[] = {"gpt2-tiny", "gpt2-untied", "llama-gqa", "llama-mlp-bias", "qwen2-bias",
                                           "mistral-window", "stories260K", "qwen3-qknorm", "phi3-fused",
                                           "neox-parallel", "neox-sequential", "olmo2-post-norms",
                                           "gemma2-softcap", "gemma3-local"};
    for (size_t i = 0; i < sizeof with_ref / sizeof *with_ref; i++)
        check_atp(with_ref[i]);
}

/* A plan's attribution study under resample stores those estimates, and `query attribution` sets them against the
 * exact resample effects of its single study. */
Test(patching, a_plan_sets_attribution_patching_against_exact_patching)
{
    char dir[1024], path[1100], plan[1300], db[1300];
    snprintf(dir, sizeof dir, "%s/llama-gqa", getenv("HP_FIXTURES"));
    snprintf(path, sizeof path, "%s/atp-reference.json", dir);
    cJSON *ref = tu_read_json(path);
    snprintf(path, sizeof path, "%s/task.jsonl", dir);
    write_plan("llama-gqa", path, "resample", "  - attribution\n  - single\n", plan, sizeof plan);
    snprintf(db, sizeof db, "%s/atp.db", tmp);
    struct hp_sweep_summary sum;
    run_plan(plan, db, NULL, &sum);
    const cJSON *want = tu_get(tu_get(ref, "resample"), "logit_diff");
    const int L = tu_get(ref, "n_layers")->valueint, H = tu_get(ref, "n_heads")->valueint;
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++) {
            char sql[256];
            snprintf(sql, sizeof sql, "SELECT score FROM unit_scores WHERE study = 'attribution' AND layer = %d AND "
                     "unit = %d", l, h);
            const double got = sql_num(db, sql), w = cJSON_GetArrayItem(cJSON_GetArrayItem(want, l), h)->valuedouble;
            cr_assert(fabs(got - w) <= 1e-4, "head %d.%d: stored estimate %.9g, torch %.9g", l, h, got, w);
        }
    static char out[1 << 16];
    char args[2048], scratch[100];
    snprintf(scratch, sizeof scratch, "%s", tmp);
    snprintf(args, sizeof args, "query attribution --db '%s' --format json", db);
    cr_assert_eq(tu_headprune(NULL, args, scratch, out, sizeof out, NULL, 0), 0);
    cJSON *j = cJSON_Parse(out); // the summary row, all, apart from the heads (CSV holds the heads alone)
    const cJSON *summary = cJSON_GetObjectItemCaseSensitive(j, "summary");
    cr_assert(cJSON_GetArraySize(summary) == 1 &&
              strcmp(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(summary, 0), "label")->valuestring, "all") == 0,
              "no summary row all: %s", out);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "rows")), L * H, "rows: %s", out);
    cJSON_Delete(j);
    cJSON_Delete(ref);
}
