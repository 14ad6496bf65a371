/* pprof_sites.c - a program whose heap profile has thousands of sites, for
 * bench/profile-scrape: what a continuous profiler's scrape costs a
 * program with a big profile (larson's, bench/introspect-cost, has a few).
 *
 *   pprof_sites [-b BITS] [-d SECONDS]
 *
 * Each allocation comes down one of 2^BITS call paths (default 14: 16384)
 * through two functions that call each other BITS levels deep, the path
 * picked at random, a block of 16-2015 bytes in one of 65536 slots whose
 * old block it frees: a site per path, once sampled.  Runs SECONDS
 * (default 30), then prints one line:
 *   pprof_sites ops=N seconds=S */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SLOTS 65536

static void *slots[SLOTS];

/* (noipa: neither inlined nor merged with its twin; an empty asm after
 * each call: no tail calls, so each level leaves its frame on the stack and
 * every path is a stack of its own) */
__attribute__((noipa)) static void *leaf(size_t n) {
    void *p = malloc(n);
    __asm__ volatile("" : "+r"(p) : : "memory");
    return p;
}
__attribute__((noipa)) static void *left(unsigned path, int depth, size_t n);
__attribute__((noipa)) static void *right(unsigned path, int depth, size_t n);
__attribute__((noipa)) static void *down(unsigned path, int depth, size_t n) {
    void *p;
    if (depth == 0) p = leaf(n);
    else p = (path & 1) ? right(path >> 1, depth - 1, n) : left(path >> 1, depth - 1, n);
    __asm__ volatile("" : "+r"(p) : : "memory");
    return p;
}
__attribute__((noipa)) static void *left(unsigned path, int depth, size_t n) {
    void *p = down(path, depth, n);
    __asm__ volatile("" : "+r"(p) : : "memory");
    return p;
}
__attribute__((noipa)) static void *right(unsigned path, int depth, size_t n) {
    void *p = down(path, depth, n);
    __asm__ volatile("" : "+r"(p) : : "memory");
    return p;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int bits = 14, c;
    double seconds = 30;
    while ((c = getopt(argc, argv, "b:d:")) != -1) {
        if (c == 'b') bits = atoi(optarg);
        else if (c == 'd') seconds = atof(optarg);
        else {
            fprintf(stderr, "usage: pprof_sites [-b BITS] [-d SECONDS]\n");
            return 2;
        }
    }
    if (bits < 1 || bits > 24) {
        fprintf(stderr, "pprof_sites: -b takes 1-24\n");
        return 2;
    }
    unsigned paths = 1u << bits, x = 12345;
    unsigned long ops = 0;
    double start = now(), t;
    do {
        for (int i = 0; i < 4096; i++) {
            x = x * 1103515245u + 12345u;
            unsigned slot = (x >> 8) & (SLOTS - 1);
            free(slots[slot]);
            slots[slot] = down((x >> 4) % paths, bits, 16 + (x >> 20) % 2000);
        }
        ops += 4096;
        t = now();
    } while (t - start < seconds);
    printf("pprof_sites ops=%lu seconds=%.3f\n", ops, t - start);
    return 0;
}
