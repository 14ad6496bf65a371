/* work.c - a fixed workload for the test 'lockstats' (check.sh): known
 * numbers of the events the counter build counts.
 *
 * Linked against libc only; run with LD_PRELOAD=libsefer-lockstats.so.
 *   - BLOCKS small blocks allocated by the main thread and freed by a
 *     second thread: remote frees (page lists or the owner's ring);
 *   - SPANS large blocks (1 MiB) allocated and freed: spans, through the
 *     large cache and the segment list (both locks) and the segment map;
 *   - the second thread's own heap: a registry claim and release.
 * (sefer counts a remote free as a free once the owner takes the block
 * back, which this owner never does: its frees show in remote_frees.)
 * Prints "work blocks=N spans=M" so the check knows what to expect. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCKS 20000
#define SPANS 50

static void *blocks[BLOCKS];
static void *volatile kept; /* so the compiler keeps the worker's own malloc */

/* Frees the main thread's blocks; allocates one of its own first, so it
 * claims a heap (and releases it at exit). */
static void *free_them(void *arg) {
    (void)arg;
    kept = malloc(48);
    for (int i = 0; i < BLOCKS; i++) free(blocks[i]);
    free(kept);
    return NULL;
}

int main(void) {
    for (int i = 0; i < BLOCKS; i++) {
        blocks[i] = malloc(48);
        if (blocks[i] == NULL) return 1;
        memset(blocks[i], i, 48);
    }
    pthread_t t;
    if (pthread_create(&t, NULL, free_them, NULL) != 0 || pthread_join(t, NULL) != 0) return 1;
    for (int i = 0; i < SPANS; i++) {
        char *p = malloc(1 << 20);
        if (p == NULL) return 1;
        p[i] = 1;
        free(p);
    }
    printf("work blocks=%d spans=%d\n", BLOCKS, SPANS);
    return 0;
}
