/* idle_threads.c - resident memory per idle thread and per exited thread.
 *
 * The main thread allocates one block (so its own allocator state exists
 * before the baseline), reads its RSS, starts THREADS threads with 64 KiB
 * stacks that each malloc(64) once, write it and park at a barrier, reads
 * RSS again (idle), lets them free their block and exit, joins them and
 * reads RSS a third time (exited).  With -c (the control) the threads make
 * no allocator call: the difference between the two runs is the
 * allocator's share (stacks and the kernel's per-thread pages cancel).
 * RSS comes from /proc/self/statm; it does not depend on the machine's
 * load.  docs/scaling.md, "Threads beyond cores", has the figures.
 *
 * With -b KIB each thread first makes a burst: KIB blocks of 1 KiB,
 * allocated, written and all freed, before its blocks and its park; once
 * they are parked the main thread waits 300 ms and makes a burst of 1 MiB
 * itself (the program goes on: an allocator that gives back only when
 * asked has been asked), then reads RSS.  What the idle threads then add
 * is what their allocator keeps of memory they no longer use (workers
 * asleep after a request).  The control's main thread waits too.  With -s
 * the burst frees its blocks in a shuffled order (the same for every
 * thread) rather than the order they came in: a request's objects freed
 * as a program lets go of them, over all the pages the burst took, the
 * case where blocks a thread cache keeps can each keep a page of their
 * own in use.
 *
 *   idle_threads [-t THREADS] [-k SIZES] [-b KIB] [-s] [-c]
 * Prints: idle_threads threads=T sizes=K burst_kib=KIB control=0|1 before_kib=B
 *         idle_kib=I exited_kib=E allocator=... (whichalloc.h) */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "whichalloc.h"

#define SIZES_MAX 30

static pthread_barrier_t parked, go;
static int control, nsizes = 1, burst_kib, spread;
static size_t sizes[SIZES_MAX];

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, resident = -1;
    if (f == NULL) return -1;
    if (fscanf(f, "%ld %ld", &size, &resident) != 2) resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* KIB blocks of 1 KiB, written and freed (the array of pointers from the
 * OS: no allocator call of its own). */
static void burst(int kib) {
    size_t bytes = (size_t)kib * sizeof(char *);
    char **v = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (v == MAP_FAILED) return;
    for (int i = 0; i < kib; i++)
        if ((v[i] = malloc(1024)) != NULL) memset(v[i], 7, 1024);
    uint64_t x = 0x9e3779b97f4a7c15ull; /* (xorshift64: the same shuffle in every thread) */
    for (int i = kib - 1; spread && i > 0; i--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int j = (int)(x % (uint64_t)(i + 1));
        char *t = v[i];
        v[i] = v[j], v[j] = t;
    }
    for (int i = 0; i < kib; i++) free(v[i]);
    munmap(v, bytes);
}

static void *worker(void *arg) {
    (void)arg;
    char *p[SIZES_MAX] = {NULL};
    if (!control && burst_kib > 0) burst(burst_kib);
    for (int i = 0; i < nsizes && !control; i++) {
        p[i] = malloc(sizes[i]);
        if (p[i] != NULL) memset(p[i], 1, sizes[i] < 64 ? sizes[i] : 64);
    }
    pthread_barrier_wait(&parked);
    pthread_barrier_wait(&go);
    for (int i = 0; i < nsizes; i++) free(p[i]);
    return NULL;
}

int main(int argc, char **argv) {
    int n = 1000, c;
    while ((c = getopt(argc, argv, "t:k:b:sc")) != -1) {
        if (c == 't') n = atoi(optarg);
        else if (c == 'k') nsizes = atoi(optarg);
        else if (c == 'b') burst_kib = atoi(optarg);
        else if (c == 's') spread = 1;
        else if (c == 'c') control = 1;
        else {
            fprintf(stderr, "usage: idle_threads [-t THREADS] [-k SIZES] [-b KIB] [-s] [-c]\n");
            return 2;
        }
    }
    if (n < 1 || n > 100000 || nsizes < 1 || nsizes > SIZES_MAX || burst_kib < 0 || burst_kib > (1 << 20)) return 2;
    for (int i = 0; i < nsizes; i++) sizes[i] = i == 0 ? 64 : sizes[i - 1] + sizes[i - 1] / 4;
    pthread_t *t = calloc((size_t)n, sizeof *t);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 << 10);
    pthread_barrier_init(&parked, NULL, (unsigned)n + 1);
    pthread_barrier_init(&go, NULL, (unsigned)n + 1);
    char *warm = malloc(64);
    if (t == NULL || warm == NULL) return 1;
    warm[0] = 1;
    long before = rss_kib();
    for (int i = 0; i < n; i++)
        if (pthread_create(&t[i], &attr, worker, NULL) != 0) {
            fprintf(stderr, "idle_threads: cannot start thread %d\n", i);
            return 1;
        }
    pthread_barrier_wait(&parked);
    if (burst_kib > 0) {
        usleep(300 * 1000);
        if (!control) burst(1024);
    }
    long idle = rss_kib();
    pthread_barrier_wait(&go);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    long exited = rss_kib();
    printf("idle_threads threads=%d sizes=%d burst_kib=%d spread=%d control=%d before_kib=%ld idle_kib=%ld exited_kib=%ld",
           n, nsizes, burst_kib, spread, control, before, idle, exited);
    wa_print(stdout);
    putchar('\n');
    free(warm);
    free(t);
    return 0;
}
