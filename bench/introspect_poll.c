/* introspect_poll.c - a client that polls every introspection endpoint of
 * a process, for bench/introspect-cost.
 *
 *   introspect_poll URL RATE SECONDS [PATH...]
 *
 * Waits (up to 10 s) until URL answers /healthz, then RATE times a second
 * fetches /stats, /segments, /heaps, /rings, /config, /metrics, /healthz,
 * /history (all of it) and /events (or the PATHs given: a profiler's
 * scrape is /debug/pprof/heap /debug/pprof/allocs), one after another, for
 * SECONDS (or until a whole round fails: the program has exited; that
 * round is not counted).
 * Prints one line:
 *   poll rounds=R requests=N errors=E bytes=B median_round_ms=M max_round_ms=X
 * Links libc and cJSON only (tools/sefer_http.c is the HTTP client). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../tools/sefer_cli.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static bool get(const char *url, const char *path, size_t *bytes) {
    char *body = NULL, err[256];
    size_t len = 0;
    int status = cli_http_get(url, path, NULL, &body, &len, err, sizeof err);
    free(body);
    *bytes += len;
    return status == 200;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: introspect_poll URL RATE SECONDS [PATH...]\n");
        return 2;
    }
    const char *url = argv[1];
    double rate = atof(argv[2]), seconds = atof(argv[3]);
    static const char *const every[] = {"/stats",   "/segments", "/heaps",   "/rings", "/config",
                                        "/metrics", "/healthz",  "/history", "/events"};
    const char *const *paths = argc > 4 ? (const char *const *)argv + 4 : every;
    size_t npaths = argc > 4 ? (size_t)argc - 4 : sizeof every / sizeof *every;
    size_t bytes = 0;
    double t0 = now();
    while (!get(url, "/healthz", &bytes)) {
        if (now() - t0 > 10) {
            fprintf(stderr, "introspect_poll: %s does not answer\n", url);
            return 1;
        }
        usleep(20000);
    }
    size_t max_rounds = (size_t)(rate * seconds) + 2, rounds = 0, requests = 0, errors = 0;
    double *took = calloc(max_rounds, sizeof *took);
    double start = now(), period = 1.0 / rate;
    while (rounds < max_rounds && now() - start < seconds) {
        double t = now();
        size_t failed = 0;
        for (size_t i = 0; i < npaths; i++) {
            requests++;
            failed += !get(url, paths[i], &bytes);
        }
        if (failed == npaths) break; /* the program has exited */
        errors += failed;
        took[rounds++] = now() - t;
        double next = start + (double)rounds * period - now();
        if (next > 0) usleep((useconds_t)(next * 1e6));
    }
    qsort(took, rounds, sizeof *took, cmp);
    printf("poll rounds=%zu requests=%zu errors=%zu bytes=%zu median_round_ms=%.3f max_round_ms=%.3f\n",
           rounds, requests, errors, bytes, rounds ? took[rounds / 2] * 1e3 : 0,
           rounds ? took[rounds - 1] * 1e3 : 0);
    free(took);
    return 0;
}
