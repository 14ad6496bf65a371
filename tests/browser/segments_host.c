/* segments_host.c - a process with many segments, for the dashboard's
 * browser test (tests/browser/dashboard.mjs), run under `sefer run`.
 *
 *   segments_host N SIZE [--misuse] [--threads T]
 *
 * Allocates N blocks of SIZE bytes (above SEFER_MEDIUM_MAX, each is a large
 * span of its own: N segments), touching one byte of each so that the
 * process stays small (40 GiB of address space for 10,000 segments, under
 * 100 MiB resident), prints "ready" on stdout, and waits until its stdin is
 * closed; then frees everything and exits 0 (1 if an allocation failed).
 *
 * --misuse first asks for 64 TiB (refused: ENOMEM, counted), frees a
 * pointer inside a block and frees a block twice: two guard detections,
 * for a run with SEFER_GUARD_ON_ERROR=report (the dashboard's alarms).
 *
 * --threads T also starts T threads (64 KiB stacks) that each allocate a
 * block and wait, alive, until stdin is closed: T heaps of their own, for
 * the heap table's pages. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Through a volatile, so that the compiler neither warns nor drops them. */
static void *volatile launder;

static pthread_mutex_t park_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t park_cond = PTHREAD_COND_INITIALIZER;
static int parked, released;

/* A thread with a heap: one block, then waits for the end. */
static void *parked_thread(void *unused) {
    (void)unused;
    char *p = malloc(64);
    launder = p; /* (else the compiler may drop the malloc and free) */
    if (p) p[0] = 1;
    pthread_mutex_lock(&park_lock);
    parked++;
    pthread_cond_broadcast(&park_cond);
    while (!released) pthread_cond_wait(&park_cond, &park_lock);
    pthread_mutex_unlock(&park_lock);
    free(p);
    return NULL;
}

/* Starts n parked threads and waits until all hold their block. */
static pthread_t *park_threads(long n) {
    pthread_t *t = calloc((size_t)n + 1, sizeof *t);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 << 10);
    for (long i = 0; t && i < n; i++)
        if (pthread_create(&t[i], &attr, parked_thread, NULL) != 0) exit(1);
    pthread_attr_destroy(&attr);
    pthread_mutex_lock(&park_lock);
    while (parked < n) pthread_cond_wait(&park_cond, &park_lock);
    pthread_mutex_unlock(&park_lock);
    return t;
}

static void unpark_threads(pthread_t *t, long n) {
    pthread_mutex_lock(&park_lock);
    released = 1;
    pthread_cond_broadcast(&park_cond);
    pthread_mutex_unlock(&park_lock);
    for (long i = 0; i < n; i++) pthread_join(t[i], NULL);
    free(t);
}

static void misuse(void) {
    launder = malloc((size_t)1 << 46);
    if (launder != NULL) fprintf(stderr, "segments_host: 64 TiB were given\n");
    char *a = malloc(100);
    launder = a + 16;
    free(launder); /* interior: refused and counted */
    launder = malloc(100);
    free(launder);
    free(launder); /* double: refused and counted */
    free(a);
}

int main(int argc, char **argv) {
    long nthreads = 0;
    bool bad = argc < 3;
    for (int a = 3; a < argc && !bad; a++) {
        if (strcmp(argv[a], "--misuse") == 0) misuse();
        else if (strcmp(argv[a], "--threads") == 0 && a + 1 < argc) nthreads = atol(argv[++a]);
        else bad = true;
    }
    if (bad) {
        fprintf(stderr, "usage: segments_host N SIZE [--misuse] [--threads T]\n");
        return 2;
    }
    long n = atol(argv[1]);
    size_t size = (size_t)atol(argv[2]);
    pthread_setname_np(pthread_self(), "segments-host");
    char **blocks = calloc((size_t)n + 1, sizeof *blocks);
    if (blocks == NULL) return 1;
    for (long i = 0; i < n; i++) {
        blocks[i] = malloc(size);
        if (blocks[i] == NULL) {
            fprintf(stderr, "segments_host: allocation %ld of %zu bytes failed\n", i, size);
            return 1;
        }
        blocks[i][0] = 1;
    }
    pthread_t *threads = park_threads(nthreads);
    printf("ready\n");
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
    unpark_threads(threads, nthreads);
    for (long i = 0; i < n; i++) free(blocks[i]);
    free(blocks);
    return 0;
}
