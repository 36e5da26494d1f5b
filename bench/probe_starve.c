/* Starvation probe: can busy threads in other sessions keep a process off the CPU for seconds?
 * (No MPI, no GPU.) Found on the 2-core CI machine (Linux 6.18, sched_autogroup_enabled=1):
 * MPICH's launcher puts each rank in a session of its own, so in an autogroup of its own, and a
 * test rank whose loop spun on gpuwire_test beside its engine thread's MPI polling (two busy
 * threads) kept the other rank off the CPU for up to a minute (a 60 s test loop failed in CI,
 * 2026-12-07). Open MPI's ranks stay in the launcher's session and never showed it.
 *
 * cc -O2 -pthread bench/probe_starve.c -o probe_starve && ./probe_starve [seconds]
 *
 * Runs, one after the other, two children, each in a new session (setsid), each with BUSY
 * spinning threads and SLEEPY threads that sleep 5 us in a loop (as the null device's streams
 * poll their flags), for `seconds` (default 20); meanwhile this process sleeps 50 ms at a time
 * and prints the longest interval between two of its wake-ups: ideally 0.05 s. Rows:
 *   busy 1, sleepy 8: one busy thread per process (2 on 2 cores)
 *   busy 2, sleepy 0: more busy threads than cores, none sleepy
 *   busy 2, sleepy 8: both (the CI failure's pattern)
 * On the CI-like machine (2026-12-07, runs of 12, 20 and 20 s) the third row showed 0.15, 10.5 and
 * 4.4 s, the first two at most 0.15 s; with `echo 0 > /proc/sys/kernel/sched_autogroup_enabled`
 * all three rows showed 0.05 s (twice). The tests therefore never spin on gpuwire_test without
 * a pause (tests/gpu.rs `complete`, tests/c/test_nbc.c `complete`). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void *busy(void *arg) {
    volatile unsigned long x = 0;
    for (;;)
        x++;
    return arg;
}

static void *sleepy(void *arg) {
    for (;;)
        usleep(5);
    return arg;
}

static pid_t child(int nbusy, int nsleepy) {
    pid_t p = fork();
    if (p != 0)
        return p;
    setsid();
    pthread_t t;
    for (int i = 0; i < nbusy; i++)
        pthread_create(&t, NULL, busy, NULL);
    for (int i = 0; i < nsleepy; i++)
        pthread_create(&t, NULL, sleepy, NULL);
    pause();
    _exit(0);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 20.0;
    int rows[3][2] = {{1, 8}, {2, 0}, {2, 8}};
    for (int r = 0; r < 3; r++) {
        pid_t a = child(rows[r][0], rows[r][1]), b = child(rows[r][0], rows[r][1]);
        double t0 = now(), last = t0, worst = 0;
        while (now() - t0 < seconds) {
            usleep(50000);
            double t = now();
            if (t - last > worst)
                worst = t - last;
            last = t;
        }
        kill(a, SIGKILL);
        kill(b, SIGKILL);
        waitpid(a, NULL, 0);
        waitpid(b, NULL, 0);
        printf("busy %d, sleepy %d (per process, 2 processes): longest gap between 50 ms sleeps %.2f s\n", rows[r][0], rows[r][1], worst);
    }
    return 0;
}
