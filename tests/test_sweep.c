/*
 * test_sweep.c -- sweeps survive what happens to long runs.
 *
 *  - killed with SIGKILL at random moments, dozens of times, then resumed:
 *    the database holds exactly what an uninterrupted run writes (every
 *    variant's metrics and per-sequence values, every sweep job), passes
 *    PRAGMA integrity_check, and has nothing twice;
 *  - Ctrl-C stops cleanly (exit 130) and the run resumes;
 *  - two shards into two databases, merged (twice), equal one run;
 *  - two workers sharing one database equal one run;
 *  - a disk that fills: exit 1, a clear message, earlier results intact;
 *  - one thread or two: the same numbers, bit for bit;
 *  - the gradient studies against independent references, and refused on a
 *    model without a loss.
 * (Gradients and unit scores are part of what "the same results" compares.)
 *
 * Runs the headprune binary on tests/plans/sweep.yaml (all study kinds on the
 * tiny llama-gqa fixture, ~160 jobs in ~0.2 s).
 */
#define _DEFAULT_SOURCE
#include <criterion/criterion.h>

#include "testutil.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hash.h"

static char tmp[64], plan[1024], small_plan[1024];

static void setup(void)
{
    tu_mkdtemp(tmp, sizeof tmp, "sweep");
    snprintf(plan, sizeof plan, "%s/plans/sweep.yaml", getenv("HP_TESTS"));
    snprintf(small_plan, sizeof small_plan, "%s/plans/sweep-small.yaml", getenv("HP_TESTS"));
}

static void teardown(void)
{
    tu_rmrf(tmp);
}

TestSuite(sweep, .init = setup, .fini = teardown, .timeout = 600);

static const char *g_threads = "1";
/* small batches: results land every 8 variants, so kills and Ctrl-C fall between writes often */
static const char *g_batch = "8";

/* Start `headprune run PLAN --db DB [--shard extra]` with output to /dev/null. */
static pid_t start(const char *p, const char *db, const char *extra)
{
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        freopen("/dev/null", "w", stdout);
        freopen("/dev/null", "w", stderr);
        const char *hp = getenv("HP_HEADPRUNE");
        const char *argv[16] = {hp, "run", p, "--db", db, "--batch", g_batch, "--quiet"};
        int n = 8;
        if (g_threads) { /* NULL: the default, threads matched to idle CPUs */
            argv[n++] = "--threads";
            argv[n++] = g_threads;
        }
        if (extra) {
            argv[n++] = "--shard";
            argv[n++] = extra;
        }
        execv(hp, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static int finish(pid_t pid)
{
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int run(const char *p, const char *db, const char *shard)
{
    return finish(start(p, db, shard));
}

static void path(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", tmp, name);
}

/* A canonical text dump of everything a sweep's results consist of. */
static char *dump(const char *db)
{
    sqlite3 *h;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    const char *queries[] = {
        "SELECT key, mask_text, n_ablated, ablation, quote(mask) FROM variants ORDER BY key",
        "SELECT v.key, printf('%!.17g %!.17g %!.17g %!.17g', r.loss, r.ppl, r.acc, r.kl), r.n_tokens, r.n_seqs "
        "FROM results r JOIN variants v ON v.id = r.variant_id ORDER BY v.key",
        "SELECT v.key, q.seq, printf('%!.17g %!.17g %!.17g', q.loss, q.acc, q.kl), q.n_tokens "
        "FROM seq_results q JOIN variants v ON v.id = q.variant_id ORDER BY v.key, q.seq",
        "SELECT s.key, j.ord, j.study, j.kind, j.kv, j.label, j.layer, j.unit, j.unit2, j.step, j.sample, j.k, v.key "
        "FROM sweep_jobs j JOIN sweeps s ON s.id = j.sweep_id JOIN variants v ON v.id = j.variant_id "
        "ORDER BY s.key, j.ord",
        "SELECT count(*) FROM variants WHERE id NOT IN (SELECT variant_id FROM results)",
        "SELECT key, mask_text, ablation, n_layers, n_heads, n_seqs, printf('%!.17g', loss), hex(grad), hex(atp), "
        "hex(seq_grad), from_layer FROM gradients ORDER BY key",
        "SELECT s.key, u.study, u.kind, u.kv, u.step, u.layer, u.unit, u.label, printf('%!.17g %!.17g', u.score, u.raw), "
        "u.normalize, g.key, u.estimator, u.base FROM unit_scores u JOIN sweeps s ON s.id = u.sweep_id "
        "JOIN gradients g ON g.id = u.gradient_id ORDER BY s.key, u.study, u.step, u.layer, u.unit",
        "SELECT s.key, x.study, x.kv, x.units, x.k, x.estimator, x.evaluated, x.audits, x.population, x.audited, "
        "x.missed_max, printf('%!.17g', x.confidence) FROM screens x JOIN sweeps s ON s.id = x.sweep_id "
        "ORDER BY s.key, x.study",
    };
    char *out = tu_rows(db, queries, sizeof queries / sizeof *queries);
    sqlite3_stmt *st;
    sqlite3_prepare_v2(h, "PRAGMA integrity_check", -1, &st, NULL);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 0), "ok", "%s fails PRAGMA integrity_check", db);
    sqlite3_finalize(st);
    sqlite3_close(h);
    return out;
}

static long count(const char *db, const char *q)
{
    sqlite3 *h;
    sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(h, q, -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    long n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    return n;
}

static void assert_same(const char *a, const char *b)
{
    tu_assert_same_text(a, dump(a), b, dump(b));
}

static double g_ref_seconds; /* how long the uninterrupted run took */

static char *reference(void)
{
    static char ref[128];
    path(ref, sizeof ref, "ref.db");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert_eq(run(plan, ref, NULL), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    g_ref_seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    cr_assert_gt(count(ref, "SELECT count(*) FROM sweep_jobs"), 150);
    return ref;
}

Test(sweep, rerun_skips_finished_jobs)
{
    char *ref = reference();
    long before = count(ref, "SELECT count(*) FROM results");
    char *d0 = dump(ref);
    cr_assert_eq(run(plan, ref, NULL), 0);
    cr_assert_eq(count(ref, "SELECT count(*) FROM results"), before);
    char *d1 = dump(ref);
    cr_assert_str_eq(d0, d1, "a second run changed the results");
    free(d0);
    free(d1);
}

Test(sweep, sigkill_at_random_moments_then_resume_equals_uninterrupted)
{
    char *ref = reference();
    char db[128];
    path(db, sizeof db, "killed.db");
    /* kill at a random moment within half an uninterrupted run's duration
     * (startup, evaluation or writing) until a run gets to finish by itself */
    srand(12345);
    long span_us = (long)(g_ref_seconds * 0.5e6) + 1;
    int killed_mid_run = 0, runs = 0, rc = -1;
    while (rc != 0 && runs < 400) {
        pid_t pid = start(plan, db, NULL);
        long us = rand() % span_us;
        struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        rc = finish(pid);
        runs++;
        killed_mid_run += rc == 128 + SIGKILL;
        cr_assert(rc == 0 || rc == 128 + SIGKILL, "run %d exited %d", runs, rc);
        if (rc == 0 && killed_mid_run < 10) {
            /* finished before enough kills landed: start over, killing sooner */
            char cmd[512];
            snprintf(cmd, sizeof cmd, "rm -f '%s' '%s-wal' '%s-shm'", db, db, db);
            cr_assert_eq(system(cmd), 0);
            span_us = span_us / 2 + 1;
            killed_mid_run = 0;
            rc = -1;
        }
    }
    cr_log_info("%d runs, %d killed mid-run (kills within %ld us)", runs, killed_mid_run, span_us);
    cr_assert_geq(killed_mid_run, 10, "too few kills landed during a run to test anything");
    cr_assert_gt(count(db, "SELECT count(*) FROM results"), 0, "no kill left any finished result");
    cr_assert_eq(run(plan, db, NULL), 0);
    assert_same(ref, db);
}

Test(sweep, ctrl_c_stops_cleanly_and_resumes)
{
    char *ref = reference();
    char db[128];
    path(db, sizeof db, "int.db");
    int interrupted = 0;
    for (int i = 0; i < 10; i++) {
        pid_t pid = start(plan, db, NULL);
        struct timespec ts = {0, 20000000L + i * 5000000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGINT);
        int rc = finish(pid);
        cr_assert(rc == 130 || rc == 0 || rc == 128 + SIGINT, "exit %d after Ctrl-C", rc);
        interrupted += rc == 130;
    }
    cr_assert_gt(interrupted, 0, "no Ctrl-C landed during a run");
    cr_assert_eq(run(plan, db, NULL), 0);
    assert_same(ref, db);
}

Test(sweep, shards_merged_equal_one_run)
{
    char *ref = reference();
    char a[128], b[128], m[128];
    path(a, sizeof a, "s1.db");
    path(b, sizeof b, "s2.db");
    path(m, sizeof m, "merged.db");
    pid_t p1 = start(plan, a, "1/2"), p2 = start(plan, b, "2/2");
    cr_assert_eq(finish(p1), 0);
    cr_assert_eq(finish(p2), 0);
    cr_assert_lt(count(b, "SELECT count(*) FROM sweep_jobs"), count(ref, "SELECT count(*) FROM sweep_jobs"));
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s merge %s %s %s >/dev/null", getenv("HP_HEADPRUNE"), m, a, b);
    cr_assert_eq(system(cmd), 0);
    assert_same(ref, m);
    snprintf(cmd, sizeof cmd, "%s merge %s %s %s > %s/again.txt", getenv("HP_HEADPRUNE"), m, a, b, tmp);
    cr_assert_eq(system(cmd), 0, "merging again failed");
    assert_same(ref, m);
    char again[160], line[256] = "";
    snprintf(again, sizeof again, "%s/again.txt", tmp);
    FILE *f = fopen(again, "r");
    cr_assert(fgets(line, sizeof line, f));
    fclose(f);
    cr_assert(strstr(line, ": 0 new results"), "second merge reported: %s", line);
}

Test(sweep, two_workers_share_one_database)
{
    char *ref = reference();
    char db[128];
    path(db, sizeof db, "shared.db");
    pid_t p1 = start(plan, db, NULL), p2 = start(plan, db, NULL);
    cr_assert_eq(finish(p1), 0);
    cr_assert_eq(finish(p2), 0);
    assert_same(ref, db);
}

Test(sweep, full_disk_fails_cleanly_and_keeps_results)
{
    char db[128];
    path(db, sizeof db, "full.db");
    cr_assert_eq(run(small_plan, db, NULL), 0);
    long before = count(db, "SELECT count(*) FROM results");
    /* the file size limit stands in for a full disk: writes past it fail */
    char cmd[2048];
    sqlite3 *h;
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(h, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);
    snprintf(cmd, sizeof cmd, "cd %s && "
             "(ulimit -f $(( $(stat -c %%s full.db) / 1024 + 24 )); trap '' XFSZ; "
             "exec %s run %s --db full.db --threads 1 --quiet) 2> err.txt",
             tmp, getenv("HP_HEADPRUNE"), plan);
    int st = system(cmd);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "expected exit 1 on a full disk, got %d", st);
    char errp[160], msg[512] = "";
    snprintf(errp, sizeof errp, "%s/err.txt", tmp);
    FILE *f = fopen(errp, "r");
    cr_assert(fgets(msg, sizeof msg, f));
    fclose(f);
    cr_assert(strstr(msg, "full.db") && (strstr(msg, "disk full") || strstr(msg, "I/O")), "message: %s", msg);
    char *d = dump(db); /* integrity_check */
    free(d);
    cr_assert_geq(count(db, "SELECT count(*) FROM results"), before);
    cr_assert_eq(count(db, "SELECT count(*) FROM variants WHERE id NOT IN (SELECT variant_id FROM results)"), 0);
    cr_assert_eq(run(plan, db, NULL), 0, "the run did not complete once space was back");
}

Test(sweep, two_threads_give_the_same_numbers_as_one)
{
    char *ref = reference();
    char db[128];
    path(db, sizeof db, "threads2.db");
    g_threads = "2";
    int rc = run(plan, db, NULL);
    g_threads = "1";
    cr_assert_eq(rc, 0);
    assert_same(ref, db);
    /* the default: threads follow the idle CPUs from window to window, the numbers do not */
    path(db, sizeof db, "threads-auto.db");
    g_threads = NULL;
    rc = run(plan, db, NULL);
    g_threads = "1";
    cr_assert_eq(rc, 0);
    assert_same(ref, db);
    cr_assert_eq(count(db, "SELECT count(*) FROM results WHERE threads < 1 OR threads > 1024"), 0,
                 "results do not record the threads they ran with");
}

/* The text of the first column of the first row of q, malloc'd. */
static char *query_text(const char *db, const char *q)
{
    sqlite3 *h;
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(h, q, -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(h));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    const char *t = (const char *)sqlite3_column_text(st, 0);
    char *out = strdup(t ? t : "");
    sqlite3_finalize(st);
    sqlite3_close(h);
    return out;
}

/* A plan on the llama-gqa fixture with the given ablation and studies, written to tmp/NAME.yaml. */
static void write_plan(char *out, size_t n, const char *name, const char *ablation, const char *studies)
{
    snprintf(out, n, "%s/%s.yaml", tmp, name);
    char text[2048];
    const char *fx = getenv("HP_FIXTURES");
    snprintf(text, sizeof text,
             "name: %s\nmodel: %s/llama-gqa\ndata: %s/llama-gqa/data.npy\nablation: %s\nstudies:\n%s", name, fx, fx,
             ablation, studies);
    tu_spit(out, text, strlen(text));
}

Test(sweep, mean_statistics_are_stored_once_and_reused)
{
    char p1[256], p2[256], p3[256], db[128], zdb[128];
    path(db, sizeof db, "mean.db");
    path(zdb, sizeof zdb, "zero.db");
    write_plan(p1, sizeof p1, "mean-single", "mean", "  - single\n");
    write_plan(p2, sizeof p2, "mean-layer", "mean", "  - layer\n");
    write_plan(p3, sizeof p3, "zero-layer", "zero", "  - layer\n");
    cr_assert_eq(run(p1, db, NULL), 0);
    cr_assert_eq(count(db, "SELECT count(*) FROM ablation_means"), 1);
    /* replace the stored means by zeros: a later mean-ablation sweep that
     * uses them must then give exactly what zero ablation gives */
    sqlite3 *h;
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(h,
                              "UPDATE ablation_means SET mean_all = zeroblob(length(mean_all)),"
                              " mean_pos = zeroblob(length(mean_pos))",
                              NULL, NULL, NULL),
                 SQLITE_OK);
    sqlite3_close(h);
    cr_assert_eq(run(p2, db, NULL), 0);
    cr_assert_eq(count(db, "SELECT count(*) FROM ablation_means"), 1, "computed again instead of reused");
    cr_assert_eq(run(p3, zdb, NULL), 0);
    char *a = NULL, *b = NULL;
    const char *q = "SELECT group_concat(printf('%s %!.17g %!.17g', v.mask_text, r.loss, r.kl), ';') FROM "
                    "(SELECT * FROM variants ORDER BY mask_text) v JOIN results r ON r.variant_id = v.id "
                    "WHERE v.n_ablated > 0 AND v.mask_text NOT LIKE '%,%' AND v.mask_text LIKE '%*'";
    a = query_text(db, q);
    b = query_text(zdb, q);
    cr_assert(strlen(a) > 10, "no layer variants in %s", db);
    cr_assert_str_eq(a, b, "mean ablation with zero means differs from zero ablation: the stored means were not used");
    free(a);
    free(b);
}

// --- the plan's metric against the model -------------------------------------------

/* Write a plan into the temp folder: model and data under HP_FIXTURES, extra lines appended. */
static void write_fixture_plan(char *out, size_t n, const char *model, const char *data, const char *extra)
{
    path(out, n, "m.yaml");
    FILE *f = fopen(out, "w");
    cr_assert(f);
    fprintf(f, "name: m\nmodel: %s/%s\ndata: %s/%s/%s\n%s", getenv("HP_FIXTURES"), model, getenv("HP_FIXTURES"), model,
            data, extra);
    fclose(f);
}

/* Run `headprune ARGS` with stderr into errs; the exit status. */
static int hp_cmd(const char *args, char *errs, size_t n)
{
    return tu_headprune(NULL, args, tmp, NULL, 0, errs, n);
}

/* plan and run both refuse the plan with one line saying words, and no database appears. */
static void refused(const char *p, const char *words)
{
    char db[128], args[2048], errs[4096];
    path(db, sizeof db, "refused.db");
    const char *cmds[] = {"plan %s", "run %s --db %s --quiet"};
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args, cmds[i], p, db);
        int rc = hp_cmd(args, errs, sizeof errs);
        cr_assert_eq(rc, 1, "%s: exit %d (%s)", args, rc, errs);
        char *nl = strchr(errs, '\n');
        cr_assert(nl && nl[1] == 0, "%s: not one line: %s", args, errs);
        cr_assert(strstr(errs, p) && strstr(errs, words), "%s: does not name the plan and say '%s': %s", args, words,
                  errs);
        cr_assert_neq(access(db, F_OK), 0, "%s: created %s though nothing could run", args, db);
    }
}

Test(sweep, a_metric_the_model_lacks_is_refused_before_anything_runs)
{
    char p[1024];
    /* a causal LM has no cosine; without the check every iterative score was NaN */
    write_fixture_plan(p, sizeof p, "stories260K", "data.npy", "metric: cos\nstudies: [{iterative: {prune: 25%}}]\n");
    refused(p, "metric 'cos' is not one that");
    refused(p, "loss, kl and acc");
    /* an encoder without a head has only the cosine */
    write_fixture_plan(p, sizeof p, "bert-encoder", "data.jsonl", "metric: loss\nstudies: [{iterative: {prune: 25%}}]\n");
    refused(p, "metric 'loss' is not one that");
    refused(p, "only metric is cos");
}

/* The metric a sweep recorded, and the mask of its iterative curve's point at step. */
static void sweep_metric_and_step(const char *db, int step, char *metric, char *mask, size_t n)
{
    sqlite3 *h;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(h,
                                    "SELECT s.metric, v.mask_text FROM sweep_jobs j JOIN sweeps s ON s.id = j.sweep_id "
                                    "JOIN variants v ON v.id = j.variant_id WHERE j.kind = 'iterative' AND j.step = ? "
                                    "AND j.label = printf('step %d', j.step)",
                                    -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(h));
    sqlite3_bind_int(st, 1, step);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "no curve point at step %d", step);
    snprintf(metric, n, "%s", (const char *)sqlite3_column_text(st, 0));
    snprintf(mask, n, "%s", (const char *)sqlite3_column_text(st, 1));
    sqlite3_finalize(st);
    sqlite3_close(h);
}

Test(sweep, an_encoder_without_a_metric_is_pruned_by_its_cosine)
{
    char p[1024], db[128], metric[256], mask[256];
    write_fixture_plan(p, sizeof p, "bert-encoder", "data.jsonl", "studies: [{iterative: {prune: 25%, floor: 50%}}]\n");
    path(db, sizeof db, "enc.db");
    cr_assert_eq(run(p, db, NULL), 0);
    sweep_metric_and_step(db, 1, metric, mask, sizeof metric);
    cr_assert_str_eq(metric, "cos", "the sweep ranked by '%s'", metric);

    /* the expected first step, from each head's cosine evaluated alone: the two least damaging */
    char dir[1024], data[1100];
    snprintf(dir, sizeof dir, "%s/bert-encoder", getenv("HP_FIXTURES"));
    snprintf(data, sizeof data, "%s/data.jsonl", dir);
    struct hp_error err = {0};
    struct hp_model *m;
    struct hp_data *d;
    struct hp_evaluator *ev;
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    const struct hp_model_info *in = hp_model_get_info(m);
    cr_assert_eq(hp_data_load_for(data, dir, in, 0, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_new(m, d, &ev, &err), HP_OK, "%s", err.msg);
    const int n = in->n_layers * in->n_heads;
    double cos[64];
    cr_assert_leq(n, 64);
    for (int i = 0; i < n; i++) {
        struct hp_mask *one = hp_mask_new(in->n_layers, in->n_heads);
        one->gate[i] = 0.0f;
        struct hp_metrics *mt;
        cr_assert_eq(hp_evaluator_run(ev, one, HP_ABLATE_ZERO, &mt, &err), HP_OK, "%s", err.msg);
        cos[i] = mt->cos;
        hp_metrics_free(mt);
        hp_mask_free(one);
    }
    struct hp_mask *want = hp_mask_new(in->n_layers, in->n_heads);
    for (int k = 0; k < n / 4; k++) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (want->gate[i] != 0.0f && (best < 0 || cos[i] > cos[best]))
                best = i;
        want->gate[best] = 0.0f;
    }
    char *w = hp_mask_format(want);
    cr_assert_str_eq(mask, w, "step 1 pruned %s; by cosine it is %s", mask, w);
    free(w);
    hp_mask_free(want);
    hp_evaluator_free(ev);
    hp_data_free(d);
    hp_model_close(m);
}

// --- progress -------------------------------------------------------------------------

struct seen {
    int calls, moved, moved_at; /* moved: calls whose total differs from the first (the last at call moved_at) */
    int64_t first_total, last_done, last_total, max_total;
    bool eta_before_a_window, bad_label;
};

static void on_progress(void *user, const struct hp_sweep_progress *p)
{
    struct seen *s = user;
    if (s->calls++ == 0)
        s->first_total = p->total;
    if (p->total != s->first_total && p->done <= s->first_total) {
        s->moved++;
        s->moved_at = s->calls - 1;
    }
    s->max_total = p->total > s->max_total ? p->total : s->max_total;
    s->last_done = p->done;
    s->last_total = p->total;
    /* the rate behind an ETA is measured from whole windows: never from nothing */
    s->eta_before_a_window |= p->evaluated > 0 && !(p->eval_seconds > 0);
    s->bad_label |= strncmp(p->label, "step ", 5) == 0 || strchr(p->label, '.') != NULL;
}

Test(sweep, progress_counts_against_the_plans_estimate)
{
    /* the first-time user saw every line of an iterative study read 100%: the total grew with each
     * step. It is now the plan's estimate from the start (iterative evaluations included) */
    struct hp_plan *p;
    struct hp_error err = {0};
    cr_assert_eq(hp_plan_load(plan, &p, &err), HP_OK, "%s", err.msg);
    struct hp_model *m;
    cr_assert_eq(hp_model_open(p->model, &m, &err), HP_OK, "%s", err.msg);
    struct hp_joblist *jl;
    cr_assert_eq(hp_plan_expand(p, hp_model_get_info(m), &jl, &err), HP_OK, "%s", err.msg);
    int64_t estimate = jl->n;
    for (int i = 0; i < p->n_studies; i++) /* gradient studies: their forward+backward passes */
        estimate += hp_study_evals(&p->studies[i], hp_model_get_info(m)) +
                    hp_study_backwards(&p->studies[i], hp_model_get_info(m));
    hp_joblist_free(jl);
    hp_model_close(m);
    char db[128];
    path(db, sizeof db, "progress.db");
    struct seen s = {0};
    struct hp_sweep_opts o = {.db_path = db, .shard_count = 1, .threads = 1, .batch = 8, .progress = on_progress,
                              .user = &s};
    struct hp_sweep_summary sum;
    cr_assert_eq(hp_sweep_run(p, &o, &sum, &err), HP_OK, "%s", err.msg);
    hp_plan_free(p);
    cr_assert_gt(s.calls, 100);
    cr_assert_eq(s.first_total, estimate, "the first total %lld is not the plan's estimate %lld",
                 (long long)s.first_total, (long long)estimate);
    /* the total stays the estimate while the run is within it, and the last report, when the sweep ends, is
     * the jobs it ran (an iterative study stops early: fewer than the estimate), so a bar ends full */
    cr_assert(s.moved == 0 || (s.moved == 1 && s.moved_at == s.calls - 1),
              "the total moved while the run was within the estimate (%d times, the last at call %d of %d)",
              s.moved, s.moved_at, s.calls);
    cr_assert_eq(s.last_done, sum.n_jobs);
    cr_assert_eq(s.last_total, sum.n_jobs, "the last report's total %lld is not the %lld jobs run",
                 (long long)s.last_total, (long long)sum.n_jobs);
    cr_assert_leq(sum.n_jobs, estimate, "%lld jobs ran, over the estimate %lld", (long long)sum.n_jobs,
                  (long long)estimate);
    cr_assert_not(s.eta_before_a_window);
    cr_assert_not(s.bad_label, "a progress label names a job, not the study at work");
}

// --- gradient studies --------------------------------------------------------------

/* The scores a sweep stored for a study at a step, by (layer, unit), into out (n_layers * units). */
static int stored_scores(const char *db, const char *study, int step, double *out, int units)
{
    sqlite3 *h;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(h, "SELECT layer, unit, score FROM unit_scores WHERE study = ? AND step = ?", -1,
                                    &st, NULL),
                 SQLITE_OK);
    sqlite3_bind_text(st, 1, study, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, step);
    int n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        out[sqlite3_column_int(st, 0) * units + sqlite3_column_int(st, 1)] = sqlite3_column_double(st, 2);
        n++;
    }
    sqlite3_finalize(st);
    sqlite3_close(h);
    return n;
}

/* A case of fixture's torch reference (grad.json), asserted to be named name; *ref and *txt are the caller's. */
static cJSON *torch_case(const char *fixture, int i, const char *name, cJSON **ref, char **txt)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/grad.json", getenv("HP_FIXTURES"), fixture);
    *txt = tu_slurp(path, NULL);
    *ref = cJSON_Parse(*txt);
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(*ref, "cases"), i);
    cr_assert(c, "%s has no case %d", path, i);
    cr_assert_str_eq(cJSON_GetObjectItem(c, "name")->valuestring, name);
    return c;
}

/* Every unit's importance worked from torch's per-sequence shares (fixture's grad.json, case i, named name), as
 * Michel et al. */
static void torch_importance_of(const char *fixture, int i, const char *name, int L, int H, int per, bool by_layer,
                                double *out)
{
    cJSON *ref;
    char *txt;
    cJSON *sg = cJSON_GetObjectItem(torch_case(fixture, i, name, &ref, &txt), "seq_grad");
    const int U = H / per;
    for (int l = 0; l < L; l++) {
        double ss = 0;
        for (int u = 0; u < U; u++) {
            double v = 0;
            for (int s = 0; s < cJSON_GetArraySize(sg); s++) {
                double g = 0;
                for (int h = u * per; h < (u + 1) * per; h++)
                    g += cJSON_GetArrayItem(cJSON_GetArrayItem(cJSON_GetArrayItem(sg, s), l), h)->valuedouble;
                v += fabs(g);
            }
            out[l * U + u] = v;
            ss += v * v;
        }
        for (int u = 0; by_layer && u < U; u++)
            out[l * U + u] /= sqrt(ss);
    }
    cJSON_Delete(ref);
    free(txt);
}

/* llama-gqa's at the unmasked model (case "none") */
static void torch_importance(int L, int H, int per, bool by_layer, double *out)
{
    torch_importance_of("llama-gqa", 0, "none", L, H, per, by_layer, out);
}

static void expect_close(const char *what, const double *got, const double *want, int n, double rel)
{
    double m = 0;
    for (int i = 0; i < n; i++)
        m = fmax(m, fabs(want[i]));
    int bad = 0;
    for (int i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= rel * m) && bad++ < 5)
            cr_log_error("%s: unit %d: %.12g, reference %.12g", what, i, got[i], want[i]);
    cr_expect_eq(bad, 0, "%s: %d units differ from the reference by more than %g of the largest", what, bad, rel);
}

/*
 * sweep.yaml's gradient studies against independent references:
 *  - importance (heads, normalize layer; KV groups, none) against Michel's
 *    formula applied here to torch autograd's per-sequence gradients;
 *  - attribution (heads; KV groups) against hp_evaluator_grad's atp, summed
 *    over a group's heads here;
 *  - the gradient-ranked curve against a loop driven here: gradient at the
 *    current mask, importance worked here from its per-sequence shares, the
 *    least important quarter of the heads pruned, the point evaluated;
 *  - a rerun finds every gradient (nothing runs).
 */
Test(sweep, gradient_studies_match_independent_references)
{
    char db[128];
    path(db, sizeof db, "grad.db");
    struct hp_plan *p;
    struct hp_error err = {0};
    cr_assert_eq(hp_plan_load(plan, &p, &err), HP_OK, "%s", err.msg);
    struct hp_sweep_opts o = {.db_path = db, .shard_count = 1, .threads = 1};
    struct hp_sweep_summary sum;
    cr_assert_eq(hp_sweep_run(p, &o, &sum, &err), HP_OK, "%s", err.msg);

    struct hp_model *m;
    struct hp_data *d;
    struct hp_evaluator *ev;
    cr_assert_eq(hp_model_open(p->model, &m, &err), HP_OK, "%s", err.msg);
    const struct hp_model_info *in = hp_model_get_info(m);
    cr_assert_eq(hp_data_load(p->data, 0, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_new(m, d, &ev, &err), HP_OK, "%s", err.msg);
    const int L = in->n_layers, H = in->n_heads, KV = in->n_kv_heads, per = H / KV, S = d->n_seqs;
    double got[L * H], want[L * H];

    torch_importance(L, H, 1, true, want);
    cr_assert_eq(stored_scores(db, "importance", 0, got, H), L * H);
    expect_close("importance", got, want, L * H, 1e-4);
    torch_importance(L, H, per, false, want);
    cr_assert_eq(stored_scores(db, "importance-kv", 0, got, KV), L * KV);
    expect_close("importance-kv", got, want, L * KV, 1e-4);

    double grad[L * H], atp[L * H], loss;
    cr_assert_eq(hp_evaluator_grad(ev, HP_METRIC_LOSS, NULL, HP_ABLATE_ZERO, grad, atp, &loss, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(stored_scores(db, "attribution", 0, got, H), L * H);
    expect_close("attribution", got, atp, L * H, 1e-12);
    for (int l = 0; l < L; l++)
        for (int g = 0; g < KV; g++) {
            want[l * KV + g] = 0;
            for (int h = g * per; h < (g + 1) * per; h++)
                want[l * KV + g] += atp[l * H + h];
        }
    cr_assert_eq(stored_scores(db, "attribution-kv", 0, got, KV), L * KV);
    expect_close("attribution-kv", got, want, L * KV, 1e-12);

    /* the hand-driven loop: 12 heads, 3 a step (25%), down to none */
    struct hp_mask *mk = hp_mask_new(L, H);
    double *sg = malloc(sizeof *sg * (size_t)S * L * H);
    bool pruned[L * H];
    memset(pruned, 0, sizeof pruned);
    sqlite3 *h;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *q;
    cr_assert_eq(sqlite3_prepare_v2(h, "SELECT loss, mask_text FROM jobs WHERE study = 'iterative-grad' AND "
                                       "kind = 'iterative' AND step = ?", -1, &q, NULL), SQLITE_OK);
    for (int step = 0;; step++) {
        struct hp_metrics *mt;
        cr_assert_eq(hp_evaluator_run(ev, mk, HP_ABLATE_ZERO, &mt, &err), HP_OK, "%s", err.msg);
        char *text = hp_mask_format(mk);
        sqlite3_reset(q);
        sqlite3_bind_int(q, 1, step);
        cr_assert_eq(sqlite3_step(q), SQLITE_ROW, "the curve has no step %d", step);
        cr_expect_str_eq((const char *)sqlite3_column_text(q, 1), text, "step %d: the sweep pruned %s, the loop %s",
                         step, sqlite3_column_text(q, 1), text);
        /* the sweep evaluates points in windows (hp_evaluator_run_many): equal up to float rounding */
        cr_expect(fabs(sqlite3_column_double(q, 0) - mt->loss) <= 1e-6, "step %d: loss %.9g, the loop's %.9g", step,
                  sqlite3_column_double(q, 0), mt->loss);
        cr_log_info("step %d: %s loss %.6f", step, text, mt->loss);
        free(text);
        hp_metrics_free(mt);
        int left = 0;
        for (int i = 0; i < L * H; i++)
            left += !pruned[i];
        if (left == 0)
            break;
        cr_assert_eq(hp_evaluator_grad_seq(ev, HP_METRIC_LOSS, mk, HP_ABLATE_ZERO, grad, NULL, sg, NULL, &err), HP_OK, "%s", err.msg);
        double imp[L * H];
        for (int l = 0; l < L; l++) { /* Michel: |.| per sequence, summed; then each layer to unit L2 norm */
            double ss = 0;
            for (int k = 0; k < H; k++) {
                imp[l * H + k] = 0;
                for (int s = 0; s < S; s++)
                    imp[l * H + k] += fabs(sg[((size_t)s * L + l) * H + k]);
                ss += imp[l * H + k] * imp[l * H + k];
            }
            for (int k = 0; k < H; k++)
                imp[l * H + k] /= sqrt(ss);
        }
        for (int n = 0; n < 3; n++) { /* the least important unpruned head, the first on ties */
            int best = -1;
            for (int i = 0; i < L * H; i++)
                if (!pruned[i] && (best < 0 || imp[i] < imp[best]))
                    best = i;
            pruned[best] = true;
            mk->gate[best] = 0.0f;
        }
    }
    cr_assert_eq(sqlite3_step(q), SQLITE_DONE);
    sqlite3_finalize(q);
    sqlite3_close(h);
    free(sg);
    hp_mask_free(mk);

    /* query attribution: its Spearman rho and top-k overlap against the same worked here from the stored
     * estimates and the exact single effects (no ties among them: rho = 1 - 6 sum d^2 / (n (n^2 - 1))) */
    double est[L * H], ex[L * H];
    cr_assert_eq(stored_scores(db, "attribution", 0, est, H), L * H);
    {
        sqlite3 *hh;
        cr_assert_eq(sqlite3_open_v2(db, &hh, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        sqlite3_stmt *e;
        cr_assert_eq(sqlite3_prepare_v2(hh, "SELECT layer, unit, d_loss FROM effects WHERE study = 'single'", -1, &e,
                                        NULL), SQLITE_OK);
        int n = 0;
        while (sqlite3_step(e) == SQLITE_ROW)
            ex[sqlite3_column_int(e, 0) * H + sqlite3_column_int(e, 1)] = sqlite3_column_double(e, 2), n++;
        cr_assert_eq(n, L * H);
        sqlite3_finalize(e);
        sqlite3_close(hh);
    }
    const int N = L * H, K = (N + 9) / 10;
    double d2 = 0;
    int hits = 0;
    for (int i = 0; i < N; i++) {
        int re = 1, rx = 1; /* 1 = the largest */
        for (int j = 0; j < N; j++)
            re += est[j] > est[i], rx += ex[j] > ex[i];
        d2 += (double)(re - rx) * (re - rx);
        hits += re <= K && rx <= K;
    }
    double rho = 1 - 6 * d2 / ((double)N * ((double)N * N - 1));
    /* the reach: walking the units by |estimate| (largest first), how many until all of the exact top K are in */
    int reach = 0;
    for (int i = 0; i < N; i++) {
        int rx = 1, rw = 1;
        for (int j = 0; j < N; j++)
            rx += ex[j] > ex[i], rw += fabs(est[j]) > fabs(est[i]);
        if (rx <= K && rw > reach)
            reach = rw;
    }
    struct hp_query_opts qo = {.kind = HP_QUERY_ATTRIBUTION, .study = "attribution"};
    struct hp_table *t;
    cr_assert_eq(hp_query(db, &qo, &t, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(t->n_rows, N + 1);
    cr_assert_eq(t->n_summary, 1, "the row all is a summary, no unit");
    const double *last = t->values + (size_t)(t->n_rows - 1) * t->n_cols;
    cr_assert_str_eq(t->cells[(size_t)(t->n_rows - 1) * t->n_cols + 1], "all");
    cr_assert_str_eq(t->cols[9], "rho");
    cr_assert_str_eq(t->cols[11], "top_k_overlap");
    cr_expect(fabs(last[9] - rho) < 1e-5, "query rho %.6g, worked here %.6g", last[9], rho);
    cr_expect(fabs(last[11] - (double)hits / K) < 1e-5, "query overlap %.6g, worked here %d/%d", last[11], hits, K);
    cr_assert_str_eq(t->cols[12], "reach");
    cr_expect_eq(last[12], (double)reach, "query reach %g, worked here %d", last[12], reach);
    cr_assert(strstr(t->note, "reach "), "%s", t->note);
    /* the most wrongly ranked unit first */
    double worst = 0;
    for (int r = 0; r < N; r++)
        worst = fmax(worst, fabs(t->values[(size_t)r * t->n_cols + 8]));
    cr_expect_eq(fabs(t->values[8]), worst);
    cr_log_info("attribution on llama-gqa: rho %.3f, top-%d overlap %d, reach %d", rho, K, hits, reach);
    hp_table_free(t);
    /* query heads: the estimate beside the exact effect */
    qo = (struct hp_query_opts){.kind = HP_QUERY_HEADS, .study = "single"};
    cr_assert_eq(hp_query(db, &qo, &t, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(t->n_cols, 11);
    cr_assert_str_eq(t->cols[10], "atp");
    for (int r = 0; r < t->n_rows; r++) {
        int l = (int)t->values[(size_t)r * t->n_cols + 2], u = (int)t->values[(size_t)r * t->n_cols + 3];
        /* the table's numbers are the stored doubles themselves (its text rounds them to 6 digits) */
        cr_expect(t->values[(size_t)r * t->n_cols + 10] == est[l * H + u], "heads: %d.%d atp %s (%.17g), stored %.17g",
                  l, u, t->cells[(size_t)r * t->n_cols + 10], t->values[(size_t)r * t->n_cols + 10], est[l * H + u]);
    }
    hp_table_free(t);
    qo = (struct hp_query_opts){.kind = HP_QUERY_IMPORTANCE, .study = "importance-kv"};
    cr_assert_eq(hp_query(db, &qo, &t, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(t->n_rows, L * KV);
    cr_assert(strstr(t->note, "normalize none"), "%s", t->note);
    hp_table_free(t);
    qo = (struct hp_query_opts){.kind = HP_QUERY_ATTRIBUTION, .study = "nope"};
    cr_assert_eq(hp_query(db, &qo, &t, &err), HP_ERR_ARG);
    cr_assert(strstr(err.msg, "no attribution study 'nope' (its attribution studies: attribution, attribution-kv)"),
              "%s", err.msg);

    /* run again: every gradient and result is found */
    struct hp_sweep_summary again;
    cr_assert_eq(hp_sweep_run(p, &o, &again, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(again.n_run, 0, "a rerun computed %lld things again", (long long)again.n_run);
    cr_assert_eq(count(db, "SELECT count(*) FROM gradients"), 3, "the unmasked model's gradient (shared by every "
                 "study), and the curve's at 3 and 6 heads pruned (at 9 the last step prunes all 3 left: no ranking)");
    cr_assert_eq(count(db, "SELECT count(*) FROM unit_scores WHERE study = 'iterative-grad' AND step = 4"), 0);
    /* the points at 3 and 6 pruned are their gradient pass's forward: its loss to the last bits (a pass of
     * their own differs at ~1e-8 here) */
    cr_assert_eq(count(db, "SELECT count(*) FROM jobs j JOIN gradients g ON g.mask_text = j.mask_text "
                           "WHERE j.study = 'iterative-grad' AND j.kind = 'iterative' AND j.step IN (1, 2) "
                           "AND abs(j.loss - g.loss) <= 1e-13 * g.loss"),
                 2, "a gradient-ranked curve's point is not its gradient pass's");
    cr_assert_eq(count(db, "SELECT count(*) FROM jobs WHERE study = 'iterative-grad' AND k = 12"), 1,
                 "the curve ends with every head pruned");
    hp_evaluator_free(ev);
    hp_data_free(d);
    hp_model_close(m);
    hp_plan_free(p);
}

/* 1 - the mean cosine at mask's gates (zero ablation): what an encoder's gradient studies differentiate */
static double one_minus_cos(struct hp_evaluator *ev, const struct hp_mask *mk)
{
    struct hp_metrics *mt;
    struct hp_error err = {0};
    cr_assert_eq(hp_evaluator_run(ev, mk, HP_ABLATE_ZERO, &mt, &err), HP_OK, "%s", err.msg);
    double v = 1 - mt->cos;
    hp_metrics_free(mt);
    return v;
}

/* The text of the first row of SQL q on db (one ? bound to the int b), into out. */
static void sql_text(const char *db, const char *q, int b, char *out, size_t n)
{
    sqlite3 *h;
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(h, q, -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(h));
    sqlite3_bind_int(st, 1, b);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s (%d): no row", q, b);
    snprintf(out, n, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(h);
}

/* The reference's [n_layers][units] array at key (a path of object keys, then steps as text) into out. */
static void estimator_ref(const cJSON *units, const char *name, const char *steps, int L, int U, double *out)
{
    const cJSON *a = cJSON_GetObjectItem(units, name);
    if (steps)
        a = cJSON_GetObjectItem(a, steps);
    cr_assert(a && cJSON_GetArraySize(a) == L, "estimators.json has no %s %s", name, steps ? steps : "");
    for (int l = 0; l < L; l++)
        for (int u = 0; u < U; u++)
            out[l * U + u] = cJSON_GetArrayItem(cJSON_GetArrayItem(a, l), u)->valuedouble;
}

/*
 * Every estimator of the attribution study (atp, raw importance, integrated gradients along the joint path and
 * one layer's, 1, 2 and 4 steps) on query heads and KV groups against torch autograd's (tools/
 * gen_estimator_reference.py, estimators.json: its gradients at the same fractional gates, in float32 models),
 * and the single study's exact effects against the reference's forward passes; the cost the plan states is the
 * gradients the sweep stored (one a step, a step a layer for ig-layer; atp and importance share one).
 */
Test(sweep, attribution_estimators_match_torch_autograd)
{
    static const char *const fixtures[] = {"gpt2-tiny", "llama-gqa"};
    for (int f = 0; f < 2; f++) {
        char p[1024], db[128], args[2048], errs[4096];
        const bool gqa = f == 1;
        char studies[2048];
        size_t o = (size_t)snprintf(studies, sizeof studies,
                                    "studies:\n  - single\n  - attribution: {name: atp, estimator: atp}\n"
                                    "  - attribution: {name: imp, estimator: importance}\n"
                                    "  - attribution: {name: default}\n");
        for (int kv = 0; kv <= (gqa ? 1 : 0); kv++) {
            const char *k = kv ? ", kv: true" : "", *sfx = kv ? "-kv" : "";
            if (kv)
                o += (size_t)snprintf(studies + o, sizeof studies - o,
                                      "  - single: {name: single-kv, kv: true}\n  - attribution: {name: atp-kv, estimator: atp%s}\n"
                                      "  - attribution: {name: imp-kv, estimator: importance%s}\n"
                                      "  - attribution: {name: default-kv%s}\n", k, k, k);
            for (int steps = 1; steps <= 4; steps *= 2)
                o += (size_t)snprintf(studies + o, sizeof studies - o,
                                      "  - attribution: {name: ig%d%s, estimator: ig, steps: %d%s}\n"
                                      "  - attribution: {name: igl%d%s, estimator: ig-layer, steps: %d%s}\n",
                                      steps, sfx, steps, k, steps, sfx, steps, k);
        }
        write_fixture_plan(p, sizeof p, fixtures[f], "data.npy", studies);
        snprintf(db, sizeof db, "%s/est-%s.db", tmp, fixtures[f]);
        snprintf(args, sizeof args, "run %s --db %s --quiet --threads 1", p, db);
        cr_assert_eq(hp_cmd(args, errs, sizeof errs), 0, "%s", errs);
        char rp[1024];
        snprintf(rp, sizeof rp, "%s/%s/estimators.json", getenv("HP_FIXTURES"), fixtures[f]);
        char *txt = tu_slurp(rp, NULL);
        cJSON *ref = cJSON_Parse(txt);
        cr_assert(ref, "%s", rp);
        const int L = cJSON_GetObjectItem(ref, "units") ? 3 : 0, H = 4;
        for (int kv = 0; kv <= (gqa ? 1 : 0); kv++) {
            const int U = kv ? 2 : H;
            const cJSON *units = cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "units"), kv ? "kv" : "heads");
            double got[3 * 4], want[3 * 4];
            char name[32];
            const char *sfx = kv ? "-kv" : "";
            snprintf(name, sizeof name, "atp%s", kv ? "-kv" : "");
            estimator_ref(units, "atp", NULL, L, U, want);
            cr_assert_eq(stored_scores(db, kv ? "atp-kv" : "atp", 0, got, U), L * U);
            expect_close(name, got, want, L * U, 1e-4);
            estimator_ref(units, "importance", NULL, L, U, want);
            cr_assert_eq(stored_scores(db, kv ? "imp-kv" : "imp", 0, got, U), L * U);
            expect_close("importance", got, want, L * U, 1e-4);
            /* no estimator: under zero ablation, torch's integrated gradients a layer at a time, 2 steps */
            estimator_ref(units, "ig-layer", "2", L, U, want);
            cr_assert_eq(stored_scores(db, kv ? "default-kv" : "default", 0, got, U), L * U);
            expect_close(kv ? "default-kv" : "default", got, want, L * U, 1e-4);
            for (int steps = 1; steps <= 4; steps *= 2) {
                char st[8];
                snprintf(st, sizeof st, "%d", steps);
                snprintf(name, sizeof name, "ig%d%s", steps, sfx);
                estimator_ref(units, "ig", st, L, U, want);
                cr_assert_eq(stored_scores(db, name, 0, got, U), L * U, "%s", name);
                expect_close(name, got, want, L * U, 1e-4);
                snprintf(name, sizeof name, "igl%d%s", steps, sfx);
                estimator_ref(units, "ig-layer", st, L, U, want);
                cr_assert_eq(stored_scores(db, name, 0, got, U), L * U, "%s", name);
                expect_close(name, got, want, L * U, 1e-4);
            }
        }
        /* the exact effects the query ranks against are the reference's forward passes' */
        {
            sqlite3 *h;
            cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
            sqlite3_stmt *e;
            cr_assert_eq(sqlite3_prepare_v2(h, "SELECT layer, unit, d_loss FROM effects WHERE study = 'single'", -1,
                                            &e, NULL), SQLITE_OK);
            double got[3 * 4], want[3 * 4];
            int n = 0;
            while (sqlite3_step(e) == SQLITE_ROW)
                got[sqlite3_column_int(e, 0) * H + sqlite3_column_int(e, 1)] = sqlite3_column_double(e, 2), n++;
            sqlite3_finalize(e);
            cr_assert_eq(n, L * H);
            estimator_ref(cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "units"), "heads"), "exact", NULL, L, H, want);
            expect_close("exact", got, want, L * H, 1e-4);
            /* gradients stored: one at the unmasked model, plus 1 + 2 + 4 joint ones (each unit kind's path moves the
             * same gates: shared) and 3 layers' as many */
            cr_assert_eq(count(db, "SELECT count(*) FROM gradients"), 1 + 7 + 3 * 7);
            sqlite3_close(h);
        }
        /* query attribution ranks each estimator the sweep ran */
        struct hp_query_opts qo = {.kind = HP_QUERY_ATTRIBUTION};
        struct hp_table *t;
        struct hp_error err = {0};
        cr_assert_eq(hp_query(db, &qo, &t, &err), HP_OK, "%s", err.msg);
        cr_assert_eq(t->n_summary, 9, "a row all per heads study: %d", t->n_summary);
        cr_assert_str_eq(t->cols[13], "estimator");
        cr_assert(strstr(t->note, "ig-layer = integrated gradients"), "%s", t->note);
        hp_table_free(t);
        cJSON_Delete(ref);
        free(txt);
    }
}

/* The mask of study's curve point at step (canonical text). */
static void curve_mask(const char *db, const char *study, int step, char *mask, size_t n)
{
    sqlite3 *h;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(h,
                                    "SELECT v.mask_text FROM sweep_jobs j JOIN variants v ON v.id = j.variant_id "
                                    "WHERE j.kind = 'iterative' AND j.study = ?1 AND j.step = ?2 "
                                    "AND j.label = printf('step %d', j.step)",
                                    -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(h));
    sqlite3_bind_text(st, 1, study, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, step);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s: no curve point at step %d", study, step);
    snprintf(mask, n, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(h);
}

/*
 * A curve ranked once by an estimate (iterative, rank: estimate) prunes in the order of torch autograd's estimate
 * (estimators.json): by default integrated gradients a layer at a time, 2 steps, and by atp when named, query heads
 * and KV groups. Its stored ranking is torch's, it takes the estimate's gradients once (the plan's stated cost),
 * and each point's mask is the first k units of torch's order, smallest estimate first.
 */
Test(sweep, a_curve_ranked_by_estimate_prunes_in_the_order_of_torchs_estimate)
{
    static const char *const fixtures[] = {"gpt2-tiny", "llama-gqa"};
    for (int f = 0; f < 2; f++) {
        const bool gqa = f == 1;
        char p[1024], db[128], args[2048], errs[4096];
        write_fixture_plan(p, sizeof p, fixtures[f], "data.npy",
                           gqa ? "studies:\n  - iterative: {prune: 25%, rank: estimate, name: est}\n"
                                 "  - iterative: {prune: 25%, rank: estimate, estimator: atp, name: est-atp}\n"
                                 "  - iterative: {prune: 50%, rank: estimate, kv: true, name: est-kv}\n"
                               : "studies:\n  - iterative: {prune: 25%, rank: estimate, name: est}\n"
                                 "  - iterative: {prune: 25%, rank: estimate, estimator: atp, name: est-atp}\n");
        snprintf(args, sizeof args, "plan %s", p);
        char out[8192];
        cr_assert_eq(tu_headprune(NULL, args, tmp, out, sizeof out, errs, sizeof errs), 0, "%s", errs);
        cr_assert(strstr(out, "+ 6 forward+backward passes (ranked once by integrated gradients, a layer's gates "
                              "together, 2 steps a layer)"), "%s", out);
        cr_assert(strstr(out, "+ 1 forward+backward pass"), "%s", out);
        snprintf(db, sizeof db, "%s/curve-est-%s.db", tmp, fixtures[f]);
        snprintf(args, sizeof args, "run %s --db %s --quiet --threads 1", p, db);
        cr_assert_eq(hp_cmd(args, errs, sizeof errs), 0, "%s", errs);
        /* 3 layers x 2 steps of ig-layer, one atp gradient at the unmasked model */
        cr_assert_eq(count(db, "SELECT count(*) FROM gradients"), 7);
        char rp[1024];
        snprintf(rp, sizeof rp, "%s/%s/estimators.json", getenv("HP_FIXTURES"), fixtures[f]);
        char *txt = tu_slurp(rp, NULL);
        cJSON *ref = cJSON_Parse(txt);
        cr_assert(ref, "%s", rp);
        const int L = 3, H = 4;
        for (int c = 0; c < (gqa ? 3 : 2); c++) {
            const bool kv = c == 2;
            const int U = kv ? 2 : H, per_step = 3, w = H / U;
            const char *study = c == 0 ? "est" : c == 1 ? "est-atp" : "est-kv";
            const cJSON *units = cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "units"), kv ? "kv" : "heads");
            double want[12], got[12];
            estimator_ref(units, c == 1 ? "atp" : "ig-layer", c == 1 ? NULL : "2", L, U, want);
            cr_assert_eq(stored_scores(db, study, 1, got, U), L * U, "%s", study);
            expect_close(study, got, want, L * U, 1e-4);
            /* torch's order, smallest first (no two of its estimates are within 1e-6 of each other here) */
            int order[12];
            for (int i = 0; i < L * U; i++)
                order[i] = i;
            for (int i = 1; i < L * U; i++)
                for (int j = i; j > 0 && want[order[j]] < want[order[j - 1]]; j--) {
                    cr_assert_gt(fabs(want[order[j]] - want[order[j - 1]]), 1e-6, "%s: a near tie", study);
                    const int t = order[j];
                    order[j] = order[j - 1], order[j - 1] = t;
                }
            for (int step = 1; step * per_step < L * U; step++) {
                struct hp_mask *m = hp_mask_new(L, H);
                for (int i = 0; i < step * per_step; i++)
                    for (int h = 0; h < w; h++)
                        m->gate[(order[i] / U) * H + (order[i] % U) * w + h] = 0;
                char *expect = hp_mask_format(m), mask[256];
                curve_mask(db, study, step, mask, sizeof mask);
                cr_assert_str_eq(mask, expect, "%s step %d", study, step);
                free(expect);
                hp_mask_free(m);
            }
        }
        /* the report names the curves by their ranking */
        char html[256];
        snprintf(html, sizeof html, "%s/curve-est-%s.html", tmp, fixtures[f]);
        snprintf(args, sizeof args, "report --db %s --out %s", db, html);
        cr_assert_eq(hp_cmd(args, errs, sizeof errs), 0, "%s", errs);
        char *page = tu_slurp(html, NULL);
        cr_assert(strstr(page, "iterative, estimate-ranked"), "the report does not name the estimate-ranked curve");
        free(page);
        cJSON_Delete(ref);
        free(txt);
    }
}

/*
 * An encoder without a head (bert-encoder) differentiates 1 - cos, whose gradient is 0 at the unmasked model, so
 * its gradient studies start from a mask: of heads already removed, here 0.1 and 1.2 (torch's case cos_partial):
 *  - importance against Michel's formula applied here to torch autograd's per-sequence gradients at that mask;
 *  - attribution against torch's first-order estimates there;
 *  - the gradient the sweep stored there against torch's, and against central differences of the engine's own
 *    forward (hp_evaluator_run at gates g +- eps, Richardson-extrapolated as test_grad's), a second path;
 *  - the gradient-ranked curve starts at that mask (written in another order: the same gradient as the studies'),
 *    and its first step prunes the two heads least important by the importance worked here from torch's;
 *  - the mask's heads are in no study's rows.
 */
Test(sweep, an_encoders_gradient_studies_from_a_mask_match_torch_and_finite_differences)
{
    char p[1024], db[128], args[2048], errs[4096];
    write_fixture_plan(p, sizeof p, "bert-encoder", "data.jsonl",
                       "studies:\n  - single\n  - importance: {mask: \"0.1,1.2\"}\n  - attribution: {mask: \"0.1,1.2\", estimator: atp}\n"
                       "  - iterative: {name: curve, prune: 25%, floor: 50%, rank: gradient, mask: \"1.2,0.1\"}\n");
    path(db, sizeof db, "enc-grad.db");
    snprintf(args, sizeof args, "run %s --db %s --quiet --threads 1", p, db);
    cr_assert_eq(hp_cmd(args, errs, sizeof errs), 0, "%s", errs);
    enum { L = 2, H = 4 };
    const int dead[2] = {0 * H + 1, 1 * H + 2};
    double got[L * H], want[L * H];

    /* importance, normalize layer: over the six live heads */
    for (int i = 0; i < L * H; i++)
        got[i] = NAN;
    torch_importance_of("bert-encoder", 0, "cos_partial", L, H, 1, true, want);
    cr_assert_eq(stored_scores(db, "importance", 0, got, H), L * H - 2);
    for (int k = 0; k < 2; k++) {
        cr_assert(isnan(got[dead[k]]), "head %d of the mask: is scored", dead[k]);
        got[dead[k]] = want[dead[k]] = 0;
    }
    expect_close("encoder importance", got, want, L * H, 1e-4);
    double imp[L * H];
    memcpy(imp, want, sizeof imp);

    /* attribution and the gradient itself against torch's */
    cJSON *ref;
    char *txt;
    const cJSON *c = torch_case("bert-encoder", 0, "cos_partial", &ref, &txt);
    double tg[L * H], ta[L * H];
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++) {
            tg[l * H + h] = cJSON_GetArrayItem(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "grad"), l), h)->valuedouble;
            ta[l * H + h] = cJSON_GetArrayItem(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "atp"), l), h)->valuedouble;
        }
    cJSON_Delete(ref);
    free(txt);
    for (int i = 0; i < L * H; i++)
        got[i] = NAN;
    cr_assert_eq(stored_scores(db, "attribution", 0, got, H), L * H - 2);
    for (int k = 0; k < 2; k++)
        got[dead[k]] = ta[dead[k]] = 0;
    expect_close("encoder attribution", got, ta, L * H, 1e-4);
    double g[L * H];
    {
        sqlite3 *h;
        sqlite3_stmt *st;
        cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        cr_assert_eq(sqlite3_prepare_v2(h, "SELECT grad FROM gradients WHERE mask_text = '0.1,1.2'", -1, &st, NULL),
                     SQLITE_OK);
        cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "no gradient at the mask");
        cr_assert_eq(sqlite3_column_bytes(st, 0), (int)sizeof g);
        memcpy(g, sqlite3_column_blob(st, 0), sizeof g);
        sqlite3_finalize(st);
        sqlite3_close(h);
    }
    expect_close("encoder gradient (torch)", g, tg, L * H, 1e-4);

    /* ... and against finite differences of the engine's forward, at every gate (dead ones at 0: zero ablation) */
    struct hp_model *m;
    struct hp_data *d;
    struct hp_evaluator *ev;
    struct hp_error err = {0};
    char dir[1024], data[1100];
    snprintf(dir, sizeof dir, "%s/bert-encoder", getenv("HP_FIXTURES"));
    snprintf(data, sizeof data, "%s/data.jsonl", dir);
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_data_load(data, 0, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_new(m, d, &ev, &err), HP_OK, "%s", err.msg);
    struct hp_mask *mk = hp_mask_new(L, H);
    mk->gate[dead[0]] = mk->gate[dead[1]] = 0.0f;
    double fd[L * H];
    for (int i = 0; i < L * H; i++) {
        double dd[2];
        for (int k = 0; k < 2; k++) {
            const float g0 = mk->gate[i], e = (float)(1e-2 / (1 + k));
            mk->gate[i] = g0 + e;
            const double lp = one_minus_cos(ev, mk);
            mk->gate[i] = g0 - e;
            const double lm = one_minus_cos(ev, mk);
            mk->gate[i] = g0;
            dd[k] = (lp - lm) / (double)((g0 + e) - (g0 - e));
        }
        fd[i] = (4 * dd[1] - dd[0]) / 3; /* Richardson: the eps^2 term of the central difference cancels */
    }
    expect_close("encoder gradient (finite differences)", g, fd, L * H, 1e-3);
    hp_mask_free(mk);
    hp_evaluator_free(ev);
    hp_data_free(d);
    hp_model_close(m);

    /* the curve: 6 heads in play, 2 a step down to 3 (6, 4, 3); its start is the studies' gradient */
    char text[256], want_text[64];
    sql_text(db, "SELECT mask_text FROM jobs WHERE study = 'curve' AND kind = 'iterative' AND step = ?", 0, text,
             sizeof text);
    cr_expect_str_eq(text, "0.1,1.2");
    cr_assert_eq(count(db, "SELECT count(*) FROM gradients"), 2, "the mask's (shared by the three studies) and the "
                 "curve's after its first step");
    bool gone[L * H] = {false};
    gone[dead[0]] = gone[dead[1]] = true;
    for (int n = 0; n < 2; n++) { /* the least important live head, the first on ties */
        int best = -1;
        for (int i = 0; i < L * H; i++)
            if (!gone[i] && (best < 0 || imp[i] < imp[best]))
                best = i;
        gone[best] = true;
    }
    struct hp_mask *want_mk = hp_mask_new(L, H);
    for (int i = 0; i < L * H; i++)
        want_mk->gate[i] = gone[i] ? 0.0f : 1.0f;
    char *wt = hp_mask_format(want_mk);
    snprintf(want_text, sizeof want_text, "%s", wt);
    free(wt);
    hp_mask_free(want_mk);
    sql_text(db, "SELECT mask_text FROM jobs WHERE study = 'curve' AND kind = 'iterative' AND step = ?", 1, text,
             sizeof text);
    cr_expect_str_eq(text, want_text, "the curve's first step pruned %s, torch's importance says %s", text, want_text);
    cr_expect_eq(count(db, "SELECT count(*) FROM jobs WHERE study = 'curve' AND kind = 'iterative'"), 3);
    cr_expect_eq(count(db, "SELECT count(*) FROM unit_scores WHERE study = 'curve' AND label IN ('0.1', '1.2')"), 0);

    /* the queries: importance says where it was taken; attribution has no exact effect to rank against */
    struct hp_query_opts qo = {.kind = HP_QUERY_IMPORTANCE};
    struct hp_table *t;
    cr_assert_eq(hp_query(db, &qo, &t, &err), HP_OK, "%s", err.msg);
    cr_expect_eq(t->n_rows, L * H - 2);
    cr_expect(strstr(t->note, "1 - cos at the unit's gate with the heads of the study's mask 0.1,1.2 already removed"),
              "%s", t->note);
    hp_table_free(t);
    qo = (struct hp_query_opts){.kind = HP_QUERY_ATTRIBUTION};
    cr_assert_eq(hp_query(db, &qo, &t, &err), HP_ERR_ARG);
    cr_expect(strstr(err.msg, "attribution study 'attribution' is taken at its mask 0.1,1.2"), "%s", err.msg);
    /* nor does heads show its estimates beside the single effects */
    qo = (struct hp_query_opts){.kind = HP_QUERY_HEADS, .study = "single"};
    cr_assert_eq(hp_query(db, &qo, &t, &err), HP_OK, "%s", err.msg);
    for (int i = 0; i < t->n_cols; i++)
        cr_expect_str_neq(t->cols[i], "atp");
    hp_table_free(t);
}

/*
 * An encoder without a head differentiates 1 - cos, whose gradient is 0 at the unmasked model: a gradient study
 * that starts there is refused, and the hint's mask: is then taken (the same plan with it passes `plan`).
 */
Test(sweep, a_gradient_study_of_an_encoder_at_the_unmasked_model_is_refused_before_anything_runs)
{
    char p[1024], args[2048], errs[4096];
    const char *const studies[][2] = {
        {"studies: [single, {importance: {kv: true}}]\n", "studies: [single, {importance: {kv: true, mask: \"0.0\"}}]\n"},
        {"studies: [{attribution: {estimator: atp}}]\n", "studies: [{attribution: {estimator: atp, mask: \"0.0\"}}]\n"},
        {"studies: [{iterative: {prune: 50%, rank: gradient, name: curve}}]\n",
         "studies: [{iterative: {prune: 50%, rank: gradient, name: curve, mask: \"0.0\"}}]\n"},
        /* a mask that removes nothing is no start either */
        {"studies: [{importance: {mask: \"\"}}]\n", NULL},
    };
    const char *const names[] = {"importance", "attribution", "curve", "importance"};
    for (int i = 0; i < 4; i++) {
        write_fixture_plan(p, sizeof p, "bert-encoder", "data.jsonl", studies[i][0]);
        char words[256];
        snprintf(words, sizeof words, "study '%s' differentiates 1 - cos, whose gradient is 0 at the unmasked model: "
                 "give it heads already removed to start from, e.g. mask: \"0.0\"", names[i]);
        refused(p, words);
        if (!studies[i][1])
            continue;
        write_fixture_plan(p, sizeof p, "bert-encoder", "data.jsonl", studies[i][1]);
        snprintf(args, sizeof args, "plan %s", p);
        cr_assert_eq(hp_cmd(args, errs, sizeof errs), 0, "the hint's mask: is refused: %s", errs);
    }
    /* attribution's default there integrates from the gates of 1 to 0 a layer at a time, where 1 - cos has a
     * gradient: no mask needed */
    write_fixture_plan(p, sizeof p, "bert-encoder", "data.jsonl", "studies: [attribution]\n");
    snprintf(args, sizeof args, "plan %s", p);
    cr_assert_eq(hp_cmd(args, errs, sizeof errs), 0, "the default estimator is refused: %s", errs);
    /* a mask: the model cannot have, and one not a spec */
    write_fixture_plan(p, sizeof p, "bert-encoder", "data.jsonl", "studies: [{importance: {mask: \"5.0\"}}]\n");
    refused(p, "study 'importance': mask: ");
    write_fixture_plan(p, sizeof p, "bert-encoder", "data.jsonl", "studies: [{attribution: {mask: [0.1]}}]\n");
    refused(p, "'mask' needs a mask spec of the heads already removed");
    /* and the mistakes a plan can make with them: one line, exit 1, nothing written */
    write_fixture_plan(p, sizeof p, "llama-gqa", "data.npy", "studies: [{iterative: {prune: 10%, rank: other}}]\n");
    refused(p, "'rank' must be exact, gradient or estimate, not 'other'");
    write_fixture_plan(p, sizeof p, "llama-gqa", "data.npy", "studies: [{importance: {normalise: none}}]\n");
    refused(p, "unknown key 'normalise' in an 'importance' study");
    /* the exact-ranked curve is fine on the same model: it ranks by the cosine */
    write_fixture_plan(p, sizeof p, "bert-encoder", "data.jsonl", "studies: [{iterative: {prune: 50%}}]\n");
    snprintf(args, sizeof args, "plan %s", p);
    cr_assert_eq(hp_cmd(args, errs, sizeof errs), 0, "%s", errs);
}

/*
 * A pruned checkpoint (the exported gpt2-tiny lacks 0.1, 2.0 and 2.3): its
 * missing heads are in no study's jobs or scores, and the iterative curve
 * prunes only heads it has.
 */
Test(sweep, a_pruned_checkpoints_missing_heads_are_left_out)
{
    char p[1024], db[128], args[2048], errs[4096];
    write_fixture_plan(p, sizeof p, "exported/gpt2-tiny", "../../gpt2-tiny/data.npy",
                       "studies:\n  - single\n  - attribution\n  - iterative: {prune: 25%}\n");
    path(db, sizeof db, "pruned.db");
    snprintf(args, sizeof args, "run %s --db %s --quiet --threads 1", p, db);
    cr_assert_eq(hp_cmd(args, errs, sizeof errs), 0, "%s", errs);
    cr_assert_eq(count(db, "SELECT count(*) FROM jobs WHERE kind = 'single'"), 9);
    cr_assert_eq(count(db, "SELECT count(*) FROM jobs WHERE kind = 'single' AND label IN ('0.1', '2.0', '2.3')"), 0);
    cr_assert_eq(count(db, "SELECT count(*) FROM unit_scores"), 9, "attribution scores only the heads it has");
    cr_assert_eq(count(db, "SELECT count(*) FROM jobs WHERE kind = 'iterative' AND (mask_text LIKE '%0.1%' OR "
                           "mask_text LIKE '%2.0%' OR mask_text LIKE '%2.3%')"),
                 0, "the curve prunes heads the checkpoint lacks");
    /* 9 heads, 2 a step (25% of 9, rounded) down to none: the points ablate 0, 2, 4, 6, 8 and 9 heads */
    cr_assert_eq(count(db, "SELECT max(k) FROM jobs WHERE kind = 'iterative'"), 9);
    cr_assert_eq(count(db, "SELECT count(*) FROM jobs WHERE kind = 'iterative'"), 6);
}

/*
 * A sweep with an attribution study takes its baseline from the attribution
 * gradient's forward (the same pass), one without from a pass of its own: the
 * two must store the same bits, or a resumed or shared sweep would depend on
 * which process measured it. On gpt2-vocab, whose 4500 logits take three
 * blocks, so the LM head's online sums are rescaled.
 */
Test(sweep, the_baseline_is_the_same_bits_whoever_measured_it)
{
    char p[1024], db[2][128], args[2048], errs[4096];
    const char *studies[2] = {"studies: [single]\n", "studies: [{attribution: {estimator: atp}}, single]\n"};
    const char *q = "SELECT v.key, printf('%!.17g %!.17g %!.17g %!.17g', r.loss, r.ppl, r.acc, r.kl), r.n_tokens, "
                    "(SELECT group_concat(printf('%!.17g %!.17g %!.17g', q.loss, q.acc, q.kl), ' ') FROM seq_results q "
                    "WHERE q.variant_id = v.id ORDER BY q.seq) FROM results r JOIN variants v ON v.id = r.variant_id "
                    "ORDER BY v.n_ablated, v.key";
    char *rows[2];
    for (int i = 0; i < 2; i++) {
        write_fixture_plan(p, sizeof p, "gpt2-vocab", "data.npy", studies[i]);
        path(db[i], sizeof db[i], i ? "with-grad.db" : "without.db");
        snprintf(args, sizeof args, "run %s --db %s --quiet --threads 1", p, db[i]);
        cr_assert_eq(hp_cmd(args, errs, sizeof errs), 0, "%s", errs);
        rows[i] = tu_rows(db[i], &q, 1);
    }
    cr_assert_eq(count(db[1], "SELECT count(*) FROM gradients"), 1, "the attribution study stored no gradient");
    cr_assert_eq(count(db[0], "SELECT count(*) FROM results"), 9, "the baseline and 8 heads");
    char *nl = strchr(rows[0], '\n');
    cr_expect(strncmp(rows[0], rows[1], (size_t)(nl - rows[0])) == 0,
              "the baseline measured by its own pass:\n%.300s\nby the attribution gradient's:\n%.300s", rows[0],
              rows[1]);
    cr_expect_str_eq(rows[1], rows[0], "the other variants differ");
    free(rows[0]);
    free(rows[1]);
}

/*
 * A sweep is a (plan, model, data) triple of one numeric version: its jobs
 * are linked by their place in it, so were a rerun by another version the
 * same sweep, its new results (other content addresses) would never replace
 * the old links. The key therefore digests the numeric version too: a sweep
 * keyed as another version had it is left as it is, and the rerun is a sweep
 * of its own with every job linked.
 */
Test(sweep, another_numeric_version_is_another_sweep)
{
    char db[128], args[2048], errs[4096];
    path(db, sizeof db, "v.db");
    snprintf(args, sizeof args, "run %s --db %s --quiet --threads 1", small_plan, db);
    cr_assert_eq(hp_cmd(args, errs, sizeof errs), 0, "%s", errs);
    const char *dq = "SELECT p.digest || '/' || m.digest || '/' || d.digest FROM sweeps s JOIN plans p ON p.id = "
                     "s.plan_id JOIN models m ON m.id = s.model_id JOIN datasets d ON d.id = s.dataset_id";
    char *digests = tu_rows(db, &dq, 1);
    *strchr(digests, '\n') = 0;
    char text[512], key[HP_DIGEST_HEX], old[HP_DIGEST_HEX];
    snprintf(text, sizeof text, "%s/%d", digests, HP_NUMERIC_VERSION);
    hp_digest_text(text, key);
    snprintf(text, sizeof text, "%s/%d", digests, HP_NUMERIC_VERSION - 1);
    hp_digest_text(text, old);
    free(digests);
    char q[512];
    snprintf(q, sizeof q, "SELECT count(*) FROM sweeps WHERE key = '%s'", key);
    cr_assert_eq(count(db, q), 1, "the sweep's key is not its triple's and numeric version's digest");
    const long n_jobs = count(db, "SELECT count(*) FROM sweep_jobs");
    cr_assert_gt(n_jobs, 0);
    /* the sweep as the version before left it (its key) */
    sqlite3 *h;
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
    snprintf(q, sizeof q, "UPDATE sweeps SET key = '%s'", old);
    cr_assert_eq(sqlite3_exec(h, q, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);
    cr_assert_eq(hp_cmd(args, errs, sizeof errs), 0, "%s", errs);
    cr_assert_eq(count(db, "SELECT count(*) FROM sweeps"), 2, "the rerun joined the other version's sweep");
    snprintf(q, sizeof q, "SELECT count(*) FROM sweep_jobs j JOIN sweeps s ON s.id = j.sweep_id WHERE s.key = '%s'",
             key);
    cr_assert_eq(count(db, q), n_jobs, "the new sweep does not link every job");
    snprintf(q, sizeof q, "SELECT count(*) FROM sweep_jobs j JOIN sweeps s ON s.id = j.sweep_id WHERE s.key = '%s'",
             old);
    cr_assert_eq(count(db, q), n_jobs, "the old sweep's links changed");
}

// --- MLP blocks as units -------------------------------------------------------------

/* transformers' float64 loss of fixture llama-gqa under mask spec and ablation abl (tests/fixtures/mlp-cases.json). */
static double mlp_reference(const char *spec, const char *abl)
{
    char p[1200];
    snprintf(p, sizeof p, "%s/mlp-cases.json", getenv("HP_FIXTURES"));
    char *txt = tu_slurp(p, NULL);
    cJSON *j = cJSON_Parse(txt), *c;
    double want = NAN;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "cases"))
    {
        if (!strcmp(cJSON_GetObjectItem(c, "fixture")->valuestring, "llama-gqa") &&
            !strcmp(cJSON_GetObjectItem(c, "data")->valuestring, "data.npy") &&
            !strcmp(cJSON_GetObjectItem(c, "mask")->valuestring, spec) &&
            !strcmp(cJSON_GetObjectItem(c, "ablation")->valuestring, abl))
            want = cJSON_GetObjectItem(c, "loss")->valuedouble;
    }
    cJSON_Delete(j);
    free(txt);
    cr_assert(isfinite(want), "no reference for '%s' under %s", spec, abl);
    return want;
}

/* Every MLP variant of db (mask_text with "mlp:") against transformers; returns how many there are. */
static int mlp_variants_match(const char *db, const char *abl)
{
    sqlite3 *h;
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(h,
                                    "SELECT v.mask_text, r.loss FROM variants v JOIN results r ON r.variant_id = v.id "
                                    "WHERE v.mask_text LIKE '%mlp:%'",
                                    -1, &st, NULL),
                 SQLITE_OK);
    int n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *spec = (const char *)sqlite3_column_text(st, 0);
        const double got = sqlite3_column_double(st, 1), want = mlp_reference(spec, abl);
        cr_expect(fabs(got - want) <= 1e-5 * fmax(1, fabs(want)), "%s '%s' %s: loss %.9g, transformers %.9g", db,
                  spec, abl, got, want);
        n++;
    }
    sqlite3_finalize(st);
    sqlite3_close(h);
    return n;
}

Test(sweep, mlp_studies_match_transformers_and_keep_their_kind)
{
    char p[256], db[128], errs[4096], out[8192], args[512];
    path(db, sizeof db, "mlp.db");
    write_plan(p, sizeof p, "mlps", "mean",
               "  - single\n  - single: {name: mlps, units: mlp}\n  - random: {name: two, units: mlp, layers: [0, 1], "
               "k: [2]}\n");
    cr_assert_eq(run(p, db, NULL), 0);
    /* 3 singles and the one draw of both MLPs of layers 0 and 1 */
    cr_assert_eq(mlp_variants_match(db, "mean"), 4);
    cr_assert_eq(count(db, "SELECT count(*) FROM sweep_jobs WHERE study = 'mlps' AND kv = 2 AND label LIKE 'mlp:_'"),
                 3, "the MLP study's jobs are not stored as MLP units");
    cr_assert_eq(count(db, "SELECT count(*) FROM variants WHERE mask_text LIKE '%mlp:%' AND n_ablated > 0"), 0,
                 "an MLP counted as an ablated head");
    /* queries name them as what they are, and a head study is still the default */
    snprintf(args, sizeof args, "query heads --db %s --study mlps", db);
    cr_assert_eq(tu_headprune(NULL, args, tmp, out, sizeof out, errs, sizeof errs), 0, "%s", errs);
    cr_assert(strstr(out, "(MLPs)") && strstr(out, "mlp:0") && strstr(out, "mlp:2") && !strstr(out, "kv:"), "%s", out);
    snprintf(args, sizeof args, "query heads --db %s", db);
    cr_assert_eq(tu_headprune(NULL, args, tmp, out, sizeof out, errs, sizeof errs), 0, "%s", errs);
    cr_assert(strstr(out, "study single") && !strstr(out, "mlp:"), "%s", out);
    /* the stored means hold the MLPs' too: zeroed, a later MLP sweep gives zero ablation's numbers */
    cr_assert_eq(count(db, "SELECT count(*) FROM ablation_means"), 1);
}

Test(sweep, mean_statistics_stored_without_mlps_are_made_again)
{
    char p[256], db[128];
    path(db, sizeof db, "old-means.db");
    write_plan(p, sizeof p, "heads", "mean", "  - single\n");
    cr_assert_eq(run(p, db, NULL), 0);
    const long full = count(db, "SELECT length(mean_all) FROM ablation_means");
    /* a database written before MLPs were units: the heads' statistics alone (4 heads x 8 wide, 3 layers) */
    sqlite3 *h;
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(h,
                              "UPDATE ablation_means SET mean_all = substr(mean_all, 1, width * n_layers * 4),"
                              " mean_pos = substr(mean_pos, 1, width * n_layers * seq_len * 4)",
                              NULL, NULL, NULL),
                 SQLITE_OK);
    sqlite3_close(h);
    cr_assert_lt(count(db, "SELECT length(mean_all) FROM ablation_means"), full);
    write_plan(p, sizeof p, "mlps", "mean", "  - single\n  - single: {name: mlps, units: mlp}\n");
    cr_assert_eq(run(p, db, NULL), 0);
    cr_assert_eq(mlp_variants_match(db, "mean"), 3);
    cr_assert_eq(count(db, "SELECT length(mean_all) FROM ablation_means"), full, "the old row was not replaced");
    cr_assert_eq(count(db, "SELECT count(*) FROM ablation_means"), 1);
}

Test(sweep, mlp_units_a_study_cannot_take_are_refused_in_one_line)
{
    static const struct {
        const char *study, *words;
    } cases[] = {
        {"  - iterative: {units: mlp}\n", "units: mlp is for single, random, importance, attribution, direct studies"},
        {"  - pairs: {units: mlp}\n", "not a 'pairs' study"},
        {"  - single: {units: mlp, heads: [0]}\n", "narrow by 'layers'"},
        {"  - single: {units: mlp, kv: true}\n", "give one of them"},
        {"  - single: {units: mlps}\n", "'units' must be heads, kv or mlp, not 'mlps' (did you mean 'mlp'?)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char p[256];
        write_plan(p, sizeof p, "bad-units", "zero", cases[i].study);
        refused(p, cases[i].words);
    }
}
