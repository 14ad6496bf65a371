/* larson.c - a larson-style server workload (after Larson & Krishnan,
 * "Memory allocation for long-running server applications", 1998).
 *
 *   larson [-t THREADS] [-d SECONDS] [-m MIN] [-M MAX] [-n SLOTS]
 *          [-r ROUND] [-S SEED] [-c]
 *
 * THREADS lanes run at once (default 2).  A lane owns an array of SLOTS
 * blocks (default 1000) of random sizes in [MIN, MAX] bytes (default 16,
 * 1024).  A lane's thread does ROUND replacements (default 10000): pick a
 * random slot, free its block, malloc a new block of a random size and write
 * one byte to it.  Then it starts a new thread for the same lane, hands it
 * the array and exits: the successor frees the blocks its predecessor
 * allocated (cross-thread frees of blocks whose allocating thread has exited),
 * and thread start and exit (heap claim, abandonment and adoption) are part of
 * the workload, as in the original benchmark.  The arrays are first filled by
 * the main thread, before the clock starts.
 *
 * The share of frees that are cross-thread is set by SLOTS and ROUND: a
 * generation frees, on average, SLOTS * (1 - (1 - 1/SLOTS)^ROUND) blocks it
 * did not allocate, out of ROUND frees.  It is printed as remote_share
 * (computed, not counted: counting would put work in the loop).  The defaults
 * give 0.10; -r 1000 gives 0.63 at ten times the thread starts.
 *
 * After SECONDS (default 3) the main thread raises a stop flag; each lane
 * finishes its current round and records the time.  Throughput is
 *   ops_per_s = (mallocs + frees) / (last lane end - start).
 *
 * The timed loop holds no lock and no shared write: each lane has its own
 * xorshift64 generator seeded from SEED and the lane number, so a run's
 * sequence of sizes is the same under every allocator.  Thread creation
 * itself (pthread_create, which takes libc's locks) is part of the workload.
 *
 * -c runs the control: the same lanes, rounds and random choices, but instead
 * of free+malloc each step writes one byte into the block already in the
 * slot.  No allocator call is made in the loop, so its throughput moves only
 * when the machine does.
 *
 * Output, one line on stdout, key=value separated by spaces:
 *   larson threads=2 seconds=3 min=16 max=1024 slots=1000 round=10000 seed=1
 *     control=0 remote_share=0.10 rounds=R ops=N elapsed=E ops_per_s=X
 *     allocator=A version=V malloc_from=P */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "benchutil.h"
#include "whichalloc.h"

struct larson_opts {
    unsigned threads;
    double seconds;
    size_t min, max, slots;
    uint64_t round, seed;
    int control;
};

/* One lane: the array and generator handed from thread to thread. */
struct lane {
    unsigned char **slots;
    uint64_t rng;
    uint64_t ops;    /* mallocs + frees done */
    uint64_t rounds; /* thread generations run */
    pthread_t pred;  /* predecessor, joined by its successor */
    int has_pred;
    pthread_t last; /* the lane's final thread, joined by main */
    double end;     /* when the final round ended */
};

static struct larson_opts opt;
static atomic_int stop_flag;
static atomic_int lanes_running;

/* ---- the timed loop ---- */

__attribute__((noinline)) static void round_alloc(struct lane *l) {
    uint64_t rng = l->rng, span = opt.max - opt.min + 1;
    unsigned char **slots = l->slots;
    for (uint64_t i = 0; i < opt.round; i++) {
        uint64_t r = xorshift64(&rng);
        size_t k = below((uint32_t)(r >> 32), opt.slots);
        free(slots[k]);
        unsigned char *p = malloc(opt.min + below((uint32_t)r, span));
        *(volatile unsigned char *)p = (unsigned char)r;
        slots[k] = p;
    }
    l->rng = rng;
    l->ops += 2 * opt.round;
}

__attribute__((noinline)) static void round_control(struct lane *l) {
    uint64_t rng = l->rng, span = opt.max - opt.min + 1;
    unsigned char **slots = l->slots;
    for (uint64_t i = 0; i < opt.round; i++) {
        uint64_t r = xorshift64(&rng);
        size_t k = below((uint32_t)(r >> 32), opt.slots);
        *(volatile unsigned char *)slots[k] = (unsigned char)(opt.min + below((uint32_t)r, span));
    }
    l->rng = rng;
    l->ops += 2 * opt.round;
}

/* ---- hand-off from thread to thread ---- */

static void *lane_main(void *arg);

static void die(const char *what, int err) {
    fprintf(stderr, "larson: %s: %s\n", what, strerror(err));
    exit(1);
}

static void start_thread(struct lane *l) {
    pthread_t t;
    int err = pthread_create(&t, NULL, lane_main, l);
    if (err) die("pthread_create", err);
}

static void *lane_main(void *arg) {
    struct lane *l = arg;
    if (opt.control)
        round_control(l);
    else
        round_alloc(l);
    l->rounds++;
    if (l->has_pred) {
        int err = pthread_join(l->pred, NULL);
        if (err) die("pthread_join", err);
    }
    if (atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
        l->end = bu_now();
        l->last = pthread_self();
        atomic_fetch_sub_explicit(&lanes_running, 1, memory_order_release);
        return NULL;
    }
    l->pred = pthread_self();
    l->has_pred = 1;
    start_thread(l);
    return NULL;
}

/* ---- set-up, outside the clock ---- */

static void usage(void) {
    fprintf(stderr, "usage: larson [-t THREADS] [-d SECONDS] [-m MIN] [-M MAX] [-n SLOTS]"
                    " [-r ROUND] [-S SEED] [-c]\n");
    exit(2);
}

static uint64_t parse_u64(const char *s) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end) usage();
    return (uint64_t)v;
}

static void parse(int argc, char **argv) {
    opt = (struct larson_opts){2, 3.0, 16, 1024, 1000, 10000, 1, 0};
    int c;
    while ((c = getopt(argc, argv, "t:d:m:M:n:r:S:c")) != -1) {
        switch (c) {
        case 't':
            opt.threads = (unsigned)parse_u64(optarg);
            break;
        case 'd':
            opt.seconds = strtod(optarg, NULL);
            break;
        case 'm':
            opt.min = parse_u64(optarg);
            break;
        case 'M':
            opt.max = parse_u64(optarg);
            break;
        case 'n':
            opt.slots = parse_u64(optarg);
            break;
        case 'r':
            opt.round = parse_u64(optarg);
            break;
        case 'S':
            opt.seed = parse_u64(optarg);
            break;
        case 'c':
            opt.control = 1;
            break;
        default:
            usage();
        }
    }
    if (optind != argc || opt.threads == 0 || opt.seconds <= 0 || opt.min == 0 ||
        opt.max < opt.min || opt.slots == 0 || opt.round == 0)
        usage();
}

static void fill_lane(struct lane *l, unsigned index) {
    memset(l, 0, sizeof *l);
    l->rng = bu_seed(opt.seed, index);
    l->slots = calloc(opt.slots, sizeof *l->slots);
    if (!l->slots) die("calloc", ENOMEM);
    uint64_t span = opt.max - opt.min + 1;
    for (size_t k = 0; k < opt.slots; k++) {
        l->slots[k] = malloc(opt.min + below((uint32_t)xorshift64(&l->rng), span));
        if (!l->slots[k]) die("malloc", ENOMEM);
        l->slots[k][0] = 1;
    }
}

/* Expected share of a generation's frees that free a block allocated by
 * another thread: slots * (1 - (1 - 1/slots)^round) / round. */
static double remote_share(void) {
    double base = 1.0 - 1.0 / (double)opt.slots, keep = 1.0;
    for (uint64_t e = opt.round; e; e >>= 1, base *= base)
        if (e & 1) keep *= base;
    return (double)opt.slots * (1.0 - keep) / (double)opt.round;
}

static void sleep_for(double secs) {
    struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int main(int argc, char **argv) {
    parse(argc, argv);
    struct lane *lanes = calloc(opt.threads, sizeof *lanes);
    if (!lanes) die("calloc", ENOMEM);
    for (unsigned i = 0; i < opt.threads; i++)
        fill_lane(&lanes[i], i);
    atomic_store(&lanes_running, (int)opt.threads);

    double t0 = bu_now();
    for (unsigned i = 0; i < opt.threads; i++)
        start_thread(&lanes[i]);
    sleep_for(opt.seconds);
    atomic_store(&stop_flag, 1);
    while (atomic_load_explicit(&lanes_running, memory_order_acquire) > 0)
        sleep_for(0.001);

    double end = t0;
    uint64_t ops = 0, rounds = 0;
    for (unsigned i = 0; i < opt.threads; i++) {
        struct lane *l = &lanes[i];
        int err = pthread_join(l->last, NULL);
        if (err) die("pthread_join", err);
        if (l->end > end) end = l->end;
        ops += l->ops;
        rounds += l->rounds;
    }
    double elapsed = end - t0;
    printf("larson threads=%u seconds=%g min=%zu max=%zu slots=%zu round=%llu seed=%llu control=%d"
           " remote_share=%.2f rounds=%llu ops=%llu elapsed=%.6f ops_per_s=%.0f",
           opt.threads, opt.seconds, opt.min, opt.max, opt.slots, (unsigned long long)opt.round,
           (unsigned long long)opt.seed, opt.control, remote_share(), (unsigned long long)rounds,
           (unsigned long long)ops, elapsed, (double)ops / elapsed);
    wa_print(stdout);
    putchar('\n');

    for (unsigned i = 0; i < opt.threads; i++) {
        for (size_t k = 0; k < opt.slots; k++)
            free(lanes[i].slots[k]);
        free(lanes[i].slots);
    }
    free(lanes);
    return 0;
}
