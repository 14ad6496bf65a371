/* churn.c - small-block churn: fixed sizes, or Pareto-distributed sizes.
 *
 *   churn [-m fixed|pareto|control] [-z SIZES] [-t THREADS] [-s SCALE]
 *         [-d SECONDS] [-S SEED]
 *
 * Each thread owns 1000*SCALE slots, filled before the clock starts.  A step
 * picks a random slot, frees its block, mallocs a new one and writes its
 * first byte.  All frees are local (the thread that frees allocated the
 * block).  Threads run until the main thread raises a stop flag after
 * SECONDS (read every 256 steps).
 *
 *   fixed    sizes from -z, a comma-separated list (default 64): one size
 *            per run (-z 16), or several (-z 16,64,256,1024), used in turn
 *            step after step.
 *   pareto   sizes drawn from a Pareto distribution, P(size > s) =
 *            (16 / s)^1.5 for s >= 16, capped at 64 KiB: most blocks are
 *            small, a few are large (median 25 B, mean about 47 B; 1 in
 *            1000 is above 1600 B).  A table of 65536 draws is made before
 *            the clock starts; a step picks an entry at random.
 *   control  the fixed loop with no allocator call: a step writes one byte
 *            into the block already in the slot.  Its figure moves only when
 *            the machine does.
 *
 *   ops_per_s = (mallocs + frees) / elapsed, all threads (control: 2 per step).
 * Output (one line):
 *   churn mode=M sizes=Z threads=T slots=K seconds=D ops=N elapsed=E
 *     ops_per_s=X allocator=A version=V malloc_from=P */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdatomic.h>

#include "benchutil.h"
#include "whichalloc.h"

#define TABLE 65536 /* size table entries, a power of two */
#define PARETO_MIN 16.0
#define PARETO_CAP 65536.0
#define BATCH 256

struct worker {
    unsigned char **slots;
    uint64_t rng;
    uint64_t ops;
    double end;
    char pad[64];
};

static struct bu_opts opt;
static size_t nslots;
static size_t table[TABLE];
static int control;
static atomic_int stop_flag;

__attribute__((noinline)) static void *worker_main(void *arg) {
    struct worker *w = arg;
    uint64_t rng = w->rng, steps = 0;
    unsigned char **slots = w->slots;
    while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
        if (control) {
            for (unsigned i = 0; i < BATCH; i++) {
                uint64_t r = xorshift64(&rng);
                size_t k = below((uint32_t)(r >> 32), nslots);
                *(volatile unsigned char *)slots[k] = (unsigned char)table[r & (TABLE - 1)];
            }
        } else {
            for (unsigned i = 0; i < BATCH; i++) {
                uint64_t r = xorshift64(&rng);
                size_t k = below((uint32_t)(r >> 32), nslots);
                free(slots[k]);
                unsigned char *p = malloc(table[r & (TABLE - 1)]);
                *(volatile unsigned char *)p = (unsigned char)r;
                slots[k] = p;
            }
        }
        steps += BATCH;
    }
    w->ops = 2 * steps;
    w->end = bu_now();
    return NULL;
}

/* y with y^3 == c (c >= 1), by bisection: no libm needed. */
static double cube_root(double c) {
    double lo = 1.0, hi = c > 1.0 ? c : 1.0;
    for (int i = 0; i < 200; i++) {
        double mid = 0.5 * (lo + hi);
        if (mid * mid * mid < c)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

int main(int argc, char **argv) {
    bu_prog = "churn";
    bu_usage_text = "[-m fixed|pareto|control] [-z SIZES]";
    bu_parse(argc, argv, &opt, "fixed");
    int pareto = strcmp(opt.mode, "pareto") == 0;
    control = strcmp(opt.mode, "control") == 0;
    if (!pareto && !control && strcmp(opt.mode, "fixed") != 0) bu_usage();
    const char *sizes_text = pareto ? "pareto" : (opt.sizes ? opt.sizes : "64");
    if (pareto) {
        /* inverse CDF: size = 16 * u^(-1/1.5) = 16 * cbrt(1/u^2), u in (0, 1] */
        uint64_t rng = bu_seed(opt.seed, 7777);
        for (size_t i = 0; i < TABLE; i++) {
            double u = ((double)(xorshift64(&rng) >> 11) + 1.0) / 9007199254740992.0;
            double s = PARETO_MIN * cube_root(1.0 / (u * u));
            table[i] = s > PARETO_CAP ? (size_t)PARETO_CAP : (size_t)s;
        }
    } else {
        size_t list[64];
        size_t n = bu_parse_sizes(sizes_text, list, 64);
        for (size_t i = 0; i < TABLE; i++)
            table[i] = list[i % n];
    }
    nslots = (size_t)(1000 * opt.scale) + 1;
    struct worker *ws = bu_xcalloc(opt.threads, sizeof *ws);
    pthread_t *tids = bu_xcalloc(opt.threads, sizeof *tids);
    for (unsigned t = 0; t < opt.threads; t++) {
        ws[t].rng = bu_seed(opt.seed, t);
        ws[t].slots = bu_xcalloc(nslots, sizeof(unsigned char *));
        for (size_t k = 0; k < nslots; k++) {
            ws[t].slots[k] = bu_xmalloc(table[xorshift64(&ws[t].rng) & (TABLE - 1)]);
            ws[t].slots[k][0] = 1;
        }
    }

    double t0 = bu_now();
    for (unsigned t = 0; t < opt.threads; t++)
        tids[t] = bu_start(worker_main, &ws[t]);
    bu_sleep(opt.seconds);
    atomic_store(&stop_flag, 1);
    for (unsigned t = 0; t < opt.threads; t++)
        bu_join(tids[t]);

    double end = t0;
    uint64_t ops = 0;
    for (unsigned t = 0; t < opt.threads; t++) {
        ops += ws[t].ops;
        if (ws[t].end > end) end = ws[t].end;
    }
    double elapsed = end - t0;
    printf("churn mode=%s sizes=%s threads=%u slots=%zu seconds=%g ops=%llu elapsed=%.6f"
           " ops_per_s=%.0f",
           opt.mode, sizes_text, opt.threads, nslots, opt.seconds, (unsigned long long)ops,
           elapsed, (double)ops / elapsed);
    wa_print(stdout);
    putchar('\n');
    for (unsigned t = 0; t < opt.threads; t++) {
        for (size_t k = 0; k < nslots; k++)
            free(ws[t].slots[k]);
        free(ws[t].slots);
    }
    free(ws);
    free(tids);
    return 0;
}
