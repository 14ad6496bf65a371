/* fastpath.c - microbenchmark of the malloc/free fast path.
 *
 * Linked against libc only; run it under any allocator with LD_PRELOAD.
 *
 *   fastpath MODE [-n OPS] [-s SIZE] [-k BURST] [-r] [-a ALIGN] [-w WARMUP] [-e] [-p|-P]
 *
 * Modes (what one "op" is):
 *   pairs    malloc(s) then free at once                      (one pair)
 *   bursts   malloc K blocks, then free all K, same order or
 *            reversed with -r                                  (one block: malloc+free)
 *   realloc  malloc(16), grow by realloc in 16-byte steps up
 *            to SIZE (default 1024), free                      (one realloc)
 *   calloc   calloc(1, s) then free                            (one pair)
 *   aligned  aligned_alloc(ALIGN, s) then free                 (one pair)
 *   control  the pairs loop with no allocator call: it writes
 *            the same byte into a static buffer               (one iteration)
 *   remote   malloc K blocks, hand them to a second thread,
 *            which frees all K; the next burst's mallocs take
 *            them back (a remote free and its return to the
 *            owner)                                           (one block)
 *   remoteheap  remote, with a freeing thread that allocated
 *            first (a heap of its own: sefer gathers its frees of
 *            other heaps' blocks in batches)               (one block)
 *   remotectl  the remote hand-off with no allocator call: the
 *            second thread writes the same byte into the
 *            slots the owner filled                           (one block)
 *   mixed    malloc K blocks of random sizes (-m LO:HI, uniform
 *            in [LO, HI]; -m LO:HI:log, log-uniform: an octave
 *            of [LO, HI] at random, then a size uniform in it),
 *            then free all K in order; no keepers, so pages go
 *            empty and come back as a program's would          (one block)
 *
 * Sizes: with -s 0 (the default except for realloc) op i uses
 * 16 * (1 + i % 16), i.e. 16, 32, ... 256 bytes; -s N uses N bytes for every
 * op.  In aligned mode sizes are rounded up to a multiple of ALIGN, as C11's
 * aligned_alloc asks.
 *
 * Each op writes one byte through the pointer it got (a volatile store, so
 * the compiler can neither drop the store nor the malloc/free pair); that
 * store is the only thing in the timed loop besides the allocator calls and
 * the loop counter.  A NULL result is not checked: the store faults, loudly.
 *
 * Keepers: before anything else, one block of each size the mode uses is
 * allocated (by the mode's own function) and kept live to the end, so the
 * loop's frees never leave a page empty, as in a program that has other live
 * blocks of those sizes.  Without them (-e) every free in pairs mode empties
 * its page, which sends some allocators (mimalloc 2.0.9) off their fast path
 * on every op: a different measurement, of the empty-page policy.
 *
 * Phases (sefer only, through dlsym): -p opens and closes a phase
 * (sefer_phase_begin/end) with an allocation in it before anything else,
 * so the run shows whether the fast paths come back after a phase; -P keeps
 * a phase open for the whole run, so it shows what a phase costs.
 *
 * Before the timed region the same loop runs WARMUP ops (default 100000, the
 * same count whatever OPS is), so that a run with -n 0 executes exactly the
 * start-up and warm-up work of a run with -n N: bench/instructions subtracts
 * the two callgrind counts to get instructions per op.
 *
 * Output, one line on stdout, key=value separated by spaces:
 *   fastpath mode=pairs size=64 burst=0 order=- align=0 keep=1 ops=N unit=pair mix=0:0
 *     seconds=S ops_per_s=X ns_per_op=Y allocator=A version=V malloc_from=P
 * (ops_per_s and ns_per_op are 0 when ops is 0). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "whichalloc.h"

#define FP_SIZES 16 /* entries of the size cycle; a power of two */
#define FP_RSIZES 4096 /* entries of the mixed mode's random sizes; a power of two */

struct fp_opts {
    const char *mode;
    uint64_t ops;
    uint64_t warmup;
    size_t size;  /* 0: cycle 16..256 */
    size_t burst; /* blocks per burst */
    size_t align;
    int reverse;
    int keep; /* keep one live block of each size used */
    int phase; /* 'p': one phase before the run; 'P': the run inside one */
    size_t mix_lo, mix_hi; /* mixed mode: the size range */
    int mix_log;           /* mixed mode: log-uniform */
};

/* Size table for op i: sizes[i % FP_SIZES]. */
static size_t sizes[FP_SIZES];
/* The mixed mode's sizes, drawn once with a fixed seed (the same sequence
 * under every allocator and in every run), outside the timed loop. */
static size_t rsizes[FP_RSIZES];
static unsigned char control_buf[4096];
static void *keepers[128];
static size_t nkeepers;

static inline void touch(void *p, size_t at, uint64_t v) {
    ((volatile unsigned char *)p)[at] = (unsigned char)v;
}

/* ---- the loops; each runs n ops and nothing else ---- */

__attribute__((noinline)) static void run_pairs(uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        void *p = malloc(sizes[i & (FP_SIZES - 1)]);
        touch(p, 0, i);
        free(p);
    }
}

__attribute__((noinline)) static void run_calloc(uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        void *p = calloc(1, sizes[i & (FP_SIZES - 1)]);
        touch(p, 0, i);
        free(p);
    }
}

__attribute__((noinline)) static void run_aligned(uint64_t n, size_t align) {
    for (uint64_t i = 0; i < n; i++) {
        void *p = aligned_alloc(align, sizes[i & (FP_SIZES - 1)]);
        touch(p, 0, i);
        free(p);
    }
}

__attribute__((noinline)) static void run_control(uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        touch(control_buf, sizes[i & (FP_SIZES - 1)], i);
}

/* n bursts of k blocks; slots has k entries. */
__attribute__((noinline)) static void run_bursts(uint64_t n, size_t k, void **slots, int reverse) {
    for (uint64_t b = 0; b < n; b++) {
        for (size_t j = 0; j < k; j++) {
            slots[j] = malloc(sizes[j & (FP_SIZES - 1)]);
            touch(slots[j], 0, j);
        }
        if (reverse)
            for (size_t j = k; j-- > 0;)
                free(slots[j]);
        else
            for (size_t j = 0; j < k; j++)
                free(slots[j]);
    }
}

/* n bursts of k blocks of the random sizes, freed in order; slots has k
 * entries.  (A loop of its own: the other modes' size cycle stays a
 * constant mask, so their instruction counts do not move.) */
__attribute__((noinline)) static void run_mixed(uint64_t n, size_t k, void **slots) {
    size_t at = 0;
    for (uint64_t b = 0; b < n; b++) {
        for (size_t j = 0; j < k; j++) {
            slots[j] = malloc(rsizes[at++ & (FP_RSIZES - 1)]);
            touch(slots[j], 0, j);
        }
        for (size_t j = 0; j < k; j++)
            free(slots[j]);
    }
}

/* ---- remote: bursts freed by a second thread ---- */

/* One burst in flight between the owner and the freeing thread: a mutex
 * and a condition variable, the same hand-off under every allocator (the
 * remotectl mode measures it alone). */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    void **slots;
    size_t k;
    uint64_t posted, done;
    int control, quit, allocates;
} hand = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0, 0, 0, 0, 0};

static void *remote_freer(void *unused) {
    (void)unused;
    if (hand.allocates) {
        /* (more than sefer's threads.heap_after allocations in a second:
         * the thread gets a heap of its own) */
        static void *own[100];
        for (int i = 0; i < 100; i++)
            own[i] = malloc(16);
        for (int i = 0; i < 100; i++)
            free(own[i]);
    }
    pthread_mutex_lock(&hand.lock);
    for (;;) {
        while (hand.done == hand.posted && !hand.quit) pthread_cond_wait(&hand.cond, &hand.lock);
        if (hand.done == hand.posted) break;
        for (size_t j = 0; j < hand.k; j++)
            if (hand.control) touch(hand.slots[j], 0, j);
            else free(hand.slots[j]);
        hand.done++;
        pthread_cond_broadcast(&hand.cond);
    }
    pthread_mutex_unlock(&hand.lock);
    return NULL;
}

__attribute__((noinline)) static void run_remote(uint64_t n, size_t k, void **slots, int control) {
    for (uint64_t b = 0; b < n; b++) {
        for (size_t j = 0; j < k; j++) {
            slots[j] = control ? &control_buf[j & 255] : malloc(sizes[j & (FP_SIZES - 1)]);
            touch(slots[j], 0, j);
        }
        pthread_mutex_lock(&hand.lock);
        hand.slots = slots;
        hand.k = k;
        hand.control = control;
        hand.posted++;
        pthread_cond_broadcast(&hand.cond);
        while (hand.done != hand.posted) pthread_cond_wait(&hand.cond, &hand.lock);
        pthread_mutex_unlock(&hand.lock);
    }
}

/* n chains: malloc(16), realloc to 32, 48, ... max, free. */
__attribute__((noinline)) static void run_realloc(uint64_t n, size_t max) {
    for (uint64_t c = 0; c < n; c++) {
        unsigned char *p = malloc(16);
        touch(p, 15, c);
        for (size_t s = 32; s <= max; s += 16) {
            p = realloc(p, s);
            touch(p, s - 1, s);
        }
        free(p);
    }
}

/* ---- driver ---- */

static void usage(void) {
    fprintf(stderr, "usage: fastpath pairs|bursts|realloc|calloc|aligned|control|remote|remoteheap|remotectl|mixed [-n OPS]"
                    " [-s SIZE] [-k BURST] [-r] [-a ALIGN] [-w WARMUP] [-e] [-p|-P] [-m LO:HI[:log]]\n");
    exit(2);
}

static uint64_t parse_u64(const char *s) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end) {
        fprintf(stderr, "fastpath: not a number: %s\n", s);
        exit(2);
    }
    return (uint64_t)v;
}

/* -m LO:HI or LO:HI:log, 1 <= LO <= HI. */
static void parse_mix(const char *arg, struct fp_opts *o) {
    char buf[64];
    snprintf(buf, sizeof buf, "%s", arg);
    char *hi = strchr(buf, ':');
    if (hi == NULL) usage();
    *hi++ = '\0';
    char *log = strchr(hi, ':');
    if (log != NULL) {
        *log++ = '\0';
        if (strcmp(log, "log") != 0) usage();
        o->mix_log = 1;
    }
    o->mix_lo = parse_u64(buf);
    o->mix_hi = parse_u64(hi);
    if (o->mix_lo == 0 || o->mix_lo > o->mix_hi) usage();
}

static void parse(int argc, char **argv, struct fp_opts *o) {
    if (argc < 2) usage();
    o->mode = argv[1];
    o->ops = 50000000;
    o->warmup = 100000;
    o->size = strcmp(o->mode, "realloc") == 0 ? 1024 : 0;
    o->burst = 100;
    o->align = 64;
    o->reverse = 0;
    o->keep = 1;
    o->phase = 0;
    o->mix_lo = o->mix_hi = 0;
    o->mix_log = 0;
    int c;
    optind = 2;
    while ((c = getopt(argc, argv, "n:s:k:ra:w:epPm:")) != -1) {
        switch (c) {
        case 'p':
        case 'P':
            o->phase = c;
            break;
        case 'n':
            o->ops = parse_u64(optarg);
            break;
        case 's':
            o->size = parse_u64(optarg);
            break;
        case 'k':
            o->burst = parse_u64(optarg);
            break;
        case 'r':
            o->reverse = 1;
            break;
        case 'a':
            o->align = parse_u64(optarg);
            break;
        case 'w':
            o->warmup = parse_u64(optarg);
            break;
        case 'e':
            o->keep = 0;
            break;
        case 'm':
            parse_mix(optarg, o);
            break;
        default:
            usage();
        }
    }
    if (optind != argc || o->burst == 0 || o->align == 0 || (o->align & (o->align - 1))) usage();
    if (strcmp(o->mode, "realloc") == 0 && (o->size < 32 || o->size > 16 * 128)) usage();
    if (strcmp(o->mode, "control") == 0 && o->size >= sizeof control_buf) usage();
    if ((strcmp(o->mode, "mixed") == 0) != (o->mix_hi != 0)) usage(); /* -m with mixed, and only there */
    if (o->mix_hi) o->keep = 0;                                          /* (see the mode's line above) */
}

static uint64_t xorshift(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* The mixed mode's table: uniform in [lo, hi], or an octave [2^e, 2^(e+1))
 * of the range at random and a size uniform in it (clipped to the range). */
static void fill_random_sizes(const struct fp_opts *o) {
    uint64_t x = 0x9E3779B97F4A7C15ull;
    unsigned e0 = 0, e1 = 0;
    while (((size_t)2 << e0) <= o->mix_lo) e0++;
    while (((size_t)2 << e1) <= o->mix_hi - 1) e1++; /* (hi itself a power of two: no octave of it alone) */
    for (size_t i = 0; i < FP_RSIZES; i++) {
        size_t lo = o->mix_lo, hi = o->mix_hi;
        if (o->mix_log) {
            unsigned e = e0 + (unsigned)(xorshift(&x) % (e1 - e0 + 1));
            size_t a = (size_t)1 << e, b = ((size_t)2 << e) - 1;
            lo = a > lo ? a : lo;
            hi = b < hi ? b : hi;
        }
        rsizes[i] = lo + (size_t)(xorshift(&x) % (hi - lo + 1));
    }
}

static void fill_sizes(const struct fp_opts *o) {
    int aligned = strcmp(o->mode, "aligned") == 0;
    for (size_t i = 0; i < FP_SIZES; i++) {
        size_t s = o->size ? o->size : 16 * (i + 1);
        if (aligned) s = (s + o->align - 1) & ~(o->align - 1);
        sizes[i] = s;
    }
}

/* Allocates the keepers (see the top of the file), outside the clock. */
static void keep_blocks(const struct fp_opts *o) {
    const char *m = o->mode;
    if (!o->keep || strcmp(m, "control") == 0) return;
    if (strcmp(m, "realloc") == 0) {
        for (size_t s = 16; s <= o->size; s += 16)
            keepers[nkeepers++] = malloc(s);
        return;
    }
    for (size_t i = 0; i < FP_SIZES; i++) {
        size_t s = sizes[i];
        if (strcmp(m, "calloc") == 0)
            keepers[nkeepers++] = calloc(1, s);
        else if (strcmp(m, "aligned") == 0)
            keepers[nkeepers++] = aligned_alloc(o->align, s);
        else
            keepers[nkeepers++] = malloc(s);
    }
}

/* Ops per unit of work (a burst holds k ops, a realloc chain max/16 - 1). */
static uint64_t ops_per_unit(const struct fp_opts *o) {
    if (strcmp(o->mode, "bursts") == 0 || strncmp(o->mode, "remote", 6) == 0 || strcmp(o->mode, "mixed") == 0)
        return o->burst;
    if (strcmp(o->mode, "realloc") == 0) return o->size / 16 - 1;
    return 1;
}

/* Runs `units` units of the chosen mode. */
static void run(const struct fp_opts *o, uint64_t units, void **slots) {
    const char *m = o->mode;
    if (strcmp(m, "pairs") == 0)
        run_pairs(units);
    else if (strcmp(m, "calloc") == 0)
        run_calloc(units);
    else if (strcmp(m, "aligned") == 0)
        run_aligned(units, o->align);
    else if (strcmp(m, "control") == 0)
        run_control(units);
    else if (strcmp(m, "bursts") == 0)
        run_bursts(units, o->burst, slots, o->reverse);
    else if (strcmp(m, "realloc") == 0)
        run_realloc(units, o->size);
    else if (strcmp(m, "remote") == 0 || strcmp(m, "remoteheap") == 0 || strcmp(m, "remotectl") == 0)
        run_remote(units, o->burst, slots, strcmp(m, "remotectl") == 0);
    else if (strcmp(m, "mixed") == 0)
        run_mixed(units, o->burst, slots);
    else
        usage();
}

static const char *unit_name(const char *mode) {
    if (strcmp(mode, "bursts") == 0 || strncmp(mode, "remote", 6) == 0 || strcmp(mode, "mixed") == 0) return "block";
    if (strcmp(mode, "realloc") == 0) return "realloc";
    if (strcmp(mode, "control") == 0) return "iteration";
    return "pair";
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* sefer_phase_begin / sefer_phase_end, found with dlsym (the program links
 * libc only); exits 77 when the preloaded allocator has none. */
static void phase_call(int begin) {
    const char *name = begin ? "sefer_phase_begin" : "sefer_phase_end";
    void *f = dlsym(RTLD_DEFAULT, name);
    if (f == NULL) {
        fprintf(stderr, "fastpath: %s not found (not running on sefer)\n", name);
        exit(77);
    }
    int rc = begin ? ((int (*)(const char *))f)("fastpath") : ((int (*)(void *))f)(NULL);
    if (rc != 0) exit(1);
}

int main(int argc, char **argv) {
    struct fp_opts o;
    parse(argc, argv, &o);
    if (o.phase) {
        phase_call(1);
        free(malloc(64)); /* something for the phase to count */
        if (o.phase == 'p') phase_call(0);
    }
    fill_sizes(&o);
    if (o.mix_hi) fill_random_sizes(&o);
    keep_blocks(&o);
    uint64_t per = ops_per_unit(&o);
    uint64_t units = (o.ops + per - 1) / per, warm = (o.warmup + per - 1) / per;
    void **slots = calloc(o.burst, sizeof *slots);
    if (!slots) return 1;
    pthread_t freer;
    int remote = strncmp(o.mode, "remote", 6) == 0;
    hand.allocates = strcmp(o.mode, "remoteheap") == 0;
    if (remote && pthread_create(&freer, NULL, remote_freer, NULL) != 0) return 1;

    run(&o, warm, slots);
    double t0 = now();
    run(&o, units, slots);
    double secs = now() - t0;
    if (remote) {
        pthread_mutex_lock(&hand.lock);
        hand.quit = 1;
        pthread_cond_broadcast(&hand.cond);
        pthread_mutex_unlock(&hand.lock);
        pthread_join(freer, NULL);
    }

    uint64_t ops = units * per;
    printf("fastpath mode=%s size=%zu burst=%zu order=%s align=%zu keep=%d ops=%llu unit=%s "
           "mix=%zu:%zu%s seconds=%.6f"
           " ops_per_s=%.0f ns_per_op=%.3f",
           o.mode, o.size, strcmp(o.mode, "bursts") == 0 || o.mix_hi ? o.burst : (size_t)0,
           strcmp(o.mode, "bursts") == 0 ? (o.reverse ? "reverse" : "same") : "-",
           strcmp(o.mode, "aligned") == 0 ? o.align : (size_t)0, o.keep, (unsigned long long)ops,
           unit_name(o.mode), o.mix_lo, o.mix_hi, o.mix_log ? ":log" : "", secs, ops ? (double)ops / secs : 0.0,
           ops ? secs * 1e9 / (double)ops : 0.0);
    wa_print(stdout);
    putchar('\n');
    free(slots);
    for (size_t i = 0; i < nkeepers; i++)
        free(keepers[i]);
    if (o.phase == 'P') phase_call(0);
    return 0;
}
