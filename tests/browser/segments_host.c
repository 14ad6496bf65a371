/* segments_host.c - a process with many segments, for the dashboard's
 * browser test (tests/browser/dashboard.mjs), run under `sefer run`.
 *
 *   segments_host N SIZE [--misuse]
 *
 * Allocates N blocks of SIZE bytes (above SEFER_MEDIUM_MAX, each is a large
 * span of its own: N segments), touching one byte of each so that the
 * process stays small (40 GiB of address space for 10,000 segments, under
 * 100 MiB resident), prints "ready" on stdout, and waits until its stdin is
 * closed; then frees everything and exits 0 (1 if an allocation failed).
 *
 * --misuse first asks for 64 TiB (refused: ENOMEM, counted), frees a
 * pointer inside a block and frees a block twice: two guard detections,
 * for a run with SEFER_GUARD_ON_ERROR=report (the dashboard's alarms). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Through a volatile, so that the compiler neither warns nor drops them. */
static void *volatile launder;

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
    if (argc < 3 || argc > 4 || (argc == 4 && strcmp(argv[3], "--misuse") != 0)) {
        fprintf(stderr, "usage: segments_host N SIZE [--misuse]\n");
        return 2;
    }
    if (argc == 4) misuse();
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
    printf("ready\n");
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
    for (long i = 0; i < n; i++) free(blocks[i]);
    free(blocks);
    return 0;
}
