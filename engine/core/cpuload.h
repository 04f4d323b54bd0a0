/* cpuload.h -- how busy other processes keep this process's CPUs (engine/core/cpuload.c). */
#ifndef HP_CPULOAD_H
#define HP_CPULOAD_H

#include <stdbool.h>

/* CPUs this process may run on (its affinity mask; at least 1). */
int hp_cpu_count(void);

/* A reading of /proc/stat and of this process's own CPU time. */
struct hp_cpu_meter {
    bool ok;     /* /proc/stat was readable */
    double wall; /* CLOCK_MONOTONIC, seconds */
    double busy; /* seconds of non-idle time on this process's CPUs */
    double self; /* this process's CPU time, all threads, seconds */
};

void hp_cpu_meter_read(struct hp_cpu_meter *m);

/*
 * CPUs' worth of work other processes did on this process's CPUs between
 * readings a and b (b later), and the seconds between them; negative when
 * unknown.
 */
double hp_cpu_others(const struct hp_cpu_meter *a, const struct hp_cpu_meter *b, double *seconds);

/* Threads to run beside others CPUs' worth of other work on n_cpus CPUs: the idle ones, at least 1. */
int hp_cpu_threads_for(int n_cpus, double others);

/*
 * Threads that follow the load, for a long computation that can change its
 * thread count between steps (run's sweep, eval): as many as other
 * processes leave this process's CPUs idle, measured since the last choice.
 */
struct hp_auto_threads {
    int n_cpus;
    struct hp_cpu_meter since; /* the reading other processes' work is measured from */
};

#define HP_LOAD_INTERVAL 0.25 /* seconds between choices: /proc/stat counts in 10 ms ticks */

/* Start measuring (before the work that precedes the first choice, e.g. opening a model). */
void hp_auto_threads_begin(struct hp_auto_threads *a);

/* The first choice: from the load since begin, or every CPU when that was under 0.1 s, too short to tell. */
int hp_auto_threads_first(struct hp_auto_threads *a);

/* A later choice: the threads for the load since the last choice, or 0 (keep the current count) when
 * that was under HP_LOAD_INTERVAL ago. */
int hp_auto_threads_next(struct hp_auto_threads *a);

/*
 * The threads of one computation (eval, roles): fixed (n > 0, as --threads says) or following the load
 * (n <= 0): measured from begin, over opening the model and data, chosen at start and again at each step
 * (two threads on a CPU another process keeps busy stall each other at every barrier). threads_min and
 * threads_max: the fewest and most it ran with. Every choice is set with hp_runtime_init.
 */
struct hp_threads_run {
    bool follow;                 /* n <= 0: the count follows the load */
    struct hp_auto_threads load; /* when follow */
    int threads, threads_min, threads_max;
};
void hp_threads_run_begin(struct hp_threads_run *t, int n); /* before opening the model */
void hp_threads_run_start(struct hp_threads_run *t);        /* the first choice, before the work */
void hp_threads_run_step(struct hp_threads_run *t);         /* between steps of the work */

#endif
