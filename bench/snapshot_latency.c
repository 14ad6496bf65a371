/* snapshot_latency.c - how long GET /segments takes with many segments,
 * and how long it holds the segment lock, while threads allocate.
 *
 *   snapshot_latency [-n SEGMENTS] [-s SMALL_MIB] [-t THREADS] [-r REQUESTS]
 *
 * Builds a process with SEGMENTS segments (default 10000): SMALL_MIB MiB of
 * 64-byte blocks fill small segments (default 64, so 16 of them, 63 pages
 * each), the rest are large spans of 132 KiB blocks (one segment each, the
 * block itself never touched).  THREADS threads (default 2) then allocate
 * and free without pause while the main thread fetches
 * /segments?limit=10000 (every segment, every page, up to the endpoint's
 * largest page of 10000 segments) REQUESTS times (default 20) from the
 * in-process server.  Prints one line:
 *
 *   snapshot segments=N requests=R median_ms=M p90_ms=P max_ms=X bytes=B
 *     snapshot_median_ms=S list_hold_median_us=F max_lock_hold_us=H lock_holds=L
 *     alloc_ops_per_s_idle=A alloc_ops_per_s_polled=Q
 *
 * median/p90/max_ms: whole request (snapshot, JSON, transfer), at the
 * client; snapshot_*: the snapshot phase as the server reports it
 * (took_ns); list_hold_median_us: the one hold that copies the segment list
 * (phase 1, grows with the segment count); max_lock_hold_us: the longest
 * single hold of the segment lock over all requests (wall time, so a
 * preempted server thread shows here); alloc_ops_per_s: the allocating threads' throughput
 * during 1 s before polling and while polling.
 *
 * Links libsefer (the server runs in this process) and, for its client,
 * tools/sefer_http.c. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../tools/sefer_cli.h"
#include "sefer.h"

static atomic_bool stop;
static atomic_ullong ops;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *allocate(void *arg) {
    uint64_t x = (uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
    enum { SLOTS = 1024 };
    void *slot[SLOTS] = {0};
    unsigned long long n = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        unsigned i = (unsigned)(x % SLOTS);
        free(slot[i]);
        slot[i] = malloc(16 + (x >> 32) % 4000);
        if (++n % 1024 == 0) atomic_fetch_add_explicit(&ops, 1024, memory_order_relaxed);
    }
    for (unsigned i = 0; i < SLOTS; i++) free(slot[i]);
    return NULL;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The integer after "key": in text, or 0. */
static unsigned long long field(const char *text, const char *key) {
    const char *p = strstr(text, key);
    return p ? strtoull(p + strlen(key), NULL, 10) : 0;
}

static double rate_for(double seconds) {
    unsigned long long before = atomic_load(&ops);
    double t = now();
    usleep((useconds_t)(seconds * 1e6));
    return (double)(atomic_load(&ops) - before) / (now() - t);
}

int main(int argc, char **argv) {
    long segments = 10000, small_mib = 64, threads = 2, requests = 20;
    int c;
    while ((c = getopt(argc, argv, "n:s:t:r:")) != -1) {
        long v = atol(optarg);
        if (c == 'n') segments = v;
        else if (c == 's') small_mib = v;
        else if (c == 't') threads = v;
        else if (c == 'r') requests = v;
        else {
            fprintf(stderr, "usage: snapshot_latency [-n SEGMENTS] [-s SMALL_MIB] [-t THREADS] [-r REQUESTS]\n");
            return 2;
        }
    }
    size_t small_blocks = (size_t)small_mib << 14; /* 64-byte blocks */
    void **small = malloc(small_blocks * sizeof *small);
    for (size_t i = 0; i < small_blocks; i++) small[i] = malloc(64);
    struct sefer_stats st = {.size = sizeof st};
    sefer_stats_get(&st, sizeof st);
    long spans = segments - (long)st.segments;
    void **big = calloc(spans > 0 ? (size_t)spans : 1, sizeof *big);
    for (long i = 0; i < spans; i++) big[i] = malloc(132 << 10);
    sefer_stats_get(&st, sizeof st);

    int port = sefer_introspect_start("127.0.0.1:0");
    if (port < 0) {
        fprintf(stderr, "snapshot_latency: %s\n", sefer_introspect_error());
        return 1;
    }
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
    pthread_t *t = calloc((size_t)threads, sizeof *t);
    for (long i = 0; i < threads; i++) pthread_create(&t[i], NULL, allocate, (void *)(intptr_t)(i + 1));
    double idle_rate = rate_for(1.0);

    double *took = calloc((size_t)requests, sizeof *took), *snap = calloc((size_t)requests, sizeof *snap);
    double *list_hold = calloc((size_t)requests, sizeof *list_hold);
    unsigned long long max_hold = 0, holds = 0, bytes = 0, before = atomic_load(&ops);
    double t_poll = now();
    for (long r = 0; r < requests; r++) {
        char *body = NULL, err[256];
        size_t len = 0;
        double t0 = now();
        int status = cli_http_get(url, "/segments?limit=10000&pretty=0", NULL, &body, &len, err, sizeof err);
        took[r] = now() - t0;
        if (status != 200) {
            fprintf(stderr, "snapshot_latency: %s\n", status < 0 ? err : "HTTP error");
            return 1;
        }
        snap[r] = (double)field(body, "\"took_ns\":") * 1e-9;
        unsigned long long hold = field(body, "\"max_lock_hold_ns\":");
        if (hold > max_hold) max_hold = hold;
        list_hold[r] = (double)field(body, "\"list_lock_hold_ns\":") * 1e-9;
        holds = field(body, "\"lock_holds\":");
        bytes = len;
        free(body);
    }
    double polled_rate = (double)(atomic_load(&ops) - before) / (now() - t_poll);
    atomic_store(&stop, true);
    for (long i = 0; i < threads; i++) pthread_join(t[i], NULL);
    sefer_introspect_stop();

    qsort(took, (size_t)requests, sizeof *took, cmp);
    qsort(snap, (size_t)requests, sizeof *snap, cmp);
    qsort(list_hold, (size_t)requests, sizeof *list_hold, cmp);
    printf("snapshot segments=%llu requests=%ld median_ms=%.2f p90_ms=%.2f max_ms=%.2f bytes=%llu "
           "snapshot_median_ms=%.2f list_hold_median_us=%.1f max_lock_hold_us=%.1f lock_holds=%llu "
           "alloc_ops_per_s_idle=%.0f alloc_ops_per_s_polled=%.0f\n",
           (unsigned long long)st.segments, requests, took[requests / 2] * 1e3,
           took[(requests * 9) / 10] * 1e3, took[requests - 1] * 1e3, bytes, snap[requests / 2] * 1e3,
           list_hold[requests / 2] * 1e6, (double)max_hold / 1e3, holds, idle_rate, polled_rate);
    for (long i = 0; i < spans; i++) free(big[i]);
    for (size_t i = 0; i < small_blocks; i++) free(small[i]);
    return 0;
}
