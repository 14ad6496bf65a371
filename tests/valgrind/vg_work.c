/* vg_work.c - a program for memcheck to watch while sefer serves it
 * (tests/valgrind/run.sh runs it under LD_PRELOAD=libsefer.so).
 *
 *   vg_work clean  every kind of allocation, across threads, all freed:
 *                  memcheck must report no error and no leak (sefer's own
 *                  work on freed memory and its metadata stay invisible)
 *   vg_work bugs   one of each bug memcheck should now see in sefer's
 *                  heap: leaks (small, first block of a page, large), a
 *                  read after free, an uninitialised read, a write one
 *                  byte past the request, a double free (guard.on_error =
 *                  report keeps the program going after sefer's own report)
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUEUE 64

static void *volatile sink;

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed + i);
}

static int same(const unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(seed + i)) return 0;
    return 1;
}

/* Blocks made by one thread and freed by another (remote frees). */
static void *handed[QUEUE];
static size_t handed_size[QUEUE];

static void *consumer(void *arg) {
    (void)arg;
    for (int i = 0; i < QUEUE; i++) {
        if (!same(handed[i], handed_size[i], (unsigned)i)) abort();
        free(handed[i]);
    }
    return NULL;
}

static int clean(void) {
    for (int round = 0; round < 3; round++) {
        void *small[300];
        for (int i = 0; i < 300; i++) {
            size_t n = 1 + (size_t)(i * 37 + round) % 900;
            small[i] = malloc(n);
            fill(small[i], n, (unsigned)i);
        }
        for (int i = 0; i < 300; i += 2) free(small[i]);
        for (int i = 1; i < 300; i += 2) {
            size_t n = 1 + (size_t)(i * 37 + round) % 900;
            if (!same(small[i], n, (unsigned)i)) return 1;
            small[i] = realloc(small[i], n * 3);
            if (!same(small[i], n, (unsigned)i)) return 1;
            free(small[i]);
        }
        unsigned char *z = calloc(1000, 7);
        for (int i = 0; i < 7000; i++)
            if (z[i] != 0) return 1;
        free(z);
        unsigned char *big = calloc(1, 3u << 20); /* a span: zero, and said so */
        if (big[12345] != 0) return 1;
        big = realloc(big, 5u << 20);
        free(big);
        void *al = aligned_alloc(4096, 10000);
        if (((uintptr_t)al & 4095) != 0) return 1;
        free(al);
        void *pm = NULL;
        if (posix_memalign(&pm, 256, 300) != 0) return 1;
        memset(pm, 1, 300);
        free(pm);
        char *medium = malloc(50000);
        memset(medium, 2, 50000);
        free(medium);
    }
    for (int i = 0; i < QUEUE; i++) {
        handed_size[i] = 8 + (size_t)i * 24;
        handed[i] = malloc(handed_size[i]);
        fill(handed[i], handed_size[i], (unsigned)i);
    }
    pthread_t t;
    if (pthread_create(&t, NULL, consumer, NULL) != 0) return 1;
    pthread_join(t, NULL);
    /* blocks the consumer freed come back to this thread's heap */
    for (int i = 0; i < 200; i++) free(malloc(16 + (size_t)i));
    return 0;
}

static int bugs(void) {
    char *leak_small = malloc(64);
    char *leak_first = malloc(48);
    char *leak_big = malloc(1u << 20);
    leak_small[0] = leak_first[0] = leak_big[0] = 1;
    sink = malloc(100); /* still reachable: not a leak */
    char *freed = malloc(32);
    free(freed);
    volatile char after_free = freed[3];
    (void)after_free;
    char *raw = malloc(16);
    if (raw[2] == 7) puts("uninitialised");
    free(raw);
    char *over = malloc(20);
    over[20] = 1;
    free(over);
    char *twice = malloc(40);
    free(twice);
    free(twice);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "clean") == 0) return clean();
    if (argc == 2 && strcmp(argv[1], "bugs") == 0) return bugs();
    fprintf(stderr, "usage: vg_work clean|bugs\n");
    return 2;
}
