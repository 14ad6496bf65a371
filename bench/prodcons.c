/* prodcons.c - one thread allocates, the others free: blocks handed over in
 * batches (the pattern of the xmalloc-test workload; written anew here).
 *
 *   prodcons [-t THREADS] [-s SCALE] [-d SECONDS] [-S SEED] [-z MAX_SIZE]
 *
 * Thread 0 is the producer: it mallocs blocks of random sizes in
 * [16, MAX_SIZE] bytes (default 128), stamps each, and hands them over in
 * batches of 256*SCALE blocks through one bounded queue of 64 batches
 * (a mutex and two condition variables: one lock round trip per batch, not
 * per block).  Threads 1 .. THREADS-1 are consumers: each takes a batch,
 * checks every stamp and frees every block.  Every free is a free of a
 * block another thread allocated, into the producer's heap, while the
 * producer keeps allocating from it.  After SECONDS the main thread raises
 * a stop flag; the producer queues one empty batch per consumer and the
 * consumers finish what is queued.
 *
 *   ops_per_s = (mallocs + frees) / elapsed
 * (elapsed: from the start to the last consumer done).  The batch arrays
 * are allocated before the clock starts and reused.
 *
 * Output (one line):
 *   prodcons threads=T scale=S seconds=D max_size=M batch=B ops=N elapsed=E
 *     ops_per_s=X errors=0 allocator=A version=V malloc_from=P
 * Exit status 1 when a stamp did not match or a block went missing. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdatomic.h>

#include "benchutil.h"
#include "whichalloc.h"

#define MIN_SIZE 16
#define QUEUE 64 /* batches in flight at most */

struct batch {
    size_t n;
    void **blocks;
};

static struct bu_opts opt;
static size_t max_size = 128, batch_len;
static atomic_int stop_flag;

/* The queue of full batches and the pool of empty ones: QUEUE batches in
 * all, made before the clock, so the producer waits when QUEUE batches are
 * queued or being freed. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t full_cv, empty_cv;
    struct batch *full[QUEUE + 1], **empty;
    size_t nfull, nempty, head;
} q = {.lock = PTHREAD_MUTEX_INITIALIZER, .full_cv = PTHREAD_COND_INITIALIZER, .empty_cv = PTHREAD_COND_INITIALIZER};

static struct batch *take_empty(void) {
    pthread_mutex_lock(&q.lock);
    while (q.nempty == 0) pthread_cond_wait(&q.empty_cv, &q.lock);
    struct batch *b = q.empty[--q.nempty];
    pthread_mutex_unlock(&q.lock);
    return b;
}

static void put_full(struct batch *b) {
    pthread_mutex_lock(&q.lock);
    q.full[(q.head + q.nfull++) % (QUEUE + 1)] = b;
    pthread_cond_signal(&q.full_cv);
    pthread_mutex_unlock(&q.lock);
}

static struct batch *take_full(void) {
    pthread_mutex_lock(&q.lock);
    while (q.nfull == 0) pthread_cond_wait(&q.full_cv, &q.lock);
    struct batch *b = q.full[q.head];
    q.head = (q.head + 1) % (QUEUE + 1);
    q.nfull--;
    pthread_mutex_unlock(&q.lock);
    return b;
}

static void put_empty(struct batch *b) {
    pthread_mutex_lock(&q.lock);
    q.empty[q.nempty++] = b;
    pthread_cond_signal(&q.empty_cv);
    pthread_mutex_unlock(&q.lock);
}

struct worker {
    uint64_t rng, allocs, frees, errors;
    double end;
    char pad[64];
};
static struct worker *workers;

static void *producer(void *arg) {
    struct worker *w = arg;
    uint64_t rng = w->rng, allocs = 0;
    while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
        struct batch *b = take_empty();
        for (size_t i = 0; i < batch_len; i++) {
            uint64_t r = xorshift64(&rng);
            size_t size = MIN_SIZE + below((uint32_t)r, max_size - MIN_SIZE + 1);
            void *p = malloc(size);
            bu_stamp(p, size, r);
            b->blocks[i] = p;
        }
        b->n = batch_len;
        allocs += batch_len;
        put_full(b);
    }
    for (unsigned c = 1; c < opt.threads; c++) { /* one "done" per consumer */
        struct batch *b = take_empty();
        b->n = 0;
        put_full(b);
    }
    w->allocs = allocs;
    return NULL;
}

static void *consumer(void *arg) {
    struct worker *w = arg;
    uint64_t frees = 0, errors = 0;
    for (;;) {
        struct batch *b = take_full();
        size_t n = b->n;
        for (size_t i = 0; i < n; i++) {
            if (!bu_check_self(b->blocks[i], max_size)) errors++;
            free(b->blocks[i]);
        }
        frees += n;
        put_empty(b);
        if (n == 0) break;
    }
    w->frees = frees;
    w->errors = errors;
    w->end = bu_now();
    return NULL;
}

int main(int argc, char **argv) {
    bu_prog = "prodcons";
    bu_usage_text = "[-z MAX_SIZE]";
    bu_parse(argc, argv, &opt, "-");
    if (opt.threads < 2) opt.threads = 2;
    if (opt.sizes != NULL) {
        char *end;
        max_size = strtoull(opt.sizes, &end, 0);
        if (*end || max_size < MIN_SIZE) bu_usage();
    }
    batch_len = (size_t)(256 * opt.scale) + 1;
    q.empty = bu_xcalloc(QUEUE, sizeof *q.empty);
    for (size_t i = 0; i < QUEUE; i++) {
        struct batch *b = bu_xcalloc(1, sizeof *b);
        b->blocks = bu_xcalloc(batch_len, sizeof *b->blocks);
        q.empty[q.nempty++] = b;
    }
    workers = bu_xcalloc(opt.threads, sizeof *workers);
    pthread_t *tids = bu_xcalloc(opt.threads, sizeof *tids);
    workers[0].rng = bu_seed(opt.seed, 0);

    double t0 = bu_now();
    for (unsigned i = 1; i < opt.threads; i++) tids[i] = bu_start(consumer, &workers[i]);
    tids[0] = bu_start(producer, &workers[0]);
    bu_sleep(opt.seconds);
    atomic_store(&stop_flag, 1);
    for (unsigned i = 0; i < opt.threads; i++) bu_join(tids[i]);

    double end = t0;
    uint64_t frees = 0, errors = 0;
    for (unsigned i = 1; i < opt.threads; i++) {
        if (workers[i].end > end) end = workers[i].end;
        frees += workers[i].frees;
        errors += workers[i].errors;
    }
    uint64_t allocs = workers[0].allocs, lost = allocs != frees;
    double elapsed = end - t0;
    printf("prodcons threads=%u scale=%g seconds=%g max_size=%zu batch=%zu ops=%llu elapsed=%.6f"
           " ops_per_s=%.0f errors=%llu",
           opt.threads, opt.scale, opt.seconds, max_size, batch_len, (unsigned long long)(allocs + frees),
           elapsed, (double)(allocs + frees) / elapsed, (unsigned long long)(errors + lost));
    wa_print(stdout);
    putchar('\n');
    for (size_t i = 0; i < q.nempty; i++) { /* every batch is back */
        free(q.empty[i]->blocks);
        free(q.empty[i]);
    }
    free(q.empty);
    free(workers);
    free(tids);
    return errors + lost ? 1 : 0;
}
