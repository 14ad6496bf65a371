/* xmalloc.c - producers only allocate, consumers only free (after the idea
 * of the xmalloc-test workload, written anew here).
 *
 *   xmalloc [-t THREADS] [-s SCALE] [-d SECONDS] [-S SEED]
 *
 * THREADS/2 producers and as many consumers (at least one of each; an odd
 * THREADS leaves one thread out).  Producer i and consumer i share one
 * bounded single-producer single-consumer ring of 1024*SCALE (rounded up to
 * a power of two) pointers: the hand-off is LOCK-FREE (an atomic head and
 * tail on separate cache lines, acquire/release, no mutex); a producer that
 * finds the ring full and a consumer that finds it empty spin a little and
 * then call sched_yield().  The rings are created before the clock starts.
 *
 * A producer mallocs a block of a random size in [16, 1024] bytes, stamps it
 * (size and tag at the start, the tag's low byte at the end) and pushes it;
 * a consumer pops it, checks the stamp and frees it, so every free is a
 * free of a block another thread allocated.  After SECONDS the main thread
 * raises a stop flag; producers push a NULL to say they are done and
 * consumers drain their ring.  ops counts mallocs + frees:
 *   ops_per_s = ops / elapsed   (elapsed: start to the last consumer done).
 *
 * Output (one line):
 *   xmalloc threads=T producers=P scale=S seconds=D ring=R ops=N elapsed=E
 *     ops_per_s=X errors=0 allocator=A version=V malloc_from=P
 * Exit status 1 when a stamp did not match. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <stdatomic.h>

#include "benchutil.h"
#include "whichalloc.h"

#define MIN_SIZE 16
#define MAX_SIZE 1024

struct ring {
    _Alignas(64) atomic_size_t head; /* next slot the consumer reads */
    _Alignas(64) atomic_size_t tail; /* next slot the producer writes */
    _Alignas(64) size_t mask;
    void **items;
};

struct pair {
    struct ring ring;
    uint64_t rng;
    uint64_t allocs, frees, errors;
    double end;
    char pad[64];
};

static struct bu_opts opt;
static atomic_int stop_flag;

static void backoff(unsigned *spins) {
    if (++*spins < 64) return;
    *spins = 0;
    sched_yield();
}

static void *producer(void *arg) {
    struct pair *pr = arg;
    struct ring *q = &pr->ring;
    uint64_t rng = pr->rng, allocs = 0;
    size_t tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
    const size_t cap = q->mask + 1;
    int done = 0;
    while (!done) {
        void *p;
        if (atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
            p = NULL;
            done = 1;
        } else {
            uint64_t r = xorshift64(&rng);
            size_t size = MIN_SIZE + below((uint32_t)r, MAX_SIZE - MIN_SIZE + 1);
            p = malloc(size);
            bu_stamp(p, size, r);
            allocs++;
        }
        unsigned spins = 0;
        while (tail - atomic_load_explicit(&q->head, memory_order_acquire) >= cap)
            backoff(&spins);
        q->items[tail & q->mask] = p;
        atomic_store_explicit(&q->tail, ++tail, memory_order_release);
    }
    pr->allocs = allocs;
    return NULL;
}

static void *consumer(void *arg) {
    struct pair *pr = arg;
    struct ring *q = &pr->ring;
    uint64_t frees = 0, errors = 0;
    size_t head = atomic_load_explicit(&q->head, memory_order_relaxed);
    for (;;) {
        unsigned spins = 0;
        while (atomic_load_explicit(&q->tail, memory_order_acquire) == head)
            backoff(&spins);
        void *p = q->items[head & q->mask];
        atomic_store_explicit(&q->head, ++head, memory_order_release);
        if (!p) break;
        if (!bu_check_self(p, MAX_SIZE)) errors++;
        free(p);
        frees++;
    }
    pr->frees = frees;
    pr->errors = errors;
    pr->end = bu_now();
    return NULL;
}

int main(int argc, char **argv) {
    bu_prog = "xmalloc";
    bu_parse(argc, argv, &opt, "-");
    unsigned npairs = opt.threads / 2 ? opt.threads / 2 : 1;
    size_t cap = 1;
    while (cap < (size_t)(1024 * opt.scale))
        cap <<= 1;
    /* the rings' counters sit on their own cache lines: allocate aligned */
    struct pair *pairs = aligned_alloc(64, npairs * sizeof *pairs);
    if (!pairs) bu_die("aligned_alloc", ENOMEM);
    memset(pairs, 0, npairs * sizeof *pairs);
    pthread_t *tids = bu_xcalloc(2 * npairs, sizeof *tids);
    for (unsigned i = 0; i < npairs; i++) {
        pairs[i].ring.mask = cap - 1;
        pairs[i].ring.items = bu_xcalloc(cap, sizeof(void *));
        pairs[i].rng = bu_seed(opt.seed, i);
    }

    double t0 = bu_now();
    for (unsigned i = 0; i < npairs; i++) {
        tids[2 * i] = bu_start(consumer, &pairs[i]);
        tids[2 * i + 1] = bu_start(producer, &pairs[i]);
    }
    bu_sleep(opt.seconds);
    atomic_store(&stop_flag, 1);
    for (unsigned i = 0; i < 2 * npairs; i++)
        bu_join(tids[i]);

    double end = t0;
    uint64_t ops = 0, errors = 0, lost = 0;
    for (unsigned i = 0; i < npairs; i++) {
        if (pairs[i].end > end) end = pairs[i].end;
        ops += pairs[i].allocs + pairs[i].frees;
        errors += pairs[i].errors;
        if (pairs[i].allocs != pairs[i].frees) lost++;
        free(pairs[i].ring.items);
    }
    double elapsed = end - t0;
    printf("xmalloc threads=%u producers=%u scale=%g seconds=%g ring=%zu ops=%llu elapsed=%.6f"
           " ops_per_s=%.0f errors=%llu",
           opt.threads, npairs, opt.scale, opt.seconds, cap, (unsigned long long)ops, elapsed,
           (double)ops / elapsed, (unsigned long long)(errors + lost));
    wa_print(stdout);
    putchar('\n');
    free(pairs);
    free(tids);
    return errors + lost ? 1 : 0;
}
