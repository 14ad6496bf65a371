/* mixed.c - bursts of blocks of random sizes, freed in allocation order
 * (issue 19: on mixed sizes sefer loses to jemalloc and tcmalloc).
 *
 *   mixed [-m LO:HI[:log]] [-k BURST] [-x EVERY] [-c] [-t THREADS] [-d SECONDS] [-S SEED]
 *
 * Each thread runs steps until the main thread raises a stop flag after
 * SECONDS (read once a step).  A step mallocs BURST blocks (default 8),
 * writes one byte of each, then frees them in allocation order: between
 * steps a thread holds no block, so pages go empty and are needed again.
 *
 * Sizes (-m, default 16:2048): uniform in [LO, HI]; with :log, an octave
 * [2^e, 2^(e+1)) of the range at random, then a size uniform in it (clipped
 * to the range), as bench/fastpath's mixed mode (these rows' instruction
 * counts, in bench/instructions).  They come from a table of 4096 draws made
 * before the clock starts, each thread walking it from its own starting
 * point: no generator runs in the timed loop.
 *
 * Cross-thread frees (-x EVERY, default 0; needs 2 threads or more): about
 * one block in EVERY (marked at random in the table) is handed to the next
 * thread (i to i+1, the last to the first), which frees it.  Handed blocks
 * move 64 at a time into the next thread's mailbox (a list under a mutex),
 * which its owner swaps out at the start of a step when something waits.
 * Both sides only try the lock, and try again a step later (a holder
 * preempted on a busy machine would put a waiter to sleep for a time slice):
 * the hand-off adds one lock round trip per 64 handed blocks a side.
 *
 * Check (-c): each block is filled with a tag (its position in the burst
 * modulo 255, plus 1) and checked to its last byte by the thread that frees
 * it: a block shorter than asked, or overlapping another, counts in errors=
 * and makes the exit status 1.  A test of the allocator, not a figure.
 *
 * ops_per_s = (mallocs + frees) / elapsed, all threads (a handed block's free
 * counts for the thread that frees it; blocks in flight at the end do not).
 * Output (one line):
 *   mixed sizes=LO:HI[:log] burst=K threads=T cross_every=X check=C seconds=D steps=S
 *     ops=N elapsed=E ops_per_s=X cross_frees=F errors=0 allocator=A version=V malloc_from=P */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdatomic.h>

#include "benchutil.h"
#include "whichalloc.h"

#define TABLE 4096       /* size table entries, a power of two */
#define HANDOFF_BATCH 64 /* handed blocks moved to the next thread at a time */
#define MAX_BURST 4096
#define MAX_SIZE ((size_t)1 << 30) /* sizes fit a table entry (below) */

/* An entry: the size shifted left by one, and in bit 0 whether the block
 * goes to the next thread; one load per block in the timed loop. */
static uint32_t table[TABLE];

struct handed {
    unsigned char *p;
    uint32_t size, tag;
};

struct list {
    struct handed *at;
    size_t n, cap;
};

struct worker {
    _Alignas(64) unsigned index; /* (no two workers' counters on one cache line) */
    size_t start;                /* where this thread begins in the table */
    unsigned char **burst;
    struct list outgoing; /* handed blocks not yet in the next mailbox */
    struct list spare;    /* an empty list to leave in the mailbox when emptying it */
    uint64_t steps, handed, cross_frees, errors;
    double end;
    /* the mailbox: written by the previous thread, emptied by this one */
    _Alignas(64) pthread_mutex_t lock;
    struct list waiting;
    atomic_size_t waiting_count; /* waiting.n, read without the lock to skip an empty mailbox */
};

static struct bu_opts opt;
static struct worker *workers;
static size_t burst_len = 8;
static uint64_t cross_every;
static int check;
static atomic_int stop_flag;

static void list_reserve(struct list *l, size_t n) {
    if (n <= l->cap) return;
    size_t cap = l->cap ? l->cap : 4 * HANDOFF_BATCH;
    while (cap < n)
        cap *= 2;
    l->at = realloc(l->at, cap * sizeof *l->at);
    if (!l->at) bu_die("realloc", ENOMEM);
    l->cap = cap;
}

static unsigned char tag_of(size_t position) {
    return (unsigned char)(1 + position % 255);
}

/* 1 when a byte of the block lost its tag. */
static uint64_t tag_lost(const unsigned char *p, size_t size, unsigned char tag) {
    for (size_t i = 0; i < size; i++)
        if (p[i] != tag) return 1;
    return 0;
}

/* Frees what the previous thread handed over, if anything waits and the
 * lock is free. */
static void empty_mailbox(struct worker *w) {
    if (atomic_load_explicit(&w->waiting_count, memory_order_relaxed) == 0 ||
        pthread_mutex_trylock(&w->lock))
        return;
    struct list got = w->waiting;
    w->waiting = w->spare;
    atomic_store_explicit(&w->waiting_count, 0, memory_order_relaxed);
    pthread_mutex_unlock(&w->lock);
    for (size_t i = 0; i < got.n; i++) {
        if (check) w->errors += tag_lost(got.at[i].p, got.at[i].size, (unsigned char)got.at[i].tag);
        free(got.at[i].p);
    }
    w->cross_frees += got.n;
    got.n = 0;
    w->spare = got;
}

/* Appends this thread's handed blocks to the next thread's mailbox; 0 when
 * its lock was busy. */
static int hand_over(struct worker *w, struct worker *next) {
    if (pthread_mutex_trylock(&next->lock)) return 0;
    list_reserve(&next->waiting, next->waiting.n + w->outgoing.n);
    memcpy(next->waiting.at + next->waiting.n, w->outgoing.at,
           w->outgoing.n * sizeof *w->outgoing.at);
    next->waiting.n += w->outgoing.n;
    atomic_store_explicit(&next->waiting_count, next->waiting.n, memory_order_relaxed);
    pthread_mutex_unlock(&next->lock);
    w->outgoing.n = 0;
    return 1;
}

__attribute__((noinline)) static void *worker_main(void *arg) {
    struct worker *w = arg;
    struct worker *next = &workers[(w->index + 1) % opt.threads];
    unsigned char **burst = w->burst;
    size_t at = w->start;
    uint64_t steps = 0;
    while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
        if (cross_every) empty_mailbox(w);
        for (size_t j = 0; j < burst_len; j++) {
            size_t size = table[(at + j) & (TABLE - 1)] >> 1;
            unsigned char *p = malloc(size);
            if (check)
                memset(p, tag_of(j), size);
            else
                *(volatile unsigned char *)p = (unsigned char)j;
            burst[j] = p;
        }
        for (size_t j = 0; j < burst_len; j++) {
            uint32_t entry = table[(at + j) & (TABLE - 1)];
            if (check) w->errors += tag_lost(burst[j], entry >> 1, tag_of(j));
            if (entry & 1) /* (outgoing has room for a burst: see below) */
                w->outgoing.at[w->outgoing.n++] = (struct handed){burst[j], entry >> 1, tag_of(j)};
            else
                free(burst[j]);
        }
        if (w->outgoing.n >= HANDOFF_BATCH) {
            size_t n = w->outgoing.n;
            if (hand_over(w, next))
                w->handed += n;
            else
                list_reserve(&w->outgoing, n + burst_len);
        }
        at += burst_len;
        steps++;
    }
    w->handed += w->outgoing.n; /* (freed by main, after the clock) */
    w->steps = steps;
    w->end = bu_now();
    return NULL;
}

static void fill_table(size_t lo, size_t hi, int log_uniform) {
    uint64_t rng = bu_seed(opt.seed, 19);
    /* the octaves of the range (HI a power of two is not one of its own) */
    unsigned first = 63 - __builtin_clzll(lo), last = 63 - __builtin_clzll(hi > lo ? hi - 1 : hi);
    for (size_t i = 0; i < TABLE; i++) {
        size_t a = lo, b = hi;
        if (log_uniform) {
            unsigned e = first + (unsigned)below((uint32_t)xorshift64(&rng), last - first + 1);
            if (((size_t)1 << e) > a) a = (size_t)1 << e;
            if (((size_t)2 << e) - 1 < b) b = ((size_t)2 << e) - 1;
        }
        size_t size = a + below((uint32_t)xorshift64(&rng), b - a + 1);
        int handed = cross_every && below((uint32_t)xorshift64(&rng), cross_every) == 0;
        table[i] = (uint32_t)(size << 1 | (size_t)handed);
    }
}

static int take_option(int letter, const char *value) {
    char *end = NULL;
    if (letter == 'c') return check = 1;
    unsigned long long v = strtoull(value, &end, 0);
    if (end == value || *end) return 0;
    if (letter == 'k') burst_len = (size_t)v;
    if (letter == 'x') cross_every = v;
    return (letter == 'x' && v <= UINT32_MAX) || (letter == 'k' && v >= 1 && v <= MAX_BURST);
}

int main(int argc, char **argv) {
    bu_prog = "mixed";
    bu_usage_text = "[-m LO:HI[:log]] [-k BURST] [-x EVERY] [-c]";
    bu_extra_letters = "k:x:c";
    bu_extra_option = take_option;
    bu_parse(argc, argv, &opt, "16:2048");
    unsigned long long lo = 0, hi = 0;
    int used = 0; /* -m is LO:HI, then nothing or ":log" */
    if (sscanf(opt.mode, "%llu:%llu%n", &lo, &hi, &used) != 2) bu_usage();
    int log_uniform = strcmp(opt.mode + used, ":log") == 0;
    if ((opt.mode[used] && !log_uniform) || lo == 0 || lo > hi || hi > MAX_SIZE || opt.sizes ||
        (cross_every && opt.threads < 2))
        bu_usage();
    fill_table((size_t)lo, (size_t)hi, log_uniform);

    workers = aligned_alloc(64, opt.threads * sizeof *workers);
    if (!workers) bu_die("aligned_alloc", ENOMEM);
    memset(workers, 0, opt.threads * sizeof *workers);
    pthread_t *tids = bu_xcalloc(opt.threads, sizeof *tids);
    for (unsigned t = 0; t < opt.threads; t++) {
        struct worker *w = &workers[t];
        w->index = t;
        w->start = (size_t)t * TABLE / opt.threads;
        w->burst = bu_xcalloc_lines(burst_len, sizeof *w->burst);
        list_reserve(&w->outgoing, HANDOFF_BATCH + burst_len);
        list_reserve(&w->spare, 4 * HANDOFF_BATCH);
        list_reserve(&w->waiting, 4 * HANDOFF_BATCH);
        pthread_mutex_init(&w->lock, NULL);
    }

    double t0 = bu_now();
    for (unsigned t = 0; t < opt.threads; t++)
        tids[t] = bu_start(worker_main, &workers[t]);
    bu_sleep(opt.seconds);
    atomic_store(&stop_flag, 1);
    for (unsigned t = 0; t < opt.threads; t++)
        bu_join(tids[t]);

    double end = t0;
    uint64_t steps = 0, ops = 0, cross_frees = 0, errors = 0;
    for (unsigned t = 0; t < opt.threads; t++) {
        struct worker *w = &workers[t];
        if (w->end > end) end = w->end;
        steps += w->steps;
        /* mallocs, frees of its own blocks, frees of blocks handed to it */
        ops += 2 * w->steps * burst_len - w->handed + w->cross_frees;
        cross_frees += w->cross_frees;
        errors += w->errors;
    }
    double elapsed = end - t0;
    printf("mixed sizes=%llu:%llu%s burst=%zu threads=%u cross_every=%llu check=%d seconds=%g"
           " steps=%llu ops=%llu elapsed=%.6f ops_per_s=%.0f cross_frees=%llu errors=%llu",
           lo, hi, log_uniform ? ":log" : "", burst_len, opt.threads,
           (unsigned long long)cross_every, check, opt.seconds, (unsigned long long)steps,
           (unsigned long long)ops, elapsed, (double)ops / elapsed, (unsigned long long)cross_frees,
           (unsigned long long)errors);
    wa_print(stdout);
    putchar('\n');
    for (unsigned t = 0; t < opt.threads; t++) { /* the blocks still in flight */
        struct worker *w = &workers[t];
        for (size_t i = 0; i < w->outgoing.n; i++)
            free(w->outgoing.at[i].p);
        for (size_t i = 0; i < w->waiting.n; i++)
            free(w->waiting.at[i].p);
    }
    return errors ? 1 : 0;
}
