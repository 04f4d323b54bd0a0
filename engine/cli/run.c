/*
 * run.c -- `headprune run`: a plan run into a results database, resumable
 * (Ctrl-C stops after the current batch) and shardable.
 */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_int.h"

static const char run_help[] =
    "Usage: headprune run PLAN.yaml [--db FILE] [--shard I/N] [--threads N]\n"
    "                     [--batch N] [--plain] [--quiet]\n"
    "\n"
    "Run a plan's jobs into an SQLite results database. Jobs are content-addressed\n"
    "(model and data digests, mask, ablation, engine numeric version): finished\n"
    "ones are skipped, so re-running resumes and changing a parameter adds jobs.\n"
    "Variants are evaluated together in batches, reusing the unmasked model's\n"
    "work: each starts at its first masked layer. Every result is written as its\n"
    "batch ends; Ctrl-C stops after the current batch, and even kill -9 loses at\n"
    "most that batch. A gates study's training run saves its state every 25 steps\n"
    "or 10 s (and on Ctrl-C), and resumes from it.\n"
    "\n"
    "  --db FILE      results database (default results/<plan name>.db, next to\n"
    "                 the current directory's results/ folder)\n"
    "  --shard I/N    run only the I-th of N slices of the jobs (1-based), e.g. in\n"
    "                 N processes or on N machines; merge with 'headprune merge'.\n"
    "                 Iterative, gradient and gates studies run in shard 1\n"
    "                 only.\n"
    "  --threads N    threads (default: as many as other processes leave CPUs\n"
    "                 idle, re-measured every quarter second from /proc/stat, so\n"
    "                 a busy machine or a second run does not stall the barriers\n"
    "                 of a 2-thread sweep; results do not depend on the count)\n"
    "  --batch N      variants evaluated together (default 64): larger batches\n"
    "                 share more work, smaller ones lose less to a kill\n"
    "  --plain        no reuse: every variant by whole forward passes of its own\n"
    "                 (the reference path the default is tested against; slower)\n"
    "  --quiet        no progress output\n";

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

int cmd_run(int argc, char **argv)
{
    static const struct option opts[] = {{"db", required_argument, 0, 'd'},     {"shard", required_argument, 0, 's'},
                                         {"threads", required_argument, 0, 't'}, {"quiet", no_argument, 0, 'q'},
                                         {"batch", required_argument, 0, 'b'},   {"plain", no_argument, 0, 'p'},
                                         {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    const char *db = NULL;
    int si = 1, sn = 1, threads = 0, batch = 0, c;
    bool quiet = false, plain = false;
    while ((c = getopt_long(argc, argv, "d:s:t:qh", opts, NULL)) != -1) {
        switch (c) {
        case 'd': db = optarg; break;
        case 's':
            if (!parse_shard(optarg, &si, &sn))
                return usage_error("run", "--shard must be I/N with 1 <= I <= N, e.g. 2/4");
            break;
        case 't':
            if ((c = int_option("run", "--threads", NULL, optarg, 1, 1024, &threads)) != 0)
                return c;
            break;
        case 'b':
            if ((c = int_option("run", "--batch", NULL, optarg, 1, 1 << 20, &batch)) != 0)
                return c;
            break;
        case 'p': plain = true; break;
        case 'q': quiet = true; break;
        case 'h': fputs(run_help, stdout); return 0;
        default: return usage_error("run", "unknown option");
        }
    }
    if (optind != argc - 1)
        return usage_error("run", "give one PLAN.yaml");
    struct hp_error err = {0};
    struct hp_plan *p = NULL;
    if (hp_plan_load(argv[optind], &p, &err) != HP_OK)
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
