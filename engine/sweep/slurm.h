/*
 * slurm.h -- a plan's sweep as Slurm jobs: the job scripts `headprune
 * slurm` writes, and their submission with sbatch (engine/sweep/slurm.c).
 */
#ifndef HP_SLURM_H
#define HP_SLURM_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "headprune.h"

/* What the scripts run. Every path is absolute: the tasks run on other machines, in other folders. */
struct hp_slurm_job {
    const char *headprune; /* the headprune binary the tasks run */
    const char *plan;      /* the plan file */
    const char *name;      /* the plan's name: jobs hp-<name> and hp-<name>-merge */
    const char *db;        /* the merged database (OUT) */
    int shards;            /* N >= 1: array tasks 1..N, task K runs shard K/N */
    int cpus_per_task;     /* >= 1: CPUs Slurm allocates each task, and the threads it runs */
    const char *partition; /* NULL: the cluster's default */
    const char *time;      /* NULL: the partition's default; else as hp_slurm_time_ok takes it */
    const char *const *sbatch_args; /* (n_sbatch_args) more sbatch options, each one word: "--mem=8G" */
    int n_sbatch_args;
    bool sequential; /* the plan has studies shard 1 runs alone (hp_study_first_shard_only): said in the script */
};

/* Where the scripts and the shards' files go: a folder beside OUT. */
struct hp_slurm_paths {
    char dir[PATH_MAX];    /* OUT without ".db", plus ".slurm" */
    char shards[PATH_MAX]; /* dir/shards.sbatch: the job array */
    char merge[PATH_MAX];  /* dir/merge.sbatch: the merge, after the array */
};

/* The folder and script paths for the merged database db (absolute). */
enum hp_status hp_slurm_paths_for(const char *db, struct hp_slurm_paths *p, struct hp_error *err);

/*
 * Write the job array script and the merge script into p's folder (made
 * if missing, with logs/ in it; OUT's own folder must exist), each
 * whole or not at all. Refuses a path or value with a newline (a job
 * script's #SBATCH line cannot hold one) or a relative path.
 */
enum hp_status hp_slurm_write(const struct hp_slurm_job *j, const struct hp_slurm_paths *p, struct hp_error *err);

/* Remove shards 1..n's status files, so a merge cannot take an earlier submission's for this one's. */
enum hp_status hp_slurm_clear_status(const struct hp_slurm_paths *p, int n, struct hp_error *err);

/*
 * Submit script with `sbatch --parsable [--dependency=afterany:AFTER] SCRIPT`
 * from dir (AFTER NULL: none); the job id it prints into jobid (cap bytes).
 * sbatch not on PATH, or failing (its stderr quoted in the message, on one
 * line), is HP_ERR_IO.
 */
enum hp_status hp_slurm_submit(const char *dir, const char *script, const char *after, char *jobid, size_t cap,
                               struct hp_error *err);

/* A time limit as sbatch --time takes it: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, or UNLIMITED/INFINITE. */
bool hp_slurm_time_ok(const char *t);

/* s quoted for bash, '...' with each ' as '\'' , into out: false when it does not fit in cap. */
bool hp_shell_quote(const char *s, char *out, size_t cap);

#endif
