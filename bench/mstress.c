/* mstress.c - objects migrate between threads; threads are recreated every
 * phase (after the idea of mimalloc-bench's mstress, written anew here).
 *
 *   mstress [-t THREADS] [-s SCALE] [-d SECONDS] [-S SEED] [-m small|mixed]
 *
 * The heap: THREADS segments of 2000*SCALE slots, filled by the main thread
 * before the clock starts, plus a shared transfer array of 64*THREADS slots
 * (atomic pointers, empty at the start).
 *
 * A phase starts THREADS new threads and joins them.  Thread i of phase p
 * works on segment (i + p) % THREADS, so every block it frees there was
 * allocated by a thread of an earlier phase, usually another lane's and
 * always a thread that has exited.  It does 20000*SCALE steps: pick a random
 * slot, check and free its block, malloc a block of a random size in
 * [16, 2048] bytes and stamp it.  Every 8th step it also mallocs a block,
 * stamps it and swaps it into a random transfer slot; the block it gets back
 * (allocated by any thread, maybe one still running) is checked and freed.
 * With -m mixed, sizes are mixed as in a program that also handles bigger
 * buffers: one block in 100 is 16x bigger (up to 32 KiB, medium classes)
 * and one in 2000 is 128 KiB to 4 MiB (large spans), so pages and spans are
 * freed and needed again all through the run (the default, small, keeps
 * every block in [16, 2048]).
 *
 * Phases repeat until SECONDS have passed (checked by the main thread between
 * phases), and the figure is
 *   ops_per_s = (mallocs + frees) / elapsed.
 *
 * Verification: every block is stamped (its size and a tag at the start, the
 * tag's low byte at its end) and checked before it is freed; a mismatch
 * counts as an error.  Output (one line):
 *   mstress threads=T scale=S seconds=D phases=P ops=N elapsed=E ops_per_s=X
 *     errors=0 allocator=A version=V malloc_from=P
 * Exit status 1 when errors > 0. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdatomic.h>

#include "benchutil.h"
#include "whichalloc.h"

#define MIN_SIZE 16
#define SMALL_MAX 2048
#define MAX_SIZE ((size_t)4 << 20) /* -m mixed: the biggest block */

static struct bu_opts opt;
static int mixed;
static size_t seg_slots, steps, nxfer;

/* A block size from 32 random bits (see -m above). */
static size_t pick_size(uint64_t r) {
    size_t small = MIN_SIZE + below((uint32_t)r, SMALL_MAX - MIN_SIZE + 1);
    if (!mixed) return small;
    uint32_t dice = (uint32_t)(r >> 32) % 2000;
    if (dice == 0) return ((size_t)128 << 10) + below((uint32_t)(r * 0x9e3779b97f4a7c15ull), MAX_SIZE - (128 << 10));
    if (dice < 20) return small * 16;
    return small;
}
static unsigned char **slots;
static _Atomic(unsigned char *) *xfer;

static void *phase_main(void *arg) {
    struct bu_gen_worker *w = arg;
    uint64_t rng = w->rng, ops = 0, errors = 0;
    unsigned char **seg = slots + ((w->index + w->round) % opt.threads) * seg_slots;
    for (size_t i = 0; i < steps; i++) {
        uint64_t r = xorshift64(&rng);
        size_t k = below((uint32_t)(r >> 32), seg_slots);
        unsigned char *old = seg[k];
        if (!bu_check_self(old, MAX_SIZE)) errors++;
        free(old);
        size_t size = pick_size(r);
        unsigned char *p = malloc(size);
        bu_stamp(p, size, r);
        seg[k] = p;
        ops += 2;
        if ((i & 7) == 0) {
            uint64_t r2 = xorshift64(&rng);
            size_t s2 = pick_size(r2);
            unsigned char *q = malloc(s2);
            bu_stamp(q, s2, r2);
            unsigned char *got = atomic_exchange_explicit(&xfer[below((uint32_t)(r2 >> 32), nxfer)],
                                                          q, memory_order_acq_rel);
            ops++;
            if (got) {
                if (!bu_check_self(got, MAX_SIZE)) errors++;
                free(got);
                ops++;
            }
        }
    }
    w->rng = rng;
    w->ops += ops;
    w->errors += errors;
    return NULL;
}

int main(int argc, char **argv) {
    bu_prog = "mstress";
    bu_usage_text = "[-m small|mixed]";
    bu_parse(argc, argv, &opt, "small");
    mixed = strcmp(opt.mode, "mixed") == 0;
    if (!mixed && strcmp(opt.mode, "small") != 0) bu_usage();
    seg_slots = (size_t)(2000 * opt.scale) + 1;
    steps = (size_t)(20000 * opt.scale) + 1;
    nxfer = 64 * (size_t)opt.threads;
    slots = bu_xcalloc(seg_slots * opt.threads, sizeof *slots);
    xfer = bu_xcalloc(nxfer, sizeof *xfer);
    struct bu_gen_worker *ws = bu_xcalloc(opt.threads, sizeof *ws);
    uint64_t rng = bu_seed(opt.seed, 999);
    for (size_t k = 0; k < seg_slots * opt.threads; k++) {
        uint64_t r = xorshift64(&rng);
        size_t size = pick_size(r);
        slots[k] = bu_xmalloc(size);
        bu_stamp(slots[k], size, r);
    }
    double elapsed;
    uint64_t ops, errors;
    uint64_t phases = bu_generations(ws, opt.threads, opt.seed, opt.seconds, phase_main, &elapsed, &ops,
                                     &errors);
    errors += bu_free_stamped(slots, seg_slots * opt.threads, MAX_SIZE);
    for (size_t k = 0; k < nxfer; k++) {
        unsigned char *p = atomic_load(&xfer[k]);
        if (p && !bu_check_self(p, MAX_SIZE)) errors++;
        free(p);
    }
    printf("mstress mode=%s threads=%u scale=%g seconds=%g phases=%llu ops=%llu elapsed=%.6f ops_per_s=%.0f"
           " errors=%llu",
           opt.mode, opt.threads, opt.scale, opt.seconds, (unsigned long long)phases,
           (unsigned long long)ops, elapsed, (double)ops / elapsed, (unsigned long long)errors);
    wa_print(stdout);
    putchar('\n');
    free(slots);
    free(xfer);
    free(ws);
    return errors ? 1 : 0;
}
