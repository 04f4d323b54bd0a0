/*
 * slurm.c -- `headprune slurm`: a plan run on a Slurm cluster as a job array
 * of shards, each into its own database, and a merge job after it. The
 * scripts are written (and submitted) by engine/sweep/slurm.c; this file reads the
 * options, resolves every path to an absolute one, and says what it did.
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "slurm.h"

static const char slurm_help[] =
    "Usage: headprune slurm PLAN.yaml --shards N [options] [--sbatch-arg ARG]...\n"
    "\n"
    "Run a plan on a Slurm cluster: a job array of N tasks, task K running shard K\n"
    "of N ('headprune run --shard K/N') into a database of its own with one thread\n"
    "per CPU Slurm gives it, then a merge job into OUT that starts when every task\n"
    "has ended, however it ended (--dependency=afterany). The merge merges the\n"
    "shards that finished; when some did not (a time limit, a failed node), its\n"
    "log names them and prints the command that re-runs them and the merge: a\n"
    "re-run shard resumes from its database, skipping the jobs it finished. No\n"
    "SQLite database is ever shared by two tasks (its locking cannot be trusted\n"
    "over a network file system): one per task, merged.\n"
    "\n"
    "The scripts go in a folder beside OUT: OUT without '.db', plus '.slurm'\n"
    "(results/NAME.slurm/ for the default OUT), with shards.sbatch (the array),\n"
    "merge.sbatch, the shards' databases shard-K-of-N.db and their exit statuses\n"
    "shard-K-of-N.status, and logs/. Both are submitted with 'sbatch --parsable'\n"
    "from that folder; the job ids and the squeue and sacct lines that follow them\n"
    "are printed. Every path in them is absolute: the headprune binary, the plan,\n"
    "its model and data and OUT's folder must be on a file system the compute\n"
    "nodes see.\n"
    "\n"
    "Iterative, gradient (importance, attribution), gates and roles studies are\n"
    "sequential: each step's masks depend on the results before it (a gates\n"
    "study's training steps likewise; a roles study is one computation). They run\n"
    "in shard 1, after its share of the other jobs, with its task's CPUs, exactly\n"
    "as 'run --shard 1/N' runs them: splitting a step's candidates over the array\n"
    "would make every task wait for the others at every step, through one shared\n"
    "database. Give --time for shard 1's longer work; a plan whose sequential\n"
    "study dominates runs best as a plan of its own with --shards 1 and the CPUs\n"
    "of a node (--cpus-per-task). A plan with nothing else leaves shards 2..N\n"
    "nothing to do, which slurm says.\n";

/* Whether the plan has studies that run in shard 1 only, and their names into names; *only: whether every study
 * but its baselines does (then the other shards have nothing to run: the baseline is the first job, shard 1's). */
static bool sequential_studies(const struct hp_plan *p, char *names, size_t cap, bool *only)
{
    size_t n = 0;
    names[0] = '\0';
    *only = true;
    for (int i = 0; i < p->n_studies; i++) {
        enum hp_study_kind k = p->studies[i].kind;
        *only &= k == HP_STUDY_BASELINE || hp_study_first_shard_only(k);
        if (hp_study_first_shard_only(k)) {
            int w = snprintf(names + n, cap - n, "%s%s", n ? ", " : "", p->studies[i].name);
            n = w > 0 && (size_t)w < cap - n ? n + (size_t)w : n;
        }
    }
    return n > 0;
}

/* OUT made absolute: its folder resolved (it must exist), its name kept. */
static enum hp_status absolute_db(const char *db, char *out, size_t cap, struct hp_error *err)
{
    const char *slash = strrchr(db, '/');
    const char *base = slash ? slash + 1 : db;
    if (!*base)
        return hp_fail(err, HP_ERR_ARG, "%s: --db names a folder; give a database file, e.g. results/sweep.db", db);
    char *dir, *real;
    enum hp_status st =
        hp_path_make(&dir, err, "%.*s", slash ? (int)(slash - db) + (slash == db) : 1, slash ? db : ".");
    if (st != HP_OK)
        return st;
    if (!(real = realpath(dir, NULL))) {
        st = hp_fail(err, HP_ERR_IO, "%s: cannot use the folder of --db (%s; make it first)", dir, hp_strerror(errno));
        free(dir);
        return st;
    }
    int w = snprintf(out, cap, "%s/%s", strcmp(real, "/") ? real : "", base);
    if (w < 0 || (size_t)w >= cap)
        st = hp_fail(err, HP_ERR_ARG, "%s: path too long: %d bytes made absolute, the system takes %zu", db, w, cap - 1);
    free(real);
    free(dir);
    return st;
}

/* --sbatch-arg's words, in order (at most one a word of argv). */
struct sbatch_args {
    const char **v;
    int n;
};

static const char *take_partition(const struct opt *o, const char *text)
{
    *(const char **)o->value = text;
    return !*text || strchr(text, '\n') ? "--partition must name a partition" : NULL;
}

static const char *take_time(const struct opt *o, const char *text)
{
    *(const char **)o->value = text;
    return hp_slurm_time_ok(text) ? NULL : "--time must be a Slurm time: minutes, H:M:S or D-H:M:S, e.g. 2:00:00";
}

static const char *take_sbatch_arg(const struct opt *o, const char *text)
{
    struct sbatch_args *a = o->value;
    if (text[0] != '-' || strchr(text, '\n'))
        return "--sbatch-arg takes one sbatch option as one word, e.g. --sbatch-arg=--mem=8G";
    a->v[a->n++] = text;
    return NULL;
}

int cmd_slurm(int argc, char **argv)
{
    const char *db = NULL, *partition = NULL, *time_limit = NULL;
    int shards = 0, cpus = 1;
    bool dry = false;
    struct sbatch_args extra = {calloc((size_t)argc + 1, sizeof *extra.v), 0};
    if (!extra.v) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return 1;
    }
    const struct opt opts[] = {
        OPT_INT("shards", 0, &shards, "N", 1, 1000000,
                "array tasks, one shard each (1 <= N <= 1000000; Slurm's default MaxArraySize takes up to 1000)"),
        OPT_PATH("db", 0, &db, "OUT", "merged database (default results/<plan name>.db)"),
        OPT_CALLBACK("partition", 0, &partition, "P", take_partition, "partition of both jobs (default: the "
                                                                       "cluster's)"),
        OPT_CALLBACK("time", 0, &time_limit, "T", take_time,
                     "time limit of each task and of the merge, as sbatch takes it: minutes, H:M:S, D-H:M:S "
                     "(default: the partition's)"),
        OPT_INT("cpus-per-task", 0, &cpus, "C", 1, 1024, "CPUs of each task, and its threads (default 1)"),
        OPT_CALLBACK("sbatch-arg", 0, &extra, "ARG", take_sbatch_arg,
                     "one more #SBATCH option for both jobs, as one word, e.g. --sbatch-arg=--mem=8G "
                     "--sbatch-arg=--account=proj; repeatable"),
        OPT_FLAG("dry-run", 0, &dry, "write the scripts and print the sbatch commands, without submitting"),
        OPT_END(),
    };
    const struct cmd_help h = {.name = "slurm", .usage = slurm_help, .opts = opts};
    int n_args, rc = parse_options(&h, argc, argv, &n_args);
    if (rc < 0 && n_args != 1)
        rc = usage_error("slurm", "give one PLAN.yaml");
    if (rc < 0 && shards == 0)
        rc = usage_error("slurm", "give --shards N, the number of array tasks");
    if (rc >= 0) {
        free(extra.v);
        return rc;
    }

    struct hp_error err = {0};
    struct hp_plan *p = NULL;
    if (hp_plan_load(argv[1], &p, &err) != HP_OK) {
        free(extra.v);
        return die(&err);
    }
    char plan_abs[PATH_MAX], exe[PATH_MAX], db_abs[PATH_MAX], defdb[1200], seq[512];
    bool seq_only = false, sequential = sequential_studies(p, seq, sizeof seq, &seq_only);
    struct hp_slurm_paths paths;
    rc = 1;
    ssize_t n_exe = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (!realpath(p->path, plan_abs)) {
        hp_fail(&err, HP_ERR_IO, "%s: cannot resolve the plan's path (%s)", p->path, hp_strerror(errno));
        goto fail;
    }
    if (n_exe <= 0 || (size_t)n_exe >= sizeof exe - 1) {
        hp_fail(&err, HP_ERR_IO, "/proc/self/exe: cannot find the headprune binary the tasks should run (%s)",
                hp_strerror(errno));
        goto fail;
    }
    exe[n_exe] = '\0';
    if (!db) {
        snprintf(defdb, sizeof defdb, "results/%s.db", p->name);
        db = defdb;
        mkdir("results", 0777); /* the default folder, as run makes it; an error surfaces below */
    }
    if (absolute_db(db, db_abs, sizeof db_abs, &err) != HP_OK || hp_slurm_paths_for(db_abs, &paths, &err) != HP_OK)
        goto fail;
    struct hp_slurm_job job = {
        .headprune = exe, .plan = plan_abs, .name = p->name, .db = db_abs, .shards = shards,
        .cpus_per_task = cpus, .partition = partition, .time = time_limit,
        .sbatch_args = extra.v, .n_sbatch_args = extra.n, .sequential = sequential,
    };
    if (hp_slurm_write(&job, &paths, &err) != HP_OK)
        goto fail;

    char dir_q[4 * PATH_MAX + 8];
    hp_shell_quote(paths.dir, dir_q, sizeof dir_q);
    printf("wrote %s: a job array of %d task%s, task K runs shard K of %d into shard-K-of-%d.db with %d CPU%s\n",
           paths.shards, shards, shards == 1 ? "" : "s", shards, shards, cpus, cpus == 1 ? "" : "s");
    printf("      %s: after the array, merges the shards that finished into %s\n", paths.merge, db_abs);
    char idle[64];
    snprintf(idle, sizeof idle, shards > 2 ? "tasks 2 to %d have" : "task %d has", shards);
    if (sequential && seq_only && shards > 1)
        printf("shard 1 runs the whole plan: its studies (%s) are all sequential, so %s nothing to run (--shards 1 "
               "does the same work; see --help)\n", seq, idle);
    else if (sequential)
        printf("shard 1 also runs the plan's sequential studies (%s), after its share (see --help)\n", seq);
    if (dry) {
        printf("would run, from the scripts' folder:\n"
               "  cd %s && sbatch --parsable shards.sbatch\n"
               "  cd %s && sbatch --parsable --dependency=afterany:ARRAY_JOB_ID merge.sbatch\n",
               dir_q, dir_q);
        rc = 0;
        goto out;
    }
    char array_id[64], merge_id[64];
    if (hp_slurm_clear_status(&paths, shards, &err) != HP_OK ||
        hp_slurm_submit(paths.dir, "shards.sbatch", NULL, array_id, sizeof array_id, &err) != HP_OK)
        goto fail;
    if (hp_slurm_submit(paths.dir, "merge.sbatch", array_id, merge_id, sizeof merge_id, &err) != HP_OK) {
        fprintf(stderr, "%s: %s; job array %s was submitted: cancel it (scancel %s) or submit the merge by hand "
                "(cd %s && sbatch --dependency=afterany:%s merge.sbatch)\n",
                prog, err.msg, array_id, array_id, dir_q, array_id);
        goto out;
    }
    printf("submitted job array %s (tasks %s_1 to %s_%d) and merge job %s (after job %s ends, however it ends)\n",
           array_id, array_id, array_id, shards, merge_id, array_id);
    printf("follow:  squeue -j %s,%s\n"
           "         sacct -j %s,%s -X --format=JobID,JobName,State,Elapsed,ExitCode\n"
           "logs:    %s/logs/shard-K-of-%d.%s.out and merge.%s.out\n",
           array_id, merge_id, array_id, merge_id, paths.dir, shards, array_id, merge_id);
    rc = 0;
    goto out;
fail:
    rc = die(&err);
out:
    hp_plan_free(p);
    free(extra.v);
    return rc;
}
