/* frag.c - fragmentation: a large working set freed down to a sparse
 * remainder, then a phase of different sizes; reports RSS.
 *
 *   frag [-t THREADS] [-s SCALE] [-d SECONDS] [-S SEED]
 *
 * Each of THREADS threads (default 1 here would be a special case; the
 * default 2 runs two independent instances) goes through four phases; the
 * main thread waits at a barrier after each one, reads the process's RSS from
 * /proc/self/statm with the clock stopped, and lets the threads go on:
 *
 *   fill    malloc 200000*SCALE blocks of random sizes in [16, 256] bytes,
 *           writing their first byte (about 27 MB * SCALE per thread).
 *   thin    free all of them but every 16th: a sparse remainder (1/16 of
 *           the blocks) spread over all the memory the fill used.
 *   refill  malloc blocks of random sizes in [512, 4096] bytes (sizes the
 *           small holes cannot serve) until they total half the fill's bytes.
 *   churn   for SECONDS: replace a random refill block by a new one of a
 *           random size in [512, 4096] (stop flag read every 256 steps).
 *
 * An allocator that can give back or reuse the thinned memory keeps RSS
 * near (remainder + refill); one that cannot keeps the fill's pages and adds
 * the refill's.  Figures: RSS (resident set size of the whole process, KiB,
 * statm's resident pages; RSS, not heap) after each phase, their maximum
 * (rss_peak_kib, a peak over the four samples), the kernel's high-water mark
 * VmHWM from /proc/self/status (rss_hwm_kib: the true peak RSS, start-up
 * included), and rss_final_kib after churn with the remainder and the refill
 * still live.  The time figure covers the four phases, not the RSS reads:
 *   ops_per_s = (mallocs + frees) / elapsed.
 * Output (one line):
 *   frag threads=T scale=S seconds=D blocks=N ops=N elapsed=E ops_per_s=X
 *     rss_fill_kib=A rss_thin_kib=B rss_refill_kib=C rss_final_kib=D
 *     rss_peak_kib=P rss_hwm_kib=H errors=0 allocator=... */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdatomic.h>

#include "benchutil.h"
#include "whichalloc.h"

#define SMALL_MIN 16
#define SMALL_MAX 256
#define BIG_MIN 512
#define BIG_MAX 4096
#define KEEP_EVERY 16

struct worker {
    unsigned index;
    uint64_t rng;
    unsigned char **small;
    unsigned char **big;
    size_t nbig;
    uint64_t ops, errors;
    char pad[64];
};

static struct bu_opts opt;
static size_t nsmall;
static pthread_barrier_t barrier;
static atomic_int stop_flag;

static void phase_end(void) {
    /* twice: the main thread measures between the two */
    pthread_barrier_wait(&barrier);
    pthread_barrier_wait(&barrier);
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    uint64_t rng = w->rng, ops = 0, errors = 0, bytes = 0;
    unsigned char **small = w->small;
    /* fill */
    for (size_t i = 0; i < nsmall; i++) {
        size_t size = SMALL_MIN + below((uint32_t)xorshift64(&rng), SMALL_MAX - SMALL_MIN + 1);
        small[i] = malloc(size);
        small[i][0] = (unsigned char)i;
        bytes += size;
    }
    ops += nsmall;
    phase_end();
    /* thin */
    for (size_t i = 0; i < nsmall; i++)
        if (i % KEEP_EVERY) {
            free(small[i]);
            small[i] = NULL;
        }
    ops += nsmall - (nsmall + KEEP_EVERY - 1) / KEEP_EVERY;
    phase_end();
    /* refill */
    size_t nbig = 0, cap = bytes / 2 / BIG_MIN + 1;
    unsigned char **big = w->big = bu_xcalloc(cap, sizeof *big);
    for (uint64_t got = 0; got < bytes / 2 && nbig < cap;) {
        size_t size = BIG_MIN + below((uint32_t)xorshift64(&rng), BIG_MAX - BIG_MIN + 1);
        big[nbig] = malloc(size);
        big[nbig][0] = (unsigned char)nbig;
        nbig++;
        got += size;
    }
    ops += nbig;
    w->nbig = nbig;
    phase_end();
    /* churn */
    while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
        for (unsigned i = 0; i < 256; i++) {
            uint64_t r = xorshift64(&rng);
            size_t k = below((uint32_t)(r >> 32), nbig);
            free(big[k]);
            big[k] = malloc(BIG_MIN + below((uint32_t)r, BIG_MAX - BIG_MIN + 1));
            big[k][0] = (unsigned char)r;
        }
        ops += 512;
    }
    phase_end();
    /* the remainder still holds what fill wrote (checked after the clock) */
    w->rng = rng;
    w->ops = ops;
    w->errors = errors;
    return NULL;
}

int main(int argc, char **argv) {
    bu_prog = "frag";
    bu_parse(argc, argv, &opt, "-");
    nsmall = (size_t)(200000 * opt.scale) + KEEP_EVERY;
    int err = pthread_barrier_init(&barrier, NULL, opt.threads + 1);
    if (err) bu_die("pthread_barrier_init", err);
    struct worker *ws = bu_xcalloc(opt.threads, sizeof *ws);
    pthread_t *tids = bu_xcalloc(opt.threads, sizeof *tids);
    for (unsigned i = 0; i < opt.threads; i++) {
        ws[i].index = i;
        ws[i].rng = bu_seed(opt.seed, i);
        ws[i].small = bu_xcalloc(nsmall, sizeof(unsigned char *));
    }
    long rss[4];
    double elapsed = 0;

    double t0 = bu_now();
    for (unsigned i = 0; i < opt.threads; i++)
        tids[i] = bu_start(worker_main, &ws[i]);
    for (int phase = 0; phase < 4; phase++) {
        if (phase == 3) {
            bu_sleep(opt.seconds);
            atomic_store(&stop_flag, 1);
        }
        pthread_barrier_wait(&barrier);
        elapsed += bu_now() - t0;
        rss[phase] = bu_rss_kib();
        t0 = bu_now();
        pthread_barrier_wait(&barrier);
    }
    for (unsigned i = 0; i < opt.threads; i++)
        bu_join(tids[i]);
    long hwm = bu_hwm_kib();

    uint64_t ops = 0, errors = 0;
    long peak = -1;
    for (int phase = 0; phase < 4; phase++)
        if (rss[phase] > peak) peak = rss[phase];
    for (unsigned i = 0; i < opt.threads; i++) {
        struct worker *w = &ws[i];
        ops += w->ops;
        errors += w->errors;
        for (size_t k = 0; k < nsmall; k += KEEP_EVERY) {
            if (w->small[k][0] != (unsigned char)k) errors++;
            free(w->small[k]);
        }
        for (size_t k = 0; k < w->nbig; k++)
            free(w->big[k]);
        free(w->small);
        free(w->big);
    }
    printf("frag threads=%u scale=%g seconds=%g blocks=%zu ops=%llu elapsed=%.6f ops_per_s=%.0f"
           " rss_fill_kib=%ld rss_thin_kib=%ld rss_refill_kib=%ld rss_final_kib=%ld"
           " rss_peak_kib=%ld rss_hwm_kib=%ld errors=%llu",
           opt.threads, opt.scale, opt.seconds, nsmall, (unsigned long long)ops, elapsed,
           (double)ops / elapsed, rss[0], rss[1], rss[2], rss[3], peak, hwm,
           (unsigned long long)errors);
    wa_print(stdout);
    putchar('\n');
    free(ws);
    free(tids);
    pthread_barrier_destroy(&barrier);
    return errors ? 1 : 0;
}
