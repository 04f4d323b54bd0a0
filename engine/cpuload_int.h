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

#endif
