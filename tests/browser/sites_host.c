/* sites_host.c - a process whose heap profile has known sites, for the
 * Sites view of the dashboard's browser test (tests/browser/dashboard.mjs),
 * run under `sefer run` with SEFER_PROFILE_SAMPLE_BYTES and a fixed
 * SEFER_PROFILE_SEED.
 *
 *   sites_host
 *
 * hold_big() holds 32 MiB in 1 KiB blocks and hold_small() 4 MiB in
 * 100-byte blocks (about 512 and 64 samples at 64 KiB, so the order of the
 * two is never in doubt); then it prints "ready" and reads lines from
 * stdin.  At "leak" it calls leak_steadily(), which adds 8 MiB in 4 KiB
 * blocks (the site that grows after a mark), and prints "leaked".  It exits
 * when stdin is closed.
 *
 * Built with frame pointers, debug information and not static
 * (tests/browser/meson.build), each site a function of its own that is
 * never inlined nor tail-called, so the stacks name hold_big, hold_small,
 * leak_steadily and main.
 *
 * Before any of that it names its main thread "<b id=xss2>" (the heap
 * table's name column) and opens and ends a phase named
 * "<img id=xss1 src=x onerror=window.__xss=1>" (the event log and the
 * charts): strings the program controls, which the dashboard must show as
 * text, never as HTML (the regression guard of the XSS audit). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

/* Where the blocks are kept, so that they stay live (and reachable). */
static void **keep_big, **keep_small, **keep_leak;
static void *keep_deep;

/* One block of n bytes, every byte written; a macro, not a function, so
 * that each site's own function is the innermost frame of its stack. */
#define FILLED(p, n)                                                          \
    do {                                                                      \
        (p) = malloc(n);                                                      \
        if ((p) == NULL) {                                                    \
            fprintf(stderr, "sites_host: malloc(%zu) failed\n", (size_t)(n)); \
            exit(1);                                                          \
        }                                                                     \
        memset((p), 1, (n));                                                  \
    } while (0)

/* Each site's stack is SITE <- main; volatile counts keep the loops apart. */
__attribute__((noinline)) static void hold_big(void) {
    size_t n = 32 * MIB / KIB;
    keep_big = calloc(n, sizeof *keep_big);
    for (volatile size_t i = 0; i < n; i++) FILLED(keep_big[i], KIB);
}

__attribute__((noinline)) static void hold_small(void) {
    size_t n = 4 * MIB / 100;
    keep_small = calloc(n, sizeof *keep_small);
    for (volatile size_t i = 0; i < n; i++) FILLED(keep_small[i], 100);
}

__attribute__((noinline)) static void leak_steadily(void) {
    size_t n = 8 * MIB / (4 * KIB);
    keep_leak = calloc(n, sizeof *keep_leak);
    for (volatile size_t i = 0; i < n; i++) FILLED(keep_leak[i], 4 * KIB);
}

/* One 2 MiB block (sampled at once at 64 KiB per sample) 40 frames below
 * main, freed on "drop-deep": the flame graph must shrink to the stacks
 * left, not stay as tall as the first one it drew. */
__attribute__((noinline)) static void *deep_frame(int d) {
    void *p;
    if (d <= 1) FILLED(p, 2 * MIB);
    else p = deep_frame(d - 1);
    __asm__ __volatile__("" : "+r"(p) : : "memory"); /* not a tail call */
    return p;
}

/* The hostile strings: a thread name (15 bytes at most) and a phase. */
static void hostile_names(void) {
    int (*phase_begin)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "sefer_phase_begin");
    int (*phase_end)(void *) = (int (*)(void *))dlsym(RTLD_DEFAULT, "sefer_phase_end");
    if (phase_begin == NULL || phase_end == NULL) {
        fprintf(stderr, "sites_host: not under sefer (no sefer_phase_begin)\n");
        exit(1);
    }
    if (pthread_setname_np(pthread_self(), "<b id=xss2>") != 0) {
        fprintf(stderr, "sites_host: pthread_setname_np failed\n");
        exit(1);
    }
    phase_begin("<img id=xss1 src=x onerror=window.__xss=1>");
    phase_end(NULL);
}

int main(void) {
    hostile_names();
    keep_deep = deep_frame(40);
    hold_big();
    hold_small();
    printf("ready\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin) != NULL) {
        if (strcmp(line, "leak\n") == 0 && keep_leak == NULL) {
            leak_steadily();
            printf("leaked\n");
            fflush(stdout);
        } else if (strcmp(line, "drop-deep\n") == 0 && keep_deep != NULL) {
            free(keep_deep);
            keep_deep = NULL;
            printf("dropped\n");
            fflush(stdout);
        }
    }
    return keep_big[0] != NULL && keep_small[0] != NULL ? 0 : 1;
}
