/* lineping.c - what moving one cache line between two CPUs costs here.
 *
 * Two threads, pinned to CPUs A and B, take turns incrementing one counter
 * on its own cache line with an atomic read-modify-write: thread A waits for
 * an even value and makes it odd, thread B the reverse.  Every increment
 * therefore finds the line in the other CPU's cache, and one increment is
 * one transfer (plus the RMW itself).  bench/scaling uses the figure as this
 * machine's cache-line transfer cost when it checks its contention model
 * against a 2-thread run (docs/scaling.md).  On a loaded or virtual machine
 * a turn may wait for a descheduled partner (a time slice, milliseconds), so
 * it runs many short trials (1000 of 500 turns by default, tens of
 * microseconds each) and reports the fastest: a trial during which both
 * threads kept their CPUs.  No allocator call: it runs the same under any.
 *
 * Usage: lineping [-a CPU] [-b CPU] [-n TURNS] [-r TRIALS]
 * Prints: lineping cpus=A,B turns=N trials=R ns_per_transfer=X median_ns=Y */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static struct {
    _Atomic uint64_t value;
    char pad[56];
} line __attribute__((aligned(64)));

static unsigned long turns = 500;

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
        fprintf(stderr, "lineping: cannot pin to CPU %d\n", cpu);
        exit(77);
    }
}

struct player {
    int cpu;
    uint64_t parity;
};

static int trials = 1000;
static double per[1000]; /* ns per transfer, one entry per trial (player A times them) */

/* Spins until the counter has this player's parity, then increments it;
 * TRIALS rounds of TURNS turns, without stopping between them.  Player A
 * times each round: 2 x TURNS increments, each finding the line in the
 * other CPU's cache. */
static void *play(void *arg) {
    struct player *p = arg;
    pin(p->cpu);
    for (int t = 0; t < trials; t++) {
        double t0 = now_ns();
        for (unsigned long i = 0; i < turns; i++) {
            while ((atomic_load_explicit(&line.value, memory_order_acquire) & 1) != p->parity) {
            }
            atomic_fetch_add_explicit(&line.value, 1, memory_order_acq_rel);
        }
        if (p->parity == 0) per[t] = (now_ns() - t0) / (2.0 * (double)turns);
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int a = 0, b = 1, c;
    while ((c = getopt(argc, argv, "a:b:n:r:")) != -1) {
        if (c == 'a') a = atoi(optarg);
        else if (c == 'b') b = atoi(optarg);
        else if (c == 'n') turns = strtoul(optarg, NULL, 10);
        else if (c == 'r') trials = atoi(optarg);
        else {
            fprintf(stderr, "usage: lineping [-a CPU] [-b CPU] [-n TURNS] [-r TRIALS]\n");
            return 2;
        }
    }
    if (trials < 1 || trials > 1000 || turns == 0) return 2;
    struct player pa = {a, 0}, pb = {b, 1};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, play, &pa);
    pthread_create(&tb, NULL, play, &pb);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    qsort(per, (size_t)trials, sizeof per[0], cmp_double);
    printf("lineping cpus=%d,%d turns=%lu trials=%d ns_per_transfer=%.1f median_ns=%.1f\n", a, b, turns,
           trials, per[0], per[trials / 2]);
    return 0;
}
