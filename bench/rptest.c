/* rptest.c - threads allocate blocks with varying lifetimes and pass some
 * to each other (after the idea of rpmalloc's benchmark, written anew here).
 *
 *   rptest [-t THREADS] [-s SCALE] [-d SECONDS] [-S SEED]
 *
 * Each thread runs rounds.  A round allocates 512*SCALE blocks (sizes from
 * a skewed distribution: mostly 16-256 bytes, one in 8 up to 4 KiB, one in
 * 64 up to 32 KiB), gives each a lifetime of 1 to 16 rounds, and frees the
 * blocks of its own whose lifetime ended.  One block in 8 is handed to the
 * next thread instead (through a small mutex-protected mailbox, one lock
 * round trip per round), which keeps it for its own lifetime there and then
 * frees it: a free by a thread other than the allocating one, often long
 * after the allocation.  Every block is stamped and checked before its free.
 * The live set per thread stays near 8.5 rounds' worth of blocks.
 *
 *   ops_per_s = (mallocs + frees) / elapsed
 * (elapsed: from the start to the last thread done).
 *
 * Output (one line):
 *   rptest threads=T scale=S seconds=D rounds=R ops=N elapsed=E ops_per_s=X
 *     errors=0 allocator=A version=V malloc_from=P
 * Exit status 1 when a stamp did not match. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdatomic.h>

#include "benchutil.h"
#include "whichalloc.h"

#define LIFETIMES 16 /* a block lives 1..16 rounds */
#define MAX_SIZE (32 << 10)

/* Blocks that end their life in the same round: a growable array. */
struct bucket {
    void **p;
    size_t n, cap;
};

struct worker {
    _Alignas(64) unsigned index; /* (no two workers' counters on one cache line) */
    uint64_t rng, ops, rounds, errors;
    struct bucket due[LIFETIMES]; /* due[r % LIFETIMES]: freed in round r */
    /* the mailbox: blocks the previous thread handed over this round */
    _Alignas(64) pthread_mutex_t lock;
    struct bucket inbox;
    double end;
};

static struct bu_opts opt;
static struct worker *workers;
static size_t per_round;
static atomic_int stop_flag;

static void bucket_push(struct bucket *b, void *p) {
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 256;
        b->p = realloc(b->p, b->cap * sizeof *b->p);
        if (!b->p) bu_die("realloc", ENOMEM);
    }
    b->p[b->n++] = p;
}

static size_t pick_size(uint64_t r) {
    uint32_t dice = (uint32_t)(r >> 40) & 63;
    if (dice == 0) return 16 + below((uint32_t)r, MAX_SIZE - 16);
    if (dice < 8) return 16 + below((uint32_t)r, 4096 - 16);
    return 16 + below((uint32_t)r, 256 - 16);
}

/* Frees the blocks due now, checking their stamps. */
static void free_due(struct worker *w, struct bucket *b) {
    for (size_t i = 0; i < b->n; i++) {
        if (!bu_check_self(b->p[i], MAX_SIZE)) w->errors++;
        free(b->p[i]);
    }
    w->ops += b->n;
    b->n = 0;
}

/* Takes what the previous thread handed over: each block gets its
 * remaining life here. */
static void take_inbox(struct worker *w, uint64_t round) {
    pthread_mutex_lock(&w->lock);
    struct bucket got = w->inbox;
    w->inbox = (struct bucket){0};
    pthread_mutex_unlock(&w->lock);
    for (size_t i = 0; i < got.n; i++) {
        uint64_t r = xorshift64(&w->rng);
        bucket_push(&w->due[(round + 1 + below((uint32_t)r, LIFETIMES)) % LIFETIMES], got.p[i]);
    }
    free(got.p);
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    struct worker *next = &workers[(w->index + 1) % opt.threads];
    struct bucket out = {0};
    uint64_t round = 0;
    while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
        take_inbox(w, round);
        for (size_t i = 0; i < per_round; i++) {
            uint64_t r = xorshift64(&w->rng);
            size_t size = pick_size(r);
            void *p = malloc(size);
            bu_stamp(p, size, r);
            if ((r & 7) == 0) bucket_push(&out, p);
            else bucket_push(&w->due[(round + 1 + below((uint32_t)(r >> 8), LIFETIMES)) % LIFETIMES], p);
        }
        w->ops += per_round;
        pthread_mutex_lock(&next->lock);
        for (size_t i = 0; i < out.n; i++) bucket_push(&next->inbox, out.p[i]);
        pthread_mutex_unlock(&next->lock);
        out.n = 0;
        round++;
        free_due(w, &w->due[round % LIFETIMES]);
    }
    w->end = bu_now();
    w->rounds = round;
    free(out.p);
    return NULL;
}

int main(int argc, char **argv) {
    bu_prog = "rptest";
    bu_parse(argc, argv, &opt, "-");
    per_round = (size_t)(512 * opt.scale) + 1;
    workers = bu_xcalloc_lines(opt.threads, sizeof *workers);
    pthread_t *tids = bu_xcalloc(opt.threads, sizeof *tids);
    for (unsigned i = 0; i < opt.threads; i++) {
        workers[i].index = i;
        workers[i].rng = bu_seed(opt.seed, i);
        pthread_mutex_init(&workers[i].lock, NULL);
    }
    double t0 = bu_now();
    for (unsigned i = 0; i < opt.threads; i++) tids[i] = bu_start(worker_main, &workers[i]);
    bu_sleep(opt.seconds);
    atomic_store(&stop_flag, 1);
    for (unsigned i = 0; i < opt.threads; i++) bu_join(tids[i]);

    double end = t0;
    uint64_t ops = 0, rounds = 0, errors = 0;
    for (unsigned i = 0; i < opt.threads; i++) {
        struct worker *w = &workers[i];
        if (w->end > end) end = w->end;
        ops += w->ops; /* (the frees below are after the clock) */
        for (size_t k = 0; k < LIFETIMES; k++) {
            free_due(w, &w->due[k]);
            free(w->due[k].p);
        }
        free_due(w, &w->inbox);
        free(w->inbox.p);
        rounds += w->rounds;
        errors += w->errors;
    }
    double elapsed = end - t0;
    printf("rptest threads=%u scale=%g seconds=%g rounds=%llu ops=%llu elapsed=%.6f ops_per_s=%.0f"
           " errors=%llu",
           opt.threads, opt.scale, opt.seconds, (unsigned long long)rounds, (unsigned long long)ops, elapsed,
           (double)ops / elapsed, (unsigned long long)errors);
    wa_print(stdout);
    putchar('\n');
    free(workers);
    free(tids);
    return errors ? 1 : 0;
}
