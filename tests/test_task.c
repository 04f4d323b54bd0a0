/*
 * test_task.c -- task rows (docs/tasks.md) are scored at their answer position.
 *
 * The second code path is the labels form of the same rows: ids = prompt +
 * [answer], labels -100 everywhere but the last real position, which holds
 * the answer (a causal model's position t is scored against labels[t + 1]).
 * loss, acc and the scored-item count must agree to 1e-12 on gpt2-tiny and
 * llama-gqa (GQA), unmasked and masked, on the plain path, the reuse path
 * (hp_evaluator_run_many) and the gradient path (hp_evaluator_grad: value and
 * gradient); and the reuse path agrees with the plain path. Task rows on an
 * encoder are refused when bound. A plan over task rows stores what the
 * plain path gives. The data digest covers the task fields and leaves other
 * data's digest as main's build gave it. Under mean ablation (whose means are over
 * the real tokens, one more per row in the labels form) only reuse against
 * plain is checked.
 */
#define _DEFAULT_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "headprune.h"
#include "testutil.h"

static char tmp[64];

static void setup(void)
{
    tu_mkdtemp(tmp, sizeof tmp, "task");
}

static void teardown(void)
{
    tu_rmrf(tmp);
}

TestSuite(task, .init = setup, .fini = teardown);

#define N_ROWS 6

/* Rows of lengths 2..7 with ids from a fixed LCG in [1, 97), written as a task file (task.jsonl, with wrong
 * and corrupt) and as the labels form (labels.jsonl, one longer). */
static void write_pair(char *task, char *labels, size_t n)
{
    snprintf(task, n, "%s/task.jsonl", tmp);
    snprintf(labels, n, "%s/labels.jsonl", tmp);
    FILE *ft = fopen(task, "w"), *fl = fopen(labels, "w");
    cr_assert(ft && fl);
    uint32_t x = 12345;
#define NEXT() ((x = x * 1103515245u + 12345u), (int)(1 + (x >> 16) % 96))
    int longest = N_ROWS + 1, T = longest + 1;
    for (int r = 0; r < N_ROWS; r++) {
        int len = 2 + r, p[16];
        for (int i = 0; i < len; i++)
            p[i] = NEXT();
        int answer = NEXT(), wrong = NEXT();
        fprintf(ft, "{\"prompt_ids\": [");
        for (int i = 0; i < len; i++)
            fprintf(ft, "%s%d", i ? ", " : "", p[i]);
        fprintf(ft, "], \"answer_id\": %d, \"wrong_id\": %d, \"corrupt_ids\": [", answer, wrong);
        for (int i = 0; i < len; i++)
            fprintf(ft, "%s%d", i ? ", " : "", i == len - 1 ? wrong : p[i]);
        fprintf(ft, "]}\n");
        fprintf(fl, "{\"ids\": [");
        for (int i = 0; i < T; i++)
            fprintf(fl, "%s%d", i ? ", " : "", i < len ? p[i] : i == len ? answer : 0);
        fprintf(fl, "], \"labels\": [");
        for (int i = 0; i < T; i++)
            fprintf(fl, "%s%d", i ? ", " : "", i == len ? answer : -100);
        fprintf(fl, "], \"attention_mask\": [");
        for (int i = 0; i < T; i++)
            fprintf(fl, "%s%d", i ? ", " : "", i <= len);
        fprintf(fl, "]}\n");
    }
#undef NEXT
    fclose(ft);
    fclose(fl);
}

struct run {
    struct hp_model *m;
    struct hp_data *d;
    struct hp_evaluator *ev;
};

static void open_run(struct run *r, const char *model, const char *data, int seq_len)
{
    char dir[1024];
    struct hp_error err = {0};
    snprintf(dir, sizeof dir, "%s/%s", getenv("HP_FIXTURES"), model);
    cr_assert_eq(hp_model_open(dir, &r->m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_data_load(data, seq_len, &r->d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_new(r->m, r->d, &r->ev, &err), HP_OK, "%s", err.msg);
}

static void close_run(struct run *r)
{
    hp_evaluator_free(r->ev);
    hp_data_free(r->d);
    hp_model_close(r->m);
}

static void near(double a, double b, double tol, const char *what, const char *model, const char *mask)
{
    cr_assert(isfinite(a) && isfinite(b) && fabs(a - b) <= tol, "%s, mask '%s': %s %.17g vs %.17g (diff %.3g, tol %g)",
              model, mask, what, a, b, fabs(a - b), tol);
}

/* plain and reuse metrics of the two data forms, and the gradient's value and gradient, all within 1e-12 */
static void compare_forms(const char *model, int task_seq_len)
{
    char task[1024], labels[1024];
    write_pair(task, labels, sizeof task);
    struct run a, b;
    open_run(&a, model, task, task_seq_len);
    open_run(&b, model, labels, 0);
    cr_assert_not_null(a.d->task);
    const struct hp_model_info *in = hp_model_get_info(a.m);
    static const char *const specs[] = {"", "0.1", "1.0,2.3", "0.0,0.1,1.2,2.1"};
    enum { NS = sizeof specs / sizeof *specs };
    struct hp_mask *mk[NS];
    struct hp_error err = {0};
    for (int i = 0; i < NS; i++)
        cr_assert_eq(hp_mask_parse(specs[i], false, in, &mk[i], &err), HP_OK, "%s", err.msg);
    /* zero ablation only: mean ablation's means are over the real tokens, and the labels form has one more
     * per row (the answer), so its means differ by design */
    {
        enum hp_ablation ab = HP_ABLATE_ZERO;
        struct hp_metrics *ra[NS], *rb[NS];
        cr_assert_eq(hp_evaluator_run_many(a.ev, (const struct hp_mask *const *)mk, NS, ab, ra, &err), HP_OK, "%s",
                     err.msg);
        cr_assert_eq(hp_evaluator_run_many(b.ev, (const struct hp_mask *const *)mk, NS, ab, rb, &err), HP_OK, "%s",
                     err.msg);
        hp_evaluator_set_plain(a.ev, true);
        hp_evaluator_set_plain(b.ev, true);
        for (int i = 0; i < NS; i++) {
            struct hp_metrics *pa, *pb;
            cr_assert_eq(hp_evaluator_run(a.ev, mk[i], ab, &pa, &err), HP_OK, "%s", err.msg);
            cr_assert_eq(hp_evaluator_run(b.ev, mk[i], ab, &pb, &err), HP_OK, "%s", err.msg);
            cr_assert_eq(pa->n_tokens, N_ROWS, "%s: %lld scored items, want one per row", model,
                         (long long)pa->n_tokens);
            cr_assert_eq(pb->n_tokens, N_ROWS);
            cr_assert_eq(ra[i]->n_tokens, N_ROWS);
            near(pa->loss, pb->loss, 1e-12, "plain loss", model, specs[i]);
            near(pa->acc, pb->acc, 1e-12, "plain acc", model, specs[i]);
            near(pa->kl, pb->kl, 1e-12, "plain kl", model, specs[i]);
            near(ra[i]->loss, rb[i]->loss, 1e-12, "reuse loss", model, specs[i]);
            near(ra[i]->acc, rb[i]->acc, 1e-12, "reuse acc", model, specs[i]);
            for (int s = 0; s < N_ROWS; s++) {
                near(pa->seq_loss[s], pb->seq_loss[s], 1e-12, "a row's plain loss", model, specs[i]);
                near(ra[i]->seq_loss[s], rb[i]->seq_loss[s], 1e-12, "a row's reuse loss", model, specs[i]);
            }
            /* reuse against plain: up to float rounding, as test_reuse.c holds them */
            near(ra[i]->loss, pa->loss, 1e-6, "reuse vs plain loss", model, specs[i]);
            near(ra[i]->acc, pa->acc, 1e-12, "reuse vs plain acc", model, specs[i]);
            hp_metrics_free(pa);
            hp_metrics_free(pb);
            hp_metrics_free(ra[i]);
            hp_metrics_free(rb[i]);
        }
        hp_evaluator_set_plain(a.ev, false);
        hp_evaluator_set_plain(b.ev, false);
        for (int i = 0; i < NS; i++) {
            int H = in->n_layers * in->n_heads;
            double ga[64], gb[64], va, vb;
            cr_assert_leq(H, 64);
            cr_assert_eq(hp_evaluator_grad(a.ev, HP_METRIC_LOSS, mk[i], ab, ga, NULL, &va, &err), HP_OK, "%s",
                         err.msg);
            cr_assert_eq(hp_evaluator_grad(b.ev, HP_METRIC_LOSS, mk[i], ab, gb, NULL, &vb, &err), HP_OK, "%s",
                         err.msg);
            near(va, vb, 1e-12, "gradient pass loss", model, specs[i]);
            for (int h = 0; h < H; h++)
                near(ga[h], gb[h], 1e-12, "dloss/dgate", model, specs[i]);
        }
    }
    /* mean ablation (means over the task rows' real tokens): the reuse path agrees with the plain path */
    struct hp_metrics *rm[NS];
    cr_assert_eq(hp_evaluator_run_many(a.ev, (const struct hp_mask *const *)mk, NS, HP_ABLATE_MEAN, rm, &err), HP_OK,
                 "%s", err.msg);
    hp_evaluator_set_plain(a.ev, true);
    for (int i = 0; i < NS; i++) {
        struct hp_metrics *pm;
        cr_assert_eq(hp_evaluator_run(a.ev, mk[i], HP_ABLATE_MEAN, &pm, &err), HP_OK, "%s", err.msg);
        near(rm[i]->loss, pm->loss, 1e-6, "mean-ablated reuse vs plain loss", model, specs[i]);
        near(rm[i]->acc, pm->acc, 1e-12, "mean-ablated reuse vs plain acc", model, specs[i]);
        cr_assert_eq(pm->n_tokens, N_ROWS);
        hp_metrics_free(pm);
        hp_metrics_free(rm[i]);
    }
    for (int i = 0; i < NS; i++)
        hp_mask_free(mk[i]);
    close_run(&a);
    close_run(&b);
}

Test(task, answer_position_scores_as_the_labels_form_gpt2)
{
    compare_forms("gpt2-tiny", N_ROWS + 2);
    compare_forms("gpt2-tiny", 0);
}

Test(task, answer_position_scores_as_the_labels_form_llama_gqa)
{
    compare_forms("llama-gqa", N_ROWS + 2);
    compare_forms("llama-gqa", 0);
}

Test(task, task_rows_on_an_encoder_are_refused_at_bind)
{
    char task[1024], labels[1024], dir[1024];
    write_pair(task, labels, sizeof task);
    snprintf(dir, sizeof dir, "%s/bert-mlm", getenv("HP_FIXTURES"));
    struct hp_model *m;
    struct hp_data *d;
    struct hp_evaluator *ev = NULL;
    struct hp_error err = {0};
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_data_load(task, 0, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_neq(hp_evaluator_new(m, d, &ev, &err), HP_OK, "task rows bound to an encoder");
    cr_assert_null(ev);
    cr_assert(strncmp(err.msg, task, strlen(task)) == 0 && strstr(err.msg, "need a causal LM") &&
                  !strchr(err.msg, '\n'),
              "%s", err.msg);
    hp_data_free(d);
    hp_model_close(m);
}

/* The number after "key": in a JSON text, as written (the CLI prints doubles round-trip exact). */
static void json_field(const char *json, const char *key, char *out, size_t n)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = strstr(json, k);
    cr_assert_not_null(p, "no %s in %s", key, json);
    p += strlen(k);
    size_t i = 0;
    while (p[i] && p[i] != ',' && p[i] != '}' && i + 1 < n)
        i++;
    memcpy(out, p, i);
    out[i] = 0;
}

/* headprune eval --json: the same loss and acc from both forms (masked and not); an encoder: exit 1, one line */
Test(task, eval_cli_scores_the_answer_and_refuses_an_encoder)
{
    char task[1024], labels[1024], args[4096], out[2][8192], err[4096];
    write_pair(task, labels, sizeof task);
    static const char *const masks[] = {"", "--mask 1.2,2.0"};
    for (int k = 0; k < 2; k++) {
        for (int f = 0; f < 2; f++) {
            snprintf(args, sizeof args, "eval --model '%s/llama-gqa' --data '%s' %s --json", getenv("HP_FIXTURES"),
                     f ? labels : task, masks[k]);
            cr_assert_eq(tu_headprune(NULL, args, tmp, out[f], sizeof out[f], err, sizeof err), 0, "%s", err);
        }
        static const char *const keys[] = {"loss", "acc", "kl"};
        for (int i = 0; i < 3; i++) {
            char a[64], b[64];
            json_field(out[0], keys[i], a, sizeof a);
            json_field(out[1], keys[i], b, sizeof b);
            cr_assert(fabs(strtod(a, NULL) - strtod(b, NULL)) <= 1e-12, "eval %s: %s %s (task) vs %s (labels)",
                      masks[k], keys[i], a, b);
        }
    }
    snprintf(args, sizeof args, "eval --model '%s/bert-mlm' --data '%s'", getenv("HP_FIXTURES"), task);
    cr_assert_eq(tu_headprune(NULL, args, tmp, NULL, 0, err, sizeof err), 1);
    cr_assert(strstr(err, "need a causal LM") && strchr(err, '\n') == err + strlen(err) - 1, "%s", err);
}

static void digest_of(const char *path, char hex[HP_DIGEST_HEX])
{
    struct hp_data *d;
    struct hp_error err = {0};
    cr_assert_eq(hp_data_load(path, 0, &d, &err), HP_OK, "%s", err.msg);
    hp_digest_data(d, hex);
    hp_data_free(d);
}

/* The digest covers answer, wrong, pos and corrupt: changing any one changes it; line numbers do not. */
Test(task, digest_covers_the_task_fields)
{
    static const char *const rows[] = {
        "{\"prompt_ids\": [5, 6, 7], \"answer_id\": 8, \"wrong_id\": 9, \"corrupt_ids\": [5, 6, 1]}\n",
        "{\"prompt_ids\": [5, 6, 7], \"answer_id\": 3, \"wrong_id\": 9, \"corrupt_ids\": [5, 6, 1]}\n",
        "{\"prompt_ids\": [5, 6, 7], \"answer_id\": 8, \"wrong_id\": 2, \"corrupt_ids\": [5, 6, 1]}\n",
        "{\"prompt_ids\": [5, 6, 7], \"answer_id\": 8, \"wrong_id\": 9, \"corrupt_ids\": [5, 4, 1]}\n",
        "{\"prompt_ids\": [5, 6, 7], \"answer_id\": 8, \"wrong_id\": 9}\n",
        "{\"prompt_ids\": [5, 6, 7], \"answer_id\": 8, \"corrupt_ids\": [5, 6, 1]}\n",
    };
    enum { N = sizeof rows / sizeof *rows };
    char hex[N][HP_DIGEST_HEX], path[1024];
    for (int i = 0; i < N; i++) {
        snprintf(path, sizeof path, "%s/d%d.jsonl", tmp, i);
        tu_spit(path, rows[i], strlen(rows[i]));
        digest_of(path, hex[i]);
        for (int j = 0; j < i; j++)
            cr_assert_str_neq(hex[i], hex[j], "rows %d and %d digest the same: %s", j, i, hex[i]);
    }
    /* the same rows after a blank line: the same data, the same digest */
    char text[512];
    snprintf(text, sizeof text, "\n%s", rows[0]);
    snprintf(path, sizeof path, "%s/blank.jsonl", tmp);
    tu_spit(path, text, strlen(text));
    char again[HP_DIGEST_HEX];
    digest_of(path, again);
    cr_assert_str_eq(again, hex[0]);
    /* the answer position is covered too: pos is not implied by the ids when padded to a given seq_len */
    struct hp_data *d;
    struct hp_error err = {0};
    snprintf(path, sizeof path, "%s/d0.jsonl", tmp);
    cr_assert_eq(hp_data_load(path, 0, &d, &err), HP_OK, "%s", err.msg);
    d->task->pos[0] = 1;
    hp_digest_data(d, again);
    cr_assert_str_neq(again, hex[0]);
    hp_data_free(d);
}

/* Non-task data digests as before task rows existed: the values main's build (3ed960a) gives for these
 * fixtures (ids only; labels and a mask; sequence labels), computed with its hp_digest_data. */
Test(task, digest_of_other_data_is_unchanged)
{
    static const char *const want[][2] = {
        {"gpt2-tiny/data.npy", "08a9023f8664776a3f0cf55daaa952c0"},
        {"bert-mlm/data.jsonl", "32cb3915bfbc00ef43384ac200e86b3e"},
        {"bert-cls/data.jsonl", "cf414d667c8eec78275feba7282dfd9b"},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        char path[1024], hex[HP_DIGEST_HEX];
        snprintf(path, sizeof path, "%s/%s", getenv("HP_FIXTURES"), want[i][0]);
        digest_of(path, hex);
        cr_assert_str_eq(hex, want[i][1], "%s digests to %s, was %s", want[i][0], hex, want[i][1]);
    }
}

/* The reuse path through a plan: `headprune run` of a single-head study over task rows stores, for every
 * variant, the loss and acc the plain path gives (1e-6: float rounding, as test_reuse.c holds them), one
 * scored item per row. */
Test(task, a_plan_over_task_rows_stores_what_the_plain_path_gives)
{
    char task[1024], labels[1024], plan[1100], db[1100], args[4096], err[4096];
    write_pair(task, labels, sizeof task);
    snprintf(plan, sizeof plan, "%s/plan.yaml", tmp);
    snprintf(db, sizeof db, "%s/task.db", tmp);
    char yaml[4096];
    snprintf(yaml, sizeof yaml, "name: task\nmodel: %s/llama-gqa\ndata: %s\nmetric: loss\nstudies:\n  - single\n",
             getenv("HP_FIXTURES"), task);
    tu_spit(plan, yaml, strlen(yaml));
    snprintf(args, sizeof args, "run '%s' --db '%s' --quiet --threads 1", plan, db);
    cr_assert_eq(tu_headprune(NULL, args, tmp, NULL, 0, err, sizeof err), 0, "%s", err);

    struct run a;
    open_run(&a, "llama-gqa", task, 0);
    hp_evaluator_set_plain(a.ev, true);
    const struct hp_model_info *in = hp_model_get_info(a.m);
    sqlite3 *h;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(h, "SELECT v.mask_text, r.loss, r.acc, r.n_tokens FROM results r JOIN variants v "
                                       "ON v.id = r.variant_id",
                                    -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(h));
    int n = 0;
    struct hp_error e = {0};
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *mask = (const char *)sqlite3_column_text(st, 0);
        struct hp_mask *mk;
        struct hp_metrics *mt;
        cr_assert_eq(hp_mask_parse(mask ? mask : "", false, in, &mk, &e), HP_OK, "%s", e.msg);
        cr_assert_eq(hp_evaluator_run(a.ev, mk, HP_ABLATE_ZERO, &mt, &e), HP_OK, "%s", e.msg);
        near(sqlite3_column_double(st, 1), mt->loss, 1e-6, "stored vs plain loss", "llama-gqa", mask ? mask : "");
        near(sqlite3_column_double(st, 2), mt->acc, 1e-12, "stored vs plain acc", "llama-gqa", mask ? mask : "");
        cr_assert_eq(sqlite3_column_int64(st, 3), N_ROWS, "mask %s: %lld scored items", mask,
                     (long long)sqlite3_column_int64(st, 3));
        hp_metrics_free(mt);
        hp_mask_free(mk);
        n++;
    }
    sqlite3_finalize(st);
    sqlite3_close(h);
    cr_assert_geq(n, in->n_layers * in->n_heads, "only %d results stored", n);
    close_run(&a);
}

/* A gates study's split keeps the task: the held-out and training rows carry their answers, so every stored
 * result scores one item per held-out row (not every next token of the prompts). */
Test(task, a_gates_split_keeps_the_answers)
{
    char task[1024], labels[1024], plan[1100], db[1100], args[4096], err[4096];
    write_pair(task, labels, sizeof task);
    snprintf(plan, sizeof plan, "%s/gates.yaml", tmp);
    snprintf(db, sizeof db, "%s/gates.db", tmp);
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "name: task-gates\nmodel: %s/gpt2-tiny\ndata: %s\nmetric: loss\nstudies:\n  - single\n"
             "  - gates: {lambda: [0.01], split: 2, steps: 2}\n",
             getenv("HP_FIXTURES"), task);
    tu_spit(plan, yaml, strlen(yaml));
    snprintf(args, sizeof args, "run '%s' --db '%s' --quiet --threads 1", plan, db);
    cr_assert_eq(tu_headprune(NULL, args, tmp, NULL, 0, err, sizeof err), 0, "%s", err);
    sqlite3 *h;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(h, "SELECT count(*), min(n_tokens), max(n_tokens), min(n_seqs), max(n_seqs) "
                                       "FROM results", -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(h));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_gt(sqlite3_column_int(st, 0), 0);
    for (int c = 1; c <= 4; c++)
        cr_assert_eq(sqlite3_column_int(st, c), N_ROWS - 2, "column %d: %d, want %d held-out rows, one item each", c,
                     sqlite3_column_int(st, c), N_ROWS - 2);
    sqlite3_finalize(st);
    sqlite3_close(h);
}
