/* soak.c - sefer-soak: a long, realistic workload that checks every byte.
 *
 *   sefer-soak [--seconds N] [--threads T] [--seed S] [options]   (--help)
 *
 * Worker threads play a server.  A request allocates a request buffer and
 * builds a response by a chain of reallocs, then hands the response to
 * another worker, which checks and frees it (a producer/consumer hand-off:
 * cross-thread frees).  Beside requests they keep a shared pool of
 * long-lived blocks (any worker frees any block), reallocate pool blocks,
 * and churn short-lived blocks through every allocation call (malloc,
 * calloc, aligned_alloc, posix_memalign).
 *
 * The run is a sequence of phases, repeated in cycles:
 *
 *   grow    the pool fills towards 90 % of its slots
 *   serve   steady state (70 %)
 *   burst   as serve, plus large buffers of 1 MiB up to --large-max-mib
 *   churn   as serve at 60 %, while short-lived threads come and go; each
 *           leaves blocks behind (in the pool and in workers' inboxes) that
 *           outlive it
 *   shrink  the pool empties to 10 %
 *
 * Every block carries a pattern derived from its address, size and the run
 * seed (blocks over 8 KiB: its first and last 256 bytes and 64 bytes of
 * every 4 KiB), written when it is allocated and checked before it is freed
 * and after every realloc; calloc'ed blocks are checked to be zero and every
 * block to be aligned as asked.  A mismatch prints what and where and ends
 * the run with status 1.
 *
 * At the end of each phase the workers empty their inboxes and pause, and a
 * line is printed: ops,
 * live blocks and bytes (as the workload counts them: requested sizes), RSS
 * (/proc/self/statm), and sefer's committed bytes and segments.  The first
 * cycle starts from an empty heap and is a warm-up (--warmup cycles, default
 * 1): the first shrink leaves survivors scattered over pages, which raises
 * the next grow phase's RSS once.  From then on a phase's RSS must stay
 * within --rss-bound of the same phase's RSS in the first cycle after the
 * warm-up (default 1.25x + 8 MiB), plus the bytes the workload holds live
 * beyond what it held at that phase's end then, else status 3 (only in runs
 * whose RSS does not follow the machine's speed: --cycles under eager
 * decommit; elsewhere the comparison is printed, not judged).  At the end every
 * remaining block is checked and freed, and the verdict fails (status 1)
 * if the workload's count of live blocks is not zero then, or if any
 * sefer_check() found a problem; and (status 3) if RSS after freeing
 * everything and sefer_trim() is more than --end-rss-bound MiB (default
 * 32) above the RSS measured before the first phase.
 *
 * Phases last a time (--seconds split into about 25 phases, or --phase-ms)
 * or, with --cycles, a fixed number of operations per worker (--phase-ops):
 * that form does the same work whatever the machine's speed, and is what
 * the CI test (tests/reliability/test_soak.c) runs.  docs/reliability.md
 * describes the workload and its bounds. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "soak.h"

#include "sefer.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)
#define INBOX_CAP 512
#define BIG_HELD 2       /* large buffers a worker holds at once */
#define BIG_EVERY 512    /* burst phase: a large buffer every this many ops */
#define STRIPE 64        /* pool slots per lock */
#define SPARSE_OVER 8192 /* larger blocks get the sparse pattern */
#define CHURN_BLOCKS 48  /* blocks a short-lived thread allocates */
#define CHURN_WAVE 4     /* short-lived threads alive at once */
#define FROM_MAIN 0xffffffffu

enum phase { PH_GROW, PH_SERVE, PH_BURST, PH_CHURN, PH_SHRINK, PH_COUNT };
static const char *const phase_name[PH_COUNT] = {"grow", "serve", "burst", "churn", "shrink"};
static const double phase_fill[PH_COUNT] = {0.9, 0.7, 0.7, 0.6, 0.1}; /* pool share aimed at */

struct opts {
    double seconds;
    unsigned threads;
    uint64_t seed;
    unsigned cycles;     /* 0: phases last a time */
    uint64_t phase_ops;  /* with cycles: operations per worker per phase */
    unsigned phase_ms;   /* without: 0 = seconds / 25, within 200 ms - 10 s */
    size_t pool;         /* long-lived block slots */
    size_t large_max;    /* bytes */
    size_t large_budget; /* bytes of large buffers live at once, at most */
    unsigned warmup;     /* cycles not compared */
    double rss_factor;   /* 0: no bound (neither this nor the end's) */
    size_t rss_slack;    /* bytes */
    size_t end_slack;    /* bytes: RSS at the end may exceed RSS at the start by this */
    bool check, quiet;
};

/* A block as the workload knows it. */
struct blk {
    unsigned char *p;
    size_t n;
    uint64_t seed;
    unsigned from; /* allocating thread: worker id, threads + churn index, FROM_MAIN */
    bool large;    /* a burst buffer, counted in large_live */
};

struct inbox {
    pthread_mutex_t lock;
    unsigned head, count;
    struct blk m[INBOX_CAP];
};

struct worker {
    pthread_t thread;
    unsigned id;
    uint64_t rng;
    _Atomic uint64_t ops;
    struct blk big[BIG_HELD];
    unsigned nbig;
    struct inbox inbox;
} __attribute__((aligned(64)));

static struct {
    struct opts o;
    struct worker *w;
    struct blk *pool;
    pthread_mutex_t *stripes;
    size_t w_bytes, pool_bytes, stripes_bytes;
    pthread_barrier_t barrier;
    enum phase phase;
    bool quit;
    _Atomic int failed, stop;
    _Atomic unsigned churn_next;
    _Atomic uint64_t pool_used, live_blocks, live_bytes, large_live;
    _Atomic uint64_t allocs, frees, cross_frees, reallocs, large, churn_threads;
} S;

/* SIGINT or SIGTERM: finish the phase in progress, check and free every
 * block, print the verdict, exit 128 + the signal.  (Repeats change
 * nothing: under `sefer soak` a Ctrl-C arrives from the terminal and again
 * forwarded by the wrapper.) */
static volatile sig_atomic_t interrupted;

static void on_stop_signal(int sig) { interrupted = sig; }

static void catch_stop_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* ---- patterns ------------------------------------------------------------- */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t rnd(uint64_t *s) {
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* Byte i of a block with pattern seed `seed`: depends only on the seed and
 * the offset, so a block keeps its pattern across a moving realloc. */
static unsigned char pat_byte(uint64_t seed, size_t i) {
    return (unsigned char)(mix64(seed + i / 8) >> (i % 8 * 8));
}

static void fill_range(unsigned char *p, size_t from, size_t to, uint64_t seed) {
    size_t i = from;
    for (; i < to && i % 8; i++)
        p[i] = pat_byte(seed, i);
    for (; i + 8 <= to; i += 8) {
        uint64_t w = mix64(seed + i / 8);
        memcpy(p + i, &w, 8);
    }
    for (; i < to; i++)
        p[i] = pat_byte(seed, i);
}

/* First offset in [from, min(to, limit)) not holding the pattern (zero =
 * true: holding zero), or SIZE_MAX. */
static size_t check_range(const unsigned char *p, size_t from, size_t to, size_t limit,
                          uint64_t seed, bool zero) {
    if (to > limit) to = limit;
    for (size_t i = from; i < to; i++) {
        if (i % 8 == 0 && i + 8 <= to) {
            uint64_t got, want = zero ? 0 : mix64(seed + i / 8);
            memcpy(&got, p + i, 8);
            if (got == want) {
                i += 7;
                continue;
            }
        }
        if (p[i] != (zero ? 0 : pat_byte(seed, i))) return i;
    }
    return SIZE_MAX;
}

/* The pattern's layout: the whole block up to SPARSE_OVER bytes, else its
 * first and last 256 bytes and 64 bytes of every 4 KiB (every page is still
 * touched, so RSS is real). */
static void layout_fill(unsigned char *p, size_t n, uint64_t seed) {
    if (n <= SPARSE_OVER) {
        fill_range(p, 0, n, seed);
        return;
    }
    fill_range(p, 0, 256, seed);
    for (size_t off = 4096; off + 64 <= n; off += 4096)
        fill_range(p, off, off + 64, seed);
    fill_range(p, n - 256, n, seed);
}

/* Checks the layout of an n-byte block, bytes below limit only. */
static size_t layout_check(const unsigned char *p, size_t n, size_t limit, uint64_t seed,
                           bool zero) {
    if (n <= SPARSE_OVER) return check_range(p, 0, n, limit, seed, zero);
    size_t bad = check_range(p, 0, 256, limit, seed, zero);
    for (size_t off = 4096; bad == SIZE_MAX && off + 64 <= n; off += 4096)
        bad = check_range(p, off, off + 64, limit, seed, zero);
    return bad != SIZE_MAX ? bad : check_range(p, n - 256, n, limit, seed, zero);
}

/* ---- failures ------------------------------------------------------------ */

static void say(const char *line, int len) {
    if (len > 0 && write(2, line, (size_t)len) < 0) return;
}

/* A corrupted block (off: the first wrong byte, or SIZE_MAX for a block
 * that is wrong as a whole): one line on stderr, and the run stops. */
static void corrupted(const char *what, const struct blk *b, size_t off, bool zero, unsigned me) {
    char line[400];
    int len = snprintf(line, sizeof line,
                       "sefer-soak: CORRUPTION: %s: block %p, %zu bytes, pattern seed %#" PRIx64
                       ", allocated by thread %u, checked by thread %u, phase %s",
                       what, (void *)b->p, b->n, b->seed, b->from, me, phase_name[S.phase]);
    if (off != SIZE_MAX && len > 0 && (size_t)len < sizeof line)
        len +=
            snprintf(line + len, sizeof line - (size_t)len, ": byte %zu is 0x%02x, expected 0x%02x",
                     off, b->p[off], zero ? 0 : pat_byte(b->seed, off));
    if (len > 0 && (size_t)len + 1 < sizeof line) line[len++] = '\n';
    say(line, len);
    atomic_store(&S.failed, 1);
}

static void failed_call(const char *what, size_t n, int err) {
    char line[200];
    int len = snprintf(line, sizeof line, "sefer-soak: FAILED: %s of %zu bytes: %s (phase %s)\n",
                       what, n, strerror(err), phase_name[S.phase]);
    say(line, len);
    atomic_store(&S.failed, 1);
}

/* ---- blocks ----------------------------------------------------------------- */

static size_t pick_size(uint64_t *r) {
    unsigned k = (unsigned)(rnd(r) % 1000);
    uint64_t x = rnd(r);
    if (k < 700) return 8 + x % 249;
    if (k < 920) return 257 + x % 1792;
    if (k < 980) return 2049 + x % (30 * 1024);
    if (k < 998) return 32769 + x % (224 * 1024);
    return 256 * 1024 + x % (768 * 1024);
}

/* Allocates n bytes through one of the allocation calls, chosen at random;
 * *align: what the result must be aligned to; *zero: calloc'ed. */
static unsigned char *any_alloc(size_t *n, uint64_t *r, size_t *align, bool *zero) {
    unsigned k = (unsigned)(rnd(r) % 100);
    *align = 16;
    *zero = false;
    if (k < 80) return malloc(*n);
    if (k < 90) {
        *zero = true;
        return calloc(1, *n);
    }
    if (k < 95) {
        *align = (size_t)32 << (rnd(r) % 8); /* 32 B - 4 KiB */
        *n = (*n + *align - 1) / *align * *align;
        return aligned_alloc(*align, *n);
    }
    void *p = NULL;
    *align = (size_t)16 << (rnd(r) % 10); /* 16 B - 8 KiB */
    int err = posix_memalign(&p, *align, *n);
    if (err) errno = err;
    return err ? NULL : p;
}

static void count_live(size_t n, int sign) {
    if (sign > 0) {
        atomic_fetch_add_explicit(&S.live_blocks, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&S.live_bytes, n, memory_order_relaxed);
        atomic_fetch_add_explicit(&S.allocs, 1, memory_order_relaxed);
    } else {
        atomic_fetch_sub_explicit(&S.live_blocks, 1, memory_order_relaxed);
        atomic_fetch_sub_explicit(&S.live_bytes, n, memory_order_relaxed);
        atomic_fetch_add_explicit(&S.frees, 1, memory_order_relaxed);
    }
}

/* Allocates and fills a block of about n bytes; false on failure. */
static bool take_block(struct blk *b, size_t n, uint64_t *r, unsigned me) {
    size_t align;
    bool zero;
    unsigned char *p = any_alloc(&n, r, &align, &zero);
    if (p == NULL) {
        failed_call("allocation", n, errno);
        return false;
    }
    *b =
        (struct blk){p, n, mix64((uintptr_t)p ^ (n * 0x9e3779b97f4a7c15ull) ^ S.o.seed), me, false};
    count_live(n, +1);
    if ((uintptr_t)p % align != 0) corrupted("not aligned as asked", b, SIZE_MAX, false, me);
    size_t bad = zero ? layout_check(p, n, n, 0, true) : SIZE_MAX;
    if (bad != SIZE_MAX) corrupted("calloc'ed block not zero", b, bad, true, me);
    layout_fill(p, n, b->seed);
    return true;
}

/* Checks and frees a block. */
static void drop_block(const struct blk *b, unsigned me, const char *where) {
    size_t bad = layout_check(b->p, b->n, b->n, b->seed, false);
    if (bad != SIZE_MAX) {
        corrupted(where, b, bad, false, me);
        return; /* leave it: freeing a corrupted block could hide where it went */
    }
    if (b->large) atomic_fetch_sub(&S.large_live, b->n);
    if (b->from != me) atomic_fetch_add_explicit(&S.cross_frees, 1, memory_order_relaxed);
    count_live(b->n, -1);
    free(b->p);
}

/* Resizes a block with realloc: the shared bytes must survive. */
static bool resize_block(struct blk *b, size_t nn, unsigned me, const char *where) {
    unsigned char *q = realloc(b->p, nn);
    if (q == NULL) {
        failed_call("realloc", nn, errno);
        return false;
    }
    atomic_fetch_add_explicit(&S.reallocs, 1, memory_order_relaxed);
    struct blk old = *b;
    old.p = q;
    size_t bad = layout_check(q, old.n, nn < old.n ? nn : old.n, old.seed, false);
    if (bad != SIZE_MAX) {
        corrupted(where, &old, bad, false, me);
        return false;
    }
    atomic_fetch_add_explicit(&S.live_bytes, nn - old.n,
                              memory_order_relaxed); /* wraps on shrink */
    b->p = q;
    b->n = nn;
    layout_fill(q, nn, b->seed);
    return true;
}

/* ---- hand-off between threads ---------------------------------------------- */

static bool inbox_push(struct inbox *in, const struct blk *b) {
    bool ok = false;
    pthread_mutex_lock(&in->lock);
    if (in->count < INBOX_CAP) {
        in->m[(in->head + in->count++) % INBOX_CAP] = *b;
        ok = true;
    }
    pthread_mutex_unlock(&in->lock);
    return ok;
}

static bool inbox_pop(struct inbox *in, struct blk *b) {
    bool ok = false;
    pthread_mutex_lock(&in->lock);
    if (in->count > 0) {
        *b = in->m[in->head];
        in->head = (in->head + 1) % INBOX_CAP;
        in->count--;
        ok = true;
    }
    pthread_mutex_unlock(&in->lock);
    return ok;
}

/* Hands a block to a random worker other than `me` (it frees it); frees it
 * here if that worker's inbox is full. */
static void send_block(const struct blk *b, unsigned me, uint64_t *r) {
    unsigned to = (unsigned)(rnd(r) % S.o.threads);
    if (to == me && S.o.threads > 1) to = (to + 1) % S.o.threads;
    if (!inbox_push(&S.w[to].inbox, b)) drop_block(b, me, "before a hand-off");
}

/* Puts a block in a random pool slot, freeing the slot's old block. */
static void pool_put(const struct blk *b, unsigned me, uint64_t *r) {
    size_t i = rnd(r) % S.o.pool;
    pthread_mutex_lock(&S.stripes[i / STRIPE]);
    if (S.pool[i].p != NULL)
        drop_block(&S.pool[i], me, "in the pool");
    else
        atomic_fetch_add(&S.pool_used, 1);
    S.pool[i] = *b;
    pthread_mutex_unlock(&S.stripes[i / STRIPE]);
}

/* ---- worker operations --------------------------------------------------- */

/* A request: a request buffer, a response built by a realloc chain and
 * handed to another worker. */
static void op_request(struct worker *w) {
    struct blk req, resp;
    if (!take_block(&req, 64 + rnd(&w->rng) % 1985, &w->rng, w->id)) return;
    if (take_block(&resp, 32 + rnd(&w->rng) % 96, &w->rng, w->id)) {
        unsigned steps = 1 + (unsigned)(rnd(&w->rng) % 5);
        bool ok = true;
        for (unsigned s = 0; s < steps && ok; s++) {
            size_t nn = rnd(&w->rng) % 10 == 0 ? resp.n / 2 + 16
                                               : resp.n + resp.n / 2 + rnd(&w->rng) % (resp.n + 1);
            ok = resize_block(&resp, nn > 65536 ? 65536 : nn, w->id, "response after realloc");
        }
        if (ok) send_block(&resp, w->id, &w->rng);
    }
    drop_block(&req, w->id, "request");
}

/* The pool: allocate into an empty slot or free a full one, whichever moves
 * the pool towards the phase's fill. */
static void op_pool(struct worker *w) {
    bool grow = (double)atomic_load(&S.pool_used) < phase_fill[S.phase] * (double)S.o.pool;
    for (int probe = 0; probe < 4; probe++) {
        size_t i = rnd(&w->rng) % S.o.pool;
        struct blk *slot = &S.pool[i];
        pthread_mutex_lock(&S.stripes[i / STRIPE]);
        bool done = false;
        if (grow && slot->p == NULL) {
            done = take_block(slot, pick_size(&w->rng), &w->rng, w->id);
            if (done) atomic_fetch_add(&S.pool_used, 1);
        } else if (!grow && slot->p != NULL) {
            drop_block(slot, w->id, "in the pool");
            slot->p = NULL;
            atomic_fetch_sub(&S.pool_used, 1);
            done = true;
        }
        pthread_mutex_unlock(&S.stripes[i / STRIPE]);
        if (done) return;
    }
}

/* A realloc of a long-lived pool block (grows and shrinks). */
static void op_realloc_pool(struct worker *w) {
    size_t i = rnd(&w->rng) % S.o.pool;
    pthread_mutex_lock(&S.stripes[i / STRIPE]);
    struct blk *slot = &S.pool[i];
    if (slot->p != NULL) {
        size_t nn = rnd(&w->rng) % 2 ? pick_size(&w->rng) : slot->n / 2 + 1;
        resize_block(slot, nn, w->id, "pool block after realloc");
    }
    pthread_mutex_unlock(&S.stripes[i / STRIPE]);
}

/* Responses other workers handed over: check and free. */
static void op_inbox(struct worker *w) {
    struct blk b;
    for (int k = 0; k < 8 && inbox_pop(&w->inbox, &b); k++)
        drop_block(&b, w->id, "handed-over block");
}

/* Short-lived blocks through every allocation call, freed in random order. */
static void op_local(struct worker *w) {
    struct blk b[8];
    unsigned n = 1 + (unsigned)(rnd(&w->rng) % 8), got = 0;
    for (unsigned k = 0; k < n; k++)
        if (take_block(&b[got], 1 + rnd(&w->rng) % 4096, &w->rng, w->id)) got++;
    while (got > 0) {
        unsigned k = (unsigned)(rnd(&w->rng) % got);
        drop_block(&b[k], w->id, "short-lived block");
        b[k] = b[--got];
    }
}

/* Burst phase: a large buffer (1 MiB - large_max); the oldest held one is
 * freed here or by another worker. */
static void op_big(struct worker *w) {
    if (w->nbig == BIG_HELD) {
        struct blk old = w->big[0];
        memmove(&w->big[0], &w->big[1], (BIG_HELD - 1) * sizeof old);
        w->nbig--;
        if (rnd(&w->rng) % 2)
            drop_block(&old, w->id, "large buffer");
        else
            send_block(&old, w->id, &w->rng);
    }
    unsigned span = 0;
    while ((MIB << (span + 1)) <= S.o.large_max)
        span++;
    size_t base = MIB << (rnd(&w->rng) % (span + 1));
    size_t n = base + rnd(&w->rng) % base;
    if (n > S.o.large_max) n = S.o.large_max;
    uint64_t cur = atomic_load(&S.large_live);
    do {
        if (cur + n > S.o.large_budget) return;
    } while (!atomic_compare_exchange_weak(&S.large_live, &cur, cur + n));
    struct blk *b = &w->big[w->nbig];
    if (!take_block(b, n, &w->rng, w->id)) {
        atomic_fetch_sub(&S.large_live, n);
        return;
    }
    if (b->n != n) atomic_fetch_add(&S.large_live, b->n - n); /* rounded up for alignment */
    b->large = true;
    w->nbig++;
    atomic_fetch_add_explicit(&S.large, 1, memory_order_relaxed);
}

static void step(struct worker *w, uint64_t i) {
    if (S.phase == PH_BURST && i % BIG_EVERY == 0) op_big(w);
    unsigned r = (unsigned)(rnd(&w->rng) % 100);
    if (r < 35)
        op_request(w);
    else if (r < 70)
        op_pool(w);
    else if (r < 85)
        op_inbox(w);
    else if (r < 95)
        op_local(w);
    else
        op_realloc_pool(w);
    atomic_fetch_add_explicit(&w->ops, 1, memory_order_relaxed);
}

static void run_phase(struct worker *w) {
    uint64_t limit = S.o.cycles ? S.o.phase_ops : UINT64_MAX;
    for (uint64_t i = 0; i < limit; i++) {
        if (atomic_load_explicit(&S.failed, memory_order_relaxed)) break;
        if (!S.o.cycles && i % 64 == 0 && atomic_load(&S.stop)) break;
        step(w, i);
    }
    while (S.phase == PH_BURST && w->nbig > 0)
        drop_block(&w->big[--w->nbig], w->id, "large buffer");
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    for (;;) {
        pthread_barrier_wait(&S.barrier); /* a phase starts, or the run ends */
        if (S.quit) return NULL;
        run_phase(w);
        pthread_barrier_wait(&S.barrier); /* nobody hands over anything more */
        struct blk b;
        while (inbox_pop(&w->inbox, &b))
            drop_block(&b, w->id, "handed-over block");
        pthread_barrier_wait(&S.barrier); /* the phase is over: inboxes are empty */
    }
}

/* ---- short-lived threads (churn phase) -------------------------------------- */

/* Allocates blocks, frees a third itself, leaves the rest behind in the
 * pool and in workers' inboxes, and exits: those blocks outlive it. */
static void *churn_main(void *arg) {
    unsigned id = (unsigned)(uintptr_t)arg, me = S.o.threads + id;
    uint64_t r = mix64(S.o.seed ^ (0x5eedull << 32) ^ id) | 1;
    struct blk b[CHURN_BLOCKS];
    unsigned got = 0;
    for (unsigned k = 0; k < CHURN_BLOCKS; k++) {
        size_t n = pick_size(&r);
        if (take_block(&b[got], n > 65536 ? 65536 : n, &r, me)) got++;
    }
    for (unsigned k = 0; k < got; k++) {
        if (k % 3 == 0)
            drop_block(&b[k], me, "short-lived thread's block");
        else if (k % 3 == 1)
            pool_put(&b[k], me, &r);
        else
            send_block(&b[k], me, &r);
    }
    return NULL;
}

/* One wave of short-lived threads; false if one could not be created. */
static bool churn_wave(void) {
    pthread_t t[CHURN_WAVE];
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    unsigned made = 0;
    int err = 0;
    for (; made < CHURN_WAVE; made++) {
        unsigned id = atomic_fetch_add(&S.churn_next, 1);
        if ((err = pthread_create(&t[made], &attr, churn_main, (void *)(uintptr_t)id)) != 0) break;
    }
    pthread_attr_destroy(&attr);
    for (unsigned i = 0; i < made; i++)
        pthread_join(t[i], NULL);
    atomic_fetch_add(&S.churn_threads, made);
    if (err) failed_call("pthread_create (short-lived thread, stack)", 256 * 1024, err);
    return err == 0;
}

/* ---- measuring ------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static size_t rss_bytes(void) {
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    unsigned long long size = 0, rss = 0;
    if (sscanf(buf, "%llu %llu", &size, &rss) != 2) return 0;
    return (size_t)rss * (size_t)sysconf(_SC_PAGESIZE);
}

static double mib(uint64_t bytes) {
    return (double)bytes / (double)MIB;
}

static uint64_t total_ops(void) {
    uint64_t n = 0;
    for (unsigned i = 0; i < S.o.threads; i++)
        n += atomic_load(&S.w[i].ops);
    return n;
}

/* ---- options ----------------------------------------------------------------- */

static void usage(FILE *f) {
    fprintf(f, "usage: sefer-soak [--seconds N] [--threads T] [--seed S] [options]\n"
               "  --seconds N           run for about N seconds (default 60)\n"
               "  --threads T           worker threads, 1-64 (default 4)\n"
               "  --seed S              seed of every random choice (default 1)\n"
               "  --phase-ms N          length of a phase (default: seconds / 25, 200 ms - 10 s)\n"
               "  --cycles C            run C cycles of the five phases instead of a time,\n"
               "  --phase-ops N         each phase N operations per worker (default 20000)\n"
               "  --pool N              long-lived block slots (default 20000)\n"
               "  --large-max-mib M     largest burst buffer (default 64)\n"
               "  --large-budget-mib M  burst buffers live at once, at most (default 256)\n"
               "  --warmup W            cycles before RSS is compared (default 1)\n"
               "  --rss-bound F,M       a repeated phase's RSS may reach F times its value in\n"
               "                        the first cycle after the warm-up plus M MiB (default\n"
               "                        1.25,8), plus what the workload holds live beyond\n"
               "                        what it held then; a verdict only with --cycles and\n"
               "                        decommit.policy = eager (else printed, not judged)\n"
               "  --end-rss-bound M     after freeing everything (and sefer_trim), RSS may be\n"
               "                        at most M MiB above its value before the first phase\n"
               "                        (default 32)\n"
               "  --no-rss-bound        do not compare RSS (neither bound)\n"
               "  --check               run sefer_check() at the end of every phase\n"
               "  --quiet               no per-phase lines\n");
}

static bool parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static int parse_option(struct opts *o, const char *name, const char *val) {
    uint64_t v = 0;
    char *end = NULL;
    if (!strcmp(name, "--seconds")) {
        o->seconds = strtod(val, &end);
        return end != val && !*end && o->seconds > 0 && o->seconds < 1e7 ? 0 : -1;
    }
    if (!strcmp(name, "--rss-bound")) {
        o->rss_factor = strtod(val, &end);
        if (end == val || *end != ',' || o->rss_factor < 1 || !parse_u64(end + 1, 0, 1u << 20, &v))
            return -1;
        o->rss_slack = v * MIB;
        return 0;
    }
    static const struct {
        const char *name;
        uint64_t lo, hi;
    } nums[] = {{"--threads", 1, 64},         {"--seed", 0, UINT64_MAX},
                {"--cycles", 1, 1u << 20},    {"--phase-ops", 1, 1ull << 40},
                {"--phase-ms", 10, 3600000},  {"--pool", 64, 1u << 26},
                {"--large-max-mib", 1, 4096}, {"--large-budget-mib", 1, 1u << 20},
                {"--warmup", 0, 1u << 20},    {"--end-rss-bound", 0, 1u << 20}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        if (strcmp(name, nums[i].name)) continue;
        if (!parse_u64(val, nums[i].lo, nums[i].hi, &v)) return -1;
        switch (i) {
        case 0:
            o->threads = (unsigned)v;
            break;
        case 1:
            o->seed = v;
            break;
        case 2:
            o->cycles = (unsigned)v;
            break;
        case 3:
            o->phase_ops = v;
            break;
        case 4:
            o->phase_ms = (unsigned)v;
            break;
        case 5:
            o->pool = (size_t)v;
            break;
        case 6:
            o->large_max = (size_t)v * MIB;
            break;
        case 7:
            o->large_budget = (size_t)v * MIB;
            break;
        case 8:
            o->warmup = (unsigned)v;
            break;
        default:
            o->end_slack = (size_t)v * MIB;
            break;
        }
        return 0;
    }
    return -2;
}

/* 0, or 1 for --help, or -1 after a message. */
static int parse(int argc, char **argv, struct opts *o) {
    *o = (struct opts){.seconds = 60,
                       .threads = 4,
                       .seed = 1,
                       .phase_ops = 20000,
                       .pool = 20000,
                       .large_max = 64 * MIB,
                       .large_budget = 256 * MIB,
                       .warmup = 1,
                       .rss_factor = 1.25,
                       .rss_slack = 8 * MIB,
                       .end_slack = 32 * MIB};
    for (int i = 1; i < argc; i++) {
        char name[32];
        const char *arg = argv[i], *eq = strchr(arg, '='), *val;
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) return 1;
        if (!strcmp(arg, "--check") || !strcmp(arg, "--quiet")) {
            *(arg[2] == 'c' ? &o->check : &o->quiet) = true;
            continue;
        }
        if (!strcmp(arg, "--no-rss-bound")) {
            o->rss_factor = 0;
            continue;
        }
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        if (len >= sizeof name) len = sizeof name - 1;
        memcpy(name, arg, len);
        name[len] = '\0';
        if (eq)
            val = eq + 1;
        else if (i + 1 < argc)
            val = argv[++i];
        else
            val = NULL;
        int rc = val ? parse_option(o, name, val) : -2;
        if (rc != 0) {
            fprintf(stderr,
                    rc == -2 ? "sefer-soak: unknown option or missing value: %s\n"
                             : "sefer-soak: bad value for %s\n",
                    name);
            usage(stderr);
            return -1;
        }
    }
    if (o->large_budget < o->large_max) o->large_budget = o->large_max;
    if (!o->phase_ms) {
        double ms = o->seconds * 1000 / 25;
        o->phase_ms = ms < 200 ? 200 : ms > 10000 ? 10000 : (unsigned)ms;
    }
    return 0;
}

/* ---- the run ----------------------------------------------------------------- */

static void *map_zero(size_t n) {
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static bool setup(void) {
    S.w_bytes = S.o.threads * sizeof *S.w;
    S.pool_bytes = S.o.pool * sizeof *S.pool;
    S.stripes_bytes = (S.o.pool / STRIPE + 1) * sizeof *S.stripes;
    S.w = map_zero(S.w_bytes);
    S.pool = map_zero(S.pool_bytes);
    S.stripes = map_zero(S.stripes_bytes);
    if (!S.w || !S.pool || !S.stripes) return false;
    for (size_t i = 0; i <= S.o.pool / STRIPE; i++)
        pthread_mutex_init(&S.stripes[i], NULL);
    for (unsigned i = 0; i < S.o.threads; i++) {
        S.w[i].id = i;
        S.w[i].rng = mix64(S.o.seed * 0x9e3779b97f4a7c15ull + i + 1) | 1;
        pthread_mutex_init(&S.w[i].inbox.lock, NULL);
    }
    pthread_barrier_init(&S.barrier, NULL, S.o.threads + 1);
    return true;
}

static void teardown(void) {
    pthread_barrier_destroy(&S.barrier);
    if (S.w) munmap(S.w, S.w_bytes);
    if (S.pool) munmap(S.pool, S.pool_bytes);
    if (S.stripes) munmap(S.stripes, S.stripes_bytes);
}

/* Checks and frees every block still held (the workers have stopped). */
static void free_everything(void) {
    struct blk b;
    for (unsigned i = 0; i < S.o.threads; i++) {
        while (inbox_pop(&S.w[i].inbox, &b))
            drop_block(&b, FROM_MAIN, "handed-over block at the end");
        while (S.w[i].nbig > 0)
            drop_block(&S.w[i].big[--S.w[i].nbig], FROM_MAIN, "large buffer at the end");
    }
    for (size_t i = 0; i < S.o.pool; i++)
        if (S.pool[i].p != NULL) {
            drop_block(&S.pool[i], FROM_MAIN, "pool block at the end");
            S.pool[i].p = NULL;
        }
}

/* Lets the workers (and, in the churn phase, short-lived threads) run one
 * phase; returns when all are done. */
static void run_one_phase(void) {
    atomic_store(&S.stop, 0);
    pthread_barrier_wait(&S.barrier);
    double end = now_s() + S.o.phase_ms / 1000.0;
    if (S.phase == PH_CHURN) {
        uint64_t waves = S.o.cycles ? S.o.phase_ops / 400 + 2 : UINT64_MAX;
        for (uint64_t k = 0; k < waves && !atomic_load(&S.failed) && !interrupted; k++) {
            if (!S.o.cycles && now_s() >= end) break;
            if (!churn_wave()) break;
        }
    }
    while (!S.o.cycles && !atomic_load(&S.failed) && !interrupted && now_s() < end) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    atomic_store(&S.stop, 1);
    pthread_barrier_wait(&S.barrier);
    pthread_barrier_wait(&S.barrier);
}

struct verdict {
    size_t start_rss, first_rss[PH_COUNT], first_live[PH_COUNT], peak_rss, end_rss;
    unsigned phases, over_bound, check_problems;
    const char *unjudged; /* why the phases' bound is not a verdict here; NULL: it is */
    uint64_t live_left; /* blocks the workload still counted as live after freeing everything */
};

/* Why a repeated phase's RSS, in this run, would judge the machine's speed
 * as much as the allocator; NULL if it would not.  Timed phases do as much
 * work as the machine manages, and with delayed decommit (or none at all
 * decided by a clock: the large cache's ttl) what a phase end holds is what
 * was freed in the last decommit.delay.  Such runs print the comparison and
 * leave the verdict to runs of fixed work under eager decommit (the CI
 * soak); the end's bound (after sefer_trim) is always judged. */
static const char *rss_unjudged_reason(void) {
    if (!S.o.cycles) return "timed phases: a phase's work, and its RSS, follow the machine's speed";
    char policy[32];
    if (sefer_config_get("decommit.policy", policy, sizeof policy) == 0 && strcmp(policy, "eager") != 0)
        return "decommit.policy is not eager: a phase end holds what was freed in the last decommit.delay";
    return NULL;
}

/* sefer_check(); any problem fails the run (a negative count too: the
 * check could not run). */
static void check_now(struct verdict *v) {
    int problems = sefer_check();
    if (problems != 0) {
        v->check_problems += problems > 0 ? (unsigned)problems : 1;
        atomic_store(&S.failed, 1);
    }
}

static void report_phase(unsigned n, uint64_t ops, struct verdict *v) {
    unsigned cycle = n / PH_COUNT;
    size_t rss = rss_bytes();
    if (rss > v->peak_rss) v->peak_rss = rss;
    char cmp[48] = "first";
    if (cycle < S.o.warmup) {
        snprintf(cmp, sizeof cmp, "warm-up");
    } else if (cycle == S.o.warmup) {
        v->first_rss[S.phase] = rss;
        v->first_live[S.phase] = (size_t)atomic_load(&S.live_bytes);
    } else if (S.o.rss_factor > 0) {
        /* the bound is on what the allocator adds: bytes the workload holds
         * live beyond what it held in the first measured cycle (its random
         * sizes move them by tens of percent) raise it one for one */
        size_t live = (size_t)atomic_load(&S.live_bytes), more = 0;
        if (live > v->first_live[S.phase]) more = live - v->first_live[S.phase];
        double bound = (double)v->first_rss[S.phase] * S.o.rss_factor + (double)S.o.rss_slack + (double)more;
        bool over = (double)rss > bound;
        v->over_bound += over;
        snprintf(cmp, sizeof cmp, "%.2fx %s",
                 (double)rss / (double)(v->first_rss[S.phase] ? v->first_rss[S.phase] : 1),
                 !over ? "ok" : v->unjudged ? "over (not judged)" : "OVER");
    }
    if (S.o.check) check_now(v);
    struct sefer_stats st = {.size = sizeof st};
    sefer_stats_get(&st, sizeof st);
    if (!S.o.quiet)
        printf("%5u  %-6s  %10" PRIu64 "  %8" PRIu64 "  %9.1f  %8.1f  %10.1f  %8" PRIu64 "  %s\n",
               cycle, phase_name[S.phase], ops, atomic_load(&S.live_blocks),
               mib(atomic_load(&S.live_bytes)), mib(rss), mib(st.bytes_committed), st.segments,
               cmp);
    fflush(stdout);
}

static int finish(const struct verdict *v, uint64_t ops, double secs) {
    bool end_over = S.o.rss_factor > 0 && v->end_rss > v->start_rss + S.o.end_slack;
    bool bad = atomic_load(&S.failed) != 0 || v->live_left != 0;
    printf("sefer-soak: %u phases in %.1f s: %" PRIu64 " ops, %" PRIu64 " allocations, %" PRIu64
           " frees (%" PRIu64 " cross-thread), %" PRIu64 " reallocs, %" PRIu64
           " large buffers, %" PRIu64 " short-lived threads\n",
           v->phases, secs, ops, atomic_load(&S.allocs), atomic_load(&S.frees),
           atomic_load(&S.cross_frees), atomic_load(&S.reallocs), atomic_load(&S.large),
           atomic_load(&S.churn_threads));
    printf("sefer-soak: RSS before the first phase %.1f MiB, peak at phase ends %.1f MiB, after"
           " freeing everything and sefer_trim %.1f MiB; live blocks left %" PRIu64 "%s\n",
           mib(v->start_rss), mib(v->peak_rss), mib(v->end_rss), v->live_left,
           v->live_left ? " (the workload lost track of blocks: FAIL)" : "");
    if (S.o.rss_factor > 0) {
        printf("sefer-soak: repeated phases within %.2fx + %zu MiB of their first RSS after %u "
               "warm-up cycle(s): %s%s%s%s\n",
               S.o.rss_factor, S.o.rss_slack / MIB, S.o.warmup, v->over_bound ? "NO" : "yes",
               v->unjudged ? " (not judged: " : "", v->unjudged ? v->unjudged : "",
               v->unjudged ? "; run --cycles with decommit.policy = eager for a verdict)" : "");
        printf("sefer-soak: RSS after freeing everything within %zu MiB of RSS before the first"
               " phase: %s\n", S.o.end_slack / MIB, end_over ? "NO" : "yes");
    }
    if (S.o.check) printf("sefer-soak: sefer_check problems: %u\n", v->check_problems);
    int rc = bad ? 1 : (v->over_bound && !v->unjudged) || end_over ? 3 : 0;
    printf("sefer-soak: %s\n", rc == 0   ? "PASS"
                               : rc == 1 ? "FAIL (corruption, a failed call, a sefer_check problem or"
                                           " blocks left live: see above and stderr)"
                                         : "FAIL (RSS above a bound)");
    fflush(stdout);
    return rc;
}

int sefer_soak_main(int argc, char **argv) {
    memset(&S, 0, sizeof S);
    int p = parse(argc, argv, &S.o);
    if (p != 0) {
        if (p > 0) usage(stdout);
        return p > 0 ? 0 : 2;
    }
    if (!setup()) {
        fprintf(stderr, "sefer-soak: cannot map the workload's bookkeeping\n");
        teardown();
        return 1;
    }
    printf("sefer-soak: %u workers, seed %" PRIu64
           ", %s, pool %zu slots, bursts 1-%zu MiB (%zu MiB live at "
           "most)\n",
           S.o.threads, S.o.seed, S.o.cycles ? "cycles of fixed work" : "timed phases", S.o.pool,
           S.o.large_max / MIB, S.o.large_budget / MIB);
    if (!S.o.quiet)
        printf("cycle  phase          ops    blocks   live-MiB   rss-MiB  commit-MiB  segments  "
               "rss/first\n");
    unsigned started = 0;
    for (; started < S.o.threads; started++)
        if (pthread_create(&S.w[started].thread, NULL, worker_main, &S.w[started]) != 0) break;
    if (started < S.o.threads) { /* a barrier sized for all cannot be passed */
        fprintf(stderr, "sefer-soak: could not start worker %u\n", started);
        _exit(1);
    }
    struct verdict v = {.unjudged = rss_unjudged_reason()};
    v.start_rss = rss_bytes();
    double t0 = now_s();
    uint64_t ops_before = 0;
    catch_stop_signals();
    for (unsigned n = 0; !atomic_load(&S.failed) && !interrupted; n++) {
        if (S.o.cycles ? n >= S.o.cycles * PH_COUNT : now_s() - t0 >= S.o.seconds) break;
        S.phase = (enum phase)(n % PH_COUNT);
        run_one_phase();
        v.phases++;
        uint64_t ops = total_ops();
        report_phase(n, ops - ops_before, &v);
        ops_before = ops;
    }
    S.quit = true;
    pthread_barrier_wait(&S.barrier);
    for (unsigned i = 0; i < S.o.threads; i++)
        pthread_join(S.w[i].thread, NULL);
    if (!atomic_load(&S.failed)) {
        free_everything();
        v.live_left = atomic_load(&S.live_blocks);
        sefer_trim();
        v.end_rss = rss_bytes();
    }
    if (S.o.check && !atomic_load(&S.failed)) check_now(&v);
    int rc = finish(&v, total_ops(), now_s() - t0);
    teardown();
    if (interrupted && rc == 0) {
        printf("sefer-soak: stopped early by signal %d (the checks above still ran)\n", (int)interrupted);
        rc = 128 + interrupted;
    }
    return rc;
}

#ifndef SEFER_SOAK_LIBRARY
int main(int argc, char **argv) {
    return sefer_soak_main(argc, argv);
}
#endif
