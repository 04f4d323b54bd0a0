/*
 * run.c -- `headprune run`: a plan run into a results database, resumable
 * (Ctrl-C stops after the current batch) and shardable.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static const char run_help[] =
    "Usage: headprune run PLAN.yaml [options]\n"
    "\n"
    "Run a plan's jobs into an SQLite results database. Jobs are content-addressed\n"
    "(model and data digests, mask, ablation, engine numeric version): finished\n"
    "ones are skipped, so re-running resumes and changing a parameter adds jobs.\n"
    "Variants are evaluated together in batches, reusing the unmasked model's\n"
    "work: each starts at its first masked layer. Every result is written as its\n"
    "batch ends; Ctrl-C stops after the current batch, and even kill -9 loses at\n"
    "most that batch. A gates study's training run saves its state every 25 steps\n"
    "or 10 s (and on Ctrl-C), and resumes from it.\n";

static volatile int g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

/*
 * This process's peak resident memory in MB: VmHWM, which starts afresh at
 * exec (getrusage's ru_maxrss carries over the peak of the process that
 * forked us, so a script's memory would show up as ours).
 */
static double peak_mb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lf kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    if (kb < 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        kb = (double)ru.ru_maxrss;
    }
    return kb / 1024.0;
}

/* --shard I/N */
static const char *take_shard(const struct opt *o, const char *text)
{
    int *si_sn = o->value;
    return parse_shard(text, &si_sn[0], &si_sn[1]) ? NULL : "--shard must be I/N with 1 <= I <= N, e.g. 2/4";
}

int cmd_run(int argc, char **argv)
{
    const char *db = NULL;
    int shard[2] = {1, 1}, threads = 0, batch = 0;
    bool quiet = false, plain = false;
    const struct opt opts[] = {
        OPT_DB(&db, "results database (default results/<plan name>.db, next to the current directory's results/ "
                    "folder)"),
        OPT_CALLBACK("shard", 's', shard, "I/N", take_shard,
                     "run only the I-th of N slices of the jobs (1-based), e.g. in N processes or on N machines; "
                     "merge with 'headprune merge'. Iterative, gradient and gates studies run in shard 1 only."),
        OPT_THREADS(&threads, "threads (default: as many as other processes leave CPUs idle, re-measured every "
                              "quarter second from /proc/stat, so a busy machine or a second run does not stall the "
                              "barriers of a 2-thread sweep; results do not depend on the count)"),
        OPT_INT("batch", 0, &batch, "N", 1, 1 << 20,
                "variants evaluated together (default 64): larger batches share more work, smaller ones lose less "
                "to a kill"),
        OPT_FLAG("plain", 0, &plain, "no reuse: every variant by whole forward passes of its own (the reference "
                                     "path the default is tested against; slower)"),
        OPT_QUIET(&quiet, "no progress output"),
        OPT_END(),
    };
    const struct cmd_help h = {.name = "run", .usage = run_help, .opts = opts};
    int n_args, rc = parse_options(&h, argc, argv, &n_args);
    if (rc >= 0)
        return rc;
    if (n_args != 1)
        return usage_error("run", "give one PLAN.yaml");
    const int si = shard[0], sn = shard[1];
    struct hp_error err = {0};
    struct hp_plan *p = NULL;
    if (hp_plan_load(argv[1], &p, &err) != HP_OK)
        return die(&err);
    char *dbpath = NULL;
    if (!db) {
        if (hp_path_make(&dbpath, &err, "results/%s.db", p->name) != HP_OK) {
            hp_plan_free(p);
            return die(&err);
        }
        db = dbpath;
        mkdir("results", 0777); /* the default folder; an error surfaces when the database opens */
    }
    hp_runtime_init(threads);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    struct run_progress rp = {isatty(STDERR_FILENO), quiet, false, 0, p->path, db};
    struct hp_sweep_opts o = {
        .db_path = db,
        .shard_index = si - 1,
        .shard_count = sn,
        .threads = threads,
        .batch = batch,
        .plain = plain,
        .progress = run_progress_cb,
        .user = &rp,
        .stop = &g_stop,
    };
    struct hp_sweep_summary sum;
    enum hp_status st = hp_sweep_run(p, &o, &sum, &err);
    if (rp.tty && !quiet)
        fputs("\r\033[K", stderr);
    if (st == HP_OK && !sum.interrupted && sum.foreign)
        warn_foreign(p->data, p->model, sum.base_loss, sum.base_acc);
    hp_plan_free(p);
    if (st != HP_OK) {
        free(dbpath);
        return die(&err);
    }
    if (sum.interrupted) {
        fprintf(stderr, "headprune: interrupted after %lld jobs (%lld run, %lld already done); run the same command to resume\n",
                (long long)sum.n_jobs, (long long)sum.n_run, (long long)(sum.n_cached + sum.n_repeated));
        free(dbpath);
        return 130;
    }
    char thr[32] = "";
    if (sum.threads_min > 0 && sum.threads_min == sum.threads_max)
        snprintf(thr, sizeof thr, ", %d thread%s", sum.threads_min, sum.threads_min == 1 ? "" : "s");
    else if (sum.threads_min > 0)
        snprintf(thr, sizeof thr, ", %d-%d threads", sum.threads_min, sum.threads_max);
    printf("sweep %lld: %lld jobs (%lld run, %lld repeated within the plan, %lld already in the database) in %.1f s%s%s, "
           "peak memory %.0f MB -> %s\n",
           (long long)sum.sweep_id, (long long)sum.n_jobs, (long long)sum.n_run, (long long)sum.n_repeated,
           (long long)sum.n_cached, sum.seconds,
           thr, threads ? "" : " (auto)", peak_mb(), db);
    free(dbpath);
    return 0;
}
