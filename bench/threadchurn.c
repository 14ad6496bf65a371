/* threadchurn.c - thread churn: many short-lived threads, whose blocks
 * outlive them and are freed by later threads.
 *
 *   threadchurn [-t THREADS] [-s SCALE] [-d SECONDS] [-S SEED]
 *
 * A pool of 4096*SCALE slots, split into THREADS parts, is filled by the
 * main thread before the clock starts.  A generation starts THREADS threads
 * and joins them; thread i of generation g works on part (i + g) % THREADS,
 * so the blocks it frees were allocated by threads that have exited.  Each
 * thread does 500*SCALE steps: pick a random slot of its part, check the
 * block's stamp, free it, malloc a block of a random size in [16, 4096]
 * bytes and stamp it (its size and a tag at the start, the tag's low byte at
 * the end); then it exits, leaving its blocks behind.  A thread lives for
 * tens of microseconds, so thread start, exit and whatever the allocator
 * does for them (per-thread heaps, caches, their hand-over) are a large part
 * of the figure.  Generations repeat until SECONDS have passed (checked by
 * the main thread between generations).
 *
 *   ops_per_s = (mallocs + frees) / elapsed
 * Output (one line):
 *   threadchurn threads=T scale=S seconds=D generations=G thread_starts=N
 *     ops=N elapsed=E ops_per_s=X errors=0 allocator=A version=V malloc_from=P
 * Exit status 1 when a stamp did not match. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "benchutil.h"
#include "whichalloc.h"

#define MIN_SIZE 16
#define MAX_SIZE 4096

static struct bu_opts opt;
static size_t part_slots, steps;
static unsigned char **pool;

static void *gen_main(void *arg) {
    struct bu_gen_worker *w = arg;
    uint64_t rng = w->rng, errors = 0;
    unsigned char **part = pool + ((w->index + w->round) % opt.threads) * part_slots;
    for (size_t i = 0; i < steps; i++) {
        uint64_t r = xorshift64(&rng);
        size_t k = below((uint32_t)(r >> 32), part_slots);
        if (!bu_check_self(part[k], MAX_SIZE)) errors++;
        free(part[k]);
        size_t size = MIN_SIZE + below((uint32_t)r, MAX_SIZE - MIN_SIZE + 1);
        unsigned char *p = malloc(size);
        bu_stamp(p, size, r);
        part[k] = p;
    }
    w->rng = rng;
    w->ops += 2 * steps;
    w->errors += errors;
    return NULL;
}

int main(int argc, char **argv) {
    bu_prog = "threadchurn";
    bu_parse(argc, argv, &opt, "-");
    part_slots = (size_t)(4096 * opt.scale) / opt.threads + 1;
    steps = (size_t)(500 * opt.scale) + 1;
    size_t total = part_slots * opt.threads;
    pool = bu_xcalloc(total, sizeof *pool);
    uint64_t rng = bu_seed(opt.seed, 4242);
    for (size_t k = 0; k < total; k++) {
        uint64_t r = xorshift64(&rng);
        size_t size = MIN_SIZE + below((uint32_t)r, MAX_SIZE - MIN_SIZE + 1);
        pool[k] = bu_xmalloc(size);
        bu_stamp(pool[k], size, r);
    }
    struct bu_gen_worker *ws = bu_xcalloc(opt.threads, sizeof *ws);
    double elapsed;
    uint64_t ops, errors;
    uint64_t gens = bu_generations(ws, opt.threads, opt.seed, opt.seconds, gen_main, &elapsed, &ops,
                                   &errors);
    errors += bu_free_stamped(pool, total, MAX_SIZE);
    printf("threadchurn threads=%u scale=%g seconds=%g generations=%llu thread_starts=%llu ops=%llu"
           " elapsed=%.6f ops_per_s=%.0f errors=%llu",
           opt.threads, opt.scale, opt.seconds, (unsigned long long)gens,
           (unsigned long long)(gens * opt.threads), (unsigned long long)ops, elapsed,
           (double)ops / elapsed, (unsigned long long)errors);
    wa_print(stdout);
    putchar('\n');
    free(pool);
    free(ws);
    return errors ? 1 : 0;
}
