/* steps_host.c - a process whose bytes in blocks follow a known step
 * pattern, for the dashboard's browser test (tests/browser/dashboard.mjs),
 * run under `sefer run` with a short introspect.history_interval.
 *
 *   steps_host
 *
 * Holds nothing, then 16 MiB, then 48 MiB, then 16 MiB, then nothing again
 * (one block allocated or freed per step, every byte written, so RSS
 * follows), printing "step K WALL_MS" as each begins; then sets
 * decommit.delay to 250 ms (sefer_config_set, found in the preloaded
 * libsefer.so) and calls malloc_trim(0): two events.  The 48 MiB step is a
 * phase named "peak" (sefer_phase_begin/end): a span on the dashboard;
 * "begun WALL_MS" and "ended WALL_MS" follow its begin and end.
 *
 * It prints "ready" first, and each step, and then the knob and the trim,
 * waits for a line on stdin: the test sends one once the process's history
 * has a sample of what came before, so every step is on record however
 * slowly the machine runs (each used to last a second, which a loaded
 * machine's sampler need not fill).  Then it prints "done" and waits until
 * its stdin is closed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MIB ((size_t)1 << 20)

static void *volatile keep[2];

static void stamp(const char *what) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    printf("%s %lld\n", what, (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
    fflush(stdout);
}

/* Waits for the test's line (EOF: the test is gone, so is this). */
static void await_next(void) {
    char line[64];
    if (fgets(line, sizeof line, stdin) == NULL) exit(0);
}

static void step(int k) {
    char what[16];
    await_next();
    snprintf(what, sizeof what, "step %d", k);
    stamp(what);
}

static void *filled(size_t n) {
    void *p = malloc(n);
    if (p == NULL) {
        fprintf(stderr, "steps_host: malloc(%zu) failed\n", n);
        exit(1);
    }
    memset(p, 1, n);
    return p;
}

int main(void) {
    int (*phase_begin)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "sefer_phase_begin");
    int (*phase_end)(void *) = (int (*)(void *))dlsym(RTLD_DEFAULT, "sefer_phase_end");
    if (phase_begin == NULL || phase_end == NULL) {
        fprintf(stderr, "steps_host: not under sefer (no sefer_phase_begin)\n");
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    step(1);
    keep[0] = filled(16 * MIB);
    step(2);
    phase_begin("peak");
    stamp("begun");
    keep[1] = filled(32 * MIB);
    step(3);
    free(keep[1]);
    phase_end(NULL);
    stamp("ended");
    step(4);
    free(keep[0]);
    await_next();
    int (*config_set)(const char *, const char *) =
        (int (*)(const char *, const char *))dlsym(RTLD_DEFAULT, "sefer_config_set");
    if (config_set == NULL || config_set("decommit.delay", "250ms") != 0) {
        fprintf(stderr, "steps_host: not under sefer (no sefer_config_set)\n");
        return 1;
    }
    malloc_trim(0);
    printf("done\n");
    fflush(stdout);
    char buf[64];
    while (fread(buf, 1, sizeof buf, stdin) > 0) {
    }
    return 0;
}
