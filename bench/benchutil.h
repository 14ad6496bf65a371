/* benchutil.h - small helpers shared by the workload programs in bench/
 * (mstress, xmalloc, cache_scratch, churn, large, threadchurn, frag).
 *
 * Everything here is used outside the timed regions, except the inline
 * generator (xorshift64, below) and the block stamp/check helpers, which are
 * part of the workloads that verify their data.
 *
 * Common options, parsed by bu_parse():
 *   -t THREADS   worker threads (default 2)
 *   -s SCALE     size of the working set, a multiplier (default 1)
 *   -d SECONDS   how long the timed region runs (default 2)
 *   -m MODE      workload mode (program specific)
 *   -z SIZES     sizes, comma-separated (program specific)
 *   -S SEED      random seed (default 1)
 * A program with options of its own names their getopt letters in
 * bu_extra_letters and takes them in bu_extra_option (mixed: -k, -x, -c).
 * Unknown options print the program's usage line and exit with status 2. */
#ifndef SEFER_BENCH_BENCHUTIL_H
#define SEFER_BENCH_BENCHUTIL_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct bu_opts {
    unsigned threads;
    double scale;
    double seconds;
    const char *mode;
    const char *sizes;
    uint64_t seed;
};

static const char *bu_prog = "bench";
static const char *bu_usage_text = "";
static unsigned bu_max_threads = 1024; /* -t above this is refused */
/* The program's own options, getopt style ("k:x:c"), and the function that
 * takes each one: it returns 0 for a bad value (bu_parse then prints the
 * usage line). */
static const char *bu_extra_letters = "";
static int (*bu_extra_option)(int letter, const char *value);

static inline double bu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline uint64_t xorshift64(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* Maps 32 random bits onto [0, n) without a division. */
static inline uint64_t below(uint32_t r, uint64_t n) {
    return ((uint64_t)r * n) >> 32;
}

static inline uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* A non-zero generator state for stream `index` of seed `seed`. */
static inline uint64_t bu_seed(uint64_t seed, uint64_t index) {
    return splitmix64(seed * 1000003u + index) | 1;
}

static inline void bu_die(const char *what, int err) {
    fprintf(stderr, "%s: %s: %s\n", bu_prog, what, strerror(err));
    exit(1);
}

static inline void bu_usage(void) {
    fprintf(stderr, "usage: %s [-t THREADS] [-s SCALE] [-d SECONDS] [-S SEED] %s\n", bu_prog,
            bu_usage_text);
    exit(2);
}

static inline void *bu_xmalloc(size_t n) {
    void *p = malloc(n);
    if (!p) bu_die("malloc", ENOMEM);
    return p;
}

static inline void *bu_xcalloc(size_t n, size_t s) {
    void *p = calloc(n, s);
    if (!p) bu_die("calloc", ENOMEM);
    return p;
}

/* A zeroed array of n * s bytes on cache lines of its own, for per-thread
 * state that another thread's must not share a line with: allocated one
 * after the other by the main thread, two small arrays would sit side by
 * side whenever the allocator's blocks are not line-sized (glibc's 16-byte
 * headers, sefer's canary at guard level 2), and the figure would measure
 * the harness's false sharing, not the allocator. */
static inline void *bu_xcalloc_lines(size_t n, size_t s) {
    size_t bytes = (n * s + 63) & ~(size_t)63;
    if (bytes == 0) bytes = 64;
    void *p = aligned_alloc(64, bytes);
    if (!p) bu_die("aligned_alloc", ENOMEM);
    memset(p, 0, bytes);
    return p;
}

static inline void bu_parse(int argc, char **argv, struct bu_opts *o, const char *default_mode) {
    *o = (struct bu_opts){2, 1.0, 2.0, default_mode, NULL, 1};
    char letters[64];
    snprintf(letters, sizeof letters, "t:s:d:m:z:S:%s", bu_extra_letters);
    int c;
    while ((c = getopt(argc, argv, letters)) != -1) {
        char *end;
        switch (c) {
        case 't':
            o->threads = (unsigned)strtoul(optarg, &end, 0);
            if (*end) bu_usage();
            break;
        case 's':
            o->scale = strtod(optarg, &end);
            if (*end) bu_usage();
            break;
        case 'd':
            o->seconds = strtod(optarg, &end);
            if (*end) bu_usage();
            break;
        case 'm':
            o->mode = optarg;
            break;
        case 'z':
            o->sizes = optarg;
            break;
        case 'S':
            o->seed = strtoull(optarg, &end, 0);
            if (*end) bu_usage();
            break;
        default: /* '?' is getopt's answer to a letter it does not know */
            if (c == '?' || !bu_extra_option || !bu_extra_option(c, optarg)) bu_usage();
        }
    }
    if (optind != argc || o->threads == 0 || o->threads > bu_max_threads || !(o->scale > 0) ||
        !(o->seconds > 0))
        bu_usage();
}

/* Parses "16,64,1024" into sizes[]; returns the count (at most max). */
static inline size_t bu_parse_sizes(const char *text, size_t *sizes, size_t max) {
    size_t n = 0;
    const char *p = text;
    while (*p && n < max) {
        char *end;
        unsigned long long v = strtoull(p, &end, 0);
        if (end == p || v == 0) bu_usage();
        sizes[n++] = (size_t)v;
        if (*end == ',')
            end++;
        else if (*end)
            bu_usage();
        p = end;
    }
    if (n == 0) bu_usage();
    return n;
}

static inline void bu_sleep(double secs) {
    struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static inline pthread_t bu_start(void *(*fn)(void *), void *arg) {
    pthread_t t;
    int err = pthread_create(&t, NULL, fn, arg);
    if (err) bu_die("pthread_create", err);
    return t;
}

static inline void bu_join(pthread_t t) {
    int err = pthread_join(t, NULL);
    if (err) bu_die("pthread_join", err);
}

/* Resident set size of this process now, in KiB, from /proc/self/statm;
 * -1 when it cannot be read. */
static inline long bu_rss_kib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size, resident;
    if (!f) return -1;
    int ok = fscanf(f, "%ld %ld", &size, &resident) == 2;
    fclose(f);
    return ok ? resident * (sysconf(_SC_PAGESIZE) / 1024) : -1;
}

/* The kernel's high-water mark of the process's RSS (VmHWM), in KiB; -1
 * when it cannot be read. */
static inline long bu_hwm_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &v) == 1) break;
    fclose(f);
    return v;
}

/* ---- generations of threads (mstress, threadchurn): each round starts one
 * thread per worker, all on fn, and joins them; rounds run until the timed
 * region is over.  A thread finds its worker's index and round, keeps its
 * random state in rng and adds what it did to ops and errors. ---- */

struct bu_gen_worker {
    unsigned index;
    uint64_t round;
    uint64_t rng;
    uint64_t ops, errors;
    char pad[64]; /* (no two workers' counts on one cache line) */
};

/* Runs the rounds over n workers seeded from seed; returns how many ran,
 * with their time in *elapsed and the workers' sums in *ops and *errors. */
static inline uint64_t bu_generations(struct bu_gen_worker *ws, unsigned n, uint64_t seed, double seconds,
                                      void *(*fn)(void *), double *elapsed, uint64_t *ops,
                                      uint64_t *errors) {
    pthread_t *tids = bu_xcalloc(n, sizeof *tids);
    for (unsigned i = 0; i < n; i++) {
        ws[i].index = i;
        ws[i].rng = bu_seed(seed, i);
    }
    uint64_t rounds = 0;
    double t0 = bu_now(), t1;
    do {
        for (unsigned i = 0; i < n; i++) {
            ws[i].round = rounds;
            tids[i] = bu_start(fn, &ws[i]);
        }
        for (unsigned i = 0; i < n; i++) bu_join(tids[i]);
        rounds++;
        t1 = bu_now();
    } while (t1 - t0 < seconds);
    *elapsed = t1 - t0;
    *ops = *errors = 0;
    for (unsigned i = 0; i < n; i++) {
        *ops += ws[i].ops;
        *errors += ws[i].errors;
    }
    free(tids);
    return rounds;
}

/* ---- block stamps: how workloads that hand blocks between threads check
 * that a block still holds what its allocating thread wrote.  A stamped block
 * (at least 16 bytes) holds its size and a tag in its first 16 bytes and the
 * tag's low byte in its last byte. ---- */

#define BU_MIN_STAMPED 16

static inline void bu_stamp(void *p, size_t size, uint64_t tag) {
    uint64_t *w = p;
    w[0] = (uint64_t)size;
    w[1] = tag;
    ((unsigned char *)p)[size - 1] = (unsigned char)tag;
}

/* 1 when p holds the stamp of a block of `size` bytes, else 0. */
static inline int bu_check(const void *p, size_t size) {
    const uint64_t *w = p;
    return w[0] == (uint64_t)size && ((const unsigned char *)p)[size - 1] == (unsigned char)w[1];
}

/* Check without knowing the size: the size is read from the block. */
static inline int bu_check_self(const void *p, size_t max) {
    const uint64_t *w = p;
    return w[0] >= BU_MIN_STAMPED && w[0] <= max && bu_check(p, (size_t)w[0]);
}

/* Frees n stamped blocks (of at most max bytes); returns how many had lost
 * their stamp. */
static inline uint64_t bu_free_stamped(unsigned char **blocks, size_t n, size_t max) {
    uint64_t bad = 0;
    for (size_t k = 0; k < n; k++) {
        if (!bu_check_self(blocks[k], max)) bad++;
        free(blocks[k]);
    }
    return bad;
}

#endif
