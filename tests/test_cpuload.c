/*
 * test_cpuload.c -- the measure of other processes' load that automatic
 * threads follow (engine/core/cpuload.c): the choice of threads for a load, and
 * a busy child process seen as about one CPU of other work while this
 * process sleeps. Other tests running beside this one only add load, so the
 * lower bound holds on a busy machine too.
 */
#define _DEFAULT_SOURCE
#include <criterion/criterion.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cpuload.h"

Test(cpuload, threads_are_the_idle_cpus_and_at_least_one)
{
    cr_assert_eq(hp_cpu_threads_for(2, 0.0), 2);
    cr_assert_eq(hp_cpu_threads_for(2, 0.4), 2);  /* under half a CPU: two threads still win */
    cr_assert_eq(hp_cpu_threads_for(2, 0.6), 1);
    cr_assert_eq(hp_cpu_threads_for(2, 1.0), 1);
    cr_assert_eq(hp_cpu_threads_for(2, 2.7), 1);  /* never none */
    cr_assert_eq(hp_cpu_threads_for(4, 1.2), 3);
    cr_assert_eq(hp_cpu_threads_for(2, -1.0), 2); /* unknown: every CPU */
    cr_assert_eq(hp_cpu_threads_for(1, 0.0), 1);
}

Test(cpuload, a_busy_child_is_other_work)
{
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        volatile unsigned long x = 0;
        for (;;)
            x++;
    }
    struct timespec settle = {0, 50 * 1000 * 1000}, span = {0, 600 * 1000 * 1000};
    nanosleep(&settle, NULL);
    struct hp_cpu_meter a, b;
    hp_cpu_meter_read(&a);
    nanosleep(&span, NULL);
    hp_cpu_meter_read(&b);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    cr_assert(a.ok && b.ok, "/proc/stat was not read");
    double secs, others = hp_cpu_others(&a, &b, &secs);
    cr_assert_geq(secs, 0.59);
    cr_assert_geq(others, 0.6, "a busy child measured as %.2f CPUs of other work", others);
    cr_assert_leq(others, hp_cpu_count() + 0.2, "%.2f CPUs of other work on %d CPUs", others, hp_cpu_count());
    cr_assert_geq(hp_cpu_count(), 1);
}

/* The choices eval and run make: nothing new before HP_LOAD_INTERVAL, and beside a busy child one
 * CPU fewer (on a machine of two or more). */
Test(cpuload, auto_threads_follow_a_busy_child)
{
    struct hp_auto_threads a;
    hp_auto_threads_begin(&a);
    /* begin and first a moment apart: too short to tell, so every CPU (unless this process stalled
     * for 0.1 s between them, when the measured choice is what it must be) */
    int first = hp_auto_threads_first(&a);
    cr_assert(first >= 1 && first <= hp_cpu_count(), "%d threads on %d CPUs", first, hp_cpu_count());
    cr_assert_eq(hp_auto_threads_next(&a), 0, "no new choice before HP_LOAD_INTERVAL");
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        volatile unsigned long x = 0;
        for (;;)
            x++;
    }
    struct timespec span = {0, 600 * 1000 * 1000};
    nanosleep(&span, NULL);
    int n = hp_auto_threads_next(&a);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    cr_assert_geq(n, 1);
    if (hp_cpu_count() >= 2)
        cr_assert_leq(n, hp_cpu_count() - 1, "%d threads chosen beside a busy child on %d CPUs", n, hp_cpu_count());
}
