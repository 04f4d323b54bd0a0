/* cpuload_int.h -- how busy other processes keep this process's CPUs (engine/cpuload.c). */
#ifndef HP_CPULOAD_INT_H
#define HP_CPULOAD_INT_H

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

#endif
