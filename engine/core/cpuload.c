/*
 * cpuload.c -- how many of this process's CPUs other processes keep busy,
 * read from /proc/stat, so a sweep can run as many threads as there are
 * idle CPUs.
 *
 * Why: the engine's products split their rows over threads statically and
 * meet at barriers, so a thread that shares its CPU with another process
 * holds every other thread up. Beside one busy process a 2-thread sweep on 2
 * CPUs took 1.6x as long as a 1-thread one (bench/README.md, "Contention").
 * Matching threads to idle CPUs, measured while the sweep runs, keeps the
 * idle speed of all threads and the loaded speed of one.
 * Invariant: only reads /proc/stat, the affinity mask and clocks.
 * Must not: allocate, print, or change any thread count itself.
 */
#define _GNU_SOURCE
#include "cpuload.h"

#include "headprune.h" /* hp_runtime_init */

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int hp_cpu_count(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void hp_cpu_meter_read(struct hp_cpu_meter *m)
{
    memset(m, 0, sizeof *m);
    m->wall = clock_s(CLOCK_MONOTONIC);
    m->self = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    cpu_set_t set;
    bool have_set = sched_getaffinity(0, sizeof set, &set) == 0;
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return;
    long hz = sysconf(_SC_CLK_TCK);
    char line[512];
    unsigned long long ticks = 0;
    bool any = false;
    while (fgets(line, sizeof line, f)) {
        int cpu;
        unsigned long long user, nice, sys, idle, iowait, irq, softirq, steal;
        /* per-CPU lines only ("cpuN ..."): the total line has no number */
        if (strncmp(line, "cpu", 3) != 0 || sscanf(line + 3, "%d %llu %llu %llu %llu %llu %llu %llu %llu", &cpu,
                                                   &user, &nice, &sys, &idle, &iowait, &irq, &softirq, &steal) != 9)
            continue;
        if (have_set && (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &set)))
            continue;
        /* niced work counts too: with the kernel's autogroups (every terminal session a group)
         * a niced process in another session competes as an equal */
        ticks += user + nice + sys + irq + softirq + steal;
        any = true;
    }
    fclose(f);
    m->ok = any && hz > 0;
    m->busy = m->ok ? (double)ticks / (double)hz : 0;
}

double hp_cpu_others(const struct hp_cpu_meter *a, const struct hp_cpu_meter *b, double *seconds)
{
    double dt = b->wall - a->wall;
    *seconds = dt;
    if (!a->ok || !b->ok || dt <= 0)
        return -1;
    double others = ((b->busy - a->busy) - (b->self - a->self)) / dt;
    return others < 0 ? 0 : others;
}

int hp_cpu_threads_for(int n_cpus, double others)
{
    if (others < 0) /* unknown: every CPU, as a fixed default would */
        return n_cpus;
    int busy = (int)(others + 0.5);
    return n_cpus - busy >= 1 ? n_cpus - busy : 1;
}

// --- threads that follow the load ---------------------------------------------

void hp_auto_threads_begin(struct hp_auto_threads *a)
{
    a->n_cpus = hp_cpu_count();
    hp_cpu_meter_read(&a->since);
}

/* The threads for the load since a->since when at least min_secs passed (the reading then moves on), else 0. */
static int choose(struct hp_auto_threads *a, double min_secs)
{
    struct hp_cpu_meter now;
    hp_cpu_meter_read(&now);
    double secs, others = hp_cpu_others(&a->since, &now, &secs);
    if (secs < min_secs)
        return 0;
    a->since = now;
    return hp_cpu_threads_for(a->n_cpus, others);
}

int hp_auto_threads_first(struct hp_auto_threads *a)
{
    int n = choose(a, 0.1);
    if (n == 0) {
        hp_cpu_meter_read(&a->since);
        n = a->n_cpus;
    }
    return n;
}

int hp_auto_threads_next(struct hp_auto_threads *a)
{
    return choose(a, HP_LOAD_INTERVAL);
}

// --- one computation's threads -------------------------------------------------------

void hp_threads_run_begin(struct hp_threads_run *t, int n)
{
    *t = (struct hp_threads_run){.follow = n <= 0, .threads = n, .threads_min = n, .threads_max = n};
    if (t->follow)
        hp_auto_threads_begin(&t->load);
    else
        hp_runtime_init(n);
}

void hp_threads_run_start(struct hp_threads_run *t)
{
    if (!t->follow)
        return;
    t->threads = t->threads_min = t->threads_max = hp_auto_threads_first(&t->load);
    hp_runtime_init(t->threads);
}

void hp_threads_run_step(struct hp_threads_run *t)
{
    const int n = t->follow ? hp_auto_threads_next(&t->load) : 0;
    if (n <= 0 || n == t->threads)
        return;
    hp_runtime_init(n);
    t->threads = n;
    t->threads_min = n < t->threads_min ? n : t->threads_min;
    t->threads_max = n > t->threads_max ? n : t->threads_max;
}
