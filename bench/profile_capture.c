/* profile_capture.c - what one captured stack costs the allocating thread.
 *
 *   profile_capture [-n OPS] [-D DEPTH] [-s SIZE]
 *
 * Recurses DEPTH frames deep (each frame a real call the unwinder must step
 * through: noinline, not a tail call), then runs OPS malloc(SIZE)+free pairs
 * and prints
 *
 *   profile_capture depth=D size=S ops=N seconds=T ns_per_op=X allocator=...
 *
 * Run it under sefer with profile.sample_bytes = 1 (every allocation
 * sampled: a capture, a site lookup, a live-table insert and remove per
 * op) and with it 0, interleaved: the difference in ns_per_op is the cost
 * of one sample at that depth (bench/profile-cost does this). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "whichalloc.h"

static uint64_t ops = 200000;
static size_t size = 64;
static double seconds;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

__attribute__((noinline)) static void pairs(void) {
    double t0 = now();
    for (uint64_t i = 0; i < ops; i++) {
        void *p = malloc(size);
        ((volatile char *)p)[0] = (char)i;
        free(p);
    }
    seconds = now() - t0;
}

__attribute__((noinline)) static int descend(int d) {
    if (d <= 1) {
        pairs();
        return 0;
    }
    int r = descend(d - 1);
    __asm__ __volatile__("" : "+r"(r) : : "memory"); /* not a tail call: a frame per level */
    return r + 1;
}

int main(int argc, char **argv) {
    int depth = 32, c;
    while ((c = getopt(argc, argv, "n:D:s:")) != -1) {
        if (c == 'n') ops = strtoull(optarg, NULL, 10);
        else if (c == 'D') depth = atoi(optarg);
        else if (c == 's') size = strtoull(optarg, NULL, 10);
        else return 2;
    }
    descend(depth);
    printf("profile_capture depth=%d size=%zu ops=%llu seconds=%.6f ns_per_op=%.1f", depth, size,
           (unsigned long long)ops, seconds, ops ? seconds * 1e9 / (double)ops : 0.0);
    wa_print(stdout);
    return 0;
}
